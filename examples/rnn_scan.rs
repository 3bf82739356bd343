//! An Elman RNN over a sequence with `kiln::scan`, and an exponential moving average as a fused
//! one-kernel scan.
//!
//! The RNN step `h_t = tanh(h_{t-1} Wᵀ + x_t Uᵀ + b)` needs whole rows (matrix products), so the
//! scan runs one step per launch group, the step frozen once and replayed. kiln's rewrites push
//! `x_t Uᵀ` out of the loop (one product over all steps) and the output projection `y_t = h_t Vᵀ`
//! after it; the report says so. The moving average treats each lane on its own, so the whole
//! scan is one kernel: every lane loops over the steps with its state in registers.
//!
//! Run: `cargo run --release --example rnn_scan [-- <steps> <batch> <hidden>]`

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
    let steps: usize = args.next().and_then(|s| s.parse().ok()).unwrap_or(200);
    let batch: usize = args.next().and_then(|s| s.parse().ok()).unwrap_or(64);
    let hidden: usize = args.next().and_then(|s| s.parse().ok()).unwrap_or(256);
    let classes = 10;

    let w = Tensor::from_vec(values(hidden * hidden, 1, 0.2), &[hidden, hidden]).transpose();
    let u = Tensor::from_vec(values(hidden * hidden, 2, 0.2), &[hidden, hidden]).transpose();
    let v = Tensor::from_vec(values(classes * hidden, 3, 0.2), &[classes, hidden]).transpose();
    let b = Tensor::from_vec(values(hidden, 4, 0.2), &[hidden]);
    let xs = Tensor::from_vec(
        values(steps * batch * hidden, 5, 2.0),
        &[steps, batch, hidden],
    );
    kiln::eval!(w.array(), u.array(), v.array(), xs.array());

    // the RNN: the hidden state feeds back; the logits do not
    let rnn = |rewrites: bool| {
        Scan::<f32>::new()
            .label("rnn")
            .sequence(&xs)
            .output(&Tensor::zeros(&[batch, hidden]))
            .output_none()
            .rewrites(rewrites)
            .run(|s| {
                let h = (s.out(0, -1).matmul(&w) + s.seq(0, 0).matmul(&u) + &b).tanh();
                let logits = h.matmul(&v);
                (h, logits)
            })
    };
    let _ = rnn(true)?; // the first run records the step
    let t = Instant::now();
    let r = rnn(true)?;
    let logits = r.output::<f32>(1);
    logits.eval();
    let with = t.elapsed().as_secs_f64() * 1e3;
    let t = Instant::now();
    let plain = rnn(false)?;
    plain.output::<f32>(1).eval();
    let without = t.elapsed().as_secs_f64() * 1e3;
    let last = logits.index_axis(0, steps - 1).index_axis(0, 0).to_vec();
    println!("RNN: {steps} steps, batch {batch}, hidden {hidden}");
    println!("  logits of the last step, first sequence: {last:.3?}");
    println!(
        "  {with:.1} ms with kiln's rewrites, {without:.1} ms without ({:.2}x)",
        without / with
    );
    print!("{}", r.report());

    // an exponential moving average of many signals: one kernel
    let (signals, n) = (100_000, 500);
    let x = Tensor::from_vec(values(n * signals, 6, 1.0), &[n, signals]);
    x.eval();
    let ema_scan = |report: &mut kiln::ScanReport| {
        let blocked = kiln::stats().kernels_blocked;
        let (ema, smoothed) = kiln::scan::Lax::new(&Tensor::<f32>::zeros(&[signals]), &x)
            .label("ema")
            .report(report)
            .run(|m, x| {
                let m = m * 0.9f32 + x * 0.1f32;
                (m.clone(), m)
            })?;
        smoothed.eval();
        Ok::<_, kiln::Error>((ema, kiln::stats().kernels_blocked > blocked))
    };
    let mut report = kiln::ScanReport::default();
    let t = Instant::now();
    let (ema, blocked) = ema_scan(&mut report)?;
    let cold = t.elapsed().as_secs_f64() * 1e3;
    // the same scan again: compiled, its output memory reused from the first run's
    let warm = (0..3)
        .map(|_| {
            let t = Instant::now();
            ema_scan(&mut kiln::ScanReport::default()).map(|_| t.elapsed().as_secs_f64() * 1e3)
        })
        .collect::<kiln::Result<Vec<f64>>>()?
        .into_iter()
        .fold(f64::MAX, f64::min);
    // what a NumPy user writes: a loop over the rows, each a vector operation (one thread)
    let host = x.to_vec();
    // (filled, so that its pages exist before the clock starts, as kiln's reused output's do)
    let mut out = vec![1.0f32; n * signals];
    let t = Instant::now();
    let mut m = vec![0.0f32; signals];
    for (row, dst) in host.chunks(signals).zip(out.chunks_mut(signals)) {
        for ((mj, &xj), o) in m.iter_mut().zip(row).zip(dst) {
            *mj = *mj * 0.9 + xj * 0.1;
            *o = *mj;
        }
    }
    let rows = t.elapsed().as_secs_f64() * 1e3;
    std::hint::black_box(&out);
    println!(
        "EMA of {signals} signals over {n} steps: final[0..3] = {:.4?}; first run {cold:.1} ms \
         (compiling, fresh output memory), then {warm:.1} ms per run ({} mode, {} launch{}); \
         a Rust loop over the rows on one thread: {rows:.1} ms ({:.1}x)",
        &ema.to_vec()[..3],
        report.mode,
        report.loops_emitted,
        if blocked {
            ", lane-blocked: blocks of lanes run step by step"
        } else {
            ""
        },
        rows / warm
    );
    Ok(())
}
