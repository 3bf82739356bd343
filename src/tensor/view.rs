//! Shape operations on tensors, all lazy views: `reshape`, `permute`/`transpose`, `slice`,
//! `index_axis`, `flip`, `broadcast_to`, `squeeze`/`unsqueeze`, `concat`, `stack`.
//!
//! Every view maps an output coordinate `c` to the source's flat index `offset + Σ c[d]·mult[d]`
//! (a negative multiplier walks backwards, 0 broadcasts). The index is computed from the lane
//! number with integer division and remainder by constants, in 32-bit arithmetic when the sizes
//! allow (wrapping is exact: the final index is in range), and read with `gather_view`, so views of
//! lazy expressions fuse into the consumer's kernel.
//!
//! Gradients flow through every view (rules in `ad::tensor`): a permutation's adjoint is the
//! inverse permutation, a slice's (and `flip`'s, `index_axis`'s) a masked view of the cotangent, a
//! broadcast's a sum over the broadcast axes, a concatenation's the slices of the cotangent;
//! `reshape` keeps the array, and with it the gradient.

use super::{numel, Tensor};
use crate::array::{ok, Array};
use crate::ops::Remainder;
use crate::types::Integer;
use kiln_core::{Error, Result, Scalar};
use std::ops::{Range, RangeFrom, RangeFull, RangeInclusive, RangeTo, RangeToInclusive};

/// Row-major strides of a shape.
pub(crate) fn strides(shape: &[usize]) -> Vec<usize> {
    let mut s = vec![1usize; shape.len()];
    for d in (0..shape.len().saturating_sub(1)).rev() {
        s[d] = s[d + 1] * shape[d + 1];
    }
    s
}

/// The coordinate along `axis` of every lane of a tensor of shape `shape`, as `I`.
pub(crate) fn coordinate<I: Integer + Remainder>(shape: &[usize], axis: usize) -> Array<I> {
    let n = numel(shape).unwrap_or(0);
    let lane = Array::<I>::arange(n);
    let stride = strides(shape)[axis];
    let c = if stride == 1 {
        lane
    } else {
        &lane / I::from_bits64(stride as u64)
    };
    if axis == 0 {
        c
    } else {
        c % I::from_bits64(shape[axis] as u64)
    }
}

/// Whether neighbouring lanes of the last output axis read source elements far apart (more than a
/// cache line): a transposing view, which runs faster in 2-d tiles.
fn reads_across(out: &[usize], mults: &[i64]) -> bool {
    out.len() >= 2 && out[out.len() - 1] > 1 && mults[mults.len() - 1].unsigned_abs() >= 16
}

fn affine_index<I: Integer + Remainder>(out: &[usize], offset: i64, mults: &[i64]) -> Array<I> {
    let n = numel(out).unwrap_or(0);
    let mut idx = Array::<I>::full(I::from_bits64(offset as u64), n);
    for d in 0..out.len() {
        if mults[d] != 0 && out[d] > 1 {
            let c = coordinate::<I>(out, d);
            idx += c * I::from_bits64(mults[d] as u64);
        }
    }
    idx
}

/// What a slice takes of one source axis: one position (the axis is dropped), or `count`
/// positions from `first` in steps of `step` (negative: walking down).
#[derive(Clone, Copy, Debug)]
pub(crate) enum AxisSel {
    At(i64),
    Range { first: i64, step: i64, count: i64 },
}

