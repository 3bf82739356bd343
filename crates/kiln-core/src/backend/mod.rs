//! Backends: turn kernel IR into something that runs one block of lanes.
//!
//! `interp` is the reference interpreter (the executable specification), `cranelift` the embedded
//! JIT. Both implement `Backend::compile`, returning a `CompiledKernel` that the launcher calls per
//! block with raw buffer pointers. This module also owns the launch ABI (`LaunchArgs`) and the
//! lane-level helpers that every backend shares for scatters, so that their semantics (bounds
//! checks, atomic reductions, status counting) exist exactly once.

pub mod blocked;
pub mod cranelift;
pub mod interp;
pub mod llvm;
pub mod select;

use crate::error::{Error, Result};
use crate::kernel::{Kernel, Reg};
use crate::op::Op;
use crate::op::ReduceOp;
use crate::ty::VarType;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;

/// Which backend compiles kernels.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BackendKind {
    /// The reference interpreter.
    Interp,
    /// Cranelift JIT (embedded; the default when no libLLVM ≥ 15 is found).
    Cranelift,
    /// LLVM, loaded at run time (the default when a libLLVM ≥ 15 is found).
    Llvm,
}

impl BackendKind {
    pub fn name(self) -> &'static str {
        match self {
            BackendKind::Interp => "interp",
            BackendKind::Cranelift => "cranelift",
            BackendKind::Llvm => "llvm",
        }
    }
}

impl std::fmt::Display for BackendKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Index of each counter in a launch's status buffer.
pub const STATUS_OOB_READS: usize = 0;
pub const STATUS_OOB_WRITES: usize = 1;
/// Lanes still active when a loop reached its iteration limit.
pub const STATUS_LOOP_TRUNCATED: usize = 2;
/// Number of counters in a launch's status buffer.
pub const STATUS_LEN: usize = 3;

/// What a compiled kernel receives for one block (C layout: compiled code reads it directly).
///
/// Every buffer pointer is valid for `lens[i]` elements plus [`crate::alloc::SLACK_BYTES`] bytes of
/// slack, which vector code may read and write past the end of a partial last vector.
#[repr(C)]
pub struct LaunchArgs {
    /// One pointer per kernel parameter.
    pub ptrs: *const *mut u8,
    /// Element count of each parameter's buffer.
    pub lens: *const u64,
    /// `STATUS_LEN` atomic counters (out-of-range reads, writes, truncated loop lanes).
    pub status: *const AtomicU64,
}

// SAFETY: LaunchArgs only carries pointers into buffers that the launcher keeps alive for the whole
// launch; blocks write disjoint lanes or go through atomics (scatters, status).
unsafe impl Send for LaunchArgs {}
// SAFETY: as above; the struct itself is read-only during a launch.
unsafe impl Sync for LaunchArgs {}

/// A kernel compiled by some backend.
pub trait CompiledKernel: Send + Sync {
    /// Runs lanes `[start, end)`.
    ///
    /// # Safety
    /// `args` must describe live buffers matching the kernel's parameters (types and lengths), with
    /// outputs of at least `end` elements, as the launcher guarantees.
    unsafe fn run(&self, args: &LaunchArgs, start: u64, end: u64);
    /// Whether this kernel was loaded from the disk cache rather than compiled.
    fn loaded_from_disk(&self) -> bool {
        false
    }
    /// Lanes per launch task for a launch of `n` lanes on `threads` threads, where this kernel
    /// knows better than the launcher's rule (a lane-blocked kernel gives every lane the same
    /// work: one task per thread keeps each thread's row segments long); `None` takes the
    /// launcher's.
    fn launch_block(&self, _n: usize, _threads: usize) -> Option<usize> {
        None
    }
    /// Whether a run of `[start, end)` writes no output lane outside it (a masked last vector):
    /// the launcher then runs a range's ragged end in place instead of through scratch.
    fn writes_exactly(&self) -> bool {
        false
    }
    /// The same kernel compiled for runs of a few lanes (a stencil's border gaps between rows),
    /// with narrower vectors than a backend's widest, once [`Backend::prepare_short_runs`] made
    /// it; `None`: this kernel serves short runs too. It computes what `run` computes.
    fn short_runs(&self) -> Option<&dyn CompiledKernel> {
        None
    }
    /// The same kernel moved onto strided lanes ([`Kernel::at_strided_lanes`]: three more
    /// parameters, `stride`, `base` and `width`, and lane `c` computes lane
    /// `(c / width) · stride + base + c % width`), once [`Backend::prepare_short_runs`] made it:
    /// a stencil's border gaps, one per row, in one launch instead of one call per gap.
    fn strided_runs(&self) -> Option<&dyn CompiledKernel> {
        None
    }
    /// Whether [`Backend::prepare_short_runs`] has run for this kernel (or there is nothing to
    /// prepare): the scheduler prepares a split group's general kernel at its first split launch,
    /// which need not be its first launch (a small grid runs it unsplit).
    fn variants_prepared(&self) -> bool {
        true
    }
}

