//! JAX's face (`kiln::grad`, `value_and_grad`, `vjp`, `jvp`, `hvp`) over tuples, structs,
//! `Vector`s and `Tensor`s, against central finite differences in f64; set-wide helpers; bad
//! input.
use kiln::prelude::*;
use kiln::Traverse;

/// Central finite differences of `f` at `x` (one partial per coordinate).
fn fd_grad(f: &dyn Fn(&[f64]) -> f64, x: &[f64]) -> Vec<f64> {
    (0..x.len())
        .map(|i| {
            let h = 1e-5 * (1.0 + x[i].abs());
            let (mut a, mut b) = (x.to_vec(), x.to_vec());
            a[i] += h;
            b[i] -= h;
            (f(&a) - f(&b)) / (2.0 * h)
        })
        .collect()
}

fn close(got: &[f64], want: &[f64], tol: f64) {
    assert_eq!(got.len(), want.len(), "{got:?} vs {want:?}");
    for (x, y) in got.iter().zip(want) {
        assert!(
            (x - y).abs() <= tol * (1.0 + y.abs()),
            "{got:?} vs {want:?}"
        );
    }
}

fn model(w: &Float64, b: &Float64, x: &Float64) -> Float64 {
    ((w * x + b).tanh() * x.exp() + (w * w + 1.0).sqrt()).sum()
}

#[test]
fn grad_of_a_tuple_matches_finite_differences() {
    let xs = Float64::from_slice(&[-0.4, 0.3, 1.1]);
    let w0 = [0.5, -0.2, 0.9];
    let b0 = [0.1];
    let x2 = xs.clone();
    let f = move |(w, b): &(Float64, Float64)| model(w, b, &x2);
    let args = (Float64::from_slice(&w0), Float64::from_slice(&b0));
    let (gw, gb) = kiln::grad(f, &args).unwrap();
    let x3 = xs.clone();
    let flat = |p: &[f64]| {
        model(
            &Float64::from_slice(&p[..3]),
            &Float64::from_slice(&p[3..]),
            &x3,
        )
        .item()
    };
    let want = fd_grad(&flat, &[w0[0], w0[1], w0[2], b0[0]]);
    let mut got = gw.to_vec();
    got.extend(gb.to_vec());
    close(&got, &want, 1e-7);
    // the caller's arrays are not marked
    assert!(!args.0.grad_enabled() && !args.1.grad_enabled());
}

#[derive(Traverse, Clone)]
struct Layer {
    w: Float64,
    b: Float64,
    /// an integer array: its gradient is zeros
    idx: UInt32,
    /// a plain value: passed through
    scale: f64,
    #[traverse(skip)]
    name: String,
}

#[test]
fn grad_of_a_derived_struct_matches_finite_differences() {
    let x = Float64::from_slice(&[0.2, -0.7, 1.3, 0.05]);
    let layer = Layer {
        w: Float64::from_slice(&[0.3, -0.6, 0.8, 0.1]),
        b: Float64::from(0.25),
        idx: UInt32::from_slice(&[3, 0, 1, 2]),
        scale: 1.5,
        name: "layer".into(),
    };
    let xc = x.clone();
    let f = move |l: &Layer| {
        // an integer array enters through a cast (which carries no gradient)
        ((&l.w * &xc + &l.b).sin() * l.scale).sum() + (&l.w * &l.w * l.idx.cast::<f64>()).sum()
    };
    let g = kiln::grad(f, &layer).unwrap();
    assert_eq!(g.scale, 1.5);
    assert_eq!(g.name, "layer");
    assert_eq!(g.idx.to_vec(), vec![0, 0, 0, 0]);
    let xd = x.to_vec();
    let flat = move |p: &[f64]| {
        let mut s = 0.0;
        for i in 0..4 {
            s += ((p[i] * xd[i] + p[4]).sin()) * 1.5;
        }
        s + 3.0 * p[0] * p[0] + p[2] * p[2] + 2.0 * p[3] * p[3]
    };
    let p0 = [0.3, -0.6, 0.8, 0.1, 0.25];
    let want = fd_grad(&flat, &p0);
    let mut got = g.w.to_vec();
    got.extend(g.b.to_vec());
    close(&got, &want, 1e-7);
}

