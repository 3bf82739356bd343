//! The module's functions, named and called as in Dr.Jit: the math library (`kiln.sqrt(x)`),
//! constructors that take the array class first (`kiln.arange(kiln.Float32, 10)`), reductions,
//! `gather`/`scatter`/`scatter_reduce`, `select`, `eval`, `whos`, `set_label`.

use crate::array::{class_of, ty_of_class, wrap, ArrayBase};
use crate::convert::{lit_f64, operand_dyn, to_dyn};
use crate::dynarray::{Dyn, IntoDyn, Ty};
use crate::errors::{guard, try_guard, type_error, value_error};
use crate::ops::{binary, promote, Bin};
use crate::tensorfn::{self, Red};
use kiln::{Array, Bool, ReduceOp};
use pyo3::prelude::*;
use pyo3::types::PyTuple;

/// The unary functions.
#[derive(Clone, Copy, Debug)]
pub enum Un {
    Abs,
    Sqrt,
    Exp,
    Exp2,
    Log,
    Log2,
    Sin,
    Cos,
    Tan,
    Asin,
    Acos,
    Atan,
    Sinh,
    Cosh,
    Tanh,
    Erf,
    Floor,
    Ceil,
    Round,
    Trunc,
    Rcp,
    Rsqrt,
    Square,
    Sign,
}

/// `f(a)`: float functions on floats (an integer array is converted to `Float32` first, a 64-bit
/// one to `Float64`); `abs`, `square`, rounding and `sign` keep integer types.
pub fn unary(py: Python<'_>, f: Un, a: &Dyn) -> PyResult<Py<PyAny>> {
    let ty = a.ty();
    if ty == Ty::Bool {
        return Err(type_error(
            format!("{f:?} takes numbers, not masks: cast with Int32(mask) or Float32(mask)")
                .to_lowercase(),
        ));
    }
    if let Un::Sign = f {
        // -1, 0 or 1; a NaN (and ±0) stays what it was
        let zero = lit_f64(0.0, ty);
        let pos = crate::ops::compare(crate::ops::Cmp::Gt, a, &zero)?;
        let neg = crate::ops::compare(crate::ops::Cmp::Lt, a, &zero)?;
        let inner = select_dyn(&neg, &lit_f64(-1.0, ty), a)?;
        return wrap(py, select_dyn(&pos, &lit_f64(1.0, ty), &inner)?);
    }
    let keeps_int = matches!(
        f,
        Un::Abs | Un::Square | Un::Floor | Un::Ceil | Un::Round | Un::Trunc | Un::Sign
    );
    if ty.is_int() {
        if keeps_int {
            let r = match f {
                Un::Floor | Un::Ceil | Un::Round | Un::Trunc => a.clone(),
                Un::Square => binary(Bin::Mul, a, a)?,
                Un::Abs => match a {
                    Dyn::I32(x) => guard(|| Dyn::I32(x.abs()))?,
                    Dyn::I64(x) => guard(|| Dyn::I64(x.abs()))?,
                    _ => a.clone(),
                },
                _ => unreachable!("sign is handled above"),
            };
            return wrap(py, r);
        }
        let f_ty = if matches!(ty, Ty::I64 | Ty::U64) {
            Ty::F64
        } else {
            Ty::F32
        };
        return unary(py, f, &a.cast(f_ty));
    }
    macro_rules! apply {
        ($x:expr) => {{
            let x = $x;
            guard(|| match f {
                Un::Abs => x.abs(),
                Un::Sqrt => x.sqrt(),
                Un::Exp => x.exp(),
                Un::Exp2 => x.exp2(),
                Un::Log => x.log(),
                Un::Log2 => x.log2(),
                Un::Sin => x.sin(),
                Un::Cos => x.cos(),
                Un::Tan => x.tan(),
                Un::Asin => x.asin(),
                Un::Acos => x.acos(),
                Un::Atan => x.atan(),
                Un::Sinh => x.sinh(),
                Un::Cosh => x.cosh(),
                Un::Tanh => x.tanh(),
                Un::Erf => x.erf(),
                Un::Floor => x.floor(),
                Un::Ceil => x.ceil(),
                Un::Round => x.round(),
                Un::Trunc => x.trunc(),
                Un::Rcp => x.rcp(),
                Un::Rsqrt => x.rsqrt(),
                Un::Square => x * x,
                Un::Sign => unreachable!("sign is handled above"),
            })?
            .into_dyn()
        }};
    }
    let r = match a {
        Dyn::F32(x) => apply!(x),
        Dyn::F64(x) => apply!(x),
        _ => unreachable!("integers and masks are handled above"),
    };
    wrap(py, r)
}

/// A Python-facing unary function: an array gives an array; a Python number gives a Python float
/// (computed by kiln in `Float64`).
fn unary_py(x: &Bound<PyAny>, f: Un) -> PyResult<Py<PyAny>> {
    let py = x.py();
    if let Ok(a) = x.cast::<ArrayBase>() {
        return unary(py, f, &a.borrow().a);
    }
    if let Ok(t) = x.cast::<crate::tensor::TensorBase>() {
        // a tensor: the function of its flat values, in its shape
        let (flat, shape) = {
            let t = t.borrow();
            (t.a.clone(), t.shape.clone())
        };
        let r = unary(py, f, &flat)?;
        let d = r.bind(py).cast::<ArrayBase>()?.borrow().a.clone();
        return crate::tensor::wrap_tensor(py, d, shape);
    }
    let v: f64 = x
        .extract()
        .map_err(|_| type_error(format!("{f:?} takes a kiln array or a number").to_lowercase()))?;
    let r = unary(py, f, &Dyn::F64(Array::scalar(v)))?;
    crate::array::item(py, &r.bind(py).cast::<ArrayBase>()?.borrow().a, 0)
}

macro_rules! py_unary {
    ($($name:ident $f:ident $doc:literal),*) => {
        $(
            #[doc = $doc]
            #[pyfunction]
            fn $name(x: &Bound<PyAny>) -> PyResult<Py<PyAny>> {
                unary_py(x, Un::$f)
            }
        )*
        fn register_unary(m: &Bound<PyModule>) -> PyResult<()> {
            $(m.add_function(wrap_pyfunction!($name, m)?)?;)*
            Ok(())
        }
    };
}

