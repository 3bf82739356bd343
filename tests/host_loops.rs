//! Host loops that never evaluate (issue 24, item 1): weights updated in a Rust `for` loop
//! without `eval!` must not make every iteration compile a bigger kernel. Each test counts the
//! kernels that had to be built (compiled or loaded from the disk cache) per iteration and compares
//! the weights bit for bit with the same loop written with `kiln::eval!` each iteration.

mod common;

use common::leak_checked;
use kiln::prelude::*;
use kiln_core::{with_backend, BackendKind};

/// Kernels not found in the in-memory cache so far (compiled, or loaded from disk).
fn built() -> u64 {
    let s = kiln::stats();
    s.cache_misses + s.disk_hits
}

/// Samples: three features and a 0/1 label, evaluated.
struct Data {
    x: [Float64; 3],
    y: Float64,
}

fn data(n: usize) -> Data {
    let i = Float64::arange(n);
    let x0 = (&i * 0.37).sin();
    let x1 = (&i * 0.11 + 1.0).cos();
    let x2 = (&i * 0.05).sin() * 0.5;
    let z = &x0 * 1.5 - &x1 * 2.0 + &x2 + 0.25;
    let y = select(&z.gt(0.0), 1.0, 0.0);
    kiln::eval!(x0, x1, x2, y);
    Data { x: [x0, x1, x2], y }
}

/// `iters` steps of gradient descent on the logistic loss; `eval_each`: `kiln::eval!` on the weights
/// each iteration. Returns the weights' bits, the kernels built and the launches of each iteration.
fn fit(d: &Data, iters: usize, eval_each: bool) -> ([u64; 4], Vec<u64>, Vec<u64>) {
    let n = d.y.len() as f64;
    let lr = 0.5;
    let mut w0 = Float64::scalar(0.0);
    let mut w1 = Float64::scalar(0.0);
    let mut w2 = Float64::scalar(0.0);
    let mut b = Float64::scalar(0.0);
    let mut per_iter = Vec::new();
    let mut launches = Vec::new();
    for _ in 0..iters {
        let before = built();
        let launched = kiln::stats().launches;
        let z = &d.x[0] * &w0 + &d.x[1] * &w1 + &d.x[2] * &w2 + &b;
        let p = ((-z).exp() + 1.0).rcp();
        let err = p - &d.y;
        let g0 = (&err * &d.x[0]).sum() / n;
        let g1 = (&err * &d.x[1]).sum() / n;
        let g2 = (&err * &d.x[2]).sum() / n;
        let gb = err.sum() / n;
        w0 = &w0 - g0 * lr;
        w1 = &w1 - g1 * lr;
        w2 = &w2 - g2 * lr;
        b = &b - gb * lr;
        if eval_each {
            kiln::eval!(w0, w1, w2, b);
        }
        per_iter.push(built() - before);
        launches.push(kiln::stats().launches - launched);
    }
    // (read together: one launch, as the `eval!` loop's last iteration)
    kiln::eval!(w0, w1, w2, b);
    let bits = [w0.item(), w1.item(), w2.item(), b.item()].map(f64::to_bits);
    (bits, per_iter, launches)
}

/// The uneval'd loop builds a bounded number of kernels (none after warm-up) and gives the weights
/// of the `eval!` loop bit for bit.
fn check_loop(n: usize, iters: usize) {
    let d = data(n);
    let (want, _, _) = fit(&d, iters, true);
    let (got, per_iter, _) = fit(&d, iters, false);
    assert_eq!(got, want, "n = {n}: weights differ from the eval! loop");
    let late: u64 = per_iter[4..].iter().sum();
    assert_eq!(
        late, 0,
        "n = {n}: kernels built per iteration after warm-up: {per_iter:?}"
    );
}

#[test]
fn uneval_loop_compiles_a_bounded_number_of_kernels() {
    leak_checked(|| {
        for n in [1, 16, 1000, 16383, 16384, 16385] {
            check_loop(n, 12);
        }
    });
}

/// Read only at the end, the uneval'd loop's whole graph is resolved at once: its kernels must
/// still not grow with the iterations. After a 4-iteration warm-up, a 16-iteration loop, its final
/// read included, builds no kernel.
#[test]
fn uneval_loop_read_once_builds_no_kernel_per_iteration() {
    leak_checked(|| {
        for n in [17, 16385] {
            let d = data(n);
            let (want, _, _) = fit(&d, 16, true);
            fit(&d, 4, false);
            let before = built();
            let (got, _, _) = fit(&d, 16, false);
            assert_eq!(got, want, "n = {n}");
            assert_eq!(
                built() - before,
                0,
                "n = {n}: kernels built by the 16-iteration loop"
            );
        }
    });
}

#[test]
fn uneval_loop_matches_eval_on_every_backend() {
    leak_checked(|| {
        for kind in [
            BackendKind::Interp,
            BackendKind::Cranelift,
            BackendKind::Llvm,
        ] {
            if kind == BackendKind::Llvm && kiln_core::backend::llvm::shared().is_err() {
                continue;
            }
            with_backend(kind, || {
                for n in [0, 1, 17, 16385] {
                    let d = data(n);
                    let (want, _, _) = fit(&d, 8, true);
                    let (got, _, _) = fit(&d, 8, false);
                    assert_eq!(got, want, "{kind}, n = {n}");
                }
            });
        }
    });
}

