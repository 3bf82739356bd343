//! Arithmetic, logic and comparisons on [`Dyn`] arrays: operands promoted to the wider type, then
//! kiln's typed operator (which records derivatives). Where Python and Dr.Jit differ, Dr.Jit's
//! rule is kept and said here: `//` and `%` on integers truncate toward zero (C's rule), `/` on
//! integers divides in floating point (`Float32` for 32-bit integers, `Float64` for 64-bit ones).

use crate::dynarray::{Dyn, Ty};
use crate::errors::{guard, type_error};
use kiln::Bool;
use std::borrow::Cow;

/// The binary operations of the array classes and the module's functions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Bin {
    Add,
    Sub,
    Mul,
    TrueDiv,
    FloorDiv,
    Mod,
    And,
    Or,
    Xor,
    Shl,
    Shr,
    Pow,
    Min,
    Max,
    Atan2,
    Copysign,
}

impl Bin {
    pub fn symbol(self) -> &'static str {
        match self {
            Bin::Add => "+",
            Bin::Sub => "-",
            Bin::Mul => "*",
            Bin::TrueDiv => "/",
            Bin::FloorDiv => "//",
            Bin::Mod => "%",
            Bin::And => "&",
            Bin::Or => "|",
            Bin::Xor => "^",
            Bin::Shl => "<<",
            Bin::Shr => ">>",
            Bin::Pow => "**",
            Bin::Min => "minimum",
            Bin::Max => "maximum",
            Bin::Atan2 => "atan2",
            Bin::Copysign => "copysign",
        }
    }
}

/// The comparisons (`==` and `!=` compare lane by lane, as in Dr.Jit and NumPy).
#[derive(Clone, Copy, Debug)]
pub enum Cmp {
    Lt,
    Le,
    Gt,
    Ge,
    Eq,
    Ne,
}

/// Both operands in the wider of their two types; an operand already of that type is borrowed,
/// not cloned (a clone is a reference count on the shared registry, per operator).
pub fn promote<'a>(a: &'a Dyn, b: &'a Dyn) -> (Cow<'a, Dyn>, Cow<'a, Dyn>) {
    let t = a.ty().max(b.ty());
    let up = |d: &'a Dyn| {
        if d.ty() == t {
            Cow::Borrowed(d)
        } else {
            Cow::Owned(d.cast(t))
        }
    };
    (up(a), up(b))
}

/// Run `$body` with `$x`, `$y` bound to two arrays of one type (after [`promote`]), for the
/// listed element types; the result is wrapped back into that type.
macro_rules! on_pair {
    ($a:expr, $b:expr, [$($v:ident),*], $x:ident, $y:ident => $body:expr) => {
        match ($a, $b) {
            $((Dyn::$v($x), Dyn::$v($y)) => Dyn::$v($body),)*
            _ => unreachable!("operands are promoted to one type, and the type is checked first"),
        }
    };
}

/// `a op b`.
pub fn binary(op: Bin, a: &Dyn, b: &Dyn) -> pyo3::PyResult<Dyn> {
    let (a, b) = promote(a, b);
    let (a, b): (&Dyn, &Dyn) = (&a, &b);
    let ty = a.ty();
    let refuse = |what: &str| {
        Err(type_error(format!(
            "`{}` is not defined for {} arrays: {what}",
            op.symbol(),
            ty.class_name()
        )))
    };
    match op {
        Bin::TrueDiv if !ty.is_float() => {
            let f = if matches!(ty, Ty::I64 | Ty::U64) {
                Ty::F64
            } else {
                Ty::F32
            };
            return binary(op, &a.cast(f), &b.cast(f));
        }
        Bin::Pow if ty.is_int() => return int_pow(a, b),
        Bin::Pow | Bin::Atan2 | Bin::Copysign if !ty.is_float() => {
            if ty == Ty::Bool {
                return refuse("cast to a number type first");
            }
            let r = binary(op, &a.cast(Ty::F64), &b.cast(Ty::F64))?;
            return Ok(r.cast(ty));
        }
        _ => {}
    }
    if ty == Ty::Bool
        && matches!(
            op,
            Bin::Add | Bin::Sub | Bin::Mul | Bin::FloorDiv | Bin::Mod | Bin::Shl | Bin::Shr
        )
    {
        return refuse("masks combine with `&`, `|`, `^` and `~`; cast to a number type (`Int32(mask)`) to count");
    }
    if ty.is_float() && matches!(op, Bin::And | Bin::Or | Bin::Xor | Bin::Shl | Bin::Shr) {
        return refuse("bitwise operations take integers or masks");
    }
    guard(|| match op {
        Bin::Add => on_pair!(a, b, [I32, U32, I64, U64, F32, F64], x, y => x + y),
        Bin::Sub => on_pair!(a, b, [I32, U32, I64, U64, F32, F64], x, y => x - y),
        Bin::Mul => on_pair!(a, b, [I32, U32, I64, U64, F32, F64], x, y => x * y),
        Bin::Mod => on_pair!(a, b, [I32, U32, I64, U64, F32, F64], x, y => x % y),
        Bin::TrueDiv => on_pair!(a, b, [F32, F64], x, y => x / y),
        Bin::FloorDiv if ty.is_float() => on_pair!(a, b, [F32, F64], x, y => (x / y).floor()),
        Bin::FloorDiv => on_pair!(a, b, [I32, U32, I64, U64], x, y => x / y),
        Bin::And => on_pair!(a, b, [Bool, I32, U32, I64, U64], x, y => x & y),
        Bin::Or => on_pair!(a, b, [Bool, I32, U32, I64, U64], x, y => x | y),
        Bin::Xor => on_pair!(a, b, [Bool, I32, U32, I64, U64], x, y => x ^ y),
        Bin::Shl => on_pair!(a, b, [I32, U32, I64, U64], x, y => x << y),
        Bin::Shr => on_pair!(a, b, [I32, U32, I64, U64], x, y => x >> y),
        Bin::Pow => on_pair!(a, b, [F32, F64], x, y => x.pow(y)),
        Bin::Atan2 => on_pair!(a, b, [F32, F64], x, y => x.atan2(y)),
        Bin::Copysign => on_pair!(a, b, [F32, F64], x, y => x.copysign(y)),
        Bin::Min if ty == Ty::Bool => on_pair!(a, b, [Bool], x, y => x & y),
        Bin::Max if ty == Ty::Bool => on_pair!(a, b, [Bool], x, y => x | y),
        Bin::Min => on_pair!(a, b, [I32, U32, I64, U64, F32, F64], x, y => x.min(y)),
        Bin::Max => on_pair!(a, b, [I32, U32, I64, U64, F32, F64], x, y => x.max(y)),
    })
}