py_unary!(
    abs Abs "Absolute value.",
    sqrt Sqrt "Square root (negative gives NaN).",
    exp Exp "e to the power x.",
    exp2 Exp2 "2 to the power x.",
    log Log "Natural logarithm.",
    log2 Log2 "Base-2 logarithm.",
    sin Sin "Sine.",
    cos Cos "Cosine.",
    tan Tan "Tangent.",
    asin Asin "Arc sine.",
    acos Acos "Arc cosine.",
    atan Atan "Arc tangent.",
    sinh Sinh "Hyperbolic sine.",
    cosh Cosh "Hyperbolic cosine.",
    tanh Tanh "Hyperbolic tangent.",
    erf Erf "Error function.",
    floor Floor "Round toward minus infinity.",
    ceil Ceil "Round toward plus infinity.",
    round Round "Round to nearest, ties to even (like NumPy; Dr.Jit's `round` too).",
    trunc Trunc "Round toward zero.",
    rcp Rcp "Reciprocal 1/x.",
    rsqrt Rsqrt "Reciprocal square root 1/sqrt(x).",
    square Square "x * x.",
    sign Sign "-1, 0 or 1 (NaN stays NaN for floats)."
);

fn bin_py(a: &Bound<PyAny>, b: &Bound<PyAny>, op: Bin) -> PyResult<Py<PyAny>> {
    let py = a.py();
    if let Some(t) = crate::tensor::tensor_binary(a, b, op)? {
        return Ok(t);
    }
    let (x, y) = operands(a, b)?;
    wrap(py, binary(op, &x, &y)?)
}

/// Two operands: arrays as they are, Python numbers in the other operand's type.
fn operands(a: &Bound<PyAny>, b: &Bound<PyAny>) -> PyResult<(Dyn, Dyn)> {
    let like = |o: &Bound<PyAny>| o.cast::<ArrayBase>().ok().map(|x| x.borrow().a.ty());
    let x = match like(b) {
        Some(t) => operand_dyn(a, t)?,
        None => to_dyn(a, None)?,
    };
    let y = operand_dyn(b, x.ty())?;
    Ok((x, y))
}

/// Lanewise minimum (`kiln.min(x)` is the reduction).
#[pyfunction]
fn minimum(a: &Bound<PyAny>, b: &Bound<PyAny>) -> PyResult<Py<PyAny>> {
    bin_py(a, b, Bin::Min)
}
/// Lanewise maximum (`kiln.max(x)` is the reduction).
#[pyfunction]
fn maximum(a: &Bound<PyAny>, b: &Bound<PyAny>) -> PyResult<Py<PyAny>> {
    bin_py(a, b, Bin::Max)
}
/// `atan2(y, x)`.
#[pyfunction]
fn atan2(y: &Bound<PyAny>, x: &Bound<PyAny>) -> PyResult<Py<PyAny>> {
    bin_py(y, x, Bin::Atan2)
}
/// `x ** y` (Dr.Jit's `dr.power`).
#[pyfunction]
fn power(x: &Bound<PyAny>, y: &Bound<PyAny>) -> PyResult<Py<PyAny>> {
    bin_py(x, y, Bin::Pow)
}
/// `|x|` with the sign of `y`.
#[pyfunction]
fn copysign(x: &Bound<PyAny>, y: &Bound<PyAny>) -> PyResult<Py<PyAny>> {
    bin_py(x, y, Bin::Copysign)
}
/// `x` limited to `[lo, hi]`.
#[pyfunction]
fn clip(x: &Bound<PyAny>, lo: &Bound<PyAny>, hi: &Bound<PyAny>) -> PyResult<Py<PyAny>> {
    let py = x.py();
    if let Some(t) = tensorfn::nary(&[x, lo, hi], &[], |v| {
        binary(Bin::Min, &binary(Bin::Max, &v[0], &v[1])?, &v[2])
    })? {
        return Ok(t);
    }
    let (a, l) = operands(x, lo)?;
    let h = to_dyn(hi, Some(a.ty()))?;
    wrap(py, binary(Bin::Min, &binary(Bin::Max, &a, &l)?, &h)?)
}
/// `a * b + c` (one rounding on hosts with FMA).
#[pyfunction]
fn fma(a: &Bound<PyAny>, b: &Bound<PyAny>, c: &Bound<PyAny>) -> PyResult<Py<PyAny>> {
    let py = a.py();
    if let Some(t) = tensorfn::nary(&[a, b, c], &[], |v| fma_dyn(&v[0], &v[1], &v[2]))? {
        return Ok(t);
    }
    let (x, y) = operands(a, b)?;
    let z = to_dyn(c, Some(x.ty().max(y.ty())))?;
    wrap(py, fma_dyn(&x, &y, &z)?)
}

fn fma_dyn(x: &Dyn, y: &Dyn, z: &Dyn) -> PyResult<Dyn> {
    let t = x.ty().max(y.ty()).max(z.ty());
    let (x, y, z) = (x.cast(t), y.cast(t), z.cast(t));
    let r = match (&x, &y, &z) {
        (Dyn::F32(x), Dyn::F32(y), Dyn::F32(z)) => guard(|| Dyn::F32(x.fma(y, z)))?,
        (Dyn::F64(x), Dyn::F64(y), Dyn::F64(z)) => guard(|| Dyn::F64(x.fma(y, z)))?,
        _ => binary(Bin::Add, &binary(Bin::Mul, &x, &y)?, &z)?,
    };
    Ok(r)
}

/// `mask ? a : b` for kiln values (a mask cast from numbers is `!= 0`).
pub fn select_dyn(mask: &Bool, a: &Dyn, b: &Dyn) -> PyResult<Dyn> {
    let (a, b) = promote(a, b);
    let (a, b): (&Dyn, &Dyn) = (&a, &b);
    macro_rules! sel {
        ($($v:ident),*) => {
            match (a, b) {
                $((Dyn::$v(x), Dyn::$v(y)) => guard(|| Dyn::$v(kiln::select(mask, x, y))),)*
                _ => unreachable!("operands are promoted to one type first"),
            }
        };
    }
    sel!(Bool, I32, U32, I64, U64, F32, F64)
}

/// `mask ? a : b` lane by lane (Dr.Jit's `dr.select`).
#[pyfunction]
fn select(mask: &Bound<PyAny>, a: &Bound<PyAny>, b: &Bound<PyAny>) -> PyResult<Py<PyAny>> {
    let py = a.py();
    if let Some(t) = tensorfn::nary(&[mask, a, b], &[Some(Ty::Bool)], |v| {
        let Dyn::Bool(m) = v[0].cast(Ty::Bool) else {
            unreachable!("cast to Bool gives a Bool")
        };
        select_dyn(&m, &v[1], &v[2])
    })? {
        return Ok(t);
    }
    let m = mask_of(mask)?;
    let (x, y) = operands(a, b)?;
    wrap(py, select_dyn(&m, &x, &y)?)
}

