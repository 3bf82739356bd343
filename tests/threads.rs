//! kiln from several threads at once: each thread must get the answers it gets alone.
//!
//! What a thread is in the middle of (pending scatters, a loop or branch body being traced, a
//! frozen function being recorded) is its own; the registry and the kernel cache are shared. The
//! stress test runs eight threads over mixed programs (plain arithmetic, scatters, loops and
//! branches that scatter, evaluated loops, scans, frozen calls, stencils) for a bounded time,
//! compares every result with the single-threaded answer, and checks that nothing leaked. Smaller
//! tests pin the rules one by one: another thread's body trace never runs or takes this thread's
//! scatters, and a scatter pending on an array handed to another thread runs for its reader.
//!
//! The registry's counters are global: every test here runs alone (`common::leak_checked`).

mod common;
use common::leak_checked;
use kiln::control::{Loop, Mode};
use kiln::prelude::*;
use kiln::ReduceOp;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

/// Number of program kinds in `program`.
const KINDS: u32 = 9;

/// One small program of kind `kind` (see the match) with inputs derived from `seed`; its result
/// as bits, so that results of every type compare exactly.
fn program(kind: u32, seed: u32) -> Vec<u64> {
    let s = seed % 7;
    match kind {
        // plain fused arithmetic, read back
        0 => (Float32::arange(37 + s as usize) * 2.0 + s as f32)
            .to_vec()
            .iter()
            .map(|v| v.to_bits() as u64)
            .collect(),
        // a scatter-add histogram, read back
        1 => {
            let mut h = UInt32::zeros(4);
            let idx = UInt32::arange(100 + s as usize) % 4u32;
            scatter_reduce(ReduceOp::Add, &mut h, 1u32, &idx);
            h.to_vec().iter().map(|&v| v as u64).collect()
        }
        // a symbolic loop whose body scatters (per-lane trip counts)
        2 => {
            let mut h = UInt32::zeros(3);
            h.eval();
            let v = UInt32::arange(8) + s;
            let (_,) = kiln::while_loop(
                (v,),
                |(v,)| v.gt(0u32),
                |(v,)| {
                    scatter_reduce(ReduceOp::Add, &mut h, 1u32, &(v % 3u32));
                    (v - 1u32,)
                },
            )
            .unwrap();
            h.to_vec().iter().map(|&v| v as u64).collect()
        }
        // a loop in evaluated mode (the host drives it), then a reduction
        3 => {
            let x = Float32::arange(16) + s as f32;
            let (x, n) = Loop::new((x, UInt32::zeros(16)))
                .mode(Mode::Evaluated)
                .run(|(x, _)| x.lt(40.0f32), |(x, n)| (x * 1.5 + 1.0, n + 1u32))
                .unwrap();
            let mut out: Vec<u64> = x.to_vec().iter().map(|v| v.to_bits() as u64).collect();
            out.extend(n.to_vec().iter().map(|&v| v as u64));
            out
        }
        // a branch whose sides compute different things
        4 => {
            let x = Int32::arange(50) - 20 + s as i32;
            let y =
                kiln::if_then_else(&x.lt(0), |x: &Int32| -x * 3, |x: &Int32| x + 7, &x).unwrap();
            y.to_vec().iter().map(|&v| v as u32 as u64).collect()
        }
        // a scan: running sums over the rows of a matrix
        5 => {
            let xs = Tensor::<f64>::arange(6 * 5).reshape(&[6, 5]) + s as f64;
            let (last, all) = kiln::scan(&Tensor::<f64>::zeros(&[5]), &xs, |acc, x| {
                let a = acc + x;
                (a.clone(), a * 0.5)
            })
            .unwrap();
            let mut out: Vec<u64> = last.to_vec().iter().map(|v| v.to_bits()).collect();
            out.extend(all.to_vec().iter().map(|v| v.to_bits()));
            out
        }
        // a frozen function: recorded once per thread, then replayed
        6 => FROZEN.with(|f| {
            let mut f = f.borrow_mut();
            let x = Float32::arange(20 + (s as usize % 2) * 20) * (s as f32 + 1.0);
            let mut w = Float32::full(0.5, x.size());
            let y = f(&mut w, &x).unwrap();
            let mut out: Vec<u64> = y.to_vec().iter().map(|v| v.to_bits() as u64).collect();
            out.extend(w.to_vec().iter().map(|v| v.to_bits() as u64));
            out
        }),
        // a stencil with a wrapping border
        7 => {
            let g = Tensor::<f32>::arange(12 * 9).reshape(&[12, 9]) * (s as f32 + 1.0);
            let lap = kiln::stencil(|a: &Rel<f32>| {
                a.at([0, 1]) + a.at([0, -1]) + a.at([1, 0]) + a.at([-1, 0]) - 4.0 * a.at([0, 0])
            })
            .boundary(Boundary::Wrap);
            let out = lap.apply(&g).unwrap();
            out.to_vec().iter().map(|v| v.to_bits() as u64).collect()
        }
        // a switch one of whose targets scatters
        _ => {
            let h = std::cell::RefCell::new(UInt32::zeros(3));
            let x = UInt32::arange(30) + s;
            let id = &x % 3u32;
            let r = kiln::switch(
                &id,
                &[
                    &|x: &UInt32| x * 2u32,
                    &|x: &UInt32| {
                        let at = (x / 3u32) % 3u32;
                        scatter_reduce(ReduceOp::Add, &mut h.borrow_mut(), 1u32, &at);
                        x + 1u32
                    },
                    &|x: &UInt32| x * x,
                ],
                &x,
            )
            .unwrap();
            let mut out: Vec<u64> = r.to_vec().iter().map(|&v| v as u64).collect();
            out.extend(h.borrow().to_vec().iter().map(|&v| v as u64));
            out
        }
    }
}

