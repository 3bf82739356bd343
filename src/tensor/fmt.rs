//! Printing tensors like ndarray: nested brackets, one row per line, elements with their `Display`
//! form, and, in tensors of more than 500 elements, the middle of axes longer than 6 elided
//! (`...`). A flat `Array` prints as a rank-1 tensor does (`write_flat`). `Debug` describes the
//! handle (type, shape, label, evaluated or lazy) without evaluating.

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

/// The values of a flat array as a rank-1 tensor prints them (`Array`'s `Display`).
pub(crate) fn write_flat<T: fmt::Display>(f: &mut fmt::Formatter<'_>, v: &[T]) -> fmt::Result {
    if v.is_empty() {
        return f.write_str("[]");
    }
    write_axis(f, v, &[v.len()], 0, v.len() > SHORTEN)
}

/// `{t}` prints the values, nested by axis (evaluates the tensor, as `to_vec` does).
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

/// `{t:?}` shows the tensor without evaluating it, in ndarray's layout (values, then fields):
/// the values where they are known without running a kernel (evaluated, or a literal) or `lazy
/// Tensor<T>` where they are not, then `shape=[…]`, then `literal` for a literal and the label
/// if any. The alternate form `{t:#?}` is the description `Array` prints (`Tensor<i32>[2, 3]
/// "label" evaluated [[…]]`: element type, shape, label, evaluated/literal/lazy, values).
///
/// ```
/// use kiln::prelude::*;
/// let t = Tensor::<i32>::arange(6).reshape(&[2, 3]);
/// assert_eq!(format!("{t:?}"), "lazy Tensor<i32>, shape=[2, 3]");
/// assert_eq!(format!("{t}"), "[[0, 1, 2],\n [3, 4, 5]]");   // Display evaluates
/// assert_eq!(format!("{t:?}"), "[[0, 1, 2],\n [3, 4, 5]], shape=[2, 3]");
/// let t = t.label("grid");
/// assert_eq!(format!("{t:#?}"), "Tensor<i32>[2, 3] \"grid\" evaluated [[0, 1, 2],\n [3, 4, 5]]");
/// let long = Tensor::<i32>::arange(1000);
/// assert_eq!(format!("{long}"), "[0, 1, 2, 3, 4, ..., 995, 996, 997, 998, 999]");
/// assert_eq!(format!("{}", Tensor::<f32>::zeros(&[2])), "[0, 0]");
/// assert_eq!(format!("{:?}", Tensor::<f32>::zeros(&[2]).label("z")), r#"[0, 0], shape=[2], literal, label="z""#);
/// ```
impl<T: Scalar> fmt::Debug for Tensor<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let a = self.array();
        let label = a.get_label();
        let literal = kiln_core::literal_value(a.id());
        // inside a frozen recording or a traced body a read is refused: no values there
        let readable = !(kiln_core::freeze::in_recording() || kiln_core::control::symbolic());
        if f.alternate() {
            write!(f, "Tensor<{}>{:?}", T::TYPE, self.shape)?;
            if let Some(l) = &label {
                write!(f, " {l:?}")?;
            }
            match (literal, a.is_evaluated()) {
                (Some(bits), _) => {
                    f.write_str(" literal ")?;
                    self.write_literal(f, T::from_bits64(bits))?;
                }
                (None, true) => {
                    f.write_str(" evaluated")?;
                    if readable {
                        f.write_str(" ")?;
                        fmt::Display::fmt(self, f)?;
                    }
                }
                (None, false) => f.write_str(" lazy")?,
            }
            return Ok(());
        }
        match (literal, a.is_evaluated()) {
            (Some(bits), _) => self.write_literal(f, T::from_bits64(bits))?,
            (None, true) if readable => fmt::Display::fmt(self, f)?,
            (None, true) => write!(f, "evaluated Tensor<{}>", T::TYPE)?,
            (None, false) => write!(f, "lazy Tensor<{}>", T::TYPE)?,
        }
        write!(f, ", shape={:?}", self.shape)?;
        if literal.is_some() {
            f.write_str(", literal")?;
        }
        if let Some(l) = &label {
            write!(f, ", label={l:?}")?;
        }
        Ok(())
    }
}

impl<T: Scalar> Tensor<T> {
    /// A literal's values, known without evaluating it (Display would fill a buffer).
    fn write_literal(&self, f: &mut fmt::Formatter<'_>, v: T) -> fmt::Result {
        let n = self.len();
        if n > SHORTEN {
            return write!(f, "[{v}, ... ({n} times)]");
        }
        if n == 0 {
            return write!(f, "{}{}", "[".repeat(self.ndim()), "]".repeat(self.ndim()));
        }
        write_axis(f, &vec![v; n], &self.shape, 0, false)
    }
}
