//! `Tensor<T>`: an n-dimensional array on the lazy engine — a flat `Array<T>` plus a row-major shape.
//!
//! Shape operations (`reshape`, `transpose`, `permute`, `slice`, `flip`, `broadcast_to`, …) are
//! lazy: each is a view (`gather_view`) whose index is computed from the lane number, so a chain of
//! views and elementwise ops runs as one kernel and nothing is copied until a value is needed.
//! Elementwise operators follow NumPy broadcasting. This module owns the type, its construction and
//! element access; `view` the shape operations, `ops` the operators, `reduce` the reductions and
//! `fmt` the printing.

mod fmt;
mod inplace;
mod ops;
mod reduce;
mod view;

pub(crate) use fmt::write_flat;
pub use ops::{broadcast_shapes, TensorOperand};
pub use view::SliceArg;
pub(crate) use view::{slice_adjoint, AxisSel};

use crate::array::{ok, Array};
use crate::types::Numeric;
use kiln_core::{Error, Result, Scalar};

/// The most dimensions a tensor may have.
pub const MAX_RANK: usize = 8;

/// An n-dimensional array (rank 0 to 8) of `T`, traced lazily like [`Array`].
///
/// ```
/// use kiln::prelude::*;
/// let img = Tensor::<f32>::from_vec((0..12).map(|v| v as f32).collect(), &[3, 4]);
/// let rows = img.sum_axis(1);                                   // shape [3], lazy
/// assert_eq!(rows.to_vec(), vec![6.0, 22.0, 38.0]);
/// let centred = &img - &img.mean_axis(0).reshape(&[1, 4]);      // broadcasting
/// let t = centred.transpose();                                  // [4, 3], a lazy view
/// assert_eq!(t.shape(), &[4, 3]);
/// assert_eq!(t.to_vec()[..3], [-4.0, 0.0, 4.0]);
/// ```
pub struct Tensor<T: Scalar> {
    array: Array<T>,
    shape: Vec<usize>,
    /// Unevaluated and reads a source whose last axis is not this tensor's last axis (a transpose
    /// or permutation somewhere in its expression): evaluated in 2-d tiles.
    transposed: bool,
}

impl<T: Scalar> Clone for Tensor<T> {
    fn clone(&self) -> Self {
        Tensor {
            array: self.array.clone(),
            shape: self.shape.clone(),
            transposed: self.transposed,
        }
    }
}

/// Elements of a shape, or an error naming it when it is too large or of rank over 8.
pub(crate) fn numel(shape: &[usize]) -> Result<usize> {
    if shape.len() > MAX_RANK {
        return Err(Error::Invalid(format!(
            "a tensor has at most {MAX_RANK} dimensions, shape {shape:?} has {}",
            shape.len()
        )));
    }
    shape
        .iter()
        .try_fold(1usize, |a, &d| a.checked_mul(d))
        .ok_or_else(|| {
            Error::Invalid(format!(
                "shape {shape:?} has more elements than fit in memory"
            ))
        })
}

