//! Element-type traits of the front end: which Rust scalars are numbers, integers, floats.

use kiln_core::Scalar;

/// Numeric element types (everything but `bool`).
pub trait Numeric: Scalar + PartialOrd {
    fn zero() -> Self;
    fn one() -> Self;
    fn from_f64(v: f64) -> Self;
    fn to_f64(self) -> f64;
}
/// Integer element types.
pub trait Integer: Numeric {}
/// Signed element types (integers and floats): negation is defined.
pub trait Signed: Numeric {}
/// Floating-point element types.
pub trait Float: Numeric + Signed {
    /// Bit-pattern integer type of the same width.
    type Bits: Integer;
    /// Signed integer type of the same width.
    type Int: Integer + Signed;
    const MANTISSA_BITS: u32;
    const EPSILON: f64;
}

macro_rules! numeric {
    ($($t:ty),*) => {$(
        impl Numeric for $t {
            fn zero() -> Self { 0 as $t }
            fn one() -> Self { 1 as $t }
            fn from_f64(v: f64) -> Self { v as $t }
            fn to_f64(self) -> f64 { self as f64 }
        }
    )*};
}
numeric!(i32, u32, i64, u64, f32, f64);
impl Integer for i32 {}
impl Integer for u32 {}
impl Integer for i64 {}
impl Integer for u64 {}
impl Signed for i32 {}
impl Signed for i64 {}
impl Signed for f32 {}
impl Signed for f64 {}
impl Float for f32 {
    type Bits = u32;
    type Int = i32;
    const MANTISSA_BITS: u32 = 23;
    const EPSILON: f64 = f32::EPSILON as f64;
}
impl Float for f64 {
    type Bits = u64;
    type Int = i64;
    const MANTISSA_BITS: u32 = 52;
    const EPSILON: f64 = f64::EPSILON;
}
