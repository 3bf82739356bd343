//! Passes over a set of arrays at once, as Dr.Jit's `enqueue` + `traverse` run them: forward or
//! reverse mode from several arrays in one pass, each seeded with the gradient it holds.

use super::graph;
use super::jax::{items, Item};
use super::propagate::{self, Backward};
use super::{AdIndex, Grad};
use crate::freeze::traverse::Traverse;
use kiln_core::Result;
use std::collections::HashSet;

/// Forward mode from every array of `xs` at once: each one's gradient (set with `set_grad`; for an
/// array without one, ones with `unset_is_one`, else nothing; an array that carries no gradient
/// adds nothing) is pushed through everything
/// computed from them, tangents adding where paths meet (a seed computed from another gets its
/// own plus what flows into it), and each array reached holds its tangent in its gradient
/// (replacing what an earlier forward pass left there), as after [`forward`](super::forward).
/// The seeds keep the gradients they were given.
///
/// ```
/// use kiln::prelude::*;
/// let (mut a, mut b) = (Float64::from(2.0), Float64::from(5.0));
/// a.enable_grad();
/// b.enable_grad();
/// let y = &a * &b;
/// a.set_grad(&Float64::from(1.0));
/// b.set_grad(&Float64::from(10.0));
/// kiln::ad::forward_from_all(&(a.clone(), b.clone()), false).unwrap();
/// assert_eq!(y.grad().item(), 5.0 + 10.0 * 2.0);
/// ```
pub fn forward_from_all<V: Traverse + ?Sized>(xs: &V, unset_is_one: bool) -> Result<()> {
    let its = items(xs);
    let mut seeds = held_grads(&its);
    if unset_is_one {
        for it in its.iter().filter(|it| it.ad != 0) {
            if !seeds.iter().any(|s| s.0 == it.ad) {
                seeds.push((it.ad, ones_like(it.id)));
            }
        }
    }
    if seeds.is_empty() {
        return Ok(());
    }
    let from: Vec<_> = seeds.iter().map(|s| s.0).collect();
    let ts = propagate::forward_adding(seeds)?;
    super::store_tangents(ts, &from);
    Ok(())
}

/// Reverse mode from every array of `ys` at once (Dr.Jit's `enqueue(Backward, ..)` +
/// `traverse`): each one's gradient (set with `set_grad`; an array without one adds nothing) is
/// its cotangent, and one pass carries them all back to the arrays with `enable_grad`. A seed that
/// is itself such an array keeps what arrives (its own seed among it); the other seeds keep their
/// gradients unless `clear_seeds`. With `retain_graph` the graph stays for another pass.
///
/// ```
/// use kiln::prelude::*;
/// let mut x = Float64::from(3.0);
/// x.enable_grad();
/// let (y, z) = (&x * &x, &x * 2.0);
/// y.set_grad(&Float64::from(1.0));
/// z.set_grad(&Float64::from(10.0));
/// kiln::ad::backward_from_all(&(y.clone(), z.clone()), false, false).unwrap();
/// assert_eq!(x.grad().item(), 2.0 * 3.0 + 10.0 * 2.0);
/// assert_eq!(y.grad().item(), 1.0);
/// ```
pub fn backward_from_all<V: Traverse + ?Sized>(
    ys: &V,
    retain_graph: bool,
    clear_seeds: bool,
) -> Result<()> {
    let seeds = held_grads(&items(ys));
    if seeds.is_empty() {
        return Ok(());
    }
    // taken out of the nodes first: the pass adds a seed's cotangent (its own seed among it)
    // into a seed that keeps its gradient, and nothing into one that does not
    let taken: Vec<(AdIndex, Option<Grad>, bool)> = graph::with(|g| {
        seeds
            .iter()
            .map(|(ad, _)| {
                let n = g.node_mut(*ad);
                (*ad, n.grad.take(), n.keeps_grad)
            })
            .collect()
    });
    let how = Backward {
        retain_graph,
        create_graph: false,
    };
    let r = propagate::backward(seeds, how, &[]);
    for (ad, g, keeps) in taken {
        if !keeps && !clear_seeds {
            let prev = graph::with(|gr| std::mem::replace(&mut gr.node_mut(ad).grad, g));
            drop(prev);
        }
    }
    r.map(|_| ())
}