impl<T: Scalar> Tensor<T> {
    /// A tensor of shape `shape` over the flat row-major `array` (their sizes must agree).
    ///
    /// ```
    /// use kiln::prelude::*;
    /// let t = Tensor::from_array(Float32::arange(6), &[2, 3]);
    /// assert_eq!(t.shape(), &[2, 3]);
    /// ```
    #[track_caller]
    pub fn from_array(array: Array<T>, shape: &[usize]) -> Self {
        ok(Self::try_from_array(array, shape))
    }
    /// As [`Tensor::from_array`], returning an error when the sizes disagree.
    pub fn try_from_array(array: Array<T>, shape: &[usize]) -> Result<Self> {
        let n = numel(shape)?;
        // compared as a plain number: inside a frozen function the recording then holds for this
        // size only (a replay with another size records anew, where the check runs again)
        let len = array.size().get();
        if len != n {
            return Err(Error::Invalid(format!(
                "{} has {len} elements but shape {shape:?} needs {n}; give a shape whose product is {len}",
                kiln_core::describe(array.id())
            )));
        }
        Ok(Tensor {
            array,
            shape: shape.to_vec(),
            transposed: false,
        })
    }
    /// A tensor holding `data` (row-major) with shape `shape`. Panics if the element count and the
    /// shape disagree; see [`Tensor::try_from_vec`].
    #[track_caller]
    pub fn from_vec(data: Vec<T>, shape: &[usize]) -> Self {
        ok(Self::try_from_vec(data, shape))
    }
    /// As [`Tensor::from_vec`], returning an error naming both when they disagree.
    ///
    /// ```
    /// use kiln::prelude::*;
    /// let e = Tensor::<f32>::try_from_vec(vec![0.0; 11], &[3, 4]).unwrap_err();
    /// assert!(e.to_string().contains("11 elements") && e.to_string().contains("[3, 4]"));
    /// ```
    pub fn try_from_vec(data: Vec<T>, shape: &[usize]) -> Result<Self> {
        Self::try_from_slice(&data, shape)
    }
    /// A tensor holding a copy of `data` (row-major) with shape `shape`.
    #[track_caller]
    pub fn from_slice(data: &[T], shape: &[usize]) -> Self {
        ok(Self::try_from_slice(data, shape))
    }
    /// As [`Tensor::from_slice`], returning an error naming both when they disagree.
    pub fn try_from_slice(data: &[T], shape: &[usize]) -> Result<Self> {
        let n = numel(shape)?;
        if data.len() != n {
            return Err(Error::Invalid(format!(
                "{} elements given for shape {shape:?}, which holds {n}; give {n} elements or another shape",
                data.len()
            )));
        }
        Ok(Tensor {
            array: Array::try_from_slice(data)?,
            shape: shape.to_vec(),
            transposed: false,
        })
    }
    /// `value` everywhere (a literal: no memory until evaluated).
    #[track_caller]
    pub fn full(value: T, shape: &[usize]) -> Self {
        let n = ok(numel(shape));
        Tensor {
            array: Array::full(value, n),
            shape: shape.to_vec(),
            transposed: false,
        }
    }
    /// A rank-0 tensor (one element).
    pub fn scalar(value: T) -> Self {
        Self::full(value, &[])
    }

    /// The same tensor with its flat array replaced by `f(array)` (same size; for the AD hooks).
    pub(crate) fn map_array(self, f: impl FnOnce(Array<T>) -> Array<T>) -> Tensor<T> {
        Tensor {
            array: f(self.array),
            shape: self.shape,
            transposed: self.transposed,
        }
    }
    /// The same values, detached from the AD graph (primals of tensor-level rules are computed
    /// on these, so that no generic rule records a second path for the gradient).
    pub(crate) fn detached(&self) -> Tensor<T> {
        Tensor {
            array: self.array.detach(),
            shape: self.shape.clone(),
            transposed: self.transposed,
        }
    }

    /// Name the tensor (its flat array: shown by `whos()`, `Debug`, logs and error messages);
    /// returns it for chaining, as [`Array::label`].
    ///
    /// ```
    /// use kiln::prelude::*;
    /// let t = Tensor::<f32>::zeros(&[2, 2]).label("weights");
    /// assert_eq!(t.get_label().as_deref(), Some("weights"));
    /// ```
    pub fn label(self, name: &str) -> Self {
        kiln_core::set_label(self.array.id(), name);
        self
    }
    /// The label, if any.
    pub fn get_label(&self) -> Option<String> {
        self.array.get_label()
    }
    /// Whether the contents are evaluated (in memory).
    pub fn is_evaluated(&self) -> bool {
        self.array.is_evaluated()
    }

