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
use cranelift_codegen::ir::{AtomicRmwOp, FuncRef, GlobalValue, InstBuilder, MemFlags, Value};
use cranelift_frontend::FunctionBuilder;
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

    // Loop-invariant values (literals, broadcast loads and pure instructions of those), computed
    // once in the entry block.
    for (r, inst) in k.insts.iter().enumerate() {
        let invariant = match inst.op {
            Op::Literal => true,
            Op::Load => k.params[inst.imm as usize].kind == ParamKind::Broadcast,
            op => {
                op.is_pure()
                    && op != Op::Counter
                    && inst.has_value()
                    && inst.operands().iter().all(|&a| g.uniform[a as usize])
            }
        };
        if invariant {
            g.uniform[r] = true;
            g.vals[r] = g.lower(r)?;
        }
    }
    // Scalar shift amounts of invariant, non-literal amounts of lane-dependent shifts.
    for (r, inst) in k.insts.iter().enumerate() {
        if matches!(inst.op, Op::Shl | Op::Shr) && !g.uniform[r] {
            let a = inst.args[1] as usize;
            if g.uniform[a] && g.lit[a].is_none() && g.amount[a].is_none() {
                let v = g.val(a as u32)?;
                let s = g.extract(v, 0);
                g.amount[a] = Some(g.b.ins().band_imm(s, inst.ty.bits() as i64 - 1));
            }
        }
    }
    if has_regions {
        let (u, cond_of) = super::region::uniform_in_loops(k, &g.uniform);
        g.regions.uniform = u;
        g.regions.cond_of = cond_of;
    }
    let invariant = g.vals.clone();
    let body = g.uniform.iter().filter(|&&u| !u).count();
    let mut groups = pick_unroll(tuning, body, scatter.is_some());
    if has_regions
        && k.insts
            .iter()
            .any(|i| i.op == Op::Gather && g.contiguous[i.args[0] as usize])
    {
        // A loop that walks rows (a fused scan): two groups per iteration, one check per step
        // (`rows_of_groups`), and no spills; four groups spilled their lane bases and ran the EMA
        // of `scan wide` 40% slower on one thread (43 vs 31 ms at 100 000 signals).
        groups = groups.min(2);
    }
    let mut interleave = tuning.interleave;
    if tuning.unroll == 0 && groups == 4 && max_live(k, &g.uniform) <= 3 {
        // A long dependency chain with few values alive (`y = y * a + c` a hundred times): eight
        // independent groups hide each op's latency and still fit the 16 vector registers.
        groups = 8;
        interleave = 8;
    }
    tracing::debug!(target: "kiln::cranelift", "kernel of {} instructions, {body} per lane: {groups} groups per iteration", k.insts.len());
    // Affine values are worth a loop of their own when some lane-dependent instruction other
    // than a counter or a cast would be replaced.
    let affine = affine_values(k);
    if has_regions {
        // all groups of an iteration share one control flow: lower them side by side
        interleave = groups;
    }
    let use_affine = tuning.affine
        && !has_regions
        && k.insts.iter().enumerate().any(|(r, inst)| {
            affine[r].is_some() && !g.uniform[r] && !matches!(inst.op, Op::Counter | Op::Cast)
        });
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
        // Main loop: `groups` whole vectors per iteration while that many lanes remain.
        let step = W * groups as i64;
        let header = g.b.create_block();
        let body = g.b.create_block();
        if use_affine && affine.iter().flatten().any(|a| a.small_lanes) {
            // Some affine forms hold only for lane indices below 2^31: larger ranges take the
            // generic loop.
            let small =
                g.b.ins()
                    .icmp_imm(IntCC::UnsignedLessThanOrEqual, end, 1 << 31);
            g.b.ins().brif(small, header, &[], tail_header, &[]);
        } else {
            g.b.ins().jump(header, &[]);
        }
        g.affine = if use_affine { affine } else { Vec::new() };
        g.b.switch_to_block(header);
        let i = g.b.use_var(lane_var);
        let rem = g.b.ins().isub(end, i);
        let more =
            g.b.ins()
                .icmp_imm(IntCC::UnsignedGreaterThanOrEqual, rem, step);
        g.b.ins().brif(more, body, &[], tail_header, &[]);
        g.b.switch_to_block(body);
        g.b.seal_block(body);
        let lanes: Vec<Value> = (0..groups)
            .map(|u| {
                if u == 0 {
                    i
                } else {
                    g.b.ins().iadd_imm(i, W * u as i64)
                }
            })
            .collect();
        let active = if has_random_access {
            // Every lane of these groups is below `end`.
            Some(g.vconst(I32X4, &[u32::MAX; 4]))
        } else {
            None
        };
        g.full_active = active;
        g.emit_groups(&invariant, &lanes, active, interleave)?;
        g.full_active = None;
        g.affine = Vec::new();
        let next = g.b.ins().iadd_imm(i, step);
        g.b.def_var(lane_var, next);
        g.b.ins().jump(header, &[]);
        g.b.seal_block(header);
    } else {
        g.b.ins().jump(tail_header, &[]);
    }

    // One vector per iteration up to `end` (the whole range when not unrolled).
    g.b.switch_to_block(tail_header);
    let i = g.b.use_var(lane_var);
    let more = g.b.ins().icmp(IntCC::UnsignedLessThan, i, end);
    g.b.ins().brif(more, tail_body, &[], exit, &[]);

    g.b.switch_to_block(tail_body);
    g.b.seal_block(tail_body);
    let active = if has_random_access {
        // Lanes of this iteration below `end`: (end - i) min 4 > [0, 1, 2, 3].
        let rem = g.b.ins().isub(end, i);
        let four = g.b.ins().iconst(I64, W);
        let rem = g.b.ins().umin(rem, four);
        let rem = g.b.ins().ireduce(I32, rem);
        let rem = g.b.ins().splat(I32X4, rem);
        let iota = g.vconst(I32X4, &[0u32, 1, 2, 3]);
        Some(g.b.ins().icmp(IntCC::SignedGreaterThan, rem, iota))
    } else {
        None
    };
    g.emit_groups(&invariant, &[i], active, 1)?;
    let next = g.b.ins().iadd_imm(i, W);
    g.b.def_var(lane_var, next);
    g.b.ins().jump(tail_header, &[]);
    g.b.seal_block(tail_header);

    g.b.switch_to_block(exit);
    g.b.seal_block(exit);
    for (var, slot) in [(g.oob, STATUS_OOB_READS), (g.oob_writes, STATUS_OOB_WRITES)] {
        let Some(var) = var else { continue };
        let count = g.b.use_var(var);
        let add = g.b.create_block();
        let done = g.b.create_block();
        g.b.ins().brif(count, add, &[], done, &[]);
        g.b.switch_to_block(add);
        g.b.seal_block(add);
        let addr = g.b.ins().iadd_imm(g.status, 8 * slot as i64);
        g.b.ins()
            .atomic_rmw(I64, MemFlags::trusted(), AtomicRmwOp::Add, addr, count);
        g.b.ins().jump(done, &[]);
        g.b.switch_to_block(done);
        g.b.seal_block(done);
    }
    g.b.ins().return_(&[]);
    let mut pool = g.pool;
    if pool.is_empty() {
        pool.resize(16, 0);
    }
    Ok(pool)
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
