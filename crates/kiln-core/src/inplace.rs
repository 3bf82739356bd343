//! Update-in-place: the switch, the counters and the log lines of reusing an operand's buffer.
//!
//! An evaluation may write a kernel's output into an input's buffer when nothing else can still
//! see that input: Rust's move is the compile-time "no future use" (the handle is gone), the
//! registry's reference counts and the buffer's `Arc` count are the run-time check ([`decide`],
//! which an evaluation's plan asks, see `plan`). Replays of frozen functions decide again with the
//! same rule (`freeze::replay`), and so do the in-place permutations (`permute`). This module owns
//! what they share: `KILN_INPLACE=0` (or [`with_inplace`]) turns every reuse off, each decision is
//! logged under the `inplace` target (`KILN_LOG=inplace`), and [`crate::stats`] counts the reuses
//! and the bytes they saved.

use crate::build::{Binding, Built};
use crate::kernel::ParamKind;
use crate::registry::{Buffer, State};
use crate::stats::INPLACE_REUSES as REUSES;
use crate::stats::{INPLACE_BYTES_SAVED as BYTES_SAVED, INPLACE_DECLINED as DECLINED};
use std::cell::Cell;
use std::collections::HashMap;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

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
    pub(crate) fn says(self) -> &'static str {
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

// ---------------------------------------------------------------------------------------------
// The policy over one evaluation's kernels

/// What [`decide`] chose for one kernel: per root, the operand (variable, buffer) that takes its
/// result, if any; and the operands it turned down, with the reason.
pub(crate) struct Decisions {
    pub(crate) reuse: Vec<Option<(u32, Arc<Buffer>)>>,
    pub(crate) declined: Vec<(u32, Declined)>,
}

/// The references left to each variable this evaluation touches once it is done: simulate what
/// publishing the roots (each drops its operands), releasing the side effects and the
/// intermediates that die with them does to every reference count. An evaluated variable left
/// with none is released for good: nothing else (no handle, no pending expression, no side effect
/// left behind) can read it afterwards.
pub(crate) fn released_inputs(st: &State, roots: &[u32], side: &[u32]) -> HashMap<u32, u32> {
    let mut left: HashMap<u32, u32> = HashMap::new();
    let mut stack: Vec<u32> = Vec::new();
    for &r in roots {
        // a root becomes data: its operands lose one reference each
        stack.extend(st.var(r).dep_ids());
    }
    // the pending-effects list holds one reference to each side effect
    stack.extend(side.iter().copied());
    while let Some(id) = stack.pop() {
        let v = st.var(id);
        let n = left.entry(id).or_insert(v.ext + v.int);
        // (a root holds the evaluation's own reference until the end: it never reaches zero)
        *n = n.saturating_sub(1);
        if *n == 0 && !v.is_evaluated() {
            stack.extend(v.dep_ids());
        }
    }
    left
}

