//! A tensor of any element type for scans whose types are known only at run time (a binding to
//! another language): it flattens, rebuilds and stacks like the typed tensor it holds, and a
//! `Vec` of them is a step's outputs on PyTensor's face.

use super::erased::{Erased, Tree};
use super::StepOutputs;
use crate::tensor::Tensor;
use kiln_core::Result;

/// One tensor of any of kiln's element types.
///
/// ```
/// use kiln::prelude::*;
/// use kiln::scan::AnyTensor;
/// let init = vec![AnyTensor::F64(Tensor::scalar(0.0)), AnyTensor::I32(Tensor::scalar(0))];
/// let xs = vec![AnyTensor::F64(Tensor::from_vec(vec![1.0, 2.0, 3.0], &[3]))];
/// let (c, _) = kiln::scan(&init, &xs, |c, x| {
///     let (AnyTensor::F64(s), AnyTensor::I32(n), AnyTensor::F64(x)) = (&c[0], &c[1], &x[0]) else {
///         unreachable!()
///     };
///     (vec![AnyTensor::F64(s + x), AnyTensor::I32(n + 1)], Vec::<AnyTensor>::new())
/// })?;
/// let AnyTensor::I32(n) = &c[1] else { unreachable!() };
/// assert_eq!(n.to_vec(), vec![3]);
/// # Ok::<(), kiln::Error>(())
/// ```
#[derive(Clone)]
pub enum AnyTensor {
    Bool(Tensor<bool>),
    I32(Tensor<i32>),
    U32(Tensor<u32>),
    I64(Tensor<i64>),
    U64(Tensor<u64>),
    F32(Tensor<f32>),
    F64(Tensor<f64>),
}

/// Run `$body` with `$t` bound to the typed tensor; `$wrap` rewraps a result in the same variant.
macro_rules! each_any {
    ($x:expr, $t:ident => $body:expr) => {
        match $x {
            AnyTensor::Bool($t) => $body,
            AnyTensor::I32($t) => $body,
            AnyTensor::U32($t) => $body,
            AnyTensor::I64($t) => $body,
            AnyTensor::U64($t) => $body,
            AnyTensor::F32($t) => $body,
            AnyTensor::F64($t) => $body,
        }
    };
}

macro_rules! same_variant {
    ($x:expr, $t:ident => $body:expr) => {
        match $x {
            AnyTensor::Bool($t) => AnyTensor::Bool($body),
            AnyTensor::I32($t) => AnyTensor::I32($body),
            AnyTensor::U32($t) => AnyTensor::U32($body),
            AnyTensor::I64($t) => AnyTensor::I64($body),
            AnyTensor::U64($t) => AnyTensor::U64($body),
            AnyTensor::F32($t) => AnyTensor::F32($body),
            AnyTensor::F64($t) => AnyTensor::F64($body),
        }
    };
}

impl AnyTensor {
    /// The shape of the tensor it holds.
    pub fn shape(&self) -> &[usize] {
        each_any!(self, t => t.shape())
    }
}

impl Tree for AnyTensor {
    fn flatten(&self, out: &mut Vec<Erased>) {
        each_any!(self, t => t.flatten(out))
    }
    fn carries_grad(&self) -> bool {
        each_any!(self, t => Tree::carries_grad(t))
    }
    fn rebuild(&self, leaves: &mut std::vec::IntoIter<Erased>, path: &str) -> Result<Self> {
        Ok(same_variant!(self, t => t.rebuild(leaves, path)?))
    }
    fn stack(parts: Vec<Self>) -> Self {
        macro_rules! stack_as {
            ($v:ident) => {{
                let typed = parts
                    .into_iter()
                    .map(|p| match p {
                        AnyTensor::$v(t) => t,
                        _ => panic!("kiln: a scan step returned tensors of different types at one position"),
                    })
                    .collect();
                AnyTensor::$v(Tree::stack(typed))
            }};
        }
        match parts.first() {
            Some(AnyTensor::Bool(_)) => stack_as!(Bool),
            Some(AnyTensor::I32(_)) => stack_as!(I32),
            Some(AnyTensor::U32(_)) => stack_as!(U32),
            Some(AnyTensor::I64(_)) => stack_as!(I64),
            Some(AnyTensor::U64(_)) => stack_as!(U64),
            Some(AnyTensor::F32(_)) => stack_as!(F32),
            Some(AnyTensor::F64(_)) | None => stack_as!(F64),
        }
    }
}

impl StepOutputs for Vec<AnyTensor> {
    fn into_erased(self) -> Vec<Erased> {
        self.iter()
            .map(|a| each_any!(a, t => Erased::of(t)))
            .collect()
    }
    fn carries_grad(&self) -> bool {
        self.iter().any(Tree::carries_grad)
    }
}
