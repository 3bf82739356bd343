//! Frozen functions from Python (Dr.Jit's `@dr.freeze`): the first call with a new layout of
//! arguments runs the Python function and records the kernels it launches; later calls with the
//! same layout replay the recording without running any Python. Arrays passed in may be changed
//! by the function (`scatter` into one, a struct's field given a new array): the change reaches
//! the caller's objects on replays too.

use crate::errors::{fail, guard, to_py, value_error};
use crate::tree::Tree;
use kiln::freeze::{Frozen, Mut};
use pyo3::prelude::*;
use pyo3::sync::MutexExt;
use pyo3::types::{PyDict, PyTuple};
use std::sync::{Mutex, MutexGuard};

thread_local! {
    /// The frozen functions this thread is inside (a recursive call would wait on itself).
    static ACTIVE: std::cell::RefCell<Vec<usize>> = const { std::cell::RefCell::new(Vec::new()) };
}

type Body = Box<dyn FnMut(&mut Tree) -> Tree + Send>;
/// kiln's frozen function over one argument tree.
type Inner = Frozen<Body, fn(Mut<Tree>) -> Tree>;

/// A function frozen by `kiln.freeze`: call it like the function.
#[pyclass(module = "kiln", name = "FrozenFunction")]
pub struct FrozenFunction {
    /// Recordings after which a Python warning says the function keeps being re-recorded.
    warn_after: usize,
    /// Recordings made before the last `clear()` (Dr.Jit's counters start again at 0).
    cleared: std::sync::atomic::AtomicUsize,
    /// Locked with the GIL released while waiting (a thread recording runs Python and may hand
    /// the GIL to the waiting one).
    inner: Mutex<Inner>,
    func: Py<PyAny>,
    /// The objects recordings were keyed on by address (opaque arguments without weak
    /// references: the others are keyed by a serial number, see `tree::identity`), held so
    /// that their addresses are not reused while the recordings live.
    keyed: Mutex<Vec<Py<PyAny>>>,
    /// Dr.Jit's `auto_opaque=False`: every literal input is made opaque before the call.
    all_opaque: bool,
    /// Dr.Jit's `state_fn`: called with the call's arguments, it returns more inputs (arrays the
    /// function reaches without taking them as arguments). They are inputs and outputs, as the
    /// arguments are: what the function does to them reaches them on replays too.
    state_fn: Option<Py<PyAny>>,
    /// Whether the function has closure cells (a function's `__closure__` cannot be reassigned,
    /// so a function without cells is not asked again at every call).
    closure: bool,
}

/// `(args, kwargs, captured)` of a call as one tree (`__call__` appends what `state_fn` returns): the function's closure cells are inputs
/// too (Dr.Jit traverses them), so a captured array is bound on replays, a captured number that
/// changed records again, and a cell the function rebinds is rebound on replays.
fn call_tree(
    func: &Bound<PyAny>,
    closure: bool,
    args: &Bound<PyTuple>,
    kwargs: Option<&Bound<PyDict>>,
) -> PyResult<Tree> {
    // (no dict made for a call without keywords: `to_py` makes one when the body runs)
    let kw = match kwargs {
        Some(k) => Tree::from_py(k.as_any())?,
        None => Tree::Dict(Vec::new(), None),
    };
    Ok(Tree::Seq {
        tuple: true,
        source: None,
        items: vec![
            Tree::from_py(args.as_any())?,
            kw,
            if closure {
                Tree::cells_of(func)?
            } else {
                Tree::Cells(Vec::new())
            },
        ],
    })
}

/// The positional and keyword arguments a call tree holds, as Python values.
fn split<'py>(
    py: Python<'py>,
    t: &Tree,
    reuse: bool,
) -> PyResult<(Bound<'py, PyTuple>, Bound<'py, PyDict>)> {
    let v = t.to_py(py, reuse)?.into_bound(py);
    let pair = v.cast::<PyTuple>()?;
    Ok((
        pair.get_item(0)?.cast_into()?,
        pair.get_item(1)?.cast_into()?,
    ))
}

