//! Memory accesses: element addresses, broadcast and vector loads, stores (the last vector of a
//! range may touch up to three lanes past `end`, within the buffers' slack), and gathers and
//! scatters, which only act on active lanes: gathers are per-lane loads with a branchless bounds
//! check; plain scatters are per-lane stores behind a bounds check, and reducing scatters call
//! the shared `scatter_lane_extern` helper (its atomics and privatised targets are not worth
//! inlining, and a call in the loop makes every vector value spill around it).

use super::{is_wide, ivty, lane_ty, log2_size, type_index, vty, Gen, V, W};
use crate::error::Result;
use crate::op::{Op, ReduceOp};
use crate::ty::VarType;
use cranelift_codegen::ir::condcodes::IntCC;
use cranelift_codegen::ir::types::{I32, I32X4, I64, I8X16};
use cranelift_codegen::ir::{Block, InstBuilder, Type, Value};
use cranelift_frontend::Variable;

/// One group's side of a row access in `Gen::rows_of_groups`.
struct GroupAccess {
    /// The index vector, unless it is `row_only` (then computed in the slow path).
    idx: Option<V>,
    mask: V,
    /// The value stored (a scatter) or none (a gather).
    val: Option<V>,
    /// `mask` and the group's active lanes.
    lanes: Value,
    /// The group's active-lane mask, restored for its own slow path.
    active: Option<Value>,
}

/// The `contiguous` indices whose every use is the index of a row read or write that
/// `rows_of_groups` may take (a gather or plain scatter of a non-mask type), and the counters
/// used only by those; none that `affine` (the forms the loop lowers, empty when it lowers none)
/// gives a form: `Gen::affine` keeps per-iteration bases, which a slow path must not define.
pub(super) fn row_only_indices(
    k: &crate::kernel::Kernel,
    contiguous: &[bool],
    affine: &[Option<super::affine::Affine>],
) -> Vec<bool> {
    let affine_form = |r: usize| affine.get(r).is_some_and(|a| a.is_some());
    let mut only: Vec<bool> = contiguous
        .iter()
        .enumerate()
        .map(|(r, &c)| c && !affine_form(r))
        .collect();
    let mut used = vec![false; k.insts.len()];
    for inst in &k.insts {
        for (j, &a) in inst.operands().iter().enumerate() {
            let row = inst.ty != VarType::Bool
                && match inst.op {
                    Op::Gather => j == 0,
                    Op::Scatter(ReduceOp::None) => j == 1,
                    _ => false,
                };
            if row {
                used[a as usize] = true;
            } else {
                only[a as usize] = false;
            }
        }
    }
    let mut only: Vec<bool> = only.iter().zip(&used).map(|(&o, &u)| o && u).collect();
    // counters read only by those indices
    let mut counter: Vec<bool> = k.insts.iter().map(|i| i.op == Op::Counter).collect();
    let mut read = vec![false; k.insts.len()];
    for (r, inst) in k.insts.iter().enumerate() {
        for &a in inst.operands() {
            if only[r] {
                read[a as usize] = true;
            } else {
                counter[a as usize] = false;
            }
        }
    }
    for r in 0..only.len() {
        only[r] |= counter[r] && read[r] && !affine_form(r);
    }
    only
}

/// Vectors per value of type `t` (64-bit lanes take two).
fn parts_of(t: VarType) -> usize {
    if is_wide(t) {
        2
    } else {
        1
    }
}

/// A value of type `t` from its first `parts_of(t)` vectors.
fn from_vectors(t: VarType, vs: &[Value]) -> V {
    if is_wide(t) {
        V::Two(vs[0], vs[1])
    } else {
        V::One(vs[0])
    }
}