/// The adjoint of a slice, itself a view: each element of the source (shape `src`) reads the
/// element of `ct` (shape `out`) that the slice read from it, or 0 when the slice skipped it. No
/// scatter: it fuses into the kernel that consumes it, as the slice did.
pub(crate) fn slice_adjoint<T: Scalar>(
    ct: &Array<T>,
    src: &[usize],
    out: &[usize],
    sel: &[AxisSel],
) -> Array<T> {
    let n = numel(src).unwrap_or(0);
    if n == 0 || numel(out).unwrap_or(0) == 0 {
        return Array::full(T::from_bits64(0), n);
    }
    let ost = strides(out);
    let mut idx: Option<Array<i64>> = None;
    let mut mask: Option<crate::Bool> = None;
    let mut o = 0;
    for (d, s) in sel.iter().enumerate() {
        let c = coordinate::<i64>(src, d);
        let (cond, k) = match *s {
            AxisSel::At(p) => (Some(c.eq(p)), None),
            AxisSel::Range { first, step, count } => {
                let whole = first == 0 && step == 1 && count == src[d] as i64;
                let st = step.abs();
                let diff = if step > 0 { c - first } else { first - c };
                let cond = (!whole).then(|| {
                    let inside = diff.ge(0i64) & diff.lt(st * count);
                    if st == 1 {
                        inside
                    } else {
                        inside & (&diff % st).eq(0i64)
                    }
                });
                let k = if st == 1 { diff } else { diff / st };
                (cond, Some(k))
            }
        };
        if let Some(k) = k {
            if out[o] > 1 {
                let term = k * ost[o] as i64;
                idx = Some(match idx {
                    None => term,
                    Some(i) => i + term,
                });
            }
            o += 1;
        }
        if let Some(cond) = cond {
            mask = Some(match mask {
                None => cond,
                Some(m) => m & cond,
            });
        }
    }
    let idx = idx.unwrap_or_else(|| Array::<i64>::zeros(n));
    let mask = mask.unwrap_or_else(|| crate::Bool::scalar(true));
    crate::memory::gather_view_masked(ct, &idx, &mask)
}

impl<T: Scalar> Tensor<T> {
    /// A view with shape `out` reading source element `offset + Σ c[d]·mult[d]` at coordinate `c`.
    pub(crate) fn affine_view(&self, out: &[usize], offset: i64, mults: &[i64]) -> Tensor<T> {
        self.affine_view_where(out, offset, mults, &crate::Bool::scalar(true))
    }

    /// As `affine_view`, reading only where `mask` holds (0 elsewhere; nothing is read there).
    pub(crate) fn affine_view_where(
        &self,
        out: &[usize],
        offset: i64,
        mults: &[i64],
        mask: &crate::Bool,
    ) -> Tensor<T> {
        let n = ok(numel(out));
        let view = |index: kiln_core::VarId| -> Array<T> {
            Array::from_id(ok(kiln_core::gather_view(
                self.array.id(),
                index,
                mask.id(),
            )))
        };
        let array = if n == 0 {
            Array::full(T::from_bits64(0), 0)
        } else if n <= u32::MAX as usize && self.len() <= u32::MAX as usize {
            view(affine_index::<u32>(out, offset, mults).id())
        } else {
            view(affine_index::<u64>(out, offset, mults).id())
        };
        Tensor {
            array,
            shape: out.to_vec(),
            transposed: self.transposed || reads_across(out, mults),
        }
    }

    pub(crate) fn check_axis(&self, op: &str, axis: usize) -> Result<()> {
        if axis >= self.ndim() {
            return Err(Error::Invalid(format!(
                "{op}: axis {axis} is out of range for a tensor of rank {} (shape {:?}); axes are 0..{}",
                self.ndim(),
                self.shape,
                self.ndim()
            )));
        }
        Ok(())
    }

    /// The same elements with another shape (free: tensors are always row-major). Panics if the
    /// element counts differ; see [`Tensor::try_reshape`].
    #[track_caller]
    pub fn reshape(&self, shape: &[usize]) -> Tensor<T> {
        ok(self.try_reshape(shape))
    }
    /// As [`Tensor::reshape`], returning an error naming both shapes.
    ///
    /// ```
    /// use kiln::prelude::*;
    /// let e = Tensor::<f32>::zeros(&[3, 4]).try_reshape(&[5, 3]).unwrap_err();
    /// assert!(e.to_string().contains("[3, 4]") && e.to_string().contains("[5, 3]"));
    /// ```
    pub fn try_reshape(&self, shape: &[usize]) -> Result<Tensor<T>> {
        let n = numel(shape)?;
        if n != self.len() {
            return Err(Error::Invalid(format!(
                "cannot reshape a tensor of shape {:?} ({} elements) to {shape:?} ({n} elements); the element counts must agree",
                self.shape,
                self.len()
            )));
        }
        Ok(Tensor {
            array: self.array.clone(),
            shape: shape.to_vec(),
            transposed: self.transposed,
        })
    }

