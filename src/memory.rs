//! Gathers and scatters: reading and writing arrays at computed indices.
//!
//! Out-of-range indices never touch memory: a gather reads 0, a scatter is dropped, and both are
//! counted in `kiln::stats()` (`oob_reads`, `oob_writes`; `KILN_DEBUG=1` also logs a warning). A
//! scatter has value semantics: a clone of the target taken before it, or an expression already
//! traced from it, keeps the old contents (the buffer is copied only if it is shared).
//!
//! Every function here panics on error with a message that says what to do, and has a `try_`
//! twin with the same arguments in the same order that returns the error instead (`gather` /
//! `try_gather`, `scatter_reduce_masked` / `try_scatter_reduce_masked`, …). Masks are `impl
//! IntoArray<bool>` everywhere (`&mask`, `mask` or `true`). The one exception is the historical
//! `try_scatter(op, target, value, index, mask)`, the general form that existed before the twins:
//! it is `try_scatter_reduce_masked` (`ReduceOp::None` for a plain scatter) and stays for code that
//! calls it.

use crate::array::{ok, Array, Bool, IntoArray};
use crate::types::Integer;
use kiln_core::{ReduceOp, Result, Scalar};

/// `source[index]` lane by lane (0 where the index is out of range). Evaluates `source` first.
///
/// ```
/// use kiln::prelude::*;
/// let src = Float32::from_slice(&[10.0, 20.0, 30.0]);
/// let out = gather(&src, &UInt32::from_slice(&[2, 0, 7]));
/// assert_eq!(out.to_vec(), vec![30.0, 10.0, 0.0]);   // index 7 is out of range
/// ```
///
/// Gradients: the source's gradient is the scatter-add of the result's at the indices (a lane
/// read twice counts twice; masked lanes and out-of-range indices give nothing).
///
/// ```
/// use kiln::prelude::*;
/// let mut src = Float64::from_slice(&[10.0, 20.0, 30.0]);
/// src.enable_grad();
/// gather(&src, &UInt32::from_slice(&[2, 0, 2, 7])).sum().backward();
/// assert_eq!(src.grad().to_vec(), vec![1.0, 0.0, 2.0]);
/// ```
#[track_caller]
pub fn gather<T: Scalar, I: Integer>(source: &Array<T>, index: &Array<I>) -> Array<T> {
    gather_masked(source, index, true)
}

/// As [`gather`], returning errors (a size mismatch, a refused evaluation) instead of panicking.
///
/// ```
/// use kiln::prelude::*;
/// let src = Float32::from_slice(&[10.0, 20.0]);
/// assert_eq!(kiln::try_gather(&src, &UInt32::from(1u32)).unwrap().item(), 20.0);
/// ```
pub fn try_gather<T: Scalar, I: Integer>(source: &Array<T>, index: &Array<I>) -> Result<Array<T>> {
    try_gather_masked(source, index, true)
}

/// A view: `source[index]` lane by lane (0 out of range), where an unevaluated `source` is not
/// evaluated first but recomputed at the indices inside the kernel that uses the result, so a
/// permutation, slice or reversal of an expression costs no intermediate array and no extra
/// launch. Use it where each element is read about once; [`gather`] evaluates the source once,
/// which is cheaper when elements are read many times. `KILN_LOG=kiln::schedule=debug` says which
/// path each view took.
///
/// ```
/// use kiln::prelude::*;
/// let x = Float32::arange(5);
/// let y = &x * 2.0 + 1.0;                                   // lazy
/// let reversed = gather_view(&y, &(4u32 - UInt32::arange(5)));
/// let before = kiln::stats().launches;
/// assert_eq!(reversed.to_vec(), vec![9.0, 7.0, 5.0, 3.0, 1.0]);
/// assert_eq!(kiln::stats().launches - before, 1);            // one kernel, `y` never stored
/// assert!(!y.is_evaluated());
/// ```
#[track_caller]
pub fn gather_view<T: Scalar, I: Integer>(source: &Array<T>, index: &Array<I>) -> Array<T> {
    gather_view_masked(source, index, &Bool::scalar(true))
}

