//! Dr.Jit's `PCG32`: one generator per lane (PCG-XSH-RR, the reference `pcg32_srandom_r`
//! seeding), advanced lazily: each `next_*` call is a traced expression, fused like any other.

use crate::array::wrap;
use crate::convert::to_dyn;
use crate::dynarray::{Dyn, IntoDyn, Ty};
use crate::errors::{guard, type_error};
use kiln::{Pcg32, UInt64};
use pyo3::prelude::*;

/// `size` random number generators, lane `i` on stream `initseq[i]` (default `arange(size)`)
/// from `initstate` (default PCG's), as Dr.Jit's `PCG32(size, initstate, initseq)`.
#[pyclass(name = "PCG32", module = "kiln")]
pub struct PyPcg32 {
    rng: Pcg32,
}

fn u64_arg(x: &Bound<PyAny>) -> PyResult<UInt64> {
    match to_dyn(x, Some(Ty::U64))?.cast(Ty::U64) {
        Dyn::U64(v) => Ok(v),
        _ => Err(type_error("expected an integer or a UInt64 array")),
    }
}

#[pymethods]
impl PyPcg32 {
    #[new]
    #[pyo3(signature = (size = 1, initstate = None, initseq = None))]
    fn new(
        size: usize,
        initstate: Option<&Bound<PyAny>>,
        initseq: Option<&Bound<PyAny>>,
    ) -> PyResult<Self> {
        let rng = match (initstate, initseq) {
            (None, None) => guard(|| Pcg32::new(size))?,
            (s, q) => {
                let state = match s {
                    Some(s) => u64_arg(s)?,
                    None => UInt64::scalar(0x853c_49e6_748f_ea9b),
                };
                let seq = match q {
                    Some(q) => u64_arg(q)?,
                    None => guard(|| UInt64::arange(size))?,
                };
                guard(|| Pcg32::seeded(&state, &seq))?
            }
        };
        Ok(PyPcg32 { rng })
    }
    /// Re-seed in place (Dr.Jit's `rng.seed(initstate, initseq)`), with the constructor's
    /// defaults: the default state, and sequence `i` for lane `i` of as many lanes as the
    /// generator or `initstate` has (so `PCG32().seed(initstate=index)` gives one generator per
    /// index).
    #[pyo3(signature = (initstate = None, initseq = None))]
    fn seed(
        &mut self,
        initstate: Option<&Bound<PyAny>>,
        initseq: Option<&Bound<PyAny>>,
    ) -> PyResult<()> {
        let s = match initstate {
            Some(s) => u64_arg(s)?,
            None => UInt64::scalar(0x853c_49e6_748f_ea9b),
        };
        let q = match initseq {
            Some(q) => u64_arg(q)?,
            None => {
                let n = s.len().max(self.rng.len());
                guard(|| UInt64::arange(n))?
            }
        };
        self.rng = guard(|| Pcg32::seeded(&s, &q))?;
        Ok(())
    }
    fn __len__(&self) -> usize {
        self.rng.len()
    }
    /// Uniform 32-bit integers.
    fn next_uint32(&mut self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        wrap(py, guard(|| self.rng.next_u32().into_dyn())?)
    }
    /// Uniform 64-bit integers.
    fn next_uint64(&mut self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        wrap(py, guard(|| self.rng.next_u64().into_dyn())?)
    }
    /// Uniform integers in `[0, bound)`, without bias.
    fn next_uint32_bounded(&mut self, py: Python<'_>, bound: u32) -> PyResult<Py<PyAny>> {
        wrap(py, guard(|| self.rng.next_u32_bounded(bound).into_dyn())?)
    }
    /// Uniform floats in `[0, 1)`.
    fn next_float32(&mut self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        wrap(py, guard(|| self.rng.next_f32().into_dyn())?)
    }
    /// Uniform doubles in `[0, 1)`.
    fn next_float64(&mut self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        wrap(py, guard(|| self.rng.next_f64().into_dyn())?)
    }
    /// Skip `delta` draws in every lane.
    fn advance(&mut self, delta: u64) -> PyResult<()> {
        guard(|| self.rng.advance(delta))
    }
    /// The state of each lane.
    /// Dr.Jit's `DRJIT_STRUCT`: loops, branches and frozen functions carry a generator in their
    /// state through these two fields.
    #[classattr]
    #[allow(non_snake_case)]
    fn DRJIT_STRUCT(py: Python<'_>) -> PyResult<Py<pyo3::types::PyDict>> {
        let d = pyo3::types::PyDict::new(py);
        let u64_class = crate::array::class_of(py, Ty::U64);
        d.set_item("state", &u64_class)?;
        d.set_item("inc", u64_class)?;
        Ok(d.unbind())
    }
    fn __copy__(&self) -> Self {
        PyPcg32 {
            rng: self.rng.clone(),
        }
    }
    #[setter]
    fn set_state(&mut self, v: &Bound<PyAny>) -> PyResult<()> {
        let s = u64_arg(v)?;
        self.rng = guard(|| Pcg32::from_state(s, self.rng.inc().clone()))?;
        Ok(())
    }
    #[setter]
    fn set_inc(&mut self, v: &Bound<PyAny>) -> PyResult<()> {
        let i = u64_arg(v)?;
        self.rng = guard(|| Pcg32::from_state(self.rng.state().clone(), i))?;
        Ok(())
    }
    #[getter]
    fn state(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        wrap(py, self.rng.state().clone().into_dyn())
    }
    /// The stream increment of each lane.
    #[getter]
    fn inc(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        wrap(py, self.rng.inc().clone().into_dyn())
    }
}
