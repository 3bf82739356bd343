//! Read-only views of the traced graph for front ends that rewrite what a user traced (the scan
//! rewrites): the nodes reachable from some roots, each with its operation and operands.
//!
//! Operands include what a region (a loop or a switch) holds, and what a request refused while
//! tracing symbolically was asked of (a matrix product refused in a body still depends on its
//! operands, so that dependence analysis sees through it).

use crate::op::Op;
use crate::registry::{VarId, STATE};
use crate::ty::VarType;
use std::cell::RefCell;
use std::collections::{HashMap, HashSet};

thread_local! {
    /// Placeholder results of refused requests → the variables the request was about.
    static REFUSED_DEPS: RefCell<HashMap<u32, Vec<u32>>> = RefCell::new(HashMap::new());
}

/// Note that refused request `result` was asked of `operands` (only while tracing symbolically).
pub(crate) fn note_refused(result: VarId, operands: &[VarId]) {
    REFUSED_DEPS.with(|m| {
        m.borrow_mut()
            .insert(result.0, operands.iter().map(|v| v.0).collect());
    });
}

/// A front end's stand-in `result` for a request it refused inside a symbolic body (see
/// `control::refuse_request`) depends on `operands`: graph walks see through it.
pub fn note_stand_in(result: VarId, operands: &[VarId]) {
    note_refused(result, operands);
}

/// Forget what refused requests were about (called when an outermost symbolic trace starts).
pub(crate) fn clear_refused() {
    REFUSED_DEPS.with(|m| m.borrow_mut().clear());
}

/// One node of the traced graph.
#[derive(Clone, Debug)]
pub struct Node {
    pub id: VarId,
    pub op: Op,
    pub ty: VarType,
    pub size: usize,
    /// Operands, region contents and the operands of a refused request.
    pub deps: Vec<VarId>,
    /// Holds data (an evaluated array, or the placeholder result of a refused request).
    pub evaluated: bool,
    /// The placeholder result of a request refused while tracing symbolically.
    pub refused: bool,
    /// Literal bits (`Op::Literal`) or the state index (`Op::Phi`).
    pub literal: u64,
    pub label: Option<String>,
}

/// Every node reachable from `roots` (operands before users), not looking past `stop`.
pub fn reachable(roots: &[VarId], stop: &[VarId]) -> Vec<Node> {
    let st = STATE.lock();
    let stop: HashSet<u32> = stop.iter().map(|v| v.0).collect();
    let refused = REFUSED_DEPS.with(|m| m.borrow().clone());
    let mut seen: HashSet<u32> = HashSet::new();
    let mut out = Vec::new();
    // iterative post-order: (id, operands pushed?)
    let mut work: Vec<(u32, bool)> = roots.iter().rev().map(|r| (r.0, false)).collect();
    while let Some((id, expanded)) = work.pop() {
        if id == 0 && !expanded {
            continue;
        }
        if expanded {
            let v = st.var(id);
            let mut deps: Vec<u32> = v.deps.iter().copied().filter(|&d| d != 0).collect();
            if stop.contains(&id) {
                deps.clear();
            }
            if let Some(r) = refused.get(&id) {
                deps.extend(r.iter().copied());
            }
            out.push(Node {
                id: VarId(id),
                op: v.op,
                ty: v.ty,
                size: v.size,
                deps: deps.into_iter().map(VarId).collect(),
                evaluated: v.data.is_some(),
                refused: refused.contains_key(&id),
                literal: v.literal,
                label: v.label.as_deref().map(str::to_string),
            });
            continue;
        }
        if !seen.insert(id) {
            continue;
        }
        work.push((id, true));
        if stop.contains(&id) {
            continue;
        }
        let v = st.var(id);
        let mut deps: Vec<u32> = v.deps.iter().copied().filter(|&d| d != 0).collect();
        if let Some(region) = &v.region {
            deps.extend(region.ids());
        }
        if let Some(r) = refused.get(&id) {
            deps.extend(r.iter().copied());
        }
        for d in deps.into_iter().rev() {
            if d != 0 && !seen.contains(&d) {
                work.push((d, false));
            }
        }
    }
    // region contents are operands too: keep them in the node's list
    let regions: HashMap<u32, Vec<u32>> = out
        .iter()
        .filter_map(|n| st.var(n.id.0).region.as_ref().map(|r| (n.id.0, r.ids())))
        .collect();
    for n in &mut out {
        if let Some(ids) = regions.get(&n.id.0) {
            n.deps.extend(ids.iter().map(|&i| VarId(i)));
        }
    }
    out
}
