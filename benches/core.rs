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
use rayon::prelude::*;
use std::time::Duration;

/// Elements per workload (the 10M of the report would make `cargo bench` slow). At this size the
/// saxpy operands (12 MiB) mostly fit in a large L3, so that group tracks code quality and
/// launch overhead rather than DRAM bandwidth; the report measures the latter.
const N: usize = 1 << 20;
/// Elements per rayon work item.
const CHUNK: usize = 1 << 16;

// -------------------------------------------------------------------------------------------------
// Hand-written baselines (as in examples/bench_report.rs)

/// Define a function from a body written once: compiled for the baseline target and, on x86-64,
/// again with AVX2 enabled, chosen at run time.
macro_rules! multiversion {
    (fn $name:ident($($arg:ident: $ty:ty),* $(,)?) $(-> $ret:ty)? $body:block) => {
        fn $name($($arg: $ty),*) $(-> $ret)? {
            #[inline(always)]
            fn generic($($arg: $ty),*) $(-> $ret)? $body
            #[cfg(target_arch = "x86_64")]
            {
                #[target_feature(enable = "avx2")]
                unsafe fn avx2($($arg: $ty),*) $(-> $ret)? {
                    generic($($arg),*)
                }
                if std::is_x86_feature_detected!("avx2") {
                    // SAFETY: the CPU supports AVX2 (checked just above).
                    return unsafe { avx2($($arg),*) };
                }
            }
            generic($($arg),*)
        }
    };
}

multiversion! {
    fn saxpy_chunk(a: f32, x: &[f32], y: &[f32], out: &mut [f32]) {
        for ((o, &x), &y) in out.iter_mut().zip(x).zip(y) {
            *o = a * x + y;
        }
    }
}

fn saxpy_rayon(a: f32, x: &[f32], y: &[f32], out: &mut [f32]) {
    out.par_chunks_mut(CHUNK)
        .zip(x.par_chunks(CHUNK))
        .zip(y.par_chunks(CHUNK))
        .for_each(|((o, x), y)| saxpy_chunk(a, x, y, o));
}

fn copy_rayon(src: &[f32], dst: &mut [f32]) {
    dst.par_chunks_mut(CHUNK)
        .zip(src.par_chunks(CHUNK))
        .for_each(|(d, s)| d.copy_from_slice(s));
}

fn chain_rayon(x: &[f32], out: &mut [f32]) {
    out.par_chunks_mut(CHUNK)
        .zip(x.par_chunks(CHUNK))
        .for_each(|(o, x)| {
            for (o, &x) in o.iter_mut().zip(x) {
                *o = (x * x + 1.0).tanh() * (-x).exp() + x.abs().sqrt();
            }
        });
}

const PCG_MULT: u64 = 6_364_136_223_846_793_005;
const PCG_INITSTATE: u64 = 0x853c_49e6_748f_ea9b;

#[inline(always)]
fn pcg32_next(state: &mut u64, inc: u64) -> u32 {
    let old = *state;
    *state = old.wrapping_mul(PCG_MULT).wrapping_add(inc);
    let xorshifted = (((old >> 18) ^ old) >> 27) as u32;
    xorshifted.rotate_right((old >> 59) as u32)
}

#[inline(always)]
fn pcg32_f32(state: &mut u64, inc: u64) -> f32 {
    f32::from_bits((pcg32_next(state, inc) >> 9) | 0x3f80_0000) - 1.0
}

multiversion! {
    fn monte_carlo_range(start: u64, end: u64) -> u64 {
        (start..end)
            .map(|i| {
                // pcg32_srandom_r(PCG_INITSTATE, i)
                let inc = (i << 1) | 1;
                let mut s = inc.wrapping_add(PCG_INITSTATE);
                s = s.wrapping_mul(PCG_MULT).wrapping_add(inc);
                let x = pcg32_f32(&mut s, inc) * 2.0 - 1.0;
                let y = pcg32_f32(&mut s, inc) * 2.0 - 1.0;
                let z = pcg32_f32(&mut s, inc) * 2.0 - 1.0;
                u64::from(x * x + y * y + z * z < 1.0)
            })
            .sum()
    }
}

fn monte_carlo_rayon(n: usize) -> u64 {
    (0..n.div_ceil(CHUNK))
        .into_par_iter()
        .map(|c| {
            let start = c * CHUNK;
            monte_carlo_range(start as u64, (start + CHUNK).min(n) as u64)
        })
        .sum()
}

fn monte_carlo_kiln(n: usize) -> u64 {
    let mut rng = Pcg32::new(n);
    let v = Vector3f::new(
        rng.next_f32() * 2.0 - 1.0,
        rng.next_f32() * 2.0 - 1.0,
        rng.next_f32() * 2.0 - 1.0,
    );
    let inside = v.squared_norm().lt(1.0);
    drop((v, rng));
    inside.count()
}

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

fn config() -> Criterion {
    Criterion::default()
        .sample_size(20)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
}

criterion_group! {
    name = benches;
    config = config();
    targets = saxpy, fused_chain, monte_carlo, cached_launch
}
criterion_main!(benches);
