//! Kernel building: one size group of roots and side effects becomes one kernel.
//!
//! The builder walks the graph from a group's roots: evaluated variables become input parameters
//! (broadcast when of size 1, indexed when gathered), literals become constants, everything else is
//! computed in registers, loops and branches become regions, and stencil taps either checked loads
//! (the general kernel) or shifted loads (the interior variant of a split launch). The result, a
//! [`Built`], says what each parameter is bound to; it knows nothing about buffers it will write
//! (that is the plan's, see `plan`) or about launching (the driver's, see `schedule`).

use crate::device;
use crate::kernel::{Inst, Kernel, Param, ParamKind, Reg};
use crate::launch::block_for;
use crate::op::Op;
use crate::registry::{Buffer, FxMap, FxSet, State};
use crate::ty::VarType;
use std::sync::Arc;

/// Where a kernel parameter's buffer comes from.
pub(crate) enum Binding {
    Input(Arc<Buffer>),
    Output(usize),
    /// A stencil tap's source read at `lane + offset` (interior kernels; see `stencil`).
    Shifted(Arc<Buffer>, i64),
}

#[derive(Clone)]
pub(crate) struct Group {
    pub(crate) size: usize,
    /// The size's expression while recording a frozen function (0: constant).
    pub(crate) sym: u32,
    pub(crate) roots: Vec<u32>,
    pub(crate) side: Vec<u32>,
}

pub(crate) struct Built {
    pub(crate) kernel: Kernel,
    pub(crate) bindings: Vec<Binding>,
    /// Output buffer per root, in root order.
    pub(crate) outputs: Vec<Arc<Buffer>>,
    pub(crate) roots: Vec<u32>,
    pub(crate) size: usize,
    pub(crate) sym: u32,
    /// Indexed parameters written by scatters.
    pub(crate) modified: Vec<u32>,
    /// Run in 2-d tiles of rows of this many lanes (0: linear).
    pub(crate) tile_cols: usize,
    /// Labels of the kernel's loops with an iteration limit.
    pub(crate) loop_labels: Vec<String>,
    /// Stencil nodes (`Tap`, `Split`) the kernel resolved.
    pub(crate) stencil_seen: Vec<u32>,
    /// The stencil interior's kernel and the lanes it runs (see `stencil`).
    pub(crate) interior: Option<InteriorBuilt>,
    /// The variable bound to each parameter (an output's: its root).
    pub(crate) param_vars: Vec<u32>,
    /// The lazy variables the kernel computes in registers (see [`note_computed`]).
    pub(crate) computed: Vec<u32>,
}

/// A stencil group's interior kernel: the same work with taps read through shifted pointers.
pub(crate) struct InteriorBuilt {
    pub(crate) kernel: Kernel,
    pub(crate) bindings: Vec<Binding>,
    pub(crate) plan: Arc<crate::stencil::SplitPlan>,
}

struct Builder<'a> {
    st: &'a State,
    size: usize,
    sym: u32,
    /// Whether this thread is recording a frozen function (checked once per kernel).
    recording: bool,
    modified: Vec<u32>,
    kernel: Kernel,
    bindings: Vec<Binding>,
    reg_of: FxMap<u32, Reg>,
    /// Values of lazily viewed expressions at gathered indices: (variable, index register).
    reg_at: FxMap<(u32, Reg), Reg>,
    param_of: FxMap<(u32, ParamKind), u32>,
    /// Emitted region nodes: their opening register and their result registers (a loop's phis,
    /// a switch's own register).
    region_regs: FxMap<u32, (Reg, Vec<Reg>)>,
    /// Labels of the loops with an iteration limit (for truncation messages).
    loop_labels: Vec<String>,
    /// Building a stencil's interior kernel: taps are shifted loads, splits their fast value.
    interior: bool,
    /// Stencil nodes resolved so far.
    stencil_seen: Vec<u32>,
    /// Shifted input parameters: (source, flat offset) → parameter.
    shifted_of: FxMap<(u32, i64), u32>,
    /// The variable bound to each parameter (an output's: its root).
    param_vars: Vec<u32>,
    /// The lazy (not evaluated, not literal) variables computed in registers, in visit order.
    computed: Vec<u32>,
}