    /// Reorder the axes: output axis `i` is input axis `axes[i]`. Panics unless `axes` is a
    /// permutation of `0..rank`; see [`Tensor::try_permute`].
    #[track_caller]
    pub fn permute(&self, axes: &[usize]) -> Tensor<T> {
        ok(self.try_permute(axes))
    }
    /// As [`Tensor::permute`], returning an error naming the axes and the rank.
    pub fn try_permute(&self, axes: &[usize]) -> Result<Tensor<T>> {
        let r = self.ndim();
        let mut seen = vec![false; r];
        let ok_perm = axes.len() == r
            && axes
                .iter()
                .all(|&a| a < r && !std::mem::replace(&mut seen[a], true));
        if !ok_perm {
            return Err(Error::Invalid(format!(
                "permute({axes:?}) on a tensor of rank {r} (shape {:?}): give each axis 0..{r} exactly once",
                self.shape
            )));
        }
        if axes.iter().enumerate().all(|(i, &a)| i == a) {
            return Ok(self.clone());
        }
        let st = strides(&self.shape);
        let out: Vec<usize> = axes.iter().map(|&a| self.shape[a]).collect();
        let mults: Vec<i64> = axes.iter().map(|&a| st[a] as i64).collect();
        let view = self.affine_view(&out, 0, &mults);
        Ok(crate::ad::tensor::record_permute(self, axes, view))
    }
    /// Reverse the axes (the matrix transpose for rank 2).
    ///
    /// ```
    /// use kiln::prelude::*;
    /// let t = Tensor::<i32>::arange(6).reshape(&[2, 3]).transpose();
    /// assert_eq!(t.shape(), &[3, 2]);
    /// assert_eq!(t.to_vec(), vec![0, 3, 1, 4, 2, 5]);
    /// ```
    pub fn transpose(&self) -> Tensor<T> {
        let axes: Vec<usize> = (0..self.ndim()).rev().collect();
        self.permute(&axes)
    }

