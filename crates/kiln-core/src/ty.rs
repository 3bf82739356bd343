//! Element types of variables (`VarType`) and the small predicates every layer asks of them.
//!
//! kiln-core is untyped at the API level: a variable carries a `VarType` tag and its values travel as
//! raw bits (`u64`, low bits used). This module owns that tag, its width in memory, and the helpers to
//! move between a typed Rust value and its bit pattern. It never computes on values; `op` does.

use std::fmt;

/// The element type of a variable.
///
/// ```
/// use kiln_core::VarType;
/// assert_eq!(VarType::F32.size_bytes(), 4);
/// assert!(VarType::I64.is_signed());
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u8)]
pub enum VarType {
    /// A mask; one byte in memory (0 or 1).
    Bool,
    I32,
    U32,
    I64,
    U64,
    F32,
    F64,
}

impl VarType {
    /// The position in [`VarType::ALL`].
    pub fn index(self) -> u8 {
        self as u8
    }
    /// Every type, in declaration order (used by property tests and tables).
    pub const ALL: [VarType; 7] = [
        VarType::Bool,
        VarType::I32,
        VarType::U32,
        VarType::I64,
        VarType::U64,
        VarType::F32,
        VarType::F64,
    ];

    /// Bytes one element occupies in a buffer.
    pub const fn size_bytes(self) -> usize {
        match self {
            VarType::Bool => 1,
            VarType::I32 | VarType::U32 | VarType::F32 => 4,
            VarType::I64 | VarType::U64 | VarType::F64 => 8,
        }
    }
    /// Width in bits of the value (Bool counts as 1).
    pub const fn bits(self) -> u32 {
        match self {
            VarType::Bool => 1,
            _ => 8 * self.size_bytes() as u32,
        }
    }
    pub const fn is_float(self) -> bool {
        matches!(self, VarType::F32 | VarType::F64)
    }
    pub const fn is_int(self) -> bool {
        matches!(
            self,
            VarType::I32 | VarType::U32 | VarType::I64 | VarType::U64
        )
    }
    pub const fn is_signed(self) -> bool {
        matches!(self, VarType::I32 | VarType::I64)
    }
    pub const fn is_bool(self) -> bool {
        matches!(self, VarType::Bool)
    }
    /// Short name used in the kernel IR text, logs and `whos()`.
    pub const fn name(self) -> &'static str {
        match self {
            VarType::Bool => "bool",
            VarType::I32 => "i32",
            VarType::U32 => "u32",
            VarType::I64 => "i64",
            VarType::U64 => "u64",
            VarType::F32 => "f32",
            VarType::F64 => "f64",
        }
    }
    /// Mask keeping the meaningful low bits of a bit pattern of this type.
    pub const fn bit_mask(self) -> u64 {
        match self {
            VarType::Bool => 1,
            VarType::I32 | VarType::U32 | VarType::F32 => 0xffff_ffff,
            _ => u64::MAX,
        }
    }
}

impl fmt::Display for VarType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A Rust scalar type that kiln can store: its `VarType` and its bit pattern.
///
/// ```
/// use kiln_core::{Scalar, VarType};
/// assert_eq!(<f32 as Scalar>::TYPE, VarType::F32);
/// assert_eq!(f32::from_bits64(1.5f32.to_bits64()), 1.5);
/// ```
pub trait Scalar:
    Copy + Send + Sync + PartialEq + fmt::Debug + fmt::Display + Default + 'static
{
    const TYPE: VarType;
    /// The value's bits, zero-extended into a `u64`.
    fn to_bits64(self) -> u64;
    /// The value from the low bits of `bits`.
    fn from_bits64(bits: u64) -> Self;
}

macro_rules! scalar_int {
    ($t:ty, $vt:ident, $u:ty) => {
        impl Scalar for $t {
            const TYPE: VarType = VarType::$vt;
            #[inline]
            fn to_bits64(self) -> u64 {
                self as $u as u64
            }
            #[inline]
            fn from_bits64(bits: u64) -> Self {
                bits as $u as $t
            }
        }
    };
}
scalar_int!(i32, I32, u32);
scalar_int!(u32, U32, u32);
scalar_int!(i64, I64, u64);
scalar_int!(u64, U64, u64);

impl Scalar for bool {
    const TYPE: VarType = VarType::Bool;
    #[inline]
    fn to_bits64(self) -> u64 {
        self as u64
    }
    #[inline]
    fn from_bits64(bits: u64) -> Self {
        bits & 1 != 0
    }
}
impl Scalar for f32 {
    const TYPE: VarType = VarType::F32;
    #[inline]
    fn to_bits64(self) -> u64 {
        self.to_bits() as u64
    }
    #[inline]
    fn from_bits64(bits: u64) -> Self {
        f32::from_bits(bits as u32)
    }
}
impl Scalar for f64 {
    const TYPE: VarType = VarType::F64;
    #[inline]
    fn to_bits64(self) -> u64 {
        self.to_bits()
    }
    #[inline]
    fn from_bits64(bits: u64) -> Self {
        f64::from_bits(bits)
    }
}
