//! Tensors (Dr.Jit's `TensorXf` family): a flat kiln array and a shape. Elementwise operators
//! broadcast as NumPy does; indexing with integers and slices gives lazy views; `@` multiplies
//! matrices; NumPy sees an evaluated tensor without a copy (a read-only view of its buffer).

use crate::array::{to_numpy, wrap, ArrayBase};
use crate::convert::to_dyn;
use crate::dynarray::{Dyn, IntoDyn, Ty};
use crate::errors::{try_guard, type_error, value_error};
use crate::ops::{binary, compare, Bin, Cmp};
use kiln::{Array, Scalar, Tensor};
use pyo3::basic::CompareOp;
use pyo3::prelude::*;
use pyo3::types::{PySlice, PyTuple};
use pyo3::PyClassInitializer;

/// An n-dimensional kiln array: a flat array (`.array`) in row-major order and a `.shape`.
#[pyclass(name = "TensorBase", module = "kiln", subclass)]
pub struct TensorBase {
    pub a: Dyn,
    pub shape: Vec<usize>,
}

macro_rules! tensor_classes {
    ($($name:ident $ty:ident $doc:literal),*) => {$(
        #[doc = $doc]
        #[pyclass(extends = TensorBase, module = "kiln")]
        pub struct $name;

        #[pymethods]
        impl $name {
            #[new]
            #[pyo3(signature = (value = None, shape = None))]
            fn new(value: Option<&Bound<PyAny>>, shape: Option<Vec<usize>>) -> PyResult<(Self, TensorBase)> {
                let (a, s) = construct(value, shape, Ty::$ty)?;
                let a = crate::array::detached_if_suspended(a);
                Ok(($name, TensorBase { a, shape: s }))
            }
        }
    )*

    /// A tensor as an instance of the class of its element type.
    pub fn wrap_tensor(py: Python<'_>, a: Dyn, shape: Vec<usize>) -> PyResult<Py<PyAny>> {
        let ty = a.ty();
        let base = PyClassInitializer::from(TensorBase { a, shape });
        Ok(match ty {
            $(Ty::$ty => Py::new(py, base.add_subclass($name))?.into_any(),)*
        })
    }

    /// Put the classes on the module.
    pub fn register(m: &Bound<PyModule>) -> PyResult<()> {
        m.add_class::<TensorBase>()?;
        $(m.add_class::<$name>()?;)*
        Ok(())
    }
    };
}

tensor_classes!(
    TensorXf F32 "Tensor of 32-bit floats: `TensorXf(numpy_array)`, `TensorXf(flat_array, shape)`, `TensorXf([[1, 2], [3, 4]])`.",
    TensorXf64 F64 "Tensor of 64-bit floats.",
    TensorXi I32 "Tensor of 32-bit signed integers.",
    TensorXu U32 "Tensor of 32-bit unsigned integers.",
    TensorXi64 I64 "Tensor of 64-bit signed integers.",
    TensorXu64 U64 "Tensor of 64-bit unsigned integers.",
    TensorXb Bool "Tensor of masks."
);

fn numel(shape: &[usize]) -> usize {
    shape.iter().product()
}

/// `shape`'s element count, or the error for a shape whose count does not fit in memory's
/// address space (a product that would wrap around).
fn checked_numel(shape: &[usize]) -> PyResult<usize> {
    shape
        .iter()
        .try_fold(1usize, |n, &d| n.checked_mul(d))
        .ok_or_else(|| {
            value_error(format!(
                "a tensor of shape {shape:?} has more elements than memory can address"
            ))
        })
}

