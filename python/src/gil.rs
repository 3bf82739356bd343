//! The GIL around the engine: the regions where kiln runs with it released, how a thread waits
//! for the engine's evaluation lock, and what the module does as the interpreter exits.
//!
//! Every wait for the evaluation lock releases the GIL (the holder may be a frozen function's
//! recording whose Python body needs it). A thread inside one of the binding's released regions
//! waits without touching the GIL at all.
//!
//! At interpreter exit, CPython ends a daemon thread that takes the GIL back by unwinding it from
//! there, which aborts the process when the unwind meets native frames: kiln's, between Python
//! and a released region. So at exit the module takes the evaluation lock for good, a thread
//! that comes back from a released region parks instead of taking the GIL, and the exit waits
//! (briefly) until every thread still inside one is parked or back in Python.

use pyo3::prelude::*;
use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
use std::time::{Duration, Instant};

/// Set by [`_hold_engine_at_exit`]: the interpreter is exiting.
static EXITING: AtomicBool = AtomicBool::new(false);
/// The thread that ran [`_hold_engine_at_exit`]: it holds the evaluation lock and goes on using
/// kiln (later `atexit` handlers, finalizers), so it never parks.
static EXIT_THREAD: std::sync::OnceLock<std::thread::ThreadId> = std::sync::OnceLock::new();
/// Threads inside [`detach`] now.
static IN_FLIGHT: AtomicUsize = AtomicUsize::new(0);
/// Threads inside [`detach`] parked for good or waiting for the evaluation lock (which, once the
/// exiting thread holds it, they will never get).
static STUCK: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    /// Whether this thread is inside [`detach`] (it holds no GIL).
    static DETACHED: Cell<bool> = const { Cell::new(false) };
}

/// Run `f` with the GIL released (`py.detach`), marking this thread as not holding it, so that a
/// wait for the evaluation lock inside does not take it back first.
/// At interpreter exit, a thread coming back parks instead (see the module's notes).
pub fn detach<T: Send, F: Send + FnOnce() -> T>(py: Python<'_>, f: F) -> T {
    // (counted until the GIL is back: a thread waiting for it inside native frames is in flight)
    struct InFlight;
    impl Drop for InFlight {
        fn drop(&mut self) {
            IN_FLIGHT.fetch_sub(1, SeqCst);
        }
    }
    struct Reset(bool);
    impl Drop for Reset {
        fn drop(&mut self) {
            DETACHED.with(|d| d.set(self.0));
        }
    }
    IN_FLIGHT.fetch_add(1, SeqCst);
    let _in_flight = InFlight;
    py.detach(|| {
        let _reset = Reset(DETACHED.with(|d| d.replace(true)));
        let r = f();
        if EXITING.load(SeqCst) && EXIT_THREAD.get() != Some(&std::thread::current().id()) {
            park_for_good();
        }
        r
    })
}

/// Stop this thread for the rest of the process (it is exiting).
fn park_for_good() -> ! {
    STUCK.fetch_add(1, SeqCst);
    loop {
        std::thread::park();
    }
}

/// How a thread waits for the engine's evaluation lock while another thread holds it: with the
/// GIL released. The holder may be a frozen function's recording whose Python body needs the
/// GIL, and many calls evaluate while holding it (`make_opaque`, a scatter's target, a stencil's
/// input). A thread inside [`detach`], or without an interpreter to attach to, just waits.
pub fn wait_without_gil(wait: &(dyn Fn() + Sync)) {
    if DETACHED.with(|d| d.get()) {
        STUCK.fetch_add(1, SeqCst);
        wait();
        STUCK.fetch_sub(1, SeqCst);
    } else if Python::try_attach(|py| py.detach(wait)).is_none() {
        wait();
    }
}

/// Registered with `atexit` by the package: take the engine's evaluation lock for the rest of
/// the process (waiting at most two seconds for an evaluation in flight), so that daemon threads
/// still using kiln stop, waiting without the GIL, at their next evaluation or frozen call
/// instead of meeting the interpreter's teardown there. Returns whether it was taken.
#[pyfunction]
pub fn _hold_engine_at_exit(py: Python<'_>) -> bool {
    let _ = EXIT_THREAD.set(std::thread::current().id());
    EXITING.store(true, SeqCst);
    py.detach(|| {
        DETACHED.with(|d| d.set(true));
        let deadline = Instant::now() + Duration::from_secs(2);
        let held = kiln_core::schedule::hold_eval_lock_until_exit(Duration::from_secs(2));
        // threads on their way back to Python get the GIL now, while it is free; the others
        // park or wait on the lock
        while held && IN_FLIGHT.load(SeqCst) > STUCK.load(SeqCst) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(1));
        }
        DETACHED.with(|d| d.set(false));
        held
    })
}
