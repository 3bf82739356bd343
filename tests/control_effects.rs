//! Side effects (scatters) inside loop bodies, branches and calls happen only for the lanes that
//! run them, in every mode.
//!
//! Symbolic mode traces a body into a region of one kernel, where each lane runs only what it
//! needs. Evaluated mode runs the body as ordinary code: a loop replays its step over all lanes
//! with an `active` mask, and a branch or call runs each target on its own lanes, compacted. A
//! scatter in an evaluated body must still happen only for the lanes that run it — and a scatter
//! of size 1 (a literal index) once per such lane, as in a symbolic region.
//!
//! The table test runs every combination of
//!
//! * construct: `while_loop` (also with `compress(true)`, and with a body that needs other lanes'
//!   values, so that `Mode::Auto` falls back to evaluated mode), `if_then_else` (also with such a
//!   side), `switch`, `dispatch`;
//! * mode: `Auto`, `Symbolic`, `Evaluated`;
//! * scatter target evaluated before or not (a literal `zeros`);
//! * index: one element per lane taken from the state or arguments, a literal 0 (size 1), or an
//!   array of the construct's full lane count captured from outside;
//! * sizes 8 and 1000;
//!
//! against a plain host loop computing the expected counts. Symbolic mode may refuse a combination
//! (a body that scatters into an array it cannot evaluate, or that reduces): then it must be an
//! `Err` that says to use evaluated mode, and nothing may be written; every other combination must
//! give the host's counts. A scatter whose index has any other size is an error in every
//! mode, never a silent wrong count.