/// A mask argument: a `Bool` array, a Python bool, or anything that casts (`!= 0`).
fn mask_of(m: &Bound<PyAny>) -> PyResult<Bool> {
    match to_dyn(m, Some(Ty::Bool))?.cast(Ty::Bool) {
        Dyn::Bool(b) => Ok(b),
        _ => unreachable!("cast to Bool gives a Bool"),
    }
}

fn isnan_dyn(a: &Dyn) -> PyResult<Bool> {
    // `x != x`: NaN for floats, never for integers and masks (and as many lanes as `a`, even 0)
    each!(a, x => guard(|| x.ne(x)))
}

/// Lanewise "is NaN" (false for integers).
#[pyfunction]
fn isnan(x: &Bound<PyAny>) -> PyResult<Py<PyAny>> {
    lanewise(x, |a| Ok(Dyn::Bool(isnan_dyn(a)?)))
}

/// `f` of an array, or of a tensor's values in its shape.
pub fn lanewise(x: &Bound<PyAny>, f: impl FnOnce(&Dyn) -> PyResult<Dyn>) -> PyResult<Py<PyAny>> {
    let mut f = Some(f);
    if let Some(t) = tensorfn::nary(&[x], &[], |v| (f.take().expect("called once"))(&v[0]))? {
        return Ok(t);
    }
    let a = to_dyn(x, None)?;
    wrap(x.py(), (f.take().expect("called once"))(&a)?)
}
/// Lanewise "is ±infinity".
#[pyfunction]
fn isinf(x: &Bound<PyAny>) -> PyResult<Py<PyAny>> {
    lanewise(x, |a| {
        Ok(Dyn::Bool(match a {
            Dyn::F32(v) => guard(|| v.abs().eq(f32::INFINITY))?,
            Dyn::F64(v) => guard(|| v.abs().eq(f64::INFINITY))?,
            _ => isnan_dyn(a)?,
        }))
    })
}
/// Lanewise "is neither NaN nor infinite".
#[pyfunction]
fn isfinite(x: &Bound<PyAny>) -> PyResult<Py<PyAny>> {
    lanewise(x, |a| {
        Ok(Dyn::Bool(match a {
            Dyn::F32(v) => guard(|| v.abs().lt(f32::INFINITY))?,
            Dyn::F64(v) => guard(|| v.abs().lt(f64::INFINITY))?,
            _ => each!(a, x => guard(|| x.eq(x)))?,
        }))
    })
}

// ---- constructors ----------------------------------------------------------------------------

/// `n` values `start, start + step, …` of `ty`.
pub fn arange_dyn(ty: Ty, start: i64, step: i64, n: usize) -> PyResult<Dyn> {
    let i = guard(|| kiln::Int64::arange(n) * step + start)?;
    Ok(Dyn::I64(i).cast(ty))
}

/// `arange(dtype, size)` or `arange(dtype, start, stop, step=1)` (Dr.Jit's signature).
#[pyfunction]
#[pyo3(signature = (dtype, start, stop = None, step = None))]
fn arange(
    py: Python<'_>,
    dtype: &Bound<PyAny>,
    start: &Bound<PyAny>,
    stop: Option<&Bound<PyAny>>,
    step: Option<&Bound<PyAny>>,
) -> PyResult<Py<PyAny>> {
    let (ty, tensor) = class_ty(dtype)?;
    let (s, e) = match stop {
        None => (0.0, start.extract::<f64>()?),
        Some(stop) => (start.extract::<f64>()?, stop.extract::<f64>()?),
    };
    let d = step.map(|s| s.extract::<f64>()).transpose()?.unwrap_or(1.0);
    if d == 0.0 {
        return Err(value_error("arange: step must not be 0"));
    }
    let n = ((e - s) / d).ceil().max(0.0) as usize;
    let all_int = [Some(start), stop, step]
        .into_iter()
        .flatten()
        .all(|v| v.extract::<i64>().is_ok());
    let r = if all_int || !ty.is_float() {
        arange_dyn(ty, s as i64, d as i64, n)?
    } else {
        let i = guard(|| kiln::Float64::arange(n) * d + s)?;
        Dyn::F64(i).cast(ty)
    };
    array_or_tensor(py, r, tensor)
}

/// `num` evenly spaced values from `start` to `stop` (inclusive unless `endpoint=False`).
#[pyfunction]
#[pyo3(signature = (dtype, start, stop, num, endpoint = true))]
fn linspace(
    py: Python<'_>,
    dtype: &Bound<PyAny>,
    start: f64,
    stop: f64,
    num: usize,
    endpoint: bool,
) -> PyResult<Py<PyAny>> {
    let (ty, tensor) = class_ty(dtype)?;
    let div = if endpoint {
        num.saturating_sub(1).max(1)
    } else {
        num.max(1)
    } as f64;
    let step = (stop - start) / div;
    let r = match ty {
        Ty::F32 if endpoint => Dyn::F32(guard(|| {
            kiln::Float32::linspace(start as f32, stop as f32, num)
        })?),
        Ty::F64 if endpoint => Dyn::F64(guard(|| kiln::Float64::linspace(start, stop, num))?),
        _ => Dyn::F64(guard(|| kiln::Float64::arange(num) * step + start)?).cast(ty),
    };
    array_or_tensor(py, r, tensor)
}

/// A constructor's class and shape: an array class and a size, or a tensor class (Dr.Jit's
/// `dr.zeros(TensorXf, (2, 3))`) and a shape (an int or a tuple; `(1,)` when none is given).
enum Made {
    Array(Ty, usize),
    Tensor(Ty, Vec<usize>),
}

/// The element type a class names, and whether it is a tensor class.
fn class_ty(dtype: &Bound<PyAny>) -> PyResult<(Ty, bool)> {
    let is_tensor = dtype.cast::<pyo3::types::PyType>().is_ok_and(|t| {
        t.is_subclass_of::<crate::tensor::TensorBase>()
            .unwrap_or(false)
    });
    if !is_tensor {
        return Ok((ty_of_class(dtype)?, false));
    }
    let ty = dtype
        .call0()?
        .cast::<crate::tensor::TensorBase>()?
        .borrow()
        .a
        .ty();
    Ok((ty, true))
}

