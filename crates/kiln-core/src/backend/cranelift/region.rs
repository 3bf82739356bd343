//! Structured regions (loops, switches) in vector code. All the groups of four lanes lowered side
//! by side share one control flow: a loop runs while any lane of any group is active, a case is
//! skipped when no lane of any group takes it. Per group, a mask of active lanes narrows inside
//! regions; gathers and scatters use it, phis keep the old value where it is off, yields write
//! only where it is on. Loop-carried values and switch outputs live in Cranelift variables, whose
//! SSA construction places the block parameters.

use super::{vty, Gen, V};
use crate::backend::STATUS_LOOP_TRUNCATED;
use crate::kernel::Reg;
use crate::op::Op;
use crate::ty::VarType;
use cranelift_codegen::ir::condcodes::IntCC;
use cranelift_codegen::ir::types::{I32, I32X4, I64};
use cranelift_codegen::ir::{AtomicRmwOp, Block, InstBuilder, MemFlags, Value};
use cranelift_frontend::Variable;
use std::collections::HashMap;

/// The variables holding one register's value for one group (the second for 64-bit types).
#[derive(Clone, Copy)]
pub(super) struct VarPair(Variable, Option<Variable>);

/// An open region.
pub(super) enum Frame {
    Loop {
        header: Block,
        exit: Option<Block>,
        /// Per phi: its register and its variables per group.
        phis: Vec<(usize, Vec<VarPair>)>,
        /// The active-lane mask of each group, loop-carried.
        masks: Vec<Variable>,
        iter: Option<Variable>,
        saved: Vec<Value>,
        /// The condition is the same in every lane: lanes never diverge, no masking needed.
        uniform_cond: bool,
    },
    Switch {
        at: usize,
        /// The block after the current case (taken when no lane runs it).
        next: Option<Block>,
        saved: Vec<Value>,
    },
}

/// Region bookkeeping of one kernel's code generation.
#[derive(Default)]
pub(super) struct Regions {
    pub frames: Vec<Frame>,
    /// Active-lane mask per group of the chunk being lowered.
    pub active: Vec<Value>,
    /// Switch outputs: (switch, slot) → variables per group.
    pub slots: HashMap<(usize, u32), Vec<VarPair>>,
    /// Registers with one value for every lane of every group inside loops too (see
    /// `uniform_in_loops`): computed once per iteration, not once per group.
    pub uniform: Vec<bool>,
    /// Each loop's condition instruction.
    pub cond_of: HashMap<usize, usize>,
}

pub(super) use crate::backend::uniform_in_loops;

