//! Automatic differentiation with Dr.Jit's calls: `enable_grad(x)`, `backward(y)`, `grad(x)`,
//! `forward(x)`, `set_grad`, `detach`, `suspend_grad()` as a `with` block. Only `Float32` and
//! `Float64` arrays carry gradients (integers and masks carry none, as in Dr.Jit and JAX).

use crate::array::{wrap, ArrayBase};
use crate::convert::to_dyn;
use crate::dynarray::{Dyn, IntoDyn};
use crate::errors::{guard, try_guard, type_error, value_error};
use crate::tensor::TensorBase;
use pyo3::prelude::*;
use pyo3::types::PyTuple;

fn not_float(what: &str, d: &Dyn) -> PyErr {
    type_error(format!(
        "{what}: only Float32 and Float64 arrays carry gradients, this is a {}",
        d.ty().class_name()
    ))
}

/// An array or a tensor (whose flat values carry its gradient), as the AD functions take them.
enum Held<'py> {
    Array(Bound<'py, ArrayBase>),
    Tensor(Bound<'py, TensorBase>),
}

impl Held<'_> {
    fn get(&self) -> Dyn {
        match self {
            Held::Array(a) => a.borrow().a.clone(),
            Held::Tensor(t) => t.borrow().a.clone(),
        }
    }
    fn set(&self, d: Dyn) {
        match self {
            Held::Array(a) => a.borrow_mut().a = d,
            Held::Tensor(t) => t.borrow_mut().a = d,
        }
    }
    /// `d` (of this one's size) as this one's kind: an array, or a tensor of its shape.
    fn like(&self, py: Python<'_>, d: Dyn) -> PyResult<Py<PyAny>> {
        match self {
            Held::Array(_) => wrap(py, d),
            Held::Tensor(t) => crate::tensor::wrap_tensor(py, d, t.borrow().shape.clone()),
        }
    }
}

fn held<'py>(x: &Bound<'py, PyAny>) -> Option<Held<'py>> {
    if let Ok(a) = x.cast::<ArrayBase>() {
        Some(Held::Array(a.clone()))
    } else {
        x.cast::<TensorBase>().ok().map(|t| Held::Tensor(t.clone()))
    }
}

/// Every array and tensor in `args` (or in lists, tuples and dicts of them).
fn arrays<'py>(args: &Bound<'py, PyAny>, out: &mut Vec<Held<'py>>) -> PyResult<()> {
    if let Some(h) = held(args) {
        out.push(h);
    } else if args.cast::<pyo3::types::PyList>().is_ok() || args.cast::<PyTuple>().is_ok() {
        for v in args.try_iter()? {
            arrays(&v?, out)?;
        }
    } else if let Ok(d) = args.cast::<pyo3::types::PyDict>() {
        for v in d.values() {
            arrays(&v, out)?;
        }
    } else {
        return Err(type_error(format!(
            "expected kiln arrays (or lists, tuples, dicts of them), got a `{}`",
            args.get_type().name()?
        )));
    }
    Ok(())
}

/// Track derivatives of these arrays from now on (in place; Dr.Jit's `dr.enable_grad`).
#[pyfunction]
#[pyo3(signature = (*args))]
fn enable_grad(args: &Bound<PyTuple>) -> PyResult<()> {
    let mut found = Vec::new();
    arrays(args.as_any(), &mut found)?;
    for a in found {
        match a.get() {
            Dyn::F32(mut x) => {
                x.enable_grad();
                a.set(Dyn::F32(x));
            }
            Dyn::F64(mut x) => {
                x.enable_grad();
                a.set(Dyn::F64(x));
            }
            d => return Err(not_float("enable_grad", &d)),
        }
    }
    Ok(())
}

/// Stop tracking derivatives of these arrays (in place).
#[pyfunction]
#[pyo3(signature = (*args))]
fn disable_grad(args: &Bound<PyTuple>) -> PyResult<()> {
    let mut found = Vec::new();
    arrays(args.as_any(), &mut found)?;
    for a in found {
        let d = a.get();
        a.set(float!(&d, x => x.detach().into_dyn(), else d.clone()));
    }
    Ok(())
}

