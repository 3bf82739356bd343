//! A kernel moved onto other lanes: the same work at lanes `g · stride + base` for `g` in the
//! launch's range, so that one launch covers lanes spread out at a fixed stride (a stencil's
//! border gaps, one per grid row, which would otherwise each take a call of their own).

use super::{Inst, Kernel, Param, ParamKind, Reg};
use crate::op::{Op, ReduceOp};
use crate::ty::VarType;

impl Kernel {
    /// This kernel computing lane `g · stride + base` at launch lane `g`, where `stride` and
    /// `base` are two size-1 `i64` parameters appended after its own: its lane index becomes
    /// that lane, its per-lane reads gathers there and its stores scatters there (so nothing
    /// outside the listed lanes is written). `None` for a kernel with regions or scatters of its
    /// own (their order and indexing would change), or without outputs.
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
    /// assert_eq!(moved.params.len(), 4); // and two i64 parameters: stride, base
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
        params.extend([long, long]);
        let mut insts = vec![
            Inst::new(Op::Counter, VarType::I64, &[], 0),
            Inst::new(Op::Load, VarType::I64, &[], n),
            Inst::new(Op::Load, VarType::I64, &[], n + 1),
            Inst::new(Op::Mul, VarType::I64, &[0, 1], 0),
            Inst::new(Op::Add, VarType::I64, &[3, 2], 0),
            Inst::new(Op::Literal, VarType::Bool, &[], 1),
        ];
        let (lane, all): (Reg, Reg) = (4, 5);
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
