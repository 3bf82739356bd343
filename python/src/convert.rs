//! Python values into kiln arrays: a kiln array as it is, Python scalars as literals (which take
//! the other operand's type, as in Dr.Jit), sequences element by element, and anything NumPy can
//! read (`__array_interface__`, `__array__`, DLPack producers through NumPy) in one copy per
//! stage: NumPy's contiguous bytes, then kiln's buffer. `share_numpy` reads a NumPy array's
//! memory in place instead (`kiln.from_numpy`, `kiln.from_dlpack`).

use crate::array::ArrayBase;
use crate::dynarray::{Dyn, Ty};
use crate::errors::{guard, type_error, value_error};
use kiln::{Array, Scalar};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyBytes, PyFloat, PyInt, PyList, PyTuple};

/// `obj` as a kiln array. A Python scalar becomes a literal of `like` (when given; a float with an
/// integer `like` becomes a `Float32`), else of the type Dr.Jit gives it (`Bool`, `Int32` or the
/// smallest integer type that holds it, `Float32`).
pub fn to_dyn(obj: &Bound<PyAny>, like: Option<Ty>) -> PyResult<Dyn> {
    if let Ok(a) = obj.cast::<ArrayBase>() {
        return Ok(a.borrow().a.clone());
    }
    if let Ok(t) = obj.cast::<crate::tensor::TensorBase>() {
        // a tensor's flat values (reductions and the like see all of them)
        return Ok(t.borrow().a.clone());
    }
    if let Some(d) = scalar(obj, like)? {
        return Ok(d);
    }
    if obj.hasattr("__array_interface__")?
        || obj.hasattr("__array__")?
        || obj.hasattr("__dlpack__")?
    {
        return from_numpy(obj, like);
    }
    if obj.cast::<PyList>().is_ok() || obj.cast::<PyTuple>().is_ok() {
        return from_sequence(obj, like);
    }
    Err(type_error(format!(
        "kiln cannot make an array of a `{}`: pass a kiln array, a Python number, a list of numbers or a NumPy array",
        obj.get_type().name()?
    )))
}

/// `obj` as an operand beside an array of type `like` (operators, `select`, `clip`, …): a
/// Python number or a list of them takes `like` where no value is lost (a float beside integers
/// is a float, as for one number); a NumPy array or scalar keeps its dtype (promotion then
/// decides, as NumPy's would), never truncated to `like`.
pub fn operand_dyn(obj: &Bound<PyAny>, like: Ty) -> PyResult<Dyn> {
    if obj.is_instance_of::<ArrayBase>() || obj.is_instance_of::<crate::tensor::TensorBase>() {
        return to_dyn(obj, None);
    }
    if let Some(d) = scalar(obj, Some(like))? {
        return Ok(d);
    }
    if obj.cast::<PyList>().is_ok() || obj.cast::<PyTuple>().is_ok() {
        let natural = from_sequence(obj, None)?.ty();
        let ty = if natural.is_float() {
            match like {
                t if t.is_float() => t,
                Ty::I64 | Ty::U64 => Ty::F64,
                _ => natural,
            }
        } else if like == Ty::Bool {
            natural
        } else {
            like
        };
        return from_sequence(obj, Some(ty));
    }
    to_dyn(obj, None)
}

/// A Python `bool`, `int` or `float` as a one-element literal, or `None` for anything else.
fn scalar(obj: &Bound<PyAny>, like: Option<Ty>) -> PyResult<Option<Dyn>> {
    if let Some(d) = numpy_scalar(obj)? {
        return Ok(Some(d));
    }
    if let Ok(b) = obj.cast::<PyBool>() {
        let v = b.is_true();
        return Ok(Some(match like {
            Some(t) if t != Ty::Bool => lit_f64(if v { 1.0 } else { 0.0 }, t),
            _ => Dyn::Bool(Array::scalar(v)),
        }));
    }
    if obj.cast::<PyInt>().is_ok() {
        let ty = match like {
            Some(t) if t != Ty::Bool => t,
            _ => smallest_int(obj)?,
        };
        return Ok(Some(lit_int(obj, ty)?));
    }
    if let Ok(f) = obj.cast::<PyFloat>() {
        // beside 64-bit integers a float is a Float64 (as `/` gives), else a Float32
        let ty = match like {
            Some(t) if t.is_float() => t,
            Some(Ty::I64 | Ty::U64) => Ty::F64,
            _ => Ty::F32,
        };
        return Ok(Some(lit_f64(f.value(), ty)));
    }
    Ok(None)
}

