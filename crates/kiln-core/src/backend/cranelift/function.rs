//! The function skeleton: the entry block (parameter bases and lengths, loop-invariant
//! instructions computed once), the main loop running `G` groups of four lanes per iteration,
//! their instructions lowered side by side (`Gen::emit_groups`), and the one-group loop, the
//! generic code, that finishes the range.

use super::affine::affine_values;
use super::{Gen, Target, Tuning, V, W};
use crate::backend::{STATUS_OOB_READS, STATUS_OOB_WRITES};
use crate::error::Result;
use crate::kernel::{Kernel, ParamKind};
use crate::op::{Op, ReduceOp};
use crate::ty::VarType;
use cranelift_codegen::ir::condcodes::IntCC;
use cranelift_codegen::ir::types::{I32, I32X4, I64};
use cranelift_codegen::ir::{
    AtomicRmwOp, Block, FuncRef, GlobalValue, InstBuilder, MemFlags, Value,
};
use cranelift_frontend::{FunctionBuilder, Variable};
use std::collections::HashMap;

/// Groups of four lanes per main-loop iteration for a kernel with `body` per-lane instructions.
pub(super) fn pick_unroll(tuning: Tuning, body: usize, calls_helper: bool) -> usize {
    if calls_helper {
        // Every reducing scatter lane is a call, which clobbers all vector registers: nothing to
        // overlap.
        return 1;
    }
    match tuning.unroll {
        0 => match body {
            0..=150 => 4,
            151..=500 => 2,
            _ => 1,
        },
        u => u,
    }
}

/// The most lane-dependent values alive at once in one group (64-bit ones count twice: four lanes
/// take two registers), to judge how many groups fit in the vector registers.
fn max_live(k: &Kernel, uniform: &[bool]) -> usize {
    let n = k.insts.len();
    let mut last = vec![0usize; n];
    for (i, inst) in k.insts.iter().enumerate() {
        for &a in inst.operands() {
            last[a as usize] = i;
        }
    }
    let weight = |r: usize| {
        if k.insts[r].ty.size_bytes() == 8 {
            2
        } else {
            1
        }
    };
    let mut dies: Vec<Vec<usize>> = vec![Vec::new(); n];
    for r in 0..n {
        if !uniform[r] && last[r] > r {
            dies[last[r]].push(r);
        }
    }
    let (mut live, mut most) = (0usize, 0usize);
    for i in 0..n {
        if !uniform[i] && last[i] > i {
            live += weight(i);
        }
        most = most.max(live);
        for &r in &dies[i] {
            live -= weight(r);
        }
    }
    most
}

