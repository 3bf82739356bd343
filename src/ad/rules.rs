//! Derivative rules of the elementwise ops and the math library, and the hooks through which the
//! front end records a node when an operand carries a gradient.
//!
//! Elementwise ops are *linear* nodes: the local partial of the output with respect to each input
//! (a lazy array computed from the captured operands when a pass needs it) serves both directions,
//! `ct * w` backwards and `Σ w * t` forwards. Math functions record one node with a closed-form
//! partial, never the partials of their polynomial implementation: the primal is computed on
//! detached operands, so nothing inside it is recorded. Conventions at non-differentiable points
//! follow JAX: `abs'(0) = 0`, `sqrt'(0) = +inf`, `max`/`min` ties split the gradient evenly,
//! rounding has zero derivative, `pow(0, y)` has zero derivative in `y`.

use super::graph::{self, AdIndex, Rule};
use super::recording;
use super::value::Grad;
use crate::array::{Array, Bool};
use crate::ops::select;
use crate::types::Float;
use kiln_core::{Op, Scalar, Size, VarType};
use std::any::Any;
use std::sync::Arc;

/// Whether `a` carries a gradient that an op on it should record now.
pub(crate) fn tracks<T: Scalar>(a: &Array<T>) -> bool {
    a.ad != 0 && recording()
}

/// The same array seen as `Array<F>` (same element type, checked by `Any`).
pub(crate) fn as_float<T: Scalar, F: Scalar>(a: &Array<T>) -> &Array<F> {
    (a as &dyn Any)
        .downcast_ref::<Array<F>>()
        .expect("kiln: AD on a non-float array")
}

/// Move an `Array<T>` into an `Array<F>` of the same element type.
pub(crate) fn into_type<T: Scalar, F: Scalar>(a: Array<T>) -> Array<F> {
    let mut slot = Some(a);
    (&mut slot as &mut dyn Any)
        .downcast_mut::<Option<Array<F>>>()
        .expect("kiln: AD on a non-float array")
        .take()
        .expect("value")
}

/// The local partials of a node, computed on demand from what the closure captured.
pub(crate) type Weights<T> = Box<dyn Fn() -> Vec<Array<T>> + Send + Sync>;

/// An elementwise node: output = f(inputs), partial `w_i` per input that carries a gradient.
pub(crate) struct Linear<T: Float> {
    pub name: &'static str,
    pub out_size: Size,
    /// Sizes of the inputs that carry gradients (a size-1 input broadcast over the output gets
    /// the sum of its lanes' contributions). Sizes, not numbers: inside a frozen function they
    /// follow the inputs, so a replay at another size computes the right gradients.
    pub sizes: Vec<Size>,
    pub weights: Weights<T>,
}

/// `c` summed to one lane when it stands for a broadcast size-1 input.
pub(crate) fn unbroadcast<T: Float>(c: Array<T>, to: Size, from: Size) -> Array<T> {
    if to.is_one() && !from.is_one() {
        c.sum()
    } else {
        c
    }
}

/// `t` widened to `n` lanes when it is a single lane standing for all of them.
pub(crate) fn broadcast<T: Float>(t: Array<T>, n: Size) -> Array<T> {
    if t.size().is_one() && !n.is_one() {
        &t + &Array::<T>::zeros(n)
    } else {
        t
    }
}

impl<T: Float> Rule for Linear<T> {
    fn name(&self) -> &'static str {
        self.name
    }
    fn lane_local(&self) -> bool {
        true
    }
    fn backward(&self, ct: &Grad) -> Vec<Option<Grad>> {
        let ct = ct.array::<T>();
        (self.weights)()
            .iter()
            .zip(&self.sizes)
            .map(|(w, &n)| Some(Grad::of(unbroadcast(&ct * w, n, self.out_size))))
            .collect()
    }
    fn forward(&self, tangents: &[Option<Grad>]) -> Option<Grad> {
        let ws = (self.weights)();
        let mut acc: Option<Array<T>> = None;
        for (w, t) in ws.iter().zip(tangents) {
            if let Some(t) = t {
                let term = w * &t.array::<T>();
                acc = Some(match acc {
                    None => term,
                    Some(a) => a + term,
                });
            }
        }
        acc.map(|a| Grad::of(broadcast(a, self.out_size)))
    }
}

