//! Sibling reductions share one pass (issue 24, item 4).
//!
//! `sum`, `prod`, `reduce_min` and `reduce_max` return pending size-1 arrays; reductions that are
//! evaluated together (`eval!`, a read, a kernel that uses them, a frozen call) run as one
//! multi-output kernel per source size, each lane feeding every reduction. Seen from a user's
//! side: `kiln::stats().launches` counts one launch for all of them, and every result has the
//! bits of the same reduction evaluated alone — on every backend, the interpreter the oracle.

mod common;

use common::{delta, leak_checked};
use kiln::{Float32, Float64, Int32};
use kiln_core::{with_backend, BackendKind};
use std::panic::{catch_unwind, AssertUnwindSafe};

fn backends() -> Vec<BackendKind> {
    let mut v = vec![BackendKind::Interp, BackendKind::Cranelift];
    if kiln_core::backend::llvm::shared().is_ok() {
        v.push(BackendKind::Llvm);
    }
    v
}

/// Empty, one lane, odd sizes (not multiples of any vector width) and the reduction block's
/// boundary (16 384 lanes).
const SIZES: [usize; 9] = [0, 1, 15, 17, 1000, 16_383, 16_384, 16_385, 70_001];

/// A lazy expression with values of both signs, not sorted.
fn expr(n: usize) -> Float32 {
    let i = Float32::arange(n);
    (&i * 0.37).sin() * 10.0 - &i * 1e-4
}

fn bits(a: &Float32) -> u32 {
    a.item().to_bits()
}

/// min, max and sum of one lazy expression: one launch together, each equal bit for bit to the
/// same reduction evaluated alone, and the same bits on every backend.
#[test]
fn min_max_and_sum_of_a_lazy_expression_share_one_launch() {
    leak_checked(|| {
        let mut oracle: Vec<[u32; 3]> = Vec::new();
        for (bi, b) in backends().into_iter().enumerate() {
            with_backend(b, || {
                for (k, &n) in SIZES.iter().enumerate() {
                    let y = expr(n);
                    // alone: one reduction per evaluation
                    let one = 1; // (an empty expression's kernel is launched too, over no lanes)
                                 // each made and evaluated before the next exists
                    let alone = [0, 1, 2].map(|k| {
                        let r = match k {
                            0 => y.reduce_min(),
                            1 => y.reduce_max(),
                            _ => y.sum(),
                        };
                        let (_, d) = delta(|| r.eval());
                        assert_eq!(d.launches, one, "{b:?} n={n}: a lone reduction");
                        bits(&r)
                    });
                    let (lo, hi, s) = (y.reduce_min(), y.reduce_max(), y.sum());
                    assert!(!lo.is_evaluated(), "a reduction is pending until evaluated");
                    let (_, d) = delta(|| kiln::eval!(lo, hi, s));
                    assert_eq!(d.launches, one, "{b:?} n={n}: min, max and sum in one pass");
                    assert!(!y.is_evaluated(), "the expression itself is never stored");
                    let together = [bits(&lo), bits(&hi), bits(&s)];
                    assert_eq!(together, alone, "{b:?} n={n}: together vs alone");
                    if n == 0 {
                        assert_eq!(lo.item(), f32::INFINITY);
                        assert_eq!(hi.item(), f32::NEG_INFINITY);
                        assert_eq!(s.item().to_bits(), 0.0f32.to_bits());
                    }
                    if bi == 0 {
                        oracle.push(together);
                    } else {
                        assert_eq!(together, oracle[k], "{b:?} n={n}: vs the interpreter");
                    }
                }
            });
        }
    });
}

/// A NaN reaches both the minimum and the maximum of a shared pass, as it does alone.
#[test]
fn nan_propagates_through_a_shared_pass() {
    leak_checked(|| {
        for n in [1usize, 17, 16_385] {
            let i = Float64::arange(n);
            // NaN at the last lane (0/0 there)
            let y = (&i - (n as f64 - 1.0)) / (&i - (n as f64 - 1.0)) + &i;
            let (lo, hi) = (y.reduce_min(), y.reduce_max());
            let (_, d) = delta(|| kiln::eval!(lo, hi));
            assert_eq!(d.launches, 1);
            assert!(lo.item().is_nan() && hi.item().is_nan(), "n={n}");
            // and from a stored array (min and max in one loop)
            y.eval();
            let (lo, hi) = (y.reduce_max(), y.reduce_min());
            kiln::eval!(lo, hi);
            assert!(lo.item().is_nan() && hi.item().is_nan(), "stored, n={n}");
        }
    });
}