/// A code generator.
pub trait Backend: Send + Sync {
    fn kind(&self) -> BackendKind;
    fn compile(&self, kernel: &Kernel) -> Result<Arc<dyn CompiledKernel>>;
    /// Give the compiled `kernel` (from [`Backend::compile`]) its variants for short runs
    /// ([`CompiledKernel::short_runs`]) and strided lanes ([`CompiledKernel::strided_runs`])
    /// where that pays; by default nothing. Best effort: a variant that fails to compile is left
    /// out.
    fn prepare_short_runs(&self, _kernel: &Kernel) {}
}

/// Create the backend of a given kind.
pub fn create(kind: BackendKind) -> Result<Arc<dyn Backend>> {
    Ok(match kind {
        BackendKind::Interp => Arc::new(interp::Interp),
        BackendKind::Cranelift => Arc::new(cranelift::CraneliftBackend::new()?),
        BackendKind::Llvm => llvm::shared().map_err(|reason| Error::BackendUnavailable {
            name: "llvm".into(),
            reason: format!("{reason}; or unset KILN_BACKEND to let kiln pick Cranelift"),
        })?,
    })
}

/// The largest cache of CPU 0 that Linux describes (`/sys/devices/system/cpu/cpu0/cache`), bytes
/// (0 where it describes none). Read once.
pub(crate) fn last_level_cache() -> u64 {
    static BYTES: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    *BYTES.get_or_init(|| read_last_level_cache().unwrap_or(0))
}

fn read_last_level_cache() -> Option<u64> {
    let dir = std::fs::read_dir("/sys/devices/system/cpu/cpu0/cache").ok()?;
    dir.filter_map(|e| {
        let size = std::fs::read_to_string(e.ok()?.path().join("size")).ok()?;
        let size = size.trim();
        let (digits, scale) = match size.strip_suffix('K') {
            Some(d) => (d, 1 << 10),
            None => match size.strip_suffix('M') {
                Some(d) => (d, 1 << 20),
                None => (size, 1),
            },
        };
        digits.parse::<u64>().ok().map(|d| d * scale)
    })
    .max()
}

/// Read element `i` of a buffer of type `ty` as bits (masks read as 0/1).
///
/// # Safety
/// `ptr` must hold more than `i` elements of `ty`.
pub unsafe fn read_bits(ptr: *const u8, ty: VarType, i: usize) -> u64 {
    // SAFETY: caller guarantees the element exists; unaligned reads keep this valid for any buffer.
    unsafe {
        match ty.size_bytes() {
            1 => (*ptr.wrapping_add(i) & 1) as u64,
            4 => (ptr.wrapping_add(i * 4) as *const u32).read_unaligned() as u64,
            _ => (ptr.wrapping_add(i * 8) as *const u64).read_unaligned(),
        }
    }
}

/// Write element `i` of a buffer of type `ty` from bits. (Offsets use wrapping arithmetic because a
/// fused reduction hands kernels a base pointer shifted so that lane `start` lands at the start of a
/// scratch block; every address actually accessed is inside a live allocation.)
///
/// # Safety
/// `ptr` must hold more than `i` elements of `ty`, and no other thread may access that element.
pub unsafe fn write_bits(ptr: *mut u8, ty: VarType, i: usize, v: u64) {
    // SAFETY: caller guarantees the element exists and that this thread owns it.
    unsafe {
        match ty.size_bytes() {
            1 => *ptr.wrapping_add(i) = (v & 1) as u8,
            4 => (ptr.wrapping_add(i * 4) as *mut u32).write_unaligned(v as u32),
            _ => (ptr.wrapping_add(i * 8) as *mut u64).write_unaligned(v),
        }
    }
}

