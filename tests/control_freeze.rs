//! Control flow inside frozen functions: a symbolic `while_loop`, an `if_then_else`, a `switch` and
//! a `dispatch` over a `Registry` passed as an argument are recorded once and replayed for new data
//! and other sizes, with results equal to unfrozen runs. An evaluated-mode loop inside a frozen
//! function is checked for what it does (see the `LIMITATION` note there).

mod common;
use common::leak_checked;
use kiln::control::{Branch, Loop, Mode, Switch};
use kiln::prelude::*;
use kiln::{Registry, Traverse};

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

/// Collatz steps per lane (`x >= 1`), as a symbolic loop.
fn collatz(x: &UInt32) -> UInt32 {
    let (_, steps) = kiln::while_loop(
        (x.clone(), UInt32::zeros(x.size())),
        |(x, _)| x.ne(1u32),
        |(x, n)| {
            (
                select(&(x & 1u32).eq(0u32), &(x >> 1u32), &(x * 3u32 + 1u32)),
                n + 1u32,
            )
        },
    )
    .unwrap();
    steps
}

fn starts(n: usize, salt: u32) -> Vec<u32> {
    (0..n as u32)
        .map(|i| 1 + (i.wrapping_mul(2_654_435_761) ^ salt) % 5000)
        .collect()
}

#[test]
fn symbolic_loop_records_once_and_replays_at_other_sizes() {
    leak_checked(|| {
        let mut f = kiln::freeze(|x: &UInt32| -> UInt32 { collatz(x) });
        let calls = [
            (64usize, 1u32),
            (64, 2),
            (1000, 3),
            (17, 4),
            (64, 5),
            (5000, 6),
        ];
        for (n, salt) in calls {
            let xs = starts(n, salt);
            let x = UInt32::from_vec(xs.clone());
            let got = f.call(&x).unwrap().to_vec();
            let unfrozen = collatz(&x).to_vec();
            let want: Vec<u32> = xs.iter().map(|&v| collatz_steps(v)).collect();
            assert_eq!(got, unfrozen, "n = {n}");
            assert_eq!(got, want, "n = {n}");
        }
        let s = f.stats();
        assert_eq!(
            (s.recordings, s.replays, s.retraces.len()),
            (1, calls.len() - 1, 0),
            "{s}"
        );
    });
}

#[test]
fn symbolic_loop_replays_after_sizes_0_and_1_record_on_their_own() {
    leak_checked(|| {
        let mut f = kiln::freeze(|x: &UInt32| -> UInt32 { collatz(x) });
        for (n, salt) in [(16usize, 1u32), (0, 2), (1, 3), (33, 4), (0, 5), (1, 6)] {
            let xs = starts(n, salt);
            let got = f.call(&UInt32::from_vec(xs.clone())).unwrap().to_vec();
            let want: Vec<u32> = xs.iter().map(|&v| collatz_steps(v)).collect();
            assert_eq!(got, want, "n = {n}");
        }
        // sizes 0 and 1 are their own key classes; every other call replays
        let s = f.stats();
        assert!(s.recordings <= 3, "{s}");
        assert_eq!(s.recordings + s.replays, 6, "{s}");
        assert!(s.replays >= 3, "{s}");
    });
}

/// A loop stopped by `max_iterations` reports it on a replay too, and keeps its state.
#[test]
fn truncated_symbolic_loop_reports_on_replay() {
    leak_checked(|| {
        let mut f = kiln::freeze(|x: &UInt32| -> UInt32 {
            Loop::new(x.clone())
                .label("frozen-endless")
                .max_iterations(4)
                .run(|x| x.ge(10u32), |x| x + 1u32)
                .unwrap()
        });
        for (k, start) in [vec![0u32, 10, 20, 5], vec![11, 12, 0, 1], vec![1, 2, 3, 40]]
            .into_iter()
            .enumerate()
        {
            let active = start.iter().filter(|&&v| v >= 10).count();
            let y = f.call(&UInt32::from_vec(start.clone())).unwrap();
            let want: Vec<u32> = start
                .iter()
                .map(|&v| if v >= 10 { v + 4 } else { v })
                .collect();
            match y.try_to_vec() {
                Err(e) => {
                    let msg = e.to_string();
                    assert!(
                        msg.contains("frozen-endless") && msg.contains(&format!("{active} lane")),
                        "call {k}: {msg}"
                    );
                }
                Ok(v) => panic!("call {k}: no truncation error, got {v:?} (want {want:?})"),
            }
            assert_eq!(y.to_vec(), want, "call {k}");
        }
        assert_eq!((f.stats().recordings, f.stats().replays), (1, 2));
    });
}

