//! Printing tensors like ndarray: nested brackets, one row per line, elements with their `Display`
//! form, and, in tensors of more than 500 elements, the middle of axes longer than 6 elided
//! (`...`). `Debug` adds the shape.

use super::Tensor;
use kiln_core::Scalar;
use std::fmt;

/// In tensors of more than `SHORTEN` elements, axes longer than their limit show only the first and
/// last half-limit entries: the last two axes 11 (5 shown each side), outer axes 6 (3), as ndarray.
const SHORTEN: usize = 500;
const LIMIT_INNER: usize = 11;
const LIMIT_OUTER: usize = 6;

fn write_axis<T: fmt::Display>(
    f: &mut fmt::Formatter<'_>,
    data: &[T],
    shape: &[usize],
    indent: usize,
    shorten: bool,
) -> fmt::Result {
    if shape.is_empty() {
        return write!(f, "{}", data[0]);
    }
    let n = shape[0];
    let inner: usize = shape[1..].iter().product();
    let limit = if shape.len() <= 2 {
        LIMIT_INNER
    } else {
        LIMIT_OUTER
    };
    let edge = limit / 2;
    let shown: Vec<Option<usize>> = if shorten && n > limit {
        (0..edge)
            .map(Some)
            .chain(std::iter::once(None))
            .chain((n - edge..n).map(Some))
            .collect()
    } else {
        (0..n).map(Some).collect()
    };
    f.write_str("[")?;
    for (k, entry) in shown.iter().enumerate() {
        if k > 0 {
            f.write_str(",")?;
            if shape.len() > 1 {
                f.write_str(&"\n".repeat(shape.len() - 1))?;
                f.write_str(&" ".repeat(indent + 1))?;
            } else {
                f.write_str(" ")?;
            }
        }
        match entry {
            Some(i) => write_axis(
                f,
                &data[i * inner..(i + 1) * inner],
                &shape[1..],
                indent + 1,
                shorten,
            )?,
            None => f.write_str("...")?,
        }
    }
    f.write_str("]")
}

impl<T: Scalar> fmt::Display for Tensor<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.try_to_vec() {
            // an empty tensor shows only its nesting, as ndarray prints it
            Ok(v) if v.is_empty() => {
                write!(f, "{}{}", "[".repeat(self.ndim()), "]".repeat(self.ndim()))
            }
            Ok(v) => write_axis(f, &v, &self.shape, 0, v.len() > SHORTEN),
            Err(e) => write!(f, "<error: {e}>"),
        }
    }
}

/// ```
/// use kiln::prelude::*;
/// let t = Tensor::<i32>::arange(6).reshape(&[2, 3]);
/// assert_eq!(format!("{t}"), "[[0, 1, 2],\n [3, 4, 5]]");
/// assert_eq!(format!("{t:?}"), "[[0, 1, 2],\n [3, 4, 5]], shape=[2, 3]");
/// let long = Tensor::<i32>::arange(1000);
/// assert_eq!(format!("{long}"), "[0, 1, 2, 3, 4, ..., 995, 996, 997, 998, 999]");
/// assert_eq!(format!("{}", Tensor::<f32>::zeros(&[2])), "[0, 0]");
/// ```
impl<T: Scalar> fmt::Debug for Tensor<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)?;
        write!(f, ", shape={:?}", self.shape)
    }
}