/// Builds the kernel's function; returns the contents of its constant table (see `Target::pool`).
pub(super) fn build_function(
    b: &mut FunctionBuilder<'_>,
    k: &Kernel,
    scatter: Option<FuncRef>,
    pool: Option<GlobalValue>,
    tuning: Tuning,
    target: Target,
) -> Result<Vec<u8>, String> {
    let entry = b.create_block();
    b.append_block_params_for_function_params(entry);
    b.switch_to_block(entry);
    b.seal_block(entry);
    let (args, start, end) = {
        let p = b.block_params(entry);
        (p[0], p[1], p[2])
    };
    let trusted = MemFlags::trusted();
    let ptrs = b.ins().load(I64, trusted, args, 0);
    let lens_ptr = b.ins().load(I64, trusted, args, 8);
    let status = b.ins().load(I64, trusted, args, 16);

    let mut used = vec![false; k.params.len()];
    for i in &k.insts {
        if matches!(i.op, Op::Load | Op::Store | Op::Gather | Op::Scatter(_)) {
            used[i.param()] = true;
        }
    }
    let mut bases = vec![None; k.params.len()];
    let mut lens = vec![None; k.params.len()];
    for (p, param) in k.params.iter().enumerate() {
        if used[p] {
            bases[p] = Some(b.ins().load(I64, trusted, ptrs, 8 * p as i32));
            if param.kind == ParamKind::Indexed {
                lens[p] = Some(b.ins().load(I64, trusted, lens_ptr, 8 * p as i32));
            }
        }
    }

    let has_gather = k.insts.iter().any(|i| i.op == Op::Gather);
    let has_scatter = k.insts.iter().any(|i| matches!(i.op, Op::Scatter(_)));
    let has_plain_scatter = k.insts.iter().any(|i| i.op == Op::Scatter(ReduceOp::None));
    // Regions need the mask of lanes below `end` too: a loop must not run lanes past the end.
    let has_regions = k.insts.iter().any(|i| i.op.is_region());
    let has_random_access = has_gather || has_scatter || has_regions;
    let mut counter = |on: bool| {
        on.then(|| {
            let v = b.declare_var(I64);
            let zero = b.ins().iconst(I64, 0);
            b.def_var(v, zero);
            v
        })
    };
    let oob = counter(has_gather);
    let oob_writes = counter(has_plain_scatter);
    let lane_var = b.declare_var(I64);
    b.def_var(lane_var, start);
    let pool_base = pool.map(|gv| b.ins().global_value(I64, gv));

    let n = k.insts.len();
    let mut g = Gen {
        b,
        k,
        target,
        mem: MemFlags::new().with_notrap(),
        vals: vec![None; n],
        uniform: vec![false; n],
        contiguous: crate::backend::contiguous_indices(k),
        row_only: Vec::new(),
        lit: k
            .insts
            .iter()
            .map(|i| (i.op == Op::Literal).then_some(i.imm))
            .collect(),
        amount: vec![None; n],
        bases,
        lens,
        status,
        lane: start,
        active: None,
        in_loop: false,
        affine: Vec::new(),
        affine_base: vec![None; n],
        iter_lane: start,
        group: 0,
        pool: Vec::new(),
        pool_index: HashMap::new(),
        pool_base,
        // (a constant read in one branch must not be reused in another)
        const_cache_on: tuning.const_cache > 0 && !has_scatter && !has_regions,
        const_cache_per_inst: tuning.const_cache == 1,
        const_cache: HashMap::new(),
        schedule: tuning.schedule && !has_regions,
        oob,
        oob_writes,
        full_active: None,
        run_bounds: HashMap::new(),
        scatter,
        regions: Default::default(),
    };

    g.lower_invariants()?;
    if has_regions {
        let (u, cond_of) = super::region::uniform_in_loops(k, &g.uniform);
        g.regions.uniform = u;
        g.regions.cond_of = cond_of;
    }
    let invariant = g.vals.clone();
    let Unroll {
        groups,
        interleave,
        affine,
        use_affine,
    } = g.choose_unroll(tuning, scatter.is_some(), has_regions);
    // (values lowered through their affine form are not deferred: see `row_only_indices`)
    let lowered_affine: &[_] = if use_affine { &affine } else { &[] };
    g.row_only = super::memory::row_only_indices(k, &g.contiguous, lowered_affine);

    // still in the entry block: the bounds of row reads and writes, computed once
    let per_chunk = interleave.max(1).min(groups);
    g.precompute_run_bounds(&[1, per_chunk, groups % per_chunk])?;

    let tail_header = g.b.create_block();
    let tail_body = g.b.create_block();
    let exit = g.b.create_block();
    if groups > 1 || use_affine {
        let lanes = Lanes {
            var: lane_var,
            end,
            groups,
            interleave,
            random_access: has_random_access,
        };
        g.main_loop(&invariant, &lanes, affine, use_affine, tail_header)?;
    } else {
        g.b.ins().jump(tail_header, &[]);
    }

    g.tail_loop(
        &invariant,
        lane_var,
        end,
        has_random_access,
        [tail_header, tail_body, exit],
    )?;
    g.add_status_counts();
    g.b.ins().return_(&[]);
    let mut pool = g.pool;
    if pool.is_empty() {
        pool.resize(16, 0);
    }
    Ok(pool)
}

