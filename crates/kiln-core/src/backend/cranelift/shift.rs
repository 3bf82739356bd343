//! Shifts and rotations: per-lane variable shifts of 32-bit lanes as multiplies by powers of two
//! made from float exponents (x86 has no variable vector shifts before AVX2, and Cranelift emits
//! none), rotations recognised from their pair of shifts, and narrowed 64-bit right shifts.

use super::{is_wide, lanes32, Gen, V};
use crate::error::Result;
use crate::op::Op;
use crate::ty::VarType;
use cranelift_codegen::ir::types::{F32X4, I32, I32X4};
use cranelift_codegen::ir::{InstBuilder, Value};
use cranelift_frontend::FunctionBuilder;

impl<'f> Gen<'_, 'f> {
    /// A 64-bit to 32-bit cast of a right shift of a 64-bit value by a literal of 32 or more (in
    /// register `r`): only the high halves matter, gathered into one vector and shifted by the
    /// rest (the 64-bit shifts themselves are then dead code).
    pub(super) fn narrowed_shift(&mut self, r: usize) -> Result<Option<V>, String> {
        let cast = self.k.insts[r];
        let shr = self.k.insts[cast.args[0] as usize];
        if !is_wide(shr.ty)
            || is_wide(cast.ty)
            || !shr.ty.is_int()
            || !cast.ty.is_int()
            || shr.op != Op::Shr
            || !self.in_loop
            || self.uniform[cast.args[0] as usize]
        {
            return Ok(None);
        }
        let Some(c) = self.lit[shr.args[1] as usize].map(|c| c & 63) else {
            return Ok(None);
        };
        if c < 32 {
            return Ok(None);
        }
        let V::Two(lo, hi) = self.val(shr.args[0])? else {
            return Err("a 64-bit value in one vector".into());
        };
        let lo = self.bc(I32X4, lo);
        let hi = self.bc(I32X4, hi);
        let high = self.shuffle(lo, hi, lanes32([1, 3, 5, 7]));
        let high = self.bc(I32X4, high);
        Ok(Some(V::One(match c - 32 {
            0 => high,
            s => {
                let s = self.b.ins().iconst(I32, s as i64);
                if shr.ty.is_signed() {
                    self.b.ins().sshr(high, s)
                } else {
                    self.b.ins().ushr(high, s)
                }
            }
        })))
    }

    /// `(x >> r) | (x << ((32 - r) & 31))` (either order, `u32`), as the `Or` of registers `regs`:
    /// a rotation right by `r & 31`, computed from the 64-bit products `x * 2^(32 - (r & 31))`,
    /// whose low halves are the left shift and high halves the right shift. `None` if `regs` are
    /// not that pattern. (The shifts themselves, if nothing else uses them, are dead code.)
    pub(super) fn rotate(&mut self, t: VarType, regs: [u32; 2]) -> Result<Option<V>, String> {
        if t != VarType::U32 || !self.target.x86 {
            return Ok(None);
        }
        let insts = &self.k.insts;
        let inst = |r: u32| insts[r as usize];
        let is_lit = |r: u32, c: u64| self.lit[r as usize] == Some(c);
        let matches = |shr: u32, shl: u32| {
            let (shr, shl) = (inst(shr), inst(shl));
            if shr.op != Op::Shr || shl.op != Op::Shl || shr.args[0] != shl.args[0] {
                return false;
            }
            let amount = inst(shl.args[1]);
            if amount.op != Op::And || self.uniform[shl.args[1] as usize] {
                return false;
            }
            let [p, q] = [amount.args[0], amount.args[1]];
            let sub = if is_lit(q, 31) {
                p
            } else if is_lit(p, 31) {
                q
            } else {
                return false;
            };
            let sub = inst(sub);
            sub.op == Op::Sub && is_lit(sub.args[0], 32) && sub.args[1] == shr.args[1]
        };
        let shr = if matches(regs[0], regs[1]) {
            regs[0]
        } else if matches(regs[1], regs[0]) {
            regs[1]
        } else {
            return Ok(None);
        };
        let [x, amount] = inst(shr).args[..2] else {
            unreachable!("two operands")
        };
        let (V::One(x), V::One(r)) = (self.val(x)?, self.val(amount)?) else {
            return Err("rotate operands are not 32-bit".into());
        };
        let r = if self.known_below(amount, 32, 0) {
            r
        } else {
            let m = self.splat32(31);
            self.b.ins().band(r, m)
        };
        // x * 2^(32 - r) = (x * 2^(31 - r)) << 1, whose factor fits 32 bits for every r in
        // 0..=31 (`pow2_32`); for r = 0 the product is x << 32, whose halves or-ed are x.
        let bias = self.splat32(127 + 31);
        let biased = self.b.ins().isub(bias, r);
        let p = self.pow2_32(biased);
        let (xl, pl) = (self.b.ins().uwiden_low(x), self.b.ins().uwiden_low(p));
        let lo = self.b.ins().imul(xl, pl);
        let (xh, ph) = (self.b.ins().uwiden_high(x), self.b.ins().uwiden_high(p));
        let hi = self.b.ins().imul(xh, ph);
        let one = self.b.ins().iconst(I32, 1);
        let lo = self.b.ins().ishl(lo, one);
        let hi = self.b.ins().ishl(hi, one);
        let left = self.narrow32(lo, hi);
        let right = self.shuffle(lo, hi, lanes32([1, 3, 5, 7]));
        let right = self.bc(I32X4, right);
        Ok(Some(V::One(self.b.ins().bor(left, right))))
    }

    /// Whether every lane of register `r` (an integer) is known to be below `bound`.
    pub(super) fn known_below(&self, r: u32, bound: u64, depth: u32) -> bool {
        let inst = self.k.insts[r as usize];
        let t = inst.ty;
        if !t.is_int() || depth > 4 {
            return false;
        }
        let below = |j: usize| self.known_below(inst.args[j], bound, depth + 1);
        match inst.op {
            Op::Literal => inst.imm < bound,
            Op::And => {
                below(0)
                    || below(1)
                    || [0, 1]
                        .iter()
                        .any(|&j| self.lit[inst.args[j] as usize].is_some_and(|c| c < bound))
            }
            Op::Shr if !t.is_signed() => {
                below(0)
                    || self.lit[inst.args[1] as usize].is_some_and(|c| {
                        let s = (c & (t.bits() as u64 - 1)) as u32;
                        let width = t.bits() - s;
                        width < 64 && (1u64 << width) <= bound
                    })
            }
            Op::Cast => {
                let from = self.k.ty(inst.args[0]);
                from.is_int() && !from.is_signed() && bound <= 1 << 31 && below(0)
            }
            _ => false,
        }
    }

    /// `Shl`/`Shr` of `x` by `s` (register `amt`) for integer type `t`: the amount is taken modulo
    /// the width, right shifts are arithmetic for signed types.
    pub(super) fn shift(&mut self, op: Op, t: VarType, x: V, s: V, amt: u32) -> V {
        let bits = t.bits() as i64;
        let signed = t.is_signed();
        let shift = move |b: &mut FunctionBuilder<'f>, x: Value, s: Value| match op {
            Op::Shl => b.ins().ishl(x, s),
            _ if signed => b.ins().sshr(x, s),
            _ => b.ins().ushr(x, s),
        };
        if let Some(c) = self.lit[amt as usize] {
            // A literal amount: an immediate shift.
            let s = self.b.ins().iconst(I32, (c as i64) & (bits - 1));
            return self.map1(x, |b, x| shift(b, x, s));
        }
        if self.uniform[amt as usize] {
            // Same amount in every lane: one vector shift by a scalar.
            let s = match self.amount[amt as usize] {
                Some(s) => s,
                None => {
                    let s = self.extract(s, 0);
                    self.b.ins().band_imm(s, bits - 1)
                }
            };
            return self.map1(x, |b, x| shift(b, x, s));
        }
        if !self.target.x86 {
            return self.scalar_map(t, &[x, s], |b, xs| {
                let s = b.ins().band_imm(xs[1], bits - 1);
                shift(b, xs[0], s)
            });
        }
        match (x, s) {
            (V::One(x), V::One(s)) => {
                let s = if self.known_below(amt, 32, 0) {
                    s
                } else {
                    let m = self.splat32(31);
                    self.b.ins().band(s, m)
                };
                V::One(match op {
                    Op::Shl => self.shl32(x, s),
                    _ if signed => {
                        // Arithmetic shift of x = logical shift of x ^ sign, then ^ sign again.
                        let sign = self.b.ins().iconst(I32, 31);
                        let sign = self.b.ins().sshr(x, sign);
                        let y = self.b.ins().bxor(x, sign);
                        let y = self.ushr32(y, s);
                        self.b.ins().bxor(y, sign)
                    }
                    _ => self.ushr32(x, s),
                })
            }
            (V::Two(x0, x1), V::Two(s0, s1)) => {
                // Two 64-bit lanes per vector: shift the whole vector by each lane's amount (the
                // scalar amount is taken modulo 64) and keep the matching lane of each.
                let mut half = |x: Value, s: Value| {
                    let a = self.b.ins().extractlane(s, 0);
                    let b = self.b.ins().extractlane(s, 1);
                    let ra = shift(self.b, x, a);
                    let rb = shift(self.b, x, b);
                    self.shuffle(ra, rb, lanes32([0, 1, 6, 7]))
                };
                let lo = half(x0, s0);
                let hi = half(x1, s1);
                V::Two(lo, hi)
            }
            _ => unreachable!("operands of one type have one shape"),
        }
    }

    /// `2^e` per lane for `e` in 0..=31 from `biased` = `e + 127` (an `I32X4`), as an integer
    /// (`2^31` is `0x8000_0000`): the float with that exponent, truncated by `cvttps2dq`, whose
    /// out-of-range answer `0x8000_0000` is exactly `2^31`.
    pub(super) fn pow2_32(&mut self, biased: Value) -> Value {
        let e = self.b.ins().iconst(I32, 23);
        let f = self.b.ins().ishl(biased, e);
        let f = self.bc(F32X4, f);
        self.b.ins().x86_cvtt2dq(I32X4, f)
    }

    /// `x << s` per lane (`s` in 0..=31): `x * 2^s`, wrapping.
    pub(super) fn shl32(&mut self, x: Value, s: Value) -> Value {
        let bias = self.splat32(127);
        let biased = self.b.ins().iadd(s, bias);
        let p = self.pow2_32(biased);
        self.b.ins().imul(x, p)
    }

    /// Logical `x >> s` per lane (`s` in 0..=31): bits 31..63 of the 64-bit product
    /// `x * 2^(31 - s)` (`pmuludq` on each pair of lanes).
    pub(super) fn ushr32(&mut self, x: Value, s: Value) -> Value {
        let bias = self.splat32(127 + 31);
        let biased = self.b.ins().isub(bias, s);
        let p = self.pow2_32(biased);
        let (xl, pl) = (self.b.ins().uwiden_low(x), self.b.ins().uwiden_low(p));
        let lo = self.b.ins().imul(xl, pl);
        let (xh, ph) = (self.b.ins().uwiden_high(x), self.b.ins().uwiden_high(p));
        let hi = self.b.ins().imul(xh, ph);
        let k = self.b.ins().iconst(I32, 31);
        let lo = self.b.ins().ushr(lo, k);
        let hi = self.b.ins().ushr(hi, k);
        self.narrow32(lo, hi)
    }
}
