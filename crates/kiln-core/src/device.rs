//! Device operations: the only code that touches buffer contents.
//!
//! Every effect on memory is one of the ops listed in [`DeviceOpKind`]: kernel launches, reductions,
//! block reductions, prefix sums, compaction, copies, uploads and reads. Each op states how its
//! output size follows from its input sizes ([`SizeRule`]) so that a recorder (function freezing) can
//! replay the stream with other sizes without guessing. Observers registered with [`observe`] see
//! every op as it executes. The set is open: later features add kinds.

use crate::alloc::SLACK_BYTES;
use crate::backend::{
    CompiledKernel, LaunchArgs, STATUS_LEN, STATUS_LOOP_TRUNCATED, STATUS_OOB_READS,
    STATUS_OOB_WRITES,
};
use crate::error::Result;
use crate::kernel::KernelHash;
use crate::kernel::Param;
use crate::launch;
use crate::op::{eval_reduce, reduce_identity, ReduceOp};
use crate::registry::Buffer;
use crate::size::ExprId;
use crate::stats;
use crate::ty::VarType;
use parking_lot::RwLock;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Instant;

/// How an op's output size follows from its inputs' sizes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SizeRule {
    /// The launch size (chosen by the scheduler; symbolic while recording).
    Launch,
    /// Same size as input `i`.
    SameAs(usize),
    /// Always one element.
    One,
    /// `ceil(size of input i / block)`.
    Blocks { input: usize, block: usize },
    /// Fixed by the op's own parameters (matmul: `m × n`).
    Given(usize),
    /// Known only after the op ran (compress): the replay must read it back.
    DataDependent,
    /// No output buffer.
    None,
}

/// What kind of device op ran, with everything needed to run it again (a frozen function's replay
/// does exactly that). Adding a kind means adding its record and replay arms in `freeze`: those
/// matches are exhaustive on purpose.
#[derive(Clone, Copy)]
pub enum DeviceOpKind<'a> {
    /// A kernel over `size` lanes; buffers are its parameters in order (outputs included).
    Launch {
        hash: KernelHash,
        kernel: &'a Arc<dyn CompiledKernel>,
        params: &'a [Param],
        /// Indexed parameters the kernel writes into (scatter targets).
        modified: &'a [u32],
        block: usize,
        /// Run in 2-d tiles of rows of this many lanes (0: linear blocks).
        tile_cols: usize,
        /// The launch size's expression while recording (0: constant).
        size_sym: ExprId,
        /// Reduce-scatter targets that blocks may accumulate privately (see `privatise`).
        private: crate::privatise::Private,
    },
    /// A stencil group (see `stencil`): `interior` over the plan's interior lanes, its inputs read
    /// at `lane + shifts[i]`, `general` over the rest. Buffers: the general kernel's parameters in
    /// order, then the interior kernel's (unshifted; the outputs are the same buffers).
    LaunchSplit {
        general: (KernelHash, &'a Arc<dyn CompiledKernel>, &'a [Param]),
        interior: (KernelHash, &'a Arc<dyn CompiledKernel>, &'a [Param]),
        shifts: &'a [i64],
        plan: &'a Arc<crate::stencil::SplitPlan>,
        /// The interior kernel may run through the short border gaps between rows (it has no
        /// side effects or loops), which the general kernel then rewrites.
        through_gaps: bool,
        size_sym: ExprId,
    },
    /// A launch whose single output is reduced block by block as it is produced (never stored).
    /// Buffers: the kernel's non-output parameters in order, then the size-1 result.
    LaunchReduce {
        hash: KernelHash,
        kernel: &'a Arc<dyn CompiledKernel>,
        params: &'a [Param],
        out_param: usize,
        op: ReduceOp,
        block: usize,
        size_sym: ExprId,
    },
    /// A launch whose single output is reduced in blocks of `block` lanes as it is produced.
    /// Buffers: the kernel's non-output parameters in order, then the `⌈size / block⌉` results.
    LaunchBlockReduce {
        hash: KernelHash,
        kernel: &'a Arc<dyn CompiledKernel>,
        params: &'a [Param],
        out_param: usize,
        op: ReduceOp,
        block: usize,
        launch_block: usize,
        size_sym: ExprId,
    },
    /// A launch whose outputs are reduced block by block as they are produced, several
    /// reductions in one pass (sibling reductions; `reds` holds (output parameter, operation),
    /// an output may appear more than once). Buffers: the kernel's non-output parameters in
    /// order, then one size-1 result per entry of `reds`.
    LaunchReduceMany {
        hash: KernelHash,
        kernel: &'a Arc<dyn CompiledKernel>,
        params: &'a [Param],
        reds: &'a [(usize, ReduceOp)],
        block: usize,
        size_sym: ExprId,
    },
    /// Buffers: input, size-1 result.
    Reduce(ReduceOp),
    /// Reductions of evaluated buffers of one length in one pass over them. Buffers: one input
    /// per operation, then one size-1 result per operation.
    ReduceMany(&'a [ReduceOp]),
    /// Buffers: input, output.
    BlockReduce { op: ReduceOp, block: usize },
    /// Buffers: input, output.
    PrefixSum { exclusive: bool },
    /// Buffers: mask, indices.
    Compress,
    /// Buffers: source, copy.
    Memcpy,
    /// Buffers: the new buffer (its contents came from the host).
    Upload,
    /// Row-major `[m, k] × [k, n]` product of f32 or f64 matrices. Buffers: a, b, product.
    Matmul { m: usize, k: usize, n: usize },
    /// Buffers: the buffer read to the host.
    Read,
}

impl DeviceOpKind<'_> {
    /// The size rule of this kind's output.
    pub fn size_rule(&self) -> SizeRule {
        match self {
            DeviceOpKind::Launch { .. } | DeviceOpKind::LaunchSplit { .. } => SizeRule::Launch,
            DeviceOpKind::Reduce(_)
            | DeviceOpKind::LaunchReduce { .. }
            | DeviceOpKind::LaunchReduceMany { .. }
            | DeviceOpKind::ReduceMany(_) => SizeRule::One,
            DeviceOpKind::LaunchBlockReduce { block, .. } => SizeRule::Blocks {
                input: 0,
                block: *block,
            },
            DeviceOpKind::BlockReduce { block, .. } => SizeRule::Blocks {
                input: 0,
                block: *block,
            },
            DeviceOpKind::PrefixSum { .. } | DeviceOpKind::Memcpy | DeviceOpKind::Upload => {
                SizeRule::SameAs(0)
            }
            DeviceOpKind::Compress => SizeRule::DataDependent,
            DeviceOpKind::Matmul { m, n, .. } => SizeRule::Given(m * n),
            DeviceOpKind::Read => SizeRule::None,
        }
    }
    /// A short name for logs.
    pub fn name(&self) -> &'static str {
        match self {
            DeviceOpKind::Launch { .. } => "launch",
            DeviceOpKind::LaunchSplit { .. } => "launch (stencil split)",
            DeviceOpKind::LaunchReduce { .. } => "launch+reduce",
            DeviceOpKind::LaunchReduceMany { .. } => "launch+reduce (several)",
            DeviceOpKind::ReduceMany(_) => "reduce (several)",
            DeviceOpKind::LaunchBlockReduce { .. } => "launch+block_reduce",
            DeviceOpKind::Reduce(_) => "reduce",
            DeviceOpKind::BlockReduce { .. } => "block_reduce",
            DeviceOpKind::PrefixSum { .. } => "prefix_sum",
            DeviceOpKind::Compress => "compress",
            DeviceOpKind::Memcpy => "memcpy",
            DeviceOpKind::Upload => "upload",
            DeviceOpKind::Matmul { .. } => "matmul",
            DeviceOpKind::Read => "read",
        }
    }
}

/// One executed device op, as observers see it: kind, launch/input size, and its buffers (see
/// each kind for their order).
pub struct DeviceOpRecord<'a> {
    pub kind: DeviceOpKind<'a>,
    pub size: usize,
    pub buffers: &'a [&'a Buffer],
}

type Observer = Box<dyn Fn(&DeviceOpRecord) + Send + Sync>;
static OBSERVERS: RwLock<Vec<(u64, Observer)>> = RwLock::new(Vec::new());
static NEXT_OBSERVER: AtomicU64 = AtomicU64::new(1);
static ANY_OBSERVER: AtomicBool = AtomicBool::new(false);

/// Register an observer of device ops; returns a token for [`unobserve`].
pub fn observe(f: impl Fn(&DeviceOpRecord) + Send + Sync + 'static) -> u64 {
    let id = NEXT_OBSERVER.fetch_add(1, Relaxed);
    let mut obs = OBSERVERS.write();
    obs.push((id, Box::new(f)));
    ANY_OBSERVER.store(true, Relaxed);
    id
}
/// Remove an observer.
pub fn unobserve(token: u64) {
    let mut obs = OBSERVERS.write();
    obs.retain(|(i, _)| *i != token);
    ANY_OBSERVER.store(!obs.is_empty(), Relaxed);
}

