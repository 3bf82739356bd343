//! The reference interpreter: the executable specification of kernel IR.
//!
//! It runs a kernel over a block in chunks of lanes, one instruction at a time, calling the scalar
//! semantics in `op` for every lane. It is deliberately simple and never clever: compiled backends
//! are tested against it, so any disagreement is a bug in them (or in the spec comment in `op`).

// Lane loops index several operand columns at once; explicit indices read clearer than zips here.
#![allow(clippy::needless_range_loop)]

use super::{
    read_bits, scatter_lane, write_bits, Backend, BackendKind, CompiledKernel, LaunchArgs,
    STATUS_LOOP_TRUNCATED, STATUS_OOB_READS,
};
use crate::error::Result;
use crate::kernel::{Kernel, ParamKind};
use crate::op::{eval_binary, eval_ternary, eval_unary, Op};
use crate::ty::VarType;
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// The interpreter backend.
pub struct Interp;

impl Backend for Interp {
    fn kind(&self) -> BackendKind {
        BackendKind::Interp
    }
    fn compile(&self, kernel: &Kernel) -> Result<Arc<dyn CompiledKernel>> {
        let (resume, end, owner) = region_marks(kernel);
        Ok(Arc::new(InterpKernel {
            kernel: kernel.clone(),
            resume,
            end,
            owner,
        }))
    }
}

struct InterpKernel {
    kernel: Kernel,
    /// See `region_marks`.
    resume: Vec<usize>,
    end: Vec<usize>,
    owner: Vec<usize>,
}

/// An open region while interpreting: the lanes active when it was entered.
enum Frame {
    /// `pending`: next values of its phis, applied together at its `endloop` (a next value may
    /// be another phi, and a nested loop's end must not apply them early).
    Loop {
        saved: Vec<bool>,
        iter: u64,
        pending: Vec<(usize, Vec<u64>)>,
    },
    Switch {
        saved: Vec<bool>,
    },
}

/// For each region-opening instruction, where its body resumes and ends: a loop's first
/// instruction after its phis and its `endloop`; a switch's `endswitch`. And for each `while` its
/// loop, for each `yield` its switch.
fn region_marks(k: &Kernel) -> (Vec<usize>, Vec<usize>, Vec<usize>) {
    let n = k.insts.len();
    let (mut resume, mut end, mut owner) = (vec![0; n], vec![0; n], vec![0; n]);
    let mut open: Vec<usize> = Vec::new();
    for (i, inst) in k.insts.iter().enumerate() {
        match inst.op {
            Op::LoopBegin | Op::Switch => open.push(i),
            Op::LoopEnd | Op::SwitchEnd => {
                open.pop();
            }
            Op::LoopCond | Op::Yield => owner[i] = *open.last().expect("verified"),
            _ => {}
        }
        match inst.op {
            Op::LoopBegin => {
                let mut j = i + 1;
                while j < n && k.insts[j].op == Op::Phi {
                    j += 1;
                }
                resume[i] = j;
            }
            Op::LoopEnd | Op::SwitchEnd => end[inst.args[0] as usize] = i,
            _ => {}
        }
    }
    (resume, end, owner)
}

const CHUNK: usize = 256;

/// Sign- or zero-extend an index register to i64 (negative indices stay negative).
fn index_value(ty: VarType, bits: u64) -> i64 {
    match ty {
        VarType::I32 => bits as u32 as i32 as i64,
        VarType::U32 => bits as u32 as i64,
        VarType::I64 => bits as i64,
        // u64 indices beyond i64::MAX are out of range anyway: clamp to stay "too large".
        _ => bits.min(i64::MAX as u64) as i64,
    }
}

