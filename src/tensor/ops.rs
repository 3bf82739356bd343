//! Elementwise operators on tensors with NumPy broadcasting (shapes aligned from the last axis;
//! each pair of dimensions equal or one of them 1), comparisons, and scalars on either side.

use super::Tensor;
use crate::array::{ok, Array, Bool};
use crate::types::{Numeric, Signed};
use kiln_core::{Error, Result, Scalar};
use std::ops::{
    Add, AddAssign, BitAnd, BitAndAssign, BitOr, BitOrAssign, BitXor, BitXorAssign, Div, DivAssign,
    Mul, MulAssign, Neg, Rem, RemAssign, Sub, SubAssign,
};

/// The broadcast shape of two shapes, or an error naming both and the rule.
pub fn broadcast_shapes(a: &[usize], b: &[usize]) -> Result<Vec<usize>> {
    let r = a.len().max(b.len());
    let mut out = vec![0; r];
    for k in 0..r {
        let da = if k < a.len() { a[a.len() - 1 - k] } else { 1 };
        let db = if k < b.len() { b[b.len() - 1 - k] } else { 1 };
        out[r - 1 - k] = match (da, db) {
            (x, y) if x == y => x,
            (1, y) => y,
            (x, 1) => x,
            _ => {
                return Err(Error::Invalid(format!(
                    "shapes {a:?} and {b:?} do not broadcast: aligned from the last axis, each pair of dimensions must be equal or one of them 1 ({da} vs {db} here)"
                )))
            }
        };
    }
    Ok(out)
}

/// The right-hand operand of a tensor method (`lt`, `min`, `pow`, …): a borrowed tensor
/// (broadcast with NumPy's rule) or a plain scalar (applied to every element, as `t + 1.0` is).
///
/// ```
/// use kiln::prelude::*;
/// let t = Tensor::<f32>::from_vec(vec![0.25, 0.75, 1.5], &[3]);
/// assert_eq!(t.lt(0.5).to_vec(), vec![true, false, false]);
/// assert_eq!(t.lt(&Tensor::full(1.0, &[1])).to_vec(), vec![true, true, false]);
/// assert_eq!(t.max(1.0).to_vec(), vec![1.0, 1.0, 1.5]);
/// ```
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not an operand for a `Tensor<{T}>`",
    label = "give a `&Tensor<{T}>` or a `{T}`"
)]
pub trait TensorOperand<T: Scalar> {
    /// `f` on the flat arrays of `lhs` and this operand (broadcast to a common shape), as a tensor.
    fn zip_into<V: Scalar>(
        self,
        lhs: &Tensor<T>,
        f: impl FnOnce(&Array<T>, &Array<T>) -> Array<V>,
    ) -> Result<Tensor<V>>;
}
impl<T: Scalar> TensorOperand<T> for &Tensor<T> {
    fn zip_into<V: Scalar>(
        self,
        lhs: &Tensor<T>,
        f: impl FnOnce(&Array<T>, &Array<T>) -> Array<V>,
    ) -> Result<Tensor<V>> {
        lhs.zip_with(self, f)
    }
}
impl<T: Scalar> TensorOperand<T> for T {
    fn zip_into<V: Scalar>(
        self,
        lhs: &Tensor<T>,
        f: impl FnOnce(&Array<T>, &Array<T>) -> Array<V>,
    ) -> Result<Tensor<V>> {
        // a size-1 literal operand: no broadcast view, the scalar folds into the kernel
        let array = f(&lhs.array, &Array::scalar(self));
        if array.size().get() != lhs.len() {
            return Err(Error::Invalid(format!(
                "a tensor operation returned {} elements for shape {:?}; it must work elementwise",
                array.size(),
                lhs.shape
            )));
        }
        Ok(Tensor {
            array,
            shape: lhs.shape.clone(),
            transposed: lhs.transposed,
        })
    }
}

