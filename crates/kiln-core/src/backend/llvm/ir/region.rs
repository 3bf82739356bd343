//! Regions: loops (masked and uniform) and switches, with their stack slots and active-lane masks.

use super::*;

impl Gen<'_> {
    pub(super) fn mask_or_all(&self) -> String {
        self.active.clone().unwrap_or_else(|| self.all_true())
    }

    pub(super) fn loop_begin(&mut self, idx: Reg) {
        let k = self.k;
        let w = self.w;
        let pf = self.pfx;
        let uniform = self.uniform_loop[idx as usize];
        let _ = writeln!(self.allocas, "  %{pf}it{idx} = alloca i64, align 8");
        self.line(format!("store i64 0, ptr %{pf}it{idx}, align 8"));
        if !uniform {
            let _ = writeln!(self.allocas, "  %{pf}act{idx} = alloca <{w} x i1>");
            let cur = self.mask_or_all();
            self.line(format!("store <{w} x i1> {cur}, ptr %{pf}act{idx}"));
        }
        // the phis follow the loop: store their initial values before entering
        let mut j = idx as usize + 1;
        while j < k.insts.len() && k.insts[j].op == Op::Phi {
            let pt = k.insts[j].ty;
            let pvt = self.vt(pt);
            let _ = writeln!(self.allocas, "  %{pf}phi{j} = alloca {pvt}");
            let init = self.r(k.insts[j].args[0]);
            self.line(format!("store {pvt} {init}, ptr %{pf}phi{j}"));
            j += 1;
        }
        let head = format!("{pf}L{idx}h");
        self.line(format!("br label %{head}"));
        self.label(&head);
        self.regions.push(Region::Loop {
            reg: idx,
            saved: self.active.clone(),
            body_active: None,
            uniform,
        });
        if !uniform {
            let act = self.fresh();
            self.line(format!("{act} = load <{w} x i1>, ptr %{pf}act{idx}"));
            self.active = Some(act);
        }
    }

    pub(super) fn loop_cond(&mut self, inst: &crate::kernel::Inst) {
        let k = self.k;
        let w = self.w;
        let pf = self.pfx;
        let Some(Region::Loop {
            reg,
            uniform,
            saved,
            ..
        }) = self.regions.last()
        else {
            unreachable!("verified: a condition sits in a loop")
        };
        let (reg, uniform, saved) = (*reg, *uniform, saved.clone());
        let max = k.insts[reg as usize].imm;
        let cond = self.r(inst.args[0]);
        // the lanes that run the body, and whether there are any
        let (ac, any) = if uniform {
            // every lane holds the same condition; it is read as "any lane", not as lane 0: an
            // `extractelement` of lane 0 lets LLVM's InstCombine (before LLVM 22, llvm-project
            // PR 169120) scalarise a state whose next value is `k - state` (or another operation
            // that does not commute) as `state - k`, and such a loop never left
            let any = self.any(&cond);
            (saved, any)
        } else {
            let act = self
                .active
                .clone()
                .expect("divergent loops set the active mask");
            let ac = self.fresh();
            self.line(format!("{ac} = and <{w} x i1> {act}, {cond}"));
            let any = self.any(&ac);
            (Some(ac), any)
        };
        let exit = format!("{pf}L{reg}x");
        let body = format!("{pf}L{reg}b");
        if max == 0 {
            self.line(format!("br i1 {any}, label %{body}, label %{exit}"));
        } else {
            let chk = format!("{pf}L{reg}c");
            let trunc = format!("{pf}L{reg}t");
            self.line(format!("br i1 {any}, label %{chk}, label %{exit}"));
            self.label(&chk);
            let (it, lim) = (self.fresh(), self.fresh());
            self.line(format!("{it} = load i64, ptr %{pf}it{reg}, align 8"));
            self.line(format!("{lim} = icmp uge i64 {it}, {max}"));
            self.line(format!("br i1 {lim}, label %{trunc}, label %{body}"));
            self.label(&trunc);
            let c = match &ac {
                Some(m) => {
                    let m = m.clone();
                    self.count(&m)
                }
                None => w.to_string(),
            };
            let (sp, old) = (self.fresh(), self.fresh());
            self.line(format!(
                "{sp} = getelementptr inbounds i64, ptr %status, i64 {}",
                crate::backend::STATUS_LOOP_TRUNCATED
            ));
            self.line(format!("{old} = atomicrmw add ptr {sp}, i64 {c} monotonic"));
            self.line(format!("br label %{exit}"));
        }
        self.label(&body);
        if let Some(Region::Loop { body_active, .. }) = self.regions.last_mut() {
            *body_active = ac.clone();
        }
        self.active = ac;
    }

    pub(super) fn loop_end(&mut self) {
        let w = self.w;
        let pf = self.pfx;
        let Some(Region::Loop {
            reg,
            saved,
            body_active,
            uniform,
        }) = self.regions.pop()
        else {
            unreachable!("verified: endloop closes a loop")
        };
        if !uniform {
            let ac = body_active.expect("divergent loops have a body mask");
            self.line(format!("store <{w} x i1> {ac}, ptr %{pf}act{reg}"));
        }
        let (it, it1) = (self.fresh(), self.fresh());
        self.line(format!("{it} = load i64, ptr %{pf}it{reg}, align 8"));
        self.line(format!("{it1} = add i64 {it}, 1"));
        self.line(format!("store i64 {it1}, ptr %{pf}it{reg}, align 8"));
        self.line(format!("br label %{pf}L{reg}h"));
        self.label(&format!("{pf}L{reg}x"));
        self.active = saved;
    }

    /// The outputs `(index, type)` that switch `sw` yields.
    pub(super) fn switch_slots(&self, sw: Reg) -> Vec<(u64, VarType)> {
        let k = self.k;
        let mut depth = 0usize;
        let mut slots: Vec<(u64, VarType)> = Vec::new();
        for inst in &k.insts[sw as usize + 1..] {
            match inst.op {
                Op::Switch | Op::LoopBegin => depth += 1,
                Op::LoopEnd => depth -= 1,
                Op::SwitchEnd if depth == 0 => break,
                Op::SwitchEnd => depth -= 1,
                Op::Yield if depth == 0 && !slots.iter().any(|&(j, _)| j == inst.imm) => {
                    slots.push((inst.imm, k.ty(inst.args[0])));
                }
                _ => {}
            }
        }
        slots
    }

    pub(super) fn switch_begin(&mut self, idx: Reg) {
        let pf = self.pfx;
        for (j, t) in self.switch_slots(idx) {
            let vt = self.vt(t);
            let _ = writeln!(self.allocas, "  %{pf}sw{idx}_{j} = alloca {vt}");
            self.line(format!("store {vt} zeroinitializer, ptr %{pf}sw{idx}_{j}"));
        }
        self.regions.push(Region::Switch {
            reg: idx,
            saved: self.active.clone(),
            cases: 0,
        });
    }

    pub(super) fn case(&mut self, inst: &crate::kernel::Inst) {
        let pf = self.pfx;
        let Some(Region::Switch { reg, saved, cases }) = self.regions.last_mut() else {
            unreachable!("verified: a case sits in a switch")
        };
        let (reg, saved, k) = (*reg, saved.clone(), *cases);
        *cases += 1;
        if k > 0 {
            self.line(format!("br label %{pf}S{reg}n{k}"));
            self.label(&format!("{pf}S{reg}n{k}"));
        }
        let mask = self.r(inst.args[0]);
        let cm = self.and_mask(saved.as_deref(), &mask);
        let any = self.any(&cm);
        let body = format!("{pf}S{reg}c{k}");
        self.line(format!(
            "br i1 {any}, label %{body}, label %{pf}S{reg}n{}",
            k + 1
        ));
        self.label(&body);
        self.active = Some(cm);
    }

    pub(super) fn switch_end(&mut self) {
        let pf = self.pfx;
        let Some(Region::Switch { reg, saved, cases }) = self.regions.pop() else {
            unreachable!("verified: endswitch closes a switch")
        };
        if cases > 0 {
            self.line(format!("br label %{pf}S{reg}n{cases}"));
            self.label(&format!("{pf}S{reg}n{cases}"));
        }
        self.active = saved;
    }
}
