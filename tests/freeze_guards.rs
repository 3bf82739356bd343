//! A frozen replay checks what the unfrozen call checks. Each test records a frozen function with
//! inputs that pass a size check, replays it with inputs whose sizes keep the checked relation (a
//! replay, not a new recording), then calls it with inputs that break the check: the frozen call
//! must fail exactly as the unfrozen one (same error, nothing modified or resized), because the
//! recording holds the relation as a guard and such a call records anew.
//!
//! Also: a read refused inside a frozen function is the call's `Err` and prints nothing.

mod common;
use common::{leak_checked, panic_message};
use kiln::control::{Branch, Loop};
use kiln::prelude::*;
use std::cell::RefCell;
use std::panic::{catch_unwind, AssertUnwindSafe};

/// An error message with variable ids (`r123`) blanked: the frozen and the unfrozen call name
/// different variables.
fn norm(s: &str) -> String {
    let mut out = String::new();
    let mut chars = s.chars().peekable();
    let mut prev_alnum = false;
    while let Some(c) = chars.next() {
        if c == 'r' && !prev_alnum && chars.peek().is_some_and(|d| d.is_ascii_digit()) {
            out.push_str("r_");
            while chars.peek().is_some_and(|d| d.is_ascii_digit()) {
                chars.next();
            }
            prev_alnum = true;
            continue;
        }
        prev_alnum = c.is_alphanumeric();
        out.push(c);
    }
    out
}

fn err_text<T>(r: kiln_core::Result<T>) -> Option<String> {
    r.err().map(|e| norm(&e.to_string()))
}

fn counts<F, M: kiln::freeze::Shape>(f: &kiln::Frozen<F, M>) -> (usize, usize) {
    let s = f.stats();
    (s.recordings, s.replays)
}

// ---------------------------------------------------------------------------------------------
// assign / eval_into: the target's size

fn assign_twice(y: &mut Float32, z: &Float32) -> Option<String> {
    err_text(y.try_assign(z * 2.0))
}

/// The example: `y.try_assign(z * 2.0)` recorded at 4 elements; a call with `z` of 8 (or
/// 1000) elements and `y` of 4 fails as unfrozen and leaves `y` alone (it replayed with `y`
/// resized to 8 before).
#[test]
fn assign_target_size_is_checked_on_replay() {
    leak_checked(|| {
        let mut f = kiln::freeze(|y: &mut Float32, z: &Float32| assign_twice(y, z));
        // evaluated targets throughout: a literal target would be another layout key
        let mut y = Float32::zeros(4);
        y.eval();
        assert_eq!(f.call(&mut y, &Float32::arange(4)).unwrap(), None);
        assert_eq!(y.to_vec(), vec![0.0, 2.0, 4.0, 6.0]);
        // equal sizes again, at another width: a replay
        let mut y = Float32::zeros(8);
        y.eval();
        assert_eq!(f.call(&mut y, &Float32::arange(8)).unwrap(), None);
        assert_eq!(
            y.to_vec(),
            (0..8).map(|i| i as f32 * 2.0).collect::<Vec<_>>()
        );
        assert_eq!(counts(&f), (1, 1), "{}", f.stats());
        for n in [8usize, 1000] {
            let z = Float32::arange(n);
            let mut want_y = Float32::full(7.0, 4);
            let want = assign_twice(&mut want_y, &z);
            assert!(
                want.as_deref()
                    .is_some_and(|m| m.contains(&format!("has {n} elements"))),
                "{want:?}"
            );
            let mut y = Float32::full(7.0, 4);
            y.eval();
            let got = f.call(&mut y, &z).unwrap();
            assert_eq!(got, want, "frozen call with z of {n} elements");
            assert_eq!(y.len(), 4, "the target was resized");
            assert_eq!(y.to_vec(), vec![7.0; 4], "the target was modified");
        }
        // the first recording still replays where the sizes are equal
        let before = counts(&f);
        let mut y = Float32::zeros(16);
        y.eval();
        assert_eq!(f.call(&mut y, &Float32::arange(16)).unwrap(), None);
        assert_eq!(y.to_vec()[15], 30.0);
        assert_eq!(counts(&f), (before.0, before.1 + 1), "{}", f.stats());
    });
}

