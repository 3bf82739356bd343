//! Gradients through PyTensor's face of scan ([`kiln::scan::Scan`], issue 26): the cases of
//! PyTensor's scan gradient tests (pymc-devs/pytensor `tests/scan/test_basic.py`, the
//! `test_grad_*` family and `TestGradUntil`), ported as cases — their programs, shapes, taps and
//! expected values — and checked here by reverse mode, forward mode and central differences in
//! f64 (PyTensor checks against its numeric gradient with a 1e-2 tolerance; these use 1e-6).
//! Where a case had to change, the test says how.

mod ad_check;
use ad_check::{check, no_leak, rand, serial};
use kiln::prelude::*;
use kiln::scan::{Keep, Scan};

fn t(a: &Float64, shape: &[usize]) -> Tensor<f64> {
    Tensor::from_array(a.clone(), shape)
}

/// `v · m` for a vector `v` and a matrix `m` (PyTensor's `dot(vector, matrix)`).
fn vdot(v: &Tensor<f64>, m: &Tensor<f64>) -> Tensor<f64> {
    let (r, c) = (m.shape()[0], m.shape()[1]);
    v.reshape(&[1, r]).matmul(m).reshape(&[c])
}

/// `Σ v·w` as a scalar tensor (PyTensor's `dot(vector, vector)`).
fn inner(v: &Tensor<f64>, w: &Tensor<f64>) -> Tensor<f64> {
    Tensor::from_array((v * w).sum(), &[])
}

/// Flatten and join outputs into one array for the oracle.
fn joined(parts: &[Tensor<f64>]) -> Float64 {
    let flat: Vec<Tensor<f64>> = parts.iter().map(|p| p.reshape(&[p.len()])).collect();
    Tensor::concat(&flat, 0).array().clone()
}

/// `test_grad_one_output`: x_t = u_t·W_in + x_{t-1}·W over 10 steps; gradients w.r.t. u, x0,
/// W_in, W.
#[test]
fn grad_one_output() {
    let _s = serial();
    check(
        &[rand(10, 1), rand(1, 2), rand(1, 3), rand(1, 4)],
        |v| {
            let r = Scan::new()
                .sequence(&t(&v[0], &[10]))
                .output(&t(&v[1], &[]))
                .non_sequence(&t(&v[2], &[]))
                .non_sequence(&t(&v[3], &[]))
                .run(|s| &(s.seq(0, 0) * s.non_seq(0)) + &(s.out(0, -1) * s.non_seq(1)))
                .unwrap();
            // (the oracle also runs it without gradients: then the scan runs as usual; with them,
            // the sequence's gradient is a `y` of the gradient scan)
            let tracked = v.iter().any(|a| a.grad_enabled());
            assert_eq!(r.report().mode == "differentiated, gradient scan", tracked);
            r.output::<f64>(0).array().clone()
        },
        1e-6,
    );
}

/// `test_grad_multiple_outs`: two recurrent outputs, two sequences, a non-sequence and three
/// captured weights (PyTensor's shared variables: here they are inputs of the oracle too, so
/// their gradients are checked as well). y0 reaches no output (its gradient is zero).
#[test]
fn grad_multiple_outs() {
    let _s = serial();
    check(
        &[
            rand(14, 1),
            rand(7, 2),
            rand(2, 3),
            rand(1, 4),
            rand(4, 5),
            rand(2, 6),
            rand(4, 7),
            rand(2, 8),
        ],
        |v| {
            let (w_in2, w, w_out) = (t(&v[5], &[2]), t(&v[6], &[2, 2]), t(&v[7], &[2]));
            let r = Scan::new()
                .sequence(&t(&v[0], &[7, 2]))
                .sequence(&t(&v[1], &[7]))
                .output(&t(&v[2], &[2]))
                .output(&t(&v[3], &[]))
                .non_sequence(&t(&v[4], &[2, 2]))
                .run(|s| {
                    let x = s.out(0, -1);
                    let x2 = &(&vdot(&s.seq(0, 0), &s.non_seq(0)) + &(&w_in2 * &s.seq(1, 0)))
                        + &vdot(&x, &w);
                    (x2, inner(&x, &w_out))
                })
                .unwrap();
            joined(&[r.output(0), r.output(1)])
        },
        1e-6,
    );
}