/// How the lane loop is unrolled: groups of `W` lanes per iteration, how many are lowered side by
/// side, and the affine forms used by the main loop (if any).
struct Unroll {
    groups: usize,
    interleave: usize,
    affine: Vec<Option<super::affine::Affine>>,
    use_affine: bool,
}

/// The main loop's lanes: the lane variable, the end, and how many groups per iteration.
struct Lanes {
    var: Variable,
    end: Value,
    groups: usize,
    interleave: usize,
    random_access: bool,
}

impl Gen<'_, '_> {
    /// Loop-invariant values (literals, broadcast loads and pure instructions of those), computed
    /// once in the entry block, and the scalar shift amounts of lane-dependent shifts by them.
    fn lower_invariants(&mut self) -> Result<(), String> {
        for (r, inst) in self.k.insts.iter().enumerate() {
            let invariant = match inst.op {
                Op::Literal => true,
                Op::Load => self.k.params[inst.imm as usize].kind == ParamKind::Broadcast,
                op => {
                    op.is_pure()
                        && op != Op::Counter
                        && inst.has_value()
                        && inst.operands().iter().all(|&a| self.uniform[a as usize])
                }
            };
            if invariant {
                self.uniform[r] = true;
                self.vals[r] = self.lower(r)?;
            }
        }
        // Scalar shift amounts of invariant, non-literal amounts of lane-dependent shifts.
        for (r, inst) in self.k.insts.iter().enumerate() {
            if matches!(inst.op, Op::Shl | Op::Shr) && !self.uniform[r] {
                let a = inst.args[1] as usize;
                if self.uniform[a] && self.lit[a].is_none() && self.amount[a].is_none() {
                    let v = self.val(a as u32)?;
                    let s = self.extract(v, 0);
                    self.amount[a] = Some(self.b.ins().band_imm(s, inst.ty.bits() as i64 - 1));
                }
            }
        }
        Ok(())
    }

    /// Groups per iteration and interleaving, from the tuning and the kernel's shape.
    fn choose_unroll(
        &mut self,
        tuning: Tuning,
        has_scatter_call: bool,
        has_regions: bool,
    ) -> Unroll {
        let body = self.uniform.iter().filter(|&&u| !u).count();
        let mut groups = pick_unroll(tuning, body, has_scatter_call);
        if has_regions
            && self
                .k
                .insts
                .iter()
                .any(|i| i.op == Op::Gather && self.contiguous[i.args[0] as usize])
        {
            // A loop that walks rows (a fused scan): two groups per iteration, one check per step
            // (`rows_of_groups`), and no spills; four groups spilled their lane bases and ran the EMA
            // of `scan wide` 40% slower on one thread (43 vs 31 ms at 100 000 signals).
            groups = groups.min(2);
        }
        let mut interleave = tuning.interleave;
        if tuning.unroll == 0 && groups == 4 && max_live(self.k, &self.uniform) <= 3 {
            // A long dependency chain with few values alive (`y = y * a + c` a hundred times): eight
            // independent groups hide each op's latency and still fit the 16 vector registers.
            groups = 8;
            interleave = 8;
        }
        tracing::debug!(target: "kiln::cranelift", "kernel of {} instructions, {body} per lane: {groups} groups per iteration", self.k.insts.len());
        // Affine values are worth a loop of their own when some lane-dependent instruction other
        // than a counter or a cast would be replaced.
        let affine = affine_values(self.k);
        if has_regions {
            // all groups of an iteration share one control flow: lower them side by side
            interleave = groups;
        }
        let use_affine = tuning.affine
            && !has_regions
            && self.k.insts.iter().enumerate().any(|(r, inst)| {
                affine[r].is_some()
                    && !self.uniform[r]
                    && !matches!(inst.op, Op::Counter | Op::Cast)
            });
        Unroll {
            groups,
            interleave,
            affine,
            use_affine,
        }
    }

