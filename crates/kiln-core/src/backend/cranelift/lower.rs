//! Per-op lowering of kernel instructions to vector code: register values, literals and
//! counters, unary and binary arithmetic (exact IEEE minimum/maximum, sign-bit ops, blends),
//! comparisons as masks, and casts. The results are bit-for-bit those of the scalar semantics in
//! `op`, NaN payloads aside.

use super::{is_wide, ivty, lane_ty, type_index, vty, Gen, V};
use crate::backend::encode_reduce;
use crate::error::Result;
use crate::kernel::ParamKind;
use crate::op::{Op, ReduceOp};
use crate::ty::VarType;
use cranelift_codegen::ir::condcodes::{FloatCC, IntCC};
use cranelift_codegen::ir::types::{self as ct, F32X4, F64X2, I32, I32X4, I64X2};
use cranelift_codegen::ir::{Endianness, InstBuilder, MemFlags, Value};
use cranelift_frontend::FunctionBuilder;

impl<'f> Gen<'_, 'f> {
    pub(super) fn val(&mut self, r: u32) -> Result<V, String> {
        if self.in_loop && !self.target.egraph {
            // Without the e-graph pass nothing rematerialises constants: a literal defined in the
            // entry block would hold a register across the whole loop.
            if let Some(bits) = self.lit.get(r as usize).copied().flatten() {
                return Ok(self.literal(self.k.ty(r), bits));
            }
        }
        if let Some(v) = self.vals.get(r as usize).copied().flatten() {
            return Ok(v);
        }
        if self.row_only.get(r as usize) == Some(&true) {
            // computed where it is needed, and not kept: this block may not dominate other uses
            // (nor may a constant it reads be cached for them)
            let cache = std::mem::replace(&mut self.const_cache_on, false);
            let v = self.lower(r as usize);
            self.const_cache_on = cache;
            return v?.ok_or_else(|| format!("register r{r} has no value"));
        }
        Err(format!("register r{r} has no value"))
    }

    pub(super) fn literal(&mut self, t: VarType, imm: u64) -> V {
        match t {
            VarType::Bool => V::One(self.splat32(if imm & 1 != 0 { u32::MAX } else { 0 })),
            VarType::I32 | VarType::U32 => V::One(self.splat32(imm as u32)),
            VarType::F32 => V::One(self.vconst(F32X4, &[imm as u32; 4])),
            VarType::I64 | VarType::U64 | VarType::F64 => {
                let ty = vty(t);
                let x = self.vconst(ty, &[imm; 2]);
                // From the table, each half its own load (each can then fold into its user).
                let y = if self.pool_base.is_some() && self.in_loop {
                    self.vconst(ty, &[imm; 2])
                } else {
                    x
                };
                V::Two(x, y)
            }
        }
    }

    pub(super) fn counter(&mut self, t: VarType) -> V {
        let lane = self.lane;
        if is_wide(t) {
            let s = self.b.ins().splat(I64X2, lane);
            let c01 = self.vconst(I64X2, &[0u64, 1]);
            let c23 = self.vconst(I64X2, &[2u64, 3]);
            let lo = self.b.ins().iadd(s, c01);
            let hi = self.b.ins().iadd(s, c23);
            V::Two(lo, hi)
        } else {
            let l = self.b.ins().ireduce(I32, lane);
            let s = self.b.ins().splat(I32X4, l);
            let iota = self.vconst(I32X4, &[0u32, 1, 2, 3]);
            V::One(self.b.ins().iadd(s, iota))
        }
    }

    pub(super) fn lower(&mut self, r: usize) -> Result<Option<V>, String> {
        let inst = self.k.insts[r];
        let t = inst.ty;
        if let Some(Some(f)) = self.affine.get(r) {
            return Ok(Some(self.affine(r, t, *f)));
        }
        let p = inst.param();
        let k = self.k;
        let arg = |g: &mut Self, j: usize| g.val(inst.args[j]);
        let from = |j: usize| k.ty(inst.args[j]);
        let v = match inst.op {
            Op::Literal => self.literal(t, inst.imm),
            Op::Data | Op::Tap | Op::Split | Op::Reduce(_) => {
                return Err(format!("`{}` cannot appear in a kernel", inst.op))
            }
            op @ (Op::LoopBegin
            | Op::Phi
            | Op::LoopCond
            | Op::LoopNext
            | Op::LoopEnd
            | Op::Switch
            | Op::Case
            | Op::Yield
            | Op::SwitchEnd
            | Op::Out) => return Err(format!("`{op}` is lowered by the region code, not here")),
            Op::Counter => self.counter(t),
            Op::Load => match self.k.params[p].kind {
                ParamKind::Broadcast => self.load_broadcast(p, t)?,
                _ => self.load_input(p, t)?,
            },
            Op::Store => {
                let a = arg(self, 0)?;
                self.store(p, t, a)?;
                return Ok(None);
            }
            Op::Neg => {
                let a = arg(self, 0)?;
                match t {
                    VarType::F32 | VarType::F64 => self.sign_bit_op(t, a, true),
                    VarType::Bool => a,
                    _ => self.map1(a, |b, x| b.ins().ineg(x)),
                }
            }
            Op::Not => {
                let a = arg(self, 0)?;
                let a = self.bc_v(ivty(t), a);
                let r = self.map1(a, |b, x| b.ins().bnot(x));
                self.bc_v(vty(t), r)
            }
            Op::Abs => {
                let a = arg(self, 0)?;
                match t {
                    VarType::F32 | VarType::F64 => self.sign_bit_op(t, a, false),
                    VarType::I32 | VarType::I64 => self.map1(a, |b, x| b.ins().iabs(x)),
                    _ => a,
                }
            }
            Op::Sqrt | Op::Floor | Op::Ceil | Op::Round | Op::Trunc => {
                let a = arg(self, 0)?;
                if !t.is_float() {
                    a
                } else {
                    let op = inst.op;
                    self.map1(a, |b, x| match op {
                        Op::Sqrt => b.ins().sqrt(x),
                        Op::Floor => b.ins().floor(x),
                        Op::Ceil => b.ins().ceil(x),
                        Op::Round => b.ins().nearest(x),
                        _ => b.ins().trunc(x),
                    })
                }
            }
            Op::Cast => match self.narrowed_shift(r)? {
                Some(v) => v,
                None => {
                    let a = arg(self, 0)?;
                    self.cast(from(0), t, a)
                }
            },
            Op::Bitcast => {
                let a = arg(self, 0)?;
                self.bc_v(vty(t), a)
            }
            Op::Add
            | Op::Sub
            | Op::Mul
            | Op::Div
            | Op::Rem
            | Op::Min
            | Op::Max
            | Op::And
            | Op::Or
            | Op::Xor
            | Op::Shl
            | Op::Shr => {
                let regs = self.literal_last(inst.op, inst.args[0], inst.args[1]);
                let (a, b) = (self.val(regs[0])?, self.val(regs[1])?);
                self.binary(inst.op, t, a, b, regs)?
            }
            Op::Eq | Op::Ne | Op::Lt | Op::Le | Op::Gt | Op::Ge => {
                let regs = self.literal_last(inst.op, inst.args[0], inst.args[1]);
                let op = if regs[0] == inst.args[0] {
                    inst.op
                } else {
                    match inst.op {
                        Op::Lt => Op::Gt,
                        Op::Le => Op::Ge,
                        Op::Gt => Op::Lt,
                        Op::Ge => Op::Le,
                        op => op,
                    }
                };
                let (a, b) = (self.val(regs[0])?, self.val(regs[1])?);
                self.compare(op, from(0), a, b)
            }
            Op::Fma => {
                let [mut x, mut y] = self.literal_last(Op::Mul, inst.args[0], inst.args[1]);
                let is_lit = |r: u32| self.lit[r as usize].is_some();
                if is_lit(y) && !is_lit(x) && is_lit(inst.args[2]) {
                    // With the addend read last (and folded), a literal factor goes first: x64's
                    // fused multiply-add overwrites its first operand, which would otherwise be
                    // copied when still live.
                    (x, y) = (y, x);
                }
                let (a, b, c) = (self.val(x)?, self.val(y)?, arg(self, 2)?);
                match t {
                    VarType::F32 | VarType::F64 => {
                        self.map3(a, b, c, |b, x, y, z| b.ins().fma(x, y, z))
                    }
                    VarType::Bool => self.map3(a, b, c, |b, x, y, z| {
                        let xy = b.ins().band(x, y);
                        b.ins().bor(xy, z)
                    }),
                    _ => self.map3(a, b, c, |b, x, y, z| {
                        let xy = b.ins().imul(x, y);
                        b.ins().iadd(xy, z)
                    }),
                }
            }
            Op::Select => {
                let (m, x, y) = (arg(self, 0)?, arg(self, 1)?, arg(self, 2)?);
                let V::One(m) = m else {
                    return Err("select mask is not a mask".into());
                };
                self.select_v(t, m, x, y)?
            }
            Op::Gather => {
                let (idx, mask) = (arg(self, 0)?, arg(self, 1)?);
                let run = self.contiguous[inst.args[0] as usize];
                self.gather(p, t, idx, from(0), mask, run)?
            }
            Op::Scatter(rop) => {
                let (val, idx, mask) = (arg(self, 0)?, arg(self, 1)?, arg(self, 2)?);
                let op_ty = (u32::from(encode_reduce(rop)) << 8) | type_index(t);
                let run = self.contiguous[inst.args[1] as usize] && rop == ReduceOp::None;
                self.scatter(p, t, op_ty, val, idx, from(1), mask, run)?;
                return Ok(None);
            }
        };
        Ok(Some(v))
    }

    /// The operands `x`, `y` of a binary `op`, swapped (for comparisons, the caller mirrors the
    /// op) when only `x` is a literal and the order does not matter: the literal is then read last,
    /// right before its use, and can fold into the instruction as its memory operand.
    pub(super) fn literal_last(&self, op: Op, x: u32, y: u32) -> [u32; 2] {
        let swappable = matches!(
            op,
            Op::Add
                | Op::Mul
                | Op::Min
                | Op::Max
                | Op::And
                | Op::Or
                | Op::Xor
                | Op::Eq
                | Op::Ne
                | Op::Lt
                | Op::Le
                | Op::Gt
                | Op::Ge
        );
        if swappable && self.lit[x as usize].is_some() && self.lit[y as usize].is_none() {
            [y, x]
        } else {
            [x, y]
        }
    }

    /// `op` on `a` and `b` of type `t` (registers `regs`).
    pub(super) fn binary(
        &mut self,
        op: Op,
        t: VarType,
        a: V,
        b: V,
        regs: [u32; 2],
    ) -> Result<V, String> {
        if t == VarType::Bool {
            // Masks: add/max are `or`, mul/min are `and`, sub is `xor`. `div` has no definition in
            // `op` for masks (the interpreter panics); `a & b` is x / y with x / 0 == 0.
            return Ok(match op {
                Op::And | Op::Mul | Op::Min | Op::Div => {
                    self.map2(a, b, |b, x, y| b.ins().band(x, y))
                }
                Op::Or | Op::Add | Op::Max => self.map2(a, b, |b, x, y| b.ins().bor(x, y)),
                Op::Xor | Op::Sub => self.map2(a, b, |b, x, y| b.ins().bxor(x, y)),
                _ => return Err(format!("{op} on bool")),
            });
        }
        if t.is_float() {
            return Ok(match op {
                Op::Add => self.map2(a, b, |b, x, y| b.ins().fadd(x, y)),
                Op::Sub => self.map2(a, b, |b, x, y| b.ins().fsub(x, y)),
                Op::Mul => self.map2(a, b, |b, x, y| b.ins().fmul(x, y)),
                Op::Div => self.map2(a, b, |b, x, y| b.ins().fdiv(x, y)),
                // Cranelift's fmin/fmax are IEEE 754-2019 minimum/maximum: NaN-propagating, -0 < +0.
                Op::Min | Op::Max => self.fmin_fmax(op, t, a, b, regs),
                Op::And => self.bitwise(t, a, b, |b, x, y| b.ins().band(x, y)),
                Op::Or => self.bitwise(t, a, b, |b, x, y| b.ins().bor(x, y)),
                Op::Xor => self.bitwise(t, a, b, |b, x, y| b.ins().bxor(x, y)),
                _ => return Err(format!("{op} on {t}")),
            });
        }
        let signed = t.is_signed();
        let bits = t.bits() as i64;
        let lt = lane_ty(t);
        Ok(match op {
            Op::Add => self.map2(a, b, |b, x, y| b.ins().iadd(x, y)),
            Op::Sub => self.map2(a, b, |b, x, y| b.ins().isub(x, y)),
            Op::Mul => self.map2(a, b, |b, x, y| b.ins().imul(x, y)),
            Op::And => self.map2(a, b, |b, x, y| b.ins().band(x, y)),
            Op::Or => match self.rotate(t, regs)? {
                Some(v) => v,
                None => self.map2(a, b, |b, x, y| b.ins().bor(x, y)),
            },
            Op::Xor => self.map2(a, b, |b, x, y| b.ins().bxor(x, y)),
            Op::Min if signed => self.map2(a, b, |b, x, y| b.ins().smin(x, y)),
            Op::Min => self.map2(a, b, |b, x, y| b.ins().umin(x, y)),
            Op::Max if signed => self.map2(a, b, |b, x, y| b.ins().smax(x, y)),
            Op::Max => self.map2(a, b, |b, x, y| b.ins().umax(x, y)),
            Op::Div | Op::Rem => {
                let is_div = op == Op::Div;
                let all_ones = if bits == 32 { u32::MAX as i64 } else { -1 };
                self.scalar_map(t, &[a, b], |b, xs| {
                    let (x, y) = (xs[0], xs[1]);
                    let zero = b.ins().iconst(lt, 0);
                    let one = b.ins().iconst(lt, 1);
                    let y0 = b.ins().icmp_imm(IntCC::Equal, y, 0);
                    if signed {
                        // x / 0 == 0, x % 0 == x, x / -1 == -x (wrapping), x % -1 == 0: the hardware
                        // divide only ever sees a divisor other than 0 and -1.
                        let m1 = b.ins().iconst(lt, all_ones);
                        let ym1 = b.ins().icmp(IntCC::Equal, y, m1);
                        let special = b.ins().bor(y0, ym1);
                        let ys = b.ins().select(special, one, y);
                        if is_div {
                            let q = b.ins().sdiv(x, ys);
                            let neg = b.ins().ineg(x);
                            let q = b.ins().select(ym1, neg, q);
                            b.ins().select(y0, zero, q)
                        } else {
                            let r = b.ins().srem(x, ys);
                            let r = b.ins().select(ym1, zero, r);
                            b.ins().select(y0, x, r)
                        }
                    } else {
                        let ys = b.ins().select(y0, one, y);
                        if is_div {
                            let q = b.ins().udiv(x, ys);
                            b.ins().select(y0, zero, q)
                        } else {
                            let r = b.ins().urem(x, ys);
                            b.ins().select(y0, x, r)
                        }
                    }
                })
            }
            Op::Shl | Op::Shr => self.shift(op, t, a, b, regs[1]),
            _ => return Err(format!("{op} on {t}")),
        })
    }

    /// IEEE 754-2019 minimum/maximum. Against a literal that is not NaN (nor the zero the native
    /// instruction would get wrong), x86's `minps`/`maxps` alone are exact: `min(c, x)` is
    /// `c < x ? c : x`, which is `x` when `x` is NaN or equal to `c`; only `c == -0.0` (min) or
    /// `c == +0.0` (max) against a zero of the other sign would differ.
    pub(super) fn fmin_fmax(&mut self, op: Op, t: VarType, a: V, b: V, regs: [u32; 2]) -> V {
        let is_min = op == Op::Min;
        let usable = |bits: u64| {
            let (nan, sign, zero) = if t == VarType::F32 {
                let f = f32::from_bits(bits as u32);
                (f.is_nan(), f.is_sign_negative(), f == 0.0)
            } else {
                let f = f64::from_bits(bits);
                (f.is_nan(), f.is_sign_negative(), f == 0.0)
            };
            // The native instruction is wrong only for NaN and for this zero.
            let bad_zero = zero && sign == is_min;
            !(nan || bad_zero)
        };
        let lit = |r: u32| self.lit[r as usize].filter(|&c| usable(c));
        let (c, x) = match (lit(regs[0]), lit(regs[1])) {
            (_, Some(_)) => (b, a),
            (Some(_), None) => (a, b),
            (None, None) => {
                return if is_min {
                    self.map2(a, b, |b, x, y| b.ins().fmin(x, y))
                } else {
                    self.map2(a, b, |b, x, y| b.ins().fmax(x, y))
                };
            }
        };
        if !self.target.x86 {
            return if is_min {
                self.map2(x, c, |b, x, y| b.ins().fmin(x, y))
            } else {
                self.map2(x, c, |b, x, y| b.ins().fmax(x, y))
            };
        }
        // The shapes Cranelift's x64 lowering turns into one `minps`/`maxps` (min: `c < x ? c :
        // x`; max: `x < c ? c : x`).
        self.map2(c, x, |b, c, x| {
            let ity = b.func.dfg.value_type(c).as_int();
            let m = if is_min {
                b.ins().fcmp(FloatCC::LessThan, c, x)
            } else {
                b.ins().fcmp(FloatCC::LessThan, x, c)
            };
            debug_assert_eq!(b.func.dfg.value_type(m), ity);
            let fty = b.func.dfg.value_type(c);
            let m = b
                .ins()
                .bitcast(fty, MemFlags::new().with_endianness(Endianness::Little), m);
            b.ins().bitselect(m, c, x)
        })
    }

    /// `-x` (`neg`) or `|x|` of floats of type `t`: with a constant table, one `xor`/`and` with a
    /// mask read from it (Cranelift would build the mask from all-ones in two instructions).
    pub(super) fn sign_bit_op(&mut self, t: VarType, a: V, neg: bool) -> V {
        if self.pool_base.is_none() || !self.in_loop {
            return if neg {
                self.map1(a, |b, x| b.ins().fneg(x))
            } else {
                self.map1(a, |b, x| b.ins().fabs(x))
            };
        }
        let half = |g: &mut Self, x: Value| {
            let m = if t == VarType::F32 {
                let sign = 1u32 << 31;
                g.vconst(F32X4, &[if neg { sign } else { !sign }; 4])
            } else {
                let sign = 1u64 << 63;
                g.vconst(F64X2, &[if neg { sign } else { !sign }; 2])
            };
            if neg {
                g.b.ins().bxor(x, m)
            } else {
                g.b.ins().band(x, m)
            }
        };
        match a {
            V::One(x) => V::One(half(self, x)),
            V::Two(x, y) => {
                let lo = half(self, x);
                let hi = half(self, y);
                V::Two(lo, hi)
            }
        }
    }

    /// `m ? x : y` per lane of values of type `t`, for an `I32X4` mask `m`.
    pub(super) fn select_v(&mut self, t: VarType, m: Value, x: V, y: V) -> Result<V, String> {
        // Mask lanes are all ones or all zeros, so `blendv` (which looks at the top bit of
        // each lane) selects exactly like `bitselect`.
        // (x64 lowers it for integer vectors only.)
        let blendv = self.target.x86 && self.target.sse41;
        let sty = if blendv { ivty(t) } else { vty(t) };
        let (x, y) = (self.bc_v(sty, x), self.bc_v(sty, y));
        let r = match (x, y) {
            (V::One(x), V::One(y)) => {
                let m = self.bc(sty, m);
                V::One(self.blend(blendv, m, x, y))
            }
            (V::Two(x0, x1), V::Two(y0, y1)) => {
                let (m0, m1) = self.widen_mask(m);
                let m0 = self.bc(sty, m0);
                let m1 = self.bc(sty, m1);
                let lo = self.blend(blendv, m0, x0, y0);
                let hi = self.blend(blendv, m1, x1, y1);
                V::Two(lo, hi)
            }
            _ => return Err("select operands differ in shape".into()),
        };
        Ok(self.bc_v(vty(t), r))
    }

    /// `m ? x : y` per lane for a mask `m` whose lanes are all ones or all zeros (`blendv`: with
    /// x86's `blendv`, for integer vectors).
    pub(super) fn blend(&mut self, blendv: bool, m: Value, x: Value, y: Value) -> Value {
        if blendv {
            self.b.ins().x86_blendv(m, x, y)
        } else {
            self.b.ins().bitselect(m, x, y)
        }
    }

    /// A comparison of two values of type `t`, as a mask.
    pub(super) fn compare(&mut self, op: Op, t: VarType, a: V, b: V) -> V {
        if t == VarType::Bool {
            // Masks compare as 0 < 1.
            return match op {
                Op::Eq => self.map2(a, b, |b, x, y| b.ins().bxor_not(x, y)),
                Op::Ne => self.map2(a, b, |b, x, y| b.ins().bxor(x, y)),
                Op::Lt => self.map2(a, b, |b, x, y| b.ins().band_not(y, x)),
                Op::Le => self.map2(a, b, |b, x, y| b.ins().bor_not(y, x)),
                Op::Gt => self.map2(a, b, |b, x, y| b.ins().band_not(x, y)),
                _ => self.map2(a, b, |b, x, y| b.ins().bor_not(x, y)),
            };
        }
        let r = if t.is_float() {
            let (a, b) = if self.target.sse_only {
                // through the integer domain and back: a lone load then lands in a register
                // instead of being folded, unaligned, into `cmpps` (see `Target::sse_only`)
                let flags = MemFlags::new().with_endianness(Endianness::Little);
                let mut round_trip = |v: V| {
                    let mut f = |x: Value| {
                        let fty = self.b.func.dfg.value_type(x);
                        let i = self.b.ins().bitcast(ivty(t), flags, x);
                        self.b.ins().bitcast(fty, flags, i)
                    };
                    match v {
                        V::One(x) => V::One(f(x)),
                        V::Two(x, y) => {
                            let x = f(x);
                            V::Two(x, f(y))
                        }
                    }
                };
                (round_trip(a), round_trip(b))
            } else {
                (a, b)
            };
            let cc = match op {
                Op::Eq => FloatCC::Equal,
                Op::Ne => FloatCC::NotEqual,
                Op::Lt => FloatCC::LessThan,
                Op::Le => FloatCC::LessThanOrEqual,
                Op::Gt => FloatCC::GreaterThan,
                _ => FloatCC::GreaterThanOrEqual,
            };
            self.map2(a, b, |b, x, y| b.ins().fcmp(cc, x, y))
        } else {
            let s = t.is_signed();
            let cc = match op {
                Op::Eq => IntCC::Equal,
                Op::Ne => IntCC::NotEqual,
                Op::Lt if s => IntCC::SignedLessThan,
                Op::Lt => IntCC::UnsignedLessThan,
                Op::Le if s => IntCC::SignedLessThanOrEqual,
                Op::Le => IntCC::UnsignedLessThanOrEqual,
                Op::Gt if s => IntCC::SignedGreaterThan,
                Op::Gt => IntCC::UnsignedGreaterThan,
                Op::Ge if s => IntCC::SignedGreaterThanOrEqual,
                _ => IntCC::UnsignedGreaterThanOrEqual,
            };
            self.map2(a, b, |b, x, y| b.ins().icmp(cc, x, y))
        };
        self.mask_of(r)
    }

    /// A lane-wise comparison result (one `I32X4` or two `I64X2`) as one `I32X4` mask.
    pub(super) fn mask_of(&mut self, r: V) -> V {
        match r {
            V::One(m) => V::One(self.bc(I32X4, m)),
            V::Two(lo, hi) => V::One(self.narrow32(lo, hi)),
        }
    }

    /// `x != 0` per lane, as a mask (floats: `-0.0` is zero, NaN is not).
    pub(super) fn nonzero(&mut self, t: VarType, a: V) -> V {
        let r = if t.is_float() {
            let zero = self.vconst(ivty(t), &[0u32; 4]);
            let zero = self.bc(vty(t), zero);
            self.map1(a, |b, x| b.ins().fcmp(FloatCC::NotEqual, x, zero))
        } else {
            let zero = self.vconst(ivty(t), &[0u32; 4]);
            self.map1(a, |b, x| b.ins().icmp(IntCC::NotEqual, x, zero))
        };
        self.mask_of(r)
    }

    pub(super) fn cast(&mut self, from: VarType, to: VarType, a: V) -> V {
        use VarType::*;
        match (from, to) {
            (F32, F32) | (F64, F64) => a,
            (_, Bool) => self.nonzero(from, a),
            (Bool, _) => {
                let V::One(m) = a else {
                    unreachable!("masks are one vector")
                };
                // 0/-1 lanes, and-ed with the bits of 1 in the target type.
                if is_wide(to) {
                    let one = if to == F64 { 1f64.to_bits() } else { 1 };
                    let one = self.splat64(one);
                    let (lo, hi) = self.widen_mask(m);
                    let lo = self.b.ins().band(lo, one);
                    let hi = self.b.ins().band(hi, one);
                    self.bc_v(vty(to), V::Two(lo, hi))
                } else {
                    let one = if to == F32 { 1f32.to_bits() } else { 1 };
                    let one = self.splat32(one);
                    let r = self.b.ins().band(m, one);
                    self.bc_v(vty(to), V::One(r))
                }
            }
            (I32 | U32, I32 | U32) | (I64 | U64, I64 | U64) => a,
            (I32 | U32, I64 | U64) => {
                let V::One(x) = a else { unreachable!() };
                if from == I32 {
                    V::Two(self.b.ins().swiden_low(x), self.b.ins().swiden_high(x))
                } else {
                    V::Two(self.b.ins().uwiden_low(x), self.b.ins().uwiden_high(x))
                }
            }
            (I64 | U64, I32 | U32) => {
                let V::Two(lo, hi) = a else { unreachable!() };
                V::One(self.narrow32(lo, hi))
            }
            (I32, F32) => self.map1(a, |b, x| b.ins().fcvt_from_sint(F32X4, x)),
            (U32, F32) => self.map1(a, |b, x| b.ins().fcvt_from_uint(F32X4, x)),
            (I32 | U32, F64) => {
                // Exact: convert the low two lanes, then the high two moved down.
                let V::One(x) = a else { unreachable!() };
                let high = self.high_to_low(x);
                let cvt = |b: &mut FunctionBuilder<'f>, v: Value| {
                    if from == I32 {
                        let w = b.ins().swiden_low(v);
                        b.ins().fcvt_from_sint(F64X2, w)
                    } else {
                        let w = b.ins().uwiden_low(v);
                        b.ins().fcvt_from_uint(F64X2, w)
                    }
                };
                let lo = cvt(self.b, x);
                let hi = cvt(self.b, high);
                V::Two(lo, hi)
            }
            (I64, F64) => self.map1(a, |b, x| b.ins().fcvt_from_sint(F64X2, x)),
            (U64, F64) => self.map1(a, |b, x| b.ins().fcvt_from_uint(F64X2, x)),
            (I64, F32) => {
                self.scalar_map(F32, &[a], |b, xs| b.ins().fcvt_from_sint(ct::F32, xs[0]))
            }
            (U64, F32) => {
                self.scalar_map(F32, &[a], |b, xs| b.ins().fcvt_from_uint(ct::F32, xs[0]))
            }
            (F32, I32) => self.map1(a, |b, x| b.ins().fcvt_to_sint_sat(I32X4, x)),
            (F32, U32) => self.map1(a, |b, x| b.ins().fcvt_to_uint_sat(I32X4, x)),
            (F32 | F64, I64) => {
                self.scalar_map(I64, &[a], |b, xs| b.ins().fcvt_to_sint_sat(ct::I64, xs[0]))
            }
            (F32 | F64, U64) => {
                self.scalar_map(U64, &[a], |b, xs| b.ins().fcvt_to_uint_sat(ct::I64, xs[0]))
            }
            (F64, I32 | U32) => {
                let V::Two(lo, hi) = a else { unreachable!() };
                let signed = to == I32;
                // The saturating f64x2 -> i32x4 conversions Cranelift lowers natively (results in
                // the low two lanes, zeros above).
                let cvt = |g: &mut Self, x: Value| {
                    let zero = g.vconst(I64X2, &[0u64; 2]);
                    if signed {
                        let c = g.b.ins().fcvt_to_sint_sat(I64X2, x);
                        g.b.ins().snarrow(c, zero)
                    } else {
                        let c = g.b.ins().fcvt_to_uint_sat(I64X2, x);
                        g.b.ins().uunarrow(c, zero)
                    }
                };
                let lo = cvt(self, lo);
                let hi = cvt(self, hi);
                V::One(self.concat_low(lo, hi))
            }
            (F32, F64) => {
                let V::One(x) = a else { unreachable!() };
                let high = self.high_to_low(x);
                V::Two(
                    self.b.ins().fvpromote_low(x),
                    self.b.ins().fvpromote_low(high),
                )
            }
            (F64, F32) => {
                let V::Two(lo, hi) = a else { unreachable!() };
                let lo = self.b.ins().fvdemote(lo);
                let hi = self.b.ins().fvdemote(hi);
                V::One(self.concat_low(lo, hi))
            }
        }
    }
}
