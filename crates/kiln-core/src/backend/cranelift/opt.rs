//! What Cranelift's e-graph pass (off here) would otherwise do, done by the backend itself:
//! constants materialised at their uses, read from a per-kernel table (`Target::pool`) so that x64
//! can fold them into their users; dead-code removal; and the loop body's lowering order
//! (`Gen::body_order`), which keeps few values live at a time.

use super::Gen;
use cranelift_codegen::entity::SecondaryMap;
use cranelift_codegen::ir::types::{I32X4, I64X2};
use cranelift_codegen::ir::Opcode;
use cranelift_codegen::ir::{ConstantData, Function, InstBuilder, MemFlags, Type, Value};

/// Deletes instructions whose results are unused and that have no effect (the e-graph pass would,
/// when it runs). Beyond saving work, this matters to x64's load folding: a value counts as used
/// more than once, and so cannot have a load folded into it, if any user (even a dead one) of a
/// value computed from it is used more than once.
pub(super) fn remove_dead_code(func: &mut Function) {
    func.dfg.resolve_all_aliases();
    let mut uses: SecondaryMap<Value, u32> = SecondaryMap::new();
    let blocks: Vec<_> = func.layout.blocks().collect();
    for &block in &blocks {
        for inst in func.layout.block_insts(block) {
            for v in func.dfg.inst_values(inst) {
                uses[v] += 1;
            }
        }
    }
    let removable = |func: &Function, inst| {
        let data = &func.dfg.insts[inst];
        let op = data.opcode();
        // Loads that cannot trap (reads of inputs and constant tables): unused, they can go.
        let quiet_load =
            op == Opcode::Load && data.memflags().is_some_and(|f| f.trap_code().is_none());
        let effect = op.is_terminator()
            || op.is_call()
            || op.can_load()
            || op.can_store()
            || op.can_trap()
            || op.other_side_effects();
        quiet_load || !(effect || func.dfg.inst_results(inst).is_empty())
    };
    loop {
        let mut changed = false;
        for &block in blocks.iter().rev() {
            let insts: Vec<_> = func.layout.block_insts(block).collect();
            for &inst in insts.iter().rev() {
                if removable(func, inst)
                    && func.dfg.inst_results(inst).iter().all(|&r| uses[r] == 0)
                {
                    let args: Vec<Value> = func.dfg.inst_values(inst).collect();
                    for v in args {
                        uses[v] -= 1;
                    }
                    func.layout.remove_inst(inst);
                    changed = true;
                }
            }
        }
        if !changed {
            break;
        }
    }
}

impl<'f> Gen<'_, 'f> {
    /// The order in which to lower the loop body's instructions: memory accesses (loads, stores,
    /// gathers, scatters) keep their order, and each pure instruction comes right before its
    /// first use, its operands computed in Sethi–Ullman order (the one needing more registers
    /// first). This keeps few values live at a time, which matters all the more when several
    /// groups are interleaved: x64 has 16 vector registers.
    pub(super) fn body_order(&self) -> Vec<usize> {
        let k = self.k;
        let n = k.insts.len();
        let varying = |r: usize| !self.uniform[r];
        let mut need = vec![0u32; n];
        for r in 0..n {
            let mut kids: Vec<u32> = k.insts[r]
                .operands()
                .iter()
                .filter(|&&a| varying(a as usize))
                .map(|&a| need[a as usize])
                .collect();
            kids.sort_unstable_by(|a, b| b.cmp(a));
            need[r] = kids
                .iter()
                .enumerate()
                .map(|(i, &x)| x + i as u32)
                .max()
                .unwrap_or(1)
                .max(1);
        }
        let mut order = Vec::with_capacity(n);
        let mut done = vec![false; n];
        // Iterative post-order walk: (register, operands pushed yet).
        let mut stack: Vec<(usize, bool)> = Vec::new();
        for root in 0..n {
            if !varying(root) || k.insts[root].op.is_pure() {
                continue;
            }
            stack.push((root, false));
            while let Some((r, expanded)) = stack.pop() {
                if done[r] {
                    continue;
                }
                if expanded {
                    done[r] = true;
                    order.push(r);
                    continue;
                }
                stack.push((r, true));
                let mut kids: Vec<usize> = k.insts[r]
                    .operands()
                    .iter()
                    .map(|&a| a as usize)
                    .filter(|&a| varying(a) && !done[a] && k.insts[a].op.is_pure())
                    .collect();
                // Pushed last = visited first: the operand needing the most registers.
                kids.sort_by_key(|&a| need[a]);
                stack.extend(kids.into_iter().map(|a| (a, false)));
            }
        }
        order
    }

    pub(super) fn vconst<T: Copy + Into<u64>>(&mut self, ty: Type, lanes: &[T]) -> Value {
        let width = 16 / lanes.len();
        let bytes: Vec<u8> = lanes
            .iter()
            .flat_map(|&l| l.into().to_le_bytes().into_iter().take(width))
            .collect();
        if let (Some(base), true) = (self.pool_base, self.in_loop) {
            let trivial = bytes.iter().all(|&x| x == 0) || bytes.iter().all(|&x| x == 0xff);
            if !trivial {
                let key: [u8; 16] = bytes.as_slice().try_into().expect("16 bytes");
                if self.const_cache_on {
                    if let Some(&v) = self.const_cache.get(&(key, ty)) {
                        return v;
                    }
                }
                let next = self.pool.len() as u32;
                let off = *self.pool_index.entry(key).or_insert(next);
                if off == next {
                    self.pool.extend_from_slice(&key);
                }
                let flags = MemFlags::trusted().with_readonly();
                let v = self.b.ins().load(ty, flags, base, off as i32);
                if self.const_cache_on {
                    self.const_cache.insert((key, ty), v);
                }
                return v;
            }
        }
        let c = self.b.func.dfg.constants.insert(ConstantData::from(bytes));
        self.b.ins().vconst(ty, c)
    }
    pub(super) fn splat32(&mut self, x: u32) -> Value {
        self.vconst(I32X4, &[x; 4])
    }
    pub(super) fn splat64(&mut self, x: u64) -> Value {
        self.vconst(I64X2, &[x; 2])
    }
}