/// `test_grad_multiple_outs_taps` (and `_backwards`): a sequence read at taps [-1, 0, 1], a
/// MITSOT output with taps [-1, -3], a NITSOT output.
#[test]
fn grad_multiple_outs_taps() {
    let _s = serial();
    let n = 5;
    for backwards in [false, true] {
        check(
            &[
                rand(n * 2, 1),
                rand((n + 2) * 2, 2),
                rand(2, 3),
                rand(3, 4),
                rand(4, 5),
                rand(2, 6),
                rand(4, 7),
                rand(2, 8),
            ],
            |v| {
                let (w_in2, w, w_out) = (t(&v[5], &[2]), t(&v[6], &[2, 2]), t(&v[7], &[2]));
                let r = Scan::new()
                    .sequence(&t(&v[0], &[n, 2]))
                    .sequence_taps(&t(&v[1], &[n + 2, 2]), &[-1, 0, 1])
                    .output(&t(&v[2], &[2]))
                    .output_taps(&t(&v[3], &[3]), &[-1, -3])
                    .output_none()
                    .non_sequence(&t(&v[4], &[2, 2]))
                    .go_backwards(backwards)
                    .run(|s| {
                        let x = s.out(0, -1);
                        let u2 = &s.seq(1, 0) + &(s.seq(1, -1) * s.seq(1, 1));
                        let in1 = vdot(&s.seq(0, 0), &s.non_seq(0));
                        let x2 = &(&in1 + &(&u2 * &w_in2)) + &vdot(&x, &w);
                        let y2 = &(s.out(1, -1) + s.out(1, -3)) * &inner(&x, &w_out);
                        (x2, y2, in1)
                    })
                    .unwrap();
                assert_eq!(r.steps(), n);
                // sequence taps and a MITSOT are a gradient scan's too (the MITSOT's carry is
                // its window of rows; each sequence tap a view of the rows its steps read)
                let tracked = v.iter().any(|a| a.grad_enabled());
                assert_eq!(r.report().mode == "differentiated, gradient scan", tracked);
                joined(&[r.output(0), r.output(1), r.output(2)])
            },
            1e-6,
        );
    }
}

/// `test_grad_multiple_outs_some_truncate`: with `truncate_gradient(3)` over 5 steps the first
/// two sequence rows get no gradient. (The case adds a random number per step, which changes no
/// gradient; it is left out.) Beyond the case: the recorded rows get exactly the untruncated
/// gradient (every later use of them is recorded) and the initial state gets none.
#[test]
fn grad_multiple_outs_some_truncate() {
    let _s = serial();
    let run = |truncate: Option<usize>| {
        let mut u = Float64::from_slice(&rand(10, 1));
        let mut x0 = Float64::from_slice(&rand(2, 2));
        let mut w_in = Float64::from_slice(&rand(4, 3));
        for a in [&mut u, &mut x0, &mut w_in] {
            a.enable_grad();
        }
        let mut sc = Scan::new()
            .sequence(&t(&u, &[5, 2]))
            .output(&t(&x0, &[2]))
            .non_sequence(&t(&w_in, &[2, 2]));
        if let Some(k) = truncate {
            sc = sc.truncate_gradient(k);
        }
        let r = sc
            .run(|s| &vdot(&s.seq(0, 0), &s.non_seq(0)) + &s.out(0, -1))
            .unwrap();
        let w = Float64::from_slice(&rand(10, 9));
        (r.output::<f64>(0).array() * &w).sum().backward();
        (
            u.grad().to_vec(),
            x0.grad().to_vec(),
            r.report().mode_reason.clone(),
        )
    };
    let (gu, gx0, why) = run(Some(3));
    let (full_u, _, _) = run(None);
    assert_eq!(&gu[..4], &[0.0; 4], "rows 0 and 1 get nothing");
    for i in 4..10 {
        assert!(
            (gu[i] - full_u[i]).abs() < 1e-12,
            "row {}: {gu:?} vs {full_u:?}",
            i / 2
        );
    }
    assert_eq!(gx0, vec![0.0, 0.0]);
    assert!(why.contains("last 3 step"), "{why}");
}

/// `TestGradUntil`: x² over arange(15) until x > 5: the 7 steps up to 6 run, and the gradient is
/// 2x on them, 0 after.
#[test]
fn grad_until() {
    let _s = serial();
    let seq: Vec<f64> = (0..15).map(f64::from).collect();
    let expect_out: Vec<f64> = seq[..7].iter().map(|x| x * x).collect();
    let expect_grad = |cut: usize| -> Vec<f64> {
        (0..15)
            .map(|i| {
                if (cut..7).contains(&i) {
                    2.0 * seq[i]
                } else {
                    0.0
                }
            })
            .collect()
    };
    no_leak(|| {
        for truncate in [None, Some(3)] {
            let mut x = Float64::from_slice(&seq);
            x.enable_grad();
            let mut sc = Scan::new()
                .sequence(&t(&x, &[15]))
                .non_sequence_as(&Tensor::scalar(5i64));
            if let Some(k) = truncate {
                sc = sc.truncate_gradient(k);
            }
            let r = sc
                .run(|s| {
                    let x = s.seq(0, 0);
                    let u = Tensor::from_array(s.non_seq_as::<i64>(0).array().cast::<f64>(), &[]);
                    s.until(&x.gt(&u));
                    &x * &x
                })
                .unwrap();
            assert_eq!(r.output::<f64>(0).to_vec(), expect_out);
            assert_eq!(r.report().steps_run, 7);
            r.output::<f64>(0).array().sum().backward();
            // `test_grad_until_and_truncate`: the first 7 - 3 rows get nothing
            assert_eq!(x.grad().to_vec(), expect_grad(7 - truncate.unwrap_or(7)));
        }
    });
}

