//! One array of any element type (`Dyn`), as Python sees it: kiln's typed `Array<T>` behind a tag,
//! the promotion rule Dr.Jit uses (the wider of the two types, floats above integers), and the
//! dispatch macros the other modules use to run a typed kiln function on whichever type is there.

use kiln::{Array, Bool, Float32, Float64, Int32, Int64, UInt32, UInt64};

/// Element types in promotion order: the result of mixing two is the later one.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Debug, Hash)]
pub enum Ty {
    Bool,
    I32,
    U32,
    I64,
    U64,
    F32,
    F64,
}

impl Ty {
    /// The Python class name (Dr.Jit's).
    pub fn class_name(self) -> &'static str {
        match self {
            Ty::Bool => "Bool",
            Ty::I32 => "Int32",
            Ty::U32 => "UInt32",
            Ty::I64 => "Int64",
            Ty::U64 => "UInt64",
            Ty::F32 => "Float32",
            Ty::F64 => "Float64",
        }
    }
    /// NumPy's type string (`__array_interface__`'s `typestr`, little-endian).
    pub fn typestr(self) -> &'static str {
        match self {
            Ty::Bool => "|b1",
            Ty::I32 => "<i4",
            Ty::U32 => "<u4",
            Ty::I64 => "<i8",
            Ty::U64 => "<u8",
            Ty::F32 => "<f4",
            Ty::F64 => "<f8",
        }
    }
    /// The type a NumPy dtype string (`dtype.str`) names, if kiln has it.
    pub fn from_typestr(s: &str) -> Option<Ty> {
        Some(match s {
            "|b1" => Ty::Bool,
            "<i4" => Ty::I32,
            "<u4" => Ty::U32,
            "<i8" => Ty::I64,
            "<u8" => Ty::U64,
            "<f4" => Ty::F32,
            "<f8" => Ty::F64,
            _ => return None,
        })
    }
    pub fn is_float(self) -> bool {
        matches!(self, Ty::F32 | Ty::F64)
    }
    pub fn is_int(self) -> bool {
        matches!(self, Ty::I32 | Ty::U32 | Ty::I64 | Ty::U64)
    }
    pub fn is_signed(self) -> bool {
        matches!(self, Ty::I32 | Ty::I64 | Ty::F32 | Ty::F64)
    }
    pub fn bytes(self) -> usize {
        match self {
            Ty::Bool => 1,
            Ty::I32 | Ty::U32 | Ty::F32 => 4,
            Ty::I64 | Ty::U64 | Ty::F64 => 8,
        }
    }
}

/// A kiln array of one of the seven element types.
#[derive(Clone)]
pub enum Dyn {
    Bool(Bool),
    I32(Int32),
    U32(UInt32),
    I64(Int64),
    U64(UInt64),
    F32(Float32),
    F64(Float64),
}

/// Run `$body` with `$a` bound to the typed array, whatever its type.
#[macro_export]
macro_rules! each {
    ($d:expr, $a:ident => $body:expr) => {
        match $d {
            $crate::dynarray::Dyn::Bool($a) => $body,
            $crate::dynarray::Dyn::I32($a) => $body,
            $crate::dynarray::Dyn::U32($a) => $body,
            $crate::dynarray::Dyn::I64($a) => $body,
            $crate::dynarray::Dyn::U64($a) => $body,
            $crate::dynarray::Dyn::F32($a) => $body,
            $crate::dynarray::Dyn::F64($a) => $body,
        }
    };
}

/// As [`each!`] for the numeric types; a `Bool` gives `$other`.
#[macro_export]
macro_rules! numeric {
    ($d:expr, $a:ident => $body:expr, bool => $other:expr) => {
        match $d {
            $crate::dynarray::Dyn::Bool(_) => $other,
            $crate::dynarray::Dyn::I32($a) => $body,
            $crate::dynarray::Dyn::U32($a) => $body,
            $crate::dynarray::Dyn::I64($a) => $body,
            $crate::dynarray::Dyn::U64($a) => $body,
            $crate::dynarray::Dyn::F32($a) => $body,
            $crate::dynarray::Dyn::F64($a) => $body,
        }
    };
}