/// An array, or a 1-D tensor when `tensor`.
fn array_or_tensor(py: Python<'_>, d: Dyn, tensor: bool) -> PyResult<Py<PyAny>> {
    if tensor {
        let n = d.len();
        crate::tensor::wrap_tensor(py, d, vec![n])
    } else {
        wrap(py, d)
    }
}

fn made(dtype: &Bound<PyAny>, shape: Option<&Bound<PyAny>>) -> PyResult<Made> {
    let (ty, is_tensor) = class_ty(dtype)?;
    if !is_tensor {
        return Ok(Made::Array(ty, size_arg(shape)?));
    }
    let dims: Vec<usize> = match shape {
        None => vec![1],
        Some(s) => match s.extract::<usize>() {
            Ok(n) => vec![n],
            Err(_) => s.extract().map_err(|_| {
                value_error(format!(
                    "a tensor's shape is an int or a tuple of non-negative ints, got {}",
                    s.repr().map(|r| r.to_string()).unwrap_or_default()
                ))
            })?,
        },
    };
    Ok(Made::Tensor(ty, dims))
}

/// `fill(ty, n)` as the array or tensor `m` names.
fn make(
    py: Python<'_>,
    m: Made,
    fill: impl FnOnce(Ty, usize) -> PyResult<Dyn>,
) -> PyResult<Py<PyAny>> {
    match m {
        Made::Array(ty, n) => wrap(py, fill(ty, n)?),
        Made::Tensor(ty, dims) => {
            let n = dims
                .iter()
                .try_fold(1usize, |a, &d| a.checked_mul(d))
                .ok_or_else(|| {
                    value_error(format!(
                        "a tensor of shape {dims:?} has more elements than memory can address"
                    ))
                })?;
            crate::tensor::wrap_tensor(py, fill(ty, n)?, dims)
        }
    }
}

fn size_arg(shape: Option<&Bound<PyAny>>) -> PyResult<usize> {
    let Some(s) = shape else { return Ok(1) };
    if let Ok(n) = s.extract::<usize>() {
        return Ok(n);
    }
    if let Ok(t) = s.extract::<Vec<usize>>() {
        if t.len() == 1 {
            return Ok(t[0]);
        }
    }
    Err(value_error(format!(
        "a kiln array's size is one non-negative integer, got {}",
        s.repr()?
    )))
}

/// An array of `shape` elements equal to `value` (Dr.Jit's `dr.full(dtype, value, shape)`).
/// Lazy (a broadcast of one value): it costs no memory until a kernel writes it.
#[pyfunction]
#[pyo3(signature = (dtype, value, shape = None))]
fn full(
    py: Python<'_>,
    dtype: &Bound<PyAny>,
    value: &Bound<PyAny>,
    shape: Option<&Bound<PyAny>>,
) -> PyResult<Py<PyAny>> {
    make(py, made(dtype, shape)?, |ty, n| {
        let v = to_dyn(value, Some(ty))?.cast(ty);
        if v.len() != 1 {
            return Err(value_error("full: the value must be one number"));
        }
        broadcast(&v, n)
    })
}

/// A one-element array repeated `n` times (lazily).
fn broadcast(v: &Dyn, n: usize) -> PyResult<Dyn> {
    let zero = Dyn::I64(guard(|| kiln::Int64::zeros(n))?);
    gather_dyn(v, &zero, None)
}

/// `n` zeros of `ty`.
pub fn zeros_dyn(ty: Ty, n: usize) -> PyResult<Dyn> {
    Ok(guard(|| kiln::Float64::zeros(n))?.into_dyn().cast(ty))
}

/// `shape` zeros.
#[pyfunction]
#[pyo3(signature = (dtype, shape = None))]
fn zeros(
    py: Python<'_>,
    dtype: &Bound<PyAny>,
    shape: Option<&Bound<PyAny>>,
) -> PyResult<Py<PyAny>> {
    make(py, made(dtype, shape)?, zeros_dyn)
}

/// `shape` ones.
#[pyfunction]
#[pyo3(signature = (dtype, shape = None))]
fn ones(py: Python<'_>, dtype: &Bound<PyAny>, shape: Option<&Bound<PyAny>>) -> PyResult<Py<PyAny>> {
    make(py, made(dtype, shape)?, |ty, n| {
        Ok(guard(|| kiln::Float64::ones(n))?.into_dyn().cast(ty))
    })
}

/// Like `zeros` (kiln has no uninitialised memory).
#[pyfunction]
#[pyo3(signature = (dtype, shape = None))]
fn empty(
    py: Python<'_>,
    dtype: &Bound<PyAny>,
    shape: Option<&Bound<PyAny>>,
) -> PyResult<Py<PyAny>> {
    zeros(py, dtype, shape)
}

/// An evaluated array filled with `value`: changing the value later does not recompile the
/// kernels that read it (Dr.Jit's `dr.opaque`).
#[pyfunction]
#[pyo3(signature = (dtype, value, shape = None))]
fn opaque(
    py: Python<'_>,
    dtype: &Bound<PyAny>,
    value: &Bound<PyAny>,
    shape: Option<&Bound<PyAny>>,
) -> PyResult<Py<PyAny>> {
    let ty = ty_of_class(dtype)?;
    let n = size_arg(shape)?;
    let v = broadcast(&to_dyn(value, Some(ty))?.cast(ty), n)?;
    let v = each!(&v, x => guard(|| kiln::make_opaque(x).into_dyn())?);
    wrap(py, v)
}

/// Give each argument a buffer of its own, in place (Dr.Jit's `dr.make_opaque`).
#[pyfunction]
#[pyo3(signature = (*args))]
fn make_opaque(args: &Bound<PyTuple>) -> PyResult<()> {
    for a in args.iter() {
        let cell = a
            .cast::<ArrayBase>()
            .map_err(|_| type_error("make_opaque takes kiln arrays"))?;
        let mut b = cell.borrow_mut();
        b.a = each!(&b.a, x => guard(|| kiln::make_opaque(x).into_dyn())?);
    }
    Ok(())
}

// ---- reductions ------------------------------------------------------------------------------

fn arr(x: &Bound<PyAny>) -> PyResult<Dyn> {
    to_dyn(x, None)
}