/// A NumPy scalar (`np.float64(2)`, `np.int32(3)`) keeps its own type, as NumPy 2 does: it is
/// not a weak Python number that takes the other operand's type.
fn numpy_scalar(obj: &Bound<PyAny>) -> PyResult<Option<Dyn>> {
    let ty = obj.get_type();
    if !ty.module().is_ok_and(|m| m == "numpy") || !obj.hasattr("dtype")? || ty.name()? == "ndarray"
    {
        return Ok(None);
    }
    let dtype: String = obj.getattr("dtype")?.getattr("str")?.extract()?;
    let Some(t) = Ty::from_typestr(&dtype) else {
        return Ok(None);
    };
    let v = obj.call_method0("item")?;
    Ok(Some(match t {
        Ty::Bool => Dyn::Bool(Array::scalar(v.is_truthy()?)),
        Ty::F32 | Ty::F64 => lit_f64(v.extract::<f64>()?, t),
        _ => lit_int(&v, t)?,
    }))
}

fn smallest_int(obj: &Bound<PyAny>) -> PyResult<Ty> {
    if obj.extract::<i32>().is_ok() {
        Ok(Ty::I32)
    } else if obj.extract::<i64>().is_ok() {
        Ok(Ty::I64)
    } else if obj.extract::<u64>().is_ok() {
        Ok(Ty::U64)
    } else {
        Err(value_error(format!(
            "the integer {obj} does not fit in 64 bits: kiln's widest integers are Int64 and UInt64"
        )))
    }
}

/// A Python int as a literal of `ty`; out of the type's range is an error naming both.
fn lit_int(obj: &Bound<PyAny>, ty: Ty) -> PyResult<Dyn> {
    let range = |_| {
        value_error(format!(
            "the integer {obj} is out of range for {}: use a wider type (Int64, UInt64) or a float",
            ty.class_name()
        ))
    };
    Ok(match ty {
        Ty::I32 => Dyn::I32(Array::scalar(obj.extract::<i32>().map_err(range)?)),
        Ty::U32 => Dyn::U32(Array::scalar(obj.extract::<u32>().map_err(range)?)),
        Ty::I64 => Dyn::I64(Array::scalar(obj.extract::<i64>().map_err(range)?)),
        Ty::U64 => Dyn::U64(Array::scalar(obj.extract::<u64>().map_err(range)?)),
        Ty::F32 => Dyn::F32(Array::scalar(obj.extract::<f64>()? as f32)),
        Ty::F64 => Dyn::F64(Array::scalar(obj.extract::<f64>()?)),
        Ty::Bool => Dyn::Bool(Array::scalar(obj.is_truthy()?)),
    })
}

/// A float literal of `ty` (integer types get the value truncated toward zero, as a cast does).
pub fn lit_f64(v: f64, ty: Ty) -> Dyn {
    match ty {
        Ty::Bool => Dyn::Bool(Array::scalar(v != 0.0)),
        Ty::I32 => Dyn::I32(Array::scalar(v as i32)),
        Ty::U32 => Dyn::U32(Array::scalar(v as u32)),
        Ty::I64 => Dyn::I64(Array::scalar(v as i64)),
        Ty::U64 => Dyn::U64(Array::scalar(v as u64)),
        Ty::F32 => Dyn::F32(Array::scalar(v as f32)),
        Ty::F64 => Dyn::F64(Array::scalar(v)),
    }
}