/// The five sums of a logistic-regression gradient (one sigmoid) run as one kernel that computes
/// the sigmoid once per lane; each sum has the bits it has alone.
#[test]
fn five_gradient_sums_of_one_sigmoid_share_one_launch() {
    leak_checked(|| {
        for b in backends() {
            with_backend(b, || {
                for n in [1usize, 1000, 16_385, 100_000] {
                    let t = Float32::linspace(-1.0, 1.0, n);
                    let (x0, x1, x2) = (t.clone(), (&t * 3.0).sin(), (&t * 5.0).cos());
                    let y = kiln::ops::select(&(&t * 7.0).sin().gt(0.0), 1.0f32, 0.0f32);
                    kiln::eval!(x0, x1, x2, y);
                    let w = [0.5f32, -0.25, 0.125, 0.1].map(Float32::scalar);
                    let z = &x0 * &w[0] + &x1 * &w[1] + &x2 * &w[2] + &w[3];
                    let p = Float32::scalar(1.0) / ((-&z).exp() + 1.0);
                    let r = &p - &y;
                    let grad = |k: usize| match k {
                        0 => (&r * &x0).sum(),
                        1 => (&r * &x1).sum(),
                        2 => (&r * &x2).sum(),
                        3 => r.sum(),
                        _ => (&r * &r).sum(),
                    };
                    // each made and evaluated before the next exists
                    let alone = [0, 1, 2, 3, 4].map(|k| bits(&grad(k)));
                    let g = [0, 1, 2, 3, 4].map(grad);
                    let (_, d) = delta(|| kiln::eval!(g[0], g[1], g[2], g[3], g[4]));
                    assert_eq!(d.launches, 1, "{b:?} n={n}: five sums, one pass");
                    assert_eq!(g.each_ref().map(bits), alone, "{b:?} n={n}");
                    // and against a host computation (f64), to rounding
                    let (h0, hy) = (x0.to_vec(), y.to_vec());
                    let (h1, h2) = (x1.to_vec(), x2.to_vec());
                    let want: f64 = (0..n)
                        .map(|i| {
                            let z = 0.5 * h0[i] as f64 - 0.25 * h1[i] as f64
                                + 0.125 * h2[i] as f64
                                + 0.1;
                            (1.0 / (1.0 + (-z).exp()) - hy[i] as f64) * h0[i] as f64
                        })
                        .sum();
                    let got = g[0].item() as f64;
                    assert!(
                        (got - want).abs() <= 1e-4 * (n as f64).sqrt().max(1.0),
                        "{b:?} n={n}: {got} vs {want}"
                    );
                }
            });
        }
    });
}

/// Reductions of different types over one size (an f32 sum, an i32 count-like sum, an i32
/// maximum, an f32 product) share the pass too.
#[test]
fn mixed_types_share_one_pass() {
    leak_checked(|| {
        for n in SIZES {
            let i = Int32::arange(n);
            let odd = &i % 2;
            let f = (odd.cast::<f32>() + 0.5) * 0.75;
            let alone = (f.sum().item(), odd.sum().item(), i.reduce_max().item());
            let pr = (Float32::arange(n) * 1e-5 + 1.0).prod();
            let pr_alone = bits(&(Float32::arange(n) * 1e-5 + 1.0).prod());
            let (s, c, m) = (f.sum(), odd.sum(), i.reduce_max());
            let (_, d) = delta(|| kiln::eval!(s, c, m, pr));
            assert_eq!(d.launches, 1, "n={n}");
            assert_eq!(s.item().to_bits(), alone.0.to_bits(), "n={n}");
            assert_eq!((c.item(), m.item()), (alone.1, alone.2), "n={n}");
            assert_eq!(c.item(), (n / 2) as i32, "n={n}: the count of odd numbers");
            assert_eq!(m.item(), if n == 0 { i32::MIN } else { n as i32 - 1 });
            assert_eq!(bits(&pr), pr_alone, "n={n}");
        }
    });
}