impl<'a> Builder<'a> {
    /// Forget the values defined at or after register `begin` (inside a region that has ended):
    /// later uses compute them again outside.
    fn close_scope(&mut self, begin: Reg) {
        self.reg_of.retain(|_, r| *r < begin);
        self.reg_at.retain(|_, r| *r < begin);
        self.region_regs.retain(|_, (b, _)| *b < begin);
    }

    /// Compute, before a loop opens, what its body needs that does not change from one iteration
    /// to the next: pure values that depend on none of the loop's placeholders (nor on any other
    /// region, gather or side effect, to stay simple and safe).
    fn hoist(&mut self, roots: &[u32], phis: &[u32]) {
        // dependent[id]: whether id must stay in the loop
        let mut dependent: FxMap<u32, bool> = FxMap::default();
        // the order ids were decided in: a function of the graph's shape, not of its ids, so
        // that the same program gives the same kernel (and hash) whatever ids its variables got
        let mut order: Vec<u32> = Vec::new();
        let mut stack: Vec<(u32, bool)> = roots.iter().map(|&r| (r, false)).collect();
        while let Some((id, expanded)) = stack.pop() {
            if dependent.contains_key(&id) && !expanded {
                continue;
            }
            let v = self.st.var(id);
            if self.reg_of.contains_key(&id) || v.is_evaluated() || v.op == Op::Literal {
                if dependent.insert(id, false).is_none() {
                    order.push(id);
                }
                continue;
            }
            if phis.contains(&id) || !v.op.is_pure() || v.size != self.size && v.size != 1 {
                if dependent.insert(id, true).is_none() {
                    order.push(id);
                }
                if !expanded && !phis.contains(&id) && v.region.is_none() && v.op != Op::Out {
                    // still look below for independent parts (e.g. the index of a gather)
                    for d in v.dep_ids() {
                        if !dependent.contains_key(&d) {
                            stack.push((d, false));
                        }
                    }
                }
                continue;
            }
            if !expanded {
                stack.push((id, true));
                for d in v.dep_ids() {
                    if !dependent.contains_key(&d) {
                        stack.push((d, false));
                    }
                }
                continue;
            }
            let dep = v
                .dep_ids()
                .any(|d| dependent.get(&d).copied().unwrap_or(true));
            if dependent.insert(id, dep).is_none() {
                order.push(id);
            }
        }
        // hoist the independent operands of dependent values
        let mut wanted: Vec<u32> = Vec::new();
        let mut picked: FxSet<u32> = FxSet::default();
        for &id in &order {
            if !dependent[&id] {
                continue;
            }
            let v = self.st.var(id);
            if v.region.is_some() || phis.contains(&id) {
                continue;
            }
            let skip = usize::from(matches!(v.op, Op::Gather | Op::Scatter(_)));
            for d in v.dep_ids().skip(skip) {
                if dependent.get(&d) == Some(&false)
                    && !self.reg_of.contains_key(&d)
                    && picked.insert(d)
                {
                    wanted.push(d);
                }
            }
        }
        for d in wanted {
            self.visit(d);
        }
    }