/// The flat values and shape of a constructor argument.
fn construct(
    value: Option<&Bound<PyAny>>,
    shape: Option<Vec<usize>>,
    ty: Ty,
) -> PyResult<(Dyn, Vec<usize>)> {
    let Some(v) = value else {
        let s = shape.unwrap_or_else(|| vec![0]);
        return Ok((crate::funcs::zeros_dyn(ty, checked_numel(&s)?)?, s));
    };
    if let Ok(t) = v.cast::<TensorBase>() {
        let t = t.borrow();
        return Ok((t.a.cast(ty), shape.unwrap_or_else(|| t.shape.clone())));
    }
    if let Some(s) = shape {
        let a = to_dyn(v, Some(ty))?.cast(ty);
        if a.len() != checked_numel(&s)? {
            return Err(value_error(format!(
                "a tensor of shape {s:?} needs {} values, the array has {}",
                numel(&s),
                a.len()
            )));
        }
        return Ok((a, s));
    }
    if v.is_instance_of::<ArrayBase>() {
        let a = to_dyn(v, Some(ty))?.cast(ty);
        let n = a.len();
        return Ok((a, vec![n]));
    }
    // anything NumPy reads (nested lists included): its shape, then its values
    let np = v.py().import("numpy").map_err(|_| {
        type_error("making a tensor of this value needs NumPy (`pip install numpy`); or pass a kiln array and a shape")
    })?;
    let arr = np.call_method1("asarray", (v,))?;
    let s: Vec<usize> = arr.getattr("shape")?.extract()?;
    let flat = arr.call_method0("ravel")?;
    let a = to_dyn(&flat, Some(ty))?.cast(ty);
    Ok((a, s))
}

/// The NumPy broadcast of two shapes.
pub fn broadcast_shape(a: &[usize], b: &[usize]) -> PyResult<Vec<usize>> {
    let n = a.len().max(b.len());
    let at = |s: &[usize], i: usize| {
        if i + s.len() >= n {
            s[i + s.len() - n]
        } else {
            1
        }
    };
    (0..n)
        .map(|i| match (at(a, i), at(b, i)) {
            (x, y) if x == y => Ok(x),
            (1, y) => Ok(y),
            (x, 1) => Ok(x),
            (x, y) => Err(value_error(format!(
                "shapes {a:?} and {b:?} do not broadcast (axis {i}: {x} vs {y}); reshape one of them"
            ))),
        })
        .collect()
}

/// `a` (flat, of `shape`) broadcast to `to`.
pub fn broadcast(a: &Dyn, shape: &[usize], to: &[usize]) -> PyResult<Dyn> {
    if shape == to {
        return Ok(a.clone());
    }
    each!(a, x => {
        let t = try_guard(|| Tensor::try_from_array(x.clone(), shape))?;
        Ok(try_guard(|| t.try_broadcast_to(to))?.into_array().into_dyn())
    })
}

/// A tensor operand: a tensor, a NumPy array or scalar (its shape and dtype), a kiln array or a
/// list (`[n]`), or a Python number (shape `()`); `None` for what is none of these.
pub fn operand(o: &Bound<PyAny>, like: Ty) -> PyResult<Option<(Dyn, Vec<usize>)>> {
    if let Ok(t) = o.cast::<TensorBase>() {
        let t = t.borrow();
        return Ok(Some((t.a.clone(), t.shape.clone())));
    }
    if !o.is_instance_of::<ArrayBase>() && o.hasattr("ndim")? && o.hasattr("__array_interface__")? {
        // a NumPy array of any rank, or a NumPy scalar (0-d): its values in its shape
        let shape: Vec<usize> = o.getattr("shape")?.extract()?;
        let flat = o.py().import("numpy")?.call_method1("ravel", (o,))?;
        return Ok(Some((crate::convert::operand_dyn(&flat, like)?, shape)));
    }
    let scalar = o.is_instance_of::<pyo3::types::PyInt>()
        || o.is_instance_of::<pyo3::types::PyFloat>()
        || o.is_instance_of::<pyo3::types::PyBool>();
    match crate::convert::operand_dyn(o, like) {
        Ok(d) if scalar => Ok(Some((d, vec![]))),
        Ok(d) => {
            let n = d.len();
            Ok(Some((d, vec![n])))
        }
        Err(e) if e.is_instance_of::<pyo3::exceptions::PyTypeError>(o.py()) => Ok(None),
        Err(e) => Err(e),
    }
}

