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
}

impl Default for Private {
    fn default() -> Self {
        Private {
            n: 0,
            targets: [(0, ReduceOp::None); MAX_TARGETS],
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
                let uses = matches!(inst.op, Op::Gather | Op::Scatter(_)) && inst.imm == i as u64;
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
        p
    }

    /// The candidates: (parameter, reduction).
    pub fn targets(&self) -> &[(u32, ReduceOp)] {
        &self.targets[..self.n as usize]
    }

    pub fn is_empty(&self) -> bool {
        self.n == 0
    }
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
pub(crate) unsafe fn launch(
    spec: &crate::device::LaunchSpec,
    ptrs: &[*mut u8],
    lens: &[u64],
    status: *const std::sync::atomic::AtomicU64,
    size: usize,
) -> bool {
    let (kernel, params, private, block): (&dyn CompiledKernel, &[Param], &Private, usize) =
        (spec.kernel.as_ref(), spec.params, &spec.private, spec.block);
    let block = block.max(1).next_multiple_of(crate::launch::BLOCK_ALIGN);
    let blocks = size.div_ceil(block);
    let mut copies = Vec::new();
    let mut stride = 0;
    for &(p, rop) in private.targets() {
        let p = p as usize;
        let (ty, len) = (params[p].ty, lens[p] as usize);
        // a buffer bound to two parameters (read elsewhere in the kernel) stays shared
        let aliased = ptrs
            .iter()
            .enumerate()
            .any(|(q, &other)| q != p && other == ptrs[p]);
        if aliased || !worth_it(len, ty.size_bytes(), size, blocks) {
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
