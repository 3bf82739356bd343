//! Scatter-reductions into few bins: per-block private copies of small targets.
//!
//! A `scatter_reduce` whose target has few elements (a histogram, k-means sums and counts) sends
//! every lane of every block to the same handful of elements: with several threads each update
//! fights for one cache line. This module owns the launch that avoids it. When a kernel's
//! reduce-scatter target is small next to the launch (see [`worth_it`]), each block accumulates
//! into its own copy of the target, filled with the reduction's identity, through plain
//! (non-atomic) updates; the copies are then folded into the target one block after another.
//!
//! Ordering guarantee: within a block, lanes update the copy in lane order (as the one-block
//! launch always did); the target then becomes `((t ⊕ c₀) ⊕ c₁) ⊕ …` in block order. A privatised
//! launch therefore gives the same bits on every run, whatever the thread count or scheduling —
//! unlike the shared path, whose float sums depend on which thread got there first. Integer
//! reductions, min/max (total orders) and and/or are exact either way. A launch of one block never
//! takes this path, so its result is the one it always was.
//!
//! Which parameters qualify is a property of the kernel ([`Private::of`], recorded by frozen
//! functions so that a replay takes the same path); whether it pays is decided per launch, from the
//! target's length and the number of blocks.

use crate::backend::{read_bits, write_bits, CompiledKernel, LaunchArgs};
use crate::kernel::{Kernel, Param, ParamKind};
use crate::op::{eval_reduce, reduce_identity, Op, ReduceOp};

/// At most this many privatised targets per kernel (k-means in 3-d has four: three sums, a count).
pub const MAX_TARGETS: usize = 4;

/// Largest target (bytes) that is privatised: one copy per block must stay in the core's cache.
pub const MAX_TARGET_BYTES: usize = 16 * 1024;

/// The reduce-scatter targets of a kernel that may be privatised: parameters written only by
/// scatters of one reduction (never read, never plainly overwritten).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Private {
    n: u8,
    targets: [(u32, ReduceOp); MAX_TARGETS],
    /// The kernel's scatters into these targets are plain read-modify-writes ([`mark_exclusive`]):
    /// every launch must privatise them all or run its blocks one after another on one thread.
    exclusive: bool,
}

impl Default for Private {
    fn default() -> Self {
        Private {
            n: 0,
            targets: [(0, ReduceOp::None); MAX_TARGETS],
            exclusive: false,
        }
    }
}

impl Private {
    /// The candidates of `kernel` (the first [`MAX_TARGETS`] of them).
    ///
    /// ```
    /// use kiln_core::kernel::Kernel;
    /// use kiln_core::privatise::Private;
    /// assert!(Private::of(&Kernel::default()).is_empty());
    /// ```
    pub fn of(kernel: &Kernel) -> Private {
        let mut p = Private::default();
        for (i, param) in kernel.params.iter().enumerate() {
            if param.kind != ParamKind::Indexed || p.n as usize == MAX_TARGETS {
                continue;
            }
            let mut rop = None;
            let mut ok = true;
            for inst in &kernel.insts {
                let uses = matches!(inst.op, Op::Gather | Op::Scatter(_)) && inst.param() == i;
                if !uses {
                    continue;
                }
                match inst.op {
                    Op::Scatter(r) if r != ReduceOp::None && rop.is_none_or(|x| x == r) => {
                        rop = Some(r)
                    }
                    _ => ok = false,
                }
            }
            if let (true, Some(r)) = (ok, rop) {
                p.targets[p.n as usize] = (i as u32, r);
                p.n += 1;
            }
        }
        p.exclusive = kernel.insts.iter().any(|i| i.exclusive());
        p
    }

    /// Whether the kernel's scatters into the targets are plain read-modify-writes: a launch of
    /// several blocks must privatise every target (see [`mark_exclusive`]).
    pub fn exclusive(&self) -> bool {
        self.exclusive
    }

    /// The candidates: (parameter, reduction).
    pub fn targets(&self) -> &[(u32, ReduceOp)] {
        &self.targets[..self.n as usize]
    }

    pub fn is_empty(&self) -> bool {
        self.n == 0
    }
}