    /// Emit the region of node `id` (a loop or a switch) and return its opening register.
    fn emit_region(&mut self, id: u32) -> Reg {
        if let Some((b, _)) = self.region_regs.get(&id) {
            return *b;
        }
        let v = self.st.var(id);
        let region = v
            .region
            .as_ref()
            .expect("a region node has its parts")
            .clone();
        match *region {
            crate::registry::Region::Loop {
                inits,
                phis,
                cond,
                nexts,
                effects,
                max_iterations,
            } => {
                let init_regs: Vec<Reg> = inits.iter().map(|&i| self.visit(i)).collect();
                let mut roots = vec![cond];
                roots.extend(&nexts);
                roots.extend(&effects);
                self.hoist(&roots, &phis);
                if max_iterations > 0 {
                    self.loop_labels.push(self.st.label_of(id));
                }
                let begin = self.emit(Inst::new(Op::LoopBegin, VarType::Bool, &[], max_iterations));
                let mut phi_regs = Vec::with_capacity(phis.len());
                for (&p, &init) in phis.iter().zip(&init_regs) {
                    let ty = self.st.var(p).ty;
                    let r = self.emit(Inst::new(Op::Phi, ty, &[init], 0));
                    self.reg_of.insert(p, r);
                    phi_regs.push(r);
                }
                let c = self.visit(cond);
                self.emit(Inst::new(Op::LoopCond, VarType::Bool, &[c], 0));
                for &e in &effects {
                    self.visit(e);
                }
                let next_regs: Vec<Reg> = nexts.iter().map(|&n| self.visit(n)).collect();
                for (&p, &n) in phi_regs.iter().zip(&next_regs) {
                    let ty = self.kernel.insts[p as usize].ty;
                    self.emit(Inst::new(Op::LoopNext, ty, &[p, n], 0));
                }
                self.emit(Inst::new(Op::LoopEnd, VarType::Bool, &[begin], 0));
                self.close_scope(begin);
                self.region_regs.insert(id, (begin, phi_regs));
                begin
            }
            crate::registry::Region::Switch {
                kind,
                masks,
                yields,
                effects,
            } => {
                let mask_regs: Vec<Reg> = masks.iter().map(|&m| self.visit(m)).collect();
                let sw = self.emit(Inst::new(Op::Switch, VarType::Bool, &[], kind));
                for (c, &m) in mask_regs.iter().enumerate() {
                    let case = self.emit(Inst::new(Op::Case, VarType::Bool, &[m], 0));
                    for &e in &effects[c] {
                        self.visit(e);
                    }
                    for (j, &y) in yields[c].iter().enumerate() {
                        let r = self.visit(y);
                        let ty = self.kernel.insts[r as usize].ty;
                        self.emit(Inst::new(Op::Yield, ty, &[r], j as u64));
                    }
                    self.close_scope(case);
                }
                self.emit(Inst::new(Op::SwitchEnd, VarType::Bool, &[sw], 0));
                self.close_scope(sw);
                self.region_regs.insert(id, (sw, vec![sw]));
                sw
            }
        }
    }

    fn emit(&mut self, inst: Inst) -> Reg {
        self.kernel.insts.push(inst);
        (self.kernel.insts.len() - 1) as Reg
    }

    fn input_param(&mut self, id: u32, kind: ParamKind) -> u32 {
        if let Some(&p) = self.param_of.get(&(id, kind)) {
            return p;
        }
        let v = self.st.var(id);
        self.kernel.params.push(Param { ty: v.ty, kind });
        self.param_vars.push(id);
        self.bindings.push(Binding::Input(
            v.data.clone().expect("input parameter is evaluated"),
        ));
        let p = (self.kernel.params.len() - 1) as u32;
        self.param_of.insert((id, kind), p);
        p
    }

    /// The input parameter reading `source` at `lane + off` (a stencil tap in the interior).
    fn shifted_param(&mut self, source: u32, off: i64) -> u32 {
        if let Some(&p) = self.shifted_of.get(&(source, off)) {
            return p;
        }
        let v = self.st.var(source);
        self.kernel.params.push(Param {
            ty: v.ty,
            kind: ParamKind::Input,
        });
        self.param_vars.push(source);
        self.bindings.push(Binding::Shifted(
            v.data.clone().expect("a shifted source is evaluated"),
            off,
        ));
        let p = (self.kernel.params.len() - 1) as u32;
        self.shifted_of.insert((source, off), p);
        p
    }

    /// `source[index]` where `mask` holds, else 0. An evaluated source is read through an indexed
    /// parameter (out-of-range lanes read 0 and are counted); an unevaluated one (a lazy view, see
    /// `trace::gather_view`) is recomputed at the index inside this kernel, then masked the same way.
    fn gather(&mut self, source: u32, ty: VarType, index: Reg, mask: Reg) -> Reg {
        if self.st.var(source).is_evaluated() {
            let p = self.input_param(source, ParamKind::Indexed);
            return self.emit(Inst::new(Op::Gather, ty, &[index, mask], p as u64));
        }
        let value = self.visit_at(source, index);
        let n = self.st.var(source).size as u64;
        self.mask_out_of_range(value, ty, index, mask, n)
    }

