//! AD through control flow: `if_then_else`, `switch`, `dispatch` and `while_loop` (both modes),
//! and the refusal of PyTensor's face of scan (`kiln::scan` runs differentiated step by step).
//!
//! A branch or loop body runs inside a region of one kernel (symbolic mode) or on its own lanes
//! (evaluated mode), and what it returns travels as engine ids: an AD node recorded inside would
//! be lost, and the user's closures are borrowed, so they cannot be called again by a backward
//! pass later. So the body is differentiated *inside* the construct, while it runs: its
//! arguments become fresh leaves, and one forward pass per argument that carries a gradient gives
//! each lane's Jacobian entries `∂out_j/∂arg_i`, which leave the construct as extra outputs
//! (branches: each lane gets its own branch's entries, 0 where no target ran) or as extra loop
//! state (loops: `J ← ∂body/∂state · J` at each iteration, starting from the identity). Outside,
//! each result gets one node ([`LaneJacobian`]) that multiplies by its entries in either
//! direction. This is exact when the body is lane-local (lane `i` of a result depends only on
//! lane `i` of the arguments), which every symbolic body is; a body that mixes lanes (a
//! reduction, a gather from an argument) is refused with an error, never differentiated wrongly.
//! Arrays with gradients that branch or call targets capture (parameters held by a registry's
//! instances) are found by tracing the targets once beforehand in a trace that is thrown away,
//! and become extra columns of the Jacobian; so do those a loop body captures (found by the same
//! kind of trace), when they have one element or one per lane.
//!
//! A loop's Jacobian is carried forward, so reverse mode through it needs no stored iteration:
//! `backward` multiplies by the entries like forward mode does. The price is one forward pass per
//! state entry that carries a gradient, per iteration (a wide state pays it `columns` times),
//! and the entries' rule is first order. Higher orders record the loop instead
//! ([`LoopGrad::Recorded`], chosen inside nested transformations): each iteration evaluated,
//! `select(active, body(state), state)` recorded like straight-line code, every iteration's
//! state kept. Branches and calls do the same there ([`recorded_call`]): each target runs on its
//! own lanes, compacted, its argument gathers and result placement recorded like any code. A
//! loop whose memory must stay bounded whatever its body is recomputed from saved states
//! instead (`super::checkpoint`, with `'static` closures). Scans and stencils have
//! their own rules (`scan::stepwise`, `stencil::grad`).

use super::graph::{self, AdIndex, Rule};
use super::rules::{broadcast, cast_grad, unbroadcast};
use super::value::Grad;
use super::{recording, RecordingGuard};
use crate::array::{Array, Bool};
use crate::control::{Loop, LoopGrad, Target};
use crate::freeze::traverse::{Assign, Traversal, Traverse};
use crate::types::Float;
use kiln_core::{Error, Op, Result, Size, VarId, VarType};
use std::cell::RefCell;
use std::collections::HashSet;
use std::sync::Arc;

// ---------------------------------------------------------------------------------------------
// Arrays of a `Traverse` value with their AD nodes

/// Owned references to arrays of any type: extra outputs and loop state that carry Jacobian
/// entries through a construct.
#[derive(Clone)]
pub(crate) struct Flat(pub(crate) kiln_core::Handles);

impl Traverse for Flat {
    fn traverse(&self, t: &mut Traversal) {
        t.structure("AdJacobian", self.0.len());
        for (k, &id) in self.0.ids().iter().enumerate() {
            t.index(k, |t| t.array(id));
        }
    }
    fn traverse_mut(&mut self, a: &mut Assign) {
        for k in 0..self.0.len() {
            let id = a.erased(kiln_core::var_type(self.0.ids()[k]));
            self.0.replace(k, id);
        }
    }
}

/// The ids and AD nodes of `s`'s arrays, by position.
pub(crate) fn arrays<S: Traverse>(s: &S) -> (Vec<VarId>, Vec<AdIndex>) {
    let mut t = Traversal::new();
    s.traverse(&mut t);
    t.found.iter().map(|f| (f.id, f.ad)).unzip()
}

/// `template` with its arrays replaced by `ids`, each with the AD node at its position in `ads`
/// (new references taken on both).
pub(crate) fn rebuild_with<S: Traverse + Clone>(template: &S, ids: &[VarId], ads: &[AdIndex]) -> S {
    let mut s = template.clone();
    s.traverse_mut(&mut Assign::with_ads(ids.to_vec(), ads.to_vec()));
    s
}

/// Whether values of type `ty` carry gradients.
fn differentiable(ty: VarType) -> bool {
    matches!(ty, VarType::F32 | VarType::F64)
}

pub(crate) fn one_bits(ty: VarType) -> u64 {
    match ty {
        VarType::F32 => 1.0f32.to_bits() as u64,
        _ => 1.0f64.to_bits(),
    }
}

/// A new handle to float array `id` as a `Grad`.
fn grad_of(id: VarId) -> Grad {
    kiln_core::inc_ref(id);
    match kiln_core::var_type(id) {
        VarType::F32 => Grad::of(Array::<f32>::wrap(id)),
        _ => Grad::of(Array::<f64>::wrap(id)),
    }
}

/// Take over the engine reference of `g`'s values (its node, if any, is released).
fn into_id(g: Grad) -> VarId {
    kiln_core::inc_ref(g.id());
    g.id()
}

/// Engine references released when dropped (an error or a panic in a body unwinds through).
type Ids = kiln_core::Handles;

/// AD node references released when dropped.
pub(crate) struct Nodes(pub(crate) Vec<AdIndex>);
impl Drop for Nodes {
    fn drop(&mut self) {
        self.0.iter().for_each(|&a| graph::dec_ref(a));
    }
}

/// `id` as an array of `n` lanes when it has one and the construct has several (a broadcast
/// argument that carries a gradient gets one Jacobian entry per lane). A new reference.
fn widen(id: VarId, n: Size) -> Result<VarId> {
    let s = kiln_core::freeze::size_of(id);
    if s.is_one() && !n.is_one() && !n.is_zero() {
        let all = Ids::own(vec![kiln_core::literal(VarType::Bool, 1, n)]);
        kiln_core::op(Op::Select, &[all.ids()[0], id, id])
    } else {
        kiln_core::inc_ref(id);
        Ok(id)
    }
}

/// The lane count of a construct over `ids` (the first size other than 1).
pub(crate) fn lanes(ids: &[VarId]) -> Size {
    ids.iter()
        .map(|&i| kiln_core::freeze::size_of(i))
        .find(|s| !s.is_one())
        .unwrap_or(Size::fixed(1))
}

