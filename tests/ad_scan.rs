//! Gradients through `kiln::scan` (JAX's face, issue 26): reverse mode, forward mode and finite
//! differences (f64) agree for carries and stacked outputs, `reverse`, `length` without inputs,
//! tuples, captured tensors with gradients, a matrix recurrence (an RNN cell) and zero steps;
//! second derivatives by nesting; nothing leaks.

mod ad_check;
use ad_check::{check, no_leak, rand, serial};
use kiln::prelude::*;
use kiln::scan::{Lax, ScanReport};

fn t(a: &Float64, shape: &[usize]) -> Tensor<f64> {
    Tensor::from_array(a.clone(), shape)
}

/// Each gradient of `a` equals the one of `b` (the oracle's) to 1e-12 of the largest (nonzero).
fn same_gradients(a: &[Vec<f64>], b: &[Vec<f64>]) {
    for (ga, gb) in a.iter().zip(b) {
        let scale = gb.iter().fold(0.0f64, |m, v| m.max(v.abs()));
        assert!(scale > 0.0);
        for (x, y) in ga.iter().zip(gb) {
            assert!((x - y).abs() <= 1e-12 * scale, "{x} vs {y}");
        }
    }
}

#[test]
fn a_nonlinear_carry_and_stacked_outputs() {
    let _s = serial();
    for reverse in [false, true] {
        check(
            &[rand(3, 1), rand(15, 2)],
            |v| {
                let (c, ys) = Lax::new(&t(&v[0], &[3]), &t(&v[1], &[5, 3]))
                    .reverse(reverse)
                    .run(|c, x| {
                        let c2 = &(c * x).sin() + &(c * 0.5);
                        let y = &c2 * &c2 + x;
                        (c2, y)
                    })
                    .unwrap();
                // both the final carry and every y reach the output
                let all = Tensor::concat(&[c.reshape(&[1, 3]), ys], 0);
                all.array().clone()
            },
            1e-6,
        );
    }
}

#[test]
fn a_length_without_inputs_and_a_tuple_carry() {
    let _s = serial();
    check(
        &[rand(2, 3), rand(2, 4)],
        |v| {
            let init = (t(&v[0], &[2]), t(&v[1], &[2]));
            let ((a, b), _) = Lax::new(&init, &())
                .length(6)
                .run(|(a, b), _| {
                    let a2 = &(a * b).tanh() + a;
                    let b2 = b - &(a * 0.3);
                    ((a2, b2.clone()), b2)
                })
                .unwrap();
            (a.array() + b.array()).clone()
        },
        1e-6,
    );
}

#[test]
fn an_rnn_cell_with_its_weights_captured() {
    let _s = serial();
    // h_t = tanh(W h_{t-1} + U x_t + b); gradients w.r.t. W, U, b (captured) and the inputs
    let (hd, xd, steps) = (3usize, 2usize, 4usize);
    check(
        &[
            rand(hd * hd, 5),
            rand(hd * xd, 6),
            rand(hd, 7),
            rand(steps * xd, 8),
        ],
        |v| {
            let w = t(&v[0], &[hd, hd]);
            let u = t(&v[1], &[hd, xd]);
            let b = t(&v[2], &[hd]);
            let xs = t(&v[3], &[steps, xd]);
            let h0 = Tensor::<f64>::zeros(&[hd]);
            let (_, hs) = kiln::scan(&h0, &xs, |h, x| {
                let pre = &(&w.matmul(&h.reshape(&[hd, 1])).reshape(&[hd])
                    + &u.matmul(&x.reshape(&[xd, 1])).reshape(&[hd]))
                    + &b;
                let h2 = pre.tanh();
                (h2.clone(), h2)
            })
            .unwrap();
            (hs.array() * hs.array()).clone()
        },
        1e-6,
    );
}

#[test]
fn zero_steps_pass_the_carry_through() {
    let _s = serial();
    let mut a = Float64::from_slice(&[1.0, 2.0]);
    a.enable_grad();
    let xs = Tensor::<f64>::zeros(&[0, 2]);
    let (c, ys) = kiln::scan(&t(&a, &[2]), &xs, |c, x| (c * x, c + x)).unwrap();
    assert_eq!(ys.shape(), &[0, 2]);
    (c.array() * 3.0).sum().backward();
    assert_eq!(a.grad().to_vec(), vec![3.0, 3.0]);
}

#[test]
fn the_report_says_how_it_ran_and_nothing_leaks() {
    let _s = serial();
    no_leak(|| {
        let mut x = Float64::from_slice(&rand(8, 9));
        x.enable_grad();
        let mut report = ScanReport::default();
        let (c, _) = Lax::new(&Tensor::<f64>::scalar(0.0), &t(&x, &[8]))
            .report(&mut report)
            .run(|c, x| {
                let s = &(c * 0.9) + &x.sin();
                (s.clone(), s)
            })
            .unwrap();
        c.array().sum().backward();
        // (a sequence with a gradient: its rows' cotangents are stacked by the gradient scan)
        assert_eq!(report.mode, "differentiated, gradient scan");
        assert_eq!(report.steps_run, 8);
        let g = x.grad().to_vec();
        // d c_T / d x_t = 0.9^(T-1-t) cos(x_t)
        let xs = x.detach().to_vec();
        for (k, (g, x)) in g.iter().zip(&xs).enumerate() {
            let want = 0.9f64.powi(7 - k as i32) * x.cos();
            assert!((g - want).abs() < 1e-12, "{k}: {g} vs {want}");
        }
    });
}

