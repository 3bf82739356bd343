//! Update-in-place: the switch, the counters and the log lines of reusing an operand's buffer.
//!
//! An evaluation may write a kernel's output into an input's buffer when nothing else can still
//! see that input: Rust's move is the compile-time "no future use" (the handle is gone), the
//! registry's reference counts and the buffer's `Arc` count are the run-time check (see
//! `schedule::plan_in_place`, which decides). Replays of frozen functions decide again with the
//! same rule (`freeze::replay`), and so do the in-place permutations (`permute`). This module owns
//! what they share: `KILN_INPLACE=0` (or [`with_inplace`]) turns every reuse off, each decision is
//! logged under the `inplace` target (`KILN_LOG=inplace`), and [`crate::stats`] counts the reuses
//! and the bytes they saved.

use crate::stats::INPLACE_REUSES as REUSES;
use crate::stats::{INPLACE_BYTES_SAVED as BYTES_SAVED, INPLACE_DECLINED as DECLINED};
use std::cell::Cell;
use std::sync::atomic::Ordering::Relaxed;

thread_local! {
    static OVERRIDE: Cell<Option<bool>> = const { Cell::new(None) };
}

/// Whether evaluations on this thread may write results into their operands' buffers: on unless
/// `KILN_INPLACE=0`, or inside [`with_inplace`]`(false, ..)`. Results are bit-identical either
/// way; only memory and time differ.
///
/// ```
/// assert!(kiln_core::inplace::with_inplace(false, || !kiln_core::inplace::enabled()));
/// ```
pub fn enabled() -> bool {
    OVERRIDE
        .with(|o| o.get())
        .unwrap_or_else(crate::config::inplace_enabled)
}

/// Run `f` with update-in-place turned on or off on this thread (for comparisons and for
/// bisecting a suspected bug; `KILN_INPLACE=0` does the same for the whole process).
///
/// ```
/// use kiln_core::inplace::with_inplace;
/// let on = with_inplace(true, kiln_core::inplace::enabled);
/// assert!(on);
/// ```
pub fn with_inplace<R>(on: bool, f: impl FnOnce() -> R) -> R {
    struct Reset(Option<bool>);
    impl Drop for Reset {
        fn drop(&mut self) {
            OVERRIDE.with(|o| o.set(self.0));
        }
    }
    let _reset = Reset(OVERRIDE.with(|o| o.replace(Some(on))));
    f()
}

/// Why an operand did not receive a result (the log line's reason).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Declined {
    Handle,
    Pending,
    SharedBuffer,
    Broadcast,
    Width,
    Length,
    Gathered,
    FrozenInput,
    Stencil,
    PendingScatter,
    Taken,
}

impl Declined {
    fn says(self) -> &'static str {
        match self {
            Declined::Handle => {
                "another handle is alive (borrow or clone it later, or move it into the expression)"
            }
            Declined::Pending => "a pending expression still reads it",
            Declined::SharedBuffer => "a view or another array shares its buffer",
            Declined::Broadcast => "it is broadcast (size 1) over the result",
            Declined::Width => "its element width differs from the result's",
            Declined::Length => "its length differs from the result's",
            Declined::Gathered => "it is read at other indices (a gather, a view or a stencil tap)",
            Declined::FrozenInput => "it is an input of the frozen function being recorded",
            Declined::Stencil => "the kernel runs its interior and border apart (a stencil)",
            Declined::PendingScatter => "a pending scatter writes into it",
            Declined::Taken => "an earlier result already took it",
        }
    }
}

/// Count and log one reuse: `what` (the input) now holds `result`.
pub(crate) fn note_reuse(what: &dyn Fn() -> String, result: &dyn Fn() -> String, bytes: u64) {
    REUSES.fetch_add(1, Relaxed);
    BYTES_SAVED.fetch_add(bytes, Relaxed);
    tracing::info!(target: "inplace", "reused the buffer of {} for {} ({})", what(), result(), crate::registry::fmt_bytes(bytes));
}

/// Count and log an operand that could not take a result.
pub(crate) fn note_declined(what: &dyn Fn() -> String, why: Declined) {
    DECLINED.fetch_add(1, Relaxed);
    tracing::debug!(target: "inplace", "not in place: {}: {}", what(), why.says());
}

/// Count and log a permutation that runs out of place instead.
pub(crate) fn note_declined_permutation(what: &dyn Fn() -> String, why: &str) {
    DECLINED.fetch_add(1, Relaxed);
    tracing::debug!(target: "inplace", "not permuted in place: {}: {why}", what());
}
