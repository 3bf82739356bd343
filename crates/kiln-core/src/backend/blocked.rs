//! Lane blocking: a kernel whose work is one counted loop over the rows of stacked arrays (a fused
//! scan's steps read and write row `t` at `t · width + lane`) runs step-major over cache-sized
//! blocks of lanes instead of lane-major.
//!
//! Lane-major, each vector of lanes walks down its own column: one new page per step, which no
//! hardware prefetcher follows, so a wide scan ran at a third of memory speed. Step-major, a block
//! of tens of thousands of lanes (as many as [`STATE_BUDGET`] of loop state allows) reads and writes
//! one long contiguous row segment per step, and its loop state stays in L2 between steps. The kernel is cut into three kernels that the backend compiles as
//! usual — `pre` (the code before the loop; it also stores the loop's initial state), `step` (one
//! iteration: state in, state out, the loop counter arriving as a broadcast value) and `post` (the
//! code after the loop, reading the final state) — and [`BlockedKernel`] runs them block by block.
//!
//! Blocking reorders lane-steps inside a launch, so [`split`] applies it only where no program can
//! see the order: the loop's trip count is a literal (every lane runs the same steps); nothing is
//! written outside the loop body; every scatter in it is a plain row write (`lane + f(t)`) whose
//! rows lie at least a block apart, so no two lanes of a block write one element; no buffer is both
//! read and written by indexing (checked again on the bound buffers at run time, where an overlap
//! runs the kernel unsplit). The interpreter never blocks: it stays the oracle the blocked kernels
//! are tested against.

use super::{write_bits, Backend, BackendKind, CompiledKernel, LaunchArgs};
use crate::error::Result;
use crate::kernel::{Inst, Kernel, Param, ParamKind, Reg};
use crate::op::{Op, ReduceOp};
use crate::ty::VarType;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

/// Lanes per block at most, when nothing smaller is needed (the state's budget below usually is).
pub const DEFAULT_LANES: usize = 65_536;

/// Bytes of per-lane scratch (loop state and kept values) one block may hold: 128 KiB, which
/// stays in L2 beside the rows streaming through, so one `f32` state gives blocks of 32 768 lanes
/// (rows read and written as 128 KiB segments). Long segments are what pays: on this project's
/// AVX-512 host (2 threads), a fused EMA over 1 000 000 `f32` signals × 100 steps ran at
/// 1.30–1.45× the copy loop's time on Cranelift with blocks of 4 096 lanes and 1.14× with 32 768
/// (LLVM 1.15–1.22× → 1.06–1.10×); at 10 000 signals, one block of 5 000 lanes per thread ran
/// 1.54–1.66× against 1.89–2.00× for two of 2 560 and 1.84–2.04× lane-major.
pub const STATE_BUDGET: usize = 128 << 10;

/// The bytes an array's rows must span over all steps for its loop to be blocked by default (see
/// [`Policy::min_span`]).
pub const DEFAULT_MIN_SPAN: u64 = 1 << 20;

/// The fewest lanes a block may have (below it the per-step calls cost more than blocking saves).
const MIN_LANES: usize = 64;

/// Rows closer than this many bytes are walked well lane-major (a few pages hold a lane's whole
/// column): blocking them would only add the state's loads and stores.
const MIN_ROW_BYTES: i128 = 1024;

/// When kernels are blocked.
///
/// ```
/// use kiln_core::backend::blocked::{policy, set_policy, Policy};
/// let before = policy();
/// // block every row loop, even the smallest, in blocks of 1024 lanes
/// set_policy(Policy { lanes: 1024, min_span: 0 });
/// assert_eq!(policy().lanes, 1024);
/// set_policy(before);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Policy {
    /// Lanes per block at most; 0 never blocks. `KILN_LANE_BLOCK` sets it at start (default
    /// [`DEFAULT_LANES`]).
    pub lanes: usize,
    /// Bytes the rows of one array must span over all steps (row distance × steps) for the loop
    /// to be blocked. Default [`DEFAULT_MIN_SPAN`] (1 MiB): with blocks as long as
    /// [`STATE_BUDGET`] allows, blocking paid even where the rows fit the last-level cache (1 000
    /// to 10 000 `f32` signals × 500 to 5 000 steps, both backends) and cost nothing measurable on
    /// narrow rows with many steps (300 signals × 50 000 steps); a loop that moves less runs in
    /// microseconds either way, and blocked it would compile three kernels instead of one. Rows
    /// closer than 1 KiB are never blocked.
    pub min_span: u64,
}