    /// `select(mask && 0 <= index < n, value, 0)`.
    fn mask_out_of_range(&mut self, value: Reg, ty: VarType, index: Reg, mask: Reg, n: u64) -> Reg {
        let ity = self.kernel.insts[index as usize].ty;
        let lit =
            |b: &mut Self, t: VarType, bits: u64| b.emit(Inst::new(Op::Literal, t, &[], bits));
        let max = match ity {
            VarType::I32 => i32::MAX as u64,
            VarType::U32 => u32::MAX as u64,
            VarType::I64 => i64::MAX as u64,
            _ => u64::MAX,
        };
        let mut ok = mask;
        if n <= max {
            let bound = lit(self, ity, n);
            let below = self.emit(Inst::new(Op::Lt, VarType::Bool, &[index, bound], 0));
            ok = self.emit(Inst::new(Op::And, VarType::Bool, &[ok, below], 0));
        }
        if matches!(ity, VarType::I32 | VarType::I64) {
            let zero = lit(self, ity, 0);
            let non_negative = self.emit(Inst::new(Op::Ge, VarType::Bool, &[index, zero], 0));
            ok = self.emit(Inst::new(Op::And, VarType::Bool, &[ok, non_negative], 0));
        }
        let zero = lit(self, ty, 0);
        self.emit(Inst::new(Op::Select, ty, &[ok, value, zero], 0))
    }

    /// The value of the unevaluated `root` at lane `index` (a register) instead of at this
    /// kernel's lane: every counter becomes the index, every evaluated array is gathered at it,
    /// nested lazy views compose their indices. Iterative, like `visit`.
    fn visit_at(&mut self, root: u32, index: Reg) -> Reg {
        // (variable, index register, phase): 0 = first visit, 1 = operands ready, 2 = a nested
        // view's source value ready
        let mut stack = vec![(root, index, 0u8)];
        while let Some((id, at, phase)) = stack.pop() {
            if phase == 0 && self.reg_at.contains_key(&(id, at)) {
                continue;
            }
            let v = self.st.var(id);
            if self.recording && !v.fresh && !v.is_evaluated() && !v.is_literal() {
                crate::context::captured_expression(self.st.label_of(id));
            }
            let reg = if v.is_evaluated() || v.op == Op::Literal || v.size == 1 {
                if v.is_evaluated() && v.size != 1 {
                    let p = self.input_param(id, ParamKind::Indexed);
                    let all = self.emit(Inst::new(Op::Literal, VarType::Bool, &[], 1));
                    self.emit(Inst::new(Op::Gather, v.ty, &[at, all], p as u64))
                } else {
                    // literals and size-1 arrays (broadcast) are the same at every lane
                    self.visit(id)
                }
            } else {
                match (v.op, phase) {
                    (Op::Counter, _) => {
                        let ity = self.kernel.insts[at as usize].ty;
                        if ity == v.ty {
                            at
                        } else {
                            self.emit(Inst::new(Op::Cast, v.ty, &[at], 0))
                        }
                    }
                    (Op::Gather, 0) => {
                        stack.push((id, at, 1));
                        stack.push((v.deps[1], at, 0));
                        stack.push((v.deps[2], at, 0));
                        continue;
                    }
                    (Op::Gather, 1) => {
                        let (src, ty) = (v.deps[0], v.ty);
                        let (inner, mask) =
                            (self.reg_at[&(v.deps[1], at)], self.reg_at[&(v.deps[2], at)]);
                        if self.st.var(src).is_evaluated() {
                            self.gather(src, ty, inner, mask)
                        } else {
                            stack.push((id, at, 2));
                            stack.push((src, inner, 0));
                            continue;
                        }
                    }
                    (Op::Gather, _) => {
                        let (src, ty) = (v.deps[0], v.ty);
                        let (inner, mask) =
                            (self.reg_at[&(v.deps[1], at)], self.reg_at[&(v.deps[2], at)]);
                        let value = self.reg_at[&(src, inner)];
                        let n = self.st.var(src).size as u64;
                        self.mask_out_of_range(value, ty, inner, mask, n)
                    }
                    (Op::Tap | Op::Split, 0) => {
                        // at another lane, a stencil node is its general value
                        stack.push((id, at, 1));
                        stack.push((v.deps[1], at, 0));
                        continue;
                    }
                    (Op::Tap | Op::Split, _) => self.reg_at[&(v.deps[1], at)],
                    (op, 0) => {
                        debug_assert!(op.is_pure(), "lazy views hold pure ops only, not {op}");
                        stack.push((id, at, 1));
                        for d in v.dep_ids() {
                            stack.push((d, at, 0));
                        }
                        continue;
                    }
                    (op, _) => {
                        let args: Vec<Reg> = v.dep_ids().map(|d| self.reg_at[&(d, at)]).collect();
                        self.emit(Inst::new(op, v.ty, &args, 0))
                    }
                }
            };
            self.reg_at.insert((id, at), reg);
        }
        self.reg_at[&(root, index)]
    }