// ---------------------------------------------------------------------------------------------
// Branches and calls

fn branchy(x: &Float32, k: &Float32) -> Float32 {
    kiln::if_then_else(
        &x.lt(k),
        |(x, k): &(Float32, Float32)| x * k + 1.0,
        |(x, _): &(Float32, Float32)| x.sqrt() - 2.0,
        &(x.clone(), k.clone()),
    )
    .unwrap()
}

fn same_bits(a: &[f32], b: &[f32]) -> bool {
    a.len() == b.len()
        && a.iter()
            .zip(b)
            .all(|(x, y)| x.to_bits() == y.to_bits() || (x.is_nan() && y.is_nan()))
}

#[test]
fn if_then_else_records_once_and_replays() {
    leak_checked(|| {
        let mut f = kiln::freeze(|x: &Float32, k: &Float32| -> Float32 { branchy(x, k) });
        let calls = [
            (32usize, 5.0f32),
            (32, 20.0),
            (100, 50.0),
            (7, 3.0),
            (2000, 1000.0),
        ];
        for (n, kv) in calls {
            let x = Float32::from_vec((0..n).map(|i| (i * 7 % 97) as f32).collect());
            let k = Float32::full(kv, n);
            k.eval();
            let got = f.call(&x, &k).unwrap().to_vec();
            let unfrozen = branchy(&x, &k).to_vec();
            let want: Vec<f32> = (0..n)
                .map(|i| {
                    let v = (i * 7 % 97) as f32;
                    if v < kv {
                        v * kv + 1.0
                    } else {
                        v.sqrt() - 2.0
                    }
                })
                .collect();
            assert!(
                same_bits(&got, &unfrozen),
                "n = {n}: {got:?} vs {unfrozen:?}"
            );
            assert!(same_bits(&got, &want), "n = {n}: {got:?} vs {want:?}");
        }
        let s = f.stats();
        assert_eq!((s.recordings, s.replays), (1, calls.len() - 1), "{s}");
    });
}

fn three_way(id: &UInt32, x: &Float32) -> Float32 {
    let f0 = |x: &Float32| x * 2.0;
    let f1 = |x: &Float32| x + 1.0;
    let f2 = |x: &Float32| x * x;
    kiln::switch(id, &[&f0, &f1, &f2], x).unwrap()
}

fn three_way_model(id: u32, x: f32) -> f32 {
    match id {
        0 => x * 2.0,
        1 => x + 1.0,
        2 => x * x,
        _ => 0.0,
    }
}

#[test]
fn switch_records_once_and_replays() {
    leak_checked(|| {
        let mut f = kiln::freeze(|id: &UInt32, x: &Float32| -> Float32 { three_way(id, x) });
        let calls = [(40usize, 1u32), (40, 2), (3, 3), (1025, 4), (40, 5)];
        for (n, salt) in calls {
            // indices 0..=4: 3 and 4 are out of range
            let ids: Vec<u32> = (0..n as u32).map(|i| (i * 7 + salt) % 5).collect();
            let xs: Vec<f32> = (0..n).map(|i| i as f32 * 0.5 + salt as f32).collect();
            let (id, x) = (UInt32::from_vec(ids.clone()), Float32::from_vec(xs.clone()));
            let got = f.call(&id, &x).unwrap().to_vec();
            let unfrozen = three_way(&id, &x).to_vec();
            let want: Vec<f32> = ids
                .iter()
                .zip(&xs)
                .map(|(&i, &v)| three_way_model(i, v))
                .collect();
            assert!(same_bits(&got, &unfrozen), "n = {n}");
            assert!(same_bits(&got, &want), "n = {n}");
        }
        let s = f.stats();
        assert_eq!((s.recordings, s.replays), (1, calls.len() - 1), "{s}");
    });
}