/// `test_grad_until_ndim_greater_one`: the same over rows of 5 columns, until all of a row > 5.
#[test]
fn grad_until_ndim_greater_one() {
    let _s = serial();
    let seq: Vec<f64> = (0..15).flat_map(|i| [f64::from(i); 5]).collect();
    let mut x = Float64::from_slice(&seq);
    x.enable_grad();
    let r = Scan::new()
        .sequence(&t(&x, &[15, 5]))
        .run(|s| {
            let x = s.seq(0, 0);
            let above = x
                .gt(&Tensor::scalar(5.0))
                .array()
                .cast::<i32>()
                .reduce_min();
            s.until(&Tensor::from_array(above, &[]).ge(&Tensor::scalar(1)));
            &x * &x
        })
        .unwrap();
    assert_eq!(r.output::<f64>(0).shape(), &[7, 5]);
    r.output::<f64>(0).array().sum().backward();
    let expect: Vec<f64> = seq
        .iter()
        .map(|&v| if v < 7.0 { 2.0 * v } else { 0.0 })
        .collect();
    assert_eq!(x.grad().to_vec(), expect);
}

/// `check_grad_until_and_truncate_sequence_taps`: x_{t-2}·x_t over arange(15) read at taps
/// [-2, 0], until x_t > 6, truncate_gradient 3: PyTensor's hand-computed gradient.
#[test]
fn grad_until_and_truncate_sequence_taps() {
    let _s = serial();
    let mut x = Float64::from_slice(&(0..15).map(f64::from).collect::<Vec<_>>());
    x.enable_grad();
    let r = Scan::new()
        .sequence_taps(&t(&x, &[15]), &[-2, 0])
        .truncate_gradient(3)
        .run(|s| {
            s.until(&s.seq(0, 0).gt(&Tensor::scalar(6.0)));
            s.seq(0, -2) * s.seq(0, 0)
        })
        .unwrap();
    r.output::<f64>(0).array().sum().backward();
    let expect = [
        0.0, 0.0, 0.0, 5.0, 6.0, 10.0, 4.0, 5.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0,
    ];
    assert_eq!(x.grad().to_vec(), expect);
}

/// `test_grad_until_with_recurrent_state`: x_t = a·x_{t-1} + y_t until it exceeds 5, with the
/// closed-form gradients for the sequence and the initial state (the step count comes from the
/// run, not from a buffer holding the initial row).
#[test]
fn grad_until_with_recurrent_state() {
    let _s = serial();
    let a = 1.3f64;
    let ys: Vec<f64> = (0..12).map(|i| 0.4 + 0.5 * f64::from(i) / 11.0).collect();
    let mut y = Float64::from_slice(&ys);
    let mut x0 = Float64::from_slice(&[0.2]);
    y.enable_grad();
    x0.enable_grad();
    let r = Scan::new()
        .sequence(&t(&y, &[12]))
        .output(&t(&x0, &[]))
        .run(|s| {
            let x = &(s.out(0, -1) * a) + &s.seq(0, 0);
            s.until(&x.gt(&Tensor::scalar(5.0)));
            x
        })
        .unwrap();
    let k = r.steps();
    assert!(1 < k && k < 12, "until fires mid-sequence ({k})");
    r.output::<f64>(0).array().sum().backward();
    let kf = k as i32;
    for (j, g) in y.grad().to_vec().iter().enumerate() {
        let want = if j < k {
            (a.powi(kf - j as i32) - 1.0) / (a - 1.0)
        } else {
            0.0
        };
        assert!((g - want).abs() < 1e-12, "y[{j}]: {g} vs {want}");
    }
    let want = a * (a.powi(kf) - 1.0) / (a - 1.0);
    assert!((x0.grad().item() - want).abs() < 1e-12);
}

/// `test_grad_wrt_shared`: a captured tensor with a gradient (PyTensor's shared variable):
/// d Σ(v·x1) / d x1 = Σ v.
#[test]
fn grad_wrt_shared() {
    let _s = serial();
    let mut x1 = Float64::from_slice(&[3.0]);
    x1.enable_grad();
    let cap = t(&x1, &[]);
    let v = Tensor::from_vec(vec![1.0, 2.5, -4.0], &[3]);
    let r = Scan::new()
        .sequence(&v)
        .run(|s| s.seq(0, 0) * &cap)
        .unwrap();
    assert_eq!(r.output::<f64>(0).to_vec(), vec![3.0, 7.5, -12.0]);
    r.output::<f64>(0).array().sum().backward();
    assert_eq!(x1.grad().to_vec(), vec![-0.5]);
    // under `strict`, capturing it is an error naming the fix
    let e = Scan::new()
        .sequence(&v)
        .strict(true)
        .run(|s| s.seq(0, 0) * &cap)
        .err()
        .expect("strict refuses a captured gradient");
    assert!(e.to_string().contains("non-sequence"), "{e}");
}

/// `test_grad_multiple_seqs_different_nsteps` and `test_grad_of_grad_of_state`: the terms
/// c_t·x^p_t of a polynomial, with the powers read from a 1000-row sequence clipped to c's 4
/// rows: P = 1 + 2x − 3x² + 4x³, P'(2) = 38, P''(2) = 42.
#[test]
fn grad_of_grad_of_state() {
    let _s = serial();
    let c = Tensor::from_vec(vec![1.0, 2.0, -3.0, 4.0], &[4]);
    let powers = Tensor::from_array(Float64::arange(1000), &[1000]);
    let p = |x: &Float64| -> Float64 {
        let r = Scan::new()
            .sequence(&c)
            .sequence(&powers)
            .non_sequence(&t(x, &[]))
            .run(|s| {
                let xp = s
                    .non_seq(0)
                    .zip_with(&s.seq(1, 0), |a, b| a.pow(b))
                    .unwrap();
                s.seq(0, 0) * xp
            })
            .unwrap();
        assert_eq!(r.steps(), 4);
        r.output::<f64>(0).array().sum()
    };
    let d1 = |x: &Float64| kiln::grad(p, x).unwrap();
    let d2 = kiln::grad(|x: &Float64| d1(x).sum(), &Float64::from(2.0)).unwrap();
    assert!((d1(&Float64::from(2.0)).item() - 38.0).abs() < 1e-9);
    assert!((d2.item() - 42.0).abs() < 1e-9, "{}", d2.item());
}