type Step = Box<dyn FnMut(&mut Float32, &Float32) -> kiln::Result<Float32>>;

fn new_step() -> Step {
    let mut f = kiln::freeze(frozen_step);
    Box::new(move |w: &mut Float32, x: &Float32| f.call(w, x))
}

thread_local! {
    /// Each thread's own frozen function (recorded on its first call there).
    static FROZEN: std::cell::RefCell<Step> = std::cell::RefCell::new(new_step());
}

fn frozen_step(w: &mut Float32, x: &Float32) -> Float32 {
    let y = &*w * x + 1.0;
    *w = &*w + (&y * 0.25).sum() * 1e-3;
    y
}

/// The answers of every program and seed, computed on this thread alone.
fn single_threaded(seeds: u32) -> Vec<Vec<Vec<u64>>> {
    (0..KINDS)
        .map(|k| (0..seeds).map(|s| program(k, s)).collect())
        .collect()
}

/// Sanity of the reference itself against plain Rust, for the programs with simple answers.
#[test]
fn the_single_threaded_answers_are_right() {
    leak_checked(|| {
        // histogram of arange(100 + s) % 4
        for s in 0..7u32 {
            let want: Vec<u64> = (0..4u64)
                .map(|b| (0..100 + s as u64).filter(|i| i % 4 == b).count() as u64)
                .collect();
            assert_eq!(program(1, s), want);
        }
        // loop: lane v runs v iterations scattering at v, v-1, .., 1 (mod 3)
        for s in 0..7u32 {
            let mut want = [0u64; 3];
            for lane in 0..8u32 {
                for v in (1..=lane + s).rev() {
                    want[(v % 3) as usize] += 1;
                }
            }
            assert_eq!(program(2, s), want.to_vec());
        }
    });
}

