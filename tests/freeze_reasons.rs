//! Freeze statistics explain every recording (issue 24, item 9).
//!
//! Each recording after the first is listed in `FreezeStats::retraces` with what changed — the
//! argument's path, the old and new value or class — and the fix where there is one. The case the
//! issue met: weights created with `Float32::scalar(0.0)` are literals, baked into the first
//! recording; the step hands back evaluated arrays, so the second call has a new layout and
//! records again. That recording must say so and name `opaque`.

mod common;
use common::leak_checked;
use kiln::prelude::*;

#[derive(kiln::Traverse, Clone)]
struct Weights {
    w: Float32,
    b: Float32,
}

/// One gradient-like step: the weights move by a reduction of the data.
fn step(m: &mut Weights, x: &Float32) -> Float32 {
    let z = x * &m.w + &m.b;
    let g = z.sum() * 0.01f32;
    m.w = &m.w - &g;
    m.b = &m.b - g * 0.5f32;
    kiln::eval!(m.w, m.b);
    z.sum()
}

/// Every recording after the first has exactly one reason, and none is the bare fallback.
fn assert_all_explained(s: &kiln::freeze::FreezeStats) {
    assert_eq!(s.retraces.len(), s.recordings.saturating_sub(1), "{s}");
    for r in &s.retraces {
        assert_ne!(
            r.trim(),
            "new input layout",
            "an unexplained recording: {s}"
        );
    }
}

#[test]
fn literal_weights_that_become_arrays_are_explained() {
    leak_checked(|| {
        let x = Float32::linspace(0.0, 1.0, 1000);
        let mut f = kiln::freeze(step);
        let mut m = Weights {
            w: Float32::scalar(0.0),
            b: Float32::scalar(0.0),
        };
        for _ in 0..4 {
            f.call(&mut m, &x).unwrap();
        }
        let s = f.stats().clone();
        assert_eq!((s.recordings, s.replays), (2, 2), "{s}");
        assert_all_explained(&s);
        let why = &s.retraces[0];
        // names both weights, their recorded value, and the fix
        assert!(why.contains("`arg0.w`"), "{why}");
        assert!(why.contains("`arg0.b`"), "{why}");
        assert!(why.contains("`arg0.w` (the literal 0.0)"), "{why}");
        assert!(!why.contains("same array"), "{why}");
        assert!(why.contains("Float32::opaque"), "{why}");
        assert!(why.contains("kiln::make_opaque"), "{why}");
        // the same text shows in the printed statistics
        assert!(
            s.to_string()
                .contains("re-trace 1: new input layout: `arg0.w`"),
            "{s}"
        );

        // the fix works: opaque weights record once, with the same results
        let mut g = kiln::freeze(step);
        let mut o = Weights {
            w: Float32::opaque(0.0),
            b: Float32::opaque(0.0),
        };
        let mut m2 = Weights {
            w: Float32::scalar(0.0),
            b: Float32::scalar(0.0),
        };
        let mut f2 = kiln::freeze(step);
        for _ in 0..4 {
            let a = g.call(&mut o, &x).unwrap().item();
            let b = f2.call(&mut m2, &x).unwrap().item();
            assert_eq!(a.to_bits(), b.to_bits());
        }
        let s = g.stats();
        assert_eq!(
            (s.recordings, s.replays, s.retraces.len()),
            (1, 3, 0),
            "{s}"
        );
    });
}

#[test]
fn a_literal_that_changes_value_names_both_values_and_the_fix() {
    leak_checked(|| {
        let x = Float32::linspace(0.0, 1.0, 64);
        let mut f = kiln::freeze(|x: &Float32, k: &Float32| -> Float32 { x * k });
        for k in [1.0f32, 2.0, 3.0, 4.0] {
            let y = f.call(&x, &Float32::scalar(k)).unwrap();
            assert_eq!(y.to_vec()[63], k);
        }
        let s = f.stats().clone();
        // the second value makes it opaque: one more recording, then replays
        assert_eq!((s.recordings, s.replays), (2, 2), "{s}");
        assert_all_explained(&s);
        let why = &s.retraces[0];
        assert!(why.contains("`arg1` 1.0 → 2.0"), "{why}");
        assert!(why.contains("opaque"), "{why}");

        // with auto-opaque off every value records, each saying why
        let mut g =
            kiln::freeze(|x: &Float32, k: &Float32| -> Float32 { x * k }).auto_opaque(false);
        for k in [1.0f32, 2.0, 3.0] {
            g.call(&x, &Float32::scalar(k)).unwrap();
        }
        let s = g.stats().clone();
        assert_eq!(s.recordings, 3, "{s}");
        assert_all_explained(&s);
        assert!(
            s.retraces[1].contains("`arg1` 1.0 → 3.0")
                || s.retraces[1].contains("`arg1` 2.0 → 3.0"),
            "{s}"
        );
        assert!(s.retraces[1].contains("auto_opaque(false)"), "{s}");
    });
}

