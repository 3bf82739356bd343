//! The reference interpreter: the executable specification of kernel IR.
//!
//! It runs a kernel over a block in chunks of lanes, one instruction at a time, calling the scalar
//! semantics in `op` for every lane. It is deliberately simple and never clever: compiled backends
//! are tested against it, so any disagreement is a bug in them (or in the spec comment in `op`).

// Lane loops index several operand columns at once; explicit indices read clearer than zips here.
#![allow(clippy::needless_range_loop)]

use super::{
    read_bits, scatter_lane, write_bits, Backend, BackendKind, CompiledKernel, LaunchArgs,
    STATUS_OOB_READS,
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
        Ok(Arc::new(InterpKernel {
            kernel: kernel.clone(),
        }))
    }
}

struct InterpKernel {
    kernel: Kernel,
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
        let mut lane0 = start;
        while lane0 < end {
            let lanes = ((end - lane0) as usize).min(CHUNK);
            for (r, inst) in k.insts.iter().enumerate() {
                let (before, rest) = regs.split_at_mut(r * CHUNK);
                let out = &mut rest[..CHUNK];
                let arg = |j: usize| {
                    &before[inst.args[j] as usize * CHUNK..inst.args[j] as usize * CHUNK + CHUNK]
                };
                let p = inst.imm as usize;
                match inst.op {
                    Op::Literal => out[..lanes].fill(inst.imm),
                    Op::Counter => {
                        for (l, o) in out[..lanes].iter_mut().enumerate() {
                            *o = (lane0 + l as u64) & inst.ty.bit_mask();
                        }
                    }
                    Op::Data => unreachable!("Data never appears in kernels"),
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
                            if mask[l] & 1 == 0 {
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
                            if mask[l] & 1 != 0 {
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
            }
            lane0 += lanes as u64;
        }
    }
}
