//! Custom operations (`kiln::ad::CustomOp`): hand-written derivatives against central finite
//! differences and against kiln's own rules, forward against reverse mode, several outputs,
//! inputs of mixed kinds, errors and lifetimes.
use kiln::ad::CustomOp;
use kiln::control::{Branch, Mode};
use kiln::prelude::*;
use std::sync::Mutex;

static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

fn close(got: &[f64], want: &[f64], tol: f64, what: &str) {
    assert_eq!(got.len(), want.len(), "{what}");
    for (i, (a, b)) in got.iter().zip(want).enumerate() {
        assert!(
            (a - b).abs() <= tol * (1.0 + b.abs()),
            "{what}: element {i}: {a} vs {b}"
        );
    }
}

fn nodes() -> u64 {
    kiln::stats().ad_nodes
}

/// log Σ exp(x), computed stably, with its gradient (softmax) written by hand.
struct LogSumExp;

impl CustomOp for LogSumExp {
    type Input = Float64;
    type Output = Float64;
    fn name(&self) -> &'static str {
        "logsumexp"
    }
    fn eval(&self, x: &Float64) -> Float64 {
        let m = x.reduce_max();
        (x - &m).exp().sum().log() + m
    }
    fn backward(&self, x: &Float64, y: &Float64, dy: &Float64) -> Float64 {
        (x - y).exp() * dy
    }
    fn forward(&self, x: &Float64, y: &Float64, dx: &Float64) -> Option<Float64> {
        Some(((x - y).exp() * dx).sum())
    }
}

fn lse(v: &[f64]) -> f64 {
    let m = v.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
    v.iter().map(|x| (x - m).exp()).sum::<f64>().ln() + m
}

fn fd(f: &dyn Fn(&[f64]) -> f64, x: &[f64]) -> Vec<f64> {
    let h = 1e-6;
    (0..x.len())
        .map(|i| {
            let (mut a, mut b) = (x.to_vec(), x.to_vec());
            a[i] += h;
            b[i] -= h;
            (f(&a) - f(&b)) / (2.0 * h)
        })
        .collect()
}

#[test]
fn logsumexp_reverse_forward_and_finite_differences() {
    let _s = serial();
    let before = nodes();
    let xv = [0.3, -1.2, 2.5, 700.0, 699.5];
    let mut x = Float64::from_slice(&xv);
    x.enable_grad();
    let y = kiln::ad::custom(LogSumExp, &x);
    close(&[y.item()], &[lse(&xv)], 1e-15, "value");
    (&y * 3.0).backward();
    let want: Vec<f64> = fd(&lse, &xv).iter().map(|g| g * 3.0).collect();
    close(&x.grad().to_vec(), &want, 1e-6, "reverse");
    // forward mode along a direction
    let dir = [1.0, 0.5, -2.0, 0.25, 3.0];
    let mut x2 = x.detach();
    x2.enable_grad();
    let y2 = kiln::ad::custom(LogSumExp, &x2);
    x2.set_grad(&Float64::from_slice(&dir));
    kiln::ad::forward_to(&y2).unwrap();
    let g = fd(&lse, &xv);
    let dd: f64 = g.iter().zip(&dir).map(|(a, b)| a * b).sum();
    close(&[y2.grad().item()], &[dd], 1e-6, "forward");
    drop((x, y, x2, y2));
    assert_eq!(nodes(), before);
}

#[test]
fn custom_op_composes_with_recorded_ops() {
    // the op sits in the middle of ordinary code on both sides
    let _s = serial();
    let xv = [0.1, 0.4, -0.3];
    let mut x = Float64::from_slice(&xv);
    x.enable_grad();
    let z = kiln::ad::custom(LogSumExp, &(x.sin() * 2.0)).exp();
    z.backward();
    let f = |v: &[f64]| {
        let s: Vec<f64> = v.iter().map(|a| a.sin() * 2.0).collect();
        lse(&s).exp()
    };
    close(&x.grad().to_vec(), &fd(&f, &xv), 1e-6, "chain");
}

/// (u, v) ↦ (u·v, u + v²) over a tuple, with an integer input that carries no gradient.
struct Pair;

impl CustomOp for Pair {
    type Input = (Float64, Float64, UInt32);
    type Output = (Float64, Float64);
    fn eval(&self, (u, v, k): &Self::Input) -> Self::Output {
        let kf = k.cast::<f64>();
        (u * v * &kf, u + v * v)
    }
    fn backward(
        &self,
        (u, v, k): &Self::Input,
        _: &Self::Output,
        (da, db): &Self::Output,
    ) -> Self::Input {
        let kf = k.cast::<f64>();
        (
            da * v * &kf + db,
            da * u * &kf + db * v * 2.0,
            UInt32::zeros(1),
        )
    }
    fn forward(
        &self,
        (u, v, k): &Self::Input,
        _: &Self::Output,
        (du, dv, _): &Self::Input,
    ) -> Option<Self::Output> {
        let kf = k.cast::<f64>();
        Some(((du * v + u * dv) * &kf, du + v * dv * 2.0))
    }
}

