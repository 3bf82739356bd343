//! The array classes: `kiln.ArrayBase` holds one kiln array of any element type, and `Float32`,
//! `Float64`, `Int32`, `UInt32`, `Int64`, `UInt64`, `Bool` are its subclasses (Dr.Jit's names), so
//! `isinstance` tells the type and every operator is written once. Values are immutable from
//! Python's side except through Dr.Jit's mutating calls (`scatter`, `x[i] = v`, `enable_grad`).
//!
//! NumPy sees an evaluated array without a copy (`numpy()`, `np.asarray(x)`): a read-only view of
//! kiln's buffer that holds its own reference to the array, so kiln never writes that buffer in
//! place or frees it while the view lives.

use crate::convert::to_dyn;
use crate::dynarray::{Dyn, Ty};
use crate::errors::{guard, index_error, try_guard, type_error, value_error};
use crate::ops::{binary, compare, Bin, Cmp};
use kiln::{Array, Scalar};
use pyo3::basic::CompareOp;
use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PySlice, PyTuple};
use pyo3::PyClassInitializer;

/// A one-dimensional kiln array: lazy (traced, fused, compiled on first use) until a value is
/// needed. Construct one of the subclasses (`Float32([1, 2, 3])`).
#[pyclass(name = "ArrayBase", module = "kiln", subclass)]
pub struct ArrayBase {
    pub a: Dyn,
}