/// Eight threads over mixed programs for a bounded time, each result against the answer the
/// program gives on one thread; nothing may leak.
#[test]
fn eight_threads_mixed_programs_agree_with_one_thread() {
    leak_checked(|| {
        let seeds = 7;
        let want = Arc::new(single_threaded(seeds));
        let runs = Arc::new(AtomicU64::new(0));
        let wrong = Arc::new(AtomicU64::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let start = Arc::new(Barrier::new(8));
        let budget = Duration::from_millis(if cfg!(debug_assertions) { 1500 } else { 4000 });
        let handles: Vec<_> = (0..8u32)
            .map(|t| {
                let (want, runs, wrong, stop, start) = (
                    want.clone(),
                    runs.clone(),
                    wrong.clone(),
                    stop.clone(),
                    start.clone(),
                );
                std::thread::spawn(move || {
                    start.wait();
                    let began = Instant::now();
                    let mut i = t;
                    let mut first_error = None;
                    while !stop.load(Ordering::Relaxed) && began.elapsed() < budget {
                        // each thread walks the programs in its own order
                        let kind = (i * 7 + t) % KINDS;
                        let seed = (i / KINDS + t) % seeds;
                        let got = std::panic::catch_unwind(|| program(kind, seed));
                        let ok = matches!(&got, Ok(g) if *g == want[kind as usize][seed as usize]);
                        if !ok {
                            wrong.fetch_add(1, Ordering::Relaxed);
                            if first_error.is_none() {
                                first_error = Some(format!(
                                    "thread {t}: program {kind} seed {seed}: got {:?}, want {:?}",
                                    got.as_ref().map_err(|_| "a panic"),
                                    want[kind as usize][seed as usize]
                                ));
                            }
                        }
                        runs.fetch_add(1, Ordering::Relaxed);
                        i += 1;
                    }
                    // (a thread's frozen function goes with the thread)
                    FROZEN.with(|f| drop(f.replace(new_step())));
                    first_error
                })
            })
            .collect();
        let errors: Vec<String> = handles
            .into_iter()
            .filter_map(|h| h.join().expect("a stress thread died"))
            .collect();
        stop.store(true, Ordering::Relaxed);
        let (runs, wrong) = (runs.load(Ordering::Relaxed), wrong.load(Ordering::Relaxed));
        eprintln!("{runs} programs on 8 threads, {wrong} wrong");
        assert!(runs >= 8 * KINDS as u64, "too few programs ran: {runs}");
        assert_eq!(
            wrong,
            0,
            "wrong answers under threads:\n{}",
            errors.join("\n")
        );
        drop(want);
        FROZEN.with(|f| drop(f.replace(new_step())));
    });
}

/// A thread tracing loop bodies that scatter never takes or runs another thread's pending
/// scatters, and its placeholders never reach another thread's kernels.
#[test]
fn another_threads_loop_trace_leaves_this_threads_scatters_alone() {
    leak_checked(|| {
        let stop = Arc::new(AtomicBool::new(false));
        let tracer = {
            let stop = stop.clone();
            std::thread::spawn(move || {
                let mut n = 0u32;
                while !stop.load(Ordering::Relaxed) {
                    let mut h = UInt32::zeros(2);
                    h.eval();
                    let (v,) = kiln::while_loop(
                        (UInt32::arange(4),),
                        |(v,)| v.gt(0u32),
                        |(v,)| {
                            scatter_reduce(ReduceOp::Add, &mut h, 1u32, &(v % 2u32));
                            (v - 1u32,)
                        },
                    )
                    .unwrap();
                    assert_eq!(v.to_vec(), [0, 0, 0, 0]);
                    assert_eq!(h.to_vec(), [2, 4]);
                    n += 1;
                }
                n
            })
        };
        let began = Instant::now();
        let mut checks = 0;
        while began.elapsed() < Duration::from_millis(1500) {
            let mut h = UInt32::zeros(4);
            scatter_reduce(ReduceOp::Add, &mut h, 1u32, &(UInt32::arange(100) % 4u32));
            let y = Float32::arange(37) * 2.0;
            assert_eq!(y.to_vec()[36], 72.0);
            assert_eq!(h.to_vec(), [25, 25, 25, 25]);
            checks += 1;
        }
        stop.store(true, Ordering::Relaxed);
        let loops = tracer.join().expect("the tracing thread failed");
        assert!(checks > 0 && loops > 0);
    });
}

/// `eval_all` evaluates this thread's arrays only: another thread's lazy values (which may be
/// placeholders of a body it is tracing) stay lazy until that thread reads them.
#[test]
fn eval_all_leaves_other_threads_arrays_lazy() {
    leak_checked(|| {
        let (to_main, from_thread) = std::sync::mpsc::channel();
        let (go_on, wait) = std::sync::mpsc::channel::<()>();
        let other = std::thread::spawn(move || {
            let y = Float32::arange(10) * 3.0;
            to_main.send(()).unwrap();
            wait.recv().unwrap();
            let before = kiln::stats().launches;
            let v = y.to_vec();
            (v, kiln::stats().launches > before)
        });
        from_thread.recv().unwrap();
        let mine = Float32::arange(10) + 1.0;
        kiln::eval_all().unwrap();
        assert!(mine.is_evaluated());
        go_on.send(()).unwrap();
        let (v, launched) = other.join().unwrap();
        assert_eq!(v[9], 27.0);
        assert!(
            launched,
            "the other thread's array was evaluated by eval_all here"
        );
    });
}

/// A scatter pending on an array that is handed to another thread runs when that thread reads
/// it (value semantics), and a thread that ends with scatters pending leaves them to the next
/// evaluation instead of losing or leaking them.
#[test]
fn pending_scatters_follow_their_array_across_threads() {
    leak_checked(|| {
        let h = std::thread::spawn(|| {
            let mut h = UInt32::zeros(3);
            scatter_reduce(ReduceOp::Add, &mut h, 2u32, &UInt32::from_slice(&[0, 2, 2]));
            h
        })
        .join()
        .unwrap();
        assert_eq!(h.to_vec(), [2, 0, 4]);

        // a thread that ends without reading: the next evaluation anywhere runs its scatter
        let h = Arc::new(parking_lot::Mutex::new(None));
        {
            let h = h.clone();
            std::thread::spawn(move || {
                let mut t = UInt32::zeros(2);
                scatter(&mut t, 9u32, &UInt32::from_slice(&[1]));
                *h.lock() = Some(t);
            })
            .join()
            .unwrap();
        }
        kiln::sync().unwrap();
        let t = h.lock().take().unwrap();
        assert_eq!(t.to_vec(), [0, 9]);
    });
}
