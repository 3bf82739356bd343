//! Control flow on arrays: per-lane loops ([`while_loop`], [`Loop`]), branches ([`if_then_else`])
//! and indirect calls ([`switch`], [`dispatch`], [`Registry`]).
//!
//! In the default *symbolic* mode a loop body, a branch or a call target is traced once, with
//! placeholders standing for the loop state, and becomes a region of one fused kernel in which each
//! lane runs only what it needs (see `kiln_core::control`). When a body needs the values of other
//! lanes — a reduction, a read, an eval, a gather from what the body computes — tracing it
//! symbolically cannot work; in [`Mode::Auto`] kiln then runs it in *evaluated* mode, where the
//! host drives the iterations (each one a replay of the body frozen once) or computes each branch
//! on its own lanes. [`Mode::Symbolic`] turns that fallback into an error instead.
//!
//! **Derivatives.** Branches, calls and loops are differentiable in both modes (reverse and
//! forward); a loop carries each lane's Jacobian forward, so reverse mode stores no iteration and
//! needs no bound on the trip count. The body is differentiated lane by lane while
//! it runs, so it must compute each lane from its own lane (no reductions or gathers over the
//! arguments); arrays with gradients that a body captures rather than takes as an argument (a
//! registry's instances holding parameters, a weight a loop body closes over) become extra
//! columns of the Jacobian, when they have one element or one per lane. Anything else is an
//! error, never a wrong gradient; [`Loop::grad_checkpoint`] takes any loop body. See `kiln::ad`.
//!
//! ```
//! use kiln::prelude::*;
//! let mut x = Float64::from_slice(&[-2.0, 3.0]);
//! x.enable_grad();
//! // |x|·x: each lane's derivative is its own branch's
//! let y = kiln::if_then_else(&x.detach().lt(0.0), |x: &Float64| -x * x, |x: &Float64| x * x, &x).unwrap();
//! y.sum().backward();
//! assert_eq!(x.grad().to_vec(), vec![4.0, 6.0]);
//! ```

use crate::array::{Bool, UInt32};
use crate::freeze::traverse::{Assign, Traversal, Traverse};
use kiln_core::{control as cc, Error, Op, ReduceOp, Result, Size, VarId, VarType};

/// How a loop, branch or call runs.
///
/// ```
/// use kiln::prelude::*;
/// use kiln::control::Loop;
/// // a body with a reduction needs every lane's value: it cannot be one kernel
/// let x = Float32::arange(4);
/// let body = |x: &Float32| x + x.sum() * 0.0 + 1.0;
/// let auto = kiln::while_loop(x.clone(), |x| x.lt(3.0), body).unwrap(); // falls back
/// assert_eq!(auto.to_vec(), vec![3.0, 3.0, 3.0, 3.0]);
/// let strict = Loop::new(x).mode(Mode::Symbolic).run(|x| x.lt(3.0), body);
/// assert!(strict.is_err()); // says why, and how to switch to evaluated mode
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Mode {
    /// Symbolic, falling back to evaluated when the body needs other lanes' values.
    #[default]
    Auto,
    /// Traced once into one kernel; a body that needs other lanes' values is an error.
    Symbolic,
    /// Driven from the host: one launch per iteration (loops), or each branch computed on its own.
    Evaluated,
}

/// One call target: a function of the arguments, or `None` (its lanes get 0).
///
/// ```
/// use kiln::prelude::*;
/// use kiln::control::{Switch, Target};
/// let double = |x: &Float32| x * 2.0;
/// let targets: [Target<'_, Float32, Float32>; 2] = [None, Some(&double)];
/// let y = Switch::new().run(&UInt32::from_slice(&[0, 1]), &targets, &Float32::full(3.0, 2)).unwrap();
/// assert_eq!(y.to_vec(), vec![0.0, 6.0]);
/// ```
pub type Target<'a, A, O> = Option<&'a dyn Fn(&A) -> O>;

/// A request refused while tracing symbolically: the array's label and what was asked.
type Refusal = (String, String);

/// A boxed target made from a trait object and the method to call on it.
type BoxedTarget<'a, A, O> = Box<dyn Fn(&A) -> O + 'a>;

// ---------------------------------------------------------------------------------------------
// State as a list of arrays

/// The arrays of `s` by position (duplicates kept: each position is its own state entry) and
/// their paths.
fn positions<S: Traverse>(s: &S) -> (Vec<VarId>, Vec<String>) {
    let mut t = Traversal::with_paths();
    s.traverse(&mut t);
    (t.found.iter().map(|f| f.id).collect(), t.paths)
}

/// `template` with its arrays replaced, position by position, by `ids` (borrowed).
fn rebuild<S: Traverse + Clone>(template: &S, ids: &[VarId]) -> S {
    let mut s = template.clone();
    s.traverse_mut(&mut Assign::new(ids.to_vec()));
    s
}

fn entry_name(path: &str, k: usize) -> String {
    if path.is_empty() {
        format!("#{k}")
    } else {
        format!("`{path}`")
    }
}

/// The common size of `ids` (each equal to it or 1), or an error naming the odd one. Sizes are
/// compared as [`Size`]s: inside a frozen function, a replay for which the answer would change
/// records anew (and fails here as an unfrozen call would).
fn common_size(what: &str, ids: &[VarId], paths: &[String]) -> Result<Size> {
    let mut n = Size::fixed(1);
    let mut first = None;
    for (k, &id) in ids.iter().enumerate() {
        let s = kiln_core::freeze::size_of(id);
        if s.is_one() {
            continue;
        }
        match first {
            None => {
                n = s;
                first = Some(k);
            }
            Some(f) if !s.same_as(n) => {
                return Err(Error::ControlFlow(format!(
                    "{what}: entry {} has {s} elements but entry {} has {n}; all entries must have one size (or size 1, broadcast) — slice or broadcast them first",
                    entry_name(&paths[k], k),
                    entry_name(&paths[f], f)
                )))
            }
            _ => {}
        }
    }
    Ok(n)
}

/// Whether `id` fits a loop or call of `n` lanes: of size `n`, or 1 (compared as sizes, see
/// [`common_size`]).
fn fits_lanes(id: VarId, n: Size) -> bool {
    let s = kiln_core::freeze::size_of(id);
    s.is_one() || s.same_as(n)
}

/// Whether `n` is more than one lane (a decision a frozen replay must find again).
pub(crate) fn several(n: Size) -> bool {
    !n.is_zero() && !n.is_one()
}

fn mask_size_error(what: &str, mask: VarId, n: Size) -> Error {
    Error::ControlFlow(format!(
        "{what}: the condition {} has {} elements but the state has {n}; it must be a Bool of the state's size (or size 1)",
        kiln_core::describe(mask),
        kiln_core::size(mask)
    ))
}

/// References released when dropped, however the function holding them returns (an error, or a
/// panic in a user's closure unwinding through it).
pub(crate) type Owned = kiln_core::Handles;

/// Side effects taken from a symbolic trace (each with its reference): discarded when dropped,
/// unless handed over to a node with [`Effects::take`].
pub(crate) struct Effects(Vec<u32>);