/// `test_high_order_grad_sitsot`: x ← x² four times from x = 0.95 is x^16; its first four
/// derivatives through the scan (PyTensor's backward scan got the fourth wrong once).
#[test]
fn high_order_grad_sitsot() {
    let _s = serial();
    let f = |x: &Float64| -> Float64 {
        let r = Scan::new()
            .output(&t(x, &[]))
            .n_steps(4)
            .run(|s| s.out(0, -1) * s.out(0, -1))
            .unwrap();
        r.last::<f64>(0).unwrap().array().clone()
    };
    let x = 0.95f64;
    let d1 = |a: &Float64| kiln::grad(f, a).unwrap();
    let d2 = |a: &Float64| kiln::grad(|a: &Float64| d1(a).sum(), a).unwrap();
    let d3 = |a: &Float64| kiln::grad(|a: &Float64| d2(a).sum(), a).unwrap();
    let d4 = kiln::grad(|a: &Float64| d3(a).sum(), &Float64::from(x)).unwrap();
    let got = [
        f(&Float64::from(x)).item(),
        d1(&Float64::from(x)).item(),
        d2(&Float64::from(x)).item(),
        d3(&Float64::from(x)).item(),
        d4.item(),
    ];
    let mut coeff = 1.0;
    for (order, g) in got.iter().enumerate() {
        let want = coeff * x.powi(16 - order as i32);
        assert!(
            (g - want).abs() <= 1e-10 * want.abs(),
            "order {order}: {g} vs {want}"
        );
        coeff *= (16 - order) as f64;
    }
}

/// `test_grad_mitsot` and `test_grad_grad_mitsot_sitsot`: a MITSOT output (taps [-2], and
/// [-2, -1]) next to a SITSOT, both `total^1.02`; the sum of each output's gradient w.r.t. its
/// initial state, differentiated again (PyTensor's `verify_grad` of it; here the oracle checks
/// that second-order function's gradient against finite differences).
#[test]
fn grad_of_grad_mitsot_and_sitsot() {
    let _s = serial();
    for taps in [vec![-2i64], vec![-2, -1]] {
        let k = taps.len();
        let scan = |m: &Tensor<f64>, s0: &Tensor<f64>| {
            let taps = taps.clone();
            Scan::new()
                .output_taps(m, &taps)
                .output(s0)
                .n_steps(if k == 1 { 3 } else { 5 })
                .run(move |s| {
                    let mut total = s.out(1, -1);
                    for &tap in &taps {
                        total = &total + &s.out(0, tap);
                    }
                    let o = total
                        .zip_with(&Tensor::scalar(1.02), |a, b| a.pow(b))
                        .unwrap();
                    (o.clone(), o)
                })
                .unwrap()
        };
        check(
            &[
                rand(6, 11).iter().map(|v| v.abs() + 0.5).collect(),
                rand(3, 12).iter().map(|v| v.abs() + 0.5).collect(),
            ],
            |v| {
                let g0 = kiln::grad(
                    |m: &Float64| {
                        scan(&t(m, &[2, 3]), &t(&v[1], &[3]))
                            .output::<f64>(0)
                            .array()
                            .sum()
                    },
                    &v[0],
                )
                .unwrap();
                let g1 = kiln::grad(
                    |s0: &Float64| {
                        scan(&t(&v[0], &[2, 3]), &t(s0, &[3]))
                            .output::<f64>(1)
                            .array()
                            .sum()
                    },
                    &v[1],
                )
                .unwrap();
                &g0.sum() + &g1.sum()
            },
            1e-5,
        );
    }
}

/// `test_grad_multiple_taps_state`: x_t = w + x_{t-1} with taps [-4, -1] (the body ignores
/// x_{t-4}), loss Σ x_9². PyTensor's case passes 5 initial rows and reads the first 4; kiln takes
/// exactly the 4 the taps need.
#[test]
fn grad_multiple_taps_state() {
    let _s = serial();
    check(
        &[rand(16, 21), rand(4, 22)],
        |v| {
            let r = Scan::new()
                .output_taps(&t(&v[0], &[4, 2, 2]), &[-4, -1])
                .non_sequence(&t(&v[1], &[2, 2]))
                .n_steps(10)
                .run(|s| s.non_seq(0) + s.out(0, -1))
                .unwrap();
            let tracked = v.iter().any(|a| a.grad_enabled());
            assert_eq!(r.report().mode == "differentiated, gradient scan", tracked);
            let last = r.last::<f64>(0).unwrap();
            (&last * &last).sum()
        },
        1e-6,
    );
}