/// A switch with a `None` target inside a symbolic loop, all in one frozen function.
#[test]
fn loop_branch_and_call_together_replay() {
    leak_checked(|| {
        fn prog(x: &UInt32) -> UInt32 {
            let (y, _) = kiln::while_loop(
                (x.clone(), UInt32::zeros(x.size())),
                |(_, i)| i.lt(5u32),
                |(y, i)| {
                    let y = kiln::if_then_else(
                        &(y & 1u32).eq(0u32),
                        |y: &UInt32| y >> 1u32,
                        |y: &UInt32| y * 3u32 + 1u32,
                        y,
                    )
                    .unwrap();
                    let add = |y: &UInt32| y + 100u32;
                    let y = Switch::new()
                        .run(
                            &(&y % 3u32),
                            &[Some(&add as &dyn Fn(&UInt32) -> UInt32), None],
                            &y,
                        )
                        .unwrap();
                    (y, i + 1u32)
                },
            )
            .unwrap();
            y
        }
        fn model(mut y: u32) -> u32 {
            for _ in 0..5 {
                y = if y % 2 == 0 {
                    y >> 1
                } else {
                    y.wrapping_mul(3).wrapping_add(1)
                };
                y = match y % 3 {
                    0 => y + 100,
                    _ => 0,
                };
            }
            y
        }
        let mut f = kiln::freeze(|x: &UInt32| -> UInt32 { prog(x) });
        for (n, salt) in [(20usize, 1u32), (20, 2), (300, 3), (5, 4)] {
            let xs = starts(n, salt);
            let x = UInt32::from_vec(xs.clone());
            let got = f.call(&x).unwrap().to_vec();
            assert_eq!(got, prog(&x).to_vec(), "n = {n}");
            assert_eq!(
                got,
                xs.iter().map(|&v| model(v)).collect::<Vec<_>>(),
                "n = {n}"
            );
        }
        assert_eq!(
            (f.stats().recordings, f.stats().replays),
            (1, 3),
            "{}",
            f.stats()
        );
    });
}

// ---------------------------------------------------------------------------------------------
// Dispatch over a registry argument

trait Shape: Traverse {
    fn apply(&self, x: &Float32) -> Float32;
}

/// Scales by a one-element array.
#[derive(Traverse)]
struct Scale {
    k: Float32,
}
impl Shape for Scale {
    fn apply(&self, x: &Float32) -> Float32 {
        x * &self.k
    }
}

/// Looks up a 4-entry table at `x mod 4`.
#[derive(Traverse)]
struct Table {
    t: Float32,
}
impl Shape for Table {
    fn apply(&self, x: &Float32) -> Float32 {
        kiln::gather(&self.t, &(x.cast::<u32>() % 4u32)) + x
    }
}

fn registry(k: f32, table: [f32; 4]) -> Registry<dyn Shape> {
    let mut reg: Registry<dyn Shape> = Registry::new();
    reg.register(Box::new(Scale {
        k: Float32::from_slice(&[k]),
    }));
    reg.register(Box::new(Table {
        t: Float32::from_slice(&table),
    }));
    reg
}

fn registry_model(id: u32, x: f32, k: f32, table: [f32; 4]) -> f32 {
    match id {
        0 => x * k,
        1 => table[(x as u32 % 4) as usize] + x,
        _ => 0.0,
    }
}

#[test]
fn dispatch_over_a_registry_argument_sees_new_arrays_on_replay() {
    leak_checked(|| {
        let run = |reg: &Registry<dyn Shape>, id: &UInt32, x: &Float32| -> Float32 {
            reg.dispatch(id, x, |s, x| s.apply(x)).unwrap()
        };
        let mut f = kiln::freeze(run);
        let calls: [(usize, f32, [f32; 4]); 5] = [
            (24, 2.0, [10.0, 20.0, 30.0, 40.0]),
            (24, 3.0, [10.0, 20.0, 30.0, 40.0]),
            (24, 3.0, [-1.0, -2.0, -3.0, -4.0]),
            (130, 0.5, [7.0, 8.0, 9.0, 1e6]),
            (5, -4.0, [0.0, 0.5, 0.25, 0.125]),
        ];
        for (c, &(n, k, table)) in calls.iter().enumerate() {
            let reg = registry(k, table);
            let ids: Vec<u32> = (0..n as u32).map(|i| (i * 5 + c as u32) % 3).collect();
            let xs: Vec<f32> = (0..n).map(|i| (i % 11) as f32).collect();
            let (id, x) = (UInt32::from_vec(ids.clone()), Float32::from_vec(xs.clone()));
            let got = f.call(&reg, &id, &x).unwrap().to_vec();
            let unfrozen = run(&reg, &id, &x).to_vec();
            let want: Vec<f32> = ids
                .iter()
                .zip(&xs)
                .map(|(&i, &v)| registry_model(i, v, k, table))
                .collect();
            assert!(
                same_bits(&got, &unfrozen),
                "call {c}: {got:?} vs {unfrozen:?}"
            );
            assert!(same_bits(&got, &want), "call {c}: {got:?} vs {want:?}");
        }
        let s = f.stats();
        assert_eq!((s.recordings, s.replays), (1, calls.len() - 1), "{s}");
    });
}

