//! Device operations: the only code that touches buffer contents.
//!
//! Every effect on memory is one of the ops listed in [`DeviceOpKind`]: kernel launches, reductions,
//! block reductions, prefix sums, compaction, copies, uploads and reads. Each op states how its
//! output size follows from its input sizes ([`SizeRule`]) so that a recorder (function freezing) can
//! replay the stream with other sizes without guessing. Observers registered with [`observe`] see
//! every op as it executes. The set is open: later features add kinds.

use crate::alloc::SLACK_BYTES;
use crate::backend::{CompiledKernel, LaunchArgs, STATUS_LEN, STATUS_OOB_READS, STATUS_OOB_WRITES};
use crate::error::Result;
use crate::kernel::KernelHash;
use crate::launch;
use crate::op::{eval_reduce, reduce_identity, ReduceOp};
use crate::registry::Buffer;
use crate::stats;
use crate::ty::VarType;
use parking_lot::RwLock;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Instant;

/// How an op's output size follows from its inputs' sizes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SizeRule {
    /// Same size as input `i`.
    SameAs(usize),
    /// Always one element.
    One,
    /// `ceil(size of input i / block)`.
    Blocks { input: usize, block: usize },
    /// Known only after the op ran (compress): the replay must read it back.
    DataDependent,
    /// No output buffer.
    None,
}

/// What kind of device op ran.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeviceOpKind {
    Launch {
        hash: KernelHash,
    },
    /// A launch whose single output is reduced block by block as it is produced (never stored).
    LaunchReduce {
        hash: KernelHash,
        op: ReduceOp,
    },
    Reduce(ReduceOp),
    BlockReduce {
        op: ReduceOp,
        block: usize,
    },
    PrefixSum {
        exclusive: bool,
    },
    Compress,
    Memcpy,
    Upload,
    Read,
}

impl DeviceOpKind {
    /// The size rule of this kind's output.
    pub fn size_rule(&self) -> SizeRule {
        match self {
            DeviceOpKind::Launch { .. } => SizeRule::SameAs(0),
            DeviceOpKind::Reduce(_) | DeviceOpKind::LaunchReduce { .. } => SizeRule::One,
            DeviceOpKind::BlockReduce { block, .. } => SizeRule::Blocks {
                input: 0,
                block: *block,
            },
            DeviceOpKind::PrefixSum { .. } | DeviceOpKind::Memcpy | DeviceOpKind::Upload => {
                SizeRule::SameAs(0)
            }
            DeviceOpKind::Compress => SizeRule::DataDependent,
            DeviceOpKind::Read => SizeRule::None,
        }
    }
}

/// One executed device op, as observers see it: kind, launch/input size, and buffer addresses
/// (inputs then outputs) so that a recorder can map them to its slots.
#[derive(Clone, Debug)]
pub struct DeviceOpRecord {
    pub kind: DeviceOpKind,
    pub size: usize,
    pub buffers: Vec<usize>,
}

type Observer = Box<dyn Fn(&DeviceOpRecord) + Send + Sync>;
static OBSERVERS: RwLock<Vec<(u64, Observer)>> = RwLock::new(Vec::new());
static NEXT_OBSERVER: AtomicU64 = AtomicU64::new(1);

/// Register an observer of device ops; returns a token for [`unobserve`].
pub fn observe(f: impl Fn(&DeviceOpRecord) + Send + Sync + 'static) -> u64 {
    let id = NEXT_OBSERVER.fetch_add(1, Relaxed);
    OBSERVERS.write().push((id, Box::new(f)));
    id
}
/// Remove an observer.
pub fn unobserve(token: u64) {
    OBSERVERS.write().retain(|(i, _)| *i != token);
}

fn notify(kind: DeviceOpKind, size: usize, buffers: &[&Buffer]) {
    stats::DEVICE_OPS.fetch_add(1, Relaxed);
    let obs = OBSERVERS.read();
    if !obs.is_empty() {
        let rec = DeviceOpRecord {
            kind,
            size,
            buffers: buffers.iter().map(|b| b.ptr() as usize).collect(),
        };
        for (_, f) in obs.iter() {
            f(&rec);
        }
    }
}

