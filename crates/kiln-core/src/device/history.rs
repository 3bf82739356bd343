//! Kernel history (Dr.Jit's `kernel_history`): with it on, every kernel and device reduction the
//! calling thread launches is kept as a [`KernelRecord`] (what ran, over how many lanes, with how
//! many inputs, outputs and IR operations, how long it took), until [`kernel_history`] takes them.
//!
//! Per thread, as everything a thread traces is its own: a thread's launches (frozen replays
//! included) land in its own history, and threads that never turn it on pay one thread-local
//! read per device op.

use super::{DeviceOpKind, DeviceOpRecord};
use crate::kernel::KernelHash;
use crate::kernel::{Param, ParamKind};
use parking_lot::Mutex;
use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::time::Instant;

/// What kind of work a record is (Dr.Jit's `KernelType`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum KernelKind {
    /// A compiled kernel (possibly with a reduction fused into it).
    Jit,
    /// A reduction, block reduction or prefix sum of an evaluated buffer.
    Reduce,
    /// Stream compaction or a matrix product.
    Other,
}

/// Whether a launch ran inside a frozen function's recording, its replay, or neither (Dr.Jit's
/// `KernelRecordingMode`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RecordingMode {
    None,
    Recorded,
    Replayed,
}

/// One launch kept by the kernel history.
#[derive(Clone, Debug)]
pub struct KernelRecord {
    pub kind: KernelKind,
    /// The device op's name (`"launch"`, `"block_reduce"`, …).
    pub what: &'static str,
    /// The compiled kernel's hash (0 for a device reduction, which runs no compiled kernel).
    pub hash: u128,
    /// Lanes launched (the input's length for a reduction).
    pub size: usize,
    pub inputs: usize,
    pub outputs: usize,
    /// IR operations of the compiled kernel (0 for a device reduction or when unknown).
    pub ops: usize,
    /// Wall-clock time of the launch, in microseconds.
    pub time_us: f64,
    pub mode: RecordingMode,
}

thread_local! {
    static ON: Cell<bool> = const { Cell::new(false) };
    static START: Cell<Option<Instant>> = const { Cell::new(None) };
    static REPLAYING: Cell<bool> = const { Cell::new(false) };
    static LOG: RefCell<Vec<KernelRecord>> = const { RefCell::new(Vec::new()) };
}

/// IR operations per kernel hash, noted when a kernel is looked up (a replay launches compiled
/// kernels without their IR).
static OPS: Mutex<Option<HashMap<u128, usize>>> = Mutex::new(None);

/// Turn this thread's kernel history on or off; returns whether it was on. Turning it off drops
/// what was kept.
///
/// ```
/// use kiln_core::device::history;
/// assert!(!history::set_kernel_history(true));
/// assert!(history::set_kernel_history(false));
/// ```
pub fn set_kernel_history(on: bool) -> bool {
    let was = ON.with(|c| c.replace(on));
    if !on {
        LOG.with(|l| l.borrow_mut().clear());
    }
    was
}

/// Whether this thread keeps a kernel history.
pub fn kernel_history_enabled() -> bool {
    ON.with(|c| c.get())
}

/// The launches kept since the last call (oldest first), leaving the history empty.
///
/// ```
/// use kiln_core::device::history::{kernel_history, set_kernel_history, KernelKind};
/// set_kernel_history(true);
/// let x = kiln_core::counter(kiln_core::VarType::U32, 1000).unwrap();
/// let y = kiln_core::op(kiln_core::Op::Mul, &[x, x]).unwrap();
/// kiln_core::eval(&[y]).unwrap();
/// let h = kernel_history();
/// assert_eq!(h.len(), 1);
/// assert_eq!((h[0].kind, h[0].size, h[0].outputs), (KernelKind::Jit, 1000, 1));
/// assert!(h[0].ops > 0 && h[0].hash != 0);
/// assert!(kernel_history().is_empty()); // taken
/// set_kernel_history(false);
/// # kiln_core::dec_ref(x); kiln_core::dec_ref(y);
/// ```
pub fn kernel_history() -> Vec<KernelRecord> {
    LOG.with(|l| std::mem::take(&mut *l.borrow_mut()))
}

