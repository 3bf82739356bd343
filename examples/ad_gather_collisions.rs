//! Is the gradient of a gather dominated by collisions in its adjoint scatter-add? 10M lanes
//! gather from few sources (every source hit millions of times) or from a permutation of 10M
//! sources (no two lanes hit one source); for each, the forward, the gradient kiln computes,
//! and the two adjoints it can choose from on their own: a scatter-add, and one one-hot sum per
//! source (what kiln uses for few sources). Prints times; asserts only that both adjoints agree.
//!
//! Last, the same for two tensor views whose adjoints are views too (a transpose and a strided
//! slice): their gradient should cost about what their forward does.
//!
//! `cargo run --release --example ad_gather_collisions [lanes]`
use kiln::prelude::*;
use std::time::Instant;

fn best(mut f: impl FnMut()) -> f64 {
    let mut t = f64::INFINITY;
    for _ in 0..3 {
        let s = Instant::now();
        f();
        t = t.min(s.elapsed().as_secs_f64() * 1e3);
    }
    t
}

fn main() {
    let n: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(10_000_000);
    let w = Float32::linspace(0.0, 1.0, n);
    w.eval();
    let wv = w.to_vec();
    let forward = |src: usize, idx: &UInt32| {
        let x = Float32::linspace(-1.0, 1.0, src);
        x.eval();
        best(|| {
            let y = (gather(&x, idx) * &w).sum();
            y.eval();
        })
    };
    let gradient = |src: usize, idx: &UInt32| {
        let mut x = Float32::linspace(-1.0, 1.0, src);
        x.eval();
        x.enable_grad();
        best(|| {
            x.clear_grad();
            let y = (gather(&x, idx) * &w).sum();
            y.backward();
            x.grad().eval();
        })
    };
    let scatter_add = |dst: usize, idx: &UInt32| {
        let mut out = Float32::zeros(0);
        let t = best(|| {
            let mut t = Float32::zeros(dst);
            scatter_reduce(ReduceOp::Add, &mut t, &w, idx);
            t.eval();
            out = t;
        });
        (t, out)
    };
    let one_hot = |dst: usize, idx: &UInt32| {
        let zero = Float32::scalar(0.0);
        let mut out = Vec::new();
        let t = best(|| {
            out = (0..dst as u32)
                .map(|j| select(&idx.eq(j), &w, &zero).sum().item())
                .collect();
        });
        (t, out)
    };
    println!("{n} lanes (f32), best of 3, ms");
    println!("sources  forward  gradient  scatter-add  one-hot sums");
    for s in [1usize, 4, 16, 64] {
        let idx = UInt32::arange(n) % s as u32;
        idx.eval();
        let (ts, a) = scatter_add(s, &idx);
        let (to, b) = one_hot(s, &idx);
        // exact bins on the host, in f64: how far each f32 adjoint is from them
        let mut exact = vec![0.0f64; s];
        for (i, v) in wv.iter().enumerate() {
            exact[i % s] += *v as f64;
        }
        let err = |got: &[f32]| {
            got.iter()
                .zip(&exact)
                .map(|(g, e)| ((*g as f64 - e) / e.abs().max(1.0)).abs())
                .fold(0.0, f64::max)
        };
        let (ea, eb) = (err(&a.to_vec()), err(&b));
        assert!(eb < 1e-4, "one-hot sums off by {eb}");
        println!(
            "{s:7}  {:7.2}  {:8.2}  {ts:11.2}  {to:12.2}    (relative error: scatter-add {ea:.1e}, one-hot {eb:.1e})",
            forward(s, &idx),
            gradient(s, &idx)
        );
    }
    // no collisions: sequential indices, then a permutation (cache misses on top)
    let seq = UInt32::arange(n);
    seq.eval();
    // 2654435761 is odd and not a multiple of 5, so coprime with 10^k: a permutation of 0..n
    let perm = (UInt64::arange(n) * 2_654_435_761u64 % n as u64).cast::<u32>();
    perm.eval();
    for (name, idx) in [("identity", &seq), ("permuted", &perm)] {
        println!(
            "{n} sources, {name} (no collisions): forward {:7.2}  gradient {:8.2}  scatter-add {:8.2}",
            forward(n, idx),
            gradient(n, idx),
            scatter_add(n, idx).0
        );
    }
    // views: forward vs gradient (the adjoints are views, no scatter)
    let rows = 2500;
    let cols = n / rows;
    let x0 = Float32::linspace(-1.0, 1.0, rows * cols);
    x0.eval();
    let mut x = x0.clone();
    x.enable_grad();
    type View = fn(&Tensor<f32>) -> Tensor<f32>;
    let views: [(&str, View); 2] = [
        ("transpose", |t| t.transpose()),
        ("slice ..;2, 1..;3", |t| t.slice(kiln::s![..;2, 1..;3])),
    ];
    for (name, view) in views {
        let fwd = best(|| {
            let t = Tensor::from_array(x0.clone(), &[rows, cols]);
            view(&t).sum().eval();
        });
        let grad = best(|| {
            x.clear_grad();
            let t = Tensor::from_array(x.clone(), &[rows, cols]);
            (view(&t).map(|a| a * 2.0)).sum().backward();
            x.grad().eval();
        });
        println!("{rows}x{cols} {name}: forward {fwd:7.2}  gradient {grad:7.2}");
    }
}