#[test]
fn grad_of_vectors_and_tensors() {
    // f(v, t) = |v|² · Σ t² + v.x · t[0]
    let v = Vector3d::new(
        Float64::from_slice(&[1.0, 2.0]),
        Float64::from_slice(&[-1.0, 0.5]),
        Float64::from_slice(&[0.3, 0.7]),
    );
    let t = Tensor::<f64>::from_slice(&[0.5, -1.5, 2.0, 0.25], &[2, 2]);
    let f = |(v, t): &(Vector3d, Tensor<f64>)| {
        let n2 = v.dot(v).sum();
        let a = t.array();
        let first = (a * Float64::from_slice(&[1.0, 0.0, 0.0, 0.0])).sum();
        n2 * (a * a).sum() + v[0].sum() * first
    };
    let (gv, gt) = kiln::grad(f, &(v, t)).unwrap();
    assert_eq!(gt.shape(), &[2, 2]);
    let flat = |p: &[f64]| {
        let n2: f64 = p[..6].iter().map(|x| x * x).sum();
        let s2: f64 = p[6..].iter().map(|x| x * x).sum();
        n2 * s2 + (p[0] + p[1]) * p[6]
    };
    let p0 = [1.0, 2.0, -1.0, 0.5, 0.3, 0.7, 0.5, -1.5, 2.0, 0.25];
    let want = fd_grad(&flat, &p0);
    let mut got = Vec::new();
    for c in 0..3 {
        got.extend(gv[c].to_vec());
    }
    got.extend(gt.to_vec());
    close(&got, &want, 1e-7);
}

#[test]
fn value_and_grad_and_mixed_precision() {
    let args = (Float32::from_slice(&[1.0, 2.0]), Float64::from(3.0));
    let (v, (g32, g64)) = kiln::value_and_grad(
        |(a, b): &(Float32, Float64)| (a * a).sum().cast::<f64>() * b,
        &args,
    )
    .unwrap();
    assert_eq!(v.item(), 15.0);
    assert_eq!(g32.to_vec(), vec![6.0f32, 12.0]);
    assert_eq!(g64.item(), 5.0);
    assert!(!v.grad_enabled());
}

#[test]
fn independent_inputs_get_zeros() {
    let args = (
        Float64::from_slice(&[1.0, 2.0]),
        Float64::from_slice(&[5.0, 6.0, 7.0]),
    );
    let (ga, gb) = kiln::grad(|(a, _b): &(Float64, Float64)| a.sum(), &args).unwrap();
    assert_eq!(ga.to_vec(), vec![1.0, 1.0]);
    assert_eq!(gb.to_vec(), vec![0.0, 0.0, 0.0]);
    // a function that depends on nothing
    let g = kiln::grad(|_x: &Float64| Float64::from(4.0), &Float64::ones(2)).unwrap();
    assert_eq!(g.to_vec(), vec![0.0, 0.0]);
}

#[test]
fn captured_gradient_arrays_are_constants() {
    let mut c = Float64::from_slice(&[2.0, 3.0]);
    c.enable_grad();
    let y = &c * 2.0; // part of the caller's graph
    let yc = y.clone();
    let g = kiln::grad(move |x: &Float64| (x * &yc).sum(), &Float64::ones(2)).unwrap();
    assert_eq!(g.to_vec(), vec![4.0, 6.0]);
    // nothing reached the caller's leaf, and its graph is intact
    assert_eq!(c.grad().to_vec(), vec![0.0, 0.0]);
    kiln::ad::backward_from(&y, &Float64::ones(2)).unwrap();
    assert_eq!(c.grad().to_vec(), vec![2.0, 2.0]);
    // a captured array whose graph that pass consumed is still a constant
    let yc = y.clone();
    let g = kiln::grad(move |x: &Float64| (x * &yc).sum(), &Float64::ones(2)).unwrap();
    assert_eq!(g.to_vec(), vec![4.0, 6.0]);
    assert_eq!(c.grad().to_vec(), vec![2.0, 2.0]);
}

