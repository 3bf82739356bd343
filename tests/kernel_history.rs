//! The kernel history (Dr.Jit's `kernel_history`): what a thread launched, kernels and device
//! reductions, with sizes, parameter counts and IR sizes; a frozen function's replay lists what
//! its recording launched; other threads' launches stay out of a thread's history.
use kiln::prelude::*;
use kiln::{kernel_history, set_kernel_history, KernelKind, ReduceOp};

#[test]
fn a_thread_sees_its_own_kernels_and_reductions() {
    set_kernel_history(true);
    let x = Float32::arange(1000);
    let y = (&x * 2.0 + 1.0).sin();
    y.eval();
    let s = y.block_reduce(ReduceOp::Max, 10);
    s.eval();
    let h = kernel_history();
    let kinds: Vec<_> = h.iter().map(|r| (r.kind, r.size)).collect();
    assert_eq!(
        kinds,
        vec![(KernelKind::Jit, 1000), (KernelKind::Reduce, 1000)],
        "{h:?}"
    );
    assert!(h[0].ops >= 4 && h[0].hash != 0 && h[0].outputs == 1);
    assert!(h[0].time_us > 0.0);
    assert_eq!((h[1].hash, h[1].inputs, h[1].outputs), (0, 1, 1));
    assert!(h.iter().all(|r| r.mode == kiln::RecordingMode::None));
    assert!(kernel_history().is_empty(), "taking the history empties it");

    // another thread's launches are its own
    std::thread::spawn(|| {
        assert!(!kiln::kernel_history_enabled());
        (Float32::arange(64) + 1.0).eval();
    })
    .join()
    .unwrap();
    assert!(kernel_history().is_empty());
    assert!(set_kernel_history(false));
    (Float32::arange(64) * 3.0).eval();
    set_kernel_history(true);
    assert!(kernel_history().is_empty(), "nothing is kept while off");
    set_kernel_history(false);
}

#[test]
fn a_replay_launches_what_its_recording_launched() {
    let mut f = kiln::freeze(|x: &Float32| -> (Float32, UInt32, Float32) {
        let y = x * 3.0 + 1.0;
        let kept = y.gt(5.0).compress();
        let b = y.block_sum(2);
        (y, kept, b)
    });
    let x = Float32::opaque(2.0) + Float32::arange(8);
    x.eval();
    set_kernel_history(true);
    f.call(&x).unwrap();
    let recorded = kernel_history();
    f.call(&x).unwrap();
    let replayed = kernel_history();
    set_kernel_history(false);
    assert_eq!(f.stats().replays, 1);
    let shape = |h: &[kiln::KernelRecord]| {
        h.iter()
            .map(|r| (r.kind, r.what, r.hash, r.size, r.inputs, r.outputs, r.ops))
            .collect::<Vec<_>>()
    };
    assert!(!recorded.is_empty());
    assert_eq!(shape(&recorded), shape(&replayed));
    assert!(recorded
        .iter()
        .all(|r| r.mode == kiln::RecordingMode::Recorded));
    assert!(replayed
        .iter()
        .all(|r| r.mode == kiln::RecordingMode::Replayed));
}
