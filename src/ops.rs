//! Operators on arrays: `+ - * / % neg ! & | ^ << >>`, their compound forms, and comparisons.
//!
//! Every operator works on owned and borrowed arrays and on a scalar on either side (`2.0 * &x`,
//! `&x + 1.0`). Which element types an operator accepts follows Rust: arithmetic on numbers, bit
//! operations on integers and masks, shifts on integers, negation on signed types, `%` on numbers
//! (for floats `a - b * trunc(a / b)`, which matches `fmod` except for quotients beyond 2^24/2^53).
//! Size mismatches panic with a message that names both operands; `try_binary` returns the error.

use crate::array::{ok, Array, Bool, IntoArray};
use crate::types::{Float, Integer, Numeric, Signed};
use kiln_core::{Error, Op, Result, Scalar, VarType};
use std::ops::*;

/// Marker: element types with bitwise `& | ^` (integers and masks).
pub trait Bitwise: Scalar {}
impl Bitwise for bool {}
impl Bitwise for i32 {}
impl Bitwise for u32 {}
impl Bitwise for i64 {}
impl Bitwise for u64 {}

/// Element types with `%`.
pub trait Remainder: Numeric {
    fn rem_arrays(a: &Array<Self>, b: &Array<Self>) -> Result<Array<Self>>;
}
macro_rules! int_rem {
    ($($t:ty),*) => {$(
        impl Remainder for $t {
            fn rem_arrays(a: &Array<Self>, b: &Array<Self>) -> Result<Array<Self>> {
                Array::apply(Op::Rem, &[a, b])
            }
        }
    )*};
}
int_rem!(i32, u32, i64, u64);
macro_rules! float_rem {
    ($($t:ty),*) => {$(
        impl Remainder for $t {
            fn rem_arrays(a: &Array<Self>, b: &Array<Self>) -> Result<Array<Self>> {
                let q = Array::apply(Op::Div, &[a, b])?;
                let q = Array::apply(Op::Trunc, &[&q])?;
                let p = Array::apply(Op::Mul, &[&q, b])?;
                Array::apply(Op::Sub, &[a, &p])
            }
        }
    )*};
}
float_rem!(f32, f64);

impl<T: Scalar> Array<T> {
    /// A binary op that reports size mismatches as `Err` instead of panicking. `op` must be a
    /// binary arithmetic or logic op whose result has the operands' type: a unary or ternary op,
    /// an op such as `Gather`, or a comparison (whose result is a `Bool`; use `lt`, `eq`, … for
    /// those) is an error too.
    ///
    /// ```
    /// use kiln::prelude::*;
    /// let a = Float32::zeros(3);
    /// let b = Float32::zeros(5);
    /// assert!(Float32::try_binary(Op::Add, &a, &b).is_err());
    /// assert!(Float32::try_binary(Op::Lt, &a, &a).is_err());
    /// ```
    pub fn try_binary(op: Op, a: &Array<T>, b: &Array<T>) -> Result<Array<T>> {
        let name = op.name();
        if op.arity() != 2 {
            let n = op.arity();
            return Err(Error::Invalid(format!(
                "try_binary: `{name}` is not a binary op (it takes {n} operand{}); call its method or function instead",
                if n == 1 { "" } else { "s" }
            )));
        }
        if op.is_comparison() && T::TYPE != VarType::Bool {
            return Err(Error::Invalid(format!(
                "try_binary: `{name}` gives a bool array, not an Array<{}> like its operands; use the comparison method (`a.{name}(&b)`), which returns a Bool",
                T::TYPE
            )));
        }
        let special = matches!(
            op,
            Op::Literal | Op::Counter | Op::Cast | Op::Bitcast | Op::Tap | Op::Split
        );
        if special || !op.is_pure() {
            return Err(Error::Invalid(format!(
                "try_binary: `{name}` is not an arithmetic or logic op; use the function that makes it (`kiln::gather`, `kiln::scatter`, a stencil, …) instead"
            )));
        }
        // size mismatches and unsupported types come back as the engine's own errors
        let id = kiln_core::op(op, &[a.id(), b.id()])?;
        // every op `op` accepts gives its operands' type, or Bool for comparisons (checked above)
        Array::try_from_id(id).inspect_err(|_| kiln_core::dec_ref(id))
    }
}