static LANES: AtomicUsize = AtomicUsize::new(usize::MAX);
static MIN_SPAN: AtomicU64 = AtomicU64::new(u64::MAX);

/// The policy kernels compiled now are blocked by.
pub fn policy() -> Policy {
    if LANES.load(Ordering::Relaxed) == usize::MAX {
        let lanes = crate::config::env("KILN_LANE_BLOCK")
            .and_then(|s| s.parse().ok())
            .unwrap_or(DEFAULT_LANES);
        let _ = LANES.compare_exchange(usize::MAX, lanes, Ordering::Relaxed, Ordering::Relaxed);
        let _ = MIN_SPAN.compare_exchange(
            u64::MAX,
            DEFAULT_MIN_SPAN,
            Ordering::Relaxed,
            Ordering::Relaxed,
        );
    }
    Policy {
        lanes: LANES.load(Ordering::Relaxed),
        min_span: MIN_SPAN.load(Ordering::Relaxed),
    }
}

/// Block kernels compiled from now on by `p` (kernels already in the cache keep their form).
pub fn set_policy(p: Policy) {
    policy();
    LANES.store(p.lanes.min(usize::MAX - 1), Ordering::Relaxed);
    MIN_SPAN.store(p.min_span.min(u64::MAX - 1), Ordering::Relaxed);
}

/// A kernel cut around its loop (see the module documentation).
#[derive(Debug)]
pub struct Split {
    pub pre: Kernel,
    pub step: Kernel,
    pub post: Kernel,
    /// Types of the loop state other than the counter (one scratch region each, read and
    /// rewritten in place by every step).
    phis: Vec<VarType>,
    /// Types of the values computed before the loop that `step` or `post` read from scratch.
    lives: Vec<VarType>,
    counter_ty: VarType,
    /// The counter's value at step 0 and its increment (bits of `counter_ty`).
    first: u64,
    stride: u64,
    trips: u64,
    /// Lanes per block.
    pub lanes: usize,
    /// Indexed parameters the loop writes into.
    scattered: Vec<usize>,
}

/// The loop of a kernel, as `split` finds it.
struct Loop {
    begin: usize,
    /// Its phis (`begin + 1 ..`).
    phis: std::ops::Range<usize>,
    end: usize,
    cond: usize,
    /// `next` value of each phi.
    next: HashMap<usize, Reg>,
}

/// The one top-level loop of `k`, with its `while` and `next`s, if it has exactly one.
fn find_loop(k: &Kernel) -> Option<Loop> {
    let mut depth = 0usize;
    let mut found: Option<Loop> = None;
    for (i, inst) in k.insts.iter().enumerate() {
        match inst.op {
            Op::LoopBegin | Op::Switch => {
                if depth == 0 && inst.op == Op::LoopBegin {
                    if found.is_some() {
                        return None;
                    }
                    let mut p = i + 1;
                    while k.insts.get(p).is_some_and(|x| x.op == Op::Phi) {
                        p += 1;
                    }
                    found = Some(Loop {
                        begin: i,
                        phis: i + 1..p,
                        end: 0,
                        cond: 0,
                        next: HashMap::new(),
                    });
                }
                depth += 1;
            }
            Op::LoopEnd | Op::SwitchEnd => {
                depth -= 1;
                if let Some(l) = found.as_mut().filter(|l| l.begin == inst.args[0] as usize) {
                    l.end = i;
                }
            }
            Op::LoopCond if depth == 1 => {
                if let Some(l) = found.as_mut().filter(|l| l.end == 0) {
                    l.cond = i;
                }
            }
            Op::LoopNext if depth == 1 => {
                if let Some(l) = found.as_mut().filter(|l| l.end == 0) {
                    l.next.insert(inst.args[0] as usize, inst.args[1]);
                }
            }
            _ => {}
        }
    }
    found.filter(|l| l.end > 0 && l.cond > 0)
}

/// A literal's value as a wide integer, by its type's sign.
fn wide(ty: VarType, bits: u64) -> Option<i128> {
    Some(match ty {
        VarType::I32 => bits as u32 as i32 as i128,
        VarType::U32 => bits as u32 as i128,
        VarType::I64 => bits as i64 as i128,
        VarType::U64 => bits as i128,
        _ => return None,
    })
}

/// The literal at register `r`, if it is one.
fn literal(k: &Kernel, r: Reg) -> Option<i128> {
    let inst = &k.insts[r as usize];
    (inst.op == Op::Literal)
        .then(|| wide(inst.ty, inst.imm))
        .flatten()
}