impl<'f> Gen<'_, 'f> {
    /// Byte address of element `lane` of parameter `p` (elements of type `t`).
    pub(super) fn elem_addr(&mut self, p: usize, t: VarType, lane: Value) -> Result<Value, String> {
        let base = self.bases[p].ok_or_else(|| format!("parameter p{p} not loaded"))?;
        let off = if log2_size(t) == 0 {
            lane
        } else {
            self.b.ins().ishl_imm(lane, log2_size(t))
        };
        Ok(self.b.ins().iadd(base, off))
    }

    pub(super) fn load_broadcast(&mut self, p: usize, t: VarType) -> Result<V, String> {
        let base = self.bases[p].ok_or_else(|| format!("parameter p{p} not loaded"))?;
        let mem = self.mem;
        Ok(match t {
            VarType::Bool => {
                let x = self.b.ins().uload8(I32, mem, base, 0);
                let x = self.b.ins().band_imm(x, 1);
                let x = self.b.ins().ineg(x);
                V::One(self.b.ins().splat(I32X4, x))
            }
            _ => {
                let x = self.b.ins().load(lane_ty(t), mem, base, 0);
                let v = self.b.ins().splat(vty(t), x);
                if is_wide(t) {
                    V::Two(v, v)
                } else {
                    V::One(v)
                }
            }
        })
    }

    pub(super) fn load_input(&mut self, p: usize, t: VarType) -> Result<V, String> {
        let lane = self.lane;
        let addr = self.elem_addr(p, t, lane)?;
        let mem = self.mem;
        Ok(match t {
            VarType::Bool => {
                let bytes = self.b.ins().uload8x8(mem, addr, 0);
                let x = self.b.ins().uwiden_low(bytes);
                let one = self.splat32(1);
                let x = self.b.ins().band(x, one);
                V::One(self.b.ins().ineg(x))
            }
            _ if is_wide(t) => {
                let lo = self.b.ins().load(vty(t), mem, addr, 0);
                let hi = self.b.ins().load(vty(t), mem, addr, 16);
                V::Two(lo, hi)
            }
            _ => V::One(self.b.ins().load(vty(t), mem, addr, 0)),
        })
    }

    pub(super) fn store(&mut self, p: usize, t: VarType, v: V) -> Result<(), String> {
        let lane = self.lane;
        let addr = self.elem_addr(p, t, lane)?;
        let mem = self.mem;
        match (t, v) {
            (VarType::Bool, V::One(m)) => {
                let one = self.splat32(1);
                let x = self.b.ins().band(m, one);
                let x = self.b.ins().snarrow(x, x);
                let x = self.b.ins().snarrow(x, x);
                let x = self.bc(I32X4, x);
                let x = self.b.ins().extractlane(x, 0);
                self.b.ins().store(mem, x, addr, 0);
            }
            (_, V::One(x)) => {
                self.b.ins().store(mem, x, addr, 0);
            }
            (_, V::Two(lo, hi)) => {
                self.b.ins().store(mem, lo, addr, 0);
                self.b.ins().store(mem, hi, addr, 16);
            }
        }
        Ok(())
    }

    /// Stores the masks of four consecutive groups (starting at `self.lane`) as 16 bytes.
    pub(super) fn store_masks(&mut self, p: usize, masks: &[V]) -> Result<(), String> {
        let m: Vec<Value> = masks
            .iter()
            .map(|&m| match m {
                V::One(m) => Ok(m),
                V::Two(..) => Err("mask is not a mask".to_string()),
            })
            .collect::<Result<_, _>>()?;
        let lane = self.lane;
        let addr = self.elem_addr(p, VarType::Bool, lane)?;
        // Lanes are 0 or -1: saturating narrowing keeps them so, then `& 1`.
        let lo = self.b.ins().snarrow(m[0], m[1]);
        let hi = self.b.ins().snarrow(m[2], m[3]);
        let bytes = self.b.ins().snarrow(lo, hi);
        let one = self.vconst(I8X16, &[1u8; 16]);
        let bytes = self.b.ins().band(bytes, one);
        let mem = self.mem;
        self.b.ins().store(mem, bytes, addr, 0);
        Ok(())
    }

    /// Lane `l` of an index register as an i64 (sign-extended for signed types).
    pub(super) fn index_lane(&mut self, idx: V, ity: VarType, l: usize) -> Value {
        let x = self.extract(idx, l);
        self.index_i64(x, ity)
    }

    /// A scalar index of type `ity` as an i64 (sign-extended for signed types).
    fn index_i64(&mut self, x: Value, ity: VarType) -> Value {
        match ity {
            VarType::I32 => self.b.ins().sextend(I64, x),
            VarType::U32 => self.b.ins().uextend(I64, x),
            _ => x,
        }
    }

    /// Lane 0 of the `row_only` index `r` (`counter + uniform`) in the current group, as an i64
    /// extended as `index_lane` extends it, from scalars: the group's first lane plus lane 0 of the
    /// uniform operand, wrapping in the index type as the vector add does.
    fn row_start(&mut self, r: u32, ity: VarType) -> Result<Value, String> {
        let inst = self.k.insts[r as usize];
        let (a, b) = (inst.args[0], inst.args[1]);
        let u = if self.k.insts[a as usize].op == Op::Counter {
            b
        } else {
            a
        };
        let uv = self.val(u)?;
        let u0 = self.extract(uv, 0);
        let c0 = if is_wide(ity) {
            self.lane
        } else {
            self.b.ins().ireduce(I32, self.lane)
        };
        let x = self.b.ins().iadd(c0, u0);
        Ok(self.index_i64(x, ity))
    }

    /// The mask of active lanes (below `end`) and-ed with `mask`.
    pub(super) fn active_mask(&mut self, mask: V) -> Result<Value, String> {
        let V::One(m) = mask else {
            return Err("mask is not a mask".into());
        };
        let active = self.active.ok_or("active mask missing")?;
        Ok(self.b.ins().band(m, active))
    }

    /// Whether lanes `0..W` of the index `idx` are one in-bounds run of parameter `p` with every
    /// lane of `m` active, and the run's first index (for row reads and writes: `contiguous`).
    fn whole_run(
        &mut self,
        p: usize,
        idx: V,
        ity: VarType,
        m: Value,
    ) -> Result<(Value, Value), String> {
        let i0 = self.index_lane(idx, ity, 0);
        let inside = self.run_in_bounds(p, ity, i0, W)?;
        let all = self.b.ins().vall_true(m);
        Ok((self.b.ins().band(inside, all), i0))
    }

    /// Whether the `n` indices `i0, i0 + 1, …` of a `counter + uniform` index (consecutive in the
    /// index type, unless that wraps) are all below parameter `p`'s length without wrapping: one
    /// compare, `i0 <u min(len, type's limit) - (n - 1)` (0 when negative). A negative 32-bit
    /// index, sign-extended, is huge and fails it. The bound is read from `run_bounds` (computed
    /// once in the entry block) when it is there.
    fn run_in_bounds(
        &mut self,
        p: usize,
        ity: VarType,
        i0: Value,
        n: i64,
    ) -> Result<Value, String> {
        let bound = match self.run_bounds.get(&(p, ity, n)) {
            Some(&b) => b,
            None => self.run_bound(p, ity, n)?,
        };
        Ok(self.b.ins().icmp(IntCC::UnsignedLessThan, i0, bound))
    }

    /// Compute, where the builder stands, the bounds of the row reads and writes of runs of
    /// `W * c` lanes for each `c` of `chunks` (0s skipped), so that loops read them.
    pub(super) fn precompute_run_bounds(&mut self, chunks: &[usize]) -> Result<(), String> {
        let k = self.k;
        for inst in &k.insts {
            let idx = match inst.op {
                Op::Gather => inst.args[0],
                Op::Scatter(ReduceOp::None) => inst.args[1],
                _ => continue,
            };
            if inst.ty == VarType::Bool || !self.contiguous[idx as usize] {
                continue;
            }
            for &c in chunks.iter().filter(|&&c| c > 0) {
                let key = (inst.param(), k.ty(idx), W * c as i64);
                if !self.run_bounds.contains_key(&key) {
                    let b = self.run_bound(key.0, key.1, key.2)?;
                    self.run_bounds.insert(key, b);
                }
            }
        }
        Ok(())
    }

    fn run_bound(&mut self, p: usize, ity: VarType, n: i64) -> Result<Value, String> {
        let len = self.lens[p].ok_or_else(|| format!("parameter p{p} is not indexed"))?;
        let limit = match ity {
            VarType::I32 | VarType::U32 => {
                let top = if ity == VarType::I32 {
                    1i64 << 31
                } else {
                    1i64 << 32
                };
                let top = self.b.ins().iconst(I64, top);
                self.b.ins().umin(len, top)
            }
            _ => len,
        };
        let enough = self
            .b
            .ins()
            .icmp_imm(IntCC::UnsignedGreaterThanOrEqual, limit, n - 1);
        let bound = self.b.ins().iadd_imm(limit, -(n - 1));
        let zero = self.b.ins().iconst(I64, 0);
        Ok(self.b.ins().select(enough, bound, zero))
    }

    /// A row read or write (index `counter + uniform`, see `contiguous`) for all groups of an
    /// iteration at once: one bounds-and-mask check covers their consecutive lanes, then each group
    /// loads or stores one vector; when the check fails each group takes its own path. Checked per
    /// group, the dozen scalar instructions of each check were most of a step in loops that walk
    /// rows (a fused scan over wide rows), and kept few steps' loads in flight. Returns false, having
    /// emitted nothing, for any other instruction.
    pub(super) fn rows_of_groups(
        &mut self,
        r: usize,
        groups: &mut [Vec<Option<V>>],
        chunk: &[Value],
        first_group: usize,
    ) -> Result<bool, String> {
        let inst = self.k.insts[r];
        let t = inst.ty;
        let (val_arg, idx_arg, mask_arg) = match inst.op {
            Op::Gather => (None, inst.args[0], inst.args[1]),
            Op::Scatter(ReduceOp::None) => (Some(inst.args[0]), inst.args[1], inst.args[2]),
            _ => return Ok(false),
        };
        if groups.len() < 2 || t == VarType::Bool || !self.contiguous[idx_arg as usize] {
            return Ok(false);
        }
        let ity = self.k.ty(idx_arg);
        let p = inst.param();
        // Each group's operands and active lanes.
        let outer_active = self.active;
        let mut ops: Vec<GroupAccess> = Vec::with_capacity(groups.len());
        // every lane of every group active, known while compiling: no mask test
        let mut all_known = self.lit[mask_arg as usize].is_some_and(|b| b != 0);
        for (u, vals) in groups.iter_mut().enumerate() {
            std::mem::swap(&mut self.vals, vals);
            self.active = self.regions.active.get(u).copied().or(outer_active);
            all_known &= self.active.is_some() && self.active == self.full_active;
            let got = (|| -> Result<_, String> {
                let mask = self.val(mask_arg)?;
                Ok(GroupAccess {
                    idx: if self.row_only[idx_arg as usize] {
                        None
                    } else {
                        Some(self.val(idx_arg)?)
                    },
                    mask,
                    val: val_arg.map(|a| self.val(a)).transpose()?,
                    lanes: self.active_mask(mask)?,
                    active: self.active,
                })
            })();
            std::mem::swap(&mut self.vals, vals);
            ops.push(got?);
        }
        // Group u's index is group 0's plus 4u in the index type (a counter of that type plus a
        // uniform value): one run of 4·G indices from group 0's first.
        let i0 = match ops[0].idx {
            Some(idx) => self.index_lane(idx, ity, 0),
            None => {
                std::mem::swap(&mut self.vals, &mut groups[0]);
                self.lane = chunk[0];
                let i0 = self.row_start(idx_arg, ity);
                std::mem::swap(&mut self.vals, &mut groups[0]);
                i0?
            }
        };
        let mut ok = self.run_in_bounds(p, ity, i0, W * ops.len() as i64)?;
        if !all_known {
            let mut every = ops[0].lanes;
            for o in &ops[1..] {
                every = self.b.ins().band(every, o.lanes);
            }
            let all = self.b.ins().vall_true(every);
            ok = self.b.ins().band(ok, all);
        }

        let n = ops.len();
        let stored: Option<Vec<V>> = ops.iter().map(|o| o.val).collect();
        let count = if stored.is_some() { 0 } else { n * parts_of(t) };
        let vs = self.fast_or_slow(
            ok,
            vty(t),
            count,
            |g| g.run_access(p, t, i0, stored.as_deref(), n),
            |g| {
                let mut out = Vec::new();
                for (u, (o, &lane)) in ops.iter().zip(chunk).enumerate() {
                    g.lane = lane;
                    g.group = first_group + u;
                    g.active = o.active;
                    let idx = match o.idx {
                        Some(idx) => idx,
                        None => {
                            std::mem::swap(&mut g.vals, &mut groups[u]);
                            let idx = g.val(idx_arg);
                            std::mem::swap(&mut g.vals, &mut groups[u]);
                            idx?
                        }
                    };
                    match o.val {
                        None => {
                            let v = g.gather(p, t, idx, ity, o.mask, true)?;
                            out.extend(g.vectors(t, v));
                        }
                        Some(v) => g.scatter(p, t, type_index(t), v, idx, ity, o.mask, true)?,
                    }
                }
                Ok(out)
            },
        )?;
        for (u, vals) in groups.iter_mut().enumerate() {
            vals[r] = val_arg
                .is_none()
                .then(|| from_vectors(t, &vs[u * parts_of(t)..]));
        }
        Ok(true)
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) fn gather(
        &mut self,
        p: usize,
        t: VarType,
        idx: V,
        ity: VarType,
        mask: V,
        run: bool,
    ) -> Result<V, String> {
        if run && t != VarType::Bool {
            // a row read: one vector load when the whole run is in bounds and active
            let m = self.active_mask(mask)?;
            let (ok, i0) = self.whole_run(p, idx, ity, m)?;
            let vs = self.fast_or_slow(
                ok,
                vty(t),
                parts_of(t),
                |g| g.run_access(p, t, i0, None, 1),
                |g| {
                    let v = g.gather(p, t, idx, ity, mask, false)?;
                    Ok(g.vectors(t, v))
                },
            )?;
            return Ok(from_vectors(t, &vs));
        }
        let m = self.active_mask(mask)?;
        let len = self.lens[p].ok_or_else(|| format!("parameter p{p} is not indexed"))?;
        let oob_var = self.oob.ok_or("oob counter missing")?;
        let mem = self.mem;
        let elt = match t {
            VarType::Bool => I32,
            _ => lane_ty(t).as_int(),
        };
        let mut lanes = Vec::with_capacity(4);
        let mut bad_total: Option<Value> = None;
        for l in 0..W as usize {
            let (ix, ok) = self.lane_in_bounds(m, idx, ity, l, len, &mut bad_total);
            // Branchless: read element 0 (always mapped: slack) when the lane must not read.
            let zero64 = self.b.ins().iconst(I64, 0);
            let safe = self.b.ins().select(ok, ix, zero64);
            let addr = self.elem_addr(p, t, safe)?;
            let x = if t == VarType::Bool {
                let x = self.b.ins().uload8(I32, mem, addr, 0);
                self.b.ins().band_imm(x, 1)
            } else {
                self.b.ins().load(elt, mem, addr, 0)
            };
            let zero = self.b.ins().iconst(elt, 0);
            let x = self.b.ins().select(ok, x, zero);
            let x = if t == VarType::Bool {
                self.b.ins().ineg(x)
            } else {
                x
            };
            lanes.push(x);
        }
        self.count_bad(oob_var, bad_total);
        let v = self.build(t, &lanes);
        Ok(self.bc_v(vty(t), v))
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) fn scatter(
        &mut self,
        p: usize,
        t: VarType,
        op_ty: u32,
        val: V,
        idx: V,
        ity: VarType,
        mask: V,
        run: bool,
    ) -> Result<(), String> {
        let m = self.active_mask(mask)?;
        if run && t != VarType::Bool {
            // a row write: one vector store when the whole run is in bounds and active
            let (ok, i0) = self.whole_run(p, idx, ity, m)?;
            self.fast_or_slow(
                ok,
                vty(t),
                0,
                |g| g.run_access(p, t, i0, Some(&[val]), 1),
                |g| {
                    g.scatter_lanes(p, t, op_ty, val, idx, ity, m)
                        .map(|()| Vec::new())
                },
            )?;
            return Ok(());
        }
        self.scatter_lanes(p, t, op_ty, val, idx, ity, m)
    }

    /// A scatter's active lanes one by one: plain ones stored inline, reducing ones through the
    /// helper.
    #[allow(clippy::too_many_arguments)]
    fn scatter_lanes(
        &mut self,
        p: usize,
        t: VarType,
        op_ty: u32,
        val: V,
        idx: V,
        ity: VarType,
        m: Value,
    ) -> Result<(), String> {
        let bits = self.bc_v(ivty(t), val);
        if op_ty >> 8 == 0 {
            self.store_lanes(p, t, bits, idx, ity, m)
        } else {
            self.call_lanes(p, t, op_ty, bits, idx, ity, m)
        }
    }

    /// `fast` where `ok` holds, else `slow` (a cold block, laid out after the function so that
    /// the fast path falls through); each returns `count` vectors of type `ty`, which come back
    /// joined.
    fn fast_or_slow(
        &mut self,
        ok: Value,
        ty: Type,
        count: usize,
        fast: impl FnOnce(&mut Self) -> Result<Vec<Value>, String>,
        slow: impl FnOnce(&mut Self) -> Result<Vec<Value>, String>,
    ) -> Result<Vec<Value>, String> {
        let fast_block = self.b.create_block();
        let slow_block = self.b.create_block();
        self.b.set_cold_block(slow_block);
        let join = self.b.create_block();
        for _ in 0..count {
            self.b.append_block_param(join, ty);
        }
        self.b.ins().brif(ok, fast_block, &[], slow_block, &[]);
        self.arm(fast_block, join, fast)?;
        self.arm(slow_block, join, slow)?;
        self.b.switch_to_block(join);
        self.b.seal_block(join);
        Ok(self.b.block_params(join).to_vec())
    }

    /// Lower `arm` into `block`, ending with a jump to `join` with its vectors.
    fn arm(
        &mut self,
        block: Block,
        join: Block,
        arm: impl FnOnce(&mut Self) -> Result<Vec<Value>, String>,
    ) -> Result<(), String> {
        self.b.switch_to_block(block);
        self.b.seal_block(block);
        let vs = arm(self)?;
        let args: Vec<cranelift_codegen::ir::BlockArg> = vs.into_iter().map(Into::into).collect();
        self.b.ins().jump(join, &args);
        Ok(())
    }

    /// The vectors of a run of `groups` groups from element `i0` of parameter `p`: loaded (and
    /// returned), or `stored` (one value per group).
    fn run_access(
        &mut self,
        p: usize,
        t: VarType,
        i0: Value,
        stored: Option<&[V]>,
        groups: usize,
    ) -> Result<Vec<Value>, String> {
        let addr = self.elem_addr(p, t, i0)?;
        let mem = self.mem;
        let mut loaded = Vec::new();
        for u in 0..groups {
            for part in 0..parts_of(t) {
                let off = (u * W as usize * t.size_bytes() + 16 * part) as i32;
                match stored.map(|vs| vs[u]) {
                    None => loaded.push(self.b.ins().load(vty(t), mem, addr, off)),
                    Some(V::One(x)) => {
                        self.b.ins().store(mem, x, addr, off);
                    }
                    Some(V::Two(lo, hi)) => {
                        let x = if part == 0 { lo } else { hi };
                        self.b.ins().store(mem, x, addr, off);
                    }
                }
            }
        }
        Ok(loaded)
    }

    /// A value's vectors, as type `vty(t)`.
    fn vectors(&mut self, t: VarType, v: V) -> Vec<Value> {
        match v {
            V::One(x) => vec![self.bc(vty(t), x)],
            V::Two(lo, hi) => vec![self.bc(vty(t), lo), self.bc(vty(t), hi)],
        }
    }

    /// A plain scatter's active lanes, in lane order (the last of equal indices wins, as in the
    /// interpreter): a store when the index is below the length, else a count of bad writes.
    fn store_lanes(
        &mut self,
        p: usize,
        t: VarType,
        bits: V,
        idx: V,
        ity: VarType,
        m: Value,
    ) -> Result<(), String> {
        let len = self.lens[p].ok_or_else(|| format!("parameter p{p} is not indexed"))?;
        let bad_var = self.oob_writes.ok_or("write counter missing")?;
        let mem = self.mem;
        let mut bad_total: Option<Value> = None;
        for l in 0..W as usize {
            let (ix, ok) = self.lane_in_bounds(m, idx, ity, l, len, &mut bad_total);
            let store = self.b.create_block();
            let next = self.b.create_block();
            self.b.ins().brif(ok, store, &[], next, &[]);
            self.b.switch_to_block(store);
            self.b.seal_block(store);
            let x = self.extract(bits, l);
            let addr = self.elem_addr(p, t, ix)?;
            if t == VarType::Bool {
                let x = self.b.ins().band_imm(x, 1);
                self.b.ins().istore8(mem, x, addr, 0);
            } else {
                self.b.ins().store(mem, x, addr, 0);
            }
            self.b.ins().jump(next, &[]);
            self.b.switch_to_block(next);
            self.b.seal_block(next);
        }
        self.count_bad(bad_var, bad_total);
        Ok(())
    }

    /// Lane `l`'s index (64-bit) and whether it is active (in `m`) and below `len`; an active lane
    /// out of range adds one to `bad`.
    fn lane_in_bounds(
        &mut self,
        m: Value,
        idx: V,
        ity: VarType,
        l: usize,
        len: Value,
        bad: &mut Option<Value>,
    ) -> (Value, Value) {
        let ml = self.b.ins().extractlane(m, l as u8);
        let on = self.b.ins().icmp_imm(IntCC::NotEqual, ml, 0);
        let ix = self.index_lane(idx, ity, l);
        // Unsigned compare: negative indices (and u64 ones past i64::MAX) are huge, hence out.
        let inside = self.b.ins().icmp(IntCC::UnsignedLessThan, ix, len);
        let ok = self.b.ins().band(on, inside);
        let outside = self.b.ins().bxor_imm(inside, 1);
        let out = self.b.ins().band(on, outside);
        let out = self.b.ins().uextend(I64, out);
        *bad = Some(match *bad {
            None => out,
            Some(s) => self.b.ins().iadd(s, out),
        });
        (ix, ok)
    }

    /// Add this vector's count of out-of-range lanes to counter `var`.
    fn count_bad(&mut self, var: Variable, bad: Option<Value>) {
        let count = self.b.use_var(var);
        let count = self.b.ins().iadd(count, bad.expect("four lanes"));
        self.b.def_var(var, count);
    }

    /// A reducing scatter's active lanes, one helper call each.
    #[allow(clippy::too_many_arguments)]
    fn call_lanes(
        &mut self,
        p: usize,
        t: VarType,
        op_ty: u32,
        bits: V,
        idx: V,
        ity: VarType,
        m: Value,
    ) -> Result<(), String> {
        let len = self.lens[p].ok_or_else(|| format!("parameter p{p} is not indexed"))?;
        let base = self.bases[p].ok_or_else(|| format!("parameter p{p} not loaded"))?;
        let func = self.scatter.ok_or("scatter helper not declared")?;
        for l in 0..W as usize {
            let ml = self.b.ins().extractlane(m, l as u8);
            let call = self.b.create_block();
            let next = self.b.create_block();
            self.b.ins().brif(ml, call, &[], next, &[]);
            self.b.switch_to_block(call);
            self.b.seal_block(call);
            let mut ix = self.index_lane(idx, ity, l);
            if ity == VarType::U64 {
                let max = self.b.ins().iconst(I64, i64::MAX);
                ix = self.b.ins().umin(ix, max);
            }
            let x = self.extract(bits, l);
            let x = match t {
                VarType::Bool => {
                    let x = self.b.ins().band_imm(x, 1);
                    self.b.ins().uextend(I64, x)
                }
                _ if is_wide(t) => x,
                _ => self.b.ins().uextend(I64, x),
            };
            let op_ty = self.b.ins().iconst(I32, op_ty as i64);
            let status = self.status;
            self.b.ins().call(func, &[op_ty, base, len, ix, x, status]);
            self.b.ins().jump(next, &[]);
            self.b.switch_to_block(next);
            self.b.seal_block(next);
        }
        Ok(())
    }
}