/// Beyond PyTensor's cases: `reverse`, `keep`, `keep_states` and an integer sequence next to a
/// float one, against finite differences; the report of a differentiated run.
#[test]
fn reverse_keep_states_and_mixed_types() {
    let _s = serial();
    for reverse in [false, true] {
        check(
            &[rand(6, 31), rand(2, 32)],
            |v| {
                let idx = Tensor::from_vec(vec![1i32, 2, 3], &[3]);
                let r = Scan::new()
                    .sequence(&t(&v[0], &[3, 2]))
                    .sequence_as(&idx)
                    .output(&t(&v[1], &[2]))
                    .reverse(reverse)
                    .keep_states(true)
                    .run(|s| {
                        let k =
                            Tensor::from_array(s.seq_as::<i32>(1, 0).array().cast::<f64>(), &[]);
                        &(s.out(0, -1) * &k).sin() + &s.seq(0, 0)
                    })
                    .unwrap();
                assert_eq!(r.states::<f64>(0).unwrap().shape(), &[4, 2]);
                joined(&[r.output(0), r.states(0).unwrap()])
            },
            1e-6,
        );
    }
    // keep: only the last row is returned, and its gradient is the full one
    let mut x0 = Float64::from_slice(&[0.3]);
    x0.enable_grad();
    let r = Scan::new()
        .output(&t(&x0, &[]))
        .n_steps(5)
        .keep(0, Keep::Last(1))
        .run(|s| s.out(0, -1) * 2.0)
        .unwrap();
    assert_eq!(r.output::<f64>(0).shape(), &[1]);
    assert_eq!(r.report().buffer_rows, vec![1]);
    r.output::<f64>(0).array().sum().backward();
    assert_eq!(x0.grad().to_vec(), vec![32.0]);
}

/// A frozen function with a differentiated PyTensor scan replays forward and backward.
#[test]
fn frozen_step_replays_forward_and_backward() {
    let _s = serial();
    let body = |x: &Float64| -> Float64 {
        let mut x = x.detach();
        x.enable_grad();
        let r = Scan::new()
            .sequence(&t(&x, &[6]))
            .output(&Tensor::scalar(0.5))
            .run(|s| (&(s.out(0, -1) * s.seq(0, 0)) + &s.seq(0, 0)).tanh())
            .unwrap();
        r.output::<f64>(0).array().sum().backward();
        x.grad()
    };
    let mut frozen = kiln::freeze(body);
    for seed in 0..3 {
        let x = rand(6, 50 + seed);
        let got = frozen.call(&Float64::from_slice(&x)).unwrap().to_vec();
        let want = body(&Float64::from_slice(&x)).to_vec();
        assert_eq!(got, want, "call {seed}");
    }
    assert_eq!(frozen.stats().replays, 2);
}

/// Found by adversarial testing: `reverse` with `keep` keeps the same rows with and without a
/// gradient, a zero-step scan's states carry the initial state's gradient, and a backward pass
/// that failed midway leaves no cotangent for a later pass on another thread.
#[test]
fn reverse_keep_zero_steps_and_a_failed_pass() {
    let _s = serial();
    let run = |grad: bool| {
        let mut x = Float64::from_slice(&[1.0, 2.0, 3.0]);
        if grad {
            x.enable_grad();
        }
        Scan::new()
            .sequence(&t(&x, &[3]))
            .output(&Tensor::scalar(0.0))
            .reverse(true)
            .keep(0, Keep::Last(1))
            .run(|s| s.out(0, -1) + s.seq(0, 0))
            .unwrap()
            .output::<f64>(0)
            .to_vec()
    };
    assert_eq!(run(true), run(false));
    let mut x0 = Float64::from_slice(&[0.5, 1.5]);
    x0.enable_grad();
    let r = Scan::new()
        .output(&t(&x0, &[2]))
        .keep_states(true)
        .n_steps(0)
        .run(|s| s.out(0, -1) * 2.0)
        .unwrap();
    r.states::<f64>(0).unwrap().array().sum().backward();
    assert_eq!(x0.grad().to_vec(), vec![1.0, 1.0]);
    failed_pass_then_another_thread();
}

static FAIL_ONCE: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// `2x`, whose backward panics once when `FAIL_ONCE` is set.
struct Flaky;
impl kiln::ad::CustomOp for Flaky {
    type Input = Float64;
    type Output = Float64;
    fn eval(&self, x: &Float64) -> Float64 {
        x * 2.0
    }
    fn backward(&self, _x: &Float64, _y: &Float64, dy: &Float64) -> Float64 {
        if FAIL_ONCE.swap(false, std::sync::atomic::Ordering::SeqCst) {
            panic!("this backward fails once");
        }
        dy * 2.0
    }
}

fn failed_pass_then_another_thread() {
    let mut x = Float64::from_slice(&[1.0, 2.0, 3.0, 4.0]);
    let mut w = Float64::from_slice(&[0.5]);
    x.enable_grad();
    w.enable_grad();
    let calls = std::cell::Cell::new(0);
    // (kept states: the body runs once per step with derivatives recorded, so that the custom
    // op's backward is called in the pass — a gradient scan would replay a recording instead)
    let r = Scan::new()
        .sequence(&t(&x, &[4]))
        .output(&Tensor::scalar(0.0))
        .keep_states(true)
        .run(|s| {
            calls.set(calls.get() + 1);
            // step 0 holds the custom op: its backward runs after rows 1..3 kept their cotangents
            let ww = if calls.get() == 1 {
                kiln::ad::custom(Flaky, &w)
            } else {
                w.clone()
            };
            s.out(0, -1) + s.seq(0, 0) * Tensor::from_array(ww, &[])
        })
        .unwrap();
    let y = r.output::<f64>(0).array().sum();
    let (x, y) = std::thread::spawn(move || {
        FAIL_ONCE.store(true, std::sync::atomic::Ordering::SeqCst);
        let failed = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            kiln::ad::backward_with(&y, &Float64::from(1.0), true)
        }));
        assert!(failed.is_err());
        (x, y)
    })
    .join()
    .unwrap();
    let g = std::thread::spawn(move || {
        kiln::ad::backward_with(&y, &Float64::from(1.0), true).unwrap();
        x.grad().to_vec()
    })
    .join()
    .unwrap();
    assert_eq!(g, vec![4.0, 1.5, 1.0, 0.5]);
}