/// The loop counter: a phi starting at a literal, stepped by a positive literal, and compared
/// `counter < literal` by the loop's `while`. Returns the phi, its first value, increment and
/// number of steps, when the counter never wraps before the loop ends.
fn counted(k: &Kernel, l: &Loop) -> Option<(usize, i128, i128, u64)> {
    let cond = &k.insts[k.insts[l.cond].args[0] as usize];
    if cond.op != Op::Lt {
        return None;
    }
    let phi = cond.args[0] as usize;
    if !l.phis.contains(&phi) {
        return None;
    }
    let ty = k.insts[phi].ty;
    let limit = literal(k, cond.args[1])?;
    let first = literal(k, k.insts[phi].args[0])?;
    let next = k.insts[*l.next.get(&phi)? as usize];
    if next.op != Op::Add {
        return None;
    }
    let stride = match (next.args[0] as usize, next.args[1] as usize) {
        (a, b) if a == phi => literal(k, b as Reg)?,
        (a, b) if b == phi => literal(k, a as Reg)?,
        _ => return None,
    };
    if stride <= 0 {
        return None;
    }
    let trips = if limit > first {
        (limit - first + stride - 1) / stride
    } else {
        0
    };
    // the last value the counter takes must fit its type, or the loop would wrap and go on
    let top = match ty {
        VarType::I32 => i32::MAX as i128,
        VarType::U32 => u32::MAX as i128,
        VarType::I64 => i64::MAX as i128,
        _ => u64::MAX as i128,
    };
    if first + trips * stride > top {
        return None;
    }
    let max = k.insts[l.begin].imm;
    if max != 0 && trips as u64 > max {
        return None;
    }
    Some((phi, first, stride, u64::try_from(trips).ok()?))
}

/// How an index moves with the loop counter: `Some(s)` when the index is `lane + f(t)` with `f`
/// the same for every lane and affine in the counter with slope `s`, modulo 2^64 (index arithmetic
/// wraps in its type; 0: the same row every step).
fn row_slope(k: &Kernel, idx: Reg, l: &Loop, counter: usize, uniform: &[bool]) -> Option<u64> {
    let inst = &k.insts[idx as usize];
    if inst.op != Op::Add {
        return None;
    }
    let lane = |r: Reg| k.insts[r as usize].op == Op::Counter && k.insts[r as usize].ty == inst.ty;
    let rest = match (inst.args[0], inst.args[1]) {
        (a, b) if lane(a) => b,
        (a, b) if lane(b) => a,
        _ => return None,
    };
    slope(k, rest, l, counter, uniform, 8)
}

/// Slope of `r` in the counter (modulo 2^64), for sums, differences, literal multiples and
/// literal left shifts of the counter and of values that are the same in every lane and step.
fn slope(
    k: &Kernel,
    r: Reg,
    l: &Loop,
    counter: usize,
    uniform: &[bool],
    depth: u32,
) -> Option<u64> {
    let r_ = r as usize;
    if r_ == counter {
        return Some(1);
    }
    if r_ < l.begin && uniform[r_] {
        return Some(0);
    }
    let inst = &k.insts[r_];
    if depth == 0 {
        return None;
    }
    let s = |x: Reg| slope(k, x, l, counter, uniform, depth - 1);
    let lit = |x: Reg| literal(k, x).map(|v| v as u64);
    match inst.op {
        Op::Literal => Some(0),
        Op::Add => Some(s(inst.args[0])?.wrapping_add(s(inst.args[1])?)),
        Op::Sub => Some(s(inst.args[0])?.wrapping_sub(s(inst.args[1])?)),
        Op::Mul => match (lit(inst.args[0]), lit(inst.args[1])) {
            (Some(c), _) => Some(c.wrapping_mul(s(inst.args[1])?)),
            (_, Some(c)) => Some(c.wrapping_mul(s(inst.args[0])?)),
            _ => None,
        },
        // (a power-of-two row width: `t << 10`; the amount is masked as `op` defines)
        Op::Shl => {
            let amount = lit(inst.args[1])? as u32 & (inst.ty.bits() - 1);
            Some(s(inst.args[0])?.wrapping_shl(amount))
        }
        _ => None,
    }
}

/// The distance in elements between the rows of consecutive steps of an index of `ty` whose
/// slope in the counter is `s` (the counter stepping by `stride`): the smaller way round the
/// index type's ring, as the index wraps.
fn row_distance(s: u64, stride: u64, ty: VarType) -> u128 {
    let d = s.wrapping_mul(stride);
    if ty.size_bytes() == 8 {
        (d as i64).unsigned_abs() as u128
    } else {
        (d as u32 as i32).unsigned_abs() as u128
    }
}

