//! Fit the gains of a consensus model by reverse mode through a `while_loop` that mixes lanes,
//! with its memory bounded by checkpointing (`Loop::grad_checkpoint`).
//!
//! `n` agents hold opinions `x`; at each step every agent moves toward the mean opinion at its
//! own gain `k_i`, plus a nonlinear drift: `x ← x + dt·(k·(x̄ − x) + 0.3·sin(x))`, for `steps`
//! steps of `dt = 2/steps`. The mean makes every lane depend on every other, so the default gradient mode (each
//! lane's Jacobian carried with it) refuses the loop; a recorded loop would keep every step. The
//! checkpointed loop keeps about √(2·steps) states and replays the segments between them in
//! `backward`. Gradient descent recovers the gains from the final opinions of a run with the true
//! ones; the example prints the memory each mode keeps and checks that both give one gradient.
//!
//! Run: `cargo run --release --example consensus_fit [-- <agents> <steps> <iterations>]`

use kiln::control::{Checkpoints, Loop};
use kiln::prelude::*;
use kiln::LoopGrad;
use std::time::Instant;

/// How the loop is differentiated.
#[derive(Clone, Copy)]
enum How {
    Checkpointed,
    Recorded,
}

/// The opinions after `steps` steps from `x0` with gains `k` (which may carry a gradient).
fn simulate(x0: &Float64, k: &Float64, steps: u32, how: How) -> Float64 {
    let n = x0.len();
    let lp = Loop::new((x0.clone(), k.clone(), UInt32::zeros(n))).label("consensus");
    let dt = 2.0 / steps as f64;
    let cond = move |(_, _, i): &(Float64, Float64, UInt32)| i.lt(steps);
    let body = move |(x, k, i): &(Float64, Float64, UInt32)| {
        let mean = x.sum() / n as f64;
        let x = x + (k * (mean - x) + x.sin() * 0.3) * dt;
        (x, k.clone(), i + 1u32)
    };
    let r = match how {
        How::Checkpointed => lp.grad_checkpoint(Checkpoints::Auto).run(cond, body),
        How::Recorded => lp.grad_mode(LoopGrad::Recorded).run(cond, body),
    };
    r.expect("the consensus loop").0
}

/// The loss `Σ (x_T − target)² / n` and its gradient with respect to the gains, with the engine
/// bytes the forward kept alive for the backward pass.
fn loss_and_grad(
    x0: &Float64,
    k: &Float64,
    target: &Float64,
    steps: u32,
    how: How,
) -> (f64, Float64, u64) {
    let mut k = k.detach();
    k.enable_grad();
    let before = kiln::stats().bytes_allocated;
    let x = simulate(x0, &k, steps, how);
    let d = &x - target;
    let loss = (&d * &d).sum() / x0.len() as f64;
    let kept = kiln::stats().bytes_allocated.saturating_sub(before);
    loss.backward();
    (loss.item(), k.grad(), kept)
}

fn main() {
    let args: Vec<usize> = std::env::args()
        .skip(1)
        .map(|a| a.parse().expect("numbers"))
        .collect();
    let n = args.first().copied().unwrap_or(1024);
    let steps = args.get(1).copied().unwrap_or(1000) as u32;
    let iterations = args.get(2).copied().unwrap_or(40);
    let mut rng = Pcg32::new(n);
    let x0 = rng.next_f64() * 4.0 - 2.0;
    let truth = rng.next_f64() * 0.8 + 0.2;
    let target = suspend(|| simulate(&x0, &truth, steps, How::Checkpointed));
    target.eval();

    // the two modes give one gradient; the checkpointed one keeps ~√(2·steps) states
    let start = Float64::full(0.5, n);
    // (each timed on its second call: the first compiles the kernels)
    let timed = |how: How| {
        loss_and_grad(&x0, &start, &target, steps, how);
        let t = Instant::now();
        let (l, g, kept) = loss_and_grad(&x0, &start, &target, steps, how);
        (l, g.to_vec(), kept, t.elapsed())
    };
    let (l1, g1, kept_c, time_c) = timed(How::Checkpointed);
    let (l2, g2, kept_r, time_r) = timed(How::Recorded);
    let diff = g1
        .iter()
        .zip(&g2)
        .map(|(a, b)| (a - b).abs())
        .fold(0.0f64, f64::max);
    let scale = g2.iter().map(|v| v.abs()).fold(0.0f64, f64::max);
    let state = (n * 8) as f64;
    println!("{n} agents, {steps} steps, x ← x + dt·(k·(x̄ − x) + 0.3·sin x)");
    println!(
        "checkpointed: loss {l1:.6e}, kept {:.1} MB ({:.0} states), loss + gradient {:.0} ms",
        kept_c as f64 / 1e6,
        kept_c as f64 / state,
        time_c.as_secs_f64() * 1e3
    );
    println!(
        "recorded:     loss {l2:.6e}, kept {:.1} MB ({:.0} states), loss + gradient {:.0} ms",
        kept_r as f64 / 1e6,
        kept_r as f64 / state,
        time_r.as_secs_f64() * 1e3
    );
    println!("largest gradient difference: {diff:.2e} (largest entry {scale:.2e})");
    assert!(diff <= 1e-9 * scale.max(1e-300), "the modes disagree");

    // gradient descent on the gains, with Adam
    let mut k = start;
    let (mut m, mut v) = (Float64::zeros(n), Float64::zeros(n));
    let (lr, b1, b2) = (0.05, 0.9, 0.999);
    let t = Instant::now();
    let mut loss = 0.0;
    for it in 1..=iterations {
        let (l, g, _) = loss_and_grad(&x0, &k, &target, steps, How::Checkpointed);
        loss = l;
        m = &m * b1 + &g * (1.0 - b1);
        v = &v * b2 + &g * &g * (1.0 - b2);
        let mh = &m / (1.0 - b1.powi(it as i32));
        let vh = &v / (1.0 - b2.powi(it as i32));
        k = (&k - mh * lr / (vh.sqrt() + 1e-12)).max(0.0).min(2.0);
        k.eval();
        if it == 1 || it % 10 == 0 {
            println!("step {it:3}: loss {l:.4e}");
        }
    }
    let per = t.elapsed().as_secs_f64() * 1e3 / iterations as f64;
    let err = (&k - &truth).abs();
    println!(
        "after {iterations} steps: loss {loss:.3e}, gain error mean {:.3e}, max {:.3e}; {per:.0} ms per training step",
        err.sum().item() / n as f64,
        err.reduce_max().item()
    );
}

/// `f` with derivatives not recorded.
fn suspend<R>(f: impl FnOnce() -> R) -> R {
    kiln::ad::suspend_grad(f)
}