/// Sum of all elements, a one-element array (0 for an empty array; masks are counted); a tensor
/// gives a 0-d tensor, or with `axis=` (an int or a tuple) the sums along those axes.
#[pyfunction]
#[pyo3(signature = (x, axis = None))]
fn sum(x: &Bound<PyAny>, axis: Option<&Bound<PyAny>>) -> PyResult<Py<PyAny>> {
    reduce_py(x, axis, Red::Sum)
}
/// Product of all elements (or along `axis`, as for `sum`).
#[pyfunction]
#[pyo3(signature = (x, axis = None))]
fn prod(x: &Bound<PyAny>, axis: Option<&Bound<PyAny>>) -> PyResult<Py<PyAny>> {
    reduce_py(x, axis, Red::Prod)
}
/// The smallest element (or along `axis`; `kiln.minimum(a, b)` is lanewise).
#[pyfunction]
#[pyo3(signature = (x, axis = None))]
fn min(x: &Bound<PyAny>, axis: Option<&Bound<PyAny>>) -> PyResult<Py<PyAny>> {
    reduce_py(x, axis, Red::Min)
}
/// The largest element (or along `axis`).
#[pyfunction]
#[pyo3(signature = (x, axis = None))]
fn max(x: &Bound<PyAny>, axis: Option<&Bound<PyAny>>) -> PyResult<Py<PyAny>> {
    reduce_py(x, axis, Red::Max)
}
/// The mean, in floating point (or along `axis`).
#[pyfunction]
#[pyo3(signature = (x, axis = None))]
fn mean(x: &Bound<PyAny>, axis: Option<&Bound<PyAny>>) -> PyResult<Py<PyAny>> {
    reduce_py(x, axis, Red::Mean)
}

/// A reduction of an array (`axis` None, 0 or -1: arrays have one axis) or of a tensor.
fn reduce_py(x: &Bound<PyAny>, axis: Option<&Bound<PyAny>>, op: Red) -> PyResult<Py<PyAny>> {
    let py = x.py();
    if let Ok(t) = x.cast::<crate::tensor::TensorBase>() {
        let (a, shape) = {
            let t = t.borrow();
            (t.a.clone(), t.shape.clone())
        };
        return tensorfn::reduce(py, &a, &shape, axis, op, |a| reduce_whole(py, a, op));
    }
    // a kiln array has one axis: None, 0, -1 (or a tuple of one of them) reduce it all
    let named = tensorfn::axes(axis, 1).map_err(|e| {
        if e.is_instance_of::<pyo3::exceptions::PyValueError>(py) {
            value_error(format!(
                "{e} (a kiln array has one axis, 0): reduce a tensor to use other axes"
            ))
        } else {
            e
        }
    })?;
    if named.is_some_and(|a| a.is_empty()) {
        // `axis=()` reduces nothing (NumPy's rule)
        return wrap(py, arr(x)?);
    }
    wrap(py, reduce_whole(py, &arr(x)?, op)?)
}

/// `op` over every element of `a`: a one-element array of its type (masks: `sum` and `prod`
/// count through u32, `min` is `all`, `max` is `any`; a mean is in floats).
fn reduce_whole(py: Python<'_>, a: &Dyn, op: Red) -> PyResult<Dyn> {
    let mask = a.ty() == Ty::Bool;
    Ok(match op {
        Red::Min | Red::Max if mask => {
            let v = if op == Red::Min {
                all_dyn(py, a)?
            } else {
                any_dyn(py, a)?
            };
            Dyn::Bool(Array::scalar(v))
        }
        Red::Sum | Red::Prod | Red::Min | Red::Max => {
            let a = if mask { a.cast(Ty::U32) } else { a.clone() };
            numeric!(&a, v => guard(|| match op {
                Red::Sum => v.sum(),
                Red::Prod => v.prod(),
                Red::Min => v.reduce_min(),
                _ => v.reduce_max(),
            }.into_dyn())?, bool => unreachable!("masks are reduced as u32"))
        }
        Red::Mean => {
            let f = if a.ty().is_float() {
                a.ty()
            } else if matches!(a.ty(), Ty::I64 | Ty::U64) {
                Ty::F64
            } else {
                Ty::F32
            };
            let a = a.cast(f);
            let n = lit_f64(a.len() as f64, f);
            let s = float!(&a, v => guard(|| v.sum().into_dyn())?, else unreachable!());
            binary(Bin::TrueDiv, &s, &n)?
        }
    })
}
/// Inner product of two arrays, a one-element array.
#[pyfunction]
fn dot(a: &Bound<PyAny>, b: &Bound<PyAny>) -> PyResult<Py<PyAny>> {
    let (x, y) = operands(a, b)?;
    let p = binary(Bin::Mul, &x, &y)?;
    wrap(
        a.py(),
        numeric!(&p, v => guard(|| v.sum().into_dyn())?, bool => return Err(type_error("dot takes numbers"))),
    )
}
/// Euclidean norm.
#[pyfunction]
fn norm(x: &Bound<PyAny>) -> PyResult<Py<PyAny>> {
    let d = dot(x, x)?;
    unary(
        x.py(),
        Un::Sqrt,
        &d.bind(x.py()).cast::<ArrayBase>()?.borrow().a,
    )
}

fn all_dyn(py: Python<'_>, a: &Dyn) -> PyResult<bool> {
    let Dyn::Bool(m) = a.cast(Ty::Bool) else {
        unreachable!()
    };
    crate::gil::detach(py, || guard(|| m.all()))
}
fn any_dyn(py: Python<'_>, a: &Dyn) -> PyResult<bool> {
    let Dyn::Bool(m) = a.cast(Ty::Bool) else {
        unreachable!()
    };
    crate::gil::detach(py, || guard(|| m.any()))
}