    /// Main loop: `groups` whole vectors per iteration while that many lanes remain.
    fn main_loop(
        &mut self,
        invariant: &[Option<V>],
        l: &Lanes,
        affine: Vec<Option<super::affine::Affine>>,
        use_affine: bool,
        tail_header: Block,
    ) -> Result<(), String> {
        // Main loop: `groups` whole vectors per iteration while that many lanes remain.
        let (groups, end) = (l.groups, l.end);
        let step = W * groups as i64;
        let header = self.b.create_block();
        let body = self.b.create_block();
        if use_affine && affine.iter().flatten().any(|a| a.small_lanes) {
            // Some affine forms hold only for lane indices below 2^31: larger ranges take the
            // generic loop.
            let small = self
                .b
                .ins()
                .icmp_imm(IntCC::UnsignedLessThanOrEqual, end, 1 << 31);
            self.b.ins().brif(small, header, &[], tail_header, &[]);
        } else {
            self.b.ins().jump(header, &[]);
        }
        self.affine = if use_affine { affine } else { Vec::new() };
        self.b.switch_to_block(header);
        let i = self.b.use_var(l.var);
        let rem = self.b.ins().isub(end, i);
        let more = self
            .b
            .ins()
            .icmp_imm(IntCC::UnsignedGreaterThanOrEqual, rem, step);
        self.b.ins().brif(more, body, &[], tail_header, &[]);
        self.b.switch_to_block(body);
        self.b.seal_block(body);
        let lanes: Vec<Value> = (0..groups)
            .map(|u| {
                if u == 0 {
                    i
                } else {
                    self.b.ins().iadd_imm(i, W * u as i64)
                }
            })
            .collect();
        let active = if l.random_access {
            // Every lane of these groups is below `end`.
            Some(self.vconst(I32X4, &[u32::MAX; 4]))
        } else {
            None
        };
        self.full_active = active;
        self.emit_groups(invariant, &lanes, active, l.interleave)?;
        self.full_active = None;
        self.affine = Vec::new();
        let next = self.b.ins().iadd_imm(i, step);
        self.b.def_var(l.var, next);
        self.b.ins().jump(header, &[]);
        self.b.seal_block(header);
        Ok(())
    }

    /// One vector per iteration up to `end` (the whole range when not unrolled).
    fn tail_loop(
        &mut self,
        invariant: &[Option<V>],
        lane_var: Variable,
        end: Value,
        random_access: bool,
        [tail_header, tail_body, exit]: [Block; 3],
    ) -> Result<(), String> {
        // One vector per iteration up to `end` (the whole range when not unrolled).
        self.b.switch_to_block(tail_header);
        let i = self.b.use_var(lane_var);
        let more = self.b.ins().icmp(IntCC::UnsignedLessThan, i, end);
        self.b.ins().brif(more, tail_body, &[], exit, &[]);

        self.b.switch_to_block(tail_body);
        self.b.seal_block(tail_body);
        let active = if random_access {
            // Lanes of this iteration below `end`: (end - i) min 4 > [0, 1, 2, 3].
            let rem = self.b.ins().isub(end, i);
            let four = self.b.ins().iconst(I64, W);
            let rem = self.b.ins().umin(rem, four);
            let rem = self.b.ins().ireduce(I32, rem);
            let rem = self.b.ins().splat(I32X4, rem);
            let iota = self.vconst(I32X4, &[0u32, 1, 2, 3]);
            Some(self.b.ins().icmp(IntCC::SignedGreaterThan, rem, iota))
        } else {
            None
        };
        self.emit_groups(invariant, &[i], active, 1)?;
        let next = self.b.ins().iadd_imm(i, W);
        self.b.def_var(lane_var, next);
        self.b.ins().jump(tail_header, &[]);
        self.b.seal_block(tail_header);
        self.b.switch_to_block(exit);
        self.b.seal_block(exit);
        Ok(())
    }

