//! Gradients of stencils, in both modes.
//!
//! A stencil's value at lane `y` is `f(taps)`, each tap `k` the input at `B(y + o_k)` (`B`: the
//! boundary rule). While the application is traced, each tap's per-lane partial `p_k = ∂f/∂tap_k`
//! is traced too, by one reverse pass through the kernel closure with the taps as leaves (the
//! closure is borrowed: a backward pass later cannot call it again, so what it needs is built
//! now, lazily — nothing runs unless a pass asks for it). The kernel must compute each lane from
//! its own taps (no reduction or gather over them): that is checked, and refused otherwise.
//!
//! - Forward mode is `Σ_k p_k · tangent(B(y + o_k))`, a stencil over the tangents.
//! - Reverse mode is `adj(x) = Σ_k (ct · p_k)(x − o_k)`, a stencil with mirrored taps, run with
//!   the same interior/border split as the forward (the interior is plain shifted loads; the
//!   border masks the lanes `x − o_k` that did not compute). For an affine kernel the `p_k` are
//!   constants, so the adjoint reads the cotangent alone, like the forward reads its input; for
//!   others the products `ct · p_k` are evaluated first (one kernel), then read at their offsets.
//! - For `Nearest`, `Reflect` and `Mirror`, reads outside the array land on an element inside: the
//!   mass a border lane read there is scattered back to it.
//!
//! An input of another shape than the first gets its gradient by scatter-adding every tap's
//! contribution (exact for every boundary, at scatter speed).
//!
//! Arrays with gradients that the kernel captures — a weight of one element, a field of one
//! element per lane read at the lane itself, or what the kernel computes from captured arrays
//! alone (an element, a sum, a gather) — are differentiated too: the partials trace finds them
//! where the walk back from the value leaves the trace (older nodes) or meets a node that mixes
//! lanes but reads no tap, takes each one's per-lane partial `p_w` by a forward pass from it
//! through the trace alone, and the node gets them as parents: reverse mode gives `ct · p_w`
//! (summed for a weight), forward mode adds `p_w · t_w`. The graph beyond them is neither
//! walked nor consumed by these passes. A kernel that mixes the lanes of its taps is refused.
//!
//! This rule is first order and reads at constant offsets. Inside a transformation whose
//! derivatives are differentiated again (`kiln::hvp`, a nested `grad`), and for an application
//! that reads at value-dependent offsets (`at_var`), `Stencil::apply` records the application as
//! gathers of its inputs instead (`Ctx::recorded`), which any order differentiates (the
//! adjoint is then scatter-adds: exact, slower than the mirrored stencil).

use super::{
    coordinates, fold_coordinate, interior_mask, readable_at_offsets, Boundary, Ctx, Neighborhood,
    Params, Rel,
};
use crate::ad::control::{lane_local_captures, Nodes};
use crate::ad::graph::{self, Rule};
use crate::ad::Grad;
use crate::array::{ok, Array, Bool, Int64};
use crate::memory::gather;
use crate::memory::scatter_reduce_masked;
use crate::ops::select;
use crate::tensor::Tensor;
use crate::types::Float;
use kiln_core::stencil::StencilMeta;
use kiln_core::{Error, Op, ReduceOp, Result, Scalar, VarType};
use parking_lot::Mutex;
use std::rc::Rc;
use std::sync::Arc;

/// A read made a leaf: input, offset as written, the leaf.
pub(super) struct Leaf {
    input: usize,
    off: Vec<i64>,
    grad: Grad,
}

/// `value`, the read of `input` at `off`, or the leaf that stands for it while partials are
/// traced (one leaf per input and offset, however often the kernel reads it).
pub(super) fn seeded<T: Scalar>(ctx: &Ctx, input: usize, off: &[i64], value: Array<T>) -> Array<T> {
    if !ctx.seed || !differentiable(T::TYPE) {
        return value;
    }
    let mut leaves = ctx.leaves.borrow_mut();
    if let Some(l) = leaves.iter().find(|l| l.input == input && l.off == off) {
        return l.grad.array::<T>();
    }
    let plain = value.detach();
    let ad = crate::ad::jax::new_leaf(plain.id());
    let leaf = plain.with_ad(ad);
    leaves.push(Leaf {
        input,
        off: off.to_vec(),
        grad: Grad::of(leaf.clone()),
    });
    leaf
}

fn differentiable(ty: VarType) -> bool {
    matches!(ty, VarType::F32 | VarType::F64)
}

