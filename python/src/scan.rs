//! kiln's scans from Python: the JAX face (`lax.scan(f, init, xs)`) and PyTensor's
//! (`scan(fn, sequences, outputs_info, non_sequences, ...)` with taps, `until`,
//! `go_backwards`, `truncate_gradient`). Both are kiln's own scans, so they get its rewrites
//! (push-out, save-mem, one kernel) and its gradient scan. The Python package flattens nested
//! arguments and PyTensor's tap dictionaries; these primitives take flat lists of tensors.

use crate::array::ArrayBase;
use crate::convert::to_dyn;
use crate::dynarray::{Dyn, IntoDyn, Ty};
use crate::errors::{fail, guard, to_py, type_error, value_error};
use crate::tensor::{wrap_tensor, TensorBase};
use kiln::scan::{AnyTensor, Lax, Scan, ScanMode, Step};
use kiln::{Scalar, Tensor};
use pyo3::prelude::*;
use pyo3::types::{PyList, PyTuple};
use std::cell::RefCell;

/// The element type of a tensor.
fn ty_of(t: &AnyTensor) -> Ty {
    match t {
        AnyTensor::Bool(_) => Ty::Bool,
        AnyTensor::I32(_) => Ty::I32,
        AnyTensor::U32(_) => Ty::U32,
        AnyTensor::I64(_) => Ty::I64,
        AnyTensor::U64(_) => Ty::U64,
        AnyTensor::F32(_) => Ty::F32,
        AnyTensor::F64(_) => Ty::F64,
    }
}

/// A flat array and a shape as a typed tensor.
fn any_from(a: Dyn, shape: &[usize]) -> PyResult<AnyTensor> {
    let r = crate::errors::try_guard(|| {
        Ok(match a {
            Dyn::Bool(x) => AnyTensor::Bool(Tensor::try_from_array(x, shape)?),
            Dyn::I32(x) => AnyTensor::I32(Tensor::try_from_array(x, shape)?),
            Dyn::U32(x) => AnyTensor::U32(Tensor::try_from_array(x, shape)?),
            Dyn::I64(x) => AnyTensor::I64(Tensor::try_from_array(x, shape)?),
            Dyn::U64(x) => AnyTensor::U64(Tensor::try_from_array(x, shape)?),
            Dyn::F32(x) => AnyTensor::F32(Tensor::try_from_array(x, shape)?),
            Dyn::F64(x) => AnyTensor::F64(Tensor::try_from_array(x, shape)?),
        })
    })?;
    Ok(r)
}

/// A Python value as a tensor: a kiln tensor, a kiln array (1-D), a NumPy array, or a number (a
/// 0-d tensor of `like`'s type when given).
fn any_of(x: &Bound<PyAny>, like: Option<Ty>) -> PyResult<AnyTensor> {
    if let Ok(t) = x.cast::<TensorBase>() {
        let t = t.borrow();
        let a = like.map_or(t.a.clone(), |l| t.a.cast(l));
        return any_from(a, &t.shape);
    }
    if let Ok(a) = x.cast::<ArrayBase>() {
        let d = a.borrow().a.clone();
        let d = like.map_or(d.clone(), |l| d.cast(l));
        let n = d.len();
        return any_from(d, &[n]);
    }
    if x.hasattr("__array_interface__")? || x.hasattr("__array__")? {
        let np = x.py().import("numpy")?;
        let arr = np.call_method1("asarray", (x,))?;
        let shape: Vec<usize> = arr.getattr("shape")?.extract()?;
        let d = to_dyn(&arr.call_method0("ravel")?, like)?;
        let d = like.map_or(d.clone(), |l| d.cast(l));
        return any_from(d, &shape);
    }
    let d = to_dyn(x, like)?;
    let d = like.map_or(d.clone(), |l| d.cast(l));
    if d.len() != 1 {
        return Err(type_error("scan values are tensors, arrays or numbers"));
    }
    any_from(d, &[])
}