/// What a frozen function's recorder (`freeze::record`, a layer above) sees of this one: every
/// device op issued on the thread that records, with its buffers.
pub(crate) trait OpRecorder: Sync {
    fn on_op(&self, rec: &DeviceOpRecord);
}

static RECORDER: std::sync::OnceLock<&'static dyn OpRecorder> = std::sync::OnceLock::new();

/// Install the recorder device ops are reported to (on the first recording).
pub(crate) fn install_recorder(r: &'static dyn OpRecorder) {
    let _ = RECORDER.set(r);
}

fn notify(kind: DeviceOpKind, size: usize, buffers: &[&Buffer]) {
    stats::DEVICE_OPS.fetch_add(1, Relaxed);
    let rec = DeviceOpRecord {
        kind,
        size,
        buffers,
    };
    if crate::context::recording() {
        if let Some(r) = RECORDER.get() {
            r.on_op(&rec);
        }
    }
    if ANY_OBSERVER.load(Relaxed) {
        for (_, f) in OBSERVERS.read().iter() {
            f(&rec);
        }
    }
}

/// What the scheduler (or a replay) knows about a kernel it launches.
#[derive(Clone, Copy)]
pub struct LaunchSpec<'a> {
    pub kernel: &'a Arc<dyn CompiledKernel>,
    pub hash: KernelHash,
    pub params: &'a [Param],
    /// Indexed parameters the kernel writes into (scatter targets).
    pub modified: &'a [u32],
    pub block: usize,
    /// Run in 2-d tiles of rows of this many lanes where possible (0: linear blocks).
    pub tile_cols: usize,
    /// The launch size's expression while recording (0: constant).
    pub size_sym: ExprId,
    /// Reduce-scatter targets that blocks may accumulate privately (see `privatise`).
    pub private: crate::privatise::Private,
}

impl<'a> LaunchSpec<'a> {
    /// A launch whose size is not an expression of a recording (replays, plain launches).
    pub fn constant(
        kernel: &'a Arc<dyn CompiledKernel>,
        hash: KernelHash,
        params: &'a [Param],
        modified: &'a [u32],
        block: usize,
    ) -> LaunchSpec<'a> {
        LaunchSpec {
            kernel,
            hash,
            params,
            modified,
            block,
            tile_cols: 0,
            size_sym: 0,
            private: Default::default(),
        }
    }
}

/// Count a finished launch in the statistics; returns its status (out-of-range reads, writes).
fn count_launch(
    t: Instant,
    status: &[AtomicU64; STATUS_LEN],
    hash: crate::kernel::KernelHash,
) -> [u64; STATUS_LEN] {
    stats::RUN_NS.fetch_add(t.elapsed().as_nanos() as u64, Relaxed);
    stats::LAUNCHES.fetch_add(1, Relaxed);
    let st = [
        status[0].load(Relaxed),
        status[1].load(Relaxed),
        status[2].load(Relaxed),
    ];
    if st[STATUS_LOOP_TRUNCATED] > 0 {
        stats::LOOPS_TRUNCATED.fetch_add(1, Relaxed);
        stats::note_truncation(hash, st[STATUS_LOOP_TRUNCATED]);
    }
    stats::OOB_READS.fetch_add(st[STATUS_OOB_READS], Relaxed);
    stats::OOB_WRITES.fetch_add(st[STATUS_OOB_WRITES], Relaxed);
    st
}

/// A kernel whose single output is written to scratch memory a range of lanes at a time, to be
/// consumed at once (the fused reductions).
struct IntoScratch<'a> {
    kernel: &'a dyn CompiledKernel,
    /// One per kernel parameter; `None` for the output.
    params: Vec<Option<&'a Buffer>>,
    lens: Vec<u64>,
    status: [AtomicU64; STATUS_LEN],
    ty: VarType,
}

impl<'a> IntoScratch<'a> {
    /// `inputs`: every parameter but the output at `out_param`, in order.
    fn new(spec: LaunchSpec<'a>, inputs: &[&'a Buffer], out_param: usize) -> IntoScratch<'a> {
        let params: Vec<Option<&Buffer>> = (0..=inputs.len())
            .map(|i| match i.cmp(&out_param) {
                std::cmp::Ordering::Less => Some(inputs[i]),
                std::cmp::Ordering::Equal => None,
                std::cmp::Ordering::Greater => Some(inputs[i - 1]),
            })
            .collect();
        let lens = params
            .iter()
            .map(|b| b.map_or(0, |b| b.len as u64))
            .collect();
        IntoScratch {
            kernel: spec.kernel.as_ref(),
            params,
            lens,
            status: Default::default(),
            ty: spec.params[out_param].ty,
        }
    }

    /// Run lanes `[base, e)`, output lane `base` landing at `scratch[0]`.
    ///
    /// # Safety
    /// `base` is a multiple of `launch::BLOCK_ALIGN` (vector code writes whole vectors from the
    /// start of its range) and `scratch` holds at least `e − base` elements of the output type.
    unsafe fn run(&self, scratch: &Buffer, base: usize, e: usize) {
        let ptrs: Vec<*mut u8> = self
            .params
            .iter()
            .map(|b| match b {
                Some(b) => b.ptr(),
                None => scratch.ptr().wrapping_sub(base * self.ty.size_bytes()),
            })
            .collect();
        let args = LaunchArgs {
            ptrs: ptrs.as_ptr(),
            lens: self.lens.as_ptr(),
            status: self.status.as_ptr(),
        };
        // SAFETY: inputs are live buffers matching the kernel's parameters for all lanes; the
        // output pointer is shifted so that lanes [base, e) write scratch[0, e − base) (plus the
        // slack a partial last vector may touch), which the caller guarantees.
        unsafe { self.kernel.run(&args, base as u64, e as u64) };
    }
}

/// Launch a kernel over `size` lanes with `buffers` (one per parameter, in order).
pub fn launch_kernel(spec: LaunchSpec, size: usize, buffers: &[&Buffer]) -> [u64; STATUS_LEN] {
    let ptrs: Vec<*mut u8> = buffers.iter().map(|b| b.ptr()).collect();
    let lens: Vec<u64> = buffers.iter().map(|b| b.len as u64).collect();
    let status: [AtomicU64; STATUS_LEN] = Default::default();
    let args = LaunchArgs {
        ptrs: ptrs.as_ptr(),
        lens: lens.as_ptr(),
        status: status.as_ptr(),
    };
    let t = Instant::now();
    // SAFETY: the scheduler (or a replay, which checks the same) built `buffers` to match the
    // kernel's parameters: inputs hold `size` (or 1, broadcast) elements, outputs were allocated for
    // `size`, indexed buffers carry their length; all stay alive (borrowed) for the launch.
    unsafe {
        // (a kernel with plain scatter updates never runs in tiles: `privatise` owns its launch)
        if spec.tile_cols > 0 && launch::can_tile(size, spec.tile_cols) && !spec.private.exclusive()
        {
            launch::launch_tiled(spec.kernel.as_ref(), &args, size, spec.tile_cols)
        } else if spec.private.is_empty()
            || !crate::privatise::launch(
                spec.kernel.as_ref(),
                spec.params,
                &spec.private,
                spec.block,
                &ptrs,
                &lens,
                args.status,
                size,
            )
        {
            launch::launch(spec.kernel.as_ref(), &args, size, spec.block)
        }
    };
    let st = count_launch(t, &status, spec.hash);
    notify(
        DeviceOpKind::Launch {
            hash: spec.hash,
            kernel: spec.kernel,
            params: spec.params,
            modified: spec.modified,
            block: spec.block,
            tile_cols: spec.tile_cols,
            size_sym: spec.size_sym,
            private: spec.private,
        },
        size,
        buffers,
    );
    st
}