#[test]
fn second_derivatives_through_a_scan() {
    let _s = serial();
    // f(x) = c_T with c ← c·x_t + x_t²: the Hessian-vector product against finite differences
    // of the gradient
    let f = |x: &Float64| -> Float64 {
        let (c, _) = kiln::scan(&Tensor::<f64>::scalar(1.0), &t(x, &[4]), |c, x| {
            let c2 = &(c * x) + &(x * x);
            (c2.clone(), c2)
        })
        .unwrap();
        c.array().sum()
    };
    let x0 = [0.3, -0.7, 0.5, 1.1];
    let v = [0.2, 0.4, -0.3, 0.9];
    let hv = kiln::hvp(f, &Float64::from_slice(&x0), &Float64::from_slice(&v))
        .unwrap()
        .to_vec();
    let grad_at = |s: f64| {
        let x: Vec<f64> = x0.iter().zip(&v).map(|(a, b)| a + s * b).collect();
        kiln::grad(f, &Float64::from_slice(&x)).unwrap().to_vec()
    };
    let h = 1e-5;
    let (gp, gm) = (grad_at(h), grad_at(-h));
    for k in 0..4 {
        let fd = (gp[k] - gm[k]) / (2.0 * h);
        assert!(
            (hv[k] - fd).abs() <= 1e-6 * (1.0 + fd.abs()),
            "{k}: {} vs {fd}",
            hv[k]
        );
    }
}

