//! Conversions to and from `ndarray::Array1` (cargo feature `ndarray`).

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