    /// Slice every axis (NumPy/ndarray semantics: negative positions count from the end, negative
    /// steps walk backwards; an index drops its axis). A position past the axis is an error, as
    /// in ndarray (NumPy would clamp it), and so is a `usize` too large for `isize`: it is never
    /// wrapped to a negative position. Use the [`s!`](crate::s) macro:
    ///
    /// ```
    /// use kiln::prelude::*;
    /// let t = Tensor::<i32>::arange(12).reshape(&[3, 4]);
    /// assert_eq!(t.slice(kiln::s![1..3, ..;2]).to_vec(), vec![4, 6, 8, 10]);
    /// assert_eq!(t.slice(kiln::s![-1, ..;-1]).to_vec(), vec![11, 10, 9, 8]);
    /// ```
    #[track_caller]
    pub fn slice(&self, args: &[SliceArg]) -> Tensor<T> {
        ok(self.try_slice(args))
    }
    /// As [`Tensor::slice`], returning an error naming the axis and the rank.
    pub fn try_slice(&self, args: &[SliceArg]) -> Result<Tensor<T>> {
        if args.len() > self.ndim() {
            return Err(Error::Invalid(format!(
                "slice with {} arguments on a tensor of rank {} (shape {:?}); give at most one per axis",
                args.len(),
                self.ndim(),
                self.shape
            )));
        }
        let st = strides(&self.shape);
        let (mut out, mut mults, mut offset) = (Vec::new(), Vec::new(), 0i64);
        let mut sel = Vec::with_capacity(self.ndim());
        for (axis, (&dim, &stride)) in self.shape.iter().zip(&st).enumerate() {
            // positions are isize, and one that did not fit (a usize beyond isize::MAX) arrives
            // as isize::MAX: below that, it is out of range on every axis it may be given for
            let d = match i64::try_from(dim) {
                Ok(d) if d < isize::MAX as i64 => d,
                _ => {
                    return Err(Error::Invalid(format!(
                        "slice: axis {axis} has length {dim}, too long to slice (positions are isize, at most {}); reshape it into shorter axes first",
                        isize::MAX - 1
                    )))
                }
            };
            let arg = args.get(axis).copied().unwrap_or(SliceArg::ALL);
            let resolve = |p: i64| if p < 0 { p + d } else { p };
            match arg {
                SliceArg::Index(i) => {
                    let p = resolve(i as i64);
                    if p < 0 || p >= d {
                        return Err(Error::Invalid(format!(
                            "slice: index {} is out of range for axis {axis} of length {d} (tensor of rank {}, shape {:?})",
                            position(i as i64),
                            self.ndim(),
                            self.shape
                        )));
                    }
                    offset += p * stride as i64;
                    sel.push(AxisSel::At(p));
                }
                SliceArg::Range { start, stop, step } => {
                    if step == 0 {
                        return Err(Error::Invalid(format!(
                            "slice: step 0 on axis {axis}; use a positive or negative step"
                        )));
                    }
                    let check = |p: i64, what: &str| -> Result<i64> {
                        let r = resolve(p);
                        if r < 0 || r > d {
                            Err(Error::Invalid(format!(
                                "slice: {what} {} is out of range for axis {axis} of length {d} (tensor of rank {}, shape {:?})",
                                position(p),
                                self.ndim(),
                                self.shape
                            )))
                        } else {
                            Ok(r)
                        }
                    };
                    let step = step as i64;
                    let (lo, hi) = (
                        start.map(|p| check(p as i64, "start")).transpose()?,
                        stop.map(|p| check(p as i64, "stop")).transpose()?,
                    );
                    let stride_abs = step.unsigned_abs() as i64;
                    let (first, count) = if step > 0 {
                        let (a, b) = (lo.unwrap_or(0), hi.unwrap_or(d));
                        (
                            a,
                            if b > a {
                                (b - a - 1) / stride_abs + 1
                            } else {
                                0
                            },
                        )
                    } else {
                        // walking down from start (default: the last element) to stop (exclusive)
                        let a = lo.map(|a| a.min(d - 1)).unwrap_or(d - 1);
                        let b = hi.unwrap_or(-1);
                        (
                            a,
                            if a > b {
                                (a - b - 1) / stride_abs + 1
                            } else {
                                0
                            },
                        )
                    };
                    out.push(count as usize);
                    // one element (or none): the step is never taken, and may be huge
                    mults.push(if count <= 1 { 0 } else { step * stride as i64 });
                    if count > 0 {
                        offset += first * stride as i64;
                    }
                    sel.push(AxisSel::Range { first, step, count });
                }
            }
        }
        let view = self.affine_view(&out, offset, &mults);
        Ok(crate::ad::tensor::record_slice(
            self, &sel, offset, &mults, view,
        ))
    }

    /// The sub-tensor at index `i` of `axis` (that axis dropped).
    #[track_caller]
    pub fn index_axis(&self, axis: usize, i: usize) -> Tensor<T> {
        ok(self.check_axis("index_axis", axis));
        let mut args = vec![SliceArg::ALL; self.ndim()];
        args[axis] = SliceArg::from(i);
        self.slice(&args)
    }

    /// Reverse the order along `axis`.
    #[track_caller]
    pub fn flip(&self, axis: usize) -> Tensor<T> {
        ok(self.check_axis("flip", axis));
        let mut args = vec![SliceArg::ALL; self.ndim()];
        args[axis] = SliceArg::Range {
            start: None,
            stop: None,
            step: -1,
        };
        self.slice(&args)
    }

    /// Repeat along new leading axes and axes of length 1 to reach `shape` (NumPy rules).
    #[track_caller]
    pub fn broadcast_to(&self, shape: &[usize]) -> Tensor<T> {
        ok(self.try_broadcast_to(shape))
    }
    /// As [`Tensor::broadcast_to`], returning an error naming both shapes and the rule.
    pub fn try_broadcast_to(&self, shape: &[usize]) -> Result<Tensor<T>> {
        if shape == self.shape.as_slice() {
            return Ok(self.clone());
        }
        numel(shape)?;
        let (r, ro) = (self.ndim(), shape.len());
        let bad = || {
            Error::Invalid(format!(
                "cannot broadcast shape {:?} to {shape:?}: aligned from the last axis, each dimension must equal the target's or be 1",
                self.shape
            ))
        };
        if r > ro {
            return Err(bad());
        }
        let st = strides(&self.shape);
        let mut mults = vec![0i64; ro];
        for k in 0..r {
            let (d, t) = (self.shape[r - 1 - k], shape[ro - 1 - k]);
            if d == t {
                mults[ro - 1 - k] = st[r - 1 - k] as i64;
            } else if d != 1 {
                return Err(bad());
            }
        }
        let view = self.affine_view(shape, 0, &mults);
        Ok(crate::ad::tensor::record_broadcast(self, view))
    }