macro_rules! subclasses {
    ($($name:ident $ty:ident $doc:literal),*) => {$(
        #[doc = $doc]
        #[pyclass(extends = ArrayBase, module = "kiln")]
        pub struct $name;

        #[pymethods]
        impl $name {
            #[new]
            #[pyo3(signature = (*args))]
            fn new(args: &Bound<PyTuple>) -> PyResult<(Self, ArrayBase)> {
                Ok(($name, ArrayBase { a: construct(args, Ty::$ty)? }))
            }
        }
    )*

    /// `a` as an instance of the class of its element type.
    pub fn wrap(py: Python<'_>, a: Dyn) -> PyResult<Py<PyAny>> {
        let ty = a.ty();
        let base = PyClassInitializer::from(ArrayBase { a });
        Ok(match ty {
            $(Ty::$ty => Py::new(py, base.add_subclass($name))?.into_any(),)*
        })
    }

    /// The class of an element type.
    pub fn class_of(py: Python<'_>, ty: Ty) -> Bound<'_, pyo3::types::PyType> {
        match ty {
            $(Ty::$ty => py.get_type::<$name>(),)*
        }
    }

    /// Put the classes on the module.
    pub fn register(m: &Bound<PyModule>) -> PyResult<()> {
        m.add_class::<ArrayBase>()?;
        $(m.add_class::<$name>()?;)*
        m.add_class::<Exported>()?;
        Ok(())
    }
    };
}

subclasses!(
    Float32 F32 "Array of 32-bit floats (Dr.Jit's `Float`/`Float32`). `Float32(1, 2)`, `Float32([1.0, 2.0])`, `Float32(numpy_array)`, `Float32(other_array)` (a cast).",
    Float64 F64 "Array of 64-bit floats. Constructed like `Float32`.",
    Int32 I32 "Array of 32-bit signed integers. Constructed like `Float32`.",
    UInt32 U32 "Array of 32-bit unsigned integers. Constructed like `Float32`.",
    Int64 I64 "Array of 64-bit signed integers. Constructed like `Float32`.",
    UInt64 U64 "Array of 64-bit unsigned integers. Constructed like `Float32`.",
    Bool Bool "Array of masks (`x < 1`). Constructed like `Float32`."
);

/// The element type a class names (`kiln.Float32` → `F32`), for functions such as `arange(Float32, n)`.
pub fn ty_of_class(cls: &Bound<PyAny>) -> PyResult<Ty> {
    let py = cls.py();
    for ty in [
        Ty::Bool,
        Ty::I32,
        Ty::U32,
        Ty::I64,
        Ty::U64,
        Ty::F32,
        Ty::F64,
    ] {
        if cls.is(class_of(py, ty)) {
            return Ok(ty);
        }
    }
    Err(type_error(format!(
        "expected an array class (kiln.Float32, kiln.Int32, …), got {}",
        cls.repr()?
    )))
}

/// A new array of `ty` from constructor arguments: none (an empty array), one value (a number,
/// a list, a NumPy array, another kiln array, which is cast), or several numbers.
fn construct(args: &Bound<PyTuple>, ty: Ty) -> PyResult<Dyn> {
    let d = match args.len() {
        0 => return crate::convert::from_bytes(&[], ty),
        1 => to_dyn(&args.get_item(0)?, Some(ty))?.cast(ty),
        _ => to_dyn(args.as_any(), Some(ty))?.cast(ty),
    };
    Ok(detached_if_suspended(d))
}

/// Dr.Jit's rule for constructors: an array copied while derivatives are suspended is a detached
/// copy (it does not track them when `resume_grad()` turns recording on again).
pub fn detached_if_suspended(d: Dyn) -> Dyn {
    if kiln::ad::grad_recording() {
        return d;
    }
    crate::float!(&d, x => crate::dynarray::IntoDyn::into_dyn(x.detach()), else d)
}

/// Element `i` (counted from the end when negative) as a Python number.
pub fn item(py: Python<'_>, a: &Dyn, i: isize) -> PyResult<Py<PyAny>> {
    crate::reads::check("reading an element")?;
    let n = a.len() as isize;
    let j = if i < 0 { i + n } else { i };
    if j < 0 || j >= n {
        return Err(index_error(format!(
            "index {i} is out of range for an array of {n} element{}",
            if n == 1 { "" } else { "s" }
        )));
    }
    let a = a.clone();
    macro_rules! get {
        ($x:expr) => {{
            let x = $x.clone();
            let v = crate::gil::detach(py, || try_guard(|| x.try_at(j)?.try_item()))?;
            v.into_pyobject(py)?.into_any().unbind()
        }};
    }
    Ok(match &a {
        Dyn::Bool(x) => {
            let x = x.clone();
            let v = crate::gil::detach(py, || try_guard(|| x.try_at(j)?.try_item()))?;
            pyo3::types::PyBool::new(py, v)
                .to_owned()
                .into_any()
                .unbind()
        }
        Dyn::I32(x) => get!(x),
        Dyn::U32(x) => get!(x),
        Dyn::I64(x) => get!(x),
        Dyn::U64(x) => get!(x),
        Dyn::F32(x) => get!(x),
        Dyn::F64(x) => get!(x),
    })
}

/// Evaluate `a` with the GIL released (other Python threads run while kernels compile and run).
pub fn eval_released(py: Python<'_>, a: &Dyn) -> PyResult<()> {
    let a = a.clone();
    crate::gil::detach(py, || {
        try_guard(|| each!(&a, x => x.try_eval().map(|_| ())))
    })
}

fn values_of<T: Scalar>(py: Python<'_>, x: &Array<T>) -> PyResult<Vec<T>> {
    crate::reads::check("reading values (tolist)")?;
    let x = x.clone();
    crate::gil::detach(py, || try_guard(|| x.try_to_vec()))
}

#[pymethods]
impl ArrayBase {
    // ---- arithmetic -------------------------------------------------------------------------

    fn __add__(slf: &Bound<Self>, o: &Bound<PyAny>) -> PyResult<Py<PyAny>> {
        bin(slf, o, Bin::Add, false)
    }
    fn __radd__(slf: &Bound<Self>, o: &Bound<PyAny>) -> PyResult<Py<PyAny>> {
        bin(slf, o, Bin::Add, true)
    }
    fn __sub__(slf: &Bound<Self>, o: &Bound<PyAny>) -> PyResult<Py<PyAny>> {
        bin(slf, o, Bin::Sub, false)
    }
    fn __rsub__(slf: &Bound<Self>, o: &Bound<PyAny>) -> PyResult<Py<PyAny>> {
        bin(slf, o, Bin::Sub, true)
    }
    fn __mul__(slf: &Bound<Self>, o: &Bound<PyAny>) -> PyResult<Py<PyAny>> {
        bin(slf, o, Bin::Mul, false)
    }
    fn __rmul__(slf: &Bound<Self>, o: &Bound<PyAny>) -> PyResult<Py<PyAny>> {
        bin(slf, o, Bin::Mul, true)
    }
    fn __truediv__(slf: &Bound<Self>, o: &Bound<PyAny>) -> PyResult<Py<PyAny>> {
        bin(slf, o, Bin::TrueDiv, false)
    }
    fn __rtruediv__(slf: &Bound<Self>, o: &Bound<PyAny>) -> PyResult<Py<PyAny>> {
        bin(slf, o, Bin::TrueDiv, true)
    }
    fn __floordiv__(slf: &Bound<Self>, o: &Bound<PyAny>) -> PyResult<Py<PyAny>> {
        bin(slf, o, Bin::FloorDiv, false)
    }
    fn __rfloordiv__(slf: &Bound<Self>, o: &Bound<PyAny>) -> PyResult<Py<PyAny>> {
        bin(slf, o, Bin::FloorDiv, true)
    }
    fn __mod__(slf: &Bound<Self>, o: &Bound<PyAny>) -> PyResult<Py<PyAny>> {
        bin(slf, o, Bin::Mod, false)
    }
    fn __rmod__(slf: &Bound<Self>, o: &Bound<PyAny>) -> PyResult<Py<PyAny>> {
        bin(slf, o, Bin::Mod, true)
    }
    fn __pow__(
        slf: &Bound<Self>,
        o: &Bound<PyAny>,
        m: Option<&Bound<PyAny>>,
    ) -> PyResult<Py<PyAny>> {
        if m.is_some_and(|m| !m.is_none()) {
            return Err(type_error(
                "pow() with a modulus is not supported for kiln arrays",
            ));
        }
        bin(slf, o, Bin::Pow, false)
    }
    fn __rpow__(
        slf: &Bound<Self>,
        o: &Bound<PyAny>,
        _m: Option<&Bound<PyAny>>,
    ) -> PyResult<Py<PyAny>> {
        bin(slf, o, Bin::Pow, true)
    }
    fn __and__(slf: &Bound<Self>, o: &Bound<PyAny>) -> PyResult<Py<PyAny>> {
        bin(slf, o, Bin::And, false)
    }
    fn __rand__(slf: &Bound<Self>, o: &Bound<PyAny>) -> PyResult<Py<PyAny>> {
        bin(slf, o, Bin::And, true)
    }
    fn __or__(slf: &Bound<Self>, o: &Bound<PyAny>) -> PyResult<Py<PyAny>> {
        bin(slf, o, Bin::Or, false)
    }
    fn __ror__(slf: &Bound<Self>, o: &Bound<PyAny>) -> PyResult<Py<PyAny>> {
        bin(slf, o, Bin::Or, true)
    }
    fn __xor__(slf: &Bound<Self>, o: &Bound<PyAny>) -> PyResult<Py<PyAny>> {
        bin(slf, o, Bin::Xor, false)
    }
    fn __rxor__(slf: &Bound<Self>, o: &Bound<PyAny>) -> PyResult<Py<PyAny>> {
        bin(slf, o, Bin::Xor, true)
    }
    fn __lshift__(slf: &Bound<Self>, o: &Bound<PyAny>) -> PyResult<Py<PyAny>> {
        bin(slf, o, Bin::Shl, false)
    }
    fn __rlshift__(slf: &Bound<Self>, o: &Bound<PyAny>) -> PyResult<Py<PyAny>> {
        bin(slf, o, Bin::Shl, true)
    }
    fn __rshift__(slf: &Bound<Self>, o: &Bound<PyAny>) -> PyResult<Py<PyAny>> {
        bin(slf, o, Bin::Shr, false)
    }
    fn __rrshift__(slf: &Bound<Self>, o: &Bound<PyAny>) -> PyResult<Py<PyAny>> {
        bin(slf, o, Bin::Shr, true)
    }
    // ---- in place (the object keeps its identity, as Dr.Jit's and NumPy's arrays do) --------

    fn __iadd__(slf: &Bound<Self>, o: &Bound<PyAny>) -> PyResult<()> {
        inplace(slf, o, Bin::Add)
    }
    fn __isub__(slf: &Bound<Self>, o: &Bound<PyAny>) -> PyResult<()> {
        inplace(slf, o, Bin::Sub)
    }
    fn __imul__(slf: &Bound<Self>, o: &Bound<PyAny>) -> PyResult<()> {
        inplace(slf, o, Bin::Mul)
    }
    fn __itruediv__(slf: &Bound<Self>, o: &Bound<PyAny>) -> PyResult<()> {
        inplace(slf, o, Bin::TrueDiv)
    }
    fn __ifloordiv__(slf: &Bound<Self>, o: &Bound<PyAny>) -> PyResult<()> {
        inplace(slf, o, Bin::FloorDiv)
    }
    fn __imod__(slf: &Bound<Self>, o: &Bound<PyAny>) -> PyResult<()> {
        inplace(slf, o, Bin::Mod)
    }
    fn __ipow__(slf: &Bound<Self>, o: &Bound<PyAny>, _m: &Bound<PyAny>) -> PyResult<()> {
        inplace(slf, o, Bin::Pow)
    }
    fn __iand__(slf: &Bound<Self>, o: &Bound<PyAny>) -> PyResult<()> {
        inplace(slf, o, Bin::And)
    }
    fn __ior__(slf: &Bound<Self>, o: &Bound<PyAny>) -> PyResult<()> {
        inplace(slf, o, Bin::Or)
    }
    fn __ixor__(slf: &Bound<Self>, o: &Bound<PyAny>) -> PyResult<()> {
        inplace(slf, o, Bin::Xor)
    }
    fn __ilshift__(slf: &Bound<Self>, o: &Bound<PyAny>) -> PyResult<()> {
        inplace(slf, o, Bin::Shl)
    }
    fn __irshift__(slf: &Bound<Self>, o: &Bound<PyAny>) -> PyResult<()> {
        inplace(slf, o, Bin::Shr)
    }

    fn __richcmp__(slf: &Bound<Self>, o: &Bound<PyAny>, op: CompareOp) -> PyResult<Py<PyAny>> {
        let py = slf.py();
        let a = slf.borrow().a.clone();
        let Some(b) = operand(o, a.ty())? else {
            return Ok(py.NotImplemented());
        };
        let cmp = match op {
            CompareOp::Lt => Cmp::Lt,
            CompareOp::Le => Cmp::Le,
            CompareOp::Gt => Cmp::Gt,
            CompareOp::Ge => Cmp::Ge,
            CompareOp::Eq => Cmp::Eq,
            CompareOp::Ne => Cmp::Ne,
        };
        wrap(py, Dyn::Bool(compare(cmp, &a, &b)?))
    }
    fn __neg__(slf: &Bound<Self>) -> PyResult<Py<PyAny>> {
        let py = slf.py();
        let a = slf.borrow().a.clone();
        let r = match &a {
            Dyn::Bool(_) => return Err(type_error("`-` is not defined for masks: use `~mask`")),
            Dyn::I32(x) => guard(|| Dyn::I32(-x))?,
            Dyn::I64(x) => guard(|| Dyn::I64(-x))?,
            Dyn::F32(x) => guard(|| Dyn::F32(-x))?,
            Dyn::F64(x) => guard(|| Dyn::F64(-x))?,
            // unsigned: wraps around, as in Dr.Jit and C
            Dyn::U32(x) => guard(|| Dyn::U32(Array::scalar(0u32) - x))?,
            Dyn::U64(x) => guard(|| Dyn::U64(Array::scalar(0u64) - x))?,
        };
        wrap(py, r)
    }
    fn __pos__(slf: &Bound<Self>) -> PyResult<Py<PyAny>> {
        Ok(slf.clone().into_any().unbind())
    }
    fn __abs__(slf: &Bound<Self>) -> PyResult<Py<PyAny>> {
        crate::funcs::unary(slf.py(), crate::funcs::Un::Abs, &slf.borrow().a)
    }
    fn __invert__(slf: &Bound<Self>) -> PyResult<Py<PyAny>> {
        let py = slf.py();
        let a = slf.borrow().a.clone();
        let r = bitwise!(&a, x => guard(|| crate::dynarray::IntoDyn::into_dyn(!x))?, else {
            return Err(type_error("`~` takes integers or masks, not floats"))
        });
        wrap(py, r)
    }

    // ---- size, values, conversion ----------------------------------------------------------

    fn __len__(&self) -> usize {
        self.a.len()
    }
    /// `x[i]` is element `i` as a Python number; `x[a:b:s]` a lazy slice; `x[index_array]` a gather.
    fn __getitem__(slf: &Bound<Self>, i: &Bound<PyAny>) -> PyResult<Py<PyAny>> {
        let py = slf.py();
        let a = slf.borrow().a.clone();
        if let Ok(s) = i.cast::<PySlice>() {
            let ind = s.indices(a.len() as isize)?;
            let idx = crate::funcs::arange_dyn(
                Ty::I64,
                ind.start as i64,
                ind.step as i64,
                ind.slicelength,
            )?;
            return wrap(py, crate::funcs::gather_dyn(&a, &idx, None)?);
        }
        if let Ok(idx) = i.cast::<ArrayBase>() {
            return wrap(py, crate::funcs::gather_dyn(&a, &idx.borrow().a, None)?);
        }
        let j: isize = i.extract().map_err(|_| {
            type_error(format!(
                "arrays are indexed by an integer, a slice or an integer array, not a `{}`",
                i.get_type()
                    .name()
                    .map(|n| n.to_string())
                    .unwrap_or_default()
            ))
        })?;
        item(py, &a, j)
    }
    /// `x[i] = v` writes element `i` (a scatter, as in Dr.Jit); `x[index_array] = values` too.
    fn __setitem__(mut slf: PyRefMut<Self>, i: &Bound<PyAny>, v: &Bound<PyAny>) -> PyResult<()> {
        let n = slf.a.len() as i64;
        let idx = if let Ok(ia) = i.cast::<ArrayBase>() {
            ia.borrow().a.clone()
        } else {
            let j: i64 = i
                .extract()
                .map_err(|_| type_error("x[i] = v takes an integer or an integer array as i"))?;
            let k = if j < 0 { j + n } else { j };
            if k < 0 || k >= n {
                return Err(index_error(format!(
                    "index {j} is out of range for an array of {n} elements"
                )));
            }
            Dyn::I64(Array::scalar(k))
        };
        let value = to_dyn(v, Some(slf.a.ty()))?;
        crate::funcs::scatter_into(&mut slf.a, &value, &idx, None, kiln::ReduceOp::None)
    }
    fn __bool__(&self, py: Python<'_>) -> PyResult<bool> {
        if self.a.len() != 1 {
            return Err(value_error(format!(
                "the truth value of an array of {} elements is ambiguous: use kiln.all(x) or kiln.any(x)",
                self.a.len()
            )));
        }
        item(py, &self.a.cast(Ty::Bool), 0)?.bind(py).is_truthy()
    }
    fn __float__(&self, py: Python<'_>) -> PyResult<f64> {
        self.one(py)?.bind(py).extract::<f64>()
    }
    fn __int__(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        let v = self.one(py)?;
        Ok(py.import("builtins")?.getattr("int")?.call1((v,))?.unbind())
    }
    fn __index__(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        if !self.a.ty().is_int() {
            return Err(type_error(
                "only integer arrays of one element can be used as an index",
            ));
        }
        self.one(py)
    }
    fn __hash__(&self) -> PyResult<isize> {
        Err(PyTypeError::new_err(
            "kiln arrays are unhashable (== compares lane by lane)",
        ))
    }
    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        self.__str__(py)
    }
    fn __str__(&self, py: Python<'_>) -> PyResult<String> {
        if let Some(what) = crate::reads::refused() {
            // printing inside a trace shows what the value is, not the trace's values
            return Ok(format!(
                "<{} of {} traced inside {what}>",
                self.a.ty().class_name(),
                self.a.len()
            ));
        }
        let a = self.a.clone();
        crate::gil::detach(py, || guard(|| each!(&a, x => x.to_string())))
    }
    /// The values as a Python list.
    fn tolist(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        Ok(match &self.a {
            Dyn::Bool(x) => values_of(py, x)?.into_pyobject(py)?.into_any().unbind(),
            Dyn::I32(x) => values_of(py, x)?.into_pyobject(py)?.into_any().unbind(),
            Dyn::U32(x) => values_of(py, x)?.into_pyobject(py)?.into_any().unbind(),
            Dyn::I64(x) => values_of(py, x)?.into_pyobject(py)?.into_any().unbind(),
            Dyn::U64(x) => values_of(py, x)?.into_pyobject(py)?.into_any().unbind(),
            Dyn::F32(x) => values_of(py, x)?.into_pyobject(py)?.into_any().unbind(),
            Dyn::F64(x) => values_of(py, x)?.into_pyobject(py)?.into_any().unbind(),
        })
    }
    /// The values as a NumPy array: a read-only view of kiln's buffer (no copy) once evaluated.
    fn numpy(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        to_numpy(py, &self.a)
    }
    #[pyo3(signature = (dtype = None, copy = None))]
    fn __array__(
        &self,
        py: Python<'_>,
        dtype: Option<&Bound<PyAny>>,
        copy: Option<bool>,
    ) -> PyResult<Py<PyAny>> {
        let mut out = to_numpy(py, &self.a)?.into_bound(py);
        if let Some(d) = dtype.filter(|d| !d.is_none()) {
            out = out.call_method1("astype", (d,))?;
        }
        if copy == Some(true) {
            out = out.call_method0("copy")?;
        }
        Ok(out.unbind())
    }
    /// DLPack export (zero copy, read-only) for consumers of DLPack ≥ 1.0; an older consumer
    /// gets a copy, since it cannot be told the memory is read-only.
    #[pyo3(signature = (*, stream = None, max_version = None, dl_device = None, copy = None))]
    fn __dlpack__(
        &self,
        py: Python<'_>,
        stream: Option<&Bound<PyAny>>,
        max_version: Option<&Bound<PyAny>>,
        dl_device: Option<&Bound<PyAny>>,
        copy: Option<bool>,
    ) -> PyResult<Py<PyAny>> {
        dlpack(
            py,
            to_numpy(py, &self.a)?,
            stream,
            max_version,
            dl_device,
            copy,
        )
    }
    /// The device of the buffer: the CPU (DLPack's `(kDLCPU, 0)`).
    fn __dlpack_device__(&self) -> (i32, i32) {
        (1, 0)
    }
    /// NumPy defers to kiln's operators when a NumPy array meets a kiln array.
    #[classattr]
    fn __array_ufunc__(py: Python<'_>) -> Py<PyAny> {
        py.None()
    }

    // ---- properties ------------------------------------------------------------------------

    /// `(len,)`, as NumPy.
    #[getter]
    fn shape<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        PyTuple::new(py, [self.a.len()])
    }
    #[getter]
    fn ndim(&self) -> usize {
        1
    }
    /// The engine's variable id (Dr.Jit's `x.index`).
    #[getter]
    fn index(&self) -> u64 {
        each!(&self.a, x => x.id().0 as u64)
    }
    /// The array's node in the AD graph (Dr.Jit's `x.index_ad`): 0 for one that tracks no
    /// derivatives; arrays with one node share their gradient.
    #[getter]
    fn index_ad(&self) -> u64 {
        crate::float!(&self.a, x => x.ad_index(), else 0)
    }
    /// Whether the array has a buffer (Dr.Jit's `x.state == Evaluated`).
    #[getter]
    fn is_evaluated(&self) -> bool {
        each!(&self.a, x => x.is_evaluated())
    }
    /// What the array is now (Dr.Jit's `x.state`, a `kiln.VarState`): `Literal` (a constant
    /// baked into the kernels that read it), `Evaluated` (it has a buffer) or `Unevaluated` (a
    /// traced expression). kiln does not tell Dr.Jit's `Symbolic`, `Dirty` and `Undefined` apart
    /// from `Unevaluated`/`Evaluated`.
    #[getter]
    fn state(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        let id = each!(&self.a, x => x.id());
        let name = if kiln_core::literal_value(id).is_some() {
            "Literal"
        } else if kiln_core::is_evaluated(id) {
            "Evaluated"
        } else {
            "Unevaluated"
        };
        Ok(py
            .import("kiln")?
            .getattr("VarState")?
            .getattr(name)?
            .unbind())
    }
    /// The name kiln's messages and `whos()` give the array.
    #[getter]
    fn get_label(&self) -> Option<String> {
        each!(&self.a, x => x.get_label())
    }
    #[setter]
    fn set_label(&mut self, name: &str) {
        self.a = each!(&self.a, x => crate::dynarray::IntoDyn::into_dyn(x.clone().label(name)));
    }
    /// The gradient (Dr.Jit's `x.grad`).
    #[getter]
    fn get_grad(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        crate::ad::grad_of(py, &self.a)
    }
    #[setter]
    fn set_grad(&self, g: &Bound<PyAny>) -> PyResult<()> {
        crate::ad::set_grad_of(&self.a, g, false)
    }
    /// Evaluate now (Dr.Jit's `dr.eval(x)`); returns the array.
    fn eval(slf: &Bound<Self>) -> PyResult<Py<PyAny>> {
        eval_released(slf.py(), &slf.borrow().a)?;
        Ok(slf.clone().into_any().unbind())
    }
}

