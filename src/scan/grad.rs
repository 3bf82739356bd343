//! The gradient of `kiln::scan` as a scan of its own (the MITMOT of PyTensor's `scan.txt`,
//! JAX's transposed scan), with the push-out of weight gradients.
//!
//! The forward is the plain scan, with its rewrites (the products over sequence rows pushed
//! out, the step frozen and replayed), keeping every carry state. While the user's body is at
//! hand, the step's vector-Jacobian product is recorded once as a frozen function: the body on
//! the carry of step `s` (fresh leaves) and row `t` of `xs` (`s`, or `len − 1 − s` read
//! backwards), then a backward pass from the cotangents of the new carry and of the `y`s' row of
//! step `s` (`s`, or `n − 1 − s` stored reversed) that stops at the arrays the body captured. What reaches a captured array is added to an accumulator in place; a matrix
//! product whose right operand is captured stores its `a` and `c` in row `s` of two buffers
//! instead of adding `aᵀ·c`. The scan's results get one node. Its backward replays the recorded
//! step from the last step to the first (to step `n − k` with `truncate_gradient(k)`; one launch
//! group per step, nothing traced), and then computes each deferred sum `Σ_s a_sᵀ·c_s` as one
//! product `Aᵀ·C` over all steps.
//!
//! A sequence with a gradient has its rows made leaves of the step too: each step stores its
//! row's cotangent in row `t` of the sequence's stacked cotangent (the gradient scan's `y`).
//!
//! It applies to first-order derivatives outside frozen functions' recordings; the caller falls
//! back to the scan run step by step with derivatives recorded otherwise, and when the step
//! cannot be recorded (a body that reads an array it was not given and the analysis did not see,
//! `KILN_FREEZE=0`). Forward mode replays a recorded tangent step (recorded beside the cotangent
//! step) from the first step to the last.

use super::erased::{Arrays, Erased};
use super::hook::{Hook, Installed, Subst};
use super::run::PushedRow;
use super::ScanReport;
use crate::ad::control::{fit, guard_second_order};
use crate::ad::deferred::pass_within;
use crate::ad::graph::{self, AdIndex, Rule};
use crate::ad::Grad;
use kiln_core::{Error, Handle, Op, Result, VarId, VarType};
use parking_lot::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

type V = Handle;

/// The body as the gradient scan calls it: the step number (a `u32` scalar), the carry and a row
/// of each `xs` to the new carry and the `y`s (flattened, with their nodes).
pub(super) type Step<'a> = dyn FnMut(&Erased, &[Erased], &[Erased]) -> Stepped + 'a;

/// A step's new carry and `y`s (flattened, with their nodes).
pub(super) type Stepped = Result<(Vec<Erased>, Vec<Erased>)>;

/// What the forward scan hands the gradient scan.
pub(super) struct Forward {
    /// The initial carry (with nodes).
    pub init: Vec<Erased>,
    /// The sequences (with nodes: a float sequence that carries a gradient gets the cotangents
    /// of its rows, a `y` of the gradient scan).
    pub xs: Vec<Erased>,
    /// The final carry and the stacked `y`s, detached.
    pub finals: Vec<Erased>,
    pub ys: Vec<Erased>,
    /// Per carry entry: its states, at least `n + 1` rows (more after `until`), in the order the
    /// steps ran.
    pub states: Vec<Erased>,
    /// The arrays the body captured (inputs of the recorded step).
    pub captured: Vec<Erased>,
    /// Per product of the body: the forward's product over every row of `xs` that replaced it;
    /// the recorded step reads its row too rather than multiplying again.
    pub pushed: Vec<Option<PushedRow>>,
    /// Per product of the body: every step's result, when the forward kept them (row `s` for
    /// step `s`); the recorded step reads its row rather than multiplying again.
    pub saved: Vec<Option<Erased>>,
    /// The arrays of `pushed` and `saved`, in product order (filled by `attach`): the step's last
    /// inputs.
    pub reads: Vec<Erased>,
    /// The steps run (fewer than the sequences' rows after `until` or with `n_steps`).
    pub n: usize,
    /// The sequences are read from their last row (row `len − 1 − s` at step `s`; all of one
    /// length `len`).
    pub reverse: bool,
    /// The `y`s are stored from the last row (row `n − 1 − s` for step `s`): JAX's `reverse`.
    pub ys_reversed: bool,
    /// Gradients flow back through the last this many steps only (PyTensor's
    /// `truncate_gradient`).
    pub truncate: Option<usize>,
}

fn float(ty: VarType) -> bool {
    matches!(ty, VarType::F32 | VarType::F64)
}

/// `ty` zeros of `len` elements in a buffer of their own (a replay's input must not be a
/// literal: its value would be baked in).
fn zeros(ty: VarType, len: usize) -> Result<Erased> {
    let z = kiln_core::literal(ty, 0, len);
    let id = kiln_core::make_opaque(z);
    kiln_core::dec_ref(z);
    Ok(Erased::own(id?, vec![len]))
}

/// `e` with shape `shape` (of as many elements).
fn shaped(mut e: Erased, shape: &[usize]) -> Erased {
    e.shape = shape.to_vec();
    e
}

/// `e` as an evaluated array with a buffer of its own (literals made opaque).
fn solid(e: Erased) -> Result<Erased> {
    if kiln_core::is_evaluated(e.id()) && kiln_core::literal_value(e.id()).is_none() {
        return Ok(e);
    }
    let id = kiln_core::make_opaque(e.id())?;
    Ok(Erased::own(id, e.shape.clone()))
}

/// The cotangents at positions `cts` of `args` made arrays of their own where one is the same
/// array as another argument (aliasing is part of a frozen function's key; the step was recorded
/// with placeholders of their own).
fn distinct(args: &mut [Erased], cts: std::ops::Range<usize>) -> Result<()> {
    for k in cts {
        let id = args[k].id();
        if args.iter().enumerate().any(|(j, e)| j != k && e.id() == id) {
            let copy = kiln_core::control::copy(id)?;
            args[k] = Erased::own(copy, args[k].shape.clone());
        }
    }
    Ok(())
}

/// A `u32` scalar holding `v`, in a buffer.
fn index(v: usize) -> Result<Erased> {
    let id = kiln_core::from_bytes(VarType::U32, &(v as u32).to_le_bytes())?;
    Ok(Erased::own(id, vec![]))
}