/// A node with its own backward and forward closures (reductions, memory ops, views, selects).
pub(crate) struct Custom {
    pub name: &'static str,
    #[allow(clippy::type_complexity)]
    pub backward: Box<dyn Fn(&Grad) -> Vec<Option<Grad>> + Send + Sync>,
    #[allow(clippy::type_complexity)]
    pub forward: Box<dyn Fn(&[Option<Grad>]) -> Option<Grad> + Send + Sync>,
}

impl Rule for Custom {
    fn name(&self) -> &'static str {
        self.name
    }
    fn lane_local(&self) -> bool {
        matches!(self.name, "select" | "cast" | "broadcast_scalar")
    }
    fn backward(&self, ct: &Grad) -> Vec<Option<Grad>> {
        (self.backward)(ct)
    }
    fn forward(&self, tangents: &[Option<Grad>]) -> Option<Grad> {
        (self.forward)(tangents)
    }
}

/// Give `out` a node whose parents are the AD nodes of `inputs` that carry one (`None` entries
/// and untracked inputs are skipped: the rule sees only the tracked ones, in order).
pub(crate) fn attach<T: Scalar>(
    out: Array<T>,
    parents: &[AdIndex],
    rule: Arc<dyn Rule>,
) -> Array<T> {
    // the node's size is for messages and whos(): read without tying a frozen recording to it
    let size = kiln_core::size(out.id());
    let ad = graph::new_node_with(T::TYPE, size, parents, Some(rule), out.id());
    out.with_ad(ad)
}

/// An operand captured by an elementwise rule. It holds the engine reference only: its AD node
/// (when it has one) is a parent of the node that owns the rule, whose edge keeps it alive, so
/// capturing and releasing take no graph lock. `get` gives a full handle, with the node only
/// when the pass itself is recorded (gradients of gradients).
pub(crate) struct Cap<T: Scalar> {
    arr: Array<T>,
    ad: AdIndex,
}

impl<T: Scalar> Cap<T> {
    pub fn of(a: &Array<T>) -> Cap<T> {
        Cap {
            arr: a.detach(),
            ad: a.ad,
        }
    }
    pub fn get(&self) -> Array<T> {
        if self.ad != 0 && recording() {
            graph::inc_ref(self.ad);
            self.arr.clone().with_ad(self.ad)
        } else {
            self.arr.clone()
        }
    }
}

/// The number of lanes of node `ad` (a parent's size, read when a pass needs it rather than
/// when the op is recorded).
/// Unevaluated operations from which a cotangent counts as costly to recompute in each of
/// several reductions (see `Elementwise::backward`).
const COSTLY_COTANGENT: usize = 16;

fn node_size(ad: AdIndex) -> Size {
    Size::from(graph::with(|g| g.node(ad).size))
}

/// The node of an elementwise core op (`+`, `*`, `fma`, `min`, …): which arguments carry
/// gradients, and only the operands their partials need (none for `+`, `-`, `neg`). Kept small
/// and allocation-free apart from its `Arc`, because one is recorded per traced op.
struct Elementwise<T: Scalar> {
    op: Op,
    /// Captured operands, by argument position (`None`: the partials do not need it).
    cap: [Option<Cap<T>>; 3],
    /// The AD nodes of the arguments (0: carries no gradient).
    ads: [AdIndex; 3],
    out_size: Size,
}

impl<T: Float> Elementwise<T> {
    fn arg(&self, i: usize) -> Array<T> {
        self.cap[i].as_ref().expect("captured operand").get()
    }
    /// The partial of the output with respect to argument `i` (`None`: exactly 1).
    fn weight(&self, i: usize) -> Option<Array<T>> {
        let m1 = || Array::scalar(T::from_f64(-1.0));
        Some(match (self.op, i) {
            (Op::Add, _) | (Op::Sub, 0) | (Op::Fma, 2) => return None,
            (Op::Sub, _) | (Op::Neg, _) => m1(),
            (Op::Mul, _) | (Op::Fma, _) => self.arg(1 - i),
            (Op::Div, 0) => self.arg(1).rcp(),
            (Op::Div, _) => {
                let r = self.arg(1).rcp();
                -(&self.arg(0) * &r * &r)
            }
            (Op::Abs, _) => sign(&self.arg(0)),
            (Op::Sqrt, _) => Array::scalar(T::from_f64(0.5)) / self.arg(0).sqrt(),
            (Op::Min, _) | (Op::Max, _) => {
                let w = pick_weight(&self.arg(0), &self.arg(1), self.op == Op::Max);
                if i == 0 {
                    w
                } else {
                    one::<T>() - &w
                }
            }
            _ => unreachable!("checked when recorded"),
        })
    }
}