/// A tensor as a Python `TensorX*` object.
fn py_of(py: Python<'_>, t: &AnyTensor) -> PyResult<Py<PyAny>> {
    macro_rules! w {
        ($x:expr) => {
            wrap_tensor(py, $x.array().clone().into_dyn(), $x.shape().to_vec())
        };
    }
    match t {
        AnyTensor::Bool(x) => w!(x),
        AnyTensor::I32(x) => w!(x),
        AnyTensor::U32(x) => w!(x),
        AnyTensor::I64(x) => w!(x),
        AnyTensor::U64(x) => w!(x),
        AnyTensor::F32(x) => w!(x),
        AnyTensor::F64(x) => w!(x),
    }
}

fn py_list<'py>(py: Python<'py>, v: &[AnyTensor]) -> PyResult<Bound<'py, PyList>> {
    PyList::new(
        py,
        v.iter()
            .map(|t| py_of(py, t))
            .collect::<PyResult<Vec<_>>>()?,
    )
}

/// Values returned by the body, each in the type of `like[i]` (when there is one).
fn anys(x: &Bound<PyAny>, like: &[Option<Ty>], what: &str) -> PyResult<Vec<AnyTensor>> {
    let items: Vec<Bound<PyAny>> = x.try_iter()?.collect::<PyResult<_>>()?;
    if !like.is_empty() && items.len() != like.len() {
        return Err(value_error(format!(
            "{what}: the body returned {} value(s), the scan has {}",
            items.len(),
            like.len()
        )));
    }
    items
        .iter()
        .enumerate()
        .map(|(i, v)| any_of(v, like.get(i).copied().flatten()))
        .collect()
}

fn mode_of(mode: Option<&str>) -> PyResult<Option<ScanMode>> {
    Ok(match mode {
        None => None,
        Some("fused") => Some(ScanMode::Fused),
        Some("stepped") => Some(ScanMode::Stepped),
        Some(m) => {
            return Err(value_error(format!(
                "scan mode {m:?}: kiln's scan modes are 'fused' (one kernel) and 'stepped' (one launch per step), or None (kiln picks)"
            )))
        }
    })
}

/// JAX's `lax.scan` over flat lists: `f(carry_list, x_list) -> (carry_list, y_list)`.
#[pyfunction(name = "_scan_lax")]
#[pyo3(signature = (f, init, xs, length = None, reverse = false, unroll = 1, mode = None))]
#[allow(clippy::too_many_arguments)]
fn scan_lax<'py>(
    py: Python<'py>,
    f: Py<PyAny>,
    init: &Bound<'py, PyList>,
    xs: &Bound<'py, PyList>,
    length: Option<usize>,
    reverse: bool,
    unroll: usize,
    mode: Option<&str>,
) -> PyResult<(Bound<'py, PyList>, Bound<'py, PyList>)> {
    let _in_kiln = crate::gil::callbacks(py); // (runs Python back)
    let init: Vec<AnyTensor> = init
        .iter()
        .map(|x| any_of(&x, None))
        .collect::<PyResult<_>>()?;
    let xs: Vec<AnyTensor> = xs
        .iter()
        .map(|x| any_of(&x, None))
        .collect::<PyResult<_>>()?;
    let like: Vec<Option<Ty>> = init.iter().map(|t| Some(ty_of(t))).collect();
    let mut lax = Lax::new(&init, &xs).reverse(reverse).unroll(unroll.max(1));
    if let Some(n) = length {
        lax = lax.length(n);
    }
    if let Some(m) = mode_of(mode)? {
        lax = lax.mode(m);
    }
    let (c, y) = guard(|| {
        lax.run(|c: &Vec<AnyTensor>, x: &Vec<AnyTensor>| {
            crate::gil::attach(|py| {
                let r = (|| -> PyResult<(Vec<AnyTensor>, Vec<AnyTensor>)> {
                    let _refusing = crate::reads::refuse("a scan step");
                    let out = f.bind(py).call1((py_list(py, c)?, py_list(py, x)?))?;
                    let pair = out
                        .cast::<PyTuple>()
                        .map_err(|_| type_error("the scan body returns a pair (carry, y)"))?;
                    let c2 = anys(&pair.get_item(0)?, &like, "carry")?;
                    let y = anys(&pair.get_item(1)?, &[], "y")?;
                    Ok((c2, y))
                })();
                r.unwrap_or_else(|e| fail(e))
            })
        })
    })?
    .map_err(to_py)?;
    Ok((py_list(py, &c)?, py_list(py, &y)?))
}