/// Row `at` of `src` (rows of `shape`), as a stepped scan reads a pushed-out product's row.
fn row(src: VarId, at: VarId, shape: &[usize]) -> Result<Erased> {
    let len: usize = shape.iter().product();
    Ok(Erased::own(
        super::hook::row_of(src, at, len)?,
        shape.to_vec(),
    ))
}

/// Write `value` (`len` elements, or one) into row `at` of `buf`, as a stepped scan stores a row.
fn store(buf: &mut Erased, value: VarId, at: VarId, len: usize) -> Result<()> {
    super::run::store_row(buf.h.id_mut(), value, &V::borrow(at), None, len, None)
}

/// What a step's pass reached outside the step, in the order it did: the captured nodes that got
/// cotangents (accumulators) and the deferred products `(node, type, m, k, n)`, each with the
/// sequence (its position among those with gradients) whose row was its left operand and the
/// right operand, when that row's gradient `c·bᵀ` was deferred too.
#[derive(Default, PartialEq)]
struct Found {
    reached: Vec<(AdIndex, VarType, usize)>,
    products: Vec<(AdIndex, VarType, usize, usize, usize)>,
    /// (`b` is a captured array older than the step, alive while the scan's node is built)
    lefts: Vec<Option<(usize, VarId)>>,
}

impl Found {
    /// The nodes reached, then those of the deferred products, each once.
    fn nodes(&self) -> Vec<AdIndex> {
        let mut v: Vec<AdIndex> = Vec::new();
        for node in self
            .reached
            .iter()
            .map(|r| r.0)
            .chain(self.products.iter().map(|p| p.0))
        {
            if !v.contains(&node) {
                v.push(node);
            }
        }
        v
    }
}

/// The shapes and types the recorded step works with.
struct Shapes {
    carry: Vec<(VarType, Vec<usize>)>,
    xs: Vec<(VarType, Vec<usize>)>,
    ys: Vec<(VarType, Vec<usize>)>,
    /// Per sequence: whether its rows are leaves of the step (a float sequence with a gradient).
    xs_grad: Vec<bool>,
    /// Per sequence: its rows.
    x_rows: Vec<usize>,
    /// A row's gradient through a deferred product may be deferred too: the sequences are read
    /// in step order and have as many rows as steps (`C·bᵀ` comes out in step order).
    defer_rows: bool,
    /// The `y`s are stored from the last row: row `n − 1 − s` for step `s`.
    ys_reversed: bool,
    /// The sequences are read from their last row (all of one length then).
    reverse: bool,
    n: usize,
    /// Per product of the body: `(elements, by step)` when the step reads it from the forward,
    /// pushed out over the rows of `xs` (row `t`) or saved at every step (row `s`, `by step`);
    /// those arrays are the last arguments, in product order.
    pushed: Vec<Option<(usize, bool)>>,
}

impl Shapes {
    /// Row `t` of each of `xs`, those of sequences with gradients on fresh leaves (returned too,
    /// one per such sequence).
    fn rows_at(&self, xs: &[Erased], t: VarId) -> Result<(Vec<Erased>, Vec<AdIndex>)> {
        let kinds = self.xs.iter().zip(&self.xs_grad);
        leafy_rows(xs, t, kinds.map(|((_, shape), &g)| (shape.as_slice(), g)))
    }

    /// The sequences with gradients (their positions in `xs`).
    fn grad_xs(&self) -> Vec<usize> {
        (0..self.xs.len()).filter(|&i| self.xs_grad[i]).collect()
    }

    /// The hook that makes the body read row `t` of the forward's pushed-out products (the last
    /// arguments of `args`) instead of multiplying again.
    fn hook(&self, args: &[Erased], s: VarId, t: VarId) -> Hook {
        let n_all = self.pushed.iter().flatten().count();
        let mut alls = args[args.len() - n_all..].iter();
        let subst = self
            .pushed
            .iter()
            .map(|p| match *p {
                // (the hook reads m·n elements; the product keeps the shape it was called with)
                Some((len, by_step)) => Subst::Row {
                    all: alls.next().expect("one array per product read").id(),
                    row: if by_step { s } else { t },
                    m: len,
                    n: 1,
                },
                None => Subst::Keep,
            })
            .collect();
        Hook::Step {
            subst,
            next: 0,
            saved: Vec::new(),
        }
    }

    /// The sequences' row read at step `s` (`len − 1 − s` when read from the last).
    fn t_of(&self, s: usize) -> usize {
        match self.x_rows.first() {
            Some(&len) if self.reverse => len - 1 - s,
            _ => s,
        }
    }

    /// The `y`s' row of step `s` (`s`, or `n − 1 − s` computed in the step).
    fn y_at(&self, s: VarId) -> Result<Handle> {
        if !self.ys_reversed {
            return Ok(Handle::borrow(s));
        }
        let last = Handle::own(kiln_core::literal(VarType::U32, self.n as u64 - 1, 1));
        Ok(Handle::own(kiln_core::op(Op::Sub, &[last.id(), s])?))
    }

    fn float_carry(&self) -> Vec<usize> {
        (0..self.carry.len())
            .filter(|&j| float(self.carry[j].0))
            .collect()
    }
    fn float_ys(&self) -> Vec<usize> {
        (0..self.ys.len())
            .filter(|&i| float(self.ys[i].0))
            .collect()
    }
}

/// Row `s` of every carry entry's states, the float ones on fresh leaves (returned too, one per
/// float entry).
fn carry_at(sh: &Shapes, states: &[Erased], s: VarId) -> Result<(Vec<Erased>, Vec<AdIndex>)> {
    let kinds = sh
        .carry
        .iter()
        .map(|(ty, shape)| (shape.as_slice(), float(*ty)));
    leafy_rows(states, s, kinds)
}

/// Row `at` of each of `srcs` (rows of the given shape), those marked on fresh leaves (returned
/// too, in order).
fn leafy_rows<'a>(
    srcs: &[Erased],
    at: VarId,
    kinds: impl Iterator<Item = (&'a [usize], bool)>,
) -> Result<(Vec<Erased>, Vec<AdIndex>)> {
    let (mut rows, mut leaves) = (Vec::with_capacity(srcs.len()), Vec::new());
    for (src, (shape, leafy)) in srcs.iter().zip(kinds) {
        let r = row(src.id(), at, shape)?;
        if leafy {
            let leaf = crate::ad::jax::new_leaf(r.id());
            leaves.push(leaf);
            rows.push(Erased::with_node(r.id(), shape.to_vec(), leaf));
        } else {
            rows.push(r);
        }
    }
    Ok((rows, leaves))
}

