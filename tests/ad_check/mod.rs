//! Gradient oracle shared by the AD rule tests: reverse mode, forward mode and central finite
//! differences of one function of several f64 arrays must agree.
#![allow(dead_code)]
use kiln::prelude::*;
use std::sync::{Mutex, MutexGuard};

/// The AD graph is global: tests that count its nodes run one at a time.
static SERIAL: Mutex<()> = Mutex::new(());
pub fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// Deterministic pseudo-random values in [-1, 1).
pub fn rand(n: usize, seed: u64) -> Vec<f64> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            (s >> 11) as f64 / (1u64 << 52) as f64 - 1.0
        })
        .collect()
}

fn eval(f: &dyn Fn(&[Float64]) -> Float64, xs: &[Vec<f64>]) -> Vec<f64> {
    let args: Vec<Float64> = xs.iter().map(|v| Float64::from_slice(v)).collect();
    f(&args).to_vec()
}

/// Check `f` at `xs`: reverse mode (seeded with fixed weights `w`), forward mode (one pass per
/// input element) and central differences agree within `tol` (relative).
pub fn check(xs: &[Vec<f64>], f: impl Fn(&[Float64]) -> Float64, tol: f64) {
    let f: &dyn Fn(&[Float64]) -> Float64 = &f;
    let y0 = eval(f, xs);
    let w = rand(y0.len(), 7);
    // reverse
    let mut args: Vec<Float64> = xs.iter().map(|v| Float64::from_slice(v)).collect();
    for a in &mut args {
        a.enable_grad();
    }
    let y = f(&args);
    assert_eq!(
        y.to_vec(),
        y0,
        "the primal must not change when gradients are tracked"
    );
    if !y0.is_empty() {
        kiln::ad::backward_from(&y, &Float64::from_slice(&w)).unwrap();
    }
    let rev: Vec<Vec<f64>> = args.iter().map(|a| a.grad().to_vec()).collect();
    drop((y, args));
    for (k, x) in xs.iter().enumerate() {
        assert_eq!(rev[k].len(), x.len(), "gradient size of input {k}");
        for i in 0..x.len() {
            // central difference of y along e_(k,i)
            let h = 1e-6 * (1.0 + x[i].abs());
            let (mut p, mut m) = (xs.to_vec(), xs.to_vec());
            p[k][i] += h;
            m[k][i] -= h;
            let (yp, ym) = (eval(f, &p), eval(f, &m));
            let fd: Vec<f64> = yp
                .iter()
                .zip(&ym)
                .map(|(a, b)| (a - b) / (2.0 * h))
                .collect();
            // forward: the tangent of y along e_(k,i)
            let mut args: Vec<Float64> = xs.iter().map(|v| Float64::from_slice(v)).collect();
            for a in &mut args {
                a.enable_grad();
            }
            let mut e = vec![0.0; x.len()];
            e[i] = 1.0;
            args[k].set_grad(&Float64::from_slice(&e));
            let y = f(&args);
            kiln::ad::forward(&args[k]).unwrap();
            let fwd = y.grad().to_vec();
            assert_eq!(fwd.len(), fd.len());
            for (j, (a, b)) in fwd.iter().zip(&fd).enumerate() {
                assert!(
                    (a - b).abs() <= tol * (1.0 + b.abs()),
                    "input {k} lane {i}, output {j}: forward {a} vs finite difference {b}"
                );
            }
            let dot: f64 = fd.iter().zip(&w).map(|(a, b)| a * b).sum();
            let r = rev[k][i];
            assert!(
                (r - dot).abs() <= tol * (1.0 + dot.abs()),
                "input {k} lane {i}: reverse {r} vs finite difference {dot}"
            );
        }
    }
}

/// `f` run (with gradients, a backward and a forward pass) leaves the AD graph as it found it.
pub fn no_leak(f: impl Fn()) {
    let before = kiln::stats();
    f();
    let after = kiln::stats();
    assert_eq!(after.ad_nodes, before.ad_nodes, "AD nodes leaked");
    assert_eq!(after.ad_edges, before.ad_edges, "AD edges leaked");
}