/// Which inputs of a built kernel take which outputs (update-in-place): an input read only at the
/// lane's own index, with the output's length and element width, released for good by this
/// evaluation (no references `left`), whose buffer no view, other array or other kernel of this evaluation
/// holds. The first such input goes to the first output that fits, and so on. Pure: the plan's
/// driver counts and logs the decisions when it runs them.
pub(crate) fn decide(
    st: &State,
    b: &Built,
    left: &HashMap<u32, u32>,
    skip: Option<u32>,
) -> Decisions {
    let mut out: Vec<Option<(u32, Arc<Buffer>)>> = vec![None; b.roots.len()];
    let mut declined: Vec<(u32, Declined)> = Vec::new();
    let params = &b.kernel.params;
    let recording = crate::context::recording();
    let logging = tracing::enabled!(target: "inplace", tracing::Level::DEBUG);
    // (variable, its buffer, element width, its parameter) of each input that may take an output
    let mut candidates: Vec<(u32, Arc<Buffer>, usize, usize)> = Vec::new();
    let mut seen: Vec<u32> = Vec::new();
    for (p, param) in params.iter().enumerate() {
        if param.kind == ParamKind::Output {
            continue;
        }
        let id = b.param_vars[p];
        if seen.contains(&id) {
            continue;
        }
        seen.push(id);
        let v = st.var(id);
        let Some(buf) = v.data.clone() else { continue };
        let bound: Vec<usize> = (0..params.len())
            .filter(|&q| params[q].kind != ParamKind::Output && b.param_vars[q] == id)
            .collect();
        let why = if bound.iter().any(|&q| {
            params[q].kind == ParamKind::Indexed || matches!(b.bindings[q], Binding::Shifted(..))
        }) {
            Some(Declined::Gathered)
        } else if param.kind == ParamKind::Broadcast {
            Some(Declined::Broadcast)
        } else if v.size != b.size {
            Some(Declined::Length)
        } else if recording && !v.fresh {
            Some(Declined::FrozenInput)
        } else if v.ext > 0 {
            Some(Declined::Handle)
        } else if v.dirty {
            Some(Declined::PendingScatter)
        } else if left.get(&id) != Some(&0) {
            Some(Declined::Pending)
        } else if crate::registry::holders(&buf) != 2 + bound.len() {
            // (the variable, `buf` here and this kernel's bindings; anyone else is another holder)
            Some(Declined::SharedBuffer)
        } else if b.interior.is_some() {
            Some(Declined::Stencil)
        } else {
            None
        };
        match why {
            None => candidates.push((id, buf, v.ty.size_bytes(), p)),
            Some(why) => {
                if logging || why != Declined::Broadcast {
                    declined.push((id, why));
                }
            }
        }
    }
    for (k, &r) in b.roots.iter().enumerate() {
        let width = st.var(r).ty.size_bytes();
        if Some(r) == skip {
            // (a caller-provided output: no operand is reused for it)
            continue;
        }
        let out_param = b
            .param_vars
            .iter()
            .zip(params)
            .position(|(&v, p)| v == r && p.kind == ParamKind::Output)
            .expect("a root's output parameter");
        if let Some(i) = candidates
            .iter()
            .position(|c| c.2 == width && b.kernel.may_alias(c.3, out_param))
        {
            let (id, buf, _, _) = candidates.remove(i);
            out[k] = Some((id, buf));
        }
    }
    for (id, _, _, _) in candidates {
        let width_fits = b
            .roots
            .iter()
            .any(|&r| st.var(r).ty.size_bytes() == st.var(id).ty.size_bytes());
        let why = if width_fits {
            Declined::Taken
        } else {
            Declined::Width
        };
        declined.push((id, why));
    }
    Decisions {
        reuse: out,
        declined,
    }
}

/// Whether any input of `b` could take an output at all (cheap: decides whether the reference
/// simulation of [`released_inputs`] is worth running).
pub(crate) fn may_reuse(st: &State, b: &Built) -> bool {
    // (under `KILN_LOG=inplace`, every kernel's operands get their reason logged)
    if tracing::enabled!(target: "inplace", tracing::Level::DEBUG) {
        return !b.kernel.is_empty();
    }
    b.interior.is_none()
        && !b.kernel.is_empty()
        && b.kernel.params.iter().enumerate().any(|(p, param)| {
            let v = st.var(b.param_vars[p]);
            param.kind == ParamKind::Input && v.ext == 0 && !v.dirty && v.size == b.size
        })
}

/// The buffer of the assignment target `t` for root `root` of `b`, if writing there is safe
/// (see [`eval_into`]); `left`: reference counts after this evaluation.
pub(crate) fn assign_target(
    st: &State,
    built: &[&Built],
    bi: usize,
    root: u32,
    t: u32,
    left: &HashMap<u32, u32>,
) -> Option<Arc<Buffer>> {
    let b = built[bi];
    let out_param = b
        .param_vars
        .iter()
        .zip(&b.kernel.params)
        .position(|(&v, p)| v == root && p.kind == ParamKind::Output)?;
    // where the kernel reads the target itself, every read comes before the store
    let ordered = b
        .param_vars
        .iter()
        .zip(&b.kernel.params)
        .enumerate()
        .filter(|(_, (&v, p))| v == t && p.kind != ParamKind::Output)
        .all(|(q, _)| b.kernel.may_alias(q, out_param));
    let tv = st.var(t);
    let buf = tv.data.clone()?;
    let held_by = |b: &Built, lane_only: bool| {
        b.param_vars
            .iter()
            .zip(&b.kernel.params)
            .zip(&b.bindings)
            .filter(|((&v, p), bind)| {
                v == t
                    && p.kind != ParamKind::Output
                    && (!lane_only
                        || (p.kind == ParamKind::Input && matches!(bind, Binding::Input(_))))
            })
            .count()
    };
    let all: usize = built.iter().map(|b| held_by(b, false)).sum();
    let lane_only = held_by(b, true);
    let after = left.get(&t).copied().unwrap_or(tv.ext + tv.int);
    (b.interior.is_none()
        && ordered
        && all == lane_only
        && after == 1
        && crate::registry::holders(&buf) == 2 + all)
        .then_some(buf)
}