    /// Drop every axis of length 1.
    pub fn squeeze(&self) -> Tensor<T> {
        let shape: Vec<usize> = self.shape.iter().copied().filter(|&d| d != 1).collect();
        self.reshape(&shape)
    }
    /// Insert an axis of length 1 at `axis` (0..=rank).
    #[track_caller]
    pub fn unsqueeze(&self, axis: usize) -> Tensor<T> {
        if axis > self.ndim() {
            ok::<()>(Err(Error::Invalid(format!(
                "unsqueeze: axis {axis} is out of range for a tensor of rank {} (0..={} allowed)",
                self.ndim(),
                self.ndim()
            ))));
        }
        let mut shape = self.shape.clone();
        shape.insert(axis, 1);
        self.reshape(&shape)
    }

    /// Join tensors along an existing axis (the other dimensions must agree).
    ///
    /// ```
    /// use kiln::prelude::*;
    /// let a = Tensor::<i32>::arange(4).reshape(&[2, 2]);
    /// let b = Tensor::<i32>::full(9, &[2, 1]);
    /// assert_eq!(Tensor::concat(&[a, b], 1).to_vec(), vec![0, 1, 9, 2, 3, 9]);
    /// ```
    #[track_caller]
    pub fn concat(parts: &[Tensor<T>], axis: usize) -> Tensor<T> {
        ok(Self::try_concat(parts, axis))
    }
    /// As [`Tensor::concat`], returning an error naming the shapes.
    pub fn try_concat(parts: &[Tensor<T>], axis: usize) -> Result<Tensor<T>> {
        let first = parts
            .first()
            .ok_or_else(|| Error::Invalid("concat of no tensors; give at least one".into()))?;
        first.check_axis("concat", axis)?;
        let mut out = first.shape.clone();
        out[axis] = 0;
        for p in parts {
            let same_rank = p.ndim() == first.ndim();
            let agree =
                same_rank && (0..p.ndim()).all(|d| d == axis || p.shape[d] == first.shape[d]);
            if !agree {
                return Err(Error::Invalid(format!(
                    "concat along axis {axis}: shape {:?} does not match {:?} outside that axis",
                    p.shape, first.shape
                )));
            }
            out[axis] = out[axis].checked_add(p.shape[axis]).ok_or_else(|| {
                let shapes: Vec<&[usize]> = parts.iter().map(|p| p.shape()).collect();
                Error::Invalid(format!(
                    "concat along axis {axis} of shapes {shapes:?}: the joined axis has more elements than fit in memory; concatenate fewer or shorter parts"
                ))
            })?;
        }
        let n = numel(&out)?;
        if n == 0 {
            return Ok(Tensor {
                array: Array::full(T::from_bits64(0), 0),
                shape: out,
                transposed: false,
            });
        }
        let coord = coordinate::<u64>(&out, axis);
        let mut acc = Array::full(T::from_bits64(0), n);
        let mut acc_transposed = false;
        let mut lo = 0usize;
        for p in parts {
            let len = p.shape[axis];
            if len > 0 {
                // the part read at (coordinate − lo) along the axis; lanes outside it are masked
                let st = strides(&p.shape);
                let mults: Vec<i64> = st.iter().map(|&s| s as i64).collect();
                let inside = coord.ge(lo as u64) & coord.lt((lo + len) as u64);
                let view = p.affine_view_where(&out, -((lo * st[axis]) as i64), &mults, &inside);
                acc = crate::select(&inside, view.array(), &acc);
                acc_transposed |= view.transposed;
            }
            lo += len;
        }
        let joined = Tensor {
            array: acc,
            shape: out,
            transposed: acc_transposed,
        };
        Ok(crate::ad::tensor::record_concat(parts, axis, joined))
    }
    /// Join tensors of one shape along a new axis.
    #[track_caller]
    pub fn stack(parts: &[Tensor<T>], axis: usize) -> Tensor<T> {
        let parts: Vec<Tensor<T>> = parts.iter().map(|p| p.unsqueeze(axis)).collect();
        Self::concat(&parts, axis)
    }
}