/// Whether every lane is true (true for an empty array).
#[pyfunction]
fn all(py: Python<'_>, x: &Bound<PyAny>) -> PyResult<bool> {
    all_dyn(py, &arr(x)?)
}
/// Whether any lane is true.
#[pyfunction]
fn any(py: Python<'_>, x: &Bound<PyAny>) -> PyResult<bool> {
    any_dyn(py, &arr(x)?)
}
/// Whether no lane is true.
#[pyfunction]
fn none(py: Python<'_>, x: &Bound<PyAny>) -> PyResult<bool> {
    Ok(!any_dyn(py, &arr(x)?)?)
}
/// How many lanes are true.
#[pyfunction]
fn count(py: Python<'_>, x: &Bound<PyAny>) -> PyResult<u64> {
    let Dyn::Bool(m) = arr(x)?.cast(Ty::Bool) else {
        unreachable!()
    };
    crate::gil::detach(py, || guard(|| m.count()))
}
/// Running sum; `exclusive=True` (Dr.Jit's default) starts from 0.
#[pyfunction]
#[pyo3(signature = (x, exclusive = true))]
fn prefix_sum(x: &Bound<PyAny>, exclusive: bool) -> PyResult<Py<PyAny>> {
    if let Ok(t) = x.cast::<crate::tensor::TensorBase>() {
        let s = t.borrow().shape.clone();
        if s.len() != 1 {
            return Err(value_error(format!(
                "prefix_sum of a tensor of shape {s:?}: kiln sums 1-D tensors and arrays only (Dr.Jit sums along axis 0); run it on `t.array` for the flat order, or along axis 0 with `kiln.lax.scan`"
            )));
        }
    }
    lanewise(x, |a| {
        Ok(
            numeric!(a, v => guard(|| v.prefix_sum(exclusive).into_dyn())?, bool => return Err(type_error("prefix_sum takes numbers"))),
        )
    })
}
/// Inclusive running sum (NumPy's `cumsum`).
#[pyfunction]
fn cumsum(x: &Bound<PyAny>) -> PyResult<Py<PyAny>> {
    prefix_sum(x, false)
}
/// Sums of consecutive blocks of `block_size` elements (the last block may be shorter).
/// `mode` is Dr.Jit's choice of strategy ("evaluated" or "symbolic"); kiln picks its own, so it
/// is checked and otherwise has no effect.
#[pyfunction]
#[pyo3(signature = (x, block_size, mode = None))]
fn block_sum(x: &Bound<PyAny>, block_size: usize, mode: Option<&str>) -> PyResult<Py<PyAny>> {
    if let Some(m) = mode.filter(|m| !matches!(*m, "evaluated" | "symbolic")) {
        return Err(value_error(format!(
            "block_sum: mode is \"evaluated\", \"symbolic\" or None, not {m:?}"
        )));
    }
    let a = arr(x)?;
    wrap(
        x.py(),
        numeric!(&a, v => try_guard(|| v.try_block_sum(block_size))?.into_dyn(), bool => return Err(type_error("block_sum takes numbers"))),
    )
}
/// Reductions of consecutive blocks of `block_size` elements by `op` (a `kiln.ReduceOp`: `Add`,
/// `Mul`, `Min`, `Max`, and `And`/`Or` for integers); the last block may be shorter (Dr.Jit's
/// `dr.block_reduce`). Differentiable for floats. `mode` is checked as in `block_sum`.
#[pyfunction]
#[pyo3(signature = (op, value, block_size, mode = None))]
fn block_reduce(
    op: &Bound<PyAny>,
    value: &Bound<PyAny>,
    block_size: usize,
    mode: Option<&str>,
) -> PyResult<Py<PyAny>> {
    if let Some(m) = mode.filter(|m| !matches!(*m, "evaluated" | "symbolic")) {
        return Err(value_error(format!(
            "block_reduce: mode is \"evaluated\", \"symbolic\" or None, not {m:?}"
        )));
    }
    let op = reduce_op(op)?;
    let a = arr(value)?;
    wrap(
        value.py(),
        numeric!(&a, v => try_guard(|| v.try_block_reduce(op, block_size))?.into_dyn(), bool => return Err(type_error("block_reduce takes numbers; reduce masks as integers (kiln.UInt32(mask))"))),
    )
}
/// The positions of the true lanes, as `UInt32` (Dr.Jit's `dr.compress`).
#[pyfunction]
fn compress(x: &Bound<PyAny>) -> PyResult<Py<PyAny>> {
    let Dyn::Bool(m) = arr(x)?.cast(Ty::Bool) else {
        unreachable!()
    };
    wrap(x.py(), Dyn::U32(guard(|| m.compress())?))
}

// ---- memory ----------------------------------------------------------------------------------

/// `source[index]` for the active lanes (0 elsewhere, and for an index out of range).
pub fn gather_dyn(source: &Dyn, index: &Dyn, active: Option<&Bool>) -> PyResult<Dyn> {
    if !index.ty().is_int() {
        return Err(type_error(format!(
            "an index array holds integers, not {}",
            index.ty().class_name()
        )));
    }
    each!(source, s => integer!(index, i => match active {
        None => try_guard(|| kiln::try_gather(s, i)).map(IntoDyn::into_dyn),
        Some(m) => try_guard(|| kiln::try_gather_masked(s, i, m)).map(IntoDyn::into_dyn),
    }, else unreachable!()))
}

/// Write `value` at `index` into `target` (`op`: a plain store or a reduction), in place.
pub fn scatter_into(
    target: &mut Dyn,
    value: &Dyn,
    index: &Dyn,
    active: Option<&Bool>,
    op: ReduceOp,
) -> PyResult<()> {
    if !index.ty().is_int() {
        return Err(type_error(format!(
            "an index array holds integers, not {}",
            index.ty().class_name()
        )));
    }
    let value = value.cast(target.ty());
    let mask = active.cloned().unwrap_or_else(|| Array::scalar(true));
    macro_rules! go {
        ($($v:ident),*) => {
            match (target, &value) {
                $((Dyn::$v(t), Dyn::$v(v)) => integer!(index, i => try_guard(|| kiln::try_scatter(op, t, v, i, &mask)), else unreachable!()),)*
                _ => unreachable!("the value is cast to the target's type"),
            }
        };
    }
    go!(Bool, I32, U32, I64, U64, F32, F64)
}

/// `source[index]` as an array of `dtype` (Dr.Jit's `dr.gather(dtype, source, index, active)`).
#[pyfunction]
#[pyo3(signature = (dtype, source, index, active = None))]
fn gather(
    py: Python<'_>,
    dtype: &Bound<PyAny>,
    source: &Bound<PyAny>,
    index: &Bound<PyAny>,
    active: Option<&Bound<PyAny>>,
) -> PyResult<Py<PyAny>> {
    let ty = ty_of_class(dtype)?;
    let s = to_dyn(source, Some(ty))?;
    let i = to_dyn(index, Some(Ty::U32))?;
    let m = active.map(mask_of).transpose()?;
    wrap(py, gather_dyn(&s, &i, m.as_ref())?.cast(ty))
}

fn target_of<'a, 'py>(target: &'a Bound<'py, PyAny>) -> PyResult<&'a Bound<'py, ArrayBase>> {
    target
        .cast::<ArrayBase>()
        .map_err(|_| type_error("the target of a scatter is a kiln array (it is changed in place)"))
}