impl<T: Scalar> Tensor<T> {
    /// Apply `f` to the flat arrays of `self` and `other` broadcast to a common shape.
    pub fn zip_with<U: Scalar, V: Scalar>(
        &self,
        other: &Tensor<U>,
        f: impl FnOnce(&Array<T>, &Array<U>) -> Array<V>,
    ) -> Result<Tensor<V>> {
        let shape = broadcast_shapes(&self.shape, &other.shape)?;
        let a = self.try_broadcast_to(&shape)?;
        let b = other.try_broadcast_to(&shape)?;
        let array = f(&a.array, &b.array);
        let n = super::numel(&shape)?;
        if array.size().get() != n {
            return Err(Error::Invalid(format!(
                "Tensor::zip_with: the function returned {} elements for shape {shape:?} ({n}); it must work elementwise",
                array.size()
            )));
        }
        Ok(Tensor {
            array,
            shape,
            transposed: a.transposed || b.transposed,
        })
    }
    /// Choose `a` where `mask` is true, else `b` (all three broadcast together).
    #[track_caller]
    pub fn select(mask: &Tensor<bool>, a: &Tensor<T>, b: &Tensor<T>) -> Tensor<T> {
        let shape =
            ok(broadcast_shapes(&mask.shape, &a.shape)
                .and_then(|s| broadcast_shapes(&s, &b.shape)));
        let (m, a, b) = (
            mask.broadcast_to(&shape),
            a.broadcast_to(&shape),
            b.broadcast_to(&shape),
        );
        Tensor {
            array: crate::select(&m.array, &a.array, &b.array),
            shape,
            transposed: m.transposed || a.transposed || b.transposed,
        }
    }
}

macro_rules! binary {
    ($Trait:ident, $method:ident, $bound:path) => {
        impl<T: $bound> $Trait<&Tensor<T>> for &Tensor<T>
        where
            for<'a> &'a Array<T>: $Trait<&'a Array<T>, Output = Array<T>>,
        {
            type Output = Tensor<T>;
            #[track_caller]
            fn $method(self, rhs: &Tensor<T>) -> Tensor<T> {
                ok(self.zip_with(rhs, |a, b| a.$method(b)))
            }
        }
        impl<T: $bound> $Trait<Tensor<T>> for &Tensor<T>
        where
            for<'a> &'a Array<T>: $Trait<&'a Array<T>, Output = Array<T>>,
        {
            type Output = Tensor<T>;
            #[track_caller]
            fn $method(self, rhs: Tensor<T>) -> Tensor<T> {
                self.$method(&rhs)
            }
        }
        impl<T: $bound> $Trait<&Tensor<T>> for Tensor<T>
        where
            for<'a> &'a Array<T>: $Trait<&'a Array<T>, Output = Array<T>>,
        {
            type Output = Tensor<T>;
            #[track_caller]
            fn $method(self, rhs: &Tensor<T>) -> Tensor<T> {
                (&self).$method(rhs)
            }
        }
        impl<T: $bound> $Trait<Tensor<T>> for Tensor<T>
        where
            for<'a> &'a Array<T>: $Trait<&'a Array<T>, Output = Array<T>>,
        {
            type Output = Tensor<T>;
            #[track_caller]
            fn $method(self, rhs: Tensor<T>) -> Tensor<T> {
                (&self).$method(&rhs)
            }
        }
        impl<T: $bound> $Trait<T> for &Tensor<T>
        where
            for<'a> &'a Array<T>: $Trait<T, Output = Array<T>>,
        {
            type Output = Tensor<T>;
            fn $method(self, rhs: T) -> Tensor<T> {
                self.map(|a| a.$method(rhs))
            }
        }
        impl<T: $bound> $Trait<T> for Tensor<T>
        where
            for<'a> &'a Array<T>: $Trait<T, Output = Array<T>>,
        {
            type Output = Tensor<T>;
            fn $method(self, rhs: T) -> Tensor<T> {
                self.map(|a| a.$method(rhs))
            }
        }
    };
}
/// Compound assignment (`t += &u`, `t *= 2.0`): `t` becomes the lazy `t op u`, which must keep
/// `t`'s shape (NumPy's rule for in-place operators; `u` broadcasts to it). At evaluation the
/// result is written over `t`'s old buffer when `t` was its only holder (update-in-place); a
/// clone taken before keeps the old values.
macro_rules! compound {
    ($Trait:ident, $method:ident, $Assign:ident, $assign:ident, $bound:path) => {
        impl<T: $bound> $Assign<&Tensor<T>> for Tensor<T>
        where
            for<'a> &'a Array<T>: $Trait<&'a Array<T>, Output = Array<T>>,
        {
            #[track_caller]
            fn $assign(&mut self, rhs: &Tensor<T>) {
                let r = ok(self.zip_with(rhs, |a, b| a.$method(b)));
                if r.shape() != self.shape() {
                    panic!(
                        "{}: the result has shape {:?} but the target {:?}; an in-place operator keeps the target's shape (the right side must broadcast to it), or write `t = &t {} &u`",
                        stringify!($assign),
                        r.shape(),
                        self.shape(),
                        stringify!($method)
                    );
                }
                *self = r;
            }
        }
        impl<T: $bound> $Assign<Tensor<T>> for Tensor<T>
        where
            for<'a> &'a Array<T>: $Trait<&'a Array<T>, Output = Array<T>>,
        {
            #[track_caller]
            fn $assign(&mut self, rhs: Tensor<T>) {
                $Assign::$assign(self, &rhs)
            }
        }
        impl<T: $bound> $Assign<T> for Tensor<T>
        where
            for<'a> &'a Array<T>: $Trait<T, Output = Array<T>>,
        {
            fn $assign(&mut self, rhs: T) {
                *self = self.map(|a| a.$method(rhs));
            }
        }
    };
}
compound!(Add, add, AddAssign, add_assign, Numeric);
compound!(Sub, sub, SubAssign, sub_assign, Numeric);
compound!(Mul, mul, MulAssign, mul_assign, Numeric);
compound!(Div, div, DivAssign, div_assign, Numeric);
compound!(Rem, rem, RemAssign, rem_assign, Numeric);
compound!(BitAnd, bitand, BitAndAssign, bitand_assign, Scalar);
compound!(BitOr, bitor, BitOrAssign, bitor_assign, Scalar);
compound!(BitXor, bitxor, BitXorAssign, bitxor_assign, Scalar);