#[test]
fn a_frozen_step_replays_a_scan_forward_and_backward() {
    let _s = serial();
    let body = |x: &Float64| -> Float64 {
        let mut x = x.detach();
        x.enable_grad();
        let (c, _) = kiln::scan(&Tensor::<f64>::scalar(0.5), &t(&x, &[6]), |c, x| {
            let c2 = (&(c * x) + x).tanh();
            (c2.clone(), c2)
        })
        .unwrap();
        c.array().sum().backward();
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

#[test]
fn third_derivatives_through_a_scan() {
    let _s = serial();
    // f(a) = c_T with c ← c·a + 1 over 3 steps from c = 1: c_T = a³ + a² + a + 1, f''' = 6
    let f = |a: &Float64| -> Float64 {
        let ta = Tensor::from_array(a.clone(), &[]);
        let (c, _) = Lax::new(&Tensor::<f64>::scalar(1.0), &())
            .length(3)
            .run(|c, _| {
                let c2 = &(c * &ta) + 1.0;
                (c2.clone(), ())
            })
            .unwrap();
        c.array().sum()
    };
    let d1 = |a: &Float64| kiln::grad(f, a).unwrap();
    let d2 = |a: &Float64| kiln::grad(|a: &Float64| d1(a).sum(), a).unwrap();
    let d3 = kiln::grad(|a: &Float64| d2(a).sum(), &Float64::from(0.7)).unwrap();
    let a = 0.7f64;
    assert!((d1(&Float64::from(a)).item() - (3.0 * a * a + 2.0 * a + 1.0)).abs() < 1e-12);
    assert!((d2(&Float64::from(a)).item() - (6.0 * a + 2.0)).abs() < 1e-12);
    assert!((d3.item() - 6.0).abs() < 1e-12, "{}", d3.item());
}

#[test]
fn outputs_that_change_shape_and_strict_captures_are_errors() {
    let _s = serial();
    no_leak(|| {
        let mut x = Float64::from_slice(&[1.0, 2.0, 3.0]);
        x.enable_grad();
        let xs = t(&x, &[3]);
        let mut step = 0;
        let e = kiln::scan(&Tensor::<f64>::scalar(0.0), &xs, |c, x| {
            step += 1;
            let y = if step == 2 {
                Tensor::<f64>::zeros(&[2])
            } else {
                Tensor::<f64>::zeros(&[1])
            };
            (c + x, y)
        })
        .unwrap_err();
        // (the step that differs is named by the plain scan forward of a gradient scan, or by
        // the scan run step by step)
        let m = e.to_string();
        assert!(
            m.contains("earlier step") || m.contains("at the first"),
            "{e}"
        );
        assert!(m.contains("[1]") && m.contains("[2]"), "{e}");
        // strict: a captured tensor with a gradient is refused, not silently taken
        let plain = Tensor::<f64>::from_vec(vec![1.0, 2.0], &[2]);
        let e = Lax::new(&Tensor::<f64>::scalar(0.0), &plain)
            .strict(true)
            .run(|c, x| {
                let s = &(c + x) + &xs.index_axis(0, 0);
                (s.clone(), s)
            })
            .unwrap_err();
        assert!(e.to_string().contains("strict"), "{e}");
    });
}

#[test]
fn keep_states_with_a_gradient() {
    let _s = serial();
    // (refused until issue 26's second part) the carries c_0..c_T, checked by the oracle
    check(
        &[rand(2, 61), rand(8, 62)],
        |v| {
            let (_, _, states) = Lax::new(&t(&v[0], &[2]), &t(&v[1], &[4, 2]))
                .run_with_states::<_, f64>(|c, x| {
                    let c2 = &(c * x).tanh() + c;
                    (c2, ())
                })
                .unwrap();
            assert_eq!(states[0].shape(), &[5, 2]);
            states[0].array().clone()
        },
        1e-6,
    );
}

#[test]
fn a_long_chain_backward_is_cut_into_kernels_of_one_structure() {
    let _s = serial();
    // x ← x·a + 0.001 over 64 lanes, stepped: the backward pass evaluates its cotangents every so many
    // rules, so a thousand steps compile a few kernels, and another length compiles no new one
    // (one expression 1000 steps long was one kernel compiled for seconds, at every length)
    let run = |steps: usize| -> (Vec<f64>, u64, u64) {
        let n = 64;
        let mut a =
            Float64::from_slice(&(0..n).map(|i| 0.99 + 1e-4 * i as f64).collect::<Vec<_>>());
        a.enable_grad();
        let ta = t(&a, &[n]);
        // (the stacked ys keep it stepped: with only the carry, it is one loop, see below)
        let (x, _) = Lax::new(&t(&Float64::full(0.5, n), &[n]), &())
            .length(steps)
            .run(|x, _| {
                let x2 = &(x * &ta) + 0.001;
                (x2.clone(), x2)
            })
            .unwrap();
        let before = kiln::stats();
        x.array().sum().backward();
        let g = a.grad().to_vec();
        let after = kiln::stats();
        (
            g,
            after.kernels_compiled - before.kernels_compiled,
            after.launches - before.launches,
        )
    };
    let (g, _, launches) = run(1000);
    assert!(
        launches >= 4,
        "the chain was cut in pieces ({launches} launches)"
    );
    // d x_T / d a = T a^(T−1) x0 + 0.001 Σ_{k<T} k a^(k−1)
    for (i, gi) in g.iter().enumerate() {
        let a = 0.99 + 1e-4 * i as f64;
        let want = 1000.0 * a.powi(999) * 0.5
            + 0.001 * (1..1000).map(|k| k as f64 * a.powi(k - 1)).sum::<f64>();
        assert!(
            (gi - want).abs() < 1e-9 * want.abs(),
            "lane {i}: {gi} vs {want}"
        );
    }
    let (_, compiled, _) = run(1100);
    assert!(
        compiled <= 3,
        "another length compiled {compiled} new kernels"
    );
}

#[test]
fn every_row_of_a_long_sequence_gets_its_gradient() {
    let _s = serial();
    // c ← 0.9·c + x_t over 300 rows of 16 lanes: ∂c_T/∂x_t = 0.9^(T−1−t). The rows' cotangents
    // are gathered by one node and stacked once (each row's adjoint was a full-size array, and
    // the pass added 300 of them); forward mode reads row t of the tangent
    let (steps, n) = (300usize, 16usize);
    no_leak(|| {
        let mut x = Float64::from_slice(&rand(steps * n, 70));
        x.enable_grad();
        let (c, _) = kiln::scan(&Tensor::<f64>::zeros(&[n]), &t(&x, &[steps, n]), |c, x| {
            (&(c * 0.9) + x, ())
        })
        .unwrap();
        c.array().sum().backward();
        let g = x.grad().to_vec();
        for s in 0..steps {
            let want = 0.9f64.powi((steps - 1 - s) as i32);
            for l in 0..n {
                assert!((g[s * n + l] - want).abs() < 1e-12, "row {s} lane {l}");
            }
        }
        // forward mode: a tangent in row 290 only
        let mut e = vec![0.0; steps * n];
        e[290 * n..291 * n].iter_mut().for_each(|v| *v = 1.0);
        x.set_grad(&Float64::from_slice(&e));
        let (c, _) = kiln::scan(&Tensor::<f64>::zeros(&[n]), &t(&x, &[steps, n]), |c, x| {
            (&(c * 0.9) + x, ())
        })
        .unwrap();
        kiln::ad::forward(&x).unwrap();
        let want = 0.9f64.powi(9);
        assert!(c
            .array()
            .grad()
            .to_vec()
            .iter()
            .all(|v| (v - want).abs() < 1e-12));
    });
}

#[test]
fn a_hessian_vector_product_through_a_long_scan_compiles_few_kernels() {
    let _s = serial();
    // forward over reverse through 40 steps: the passes go step by step (a step boundary
    // evaluates the tangents and recorded cotangents crossing it), so every step reuses the
    // first step's kernels; they grew across steps into kernels new at every step (208 compiled,
    // 28 s)
    let (steps, batch) = (40usize, 8usize);
    let u: Vec<f64> = rand(steps * batch, 80);
    let f = |c: &Float64| -> Float64 {
        let a = Tensor::from_array(kiln::gather(c, &UInt32::from(0u32)), &[]);
        let b = Tensor::from_array(kiln::gather(c, &UInt32::from(1u32)), &[]);
        let xs = Tensor::from_vec(u.clone(), &[steps, batch]);
        let (_, ys) = kiln::scan(&Tensor::<f64>::zeros(&[batch]), &xs, |y, x| {
            let y2 = &(&(y * &a) + &(x * &b)).sin() + &(y * 0.5);
            (y2.clone(), y2)
        })
        .unwrap();
        (ys.array() * ys.array()).sum()
    };
    let (at, v) = ([0.9, 0.3], [1.0, -0.5]);
    let before = kiln::stats();
    let hv = kiln::hvp(f, &Float64::from_slice(&at), &Float64::from_slice(&v))
        .unwrap()
        .to_vec();
    let after = kiln::stats();
    let distinct =
        (after.kernels_compiled - before.kernels_compiled) + (after.disk_hits - before.disk_hits);
    assert!(distinct <= 100, "{distinct} distinct kernels for 40 steps");
    // against central differences of the gradient
    let h = 1e-6;
    let g = |s: f64| {
        let x: Vec<f64> = at.iter().zip(&v).map(|(a, b)| a + s * b).collect();
        kiln::grad(f, &Float64::from_slice(&x)).unwrap().to_vec()
    };
    let (gp, gm) = (g(h), g(-h));
    for k in 0..2 {
        let fd = (gp[k] - gm[k]) / (2.0 * h);
        assert!(
            (hv[k] - fd).abs() < 1e-5 * (1.0 + fd.abs()),
            "{k}: {} vs {fd}",
            hv[k]
        );
    }
}

/// `x ← x·a + u_t + 0.001` (`a` captured per lane, a scalar `w` too) as a scan that returns only
/// its carry: one loop carrying each lane's Jacobian.
fn one_loop(
    x0: &Float64,
    a: &Float64,
    w: &Float64,
    us: &Tensor<f64>,
    reverse: bool,
) -> (Float64, ScanReport) {
    let n = x0.len();
    let (ta, tw) = (t(a, &[n]), t(w, &[]));
    let mut report = ScanReport::default();
    let ((x, k), ()) = Lax::new(&(t(x0, &[n]), Tensor::<u32>::zeros(&[n])), us)
        .reverse(reverse)
        .report(&mut report)
        .run(|(x, k), u| {
            let x2 = &(&(x * &ta) + &(u * &tw).sin()) + 0.001;
            ((x2, k + &Tensor::<u32>::ones(&[n])), ())
        })
        .unwrap();
    assert_eq!(k.array().to_vec(), vec![us.shape()[0] as u32; n]);
    (x.array().clone(), report)
}

#[test]
fn a_scan_of_its_carry_alone_is_one_loop_with_the_oracle_gradient() {
    let _s = serial();
    let us = t(&Float64::from_slice(&rand(6 * 5, 3)), &[6, 5]);
    for reverse in [false, true] {
        check(
            &[
                rand(5, 1),
                rand(5, 2).iter().map(|v| 0.9 + 0.1 * v).collect(),
                vec![0.7],
            ],
            |v| one_loop(&v[0], &v[1], &v[2], &us, reverse).0,
            1e-6,
        );
        let (_, report) = one_loop(
            &Float64::ones(5),
            &Float64::ones(5),
            &Float64::from(0.7),
            &us,
            reverse,
        );
        // (without a gradient it is the ordinary scan)
        assert!(
            !report.mode.starts_with("differentiated"),
            "{}",
            report.mode
        );
        let mut a = Float64::ones(5);
        a.enable_grad();
        let (_, report) = one_loop(&Float64::ones(5), &a, &Float64::from(0.7), &us, reverse);
        assert_eq!(report.mode, "differentiated, one loop");
        assert_eq!(report.loops_emitted, 1);
    }
}

#[test]
fn a_scan_of_its_carry_alone_keeps_no_step_and_runs_few_kernels() {
    let _s = serial();
    // the benchmark as a scan: the gradient's memory and launches do not grow with the
    // length, and it has the closed form
    let run = |steps: usize| -> (Vec<f64>, u64, u64) {
        let n = 1000;
        let a0: Vec<f64> = (0..n).map(|i| 0.99 + 1e-5 * i as f64).collect();
        let mut a = Float64::from_slice(&a0);
        a.enable_grad();
        let ta = t(&a, &[n]);
        let (x, _) = Lax::new(&t(&Float64::full(0.5, n), &[n]), &())
            .length(steps)
            .run(|x, _| (&(x * &ta) + 0.001, ()))
            .unwrap();
        let before = kiln::stats();
        x.array().sum().backward();
        let g = a.grad().to_vec();
        let after = kiln::stats();
        for (i, gi) in g.iter().enumerate().step_by(97) {
            let a = a0[i];
            let want = steps as f64 * a.powi(steps as i32 - 1) * 0.5
                + 0.001
                    * (1..steps)
                        .map(|k| k as f64 * a.powi(k as i32 - 1))
                        .sum::<f64>();
            assert!(
                (gi - want).abs() < 1e-9 * want.abs(),
                "lane {i}: {gi} vs {want}"
            );
        }
        (g, after.launches - before.launches, after.ad_grad_bytes)
    };
    let (_, launches_short, bytes_short) = run(10);
    let (_, launches_long, bytes_long) = run(2000);
    assert_eq!(bytes_short, bytes_long, "AD memory after 10 vs 2000 steps");
    assert!(
        launches_long <= launches_short + 2,
        "{launches_short} → {launches_long} launches"
    );
}

#[test]
fn a_lane_mixing_body_of_a_carry_scan_runs_as_a_gradient_scan() {
    let _s = serial();
    // a sum over the carry's lanes cannot travel as per-lane Jacobians: the gradient scan (the
    // plain scan forward, its recorded step's VJP backward) takes it
    let us = t(&Float64::from_slice(&rand(4 * 3, 5)), &[4, 3]);
    check(
        &[rand(3, 6)],
        |v| {
            let mut report = ScanReport::default();
            let (x, ()) = Lax::new(&t(&v[0], &[3]), &us)
                .report(&mut report)
                .run(|x, u| {
                    (
                        (x * u).tanh() + &Tensor::from_array(x.array().sum(), &[]) * 0.1,
                        (),
                    )
                })
                .unwrap();
            if v[0].grad_enabled() {
                assert_eq!(report.mode, "differentiated, gradient scan");
            }
            x.array().clone()
        },
        1e-6,
    );
}

#[test]
fn a_carry_scan_of_no_step_passes_its_carry_and_gradient_through() {
    let _s = serial();
    // (found by adversarial testing: the one-loop path computed `length − 1` for length 0)
    let mut a = Float64::from_slice(&[0.3, 0.4]);
    a.enable_grad();
    let (c, ()) = Lax::new(&t(&a, &[2]), &())
        .length(0)
        .run(|c, _| ((c * c).sin(), ()))
        .unwrap();
    assert_eq!(c.array().to_vec(), vec![0.3, 0.4]);
    c.array().sum().backward();
    assert_eq!(a.grad().to_vec(), vec![1.0, 1.0]);
}

#[test]
fn a_captured_scalar_tensor_keeps_a_carry_scan_one_loop() {
    let _s = serial();
    // a `[]` tensor with a gradient, broadcast against the carry's lanes (reported by adversarial
    // testing: it sent the scan down the stepped path)
    let us = t(&Float64::from_slice(&rand(5 * 3, 31)), &[5, 3]);
    let run = |x0: &Float64, w: &Float64| -> (Float64, &'static str) {
        let tw = t(w, &[]);
        let mut report = ScanReport::default();
        let (c, ()) = Lax::new(&t(x0, &[3]), &us)
            .report(&mut report)
            .run(|c, u| ((&(c * &tw) + u).sin(), ()))
            .unwrap();
        (c.array().clone(), report.mode)
    };
    check(&[rand(3, 32), vec![0.8]], |v| run(&v[0], &v[1]).0, 1e-6);
    let mut w = Float64::from(0.8);
    w.enable_grad();
    assert_eq!(run(&Float64::ones(3), &w).1, "differentiated, one loop");
}

/// The RNN of the benchmarks, small, as `kiln::scan` with its weights captured as right
/// operands (`h·W + x·U + b`): the gradient is a gradient scan — the plain scan forward, the
/// step's VJP recorded once and replayed backward — and the weights' gradients `Σ_t aᵀ·δ_t` are
/// one product each after it (push-out). Reverse mode, forward mode and central differences
/// agree for W, U, b and h0, forwards and `reverse`.
#[test]
fn a_gradient_scan_pushes_the_weight_gradients_out() {
    let _s = serial();
    let (b_, hd, xd, steps) = (3usize, 4usize, 2usize, 5usize);
    for reverse in [false, true] {
        check(
            &[
                rand(hd * hd, 11),
                rand(xd * hd, 12),
                rand(hd, 13),
                rand(b_ * hd, 14),
            ],
            |v| {
                let (w, u, b) = (t(&v[0], &[hd, hd]), t(&v[1], &[xd, hd]), t(&v[2], &[hd]));
                // (the sequence carries no gradient here; see the next tests for one that does)
                let xs = t(
                    &Float64::from_slice(&rand(steps * b_ * xd, 15)),
                    &[steps, b_, xd],
                );
                let mut report = ScanReport::default();
                let (h, hs) = Lax::new(&t(&v[3], &[b_, hd]), &xs)
                    .reverse(reverse)
                    .report(&mut report)
                    .run(|h, x| {
                        let h2 = (h.matmul(&w) + x.matmul(&u) + &b).tanh();
                        (h2.clone(), &h2 * &h2)
                    })
                    .unwrap();
                if v[0].grad_enabled() {
                    assert_eq!(report.mode, "differentiated, gradient scan");
                    assert_eq!(report.grad_matmuls_pushed_out, 2, "{report}");
                }
                let all = Tensor::concat(&[h.reshape(&[1, b_, hd]), hs], 0);
                all.array().clone()
            },
            1e-6,
        );
    }
}

/// The gradient scan's weight gradients equal those of the same recurrence written out step by
/// step (no scan), to rounding: the push-out sums the steps' products in another order.
#[test]
fn a_gradient_scan_matches_the_unrolled_recurrence() {
    let _s = serial();
    let (b_, hd, steps) = (8usize, 16usize, 40usize);
    let grads = |scan: bool| -> Vec<Vec<f64>> {
        let mut w = Float64::from_slice(&rand(hd * hd, 21)) * 0.3;
        let mut h0 = Float64::from_slice(&rand(b_ * hd, 22));
        w.enable_grad();
        h0.enable_grad();
        let wt = t(&w, &[hd, hd]);
        let xs = t(
            &Float64::from_slice(&rand(steps * b_ * hd, 23)),
            &[steps, b_, hd],
        );
        let cell = |h: &Tensor<f64>, x: &Tensor<f64>| (h.matmul(&wt) + x).tanh();
        let loss = if scan {
            // (`w` is a lazy expression given a gradient: the step reads it evaluated)
            let mut report = ScanReport::default();
            let (h, _) = Lax::new(&t(&h0, &[b_, hd]), &xs)
                .report(&mut report)
                .run(|h, x| (cell(h, x), ()))
                .unwrap();
            assert_eq!(report.mode, "differentiated, gradient scan");
            assert_eq!(report.grad_matmuls_pushed_out, 1);
            (h.array() * h.array()).sum()
        } else {
            let mut h = t(&h0, &[b_, hd]);
            for s in 0..steps {
                h = cell(&h, &xs.index_axis(0, s));
            }
            (h.array() * h.array()).sum()
        };
        loss.backward();
        vec![w.grad().to_vec(), h0.grad().to_vec()]
    };
    same_gradients(&grads(true), &grads(false));
}

/// A body with a side effect (a scatter into an array it captured) runs once per step, as the
/// plain scan runs it: the gradient scan, which would replay the step, is not used.
#[test]
fn a_body_with_a_side_effect_is_not_replayed() {
    let _s = serial();
    let mut a = Float64::from_slice(&[0.9, 1.1]);
    a.enable_grad();
    let ta = t(&a, &[2]);
    let mut counter = UInt32::zeros(2);
    counter.eval();
    let mut report = ScanReport::default();
    let (x, ys) = Lax::new(&t(&Float64::from_slice(&[1.0, 2.0]), &[2]), &())
        .length(6)
        .report(&mut report)
        .run(|x, _| {
            kiln::scatter_reduce(ReduceOp::Add, &mut counter, 1u32, &UInt32::arange(2));
            let x2 = x * &ta;
            (x2.clone(), x2)
        })
        .unwrap();
    (x.array().sum() + ys.array().sum() * 0.0).backward();
    assert_eq!(counter.to_vec(), vec![6, 6], "{report}");
    assert_eq!(report.mode, "differentiated");
    // d/da Σ x0 a⁶ = 6 x0 a⁵
    let g = a.grad().to_vec();
    assert!((g[0] - 6.0 * 0.9f64.powi(5)).abs() < 1e-12);
    assert!((g[1] - 12.0 * 1.1f64.powi(5)).abs() < 1e-12);
}

/// A gradient scan leaves nothing behind (arrays and AD nodes), called twice with
/// `retain_graph`, and run on two threads at once gives each thread its own gradients; its
/// backward compiles nothing new for a longer sequence.
#[test]
fn a_gradient_scan_leaks_nothing_and_runs_on_threads() {
    let _s = serial();
    let run = |steps: usize, seed: u64| -> (Vec<f64>, u64) {
        let mut w = Float64::from_slice(&rand(9, seed)) * 0.4;
        w.enable_grad();
        let wt = t(&w, &[3, 3]);
        let xs = t(
            &Float64::from_slice(&rand(steps * 6, seed + 1)),
            &[steps, 2, 3],
        );
        let (h, _) = kiln::scan(&Tensor::<f64>::zeros(&[2, 3]), &xs, |h, x| {
            ((h.matmul(&wt) + x).sin(), ())
        })
        .unwrap();
        let loss = h.array().sum();
        let before = kiln::stats().kernels_compiled;
        kiln::ad::backward_with(&loss, &Float64::from(1.0), true).unwrap();
        let compiled = kiln::stats().kernels_compiled - before;
        let g1 = w.grad().to_vec();
        w.clear_grad();
        kiln::ad::backward_with(&loss, &Float64::from(1.0), false).unwrap();
        assert_eq!(
            w.grad().to_vec(),
            g1,
            "a second pass over the retained graph"
        );
        (g1, compiled)
    };
    no_leak(|| {
        let alive = kiln::stats().vars_alive;
        let _ = run(30, 3);
        let (_, more) = run(90, 3);
        assert_eq!(more, 0, "a longer gradient scan compiled new kernels");
        assert_eq!(kiln::stats().vars_alive, alive);
    });
    let want: Vec<Vec<f64>> = (0..2).map(|k| run(50, 40 + k).0).collect();
    std::thread::scope(|s| {
        let hs: Vec<_> = (0..2).map(|k| s.spawn(move || run(50, 40 + k).0)).collect();
        for (h, w) in hs.into_iter().zip(&want) {
            assert_eq!(&h.join().unwrap(), w);
        }
    });
}

/// Second derivatives through `kiln::scan` by nesting `kiln::grad`: the inner scan records its
/// steps (a gradient scan's replayed steps carry no rules to differentiate again), and the result
/// matches a central difference of the first derivative.
#[test]
fn grad_of_grad_through_a_scan_with_a_captured_weight() {
    let _s = serial();
    let a = Float64::from_slice(&[0.7]);
    let xs = t(&Float64::from_slice(&[1.0, 2.0, 3.0]), &[3, 1]);
    // second order by nesting: d²/da² of Σ ys² through the scan
    let second = kiln::grad(
        |a: &Float64| {
            kiln::grad(
                |a: &Float64| {
                    let ta = t(a, &[1]);
                    let (_, ys) =
                        kiln::scan(&t(&Float64::from_slice(&[1.0]), &[1]), &xs, |c, x| {
                            let c2 = c * &ta + x;
                            (c2.clone(), c2)
                        })
                        .unwrap();
                    (ys.array() * ys.array()).sum()
                },
                a,
            )
            .unwrap()
            .sum()
        },
        &a,
    )
    .unwrap()
    .to_vec()[0];
    // central difference of the first derivative
    let d1 = |a0: f64| {
        let x = Float64::from_slice(&[a0]);
        kiln::grad(
            |a: &Float64| {
                let ta = t(a, &[1]);
                let (_, ys) = kiln::scan(&t(&Float64::from_slice(&[1.0]), &[1]), &xs, |c, x| {
                    let c2 = c * &ta + x;
                    (c2.clone(), c2)
                })
                .unwrap();
                (ys.array() * ys.array()).sum()
            },
            &x,
        )
        .unwrap()
        .to_vec()[0]
    };
    let fd = (d1(0.7 + 1e-5) - d1(0.7 - 1e-5)) / 2e-5;
    assert!((second - fd).abs() < 1e-5 * fd.abs(), "{second} vs {fd}");
}

/// A scan inside a gradient scan's body whose products take the outer body's captured weight as
/// right operand: the inner scan runs differently inside the recording than when the step is
/// first run, so the outer scan runs step by step instead (it panicked on an index); the
/// gradient matches the unrolled loops.
#[test]
fn a_scan_nested_in_a_gradient_scan_body() {
    let _s = serial();
    let go = |scan: bool| -> Vec<f64> {
        let mut w = Float64::from_slice(&rand(9, 31));
        w.enable_grad();
        let wt = t(&w, &[3, 3]);
        let xs = t(&Float64::from_slice(&rand(4 * 2 * 3, 32)), &[4, 2, 3]);
        let inner = t(&Float64::from_slice(&rand(3 * 3, 33)), &[3, 3]);
        let cell = |h: &Tensor<f64>, x: &Tensor<f64>| -> Tensor<f64> {
            let g = if scan {
                kiln::scan(h, &inner, |g, u| ((g.matmul(&wt) + u).sin(), ()))
                    .unwrap()
                    .0
            } else {
                let mut g = h.clone();
                for r in 0..3 {
                    g = (g.matmul(&wt) + inner.index_axis(0, r)).sin();
                }
                g
            };
            (&g * 0.5 + x).tanh()
        };
        let h = if scan {
            kiln::scan(&Tensor::<f64>::zeros(&[2, 3]), &xs, |h, x| {
                let h2 = cell(h, x);
                (h2.clone(), h2)
            })
            .unwrap()
            .0
        } else {
            let mut h = Tensor::<f64>::zeros(&[2, 3]);
            for s in 0..4 {
                h = cell(&h, &xs.index_axis(0, s));
            }
            h
        };
        h.array().sum().backward();
        w.grad().to_vec()
    };
    let (a, b) = (go(true), go(false));
    for (x, y) in a.iter().zip(&b) {
        assert!((x - y).abs() < 1e-12 * (1.0 + y.abs()), "{x} vs {y}");
    }
}

/// A body that reads the forward's saved products and also captures a lazy array with a gradient
/// (`b * 0.5` given one): the step's inputs keep the products last, where it reads them (it read a
/// weight as a product). Checked against the unrolled recurrence.
#[test]
fn saved_products_beside_a_lazy_captured_weight() {
    let _s = serial();
    let (b_, hd, steps) = (2usize, 3usize, 5usize);
    let go = |scan: bool| -> (String, Vec<Vec<f64>>) {
        let mut w = Float64::from_slice(&rand(hd * hd, 51));
        let mut b = Float64::from_slice(&rand(hd, 52)) * 0.5;
        w.enable_grad();
        b.enable_grad();
        let (wt, bt) = (t(&w, &[hd, hd]), t(&b, &[hd]));
        let xs = t(
            &Float64::from_slice(&rand(steps * b_ * hd, 53)),
            &[steps, b_, hd],
        );
        let cell = |h: &Tensor<f64>, x: &Tensor<f64>| (h.matmul(&wt) + &bt + x).tanh();
        let mut mode = String::new();
        let loss = if scan {
            let mut report = ScanReport::default();
            let (_, hs) = Lax::new(&Tensor::<f64>::zeros(&[b_, hd]), &xs)
                .report(&mut report)
                .run(|h, x| {
                    let h2 = cell(h, x);
                    (h2.clone(), h2)
                })
                .unwrap();
            mode = report.mode.to_string();
            (hs.array() * hs.array()).sum()
        } else {
            let mut h = Tensor::<f64>::zeros(&[b_, hd]);
            let mut l = Float64::from(0.0);
            for s in 0..steps {
                h = cell(&h, &xs.index_axis(0, s));
                l += (h.array() * h.array()).sum();
            }
            l
        };
        loss.backward();
        (mode, vec![w.grad().to_vec(), b.grad().to_vec()])
    };
    let ((mode, a), (_, b)) = (go(true), go(false));
    assert_eq!(mode, "differentiated, gradient scan");
    for (ga, gb) in a.iter().zip(&b) {
        for (x, y) in ga.iter().zip(gb) {
            assert!((x - y).abs() < 1e-12 * (1.0 + y.abs()), "{x} vs {y}");
        }
    }
}

#[test]
fn a_gradient_scan_gives_a_sequence_its_rows_cotangents() {
    let _s = serial();
    let (b_, hd, xd, steps) = (3usize, 4usize, 2usize, 5usize);
    // an integer sequence beside them carries none (its rows pick a bias per step)
    let picks = Int32::from_slice(&[0, 2, 1, 3, 0]);
    let picks = Tensor::from_array(picks, &[steps]);
    for reverse in [false, true] {
        check(
            &[
                rand(hd * hd, 51),
                rand(xd * hd, 52),
                rand(b_ * hd, 53),
                rand(steps * b_ * xd, 54),
                rand(steps * hd, 55),
            ],
            |v| {
                let (w, u) = (t(&v[0], &[hd, hd]), t(&v[1], &[xd, hd]));
                // (a second product of the same row, with a lazy weight)
                let u2 = &u * 0.5;
                // two sequences with gradients: one through products, one elementwise
                let xs = t(&v[3], &[steps, b_, xd]);
                let zs = t(&v[4], &[steps, hd]);
                let mut report = ScanReport::default();
                let (h, hs) = Lax::new(&t(&v[2], &[b_, hd]), &(xs, zs, picks.clone()))
                    .reverse(reverse)
                    .report(&mut report)
                    .run(|h, (x, z, p)| {
                        let bias = p.array().cast::<f64>().sum() * 0.1;
                        let pre =
                            h.matmul(&w) + x.matmul(&u) + x.matmul(&u2).sin() + &(z * z) * 0.5;
                        let h2 = (pre + &Tensor::from_array(bias, &[])).tanh();
                        (h2.clone(), &h2 * z)
                    })
                    .unwrap();
                if v[0].grad_enabled() {
                    assert_eq!(report.mode, "differentiated, gradient scan", "{report}");
                    assert_eq!(report.grad_matmuls_pushed_out, 3, "{report}");
                    // forwards, the rows' gradients through both products come after the loop
                    let rows = report
                        .rewrites
                        .iter()
                        .filter(|r| r.contains("rows' gradient of a sequence"))
                        .count();
                    assert_eq!(rows, if reverse { 0 } else { 2 }, "{report}");
                }
                let all = Tensor::concat(&[h.reshape(&[1, b_, hd]), hs], 0);
                all.array().clone()
            },
            1e-6,
        );
    }
}

#[test]
fn two_stacked_rnn_layers_are_two_gradient_scans() {
    let _s = serial();
    let (b_, hd, xd, steps) = (4usize, 8usize, 3usize, 30usize);
    let grads = |scan: bool| -> Vec<Vec<f64>> {
        let mut w1 = Float64::from_slice(&rand(hd * hd, 61)) * 0.4;
        let mut u1 = Float64::from_slice(&rand(xd * hd, 62));
        let mut w2 = Float64::from_slice(&rand(hd * hd, 63)) * 0.4;
        let mut u2 = Float64::from_slice(&rand(hd * hd, 64));
        let mut x = Float64::from_slice(&rand(steps * b_ * xd, 65));
        for a in [&mut w1, &mut u1, &mut w2, &mut u2, &mut x] {
            a.enable_grad();
        }
        let (w1t, u1t, w2t, u2t) = (
            t(&w1, &[hd, hd]),
            t(&u1, &[xd, hd]),
            t(&w2, &[hd, hd]),
            t(&u2, &[hd, hd]),
        );
        let xs = t(&x, &[steps, b_, xd]);
        let h0 = Tensor::<f64>::zeros(&[b_, hd]);
        let cell = |h: &Tensor<f64>, x: &Tensor<f64>, w: &Tensor<f64>, u: &Tensor<f64>| {
            (h.matmul(w) + x.matmul(u)).tanh()
        };
        let loss = if scan {
            let layer = |xs: &Tensor<f64>, w: &Tensor<f64>, u: &Tensor<f64>| {
                let mut report = ScanReport::default();
                let (_, hs) = Lax::new(&h0, xs)
                    .report(&mut report)
                    .run(|h, x| {
                        let h2 = cell(h, x, w, u);
                        (h2.clone(), h2)
                    })
                    .unwrap();
                assert_eq!(report.mode, "differentiated, gradient scan", "{report}");
                hs
            };
            let hs1 = layer(&xs, &w1t, &u1t);
            let hs2 = layer(&hs1, &w2t, &u2t);
            (hs2.array() * hs2.array()).sum()
        } else {
            let (mut h1, mut h2) = (h0.clone(), h0.clone());
            let mut total = Float64::scalar(0.0);
            for s in 0..steps {
                h1 = cell(&h1, &xs.index_axis(0, s), &w1t, &u1t);
                h2 = cell(&h2, &h1, &w2t, &u2t);
                total += (h2.array() * h2.array()).sum();
            }
            total
        };
        loss.backward();
        [&w1, &u1, &w2, &u2, &x]
            .iter()
            .map(|a| a.grad().to_vec())
            .collect()
    };
    same_gradients(&grads(true), &grads(false));
}

/// A scan nested in the body of a scan whose sequence carries a gradient, both with products of
/// the row by a captured weight: the inner scan's products never take the outer step's pushed-out
/// rows (each scan sees its own substitutions only), and the gradients are those of the loops
/// written out by hand.
#[test]
fn a_nested_scan_over_the_row_keeps_its_own_products() {
    let _s = serial();
    let (n, b_, xd, hd) = (4usize, 3usize, 2usize, 2usize);
    let grads = |scan: bool| -> Vec<Vec<f64>> {
        let mut x = Float64::from_slice(&rand(n * b_ * xd, 2));
        let mut u = Float64::from_slice(&rand(xd * hd, 1));
        x.enable_grad();
        u.enable_grad();
        let ut = t(&u, &[xd, hd]);
        let xs = t(&x, &[n, b_, xd]);
        let inner_step = |g: &Tensor<f64>, r: &Tensor<f64>| {
            (g + &r.reshape(&[1, xd]).matmul(&ut).reshape(&[hd])).sin()
        };
        let outer_step =
            |x: &Tensor<f64>, inner: Tensor<f64>| (&inner * 0.5 + x.matmul(&ut).sum_axis(0)).tanh();
        let c = if scan {
            let (c, _) = kiln::scan(&Tensor::<f64>::zeros(&[hd]), &xs, |h, x| {
                let inner = kiln::scan(h, x, |g, r| (inner_step(g, r), ())).unwrap().0;
                (outer_step(x, inner), ())
            })
            .unwrap();
            c
        } else {
            let mut h = Tensor::<f64>::zeros(&[hd]);
            for s in 0..n {
                let x = xs.index_axis(0, s);
                let mut g = h.clone();
                for r in 0..b_ {
                    g = inner_step(&g, &x.index_axis(0, r));
                }
                h = outer_step(&x, g);
            }
            h
        };
        c.array().sum().backward();
        vec![x.grad().to_vec(), u.grad().to_vec()]
    };
    same_gradients(&grads(true), &grads(false));
}

/// `Fused` mode asked of a differentiated scan whose body has a product (which one kernel cannot
/// run) runs step by step, as it did before the gradient scan took sequences with gradients.
#[test]
fn fused_mode_with_a_product_and_a_gradient_runs_step_by_step() {
    let _s = serial();
    let mut x = Float64::from_slice(&rand(5 * 2 * 3, 1));
    let mut u = Float64::from_slice(&rand(3 * 4, 2));
    x.enable_grad();
    u.enable_grad();
    let ut = t(&u, &[3, 4]);
    let mut report = ScanReport::default();
    let (c, _) = Lax::new(&Tensor::<f64>::zeros(&[2, 4]), &t(&x, &[5, 2, 3]))
        .mode(kiln::scan::ScanMode::Fused)
        .report(&mut report)
        .run(|h, x| ((h * 0.5 + x.matmul(&ut)).tanh(), ()))
        .unwrap();
    c.array().sum().backward();
    assert_eq!(report.mode, "differentiated", "{report}");
    assert!(x.grad().to_vec().iter().all(|g| g.is_finite() && *g != 0.0));
}
