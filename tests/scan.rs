//! Scans (`kiln::scan`, `kiln::scan::Scan`) from a user's point of view.
//!
//! What this file checks, section by section:
//!
//! 1. **Cases SC-01 … SC-22** of `shared/cases/scan.md` (PyTensor `scan` semantics, JAX
//!    `lax.scan` variants), one test per case (`sc01_…` to `sc22_…`) with the expected values of
//!    the case, expressed with the Rust API. Parts that take gradients (`grad`, `dP/dx`, Hessians,
//!    `truncate_gradient`) belong to the autodiff work: only their forward values are tested here,
//!    and each such place says so. Save-mem (SC-17), push-out (SC-16) and in-place (SC-19) cases
//!    also assert on the `ScanReport`. Error rows (SC-21, SC-22) assert that the message names
//!    the values that disagree and the fix; rows the Rust type system already rejects are listed,
//!    with the reason, next to those tests.
//! 2. **Against a plain-Rust reference loop**: a proptest over step counts (0, 1, 15, 16, 17 and
//!    random ones), row widths (1, 7, 8, 9, 33; 130 and 300, wide enough to run lane-blocked),
//!    random mixes of SITSOT / NITSOT / MITSOT outputs, sequence taps, kept rows (save-mem) and
//!    execution modes, for `f64` and `i64`.
//! 3. **Equivalences**: rewrites on and off, `go_backwards` and `reverse`, fused and stepped
//!    execution, the three backends, `keep_states` and a forward recompute.
//! 4. **Composition**: a scan inside a frozen function, an RNN with matrix products (push-out),
//!    a scan inside a scan's body, strict mode naming a captured tensor by its label.
//!
//! Every test runs alone under `common::leak_checked` (kiln's registry and counters are global),
//! which also asserts that no variable or buffer outlives it.

mod common;
use common::leak_checked;
use kiln::prelude::*;
use kiln::scan::Lax;
use kiln::{BackendKind, Error, Scalar, ScanReport};
use kiln_core::with_backend;
use proptest::prelude::*;

// =============================================================================================
// Helpers
// =============================================================================================

/// Run a fallible test body alone, with the leak check.
fn check(f: impl FnOnce() -> kiln::Result<()>) {
    leak_checked(|| f().unwrap_or_else(|e| panic!("kiln error: {e}")))
}

/// A rank-1 tensor holding `v`.
fn v1<T: Scalar>(v: &[T]) -> Tensor<T> {
    Tensor::from_slice(v, &[v.len()])
}

/// `arange(r * c)` reshaped to `r × c`.
fn arange2<T: Numeric>(r: usize, c: usize) -> Tensor<T> {
    Tensor::<T>::arange(r * c).reshape(&[r, c])
}

/// Rows of a 2-D expectation, flattened row-major.
fn rows<T: Copy, const C: usize>(r: &[[T; C]]) -> Vec<T> {
    r.iter().flat_map(|row| row.iter().copied()).collect()
}

/// The same tensor with its array labelled `name` (what error messages and reports call it).
fn labeled<T: Scalar>(t: Tensor<T>, name: &str) -> Tensor<T> {
    let shape = t.shape().to_vec();
    Tensor::from_array(t.into_array().label(name), &shape)
}

/// The message of a `kiln::Error::Scan`, panicking on success or another error.
fn scan_err<T>(r: kiln::Result<T>) -> String {
    match r {
        Err(Error::Scan(m)) => m,
        Err(e) => panic!("expected Error::Scan, got another error: {e}"),
        Ok(_) => panic!("expected Error::Scan, got Ok"),
    }
}

/// Assert that `msg` contains every needle.
fn assert_mentions(msg: &str, needles: &[&str]) {
    for n in needles {
        assert!(msg.contains(n), "message {msg:?} does not mention {n:?}");
    }
}

/// Assert two float vectors agree to a relative tolerance.
fn assert_close(got: &[f64], want: &[f64], tol: f64, what: &str) {
    assert_eq!(
        got.len(),
        want.len(),
        "{what}: lengths differ: {got:?} vs {want:?}"
    );
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        let scale = w.abs().max(1.0);
        assert!(
            (g - w).abs() <= tol * scale,
            "{what}: element {i}: got {g}, want {w}\n got {got:?}\nwant {want:?}"
        );
    }
}

/// The bits of a float vector (to compare results exactly, NaN included).
fn bits(v: &[f64]) -> Vec<u64> {
    v.iter().map(|x| x.to_bits()).collect()
}

/// Deterministic integer-valued test data in [-8, 8].
fn int_data(n: usize, seed: u64) -> Vec<f64> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            (s % 17) as f64 - 8.0
        })
        .collect()
}

/// Deterministic float test data in [-1, 1).
fn float_data(n: usize, seed: u64) -> Vec<f64> {
    int_data(n, seed)
        .iter()
        .enumerate()
        .map(|(i, v)| v / 8.0 + (i as f64 * 0.37).sin() * 0.1)
        .map(|v| v.clamp(-1.0, 0.999))
        .collect()
}

/// The backends of this machine: the interpreter and Cranelift always, LLVM where installed.
fn backends() -> Vec<BackendKind> {
    let mut v = vec![BackendKind::Interp, BackendKind::Cranelift];
    if kiln_core::backend::llvm::shared().is_ok() {
        v.push(BackendKind::Llvm);
    }
    v
}

// =============================================================================================
// 1. Cases SC-01 … SC-22
// =============================================================================================

/// SC-01: the triangular sequence (SITSOT), and JAX's running sum with and without `reverse`.
#[test]
fn sc01_cumulative_sum() {
    check(|| {
        let seq = Tensor::<i64>::arange(15);
        let r = Scan::<i64>::new()
            .sequence(&seq)
            .output(&Tensor::scalar(0i64))
            .run(|s| s.out(0, -1) + s.seq(0, 0))?;
        let out = r.output::<i64>(0);
        assert_eq!(out.shape(), &[15], "length 15, the initial state stripped");
        assert_eq!(
            out.to_vec(),
            vec![0, 1, 3, 6, 10, 15, 21, 28, 36, 45, 55, 66, 78, 91, 105]
        );
        assert_eq!(r.steps(), 15);

        // JAX: scan(lambda c, x: (c + x, c + x), 0, [3, 1, 4, 1, 5, 9])
        let xs = v1(&[3i64, 1, 4, 1, 5, 9]);
        let (c, ys) = kiln::scan(&Tensor::scalar(0i64), &xs, |c, x| {
            let a = c + x;
            (a.clone(), a)
        })?;
        assert_eq!(ys.to_vec(), vec![3, 4, 8, 9, 14, 23]);
        assert_eq!(c.to_vec(), vec![23]);
        // test_scan_reverse
        let (c, ys) = Lax::new(&Tensor::scalar(0i64), &xs)
            .reverse(true)
            .run(|c, x| {
                let a = c + x;
                (a.clone(), a)
            })?;
        assert_eq!(ys.to_vec(), vec![23, 20, 19, 15, 14, 9]);
        assert_eq!(c.to_vec(), vec![23]);
        // the fold views
        assert_eq!(
            kiln::scan::foldl(&seq, &Tensor::scalar(0i64), |a, x| a + x)?.to_vec(),
            vec![105]
        );
        assert_eq!(
            kiln::scan::foldr(&xs, &Tensor::scalar(0i64), |a, x| a * 10i64 + x)?.to_vec(),
            vec![951413]
        );
        Ok(())
    })
}

/// SC-02: Fibonacci with output taps [-2, -1]: fixed length, `until`, one step; the memory
/// rewrite when only `ys[-1]` is used; the JAX carry `(a, b) → (b, a + b)`.
#[test]
fn sc02_fibonacci_mitsot() {
    check(|| {
        let init = v1(&[1i64, 1]);
        let fib = |n: usize| {
            Scan::<i64>::new()
                .output_taps(&init, &[-2, -1])
                .n_steps(n)
                .run(|s| s.out(0, -2) + s.out(0, -1))
        };
        // (a)
        let r = fib(8)?;
        assert_eq!(
            r.output::<i64>(0).to_vec(),
            vec![2, 3, 5, 8, 13, 21, 34, 55]
        );
        // (c)
        assert_eq!(fib(1)?.output::<i64>(0).to_vec(), vec![2]);

        // (b) until(x_tm1 >= 34) with n_steps = 1000: 8 steps, the satisfying step kept
        let r = Scan::<i64>::new()
            .output_taps(&init, &[-2, -1])
            .n_steps(1000)
            .run(|s| {
                s.until(&s.out(0, -1).ge(&Tensor::scalar(34i64)));
                s.out(0, -2) + s.out(0, -1)
            })?;
        assert_eq!(
            r.output::<i64>(0).to_vec(),
            vec![2, 3, 5, 8, 13, 21, 34, 55]
        );
        assert_eq!(r.steps(), 8);
        assert_eq!(r.report().steps_requested, 1000);
        assert_eq!(r.last::<i64>(0)?.to_vec(), vec![55]);

        // memory rewrite, only ys[-1] used: PyTensor's raw buffer is 3 rows (pre-allocating
        // backend) or 2 (JIT); kiln stores 1 row (the taps' window lives in the loop state)
        let r = Scan::<i64>::new()
            .output_taps(&init, &[-2, -1])
            .n_steps(8)
            .keep(0, Keep::Last(1))
            .run(|s| s.out(0, -2) + s.out(0, -1))?;
        assert_eq!(r.output::<i64>(0).to_vec(), vec![55]);
        assert_eq!(r.steps(), 8);
        assert!(
            r.report().buffer_rows[0] <= 2,
            "kiln stores {:?} rows, PyTensor 2 (JIT) or 3",
            r.report().buffer_rows
        );
        // the same with `until` (unknown length): a ring of one row
        let r = Scan::<i64>::new()
            .output_taps(&init, &[-2, -1])
            .n_steps(1000)
            .keep(0, Keep::Row(-1))
            .run(|s| {
                s.until(&s.out(0, -1).ge(&Tensor::scalar(34i64)));
                s.out(0, -2) + s.out(0, -1)
            })?;
        assert_eq!(r.output::<i64>(0).to_vec(), vec![55]);
        assert_eq!(r.steps(), 8);
        assert_eq!(r.report().buffer_rows, vec![1]);

        // JAX: carry (a, b) → (b, a + b)
        let carry = (Tensor::scalar(1i64), Tensor::scalar(1i64));
        let ((a, b), ys) = Lax::new(&carry, &()).length(8).run(|c, _| {
            let (a, b) = c;
            let n = a + b;
            ((b.clone(), n.clone()), n)
        })?;
        assert_eq!(ys.to_vec(), vec![2, 3, 5, 8, 13, 21, 34, 55]);
        assert_eq!((a.to_vec(), b.to_vec()), (vec![34], vec![55]));
        Ok(())
    })
}

/// SC-03: a polynomial from a scan over its coefficients (NITSOT; two sequences of uneven
/// length, the step count the shortest). Forward values only: `dP/dx = 38` and `d²P/dx² = 42` of
/// (b) need the autodiff work.
#[test]
fn sc03_polynomial_uneven_sequences() {
    check(|| {
        let poly = |coeffs: &[f64], x: f64| -> kiln::Result<(f64, usize)> {
            let r = Scan::<f64>::new()
                .sequence(&v1(coeffs))
                .sequence_as(&Tensor::<i64>::arange(1000))
                .non_sequence(&Tensor::scalar(x))
                .run(|s| {
                    let p = s.seq_as::<i64>(1, 0).cast::<f64>();
                    s.seq(0, 0) * s.non_seq(0).pow(&p)
                })?;
            let components = r.output::<f64>(0);
            assert_eq!(components.shape(), &[coeffs.len()]);
            Ok((components.to_vec().iter().sum(), r.steps()))
        };
        let (p, steps) = poly(&[1.0, 0.0, 2.0], 3.0)?;
        assert_eq!(steps, 3);
        assert_close(&[p], &[19.0], 1e-12, "(a) P");
        let (p, steps) = poly(&[1.0, 2.0, -3.0, 4.0], 2.0)?;
        assert_eq!(steps, 4, "the shortest sequence decides");
        assert_close(&[p], &[25.0], 1e-12, "(b) P");
        Ok(())
    })
}

/// SC-04: `A**k` by repeated multiplication (a non-sequence), only the last state used: the
/// memory rewrite keeps one row.
#[test]
fn sc04_power_non_sequence() {
    check(|| {
        let a = Tensor::<f64>::arange(10);
        for (k, want) in [
            (2usize, vec![0.0, 1., 4., 9., 16., 25., 36., 49., 64., 81.]),
            (
                4,
                vec![0.0, 1., 16., 81., 256., 625., 1296., 2401., 4096., 6561.],
            ),
        ] {
            let r = Scan::<f64>::new()
                .output(&Tensor::ones(&[10]))
                .non_sequence(&a)
                .n_steps(k)
                .keep(0, Keep::Row(-1))
                .run(|s| s.out(0, -1) * s.non_seq(0))?;
            let out = r.output::<f64>(0);
            assert_eq!(out.shape(), &[1, 10]);
            assert_eq!(out.index_axis(0, 0).to_vec(), want, "k = {k}");
            assert_eq!(r.steps(), k);
            assert_eq!(
                r.report().buffer_rows,
                vec![1],
                "only the last state is kept"
            );
        }
        Ok(())
    })
}