fn tbin(
    slf: &Bound<TensorBase>,
    o: &Bound<PyAny>,
    op: Bin,
    reflected: bool,
) -> PyResult<Py<PyAny>> {
    let py = slf.py();
    let (a, sa) = {
        let t = slf.borrow();
        (t.a.clone(), t.shape.clone())
    };
    let Some((b, sb)) = operand(o, a.ty())? else {
        return Ok(py.NotImplemented());
    };
    let to = broadcast_shape(&sa, &sb)?;
    let (x, y) = (broadcast(&a, &sa, &to)?, broadcast(&b, &sb, &to)?);
    let r = if reflected {
        binary(op, &y, &x)?
    } else {
        binary(op, &x, &y)?
    };
    wrap_tensor(py, r, to)
}

/// `t op= o` on the tensor itself (its identity kept, as Dr.Jit's and NumPy's tensors do). The
/// result's shape may grow by broadcasting (Dr.Jit allows it); a wider type of the same kind is
/// cast back (NumPy's `same_kind`), another kind is an error naming the out-of-place form.
fn tinplace(slf: &Bound<TensorBase>, o: &Bound<PyAny>, op: Bin) -> PyResult<()> {
    let (a, sa) = {
        let t = slf.borrow();
        (t.a.clone(), t.shape.clone())
    };
    let refuse = |what: String| {
        type_error(format!(
            "`x {}= y` on a {} of shape {sa:?}: {what}; write `x = x {} y` to bind x to a new tensor instead",
            op.symbol(),
            a.ty().class_name(),
            op.symbol()
        ))
    };
    let Some((b, sb)) = operand(o, a.ty())? else {
        let other = o
            .get_type()
            .name()
            .map(|n| n.to_string())
            .unwrap_or_default();
        return Err(refuse(format!("y is a {other}")));
    };
    let to = broadcast_shape(&sa, &sb)?;
    let (x, y) = (broadcast(&a, &sa, &to)?, broadcast(&b, &sb, &to)?);
    let r = binary(op, &x, &y)?;
    let (from, got) = (a.ty(), r.ty());
    let r = if from == got {
        r
    } else if (from.is_float() && got.is_float()) || (from.is_int() && got.is_int()) {
        r.cast(from)
    } else {
        return Err(refuse(format!("the result is a {}", got.class_name())));
    };
    drop((a, x, y));
    let mut t = slf.borrow_mut();
    t.a = r;
    t.shape = to;
    Ok(())
}

/// `a op b` when either is a tensor (NumPy's broadcasting, the result a tensor); `None` when
/// neither is, for the caller's array path.
pub fn tensor_binary(a: &Bound<PyAny>, b: &Bound<PyAny>, op: Bin) -> PyResult<Option<Py<PyAny>>> {
    let py = a.py();
    let ta = a.cast::<TensorBase>().ok();
    let tb = b.cast::<TensorBase>().ok();
    let like = match (&ta, &tb) {
        (Some(t), _) | (None, Some(t)) => t.borrow().a.ty(),
        (None, None) => return Ok(None),
    };
    let Some((x, sx)) = operand(a, like)? else {
        return Ok(None);
    };
    let Some((y, sy)) = operand(b, like)? else {
        return Ok(None);
    };
    let to = broadcast_shape(&sx, &sy)?;
    let r = binary(op, &broadcast(&x, &sx, &to)?, &broadcast(&y, &sy, &to)?)?;
    Ok(Some(wrap_tensor(py, r, to)?))
}

