//! The workloads of the benchmarks, written once for `benches/core.rs` and
//! `examples/bench_report.rs`: hand-written rayon baselines (as a good Rust programmer would write
//! them: iterators LLVM vectorises, work split across threads, outputs reused) and the kiln versions.
#![allow(dead_code)]

use kiln::prelude::*;
use rayon::prelude::*;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};

/// Elements per rayon work item (256 KiB of `f32`): large enough to amortise scheduling, small
/// enough to balance two to a few dozen cores.
pub const CHUNK: usize = 1 << 16;

/// Set to measure the baselines as compiled for the target's baseline ISA only (SSE2 on x86-64),
/// as a plain `cargo build --release` without `-C target-cpu` would.
pub static GENERIC_ONLY: AtomicBool = AtomicBool::new(false);

/// Define `fn $name(args) -> ret` from a body written once: compiled for the baseline target and,
/// on x86-64, again with AVX2 enabled, chosen at run time (what `multiversion` crates do).
macro_rules! multiversion {
    (fn $name:ident($($arg:ident: $ty:ty),* $(,)?) $(-> $ret:ty)? $body:block) => {
        pub fn $name($($arg: $ty),*) $(-> $ret)? {
            #[inline(always)]
            fn generic($($arg: $ty),*) $(-> $ret)? $body
            #[cfg(target_arch = "x86_64")]
            {
                #[target_feature(enable = "avx2")]
                unsafe fn avx2($($arg: $ty),*) $(-> $ret)? {
                    generic($($arg),*)
                }
                if !GENERIC_ONLY.load(Relaxed) && std::is_x86_feature_detected!("avx2") {
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

/// `out = a * x + y` on all cores.
pub fn saxpy_rayon(a: f32, x: &[f32], y: &[f32], out: &mut [f32]) {
    out.par_chunks_mut(CHUNK)
        .zip(x.par_chunks(CHUNK))
        .zip(y.par_chunks(CHUNK))
        .for_each(|((o, x), y)| saxpy_chunk(a, x, y, o));
}

/// `dst = src` on all cores (the bandwidth reference).
pub fn copy_rayon(src: &[f32], dst: &mut [f32]) {
    dst.par_chunks_mut(CHUNK)
        .zip(src.par_chunks(CHUNK))
        .for_each(|(d, s)| d.copy_from_slice(s));
}

/// `m = m * a + x_t * b; y_t = m` over the rows of `x` (`signals` wide), from `m = 0`: the
/// moving average a fused scan computes, hand-written step-major. Each task takes a block of
/// columns (a multiple of the thread count, at most 4 096 wide so its state stays in L2) and walks
/// all rows over it, reading and writing one contiguous segment per row.
pub fn ema_rows_rayon(x: &[f32], y: &mut [f32], signals: usize, a: f32, b: f32) {
    let threads = rayon::current_num_threads().max(1);
    let parts = signals.div_ceil(4096).next_multiple_of(threads).max(1);
    let width = signals.div_ceil(parts).max(1);
    let mut tasks: Vec<Vec<&mut [f32]>> = (0..parts).map(|_| Vec::new()).collect();
    for row in y.chunks_mut(signals.max(1)) {
        for (c, piece) in row.chunks_mut(width).enumerate() {
            tasks[c].push(piece);
        }
    }
    tasks.into_par_iter().enumerate().for_each(|(c, rows)| {
        let lo = c * width;
        let mut m = vec![0.0f32; rows.first().map_or(0, |r| r.len())];
        for (t, out) in rows.into_iter().enumerate() {
            let xs = &x[t * signals + lo..][..out.len()];
            for ((mj, o), &xj) in m.iter_mut().zip(out.iter_mut()).zip(xs) {
                *mj = *mj * a + xj * b;
                *o = *mj;
            }
        }
    });
}

/// The fused chain of the README, one element.
#[inline(always)]
pub fn chain_scalar(x: f32) -> f32 {
    (x * x + 1.0).tanh() * (-x).exp() + x.abs().sqrt()
}

/// `out = chain(x)` on all cores with std's `tanh`, `exp` and `sqrt`.
pub fn chain_rayon(x: &[f32], out: &mut [f32]) {
    out.par_chunks_mut(CHUNK)
        .zip(x.par_chunks(CHUNK))
        .for_each(|(o, x)| {
            for (o, &x) in o.iter_mut().zip(x) {
                *o = chain_scalar(x);
            }
        });
}

/// pcg32's LCG multiplier.
pub const PCG_MULT: u64 = 6_364_136_223_846_793_005;
/// pcg32's default initial state (`PCG32_INITIALIZER`).
pub const PCG_INITSTATE: u64 = 0x853c_49e6_748f_ea9b;

/// One pcg32 step (`pcg32_random_r`): advance the state, return XSH RR of the old state.
#[inline(always)]
pub fn pcg32_next(state: &mut u64, inc: u64) -> u32 {
    let old = *state;
    *state = old.wrapping_mul(PCG_MULT).wrapping_add(inc);
    let xorshifted = (((old >> 18) ^ old) >> 27) as u32;
    xorshifted.rotate_right((old >> 59) as u32)
}

/// `pcg32_srandom_r(initstate, initseq)`: the generator's `(state, inc)`.
#[inline(always)]
pub fn pcg32_seed(initstate: u64, initseq: u64) -> (u64, u64) {
    let inc = (initseq << 1) | 1;
    let mut state = 0u64;
    pcg32_next(&mut state, inc);
    state = state.wrapping_add(initstate);
    pcg32_next(&mut state, inc);
    (state, inc)
}

/// A uniform `f32` in `[0, 1)` from the top 23 bits of a draw (as `Pcg32::next_f32`).
#[inline(always)]
pub fn pcg32_f32(state: &mut u64, inc: u64) -> f32 {
    f32::from_bits((pcg32_next(state, inc) >> 9) | 0x3f80_0000) - 1.0
}

multiversion! {
    fn monte_carlo_range(start: u64, end: u64) -> u64 {
        (start..end)
            .map(|i| {
                let (mut s, inc) = pcg32_seed(PCG_INITSTATE, i);
                let x = pcg32_f32(&mut s, inc) * 2.0 - 1.0;
                let y = pcg32_f32(&mut s, inc) * 2.0 - 1.0;
                let z = pcg32_f32(&mut s, inc) * 2.0 - 1.0;
                u64::from(x * x + y * y + z * z < 1.0)
            })
            .sum()
    }
}

/// Number of the `n` points (lane `i` on pcg32 stream `i`) inside the unit sphere, on all cores.
pub fn monte_carlo_rayon(n: usize) -> u64 {
    (0..n.div_ceil(CHUNK))
        .into_par_iter()
        .map(|c| {
            let start = c * CHUNK;
            monte_carlo_range(start as u64, (start + CHUNK).min(n) as u64)
        })
        .sum()
}

// kiln versions of the same workloads

pub fn monte_carlo_kiln(n: usize) -> u64 {
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

pub fn chain_kiln(x: &Float32) -> Float32 {
    (x * x + 1.0).tanh() * (-x).exp() + x.abs().sqrt()
}

/// Chains per call of the freezing workload.
pub const FREEZE_EVALS: usize = 20;
/// Traced ops per chain of the freezing workload.
pub const FREEZE_CHAIN: usize = 100;

/// The freezing workload (a "training step" shape): 20 evaluations, each of a 100-op chain of
/// multiplies and adds on the previous result.
pub fn freeze_step(x: &Float32, a: &Float32) -> Float32 {
    let mut y = x.clone();
    for _ in 0..FREEZE_EVALS {
        for j in 0..FREEZE_CHAIN / 2 {
            y = &y * a + (j as f32) * 1e-3;
        }
        y.eval();
    }
    y
}

/// A nearly empty function for the replay overhead: 20 evaluations of one op each on 16 lanes.
pub fn freeze_tiny(x: &Float32) -> Float32 {
    let mut y = x.clone();
    for _ in 0..FREEZE_EVALS {
        y = &y + 1.0;
        y.eval();
    }
    y
}

/// Side of the square matrices of the tensor rows.
pub const TENSOR_SIDE: usize = 4096;

/// Row means of a row-major `side × side` matrix, one rayon task per chunk of rows.
pub fn mean_rows_rayon(a: &[f32], side: usize, out: &mut [f32]) {
    out.par_chunks_mut(64).enumerate().for_each(|(c, o)| {
        for (k, v) in o.iter_mut().enumerate() {
            let r = c * 64 + k;
            let row = &a[r * side..(r + 1) * side];
            // sixteen partial sums so that LLVM can vectorise (float addition does not reassociate)
            let mut acc = [0f32; 16];
            let chunks = row.chunks_exact(16);
            let rest: f32 = chunks.remainder().iter().sum();
            for c in chunks {
                for k in 0..16 {
                    acc[k] += c[k];
                }
            }
            *v = (acc.iter().sum::<f32>() + rest) / side as f32;
        }
    });
}

/// `out = transpose(a) * 2 + 1` for a row-major `side × side` matrix, in 64 × 64 tiles (each tile
/// read row by row and written column by column while it sits in cache), rows of tiles in parallel.
pub fn transpose_affine_tiled(a: &[f32], side: usize, out: &mut [f32]) {
    const T: usize = 64;
    out.par_chunks_mut(T * side)
        .enumerate()
        .for_each(|(bi, block)| {
            // block holds output rows bi*T .. (bi+1)*T, i.e. input columns
            for bj in (0..side).step_by(T) {
                for i in 0..T.min(side - bi * T) {
                    let orow = &mut block[i * side..(i + 1) * side];
                    for j in bj..(bj + T).min(side) {
                        orow[j] = a[j * side + bi * T + i] * 2.0 + 1.0;
                    }
                }
            }
        });
}

// ---------------------------------------------------------------------------------------------
// Control flow (issue: symbolic loops, conditionals and calls)

/// Lanes and steps of the long-loop workload (`x = x * 0.999 + 0.001`).
pub const LOOP_LANES: usize = 10_000;
pub const LOOP_STEPS: u32 = 1000;

/// Collatz steps of `x` (wrapping u32 arithmetic, like the kiln kernel).
pub fn collatz_scalar(mut x: u32) -> u32 {
    let mut n = 0;
    while x != 1 {
        x = if x & 1 == 0 {
            x >> 1
        } else {
            x.wrapping_mul(3).wrapping_add(1)
        };
        n += 1;
    }
    n
}

/// Collatz steps of `1..=n`, one lane at a time on every core.
pub fn collatz_rayon(out: &mut [u32]) {
    use rayon::prelude::*;
    out.par_chunks_mut(4096).enumerate().for_each(|(c, o)| {
        for (i, v) in o.iter_mut().enumerate() {
            *v = collatz_scalar((c * 4096 + i) as u32 + 1);
        }
    });
}

/// Collatz steps in kiln: one symbolic loop.
pub fn collatz_kiln(n: usize) -> UInt32 {
    let x = UInt32::arange(n) + 1u32;
    let (_, steps) = kiln::while_loop(
        (x, UInt32::zeros(n)),
        |(x, _)| x.ne(1u32),
        |(x, n)| {
            (
                select(&(x & 1u32).eq(0u32), &(x >> 1u32), &(x * 3u32 + 1u32)),
                n + 1u32,
            )
        },
    )
    .expect("collatz loop");
    steps
}

/// `LOOP_STEPS` steps of `x = x * 0.999 + 0.001`, 64 lanes at a time (so LLVM vectorises the
/// lanes and several vectors hide the chain's latency), on every core.
pub fn long_loop_rayon(x: &mut [f32]) {
    use rayon::prelude::*;
    x.par_chunks_mut(64).for_each(|c| {
        for _ in 0..LOOP_STEPS {
            for v in c.iter_mut() {
                *v = *v * 0.999 + 0.001;
            }
        }
    });
}

/// The same loop in kiln: a counter in the state, one kernel.
pub fn long_loop_kiln(x: &Float32) -> Float32 {
    let n = x.len();
    let (y, _) = kiln::while_loop(
        (x.clone(), UInt32::zeros(n)),
        |(_, i)| i.lt(LOOP_STEPS),
        |(x, i)| (x * 0.999 + 0.001, i + 1u32),
    )
    .expect("long loop");
    y
}

/// The four targets of the switch workload, on `(x, y)`.
pub fn switch_scalar(id: u32, x: f32, y: f32) -> f32 {
    match id {
        0 => x * y,
        1 => x * x * 3.25,
        2 => x + y,
        _ => (x * x + y * y).sqrt(),
    }
}

/// The switch workload by hand: `out[i] = target[i % 4](x[i], y[i])`.
pub fn switch_rayon(x: &[f32], y: &[f32], out: &mut [f32]) {
    use rayon::prelude::*;
    out.par_chunks_mut(CHUNK).enumerate().for_each(|(c, o)| {
        let b = c * CHUNK;
        for (i, v) in o.iter_mut().enumerate() {
            let j = b + i;
            *v = switch_scalar(j as u32 % 4, x[j], y[j]);
        }
    });
}

/// The switch workload in kiln: four targets, lanes picking theirs by `id`.
pub fn switch_kiln(id: &UInt32, p: &Vector2f) -> Float32 {
    let f0 = |p: &Vector2f| p.x() * p.y();
    let f1 = |p: &Vector2f| p.x() * p.x() * 3.25;
    let f2 = |p: &Vector2f| p.x() + p.y();
    let f3 = |p: &Vector2f| (p.x() * p.x() + p.y() * p.y()).sqrt();
    kiln::switch(id, &[&f0, &f1, &f2, &f3], p).expect("switch")
}