impl Effects {
    pub(crate) fn take(mut self) -> Vec<u32> {
        std::mem::take(&mut self.0)
    }
    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
    pub(crate) fn ids(&self) -> &[u32] {
        &self.0
    }
    /// Every side effect must run over the region's `n` lanes, or be of size 1 (then it runs once
    /// per lane that runs the region): any other size would be read at the wrong elements.
    fn check_sizes(&self, what: &str, n: Size) -> Result<()> {
        for &e in &self.0 {
            if !fits_lanes(VarId(e), n) {
                let s = kiln_core::size(VarId(e));
                return Err(Error::ControlFlow(format!(
                    "{what}: a scatter in it has {s} elements (its index, values or mask), but it runs over {n} lanes; a scatter in a loop body, branch or call needs one element per lane (or size 1: it then runs once per lane that runs it) — build its index from the state or the arguments"
                )));
            }
        }
        Ok(())
    }
}

impl Drop for Effects {
    fn drop(&mut self) {
        if !self.0.is_empty() {
            cc::discard_effects(std::mem::take(&mut self.0));
        }
    }
}

/// A symbolic trace in progress. Dropped before [`Trace::finish`] — a traced closure panicked, or
/// the trace was abandoned — it discards the side effects traced so far (they hold placeholders
/// that mean nothing outside the trace) and, if it was the outermost trace, the refusal it noted.
pub(crate) struct Trace(Option<cc::SymbolicScope>);

impl Trace {
    pub(crate) fn enter() -> Result<Trace> {
        Ok(Trace(Some(cc::enter_symbolic()?)))
    }
    /// End the trace: the side effects traced in it.
    pub(crate) fn finish(mut self) -> Effects {
        let scope = self.0.take().expect("a trace is finished once");
        let effects = Effects(scope.take_effects());
        drop(scope);
        effects
    }
}

