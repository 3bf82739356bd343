//! kiln's errors as Python exceptions. `kiln.Error` is the base; each kind also derives from the
//! built-in exception a Python user would catch (`ValueError`, `TypeError`, `IndexError`,
//! `MemoryError`, `RuntimeError`), so `except ValueError` works as it does with NumPy.
//!
//! kiln's operators panic on a programmer error (sizes that do not match), with a message that says
//! what to do; [`guard`] turns such a panic into the exception, never a crash, and keeps the panic
//! hook quiet for it so Python prints the exception once.

use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyDict, PyTuple, PyType};
use std::cell::Cell;
use std::panic::{catch_unwind, AssertUnwindSafe};

/// The exception classes, made once at import.
pub struct Classes {
    pub error: Py<PyType>,
    pub value: Py<PyType>,
    pub typ: Py<PyType>,
    pub index: Py<PyType>,
    pub memory: Py<PyType>,
    pub runtime: Py<PyType>,
    pub not_differentiable: Py<PyType>,
}

static CLASSES: PyOnceLock<Classes> = PyOnceLock::new();

thread_local! {
    /// How many [`guard`]s this thread is inside: the panic hook stays quiet while it is not 0.
    static GUARDED: Cell<u32> = const { Cell::new(0) };
    /// A Python exception raised inside a function kiln was recording (see [`fail`]).
    static PENDING: std::cell::RefCell<Option<PyErr>> = const { std::cell::RefCell::new(None) };
}

/// The payload of an unwind that carries a Python exception out of a recorded function.
struct PyFailure;

/// Leave a function kiln is recording (a loop body, a frozen function) because Python raised
/// `e`: the unwind makes kiln abandon the recording, and the [`guard`] around the kiln call
/// raises `e` again. (`resume_unwind` runs no panic hook: nothing is printed.)
pub fn fail(e: PyErr) -> ! {
    PENDING.with(|p| *p.borrow_mut() = Some(e));
    std::panic::resume_unwind(Box::new(PyFailure))
}

/// Make the classes and put them on the module (at import).
pub fn register(m: &Bound<PyModule>) -> PyResult<()> {
    let py = m.py();
    let builtins = py.import("builtins")?;
    let ty = builtins.getattr("type")?;
    let make = |name: &str, bases: Vec<Bound<PyAny>>, doc: &str| -> PyResult<Py<PyType>> {
        let ns = PyDict::new(py);
        ns.set_item("__doc__", doc)?;
        ns.set_item("__module__", "kiln")?;
        let cls = ty.call1((name, PyTuple::new(py, bases)?, ns))?;
        m.add(name, &cls)?;
        Ok(cls.cast_into::<PyType>()?.unbind())
    };
    let base = builtins.getattr("Exception")?;
    let error = make(
        "Error",
        vec![base],
        "Base class of every error kiln raises.",
    )?;
    let e = error.bind(py).clone().into_any();
    let sub = |name: &str, builtin: &str, doc: &str| -> PyResult<Py<PyType>> {
        make(name, vec![e.clone(), builtins.getattr(builtin)?], doc)
    };
    let value = sub(
        "InvalidArgument",
        "ValueError",
        "Sizes that do not match, a bad argument, an unsupported construct (also a ValueError).",
    )?;
    let typ = sub(
        "TypeMismatch",
        "TypeError",
        "An operation on an element type that does not have it (also a TypeError).",
    )?;
    let index = sub(
        "OutOfRange",
        "IndexError",
        "A position outside an array (also an IndexError).",
    )?;
    let memory = sub(
        "OutOfMemory",
        "MemoryError",
        "An allocation kiln could not make (also a MemoryError).",
    )?;
    let runtime = sub(
        "CompileError",
        "RuntimeError",
        "A kernel that could not be compiled, or a backend that is missing (also a RuntimeError).",
    )?;
    let not_differentiable = make(
        "NotDifferentiable",
        vec![value.bind(py).clone().into_any()],
        "A construct kiln cannot differentiate (also an InvalidArgument and a ValueError).",
    )?;
    let _ = CLASSES.set(
        py,
        Classes {
            error,
            value,
            typ,
            index,
            memory,
            runtime,
            not_differentiable,
        },
    );
    install_quiet_hook();
    Ok(())
}

fn classes(py: Python<'_>) -> &Classes {
    CLASSES
        .get(py)
        .expect("kiln's exception classes are made at import")
}

/// An exception of class `which` with `msg`.
pub fn raise(which: fn(&Classes) -> &Py<PyType>, msg: impl Into<String>) -> PyErr {
    let msg = msg.into();
    crate::gil::attach(|py| PyErr::from_type(which(classes(py)).bind(py).clone(), msg))
}