/// A list or tuple of numbers (or of one-element arrays), in `like` or the widest type of its
/// elements.
fn from_sequence(obj: &Bound<PyAny>, like: Option<Ty>) -> PyResult<Dyn> {
    let items: Vec<Bound<PyAny>> = obj.try_iter()?.collect::<PyResult<_>>()?;
    let mut ty = like;
    if ty.is_none() {
        let mut widest = Ty::Bool;
        for it in &items {
            let t = if it.cast::<PyBool>().is_ok() {
                Ty::Bool
            } else if it.cast::<PyInt>().is_ok() {
                smallest_int(it)?
            } else if it.cast::<PyFloat>().is_ok() {
                Ty::F32
            } else if let Ok(a) = it.cast::<ArrayBase>() {
                a.borrow().a.ty()
            } else {
                return Err(type_error(format!(
                    "a list for a kiln array holds numbers; element {} is a `{}`",
                    it.repr()?,
                    it.get_type().name()?
                )));
            };
            widest = widest.max(t);
        }
        ty = Some(widest);
    }
    let ty = ty.unwrap_or(Ty::F32);
    // floats into integers (and numbers into masks) convert as a cast does, as a single value does
    let has_float = items.iter().any(|i| i.cast::<PyFloat>().is_ok());
    let has_int = items
        .iter()
        .any(|i| i.cast::<PyInt>().is_ok() && i.cast::<PyBool>().is_err());
    if (ty.is_int() && has_float) || (ty == Ty::Bool && (has_float || has_int)) {
        return Ok(from_sequence(obj, Some(Ty::F64))?.cast(ty));
    }
    macro_rules! collect {
        ($t:ty, $v:ident) => {{
            let vals: Vec<$t> = items
                .iter()
                .map(|it| element::<$t>(it))
                .collect::<PyResult<_>>()?;
            Dyn::$v(guard(|| Array::from_vec(vals))?)
        }};
    }
    Ok(match ty {
        Ty::Bool => collect!(bool, Bool),
        Ty::I32 => collect!(i32, I32),
        Ty::U32 => collect!(u32, U32),
        Ty::I64 => collect!(i64, I64),
        Ty::U64 => collect!(u64, U64),
        Ty::F32 => collect!(f32, F32),
        Ty::F64 => collect!(f64, F64),
    })
}

fn element<'py, T: Scalar + for<'a> FromPyObject<'a, 'py>>(it: &Bound<'py, PyAny>) -> PyResult<T> {
    if let Ok(a) = it.cast::<ArrayBase>() {
        let py = it.py();
        let one = crate::array::item(py, &a.borrow().a, 0)?;
        return one.bind(py).extract::<T>().map_err(Into::into);
    }
    let is_number = it.cast::<PyInt>().is_ok() || it.cast::<PyFloat>().is_ok();
    it.extract::<T>().map_err(|_| {
        let shown = it.repr().map(|r| r.to_string()).unwrap_or_default();
        if is_number {
            value_error(format!(
                "the value {shown} in the list is out of range for the array's element type"
            ))
        } else {
            type_error(format!(
                "a list for a kiln array holds numbers; the value {shown} in it is not one"
            ))
        }
    })
}

/// Anything NumPy can read, copied once from NumPy's contiguous bytes into kiln's buffer. A
/// NumPy type kiln lacks (`float16`, `int8`, …) is converted by NumPy to `like` or to the nearest
/// kiln type first.
fn from_numpy(obj: &Bound<PyAny>, like: Option<Ty>) -> PyResult<Dyn> {
    let py = obj.py();
    let np = py.import("numpy").map_err(|_| {
        type_error("reading a NumPy-like array needs NumPy installed (`pip install numpy`)")
    })?;
    let arr = if obj.hasattr("__array_interface__")? || obj.hasattr("__array__")? {
        np.call_method1("asarray", (obj,))?
    } else {
        np.call_method1("from_dlpack", (obj,))?
    };
    let ndim: usize = arr.getattr("ndim")?.extract()?;
    if ndim > 1 {
        return Err(value_error(format!(
            "a kiln array is one-dimensional; this NumPy array has shape {}: flatten it (`.ravel()`) or make a tensor",
            arr.getattr("shape")?.repr()?
        )));
    }
    let dtype: String = arr.getattr("dtype")?.getattr("str")?.extract()?;
    let ty = match (like, Ty::from_typestr(&dtype)) {
        (Some(t), _) => t,
        (None, Some(t)) => t,
        (None, None) => nearest(&arr)?,
    };
    let contiguous = np.call_method1("ascontiguousarray", (arr, ty.typestr()))?;
    let bytes_obj = contiguous.call_method0("tobytes")?;
    let bytes = bytes_obj.cast::<PyBytes>()?.as_bytes();
    from_bytes(bytes, ty)
}