/// The error for a kernel that captured an array carrying a gradient of another size than one
/// element or one per lane of the domain.
fn captured_refusal(name: &str, size: usize, ty: VarType, lanes: usize) -> Error {
    Error::NotDifferentiable {
        construct: "stencil".into(),
        detail: format!(
            "the kernel applied to `{name}` ({lanes} lanes) captures a {size}-element {ty} array that carries a gradient; a captured array is differentiated when it has one element (a weight) or one per lane (a field read at the lane itself) — pass an array read at other positions as a relatively indexed input (a tuple of inputs), or `detach()` it"
        ),
    }
}

/// What `record` needs of one application being traced.
pub(super) struct Application<'a, U: Scalar> {
    pub ctx: &'a Rc<Ctx>,
    /// The first input's name (for errors).
    pub name: &'a str,
    /// The neighbourhood (declared or inferred): the forward's interior.
    pub nb: &'a Neighborhood,
    pub shapes: &'a [Vec<usize>],
    pub ids: &'a [kiln_core::VarId],
    /// Each input's AD node (0: none).
    pub ads: &'a [u32],
    /// The node of `out` when its values stand at the border (`apply_into`, `Skip`, no `cval`).
    pub out_ad: u32,
    /// Trace the kernel in a context (`false`: no shifted-pointer reads).
    pub trace: &'a dyn Fn(&Rc<Ctx>, bool) -> Array<U>,
    /// The stencil's cache of constant partials and the signature of this application's value.
    pub cache: Option<(&'a Mutex<Option<CachedPartials>>, kiln_core::Signature)>,
}

/// How many variables a kernel's value may have for its partials to be cached.
pub(super) const SIGNATURE_LIMIT: usize = 512;

/// An affine kernel's partials (constants), kept under what they follow from: the structure of
/// the traced value, the boundary rule and the output type. A time loop applies one stencil at
/// every step; tracing the kernel again with its reads as AD leaves and running a reverse pass
/// through it, only to find the same constants, cost about as much as the rest of the step.
pub(super) struct CachedPartials {
    key: (kiln_core::Signature, Boundary, VarType),
    /// Per read (input, offset): its partial, if it has one.
    partials: Vec<(usize, Vec<i64>, Option<Constant>)>,
}

/// A constant partial: its type, bits and whether it is one element (else one per lane).
type Constant = (VarType, u64, bool);

impl CachedPartials {
    /// The partials as literals over `n` lanes.
    fn rebuild(&self, n: usize) -> Vec<Partial> {
        self.partials
            .iter()
            .map(|(i, off, p)| {
                let g = p.map(|(ty, bits, one)| {
                    Grad::own(kiln_core::literal(ty, bits, if one { 1 } else { n }), 0)
                });
                (*i, off.clone(), g)
            })
            .collect()
    }

    /// `ps` kept, if every one is a constant.
    fn of(key: (kiln_core::Signature, Boundary, VarType), ps: &[Partial]) -> Option<Self> {
        let mut partials = Vec::with_capacity(ps.len());
        for (i, off, g) in ps {
            let p = match g {
                None => None,
                Some(g) => {
                    let bits = kiln_core::literal_value(g.id())?;
                    Some((g.ty(), bits, kiln_core::size(g.id()) == 1))
                }
            };
            partials.push((*i, off.clone(), p));
        }
        Some(CachedPartials { key, partials })
    }
}

/// One input that carries a gradient.
struct Input {
    ty: VarType,
    shape: Vec<usize>,
    /// Its distinct offsets read.
    taps: Vec<Vec<i64>>,
    /// Per tap: `∂f/∂tap` at the lane (None: the value does not depend on it).
    p: Vec<Option<Grad>>,
    /// Every `p` is a constant (the kernel is affine in this input's taps).
    affine: bool,
    /// Its gradient is scatter-added (an input of another shape than the domain).
    scattered: bool,
    /// Border lanes that read outside and land inside (`Nearest`, `Reflect`, `Mirror`).
    fold: Option<Fold>,
}

struct Fold {
    /// Flat positions of the border lanes, and their coordinates.
    lanes: Int64,
    coords: Vec<Int64>,
    /// Per tap, for an affine kernel: the (constant) partial at those lanes.
    p: Vec<Option<Grad>>,
}

/// An array with a gradient that the kernel captured: one element (a weight every lane reads)
/// or one per lane (a field read at the lane itself).
struct Weight {
    ty: VarType,
    size: usize,
    /// `∂f/∂w` at each lane.
    p: Grad,
}