/// Launch a kernel over `size` lanes with `buffers` (one per parameter, in order).
pub fn launch_kernel(
    kernel: &dyn CompiledKernel,
    hash: KernelHash,
    size: usize,
    buffers: &[&Buffer],
    block: usize,
) -> [u64; STATUS_LEN] {
    let ptrs: Vec<*mut u8> = buffers.iter().map(|b| b.ptr()).collect();
    let lens: Vec<u64> = buffers.iter().map(|b| b.len as u64).collect();
    let status: [AtomicU64; STATUS_LEN] = Default::default();
    let args = LaunchArgs {
        ptrs: ptrs.as_ptr(),
        lens: lens.as_ptr(),
        status: status.as_ptr(),
    };
    let t = Instant::now();
    // SAFETY: the scheduler built `buffers` to match the kernel's parameters: inputs hold `size` (or 1,
    // broadcast) elements, outputs were allocated for `size`, indexed buffers carry their length; all
    // stay alive (borrowed) for the duration of the launch.
    unsafe { launch::launch(kernel, &args, size, block) };
    stats::RUN_NS.fetch_add(t.elapsed().as_nanos() as u64, Relaxed);
    stats::LAUNCHES.fetch_add(1, Relaxed);
    let st = [status[0].load(Relaxed), status[1].load(Relaxed)];
    stats::OOB_READS.fetch_add(st[STATUS_OOB_READS], Relaxed);
    stats::OOB_WRITES.fetch_add(st[STATUS_OOB_WRITES], Relaxed);
    notify(DeviceOpKind::Launch { hash }, size, buffers);
    st
}

/// Run a kernel and reduce its single output as it is produced: each block writes into a scratch
/// buffer of block size (cache-resident) that is reduced right away, so the full-size array never
/// exists. `params` has one entry per kernel parameter, `None` for the output at `out_param`.
/// Returns the reduced bits (for `Bool` + `Add`, the number of true lanes) and the launch status.
#[allow(clippy::too_many_arguments)]
pub fn launch_reduce(
    kernel: &dyn CompiledKernel,
    hash: KernelHash,
    size: usize,
    params: &[Option<&Buffer>],
    out_param: usize,
    op: ReduceOp,
    ty: VarType,
    block: usize,
) -> Result<(u64, [u64; STATUS_LEN])> {
    let block = block.next_multiple_of(launch::BLOCK_ALIGN);
    let lens: Vec<u64> = params
        .iter()
        .map(|b| b.map_or(0, |b| b.len as u64))
        .collect();
    let status: [AtomicU64; STATUS_LEN] = Default::default();
    let t = Instant::now();
    let parts = launch::map_blocks(size, block, |s, e| -> Result<u64> {
        let scratch = Buffer::new(ty, block, &|| {
            format!("a reduction scratch block of {block} × {ty}")
        })?;
        let ptrs: Vec<*mut u8> = params
            .iter()
            .enumerate()
            .map(|(i, b)| match b {
                Some(b) => b.ptr(),
                // lane `s` of the output lands at the scratch block's first element
                None if i == out_param => scratch.ptr().wrapping_sub(s * ty.size_bytes()),
                None => std::ptr::null_mut(),
            })
            .collect();
        let args = LaunchArgs {
            ptrs: ptrs.as_ptr(),
            lens: lens.as_ptr(),
            status: status.as_ptr(),
        };
        // SAFETY: inputs are live buffers matching the kernel's parameters for all `size` lanes; the
        // output pointer is shifted so that lanes [s, e) write scratch[0, e − s) (plus the slack a
        // partial last vector may touch), which the scratch block holds.
        unsafe { kernel.run(&args, s as u64, e as u64) };
        Ok(reduce_range(op, &scratch, 0, e - s))
    });
    let parts = parts.into_iter().collect::<Result<Vec<u64>>>()?;
    stats::RUN_NS.fetch_add(t.elapsed().as_nanos() as u64, Relaxed);
    stats::LAUNCHES.fetch_add(1, Relaxed);
    let st = [status[0].load(Relaxed), status[1].load(Relaxed)];
    stats::OOB_READS.fetch_add(st[STATUS_OOB_READS], Relaxed);
    stats::OOB_WRITES.fetch_add(st[STATUS_OOB_WRITES], Relaxed);
    let inputs: Vec<&Buffer> = params.iter().flatten().copied().collect();
    notify(DeviceOpKind::LaunchReduce { hash, op }, size, &inputs);
    Ok((combine(op, ty, &parts), st))
}

/// A size-1 buffer holding `bits`.
pub fn scalar_buffer(ty: VarType, bits: u64) -> Result<Buffer> {
    let out = Buffer::new(ty, 1, &|| "a reduction result".into())?;
    set_elem(&out, 0, bits);
    Ok(out)
}