// ---------------------------------------------------------------------------------------------
// The node

/// A result of a construct: `out = body(args)` per lane, with `∂out/∂arg_i` given per lane.
struct LaneJacobian {
    name: &'static str,
    out_ty: VarType,
    out_size: usize,
    /// Per parent: the Jacobian entry (of the output's type), the parent's type and size.
    entries: Vec<(Grad, VarType, usize)>,
    /// The parents' nodes (not counted: the node's own edges keep them alive while it lives).
    parents: Vec<AdIndex>,
}

/// A gradient recorded by a backward pass with `create_graph` through a node whose rule is not
/// itself differentiable (the Jacobian entries of a construct, a custom op's hand-written
/// backward): any later pass through it is refused instead of missing the second-order terms.
struct SecondOrder {
    construct: &'static str,
}

impl SecondOrder {
    fn why(&self) -> String {
        let fix = if self.construct == "while_loop" {
            "; give the loop `.grad_mode(LoopGrad::Recorded)` (nested `kiln::grad`, `kiln::hvp` choose it)"
        } else {
            ""
        };
        format!(
            "second-order derivatives (of a gradient recorded with create_graph) through {}: its backward pass is not itself differentiated{fix}",
            self.construct
        )
    }
}

impl Rule for SecondOrder {
    fn name(&self) -> &'static str {
        "second_order"
    }
    fn backward(&self, _: &Grad) -> Vec<Option<Grad>> {
        Vec::new()
    }
    fn forward(&self, _: &[Option<Grad>]) -> Option<Grad> {
        None
    }
    fn try_forward(&self, _: &[Option<Grad>]) -> Result<Option<Grad>> {
        Err(Error::Ad(format!(
            "forward mode through {}; compute it with a first-order pass",
            self.why()
        )))
    }
    fn refuses_reverse(&self) -> Option<(String, String)> {
        Some((self.construct.to_string(), self.why()))
    }
}

/// `g`, computed by a rule of `construct` during a backward pass: when that pass records itself
/// (gradients of gradients), the result gets a node that refuses to be differentiated again,
/// with parents `inputs` (the rule's inputs) and `g`'s own node.
pub(crate) fn guard_second_order(g: Grad, inputs: &[AdIndex], construct: &'static str) -> Grad {
    if !recording() {
        return g;
    }
    let mut ps: Vec<AdIndex> = inputs.iter().copied().filter(|&a| a != 0).collect();
    if g.ad() != 0 {
        ps.push(g.ad());
    }
    let ty = g.ty();
    let ad = graph::new_node(
        ty,
        kiln_core::size(g.id()),
        ps,
        Some(Arc::new(SecondOrder { construct })),
    );
    g.with_node(ad)
}

fn mul(a: &Grad, b: &Grad) -> Grad {
    match a.ty() {
        VarType::F32 => Grad::of(a.array::<f32>() * b.array::<f32>()),
        _ => Grad::of(a.array::<f64>() * b.array::<f64>()),
    }
}

fn resize<F: Float>(g: &Grad, to: usize, from: usize) -> Grad {
    let a = g.array::<F>();
    Grad::of(if to == 1 {
        unbroadcast(a, 1.into(), from.into())
    } else {
        broadcast(a, to.into())
    })
}

/// `g` (of `from` lanes) summed to one lane or widened to `to` lanes as needed.
pub(crate) fn fit(g: &Grad, to: usize, from: usize) -> Grad {
    match g.ty() {
        VarType::F32 => resize::<f32>(g, to, from),
        _ => resize::<f64>(g, to, from),
    }
}

impl Rule for LaneJacobian {
    fn name(&self) -> &'static str {
        self.name
    }
    fn backward(&self, ct: &Grad) -> Vec<Option<Grad>> {
        self.entries
            .iter()
            .zip(&self.parents)
            .map(|((w, ty, size), &p)| {
                let g = cast_grad(&mul(ct, w), *ty);
                let n = kiln_core::size(g.id());
                Some(guard_second_order(fit(&g, *size, n), &[p], self.name))
            })
            .collect()
    }
    fn forward(&self, tangents: &[Option<Grad>]) -> Option<Grad> {
        let mut acc: Option<Grad> = None;
        for ((w, _, _), t) in self.entries.iter().zip(tangents) {
            if let Some(t) = t {
                let term = mul(w, &cast_grad(t, self.out_ty));
                acc = Some(match acc {
                    None => term,
                    Some(a) => a.plus(&term),
                });
            }
        }
        acc.map(|a| {
            let n = kiln_core::size(a.id());
            fit(&a, self.out_size, n)
        })
    }
    fn lane_local(&self) -> bool {
        true
    }
}

/// A node for result `out` with parents `parents` (the outer arguments' nodes) and entries
/// `ws` (one per parent, owned ids). Returns the node (one reference, the caller's).
fn node(
    name: &'static str,
    out: VarId,
    parents: &[(AdIndex, VarType, usize)],
    ws: &[VarId],
) -> AdIndex {
    let rule = LaneJacobian {
        name,
        out_ty: kiln_core::var_type(out),
        out_size: kiln_core::size(out),
        entries: ws
            .iter()
            .zip(parents)
            .map(|(&w, &(_, ty, size))| (grad_of(w), ty, size))
            .collect(),
        parents: parents.iter().map(|p| p.0).collect(),
    };
    let ps: Vec<AdIndex> = parents.iter().map(|p| p.0).collect();
    graph::new_node(
        kiln_core::var_type(out),
        kiln_core::size(out),
        ps,
        Some(Arc::new(rule)),
    )
}

// ---------------------------------------------------------------------------------------------
// Differentiating a body while it runs

/// The error for a body that captured an array carrying a gradient.
pub(crate) fn captured(what: &str, size: usize, ty: VarType) -> Error {
    Error::Ad(format!(
        "{what}: the body uses a {size}-element {ty} array that carries a gradient without taking it as an argument (a closure captured it), so its derivatives would be lost; pass it in the arguments (a loop: in the state), or `detach()` it if no gradient should flow through it"
    ))
}

/// Walk from `outs` back to the `leaves`: nodes older than the body (`start`) that are not
/// leaves were captured; nodes that mix lanes cannot be differentiated per lane.
fn check_body(what: &str, outs: &[AdIndex], leaves: &[AdIndex], start: u64) -> Result<()> {
    walk_body(what, outs, leaves, start, None)
}