/// Run a stencil group (see `stencil`): the interior kernel over the plan's interior lanes, its
/// taps reading `ibufs` at `lane + offset`, then the general kernel over the border lanes. When
/// the plan does not fit the buffers (a shifted read would leave its buffer), the general kernel
/// runs every lane instead: it is correct everywhere. Counts as one launch.
pub fn launch_split(
    general: LaunchSpec,
    gbufs: &[&Buffer],
    interior: LaunchSpec,
    ibufs: &[(&Buffer, i64)],
    size: usize,
    plan: &Arc<crate::stencil::SplitPlan>,
    through_gaps: bool,
) -> [u64; STATUS_LEN] {
    use crate::kernel::ParamKind;
    let fits = plan.size() == size
        && ibufs.len() == interior.params.len()
        && match plan.first_last() {
            None => true,
            Some((first, last)) => {
                ibufs
                    .iter()
                    .zip(interior.params)
                    .all(|(&(buf, off), p)| match p.kind {
                        ParamKind::Input => {
                            first as i64 + off >= 0 && (last as i64 + off) < buf.len as i64
                        }
                        ParamKind::Output => buf.len == size && off == 0,
                        ParamKind::Broadcast => buf.len >= 1 && off == 0,
                        ParamKind::Indexed => off == 0,
                    })
            }
        };
    if !fits {
        tracing::warn!(target: "kiln::stencil", "kiln internal: a stencil plan over {:?} does not fit its buffers; running the general kernel", plan.shape);
        return launch_kernel(general, size, gbufs);
    }
    if !plan.worth_splitting() {
        tracing::debug!(target: "kiln::stencil", "stencil over {:?}: interior rows of {} lanes are too short to run apart; the general kernel runs every lane", plan.shape, plan.row_len());
        return launch_kernel(general, size, gbufs);
    }
    let outs = |params: &[Param]| -> Vec<(usize, usize)> {
        params
            .iter()
            .enumerate()
            .filter(|(_, p)| p.kind == ParamKind::Output)
            .map(|(i, p)| (i, p.ty.size_bytes()))
            .collect()
    };
    let status: [AtomicU64; STATUS_LEN] = Default::default();
    let gptrs: Vec<*mut u8> = gbufs.iter().map(|b| b.ptr()).collect();
    let glens: Vec<u64> = gbufs.iter().map(|b| b.len as u64).collect();
    let iptrs: Vec<*mut u8> = ibufs
        .iter()
        .map(|&(b, off)| {
            b.ptr()
                .wrapping_offset((off as isize).wrapping_mul(b.ty().size_bytes() as isize))
        })
        .collect();
    let ilens: Vec<u64> = ibufs.iter().map(|(b, _)| b.len as u64).collect();
    let gargs = LaunchArgs {
        ptrs: gptrs.as_ptr(),
        lens: glens.as_ptr(),
        status: status.as_ptr(),
    };
    let iargs = LaunchArgs {
        ptrs: iptrs.as_ptr(),
        lens: ilens.as_ptr(),
        status: status.as_ptr(),
    };
    let t = Instant::now();
    // SAFETY: the scheduler built both buffer lists to match their kernels (as for
    // `launch_kernel`); the check above makes every shifted input read at an interior lane fall
    // inside its buffer (interior lanes lie between `first` and `last`), and the general kernel
    // is valid at every lane. The outputs are the same buffers in both lists.
    unsafe {
        launch::launch_split(
            (interior.kernel.as_ref(), &iargs, iptrs.len()),
            (general.kernel.as_ref(), &gargs, gptrs.len()),
            &outs(interior.params),
            &outs(general.params),
            plan,
            through_gaps,
            general.block,
        )
    };
    let st = count_launch(t, &status, general.hash);
    stats::STENCIL_LAUNCHES.fetch_add(1, Relaxed);
    let shifts: Vec<i64> = ibufs.iter().map(|&(_, off)| off).collect();
    let mut all: Vec<&Buffer> = gbufs.to_vec();
    all.extend(ibufs.iter().map(|&(b, _)| b));
    notify(
        DeviceOpKind::LaunchSplit {
            general: (general.hash, general.kernel, general.params),
            interior: (interior.hash, interior.kernel, interior.params),
            shifts: &shifts,
            plan,
            through_gaps,
            size_sym: general.size_sym,
        },
        size,
        &all,
    );
    st
}

/// Run a kernel and reduce its single output as it is produced: each block writes into a scratch
/// buffer of block size (cache-resident) that is reduced right away, so the full-size array never
/// exists. `inputs` has one buffer per kernel parameter except the output at `out_param`. Returns
/// the size-1 result buffer, its bits (for `Bool` + `Add`, the number of true lanes) and the
/// launch status.
pub fn launch_reduce(
    spec: LaunchSpec,
    size: usize,
    inputs: &[&Buffer],
    out_param: usize,
    op: ReduceOp,
) -> Result<(Buffer, u64, [u64; STATUS_LEN])> {
    let ty = spec.params[out_param].ty;
    let hash = spec.hash;
    let block = spec.block.next_multiple_of(launch::BLOCK_ALIGN);
    let kernel = IntoScratch::new(spec, inputs, out_param);
    let t = Instant::now();
    let parts = launch::map_blocks(size, block, |s, e| -> Result<u64> {
        let scratch = Buffer::new(ty, block, &|| {
            format!("a reduction scratch block of {block} × {ty}")
        })?;
        // SAFETY: blocks start at multiples of `block`, itself a multiple of BLOCK_ALIGN, and the
        // scratch holds a whole block.
        unsafe { kernel.run(&scratch, s, e) };
        Ok(reduce_range(op, &scratch, 0, e - s))
    });
    let parts = parts.into_iter().collect::<Result<Vec<u64>>>()?;
    let st = count_launch(t, &kernel.status, hash);
    let bits = combine(op, ty, &parts);
    let out = Buffer::new(ty, 1, &|| "a reduction result".into())?;
    set_elem(&out, 0, bits);
    let mut all: Vec<&Buffer> = inputs.to_vec();
    all.push(&out);
    notify(
        DeviceOpKind::LaunchReduce {
            hash: spec.hash,
            kernel: spec.kernel,
            params: spec.params,
            out_param,
            op,
            block: spec.block,
            size_sym: spec.size_sym,
        },
        size,
        &all,
    );
    Ok((out, bits, st))
}

/// A kernel whose every output is written to its own scratch buffer a range of lanes at a time,
/// to be consumed at once (sibling reductions sharing one pass).
struct IntoScratches<'a> {
    kernel: &'a dyn CompiledKernel,
    /// One per kernel parameter; `None` for an output.
    params: Vec<Option<&'a Buffer>>,
    /// The element type of each parameter.
    tys: Vec<VarType>,
    lens: Vec<u64>,
    status: [AtomicU64; STATUS_LEN],
}

impl<'a> IntoScratches<'a> {
    /// `inputs`: every non-output parameter, in order.
    fn new(spec: &LaunchSpec<'a>, inputs: &[&'a Buffer]) -> IntoScratches<'a> {
        let mut next = inputs.iter();
        let params: Vec<Option<&Buffer>> = spec
            .params
            .iter()
            .map(|p| match p.kind {
                crate::kernel::ParamKind::Output => None,
                _ => Some(*next.next().expect("one input buffer per input parameter")),
            })
            .collect();
        let lens = params
            .iter()
            .map(|b| b.map_or(0, |b| b.len as u64))
            .collect();
        IntoScratches {
            kernel: spec.kernel.as_ref(),
            params,
            tys: spec.params.iter().map(|p| p.ty).collect(),
            lens,
            status: Default::default(),
        }
    }

    /// Run lanes `[base, e)`, each output's lane `base` landing at element 0 of its scratch.
    ///
    /// # Safety
    /// `base` is a multiple of `launch::BLOCK_ALIGN` and `scratch` has a buffer for every output
    /// parameter holding at least `e − base` elements of its type.
    unsafe fn run(&self, scratch: &[Option<Buffer>], base: usize, e: usize) {
        let ptrs: Vec<*mut u8> = self
            .params
            .iter()
            .enumerate()
            .map(|(i, b)| match b {
                Some(b) => b.ptr(),
                None => {
                    let s = scratch[i].as_ref().expect("a scratch buffer per output");
                    s.ptr().wrapping_sub(base * self.tys[i].size_bytes())
                }
            })
            .collect();
        let args = LaunchArgs {
            ptrs: ptrs.as_ptr(),
            lens: self.lens.as_ptr(),
            status: self.status.as_ptr(),
        };
        // SAFETY: inputs are live buffers matching the kernel's parameters for all lanes; each
        // output pointer is shifted so that lanes [base, e) write its scratch[0, e − base),
        // which the caller guarantees.
        unsafe { self.kernel.run(&args, base as u64, e as u64) };
    }
}

/// Lanes per block of a fused reduction whose result must not depend on its kernel (the pending
/// reductions the scheduler resolves): [`launch::DEFAULT_BLOCK`], the block every light kernel
/// (up to 16 instructions) ran its reductions in, so that their bits are what they were.
pub const REDUCE_BLOCK: usize = launch::DEFAULT_BLOCK;

/// Lanes a sibling reduction's kernel computes per call (into scratch that stays in cache while
/// every reduction reads it); a multiple of 16, so that a block fed piece by piece reduces to the
/// bits of the whole block.
const SIBLING_PIECE: usize = 4096;