#[test]
fn a_plain_value_that_changes_is_named() {
    leak_checked(|| {
        let x = Float32::ones(16);
        let mut f = kiln::freeze(|x: &Float32, k: &u32| -> Float32 { x * *k as f32 });
        for k in [1u32, 2, 2, 7] {
            f.call(&x, &k).unwrap();
        }
        let s = f.stats().clone();
        assert_eq!((s.recordings, s.replays), (3, 1), "{s}");
        assert_all_explained(&s);
        assert!(
            s.retraces[0].contains("`arg1` is the u32 2 now but was the u32 1"),
            "{s}"
        );
        assert!(s.retraces[0].contains("opaque"), "{s}");
        // the closest recorded layout is named (7 differs from 1 and 2 alike: the latest)
        assert!(
            s.retraces[1].contains("is the u32 7 now but was the u32 2"),
            "{s}"
        );
    });
}

#[test]
fn a_size_class_change_is_named() {
    leak_checked(|| {
        let mut f = kiln::freeze(|x: &Float32| -> Float32 { x * 2.0f32 });
        for n in [100usize, 1, 250, 0] {
            f.call(&kiln::make_opaque(&Float32::linspace(0.0, 1.0, n)))
                .unwrap();
        }
        let s = f.stats().clone();
        // 100 and 250 share a recording; 1 and 0 each need their own
        assert_eq!((s.recordings, s.replays), (3, 1), "{s}");
        assert_all_explained(&s);
        assert!(
            s.retraces[0].contains("`arg0` has 1 element(s) now, 100 when recorded"),
            "{s}"
        );
        assert!(s.retraces[1].contains("`arg0` has 0 element(s) now"), "{s}");
    });
}

#[test]
fn aliasing_and_structure_changes_are_named() {
    leak_checked(|| {
        let a = kiln::make_opaque(&Float32::linspace(0.0, 1.0, 32));
        let b = kiln::make_opaque(&Float32::linspace(1.0, 2.0, 32));
        let mut f = kiln::freeze(|x: &Float32, y: &Float32| -> Float32 { x + y });
        f.call(&a, &b).unwrap();
        f.call(&a, &a).unwrap();
        let s = f.stats().clone();
        assert_all_explained(&s);
        assert!(
            s.retraces[0].contains("`arg1` is the same array as `arg0` now"),
            "{s}"
        );

        let mut g = kiln::freeze(|xs: &Vec<Float32>| -> Float32 {
            xs.iter().fold(Float32::scalar(0.0), |acc, x| acc + x)
        });
        g.call(&vec![a.clone(), b.clone()]).unwrap();
        g.call(&vec![a.clone(), b.clone(), a.clone()]).unwrap();
        let s = g.stats().clone();
        assert_all_explained(&s);
        assert!(
            s.retraces[0].contains("`arg0` is a Vec of 3 element(s) now but was a Vec of 2"),
            "{s}"
        );
    });
}

#[test]
fn a_recording_after_clear_is_explained() {
    leak_checked(|| {
        let x = kiln::make_opaque(&Float32::ones(8));
        let mut f = kiln::freeze(|x: &Float32| -> Float32 { x + 1.0f32 });
        f.call(&x).unwrap();
        f.clear();
        f.call(&x).unwrap();
        let s = f.stats().clone();
        assert_eq!(s.recordings, 2, "{s}");
        assert_all_explained(&s);
        assert!(s.retraces[0].contains("clear()"), "{s}");
    });
}

/// A step that enables its parameters' gradients leaves them tracking derivatives (as the
/// unfrozen call does), so its second call has a new layout: the reason names the arguments.
#[test]
fn a_step_that_enables_its_arguments_gradients_says_so_when_it_records_again() {
    leak_checked(|| {
        let mut frozen = kiln::freeze(|m: &mut Weights, x: &Float32| -> Float32 {
            kiln::ad::enable_grad(m).unwrap();
            let l = (x * &m.w + &m.b).sum();
            l.backward();
            l
        });
        let x = Float32::from_slice(&[1.0, 2.0, 3.0]);
        let mut m = Weights {
            w: Float32::opaque(0.5),
            b: Float32::opaque(0.25),
        };
        for _ in 0..4 {
            frozen.call(&mut m, &x).unwrap();
            assert!(m.w.grad_enabled() && m.b.grad_enabled());
        }
        let s = frozen.stats();
        assert_eq!((s.recordings, s.replays), (2, 2), "{s}");
        assert_all_explained(s);
        let why = &s.retraces[0];
        assert!(
            why.contains("`arg0.w`, `arg0.b` track derivatives now but did not"),
            "{why}"
        );
    });
}