/// One index argument as a slice of kiln's tensor views.
fn slice_arg(x: &Bound<PyAny>, dim: usize) -> PyResult<kiln::tensor::SliceArg> {
    if x.is_instance_of::<pyo3::types::PyBool>() {
        return Err(type_error(
            "tensors are indexed by integers and slices; a bool (NumPy's boolean indexing) is not supported",
        ));
    }
    if let Ok(s) = x.cast::<PySlice>() {
        // clamped to the axis as NumPy and Python do (`t[:, 5:]` on 3 columns is empty)
        let ind = s.indices(dim as isize)?;
        let (start, step, len) = (ind.start, ind.step, ind.slicelength);
        if len == 0 {
            return Ok(kiln::tensor::SliceArg::Range {
                start: Some(0),
                stop: Some(0),
                step: 1,
            });
        }
        let last = start + step * (len as isize - 1);
        let stop = last + step.signum();
        return Ok(kiln::tensor::SliceArg::Range {
            start: Some(start),
            stop: if stop < 0 { None } else { Some(stop) },
            step,
        });
    }
    if let Ok(s) = x.cast::<PySlice>() {
        let get = |n: &str| -> PyResult<Option<isize>> {
            let v = s.getattr(n)?;
            if v.is_none() {
                Ok(None)
            } else {
                Ok(Some(v.extract()?))
            }
        };
        return Ok(kiln::tensor::SliceArg::Range {
            start: get("start")?,
            stop: get("stop")?,
            step: get("step")?.unwrap_or(1),
        });
    }
    let i: isize = x
        .extract()
        .map_err(|_| type_error("tensors are indexed by integers and slices (one per axis)"))?;
    Ok(kiln::tensor::SliceArg::Index(i))
}

