//! Frozen replays write `&mut` state in place (issue 24, item 3).
//!
//! A traced step `s.x = &s.x + ...` writes the result into the old array's buffer when the caller
//! held it alone; a replay of the same step, frozen, must do the same (else it allocates and
//! touches fresh memory every call and runs slower than tracing). Checked here: the buffers of a
//! uniquely held state stay put across replays and no buffer is requested from the allocator;
//! state that someone else can still see (a clone, a pending expression) keeps its old values;
//! outputs that alias inputs or each other; results bit for bit those of the traced call, on every
//! backend, at block boundaries and sizes that change between replays.

mod common;
use common::leak_checked;
use kiln::prelude::*;
use kiln::BackendKind;
use kiln_core::{alloc, with_backend};

/// Run a test alone with update-in-place on (whatever `KILN_INPLACE` says), then the leak check.
fn check<R>(f: impl FnOnce() -> R) -> R {
    leak_checked(|| kiln::with_inplace(true, f))
}

#[derive(kiln::Traverse, Clone)]
struct State {
    x: Float32,
    v: Float32,
}

/// A damped update of both arrays (each reads the old values of its own lane only).
fn step(s: &mut State) {
    s.v = &s.v * 0.5f32 + &s.x * 0.125f32 + 1.0f32;
    s.x = &s.x + &s.v * 0.25f32;
}

/// An evaluated state of `n` lanes, each array in its own buffer.
fn state(n: usize) -> State {
    let x = Float32::from_vec((0..n).map(|i| (i % 97) as f32 * 0.5 - 7.0).collect());
    let v = Float32::from_vec((0..n).map(|i| (i % 13) as f32 - 3.0).collect());
    kiln::eval!(x, v);
    State { x, v }
}

fn bits(s: &State) -> Vec<u32> {
    s.x.to_vec()
        .into_iter()
        .chain(s.v.to_vec())
        .map(f32::to_bits)
        .collect()
}

fn addrs(s: &State) -> (usize, usize) {
    (
        s.x.buffer_addr().expect("evaluated"),
        s.v.buffer_addr().expect("evaluated"),
    )
}

/// The traced step on a copy of `s` (its own buffers), evaluated.
fn traced(s: &State, steps: usize) -> Vec<u32> {
    let mut t = State {
        x: Float32::from_vec(s.x.to_vec()),
        v: Float32::from_vec(s.v.to_vec()),
    };
    for _ in 0..steps {
        step(&mut t);
        kiln::eval!(t.x, t.v);
    }
    bits(&t)
}

#[test]
fn unique_state_is_updated_in_place() {
    check(|| {
        let mut s = state(4096);
        let mut f = kiln::freeze(|s: &mut State| step(s));
        let start = bits(&s);
        f.call(&mut s).unwrap(); // records
        f.call(&mut s).unwrap(); // replays
        let here = addrs(&s);
        let (reuses, requests) = (kiln::stats().inplace_reuses, alloc::stats().requests);
        for _ in 0..3 {
            f.call(&mut s).unwrap();
            assert_eq!(addrs(&s), here, "a replay moved the state to new buffers");
        }
        assert_eq!(f.stats().replays, 4, "{}", f.stats());
        assert_eq!(
            alloc::stats().requests,
            requests,
            "replays of a uniquely held state asked the allocator for buffers"
        );
        assert_eq!(
            kiln::stats().inplace_reuses - reuses,
            6,
            "each replay writes both arrays in place"
        );
        // and the values are the traced step's, five times over
        let again = State {
            x: Float32::from_vec(start[..4096].iter().map(|&b| f32::from_bits(b)).collect()),
            v: Float32::from_vec(start[4096..].iter().map(|&b| f32::from_bits(b)).collect()),
        };
        assert_eq!(bits(&s), traced(&again, 5));
    });
}

#[test]
fn in_place_is_off_with_inplace_off() {
    check(|| {
        let mut s = state(1000);
        let mut f = kiln::freeze(|s: &mut State| step(s));
        f.call(&mut s).unwrap();
        f.call(&mut s).unwrap();
        let expect = traced(&s, 1);
        let reuses = kiln::stats().inplace_reuses;
        kiln::with_inplace(false, || f.call(&mut s).unwrap());
        assert_eq!(kiln::stats().inplace_reuses, reuses);
        assert_eq!(bits(&s), expect);
    });
}

