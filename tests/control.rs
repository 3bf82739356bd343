//! Control flow from a user's point of view: loops, branches, calls, modes, errors.

use kiln::control::{Branch, Loop, Mode, Switch};
use kiln::prelude::*;
use std::cell::Cell;

fn collatz_steps(x0: u32) -> u32 {
    let (mut x, mut n) = (x0, 0);
    while x != 1 {
        x = if x % 2 == 0 {
            x / 2
        } else {
            x.wrapping_mul(3).wrapping_add(1)
        };
        n += 1;
    }
    n
}

#[test]
fn collatz_in_one_kernel_traced_once() {
    let traced = Cell::new(0);
    let n = 1000u32;
    let x = UInt32::arange(n as usize) + 1u32;
    let (_, steps) = kiln::while_loop(
        (x, UInt32::zeros(n as usize)),
        |(x, _)| x.ne(1u32),
        |(x, n)| {
            traced.set(traced.get() + 1);
            (
                select(&(x & 1u32).eq(0u32), &(x >> 1u32), &(x * 3u32 + 1u32)),
                n + 1u32,
            )
        },
    )
    .unwrap();
    let kernels = kiln_core::kernels_for(&[steps.id()]);
    assert_eq!(kernels.len(), 1, "one kernel");
    assert!(kernels[0].to_string().contains("loop"), "{}", kernels[0]);
    let got = steps.to_vec();
    assert_eq!(traced.get(), 1, "the body is traced once");
    for (i, &g) in got.iter().enumerate() {
        assert_eq!(g, collatz_steps(i as u32 + 1), "lane {i}");
    }
}

/// An entry that changes only through an invariant one (`b + a` with `a` a constant 0 once `a`
/// is fixed) turns out unchanged in the second trace: it must not be left out of the loop while
/// the condition still reads it (the kernel builder panicked, "placeholder … used outside its
/// loop"). Traced three times: all, without `a`, without `a` and `b`.
#[test]
fn entries_unchanged_only_in_a_later_trace_are_dropped_too() {
    let traced = Cell::new(0);
    let b0 = UInt32::arange(6) * 5u32 + 10u32; // b >= 10: `i` alone decides
    let (a, b, i) = kiln::while_loop(
        (UInt32::zeros(6), b0.clone(), UInt32::zeros(6)),
        |(_, b, i)| b.lt(5u32) | i.lt(2u32),
        |(a, b, i)| {
            traced.set(traced.get() + 1);
            (a.clone(), b + a, i + 1u32)
        },
    )
    .unwrap();
    assert_eq!(b.to_vec(), b0.to_vec());
    assert_eq!(a.to_vec(), vec![0; 6]);
    assert_eq!(i.to_vec(), vec![2; 6]);
    assert_eq!(traced.get(), 3);
}

#[test]
fn invariant_state_is_not_carried_and_traced_once_more() {
    let traced = Cell::new(0);
    let x = Float32::arange(8);
    let k = Float32::full(2.0, 8);
    let (y, k2, i) = kiln::while_loop(
        (x, k, UInt32::zeros(8)),
        |(_, _, i)| i.lt(3u32),
        |(x, k, i)| {
            traced.set(traced.get() + 1);
            (x * k, k.clone(), i + 1u32)
        },
    )
    .unwrap();
    assert_eq!(traced.get(), 2);
    assert_eq!(
        y.to_vec(),
        (0..8).map(|v| v as f32 * 8.0).collect::<Vec<_>>()
    );
    assert_eq!(k2.to_vec(), vec![2.0; 8]);
    assert_eq!(i.to_vec(), vec![3; 8]);
}