impl<T: Float> Rule for Elementwise<T> {
    fn lane_local(&self) -> bool {
        true
    }
    fn name(&self) -> &'static str {
        self.op.name()
    }
    fn backward(&self, ct: &Grad) -> Vec<Option<Grad>> {
        let ct = ct.array::<T>();
        let sizes: [Size; 3] = std::array::from_fn(|i| match self.ads[i] {
            0 => self.out_size,
            ad => node_size(ad),
        });
        // A single-lane operand's adjoint is a reduction of the cotangent. A costly lazy
        // cotangent is evaluated first: the same one usually reaches several such reductions
        // (the weights of `x0*w0 + x1*w1 + …` share the cotangent of the sum), and each would
        // otherwise recompute the whole expression (a logistic regression step at 1M samples:
        // 19 -> 7 ms). Used once, it costs one extra write of the cotangent.
        let reduces = (0..3).any(|i| self.ads[i] != 0 && sizes[i].is_one());
        if reduces
            && !self.out_size.is_one()
            && !ct.is_evaluated()
            && kiln_core::lazy_cost(ct.id(), COSTLY_COTANGENT).0 >= COSTLY_COTANGENT
        {
            ct.eval();
        }
        (0..3)
            .filter(|&i| self.ads[i] != 0)
            .map(|i| {
                let c = match self.weight(i) {
                    None => ct.clone(),
                    Some(w) => &ct * &w,
                };
                Some(Grad::of(unbroadcast(c, sizes[i], self.out_size)))
            })
            .collect()
    }
    fn forward(&self, tangents: &[Option<Grad>]) -> Option<Grad> {
        let mut acc: Option<Array<T>> = None;
        let tracked = (0..3).filter(|&i| self.ads[i] != 0);
        for (i, t) in tracked.zip(tangents) {
            if let Some(t) = t {
                let t = t.array::<T>();
                let term = match self.weight(i) {
                    None => t,
                    Some(w) => &w * &t,
                };
                acc = Some(match acc {
                    None => term,
                    Some(a) => a + term,
                });
            }
        }
        // the inputs' tangents may all be single lanes standing for a wider output
        acc.map(|a| Grad::of(broadcast(a, self.out_size)))
    }
}

/// Record the node of elementwise op `op` applied to `args`, whose untracked result is `out`.
pub(crate) fn record_op<T: Scalar>(op: Op, args: &[&Array<T>], out: Array<T>) -> Array<T> {
    if !recording() || args.iter().all(|a| a.ad == 0) {
        return out;
    }
    match T::TYPE {
        VarType::F32 | VarType::F64 => {}
        _ => return out,
    }
    // rounding has zero derivative: the result carries no gradient
    if matches!(op, Op::Floor | Op::Ceil | Op::Round | Op::Trunc) {
        return out;
    }
    let tracked = |i: usize| args.get(i).is_some_and(|a| a.ad != 0);
    // which operands each op's partials read (for the arguments that carry gradients)
    let needs = |i: usize| -> bool {
        match op {
            Op::Add | Op::Sub | Op::Neg => false,
            Op::Mul | Op::Fma => i < 2 && tracked(1 - i),
            Op::Div => i == 1 || tracked(1),
            Op::Abs | Op::Sqrt => i == 0,
            Op::Min | Op::Max => true,
            _ => panic!(
                "kiln: no derivative rule for `{}`; this is a kiln bug, please report it",
                op.name()
            ),
        }
    };
    let mut ads = [0; 3];
    let mut cap: [Option<Cap<T>>; 3] = [None, None, None];
    for (i, a) in args.iter().enumerate().take(3) {
        ads[i] = a.ad;
        if needs(i) {
            cap[i] = Some(Cap::of(a));
        }
    }
    let mut parents = [0; 3];
    let mut np = 0;
    for &a in ads.iter().filter(|&&a| a != 0) {
        parents[np] = a;
        np += 1;
    }
    let out_size = out.size();
    let rule: Arc<dyn Rule> = match T::TYPE {
        VarType::F32 => Arc::new(Elementwise::<f32> {
            op,
            cap: cap.map(|c| {
                c.map(|c| Cap::<f32> {
                    arr: into_type(c.arr),
                    ad: c.ad,
                })
            }),
            ads,
            out_size,
        }),
        _ => Arc::new(Elementwise::<f64> {
            op,
            cap: cap.map(|c| {
                c.map(|c| Cap::<f64> {
                    arr: into_type(c.arr),
                    ad: c.ad,
                })
            }),
            ads,
            out_size,
        }),
    };
    let n = kiln_core::size(out.id());
    let ad = graph::new_node_with(T::TYPE, n, &parents[..np], Some(rule), out.id());
    out.with_ad(ad)
}