#[test]
fn vjp_matches_finite_differences_and_can_be_called_again() {
    let x0 = [0.3, -0.8, 1.2];
    let f = |x: &Float64| {
        let s = (x * x).sum();
        (x.sin() * &s, x.exp().sum())
    };
    let (y, pullback) = kiln::vjp(f, &Float64::from_slice(&x0)).unwrap();
    assert_eq!(y.0.len(), 3);
    let ct = (Float64::from_slice(&[1.0, -2.0, 0.5]), Float64::from(0.7));
    // <ct, f(x)> as a scalar function: its gradient is the VJP
    let ctv = ct.0.to_vec();
    let scalar = move |p: &[f64]| {
        let s: f64 = p.iter().map(|v| v * v).sum();
        let a: f64 = p.iter().zip(&ctv).map(|(v, c)| v.sin() * s * c).sum();
        a + 0.7 * p.iter().map(|v| v.exp()).sum::<f64>()
    };
    let want = fd_grad(&scalar, &x0);
    let g1 = pullback(&ct).unwrap();
    close(&g1.to_vec(), &want, 1e-7);
    let g2 = pullback(&ct).unwrap();
    assert_eq!(g1.to_vec(), g2.to_vec());
    // a cotangent of one lane stands for all of them
    let g3 = pullback(&(Float64::from(1.0), Float64::from(0.0))).unwrap();
    let g4 = pullback(&(Float64::ones(3), Float64::from(0.0))).unwrap();
    assert_eq!(g3.to_vec(), g4.to_vec());
}

#[test]
fn jvp_matches_finite_differences_and_vjp() {
    let x0 = [0.4, 1.1];
    let t0 = [0.3, -1.0];
    let f = |(a, b): &(Float64, Float64)| (a * b.exp(), (a * a).sum());
    let prim = (Float64::from_slice(&x0[..1]), Float64::from_slice(&x0[1..]));
    let tan = (Float64::from_slice(&t0[..1]), Float64::from_slice(&t0[1..]));
    let (y, dy) = kiln::jvp(f, &prim, &tan).unwrap();
    assert!((y.0.item() - 0.4 * 1.1f64.exp()).abs() < 1e-12);
    let h = 1e-6;
    let fx = |s: f64| {
        let (a, b) = (x0[0] + s * t0[0], x0[1] + s * t0[1]);
        (a * b.exp(), a * a)
    };
    let (p, m) = (fx(h), fx(-h));
    close(
        &[dy.0.item(), dy.1.item()],
        &[(p.0 - m.0) / (2.0 * h), (p.1 - m.1) / (2.0 * h)],
        1e-7,
    );
    // <ct, J t> = <J^T ct, t>
    let (_, pb) = kiln::vjp(f, &prim).unwrap();
    let (ga, gb) = pb(&(Float64::from(0.6), Float64::from(-0.2))).unwrap();
    let lhs = 0.6 * dy.0.item() - 0.2 * dy.1.item();
    let rhs = ga.item() * t0[0] + gb.item() * t0[1];
    assert!((lhs - rhs).abs() < 1e-12, "{lhs} vs {rhs}");
}

#[test]
fn hvp_matches_finite_differences_of_the_gradient() {
    let x0 = [0.7, -0.3, 1.4];
    let v0 = [1.0, 0.5, -2.0];
    let f = |(x, y): &(Float64, Float64)| ((x * y).sin() * x.exp()).sum() + (y * y * y).sum();
    let split = |p: &[f64]| (Float64::from_slice(&p[..2]), Float64::from_slice(&p[2..]));
    let hv = kiln::hvp(f, &split(&x0), &split(&v0)).unwrap();
    let mut got = hv.0.to_vec();
    got.extend(hv.1.to_vec());
    let grad_at = |p: &[f64]| {
        let g = kiln::grad(f, &split(p)).unwrap();
        let mut v = g.0.to_vec();
        v.extend(g.1.to_vec());
        v
    };
    // x = (x0, x1), y = (y0) broadcast over both lanes
    let h = 1e-5;
    let plus: Vec<f64> = x0.iter().zip(&v0).map(|(a, b)| a + h * b).collect();
    let minus: Vec<f64> = x0.iter().zip(&v0).map(|(a, b)| a - h * b).collect();
    let (gp, gm) = (grad_at(&plus), grad_at(&minus));
    let want: Vec<f64> = gp
        .iter()
        .zip(&gm)
        .map(|(a, b)| (a - b) / (2.0 * h))
        .collect();
    close(&got, &want, 1e-6);
    // a linear function has a zero Hessian
    let z = kiln::hvp(
        |x: &Float64| (x * 3.0).sum(),
        &Float64::ones(2),
        &Float64::ones(2),
    )
    .unwrap();
    assert_eq!(z.to_vec(), vec![0.0, 0.0]);
}

