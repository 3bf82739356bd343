//! The GIL around the engine: the regions where kiln runs with it released, how a thread waits
//! for the engine's evaluation lock, and what the module does as the interpreter exits.
//!
//! Every wait for the evaluation lock releases the GIL (the holder may be a frozen function's
//! recording whose Python body needs it). A thread inside one of the binding's released regions
//! ([`detach`]) waits without touching the GIL at all.
//!
//! **Exit.** CPython ends a daemon thread that takes the GIL back during its teardown by
//! unwinding it from there, which aborts the process when the unwind meets native frames: kiln's,
//! between Python and a released region, or below a Python callback kiln runs (a loop body, a
//! scan step, a stencil, a recording's body). So each thread counts the kiln regions it is in
//! (released regions and calls that run Python back), and at exit the module takes the
//! evaluation lock for good; a thread then parks for good (without the GIL) where it would come
//! back from a released region, take the GIL inside one, come back from a wait for the lock, or
//! enter such a call, unless it holds the evaluation lock (it finishes that work first); and the
//! exit waits, briefly, until every thread inside kiln is parked, waiting on the lock, or back in
//! Python.

use pyo3::prelude::*;
use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
use std::time::{Duration, Instant};

/// Set by [`_hold_engine_at_exit`]: the interpreter is exiting.
static EXITING: AtomicBool = AtomicBool::new(false);
/// The thread that ran [`_hold_engine_at_exit`]: it holds the evaluation lock and goes on using
/// kiln (later `atexit` handlers, finalizers), so it never parks.
static EXIT_THREAD: std::sync::OnceLock<std::thread::ThreadId> = std::sync::OnceLock::new();
/// Threads inside at least one kiln region (see [`Region`]).
static BUSY: AtomicUsize = AtomicUsize::new(0);
/// Busy threads that will not come back while the exiting thread holds the evaluation lock:
/// parked for good, or waiting for that lock.
static STUCK: AtomicUsize = AtomicUsize::new(0);
/// How long the exit waits for the evaluation lock and for busy threads.
const EXIT_WAIT: Duration = Duration::from_secs(5);

thread_local! {
    /// Whether this thread is inside [`detach`] (it holds no GIL).
    static DETACHED: Cell<bool> = const { Cell::new(false) };
    /// How many kiln regions this thread is inside.
    static DEPTH: Cell<usize> = const { Cell::new(0) };
}

/// Set this thread's "holds no GIL" flag until the guard drops (then as it was).
struct Detached(bool);

impl Detached {
    fn set(on: bool) -> Detached {
        Detached(DETACHED.with(|d| d.replace(on)))
    }
}

impl Drop for Detached {
    fn drop(&mut self) {
        DETACHED.with(|d| d.set(self.0));
    }
}

/// This thread is inside kiln (a released region, or a call that runs Python back) until the
/// guard drops.
pub struct Region(std::marker::PhantomData<*const ()>);

impl Region {
    fn enter() -> Region {
        if DEPTH.with(|d| d.replace(d.get() + 1)) == 0 {
            BUSY.fetch_add(1, SeqCst);
        }
        Region(std::marker::PhantomData)
    }
}

impl Drop for Region {
    fn drop(&mut self) {
        if DEPTH.with(|d| d.replace(d.get() - 1)) == 1 {
            BUSY.fetch_sub(1, SeqCst);
        }
    }
}

/// Whether this thread must stop here: the interpreter is exiting, this is not the exiting
/// thread, and it holds no evaluation lock another thread's exit waits for.
fn must_park() -> bool {
    EXITING.load(SeqCst)
        && EXIT_THREAD.get() != Some(&std::thread::current().id())
        && !kiln_core::schedule::eval_lock_held_here()
}

/// Stop this thread for the rest of the process (it is exiting); it holds no GIL.
fn park_for_good() -> ! {
    if DEPTH.with(|d| d.get()) > 0 {
        STUCK.fetch_add(1, SeqCst);
    }
    park_counted()
}

