//! Shared test harness: tests in one binary share kiln's global registry, so each runs alone under a
//! lock and is followed by a leak check — every variable freed and every buffer returned.
#![allow(dead_code)]

use std::sync::Mutex;

static SERIAL: Mutex<()> = Mutex::new(());

/// Run `f` alone, then assert that the registry and the allocator are back to zero.
pub fn leak_checked<R>(f: impl FnOnce() -> R) -> R {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let before = kiln::stats();
    assert_eq!(
        before.vars_alive,
        0,
        "a previous test leaked variables:\n{}",
        kiln::whos()
    );
    let r = f();
    kiln::sync().unwrap();
    let after = kiln::stats();
    assert_eq!(after.vars_alive, 0, "variables leaked:\n{}", kiln::whos());
    assert_eq!(after.live_buffers, 0, "buffers leaked: {after:?}");
    assert_eq!(after.bytes_allocated, 0, "bytes leaked: {after:?}");
    r
}

/// Counters that changed while `f` ran.
pub fn delta<R>(f: impl FnOnce() -> R) -> (R, kiln::Stats) {
    let a = kiln::stats();
    let r = f();
    let b = kiln::stats();
    let d = kiln::Stats {
        kernels_compiled: b.kernels_compiled - a.kernels_compiled,
        cache_hits: b.cache_hits - a.cache_hits,
        cache_misses: b.cache_misses - a.cache_misses,
        launches: b.launches - a.launches,
        device_ops: b.device_ops - a.device_ops,
        oob_reads: b.oob_reads - a.oob_reads,
        oob_writes: b.oob_writes - a.oob_writes,
        ..b
    };
    (r, d)
}

/// Whether the message of a panic raised by `f` contains every needle.
pub fn panic_message(f: impl FnOnce() + std::panic::UnwindSafe) -> String {
    let prev = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let r = std::panic::catch_unwind(f);
    std::panic::set_hook(prev);
    match r {
        Ok(()) => panic!("expected a panic"),
        Err(e) => e
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_default(),
    }
}