fn one<T: Float>() -> Array<T> {
    Array::scalar(T::one())
}

/// `sign(x)` with `sign(0) = 0` (and NaN for NaN).
fn sign<T: Float>(x: &Array<T>) -> Array<T> {
    let pos = select(&x.gt(T::zero()), one::<T>(), Array::scalar(T::zero()));
    select(&x.lt(T::zero()), Array::scalar(T::from_f64(-1.0)), pos)
}

/// The weight of `a` in `max(a, b)` (`min` when `is_max` is false): 1 where it wins, ½ on ties.
fn pick_weight<T: Float>(a: &Array<T>, b: &Array<T>, is_max: bool) -> Array<T> {
    let wins = if is_max { a.gt(b) } else { a.lt(b) };
    let tie = select(
        &a.eq(b),
        Array::scalar(T::from_f64(0.5)),
        Array::scalar(T::zero()),
    );
    select(&wins, one::<T>(), tie)
}

/// `mask ? a : b` with gradients: each branch gets the cotangent of the lanes it supplied.
pub(crate) fn record_select<T: Scalar>(
    mask: &Bool,
    a: &Array<T>,
    b: &Array<T>,
    out: Array<T>,
) -> Array<T> {
    if !recording() || (a.ad == 0 && b.ad == 0) {
        return out;
    }
    match T::TYPE {
        VarType::F32 => into_type(float_select::<f32>(
            mask,
            as_float(a),
            as_float(b),
            into_type(out),
        )),
        VarType::F64 => into_type(float_select::<f64>(
            mask,
            as_float(a),
            as_float(b),
            into_type(out),
        )),
        _ => out,
    }
}

fn float_select<T: Float>(mask: &Bool, a: &Array<T>, b: &Array<T>, out: Array<T>) -> Array<T> {
    let (ta, tb) = (a.ad != 0, b.ad != 0);
    let parents: Vec<AdIndex> = [a.ad, b.ad].into_iter().filter(|&p| p != 0).collect();
    let (na, nb, n) = (a.size(), b.size(), out.size());
    let (m1, m2) = (mask.clone(), mask.clone());
    let zero = || Array::<T>::scalar(T::zero());
    let backward = move |ct: &Grad| {
        let ct = ct.array::<T>();
        let mut v = Vec::new();
        if ta {
            v.push(Some(Grad::of(unbroadcast(select(&m1, &ct, zero()), na, n))));
        }
        if tb {
            v.push(Some(Grad::of(unbroadcast(select(&m1, zero(), &ct), nb, n))));
        }
        v
    };
    let forward = move |t: &[Option<Grad>]| {
        let mut it = t.iter();
        let ga = if ta {
            it.next().cloned().flatten()
        } else {
            None
        };
        let gb = if tb {
            it.next().cloned().flatten()
        } else {
            None
        };
        if ga.is_none() && gb.is_none() {
            return None;
        }
        let pa = ga.map(|g| g.array::<T>()).unwrap_or_else(zero);
        let pb = gb.map(|g| g.array::<T>()).unwrap_or_else(zero);
        Some(Grad::of(broadcast(select(&m2, pa, pb), n)))
    };
    let rule = Custom {
        name: "select",
        backward: Box::new(backward),
        forward: Box::new(forward),
    };
    attach(out, &parents, Arc::new(rule))
}