    /// Compute `root` into a register (post-order walk without recursion: graphs can be deep).
    fn visit(&mut self, root: u32) -> Reg {
        let mut stack = vec![(root, false)];
        while let Some((id, expanded)) = stack.pop() {
            if self.reg_of.contains_key(&id) {
                continue;
            }
            let v = self.st.var(id);
            let lazy = !v.is_evaluated() && !v.is_literal();
            let reg = if v.is_evaluated() {
                let kind = if v.size == 1 && self.size != 1 {
                    ParamKind::Broadcast
                } else {
                    ParamKind::Input
                };
                if self.recording && (v.size == 1 || self.size == 1) && v.sym != self.sym {
                    // scalar or not is decided by both sizes being 1: a replay must find the same
                    // (equal larger sizes are tied by the guards of the ops that combined them)
                    crate::context::guard_classes(&[(v.sym, v.size), (self.sym, self.size)]);
                }
                let p = self.input_param(id, kind);
                self.emit(Inst::new(Op::Load, v.ty, &[], p as u64))
            } else {
                if self.recording && !v.fresh && !v.is_literal() {
                    crate::context::captured_expression(self.st.label_of(id));
                }
                match v.op {
                    Op::LoopBegin | Op::Switch => self.emit_region(id),
                    // reachable from user code: a body that changed an array it captured
                    // (`acc += x` through a list or an attribute) left a value of its trace there
                    Op::Phi => panic!(
                        "kiln: {} holds a value of a loop body's trace after the loop ended: the body changed an array that is not part of the loop's state (e.g. `acc += x` on a captured array, or a loop variable stored into a captured list); pass that array in the loop's state and use the loop's result",
                        self.st.label_of(id)
                    ),
                    Op::Out => {
                        let node = v.deps[0];
                        self.emit_region(node);
                        let (begin, regs) = self.region_regs[&node].clone();
                        if self.st.var(node).op == Op::LoopBegin {
                            regs[v.literal as usize]
                        } else {
                            self.emit(Inst::new(Op::Out, v.ty, &[begin], v.literal))
                        }
                    }
                    Op::Literal => self.emit(Inst::new(Op::Literal, v.ty, &[], v.literal)),
                    // a one-lane counter broadcast over a larger kernel is 0 in every lane
                    Op::Counter if v.size == 1 && self.size != 1 => {
                        self.emit(Inst::new(Op::Literal, v.ty, &[], 0))
                    }
                    Op::Counter => self.emit(Inst::new(Op::Counter, v.ty, &[], 0)),
                    Op::Tap | Op::Split => {
                        if !expanded {
                            // (a node is resolved once per scope; a repeat only repeats its meta)
                            self.stencil_seen.push(id);
                        }
                        let src = v.deps[0];
                        let sv = self.st.var(src);
                        if self.interior
                            && v.op == Op::Tap
                            && sv.is_evaluated()
                            && sv.size == self.size
                        {
                            let off = self.st.stencil[&id].flat_offset();
                            let p = self.shifted_param(src, off);
                            self.emit(Inst::new(Op::Load, v.ty, &[], p as u64))
                        } else {
                            // a split's fast value in the interior, the general value elsewhere
                            let pick = if self.interior && v.op == Op::Split {
                                v.deps[0]
                            } else {
                                v.deps[1]
                            };
                            if !expanded {
                                stack.push((id, true));
                                if !self.reg_of.contains_key(&pick) {
                                    stack.push((pick, false));
                                }
                                continue;
                            }
                            self.reg_of[&pick]
                        }
                    }
                    _ => {
                        // gather sources and scatter targets are parameters, not registers
                        let skip = usize::from(matches!(v.op, Op::Gather | Op::Scatter(_)));
                        // operands on the stack, not the heap: this runs once per node of every
                        // kernel built (a node with a region's ids is the rare exception)
                        let (mut inline, mut n) = ([0u32; 4], 0);
                        let spilled: Vec<u32>;
                        let deps: &[u32] = if v.region.is_none() {
                            for d in v.deps.iter().copied().filter(|&d| d != 0).skip(skip) {
                                inline[n] = d;
                                n += 1;
                            }
                            &inline[..n]
                        } else {
                            spilled = v.dep_ids().skip(skip).collect();
                            &spilled
                        };
                        if !expanded {
                            stack.push((id, true));
                            for &d in deps.iter().rev() {
                                if !self.reg_of.contains_key(&d) {
                                    stack.push((d, false));
                                }
                            }
                            continue;
                        }
                        let mut regs = [0 as Reg; 4];
                        let many: Vec<Reg>;
                        let args: &[Reg] = if deps.len() <= regs.len() {
                            for (r, d) in regs.iter_mut().zip(deps) {
                                *r = self.reg_of[d];
                            }
                            &regs[..deps.len()]
                        } else {
                            many = deps.iter().map(|d| self.reg_of[d]).collect();
                            &many
                        };
                        match v.op {
                            Op::Gather => self.gather(v.deps[0], v.ty, args[0], args[1]),
                            Op::Scatter(_) => {
                                let p = self.input_param(v.deps[0], ParamKind::Indexed);
                                if !self.modified.contains(&p) {
                                    self.modified.push(p);
                                }
                                self.emit(Inst::new(v.op, v.ty, args, p as u64))
                            }
                            op => self.emit(Inst::new(op, v.ty, args, 0)),
                        }
                    }
                }
            };
            if lazy {
                self.computed.push(id);
            }
            self.reg_of.insert(id, reg);
        }
        self.reg_of[&root]
    }
}