/// Whether `k` may run blocked, and with how many lanes per block: every scatter in the loop a
/// plain row write, one per target, whose rows are a block apart (and never meet again modulo the
/// index type within the loop), nothing written outside the loop, no parameter both gathered and
/// scattered, the code before the `while` free of memory accesses and regions (it runs once more
/// than the body in the original), and at least one access walking rows far apart.
fn block_lanes(
    k: &Kernel,
    l: &Loop,
    (counter, stride, trips): (usize, u64, u64),
    p: Policy,
) -> Option<usize> {
    let entry: Vec<bool> = k
        .insts
        .iter()
        .map(|i| {
            i.op == Op::Literal
                || (i.op == Op::Load && k.params[i.param()].kind == ParamKind::Broadcast)
        })
        .collect();
    let (uniform, _) = super::uniform_in_loops(k, &entry);
    let mut lanes = p.lanes / 16 * 16;
    let mut far = false;
    // whether rows `d` elements of `bytes` apart walk far (see `Policy::min_span`)
    let walks_far = |d: u128, bytes: usize| {
        let row = d.saturating_mul(bytes as u128);
        row >= MIN_ROW_BYTES as u128 && row.saturating_mul(trips as u128) >= p.min_span as u128
    };
    let condition = l.phis.end..l.cond;
    if k.insts[condition]
        .iter()
        .any(|i| !(i.op.is_pure() || i.op == Op::Load))
    {
        return None;
    }
    let (mut gathered, mut scattered) = (Vec::new(), Vec::new());
    for (i, inst) in k.insts.iter().enumerate() {
        let in_body = i > l.cond && i < l.end;
        match inst.op {
            Op::Scatter(op) => {
                if !in_body || op != ReduceOp::None || inst.exclusive() {
                    return None;
                }
                if scattered.contains(&inst.param()) {
                    // two writes into one target may meet across lanes
                    return None;
                }
                let s = row_slope(k, inst.args[1], l, counter, &uniform)?;
                let ity = k.insts[inst.args[1] as usize].ty;
                let d = row_distance(s, stride, ity);
                if d != 0 {
                    lanes = lanes.min(usize::try_from(d).unwrap_or(usize::MAX) / 16 * 16);
                    // rows of different steps never meet modulo the index type
                    let reach = d.checked_mul(u128::from(trips.saturating_sub(1)))?;
                    if reach + lanes as u128 > 1u128 << (8 * ity.size_bytes()) {
                        return None;
                    }
                    far |= walks_far(d, inst.ty.size_bytes());
                }
                scattered.push(inst.param());
            }
            Op::Gather => {
                if in_body {
                    if let Some(s) = row_slope(k, inst.args[0], l, counter, &uniform) {
                        let ity = k.insts[inst.args[0] as usize].ty;
                        far |= walks_far(row_distance(s, stride, ity), inst.ty.size_bytes());
                    }
                }
                gathered.push(inst.param());
            }
            _ => {}
        }
    }
    let disjoint = scattered.iter().all(|p| !gathered.contains(p));
    (far && disjoint && lanes >= MIN_LANES).then_some(lanes)
}

/// Whether a value computed before the loop is recomputed where `step` or `post` needs it (cheap
/// and repeatable: literals, the lane index, loads at the lane, integer and comparison arithmetic
/// of such) rather than kept in scratch.
///
/// A load at the lane is repeatable only while its buffer is not written: an output stored before
/// or in the loop may share the input's buffer (update-in-place, `Kernel::may_alias`), so then
/// loads are kept too.
fn cheap(k: &Kernel, r: usize, stores_early: bool, memo: &mut HashMap<usize, bool>) -> bool {
    if let Some(&c) = memo.get(&r) {
        return c;
    }
    let inst = &k.insts[r];
    let c = match inst.op {
        Op::Literal | Op::Counter => true,
        Op::Load => k.params[inst.param()].kind == ParamKind::Broadcast || !stores_early,
        Op::Add
        | Op::Sub
        | Op::Mul
        | Op::And
        | Op::Or
        | Op::Xor
        | Op::Shl
        | Op::Shr
        | Op::Min
        | Op::Max
        | Op::Neg
        | Op::Not
        | Op::Cast
        | Op::Bitcast
        | Op::Select
        | Op::Eq
        | Op::Ne
        | Op::Lt
        | Op::Le
        | Op::Gt
        | Op::Ge => inst
            .operands()
            .iter()
            .all(|&a| cheap(k, a as usize, stores_early, memo)),
        _ => false,
    };
    memo.insert(r, c);
    c
}