/// [`park_for_good`] for a thread already counted in `STUCK`.
fn park_counted() -> ! {
    loop {
        std::thread::park();
    }
}

/// Run `f` with the GIL released (`py.detach`), marking this thread as not holding it, so that a
/// wait for the evaluation lock inside does not take it back first. At interpreter exit, a
/// thread coming back parks instead (see the module's notes).
pub fn detach<T: Send, F: Send + FnOnce() -> T>(py: Python<'_>, f: F) -> T {
    // (busy until the GIL is back: a thread waiting for it inside native frames is in kiln)
    let _region = Region::enter();
    py.detach(|| {
        let _detached = Detached::set(true);
        let r = f();
        if must_park() {
            park_for_good();
        }
        r
    })
}

/// Take the GIL inside a released region (`Python::attach`), marking this thread as holding it.
/// At interpreter exit, a thread without the GIL parks here instead (see the module's notes).
pub fn attach<R>(f: impl for<'py> FnOnce(Python<'py>) -> R) -> R {
    if DETACHED.with(|d| d.get()) && must_park() {
        park_for_good();
    }
    Python::attach(|py| {
        let _attached = Detached::set(false);
        f(py)
    })
}

/// Enter a call that runs Python back from native frames (a loop body, a scan step, a
/// stencil, a frozen call's `state_fn` and body): the guard keeps this thread counted as inside
/// kiln. At interpreter exit, another thread parks here instead (see the module's notes).
pub fn callbacks(py: Python<'_>) -> Region {
    if must_park() {
        py.detach(|| park_for_good());
    }
    Region::enter()
}

/// How a thread waits for the engine's evaluation lock while another thread holds it: with the
/// GIL released. The holder may be a frozen function's recording whose Python body needs the
/// GIL, and many calls evaluate while holding it (`make_opaque`, a scatter's target, a stencil's
/// input). A thread inside [`detach`], or without an interpreter to attach to, just waits.
pub fn wait_without_gil(wait: &(dyn Fn() + Sync)) {
    // A busy thread waiting here at exit will not come back: the lock is held for good. Its
    // wait may still end once (the lock passed through it on its way to the exiting thread),
    // and going back for the GIL then could meet the interpreter's teardown: it parks instead.
    let stuck_wait = || {
        let busy = DEPTH.with(|d| d.get()) > 0;
        if busy {
            STUCK.fetch_add(1, SeqCst);
        }
        wait();
        if must_park() {
            park_counted();
        }
        if busy {
            STUCK.fetch_sub(1, SeqCst);
        }
    };
    if DETACHED.with(|d| d.get()) {
        stuck_wait();
    } else if Python::try_attach(|py| {
        py.detach(|| {
            let _detached = Detached::set(true);
            stuck_wait();
        })
    })
    .is_none()
    {
        wait();
    }
}

/// Registered with `atexit` by the package: take the engine's evaluation lock for the rest of
/// the process (waiting at most a few seconds for an evaluation or recording in flight), so that
/// daemon threads still using kiln stop, without the GIL, at their next evaluation, frozen call
/// or traced function, instead of meeting the interpreter's teardown inside kiln; then wait
/// (as long) until every thread inside kiln has stopped or gone back to Python. This thread
/// keeps using kiln. Returns whether the lock was taken.
#[pyfunction]
pub fn _hold_engine_at_exit(py: Python<'_>) -> bool {
    let _ = EXIT_THREAD.set(std::thread::current().id());
    EXITING.store(true, SeqCst);
    py.detach(|| {
        let _detached = Detached::set(true);
        let deadline = Instant::now() + EXIT_WAIT;
        let held = kiln_core::schedule::hold_eval_lock_until_exit(EXIT_WAIT);
        // threads on their way back to Python get the GIL now, while it is free; the others
        // park or wait on the lock
        while BUSY.load(SeqCst) > STUCK.load(SeqCst) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(1));
        }
        held
    })
}