impl Drop for Trace {
    fn drop(&mut self) {
        if let Some(scope) = self.0.take() {
            let effects = Effects(scope.take_effects());
            drop(scope);
            drop(effects);
            if !cc::symbolic() {
                drop(cc::take_refusal());
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Loops

/// A loop over lanes with a per-lane condition; see [`while_loop`] for the short form.
///
/// ```
/// use kiln::prelude::*;
/// use kiln::control::{Loop, Mode};
/// // halve until below 1, counting steps; lanes finish at different iterations
/// let x = Float32::from_slice(&[0.5, 3.0, 100.0]);
/// let (_, n) = Loop::new((x, UInt32::zeros(3)))
///     .label("halving")
///     .max_iterations(1000)
///     .run(|(x, _)| x.ge(1.0), |(x, n)| (x * 0.5, n + 1u32))
///     .unwrap();
/// assert_eq!(n.to_vec(), vec![0, 2, 7]);
/// ```
pub struct Loop<S> {
    pub(crate) state: S,
    pub(crate) label: String,
    pub(crate) max_iterations: u64,
    pub(crate) mode: Mode,
    pub(crate) compress: bool,
    pub(crate) grad: LoopGrad,
    pub(crate) optimize: bool,
}

/// How a loop whose state carries a gradient is differentiated ([`Loop::grad_mode`]).
///
/// ```
/// use kiln::prelude::*;
/// use kiln::control::{Loop, LoopGrad};
/// // y = x·1.5^k until y ≥ 4; d²y/dx² = 0 and dy/dx = 1.5^k, through a recorded loop
/// let x = Float64::from_slice(&[0.5]);
/// let f = |x: &Float64| {
///     Loop::new(x.clone()).grad_mode(LoopGrad::Recorded)
///         .run(|y| y.lt(4.0), |y| y * y * 0.5 + y).unwrap().sum()
/// };
/// let d2 = kiln::grad(|x: &Float64| kiln::grad(f, x).unwrap().sum(), &x).unwrap();
/// assert!(d2.item() > 0.0);
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum LoopGrad {
    /// [`LoopGrad::Jacobian`], or [`LoopGrad::Recorded`] inside a transformation whose
    /// derivatives are differentiated again (a `kiln::grad` of a `kiln::grad`, `kiln::hvp`).
    #[default]
    Auto,
    /// Each lane's Jacobian of the state travels with it: memory independent of the trip
    /// count, one forward pass per state entry with a gradient per iteration, a lane-local body,
    /// first order only.
    Jacobian,
    /// Every iteration runs evaluated with derivatives recorded, like straight-line code: any
    /// order, any body, one pass whatever the state's width; memory grows with the iterations
    /// the longest lane runs (every iteration's state is kept for the backward pass). A
    /// `max_iterations` bound that stops lanes still running is `Error::LoopTruncated` from
    /// `run` itself (the other modes report it at the next read). For any body with memory that
    /// grows only as the square root of the iterations, see [`Loop::grad_checkpoint`].
    Recorded,
}

/// How a checkpointed loop spaces the states it keeps for its reverse sweep
/// ([`Loop::grad_checkpoint`]). For `T` iterations of a state of `B` bytes:
///
/// | plan | kept between the passes | extra, during `backward` |
/// |---|---|---|
/// | `Auto` | about `√(2T)` states | one segment: at most about `2√(2T)` iterations |
/// | `AtMost(n)` | at most `n` states | one segment: at most `2T/n` iterations |
/// | `Every(k)` | `T/k` states | one segment: `k` iterations |
///
/// Every plan recomputes the forward once during `backward`. `Auto` suits a trip count not
/// known beforehand: memory grows with its square root.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Checkpoints {
    /// Memory that grows as the square root of the trip count (the default).
    #[default]
    Auto,
    /// At most `n` saved states (at least 1): segments double as the loop runs longer.
    AtMost(usize),
    /// A saved state every `k` iterations (at least 1).
    Every(u64),
}

/// A loop differentiated by recomputation from saved states ([`Loop::grad_checkpoint`]).
pub struct CheckpointedLoop<S> {
    lp: Loop<S>,
    plan: Checkpoints,
}

impl<S: Traverse + Clone + Send + Sync + 'static> CheckpointedLoop<S> {
    /// Run the loop (as [`Loop::run`]); its reverse sweep replays segments from the saved
    /// states, so the closures are kept until the loop's result is dropped, and must be
    /// `'static` (capture what they use by `move`; arrays are cheap handles).
    ///
    /// The body may mix lanes (reductions, gathers from the state): the replay records it like
    /// straight-line code. Arrays with gradients the body uses must come through the state; one
    /// it captures is an error. Forward mode replays the segments too. Inside a transformation
    /// whose derivatives are differentiated again, the loop records every iteration instead
    /// ([`LoopGrad::Recorded`]).
    ///
    /// ```
    /// use kiln::prelude::*;
    /// use kiln::control::{Checkpoints, Loop};
    /// let mut a = Float64::from_slice(&[0.5, 0.9]);
    /// a.enable_grad();
    /// // x ← x/2 + Σx/20 (the sum mixes lanes) for 20 iterations, at most 3 states kept
    /// let (x, _) = Loop::new((a.clone(), UInt32::zeros(2)))
    ///     .grad_checkpoint(Checkpoints::AtMost(3))
    ///     .run(|(_, i)| i.lt(20u32), |(x, i)| (x * 0.5 + x.sum() * 0.05, i + 1u32))
    ///     .unwrap();
    /// x.sum().backward();
    /// // Σx grows by 0.6 an iteration: d Σx / d a_j = 0.6^20
    /// for g in a.grad().to_vec() {
    ///     assert!((g / 0.6f64.powi(20) - 1.0).abs() < 1e-12);
    /// }
    /// ```
    pub fn run(
        self,
        cond: impl FnMut(&S) -> Bool + Send + 'static,
        body: impl FnMut(&S) -> S + Send + 'static,
    ) -> Result<S> {
        crate::ad::checkpoint::run(self.lp, self.plan, cond, body)
    }
}

impl<S: Traverse + Clone + 'static> Loop<S> {
    /// A loop starting from `state` (any [`Traverse`] value: arrays, tuples, structs, …).
    pub fn new(state: S) -> Self {
        Loop {
            state,
            label: "while_loop".into(),
            max_iterations: 0,
            mode: Mode::Auto,
            compress: false,
            grad: LoopGrad::Auto,
            optimize: true,
        }
    }
    /// Differentiate the loop by recomputation: the forward keeps the state every so many
    /// iterations (`plan`), and the reverse sweep replays the segments between them with their
    /// derivatives recorded, last to first. Memory is bounded by the plan whatever the body
    /// (see [`Checkpoints`]; [`CheckpointedLoop::run`] has an example).
    pub fn grad_checkpoint(self, plan: Checkpoints) -> CheckpointedLoop<S> {
        CheckpointedLoop { lp: self, plan }
    }
    /// How derivatives cross the loop (see [`LoopGrad`]; automatic by default).
    pub fn grad_mode(mut self, grad: LoopGrad) -> Self {
        self.grad = grad;
        self
    }
    /// A name for messages and logs.
    pub fn label(mut self, label: &str) -> Self {
        self.label = label.into();
        self
    }
    /// Stop after `n` iterations even if lanes are still active (0: no limit). The next read
    /// (`try_to_vec`, `try_item`) then returns [`Error::LoopTruncated`] naming the loop and the
    /// number of lanes still active, and `stats().loops_truncated` counts it.
    pub fn max_iterations(mut self, n: u64) -> Self {
        self.max_iterations = n;
        self
    }
    /// Symbolic, evaluated or automatic (the default).
    pub fn mode(mut self, mode: Mode) -> Self {
        self.mode = mode;
        self
    }
    /// Evaluated mode only: drop finished lanes from the wavefront (worth it when few lanes run long).
    pub fn compress(mut self, on: bool) -> Self {
        self.compress = on;
        self
    }
    /// Symbolic mode: leave state entries the body never changes out of the loop (on by default:
    /// they are read as constants instead of carried). Off, every entry is carried, as written —
    /// Dr.Jit's `JitFlag.OptimizeLoops`, for comparing or debugging; the results are the same.
    ///
    /// ```
    /// use kiln::prelude::*;
    /// use kiln::control::Loop;
    /// let run = |optimize: bool| {
    ///     Loop::new((UInt32::from_slice(&[0, 2]), UInt32::from(7u32)))
    ///         .optimize(optimize)
    ///         .run(|(i, _)| i.lt(3u32), |(i, k)| (i + 1u32, k.clone()))
    ///         .unwrap()
    /// };
    /// let ((a, k1), (b, k2)) = (run(true), run(false));
    /// assert_eq!((a.to_vec(), k1.to_vec()), (b.to_vec(), k2.to_vec()));
    /// assert_eq!(a.to_vec(), vec![3, 3]);
    /// ```
    pub fn optimize(mut self, on: bool) -> Self {
        self.optimize = on;
        self
    }

    /// Run the loop: while `cond(state)` holds for a lane, `state = body(state)` for that lane.
    ///
    /// Derivatives: both modes cross the loop. By default the Jacobian of the state with respect
    /// to its entries that carry a gradient travels with it (one forward pass per such entry at
    /// each iteration), so the body must be lane-local; an array with a gradient it captures
    /// (one element, or one per lane) is one more column. Reverse mode multiplies by that Jacobian and needs no stored iteration,
    /// however many each lane runs. Higher orders record the iterations instead
    /// ([`LoopGrad::Recorded`], chosen automatically inside nested transformations).
    ///
    /// ```
    /// use kiln::prelude::*;
    /// let mut x = Float64::from_slice(&[0.5, 2.0]);
    /// x.enable_grad();
    /// // y = x · 1.5^k, k = steps until y > 4
    /// let y = kiln::while_loop(x.clone(), |y| y.lt(4.0), |y| y * 1.5).unwrap();
    /// kiln::ad::forward(&x).unwrap();
    /// assert_eq!(y.grad().to_vec(), vec![1.5f64.powi(6), 1.5f64.powi(2)]);
    /// y.sum().backward(); // reverse mode: the same derivatives
    /// assert_eq!(x.grad().to_vec(), vec![1.5f64.powi(6), 1.5f64.powi(2)]);
    /// ```
    pub fn run(self, cond: impl FnMut(&S) -> Bool, body: impl FnMut(&S) -> S) -> Result<S> {
        if crate::ad::control::involved(&self.state) {
            return crate::ad::control::run_loop(self, cond, body);
        }
        self.run_plain(cond, body)
    }

    /// [`Loop::run`] without derivatives.
    pub(crate) fn run_plain(
        self,
        mut cond: impl FnMut(&S) -> Bool,
        mut body: impl FnMut(&S) -> S,
    ) -> Result<S> {
        let (ids, paths) = positions(&self.state);
        let what = format!("loop {}", self.label);
        if ids.is_empty() {
            return Err(Error::ControlFlow(format!(
                "{what}: the state holds no arrays, so there are no lanes to loop over; pass the arrays the loop changes as its state"
            )));
        }
        let n = common_size(&what, &ids, &paths)?;
        if n.is_zero() {
            return Ok(self.state);
        }
        let refusal = if self.mode != Mode::Evaluated {
            match self.symbolic(&ids, &paths, n, &mut cond, &mut body)? {
                Ok(s) => return Ok(s),
                Err((label, how)) if self.mode == Mode::Symbolic => {
                    return Err(cc::refusal_error(label, how, "loop body"));
                }
                Err((label, how)) => {
                    tracing::debug!(target: "kiln::control", "{what}: {how} of {label} needs other lanes' values: running it in evaluated mode");
                    Some(how)
                }
            }
        } else {
            self.probe(&ids, n, &mut cond, &mut body)?
        };
        if cc::symbolic() {
            // inside an enclosing symbolic trace nothing runs, so neither can a host-driven loop:
            // refuse (the enclosing construct then runs in evaluated mode, and this loop for
            // real) and go on with the state unchanged (the enclosing trace is thrown away)
            cc::refuse_request(what, "running a loop in evaluated mode");
            return Ok(self.state);
        }
        // a body that reads data on the host decides by it in Rust: it is traced at every
        // iteration (a frozen step could not replay that decision)
        let frozen = !refusal.is_some_and(|how| cc::is_host_read(&how));
        if self.compress && kiln_core::freeze::driver_mark().is_none() {
            return self.evaluated_compressed(n, &mut cond, &mut body, frozen);
        }
        self.evaluated(n, &mut cond, &mut body, frozen)
    }

    /// Trace the body once symbolically and throw the trace away: what it refused, if anything
    /// (the mode was chosen by the user; this only decides whether the step can be frozen).
    fn probe(
        &self,
        ids: &[VarId],
        n: Size,
        cond: &mut impl FnMut(&S) -> Bool,
        body: &mut impl FnMut(&S) -> S,
    ) -> Result<Option<String>> {
        let mut placeholders = Owned::new();
        for (k, &i) in ids.iter().enumerate() {
            placeholders.push(cc::placeholder(kiln_core::var_type(i), n.peek(), k, i));
        }
        let traced_state = rebuild(&self.state, placeholders.ids());
        let trace = Trace::enter()?;
        drop(cond(&traced_state));
        drop(body(&traced_state));
        drop(trace.finish());
        drop(traced_state);
        Ok(cc::take_refusal().map(|(_, how)| how))
    }

    /// Evaluated mode on a shrinking wavefront: each iteration gathers the running lanes, drops
    /// those whose condition fails (`compress`), runs the body on the rest and scatters their new
    /// state back. The step is frozen once and replayed (its sizes follow the lane count).
    fn evaluated_compressed(
        self,
        n: Size,
        cond: &mut impl FnMut(&S) -> Bool,
        body: &mut impl FnMut(&S) -> S,
        frozen: bool,
    ) -> Result<S> {
        let what = format!("loop {}", self.label);
        let (ids, _) = positions(&self.state);
        let everywhere = Bool::full(true, n);
        // each entry in a buffer of its own, of n lanes (the step scatters into them)
        let mut own = Owned::new();
        for &i in &ids {
            let wide = Owned::own(vec![kiln_core::op(Op::Select, &[everywhere.id(), i, i])?]);
            own.push(cc::copy(wide.ids()[0])?);
        }
        let mut state = rebuild(&self.state, own.ids());
        drop(own);
        let mut lanes = crate::make_opaque(&UInt32::arange(n));
        let failure: std::cell::RefCell<Option<Error>> = Default::default();
        let mut consts = Owned::new();
        let all = consts.push(kiln_core::literal(VarType::Bool, 1, 1));
        let mut step = crate::freeze::freeze(|s: &mut S, lanes: &mut UInt32| {
            let r = (|| -> Result<()> {
                let (full, paths) = positions(s);
                let at = |src: &[VarId], idx: VarId| -> Result<Owned> {
                    let mut out = Owned::new();
                    for &a in src {
                        out.push(kiln_core::gather(a, idx, all)?);
                    }
                    Ok(out)
                };
                let running = at(&full, lanes.id())?;
                let view = rebuild(s, running.ids());
                let c = cond(&view);
                if !fits_lanes(c.id(), lanes.size()) {
                    return Err(mask_size_error(&what, c.id(), n));
                }
                let c = &c & &Bool::full(true, kiln_core::freeze::size_of(lanes.id()));
                let keep = Owned::own(vec![kiln_core::compress(c.id())?]);
                let next_lanes =
                    UInt32::from_id(kiln_core::gather(lanes.id(), keep.ids()[0], all)?);
                let kept = at(running.ids(), keep.ids()[0])?;
                drop(running);
                let k = kiln_core::freeze::size_of(keep.ids()[0]);
                drop(keep);
                let next = {
                    // side effects in the body happen once per lane that runs it
                    let _lanes = kiln_core::lanes::push_compact(next_lanes.id(), n.peek(), None)?;
                    body(&rebuild(s, kept.ids()))
                };
                drop(kept);
                let (new, _) = positions(&next);
                check_same_layout(&what, &full, &paths, &new, k)?;
                let mut targets = Owned::own(full.clone());
                targets.ids().iter().for_each(|&t| kiln_core::inc_ref(t));
                for (t, &v) in targets.ids_mut().iter_mut().zip(&new) {
                    kiln_core::scatter(t, v, next_lanes.id(), all, ReduceOp::None)?;
                }
                *s = rebuild(s, targets.ids());
                drop(targets);
                *lanes = next_lanes;
                Ok(())
            })();
            if let Err(e) = r {
                *failure.borrow_mut() = Some(e);
            }
        })
        .auto_opaque(false)
        .unfreeze_on_hidden_input()
        .enabled(frozen);
        let mut iterations = 0u64;
        let mut limited = false;
        loop {
            let running = kiln_core::size(lanes.id()) as u64;
            if self.max_iterations > 0 && iterations >= self.max_iterations {
                limited = running > 0;
                break;
            }
            if running == 0 {
                break;
            }
            step.call(&mut state, &mut lanes)?;
            if let Some(e) = failure.borrow_mut().take() {
                return Err(e);
            }
            iterations += 1;
        }
        tracing::debug!(target: "kiln::control", "{what}: evaluated mode with compression ran {iterations} iterations; step: {}", step.stats());
        drop(step);
        if limited {
            // the lanes that ran the last iteration may have finished exactly at the limit:
            // truncated are those whose condition still holds
            let c = cond(&state);
            let still = if kiln_core::size(c.id()) == 1 {
                if c.any() {
                    kiln_core::size(lanes.id()) as u64
                } else {
                    0
                }
            } else {
                crate::gather(&c, &lanes).count()
            };
            if still > 0 {
                kiln_core::stats::note_truncated_loop(&self.label, still);
            }
        }
        Ok(state)
    }

    /// Trace the body once into a loop region. `Ok(Err(refusal))`: the body needs evaluated mode.
    #[allow(clippy::type_complexity)]
    fn symbolic(
        &self,
        ids: &[VarId],
        paths: &[String],
        n: Size,
        cond: &mut impl FnMut(&S) -> Bool,
        body: &mut impl FnMut(&S) -> S,
    ) -> Result<std::result::Result<S, Refusal>> {
        let what = format!("loop {}", self.label);
        // (which entry that is was settled by `common_size`'s comparisons)
        let like = *ids
            .iter()
            .find(|&&i| kiln_core::size(i) == n.peek())
            .unwrap_or(&ids[0]);
        let mut held = Owned::new();
        for (k, &i) in ids.iter().enumerate() {
            held.push(cc::placeholder(kiln_core::var_type(i), n.peek(), k, like));
        }
        let placeholders = held.ids();
        // entries found unchanged by the body are not carried: traced again with their values
        let mut carried = vec![true; ids.len()];
        let mut attempt = 0;
        let result = loop {
            attempt += 1;
            let inputs: Vec<VarId> = (0..ids.len())
                .map(|k| if carried[k] { placeholders[k] } else { ids[k] })
                .collect();
            let traced_state = rebuild(&self.state, &inputs);
            let trace = Trace::enter()?;
            let c = cond(&traced_state);
            let next = body(&traced_state);
            let effects = trace.finish();
            drop(traced_state);
            if let Some(refusal) = cc::take_refusal() {
                break Ok(Err(refusal));
            }
            if !fits_lanes(c.id(), n) {
                break Err(mask_size_error(&what, c.id(), n));
            }
            let (next_ids, _) = positions(&next);
            if let Err(e) = check_same_layout(&what, ids, paths, &next_ids, n) {
                break Err(e);
            }
            if let Err(e) = effects.check_sizes(&what, n) {
                break Err(e);
            }
            let unchanged: Vec<bool> = (0..ids.len())
                .map(|k| carried[k] && next_ids[k] == placeholders[k])
                .collect();
            // Until no carried entry is unchanged: an entry can become unchanged only once others
            // are fixed (its next value folded to its placeholder), and a placeholder left out of
            // the loop while its trace still reads it would be a state no loop defines. Each
            // round carries fewer entries, so this ends.
            if self.optimize && unchanged.iter().any(|&u| u) {
                tracing::debug!(target: "kiln::control", "{what}: {} state entries never change (trace {attempt}): traced again without them", unchanged.iter().filter(|&&u| u).count());
                for (k, u) in unchanged.iter().enumerate() {
                    if *u {
                        carried[k] = false;
                    }
                }
                continue;
            }
            if kiln_core::literal_value(c.id()) == Some(0) {
                // the loop never runs
                break Ok(Ok(self.state.clone()));
            }
            // entries still equal to their input are loop-invariant: they keep their value
            let keep: Vec<usize> = (0..ids.len())
                .filter(|&k| carried[k] && (!self.optimize || next_ids[k] != placeholders[k]))
                .collect();
            let outs = Owned::own(cc::make_loop(
                &self.label,
                n.peek(),
                like,
                &keep.iter().map(|&k| ids[k]).collect::<Vec<_>>(),
                &keep.iter().map(|&k| placeholders[k]).collect::<Vec<_>>(),
                c.id(),
                &keep.iter().map(|&k| next_ids[k]).collect::<Vec<_>>(),
                effects.take(),
                self.max_iterations,
            ));
            let mut final_ids = ids.to_vec();
            for (o, &k) in outs.ids().iter().zip(&keep) {
                // an entry carried unchanged (`optimize(false)`) is its input, at its input's size
                if next_ids[k] != placeholders[k] {
                    final_ids[k] = *o;
                }
            }
            let s = rebuild(&self.state, &final_ids);
            drop(outs);
            break Ok(Ok(s));
        };
        drop(held);
        result
    }

    /// The host drives the iterations: the step (condition, body, masked update) is frozen once
    /// and replayed per iteration, until no lane is active.
    fn evaluated(
        self,
        n: Size,
        cond: &mut impl FnMut(&S) -> Bool,
        body: &mut impl FnMut(&S) -> S,
        frozen: bool,
    ) -> Result<S> {
        let what = format!("loop {}", self.label);
        // the step is frozen: its inputs are evaluated buffers from the start (a literal input
        // would be baked into the recording, and change at every iteration), copies, which the
        // replays (and, inside a frozen function's recording, the loop's driver: its first
        // iteration's launches replayed until no lane is active, see `driver_finish`) update
        // without touching an input
        let (ids, _) = positions(&self.state);
        let mut opaque = Owned::new();
        let everywhere = Bool::full(true, n);
        for &i in &ids {
            // a one-lane entry beside wider ones is widened now rather than by the first
            // iteration's masked update: every call of the frozen step, and a driver that
            // replays the first iteration inside an enclosing recording, sees one width
            let wide = if kiln_core::freeze::size_of(i).is_one() && several(n) {
                Some(Owned::own(vec![kiln_core::op(
                    Op::Select,
                    &[everywhere.id(), i, i],
                )?]))
            } else {
                None
            };
            // a copy: the replays update the state's buffers in place, and the body may capture
            // the very array the state starts from (it must keep reading the initial values)
            opaque.push(cc::copy(wide.as_ref().map_or(i, |w| w.ids()[0]))?);
        }
        drop(everywhere);
        let mut state = rebuild(&self.state, opaque.ids());
        drop(opaque);
        // sized like the state (symbolically, inside a frozen function)
        // (which entry that is was settled by `common_size`'s comparisons)
        let like = *ids
            .iter()
            .find(|&&i| kiln_core::size(i) == n.peek())
            .unwrap_or(&ids[0]);
        let mut active = crate::make_opaque(&Bool::full(true, kiln_core::freeze::size_of(like)));
        let failure: std::cell::RefCell<Option<Error>> = Default::default();
        // shared by the step and, with a limit, the probe of the lanes still running after it
        let cond = std::cell::RefCell::new(cond);
        let mut step = crate::freeze::freeze(|s: &mut S, active: &mut Bool| {
            let c = (*cond.borrow_mut())(s);
            if !fits_lanes(c.id(), n) {
                *failure.borrow_mut() = Some(mask_size_error(&what, c.id(), n));
                return;
            }
            let c = &c & &*active;
            // side effects in the body happen only for the lanes that run it
            let lanes = match kiln_core::lanes::push_mask(c.id()) {
                Ok(l) => l,
                Err(e) => {
                    *failure.borrow_mut() = Some(e);
                    return;
                }
            };
            let next = body(s);
            drop(lanes);
            let (old, paths) = positions(s);
            let (new, _) = positions(&next);
            if let Err(e) = check_same_layout(&what, &old, &paths, &new, n) {
                *failure.borrow_mut() = Some(e);
                return;
            }
            let merged = Owned::own(
                old.iter()
                    .zip(&new)
                    .map(|(&o, &x)| {
                        kiln_core::op(Op::Select, &[c.id(), x, o]).expect("select of equal types")
                    })
                    .collect(),
            );
            *s = rebuild(s, merged.ids());
            drop(merged);
            *active = c;
        })
        .auto_opaque(false)
        .unfreeze_on_hidden_input()
        .enabled(frozen);
        let mut iterations = 0u64;
        // the recorded iteration's ops start here
        let mark = kiln_core::freeze::driver_mark();
        let mut first: Option<(Vec<VarId>, Vec<VarId>)> = None;
        // references held for the driver, released however this function returns
        let mut held = Owned::new();
        let mut paused = None;
        let mut probe: Option<(usize, Bool)> = None;
        let mut limited = false;
        loop {
            if self.max_iterations > 0 && iterations >= self.max_iterations {
                limited = true;
                break;
            }
            let before: Vec<VarId> = if mark.is_some() && first.is_none() {
                // held until the driver is made: it needs their buffers
                let ids = state_ids(&state, &active);
                ids.iter().for_each(|&i| kiln_core::inc_ref(i));
                held.extend(ids.iter().copied());
                ids
            } else {
                Vec::new()
            };
            step.call(&mut state, &mut active)?;
            if let Some(e) = failure.borrow_mut().take() {
                return Err(e);
            }
            if mark.is_some() && first.is_none() {
                // the recorded iteration: remember its buffers, then run the rest unrecorded
                let after = state_ids(&state, &active);
                kiln_core::eval(&after)?;
                after.iter().for_each(|&i| kiln_core::inc_ref(i));
                held.extend(after.iter().copied());
                if self.max_iterations > 0 {
                    // recorded after the iteration: which lanes would run another (the driver's
                    // replays ask at the limit)
                    let at = kiln_core::freeze::driver_mark().unwrap_or(0);
                    let still = &(*cond.borrow_mut())(&state) & &active;
                    kiln_core::eval(&[still.id()])?;
                    probe = Some((at, still));
                }
                first = Some((before, after));
                paused = Some(kiln_core::freeze::pause());
            }
            if kiln_core::reduce_to_host(ReduceOp::Or, active.id())? & 1 == 0 {
                break;
            }
            iterations += 1;
        }
        tracing::debug!(target: "kiln::control", "{what}: evaluated mode ran {iterations} iterations; step: {}", step.stats());
        drop(step);
        if limited {
            // the lanes that ran the last iteration may have finished exactly at the limit:
            // truncated are those whose condition still holds (traced while a driver's
            // recording is paused: nothing of it is recorded)
            let still = (&(*cond.borrow_mut())(&state) & &active).count();
            if still > 0 {
                kiln_core::stats::note_truncated_loop(&self.label, still);
            }
        }
        if let (Some(mark), Some((ins, outs))) = (mark, first) {
            let finals = state_ids(&state, &active);
            kiln_core::eval(&finals)?;
            drop(paused);
            let k = outs.len() - 1;
            let indexed: Vec<(VarId, usize)> = finals[..k].iter().copied().zip(0..).collect();
            kiln_core::freeze::driver_finish(
                mark,
                &ins,
                &outs,
                outs[k],
                &indexed,
                self.max_iterations,
                &self.label,
                probe.as_ref().map(|(at, m)| (*at, m.id())),
            );
        }
        drop(held);
        Ok(state)
    }
}

/// The arrays of `state` by position, then `active` (new handles kept alive by the caller's
/// values: only ids).
fn state_ids<S: Traverse>(state: &S, active: &Bool) -> Vec<VarId> {
    let (mut ids, _) = positions(state);
    ids.push(active.id());
    ids
}

/// `next` must have the state's layout: as many arrays, each of the same type, of size n or 1.
fn check_same_layout(
    what: &str,
    old: &[VarId],
    paths: &[String],
    new: &[VarId],
    n: Size,
) -> Result<()> {
    if old.len() != new.len() {
        return Err(Error::ControlFlow(format!(
            "{what}: the body returned a state with {} arrays, but the loop state has {}; return the state with the same structure",
            new.len(),
            old.len()
        )));
    }
    for (k, (&o, &x)) in old.iter().zip(new).enumerate() {
        let (to, tx) = (kiln_core::var_type(o), kiln_core::var_type(x));
        let (so, sx) = (kiln_core::size(o), kiln_core::size(x));
        let fits = fits_lanes(x, n);
        if to != tx {
            return Err(Error::ControlFlow(format!(
                "{what}: state entry {} changes type in the body, from {to} to {tx}; cast it back (`.cast()`) or make it {tx} before the loop",
                entry_name(&paths[k], k)
            )));
        }
        if !fits {
            return Err(Error::ControlFlow(format!(
                "{what}: state entry {} changes size in the body, from {so} to {sx}; a loop keeps one size ({n} lanes) — reduce or gather outside the loop",
                entry_name(&paths[k], k)
            )));
        }
    }
    Ok(())
}

/// Per-lane `while`: while `cond(state)` holds for a lane, `state = body(state)` for that lane.
/// The body is traced once (never per iteration) and the whole loop runs in one kernel; lanes
/// that finish keep their state. See [`Loop`] for labels, limits and modes.
///
/// ```
/// use kiln::prelude::*;
/// // Collatz steps per lane: a trip count that differs per lane, all in one kernel.
/// let x = UInt32::arange(10) + 1u32;
/// let (_, steps) = kiln::while_loop(
///     (x, UInt32::zeros(10)),
///     |(x, _)| x.ne(1u32),
///     |(x, n)| (select(&(x & 1u32).eq(0u32), &(x >> 1u32), &(x * 3u32 + 1u32)), n + 1u32),
/// ).unwrap();
/// assert_eq!(steps.to_vec(), vec![0, 1, 7, 2, 5, 8, 16, 3, 19, 6]);
/// ```
pub fn while_loop<S: Traverse + Clone + 'static>(
    state: S,
    cond: impl FnMut(&S) -> Bool,
    body: impl FnMut(&S) -> S,
) -> Result<S> {
    Loop::new(state).run(cond, body)
}