/// Builds one of the three kernels, copying instructions of the original with registers renamed.
struct Build<'a> {
    src: &'a Kernel,
    out: Kernel,
    map: HashMap<usize, Reg>,
    /// Scratch parameter of each value kept from before the loop.
    lives: &'a HashMap<usize, (usize, VarType)>,
    /// Index of the first scratch parameter for live values in this kernel.
    live_base: usize,
}

impl<'a> Build<'a> {
    /// An empty kernel over `params` whose kept values are parameters `live_base ..`.
    fn new(
        src: &'a Kernel,
        params: Vec<Param>,
        lives: &'a HashMap<usize, (usize, VarType)>,
        live_base: usize,
    ) -> Self {
        Build {
            src,
            out: Kernel {
                params,
                insts: Vec::new(),
            },
            map: HashMap::new(),
            lives,
            live_base,
        }
    }
    fn push(&mut self, inst: Inst) -> Reg {
        self.out.insts.push(inst);
        (self.out.insts.len() - 1) as Reg
    }
    /// Register of original value `r` (a value before the loop is recomputed or loaded).
    fn get(&mut self, r: usize, begin: usize) -> Reg {
        if let Some(&m) = self.map.get(&r) {
            return m;
        }
        let m = if let Some(&(slot, ty)) = self.lives.get(&r) {
            self.push(Inst::new(Op::Load, ty, &[], (self.live_base + slot) as u64))
        } else {
            debug_assert!(r < begin, "value r{r} from inside the loop");
            let mut inst = self.src.insts[r];
            for k in 0..inst.op.arity() {
                inst.args[k] = self.get(inst.args[k] as usize, begin);
            }
            self.push(inst)
        };
        self.map.insert(r, m);
        m
    }
    /// Recompute or load, before anything else, every value from before the loop that
    /// instructions `range` use: defined inside one of their regions, it would not be visible
    /// after it.
    fn materialize(&mut self, range: std::ops::Range<usize>, begin: usize) {
        for i in range {
            for &a in self.src.insts[i].operands() {
                if (a as usize) < begin {
                    self.get(a as usize, begin);
                }
            }
        }
    }
    /// Copy instruction `i` of the original (operands renamed).
    fn copy(&mut self, i: usize, begin: usize) {
        let mut inst = self.src.insts[i];
        for k in 0..inst.op.arity() {
            inst.args[k] = self.get(inst.args[k] as usize, begin);
        }
        let m = self.push(inst);
        self.map.insert(i, m);
    }
}

/// Cut `k` around its loop when it may run blocked under the current [`policy`] (see the module
/// documentation).
pub fn split(k: &Kernel) -> Option<Split> {
    split_with(k, policy())
}

