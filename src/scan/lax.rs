//! The JAX face: [`scan`] with a carry and per-step inputs, its options ([`Lax`]), and PyTensor's
//! convenience views [`map`], [`foldl`] and [`foldr`].

use super::erased::{flatten, Erased, Tree};
use super::spec::{Keep, OutSpec, SeqSpec, Spec, StepIn, StepOut};
use super::{ScanMode, ScanReport};
use crate::tensor::Tensor;
use kiln_core::{Error, Result, Scalar};

/// JAX's `lax.scan`: `f(carry, x) -> (carry, y)` over the rows of `xs` (a tensor, a tuple of
/// tensors, or `()` with [`Lax::length`]); returns the final carry and the `y`s stacked on a new
/// leading axis. The carry keeps its type and shape from step to step.
///
/// ```
/// use kiln::prelude::*;
/// let xs = Tensor::from_vec(vec![1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0], &[3, 2]);
/// let (total, running) = kiln::scan(&Tensor::<f32>::zeros(&[2]), &xs, |acc, x| {
///     let a = acc + x;
///     (a.clone(), a)
/// }).unwrap();
/// assert_eq!(total.to_vec(), vec![9.0, 12.0]);
/// assert_eq!(running.shape(), &[3, 2]);
/// assert_eq!(running.to_vec(), vec![1.0, 2.0, 4.0, 6.0, 9.0, 12.0]);
/// ```
pub fn scan<C: Tree + Clone, X: Tree, Y: Tree + Clone>(
    init: &C,
    xs: &X,
    f: impl FnMut(&C, &X) -> (C, Y),
) -> Result<(C, Y)> {
    Lax::new(init, xs).run(f)
}

/// [`scan`] with options: `length`, `reverse`, `unroll`, `strict`, `keep_states`, `mode`.
///
/// ```
/// use kiln::prelude::*;
/// use kiln::scan::Lax;
/// let xs = Tensor::from_vec(vec![3i64, 1, 4, 1, 5, 9], &[6]);
/// let (_, ys) = Lax::new(&Tensor::scalar(0i64), &xs).reverse(true)
///     .run(|c, x| { let s = c + x; (s.clone(), s) }).unwrap();
/// assert_eq!(ys.to_vec(), vec![23, 20, 19, 15, 14, 9]);
/// // no inputs: a length instead
/// let (c, ys) = Lax::new(&Tensor::scalar(0i64), &()).length(10)
///     .run(|c, _| (c + 1i64, c.clone())).unwrap();
/// assert_eq!(c.to_vec(), vec![10]);
/// assert_eq!(ys.to_vec(), (0..10).collect::<Vec<i64>>());
/// ```
pub struct Lax<'a, C, X> {
    init: &'a C,
    xs: &'a X,
    length: Option<usize>,
    reverse: bool,
    unroll: usize,
    strict: bool,
    keep_states: bool,
    mode: ScanMode,
    label: String,
    report: Option<&'a mut ScanReport>,
}

impl<'a, C: Tree + Clone, X: Tree> Lax<'a, C, X> {
    /// A scan from carry `init` over the rows of `xs`.
    pub fn new(init: &'a C, xs: &'a X) -> Self {
        Lax {
            init,
            xs,
            length: None,
            reverse: false,
            unroll: 1,
            strict: false,
            keep_states: false,
            mode: ScanMode::Auto,
            label: "scan".into(),
            report: None,
        }
    }
    /// The number of steps: required when `xs` is `()`, else it must equal the leading sizes.
    pub fn length(mut self, n: usize) -> Self {
        self.length = Some(n);
        self
    }
    /// Run from the last row to the first, and store the `y`s in that reversed order too.
    pub fn reverse(mut self, on: bool) -> Self {
        self.reverse = on;
        self
    }
    /// JAX's unroll factor, accepted for portability: it must be at least 1. kiln's loop is one
    /// kernel (or one replayed step) either way, so it changes neither results nor the trace.
    pub fn unroll(mut self, k: usize) -> Self {
        self.unroll = k;
        self
    }
    /// A tensor the body captures from its environment is an error instead of an implicit input.
    pub fn strict(mut self, on: bool) -> Self {
        self.strict = on;
        self
    }
    /// Keep every step's carry (see [`super::ScanResult::states`]): read it with
    /// [`Lax::run_with_states`].
    pub fn keep_states(mut self, on: bool) -> Self {
        self.keep_states = on;
        self
    }
    /// Fused, stepped or automatic.
    pub fn mode(mut self, mode: ScanMode) -> Self {
        self.mode = mode;
        self
    }
    /// A name for messages, logs and the report.
    pub fn label(mut self, label: &str) -> Self {
        self.label = label.into();
        self
    }
    /// Where to write the run's [`ScanReport`].
    pub fn report(mut self, into: &'a mut ScanReport) -> Self {
        self.report = Some(into);
        self
    }

