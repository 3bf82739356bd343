//! kiln's Python module (`import kiln`): Dr.Jit's array face over kiln's engine.
//!
//! Layers, each calling only down: `dynarray` (one array of any element type), `errors` (kiln's
//! errors as exceptions), `convert` (Python values in), `ops` (operators with Dr.Jit's type
//! promotion), `array` (the classes, NumPy views out), `funcs`/`ad`/`random` (the module's
//! functions). The pure-Python package `kiln/` re-exports this native module `kiln._kiln`.

#[macro_use]
mod dynarray;
mod ad;
mod array;
mod control;
mod convert;
mod errors;
mod freeze;
mod funcs;
mod ops;
mod random;
mod reads;
mod scan;
mod stencil;
mod tensor;
mod tree;

use pyo3::prelude::*;

#[pymodule]
fn _kiln(m: &Bound<PyModule>) -> PyResult<()> {
    errors::register(m)?;
    array::register(m)?;
    funcs::register(m)?;
    ad::register(m)?;
    control::register(m)?;
    freeze::register(m)?;
    tensor::register(m)?;
    stencil::register(m)?;
    scan::register(m)?;
    m.add_class::<random::PyPcg32>()?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
