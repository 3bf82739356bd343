//! Derivative rules of tensors: views (`permute`, `slice`, `broadcast_to`, `concat`; the others
//! are built from these or from `reshape`, which keeps the array and so its node), axis
//! reductions and `matmul`.
//!
//! Each rule works on whole tensors: the primal is computed on detached arrays (the view's
//! `gather_view` never records the generic gather rule, whose adjoint would be an atomic
//! scatter-add), and the node maps the cotangent tensor back with the inverse view. A
//! permutation's adjoint is the inverse permutation, a slice's a masked view of the cotangent
//! (both views, fused into their reader: no scatter, no atomics), a broadcast's a sum over the
//! broadcast axes, a concatenation's the slices of the cotangent, an axis reduction's the
//! cotangent broadcast back along the axis (times the local partials for `prod`/`min`/`max`),
//! and `matmul`'s two products `dA = dC·Bᵀ`, `dB = Aᵀ·dC`.

use super::graph::AdIndex;
use super::memory::on_float;
use super::rules::{as_float, attach, into_type, tracks, Custom};
use super::value::Grad;
use crate::array::Array;
use crate::tensor::{slice_adjoint, AxisSel, SliceArg, Tensor};
use crate::types::Float;
use kiln_core::{ReduceOp, Scalar, VarType};
use std::sync::Arc;

/// `g` as a tensor of shape `shape` (a tangent or cotangent of one value, as `set_grad` takes
/// one, stands for every element).
fn tensor<F: Float>(g: &Grad, shape: &[usize]) -> Tensor<F> {
    let len: usize = shape.iter().product();
    if len != 1 && kiln_core::size(g.id()) == 1 {
        return Tensor::from_array(super::control::fit(g, len, 1).array::<F>(), shape);
    }
    Tensor::from_array(g.array::<F>(), shape)
}

/// Give the view `out` of `src` a node with one parent (`src`'s) and the given maps of the
/// cotangent (`back`: output shape → source's elements) and tangent (`fwd`).
fn view_node<T: Scalar>(
    name: &'static str,
    src: &Tensor<T>,
    out: Tensor<T>,
    back: impl Fn(&Grad) -> Grad + Send + Sync + 'static,
    fwd: impl Fn(&Grad) -> Grad + Send + Sync + 'static,
) -> Tensor<T> {
    let ad = src.array().ad;
    out.map_array(|o| {
        let rule = Custom {
            name,
            backward: Box::new(move |ct| vec![Some(back(ct))]),
            forward: Box::new(move |t| t[0].as_ref().map(&fwd)),
        };
        attach(o, &[ad], Arc::new(rule))
    })
}

/// Whether `src` is a float tensor that carries a gradient now.
fn tracked<T: Scalar>(src: &Tensor<T>) -> bool {
    tracks(src.array()) && T::TYPE.is_float()
}

/// The node of `out = src.permute(axes)`: its adjoint is the inverse permutation.
pub(crate) fn record_permute<T: Scalar>(
    src: &Tensor<T>,
    axes: &[usize],
    out: Tensor<T>,
) -> Tensor<T> {
    if !tracked(src) {
        return out;
    }
    let mut inv = vec![0; axes.len()];
    for (i, &a) in axes.iter().enumerate() {
        inv[a] = i;
    }
    let (axes, so) = (axes.to_vec(), out.shape().to_vec());
    let ss = src.shape().to_vec();
    let ty = T::TYPE;
    view_node(
        "permute",
        src,
        out,
        move |ct| {
            per_float(
                ty,
                ct,
                &so,
                |t| Ok(t.permute(&inv)),
                |t| Ok(t.permute(&inv)),
            )
        },
        move |t| {
            per_float(
                ty,
                t,
                &ss,
                |t| Ok(t.permute(&axes)),
                |t| Ok(t.permute(&axes)),
            )
        },
    )
}

/// `f32f` or `f64f` applied to `g` as a tensor of shape `shape`, by element type.
fn per_float(
    ty: VarType,
    g: &Grad,
    shape: &[usize],
    f32f: impl Fn(Tensor<f32>) -> kiln_core::Result<Tensor<f32>>,
    f64f: impl Fn(Tensor<f64>) -> kiln_core::Result<Tensor<f64>>,
) -> Grad {
    match ty {
        VarType::F32 => Grad::of(crate::array::ok(f32f(tensor(g, shape))).into_array()),
        _ => Grad::of(crate::array::ok(f64f(tensor(g, shape))).into_array()),
    }
}