/// Dispatch on an element type: `$f` is called as `$f::<T>()`-like body with `$T` bound.
macro_rules! by_ty {
    ($ty:expr, $T:ident => $body:expr) => {
        match $ty {
            Ty::Bool => {
                type $T = bool;
                $body
            }
            Ty::I32 => {
                type $T = i32;
                $body
            }
            Ty::U32 => {
                type $T = u32;
                $body
            }
            Ty::I64 => {
                type $T = i64;
                $body
            }
            Ty::U64 => {
                type $T = u64;
                $body
            }
            Ty::F32 => {
                type $T = f32;
                $body
            }
            Ty::F64 => {
                type $T = f64;
                $body
            }
        }
    };
}

fn wrap_any<T: Scalar>(t: Tensor<T>) -> AnyTensor
where
    Tensor<T>: IntoAny,
{
    t.into_any()
}

/// Typed tensors into [`AnyTensor`].
trait IntoAny {
    fn into_any(self) -> AnyTensor;
}
macro_rules! into_any {
    ($($t:ty => $v:ident),*) => {$(
        impl IntoAny for Tensor<$t> {
            fn into_any(self) -> AnyTensor {
                AnyTensor::$v(self)
            }
        }
    )*};
}
into_any!(bool => Bool, i32 => I32, u32 => U32, i64 => I64, u64 => U64, f32 => F32, f64 => F64);

/// One step's values in PyTensor's argument order: each sequence at each tap, each output at
/// each tap, each non-sequence.
fn step_args(
    s: &Step<'_, f64>,
    seqs: &[(Ty, Vec<i64>)],
    outs: &[(Option<Ty>, Vec<i64>)],
    non_seqs: &[Ty],
) -> Vec<AnyTensor> {
    let mut v = Vec::new();
    for (i, (ty, taps)) in seqs.iter().enumerate() {
        for &tap in taps {
            v.push(by_ty!(ty, T => wrap_any(s.seq_as::<T>(i, tap))));
        }
    }
    for (j, (ty, taps)) in outs.iter().enumerate() {
        if let Some(ty) = ty {
            for &tap in taps {
                v.push(by_ty!(ty, T => wrap_any(s.out_as::<T>(j, tap))));
            }
        }
    }
    for (k, ty) in non_seqs.iter().enumerate() {
        v.push(by_ty!(ty, T => wrap_any(s.non_seq_as::<T>(k))));
    }
    v
}

