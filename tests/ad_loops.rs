//! Reverse mode through `while_loop` (issue 26): reverse, forward and finite differences (f64)
//! agree for lanes with different trip counts (0, 1, many, with and without a bound), for trip
//! counts that depend on the values, for bodies with gathers and scatters, in symbolic and
//! evaluated mode; memory does not grow with the trip count; what cannot be differentiated lane by
//! lane is an error. The recorded mode (`LoopGrad::Recorded`) takes any body and any order:
//! second and third derivatives by nesting, Hessian-vector products (forward over reverse).

mod ad_check;
use ad_check::{check, no_leak, rand, serial};
use kiln::control::{Loop, LoopGrad};
use kiln::prelude::*;
use kiln::Mode;

const MODES: [Mode; 2] = [Mode::Symbolic, Mode::Evaluated];

/// `x ← x·a + 0.1·sin(x)` while `i < k` (per lane), for state `(x, a, i, k)`.
fn stepped(mode: Mode, x: &Float64, a: &Float64, k: &[u32]) -> Float64 {
    let k = UInt32::from_slice(k);
    let (x, _, _, _) = Loop::new((x.clone(), a.clone(), UInt32::zeros(k.len()), k))
        .mode(mode)
        .run(
            |(_, _, i, k)| i.lt(k),
            |(x, a, i, k)| (x * a + x.sin() * 0.1, a.clone(), i + 1u32, k.clone()),
        )
        .unwrap();
    x
}

#[test]
fn lanes_with_different_trip_counts() {
    let _s = serial();
    for mode in MODES {
        let trips = [0u32, 1, 2, 7, 40, 3];
        let a0: Vec<f64> = rand(6, 1).iter().map(|v| 0.9 + 0.1 * v).collect();
        check(
            &[rand(6, 2), a0],
            |v| stepped(mode, &v[0], &v[1], &trips),
            1e-6,
        );
    }
}

#[test]
fn a_trip_count_that_depends_on_the_values() {
    let _s = serial();
    for mode in MODES {
        // y = x · 1.5^k with k the steps until y ≥ 4: piecewise smooth, FD away from the jumps
        check(
            &[vec![0.5, 2.0, 3.9, 0.31, 5.0]],
            |v| {
                Loop::new(v[0].clone())
                    .mode(mode)
                    .run(|y| y.lt(4.0), |y| y * 1.5 + 0.01 * y * y)
                    .unwrap()
            },
            1e-6,
        );
    }
}

#[test]
fn a_bound_on_the_iterations_is_not_needed_nor_in_the_way() {
    let _s = serial();
    for mode in MODES {
        // lanes run 9 to 14 iterations; a bound they never reach changes nothing (Dr.Jit's
        // `max_iterations` hint is required for its reverse mode, and wrong when exceeded)
        for bound in [None, Some(100)] {
            check(
                &[vec![0.1, 0.2, 0.3]],
                |v| {
                    let lp = Loop::new(v[0].clone()).mode(mode);
                    let lp = match bound {
                        Some(b) => lp.max_iterations(b),
                        None => lp,
                    };
                    lp.run(|y| y.lt(50.0), |y| y * 1.3 + y.cos() * 0.1).unwrap()
                },
                1e-6,
            );
        }
    }
}

#[test]
fn a_body_with_gathers_and_scatters() {
    let _s = serial();
    for mode in MODES {
        // the body reads a captured table (no gradient) at a lane-dependent index and counts its
        // iterations into a histogram (a scatter of values that carry none)
        let table = Float64::from_slice(&[0.5, 1.5, -0.25, 2.0, 0.75]);
        let hist = std::cell::RefCell::new(UInt32::zeros(5));
        check(
            &[rand(4, 5)],
            |v| {
                let n = v[0].len();
                hist.borrow().eval(); // (a symbolic body scatters into evaluated arrays)
                let (x, _) = Loop::new((v[0].clone(), UInt32::zeros(n)))
                    .mode(mode)
                    .run(
                        |(_, i)| i.lt(6u32),
                        |(x, i)| {
                            let w = kiln::gather(&table, &(i % 5u32));
                            kiln::scatter_reduce(
                                ReduceOp::Add,
                                &mut hist.borrow_mut(),
                                1u32,
                                &(i % 5u32),
                            );
                            (x * &w + (x * x).tanh(), i + 1u32)
                        },
                    )
                    .unwrap();
                x
            },
            1e-6,
        );
        assert!(hist.borrow().to_vec().iter().sum::<u32>() > 0);
    }
}

