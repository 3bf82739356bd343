//! Loops with recurrences: [`scan`] (JAX's `lax.scan`: a carry and per-step inputs) and [`Scan`]
//! (PyTensor's `scan`: sequences with taps, recurrent outputs with taps, non-sequences, `n_steps`,
//! `until`). Both lower to one loop description (`spec`), which `analyze` traces once and
//! rewrites, and `run` executes: as **one kernel** when the body treats the lanes of a row
//! independently (each lane loops over the steps with its state in registers, reading sequence
//! rows and writing output rows directly), otherwise **one step per launch group**, the step
//! frozen once and replayed. `KILN_LOG=scan` explains every choice and rewrite; each run's
//! [`ScanReport`] records them.
//!
//! ```
//! use kiln::prelude::*;
//! // JAX face: running sum; the final carry and every step's output
//! let xs = Tensor::from_vec(vec![3i32, 1, 4, 1, 5, 9], &[6]);
//! let (total, running) =
//!     kiln::scan(&Tensor::scalar(0i32), &xs, |acc, x| { let a = acc + x; (a.clone(), a) }).unwrap();
//! assert_eq!(total.to_vec(), vec![23]);
//! assert_eq!(running.to_vec(), vec![3, 4, 8, 9, 14, 23]);
//! // PyTensor face: Fibonacci with output taps [-2, -1]
//! use kiln::scan::Scan;
//! let fib = Scan::<u64>::new()
//!     .output_taps(&Tensor::from_vec(vec![1u64, 1], &[2]), &[-2, -1])
//!     .n_steps(8)
//!     .run(|s| s.out(0, -2) + s.out(0, -1))
//!     .unwrap();
//! assert_eq!(fib.output::<u64>(0).to_vec(), vec![2, 3, 5, 8, 13, 21, 34, 55]);
//! ```

mod analyze;
mod any;
mod erased;
mod grad;
mod hook;
mod lax;
mod rows;
mod run;
mod spec;
mod stepwise;

pub use any::AnyTensor;
pub use erased::Tree;
pub use lax::{foldl, foldr, map, reduce, scan, Lax};
pub use spec::Keep;

pub(crate) use hook::matmul_hook;

use crate::tensor::Tensor;
use erased::Erased;
use kiln_core::{Error, Result, Scalar};
use spec::{OutSpec, SeqSpec, Spec, StepIn, StepOut};
use std::cell::RefCell;

/// How a scan runs (see the module docs); `Auto` picks and `KILN_LOG=scan` says why.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ScanMode {
    /// One kernel where the body allows it, else stepped.
    #[default]
    Auto,
    /// One kernel; a body that needs other lanes' values is an error naming what it asked.
    Fused,
    /// One step per launch group, the step frozen once and replayed.
    Stepped,
}