/// The node of the slice `out` of `src` (the view reading `offset + Σ c·mults`, taking `sel` of
/// each source axis): its adjoint is a masked view of the cotangent that puts each element back
/// where it was read (zeros elsewhere; no scatter).
pub(crate) fn record_slice<T: Scalar>(
    src: &Tensor<T>,
    sel: &[AxisSel],
    offset: i64,
    mults: &[i64],
    out: Tensor<T>,
) -> Tensor<T> {
    if !tracked(src) {
        return out;
    }
    let (so, ss) = (out.shape().to_vec(), src.shape().to_vec());
    let (so2, ss2, sel, mults) = (so.clone(), ss.clone(), sel.to_vec(), mults.to_vec());
    let ty = T::TYPE;
    view_node(
        "slice",
        src,
        out,
        move |ct| match ty {
            VarType::F32 => Grad::of(slice_adjoint(&ct.array::<f32>(), &ss, &so, &sel)),
            _ => Grad::of(slice_adjoint(&ct.array::<f64>(), &ss, &so, &sel)),
        },
        move |t| {
            per_float(
                ty,
                t,
                &ss2,
                |t| Ok(t.affine_view(&so2, offset, &mults)),
                |t| Ok(t.affine_view(&so2, offset, &mults)),
            )
        },
    )
}

/// `ct` (shape `to`) summed over the axes that broadcasting `from` to `to` added or widened.
fn unbroadcast_tensor<F: Float>(ct: Tensor<F>, from: &[usize], to: &[usize]) -> Tensor<F> {
    let lead = to.len() - from.len();
    let mut t = ct;
    if lead > 0 {
        // the new leading axes as one, summed at once
        let outer: usize = to[..lead].iter().product();
        t = t.reshape(&[&[outer][..], &to[lead..]].concat()).sum_axis(0);
    }
    for (d, &f) in from.iter().enumerate() {
        if f == 1 && to[lead + d] != 1 {
            t = t.sum_axis_keepdim(d);
        }
    }
    t.reshape(from)
}

/// The node of `out = src.broadcast_to(..)`: its adjoint sums over the broadcast axes.
pub(crate) fn record_broadcast<T: Scalar>(src: &Tensor<T>, out: Tensor<T>) -> Tensor<T> {
    if !tracked(src) {
        return out;
    }
    let (so, ss) = (out.shape().to_vec(), src.shape().to_vec());
    let (so2, ss2) = (so.clone(), ss.clone());
    let ty = T::TYPE;
    // (one element read by every lane: lane-local in the sense loop bodies and branches need)
    let name = if ss.iter().product::<usize>() == 1 {
        "broadcast_scalar"
    } else {
        "broadcast_to"
    };
    view_node(
        name,
        src,
        out,
        move |ct| {
            per_float(
                ty,
                ct,
                &so,
                |t| Ok(unbroadcast_tensor(t, &ss, &so)),
                |t| Ok(unbroadcast_tensor(t, &ss, &so)),
            )
        },
        move |t| {
            per_float(
                ty,
                t,
                &ss2,
                |t| t.try_broadcast_to(&so2),
                |t| t.try_broadcast_to(&so2),
            )
        },
    )
}

/// The node of `out = concat(parts, axis)`: each part's cotangent is its slice of the output's.
pub(crate) fn record_concat<T: Scalar>(
    parts: &[Tensor<T>],
    axis: usize,
    out: Tensor<T>,
) -> Tensor<T> {
    if !parts.iter().any(tracked) {
        return out;
    }
    concat_rule(parts, axis, out)
}

fn concat_rule<T: Scalar>(parts: &[Tensor<T>], axis: usize, out: Tensor<T>) -> Tensor<T> {
    let so = out.shape().to_vec();
    // (lower bound along the axis, shape) of each part that carries a gradient
    let mut lo = 0;
    let mut spans = Vec::new();
    let mut parents: Vec<AdIndex> = Vec::new();
    let shapes: Vec<Vec<usize>> = parts.iter().map(|p| p.shape().to_vec()).collect();
    let mut which = Vec::new();
    for (i, p) in parts.iter().enumerate() {
        let len = p.shape()[axis];
        if tracked(p) {
            spans.push((lo, len));
            parents.push(p.array().ad);
            which.push(i);
        }
        lo += len;
    }
    let ty = T::TYPE;
    let backward = move |ct: &Grad| {
        spans
            .iter()
            .map(|&(lo, len)| {
                let mut args = vec![SliceArg::ALL; so.len()];
                args[axis] = SliceArg::Range {
                    start: Some(lo as isize),
                    stop: Some((lo + len) as isize),
                    step: 1,
                };
                Some(per_float(
                    ty,
                    ct,
                    &so,
                    |t| t.try_slice(&args),
                    |t| t.try_slice(&args),
                ))
            })
            .collect()
    };
    let forward = move |t: &[Option<Grad>]| {
        if t.iter().all(|t| t.is_none()) {
            return None;
        }
        Some(match ty {
            VarType::F32 => Grad::of(concat_tangents::<f32>(t, &which, &shapes, axis)),
            _ => Grad::of(concat_tangents::<f64>(t, &which, &shapes, axis)),
        })
    };
    let rule = Custom {
        name: "concat",
        backward: Box::new(backward),
        forward: Box::new(forward),
    };
    out.map_array(|o| attach(o, &parents, Arc::new(rule)))
}