/// The node of one application: the partials traced with it and its domain.
struct StencilRule {
    domain: Vec<usize>,
    n: usize,
    boundary: Boundary,
    nb: Neighborhood,
    coords: Vec<Int64>,
    params: Vec<(usize, Int64)>,
    out_ty: VarType,
    inputs: Vec<Input>,
    /// Arrays with gradients the kernel captured (parents after the inputs').
    weights: Vec<Weight>,
    /// The last parent is `out`, whose values stand at the border lanes.
    out_border: bool,
    /// Every parent's node (for the refusal of second order).
    parents: Vec<u32>,
}

/// `result` (the application's value) with a node in the AD graph.
pub(super) fn record<U: Scalar>(app: &Application<'_, U>, result: Array<U>) -> Result<Array<U>> {
    let ctx = app.ctx;
    let mut inputs = Vec::new();
    let mut parents = Vec::new();
    for (i, &ad) in app.ads.iter().enumerate() {
        if ad == 0 {
            continue;
        }
        let mut taps: Vec<Vec<i64>> = Vec::new();
        for (j, o) in ctx.taps.borrow().iter() {
            if *j == i && !taps.contains(o) {
                taps.push(o.clone());
            }
        }
        let ty = kiln_core::var_type(app.ids[i]);
        if !differentiable(ty) {
            continue;
        }
        inputs.push((i, ty, taps));
        parents.push(ad);
    }
    // p: every read a leaf, one trace — or the constants found for the same kernel before
    let hit = app.cache.as_ref().and_then(|(cache, sig)| {
        let cache = cache.lock();
        let c = cache.as_ref()?;
        (c.key.0 == *sig && c.key.1 == ctx.boundary && c.key.2 == U::TYPE).then(|| c.rebuild(ctx.n))
    });
    let (at_lane, captured, captured_p) = match hit {
        Some(at_lane) => (at_lane, Nodes(Vec::new()), Vec::new()),
        None => {
            let found = partials(app, derived(ctx), true)?;
            if let (Some((cache, sig)), true) = (&app.cache, found.1 .0.is_empty()) {
                let key = (sig.clone(), ctx.boundary, U::TYPE);
                if let Some(c) = CachedPartials::of(key, &found.0) {
                    *cache.lock() = Some(c);
                }
            }
            found
        }
    };
    let mut built = Vec::new();
    for (i, ty, taps) in inputs {
        let p: Vec<Option<Grad>> = taps.iter().map(|o| find(&at_lane, i, o)).collect();
        let constant = |g: &Option<Grad>| {
            g.as_ref()
                .is_none_or(|g| kiln_core::literal_value(g.id()).is_some())
        };
        let affine = p.iter().all(constant);
        let same = app.shapes[i] == ctx.domain;
        let fold = if same && folds(ctx.boundary) {
            border(app, affine.then_some(&p))
        } else {
            None
        };
        built.push(Input {
            ty,
            shape: app.shapes[i].clone(),
            taps,
            p,
            affine,
            fold,
            scattered: !same,
        });
    }
    let mut weights = Vec::new();
    for (&c, p) in captured.0.iter().zip(captured_p) {
        let Some(p) = p else { continue };
        let (size, ty) = graph::with(|g| (g.node(c).size, g.node(c).ty));
        weights.push(Weight { ty, size, p });
        parents.push(c);
    }
    let out_border = app.out_ad != 0;
    if out_border {
        parents.push(app.out_ad);
    }
    let rule = StencilRule {
        domain: ctx.domain.clone(),
        n: ctx.n,
        boundary: ctx.boundary,
        nb: app.nb.clone(),
        coords: ctx.coords.clone(),
        params: ctx.params.0.borrow().clone(),
        out_ty: U::TYPE,
        inputs: built,
        weights,
        out_border,
        parents: parents.clone(),
    };
    let ad = graph::new_node_with(U::TYPE, ctx.n, &parents, Some(Arc::new(rule)), result.id());
    drop(captured);
    Ok(result.with_ad(ad))
}

/// A context like `ctx` in which every read is an AD leaf.
fn derived(ctx: &Ctx) -> Rc<Ctx> {
    let mut c = Ctx::new(
        &ctx.domain,
        ctx.coords.clone(),
        ctx.n,
        ctx.boundary,
        ctx.declared.clone(),
        ctx.params.clone(),
    );
    c.seed = true;
    Rc::new(c)
}

/// A tap's partial: input, offset as written, `∂f/∂tap` (None: the value does not depend on it).
type Partial = (usize, Vec<i64>, Option<Grad>);