/// Compile the scatters into `kernel`'s privatisable targets as plain (non-atomic) updates where
/// every such target is small enough to privatise: `len(p)` gives parameter `p`'s length in
/// elements. All or nothing, because a launch then guarantees exclusivity for the whole kernel: it
/// privatises every target, or (a single block, a copy not worth folding, a target bound to two
/// parameters) runs its blocks one after another on one thread. Returns whether it marked any.
/// Scatters into other parameters (a target also gathered from) stay atomic.
///
/// The bits do not change: a privatised launch already updates each copy lane after lane and
/// folds the copies in block order; atomic or not, those are the same additions in the same order.
///
/// ```
/// use kiln_core::kernel::Kernel;
/// assert!(!kiln_core::privatise::mark_exclusive(&mut Kernel::default(), |_| 0));
/// ```
pub fn mark_exclusive(kernel: &mut Kernel, len: impl Fn(usize) -> usize) -> bool {
    // (`KILN_PLAIN_SCATTER=0` keeps every scatter atomic: to compare, or to rule this path out)
    if !crate::config::plain_scatter() {
        return false;
    }
    let private = Private::of(kernel);
    let targets = private.targets();
    let small = |&(p, _): &(u32, ReduceOp)| {
        let p = p as usize;
        len(p) * kernel.params[p].ty.size_bytes() <= MAX_TARGET_BYTES
    };
    if targets.is_empty() || !targets.iter().all(small) {
        return false;
    }
    for inst in &mut kernel.insts {
        // (a scatter into another target, e.g. one also gathered from, stays atomic)
        if matches!(inst.op, Op::Scatter(_))
            && targets.iter().any(|&(p, _)| p as usize == inst.param())
        {
            inst.imm |= crate::kernel::SCATTER_EXCLUSIVE;
        }
    }
    true
}

/// Whether a target of `len` elements of `bytes` each is privatised in a launch of `size` lanes
/// in `blocks` blocks: more than one block, a copy small enough to stay in cache, and folding the
/// copies (`blocks × len` updates) cheap next to the launch (at most one per 8 lanes).
///
/// ```
/// use kiln_core::privatise::worth_it;
/// assert!(worth_it(8, 4, 1_000_000, 62)); // k-means: 8 f32 sums over 1M lanes
/// assert!(!worth_it(8, 4, 16_000, 1)); // one block: the target is updated directly
/// assert!(!worth_it(1 << 20, 4, 1_000_000, 62)); // a big target: shared, as before
/// ```
pub fn worth_it(len: usize, bytes: usize, size: usize, blocks: usize) -> bool {
    blocks > 1
        && len > 0
        && len * bytes <= MAX_TARGET_BYTES
        && len.saturating_mul(blocks) <= size / 8
}

/// What a copy starts from: the reduction's identity, with −0.0 for float sums (+0.0 is not one:
/// −0.0 + +0.0 is +0.0, which would turn a target of −0.0 that only −0.0s were added to positive).
fn identity(rop: ReduceOp, ty: crate::ty::VarType) -> u64 {
    use crate::ty::VarType;
    match (rop, ty) {
        (ReduceOp::Add, VarType::F32) => (-0.0f32).to_bits() as u64,
        (ReduceOp::Add, VarType::F64) => (-0.0f64).to_bits(),
        _ => reduce_identity(rop, ty),
    }
}

/// One privatised target of a launch.
struct Copy {
    param: usize,
    rop: ReduceOp,
    ty: crate::ty::VarType,
    len: usize,
    /// Byte offset of this target's copy inside a block's scratch.
    offset: usize,
}