    /// Run: returns the final carry and the stacked `y`s.
    pub fn run<Y: Tree + Clone>(self, f: impl FnMut(&C, &X) -> (C, Y)) -> Result<(C, Y)> {
        let (c, y, _) = self.run_inner(f)?;
        Ok((c, y))
    }

    /// Run with [`Lax::keep_states`]: also every carry entry's states, `[length + 1, …]` each
    /// (the initial carry first), in the carry's flattened order.
    pub fn run_with_states<Y: Tree + Clone, U: Scalar>(
        self,
        f: impl FnMut(&C, &X) -> (C, Y),
    ) -> Result<(C, Y, Vec<Tensor<U>>)> {
        let label = self.label.clone();
        let n_carry = flatten(self.init).len();
        let (c, y, states) = self.keep_states(true).run_inner(f)?;
        let states = states
            .iter()
            .take(n_carry)
            .enumerate()
            .map(|(i, s)| match s {
                Some(e) => e.tensor::<U>(&|| format!("scan {label}: states of carry entry {i}")),
                None => Err(Error::Scan(format!(
                    "scan {label}: carry entry {i} kept no states"
                ))),
            })
            .collect::<Result<Vec<_>>>()?;
        Ok((c, y, states))
    }

    #[allow(clippy::type_complexity)]
    fn run_inner<Y: Tree + Clone>(
        self,
        mut f: impl FnMut(&C, &X) -> (C, Y),
    ) -> Result<(C, Y, Vec<Option<Erased>>)> {
        let label = self.label.clone();
        if self.unroll == 0 {
            return Err(Error::Scan(format!(
                "scan {label}: unroll must be at least 1 (got 0); 1 runs one step per iteration"
            )));
        }
        if crate::ad::recording() && (self.init.carries_grad() || self.xs.carries_grad()) {
            return Err(crate::ad::control::not_differentiable(&format!(
                "scan {label}"
            )));
        }
        let carry = flatten(self.init);
        let n_carry = carry.len();
        let mut spec = Spec::new(&label);
        spec.exact_length = true;
        spec.n_steps = self.length;
        spec.reverse = self.reverse;
        spec.strict = self.strict;
        spec.keep_states = self.keep_states;
        spec.mode = self.mode;
        spec.carry_names = Some((0..n_carry).map(|i| carry_path(self.init, i)).collect());
        for c in carry {
            spec.outs.push(OutSpec {
                init: Some(c),
                taps: vec![-1],
                keep: Keep::Nothing,
                owned: false,
            });
        }
        for x in flatten(self.xs) {
            spec.seqs.push(SeqSpec {
                data: x,
                taps: vec![0],
            });
        }
        let y_template: std::cell::RefCell<Option<Y>> = Default::default();
        let (init, xs) = (self.init, self.xs);
        let mut body = |input: &StepIn| -> Result<StepOut> {
            let c = init.rebuild(
                &mut input
                    .out_rows
                    .iter()
                    .take(n_carry)
                    .map(|r| r[0].clone())
                    .collect::<Vec<_>>()
                    .into_iter(),
                "carry",
            )?;
            let x = xs.rebuild(
                &mut input
                    .seq_rows
                    .iter()
                    .map(|r| r[0].clone())
                    .collect::<Vec<_>>()
                    .into_iter(),
                "xs",
            )?;
            let (c2, y) = f(&c, &x);
            if crate::ad::recording() && (c2.carries_grad() || y.carries_grad()) {
                // the body captured a tensor that carries a gradient
                return Err(crate::ad::control::not_differentiable(&format!(
                    "scan {label}"
                )));
            }
            let mut outs = flatten(&c2);
            if outs.len() != n_carry {
                return Err(Error::Scan(format!(
                    "scan {label}: the body returned a carry of {} tensor(s) but the initial carry has {n_carry}; return the carry with the structure of `init`",
                    outs.len()
                )));
            }
            outs.extend(flatten(&y));
            if y_template.borrow().is_none() {
                *y_template.borrow_mut() = Some(y);
            }
            Ok(StepOut { outs, until: None })
        };
        let super::run::RunOut {
            outputs,
            finals,
            states,
            report,
        } = super::run::run(spec, &mut body)?;
        if let Some(r) = self.report {
            *r = report;
        }
        let mut outputs = outputs.into_iter();
        // the carries are stored nowhere: their final values come from the loop state
        let _: Vec<Erased> = outputs.by_ref().take(n_carry).collect();
        let finals: Vec<Erased> = finals
            .into_iter()
            .take(n_carry)
            .map(|f| f.expect("a carry is a recurrent output"))
            .collect();
        let c = self.init.rebuild(&mut finals.into_iter(), "carry")?;
        let template = y_template.into_inner().ok_or_else(|| {
            Error::Scan(format!("kiln internal error: scan {label} traced no body"))
        })?;
        let y = template.rebuild(&mut outputs, "ys")?;
        Ok((c, y, states))
    }
}

