//! Horizontal operations: reductions, block reductions, prefix sums, compaction, mask queries.
//!
//! Reductions return a pending size-1 array: it is evaluated, on the device and without a read
//! back to the host, when something needs it (`eval`, `item()`, a kernel that uses it, a frozen
//! call's end), together with the other pending reductions over a source of the same size — one
//! pass computes them all (`kiln::eval!(x.reduce_min(), x.reduce_max())` reads `x` once). Mask
//! queries (`all`, `any`, `count`) return host values at once. An empty array reduces to the
//! operation's identity.
//!
//! ```
//! let y = kiln::Float32::arange(1000) * 0.5 - 3.0;
//! let (lo, hi) = (y.reduce_min(), y.reduce_max());
//! let before = kiln::stats().launches;
//! kiln::eval!(lo, hi);
//! assert_eq!(kiln::stats().launches - before, 1, "one pass for both");
//! assert_eq!((lo.item(), hi.item()), (-3.0, 496.5));
//! ```
//!
//! Reducing an unevaluated array fuses the reduction into its kernel: the values are reduced block
//! by block as they are computed and never stored, and the array stays lazy. Call `eval()` first if
//! you will read the array itself again, so it is computed once.

use crate::array::{ok, Array, Bool, UInt32};
use crate::types::Numeric;
use kiln_core::{self as core, Error, ReduceOp, Result, Scalar};

impl<T: Scalar> Array<T> {
    fn reduce_with(&self, op: ReduceOp) -> Result<Array<T>> {
        let out = Array::from_id(core::reduce(op, self.id())?);
        Ok(crate::ad::reduce::record_reduce(op, self, out))
    }
}

impl<T: Numeric> Array<T> {
    /// Sum of all elements (0 for an empty array).
    ///
    /// ```
    /// assert_eq!(kiln::Int32::arange(5).sum().item(), 10);
    /// ```
    #[track_caller]
    pub fn sum(&self) -> Array<T> {
        ok(self.reduce_with(ReduceOp::Add))
    }
    /// Product of all elements (1 for an empty array).
    ///
    /// ```
    /// assert_eq!((kiln::Int32::arange(4) + 1).prod().item(), 24);
    /// ```
    #[track_caller]
    pub fn prod(&self) -> Array<T> {
        ok(self.reduce_with(ReduceOp::Mul))
    }
    /// Smallest element (+∞ / the type's maximum for an empty array; NaN if any is NaN).
    ///
    /// ```
    /// assert_eq!(kiln::Float32::from_slice(&[3.0, -1.0]).reduce_min().item(), -1.0);
    /// ```
    #[track_caller]
    pub fn reduce_min(&self) -> Array<T> {
        ok(self.reduce_with(ReduceOp::Min))
    }
    /// Largest element (−∞ / the type's minimum for an empty array; NaN if any is NaN).
    ///
    /// ```
    /// assert_eq!(kiln::Float32::from_slice(&[3.0, -1.0]).reduce_max().item(), 3.0);
    /// ```
    #[track_caller]
    pub fn reduce_max(&self) -> Array<T> {
        ok(self.reduce_with(ReduceOp::Max))
    }
    /// `sum(self * other)` (fused into one kernel plus the reduction).
    ///
    /// ```
    /// let a = kiln::Float32::from_slice(&[1.0, 2.0]);
    /// assert_eq!(a.dot(&a).item(), 5.0);
    /// ```
    #[track_caller]
    pub fn dot(&self, other: &Array<T>) -> Array<T> {
        (self * other).sum()
    }
    /// Sums of consecutive blocks of `block_size` elements; a partial last block is summed too
    /// (size 5, block 2 → 3 values). Gradient: each element gets its block's.
    ///
    /// ```
    /// assert_eq!(kiln::Int32::arange(5).block_sum(2).to_vec(), vec![1, 5, 4]);
    /// ```
    #[track_caller]
    pub fn block_sum(&self, block_size: usize) -> Array<T> {
        ok(self.try_block_sum(block_size))
    }
    /// As [`Array::block_sum`], returning an error for `block_size == 0`.
    pub fn try_block_sum(&self, block_size: usize) -> Result<Array<T>> {
        let out = Array::from_id(core::block_reduce(ReduceOp::Add, self.id(), block_size)?);
        Ok(crate::ad::memory::record_block_sum(self, block_size, out))
    }
    /// Reductions of consecutive blocks of `block_size` elements by `op` (`Add`, `Mul`, `Min`,
    /// `Max`; `And`/`Or` for integers); a partial last block is reduced too (Dr.Jit's
    /// `block_reduce`). Gradients (floats): `Add` gives each element its block's cotangent,
    /// `Mul` the product of the other elements of its block (exact with zeros), `Min`/`Max` the
    /// cotangent to the elements equal to the block's result, split evenly among ties.
    ///
    /// ```
    /// use kiln::ReduceOp;
    /// let x = kiln::Float32::from_slice(&[1.0, 2.0, 3.0, 4.0, 5.0]);
    /// assert_eq!(x.block_reduce(ReduceOp::Mul, 2).to_vec(), vec![2.0, 12.0, 5.0]);
    /// assert_eq!(x.block_reduce(ReduceOp::Max, 2).to_vec(), vec![2.0, 4.0, 5.0]);
    /// ```
    #[track_caller]
    pub fn block_reduce(&self, op: ReduceOp, block_size: usize) -> Array<T> {
        ok(self.try_block_reduce(op, block_size))
    }
    /// As [`Array::block_reduce`], returning an error for `block_size == 0` or an operation the
    /// element type has no reduction for (`Identity`, `And`/`Or` on floats).
    pub fn try_block_reduce(&self, op: ReduceOp, block_size: usize) -> Result<Array<T>> {
        let bitwise = matches!(op, ReduceOp::And | ReduceOp::Or);
        let arithmetic = matches!(
            op,
            ReduceOp::Add | ReduceOp::Mul | ReduceOp::Min | ReduceOp::Max
        );
        if !(arithmetic || bitwise && !T::TYPE.is_float()) {
            let name = match op {
                ReduceOp::None => "Identity (no reduction)".to_string(),
                o => format!("{o:?}"),
            };
            return Err(Error::Invalid(format!(
                "block_reduce by {name} of {}: the operations are Add, Mul, Min and Max, and And/Or for integers",
                core::describe(self.id())
            )));
        }
        if op == ReduceOp::Add {
            return self.try_block_sum(block_size);
        }
        let out = Array::from_id(core::block_reduce(op, self.id(), block_size)?);
        Ok(crate::ad::reduce::record_block_reduce(
            op, self, block_size, out,
        ))
    }
    /// Running sum; `exclusive` starts at 0 and leaves out each element itself. Gradient: the
    /// same running sum of the result's gradient taken from the end (each element reaches every
    /// later output).
    ///
    /// ```
    /// let x = kiln::Int32::from_slice(&[1, 2, 3]);
    /// assert_eq!(x.prefix_sum(false).to_vec(), vec![1, 3, 6]);
    /// assert_eq!(x.prefix_sum(true).to_vec(), vec![0, 1, 3]);
    /// ```
    #[track_caller]
    pub fn prefix_sum(&self, exclusive: bool) -> Array<T> {
        let out = ok(core::prefix_sum(self.id(), exclusive).map(Array::from_id));
        crate::ad::memory::record_prefix_sum(self, exclusive, out)
    }
}