#[test]
fn several_outputs_and_mixed_inputs() {
    let _s = serial();
    let before = nodes();
    let (uv, vv) = ([1.0, 2.0], [3.0, -0.5]);
    let k = UInt32::from_slice(&[2, 5]);
    let mut u = Float64::from_slice(&uv);
    let mut v = Float64::from_slice(&vv);
    u.enable_grad();
    v.enable_grad();
    let (a, b) = kiln::ad::custom(Pair, &(u.clone(), v.clone(), k.clone()));
    // L = Σ a + 10 Σ b
    (a.sum() + b.sum() * 10.0).backward();
    let kv = [2.0, 5.0];
    let gu: Vec<f64> = (0..2).map(|i| vv[i] * kv[i] + 10.0).collect();
    let gv: Vec<f64> = (0..2).map(|i| uv[i] * kv[i] + 20.0 * vv[i]).collect();
    close(&u.grad().to_vec(), &gu, 1e-14, "du");
    close(&v.grad().to_vec(), &gv, 1e-14, "dv");
    // only one output reached: the other's cotangent is zero
    let (mut u2, v2) = (u.detach(), v.detach());
    u2.enable_grad();
    let (_, b2) = kiln::ad::custom(Pair, &(u2.clone(), v2.clone(), k.clone()));
    b2.sum().backward();
    close(&u2.grad().to_vec(), &[1.0, 1.0], 1e-14, "only b");
    // forward mode gives each output its tangent
    let mut u3 = u.detach();
    u3.enable_grad();
    let (a3, b3) = kiln::ad::custom(Pair, &(u3.clone(), v2.clone(), k.clone()));
    kiln::ad::forward(&u3).unwrap();
    close(&a3.grad().to_vec(), &[3.0 * 2.0, -0.5 * 5.0], 1e-14, "da");
    close(&b3.grad().to_vec(), &[1.0, 1.0], 1e-14, "db");
    drop((u, v, a, b, u2, v2, b2, u3, a3, b3));
    assert_eq!(nodes(), before);
}

/// Only reverse mode.
struct Twice;
impl CustomOp for Twice {
    type Input = Float32;
    type Output = Float32;
    fn eval(&self, x: &Float32) -> Float32 {
        x * 2.0
    }
    fn backward(&self, _: &Float32, _: &Float32, dy: &Float32) -> Float32 {
        dy * 2.0
    }
}

#[test]
fn forward_mode_without_forward_is_an_error() {
    let _s = serial();
    let before = nodes();
    let mut x = Float32::from_slice(&[1.0, 2.0]);
    x.enable_grad();
    let y = kiln::ad::custom(Twice, &x);
    let e = kiln::ad::forward(&x).unwrap_err();
    assert!(e.to_string().contains("defines no `forward`"), "{e}");
    // reverse mode works (and the f32 gradient is exact)
    y.sum().backward();
    assert_eq!(x.grad().to_vec(), vec![2.0, 2.0]);
    drop((x, y));
    assert_eq!(nodes(), before);
}

#[test]
fn untracked_inputs_record_nothing() {
    let _s = serial();
    let before = nodes();
    let y = kiln::ad::custom(Twice, &Float32::from_slice(&[1.0]));
    assert!(!y.grad_enabled());
    assert_eq!(y.to_vec(), vec![2.0]);
    let mut x = Float32::from_slice(&[1.0]);
    x.enable_grad();
    let z = kiln::ad::suspend_grad(|| kiln::ad::custom(Twice, &x));
    assert!(!z.grad_enabled());
    drop((x, y, z));
    assert_eq!(nodes(), before);
}

#[test]
fn retained_graph_allows_a_second_pass() {
    let _s = serial();
    let mut x = Float64::from_slice(&[0.0, 1.0]);
    x.enable_grad();
    let y = kiln::ad::custom(LogSumExp, &x);
    kiln::ad::backward_with(&y, &Float64::from(1.0), true).unwrap();
    kiln::ad::backward_with(&y, &Float64::from(1.0), false).unwrap();
    let e = 1f64.exp();
    close(
        &x.grad().to_vec(),
        &[2.0 / (1.0 + e), 2.0 * e / (1.0 + e)],
        1e-14,
        "twice",
    );
}

/// softplus(x) = log(1 + eˣ), lane by lane, with both derivatives by hand.
struct Softplus;
impl CustomOp for Softplus {
    type Input = Float64;
    type Output = Float64;
    fn lane_local(&self) -> bool {
        true
    }
    fn eval(&self, x: &Float64) -> Float64 {
        (x.exp() + 1.0).log()
    }
    fn backward(&self, x: &Float64, _: &Float64, dy: &Float64) -> Float64 {
        dy / ((-x).exp() + 1.0)
    }
    fn forward(&self, x: &Float64, _: &Float64, dx: &Float64) -> Option<Float64> {
        Some(dx / ((-x).exp() + 1.0))
    }
}

#[test]
fn custom_op_inside_a_branch() {
    let _s = serial();
    let before = nodes();
    let xv = [-1.0, 0.5, 2.0, 3.0];
    for mode in [Mode::Symbolic, Mode::Evaluated] {
        let run = |x: &Float64| {
            Branch::new()
                .mode(mode)
                .run(
                    &x.detach().lt(1.0),
                    |x: &Float64| kiln::ad::custom(Softplus, x) * x,
                    |x: &Float64| x * 3.0,
                    x,
                )
                .unwrap()
        };
        let mut x = Float64::from_slice(&xv);
        x.enable_grad();
        run(&x).sum().backward();
        let f = |v: &[f64]| {
            v.iter()
                .map(|&a| {
                    if a < 1.0 {
                        (a.exp() + 1.0).ln() * a
                    } else {
                        a * 3.0
                    }
                })
                .sum()
        };
        close(&x.grad().to_vec(), &fd(&f, &xv), 1e-6, &format!("{mode:?}"));
        // an op that does not declare itself lane-local is refused there, not guessed at
        let mut y = Float32::from_slice(&[1.0, 2.0]);
        y.enable_grad();
        let r = Branch::new().mode(mode).run(
            &y.detach().lt(1.5),
            |y: &Float32| kiln::ad::custom(Twice, y),
            |y: &Float32| y.clone(),
            &y,
        );
        let e = r.unwrap_err();
        assert!(e.to_string().contains("different lanes"), "{e}");
    }
    assert_eq!(nodes(), before);
}
