//! Reductions of tensors: of all elements (same names as `Array`'s, plus `mean`) and along one
//! axis (`sum_axis`, `prod_axis`, `min_axis`, `max_axis`, `mean_axis`, `argmax_axis`, each with a
//! `_keepdim` form).
//!
//! An axis reduction reduces each slice along the axis with a block reduction: the axis is moved
//! last (a view; contiguous inner axes need no move), so each output element is one contiguous
//! block. An empty axis gives the reduction's identity (+0 for float sums, NaN for means); `argmax`
//! along an empty axis is an error.

use super::{numel, Tensor};
use crate::array::{ok, Array};
use crate::types::{Float, Numeric};
use kiln_core::{self as core, op::reduce_identity, ReduceOp, Result};

impl<T: Numeric> Tensor<T> {
    /// Sum of all elements (a size-1 array).
    pub fn sum(&self) -> Array<T> {
        self.array.sum()
    }
    /// Product of all elements.
    pub fn prod(&self) -> Array<T> {
        self.array.prod()
    }
    /// Smallest element.
    pub fn reduce_min(&self) -> Array<T> {
        self.array.reduce_min()
    }
    /// Largest element.
    pub fn reduce_max(&self) -> Array<T> {
        self.array.reduce_max()
    }

    fn reduce_axis(&self, op: ReduceOp, axis: usize, keepdim: bool) -> Result<Tensor<T>> {
        if crate::ad::rules::tracks(&self.array) {
            // computed on the detached values: the axis move must not record a view node too
            let out = self.detached().reduce_axis(op, axis, keepdim)?;
            return Ok(crate::ad::tensor::record_reduce_axis(
                self, op, axis, keepdim, out,
            ));
        }
        if axis >= self.ndim() {
            return Err(core::Error::Invalid(format!(
                "reduction along axis {axis} of a tensor of rank {} (shape {:?}); axes are 0..{}",
                self.ndim(),
                self.shape,
                self.ndim()
            )));
        }
        let mut out = self.shape.clone();
        let len = out.remove(axis);
        let mut kept = self.shape.clone();
        kept[axis] = 1;
        let shape = if keepdim { kept } else { out.clone() };
        let n = numel(&out)?;
        if len == 0 || n == 0 {
            let id = T::from_bits64(reduce_identity(op, T::TYPE));
            return Ok(Tensor {
                array: Array::full(id, n),
                shape,
                transposed: false,
            });
        }
        // the axis last, so that every output element is one contiguous block
        let mut axes: Vec<usize> = (0..self.ndim()).filter(|&a| a != axis).collect();
        axes.push(axis);
        let moved = self.try_permute(&axes)?;
        let array = Array::from_id(core::block_reduce(op, moved.array.id(), len)?);
        Ok(Tensor {
            array,
            shape,
            transposed: false,
        })
    }