/// Run `spec`'s kernel over `[0, size)` in its blocks, privatising the targets of its `private`
/// that [`worth_it`]; returns `false` (having run nothing) when none is, for the caller's usual
/// launch.
///
/// # Safety
/// As [`crate::launch::launch`]: `ptrs`/`lens` describe live buffers matching `params`.
/// (It takes the launch's parts rather than `device::LaunchSpec`: the device layer calls down
/// here, never the other way.)
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn launch(
    kernel: &dyn CompiledKernel,
    params: &[Param],
    private: &Private,
    block: usize,
    ptrs: &[*mut u8],
    lens: &[u64],
    status: *const std::sync::atomic::AtomicU64,
    size: usize,
) -> bool {
    let block = block.max(1).next_multiple_of(crate::launch::BLOCK_ALIGN);
    let blocks = size.div_ceil(block);
    let mut copies = Vec::new();
    let mut stride = 0;
    let mut serial = false;
    for &(p, rop) in private.targets() {
        let p = p as usize;
        let (ty, len) = (params[p].ty, lens[p] as usize);
        // a buffer bound to two parameters (read elsewhere in the kernel) stays shared
        let aliased = ptrs
            .iter()
            .enumerate()
            .any(|(q, &other)| q != p && other == ptrs[p]);
        let fits = blocks > 1 && len > 0 && len * ty.size_bytes() <= MAX_TARGET_BYTES;
        if private.exclusive() {
            // plain updates: every target the kernel can touch gets a copy per block, else the
            // blocks run one after another (folding is at most 4096 elements per block)
            if len == 0 {
                continue; // (every lane is out of range: nothing is updated)
            }
            if aliased || !fits {
                serial = true;
                break;
            }
        } else if aliased || !worth_it(len, ty.size_bytes(), size, blocks) {
            continue;
        }
        copies.push(Copy {
            param: p,
            rop,
            ty,
            len,
            offset: stride,
        });
        // (the slack vector code may touch past the end, and a cache line of its own)
        stride += (len * ty.size_bytes() + crate::alloc::SLACK_BYTES).next_multiple_of(64);
    }
    if serial || (private.exclusive() && copies.is_empty()) {
        if blocks <= 1 {
            return false; // (one block: the usual launch runs it inline)
        }
        let args = LaunchArgs {
            ptrs: ptrs.as_ptr(),
            lens: lens.as_ptr(),
            status,
        };
        for b in 0..blocks {
            let (s, e) = (b * block, ((b + 1) * block).min(size));
            // SAFETY: the caller's buffers are live; one thread runs the blocks in order, so the
            // kernel's plain updates do not race.
            unsafe { kernel.run(&args, s as u64, e as u64) };
        }
        return true;
    }
    if copies.is_empty() {
        return false;
    }
    // one allocation for every block's copies, 64-byte aligned, filled with the identities
    let mut scratch = vec![0u64; (stride * blocks + 64) / 8];
    let base = {
        let p = scratch.as_mut_ptr() as *mut u8;
        p.wrapping_add(p.align_offset(64))
    };
    for b in 0..blocks {
        for c in &copies {
            let id = identity(c.rop, c.ty);
            let at = base.wrapping_add(b * stride + c.offset);
            for i in 0..c.len {
                // SAFETY: `at` starts a copy of `len` elements inside `scratch`.
                unsafe { write_bits(at, c.ty, i, id) };
            }
        }
    }
    // (addresses, not pointers, cross into the pool's threads)
    let base_addr = base as usize;
    let addrs: Vec<usize> = ptrs.iter().map(|&p| p as usize).collect();
    let status_addr = status as usize;
    crate::launch::for_blocks(size, block, |s, e| {
        let b = s / block;
        let mut mine: Vec<*mut u8> = addrs.iter().map(|&a| a as *mut u8).collect();
        for c in &copies {
            mine[c.param] = (base_addr + b * stride + c.offset) as *mut u8;
        }
        let args = LaunchArgs {
            ptrs: mine.as_ptr(),
            lens: lens.as_ptr(),
            status: status_addr as *const std::sync::atomic::AtomicU64,
        };
        let lo = base_addr + b * stride;
        crate::backend::set_private_range(lo, lo + stride);
        // SAFETY: the caller's buffers are live for the launch; block `b`'s copies hold `len`
        // elements (plus slack) each, used by this block only, so plain updates do not race.
        unsafe { kernel.run(&args, s as u64, e as u64) };
        crate::backend::set_private_range(0, 0);
    });
    // fold the copies into the targets in block order
    for c in &copies {
        let target = ptrs[c.param];
        for b in 0..blocks {
            let at = base.wrapping_add(b * stride + c.offset) as *const u8;
            for i in 0..c.len {
                // SAFETY: `target` holds `len` elements (its parameter's length), `at` a copy of
                // as many; every block has finished.
                unsafe {
                    let v = read_bits(at, c.ty, i);
                    let old = read_bits(target, c.ty, i);
                    write_bits(target, c.ty, i, eval_reduce(c.rop, c.ty, old, v));
                }
            }
        }
    }
    drop(scratch);
    true
}