/// Trace the kernel in `ctx` and take the partials of its value in the leaves made, (input,
/// offset, partial) per leaf, and in the arrays with gradients it captured (their nodes, one
/// reference held, and per-lane partials).
fn partials<U: Scalar>(
    app: &Application<'_, U>,
    ctx: Rc<Ctx>,
    fast: bool,
) -> Result<(Vec<Partial>, Nodes, Vec<Option<Grad>>)> {
    let _on = crate::ad::RecordingGuard::set(true);
    let start = graph::with(|g| g.next_seq());
    let value = (app.trace)(&ctx, fast);
    let leaves = std::mem::take(&mut *ctx.leaves.borrow_mut());
    let ads: Vec<u32> = leaves.iter().map(|l| l.grad.ad()).collect();
    // per-lane partials are the derivative only when each lane depends on its own taps (and
    // its own lane of a captured array) alone
    let captured = lane_local_captures("stencil kernel", value.ad, &ads, start, ctx.n)?;
    for &c in &captured.0 {
        let (size, ty) = graph::with(|g| (g.node(c).size, g.node(c).ty));
        if size != 1 && size != ctx.n {
            return Err(captured_refusal(app.name, size, ty, ctx.n));
        }
    }
    let (ps, cps) = crate::ad::lane_partials_within(&Grad::of(value), &ads, &captured.0, start)?;
    let taps = leaves
        .into_iter()
        .zip(ps)
        .map(|(l, p)| (l.input, l.off, p))
        .collect();
    Ok((taps, captured, cps))
}

fn find(ps: &[Partial], i: usize, o: &[i64]) -> Option<Grad> {
    ps.iter()
        .find(|(j, p, _)| *j == i && p == o)
        .and_then(|(_, _, g)| g.clone())
}

fn folds(b: Boundary) -> bool {
    matches!(b, Boundary::Nearest | Boundary::Reflect | Boundary::Mirror)
}

/// One term of an adjoint: a read of the cotangent (or of a stored product) at a mirrored
/// offset, times a constant factor where the kernel is affine.
struct Term<T: Float> {
    factor: Option<Array<T>>,
    read: Array<T>,
}

/// The sum of the terms, those with the same constant factor added first and scaled once:
/// `0.2·a + 0.2·b + 0.2·c + 0.2·d` becomes `0.2·(a + b + c + d)`, so a Laplacian's adjoint does
/// the forward's arithmetic (two products per lane, not one per tap). The terms are grouped in
/// the order their factors first appear, so the sum is the same at every run.
fn sum_by_factor<T: Float>(terms: Vec<Option<Term<T>>>) -> Option<Array<T>> {
    // (the factor's bits where it is a constant; the group's factor and summed reads)
    let mut groups: Vec<(Option<u64>, Term<T>)> = Vec::new();
    for t in terms.into_iter().flatten() {
        let key = t
            .factor
            .as_ref()
            .and_then(|f| kiln_core::literal_value(f.id()));
        match groups.iter_mut().find(|g| key.is_some() && g.0 == key) {
            Some((_, g)) => g.read = &g.read + &t.read,
            None => groups.push((key, t)),
        }
    }
    groups
        .into_iter()
        .map(|(_, g)| match g.factor {
            Some(f) => f * g.read,
            None => g.read,
        })
        .reduce(|a, b| a + b)
}

/// The border lanes (where some read leaves the array) and, for an affine kernel, its constant
/// partials there.
fn border<U: Scalar>(
    app: &Application<'_, U>,
    constants: Option<&Vec<Option<Grad>>>,
) -> Option<Fold> {
    let ctx = app.ctx;
    let lanes = border_lanes(&ctx.domain, app.nb);
    if lanes.is_empty() {
        return None;
    }
    let nl = lanes.len();
    let lanes = Int64::from_slice(&lanes);
    let coords = coordinates(&ctx.domain, &lanes, &ctx.params);
    let p = constants
        .map(|ps| {
            ps.iter()
                .map(|g| {
                    g.as_ref().map(|g| {
                        let bits = kiln_core::literal_value(g.id()).expect("a constant partial");
                        Grad::own(kiln_core::literal(g.ty(), bits, nl), 0)
                    })
                })
                .collect()
        })
        .unwrap_or_default();
    Some(Fold { lanes, coords, p })
}

