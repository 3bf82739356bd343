//! Backward and forward passes over the AD graph.
//!
//! A pass collects the nodes it crosses under the graph's lock, then runs their rules with the
//! lock released, in creation order (children are always created after their parents, so the
//! sequence number is a topological order). Rules trace ordinary lazy array code, so the whole
//! pass is traced and fused like any other kiln code: nothing runs until a gradient is read.

use super::graph::{self, AdIndex, Edges, Rule};
use super::value::Grad;
use super::{isolate_boundary, stash_isolated, without_isolation, RecordingGuard};
use kiln_core::{Error, Result};
use std::collections::HashMap;
use std::sync::Arc;

/// The number the next backward pass gets (on any thread: a pass that failed on one thread
/// must not share its number with a later pass on another).
static NEXT_PASS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

thread_local! {
    /// The backward passes running on this thread, innermost last (a rule may run a pass of its
    /// own).
    static PASSES: std::cell::RefCell<Vec<u64>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// The backward pass running now (0: none), for rules that gather their inputs' cotangents
/// over several nodes before one of them passes them on (see `scan::rows::Unstack`).
pub(crate) fn current_pass() -> u64 {
    PASSES.with(|p| p.borrow().last().copied().unwrap_or(0))
}

/// Marks a backward pass as running while it lives.
struct Pass;
impl Pass {
    fn begin() -> Pass {
        let id = NEXT_PASS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        PASSES.with(|p| p.borrow_mut().push(id));
        Pass
    }
}
impl Drop for Pass {
    fn drop(&mut self) {
        PASSES.with(|p| p.borrow_mut().pop());
    }
}

/// What a pass needs of a node, copied out under the lock.
struct Step {
    ad: AdIndex,
    seq: u64,
    rule: Option<Arc<dyn Rule>>,
    parents: Edges,
    keeps_grad: bool,
}

/// The nodes reachable from `roots` through parents, oldest first, each with one reference
/// taken for the pass (released by `release`). Refuses a graph consumed by an earlier pass or
/// one that crosses a construct with no reverse rule.
fn ancestors(roots: &[AdIndex], stop_before: u64, stops: &[AdIndex]) -> Result<Vec<Step>> {
    graph::with(|g| {
        let mut seen = std::collections::HashSet::new();
        let mut stack: Vec<AdIndex> = roots.to_vec();
        let mut steps = Vec::new();
        while let Some(i) = stack.pop() {
            if !seen.insert(i) {
                continue;
            }
            let n = g.node(i);
            let crosses = n.seq >= stop_before && !stops.contains(&i);
            // a node the pass stops at (older than an isolation boundary) is a constant to it
            if n.consumed && crosses {
                return Err(Error::Ad(format!(
                    "a backward pass reached a {}-element {} array whose graph an earlier `backward` already consumed; call `backward_with(.., retain_graph = true)` (or `kiln::vjp`, whose pullback may be called again) the first time, or recompute the expression",
                    n.size, n.ty
                )));
            }
            if let Some(r) = n.rule.as_ref().filter(|_| crosses) {
                if let Some((construct, detail)) = r.refuses_reverse() {
                    return Err(Error::NotDifferentiable { construct, detail });
                }
            }
            steps.push(Step {
                ad: i,
                seq: n.seq,
                rule: if crosses { n.rule.clone() } else { None },
                parents: if crosses {
                    n.parents.clone()
                } else {
                    Edges::default()
                },
                keeps_grad: n.keeps_grad,
            });
            if crosses {
                stack.extend(n.parents.iter().copied());
            }
        }
        steps.sort_by_key(|s| s.seq);
        for s in &steps {
            g.retain(s.ad);
        }
        Ok(steps)
    })
}

fn release(steps: &[Step]) {
    for s in steps {
        graph::release_retained(s.ad);
    }
}

/// The steps of a running pass: their references are released when the pass ends, also when a
/// rule (a user's `CustomOp`) panics, so that an unwinding pass leaves no node behind.
struct Held(Vec<Step>);

impl Drop for Held {
    fn drop(&mut self) {
        release(&self.0);
    }
}

fn accumulate(map: &mut HashMap<AdIndex, Grad>, ad: AdIndex, g: Grad) {
    let v = match map.remove(&ad) {
        Some(old) => old.plus(&g),
        None => g,
    };
    map.insert(ad, v);
}

/// How many rules a pass lets a cotangent (or a tangent) pass through unevaluated. A pass through a
/// long chain of elementwise steps (a scan's thousand steps, a gradient summed over them) would
/// otherwise build one expression as long as the chain: one kernel, quick to run but compiled
/// for seconds, and compiled again for every other length. Cut every this many rules, the pieces
/// repeat one structure, and so one compiled kernel.
const LONGEST_COTANGENT: u32 = 128;

/// Cotangents of a backward pass with the number of rules each went through since it was last
/// evaluated.
#[derive(Default)]
struct Cotangents(HashMap<AdIndex, (Grad, u32)>);

impl Cotangents {
    /// Add `g` (`depth` rules deep) to node `ad`'s cotangent, evaluating the sum once it is
    /// [`LONGEST_COTANGENT`] deep.
    fn add(&mut self, ad: AdIndex, g: Grad, depth: u32) -> Result<()> {
        let (v, d) = match self.0.remove(&ad) {
            Some((old, d)) => (old.plus(&g), d.max(depth) + 1),
            None => (g, depth),
        };
        let d = if d >= LONGEST_COTANGENT && !kiln_core::is_evaluated(v.id()) {
            kiln_core::eval(&[v.id()])?;
            0
        } else {
            d
        };
        self.0.insert(ad, (v, d));
        Ok(())
    }
}

/// Store `g` into the node's gradient (added to what is there).
fn store(ad: AdIndex, g: Grad) {
    let old = graph::with(|gr| gr.node_mut(ad).grad.take());
    let new = match old {
        Some(o) => o.plus(&g),
        None => g,
    };
    let prev = graph::with(|gr| gr.node_mut(ad).grad.replace(new));
    drop(prev);
}

/// How a backward pass runs.
#[derive(Clone, Copy, Default)]
pub(crate) struct Backward {
    /// Keep the nodes' edges (otherwise the pass consumes the graph it crossed).
    pub retain_graph: bool,
    /// Record the pass itself in the AD graph (gradients of gradients); the leaves' gradients
    /// are returned instead of stored.
    pub create_graph: bool,
}

/// Propagate the cotangents `seeds` back to every node they reach. Gradients are stored in the
/// nodes that keep theirs, or, with `create_graph`, returned for the nodes in `want`.
pub(crate) fn backward(
    seeds: Vec<(AdIndex, Grad)>,
    how: Backward,
    want: &[AdIndex],
) -> Result<HashMap<AdIndex, Grad>> {
    backward_stopping(seeds, how, want, &[])
}

/// [`backward`] that treats the nodes `stops` as constants: what reaches them is dropped and
/// the pass goes no further (per-lane partials in the leaves of a trace that also reads arrays
/// it captured).
pub(crate) fn backward_stopping(
    seeds: Vec<(AdIndex, Grad)>,
    how: Backward,
    want: &[AdIndex],
    stops: &[AdIndex],
) -> Result<HashMap<AdIndex, Grad>> {
    run_backward(seeds, how, want, stops, &[])
}

/// A backward pass that ends at `targets`: each gets what reaches it added to its gradient
/// (whether or not it has `enable_grad`), nothing goes past them, and what reaches a node of
/// `drops` is dropped. No isolation boundary applies: the targets are the pass's own.
pub(crate) fn backward_between(
    seeds: Vec<(AdIndex, Grad)>,
    how: Backward,
    targets: &[AdIndex],
    drops: &[AdIndex],
) -> Result<()> {
    without_isolation(|| run_backward(seeds, how, &[], drops, targets)).map(|_| ())
}

fn run_backward(
    seeds: Vec<(AdIndex, Grad)>,
    how: Backward,
    want: &[AdIndex],
    stops: &[AdIndex],
    deliver: &[AdIndex],
) -> Result<HashMap<AdIndex, Grad>> {
    let _pass = Pass::begin();
    let roots: Vec<AdIndex> = seeds.iter().map(|s| s.0).collect();
    let boundary = isolate_boundary();
    let ends: Vec<AdIndex> = stops.iter().chain(deliver).copied().collect();
    let held = Held(ancestors(&roots, boundary, &ends)?);
    let steps = &held.0;
    let _rec = RecordingGuard::set(how.create_graph);
    let mut cts = Cotangents::default();
    for (ad, g) in seeds {
        cts.add(ad, g, 0)?;
    }
    let mut out = HashMap::new();
    for s in steps.iter().rev() {
        let Some((ct, depth)) = cts.0.remove(&s.ad) else {
            continue;
        };
        if deliver.contains(&s.ad) {
            store(s.ad, ct.detached());
            continue;
        }
        if stops.contains(&s.ad) {
            continue;
        }
        if s.seq < boundary {
            stash_isolated(s.ad, ct, how.retain_graph);
            continue;
        }
        if how.create_graph && want.contains(&s.ad) {
            out.insert(s.ad, ct.clone());
        } else if s.keeps_grad && !how.create_graph && deliver.is_empty() {
            // (a pass with targets changes their gradients alone)
            store(s.ad, ct.detached());
        }
        if let Some(rule) = &s.rule {
            for (p, c) in s.parents.iter().zip(rule.backward(&ct)) {
                if let Some(c) = c {
                    cts.add(*p, c, depth + 1)?;
                }
            }
        }
    }
    drop(cts);
    if !how.retain_graph {
        for s in steps.iter().rev() {
            if s.rule.is_some() {
                let garbage = graph::with(|g| g.consume(s.ad));
                drop(garbage);
            }
        }
    }
    drop(held);
    Ok(out)
}

/// The descendants of `from` (and `from` themselves), oldest first, one reference each.
fn descendants(from: &[AdIndex]) -> Vec<Step> {
    graph::with(|g| {
        let mut seen = std::collections::HashSet::new();
        let mut stack: Vec<AdIndex> = from.to_vec();
        let mut steps = Vec::new();
        while let Some(i) = stack.pop() {
            if !seen.insert(i) {
                continue;
            }
            let n = g.node(i);
            steps.push(Step {
                ad: i,
                seq: n.seq,
                rule: n.rule.clone(),
                parents: n.parents.clone(),
                keeps_grad: n.keeps_grad,
            });
            stack.extend(n.children.iter().copied());
        }
        steps.sort_by_key(|s| s.seq);
        for s in &steps {
            g.retain(s.ad);
        }
        steps
    })
}

/// The tangents of a node's parents (None: that parent has none).
type Tangents = Vec<Option<Grad>>;

/// A forward pass's next step: the node's rule and its parents' tangents; None when the node
/// has its tangent already (a seed), has no rule, or no parent has a tangent.
fn step_inputs<'a>(
    s: &'a Step,
    ts: &HashMap<AdIndex, Grad>,
) -> Option<(&'a Arc<dyn Rule>, Tangents)> {
    if ts.contains_key(&s.ad) {
        return None;
    }
    let rule = s.rule.as_ref()?;
    let inputs: Tangents = s.parents.iter().map(|p| ts.get(p).cloned()).collect();
    inputs.iter().any(Option::is_some).then_some((rule, inputs))
}