/// Whether any of these arrays tracks derivatives.
#[pyfunction]
#[pyo3(signature = (*args))]
fn grad_enabled(args: &Bound<PyTuple>) -> PyResult<bool> {
    if !kiln::ad::grad_recording() {
        // inside `suspend_grad()` nothing records derivatives (Dr.Jit's answer too)
        return Ok(false);
    }
    let mut found = Vec::new();
    arrays(args.as_any(), &mut found)?;
    Ok(found
        .iter()
        .any(|a| float!(&a.get(), x => x.grad_enabled(), else false)))
}

/// The array without derivative tracking (the same values).
#[pyfunction]
fn detach(x: &Bound<PyAny>) -> PyResult<Py<PyAny>> {
    crate::funcs::lanewise(x, |d| {
        Ok(float!(d, v => v.detach().into_dyn(), else d.clone()))
    })
}

/// The gradient of `a` (zeros where none arrived; an integer array's is zeros).
pub fn grad_of(py: Python<'_>, a: &Dyn) -> PyResult<Py<PyAny>> {
    let g = float!(a, x => x.grad().into_dyn(), else {
        let n = a.len();
        crate::errors::guard(|| kiln::Int64::zeros(n))?.into_dyn().cast(a.ty())
    });
    wrap(py, g)
}

/// Set (or add to, with `accum`) the gradient of `a`.
pub fn set_grad_of(a: &Dyn, g: &Bound<PyAny>, accum: bool) -> PyResult<()> {
    set_grad_dyn(a, to_dyn(g, Some(a.ty()))?, accum)
}

/// A gradient for `h`: for a tensor, one of its shape or one that broadcasts to it (a tensor,
/// a NumPy array, a number); for an array, what converts to one.
fn grad_value(h: &Held, g: &Bound<PyAny>) -> PyResult<Dyn> {
    let ty = h.get().ty();
    let Held::Tensor(t) = h else {
        return to_dyn(g, Some(ty));
    };
    let shape = t.borrow().shape.clone();
    let Some((v, vs)) = crate::tensor::operand(g, ty)? else {
        return Err(type_error(format!(
            "a gradient for a tensor is a tensor, a NumPy array or a number, not a `{}`",
            g.get_type().name()?
        )));
    };
    if crate::tensor::broadcast_shape(&vs, &shape)? != shape {
        return Err(value_error(format!(
            "a gradient of shape {vs:?} does not broadcast to the tensor's shape {shape:?}"
        )));
    }
    crate::tensor::broadcast(&v, &vs, &shape)
}

fn set_grad_dyn(a: &Dyn, g: Dyn, accum: bool) -> PyResult<()> {
    let gd = g.cast(a.ty());
    match (a, &gd) {
        (Dyn::F32(x), Dyn::F32(v)) => try_guard(|| {
            if accum {
                x.accum_grad(v)
            } else {
                x.set_grad(v)
            };
            Ok(())
        }),
        (Dyn::F64(x), Dyn::F64(v)) => try_guard(|| {
            if accum {
                x.accum_grad(v)
            } else {
                x.set_grad(v)
            };
            Ok(())
        }),
        _ => Err(not_float("set_grad", a)),
    }
}

fn one_array<'py>(x: &Bound<'py, PyAny>, what: &str) -> PyResult<Held<'py>> {
    held(x).ok_or_else(|| {
        type_error(format!(
            "{what} takes a kiln array or tensor, not a `{}`",
            x.get_type()
                .name()
                .map(|n| n.to_string())
                .unwrap_or_default()
        ))
    })
}

/// The gradient of `x` (Dr.Jit's `dr.grad`).
#[pyfunction]
fn grad(py: Python<'_>, x: &Bound<PyAny>) -> PyResult<Py<PyAny>> {
    let h = one_array(x, "grad")?;
    let g = grad_of(py, &h.get())?;
    let d = g.bind(py).cast::<ArrayBase>()?.borrow().a.clone();
    h.like(py, d)
}