/// PyTensor's face with a sequence that carries no gradient, a SITSOT output, a NITSOT output, a
/// non-sequence and captured weights with gradients: the gradient is a gradient scan (the plain
/// scan forward, its step's VJP replayed backward, the weights' `Σ aᵀ·δ` pushed out). Reverse,
/// forward and central differences agree.
#[test]
fn grad_of_a_pytensor_rnn_is_a_gradient_scan() {
    let _s = serial();
    let (b_, hd, xd, steps) = (3usize, 4usize, 2usize, 6usize);
    let xs = t(
        &Float64::from_slice(&rand(steps * b_ * xd, 41)),
        &[steps, b_, xd],
    );
    check(
        &[
            rand(hd * hd, 42),
            rand(xd * hd, 43),
            rand(hd, 44),
            rand(b_ * hd, 45),
        ],
        |v| {
            let (u, b) = (t(&v[1], &[xd, hd]), t(&v[2], &[hd]));
            let r = Scan::new()
                .sequence(&xs)
                .output(&t(&v[3], &[b_, hd]))
                .output_none()
                .non_sequence(&t(&v[0], &[hd, hd]))
                .run(|s| {
                    let h =
                        (s.out(0, -1).matmul(&s.non_seq(0)) + s.seq(0, 0).matmul(&u) + &b).tanh();
                    let y = &h * &h;
                    (h, y)
                })
                .unwrap();
            if v[0].grad_enabled() {
                assert_eq!(r.report().mode, "differentiated, gradient scan");
                assert_eq!(r.report().grad_matmuls_pushed_out, 2, "{}", r.report());
            }
            joined(&[r.output(0), r.output(1)])
        },
        1e-6,
    );
}

#[test]
fn a_sequence_with_a_gradient_keeps_the_gradient_scan() {
    let _s = serial();
    let (b_, hd, xd, steps) = (3usize, 4usize, 2usize, 6usize);
    check(
        &[
            rand(hd * hd, 46),
            rand(xd * hd, 47),
            rand(b_ * hd, 48),
            rand(steps * b_ * xd, 49),
        ],
        |v| {
            let u = t(&v[1], &[xd, hd]);
            let r = Scan::new()
                .sequence(&t(&v[3], &[steps, b_, xd]))
                .output(&t(&v[2], &[b_, hd]))
                .output_none()
                .non_sequence(&t(&v[0], &[hd, hd]))
                .run(|s| {
                    let x = s.seq(0, 0);
                    let h = (s.out(0, -1).matmul(&s.non_seq(0)) + x.matmul(&u)).tanh();
                    let y = &h.sum_axis(1) * &x.sum_axis(1);
                    (h, y)
                })
                .unwrap();
            if v[0].grad_enabled() {
                assert_eq!(r.report().mode, "differentiated, gradient scan");
            }
            joined(&[r.output(0), r.output(1)])
        },
        1e-6,
    );
}

/// What [`rnn_variant`] gives: the outputs, the reverse-mode gradient per input, the forward-mode
/// tangent of the outputs per input, the scan's mode.
type Ran = (Vec<f64>, Vec<Vec<f64>>, Vec<Vec<f64>>, String);

/// One variant of the scan below: `go_backwards`, `reverse`, `until` (stop after step 3),
/// `truncate_gradient` and `n_steps`.
#[derive(Clone, Copy, Debug)]
struct Variant {
    go_backwards: bool,
    reverse: bool,
    until: bool,
    truncate: Option<usize>,
    n_steps: Option<usize>,
}

impl Variant {
    /// No option set.
    const PLAIN: Variant = Variant {
        go_backwards: false,
        reverse: false,
        until: false,
        truncate: None,
        n_steps: None,
    };
}

/// `a` equals `b` to 1e-12 of `b`'s largest magnitude.
fn same_to_1e12(a: &[f64], b: &[f64], what: &str) {
    let scale = b.iter().fold(1e-300f64, |m, x| m.max(x.abs()));
    for (x, y) in a.iter().zip(b) {
        assert!((x - y).abs() <= 1e-12 * scale, "{what}: {a:?} vs {b:?}");
    }
}