/// `gather_view` reading only where `mask` holds (0 elsewhere).
#[track_caller]
pub(crate) fn gather_view_masked<T: Scalar, I: Integer>(
    source: &Array<T>,
    index: &Array<I>,
    mask: &Bool,
) -> Array<T> {
    let out = Array::from_id(ok(kiln_core::gather_view(
        source.id(),
        index.id(),
        mask.id(),
    )));
    crate::ad::memory::record_gather(source, index, mask, true, out)
}

/// `mask ? source[index] : 0` lane by lane.
///
/// ```
/// use kiln::prelude::*;
/// let src = Int32::from_slice(&[1, 2, 3]);
/// let idx = UInt32::arange(3);
/// assert_eq!(gather_masked(&src, &idx, &idx.ne(1)).to_vec(), vec![1, 0, 3]);
/// ```
#[track_caller]
pub fn gather_masked<T: Scalar, I: Integer>(
    source: &Array<T>,
    index: &Array<I>,
    mask: impl IntoArray<bool>,
) -> Array<T> {
    ok(try_gather_masked(source, index, mask))
}

/// As [`gather_masked`], returning errors instead of panicking.
pub fn try_gather_masked<T: Scalar, I: Integer>(
    source: &Array<T>,
    index: &Array<I>,
    mask: impl IntoArray<bool>,
) -> Result<Array<T>> {
    let mask = mask.into_array();
    let out = Array::from_id(kiln_core::gather(source.id(), index.id(), mask.id())?);
    Ok(crate::ad::memory::record_gather(
        source, index, &mask, false, out,
    ))
}

/// `target[index] = value` lane by lane; out-of-range lanes are dropped.
///
/// ```
/// use kiln::prelude::*;
/// let mut t = Float32::zeros(4);
/// let before = t.clone();
/// scatter(&mut t, &Float32::from_slice(&[1.0, 2.0]), &UInt32::from_slice(&[3, 1]));
/// assert_eq!(t.to_vec(), vec![0.0, 2.0, 0.0, 1.0]);
/// assert_eq!(before.to_vec(), vec![0.0; 4]);          // value semantics
/// ```
#[track_caller]
pub fn scatter<T: Scalar, I: Integer>(
    target: &mut Array<T>,
    value: impl IntoArray<T>,
    index: &Array<I>,
) {
    scatter_masked(target, value, index, true)
}

/// As [`scatter`], returning errors instead of panicking (the target is unchanged on error).
///
/// ```
/// use kiln::prelude::*;
/// let mut t = Int32::zeros(3);
/// assert!(kiln::try_scatter_masked(&mut t, 5, &UInt32::arange(2), &Bool::from_slice(&[true, false, true])).is_err());
/// kiln::try_scatter_masked(&mut t, 5, &UInt32::arange(2), true).unwrap();
/// assert_eq!(t.to_vec(), vec![5, 5, 0]);
/// ```
pub fn try_scatter_masked<T: Scalar, I: Integer>(
    target: &mut Array<T>,
    value: impl IntoArray<T>,
    index: &Array<I>,
    mask: impl IntoArray<bool>,
) -> Result<()> {
    try_scatter(ReduceOp::None, target, value, index, mask)
}

/// `if mask { target[index] = value }` lane by lane.
#[track_caller]
pub fn scatter_masked<T: Scalar, I: Integer>(
    target: &mut Array<T>,
    value: impl IntoArray<T>,
    index: &Array<I>,
    mask: impl IntoArray<bool>,
) {
    ok(try_scatter_masked(target, value, index, mask))
}

/// `target[index] (op)= value`; every duplicate index counts.
///
/// ```
/// use kiln::prelude::*;
/// let mut hist = UInt32::zeros(3);
/// scatter_reduce(ReduceOp::Add, &mut hist, 1u32, &UInt32::from_slice(&[0, 2, 2, 2]));
/// assert_eq!(hist.to_vec(), vec![1, 0, 3]);
/// ```
#[track_caller]
pub fn scatter_reduce<T: Scalar, I: Integer>(
    op: ReduceOp,
    target: &mut Array<T>,
    value: impl IntoArray<T>,
    index: &Array<I>,
) {
    ok(try_scatter_reduce(op, target, value, index))
}

