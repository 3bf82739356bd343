//! A custom operation with a hand-written derivative: a numerically stable log-sum-exp.
//!
//! Written with plain kiln ops, `log Σ exp(x)` overflows for large `x`, and its recorded
//! derivative goes through every intermediate. As a `CustomOp` the primal subtracts the maximum
//! first, and the backward pass is the softmax times the cotangent, in one expression: the
//! gradient is exact where the naive one is NaN, and the pass does less work.
//!
//! Run with `cargo run --release --example custom_op`.

use kiln::ad::CustomOp;
use kiln::prelude::*;
use std::time::Instant;

/// `log Σ exp(x)` over all elements.
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
    /// ∂/∂xᵢ log Σ exp(x) = exp(xᵢ − y): the softmax, from the saved output.
    fn backward(&self, x: &Float64, y: &Float64, dy: &Float64) -> Float64 {
        (x - y).exp() * dy
    }
    fn forward(&self, x: &Float64, y: &Float64, dx: &Float64) -> Option<Float64> {
        Some(((x - y).exp() * dx).sum())
    }
}

fn main() {
    let n = 1 << 20;
    // logits far beyond exp's range (e^800 overflows f64)
    let logits: Vec<f64> = (0..n).map(|i| 800.0 + (i as f64 * 0.37).sin()).collect();

    // naive: recorded by kiln's own rules
    let mut x = Float64::from_slice(&logits);
    x.enable_grad();
    let t = Instant::now();
    let naive = x.exp().sum().log();
    naive.backward();
    let g_naive = x.grad().to_vec();
    let t_naive = t.elapsed();
    println!(
        "naive      : value {:>12.6}, gradient[0] {:e}  ({:.2} ms)",
        naive.item(),
        g_naive[0],
        t_naive.as_secs_f64() * 1e3
    );

    // custom op: stable primal, softmax backward
    let mut x = Float64::from_slice(&logits);
    x.enable_grad();
    let t = Instant::now();
    let y = kiln::ad::custom(LogSumExp, &x);
    y.backward();
    let g = x.grad().to_vec();
    let t_custom = t.elapsed();
    println!(
        "custom op  : value {:>12.6}, gradient[0] {:e}  ({:.2} ms)",
        y.item(),
        g[0],
        t_custom.as_secs_f64() * 1e3
    );

    // checks: the softmax sums to 1, and matches a central difference at one element
    let total: f64 = g.iter().sum();
    println!("Σ gradient : {total:.12} (softmax: 1)");
    let lse = |v: &[f64]| {
        let m = v.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        v.iter().map(|a| (a - m).exp()).sum::<f64>().ln() + m
    };
    let (h, i) = (1e-3, 12345);
    let (mut up, mut dn) = (logits.clone(), logits.clone());
    up[i] += h;
    dn[i] -= h;
    let fd = (lse(&up) - lse(&dn)) / (2.0 * h);
    println!(
        "gradient[{i}] {:e} vs central difference {fd:e} (relative error {:.1e})",
        g[i],
        ((g[i] - fd) / fd).abs()
    );

    // forward mode along all-ones: Σ softmax = 1
    let mut x = Float64::from_slice(&logits);
    x.enable_grad();
    let y = kiln::ad::custom(LogSumExp, &x);
    kiln::ad::forward(&x).unwrap();
    println!("forward mode along ones: {:.12}", y.grad().item());
    let s = kiln::stats();
    println!("AD nodes alive at the end: {}", s.ad_nodes);
}