/// Flat positions of the lanes of a row-major `domain` outside the interior of `nb`, in order
/// (whole rows where an outer coordinate is near an edge, the ends of the other rows).
fn border_lanes(domain: &[usize], nb: &[(i64, i64)]) -> Vec<i64> {
    let rank = domain.len();
    let band = |d: usize| ((-nb[d].0).max(0) as usize, nb[d].1.max(0) as usize);
    let last = domain[rank - 1];
    if last == 0 {
        return Vec::new();
    }
    let rows: usize = domain[..rank - 1].iter().product();
    let (lo, hi) = band(rank - 1);
    let mut out = Vec::new();
    for row in 0..rows {
        let (mut rest, mut edge) = (row, false);
        for d in (0..rank - 1).rev() {
            let c = rest % domain[d];
            rest /= domain[d];
            let (l, h) = band(d);
            edge |= c < l || c + h >= domain[d];
        }
        let base = (row * last) as i64;
        for j in 0..last {
            if edge || j < lo || j + hi >= last {
                out.push(base + j as i64);
            }
        }
    }
    out
}

impl StencilRule {
    /// The forward's interior for `Skip` (None: every lane, or another mode). Built when a pass
    /// needs it, not with the rule: the affine adjoint never does, and a mask is a dozen traced
    /// ops per application.
    fn interior(&self) -> Option<Bool> {
        if self.boundary != Boundary::Skip {
            return None;
        }
        let (dims, _) = self.dims(&self.params(), &self.domain);
        interior_mask(&self.coords, &dims, &self.nb)
    }
    fn params(&self) -> Params {
        Params(std::cell::RefCell::new(self.params.clone()))
    }
    fn dims(&self, params: &Params, shape: &[usize]) -> (Vec<Int64>, Vec<Int64>) {
        let mut strides = vec![1usize; shape.len()];
        for d in (0..shape.len().saturating_sub(1)).rev() {
            strides[d] = strides[d + 1] * shape[d + 1];
        }
        (
            shape.iter().map(|&d| params.get(d)).collect(),
            strides.iter().map(|&s| params.get(s)).collect(),
        )
    }
    /// A context over the domain whose reads follow `boundary`.
    fn ctx(&self, boundary: Boundary) -> Rc<Ctx> {
        Rc::new(Ctx::new(
            &self.domain,
            self.coords.clone(),
            self.n,
            boundary,
            None,
            self.params(),
        ))
    }

    /// The gradient of input `x` given the cotangent `ct` (`n` lanes).
    fn adjoint<T: Float, U: Float>(&self, x: &Input, ct: &Array<U>) -> Array<T> {
        if x.scattered {
            return self.adjoint_scattered(x, ct);
        }
        let wrap = self.boundary == Boundary::Wrap;
        let ctx = self.ctx(if wrap {
            Boundary::Wrap
        } else {
            Boundary::Constant(0.0)
        });
        // the lanes x − o_k that computed: the domain, or the forward's interior (Skip: the
        // lanes inside the domain whose neighbourhood is; the box holds 0 to say the first)
        let reach: Neighborhood = if self.boundary == Boundary::Skip {
            self.nb.iter().map(|&(l, h)| (l.min(0), h.max(0))).collect()
        } else {
            vec![(0, 0); self.domain.len()]
        };
        // per tap: `ct · p_k` read at the lane x − o_k where that lane computed, 0 elsewhere
        let (products, reads) = if x.affine {
            (Vec::new(), self.affine_reads::<T, U>(x, ct, &ctx, &reach))
        } else {
            self.stored_reads::<T, U>(x, ct, &ctx, &reach)
        };
        let rank = self.domain.len();
        let (mut lo, mut hi) = (vec![i64::MAX; rank], vec![i64::MIN; rank]);
        for (o, _) in x.taps.iter().zip(&reads).filter(|(_, t)| t.is_some()) {
            for d in 0..rank {
                lo[d] = lo[d].min(reach[d].0 - o[d]);
                hi[d] = hi[d].max(reach[d].1 - o[d]);
            }
        }
        let Some(value) = sum_by_factor(reads) else {
            return Array::zeros(self.n);
        };
        let adj = if wrap {
            value
        } else {
            // the reads are masked where they must be, so the value is right at every lane; the
            // split narrows the interior (plain shifted loads) to the lanes whose every read is
            // unmasked
            let meta = StencilMeta {
                shape: self.domain.clone(),
                lo,
                hi,
            };
            Array::from_id(ok(kiln_core::stencil_node(
                Op::Split,
                value.id(),
                value.id(),
                meta,
            )))
        };
        match &x.fold {
            Some(fold) => self.fold_back(x, fold, ct, &products, adj),
            None => adj,
        }
    }

