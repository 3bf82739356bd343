//! No leaks after a panic or an error in a traced closure.
//!
//! Every kind of closure kiln traces — `while_loop` conditions and bodies (symbolic, evaluated,
//! evaluated with compression, the automatic fallback), `if_then_else` branches, `switch` and
//! `dispatch` targets, frozen functions (`kiln::freeze`), `kiln::scan` and `Scan` bodies and
//! stencil closures (`kiln::stencil`) — may panic or make the construct return an `Err`. After
//! either, every variable and every byte the construct made must be released
//! (`kiln::stats().vars_alive`, `bytes_allocated`, `live_buffers` back to where they were), no
//! trace state may be left behind (a stale refusal, a mask, a pending scatter of a discarded
//! trace), and the engine must still give right answers.
//!
//! `vars_alive` is global, so every measurement is in the one `#[test]` below (nothing else runs
//! in this binary).

use kiln::control::{Branch, Loop, Mode, Switch, Target};
use kiln::prelude::*;
use kiln::scan::Scan;
use std::panic::{catch_unwind, AssertUnwindSafe};

/// What must come back after a failure.
#[derive(Debug, PartialEq, Eq, Clone, Copy)]
struct Held {
    vars: u64,
    bytes: u64,
    buffers: u64,
}

fn held() -> Held {
    // a pending scatter left behind by a failed trace would break this
    match run_case(kiln::sync) {
        Ended::Ok => {}
        e => panic!("kiln::sync() after the case: {e}"),
    }
    let s = kiln::stats();
    Held {
        vars: s.vars_alive,
        bytes: s.bytes_allocated,
        buffers: s.live_buffers,
    }
}

/// How a case ended.
enum Ended {
    Panicked(String),
    Err(String),
    Ok,
}

impl std::fmt::Display for Ended {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Ended::Panicked(m) => write!(f, "a panic ({m})"),
            Ended::Err(e) => write!(f, "an error ({e})"),
            Ended::Ok => write!(f, "success"),
        }
    }
}

/// Run `f` with the panic message silenced.
fn run_case(f: impl FnOnce() -> kiln::Result<()>) -> Ended {
    let prev = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let r = catch_unwind(AssertUnwindSafe(f));
    std::panic::set_hook(prev);
    match r {
        Ok(Ok(())) => Ended::Ok,
        Ok(Err(e)) => Ended::Err(e.to_string()),
        Err(p) => Ended::Panicked(
            p.downcast_ref::<String>()
                .cloned()
                .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default(),
        ),
    }
}