impl<'f> Gen<'_, 'f> {
    fn declare(&mut self, t: VarType) -> VarPair {
        let ty = vty(t);
        let a = self.b.declare_var(ty);
        let b = super::is_wide(t).then(|| self.b.declare_var(ty));
        VarPair(a, b)
    }
    fn def(&mut self, v: VarPair, x: V) -> Result<(), String> {
        match (x, v) {
            (V::One(x), VarPair(a, None)) => self.b.def_var(a, x),
            (V::Two(x, y), VarPair(a, Some(b))) => {
                self.b.def_var(a, x);
                self.b.def_var(b, y);
            }
            _ => return Err("region value has the wrong shape".into()),
        }
        Ok(())
    }
    fn use_pair(&mut self, v: VarPair) -> V {
        match v {
            VarPair(a, None) => V::One(self.b.use_var(a)),
            VarPair(a, Some(b)) => V::Two(self.b.use_var(a), self.b.use_var(b)),
        }
    }
    fn any_active(&mut self, masks: &[Value]) -> Value {
        let mut any = masks[0];
        for &m in &masks[1..] {
            any = self.b.ins().bor(any, m);
        }
        self.b.ins().vany_true(any)
    }

    /// Lower region instruction `r` for every group of the chunk (`groups`: their registers).
    pub(super) fn region_op(
        &mut self,
        r: usize,
        groups: &mut [Vec<Option<V>>],
    ) -> Result<(), String> {
        let inst = self.k.insts[r];
        let get = |groups: &[Vec<Option<V>>], u: usize, a: Reg| {
            groups[u][a as usize].ok_or_else(|| format!("register r{a} has no value"))
        };
        let n = groups.len();
        match inst.op {
            Op::LoopBegin => {
                let mut phis = Vec::new();
                let mut p = r + 1;
                while p < self.k.insts.len() && self.k.insts[p].op == Op::Phi {
                    let init = self.k.insts[p].args[0];
                    let t = self.k.insts[p].ty;
                    let mut vars = Vec::with_capacity(n);
                    if self.regions.uniform[p] {
                        // one variable shared by every group
                        let x = self.group_val(groups, 0, init)?;
                        let v = self.declare(t);
                        self.def(v, x)?;
                        vars.resize(n, v);
                    } else {
                        for u in 0..n {
                            let x = self.group_val(groups, u, init)?;
                            let v = self.declare(t);
                            self.def(v, x)?;
                            vars.push(v);
                        }
                    }
                    phis.push((p, vars));
                    p += 1;
                }
                let uniform_cond = self
                    .regions
                    .cond_of
                    .get(&r)
                    .is_some_and(|&c| self.regions.uniform[self.k.insts[c].args[0] as usize]);
                let saved = self.regions.active.clone();
                let mut masks = Vec::with_capacity(n);
                for &m in &saved {
                    let v = self.b.declare_var(I32X4);
                    self.b.def_var(v, m);
                    masks.push(v);
                }
                let iter = (inst.imm != 0).then(|| {
                    let v = self.b.declare_var(I64);
                    let zero = self.b.ins().iconst(I64, 0);
                    self.b.def_var(v, zero);
                    v
                });
                let header = self.b.create_block();
                self.b.ins().jump(header, &[]);
                self.b.switch_to_block(header);
                // the condition code runs for the lanes still in the loop (in a uniform loop, the
                // lanes that entered it: the same values, so that `full_active` still matches)
                self.regions.active = if uniform_cond {
                    saved.clone()
                } else {
                    masks.iter().map(|&m| self.b.use_var(m)).collect()
                };
                self.regions.frames.push(Frame::Loop {
                    header,
                    exit: None,
                    phis,
                    masks,
                    iter,
                    saved,
                    uniform_cond,
                });
            }
            Op::Phi => {
                let Some(Frame::Loop { phis, .. }) = self.regions.frames.last() else {
                    return Err("phi outside a loop".into());
                };
                let vars = phis
                    .iter()
                    .find(|(p, _)| *p == r)
                    .map(|(_, v)| v.clone())
                    .ok_or("phi not declared by its loop")?;
                for (u, v) in vars.into_iter().enumerate() {
                    groups[u][r] = Some(self.use_pair(v));
                }
            }
            Op::LoopCond => {
                let Some(Frame::Loop {
                    masks,
                    iter,
                    uniform_cond,
                    ..
                }) = self.regions.frames.last()
                else {
                    return Err("condition outside a loop".into());
                };
                let (masks, iter, uniform_cond) = (masks.clone(), *iter, *uniform_cond);
                let mut now = Vec::with_capacity(n);
                let any = if uniform_cond {
                    // every lane agrees: the lanes stay as they entered, lane 0 decides
                    now.extend_from_slice(&self.regions.active);
                    let V::One(c) = get(groups, 0, inst.args[0])? else {
                        return Err("loop condition is not a mask".into());
                    };
                    self.b.ins().extractlane(c, 0)
                } else {
                    for (u, &mv) in masks.iter().enumerate() {
                        let V::One(c) = get(groups, u, inst.args[0])? else {
                            return Err("loop condition is not a mask".into());
                        };
                        let m = self.b.use_var(mv);
                        let m = self.b.ins().band(m, c);
                        self.b.def_var(mv, m);
                        now.push(m);
                    }
                    self.any_active(&now)
                };
                let body = self.b.create_block();
                let exit = self.b.create_block();
                match iter {
                    None => {
                        self.b.ins().brif(any, body, &[], exit, &[]);
                    }
                    Some(it) => {
                        // at the limit with lanes still active: count them, then leave
                        let check = self.b.create_block();
                        let trunc = self.b.create_block();
                        self.b.ins().brif(any, check, &[], exit, &[]);
                        self.b.switch_to_block(check);
                        self.b.seal_block(check);
                        let i = self.b.use_var(it);
                        let under = self.b.ins().icmp_imm(
                            IntCC::UnsignedLessThan,
                            i,
                            inst_limit(self.k, r) as i64,
                        );
                        self.b.ins().brif(under, body, &[], trunc, &[]);
                        self.b.switch_to_block(trunc);
                        self.b.seal_block(trunc);
                        let mut count: Option<Value> = None;
                        for &m in &now {
                            let bits = self.b.ins().vhigh_bits(I32, m);
                            let c = self.b.ins().popcnt(bits);
                            count = Some(match count {
                                None => c,
                                Some(s) => self.b.ins().iadd(s, c),
                            });
                        }
                        let count = self.b.ins().uextend(I64, count.expect("one group"));
                        let addr = self
                            .b
                            .ins()
                            .iadd_imm(self.status, 8 * STATUS_LOOP_TRUNCATED as i64);
                        self.b.ins().atomic_rmw(
                            I64,
                            MemFlags::trusted(),
                            AtomicRmwOp::Add,
                            addr,
                            count,
                        );
                        self.b.ins().jump(exit, &[]);
                    }
                }
                self.b.switch_to_block(body);
                self.b.seal_block(body);
                self.regions.active = now;
                if let Some(Frame::Loop { exit: e, .. }) = self.regions.frames.last_mut() {
                    *e = Some(exit);
                }
            }
            Op::LoopNext => {
                let (p, x) = (inst.args[0] as usize, inst.args[1]);
                let Some(Frame::Loop {
                    phis, uniform_cond, ..
                }) = self.regions.frames.last()
                else {
                    return Err("next value outside a loop".into());
                };
                let uniform_cond = *uniform_cond;
                let vars = phis
                    .iter()
                    .find(|(q, _)| *q == p)
                    .map(|(_, v)| v.clone())
                    .ok_or("next value of an unknown phi")?;
                let t = self.k.insts[p].ty;
                if self.regions.uniform[p] {
                    let new = self.group_val(groups, 0, x)?;
                    self.def(vars[0], new)?;
                    return Ok(());
                }
                if uniform_cond {
                    // every lane that entered runs every iteration: nothing to keep
                    for (u, v) in vars.into_iter().enumerate() {
                        let new = self.group_val(groups, u, x)?;
                        self.def(v, new)?;
                    }
                    return Ok(());
                }
                for (u, v) in vars.into_iter().enumerate() {
                    let new = self.group_val(groups, u, x)?;
                    let old = get(groups, u, p as Reg)?;
                    let m = self.regions.active[u];
                    let keep = self.select_v(t, m, new, old)?;
                    self.def(v, keep)?;
                }
            }
            Op::LoopEnd => {
                let Some(Frame::Loop {
                    header,
                    exit,
                    phis,
                    iter,
                    saved,
                    ..
                }) = self.regions.frames.pop()
                else {
                    return Err("endloop without a loop".into());
                };
                if let Some(it) = iter {
                    let i = self.b.use_var(it);
                    let i = self.b.ins().iadd_imm(i, 1);
                    self.b.def_var(it, i);
                }
                self.b.ins().jump(header, &[]);
                self.b.seal_block(header);
                let exit = exit.ok_or("loop without a condition")?;
                self.b.switch_to_block(exit);
                self.b.seal_block(exit);
                for (p, vars) in phis {
                    for (u, v) in vars.into_iter().enumerate() {
                        groups[u][p] = Some(self.use_pair(v));
                    }
                }
                self.regions.active = saved;
            }
            Op::Switch => {
                // every output starts at 0 (lanes no case takes)
                let outs: Vec<(u32, VarType)> = self
                    .k
                    .insts
                    .iter()
                    .filter(|i| i.op == Op::Out && i.args[0] as usize == r)
                    .map(|i| (i.imm as u32, i.ty))
                    .collect();
                for (j, t) in outs {
                    // (declared anew each time the kernel body is emitted: main and tail loop)
                    let mut vars = Vec::with_capacity(n);
                    for _ in 0..n {
                        let v = self.declare(t);
                        let zero = self.literal(t, 0);
                        self.def(v, zero)?;
                        vars.push(v);
                    }
                    self.regions.slots.insert((r, j), vars);
                }
                let saved = self.regions.active.clone();
                self.regions.frames.push(Frame::Switch {
                    at: r,
                    next: None,
                    saved,
                });
            }
            Op::Case => {
                let Some(Frame::Switch { next, saved, .. }) = self.regions.frames.last() else {
                    return Err("case outside a switch".into());
                };
                let (prev, saved) = (*next, saved.clone());
                if let Some(b) = prev {
                    self.b.ins().jump(b, &[]);
                    self.b.switch_to_block(b);
                    self.b.seal_block(b);
                }
                let mut now = Vec::with_capacity(n);
                for (u, &s) in saved.iter().enumerate() {
                    let V::One(c) = get(groups, u, inst.args[0])? else {
                        return Err("case mask is not a mask".into());
                    };
                    now.push(self.b.ins().band(s, c));
                }
                let any = self.any_active(&now);
                let body = self.b.create_block();
                let after = self.b.create_block();
                self.b.ins().brif(any, body, &[], after, &[]);
                self.b.switch_to_block(body);
                self.b.seal_block(body);
                self.regions.active = now;
                if let Some(Frame::Switch { next, .. }) = self.regions.frames.last_mut() {
                    *next = Some(after);
                }
            }
            Op::Yield => {
                let sw = self
                    .regions
                    .frames
                    .iter()
                    .rev()
                    .find_map(|f| match f {
                        Frame::Switch { at, .. } => Some(*at),
                        Frame::Loop { .. } => None,
                    })
                    .ok_or("yield outside a switch")?;
                let Some(vars) = self.regions.slots.get(&(sw, inst.imm as u32)).cloned() else {
                    // nobody reads this output
                    return Ok(());
                };
                let t = self.k.ty(inst.args[0]);
                for (u, v) in vars.into_iter().enumerate() {
                    let x = self.group_val(groups, u, inst.args[0])?;
                    let old = self.use_pair(v);
                    let m = self.regions.active[u];
                    let new = self.select_v(t, m, x, old)?;
                    self.def(v, new)?;
                }
            }
            Op::SwitchEnd => {
                let Some(Frame::Switch { next, saved, .. }) = self.regions.frames.pop() else {
                    return Err("endswitch without a switch".into());
                };
                if let Some(b) = next {
                    self.b.ins().jump(b, &[]);
                    self.b.switch_to_block(b);
                    self.b.seal_block(b);
                }
                self.regions.active = saved;
            }
            Op::Out => {
                let vars = self
                    .regions
                    .slots
                    .get(&(inst.args[0] as usize, inst.imm as u32))
                    .cloned()
                    .ok_or("output of a switch that was not lowered")?;
                for (u, v) in vars.into_iter().enumerate() {
                    groups[u][r] = Some(self.use_pair(v));
                }
            }
            other => return Err(format!("`{other}` is not a region instruction")),
        }
        Ok(())
    }

    /// Register `a` of group `u`, re-materialising literals as `val` does.
    fn group_val(&mut self, groups: &mut [Vec<Option<V>>], u: usize, a: Reg) -> Result<V, String> {
        std::mem::swap(&mut self.vals, &mut groups[u]);
        let v = self.val(a);
        std::mem::swap(&mut self.vals, &mut groups[u]);
        v
    }
}

/// The iteration limit of the loop whose condition is instruction `r`.
fn inst_limit(k: &crate::kernel::Kernel, r: usize) -> u64 {
    let mut depth = 0usize;
    for i in (0..r).rev() {
        match k.insts[i].op {
            Op::LoopEnd => depth += 1,
            Op::LoopBegin if depth == 0 => return k.insts[i].imm,
            Op::LoopBegin => depth -= 1,
            _ => {}
        }
    }
    0
}
