//! Quantisation-aware training with a straight-through estimator (`Array::replace_grad`).
//!
//! A linear model's weights may only take multiples of 1/4 (as after quantising a network to a
//! few bits). Rounding has a zero derivative almost everywhere, so training the rounded model
//! directly never moves; training in floats and rounding afterwards loses what the rounding costs.
//! The straight-through estimator trains float "shadow" weights `w` whose forward pass uses the
//! rounded `q(w)`, while the gradient passes through `q` as if it were the identity:
//! `q = round(4w) / 4` with `replace_grad(q, w)`.
//!
//! The data come from on-grid true weights plus noise; the example trains both ways from the
//! same start and prints each one's loss with rounded weights, and what a step costs.
//!
//! Run: `cargo run --release --example straight_through [-- <samples> <steps>]`

use kiln::prelude::*;
use std::time::Instant;

const FEATURES: usize = 6;

/// Weights rounded to multiples of 1/4 in the forward pass; with `ste`, the gradient of `w`.
fn quantised(w: &Float32, ste: bool) -> Float32 {
    let q = (w * 4.0).round() * 0.25;
    if ste {
        q.replace_grad(w).expect("one size")
    } else {
        q
    }
}

/// Mean squared error of `x · q(w)` against `y` (`x` holds one feature per row of `FEATURES`).
fn loss(w: &Float32, x: &[Float32], y: &Float32, ste: bool) -> Float32 {
    let q = quantised(w, ste);
    let mut pred = Float32::zeros(y.len());
    for (j, xj) in x.iter().enumerate() {
        pred = &pred + &(xj * &kiln::gather(&q, &UInt32::from(j as u32)));
    }
    let d = &pred - y;
    (&d * &d).sum() / y.len() as f32
}

/// `steps` steps of gradient descent from `w0`; returns the weights and the time per step.
fn train(w0: &[f32], x: &[Float32], y: &Float32, steps: usize, ste: bool) -> (Vec<f32>, f64) {
    let mut w = Float32::from_slice(w0);
    let t = Instant::now();
    for _ in 0..steps {
        w.enable_grad();
        loss(&w, x, y, ste).backward();
        let g = w.grad();
        w = w.detach() - g * 0.1;
        w.eval();
    }
    (w.to_vec(), t.elapsed().as_secs_f64() * 1e6 / steps as f64)
}

fn main() {
    let args: Vec<usize> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let n = args.first().copied().unwrap_or(100_000);
    let steps = args.get(1).copied().unwrap_or(200);
    let truth = [0.75f32, -1.25, 0.5, 2.0, -0.25, 1.0]; // on the grid
    let mut rng = Pcg32::new(n);
    let x: Vec<Float32> = (0..FEATURES)
        .map(|_| {
            let xj = rng.next_f32() * 2.0 - 1.0;
            xj.eval();
            xj
        })
        .collect();
    let mut y = rng.next_f32() * 0.05 - 0.025; // noise
    for (j, xj) in x.iter().enumerate() {
        y = &y + &(xj * truth[j]);
    }
    y.eval();
    let start = [0.1f32; FEATURES];
    let rounded_loss = |w: &[f32]| loss(&Float32::from_slice(w), &x, &y, false).item();

    let (w_ste, us_ste) = train(&start, &x, &y, steps, true);
    let (w_float, us_float) = train(&start, &x, &y, steps, false);
    let q = |w: &[f32]| -> Vec<f32> { w.iter().map(|v| (v * 4.0).round() / 4.0).collect() };
    println!("true weights            {truth:?}");
    println!(
        "straight-through: q(w) {:?}, loss with rounded weights {:.5} ({us_ste:.0} µs/step)",
        q(&w_ste),
        rounded_loss(&w_ste)
    );
    println!(
        "rounding's own gradient (zero): q(w) {:?}, loss {:.5} ({us_float:.0} µs/step): the weights never moved",
        q(&w_float),
        rounded_loss(&w_float)
    );
    println!("{n} samples, {steps} steps of gradient descent, learning rate 0.1");
}
