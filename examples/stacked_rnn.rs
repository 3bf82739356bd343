//! Train a two-layer (stacked) RNN by backpropagation through time: the first layer's hidden
//! states are the second layer's sequence, so the second `kiln::scan` differentiates through a
//! sequence that carries a gradient. Both scans run as gradient scans: the plain scan forward,
//! the step's recorded vector-Jacobian product replayed backward, and the gradients of the
//! weights (`Σ_t x_tᵀ·δ_t`) and of the second layer's input rows (`δ_t·U₂ᵀ` for every `t`) each
//! one matrix product after the loop.
//!
//! The task is `rnn_bptt`'s: read a noisy sine wave one sample at a time and predict the next
//! sample. The example prints the loss as it falls, how each scan ran and what a step cost.
//!
//! Run: `cargo run --release --example stacked_rnn [-- <steps> <batch> <hidden> <iterations>]`

use kiln::prelude::*;
use kiln::scan::{Lax, ScanReport};
use std::time::Instant;

/// Deterministic pseudo-random values in [-scale/2, scale/2).
fn values(n: usize, seed: u64, scale: f32) -> Vec<f32> {
    (0..n as u64)
        .map(|i| {
            let h = (i.wrapping_add(seed)).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 40;
            ((h % 1000) as f32 / 1000.0 - 0.5) * scale
        })
        .collect()
}

/// One recurrent layer over `xs` (`[steps, batch, in]`): every hidden state, `[steps, batch,
/// hidden]`.
fn layer(
    xs: &Tensor<f32>,
    (w, u, b): (&Tensor<f32>, &Tensor<f32>, &Tensor<f32>),
    label: &str,
    report: &mut ScanReport,
) -> kiln::Result<Tensor<f32>> {
    let (batch, hidden) = (xs.shape()[1], w.shape()[0]);
    let h0 = Tensor::<f32>::zeros(&[batch, hidden]);
    let (_, hs) = Lax::new(&h0, xs).label(label).report(report).run(|h, x| {
        let h2 = (h.matmul(w) + x.matmul(u) + b).tanh();
        (h2.clone(), h2)
    })?;
    Ok(hs)
}

fn main() -> kiln::Result<()> {
    let mut args = std::env::args().skip(1);
    let mut arg = |d: usize| args.next().and_then(|s| s.parse().ok()).unwrap_or(d);
    let (steps, batch, hidden, iters) = (arg(50), arg(32), arg(32), arg(150));

    let wave = |t: usize, s: usize| {
        let (phase, freq) = (s as f32 * 0.37, 0.15 + 0.1 * (s % 5) as f32 / 5.0);
        (freq * t as f32 + phase).sin()
    };
    let noise = values(steps * batch, 9, 0.1);
    let seq: Vec<f32> = (0..steps * batch)
        .map(|k| wave(k / batch, k % batch) + noise[k])
        .collect();
    let next: Vec<f32> = (0..steps * batch)
        .map(|k| wave(k / batch + 1, k % batch))
        .collect();
    let xs = Tensor::from_vec(seq, &[steps, batch, 1]);
    let targets = Tensor::from_vec(next, &[steps * batch, 1]);

    // parameters: layer 1 (W1, U1, b1), layer 2 (W2, U2, b2), the read-out v
    let mut p = (
        (
            Float32::from_slice(&values(hidden * hidden, 1, 0.5)),
            Float32::from_slice(&values(hidden, 2, 1.0)),
            Float32::zeros(hidden),
        ),
        (
            Float32::from_slice(&values(hidden * hidden, 4, 0.5)),
            Float32::from_slice(&values(hidden * hidden, 5, 0.5)),
            Float32::zeros(hidden),
        ),
        Float32::from_slice(&values(hidden, 3, 0.5)),
    );
    kiln::ad::enable_grad(&mut p)?;
    let mut opt = kiln::opt::Adam::new(0.01);
    let m = |a: &Float32, r: usize, c: usize| Tensor::from_array(a.clone(), &[r, c]);
    let vec = |a: &Float32| Tensor::from_array(a.clone(), &[hidden]);

    let (mut r1, mut r2) = (ScanReport::default(), ScanReport::default());
    let mut times = Vec::with_capacity(iters);
    let (mut first, mut last) = (0.0, 0.0);
    for it in 0..iters {
        let t = Instant::now();
        let ((w1, u1, b1), (w2, u2, b2), v) = &p;
        let hs1 = layer(
            &xs,
            (&m(w1, hidden, hidden), &m(u1, 1, hidden), &vec(b1)),
            "layer 1",
            &mut r1,
        )?;
        let hs2 = layer(
            &hs1,
            (&m(w2, hidden, hidden), &m(u2, hidden, hidden), &vec(b2)),
            "layer 2",
            &mut r2,
        )?;
        let preds = hs2
            .reshape(&[steps * batch, hidden])
            .matmul(&m(v, hidden, 1));
        let err = &preds - &targets;
        let loss = (err.array() * err.array()).sum() / (steps * batch) as f32;
        loss.backward();
        opt.step(&mut p);
        let l = loss.item();
        times.push(t.elapsed().as_secs_f64());
        if it == 0 {
            first = l;
        }
        last = l;
        if it % 25 == 0 || it + 1 == iters {
            println!("iteration {it:4}: mean squared error {l:.5}");
        }
    }
    times.sort_by(f64::total_cmp);
    println!();
    println!(
        "two-layer RNN, {hidden} hidden units per layer, {batch} sequences of {steps} steps, {iters} Adam steps"
    );
    println!("error {first:.4} -> {last:.4}");
    println!(
        "one training step (two forward scans, two gradient scans, update): {:.2} ms median",
        times[times.len() / 2] * 1e3
    );
    for r in [&r1, &r2] {
        let rows = r
            .rewrites
            .iter()
            .filter(|w| w.contains("rows' gradient"))
            .count();
        println!(
            "{}: {} ({} weight gradients and {} sequence gradients after the loop)",
            r.label, r.mode, r.grad_matmuls_pushed_out, rows
        );
    }
    Ok(())
}