    /// Add the kernel's out-of-range counts to the launch's status, once per launch.
    fn add_status_counts(&mut self) {
        for (var, slot) in [
            (self.oob, STATUS_OOB_READS),
            (self.oob_writes, STATUS_OOB_WRITES),
        ] {
            let Some(var) = var else { continue };
            let count = self.b.use_var(var);
            let add = self.b.create_block();
            let done = self.b.create_block();
            self.b.ins().brif(count, add, &[], done, &[]);
            self.b.switch_to_block(add);
            self.b.seal_block(add);
            let addr = self.b.ins().iadd_imm(self.status, 8 * slot as i64);
            self.b
                .ins()
                .atomic_rmw(I64, MemFlags::trusted(), AtomicRmwOp::Add, addr, count);
            self.b.ins().jump(done, &[]);
            self.b.switch_to_block(done);
            self.b.seal_block(done);
        }
    }
}

impl<'f> Gen<'_, 'f> {
    /// Lower every lane-dependent instruction for each group of four lanes starting at `lanes`
    /// (`active`: the mask of lanes below `end`, for gathers and scatters). `invariant` holds the
    /// loop-invariant values, shared by all groups.
    pub(super) fn emit_groups(
        &mut self,
        invariant: &[Option<V>],
        lanes: &[Value],
        active: Option<Value>,
        interleave: usize,
    ) -> Result<(), String> {
        self.active = active;
        self.in_loop = true;
        self.iter_lane = lanes[0];
        self.affine_base.iter_mut().for_each(|b| *b = None);
        self.const_cache.clear();
        let n = self.k.insts.len();
        let per_chunk = interleave.max(1);
        let order = if self.schedule {
            self.body_order()
        } else {
            (0..n).collect()
        };
        for (c, chunk) in lanes.chunks(per_chunk).enumerate() {
            let mut groups = vec![invariant.to_vec(); chunk.len()];
            if let Some(a) = active {
                self.regions.active = vec![a; chunk.len()];
            }
            for &r in &order {
                if invariant[r].is_some() || self.uniform[r] || self.row_only[r] {
                    continue;
                }
                if self.k.insts[r].op.is_region() {
                    self.region_op(r, &mut groups)?;
                    continue;
                }
                if self.regions.uniform.get(r) == Some(&true) && groups.len() > 1 {
                    // the same in every group: lower once, share
                    std::mem::swap(&mut self.vals, &mut groups[0]);
                    self.lane = chunk[0];
                    self.group = c * per_chunk;
                    if let Some(&a) = self.regions.active.first() {
                        self.active = Some(a);
                    }
                    let v = self.lower(r);
                    std::mem::swap(&mut self.vals, &mut groups[0]);
                    let v = v?;
                    for vals in groups.iter_mut() {
                        vals[r] = v;
                    }
                    continue;
                }
                if self.const_cache_per_inst {
                    self.const_cache.clear();
                }
                let inst = self.k.insts[r];
                if inst.op == Op::Store && inst.ty == VarType::Bool && chunk.len() == 4 {
                    // Four groups' masks (16 consecutive lanes) packed into one 16-byte store.
                    let masks: Vec<V> = groups
                        .iter()
                        .map(|vals| vals[inst.args[0] as usize])
                        .collect::<Option<_>>()
                        .ok_or("stored register has no value")?;
                    self.lane = chunk[0];
                    self.store_masks(inst.imm as usize, &masks)?;
                    continue;
                }
                if self.rows_of_groups(r, &mut groups, chunk, c * per_chunk)? {
                    continue;
                }
                for (u, (vals, &lane)) in groups.iter_mut().zip(chunk).enumerate() {
                    std::mem::swap(&mut self.vals, vals);
                    self.lane = lane;
                    if let Some(&a) = self.regions.active.get(u) {
                        self.active = Some(a);
                    }
                    self.group = c * per_chunk + u;
                    let v = self.lower(r);
                    std::mem::swap(&mut self.vals, vals);
                    vals[r] = v?;
                }
            }
        }
        self.vals = invariant.to_vec();
        self.in_loop = false;
        Ok(())
    }
}