/// Kernels built and launches of each iteration of a loop whose size-1 state `w` scales an
/// evaluated array (no reduction): `eval_each` evaluates `w` every iteration.
fn scale_loop(x: &Float64, iters: usize, eval_each: bool) -> (Vec<u64>, Vec<u64>, Vec<u64>) {
    let mut w = Float64::from_slice(&[1.0]);
    let mut built_per = Vec::new();
    let mut bits = Vec::new();
    for _ in 0..iters {
        let before = built();
        w = &w * 0.5 + 1.0;
        if eval_each {
            kiln::eval!(w);
        }
        let y = x * &w;
        y.eval();
        built_per.push(built() - before);
        bits = y.to_vec().into_iter().map(f64::to_bits).collect();
    }
    bits.push(w.item().to_bits());
    (built_per, bits, vec![kiln::stats().vars_alive])
}

/// An evaluation that needs a lazy scalar an earlier launch computed evaluates it first: the
/// chain behind `w` stops growing, the kernels repeat, and every value is the `eval!` loop's.
#[test]
fn reused_scalar_state_is_evaluated() {
    leak_checked(|| {
        let x = Float64::arange(1000) * 0.25 - 3.0;
        x.eval();
        let (_, want, _) = scale_loop(&x, 20, true);
        let (per, got, alive) = scale_loop(&x, 20, false);
        assert_eq!(got, want);
        assert_eq!(per[4..].iter().sum::<u64>(), 0, "{per:?}");
        let (_, _, alive_long) = scale_loop(&x, 60, false);
        assert_eq!(alive, alive_long, "the graph grows with the iterations");
    });
}

/// A program that evaluates properly launches no more than before: per iteration of the `eval!`
/// loop, its four gradient reductions (one pass since they are lazy siblings) and one size-1
/// kernel for the weights; the loop without `eval!` launches exactly as many.
#[test]
fn no_extra_launches() {
    leak_checked(|| {
        let d = data(5000);
        let launches = || kiln::stats().launches;
        let start = launches();
        let (_, _, with_eval) = fit(&d, 10, true);
        let total_with = launches() - start;
        let per = with_eval[1];
        assert!(
            per <= 5,
            "more launches than the eager reductions made: {with_eval:?}"
        );
        assert!(with_eval[1..].iter().all(|&l| l == per), "{with_eval:?}");
        // without eval! nothing runs until the weights are read; then the same work runs
        let start = launches();
        let (_, _, without) = fit(&d, 10, false);
        let total_without = launches() - start;
        assert!(without.iter().all(|&l| l == 0), "{without:?}");
        assert!(
            total_without <= total_with,
            "without eval!: {total_without} launches, with: {total_with}"
        );
        // two reductions of one lazy expression share one pass; it is not stored
        let y = (&d.x[0] * 2.0).exp();
        let before = kiln::stats();
        let (s, m) = (y.sum(), y.reduce_max());
        kiln::eval!(s, m);
        let after = kiln::stats();
        assert_eq!(after.launches - before.launches, 1);
        assert!(!y.is_evaluated());
        drop((s, m));
    });
}

/// Size-N state a host loop never evaluates, reduced every iteration: detected (and warned about
/// once); the same loop with `eval!` is not.
#[test]
fn recomputed_state_is_detected() {
    leak_checked(|| {
        let v = Float64::arange(4096) * 0.001;
        v.eval();
        for eval_each in [true, false] {
            let before = kiln_core::schedule::recompute_detections();
            let mut x = Float64::zeros(4096);
            for _ in 0..24 {
                x = &x * 0.99 + &v;
                if eval_each {
                    kiln::eval!(x);
                }
                // (reductions are lazy: a dropped one computes nothing, so evaluate it)
                let _ = x.sum().eval();
            }
            let detected = kiln_core::schedule::recompute_detections() - before;
            assert_eq!(detected > 0, !eval_each, "eval_each = {eval_each}");
        }
    });
}

/// A frozen step with freezing turned off evaluates its outputs and `&mut` state as a frozen call
/// does: bounded kernels, the same bits as the frozen loop.
#[test]
fn disabled_frozen_step_matches_frozen() {
    leak_checked(|| {
        let v = Float64::arange(3000) * 0.001;
        v.eval();
        let run = |enabled: bool| {
            let mut f = kiln::freeze(|x: &mut Float64, v: &Float64| -> Float64 {
                *x = &*x * 0.99 + v;
                x.sum()
            })
            .enabled(enabled);
            let mut x = Float64::zeros(3000);
            let mut per = Vec::new();
            let mut sums = Vec::new();
            for _ in 0..30 {
                let before = built();
                let s = f.call(&mut x, &v).unwrap();
                per.push(built() - before);
                sums.push(s.item().to_bits());
            }
            sums.extend(x.to_vec().into_iter().map(f64::to_bits));
            (per, sums)
        };
        let (_, want) = run(true);
        let (per, got) = run(false);
        assert_eq!(got, want);
        assert_eq!(per[4..].iter().sum::<u64>(), 0, "{per:?}");
    });
}
