//! Criterion benchmarks: each workload of `examples/bench_report.rs`, kiln and a hand-written rayon
//! loop side by side in one group, at sizes that keep `cargo bench` to a few minutes.
//!
//! ```text
//! cargo bench --bench core                 # everything
//! cargo bench --bench core -- monte_carlo  # one group
//! ```
//!
//! `examples/bench_report.rs` measures the full-size (10M) versions against the issue's targets.

use criterion::{black_box, criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use kiln::prelude::*;
use std::time::Duration;

/// Elements per workload (the 10M of the report would make `cargo bench` slow). At this size the
/// saxpy operands (12 MiB) mostly fit in a large L3, so that group tracks code quality and
/// launch overhead rather than DRAM bandwidth; the report measures the latter.
const N: usize = 1 << 20;
#[path = "shared/workloads.rs"]
mod workloads;
use workloads::*;

// -------------------------------------------------------------------------------------------------
// Groups

fn saxpy(c: &mut Criterion) {
    let a = 1.5f32;
    let xs: Vec<f32> = (0..N).map(|i| (i % 1000) as f32 * 0.001).collect();
    let ys: Vec<f32> = (0..N).map(|i| (i % 777) as f32 * 0.5).collect();
    let x = Float32::from_slice(&xs);
    let y = Float32::from_slice(&ys);
    let mut out = vec![0.0f32; N];

    let mut g = c.benchmark_group("saxpy");
    g.throughput(Throughput::Bytes(12 * N as u64));
    g.bench_function(BenchmarkId::new("kiln", N), |b| {
        b.iter(|| {
            let r = &x * a + &y;
            r.eval();
            r
        })
    });
    g.bench_function(BenchmarkId::new("rayon", N), |b| {
        b.iter(|| saxpy_rayon(a, black_box(&xs), black_box(&ys), &mut out))
    });
    // a copy moves 8 B/elem, not 12: its throughput line is the copy bandwidth
    g.throughput(Throughput::Bytes(8 * N as u64));
    g.bench_function(BenchmarkId::new("rayon_copy", N), |b| {
        b.iter(|| copy_rayon(black_box(&xs), &mut out))
    });
    g.finish();
}

fn fused_chain(c: &mut Criterion) {
    let x = Float32::linspace(-2.0, 2.0, N);
    x.eval();
    let xs = x.to_vec();
    let mut out = vec![0.0f32; N];

    let mut g = c.benchmark_group("fused_chain");
    g.throughput(Throughput::Elements(N as u64));
    g.bench_function(BenchmarkId::new("kiln", N), |b| {
        b.iter(|| {
            let y = (&x * &x + 1.0).tanh() * (-&x).exp() + x.abs().sqrt();
            y.eval();
            y
        })
    });
    g.bench_function(BenchmarkId::new("rayon_std", N), |b| {
        b.iter(|| chain_rayon(black_box(&xs), &mut out))
    });
    g.finish();
}

fn monte_carlo(c: &mut Criterion) {
    let mut g = c.benchmark_group("monte_carlo");
    g.throughput(Throughput::Elements(N as u64));
    g.bench_function(BenchmarkId::new("kiln", N), |b| {
        b.iter(|| monte_carlo_kiln(black_box(N)))
    });
    g.bench_function(BenchmarkId::new("rayon", N), |b| {
        b.iter(|| monte_carlo_rayon(black_box(N)))
    });
    g.finish();
}

fn cached_launch(c: &mut Criterion) {
    const SMALL: usize = 1024;
    let x = Float32::arange(SMALL);
    x.eval();
    let xs = x.to_vec();
    let mut out = vec![0.0f32; SMALL];

    let mut g = c.benchmark_group("cached_launch");
    g.throughput(Throughput::Elements(SMALL as u64));
    g.bench_function(BenchmarkId::new("kiln", SMALL), |b| {
        b.iter(|| {
            let y = &x * 2.0 + 1.0;
            y.eval();
            y
        })
    });
    // the same work without any launch machinery: a plain loop on the calling thread
    g.bench_function(BenchmarkId::new("plain_loop", SMALL), |b| {
        b.iter(|| {
            for (o, &x) in out.iter_mut().zip(black_box(&xs)) {
                *o = x * 2.0 + 1.0;
            }
        })
    });
    g.finish();
}

/// Function freezing: the 20 × 100-op step traced on every call vs replayed.
fn freezing(c: &mut Criterion) {
    let mut g = c.benchmark_group("freeze_20x100");
    for n in [1024usize, 16_384] {
        let x = kiln::make_opaque(&Float32::linspace(0.0, 1.0, n));
        let a = kiln::make_opaque(&Float32::full(0.999, n));
        g.bench_function(BenchmarkId::new("unfrozen", n), |b| {
            b.iter(|| freeze_step(&x, &a))
        });
        let mut frozen = kiln::freeze(|x: &Float32, a: &Float32| -> Float32 { freeze_step(x, a) });
        g.bench_function(BenchmarkId::new("frozen", n), |b| {
            b.iter(|| frozen.call(&x, &a).unwrap())
        });
    }
    g.finish();
}

fn config() -> Criterion {
    Criterion::default()
        .sample_size(20)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
}

criterion_group! {
    name = benches;
    config = config();
    targets = saxpy, fused_chain, monte_carlo, cached_launch, freezing
}
criterion_main!(benches);