/// Whether a gradient scan may run now: first-order derivatives, no frozen function recording,
/// no enclosing symbolic trace, freezing on (the step is a recording).
pub(super) fn possible() -> bool {
    !crate::ad::higher_order()
        && !kiln_core::freeze::record::active()
        && !kiln_core::control::symbolic()
        && kiln_core::config::freeze_enabled()
}

/// One step's vector-Jacobian product. `args`: `[s, t, ct of each float carry entry, stacked ct
/// of each float y, states of each carry entry, each xs, captured…]`; `bufs` (when recording):
/// one accumulator per reached node, then `A` and `C` of each deferred product, then the stacked
/// cotangent of each sequence with a gradient (row `t` is written). Returns the cotangent of each
/// float carry entry at step `s`.
fn vjp_step(
    sh: &Shapes,
    step: &mut Step,
    args: &Arrays,
    mut bufs: Option<(&mut Arrays, &Found)>,
    found: &mut Found,
) -> Result<Arrays> {
    let (fc, fy) = (sh.float_carry(), sh.float_ys());
    let a = &args.0;
    let (s, t) = (a[0].id(), a[1].id());
    let ct_c = &a[2..2 + fc.len()];
    let ct_y = &a[2 + fc.len()..2 + fc.len() + fy.len()];
    let states = &a[2 + fc.len() + fy.len()..][..sh.carry.len()];
    let xs = &a[2 + fc.len() + fy.len() + sh.carry.len()..][..sh.xs.len()];
    let start = graph::with(|g| g.next_seq());
    let (carry, leaves) = carry_at(sh, states, s)?;
    let (rows, x_leaves) = sh.rows_at(xs, t)?;
    let hook = Installed::new(sh.hook(a, s, t));
    let stepped = step(&a[0], &carry, &rows);
    drop(hook.take());
    let (c2, y) = stepped?;
    let mut seeds = Vec::new();
    for (k, &j) in fc.iter().enumerate() {
        if let Some(e) = c2.get(j).filter(|e| e.ad() != 0) {
            let g = Grad::share(ct_c[k].id(), 0);
            seeds.push((e.ad(), fit(&g, e.numel(), kiln_core::size(g.id()))));
        }
    }
    for (k, &i) in fy.iter().enumerate() {
        if let Some(e) = y.get(i).filter(|e| e.ad() != 0) {
            let r = row(ct_y[k].id(), sh.y_at(s)?.id(), &sh.ys[i].1)?;
            seeds.push((e.ad(), Grad::share(r.id(), 0)));
        }
    }
    let rows_deferred = if sh.defer_rows {
        x_leaves.clone()
    } else {
        Vec::new()
    };
    let pass = pass_within(start, seeds, rows_deferred)?;
    // (the results' handles held the nodes the pass started from)
    drop((c2, y));
    let mut out = Vec::with_capacity(fc.len());
    for (&j, &leaf) in fc.iter().zip(&leaves) {
        let g = graph::with(|g| g.node_mut(leaf).grad.take());
        let (ty, shape) = &sh.carry[j];
        let len: usize = shape.iter().product();
        out.push(match g {
            Some(g) => {
                let g = fit(&g, len, kiln_core::size(g.id()));
                kiln_core::inc_ref(g.id());
                Erased::own(g.id(), shape.clone())
            }
            None => Erased::own(kiln_core::literal(*ty, 0, len), shape.clone()),
        });
    }
    drop(carry);
    // each sequence row's cotangent goes to row `t` of its stacked cotangent
    let x_grads: Vec<Option<Grad>> = x_leaves
        .iter()
        .map(|&leaf| graph::with(|g| g.node_mut(leaf).grad.take()))
        .collect();
    drop(rows);
    if let Some((b, expected)) = bufs.as_mut() {
        let first = expected.reached.len() + 2 * expected.products.len();
        for ((k, g), i) in x_grads.into_iter().enumerate().zip(sh.grad_xs()) {
            let len: usize = sh.xs[i].1.iter().product();
            if let Some(g) = g {
                let g = fit(&g, len, kiln_core::size(g.id()));
                store(&mut b.0[first + k], g.id(), t, len)?;
            }
        }
    }
    // (recording: the buffers were laid out by a first run, which this one must repeat — a scan
    // nested in the body runs differently inside a recording, say)
    let differs = || {
        Error::Scan(
            "a gradient scan's step reached other arrays when recorded than when first run (the scan runs step by step)"
                .into(),
        )
    };
    for (node, g) in pass.reached {
        let (ty, size) = graph::with(|gr| (gr.node(node).ty, gr.node(node).size));
        if !found.reached.iter().any(|r| r.0 == node) {
            found.reached.push((node, ty, size));
        }
        if let Some((b, expected)) = bufs.as_mut() {
            let at = expected
                .reached
                .iter()
                .position(|r| r.0 == node)
                .ok_or_else(differs)?;
            let g = fit(&g, size, kiln_core::size(g.id()));
            let sum = kiln_core::op(Op::Add, &[b.0[at].id(), g.id()])?;
            b.0[at] = Erased::own(sum, vec![size]);
        }
    }
    for (p, d) in pass.deferred.into_iter().enumerate() {
        let shape = (d.node, d.a.ty(), d.m, d.k, d.n);
        found.products.push(shape);
        let left = d.left.as_ref().and_then(|(leaf, b)| {
            let k = x_leaves.iter().position(|l| l == leaf)?;
            Some((k, b.id()))
        });
        found.lefts.push(left);
        if let Some((b, expected)) = bufs.as_mut() {
            if expected.products.get(p) != Some(&shape) {
                return Err(differs());
            }
            let at = expected.reached.len() + 2 * p;
            store(&mut b.0[at], d.a.id(), s, d.m * d.k)?;
            store(&mut b.0[at + 1], d.c.id(), s, d.m * d.n)?;
        }
    }
    Ok(Arrays(out))
}