/// `optimize(false)` (Dr.Jit's `OptimizeLoops` off) carries the unchanged entry too: the body is
/// traced once, the kernel's loop has one more state variable, and the values are the same.
#[test]
fn an_unoptimized_loop_carries_every_entry_with_the_same_values() {
    let run = |optimize: bool| {
        let traced = Cell::new(0);
        let (y, k2, i) = Loop::new((Float32::arange(8), Float32::full(2.0, 8), UInt32::zeros(8)))
            .optimize(optimize)
            .run(
                |(_, _, i)| i.lt(3u32),
                |(x, k, i)| {
                    traced.set(traced.get() + 1);
                    (x * k, k.clone(), i + 1u32)
                },
            )
            .unwrap();
        let ir = kiln_core::kernels_for(&[y.id(), k2.id()])
            .iter()
            .map(|k| k.to_string())
            .collect::<String>();
        (traced.get(), y.to_vec(), k2.to_vec(), i.to_vec(), ir)
    };
    let (t_on, y_on, k_on, i_on, ir_on) = run(true);
    let (t_off, y_off, k_off, i_off, ir_off) = run(false);
    assert_eq!(
        (t_on, t_off),
        (2, 1),
        "traced again without the invariant entry only when optimizing"
    );
    assert_eq!((y_on, k_on, i_on), (y_off, k_off, i_off));
    assert!(
        ir_off.len() > ir_on.len(),
        "the unoptimized loop carries more:\n{ir_on}\n---\n{ir_off}"
    );
}

#[test]
fn literal_false_condition_removes_the_loop() {
    let x = Float32::arange(4);
    let y = kiln::while_loop(x.clone(), |_| Bool::from(false), |x| x + 1.0).unwrap();
    assert_eq!(y.to_vec(), vec![0.0, 1.0, 2.0, 3.0]);
}

#[test]
fn max_iterations_truncates_and_reports_at_the_next_read() {
    let before = kiln_core::stats().loops_truncated;
    let x = UInt32::arange(10);
    let y = Loop::new(x)
        .label("forever")
        .max_iterations(5)
        .run(|x| x.ge(3u32), |x| x + 1u32)
        .unwrap();
    let err = y.try_to_vec().unwrap_err().to_string();
    assert!(err.contains("forever") && err.contains("7 lane"), "{err}");
    assert!(kiln_core::stats().loops_truncated > before);
    // the values are the state after 5 iterations
    assert_eq!(y.to_vec(), vec![0, 1, 2, 8, 9, 10, 11, 12, 13, 14]);
}

#[test]
fn evaluated_mode_matches_symbolic() {
    let x = Float32::linspace(0.0, 1.0, 100);
    let body = |(x, i): &(Float32, UInt32)| (x * 0.5 + 0.25, i + 1u32);
    let cond = |(x, i): &(Float32, UInt32)| x.gt(0.5001) | i.lt(2u32);
    let a = Loop::new((x.clone(), UInt32::zeros(100)))
        .run(cond, body)
        .unwrap();
    let b = Loop::new((x, UInt32::zeros(100)))
        .mode(Mode::Evaluated)
        .run(cond, body)
        .unwrap();
    assert_eq!(a.0.to_vec(), b.0.to_vec());
    assert_eq!(a.1.to_vec(), b.1.to_vec());
}

#[test]
fn reduction_in_body_falls_back_to_evaluated_or_errs_in_symbolic_mode() {
    let x = Float32::arange(4);
    let body = |x: &Float32| x - x.sum() * 0.0 + 1.0;
    let y = kiln::while_loop(x.clone(), |x| x.lt(5.0), body).unwrap();
    assert_eq!(y.to_vec(), vec![5.0, 5.0, 5.0, 5.0]);
    let Err(e) = Loop::new(x).mode(Mode::Symbolic).run(|x| x.lt(5.0), body) else {
        panic!("symbolic mode refuses a reduction in the body");
    };
    let msg = e.to_string();
    assert!(
        msg.contains("symbolic") && msg.contains("Evaluated"),
        "{msg}"
    );
}

#[test]
fn state_changing_type_or_size_is_an_error() {
    let x = Float32::arange(4);
    let e = kiln::while_loop(
        (x.clone(), Float32::zeros(4)),
        |(x, _)| x.lt(2.0),
        |(x, y)| (x + 1.0, Float32::zeros(3) + y.sum()),
    );
    assert!(e.is_err());
    let e = kiln::while_loop(x.clone(), |_| Float32::arange(3).lt(1.0), |x| x + 1.0);
    let msg = e.err().unwrap().to_string();
    assert!(msg.contains("3 elements") && msg.contains('4'), "{msg}");
}

