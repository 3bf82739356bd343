//! Tensor operations that may reuse the tensor's own buffer: transposes and flips done in place
//! when the tensor is the only holder of its evaluated buffer, and `assign`, which evaluates an
//! expression into a caller-provided tensor's buffer.
//!
//! Each falls back to what the out-of-place operation gives (a lazy view, a new buffer) when
//! anything else can still see the buffer — a clone, a view, a pending expression — so no value
//! anyone holds ever changes (copy-on-write). `KILN_LOG=inplace` says which happened and why. A
//! tensor that carries a gradient always takes the view, so that its gradient follows the move.

use super::Tensor;
use crate::array::{ok, Array};
use kiln_core::device::Permutation;
use kiln_core::{Error, Result, Scalar};

impl<T: Scalar> Tensor<T> {
    /// Transpose a matrix in place: a uniquely held, evaluated square matrix is rearranged by
    /// blocked swaps in its own buffer, a non-square one by following the permutation's cycles
    /// (slower than out of place — DAPHNE measured 2.1× — so only here, where it is asked for, and
    /// it needs no second buffer). An `n × 1` or `1 × n` matrix only changes its shape. A shared
    /// or lazy tensor becomes the (lazy) transposed view instead; whoever shares it keeps the old
    /// values. Other ranks: reverses the axes as [`Tensor::transpose`] does.
    ///
    /// ```
    /// use kiln::prelude::*;
    /// let mut t = Tensor::from_vec(vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0], &[2, 3]);
    /// t.eval();
    /// let before = t.array().buffer_addr();
    /// t.transpose_in_place();
    /// assert_eq!(t.shape(), &[3, 2]);
    /// assert_eq!(t.to_vec(), vec![1.0, 4.0, 2.0, 5.0, 3.0, 6.0]);
    /// assert_eq!(t.array().buffer_addr(), before);
    /// ```
    #[track_caller]
    pub fn transpose_in_place(&mut self) {
        ok(self.try_transpose_in_place(true))
    }

    /// Transpose, consuming the tensor: a uniquely held, evaluated square matrix is transposed
    /// in its own buffer (blocked swaps; no second buffer), an `n × 1` or `1 × n` matrix only
    /// changes its shape, and anything else gives the lazy [`Tensor::transpose`] view.
    ///
    /// ```
    /// use kiln::prelude::*;
    /// let t = Tensor::<i32>::arange(4).reshape(&[2, 2]);
    /// t.eval();
    /// assert_eq!(t.into_transposed().to_vec(), vec![0, 2, 1, 3]);
    /// ```
    #[track_caller]
    pub fn into_transposed(mut self) -> Tensor<T> {
        ok(self.try_transpose_in_place(false));
        self
    }

    fn try_transpose_in_place(&mut self, any_shape: bool) -> Result<()> {
        if self.ndim() < 2 {
            return Ok(());
        }
        if self.ndim() == 2 {
            let (r, c) = (self.shape[0], self.shape[1]);
            if r <= 1 || c <= 1 {
                // the row-major order of the elements is already the transpose's
                self.shape = vec![c, r];
                return Ok(());
            }
            // a tensor that carries a gradient takes the view, whose node maps it back
            if (any_shape || r == c)
                && self.array.ad == 0
                && kiln_core::permute_in_place(
                    self.array.id(),
                    Permutation::Transpose { rows: r, cols: c },
                )?
            {
                self.shape = vec![c, r];
                self.transposed = false;
                return Ok(());
            }
        }
        *self = self.transpose();
        Ok(())
    }

    /// Reverse the order along `axis` in place when the tensor is the only holder of its
    /// evaluated buffer (blocks swapped pairwise, in parallel); otherwise it becomes the lazy
    /// [`Tensor::flip`] view, and whoever shares the old buffer keeps its values.
    ///
    /// ```
    /// use kiln::prelude::*;
    /// let mut t = Tensor::from_vec(vec![1, 2, 3, 4, 5, 6], &[3, 2]);
    /// t.eval();
    /// t.flip_in_place(0);
    /// assert_eq!(t.to_vec(), vec![5, 6, 3, 4, 1, 2]);
    /// ```
    #[track_caller]
    pub fn flip_in_place(&mut self, axis: usize) {
        ok(self.try_flip_in_place(axis))
    }

    /// Reverse the order along `axis`, consuming the tensor: in its own buffer when nothing else
    /// holds it (see [`Tensor::flip_in_place`]), else the lazy [`Tensor::flip`] view.
    ///
    /// ```
    /// use kiln::prelude::*;
    /// let t = Tensor::from_vec(vec![1, 2, 3], &[3]);
    /// t.eval();
    /// assert_eq!(t.into_flipped(0).to_vec(), vec![3, 2, 1]);
    /// ```
    #[track_caller]
    pub fn into_flipped(mut self, axis: usize) -> Tensor<T> {
        ok(self.try_flip_in_place(axis));
        self
    }

    /// As [`Tensor::flip_in_place`], returning an error for an axis out of range.
    pub fn try_flip_in_place(&mut self, axis: usize) -> Result<()> {
        self.check_axis("flip_in_place", axis)?;
        let outer: usize = self.shape[..axis].iter().product();
        let inner: usize = self.shape[axis + 1..].iter().product();
        let len = self.shape[axis];
        if len <= 1 || outer == 0 || inner == 0 {
            return Ok(());
        }
        if self.array.ad == 0
            && kiln_core::permute_in_place(
                self.array.id(),
                Permutation::Flip { outer, len, inner },
            )?
        {
            self.transposed = false;
            return Ok(());
        }
        *self = self.flip(axis);
        Ok(())
    }

    /// Evaluate `expr` into this tensor's buffer (a caller-provided output): when this tensor is
    /// the only holder of its evaluated buffer, `expr`'s kernel stores straight into it and no
    /// operand of `expr` is reused; otherwise (a clone or view shares it, or it is lazy) `expr`
    /// gets a new buffer and the others keep the old values (copy-on-write). `expr` may read this
    /// tensor elementwise (`out.assign(&out * 2.0)`). The shapes must be equal.
    ///
    /// ```
    /// use kiln::prelude::*;
    /// let mut out = Tensor::<f64>::zeros(&[2, 2]);
    /// out.eval();
    /// let before = out.array().buffer_addr();
    /// let x = Tensor::from_vec(vec![1.0, 2.0, 3.0, 4.0], &[2, 2]);
    /// out.assign(&x * 10.0 + 1.0);
    /// assert_eq!(out.to_vec(), vec![11.0, 21.0, 31.0, 41.0]);
    /// assert_eq!(out.array().buffer_addr(), before);
    /// ```
    #[track_caller]
    pub fn assign(&mut self, expr: Tensor<T>) {
        ok(self.try_assign(expr))
    }

    /// As [`Tensor::assign`], returning an error naming both shapes when they differ.
    pub fn try_assign(&mut self, expr: Tensor<T>) -> Result<()> {
        if expr.shape != self.shape {
            return Err(Error::Invalid(format!(
                "assign: the expression has shape {:?} but the target {:?}; assign a value of the \
                 target's shape (broadcast_to or reshape it), or rebind with `x = expr`",
                expr.shape, self.shape
            )));
        }
        let shape = std::mem::take(&mut self.shape);
        let mut array: Array<T> = std::mem::replace(&mut self.array, expr.array.clone());
        let result = array.try_assign(expr.into_array());
        *self = Tensor {
            array,
            shape,
            transposed: false,
        };
        result
    }
}
