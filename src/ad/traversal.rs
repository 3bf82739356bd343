//! Passes over a set of arrays at once, as Dr.Jit's `enqueue` + `traverse` run them: forward or
//! reverse mode from several arrays in one pass, each seeded with the gradient it holds.

use super::graph;
use super::jax::{items, Item};
use super::propagate::{self, Backward};
use super::{AdIndex, Grad};
use crate::freeze::traverse::Traverse;
use kiln_core::Result;

/// Forward mode from every array of `xs` at once: each one's gradient (set with `set_grad`; an
/// array without one, or one that carries no gradient, adds nothing) is pushed through everything
/// computed from them, tangents adding where paths meet, and each array reached holds its tangent
/// in its gradient (replacing what an earlier forward pass left there), as after
/// [`forward`](super::forward). The seeds keep their gradients.
///
/// ```
/// use kiln::prelude::*;
/// let (mut a, mut b) = (Float64::from(2.0), Float64::from(5.0));
/// a.enable_grad();
/// b.enable_grad();
/// let y = &a * &b;
/// a.set_grad(&Float64::from(1.0));
/// b.set_grad(&Float64::from(10.0));
/// kiln::ad::forward_from_all(&(a.clone(), b.clone())).unwrap();
/// assert_eq!(y.grad().item(), 5.0 + 10.0 * 2.0);
/// ```
pub fn forward_from_all<V: Traverse + ?Sized>(xs: &V) -> Result<()> {
    let seeds = held_grads(&items(xs));
    if seeds.is_empty() {
        return Ok(());
    }
    let from: Vec<_> = seeds.iter().map(|s| s.0).collect();
    let ts = propagate::forward(seeds, None)?;
    for (ad, t) in ts {
        if !from.contains(&ad) {
            let prev = graph::with(|g| g.node_mut(ad).grad.replace(t.detached()));
            drop(prev);
        }
    }
    Ok(())
}

/// Reverse mode from every array of `ys` at once (Dr.Jit's `enqueue(Backward, ..)` +
/// `traverse`): each one's gradient (set with `set_grad`; an array without one adds nothing) is
/// its cotangent, and one pass carries them all back to the arrays with `enable_grad`. The seeds
/// keep their gradients (a seed that is itself such an array also gets what the others send
/// it). With `retain_graph` the graph stays for another pass.
///
/// ```
/// use kiln::prelude::*;
/// let mut x = Float64::from(3.0);
/// x.enable_grad();
/// let (y, z) = (&x * &x, &x * 2.0);
/// y.set_grad(&Float64::from(1.0));
/// z.set_grad(&Float64::from(10.0));
/// kiln::ad::backward_from_all(&(y.clone(), z.clone()), false).unwrap();
/// assert_eq!(x.grad().item(), 2.0 * 3.0 + 10.0 * 2.0);
/// assert_eq!(y.grad().item(), 1.0);
/// ```
pub fn backward_from_all<V: Traverse + ?Sized>(ys: &V, retain_graph: bool) -> Result<()> {
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
        if !keeps {
            let prev = graph::with(|gr| std::mem::replace(&mut gr.node_mut(ad).grad, g));
            drop(prev);
        }
    }
    r.map(|_| ())
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