pub(crate) fn build(st: &State, g: Group) -> Built {
    build_as(st, g, false)
}

/// Build a group's kernel; `interior`: the stencil interior's variant (see `stencil`).
fn build_as(st: &State, g: Group, interior: bool) -> Built {
    let mut b = Builder {
        st,
        size: g.size,
        sym: g.sym,
        recording: crate::context::recording(),
        modified: Vec::new(),
        // (room for a typical kernel up front: growing these showed in tracing profiles)
        kernel: Kernel {
            insts: Vec::with_capacity(128),
            ..Kernel::default()
        },
        bindings: Vec::new(),
        reg_of: FxMap::with_capacity_and_hasher(128, Default::default()),
        reg_at: FxMap::default(),
        param_of: FxMap::default(),
        region_regs: FxMap::default(),
        loop_labels: Vec::new(),
        interior,
        stencil_seen: Vec::new(),
        shifted_of: FxMap::default(),
        param_vars: Vec::new(),
        computed: Vec::new(),
    };
    for (n_out, &r) in g.roots.iter().enumerate() {
        let reg = b.visit(r);
        let ty = st.var(r).ty;
        b.kernel.params.push(Param {
            ty,
            kind: ParamKind::Output,
        });
        b.param_vars.push(r);
        b.bindings.push(Binding::Output(n_out));
        let p = b.kernel.params.len() - 1;
        b.emit(Inst::new(Op::Store, ty, &[reg], p as u64));
    }
    for &s in &g.side {
        b.visit(s);
    }
    Built {
        kernel: b.kernel,
        bindings: b.bindings,
        outputs: Vec::new(),
        roots: g.roots,
        size: g.size,
        sym: g.sym,
        modified: b.modified,
        tile_cols: 0,
        loop_labels: b.loop_labels,
        stencil_seen: b.stencil_seen,
        interior: None,
        param_vars: b.param_vars,
        computed: b.computed,
    }
}