impl ArrayBase {
    fn one(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        if self.a.len() != 1 {
            return Err(value_error(format!(
                "only an array of one element converts to a Python number; this one has {}",
                self.a.len()
            )));
        }
        item(py, &self.a, 0)
    }
}

/// `o` as an operand beside an array of type `like`, or `None` when it is not something kiln
/// takes (Python then tries the other operand's operator).
fn operand(o: &Bound<PyAny>, like: Ty) -> PyResult<Option<Dyn>> {
    let py = o.py();
    if o.is_instance_of::<crate::tensor::TensorBase>() {
        // the tensor's reflected operator broadcasts by shape
        return Ok(None);
    }
    match crate::convert::operand_dyn(o, like) {
        Ok(b) => Ok(Some(b)),
        Err(_)
            if !o.is_instance_of::<ArrayBase>()
                && !is_numpy_array(o)
                && o.hasattr("__array__")? =>
        {
            // another library's array type: its reflected operator may know what to do
            Ok(None)
        }
        Err(e) if e.is_instance_of::<PyTypeError>(py) && !o.is_instance_of::<ArrayBase>() => {
            Ok(None)
        }
        Err(e) => Err(e),
    }
}

fn is_numpy_array(o: &Bound<PyAny>) -> bool {
    o.get_type().name().is_ok_and(|n| n == "ndarray")
}