/// One step's tangent (forward mode). `args`: `[s, t, tangent of each float carry entry,
/// states of each carry entry, each xs, captured…, tangent of each captured node, stacked tangent
/// of each sequence with a gradient]`; `bufs`: the
/// stacked tangent of each float `y` (the row of step `s` is written, `Shapes::y_at`). Returns the tangent of each float
/// carry entry after step `s`.
fn jvp_step(
    sh: &Shapes,
    step: &mut Step,
    args: &Arrays,
    bufs: &mut Arrays,
    nodes: &[AdIndex],
) -> Result<Arrays> {
    let (fc, fy) = (sh.float_carry(), sh.float_ys());
    let a = &args.0;
    let (s, t) = (a[0].id(), a[1].id());
    let tc = &a[2..2 + fc.len()];
    let states = &a[2 + fc.len()..][..sh.carry.len()];
    let xs = &a[2 + fc.len() + sh.carry.len()..][..sh.xs.len()];
    let nx = sh.grad_xs().len();
    let tn = &a[a.len() - nodes.len() - nx..a.len() - nx];
    let tx = &a[a.len() - nx..];
    let start = graph::with(|g| g.next_seq());
    let (carry, leaves) = carry_at(sh, states, s)?;
    let mut seeds = Vec::new();
    for (k, (&j, &leaf)) in fc.iter().zip(&leaves).enumerate() {
        let g = Grad::share(tc[k].id(), 0);
        seeds.push((leaf, fit(&g, carry[j].numel(), kiln_core::size(g.id()))));
    }
    for (&node, tv) in nodes.iter().zip(tn) {
        let size = graph::with(|g| g.node(node).size);
        let g = Grad::share(tv.id(), 0);
        seeds.push((node, fit(&g, size, kiln_core::size(g.id()))));
    }
    let (rows, x_leaves) = sh.rows_at(xs, t)?;
    for ((&leaf, tv), i) in x_leaves.iter().zip(tx).zip(sh.grad_xs()) {
        let r = row(tv.id(), t, &sh.xs[i].1)?;
        seeds.push((leaf, Grad::share(r.id(), 0)));
    }
    let (c2, y) = step(&a[0], &carry, &rows)?;
    let outs: Vec<AdIndex> = c2
        .iter()
        .chain(&y)
        .map(Erased::ad)
        .filter(|&a| a != 0)
        .collect();
    let ts = crate::ad::control::body_forward(&outs, start, seeds)?;
    let tangent = |e: &Erased, shape: &[usize]| -> Erased {
        let len: usize = shape.iter().product();
        match ts.get(&e.ad()).filter(|_| e.ad() != 0) {
            Some(g) => {
                let g = fit(g, len, kiln_core::size(g.id()));
                kiln_core::inc_ref(g.id());
                Erased::own(g.id(), shape.to_vec())
            }
            None => Erased::own(kiln_core::literal(e.ty, 0, len), shape.to_vec()),
        }
    };
    let out: Vec<Erased> = fc
        .iter()
        .map(|&j| tangent(&c2[j], &sh.carry[j].1))
        .collect();
    for (k, &i) in fy.iter().enumerate() {
        let v = tangent(&y[i], &sh.ys[i].1);
        store(&mut bufs.0[k], v.id(), sh.y_at(s)?.id(), v.numel())?;
    }
    drop((c2, y, carry, rows));
    Ok(Arrays(out))
}

/// Record `f` as a frozen function by calling it once on `args` and `bufs` (their values are
/// changed), and keep the recording callable after `f` is gone. `None`: it did not record (the
/// step read an array it was not given, `KILN_FREEZE=0`, an error).
fn record<'f>(
    label: &str,
    mut f: impl FnMut(&Arrays, &mut Arrays) -> Result<Arrays> + 'f,
    args: &Arrays,
    bufs: &mut Arrays,
) -> Option<Replay> {
    let bad = std::cell::Cell::new(false);
    let mut frozen = crate::freeze::freeze(|a: &Arrays, b: &mut Arrays| -> Arrays {
        f(a, b).unwrap_or_else(|e| {
            tracing::debug!(target: "scan", "scan {label}: recording a step of the gradient scan failed: {e}");
            bad.set(true);
            Arrays::default()
        })
    })
    .limit(1)
    .auto_opaque(false);
    let r = frozen.call(args, bufs);
    if let Err(e) = &r {
        tracing::debug!(target: "scan", "scan {label}: a step of the gradient scan was not recorded: {e}");
    }
    let ok = r.is_ok() && !bad.get() && frozen.stats().recordings == 1;
    let failed = Arc::new(AtomicBool::new(false));
    let flag = failed.clone();
    let mut frozen = frozen.with_fn(move |_: &Arrays, _: &mut Arrays| -> Arrays {
        flag.store(true, Ordering::Relaxed);
        Arrays::default()
    });
    let replay: Replay = Box::new(move |a: &Arrays, b: &mut Arrays| {
        let out = frozen.call(a, b)?;
        if failed.load(Ordering::Relaxed) {
            return Err(Error::Invalid(
                "kiln internal error: a recorded step of a gradient scan did not fit a later step; set KILN_FREEZE=0 to differentiate scans step by step, and please report it"
                    .into(),
            ));
        }
        Ok(out)
    });
    ok.then_some(replay)
}

/// The recorded step, callable after the user's body is gone: a replay, or an error when the
/// recording does not fit (it always should: every step has the same shapes).
type Replay = Box<dyn FnMut(&Arrays, &mut Arrays) -> Result<Arrays> + Send>;

/// Everything the scan's node keeps.
struct Shared {
    label: String,
    sh: Shapes,
    found: Found,
    replay: Mutex<Replay>,
    /// The forward's inputs and results the step reads: states, xs, captured.
    states: Vec<Erased>,
    xs: Vec<Erased>,
    captured: Vec<Erased>,
    n: usize,
    /// The first step that is differentiated (after `truncate_gradient`; 0: every step).
    first: usize,
    /// The hub's parents: the float entries of the initial carry that carry nodes (their
    /// positions among the float carry entries), then the captured nodes, then the sequences
    /// with gradients (`Shapes::grad_xs`).
    init_parents: Vec<usize>,
    captured_parents: Vec<AdIndex>,
    /// Per deferred product whose left operand was a sequence's row: that sequence (among those
    /// with gradients) and the right operand `b` (every row's gradient is `C·bᵀ`).
    lefts: Vec<Option<(usize, Handle)>>,
    /// All of the hub's parents, in order.
    parent_nodes: Vec<AdIndex>,
    /// Cotangents parked by the outputs' nodes: float carry entries, then float `y`s.
    cts: Mutex<Vec<Option<Grad>>>,
    /// The recorded tangent step, and the tangents a forward pass left for the outputs.
    tangent_step: Mutex<Replay>,
    tangents: Mutex<Vec<Option<Grad>>>,
}

