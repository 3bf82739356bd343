//! Vector plumbing for the lowering: bitcasts, shuffles, narrowing and widening of 64-bit lane
//! pairs, lane-wise maps over one- or two-vector values, lane extraction and assembly, and the
//! per-lane scalar fallback for ops Cranelift cannot lower as vectors.

use super::{is_wide, ivty, lanes32, vty, Gen, V, W};
use crate::ty::VarType;
use cranelift_codegen::ir::types::{I32X4, I8X16};
use cranelift_codegen::ir::Opcode;
use cranelift_codegen::ir::{ConstantData, Endianness, InstBuilder, MemFlags, Type, Value};
use cranelift_frontend::FunctionBuilder;

impl<'f> Gen<'_, 'f> {
    /// Reinterpret a vector as another vector type of the same width (no-op if already `to`).
    pub(super) fn bc(&mut self, to: Type, v: Value) -> Value {
        // Look through an earlier bitcast, so that chains of reinterpretations stay one deep (the
        // x64 lowering recognises `bitcast` of a comparison as a mask, but not two of them).
        let dfg = &self.b.func.dfg;
        let v = match dfg.value_def(v).inst() {
            Some(i) if dfg.insts[i].opcode() == Opcode::Bitcast => dfg.inst_args(i)[0],
            _ => v,
        };
        if self.b.func.dfg.value_type(v) == to {
            v
        } else {
            self.b
                .ins()
                .bitcast(to, MemFlags::new().with_endianness(Endianness::Little), v)
        }
    }
    pub(super) fn bc_v(&mut self, to: Type, v: V) -> V {
        match v {
            V::One(x) => V::One(self.bc(to, x)),
            V::Two(x, y) => V::Two(self.bc(to, x), self.bc(to, y)),
        }
    }

    pub(super) fn shuffle(&mut self, a: Value, b: Value, mask: Vec<u8>) -> Value {
        let ta = self.b.func.dfg.value_type(a);
        let a8 = self.bc(I8X16, a);
        let b8 = self.bc(I8X16, b);
        let imm = self.b.func.dfg.immediates.push(ConstantData::from(mask));
        let r = self.b.ins().shuffle(a8, b8, imm);
        self.bc(ta, r)
    }
    /// 32-bit lanes 0 and 2 of `a`, then of `b` (truncation of two `I64X2` into one `I32X4`).
    pub(super) fn narrow32(&mut self, a: Value, b: Value) -> Value {
        let a = self.bc(I32X4, a);
        let b = self.bc(I32X4, b);
        self.shuffle(a, b, lanes32([0, 2, 4, 6]))
    }
    /// Low 64 bits of `a`, then low 64 bits of `b`.
    pub(super) fn concat_low(&mut self, a: Value, b: Value) -> Value {
        self.shuffle(a, b, lanes32([0, 1, 4, 5]))
    }
    /// The high two 32-bit lanes of `a` moved to the low half.
    pub(super) fn high_to_low(&mut self, a: Value) -> Value {
        self.shuffle(a, a, lanes32([2, 3, 2, 3]))
    }
    /// A mask (`I32X4`) widened to two `I64X2` masks.
    pub(super) fn widen_mask(&mut self, m: Value) -> (Value, Value) {
        (self.b.ins().swiden_low(m), self.b.ins().swiden_high(m))
    }

    pub(super) fn map1(
        &mut self,
        a: V,
        mut f: impl FnMut(&mut FunctionBuilder<'f>, Value) -> Value,
    ) -> V {
        match a {
            V::One(x) => V::One(f(self.b, x)),
            V::Two(x, y) => {
                let lo = f(self.b, x);
                let hi = f(self.b, y);
                V::Two(lo, hi)
            }
        }
    }
    pub(super) fn map2(
        &mut self,
        a: V,
        b: V,
        mut f: impl FnMut(&mut FunctionBuilder<'f>, Value, Value) -> Value,
    ) -> V {
        match (a, b) {
            (V::One(x), V::One(y)) => V::One(f(self.b, x, y)),
            (V::Two(x0, x1), V::Two(y0, y1)) => {
                let lo = f(self.b, x0, y0);
                let hi = f(self.b, x1, y1);
                V::Two(lo, hi)
            }
            _ => unreachable!("operands of one type have one shape"),
        }
    }
    pub(super) fn map3(
        &mut self,
        a: V,
        b: V,
        c: V,
        mut f: impl FnMut(&mut FunctionBuilder<'f>, Value, Value, Value) -> Value,
    ) -> V {
        match (a, b, c) {
            (V::One(x), V::One(y), V::One(z)) => V::One(f(self.b, x, y, z)),
            (V::Two(x0, x1), V::Two(y0, y1), V::Two(z0, z1)) => {
                let lo = f(self.b, x0, y0, z0);
                let hi = f(self.b, x1, y1, z1);
                V::Two(lo, hi)
            }
            _ => unreachable!("operands of one type have one shape"),
        }
    }
    /// Bitwise op on the integer view of a value of type `t`.
    pub(super) fn bitwise(
        &mut self,
        t: VarType,
        a: V,
        b: V,
        f: impl FnMut(&mut FunctionBuilder<'f>, Value, Value) -> Value,
    ) -> V {
        let a = self.bc_v(ivty(t), a);
        let b = self.bc_v(ivty(t), b);
        let r = self.map2(a, b, f);
        self.bc_v(vty(t), r)
    }

    /// Lane `l` (0–3) of a value, as a scalar of its lane type.
    pub(super) fn extract(&mut self, v: V, l: usize) -> Value {
        match v {
            V::One(x) => self.b.ins().extractlane(x, l as u8),
            V::Two(x, _) if l < 2 => self.b.ins().extractlane(x, l as u8),
            V::Two(_, y) => self.b.ins().extractlane(y, (l - 2) as u8),
        }
    }
    /// A value of type `t` from four lane scalars of type `lane_ty(t)` (or its integer twin).
    pub(super) fn build(&mut self, t: VarType, lanes: &[Value]) -> V {
        if is_wide(t) {
            let ty = self
                .b
                .func
                .dfg
                .value_type(lanes[0])
                .by(2)
                .expect("64-bit lanes");
            let mut halves = [lanes[0]; 2];
            for (h, half) in halves.iter_mut().enumerate() {
                let v = self.b.ins().scalar_to_vector(ty, lanes[2 * h]);
                *half = self.b.ins().insertlane(v, lanes[2 * h + 1], 1);
            }
            V::Two(halves[0], halves[1])
        } else {
            let ty = self
                .b
                .func
                .dfg
                .value_type(lanes[0])
                .by(4)
                .expect("32-bit lanes");
            let mut v = self.b.ins().scalar_to_vector(ty, lanes[0]);
            for (l, &x) in lanes.iter().enumerate().skip(1) {
                v = self.b.ins().insertlane(v, x, l as u8);
            }
            V::One(v)
        }
    }
    /// Per-lane scalar fallback: `f` maps the lane scalars of `args` to one scalar of `lane_ty(out)`.
    pub(super) fn scalar_map(
        &mut self,
        out: VarType,
        args: &[V],
        mut f: impl FnMut(&mut FunctionBuilder<'f>, &[Value]) -> Value,
    ) -> V {
        let mut lanes = Vec::with_capacity(4);
        for l in 0..W as usize {
            let xs: Vec<Value> = args.iter().map(|&a| self.extract(a, l)).collect();
            lanes.push(f(self.b, &xs));
        }
        self.build(out, &lanes)
    }
}