    /// An affine kernel's terms `p_k · ct(x − o_k)`: the cotangent read at each offset (one array
    /// read, like the forward's input), times the constant partial.
    fn affine_reads<T: Float, U: Float>(
        &self,
        x: &Input,
        ct: &Array<U>,
        ctx: &Rc<Ctx>,
        reach: &[(i64, i64)],
    ) -> Vec<Option<Term<T>>> {
        // a cotangent `c · y` (the chain rule through a scaling) is read as `y`, scaled after,
        // so that `y` is stored once rather than `y` and `c · y`
        let (src, scale) = match kiln_core::scaled_operand(ct.id()) {
            Some((y, c)) if kiln_core::size(y) == self.n => {
                kiln_core::inc_ref(y);
                let c = Array::<U>::from_id(kiln_core::literal(U::TYPE, c, 1usize));
                (Array::<U>::from_id(y), Some(c.cast::<T>()))
            }
            _ => (ct.clone(), None),
        };
        let ctt = Tensor::from_array(src, &self.domain);
        let reads = x.taps.len().max(1);
        let fast = ok(readable_at_offsets(
            ctt.array().id(),
            "cotangent",
            reads,
            true,
        ));
        let rel = Rel::new(ctx, &ctt, "cotangent".into(), fast, 0);
        x.taps
            .iter()
            .zip(&x.p)
            .map(|(o, p)| {
                let p = p.as_ref()?;
                let read = self.read_back(&rel, o, reach).cast::<T>();
                Some(Term {
                    // (two constants: folded into one before they meet the read)
                    factor: match &scale {
                        Some(c) => Some(p.array::<T>() * c),
                        None => Some(p.array::<T>()),
                    },
                    read,
                })
            })
            .collect()
    }

    /// Any kernel's terms: the products `ct · p_k` evaluated together (one kernel), each read at
    /// its offset. Returns the products too (the border fold reads them).
    #[allow(clippy::type_complexity)]
    fn stored_reads<T: Float, U: Float>(
        &self,
        x: &Input,
        ct: &Array<U>,
        ctx: &Rc<Ctx>,
        reach: &[(i64, i64)],
    ) -> (Vec<Option<Array<T>>>, Vec<Option<Term<T>>>) {
        let ct = ct.cast::<T>();
        let products: Vec<Option<Array<T>>> =
            x.p.iter()
                .map(|p| p.as_ref().map(|p| p.array::<T>() * &ct))
                .collect();
        let ids: Vec<kiln_core::VarId> = products.iter().flatten().map(|a| a.id()).collect();
        ok(kiln_core::eval(&ids));
        let reads = x
            .taps
            .iter()
            .zip(&products)
            .enumerate()
            .map(|(k, (o, g))| {
                let g = Tensor::from_array(g.as_ref()?.clone(), &self.domain);
                let rel = Rel::new(ctx, &g, "cotangent times partial".into(), true, k);
                Some(Term {
                    factor: None,
                    read: self.read_back(&rel, o, reach),
                })
            })
            .collect();
        (products, reads)
    }

    /// `rel` read at the lane `x − o` where that lane computed (its box `reach` inside the
    /// domain), 0 elsewhere; under `Wrap` every lane computed and reads wrap.
    fn read_back<T: Scalar>(&self, rel: &Rel<T>, o: &[i64], reach: &[(i64, i64)]) -> Array<T> {
        let back: Vec<i64> = o.iter().map(|v| -v).collect();
        if self.boundary == Boundary::Wrap {
            rel.tap(&back)
        } else {
            rel.tap_within(&back, reach)
        }
    }

    /// `adj` plus the mass the border lanes read outside the array and the rule moved inside:
    /// `ct · p_k` at those lanes, from the constant partials or the stored `products`.
    fn fold_back<T: Float, U: Float>(
        &self,
        x: &Input,
        fold: &Fold,
        ct: &Array<U>,
        products: &[Option<Array<T>>],
        adj: Array<T>,
    ) -> Array<T> {
        let params = self.params();
        let (dims, strides) = self.dims(&params, &self.domain);
        let ct_b = gather(ct, &fold.lanes).cast::<T>();
        let mut adj = adj;
        for (k, o) in x.taps.iter().enumerate() {
            let mass = if x.affine {
                fold.p[k].as_ref().map(|p| p.array::<T>() * &ct_b)
            } else {
                products[k].as_ref().map(|g| gather(g, &fold.lanes))
            };
            let Some(mass) = mass else { continue };
            let (idx, outside) = self.landing(&fold.coords, o, &dims, &strides);
            let Some(outside) = outside else { continue };
            let idx = select(&outside, &idx, 0i64);
            scatter_reduce_masked(ReduceOp::Add, &mut adj, mass, &idx, &outside);
        }
        adj
    }

