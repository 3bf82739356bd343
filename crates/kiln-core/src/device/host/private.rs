//! The privatised launch (see `privatise` for when and why): each block updates its own copy of
//! small reduce-scatter targets, filled with the reduction's identity, and the copies are folded
//! into the targets in block order. The copies are host memory the kernels address directly.

use crate::backend::{read_bits, write_bits, CompiledKernel, LaunchArgs};
use crate::kernel::Param;
use crate::op::{eval_reduce, reduce_identity, ReduceOp};
use crate::privatise::{worth_it, Private, MAX_TARGET_BYTES};

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

/// Run `kernel` over `[0, size)` in blocks of `block` lanes, privatising the targets of `private`
/// that [`worth_it`] (every target, for an exclusive kernel); returns `false` (having run
/// nothing) when none is, for the caller's usual launch.
///
/// # Safety
/// As [`super::run::launch`]: `ptrs`/`lens` describe live buffers matching `params`.
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
