//! Where Python code may not read array values: inside a scan step and a stencil kernel, which
//! kiln calls once to trace and then runs for every step or element. A value read there (NumPy,
//! `float(x)`, `tolist`) or a gradient pass run there would be the trace's, silently reused
//! everywhere, so it is an error that says what to do instead.

use crate::errors::value_error;
use pyo3::PyResult;
use std::cell::Cell;

thread_local! {
    /// What this thread is tracing (`None`: reads are allowed).
    static INSIDE: Cell<Option<&'static str>> = const { Cell::new(None) };
}

/// Reads are refused until the scope ends.
pub struct Refusing(Option<&'static str>);

/// Refuse reads while tracing `what` ("a scan step", "a stencil kernel").
pub fn refuse(what: &'static str) -> Refusing {
    Refusing(INSIDE.with(|c| c.replace(Some(what))))
}

impl Drop for Refusing {
    fn drop(&mut self) {
        INSIDE.with(|c| c.set(self.0));
    }
}

/// Whether reads are refused here, and why.
pub fn refused() -> Option<&'static str> {
    INSIDE.with(Cell::get)
}

/// An error if this thread is tracing a scan step or a stencil kernel; `how` says what was asked.
pub fn check(how: &str) -> PyResult<()> {
    match refused() {
        None => Ok(()),
        Some(what) => Err(value_error(format!(
            "{how} inside {what}: kiln calls {what} once to trace it and then runs the trace for every \
             step or element, so a value read now would be the trace's everywhere; compute with kiln's \
             operations (kiln.sqrt, kiln.select, ...; sum, kiln.min or kiln.max over a stencil window), and \
             read results after the call"
        ))),
    }
}
