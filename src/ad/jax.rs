//! JAX's face of AD over any [`Traverse`] value, and gradient-aware traversal.
//!
//! This module owns the functions that take a whole value (an array, a `Vector`, a `Tensor`, a
//! tuple, a `Vec`, a `#[derive(Traverse)]` struct) rather than one array: `kiln::grad`,
//! `value_and_grad`, `vjp`, `jvp` and `hvp`, and the set-wide helpers `enable_grad`, `grads`,
//! `detach` and `clear_grads`. They list a value's arrays with their AD nodes through the same
//! traversal a frozen function uses (so every type a frozen function accepts works here) and
//! rebuild a value of the same type from (array, node) pairs.
//!
//! The transformations give their arguments fresh private leaves: the caller's arrays are never
//! marked, gradients are returned instead of stored, and a pass started inside stops at every
//! node that existed before the call (arrays the function captures are constants: they get no
//! gradient and their graphs are left as they were).

use super::graph::{self, AdIndex};
use super::propagate::{self, Backward};
use super::rules::Custom;
use super::value::Grad;
use super::{RecordingGuard, ISOLATE, STASH};
use crate::array::Array;
use crate::freeze::traverse::{Assign, Found, Traversal, Traverse};
use crate::types::Float;
use kiln_core::{Error, Result, VarId, VarType};
use std::collections::HashMap;
use std::sync::Arc;

// ---------------------------------------------------------------------------------------------
// Listing and rebuilding values

/// One array position of a traversed value.
pub(crate) struct Item {
    pub id: VarId,
    pub ad: AdIndex,
    pub ty: VarType,
}

/// The arrays of `v` in traversal order, with their AD nodes and element types (borrowed: valid
/// while `v` is).
pub(crate) fn items<V: Traverse + ?Sized>(v: &V) -> Vec<Item> {
    let mut t = Traversal::new();
    v.traverse(&mut t);
    t.found
        .iter()
        .map(|f: &Found| Item {
            id: f.id,
            ad: f.ad,
            ty: kiln_core::var_type(f.id),
        })
        .collect()
}

/// The path of each array position of `v` (`.weights`, `[2]`, …), for messages.
pub(crate) fn paths<V: Traverse + ?Sized>(v: &V) -> Vec<String> {
    let mut t = Traversal::with_paths();
    v.traverse(&mut t);
    t.paths
}

/// A name for position `i` of a value in messages.
fn position_name(paths: &[String], i: usize, id: VarId) -> String {
    match paths.get(i).filter(|p| !p.is_empty()) {
        Some(p) => format!("`{p}` ({})", kiln_core::describe(id)),
        None => kiln_core::describe(id),
    }
}

/// A copy of `template` whose arrays are `parts`, in traversal order (each with its AD node).
fn rebuild<V: Traverse + Clone>(template: &V, parts: &[Grad]) -> V {
    let mut out = template.clone();
    assign_parts(&mut out, parts);
    out
}

/// Replace the arrays of `v` by `parts`, in traversal order.
pub(crate) fn assign_parts<V: Traverse + ?Sized>(v: &mut V, parts: &[Grad]) {
    let pairs = pairs(parts);
    let mut a = Assign::with_ad(&pairs);
    v.traverse_mut(&mut a);
    assert_eq!(
        a.used(),
        pairs.len(),
        "kiln: a Traverse implementation visits a different number of arrays in `traverse` and `traverse_mut`"
    );
}

/// Zeros of the type and size of `id` (the size follows a frozen function's inputs).
fn zeros_like(id: VarId) -> Grad {
    let ty = kiln_core::var_type(id);
    Grad::own(kiln_core::literal(ty, 0, kiln_core::freeze::size_of(id)), 0)
}

/// `g` (a float gradient or tangent, possibly one lane standing for all) widened to the size
/// of `like`.
pub(crate) fn widen(g: Grad, like: VarId) -> Grad {
    let n = kiln_core::freeze::size_of(like);
    if kiln_core::freeze::size_of(g.id()).is_one() && !n.is_one() {
        match g.ty() {
            VarType::F32 => Grad::of(g.array::<f32>() + Array::<f32>::zeros(n)),
            _ => Grad::of(g.array::<f64>() + Array::<f64>::zeros(n)),
        }
    } else {
        g
    }
}