#[pymethods]
impl TensorBase {
    /// The flat array (row-major), as the array class of the element type.
    #[getter]
    fn array(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        wrap(py, self.a.clone())
    }
    #[getter]
    fn shape<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        PyTuple::new(py, &self.shape)
    }
    #[getter]
    fn ndim(&self) -> usize {
        self.shape.len()
    }
    /// The gradient, a tensor of the same shape (Dr.Jit's `x.grad`); settable (a number, an
    /// array or a tensor of the same size).
    #[getter]
    fn get_grad(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        let g = crate::ad::grad_of(py, &self.a)?;
        let d = g.bind(py).cast::<ArrayBase>()?.borrow().a.clone();
        wrap_tensor(py, d, self.shape.clone())
    }
    #[setter]
    fn set_grad(&self, g: &Bound<PyAny>) -> PyResult<()> {
        match g.cast::<TensorBase>() {
            Ok(t) => {
                let flat = wrap(g.py(), t.borrow().a.clone())?;
                crate::ad::set_grad_of(&self.a, flat.bind(g.py()), false)
            }
            Err(_) => crate::ad::set_grad_of(&self.a, g, false),
        }
    }
    fn __len__(&self) -> PyResult<usize> {
        self.shape
            .first()
            .copied()
            .ok_or_else(|| type_error("len() of a tensor of rank 0"))
    }
    /// The values as a NumPy array of the tensor's shape (a read-only view once evaluated).
    fn numpy(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        let flat = to_numpy(py, &self.a)?;
        Ok(flat
            .bind(py)
            .call_method1("reshape", (self.shape.clone(),))?
            .unbind())
    }
    #[pyo3(signature = (dtype = None, copy = None))]
    fn __array__(
        &self,
        py: Python<'_>,
        dtype: Option<&Bound<PyAny>>,
        copy: Option<bool>,
    ) -> PyResult<Py<PyAny>> {
        let mut out = self.numpy(py)?.into_bound(py);
        if let Some(d) = dtype.filter(|d| !d.is_none()) {
            out = out.call_method1("astype", (d,))?;
        }
        if copy == Some(true) {
            out = out.call_method0("copy")?;
        }
        Ok(out.unbind())
    }
    #[classattr]
    fn __array_ufunc__(py: Python<'_>) -> Py<PyAny> {
        py.None()
    }
    /// DLPack export, as for arrays (zero copy and read-only for DLPack ≥ 1.0 consumers).
    #[pyo3(signature = (*, stream = None, max_version = None, dl_device = None, copy = None))]
    fn __dlpack__(
        &self,
        py: Python<'_>,
        stream: Option<&Bound<PyAny>>,
        max_version: Option<&Bound<PyAny>>,
        dl_device: Option<&Bound<PyAny>>,
        copy: Option<bool>,
    ) -> PyResult<Py<PyAny>> {
        crate::array::dlpack(py, self.numpy(py)?, stream, max_version, dl_device, copy)
    }
    fn __dlpack_device__(&self) -> (i32, i32) {
        (1, 0)
    }
    fn tolist(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        Ok(self.numpy(py)?.bind(py).call_method0("tolist")?.unbind())
    }
    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        let a = self.a.clone();
        let shape = self.shape.clone();
        crate::gil::detach(
            py,
            || each!(&a, x => try_guard(|| Ok(Tensor::try_from_array(x.clone(), &shape)?.to_string()))),
        )
    }
    /// A lazy view: integers drop an axis, slices keep it (NumPy's basic indexing).
    fn __getitem__(&self, py: Python<'_>, index: &Bound<PyAny>) -> PyResult<Py<PyAny>> {
        let args: Vec<kiln::tensor::SliceArg> = match index.cast::<PyTuple>() {
            Ok(t) => t
                .iter()
                .enumerate()
                .map(|(i, x)| slice_arg(&x, self.shape.get(i).copied().unwrap_or(0)))
                .collect::<PyResult<_>>()?,
            Err(_) => vec![slice_arg(index, self.shape.first().copied().unwrap_or(0))?],
        };
        let shape = self.shape.clone();
        let (a, s) = each!(&self.a, x => {
            let t = try_guard(|| Tensor::try_from_array(x.clone(), &shape)?.try_slice(&args))?;
            let s = t.shape().to_vec();
            (t.into_array().into_dyn(), s)
        });
        // every axis indexed: a 0-d tensor, as in Dr.Jit (it keeps a gradient; `float()` reads it)
        wrap_tensor(py, a, s)
    }
    /// The same values in another shape.
    #[pyo3(signature = (*shape))]
    fn reshape(&self, py: Python<'_>, shape: &Bound<PyTuple>) -> PyResult<Py<PyAny>> {
        let given: Vec<i64> = if shape.len() == 1 && shape.get_item(0)?.is_instance_of::<PyTuple>()
        {
            shape.get_item(0)?.extract()?
        } else {
            shape.extract()?
        };
        // one -1 takes what the others leave, as in NumPy
        let known: i64 = given
            .iter()
            .filter(|&&d| d != -1)
            .try_fold(1i64, |n, &d| n.checked_mul(d))
            .ok_or_else(|| {
                value_error(format!(
                    "reshape: the shape {given:?} has more elements than memory can address"
                ))
            })?;
        if given.iter().filter(|&&d| d == -1).count() > 1 || given.iter().any(|&d| d < -1) {
            return Err(value_error(format!(
                "reshape: at most one -1 and no other negative size, got {given:?}"
            )));
        }
        let s: Vec<usize> = given
            .iter()
            .map(|&d| {
                if d == -1 {
                    if known == 0 {
                        0
                    } else {
                        self.a.len() / known as usize
                    }
                } else {
                    d as usize
                }
            })
            .collect();
        if checked_numel(&s)? != self.a.len() {
            return Err(value_error(format!(
                "cannot reshape a tensor of shape {:?} ({} values) to {s:?}",
                self.shape,
                self.a.len()
            )));
        }
        wrap_tensor(py, self.a.clone(), s)
    }
    /// Matrix product of float tensors, with NumPy's `matmul` rules: leading axes are batches
    /// that broadcast, a 1-D operand is a row (left) or a column (right).
    fn __matmul__(&self, py: Python<'_>, o: &Bound<TensorBase>) -> PyResult<Py<PyAny>> {
        let o = o.borrow();
        let (a, b) = crate::ops::promote(&self.a, &o.a);
        let (sa, sb) = (self.shape.clone(), o.shape.clone());
        let r = match (&*a, &*b) {
            (Dyn::F32(x), Dyn::F32(y)) => matmul(x, &sa, y, &sb)?,
            (Dyn::F64(x), Dyn::F64(y)) => matmul(x, &sa, y, &sb)?,
            _ => {
                return Err(type_error(
                    "`@` multiplies float tensors (TensorXf, TensorXf64)",
                ))
            }
        };
        wrap_tensor(py, r.0, r.1)
    }
    fn __add__(slf: &Bound<Self>, o: &Bound<PyAny>) -> PyResult<Py<PyAny>> {
        tbin(slf, o, Bin::Add, false)
    }
    fn __iadd__(slf: &Bound<Self>, o: &Bound<PyAny>) -> PyResult<()> {
        tinplace(slf, o, Bin::Add)
    }
    fn __isub__(slf: &Bound<Self>, o: &Bound<PyAny>) -> PyResult<()> {
        tinplace(slf, o, Bin::Sub)
    }
    fn __imul__(slf: &Bound<Self>, o: &Bound<PyAny>) -> PyResult<()> {
        tinplace(slf, o, Bin::Mul)
    }
    fn __itruediv__(slf: &Bound<Self>, o: &Bound<PyAny>) -> PyResult<()> {
        tinplace(slf, o, Bin::TrueDiv)
    }
    fn __ipow__(slf: &Bound<Self>, o: &Bound<PyAny>, _m: &Bound<PyAny>) -> PyResult<()> {
        tinplace(slf, o, Bin::Pow)
    }
    fn __ifloordiv__(slf: &Bound<Self>, o: &Bound<PyAny>) -> PyResult<()> {
        tinplace(slf, o, Bin::FloorDiv)
    }
    fn __imod__(slf: &Bound<Self>, o: &Bound<PyAny>) -> PyResult<()> {
        tinplace(slf, o, Bin::Mod)
    }
    fn __iand__(slf: &Bound<Self>, o: &Bound<PyAny>) -> PyResult<()> {
        tinplace(slf, o, Bin::And)
    }
    fn __ior__(slf: &Bound<Self>, o: &Bound<PyAny>) -> PyResult<()> {
        tinplace(slf, o, Bin::Or)
    }
    fn __ixor__(slf: &Bound<Self>, o: &Bound<PyAny>) -> PyResult<()> {
        tinplace(slf, o, Bin::Xor)
    }
    fn __ilshift__(slf: &Bound<Self>, o: &Bound<PyAny>) -> PyResult<()> {
        tinplace(slf, o, Bin::Shl)
    }
    fn __irshift__(slf: &Bound<Self>, o: &Bound<PyAny>) -> PyResult<()> {
        tinplace(slf, o, Bin::Shr)
    }
    fn __radd__(slf: &Bound<Self>, o: &Bound<PyAny>) -> PyResult<Py<PyAny>> {
        tbin(slf, o, Bin::Add, true)
    }
    fn __sub__(slf: &Bound<Self>, o: &Bound<PyAny>) -> PyResult<Py<PyAny>> {
        tbin(slf, o, Bin::Sub, false)
    }
    fn __rsub__(slf: &Bound<Self>, o: &Bound<PyAny>) -> PyResult<Py<PyAny>> {
        tbin(slf, o, Bin::Sub, true)
    }
    fn __mul__(slf: &Bound<Self>, o: &Bound<PyAny>) -> PyResult<Py<PyAny>> {
        tbin(slf, o, Bin::Mul, false)
    }
    fn __rmul__(slf: &Bound<Self>, o: &Bound<PyAny>) -> PyResult<Py<PyAny>> {
        tbin(slf, o, Bin::Mul, true)
    }
    fn __truediv__(slf: &Bound<Self>, o: &Bound<PyAny>) -> PyResult<Py<PyAny>> {
        tbin(slf, o, Bin::TrueDiv, false)
    }
    fn __rtruediv__(slf: &Bound<Self>, o: &Bound<PyAny>) -> PyResult<Py<PyAny>> {
        tbin(slf, o, Bin::TrueDiv, true)
    }
    fn __pow__(
        slf: &Bound<Self>,
        o: &Bound<PyAny>,
        _m: Option<&Bound<PyAny>>,
    ) -> PyResult<Py<PyAny>> {
        tbin(slf, o, Bin::Pow, false)
    }
    fn __rpow__(
        slf: &Bound<Self>,
        o: &Bound<PyAny>,
        _m: Option<&Bound<PyAny>>,
    ) -> PyResult<Py<PyAny>> {
        tbin(slf, o, Bin::Pow, true)
    }
    fn __floordiv__(slf: &Bound<Self>, o: &Bound<PyAny>) -> PyResult<Py<PyAny>> {
        tbin(slf, o, Bin::FloorDiv, false)
    }
    fn __mod__(slf: &Bound<Self>, o: &Bound<PyAny>) -> PyResult<Py<PyAny>> {
        tbin(slf, o, Bin::Mod, false)
    }
    fn __rfloordiv__(slf: &Bound<Self>, o: &Bound<PyAny>) -> PyResult<Py<PyAny>> {
        tbin(slf, o, Bin::FloorDiv, true)
    }
    fn __rmod__(slf: &Bound<Self>, o: &Bound<PyAny>) -> PyResult<Py<PyAny>> {
        tbin(slf, o, Bin::Mod, true)
    }
    fn __and__(slf: &Bound<Self>, o: &Bound<PyAny>) -> PyResult<Py<PyAny>> {
        tbin(slf, o, Bin::And, false)
    }
    fn __rand__(slf: &Bound<Self>, o: &Bound<PyAny>) -> PyResult<Py<PyAny>> {
        tbin(slf, o, Bin::And, true)
    }
    fn __or__(slf: &Bound<Self>, o: &Bound<PyAny>) -> PyResult<Py<PyAny>> {
        tbin(slf, o, Bin::Or, false)
    }
    fn __ror__(slf: &Bound<Self>, o: &Bound<PyAny>) -> PyResult<Py<PyAny>> {
        tbin(slf, o, Bin::Or, true)
    }
    fn __xor__(slf: &Bound<Self>, o: &Bound<PyAny>) -> PyResult<Py<PyAny>> {
        tbin(slf, o, Bin::Xor, false)
    }
    fn __rxor__(slf: &Bound<Self>, o: &Bound<PyAny>) -> PyResult<Py<PyAny>> {
        tbin(slf, o, Bin::Xor, true)
    }
    fn __lshift__(slf: &Bound<Self>, o: &Bound<PyAny>) -> PyResult<Py<PyAny>> {
        tbin(slf, o, Bin::Shl, false)
    }
    fn __rlshift__(slf: &Bound<Self>, o: &Bound<PyAny>) -> PyResult<Py<PyAny>> {
        tbin(slf, o, Bin::Shl, true)
    }
    fn __rshift__(slf: &Bound<Self>, o: &Bound<PyAny>) -> PyResult<Py<PyAny>> {
        tbin(slf, o, Bin::Shr, false)
    }
    fn __rrshift__(slf: &Bound<Self>, o: &Bound<PyAny>) -> PyResult<Py<PyAny>> {
        tbin(slf, o, Bin::Shr, true)
    }
    fn __neg__(slf: &Bound<Self>) -> PyResult<Py<PyAny>> {
        self_flat(slf, "__neg__")
    }
    fn __pos__(slf: &Bound<Self>) -> PyResult<Py<PyAny>> {
        Ok(slf.clone().into_any().unbind())
    }
    fn __abs__(slf: &Bound<Self>) -> PyResult<Py<PyAny>> {
        self_flat(slf, "__abs__")
    }
    fn __invert__(slf: &Bound<Self>) -> PyResult<Py<PyAny>> {
        self_flat(slf, "__invert__")
    }
    /// The truth of a one-element tensor (a 0-d reduction's, say); more elements are ambiguous.
    fn __bool__(&self, py: Python<'_>) -> PyResult<bool> {
        self.one("bool", py)?.bind(py).is_truthy()
    }
    fn __float__(&self, py: Python<'_>) -> PyResult<f64> {
        self.one("float", py)?.bind(py).extract()
    }
    fn __int__(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        Ok(self
            .one("int", py)?
            .bind(py)
            .call_method0("__int__")?
            .unbind())
    }
    fn __richcmp__(slf: &Bound<Self>, o: &Bound<PyAny>, op: CompareOp) -> PyResult<Py<PyAny>> {
        let py = slf.py();
        let (a, sa) = {
            let t = slf.borrow();
            (t.a.clone(), t.shape.clone())
        };
        let Some((b, sb)) = operand(o, a.ty())? else {
            return Ok(py.NotImplemented());
        };
        let to = broadcast_shape(&sa, &sb)?;
        let (x, y) = (broadcast(&a, &sa, &to)?, broadcast(&b, &sb, &to)?);
        let cmp = match op {
            CompareOp::Lt => Cmp::Lt,
            CompareOp::Le => Cmp::Le,
            CompareOp::Gt => Cmp::Gt,
            CompareOp::Ge => Cmp::Ge,
            CompareOp::Eq => Cmp::Eq,
            CompareOp::Ne => Cmp::Ne,
        };
        wrap_tensor(py, Dyn::Bool(compare(cmp, &x, &y)?), to)
    }
    fn __hash__(&self) -> PyResult<isize> {
        Err(type_error("kiln tensors are unhashable"))
    }
}