/// [`split`] under policy `p`.
pub fn split_with(k: &Kernel, p: Policy) -> Option<Split> {
    if p.lanes < MIN_LANES {
        return None;
    }
    let l = find_loop(k)?;
    let (counter, first, stride, trips) = counted(k, &l)?;
    let lanes = block_lanes(k, &l, (counter, stride as u64, trips), p)?;
    let counter_ty = k.insts[counter].ty;
    let np = k.params.len();
    let states: Vec<usize> = l.phis.clone().filter(|&p| p != counter).collect();
    let phis: Vec<VarType> = states.iter().map(|&p| k.insts[p].ty).collect();
    // values from before the loop that step or post read: recomputed when cheap, else kept
    let mut memo = HashMap::new();
    let stores_early = k.insts[..l.end].iter().any(|i| i.op == Op::Store);
    let mut lives: HashMap<usize, (usize, VarType)> = HashMap::new();
    let mut live_list = Vec::new();
    let used_after = (l.phis.end..l.end).chain(l.end + 1..k.insts.len());
    for i in used_after {
        for &a in k.insts[i].operands() {
            let a = a as usize;
            if a < l.begin && !cheap(k, a, stores_early, &mut memo) && !lives.contains_key(&a) {
                lives.insert(a, (live_list.len(), k.insts[a].ty));
                live_list.push(a);
            }
        }
    }
    let live_tys: Vec<VarType> = live_list.iter().map(|&a| k.insts[a].ty).collect();
    // as many lanes as the state's budget holds (never more than the rows allow: `block_lanes`)
    let per_lane: usize = phis.iter().chain(&live_tys).map(|t| t.size_bytes()).sum();
    let lanes = lanes.min((STATE_BUDGET / per_lane.max(1) / 16 * 16).max(MIN_LANES));
    let param = |ty, kind| Param { ty, kind };

    // pre: everything before the loop, then the initial state and the kept values into scratch
    let mut pre = Kernel {
        params: k.params.clone(),
        insts: k.insts[..l.begin].to_vec(),
    };
    for (s, &p) in states.iter().enumerate() {
        pre.params.push(param(phis[s], ParamKind::Output));
        let init = k.insts[p].args[0];
        pre.insts
            .push(Inst::new(Op::Store, phis[s], &[init], (np + s) as u64));
    }
    for (s, &a) in live_list.iter().enumerate() {
        pre.params.push(param(live_tys[s], ParamKind::Output));
        pre.insts.push(Inst::new(
            Op::Store,
            live_tys[s],
            &[a as Reg],
            (np + phis.len() + s) as u64,
        ));
    }

    // step: counter (broadcast), state in, state out, kept values
    let mut sp = k.params.clone();
    sp.push(param(counter_ty, ParamKind::Broadcast));
    sp.extend(phis.iter().map(|&t| param(t, ParamKind::Input)));
    sp.extend(phis.iter().map(|&t| param(t, ParamKind::Output)));
    sp.extend(live_tys.iter().map(|&t| param(t, ParamKind::Input)));
    let mut b = Build::new(k, sp, &lives, np + 1 + 2 * phis.len());
    let c = b.push(Inst::new(Op::Load, counter_ty, &[], np as u64));
    b.map.insert(counter, c);
    for (s, &p) in states.iter().enumerate() {
        let r = b.push(Inst::new(Op::Load, phis[s], &[], (np + 1 + s) as u64));
        b.map.insert(p, r);
    }
    b.materialize(l.phis.end..l.end, l.begin);
    let mut depth = 0usize;
    for i in l.phis.end..l.end {
        let op = k.insts[i].op;
        let ours = depth == 0 && matches!(op, Op::LoopCond | Op::LoopNext);
        match op {
            Op::LoopBegin | Op::Switch => depth += 1,
            Op::LoopEnd | Op::SwitchEnd => depth -= 1,
            _ => {}
        }
        if !ours {
            b.copy(i, l.begin);
        }
    }
    for (s, &p) in states.iter().enumerate() {
        let v = l.next.get(&p).map_or(p, |&v| v as usize);
        let v = b.get(v, l.begin);
        b.push(Inst::new(
            Op::Store,
            phis[s],
            &[v],
            (np + 1 + phis.len() + s) as u64,
        ));
    }
    let step = b.out;

    // post: the final state and kept values from scratch, then everything after the loop
    let mut pp = k.params.clone();
    pp.extend(phis.iter().map(|&t| param(t, ParamKind::Input)));
    pp.extend(live_tys.iter().map(|&t| param(t, ParamKind::Input)));
    let mut b = Build::new(k, pp, &lives, np + phis.len());
    let last = (first + trips as i128 * stride) as u64 & counter_ty.bit_mask();
    let c = b.push(Inst::new(Op::Literal, counter_ty, &[], last));
    b.map.insert(counter, c);
    for (s, &p) in states.iter().enumerate() {
        let r = b.push(Inst::new(Op::Load, phis[s], &[], (np + s) as u64));
        b.map.insert(p, r);
    }
    b.materialize(l.end + 1..k.insts.len(), l.begin);
    for i in l.end + 1..k.insts.len() {
        b.copy(i, l.begin);
    }
    let post = b.out;
    let scattered = k
        .insts
        .iter()
        .filter(|i| matches!(i.op, Op::Scatter(_)))
        .map(|i| i.param())
        .collect();
    Some(Split {
        pre,
        step,
        post,
        phis,
        lives: live_tys,
        counter_ty,
        first: first as u64 & counter_ty.bit_mask(),
        stride: stride as u64 & counter_ty.bit_mask(),
        trips,
        lanes,
        scattered,
    })
}

/// Compile `kernel` for `backend`, blocked when [`split`] allows it (never for the interpreter);
/// the flag says whether it was.
pub fn compile(
    backend: &Arc<dyn Backend>,
    kernel: &Kernel,
) -> Result<(Arc<dyn CompiledKernel>, bool)> {
    match split(kernel).filter(|_| backend.kind() != BackendKind::Interp) {
        Some(s) => Ok((compile_split(backend, kernel, s)?, true)),
        None => Ok((backend.compile(kernel)?, false)),
    }
}