/// `assign` (the panicking form) panics in a frozen call exactly as unfrozen.
#[test]
fn assign_panics_on_replay_as_unfrozen() {
    leak_checked(|| {
        let mut f = kiln::freeze(|y: &mut Float32, z: &Float32| y.assign(z * 2.0));
        let mut y = Float32::zeros(4);
        y.eval();
        f.call(&mut y, &Float32::arange(4)).unwrap();
        let mut y = Float32::zeros(6);
        y.eval();
        f.call(&mut y, &Float32::arange(6)).unwrap();
        assert_eq!(counts(&f), (1, 1), "{}", f.stats());
        let z = Float32::arange(8);
        let want = panic_message(AssertUnwindSafe(|| {
            let mut y = Float32::ones(4);
            y.assign(&z * 2.0);
        }));
        let mut y = Float32::ones(4);
        y.eval();
        let got = panic_message(AssertUnwindSafe(|| {
            let _ = f.call(&mut y, &z);
        }));
        assert_eq!(norm(&got), norm(&want));
        assert_eq!(y.to_vec(), vec![1.0; 4]);
    });
}

// ---------------------------------------------------------------------------------------------
// try_item: a literal whose size follows the inputs

fn item_of_quarter(x: &Float32) -> String {
    format!(
        "{:?}",
        Float32::full(3.0, x.size() / 4)
            .try_item()
            .map_err(|e| norm(&e.to_string()))
    )
}

/// `try_item` on a literal sized `x.size() / 4` needs no read, so it works inside a frozen
/// function; a replay where the size stops being 1 fails as unfrozen (`NotScalar`).
#[test]
fn item_size_is_checked_on_replay() {
    leak_checked(|| {
        let mut f = kiln::freeze(|x: &Float32| item_of_quarter(x));
        assert_eq!(f.call(&Float32::arange(4)).unwrap(), "Ok(3.0)");
        assert_eq!(f.call(&Float32::arange(7)).unwrap(), "Ok(3.0)");
        assert_eq!(counts(&f), (1, 1), "{}", f.stats());
        for n in [8usize, 13, 2] {
            let x = Float32::arange(n);
            let want = item_of_quarter(&x);
            assert!(want.starts_with("Err"), "{want}");
            assert_eq!(f.call(&x).unwrap(), want, "x of {n} elements");
        }
    });
}

// ---------------------------------------------------------------------------------------------
// Loops: the state's entries, the condition and the body's result have one size (or 1)

type LoopOut = (Option<String>, Float32, UInt32);

fn halving(x: &Float32, k: &UInt32) -> LoopOut {
    match while_loop(
        (x.clone(), k.clone()),
        |(x, _)| x.ge(1.0),
        |(x, k)| (x * 0.5, k + 1u32),
    ) {
        Ok((x, k)) => (None, x, k),
        Err(e) => (Some(norm(&e.to_string())), x.clone(), k.clone()),
    }
}

fn check_loop_out(got: &LoopOut, want: &LoopOut) {
    assert_eq!(got.0, want.0);
    assert_eq!(got.1.to_vec(), want.1.to_vec());
    assert_eq!(got.2.to_vec(), want.2.to_vec());
}

/// Two state entries of different sizes are an error; a recording made with equal sizes must not
/// replay for unequal ones.
#[test]
fn loop_state_sizes_are_checked_on_replay() {
    leak_checked(|| {
        let mut f = kiln::freeze(|x: &Float32, k: &UInt32| halving(x, k));
        for n in [4usize, 9] {
            let (x, k) = (Float32::linspace(0.0, 40.0, n), UInt32::zeros(n));
            k.eval();
            check_loop_out(&f.call(&x, &k).unwrap(), &halving(&x, &k));
        }
        assert_eq!(counts(&f), (1, 1), "{}", f.stats());
        let (x, k) = (Float32::linspace(0.0, 40.0, 4), UInt32::full(5, 8));
        k.eval();
        let want = halving(&x, &k);
        assert!(
            want.0
                .as_deref()
                .is_some_and(|m| m.contains("has 8 elements")),
            "{:?}",
            want.0
        );
        check_loop_out(&f.call(&x, &k).unwrap(), &want);
    });
}