/// The tangent of `out` given tangent `seed` at `from`: pushed through the nodes traced since
/// `start` on the way to `out` only (a traced closure's own nodes; `from` an array it captured
/// or one computed from such arrays alone), stopping at the nodes `stops` (`from` among them:
/// the other captured nodes are parents of their own, so what reaches them is not `from`'s
/// direct part), so that the rest of the graph is not walked. Not recorded; None where `out`
/// does not depend on `from` directly.
pub(crate) fn forward_within(
    out: AdIndex,
    from: AdIndex,
    seed: Grad,
    start: u64,
    stops: &[AdIndex],
) -> Result<Option<Grad>> {
    let held = Held(ancestors(&[out], start, stops)?);
    let _rec = RecordingGuard::set(false);
    let mut ts: HashMap<AdIndex, Grad> = HashMap::new();
    ts.insert(from, seed);
    for s in &held.0 {
        let Some((rule, inputs)) = step_inputs(s, &ts) else {
            continue;
        };
        if let Some(t) = rule.try_forward(&inputs)? {
            ts.insert(s.ad, t);
        }
    }
    let t = ts.remove(&out);
    drop(ts);
    drop(held);
    Ok(t)
}

/// Forward mode: push the tangents `seeds` through every node reachable from them (`to`: only
/// towards these nodes). Returns the tangent of every node reached.
pub(crate) fn forward(
    seeds: Vec<(AdIndex, Grad)>,
    to: Option<&[AdIndex]>,
) -> Result<HashMap<AdIndex, Grad>> {
    forward_with(seeds, to, false)
}