/// What a scan did: how it ran, which rewrites applied, what it stored.
///
/// ```
/// use kiln::prelude::*;
/// use kiln::scan::{Keep, Scan};
/// // only the last state is used: one row is stored, not ten
/// let r = Scan::<f32>::new().output(&Tensor::zeros(&[4])).keep(0, Keep::Last(1)).n_steps(10)
///     .run(|s| s.out(0, -1) + 1.0).unwrap();
/// assert_eq!(r.output::<f32>(0).to_vec(), vec![10.0; 4]);
/// assert_eq!(r.report().buffer_rows, vec![1]);
/// assert_eq!(r.report().steps_run, 10);
/// ```
#[derive(Clone, Debug, Default)]
pub struct ScanReport {
    /// The scan's label.
    pub label: String,
    /// Steps the loop ran (fewer than asked when `until` stopped it or save-mem cut it).
    pub steps_run: usize,
    /// Steps the scan was asked for (`n_steps`, or the sequences' usable length).
    pub steps_requested: usize,
    /// Loops emitted: 1, or 0 when the body was invariant (computed once) or no step ran.
    pub loops_emitted: usize,
    /// `"fused"` (one kernel), `"stepped"` (one step per launch group, replayed), `"invariant"`
    /// (no loop) or `"empty"` (no step).
    pub mode: &'static str,
    /// Why the mode was chosen.
    pub mode_reason: String,
    /// Rows stored per output (its stacked buffer; 0 for an output nobody keeps).
    pub buffer_rows: Vec<usize>,
    /// Ops computed once outside the loop instead of at every step.
    pub ops_hoisted: usize,
    /// Matrix products over a sequence row computed for all steps at once (PushOutDot1).
    pub matmuls_pushed_out: usize,
    /// Of a scan differentiated as a gradient scan: the gradients of captured matrices summed
    /// over the steps as one product after the gradient scan (the push-out of `Σ_t aᵀ·δ_t`).
    pub grad_matmuls_pushed_out: usize,
    /// Ops that remain inside the loop (elementwise ops, reductions, products).
    pub ops_in_loop: usize,
    /// Declared inputs no output depends on, removed.
    pub inputs_removed: usize,
    /// Identical outer inputs (or outputs) merged.
    pub merged: usize,
    /// Arrays the body captured from its environment, turned into non-sequences (their labels).
    pub captured: Vec<String>,
    /// `connection[i][j]`: outer input `i` feeds output `j`. Inputs are numbered sequences first,
    /// then initial states (one per recurrent output, in output order), then non-sequences
    /// (explicit ones, then captured ones).
    pub connection: Vec<Vec<bool>>,
    /// Names of the outer inputs, in `connection`'s order.
    pub inputs: Vec<String>,
    /// Every rewrite that applied, in order, as logged under `KILN_LOG=scan`.
    pub rewrites: Vec<String>,
    /// Outputs computed over their initial state's buffer (the scan owned it).
    pub in_place: Vec<usize>,
}

impl std::fmt::Display for ScanReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(
            f,
            "scan {}: {} ({}), {} of {} steps, {} loop(s)",
            self.label,
            self.mode,
            self.mode_reason,
            self.steps_run,
            self.steps_requested,
            self.loops_emitted
        )?;
        writeln!(
            f,
            "  rows stored per output {:?}; hoisted {} op(s), pushed out {} product(s), {} op(s) in the loop",
            self.buffer_rows, self.ops_hoisted, self.matmuls_pushed_out, self.ops_in_loop
        )?;
        for r in &self.rewrites {
            writeln!(f, "  rewrite: {r}")?;
        }
        Ok(())
    }
}

/// The outputs of a [`Scan`] and its [`ScanReport`].
pub struct ScanResult {
    outputs: Vec<Erased>,
    states: Vec<Option<Erased>>,
    report: ScanReport,
}

impl ScanResult {
    /// Output `j`: the rows kept (all steps by default; see [`Scan::keep`]), stacked on axis 0.
    /// Panics with the reason if `j` is out of range or the type differs (see
    /// [`ScanResult::try_output`]).
    #[track_caller]
    pub fn output<T: Scalar>(&self, j: usize) -> Tensor<T> {
        crate::array::ok(self.try_output(j))
    }
    /// As [`ScanResult::output`], returning an error instead of panicking.
    pub fn try_output<T: Scalar>(&self, j: usize) -> Result<Tensor<T>> {
        let e = self.outputs.get(j).ok_or_else(|| {
            Error::Scan(format!(
                "scan {}: output {j} does not exist; it has {} output(s)",
                self.report.label,
                self.outputs.len()
            ))
        })?;
        e.tensor::<T>(&|| format!("scan {}: output {j}", self.report.label))
    }
    /// The last row of output `j` (an error when no row was kept or none was computed).
    pub fn last<T: Scalar>(&self, j: usize) -> Result<Tensor<T>> {
        let all = self.try_output::<T>(j)?;
        let rows = all.shape().first().copied().unwrap_or(0);
        if rows == 0 {
            return Err(Error::Scan(format!(
                "scan {}: output {j} has no rows (the scan ran {} step(s)); there is no last row to take",
                self.report.label, self.report.steps_run
            )));
        }
        Ok(all.index_axis(0, rows - 1))
    }
    /// With [`Scan::keep_states`]: recurrent output `j`'s initial rows followed by every step's
    /// state — what a backward pass needs.
    pub fn states<T: Scalar>(&self, j: usize) -> Result<Tensor<T>> {
        match self.states.get(j) {
            Some(Some(e)) => e.tensor::<T>(&|| format!("scan {}: states of output {j}", self.report.label)),
            _ => Err(Error::Scan(format!(
                "scan {}: output {j} kept no states; call `.keep_states(true)` and make it a recurrent output",
                self.report.label
            ))),
        }
    }
    /// How many outputs there are.
    pub fn len(&self) -> usize {
        self.outputs.len()
    }
    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.outputs.is_empty()
    }
    /// Steps the loop ran.
    pub fn steps(&self) -> usize {
        self.report.steps_run
    }
    /// What the scan did.
    pub fn report(&self) -> &ScanReport {
        &self.report
    }
}