/// SC-05: a simple RNN with scalar weights (recomputed numbers).
#[test]
fn sc05_simple_rnn_scalar_weights() {
    check(|| {
        let u = v1(&[1.0f64, 2.0, 3.0, 4.0]);
        let r = Scan::<f64>::new()
            .sequence(&u)
            .output(&Tensor::scalar(1.0))
            .non_sequence(&Tensor::scalar(2.0))
            .non_sequence(&Tensor::scalar(0.5))
            .run(|s| s.seq(0, 0) * s.non_seq(0) + s.out(0, -1) * s.non_seq(1))?;
        assert_eq!(r.output::<f64>(0).to_vec(), vec![2.5, 5.25, 8.625, 12.3125]);
        Ok(())
    })
}

/// SC-07: sequence taps: a past tap, two past taps, a future tap with one step.
#[test]
fn sc07_sequence_taps() {
    check(|| {
        // (a) taps [-1], outputs_info [None]
        let r = Scan::<i64>::new()
            .sequence_taps(&v1(&[0i64, 1, 2, 3, 4]), &[-1])
            .run(|s| s.seq(0, -1))?;
        assert_eq!(r.output::<i64>(0).to_vec(), vec![0, 1, 2, 3]);
        // (b) taps [-2, -1], fn(x_tm2, x_tm1) = x_tm2
        let r = Scan::<i64>::new()
            .sequence_taps(&v1(&[1i64, 2, 3, 4, 5]), &[-2, -1])
            .run(|s| s.seq(0, -2))?;
        assert_eq!(r.output::<i64>(0).to_vec(), vec![1, 2, 3]);
        // (c) a future tap only, one step (test_mintap_onestep)
        let r = Scan::<i64>::new()
            .sequence_taps(&Tensor::<i64>::arange(20), &[2])
            .output(&Tensor::scalar(0i64))
            .n_steps(1)
            .run(|s| s.out(0, -1) + s.seq(0, 2))?;
        assert_eq!(r.output::<i64>(0).to_vec(), vec![2]);
        Ok(())
    })
}

/// SC-08: past and future sequence taps with a MITSOT output whose taps are listed `[-1, -2]`.
#[test]
fn sc08_past_future_taps_with_mitsot() {
    check(|| {
        let u = v1(&[1.0f64, 2., 3., 4., 5., 6.]);
        // x0[0] = x[-2], x0[1] = x[-1]: kiln's initial rows are oldest first whatever the order
        // the taps are listed in
        let x0 = v1(&[10.0f64, 20.0]);
        let r = Scan::<f64>::new()
            .sequence_taps(&u, &[-2, 2])
            .output_taps(&x0, &[-1, -2])
            .non_sequence(&Tensor::scalar(0.5))
            .non_sequence(&Tensor::scalar(2.0))
            .run(|s| {
                (s.seq(0, -2) + s.seq(0, 2)) * s.non_seq(0)
                    + s.out(0, -1) * s.non_seq(1)
                    + s.out(0, -2)
            })?;
        assert_eq!(r.steps(), 2, "6 rows, taps spanning 4: 2 steps");
        assert_eq!(r.output::<f64>(0).to_vec(), vec![53.0, 130.0]);
        Ok(())
    })
}

/// SC-10: while / until semantics.
#[test]
fn sc10_while_until() {
    check(|| {
        // (a) stop at the first element > 3: the satisfying step is kept
        let mut xs = vec![0i64; 50];
        xs[23] = 4;
        let r = Scan::<i64>::new().sequence(&v1(&xs)).run(|s| {
            let x = s.seq(0, 0);
            s.until(&x.gt(&Tensor::scalar(3i64)));
            x + 1i64
        })?;
        assert_eq!(r.output::<i64>(0).shape(), &[24]);
        assert_eq!(r.steps(), 24);
        let mut want = vec![1i64; 23];
        want.push(5);
        assert_eq!(r.output::<i64>(0).to_vec(), want);

        // (b) powers of two until above max
        let r = Scan::<f64>::new()
            .output(&Tensor::scalar(1.0))
            .non_sequence(&Tensor::scalar(45.0))
            .n_steps(1024)
            .run(|s| {
                let p = s.out(0, -1) * 2.0;
                s.until(&p.gt(&s.non_seq(0)));
                p
            })?;
        assert_eq!(
            r.output::<f64>(0).to_vec(),
            vec![2.0, 4.0, 8.0, 16.0, 32.0, 64.0]
        );

        // (c) x + 1 until x + 1 >= 10
        let plus_one_until_10 = |seq: &Tensor<i64>| {
            Scan::<i64>::new().sequence(seq).run(|s| {
                let y = s.seq(0, 0) + 1i64;
                s.until(&y.ge(&Tensor::scalar(10i64)));
                y
            })
        };
        let r = plus_one_until_10(&Tensor::arange(100))?;
        assert_eq!(r.last::<i64>(0)?.to_vec(), vec![10]);
        assert_eq!(r.steps(), 10);
        let r = plus_one_until_10(&v1(&[0i64]))?;
        assert_eq!(r.last::<i64>(0)?.to_vec(), vec![1]);
        let r = plus_one_until_10(&Tensor::<i64>::zeros(&[0]))?;
        assert_eq!(r.output::<i64>(0).shape(), &[0]);
        // taking [-1] of the empty result is PyTensor's IndexError
        let msg = scan_err(r.last::<i64>(0));
        assert_mentions(&msg, &["output 0", "no rows", "0 step"]);

        // (d) a SITSOT and a NITSOT, until(x_tm1 >= 99), over zeros(200)
        let zeros = Tensor::<f64>::zeros(&[200]);
        let run_d = |x0: f64, n: usize| {
            Scan::<f64>::new()
                .sequence(&zeros)
                .output(&Tensor::scalar(x0))
                .output_none()
                .n_steps(n)
                .run(|s| {
                    let prev = s.out(0, -1);
                    s.until(&prev.ge(&Tensor::scalar(99.0)));
                    let y = &prev + 1.0;
                    let z = &y + s.seq(0, 0);
                    (y, z)
                })
        };
        let r = run_d(0.0, 200)?;
        assert_eq!(r.last::<f64>(0)?.to_vec(), vec![100.0]);
        assert_eq!(r.last::<f64>(1)?.to_vec(), vec![100.0]);
        let r = run_d(1.0, 20)?;
        assert_eq!(r.steps(), 20, "ran out of steps before the condition held");
        assert_eq!(r.last::<f64>(0)?.to_vec(), vec![21.0]);
        let r = run_d(std::f64::consts::E, 1)?;
        assert_eq!(r.last::<f64>(0)?.to_vec(), vec![std::f64::consts::E + 1.0]);
        let r = run_d(0.0, 0)?;
        assert_mentions(&scan_err(r.last::<f64>(0)), &["no rows"]);

        // (e) two outputs, until(x >= 10)
        for keep in [Keep::All, Keep::Row(-1)] {
            let r = Scan::<i64>::new()
                .output(&Tensor::scalar(0i64))
                .output_none()
                .n_steps(100)
                .keep(0, keep.clone())
                .keep(1, keep.clone())
                .run(|s| {
                    let x = s.out(0, -1);
                    s.until(&x.ge(&Tensor::scalar(10i64)));
                    (&x + 1i64, &x * 2i64)
                })?;
            assert_eq!(r.last::<i64>(0)?.to_vec(), vec![11], "{keep:?}");
            assert_eq!(r.last::<i64>(1)?.to_vec(), vec![20], "{keep:?}");
            assert_eq!(r.steps(), 11);
            if keep == Keep::Row(-1) {
                // an unknown length: a ring of one row each
                assert_eq!(r.report().buffer_rows, vec![1, 1]);
            }
        }
        Ok(())
    })
}

/// SC-14: zero and one step.
#[test]
fn sc14_zero_and_one_step() {
    check(|| {
        // (a) n_steps = 0: empty, dtype preserved (float and int)
        let r = Scan::<f64>::new()
            .output(&Tensor::scalar(1.0))
            .n_steps(0)
            .run(|s| s.out(0, -1) * 2.0)?;
        assert_eq!(r.output::<f64>(0).shape(), &[0]);
        assert!(r.output::<f64>(0).to_vec().is_empty());
        assert_eq!(r.report().mode, "empty");
        assert_eq!(r.report().loops_emitted, 0);
        let r = Scan::<i32>::new()
            .output(&Tensor::scalar(1i32))
            .n_steps(0)
            .run(|s| s.out(0, -1) * 2i32)?;
        assert_eq!(r.output::<i32>(0).shape(), &[0]);
        assert!(r.try_output::<f64>(0).is_err(), "the dtype stays i32");
        let (c, ys) = Lax::new(&Tensor::scalar(1.0f64), &())
            .length(0)
            .run(|c, _| (c * 2.0, c.clone()))?;
        assert_eq!(c.to_vec(), vec![1.0], "no step: the initial carry");
        assert_eq!(ys.shape(), &[0]);

        // (b) an empty sequence: empty SITSOT and NITSOT outputs
        let empty = Tensor::<f64>::zeros(&[0, 3]);
        let r = Scan::<f64>::new()
            .sequence(&empty)
            .output(&Tensor::zeros(&[3]))
            .run(|s| s.out(0, -1) + s.seq(0, 0))?;
        assert_eq!(r.output::<f64>(0).shape(), &[0, 3]);
        let r = Scan::<f64>::new()
            .sequence(&empty)
            .run(|s| s.seq(0, 0) * 2.0)?;
        assert_eq!(r.output::<f64>(0).shape(), &[0, 3]);
        let ys = kiln::scan::map(&empty, |x| x * 2.0)?;
        assert_eq!(ys.shape(), &[0, 3]);

        // (c) the raw buffer with its initial rows, [-1]: n = 0, 1, 2
        for (n, want) in [(0usize, 1.0), (1, 2.0), (2, 4.0)] {
            let r = Scan::<f64>::new()
                .output(&Tensor::ones(&[3]))
                .n_steps(n)
                .keep_states(true)
                .run(|s| s.out(0, -1) * 2.0)?;
            let states = r.states::<f64>(0)?;
            assert_eq!(states.shape(), &[n + 1, 3]);
            assert_eq!(states.index_axis(0, n).to_vec(), vec![want; 3], "n = {n}");
        }

        // (d) one step: a leading dimension of 1; the final carry is not padded
        let r = Scan::<f64>::new()
            .output(&Tensor::ones(&[3]))
            .n_steps(1)
            .run(|s| s.out(0, -1) * 2.0)?;
        assert_eq!(r.output::<f64>(0).shape(), &[1, 3]);
        assert_eq!(r.steps(), 1);
        // (PyTensor removes the loop node for a constant n_steps = 1; kiln promises no such
        // rewrite: at most one loop.)
        assert!(r.report().loops_emitted <= 1);
        let (c, ys) = Lax::new(&Tensor::<f64>::ones(&[3]), &())
            .length(1)
            .run(|c, _| (c * 2.0, c * 2.0))?;
        assert_eq!(c.shape(), &[3]);
        assert_eq!(c.to_vec(), vec![2.0; 3]);
        assert_eq!(ys.shape(), &[1, 3]);

        // (e) an untraced RNG state (a PCG/LCG state word) with n = 0 returns the initial
        // state, twice in a row
        let state = v1(&[0x853c_49e6_748f_ea9bu64, 0xda3e_39cb_94b9_5bdb]);
        for _ in 0..2 {
            let (c, ()) = Lax::new(&state, &()).length(0).run(|s, _| {
                (
                    s * 6_364_136_223_846_793_005u64 + 1_442_695_040_888_963_407u64,
                    (),
                )
            })?;
            assert_eq!(c.to_vec(), state.to_vec());
        }
        Ok(())
    })
}

/// SC-15: `n_steps` against the sequence length.
#[test]
fn sc15_n_steps_vs_sequence_length() {
    check(|| {
        let run = |len: usize| {
            let x = Tensor::<f64>::arange(len);
            let x0 = x.index_axis(0, 0);
            Scan::<f64>::new()
                .sequence(&x)
                .output_none()
                .output(&x0)
                .n_steps(20)
                .run(|s| {
                    let x = s.seq(0, 0);
                    (&x + 1.0, s.out(1, -1) + &x)
                })
        };
        let r = run(30)?;
        assert_eq!(r.output::<f64>(0).shape(), &[20]);
        assert_eq!(r.output::<f64>(1).shape(), &[20]);
        let want0: Vec<f64> = (0..20).map(|t| t as f64 + 1.0).collect();
        let want1: Vec<f64> = (0..20).map(|t| (t * (t + 1) / 2) as f64).collect();
        assert_eq!(r.output::<f64>(0).to_vec(), want0);
        assert_eq!(r.output::<f64>(1).to_vec(), want1);
        // "Sequence 0 has shape (10,) but the Scan's required number of steps is 20"
        let msg = scan_err(run(10));
        assert_mentions(
            &msg,
            &[
                "sequence 0",
                "[10]",
                "required number of steps is 20",
                "n_steps(10)",
            ],
        );
        // Negative n_steps (PyTensor's IndexError) does not compile: `n_steps` takes a usize.
        Ok(())
    })
}