/// Run a kernel with several outputs and reduce each as it is produced (sibling reductions in
/// one pass: every lane is computed once and feeds every reduction). `reds`: (output parameter,
/// operation); an output may be reduced more than once. Blocks of `spec.block` lanes are reduced
/// as [`launch_reduce`] reduces them (each run in pieces of [`SIBLING_PIECE`] lanes, which gives
/// the same bits), so each result has the bits that reducing its output alone with the same
/// block gives. Returns one size-1 buffer and its bits per entry of `reds`, and the launch status.
pub fn launch_reduce_many(
    spec: LaunchSpec,
    size: usize,
    inputs: &[&Buffer],
    reds: &[(usize, ReduceOp)],
) -> Result<(Vec<Buffer>, Vec<u64>, [u64; STATUS_LEN])> {
    let hash = spec.hash;
    let block = spec.block.next_multiple_of(launch::BLOCK_ALIGN);
    let piece = SIBLING_PIECE.min(block);
    let kernel = IntoScratches::new(&spec, inputs);
    let t = Instant::now();
    let parts = launch::map_blocks(size, block, |s, e| -> Result<Vec<u64>> {
        let mut scratch: Vec<Option<Buffer>> = Vec::with_capacity(spec.params.len());
        for p in spec.params {
            scratch.push(if p.kind == crate::kernel::ParamKind::Output {
                let ty = p.ty;
                Some(Buffer::new(ty, piece, &|| {
                    format!("a reduction scratch piece of {piece} × {ty}")
                })?)
            } else {
                None
            });
        }
        let mut accs: Vec<Accum> = reds
            .iter()
            .map(|&(p, op)| Accum::new(op, spec.params[p].ty))
            .collect();
        let mut a = s;
        while a < e {
            let b = (a + piece).min(e);
            // SAFETY: `a` is `s` (a multiple of `block`, itself a multiple of BLOCK_ALIGN) plus
            // whole pieces (multiples of 16), and each output's scratch holds a whole piece.
            unsafe { kernel.run(&scratch, a, b) };
            for (acc, &(p, _)) in accs.iter_mut().zip(reds) {
                let buf = scratch[p]
                    .as_ref()
                    .expect("a reduced parameter is an output");
                acc.feed(buf, 0, b - a);
            }
            a = b;
        }
        Ok(accs.iter().map(Accum::finish).collect())
    });
    let parts = parts.into_iter().collect::<Result<Vec<Vec<u64>>>>()?;
    let st = count_launch(t, &kernel.status, hash);
    let mut outs = Vec::with_capacity(reds.len());
    let mut bits = Vec::with_capacity(reds.len());
    for (j, &(p, op)) in reds.iter().enumerate() {
        let ty = spec.params[p].ty;
        let col: Vec<u64> = parts.iter().map(|b| b[j]).collect();
        let b = combine(op, ty, &col);
        let out = Buffer::new(ty, 1, &|| "a reduction result".into())?;
        set_elem(&out, 0, b);
        outs.push(out);
        bits.push(b);
    }
    let mut all: Vec<&Buffer> = inputs.to_vec();
    all.extend(outs.iter());
    notify(
        DeviceOpKind::LaunchReduceMany {
            hash: spec.hash,
            kernel: spec.kernel,
            params: spec.params,
            reds,
            block: spec.block,
            size_sym: spec.size_sym,
        },
        size,
        &all,
    );
    Ok((outs, bits, st))
}

/// Elements each buffer feeds its accumulator at a time in [`reduce_many`]: a multiple of 16
/// (pieces of one block reduce to the bits of the whole block) small enough that a piece read
/// for one reduction is still in the L1 cache for the next.
const MANY_PIECE: usize = 2048;

/// Reduce evaluated buffers of one length in one pass: block by block as [`reduce`] does, each
/// block read piece by piece into every reduction, so memory is read once for all of them (a
/// minimum and a maximum of one array: one pass). Each result has the bits [`reduce`] gives.
pub fn reduce_many(reds: &[(ReduceOp, &Buffer)]) -> Result<Vec<Buffer>> {
    let n = reds.first().map_or(0, |r| r.1.len);
    assert!(
        reds.iter().all(|r| r.1.len == n),
        "kiln internal error: reduce_many over buffers of different lengths"
    );
    // partner[j]: the maximum that goes with minimum j over the same float buffer (and back)
    let mut partner: Vec<Option<usize>> = vec![None; reds.len()];
    for j in 0..reds.len() {
        let (op, b) = reds[j];
        if op != ReduceOp::Min || !matches!(b.ty(), VarType::F32 | VarType::F64) {
            continue;
        }
        if let Some(k) = (0..reds.len()).find(|&k| {
            partner[k].is_none() && reds[k].0 == ReduceOp::Max && std::ptr::eq(reds[k].1, b)
        }) {
            partner[j] = Some(k);
            partner[k] = Some(j);
        }
    }
    let partner = &partner;
    let parts = launch::map_blocks(n, RED_BLOCK, |s, e| {
        let mut accs: Vec<Accum> = reds.iter().map(|&(op, b)| Accum::new(op, b.ty())).collect();
        let mut p = s;
        while p < e {
            let q = (p + MANY_PIECE).min(e);
            for j in 0..reds.len() {
                if let Some(k) = partner[j] {
                    if j < k {
                        // a float minimum and maximum of one buffer: one loop for both
                        let (a, b) = accs.split_at_mut(k);
                        let (first, second) = (&mut a[j], &mut b[0]);
                        let (lo, hi) = if reds[j].0 == ReduceOp::Min {
                            (first, second)
                        } else {
                            (second, first)
                        };
                        feed_min_max(lo, hi, reds[j].1, p, q);
                    }
                    continue;
                }
                accs[j].feed(reds[j].1, p, q);
            }
            p = q;
        }
        accs.iter().map(Accum::finish).collect::<Vec<u64>>()
    });
    let mut outs = Vec::with_capacity(reds.len());
    for (j, &(op, b)) in reds.iter().enumerate() {
        let col: Vec<u64> = parts.iter().map(|p| p[j]).collect();
        let out = Buffer::new(b.ty(), 1, &|| "a reduction result".into())?;
        set_elem(&out, 0, combine(op, b.ty(), &col));
        outs.push(out);
    }
    let ops: Vec<ReduceOp> = reds.iter().map(|r| r.0).collect();
    let mut all: Vec<&Buffer> = reds.iter().map(|r| r.1).collect();
    all.extend(outs.iter());
    notify(DeviceOpKind::ReduceMany(&ops), n, &all);
    Ok(outs)
}

/// Lanes computed per kernel call of a fused block reduction (into a scratch buffer that stays in
/// cache; a multiple of 16 so that pieces of one block reduce to the same bits as the whole).
const FUSED_PIECE: usize = 16_384;

