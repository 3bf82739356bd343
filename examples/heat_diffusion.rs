//! Heat diffusion on a 2-d plate with a stencil: `u ← u + α·∇²u`, one fused kernel per step.
//!
//! The Laplacian is written for one element with relative offsets; `Boundary::Nearest` makes the
//! plate's edges insulated (the ghost cell outside an edge equals the edge), so no heat leaves and
//! the total stays what it was. The update fuses with the stencil: each step is one launch that
//! reads `u` once and writes the new `u`, interior lanes as plain vector loads.
//!
//! Run: `cargo run --release --example heat_diffusion [-- <grid side> <steps>]`

use kiln::prelude::*;
use rayon::prelude::*;
use std::time::Instant;

fn main() -> kiln::Result<()> {
    let mut args = std::env::args().skip(1);
    let n: usize = args.next().and_then(|s| s.parse().ok()).unwrap_or(2048);
    let steps: usize = args.next().and_then(|s| s.parse().ok()).unwrap_or(200);
    let alpha = 0.2f32; // stable for α ≤ 0.25

    // a hot square in the middle of a cold plate
    let host: Vec<f32> = (0..n * n)
        .map(|k| {
            let (i, j) = (k / n, k % n);
            let hot = (n * 3 / 8..n * 5 / 8).contains(&i) && (n * 3 / 8..n * 5 / 8).contains(&j);
            if hot {
                100.0
            } else {
                0.0
            }
        })
        .collect();
    let mut u = Tensor::from_vec(host, &[n, n]);
    let heat_before = u.array().sum().item() as f64;

    let laplacian = kiln::stencil(|a: &Rel<f32>| {
        a.at([0, 1]) + a.at([0, -1]) + a.at([1, 0]) + a.at([-1, 0]) - 4.0 * a.at([0, 0])
    })
    .boundary(Boundary::Nearest);

    // one step to compile (the kernels are cached from then on)
    let t = Instant::now();
    u = &u + &(laplacian.apply(&u)? * alpha);
    u.eval();
    let first = t.elapsed();

    let before = kiln::stats();
    let mut step_times = Vec::with_capacity(steps);
    for _ in 1..steps {
        let t = Instant::now();
        u = &u + &(laplacian.apply(&u)? * alpha);
        u.eval();
        step_times.push(t.elapsed().as_secs_f64());
    }
    let after = kiln::stats();

    // the bandwidth reference: a plain copy of the same bytes on all cores (rayon), into a
    // buffer reused from step to step, as kiln's allocator reuses the plate's
    let copy_per_step = copy_loop(n * n, steps);

    let heat_after = u.array().sum().item() as f64;
    let centre = u.get(&[n / 2, n / 2]).item();
    let corner = u.get(&[0, 0]).item();
    // medians, here and for the copy loop: the machine may be shared
    step_times.sort_by(f64::total_cmp);
    let per_step = step_times
        .get(step_times.len() / 2)
        .copied()
        .unwrap_or(f64::NAN);
    let bytes = 8.0 * (n * n) as f64; // read u, write the new u
    println!(
        "heat diffusion on a {n}×{n} plate, {steps} steps of u ← u + {alpha}·∇²u (insulated edges)"
    );
    println!("  total heat: {heat_before:.1} before, {heat_after:.1} after (insulated: it stays)");
    println!("  temperature: centre {centre:.3}, corner {corner:.6}");
    println!(
        "  cost: first step {:.1} ms (tracing + compiling), then {:.3} ms per step (median) = {:.1} GB/s on backend {}",
        first.as_secs_f64() * 1e3,
        per_step * 1e3,
        bytes / per_step / 1e9,
        kiln::backend()
    );
    println!(
        "  copy loop (rayon, the same bytes): {:.3} ms per copy (median) = {:.1} GB/s; the step runs at {:.2}x the copy's bandwidth",
        copy_per_step * 1e3,
        bytes / copy_per_step / 1e9,
        copy_per_step / per_step
    );
    println!(
        "  per step: {:.1} launches, {:.1} kernels compiled; interior/border split launches: {}",
        (after.launches - before.launches) as f64 / (steps - 1).max(1) as f64,
        (after.kernels_compiled - before.kernels_compiled) as f64 / (steps - 1).max(1) as f64,
        after.stencil_launches - before.stencil_launches
    );
    let drift = ((heat_after - heat_before) / heat_before).abs();
    assert!(drift < 1e-3, "heat should be conserved, drifted by {drift}");
    Ok(())
}

/// Seconds per copy of `len` f32 (read one buffer, write another) on all cores, the median of
/// `steps` copies after one to touch the pages.
fn copy_loop(len: usize, steps: usize) -> f64 {
    let src: Vec<f32> = (0..len).map(|i| i as f32).collect();
    let mut dst = vec![0.0f32; len];
    let mut times = Vec::with_capacity(steps);
    for _ in 0..steps.max(2) {
        let t = Instant::now();
        dst.par_chunks_mut(1 << 16)
            .zip(src.par_chunks(1 << 16))
            .for_each(|(d, s)| d.copy_from_slice(s));
        times.push(t.elapsed().as_secs_f64());
        std::hint::black_box(&dst);
    }
    times.remove(0);
    times.sort_by(f64::total_cmp);
    times[times.len() / 2]
}