binary!(Add, add, Numeric);
binary!(Sub, sub, Numeric);
binary!(Mul, mul, Numeric);
binary!(Div, div, Numeric);
binary!(Rem, rem, Numeric);
binary!(BitAnd, bitand, Scalar);
binary!(BitOr, bitor, Scalar);
binary!(BitXor, bitxor, Scalar);

impl<T: Signed> Neg for &Tensor<T> {
    type Output = Tensor<T>;
    fn neg(self) -> Tensor<T> {
        self.map(|a| -a)
    }
}
impl<T: Signed> Neg for Tensor<T> {
    type Output = Tensor<T>;
    fn neg(self) -> Tensor<T> {
        -&self
    }
}

macro_rules! comparisons {
    ($($name:ident),*) => {
        impl<T: Scalar> Tensor<T> {$(
            #[doc = concat!("Elementwise `", stringify!($name), "` against a tensor (broadcast) or a scalar: a `Tensor<bool>`.")]
            ///
            /// ```
            /// use kiln::prelude::*;
            /// let t = Tensor::<i32>::arange(4).reshape(&[2, 2]);
            /// let _mask: Tensor<bool> = t.lt(2);
            /// assert_eq!(t.ge(&Tensor::from_vec(vec![1, 3], &[2])).to_vec(), vec![false, false, true, true]);
            /// ```
            #[track_caller]
            pub fn $name(&self, rhs: impl TensorOperand<T>) -> Tensor<bool> {
                ok(rhs.zip_into(self, |a, b| -> Bool { a.$name(b) }))
            }
        )*}
    };
}
comparisons!(eq, ne, lt, le, gt, ge);