/// Run a kernel and reduce each block of `block` consecutive lanes of its single output as the
/// output is produced (into per-task scratch, never a full-size array). `inputs` has one buffer per
/// kernel parameter except the output at `out_param`. Returns the `⌈size / block⌉` results (the
/// same bits as evaluating the output and calling [`block_reduce`]) and the launch status.
pub fn launch_block_reduce(
    spec: LaunchSpec,
    size: usize,
    inputs: &[&Buffer],
    out_param: usize,
    op: ReduceOp,
    block: usize,
) -> Result<(Buffer, [u64; STATUS_LEN])> {
    assert!(
        block > 0,
        "kiln internal error: block reduction with block 0"
    );
    let ty = spec.params[out_param].ty;
    let hash = spec.hash;
    let n_out = size.div_ceil(block);
    let out = Buffer::new(ty, n_out, &|| {
        format!("block reduction output of {n_out} × {ty}")
    })?;
    let kernel = IntoScratch::new(spec, inputs, out_param);
    // lanes [s, e) of the output into scratch[s − base ..]; runs start at a multiple of
    // BLOCK_ALIGN (vector code writes whole vectors), the lanes before `s` are computed and ignored
    let run = |scratch: &Buffer, s: usize, e: usize| -> usize {
        let base = s - s % launch::BLOCK_ALIGN;
        // SAFETY: base is aligned; e − base <= FUSED_PIECE + BLOCK_ALIGN, what the scratch holds.
        unsafe { kernel.run(scratch, base, e) };
        s - base
    };
    let t = Instant::now();
    let outs_per_task = (4 * FUSED_PIECE / block).max(1);
    let failed = std::sync::atomic::AtomicBool::new(false);
    // tasks split the outputs without rounding (for_blocks aligns to vectors, which scalar
    // stores do not need), so that even a few long blocks spread over the cores
    let outs_per_task = outs_per_task.min(n_out.div_ceil(launch::threads()).max(1));
    launch::map_blocks(n_out, outs_per_task, |o0, o1| {
        let Ok(scratch) = Buffer::new(ty, FUSED_PIECE + launch::BLOCK_ALIGN, &|| {
            "a fused block-reduction scratch buffer".into()
        }) else {
            failed.store(true, Relaxed);
            return;
        };
        if block <= FUSED_PIECE {
            // whole blocks per kernel call
            let per_run = FUSED_PIECE / block;
            let mut o = o0;
            while o < o1 {
                let oe = (o + per_run).min(o1);
                let (s, e) = (o * block, (oe * block).min(size));
                let skip = run(&scratch, s, e);
                for k in o..oe {
                    let bs = skip + (k - o) * block;
                    let be = (skip + (k - o + 1) * block).min(skip + e - s);
                    set_elem(&out, k, reduce_range(op, &scratch, bs, be));
                }
                o = oe;
            }
        } else {
            // one block in pieces, the accumulator carried across them
            for k in o0..o1 {
                let (bs, be) = (k * block, ((k + 1) * block).min(size));
                let mut acc = Accum::new(op, ty);
                let mut s = bs;
                while s < be {
                    let e = (s + FUSED_PIECE).min(be);
                    let skip = run(&scratch, s, e);
                    acc.feed(&scratch, skip, skip + e - s);
                    s = e;
                }
                set_elem(&out, k, acc.finish());
            }
        }
    });
    if failed.load(Relaxed) {
        return Err(crate::Error::OutOfMemory {
            bytes: ((FUSED_PIECE + launch::BLOCK_ALIGN) * ty.size_bytes()) as u128,
            what: "a fused block-reduction scratch buffer".into(),
        });
    }
    let st = count_launch(t, &kernel.status, hash);
    let mut all: Vec<&Buffer> = inputs.to_vec();
    all.push(&out);
    notify(
        DeviceOpKind::LaunchBlockReduce {
            hash: spec.hash,
            kernel: spec.kernel,
            params: spec.params,
            out_param,
            op,
            block,
            launch_block: spec.block,
            size_sym: spec.size_sym,
        },
        size,
        &all,
    );
    Ok((out, st))
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

/// A new buffer holding `data`, copied once from the caller's memory: one block copy for the
/// primitive element types (on a little-endian host their memory is the buffer's byte format),
/// else one pass converting each element.
pub fn upload_scalars<T: crate::ty::Scalar>(data: &[T]) -> Result<Buffer> {
    if let Some(bytes) = primitive_bytes(data) {
        return upload(T::TYPE, bytes);
    }
    upload_iter(data.len(), data.iter().copied())
}

/// `data`'s memory as bytes when `T` is one of the primitive element types (whose layout is the
/// buffer format on this little-endian host); `None` for any other `Scalar` implementation.
fn primitive_bytes<T: crate::ty::Scalar>(data: &[T]) -> Option<&[u8]> {
    use std::any::TypeId;
    let t = TypeId::of::<T>();
    let primitive = [
        TypeId::of::<bool>(),
        TypeId::of::<i32>(),
        TypeId::of::<u32>(),
        TypeId::of::<i64>(),
        TypeId::of::<u64>(),
        TypeId::of::<f32>(),
        TypeId::of::<f64>(),
    ]
    .contains(&t);
    if !primitive || cfg!(target_endian = "big") || std::mem::size_of::<T>() != T::TYPE.size_bytes()
    {
        return None;
    }
    // SAFETY: T is bool, i32, u32, i64, u64, f32 or f64 (checked by TypeId): no padding, every
    // byte initialized, and u8 has alignment 1; the slice covers exactly data's memory.
    Some(unsafe {
        std::slice::from_raw_parts(data.as_ptr().cast::<u8>(), std::mem::size_of_val(data))
    })
}

/// A new buffer of `len` elements written from `values` in one pass (no staging copy): for host
/// data that is not contiguous, such as a strided or transposed ndarray view. Fewer values than
/// `len` is an error; extra ones are ignored.
pub fn upload_iter<T: crate::ty::Scalar>(
    len: usize,
    values: impl IntoIterator<Item = T>,
) -> Result<Buffer> {
    let ty = T::TYPE;
    let w = ty.size_bytes();
    let buf = Buffer::new(ty, len, &|| format!("an array of {len} × {ty}"))?;
    let mut written = 0usize;
    for v in values.into_iter().take(len) {
        let b = v.to_bits64().to_le_bytes();
        // SAFETY: written < len, so bytes [written·w, written·w + w) lie inside the buffer's
        // len·w bytes; the source is a local array of 8 ≥ w bytes.
        unsafe { std::ptr::copy_nonoverlapping(b.as_ptr(), buf.ptr().add(written * w), w) };
        written += 1;
    }
    if written < len {
        return Err(crate::Error::Invalid(format!(
            "upload: {written} values given for an array of {len}"
        )));
    }
    clear_slack(&buf);
    notify(DeviceOpKind::Upload, len, &[&buf]);
    Ok(buf)
}

fn clear_slack(buf: &Buffer) {
    // SAFETY: every buffer has SLACK_BYTES writable bytes after its elements.
    unsafe { std::ptr::write_bytes(buf.ptr().add(buf.bytes()), 0, SLACK_BYTES) };
}

/// A zero-filled buffer that stands in for the result of a request refused while a symbolic body
/// is traced (never read for real: the trace is thrown away). Not a device op: nothing records it.
pub(crate) fn placeholder_zeros(ty: VarType, len: usize) -> Result<Buffer> {
    let buf = Buffer::new(ty, len, &|| format!("a placeholder of {len} × {ty}"))?;
    // SAFETY: the buffer holds bytes() + SLACK_BYTES writable bytes.
    unsafe { std::ptr::write_bytes(buf.ptr(), 0, buf.bytes() + SLACK_BYTES) };
    Ok(buf)
}

/// A copy of `src` in a new buffer.
pub fn copy_buffer(src: &Buffer) -> Result<Buffer> {
    let buf = Buffer::new(src.ty(), src.len, &|| {
        format!("a copy of an array of {} × {}", src.len, src.ty())
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
    unsafe { crate::backend::read_bits(buf.ptr(), buf.ty(), i) }
}

/// Write element `i`. Callers pass `i < buf.len` and own element `i` (disjoint ranges per thread).
fn set_elem(buf: &Buffer, i: usize, v: u64) {
    debug_assert!(i < buf.len);
    // SAFETY: i < buf.len and no other thread writes element i (caller contract).
    unsafe { crate::backend::write_bits(buf.ptr(), buf.ty(), i, v) }
}

/// A reduction in progress over consecutive pieces of one range. Feeding pieces whose lengths are
/// multiples of 16 (all but the last) gives the same bits as feeding the whole range at once, so a
/// fused reduction that produces its input piece by piece agrees with one over an evaluated array.
/// The smallest (or largest) float of a run given as bits, as IEEE 754-2019 `minimum` /
/// `maximum` over it would give, or `None` when the run holds a NaN (the caller then takes the
/// exact path, which propagates it). Plain float comparisons vectorise (`vminpd`); the one case
/// they get wrong, −0 against +0, is settled from two flags: a zero result is −0 for a minimum
/// when the run holds a −0, +0 for a maximum when it holds a +0.
macro_rules! float_extreme {
    ($name:ident, $imp:ident, $f:ty, $bits:ty, $lanes:expr) => {
        fn $name(xs: &[$bits], max: bool) -> Option<$bits> {
            if max {
                $imp::<true>(xs)
            } else {
                $imp::<false>(xs)
            }
        }
        fn $imp<const MAX: bool>(xs: &[$bits]) -> Option<$bits> {
            const SIGN: $bits = 1 << (<$bits>::BITS - 1);
            let init = if MAX {
                <$f>::NEG_INFINITY
            } else {
                <$f>::INFINITY
            };
            let mut acc = [init; $lanes];
            // per lane: the sum of v − v, which stays 0 unless a NaN (or an infinity) comes by
            let mut check = [0.0 as $f; $lanes];
            // (one compare and a blend per element; zeros of either sign compare equal and are
            // settled afterwards)
            let pick = |a: $f, v: $f| {
                if MAX {
                    if v > a {
                        v
                    } else {
                        a
                    }
                } else if v < a {
                    v
                } else {
                    a
                }
            };
            let chunks = xs.chunks_exact($lanes);
            let rest = chunks.remainder();
            for c in chunks {
                for l in 0..$lanes {
                    let v = <$f>::from_bits(c[l]);
                    check[l] += v - v;
                    acc[l] = pick(acc[l], v);
                }
            }
            let mut best = init;
            let mut sum = 0.0 as $f;
            for &b in rest {
                let v = <$f>::from_bits(b);
                sum += v - v;
                best = pick(best, v);
            }
            for l in 0..$lanes {
                sum += check[l];
                best = pick(best, acc[l]);
            }
            if sum != 0.0 {
                // a NaN, or an infinity: the NaN check again, exactly
                if xs.iter().any(|&b| <$f>::from_bits(b).is_nan()) {
                    return None;
                }
            }
            if best == 0.0 {
                // −0 for a minimum when the run holds a −0, +0 for a maximum when it holds a +0
                let negative = if MAX {
                    !xs.iter().any(|&b| b == 0)
                } else {
                    xs.iter().any(|&b| b == SIGN)
                };
                return Some(if negative { SIGN } else { 0 });
            }
            Some(best.to_bits())
        }
    };
}
float_extreme!(extreme_f32, extreme_f32_as, f32, u32, 16);
float_extreme!(extreme_f64, extreme_f64_as, f64, u64, 8);

/// The minimum and the maximum of a run in one loop over it (what `extreme_*` gives for each:
/// `None` where that one falls back to the exact path), for a minimum and a maximum of one
/// buffer reduced together (`normalize`).
///
/// kiln-core is compiled for the baseline x86-64 (two f64 per SSE2 instruction), which made this
/// loop compute-bound (`normalize` on 1.8 GB: 138 ms against 63 ms for one memory pass); the same
/// body is therefore also compiled for AVX2 and picked at run time where the CPU has it (the
/// operations are the same IEEE compares and adds lane by lane, so the bits are too).
macro_rules! float_min_max {
    ($name:ident, $generic:ident, $avx2:ident, $f:ty, $bits:ty, $lanes:expr) => {
        fn $name(xs: &[$bits]) -> Option<($bits, $bits)> {
            #[cfg(target_arch = "x86_64")]
            if std::arch::is_x86_feature_detected!("avx2") {
                // SAFETY: the CPU supports AVX2 (checked just above), the only requirement of a
                // `target_feature(enable = "avx2")` function.
                return unsafe { $avx2(xs) };
            }
            $generic(xs)
        }
        #[cfg(target_arch = "x86_64")]
        #[target_feature(enable = "avx2")]
        fn $avx2(xs: &[$bits]) -> Option<($bits, $bits)> {
            $generic(xs)
        }
        #[inline(always)]
        fn $generic(xs: &[$bits]) -> Option<($bits, $bits)> {
            const SIGN: $bits = 1 << (<$bits>::BITS - 1);
            let mut lo = [<$f>::INFINITY; $lanes];
            let mut hi = [<$f>::NEG_INFINITY; $lanes];
            let mut check = [0.0 as $f; $lanes];
            let chunks = xs.chunks_exact($lanes);
            let rest = chunks.remainder();
            for c in chunks {
                for l in 0..$lanes {
                    let v = <$f>::from_bits(c[l]);
                    check[l] += v - v;
                    lo[l] = if v < lo[l] { v } else { lo[l] };
                    hi[l] = if v > hi[l] { v } else { hi[l] };
                }
            }
            let (mut bl, mut bh, mut sum) = (<$f>::INFINITY, <$f>::NEG_INFINITY, 0.0 as $f);
            for &b in rest {
                let v = <$f>::from_bits(b);
                sum += v - v;
                bl = if v < bl { v } else { bl };
                bh = if v > bh { v } else { bh };
            }
            for l in 0..$lanes {
                sum += check[l];
                bl = if lo[l] < bl { lo[l] } else { bl };
                bh = if hi[l] > bh { hi[l] } else { bh };
            }
            if sum != 0.0 && xs.iter().any(|&b| <$f>::from_bits(b).is_nan()) {
                return None;
            }
            let lo_bits = if bl == 0.0 {
                if xs.iter().any(|&b| b == SIGN) {
                    SIGN
                } else {
                    0
                }
            } else {
                bl.to_bits()
            };
            let hi_bits = if bh == 0.0 {
                if xs.iter().any(|&b| b == 0) {
                    0
                } else {
                    SIGN
                }
            } else {
                bh.to_bits()
            };
            Some((lo_bits, hi_bits))
        }
    };
}
float_min_max!(
    min_max_f32,
    min_max_f32_generic,
    min_max_f32_avx2,
    f32,
    u32,
    16
);
float_min_max!(
    min_max_f64,
    min_max_f64_generic,
    min_max_f64_avx2,
    f64,
    u64,
    8
);

/// Feed elements `s..e` of `buf` to a minimum and a maximum accumulator of it in one pass (the
/// bits `Accum::feed` gives each).
fn feed_min_max(lo: &mut Accum, hi: &mut Accum, buf: &Buffer, s: usize, e: usize) {
    // SAFETY: the buffer holds buf.len >= e initialised elements of its type.
    let pair = match buf.ty() {
        VarType::F32 => {
            let xs = unsafe { std::slice::from_raw_parts(buf.ptr() as *const u32, buf.len) };
            min_max_f32(&xs[s..e]).map(|(a, b)| (a as u64, b as u64))
        }
        VarType::F64 => {
            let xs = unsafe { std::slice::from_raw_parts(buf.ptr() as *const u64, buf.len) };
            min_max_f64(&xs[s..e])
        }
        _ => None,
    };
    match pair {
        Some((a, b)) => {
            lo.bits = eval_reduce(lo.op, lo.ty, lo.bits, a);
            hi.bits = eval_reduce(hi.op, hi.ty, hi.bits, b);
        }
        None => {
            lo.feed(buf, s, e);
            hi.feed(buf, s, e);
        }
    }
}

/// Typed fast paths for the hot reductions (sum of f32/f64, count of masks); others use bit-level
/// `eval_reduce`, which defines the semantics.
struct Accum {
    op: ReduceOp,
    ty: VarType,
    f32s: [f32; 16],
    f64s: [f64; 8],
    /// Sum of the elements after the last whole group (f32/f64 sums) or the running value.
    tail: f64,
    bits: u64,
}

impl Accum {
    fn new(op: ReduceOp, ty: VarType) -> Accum {
        Accum {
            op,
            ty,
            f32s: [0.0; 16],
            f64s: [0.0; 8],
            tail: 0.0,
            bits: reduce_identity(op, ty),
        }
    }

    /// Add elements `s..e` of `buf`.
    fn feed(&mut self, buf: &Buffer, s: usize, e: usize) {
        // SAFETY (all slices below): the buffer holds buf.len >= e initialised elements of the type.
        match (self.op, self.ty) {
            (ReduceOp::Add, VarType::F32) => {
                let xs = unsafe { std::slice::from_raw_parts(buf.ptr() as *const f32, buf.len) };
                let chunks = xs[s..e].chunks_exact(16);
                self.tail += chunks.remainder().iter().map(|&v| v as f64).sum::<f64>();
                // a local copy stays in registers through the hot loop
                let mut acc = self.f32s;
                for c in chunks {
                    for (a, v) in acc.iter_mut().zip(c) {
                        *a += v;
                    }
                }
                self.f32s = acc;
            }
            (ReduceOp::Add, VarType::F64) => {
                let xs = unsafe { std::slice::from_raw_parts(buf.ptr() as *const f64, buf.len) };
                let chunks = xs[s..e].chunks_exact(8);
                self.tail += chunks.remainder().iter().sum::<f64>();
                let mut acc = self.f64s;
                for c in chunks {
                    for (a, v) in acc.iter_mut().zip(c) {
                        *a += v;
                    }
                }
                self.f64s = acc;
            }
            (ReduceOp::Add, VarType::Bool) => {
                let xs = unsafe { std::slice::from_raw_parts(buf.ptr(), buf.len) };
                self.bits += xs[s..e].iter().map(|&b| (b & 1) as u64).sum::<u64>();
            }
            (ReduceOp::Or | ReduceOp::Max, VarType::Bool) => {
                // masks hold 0 or 1: "any" is "some byte is not 0" (vectorises)
                let xs = unsafe { std::slice::from_raw_parts(buf.ptr(), buf.len) };
                self.bits |= u64::from(xs[s..e].iter().fold(0u8, |a, &b| a | b) & 1);
            }
            (ReduceOp::And | ReduceOp::Min, VarType::Bool) => {
                let xs = unsafe { std::slice::from_raw_parts(buf.ptr(), buf.len) };
                self.bits &= u64::from(xs[s..e].iter().fold(1u8, |a, &b| a & b) & 1);
            }
            (ReduceOp::Min | ReduceOp::Max, VarType::F32) => {
                let xs = unsafe { std::slice::from_raw_parts(buf.ptr() as *const u32, buf.len) };
                match extreme_f32(&xs[s..e], self.op == ReduceOp::Max) {
                    Some(v) => self.bits = eval_reduce(self.op, self.ty, self.bits, v as u64),
                    None => self.feed_exact(buf, s, e),
                }
            }
            (ReduceOp::Min | ReduceOp::Max, VarType::F64) => {
                let xs = unsafe { std::slice::from_raw_parts(buf.ptr() as *const u64, buf.len) };
                match extreme_f64(&xs[s..e], self.op == ReduceOp::Max) {
                    Some(v) => self.bits = eval_reduce(self.op, self.ty, self.bits, v),
                    None => self.feed_exact(buf, s, e),
                }
            }
            _ => self.feed_exact(buf, s, e),
        }
    }

    /// Elements `s..e` one at a time through `eval_reduce` (the definition).
    fn feed_exact(&mut self, buf: &Buffer, s: usize, e: usize) {
        for i in s..e {
            self.bits = eval_reduce(self.op, self.ty, self.bits, elem(buf, i));
        }
    }

    fn finish(&self) -> u64 {
        match (self.op, self.ty) {
            (ReduceOp::Add, VarType::F32) => {
                let t: f64 = self.f32s.iter().map(|&v| v as f64).sum::<f64>() + self.tail;
                (t as f32).to_bits() as u64
            }
            (ReduceOp::Add, VarType::F64) => (self.f64s.iter().sum::<f64>() + self.tail).to_bits(),
            _ => self.bits,
        }
    }
}

/// Reduce elements `s..e` of `buf` to bits.
fn reduce_range(op: ReduceOp, buf: &Buffer, s: usize, e: usize) -> u64 {
    let mut acc = Accum::new(op, buf.ty());
    acc.feed(buf, s, e);
    acc.finish()
}

/// Combine per-block partial results (f32 partials were carried as f32 bits). Float sums start
/// at +0.0, the identity `reduce_identity` gives: `Iterator::sum` of floats starts at -0.0, which
/// made the sum of an empty f32 array -0.0 (NumPy and f64 give +0.0).
fn combine(op: ReduceOp, ty: VarType, parts: &[u64]) -> u64 {
    match (op, ty) {
        (ReduceOp::Add, VarType::F32) => (parts
            .iter()
            .fold(0.0f64, |a, &b| a + f32::from_bits(b as u32) as f64)
            as f32)
            .to_bits() as u64,
        (ReduceOp::Add, VarType::Bool) => parts.iter().sum(),
        _ => parts
            .iter()
            .fold(reduce_identity(op, ty), |a, &b| eval_reduce(op, ty, a, b)),
    }
}

const RED_BLOCK: usize = 1 << 16;

/// Reduce a whole buffer to one value (bits). For `Bool` with `Add`, the count of true lanes.
/// This reads the result to the host (a `Read` op for observers).
pub fn reduce_bits(op: ReduceOp, buf: &Buffer) -> u64 {
    let parts = launch::map_blocks(buf.len, RED_BLOCK, |s, e| reduce_range(op, buf, s, e));
    notify(DeviceOpKind::Read, buf.len, &[buf]);
    combine(op, buf.ty(), &parts)
}

/// Reduce a buffer to a size-1 buffer (no host read of the data).
pub fn reduce(op: ReduceOp, buf: &Buffer) -> Result<Buffer> {
    let parts = launch::map_blocks(buf.len, RED_BLOCK, |s, e| reduce_range(op, buf, s, e));
    let out = Buffer::new(buf.ty(), 1, &|| "a reduction result".into())?;
    set_elem(&out, 0, combine(op, buf.ty(), &parts));
    notify(DeviceOpKind::Reduce(op), buf.len, &[buf, &out]);
    Ok(out)
}

/// Reduce each block of `block` consecutive elements (a partial last block too).
pub fn block_reduce(op: ReduceOp, buf: &Buffer, block: usize) -> Result<Buffer> {
    let n_out = buf.len.div_ceil(block);
    let out = Buffer::new(buf.ty(), n_out, &|| {
        format!("block reduction output of {n_out} × {}", buf.ty())
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
    let ty = buf.ty();
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

/// The fewest rows of the product per parallel task of `matmul`. Each task multiplies a band of
/// `a`'s rows by all of `b` and packs `b` for itself, so bands are as few as there are threads.
const MATMUL_MIN_ROWS: usize = 64;

/// The fewest columns of the product per parallel task when `matmul` splits columns.
const MATMUL_MIN_COLS: usize = 64;

/// How `matmul` splits an `m × n` product in bands of `band` rows over `threads` threads:
/// (row bands, column bands). Columns are split only when there are fewer row bands than
/// threads, into bands of at least `MATMUL_MIN_COLS` columns.
fn matmul_split(m: usize, n: usize, band: usize, threads: usize) -> (usize, usize) {
    let row_bands = m.div_ceil(band.max(1)).max(1);
    if row_bands >= threads {
        return (row_bands, 1);
    }
    let col_bands = threads.div_ceil(row_bands).min(n / MATMUL_MIN_COLS).max(1);
    (row_bands, col_bands)
}

/// The row-major product of `a` (`m × k`) and `b` (`k × n`), f32 or f64, on all cores. Callers
/// check the types and that `a.len == m·k`, `b.len == k·n`.
pub fn matmul(a: &Buffer, b: &Buffer, m: usize, k: usize, n: usize) -> Result<Buffer> {
    let ty = a.ty();
    assert!(
        a.len == m * k && b.len == k * n && b.ty() == ty && ty.is_float(),
        "kiln internal error: matmul operands do not match [{m}, {k}] × [{k}, {n}]"
    );
    let out = Buffer::new(ty, m * n, &|| format!("a matmul product of {m} × {n} {ty}"))?;
    if k == 0 {
        // SAFETY: the output holds m·n elements of ty.
        unsafe { std::ptr::write_bytes(out.ptr(), 0, out.bytes()) };
    } else if m * n > 0 {
        let (pa, pb, pc) = (a.ptr() as usize, b.ptr() as usize, out.ptr() as usize);
        let band = m.div_ceil(launch::threads()).max(MATMUL_MIN_ROWS);
        // Too few rows for every thread to get a band (an RNN step: a batch of 64 rows): split the
        // columns too, so that a [64, 256] × [256, 256] product still runs on every core. Each
        // element is the same dot product, accumulated over k in the same blocks, whichever task
        // computes it: the split never changes a bit of the result.
        let (row_bands, col_bands) = matmul_split(m, n, band, launch::threads());
        let col_band = n.div_ceil(col_bands);
        let task = |t: usize| {
            let (rb, cb) = (t / col_bands, t % col_bands);
            let (s, e) = (rb * band, ((rb + 1) * band).min(m));
            let (c0, c1) = (cb * col_band, ((cb + 1) * col_band).min(n));
            if s >= e || c0 >= c1 {
                return;
            }
            let (rows, cols) = (e - s, c1 - c0);
            // SAFETY: rows s..e of a (k each) and of the output (n each) lie inside their buffers
            // (a.len = m·k, out.len = m·n, checked above); b holds k·n elements and columns
            // c0..c1 < n of each of its rows are read with row stride n; the (row band, column
            // band) blocks of the output are disjoint between tasks.
            unsafe {
                if ty == VarType::F32 {
                    let (a, b, c) = (pa as *const f32, pb as *const f32, pc as *mut f32);
                    matrixmultiply::sgemm(
                        rows,
                        k,
                        cols,
                        1.0,
                        a.add(s * k),
                        k as isize,
                        1,
                        b.add(c0),
                        n as isize,
                        1,
                        0.0,
                        c.add(s * n + c0),
                        n as isize,
                        1,
                    );
                } else {
                    let (a, b, c) = (pa as *const f64, pb as *const f64, pc as *mut f64);
                    matrixmultiply::dgemm(
                        rows,
                        k,
                        cols,
                        1.0,
                        a.add(s * k),
                        k as isize,
                        1,
                        b.add(c0),
                        n as isize,
                        1,
                        0.0,
                        c.add(s * n + c0),
                        n as isize,
                        1,
                    );
                }
            }
        };
        let tasks = row_bands * col_bands;
        if tasks == 1 {
            task(0);
        } else {
            use rayon::prelude::*;
            launch::pool().install(|| (0..tasks).into_par_iter().for_each(task));
        }
    }
    notify(DeviceOpKind::Matmul { m, k, n }, m * n, &[a, b, &out]);
    Ok(out)
}

// ---------------------------------------------------------------------------------------------
// In-place permutations (update-in-place of transposes and flips)

/// A rearrangement of a buffer's elements that [`permute_in_place`] performs without a second
/// buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Permutation {
    /// The transpose of a row-major `rows × cols` matrix (blocked swaps when square, cycle
    /// following otherwise).
    Transpose { rows: usize, cols: usize },
    /// Reverse the middle axis of a row-major `outer × len × inner` block.
    Flip {
        outer: usize,
        len: usize,
        inner: usize,
    },
}

impl Permutation {
    /// The number of elements it rearranges.
    pub fn elements(&self) -> Option<usize> {
        match *self {
            Permutation::Transpose { rows, cols } => rows.checked_mul(cols),
            Permutation::Flip { outer, len, inner } => outer.checked_mul(len)?.checked_mul(inner),
        }
    }
}

/// A raw pointer the permutation tasks share; each task touches elements no other task does.
#[derive(Clone, Copy)]
struct Shared<T>(*mut T);
impl<T> Shared<T> {
    /// The pointer (a method, so that closures capture the whole `Send` wrapper, not the field).
    fn at(self, i: usize) -> *mut T {
        self.0.wrapping_add(i)
    }
}
// SAFETY: the tasks of one permutation write disjoint elements (see each use).
unsafe impl<T> Send for Shared<T> {}
// SAFETY: as above.
unsafe impl<T> Sync for Shared<T> {}

/// Rearrange `buf`'s elements as `p` says, in place. The caller guarantees that nothing else can
/// see the buffer while this runs (a uniquely held array) and that `p.elements() == buf.len`.
pub(crate) fn permute_in_place(buf: &Buffer, p: Permutation) {
    assert_eq!(p.elements(), Some(buf.len), "permutation of another length");
    let t = Instant::now();
    // on kiln's own pool, like kernel blocks
    launch::pool().install(|| match buf.ty().size_bytes() {
        1 => permute_typed::<u8>(buf, p),
        2 => permute_typed::<u16>(buf, p),
        4 => permute_typed::<u32>(buf, p),
        _ => permute_typed::<u64>(buf, p),
    });
    stats::DEVICE_OPS.fetch_add(1, Relaxed);
    stats::RUN_NS.fetch_add(t.elapsed().as_nanos() as u64, Relaxed);
}

fn permute_typed<T: Copy + Default + Send + Sync>(buf: &Buffer, p: Permutation) {
    use rayon::prelude::*;
    debug_assert_eq!(std::mem::size_of::<T>(), buf.ty().size_bytes());
    let base = Shared(buf.ptr() as *mut T);
    match p {
        Permutation::Transpose { rows, cols } if rows == cols => {
            let n = rows;
            const TILE: usize = 32;
            let tiles = n.div_ceil(TILE);
            // every pair of tiles (a, b) with a <= b trades places with its mirror image, so the
            // tasks touch disjoint elements. Both tiles are copied row by row into local arrays
            // and written back transposed, row by row: every access to the matrix runs along a
            // row (prefetchable), and the transposition happens in L1.
            (0..tiles * tiles)
                .into_par_iter()
                .filter(|k| k / tiles <= k % tiles)
                .for_each(|k| {
                    let (ta, tb) = (k / tiles, k % tiles);
                    let (r0, r1) = (ta * TILE, ((ta + 1) * TILE).min(n));
                    let (c0, c1) = (tb * TILE, ((tb + 1) * TILE).min(n));
                    let (h, w) = (r1 - r0, c1 - c0);
                    let mut a = [T::default(); TILE * TILE];
                    let mut b = [T::default(); TILE * TILE];
                    // (rows and columns stay below n, so every offset below lies inside the n·n
                    // elements; tile (ta, tb) and its mirror (tb, ta) belong to this task only)
                    for i in 0..h {
                        let src =
                            // SAFETY: a run of one tile's row inside the matrix, touched by this task alone.
                            unsafe { std::slice::from_raw_parts(base.at((r0 + i) * n + c0), w) };
                        a[i * TILE..i * TILE + w].copy_from_slice(src);
                    }
                    if ta != tb {
                        for i in 0..w {
                            // SAFETY: a run of one tile's row inside the matrix, touched by this task alone.
                            let src = unsafe {
                                std::slice::from_raw_parts(base.at((c0 + i) * n + r0), h)
                            };
                            b[i * TILE..i * TILE + h].copy_from_slice(src);
                        }
                    } else {
                        b = a;
                    }
                    // tile (ta, tb) gets the mirror's transpose, the mirror gets this one's
                    for i in 0..h {
                        // SAFETY: a run of one tile's row inside the matrix, touched by this task alone.
                        let dst = unsafe {
                            std::slice::from_raw_parts_mut(base.at((r0 + i) * n + c0), w)
                        };
                        for (j, d) in dst.iter_mut().enumerate() {
                            *d = b[j * TILE + i];
                        }
                    }
                    if ta != tb {
                        for i in 0..w {
                            // SAFETY: a run of one tile's row inside the matrix, touched by this task alone.
                            let dst = unsafe {
                                std::slice::from_raw_parts_mut(base.at((c0 + i) * n + r0), h)
                            };
                            for (j, d) in dst.iter_mut().enumerate() {
                                *d = a[j * TILE + i];
                            }
                        }
                    }
                });
        }
        Permutation::Transpose { rows, cols } => {
            // the element at k = i·cols + j goes to j·rows + i = k·rows mod (N − 1); follow each
            // cycle once (a bit per element says which are done)
            let n = rows * cols;
            if n < 3 {
                return;
            }
            let m = n - 1;
            let mut done = vec![0u64; n.div_ceil(64)];
            let dest = |k: usize| ((k as u128 * rows as u128) % m as u128) as usize;
            for start in 1..m {
                if done[start / 64] >> (start % 64) & 1 == 1 {
                    continue;
                }
                // SAFETY: start < n; the buffer is held by this call alone.
                let mut carried = unsafe { *base.at(start) };
                let mut k = start;
                loop {
                    let to = dest(k);
                    done[to / 64] |= 1 << (to % 64);
                    // SAFETY: to < m < n.
                    unsafe { std::ptr::swap(base.at(to), &mut carried) };
                    k = to;
                    if k == start {
                        break;
                    }
                }
            }
        }
        Permutation::Flip { outer, len, inner } => {
            let half = len / 2;
            // each (block, k) pair swaps row k with row len−1−k of its block: disjoint elements
            (0..outer * half).into_par_iter().for_each(|t| {
                let (o, k) = (t / half, t % half);
                let a = (o * len + k) * inner;
                let b = (o * len + (len - 1 - k)) * inner;
                // SAFETY: k < len − 1 − k < len, so both runs of `inner` elements lie inside the
                // block and do not overlap.
                unsafe { std::ptr::swap_nonoverlapping(base.at(a), base.at(b), inner) };
            });
        }
    }
}

#[cfg(test)]
mod extreme_tests {
    use super::*;
    use crate::op::{eval_binary, Op};

    /// The vectorised float min/max equal the element-by-element definition, −0/+0 and
    /// infinities included; a NaN sends the run to the exact path.
    #[test]
    fn float_extremes_match_the_definition() {
        let specials = [
            0.0f64,
            -0.0,
            1.5,
            -1.5,
            f64::INFINITY,
            f64::NEG_INFINITY,
            1e-310,
            -1e-310,
        ];
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        for n in [0usize, 1, 7, 8, 9, 16, 17, 100] {
            for trial in 0..50 {
                let xs: Vec<f64> = (0..n)
                    .map(|_| {
                        seed = seed
                            .wrapping_mul(6364136223846793005)
                            .wrapping_add(1442695040888963407);
                        if trial % 2 == 0 {
                            specials[(seed >> 60) as usize % specials.len()]
                        } else {
                            ((seed >> 11) as f64 / (1u64 << 53) as f64 - 0.5) * 1e3
                        }
                    })
                    .collect();
                for (max, op) in [(false, Op::Min), (true, Op::Max)] {
                    let bits: Vec<u64> = xs.iter().map(|v| v.to_bits()).collect();
                    let rop = if max { ReduceOp::Max } else { ReduceOp::Min };
                    let want = bits
                        .iter()
                        .fold(reduce_identity(rop, VarType::F64), |a, &b| {
                            eval_binary(op, VarType::F64, a, b)
                        });
                    let got = eval_reduce(
                        rop,
                        VarType::F64,
                        reduce_identity(rop, VarType::F64),
                        extreme_f64(&bits, max).unwrap(),
                    );
                    assert_eq!(got, want, "{xs:?} max={max}");
                    let b32: Vec<u32> = xs.iter().map(|&v| (v as f32).to_bits()).collect();
                    let want = b32
                        .iter()
                        .fold(reduce_identity(rop, VarType::F32), |a, &b| {
                            eval_binary(op, VarType::F32, a, b as u64)
                        });
                    let got = eval_reduce(
                        rop,
                        VarType::F32,
                        reduce_identity(rop, VarType::F32),
                        extreme_f32(&b32, max).unwrap() as u64,
                    );
                    assert_eq!(got, want, "{xs:?} f32 max={max}");
                }
            }
        }
        assert!(extreme_f64(&[1.0f64.to_bits(), f64::NAN.to_bits()], false).is_none());
        assert!(extreme_f32(&[(-f32::NAN).to_bits()], true).is_none());
    }
}

#[cfg(test)]
mod matmul_tests {
    use super::*;

    /// Splitting a product's columns between tasks (few rows, several threads) gives the same
    /// bits as one `sgemm` call over the whole product: the same dot products, accumulated in the
    /// same order.
    #[test]
    fn split_products_equal_one_call_bit_for_bit() {
        for (m, k, n) in [
            (64, 256, 256),
            (5, 7, 200),
            (1, 3, 130),
            (64, 33, 65),
            (3, 300, 64),
        ] {
            let a: Vec<f32> = (0..m * k)
                .map(|i| ((i * 7919) % 997) as f32 * 0.013 - 6.0)
                .collect();
            let b: Vec<f32> = (0..k * n)
                .map(|i| ((i * 104729) % 991) as f32 * 0.011 - 5.0)
                .collect();
            let up = |v: &[f32]| {
                let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
                upload(VarType::F32, &bytes).expect("upload")
            };
            let got = read(&matmul(&up(&a), &up(&b), m, k, n).expect("matmul"));
            let mut want = vec![0f32; m * n];
            // SAFETY: a, b and want hold m·k, k·n and m·n elements, row-major.
            unsafe {
                matrixmultiply::sgemm(
                    m,
                    k,
                    n,
                    1.0,
                    a.as_ptr(),
                    k as isize,
                    1,
                    b.as_ptr(),
                    n as isize,
                    1,
                    0.0,
                    want.as_mut_ptr(),
                    n as isize,
                    1,
                );
            }
            let want: Vec<u8> = want.iter().flat_map(|x| x.to_le_bytes()).collect();
            assert!(
                got == want,
                "{m}x{k}x{n}: split product differs from one call"
            );
        }
    }

    #[test]
    fn columns_are_split_only_when_rows_are_too_few() {
        // enough row bands: rows only
        assert_eq!(matmul_split(1024, 1024, 512, 2), (2, 1));
        // one row band of 64 on 2 threads: 2 column bands (of >= 64 columns)
        assert_eq!(matmul_split(64, 256, 64, 2), (1, 2));
        // too few columns to split
        assert_eq!(matmul_split(64, 100, 64, 4), (1, 1));
        // 16 threads, one row band, 256 columns: at most 4 bands of 64
        assert_eq!(matmul_split(64, 256, 64, 16), (1, 4));
        assert_eq!(matmul_split(0, 256, 64, 2).0, 1);
    }
}