/// As [`each!`] for the float types; anything else gives `$other`.
#[macro_export]
macro_rules! float {
    ($d:expr, $a:ident => $body:expr, else $other:expr) => {
        match $d {
            $crate::dynarray::Dyn::F32($a) => $body,
            $crate::dynarray::Dyn::F64($a) => $body,
            _ => $other,
        }
    };
}

/// As [`each!`] for the integer and mask types (bitwise ops); floats give `$other`.
#[macro_export]
macro_rules! bitwise {
    ($d:expr, $a:ident => $body:expr, else $other:expr) => {
        match $d {
            $crate::dynarray::Dyn::Bool($a) => $body,
            $crate::dynarray::Dyn::I32($a) => $body,
            $crate::dynarray::Dyn::U32($a) => $body,
            $crate::dynarray::Dyn::I64($a) => $body,
            $crate::dynarray::Dyn::U64($a) => $body,
            _ => $other,
        }
    };
}

/// As [`each!`] for the integer types (indices, shifts); anything else gives `$other`.
#[macro_export]
macro_rules! integer {
    ($d:expr, $a:ident => $body:expr, else $other:expr) => {
        match $d {
            $crate::dynarray::Dyn::I32($a) => $body,
            $crate::dynarray::Dyn::U32($a) => $body,
            $crate::dynarray::Dyn::I64($a) => $body,
            $crate::dynarray::Dyn::U64($a) => $body,
            _ => $other,
        }
    };
}

/// Typed arrays that become a [`Dyn`].
pub trait IntoDyn {
    fn into_dyn(self) -> Dyn;
}
macro_rules! into_dyn {
    ($($t:ty => $v:ident),*) => {$(
        impl IntoDyn for Array<$t> {
            fn into_dyn(self) -> Dyn {
                Dyn::$v(self)
            }
        }
    )*};
}
into_dyn!(bool => Bool, i32 => I32, u32 => U32, i64 => I64, u64 => U64, f32 => F32, f64 => F64);

impl Dyn {
    pub fn ty(&self) -> Ty {
        match self {
            Dyn::Bool(_) => Ty::Bool,
            Dyn::I32(_) => Ty::I32,
            Dyn::U32(_) => Ty::U32,
            Dyn::I64(_) => Ty::I64,
            Dyn::U64(_) => Ty::U64,
            Dyn::F32(_) => Ty::F32,
            Dyn::F64(_) => Ty::F64,
        }
    }
    pub fn len(&self) -> usize {
        each!(self, a => a.len())
    }
    /// This array converted to `ty` (kiln's cast: floats to integers saturate, NaN gives 0;
    /// anything to `Bool` is `!= 0`).
    pub fn cast(&self, ty: Ty) -> Dyn {
        if ty == self.ty() {
            return self.clone();
        }
        if ty == Ty::Bool {
            return Dyn::Bool(match self {
                Dyn::Bool(a) => a.clone(),
                Dyn::I32(a) => a.ne(0i32),
                Dyn::U32(a) => a.ne(0u32),
                Dyn::I64(a) => a.ne(0i64),
                Dyn::U64(a) => a.ne(0u64),
                Dyn::F32(a) => a.ne(0f32),
                Dyn::F64(a) => a.ne(0f64),
            });
        }
        each!(self, a => match ty {
            Ty::Bool => unreachable!(),
            Ty::I32 => Dyn::I32(a.cast()),
            Ty::U32 => Dyn::U32(a.cast()),
            Ty::I64 => Dyn::I64(a.cast()),
            Ty::U64 => Dyn::U64(a.cast()),
            Ty::F32 => Dyn::F32(a.cast()),
            Ty::F64 => Dyn::F64(a.cast()),
        })
    }
}
