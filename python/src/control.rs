//! Control flow in kernels with Dr.Jit's calls: `while_loop(state, cond, body)`,
//! `if_stmt(args, cond, true_fn, false_fn)` and `switch(index, targets, *args)`. The Python
//! functions are traced (called once with placeholder arrays, symbolic mode) into one kernel, or
//! run from the host per iteration (evaluated mode), exactly as kiln's Rust calls do; a Python
//! exception inside them abandons the trace and is raised again from the call.

use crate::array::ArrayBase;
use crate::convert::to_dyn;
use crate::dynarray::{Dyn, Ty};
use crate::errors::{fail, guard, to_py, type_error, value_error};
use crate::tree::Tree;
use kiln::control::{Branch, Loop, Mode, Switch};
use kiln::Bool;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyTuple};

/// A traced call target.
type TreeFn<'a> = dyn Fn(&Tree) -> Tree + 'a;

/// Dr.Jit's JIT flags that kiln honours, per thread (`kiln.scoped_set_flag`): the default mode
/// of loops, branches and calls (symbolic, or evaluated when the flag is off) and whether
/// symbolic loops leave unchanged state entries out (`Loop::optimize`).
#[derive(Clone, Copy)]
struct Flags {
    symbolic_loops: bool,
    symbolic_conditionals: bool,
    symbolic_calls: bool,
    optimize_loops: bool,
}

thread_local! {
    static FLAGS: std::cell::Cell<Flags> = const { std::cell::Cell::new(Flags {
        symbolic_loops: true,
        symbolic_conditionals: true,
        symbolic_calls: true,
        optimize_loops: true,
    }) };
}

fn flag_slot<'a>(f: &'a mut Flags, name: &str) -> PyResult<&'a mut bool> {
    Ok(match name {
        "SymbolicLoops" => &mut f.symbolic_loops,
        "SymbolicConditionals" => &mut f.symbolic_conditionals,
        "SymbolicCalls" => &mut f.symbolic_calls,
        "OptimizeLoops" => &mut f.optimize_loops,
        other => {
            return Err(value_error(format!(
                "kiln has no JIT flag {other:?}: it honours SymbolicLoops, SymbolicConditionals, SymbolicCalls, OptimizeLoops and KernelHistory"
            )))
        }
    })
}

/// Set one flag on this thread; returns its previous value.
#[pyfunction]
fn _set_flag(name: &str, on: bool) -> PyResult<bool> {
    if name == "KernelHistory" {
        return Ok(kiln::set_kernel_history(on));
    }
    if name == "KernelFreezing" {
        return Ok(kiln::engine::config::set_thread_freeze(on));
    }
    let mut f = FLAGS.with(|c| c.get());
    let slot = flag_slot(&mut f, name)?;
    let previous = std::mem::replace(slot, on);
    FLAGS.with(|c| c.set(f));
    Ok(previous)
}

/// Set the log filter of kiln's stderr subscriber (`kiln.set_log_level`): tracing-subscriber
/// filter syntax (`"info"`, `"kiln::kernel=trace"`). False when the program installed a
/// subscriber of its own, whose filter kiln cannot change.
#[pyfunction]
fn _set_log_filter(filter: &str) -> bool {
    kiln::set_log_level(filter)
}

/// One flag's value on this thread.
#[pyfunction]
fn _flag(name: &str) -> PyResult<bool> {
    if name == "KernelHistory" {
        return Ok(kiln::kernel_history_enabled());
    }
    if name == "KernelFreezing" {
        return Ok(kiln::engine::config::thread_freeze());
    }
    let mut f = FLAGS.with(|c| c.get());
    Ok(*flag_slot(&mut f, name)?)
}

/// The mode a construct runs in: the one asked for, else evaluated where its flag is off.
fn mode_or_flag(mode: Option<&str>, symbolic: fn(&Flags) -> bool) -> PyResult<Mode> {
    if mode.is_none() && !FLAGS.with(|c| symbolic(&c.get())) {
        return Ok(Mode::Evaluated);
    }
    mode_of(mode)
}

fn mode_of(mode: Option<&str>) -> PyResult<Mode> {
    match mode {
        None | Some("auto") => Ok(Mode::Auto),
        Some("symbolic") => Ok(Mode::Symbolic),
        Some("evaluated") => Ok(Mode::Evaluated),
        Some(m) => Err(value_error(format!(
            "mode={m:?}: kiln's modes are 'symbolic', 'evaluated' and None (symbolic, falling back to evaluated when a body reads other lanes)"
        ))),
    }
}

/// A state tuple's items as positional arguments (fresh objects: inside a trace they are
/// placeholders, not the caller's arrays).
fn spread<'py>(py: Python<'py>, t: &Tree) -> PyResult<Bound<'py, PyTuple>> {
    let v = t.to_py(py, false)?;
    let b = v.into_bound(py);
    match b.cast_into::<PyTuple>() {
        Ok(t) => Ok(t),
        Err(e) => PyTuple::new(py, [e.into_inner()]),
    }
}