macro_rules! binary_op {
    ($Trait:ident, $method:ident, $Assign:ident, $assign:ident, $bound:ident, $body:expr) => {
        impl<T: $bound> $Trait<&Array<T>> for &Array<T> {
            type Output = Array<T>;
            #[track_caller]
            fn $method(self, rhs: &Array<T>) -> Array<T> {
                let f: fn(&Array<T>, &Array<T>) -> Result<Array<T>> = $body;
                ok(f(self, rhs))
            }
        }
        impl<T: $bound> $Trait<Array<T>> for &Array<T> {
            type Output = Array<T>;
            #[track_caller]
            fn $method(self, rhs: Array<T>) -> Array<T> {
                $Trait::$method(self, &rhs)
            }
        }
        impl<T: $bound> $Trait<&Array<T>> for Array<T> {
            type Output = Array<T>;
            #[track_caller]
            fn $method(self, rhs: &Array<T>) -> Array<T> {
                $Trait::$method(&self, rhs)
            }
        }
        impl<T: $bound> $Trait<Array<T>> for Array<T> {
            type Output = Array<T>;
            #[track_caller]
            fn $method(self, rhs: Array<T>) -> Array<T> {
                $Trait::$method(&self, &rhs)
            }
        }
        impl<T: $bound> $Trait<T> for &Array<T> {
            type Output = Array<T>;
            #[track_caller]
            fn $method(self, rhs: T) -> Array<T> {
                $Trait::$method(self, &Array::scalar(rhs))
            }
        }
        impl<T: $bound> $Trait<T> for Array<T> {
            type Output = Array<T>;
            #[track_caller]
            fn $method(self, rhs: T) -> Array<T> {
                $Trait::$method(&self, &Array::scalar(rhs))
            }
        }
        impl<T: $bound, R: IntoArray<T>> $Assign<R> for Array<T> {
            #[track_caller]
            fn $assign(&mut self, rhs: R) {
                let r = rhs.into_array();
                *self = $Trait::$method(&*self, &r);
            }
        }
    };
}

binary_op!(Add, add, AddAssign, add_assign, Numeric, |a, b| {
    Array::apply(Op::Add, &[a, b])
});
binary_op!(Sub, sub, SubAssign, sub_assign, Numeric, |a, b| {
    Array::apply(Op::Sub, &[a, b])
});
binary_op!(Mul, mul, MulAssign, mul_assign, Numeric, |a, b| {
    Array::apply(Op::Mul, &[a, b])
});
binary_op!(Div, div, DivAssign, div_assign, Numeric, |a, b| {
    Array::apply(Op::Div, &[a, b])
});
binary_op!(Rem, rem, RemAssign, rem_assign, Remainder, |a, b| {
    T::rem_arrays(a, b)
});
binary_op!(
    BitAnd,
    bitand,
    BitAndAssign,
    bitand_assign,
    Bitwise,
    |a, b| Array::apply(Op::And, &[a, b])
);
binary_op!(BitOr, bitor, BitOrAssign, bitor_assign, Bitwise, |a, b| {
    Array::apply(Op::Or, &[a, b])
});
binary_op!(
    BitXor,
    bitxor,
    BitXorAssign,
    bitxor_assign,
    Bitwise,
    |a, b| Array::apply(Op::Xor, &[a, b])
);
binary_op!(Shl, shl, ShlAssign, shl_assign, Integer, |a, b| {
    Array::apply(Op::Shl, &[a, b])
});
binary_op!(Shr, shr, ShrAssign, shr_assign, Integer, |a, b| {
    Array::apply(Op::Shr, &[a, b])
});