impl TensorBase {
    /// The one value of a one-element tensor, for `bool()`, `float()` and `int()`.
    fn one(&self, what: &str, py: Python<'_>) -> PyResult<Py<PyAny>> {
        if self.a.len() != 1 {
            return Err(value_error(format!(
                "{what}() of a tensor of shape {:?} ({} values) is ambiguous: reduce it first (`kiln.all(t)`, `kiln.any(t)`, `kiln.sum(t)`)",
                self.shape,
                self.a.len()
            )));
        }
        crate::array::item(py, &self.a, 0)
    }
}

/// A unary operator of the flat array, in the tensor's shape (the arrays' operator decides what
/// each type allows).
fn self_flat(slf: &Bound<TensorBase>, method: &str) -> PyResult<Py<PyAny>> {
    let py = slf.py();
    let (a, shape) = {
        let t = slf.borrow();
        (t.a.clone(), t.shape.clone())
    };
    let r = wrap(py, a)?.bind(py).call_method0(method)?;
    let d = r.cast::<ArrayBase>()?.borrow().a.clone();
    wrap_tensor(py, d, shape)
}

fn matmul<T: kiln::Float>(
    x: &Array<T>,
    sa: &[usize],
    y: &Array<T>,
    sb: &[usize],
) -> PyResult<(Dyn, Vec<usize>)>
where
    Array<T>: IntoDyn,
{
    let r = try_guard(|| {
        let a = Tensor::try_from_array(x.clone(), sa)?;
        let b = Tensor::try_from_array(y.clone(), sb)?;
        a.try_matmul(&b)
    })?;
    let s = r.shape().to_vec();
    Ok((r.into_array().into_dyn(), s))
}

