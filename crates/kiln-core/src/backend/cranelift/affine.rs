//! The affine-in-lane-index analysis: registers that are affine functions of the lane index
//! (`affine_values`), which the main loop computes from the index directly (`Gen::affine`)
//! instead of through their whole chain of arithmetic.

use super::{is_wide, Gen, V, W};
use crate::kernel::Kernel;
use crate::op::Op;
use crate::ty::VarType;
use cranelift_codegen::ir::types::{I32, I32X4, I64X2};
use cranelift_codegen::ir::InstBuilder;

/// A register whose value in lane `i` is `a * i + b`, wrapping in its type's width.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Affine {
    pub(super) a: u64,
    pub(super) b: u64,
    /// Holds only for lane indices below 2^31 (a 32-bit counter extended to 64 bits).
    pub(super) small_lanes: bool,
}

/// Each integer register's affine form in the lane index, where the kernel's arithmetic shows one:
/// counters and literals, and sums, differences, products with literals, shifts left by literals
/// of those (all exact in wrapping arithmetic). Such a register costs one scalar multiply-add and
/// one vector add per group instead of its whole computation: seeding a random number generator
/// per lane is a chain of 64-bit multiplies by constants, for instance.
pub(super) fn affine_values(k: &Kernel) -> Vec<Option<Affine>> {
    let mut out: Vec<Option<Affine>> = Vec::with_capacity(k.insts.len());
    for inst in &k.insts {
        let t = inst.ty;
        let mask = t.bit_mask();
        let arg = |j: usize| out[inst.args[j] as usize];
        let form = |a: u64, b: u64, small: bool| {
            Some(Affine {
                a: a & mask,
                b: b & mask,
                small_lanes: small,
            })
        };
        // A constant operand: (value, holds only for small lane indices).
        let lit = |j: usize| arg(j).filter(|f| f.a == 0).map(|f| (f.b, f.small_lanes));
        let v = if !t.is_int() {
            None
        } else {
            match inst.op {
                Op::Literal => form(0, inst.imm, false),
                Op::Counter => form(1, 0, false),
                Op::Add | Op::Sub => match (arg(0), arg(1)) {
                    (Some(x), Some(y)) => {
                        let small = x.small_lanes || y.small_lanes;
                        if inst.op == Op::Add {
                            form(x.a.wrapping_add(y.a), x.b.wrapping_add(y.b), small)
                        } else {
                            form(x.a.wrapping_sub(y.a), x.b.wrapping_sub(y.b), small)
                        }
                    }
                    _ => None,
                },
                Op::Neg => {
                    arg(0).and_then(|x| form(x.a.wrapping_neg(), x.b.wrapping_neg(), x.small_lanes))
                }
                Op::Mul => match (arg(0), arg(1), lit(0), lit(1)) {
                    (_, Some(y), Some((c, cs)), _) | (Some(y), _, _, Some((c, cs))) => form(
                        y.a.wrapping_mul(c),
                        y.b.wrapping_mul(c),
                        y.small_lanes || cs,
                    ),
                    _ => None,
                },
                Op::Fma => match (arg(0), arg(1), arg(2), lit(0), lit(1)) {
                    (_, Some(y), Some(z), Some((c, cs)), _)
                    | (Some(y), _, Some(z), _, Some((c, cs))) => form(
                        y.a.wrapping_mul(c).wrapping_add(z.a),
                        y.b.wrapping_mul(c).wrapping_add(z.b),
                        y.small_lanes || z.small_lanes || cs,
                    ),
                    _ => None,
                },
                Op::Shl => match (arg(0), lit(1)) {
                    (Some(x), Some((c, cs))) => {
                        let s = (c & (t.bits() as u64 - 1)) as u32;
                        form(x.a << s, x.b << s, x.small_lanes || cs)
                    }
                    _ => None,
                },
                // `x | c` and `x ^ c` are `x + c` when `c` lies within bits that are zero in every
                // lane of `x`: below the lowest set bit of both `a` and `b`.
                Op::Or | Op::Xor => match (arg(0), arg(1), lit(0), lit(1)) {
                    (_, Some(x), Some((c, cs)), _) | (Some(x), _, _, Some((c, cs))) => {
                        let zeros = (x.a | x.b).trailing_zeros().min(t.bits());
                        if zeros >= 64 || c >> zeros == 0 {
                            form(x.a, x.b.wrapping_add(c), x.small_lanes || cs)
                        } else {
                            None
                        }
                    }
                    _ => None,
                },
                Op::Cast => {
                    let from = k.ty(inst.args[0]);
                    match arg(0) {
                        Some(x) if from.is_int() && from.bits() >= t.bits() => {
                            form(x.a, x.b, x.small_lanes)
                        }
                        // A 32-bit counter is the lane index itself for indices below 2^31,
                        // whether extended with zeros or with its sign.
                        Some(x) if from.is_int() && x.a == 1 && x.b == 0 => form(1, 0, true),
                        _ => None,
                    }
                }
                _ => None,
            }
        };
        out.push(v);
    }
    out
}

impl<'f> Gen<'_, 'f> {
    /// The value of a register of type `t` whose lanes are `a * i + b` (see `Affine`), for the
    /// group at `self.lane`: a scalar multiply-add, broadcast, plus each lane's offset.
    pub(super) fn affine(&mut self, r: usize, t: VarType, f: Affine) -> V {
        // One broadcast of `a * i + b` per iteration (`i`: the first group's lane), shared by its
        // groups, which add their lanes' offsets from `i`.
        let v = match self.affine_base[r] {
            Some(v) => v,
            None => {
                let lane = self.iter_lane;
                let s = match f.a {
                    1 => lane,
                    a => self.b.ins().imul_imm(lane, a as i64),
                };
                let s = if f.b == 0 {
                    s
                } else {
                    self.b.ins().iadd_imm(s, f.b as i64)
                };
                let v = if is_wide(t) {
                    self.b.ins().splat(I64X2, s)
                } else {
                    let s = self.b.ins().ireduce(I32, s);
                    self.b.ins().splat(I32X4, s)
                };
                self.affine_base[r] = Some(v);
                v
            }
        };
        let a = f.a;
        let first = W as u64 * self.group as u64;
        let off = |k: u64| a.wrapping_mul(first + k);
        if is_wide(t) {
            let lo = self.vconst(I64X2, &[off(0), off(1)]);
            let lo = self.b.ins().iadd(v, lo);
            let hi = self.vconst(I64X2, &[off(2), off(3)]);
            let hi = self.b.ins().iadd(v, hi);
            V::Two(lo, hi)
        } else {
            let offsets = self.vconst(I32X4, &[off(0), off(1), off(2), off(3)].map(|x| x as u32));
            V::One(self.b.ins().iadd(v, offsets))
        }
    }
}
