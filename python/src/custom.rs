//! Custom AD operations written in Python (Dr.Jit's `dr.CustomOp` and `dr.custom`): kiln's
//! [`kiln::ad::CustomOp`] whose primal and derivatives are Python callables over trees of arrays.
//! `kiln/_custom.py` gives them Dr.Jit's class interface (`eval`'s parameter names, `grad_out`,
//! `set_grad_in`, …). The derivatives run inside a backward or forward pass, which may have
//! released the GIL: each call takes it back.

use crate::errors::{fail, guard};
use crate::tree::Tree;
use pyo3::prelude::*;
use pyo3::types::PyTuple;
use std::collections::HashSet;
use std::sync::Mutex;

/// An op whose primal (`eval(inputs)`), reverse rule (`backward(inputs, outputs, grad_outputs)`
/// returning the inputs' gradients in the inputs' structure) and forward rule
/// (`forward(inputs, outputs, grad_inputs)` returning the outputs' tangents) are Python callables.
struct PyOp {
    name: &'static str,
    eval: Py<PyAny>,
    backward: Py<PyAny>,
    forward: Option<Py<PyAny>>,
}

/// `f(*trees)` as a tree; a Python exception leaves through kiln's pass (see [`fail`]).
fn call(f: &Py<PyAny>, trees: &[&Tree]) -> Tree {
    crate::gil::attach(|py| {
        let r = (|| -> PyResult<Tree> {
            let args = trees
                .iter()
                .map(|t| t.to_py(py, false))
                .collect::<PyResult<Vec<_>>>()?;
            // what the op returns is kept by its node too: its values, not the objects
            Tree::from_py(&f.bind(py).call1(PyTuple::new(py, args)?)?)?.stripped(py)
        })();
        r.unwrap_or_else(|e| fail(e))
    })
}

impl kiln::ad::CustomOp for PyOp {
    type Input = Tree;
    type Output = Tree;
    fn name(&self) -> &'static str {
        self.name
    }
    fn eval(&self, input: &Tree) -> Tree {
        call(&self.eval, &[input])
    }
    fn backward(&self, input: &Tree, output: &Tree, grad_output: &Tree) -> Tree {
        call(&self.backward, &[input, output, grad_output])
    }
    fn forward(&self, input: &Tree, output: &Tree, grad_input: &Tree) -> Option<Tree> {
        let f = self.forward.as_ref()?;
        Some(call(f, &[input, output, grad_input]))
    }
}

/// `name` as a `&'static str`, each distinct name kept once (op names are few: class names).
fn intern(name: &str) -> &'static str {
    static NAMES: Mutex<Option<HashSet<&'static str>>> = Mutex::new(None);
    let mut names = NAMES.lock().unwrap_or_else(|e| e.into_inner());
    let set = names.get_or_insert_with(HashSet::new);
    if let Some(n) = set.get(name) {
        return n;
    }
    let n: &'static str = Box::leak(name.to_owned().into_boxed_str());
    set.insert(n);
    n
}

/// Apply a custom op to `inputs` (a tuple of the op's arguments): its primal, with one node in
/// the AD graph when an input carries a gradient. The engine of `kiln.custom`.
#[pyfunction]
#[pyo3(signature = (name, eval, backward, forward, inputs))]
fn custom_apply(
    py: Python<'_>,
    name: &str,
    eval: Py<PyAny>,
    backward: Py<PyAny>,
    forward: Option<Py<PyAny>>,
    inputs: &Bound<PyAny>,
) -> PyResult<Py<PyAny>> {
    let _in_kiln = crate::gil::callbacks(py); // (runs Python back: the op's eval)
                                              // kept by the op's node: the values only, not the caller's objects (see `Tree::stripped`)
    let x = Tree::from_py(inputs)?.stripped(py)?;
    let op = PyOp {
        name: intern(name),
        eval,
        backward,
        forward,
    };
    let y = guard(|| kiln::ad::custom(op, &x))?;
    y.to_py(py, false)
}

/// Put the function on the module.
pub fn register(m: &Bound<PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(custom_apply, m)?)
}
