//! Numba's `@stencil` on kiln: a Python kernel with relative indexing (`a[0, 1] + a[-1, 0]`) is
//! traced once per application into kiln's stencil (interior and border launched apart, the
//! border by the chosen rule), on NumPy arrays (returning NumPy arrays) or kiln tensors
//! (returning lazy tensors that fuse with what follows).
//!
//! The relatively indexed inputs are read in their widest element type (Numba would compute
//! mixed types in the wider one too); `standard_indexing=` inputs are read at absolute
//! positions; plain Python values are passed through. The output's type is what the kernel
//! returns, found by calling it once on placeholder values before tracing.

use crate::array::wrap;
use crate::convert::to_dyn;
use crate::dynarray::{Dyn, IntoDyn, Ty};
use crate::errors::{fail, guard, to_py, type_error, value_error};
use crate::tensor::{typed, wrap_tensor, TensorBase};
use kiln::stencil::{Boundary, Rel};
use kiln::{Array, Scalar, Tensor};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PySlice, PyTuple};

/// A relatively indexed input as the kernel sees it while kiln traces.
enum DynRel {
    Bool(Rel<bool>),
    I32(Rel<i32>),
    U32(Rel<u32>),
    I64(Rel<i64>),
    U64(Rel<u64>),
    F32(Rel<f32>),
    F64(Rel<f64>),
}

trait IntoDynRel {
    fn into_dyn_rel(self) -> DynRel;
}
macro_rules! into_dyn_rel {
    ($($t:ty => $v:ident),*) => {$(
        impl IntoDynRel for Rel<$t> {
            fn into_dyn_rel(self) -> DynRel {
                DynRel::$v(self)
            }
        }
    )*};
}
into_dyn_rel!(bool => Bool, i32 => I32, u32 => U32, i64 => I64, u64 => U64, f32 => F32, f64 => F64);

/// One relatively indexed input inside a kernel: `a[di, dj]` is the input at that offset from the
/// element being computed; `a[-1:2, -1:2]` the window's values as a list.
#[pyclass(module = "kiln", unsendable, name = "StencilInput")]
struct PyRel {
    rel: Option<DynRel>,
    /// For the probe call: the element type, values are placeholders.
    probe: Ty,
}

/// Offsets (ints) or window ranges (slices) of a relative index.
enum Index {
    At(Vec<i64>),
    Window(Vec<(i64, i64)>),
}

fn parse_index(key: &Bound<PyAny>) -> PyResult<Index> {
    let items: Vec<Bound<PyAny>> = match key.cast::<PyTuple>() {
        Ok(t) => t.iter().collect(),
        Err(_) => vec![key.clone()],
    };
    if items.iter().any(|i| i.is_instance_of::<PySlice>()) {
        let mut r = Vec::new();
        for i in &items {
            if let Ok(s) = i.cast::<PySlice>() {
                let lo: i64 = s
                    .getattr("start")?
                    .extract()
                    .map_err(|_| value_error("a stencil window needs both bounds: a[-1:2]"))?;
                let hi: i64 = s
                    .getattr("stop")?
                    .extract()
                    .map_err(|_| value_error("a stencil window needs both bounds: a[-1:2]"))?;
                r.push((lo, hi - 1));
            } else {
                let v: i64 = i.extract()?;
                r.push((v, v));
            }
        }
        return Ok(Index::Window(r));
    }
    let offs = items
        .iter()
        .map(|i| i.extract::<i64>())
        .collect::<PyResult<Vec<_>>>()
        .map_err(|_| type_error("a stencil input is indexed by constant integer offsets (a[0, -1]) or windows (a[-1:2])"))?;
    Ok(Index::At(offs))
}