/// One axis of a [`Tensor::slice`]: an index (drops the axis) or a range with a step.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SliceArg {
    Index(isize),
    Range {
        start: Option<isize>,
        stop: Option<isize>,
        step: isize,
    },
}

impl SliceArg {
    /// The whole axis.
    pub const ALL: SliceArg = SliceArg::Range {
        start: None,
        stop: None,
        step: 1,
    };
    /// The same range with another step.
    pub fn step(self, step: isize) -> SliceArg {
        match self {
            SliceArg::Range { start, stop, .. } => SliceArg::Range { start, stop, step },
            index => index,
        }
    }
}

/// A position as `isize`, never wrapped: one too large for `isize` (a `usize` beyond
/// `isize::MAX`) becomes `isize::MAX`, which `try_slice` reports as out of range on every axis.
fn pos<T: TryInto<isize>>(p: T) -> isize {
    p.try_into().unwrap_or(isize::MAX)
}

/// A position for an error message: `isize::MAX` stands for every larger one.
fn position(p: i64) -> String {
    if p == isize::MAX as i64 {
        format!("{p} or more")
    } else {
        p.to_string()
    }
}

macro_rules! slice_from {
    ($($t:ty),*) => {$(
        impl From<$t> for SliceArg {
            fn from(i: $t) -> SliceArg {
                SliceArg::Index(pos(i))
            }
        }
        impl From<Range<$t>> for SliceArg {
            fn from(r: Range<$t>) -> SliceArg {
                SliceArg::Range { start: Some(pos(r.start)), stop: Some(pos(r.end)), step: 1 }
            }
        }
        impl From<RangeInclusive<$t>> for SliceArg {
            fn from(r: RangeInclusive<$t>) -> SliceArg {
                SliceArg::Range { start: Some(pos(*r.start())), stop: inclusive_stop(pos(*r.end())), step: 1 }
            }
        }
        impl From<RangeFrom<$t>> for SliceArg {
            fn from(r: RangeFrom<$t>) -> SliceArg {
                SliceArg::Range { start: Some(pos(r.start)), stop: None, step: 1 }
            }
        }
        impl From<RangeTo<$t>> for SliceArg {
            fn from(r: RangeTo<$t>) -> SliceArg {
                SliceArg::Range { start: None, stop: Some(pos(r.end)), step: 1 }
            }
        }
        impl From<RangeToInclusive<$t>> for SliceArg {
            fn from(r: RangeToInclusive<$t>) -> SliceArg {
                SliceArg::Range { start: None, stop: inclusive_stop(pos(r.end)), step: 1 }
            }
        }
    )*};
}
slice_from!(i32, isize, usize);

/// The exclusive stop of an inclusive end: `..=-1` runs to the end of the axis; an end of
/// `isize::MAX` (or a larger `usize`) stays `isize::MAX`, out of range like the end itself.
fn inclusive_stop(end: isize) -> Option<isize> {
    if end == -1 {
        None
    } else {
        Some(end.saturating_add(1))
    }
}

impl From<RangeFull> for SliceArg {
    fn from(_: RangeFull) -> SliceArg {
        SliceArg::ALL
    }
}

/// Slice arguments for [`Tensor::slice`], like ndarray's: `s![1..3, ..;2, -1]` (ranges with an
/// optional `;step`, or an index that drops its axis). Negative positions count from the end, so a
/// range such as `1..-1` is not empty; clippy's `reversed_empty_ranges` lint does not know that and
/// needs an `#[allow]` where such ranges are written.
///
/// ```
/// use kiln::prelude::*;
/// let t = Tensor::<f32>::zeros(&[4, 6]);
/// assert_eq!(t.slice(kiln::s![..2, 1..;2]).shape(), &[2, 3]);
/// ```
#[macro_export]
macro_rules! s {
    ($($r:expr $(; $step:expr)?),* $(,)?) => {
        &[$( $crate::tensor::SliceArg::from($r)$(.step($step))? ),*][..]
    };
}