/// Whether `step` has side effects (a scatter into an array it captured), found by tracing it
/// once on `carry` and `rows`, thrown away: such a body must run once per step, not again in a
/// gradient scan's recorded step.
pub(super) fn has_effects(step: &mut Step, carry: &[Erased], rows: &[Erased]) -> bool {
    let Ok(trace) = crate::control::Trace::enter() else {
        return true;
    };
    let s = Erased::own(kiln_core::literal(VarType::U32, 0, 1), vec![]);
    let out = crate::ad::suspend_grad(|| step(&s, carry, rows));
    let effects = trace.finish();
    let any = out.is_err() || !effects.ids().is_empty();
    drop((out, effects));
    // (what the trace refused, a product on placeholders, is nobody's business after it)
    if !kiln_core::control::symbolic() {
        drop(kiln_core::control::take_refusal());
    }
    any
}

/// Record the step's VJP (two runs: one to find what its pass reaches, one recorded) and attach
/// the gradient scan's node to the results. `None`: it does not apply after all (positions past
/// `u32`, a step that cannot be recorded or runs differently when recorded, a first backward
/// that fails): the caller runs the scan step by step.
pub(super) fn attach(
    mut fw: Forward,
    step: &mut Step,
    label: &str,
    report: &mut ScanReport,
) -> Result<Option<(Vec<Erased>, Vec<Erased>)>> {
    let sh = shapes(&fw);
    // the sequences' nodes become the hub's last parents; the step reads their values only
    let xs_parents: Vec<AdIndex> = sh.grad_xs().iter().map(|&i| fw.xs[i].ad()).collect();
    for &node in &xs_parents {
        graph::inc_ref(node);
    }
    let _xs_refs = NodeRefs(xs_parents.clone());
    fw.xs = fw
        .xs
        .iter()
        .map(|x| Erased::borrow(x.id(), x.shape.clone()))
        .collect();
    fw.reads = fw
        .pushed
        .iter()
        .zip(fw.saved.iter().chain(std::iter::repeat(&None)))
        .filter_map(|(p, v)| match (p, v) {
            (Some(p), _) => Some(p.all.clone()),
            (None, Some(v)) => Some(v.clone()),
            (None, None) => None,
        })
        .collect();
    if too_long(&fw) {
        return Ok(None);
    }
    let mut args = vjp_args(&sh, &fw)?;
    let mut found = Found::default();
    if let Err(e) = vjp_step(&sh, step, &args, None, &mut found) {
        tracing::debug!(target: "scan", "scan {label}: the gradient step's first run failed ({e}): the scan runs step by step");
        return Ok(None);
    }
    if found
        .products
        .iter()
        .any(|p| long(fw.n * p.2 * p.3.max(p.4)))
    {
        return Ok(None);
    }
    // captured arrays with gradients that are lazy expressions (`w * 0.5` given a gradient, a
    // transpose taken outside the body) are evaluated and become inputs of the recorded step: a
    // recording reads only its inputs' buffers
    for node in found.nodes() {
        if let Some(var) = graph::with(|g| g.live_var(node)) {
            let id = VarId(var);
            let known = fw.captured.iter().chain(&fw.reads).any(|e| e.id() == id);
            if !known && kiln_core::literal_value(id).is_none() {
                kiln_core::eval(&[id])?;
                fw.captured.push(Erased::borrow(id, vec![]));
                args = vjp_args(&sh, &fw)?;
            }
        }
    }
    let mut bufs = buffers(&found, &sh, fw.n)?;
    let mut again = Found::default();
    let replay = record(
        label,
        |a: &Arrays, b: &mut Arrays| vjp_step(&sh, step, a, Some((b, &found)), &mut again),
        &args,
        &mut bufs,
    );
    let Some(replay) = replay.filter(|_| again == found) else {
        return Ok(None);
    };
    drop(bufs);
    let fc = sh.float_carry();
    // the node's parents: the initial carry's float entries with nodes, then the captured nodes,
    // then the sequences with gradients
    let init_parents: Vec<usize> = (0..fc.len())
        .filter(|&k| fw.init[fc[k]].ad() != 0)
        .collect();
    let captured_parents = found.nodes();
    let parents: Vec<AdIndex> = init_parents
        .iter()
        .map(|&k| fw.init[fc[k]].ad())
        .chain(captured_parents.iter().copied())
        .chain(xs_parents.iter().copied())
        .collect();
    if parents.is_empty() {
        // nothing with a gradient reaches the results
        note(report, label, &found, &fw);
        let outs: Vec<Erased> = fw.finals.into_iter().chain(fw.ys).collect();
        return Ok(Some(split(outs, sh.carry.len())));
    }
    let Some(tangent_step) = record_tangent(&sh, step, &fw, &captured_parents, label)? else {
        return Ok(None);
    };
    note(report, label, &found, &fw);
    let n_float = fc.len() + sh.float_ys().len();
    let lefts = found
        .lefts
        .iter()
        .map(|l| l.map(|(k, b)| (k, Handle::borrow(b))))
        .collect();
    let outs: Vec<Erased> = fw.finals.into_iter().chain(fw.ys).collect();
    let mut captured = fw.captured;
    captured.extend(fw.reads);
    let shared = Arc::new(Shared {
        label: label.to_string(),
        sh,
        found,
        replay: Mutex::new(replay),
        states: fw.states,
        xs: fw.xs,
        captured,
        n: fw.n,
        first: fw.n - fw.truncate.unwrap_or(fw.n).min(fw.n),
        init_parents,
        captured_parents,
        lefts,
        parent_nodes: parents,
        cts: Mutex::new((0..n_float).map(|_| None).collect()),
        tangent_step: Mutex::new(tangent_step),
        tangents: Mutex::new((0..n_float).map(|_| None).collect()),
    });
    Ok(Some(hang(shared, outs)))
}