/// [`check_body`]; with `captures` (and the body's lane count), the nodes older than the body
/// are collected there (one reference taken on each) instead of refused, and so is a node of
/// the body that mixes lanes but depends on no leaf, when it has one element or one per lane
/// (a reduction or gather of a captured array: constant to the body's lanes).
fn walk_body(
    what: &str,
    outs: &[AdIndex],
    leaves: &[AdIndex],
    start: u64,
    mut captures: Option<(&mut Nodes, usize)>,
) -> Result<()> {
    graph::with(|g| {
        let mut seen = HashSet::new();
        let mut stack: Vec<AdIndex> = outs.iter().copied().filter(|&a| a != 0).collect();
        while let Some(i) = stack.pop() {
            if !seen.insert(i) || leaves.contains(&i) {
                continue;
            }
            let n = g.node(i);
            if n.seq < start {
                let Some((found, _)) = captures.as_mut() else {
                    return Err(captured(what, n.size, n.ty));
                };
                g.retain(i);
                found.0.push(i);
                continue;
            }
            if let Some(r) = &n.rule {
                if !r.lane_local() {
                    if let Some((found, lanes)) = captures.as_mut() {
                        if (n.size == 1 || n.size == *lanes) && !reaches(g, i, leaves, start) {
                            g.retain(i);
                            found.0.push(i);
                            continue;
                        }
                    }
                    let any_body = if what.starts_with("loop ") {
                        "; or differentiate the loop in a mode that takes any body: `grad_checkpoint(Checkpoints::Auto)` (memory ∝ √iterations) or `grad_mode(LoopGrad::Recorded)` (every iteration kept)"
                    } else {
                        ""
                    };
                    return Err(Error::Ad(format!(
                        "{what}: the body's `{}` combines values of different lanes; differentiating a loop body or branch needs each lane computed from its own lane of the arguments — compute it outside the construct and pass the result in, or `detach()` its input{any_body}",
                        r.name()
                    )));
                }
            }
            stack.extend(n.parents.iter().copied());
        }
        Ok(())
    })
}

/// An error unless every node between `out` and `leaves` computes each lane from its own lanes
/// (what per-lane partials need: a stencil kernel's value in its taps). Returns the nodes older
/// than `start` (the trace of `out`) that `out` reaches: arrays with gradients the traced
/// closure captured (one reference held on each); the walk stops at them.
pub(crate) fn lane_local_captures(
    what: &str,
    out: AdIndex,
    leaves: &[AdIndex],
    start: u64,
    lanes: usize,
) -> Result<Nodes> {
    let mut found = Nodes(Vec::new());
    walk_body(what, &[out], leaves, start, Some((&mut found, lanes)))?;
    Ok(found)
}

/// Whether node `from` depends on one of `leaves` through nodes no older than `start`.
fn reaches(g: &graph::Graph, from: AdIndex, leaves: &[AdIndex], start: u64) -> bool {
    let mut seen = HashSet::new();
    let mut stack = vec![from];
    while let Some(i) = stack.pop() {
        if leaves.contains(&i) {
            return true;
        }
        if !seen.insert(i) {
            continue;
        }
        let n = g.node(i);
        if n.seq >= start {
            stack.extend(n.parents.iter().copied());
        }
    }
    false
}

/// Remember the first error of a body (later ones are consequences).
fn note(failure: &RefCell<Option<Error>>, e: Error) {
    let mut f = failure.borrow_mut();
    if f.is_none() {
        *f = Some(e);
    }
}

/// Run `f(args)` on fresh leaves at positions `wrt` (new nodes): the results, the body's
/// checks, and for each of `columns` forward passes the tangents of the results. `seeds(k,
/// leaves, ids)` gives column `k`'s seeds: leaf nodes (by argument position) or `captured`
/// nodes (arrays with gradients the body captured, found beforehand by [`probe`]).
struct Differentiated<O> {
    out: O,
    out_ids: Vec<VarId>,
    /// `tangents[k][j]`: the tangent of result `j` in column `k` (`None`: zero or not float).
    tangents: Vec<Vec<Option<Grad>>>,
}

/// Seeds of one forward pass through a body, given its leaves (by argument position, 0 where
/// none) and its arguments' ids.
type Seeds<'a> = dyn Fn(usize, &[AdIndex], &[VarId]) -> Vec<(AdIndex, Grad)> + 'a;

#[allow(clippy::too_many_arguments)]
fn differentiate<A: Traverse + Clone, O: Traverse>(
    what: &str,
    f: &mut dyn FnMut(&A) -> O,
    args: &A,
    wrt: &[usize],
    captured: &[AdIndex],
    columns: usize,
    seeds: &Seeds<'_>,
    failure: &RefCell<Option<Error>>,
) -> Differentiated<O> {
    // the body records derivatives even inside a backward pass's rules (first order only)
    let _rec = RecordingGuard::set(true);
    let (start, ids, leaves, out) = on_leaves(args, wrt, |a| f(a));
    let (out_ids, out_ads) = arrays(&out);
    let mut tangents = Vec::new();
    let mut boundary = leaves.0.clone();
    boundary.extend_from_slice(captured);
    match check_body(what, &out_ads, &boundary, start) {
        Err(e) => note(failure, e),
        Ok(()) => {
            for k in 0..columns {
                let s = seeds(k, &leaves.0, &ids);
                let ts = match body_forward(&out_ads, start, s) {
                    Ok(ts) => ts,
                    Err(e) => {
                        note(failure, e);
                        Default::default()
                    }
                };
                tangents.push(
                    out_ads
                        .iter()
                        .map(|a| if *a == 0 { None } else { ts.get(a).cloned() })
                        .collect(),
                );
            }
        }
    }
    tangents.resize_with(columns, || vec![None; out_ids.len()]);
    drop(leaves);
    Differentiated {
        out,
        out_ids,
        tangents,
    }
}

/// Fresh leaf nodes at positions `wrt` of `ids` (0 elsewhere), owned by the result.
/// Run `f` on `args` with the positions `wrt` replaced by fresh leaves: the sequence number the
/// body's first node gets, the arguments' ids, the leaves (by position) and the result.
fn on_leaves<A: Traverse + Clone, O>(
    args: &A,
    wrt: &[usize],
    f: impl FnOnce(&A) -> O,
) -> (u64, Vec<VarId>, Nodes, O) {
    let start = graph::with(|g| g.next_seq());
    let (ids, _) = arrays(args);
    let leaves = leaves_at(&ids, wrt);
    let out = f(&rebuild_with(args, &ids, &leaves.0));
    (start, ids, leaves, out)
}

