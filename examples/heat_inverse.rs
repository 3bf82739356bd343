//! Recover the initial temperature of a plate from its temperature 100 steps later, by gradient
//! descent through the 100 stencil steps.
//!
//! The forward model is explicit diffusion, `u ← u + 0.2·∇²u`, with the plate's edge held at its
//! temperature (the Laplacian's border elements are 0: `Boundary::Skip`). The loss is
//! `Σ (u_T − observed)²`; `backward` runs each step's adjoint — a stencil with mirrored taps,
//! one kernel per step like the forward — so a gradient costs about two forwards. Diffusion
//! smooths away fine detail, so only the smooth part of the initial field can come back: the
//! example reports how close the recovered field gets, and the loss at each iteration.
//!
//! Run: `cargo run --release --example heat_inverse [-- <grid side> <iterations>]`

use kiln::prelude::*;
use std::time::Instant;

const STEPS: usize = 100;
const ALPHA: f32 = 0.2;

fn main() -> kiln::Result<()> {
    let mut args = std::env::args().skip(1);
    let n: usize = args.next().and_then(|s| s.parse().ok()).unwrap_or(256);
    let iters: usize = args.next().and_then(|s| s.parse().ok()).unwrap_or(40);

    let lap = kiln::stencil(|a: &Rel<f32>| {
        a.at([0, 1]) + a.at([0, -1]) + a.at([1, 0]) + a.at([-1, 0]) - 4.0 * a.at([0, 0])
    });
    let simulate = |u0: &Tensor<f32>| -> kiln::Result<Tensor<f32>> {
        let mut u = u0.clone();
        for _ in 0..STEPS {
            u = &u + &(lap.apply(&u)? * ALPHA);
        }
        Ok(u)
    };

    // the truth: two warm blobs; what was observed: the plate after 100 steps
    let truth = Tensor::from_vec(blobs(n), &[n, n]);
    let t = Instant::now();
    let observed = simulate(&truth)?;
    observed.eval();
    let forward = t.elapsed();

    // gradient descent from a cold plate
    let mut u0 = Tensor::<f32>::zeros(&[n, n]);
    // (the held edge feeds every later step: the largest curvature is ~17, so steps stay below 2/17)
    let lr = 0.05f32;
    let mut grad_time = Vec::with_capacity(iters);
    let mut first_loss = 0.0;
    for it in 0..iters {
        let t = Instant::now();
        let mut x = u0.array().detach();
        x.enable_grad();
        let u = simulate(&Tensor::from_array(x.clone(), &[n, n]))?;
        let d = &u - &observed;
        let loss = (d.array() * d.array()).sum();
        loss.backward();
        let g = x.grad();
        u0 = Tensor::from_array(u0.array() - &(g * lr), &[n, n]);
        u0.eval();
        let l = loss.item();
        grad_time.push(t.elapsed().as_secs_f64());
        if it == 0 {
            first_loss = l;
        }
        if it < 5 || it % 10 == 0 || it + 1 == iters {
            println!("iteration {it:3}: loss {l:.4e}");
        }
    }

    // how much of the initial field came back (relative L2 error, before and after)
    let err = |a: &Tensor<f32>| {
        let d = a - &truth;
        ((d.array() * d.array()).sum().item() / (truth.array() * truth.array()).sum().item()).sqrt()
    };
    let zero = Tensor::<f32>::zeros(&[n, n]);
    let fresh = simulate(&u0)?;
    let d = &fresh - &observed;
    let final_loss = (d.array() * d.array()).sum().item();
    grad_time.sort_by(f64::total_cmp);
    let median = grad_time[grad_time.len() / 2];
    println!();
    println!("plate {n}x{n}, {STEPS} diffusion steps, {iters} gradient steps (learning rate {lr})");
    println!(
        "loss {first_loss:.4e} -> {final_loss:.4e}; relative error of the initial field {:.3} (cold start) -> {:.3}",
        err(&zero),
        err(&u0)
    );
    println!(
        "cost: forward (100 steps) {:.2} ms the first time (compiling), one loss + gradient + update {:.2} ms (median)",
        forward.as_secs_f64() * 1e3,
        median * 1e3
    );
    let s = kiln::stats();
    println!(
        "{} kernels compiled in all, {} launches, {} stencil launches (interior/border split)",
        s.kernels_compiled, s.launches, s.stencil_launches
    );
    Ok(())
}

/// Two Gaussian blobs of heat on an `n`×`n` plate.
fn blobs(n: usize) -> Vec<f32> {
    let f = n as f32;
    (0..n * n)
        .map(|k| {
            let (i, j) = ((k / n) as f32 / f, (k % n) as f32 / f);
            let b = |ci: f32, cj: f32, w: f32| {
                (-((i - ci).powi(2) + (j - cj).powi(2)) / (2.0 * w * w)).exp()
            };
            100.0 * b(0.35, 0.4, 0.08) + 60.0 * b(0.65, 0.6, 0.05)
        })
        .collect()
}