fn bin(slf: &Bound<ArrayBase>, o: &Bound<PyAny>, op: Bin, reflected: bool) -> PyResult<Py<PyAny>> {
    let py = slf.py();
    let a = slf.borrow().a.clone();
    let Some(b) = operand(o, a.ty())? else {
        return Ok(py.NotImplemented());
    };
    // a Python scalar takes the array's type (Dr.Jit's rule); a float beside integers is Float32
    let r = if reflected {
        binary(op, &b, &a)?
    } else {
        binary(op, &a, &b)?
    };
    wrap(py, r)
}

/// `a op= o` on the array itself (Dr.Jit's and NumPy's in-place operators): the object keeps its
/// identity and every name bound to it sees the new value. A result of a wider type of the same
/// kind (`Float32 += Float64`) is cast back, as NumPy's `same_kind` rule does; one of another
/// kind (`Int32 /= 2` gives floats) or another class (an array plus a vector or a tensor) is an
/// error that names the out-of-place form.
fn inplace(slf: &Bound<ArrayBase>, o: &Bound<PyAny>, op: Bin) -> PyResult<()> {
    let a = slf.borrow().a.clone();
    let refuse = |what: String| {
        type_error(format!(
            "`x {}= y` on {} ({} elements): {what}; write `x = x {} y` to bind x to a new array instead",
            op.symbol(),
            a.ty().class_name(),
            a.len(),
            op.symbol()
        ))
    };
    let Some(b) = operand(o, a.ty())? else {
        let other = o
            .get_type()
            .name()
            .map(|n| n.to_string())
            .unwrap_or_default();
        return Err(refuse(format!(
            "the result would not be a {} (y is a {other})",
            a.ty().class_name()
        )));
    };
    let r = binary(op, &a, &b)?;
    let (from, to) = (a.ty(), r.ty());
    let r = if from == to {
        r
    } else if (from.is_float() && to.is_float()) || (from.is_int() && to.is_int()) {
        r.cast(from)
    } else {
        return Err(refuse(format!("the result is a {}", to.class_name())));
    };
    drop(a);
    slf.borrow_mut().a = r;
    Ok(())
}

