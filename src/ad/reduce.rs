//! Derivative rules of horizontal reductions (`sum`, `prod`, `reduce_min`, `reduce_max`).
//!
//! `sum` spreads the cotangent over every lane; `prod` gives each lane the product of the
//! others (exact with zeros among the inputs, never `0/0`); `min`/`max` give the cotangent to the
//! lanes equal to the result, split evenly among ties (JAX's convention). Their block forms
//! (`block_reduce`) apply the same rules within each block.

use super::memory::repeat_blocks;
use super::rules::{as_float, attach, broadcast, into_type, tracks, Custom};
use super::value::Grad;
use crate::array::Array;
use crate::ops::select;
use crate::types::Float;
use kiln_core::{ReduceOp, Scalar, VarType};
use std::sync::Arc;

/// Give the reduction `out = op(x)` its node when `x` carries a gradient.
pub(crate) fn record_reduce<T: Scalar>(op: ReduceOp, x: &Array<T>, out: Array<T>) -> Array<T> {
    if !tracks(x) {
        return out;
    }
    match T::TYPE {
        VarType::F32 => into_type(float_reduce::<f32>(op, as_float(x), into_type(out))),
        VarType::F64 => into_type(float_reduce::<f64>(op, as_float(x), into_type(out))),
        _ => out,
    }
}

/// The per-lane partial of `op(x)` with respect to each lane (`None` for `sum`: all ones).
fn partials<T: Float>(op: ReduceOp, x: &Array<T>, out: &Array<T>) -> Option<Array<T>> {
    let (zero, one) = (Array::<T>::scalar(T::zero()), Array::<T>::scalar(T::one()));
    match op {
        ReduceOp::Mul => {
            let is0 = x.eq(T::zero());
            let zeros = select(&is0, &one, &zero).sum();
            let others = select(&is0, &one, x).prod();
            let only_zero = is0 & zeros.eq(T::one());
            let with_zero = select(&only_zero, &others, &zero);
            // `out` is captured detached (the node cannot hold itself); when this rule is being
            // differentiated (`create_graph`, e.g. `hvp`) recompute the product from the tracked
            // `x`, or the second derivative would miss d(out)/dx
            let out = if tracks(x) { x.prod() } else { out.clone() };
            Some(select(&zeros.eq(T::zero()), out / x, with_zero))
        }
        ReduceOp::Min | ReduceOp::Max => {
            let at = select(&x.eq(out), &one, &zero);
            let n = at.sum();
            Some(at / n)
        }
        _ => None,
    }
}

fn float_reduce<T: Float>(op: ReduceOp, x: &Array<T>, out: Array<T>) -> Array<T> {
    if !matches!(
        op,
        ReduceOp::Add | ReduceOp::Mul | ReduceOp::Min | ReduceOp::Max
    ) {
        return out;
    }
    let n = x.size();
    let (xb, ob) = (x.clone(), out.detach());
    let (xf, of) = (x.clone(), out.detach());
    let backward = move |ct: &Grad| {
        let ct = ct.array::<T>();
        let g = match partials(op, &xb, &ob) {
            None => broadcast(ct, n),
            Some(w) => broadcast(w * ct, n),
        };
        vec![Some(Grad::of(g))]
    };
    let forward = move |t: &[Option<Grad>]| {
        let t = t[0].as_ref()?.array::<T>();
        Some(Grad::of(match partials(op, &xf, &of) {
            None => t.sum(),
            Some(w) => (w * t).sum(),
        }))
    };
    let rule = Custom {
        name: op_name(op),
        backward: Box::new(backward),
        forward: Box::new(forward),
    };
    attach(out, &[x.ad], Arc::new(rule))
}

fn op_name(op: ReduceOp) -> &'static str {
    match op {
        ReduceOp::Add => "sum",
        ReduceOp::Mul => "prod",
        ReduceOp::Min => "reduce_min",
        _ => "reduce_max",
    }
}

/// Give the block reduction `out = x.block_reduce(op, block)` its node (`Mul`, `Min`, `Max`;
/// `Add` is `block_sum`'s rule) when `x` carries a gradient.
pub(crate) fn record_block_reduce<T: Scalar>(
    op: ReduceOp,
    x: &Array<T>,
    block: usize,
    out: Array<T>,
) -> Array<T> {
    if !tracks(x) || !matches!(op, ReduceOp::Mul | ReduceOp::Min | ReduceOp::Max) {
        return out;
    }
    match T::TYPE {
        VarType::F32 => into_type(block_rule::<f32>(op, as_float(x), block, into_type(out))),
        VarType::F64 => into_type(block_rule::<f64>(op, as_float(x), block, into_type(out))),
        _ => out,
    }
}

/// Each lane's partial of its block's result (the block forms of [`partials`]).
fn block_partials<T: Float>(op: ReduceOp, x: &Array<T>, block: usize, out: &Array<T>) -> Array<T> {
    let n = x.len();
    let (zero, one) = (Array::<T>::scalar(T::zero()), Array::<T>::scalar(T::one()));
    let spread = |b: &Array<T>| repeat_blocks(b, n, block);
    match op {
        ReduceOp::Mul => {
            let is0 = x.eq(T::zero());
            let zeros = spread(&select(&is0, &one, &zero).block_sum(block));
            let others = spread(&select(&is0, &one, x).block_reduce(ReduceOp::Mul, block));
            let only_zero = is0 & zeros.eq(T::one());
            let with_zero = select(&only_zero, &others, &zero);
            // recomputed from a tracked `x` when this rule is differentiated (see `partials`)
            let out = if tracks(x) {
                x.block_reduce(ReduceOp::Mul, block)
            } else {
                out.clone()
            };
            select(&zeros.eq(T::zero()), spread(&out) / x, with_zero)
        }
        _ => {
            let at = select(&x.eq(spread(out)), &one, &zero);
            let ties = spread(&at.block_sum(block));
            at / ties
        }
    }
}

fn block_rule<T: Float>(op: ReduceOp, x: &Array<T>, block: usize, out: Array<T>) -> Array<T> {
    let n = x.len();
    let (xb, ob) = (x.clone(), out.detach());
    let (xf, of) = (x.clone(), out.detach());
    let rule = Custom {
        name: "block_reduce",
        backward: Box::new(move |ct: &Grad| {
            let ct = repeat_blocks(&ct.array::<T>(), n, block);
            vec![Some(Grad::of(block_partials(op, &xb, block, &ob) * ct))]
        }),
        forward: Box::new(move |t: &[Option<Grad>]| {
            let t = t[0].as_ref()?.array::<T>();
            Some(Grad::of(
                (block_partials(op, &xf, block, &of) * t).block_sum(block),
            ))
        }),
    };
    attach(out, &[x.ad], Arc::new(rule))
}