impl<T: crate::types::Float> Tensor<T> {
    /// The matrix product of two 2-d tensors (`[m, k] × [k, n] → [m, n]`), f32 or f64, on all
    /// cores (operands are evaluated first). A device operation: frozen functions record it.
    /// Other ranks follow NumPy's `matmul`: leading axes are batches that broadcast
    /// (`[b, m, k] × [k, n] → [b, m, n]`), a 1-d operand is a row on the left and a column on
    /// the right. A batch runs as one fused product and sum over `k`, not as BLAS products.
    ///
    /// ```
    /// use kiln::prelude::*;
    /// let a = Tensor::<f64>::from_vec((0..12).map(f64::from).collect(), &[3, 2, 2]);
    /// let v = Tensor::<f64>::from_vec(vec![1.0, -1.0], &[2]);
    /// let av = a.matmul(&v); // [3, 2]: each matrix times the column v
    /// assert_eq!((av.shape().to_vec(), av.to_vec()), (vec![3, 2], vec![-1.0; 6]));
    /// ```
    ///
    /// ```
    /// use kiln::prelude::*;
    /// let a = Tensor::<f32>::from_vec(vec![1.0, 2.0, 3.0, 4.0], &[2, 2]);
    /// let b = Tensor::<f32>::eye(2) * 2.0;
    /// assert_eq!(a.matmul(&b).to_vec(), vec![2.0, 4.0, 6.0, 8.0]);
    /// ```
    ///
    /// Gradients: `dA = dC·Bᵀ` and `dB = Aᵀ·dC` (two more products).
    ///
    /// ```
    /// use kiln::prelude::*;
    /// let mut a = Float64::from_slice(&[1.0, 2.0, 3.0, 4.0]);
    /// a.enable_grad();
    /// let b = Tensor::<f64>::from_vec(vec![1.0, 0.0, 0.0, 2.0], &[2, 2]);
    /// Tensor::from_array(a.clone(), &[2, 2]).matmul(&b).sum().backward();
    /// assert_eq!(a.grad().to_vec(), vec![1.0, 2.0, 1.0, 2.0]); // ones · Bᵀ
    /// ```
    #[track_caller]
    pub fn matmul(&self, other: &Tensor<T>) -> Tensor<T> {
        ok(self.try_matmul(other))
    }
    /// As [`Tensor::matmul`], returning an error naming both shapes when they do not fit.
    pub fn try_matmul(&self, other: &Tensor<T>) -> Result<Tensor<T>> {
        if self.ndim() == 2 && other.ndim() == 2 {
            return self.matmul_2d(other);
        }
        self.matmul_batched(other)
    }

    /// NumPy's `matmul` beyond two dimensions: a 1-d operand is a row (left) or a column
    /// (right) whose axis leaves the result; leading axes are batches, broadcast against each
    /// other. The batch is one elementwise product and a sum over `k` (kiln's fused kernels, not
    /// the BLAS of the 2-d product): one compile for any batch size, right for many small
    /// matrices; for a few large ones, 2-d products of `index_axis` slices are faster.
    fn matmul_batched(&self, other: &Tensor<T>) -> Result<Tensor<T>> {
        let (sa, sb) = (self.shape.clone(), other.shape.clone());
        let refuse = |why: &str| {
            Error::Invalid(format!(
                "matmul of shapes {sa:?} and {sb:?}: {why} (NumPy's rules: [.., m, k] @ [.., k, n], leading axes broadcast; a 1-d operand is a row on the left, a column on the right)"
            ))
        };
        if sa.is_empty() || sb.is_empty() {
            return Err(refuse(
                "a 0-d tensor has no matrix product; multiply with `*`",
            ));
        }
        let a = if sa.len() == 1 {
            self.try_reshape(&[1, sa[0]])?
        } else {
            self.clone()
        };
        let b = if sb.len() == 1 {
            other.try_reshape(&[sb[0], 1])?
        } else {
            other.clone()
        };
        let (ra, rb) = (a.ndim(), b.ndim());
        let (m, k, k2, n) = (
            a.shape[ra - 2],
            a.shape[ra - 1],
            b.shape[rb - 2],
            b.shape[rb - 1],
        );
        if k != k2 {
            return Err(refuse(&format!("the inner lengths {k} and {k2} differ")));
        }
        let batch = broadcast_shapes(&a.shape[..ra - 2], &b.shape[..rb - 2])
            .map_err(|_| refuse("the leading (batch) axes do not broadcast"))?;
        let count = super::numel(&batch)?;
        let with = |tail: [usize; 2]| [batch.as_slice(), &tail].concat();
        let mut out_shape = with([m, n]);
        let out = if count == 0 || m == 0 || n == 0 || k == 0 {
            Tensor::zeros(&out_shape)
        } else {
            // [.., m, k, 1] * [.., 1, k, n] summed over k: one fused kernel and an axis reduction
            // (the product is not stored), one compile whatever the batch size
            let a4 = a
                .try_broadcast_to(&with([m, k]))?
                .unsqueeze(batch.len() + 2);
            let b4 = b.try_broadcast_to(&with([k, n]))?.unsqueeze(batch.len());
            (&a4 * &b4).sum_axis(batch.len() + 1)
        };
        // the 1-d operands' axes leave the result
        if sb.len() == 1 {
            out_shape.pop();
        }
        if sa.len() == 1 {
            out_shape.remove(out_shape.len() - if sb.len() == 1 { 1 } else { 2 });
        }
        out.try_reshape(&out_shape)
    }