    /// Sum along `axis` (dropped).
    ///
    /// ```
    /// use kiln::prelude::*;
    /// let t = Tensor::<i32>::arange(6).reshape(&[2, 3]);
    /// assert_eq!(t.sum_axis(0).to_vec(), vec![3, 5, 7]);
    /// assert_eq!(t.sum_axis_keepdim(1).shape(), &[2, 1]);
    /// ```
    #[track_caller]
    pub fn sum_axis(&self, axis: usize) -> Tensor<T> {
        ok(self.reduce_axis(ReduceOp::Add, axis, false))
    }
    /// Sum along `axis`, kept with length 1.
    #[track_caller]
    pub fn sum_axis_keepdim(&self, axis: usize) -> Tensor<T> {
        ok(self.reduce_axis(ReduceOp::Add, axis, true))
    }
    /// Product along `axis` (dropped).
    #[track_caller]
    pub fn prod_axis(&self, axis: usize) -> Tensor<T> {
        ok(self.reduce_axis(ReduceOp::Mul, axis, false))
    }
    /// Product along `axis`, kept with length 1.
    #[track_caller]
    pub fn prod_axis_keepdim(&self, axis: usize) -> Tensor<T> {
        ok(self.reduce_axis(ReduceOp::Mul, axis, true))
    }
    /// Minimum along `axis` (dropped).
    #[track_caller]
    pub fn min_axis(&self, axis: usize) -> Tensor<T> {
        ok(self.reduce_axis(ReduceOp::Min, axis, false))
    }
    /// Minimum along `axis`, kept with length 1.
    #[track_caller]
    pub fn min_axis_keepdim(&self, axis: usize) -> Tensor<T> {
        ok(self.reduce_axis(ReduceOp::Min, axis, true))
    }
    /// Maximum along `axis` (dropped).
    #[track_caller]
    pub fn max_axis(&self, axis: usize) -> Tensor<T> {
        ok(self.reduce_axis(ReduceOp::Max, axis, false))
    }
    /// Maximum along `axis`, kept with length 1.
    #[track_caller]
    pub fn max_axis_keepdim(&self, axis: usize) -> Tensor<T> {
        ok(self.reduce_axis(ReduceOp::Max, axis, true))
    }
    /// Index of the first largest element along `axis` (dropped). Panics if the axis is empty
    /// (there is no index to give; NumPy raises too); see [`Tensor::try_argmax_axis`].
    ///
    /// ```
    /// use kiln::prelude::*;
    /// let t = Tensor::<f32>::from_vec(vec![1.0, 5.0, 5.0, 7.0, 2.0, 0.0], &[2, 3]);
    /// assert_eq!(t.argmax_axis(1).to_vec(), vec![1, 0]);
    /// ```
    #[track_caller]
    pub fn argmax_axis(&self, axis: usize) -> Tensor<u64> {
        ok(self.argmax(axis, false))
    }
    /// As [`Tensor::argmax_axis`], keeping the axis with length 1.
    #[track_caller]
    pub fn argmax_axis_keepdim(&self, axis: usize) -> Tensor<u64> {
        ok(self.argmax(axis, true))
    }
    /// As [`Tensor::argmax_axis`], returning an error for an axis out of range or empty.
    ///
    /// ```
    /// use kiln::prelude::*;
    /// let e = Tensor::<f32>::zeros(&[2, 0]).try_argmax_axis(1).unwrap_err();
    /// assert!(e.to_string().contains("empty"));
    /// ```
    pub fn try_argmax_axis(&self, axis: usize) -> Result<Tensor<u64>> {
        self.argmax(axis, false)
    }
    /// As [`Tensor::argmax_axis_keepdim`], returning an error for an axis out of range or empty.
    pub fn try_argmax_axis_keepdim(&self, axis: usize) -> Result<Tensor<u64>> {
        self.argmax(axis, true)
    }
    fn argmax(&self, axis: usize, keepdim: bool) -> Result<Tensor<u64>> {
        if self.array.ad != 0 {
            // an index has no gradient: nothing here records a node
            return self.detached().argmax(axis, keepdim);
        }
        let best = self.reduce_axis(ReduceOp::Max, axis, true)?;
        if self.shape[axis] == 0 {
            return Err(core::Error::Invalid(format!(
                "argmax along axis {axis} of a tensor of shape {:?}: the axis is empty, so it has no largest element to index; reduce along a non-empty axis or check its length first",
                self.shape
            )));
        }
        // NaN is the maximum of a slice holding one (as in NumPy): its first NaN wins
        let is_best = self.eq(&best) | (self.ne(self) & best.ne(&best));
        let coord = Tensor {
            array: super::view::coordinate::<u64>(&self.shape, axis),
            shape: self.shape.clone(),
            transposed: false,
        };
        let candidate = Tensor::select(&is_best, &coord, &Tensor::scalar(u64::MAX));
        candidate.reduce_axis(ReduceOp::Min, axis, keepdim)
    }
}

impl<T: Float> Tensor<T> {
    /// Mean of all elements (NaN for an empty tensor).
    pub fn mean(&self) -> Array<T> {
        self.array.sum() / T::from_f64(self.len() as f64)
    }
    /// Mean along `axis` (dropped); NaN along an empty axis.
    ///
    /// ```
    /// use kiln::prelude::*;
    /// let t = Tensor::<f32>::arange(6).reshape(&[2, 3]);
    /// assert_eq!(t.mean_axis(0).to_vec(), vec![1.5, 2.5, 3.5]);
    /// ```
    #[track_caller]
    pub fn mean_axis(&self, axis: usize) -> Tensor<T> {
        ok(self.mean_impl(axis, false))
    }
    /// Mean along `axis`, kept with length 1.
    #[track_caller]
    pub fn mean_axis_keepdim(&self, axis: usize) -> Tensor<T> {
        ok(self.mean_impl(axis, true))
    }
    fn mean_impl(&self, axis: usize, keepdim: bool) -> Result<Tensor<T>> {
        let s = self.reduce_axis(ReduceOp::Add, axis, keepdim)?;
        let len = self.shape[axis] as f64;
        Ok(s.map(|a| a / T::from_f64(len)))
    }
}
