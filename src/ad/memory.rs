//! Derivative rules of the memory ops (`gather`, `gather_view`, `scatter`, `scatter_reduce`) and
//! of the block and prefix sums.
//!
//! Gather and scatter-add are each other's adjoints: a gather's cotangent is scatter-added into
//! zeros of the source's size, a scatter-add's value gets the gather of the cotangent. Masked
//! lanes and out-of-range indices contribute nothing in either direction (the adjoint masks them
//! out itself, so it never counts spurious out-of-range accesses). A plain scatter overwrites: the
//! old target gets the cotangent with the written positions zeroed, the value what is read back
//! at its index. `scatter_reduce` with `Mul`/`Min`/`Max` on a tracked operand is refused
//! (`NotDifferentiable`) rather than given a wrong gradient.
//!
//! Heavy index collisions (many lanes gathering from few sources) send every lane of the adjoint
//! scatter-add to a few addresses: when the source is small the adjoint instead sums each
//! source's lanes with a one-hot reduction (`scatter_add_into`; measured in
//! `examples/ad_gather_collisions.rs`: on the CPU backends collisions cost little, the per-lane
//! scatter itself is what is slow, and the sums are faster and more accurate below ~40 sources).

use super::graph::AdIndex;
use super::rules::{attach, into_type, tracks, unbroadcast, Custom};
use super::value::Grad;
use crate::array::{Array, Bool, UInt32, UInt64};
use crate::memory::{gather_masked, scatter_masked, scatter_reduce_masked};
use crate::ops::select;
use crate::types::{Float, Integer};
use kiln_core::{Error, ReduceOp, Result, Scalar, VarType};
use std::sync::Arc;

/// Run `$body` with `$o` bound to `$out` seen as its float type `$F` (f32 or f64); any other
/// element type carries no gradient and `$out` is returned as it is.
macro_rules! on_float {
    ($T:ty, $out:expr, |$o:ident: $F:ident| $body:expr) => {
        match <$T as Scalar>::TYPE {
            VarType::F32 => {
                #[allow(dead_code)]
                type $F = f32;
                let $o: Array<f32> = into_type($out);
                into_type($body)
            }
            VarType::F64 => {
                #[allow(dead_code)]
                type $F = f64;
                let $o: Array<f64> = into_type($out);
                into_type($body)
            }
            _ => $out,
        }
    };
}
pub(crate) use on_float;

/// `mask` narrowed to the lanes whose index lies in `0..n` (negative signed indices wrap to
/// huge unsigned ones and fall out too).
fn in_range<I: Integer>(index: &Array<I>, mask: &Bool, n: usize) -> Bool {
    mask & index.cast::<u64>().lt(n as u64)
}

/// Sources at or below this size take the one-hot adjoint instead of a scatter-add, when there
/// are many more lanes than sources. Measured (`examples/ad_gather_collisions.rs`, 10M f32 lanes,
/// 2 cores): a scatter-add costs about 25 ns a lane whether or not its lanes collide (each lane
/// is a call), one one-hot sum about 0.5 ns a lane, so the sums win below about 40 sources; they
/// are also exact to f32 rounding of a tree sum, where a serial f32 scatter-add of millions of
/// lanes into one element drifts by 1e-3.
const SMALL_SOURCE: usize = 32;

/// `out[j] = Σ_{lanes i with index[i] = j, mask[i]} value[i]`, `n` lanes out: the adjoint of a
/// gather. With a small target and many lanes every lane would hit one of a few addresses of an
/// atomic scatter-add; instead each target element sums its own one-hot column with a plain
/// reduction (`n` reductions of the lanes, no atomics).
pub(crate) fn scatter_add_into<F: Float, I: Integer>(
    n: usize,
    value: &Array<F>,
    index: &Array<I>,
    mask: &Bool,
) -> Array<F> {
    let lanes = value.len().max(index.len()).max(mask.len());
    if n > 0 && n <= SMALL_SOURCE && lanes >= 64 * n {
        // out-of-range lanes match no target: only the caller's mask is applied
        let zero = Array::<F>::scalar(F::zero());
        // evaluated once, so that the `n` reductions read it instead of recomputing it
        let v = select(mask, value, &zero);
        v.eval();
        let parts: Vec<Array<F>> = (0..n)
            .map(|j| select(&index.eq(I::from_bits64(j as u64)), &v, &zero).sum())
            .collect();
        return concat_scalars(&parts);
    }
    let mut out = Array::<F>::zeros(n);
    scatter_reduce_masked(
        ReduceOp::Add,
        &mut out,
        value,
        index,
        in_range(index, mask, n),
    );
    out
}