// ---------------------------------------------------------------------------------------------
// Branches and calls

/// What one traced target produced.
struct Traced {
    outs: Vec<VarId>,
    effects: Effects,
}

/// Trace `f(args)` symbolically. `Err(refusal)` when it needs evaluated mode.
fn trace_target<A, O: Traverse>(
    f: &dyn Fn(&A) -> O,
    args: &A,
) -> Result<(O, std::result::Result<Traced, Refusal>)> {
    let trace = Trace::enter()?;
    let out = f(args);
    let effects = trace.finish();
    if let Some(r) = cc::take_refusal() {
        return Ok((out, Err(r)));
    }
    let (outs, _) = positions(&out);
    Ok((out, Ok(Traced { outs, effects })))
}

/// Check that every target's outputs have the first one's types.
pub(crate) fn check_outputs(what: &str, first: &[VarId], other: &[VarId], k: usize) -> Result<()> {
    if first.len() != other.len() {
        return Err(Error::ControlFlow(format!(
            "{what}: target {k} returned {} arrays but the first target returned {}; every target must return the same structure",
            other.len(),
            first.len()
        )));
    }
    for (j, (&a, &b)) in first.iter().zip(other).enumerate() {
        let (ta, tb) = (kiln_core::var_type(a), kiln_core::var_type(b));
        if ta != tb {
            return Err(Error::ControlFlow(format!(
                "{what}: output #{j} of target {k} is {tb} but the first target's is {ta}; every target must return the same types"
            )));
        }
    }
    Ok(())
}

