//! Control flow in the traced graph: loop and switch nodes, and symbolic tracing.
//!
//! A symbolic loop is traced once with *placeholders* (`Phi` variables) standing for its state;
//! the loop node then holds the initial values, the placeholders, the condition, the next values
//! and the body's side effects, and each result is an `Out` variable of the node. A switch node
//! holds per case a mask, the case's outputs and its side effects. `schedule` turns a node into a
//! kernel region; this module only builds nodes and keeps the rules of symbolic tracing: while a
//! body is traced, nothing may be evaluated or read (its values are not known yet), so such
//! requests are *refused* — they do nothing, return placeholder results so that tracing goes on,
//! and are reported by [`take_refusal`], after which the front end switches to evaluated mode or
//! returns the error.
//!
//! ```
//! use kiln_core::{self as core, control, Op, VarType};
//! // x = 0..4; while x < 3 { x = x + 1 } — one kernel with a loop region
//! let x = core::counter(VarType::U32, 4).unwrap();
//! let p = control::placeholder(VarType::U32, 4, 0, x);
//! let scope = control::enter_symbolic().unwrap();
//! let three = core::literal(VarType::U32, 3, 1);
//! let one = core::literal(VarType::U32, 1, 1);
//! let cond = core::op(Op::Lt, &[p, three]).unwrap();
//! let next = core::op(Op::Add, &[p, one]).unwrap();
//! let effects = scope.take_effects();
//! drop(scope);
//! let out = control::make_loop("count", 4, x, &[x], &[p], cond, &[next], effects, 0);
//! assert!(core::kernels_for(&out)[0].to_string().contains("loop"));
//! assert_eq!(core::read_bytes(out[0]).unwrap(), [3u32, 3, 3, 3].iter().flat_map(|v| v.to_le_bytes()).collect::<Vec<u8>>());
//! for v in [x, p, three, one, cond, next, out[0]] { core::dec_ref(v); }
//! ```

use crate::error::{Error, Result};
use crate::op::Op;
use crate::registry::{Region, Var, VarId, STATE};
use crate::ty::VarType;
use std::cell::Cell;

// the symbolic-tracing state lives in the per-thread context (the scheduler reads it too)
pub(crate) use crate::context::refuse;
pub use crate::context::{is_host_read, refuse_request, restore_refusal, symbolic, take_refusal};

/// Marks this thread as tracing a symbolic body until dropped; records where the pending side
/// effects ended, so that the body's own can be taken (`take_effects`).
pub struct SymbolicScope {
    mark: u64,
    /// Whether `take_effects` ran: a scope dropped without it (a panic in the body, an error)
    /// discards the body's side effects, which must never run outside their region.
    taken: Cell<bool>,
}

/// Start tracing a symbolic body (pending side effects are flushed first: they are not the body's).
pub fn enter_symbolic() -> Result<SymbolicScope> {
    if !symbolic() {
        crate::schedule::eval_side_effects()?;
        crate::inspect::clear_refused();
    }
    crate::context::enter_symbolic_depth();
    let mark = STATE.lock().effect_mark();
    Ok(SymbolicScope {
        mark,
        taken: Cell::new(false),
    })
}

impl SymbolicScope {
    /// The side effects created since the scope began (scatters in the body), removed from the
    /// pending list: they belong to the region and run inside it, masked. Each keeps its reference.
    pub fn take_effects(&self) -> Vec<u32> {
        self.taken.set(true);
        let me = crate::registry::thread_token();
        let mark = self.mark;
        STATE
            .lock()
            .take_effects(|p| p.thread == me && p.symbolic && p.seq >= mark)
    }
}

impl Drop for SymbolicScope {
    fn drop(&mut self) {
        crate::context::leave_symbolic_depth();
        if !self.taken.get() {
            discard_effects(self.take_effects());
        }
    }
}

/// The error for a refused request in a symbolic `region` ("loop body", "branch", …).
pub fn refusal_error(label: String, how: String, region: &str) -> Error {
    Error::SymbolicRead {
        label,
        how,
        region: region.into(),
    }
}

/// A placeholder for loop state `k` of type `ty` and `size` lanes (its size expression taken from
/// `like` while a frozen function is recorded).
pub fn placeholder(ty: VarType, size: usize, k: usize, like: VarId) -> VarId {
    let mut st = STATE.lock();
    let sym = if st.var(like.0).size == size {
        st.var(like.0).sym
    } else {
        0
    };
    let mut v = Var::new(Op::Phi, ty, size);
    v.literal = k as u64;
    v.sym = sym;
    VarId(st.insert(v))
}

/// One output of a region node.
fn output(st: &mut crate::registry::State, node: u32, k: usize, ty: VarType) -> VarId {
    let (size, sym) = (st.var(node).size, st.var(node).sym);
    let mut v = Var::new(Op::Out, ty, size);
    v.deps[0] = node;
    v.literal = k as u64;
    v.sym = sym;
    VarId(st.insert(v))
}