#[pymethods]
impl FrozenFunction {
    #[new]
    #[pyo3(signature = (func, state_fn = None, limit = None, warn_after = 10, auto_opaque = true, enabled = true))]
    fn new(
        py: Python<'_>,
        func: Py<PyAny>,
        state_fn: Option<Py<PyAny>>,
        limit: Option<usize>,
        warn_after: usize,
        auto_opaque: bool,
        enabled: bool,
    ) -> PyResult<Self> {
        if !func.bind(py).is_callable() {
            return Err(value_error("freeze takes a function"));
        }
        let f = func.clone_ref(py);
        let body: Body = Box::new(move |t: &mut Tree| {
            crate::gil::attach(|py| {
                let (args, kwargs) = split(py, t, true).unwrap_or_else(|e| fail(e));
                let r = f
                    .bind(py)
                    .call(args, Some(&kwargs))
                    .unwrap_or_else(|e| fail(e));
                // what the function did to its arguments is part of what it computed
                t.refresh(py).unwrap_or_else(|e| fail(e));
                // (with which entries it rebound, kept by the recording as a string: a replay
                // rebinds them too, instead of writing into the objects the caller holds)
                let mut rebound = Vec::new();
                t.rebound(&mut rebound);
                let marks = rebound.iter().map(|i| i.to_string()).collect::<Vec<_>>();
                Tree::Seq {
                    tuple: true,
                    source: None,
                    items: vec![
                        Tree::from_py(&r).unwrap_or_else(|e| fail(e)),
                        Tree::Str(marks.join(",")),
                    ],
                }
            })
        });
        // past `limit=`, Dr.Jit evicts the recording used longest ago
        let mut inner = kiln::freeze(body)
            .evict_least_recent(true)
            .warn_after(warn_after)
            .auto_opaque(auto_opaque)
            .enabled(enabled);
        if let Some(n) = limit {
            inner = inner.limit(n);
        }
        let closure = func
            .bind(py)
            .getattr(pyo3::intern!(py, "__closure__"))
            .is_ok_and(|c| !c.is_none());
        Ok(FrozenFunction {
            state_fn,
            keyed: Mutex::new(Vec::new()),
            all_opaque: !auto_opaque,
            closure,
            warn_after,
            cleared: std::sync::atomic::AtomicUsize::new(0),
            inner: Mutex::new(inner),
            func,
        })
    }

    #[pyo3(signature = (*args, **kwargs))]
    fn __call__(
        &self,
        py: Python<'_>,
        args: &Bound<PyTuple>,
        kwargs: Option<&Bound<PyDict>>,
    ) -> PyResult<Py<PyAny>> {
        let _in_kiln = crate::gil::callbacks(py); // (runs Python back: state_fn, the body)
        let mut tree = call_tree(self.func.bind(py), self.closure, args, kwargs)?;
        if let Some(sf) = &self.state_fn {
            let state = sf.bind(py).call(args, kwargs)?;
            if let Tree::Seq { items, .. } = &mut tree {
                items.push(Tree::from_py(&state)?);
            }
        }
        if self.all_opaque {
            tree.opaque_literals()?;
        }
        let me = self as *const Self as usize;
        if ACTIVE.with(|a| a.borrow().contains(&me)) {
            return Err(value_error(
                "a frozen function called itself (directly or through another): kiln cannot record a call inside its own recording; call the plain function (`f.function`) inside",
            ));
        }
        ACTIVE.with(|a| a.borrow_mut().push(me));
        struct Leave(usize);
        impl Drop for Leave {
            fn drop(&mut self) {
                ACTIVE.with(|a| a.borrow_mut().retain(|&x| x != self.0));
            }
        }
        let _leave = Leave(me);
        // With the GIL released, and the engine's evaluation lock taken before this function's
        // own: a recording holds the evaluation lock while its Python body needs the GIL (and
        // may call this function, on its thread), so waiting for either with the GIL held, or
        // for the evaluation lock while holding this function's, could deadlock. The body
        // takes the GIL back itself.
        let (out, recordings_before, stats_recordings, why) = crate::gil::detach(py, || {
            let _serial = kiln_core::schedule::hold_eval_lock();
            let mut inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
            let before = inner.stats().recordings;
            let out = guard(|| inner.call(&mut tree));
            let stats = inner.stats();
            (
                out,
                before,
                stats.recordings,
                stats.retraces.last().cloned(),
            )
        });
        let out = out?.map_err(|e| to_py(pythonic(e)))?;
        if stats_recordings != recordings_before {
            let mut keyed = Vec::new();
            tree.opaques(py, &mut keyed);
            if !keyed.is_empty() {
                self.keyed
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .extend(keyed);
            }
        }
        let recordings = stats_recordings - self.cleared.load(std::sync::atomic::Ordering::Relaxed);
        let why = (recordings == self.warn_after + 1).then_some(why).flatten();
        if recordings == self.warn_after + 1 {
            // kiln's own warning goes to its log; a Python user sees Python's warnings
            let msg = format!(
                "kiln.freeze: {} has been recorded {recordings} times (warn_after={}); the last time because {}; arguments whose layout keeps changing defeat freezing",
                self.func.bind(py).getattr("__name__").map(|n| n.to_string()).unwrap_or_else(|_| "the function".into()),
                self.warn_after,
                crate::errors::pythonic(&why.unwrap_or_else(|| "its arguments changed".into())),
            );
            let w = py.import("warnings")?;
            w.call_method1(
                "warn",
                (msg, py.get_type::<pyo3::exceptions::PyRuntimeWarning>(), 2),
            )?;
        }
        let out = match out {
            Tree::Seq { mut items, .. } if items.len() == 2 => {
                if let Tree::Str(marks) = &items[1] {
                    let rebound: Vec<usize> =
                        marks.split(',').filter_map(|m| m.parse().ok()).collect();
                    tree.mark_rebound(&rebound);
                }
                items.swap_remove(0)
            }
            other => other,
        };
        tree.write_back(py)?;
        out.to_py(py, false)
    }