/// A fresh buffer holding `bytes` (little-endian elements of `ty`).
pub fn upload(ty: VarType, bytes: &[u8]) -> Result<Buffer> {
    let len = bytes.len() / ty.size_bytes();
    let buf = Buffer::new(ty, len, &|| format!("an array of {len} × {ty}"))?;
    // SAFETY: buf has room for len elements = bytes.len() bytes; regions do not overlap.
    unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), buf.ptr(), bytes.len()) };
    clear_slack(&buf);
    notify(DeviceOpKind::Upload, len, &[&buf]);
    Ok(buf)
}

fn clear_slack(buf: &Buffer) {
    // SAFETY: every buffer has SLACK_BYTES writable bytes after its elements.
    unsafe { std::ptr::write_bytes(buf.ptr().add(buf.bytes()), 0, SLACK_BYTES) };
}

/// A copy of `src` in a new buffer.
pub fn copy_buffer(src: &Buffer) -> Result<Buffer> {
    let buf = Buffer::new(src.ty, src.len, &|| {
        format!("a copy of an array of {} × {}", src.len, src.ty)
    })?;
    // SAFETY: both hold src.bytes() bytes; distinct allocations.
    unsafe { std::ptr::copy_nonoverlapping(src.ptr(), buf.ptr(), src.bytes()) };
    notify(DeviceOpKind::Memcpy, src.len, &[src, &buf]);
    Ok(buf)
}

/// The buffer's contents as bytes.
pub fn read(buf: &Buffer) -> Vec<u8> {
    notify(DeviceOpKind::Read, buf.len, &[buf]);
    buf.to_bytes()
}

/// Element `i` of a buffer as bits. Callers pass `i < buf.len`.
fn elem(buf: &Buffer, i: usize) -> u64 {
    debug_assert!(i < buf.len);
    // SAFETY: i < buf.len (caller contract), so the element lies inside the buffer.
    unsafe { crate::backend::read_bits(buf.ptr(), buf.ty, i) }
}

/// Write element `i`. Callers pass `i < buf.len` and own element `i` (disjoint ranges per thread).
fn set_elem(buf: &Buffer, i: usize, v: u64) {
    debug_assert!(i < buf.len);
    // SAFETY: i < buf.len and no other thread writes element i (caller contract).
    unsafe { crate::backend::write_bits(buf.ptr(), buf.ty, i, v) }
}

/// Typed fast paths for the hot reductions (sum of f32/f64, count of masks); others use bit-level
/// `eval_reduce`, which defines the semantics.
fn reduce_range(op: ReduceOp, buf: &Buffer, s: usize, e: usize) -> u64 {
    let ty = buf.ty;
    // SAFETY (all slices below): the buffer holds buf.len >= e initialised elements of the type.
    match (op, ty) {
        (ReduceOp::Add, VarType::F32) => {
            let xs = unsafe { std::slice::from_raw_parts(buf.ptr() as *const f32, buf.len) };
            let mut acc = [0f32; 16];
            let chunks = xs[s..e].chunks_exact(16);
            let rest = chunks.remainder();
            for c in chunks {
                for k in 0..16 {
                    acc[k] += c[k];
                }
            }
            let mut t: f64 = acc.iter().map(|&v| v as f64).sum();
            t += rest.iter().map(|&v| v as f64).sum::<f64>();
            (t as f32).to_bits() as u64
        }
        (ReduceOp::Add, VarType::F64) => {
            let xs = unsafe { std::slice::from_raw_parts(buf.ptr() as *const f64, buf.len) };
            let mut acc = [0f64; 8];
            let chunks = xs[s..e].chunks_exact(8);
            let rest = chunks.remainder();
            for c in chunks {
                for k in 0..8 {
                    acc[k] += c[k];
                }
            }
            (acc.iter().sum::<f64>() + rest.iter().sum::<f64>()).to_bits()
        }
        (ReduceOp::Add, VarType::Bool) => {
            let xs = unsafe { std::slice::from_raw_parts(buf.ptr(), buf.len) };
            xs[s..e].iter().map(|&b| (b & 1) as u64).sum()
        }
        _ => {
            let mut acc = reduce_identity(op, ty);
            for i in s..e {
                acc = eval_reduce(op, ty, acc, elem(buf, i));
            }
            acc
        }
    }
}