#[test]
fn the_recurrence_of_the_benchmark_has_its_closed_form_gradient() {
    let _s = serial();
    // x ← x·a + 0.001 for 1000 steps: x_T = a^T x_0 + 0.001 (a^T − 1)/(a − 1)
    for mode in MODES {
        let a0 = [0.999, 1.0005, 0.99, 0.5];
        let mut a = Float64::from_slice(&a0);
        a.enable_grad();
        let (x, _, _) = Loop::new((Float64::ones(4), a.clone(), UInt32::zeros(4)))
            .mode(mode)
            .run(
                |(_, _, i)| i.lt(1000u32),
                |(x, a, i)| (x * a + 0.001, a.clone(), i + 1u32),
            )
            .unwrap();
        x.sum().backward();
        let g = a.grad().to_vec();
        for (k, &a) in a0.iter().enumerate() {
            let t = 1000.0;
            // d/da [a^t + 0.001 (a^t − 1)/(a − 1)]
            let at = a.powf(t);
            let want = t * a.powf(t - 1.0)
                + 0.001 * (t * a.powf(t - 1.0) * (a - 1.0) - (at - 1.0)) / ((a - 1.0) * (a - 1.0));
            assert!(
                (g[k] - want).abs() <= 1e-9 * want.abs().max(1.0),
                "{mode:?} lane {k}: {} vs {want}",
                g[k]
            );
        }
    }
}

#[test]
fn memory_does_not_grow_with_the_trip_count() {
    let _s = serial();
    // the gradient's engine memory after 10 and after 10 000 iterations is the same: no state of
    // any iteration is kept (the Jacobian travels with the loop)
    let peak_after = |steps: u32| {
        let mut a = Float64::from_slice(&rand(4096, 9));
        a.enable_grad();
        let (x, _, _) = Loop::new((Float64::ones(4096), a.clone(), UInt32::zeros(4096)))
            .mode(Mode::Evaluated)
            .run(
                |(_, _, i)| i.lt(steps),
                |(x, a, i)| ((x * a * 0.5).sin(), a.clone(), i + 1u32),
            )
            .unwrap();
        x.sum().backward();
        let g = a.grad().to_vec();
        assert!(g.iter().all(|v| v.is_finite()));
        kiln::stats().ad_grad_bytes
    };
    let (short, long) = (peak_after(10), peak_after(10_000));
    assert_eq!(short, long, "AD memory after 10 vs 10 000 iterations");
}

#[test]
fn lane_mixing_bodies_and_captured_gradients_of_other_sizes_are_errors_without_leaks() {
    let _s = serial();
    no_leak(|| {
        let mut x = Float64::from_slice(&[1.0, 2.0]);
        x.enable_grad();
        // a reduction over the state mixes lanes
        let r = Loop::new((x.clone(), UInt32::zeros(2)))
            .run(|(_, i)| i.lt(2u32), |(x, i)| (x * x.sum(), i + 1u32));
        let e = match r {
            Ok((y, _)) => y.sum().try_backward().unwrap_err().to_string(),
            Err(e) => e.to_string(),
        };
        // (naming the modes that take any body)
        assert!(e.contains("lane") && e.contains("grad_checkpoint"), "{e}");
        // an array with a gradient captured by the body, of another size than the lanes
        let mut w = Float64::from_slice(&[2.0, 1.0, 3.0]);
        w.enable_grad();
        let e = Loop::new((x.detach(), UInt32::zeros(2)))
            .run(|(_, i)| i.lt(2u32), |(x, i)| (x * w.sum(), i + 1u32))
            .unwrap_err()
            .to_string();
        assert!(e.contains("state"), "{e}");
    });
}