#[test]
fn set_helpers() {
    let mut p = (
        Float64::from_slice(&[1.0, 2.0]),
        vec![Float32::from(3.0f32)],
    );
    kiln::ad::enable_grad(&mut p).unwrap();
    assert!(p.0.grad_enabled() && p.1[0].grad_enabled());
    ((&p.0 * &p.0).sum() + p.1[0].cast::<f64>().sum()).backward();
    let g = kiln::ad::grads(&p);
    assert_eq!(g.0.to_vec(), vec![2.0, 4.0]);
    assert_eq!(g.1[0].to_vec(), vec![1.0f32]);
    kiln::ad::clear_grads(&p);
    assert_eq!(kiln::ad::grads(&p).0.to_vec(), vec![0.0, 0.0]);
    let d = kiln::ad::detach(&p);
    assert!(!d.0.grad_enabled() && !d.1[0].grad_enabled());
    assert!(p.0.grad_enabled());
}

#[derive(Traverse, Clone)]
struct Mixed {
    w: Float32,
    counts: Vec<UInt32>,
}

#[test]
fn bad_input_errors() {
    // enable_grad on an integer array names its path; nothing changes
    let mut m = Mixed {
        w: Float32::ones(2),
        counts: vec![UInt32::arange(2)],
    };
    let e = kiln::ad::enable_grad(&mut m).unwrap_err().to_string();
    assert!(e.contains("counts[0]"), "{e}");
    assert!(!m.w.grad_enabled());
    let mut mask = (Float32::ones(1), Bool::from_slice(&[true]));
    let e = kiln::ad::enable_grad(&mut mask).unwrap_err().to_string();
    assert!(e.contains("[1]") && e.contains("bool"), "{e}");

    // grad of a non-scalar names its size
    let e = kiln::grad(|x: &Float64| x * 2.0, &Float64::ones(5))
        .unwrap_err()
        .to_string();
    assert!(e.contains("5 elements"), "{e}");
    let e = kiln::hvp(|x: &Float64| x * 2.0, &Float64::ones(3), &Float64::ones(3))
        .unwrap_err()
        .to_string();
    assert!(e.contains("3 elements"), "{e}");

    // cotangents and tangents of the wrong structure, type or size
    let (_, pb) = kiln::vjp(|x: &Float64| (x * 2.0, x.sum()), &Float64::ones(3)).unwrap();
    let e = pb(&(Float64::ones(2), Float64::from(1.0)))
        .unwrap_err()
        .to_string();
    assert!(e.contains("2 elements") && e.contains("3"), "{e}");
    let e = kiln::jvp(
        |x: &(Float64, Float64)| x.0.clone(),
        &(Float64::ones(2), Float64::ones(1)),
        &(Float64::ones(2), Float64::ones(4)),
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("[1]") && e.contains("4 elements"), "{e}");
    let e = kiln::jvp(
        |x: &Vec<Float64>| x[0].clone(),
        &vec![Float64::ones(2)],
        &vec![Float64::ones(2), Float64::ones(2)],
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("hold 2 arrays"), "{e}");
    let e = kiln::hvp(|x: &Float64| x.sum(), &Float64::ones(2), &Float64::ones(3))
        .unwrap_err()
        .to_string();
    assert!(e.contains("3 elements"), "{e}");
}
