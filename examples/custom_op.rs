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
    let before = kiln::stats().ad_nodes;
    run(&logits);
    println!(
        "AD nodes alive after the arrays are dropped: {} (before: {before})",
        kiln::stats().ad_nodes
    );
}

fn run(logits: &[f64]) {
    // naive: recorded by kiln's own rules
    let mut x = Float64::from_slice(logits);
    x.enable_grad();
    let t = Instant::now();
    let naive = x.exp().sum().log();
    naive.backward();
    let g_naive = x.grad().to_vec();
    let t_naive = t.elapsed();
    println!(
        "naive      : value {:>12.6}, gradient[0] {:e}  ({:.2} ms, compilation included)",
        naive.item(),
        g_naive[0],
        t_naive.as_secs_f64() * 1e3
    );

    // custom op: stable primal, softmax backward
    let mut x = Float64::from_slice(logits);
    x.enable_grad();
    let t = Instant::now();
    let y = kiln::ad::custom(LogSumExp, &x);
    y.backward();
    let g = x.grad().to_vec();
    let t_custom = t.elapsed();
    println!(
        "custom op  : value {:>12.6}, gradient[0] {:e}  ({:.2} ms, compilation included)",
        y.item(),
        g[0],
        t_custom.as_secs_f64() * 1e3
    );
    // the same again: kernels are cached now
    let mut x2 = Float64::from_slice(logits);
    x2.enable_grad();
    let t = Instant::now();
    let y2 = kiln::ad::custom(LogSumExp, &x2);
    y2.backward();
    let _ = x2.grad().to_vec();
    println!(
        "custom op  : {:.2} ms for value and gradient once compiled",
        t.elapsed().as_secs_f64() * 1e3
    );

    // checks against the softmax computed on the host
    let m = logits.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
    let lse = logits.iter().map(|a| (a - m).exp()).sum::<f64>().ln() + m;
    let worst = logits
        .iter()
        .zip(&g)
        .map(|(a, gi)| {
            let want = (a - lse).exp();
            ((gi - want) / want).abs()
        })
        .fold(0.0, f64::max);
    let total: f64 = g.iter().sum();
    println!("value error {:.1e}; gradient vs host softmax: worst relative error {worst:.1e}; Σ gradient {total:.12}", (y.item() - lse).abs());

    // forward mode along all-ones: Σ softmax = 1
    let mut x = Float64::from_slice(logits);
    x.enable_grad();
    let y = kiln::ad::custom(LogSumExp, &x);
    kiln::ad::forward(&x).unwrap();
    println!("forward mode along ones: {:.12}", y.grad().item());
}