/// A NumPy array whose memory a kiln array reads in place.
struct NumpyMemory {
    /// The array: holding it keeps its memory alive and where it is (NumPy owns the memory or
    /// holds what does, and refuses to resize an array that others reference).
    _array: Py<PyAny>,
    ptr: usize,
    bytes: usize,
}

// SAFETY: `ptr..ptr + bytes` is the data of the C-contiguous array `_array` (read from its
// array interface when it was made), which stays allocated and in place while the array object
// lives, and this value holds a reference to it: NumPy keeps its own memory, or the object it
// took the memory from (a DLPack capsule, a buffer), alive as long as the array. Moving that
// memory from outside NumPy (`ndarray.resize(refcheck=False)`, resizing a PyTorch tensor after
// `from_dlpack`), or writing it while a kiln call reads it, breaks NumPy's own views as well;
// the docstring of `from_numpy` says so.
unsafe impl kiln_core::alloc::ForeignMemory for NumpyMemory {
    fn ptr(&self) -> *const u8 {
        self.ptr as *const u8
    }
    fn bytes(&self) -> usize {
        self.bytes
    }
}

/// `arr` (a NumPy array) as a kiln array over its memory, without a copy, or why its memory
/// cannot be read in place (the caller copies it then). A NumPy view of a kiln array's whole
/// buffer gives that kiln array back.
pub fn share_numpy(arr: &Bound<PyAny>) -> PyResult<Result<Dyn, String>> {
    let dtype = arr.getattr("dtype")?;
    let typestr: String = dtype.getattr("str")?.extract()?;
    let ty = match Ty::from_typestr(&typestr) {
        Some(Ty::Bool) => {
            return Ok(Err(
                "NumPy's bool may hold bytes other than 0 and 1, which kiln's Bool does not".into(),
            ))
        }
        Some(t) => t,
        None => {
            return Ok(Err(format!(
                "kiln has no element type for NumPy's {}",
                dtype.repr()?
            )))
        }
    };
    let flags = arr.getattr("flags")?;
    if !flags.getattr("c_contiguous")?.extract::<bool>()? {
        return Ok(Err("it is not C-contiguous (a strided view)".into()));
    }
    if !flags.getattr("aligned")?.extract::<bool>()? {
        return Ok(Err("its data is not aligned to its element size".into()));
    }
    let n: usize = arr.getattr("size")?.extract()?;
    let ptr = data_address(arr)?;
    if let Some(a) = kiln_export(arr)? {
        // a NumPy view of a kiln buffer: the kiln array itself when it is all of it, read as
        // the same type; anything else (a part, a reinterpretation) is copied, so that no kiln
        // buffer is held through NumPy
        let addr = crate::each!(&a, x => x.buffer_addr());
        if addr == Some(ptr) && a.len() == n && a.ty() == ty {
            return Ok(Ok(a));
        }
        return Ok(Err(
            "it is a part or a reinterpretation of a kiln array's buffer".into(),
        ));
    }
    let mem = NumpyMemory {
        _array: arr.clone().unbind(),
        ptr,
        bytes: n * ty.bytes(),
    };
    macro_rules! share {
        ($t:ty, $v:ident) => {
            kiln_core::from_foreign(<$t as Scalar>::TYPE, n, Box::new(mem))
                .map(|id| Dyn::$v(Array::from_id(id)))
        };
    }
    let shared = match ty {
        Ty::I32 => share!(i32, I32),
        Ty::U32 => share!(u32, U32),
        Ty::I64 => share!(i64, I64),
        Ty::U64 => share!(u64, U64),
        Ty::F32 => share!(f32, F32),
        Ty::F64 => share!(f64, F64),
        Ty::Bool => unreachable!("refused above"),
    };
    Ok(shared.map_err(String::from))
}