/// SC-16: push-out (loop-invariant hoisting).
#[test]
fn sc16_push_out() {
    check(|| {
        let h = Tensor::<f64>::from_vec(int_data(6, 1), &[2, 3]);
        let w1 = Tensor::<f64>::from_vec(int_data(6, 2), &[3, 2]);
        let w2 = Tensor::<f64>::from_vec(int_data(6, 3), &[3, 2]);
        // (a) everything a non-sequence: no loop at all
        let r = Scan::<f64>::new()
            .non_sequence(&h)
            .non_sequence(&w1)
            .non_sequence(&w2)
            .n_steps(5)
            .run(|s| s.non_seq(0).matmul(&(s.non_seq(1) + s.non_seq(2))))?;
        let once = h.matmul(&(&w1 + &w2)).to_vec();
        let out = r.output::<f64>(0);
        assert_eq!(out.shape(), &[5, 2, 2]);
        assert_eq!(out.to_vec(), once.repeat(5));
        let rep = r.report();
        assert_eq!(rep.mode, "invariant", "{rep}");
        assert_eq!(rep.loops_emitted, 0, "{rep}");
        assert_eq!(rep.ops_in_loop, 0, "{rep}");
        assert!(rep.ops_hoisted >= 2, "the sum and the product: {rep}");

        // (b) h recurrent: the loop stays, W1 + W2 is computed once outside it
        let h0 = Tensor::<f64>::from_vec(vec![1.0, 0.0, 0.5, -1.0], &[2, 2]);
        let v1m = Tensor::<f64>::from_vec(vec![0.5, 0.25, -0.5, 1.0], &[2, 2]);
        let v2m = Tensor::<f64>::from_vec(vec![0.25, 0.0, 0.5, -0.5], &[2, 2]);
        let r = Scan::<f64>::new()
            .output(&h0)
            .non_sequence(&v1m)
            .non_sequence(&v2m)
            .n_steps(5)
            .run(|s| s.out(0, -1).matmul(&(s.non_seq(0) + s.non_seq(1))))?;
        let mut want = Vec::new();
        let mut hh = h0.clone();
        for _ in 0..5 {
            hh = hh.matmul(&(&v1m + &v2m));
            want.extend(hh.to_vec());
        }
        assert_close(&r.output::<f64>(0).to_vec(), &want, 1e-14, "(b)");
        let rep = r.report();
        assert_eq!(rep.loops_emitted, 1, "{rep}");
        assert!(rep.ops_hoisted >= 1, "W1 + W2 outside the loop: {rep}");
        assert!(rep.rewrites.iter().any(|w| w.contains("push-out")), "{rep}");
        assert_eq!(
            rep.ops_in_loop, 1,
            "only the product stays in the loop, no elementwise op: {rep}"
        );

        // (c) fn(x) = (x * x, x) with the constant non-sequence 2, two steps
        let r = Scan::<f64>::new()
            .non_sequence(&Tensor::scalar(2.0))
            .n_steps(2)
            .run(|s| {
                let x = s.non_seq(0);
                (&x * &x, x)
            })?;
        assert_eq!(r.output::<f64>(0).to_vec(), vec![4.0, 4.0]);
        assert_eq!(r.output::<f64>(1).to_vec(), vec![2.0, 2.0]);
        assert_eq!(r.report().mode, "invariant");
        assert_eq!(r.report().loops_emitted, 0);

        // (d) test_pushout_nomodif: fn(i, s_tm1) = (i + 10, s_tm1), outputs_info [[0, 0], None]
        let inp = arange2::<f64>(5, 2);
        let r = Scan::<f64>::new()
            .sequence(&inp)
            .output(&Tensor::zeros(&[2]))
            .output_none()
            .run(|s| (s.seq(0, 0) + 10.0, s.out(0, -1)))?;
        assert_eq!(
            r.output::<f64>(0).to_vec(),
            rows(&[[10., 11.], [12., 13.], [14., 15.], [16., 17.], [18., 19.]])
        );
        assert_eq!(
            r.output::<f64>(1).to_vec(),
            rows(&[[0., 0.], [10., 11.], [12., 13.], [14., 15.], [16., 17.]])
        );
        // the graph is unchanged: output 0 reads only the sequence, output 1 the initial state
        // and (through output 0) the sequence
        assert_eq!(
            r.report().connection,
            vec![vec![true, true], vec![false, true]],
            "{:?}",
            r.report().inputs
        );
        Ok(())
    })
}

/// SC-17: save-memory / step reduction.
#[test]
fn sc17_save_mem() {
    check(|| {
        // (a) xs[-3] of 10 steps: value 8, 8 steps
        let r = Scan::<i64>::new()
            .output(&Tensor::scalar(0i64))
            .n_steps(10)
            .keep(0, Keep::Row(-3))
            .run(|s| s.out(0, -1) + 1i64)?;
        assert_eq!(r.output::<i64>(0).to_vec(), vec![8]);
        assert_eq!(r.steps(), 8);
        assert_eq!(r.report().steps_requested, 10);
        assert_eq!(r.report().buffer_rows, vec![1]);

        // (b) xs[:5] and ys[-1]: ys needs every step
        let r = Scan::<i64>::new()
            .output(&Tensor::scalar(0i64))
            .output(&Tensor::scalar(0i64))
            .n_steps(10)
            .keep(0, Keep::Rows(0..5))
            .keep(1, Keep::Row(-1))
            .run(|s| (s.out(0, -1) + 1i64, s.out(1, -1) - 1i64))?;
        assert_eq!(r.output::<i64>(0).to_vec(), vec![1, 2, 3, 4, 5]);
        assert_eq!(r.output::<i64>(1).to_vec(), vec![-10]);
        assert_eq!(r.steps(), 10);
        assert_eq!(r.report().buffer_rows, vec![5, 1]);

        // (c) seven NITSOT outputs u_t + k; x1[:2], x2[4], x3[idx], x5[-10], x6[-jdx] used
        let u = int_data(20, 17);
        let ut = v1(&u);
        for (idx, jdx, steps) in [
            (3isize, 15isize, 11usize),
            (3, 3, 18),
            (16, 15, 17),
            (-5, 15, 16),
            (19, 15, 20),
        ] {
            let r = Scan::<f64>::new()
                .sequence(&ut)
                .keep(0, Keep::Nothing)
                .keep(1, Keep::Rows(0..2))
                .keep(2, Keep::Row(4))
                .keep(3, Keep::Row(idx))
                .keep(4, Keep::Nothing)
                .keep(5, Keep::Row(-10))
                .keep(6, Keep::Row(-jdx))
                .run(|s| {
                    let x = s.seq(0, 0);
                    (
                        &x + 0.0,
                        &x + 1.0,
                        &x + 2.0,
                        &x + 3.0,
                        &x + 4.0,
                        &x + 5.0,
                        &x + 6.0,
                    )
                })?;
            let what = format!("idx={idx} jdx={jdx}");
            assert_eq!(r.steps(), steps, "{what}: {}", r.report());
            assert_eq!(r.report().steps_requested, 20);
            let at = |i: isize| if i < 0 { (20 + i) as usize } else { i as usize };
            assert_eq!(r.output::<f64>(0).shape(), &[0], "{what}");
            assert_eq!(r.output::<f64>(1).to_vec(), vec![u[0] + 1.0, u[1] + 1.0]);
            assert_eq!(r.output::<f64>(2).to_vec(), vec![u[4] + 2.0], "{what}");
            assert_eq!(
                r.output::<f64>(3).to_vec(),
                vec![u[at(idx)] + 3.0],
                "{what}"
            );
            assert_eq!(r.output::<f64>(4).shape(), &[0], "{what}");
            assert_eq!(r.output::<f64>(5).to_vec(), vec![u[10] + 5.0], "{what}");
            assert_eq!(
                r.output::<f64>(6).to_vec(),
                vec![u[at(-jdx)] + 6.0],
                "{what}"
            );
            assert_eq!(r.report().buffer_rows, vec![0, 2, 1, 1, 0, 1, 1], "{what}");
        }

        // (d) buffer lengths: x1[-7] → PyTensor 7, x2[-3:-1] → 3, x3[-6:] → 6, a MITSOT with
        // taps [-1, -2] used only at [-1] → 2 (+1 with pre-allocation). kiln stores only the
        // rows used: 1, 2, 6 and 1 (the MITSOT's window lives in the loop state).
        let u10 = v1(&int_data(10, 5));
        let r = Scan::<f64>::new()
            .sequence(&u10)
            .output_none()
            .output_none()
            .output_none()
            .output_taps(&v1(&[0.0, 1.0]), &[-1, -2])
            .keep(0, Keep::Row(-7))
            .keep(1, Keep::Rows(7..9))
            .keep(2, Keep::Last(6))
            .keep(3, Keep::Last(1))
            .run(|s| {
                let x = s.seq(0, 0);
                (
                    &x + 1.0,
                    &x + 2.0,
                    &x + 3.0,
                    s.out(3, -1) + s.out(3, -2) + &x,
                )
            })?;
        assert_eq!(r.steps(), 10);
        let uv = u10.to_vec();
        assert_eq!(r.output::<f64>(0).to_vec(), vec![uv[3] + 1.0]);
        assert_eq!(r.output::<f64>(1).to_vec(), vec![uv[7] + 2.0, uv[8] + 2.0]);
        assert_eq!(
            r.output::<f64>(2).to_vec(),
            uv[4..].iter().map(|v| v + 3.0).collect::<Vec<_>>()
        );
        let (mut a, mut b) = (0.0, 1.0);
        for x in &uv {
            let c = b + a + x;
            a = b;
            b = c;
        }
        assert_eq!(r.output::<f64>(3).to_vec(), vec![b]);
        let buf = &r.report().buffer_rows;
        for (j, (&k, py)) in buf.iter().zip([7usize, 3, 6, 2]).enumerate() {
            assert!(k <= py, "output {j}: kiln stores {k} rows, PyTensor {py}");
        }

        // (e) MITSOT taps (-2, -1), add, 100 steps
        let fib_ref = {
            let mut v = vec![1.0f64, 1.0];
            for t in 0..100 {
                let n = v[t] + v[t + 1];
                v.push(n);
            }
            v[2..].to_vec()
        };
        // ys[:-50]: 50 steps; PyTensor's buffer 52, kiln's 50
        let r = Scan::<f64>::new()
            .output_taps(&v1(&[1.0, 1.0]), &[-2, -1])
            .n_steps(100)
            .keep(0, Keep::Rows(0..50))
            .run(|s| s.out(0, -2) + s.out(0, -1))?;
        assert_eq!(r.steps(), 50);
        assert_eq!(r.output::<f64>(0).to_vec(), fib_ref[..50].to_vec());
        assert!(r.report().buffer_rows[0] <= 52, "{}", r.report());
        // ys[-50:]: 100 steps, buffer 50 (kiln: 50)
        let r = Scan::<f64>::new()
            .output_taps(&v1(&[1.0, 1.0]), &[-2, -1])
            .n_steps(100)
            .keep(0, Keep::Last(50))
            .run(|s| s.out(0, -2) + s.out(0, -1))?;
        assert_eq!(r.steps(), 100);
        assert_eq!(r.output::<f64>(0).to_vec(), fib_ref[50..].to_vec());
        assert!(r.report().buffer_rows[0] <= 50, "{}", r.report());

        // (g) the stop is not dropped: ws = 2k for 10 steps, ws[3:stop]
        for (stop, want) in [
            (5usize, vec![6i64, 8]),
            (8, vec![6, 8, 10, 12, 14]),
            (10, vec![6, 8, 10, 12, 14, 16, 18]),
        ] {
            let r = Scan::<i64>::new()
                .n_steps(10)
                .keep(0, Keep::Rows(3..stop))
                .run(|s| s.t().cast::<i64>() * 2i64)?;
            assert_eq!(r.output::<i64>(0).to_vec(), want, "stop = {stop}");
            assert_eq!(r.steps(), stop, "stop = {stop}");
        }
        Ok(())
    })
}

