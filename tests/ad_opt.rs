//! `kiln::opt::{Sgd, Adam}`: updates against the formulas computed here in f64, parameter sets of
//! several types, in-place updates, fresh leaves after a step, bad input.
use kiln::opt::{Adam, Sgd};
use kiln::prelude::*;

fn close(got: &[f64], want: &[f64], tol: f64) {
    assert_eq!(got.len(), want.len());
    for (x, y) in got.iter().zip(want) {
        assert!(
            (x - y).abs() <= tol * (1.0 + y.abs()),
            "{got:?} vs {want:?}"
        );
    }
}

/// f(p) = Σ (p − c)³/3 + p²: gradient (p − c)² + 2p.
fn loss(p: &Float64, c: &[f64]) -> Float64 {
    let d = p - Float64::from_slice(c);
    (&d * &d * &d / 3.0 + p * p).sum()
}
fn grad_ref(p: &[f64], c: &[f64]) -> Vec<f64> {
    p.iter()
        .zip(c)
        .map(|(p, c)| (p - c) * (p - c) + 2.0 * p)
        .collect()
}

#[test]
fn sgd_with_momentum_follows_the_formula() {
    let c = [0.5, -1.0, 2.0];
    let mut p = Float64::from_slice(&[1.0, 0.25, -0.5]);
    p.enable_grad();
    let mut opt = Sgd::new(0.05).momentum(0.8);
    let (mut rp, mut rb) = (p.to_vec(), vec![0.0; 3]);
    for _ in 0..6 {
        loss(&p, &c).backward();
        opt.step(&mut p);
        let g = grad_ref(&rp, &c);
        for i in 0..3 {
            rb[i] = 0.8 * rb[i] + g[i];
            rp[i] -= 0.05 * rb[i];
        }
        close(&p.to_vec(), &rp, 1e-13);
        assert!(p.grad_enabled());
        assert_eq!(p.grad().to_vec(), vec![0.0; 3]); // a fresh leaf
    }
}

#[test]
fn plain_sgd_with_given_gradients() {
    let c = [1.0, 2.0];
    let mut p = Float64::from_slice(&[0.0, 3.0]);
    let mut opt = Sgd::new(0.1);
    let mut rp = p.to_vec();
    for _ in 0..4 {
        let g = kiln::grad(|p: &Float64| loss(p, &c), &p).unwrap();
        opt.step_with(&mut p, &g);
        let gr = grad_ref(&rp, &c);
        for i in 0..2 {
            rp[i] -= 0.1 * gr[i];
        }
        close(&p.to_vec(), &rp, 1e-13);
        assert!(!p.grad_enabled()); // it carried none, it carries none
    }
}

#[test]
fn adam_follows_the_formula() {
    let c = [0.5, -1.0];
    let mut p = Float64::from_slice(&[1.0, 0.25]);
    p.enable_grad();
    let (lr, b1, b2, eps) = (0.02, 0.85, 0.99, 1e-6);
    let mut opt = Adam::new(lr).betas(b1, b2).eps(eps);
    let mut rp = p.to_vec();
    let (mut m, mut v) = (vec![0.0; 2], vec![0.0; 2]);
    for t in 1..=8 {
        loss(&p, &c).backward();
        opt.step(&mut p);
        let g = grad_ref(&rp, &c);
        for i in 0..2 {
            m[i] = b1 * m[i] + (1.0 - b1) * g[i];
            v[i] = b2 * v[i] + (1.0 - b2) * g[i] * g[i];
            let mh = m[i] / (1.0 - b1.powi(t));
            let vh = v[i] / (1.0 - b2.powi(t));
            rp[i] -= lr * mh / (vh.sqrt() + eps);
        }
        close(&p.to_vec(), &rp, 1e-12);
    }
}

#[derive(kiln::Traverse, Clone)]
struct Net {
    w: Vec<Float32>,
    b: Float64,
    /// not a parameter: left alone by the optimizer
    steps: UInt32,
}

#[test]
fn adam_over_a_mixed_parameter_set_converges() {
    let mut net = Net {
        w: vec![Float32::from_slice(&[2.0, -3.0]), Float32::from(1.5f32)],
        b: Float64::from(-2.0),
        steps: UInt32::from(7u32),
    };
    let mut opt = Adam::new(0.1);
    let f = |n: &Net| {
        let a = (&n.w[0] * &n.w[0]).sum() + (&n.w[1] - 1.0) * (&n.w[1] - 1.0);
        a.cast::<f64>() + (&n.b - 0.5) * (&n.b - 0.5)
    };
    for _ in 0..300 {
        let g = kiln::grad(f, &net).unwrap();
        opt.step_with(&mut net, &g);
    }
    assert!(
        net.w[0].to_vec().iter().all(|v| v.abs() < 0.05),
        "{:?}",
        net.w[0].to_vec()
    );
    assert!((net.w[1].item() - 1.0).abs() < 0.05);
    assert!((net.b.item() - 0.5).abs() < 0.05);
    assert_eq!(net.steps.item(), 7);
}

#[test]
fn steps_update_in_place() {
    let mut p = Float64::linspace(-1.0, 1.0, 4096);
    p.eval();
    p.enable_grad();
    let mut opt = Adam::new(0.01).init(&p);
    let mut sgd = Sgd::new(0.01).momentum(0.5).init(&p);
    // one step first: the parameter's buffer is then the optimizer's own result
    (&p * &p).sum().backward();
    opt.step(&mut p);
    let addr = p.buffer_addr();
    assert!(addr.is_some());
    for _ in 0..3 {
        (&p * &p).sum().backward();
        opt.step(&mut p);
        assert_eq!(p.buffer_addr(), addr);
        (&p * &p).sum().backward();
        sgd.step(&mut p);
        assert_eq!(p.buffer_addr(), addr);
    }
}

#[test]
fn bad_input() {
    let mut p = (Float64::ones(2), Float64::ones(1));
    let mut opt = Sgd::new(0.1).momentum(0.9);
    let e = opt
        .try_step(&mut p, Some(&(Float64::ones(3), Float64::ones(1))))
        .unwrap_err()
        .to_string();
    assert!(e.contains("3 elements"), "{e}");
    // nothing was taken apart
    assert_eq!(p.0.to_vec(), vec![1.0, 1.0]);
    opt.step_with(&mut p, &(Float64::ones(2), Float64::ones(1)));
    // state made for a pair, used for a single array
    let mut q = Float64::ones(2);
    let e = opt
        .try_step(&mut q, Some(&Float64::ones(2)))
        .unwrap_err()
        .to_string();
    assert!(e.contains("2 arrays") || e.contains("1"), "{e}");
    let mut adam = Adam::new(0.1).init(&p);
    assert!(adam.try_step(&mut q, None).is_err());
}