/// A registry with another number of instances is another layout: it records anew.
#[test]
fn dispatch_registry_with_more_instances_records_anew() {
    leak_checked(|| {
        let run = |reg: &Registry<dyn Shape>, id: &UInt32, x: &Float32| -> Float32 {
            reg.dispatch(id, x, |s, x| s.apply(x)).unwrap()
        };
        let mut f = kiln::freeze(run);
        let id = UInt32::from_vec(vec![0, 1, 2, 2, 1, 0]);
        let x = Float32::from_vec(vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
        let two = registry(2.0, [1.0, 2.0, 3.0, 4.0]);
        assert_eq!(
            f.call(&two, &id, &x).unwrap().to_vec(),
            vec![2.0, 5.0, 0.0, 0.0, 7.0, 12.0]
        );
        let mut three = registry(2.0, [1.0, 2.0, 3.0, 4.0]);
        three.register(Box::new(Scale {
            k: Float32::from_slice(&[-1.0]),
        }));
        assert_eq!(
            f.call(&three, &id, &x).unwrap().to_vec(),
            vec![2.0, 5.0, -3.0, -4.0, 7.0, 12.0]
        );
        assert_eq!(f.stats().recordings, 2, "{}", f.stats());
    });
}

// ---------------------------------------------------------------------------------------------
// Evaluated mode inside a frozen function

/// Doubling plus one until at least 100, counting steps, host-driven.
fn doubling(x: &UInt32) -> (UInt32, UInt32) {
    Loop::new((x.clone(), UInt32::zeros(x.size())))
        .label("host-driven")
        .mode(Mode::Evaluated)
        .run(|(x, _)| x.lt(100u32), |(x, i)| (x * 2u32 + 1u32, i + 1u32))
        .unwrap()
}

fn doubling_model(mut x: u32) -> (u32, u32) {
    let mut i = 0;
    while x < 100 {
        x = x * 2 + 1;
        i += 1;
    }
    (x, i)
}

/// An evaluated loop inside a frozen function is recorded as its first iteration and a driver
/// that replays it until no lane is active: replays with inputs that need more iterations than
/// the recorded call, fewer, or none at all are right, and other widths replay too.
#[test]
fn evaluated_loop_inside_a_frozen_function_replays() {
    leak_checked(|| {
        let mut f = kiln::freeze(doubling);
        let calls: Vec<Vec<u32>> = vec![
            vec![50, 99, 100, 7],   // recorded: at most 4 iterations
            vec![0, 0, 0, 0],       // 7 iterations
            vec![100, 200, 300, 1], // one lane, 6 iterations
            vec![500, 600, 700, 800],
            vec![3, 1, 4, 1, 5, 9, 2, 6],
            (0..1000).map(|i| i % 130).collect(),
        ];
        for (c, v) in calls.iter().enumerate() {
            let x = UInt32::from_vec(v.clone());
            let (a, b) = f.call(&x).unwrap();
            let (a, b) = (a.to_vec(), b.to_vec());
            let (ua, ub) = doubling(&x);
            assert_eq!(
                (&a, &b),
                (&ua.to_vec(), &ub.to_vec()),
                "call {c}: frozen vs unfrozen"
            );
            let want: (Vec<u32>, Vec<u32>) = v.iter().map(|&x| doubling_model(x)).unzip();
            assert_eq!((a, b), want, "call {c}");
        }
        let s = f.stats();
        assert_eq!((s.recordings, s.replays), (1, calls.len() - 1), "{s}");
    });
}

/// `max_iterations` of an evaluated loop holds in replays, and the truncation is reported.
#[test]
fn truncated_evaluated_loop_inside_a_frozen_function() {
    leak_checked(|| {
        let mut f = kiln::freeze(|x: &UInt32| -> UInt32 {
            Loop::new(x.clone())
                .label("frozen-evaluated-endless")
                .max_iterations(3)
                .mode(Mode::Evaluated)
                .run(|x| x.ge(10u32), |x| x + 1u32)
                .unwrap()
        });
        for (c, start) in [vec![0u32, 10, 20, 5], vec![11, 12, 0, 1], vec![1, 2, 3, 40]]
            .into_iter()
            .enumerate()
        {
            let active = start.iter().filter(|&&v| v >= 10).count();
            let y = f.call(&UInt32::from_vec(start.clone())).unwrap();
            let err = y
                .try_to_vec()
                .expect_err("lanes are still active after 3 iterations")
                .to_string();
            assert!(
                err.contains("frozen-evaluated-endless") && err.contains(&format!("{active} lane")),
                "call {c}: {err}"
            );
            let want: Vec<u32> = start
                .iter()
                .map(|&v| if v >= 10 { v + 3 } else { v })
                .collect();
            assert_eq!(y.to_vec(), want, "call {c}");
        }
        assert_eq!((f.stats().recordings, f.stats().replays), (1, 2));
    });
}

/// Found while testing evaluated mode in frozen functions: an evaluated loop whose body has an
/// evaluated branch failed inside a frozen function with `HiddenInput { label: "r31 (u32 × 4)",
/// during: "returned from the function" }`, whose advice (pass the array as an argument) does
/// not apply: the function captures nothing. The evaluated branch compacts lanes (`compress`),
/// which a loop driver cannot replay. Unfrozen, the same function gives `[11, 10, 10, 10]`.
/// Expected, and what comes out now: the right result, or an error that names the loop and says
/// to run it (or the branch) in symbolic mode.
#[test]
fn evaluated_branch_in_an_evaluated_loop_inside_a_frozen_function() {
    leak_checked(|| {
        let body = |x: &UInt32| -> UInt32 {
            Loop::new(x.clone())
                .label("host-driven-branchy")
                .mode(Mode::Evaluated)
                .run(
                    |x| x.lt(10u32),
                    |x| {
                        Branch::new()
                            .mode(Mode::Evaluated)
                            .run(
                                &(x & 1u32).eq(0u32),
                                |x: &UInt32| x + 3u32,
                                |x: &UInt32| x + 1u32,
                                x,
                            )
                            .unwrap()
                    },
                )
                .unwrap()
        };
        let x = UInt32::from_vec(vec![0, 5, 9, 10]);
        assert_eq!(body(&x).to_vec(), vec![11, 10, 10, 10]);
        let mut f = kiln::freeze(body);
        match f.call(&x) {
            Ok(y) => assert_eq!(y.to_vec(), vec![11, 10, 10, 10]),
            Err(e) => {
                let msg = e.to_string();
                assert!(
                    msg.contains("host-driven-branchy") && msg.contains("symbolic"),
                    "{msg}"
                );
            }
        }
    });
}

/// Found by control_diff's `random_programs_agree` (minimised there as
/// `evaluated_call_target_empty_when_recorded`): an evaluated switch in a frozen function,
/// recorded with indices `[0, 1, 1, 1]` (target 2 has no lanes, so `evaluated_call` skips it and
/// records nothing for it), replayed with `[0, 1, 1, 2]`: lane 3 gets 0 instead of 108. Nothing
/// guards that target 2's lane count stays 0 (the counts of targets 0 and 1 stay in their size
/// classes, so the replay is accepted). Symbolic mode is right.
#[test]
fn evaluated_switch_in_a_frozen_function_with_a_target_empty_when_recorded() {
    for mode in [Mode::Symbolic, Mode::Evaluated] {
        let (a, b) = leak_checked(|| {
            let mut f = kiln::freeze(move |k: &UInt32, v: &UInt32| -> UInt32 {
                let t0 = |v: &UInt32| v + 1u32;
                let t1 = |v: &UInt32| v + 10u32;
                let t2 = |v: &UInt32| v + 100u32;
                let targets: [kiln::control::Target<UInt32, UInt32>; 3] =
                    [Some(&t0), Some(&t1), Some(&t2)];
                Switch::new().mode(mode).run(k, &targets, v).unwrap()
            });
            let v = UInt32::from_slice(&[5, 6, 7, 8]);
            let a = f
                .call(&UInt32::from_slice(&[0, 1, 1, 1]), &v)
                .unwrap()
                .to_vec();
            let b = f
                .call(&UInt32::from_slice(&[0, 1, 1, 2]), &v)
                .unwrap()
                .to_vec();
            (a, b)
        });
        assert_eq!(a, vec![6, 16, 17, 18], "{mode:?}");
        assert_eq!(b, vec![6, 16, 17, 108], "{mode:?}");
    }
}
