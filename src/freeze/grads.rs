//! Gradients across a frozen function's boundary: what the backward passes inside a call bring
//! to the `&mut` arguments' arrays reaches the caller's arrays, recorded and replayed alike.
//!
//! The function-freezing document's own example calls `loss.backward()` inside the frozen step
//! and steps the optimizer outside, so the gradients must leave the call. Inside, each such
//! array is a fresh leaf (a replay cannot repeat what the function did to the caller's graph);
//! what that leaf holds when the function returns becomes an extra output of the recording, and
//! on exit it is added to the gradient the caller's array held before the call. An array the
//! caller computed from others (an interior node: `y = f(x)` passed in) and that the function
//! left as it was gets its own node back, and what the call delivered to it flows on to `x`, as
//! at the end of an `isolate_grad` scope (Dr.Jit's rule: the call is such a scope).

use super::{ArgList, Assign, Traversal};
use crate::ad::jax;
use crate::ad::{graph, Grad};
use kiln_core::{Result, VarId};

/// The `&mut` positions (in `traverse_mutable` order) that are re-leafed, with what the caller's
/// arrays held there before the call.
pub(crate) struct Held {
    mask: Vec<bool>,
    before: Vec<Option<Grad>>,
    /// Per position: the caller's array and its node when that node is interior (it has
    /// parents), each with a reference held until the call is over.
    interior: Vec<Option<(VarId, graph::AdIndex)>>,
}

impl Held {
    /// `mask`: the `&mut` positions that carry gradients; their gradients now are kept.
    pub(crate) fn take<A: ArgList>(args: &mut A, mask: Vec<bool>) -> Held {
        let mut t = Traversal::new();
        args.traverse_mutable(&mut t);
        let before = t
            .found
            .iter()
            .zip(&mask)
            .map(|(f, &on)| if on { node_grad(f.ad) } else { None })
            .collect();
        let interior = t
            .found
            .iter()
            .zip(&mask)
            .map(|(f, &on)| {
                let has_parents =
                    on && f.ad != 0 && graph::with(|g| !g.node(f.ad).parents.is_empty());
                has_parents.then(|| {
                    graph::inc_ref(f.ad);
                    kiln_core::inc_ref(f.id);
                    (f.id, f.ad)
                })
            })
            .collect();
        Held {
            mask,
            before,
            interior,
        }
    }
    pub(crate) fn mask(&self) -> &[bool] {
        &self.mask
    }
    /// For a call whose `&mut` arguments carried no gradients on entry: nothing held.
    pub(crate) fn none() -> Held {
        Held {
            mask: Vec::new(),
            before: Vec::new(),
            interior: Vec::new(),
        }
    }
}

/// The gradient each `&mut` position that tracks derivatives when the function returns
/// delivers to the caller's array: (position, gradient widened to the array's size, whether the
/// caller's earlier gradient adds to it). Where the function kept the entry leaf, or replaced it
/// with a value computed from it (`*x = &*x + 1.0`), what the passes inside left on the entry
/// leaf, added to the earlier gradient; where it put a leaf of its own there (`enable_grad`
/// inside, an optimizer's fresh leaves), what that leaf holds, as after the unfrozen call.
pub(crate) fn at_end<A: ArgList>(args: &mut A, entry: Option<&Leaves>) -> Vec<(usize, Grad, bool)> {
    let mut t = Traversal::new();
    args.traverse_mutable(&mut t);
    t.found
        .iter()
        .enumerate()
        .filter(|(_, f)| f.ad != 0)
        .filter_map(|(i, f)| {
            let leaf = entry.and_then(|l| l.0.iter().find(|e| e.0 == i).map(|e| e.1));
            let own_leaf = graph::with(|g| g.node(f.ad).parents.is_empty());
            let (from, kept) = match leaf {
                Some(ad) if ad == f.ad || !own_leaf => (ad, true),
                _ if own_leaf => (f.ad, false),
                _ => return None,
            };
            node_grad(from).map(|g| (i, jax::widen(g, f.id), kept))
        })
        .collect()
}

/// The leaves a recording's function starts from, kept alive until it returns (it may drop or
/// replace the arrays that held them).
pub(crate) struct Leaves(Vec<(usize, graph::AdIndex, VarId)>);