/// [`forward`] from several seeds where a seed computed from another gets its own tangent plus
/// what flows into it (Dr.Jit's `enqueue` + `traverse`), rather than its own alone.
pub(crate) fn forward_adding(seeds: Vec<(AdIndex, Grad)>) -> Result<HashMap<AdIndex, Grad>> {
    forward_inner(seeds, None, false, true)
}

/// [`forward`]; with `record` the pass is itself recorded in the AD graph (the tangents are
/// differentiable: a `kiln::jvp` inside a function being differentiated).
pub(crate) fn forward_with(
    seeds: Vec<(AdIndex, Grad)>,
    to: Option<&[AdIndex]>,
    record: bool,
) -> Result<HashMap<AdIndex, Grad>> {
    forward_inner(seeds, to, record, false)
}

fn forward_inner(
    seeds: Vec<(AdIndex, Grad)>,
    to: Option<&[AdIndex]>,
    record: bool,
    seeds_add: bool,
) -> Result<HashMap<AdIndex, Grad>> {
    let from: Vec<AdIndex> = seeds.iter().map(|s| s.0).collect();
    let mut held = Held(descendants(&from));
    if let Some(to) = to {
        // only the nodes on a path to a target matter
        let up = ancestors(to, 0, &[]);
        let keep: std::collections::HashSet<AdIndex> = match &up {
            Ok(v) => v.iter().map(|s| s.ad).collect(),
            Err(_) => held.0.iter().map(|s| s.ad).collect(),
        };
        if let Ok(v) = &up {
            release(v);
        }
        let (kept, dropped): (Vec<Step>, Vec<Step>) = std::mem::take(&mut held.0)
            .into_iter()
            .partition(|s| keep.contains(&s.ad));
        release(&dropped);
        held.0 = kept;
    }
    let steps = &held.0;
    let _rec = RecordingGuard::set(record);
    let mut ts: HashMap<AdIndex, Grad> = HashMap::new();
    for (ad, g) in seeds {
        accumulate(&mut ts, ad, g);
    }
    // rules each tangent went through unevaluated (see LONGEST_COTANGENT)
    let mut depth: HashMap<AdIndex, u32> = HashMap::new();
    for s in steps {
        // a seed's own tangent, taken out so that what flows into it is computed too
        let own = if seeds_add { ts.remove(&s.ad) } else { None };
        let Some((rule, inputs)) = step_inputs(s, &ts) else {
            if let Some(o) = own {
                ts.insert(s.ad, o);
            }
            continue;
        };
        let d = s
            .parents
            .iter()
            .filter_map(|p| depth.get(p))
            .max()
            .map_or(1, |d| d + 1);
        let t = match rule.try_forward(&inputs) {
            Ok(t) => t,
            Err(e) => {
                // the tangents go before the pass's references (`held`, declared first)
                return Err(e);
            }
        };
        let t = match (t, own) {
            (Some(t), Some(o)) => Some(o.plus(&t)),
            (t, o) => t.or(o),
        };
        if let Some(t) = t {
            if d >= LONGEST_COTANGENT && !kiln_core::is_evaluated(t.id()) {
                kiln_core::eval(&[t.id()])?;
                depth.insert(s.ad, 0);
            } else {
                depth.insert(s.ad, d);
            }
            ts.insert(s.ad, t);
        }
    }
    drop(held);
    Ok(ts)
}