fn never_runs(x: &Float32, stop: &Bool) -> (Option<String>, Float32) {
    // a condition of its own size (all false): the loop checks it against the state's
    match Loop::new((x.clone(),)).run(|_| stop.clone(), |(x,)| (x * 0.5,)) {
        Ok((x,)) => (None, x),
        Err(e) => (Some(norm(&e.to_string())), x.clone()),
    }
}

/// The loop condition must have the state's size (or 1).
#[test]
fn loop_condition_size_is_checked_on_replay() {
    leak_checked(|| {
        let mut f = kiln::freeze(|x: &Float32, stop: &Bool| never_runs(x, stop));
        for n in [4usize, 6] {
            let (x, stop) = (Float32::arange(n), Float32::arange(n).lt(-1.0));
            stop.eval();
            let (got, want) = (f.call(&x, &stop).unwrap(), never_runs(&x, &stop));
            assert_eq!(got.0, want.0);
            assert_eq!(got.1.to_vec(), want.1.to_vec());
        }
        assert_eq!(counts(&f), (1, 1), "{}", f.stats());
        let (x, stop) = (Float32::arange(4), Float32::arange(8).lt(-1.0));
        stop.eval();
        let want = never_runs(&x, &stop);
        assert!(
            want.0
                .as_deref()
                .is_some_and(|m| m.contains("the condition")),
            "{:?}",
            want.0
        );
        let got = f.call(&x, &stop).unwrap();
        assert_eq!(got.0, want.0);
        assert_eq!(got.1.to_vec(), want.1.to_vec());
    });
}

fn replaced(x: &Float32, y: &Float32) -> (Option<String>, Float32) {
    // the body returns an entry of another array's size
    match while_loop((x.clone(),), |(x,)| x.ge(100.0), |_| (y.clone(),)) {
        Ok((x,)) => (None, x),
        Err(e) => (Some(norm(&e.to_string())), x.clone()),
    }
}

/// The body's state must keep the loop's size.
#[test]
fn loop_body_size_is_checked_on_replay() {
    leak_checked(|| {
        let mut f = kiln::freeze(|x: &Float32, y: &Float32| replaced(x, y));
        for n in [4usize, 6] {
            let (x, y) = (Float32::arange(n) * 50.0, Float32::zeros(n));
            y.eval();
            let (got, want) = (f.call(&x, &y).unwrap(), replaced(&x, &y));
            assert_eq!(got.0, want.0);
            assert_eq!(got.1.to_vec(), want.1.to_vec());
        }
        assert_eq!(counts(&f), (1, 1), "{}", f.stats());
        let (x, y) = (Float32::arange(4) * 50.0, Float32::zeros(8));
        y.eval();
        let want = replaced(&x, &y);
        assert!(
            want.0
                .as_deref()
                .is_some_and(|m| m.contains("changes size")),
            "{:?}",
            want.0
        );
        let got = f.call(&x, &y).unwrap();
        assert_eq!(got.0, want.0);
        assert_eq!(got.1.to_vec(), want.1.to_vec());
    });
}

// ---------------------------------------------------------------------------------------------
// Branches and calls: the condition (or index) and the arguments have one size (or 1)

fn branch(mode: Mode, c: &Bool, x: &Float32) -> (Option<String>, Float32) {
    match Branch::new()
        .mode(mode)
        .run(c, |x: &Float32| x * 2.0, |x: &Float32| x + 1.0, x)
    {
        Ok(y) => (None, y),
        Err(e) => (Some(norm(&e.to_string())), x.clone()),
    }
}

fn branch_sizes_are_checked(mode: Mode) {
    leak_checked(|| {
        let mut f = kiln::freeze(move |c: &Bool, x: &Float32| branch(mode, c, x));
        for n in [4usize, 7] {
            let x = Float32::arange(n);
            let c = x.lt(2.0);
            c.eval();
            let (got, want) = (f.call(&c, &x).unwrap(), branch(mode, &c, &x));
            assert_eq!(got.0, want.0);
            assert_eq!(got.1.to_vec(), want.1.to_vec());
        }
        assert_eq!(counts(&f), (1, 1), "{}", f.stats());
        let x = Float32::arange(8);
        let c = Float32::arange(4).lt(2.0);
        c.eval();
        let want = branch(mode, &c, &x);
        assert!(
            want.0
                .as_deref()
                .is_some_and(|m| m.contains("has 8 elements")),
            "{:?}",
            want.0
        );
        let got = f.call(&c, &x).unwrap();
        assert_eq!(got.0, want.0);
        assert_eq!(got.1.to_vec(), want.1.to_vec());
    });
}