/// `x ← x²/2 + x/4` while `i < k` per lane, as a function of `x`, in gradient mode `g`.
fn squaring(g: LoopGrad, x: &Float64, trips: &[u32]) -> Float64 {
    let k = UInt32::from_slice(trips);
    let (y, _, _) = Loop::new((x.clone(), UInt32::zeros(k.len()), k))
        .grad_mode(g)
        .run(
            |(_, i, k)| i.lt(k),
            |(y, i, k)| (y * y * 0.5 + y * 0.25, i + 1u32, k.clone()),
        )
        .unwrap();
    y
}

#[test]
fn a_recorded_loop_agrees_with_the_oracle_and_takes_any_body() {
    let _s = serial();
    let trips = [0u32, 1, 2, 7, 3];
    for mode in MODES {
        // the recorded loop: reverse, forward and finite differences, lanes of different counts
        check(
            &[rand(5, 3).iter().map(|v| 0.5 * v).collect()],
            |v| {
                let k = UInt32::from_slice(&trips);
                let (y, _, _) = Loop::new((v[0].clone(), UInt32::zeros(5), k))
                    .mode(mode)
                    .grad_mode(LoopGrad::Recorded)
                    .run(
                        |(_, i, k)| i.lt(k),
                        |(y, i, k)| ((y * 1.1).sin(), i + 1u32, k.clone()),
                    )
                    .unwrap();
                y
            },
            1e-6,
        );
    }
    // bodies the Jacobian mode refuses: one that mixes lanes, one that captures a gradient
    check(
        &[rand(4, 4), rand(1, 5)],
        |v| {
            let (y, _) = Loop::new((v[0].clone(), UInt32::zeros(4)))
                .grad_mode(LoopGrad::Recorded)
                .run(
                    |(_, i)| i.lt(3u32),
                    |(y, i)| ((y * &v[1]).tanh() + y.sum() * 0.1, i + 1u32),
                )
                .unwrap();
            y
        },
        1e-6,
    );
}

#[test]
fn second_and_third_derivatives_through_a_loop() {
    let _s = serial();
    // x ← x² three times is x^8: derivatives 8x^7, 56x^6, 336x^5 (nested kiln::grad records the
    // loop by itself)
    let f = |x: &Float64| -> Float64 {
        let (y, _) = kiln::while_loop(
            (x.clone(), UInt32::zeros(1)),
            |(_, i)| i.lt(3u32),
            |(y, i)| (y * y, i + 1u32),
        )
        .unwrap();
        y.sum()
    };
    let x = 0.9f64;
    let d1 = |a: &Float64| kiln::grad(f, a).unwrap();
    let d2 = |a: &Float64| kiln::grad(|a: &Float64| d1(a).sum(), a).unwrap();
    let d3 = kiln::grad(|a: &Float64| d2(a).sum(), &Float64::from(x)).unwrap();
    let close = |a: f64, b: f64| (a - b).abs() <= 1e-12 * b.abs();
    assert!(close(d1(&Float64::from(x)).item(), 8.0 * x.powi(7)));
    assert!(close(d2(&Float64::from(x)).item(), 56.0 * x.powi(6)));
    assert!(close(d3.item(), 336.0 * x.powi(5)), "{}", d3.item());
}