/// Compile the three kernels of `s` (cut from `kernel`) into one [`BlockedKernel`].
pub fn compile_split(
    backend: &Arc<dyn Backend>,
    kernel: &Kernel,
    s: Split,
) -> Result<Arc<dyn CompiledKernel>> {
    #[cfg(debug_assertions)]
    for (what, part) in [("pre", &s.pre), ("step", &s.step), ("post", &s.post)] {
        if let Err(e) = part.verify() {
            panic!(
                "kiln internal error: lane blocking cut an invalid {what} kernel:\n{}\n{part}\nfrom\n{kernel}",
                e.join("\n")
            );
        }
    }
    tracing::debug!(
        target: "kiln::kernel",
        "lane blocking: a loop of {} steps runs step by step over blocks of {} lanes ({} state values, {} kept values)",
        s.trips, s.lanes, s.phis.len(), s.lives.len()
    );
    Ok(Arc::new(BlockedKernel {
        pre: backend.compile(&s.pre)?,
        step: backend.compile(&s.step)?,
        post: backend.compile(&s.post)?,
        split: s,
        params: kernel.params.clone(),
        whole: OnceLock::new(),
        backend: backend.clone(),
        kernel: kernel.clone(),
    }))
}

/// The three kernels of a [`Split`], run block by block; the original kernel (compiled on first
/// need) runs instead where the bound buffers overlap or scratch memory is not available.
pub struct BlockedKernel {
    pre: Arc<dyn CompiledKernel>,
    step: Arc<dyn CompiledKernel>,
    post: Arc<dyn CompiledKernel>,
    split: Split,
    params: Vec<Param>,
    whole: OnceLock<Arc<dyn CompiledKernel>>,
    backend: Arc<dyn Backend>,
    kernel: Kernel,
}

impl BlockedKernel {
    /// The kernel unsplit (a backend that compiled its parts compiles it too; the interpreter
    /// runs anything).
    fn whole(&self) -> &Arc<dyn CompiledKernel> {
        self.whole.get_or_init(|| {
            self.backend
                .compile(&self.kernel)
                .or_else(|_| super::interp::Interp.compile(&self.kernel))
                .expect("the interpreter runs every verified kernel")
        })
    }

    /// Whether a buffer the loop scatters into overlaps another parameter's buffer.
    ///
    /// # Safety
    /// `args` describes one pointer and length per parameter.
    unsafe fn overlapping(&self, args: &LaunchArgs) -> bool {
        let n = self.params.len();
        // SAFETY: the caller's contract: one pointer and length per parameter.
        let (ptrs, lens) = unsafe {
            (
                std::slice::from_raw_parts(args.ptrs, n),
                std::slice::from_raw_parts(args.lens, n),
            )
        };
        let span = |i: usize| {
            let lo = ptrs[i] as usize;
            let bytes =
                lens[i] as usize * self.params[i].ty.size_bytes() + crate::alloc::SLACK_BYTES;
            (lo, lo.saturating_add(bytes))
        };
        self.split.scattered.iter().any(|&q| {
            let (a0, a1) = span(q);
            (0..n).any(|j| {
                let (b0, b1) = span(j);
                j != q && a0 < b1 && b0 < a1
            })
        })
    }
}

/// Lanes per block when `lanes` lanes are cut into blocks of at most `max`: equal blocks (in
/// multiples of 64 lanes, whole unrolled iterations), so that no short last block walks every step
/// over a few hundred lanes (a task of 12 544 lanes in blocks of 4 096 left one of 256).
fn even_blocks(lanes: usize, max: usize) -> usize {
    let count = lanes.div_ceil(max.max(1)).max(1);
    lanes.div_ceil(count).next_multiple_of(64).min(max.max(1))
}

/// Per-lane scratch of one running block: the counter, the loop state, the kept values. Each
/// region is 64-byte aligned with slack after it for whole-vector writes.
///
/// The step kernel's state-in and state-out parameters are bound to the same region. That is
/// sound because `split` builds the step as: every state load first (each lane reads its own
/// element), the loop body, every state store last (each lane writes its own element); no backend
/// marks these loads as reading memory nothing writes, so none moves a load below a store that
/// may alias it. One copy instead of two halves the state's cache footprint: at 100 000 `f32`
/// signals × 500 steps on one thread, 31 ms instead of 36–42 (LLVM) and 35–39 instead of 40–43
/// (Cranelift) on this project's AVX-512 host.
struct Scratch {
    block: crate::alloc::Block,
    /// Byte offset of each state value and of each kept value (the counter's 128 bytes come
    /// first, at offset 0).
    state: Vec<usize>,
    lives: Vec<usize>,
}