/// The shapes the recorded step works with, and where the forward's products come from.
fn shapes(fw: &Forward) -> Shapes {
    let rows_of = |e: &Erased| (e.ty, e.shape[1..].to_vec());
    Shapes {
        carry: fw.init.iter().map(|e| (e.ty, e.shape.clone())).collect(),
        xs: fw.xs.iter().map(rows_of).collect(),
        ys: fw.ys.iter().map(rows_of).collect(),
        xs_grad: fw.xs.iter().map(|x| float(x.ty) && x.ad() != 0).collect(),
        x_rows: fw.xs.iter().map(|x| x.shape[0]).collect(),
        defer_rows: !fw.reverse && fw.xs.iter().all(|x| x.shape[0] == fw.n),
        ys_reversed: fw.ys_reversed,
        reverse: fw.reverse,
        n: fw.n,
        pushed: fw
            .pushed
            .iter()
            .zip(fw.saved.iter().chain(std::iter::repeat(&None)))
            .map(|(p, v)| match (p, v) {
                (Some(p), _) => Some((p.m * p.n, false)),
                (None, Some(v)) => Some((v.shape[1..].iter().product(), true)),
                (None, None) => None,
            })
            .collect(),
    }
}

/// Whether a position in an array the step reads or writes could pass `u32` (rows are read and
/// written at `u32` positions).
fn long(len: usize) -> bool {
    len as u64 >= u32::MAX as u64
}

fn too_long(fw: &Forward) -> bool {
    let size = |e: &Erased| kiln_core::size(e.id());
    fw.states
        .iter()
        .chain(&fw.xs)
        .chain(&fw.ys)
        .chain(&fw.reads)
        .any(|e| long(size(e)))
}

/// The recorded step's inputs on placeholder cotangents (their values do not matter):
/// `[s, t, ct of each float carry entry, stacked ct of each float y, states, xs, captured…, the
/// forward's products…]`.
fn vjp_args(sh: &Shapes, fw: &Forward) -> Result<Arrays> {
    let n = fw.n;
    let mut args = vec![index(n - 1)?, index(sh.t_of(n - 1))?];
    for j in sh.float_carry() {
        args.push(shaped(
            zeros(sh.carry[j].0, fw.init[j].numel())?,
            &sh.carry[j].1,
        ));
    }
    for i in sh.float_ys() {
        args.push(zeros(sh.ys[i].0, fw.ys[i].numel())?);
    }
    args.extend(fw.states.iter().cloned());
    args.extend(fw.xs.iter().cloned());
    args.extend(fw.captured.iter().cloned());
    args.extend(fw.reads.iter().cloned());
    Ok(Arrays(args))
}

/// The hub node over `shared`'s parents and a node per float result (`outs`: the final carry,
/// then the stacked `y`s) under it: the results, split into carry and `y`s.
fn hang(shared: Arc<Shared>, outs: Vec<Erased>) -> (Vec<Erased>, Vec<Erased>) {
    let hub = graph::new_node(
        VarType::F64,
        1,
        shared.parent_nodes.clone(),
        Some(Arc::new(Hub(shared.clone()))),
    );
    let n_carry = shared.sh.carry.len();
    let mut k = 0;
    let outs: Vec<Erased> = outs
        .into_iter()
        .map(|e| {
            if !float(e.ty) {
                return e;
            }
            let rule = Output {
                shared: shared.clone(),
                k,
            };
            k += 1;
            let ad = graph::new_node(e.ty, e.numel(), vec![hub], Some(Arc::new(rule)));
            Erased::with_node(e.id(), e.shape.clone(), ad)
        })
        .collect();
    graph::dec_ref(hub);
    split(outs, n_carry)
}

/// Record the tangent step on placeholders (`None`: it did not record).
fn record_tangent(
    sh: &Shapes,
    step: &mut Step,
    fw: &Forward,
    nodes: &[AdIndex],
    label: &str,
) -> Result<Option<Replay>> {
    let n = fw.n;
    let mut args = vec![index(0)?, index(sh.t_of(0))?];
    for j in sh.float_carry() {
        args.push(shaped(
            zeros(sh.carry[j].0, fw.init[j].numel())?,
            &sh.carry[j].1,
        ));
    }
    args.extend(fw.states.iter().cloned());
    args.extend(fw.xs.iter().cloned());
    args.extend(fw.captured.iter().cloned());
    args.extend(fw.reads.iter().cloned());
    for &node in nodes {
        let (ty, size) = graph::with(|g| (g.node(node).ty, g.node(node).size));
        args.push(zeros(ty, size)?);
    }
    for i in sh.grad_xs() {
        args.push(zeros(fw.xs[i].ty, fw.xs[i].numel())?);
    }
    let mut bufs = tangent_buffers(sh, n)?;
    Ok(record(
        label,
        |a: &Arrays, b: &mut Arrays| jvp_step(sh, step, a, b, nodes),
        &Arrays(args),
        &mut bufs,
    ))
}

/// The stacked tangent of each float `y`, zeros.
fn tangent_buffers(sh: &Shapes, n: usize) -> Result<Arrays> {
    sh.float_ys()
        .into_iter()
        .map(|i| zeros(sh.ys[i].0, n * sh.ys[i].1.iter().product::<usize>()))
        .collect::<Result<_>>()
        .map(Arrays)
}

fn split(mut outs: Vec<Erased>, n_carry: usize) -> (Vec<Erased>, Vec<Erased>) {
    let ys = outs.split_off(n_carry);
    (outs, ys)
}

/// The step's buffers: a zero accumulator per reached node, `A`, `C` (every step's rows) per
/// deferred product, and the stacked cotangent of each sequence with a gradient.
fn buffers(found: &Found, sh: &Shapes, n: usize) -> Result<Arrays> {
    let mut b = Vec::new();
    for &(_, ty, size) in &found.reached {
        b.push(zeros(ty, size)?);
    }
    for &(_, ty, m, k, nn) in &found.products {
        b.push(zeros(ty, n * m * k)?);
        b.push(zeros(ty, n * m * nn)?);
    }
    for i in sh.grad_xs() {
        let (ty, row) = &sh.xs[i];
        b.push(zeros(*ty, sh.x_rows[i] * row.iter().product::<usize>())?);
    }
    Ok(Arrays(b))
}