impl Leaves {
    /// The fresh leaves of the marked `&mut` positions, just made.
    pub(crate) fn of<A: ArgList>(args: &mut A, mask: &[bool]) -> Leaves {
        let mut t = Traversal::new();
        args.traverse_mutable(&mut t);
        let v = t
            .found
            .iter()
            .enumerate()
            .filter(|&(i, f)| mask.get(i).copied().unwrap_or(false) && f.ad != 0)
            .map(|(i, f)| {
                graph::inc_ref(f.ad);
                kiln_core::inc_ref(f.id);
                (i, f.ad, f.id)
            })
            .collect();
        Leaves(v)
    }
}

impl Drop for Leaves {
    fn drop(&mut self) {
        for &(_, ad, id) in &self.0 {
            graph::dec_ref(ad);
            kiln_core::dec_ref(id);
        }
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        for &(id, ad) in self.interior.iter().flatten() {
            graph::dec_ref(ad);
            kiln_core::dec_ref(id);
        }
    }
}

/// Add `got` (position, gradient array, whether the function kept the entry leaf there) to the
/// gradients of the caller's arrays, which hold fresh leaves at those positions now: each gets
/// what the function left there, plus what it held before the call where the function kept the
/// entry leaf. An interior array the call left as it was gets its node back instead, and what
/// was delivered to it is carried on to the arrays it was computed from.
pub(crate) fn deliver<A: ArgList>(
    args: &mut A,
    held: &Held,
    got: &[(usize, VarId, bool)],
) -> Result<()> {
    if got.is_empty() {
        return Ok(());
    }
    let mut t = Traversal::new();
    args.traverse_mutable(&mut t);
    let mut nodes: Vec<(VarId, graph::AdIndex)> = t.found.iter().map(|f| (f.id, f.ad)).collect();
    let mut seeds = Vec::new();
    for &(pos, gid, kept) in got {
        let Some(f) = t.found.get(pos) else { continue };
        if f.ad == 0 {
            continue;
        }
        let g = Grad::share(gid, 0);
        if let (true, Some(&Some((id, ad)))) = (kept, held.interior.get(pos)) {
            if id == f.id {
                nodes[pos].1 = ad;
                seeds.push((ad, g));
                continue;
            }
        }
        let before = held.before.get(pos).and_then(|b| b.as_ref());
        let total = match before.filter(|_| kept) {
            Some(b) => b.clone().plus(&g),
            None => g,
        };
        let prev = graph::with(|gr| gr.node_mut(f.ad).grad.replace(total));
        drop(prev);
    }
    if seeds.is_empty() {
        return Ok(());
    }
    args.assign_mutable(&mut Assign::with_ad(&nodes));
    crate::ad::carry_on(seeds, false)
}

/// After a call that failed: the caller's arrays at the marked positions hold what they held
/// before the call as their gradient (nothing the failed call's passes brought).
pub(crate) fn restore<A: ArgList>(args: &mut A, held: &Held) {
    let mut t = Traversal::new();
    args.traverse_mutable(&mut t);
    for (pos, f) in t.found.iter().enumerate() {
        if f.ad == 0 || !held.mask.get(pos).copied().unwrap_or(false) {
            continue;
        }
        let before = held.before.get(pos).and_then(|b| b.clone());
        let prev = graph::with(|gr| std::mem::replace(&mut gr.node_mut(f.ad).grad, before));
        drop(prev);
    }
}

/// A node's gradient, detached (none for no node or no gradient).
fn node_grad(ad: graph::AdIndex) -> Option<Grad> {
    if ad == 0 {
        return None;
    }
    graph::with(|g| g.node(ad).grad.as_ref().map(Grad::detached))
}

/// `key` made specific to which `&mut` positions carry gradients: a recording made with them
/// has outputs for their gradients that one made without them lacks.
pub(crate) fn key_with(key: u64, mask: &[bool]) -> u64 {
    mask.iter()
        .enumerate()
        .filter(|&(_, &on)| on)
        .fold(key ^ 0x6AD5_0000_0000_0001, |h, (i, _)| {
            h.rotate_left(7) ^ (i as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15)
        })
}
