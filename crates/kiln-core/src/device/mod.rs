//! Device operations: the only code that touches buffer contents.
//!
//! Every effect on memory is one of the ops listed in [`DeviceOpKind`]: kernel launches, reductions,
//! block reductions, prefix sums, compaction, copies, uploads and reads. Each op states how its
//! output size follows from its input sizes ([`SizeRule`]) so that a recorder (function freezing) can
//! replay the stream with other sizes without guessing. Observers registered with [`observe`] see
//! every op as it executes. The set is open: later features add kinds.
//!
//! Two layers. The [`Device`] trait is everything that touches buffer contents, with one host
//! implementation ([`Host`], in `host/`: the pool's launches, reductions, prefix sums, compaction,
//! copies, uploads and reads, matmul, in-place permutations); a CUDA device would be another. The
//! functions of this module are the observed layer that wraps the current device: each runs the op
//! on [`current`], then reports it ([`DeviceOpRecord`]) to the observers and, on a thread that
//! records a frozen function, to the recorder (`freeze::record`, through [`OpRecorder`]): the
//! recorder sees every op by wrapping the device, not by hooks in the layers above. Generic
//! uploads (`upload_iter`, typed slices) go to the host directly: a device with memory of its own
//! would stage them.

use crate::backend::{CompiledKernel, STATUS_LEN};
use crate::error::Result;
use crate::kernel::KernelHash;
use crate::kernel::Param;
use crate::launch;
use crate::op::ReduceOp;
use crate::registry::Buffer;
use crate::size::ExprId;
use crate::stats;
use crate::ty::VarType;
use parking_lot::RwLock;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

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
        /// The kernel's IR when the launch has it (not a replay).
        ir: Option<&'a crate::kernel::Kernel>,
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
    /// Row-major `[m, k] × [k, n]` product of f32 or f64 matrices, each operand stored as
    /// itself or transposed (`trans`). Buffers: a, b, product.
    Matmul {
        m: usize,
        k: usize,
        n: usize,
        trans: Trans,
    },
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
    history::note(&rec);
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
    /// The kernel's IR, for a recording (which inputs each output may take at replay); `None`
    /// for launches that are replays already.
    pub ir: Option<&'a crate::kernel::Kernel>,
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
            ir: None,
        }
    }
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

/// Lanes per block of a fused reduction whose result must not depend on its kernel (the pending
/// reductions the scheduler resolves): [`launch::DEFAULT_BLOCK`], the block every light kernel
/// (up to 16 instructions) ran its reductions in, so that their bits are what they were.
pub const REDUCE_BLOCK: usize = launch::DEFAULT_BLOCK;

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

pub mod history;
mod host;
pub use host::Host;

/// Everything that touches buffer contents: the seam a device other than the host implements.
/// The observed functions of this module call it (see the module comment); callers use those.
pub trait Device: Send + Sync {
    /// The device's name, for logs.
    fn name(&self) -> &'static str;
    /// Launch a kernel over `size` lanes, one buffer per parameter; returns the launch status.
    fn launch(&self, spec: LaunchSpec, size: usize, buffers: &[&Buffer]) -> [u64; STATUS_LEN];
    /// A stencil group's interior and border launches (see [`launch_split`]).
    #[allow(clippy::too_many_arguments)]
    fn launch_split(
        &self,
        general: LaunchSpec,
        gbufs: &[&Buffer],
        interior: LaunchSpec,
        ibufs: &[(&Buffer, i64)],
        size: usize,
        plan: &Arc<crate::stencil::SplitPlan>,
        through_gaps: bool,
    ) -> [u64; STATUS_LEN];
    /// A launch whose single output is reduced as it is produced (see [`launch_reduce`]).
    fn launch_reduce(
        &self,
        spec: LaunchSpec,
        size: usize,
        inputs: &[&Buffer],
        out_param: usize,
        op: ReduceOp,
    ) -> Result<(Buffer, u64, [u64; STATUS_LEN])>;
    /// A launch whose outputs feed several reductions in one pass (see [`launch_reduce_many`]).
    fn launch_reduce_many(
        &self,
        spec: LaunchSpec,
        size: usize,
        inputs: &[&Buffer],
        reds: &[(usize, ReduceOp)],
    ) -> Result<(Vec<Buffer>, Vec<u64>, [u64; STATUS_LEN])>;
    /// A launch whose output is reduced block by block as it is produced.
    fn launch_block_reduce(
        &self,
        spec: LaunchSpec,
        size: usize,
        inputs: &[&Buffer],
        out_param: usize,
        op: ReduceOp,
        block: usize,
    ) -> Result<(Buffer, [u64; STATUS_LEN])>;
    /// A new buffer of `len` elements of `ty` whose contents are unspecified (kernel outputs,
    /// rows a scan writes); `what` names it in an allocation failure's message.
    fn alloc(&self, ty: VarType, len: usize, what: &dyn Fn() -> String) -> Result<Buffer>;
    /// A new buffer holding `bytes` (little-endian elements of `ty`).
    fn upload(&self, ty: VarType, bytes: &[u8]) -> Result<Buffer>;
    /// A zero-filled buffer (placeholders of refused requests).
    fn zeros(&self, ty: VarType, len: usize) -> Result<Buffer>;
    /// A copy of `src` in a new buffer.
    fn copy(&self, src: &Buffer) -> Result<Buffer>;
    /// The buffer's contents as bytes, on the host.
    fn read(&self, buf: &Buffer) -> Vec<u8>;
    /// A whole buffer reduced to one value, read to the host.
    fn reduce_bits(&self, op: ReduceOp, buf: &Buffer) -> u64;
    /// A buffer reduced to a size-1 buffer.
    fn reduce(&self, op: ReduceOp, buf: &Buffer) -> Result<Buffer>;
    /// Buffers of one length reduced in one pass.
    fn reduce_many(&self, reds: &[(ReduceOp, &Buffer)]) -> Result<Vec<Buffer>>;
    /// Each block of `block` elements reduced.
    fn block_reduce(&self, op: ReduceOp, buf: &Buffer, block: usize) -> Result<Buffer>;
    /// An inclusive or exclusive prefix sum.
    fn prefix_sum(&self, buf: &Buffer, exclusive: bool) -> Result<Buffer>;
    /// The indices of a mask's true lanes.
    fn compress(&self, buf: &Buffer) -> Result<Buffer>;
    /// A row-major `[m, k] × [k, n]` product (operands stored transposed where `trans` says).
    fn matmul(
        &self,
        a: &Buffer,
        b: &Buffer,
        m: usize,
        k: usize,
        n: usize,
        trans: Trans,
    ) -> Result<Buffer>;
    /// Rearrange a uniquely held buffer's elements in place.
    fn permute_in_place(&self, buf: &Buffer, p: Permutation);
}