    /// Where lanes at `coords` read at offset `o` land (flat, after the boundary rule), and which
    /// of them read outside the array (None: none can).
    fn landing(
        &self,
        coords: &[Int64],
        o: &[i64],
        dims: &[Int64],
        strides: &[Int64],
    ) -> (Int64, Option<Bool>) {
        let mut outside: Option<Bool> = None;
        let mut flat: Option<Int64> = None;
        for d in 0..dims.len() {
            let t = &coords[d] + o[d];
            if o[d] != 0 {
                let out_d = &t.lt(0i64) | &t.ge(&dims[d]);
                outside = Some(match outside.take() {
                    None => out_d,
                    Some(m) => &m | &out_d,
                });
            }
            let term = &fold_coordinate(self.boundary, &t, &dims[d]) * &strides[d];
            flat = Some(match flat.take() {
                None => term,
                Some(f) => &f + &term,
            });
        }
        (flat.expect("rank ≥ 1"), outside)
    }

    /// The gradient of a secondary input larger than the domain: each tap's contribution
    /// scatter-added where it read.
    fn adjoint_scattered<T: Float, U: Float>(&self, x: &Input, ct: &Array<U>) -> Array<T> {
        let params = self.params();
        let (dims, strides) = self.dims(&params, &x.shape);
        let mut adj = Array::<T>::zeros(x.shape.iter().product::<usize>());
        let ct = ct.cast::<T>();
        let interior = self.interior();
        for (o, p) in x.taps.iter().zip(&x.p) {
            let Some(p) = p else { continue };
            let (idx, outside) = self.landing(&self.coords, o, &dims, &strides);
            let mut keep = match (&outside, self.boundary) {
                (Some(out), Boundary::Skip | Boundary::Constant(_)) => Some(!out),
                _ => None,
            };
            if let Some(inside) = &interior {
                keep = Some(match keep {
                    None => inside.clone(),
                    Some(k) => &k & inside,
                });
            }
            let keep = keep.unwrap_or_else(|| Bool::scalar(true));
            let idx = select(&keep, &idx, 0i64);
            scatter_reduce_masked(ReduceOp::Add, &mut adj, p.array::<T>() * &ct, &idx, &keep);
        }
        adj
    }

    /// The output's tangent given the inputs' tangents `ts` (each input's size).
    fn tangent<U: Float>(&self, ts: &[Option<Grad>]) -> Array<U> {
        let tangent_boundary = match self.boundary {
            Boundary::Skip | Boundary::Constant(_) => Boundary::Constant(0.0),
            b => b,
        };
        let ctx = self.ctx(tangent_boundary);
        let mut value: Option<Array<U>> = None;
        for (x, t) in self.inputs.iter().zip(ts) {
            let Some(t) = t else { continue };
            let term = match x.ty {
                VarType::F32 => self.tangent_of::<f32, U>(&ctx, x, t),
                _ => self.tangent_of::<f64, U>(&ctx, x, t),
            };
            if let Some(term) = term {
                value = Some(match value.take() {
                    None => term,
                    Some(v) => v + term,
                });
            }
        }
        let at = self.inputs.len();
        for (w, t) in self.weights.iter().zip(&ts[at.min(ts.len())..]) {
            let Some(t) = t else { continue };
            let term = w.p.array::<U>() * crate::ad::rules::cast_grad(t, U::TYPE).array::<U>();
            value = Some(match value.take() {
                None => term,
                Some(v) => v + term,
            });
        }
        // (a kernel whose value reads no tap has a one-lane tangent from its weights)
        let value = value.map_or_else(
            || Array::zeros(self.n),
            |v| crate::ad::rules::broadcast(v, self.n.into()),
        );
        let border_at = at + self.weights.len();
        let border: Array<U> = match (self.out_border, ts.get(border_at)) {
            (true, Some(Some(t))) => t.array::<U>(),
            _ => Array::zeros(1),
        };
        match &self.interior() {
            Some(inside) => {
                let general = select(inside, &value, &border);
                let meta = StencilMeta {
                    shape: self.domain.clone(),
                    lo: self.nb.iter().map(|r| r.0).collect(),
                    hi: self.nb.iter().map(|r| r.1).collect(),
                };
                Array::from_id(ok(kiln_core::stencil_node(
                    Op::Split,
                    value.id(),
                    general.id(),
                    meta,
                )))
            }
            None => value,
        }
    }