/// The lane count of a call: the index's and the arguments' common size.
fn call_size<A: Traverse>(what: &str, index: VarId, args: &A) -> Result<Size> {
    let (mut ids, mut paths) = positions(args);
    ids.insert(0, index);
    paths.insert(0, "index".into());
    common_size(what, &ids, &paths)
}

/// Run `targets[k]` on the lanes where `masks[k]` holds (masks disjoint), 0 elsewhere; with
/// derivatives while gradients are recorded (see `crate::ad::control::call`).
fn masked_call<A: Traverse + Clone, O: Traverse + Clone>(
    what: &str,
    kind: u64,
    mode: Mode,
    masks: &[VarId],
    targets: &[Target<'_, A, O>],
    args: &A,
    n: Size,
) -> Result<O> {
    if crate::ad::control::involved(args) {
        if crate::ad::higher_order() {
            return crate::ad::control::recorded_call(what, masks, targets, args, n);
        }
        return crate::ad::control::call(what, args, targets, |a, t| {
            masked_call_plain(what, kind, mode, masks, t, a, n)
        });
    }
    masked_call_plain(what, kind, mode, masks, targets, args, n)
}

fn masked_call_plain<A: Traverse + Clone, O: Traverse + Clone>(
    what: &str,
    kind: u64,
    mode: Mode,
    masks: &[VarId],
    targets: &[Target<'_, A, O>],
    args: &A,
    n: Size,
) -> Result<O> {
    if mode != Mode::Evaluated {
        let mut traced: Vec<Option<Traced>> = Vec::new();
        // the targets' results stay alive until the switch node holds their arrays
        let mut alive: Vec<O> = Vec::new();
        let mut template: Option<O> = None;
        let mut refused = None;
        for t in targets {
            match t {
                None => traced.push(None),
                Some(f) => {
                    let (out, r) = trace_target(*f, args)?;
                    match r {
                        Ok(tr) => {
                            tr.effects.check_sizes(what, n)?;
                            if template.is_none() {
                                template = Some(out.clone());
                            }
                            alive.push(out);
                            traced.push(Some(tr));
                        }
                        Err(r) => {
                            refused = Some(r);
                            break;
                        }
                    }
                }
            }
        }
        if let Some((label, how)) = refused {
            drop(traced);
            if mode == Mode::Symbolic {
                return Err(cc::refusal_error(label, how, what));
            }
            tracing::debug!(target: "kiln::control", "{what}: {how} of {label} needs other lanes' values: running it in evaluated mode");
        } else {
            let Some(template) = template else {
                return Err(no_target(what));
            };
            let first: Vec<VarId> = traced
                .iter()
                .flatten()
                .next()
                .map(|t| t.outs.clone())
                .unwrap_or_default();
            for (k, t) in traced.iter().enumerate() {
                if let Some(t) = t {
                    check_outputs(what, &first, &t.outs, k)?;
                }
            }
            // identical targets (same outputs, no side effects) run once, on all their lanes
            let mut case_masks: Vec<VarId> = Vec::new();
            let mut yields: Vec<Vec<VarId>> = Vec::new();
            let mut effects: Vec<Effects> = Vec::new();
            let mut owned = Owned::new();
            for (k, t) in traced.into_iter().enumerate() {
                let Some(t) = t else { continue };
                let same = (t.effects.is_empty())
                    .then(|| {
                        yields
                            .iter()
                            .zip(&effects)
                            .position(|(y, e)| *y == t.outs && e.is_empty())
                    })
                    .flatten();
                match same {
                    Some(c) => {
                        let m = owned.push(kiln_core::op(Op::Or, &[case_masks[c], masks[k]])?);
                        case_masks[c] = m;
                    }
                    None => {
                        case_masks.push(masks[k]);
                        yields.push(t.outs);
                        effects.push(t.effects);
                    }
                }
            }
            let like = masks[0];
            let effects: Vec<Vec<u32>> = effects.into_iter().map(Effects::take).collect();
            let outs = Owned::own(cc::make_switch(
                kind,
                n.peek(),
                like,
                &case_masks,
                &yields,
                effects,
            ));
            drop(alive);
            let result = rebuild(&template, outs.ids());
            drop(outs);
            drop(owned);
            return Ok(result);
        }
    }
    evaluated_call(what, masks, targets, args, n)
}

pub(crate) fn no_target(what: &str) -> Error {
    Error::ControlFlow(format!(
        "{what}: there is no target to call (every entry is `None`), so the result's type is unknown; give at least one target"
    ))
}

/// Evaluated form: each target runs on its own lanes only (compacted), and its results are
/// scattered back into arrays of zeros.
fn evaluated_call<A: Traverse + Clone, O: Traverse + Clone>(
    what: &str,
    masks: &[VarId],
    targets: &[Target<'_, A, O>],
    args: &A,
    n: Size,
) -> Result<O> {
    let (arg_ids, _) = positions(args);
    // the results so far (a template and arrays of n lanes), released on an early return
    let mut result: Option<(O, Owned)> = None;
    let mut consts = Owned::new();
    let all = consts.push(kiln_core::literal(VarType::Bool, 1, 1));
    for (k, t) in targets.iter().enumerate() {
        let Some(f) = t else { continue };
        let mut refs = Owned::new();
        let mask = if kiln_core::freeze::size_of(masks[k]).same_as(n) {
            masks[k]
        } else {
            // a broadcast mask: all lanes or none
            let yes = refs.push(kiln_core::literal(VarType::Bool, 1, n));
            let no = refs.push(kiln_core::literal(VarType::Bool, 0, n));
            refs.push(kiln_core::op(Op::Select, &[masks[k], yes, no])?)
        };
        let lanes = refs.push(kiln_core::compress(mask)?);
        // a target with no lanes still runs (on empty arrays): inside a frozen function the
        // recording must contain it for replays whose lanes do select it
        if kiln_core::size(lanes) == 0 && result.is_some() && !kiln_core::freeze::in_recording() {
            continue;
        }
        let mut compact = Owned::new();
        for &a in &arg_ids {
            // size-1 arguments broadcast (unless the call has one lane: then it is that lane)
            if kiln_core::freeze::size_of(a).is_one() && several(n) {
                kiln_core::inc_ref(a);
                compact.push(a);
            } else {
                compact.push(kiln_core::gather(a, lanes, all)?);
            }
        }
        let local = rebuild(args, compact.ids());
        drop(compact);
        let out = {
            // side effects in the target happen only for its lanes
            let _lanes = kiln_core::lanes::push_compact(lanes, n.peek(), Some(mask))?;
            f(&local)
        };
        drop(local);
        let (out_ids, _) = positions(&out);
        if result.is_none() {
            let mut zeros = Owned::new();
            for &o in &out_ids {
                // sized by `n` as a Size: inside a frozen function the result follows the inputs
                let z = Owned::own(vec![kiln_core::literal(kiln_core::var_type(o), 0, n)]);
                zeros.push(kiln_core::make_opaque(z.ids()[0])?);
            }
            result = Some((out.clone(), zeros));
        }
        let (template, acc) = result.as_mut().expect("set above");
        let (first, _) = positions(template);
        check_outputs(what, &first, &out_ids, k)?;
        for (dst, &src) in acc.ids_mut().iter_mut().zip(&out_ids) {
            kiln_core::scatter(dst, src, lanes, all, ReduceOp::None)?;
        }
    }
    let Some((template, acc)) = result else {
        return Err(no_target(what));
    };
    Ok(rebuild(&template, acc.ids()))
}

/// Per-lane branch: lanes where `cond` holds get `then_f(args)`, the others `else_f(args)`. Both
/// sides are traced once; in the kernel each lane runs only its side (a side no lane of a vector
/// takes is skipped), and side effects in a side happen only on its lanes.
///
/// ```
/// use kiln::prelude::*;
/// let x = UInt32::arange(6);
/// let y = kiln::if_then_else(&x.lt(3u32), |x: &UInt32| x * 2u32, |x: &UInt32| x + 100u32, &x).unwrap();
/// assert_eq!(y.to_vec(), vec![0, 2, 4, 103, 104, 105]);
/// ```
pub fn if_then_else<A: Traverse + Clone, O: Traverse + Clone>(
    cond: &Bool,
    then_f: impl Fn(&A) -> O,
    else_f: impl Fn(&A) -> O,
    args: &A,
) -> Result<O> {
    Branch::new().run(cond, then_f, else_f, args)
}

/// [`if_then_else`] with a mode.
///
/// ```
/// use kiln::prelude::*;
/// use kiln::control::Branch;
/// let x = Int32::arange(4) - 2;
/// // evaluated: both sides computed for every lane, then selected
/// let a = Branch::new().mode(Mode::Evaluated).run(&x.lt(0), |x: &Int32| -x, |x: &Int32| x.clone(), &x).unwrap();
/// assert_eq!(a.to_vec(), vec![2, 1, 0, 1]);
/// ```
#[derive(Clone, Copy, Debug, Default)]
pub struct Branch {
    mode: Mode,
}

impl Branch {
    /// A branch in the default mode ([`Mode::Auto`]).
    pub fn new() -> Branch {
        Branch::default()
    }
    /// Symbolic (one kernel, masked), evaluated (both sides, then `select`) or automatic.
    pub fn mode(mut self, mode: Mode) -> Branch {
        self.mode = mode;
        self
    }
    /// See [`if_then_else`].
    pub fn run<A: Traverse + Clone, O: Traverse + Clone>(
        self,
        cond: &Bool,
        then_f: impl Fn(&A) -> O,
        else_f: impl Fn(&A) -> O,
        args: &A,
    ) -> Result<O> {
        let what = "if_then_else";
        let n = call_size(what, cond.id(), args)?;
        if let Some(bits) = kiln_core::literal_value(cond.id()) {
            // a literal condition picks one side for every lane
            return Ok(if bits & 1 != 0 {
                then_f(args)
            } else {
                else_f(args)
            });
        }
        let not = !cond;
        let masks = [cond.id(), not.id()];
        let targets: [Target<'_, A, O>; 2] = [Some(&then_f), Some(&else_f)];
        masked_call(what, 0, self.mode, &masks, &targets, args, n)
    }
}

/// Indirect call: lane `i` runs `targets[index[i]](args)` (like Dr.Jit's `switch`, or a virtual
/// call). Each target is traced once; in the kernel each vector runs only the targets its lanes
/// need; identical targets run once. An index out of range gives 0 in every output.
///
/// ```
/// use kiln::prelude::*;
/// let id = UInt32::from_slice(&[0, 1, 1, 7]);
/// let p = Vector2f::new(Float32::from_slice(&[1.0, 2.0, 3.0, 4.0]), Float32::full(2.0, 4));
/// let area = kiln::switch(&id, &[&|p: &Vector2f| p.x() * p.y(), &|p: &Vector2f| p.x() * p.x() * 3.0], &p).unwrap();
/// assert_eq!(area.to_vec(), vec![2.0, 12.0, 27.0, 0.0]);
/// ```
///
/// Targets must return one type; anything else does not compile:
///
/// ```compile_fail
/// use kiln::prelude::*;
/// let id = UInt32::zeros(2);
/// let x = Float32::zeros(2);
/// let _ = kiln::switch(&id, &[&|x: &Float32| x * 2.0, &|x: &Float32| x.lt(1.0)], &x);
/// ```
pub fn switch<A: Traverse + Clone, O: Traverse + Clone>(
    index: &UInt32,
    targets: &[&dyn Fn(&A) -> O],
    args: &A,
) -> Result<O> {
    let t: Vec<Target<'_, A, O>> = targets.iter().map(|&f| Some(f)).collect();
    Switch::new().run(index, &t, args)
}

/// [`switch`] with `None` targets (their lanes get 0) and a mode.
///
/// ```
/// use kiln::prelude::*;
/// use kiln::control::Switch;
/// let square = |x: &Int32| x * x;
/// let negate = |x: &Int32| -x;
/// let id = UInt32::from_slice(&[1, 0, 1, 5]);
/// // evaluated: each target runs once on its own lanes, gathered and scattered back
/// let y = Switch::new()
///     .mode(Mode::Evaluated)
///     .run(&id, &[Some(&square), Some(&negate)], &Int32::arange(4))
///     .unwrap();
/// assert_eq!(y.to_vec(), vec![0, 1, -2, 0]);
/// ```
#[derive(Clone, Copy, Debug, Default)]
pub struct Switch {
    mode: Mode,
}

impl Switch {
    /// A switch in the default mode ([`Mode::Auto`]).
    pub fn new() -> Switch {
        Switch::default()
    }
    /// Symbolic (one kernel, each vector runs the targets its lanes need), evaluated (each
    /// target on its compacted lanes) or automatic.
    pub fn mode(mut self, mode: Mode) -> Switch {
        self.mode = mode;
        self
    }
    /// [`dispatch`] in this mode.
    ///
    /// ```
    /// use kiln::prelude::*;
    /// use kiln::control::Switch;
    /// let scales = [2u32, 10];
    /// let refs: Vec<&u32> = scales.iter().collect();
    /// let y = Switch::new()
    ///     .mode(Mode::Evaluated)
    ///     .dispatch(&UInt32::from_slice(&[1, 0, 1]), &refs, &UInt32::arange(3), |s, x| x * *s)
    ///     .unwrap();
    /// assert_eq!(y.to_vec(), vec![0, 2, 20]);
    /// ```
    pub fn dispatch<T: ?Sized, A: Traverse + Clone, O: Traverse + Clone>(
        self,
        index: &UInt32,
        instances: &[&T],
        args: &A,
        call: impl Fn(&T, &A) -> O,
    ) -> Result<O> {
        let closures: Vec<BoxedTarget<'_, A, O>> = instances
            .iter()
            .map(|&inst| {
                let call = &call;
                Box::new(move |a: &A| call(inst, a)) as BoxedTarget<'_, A, O>
            })
            .collect();
        let targets: Vec<Target<'_, A, O>> = closures.iter().map(|c| Some(c.as_ref())).collect();
        self.run(index, &targets, args)
    }
    /// See [`switch`]; a `None` target masks its lanes off (outputs 0).
    pub fn run<A: Traverse + Clone, O: Traverse + Clone>(
        self,
        index: &UInt32,
        targets: &[Target<'_, A, O>],
        args: &A,
    ) -> Result<O> {
        let what = "switch";
        let n = call_size(what, index.id(), args)?;
        let masks: Vec<Bool> = (0..targets.len()).map(|k| index.eq(k as u32)).collect();
        let ids: Vec<VarId> = masks.iter().map(|m| m.id()).collect();
        masked_call(what, 1, self.mode, &ids, targets, args, n)
    }
}

/// Indirect call over trait objects: lane `i` runs `call(instances[index[i]], args)`.
///
/// ```
/// use kiln::prelude::*;
/// trait Shape { fn area(&self, scale: &Float32) -> Float32; }
/// struct Square(f32);
/// struct Circle(f32);
/// impl Shape for Square { fn area(&self, s: &Float32) -> Float32 { s * s * (self.0 * self.0) } }
/// impl Shape for Circle { fn area(&self, s: &Float32) -> Float32 { s * s * (3.0 * self.0 * self.0) } }
/// let shapes: [&dyn Shape; 2] = [&Square(2.0), &Circle(1.0)];
/// let id = UInt32::from_slice(&[0, 1, 0]);
/// let a = kiln::dispatch(&id, &shapes, &Float32::full(1.0, 3), |s, x| s.area(x)).unwrap();
/// assert_eq!(a.to_vec(), vec![4.0, 3.0, 4.0]);
/// ```
pub fn dispatch<T: ?Sized, A: Traverse + Clone, O: Traverse + Clone>(
    index: &UInt32,
    instances: &[&T],
    args: &A,
    call: impl Fn(&T, &A) -> O,
) -> Result<O> {
    Switch::new().dispatch(index, instances, args, call)
}

/// Instances of a trait registered under ids (their position), for [`dispatch`]. It implements
/// [`Traverse`] when the trait has `Traverse` as a supertrait, so a frozen function that takes a
/// registry sees the arrays its instances hold.
///
/// ```
/// use kiln::prelude::*;
/// use kiln::Traverse;
/// trait Shape: Traverse { fn area(&self) -> Float32; }
/// #[derive(Traverse)]
/// struct Disc { r: Float32 }
/// impl Shape for Disc { fn area(&self) -> Float32 { &self.r * &self.r * 3.0 } }
/// let mut reg: kiln::Registry<dyn Shape> = kiln::Registry::new();
/// let small = reg.register(Box::new(Disc { r: Float32::full(1.0, 2) }));
/// let big = reg.register(Box::new(Disc { r: Float32::full(2.0, 2) }));
/// let id = UInt32::from_slice(&[big, small]);
/// let a = reg.dispatch(&id, &(), |s, _| s.area()).unwrap();
/// assert_eq!(a.to_vec(), vec![12.0, 3.0]);
/// ```
pub struct Registry<T: ?Sized> {
    items: Vec<Box<T>>,
}

impl<T: ?Sized> Default for Registry<T> {
    fn default() -> Self {
        Registry { items: Vec::new() }
    }
}

impl<T: ?Sized> Registry<T> {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }
    /// Add an instance; returns its id.
    pub fn register(&mut self, item: Box<T>) -> u32 {
        self.items.push(item);
        (self.items.len() - 1) as u32
    }
    /// The instance with id `id`.
    pub fn get(&self, id: u32) -> Option<&T> {
        self.items.get(id as usize).map(|b| b.as_ref())
    }
    /// Number of registered instances.
    pub fn len(&self) -> usize {
        self.items.len()
    }
    /// Whether nothing is registered.
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }
    /// [`dispatch`] over the registered instances.
    pub fn dispatch<A: Traverse + Clone, O: Traverse + Clone>(
        &self,
        index: &UInt32,
        args: &A,
        call: impl Fn(&T, &A) -> O,
    ) -> Result<O> {
        let refs: Vec<&T> = self.items.iter().map(|b| b.as_ref()).collect();
        dispatch(index, &refs, args, call)
    }
}

impl<T: ?Sized + Traverse> Traverse for Registry<T> {
    fn traverse(&self, t: &mut Traversal) {
        t.structure("Registry", self.items.len());
        for (i, item) in self.items.iter().enumerate() {
            t.index(i, |t| item.traverse(t));
        }
    }
    fn traverse_mut(&mut self, a: &mut Assign) {
        for item in &mut self.items {
            item.traverse_mut(a);
        }
    }
}