#[test]
fn branch_sizes_are_checked_on_replay() {
    branch_sizes_are_checked(Mode::Auto);
}

#[test]
fn evaluated_branch_sizes_are_checked_on_replay() {
    branch_sizes_are_checked(Mode::Evaluated);
}

fn call(index: &UInt32, x: &Float32) -> (Option<String>, Float32) {
    match switch(index, &[&|x: &Float32| x * 3.0, &|x: &Float32| x - 1.0], x) {
        Ok(y) => (None, y),
        Err(e) => (Some(norm(&e.to_string())), x.clone()),
    }
}

#[test]
fn switch_sizes_are_checked_on_replay() {
    leak_checked(|| {
        let mut f = kiln::freeze(|i: &UInt32, x: &Float32| call(i, x));
        for n in [4usize, 5] {
            let (i, x) = (UInt32::arange(n) % 2u32, Float32::arange(n));
            i.eval();
            let (got, want) = (f.call(&i, &x).unwrap(), call(&i, &x));
            assert_eq!(got.0, want.0);
            assert_eq!(got.1.to_vec(), want.1.to_vec());
        }
        assert_eq!(counts(&f), (1, 1), "{}", f.stats());
        let (i, x) = (UInt32::arange(4) % 2u32, Float32::arange(8));
        i.eval();
        let want = call(&i, &x);
        assert!(want.0.is_some(), "{:?}", want.0);
        let got = f.call(&i, &x).unwrap();
        assert_eq!(got.0, want.0);
        assert_eq!(got.1.to_vec(), want.1.to_vec());
    });
}

// ---------------------------------------------------------------------------------------------
// Lengths known only as a replay runs: lanes an evaluated branch compressed. The stencil's and the
// matmul's own checks compare them now; the scatter that puts the branch's results back compared
// the same lengths before, so these held before the fix too.

/// An evaluated branch whose first target applies `op` to the tensor argument, compacted to the
/// lanes taking it (its array shrinks, its shape does not): `op`'s size check against the shape
/// fails unless every lane takes the branch. Errors are collected in `errs` (a replay that
/// skipped the check would collect none).
fn compacted(
    t: &Tensor<f32>,
    c: &Bool,
    errs: &RefCell<Vec<String>>,
    op: &dyn Fn(&Tensor<f32>) -> kiln_core::Result<Tensor<f32>>,
) -> Float32 {
    Branch::new()
        .mode(Mode::Evaluated)
        .run(
            c,
            |t: &Tensor<f32>| match op(t) {
                Ok(r) => r.into_array(),
                Err(e) => {
                    errs.borrow_mut().push(norm(&e.to_string()));
                    Float32::zeros(t.array().size())
                }
            },
            |t: &Tensor<f32>| t.array() + 1.0,
            t,
        )
        .unwrap()
}

fn compacted_lanes_are_checked(
    op: &dyn Fn(&Tensor<f32>) -> kiln_core::Result<Tensor<f32>>,
    needle: &str,
) {
    leak_checked(|| {
        let errs = RefCell::new(Vec::new());
        let mut f = kiln::freeze(|t: &Tensor<f32>, c: &Bool| compacted(t, c, &errs, op));
        let tensor = |k: f32| {
            let t = Tensor::from_vec(vec![1.0 + k, 2.0, 4.0, 8.0], &[2, 2]);
            t.eval();
            t
        };
        let mask = |v: [bool; 4]| {
            let m = UInt32::from_slice(&v.map(u32::from)).eq(1u32);
            m.eval();
            m
        };
        for k in 0..2 {
            let (t, c) = (tensor(k as f32), mask([true; 4]));
            let got = f.call(&t, &c).unwrap();
            assert_eq!(got.to_vec(), compacted(&t, &c, &errs, op).to_vec());
            assert!(errs.borrow().is_empty(), "{:?}", errs.borrow());
        }
        assert_eq!(counts(&f), (1, 1), "{}", f.stats());
        let (t, c) = (tensor(0.0), mask([true, false, true, true]));
        let want = compacted(&t, &c, &errs, op).to_vec();
        let want_errs = errs.take();
        assert!(
            want_errs.len() == 1 && want_errs[0].contains(needle),
            "{want_errs:?}"
        );
        let got = f.call(&t, &c).unwrap();
        assert_eq!(errs.take(), want_errs);
        assert_eq!(got.to_vec(), want);
    });
}