/// Set the gradient of `x` to `g` (a seed for `forward`, or a cotangent).
#[pyfunction]
fn set_grad(x: &Bound<PyAny>, g: &Bound<PyAny>) -> PyResult<()> {
    let h = one_array(x, "set_grad")?;
    set_grad_dyn(&h.get(), grad_value(&h, g)?, false)
}

/// Add `g` to the gradient of `x`.
#[pyfunction]
fn accum_grad(x: &Bound<PyAny>, g: &Bound<PyAny>) -> PyResult<()> {
    let h = one_array(x, "accum_grad")?;
    set_grad_dyn(&h.get(), grad_value(&h, g)?, true)
}

/// Forget the gradient of each array.
#[pyfunction]
#[pyo3(signature = (*args))]
fn clear_grad(args: &Bound<PyTuple>) -> PyResult<()> {
    let mut found = Vec::new();
    arrays(args.as_any(), &mut found)?;
    for a in found {
        float!(&a.get(), x => x.clear_grad(), else ());
    }
    Ok(())
}

/// Reverse mode from `y`, seeded with `seed` (default: 1 for every element, Dr.Jit's rule): the
/// gradients reach every array with `enable_grad` that `y` depends on. A graph is consumed by the
/// pass unless `retain_graph=True`. The GIL is released while the pass runs.
#[pyfunction]
#[pyo3(signature = (y, seed = None, retain_graph = false))]
fn backward_from(
    py: Python<'_>,
    y: &Bound<PyAny>,
    seed: Option<&Bound<PyAny>>,
    retain_graph: bool,
) -> PyResult<()> {
    crate::reads::check("a backward pass")?;
    let d = one_array(y, "backward")?.get();
    let s = match seed {
        Some(s) => to_dyn(s, Some(d.ty()))?.cast(d.ty()),
        None => crate::convert::lit_f64(1.0, d.ty()),
    };
    match (d, s) {
        (Dyn::F32(y), Dyn::F32(s)) => crate::gil::detach(py, || {
            try_guard(|| kiln::ad::backward_with(&y, &s, retain_graph))
        }),
        (Dyn::F64(y), Dyn::F64(s)) => crate::gil::detach(py, || {
            try_guard(|| kiln::ad::backward_with(&y, &s, retain_graph))
        }),
        (d, _) => Err(not_float("backward", &d)),
    }
}

/// Reverse mode from `y` (Dr.Jit's `dr.backward`): as `backward_from` with a seed of ones.
#[pyfunction]
#[pyo3(signature = (y, retain_graph = false))]
fn backward(py: Python<'_>, y: &Bound<PyAny>, retain_graph: bool) -> PyResult<()> {
    backward_from(py, y, None, retain_graph)
}

/// Forward mode from `x` (Dr.Jit's `dr.forward`): its gradient (1 unless set) is pushed to every
/// array computed from it; read them with `grad`.
#[pyfunction]
fn forward(py: Python<'_>, x: &Bound<PyAny>) -> PyResult<()> {
    crate::reads::check("a forward pass")?;
    match one_array(x, "forward")?.get() {
        Dyn::F32(v) => crate::gil::detach(py, || try_guard(|| kiln::ad::forward(&v))),
        Dyn::F64(v) => crate::gil::detach(py, || try_guard(|| kiln::ad::forward(&v))),
        d => Err(not_float("forward", &d)),
    }
}

/// The arrays of `args` for a pass over several of them (refused where values may not be read).
fn pass_arrays(args: &Bound<PyTuple>, what: &str) -> PyResult<Vec<Dyn>> {
    crate::reads::check(what)?;
    let mut found = Vec::new();
    arrays(args.as_any(), &mut found)?;
    Ok(found.iter().map(|h| h.get()).collect())
}