mod common;
use common::leak_checked;
use kiln::control::{Branch, Loop, Mode, Switch, Target};
use kiln::prelude::*;
use std::cell::RefCell;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Construct {
    Loop,
    LoopCompressed,
    /// A body that needs other lanes' values (a reduction): `Auto` runs it in evaluated mode.
    LoopReducing,
    Branch,
    /// A `then` side that needs other lanes' values.
    BranchReducing,
    Switch,
    Dispatch,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Index {
    /// `lane & 1`, from the loop state or the call's arguments.
    Lane,
    /// A literal 0 of size 1: one increment per lane that runs the body.
    Literal,
    /// `lane & 1` over all lanes of the construct, computed outside and captured.
    Captured,
}

const MODES: [Mode; 3] = [Mode::Auto, Mode::Symbolic, Mode::Evaluated];
const CONSTRUCTS: [Construct; 7] = [
    Construct::Loop,
    Construct::LoopCompressed,
    Construct::LoopReducing,
    Construct::Branch,
    Construct::BranchReducing,
    Construct::Switch,
    Construct::Dispatch,
];
const INDICES: [Index; 3] = [Index::Lane, Index::Literal, Index::Captured];

/// Zeros computed from a reduction over every lane: a body using it needs other lanes' values,
/// which symbolic mode refuses (`Mode::Auto` then runs the body in evaluated mode).
fn needs_all_lanes(x: &UInt32) -> UInt32 {
    x.reduce_max() * std::hint::black_box(0u32)
}

/// Per lane: how many iterations it runs (0 for some: those never enter the loop).
fn trip_count(l: usize) -> u32 {
    ((l * 7 + 3) % 5) as u32
}

/// Which target lane `l` runs: 0 or 1 for a branch (`then` where `l % 3 == 0`), 0..3 for a call.
fn target_of(c: Construct, l: usize) -> usize {
    match c {
        Construct::Branch | Construct::BranchReducing => usize::from(l % 3 != 0),
        _ => l % 3,
    }
}

/// The host's counts: one array of 2 counters per target the construct scatters into.
fn expected(c: Construct, index: Index, n: usize) -> Vec<Vec<u32>> {
    let at = |l: usize| if index == Index::Literal { 0 } else { l & 1 };
    match c {
        Construct::Loop | Construct::LoopCompressed | Construct::LoopReducing => {
            let mut h = vec![0u32; 2];
            for l in 0..n {
                for _ in 0..trip_count(l) {
                    h[at(l)] += 1;
                }
            }
            vec![h]
        }
        _ => {
            let targets = if matches!(c, Construct::Branch | Construct::BranchReducing) {
                2
            } else {
                3
            };
            let mut h = vec![vec![0u32; 2]; targets];
            for l in 0..n {
                h[target_of(c, l)][at(l)] += 1;
            }
            h
        }
    }
}

/// A scatter target: two counters, evaluated or a literal.
fn counters(evaluated: bool) -> UInt32 {
    let h = UInt32::zeros(2);
    if evaluated {
        h.eval();
    }
    h
}

/// The index a body scatters at; `lane` is the lane number as the body sees it.
fn index_for(index: Index, lane: &UInt32, captured: &UInt32) -> UInt32 {
    match index {
        Index::Lane => lane & 1u32,
        Index::Literal => UInt32::zeros(1),
        Index::Captured => captured.clone(),
    }
}

/// Run one combination: the construct's result and the counters it scattered into.
fn run(
    c: Construct,
    mode: Mode,
    evaluated: bool,
    index: Index,
    n: usize,
) -> (kiln::Result<Vec<u32>>, Vec<Vec<u32>>) {
    let lanes = UInt32::arange(n);
    let captured = &lanes & 1u32;
    captured.eval();
    match c {
        Construct::Loop | Construct::LoopCompressed | Construct::LoopReducing => {
            let trips: Vec<u32> = (0..n).map(trip_count).collect();
            let mut h = counters(evaluated);
            let r = Loop::new((lanes.clone(), UInt32::zeros(n), UInt32::from_slice(&trips)))
                .mode(mode)
                .compress(c == Construct::LoopCompressed)
                .run(
                    |(_, i, t)| i.lt(t),
                    |(lane, i, t)| {
                        scatter_reduce(
                            ReduceOp::Add,
                            &mut h,
                            1u32,
                            &index_for(index, lane, &captured),
                        );
                        let mut next = i + 1u32;
                        if c == Construct::LoopReducing {
                            next += needs_all_lanes(i);
                        }
                        (lane.clone(), next, t.clone())
                    },
                )
                .and_then(|(_, i, _)| i.try_to_vec());
            (r, vec![h.to_vec()])
        }
        Construct::Branch | Construct::BranchReducing => {
            let h = [counters(evaluated), counters(evaluated)].map(RefCell::new);
            let r = Branch::new()
                .mode(mode)
                .run(
                    &(&lanes % 3u32).eq(0u32),
                    |x: &UInt32| {
                        let at = index_for(index, x, &captured);
                        scatter_reduce(ReduceOp::Add, &mut *h[0].borrow_mut(), 1u32, &at);
                        if c == Construct::BranchReducing {
                            x + 100u32 + needs_all_lanes(x)
                        } else {
                            x + 100u32
                        }
                    },
                    |x: &UInt32| {
                        let at = index_for(index, x, &captured);
                        scatter_reduce(ReduceOp::Add, &mut *h[1].borrow_mut(), 1u32, &at);
                        x + 200u32
                    },
                    &lanes,
                )
                .and_then(|y| y.try_to_vec());
            (r, h.iter().map(|h| h.borrow().to_vec()).collect())
        }
        Construct::Switch => {
            let h = [
                counters(evaluated),
                counters(evaluated),
                counters(evaluated),
            ]
            .map(RefCell::new);
            let f = |k: usize| {
                let h = &h;
                let captured = &captured;
                move |x: &UInt32| {
                    let at = index_for(index, x, captured);
                    scatter_reduce(ReduceOp::Add, &mut *h[k].borrow_mut(), 1u32, &at);
                    x + 100 * k as u32
                }
            };
            let (f0, f1, f2) = (f(0), f(1), f(2));
            let targets: [Target<'_, UInt32, UInt32>; 3] = [Some(&f0), Some(&f1), Some(&f2)];
            let r = Switch::new()
                .mode(mode)
                .run(&(&lanes % 3u32), &targets, &lanes)
                .and_then(|y| y.try_to_vec());
            (r, h.iter().map(|h| h.borrow().to_vec()).collect())
        }
        Construct::Dispatch => {
            struct Counter {
                k: usize,
            }
            let h = [
                counters(evaluated),
                counters(evaluated),
                counters(evaluated),
            ]
            .map(RefCell::new);
            let items = [Counter { k: 0 }, Counter { k: 1 }, Counter { k: 2 }];
            let refs: Vec<&Counter> = items.iter().collect();
            let r = Switch::new()
                .mode(mode)
                .dispatch(&(&lanes % 3u32), &refs, &lanes, |c, x: &UInt32| {
                    let at = index_for(index, x, &captured);
                    scatter_reduce(ReduceOp::Add, &mut *h[c.k].borrow_mut(), 1u32, &at);
                    x + 100 * c.k as u32
                })
                .and_then(|y| y.try_to_vec());
            (r, h.iter().map(|h| h.borrow().to_vec()).collect())
        }
    }
}

/// The construct's own result (not the scatters): the loop's counters, or each lane's target.
fn expected_result(c: Construct, n: usize) -> Vec<u32> {
    (0..n)
        .map(|l| match c {
            Construct::Loop | Construct::LoopCompressed | Construct::LoopReducing => trip_count(l),
            Construct::Branch | Construct::BranchReducing => {
                l as u32 + 100 * (target_of(c, l) as u32 + 1)
            }
            _ => l as u32 + 100 * target_of(c, l) as u32,
        })
        .collect()
}

#[test]
fn scatters_happen_only_for_the_lanes_that_run_the_body() {
    let mut failures = Vec::new();
    let mut runs = 0;
    for n in [8usize, 1000] {
        for c in CONSTRUCTS {
            for mode in MODES {
                for evaluated in [true, false] {
                    for index in INDICES {
                        runs += 1;
                        let case = format!(
                            "{c:?}, {mode:?}, target {}, index {index:?}, n = {n}",
                            if evaluated {
                                "evaluated"
                            } else {
                                "not evaluated"
                            }
                        );
                        let (r, got) = leak_checked(|| run(c, mode, evaluated, index, n));
                        let want = expected(c, index, n);
                        match r {
                            Ok(y) => {
                                if y != expected_result(c, n) {
                                    failures.push(format!("{case}: wrong result {:?}…", &y[..8]));
                                }
                                if got != want {
                                    failures
                                        .push(format!("{case}: counted {got:?}, want {want:?}"));
                                }
                            }
                            // symbolic mode may refuse what it cannot trace (a target it
                            // cannot evaluate, a reduction), writing nothing
                            Err(e)
                                if mode == Mode::Symbolic
                                    && (!evaluated
                                        || matches!(
                                            c,
                                            Construct::LoopReducing | Construct::BranchReducing
                                        )) =>
                            {
                                let refusal = e.to_string().contains("Mode::Evaluated");
                                let untouched = got.iter().all(|h| h == &[0, 0]);
                                if !refusal || !untouched {
                                    failures.push(format!(
                                        "{case}: symbolic mode failed with {e} and wrote {got:?}"
                                    ));
                                }
                            }
                            Err(e) => failures.push(format!("{case}: {e}")),
                        }
                    }
                }
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {runs} combinations failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

// ---------------------------------------------------------------------------------------------
// The cases of the issue, as written there

/// Lanes 0..4 count down to 0, scattering at their value: a finished lane (value 0) must not
/// scatter any more (evaluated mode used to give `[10, 3, 2, 1]`).
#[test]
fn a_finished_lane_stops_scattering() {
    for (mode, compress) in [
        (Mode::Auto, false),
        (Mode::Symbolic, false),
        (Mode::Evaluated, false),
        (Mode::Evaluated, true),
    ] {
        let h = leak_checked(|| {
            let mut h = UInt32::zeros(4);
            h.eval();
            let (v,) = Loop::new((UInt32::from_slice(&[0, 1, 2, 3]),))
                .mode(mode)
                .compress(compress)
                .run(
                    |(v,)| v.gt(0u32),
                    |(v,)| {
                        scatter_reduce(ReduceOp::Add, &mut h, 1u32, v);
                        (v - 1u32,)
                    },
                )
                .unwrap();
            assert_eq!(v.to_vec(), vec![0; 4]);
            h.to_vec()
        });
        assert_eq!(h, vec![0, 3, 2, 1], "{mode:?}, compress {compress}");
    }
}

/// The same in the evaluated fallback of `Mode::Auto` (the body reduces over the lanes).
#[test]
fn a_finished_lane_stops_scattering_in_the_fallback() {
    let h = leak_checked(|| {
        let mut h = UInt32::zeros(4);
        h.eval();
        let (v,) = Loop::new((UInt32::from_slice(&[0, 1, 2, 3]),))
            .run(
                |(v,)| v.gt(0u32),
                |(v,)| {
                    scatter_reduce(ReduceOp::Add, &mut h, 1u32, v);
                    (v - 1u32 + needs_all_lanes(v),)
                },
            )
            .unwrap();
        assert_eq!(v.to_vec(), vec![0; 4]);
        h.to_vec()
    });
    assert_eq!(h, vec![0, 3, 2, 1]);
}

/// A loop scattering into a target that is not evaluated yet: 8 lanes, even lanes run once and
/// odd lanes twice, each iteration adding 1 at `lane % 2` (`[4, 8]`) or at a literal 0 (12).
/// The frozen step used to replay the scatter into a buffer of its own (`[4, 4]`, 8).
#[test]
fn a_loop_scattering_into_an_unevaluated_target() {
    for mode in [Mode::Auto, Mode::Evaluated] {
        for compress in [false, true] {
            for literal in [false, true] {
                let h = leak_checked(|| {
                    let mut h = UInt32::zeros(2);
                    let lanes = UInt32::arange(8);
                    let trips = &lanes % 2u32 + 1u32;
                    Loop::new((lanes, UInt32::zeros(8), trips))
                        .mode(mode)
                        .compress(compress)
                        .run(
                            |(_, i, t)| i.lt(t),
                            |(l, i, t)| {
                                let at = if literal { UInt32::zeros(1) } else { l % 2u32 };
                                scatter_reduce(ReduceOp::Add, &mut h, 1u32, &at);
                                (l.clone(), i + 1u32, t.clone())
                            },
                        )
                        .unwrap();
                    h.to_vec()
                });
                let want = if literal { vec![12, 0] } else { vec![4, 8] };
                assert_eq!(h, want, "{mode:?}, compress {compress}, literal {literal}");
            }
        }
    }
}

/// Both sides of a branch scatter into one array at an index captured with the branch's lane
/// count (8 lanes, 3 take `then`): `[3, 5]`, not `[8, 8]`. Symbolic mode refuses two scatters
/// into one array (and writes nothing).
#[test]
fn branch_sides_scattering_at_a_captured_index() {
    for mode in MODES {
        let (r, h) = leak_checked(|| {
            let zero = UInt32::zeros(8);
            let one = UInt32::full(1, 8);
            let h = RefCell::new(counters(true));
            let x = UInt32::arange(8);
            let r = Branch::new()
                .mode(mode)
                .run(
                    &x.lt(3u32),
                    |x: &UInt32| {
                        scatter_reduce(ReduceOp::Add, &mut *h.borrow_mut(), 1u32, &zero);
                        x.clone()
                    },
                    |x: &UInt32| {
                        scatter_reduce(ReduceOp::Add, &mut *h.borrow_mut(), 1u32, &one);
                        x.clone()
                    },
                    &x,
                )
                .and_then(|y| y.try_to_vec());
            (r, h.into_inner().to_vec())
        });
        match r {
            Ok(y) => {
                assert_eq!(y, (0..8).collect::<Vec<u32>>(), "{mode:?}");
                assert_eq!(h, vec![3, 5], "{mode:?}");
            }
            Err(e) => {
                assert_eq!(mode, Mode::Symbolic, "{e}");
                assert!(
                    e.to_string().contains("scattering twice into one array"),
                    "{e}"
                );
                assert_eq!(h, vec![0, 0]);
            }
        }
    }
}

/// Three targets scatter into one array, each at an index captured with the call's lane count:
/// `[3, 3, 2]` (lane `l` calls target `l % 3`), not `[8, 8, 8]`; also through `dispatch`.
#[test]
fn switch_targets_scattering_at_a_captured_index() {
    for mode in MODES {
        for through_dispatch in [false, true] {
            let (r, h) = leak_checked(|| {
                let at: Vec<UInt32> = (0..3).map(|k| UInt32::full(k, 8)).collect();
                let h = RefCell::new(UInt32::zeros(3));
                h.borrow().eval();
                let x = UInt32::arange(8);
                let index = &x % 3u32;
                let r = if through_dispatch {
                    let ks = [0usize, 1, 2];
                    let refs: Vec<&usize> = ks.iter().collect();
                    Switch::new()
                        .mode(mode)
                        .dispatch(&index, &refs, &x, |&k, x: &UInt32| {
                            scatter_reduce(ReduceOp::Add, &mut *h.borrow_mut(), 1u32, &at[k]);
                            x + k as u32
                        })
                } else {
                    let f = |k: usize| {
                        let (h, at) = (&h, &at);
                        move |x: &UInt32| {
                            scatter_reduce(ReduceOp::Add, &mut *h.borrow_mut(), 1u32, &at[k]);
                            x + k as u32
                        }
                    };
                    let (f0, f1, f2) = (f(0), f(1), f(2));
                    let t: [Target<'_, UInt32, UInt32>; 3] = [Some(&f0), Some(&f1), Some(&f2)];
                    Switch::new().mode(mode).run(&index, &t, &x)
                }
                .and_then(|y| y.try_to_vec());
                (r, h.into_inner().to_vec())
            });
            match r {
                Ok(y) => {
                    let want: Vec<u32> = (0..8).map(|l| l + l % 3).collect();
                    assert_eq!(y, want, "{mode:?}");
                    assert_eq!(h, vec![3, 3, 2], "{mode:?}, dispatch {through_dispatch}");
                }
                Err(e) => {
                    assert_eq!(mode, Mode::Symbolic, "{e}");
                    assert!(
                        e.to_string().contains("scattering twice into one array"),
                        "{e}"
                    );
                    assert_eq!(h, vec![0, 0, 0]);
                }
            }
        }
    }
}

/// An index of neither the lanes' count nor size 1 cannot say which element belongs to which
/// lane: a size error in every mode (from the construct, or from the scatter), never a count.
#[test]
fn a_wrongly_sized_index_is_a_size_error() {
    for mode in MODES {
        for compress in [false, true] {
            let (r, scatter_err, h) = leak_checked(|| {
                let mut h = counters(true);
                let wrong = UInt32::from_slice(&[0, 1, 0]);
                let scatter_err = RefCell::new(None);
                let r = Loop::new(UInt32::arange(4))
                    .mode(mode)
                    .compress(compress)
                    .run(
                        |x| x.lt(2u32),
                        |x| {
                            if let Err(e) =
                                kiln::try_scatter(ReduceOp::Add, &mut h, 1u32, &wrong, true)
                            {
                                scatter_err.borrow_mut().get_or_insert(e.to_string());
                            }
                            x + 1u32
                        },
                    )
                    .map(|x| x.to_vec());
                (
                    r.map_err(|e| e.to_string()),
                    scatter_err.into_inner(),
                    h.to_vec(),
                )
            });
            let e = match (r, scatter_err) {
                (Err(e), _) | (Ok(_), Some(e)) => e,
                (Ok(x), None) => panic!("{mode:?}: no error; x = {x:?}, counted {h:?}"),
            };
            assert!(
                e.contains("3 elements") && e.contains("4 lanes"),
                "{mode:?}: {e}"
            );
            assert_eq!(h, vec![0, 0], "{mode:?}: {e}");
        }
        for construct in ["branch", "switch"] {
            let (r, scatter_err, h) = leak_checked(|| {
                let h = RefCell::new(counters(true));
                let wrong = UInt32::zeros(5);
                let scatter_err = RefCell::new(None);
                let side = |x: &UInt32| {
                    if let Err(e) =
                        kiln::try_scatter(ReduceOp::Add, &mut *h.borrow_mut(), 1u32, &wrong, true)
                    {
                        scatter_err.borrow_mut().get_or_insert(e.to_string());
                    }
                    x.clone()
                };
                let x = UInt32::arange(8);
                let r = if construct == "branch" {
                    Branch::new()
                        .mode(mode)
                        .run(&x.lt(3u32), side, |x: &UInt32| x + 1u32, &x)
                } else {
                    let other = |x: &UInt32| x + 1u32;
                    let t: [Target<'_, UInt32, UInt32>; 2] = [Some(&side), Some(&other)];
                    Switch::new()
                        .mode(mode)
                        .run(&select(&x.lt(3u32), 0u32, 1u32), &t, &x)
                };
                let r = r.map(|y| y.to_vec()).map_err(|e| e.to_string());
                (r, scatter_err.into_inner(), h.into_inner().to_vec())
            });
            let e = match (r, scatter_err) {
                (Err(e), _) | (Ok(_), Some(e)) => e,
                (Ok(y), None) => panic!("{construct} {mode:?}: no error; y = {y:?}, counted {h:?}"),
            };
            assert!(e.contains("5 elements"), "{construct} {mode:?}: {e}");
            assert_eq!(h, vec![0, 0], "{construct} {mode:?}: {e}");
        }
    }
}

/// A loop inside a loop's body (symbolic or evaluated, in either): the inner loop's scatters
/// happen only for lanes that run both bodies.
#[test]
fn nested_loops_mask_by_both() {
    for (outer, inner) in [
        (Mode::Evaluated, Mode::Symbolic),
        (Mode::Evaluated, Mode::Auto),
        (Mode::Evaluated, Mode::Evaluated),
        (Mode::Auto, Mode::Evaluated),
        (Mode::Symbolic, Mode::Symbolic),
    ] {
        let h = leak_checked(|| {
            let h = RefCell::new(UInt32::zeros(4));
            h.borrow().eval();
            // outer: lane l runs l iterations; inner: 2 iterations for every lane, each
            // scattering at the lane (lanes 0..4): h[l] = 2 * l
            Loop::new((UInt32::arange(4), UInt32::zeros(4)))
                .mode(outer)
                .run(
                    |(l, i)| i.lt(l),
                    |(l, i)| {
                        let (_, _) = Loop::new((l.clone(), UInt32::zeros(4)))
                            .mode(inner)
                            .run(
                                |(_, j)| j.lt(2u32),
                                |(l, j)| {
                                    scatter_reduce(ReduceOp::Add, &mut *h.borrow_mut(), 1u32, l);
                                    (l.clone(), j + 1u32)
                                },
                            )
                            .unwrap();
                        (l.clone(), i + 1u32)
                    },
                )
                .unwrap();
            h.into_inner().to_vec()
        });
        assert_eq!(h, vec![0, 2, 4, 6], "outer {outer:?}, inner {inner:?}");
    }
}

/// A branch inside an evaluated loop's body, evaluated too (its targets run on compacted lanes
/// within the loop's active lanes) or symbolic.
#[test]
fn a_branch_in_an_evaluated_loop_masks_by_both() {
    for inner in MODES {
        let h = leak_checked(|| {
            let h = [0; 3].map(|_| RefCell::new(counters4()));
            let one = UInt32::full(1, 4);
            // lane l runs l iterations; its `then` side (odd lanes) adds 1 at l, at 1 (an index
            // captured with the full lane count) and at 3 (a literal of size 1)
            Loop::new((UInt32::arange(4), UInt32::zeros(4)))
                .mode(Mode::Evaluated)
                .run(
                    |(l, i)| i.lt(l),
                    |(l, i)| {
                        let y = Branch::new()
                            .mode(inner)
                            .run(
                                &(l & 1u32).eq(1u32),
                                |l: &UInt32| {
                                    scatter_reduce(ReduceOp::Add, &mut *h[0].borrow_mut(), 1u32, l);
                                    scatter_reduce(
                                        ReduceOp::Add,
                                        &mut *h[1].borrow_mut(),
                                        1u32,
                                        &one,
                                    );
                                    scatter_reduce(
                                        ReduceOp::Add,
                                        &mut *h[2].borrow_mut(),
                                        1u32,
                                        &UInt32::full(3, 1),
                                    );
                                    l.clone()
                                },
                                |l: &UInt32| l.clone(),
                                l,
                            )
                            .unwrap();
                        (y, i + 1u32)
                    },
                )
                .unwrap();
            h.map(|h| h.into_inner().to_vec())
        });
        // lane 1 runs 1 iteration, lane 3 runs 3
        assert_eq!(
            h,
            [vec![0, 1, 0, 3], vec![0, 4, 0, 0], vec![0, 0, 0, 4]],
            "inner {inner:?}"
        );
    }
}

/// Four evaluated counters.
fn counters4() -> UInt32 {
    let h = UInt32::zeros(4);
    h.eval();
    h
}
