//! The JAX face: [`scan`] with a carry and per-step inputs, its options ([`Lax`]), and PyTensor's
//! convenience views [`map`], [`foldl`] and [`foldr`].

use super::erased::{flatten, Erased, Tracked, Tree};
use super::spec::{
    strict_captured_gradient, Keep, OutSpec, SeqSpec, Spec, StepIn, StepOut, CAPTURED_GRADIENT,
};
use super::stepwise::Rows;
use super::{ScanMode, ScanReport};
use crate::array::UInt32;
use crate::tensor::Tensor;
use kiln_core::{Error, Result, Scalar, VarType};
use std::cell::{Cell, RefCell};

/// JAX's `lax.scan`: `f(carry, x) -> (carry, y)` over the rows of `xs` (a tensor, a tuple of
/// tensors, or `()` with [`Lax::length`]); returns the final carry and the `y`s stacked on a new
/// leading axis. The carry keeps its type and shape from step to step.
///
/// Gradients: when `init`, `xs` or a tensor the body captures carries one, the scan runs the body
/// once per step with derivatives recorded, so both modes and higher orders go through it like
/// through any code (every step's values are kept for the backward pass, as with JAX's `grad`;
/// none of the scan rewrites apply: the report's mode says `differentiated`).
///
/// ```
/// use kiln::prelude::*;
/// let mut a = Float64::from_slice(&[0.5]);
/// a.enable_grad();
/// let xs = Tensor::from_vec(vec![1.0, 2.0, 3.0], &[3]);
/// let ta = Tensor::from_array(a.clone(), &[]);
/// // c ← c·a + x from c = 0: c_T = x0·a² + x1·a + x2
/// let (c, _) = kiln::scan(&Tensor::<f64>::scalar(0.0), &xs, |c, x| {
///     let c2 = &(c * &ta) + x;
///     (c2.clone(), c2)
/// }).unwrap();
/// c.array().sum().backward();
/// assert_eq!(a.grad().to_vec(), vec![2.0 * 0.5 + 2.0]);
/// ```
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
    /// Keep every step's matrix products (the forward of a gradient scan).
    save_products: bool,
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
            save_products: false,
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
    /// Keep every step's matrix products (for a gradient scan's recorded step).
    fn saving_products(mut self) -> Self {
        self.save_products = true;
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
        f: impl FnMut(&C, &X) -> (C, Y),
    ) -> Result<(C, Y, Vec<Option<Erased>>)> {
        self.run_full(f).map(|(c, y, states, _)| (c, y, states))
    }

    /// [`Lax::run_inner`], also returning what a gradient scan needs to replay the body: the
    /// arrays it captured and the products pushed out over the rows of `xs` (a plain run's
    /// analysis finds them; `None` otherwise, or when the body has side effects).
    #[allow(clippy::type_complexity)]
    fn run_full<Y: Tree + Clone>(
        self,
        mut f: impl FnMut(&C, &X) -> (C, Y),
    ) -> Result<(C, Y, Vec<Option<Erased>>, Option<Replayable>)> {
        let label = self.label.clone();
        if self.unroll == 0 {
            return Err(Error::Scan(format!(
                "scan {label}: unroll must be at least 1 (got 0); 1 runs one step per iteration"
            )));
        }
        // (an enclosing scan's step substitutions are not this scan's)
        let _isolated = super::hook::Installed::new(super::hook::Hook::neutral());
        if crate::ad::recording() && (self.init.carries_grad() || self.xs.carries_grad()) {
            return self
                .run_differentiated(&mut f)
                .map(|(c, y, s)| (c, y, s, None));
        }
        let carry = flatten(self.init);
        let n_carry = carry.len();
        let mut spec = Spec::new(&label);
        spec.exact_length = true;
        spec.n_steps = self.length;
        spec.reverse = self.reverse;
        spec.strict = self.strict;
        spec.keep_states = self.keep_states;
        spec.save_products = self.save_products;
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
                // the body captured a tensor that carries a gradient: run it step by step
                return Err(Error::Ad(CAPTURED_GRADIENT.into()));
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
        let run = super::run::run(spec, &mut body);
        if matches!(&run, Err(Error::Ad(m)) if m == CAPTURED_GRADIENT) {
            if self.strict {
                return Err(strict_captured_gradient(&label));
            }
            return self
                .run_differentiated(&mut f)
                .map(|(c, y, s)| (c, y, s, None));
        }
        let super::run::RunOut {
            outputs,
            finals,
            states,
            report,
            captured,
            pushed,
            saved,
        } = run?;
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
        Ok((c, y, states, captured.map(|c| (c, pushed, saved))))
    }
}