/// A stencil checks that its input holds as many elements as its shape has.
#[test]
fn stencil_input_length_is_checked_on_replay() {
    let diff = kiln::stencil(|a: &Rel<f32>| a.at([0, 1]) - a.at([0, 0]));
    compacted_lanes_are_checked(&|t| diff.apply(t), "holds 3 elements");
}

/// A matrix product checks its operands' lengths against their shapes.
#[test]
fn matmul_operand_length_is_checked_on_replay() {
    compacted_lanes_are_checked(&|t| t.try_matmul(&Tensor::eye(2)), "has 3 elements");
}

// ---------------------------------------------------------------------------------------------
// Checks the engine already guarded (regression tests: these held before the fix too)

/// Elementwise operands broadcast only at size 1: a replay with unequal sizes panics as unfrozen.
#[test]
fn operand_sizes_are_checked_on_replay() {
    leak_checked(|| {
        let mut f = kiln::freeze(|x: &Float32, y: &Float32| x + y);
        f.call(&Float32::arange(4), &Float32::arange(4)).unwrap();
        f.call(&Float32::arange(9), &Float32::arange(9)).unwrap();
        assert_eq!(counts(&f), (1, 1), "{}", f.stats());
        let (x, y) = (Float32::arange(4), Float32::arange(8));
        let want = panic_message(AssertUnwindSafe(|| drop(&x + &y)));
        let got = panic_message(AssertUnwindSafe(|| drop(f.call(&x, &y))));
        assert!(want.contains("size mismatch"), "{want}");
        assert_eq!(norm(&got), norm(&want));
    });
}

fn scatter_into(t: &mut Float32, v: &Float32, i: &UInt32) -> Option<String> {
    err_text(kiln::memory::try_scatter(ReduceOp::None, t, v, i, true))
}

/// A scatter's values, indices and mask have one size (or 1).
#[test]
fn scatter_sizes_are_checked_on_replay() {
    leak_checked(|| {
        let mut f = kiln::freeze(|t: &mut Float32, v: &Float32, i: &UInt32| scatter_into(t, v, i));
        for n in [3usize, 5] {
            let mut t = Float32::zeros(10);
            t.eval();
            let (v, i) = (Float32::arange(n) + 1.0, UInt32::arange(n) * 2u32);
            i.eval();
            assert_eq!(f.call(&mut t, &v, &i).unwrap(), None);
            assert_eq!(t.to_vec()[2 * (n - 1)], n as f32);
        }
        assert_eq!(counts(&f), (1, 1), "{}", f.stats());
        let (v, i) = (Float32::arange(3), UInt32::arange(4));
        i.eval();
        let mut want_t = Float32::full(9.0, 10);
        let want = scatter_into(&mut want_t, &v, &i);
        assert!(want.is_some());
        let mut t = Float32::full(9.0, 10);
        t.eval();
        assert_eq!(f.call(&mut t, &v, &i).unwrap(), want);
        assert_eq!(t.to_vec(), vec![9.0; 10]);
    });
}

/// A gather's indices and mask have one size (or 1).
#[test]
fn gather_sizes_are_checked_on_replay() {
    leak_checked(|| {
        let g =
            |s: &Float32, i: &UInt32, m: &Bool| err_text(kiln::memory::try_gather_masked(s, i, m));
        let mut f = kiln::freeze(g);
        for n in [3usize, 5] {
            let (s, i, m) = (
                Float32::arange(10),
                UInt32::arange(n),
                UInt32::arange(n).lt(2u32),
            );
            m.eval();
            assert_eq!(f.call(&s, &i, &m).unwrap(), None);
        }
        assert_eq!(counts(&f), (1, 1), "{}", f.stats());
        let (s, i, m) = (
            Float32::arange(10),
            UInt32::arange(3),
            UInt32::arange(4).lt(2u32),
        );
        m.eval();
        let want = g(&s, &i, &m);
        assert!(want.is_some());
        assert_eq!(f.call(&s, &i, &m).unwrap(), want);
    });
}