/// As [`scatter_reduce`], returning errors instead of panicking.
pub fn try_scatter_reduce<T: Scalar, I: Integer>(
    op: ReduceOp,
    target: &mut Array<T>,
    value: impl IntoArray<T>,
    index: &Array<I>,
) -> Result<()> {
    try_scatter(op, target, value, index, true)
}

/// Masked [`scatter_reduce`]. The mask is `impl IntoArray<bool>` as in every masked function
/// (`&mask`, `mask` or `true`).
///
/// ```
/// use kiln::prelude::*;
/// let mut hist = UInt32::zeros(2);
/// let idx = UInt32::from_slice(&[0, 1, 1]);
/// scatter_reduce_masked(ReduceOp::Add, &mut hist, 1u32, &idx, &idx.ne(0));
/// scatter_reduce_masked(ReduceOp::Add, &mut hist, 1u32, &idx, true);
/// assert_eq!(hist.to_vec(), vec![1, 4]);
/// ```
#[track_caller]
pub fn scatter_reduce_masked<T: Scalar, I: Integer>(
    op: ReduceOp,
    target: &mut Array<T>,
    value: impl IntoArray<T>,
    index: &Array<I>,
    mask: impl IntoArray<bool>,
) {
    ok(try_scatter_reduce_masked(op, target, value, index, mask))
}

/// As [`scatter_reduce_masked`], returning errors instead of panicking (same as [`try_scatter`]).
pub fn try_scatter_reduce_masked<T: Scalar, I: Integer>(
    op: ReduceOp,
    target: &mut Array<T>,
    value: impl IntoArray<T>,
    index: &Array<I>,
    mask: impl IntoArray<bool>,
) -> Result<()> {
    try_scatter(op, target, value, index, mask)
}

/// Any scatter, returning errors instead of panicking: the general form, with the arguments of
/// [`try_scatter_reduce_masked`] (kept under this name for the code that calls it).
///
/// Gradients: `scatter` and `scatter_reduce(Add)` are differentiable in the target and the
/// value (the overwritten elements of the old target get zero gradient; with duplicate indices
/// in a plain scatter, every lane that wrote a position gets that position's cotangent). Other
/// reductions on an operand that carries a gradient return `Error::NotDifferentiable` and leave
/// the target unchanged.
///
/// ```
/// use kiln::prelude::*;
/// let mut t = Float64::zeros(2);
/// let mut v = Float64::from(1.0);
/// v.enable_grad();
/// let e = kiln::try_scatter(ReduceOp::Mul, &mut t, &v, &UInt32::from(0u32), true).unwrap_err();
/// assert!(e.to_string().contains("scatter_reduce"));
/// ```
pub fn try_scatter<T: Scalar, I: Integer>(
    op: ReduceOp,
    target: &mut Array<T>,
    value: impl IntoArray<T>,
    index: &Array<I>,
    mask: impl IntoArray<bool>,
) -> Result<()> {
    let (value, mask) = (value.into_array(), mask.into_array());
    let records = crate::ad::memory::scatter_records(op, target, &value)?;
    // the old target's AD node, held here while the engine replaces the values
    let old_ad = std::mem::replace(&mut target.ad, 0);
    let mut id = target.id();
    // masked by the lanes that run the evaluated loop body, branch or call it is in, if any
    let done = kiln_core::lanes::scatter(&mut id, value.id(), index.id(), mask.id(), op);
    if id != target.id() {
        // copy-on-write replaced the target: the old handle's reference was already released
        let old = std::mem::replace(target, Array::wrap(id));
        std::mem::forget(old);
    }
    if records && done.is_ok() {
        *target =
            crate::ad::memory::record_scatter(op, target.clone(), old_ad, &value, index, &mask);
        crate::ad::graph::dec_ref(old_ad);
    } else {
        // not recorded (recording suspended, or no float operand carries a gradient): the
        // target keeps its node, as an in-place update always did
        target.ad = old_ad;
    }
    done
}