/// A new leaf node for an array like `id`, keeping the gradients passes bring it.
pub(crate) fn new_leaf(id: VarId) -> AdIndex {
    let ad = graph::new_node(
        kiln_core::var_type(id),
        kiln_core::size(id),
        Vec::new(),
        None,
    );
    graph::with(|g| g.node_mut(ad).keeps_grad = true);
    ad
}

/// Whether a transformation called now must give differentiable results: gradients are
/// recorded, and an argument carries a node (`tracked`) or the call is inside another
/// transformation (whose argument the function may capture).
fn nested_call(tracked: bool) -> bool {
    super::recording() && (tracked || ISOLATE.with(|s| !s.borrow().is_empty()))
}

/// A leaf for an array like `id` whose node is `parent`: an identity node (gradients pass
/// through it to `parent`) that keeps the gradients passes bring it.
fn linked_leaf(id: VarId, parent: AdIndex) -> AdIndex {
    let rule = Custom {
        name: "kiln::grad argument",
        backward: Box::new(|ct: &Grad| vec![Some(ct.clone())]),
        forward: Box::new(|t: &[Option<Grad>]| t[0].clone()),
    };
    let ad = graph::new_node(
        kiln_core::var_type(id),
        kiln_core::size(id),
        vec![parent],
        Some(Arc::new(rule)),
    );
    graph::with(|g| g.node_mut(ad).keeps_grad = true);
    ad
}

/// A node's gradient, detached and widened to the size of `like` (zeros when it has none).
pub(crate) fn gradient_of(ad: AdIndex, like: VarId, take: bool) -> Grad {
    let g = if ad == 0 {
        None
    } else if take {
        graph::with(|g| g.node_mut(ad).grad.take())
    } else {
        graph::with(|g| g.node(ad).grad.clone())
    };
    match g {
        Some(g) => widen(g.detached(), like),
        None => zeros_like(like),
    }
}

/// Backward passes inside stop at nodes older than `seq`; what reaches them is dropped when the
/// scope ends (the caller's graph neither gets gradients nor is consumed). Recording is on.
struct Boundary {
    _rec: RecordingGuard,
}

impl Boundary {
    fn at(seq: u64) -> Boundary {
        ISOLATE.with(|s| s.borrow_mut().push(seq));
        STASH.with(|s| s.borrow_mut().push(Vec::new()));
        Boundary {
            _rec: RecordingGuard::set(true),
        }
    }
    fn now() -> Boundary {
        Boundary::at(graph::with(|g| g.next_seq()))
    }
}

impl Drop for Boundary {
    fn drop(&mut self) {
        ISOLATE.with(|s| s.borrow_mut().pop());
        let held = STASH.with(|s| s.borrow_mut().pop()).unwrap_or_default();
        // the stash retained each node it names
        for (ad, ct, _) in held {
            drop(ct);
            graph::dec_ref(ad);
        }
    }
}

/// `args` with a fresh private leaf on every float array.
struct Leaves<A> {
    value: A,
    /// Per position: the leaf node (0 for a non-float array); the handles below own them.
    leaves: Vec<AdIndex>,
    /// Per position: the array with its leaf (keeps the leaves alive).
    parts: Vec<Grad>,
}

impl<A: Traverse + Clone> Leaves<A> {
    /// `args` with fresh leaves; with `link`, a leaf for an array that carries a gradient is a child
    /// of its node (an identity), so that a differentiated result computed from the leaves
    /// (a nested `kiln::grad`) leads back to the caller's graph.
    fn with_links(args: &A, link: bool) -> Leaves<A> {
        let mut leaves = Vec::new();
        let mut parts = Vec::new();
        for it in items(args) {
            let ad = if !it.ty.is_float() {
                0
            } else if link && it.ad != 0 {
                linked_leaf(it.id, it.ad)
            } else {
                new_leaf(it.id)
            };
            kiln_core::inc_ref(it.id);
            parts.push(Grad::own(it.id, ad));
            leaves.push(ad);
        }
        let value = rebuild(args, &parts);
        Leaves {
            value,
            leaves,
            parts,
        }
    }
    /// The gradient each leaf received (taken out of it), as a value shaped like the arguments.
    fn take_grads(&self, template: &A) -> A {
        let grads: Vec<Grad> = self
            .leaves
            .iter()
            .zip(&self.parts)
            .map(|(&ad, p)| gradient_of(ad, p.id(), true))
            .collect();
        rebuild(template, &grads)
    }
}

