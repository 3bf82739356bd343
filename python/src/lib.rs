//! kiln's Python module (`import kiln`): Dr.Jit's array face over kiln's engine.
//!
//! Below: `dynarray` (one array of any element type), `errors` (kiln's errors as exceptions),
//! `gil` (the GIL around the engine) and `reads` (where values may not be read). In the middle,
//! not yet in layers (module-cycles lists the one cycle): `array` and `tensor` (the classes,
//! NumPy views out), `convert` (Python values in), `ops` (operators with Dr.Jit's type promotion)
//! and `funcs` (the module's array functions) call each other. Above, calling only down: `tree` (arguments of traced functions), `ad`,
//! `random`, `control`, `freeze`, `scan`, `stencil`. The pure-Python package `kiln/` re-exports
//! this native module `kiln._kiln` and adds the vectors, scans' argument handling and a few
//! functions composed from these.

#[macro_use]
mod dynarray;
mod ad;
mod array;
mod control;
mod convert;
mod custom;
mod errors;
mod freeze;
mod funcs;
mod gil;
mod ops;
mod random;
mod reads;
mod scan;
mod stencil;
mod tensor;
mod tensorfn;
mod tree;

use pyo3::prelude::*;

#[pymodule]
fn _kiln(m: &Bound<PyModule>) -> PyResult<()> {
    // (false when the module is imported again, e.g. by a second interpreter: already set)
    let _ = kiln_core::schedule::set_eval_wait(gil::wait_without_gil);
    errors::register(m)?;
    array::register(m)?;
    funcs::register(m)?;
    ad::register(m)?;
    custom::register(m)?;
    control::register(m)?;
    freeze::register(m)?;
    tensor::register(m)?;
    stencil::register(m)?;
    scan::register(m)?;
    m.add_function(wrap_pyfunction!(tensor::_assign, m)?)?;
    m.add_function(wrap_pyfunction!(gil::_hold_engine_at_exit, m)?)?;
    m.add_class::<random::PyPcg32>()?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