/// A typed kiln tensor of `a` (flat) and `shape`, cast to `T`.
pub fn typed<T: Scalar>(a: &Dyn, shape: &[usize]) -> PyResult<Tensor<T>> {
    each!(a, x => {
        let c: Array<T> = x.cast::<T>();
        try_guard(|| Tensor::try_from_array(c, shape))
    })
}

/// `dst` takes `src`'s value in place (both arrays of one class, or both tensors of one class):
/// the write-back of Dr.Jit's in-place semantics, where a loop's final state goes into the very
/// objects its body changed in place.
#[pyfunction]
pub fn _assign(dst: &Bound<PyAny>, src: &Bound<PyAny>) -> PyResult<()> {
    if !dst.get_type().is(src.get_type()) {
        return Err(type_error(format!(
            "kiln internal: assigning a {} into a {}",
            src.get_type().name()?,
            dst.get_type().name()?
        )));
    }
    if let (Ok(d), Ok(s)) = (dst.cast::<ArrayBase>(), src.cast::<ArrayBase>()) {
        let v = s.borrow().a.clone();
        d.borrow_mut().a = v;
        return Ok(());
    }
    if let (Ok(d), Ok(s)) = (dst.cast::<TensorBase>(), src.cast::<TensorBase>()) {
        let (v, shape) = {
            let s = s.borrow();
            (s.a.clone(), s.shape.clone())
        };
        let mut d = d.borrow_mut();
        d.a = v;
        d.shape = shape;
        return Ok(());
    }
    Err(type_error(format!(
        "kiln internal: cannot assign into a {}",
        dst.get_type().name()?
    )))
}
