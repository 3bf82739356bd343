//! A backward pass over one step of a loop, for a gradient that is itself a loop (a scan's
//! gradient scan): the pass stops at the nodes older than the step (the arrays its body
//! captured) and hands back what reached them, and the products `aᵀ·c` that a matrix product's
//! rule would add to a captured right operand are handed back unevaluated as `(a, c)`, so that
//! the caller can stack every step's `a` and `c` and compute their sum as one product after the
//! loop (PyTensor's push-out of `Σ_t x_tᵀ · δ_t`). When the product's left operand is a row of
//! a sequence (a leaf the caller names), its gradient `c · bᵀ` is deferred with it: the caller
//! computes every row's as one product `C · bᵀ` after the loop.

use super::graph::{self, AdIndex};
use super::propagate::{self, Backward};
use super::value::Grad;
use super::{ISOLATE, STASH};
use kiln_core::Result;
use std::cell::RefCell;

/// The product `aᵀ · c` a matrix product's rule deferred: `a` is `[m, k]`, `c` is `[m, n]`, and
/// the product belongs to the captured node `node` (a `[k, n]` matrix).
pub(crate) struct Deferred {
    pub node: AdIndex,
    pub a: Grad,
    pub c: Grad,
    pub m: usize,
    pub k: usize,
    pub n: usize,
    /// The left operand's gradient `c · bᵀ`, deferred too: the row leaf that `a` is, and `b`.
    pub left: Option<(AdIndex, Grad)>,
}

thread_local! {
    /// While a step's pass runs: the first sequence number of the step, the products deferred
    /// so far, and the row leaves whose gradients through a deferred product may be deferred.
    static COLLECT: RefCell<Option<Collect>> = const { RefCell::new(None) };
}

type Collect = (u64, Vec<Deferred>, Vec<AdIndex>);

/// Whether a step's pass is collecting deferred products (what [`defer`] needs is built only
/// then).
pub(crate) fn collecting() -> bool {
    COLLECT.with(|c| c.borrow().is_some())
}

/// Called by the matrix product's rule for its right operand `node`: when a step's pass is
/// collecting and `node` is older than the step, keep `aᵀ · c` as `(a, c)` and say so (the rule
/// then passes nothing to `node`).
pub(crate) fn defer(node: AdIndex, a: &Grad, c: &Grad, (m, k, n): (usize, usize, usize)) -> bool {
    COLLECT.with(|cell| {
        let mut cell = cell.borrow_mut();
        let Some((start, list, _)) = cell.as_mut() else {
            return false;
        };
        if super::graph::with(|g| g.node(node).seq) >= *start {
            return false;
        }
        list.push(Deferred {
            node,
            a: a.clone(),
            c: c.clone(),
            m,
            k,
            n,
            left: None,
        });
        true
    })
}

/// Called by the matrix product's rule right after [`defer`] deferred its right operand `b`:
/// when the left operand's node `a` is one of the row leaves the pass was given, defer its
/// gradient `c · bᵀ` too and say so (the rule then passes nothing to `a`).
pub(crate) fn defer_left(a: AdIndex, b: &Grad) -> bool {
    COLLECT.with(|cell| {
        let mut cell = cell.borrow_mut();
        let Some((_, list, rows)) = cell.as_mut() else {
            return false;
        };
        match list.last_mut() {
            Some(d) if rows.contains(&a) && d.left.is_none() => {
                d.left = Some((a, b.clone()));
                true
            }
            _ => false,
        }
    })
}

/// What a step's pass left for the nodes older than the step.
pub(crate) struct StepPass {
    /// Cotangents that reached older nodes, in the order the pass reached them (a node may
    /// appear more than once).
    pub reached: Vec<(AdIndex, Grad)>,
    /// Products deferred for older right operands of matrix products.
    pub deferred: Vec<Deferred>,
}

/// A first-order backward pass from `seeds` that stops at the nodes created before `start`
/// (consuming the step's nodes); gradients of the step's own leaves are stored in them as usual,
/// except what reaches one of `rows` through a deferred product (see [`defer_left`]).
pub(crate) fn pass_within(
    start: u64,
    seeds: Vec<(AdIndex, Grad)>,
    rows: Vec<AdIndex>,
) -> Result<StepPass> {
    /// Pops the scope and puts back an enclosing step's collection, also on a panic in a rule.
    struct Scope(Option<Collect>);
    impl Drop for Scope {
        fn drop(&mut self) {
            ISOLATE.with(|s| s.borrow_mut().pop());
            STASH.with(|s| s.borrow_mut().pop());
            let outer = self.0.take();
            COLLECT.with(|c| *c.borrow_mut() = outer);
        }
    }
    ISOLATE.with(|s| s.borrow_mut().push(start));
    STASH.with(|s| s.borrow_mut().push(Vec::new()));
    let scope = Scope(COLLECT.with(|c| c.borrow_mut().replace((start, Vec::new(), rows))));
    let r = if seeds.is_empty() {
        Ok(())
    } else {
        propagate::backward(seeds, Backward::default(), &[]).map(drop)
    };
    let reached = STASH.with(|s| s.borrow_mut().last_mut().map(std::mem::take));
    let deferred = COLLECT.with(|c| c.borrow_mut().as_mut().map(|(_, l, _)| std::mem::take(l)));
    drop(scope);
    r?;
    // the stash retains each node it names; these older nodes are the caller's to keep alive
    let reached: Vec<(AdIndex, Grad)> = reached
        .unwrap_or_default()
        .into_iter()
        .map(|(ad, ct, _)| {
            graph::dec_ref(ad);
            (ad, ct)
        })
        .collect();
    Ok(StepPass {
        reached,
        deferred: deferred.unwrap_or_default(),
    })
}