/// SC-19: in-place recurrent outputs. kiln computes an output over its initial state's buffer
/// only when the caller handed that state over (`output_owned`) and the stored rows fit in it,
/// so (a) and (c) keep only the last row (a SITSOT of one row over a one-row initial state, the
/// layout PyTensor's destroy_map {0: [1]} describes).
#[test]
fn sc19_in_place() {
    check(|| {
        // values with every row kept
        let r = Scan::<f64>::new()
            .output_owned(Tensor::zeros(&[1]))
            .n_steps(3)
            .run(|s| s.out(0, -1) + 1.0)?;
        assert_eq!(r.output::<f64>(0).to_vec(), vec![1.0, 2.0, 3.0]);
        // (a) an owned initial state: output 0 overwrites it
        let r = Scan::<f64>::new()
            .output_owned(Tensor::zeros(&[1]))
            .n_steps(3)
            .keep(0, Keep::Last(1))
            .run(|s| s.out(0, -1) + 1.0)?;
        assert_eq!(r.output::<f64>(0).to_vec(), vec![3.0]);
        // PyTensor: destroy_map {0: [1]}. kiln's update-in-place (issue 13) writes a result over
        // an operand only when no handle holds it, and the scan holds its initial states until
        // its loop has run (ScanInplace is not built): the report says it was not applied and
        // why, instead of claiming it
        assert!(r.report().in_place.is_empty(), "{}", r.report());
        assert!(
            r.report()
                .rewrites
                .iter()
                .any(|l| l.contains("in place: not applied to output 0")
                    && l.contains("ScanInplace")),
            "{}",
            r.report()
        );

        // (b) a pure map over a sequence: nothing in place
        let r = Scan::<f64>::new()
            .sequence(&Tensor::arange(4))
            .run(|s| s.seq(0, 0) * 2.0)?;
        assert_eq!(r.output::<f64>(0).to_vec(), vec![0.0, 2.0, 4.0, 6.0]);
        assert!(r.report().in_place.is_empty());

        // (c) an initial state the caller keeps is never destroyed; an owned one is
        let x0 = Tensor::<f64>::full(5.0, &[1]);
        let r = Scan::<f64>::new()
            .output(&x0)
            .output_owned(Tensor::zeros(&[1]))
            .n_steps(3)
            .keep(0, Keep::Last(1))
            .keep(1, Keep::Last(1))
            .run(|s| (s.out(0, -1) + 1.0, s.out(1, -1) + 2.0))?;
        assert_eq!(r.output::<f64>(0).to_vec(), vec![8.0]);
        assert_eq!(r.output::<f64>(1).to_vec(), vec![6.0]);
        assert!(!r.report().in_place.contains(&0), "{}", r.report());
        // (PyTensor destroys the owned one, output 1; kiln does not yet, as above)
        assert!(
            r.report()
                .rewrites
                .iter()
                .any(|l| l.contains("not applied to output 1")),
            "{}",
            r.report()
        );
        assert!(
            !r.report()
                .rewrites
                .iter()
                .any(|l| l.contains("not applied to output 0")),
            "the caller's initial state is not a candidate: {}",
            r.report()
        );
        assert_eq!(
            x0.to_vec(),
            vec![5.0],
            "the caller's initial state is intact"
        );

        // (d) the numbers are the same with and without in-place (an RNN with two SITSOTs)
        let u = Tensor::<f64>::from_vec(float_data(24, 9), &[8, 3]);
        let rnn = |owned: bool| -> kiln::Result<(Vec<f64>, Vec<f64>)> {
            let h1 = Tensor::<f64>::full(0.5, &[3]);
            let h2 = Tensor::<f64>::full(-0.25, &[3]);
            let sc = Scan::<f64>::new().sequence(&u);
            let sc = if owned {
                sc.output_owned(h1).output_owned(h2)
            } else {
                sc.output(&h1).output(&h2)
            };
            let r = sc.keep(0, Keep::Last(1)).keep(1, Keep::Last(1)).run(|s| {
                let a = (s.out(0, -1) * 0.5 + s.seq(0, 0)).tanh();
                let b = s.out(1, -1) * 0.25 + s.out(0, -1);
                (a, b)
            })?;
            Ok((r.output::<f64>(0).to_vec(), r.output::<f64>(1).to_vec()))
        };
        let (a1, b1) = rnn(true)?;
        let (a2, b2) = rnn(false)?;
        assert_eq!(bits(&a1), bits(&a2));
        assert_eq!(bits(&b1), bits(&b2));
        Ok(())
    })
}

/// SC-20: a scan over a scan's output, inner while-scans of varying lengths, a non-sequence only
/// body, and a Hessian by rows. Forward values only: `d sum/d inp` of (c) and the gradients
/// inside (d) need the autodiff work, so (d) computes each row of 0.9 × the Hessian from its
/// closed form, `H[j][m] = δ_jm (A x)_j + x_j A[j][m] + x_m A[m][j]`.
#[test]
fn sc20_nested_and_misc() {
    check(|| {
        // (a) scan_1: ten steps of x + 1 from 0; scan_2 maps + 1 over it
        let r1 = Scan::<i64>::new()
            .output(&Tensor::scalar(0i64))
            .n_steps(10)
            .run(|s| s.out(0, -1) + 1i64)?;
        let s1 = r1.output::<i64>(0);
        assert_eq!(s1.to_vec(), (1..=10).collect::<Vec<i64>>());
        let s2 = kiln::scan::map(&s1, |x| x + 1i64)?;
        assert_eq!(s2.to_vec(), (2..=11).collect::<Vec<i64>>());

        // (b) outer sequence [3, 2, 1], inner while-scan z + 1 until z > 2 with n_steps = n - 1,
        // summed. kiln's n_steps is a host usize, so the outer loop reads n on the host; the
        // inner scans of different lengths run one after the other.
        let outer = v1(&[3i64, 2, 1]);
        let mut sums = Vec::new();
        for n in outer.to_vec() {
            let r = Scan::<i64>::new()
                .output(&Tensor::scalar(0i64))
                .n_steps((n - 1) as usize)
                .run(|s| {
                    let z = s.out(0, -1);
                    s.until(&z.gt(&Tensor::scalar(2i64)));
                    z + 1i64
                })?;
            sums.push(r.output::<i64>(0).to_vec().iter().sum::<i64>());
        }
        assert_eq!(sums, vec![3, 1, 0]);

        // (c) fn(x) = x with non_sequences [inp], two steps: inp stacked twice
        let inp = Tensor::<f64>::from_vec(vec![1.0, 2.0, 3.0, 4.0], &[2, 2]);
        let r = Scan::<f64>::new()
            .non_sequence(&inp)
            .n_steps(2)
            .run(|s| s.non_seq(0))?;
        let out = r.output::<f64>(0);
        assert_eq!(out.shape(), &[2, 2, 2]);
        assert_eq!(out.to_vec(), vec![1.0, 2.0, 3.0, 4.0, 1.0, 2.0, 3.0, 4.0]);

        // (d) rows of 0.9 × the Hessian of y = 0.5 dot(x * x, dot(A, x)) at x = [1, 1]
        let x = v1(&[1.0f64, 1.0]);
        let a = Tensor::<f64>::from_vec(vec![1.0, 1.0, 1.0, 0.0], &[2, 2]);
        let r = Scan::<f64>::new()
            .sequence(&Tensor::arange(2))
            .non_sequence(&x)
            .non_sequence(&a)
            .run(|s| {
                let (x, a) = (s.non_seq(0), s.non_seq(1));
                let e = Tensor::select(
                    &Tensor::<f64>::arange(2).eq(&s.seq(0, 0)),
                    &Tensor::ones(&[2]),
                    &Tensor::zeros(&[2]),
                );
                let ax = a.matmul(&x.reshape(&[2, 1])).reshape(&[2]);
                let e_row = e.reshape(&[1, 2]);
                let a_row = e_row.matmul(&a).reshape(&[2]);
                let a_col = e_row.matmul(&a.transpose()).reshape(&[2]);
                let axj = (&ax * &e).sum_axis(0);
                let xj = (&x * &e).sum_axis(0);
                (&e * &axj + &xj * &a_row + &x * &a_col) * 0.9
            })?;
        assert_close(
            &r.output::<f64>(0).to_vec(),
            &[3.6, 1.8, 1.8, 0.9],
            1e-12,
            "0.9 × Hessian rows",
        );
        Ok(())
    })
}

/// SC-21: construction errors. Rows the Rust types reject at compile time:
/// - `{"taps": [-1]}` without an initial state: `output_taps` takes the initial state as an
///   argument (the run-time analogue, reading an earlier value of an output declared with
///   `output_none`, is tested below);
/// - an unknown key in an `outputs_info` dict: there are no dicts, only builder methods;
/// - a float `n_steps`: `n_steps` takes a `usize`;
/// - a body returning a Python constant: the body returns `Tensor`s (`StepOutputs`); a constant
///   tensor is a valid (loop-invariant) output;
/// - the inconsistent broadcastable pattern only shows when the gradient is built (autodiff
///   work); its forward analogue, an initial state of shape [1, 10] for rows of shape [10], is a
///   run-time error tested below.
#[test]
fn sc21_construction_errors() {
    check(|| {
        let y = Tensor::<f64>::zeros(&[2, 3]);
        // taps must be < 0
        let msg = scan_err(
            Scan::<f64>::new()
                .output_taps(&y, &[0])
                .n_steps(3)
                .run(|s| s.out(0, 0)),
        );
        assert_mentions(&msg, &["output 0", "tap 0", "[0]", "negative"]);
        // all the taps must be different
        let msg = scan_err(
            Scan::<f64>::new()
                .output_taps(&y, &[-1, -1])
                .n_steps(3)
                .run(|s| s.out(0, -1)),
        );
        assert_mentions(
            &msg,
            &["output 0", "[-1, -1]", "all the taps must be different"],
        );
        let msg = scan_err(
            Scan::<f64>::new()
                .sequence_taps(&y, &[1, 1])
                .run(|s| s.seq(0, 1)),
        );
        assert_mentions(&msg, &["sequence 0", "[1, 1]", "different"]);
        // an earlier value of an output without an initial state
        let msg = scan_err(
            Scan::<f64>::new()
                .output_none()
                .n_steps(3)
                .run(|s| s.out(0, -1) + 1.0),
        );
        assert_mentions(&msg, &["output 0", "does not feed back", ".output(&init)"]);
        // no information about the number of steps
        let msg = scan_err(
            Scan::<f64>::new()
                .output(&Tensor::scalar(0.0))
                .run(|s| s.out(0, -1) + 1.0),
        );
        assert_mentions(&msg, &["number of steps", ".n_steps(n)"]);
        let msg = scan_err(kiln::scan(&Tensor::scalar(0.0f64), &(), |c, _| {
            (c + 1.0, ())
        }));
        assert_mentions(&msg, &["no inputs", ".length(n)"]);
        // strict mode with an implicitly captured variable: the error names its label
        let w = labeled(Tensor::<f64>::from_vec(vec![2.0, 3.0], &[2]), "W");
        let xs = Tensor::<f64>::ones(&[4, 2]);
        let msg = scan_err(
            Scan::<f64>::new()
                .sequence(&xs)
                .strict(true)
                .run(|s| s.seq(0, 0) * &w),
        );
        assert_mentions(&msg, &["strict", "`W`", ".non_sequence("]);
        // two outputs returned, one declared
        let msg = scan_err(
            Scan::<f64>::new()
                .output(&Tensor::scalar(0.0))
                .n_steps(3)
                .run(|s| (s.out(0, -1) + 1.0, s.out(0, -1) * 2.0)),
        );
        assert_mentions(
            &msg,
            &["returns 2 output(s)", "1 are declared", ".output_none()"],
        );
        // an initial state [1, 10] for rows [10]
        let msg = scan_err(
            Scan::<f64>::new()
                .output(&Tensor::zeros(&[1, 10]))
                .sequence(&Tensor::zeros(&[3, 10]))
                .run(|s| s.seq(0, 0) + 1.0),
        );
        assert_mentions(&msg, &["output 0", "[1, 10]", "[10]", "reshape"]);
        // a MITSOT initial state without a row per step back
        let msg = scan_err(
            Scan::<f64>::new()
                .output_taps(&Tensor::zeros(&[3]), &[-2, -1])
                .n_steps(3)
                .run(|s| s.out(0, -1) + s.out(0, -2)),
        );
        assert_mentions(&msg, &["output 0", "[-2, -1]", "2 rows", "[3]"]);
        // reverse and go_backwards together
        let msg = scan_err(
            Scan::<f64>::new()
                .sequence(&xs)
                .reverse(true)
                .go_backwards(true)
                .run(|s| s.seq(0, 0)),
        );
        assert_mentions(&msg, &["reverse", "go_backwards"]);
        // a tap the body reads that was not declared
        let msg = scan_err(Scan::<f64>::new().sequence(&xs).run(|s| s.seq(0, -1)));
        assert_mentions(&msg, &["sequence 0", "tap -1", "[0]", ".sequence_taps("]);
        Ok(())
    })
}

