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