#[pymethods]
impl PyRel {
    fn __getitem__(&self, py: Python<'_>, key: &Bound<PyAny>) -> PyResult<Py<PyAny>> {
        let idx = parse_index(key)?;
        let Some(rel) = &self.rel else {
            // the probe: a placeholder of the element type
            let one = crate::convert::lit_f64(0.0, self.probe);
            return match idx {
                Index::At(_) => wrap(py, one),
                Index::Window(r) => {
                    let n: i64 = r.iter().map(|(lo, hi)| hi - lo + 1).product();
                    let v = (0..n.max(0))
                        .map(|_| wrap(py, one.clone()))
                        .collect::<PyResult<Vec<_>>>()?;
                    Ok(pyo3::types::PyList::new(py, v)?.into_any().unbind())
                }
            };
        };
        macro_rules! go {
            ($r:expr) => {
                match idx {
                    Index::At(o) => wrap(py, guard(|| $r.at_offsets(&o).into_dyn())?),
                    Index::Window(w) => {
                        let vals = guard(|| $r.window(&w))?;
                        let v = vals
                            .into_iter()
                            .map(|a| wrap(py, a.into_dyn()))
                            .collect::<PyResult<Vec<_>>>()?;
                        Ok(pyo3::types::PyList::new(py, v)?.into_any().unbind())
                    }
                }
            };
        }
        match rel {
            DynRel::Bool(r) => go!(r),
            DynRel::I32(r) => go!(r),
            DynRel::U32(r) => go!(r),
            DynRel::I64(r) => go!(r),
            DynRel::U64(r) => go!(r),
            DynRel::F32(r) => go!(r),
            DynRel::F64(r) => go!(r),
        }
    }
}

/// An input read at absolute positions (`standard_indexing=`): `w[i]`, `w[i, j]`.
#[pyclass(module = "kiln", name = "StencilConstant")]
struct PyStd {
    a: Dyn,
    shape: Vec<usize>,
}

#[pymethods]
impl PyStd {
    fn __getitem__(&self, py: Python<'_>, key: &Bound<PyAny>) -> PyResult<Py<PyAny>> {
        let idx: Vec<i64> = match key.cast::<PyTuple>() {
            Ok(t) => t.extract()?,
            Err(_) => vec![key.extract()?],
        };
        if idx.len() != self.shape.len() {
            return Err(value_error(format!(
                "a standard-indexed input of shape {:?} takes {} indices, got {}",
                self.shape,
                self.shape.len(),
                idx.len()
            )));
        }
        let mut flat = 0i64;
        for (d, (&i, &n)) in idx.iter().zip(&self.shape).enumerate() {
            let i = if i < 0 { i + n as i64 } else { i };
            if i < 0 || i >= n as i64 {
                return Err(crate::errors::index_error(format!(
                    "index {} is out of range for axis {d} of size {n}",
                    idx[d]
                )));
            }
            flat = flat * n as i64 + i;
        }
        let at = Dyn::I64(Array::scalar(flat));
        wrap(py, crate::funcs::gather_dyn(&self.a, &at, None)?)
    }
    fn __len__(&self) -> usize {
        self.shape.first().copied().unwrap_or(1)
    }
}

/// A stencil kernel with its options (`kiln.stencil(...)` makes one); call it on arrays.
#[pyclass(module = "kiln", name = "Stencil")]
pub struct PyStencil {
    func: Py<PyAny>,
    params: Vec<String>,
    neighborhood: Option<Vec<(i64, i64)>>,
    cval: Option<f64>,
    standard: Vec<String>,
    boundary: Boundary,
}

fn boundary_of(mode: Option<&str>, cval: Option<f64>) -> PyResult<Boundary> {
    Ok(match mode.unwrap_or("skip") {
        "skip" => Boundary::Skip,
        "constant" => Boundary::Constant(cval.unwrap_or(0.0)),
        "wrap" => Boundary::Wrap,
        "reflect" => Boundary::Reflect,
        "mirror" => Boundary::Mirror,
        "nearest" => Boundary::Nearest,
        m => {
            return Err(value_error(format!(
                "boundary={m:?}: kiln's modes are 'skip' (Numba's: border elements get cval), 'constant', 'wrap', 'reflect', 'mirror', 'nearest'"
            )))
        }
    })
}

/// Parameter names: one string (Numba accepts `standard_indexing='b'`) or a sequence of them.
#[derive(FromPyObject, Clone)]
enum Names {
    One(String),
    Many(Vec<String>),
}