    /// The product of two 2-d tensors.
    fn matmul_2d(&self, other: &Tensor<T>) -> Result<Tensor<T>> {
        let (a, b) = (&self.shape, &other.shape);
        if a.len() != 2 || b.len() != 2 || a[1] != b[0] {
            return Err(Error::Invalid(format!(
                "matmul of shapes {a:?} and {b:?}: the inner lengths {} and {} differ; give [m, k] and [k, n]",
                a.get(1).copied().unwrap_or(0),
                b.first().copied().unwrap_or(0)
            )));
        }
        let (m, k, n) = (a[0], a[1], b[1]);
        if crate::ad::rules::tracks(&self.array) || crate::ad::rules::tracks(&other.array) {
            // the product of the detached values, with one node for both operands
            let out = self.detached().matmul_2d(&other.detached())?;
            return Ok(crate::ad::tensor::record_matmul(self, other, out));
        }
        // the product's shape, checked before anything (the scan hook included) multiplies it
        super::numel(&[m, n])?;
        if let Some(r) = crate::scan::matmul_hook(self, other, m, k, n) {
            return r;
        }
        let id = kiln_core::matmul(self.array.id(), other.array.id(), m, k, n)?;
        Ok(Tensor {
            array: Array::from_id(id),
            shape: vec![m, n],
            transposed: false,
        })
    }
}

macro_rules! tensor_unary {
    ($($name:ident),*) => {
        /// Elementwise math on float tensors: the same functions as on `Array` (shape kept).
        ///
        /// ```
        /// use kiln::prelude::*;
        /// let t = Tensor::<f32>::full(0.0, &[2, 2]).exp().sqrt();
        /// assert_eq!(t.to_vec(), vec![1.0; 4]);
        /// ```
        impl<T: crate::types::Float> Tensor<T> {$(
            #[doc = concat!("Elementwise `", stringify!($name), "` (see `Array::", stringify!($name), "`).")]
            pub fn $name(&self) -> Tensor<T> {
                self.map(|a| a.$name())
            }
        )*}
    };
}
tensor_unary!(
    exp, exp2, log, log2, sin, cos, tan, asin, acos, atan, sinh, cosh, tanh, erf, sqrt, floor,
    ceil, round, trunc, rcp, rsqrt
);

impl<T: Signed> Tensor<T> {
    /// Elementwise absolute value.
    pub fn abs(&self) -> Tensor<T> {
        self.map(|a| a.abs())
    }
}

macro_rules! tensor_binary {
    ($bound:path; $($name:ident),*) => {
        impl<T: $bound> Tensor<T> {$(
            #[doc = concat!("Elementwise `", stringify!($name), "` against a tensor (broadcast) or a scalar (see `Array::", stringify!($name), "`).")]
            #[track_caller]
            pub fn $name(&self, other: impl TensorOperand<T>) -> Tensor<T> {
                ok(other.zip_into(self, |a, b| a.$name(b)))
            }
        )*}
    };
}
tensor_binary!(Numeric; min, max);
tensor_binary!(crate::types::Float; pow, atan2, copysign);