/// `target[index] = value` for the active lanes, in place (Dr.Jit's `dr.scatter`). Out-of-range
/// indices are dropped.
#[pyfunction]
#[pyo3(signature = (target, value, index, active = None))]
fn scatter(
    target: &Bound<PyAny>,
    value: &Bound<PyAny>,
    index: &Bound<PyAny>,
    active: Option<&Bound<PyAny>>,
) -> PyResult<()> {
    let t = target_of(target)?;
    let ty = t.borrow().a.ty();
    let v = to_dyn(value, Some(ty))?;
    let i = to_dyn(index, Some(Ty::U32))?;
    let m = active.map(mask_of).transpose()?;
    scatter_into(&mut t.borrow_mut().a, &v, &i, m.as_ref(), ReduceOp::None)
}

/// `target[index] op= value` for the active lanes, in place (Dr.Jit's `dr.scatter_reduce`).
#[pyfunction]
#[pyo3(signature = (op, target, value, index, active = None))]
fn scatter_reduce(
    op: &Bound<PyAny>,
    target: &Bound<PyAny>,
    value: &Bound<PyAny>,
    index: &Bound<PyAny>,
    active: Option<&Bound<PyAny>>,
) -> PyResult<()> {
    let op = reduce_op(op)?;
    let t = target_of(target)?;
    let ty = t.borrow().a.ty();
    let v = to_dyn(value, Some(ty))?;
    let i = to_dyn(index, Some(Ty::U32))?;
    let m = active.map(mask_of).transpose()?;
    scatter_into(&mut t.borrow_mut().a, &v, &i, m.as_ref(), op)
}

/// `target[index] += value` (Dr.Jit's `dr.scatter_add`).
#[pyfunction]
#[pyo3(signature = (target, value, index, active = None))]
fn scatter_add(
    target: &Bound<PyAny>,
    value: &Bound<PyAny>,
    index: &Bound<PyAny>,
    active: Option<&Bound<PyAny>>,
) -> PyResult<()> {
    let t = target_of(target)?;
    let ty = t.borrow().a.ty();
    let v = to_dyn(value, Some(ty))?;
    let i = to_dyn(index, Some(Ty::U32))?;
    let m = active.map(mask_of).transpose()?;
    scatter_into(&mut t.borrow_mut().a, &v, &i, m.as_ref(), ReduceOp::Add)
}

/// Dr.Jit's `ReduceOp` names, as the module's `ReduceOp` class gives them.
#[pyclass(module = "kiln", eq, eq_int, name = "ReduceOp")]
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum PyReduceOp {
    Identity,
    Add,
    Mul,
    Min,
    Max,
    And,
    Or,
}

fn reduce_op(op: &Bound<PyAny>) -> PyResult<ReduceOp> {
    let o: PyReduceOp = op
        .extract()
        .map_err(|_| type_error("op is a kiln.ReduceOp (ReduceOp.Add, …)"))?;
    Ok(match o {
        PyReduceOp::Identity => ReduceOp::None,
        PyReduceOp::Add => ReduceOp::Add,
        PyReduceOp::Mul => ReduceOp::Mul,
        PyReduceOp::Min => ReduceOp::Min,
        PyReduceOp::Max => ReduceOp::Max,
        PyReduceOp::And => ReduceOp::And,
        PyReduceOp::Or => ReduceOp::Or,
    })
}

// ---- evaluation and inspection -----------------------------------------------------------------

/// Evaluate the arrays given (all together: those of one size share a kernel), or everything
/// pending when called with none. The GIL is released while kernels compile and run.
#[pyfunction]
#[pyo3(signature = (*args))]
fn eval(py: Python<'_>, args: &Bound<PyTuple>) -> PyResult<()> {
    if args.is_empty() {
        return crate::gil::detach(py, || try_guard(kiln::eval_all));
    }
    let mut ids = Vec::new();
    let mut keep = Vec::new();
    collect(args.as_any(), &mut ids, &mut keep)?;
    crate::gil::detach(py, || try_guard(|| kiln::eval_ids(&ids)))
}

/// Mark arrays to be evaluated with this thread's next evaluation (Dr.Jit's `dr.schedule`):
/// the next `eval()`, or the next read of any value, computes them too, in the same kernels
/// where their sizes match. Takes what `eval` takes.
#[pyfunction]
#[pyo3(signature = (*args))]
fn schedule(args: &Bound<PyTuple>) -> PyResult<()> {
    let mut ids = Vec::new();
    let mut keep = Vec::new();
    collect(args.as_any(), &mut ids, &mut keep)?;
    kiln_core::schedule::schedule_eval(&ids);
    Ok(())
}

/// The variable ids of every array in `x` (an array, or lists, tuples and dicts of them).
fn collect(x: &Bound<PyAny>, ids: &mut Vec<kiln_core::VarId>, keep: &mut Vec<Dyn>) -> PyResult<()> {
    if let Ok(a) = x.cast::<ArrayBase>() {
        let d = a.borrow().a.clone();
        ids.push(each!(&d, v => v.id()));
        keep.push(d);
    } else if let Ok(t) = x.cast::<crate::tensor::TensorBase>() {
        let d = t.borrow().a.clone();
        ids.push(each!(&d, v => v.id()));
        keep.push(d);
    } else if let Ok(d) = x.cast::<pyo3::types::PyDict>() {
        for v in d.values() {
            collect(&v, ids, keep)?;
        }
    } else if x.cast::<pyo3::types::PyList>().is_ok() || x.cast::<PyTuple>().is_ok() {
        for v in x.try_iter()? {
            collect(&v?, ids, keep)?;
        }
    }
    Ok(())
}

/// Wait for launched work (Dr.Jit's `dr.sync_thread`).
#[pyfunction]
fn sync_thread(py: Python<'_>) -> PyResult<()> {
    crate::gil::detach(py, || try_guard(kiln::sync))
}

/// Drop the compiled kernels kept in memory; frozen functions record again at their next call
/// (Dr.Jit's `dr.flush_kernel_cache`).
#[pyfunction]
fn flush_kernel_cache(py: Python<'_>) {
    crate::gil::detach(py, kiln::engine::flush_kernel_cache)
}

/// Give the memory kiln keeps for reuse back to the system (Dr.Jit's `dr.flush_malloc_cache`).
#[pyfunction]
fn flush_malloc_cache(py: Python<'_>) {
    crate::gil::detach(py, kiln::trim)
}