#[test]
fn a_clone_keeps_its_old_values() {
    check(|| {
        let mut s = state(5000);
        let mut f = kiln::freeze(|s: &mut State| step(s));
        f.call(&mut s).unwrap();
        f.call(&mut s).unwrap();
        // the caller keeps a clone of the whole state, then of one array only
        let keep = s.clone();
        let old = bits(&keep);
        let expect = traced(&s, 1);
        f.call(&mut s).unwrap();
        assert_eq!(
            bits(&keep),
            old,
            "a replay overwrote a clone the caller holds"
        );
        assert_eq!(bits(&s), expect);
        assert_ne!(addrs(&s).0, addrs(&keep).0);
        drop(keep);

        let keep_v = s.v.clone();
        let old_v = keep_v.to_vec();
        let x_before = addrs(&s).0;
        let expect = traced(&s, 1);
        f.call(&mut s).unwrap();
        assert_eq!(keep_v.to_vec(), old_v, "the clone of `v` was overwritten");
        assert_eq!(bits(&s), expect);
        // `x` was not shared: it is still written in place
        assert_eq!(addrs(&s).0, x_before);
    });
}

#[test]
fn a_pending_expression_still_reads_the_old_state() {
    check(|| {
        let mut s = state(3000);
        let mut f = kiln::freeze(|s: &mut State| step(s));
        f.call(&mut s).unwrap();
        f.call(&mut s).unwrap();
        let old_x = s.x.to_vec();
        let pending = &s.x * 2.0f32; // not evaluated: it reads `x` when it runs
        let expect = traced(&s, 1);
        f.call(&mut s).unwrap();
        assert_eq!(bits(&s), expect);
        let want: Vec<f32> = old_x.iter().map(|v| v * 2.0).collect();
        assert_eq!(
            pending.to_vec(),
            want,
            "a replay overwrote what a pending expression reads"
        );
    });
}

#[test]
fn outputs_aliasing_inputs() {
    check(|| {
        // the result is the new `x` itself
        let mut s = state(1024);
        let mut f = kiln::freeze(|s: &mut State| -> Float32 {
            step(s);
            s.x.clone()
        });
        for _ in 0..2 {
            f.call(&mut s).unwrap();
        }
        let expect = traced(&s, 1);
        let r = f.call(&mut s).unwrap();
        assert_eq!(bits(&s), expect);
        assert_eq!(r.buffer_addr(), s.x.buffer_addr());
        assert_eq!(r.to_vec(), s.x.to_vec());
        drop(r);

        // the result is the old `x` (the input itself): it must survive the update
        let mut s = state(1024);
        let mut g = kiln::freeze(|s: &mut State| -> Float32 {
            let old = s.x.clone();
            step(s);
            old
        });
        for _ in 0..2 {
            g.call(&mut s).unwrap();
        }
        let old_x = s.x.to_vec();
        let expect = traced(&s, 1);
        let r = g.call(&mut s).unwrap();
        assert_eq!(r.to_vec(), old_x, "the returned input was overwritten");
        assert_eq!(bits(&s), expect);

        // one array swapped into the other's place, the other left as it was
        let mut s = state(777);
        let mut h = kiln::freeze(|s: &mut State| {
            let nx = &s.x + &s.v;
            s.v = std::mem::replace(&mut s.x, nx);
        });
        for _ in 0..2 {
            h.call(&mut s).unwrap();
        }
        let (x0, v0) = (s.x.to_vec(), s.v.to_vec());
        h.call(&mut s).unwrap();
        let want: Vec<f32> = x0.iter().zip(&v0).map(|(a, b)| a + b).collect();
        assert_eq!(s.x.to_vec(), want);
        assert_eq!(
            s.v.to_vec(),
            x0,
            "the old `x`, moved into `v`, was overwritten"
        );

        // the same array in both places: two handles, so neither may be written
        let a = Float32::from_vec((0..500).map(|i| i as f32).collect());
        a.eval();
        let mut s = State {
            x: a.clone(),
            v: a.clone(),
        };
        let mut k = kiln::freeze(|s: &mut State| step(s));
        k.call(&mut s).unwrap();
        let mut s = State {
            x: a.clone(),
            v: a.clone(),
        };
        let expect = traced(&s, 1);
        k.call(&mut s).unwrap();
        assert_eq!(bits(&s), expect);
        assert_eq!(a.to_vec(), (0..500).map(|i| i as f32).collect::<Vec<_>>());
    });
}

