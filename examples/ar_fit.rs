//! Fit the coefficients of a recurrence through PyTensor's face of scan: `Scan` with an output
//! read at taps `[-2, -1]` (a MITSOT), an input sequence, and the coefficients as non-sequences
//! that carry gradients.
//!
//! The model is `y_t = a·y_{t-1} + b·y_{t-2} + c·u_t`, run over `steps` steps for `batch` series
//! side by side (one lane each). Data come from the true coefficients; Adam recovers them from
//! a start of zeros by minimising the mean squared error of the simulated series. Each training
//! step differentiates through every step of the scan; `truncate_gradient(k)` would pass
//! gradients back through only the last `k` (the example prints how that changes the gradient).
//! Then the Hessian-vector product of the loss (forward over reverse through the scan) checks
//! the curvature against finite differences of the gradient.
//!
//! Run: `cargo run --release --example ar_fit [-- <steps> <batch> <iterations>]`

use kiln::prelude::*;
use kiln::scan::Scan;
use std::time::Instant;

/// The simulated series `[steps, batch]` for coefficients `(a, b, c)` (scalars, possibly with
/// gradients), from two rows of initial values and the input `u` (`[steps, batch]`).
fn simulate(coef: &Float64, init: &Tensor<f64>, u: &Tensor<f64>) -> Tensor<f64> {
    let c = |i: usize| Tensor::from_array(kiln::gather(coef, &UInt32::from(i as u32)), &[]);
    let r = Scan::new()
        .sequence(u)
        .output_taps(init, &[-2, -1])
        .non_sequence(&c(0))
        .non_sequence(&c(1))
        .non_sequence(&c(2))
        .label("ar2")
        .run(|s| {
            let y = &(s.out(0, -1) * s.non_seq(0)) + &(s.out(0, -2) * s.non_seq(1));
            &y + &(s.seq(0, 0) * s.non_seq(2))
        })
        .expect("the recurrence");
    r.output(0)
}

/// `[1.234e-1, …]`.
fn sci(v: &[f64]) -> String {
    let parts: Vec<String> = v.iter().map(|x| format!("{x:.4e}")).collect();
    format!("[{}]", parts.join(", "))
}

/// Mean squared error of the simulation against `data`.
fn loss(coef: &Float64, init: &Tensor<f64>, u: &Tensor<f64>, data: &Tensor<f64>) -> Float64 {
    let d = &simulate(coef, init, u) - data;
    (d.array() * d.array()).sum() / data.len() as f64
}

fn main() -> kiln::Result<()> {
    let mut args = std::env::args().skip(1);
    let mut arg = |d: usize| args.next().and_then(|s| s.parse().ok()).unwrap_or(d);
    let (steps, batch, iters) = (arg(100), arg(64), arg(300));

    let wave = |k: usize| ((k * 7919 % 1000) as f64 / 1000.0 - 0.5) * 0.5;
    let u = Tensor::from_vec((0..steps * batch).map(wave).collect(), &[steps, batch]);
    let init = Tensor::from_vec(
        (0..2 * batch).map(|k| (k % 7) as f64 * 0.1).collect(),
        &[2, batch],
    );
    let truth = Float64::from_slice(&[1.2, -0.5, 0.3]);
    let data = simulate(&truth, &init, &u);
    data.eval();

    let mut coef = Float64::zeros(3);
    let mut opt = kiln::opt::Adam::new(0.02).init(&coef);
    let t0 = Instant::now();
    for it in 0..iters {
        coef.enable_grad();
        let l = loss(&coef, &init, &u, &data);
        l.backward();
        opt.step(&mut coef);
        if it % 50 == 0 || it + 1 == iters {
            println!(
                "step {it:>4}: loss {:.3e}, (a, b, c) = {:?}",
                l.item(),
                coef.to_vec()
            );
        }
    }
    let per_step = t0.elapsed().as_secs_f64() * 1e3 / iters as f64;
    println!(
        "fitted (a, b, c) = {:.4?} (true {:?}); {per_step:.2} ms per step ({steps} scan steps x {batch} series: forward, backward through every step, update)",
        coef.to_vec(),
        truth.to_vec()
    );

    // truncated backpropagation through time: the gradient from the last 10 steps only
    let at = Float64::from_slice(&[1.0, -0.3, 0.2]);
    let full = kiln::grad(|c: &Float64| loss(c, &init, &u, &data), &at)?;
    let truncated = kiln::grad(
        |c: &Float64| {
            let cf = |i: usize| Tensor::from_array(kiln::gather(c, &UInt32::from(i as u32)), &[]);
            let r = Scan::new()
                .sequence(&u)
                .output_taps(&init, &[-2, -1])
                .non_sequence(&cf(0))
                .non_sequence(&cf(1))
                .non_sequence(&cf(2))
                .truncate_gradient(10)
                .run(|s| {
                    let y = &(s.out(0, -1) * s.non_seq(0)) + &(s.out(0, -2) * s.non_seq(1));
                    &y + &(s.seq(0, 0) * s.non_seq(2))
                })
                .expect("the recurrence");
            let d = &r.output::<f64>(0) - &data;
            (d.array() * d.array()).sum() / data.len() as f64
        },
        &at,
    )?;
    println!(
        "gradient at (1.0, -0.3, 0.2): full {}, last 10 steps only {}",
        sci(&full.to_vec()),
        sci(&truncated.to_vec())
    );

    // curvature: the Hessian times a direction, forward over reverse through the scan, against
    // central differences of the gradient
    let v = Float64::from_slice(&[1.0, 0.5, -0.25]);
    let t1 = Instant::now();
    let hv = kiln::hvp(|c: &Float64| loss(c, &init, &u, &data), &at, &v)?.to_vec();
    let hvp_ms = t1.elapsed().as_secs_f64() * 1e3;
    let h = 1e-6;
    let g = |s: f64| -> kiln::Result<Vec<f64>> {
        let x: Vec<f64> = at
            .to_vec()
            .iter()
            .zip(v.to_vec())
            .map(|(a, b)| a + s * b)
            .collect();
        Ok(kiln::grad(
            |c: &Float64| loss(c, &init, &u, &data),
            &Float64::from_slice(&x),
        )?
        .to_vec())
    };
    let (gp, gm) = (g(h)?, g(-h)?);
    let fd: Vec<f64> = gp
        .iter()
        .zip(&gm)
        .map(|(p, m)| (p - m) / (2.0 * h))
        .collect();
    println!(
        "Hessian-vector product {} ({hvp_ms:.1} ms); finite differences {}",
        sci(&hv),
        sci(&fd)
    );
    Ok(())
}