impl Names {
    fn into_vec(self) -> Vec<String> {
        match self {
            Names::One(s) => vec![s],
            Names::Many(v) => v,
        }
    }
}

/// What one argument is to the kernel.
enum Arg {
    Rel(usize),
    Std(Dyn, Vec<usize>),
    Plain(Py<PyAny>),
}

#[pymethods]
impl PyStencil {
    #[new]
    #[pyo3(signature = (func, neighborhood = None, cval = None, standard_indexing = None, boundary = None, func_or_mode = None))]
    fn new(
        py: Python<'_>,
        func: Py<PyAny>,
        neighborhood: Option<Vec<(i64, i64)>>,
        cval: Option<f64>,
        standard_indexing: Option<Names>,
        boundary: Option<&str>,
        func_or_mode: Option<&str>,
    ) -> PyResult<Self> {
        let standard_indexing = standard_indexing.map(Names::into_vec);
        if let Some(m) = func_or_mode.filter(|m| *m != "constant") {
            return Err(value_error(format!(
                "stencil mode {m:?}: Numba's only mode is 'constant'; kiln's other border rules are boundary='wrap', 'reflect', 'mirror', 'nearest'"
            )));
        }
        let sig = py
            .import("inspect")?
            .call_method1("signature", (func.bind(py),))?;
        let params: Vec<String> = sig
            .getattr("parameters")?
            .call_method0("keys")?
            .try_iter()?
            .map(|k| k.and_then(|k| k.extract::<String>()))
            .collect::<PyResult<_>>()?;
        let standard = standard_indexing.unwrap_or_default();
        if let Some(s) = standard.iter().find(|s| !params.contains(s)) {
            return Err(value_error(format!(
                "standard_indexing names {s:?}, which is not a parameter of the kernel ({params:?})"
            )));
        }
        Ok(PyStencil {
            func,
            params,
            neighborhood,
            cval,
            standard,
            boundary: boundary_of(boundary, cval)?,
        })
    }

    /// Apply the stencil: NumPy arrays in, a NumPy array out; kiln tensors in, a lazy tensor out.
    /// `out=` receives the result in place (its border keeps its values unless `cval` is set).
    #[pyo3(signature = (*args, out = None, neighborhood = None))]
    fn __call__(
        &self,
        py: Python<'_>,
        args: &Bound<PyTuple>,
        out: Option<&Bound<PyAny>>,
        neighborhood: Option<Vec<(i64, i64)>>,
    ) -> PyResult<Py<PyAny>> {
        let _in_kiln = crate::gil::callbacks(py); // (runs Python back)
        if args.len() != self.params.len() {
            return Err(value_error(format!(
                "the kernel takes {} argument(s) ({:?}), the call gave {}",
                self.params.len(),
                self.params,
                args.len()
            )));
        }
        let mut rels: Vec<(Dyn, Vec<usize>)> = Vec::new();
        let mut kinds = Vec::new();
        let mut numpy_in = false;
        for (name, a) in self.params.iter().zip(args.iter()) {
            let is_plain = a.is_instance_of::<pyo3::types::PyInt>()
                || a.is_instance_of::<pyo3::types::PyFloat>()
                || a.is_instance_of::<pyo3::types::PyBool>();
            if self.standard.contains(name) && !is_plain {
                let (d, s) = flat_of(&a)?;
                kinds.push(Arg::Std(d, s));
            } else if is_plain {
                kinds.push(Arg::Plain(a.clone().unbind()));
            } else {
                numpy_in |= !a.is_instance_of::<TensorBase>()
                    && !a.is_instance_of::<crate::array::ArrayBase>();
                kinds.push(Arg::Rel(rels.len()));
                rels.push(flat_of(&a)?);
            }
        }
        if rels.is_empty() {
            return Err(value_error(
                "a stencil needs at least one relatively indexed array argument",
            ));
        }
        if rels.len() > 4 {
            return Err(value_error("kiln's stencils take at most 4 relatively indexed inputs; pass the others with standard_indexing="));
        }
        let t = rels
            .iter()
            .map(|(d, _)| d.ty())
            .max()
            .expect("at least one input");
        let u = self.probe(py, &kinds, t)?;
        let out_t = match out {
            Some(o) => Some(flat_of(o)?),
            None => None,
        };
        let nb = neighborhood.or_else(|| self.neighborhood.clone());
        let (flat, shape) = dispatch(self, &kinds, &rels, t, u, nb, out_t)?;
        if let Some(o) = out {
            write_out(py, o, &flat, &shape)?;
            return Ok(o.clone().unbind());
        }
        if numpy_in {
            let np = crate::array::to_numpy(py, &flat)?;
            return Ok(np
                .bind(py)
                .call_method1("reshape", (shape,))?
                .call_method0("copy")?
                .unbind());
        }
        wrap_tensor(py, flat, shape)
    }