/// One step's view for a [`Scan`] body: sequence rows, earlier outputs and non-sequences, as
/// tensors of `T` (the `_as` accessors read other types). A wrong index or tap is reported as the
/// scan's `Err` (the accessor returns zeros so that tracing can finish).
pub struct Step<'a, T: Scalar> {
    input: &'a StepIn,
    label: &'a str,
    seq_taps: &'a [Vec<i64>],
    out_taps: &'a [Vec<i64>],
    until: RefCell<Option<Erased>>,
    error: RefCell<Option<Error>>,
    _t: std::marker::PhantomData<T>,
}

impl<'a, T: Scalar> Step<'a, T> {
    fn fail<U: Scalar>(&self, e: Error) -> Tensor<U> {
        let mut slot = self.error.borrow_mut();
        if slot.is_none() {
            *slot = Some(e);
        }
        Tensor::from_array(
            crate::array::Array::from_id(kiln_core::literal(U::TYPE, 0, 1)),
            &[],
        )
    }
    fn pick<U: Scalar>(&self, e: Option<&Erased>, what: &dyn Fn() -> String) -> Tensor<U> {
        match e {
            Some(e) => match e.tensor::<U>(what) {
                Ok(t) => t,
                Err(err) => self.fail(err),
            },
            None => self.fail(Error::Scan(what())),
        }
    }
    /// Sequence `i` at tap `tap` (0: the current row; negative: earlier, positive: later rows).
    pub fn seq(&self, i: usize, tap: i64) -> Tensor<T> {
        self.seq_as::<T>(i, tap)
    }
    /// [`Step::seq`] for a sequence of another element type.
    pub fn seq_as<U: Scalar>(&self, i: usize, tap: i64) -> Tensor<U> {
        let k = self
            .seq_taps
            .get(i)
            .and_then(|taps| taps.iter().position(|&t| t == tap));
        let e = k.and_then(|k| self.input.seq_rows.get(i).and_then(|r| r.get(k)));
        let (label, taps) = (self.label, self.seq_taps);
        self.pick(e, &|| match taps.get(i) {
            None => format!(
                "scan {label}: the body read sequence {i}, but the scan has {} sequence(s)",
                taps.len()
            ),
            Some(t) if !t.contains(&tap) => format!(
                "scan {label}: the body read sequence {i} at tap {tap}, but its taps are {t:?}; declare the tap with `.sequence_taps(&xs, &[..])`"
            ),
            _ => format!("scan {label}: sequence {i} at tap {tap}"),
        })
    }
    /// Recurrent output `j` at `tap` (negative: `-1` is the previous step's value).
    pub fn out(&self, j: usize, tap: i64) -> Tensor<T> {
        self.out_as::<T>(j, tap)
    }
    /// [`Step::out`] for an output of another element type.
    pub fn out_as<U: Scalar>(&self, j: usize, tap: i64) -> Tensor<U> {
        let k = self
            .out_taps
            .get(j)
            .and_then(|taps| taps.iter().position(|&t| t == tap));
        let e = k.and_then(|k| self.input.out_rows.get(j).and_then(|r| r.get(k)));
        let (label, taps) = (self.label, self.out_taps);
        self.pick(e, &|| match taps.get(j) {
            None => format!(
                "scan {label}: the body read output {j}, but the scan declares {} output(s)",
                taps.len()
            ),
            Some(t) if t.is_empty() => format!(
                "scan {label}: the body read output {j}, which does not feed back (declared with `.output_none()`); give it an initial state with `.output(&init)` or `.output_taps(&init, &[..])`"
            ),
            Some(t) => format!(
                "scan {label}: the body read output {j} at tap {tap}, but its taps are {t:?}; declare the tap with `.output_taps(&init, &[..])`"
            ),
        })
    }
    /// Non-sequence `k` (given with [`Scan::non_sequence`]), the same at every step.
    pub fn non_seq(&self, k: usize) -> Tensor<T> {
        self.non_seq_as::<T>(k)
    }
    /// [`Step::non_seq`] for another element type.
    pub fn non_seq_as<U: Scalar>(&self, k: usize) -> Tensor<U> {
        let n = self.input.non_seqs.len();
        let label = self.label;
        self.pick(self.input.non_seqs.get(k), &|| {
            format!("scan {label}: the body read non-sequence {k}, but the scan has {n}")
        })
    }
    /// The step number, 0 for the first step (a `u32` scalar; in iteration order).
    pub fn t(&self) -> Tensor<u32> {
        self.pick(Some(&self.input.t), &|| "the step number".into())
    }
    /// Stop after this step when `cond` (a one-element `bool` tensor) holds: a while-scan. The
    /// step that satisfies it is kept; the scan never runs past `n_steps`.
    pub fn until(&self, cond: &Tensor<bool>) {
        *self.until.borrow_mut() = Some(Erased::of(cond));
    }
}