/// This thread's kernel history, taken (see `kiln.kernel_history`): per launch (kind, op name,
/// hash, size, inputs, outputs, IR operations, microseconds, recording mode).
#[allow(clippy::type_complexity)]
#[pyfunction]
fn _kernel_history() -> Vec<(
    &'static str,
    &'static str,
    u128,
    usize,
    usize,
    usize,
    usize,
    f64,
    &'static str,
)> {
    kiln::kernel_history()
        .into_iter()
        .map(|r| {
            let kind = match r.kind {
                kiln::KernelKind::Jit => "JIT",
                kiln::KernelKind::Reduce => "Reduce",
                kiln::KernelKind::Other => "Other",
            };
            let mode = match r.mode {
                kiln::RecordingMode::None => "None",
                kiln::RecordingMode::Recorded => "Recorded",
                kiln::RecordingMode::Replayed => "Replayed",
            };
            (
                kind, r.what, r.hash, r.size, r.inputs, r.outputs, r.ops, r.time_us, mode,
            )
        })
        .collect()
}

/// The table of live variables (Dr.Jit's `dr.whos()` prints it; this returns it as a string).
#[pyfunction]
fn whos_str() -> String {
    kiln::whos().to_string()
}

/// Print the table of live variables.
#[pyfunction]
fn whos(py: Python<'_>) -> PyResult<()> {
    let s = whos_str();
    py.import("builtins")?.call_method1("print", (s,))?;
    Ok(())
}

/// Name an array in messages and `whos()` (Dr.Jit's `dr.set_label(x, name)`).
#[pyfunction]
fn set_label(x: &Bound<PyAny>, name: &str) -> PyResult<()> {
    let a = x
        .cast::<ArrayBase>()
        .map_err(|_| type_error("set_label takes a kiln array"))?;
    let mut b = a.borrow_mut();
    b.a = each!(&b.a, v => v.clone().label(name).into_dyn());
    Ok(())
}

/// The number of elements (Dr.Jit's `dr.width`).
#[pyfunction]
fn width(x: &Bound<PyAny>) -> PyResult<usize> {
    Ok(arr(x)?.len())
}

/// The engine's counters as a dict (kernels compiled, cache hits, launches, live variables, …).
#[pyfunction]
fn stats(py: Python<'_>) -> PyResult<Py<PyAny>> {
    let s = kiln::stats();
    let d = pyo3::types::PyDict::new(py);
    d.set_item("vars_alive", s.vars_alive)?;
    d.set_item("kernels_compiled", s.kernels_compiled)?;
    d.set_item("cache_hits", s.cache_hits)?;
    d.set_item("cache_misses", s.cache_misses)?;
    d.set_item("launches", s.launches)?;
    d.set_item("ad_nodes", s.ad_nodes)?;
    Ok(d.into_any().unbind())
}

/// The backend kernels compile with (`llvm`, `cranelift` or `interp`).
#[pyfunction]
fn backend() -> String {
    kiln::backend().to_string()
}

/// The class of an element type's array, as the module names it (for the stubs and `dtype`).
#[pyfunction]
fn type_of(py: Python<'_>, x: &Bound<PyAny>) -> PyResult<Py<PyAny>> {
    Ok(class_of(py, arr(x)?.ty()).into_any().unbind())
}

/// A kiln value from NumPy: a 1-D array gives the array class of its element type, any other
/// rank a tensor. With `copy=None` (the default) kiln reads the NumPy array's memory in place when
/// it can (as `torch.from_numpy` does): writes through NumPy between kiln calls show in the kiln
/// value (not during one: kiln may be reading on other threads), and kiln never writes into that
/// memory (its own updates copy first). About 1 array in 16 cannot be read in place (its end
/// lies too close to a page boundary) and is copied: code that relies on seeing NumPy's writes
/// passes `copy=False`, which shares or raises `ValueError` saying why it cannot. `copy=True`
/// always copies.
#[pyfunction]
#[pyo3(signature = (a, copy=None))]
fn from_numpy(py: Python<'_>, a: &Bound<PyAny>, copy: Option<bool>) -> PyResult<Py<PyAny>> {
    let np = py.import("numpy")?;
    let arr = np.call_method1("asarray", (a,))?;
    let shape: Vec<usize> = arr.getattr("shape")?.extract()?;
    let flat = match copy {
        Some(true) => crate::convert::numpy_copy(&arr)?,
        None => crate::convert::numpy_flat(&arr)?,
        Some(false) => crate::convert::share_numpy(&arr)?.map_err(|why| {
            value_error(format!(
                "from_numpy(copy=False): this array (shape {shape:?}, dtype {}) cannot be shared without a copy: {why}; pass copy=None to copy it when needed, or make it a C-contiguous array of a kiln type first (`np.ascontiguousarray(a, dtype=np.float32)`)",
                arr.getattr("dtype").and_then(|d| d.str().map(|s| s.to_string())).unwrap_or_default()
            ))
        })?,
    };
    if shape.len() == 1 {
        return wrap(py, flat);
    }
    crate::tensor::wrap_tensor(py, flat, shape)
}

/// A kiln value from any DLPack producer (PyTorch, JAX, CuPy on the CPU, NumPy), through
/// NumPy's `from_dlpack` (no copy there), then as [`from_numpy`]: read in place where it can be
/// (`copy=None`), always copied (`copy=True`), or shared or refused (`copy=False`).
#[pyfunction]
#[pyo3(signature = (x, copy=None))]
fn from_dlpack(py: Python<'_>, x: &Bound<PyAny>, copy: Option<bool>) -> PyResult<Py<PyAny>> {
    let np = py.import("numpy")?;
    let arr = np.call_method1("from_dlpack", (x,))?;
    from_numpy(py, &arr, copy)
}

/// Put the functions on the module.
pub fn register(m: &Bound<PyModule>) -> PyResult<()> {
    register_unary(m)?;
    m.add_class::<PyReduceOp>()?;
    macro_rules! add {
        ($($f:ident),*) => { $(m.add_function(wrap_pyfunction!($f, m)?)?;)* };
    }
    add!(minimum, maximum, atan2, power, copysign, clip, fma, select, isnan, isinf, isfinite);
    add!(
        arange,
        linspace,
        full,
        zeros,
        ones,
        empty,
        opaque,
        make_opaque
    );
    add!(
        sum,
        prod,
        min,
        max,
        mean,
        dot,
        norm,
        all,
        any,
        none,
        count,
        prefix_sum,
        cumsum,
        block_sum,
        block_reduce,
        compress
    );
    add!(gather, scatter, scatter_reduce, scatter_add);
    add!(
        eval,
        schedule,
        sync_thread,
        flush_kernel_cache,
        flush_malloc_cache,
        whos,
        whos_str,
        set_label,
        width,
        stats,
        backend,
        type_of,
        _kernel_history
    );
    add!(from_numpy, from_dlpack);
    Ok(())
}