/// A float→float cast passes gradients through (converted back to the input's type); casts to
/// or from integers carry none.
pub(crate) fn record_cast<S: Scalar, U: Scalar>(x: &Array<S>, out: Array<U>) -> Array<U> {
    if !tracks(x) || !U::TYPE.is_float() {
        return out;
    }
    let (from, to) = (S::TYPE, U::TYPE);
    let rule = Custom {
        name: "cast",
        backward: Box::new(move |ct| vec![Some(cast_grad(ct, from))]),
        forward: Box::new(move |t| t[0].as_ref().map(|t| cast_grad(t, to))),
    };
    attach(out, &[x.ad], Arc::new(rule))
}

/// `g` converted to float type `to` (recorded when gradients of gradients are being traced).
pub(crate) fn cast_grad(g: &Grad, to: VarType) -> Grad {
    match (g.ty(), to) {
        (a, b) if a == b => g.clone(),
        (VarType::F32, VarType::F64) => Grad::of(g.array::<f32>().cast::<f64>()),
        (VarType::F64, VarType::F32) => Grad::of(g.array::<f64>().cast::<f32>()),
        (a, b) => panic!("kiln: AD cast from {a} to {b} has no gradient"),
    }
}

/// One-input math function `f` with closed-form partial `d(x)`: `None` when `x` carries no
/// gradient (the caller computes as usual), else the result computed on the detached input with
/// one node.
pub(crate) fn unary<T: Float>(
    name: &'static str,
    x: &Array<T>,
    f: fn(&Array<T>) -> Array<T>,
    d: fn(&Array<T>) -> Array<T>,
) -> Option<Array<T>> {
    if !tracks(x) {
        return None;
    }
    let out = f(&x.detach());
    let rule = Unary {
        name,
        x: Cap::of(x),
        d,
    };
    Some(attach(out, &[x.ad], Arc::new(rule)))
}

/// The node of a one-input math function: the input (for its closed-form partial) and nothing
/// else (input and output have the same lanes).
struct Unary<T: Scalar> {
    name: &'static str,
    x: Cap<T>,
    d: fn(&Array<T>) -> Array<T>,
}

impl<T: Float> Rule for Unary<T> {
    fn lane_local(&self) -> bool {
        true
    }
    fn name(&self) -> &'static str {
        self.name
    }
    fn backward(&self, ct: &Grad) -> Vec<Option<Grad>> {
        let w = (self.d)(&self.x.get());
        vec![Some(Grad::of(&ct.array::<T>() * &w))]
    }
    fn forward(&self, tangents: &[Option<Grad>]) -> Option<Grad> {
        let t = tangents.first()?.as_ref()?;
        let w = (self.d)(&self.x.get());
        Some(Grad::of(&w * &t.array::<T>()))
    }
}

/// The partials `(∂f/∂x, ∂f/∂y)` of a two-input math function.
pub(crate) type Partials2<T> = fn(&Array<T>, &Array<T>) -> (Array<T>, Array<T>);

/// Two-input math function `f(x, y)` with partials `d(x, y) = (∂f/∂x, ∂f/∂y)`.
pub(crate) fn binary<T: Float>(
    name: &'static str,
    x: &Array<T>,
    y: &Array<T>,
    f: fn(&Array<T>, &Array<T>) -> Array<T>,
    d: Partials2<T>,
) -> Option<Array<T>> {
    if !(tracks(x) || tracks(y)) {
        return None;
    }
    let out = f(&x.detach(), &y.detach());
    let (xc, yc) = (Cap::of(x), Cap::of(y));
    let (tx, ty) = (x.ad != 0, y.ad != 0);
    let parents: Vec<AdIndex> = [x.ad, y.ad].into_iter().filter(|&p| p != 0).collect();
    let sizes: Vec<Size> = [(tx, x.size()), (ty, y.size())]
        .into_iter()
        .filter(|p| p.0)
        .map(|p| p.1)
        .collect();
    let weights: Weights<T> = Box::new(move || {
        let (dx, dy) = d(&xc.get(), &yc.get());
        let mut v = Vec::new();
        if tx {
            v.push(dx);
        }
        if ty {
            v.push(dy);
        }
        v
    });
    let rule = Linear {
        name,
        out_size: out.size(),
        sizes,
        weights,
    };
    Some(attach(out, &parents, Arc::new(rule)))
}
