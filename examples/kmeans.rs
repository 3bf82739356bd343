//! k-means clustering of points in the plane: the program a user writes with kiln.
//!
//! One iteration assigns every point to its nearest centroid (one fused kernel over the points)
//! and accumulates each cluster's coordinate sums and point count with `scatter_reduce(Add)`
//! into arrays of k elements; the new centroids are sums / counts. The scatters fuse into the
//! assignment kernel, and because their targets are small, each block of points accumulates into
//! private copies that are merged once per block (see "Scatters into few bins" in the
//! architecture notes) instead of every point updating the same k elements.
//!
//! ```text
//! cargo run --release --example kmeans [points] [clusters] [iterations]   # 1_000_000 8 10
//! ```

use kiln::prelude::*;
use std::time::Instant;

/// Deterministic points around `k` true centres (a small LCG; no dependencies).
pub(crate) fn make_points(n: usize, k: usize) -> (Vec<f32>, Vec<f32>) {
    let mut s = 0x2545_f491_4f6c_dd1du64;
    let mut next = move || {
        s = s
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        ((s >> 40) as f32) / (1u64 << 24) as f32
    };
    let (mut xs, mut ys) = (Vec::with_capacity(n), Vec::with_capacity(n));
    for i in 0..n {
        let c = (i % k) as f32;
        let (cx, cy) = ((c * 2.4).cos() * 10.0, (c * 2.4).sin() * 10.0);
        xs.push(cx + (next() - 0.5) * 6.0);
        ys.push(cy + (next() - 0.5) * 6.0);
    }
    (xs, ys)
}

/// One k-means iteration: nearest centroid per point, then the per-cluster means. Clusters that
/// lost every point keep their old centroid.
pub(crate) fn step(
    x: &Float32,
    y: &Float32,
    cx: &Float32,
    cy: &Float32,
) -> (Float32, Float32, UInt32) {
    let k = cx.len();
    let mut best = Float32::full(f32::INFINITY, x.len());
    let mut label = UInt32::zeros(x.len());
    for c in 0..k {
        // the centroid as a size-1 array gathered from the evaluated centroids: its value is a
        // kernel input, not a literal baked into the code, so the kernel is compiled once
        let i = UInt32::from(c as u32);
        let (dx, dy) = (x - &gather(cx, &i), y - &gather(cy, &i));
        let d = &dx * &dx + &dy * &dy;
        let closer = d.lt(&best);
        best = select(&closer, &d, &best);
        label = select(&closer, c as u32, &label);
    }
    let (mut sx, mut sy, mut count) = (Float32::zeros(k), Float32::zeros(k), UInt32::zeros(k));
    scatter_reduce(ReduceOp::Add, &mut sx, x, &label);
    scatter_reduce(ReduceOp::Add, &mut sy, y, &label);
    scatter_reduce(ReduceOp::Add, &mut count, 1u32, &label);
    let n = count.cast::<f32>();
    let empty = n.eq(0.0);
    let nx = select(&empty, cx, &(&sx / &n));
    let ny = select(&empty, cy, &(&sy / &n));
    kiln::eval!(nx, ny, count);
    (nx, ny, count)
}

fn main() {
    let arg = |i: usize, default: usize| -> usize {
        std::env::args()
            .nth(i)
            .map(|a| {
                a.replace('_', "").parse().unwrap_or_else(|_| {
                    eprintln!("usage: kmeans [points] [clusters] [iterations], got {a:?}");
                    std::process::exit(2)
                })
            })
            .unwrap_or(default)
    };
    let (n, k, iters) = (arg(1, 1_000_000), arg(2, 8).max(1), arg(3, 10));
    let (xs, ys) = make_points(n, k);
    let (x, y) = (Float32::from_slice(&xs), Float32::from_slice(&ys));
    // start from the first k points
    let mut cx = Float32::from_slice(&xs[..k.min(n)]);
    let mut cy = Float32::from_slice(&ys[..k.min(n)]);
    println!(
        "k-means: {n} points, {k} clusters, {iters} iterations, backend {}",
        kiln::backend()
    );
    let before = kiln::stats();
    let start = Instant::now();
    let mut times = Vec::new();
    let mut count = UInt32::zeros(k);
    for _ in 0..iters {
        let t = Instant::now();
        (cx, cy, count) = step(&x, &y, &cx, &cy);
        times.push(t.elapsed().as_secs_f64() * 1e3);
    }
    let total = start.elapsed().as_secs_f64() * 1e3;
    let stats = kiln::stats();
    println!("centroids (x, y, points):");
    for ((a, b), c) in cx.to_vec().iter().zip(cy.to_vec()).zip(count.to_vec()) {
        println!("  ({a:8.3}, {b:8.3})  {c}");
    }
    let mut sorted = times.clone();
    sorted.sort_by(f64::total_cmp);
    println!(
        "time: {total:.1} ms in all; first iteration {:.2} ms (compiles), median {:.2} ms",
        times.first().copied().unwrap_or(0.0),
        sorted.get(sorted.len() / 2).copied().unwrap_or(0.0)
    );
    println!(
        "kernels compiled {}, launches {}",
        stats.kernels_compiled - before.kernels_compiled,
        stats.launches - before.launches
    );
}