#[test]
fn branches_and_calls() {
    let x = UInt32::arange(20);
    let y = kiln::if_then_else(&x.lt(10u32), |x| x * 2u32, |x| x + 1u32, &x).unwrap();
    let want: Vec<u32> = (0..20)
        .map(|i| if i < 10 { i * 2 } else { i + 1 })
        .collect();
    assert_eq!(y.to_vec(), want);
    let z = Branch::new()
        .mode(Mode::Evaluated)
        .run(
            &x.lt(10u32),
            |x: &UInt32| x * 2u32,
            |x: &UInt32| x + 1u32,
            &x,
        )
        .unwrap();
    assert_eq!(z.to_vec(), want);

    let id = UInt32::arange(20) % 5u32; // 4 is out of range of 4 targets → 0
    let f0 = |x: &Float32| x * 2.0;
    let f1 = |x: &Float32| x + 1.0;
    let f2 = |x: &Float32| x * x;
    let xs = Float32::arange(20);
    let targets: [&dyn Fn(&Float32) -> Float32; 4] = [&f0, &f1, &f2, &f0];
    let a = kiln::switch(&id, &targets, &xs).unwrap();
    let want: Vec<f32> = (0..20)
        .map(|i| {
            let v = i as f32;
            match i % 5 {
                0 | 3 => v * 2.0,
                1 => v + 1.0,
                2 => v * v,
                _ => 0.0,
            }
        })
        .collect();
    assert_eq!(a.to_vec(), want);
    let opt: Vec<kiln::control::Target<'_, Float32, Float32>> =
        vec![Some(&f0), Some(&f1), Some(&f2), Some(&f0)];
    let b = Switch::new()
        .mode(Mode::Evaluated)
        .run(&id, &opt, &xs)
        .unwrap();
    assert_eq!(b.to_vec(), want);
}

#[test]
fn loop_inside_branch_inside_loop() {
    let x = UInt32::arange(16);
    let (y, _) = kiln::while_loop(
        (x, UInt32::zeros(16)),
        |(_, i)| i.lt(3u32),
        |(x, i)| {
            let x2 = kiln::if_then_else(
                &(x & 1u32).eq(0u32),
                |x: &UInt32| kiln::while_loop(x.clone(), |v| v.lt(100u32), |v| v + 7u32).unwrap(),
                |x: &UInt32| x + 1u32,
                x,
            )
            .unwrap();
            (x2, i + 1u32)
        },
    )
    .unwrap();
    let want: Vec<u32> = (0..16u32)
        .map(|mut v| {
            for _ in 0..3 {
                v = if v % 2 == 0 {
                    while v < 100 {
                        v += 7
                    }
                    v
                } else {
                    v + 1
                };
            }
            v
        })
        .collect();
    assert_eq!(y.to_vec(), want);
}

#[test]
fn evaluated_loop_inside_a_frozen_function_replays_as_a_driver() {
    // halve until below 1: the number of iterations depends on the data of each call
    let mut f = kiln::freeze(|x: &Float32| -> (Float32, UInt32) {
        Loop::new((x.clone(), UInt32::zeros(x.size())))
            .label("halving")
            .mode(Mode::Evaluated)
            .run(|(x, _)| x.ge(1.0), |(x, n)| (x * 0.5, n + 1u32))
            .unwrap()
    });
    let model = |v: f32| {
        let (mut x, mut n) = (v, 0u32);
        while x >= 1.0 {
            x *= 0.5;
            n += 1;
        }
        (x, n)
    };
    for (k, data) in [
        vec![0.5f32, 3.0, 100.0],
        vec![1000.0, 2.0, 0.1],
        vec![7.0, 1e6, 4.0],
        vec![0.25, 0.5, 0.75],
        vec![5.0, 9.0, 17.0, 33.0, 65.0],
    ]
    .into_iter()
    .enumerate()
    {
        let x = kiln::make_opaque(&Float32::from_slice(&data));
        let (y, n) = f.call(&x).unwrap();
        let want: Vec<(f32, u32)> = data.iter().map(|&v| model(v)).collect();
        assert_eq!(
            y.to_vec(),
            want.iter().map(|w| w.0).collect::<Vec<_>>(),
            "call {k}"
        );
        assert_eq!(
            n.to_vec(),
            want.iter().map(|w| w.1).collect::<Vec<_>>(),
            "call {k}"
        );
    }
    let s = f.stats();
    assert_eq!(s.recordings, 1, "{s}");
    assert!(s.replays >= 4, "{s}");
}