/// Forward mode from all these arrays at once (Dr.Jit's `enqueue(ADMode.Forward, ...)` then
/// `traverse`): each one's gradient (for an array without one: ones if `unset_is_one`, else
/// nothing) is pushed through everything computed from them, the tangents adding where paths
/// meet; read them with `grad`.
#[pyfunction]
#[pyo3(signature = (*args, unset_is_one = false))]
fn forward_from_all(py: Python<'_>, args: &Bound<PyTuple>, unset_is_one: bool) -> PyResult<()> {
    let xs = pass_arrays(args, "a forward pass")?;
    crate::gil::detach(py, || {
        try_guard(|| kiln::ad::forward_from_all(&xs, unset_is_one))
    })
}

/// Reverse mode from all these arrays at once (Dr.Jit's `enqueue(ADMode.Backward, ...)` then
/// `traverse`): each one's gradient is its seed, and one pass carries them all back to the arrays
/// with `enable_grad`. The graph is consumed unless `retain_graph=True`; the seeds without
/// `enable_grad` keep their gradients unless `clear_seeds=True`.
#[pyfunction]
#[pyo3(signature = (*args, retain_graph = false, clear_seeds = false))]
fn backward_from_all(
    py: Python<'_>,
    args: &Bound<PyTuple>,
    retain_graph: bool,
    clear_seeds: bool,
) -> PyResult<()> {
    let ys = pass_arrays(args, "a backward pass")?;
    crate::gil::detach(py, || {
        try_guard(|| kiln::ad::backward_from_all(&ys, retain_graph, clear_seeds))
    })
}

/// Reverse mode towards these arrays only (the engine of Dr.Jit's `backward_to`): every array
/// computed from them that holds a gradient is a seed; of the arrays with `enable_grad`, only
/// these get what arrives. The seeds keep their gradients unless `clear_seeds=True`.
#[pyfunction]
#[pyo3(signature = (*args, retain_graph = false, clear_seeds = false))]
fn backward_to_all(
    py: Python<'_>,
    args: &Bound<PyTuple>,
    retain_graph: bool,
    clear_seeds: bool,
) -> PyResult<()> {
    let xs = pass_arrays(args, "a backward pass")?;
    crate::gil::detach(py, || {
        try_guard(|| kiln::ad::backward_to(&xs, retain_graph, clear_seeds))
    })
}

/// Forward mode from every array whose gradient is set, towards `y` only (Dr.Jit's
/// `dr.forward_to`); returns `y`'s gradient.
#[pyfunction]
fn forward_to(py: Python<'_>, y: &Bound<PyAny>) -> PyResult<Py<PyAny>> {
    crate::reads::check("a forward pass")?;
    let h = one_array(y, "forward_to")?;
    let d = h.get();
    match &d {
        Dyn::F32(v) => crate::gil::detach(py, || try_guard(|| kiln::ad::forward_to(v)))?,
        Dyn::F64(v) => crate::gil::detach(py, || try_guard(|| kiln::ad::forward_to(v)))?,
        d => return Err(not_float("forward_to", d)),
    }
    let g = grad_of(py, &d)?;
    let gd = g.bind(py).cast::<ArrayBase>()?.borrow().a.clone();
    h.like(py, gd)
}

/// A `with` block with derivative recording off (`suspend_grad()`) or on (`resume_grad()`) on
/// this thread. Unlike Dr.Jit's, it applies to every array, so it takes no arguments.
#[pyclass(module = "kiln", unsendable)]
struct GradScope {
    on: bool,
    previous: Option<bool>,
}

#[pymethods]
impl GradScope {
    fn __enter__(mut slf: PyRefMut<Self>) -> PyRefMut<Self> {
        slf.previous = Some(kiln::ad::set_grad_recording(slf.on));
        slf
    }
    #[pyo3(signature = (*_exc))]
    fn __exit__(&mut self, _exc: &Bound<PyTuple>) -> bool {
        if let Some(p) = self.previous.take() {
            kiln::ad::set_grad_recording(p);
        }
        false
    }
}

fn scope(args: &Bound<PyTuple>, on: bool, name: &str) -> PyResult<GradScope> {
    if !args.is_empty() {
        return Err(value_error(format!(
            "kiln's {name}() applies to every array and takes no arguments: detach the arrays that should not carry gradients instead"
        )));
    }
    Ok(GradScope { on, previous: None })
}