/// What a [`Scan`] body returns: one tensor, a tuple of tensors (any element types), or a vector.
pub trait StepOutputs {
    #[doc(hidden)]
    fn into_erased(self) -> Vec<Erased>;
    /// Whether a tensor in it carries a gradient (one the body captured: the scan then runs
    /// differentiated, step by step).
    #[doc(hidden)]
    fn carries_grad(&self) -> bool;
}

impl<U: Scalar> StepOutputs for Tensor<U> {
    fn into_erased(self) -> Vec<Erased> {
        vec![Erased::of(&self)]
    }
    fn carries_grad(&self) -> bool {
        self.array().ad != 0
    }
}
impl<U: Scalar> StepOutputs for Vec<Tensor<U>> {
    fn into_erased(self) -> Vec<Erased> {
        self.iter().map(Erased::of).collect()
    }
    fn carries_grad(&self) -> bool {
        self.iter().any(|t| t.array().ad != 0)
    }
}
macro_rules! step_outputs_tuple {
    ($($n:ident $i:tt),+) => {
        impl<$($n: Scalar),+> StepOutputs for ($(Tensor<$n>,)+) {
            fn into_erased(self) -> Vec<Erased> {
                vec![$(Erased::of(&self.$i)),+]
            }
            fn carries_grad(&self) -> bool {
                false $(|| self.$i.array().ad != 0)+
            }
        }
    };
}
step_outputs_tuple!(A 0);
step_outputs_tuple!(A 0, B 1);
step_outputs_tuple!(A 0, B 1, C 2);
step_outputs_tuple!(A 0, B 1, C 2, D 3);
step_outputs_tuple!(A 0, B 1, C 2, D 3, E 4);
step_outputs_tuple!(A 0, B 1, C 2, D 3, E 4, F 5);
step_outputs_tuple!(A 0, B 1, C 2, D 3, E 4, F 5, G 6);
step_outputs_tuple!(A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7);

