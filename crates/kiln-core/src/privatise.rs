//! Scatter-reductions into few bins: per-block private copies of small targets.
//!
//! A `scatter_reduce` whose target has few elements (a histogram, k-means sums and counts) sends
//! every lane of every block to the same handful of elements: with several threads each update
//! fights for one cache line. This module decides when and which targets are privatised; the
//! launch that does it is the host device's (`device::host::private`). When a kernel's
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

use crate::kernel::{Kernel, ParamKind};
use crate::op::{Op, ReduceOp};

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