/// One lane of a scatter: `target[index] (op)= value`, with bounds check and status counting.
///
/// Shared by every backend (compiled code calls it through [`scatter_lane_extern`]). Plain stores and
/// reductions go through atomics so that blocks running on different threads never race, and every
/// duplicate index counts for reductions.
///
/// # Safety
/// `target` must point at `len` elements of type `ty`; `status` at `STATUS_LEN` counters.
pub unsafe fn scatter_lane(
    op: ReduceOp,
    ty: VarType,
    target: *mut u8,
    len: u64,
    index: i64,
    value: u64,
    status: *const AtomicU64,
) {
    if index < 0 || index as u64 >= len {
        // SAFETY: status points at STATUS_LEN counters (caller contract).
        unsafe { (*status.add(STATUS_OOB_WRITES)).fetch_add(1, Ordering::Relaxed) };
        return;
    }
    let i = index as usize;
    if is_private(target) {
        // a block's own copy of a small target (see `privatise`): no other thread sees it
        // SAFETY: i < len; the copy belongs to the block this thread is running.
        unsafe {
            let old = read_bits(target, ty, i);
            write_bits(target, ty, i, reduce_fast(op, ty, old, value));
        }
        return;
    }
    // One atomic read-modify-write loop per element width; the cell type differs, the logic not.
    macro_rules! rmw {
        ($atomic:ty, $raw:ty) => {{
            // SAFETY: i < len and target holds len elements of this width; buffers are 64-byte
            // aligned, so the cell is aligned, and the atomic type has the raw type's layout.
            let cell = unsafe { &*(target.add(i * std::mem::size_of::<$raw>()) as *const $atomic) };
            update(
                cell,
                op,
                ty,
                value,
                |c| c.load(Ordering::Relaxed) as u64,
                |c, old, new| {
                    c.compare_exchange_weak(
                        old as $raw,
                        new as $raw,
                        Ordering::Relaxed,
                        Ordering::Relaxed,
                    )
                    .is_ok()
                },
            )
        }};
    }
    match ty.size_bytes() {
        1 => rmw!(AtomicU8, u8),
        4 => rmw!(AtomicU32, u32),
        _ => rmw!(AtomicU64, u64),
    }
}

thread_local! {
    /// The byte range of the private target copies of the block this thread runs (see
    /// `privatise`); empty outside a privatised launch.
    static PRIVATE: std::cell::Cell<(usize, usize)> = const { std::cell::Cell::new((0, 0)) };
}

/// `eval_reduce` with the sums (histograms, k-means) spelled out: the same bits, without the
/// general evaluator's dispatch on every lane.
#[inline]
fn reduce_fast(op: ReduceOp, ty: VarType, old: u64, value: u64) -> u64 {
    match (op, ty) {
        (ReduceOp::Add, VarType::F32) => {
            (f32::from_bits(old as u32) + f32::from_bits(value as u32)).to_bits() as u64
        }
        (ReduceOp::Add, VarType::F64) => (f64::from_bits(old) + f64::from_bits(value)).to_bits(),
        (ReduceOp::Add, VarType::I32 | VarType::U32) => {
            (old as u32).wrapping_add(value as u32) as u64
        }
        (ReduceOp::Add, VarType::I64 | VarType::U64) => old.wrapping_add(value),
        _ => crate::op::eval_reduce(op, ty, old, value),
    }
}

/// Mark `[lo, hi)` as the running block's private copies (`lo == hi`: none).
pub(crate) fn set_private_range(lo: usize, hi: usize) {
    PRIVATE.with(|p| p.set((lo, hi)));
}

fn is_private(target: *mut u8) -> bool {
    let a = target as usize;
    PRIVATE.with(|p| {
        let (lo, hi) = p.get();
        a >= lo && a < hi
    })
}

fn update<C>(
    cell: &C,
    op: ReduceOp,
    ty: VarType,
    value: u64,
    load: impl Fn(&C) -> u64,
    cas: impl Fn(&C, u64, u64) -> bool,
) {
    loop {
        let old = load(cell);
        let new = crate::op::eval_reduce(op, ty, old, value);
        if op == ReduceOp::None || new == old {
            if op == ReduceOp::None && new != old && !cas(cell, old, new) {
                continue;
            }
            return;
        }
        if cas(cell, old, new) {
            return;
        }
    }
}

/// C-ABI entry for compiled code: `op_ty` packs the reduce op (high byte) and the type (low byte).
///
/// # Safety
/// As [`scatter_lane`].
pub unsafe extern "C" fn scatter_lane_extern(
    op_ty: u32,
    target: *mut u8,
    len: u64,
    index: i64,
    value: u64,
    status: *const AtomicU64,
) {
    let ty = VarType::ALL[(op_ty & 0xff) as usize];
    let op = decode_reduce((op_ty >> 8) as u8);
    // SAFETY: forwarded caller contract.
    unsafe { scatter_lane(op, ty, target, len, index, value, status) }
}