/// A reduction whose source holds another pending reduction waits for it: `sum(exp(y − max y))`
/// with `min y` alongside runs in two phases (max and min in one pass, then the sum), with the
/// bits of the step-by-step version.
#[test]
fn a_reduction_of_a_pending_reduction_runs_in_phases() {
    leak_checked(|| {
        for n in [1usize, 17, 16_385, 50_000] {
            let y = expr(n);
            let want = {
                let m = y.reduce_max();
                m.eval();
                let s = (&y - &m).exp().sum();
                s.eval();
                (bits(&s), bits(&m))
            };
            let m = y.reduce_max();
            let lo = y.reduce_min();
            let s = (&y - &m).exp().sum();
            let (_, d) = delta(|| s.eval());
            assert_eq!(
                d.launches, 2,
                "n={n}: one pass for max and min, one for the sum"
            );
            assert!(lo.is_evaluated(), "the sibling went with the max");
            assert_eq!((bits(&s), bits(&m)), want, "n={n}");
            // a kernel reading a pending reduction evaluates it first
            let z = &y - y.reduce_min();
            assert_eq!(z.reduce_min().item(), 0.0, "n={n}");
        }
    });
}

/// Reductions of an evaluated array read it once: min and max of a stored array are one device
/// op, no kernel, with the bits of each alone; an empty array gives the identities.
#[test]
fn min_and_max_of_a_stored_array_read_it_once() {
    leak_checked(|| {
        for n in SIZES {
            let x = expr(n).eval().clone();
            let alone = (bits(&x.reduce_min()), bits(&x.reduce_max()), bits(&x.sum()));
            let (lo, hi, s) = (x.reduce_min(), x.reduce_max(), x.sum());
            let (_, d) = delta(|| kiln::eval!(lo, hi, s));
            assert_eq!((d.launches, d.device_ops), (0, 1), "n={n}: one pass");
            assert_eq!((bits(&lo), bits(&hi), bits(&s)), alone, "n={n}");
            let host = x.to_vec();
            let hmin = host.iter().copied().fold(f32::INFINITY, f32::min);
            let hmax = host.iter().copied().fold(f32::NEG_INFINITY, f32::max);
            assert_eq!((lo.item(), hi.item()), (hmin, hmax), "n={n}");
        }
    });
}

/// Signed zeros in a shared min/max pass of a stored array: −0 is the minimum where one occurs,
/// +0 the maximum where one occurs, as alone.
#[test]
fn signed_zeros_in_a_shared_pass() {
    leak_checked(|| {
        for (vals, want) in [
            (vec![0.0f64, -0.0, 0.0], (-0.0f64, 0.0f64)),
            (vec![-0.0, -0.0], (-0.0, -0.0)),
            (vec![0.0; 40], (0.0, 0.0)),
        ] {
            let x = Float64::from_slice(&vals);
            let alone = (
                x.reduce_min().item().to_bits(),
                x.reduce_max().item().to_bits(),
            );
            let (lo, hi) = (x.reduce_min(), x.reduce_max());
            kiln::eval!(lo, hi);
            let got = (lo.item().to_bits(), hi.item().to_bits());
            assert_eq!(got, alone, "{vals:?}");
            assert_eq!(got, (want.0.to_bits(), want.1.to_bits()), "{vals:?}");
        }
    });
}

/// Normalising in place: min and max in one pass, then the update writes into the array's own
/// buffer (the reductions hold no reference to it any more).
#[test]
fn normalize_reads_once_and_updates_in_place() {
    leak_checked(|| {
        let x = Float64::arange(100_003) * 0.5 - 7.0;
        x.eval();
        let addr = x.buffer_addr();
        let (mn, mx) = (x.reduce_min(), x.reduce_max());
        let (y, d) = delta(|| {
            let y = (x - &mn) / (&mx - &mn);
            y.eval();
            y
        });
        assert_eq!(d.launches, 1, "the update");
        assert_eq!(d.device_ops, 2, "one min/max pass and the update");
        assert_eq!(y.buffer_addr(), addr, "written in place");
        let v = y.to_vec();
        assert_eq!((v[0], v[100_002]), (0.0, 1.0));
    });
}