#[test]
fn hessian_vector_products_through_a_loop() {
    let _s = serial();
    // forward over reverse (kiln::hvp), lanes with trip counts 0, 1, 4, 2, against central
    // differences of the (Jacobian-mode) gradient
    let trips = [0u32, 1, 4, 2];
    let x0 = [0.3, -0.6, 0.45, 0.8];
    let v = [1.0, -0.5, 2.0, 0.25];
    let grad_at = |x: &[f64]| -> Vec<f64> {
        kiln::grad(
            |x: &Float64| squaring(LoopGrad::Jacobian, x, &trips).sum(),
            &Float64::from_slice(x),
        )
        .unwrap()
        .to_vec()
    };
    let hv = kiln::hvp(
        |x: &Float64| squaring(LoopGrad::Auto, x, &trips).sum(),
        &Float64::from_slice(&x0),
        &Float64::from_slice(&v),
    )
    .unwrap()
    .to_vec();
    let h = 1e-6;
    let plus: Vec<f64> = x0.iter().zip(&v).map(|(x, v)| x + h * v).collect();
    let minus: Vec<f64> = x0.iter().zip(&v).map(|(x, v)| x - h * v).collect();
    let (gp, gm) = (grad_at(&plus), grad_at(&minus));
    for k in 0..4 {
        let fd = (gp[k] - gm[k]) / (2.0 * h);
        assert!(
            (hv[k] - fd).abs() < 1e-6 * (1.0 + fd.abs()),
            "lane {k}: {} vs {fd}",
            hv[k]
        );
    }
    assert_eq!(hv[0], 0.0, "a lane that never iterates has a zero Hessian");
    // the Jacobian mode asked for by name still refuses, naming the fix
    let e = kiln::hvp(
        |x: &Float64| squaring(LoopGrad::Jacobian, x, &trips).sum(),
        &Float64::from_slice(&x0),
        &Float64::from_slice(&v),
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("second-order") && e.contains("LoopGrad::Recorded"),
        "{e}"
    );
}

#[test]
fn a_frozen_step_replays_a_loop_forward_and_backward() {
    let _s = serial();
    let body = |a: &Float64| -> Float64 {
        let mut a = a.detach();
        a.enable_grad();
        let (x, _, _) = Loop::new((Float64::ones(a.len()), a.clone(), UInt32::zeros(a.len())))
            .run(
                |(_, _, i)| i.lt(20u32),
                |(x, a, i)| (x * a + 0.01, a.clone(), i + 1u32),
            )
            .unwrap();
        x.sum().backward();
        a.grad()
    };
    let mut frozen = kiln::freeze(body);
    for seed in 0..3 {
        let a: Vec<f64> = rand(64, 30 + seed).iter().map(|v| 0.9 + 0.1 * v).collect();
        let got = frozen.call(&Float64::from_slice(&a)).unwrap().to_vec();
        let want = body(&Float64::from_slice(&a)).to_vec();
        assert_eq!(got, want, "call {seed}");
    }
    assert_eq!(frozen.stats().replays, 2);
}

#[test]
fn a_recorded_loop_keeps_finished_lanes_off_the_graph() {
    let _s = serial();
    // lanes that finished still run the body (on their state detached): sqrt of a negative
    // there must not reach their gradient as 0·NaN (found by adversarial testing)
    let grad_in = |mode: LoopGrad| {
        let mut x = Float64::from_slice(&[5.0, 1.2, 0.5]);
        x.enable_grad();
        let y = Loop::new(x.clone())
            .grad_mode(mode)
            .run(|x| x.gt(1.0), |x| (x - 1.0).sqrt() + 0.5)
            .unwrap();
        y.sum().backward();
        x.grad().to_vec()
    };
    let (g, want) = (grad_in(LoopGrad::Recorded), grad_in(LoopGrad::Jacobian));
    // lane 2 never enters the loop (1), lane 1 runs once (0.5/sqrt(0.2)), lane 0 five times
    assert!((want[1] - 0.5 / 0.2f64.sqrt()).abs() < 1e-12 && want[2] == 1.0);
    for k in 0..3 {
        assert!((g[k] - want[k]).abs() < 1e-12, "{g:?} vs {want:?}");
    }
    // and the second derivative (nested grad records the loop by itself) is finite
    let d2 = kiln::grad(
        |x: &Float64| {
            kiln::grad(
                |x: &Float64| {
                    kiln::while_loop(x.clone(), |x| x.gt(1.0), |x| (x - 1.0).sqrt() + 0.5)
                        .unwrap()
                        .sum()
                },
                x,
            )
            .unwrap()
            .sum()
        },
        &Float64::from_slice(&[5.0, 1.2, 0.5]),
    )
    .unwrap()
    .to_vec();
    assert!(d2.iter().all(|v| v.is_finite()) && d2[2] == 0.0, "{d2:?}");
}