#[test]
fn compressed_evaluated_loop_matches_symbolic() {
    let x = UInt32::arange(300) + 1u32;
    let cond = |(x, _): &(UInt32, UInt32)| x.ne(1u32);
    let body = |(x, n): &(UInt32, UInt32)| {
        (
            select(&(x & 1u32).eq(0u32), &(x >> 1u32), &(x * 3u32 + 1u32)),
            n + 1u32,
        )
    };
    let a = Loop::new((x.clone(), UInt32::zeros(300)))
        .run(cond, body)
        .unwrap();
    let b = Loop::new((x.clone(), UInt32::zeros(300)))
        .mode(Mode::Evaluated)
        .compress(true)
        .run(cond, body)
        .unwrap();
    assert_eq!(a.1.to_vec(), b.1.to_vec());
    assert_eq!(b.0.to_vec(), vec![1; 300]);
    // the caller's arrays are untouched
    assert_eq!(x.to_vec(), (1..=300).collect::<Vec<u32>>());
    // truncated: the lanes still running are reported
    let c = Loop::new((x, UInt32::zeros(300)))
        .label("collatz-short")
        .mode(Mode::Evaluated)
        .compress(true)
        .max_iterations(10)
        .run(cond, body)
        .unwrap();
    let err = c.1.try_to_vec().unwrap_err().to_string();
    assert!(err.contains("collatz-short"), "{err}");
    let d = Loop::new((UInt32::arange(300) + 1u32, UInt32::zeros(300)))
        .max_iterations(10)
        .run(cond, body)
        .unwrap();
    let want = d.1.try_to_vec();
    assert!(want.is_err());
    assert_eq!(c.1.to_vec(), d.1.to_vec());
    assert_eq!(c.0.to_vec(), d.0.to_vec());
}

#[test]
fn a_body_that_reads_on_the_host_runs_evaluated_and_traced_per_iteration() {
    // the step size is decided in Rust from the data: 1 while the largest value is below 10
    let x = Float32::arange(4);
    let body = |x: &Float32| {
        let biggest = x.reduce_max().item();
        if biggest < 10.0 {
            x + 1.0
        } else {
            x + 0.5
        }
    };
    let y = kiln::while_loop(x.clone(), |x| x.lt(12.0), body).unwrap();
    assert_eq!(y.to_vec(), vec![12.0, 12.0, 12.0, 12.0]);
    let z = Loop::new(x)
        .mode(Mode::Evaluated)
        .run(|x| x.lt(12.0), body)
        .unwrap();
    assert_eq!(z.to_vec(), y.to_vec());
}

/// Found by adversarial testing (issue 26): an evaluated loop updated its state's buffers in
/// place while the body captured the very array the state started from, so the body read the
/// current state where it meant the initial values.
#[test]
fn a_body_may_capture_the_array_the_state_starts_from() {
    let x = Float64::from_slice(&[0.5, 1.0]);
    let mut want = vec![0.5f64, 1.0];
    for w in &mut want {
        let x0 = *w;
        while *w < 2.0 {
            *w = *w * 1.1 + x0 * 0.3 + 0.5;
        }
    }
    for mode in [Mode::Evaluated, Mode::Symbolic, Mode::Auto] {
        let xc = x.clone();
        let y = Loop::new(x.clone())
            .mode(mode)
            .run(|y| y.lt(2.0), move |y| y * 1.1 + &xc * 0.3 + 0.5)
            .unwrap();
        let got = y.to_vec();
        for (g, w) in got.iter().zip(&want) {
            assert!((g - w).abs() < 1e-12, "{mode:?}: {got:?} vs {want:?}");
        }
        assert_eq!(x.to_vec(), vec![0.5, 1.0], "the initial array is untouched");
    }
}

