//! The volume of the unit sphere by Monte Carlo integration (the seed's "more complex example").
//!
//! n random points in [-1, 1]^3, one PCG32 stream per point; the fraction inside the unit sphere
//! estimates (4/3 π) / 2^3 = π/6 ≈ 0.523599. The whole computation — seeding, three draws, the
//! norm, the comparison — is traced and fused into one kernel, followed by a count. The second
//! run traces the same program again and finds the kernel in the cache.
//!
//! ```text
//! cargo run --release --example monte_carlo [n]        # n defaults to 10_000_000
//! KILN_BACKEND=interp cargo run --release --example monte_carlo 100000
//! ```

use kiln::prelude::*;
use std::time::{Duration, Instant};

/// One run: trace the estimate for `n` points, then evaluate it. Returns the inside fraction, the
/// time spent tracing and the time spent evaluating (compile if needed, run, count).
/// `show_trace` prints `whos()` between the two.
fn estimate(n: usize, show_trace: bool) -> (f64, Duration, Duration) {
    let start = Instant::now();
    let mut rng = Pcg32::new(n);
    let v = Vector3f::new(
        rng.next_f32() * 2.0 - 1.0,
        rng.next_f32() * 2.0 - 1.0,
        rng.next_f32() * 2.0 - 1.0,
    );
    let inside = v.norm().lt(1.0).label("inside");
    // Drop the generator and the points: only `inside` is still referenced, so everything else
    // lives in registers of the fused kernel instead of memory.
    drop((v, rng));
    let trace = start.elapsed();
    if show_trace {
        println!("traced; pending variables (nothing has run yet):");
        print_whos();
    }
    let start = Instant::now();
    let count = inside.count();
    (count as f64 / n as f64, trace, start.elapsed())
}

/// `whos()` with long listings shortened to their first and last rows and the totals.
fn print_whos() {
    let text = kiln::whos().to_string();
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    let (rows, totals): (Vec<&str>, Vec<&str>) = lines
        .iter()
        .skip(1)
        .partition(|l| l.trim_start().starts_with(|c: char| c.is_ascii_digit()));
    println!("{}", lines.first().copied().unwrap_or(""));
    if rows.len() <= 8 {
        rows.iter().for_each(|r| println!("{r}"));
    } else {
        rows[..3].iter().for_each(|r| println!("{r}"));
        println!("  ... {} rows skipped ...", rows.len() - 5);
        rows[rows.len() - 2..].iter().for_each(|r| println!("{r}"));
    }
    println!();
    totals.iter().for_each(|t| println!("{t}"));
}

fn main() {
    let n: usize = match std::env::args().nth(1) {
        None => 10_000_000,
        Some(a) => match a.replace('_', "").parse() {
            Ok(n) if n > 0 => n,
            _ => {
                eprintln!("usage: monte_carlo [number of points > 0], got {a:?}");
                std::process::exit(2);
            }
        },
    };
    let exact = std::f64::consts::PI / 6.0;
    println!(
        "Volume of the unit sphere by Monte Carlo: {n} points in [-1, 1]^3, backend {}",
        kiln::backend()
    );
    println!();

    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    let (first, trace1, eval1) = estimate(n, true);
    let after_first = kiln::stats();
    println!();
    println!(
        "estimate {first:.6}  (pi/6 = {exact:.6}, abs. error {:.2e}; sphere volume {:.5} vs {:.5})",
        (first - exact).abs(),
        8.0 * first,
        8.0 * exact
    );
    println!();
    let (second, trace2, eval2) = estimate(n, false);
    let s = kiln::stats();
    assert_eq!(first, second, "same streams must give the same estimate");
    println!("            trace      eval (compile + run + count)   total");
    for (name, t, e) in [("run 1", trace1, eval1), ("run 2", trace2, eval2)] {
        println!(
            "  {name}  {:>8.2} ms  {:>8.2} ms                    {:>8.2} ms",
            ms(t),
            ms(e),
            ms(t + e)
        );
    }
    println!(
        "  run 2 reused run 1's kernel: cache hits {} -> {}, kernels compiled {} -> {}",
        after_first.cache_hits, s.cache_hits, after_first.kernels_compiled, s.kernels_compiled
    );
    println!();
    println!("kernel statistics:\n{s}");
}