impl Scratch {
    fn new(s: &Split) -> Option<Scratch> {
        let region = |ty: VarType| {
            ((s.lanes + 16) * ty.size_bytes() + crate::alloc::SLACK_BYTES).next_multiple_of(64)
        };
        let mut at = 128;
        let mut take = |bytes: usize| {
            let o = at;
            at += bytes;
            o
        };
        let state = s.phis.iter().map(|&t| take(region(t))).collect();
        let lives = s.lives.iter().map(|&t| take(region(t))).collect();
        let block = crate::alloc::alloc(at, &|| "lane-blocking scratch".into()).ok()?;
        Some(Scratch {
            block,
            state,
            lives,
        })
    }
    /// Pointer to region `off`, shifted so that lane `base` lands at its start.
    fn lane_ptr(&self, off: usize, base: usize, ty: VarType) -> *mut u8 {
        self.block
            .as_ptr()
            .wrapping_add(off)
            .wrapping_sub(base * ty.size_bytes())
    }
}

impl CompiledKernel for BlockedKernel {
    unsafe fn run(&self, args: &LaunchArgs, start: u64, end: u64) {
        // SAFETY: `args` is the launcher's, one pointer and length per parameter.
        let scratch = if unsafe { self.overlapping(args) } {
            None
        } else {
            Scratch::new(&self.split)
        };
        let Some(scratch) = scratch else {
            // SAFETY: forwarded: the original kernel takes the same arguments.
            unsafe { self.whole().run(args, start, end) };
            return;
        };
        let s = &self.split;
        let n = self.params.len();
        // SAFETY: one pointer and length per parameter (the caller's contract).
        let (ptrs, lens) = unsafe {
            (
                std::slice::from_raw_parts(args.ptrs, n),
                std::slice::from_raw_parts(args.lens, n),
            )
        };
        let counter = scratch.block.as_ptr();
        let np = s.phis.len();
        let mut b0 = start as usize;
        let per = even_blocks(end as usize - b0, s.lanes);
        while b0 < end as usize {
            let b1 = (b0 + per).min(end as usize);
            let state = |k: usize| scratch.lane_ptr(scratch.state[k], b0, s.phis[k]);
            let lives =
                (0..s.lives.len()).map(|k| scratch.lane_ptr(scratch.lives[k], b0, s.lives[k]));
            // parameters of each kernel: the launch's buffers, then its scratch regions (the
            // step's state in and state out are one region, see `Scratch`)
            let with = |extra: &mut dyn Iterator<Item = *mut u8>| -> Vec<*mut u8> {
                ptrs.iter().copied().chain(extra).collect()
            };
            let pre = with(&mut (0..np).map(state).chain(lives.clone()));
            let step = with(
                &mut std::iter::once(counter)
                    .chain((0..np).map(state))
                    .chain((0..np).map(state))
                    .chain(lives.clone()),
            );
            let post = with(&mut (0..np).map(state).chain(lives.clone()));
            let mut l = lens.to_vec();
            l.resize(n + 1 + 2 * np + s.lives.len(), b1 as u64);
            let run = |kernel: &dyn CompiledKernel, p: &[*mut u8]| {
                let a = LaunchArgs {
                    ptrs: p.as_ptr(),
                    lens: l.as_ptr(),
                    status: args.status,
                };
                // SAFETY: the launch's buffers as the launcher bound them, plus scratch regions
                // shifted so that lanes [b0, b1) land inside them (each holds a block's lanes and
                // slack); the counter region holds one value and slack.
                unsafe { kernel.run(&a, b0 as u64, b1 as u64) };
            };
            run(self.pre.as_ref(), &pre);
            let mut value = s.first;
            for _ in 0..s.trips {
                // SAFETY: the counter region is this block's own and holds 128 bytes.
                unsafe { write_bits(counter, s.counter_ty, 0, value) };
                run(self.step.as_ref(), &step);
                value = value.wrapping_add(s.stride) & s.counter_ty.bit_mask();
            }
            run(self.post.as_ref(), &post);
            b0 = b1;
        }
        crate::alloc::free(scratch.block);
    }

    fn loaded_from_disk(&self) -> bool {
        self.pre.loaded_from_disk() && self.step.loaded_from_disk() && self.post.loaded_from_disk()
    }

    fn launch_block(&self, n: usize, threads: usize) -> Option<usize> {
        // every lane runs the same steps, so tasks need no slack for imbalance: one per thread
        // (split further into blocks of at most `lanes` by `run`); measured at 10 000 lanes on 2
        // threads, eight tasks of 1 280 lanes ran 20% slower than two of 5 000
        Some(n.div_ceil(threads.max(1)).next_multiple_of(64).max(64))
    }
}