/// `Size` arithmetic that underflows panics on the call that makes it, frozen or not.
#[test]
fn size_arithmetic_is_checked_on_replay() {
    leak_checked(|| {
        let mut f = kiln::freeze(|x: &Float32| UInt32::arange(x.size() - 5));
        f.call(&Float32::arange(8)).unwrap();
        assert_eq!(f.call(&Float32::arange(6)).unwrap().len(), 1);
        assert_eq!(counts(&f), (1, 1), "{}", f.stats());
        let x = Float32::arange(3);
        let want = panic_message(AssertUnwindSafe(|| drop(UInt32::arange(x.size() - 5))));
        let got = panic_message(AssertUnwindSafe(|| drop(f.call(&x))));
        assert!(want.contains("out of range"), "{want}");
        assert_eq!(got, want);
    });
}

/// Tensor shapes are part of the layout key, and a tensor made from an array pins its length: a
/// reshape whose product no longer matches, or a matmul whose inner dimensions differ, fails as
/// unfrozen.
#[test]
fn tensor_shapes_are_checked_on_replay() {
    leak_checked(|| {
        let body = |x: &Float32, w: &Tensor<f32>| -> Option<String> {
            let r = Tensor::try_from_array(x.clone(), &[2, 3])
                .and_then(|t| t.try_matmul(w))
                .map(|t| t.eval().len());
            err_text(r)
        };
        let mut f = kiln::freeze(body);
        let w = Tensor::<f32>::ones(&[3, 2]);
        w.eval();
        for _ in 0..2 {
            assert_eq!(f.call(&Float32::arange(6), &w).unwrap(), None);
        }
        assert_eq!(counts(&f), (1, 1), "{}", f.stats());
        let x = Float32::arange(8);
        assert!(body(&x, &w).is_some());
        assert_eq!(f.call(&x, &w).unwrap(), body(&x, &w));
        let w2 = Tensor::<f32>::ones(&[4, 2]);
        w2.eval();
        let x = Float32::arange(6);
        assert!(body(&x, &w2).is_some());
        assert_eq!(f.call(&x, &w2).unwrap(), body(&x, &w2));
    });
}

// ---------------------------------------------------------------------------------------------
// Reading inside a frozen function

/// `item()` inside a frozen function: the call returns `Err(FrozenRead)` and prints nothing (no
/// panic message on stderr). Runs in a child process whose stderr the parent reads.
#[test]
fn refused_read_prints_no_panic_message() {
    if std::env::var_os("KILN_FROZEN_READ_CHILD").is_some() {
        let mut f = kiln::freeze(|x: &Float32| -> Float32 {
            let s = x.sum().item();
            x * s
        });
        let e = f.call(&Float32::arange(4)).unwrap_err();
        assert!(matches!(e, kiln_core::Error::FrozenRead { .. }), "{e}");
        let mut g = kiln::freeze(|x: &Float32| -> Float32 { x * x.to_vec()[0] });
        assert!(g.call(&Float32::arange(4)).is_err());
        let mut h = kiln::freeze(|x: &Float32| -> Float32 {
            if x.gt(2.0).any() {
                x * 2.0
            } else {
                x.clone()
            }
        });
        assert!(h.call(&Float32::arange(4)).is_err());
        // a user's own panic inside the function still prints (and propagates)
        let mut p = kiln::freeze(|x: &Float32| -> Float32 { panic!("user panic {}", x.len()) });
        assert!(catch_unwind(AssertUnwindSafe(|| p.call(&Float32::arange(4)))).is_err());
        eprintln!("child done");
        return;
    }
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "refused_read_prints_no_panic_message",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("KILN_FROZEN_READ_CHILD", "1")
        .env_remove("KILN_LOG")
        .env_remove("RUST_BACKTRACE")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    let text = String::from_utf8_lossy(&out.stdout).to_string() + &stderr;
    assert!(out.status.success(), "{text}");
    assert!(stderr.contains("child done"), "{text}");
    let panics: Vec<&str> = stderr
        .lines()
        .filter(|l| l.contains("panicked at"))
        .collect();
    assert_eq!(panics.len(), 1, "only the user's panic prints:\n{text}");
    assert!(
        stderr.contains("user panic 4"),
        "a user's panic prints as usual:\n{text}"
    );
}