pub fn value_error(msg: impl Into<String>) -> PyErr {
    raise(|c| &c.value, msg)
}

pub fn type_error(msg: impl Into<String>) -> PyErr {
    raise(|c| &c.typ, msg)
}

pub fn index_error(msg: impl Into<String>) -> PyErr {
    raise(|c| &c.index, msg)
}

/// The Python exception for a kiln error, by its kind.
pub fn to_py(e: kiln::Error) -> PyErr {
    use kiln::Error as E;
    let msg = pythonic(&e.to_string());
    match e {
        E::OutOfMemory { .. } => raise(|c| &c.memory, msg),
        E::Compile { .. } | E::BackendUnavailable { .. } => raise(|c| &c.runtime, msg),
        E::Type { .. } => raise(|c| &c.typ, msg),
        E::NotDifferentiable { .. } => raise(|c| &c.not_differentiable, msg),
        _ => raise(|c| &c.value, msg),
    }
}

/// kiln's messages name the Rust calls that fix a problem; give a Python user the Python ones.
pub fn pythonic(msg: &str) -> String {
    msg.replace(
        "`backward_with(.., retain_graph = true)` (or `kiln::vjp`, whose pullback may be called again)",
        "`kiln.backward(y, retain_graph=True)`",
    )
    .replace(
        "`backward_with(.., retain_graph = true)`",
        "`kiln.backward(y, retain_graph=True)`",
    )
    .replace("`kiln::ad::backward_from(&y, &seed)`", "`kiln.backward_from(y, seed)`")
    .replace("Pcg32::next_u32_bounded", "PCG32.next_uint32_bounded")
    .replace("the function's Rust code", "the function's Python code")
    .replace("if_then_else:", "if_stmt:")
    .replace("`.n_steps(n)`", "`n_steps=`")
    .replace(".n_steps(", "n_steps=(")
    .replace("with `.any()` or `.all()`", "with `kiln.any` or `kiln.all`")
    .replace("`a.at(..)`", "`a[...]`")
    .replace("`.neighborhood(..)`", "`neighborhood=`")
    .replace("UInt32::opaque(v)", "kiln.opaque(kiln.UInt32, v)")
    .replace("`.warn_after(n)`", "`warn_after=`")
    .replace("scan: scan scan", "scan")
    .replace(
        "a plain value of a `&mut` argument",
        "a plain value of an argument (a number, a string, the length of a list)",
    )
}

/// Run `f`, turning a kiln panic (a programmer error such as sizes that do not match) into the
/// exception its message calls for.
pub fn guard<R>(f: impl FnOnce() -> R) -> PyResult<R> {
    GUARDED.with(|g| g.set(g.get() + 1));
    let r = catch_unwind(AssertUnwindSafe(f));
    GUARDED.with(|g| g.set(g.get() - 1));
    r.map_err(|payload| {
        if payload.is::<PyFailure>() {
            if let Some(e) = PENDING.with(|p| p.borrow_mut().take()) {
                return e;
            }
        }
        let msg = payload
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_else(|| {
                "kiln: a value was read where kiln cannot read one (inside a frozen function's \
                 recording or a symbolic loop body): read it after the call, or pass it in"
                    .into()
            });
        from_message(&msg)
    })
}

/// As [`guard`] for a function that reports its errors as `Result`.
pub fn try_guard<R>(f: impl FnOnce() -> kiln::Result<R>) -> PyResult<R> {
    guard(f)?.map_err(to_py)
}

/// The exception for a kiln panic message: its kind read from the words the engine uses.
fn from_message(msg: &str) -> PyErr {
    let msg = &pythonic(msg);
    if !msg.starts_with("kiln: ") {
        // not one of kiln's reported errors: a bug; say so rather than guess its kind
        return raise(
            |c| &c.error,
            format!("kiln: internal error, please report it: {msg}"),
        );
    }
    let text = msg.strip_prefix("kiln: ").unwrap_or(msg).to_string();
    let lower = text.to_lowercase();
    if lower.contains("out of memory") {
        raise(|c| &c.memory, text)
    } else if lower.contains("out of range") || lower.contains("index ") && lower.contains("size") {
        raise(|c| &c.index, text)
    } else if lower.contains("not differentiable") || lower.contains("cannot differentiate") {
        raise(|c| &c.not_differentiable, text)
    } else if lower.contains("could not compile")
        || lower.contains("compil") && lower.contains("failed")
    {
        raise(|c| &c.runtime, text)
    } else {
        raise(|c| &c.value, text)
    }
}

/// Keep the default panic hook for everything but the panics a [`guard`] turns into exceptions.
fn install_quiet_hook() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if GUARDED.with(|g| g.get()) == 0 {
                previous(info);
            }
        }));
    });
}
