//! Kernel launches on the host: plain, tiled, privatised and split (stencil) launches, and the
//! fused reductions that consume a kernel's output block by block into cache-sized scratch.

use super::super::*;
use super::reduce::{combine, reduce_range, set_elem, Accum};
use crate::backend::{
    CompiledKernel, LaunchArgs, STATUS_LEN, STATUS_LOOP_TRUNCATED, STATUS_OOB_READS,
    STATUS_OOB_WRITES,
};
use crate::error::Result;
use crate::launch;
use crate::op::ReduceOp;
use crate::registry::Buffer;
use crate::stats;
use crate::ty::VarType;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Instant;

/// Count a finished launch in the statistics; returns its status (out-of-range reads, writes).
pub(super) fn count_launch(
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
pub(in crate::device) fn launch_kernel(
    spec: LaunchSpec,
    size: usize,
    buffers: &[&Buffer],
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
    // SAFETY: the scheduler (or a replay, which checks the same) built `buffers` to match the
    // kernel's parameters: inputs hold `size` (or 1, broadcast) elements, outputs were allocated for
    // `size`, indexed buffers carry their length; all stay alive (borrowed) for the launch.
    unsafe {
        // (a kernel with plain scatter updates never runs in tiles: `privatise` owns its launch)
        if spec.tile_cols > 0 && launch::can_tile(size, spec.tile_cols) && !spec.private.exclusive()
        {
            super::run::launch_tiled(spec.kernel.as_ref(), &args, size, spec.tile_cols)
        } else if spec.private.is_empty()
            || !super::private::launch(
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
            super::run::launch(spec.kernel.as_ref(), &args, size, spec.block)
        }
    };
    count_launch(t, &status, spec.hash)
}

/// Run a stencil group (see `stencil`): the interior kernel over the plan's interior lanes, its
/// taps reading `ibufs` at `lane + offset`, then the general kernel over the border lanes. When
/// the plan does not fit the buffers (a shifted read would leave its buffer), the general kernel
/// runs every lane instead: it is correct everywhere. Counts as one launch.
pub(in crate::device) fn launch_split(
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
    if !plan.worth_splitting(through_gaps) {
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
        super::run::launch_split(
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
    st
}

/// Run a kernel and reduce its single output as it is produced: each block writes into a scratch
/// buffer of block size (cache-resident) that is reduced right away, so the full-size array never
/// exists. `inputs` has one buffer per kernel parameter except the output at `out_param`. Returns
/// the size-1 result buffer, its bits (for `Bool` + `Add`, the number of true lanes) and the
/// launch status.
pub(in crate::device) fn launch_reduce(
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
pub(in crate::device) fn launch_reduce_many(
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
    Ok((outs, bits, st))
}

/// Lanes computed per kernel call of a fused block reduction (into a scratch buffer that stays in
/// cache; a multiple of 16 so that pieces of one block reduce to the same bits as the whole).
const FUSED_PIECE: usize = 16_384;

/// Run a kernel and reduce each block of `block` consecutive lanes of its single output as the
/// output is produced (into per-task scratch, never a full-size array). `inputs` has one buffer per
/// kernel parameter except the output at `out_param`. Returns the `⌈size / block⌉` results (the
/// same bits as evaluating the output and calling [`block_reduce`]) and the launch status.
pub(in crate::device) fn launch_block_reduce(
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
    Ok((out, st))
}