    /// The Python kernel.
    #[getter]
    fn kernel(&self, py: Python<'_>) -> Py<PyAny> {
        self.func.clone_ref(py)
    }
}

impl PyStencil {
    /// The kernel's element type: call it once on placeholders.
    fn probe(&self, py: Python<'_>, kinds: &[Arg], t: Ty) -> PyResult<Ty> {
        let args = kinds
            .iter()
            .map(|k| match k {
                Arg::Rel(_) => Ok(Py::new(
                    py,
                    PyRel {
                        rel: None,
                        probe: t,
                    },
                )?
                .into_any()),
                Arg::Std(d, s) => Ok(Py::new(
                    py,
                    PyStd {
                        a: d.clone(),
                        shape: s.clone(),
                    },
                )?
                .into_any()),
                Arg::Plain(o) => Ok(o.clone_ref(py)),
            })
            .collect::<PyResult<Vec<_>>>()?;
        let r = {
            let _refusing = crate::reads::refuse("a stencil kernel");
            self.func.bind(py).call1(PyTuple::new(py, args)?)?
        };
        Ok(to_dyn(&r, Some(t))?.ty())
    }

    /// Call the kernel inside kiln's trace with `rels` as the relative inputs.
    fn call_kernel(&self, py: Python<'_>, kinds: &[Arg], rels: Vec<DynRel>, u: Ty) -> Dyn {
        let mut rels: Vec<Option<DynRel>> = rels.into_iter().map(Some).collect();
        let r = (|| -> PyResult<Dyn> {
            let args = kinds
                .iter()
                .map(|k| match k {
                    Arg::Rel(i) => Ok(Py::new(
                        py,
                        PyRel {
                            rel: rels[*i].take(),
                            probe: u,
                        },
                    )?
                    .into_any()),
                    Arg::Std(d, s) => Ok(Py::new(
                        py,
                        PyStd {
                            a: d.clone(),
                            shape: s.clone(),
                        },
                    )?
                    .into_any()),
                    Arg::Plain(o) => Ok(o.clone_ref(py)),
                })
                .collect::<PyResult<Vec<_>>>()?;
            let r = {
                let _refusing = crate::reads::refuse("a stencil kernel");
                self.func.bind(py).call1(PyTuple::new(py, args)?)?
            };
            Ok(to_dyn(&r, Some(u))?.cast(u))
        })();
        r.unwrap_or_else(|e| fail(e))
    }

    fn configured<F>(&self, f: F, nb: Option<Vec<(i64, i64)>>) -> kiln::Stencil<F> {
        let mut s = kiln::stencil(f).boundary(self.boundary);
        if let Some(n) = nb {
            s = s.neighborhood(&n);
        }
        if let (Some(c), Boundary::Skip) = (self.cval, self.boundary) {
            s = s.cval(c);
        }
        s
    }
}

