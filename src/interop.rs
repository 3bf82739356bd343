//! Conversions between kiln and `ndarray` (cargo feature `ndarray`): `Array` ↔ `Array1`, `Tensor`
//! ↔ arrays of any rank.

use crate::array::Array;
use kiln_core::{Result, Scalar};

impl<T: Scalar> Array<T> {
    /// An evaluated array holding a copy of an `ndarray` vector (any memory layout).
    ///
    /// ```
    /// let a = ndarray::Array1::from(vec![1.0f32, 2.0]);
    /// let k = kiln::Float32::from_ndarray(&a);
    /// assert_eq!(k.to_vec(), vec![1.0, 2.0]);
    /// ```
    pub fn from_ndarray(a: &ndarray::Array1<T>) -> Self {
        match a.as_slice() {
            Some(s) => Self::from_slice(s),
            None => Self::from_vec(a.iter().copied().collect()),
        }
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
    /// A tensor holding a copy of an `ndarray` array of any rank and memory layout (kiln keeps
    /// its own aligned buffers, so one copy is made: a single block copy for standard layout).
    ///
    /// ```
    /// let a = ndarray::arr2(&[[1, 2, 3], [4, 5, 6]]);
    /// let t = kiln::Tensor::from_ndarray(&a);
    /// assert_eq!(t.shape(), &[2, 3]);
    /// assert_eq!(t.transpose().to_ndarray(), a.t().into_dyn());
    /// ```
    pub fn from_ndarray<D: ndarray::Dimension>(a: &ndarray::Array<T, D>) -> Self {
        let shape = a.shape().to_vec();
        match a.as_slice() {
            Some(s) => Self::from_slice(s, &shape),
            None => Self::from_vec(a.iter().copied().collect(), &shape),
        }
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