/// `arr` (a NumPy array) flat: read in place where it can be, else copied.
pub fn numpy_flat(arr: &Bound<PyAny>) -> PyResult<Dyn> {
    match share_numpy(arr)? {
        Ok(d) => Ok(d),
        Err(_) => numpy_copy(arr),
    }
}

/// `arr` (a NumPy array) flat, copied.
pub fn numpy_copy(arr: &Bound<PyAny>) -> PyResult<Dyn> {
    to_dyn(&arr.call_method0("ravel")?, None)
}

/// The kiln array whose buffer the NumPy array `arr` views (through any chain of views), if any.
fn kiln_export(arr: &Bound<PyAny>) -> PyResult<Option<Dyn>> {
    let mut base = arr.getattr("base")?;
    for _ in 0..64 {
        if let Ok(e) = base.cast::<crate::array::Exported>() {
            return Ok(Some(e.get().array().clone()));
        }
        // (NumPy keeps the chain of views through arrays)
        match base.getattr("base") {
            Ok(up) if !up.is_none() && base.hasattr("__array_interface__")? => base = up,
            _ => break,
        }
    }
    Ok(None)
}

/// The address of a NumPy array's first element (its array interface's `data`).
fn data_address(arr: &Bound<PyAny>) -> PyResult<usize> {
    arr.getattr("__array_interface__")?
        .get_item("data")?
        .get_item(0)?
        .extract()
}

/// The kiln type NumPy's type converts to without loss where it can (`float16` → `Float32`,
/// `int8`/`int16` → `Int32`, `uint8`/`uint16` → `UInt32`).
fn nearest(arr: &Bound<PyAny>) -> PyResult<Ty> {
    let kind: String = arr.getattr("dtype")?.getattr("kind")?.extract()?;
    match kind.as_str() {
        "f" => Ok(Ty::F32),
        "i" => Ok(Ty::I32),
        "u" => Ok(Ty::U32),
        "b" => Ok(Ty::Bool),
        _ => Err(type_error(format!(
            "kiln has no element type for NumPy's {}: convert it to a number type first (`.astype(np.float32)`)",
            arr.getattr("dtype")?.repr()?
        ))),
    }
}

/// Native-endian bytes of `ty` into a kiln array.
pub fn from_bytes(bytes: &[u8], ty: Ty) -> PyResult<Dyn> {
    macro_rules! read {
        ($t:ty, $v:ident, $n:literal) => {{
            let it = bytes
                .chunks_exact($n)
                .map(|c| <$t>::from_ne_bytes(c.try_into().expect("chunks of the type's size")));
            Dyn::$v(upload(bytes.len() / $n, it)?)
        }};
    }
    Ok(match ty {
        Ty::Bool => {
            let it = bytes.iter().map(|&b| b != 0);
            Dyn::Bool(upload(bytes.len(), it)?)
        }
        Ty::I32 => read!(i32, I32, 4),
        Ty::U32 => read!(u32, U32, 4),
        Ty::I64 => read!(i64, I64, 8),
        Ty::U64 => read!(u64, U64, 8),
        Ty::F32 => read!(f32, F32, 4),
        Ty::F64 => read!(f64, F64, 8),
    })
}

/// `n` values into a new evaluated kiln array, written straight into its buffer.
fn upload<T: Scalar>(n: usize, values: impl Iterator<Item = T>) -> PyResult<Array<T>> {
    crate::errors::try_guard(|| Ok(Array::from_id(kiln_core::from_iter_exact(n, values)?)))
}