/// The report says what the gradient scan does.
fn note(report: &mut ScanReport, label: &str, found: &Found, fw: &Forward) {
    let n = fw.n;
    report.mode = "differentiated, gradient scan";
    let to = match fw.truncate.filter(|&k| k < n) {
        Some(k) => format!("back through the last {k} step(s) only (truncate_gradient)"),
        None => "to the first".into(),
    };
    report.mode_reason = format!("an input carries a gradient: the forward ran as the plain scan keeping its carries, and the backward replays the step's recorded vector-Jacobian product from the last step {to}");
    report.grad_matmuls_pushed_out = found.products.len();
    for &(_, _, m, k, nn) in &found.products {
        let msg = format!(
            "gradient push-out: the gradient of a captured [{k}, {nn}] matrix, Σ over {n} steps of a [{m}, {k}]ᵀ·[{m}, {nn}] product, is one [{k}, {}]·[{}, {nn}] product after the gradient scan",
            n * m,
            n * m
        );
        tracing::info!(target: "scan", "scan {label}: {msg}");
        report.rewrites.push(msg);
    }
    for (&(_, _, m, k, nn), _) in found
        .products
        .iter()
        .zip(&found.lefts)
        .filter(|p| p.1.is_some())
    {
        let msg = format!(
            "gradient push-out: the rows' gradient of a sequence read as the [{m}, {k}] left operand of a product with a captured [{k}, {nn}] matrix is one [{}, {nn}]·[{nn}, {k}] product after the gradient scan",
            n * m
        );
        tracing::info!(target: "scan", "scan {label}: {msg}");
        report.rewrites.push(msg);
    }
}

impl Shared {
    /// The forward pass: the recorded tangent step replayed from the first step to the last,
    /// from the tangents of the hub's parents; the outputs' tangents are left in `tangents`.
    fn forward(&self, tangents: &[Option<Grad>]) -> Result<()> {
        // (what an earlier pass left and no output took)
        self.tangents.lock().iter_mut().for_each(|t| *t = None);
        let fc = self.sh.float_carry();
        let mut tc = Vec::with_capacity(fc.len());
        for (k, &j) in fc.iter().enumerate() {
            let (ty, shape) = &self.sh.carry[j];
            let len: usize = shape.iter().product();
            let given = self
                .init_parents
                .iter()
                .position(|&p| p == k)
                .and_then(|p| tangents.get(p).cloned().flatten());
            tc.push(match given {
                Some(g) => {
                    let g = fit(&g, len, kiln_core::size(g.id()));
                    kiln_core::inc_ref(g.id());
                    solid(Erased::own(g.id(), shape.clone()))?
                }
                None => shaped(zeros(*ty, len)?, shape),
            });
        }
        let mut tn = Vec::with_capacity(self.captured_parents.len());
        for (i, &node) in self.captured_parents.iter().enumerate() {
            let (ty, size) = graph::with(|g| (g.node(node).ty, g.node(node).size));
            tn.push(
                match tangents.get(self.init_parents.len() + i).cloned().flatten() {
                    Some(g) => {
                        let g = fit(&g, size, kiln_core::size(g.id()));
                        kiln_core::inc_ref(g.id());
                        solid(Erased::own(g.id(), vec![size]))?
                    }
                    None => zeros(ty, size)?,
                },
            );
        }
        let first_x = self.init_parents.len() + self.captured_parents.len();
        let mut tx = Vec::new();
        for (k, i) in self.sh.grad_xs().into_iter().enumerate() {
            let (ty, row) = &self.sh.xs[i];
            let len = self.sh.x_rows[i] * row.iter().product::<usize>();
            tx.push(match tangents.get(first_x + k).cloned().flatten() {
                Some(g) => {
                    let g = fit(&g, len, kiln_core::size(g.id()));
                    kiln_core::inc_ref(g.id());
                    solid(Erased::own(g.id(), vec![len]))?
                }
                None => zeros(*ty, len)?,
            });
        }
        if self.first > 0 {
            // (truncated: the steps before `first` pass no tangent on, the initial carry's
            // included, as when they run with derivatives suspended)
            for (e, &j) in tc.iter_mut().zip(&fc) {
                let (ty, shape) = &self.sh.carry[j];
                *e = shaped(zeros(*ty, shape.iter().product())?, shape);
            }
        }
        let mut bufs = tangent_buffers(&self.sh, self.n)?;
        let mut replay = self.tangent_step.lock();
        for s in self.first..self.n {
            let t = self.sh.t_of(s);
            let mut a = vec![index(s)?, index(t)?];
            a.append(&mut tc);
            a.extend(self.states.iter().cloned());
            a.extend(self.xs.iter().cloned());
            a.extend(self.captured.iter().cloned());
            let first_tn = a.len();
            a.extend(tn.iter().cloned());
            a.extend(tx.iter().cloned());
            distinct(&mut a, 2..2 + fc.len())?;
            let n_tn = tn.len() + tx.len();
            distinct(&mut a, first_tn..first_tn + n_tn)?;
            let out = replay(&Arrays(a), &mut bufs)?;
            tc = out.0.into_iter().map(solid).collect::<Result<_>>()?;
        }
        drop(replay);
        let mut ts = self.tangents.lock();
        for (k, e) in tc.into_iter().chain(bufs.0).enumerate() {
            ts[k] = Some(Grad::share(e.id(), 0));
        }
        Ok(())
    }