/// Stable small-integer encoding of `ReduceOp` for the C ABI.
pub fn encode_reduce(op: ReduceOp) -> u8 {
    match op {
        ReduceOp::None => 0,
        ReduceOp::Add => 1,
        ReduceOp::Mul => 2,
        ReduceOp::Min => 3,
        ReduceOp::Max => 4,
        ReduceOp::And => 5,
        ReduceOp::Or => 6,
    }
}
fn decode_reduce(b: u8) -> ReduceOp {
    match b {
        1 => ReduceOp::Add,
        2 => ReduceOp::Mul,
        3 => ReduceOp::Min,
        4 => ReduceOp::Max,
        5 => ReduceOp::And,
        6 => ReduceOp::Or,
        _ => ReduceOp::None,
    }
}

/// Which registers hold the same value in every lane, counting loop state: a phi whose initial
/// and next values are uniform, in a loop whose condition is uniform (so that every lane runs the
/// same iterations), and pure values of uniform operands. `entry` marks the values the entry block
/// computes (uniform everywhere). Found by shrinking from "every candidate phi is uniform".
pub(crate) fn uniform_in_loops(k: &Kernel, entry: &[bool]) -> (Vec<bool>, HashMap<usize, usize>) {
    let mut cond_of = HashMap::new();
    let mut loop_of_phi: HashMap<usize, usize> = HashMap::new();
    let mut next_of: HashMap<usize, Reg> = HashMap::new();
    let mut open: Vec<usize> = Vec::new();
    for (i, inst) in k.insts.iter().enumerate() {
        match inst.op {
            Op::LoopBegin | Op::Switch => open.push(i),
            Op::LoopEnd | Op::SwitchEnd => {
                open.pop();
            }
            Op::Phi => {
                loop_of_phi.insert(i, *open.last().expect("verified"));
            }
            Op::LoopCond => {
                cond_of.insert(*open.last().expect("verified"), i);
            }
            Op::LoopNext => {
                next_of.insert(inst.args[0] as usize, inst.args[1]);
            }
            _ => {}
        }
    }
    let mut phi_ok: HashMap<usize, bool> = loop_of_phi.keys().map(|&p| (p, true)).collect();
    loop {
        let mut u = entry.to_vec();
        for (i, inst) in k.insts.iter().enumerate() {
            if u[i] {
                continue;
            }
            u[i] = match inst.op {
                Op::Phi => phi_ok[&i] && u[inst.args[0] as usize],
                op if op.is_region() => false,
                op => {
                    op.is_pure()
                        && op != Op::Counter
                        && inst.has_value()
                        && inst.operands().iter().all(|&a| u[a as usize])
                }
            };
        }
        let mut changed = false;
        for (&p, ok) in phi_ok.iter_mut() {
            let lp = loop_of_phi[&p];
            let cond = k.insts[cond_of[&lp]].args[0] as usize;
            let good = u[p] && next_of.get(&p).is_some_and(|&x| u[x as usize]) && u[cond];
            if *ok && !good {
                *ok = false;
                changed = true;
            }
        }
        if !changed {
            return (u, cond_of);
        }
    }
}

/// Which instructions are `counter + uniform`: an index whose lanes are consecutive (a row of a
/// stacked array, `t * width + lane`), so that a gather or scatter through it touches one
/// contiguous run, which the backends turn into a vector load or store when the run is in bounds
/// (checked at run time, which also catches wrapping). The counter must be of the index's own
/// type, so that lanes differ by exactly one.
pub(crate) fn contiguous_indices(k: &Kernel) -> Vec<bool> {
    let entry: Vec<bool> = k
        .insts
        .iter()
        .map(|i| {
            i.op == Op::Literal
                || (i.op == Op::Load
                    && k.params[i.imm as usize].kind == crate::kernel::ParamKind::Broadcast)
        })
        .collect();
    let (uniform, _) = crate::backend::uniform_in_loops(k, &entry);
    k.insts
        .iter()
        .map(|i| {
            if i.op != Op::Add || !i.ty.is_int() {
                return false;
            }
            let (a, b) = (i.args[0] as usize, i.args[1] as usize);
            let counter = |x: usize| k.insts[x].op == Op::Counter && k.insts[x].ty == i.ty;
            (counter(a) && uniform[b]) || (counter(b) && uniform[a])
        })
        .collect()
}