impl<C: Tree + Clone, X: Tree> Lax<'_, C, X> {
    /// The scan with gradients: the body runs once per step on ordinary lazy tensors, recording
    /// derivatives like any code (row `t` of `xs` is a view, the `y`s are stacked), and each
    /// step's carry and `y` are evaluated before the next (one kernel group per step, as in
    /// stepped mode). The backward pass is the steps' rules in reverse, with every step's values
    /// kept for it (memory grows with the length, as with JAX's `grad` of `lax.scan`). Not a
    /// scan of its own: no rewrite applies to it (the report says so).
    #[allow(clippy::type_complexity)]
    fn run_differentiated<Y: Tree + Clone>(
        self,
        f: &mut dyn FnMut(&C, &X) -> (C, Y),
    ) -> Result<(C, Y, Vec<Option<Erased>>)> {
        let label = self.label.clone();
        let xs = flatten(self.xs);
        let n = match (self.length, xs.first()) {
            (Some(n), _) => n,
            (None, Some(x)) if !x.shape.is_empty() => x.shape[0],
            (None, None) => {
                return Err(Error::Scan(format!(
                    "scan {label}: no sequence to scan over; give `length` when `xs` is `()`"
                )))
            }
            (None, Some(x)) => {
                return Err(Error::Scan(format!(
                    "scan {label}: an input in `xs` is a scalar ({}); a scan walks along the leading axis of each input, so give it one",
                    x.describe()
                )))
            }
        };
        if let Some(x) = xs.iter().find(|x| x.shape.first() != Some(&n)) {
            return Err(Error::Scan(format!(
                "scan {label}: every input in `xs` needs {n} rows (its leading axis), but one is {}; give inputs of one length",
                x.describe()
            )));
        }
        if let Some((c, y)) = self.one_kernel(f, n)? {
            if let Some(r) = self.report {
                *r = ScanReport {
                    label: label.clone(),
                    steps_run: n,
                    steps_requested: n,
                    loops_emitted: 1,
                    mode: "differentiated, one loop",
                    mode_reason: "an input carries a gradient, only the final carry is used and the body is lane-local: one loop carries each lane's Jacobian (one adjoint state, nothing kept per step)".into(),
                    ..Default::default()
                };
            }
            return Ok((c, y, Vec::new()));
        }
        let mut report = ScanReport::default();
        if let Some((c, y)) = self.gradient_scan(f, n, &mut report)? {
            if let Some(r) = self.report {
                *r = report;
            }
            return Ok((c, y, Vec::new()));
        }
        let n_carry = flatten(self.init).len();
        let shapes: Vec<Vec<usize>> = flatten(self.init).iter().map(|e| e.shape.clone()).collect();
        let mut c = self.init.clone();
        // with `keep_states`: every carry entry's values, the initial one first
        let mut kept: Vec<Vec<Erased>> = flatten(self.init).into_iter().map(|e| vec![e]).collect();
        let mut ys: Vec<Y> = Vec::with_capacity(n);
        let mut y_shapes: Option<Vec<String>> = None;
        let order: Vec<usize> = if self.reverse {
            (0..n).rev().collect()
        } else {
            (0..n).collect()
        };
        let seqs: Vec<Rows> = xs.iter().map(Rows::of).collect();
        for t in order {
            let row: Vec<Erased> = seqs.iter().map(|r| r.row(t)).collect();
            let (c2, y) = f(&c, &self.xs.rebuild(&mut row.into_iter(), "xs")?);
            let got = flatten(&c2);
            if got.len() != n_carry || got.iter().zip(&shapes).any(|(e, s)| e.shape != *s) {
                return Err(Error::Scan(format!(
                    "scan {label}: step {t} returned a carry of [{}] but the initial carry is [{}]; the carry keeps its structure and shapes from step to step",
                    got.iter().map(Erased::describe).collect::<Vec<_>>().join(", "),
                    flatten(self.init).iter().map(Erased::describe).collect::<Vec<_>>().join(", ")
                )));
            }
            let shapes_y: Vec<String> = flatten(&y).iter().map(Erased::describe).collect();
            match &y_shapes {
                None => y_shapes = Some(shapes_y),
                Some(first) if *first != shapes_y => {
                    return Err(Error::Scan(format!(
                        "scan {label}: step {t} returned y = [{}] but an earlier step returned [{}]; every step's y has one structure and shape (they are stacked)",
                        shapes_y.join(", "),
                        first.join(", ")
                    )))
                }
                Some(_) => {}
            }
            let ids: Vec<kiln_core::VarId> =
                got.iter().chain(&flatten(&y)).map(Erased::id).collect();
            kiln_core::eval(&ids)?;
            // each step's values behind a boundary: passes through the scan go step by step too
            let behind = |leaves: Vec<Erased>| -> Vec<Erased> {
                leaves.iter().map(super::stepwise::boundary).collect()
            };
            let c2 = c2.rebuild(&mut behind(flatten(&c2)).into_iter(), "carry")?;
            let y = y.rebuild(&mut behind(flatten(&y)).into_iter(), "ys")?;
            if self.keep_states {
                kept.iter_mut().zip(got).for_each(|(k, e)| k.push(e));
            }
            c = c2;
            ys.push(y);
        }
        if self.reverse {
            ys.reverse();
        }
        let y = if ys.is_empty() {
            // no step: the ys' shapes come from the traced scan, on detached inputs
            let (_, y, _) = crate::ad::suspend_grad(|| {
                Lax::new(self.init, self.xs)
                    .length(0)
                    .label(&label)
                    .run_inner(&mut *f)
            })?;
            y
        } else {
            Y::stack(ys)
        };
        if let Some(r) = self.report {
            *r = ScanReport {
                label: label.clone(),
                steps_run: n,
                steps_requested: n,
                loops_emitted: 0,
                mode: "differentiated",
                mode_reason: "an input carries a gradient: the body ran once per step with derivatives recorded; no rewrite applies".into(),
                ..Default::default()
            };
        }
        let states = match self.keep_states {
            true => kept
                .iter()
                .map(|k| Some(super::stepwise::stack(k[0].ty, k, &k[0].shape)))
                .collect(),
            false => Vec::new(),
        };
        Ok((c, y, states))
    }
}