/// Size-1 arrays side by side in one array.
fn concat_scalars<F: Float>(parts: &[Array<F>]) -> Array<F> {
    let n = parts.len();
    let lane = UInt32::arange(n);
    let mut acc = Array::<F>::zeros(n);
    for (j, p) in parts.iter().enumerate() {
        acc = select(&lane.eq(j as u32), p, &acc);
    }
    acc
}

/// Give `out = mask ? source[index] : 0` its node when `source` carries a gradient (`view`: the
/// result was made by `gather_view`, and tangents are gathered the same way).
pub(crate) fn record_gather<T: Scalar, I: Integer>(
    source: &Array<T>,
    index: &Array<I>,
    mask: &Bool,
    view: bool,
    out: Array<T>,
) -> Array<T> {
    if !tracks(source) {
        return out;
    }
    let (ad, n) = (source.ad, source.len());
    on_float!(T, out, |o: F| gather_rule::<F, I>(
        ad, n, index, mask, view, o
    ))
}

fn gather_rule<F: Float, I: Integer>(
    src: AdIndex,
    n: usize,
    index: &Array<I>,
    mask: &Bool,
    view: bool,
    out: Array<F>,
) -> Array<F> {
    let (ib, mb) = (index.clone(), mask.clone());
    let (ifw, mfw) = (index.clone(), mask.clone());
    let backward = move |ct: &Grad| {
        let ct = ct.array::<F>();
        vec![Some(Grad::of(scatter_add_into(n, &ct, &ib, &mb)))]
    };
    let forward = move |t: &[Option<Grad>]| {
        let t = t[0].as_ref()?.array::<F>();
        Some(Grad::of(if view {
            crate::memory::gather_view_masked(&t, &ifw, &mfw)
        } else {
            gather_masked(&t, &ifw, &mfw)
        }))
    };
    let rule = Custom {
        name: if view { "gather_view" } else { "gather" },
        backward: Box::new(backward),
        forward: Box::new(forward),
    };
    attach(out, &[src], Arc::new(rule))
}

/// Whether a scatter `op` into `target` of `value` must record a node; an error for a reduction
/// whose derivative kiln does not give (checked before anything is written).
pub(crate) fn scatter_records<T: Scalar>(
    op: ReduceOp,
    target: &Array<T>,
    value: &Array<T>,
) -> Result<bool> {
    let tracked = (tracks(target) || tracks(value)) && T::TYPE.is_float();
    if tracked && !matches!(op, ReduceOp::None | ReduceOp::Add) {
        return Err(Error::NotDifferentiable {
            construct: format!("scatter_reduce({op:?})"),
            detail: "kiln differentiates `scatter` and `scatter_reduce(Add)` only; compute the \
                     operand under `suspend_grad`, or express the reduction with a gather and \
                     elementwise ops"
                .into(),
        });
    }
    if tracked && kiln_core::lanes::active() {
        // the rule would replay the scatter later, outside the frame that says which lanes ran
        return Err(Error::NotDifferentiable {
            construct: "scatter inside an evaluated loop body, branch or call".into(),
            detail:
                "its rule would replay the scatter after the body, outside the frame that says \
                     which lanes ran it; run the construct in symbolic mode, or scatter detached \
                     operands"
                    .into(),
        });
    }
    Ok(tracked)
}

/// Give the scatter's new `target` its node: parents the old target's node `old` (0: none) and
/// `value`'s. `op` is `None` (overwrite) or `Add` (checked by `scatter_records`).
pub(crate) fn record_scatter<T: Scalar, I: Integer>(
    op: ReduceOp,
    target: Array<T>,
    old: AdIndex,
    value: &Array<T>,
    index: &Array<I>,
    mask: &Bool,
) -> Array<T> {
    let vad = if super::recording() { value.ad } else { 0 };
    if old == 0 && vad == 0 {
        return target;
    }
    let (nv, nt) = (value.len(), target.len());
    on_float!(T, target, |o: F| scatter_rule::<F, I>(
        op, o, nt, old, vad, nv, index, mask
    ))
}