/// What NumPy reads to view a buffer (the array interface, version 3); it holds its own handle
/// of the array, so the buffer stays and stays unchanged while NumPy's view lives.
#[pyclass(module = "kiln", frozen)]
pub struct Exported {
    _keep: Dyn,
    interface: Py<PyDict>,
}

impl Exported {
    /// The kiln array whose buffer this export shows.
    pub fn array(&self) -> &Dyn {
        &self._keep
    }
}

#[pymethods]
impl Exported {
    #[getter]
    fn __array_interface__(&self, py: Python<'_>) -> Py<PyDict> {
        self.interface.clone_ref(py)
    }
}

/// `a`'s values as a NumPy array: a read-only view of its buffer after evaluating it, or a copy
/// for an array with no buffer of its own (a literal, an empty array).
pub fn to_numpy(py: Python<'_>, a: &Dyn) -> PyResult<Py<PyAny>> {
    crate::reads::check("converting to NumPy")?;
    if kiln_core::freeze::in_recording() {
        // (kiln refuses the reads it sees; NumPy would read the buffer behind kiln's back)
        return Err(value_error(
            "converting to NumPy inside a frozen function: a replay does not run the function's Python code, so the values read now would be the first call's on every replay; return the array and convert it after the call, or compute with kiln's operations inside",
        ));
    }
    let np = py
        .import("numpy")
        .map_err(|_| type_error("`numpy()` needs NumPy installed (`pip install numpy`)"))?;
    eval_released(py, a)?;
    let n = a.len();
    let keep = a.clone();
    let addr = each!(&keep, x => x.buffer_addr());
    let ty = a.ty();
    let Some(addr) = addr.filter(|_| n > 0) else {
        // a literal or an empty array: a copy of its values
        let bytes = each!(a, x => { let x = x.clone(); crate::gil::detach(py, || try_guard(|| kiln_core::read_bytes(x.id())))? });
        let buf = pyo3::types::PyBytes::new(py, &bytes);
        let arr = np.call_method1("frombuffer", (buf, ty.typestr()))?;
        let arr = if arr.len()? != n {
            np.call_method1("full", (n, arr.get_item(0)?))?
        } else {
            arr.call_method0("copy")?
        };
        return Ok(arr.unbind());
    };
    let d = PyDict::new(py);
    d.set_item("shape", (n,))?;
    d.set_item("typestr", ty.typestr())?;
    d.set_item("data", (addr, true))?;
    d.set_item("version", 3)?;
    let holder = Py::new(
        py,
        Exported {
            _keep: keep,
            interface: d.unbind(),
        },
    )?;
    Ok(np.call_method1("asarray", (holder,))?.unbind())
}

/// Export a NumPy view of kiln's buffer through DLPack: without a copy to a consumer that can be
/// told the memory is read-only (DLPack ≥ 1.0), as a copy to an older one.
pub fn dlpack(
    py: Python<'_>,
    view: Py<PyAny>,
    stream: Option<&Bound<PyAny>>,
    max_version: Option<&Bound<PyAny>>,
    dl_device: Option<&Bound<PyAny>>,
    copy: Option<bool>,
) -> PyResult<Py<PyAny>> {
    let kw = PyDict::new(py);
    for (k, v) in [
        ("stream", stream),
        ("max_version", max_version),
        ("dl_device", dl_device),
    ] {
        if let Some(v) = v {
            kw.set_item(k, v)?;
        }
    }
    if let Some(c) = copy {
        kw.set_item("copy", c)?;
    }
    let v = view.bind(py);
    match v.call_method("__dlpack__", (), Some(&kw)) {
        Ok(c) => Ok(c.unbind()),
        Err(e) if e.is_instance_of::<pyo3::exceptions::PyBufferError>(py) => {
            let owned = v.call_method0("copy")?;
            Ok(owned.call_method("__dlpack__", (), Some(&kw))?.unbind())
        }
        Err(e) => Err(e),
    }
}