/// Note a kernel's IR size under its hash when the kernel enters the cache (one entry per
/// kernel the cache holds, none on a hit), so that a history turned on later still counts a
/// replayed kernel's operations.
pub(crate) fn note_ops(hash: KernelHash, ops: usize) {
    OPS.lock()
        .get_or_insert_with(HashMap::new)
        .insert(hash.0, ops);
}

/// Marks this thread as replaying a recording until dropped.
pub(crate) struct Replaying(bool);

/// Launches from now until the guard drops are a replay's.
pub(crate) fn replaying() -> Replaying {
    Replaying(REPLAYING.with(|r| r.replace(true)))
}

impl Drop for Replaying {
    fn drop(&mut self) {
        REPLAYING.with(|r| r.set(self.0));
    }
}

/// Mark the start of a device op on this thread (its record's time runs from here).
pub(crate) fn start() {
    if ON.with(|c| c.get()) {
        START.with(|s| s.set(Some(Instant::now())));
    }
}

/// Keep `rec` if this thread's history is on and it is a kernel or reduction.
pub(crate) fn note(rec: &DeviceOpRecord) {
    if !ON.with(|c| c.get()) {
        return;
    }
    let Some((kind, hash, inputs, outputs)) = classify(&rec.kind, rec.buffers.len()) else {
        return;
    };
    let time_us = START
        .with(|s| s.take())
        .map_or(0.0, |t| t.elapsed().as_secs_f64() * 1e6);
    let ops = hash
        .and_then(|h| OPS.lock().as_ref().and_then(|m| m.get(&h.0).copied()))
        .unwrap_or(0);
    let r = KernelRecord {
        kind,
        what: rec.kind.name(),
        hash: hash.map_or(0, |h| h.0),
        size: rec.size,
        inputs,
        outputs,
        ops,
        time_us,
        mode: if REPLAYING.with(|r| r.get()) {
            RecordingMode::Replayed
        } else if crate::context::recording() {
            RecordingMode::Recorded
        } else {
            RecordingMode::None
        },
    };
    LOG.with(|l| l.borrow_mut().push(r));
}

/// (kind, kernel hash, inputs, outputs) of a device op; `None` for transfers and reads.
fn classify(
    kind: &DeviceOpKind,
    n_buffers: usize,
) -> Option<(KernelKind, Option<KernelHash>, usize, usize)> {
    let split = |params: &[Param]| {
        let outs = params
            .iter()
            .filter(|p| p.kind == ParamKind::Output)
            .count();
        (params.len() - outs, outs)
    };
    Some(match kind {
        DeviceOpKind::Launch { hash, params, .. } => {
            let (i, o) = split(params);
            (KernelKind::Jit, Some(*hash), i, o)
        }
        DeviceOpKind::LaunchSplit { general, .. } => {
            let (i, o) = split(general.2);
            (KernelKind::Jit, Some(general.0), i, o)
        }
        DeviceOpKind::LaunchReduce { hash, params, .. }
        | DeviceOpKind::LaunchBlockReduce { hash, params, .. } => {
            (KernelKind::Jit, Some(*hash), params.len() - 1, 1)
        }
        DeviceOpKind::LaunchReduceMany { hash, reds, .. } => (
            KernelKind::Jit,
            Some(*hash),
            n_buffers - reds.len(),
            reds.len(),
        ),
        DeviceOpKind::Reduce(_)
        | DeviceOpKind::BlockReduce { .. }
        | DeviceOpKind::PrefixSum { .. } => (KernelKind::Reduce, None, 1, 1),
        DeviceOpKind::ReduceMany(ops) => (KernelKind::Reduce, None, ops.len(), ops.len()),
        DeviceOpKind::Compress => (KernelKind::Other, None, 1, 1),
        DeviceOpKind::Matmul { .. } => (KernelKind::Other, None, 2, 1),
        DeviceOpKind::Memcpy | DeviceOpKind::Upload | DeviceOpKind::Read => return None,
    })
}