/// `a cmp b`, a mask.
pub fn compare(cmp: Cmp, a: &Dyn, b: &Dyn) -> pyo3::PyResult<Bool> {
    let (a, b) = promote(a, b);
    let (a, b): (&Dyn, &Dyn) = (&a, &b);
    macro_rules! cmp {
        ($($v:ident),*) => {
            match (a, b) {
                $((Dyn::$v(x), Dyn::$v(y)) => match cmp {
                    Cmp::Lt => x.lt(y),
                    Cmp::Le => x.le(y),
                    Cmp::Gt => x.gt(y),
                    Cmp::Ge => x.ge(y),
                    Cmp::Eq => x.eq(y),
                    Cmp::Ne => x.ne(y),
                },)*
                _ => unreachable!("operands are promoted to one type first"),
            }
        };
    }
    guard(|| cmp!(Bool, I32, U32, I64, U64, F32, F64))
}

/// `a ** b` for integers, exact and wrapping like `*` (NumPy's): square-and-multiply over every
/// bit of the exponent. A negative exponent gives `1 / a**|b|` truncated: 1 for `a = 1`, ±1 for
/// `a = -1`, 0 otherwise (NumPy refuses it).
fn int_pow(a: &Dyn, b: &Dyn) -> pyo3::PyResult<Dyn> {
    let ty = a.ty();
    let lit = |v: f64| crate::convert::lit_f64(v, ty);
    let bits = if matches!(ty, Ty::I64 | Ty::U64) {
        64
    } else {
        32
    };
    let negative = if ty.is_signed() {
        Some(compare(Cmp::Lt, b, &lit(0.0))?)
    } else {
        None
    };
    // the magnitude's bits (a negative exponent is handled after the loop)
    let mut e = match &negative {
        Some(n) => crate::funcs::select_dyn(n, &lit(0.0), b)?,
        None => b.clone(),
    };
    let mut result = lit(1.0);
    let mut base = a.clone();
    for i in 0..bits {
        let bit = compare(Cmp::Ne, &binary(Bin::And, &e, &lit(1.0))?, &lit(0.0))?;
        result = crate::funcs::select_dyn(&bit, &binary(Bin::Mul, &result, &base)?, &result)?;
        if i + 1 < bits {
            base = binary(Bin::Mul, &base, &base)?;
            e = binary(Bin::Shr, &e, &lit(1.0))?;
        }
    }
    let Some(neg) = negative else {
        return Ok(result);
    };
    let one = compare(Cmp::Eq, a, &lit(1.0))?;
    let minus_one = compare(Cmp::Eq, a, &lit(-1.0))?;
    let odd = compare(Cmp::Ne, &binary(Bin::And, b, &lit(1.0))?, &lit(0.0))?;
    let parity = crate::funcs::select_dyn(&odd, &lit(-1.0), &lit(1.0))?;
    let reciprocal = crate::funcs::select_dyn(
        &one,
        &lit(1.0),
        &crate::funcs::select_dyn(&minus_one, &parity, &lit(0.0))?,
    )?;
    crate::funcs::select_dyn(&neg, &reciprocal, &result)
}