/// An RNN over `[7, 2, 3]` rows in PyTensor's face with every input carrying a gradient, run as
/// `v` says: the outputs, the reverse-mode gradient of `Σ w ⊙ outputs` for each input, and the
/// forward-mode tangent of the outputs along each input (a fixed direction). `stepwise` keeps the
/// states, so that the body runs once per step with derivatives recorded (the oracle).
fn rnn_variant(v: Variant, stepwise: bool) -> Ran {
    let (len, b_, xd, hd) = (7usize, 2usize, 3usize, 4usize);
    let data = [
        rand(hd * hd, 81),
        rand(xd * hd, 82),
        rand(b_ * hd, 83),
        rand(len * b_ * xd, 84),
    ];
    let run = |args: &[Float64]| -> (Float64, String) {
        let u = t(&args[1], &[xd, hd]);
        let mut sc = Scan::new()
            .sequence(&t(&args[3], &[len, b_, xd]))
            .output(&t(&args[2], &[b_, hd]))
            .output_none()
            .non_sequence(&t(&args[0], &[hd, hd]))
            .go_backwards(v.go_backwards)
            .reverse(v.reverse)
            .keep_states(stepwise);
        if let Some(k) = v.truncate {
            sc = sc.truncate_gradient(k);
        }
        if let Some(n) = v.n_steps {
            sc = sc.n_steps(n);
        }
        let until = v.until;
        let r = sc
            .run(|s| {
                let x = s.seq(0, 0);
                let h = (s.out(0, -1).matmul(&s.non_seq(0)) + x.matmul(&u)).tanh();
                if until {
                    s.until(&s.t().ge(&Tensor::scalar(3u32)));
                }
                let y = &h.sum_axis(1) * &x.sum_axis(1);
                (h, y)
            })
            .unwrap();
        (
            joined(&[r.output(0), r.output(1)]),
            r.report().mode.to_string(),
        )
    };
    let fresh = || -> Vec<Float64> {
        data.iter()
            .map(|d| {
                let mut a = Float64::from_slice(d);
                a.enable_grad();
                a
            })
            .collect()
    };
    let args = fresh();
    let (y, mode) = run(&args);
    let w = Float64::from_slice(&rand(y.len(), 85));
    kiln::ad::backward_from(&y, &w).unwrap();
    let rev = args.iter().map(|a| a.grad().to_vec()).collect();
    let values = y.detach().to_vec();
    let mut fwd = Vec::new();
    for k in 0..data.len() {
        let args = fresh();
        args[k].set_grad(&Float64::from_slice(&rand(data[k].len(), 86 + k as u64)));
        let (y, _) = run(&args);
        kiln::ad::forward(&args[k]).unwrap();
        fwd.push(y.grad().to_vec());
    }
    (values, rev, fwd, mode)
}

/// `go_backwards`, `reverse`, `until`, `truncate_gradient` and `n_steps` (alone and together),
/// with a sequence, a captured weight, a non-sequence and the initial state carrying gradients:
/// the gradient scan gives what the scan run step by step gives, in both modes, to 1e-12.
#[test]
fn backwards_until_and_truncated_scans_are_gradient_scans() {
    let _s = serial();
    let plain = Variant::PLAIN;
    let variants = [
        plain,
        Variant {
            go_backwards: true,
            ..plain
        },
        Variant {
            reverse: true,
            ..plain
        },
        Variant {
            until: true,
            ..plain
        },
        Variant {
            truncate: Some(3),
            ..plain
        },
        Variant {
            truncate: Some(9),
            ..plain
        },
        Variant {
            n_steps: Some(5),
            ..plain
        },
        Variant {
            go_backwards: true,
            n_steps: Some(5),
            ..plain
        },
        Variant {
            go_backwards: true,
            until: true,
            truncate: Some(2),
            ..plain
        },
        Variant {
            reverse: true,
            truncate: Some(3),
            ..plain
        },
        Variant {
            until: true,
            truncate: Some(2),
            n_steps: Some(6),
            ..plain
        },
    ];
    no_leak(|| {
        for v in variants {
            let (ya, ra, fa, mode) = rnn_variant(v, false);
            let (yb, rb, fb, oracle) = rnn_variant(v, true);
            assert_eq!(mode, "differentiated, gradient scan", "{v:?}");
            assert_eq!(oracle, "differentiated", "{v:?}");
            assert_eq!(ya, yb, "{v:?}: values");
            for (what, a, b) in [("reverse", &ra, &rb), ("forward", &fa, &fb)] {
                for (k, (ga, gb)) in a.iter().zip(b).enumerate() {
                    same_to_1e12(ga, gb, &format!("{v:?}: {what} mode, input {k}"));
                }
            }
        }
    });
}