/// `with kiln.suspend_grad():` computes without recording derivatives.
#[pyfunction]
#[pyo3(signature = (*args))]
fn suspend_grad(args: &Bound<PyTuple>) -> PyResult<GradScope> {
    scope(args, false, "suspend_grad")
}

/// `with kiln.resume_grad():` records derivatives again inside a `suspend_grad` block.
#[pyfunction]
#[pyo3(signature = (*args))]
fn resume_grad(args: &Bound<PyTuple>) -> PyResult<GradScope> {
    scope(args, true, "resume_grad")
}

/// A `with` block whose backward passes stop at the arrays that existed before it; what reaches
/// them is carried further when the block ends (Dr.Jit's `dr.isolate_grad`).
#[pyclass(module = "kiln", unsendable)]
struct IsolateGrad {
    scope: Option<kiln::ad::IsolateScope>,
}

#[pymethods]
impl IsolateGrad {
    fn __enter__(mut slf: PyRefMut<Self>) -> PyResult<PyRefMut<Self>> {
        if slf.scope.is_some() {
            return Err(value_error(
                "this isolate_grad() block is already open: make a new one with kiln.isolate_grad()",
            ));
        }
        slf.scope = Some(kiln::ad::IsolateScope::begin());
        Ok(slf)
    }
    #[pyo3(signature = (*exc))]
    fn __exit__(&mut self, exc: &Bound<PyTuple>) -> PyResult<bool> {
        let Some(scope) = self.scope.take() else {
            return Ok(false);
        };
        if exc.get_item(0).map(|e| !e.is_none()).unwrap_or(false) {
            // the block raised: end the scope (carrying on what it holds) and let the block's
            // exception through, whatever ending the scope says
            let _ = guard(|| drop(scope));
            return Ok(false);
        }
        // the scope belongs to this thread (its state is thread-local), so the GIL stays held
        try_guard(|| scope.end())?;
        Ok(false)
    }
}

/// `a`'s values with `b`'s place in the AD graph (`kiln.replace_grad` of two arrays of one
/// float type; sizes equal or one of them 1).
#[pyfunction]
fn _replace_grad(py: Python<'_>, a: &Bound<PyAny>, b: &Bound<PyAny>) -> PyResult<Py<PyAny>> {
    let (x, y) = (to_dyn(a, None)?, to_dyn(b, None)?);
    let r = match (&x, &y) {
        (Dyn::F32(x), Dyn::F32(y)) => guard(|| x.replace_grad(y))?.map(IntoDyn::into_dyn),
        (Dyn::F64(x), Dyn::F64(y)) => guard(|| x.replace_grad(y))?.map(IntoDyn::into_dyn),
        _ => {
            return Err(type_error(format!(
                "incompatible input types. (replace_grad takes two float arrays of one type, got {} and {})",
                x.ty().class_name(),
                y.ty().class_name()
            )))
        }
    };
    wrap(py, r.map_err(crate::errors::to_py)?)
}

/// `with kiln.isolate_grad():` bounds the backward passes inside to what the block computes.
#[pyfunction]
fn isolate_grad() -> IsolateGrad {
    IsolateGrad { scope: None }
}

/// Put the functions on the module.
pub fn register(m: &Bound<PyModule>) -> PyResult<()> {
    m.add_class::<GradScope>()?;
    m.add_class::<IsolateGrad>()?;
    macro_rules! add {
        ($($f:ident),*) => { $(m.add_function(wrap_pyfunction!($f, m)?)?;)* };
    }
    add!(
        enable_grad,
        disable_grad,
        grad_enabled,
        detach,
        grad,
        set_grad,
        accum_grad,
        clear_grad
    );
    add!(
        backward,
        backward_from,
        backward_from_all,
        backward_to_all,
        forward,
        forward_from_all,
        forward_to,
        suspend_grad,
        resume_grad,
        isolate_grad,
        _replace_grad
    );
    Ok(())
}