impl Bool {
    /// Whether every lane is true (true for an empty mask).
    ///
    /// ```
    /// assert!(kiln::Int32::arange(3).ge(0).all());
    /// ```
    #[track_caller]
    pub fn all(&self) -> bool {
        ok(core::reduce_to_host(ReduceOp::And, self.id())) & 1 != 0
    }
    /// Whether any lane is true (false for an empty mask).
    ///
    /// ```
    /// assert!(kiln::Int32::arange(3).eq(2).any());
    /// ```
    #[track_caller]
    pub fn any(&self) -> bool {
        ok(core::reduce_to_host(ReduceOp::Or, self.id())) & 1 != 0
    }
    /// Whether no lane is true.
    pub fn none(&self) -> bool {
        !self.any()
    }
    /// Number of true lanes.
    ///
    /// ```
    /// assert_eq!(kiln::Int32::arange(10).lt(4).count(), 4);
    /// ```
    #[track_caller]
    pub fn count(&self) -> u64 {
        ok(core::reduce_to_host(ReduceOp::Add, self.id()))
    }
    /// `any()` on the CPU; a GPU backend would return `default` without evaluating (see the seed).
    pub fn any_or(&self, _default: bool) -> bool {
        self.any()
    }
    /// `all()` on the CPU; a GPU backend would return `default` without evaluating.
    pub fn all_or(&self, _default: bool) -> bool {
        self.all()
    }
    /// `none()` on the CPU; a GPU backend would return `default` without evaluating.
    pub fn none_or(&self, _default: bool) -> bool {
        self.none()
    }
    /// Indices of the true lanes, in order.
    ///
    /// ```
    /// let m = kiln::Int32::from_slice(&[5, 0, 7]).ne(0);
    /// assert_eq!(m.compress().to_vec(), vec![0, 2]);
    /// ```
    #[track_caller]
    pub fn compress(&self) -> UInt32 {
        ok(core::compress(self.id()).map(UInt32::from_id))
    }
}
