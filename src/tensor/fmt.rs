//! Printing tensors like ndarray: nested brackets, one row per line, and the middle of long axes
//! elided (`...`). `Debug` adds the shape.

use super::Tensor;
use kiln_core::Scalar;
use std::fmt;

/// Axes longer than this show their first and last `EDGE` entries only.
const LONG: usize = 6;
const EDGE: usize = 3;

fn write_axis<T: fmt::Debug>(
    f: &mut fmt::Formatter<'_>,
    data: &[T],
    shape: &[usize],
    indent: usize,
) -> fmt::Result {
    if shape.is_empty() {
        return write!(f, "{:?}", data[0]);
    }
    let n = shape[0];
    let inner: usize = shape[1..].iter().product();
    let shown: Vec<Option<usize>> = if n > LONG {
        (0..EDGE)
            .map(Some)
            .chain(std::iter::once(None))
            .chain((n - EDGE..n).map(Some))
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
            )?,
            None => f.write_str("...")?,
        }
    }
    f.write_str("]")
}

impl<T: Scalar + fmt::Debug> fmt::Display for Tensor<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.try_to_vec() {
            Ok(v) if v.is_empty() => write!(f, "[]"),
            Ok(v) => write_axis(f, &v, &self.shape, 0),
            Err(e) => write!(f, "<error: {e}>"),
        }
    }
}

/// ```
/// use kiln::prelude::*;
/// let t = Tensor::<i32>::arange(6).reshape(&[2, 3]);
/// assert_eq!(format!("{t}"), "[[0, 1, 2],\n [3, 4, 5]]");
/// assert_eq!(format!("{t:?}"), "[[0, 1, 2],\n [3, 4, 5]], shape=[2, 3]");
/// let long = Tensor::<i32>::arange(10);
/// assert_eq!(format!("{long}"), "[0, 1, 2, ..., 7, 8, 9]");
/// ```
impl<T: Scalar + fmt::Debug> fmt::Debug for Tensor<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)?;
        write!(f, ", shape={:?}", self.shape)
    }
}