    /// The backward pass: the recorded step replayed from the last step to the first, then the
    /// deferred products. Per hub parent, its cotangent.
    fn backward(&self) -> Result<Vec<Option<Grad>>> {
        let (fc, fy) = (self.sh.float_carry(), self.sh.float_ys());
        let parked: Vec<Option<Grad>> = std::mem::take(&mut *self.cts.lock());
        *self.cts.lock() = (0..fc.len() + fy.len()).map(|_| None).collect();
        let mut ct_c = Vec::with_capacity(fc.len());
        for (k, &j) in fc.iter().enumerate() {
            let (ty, shape) = &self.sh.carry[j];
            let len: usize = shape.iter().product();
            let e = match parked.get(k).and_then(Option::as_ref) {
                Some(g) => {
                    let g = fit(g, len, kiln_core::size(g.id()));
                    kiln_core::inc_ref(g.id());
                    solid(Erased::own(g.id(), shape.clone()))?
                }
                None => shaped(zeros(*ty, len)?, shape),
            };
            ct_c.push(e);
        }
        let mut ct_y = Vec::with_capacity(fy.len());
        for (k, &i) in fy.iter().enumerate() {
            let (ty, row) = &self.sh.ys[i];
            let len = self.n * row.iter().product::<usize>();
            ct_y.push(match parked.get(fc.len() + k).and_then(Option::as_ref) {
                Some(g) => {
                    let g = fit(g, len, kiln_core::size(g.id()));
                    kiln_core::inc_ref(g.id());
                    solid(Erased::own(g.id(), vec![len]))?
                }
                None => zeros(*ty, len)?,
            });
        }
        drop(parked);
        let mut bufs = buffers(&self.found, &self.sh, self.n)?;
        let mut replay = self.replay.lock();
        for s in (self.first..self.n).rev() {
            let t = self.sh.t_of(s);
            let mut a = vec![index(s)?, index(t)?];
            a.append(&mut ct_c);
            a.extend(ct_y.iter().cloned());
            a.extend(self.states.iter().cloned());
            a.extend(self.xs.iter().cloned());
            a.extend(self.captured.iter().cloned());
            distinct(&mut a, 2..2 + fc.len() + fy.len())?;
            let out = replay(&Arrays(a), &mut bufs)?;
            ct_c = out.0.into_iter().map(solid).collect::<Result<_>>()?;
        }
        drop(replay);
        // (truncated: nothing reaches the initial carry)
        let mut grads: Vec<Option<Grad>> = self
            .init_parents
            .iter()
            .map(|&k| (self.first == 0).then(|| Grad::share(ct_c[k].id(), 0)))
            .collect();
        let nr = self.found.reached.len();
        for &node in &self.captured_parents {
            // (handles: every partial sum is released on every path out, errors included)
            let mut sum: Option<Handle> = None;
            let mut add = |h: Handle| -> Result<()> {
                sum = Some(match sum.take() {
                    None => h,
                    Some(s) => Handle::own(kiln_core::op(Op::Add, &[s.id(), h.id()])?),
                });
                Ok(())
            };
            for (i, r) in self.found.reached.iter().enumerate() {
                if r.0 == node {
                    add(Handle::borrow(bufs.0[i].id()))?;
                }
            }
            for (p, &(q, _, m, k, nn)) in self.found.products.iter().enumerate() {
                if q == node {
                    let (a, c) = (bufs.0[nr + 2 * p].id(), bufs.0[nr + 2 * p + 1].id());
                    let trans = kiln_core::Trans { a: true, b: false };
                    add(Handle::own(kiln_core::matmul_t(
                        a,
                        c,
                        k,
                        self.n * m,
                        nn,
                        trans,
                    )?))?;
                }
            }
            grads.push(sum.map(|h| Grad::own(h.into_id(), 0)));
        }
        // a sequence's gradient: the rows each step stored, plus `C·bᵀ` for every product whose
        // left operand was its row (deferred), each one product over all steps
        let first = nr + 2 * self.found.products.len();
        for k in 0..self.sh.grad_xs().len() {
            let mut sum = Handle::borrow(bufs.0[first + k].id());
            for (p, &(_, _, m, kk, nn)) in self.found.products.iter().enumerate() {
                let Some((_, b)) = self.lefts[p].as_ref().filter(|l| l.0 == k) else {
                    continue;
                };
                let c = bufs.0[nr + 2 * p + 1].id();
                let trans = kiln_core::Trans { a: false, b: true };
                let prod = Handle::own(kiln_core::matmul_t(c, b.id(), self.n * m, nn, kk, trans)?);
                sum = Handle::own(kiln_core::op(Op::Add, &[sum.id(), prod.id()])?);
            }
            grads.push(Some(Grad::own(sum.into_id(), 0)));
        }
        Ok(grads)
    }
}

/// The node every result of the scan hangs from: its backward is the gradient scan.
struct Hub(Arc<Shared>);

impl Rule for Hub {
    fn name(&self) -> &'static str {
        "scan"
    }
    fn backward(&self, _token: &Grad) -> Vec<Option<Grad>> {
        let grads = match self.0.backward() {
            Ok(g) => g,
            Err(e) => panic!(
                "kiln: scan {}: its gradient scan failed: {e} (set KILN_FREEZE=0 to differentiate scans step by step)",
                self.0.label
            ),
        };
        // a pass that records itself gets gradients that refuse to be differentiated again
        // (the replayed steps recorded no rule; a scan inside `kiln::grad` or `hvp` records its
        // steps instead)
        let parents = &self.0.parent_nodes;
        grads
            .into_iter()
            .map(|g| g.map(|g| guard_second_order(g, parents, "a gradient scan")))
            .collect()
    }
    fn forward(&self, _tangents: &[Option<Grad>]) -> Option<Grad> {
        None
    }
    fn try_forward(&self, tangents: &[Option<Grad>]) -> Result<Option<Grad>> {
        if tangents.iter().all(Option::is_none) {
            return Ok(None);
        }
        self.0.forward(tangents)?;
        Ok(Some(Grad::of(crate::array::Array::<f64>::scalar(0.0))))
    }
}

/// One float result of the scan (final carry entry or stacked `y`): parks its cotangent for the
/// hub.
struct Output {
    shared: Arc<Shared>,
    k: usize,
}

impl Rule for Output {
    fn name(&self) -> &'static str {
        "scan"
    }
    fn backward(&self, ct: &Grad) -> Vec<Option<Grad>> {
        let mut cts = self.shared.cts.lock();
        cts[self.k] = Some(match cts[self.k].take() {
            Some(old) => old.plus(ct),
            None => ct.clone(),
        });
        vec![Some(Grad::of(crate::array::Array::<f64>::scalar(0.0)))]
    }
    fn forward(&self, _token: &[Option<Grad>]) -> Option<Grad> {
        self.shared.tangents.lock()[self.k].take()
    }
}

/// References to AD nodes, released when dropped (also on an early return).
struct NodeRefs(Vec<AdIndex>);

impl Drop for NodeRefs {
    fn drop(&mut self) {
        for &node in &self.0 {
            graph::dec_ref(node);
        }
    }
}
