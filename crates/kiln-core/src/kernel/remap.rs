//! A kernel moved onto other lanes: the same work at the lanes of `count` runs of `width`
//! consecutive lanes, `stride` lanes apart from `base`, so that one launch covers lanes spread out
//! at a fixed stride (a stencil's border gaps, one per grid row, which would otherwise each take a
//! call of their own).

use super::{Inst, Kernel, Param, ParamKind, Reg};
use crate::op::{Op, ReduceOp};
use crate::ty::VarType;

impl Kernel {
    /// This kernel computing lane `(c / width) · stride + base + c % width` at launch lane `c`,
    /// where `stride`, `base` and `width` are three size-1 `i64` parameters appended after its
    /// own: its lane index becomes that lane, its per-lane reads gathers there and its stores
    /// scatters there (so nothing outside the listed lanes is written). One launch of
    /// `count · width` lanes thus covers `count` runs of `width` lanes, the runs of a row's
    /// neighbouring lanes side by side in a vector (their reads share cache lines). `None` for a
    /// kernel with regions or scatters of its own (their order and indexing would change), or
    /// without outputs.
    ///
    /// ```
    /// use kiln_core::kernel::Kernel;
    /// // out[i] = x[i] * 2.5
    /// let k = Kernel::parse("
    ///     p0: in f32
    ///     p1: out f32
    ///     r0 = load.f32 p0
    ///     r1 = const.f32 2.5
    ///     r2 = mul.f32 r0, r1
    ///     store.f32 p1, r2
    /// ").unwrap();
    /// let moved = k.at_strided_lanes().unwrap();
    /// assert_eq!(moved.params.len(), 5); // and three i64 parameters: stride, base, width
    /// assert!(moved.verify().is_ok());
    /// assert!(moved.to_string().contains("gather.f32 p0"));
    /// assert!(moved.to_string().contains("scatter.f32 p1"));
    /// ```
    pub fn at_strided_lanes(&self) -> Option<Kernel> {
        let plain = |i: &Inst| !i.op.is_region() && !matches!(i.op, Op::Scatter(_));
        if !self.insts.iter().all(plain) || !self.insts.iter().any(|i| i.op == Op::Store) {
            return None;
        }
        let n = self.params.len() as u64;
        let mut params: Vec<Param> = self
            .params
            .iter()
            .map(|p| match p.kind {
                ParamKind::Input | ParamKind::Output => Param {
                    ty: p.ty,
                    kind: ParamKind::Indexed,
                },
                _ => *p,
            })
            .collect();
        let long = Param {
            ty: VarType::I64,
            kind: ParamKind::Broadcast,
        };
        params.extend([long, long, long]);
        // the lane worked out in f64, converted once: g = c / width as the integer part of
        // (c + 0.5) · (1 / width) (exact for every lane below 2^40: the product's rounding error,
        // a few units in the last place, stays far below the 0.5 / width that separates it from
        // an integer), then g · stride + base + (c − g · width), exact below 2^53. Vector
        // multiplications where integer division is scalar, and 1 / width the same in every lane.
        let (half, one) = (0.5f64.to_bits(), 1.0f64.to_bits());
        let f = VarType::F64;
        let mut insts = vec![
            Inst::new(Op::Counter, VarType::I64, &[], 0),  // r0 = c
            Inst::new(Op::Load, VarType::I64, &[], n),     // r1 = stride
            Inst::new(Op::Load, VarType::I64, &[], n + 1), // r2 = base
            Inst::new(Op::Load, VarType::I64, &[], n + 2), // r3 = width
            Inst::new(Op::Cast, f, &[0], 0),               // r4 = c
            Inst::new(Op::Literal, f, &[], half),          // r5 = 0.5
            Inst::new(Op::Add, f, &[4, 5], 0),             // r6 = c + 0.5
            Inst::new(Op::Literal, f, &[], one),           // r7 = 1
            Inst::new(Op::Cast, f, &[3], 0),               // r8 = width
            Inst::new(Op::Div, f, &[7, 8], 0),             // r9 = 1 / width
            Inst::new(Op::Mul, f, &[6, 9], 0),             // r10
            Inst::new(Op::Trunc, f, &[10], 0),             // r11 = g
            Inst::new(Op::Mul, f, &[11, 8], 0),            // r12 = g · width
            Inst::new(Op::Sub, f, &[4, 12], 0),            // r13 = c % width
            Inst::new(Op::Cast, f, &[1], 0),               // r14 = stride
            Inst::new(Op::Mul, f, &[11, 14], 0),           // r15 = g · stride
            Inst::new(Op::Cast, f, &[2], 0),               // r16 = base
            Inst::new(Op::Add, f, &[15, 16], 0),           // r17
            Inst::new(Op::Add, f, &[17, 13], 0),           // r18
            Inst::new(Op::Cast, VarType::I64, &[18], 0),   // r19 = the lane
            Inst::new(Op::Literal, VarType::Bool, &[], 1), // r20 = true
        ];
        let (lane, all): (Reg, Reg) = (19, 20);
        // old register → new register
        let mut moved: Vec<Reg> = Vec::with_capacity(self.insts.len());
        for inst in &self.insts {
            let mut args = inst.args;
            for a in &mut args[..inst.op.arity()] {
                *a = moved[*a as usize];
            }
            let p = inst.param() as u64;
            let kind = |p: u64| self.params[p as usize].kind;
            let new = match inst.op {
                Op::Counter if inst.ty == VarType::I64 => None,
                Op::Counter => Some(Inst::new(Op::Cast, inst.ty, &[lane], 0)),
                Op::Load if kind(p) == ParamKind::Input => {
                    Some(Inst::new(Op::Gather, inst.ty, &[lane, all], p))
                }
                Op::Store => Some(Inst::new(
                    Op::Scatter(ReduceOp::None),
                    inst.ty,
                    &[args[0], lane, all],
                    p,
                )),
                _ => Some(Inst { args, ..*inst }),
            };
            moved.push(match new {
                Some(i) => {
                    insts.push(i);
                    (insts.len() - 1) as Reg
                }
                None => lane,
            });
        }
        Some(Kernel { params, insts })
    }
}