impl<C: Tree + Clone, X: Tree> Lax<'_, C, X> {
    /// The differentiated scan as the plain scan forward and a gradient scan backward
    /// ([`super::grad`]): when the states are not asked for, the derivatives are first order and
    /// no frozen function is recording (inputs in `xs` may carry gradients: their rows'
    /// cotangents are stacked by the gradient scan). `None`: it does not
    /// apply (or the step's VJP could not be recorded).
    fn gradient_scan<Y: Tree + Clone>(
        &self,
        f: &mut dyn FnMut(&C, &X) -> (C, Y),
        n: usize,
        report: &mut ScanReport,
    ) -> Result<Option<(C, Y)>> {
        let applies = n > 0 && !self.keep_states && super::grad::possible();
        if !applies {
            return Ok(None);
        }
        // (a body with side effects runs once per step, as the scan run step by step runs it)
        let rows: Vec<Erased> = flatten(self.xs)
            .iter()
            .map(|x| row_at(x, &UInt32::arange(x.shape[1..].iter().product::<usize>())))
            .collect();
        if super::grad::has_effects(&mut self.step_of(f), &flatten(self.init), &rows) {
            return Ok(None);
        }
        let plain = crate::ad::suspend_grad(|| {
            Lax::new(self.init, self.xs)
                .length(n)
                .reverse(self.reverse)
                .unroll(self.unroll)
                .strict(self.strict)
                .mode(self.mode)
                .label(&self.label)
                .keep_states(true)
                .saving_products()
                .report(report)
                .run_full(&mut *f)
        });
        // (`Fused` asked of a body one kernel cannot run, a product say, is the plain scan's
        // refusal: a differentiated scan runs step by step then, as before the gradient scan)
        let (c, y, states, captured) = match plain {
            Ok(r) => r,
            Err(e) if self.mode == ScanMode::Fused && super::run::is_fused_refusal(&e) => {
                tracing::debug!(target: "scan", "scan {}: the gradient scan's plain forward refused `Fused` ({e}): the scan runs step by step", self.label);
                return Ok(None);
            }
            Err(e) => return Err(e),
        };
        let n_carry = flatten(self.init).len();
        let states = states
            .into_iter()
            .take(n_carry)
            .collect::<Option<Vec<Erased>>>();
        // (a body with side effects runs once per step, as the plain scan ran it)
        let (Some(states), Some((captured, pushed, saved))) = (states, captured) else {
            return Ok(None);
        };
        let fw = super::grad::Forward {
            init: flatten(self.init),
            xs: flatten(self.xs),
            finals: flatten(&c),
            ys: flatten(&y),
            states,
            captured,
            pushed,
            saved,
            reads: Vec::new(),
            n,
            reverse: self.reverse,
            ys_reversed: self.reverse,
            truncate: None,
        };
        let Some((cs, ys)) = super::grad::attach(fw, &mut self.step_of(f), &self.label, report)?
        else {
            return Ok(None);
        };
        let c = self.init.rebuild(&mut cs.into_iter(), "carry")?;
        let y = y.rebuild(&mut ys.into_iter(), "ys")?;
        Ok(Some((c, y)))
    }

    /// The body as the gradient scan calls it (flattened carry and rows in, flattened carry and
    /// `y`s out; the step number is not the JAX face's business).
    fn step_of<'b, Y: Tree + Clone>(
        &'b self,
        f: &'b mut dyn FnMut(&C, &X) -> (C, Y),
    ) -> impl FnMut(&Erased, &[Erased], &[Erased]) -> super::grad::Stepped + 'b {
        let (init, xs) = (self.init, self.xs);
        move |_, c, x| {
            // (`rebuild` takes a `vec::IntoIter`: the slices are copied into vectors)
            #[allow(clippy::unnecessary_to_owned)]
            let (mut c, mut x) = (c.to_vec().into_iter(), x.to_vec().into_iter());
            let (c, x) = (init.rebuild(&mut c, "carry")?, xs.rebuild(&mut x, "xs")?);
            let (c2, y) = f(&c, &x);
            Ok((flatten(&c2), flatten(&y)))
        }
    }

    /// The differentiated scan as one loop that carries each lane's Jacobian (the default mode
    /// of a differentiated `while_loop`): memory independent of the length, and one kernel where
    /// the loop traces symbolically. It applies when the body returns no `y` (only the final
    /// carry is used: one adjoint state, nothing per step), no input in `xs` carries a gradient,
    /// every carry entry and every row of `xs` has one number of elements (the lanes), and the
    /// body is lane-local, with any array with a gradient it captures of one element or one per
    /// lane (checked by tracing it once, thrown away). `None`: it does not apply.
    fn one_kernel<Y: Tree + Clone>(
        &self,
        f: &mut dyn FnMut(&C, &X) -> (C, Y),
        n: usize,
    ) -> Result<Option<(C, Y)>> {
        let carry = flatten(self.init);
        let xs = flatten(self.xs);
        let Some(m) = carry.first().map(Erased::numel) else {
            return Ok(None);
        };
        let fits = m > 0
            && carry.iter().all(|e| e.numel() == m)
            && xs.iter().all(|x| x.numel() == n * m)
            && (n as u64) * (m as u64) <= u32::MAX as u64;
        if self.keep_states || self.xs.carries_grad() || !fits || n == 0 {
            return Ok(None);
        }
        let shapes: Vec<Vec<usize>> = carry.iter().map(|e| e.shape.clone()).collect();
        let lane = UInt32::arange(m);
        let (init, xs_tree, reverse) = (self.init, self.xs, self.reverse);
        let last = n as u32 - 1;
        // (the first y, which holds no array when this applies; a body that broke the rules)
        let y_template: RefCell<Option<Y>> = RefCell::new(None);
        let broke = Cell::new(false);
        let mut body = |(c, s): &(Tracked, UInt32)| -> (Tracked, UInt32) {
            let t = if reverse { last - s } else { s.clone() };
            let idx = &t * m as u32 + &lane;
            let row: Vec<Erased> = xs.iter().map(|x| row_at(x, &idx)).collect();
            let step = init
                .rebuild(&mut c.0.clone().into_iter(), "carry")
                .and_then(|c| Ok((c, xs_tree.rebuild(&mut row.into_iter(), "xs")?)));
            let Ok((c_t, x_t)) = step else {
                broke.set(true);
                return (c.clone(), s + 1u32);
            };
            let (c2, y) = f(&c_t, &x_t);
            let got = flatten(&c2);
            let same =
                got.len() == shapes.len() && got.iter().zip(&shapes).all(|(e, s)| e.shape == *s);
            if !flatten(&y).is_empty() || !same {
                broke.set(true);
                return (c.clone(), s + 1u32);
            }
            y_template.borrow_mut().get_or_insert(y);
            (Tracked(got), s + 1u32)
        };
        let start = (Tracked(carry), UInt32::zeros(m));
        let local = crate::ad::control::carries_jacobian(&mut body, &start, m.into());
        if !local || broke.get() {
            return Ok(None);
        }
        let (last_carry, _) = crate::control::Loop::new(start)
            .label(&self.label)
            .run(|(_, s)| s.lt(n as u32), &mut body)?;
        if broke.get() {
            // a body that changed what it returns after the checks (it keeps state of its own)
            return Err(Error::Scan(format!(
                "scan {}: the body's carry or y changed structure or shape between steps; every step returns the structure and shapes of the first",
                self.label
            )));
        }
        let c = self.init.rebuild(&mut last_carry.0.into_iter(), "carry")?;
        let Some(template) = y_template.into_inner() else {
            return Ok(None);
        };
        let y = template.rebuild(&mut Vec::new().into_iter(), "ys")?;
        Ok(Some((c, y)))
    }
}

/// The arrays a plain run's body captured, its products pushed out over a sequence, and the
/// products it saved at every step.
type Replayable = (
    Vec<Erased>,
    Vec<Option<super::run::PushedRow>>,
    Vec<Option<Erased>>,
);

/// Row `idx / m` of `x` (`m` lanes), read by a gather at the per-lane flat positions `idx`.
fn row_at(x: &Erased, idx: &UInt32) -> Erased {
    fn typed<T: Scalar>(x: &Erased, idx: &UInt32) -> Erased {
        let t = x
            .tensor::<T>(&String::new)
            .expect("kiln internal error: dispatched on the element type");
        let shape = x.shape[1..].to_vec();
        Erased::of(&Tensor::from_array(
            crate::memory::gather(t.array(), idx),
            &shape,
        ))
    }
    match x.ty {
        VarType::Bool => typed::<bool>(x, idx),
        VarType::I32 => typed::<i32>(x, idx),
        VarType::U32 => typed::<u32>(x, idx),
        VarType::I64 => typed::<i64>(x, idx),
        VarType::U64 => typed::<u64>(x, idx),
        VarType::F32 => typed::<f32>(x, idx),
        VarType::F64 => typed::<f64>(x, idx),
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