fn leaves_at(ids: &[VarId], wrt: &[usize]) -> Nodes {
    Nodes(
        ids.iter()
            .enumerate()
            .map(|(k, &id)| {
                if wrt.contains(&k) {
                    graph::new_node(kiln_core::var_type(id), kiln_core::size(id), vec![], None)
                } else {
                    0
                }
            })
            .collect(),
    )
}

/// A forward pass over the nodes a body created (from `start` on) between its seeds and its
/// results `outs`: the tangent of every node reached. Nodes older than the body (what it
/// captured) are only seeds here, never crossed, so the pass stays inside the body.
pub(crate) fn body_forward(
    outs: &[AdIndex],
    start: u64,
    seeds: Vec<(AdIndex, Grad)>,
) -> Result<std::collections::HashMap<AdIndex, Grad>> {
    let mut ts: std::collections::HashMap<AdIndex, Grad> = seeds.into_iter().collect();
    if ts.is_empty() {
        return Ok(ts);
    }
    #[allow(clippy::type_complexity)]
    let mut steps: Vec<(AdIndex, u64, Option<Arc<dyn Rule>>, Vec<AdIndex>)> = graph::with(|g| {
        let mut seen = HashSet::new();
        let mut stack: Vec<AdIndex> = outs.iter().copied().filter(|&a| a != 0).collect();
        let mut steps = Vec::new();
        while let Some(i) = stack.pop() {
            if !seen.insert(i) {
                continue;
            }
            let n = g.node(i);
            if n.seq < start {
                continue;
            }
            steps.push((i, n.seq, n.rule.clone(), n.parents.to_vec()));
            stack.extend(n.parents.iter().copied());
        }
        for s in &steps {
            g.retain(s.0);
        }
        steps
    });
    steps.sort_by_key(|s| s.1);
    let held = Nodes(steps.iter().map(|s| s.0).collect());
    let _rec = RecordingGuard::set(false);
    for (ad, _, rule, parents) in &steps {
        if ts.contains_key(ad) {
            continue;
        }
        let Some(rule) = rule else { continue };
        let inputs: Vec<Option<Grad>> = parents.iter().map(|p| ts.get(p).cloned()).collect();
        if inputs.iter().all(|t| t.is_none()) {
            continue;
        }
        if let Some(t) = rule.try_forward(&inputs)? {
            ts.insert(*ad, t);
        }
    }
    drop(steps);
    drop(held);
    Ok(ts)
}

