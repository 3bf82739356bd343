//! Train an Elman RNN by backpropagation through time: `kiln::scan` runs the recurrence, and
//! `backward` differentiates through every step (as a gradient scan: the step's recorded
//! vector-Jacobian product replayed from the last step to the first).
//!
//! The task: read a noisy sine wave one sample at a time and predict the next sample. The cell is
//! `h_t = tanh(h_{t-1} W + x_t U + b)`, the prediction `y_t = h_t · v`, the loss the mean squared
//! error over every step and sequence; Adam updates `W`, `U`, `b` and `v`. The example prints the
//! loss as it falls and what each training step cost.
//!
//! Run: `cargo run --release --example rnn_bptt [-- <steps> <batch> <hidden> <iterations>]`

use kiln::prelude::*;
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

fn main() -> kiln::Result<()> {
    let mut args = std::env::args().skip(1);
    let mut arg = |d: usize| args.next().and_then(|s| s.parse().ok()).unwrap_or(d);
    let (steps, batch, hidden, iters) = (arg(50), arg(32), arg(32), arg(150));

    // sequences: sin(ω t + φ) + noise, one phase and frequency per sequence; the target is the
    // next sample
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
    let targets = Tensor::from_vec(next, &[steps, batch]);

    // parameters: (W, U, b, v)
    let mut p = (
        Float32::from_slice(&values(hidden * hidden, 1, 0.5)),
        Float32::from_slice(&values(hidden, 2, 1.0)),
        Float32::zeros(hidden),
        Float32::from_slice(&values(hidden, 3, 0.5)),
    );
    kiln::ad::enable_grad(&mut p)?;
    let mut opt = kiln::opt::Adam::new(0.02);
    let h0 = Tensor::<f32>::zeros(&[batch, hidden]);

    let mut times = Vec::with_capacity(iters);
    let mut report = kiln::ScanReport::default();
    let (mut first, mut last) = (0.0, 0.0);
    for it in 0..iters {
        let t = Instant::now();
        let w = Tensor::from_array(p.0.clone(), &[hidden, hidden]);
        let u = Tensor::from_array(p.1.clone(), &[1, hidden]);
        let b = Tensor::from_array(p.2.clone(), &[hidden]);
        let v = Tensor::from_array(p.3.clone(), &[hidden, 1]);
        let (_, preds) = kiln::scan::Lax::new(&h0, &xs)
            .label("rnn")
            .report(&mut report)
            .run(|h, x| {
                let h2 = (h.matmul(&w) + x.matmul(&u) + &b).tanh();
                let y = h2.matmul(&v).reshape(&[batch]);
                (h2, y)
            })?;
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
        "RNN with {hidden} hidden units, {batch} sequences of {steps} steps, {iters} Adam steps"
    );
    println!(
        "error {first:.4} -> {last:.4} (predicting 0 everywhere: {:.4})",
        (targets.array() * targets.array()).sum().item() / (steps * batch) as f32
    );
    println!(
        "one training step (forward scan, backward through every step, update): {:.2} ms median",
        times[times.len() / 2] * 1e3
    );
    // with gradients on the weights it captures, the scan differentiates as a gradient scan: the
    // plain scan forward, the step's recorded vector-Jacobian product replayed backward, and the
    // gradients of W, U and v (right operands of products) each one product after the loop
    println!(
        "the scan ran as: {} ({} weight gradients pushed out of the loop)",
        report.mode, report.grad_matmuls_pushed_out
    );
    Ok(())
}