/// A mask from what `cond` returned (a `Bool` array, or a Python bool).
fn mask(x: &Bound<PyAny>, what: &str) -> PyResult<Bool> {
    if !x.is_instance_of::<ArrayBase>() && !x.is_instance_of::<pyo3::types::PyBool>() {
        return Err(type_error(format!(
            "{what} returned a `{}`; it must return a kiln.Bool (a comparison such as `i < n`)",
            x.get_type().name()?
        )));
    }
    match to_dyn(x, Some(Ty::Bool))?.cast(Ty::Bool) {
        Dyn::Bool(b) => Ok(b),
        _ => unreachable!("cast to Bool gives a Bool"),
    }
}

/// Call `f(*state)` while kiln traces; a Python exception leaves the trace (see [`fail`]).
fn call_traced<'py>(py: Python<'py>, f: &Py<PyAny>, state: &Tree) -> Bound<'py, PyAny> {
    let r = spread(py, state).and_then(|args| f.bind(py).call1(args));
    r.unwrap_or_else(|e| fail(e))
}

/// Run a loop: `while cond(*state): state = body(*state)` in every lane (Dr.Jit's
/// `dr.while_loop`). `state` is a tuple of arrays (or of lists, dicts, dataclasses of them, and
/// plain values that do not change); `body` returns a tuple of the same layout. Returns the
/// final state. `max_iterations` bounds the trip count (`LoopTruncated` past it); `compress`
/// packs the live lanes between iterations in evaluated mode.
#[pyfunction]
#[pyo3(signature = (state, cond, body, labels = None, label = None, mode = None, max_iterations = None, compress = None, strict = true))]
#[allow(clippy::too_many_arguments)]
fn while_loop(
    py: Python<'_>,
    state: &Bound<PyAny>,
    cond: Py<PyAny>,
    body: Py<PyAny>,
    labels: Option<&Bound<PyAny>>,
    label: Option<&str>,
    mode: Option<&str>,
    max_iterations: Option<i64>,
    compress: Option<bool>,
    strict: bool,
) -> PyResult<Py<PyAny>> {
    let _in_kiln = crate::gil::callbacks(py); // (runs Python back)
    let _ = (labels, strict);
    let state = if state.is_instance_of::<PyTuple>() {
        state.clone()
    } else {
        PyTuple::new(py, [state])?.into_any()
    };
    let tree = Tree::from_py(&state)?;
    let mut lp = Loop::new(tree)
        .mode(mode_or_flag(mode, |f| f.symbolic_loops)?)
        .optimize(FLAGS.with(|c| c.get().optimize_loops));
    if let Some(l) = label {
        lp = lp.label(l);
    }
    if let Some(n) = max_iterations.filter(|&n| n >= 0) {
        lp = lp.max_iterations(n as u64);
    }
    if let Some(c) = compress {
        lp = lp.compress(c);
    }
    let layout = Tree::from_py(&state)?;
    let out = guard(|| {
        lp.run(
            |s| {
                crate::gil::attach(|py| {
                    let m = call_traced(py, &cond, s);
                    mask(&m, "the loop's cond").unwrap_or_else(|e| fail(e))
                })
            },
            |s| {
                crate::gil::attach(|py| {
                    let r = call_traced(py, &body, s);
                    let r = if r.is_instance_of::<PyTuple>() {
                        r
                    } else {
                        PyTuple::new(py, [r])
                            .map(|t| t.into_any())
                            .unwrap_or_else(|e| fail(e))
                    };
                    let t = Tree::from_py(&r).unwrap_or_else(|e| fail(e));
                    same_layout(&layout, &t, "the loop's body").unwrap_or_else(|e| fail(e));
                    t
                })
            },
        )
    })?
    .map_err(to_py)?;
    let result = out.to_py(py, false)?;
    // one state value comes back bare, as Dr.Jit gives it when the state is not a tuple
    Ok(result)
}

/// `b` has the layout of `a` (the same nesting, and arrays where `a` has arrays, of its types).
fn same_layout(a: &Tree, b: &Tree, what: &str) -> PyResult<()> {
    let (mut pa, mut pb) = (Vec::new(), Vec::new());
    a.plain_values(&mut pa);
    b.plain_values(&mut pb);
    if pa != pb {
        return Err(value_error(format!(
            "{what} changed a plain Python value of the state (a number or string): only kiln arrays can change in a loop, lane by lane; make that entry an array (kiln.Int32(0) instead of 0)"
        )));
    }
    let (mut x, mut y) = (Vec::new(), Vec::new());
    a.arrays(&mut x);
    b.arrays(&mut y);
    let tx: Vec<_> = x.iter().map(|d| d.ty().class_name()).collect();
    let ty: Vec<_> = y.iter().map(|d| d.ty().class_name()).collect();
    if tx != ty {
        return Err(value_error(format!(
            "{what} returned arrays of types {ty:?}, but the state holds {tx:?}: return the state in the same order, with the same types"
        )));
    }
    Ok(())
}