/// The flat values and shape of a stencil argument (NumPy array, kiln tensor or array, list); a
/// NumPy array's memory is read in place when it can be.
fn flat_of(a: &Bound<PyAny>) -> PyResult<(Dyn, Vec<usize>)> {
    if let Ok(t) = a.cast::<TensorBase>() {
        let t = t.borrow();
        return Ok((t.a.clone(), t.shape.clone()));
    }
    if let Ok(x) = a.cast::<crate::array::ArrayBase>() {
        let d = x.borrow().a.clone();
        let n = d.len();
        return Ok((d, vec![n]));
    }
    let np = a.py().import("numpy").map_err(|_| {
        type_error("stencils on Python lists need NumPy; pass kiln tensors instead")
    })?;
    let arr = np.call_method1("asarray", (a,))?;
    let shape: Vec<usize> = arr.getattr("shape")?.extract()?;
    // (read in place where it can be: a stencil only reads its inputs, so sharing is unseen)
    Ok((crate::convert::numpy_flat(&arr)?, shape))
}

/// Copy the result into `out` (a NumPy array, or a kiln tensor replaced in place).
fn write_out(py: Python<'_>, out: &Bound<PyAny>, flat: &Dyn, shape: &[usize]) -> PyResult<()> {
    if let Ok(t) = out.cast::<TensorBase>() {
        let mut t = t.borrow_mut();
        t.a = flat.cast(t.a.ty());
        t.shape = shape.to_vec();
        return Ok(());
    }
    let np = py.import("numpy")?;
    let vals = crate::array::to_numpy(py, flat)?;
    let vals = vals.bind(py).call_method1("reshape", (shape.to_vec(),))?;
    let kw = PyDict::new(py);
    kw.set_item("casting", "unsafe")?;
    np.call_method("copyto", (out, vals), Some(&kw))?;
    Ok(())
}

/// Run the stencil for relative inputs of type `t` and output type `u`.
#[allow(clippy::too_many_arguments)]
fn dispatch(
    s: &PyStencil,
    kinds: &[Arg],
    rels: &[(Dyn, Vec<usize>)],
    t: Ty,
    u: Ty,
    nb: Option<Vec<(i64, i64)>>,
    out: Option<(Dyn, Vec<usize>)>,
) -> PyResult<(Dyn, Vec<usize>)> {
    macro_rules! by_out {
        ($T:ty) => {
            match u {
                Ty::Bool => run::<$T, bool>(s, kinds, rels, u, nb, out),
                Ty::I32 => run::<$T, i32>(s, kinds, rels, u, nb, out),
                Ty::U32 => run::<$T, u32>(s, kinds, rels, u, nb, out),
                Ty::I64 => run::<$T, i64>(s, kinds, rels, u, nb, out),
                Ty::U64 => run::<$T, u64>(s, kinds, rels, u, nb, out),
                Ty::F32 => run::<$T, f32>(s, kinds, rels, u, nb, out),
                Ty::F64 => run::<$T, f64>(s, kinds, rels, u, nb, out),
            }
        };
    }
    match t {
        Ty::Bool => by_out!(bool),
        Ty::I32 => by_out!(i32),
        Ty::U32 => by_out!(u32),
        Ty::I64 => by_out!(i64),
        Ty::U64 => by_out!(u64),
        Ty::F32 => by_out!(f32),
        Ty::F64 => by_out!(f64),
    }
}

/// The kernel's result as `Array<U>`.
fn out_array<U: Scalar>(d: Dyn) -> Array<U> {
    each!(&d, a => a.cast::<U>())
}