/// The tangents of the tracked parts (`which`), zeros for the others, joined along `axis`.
fn concat_tangents<F: Float>(
    t: &[Option<Grad>],
    which: &[usize],
    shapes: &[Vec<usize>],
    axis: usize,
) -> Array<F> {
    let parts: Vec<Tensor<F>> = shapes
        .iter()
        .enumerate()
        .map(|(i, s)| {
            match which
                .iter()
                .position(|&w| w == i)
                .and_then(|k| t[k].as_ref())
            {
                Some(g) => tensor::<F>(g, s),
                None => Tensor::zeros(s),
            }
        })
        .collect();
    Tensor::concat(&parts, axis).into_array()
}

/// The node of the axis reduction `out = op(src, axis)` (`keepdim` or not).
pub(crate) fn record_reduce_axis<T: Scalar>(
    src: &Tensor<T>,
    op: ReduceOp,
    axis: usize,
    keepdim: bool,
    out: Tensor<T>,
) -> Tensor<T> {
    if !tracked(src)
        || !matches!(
            op,
            ReduceOp::Add | ReduceOp::Mul | ReduceOp::Min | ReduceOp::Max
        )
    {
        return out;
    }
    let ad = src.array().ad;
    out.map_array(|o| {
        on_float!(T, o, |o: F| {
            let x = Tensor::from_array(as_float::<T, F>(src.array()).clone(), src.shape());
            reduce_axis_rule::<F>(op, axis, keepdim, x, ad, o)
        })
    })
}

/// The local partial of each element of `x` in `op(x, axis)` (`r`: the result with the axis
/// kept); `None` for a sum (all ones). Products are exact with zeros in a slice (never `0/0`);
/// ties of `min`/`max` split the cotangent evenly (as `reduce_min`/`reduce_max` do).
fn axis_partials<F: Float>(
    op: ReduceOp,
    x: &Tensor<F>,
    r: &Tensor<F>,
    axis: usize,
) -> Option<Tensor<F>> {
    let zero = Tensor::<F>::scalar(F::zero());
    let one = Tensor::<F>::scalar(F::one());
    match op {
        ReduceOp::Mul => {
            let is0 = x.eq(&zero);
            let zeros = Tensor::select(&is0, &one, &zero).sum_axis_keepdim(axis);
            let others = Tensor::select(&is0, &one, x).prod_axis_keepdim(axis);
            let only = &is0 & &zeros.eq(&one);
            let with_zero = Tensor::select(&only, &others, &zero);
            Some(Tensor::select(&zeros.eq(&zero), &(r / x), &with_zero))
        }
        ReduceOp::Min | ReduceOp::Max => {
            let at = Tensor::select(&x.eq(r), &one, &zero);
            let n = at.sum_axis_keepdim(axis);
            Some(&at / &n)
        }
        _ => None,
    }
}

fn reduce_axis_rule<F: Float>(
    op: ReduceOp,
    axis: usize,
    keepdim: bool,
    x: Tensor<F>,
    ad: AdIndex,
    out: Array<F>,
) -> Array<F> {
    let xs = x.shape().to_vec();
    let mut kept = xs.clone();
    kept[axis] = 1;
    let r = Tensor::from_array(out.detach(), &kept);
    let (xb, rb, kb, xsb) = (x.clone(), r.clone(), kept.clone(), xs.clone());
    let backward = move |ct: &Grad| {
        let spread = tensor::<F>(ct, &kb).broadcast_to(&xsb);
        let g = match axis_partials(op, &xb, &rb, axis) {
            None => spread,
            Some(w) => &w * &spread,
        };
        vec![Some(Grad::of(g.into_array()))]
    };
    let forward = move |t: &[Option<Grad>]| {
        let t = tensor::<F>(t[0].as_ref()?, &xs);
        let t = match axis_partials(op, &x, &r, axis) {
            None => t,
            Some(w) => &w * &t,
        };
        let s = if keepdim {
            t.sum_axis_keepdim(axis)
        } else {
            t.sum_axis(axis)
        };
        Some(Grad::of(s.into_array()))
    };
    let rule = Custom {
        name: "reduce_axis",
        backward: Box::new(backward),
        forward: Box::new(forward),
    };
    attach(out, &[ad], Arc::new(rule))
}