/// The arrays with gradients that `targets` capture (rather than take as arguments): each
/// target is traced once on leaves, inside a symbolic trace that is then thrown away (its side
/// effects discarded), and the nodes older than it that its results reach are collected. One
/// reference held on each.
fn probe<A: Traverse + Clone, O: Traverse>(
    targets: &[Target<'_, A, O>],
    args: &A,
    wrt: &[usize],
) -> Result<Nodes> {
    let mut found = Nodes(Vec::new());
    let trace = crate::control::Trace::enter()?;
    for f in targets.iter().flatten() {
        captured_by(f, args, wrt, &mut found);
    }
    drop(trace);
    Ok(found)
}

/// Add to `found` the nodes older than `f` that its result reaches on leaves at `wrt` (one
/// reference held on each). To be called inside a symbolic trace that is thrown away.
pub(crate) fn captured_by<A: Traverse + Clone, O: Traverse>(
    f: impl FnOnce(&A) -> O,
    args: &A,
    wrt: &[usize],
    found: &mut Nodes,
) {
    let _rec = RecordingGuard::set(true);
    let (start, _, leaves, out) = on_leaves(args, wrt, f);
    let (_, out_ads) = arrays(&out);
    let new = graph::with(|g| {
        let mut seen = HashSet::new();
        let mut stack: Vec<AdIndex> = out_ads.iter().copied().filter(|&a| a != 0).collect();
        let mut new = Vec::new();
        while let Some(i) = stack.pop() {
            if !seen.insert(i) || leaves.0.contains(&i) {
                continue;
            }
            let n = g.node(i);
            if n.seq < start {
                if !found.0.contains(&i) && !new.contains(&i) {
                    g.retain(i);
                    new.push(i);
                }
                continue;
            }
            stack.extend(n.parents.iter().copied());
        }
        new
    });
    found.0.extend(new);
    drop(out);
    drop(leaves);
}

/// `if_then_else` / `switch` / `dispatch` inside a transformation whose derivatives are
/// differentiated again ([`super::higher_order`]): the first-order path's Jacobian entries have
/// no derivative of their own, so here each target runs on its own lanes, compacted (the
/// evaluated mode), with the gathers of its arguments and the gathers that place its results
/// recorded like any code: derivatives of every order go through, also of arrays the targets
/// capture. Side effects happen only on each target's lanes; lanes no target takes get zeros.
pub(crate) fn recorded_call<A: Traverse + Clone, O: Traverse + Clone>(
    what: &str,
    masks: &[VarId],
    targets: &[Target<'_, A, O>],
    args: &A,
    n: Size,
) -> Result<O> {
    let (arg_ids, arg_ads) = arrays(args);
    // the results so far: a template and one array of n lanes per output
    let mut result: Option<(O, Ids, Nodes)> = None;
    for (k, t) in targets.iter().enumerate() {
        let Some(f) = t else { continue };
        kiln_core::inc_ref(masks[k]);
        let given = crate::array::Bool::wrap(masks[k]);
        let mask = if kiln_core::freeze::size_of(masks[k]).same_as(n) {
            given
        } else {
            // a broadcast mask: all lanes or none
            let (yes, no) = (Bool::full(true, n), Bool::full(false, n));
            crate::ops::select(&given, yes, no)
        };
        let lanes = crate::array::UInt32::wrap(kiln_core::compress(mask.id())?);
        if kiln_core::size(lanes.id()) == 0
            && result.is_some()
            && !kiln_core::freeze::in_recording()
        {
            continue;
        }
        let start = graph::with(|g| g.next_seq());
        let (mut ids, mut ads) = (Ids::new(), Nodes(Vec::new()));
        for (&a, &ad) in arg_ids.iter().zip(&arg_ads) {
            let (id, ad) = if kiln_core::freeze::size_of(a).is_one() && crate::control::several(n) {
                // size-1 arguments broadcast
                kiln_core::inc_ref(a);
                graph::inc_ref(ad);
                (a, ad)
            } else {
                gather_entry(a, ad, &lanes, None)?
            };
            ids.push(id);
            ads.0.push(ad);
        }
        let local = rebuild_with(args, ids.ids(), &ads.0);
        let out = {
            let _lanes = kiln_core::lanes::push_compact(lanes.id(), n.peek(), Some(mask.id()))?;
            f(&local)
        };
        drop(local);
        let (out_ids, out_ads) = arrays(&out);
        // a target that mixes the lanes of its arguments would see only its own lanes here, not
        // every lane as a symbolic target does: refused, as at first order
        let k_lanes = kiln_core::size(lanes.id());
        for &o in out_ads.iter().filter(|&&o| o != 0) {
            drop(lane_local_captures(what, o, &ads.0, start, k_lanes)?);
        }
        drop((ids, ads));
        if result.is_none() {
            let mut zeros = Ids::new();
            for &o in &out_ids {
                let z = Ids::own(vec![kiln_core::literal(kiln_core::var_type(o), 0, n)]);
                zeros.push(kiln_core::make_opaque(z.ids()[0])?);
            }
            let none = Nodes(vec![0; out_ids.len()]);
            result = Some((out.clone(), zeros, none));
        }
        let (template, acc, acc_ads) = result.as_mut().expect("set above");
        let (first, _) = arrays(template);
        crate::control::check_outputs(what, &first, &out_ids, k)?;
        // lane i of the call takes element (its rank among the target's lanes) of the results
        let rank = crate::ops::select(&mask, 1u32, 0u32).prefix_sum(true);
        for j in 0..out_ids.len() {
            let (placed, placed_ad) = if kiln_core::freeze::size_of(out_ids[j]).is_one() {
                // one value for every lane of the target (a constant, a size-1 argument's
                // function): broadcast by the select
                kiln_core::inc_ref(out_ids[j]);
                graph::inc_ref(out_ads[j]);
                (out_ids[j], out_ads[j])
            } else {
                gather_entry(out_ids[j], out_ads[j], &rank, Some(&mask))?
            };
            let placed = (Ids::own(vec![placed]), Nodes(vec![placed_ad]));
            let old = (acc.ids()[j], acc_ads.0[j]);
            let (id, ad) = select_ids(&mask, (placed.0.ids()[0], placed.1 .0[0]), old)?;
            acc.replace(j, id);
            let prev = std::mem::replace(&mut acc_ads.0[j], ad);
            graph::dec_ref(prev);
        }
    }
    let Some((template, acc, acc_ads)) = result else {
        return Err(crate::control::no_target(what));
    };
    Ok(rebuild_with(&template, acc.ids(), &acc_ads.0))
}

/// `source[index]` (0 where `mask` does not hold) for an array of any type, its derivative
/// recorded when it is a float: new references to the result and its node.
fn gather_entry(
    source: VarId,
    ad: AdIndex,
    index: &crate::array::UInt32,
    mask: Option<&crate::array::Bool>,
) -> Result<(VarId, AdIndex)> {
    fn typed<T: Float>(
        source: VarId,
        ad: AdIndex,
        index: &crate::array::UInt32,
        mask: Option<&crate::array::Bool>,
    ) -> Result<(VarId, AdIndex)> {
        kiln_core::inc_ref(source);
        graph::inc_ref(ad);
        let src = Array::<T>::wrap(source).with_ad(ad);
        let out = match mask {
            Some(m) => crate::memory::try_gather_masked(&src, index, m)?,
            None => crate::memory::try_gather_masked(&src, index, true)?,
        };
        kiln_core::inc_ref(out.id());
        graph::inc_ref(out.ad);
        Ok((out.id(), out.ad))
    }
    match kiln_core::var_type(source) {
        VarType::F32 => typed::<f32>(source, ad, index, mask),
        VarType::F64 => typed::<f64>(source, ad, index, mask),
        _ => {
            let all = Ids::own(vec![kiln_core::literal(VarType::Bool, 1, 1)]);
            let m = mask.map_or(all.ids()[0], |m| m.id());
            Ok((kiln_core::gather(source, index.id(), m)?, 0))
        }
    }
}

/// `select(mask, a, b)` for one array of any type (derivatives recorded for floats): new
/// references to the result and its node.
fn select_ids(
    mask: &crate::array::Bool,
    a: (VarId, AdIndex),
    b: (VarId, AdIndex),
) -> Result<(VarId, AdIndex)> {
    Ok(match kiln_core::var_type(a.0) {
        VarType::F32 => select_entry::<f32>(mask, a, b),
        VarType::F64 => select_entry::<f64>(mask, a, b),
        _ => (kiln_core::op(Op::Select, &[mask.id(), a.0, b.0])?, 0),
    })
}

/// The tangent `t` as an owned id, or a zero of type `ty`.
fn entry(t: &Option<Grad>, ty: VarType) -> VarId {
    match t {
        Some(g) => into_id(g.clone()),
        None => kiln_core::literal(ty, 0, 1),
    }
}

// ---------------------------------------------------------------------------------------------
// Branches and calls

/// Whether a construct over `args` must go through the differentiating path: gradients are
/// recorded and some node is alive (an argument's, or one a body could capture). Otherwise no
/// array involved can carry a gradient, and the construct runs as it would without AD.
pub(crate) fn involved<A: Traverse>(_args: &A) -> bool {
    recording() && graph::any_alive()
}

/// `if_then_else` / `switch` / `dispatch` with derivatives. `run` runs the construct (in its
/// mode) with the given targets on the given arguments; each target here returns its results
/// followed by its Jacobian entries.
#[allow(clippy::type_complexity)]
pub(crate) fn call<A: Traverse + Clone, O: Traverse + Clone>(
    what: &str,
    args: &A,
    targets: &[Target<'_, A, O>],
    run: impl FnOnce(&A, &[Target<'_, A, Flat>]) -> Result<Flat>,
) -> Result<O> {
    let (ids, ads) = arrays(args);
    let wrt: Vec<usize> = (0..ids.len())
        .filter(|&k| ads[k] != 0 && differentiable(kiln_core::var_type(ids[k])))
        .collect();
    // the construct runs on detached arguments (a size-1 argument keeps its size: each lane's
    // entry is its share of that argument's gradient, summed by the node)
    let detached = rebuild_with(args, &ids, &vec![0; ids.len()]);
    // arrays with gradients that the targets capture are differentiated like arguments (only
    // looked for while the graph has nodes: otherwise nothing can carry a gradient)
    let captured = if graph::any_alive() {
        probe(targets, &detached, &wrt)?
    } else {
        Nodes(Vec::new())
    };
    let cap: Vec<(AdIndex, VarType, usize)> = graph::with(|g| {
        captured
            .0
            .iter()
            .map(|&c| (c, g.node(c).ty, g.node(c).size))
            .collect()
    });
    let columns = wrt.len() + cap.len();
    let template: RefCell<Option<O>> = RefCell::new(None);
    let failure: RefCell<Option<Error>> = RefCell::new(None);
    let seeds = |k: usize, leaves: &[AdIndex], ids: &[VarId]| -> Vec<(AdIndex, Grad)> {
        let one = |ty: VarType, n: Size| grad_of_owned(kiln_core::literal(ty, one_bits(ty), n));
        if k < wrt.len() {
            let id = ids[wrt[k]];
            let n = kiln_core::freeze::size_of(id);
            vec![(leaves[wrt[k]], one(kiln_core::var_type(id), n))]
        } else {
            let (c, ty, n) = cap[k - wrt.len()];
            vec![(c, one(ty, Size::fixed(n)))]
        }
    };
    let boxed: Vec<Option<Box<dyn Fn(&A) -> Flat + '_>>> = targets
        .iter()
        .map(|t| {
            t.map(|f| {
                let (template, failure, wrt, seeds) = (&template, &failure, &wrt, &seeds);
                let captured = &captured.0;
                Box::new(move |a: &A| -> Flat {
                    let mut g = |x: &A| f(x);
                    let d = differentiate(what, &mut g, a, wrt, captured, columns, seeds, failure);
                    let mut flat = Ids::new();
                    for &o in &d.out_ids {
                        kiln_core::inc_ref(o);
                        flat.push(o);
                    }
                    for (j, &o) in d.out_ids.iter().enumerate() {
                        let ty = kiln_core::var_type(o);
                        if differentiable(ty) {
                            for col in &d.tangents {
                                flat.push(entry(&col[j], ty));
                            }
                        }
                    }
                    if template.borrow().is_none() {
                        let plain = rebuild_with(&d.out, &d.out_ids, &vec![0; d.out_ids.len()]);
                        *template.borrow_mut() = Some(plain);
                    }
                    Flat(flat)
                }) as Box<dyn Fn(&A) -> Flat + '_>
            })
        })
        .collect();
    let refs: Vec<Target<'_, A, Flat>> = boxed.iter().map(|b| b.as_deref()).collect();
    let result = run(&detached, &refs);
    drop(refs);
    drop(boxed);
    if let Some(e) = failure.borrow_mut().take() {
        return Err(e);
    }
    let flat = result?;
    let template = template
        .borrow_mut()
        .take()
        .ok_or_else(|| Error::Ad(format!("{what}: no target ran")))?;
    let (out_ids, _) = arrays(&template);
    let m = out_ids.len();
    let mut parents: Vec<(AdIndex, VarType, usize)> = wrt
        .iter()
        .map(|&k| (ads[k], kiln_core::var_type(ids[k]), kiln_core::size(ids[k])))
        .collect();
    parents.extend_from_slice(&cap);
    let mut nodes = Nodes(vec![0; m]);
    let mut at = m;
    for j in 0..m {
        let o = flat.0.ids()[j];
        if differentiable(kiln_core::var_type(o)) {
            let ws = &flat.0.ids()[at..at + columns];
            at += columns;
            if columns > 0 {
                nodes.0[j] = node(what_name(what), o, &parents, ws);
            }
        }
    }
    Ok(rebuild_with(&template, &flat.0.ids()[..m], &nodes.0))
}

fn grad_of_owned(id: VarId) -> Grad {
    let g = grad_of(id);
    kiln_core::dec_ref(id);
    g
}

fn what_name(what: &str) -> &'static str {
    match what {
        "if_then_else" => "if_then_else",
        "switch" => "switch",
        _ => "while_loop",
    }
}

// ---------------------------------------------------------------------------------------------
// Loops

/// `Loop::run` with derivatives: the state's Jacobian with respect to its entries that carry a
/// gradient travels as extra state (each lane's own small matrix, updated by one forward pass per
/// column at each iteration), and the results' nodes multiply by it in either direction. Reverse
/// mode therefore needs no iteration's state: memory does not grow with the trip count, every lane
/// stops with its own count, and no bound on the iterations is asked for.
pub(crate) fn run_loop<S: Traverse + Clone + 'static>(
    lp: Loop<S>,
    mut cond: impl FnMut(&S) -> crate::array::Bool,
    mut body: impl FnMut(&S) -> S,
) -> Result<S> {
    let recorded = match lp.grad {
        LoopGrad::Auto => super::higher_order(),
        LoopGrad::Jacobian => false,
        LoopGrad::Recorded => true,
    };
    if recorded {
        return run_recorded(lp, cond, body);
    }
    let what = format!("loop {}", lp.label);
    let (ids, ads) = arrays(&lp.state);
    let wrt: Vec<usize> = (0..ids.len())
        .filter(|&k| ads[k] != 0 && differentiable(kiln_core::var_type(ids[k])))
        .collect();
    let n = lanes(&ids);
    let failure: RefCell<Option<Error>> = RefCell::new(None);
    // the rows of the Jacobian: every float entry (the body maps them all)
    let rows: Vec<usize> = (0..ids.len())
        .filter(|&k| differentiable(kiln_core::var_type(ids[k])))
        .collect();
    let mut inner = Ids::new();
    for (k, &id) in ids.iter().enumerate() {
        inner.push(if wrt.contains(&k) {
            widen(id, n)?
        } else {
            kiln_core::inc_ref(id);
            id
        });
    }
    let start = rebuild_with(&lp.state, inner.ids(), &vec![0; ids.len()]);
    drop(inner);
    // arrays with gradients the body captures (a weight it closes over) become columns too
    let caps = if n.is_zero() {
        Nodes(Vec::new())
    } else {
        captured_columns(&what, &mut body, &start, &rows, n)?
    };
    if (wrt.is_empty() && caps.0.is_empty()) || n.is_zero() {
        // nothing to differentiate, but a body that captures an array with a gradient in a
        // later iteration only would silently lose it
        drop(start);
        let r = lp.run_plain(cond, |s| {
            let next = body(s);
            if let Some(&a) = arrays(&next).1.iter().find(|&&a| a != 0) {
                let (size, ty) = graph::with(|g| (g.node(a).size, g.node(a).ty));
                note(&failure, captured(&what, size, ty));
            }
            next
        });
        if let Some(e) = failure.borrow_mut().take() {
            return Err(e);
        }
        return r;
    }
    // J = identity: ∂state_r/∂state_c; 0 for the captured columns
    let mut jac = Ids::new();
    for &r in &rows {
        let ty = kiln_core::var_type(ids[r]);
        for &c in &wrt {
            jac.push(kiln_core::literal(
                ty,
                if r == c { one_bits(ty) } else { 0 },
                n,
            ));
        }
        for _ in &caps.0 {
            jac.push(kiln_core::literal(ty, 0, n));
        }
    }
    let cols = wrt.len() + caps.0.len();
    let inner_loop = Loop {
        state: (start, Flat(jac)),
        label: lp.label,
        max_iterations: lp.max_iterations,
        mode: lp.mode,
        compress: lp.compress,
        grad: LoopGrad::Jacobian,
        optimize: lp.optimize,
    };
    let (rows_r, wrt_r, what_r, failure_r, cap_r) = (&rows, &wrt, &what, &failure, &caps);
    let result = inner_loop.run_plain(
        |(s, _)| cond(s),
        |(s, j): &(S, Flat)| {
            // column c's seed at row r's leaf: J[r][c]; a captured column's also at its array
            let seeds = |c: usize, leaves: &[AdIndex], _: &[VarId]| {
                let mut seeds: Vec<(AdIndex, Grad)> = rows_r
                    .iter()
                    .enumerate()
                    .map(|(ri, &r)| (leaves[r], grad_of(j.0.ids()[ri * cols + c])))
                    .collect();
                if let Some(&a) = c.checked_sub(wrt_r.len()).and_then(|k| cap_r.0.get(k)) {
                    let (ty, size) = graph::with(|g| (g.node(a).ty, g.node(a).size));
                    seeds.push((a, Grad::own(kiln_core::literal(ty, one_bits(ty), size), 0)));
                }
                seeds
            };
            let d = differentiate(
                what_r, &mut body, s, rows_r, &cap_r.0, cols, &seeds, failure_r,
            );
            let mut next_j = Ids::new();
            for &r in rows_r.iter() {
                let ty = kiln_core::var_type(ids[r]);
                for col in d.tangents.iter().take(cols) {
                    next_j.push(entry(col.get(r).unwrap_or(&None), ty));
                }
            }
            let plain = rebuild_with(&d.out, &d.out_ids, &vec![0; d.out_ids.len()]);
            (plain, Flat(next_j))
        },
    );
    if let Some(e) = failure.borrow_mut().take() {
        return Err(e);
    }
    let (state, jac) = result?;
    let (out_ids, _) = arrays(&state);
    let mut parents: Vec<(AdIndex, VarType, usize)> = wrt
        .iter()
        .map(|&k| (ads[k], kiln_core::var_type(ids[k]), kiln_core::size(ids[k])))
        .collect();
    parents.extend(
        caps.0
            .iter()
            .map(|&a| graph::with(|g| (a, g.node(a).ty, g.node(a).size))),
    );
    let mut nodes = Nodes(vec![0; out_ids.len()]);
    for (ri, &r) in rows.iter().enumerate() {
        let ws = &jac.0.ids()[ri * cols..(ri + 1) * cols];
        nodes.0[r] = node("while_loop", out_ids[r], &parents, ws);
    }
    Ok(rebuild_with(&state, &out_ids, &nodes.0))
}

/// The arrays with gradients that a loop body uses without taking them through the state (found
/// by one trace of the body on `state`, thrown away): each becomes a column of the carried
/// Jacobian, seeded at the array itself. One of another size than the loop's lanes (or one)
/// cannot be carried per lane: an error naming the fix.
fn captured_columns<S: Traverse + Clone>(
    what: &str,
    body: &mut impl FnMut(&S) -> S,
    state: &S,
    rows: &[usize],
    n: Size,
) -> Result<Nodes> {
    let mut found = Nodes(Vec::new());
    let trace = crate::control::Trace::enter()?;
    captured_by(|s: &S| body(s), state, rows, &mut found);
    drop(trace);
    for &a in &found.0 {
        let (size, ty) = graph::with(|g| (g.node(a).size, g.node(a).ty));
        if !differentiable(ty) || (size != 1 && Size::fixed(size) != n) {
            return Err(captured(what, size, ty));
        }
    }
    Ok(found)
}

/// Whether a loop with `body` can carry its Jacobian (the default first-order mode) from `state`
/// over `n` lanes: every array with a gradient it captures has one element or one per lane
/// ([`captured_columns`]) and it does not mix lanes ([`mixes_lanes`]), each found by a trace on
/// leaves thrown away. (Callers with another way to differentiate the loop ask first.)
pub(crate) fn carries_jacobian<S: Traverse + Clone>(
    body: &mut impl FnMut(&S) -> S,
    state: &S,
    n: Size,
) -> bool {
    let (ids, _) = arrays(state);
    let rows: Vec<usize> = (0..ids.len())
        .filter(|&k| differentiable(kiln_core::var_type(ids[k])))
        .collect();
    captured_columns("loop", body, state, &rows, n).is_ok() && !mixes_lanes(body, state)
}

/// [`LoopGrad::Recorded`]: the loop driven from the host, one evaluated iteration at a time,
/// with each lane's new state `select(active, body(state), state)` recorded like any code, so
/// that derivatives of any order go through it. Lanes that finished still run the body: on their
/// state detached when the body is lane-local (their results are discarded), with their nodes
/// when it mixes lanes (their values feed the running lanes); see [`recorded_step`].
pub(crate) fn run_recorded<S: Traverse + Clone + 'static>(
    lp: Loop<S>,
    mut cond: impl FnMut(&S) -> crate::array::Bool,
    mut body: impl FnMut(&S) -> S,
) -> Result<S> {
    let (ids, _) = arrays(&lp.state);
    if ids.is_empty() || lanes(&ids).is_zero() {
        // (no lanes: the plain loop returns the state or says what is wrong with it)
        return lp.run_plain(cond, body);
    }
    let detach_finished = !mixes_lanes(&mut body, &lp.state);
    let mut s = lp.state;
    let mut iterations = 0u64;
    loop {
        let active = cond(&s);
        if !active.any() {
            return Ok(s);
        }
        if lp.max_iterations > 0 && iterations == lp.max_iterations {
            return Err(Error::LoopTruncated {
                labels: lp.label,
                lanes: active.count(),
            });
        }
        s = recorded_step(&active, &mut body, &s, detach_finished)?;
        iterations += 1;
    }
}

/// One iteration of a recorded loop for the lanes of `active`: `select(active, body(state),
/// state)`, evaluated, with derivatives recorded. Lanes that finished run the body too; with
/// `detach_finished` (a lane-local body: their results are discarded and reach no other lane),
/// on their state without its node, so that the derivatives there (NaN where the body is
/// undefined, `sqrt` of a negative) stay off the graph — the select would pass them zeros, and
/// 0·NaN is NaN. A body that mixes lanes reads the finished lanes' values into the running ones,
/// so they keep their nodes. Entries of one element are shared by every lane: they go in as they
/// are (a select would widen them).
pub(crate) fn recorded_step<S: Traverse + Clone>(
    active: &crate::array::Bool,
    body: &mut impl FnMut(&S) -> S,
    s: &S,
    detach_finished: bool,
) -> Result<S> {
    let next = if detach_finished {
        let (ids, ads) = arrays(s);
        let off_ads: Vec<AdIndex> = ids
            .iter()
            .zip(&ads)
            .map(|(&id, &ad)| if kiln_core::size(id) == 1 { ad } else { 0 })
            .collect();
        let off = rebuild_with(s, &ids, &off_ads);
        body(&select_state(active, s, &off)?)
    } else {
        body(s)
    };
    let s = select_state(active, &next, s)?;
    kiln_core::eval(&arrays(&s).0)?;
    Ok(s)
}

/// Whether `body` combines values of different lanes: traced once on leaves (in a symbolic trace
/// thrown away), some node between its result and the leaves is not lane-local.
pub(crate) fn mixes_lanes<S: Traverse + Clone>(body: &mut impl FnMut(&S) -> S, state: &S) -> bool {
    let Ok(trace) = crate::control::Trace::enter() else {
        return true;
    };
    let (ids, _) = arrays(state);
    let rows: Vec<usize> = (0..ids.len())
        .filter(|&k| differentiable(kiln_core::var_type(ids[k])))
        .collect();
    let _rec = RecordingGuard::set(true);
    let (start, _, leaves, out) = on_leaves(state, &rows, |s| body(s));
    let (_, out_ads) = arrays(&out);
    let mixes = graph::with(|g| {
        let mut seen = HashSet::new();
        let mut stack: Vec<AdIndex> = out_ads.iter().copied().filter(|&a| a != 0).collect();
        while let Some(i) = stack.pop() {
            if !seen.insert(i) || leaves.0.contains(&i) {
                continue;
            }
            let n = g.node(i);
            if n.seq < start {
                continue;
            }
            if n.rule.as_ref().is_some_and(|r| !r.lane_local()) {
                return true;
            }
            stack.extend(n.parents.iter().copied());
        }
        false
    });
    drop((out, leaves));
    drop(trace);
    mixes
}

/// `select(mask, a, b)` for every array of two states of one structure (derivatives recorded).
pub(crate) fn select_state<S: Traverse + Clone>(
    mask: &crate::array::Bool,
    a: &S,
    b: &S,
) -> Result<S> {
    let (a_ids, a_ads) = arrays(a);
    let (b_ids, b_ads) = arrays(b);
    if a_ids.len() != b_ids.len() {
        return Err(Error::ControlFlow(format!(
            "loop body returned {} array(s) for a state of {}; return the state's structure",
            a_ids.len(),
            b_ids.len()
        )));
    }
    let mut ids = Ids::new();
    let mut ads = Nodes(Vec::new());
    for k in 0..a_ids.len() {
        let (x, y) = ((a_ids[k], a_ads[k]), (b_ids[k], b_ads[k]));
        if x == y {
            // an entry the body left as it was: nothing new to store
            kiln_core::inc_ref(x.0);
            graph::inc_ref(x.1);
            ids.push(x.0);
            ads.0.push(x.1);
            continue;
        }
        let (id, ad) = select_ids(mask, x, y)?;
        ids.push(id);
        ads.0.push(ad);
    }
    Ok(rebuild_with(b, ids.ids(), &ads.0))
}

/// One float entry of [`select_state`]: a new reference to the result and to its node.
fn select_entry<T: Float>(
    mask: &crate::array::Bool,
    a: (VarId, AdIndex),
    b: (VarId, AdIndex),
) -> (VarId, AdIndex) {
    let array = |(id, ad): (VarId, AdIndex)| {
        kiln_core::inc_ref(id);
        graph::inc_ref(ad);
        Array::<T>::wrap(id).with_ad(ad)
    };
    let out = crate::ops::select(mask, array(a), array(b));
    kiln_core::inc_ref(out.id());
    graph::inc_ref(out.ad);
    (out.id(), out.ad)
}

#[cfg(test)]
mod tests {
    use super::super::propagate::{self, Backward};
    use crate::prelude::*;

    /// A gradient recorded through a branch (`create_graph`) refuses to be differentiated again,
    /// in either mode, instead of dropping the derivative of the Jacobian entries.
    #[test]
    fn second_order_through_a_branch_is_refused() {
        {
            let mut x = Float64::from_slice(&[0.2, 0.9]);
            x.enable_grad();
            let y = crate::if_then_else(
                &x.detach().lt(0.5),
                |x: &Float64| x * x * x,
                |x: &Float64| x.sin(),
                &x,
            )
            .unwrap();
            let seed = super::Grad::of(Float64::ones(2));
            let how = Backward {
                retain_graph: true,
                create_graph: true,
            };
            let gs = propagate::backward(vec![(y.ad, seed)], how, &[x.ad]).unwrap();
            let g = gs.get(&x.ad).expect("a gradient for x").array::<f64>();
            // first order is right
            let want = [3.0 * 0.04, 0.9f64.cos()];
            for (a, b) in g.to_vec().iter().zip(want) {
                assert!((a - b).abs() < 1e-12, "{a} vs {b}");
            }
            // second order is refused both ways
            assert!(g.grad_enabled());
            let e = g.sum().try_backward().unwrap_err();
            assert!(e.to_string().contains("second-order"), "{e}");
            let e = crate::ad::forward(&x).unwrap_err();
            assert!(e.to_string().contains("second-order"), "{e}");
        }
    }
}