/// A MITSOT (taps [-3, -1]) beside a SITSOT, a sequence read at taps [-1, 0, 2] and a weight the
/// body captures, in the variants above: the gradient scan (the MITSOT's window carried, each
/// tap a view of its rows) gives what the scan run step by step gives, both modes, to 1e-12.
#[test]
fn mitsot_and_sequence_taps_are_gradient_scans() {
    let _s = serial();
    let (len, d) = (9usize, 3usize);
    let data = [
        rand(3 * d, 91),
        rand(d, 92),
        rand(len * d, 93),
        rand(d * d, 94),
    ];
    let run = |args: &[Float64], v: Variant, stepwise: bool| -> (Float64, String) {
        let w = t(&args[3], &[d, d]);
        let mut sc = Scan::new()
            .sequence_taps(&t(&args[2], &[len, d]), &[-1, 0, 2])
            .output_taps(&t(&args[0], &[3, d]), &[-3, -1])
            .output(&t(&args[1], &[d]))
            .go_backwards(v.go_backwards)
            .reverse(v.reverse)
            .keep_states(stepwise);
        if let Some(k) = v.truncate {
            sc = sc.truncate_gradient(k);
        }
        let until = v.until;
        let r = sc
            .run(|s| {
                let m = (vdot(&s.out(0, -1), &w) + s.out(0, -3) * s.seq(0, 2)).tanh();
                let h = &s.out(1, -1) * &(s.seq(0, -1) + s.seq(0, 0)).sin() + &m;
                if until {
                    s.until(&s.t().ge(&Tensor::scalar(3u32)));
                }
                (m, h)
            })
            .unwrap();
        (
            joined(&[r.output(0), r.output(1)]),
            r.report().mode.to_string(),
        )
    };
    let plain = Variant::PLAIN;
    let variants = [
        plain,
        Variant {
            go_backwards: true,
            ..plain
        },
        Variant {
            reverse: true,
            ..plain
        },
        Variant {
            go_backwards: true,
            until: true,
            ..plain
        },
        Variant {
            truncate: Some(2),
            ..plain
        },
    ];
    no_leak(|| {
        for v in variants {
            let mut got = Vec::new();
            for stepwise in [false, true] {
                let fresh = || -> Vec<Float64> {
                    data.iter()
                        .map(|x| {
                            let mut a = Float64::from_slice(x);
                            a.enable_grad();
                            a
                        })
                        .collect()
                };
                let args = fresh();
                let (y, mode) = run(&args, v, stepwise);
                let want = if stepwise {
                    "differentiated"
                } else {
                    "differentiated, gradient scan"
                };
                assert_eq!(mode, want, "{v:?}");
                kiln::ad::backward_from(&y, &Float64::from_slice(&rand(y.len(), 95))).unwrap();
                let mut all: Vec<Vec<f64>> = args.iter().map(|a| a.grad().to_vec()).collect();
                all.push(y.detach().to_vec());
                for k in 0..data.len() {
                    let args = fresh();
                    args[k].set_grad(&Float64::from_slice(&rand(data[k].len(), 96 + k as u64)));
                    let (y, _) = run(&args, v, stepwise);
                    kiln::ad::forward(&args[k]).unwrap();
                    all.push(y.grad().to_vec());
                }
                got.push(all);
            }
            for (k, (a, b)) in got[0].iter().zip(&got[1]).enumerate() {
                same_to_1e12(a, b, &format!("{v:?}: result {k}"));
            }
        }
    });
}

/// Found by adversarial testing: truncated so that a kept step still reads a MITSOT's initial
/// rows (with `until`, and with sequence taps that leave fewer steps than the window), those
/// rows get their gradient as the step-by-step oracle gives it, both modes.
#[test]
fn truncation_that_keeps_reads_of_initial_rows() {
    let _s = serial();
    no_leak(|| {
        let run = |init: &Float64, seq: &Float64, stepwise: bool, case: usize| -> Float64 {
            let r = if case == 0 {
                Scan::new()
                    .sequence(&t(seq, &[4]))
                    .output_taps(&t(init, &[2]), &[-2])
                    .n_steps(3)
                    .truncate_gradient(1)
                    .keep_states(stepwise)
                    .run(|s| {
                        s.until(&s.t().ge(&Tensor::scalar(1u32)));
                        (s.out(0, -2) * 1.5).sin() + s.seq(0, 0)
                    })
                    .unwrap()
            } else {
                Scan::new()
                    .sequence_taps(&t(seq, &[6, 2]), &[-1, 1])
                    .output_taps(&t(init, &[3, 2]), &[-3, -1])
                    .truncate_gradient(2)
                    .keep_states(stepwise)
                    .run(|s| {
                        (s.out(0, -3) * s.seq(0, 1) + s.out(0, -1) * 0.5).tanh() + s.seq(0, -1)
                    })
                    .unwrap()
            };
            r.output::<f64>(0).array().clone()
        };
        for case in 0..2 {
            let (ni, ns) = if case == 0 { (2, 4) } else { (6, 12) };
            let (i0, s0) = (rand(ni, 120), rand(ns, 121));
            let mut got = Vec::new();
            for stepwise in [false, true] {
                let (mut init, mut seq) = (Float64::from_slice(&i0), Float64::from_slice(&s0));
                init.enable_grad();
                seq.enable_grad();
                let y = run(&init, &seq, stepwise, case);
                kiln::ad::backward_from(&y, &Float64::from_slice(&rand(y.len(), 122))).unwrap();
                let (mut ti, ts) = (Float64::from_slice(&i0), Float64::from_slice(&s0));
                ti.enable_grad();
                ti.set_grad(&Float64::from_slice(&rand(ni, 123)));
                let yt = run(&ti, &ts, stepwise, case);
                kiln::ad::forward(&ti).unwrap();
                got.push([
                    init.grad().to_vec(),
                    seq.grad().to_vec(),
                    yt.grad().to_vec(),
                ]);
            }
            for (k, (a, b)) in got[0].iter().zip(&got[1]).enumerate() {
                same_to_1e12(a, b, &format!("case {case}, result {k}"));
            }
            assert!(
                got[1][0].iter().any(|&g| g != 0.0),
                "case {case}: the oracle reaches the initial rows"
            );
        }
    });
}