/// A frozen function returning the minimum and maximum of an expression of its input (one
/// multi-output launch) and of the input itself (one pass over its buffer) replays right at
/// other sizes.
#[test]
fn frozen_sibling_reductions_replay_at_other_sizes() {
    leak_checked(|| {
        let mut f = kiln::freeze(|x: &Float32| -> (Float32, Float32, Float32, Float32) {
            let y = x * 2.0 + 1.0;
            (y.reduce_min(), y.reduce_max(), x.reduce_min(), x.sum())
        });
        for n in [10usize, 17, 3, 40_000, 16_385] {
            let x = expr(n).eval().clone();
            let y = &x * 2.0 + 1.0;
            let want = [y.reduce_min(), y.reduce_max(), x.reduce_min(), x.sum()].map(|r| bits(&r));
            let ((a, b, c, s), d) = delta(|| f.call(&x).unwrap());
            assert_eq!([bits(&a), bits(&b), bits(&c), bits(&s)], want, "n={n}");
            assert_eq!(d.launches, 1, "n={n}: min and max of y in one launch");
        }
        assert_eq!(
            (f.stats().recordings, f.stats().replays),
            (1, 4),
            "{}",
            f.stats()
        );
    });
}

/// A panic with reductions pending, and a refused reduction in a loop body, leave no variable
/// behind; the engine still reduces right afterwards.
#[test]
fn failures_with_pending_reductions_leave_nothing_behind() {
    leak_checked(|| {
        let x = expr(1000).eval().clone();
        let before = kiln::stats().vars_alive;
        let prev = std::panic::take_hook();
        std::panic::set_hook(Box::new(|_| {}));
        let r = catch_unwind(AssertUnwindSafe(|| {
            let y = &x * 3.0;
            let (_a, _b) = (y.reduce_min(), y.sum());
            panic!("boom");
        }));
        std::panic::set_hook(prev);
        assert!(r.is_err());
        assert_eq!(kiln::stats().vars_alive, before, "{}", kiln::whos());
        // a frozen function that panics after making reductions
        let mut f = kiln::freeze(|x: &Float32| -> Float32 {
            let m = x.reduce_max();
            let _s = (x * 2.0).sum();
            if x.size() == 7 {
                panic!("seven");
            }
            m
        });
        let prev = std::panic::take_hook();
        std::panic::set_hook(Box::new(|_| {}));
        let r = catch_unwind(AssertUnwindSafe(|| f.call(&Float32::arange(7)).map(|_| ())));
        std::panic::set_hook(prev);
        assert!(r.map_or(true, |r| r.is_err()), "the panic is reported");
        drop(f);
        assert_eq!(kiln::stats().vars_alive, before, "{}", kiln::whos());
        // a reduction inside a symbolic loop body is refused, with its reason
        let body = |v: &Float32| v - v.sum() * 0.0 + 1.0;
        let Err(e) = kiln::control::Loop::new(Float32::arange(4))
            .mode(kiln::control::Mode::Symbolic)
            .run(|v| v.lt(2.0), body)
        else {
            panic!("symbolic mode refuses a reduction in the body");
        };
        let e = e.to_string();
        assert!(e.contains("symbolic") && e.contains("Evaluated"), "{e}");
        assert_eq!(kiln::stats().vars_alive, before, "{}", kiln::whos());
        assert_eq!(
            x.reduce_max().item(),
            x.to_vec().iter().copied().fold(f32::MIN, f32::max)
        );
    });
}

/// An evaluated loop whose body returns an array of the wrong size built from a reduction is an
/// error (not a kernel holding a pending reduction).
#[test]
fn a_loop_body_reducing_its_state_in_evaluated_mode() {
    leak_checked(|| {
        use kiln::control::{Loop, Mode};
        use kiln::UInt32;
        for compress in [false, true] {
            let r = Loop::new((UInt32::arange(4), UInt32::zeros(4)))
                .mode(Mode::Evaluated)
                .compress(compress)
                .run(
                    |(x, _)| x.lt(3u32),
                    |(x, n)| (x + 1u32, UInt32::zeros(3) + n.sum()),
                );
            assert!(r.is_err(), "compress {compress}");
        }
    });
}
