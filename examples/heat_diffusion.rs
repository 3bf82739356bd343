//! Heat diffusion on a 2-d plate with a stencil: `u ← u + α·∇²u`, one fused kernel per step.
//!
//! The Laplacian is written for one element with relative offsets; `Boundary::Nearest` makes the
//! plate's edges insulated (the ghost cell outside an edge equals the edge), so no heat leaves and
//! the total stays what it was. The update fuses with the stencil: each step is one launch that
//! reads `u` once and writes the new `u`, interior lanes as plain vector loads.
//!
//! Run: `cargo run --release --example heat_diffusion [-- <grid side> <steps>]`

use kiln::prelude::*;
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
    let t = Instant::now();
    for _ in 1..steps {
        u = &u + &(laplacian.apply(&u)? * alpha);
        u.eval();
    }
    let elapsed = t.elapsed();
    let after = kiln::stats();

    let heat_after = u.array().sum().item() as f64;
    let centre = u.get(&[n / 2, n / 2]).item();
    let corner = u.get(&[0, 0]).item();
    let per_step = elapsed.as_secs_f64() / (steps - 1).max(1) as f64;
    let bytes = 8.0 * (n * n) as f64; // read u, write the new u
    println!(
        "heat diffusion on a {n}×{n} plate, {steps} steps of u ← u + {alpha}·∇²u (insulated edges)"
    );
    println!("  total heat: {heat_before:.1} before, {heat_after:.1} after (insulated: it stays)");
    println!("  temperature: centre {centre:.3}, corner {corner:.6}");
    println!(
        "  cost: first step {:.1} ms (tracing + compiling), then {:.3} ms per step = {:.1} GB/s on backend {}",
        first.as_secs_f64() * 1e3,
        per_step * 1e3,
        bytes / per_step / 1e9,
        kiln::backend()
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
