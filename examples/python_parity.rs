//! The Rust side of `bench/python/parity.py`: the workloads the Python front is measured on
//! (saxpy, a fused chain, Monte Carlo, a Laplacian stencil, a scan, a frozen replay, tracing),
//! written with kiln's Rust API and timed here, printed as one JSON object of medians in
//! milliseconds (the Python script runs the same code through `import kiln` in the same run).
//!
//! ```text
//! cargo run --release --example python_parity          # JSON on stdout
//! ```
use kiln::prelude::*;
use std::hint::black_box;
use std::time::Instant;

const N: usize = 10_000_000;

/// Median of `reps` timings of `f`, in milliseconds, after two warm-up calls.
fn median_ms(reps: usize, mut f: impl FnMut()) -> f64 {
    f();
    f();
    let mut t: Vec<f64> = (0..reps)
        .map(|_| {
            let s = Instant::now();
            f();
            s.elapsed().as_secs_f64() * 1e3
        })
        .collect();
    t.sort_by(|a, b| a.total_cmp(b));
    t[reps / 2]
}

fn main() {
    let x = Float32::arange(N) / N as f32;
    let y = Float32::ones(N);
    kiln::eval!(x, y);
    let saxpy = median_ms(15, || drop(black_box((&x * 2.0f32 + &y).eval().clone())));
    let chain = median_ms(15, || {
        let r = ((&x * &x + 1.0f32).tanh() * (-&x).exp()) + x.abs().sqrt();
        drop(black_box(r.eval().clone()));
    });
    let monte_carlo = median_ms(11, || {
        let mut rng = Pcg32::new(N);
        let (a, b, c) = (rng.next_f32(), rng.next_f32(), rng.next_f32());
        black_box((&a * &a + &b * &b + &c * &c).lt(1.0f32).count());
    });
    let side = 2048;
    let u = Tensor::<f32>::from_array(
        Float32::arange(side * side) / (side * side) as f32,
        &[side, side],
    );
    u.eval();
    let lap = kiln::stencil(|a: &Rel<f32>| {
        a.at([0, 1]) + a.at([0, -1]) + a.at([1, 0]) + a.at([-1, 0]) - 4.0 * a.at([0, 0])
    });
    let stencil = median_ms(15, || {
        drop(black_box(lap.apply(&u).unwrap().eval().clone()))
    });
    let lanes = 10_000;
    let x0 = Tensor::<f32>::from_array(Float32::arange(lanes) / lanes as f32, &[lanes]);
    x0.eval();
    let scan = median_ms(11, || {
        let (c, ()) = kiln::scan::Lax::new(&x0, &())
            .length(1000)
            .run(|x, _| (x * 0.999f32 + 0.001f32, ()))
            .unwrap();
        drop(black_box(c.eval().clone()));
    });
    // (the function `parity.py` freezes: two new arrays from two inputs)
    let mut frozen = kiln::freeze(|a: &Float32, b: &Float32| (a * 1.1f32 + b, b.sin()));
    let fa = Float32::arange(1024) / 1024.0f32;
    let fb = Float32::ones(1024);
    kiln::eval!(fa, fb);
    let replay = median_ms(201, || drop(black_box(frozen.call(&fa, &fb).unwrap())));
    let small = Float32::arange(1000);
    small.eval();
    let trace_ns = {
        let chain = |x: &Float32| {
            let mut v = x.clone();
            for _ in 0..25 {
                v = &v * 1.0001f32 + 0.5f32;
                v = &v - x;
                v = v.abs().sqrt();
            }
            v
        };
        median_ms(21, || {
            for _ in 0..100 {
                black_box(chain(&small));
            }
        }) * 1e6
            / (100.0 * 100.0)
    };
    println!(
        "{{\"host\": \"{}\", \"saxpy\": {saxpy}, \"fused chain\": {chain}, \"monte carlo\": {monte_carlo}, \"laplacian stencil\": {stencil}, \"scan final\": {scan}, \"frozen replay\": {replay}, \"trace ns/op\": {trace_ns}}}",
        if std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default().contains("avx512f") { "avx512f" } else { "avx2" }
    );
}