/// SC-22: JAX-specific acceptance. Rows the Rust types reject at compile time:
/// - `unroll=-1`: `unroll` takes a `usize` (the run-time analogue, `unroll(0)`, is tested);
/// - (e) a body returning a scalar instead of a pair: the closure must return `(C, Y)`;
/// - (f) a carry that changes dtype (int32 → float32): the closure returns the carry's type `C`
///   (its run-time analogue, a carry that changes shape, is tested);
/// - (g) higher-order reverse-mode gradients need the autodiff work: the forward values of
///   that scan are tested against a plain loop.
#[test]
fn sc22_jax_acceptance() {
    check(|| {
        // (a) scan(lambda c, _: (c + 1, c), 0, None, length=10)[1] == arange(10)
        let (c, ys) = Lax::new(&Tensor::scalar(0i64), &())
            .length(10)
            .run(|c, _| (c + 1i64, c.clone()))?;
        assert_eq!(ys.to_vec(), (0..10).collect::<Vec<i64>>());
        assert_eq!(c.to_vec(), vec![10]);
        // (b) xs=None, length=20, f(h, _) = (h + 1, None)
        let (c, ()) = Lax::new(&Tensor::scalar(0.0f64), &())
            .length(20)
            .run(|h, _| (h + 1.0, ()))?;
        assert_eq!(c.to_vec(), vec![20.0]);
        // (c) length=5 with xs of length 10
        let xs = Tensor::<f64>::arange(10);
        let msg = scan_err(
            Lax::new(&Tensor::scalar(0.0f64), &xs)
                .length(5)
                .run(|c, x| (c + x, ())),
        );
        assert_mentions(
            &msg,
            &[
                "got `length` argument of 5",
                "disagrees with leading axis sizes [10]",
                "length=10",
            ],
        );
        // inputs of different lengths
        let msg = scan_err(kiln::scan(
            &Tensor::scalar(0.0f64),
            &(xs.clone(), Tensor::<f64>::arange(7)),
            |c, (a, b)| (c + a + b, ()),
        ));
        assert_mentions(&msg, &["[10, 7]", "slice"]);
        // (d) unroll: 0 is an error; 2 changes nothing
        let msg = scan_err(
            Lax::new(&Tensor::scalar(0.0f64), &xs)
                .unroll(0)
                .run(|c, x| (c + x, ())),
        );
        assert_mentions(&msg, &["unroll", "at least 1", "got 0"]);
        let mut reports = Vec::new();
        let mut results = Vec::new();
        for k in [1usize, 2, 10] {
            let mut rep = ScanReport::default();
            let (c, ys) = Lax::new(&Tensor::scalar(1.0f64), &xs)
                .unroll(k)
                .report(&mut rep)
                .run(|c, x| {
                    let n = c * 0.5 + x;
                    (n.clone(), n)
                })?;
            results.push((c.to_vec(), ys.to_vec()));
            reports.push(rep);
        }
        // (JAX's unrolled HLO has no `while`; kiln's loop is one kernel either way.)
        for (r, rep) in results.iter().zip(&reports).skip(1) {
            assert_eq!(r, &results[0]);
            assert_eq!(rep.mode, reports[0].mode);
            assert_eq!(rep.loops_emitted, reports[0].loops_emitted);
            assert_eq!(rep.ops_in_loop, reports[0].ops_in_loop);
        }
        // (f) the run-time analogue: the carry changes shape
        let msg = scan_err(
            Lax::new(&Tensor::<i32>::zeros(&[2]), &())
                .length(3)
                .run(|c, _| (c.reshape(&[2, 1]), ())),
        );
        assert_mentions(&msg, &["carry", "[2]", "[2, 1]"]);

        // (g) forward values of f(c, a) = (0.9 cos(d Σ sin(c a)), sin(c Σ cos(d a))), d = 0.75
        let d = 0.75f64;
        let as_ = arange2::<f64>(3, 2);
        let (c, ys) = kiln::scan(&Tensor::scalar(1.0f64), &as_, |c, a| {
            let s1 = (c * a).sin().sum_axis(0);
            let s2 = (a * d).cos().sum_axis(0);
            ((s1 * d).cos() * 0.9, (c * &s2).sin())
        })?;
        let (mut cr, mut yr) = (1.0f64, Vec::new());
        for row in [[0.0, 1.0], [2.0, 3.0], [4.0, 5.0]] {
            let s1: f64 = row.iter().map(|a| (cr * a).sin()).sum();
            let s2: f64 = row.iter().map(|a| (d * a).cos()).sum();
            yr.push((cr * s2).sin());
            cr = 0.9 * (d * s1).cos();
        }
        assert_close(&c.to_vec(), &[cr], 1e-12, "(g) carry");
        assert_close(&ys.to_vec(), &yr, 1e-12, "(g) ys");
        Ok(())
    })
}

// =============================================================================================
// 2. Against a plain-Rust reference loop
// =============================================================================================

/// How an output feeds back.
#[derive(Clone, Debug)]
enum Kind {
    /// Not at all (NITSOT).
    Nit,
    /// At tap -1 (SITSOT).
    Sit,
    /// At the given taps (MITSOT), e.g. `[-2, -1]` or `[-3, -1]`.
    Mit(Vec<i64>),
}

/// One output: `y = c + b Σ seq taps + a Σ own taps + d · out0[-1]` (the last term when output 0
/// feeds back and this is another output), with the rows it keeps.
#[derive(Clone, Debug)]
struct OutCase {
    kind: Kind,
    a: i64,
    b: i64,
    c: i64,
    d: i64,
    keep: Keep,
    init: Vec<i64>,
}

#[derive(Clone, Debug)]
struct Case {
    steps: usize,
    width: usize,
    seq_taps: Vec<i64>,
    seq: Vec<i64>,
    outs: Vec<OutCase>,
    mode: ScanMode,
}

impl OutCase {
    fn taps(&self) -> Vec<i64> {
        match &self.kind {
            Kind::Nit => vec![],
            Kind::Sit => vec![-1],
            Kind::Mit(t) => t.clone(),
        }
    }
    fn window(&self) -> usize {
        self.taps().iter().map(|t| (-t) as usize).max().unwrap_or(0)
    }
}

fn seq_span(taps: &[i64]) -> (usize, usize) {
    let lo = taps.iter().copied().min().unwrap_or(0).min(0);
    let hi = taps.iter().copied().max().unwrap_or(0).max(0);
    ((-lo) as usize, (hi - lo) as usize)
}

fn case_strategy() -> impl Strategy<Value = Case> {
    let steps = prop_oneof![
        Just(0usize),
        Just(1usize),
        Just(15usize),
        Just(16usize),
        Just(17usize),
        0usize..40
    ];
    let width = prop::sample::select(vec![1usize, 7, 8, 9, 33, 130, 300]);
    let seq_taps = prop::sample::select(vec![vec![0i64], vec![-1, 0], vec![0, 2], vec![-2, 1]]);
    let mode = prop::sample::select(vec![ScanMode::Auto, ScanMode::Fused, ScanMode::Stepped]);
    let kind = prop_oneof![
        Just(Kind::Nit),
        Just(Kind::Sit),
        Just(Kind::Mit(vec![-2, -1])),
        Just(Kind::Mit(vec![-3, -1])),
    ];
    let keep = prop_oneof![
        3 => Just(Keep::All),
        1 => (0usize..20).prop_map(Keep::Last),
        1 => (0usize..20, 0usize..25).prop_map(|(a, b)| Keep::Rows(a.min(b)..b)),
        1 => (-20isize..20).prop_map(Keep::Row),
        1 => Just(Keep::Nothing),
    ];
    let out = (kind, -1i64..=1, -2i64..=2, -3i64..=3, 0i64..=1, keep);
    (
        steps,
        width,
        seq_taps,
        prop::collection::vec(out, 1..=4),
        mode,
        any::<u64>(),
    )
        .prop_map(|(steps, width, seq_taps, outs, mode, seed)| {
            let (_, span) = seq_span(&seq_taps);
            let seq: Vec<i64> = int_data((steps + span) * width, seed)
                .iter()
                .map(|&v| v as i64)
                .collect();
            let outs = outs
                .into_iter()
                .enumerate()
                .map(|(j, (kind, a, b, c, d, keep))| {
                    let mut o = OutCase {
                        kind,
                        a,
                        b,
                        c,
                        d,
                        keep,
                        init: Vec::new(),
                    };
                    o.init = int_data(o.window() * width, seed ^ (j as u64 + 1))
                        .iter()
                        .map(|&v| v as i64)
                        .collect();
                    o
                })
                .collect();
            Case {
                steps,
                width,
                seq_taps,
                seq,
                outs,
                mode,
            }
        })
}

/// The rows `keep` selects from `n` rows (the documented semantics of `Keep`).
fn kept(keep: &Keep, n: usize) -> std::ops::Range<usize> {
    match *keep {
        Keep::All => 0..n,
        Keep::Nothing => 0..0,
        Keep::Last(k) => n - k.min(n)..n,
        Keep::Rows(ref r) => {
            let b = r.end.min(n);
            r.start.min(b)..b
        }
        Keep::Row(i) if i >= 0 => {
            let i = (i as usize).min(n);
            i..(i + 1).min(n)
        }
        Keep::Row(i) => {
            let back = i.unsigned_abs();
            if back > n {
                0..0
            } else {
                n - back..n - back + 1
            }
        }
    }
}

/// The reference: every output's full rows (`steps × width`), by a plain loop.
fn reference(c: &Case) -> Vec<Vec<i64>> {
    let w = c.width;
    let (off, _) = seq_span(&c.seq_taps);
    let mut hist: Vec<Vec<Vec<i64>>> = c
        .outs
        .iter()
        .map(|o| o.init.chunks(w.max(1)).map(|r| r.to_vec()).collect())
        .collect();
    let mut full: Vec<Vec<i64>> = vec![Vec::new(); c.outs.len()];
    let feeds0 = !matches!(c.outs[0].kind, Kind::Nit);
    for t in 0..c.steps {
        let mut new_rows = Vec::new();
        for (j, o) in c.outs.iter().enumerate() {
            let mut row = vec![0i64; w];
            for (l, v) in row.iter_mut().enumerate() {
                let mut sum_seq = 0;
                for &tap in &c.seq_taps {
                    let r = (off as i64 + t as i64 + tap) as usize;
                    sum_seq += c.seq[r * w + l];
                }
                let mut y = o.c + o.b * sum_seq;
                let hj = &hist[j];
                for &tap in &o.taps() {
                    y += o.a * hj[(hj.len() as i64 + tap) as usize][l];
                }
                if feeds0 && j > 0 {
                    y += o.d * hist[0][hist[0].len() - 1][l];
                }
                *v = y;
            }
            new_rows.push(row);
        }
        for (j, row) in new_rows.into_iter().enumerate() {
            full[j].extend_from_slice(&row);
            if !matches!(c.outs[j].kind, Kind::Nit) {
                hist[j].push(row);
            }
        }
    }
    full
}

/// Run the case with kiln in element type `T`: every output's kept rows.
fn run_case<T: Numeric + Signed>(case: &Case) -> kiln::Result<Vec<Vec<T>>> {
    let conv = |v: &[i64]| -> Vec<T> { v.iter().map(|&x| T::from_f64(x as f64)).collect() };
    let w = case.width;
    let (_, span) = seq_span(&case.seq_taps);
    let seq = Tensor::<T>::from_vec(conv(&case.seq), &[case.steps + span, w]);
    let mut sc = Scan::<T>::new()
        .sequence_taps(&seq, &case.seq_taps)
        .n_steps(case.steps)
        .mode(case.mode);
    for o in &case.outs {
        sc = match &o.kind {
            Kind::Nit => sc.output_none(),
            Kind::Sit => sc.output(&Tensor::from_vec(conv(&o.init), &[w])),
            Kind::Mit(taps) => {
                sc.output_taps(&Tensor::from_vec(conv(&o.init), &[o.window(), w]), taps)
            }
        };
    }
    for (j, o) in case.outs.iter().enumerate() {
        sc = sc.keep(j, o.keep.clone());
    }
    let feeds0 = !matches!(case.outs[0].kind, Kind::Nit);
    let r = sc.run(|s| {
        let mut ys: Vec<Tensor<T>> = Vec::new();
        for (j, o) in case.outs.iter().enumerate() {
            let mut seq_sum = s.seq(0, case.seq_taps[0]);
            for &tap in &case.seq_taps[1..] {
                seq_sum += s.seq(0, tap);
            }
            let mut y = seq_sum * T::from_f64(o.b as f64) + T::from_f64(o.c as f64);
            for tap in o.taps() {
                y += s.out(j, tap) * T::from_f64(o.a as f64);
            }
            if feeds0 && j > 0 {
                y += s.out(0, -1) * T::from_f64(o.d as f64);
            }
            ys.push(y);
        }
        ys
    })?;
    (0..case.outs.len())
        .map(|j| {
            let t = r.try_output::<T>(j)?;
            let n = t.shape()[0];
            assert_eq!(t.shape(), &[n, w], "output {j}");
            Ok(t.to_vec())
        })
        .collect()
}

