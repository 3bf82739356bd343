//! Conversions between kiln and `ndarray` (cargo feature `ndarray`): `Array` ↔ `Array1`, `Tensor`
//! ↔ arrays of any rank. Owned arrays, views (`ArrayView`, `a.t()`, `a.slice(s![..;2, ..])`) and
//! any strides are accepted; the data is copied once into kiln's buffer (a block copy for standard
//! layout, else one pass in logical order) and never staged in between.

use crate::array::Array;
use kiln_core::{Result, Scalar};
use ndarray::{ArrayBase, Data, Dimension, Ix1};

/// The elements of `a` in logical (row-major) order, copied once into a new kiln variable.
fn upload<T: Scalar, S: Data<Elem = T>, D: Dimension>(
    a: &ArrayBase<S, D>,
) -> Result<kiln_core::VarId> {
    match a.as_slice() {
        // standard layout: one block copy
        Some(s) => kiln_core::from_scalars(s),
        // strided, transposed or reversed: one pass in logical order, written straight into
        // kiln's buffer
        None => kiln_core::from_iter_exact(a.len(), a.iter().copied()),
    }
}

impl<T: Scalar> Array<T> {
    /// An evaluated array holding a copy of an `ndarray` vector: owned or a view, any stride
    /// (copied once, straight into kiln's buffer).
    ///
    /// ```
    /// use ndarray::s;
    /// let a = ndarray::Array1::from(vec![1.0f32, 2.0, 3.0, 4.0]);
    /// assert_eq!(kiln::Float32::from_ndarray(&a).to_vec(), vec![1.0, 2.0, 3.0, 4.0]);
    /// let every_other = a.slice(s![..;2]);
    /// assert_eq!(kiln::Float32::from_ndarray(&every_other).to_vec(), vec![1.0, 3.0]);
    /// ```
    #[track_caller]
    pub fn from_ndarray<S: Data<Elem = T>>(a: &ArrayBase<S, Ix1>) -> Self {
        crate::array::ok(Self::try_from_ndarray(a))
    }
    /// As [`Array::from_ndarray`], returning an error if memory runs out.
    pub fn try_from_ndarray<S: Data<Elem = T>>(a: &ArrayBase<S, Ix1>) -> Result<Self> {
        Ok(Array::wrap(upload(a)?))
    }
    /// Evaluate and copy into an `ndarray` vector.
    ///
    /// ```
    /// let k = kiln::Int32::arange(3) * 2;
    /// assert_eq!(k.to_ndarray(), ndarray::arr1(&[0, 2, 4]));
    /// ```
    pub fn to_ndarray(&self) -> ndarray::Array1<T> {
        ndarray::Array1::from(self.to_vec())
    }
    /// As [`Array::to_ndarray`], returning errors instead of panicking.
    pub fn try_to_ndarray(&self) -> Result<ndarray::Array1<T>> {
        Ok(ndarray::Array1::from(self.try_to_vec()?))
    }
}

impl<T: Scalar> From<&ndarray::Array1<T>> for Array<T> {
    fn from(a: &ndarray::Array1<T>) -> Self {
        Array::from_ndarray(a)
    }
}

impl<T: Scalar> From<&Array<T>> for ndarray::Array1<T> {
    fn from(a: &Array<T>) -> Self {
        a.to_ndarray()
    }
}

impl<T: Scalar> crate::Tensor<T> {
    /// A tensor holding a copy of an `ndarray` array of any rank: owned or a view (`a.view()`,
    /// `a.t()`, `a.slice(s![..;2, 1..])`), any strides. kiln keeps its own aligned buffers, so one
    /// copy is made, straight into kiln's buffer: a block copy for standard (row-major contiguous)
    /// layout, else one pass over the elements in logical order (never a staging copy).
    ///
    /// ```
    /// use ndarray::s;
    /// let a = ndarray::arr2(&[[1, 2, 3], [4, 5, 6]]);
    /// let t = kiln::Tensor::from_ndarray(&a);
    /// assert_eq!(t.shape(), &[2, 3]);
    /// assert_eq!(t.transpose().to_ndarray(), a.t().into_dyn());
    /// let v = kiln::Tensor::from_ndarray(&a.t());                  // a transposed view
    /// assert_eq!(v.to_vec(), vec![1, 4, 2, 5, 3, 6]);
    /// let w = kiln::Tensor::from_ndarray(&a.slice(s![.., ..;-2])); // strided, reversed
    /// assert_eq!((w.shape(), w.to_vec()), (&[2, 2][..], vec![3, 1, 6, 4]));
    /// ```
    #[track_caller]
    pub fn from_ndarray<S: Data<Elem = T>, D: Dimension>(a: &ArrayBase<S, D>) -> Self {
        crate::array::ok(Self::try_from_ndarray(a))
    }
    /// As [`Tensor::from_ndarray`], returning an error if memory runs out or the rank exceeds 8.
    pub fn try_from_ndarray<S: Data<Elem = T>, D: Dimension>(a: &ArrayBase<S, D>) -> Result<Self> {
        let shape = a.shape().to_vec();
        crate::tensor::numel(&shape)?;
        crate::Tensor::try_from_array(Array::wrap(upload(a)?), &shape)
    }
    /// Evaluate and copy into an `ndarray` array of dynamic rank.
    pub fn to_ndarray(&self) -> ndarray::ArrayD<T> {
        crate::array::ok(self.try_to_ndarray())
    }
    /// As [`Tensor::to_ndarray`], returning errors instead of panicking.
    pub fn try_to_ndarray(&self) -> Result<ndarray::ArrayD<T>> {
        let data = self.try_to_vec()?;
        ndarray::ArrayD::from_shape_vec(ndarray::IxDyn(self.shape()), data)
            .map_err(|e| kiln_core::Error::Invalid(format!("to_ndarray: {e}")))
    }
    /// Evaluate and copy into an `ndarray` array of fixed rank (`Array1`, `Array2`, …); an error
    /// names both ranks if they differ.
    ///
    /// ```
    /// let t = kiln::Tensor::<f32>::ones(&[2, 2]);
    /// let m: ndarray::Array2<f32> = t.to_ndarray_fixed().unwrap();
    /// assert_eq!(m.dim(), (2, 2));
    /// ```
    pub fn to_ndarray_fixed<D: ndarray::Dimension>(&self) -> Result<ndarray::Array<T, D>> {
        let rank = self.ndim();
        self.try_to_ndarray()?
            .into_dimensionality::<D>()
            .map_err(|_| {
                kiln_core::Error::Invalid(format!(
                    "a tensor of rank {rank} (shape {:?}) cannot become an ndarray of rank {:?}",
                    self.shape(),
                    D::NDIM
                ))
            })
    }
}

impl<T: Scalar, D: ndarray::Dimension> From<&ndarray::Array<T, D>> for crate::Tensor<T> {
    fn from(a: &ndarray::Array<T, D>) -> Self {
        crate::Tensor::from_ndarray(a)
    }
}

impl<T: Scalar, D: ndarray::Dimension> From<ndarray::ArrayView<'_, T, D>> for crate::Tensor<T> {
    fn from(a: ndarray::ArrayView<'_, T, D>) -> Self {
        crate::Tensor::from_ndarray(&a)
    }
}