/// Error unless `out` is a single float value (what `grad` and `hvp` differentiate).
fn check_scalar<T: Float>(what: &str, out: &Array<T>) -> Result<()> {
    let n = out.size();
    if !n.is_one() {
        return Err(Error::Ad(format!(
            "kiln::{what}: the function returned {}, which has {n} elements, not one; return a scalar (e.g. `.sum()` of it), or use `kiln::vjp` with a cotangent of its size",
            kiln_core::describe(out.id())
        )));
    }
    Ok(())
}

/// Error unless `b` has the structure of `a`, float positions of the same type and of size 1 or
/// the size of the array at the same position (`what` names the role of `b` in messages).
pub(crate) fn check_like<V: Traverse + ?Sized>(
    fname: &str,
    what: &str,
    a: &[Item],
    b: &V,
) -> Result<()> {
    let bi = items(b);
    if bi.len() != a.len() {
        return Err(Error::Ad(format!(
            "kiln::{fname}: the {what} hold {} arrays but the value they go with holds {}; give one per array, in a value of the same structure",
            bi.len(),
            a.len()
        )));
    }
    let names = paths(b);
    for (i, (x, y)) in a.iter().zip(&bi).enumerate() {
        if !x.ty.is_float() {
            continue;
        }
        if x.ty != y.ty {
            return Err(Error::Ad(format!(
                "kiln::{fname}: the {what} at {} are {} values but the array they go with holds {}",
                position_name(&names, i, y.id),
                y.ty,
                x.ty
            )));
        }
        let (n, m) = (
            kiln_core::freeze::size_of(y.id),
            kiln_core::freeze::size_of(x.id),
        );
        if !n.is_one() && !n.same_as(m) {
            return Err(Error::Ad(format!(
                "kiln::{fname}: the {what} at {} have {n} elements but the array they go with has {m}; give one value or one per element",
                position_name(&names, i, y.id)
            )));
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Set-wide helpers

/// Make every array of `v` a leaf of the AD graph (as [`Array::enable_grad`] does for one):
/// parameter sets, tuples, `Vector`s, `Tensor`s. Every array must be a float array: an error
/// names the first integer or mask array (leave such fields out with `#[traverse(skip)]`, or
/// pass only the float part). Nothing changes on error.
///
/// ```
/// use kiln::prelude::*;
/// let mut p = (Float32::ones(3), Float64::from(2.0));
/// kiln::ad::enable_grad(&mut p).unwrap();
/// assert!(p.0.grad_enabled() && p.1.grad_enabled());
/// let mut bad = (Float32::ones(3), UInt32::arange(3));
/// let e = kiln::ad::enable_grad(&mut bad).unwrap_err();
/// assert!(e.to_string().contains("[1]"));
/// ```
pub fn enable_grad<V: Traverse + ?Sized>(v: &mut V) -> Result<()> {
    let its = items(v);
    if let Some(i) = its.iter().position(|it| !it.ty.is_float()) {
        let names = paths(v);
        return Err(Error::Ad(format!(
            "enable_grad: {} holds {} values; only f32 and f64 arrays carry gradients (leave it out with `#[traverse(skip)]`, or enable the float arrays only)",
            position_name(&names, i, its[i].id),
            its[i].ty
        )));
    }
    let parts: Vec<Grad> = its
        .iter()
        .map(|it| {
            if it.ad == 0 {
                kiln_core::inc_ref(it.id);
                Grad::own(it.id, new_leaf(it.id))
            } else {
                graph::with(|g| g.node_mut(it.ad).keeps_grad = true);
                Grad::share(it.id, it.ad)
            }
        })
        .collect();
    assign_parts(v, &parts);
    Ok(())
}

/// The gradient of every array of `v`, as a value of the same type: what backward passes
/// stored in each (zeros for an array that carries no gradient or got none, and for integer and
/// mask arrays). Lazy arrays, like [`Array::grad`].
///
/// ```
/// use kiln::prelude::*;
/// let mut p = (Float64::from_slice(&[1.0, 2.0]), Float64::from(3.0));
/// kiln::ad::enable_grad(&mut p).unwrap();
/// ((&p.0 * &p.1).sum()).backward();
/// let g = kiln::ad::grads(&p);
/// assert_eq!(g.0.to_vec(), vec![3.0, 3.0]);
/// assert_eq!(g.1.to_vec(), vec![3.0]);
/// ```
pub fn grads<V: Traverse + Clone>(v: &V) -> V {
    let parts: Vec<Grad> = items(v)
        .iter()
        .map(|it| gradient_of(it.ad, it.id, false))
        .collect();
    rebuild(v, &parts)
}

/// The same values with every array detached from the AD graph.
///
/// ```
/// use kiln::prelude::*;
/// let mut p = (Float32::ones(2), Float32::ones(1));
/// kiln::ad::enable_grad(&mut p).unwrap();
/// let d = kiln::ad::detach(&p);
/// assert!(!d.0.grad_enabled() && !d.1.grad_enabled());
/// ```
pub fn detach<V: Traverse + Clone>(v: &V) -> V {
    let parts: Vec<Grad> = items(v).iter().map(|it| Grad::share(it.id, 0)).collect();
    rebuild(v, &parts)
}

/// Forget the gradient of every array of `v` (PyTorch's `zero_grad`).
///
/// ```
/// use kiln::prelude::*;
/// let mut p = (Float32::ones(2),);
/// kiln::ad::enable_grad(&mut p).unwrap();
/// p.0.sum().backward();
/// kiln::ad::clear_grads(&p);
/// assert_eq!(p.0.grad().to_vec(), vec![0.0, 0.0]);
/// ```
pub fn clear_grads<V: Traverse + ?Sized>(v: &V) {
    for it in items(v) {
        if it.ad != 0 {
            let prev = graph::with(|g| g.node_mut(it.ad).grad.take());
            drop(prev);
        }
    }
}

/// Detach every array of `v` in place.
pub(crate) fn detach_in_place<V: Traverse + ?Sized>(v: &mut V) {
    let parts: Vec<Grad> = items(v).iter().map(|it| Grad::share(it.id, 0)).collect();
    assign_parts(v, &parts);
}

/// The arrays `found` (a traversal's positions), each with a fresh leaf where `mask` is set and
/// it is a float array, detached elsewhere: what `Assign::with_ad` hands back into a value.
pub(crate) fn leaf_parts(found: &[Found], mask: &[bool]) -> Vec<Grad> {
    found
        .iter()
        .enumerate()
        .map(|(i, f)| {
            kiln_core::inc_ref(f.id);
            let on = mask.get(i).copied().unwrap_or(false) && kiln_core::var_type(f.id).is_float();
            Grad::own(f.id, if on { new_leaf(f.id) } else { 0 })
        })
        .collect()
}

/// The (array, node) pairs of `parts`, for `Assign::with_ad`.
pub(crate) fn pairs(parts: &[Grad]) -> Vec<(VarId, AdIndex)> {
    parts.iter().map(|g| (g.id(), g.ad())).collect()
}

/// Run `f` behind an AD boundary (see [`Boundary`]): a frozen function's body, whose
/// backward passes must not reach into the caller's graph (replays would not repeat that).
pub(crate) fn bounded<R>(f: impl FnOnce() -> R) -> R {
    let _b = Boundary::now();
    f()
}

/// [`bounded`], keeping whether derivatives are recorded as it is (for kiln's own loops, whose
/// frozen steps run a forward under `suspend_grad` when a gradient scan follows).
pub(crate) fn bounded_as_is<R>(f: impl FnOnce() -> R) -> R {
    let on = super::recording();
    let _b = Boundary::now();
    let _rec = RecordingGuard::set(on);
    f()
}

// ---------------------------------------------------------------------------------------------
// Transformations

/// The gradient of the scalar function `f` at `args`, shaped like `args` (JAX's `grad`).
///
/// `args` is any [`Traverse`] value; `f` gets a copy whose float arrays are fresh leaves (the
/// caller's arrays are not marked) and returns a single `f32`/`f64` value. The gradient of an
/// array `f` does not depend on is zeros, as in JAX; integer and mask arrays get zeros too.
/// Arrays that `f` captures are constants. Errors: `f` returned more than one element (its size
/// is named), or the pass failed (a construct with no reverse rule). Called inside a function
/// that is itself being differentiated, the gradient is differentiable too, so `grad` of
/// `grad` gives second derivatives.
///
/// ```
/// use kiln::prelude::*;
/// let x = Float64::from_slice(&[1.0, 2.0]);
/// let w = Float64::from(3.0);
/// let (gx, gw) = kiln::grad(|(x, w): &(Float64, Float64)| (x * x * w).sum(), &(x, w)).unwrap();
/// assert_eq!(gx.to_vec(), vec![6.0, 12.0]);
/// assert_eq!(gw.to_vec(), vec![5.0]);
/// ```
pub fn grad<A, T, F>(f: F, args: &A) -> Result<A>
where
    A: Traverse + Clone,
    T: Float,
    F: FnOnce(&A) -> Array<T>,
{
    value_and_grad(f, args).map(|(_, g)| g)
}

/// The value of the scalar function `f` at `args` (detached) and its gradient (see [`grad`]).
///
/// ```
/// use kiln::prelude::*;
/// let (v, g) = kiln::value_and_grad(|x: &Float32| (x * x).sum(), &Float32::from_slice(&[3.0])).unwrap();
/// assert_eq!((v.item(), g.item()), (9.0, 6.0));
/// ```
pub fn value_and_grad<A, T, F>(f: F, args: &A) -> Result<(Array<T>, A)>
where
    A: Traverse + Clone,
    T: Float,
    F: FnOnce(&A) -> Array<T>,
{
    // inside a function being differentiated (a nested `kiln::grad`, recording on and an
    // argument with a node), the gradient must itself be differentiable: the leaves link to
    // the caller's nodes and the pass records itself (`create_graph`)
    let nested = nested_call(items(args).iter().any(|it| it.ad != 0));
    let _b = Boundary::now();
    let leaves = Leaves::with_links(args, nested);
    let out = {
        let _h = super::HigherOrder::enter(nested);
        f(&leaves.value)
    };
    check_scalar("grad", &out)?;
    if nested {
        let want: Vec<AdIndex> = leaves.leaves.iter().copied().filter(|&a| a != 0).collect();
        let mut g = HashMap::new();
        if out.ad != 0 {
            let seed = Grad::of(Array::<T>::ones(1));
            let how = Backward {
                retain_graph: true,
                create_graph: true,
            };
            g = propagate::backward(vec![(out.ad, seed)], how, &want)?;
        }
        let parts: Vec<Grad> = leaves
            .leaves
            .iter()
            .zip(&leaves.parts)
            .map(|(ad, p)| match g.remove(ad) {
                Some(gr) if *ad != 0 => widen(gr, p.id()),
                _ => zeros_like(p.id()),
            })
            .collect();
        return Ok((out, rebuild(&detach(args), &parts)));
    }
    if out.ad != 0 {
        let seed = Grad::of(Array::<T>::ones(1));
        propagate::backward(vec![(out.ad, seed)], Backward::default(), &[])?;
    }
    let g = leaves.take_grads(&detach(args));
    Ok((out.detach(), g))
}

/// The value of `f` at `args` (detached) and its pullback (JAX's `vjp`): `pullback(&ct)` is the
/// vector-Jacobian product of the cotangent `ct` (a value shaped like the output, each array of
/// size 1 or of its output array's size), shaped like `args`.
///
/// The pullback may be called any number of times; the graph it needs lives exactly as long as
/// it does. Output arrays that do not depend on `args` (or are not float) contribute nothing;
/// the cotangent must still have an array at their positions. Errors from the pullback: a
/// cotangent of another structure, type or size (named), or a failed pass.
///
/// ```
/// use kiln::prelude::*;
/// let x = Float64::from_slice(&[1.0, 2.0]);
/// let (y, pullback) = kiln::vjp(|x: &Float64| (x * x, x.sum()), &x).unwrap();
/// assert_eq!(y.0.to_vec(), vec![1.0, 4.0]);
/// let g = pullback(&(Float64::from_slice(&[1.0, 0.0]), Float64::from(1.0))).unwrap();
/// assert_eq!(g.to_vec(), vec![3.0, 1.0]);
/// let g2 = pullback(&(Float64::zeros(2), Float64::from(2.0))).unwrap(); // again
/// assert_eq!(g2.to_vec(), vec![2.0, 2.0]);
/// ```
#[allow(clippy::type_complexity)]
pub fn vjp<A, O, F>(f: F, args: &A) -> Result<(O, impl Fn(&O) -> Result<A>)>
where
    A: Traverse + Clone,
    O: Traverse + Clone,
    F: FnOnce(&A) -> O,
{
    // inside a function being differentiated (as in `kiln::grad`): a differentiable pullback
    let nested = nested_call(items(args).iter().any(|it| it.ad != 0));
    let start = graph::with(|g| g.next_seq());
    let (leaves, out) = {
        let _b = Boundary::at(start);
        let leaves = Leaves::with_links(args, nested);
        let _h = super::HigherOrder::enter(nested);
        let out = f(&leaves.value);
        (leaves, out)
    };
    // the pullback owns the outputs' nodes (hence the graph) and the leaves
    let outs: Vec<Grad> = items(&out)
        .iter()
        .map(|it| Grad::share(it.id, it.ad))
        .collect();
    let value = if nested { out.clone() } else { detach(&out) };
    let template = detach(args);
    let Leaves { leaves, parts, .. } = leaves;
    let pullback = move |ct: &O| -> Result<A> {
        let out_items: Vec<Item> = outs
            .iter()
            .map(|g| Item {
                id: g.id(),
                ad: g.ad(),
                ty: g.ty(),
            })
            .collect();
        check_like("vjp", "cotangents", &out_items, ct)?;
        let mut seeds = Vec::new();
        // recorded when the pullback runs where gradients are recorded (a nested call)
        let record = nested && super::recording();
        for (o, c) in out_items.iter().zip(items(ct)) {
            if o.ty.is_float() && o.ad != 0 {
                let c_ad = if record { c.ad } else { 0 };
                seeds.push((o.ad, widen(Grad::share(c.id, c_ad), o.id)));
            }
        }
        if record {
            let want: Vec<AdIndex> = leaves.iter().copied().filter(|&a| a != 0).collect();
            let mut g = {
                let _b = Boundary::at(start);
                let how = Backward {
                    retain_graph: true,
                    create_graph: true,
                };
                propagate::backward(seeds, how, &want)?
            };
            let grads: Vec<Grad> = leaves
                .iter()
                .zip(&parts)
                .map(|(ad, p)| match g.remove(ad) {
                    Some(gr) if *ad != 0 => widen(gr, p.id()),
                    _ => zeros_like(p.id()),
                })
                .collect();
            return Ok(rebuild(&template, &grads));
        }
        for &ad in &leaves {
            if ad != 0 {
                let prev = graph::with(|g| g.node_mut(ad).grad.take());
                drop(prev);
            }
        }
        {
            let _b = Boundary::at(start);
            let how = Backward {
                retain_graph: true,
                create_graph: false,
            };
            propagate::backward(seeds, how, &[])?;
        }
        let grads: Vec<Grad> = leaves
            .iter()
            .zip(&parts)
            .map(|(&ad, p)| gradient_of(ad, p.id(), true))
            .collect();
        Ok(rebuild(&template, &grads))
    };
    Ok((value, pullback))
}

/// The value of `f` at `primals` and its directional derivative along `tangents` (JAX's `jvp`):
/// both shaped like the output, detached. `tangents` is shaped like `primals` (each float array
/// of size 1 or its primal's size; what stands at integer and mask positions is ignored). An
/// output that does not depend on `primals` gets a zero tangent.
///
/// ```
/// use kiln::prelude::*;
/// let x = Float64::from_slice(&[1.0, 2.0]);
/// let (y, dy) = kiln::jvp(|x: &Float64| x * x, &x, &Float64::from_slice(&[1.0, 0.5])).unwrap();
/// assert_eq!(y.to_vec(), vec![1.0, 4.0]);
/// assert_eq!(dy.to_vec(), vec![2.0, 2.0]);
/// ```
pub fn jvp<A, O, F>(f: F, primals: &A, tangents: &A) -> Result<(O, O)>
where
    A: Traverse + Clone,
    O: Traverse + Clone,
    F: FnOnce(&A) -> O,
{
    let p_items = items(primals);
    check_like("jvp", "tangents", &p_items, tangents)?;
    // inside a function being differentiated (as in `kiln::grad`): differentiable tangents
    let nested = nested_call(
        p_items.iter().any(|it| it.ad != 0) || items(tangents).iter().any(|it| it.ad != 0),
    );
    let _b = Boundary::now();
    let leaves = Leaves::with_links(primals, nested);
    let mut seeds = Vec::new();
    for ((&ad, p), t) in leaves.leaves.iter().zip(&leaves.parts).zip(items(tangents)) {
        if ad != 0 {
            let t_ad = if nested { t.ad } else { 0 };
            seeds.push((ad, widen(Grad::share(t.id, t_ad), p.id())));
        }
    }
    let out = {
        let _h = super::HigherOrder::enter(nested);
        f(&leaves.value)
    };
    let o_items = items(&out);
    let targets: Vec<AdIndex> = o_items.iter().map(|it| it.ad).filter(|&a| a != 0).collect();
    let ts: HashMap<AdIndex, Grad> = if targets.is_empty() || seeds.is_empty() {
        HashMap::new()
    } else {
        propagate::forward_with(seeds, Some(&targets), nested)?
    };
    let parts: Vec<Grad> = o_items
        .iter()
        .map(|it| match ts.get(&it.ad) {
            Some(t) if it.ad != 0 && it.ty.is_float() => {
                widen(if nested { t.clone() } else { t.detached() }, it.id)
            }
            _ => zeros_like(it.id),
        })
        .collect();
    let tangent = rebuild(&out, &parts);
    if nested {
        return Ok((out, tangent));
    }
    Ok((detach(&out), tangent))
}

/// The Hessian of the scalar function `f` at `x` times `v` (shaped like `x`), forward over
/// reverse: one backward pass that records itself, then one forward pass along `v` through it.
/// Where the gradient does not depend on `x` (a linear `f`), the product is zeros.
///
/// ```
/// use kiln::prelude::*;
/// // f = Σ x³: H = diag(6x)
/// let x = Float64::from_slice(&[1.0, 2.0]);
/// let hv = kiln::hvp(|x: &Float64| (x * x * x).sum(), &x, &Float64::from_slice(&[1.0, 1.0])).unwrap();
/// assert_eq!(hv.to_vec(), vec![6.0, 12.0]);
/// ```
pub fn hvp<A, T, F>(f: F, x: &A, v: &A) -> Result<A>
where
    A: Traverse + Clone,
    T: Float,
    F: FnOnce(&A) -> Array<T>,
{
    let x_items = items(x);
    check_like("hvp", "directions", &x_items, v)?;
    // inside a function being differentiated (as in `kiln::grad`): a differentiable product
    let nested =
        nested_call(x_items.iter().any(|it| it.ad != 0) || items(v).iter().any(|it| it.ad != 0));
    let _b = Boundary::now();
    let leaves = Leaves::with_links(x, nested);
    let out = {
        // forward over reverse: the gradient `f` records is differentiated again
        let _h = super::HigherOrder::enter(true);
        f(&leaves.value)
    };
    check_scalar("hvp", &out)?;
    let template = detach(x);
    if out.ad == 0 {
        return Ok(leaves.take_grads(&template));
    }
    let want: Vec<AdIndex> = leaves.leaves.iter().copied().filter(|&a| a != 0).collect();
    let how = Backward {
        retain_graph: true,
        create_graph: true,
    };
    let seed = Grad::of(Array::<T>::ones(1));
    let g = propagate::backward(vec![(out.ad, seed)], how, &want)?;
    let mut seeds = Vec::new();
    for ((&ad, p), t) in leaves.leaves.iter().zip(&leaves.parts).zip(items(v)) {
        if ad != 0 {
            let t_ad = if nested { t.ad } else { 0 };
            seeds.push((ad, widen(Grad::share(t.id, t_ad), p.id())));
        }
    }
    let targets: Vec<AdIndex> = g.values().map(|gr| gr.ad()).filter(|&a| a != 0).collect();
    let ts = if targets.is_empty() {
        HashMap::new()
    } else {
        propagate::forward_with(seeds, Some(&targets), nested)?
    };
    let parts: Vec<Grad> = leaves
        .leaves
        .iter()
        .zip(&leaves.parts)
        .map(|(ad, p)| {
            let t = g
                .get(ad)
                .filter(|gr| gr.ad() != 0)
                .and_then(|gr| ts.get(&gr.ad()));
            match t {
                Some(t) => widen(if nested { t.clone() } else { t.detached() }, p.id()),
                None => zeros_like(p.id()),
            }
        })
        .collect();
    drop(g);
    Ok(rebuild(&template, &parts))
}