/// An evaluated loop inside another's body whose state starts as one lane beside wider entries
/// (`j = 0` next to the outer `i`): its first iteration widens that entry, which the inner
/// loop's replays (and the outer step's recording of the inner loop) must see as a full-width
/// buffer. Found through the Python `@kiln.syntax` port (a triangle sum); every mode pair.
#[test]
fn nested_loops_whose_inner_state_starts_one_lane_wide() {
    let n = 17u32;
    let want: Vec<u32> = (0..n).map(|k| k * k.saturating_sub(1) / 2).collect();
    for outer in [Mode::Evaluated, Mode::Symbolic] {
        for inner in [Mode::Evaluated, Mode::Symbolic] {
            if outer == Mode::Symbolic && inner == Mode::Evaluated {
                continue; // an evaluated loop cannot run inside a symbolic one
            }
            for narrow_outer in [true, false] {
                let start = |v: u32| {
                    if narrow_outer {
                        UInt32::from(v)
                    } else {
                        UInt32::full(v, n as usize)
                    }
                };
                let limit = UInt32::arange(n as usize);
                let (_, acc, _) = Loop::new((start(0), start(0), limit))
                    .mode(outer)
                    .run(
                        |(i, _, lim)| i.lt(lim),
                        |(i, acc, lim)| {
                            let (_, acc, _) =
                                Loop::new((UInt32::from(0u32), acc.clone(), i.clone()))
                                    .mode(inner)
                                    .run(
                                        |(j, _, i)| j.lt(i),
                                        |(j, a, i)| (j + 1u32, a + 1u32, i.clone()),
                                    )
                                    .unwrap();
                            (i + 1u32, acc, lim.clone())
                        },
                    )
                    .unwrap();
                assert_eq!(
                    acc.to_vec(),
                    want,
                    "outer {outer:?}, inner {inner:?}, narrow {narrow_outer}"
                );
            }
        }
    }
}

/// `max_iterations(k)` on a loop whose lanes need exactly `k` iterations is not a truncation,
/// in every mode (evaluated mode counted the lanes that ran the last iteration, not those whose
/// condition still held after it); one iteration more is.
#[test]
fn a_loop_that_finishes_exactly_at_its_limit_is_not_truncated() {
    let run = |mode: Mode, compress: bool, limit: u64| {
        let (i,) = Loop::new((UInt32::from_slice(&[0, 1, 2]),))
            .mode(mode)
            .compress(compress)
            .max_iterations(limit)
            .run(|(i,)| i.lt(3u32), |(i,)| (i + 1u32,))
            .unwrap();
        i.try_to_vec()
    };
    for (mode, compress) in [
        (Mode::Evaluated, false),
        (Mode::Evaluated, true),
        (Mode::Symbolic, false),
    ] {
        assert_eq!(
            run(mode, compress, 3).unwrap(),
            vec![3, 3, 3],
            "{mode:?} {compress}"
        );
        let e = run(mode, compress, 2).unwrap_err();
        assert!(
            matches!(e, kiln::Error::LoopTruncated { lanes: 1, .. }),
            "{mode:?} {compress}: {e}"
        );
        // nothing left over for the next read
        assert_eq!(UInt32::from(7u32).try_to_vec().unwrap(), vec![7]);
    }
}

/// The same limit inside a frozen function: the recording call and the replays (the loop's
/// driver, which asks the recorded condition at the limit) finish exactly at the limit without a
/// truncation, and report one a step short.
#[test]
fn a_frozen_evaluated_loop_that_finishes_exactly_at_its_limit_is_not_truncated() {
    for limit in [3u64, 2] {
        let mut f = kiln::freeze(move |x: &UInt32| -> UInt32 {
            let (i,) = Loop::new((x.clone(),))
                .mode(Mode::Evaluated)
                .max_iterations(limit)
                .run(|(i,)| i.lt(3u32), |(i,)| (i + 1u32,))
                .unwrap();
            i
        });
        for call in 0..3 {
            let x = kiln::make_opaque(&UInt32::from_slice(&[0, 1, 2]));
            let r = f.call(&x).unwrap().try_to_vec();
            if limit == 3 {
                assert_eq!(r.unwrap(), vec![3, 3, 3], "call {call}");
            } else {
                assert!(
                    matches!(r, Err(kiln::Error::LoopTruncated { lanes: 1, .. })),
                    "call {call}: {r:?}"
                );
            }
            assert_eq!(UInt32::from(7u32).try_to_vec().unwrap(), vec![7]);
        }
        assert!(f.stats().replays >= 1, "the later calls replay the driver");
    }
}
