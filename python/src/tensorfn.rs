//! Tensors through the module's functions: `kiln.select(m, t, 0)`, `kiln.clip(t, 0, 1)`,
//! `kiln.isnan(t)`, … broadcast their operands as the tensor operators do and give a tensor of
//! the common shape; reductions take Dr.Jit's `axis=` (`None`, the default for a tensor, reduces
//! everything into a 0-d tensor; an int or a tuple reduces those axes). Arrays and numbers go the
//! arrays' way, in `funcs`.

use crate::convert::lit_f64;
use crate::dynarray::{Dyn, IntoDyn, Ty};
use crate::errors::{try_guard, type_error, value_error};
use crate::ops::{binary, Bin};
use crate::tensor::{broadcast, broadcast_shape, operand, wrap_tensor, TensorBase};
use kiln::Tensor;
use pyo3::prelude::*;
use pyo3::types::PyTuple;

/// `f` of the operands' flat values broadcast to their common shape, as a tensor, when any
/// operand is a tensor; `None` when none is (the caller's array path). `hints[i]` is the type a
/// Python number in position `i` takes; `None` takes the first tensor's among such positions.
pub fn nary(
    args: &[&Bound<PyAny>],
    hints: &[Option<Ty>],
    f: impl FnOnce(&[Dyn]) -> PyResult<Dyn>,
) -> PyResult<Option<Py<PyAny>>> {
    let tensor_ty = |pick: &dyn Fn(usize) -> bool| {
        args.iter().enumerate().find_map(|(i, a)| {
            a.cast::<TensorBase>()
                .ok()
                .filter(|_| pick(i))
                .map(|t| t.borrow().a.ty())
        })
    };
    let Some(any) = tensor_ty(&|_| true) else {
        return Ok(None);
    };
    let like = tensor_ty(&|i| hints.get(i).copied().flatten().is_none()).unwrap_or(any);
    let mut ops = Vec::with_capacity(args.len());
    for (i, a) in args.iter().enumerate() {
        let hint = hints.get(i).copied().flatten().unwrap_or(like);
        let Some(o) = operand(a, hint)? else {
            return Err(type_error(format!(
                "a `{}` cannot be an operand beside a tensor: pass a tensor, a kiln array, a NumPy array or a number",
                a.get_type().name()?
            )));
        };
        ops.push(o);
    }
    let mut to: Vec<usize> = Vec::new();
    for (_, s) in &ops {
        to = broadcast_shape(&to, s)?;
    }
    let flat = ops
        .iter()
        .map(|(d, s)| broadcast(d, s, &to))
        .collect::<PyResult<Vec<_>>>()?;
    Ok(Some(wrap_tensor(args[0].py(), f(&flat)?, to)?))
}

/// The reductions that take an `axis`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Red {
    Sum,
    Prod,
    Min,
    Max,
    Mean,
}

/// The axes an `axis=` argument names, highest first (so that reducing one keeps the others'
/// numbers), or `None` for all of them.
pub fn axes(axis: Option<&Bound<PyAny>>, ndim: usize) -> PyResult<Option<Vec<usize>>> {
    let Some(axis) = axis.filter(|a| !a.is_none()) else {
        return Ok(None);
    };
    let bad =
        |a: &Bound<PyAny>| a.is_instance_of::<pyo3::types::PyBool>() || a.extract::<i64>().is_err();
    let is_tuple = axis.cast::<PyTuple>().is_ok();
    if (!is_tuple && bad(axis))
        || (is_tuple && axis.try_iter()?.any(|a| a.map_or(true, |a| bad(&a))))
    {
        return Err(type_error(format!(
            "`axis` is None, an int or a tuple of ints, not {}",
            axis.repr()?
        )));
    }
    let given: Vec<i64> = match axis.cast::<PyTuple>() {
        Ok(t) => t.extract()?,
        Err(_) => vec![axis
            .extract()
            .map_err(|_| type_error("`axis` is None, an int or a tuple of ints"))?],
    };
    let mut out = Vec::with_capacity(given.len());
    for a in given {
        let k = if a < 0 { a + ndim as i64 } else { a };
        if k < 0 || k >= ndim as i64 {
            return Err(value_error(format!(
                "axis {a} is out of range for a tensor of {ndim} dimension(s)"
            )));
        }
        if out.contains(&(k as usize)) {
            return Err(value_error(format!("axis {a} is named twice")));
        }
        out.push(k as usize);
    }
    out.sort_unstable_by(|a, b| b.cmp(a));
    Ok(Some(out))
}

/// Tensor `t` (flat `a` of `shape`) reduced by `op` over `axis`; `whole` reduces a flat array
/// (the arrays' path) for `axis=None`, whose one value becomes a 0-d tensor.
pub fn reduce(
    py: Python<'_>,
    a: &Dyn,
    shape: &[usize],
    axis: Option<&Bound<PyAny>>,
    op: Red,
    whole: impl FnOnce(&Dyn) -> PyResult<Dyn>,
) -> PyResult<Py<PyAny>> {
    let Some(axes) = axes(axis, shape.len())? else {
        return wrap_tensor(py, whole(a)?, vec![]);
    };
    // masks: counted (sum, prod) or all/any (min, max) through u32; a mean is in floats
    let mask = a.ty() == Ty::Bool;
    let mut cur = match (a.ty(), op) {
        (Ty::Bool, _) => a.cast(Ty::U32),
        (Ty::I64 | Ty::U64, Red::Mean) => a.cast(Ty::F64),
        (t, Red::Mean) if !t.is_float() => a.cast(Ty::F32),
        _ => a.clone(),
    };
    let mut s = shape.to_vec();
    let mut count = 1usize;
    for ax in axes {
        if s[ax] == 0 && matches!(op, Red::Min | Red::Max) {
            return Err(value_error(format!(
                "the {} over axis {ax} of a tensor of shape {s:?}: the axis is empty, so there is no value",
                if op == Red::Min { "minimum" } else { "maximum" }
            )));
        }
        count *= s[ax];
        let (d, ns) = numeric!(&cur, x => {
            let t = try_guard(|| Tensor::try_from_array(x.clone(), &s))?;
            let r = try_guard(|| Ok(match op {
                Red::Sum | Red::Mean => t.sum_axis(ax),
                Red::Prod => t.prod_axis(ax),
                Red::Min => t.min_axis(ax),
                Red::Max => t.max_axis(ax),
            }))?;
            let ns = r.shape().to_vec();
            (r.into_array().into_dyn(), ns)
        }, bool => unreachable!("masks are reduced as u32"));
        cur = d;
        s = ns;
    }
    if op == Red::Mean {
        let n = lit_f64(count as f64, cur.ty());
        cur = binary(Bin::TrueDiv, &cur, &n)?;
    }
    if mask && matches!(op, Red::Min | Red::Max) {
        cur = cur.cast(Ty::Bool);
    }
    wrap_tensor(py, cur, s)
}