#[test]
fn a_later_reader_sees_the_old_state() {
    check(|| {
        // the new state is evaluated first; a later kernel still reads the old one, so only that
        // later kernel may take its buffer
        let mut f = kiln::freeze(|s: &mut Float32| -> Float32 {
            let old = s.clone();
            *s = &*s * 2.0f32;
            s.eval();
            &old + 1.0f32
        });
        let mut s = Float32::from_vec((0..3000).map(|i| i as f32).collect());
        s.eval();
        for _ in 0..4 {
            let old = s.to_vec();
            let r = f.call(&mut s).unwrap();
            let twice: Vec<f32> = old.iter().map(|v| v * 2.0).collect();
            let plus: Vec<f32> = old.iter().map(|v| v + 1.0).collect();
            assert_eq!(s.to_vec(), twice);
            assert_eq!(
                r.to_vec(),
                plus,
                "a replay overwrote the state before its last reader"
            );
        }
        assert_eq!(f.stats().replays, 3);
    });
}

#[test]
fn a_read_only_argument_is_never_written() {
    check(|| {
        // `d` is passed by `&` and held once: the caller keeps it, so it must not take results,
        // whether or not the kernel also reads the `&mut` state
        let mut f = kiln::freeze(|s: &mut Float32, d: &Float32| {
            *s = &*s + d;
        });
        let mut g = kiln::freeze(|s: &mut Float32, d: &Float32| {
            *s = d * 2.0f32;
        });
        let d = Float32::from_vec(vec![1.5; 2000]);
        d.eval();
        let mut s = Float32::from_vec(vec![0.0; 2000]);
        s.eval();
        let mut t = Float32::from_vec(vec![0.0; 2000]);
        t.eval();
        for i in 1..=4 {
            f.call(&mut s, &d).unwrap();
            g.call(&mut t, &d).unwrap();
            assert_eq!(d.to_vec(), vec![1.5; 2000]);
            assert_eq!(s.to_vec(), vec![1.5 * i as f32; 2000]);
            assert_eq!(t.to_vec(), vec![3.0; 2000]);
        }
    });
}

/// Every backend, at block boundaries and odd sizes, with the size changing between replays:
/// the replayed state is the traced state bit for bit.
#[test]
fn replays_equal_the_traced_call_on_every_backend() {
    let mut kinds = vec![BackendKind::Interp, BackendKind::Cranelift];
    if kiln_core::backend::llvm::shared().is_ok() {
        kinds.push(BackendKind::Llvm);
    }
    for kind in kinds {
        check(|| {
            with_backend(kind, || {
                let mut f = kiln::freeze(|s: &mut State| step(s));
                for n in [0usize, 1, 16383, 16384, 16385, 1000, 16385, 16383] {
                    let mut s = state(n);
                    for _ in 0..3 {
                        let expect = traced(&s, 1);
                        f.call(&mut s).unwrap();
                        assert_eq!(bits(&s), expect, "{kind:?}, n = {n}");
                    }
                }
                let st = f.stats();
                // n = 0, 1 and larger sizes trace differently: three recordings, the rest replays
                assert_eq!((st.recordings, st.replays), (3, 21), "{kind:?}: {st}");
            })
        });
    }
}

/// A step that updates `&mut` state and returns a value its kernel computes beside it, from an
/// argument only (`acc += 2x` and `y = 3x`, one kernel with two outputs): the replay must not
/// give the state's buffer to `y`, whose store would overwrite lanes of `acc` before they are
/// read (found by the gradient scan, whose accumulators are such state: it read 135 for 80).
#[test]
fn a_second_output_never_takes_a_released_state() {
    check(|| {
        for &n in &[8usize, 63, 64, 65, 1000, 100_000] {
            let mut f = kiln::freeze(|x: &Float64, acc: &mut Float64| -> Float64 {
                *acc = &*acc + &(x * 2.0);
                x * 3.0
            });
            let mut acc = Float64::from_slice(&vec![0.0; n]);
            let mut x = Float64::from_slice(&vec![1.0; n]);
            for _ in 0..4 {
                x = f.call(&x, &mut acc).unwrap();
            }
            assert_eq!(f.stats().replays, 3, "n = {n}");
            // acc = 2 (1 + 3 + 9 + 27), x = 3⁴
            assert!(
                acc.to_vec().iter().all(|&v| v == 80.0),
                "n = {n}: {:?}",
                &acc.to_vec()[..2]
            );
            assert!(x.to_vec().iter().all(|&v| v == 81.0), "n = {n}");
        }
    });
}