/// `true_fn(*args)` in the lanes where `cond` holds and `false_fn(*args)` elsewhere (Dr.Jit's
/// `dr.if_stmt`). A Python `bool` condition just calls one of them.
#[pyfunction]
#[pyo3(signature = (args, cond, true_fn, false_fn, arg_labels = None, rv_labels = None, label = None, mode = None, strict = true))]
#[allow(clippy::too_many_arguments)]
fn if_stmt(
    py: Python<'_>,
    args: &Bound<PyAny>,
    cond: &Bound<PyAny>,
    true_fn: Py<PyAny>,
    false_fn: Py<PyAny>,
    arg_labels: Option<&Bound<PyAny>>,
    rv_labels: Option<&Bound<PyAny>>,
    label: Option<&str>,
    mode: Option<&str>,
    strict: bool,
) -> PyResult<Py<PyAny>> {
    let _in_kiln = crate::gil::callbacks(py); // (runs Python back)
    let _ = (arg_labels, rv_labels, label, strict);
    let args = if args.is_instance_of::<PyTuple>() {
        args.clone()
    } else {
        PyTuple::new(py, [args])?.into_any()
    };
    if let Ok(b) = cond.extract::<bool>() {
        if !cond.is_instance_of::<ArrayBase>() {
            let f = if b { &true_fn } else { &false_fn };
            return Ok(f.bind(py).call1(args.cast::<PyTuple>()?)?.unbind());
        }
    }
    let m = mask(cond, "if_stmt's cond")?;
    let tree = Tree::from_py(&args)?;
    // each branch's plain Python values: they cannot differ per lane, so they must agree
    let plain: std::cell::RefCell<Vec<Vec<String>>> = std::cell::RefCell::new(Vec::new());
    let branch = |f: &Py<PyAny>, s: &Tree| -> Tree {
        crate::gil::attach(|py| {
            let r = call_traced(py, f, s);
            let t = Tree::from_py(&r).unwrap_or_else(|e| fail(e));
            let mut v = Vec::new();
            t.plain_values(&mut v);
            plain.borrow_mut().push(v);
            t
        })
    };
    let mode = mode_or_flag(mode, |f| f.symbolic_conditionals)?;
    let out = guard(|| {
        Branch::new()
            .mode(mode)
            .run(&m, |s| branch(&true_fn, s), |s| branch(&false_fn, s), &tree)
    })?
    .map_err(to_py)?;
    let plain = plain.into_inner();
    if plain.windows(2).any(|w| w[0] != w[1]) {
        return Err(value_error(
            "if_stmt: the branches returned different plain Python values (numbers or strings), which cannot differ lane by lane; return kiln arrays (kiln.Int32(1)) from both",
        ));
    }
    out.to_py(py, false)
}

/// `targets[index](*args)` lane by lane (Dr.Jit's `dr.switch`): an index out of range gives
/// zeros. A Python `int` index just calls that target.
#[pyfunction]
#[pyo3(signature = (index, targets, *args, mode = None, label = None, **kwargs))]
fn switch(
    py: Python<'_>,
    index: &Bound<PyAny>,
    targets: Vec<Py<PyAny>>,
    args: &Bound<PyTuple>,
    mode: Option<&str>,
    label: Option<&str>,
    kwargs: Option<&Bound<PyDict>>,
) -> PyResult<Py<PyAny>> {
    let _in_kiln = crate::gil::callbacks(py); // (runs Python back)
    let _ = label;
    if kwargs.is_some_and(|k| !k.is_empty()) {
        return Err(value_error(
            "kiln's switch passes positional arguments to the targets; pass keyword values positionally",
        ));
    }
    if !index.is_instance_of::<ArrayBase>() {
        let i: usize = index.extract()?;
        let f = targets.get(i).ok_or_else(|| {
            value_error(format!(
                "switch: index {i} but only {} targets",
                targets.len()
            ))
        })?;
        return Ok(f.bind(py).call1(args)?.unbind());
    }
    let idx = match to_dyn(index, Some(Ty::U32))?.cast(Ty::U32) {
        Dyn::U32(u) => u,
        _ => unreachable!("cast to UInt32 gives a UInt32"),
    };
    let tree = Tree::from_py(args.as_any())?;
    let calls: Vec<Box<TreeFn>> = targets
        .iter()
        .map(|f| {
            Box::new(move |s: &Tree| {
                crate::gil::attach(|py| {
                    let r = call_traced(py, f, s);
                    Tree::from_py(&r).unwrap_or_else(|e| fail(e))
                })
            }) as Box<TreeFn>
        })
        .collect();
    let refs: Vec<Option<&TreeFn>> = calls.iter().map(|b| Some(&**b)).collect();
    let mode = mode_or_flag(mode, |f| f.symbolic_calls)?;
    let out = guard(|| Switch::new().mode(mode).run(&idx, &refs, &tree))?.map_err(to_py)?;
    out.to_py(py, false)
}

/// Put the functions on the module.
pub fn register(m: &Bound<PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(while_loop, m)?)?;
    m.add_function(wrap_pyfunction!(if_stmt, m)?)?;
    m.add_function(wrap_pyfunction!(switch, m)?)?;
    m.add_function(wrap_pyfunction!(_set_flag, m)?)?;
    m.add_function(wrap_pyfunction!(_set_log_filter, m)?)?;
    m.add_function(wrap_pyfunction!(_flag, m)?)?;
    Ok(())
}