/// The node of `out = a.matmul(b)`.
pub(crate) fn record_matmul<T: Scalar>(a: &Tensor<T>, b: &Tensor<T>, out: Tensor<T>) -> Tensor<T> {
    let (ta, tb) = (tracked(a), tracked(b));
    if !(ta || tb) {
        return out;
    }
    let parents: Vec<AdIndex> = [(ta, a), (tb, b)]
        .iter()
        .filter(|p| p.0)
        .map(|p| p.1.array().ad)
        .collect();
    out.map_array(|o| {
        on_float!(T, o, |o: F| {
            let af = Tensor::from_array(as_float::<T, F>(a.array()).clone(), a.shape());
            let bf = Tensor::from_array(as_float::<T, F>(b.array()).clone(), b.shape());
            matmul_rule::<F>(af, bf, ta, tb, &parents, o)
        })
    })
}

/// `op(x) · op(y)` with `op` a transpose where `tx`/`ty` say. A plain backward pass reads the
/// stored operands transposed in place (no copy of Wᵀ or hᵀ per product); a pass that records
/// itself (`create_graph`) or a tracked operand takes the differentiable transpose.
fn product_t<F: Float>(x: &Tensor<F>, tx: bool, y: &Tensor<F>, ty: bool) -> Array<F> {
    let op = |t: &Tensor<F>, on: bool| if on { t.transpose() } else { t.clone() };
    if !(super::rules::tracks(x.array()) || super::rules::tracks(y.array())) {
        let (m, k) = if tx {
            (x.shape()[1], x.shape()[0])
        } else {
            (x.shape()[0], x.shape()[1])
        };
        let n = if ty { y.shape()[0] } else { y.shape()[1] };
        let trans = kiln_core::Trans { a: tx, b: ty };
        if let Ok(id) = kiln_core::matmul_t(x.array().id(), y.array().id(), m, k, n, trans) {
            return Array::from_id(id);
        }
    }
    op(x, tx).matmul(&op(y, ty)).into_array()
}

fn matmul_rule<F: Float>(
    a: Tensor<F>,
    b: Tensor<F>,
    ta: bool,
    tb: bool,
    parents: &[AdIndex],
    out: Array<F>,
) -> Array<F> {
    let (sa, sb) = (a.shape().to_vec(), b.shape().to_vec());
    let so = vec![sa[0], sb[1]];
    let (ab, bb, sob) = (a.clone(), b.clone(), so.clone());
    // the right operand's node: a step of a gradient scan may defer `aᵀ·c` for it (push-out)
    // (and the left one's, when it is a row of a sequence: `c·bᵀ` for every row at once)
    let (b_node, ka) = (if tb { parents[usize::from(ta)] } else { 0 }, sa[1]);
    let a_node = if ta { parents[0] } else { 0 };
    let backward = move |ct: &Grad| {
        let c = tensor::<F>(ct, &sob);
        let (mut right, mut left_deferred) = (None, false);
        if tb {
            let deferred = super::deferred::collecting() && {
                let (a, cd) = (Grad::of(ab.array().detach()), Grad::of(c.array().detach()));
                super::deferred::defer(b_node, &a, &cd, (sob[0], ka, sob[1]))
            };
            right = Some(if deferred {
                left_deferred =
                    ta && super::deferred::defer_left(a_node, &Grad::of(bb.array().detach()));
                None
            } else {
                Some(Grad::of(product_t(&ab, true, &c, false)))
            });
        }
        let mut v = Vec::new();
        if ta {
            v.push((!left_deferred).then(|| Grad::of(product_t(&c, false, &bb, true))));
        }
        v.extend(right);
        v
    };
    let forward = move |t: &[Option<Grad>]| {
        let mut it = t.iter();
        let da = if ta {
            it.next().cloned().flatten()
        } else {
            None
        };
        let db = if tb {
            it.next().cloned().flatten()
        } else {
            None
        };
        let l = da.map(|g| tensor::<F>(&g, &sa).matmul(&b));
        let r = db.map(|g| a.matmul(&tensor::<F>(&g, &sb)));
        let s = match (l, r) {
            (Some(l), Some(r)) => &l + &r,
            (Some(l), None) => l,
            (None, Some(r)) => r,
            (None, None) => return None,
        };
        Some(Grad::of(s.into_array()))
    };
    let rule = Custom {
        name: "matmul",
        backward: Box::new(backward),
        forward: Box::new(forward),
    };
    attach(out, parents, Arc::new(rule))
}