// scalar on the left: `2.0 * &x`
macro_rules! scalar_lhs {
    ($t:ty; $($Trait:ident $method:ident),*) => {$(
        impl $Trait<&Array<$t>> for $t {
            type Output = Array<$t>;
            #[track_caller]
            fn $method(self, rhs: &Array<$t>) -> Array<$t> {
                $Trait::$method(&Array::scalar(self), rhs)
            }
        }
        impl $Trait<Array<$t>> for $t {
            type Output = Array<$t>;
            #[track_caller]
            fn $method(self, rhs: Array<$t>) -> Array<$t> {
                $Trait::$method(&Array::scalar(self), &rhs)
            }
        }
    )*};
}
scalar_lhs!(f32; Add add, Sub sub, Mul mul, Div div, Rem rem);
scalar_lhs!(f64; Add add, Sub sub, Mul mul, Div div, Rem rem);
scalar_lhs!(i32; Add add, Sub sub, Mul mul, Div div, Rem rem, BitAnd bitand, BitOr bitor, BitXor bitxor, Shl shl, Shr shr);
scalar_lhs!(u32; Add add, Sub sub, Mul mul, Div div, Rem rem, BitAnd bitand, BitOr bitor, BitXor bitxor, Shl shl, Shr shr);
scalar_lhs!(i64; Add add, Sub sub, Mul mul, Div div, Rem rem, BitAnd bitand, BitOr bitor, BitXor bitxor, Shl shl, Shr shr);
scalar_lhs!(u64; Add add, Sub sub, Mul mul, Div div, Rem rem, BitAnd bitand, BitOr bitor, BitXor bitxor, Shl shl, Shr shr);
scalar_lhs!(bool; BitAnd bitand, BitOr bitor, BitXor bitxor);

impl<T: Signed> Neg for &Array<T> {
    type Output = Array<T>;
    fn neg(self) -> Array<T> {
        ok(Array::apply(Op::Neg, &[self]))
    }
}
impl<T: Signed> Neg for Array<T> {
    type Output = Array<T>;
    fn neg(self) -> Array<T> {
        -&self
    }
}
impl<T: Bitwise> Not for &Array<T> {
    type Output = Array<T>;
    fn not(self) -> Array<T> {
        ok(Array::apply(Op::Not, &[self]))
    }
}
impl<T: Bitwise> Not for Array<T> {
    type Output = Array<T>;
    fn not(self) -> Array<T> {
        !&self
    }
}

macro_rules! comparisons {
    ($($name:ident $op:ident $doc:literal),*) => {
        impl<T: Scalar> Array<T> {$(
            #[doc = $doc]
            #[track_caller]
            pub fn $name(&self, rhs: impl IntoArray<T>) -> Bool {
                ok(Array::compare(Op::$op, self, &rhs.into_array()))
            }
        )*}
    };
}
comparisons!(
    lt Lt "Lanewise `self < rhs` (false where either is NaN).\n\n```\nlet m = kiln::Int32::arange(3).lt(1);\nassert_eq!(m.to_vec(), vec![true, false, false]);\n```",
    le Le "Lanewise `self <= rhs`.\n\n```\nassert_eq!(kiln::Int32::arange(3).le(1).to_vec(), vec![true, true, false]);\n```",
    gt Gt "Lanewise `self > rhs`.\n\n```\nassert_eq!(kiln::Int32::arange(3).gt(1).to_vec(), vec![false, false, true]);\n```",
    ge Ge "Lanewise `self >= rhs`.\n\n```\nassert_eq!(kiln::Int32::arange(3).ge(1).to_vec(), vec![false, true, true]);\n```",
    eq Eq "Lanewise `self == rhs`.\n\n```\nassert_eq!(kiln::Int32::arange(3).eq(1).to_vec(), vec![false, true, false]);\n```",
    ne Ne "Lanewise `self != rhs` (true where either is NaN).\n\n```\nassert_eq!(kiln::Int32::arange(3).ne(1).to_vec(), vec![true, false, true]);\n```"
);

/// `mask ? a : b` lane by lane.
///
/// ```
/// use kiln::prelude::*;
/// let x = Int32::arange(4);
/// let y = select(&x.lt(2), &x, &(&x * 10));
/// assert_eq!(y.to_vec(), vec![0, 1, 20, 30]);
/// ```
#[track_caller]
pub fn select<T: Scalar>(mask: &Bool, a: impl IntoArray<T>, b: impl IntoArray<T>) -> Array<T> {
    let (a, b) = (a.into_array(), b.into_array());
    let out = Array::from_id(ok(kiln_core::op(Op::Select, &[mask.id(), a.id(), b.id()])));
    crate::ad::rules::record_select(mask, &a, &b, out)
}