    fn tangent_of<T: Float, U: Float>(
        &self,
        ctx: &Rc<Ctx>,
        x: &Input,
        t: &Grad,
    ) -> Option<Array<U>> {
        let size: usize = x.shape.iter().product();
        let t = crate::ad::rules::broadcast(t.array::<T>().detach(), size.into());
        let fast = ok(readable_at_offsets(
            t.id(),
            "tangent",
            x.taps.len().max(1),
            false,
        ));
        let tt = Tensor::from_array(t, &x.shape);
        let rel = Rel::new(ctx, &tt, "tangent".into(), fast, 0);
        let mut sum: Option<Array<T>> = None;
        for (o, p) in x.taps.iter().zip(&x.p) {
            let Some(p) = p else { continue };
            let term = p.array::<T>() * rel.tap(o);
            sum = Some(match sum.take() {
                None => term,
                Some(s) => s + term,
            });
        }
        sum.map(|s| s.cast::<U>())
    }
}

impl Rule for StencilRule {
    fn name(&self) -> &'static str {
        "stencil"
    }
    fn backward(&self, ct: &Grad) -> Vec<Option<Grad>> {
        let mut out: Vec<Option<Grad>> = Vec::new();
        for x in &self.inputs {
            let g = match (x.ty, self.out_ty) {
                (VarType::F32, VarType::F32) => {
                    Grad::of(self.adjoint::<f32, f32>(x, &self.wide(ct)))
                }
                (VarType::F32, _) => Grad::of(self.adjoint::<f32, f64>(x, &self.wide(ct))),
                (_, VarType::F32) => Grad::of(self.adjoint::<f64, f32>(x, &self.wide(ct))),
                _ => Grad::of(self.adjoint::<f64, f64>(x, &self.wide(ct))),
            };
            out.push(Some(g));
        }
        let weights: Vec<Grad> = self
            .weights
            .iter()
            .map(|w| match self.out_ty {
                VarType::F32 => self.weight_adjoint::<f32>(w, ct),
                _ => self.weight_adjoint::<f64>(w, ct),
            })
            .collect();
        // evaluated now, together (one kernel for a filter's nine sums): left lazy, each
        // application's terms would keep its partials' inputs (the step's state) alive until the
        // end of the pass, and every evaluation on the way would walk them all (40 heat steps
        // with a captured coefficient: 4× slower)
        let ids: Vec<kiln_core::VarId> = weights.iter().map(Grad::id).collect();
        ok(kiln_core::eval(&ids));
        out.extend(weights.into_iter().map(Some));
        if self.out_border {
            out.push(self.interior().as_ref().map(|inside| match self.out_ty {
                VarType::F32 => Grad::of(select(inside, 0.0f32, self.wide::<f32>(ct))),
                _ => Grad::of(select(inside, 0.0f64, self.wide::<f64>(ct))),
            }));
        }
        out.into_iter()
            .map(|g| {
                g.map(|g| crate::ad::control::guard_second_order(g, &self.parents, "a stencil"))
            })
            .collect()
    }
    fn forward(&self, tangents: &[Option<Grad>]) -> Option<Grad> {
        if tangents.iter().all(|t| t.is_none()) {
            return None;
        }
        Some(match self.out_ty {
            VarType::F32 => Grad::of(self.tangent::<f32>(tangents)),
            _ => Grad::of(self.tangent::<f64>(tangents)),
        })
    }
}

impl StencilRule {
    /// A captured weight's gradient: `ct · ∂f/∂w` at the lanes that computed (the forward's
    /// interior for `Skip`), summed for a one-element weight.
    fn weight_adjoint<U: Float>(&self, w: &Weight, ct: &Grad) -> Grad {
        let g = self.wide::<U>(ct) * w.p.array::<U>();
        let g = match &self.interior() {
            Some(inside) => select(inside, g, U::zero()),
            None => g,
        };
        crate::ad::rules::cast_grad(&crate::ad::control::fit(&Grad::of(g), w.size, self.n), w.ty)
    }

    /// The cotangent as an array of the domain's lanes (a size-1 one widened), detached.
    fn wide<U: Float>(&self, ct: &Grad) -> Array<U> {
        crate::ad::rules::broadcast(ct.array::<U>().detach(), self.n.into())
    }
}