/// Ones of the type and size of float array `id`.
fn ones_like(id: kiln_core::VarId) -> Grad {
    let n = kiln_core::size(id);
    match kiln_core::var_type(id) {
        kiln_core::VarType::F32 => Grad::of(crate::Array::<f32>::ones(n)),
        _ => Grad::of(crate::Array::<f64>::ones(n)),
    }
}

/// The arrays among `its` that carry a gradient and hold one, with it.
fn held_grads(its: &[Item]) -> Vec<(AdIndex, Grad)> {
    let mut seen = Vec::new();
    its.iter()
        .filter(|it| {
            it.ad != 0 && !seen.contains(&it.ad) && {
                seen.push(it.ad);
                true
            }
        })
        .filter_map(|it| graph::with(|g| g.node(it.ad).grad.clone()).map(|g| (it.ad, g)))
        .collect()
}

/// Reverse mode towards `xs` only (Dr.Jit's `backward_to`): every array computed from them that
/// holds a gradient (set with `set_grad`, or a tangent an earlier forward pass left) is a seed,
/// and one pass carries the seeds' gradients back to `xs`, which get what arrives added to what
/// they hold (with or without `enable_grad`). The pass crosses only what was computed from `xs`:
/// no other array's gradient changes, and the graph above `xs` is neither walked nor consumed.
/// The seeds keep their gradients unless `clear_seeds` (one with `enable_grad` keeps its own
/// always). An `isolate_grad` scope does not stop this pass: its targets are its own. With `retain_graph` the graph stays for another pass.
///
/// ```
/// use kiln::prelude::*;
/// let (mut a, mut b) = (Float64::from(1.0), Float64::from(3.0));
/// a.enable_grad();
/// b.enable_grad();
/// let c = &a * &b * 2.0;
/// c.set_grad(&Float64::from(1.0));
/// kiln::ad::backward_to(&a, true, false).unwrap();
/// assert_eq!((a.grad().item(), b.grad().item(), c.grad().item()), (6.0, 0.0, 1.0));
/// ```
pub fn backward_to<V: Traverse + ?Sized>(
    xs: &V,
    retain_graph: bool,
    clear_seeds: bool,
) -> Result<()> {
    let targets: Vec<AdIndex> = items(xs)
        .iter()
        .map(|it| it.ad)
        .filter(|&a| a != 0)
        .collect();
    let (seeds, drops) = graph::with(|g| {
        // the targets and what was computed from them: the only nodes the pass crosses
        let below: HashSet<AdIndex> = walk(g, &targets, |n| &n.children).into_iter().collect();
        let inner = below.iter().filter(|i| !targets.contains(i));
        // (a gradient only an array can have been given: a node no array refers to is none)
        let seeds: Vec<(AdIndex, Grad)> = inner
            .clone()
            .filter(|&&i| g.has_handles(i))
            .filter_map(|&i| g.node(i).grad.clone().map(|gr| (i, gr)))
            .collect();
        // what reaches a parent outside them is dropped (it would not reach a target)
        let drops: Vec<AdIndex> = inner
            .flat_map(|&i| g.node(i).parents.iter().copied())
            .filter(|p| !below.contains(p))
            .collect::<HashSet<_>>()
            .into_iter()
            .collect();
        (seeds, drops)
    });
    if seeds.is_empty() {
        return Ok(());
    }
    let from: Vec<AdIndex> = seeds.iter().map(|s| s.0).collect();
    let how = Backward {
        retain_graph,
        create_graph: false,
    };
    propagate::backward_between(seeds, how, &targets, &drops)?;
    if clear_seeds {
        for ad in from {
            // a seed with `enable_grad` keeps its gradient, as every such array does
            let prev = graph::with(|gr| {
                let n = gr.node_mut(ad);
                if n.keeps_grad {
                    None
                } else {
                    n.grad.take()
                }
            });
            drop(prev);
        }
    }
    Ok(())
}

/// The nodes reachable from `from` (themselves included) along `next` (parents or children).
fn walk(
    g: &graph::Graph,
    from: &[AdIndex],
    next: impl Fn(&graph::Node) -> &graph::Edges,
) -> Vec<AdIndex> {
    let mut seen = std::collections::HashSet::new();
    let mut stack = from.to_vec();
    let mut out = Vec::new();
    while let Some(i) = stack.pop() {
        if seen.insert(i) {
            out.push(i);
            stack.extend(next(g.node(i)).iter().copied());
        }
    }
    out
}