/// Compare a kiln run against the reference's kept rows.
fn assert_matches_reference<T: Numeric>(got: &[Vec<T>], case: &Case, what: &str) {
    let full = reference(case);
    for (j, o) in case.outs.iter().enumerate() {
        let r = kept(&o.keep, case.steps);
        let want: Vec<f64> = full[j][r.start * case.width..r.end * case.width]
            .iter()
            .map(|&v| v as f64)
            .collect();
        let g: Vec<f64> = got[j].iter().map(|v| v.to_f64()).collect();
        assert_eq!(g, want, "{what}: output {j} ({:?}, {:?})", o.kind, o.keep);
    }
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 32,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    /// Random SITSOT / NITSOT / MITSOT mixes, sequence taps, kept rows and modes equal the
    /// reference loop, in f64 and i64.
    #[test]
    fn scan_matches_reference_loop(case in case_strategy()) {
        leak_checked(|| {
            let f = run_case::<f64>(&case).unwrap_or_else(|e| panic!("f64 {case:?}: {e}"));
            assert_matches_reference(&f, &case, &format!("f64 {case:?}"));
            let i = run_case::<i64>(&case).unwrap_or_else(|e| panic!("i64 {case:?}: {e}"));
            assert_matches_reference(&i, &case, &format!("i64 {case:?}"));
        });
    }
}

/// The edge sizes named in the brief, each combination once (the proptest samples them).
#[test]
fn scan_matches_reference_at_edge_sizes() {
    leak_checked(|| {
        for steps in [0usize, 1, 15, 16, 17] {
            for width in [1usize, 7, 8, 9, 33] {
                // the modes alternate over the grid (a new shape compiles new kernels)
                let mode = if (steps + width) % 2 == 0 {
                    ScanMode::Auto
                } else {
                    ScanMode::Stepped
                };
                {
                    let outs = vec![
                        (Kind::Sit, 1, 1, 1, 0, Keep::All),
                        (Kind::Nit, 0, 2, -1, 1, Keep::Last(3)),
                        (Kind::Mit(vec![-2, -1]), 1, -1, 0, 1, Keep::All),
                    ];
                    let seed = (steps * 100 + width) as u64;
                    let case = Case {
                        steps,
                        width,
                        seq_taps: vec![-1, 0],
                        seq: int_data((steps + 1) * width, seed)
                            .iter()
                            .map(|&v| v as i64)
                            .collect(),
                        outs: outs
                            .into_iter()
                            .enumerate()
                            .map(|(j, (kind, a, b, c, d, keep))| {
                                let mut o = OutCase {
                                    kind,
                                    a,
                                    b,
                                    c,
                                    d,
                                    keep,
                                    init: Vec::new(),
                                };
                                o.init = int_data(o.window() * width, seed + j as u64)
                                    .iter()
                                    .map(|&v| v as i64)
                                    .collect();
                                o
                            })
                            .collect(),
                        mode,
                    };
                    let f = run_case::<f64>(&case).unwrap_or_else(|e| panic!("{case:?}: {e}"));
                    assert_matches_reference(&f, &case, &format!("f64 {case:?}"));
                    let i = run_case::<i64>(&case).unwrap_or_else(|e| panic!("{case:?}: {e}"));
                    assert_matches_reference(&i, &case, &format!("i64 {case:?}"));
                }
            }
        }
    })
}

// =============================================================================================
// 3. Equivalences
// =============================================================================================

/// Every output of a scan result as `i64` rows (the integer programs below).
fn outputs_i64(r: &kiln::scan::ScanResult) -> Vec<Vec<i64>> {
    (0..r.len()).map(|j| r.output::<i64>(j).to_vec()).collect()
}

/// Integer programs give identical results with the rewrites on and off
/// (`Scan::rewrites(false)`, what `KILN_SCAN_REWRITES=0` does for every scan), and with them off
/// no rewrite shows in the report.
#[test]
fn rewrites_on_and_off_agree_on_integer_programs() {
    check(|| {
        let u: Vec<i64> = int_data(20, 3).iter().map(|&v| v as i64).collect();
        let ut = v1(&u);
        let m =
            Tensor::<i64>::from_vec(int_data(24, 8).iter().map(|&v| v as i64).collect(), &[6, 4]);
        let captured = v1(&[3i64, -1, 4, 1]);
        let unused = v1(&[7i64, 7]);
        type Program<'a> = Box<dyn Fn(bool) -> kiln::Result<kiln::scan::ScanResult> + 'a>;
        let programs: Vec<(&str, Program)> = vec![
            (
                "seven outputs, save-mem",
                Box::new(|on| {
                    Scan::<i64>::new()
                        .sequence(&ut)
                        .keep(0, Keep::Nothing)
                        .keep(1, Keep::Rows(0..2))
                        .keep(2, Keep::Row(4))
                        .keep(3, Keep::Row(-5))
                        .keep(4, Keep::Nothing)
                        .keep(5, Keep::Row(-10))
                        .keep(6, Keep::Rows(3..6))
                        .rewrites(on)
                        .run(|s| {
                            let x = s.seq(0, 0);
                            (
                                &x + 0i64,
                                &x + 1i64,
                                &x * 2i64,
                                &x - 3i64,
                                &x * &x,
                                &x % 5i64,
                                -&x,
                            )
                        })
                }),
            ),
            (
                "Fibonacci MITSOT, first half kept",
                Box::new(|on| {
                    Scan::<i64>::new()
                        .output_taps(&v1(&[1i64, 1]), &[-2, -1])
                        .n_steps(60)
                        .keep(0, Keep::Rows(0..30))
                        .rewrites(on)
                        .run(|s| s.out(0, -2) + s.out(0, -1))
                }),
            ),
            (
                "invariant body with a captured array",
                Box::new(|on| {
                    Scan::<i64>::new()
                        .non_sequence(&v1(&[1i64, 2, 3, 4]))
                        .n_steps(4)
                        .rewrites(on)
                        .run(|s| s.non_seq(0) * &captured + 1i64)
                }),
            ),
            (
                "duplicate sequence, unused non-sequence, identical outputs",
                Box::new(|on| {
                    Scan::<i64>::new()
                        .sequence(&m)
                        .sequence(&m)
                        .non_sequence(&unused)
                        .output(&Tensor::zeros(&[4]))
                        .output_none()
                        .output_none()
                        .rewrites(on)
                        .run(|s| {
                            let a = s.seq(0, 0) + s.seq(1, 0);
                            (s.out(0, -1) + &a, a.clone(), a)
                        })
                }),
            ),
            (
                "until with the last two rows kept",
                Box::new(|on| {
                    Scan::<i64>::new()
                        .output(&Tensor::scalar(1i64))
                        .n_steps(100)
                        .keep(0, Keep::Last(2))
                        .rewrites(on)
                        .run(|s| {
                            let x = s.out(0, -1) * 3i64;
                            s.until(&x.gt(&Tensor::scalar(1000i64)));
                            x
                        })
                }),
            ),
            (
                "stepped: a row reduction",
                Box::new(|on| {
                    Scan::<i64>::new()
                        .sequence(&m)
                        .output(&Tensor::scalar(0i64))
                        .rewrites(on)
                        .run(|s| s.out(0, -1) + s.seq(0, 0).sum_axis(0))
                }),
            ),
        ];
        for (name, p) in &programs {
            let on = p(true)?;
            let off = p(false)?;
            assert_eq!(outputs_i64(&on), outputs_i64(&off), "{name}");
            assert_eq!(on.steps().min(off.steps()), on.steps(), "{name}");
            // (`ops_hoisted` may stay non-zero: kiln's scheduler computes loop-invariant values
            // before a one-kernel loop whatever the scan rewrites say.)
            let rep = off.report();
            if !name.starts_with("until") {
                assert_eq!(rep.steps_run, rep.steps_requested, "{name}: no save-mem");
            }
            assert!(
                rep.buffer_rows.iter().all(|&b| b == rep.steps_requested),
                "{name}: every output stored in full: {rep}"
            );
            assert_eq!(rep.matmuls_pushed_out, 0, "{name}: {rep}");
            assert_eq!(rep.inputs_removed, 0, "{name}: {rep}");
            assert_eq!(rep.merged, 0, "{name}: {rep}");
            assert_ne!(rep.mode, "invariant", "{name}: {rep}");
            assert!(
                rep.rewrites
                    .iter()
                    .all(|w| w.starts_with("captured arrays become non-sequences")),
                "{name}: {rep}"
            );
        }
        // with the rewrites on, the programs above do use them
        let on = programs[0].1(true)?;
        assert_eq!(on.steps(), 16, "{}", on.report());
        assert_eq!(programs[0].1(false)?.steps(), 20);
        assert_eq!(programs[2].1(true)?.report().mode, "invariant");
        assert!(programs[3].1(true)?.report().merged >= 2);
        assert_eq!(programs[3].1(true)?.report().inputs_removed, 1);
        Ok(())
    })
}

/// `reverse` (JAX) and `go_backwards` (PyTensor) read the sequences from the end; `reverse`
/// also stores the outputs reversed: its output equals `go_backwards`' reversed along axis 0.
#[test]
fn go_backwards_and_reverse_agree_as_documented() {
    check(|| {
        let data = int_data(15, 4);
        let xs = Tensor::<f64>::from_vec(data.clone(), &[5, 3]);
        let run = |reverse: bool| {
            Scan::<f64>::new()
                .sequence(&xs)
                .output(&Tensor::zeros(&[3]))
                .output_none()
                .reverse(reverse)
                .go_backwards(!reverse)
                .run(|s| {
                    let x = s.seq(0, 0);
                    (s.out(0, -1) + &x, &x * 2.0 + s.t().cast::<f64>())
                })
        };
        let back = run(false)?;
        let rev = run(true)?;
        for j in 0..2 {
            assert_eq!(
                rev.output::<f64>(j).to_vec(),
                back.output::<f64>(j).flip(0).to_vec(),
                "output {j}"
            );
        }
        // go_backwards: step t reads row 4 - t, outputs in iteration order
        let mut acc = [0.0f64; 3];
        let mut want0 = Vec::new();
        let mut want1 = Vec::new();
        for t in 0..5 {
            let row = &data[(4 - t) * 3..(5 - t) * 3];
            for l in 0..3 {
                acc[l] += row[l];
                want1.push(row[l] * 2.0 + t as f64);
            }
            want0.extend_from_slice(&acc);
        }
        assert_eq!(back.output::<f64>(0).to_vec(), want0);
        assert_eq!(back.output::<f64>(1).to_vec(), want1);
        // the JAX face's reverse is the same as Scan's
        let (c, ys) = Lax::new(&Tensor::<f64>::zeros(&[3]), &xs)
            .reverse(true)
            .run(|c, x| {
                let n = c + x;
                (n.clone(), n)
            })?;
        assert_eq!(ys.to_vec(), rev.output::<f64>(0).to_vec());
        assert_eq!(c.to_vec(), acc.to_vec());
        Ok(())
    })
}

/// A lane-independent body: SITSOT, MITSOT and NITSOT outputs, a sequence, a non-sequence.
fn lane_independent(
    xs: &Tensor<f64>,
    mode: ScanMode,
    until_after: Option<u32>,
) -> kiln::Result<(Vec<Vec<f64>>, ScanReport)> {
    let w = xs.shape()[1];
    let r = Scan::<f64>::new()
        .sequence(xs)
        .output(&Tensor::full(0.25, &[w]))
        .output_taps(&Tensor::from_vec(float_data(2 * w, 77), &[2, w]), &[-2, -1])
        .output_none()
        .non_sequence(&Tensor::from_vec(float_data(w, 78), &[w]))
        .mode(mode)
        .run(|s| {
            if let Some(k) = until_after {
                s.until(&s.t().ge(&Tensor::scalar(k)));
            }
            let x = s.seq(0, 0);
            let a = (s.out(0, -1) * 0.9 + &x).sin();
            let b =
                s.out(1, -2) * 0.5 + s.out(1, -1) * 0.25 + (&x * 0.1).exp() * 0.01 + s.non_seq(0);
            let c = Tensor::select(&a.gt(&b), &(&a * &b), &(&a - &b).tanh());
            (a, b, c)
        })?;
    Ok((
        (0..3).map(|j| r.output::<f64>(j).to_vec()).collect(),
        r.report().clone(),
    ))
}

/// Fused (one kernel) and stepped (one step per launch) execution give identical bits on the
/// same lane-independent body; `Auto` picks fused for it.
#[test]
fn fused_and_stepped_modes_agree() {
    check(|| {
        for (steps, w) in [(12usize, 9usize), (1, 1), (17, 33), (16, 8)] {
            let xs = Tensor::<f64>::from_vec(float_data(steps * w, steps as u64), &[steps, w]);
            for until in [None, Some(5u32)] {
                let (f, frep) = lane_independent(&xs, ScanMode::Fused, until)?;
                let (s, srep) = lane_independent(&xs, ScanMode::Stepped, until)?;
                let (a, arep) = lane_independent(&xs, ScanMode::Auto, until)?;
                let what = format!("{steps} steps × {w}, until {until:?}");
                assert_eq!(frep.mode, "fused", "{what}: {frep}");
                assert_eq!(srep.mode, "stepped", "{what}: {srep}");
                assert_eq!(arep.mode, "fused", "{what}: {arep}");
                let want_steps = until.map_or(steps, |k| steps.min(k as usize + 1));
                assert_eq!(frep.steps_run, want_steps, "{what}");
                assert_eq!(srep.steps_run, want_steps, "{what}");
                for j in 0..3 {
                    assert_eq!(f[j].len(), want_steps * w, "{what}: output {j}");
                    assert_eq!(bits(&f[j]), bits(&s[j]), "{what}: output {j}");
                    assert_eq!(bits(&f[j]), bits(&a[j]), "{what}: output {j}");
                }
            }
        }
        Ok(())
    })
}