/// A group's kernel and, when it holds stencil nodes, its interior variant with the lanes that run
/// it.
pub(crate) fn build_split(st: &State, g: Group) -> Built {
    let mut built = build(st, g.clone());
    // (a recording tracks the buffers scatters write through the general launch's op only)
    if built.stencil_seen.is_empty() || (!built.modified.is_empty() && crate::context::recording())
    {
        return built;
    }
    let inner = build_as(st, g, true);
    let metas: Vec<Arc<crate::stencil::StencilMeta>> = inner
        .stencil_seen
        .iter()
        .map(|id| st.stencil[id].clone())
        .collect();
    match crate::stencil::SplitPlan::new(built.size, &metas) {
        Some(plan) => {
            tracing::debug!(target: "kiln::stencil", "stencil kernel over {:?}: interior {:?}..{:?} ({} of {} lanes) runs plain loads, the border the general kernel", plan.shape, plan.start, plan.end, plan.interior_lanes(), built.size);
            built.interior = Some(InteriorBuilt {
                kernel: inner.kernel,
                bindings: inner.bindings,
                plan: Arc::new(plan),
            });
        }
        None => {
            tracing::debug!(target: "kiln::stencil", "stencil kernel of {} lanes mixes domains of different shapes: the general kernel runs every lane", built.size);
        }
    }
    built
}

impl Built {
    /// How to launch this kernel once compiled.
    pub(crate) fn spec<'a>(
        &'a self,
        kernel: &'a Arc<dyn crate::backend::CompiledKernel>,
        hash: crate::kernel::KernelHash,
    ) -> device::LaunchSpec<'a> {
        device::LaunchSpec {
            kernel,
            hash,
            params: &self.kernel.params,
            modified: &self.modified,
            block: if let Some(b) = kernel.launch_block(self.size, crate::launch::threads()) {
                b
            } else if self.kernel.insts.iter().any(|i| i.op == Op::LoopBegin) {
                crate::launch::loop_block(self.size)
            } else {
                block_for(self.kernel.len())
            },
            tile_cols: self.tile_cols,
            size_sym: self.sym,
            private: crate::privatise::Private::of(&self.kernel),
            ir: Some(&self.kernel),
        }
    }
}

/// Group `roots` and `side` effects by size (order of first appearance).
pub(crate) fn group(st: &State, roots: &[u32], side: &[u32]) -> Vec<Group> {
    let mut groups: Vec<Group> = Vec::new();
    let recording = crate::context::recording();
    let mut group_of = |id: u32| -> usize {
        let v = st.var(id);
        match groups.iter().position(|g| g.size == v.size) {
            Some(i) => {
                if recording && groups[i].sym != v.sym {
                    // one kernel for both: a replay must find their sizes equal again
                    crate::context::guard_equal((groups[i].sym, v.size), (v.sym, v.size));
                }
                i
            }
            None => {
                groups.push(Group {
                    size: v.size,
                    sym: v.sym,
                    roots: Vec::new(),
                    side: Vec::new(),
                });
                groups.len() - 1
            }
        }
    };
    let mut placed: Vec<(usize, u32, bool)> = Vec::new();
    for &s in side {
        placed.push((group_of(s), s, true));
    }
    for &r in roots {
        placed.push((group_of(r), r, false));
    }
    for (gi, id, is_side) in placed {
        if is_side {
            groups[gi].side.push(id);
        } else {
            groups[gi].roots.push(id);
        }
    }
    groups
}