fn run<T: Scalar, U: Scalar>(
    s: &PyStencil,
    kinds: &[Arg],
    rels: &[(Dyn, Vec<usize>)],
    u: Ty,
    nb: Option<Vec<(i64, i64)>>,
    out: Option<(Dyn, Vec<usize>)>,
) -> PyResult<(Dyn, Vec<usize>)>
where
    Rel<T>: IntoDynRel,
    Array<U>: IntoDyn,
{
    let ts: Vec<Tensor<T>> = rels
        .iter()
        .map(|(d, sh)| typed::<T>(d, sh))
        .collect::<PyResult<_>>()?;
    let mut out_t: Option<Tensor<U>> = match out {
        Some((d, sh)) => Some(typed::<U>(&d, &sh)?),
        None => None,
    };
    let k = |v: Vec<DynRel>| -> Array<U> {
        out_array::<U>(crate::gil::attach(|py| s.call_kernel(py, kinds, v, u)))
    };
    macro_rules! go {
        ($st:expr, $inputs:expr) => {{
            let st = $st;
            let r: kiln::Result<Tensor<U>> = match &mut out_t {
                Some(o) => st.apply_into($inputs, o).map(|_| o.clone()),
                None => st.apply($inputs),
            };
            r
        }};
    }
    let result = guard(|| match ts.len() {
        1 => go!(
            s.configured(|a: &Rel<T>| k(vec![a.clone().into_dyn_rel()]), nb.clone()),
            &ts[0]
        ),
        2 => go!(
            s.configured(
                |(a, b): (&Rel<T>, &Rel<T>)| k(vec![
                    a.clone().into_dyn_rel(),
                    b.clone().into_dyn_rel()
                ]),
                nb.clone()
            ),
            (&ts[0], &ts[1])
        ),
        3 => go!(
            s.configured(
                |(a, b, c): (&Rel<T>, &Rel<T>, &Rel<T>)| k(vec![
                    a.clone().into_dyn_rel(),
                    b.clone().into_dyn_rel(),
                    c.clone().into_dyn_rel()
                ]),
                nb.clone()
            ),
            (&ts[0], &ts[1], &ts[2])
        ),
        _ => go!(
            s.configured(
                |(a, b, c, d): (&Rel<T>, &Rel<T>, &Rel<T>, &Rel<T>)| {
                    k(vec![
                        a.clone().into_dyn_rel(),
                        b.clone().into_dyn_rel(),
                        c.clone().into_dyn_rel(),
                        d.clone().into_dyn_rel(),
                    ])
                },
                nb.clone()
            ),
            (&ts[0], &ts[1], &ts[2], &ts[3])
        ),
    })?
    .map_err(to_py)?;
    let shape = result.shape().to_vec();
    Ok((result.into_array().into_dyn(), shape))
}

/// Numba's `@stencil`: `kiln.stencil(kernel)` or `kiln.stencil(neighborhood=..., cval=...,
/// standard_indexing=..., boundary=...)(kernel)`. `boundary` is kiln's addition: 'skip'
/// (Numba's rule, the default: border elements get `cval`, default 0), 'constant' (reads outside
/// the input give `cval`), 'wrap', 'reflect', 'mirror', 'nearest'.
#[pyfunction]
#[pyo3(signature = (func_or_mode = None, *, neighborhood = None, cval = None, standard_indexing = None, boundary = None))]
fn stencil(
    py: Python<'_>,
    func_or_mode: Option<&Bound<PyAny>>,
    neighborhood: Option<Vec<(i64, i64)>>,
    cval: Option<f64>,
    standard_indexing: Option<Names>,
    boundary: Option<String>,
) -> PyResult<Py<PyAny>> {
    let mode = match func_or_mode {
        Some(f) if f.is_callable() => {
            let s = PyStencil::new(
                py,
                f.clone().unbind(),
                neighborhood,
                cval,
                standard_indexing,
                boundary.as_deref(),
                None,
            )?;
            return Ok(Py::new(py, s)?.into_any());
        }
        Some(m) => Some(m.extract::<String>()?),
        None => None,
    };
    // the options first: a decorator that takes the kernel
    let deco = move |args: &Bound<PyTuple>, _kw: Option<&Bound<PyDict>>| -> PyResult<Py<PyAny>> {
        let py = args.py();
        let f: Py<PyAny> = args.get_item(0)?.unbind();
        let s = PyStencil::new(
            py,
            f,
            neighborhood.clone(),
            cval,
            standard_indexing.clone(),
            boundary.as_deref(),
            mode.as_deref(),
        )?;
        Ok(Py::new(py, s)?.into_any())
    };
    Ok(
        pyo3::types::PyCFunction::new_closure(py, Some(c"stencil"), None, deco)?
            .into_any()
            .unbind(),
    )
}

/// Put the classes on the module.
pub fn register(m: &Bound<PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(stencil, m)?)?;
    m.add_class::<PyStencil>()?;
    m.add_class::<PyRel>()?;
    m.add_class::<PyStd>()?;
    Ok(())
}