/// Wide rows in fused mode run lane-blocked on the compiled backends (`backend::blocked`: a
/// block of lanes runs step by step, rows read and written as contiguous segments, instead of
/// each lane walking down its column): forward and reverse carries, sequence taps and a MITSOT,
/// at widths on both sides of a block, 0, 1 and several steps, give the interpreter's bits, and
/// the compiled backends did block.
#[test]
fn wide_fused_scans_run_lane_blocked_with_the_interpreters_bits() {
    use kiln_core::backend::blocked::{policy, set_policy, Policy};
    // these rows move less than the default policy blocks for, and fit one default block: block
    // them anyway, in blocks of 1024 lanes, so that the widest runs several blocks
    let before = policy();
    set_policy(Policy {
        lanes: 1024,
        min_span: 0,
    });
    check(|| {
        let blocked_before = kiln::stats().kernels_blocked;
        for (width, steps) in [(300usize, 7usize), (4099, 3), (1000, 1), (257, 0)] {
            let xs = Tensor::<f64>::from_vec(float_data(steps * width, 9), &[steps, width]);
            let init = Tensor::<f64>::from_vec(float_data(2 * width, 10), &[2, width]);
            let run = || -> kiln::Result<Vec<Vec<u64>>> {
                let zero = Tensor::<f64>::zeros(&[width]);
                let ema = |m: &Tensor<f64>, x: &Tensor<f64>| {
                    let m = m * 0.8123 + x * 0.1877;
                    (m.clone(), m)
                };
                let (c, ys) = Lax::new(&zero, &xs).mode(ScanMode::Fused).run(ema)?;
                let (cr, ysr) = Lax::new(&zero, &xs)
                    .mode(ScanMode::Fused)
                    .reverse(true)
                    .run(ema)?;
                let mut outs = vec![c.to_vec(), ys.to_vec(), cr.to_vec(), ysr.to_vec()];
                if steps > 1 {
                    let r = Scan::<f64>::new()
                        .sequence_taps(&xs, &[-1, 0])
                        .output_taps(&init, &[-2, -1])
                        .mode(ScanMode::Fused)
                        .run(|s| {
                            s.seq(0, -1) * 0.5 + s.seq(0, 0) + s.out(0, -2) * 0.25
                                - s.out(0, -1) * 0.125
                        })?;
                    outs.push(r.output::<f64>(0).to_vec());
                }
                Ok(outs.iter().map(|o| bits(o)).collect())
            };
            let want = with_backend(BackendKind::Interp, run)?;
            for kind in backends().into_iter().filter(|&k| k != BackendKind::Interp) {
                let got = with_backend(kind, run)?;
                for (j, (g, w)) in got.iter().zip(&want).enumerate() {
                    assert_eq!(g, w, "{kind:?}, width {width}, {steps} steps: result {j}");
                }
            }
        }
        let blocked = kiln::stats().kernels_blocked - blocked_before;
        let compiled = backends().len() as u64 - 1;
        assert!(
            blocked >= 2 * compiled,
            "{blocked} kernels blocked, expected the forward and reverse carries on {compiled} backends"
        );
        Ok(())
    });
    set_policy(before);
}

/// A fused scan gives the same bits under every backend (the interpreter is the oracle), and
/// equals the plain-Rust reference.
#[test]
fn fused_scan_agrees_across_backends() {
    leak_checked(|| {
        let (steps, w) = (17usize, 9usize);
        let data: Vec<f64> = int_data(steps * w, 31);
        let init: Vec<f64> = int_data(2 * w, 32);
        let run = || -> kiln::Result<(Vec<f64>, Vec<f64>, ScanReport)> {
            let xs = Tensor::<f64>::from_vec(data.clone(), &[steps, w]);
            let r = Scan::<f64>::new()
                .sequence(&xs)
                .output_taps(&Tensor::from_vec(init.clone(), &[2, w]), &[-2, -1])
                .output_none()
                .mode(ScanMode::Fused)
                .run(|s| {
                    let x = s.seq(0, 0);
                    let y = (s.out(0, -2) - s.out(0, -1) * 0.5 + &x).min(&Tensor::scalar(1e6));
                    let z = Tensor::select(&x.gt(&Tensor::scalar(0.0)), &(&y * 2.0), &(&x - 1.0));
                    (y, z)
                })?;
            Ok((
                r.output::<f64>(0).to_vec(),
                r.output::<f64>(1).to_vec(),
                r.report().clone(),
            ))
        };
        // reference
        let mut hist: Vec<Vec<f64>> = init.chunks(w).map(|c| c.to_vec()).collect();
        let (mut want_y, mut want_z) = (Vec::new(), Vec::new());
        for t in 0..steps {
            let mut row = vec![0.0; w];
            for l in 0..w {
                let x = data[t * w + l];
                let y = (hist[t][l] - hist[t + 1][l] * 0.5 + x).min(1e6);
                row[l] = y;
                want_z.push(if x > 0.0 { y * 2.0 } else { x - 1.0 });
            }
            want_y.extend_from_slice(&row);
            hist.push(row);
        }
        let mut results = Vec::new();
        for kind in backends() {
            let (y, z, rep) = with_backend(kind, || {
                assert_eq!(kiln::backend(), kind);
                run()
            })
            .unwrap_or_else(|e| panic!("{kind:?}: {e}"));
            assert_eq!(rep.mode, "fused", "{kind:?}: {rep}");
            assert_eq!(y, want_y, "{kind:?}");
            assert_eq!(z, want_z, "{kind:?}");
            results.push((kind, bits(&y), bits(&z)));
        }
        for (k, y, z) in &results[1..] {
            assert_eq!(
                (y, z),
                (&results[0].1, &results[0].2),
                "{k:?} vs {:?}",
                results[0].0
            );
        }
        // the float body with transcendental functions agrees bit for bit too
        let xs = Tensor::<f64>::from_vec(float_data(steps * w, 5), &[steps, w]);
        let mut firsts: Option<(BackendKind, Vec<Vec<u64>>)> = None;
        for kind in backends() {
            let (outs, rep) = with_backend(kind, || lane_independent(&xs, ScanMode::Fused, None))
                .unwrap_or_else(|e| panic!("{kind:?}: {e}"));
            assert_eq!(rep.mode, "fused");
            let b: Vec<Vec<u64>> = outs.iter().map(|o| bits(o)).collect();
            match &firsts {
                None => firsts = Some((kind, b)),
                Some((k0, b0)) => assert_eq!(&b, b0, "{kind:?} vs {k0:?}"),
            }
        }
    })
}

/// `keep_states`: row 0 is the initial state (the initial rows for a MITSOT), row `window + t`
/// is output row `t` — what a forward recompute gives — in every mode and on both faces.
#[test]
fn keep_states_equals_forward_recompute() {
    check(|| {
        let (steps, w) = (9usize, 7usize);
        let xs = Tensor::<f64>::from_vec(float_data(steps * w, 12), &[steps, w]);
        let s0 = Tensor::<f64>::from_vec(float_data(w, 13), &[w]);
        let m0 = Tensor::<f64>::from_vec(float_data(2 * w, 14), &[2, w]);
        for mode in [ScanMode::Fused, ScanMode::Stepped] {
            for until in [None, Some(4u32)] {
                let r = Scan::<f64>::new()
                    .sequence(&xs)
                    .output(&s0)
                    .output_taps(&m0, &[-2, -1])
                    .output_none()
                    .keep_states(true)
                    .mode(mode)
                    .run(|s| {
                        if let Some(k) = until {
                            s.until(&s.t().ge(&Tensor::scalar(k)));
                        }
                        let x = s.seq(0, 0);
                        let a = (s.out(0, -1) + &x).tanh();
                        let b = s.out(1, -2) * 0.5 - s.out(1, -1) * 0.25 + &x;
                        let c = &a * &b;
                        (a, b, c)
                    })?;
                let n = r.steps();
                assert_eq!(n, until.map_or(steps, |k| k as usize + 1));
                let what = format!("{mode:?}, until {until:?}");
                let st0 = r.states::<f64>(0)?;
                assert_eq!(st0.shape(), &[n + 1, w], "{what}");
                assert_eq!(st0.index_axis(0, 0).to_vec(), s0.to_vec(), "{what}");
                let st1 = r.states::<f64>(1)?;
                assert_eq!(st1.shape(), &[n + 2, w], "{what}");
                assert_eq!(st1.slice(kiln::s![0..2]).to_vec(), m0.to_vec(), "{what}");
                let (o0, o1) = (r.output::<f64>(0), r.output::<f64>(1));
                for t in 0..n {
                    assert_eq!(
                        bits(&st0.index_axis(0, t + 1).to_vec()),
                        bits(&o0.index_axis(0, t).to_vec()),
                        "{what}: step {t}"
                    );
                    assert_eq!(
                        bits(&st1.index_axis(0, t + 2).to_vec()),
                        bits(&o1.index_axis(0, t).to_vec()),
                        "{what}: step {t}"
                    );
                }
                // a forward recompute of the first output by a plain loop
                let (xv, mut h) = (xs.to_vec(), s0.to_vec());
                let mut want = h.clone();
                for t in 0..n {
                    for l in 0..w {
                        h[l] = (h[l] + xv[t * w + l]).tanh();
                    }
                    want.extend_from_slice(&h);
                }
                assert_close(&st0.to_vec(), &want, 1e-14, &what);
                // a NITSOT keeps no states
                assert_mentions(
                    &scan_err(r.states::<f64>(2)),
                    &["output 2", "kept no states"],
                );
            }
        }
        // the JAX face: states of every carry entry, [length + 1, …]
        let carry = (s0.clone(), Tensor::<f64>::scalar(1.0));
        let ((a, b), ys, states) = Lax::new(&carry, &xs).run_with_states::<_, f64>(|c, x| {
            let (h, k) = c;
            let h2 = (h * 0.5 + x).sin();
            let k2 = k * 1.5;
            ((h2.clone(), k2), h2)
        })?;
        assert_eq!(states.len(), 2);
        assert_eq!(states[0].shape(), &[steps + 1, w]);
        assert_eq!(states[1].shape(), &[steps + 1]);
        assert_eq!(states[0].index_axis(0, 0).to_vec(), s0.to_vec());
        assert_eq!(
            states[0].slice(kiln::s![1..]).to_vec(),
            ys.to_vec(),
            "row t + 1 is step t's carry"
        );
        assert_eq!(states[0].index_axis(0, steps).to_vec(), a.to_vec());
        let want_k: Vec<f64> = (0..=steps).map(|t| 1.5f64.powi(t as i32)).collect();
        assert_eq!(states[1].to_vec(), want_k);
        assert_eq!(b.to_vec(), vec![1.5f64.powi(steps as i32)]);
        Ok(())
    })
}

// =============================================================================================
// 4. Composition
// =============================================================================================

/// A frozen function containing a scan, called three times with different data of the same
/// length, gives the right results (fused and stepped scans; the JAX face).
#[test]
fn frozen_function_with_a_scan() {
    check(|| {
        let (steps, w) = (6usize, 4usize);
        let reference = |data: &[f64]| -> Vec<f64> {
            let mut h = vec![0.0; w];
            let mut out = Vec::new();
            for t in 0..steps {
                for l in 0..w {
                    h[l] = h[l] * 0.5 + data[t * w + l];
                }
                out.extend_from_slice(&h);
            }
            out
        };
        let mut fused = kiln::freeze(|xs: &Tensor<f64>| -> Tensor<f64> {
            Scan::<f64>::new()
                .sequence(xs)
                .output(&Tensor::zeros(&[4]))
                .run(|s| s.out(0, -1) * 0.5 + s.seq(0, 0))
                .expect("the scan runs")
                .output::<f64>(0)
        });
        let mut stepped = kiln::freeze(|xs: &Tensor<f64>| -> Tensor<f64> {
            Scan::<f64>::new()
                .sequence(xs)
                .output(&Tensor::zeros(&[4]))
                .mode(ScanMode::Stepped)
                .run(|s| s.out(0, -1) * 0.5 + s.seq(0, 0))
                .expect("the scan runs")
                .output::<f64>(0)
        });
        let mut lax = kiln::freeze(|xs: &Tensor<f64>| -> (Tensor<f64>, Tensor<f64>) {
            kiln::scan(&Tensor::<f64>::zeros(&[4]), xs, |h, x| {
                let n = h * 0.5 + x;
                (n.clone(), n)
            })
            .expect("the scan runs")
        });
        for call in 0..3u64 {
            let data = int_data(steps * w, 100 + call);
            let xs = Tensor::<f64>::from_vec(data.clone(), &[steps, w]);
            let want = reference(&data);
            assert_eq!(fused.call(&xs)?.to_vec(), want, "fused, call {call}");
            assert_eq!(stepped.call(&xs)?.to_vec(), want, "stepped, call {call}");
            let (c, ys) = lax.call(&xs)?;
            assert_eq!(ys.to_vec(), want, "JAX face, call {call}");
            assert_eq!(c.to_vec(), want[(steps - 1) * w..].to_vec(), "call {call}");
        }
        Ok(())
    })
}