/// Free-function forms of the elementwise methods, for code that reads like math.
impl<T: Numeric> Array<T> {
    /// Smaller of the two, lanewise (floats: NaN if either is NaN, −0 < +0).
    ///
    /// ```
    /// assert_eq!(kiln::Int32::arange(3).min(1).to_vec(), vec![0, 1, 1]);
    /// ```
    #[track_caller]
    pub fn min(&self, rhs: impl IntoArray<T>) -> Array<T> {
        ok(Array::apply(Op::Min, &[self, &rhs.into_array()]))
    }
    /// Larger of the two, lanewise (floats: NaN if either is NaN, −0 < +0).
    ///
    /// ```
    /// assert_eq!(kiln::Int32::arange(3).max(1).to_vec(), vec![1, 1, 2]);
    /// ```
    #[track_caller]
    pub fn max(&self, rhs: impl IntoArray<T>) -> Array<T> {
        ok(Array::apply(Op::Max, &[self, &rhs.into_array()]))
    }
    /// `self * b + c`; fused (one rounding) for floats, wrapping for integers.
    ///
    /// ```
    /// assert_eq!(kiln::Float32::from(2.0f32).fma(3.0, 1.0).item(), 7.0);
    /// ```
    #[track_caller]
    pub fn fma(&self, b: impl IntoArray<T>, c: impl IntoArray<T>) -> Array<T> {
        ok(Array::apply(
            Op::Fma,
            &[self, &b.into_array(), &c.into_array()],
        ))
    }
}

impl<T: Signed> Array<T> {
    /// Absolute value (wrapping for integers: `abs(MIN) == MIN`).
    ///
    /// ```
    /// assert_eq!(kiln::Int32::from_slice(&[-3, 4]).abs().to_vec(), vec![3, 4]);
    /// ```
    pub fn abs(&self) -> Array<T> {
        ok(Array::apply(Op::Abs, &[self]))
    }
}

macro_rules! float_unary {
    ($($name:ident $op:ident $doc:literal),*) => {
        impl<T: Float> Array<T> {$(
            #[doc = $doc]
            pub fn $name(&self) -> Array<T> {
                ok(Array::apply(Op::$op, &[self]))
            }
        )*}
    };
}
float_unary!(
    sqrt Sqrt "IEEE square root (negative → NaN).\n\n```\nassert_eq!(kiln::Float32::from(9.0f32).sqrt().item(), 3.0);\n```",
    floor Floor "Round toward −∞.\n\n```\nassert_eq!(kiln::Float32::from(-1.5f32).floor().item(), -2.0);\n```",
    ceil Ceil "Round toward +∞.\n\n```\nassert_eq!(kiln::Float32::from(-1.5f32).ceil().item(), -1.0);\n```",
    round Round "Round to nearest, ties to even (like NumPy).\n\n```\nassert_eq!(kiln::Float32::from_slice(&[0.5, 1.5, 2.5]).round().to_vec(), vec![0.0, 2.0, 2.0]);\n```",
    trunc Trunc "Round toward zero.\n\n```\nassert_eq!(kiln::Float32::from(-1.7f32).trunc().item(), -1.0);\n```"
);

impl<T: Float> Array<T> {
    /// `1 / self`.
    ///
    /// ```
    /// assert_eq!(kiln::Float32::from(4.0f32).rcp().item(), 0.25);
    /// ```
    pub fn rcp(&self) -> Array<T> {
        &Array::scalar(T::one()) / self
    }
    /// `1 / sqrt(self)`.
    ///
    /// ```
    /// assert_eq!(kiln::Float32::from(4.0f32).rsqrt().item(), 0.5);
    /// ```
    pub fn rsqrt(&self) -> Array<T> {
        &Array::scalar(T::one()) / &self.sqrt()
    }
    /// Magnitude of `self` with the sign of `sign`.
    ///
    /// ```
    /// assert_eq!(kiln::Float32::from(2.0f32).copysign(-1.0).item(), -2.0);
    /// ```
    pub fn copysign(&self, sign: impl IntoArray<T>) -> Array<T> {
        let negative = sign
            .into_array()
            .bitcast::<T::Int>()
            .lt(<T::Int as Numeric>::zero());
        let mag = self.abs();
        select(&negative, -&mag, mag)
    }
}