#[allow(clippy::too_many_arguments)]
fn scatter_rule<F: Float, I: Integer>(
    op: ReduceOp,
    out: Array<F>,
    nt: usize,
    old: AdIndex,
    vad: AdIndex,
    nv: usize,
    index: &Array<I>,
    mask: &Bool,
) -> Array<F> {
    let (tt, tv) = (old != 0, vad != 0);
    let lanes = nv.max(index.len()).max(mask.len());
    let add = op == ReduceOp::Add;
    let (ib, mb) = (index.clone(), in_range(index, mask, nt));
    let (ifw, mfw) = (index.clone(), mask.clone());
    let backward = move |ct: &Grad| {
        let ct = ct.array::<F>();
        let mut v = Vec::new();
        if tt {
            if add {
                v.push(Some(Grad::of(ct.clone())));
            } else {
                // overwritten positions never reach the output: their old values get nothing
                let mut c = ct.clone();
                scatter_masked(&mut c, F::zero(), &ib, &mb);
                v.push(Some(Grad::of(c)));
            }
        }
        if tv {
            let g = gather_masked(&ct, &ib, &mb);
            v.push(Some(Grad::of(unbroadcast(g, nv.into(), lanes.into()))));
        }
        v
    };
    let forward = move |t: &[Option<Grad>]| {
        let mut it = t.iter();
        let gt = if tt {
            it.next().cloned().flatten()
        } else {
            None
        };
        let gv = if tv {
            it.next().cloned().flatten()
        } else {
            None
        };
        if gt.is_none() && gv.is_none() {
            return None;
        }
        let mut base = match gt {
            Some(g) => g.array::<F>(),
            None => Array::<F>::zeros(nt),
        };
        let val = gv
            .map(|g| g.array::<F>())
            .unwrap_or_else(|| Array::scalar(F::zero()));
        if add {
            scatter_reduce_masked(ReduceOp::Add, &mut base, &val, &ifw, &mfw);
        } else {
            scatter_masked(&mut base, &val, &ifw, &mfw);
        }
        Some(Grad::of(base))
    };
    let parents: Vec<AdIndex> = [old, vad].into_iter().filter(|&p| p != 0).collect();
    let rule = Custom {
        name: if add { "scatter_add" } else { "scatter" },
        backward: Box::new(backward),
        forward: Box::new(forward),
    };
    attach(out, &parents, Arc::new(rule))
}

/// `ct` repeated over blocks: lane `i` gets `ct[i / block]` (the adjoint of `block_sum`).
pub(crate) fn repeat_blocks<F: Float>(ct: &Array<F>, n: usize, block: usize) -> Array<F> {
    if n <= u32::MAX as usize {
        crate::memory::gather(ct, &(UInt32::arange(n) / block as u32))
    } else {
        crate::memory::gather(ct, &(UInt64::arange(n) / block as u64))
    }
}

/// Give `out = x.block_sum(block)` its node.
pub(crate) fn record_block_sum<T: Scalar>(x: &Array<T>, block: usize, out: Array<T>) -> Array<T> {
    if !tracks(x) {
        return out;
    }
    let (ad, n) = (x.ad, x.len());
    on_float!(T, out, |o: F| {
        let rule = Custom {
            name: "block_sum",
            backward: Box::new(move |ct| {
                vec![Some(Grad::of(repeat_blocks(&ct.array::<F>(), n, block)))]
            }),
            forward: Box::new(move |t| {
                let t = t[0].as_ref()?.array::<F>();
                Some(Grad::of(t.block_sum(block)))
            }),
        };
        attach(o, &[ad], Arc::new(rule))
    })
}

/// `a` in reverse order (a view: fused into its reader).
fn reversed<F: Float>(a: &Array<F>) -> Array<F> {
    let n = a.len();
    if n <= 1 {
        return a.clone();
    }
    if n <= u32::MAX as usize {
        crate::memory::gather_view(a, &((n as u32 - 1) - UInt32::arange(n)))
    } else {
        crate::memory::gather_view(a, &((n as u64 - 1) - UInt64::arange(n)))
    }
}

/// Give `out = x.prefix_sum(exclusive)` its node. Lane `j` of the input reaches every output
/// lane after it (and itself unless exclusive), so its cotangent is the same kind of prefix sum
/// run from the other end.
pub(crate) fn record_prefix_sum<T: Scalar>(
    x: &Array<T>,
    exclusive: bool,
    out: Array<T>,
) -> Array<T> {
    if !tracks(x) {
        return out;
    }
    let ad = x.ad;
    on_float!(T, out, |o: F| {
        let rule = Custom {
            name: "prefix_sum",
            backward: Box::new(move |ct| {
                let ct = ct.array::<F>();
                vec![Some(Grad::of(reversed(
                    &reversed(&ct).prefix_sum(exclusive),
                )))]
            }),
            forward: Box::new(move |t| {
                let t = t[0].as_ref()?.array::<F>();
                Some(Grad::of(t.prefix_sum(exclusive)))
            }),
        };
        attach(o, &[ad], Arc::new(rule))
    })
}