/// PyTensor's `scan`: sequences with taps, outputs that feed back with taps, non-sequences,
/// `n_steps`, `until`, `go_backwards`; see the module docs. `T` is the element type the plain
/// accessors ([`Step::seq`], [`Step::out`]) read.
///
/// ```
/// use kiln::prelude::*;
/// use kiln::scan::Scan;
/// // an RNN with scalar weights: x_t = u_t * w_in + x_{t-1} * w
/// let u = Tensor::from_vec(vec![1.0f64, 2.0, 3.0, 4.0], &[4]);
/// let r = Scan::new()
///     .sequence(&u)
///     .output(&Tensor::scalar(1.0f64))
///     .non_sequence(&Tensor::scalar(2.0))
///     .non_sequence(&Tensor::scalar(0.5))
///     .run(|s| s.seq(0, 0) * s.non_seq(0) + s.out(0, -1) * s.non_seq(1))
///     .unwrap();
/// assert_eq!(r.output::<f64>(0).to_vec(), vec![2.5, 5.25, 8.625, 12.3125]);
/// ```
pub struct Scan<T: Scalar> {
    spec: Spec,
    error: Option<Error>,
    _t: std::marker::PhantomData<T>,
}

impl<T: Scalar> Default for Scan<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T: Scalar> Scan<T> {
    /// An empty scan: add sequences, outputs and non-sequences, then [`Scan::run`].
    pub fn new() -> Self {
        Scan {
            spec: Spec::new("scan"),
            error: None,
            _t: std::marker::PhantomData,
        }
    }
    fn note(&mut self, e: Error) {
        if self.error.is_none() {
            self.error = Some(e);
        }
    }
    /// A name for messages, logs and the report.
    pub fn label(mut self, label: &str) -> Self {
        self.spec.label = label.into();
        self
    }
    /// A sequence read at its current row (tap 0).
    pub fn sequence(self, xs: &Tensor<T>) -> Self {
        self.sequence_taps_as(xs, &[0])
    }
    /// A sequence read at several taps: `-2` two rows back, `2` two rows ahead. The step count is
    /// what every sequence can supply: its length minus the span of its taps.
    pub fn sequence_taps(self, xs: &Tensor<T>, taps: &[i64]) -> Self {
        self.sequence_taps_as(xs, taps)
    }
    /// [`Scan::sequence`] for a sequence of another element type (read with [`Step::seq_as`]).
    pub fn sequence_as<U: Scalar>(self, xs: &Tensor<U>) -> Self {
        self.sequence_taps_as(xs, &[0])
    }
    /// [`Scan::sequence_taps`] for a sequence of another element type.
    pub fn sequence_taps_as<U: Scalar>(mut self, xs: &Tensor<U>, taps: &[i64]) -> Self {
        let i = self.spec.seqs.len();
        if let Err(e) = spec::check_taps(&self.spec.label, &format!("sequence {i}"), taps, false) {
            self.note(e);
        }
        self.spec.seqs.push(SeqSpec {
            data: Erased::of(xs),
            taps: taps.to_vec(),
        });
        self
    }
    /// An output that feeds back one step (a SITSOT): `init` is its value before the first step,
    /// of the shape each step returns.
    pub fn output(self, init: &Tensor<T>) -> Self {
        self.output_impl(Erased::of(init), &[-1], false)
    }
    /// [`Scan::output`] for an output of another element type (read with [`Step::out_as`]).
    pub fn output_as<U: Scalar>(self, init: &Tensor<U>) -> Self {
        self.output_impl(Erased::of(init), &[-1], false)
    }
    /// As [`Scan::output`], handing the initial state over to the scan: it may then compute the
    /// output over the initial state's buffer (in place), as the caller keeps no handle to it.
    pub fn output_owned(self, init: Tensor<T>) -> Self {
        let e = Erased::of(&init);
        drop(init);
        self.output_impl(e, &[-1], true)
    }
    /// An output that feeds back at several earlier steps (a MITSOT), e.g. `&[-2, -1]`: `init`
    /// holds one row per step back to the earliest tap, `init[0]` being the earliest.
    pub fn output_taps(self, init: &Tensor<T>, taps: &[i64]) -> Self {
        self.output_impl(Erased::of(init), taps, false)
    }
    /// [`Scan::output_taps`] for an output of another element type.
    pub fn output_taps_as<U: Scalar>(self, init: &Tensor<U>, taps: &[i64]) -> Self {
        self.output_impl(Erased::of(init), taps, false)
    }
    fn output_impl(mut self, init: Erased, taps: &[i64], owned: bool) -> Self {
        let j = self.spec.outs.len();
        if let Err(e) = spec::check_taps(&self.spec.label, &format!("output {j}"), taps, true) {
            self.note(e);
        }
        self.spec.outs.push(OutSpec {
            init: Some(init),
            taps: taps.to_vec(),
            keep: Keep::All,
            owned,
        });
        self
    }
    /// An output that does not feed back (PyTensor's `None` in `outputs_info`; a NITSOT). Needed
    /// only to place such outputs among recurrent ones: with no outputs declared at all, every
    /// value the body returns is one.
    pub fn output_none(mut self) -> Self {
        self.spec.outs.push(OutSpec {
            init: None,
            taps: Vec::new(),
            keep: Keep::All,
            owned: false,
        });
        self
    }
    /// A value the body reads unchanged at every step ([`Step::non_seq`]). Tensors the body
    /// captures from its environment become non-sequences too (see [`Scan::strict`]).
    pub fn non_sequence(self, x: &Tensor<T>) -> Self {
        self.non_sequence_as(x)
    }
    /// [`Scan::non_sequence`] of another element type (read with [`Step::non_seq_as`]).
    pub fn non_sequence_as<U: Scalar>(mut self, x: &Tensor<U>) -> Self {
        self.spec.non_seqs.push(Erased::of(x));
        self
    }
    /// The number of steps (at most what the sequences supply; an error names a sequence that is
    /// too short). Without sequences it is required.
    pub fn n_steps(mut self, n: usize) -> Self {
        self.spec.n_steps = Some(n);
        self
    }
    /// Consume the sequences from their end (PyTensor): the outputs stay in iteration order.
    pub fn go_backwards(mut self, on: bool) -> Self {
        self.spec.go_backwards = on;
        self
    }
    /// JAX's `reverse`: consume the sequences from their end *and* store the outputs reversed, so
    /// that output row `i` is the step that read sequence row `i`.
    pub fn reverse(mut self, on: bool) -> Self {
        self.spec.reverse = on;
        self
    }
    /// Make a tensor the body captures from its environment an error naming it, instead of an
    /// implicit non-sequence.
    pub fn strict(mut self, on: bool) -> Self {
        self.spec.strict = on;
        self
    }
    /// Keep every step's state of the recurrent outputs (after their initial rows), for a later
    /// backward pass: [`ScanResult::states`].
    pub fn keep_states(mut self, on: bool) -> Self {
        self.spec.keep_states = on;
        self
    }
    /// Which rows of output `j` the caller uses (all by default): save-mem stores only those,
    /// and stops early when no output needs the later steps.
    pub fn keep(mut self, j: usize, keep: Keep) -> Self {
        match self.spec.outs.get_mut(j) {
            Some(o) => o.keep = keep,
            None => {
                // outputs not declared yet (all NITSOT): remembered until the body shows them
                self.spec.pending_keep.push((j, keep));
            }
        }
        self
    }
    /// PyTensor's `truncate_gradient`: gradients flow back through the last `k` steps the scan
    /// runs and no further (truncated BPTT): the earlier steps run with derivatives suspended,
    /// so their sequence rows, the initial states they read and what they captured get nothing
    /// from them (`0`: no gradient at all). No effect without a gradient. The body is called
    /// once more beforehand, to see whether it sets `until`; if it does, a first pass without
    /// derivatives finds where the scan stops.
    ///
    /// ```
    /// use kiln::prelude::*;
    /// use kiln::scan::Scan;
    /// let mut u = Float64::from_slice(&[1.0, 2.0, 3.0, 4.0, 5.0]);
    /// u.enable_grad();
    /// // x_t = x_{t-1} + u_t: only the last 2 steps pass gradients back
    /// let r = Scan::new()
    ///     .sequence(&Tensor::from_array(u.clone(), &[5]))
    ///     .output(&Tensor::scalar(0.0))
    ///     .truncate_gradient(2)
    ///     .run(|s| s.out(0, -1) + s.seq(0, 0))
    ///     .unwrap();
    /// r.output::<f64>(0).array().sum().backward();
    /// assert_eq!(u.grad().to_vec(), vec![0.0, 0.0, 0.0, 2.0, 1.0]);
    /// ```
    pub fn truncate_gradient(mut self, k: usize) -> Self {
        self.spec.truncate = Some(k);
        self
    }
    /// Fused, stepped or automatic (the default).
    pub fn mode(mut self, mode: ScanMode) -> Self {
        self.spec.mode = mode;
        self
    }
    /// Turn the rewrites off (as `KILN_SCAN_REWRITES=0` does for every scan): the body runs as
    /// written at every step and every output is stored in full.
    pub fn rewrites(mut self, on: bool) -> Self {
        self.spec.rewrites = Some(on);
        self
    }
    /// Run the scan: `body` gets each step's [`Step`] and returns this step's outputs, in the
    /// order they were declared.
    pub fn run<R: StepOutputs>(
        self,
        mut body: impl FnMut(&Step<'_, T>) -> R,
    ) -> Result<ScanResult> {
        if let Some(e) = self.error {
            return Err(e);
        }
        // (an enclosing scan's step substitutions are not this scan's)
        let _isolated = hook::Installed::new(hook::Hook::neutral());
        let spec = self.spec;
        let seq_taps: Vec<Vec<i64>> = spec.seqs.iter().map(|s| s.taps.clone()).collect();
        let out_taps: Vec<Vec<i64>> = spec.outs.iter().map(|o| o.taps.clone()).collect();
        let label = spec.label.clone();
        let stepwise = std::cell::Cell::new(false);
        let mut erased_body = |input: &StepIn| -> Result<StepOut> {
            let step = Step::<T> {
                input,
                label: &label,
                seq_taps: &seq_taps,
                out_taps: &out_taps,
                until: RefCell::new(None),
                error: RefCell::new(None),
                _t: std::marker::PhantomData,
            };
            let outs = body(&step);
            if !stepwise.get() && crate::ad::recording() && outs.carries_grad() {
                // the body captured a tensor that carries a gradient: run it step by step
                return Err(Error::Ad(spec::CAPTURED_GRADIENT.into()));
            }
            let outs = outs.into_erased();
            if let Some(e) = step.error.into_inner() {
                return Err(e);
            }
            Ok(StepOut {
                outs,
                until: step.until.into_inner(),
            })
        };
        let run::RunOut {
            outputs,
            states,
            report,
            ..
        } = if crate::ad::recording() && spec.carries_grad() {
            stepwise.set(true);
            stepwise::run(spec, &mut erased_body)?
        } else {
            // (kept for a rerun only while some array carries a gradient the body could capture)
            let again = crate::ad::control::involved(&()).then(|| spec.clone());
            match run::run(spec, &mut erased_body) {
                Err(Error::Ad(m)) if m == spec::CAPTURED_GRADIENT => {
                    let Some(spec) = again else {
                        return Err(Error::Ad(format!(
                            "kiln internal error: scan {label} captured a gradient while none was alive"
                        )));
                    };
                    if spec.strict {
                        return Err(spec::strict_captured_gradient(&spec.label));
                    }
                    stepwise.set(true);
                    stepwise::run(spec, &mut erased_body)?
                }
                r => r?,
            }
        };
        Ok(ScanResult {
            outputs,
            states,
            report,
        })
    }
}