/// The path of carry entry `i` in `init`'s flattened order (`.0`, `.1[2]`, or empty for a lone
/// tensor).
fn carry_path<C: Tree>(init: &C, i: usize) -> String {
    let leaves = flatten(init);
    if leaves.len() == 1 {
        return "carry".into();
    }
    format!("carry[{i}]")
}

/// Apply `f` to every row of `xs` (PyTensor's `map`): the results stacked on a new axis.
///
/// ```
/// use kiln::prelude::*;
/// let xs = Tensor::from_vec(vec![1.0f32, 2.0, 3.0], &[3]);
/// let ys = kiln::scan::map(&xs, |x| x * x).unwrap();
/// assert_eq!(ys.to_vec(), vec![1.0, 4.0, 9.0]);
/// ```
pub fn map<X: Tree, Y: Tree + Clone>(xs: &X, mut f: impl FnMut(&X) -> Y) -> Result<Y> {
    let (_, y) = Lax::new(&(), xs).label("map").run(|_: &(), x| ((), f(x)))?;
    Ok(y)
}

/// Fold `f(acc, x)` over the rows of `xs` from the first (PyTensor's `foldl`, `reduce`).
///
/// ```
/// use kiln::prelude::*;
/// let xs = Tensor::from_vec(vec![1i64, 2, 3, 4], &[4]);
/// let total = kiln::scan::foldl(&xs, &Tensor::scalar(0i64), |a, x| a * 10i64 + x).unwrap();
/// assert_eq!(total.to_vec(), vec![1234]);
/// ```
pub fn foldl<X: Tree, C: Tree + Clone>(
    xs: &X,
    init: &C,
    mut f: impl FnMut(&C, &X) -> C,
) -> Result<C> {
    let (c, ()) = Lax::new(init, xs)
        .label("foldl")
        .run(|c, x| (f(c, x), ()))?;
    Ok(c)
}

/// PyTensor's `reduce`: [`foldl`].
///
/// ```
/// use kiln::prelude::*;
/// let xs = Tensor::from_vec(vec![1.0f32, 2.0, 3.0], &[3]);
/// let s = kiln::scan::reduce(&xs, &Tensor::scalar(0.0f32), |a, x| a + x).unwrap();
/// assert_eq!(s.to_vec(), vec![6.0]);
/// ```
pub fn reduce<X: Tree, C: Tree + Clone>(xs: &X, init: &C, f: impl FnMut(&C, &X) -> C) -> Result<C> {
    foldl(xs, init, f)
}

/// Fold `f(acc, x)` over the rows of `xs` from the last (PyTensor's `foldr`).
///
/// ```
/// use kiln::prelude::*;
/// let xs = Tensor::from_vec(vec![1i64, 2, 3, 4], &[4]);
/// let total = kiln::scan::foldr(&xs, &Tensor::scalar(0i64), |a, x| a * 10i64 + x).unwrap();
/// assert_eq!(total.to_vec(), vec![4321]);
/// ```
pub fn foldr<X: Tree, C: Tree + Clone>(
    xs: &X,
    init: &C,
    mut f: impl FnMut(&C, &X) -> C,
) -> Result<C> {
    let (c, ()) = Lax::new(init, xs)
        .label("foldr")
        .reverse(true)
        .run(|c, x| (f(c, x), ()))?;
    Ok(c)
}