/// The device evaluations run on: the host (the only implementation so far).
///
/// ```
/// assert_eq!(kiln_core::device::current().name(), "host");
/// ```
pub fn current() -> &'static dyn Device {
    static HOST: Host = Host;
    &HOST
}

/// Launch a kernel over `size` lanes with `buffers` (one per parameter, in order).
pub fn launch_kernel(spec: LaunchSpec, size: usize, buffers: &[&Buffer]) -> [u64; STATUS_LEN] {
    history::start();
    let st = current().launch(spec, size, buffers);
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
            ir: spec.ir,
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
#[allow(clippy::too_many_arguments)]
pub fn launch_split(
    general: LaunchSpec,
    gbufs: &[&Buffer],
    interior: LaunchSpec,
    ibufs: &[(&Buffer, i64)],
    size: usize,
    plan: &Arc<crate::stencil::SplitPlan>,
    through_gaps: bool,
) -> [u64; STATUS_LEN] {
    history::start();
    let st = current().launch_split(general, gbufs, interior, ibufs, size, plan, through_gaps);
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
    history::start();
    let (out, bits, st) = current().launch_reduce(spec, size, inputs, out_param, op)?;
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

/// Run a kernel with several outputs and reduce each as it is produced (sibling reductions in
/// one pass: every lane is computed once and feeds every reduction). `reds`: (output parameter,
/// operation); an output may be reduced more than once. Each result has the bits that reducing
/// its output alone with the same block gives. Returns one size-1 buffer and its bits per entry
/// of `reds`, and the launch status.
pub fn launch_reduce_many(
    spec: LaunchSpec,
    size: usize,
    inputs: &[&Buffer],
    reds: &[(usize, ReduceOp)],
) -> Result<(Vec<Buffer>, Vec<u64>, [u64; STATUS_LEN])> {
    history::start();
    let (outs, bits, st) = current().launch_reduce_many(spec, size, inputs, reds)?;
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
    history::start();
    let (out, st) = current().launch_block_reduce(spec, size, inputs, out_param, op, block)?;
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
    let buf = current().upload(ty, bytes)?;
    notify(DeviceOpKind::Upload, buf.len, &[&buf]);
    Ok(buf)
}

/// A new buffer of `len` elements written from `values` in one pass (no staging copy): for host
/// data that is not contiguous, such as a strided or transposed ndarray view. Fewer values than
/// `len` is an error; extra ones are ignored.
pub fn upload_iter<T: crate::ty::Scalar>(
    len: usize,
    values: impl IntoIterator<Item = T>,
) -> Result<Buffer> {
    let buf = host::memory::upload_iter(len, values)?;
    notify(DeviceOpKind::Upload, len, &[&buf]);
    Ok(buf)
}

/// A new buffer of `len` elements whose contents are unspecified, on the current device: every
/// kernel output, replayed output and uninitialised array is allocated here. Not a device op (no
/// contents move): observers see the buffer when an op writes it.
///
/// ```
/// let buf = kiln_core::device::alloc(kiln_core::VarType::F32, 10, &|| "an example".into()).unwrap();
/// assert_eq!(buf.len, 10);
/// ```
pub fn alloc(ty: VarType, len: usize, what: &dyn Fn() -> String) -> Result<Buffer> {
    current().alloc(ty, len, what)
}

/// A zero-filled buffer that stands in for the result of a request refused while a symbolic body
/// is traced (never read for real: the trace is thrown away). Not a device op: nothing records it.
pub(crate) fn placeholder_zeros(ty: VarType, len: usize) -> Result<Buffer> {
    current().zeros(ty, len)
}

/// A copy of `src` in a new buffer.
pub fn copy_buffer(src: &Buffer) -> Result<Buffer> {
    let buf = current().copy(src)?;
    notify(DeviceOpKind::Memcpy, src.len, &[src, &buf]);
    Ok(buf)
}

/// The buffer's contents as bytes.
pub fn read(buf: &Buffer) -> Vec<u8> {
    notify(DeviceOpKind::Read, buf.len, &[buf]);
    current().read(buf)
}

/// Reduce a whole buffer to one value (bits). For `Bool` with `Add`, the count of true lanes.
/// This reads the result to the host (a `Read` op for observers).
pub fn reduce_bits(op: ReduceOp, buf: &Buffer) -> u64 {
    notify(DeviceOpKind::Read, buf.len, &[buf]);
    current().reduce_bits(op, buf)
}

/// Reduce a buffer to a size-1 buffer (no host read of the data).
pub fn reduce(op: ReduceOp, buf: &Buffer) -> Result<Buffer> {
    history::start();
    let out = current().reduce(op, buf)?;
    notify(DeviceOpKind::Reduce(op), buf.len, &[buf, &out]);
    Ok(out)
}

/// Reduce evaluated buffers of one length in one pass (memory is read once for all of them; a
/// minimum and a maximum of one array: one pass). Each result has the bits [`reduce`] gives.
pub fn reduce_many(reds: &[(ReduceOp, &Buffer)]) -> Result<Vec<Buffer>> {
    history::start();
    let outs = current().reduce_many(reds)?;
    let n = reds.first().map_or(0, |r| r.1.len);
    let ops: Vec<ReduceOp> = reds.iter().map(|r| r.0).collect();
    let mut all: Vec<&Buffer> = reds.iter().map(|r| r.1).collect();
    all.extend(outs.iter());
    notify(DeviceOpKind::ReduceMany(&ops), n, &all);
    Ok(outs)
}

/// Reduce each block of `block` consecutive elements (a partial last block too).
pub fn block_reduce(op: ReduceOp, buf: &Buffer, block: usize) -> Result<Buffer> {
    history::start();
    let out = current().block_reduce(op, buf, block)?;
    notify(
        DeviceOpKind::BlockReduce { op, block },
        buf.len,
        &[buf, &out],
    );
    Ok(out)
}

/// Inclusive or exclusive prefix sum (wrapping for integers, IEEE for floats; bools count as 0/1
/// into u32).
pub fn prefix_sum(buf: &Buffer, exclusive: bool) -> Result<Buffer> {
    history::start();
    let out = current().prefix_sum(buf, exclusive)?;
    notify(DeviceOpKind::PrefixSum { exclusive }, buf.len, &[buf, &out]);
    Ok(out)
}

/// Indices (u32) of the true lanes of a mask, in order.
pub fn compress(buf: &Buffer) -> Result<Buffer> {
    history::start();
    let out = current().compress(buf)?;
    notify(DeviceOpKind::Compress, buf.len, &[buf, &out]);
    Ok(out)
}

/// Row-major `[m, k] × [k, n]` product of f32 or f64 matrices.
pub fn matmul(
    a: &Buffer,
    b: &Buffer,
    m: usize,
    k: usize,
    n: usize,
    trans: Trans,
) -> Result<Buffer> {
    history::start();
    let out = current().matmul(a, b, m, k, n, trans)?;
    notify(
        DeviceOpKind::Matmul { m, k, n, trans },
        m * n,
        &[a, b, &out],
    );
    Ok(out)
}

/// How a matrix product's operands are stored: `a` set, the first operand `[m, k]` is held as
/// its transpose (`[k, m]` row-major); `b` set, the second `[k, n]` as `[n, k]`. A gradient's
/// products (`C·Bᵀ`, `Aᵀ·C`) read the forward operands so, without copying them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Trans {
    pub a: bool,
    pub b: bool,
}

/// Rearrange `buf`'s elements as `p` says, in place. The caller guarantees that nothing else can
/// see the buffer while this runs (a uniquely held array) and that `p.elements() == buf.len`.
/// Counted as a device op; not reported to observers (a frozen function's replay decides in place
/// again itself).
pub(crate) fn permute_in_place(buf: &Buffer, p: Permutation) {
    current().permute_in_place(buf, p)
}