/// A loop, a branch and a call that must still give right answers, in every mode.
fn engine_still_works() -> Result<(), String> {
    for mode in [Mode::Symbolic, Mode::Evaluated, Mode::Auto] {
        let (x, n) = Loop::new((UInt32::arange(5), UInt32::zeros(5)))
            .mode(mode)
            .run(|(x, _)| x.lt(3u32), |(x, n)| (x + 1u32, n + 1u32))
            .map_err(|e| format!("loop ({mode:?}): {e}"))?;
        let (x, n) = (x.to_vec(), n.to_vec());
        if x != [3, 3, 3, 3, 4] || n != [3, 2, 1, 0, 0] {
            return Err(format!("loop ({mode:?}): x = {x:?}, n = {n:?}"));
        }
        let h = UInt32::zeros(2);
        h.eval();
        let h = std::cell::RefCell::new(h);
        let y = Branch::new()
            .mode(mode)
            .run(
                &UInt32::arange(4).lt(1u32),
                |x: &UInt32| x + 10u32,
                |x: &UInt32| {
                    scatter_reduce(ReduceOp::Add, &mut *h.borrow_mut(), 1u32, &(x & 1u32));
                    x * 2u32
                },
                &UInt32::arange(4),
            )
            .map_err(|e| format!("branch ({mode:?}): {e}"))?
            .to_vec();
        let h = h.into_inner().to_vec();
        if y != [10, 2, 4, 6] || h != [1, 2] {
            return Err(format!("branch ({mode:?}): y = {y:?}, h = {h:?}"));
        }
        let a = |x: &UInt32| x + 1u32;
        let b = |x: &UInt32| x * 3u32;
        let t: [Target<'_, UInt32, UInt32>; 2] = [Some(&a), Some(&b)];
        let y = Switch::new()
            .mode(mode)
            .run(&UInt32::from_slice(&[1, 0, 1]), &t, &UInt32::arange(3))
            .map_err(|e| format!("switch ({mode:?}): {e}"))?
            .to_vec();
        if y != [0, 2, 6] {
            return Err(format!("switch ({mode:?}): y = {y:?}"));
        }
    }
    let mut f = kiln::freeze(|x: &UInt32| x * 2u32);
    for _ in 0..2 {
        let y = f
            .call(&UInt32::arange(3))
            .map_err(|e| format!("freeze: {e}"))?;
        if y.to_vec() != [0, 2, 4] {
            return Err(format!("freeze: {:?}", y.to_vec()));
        }
    }
    let (c, ys) = kiln::scan(&Tensor::scalar(0i64), &Tensor::<i64>::arange(4), |c, x| {
        let s = c + x;
        (s.clone(), s)
    })
    .map_err(|e| format!("scan: {e}"))?;
    if c.to_vec() != [6] || ys.to_vec() != [0, 1, 3, 6] {
        return Err(format!("scan: {:?} {:?}", c.to_vec(), ys.to_vec()));
    }
    let k = kiln::stencil(|a: &Rel<i64>| a.at([-1]) + a.at([1]));
    let s = k
        .apply(&Tensor::<i64>::arange(5))
        .map_err(|e| format!("stencil: {e}"))?
        .to_vec();
    if s != [0, 2, 4, 6, 0] {
        return Err(format!("stencil: {s:?}"));
    }
    Ok(())
}

/// A closure of the form `|..| { if boom { panic!() } ... }` that panics at its `at`-th call
/// (1-based): 1 panics when first traced; a later call panics in the evaluated rerun of a body
/// that was first traced symbolically.
struct Bomb {
    calls: std::cell::Cell<u32>,
    at: u32,
}

impl Bomb {
    fn new(at: u32) -> Bomb {
        Bomb {
            calls: std::cell::Cell::new(0),
            at,
        }
    }
    fn tick(&self) {
        let c = self.calls.get() + 1;
        self.calls.set(c);
        if c == self.at {
            panic!("boom (call {c})");
        }
    }
}

type Case = (&'static str, Box<dyn Fn() -> kiln::Result<()>>);

fn loop_cases() -> Vec<Case> {
    let mut v: Vec<Case> = Vec::new();
    for mode in [Mode::Symbolic, Mode::Evaluated, Mode::Auto] {
        for compress in [false, true] {
            if compress && mode == Mode::Symbolic {
                continue;
            }
            let name = |what: &str| -> &'static str {
                Box::leak(
                    format!("while_loop {what} ({mode:?}, compress {compress})").into_boxed_str(),
                )
            };
            v.push((
                name("cond panics"),
                Box::new(move || {
                    let bomb = Bomb::new(1);
                    Loop::new((UInt32::arange(4), Float32::zeros(4)))
                        .mode(mode)
                        .compress(compress)
                        .run(
                            |(x, _)| {
                                let c = x.lt(3u32);
                                bomb.tick();
                                c
                            },
                            |(x, f)| (x + 1u32, f + 1.0),
                        )
                        .map(drop)
                }),
            ));
            v.push((
                name("body panics"),
                Box::new(move || {
                    let bomb = Bomb::new(1);
                    Loop::new((UInt32::arange(4), Float32::zeros(4)))
                        .mode(mode)
                        .compress(compress)
                        .run(
                            |(x, _)| x.lt(3u32),
                            |(x, f)| {
                                let y = x + 1u32;
                                bomb.tick();
                                (y, f + 1.0)
                            },
                        )
                        .map(drop)
                }),
            ));
            v.push((
                name("body panics after a scatter"),
                Box::new(move || {
                    let bomb = Bomb::new(1);
                    let mut h = UInt32::zeros(4);
                    h.eval();
                    Loop::new(UInt32::arange(4))
                        .mode(mode)
                        .compress(compress)
                        .run(
                            |x| x.lt(3u32),
                            |x| {
                                scatter_reduce(ReduceOp::Add, &mut h, 1u32, x);
                                bomb.tick();
                                x + 1u32
                            },
                        )
                        .map(drop)
                }),
            ));
            // a body that needs other lanes' values: traced symbolically (refused), then run in
            // evaluated mode, where it panics (the second call)
            v.push((
                name("body with a reduction panics in the evaluated run"),
                Box::new(move || {
                    // call 1: the symbolic trace (Auto's attempt, Evaluated's probe)
                    let bomb = Bomb::new(2);
                    Loop::new(Float32::arange(4))
                        .mode(mode)
                        .compress(compress)
                        .run(
                            |x| x.lt(3.0),
                            |x| {
                                let y = x + x.sum() * 0.0 + 1.0;
                                bomb.tick();
                                y
                            },
                        )
                        .map(drop)
                }),
            ));
            v.push((
                name("body returns a wrong layout (Err)"),
                Box::new(move || {
                    Loop::new((UInt32::arange(4), UInt32::zeros(4)))
                        .mode(mode)
                        .compress(compress)
                        .run(
                            |(x, _)| x.lt(3u32),
                            |(x, n)| (x + 1u32, UInt32::zeros(3) + n.sum()),
                        )
                        .map(drop)
                }),
            ));
            v.push((
                name("condition of a wrong size (Err)"),
                Box::new(move || {
                    Loop::new((UInt32::arange(4), UInt32::zeros(4)))
                        .mode(mode)
                        .compress(compress)
                        .run(
                            |(x, _)| x.lt(3u32) & UInt32::arange(3).lt(9u32),
                            |(x, n)| (x + 1u32, n + 1u32),
                        )
                        .map(drop)
                }),
            ));
        }
    }
    v
}

fn call_cases() -> Vec<Case> {
    let mut v: Vec<Case> = Vec::new();
    for mode in [Mode::Symbolic, Mode::Evaluated, Mode::Auto] {
        let name = |what: &str| -> &'static str {
            Box::leak(format!("{what} ({mode:?})").into_boxed_str())
        };
        for side in 0..2 {
            v.push((
                name(if side == 0 {
                    "if_then_else: then panics"
                } else {
                    "if_then_else: else panics"
                }),
                Box::new(move || {
                    let x = UInt32::arange(6);
                    Branch::new()
                        .mode(mode)
                        .run(
                            &x.lt(3u32),
                            |x: &UInt32| {
                                let y = x * 2u32;
                                if side == 0 {
                                    panic!("boom");
                                }
                                y
                            },
                            |x: &UInt32| {
                                let y = x + 1u32;
                                if side == 1 {
                                    panic!("boom");
                                }
                                y
                            },
                            &x,
                        )
                        .map(drop)
                }),
            ));
        }
        v.push((
            name("if_then_else: branches of different structures (Err)"),
            Box::new(move || {
                let x = UInt32::arange(6);
                Branch::new()
                    .mode(mode)
                    .run(
                        &x.lt(3u32),
                        |x: &UInt32| vec![x * 2u32, x + 1u32],
                        |x: &UInt32| vec![x + 1u32],
                        &x,
                    )
                    .map(drop)
            }),
        ));
        v.push((
            name("switch: second target panics after a scatter"),
            Box::new(move || {
                let h = std::cell::RefCell::new(UInt32::zeros(3));
                h.borrow().eval();
                let a = |x: &UInt32| x + 1u32;
                let b = |x: &UInt32| {
                    scatter_reduce(ReduceOp::Add, &mut *h.borrow_mut(), 1u32, &(x & 1u32));
                    let y = x * 3u32;
                    panic!("boom {}", y.len());
                    #[allow(unreachable_code)]
                    y
                };
                let t: [Target<'_, UInt32, UInt32>; 2] = [Some(&a), Some(&b)];
                Switch::new()
                    .mode(mode)
                    .run(&UInt32::from_slice(&[1, 0, 1, 1]), &t, &UInt32::arange(4))
                    .map(drop)
            }),
        ));
        v.push((
            name("switch: targets of different structures (Err)"),
            Box::new(move || {
                let a = |x: &UInt32| vec![x + 1u32, x.clone()];
                let b = |x: &UInt32| vec![x * 3u32 + x.sum()];
                let t: [Target<'_, UInt32, Vec<UInt32>>; 2] = [Some(&a), Some(&b)];
                Switch::new()
                    .mode(mode)
                    .run(&UInt32::from_slice(&[1, 0, 1, 1]), &t, &UInt32::arange(4))
                    .map(drop)
            }),
        ));
        v.push((
            name("dispatch: an instance panics"),
            Box::new(move || {
                struct Scale(u32);
                let items = [Scale(2), Scale(0)];
                let refs: Vec<&Scale> = items.iter().collect();
                kiln::dispatch(
                    &UInt32::from_slice(&[0, 1, 0]),
                    &refs,
                    &UInt32::arange(3),
                    |s, x| {
                        let y = x * s.0;
                        if s.0 == 0 {
                            panic!("boom");
                        }
                        y
                    },
                )
                .map(drop)
            }),
        ));
    }
    v
}

fn other_cases() -> Vec<Case> {
    let mut v: Vec<Case> = Vec::new();
    v.push((
        "freeze: the function panics while recorded",
        Box::new(|| {
            let mut f = kiln::freeze(|x: &UInt32| {
                let y = x * 2u32 + 1u32;
                y.eval();
                let z = &y + 1u32;
                panic!("boom {}", z.len());
                #[allow(unreachable_code)]
                z
            });
            f.call(&UInt32::arange(5)).map(drop)
        }),
    ));
    v.push((
        "freeze: the function panics after a scatter into its argument",
        Box::new(|| {
            let mut f = kiln::freeze(|x: &mut UInt32| {
                scatter(x, 7u32, &UInt32::from_slice(&[0]));
                let y = &*x + 1u32;
                panic!("boom {}", y.len());
                #[allow(unreachable_code)]
                ()
            });
            let mut a = UInt32::arange(5);
            a.eval();
            f.call(&mut a).map(drop)
        }),
    ));
    v.push((
        "freeze: a panic in the second recording (new layout)",
        Box::new(|| {
            let bomb = Bomb::new(2);
            let mut f = kiln::freeze(|x: &Vec<UInt32>| {
                let y = &x[0] * 2u32;
                bomb.tick();
                y
            });
            f.call(&vec![UInt32::arange(5)])?;
            f.call(&vec![UInt32::arange(5), UInt32::arange(2)])
                .map(drop)
        }),
    ));
    v.push((
        "freeze: a loop inside panics",
        Box::new(|| {
            let mut f = kiln::freeze(|x: &UInt32| {
                kiln::while_loop(
                    x.clone(),
                    |x| x.lt(3u32),
                    |x| {
                        let y = x + 1u32;
                        panic!("boom {}", y.len());
                        #[allow(unreachable_code)]
                        y
                    },
                )
                .unwrap()
            });
            f.call(&UInt32::arange(5)).map(drop)
        }),
    ));
    v.push((
        "freeze: an evaluated loop inside panics",
        Box::new(|| {
            let mut f = kiln::freeze(|x: &UInt32| {
                Loop::new(x.clone())
                    .mode(Mode::Evaluated)
                    .run(
                        |x| x.lt(3u32),
                        |x| {
                            let y = x + 1u32;
                            panic!("boom {}", y.len());
                            #[allow(unreachable_code)]
                            y
                        },
                    )
                    .unwrap()
            });
            f.call(&UInt32::arange(5)).map(drop)
        }),
    ));
    for mode in [ScanMode::Auto, ScanMode::Fused, ScanMode::Stepped] {
        let name = |what: &str| -> &'static str {
            Box::leak(format!("{what} ({mode:?})").into_boxed_str())
        };
        v.push((
            name("kiln::scan: the body panics"),
            Box::new(move || {
                kiln::scan::Lax::new(
                    &Tensor::<i64>::zeros(&[3]),
                    &Tensor::<i64>::arange(12).reshape(&[4, 3]),
                )
                .mode(mode)
                .run(|c, x| {
                    let s = c + x;
                    panic!("boom {:?}", s.shape());
                    #[allow(unreachable_code)]
                    (s.clone(), s)
                })
                .map(drop)
            }),
        ));
        v.push((
            name("kiln::scan: the body panics at a later step"),
            Box::new(move || {
                let bomb = Bomb::new(3);
                kiln::scan::Lax::new(
                    &Tensor::scalar(0i64),
                    &Tensor::<i64>::arange(12).reshape(&[4, 3]),
                )
                .mode(mode)
                .run(|c, x| {
                    let s = c + x.sum_axis(0);
                    bomb.tick();
                    (s.clone(), s)
                })
                .map(drop)
            }),
        ));
        v.push((
            name("Scan: the body panics"),
            Box::new(move || {
                Scan::<f32>::new()
                    .output(&Tensor::zeros(&[4]))
                    .n_steps(5)
                    .mode(mode)
                    .run(|s| {
                        let y = s.out(0, -1) + 1.0;
                        panic!("boom {:?}", y.shape());
                        #[allow(unreachable_code)]
                        y
                    })
                    .map(drop)
            }),
        ));
        v.push((
            name("Scan: the body panics at a later step"),
            Box::new(move || {
                let bomb = Bomb::new(3);
                Scan::<f32>::new()
                    .sequence(&Tensor::<f32>::arange(8).reshape(&[4, 2]))
                    .output(&Tensor::scalar(0f32))
                    .mode(mode)
                    .run(|s| {
                        let y = s.out(0, -1) + s.seq(0, 0).sum_axis(0);
                        bomb.tick();
                        y
                    })
                    .map(drop)
            }),
        ));
        v.push((
            name("Scan: a body output of the wrong shape (Err)"),
            Box::new(move || {
                Scan::<f32>::new()
                    .output(&Tensor::zeros(&[4]))
                    .n_steps(5)
                    .mode(mode)
                    .run(|s| s.out(0, -1).sum_axis(0) + Tensor::<f32>::zeros(&[3]))
                    .map(drop)
            }),
        ));
    }
    v.push((
        "stencil: the closure panics",
        Box::new(|| {
            let k = kiln::stencil(|a: &Rel<i64>| {
                let s = a.at([-1]) + a.at([1]);
                panic!("boom {}", s.len());
                #[allow(unreachable_code)]
                s
            });
            k.apply(&Tensor::<i64>::arange(8)).map(drop)
        }),
    ));
    v.push((
        "stencil: the closure panics at its second trace",
        Box::new(|| {
            let bomb = Bomb::new(2);
            let k = kiln::stencil(|a: &Rel<i64>| {
                let s = a.at([-1]) + a.at([1]);
                bomb.tick();
                s
            });
            k.apply(&Tensor::<i64>::arange(8))?.eval();
            k.apply(&Tensor::<i64>::arange(8)).map(|t| {
                t.eval();
            })
        }),
    ));
    v.push((
        "stencil: an offset out of range (Err)",
        Box::new(|| {
            let k = kiln::stencil(|a: &Rel<i64>| a.at([-9]) + a.at([0, 1]));
            k.apply(&Tensor::<i64>::arange(8)).map(drop)
        }),
    ));
    v
}

#[test]
fn no_leaks_after_a_panic_or_an_error_in_a_traced_closure() {
    // warm up: caches, thread pools, lazily made constants
    engine_still_works().unwrap();
    let mut failures = Vec::new();
    let mut cases = loop_cases();
    cases.extend(call_cases());
    cases.extend(other_cases());
    for (name, case) in &cases {
        let before = held();
        let ended = run_case(case);
        let after = held();
        if after != before {
            failures.push(format!(
                "{name}: leaked after {ended}: before {before:?}, after {after:?}\n{}",
                kiln::whos()
            ));
        }
        if let Err(e) = engine_still_works() {
            failures.push(format!("{name}: the engine is broken after {ended}: {e}"));
        }
        let again = held();
        if again != after {
            failures.push(format!(
                "{name}: leaked by the check that followed: before {after:?}, after {again:?}"
            ));
        }
        if matches!(ended, Ended::Ok) {
            failures.push(format!("{name}: neither panicked nor failed"));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} cases failed:\n\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n\n")
    );
}