    /// A frozen method: `obj.method(...)` calls the frozen function with `obj` first, and
    /// `obj.method.n_recordings` (every attribute) is the frozen function's, shared by all
    /// instances as in Dr.Jit.
    fn __get__(
        slf: Py<Self>,
        py: Python<'_>,
        obj: Option<Py<PyAny>>,
        _cls: Option<Py<PyAny>>,
    ) -> PyResult<Py<PyAny>> {
        match obj {
            None => Ok(slf.into_any()),
            Some(o) => Ok(Py::new(
                py,
                BoundFrozen {
                    frozen: slf,
                    obj: o,
                },
            )?
            .into_any()),
        }
    }

    /// How many times the function was run and recorded.
    #[getter]
    fn n_recordings(&self, py: Python<'_>) -> usize {
        self.lock(py).stats().recordings - self.cleared.load(std::sync::atomic::Ordering::Relaxed)
    }
    /// How many calls replayed a recording.
    #[getter]
    fn n_replays(&self, py: Python<'_>) -> usize {
        self.lock(py).stats().replays
    }
    /// Why each recording after the first was made (what changed in the arguments).
    #[getter]
    fn retraces(&self, py: Python<'_>) -> Vec<String> {
        self.lock(py).stats().retraces.clone()
    }
    /// Mean time of a replay, in microseconds.
    #[getter]
    fn mean_replay_us(&self, py: Python<'_>) -> f64 {
        self.lock(py).stats().mean_replay_us()
    }
    /// How many recordings are kept now (Dr.Jit's `n_cached_recordings`).
    #[getter]
    fn n_cached_recordings(&self, py: Python<'_>) -> usize {
        self.lock(py).cached_recordings()
    }
    /// Whether calls record and replay (False: the function runs plainly); settable, keeping
    /// the recordings (Dr.Jit's `enabled`).
    #[getter]
    fn get_enabled(&self, py: Python<'_>) -> bool {
        self.lock(py).is_enabled()
    }
    #[setter]
    fn set_enabled(&self, py: Python<'_>, on: bool) {
        self.lock(py).set_enabled(on)
    }
    /// Forget every recording.
    fn clear(&self, py: Python<'_>) {
        let mut inner = self.lock(py);
        self.cleared.store(
            inner.stats().recordings,
            std::sync::atomic::Ordering::Relaxed,
        );
        inner.clear();
        self.keyed.lock().unwrap_or_else(|p| p.into_inner()).clear();
    }
    /// The function that was frozen (call it to run the function plainly).
    #[getter]
    fn function(&self, py: Python<'_>) -> Py<PyAny> {
        self.func.clone_ref(py)
    }
}

/// kiln's freeze errors name the Rust call; a Python user passes `state_fn=` instead.
fn pythonic(e: kiln::Error) -> kiln::Error {
    match e {
        kiln::Error::HiddenInput { label, during } => kiln::Error::Invalid(format!(
            "{label} is used inside a frozen function ({during}) but is neither one of its arguments nor created inside it, so a replay could not bind it; pass it as an argument, or return it from `state_fn=` (`kiln.freeze(state_fn=lambda *args: captured)`) so that it becomes part of the frozen state"
        )),
        e => e,
    }
}

impl FrozenFunction {
    fn lock(&self, py: Python<'_>) -> MutexGuard<'_, Inner> {
        // a call that failed inside Python left nothing half-done in kiln (the recording was
        // abandoned): the state behind a poisoned lock is sound
        self.inner
            .lock_py_attached(py)
            .unwrap_or_else(|p| p.into_inner())
    }
}

/// A frozen function reached through an instance (`obj.method`): calls pass `obj` first, and
/// any other attribute is the frozen function's own.
#[pyclass(module = "kiln", name = "BoundFrozenFunction")]
pub struct BoundFrozen {
    frozen: Py<FrozenFunction>,
    obj: Py<PyAny>,
}

#[pymethods]
impl BoundFrozen {
    #[pyo3(signature = (*args, **kwargs))]
    fn __call__(
        &self,
        py: Python<'_>,
        args: &Bound<PyTuple>,
        kwargs: Option<&Bound<PyDict>>,
    ) -> PyResult<Py<PyAny>> {
        let mut all = Vec::with_capacity(args.len() + 1);
        all.push(self.obj.bind(py).clone());
        all.extend(args.iter());
        let all = PyTuple::new(py, all)?;
        Ok(self.frozen.bind(py).call(all, kwargs)?.unbind())
    }
    fn __getattr__(&self, py: Python<'_>, name: &str) -> PyResult<Py<PyAny>> {
        Ok(self.frozen.bind(py).getattr(name)?.unbind())
    }
    /// The instance the method was reached through.
    #[getter]
    fn __self__(&self, py: Python<'_>) -> Py<PyAny> {
        self.obj.clone_ref(py)
    }
    /// The frozen function itself.
    #[getter]
    fn __func__(&self, py: Python<'_>) -> Py<PyAny> {
        self.frozen.clone_ref(py).into_any()
    }
}

/// Put the classes on the module.
pub fn register(m: &Bound<PyModule>) -> PyResult<()> {
    m.add_class::<FrozenFunction>()?;
    m.add_class::<BoundFrozen>()
}
