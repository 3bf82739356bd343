//! The per-thread context of tracing: whether a symbolic body is being traced (and the first
//! request it refused), and whether a frozen function is being recorded — with the hooks through
//! which the trace, the registry and the scheduler report to that recording.
//!
//! It is the lowest layer of the engine's state so that every module reads it in one place and
//! none reaches up into `control` or `freeze` for it: `freeze::record` installs its [`Recorder`]
//! here (dependency inversion, as a drjit-core thread state is swapped in), and `control` builds
//! symbolic regions on top of the depth kept here. All of it is per thread: a recording or a
//! symbolic body on one thread never sees another thread's work.

use std::cell::{Cell, RefCell};
use std::sync::OnceLock;

thread_local! {
    static DEPTH: Cell<u32> = const { Cell::new(0) };
    static REFUSED: RefCell<Option<(String, String)>> = const { RefCell::new(None) };
    /// Epoch of the recording in progress on this thread (0: none or paused).
    static EPOCH: Cell<u64> = const { Cell::new(0) };
}

// ---------------------------------------------------------------------------------------------
// Symbolic tracing

/// Whether a symbolic body is being traced on this thread.
///
/// ```
/// assert!(!kiln_core::control::symbolic());
/// ```
pub fn symbolic() -> bool {
    DEPTH.with(|d| d.get() > 0)
}

/// One more symbolic body is being traced on this thread (`control::enter_symbolic`).
pub(crate) fn enter_symbolic_depth() {
    DEPTH.with(|d| d.set(d.get() + 1));
}

/// A symbolic body's trace ended (its scope was dropped).
pub(crate) fn leave_symbolic_depth() {
    DEPTH.with(|d| d.set(d.get().saturating_sub(1)));
}

/// Inside a symbolic body: note that `how` was asked of `label` (first refusal wins) and return
/// true; the caller then skips the work. Outside: false.
pub(crate) fn refuse(label: impl FnOnce() -> String, how: &str) -> bool {
    if !symbolic() {
        return false;
    }
    REFUSED.with(|r| {
        let mut r = r.borrow_mut();
        // the first refusal is reported, except that a read to the host outranks device work
        // (it decides whether evaluated mode can freeze its step)
        let replace = match &*r {
            None => true,
            Some((_, h)) => is_host_read(how) && !is_host_read(h),
        };
        if replace {
            *r = Some((label(), how.to_string()));
        }
    });
    true
}

/// Inside a symbolic body, refuse a request a front end cannot trace (a nested construct that must
/// run for real): as [`take_refusal`] later reports. Returns whether it was refused (false outside
/// a symbolic body).
///
/// ```
/// // outside a symbolic body nothing is refused
/// assert!(!kiln_core::control::refuse_request("x".into(), "reading its contents"));
/// ```
pub fn refuse_request(label: String, how: &str) -> bool {
    refuse(|| label, how)
}

/// Put back a refusal taken with [`take_refusal`] (a nested trace took the slot to read its own):
/// the first refusal still wins.
///
/// ```
/// use kiln_core::control::{restore_refusal, take_refusal};
/// restore_refusal(Some(("x".into(), "evaluating it".into())));
/// assert_eq!(take_refusal().unwrap().1, "evaluating it");
/// ```
pub fn restore_refusal(r: Option<(String, String)>) {
    if let Some(r) = r {
        REFUSED.with(|slot| {
            let mut slot = slot.borrow_mut();
            if slot.is_none() {
                *slot = Some(r);
            }
        });
    }
}

/// The first refused request since the last call: `(label, how)`.
///
/// ```
/// assert!(kiln_core::control::take_refusal().is_none());
/// ```
pub fn take_refusal() -> Option<(String, String)> {
    REFUSED.with(|r| r.borrow_mut().take())
}

/// Whether a refused request (its `how`) was a read of data to the host (as opposed to work on
/// the device: an eval, a reduction to an array, …).
///
/// ```
/// assert!(kiln_core::control::is_host_read("reading its contents"));
/// ```
pub fn is_host_read(how: &str) -> bool {
    matches!(how, "reading its contents" | "reducing it to a host value")
}

// ---------------------------------------------------------------------------------------------
// Recording of frozen functions

/// What the layers below `freeze` report to a recording in progress on this thread. Sizes are
/// `(sym, size)` pairs: a variable's size expression (0: constant) and its value now.
pub trait Recorder: Sync {
    /// The size expression of an elementwise result of `size` elements over operands of these
    /// sizes (recording the guards the broadcasting decision depends on).
    fn result_sym(&self, operands: &[(u32, usize)], size: usize) -> u32;
    /// A decision depended on the size classes (0, 1, more) of these sizes.
    fn guard_classes(&self, sizes: &[(u32, usize)]);
    /// Two sizes were found equal and work was merged on that basis.
    fn guard_equal(&self, a: (u32, usize), b: (u32, usize));
    /// The size expression of the recorded buffer starting at `addr` (0: not one it knows).
    fn buffer_sym(&self, addr: usize) -> u32;
    /// A lazy array made before the recording (`label`) is computed inside it: the recording
    /// fails (a replay would compute it from the new inputs).
    fn captured_expression(&self, label: String);
}

static RECORDER: OnceLock<&'static dyn Recorder> = OnceLock::new();

/// Install the recorder the hooks report to (`freeze::record`, on its first recording).
pub(crate) fn install_recorder(r: &'static dyn Recorder) {
    let _ = RECORDER.set(r);
}

/// The epoch of the recording in progress on this thread, if one is and is not paused.
pub fn recording_epoch() -> Option<u64> {
    let e = EPOCH.with(|e| e.get());
    (e != 0).then_some(e)
}

/// Whether a recording is in progress (and not paused) on this thread: one thread-local read, so
/// code outside a frozen function pays nothing for the hooks.
#[inline]
pub fn recording() -> bool {
    EPOCH.with(|e| e.get() != 0)
}

/// Set this thread's recording epoch (0: none); `freeze::record` alone calls it.
pub(crate) fn set_recording_epoch(epoch: u64) {
    EPOCH.with(|e| e.set(epoch));
}

/// The recorder, once any recording has begun (each hook acts only where this thread has a
/// recording, paused or not; outside one it does nothing).
fn recorder() -> Option<&'static dyn Recorder> {
    RECORDER.get().copied()
}

/// [`Recorder::result_sym`] of the recording on this thread (0 without one).
pub(crate) fn result_sym(operands: &[(u32, usize)], size: usize) -> u32 {
    recorder().map_or(0, |r| r.result_sym(operands, size))
}

/// [`Recorder::guard_classes`] on this thread's recording, if any.
pub(crate) fn guard_classes(sizes: &[(u32, usize)]) {
    if let Some(r) = recorder() {
        r.guard_classes(sizes);
    }
}

/// [`Recorder::guard_equal`] on this thread's recording, if any.
pub(crate) fn guard_equal(a: (u32, usize), b: (u32, usize)) {
    if let Some(r) = recorder() {
        r.guard_equal(a, b);
    }
}

/// [`Recorder::buffer_sym`] of the buffer at `ptr` (0 without a recording).
pub(crate) fn buffer_sym(ptr: *mut u8) -> u32 {
    recorder().map_or(0, |r| r.buffer_sym(ptr as usize))
}

/// [`Recorder::captured_expression`] on this thread's recording, if any.
pub(crate) fn captured_expression(label: String) {
    if let Some(r) = recorder() {
        r.captured_expression(label);
    }
}
