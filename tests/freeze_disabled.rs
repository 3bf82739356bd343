//! `KILN_FREEZE=0` turns freezing off for the whole process (its own test binary: the variable is
//! read once).

use kiln::prelude::*;

#[test]
fn kiln_freeze_0_runs_every_call_unfrozen() {
    std::env::set_var("KILN_FREEZE", "0");
    let mut f = kiln::freeze(|x: &Float32| -> Float32 { x * 2.0 });
    let x = Float32::arange(4);
    for _ in 0..3 {
        assert_eq!(f.call(&x).unwrap().to_vec(), vec![0.0, 2.0, 4.0, 6.0]);
    }
    let s = f.stats();
    assert_eq!((s.recordings, s.replays), (0, 0), "{s}");
}

/// With freezing off, each call still evaluates its outputs and `&mut` state as a frozen call
/// does: a loop of such calls compiles a bounded number of kernels and its graph does not grow.
#[test]
fn kiln_freeze_0_keeps_loops_linear() {
    std::env::set_var("KILN_FREEZE", "0");
    let v = Float64::arange(2000) * 0.001;
    v.eval();
    let mut f = kiln::freeze(|x: &mut Float64, v: &Float64| -> Float64 {
        *x = &*x * 0.99 + v;
        x.sum()
    });
    let mut x = Float64::zeros(2000);
    let built = || {
        let s = kiln::stats();
        s.cache_misses + s.disk_hits
    };
    let mut alive = Vec::new();
    let mut per = Vec::new();
    for _ in 0..40 {
        let before = built();
        let s = f.call(&mut x, &v).unwrap();
        per.push(built() - before);
        drop(s);
        alive.push(kiln::stats().vars_alive);
        assert!(
            x.is_evaluated(),
            "the `&mut` state is evaluated after each call"
        );
    }
    // (the other test of this binary may compile its own kernel meanwhile: at most 2)
    assert!(
        per[5..].iter().sum::<u64>() <= 2,
        "kernels built per call: {per:?}"
    );
    assert!(
        alive[39] <= alive[5] + 4,
        "variables alive per call: {alive:?}"
    );
    assert_eq!(f.stats().recordings, 0);
}