    /// The flat row-major array.
    pub fn array(&self) -> &Array<T> {
        &self.array
    }
    /// Give up the shape, keeping the flat array.
    pub fn into_array(self) -> Array<T> {
        self.array
    }
    /// The shape.
    pub fn shape(&self) -> &[usize] {
        &self.shape
    }
    /// Number of dimensions.
    pub fn ndim(&self) -> usize {
        self.shape.len()
    }
    /// Number of elements.
    pub fn len(&self) -> usize {
        self.shape.iter().product()
    }
    /// Whether there are no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Evaluate now.
    #[track_caller]
    pub fn eval(&self) -> &Self {
        ok(self.try_eval());
        self
    }
    /// Evaluate now, returning errors instead of panicking. An expression that reads a transposed
    /// source runs in 2-d tiles (rows of the last axis), so that it reads the source a tile at a
    /// time rather than one cache line per element.
    pub fn try_eval(&self) -> Result<&Self> {
        if self.transposed && self.ndim() >= 2 && !self.array.is_evaluated() {
            let cols = self.shape[self.ndim() - 1];
            kiln_core::schedule::eval_tiled(self.array.id(), cols)?;
        } else {
            self.array.try_eval()?;
        }
        Ok(self)
    }
    /// The elements in row-major order (evaluates first).
    #[track_caller]
    pub fn to_vec(&self) -> Vec<T> {
        ok(self.try_to_vec())
    }
    /// As [`Tensor::to_vec`], returning errors instead of panicking.
    pub fn try_to_vec(&self) -> Result<Vec<T>> {
        self.try_eval()?;
        self.array.try_to_vec()
    }
    /// Convert each element (Rust `as` semantics).
    pub fn cast<U: Scalar>(&self) -> Tensor<U> {
        Tensor {
            array: self.array.cast(),
            shape: self.shape.clone(),
            transposed: self.transposed,
        }
    }
    /// Element `[i, j, …]` as a size-1 array (lazy): for absolutely indexed weights.
    ///
    /// ```
    /// use kiln::prelude::*;
    /// let t = Tensor::<i32>::arange(6).reshape(&[2, 3]);
    /// assert_eq!(t.get(&[1, 2]).item(), 5);
    /// ```
    #[track_caller]
    pub fn get(&self, index: &[usize]) -> Array<T> {
        ok(self.try_get(index))
    }
    /// As [`Tensor::get`], returning an error for a wrong number of indices or one out of range.
    pub fn try_get(&self, index: &[usize]) -> Result<Array<T>> {
        if index.len() != self.ndim() {
            return Err(Error::Invalid(format!(
                "get({index:?}) on a tensor of shape {:?}: give one index per dimension ({})",
                self.shape,
                self.ndim()
            )));
        }
        let mut flat = 0usize;
        for (axis, (&i, &d)) in index.iter().zip(&self.shape).enumerate() {
            if i >= d {
                return Err(Error::Invalid(format!(
                    "get({index:?}): index {i} is out of range for axis {axis} of length {d} (shape {:?})",
                    self.shape
                )));
            }
            flat = flat * d + i;
        }
        Ok(crate::memory::gather_view(
            &self.array,
            &crate::UInt64::scalar(flat as u64),
        ))
    }
    /// Apply an elementwise function of arrays (any math function), keeping the shape.
    ///
    /// ```
    /// use kiln::prelude::*;
    /// let t = Tensor::<f32>::full(4.0, &[2, 2]).map(|a| a.sqrt());
    /// assert_eq!(t.to_vec(), vec![2.0; 4]);
    /// ```
    #[track_caller]
    pub fn map<U: Scalar>(&self, f: impl FnOnce(&Array<T>) -> Array<U>) -> Tensor<U> {
        let array = f(&self.array);
        if array.size().get() != self.len() {
            ok::<()>(Err(Error::Invalid(format!(
                "Tensor::map: the function returned {} elements for a tensor of shape {:?} ({}); it must work elementwise",
                array.size(),
                self.shape,
                self.len()
            ))));
        }
        Tensor {
            array,
            shape: self.shape.clone(),
            transposed: self.transposed,
        }
    }
}

impl<T: Numeric> Tensor<T> {
    /// Zeros of the given shape.
    pub fn zeros(shape: &[usize]) -> Self {
        Self::full(T::zero(), shape)
    }
    /// Ones of the given shape.
    pub fn ones(shape: &[usize]) -> Self {
        Self::full(T::one(), shape)
    }
    /// `0, 1, …, n − 1` as a rank-1 tensor.
    pub fn arange(n: usize) -> Self {
        Tensor {
            array: Array::arange(n),
            shape: vec![n],
            transposed: false,
        }
    }
    /// The `n × n` identity.
    ///
    /// ```
    /// use kiln::prelude::*;
    /// assert_eq!(Tensor::<f64>::eye(2).to_vec(), vec![1.0, 0.0, 0.0, 1.0]);
    /// ```
    ///
    /// Panics, naming the shape, when `n × n` does not fit in `usize`.
    #[track_caller]
    pub fn eye(n: usize) -> Self {
        let i = crate::UInt64::arange(ok(numel(&[n, n])));
        let diag = (&i % (n as u64 + 1)).eq(0u64);
        Tensor {
            array: crate::select(&diag, T::one(), T::zero()),
            shape: vec![n, n],
            transposed: false,
        }
    }
}

impl<T: Scalar> crate::freeze::Traverse for Tensor<T> {
    fn traverse(&self, t: &mut crate::freeze::Traversal) {
        // the shape is part of the layout key
        t.structure("Tensor", self.shape.len());
        for &d in &self.shape {
            t.scalar("dim", d as u64);
        }
        t.field("array", |t| self.array.traverse(t));
    }
    fn traverse_mut(&mut self, a: &mut crate::freeze::Assign) {
        self.array.traverse_mut(a);
    }
}