/// PyTensor's `scan` over flat lists: `fn(*args) -> (outputs_list, until_or_None)`; `seqs` are
/// `(tensor, taps)`, `outs` `(initial or None, taps)`. Returns each output's values over the
/// steps (`[n_steps, ...]`) and the number of steps run.
#[pyfunction(name = "_scan_pt")]
#[pyo3(signature = (f, seqs, outs, non_seqs, n_steps = None, go_backwards = false, truncate_gradient = -1, strict = false, mode = None))]
#[allow(clippy::too_many_arguments)]
fn scan_pt<'py>(
    py: Python<'py>,
    f: Py<PyAny>,
    seqs: Vec<(Bound<'py, PyAny>, Vec<i64>)>,
    outs: Vec<(Bound<'py, PyAny>, Vec<i64>)>,
    non_seqs: Vec<Bound<'py, PyAny>>,
    n_steps: Option<usize>,
    go_backwards: bool,
    truncate_gradient: i64,
    strict: bool,
    mode: Option<&str>,
) -> PyResult<(Bound<'py, PyList>, usize)> {
    let _in_kiln = crate::gil::callbacks(py); // (runs Python back)
    let mut b = Scan::<f64>::new().go_backwards(go_backwards).strict(strict);
    let mut seq_tys = Vec::new();
    for (x, taps) in &seqs {
        let t = any_of(x, None)?;
        seq_tys.push((ty_of(&t), taps.clone()));
        b = match &t {
            AnyTensor::Bool(x) => b.sequence_taps_as(x, taps),
            AnyTensor::I32(x) => b.sequence_taps_as(x, taps),
            AnyTensor::U32(x) => b.sequence_taps_as(x, taps),
            AnyTensor::I64(x) => b.sequence_taps_as(x, taps),
            AnyTensor::U64(x) => b.sequence_taps_as(x, taps),
            AnyTensor::F32(x) => b.sequence_taps_as(x, taps),
            AnyTensor::F64(x) => b.sequence_taps_as(x, taps),
        };
    }
    let mut out_tys: Vec<(Option<Ty>, Vec<i64>)> = Vec::new();
    for (init, taps) in &outs {
        if init.is_none() {
            out_tys.push((None, vec![]));
            b = b.output_none();
            continue;
        }
        let t = any_of(init, None)?;
        out_tys.push((Some(ty_of(&t)), taps.clone()));
        b = match &t {
            AnyTensor::Bool(x) => b.output_taps_as(x, taps),
            AnyTensor::I32(x) => b.output_taps_as(x, taps),
            AnyTensor::U32(x) => b.output_taps_as(x, taps),
            AnyTensor::I64(x) => b.output_taps_as(x, taps),
            AnyTensor::U64(x) => b.output_taps_as(x, taps),
            AnyTensor::F32(x) => b.output_taps_as(x, taps),
            AnyTensor::F64(x) => b.output_taps_as(x, taps),
        };
    }
    let mut ns_tys = Vec::new();
    for x in &non_seqs {
        let t = any_of(x, None)?;
        ns_tys.push(ty_of(&t));
        b = match &t {
            AnyTensor::Bool(x) => b.non_sequence_as(x),
            AnyTensor::I32(x) => b.non_sequence_as(x),
            AnyTensor::U32(x) => b.non_sequence_as(x),
            AnyTensor::I64(x) => b.non_sequence_as(x),
            AnyTensor::U64(x) => b.non_sequence_as(x),
            AnyTensor::F32(x) => b.non_sequence_as(x),
            AnyTensor::F64(x) => b.non_sequence_as(x),
        };
    }
    if let Some(n) = n_steps {
        b = b.n_steps(n);
    }
    if truncate_gradient >= 0 {
        b = b.truncate_gradient(truncate_gradient as usize);
    }
    if let Some(m) = mode_of(mode)? {
        b = b.mode(m);
    }
    let like: Vec<Option<Ty>> = out_tys.iter().map(|(t, _)| *t).collect();
    // the types the body gave outputs without an initial value (read back after the scan)
    let seen: RefCell<Vec<Option<Ty>>> = RefCell::new(like.clone());
    let r = guard(|| {
        b.run(|s: &Step<'_, f64>| -> Vec<AnyTensor> {
            crate::gil::attach(|py| {
                let r = (|| -> PyResult<Vec<AnyTensor>> {
                    let args = py_list(py, &step_args(s, &seq_tys, &out_tys, &ns_tys))?;
                    let ret = {
                        let _refusing = crate::reads::refuse("a scan step");
                        f.bind(py).call1(PyTuple::new(py, args)?)?
                    };
                    let pair = ret.cast::<PyTuple>().map_err(|_| {
                        type_error("internal: the step wrapper returns (outputs, until)")
                    })?;
                    let outs = anys(&pair.get_item(0)?, &like, "outputs")?;
                    let until = pair.get_item(1)?;
                    if !until.is_none() {
                        match any_of(&until, Some(Ty::Bool))? {
                            AnyTensor::Bool(c) => s.until(&c),
                            _ => unreachable!("cast to Bool"),
                        }
                    }
                    let mut seen = seen.borrow_mut();
                    for (k, o) in outs.iter().enumerate() {
                        seen[k] = Some(ty_of(o));
                    }
                    Ok(outs)
                })();
                r.unwrap_or_else(|e| fail(e))
            })
        })
    })?
    .map_err(to_py)?;
    let tys = seen.into_inner();
    let mut res = Vec::new();
    for (j, ty) in tys.iter().enumerate() {
        let ty = ty.unwrap_or(Ty::F64);
        let t = crate::errors::try_guard(|| Ok(by_ty!(ty, T => wrap_any(r.try_output::<T>(j)?))))?;
        res.push(t);
    }
    Ok((py_list(py, &res)?, r.steps()))
}

/// Put the functions on the module.
pub fn register(m: &Bound<PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(scan_lax, m)?)?;
    m.add_function(wrap_pyfunction!(scan_pt, m)?)?;
    Ok(())
}