/// Combine per-block partial results (f32 partials were carried as f32 bits).
fn combine(op: ReduceOp, ty: VarType, parts: &[u64]) -> u64 {
    match (op, ty) {
        (ReduceOp::Add, VarType::F32) => (parts
            .iter()
            .map(|&b| f32::from_bits(b as u32) as f64)
            .sum::<f64>() as f32)
            .to_bits() as u64,
        (ReduceOp::Add, VarType::Bool) => parts.iter().sum(),
        _ => parts
            .iter()
            .fold(reduce_identity(op, ty), |a, &b| eval_reduce(op, ty, a, b)),
    }
}

const RED_BLOCK: usize = 1 << 16;

/// Reduce a whole buffer to one value (bits). For `Bool` with `Add`, the count of true lanes.
pub fn reduce_bits(op: ReduceOp, buf: &Buffer) -> u64 {
    let parts = launch::map_blocks(buf.len, RED_BLOCK, |s, e| reduce_range(op, buf, s, e));
    notify(DeviceOpKind::Reduce(op), buf.len, &[buf]);
    combine(op, buf.ty, &parts)
}

/// Reduce a buffer to a size-1 buffer (no host read of the data).
pub fn reduce(op: ReduceOp, buf: &Buffer) -> Result<Buffer> {
    scalar_buffer(buf.ty, reduce_bits(op, buf))
}

/// Reduce each block of `block` consecutive elements (a partial last block too).
pub fn block_reduce(op: ReduceOp, buf: &Buffer, block: usize) -> Result<Buffer> {
    let n_out = buf.len.div_ceil(block);
    let out = Buffer::new(buf.ty, n_out, &|| {
        format!("block reduction output of {n_out} × {}", buf.ty)
    })?;
    let per_task = (RED_BLOCK / block).max(1);
    launch::for_blocks(n_out, per_task, |s, e| {
        for o in s..e {
            let v = reduce_range(op, buf, o * block, ((o + 1) * block).min(buf.len));
            set_elem(&out, o, v);
        }
    });
    notify(
        DeviceOpKind::BlockReduce { op, block },
        buf.len,
        &[buf, &out],
    );
    Ok(out)
}

/// Inclusive or exclusive prefix sum (wrapping for integers, IEEE for floats; bools count as 0/1 into u32).
pub fn prefix_sum(buf: &Buffer, exclusive: bool) -> Result<Buffer> {
    let ty = buf.ty;
    let out = Buffer::new(ty, buf.len, &|| format!("prefix sum of {} × {ty}", buf.len))?;
    let add = |a: u64, b: u64| crate::op::eval_binary(crate::op::Op::Add, ty, a, b);
    let totals = launch::map_blocks(buf.len, RED_BLOCK, |s, e| {
        let mut acc = 0u64;
        for i in s..e {
            acc = add(acc, elem(buf, i));
        }
        acc
    });
    let mut offsets = Vec::with_capacity(totals.len());
    let mut run = 0u64;
    for t in &totals {
        offsets.push(run);
        run = add(run, *t);
    }
    launch::map_blocks(buf.len, RED_BLOCK, |s, e| {
        let mut acc = offsets[s / RED_BLOCK];
        for i in s..e {
            let v = elem(buf, i);
            if exclusive {
                set_elem(&out, i, acc);
                acc = add(acc, v);
            } else {
                acc = add(acc, v);
                set_elem(&out, i, acc);
            }
        }
    });
    notify(DeviceOpKind::PrefixSum { exclusive }, buf.len, &[buf, &out]);
    Ok(out)
}

/// Indices (u32) of the true lanes of a mask, in order.
pub fn compress(buf: &Buffer) -> Result<Buffer> {
    // SAFETY: the mask buffer holds buf.len bytes.
    let xs = unsafe { std::slice::from_raw_parts(buf.ptr(), buf.len) };
    let counts = launch::map_blocks(buf.len, RED_BLOCK, |s, e| {
        xs[s..e].iter().filter(|&&b| b & 1 != 0).count()
    });
    let total: usize = counts.iter().sum();
    let out = Buffer::new(VarType::U32, total, &|| {
        format!("compress output of {total} indices")
    })?;
    let mut offsets = Vec::with_capacity(counts.len());
    let mut run = 0;
    for c in &counts {
        offsets.push(run);
        run += c;
    }
    launch::map_blocks(buf.len, RED_BLOCK, |s, e| {
        let mut o = offsets[s / RED_BLOCK];
        for (i, &b) in xs[s..e].iter().enumerate() {
            if b & 1 != 0 {
                set_elem(&out, o, (s + i) as u64);
                o += 1;
            }
        }
    });
    notify(DeviceOpKind::Compress, buf.len, &[buf, &out]);
    Ok(out)
}