impl CompiledKernel for InterpKernel {
    unsafe fn run(&self, args: &LaunchArgs, start: u64, end: u64) {
        let k = &self.kernel;
        let n_regs = k.insts.len();
        let mut regs = vec![0u64; n_regs * CHUNK];
        let (resume, region_end, owner) = (&self.resume, &self.end, &self.owner);
        let mut slots: std::collections::HashMap<usize, Vec<Vec<u64>>> = Default::default();
        let mut lane0 = start;
        while lane0 < end {
            let lanes = ((end - lane0) as usize).min(CHUNK);
            // lanes that run: the chunk's lanes below `end`, narrowed inside regions
            let mut active = vec![false; CHUNK];
            active[..lanes].fill(true);
            let mut frames: Vec<Frame> = Vec::new();
            let mut r = 0usize;
            while r < n_regs {
                let inst = &k.insts[r];
                match inst.op {
                    Op::LoopBegin => {
                        frames.push(Frame::Loop {
                            saved: active.clone(),
                            iter: 0,
                            pending: Vec::new(),
                        });
                        r += 1;
                        continue;
                    }
                    Op::Phi => {
                        let a = inst.args[0] as usize * CHUNK;
                        regs.copy_within(a..a + CHUNK, r * CHUNK);
                        r += 1;
                        continue;
                    }
                    Op::LoopCond => {
                        let c = inst.args[0] as usize * CHUNK;
                        for l in 0..CHUNK {
                            active[l] &= regs[c + l] & 1 != 0;
                        }
                        let Some(Frame::Loop { saved, iter, .. }) = frames.last() else {
                            unreachable!("verified: a condition sits in a loop")
                        };
                        let any = active.iter().any(|&a| a);
                        let limit = owner[r];
                        let max = k.insts[limit].imm;
                        if !any || (max != 0 && *iter >= max) {
                            if any {
                                let still = active.iter().filter(|&&a| a).count() as u64;
                                // SAFETY: status points at STATUS_LEN counters.
                                unsafe {
                                    (*args.status.add(STATUS_LOOP_TRUNCATED))
                                        .fetch_add(still, Ordering::Relaxed)
                                };
                            }
                            active = saved.clone();
                            frames.pop();
                            r = region_end[limit] + 1;
                        } else {
                            r += 1;
                        }
                        continue;
                    }
                    Op::LoopNext => {
                        let (p, v) = (inst.args[0] as usize, inst.args[1] as usize * CHUNK);
                        let mut next = regs[p * CHUNK..p * CHUNK + CHUNK].to_vec();
                        for l in 0..CHUNK {
                            if active[l] {
                                next[l] = regs[v + l];
                            }
                        }
                        let Some(Frame::Loop { pending, .. }) = frames.last_mut() else {
                            unreachable!("verified: next values sit in a loop")
                        };
                        pending.push((p, next));
                        r += 1;
                        continue;
                    }
                    Op::LoopEnd => {
                        let Some(Frame::Loop { iter, pending, .. }) = frames.last_mut() else {
                            unreachable!("verified: endloop closes a loop")
                        };
                        for (p, next) in pending.drain(..) {
                            regs[p * CHUNK..p * CHUNK + CHUNK].copy_from_slice(&next);
                        }
                        *iter += 1;
                        r = resume[inst.args[0] as usize];
                        continue;
                    }
                    Op::Switch => {
                        frames.push(Frame::Switch {
                            saved: active.clone(),
                        });
                        slots.insert(r, Vec::new());
                        r += 1;
                        continue;
                    }
                    Op::Case => {
                        let Some(Frame::Switch { saved }) = frames.last() else {
                            unreachable!("verified: a case sits in a switch")
                        };
                        let m = inst.args[0] as usize * CHUNK;
                        for l in 0..CHUNK {
                            active[l] = saved[l] && regs[m + l] & 1 != 0;
                        }
                        r += 1;
                        continue;
                    }
                    Op::Yield => {
                        let sw = owner[r];
                        let v = inst.args[0] as usize * CHUNK;
                        let out = slots.get_mut(&sw).expect("switch entered");
                        let j = inst.imm as usize;
                        if out.len() <= j {
                            out.resize(j + 1, vec![0; CHUNK]);
                        }
                        for l in 0..CHUNK {
                            if active[l] {
                                out[j][l] = regs[v + l];
                            }
                        }
                        r += 1;
                        continue;
                    }
                    Op::SwitchEnd => {
                        let Some(Frame::Switch { saved }) = frames.pop() else {
                            unreachable!("verified: endswitch closes a switch")
                        };
                        active = saved;
                        r += 1;
                        continue;
                    }
                    Op::Out => {
                        let col = slots
                            .get(&(inst.args[0] as usize))
                            .and_then(|s| s.get(inst.imm as usize));
                        match col {
                            Some(c) => regs[r * CHUNK..r * CHUNK + CHUNK].copy_from_slice(c),
                            None => regs[r * CHUNK..r * CHUNK + CHUNK].fill(0),
                        }
                        r += 1;
                        continue;
                    }
                    _ => {}
                }
                let (before, rest) = regs.split_at_mut(r * CHUNK);
                let out = &mut rest[..CHUNK];
                let arg = |j: usize| {
                    &before[inst.args[j] as usize * CHUNK..inst.args[j] as usize * CHUNK + CHUNK]
                };
                let p = inst.param();
                match inst.op {
                    Op::Literal => out[..lanes].fill(inst.imm),
                    op if op.is_region() => unreachable!("handled above"),
                    Op::Counter => {
                        for (l, o) in out[..lanes].iter_mut().enumerate() {
                            *o = (lane0 + l as u64) & inst.ty.bit_mask();
                        }
                    }
                    Op::Data | Op::Tap | Op::Split | Op::Reduce(_) => {
                        unreachable!("registry-only ops never appear in kernels")
                    }
                    Op::Load => {
                        // SAFETY: the launcher passes one valid pointer per parameter.
                        let ptr = unsafe { *args.ptrs.add(p) };
                        let broadcast = k.params[p].kind == ParamKind::Broadcast;
                        for (l, o) in out[..lanes].iter_mut().enumerate() {
                            let i = if broadcast { 0 } else { (lane0 as usize) + l };
                            // SAFETY: inputs hold `end` elements (broadcast ones hold 1).
                            *o = unsafe { read_bits(ptr, inst.ty, i) };
                        }
                    }
                    Op::Store => {
                        // SAFETY: as above; outputs hold `end` elements and this block owns its lanes.
                        let ptr = unsafe { *args.ptrs.add(p) };
                        let a = arg(0);
                        for l in 0..lanes {
                            // SAFETY: see above.
                            unsafe { write_bits(ptr, inst.ty, lane0 as usize + l, a[l]) };
                        }
                    }
                    Op::Gather => {
                        // SAFETY: one pointer and one length per parameter.
                        let (ptr, len) = unsafe { (*args.ptrs.add(p), *args.lens.add(p)) };
                        let (idx, mask) = (arg(0), arg(1));
                        let ity = k.ty(inst.args[0]);
                        for l in 0..lanes {
                            out[l] = 0;
                            if mask[l] & 1 == 0 || !active[l] {
                                continue;
                            }
                            let i = index_value(ity, idx[l]);
                            if i < 0 || i as u64 >= len {
                                // SAFETY: status points at STATUS_LEN counters.
                                unsafe {
                                    (*args.status.add(STATUS_OOB_READS))
                                        .fetch_add(1, Ordering::Relaxed)
                                };
                            } else {
                                // SAFETY: bounds checked just above.
                                out[l] = unsafe { read_bits(ptr, inst.ty, i as usize) };
                            }
                        }
                    }
                    Op::Scatter(rop) => {
                        // SAFETY: one pointer and one length per parameter.
                        let (ptr, len) = unsafe { (*args.ptrs.add(p), *args.lens.add(p)) };
                        let (val, idx, mask) = (arg(0), arg(1), arg(2));
                        let ity = k.ty(inst.args[1]);
                        for l in 0..lanes {
                            if mask[l] & 1 != 0 && active[l] {
                                let i = index_value(ity, idx[l]);
                                // SAFETY: scatter_lane checks bounds; ptr/len describe the target.
                                unsafe {
                                    scatter_lane(rop, inst.ty, ptr, len, i, val[l], args.status)
                                };
                            }
                        }
                    }
                    Op::Cast | Op::Bitcast => {
                        let from = k.ty(inst.args[0]);
                        let a = arg(0);
                        for l in 0..lanes {
                            out[l] = eval_unary(inst.op, inst.ty, from, a[l]);
                        }
                    }
                    op => match op.arity() {
                        1 => {
                            let a = arg(0);
                            for l in 0..lanes {
                                out[l] = eval_unary(op, inst.ty, inst.ty, a[l]);
                            }
                        }
                        2 => {
                            let (a, b) = (arg(0), arg(1));
                            let ty = k.ty(inst.args[0]);
                            for l in 0..lanes {
                                out[l] = eval_binary(op, ty, a[l], b[l]);
                            }
                        }
                        _ => {
                            let (a, b, c) = (arg(0), arg(1), arg(2));
                            for l in 0..lanes {
                                out[l] = eval_ternary(op, inst.ty, a[l], b[l], c[l]);
                            }
                        }
                    },
                }
                r += 1;
            }
            lane0 += lanes as u64;
        }
    }
}