/// Insert a node and its outputs; a node with side effects is also a pending side effect itself
/// (it runs at the next evaluation even if no output is read).
fn finish_node(node: Var, tys: &[VarType], has_effects: bool) -> Vec<VarId> {
    let mut st = STATE.lock();
    let id = st.insert(node);
    let outs: Vec<VarId> = tys
        .iter()
        .enumerate()
        .map(|(k, &t)| output(&mut st, id, k, t))
        .collect();
    st.region_outs
        .insert(id, outs.iter().map(|o| o.0).collect());
    if has_effects {
        st.inc_int(id);
        st.push_effect(id, symbolic());
    }
    let mut garbage = Vec::new();
    st.dec_ext(id, &mut garbage);
    drop(st);
    outs
}

/// A loop over `size` lanes (its size expression from `like`). Takes over one reference of each
/// `effects` entry (as [`SymbolicScope::take_effects`] hands them out); the others are borrowed.
/// Returns one output per state entry: its final value.
#[allow(clippy::too_many_arguments)]
pub fn make_loop(
    label: &str,
    size: usize,
    like: VarId,
    inits: &[VarId],
    phis: &[VarId],
    cond: VarId,
    nexts: &[VarId],
    effects: Vec<u32>,
    max_iterations: u64,
) -> Vec<VarId> {
    let (tys, sym) = {
        let st = STATE.lock();
        let tys: Vec<VarType> = phis.iter().map(|p| st.var(p.0).ty).collect();
        let sym = if st.var(like.0).size == size {
            st.var(like.0).sym
        } else {
            0
        };
        (tys, sym)
    };
    let has_effects = !effects.is_empty();
    let mut node = Var::new(Op::LoopBegin, VarType::Bool, size);
    node.sym = sym;
    node.label = Some(label.into());
    node.region = Some(Box::new(Region::Loop {
        inits: inits.iter().map(|i| i.0).collect(),
        phis: phis.iter().map(|i| i.0).collect(),
        cond: cond.0,
        nexts: nexts.iter().map(|i| i.0).collect(),
        effects: effects.clone(),
        max_iterations,
    }));
    let outs = finish_node(node, &tys, has_effects);
    release(&effects);
    outs
}

/// A switch over `size` lanes: case `c` runs where `masks[c]` holds (masks must be disjoint) and
/// produces `yields[c]` (equal types across cases); each output is 0 where no case ran. Takes
/// over one reference of each `effects` entry.
pub fn make_switch(
    kind: u64,
    size: usize,
    like: VarId,
    masks: &[VarId],
    yields: &[Vec<VarId>],
    effects: Vec<Vec<u32>>,
) -> Vec<VarId> {
    let (tys, sym) = {
        let st = STATE.lock();
        let tys: Vec<VarType> = yields
            .first()
            .map(|y| y.iter().map(|v| st.var(v.0).ty).collect())
            .unwrap_or_default();
        let sym = if st.var(like.0).size == size {
            st.var(like.0).sym
        } else {
            0
        };
        (tys, sym)
    };
    let all: Vec<u32> = effects.iter().flatten().copied().collect();
    let mut node = Var::new(Op::Switch, VarType::Bool, size);
    node.sym = sym;
    node.region = Some(Box::new(Region::Switch {
        kind,
        masks: masks.iter().map(|i| i.0).collect(),
        yields: yields
            .iter()
            .map(|y| y.iter().map(|v| v.0).collect())
            .collect(),
        effects,
    }));
    let outs = finish_node(node, &tys, !all.is_empty());
    release(&all);
    outs
}

/// A copy of `id` in a buffer of its own (a recorded `Memcpy` inside a frozen function).
pub fn copy(id: VarId) -> Result<VarId> {
    crate::eval(&[id])?;
    // (the lock is released before `describe` takes it again)
    let data = STATE.lock().var(id.0).data.clone();
    let buf = data
        .ok_or_else(|| Error::Invalid(format!("{} could not be evaluated", crate::describe(id))))?;
    let out = crate::device::copy_buffer(&buf)?;
    Ok(crate::data_var(out.ty(), out))
}

/// Drop side effects taken from a trace that is thrown away (they never run, so their targets
/// have nothing pending any more).
pub fn discard_effects(effects: Vec<u32>) {
    {
        let mut st = STATE.lock();
        // the scatters among them, and those inside the region nodes among them (a loop or a
        // branch traced in the discarded body), at any depth
        let mut stack = effects.clone();
        while let Some(e) = stack.pop() {
            if matches!(st.var(e).op, Op::Scatter(_)) {
                let t = st.var(e).deps[0];
                st.var_mut(t).dirty = false;
            } else if let Some(r) = &st.var(e).region {
                match &**r {
                    Region::Loop { effects, .. } => stack.extend(effects),
                    Region::Switch { effects, .. } => stack.extend(effects.iter().flatten()),
                }
            }
        }
    }
    release(&effects);
}

/// Drop the internal references the side-effect list held (the node holds its own now).
fn release(ids: &[u32]) {
    let mut garbage = Vec::new();
    let mut st = STATE.lock();
    for &i in ids {
        st.dec_int(i, &mut garbage);
    }
    drop(st);
    drop(garbage);
}