/// An RNN: `h_t = tanh(x_t W_in + h_{t-1} W_h)` with `W_in` captured. Stepped, the product of
/// the sequence row and the captured matrix is pushed out (one product over every step); the
/// result equals the same RNN written as a Rust loop over kiln ops.
#[test]
fn rnn_with_matmul_pushes_the_input_product_out() {
    check(|| {
        let (steps, m, k, n) = (7usize, 2usize, 3usize, 4usize);
        let x = Tensor::<f64>::from_vec(float_data(steps * m * k, 40), &[steps, m, k]);
        let w_in = labeled(
            Tensor::<f64>::from_vec(float_data(k * n, 41), &[k, n]),
            "W_in",
        );
        let w_h = Tensor::<f64>::from_vec(float_data(n * n, 42), &[n, n]) * 0.5;
        let h0 = Tensor::<f64>::from_vec(float_data(m * n, 43), &[m, n]);
        let r = Scan::<f64>::new()
            .label("rnn")
            .sequence(&x)
            .output(&h0)
            .non_sequence(&w_h)
            .mode(ScanMode::Stepped)
            .run(|s| (s.seq(0, 0).matmul(&w_in) + s.out(0, -1).matmul(&s.non_seq(0))).tanh())?;
        let rep = r.report();
        assert_eq!(rep.mode, "stepped", "{rep}");
        assert_eq!(rep.matmuls_pushed_out, 1, "{rep}");
        assert_eq!(rep.captured, vec!["W_in".to_string()], "{rep}");
        assert_eq!(rep.steps_run, steps);
        // the same RNN, step by step
        let mut h = h0.clone();
        let mut want = Vec::new();
        for t in 0..steps {
            h = (x.index_axis(0, t).matmul(&w_in) + h.matmul(&w_h)).tanh();
            want.extend(h.to_vec());
        }
        let out = r.output::<f64>(0);
        assert_eq!(out.shape(), &[steps, m, n]);
        assert_close(&out.to_vec(), &want, 1e-12, "RNN");
        // Auto mode gives the same
        let r2 = Scan::<f64>::new()
            .sequence(&x)
            .output(&h0)
            .non_sequence(&w_h)
            .run(|s| (s.seq(0, 0).matmul(&w_in) + s.out(0, -1).matmul(&s.non_seq(0))).tanh())?;
        assert_close(&r2.output::<f64>(0).to_vec(), &want, 1e-12, "RNN, auto");
        Ok(())
    })
}

/// A scan inside a scan's body: a JAX scan whose body maps over its row; an outer scan over rows
/// whose body iterates an inner scan three times on the outer carry, the outer row passed as a
/// non-sequence, and the same with the outer row captured by the inner body's closure (the only
/// way the JAX face has to pass it).
#[test]
fn nested_scan() {
    check(|| {
        let (steps, w) = (4usize, 5usize);
        let data = int_data(steps * w, 55);
        let xs = Tensor::<f64>::from_vec(data.clone(), &[steps, w]);
        // a JAX scan whose body maps over its row
        let (c, ys) = kiln::scan(&Tensor::scalar(0.0f64), &xs, |c, row| {
            let sq = kiln::scan::map(row, |v| v * v).expect("the inner map runs");
            let s = sq.sum_axis(0);
            (c + &s, s)
        })?;
        let want_ys: Vec<f64> = data
            .chunks(w)
            .map(|r| r.iter().map(|v| v * v).sum())
            .collect();
        assert_eq!(ys.to_vec(), want_ys);
        assert_eq!(c.to_vec(), vec![want_ys.iter().sum::<f64>()]);

        // h ← h / 2 + x three times per outer row
        let mut h = vec![0.0f64; w];
        let mut want = Vec::new();
        for t in 0..steps {
            for _ in 0..3 {
                for l in 0..w {
                    h[l] = h[l] * 0.5 + data[t * w + l];
                }
            }
            want.extend_from_slice(&h);
        }
        // inner errors are returned, not panicked inside the outer trace
        let inner_error: std::cell::RefCell<Option<Error>> = Default::default();
        let stash = |e: Error| {
            inner_error.borrow_mut().get_or_insert(e);
        };
        // the outer row as the inner scan's non-sequence
        let r = Scan::<f64>::new()
            .label("outer")
            .sequence(&xs)
            .output(&Tensor::zeros(&[w]))
            .run(|s| {
                let inner = Scan::<f64>::new()
                    .label("inner")
                    .output(&s.out(0, -1))
                    .non_sequence(&s.seq(0, 0))
                    .n_steps(3)
                    .keep(0, Keep::Row(-1))
                    .run(|i| i.out(0, -1) * 0.5 + i.non_seq(0));
                match inner {
                    Ok(r) => r.output::<f64>(0).index_axis(0, 0),
                    Err(e) => {
                        stash(e);
                        s.out(0, -1)
                    }
                }
            })?;
        if let Some(e) = inner_error.take() {
            return Err(e);
        }
        assert_eq!(r.output::<f64>(0).to_vec(), want, "non-sequence");
        // the outer row captured by the inner body
        let r = Scan::<f64>::new()
            .label("outer")
            .sequence(&xs)
            .output(&Tensor::zeros(&[w]))
            .run(|s| {
                let x = s.seq(0, 0);
                match Lax::new(&s.out(0, -1), &())
                    .label("inner")
                    .length(3)
                    .run(|h, _| (h * 0.5 + &x, ()))
                {
                    Ok((c, ())) => c,
                    Err(e) => {
                        stash(e);
                        s.out(0, -1)
                    }
                }
            })?;
        if let Some(e) = inner_error.take() {
            return Err(e);
        }
        assert_eq!(r.output::<f64>(0).to_vec(), want, "captured");
        Ok(())
    })
}

/// A captured tensor becomes a non-sequence, reported by its label; strict mode makes it an
/// error naming the label, on both faces.
#[test]
fn strict_mode_names_the_captured_tensor() {
    check(|| {
        let w = labeled(Tensor::<f64>::from_vec(vec![2.0, 3.0], &[2]), "W");
        let xs = Tensor::<f64>::from_vec(vec![1.0, 2.0, 3.0, 4.0], &[2, 2]);
        let r = Scan::<f64>::new().sequence(&xs).run(|s| s.seq(0, 0) * &w)?;
        assert_eq!(r.output::<f64>(0).to_vec(), vec![2.0, 6.0, 6.0, 12.0]);
        assert_eq!(r.report().captured, vec!["W".to_string()]);
        assert!(
            r.report().inputs.iter().any(|i| i.contains("`W`")),
            "{:?}",
            r.report().inputs
        );
        let msg = scan_err(
            Scan::<f64>::new()
                .label("strict_scan")
                .sequence(&xs)
                .strict(true)
                .run(|s| s.seq(0, 0) * &w),
        );
        assert_mentions(&msg, &["strict_scan", "strict", "`W`", ".non_sequence("]);
        let msg = scan_err(
            Lax::new(&Tensor::<f64>::zeros(&[2]), &xs)
                .strict(true)
                .run(|c, x| (c + x * &w, ())),
        );
        assert_mentions(&msg, &["strict", "`W`"]);
        // passed explicitly, strict mode is satisfied
        let r = Scan::<f64>::new()
            .sequence(&xs)
            .non_sequence(&w)
            .strict(true)
            .run(|s| s.seq(0, 0) * s.non_seq(0))?;
        assert_eq!(r.output::<f64>(0).to_vec(), vec![2.0, 6.0, 6.0, 12.0]);
        assert!(r.report().captured.is_empty());
        Ok(())
    })
}

/// Found by adversarial testing (issue 26's review): `keep_states` on a stepped scan (the body
/// reduces) with two recurrent outputs of different shapes panicked in the LLVM backend
/// ("registry-only ops never appear in kernels"). Storing the second output's state row resolved
/// a pending reduction, whose broadcast scalars were evaluated first — together with the pending
/// scatter of the first output's row, which read a reduction still pending. Scalars settled before
/// an evaluation now leave pending scatters to it.
#[test]
fn keep_states_of_a_stepped_scan_with_a_reduction_and_two_outputs() {
    // (under the harness like the others: unguarded, its arrays were alive while a guarded test
    // on another thread checked that nothing was, and that test failed)
    check(|| {
        let xs = Tensor::from_vec(vec![1.0f64, 2.0, 3.0, 4.0], &[2, 2]);
        let r = Scan::<f64>::new()
            .sequence(&xs)
            .output(&Tensor::from_vec(vec![0.5f64, 0.25], &[2]))
            .output(&Tensor::scalar(0.3f64))
            .keep_states(true)
            .run(|s| {
                let a2 = s.out(0, -1) * s.seq(0, 0);
                let b2 = Tensor::from_array(a2.array().sum(), &[]) + s.out(1, -1);
                (a2, b2)
            })?;
        assert_eq!(
            r.states::<f64>(0)?.to_vec(),
            vec![0.5, 0.25, 0.5, 0.5, 1.5, 2.0]
        );
        assert_eq!(r.states::<f64>(1)?.to_vec(), vec![0.3, 1.3, 4.8]);
        Ok(())
    });
}

/// A carry that starts from the very matrix the body also multiplies by (`a·W` with `a₀ = W`):
/// the stepped scan's frozen step must keep the two apart (it took them for one input, and its
/// replays read the new carry where the body reads `W`: steps 1.. were wrong).
#[test]
fn a_carry_that_starts_from_a_captured_matrix() {
    check(|| {
        let vals = |n: usize, seed: u64| -> Vec<f64> {
            (0..n)
                .map(|i| ((i as u64 * 7919 + seed * 104_729) % 1000) as f64 / 1000.0 - 0.5)
                .collect()
        };
        let xs = Tensor::from_vec(vals(4 * 9, 2), &[4, 3, 3]);
        let w = Tensor::from_vec(vals(9, 1), &[3, 3]);
        let (c, ys) = kiln::scan(&w, &xs, |a, x| {
            let h = (a.matmul(&w) + x).sin();
            (h.clone(), h)
        })?;
        let mut want = w.clone();
        let mut rows = Vec::new();
        for s in 0..4 {
            want = (want.matmul(&w) + xs.index_axis(0, s)).sin();
            rows.extend(want.to_vec());
        }
        assert_eq!(c.to_vec(), want.to_vec());
        assert_eq!(ys.to_vec(), rows);
        assert_eq!(w.to_vec(), vals(9, 1), "the captured matrix is unchanged");
        Ok(())
    });
}

/// A row reshaped before its product (`[2, 3]` read as `[3, 2]`, `[1, 6]`) is still pushed out
/// (the sequence read as `[rows · m, k]`), with the values of the loop written out by hand.
#[test]
fn a_reshaped_row_is_pushed_out_with_its_own_shape() {
    leak_checked(a_reshaped_row_pushed_out);
}

fn a_reshaped_row_pushed_out() {
    let (n, hd) = (5usize, 4usize);
    let v = |len: usize, s: usize| -> Vec<f64> {
        (0..len)
            .map(|i| ((i * 7 + s * 13) % 17) as f64 / 17.0 - 0.4)
            .collect()
    };
    let u = Tensor::from_vec(v(2 * hd, 1), &[2, hd]);
    let u6 = Tensor::from_vec(v(6 * hd, 2), &[6, hd]);
    let xs = Tensor::from_vec(v(n * 6, 3), &[n, 2, 3]);
    let h0 = Tensor::from_vec(v(3 * hd, 4), &[3, hd]);
    let body = |h: &Tensor<f64>, x: &Tensor<f64>| {
        let p = x.reshape(&[3, 2]).matmul(&u);
        let q = x.reshape(&[1, 6]).matmul(&u6);
        let h2 = (h * 0.5 + p + q.broadcast_to(&[3, hd])).tanh();
        (h2.clone(), q)
    };
    let mut report = ScanReport::default();
    let (h, qs) = Lax::new(&h0, &xs).report(&mut report).run(body).unwrap();
    assert_eq!(report.matmuls_pushed_out, 2, "{report}");
    let mut hh = h0.clone();
    let mut q_rows = Vec::new();
    for s in 0..n {
        let (h2, q) = body(&hh, &xs.index_axis(0, s));
        hh = h2;
        q_rows.extend(q.to_vec());
    }
    for (a, b) in h.to_vec().iter().zip(hh.to_vec()) {
        assert!((a - b).abs() < 1e-12, "{a} vs {b}");
    }
    for (a, b) in qs.to_vec().iter().zip(&q_rows) {
        assert!((a - b).abs() < 1e-12, "{a} vs {b}");
    }
}
