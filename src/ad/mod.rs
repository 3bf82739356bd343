//! Automatic differentiation: forward and reverse mode on the lazy engine.
//!
//! An array that can carry a gradient has a node in the AD graph (`graph`) besides its variable
//! in the engine's registry; ops on such arrays record a node with a derivative rule (`rules`),
//! and a pass (`propagate`) runs those rules as ordinary traced array code, so a backward pass is
//! fused into kernels like anything else. This module holds Dr.Jit's face of it (methods on
//! arrays, passes started from an array, scopes); the JAX face (`kiln::grad`, `vjp`, `jvp`) is
//! built on the same mechanism.
//!
//! ```
//! use kiln::prelude::*;
//! let mut x = Float64::from_slice(&[1.0, 2.0, 3.0]);
//! x.enable_grad();
//! let y = (&x * &x).sum();          // y = Σ x²
//! y.backward();
//! assert_eq!(x.grad().to_vec(), vec![2.0, 4.0, 6.0]);
//! ```
//!
//! Conventions: the gradient of something that does not depend on an input is zero (as in
//! Dr.Jit and JAX); integer and mask arrays carry no gradient; a backward pass consumes the graph
//! it crosses (a second one through it is an error) unless asked to retain it.

pub(crate) mod checkpoint;
pub(crate) mod control;
pub mod custom;
pub(crate) mod deferred;
pub(crate) mod graph;
pub(crate) mod jax;
pub(crate) mod memory;
mod propagate;
pub(crate) use propagate::current_pass;
pub(crate) mod reduce;
pub(crate) mod rules;
pub(crate) mod tensor;
mod traversal;
mod value;

pub use custom::{custom, CustomOp};
pub(crate) use graph::AdIndex;
pub use jax::{clear_grads, detach, enable_grad, grad, grads, hvp, jvp, value_and_grad, vjp};
pub use traversal::{backward_from_all, backward_to, forward_from_all};
pub(crate) use value::Grad;

use crate::array::{ok, Array};
use crate::types::Float;
use kiln_core::{Error, Result, Scalar};
use propagate::Backward;
use std::cell::{Cell, RefCell};
use std::collections::HashMap;

thread_local! {
    /// Whether ops on this thread record AD nodes (`suspend_grad` / `resume_grad`).
    static RECORDING: Cell<bool> = const { Cell::new(true) };
    /// Sequence numbers at which the open `isolate_grad` scopes began (innermost last).
    static ISOLATE: RefCell<Vec<u64>> = const { RefCell::new(Vec::new()) };
    /// Cotangents that reached a node older than the innermost isolate scope (the node retained
    /// until the scope ends), and whether the pass that sent each kept its graph.
    static STASH: RefCell<Vec<Vec<(AdIndex, Grad, bool)>>> = const { RefCell::new(Vec::new()) };
    /// Open transformations whose function's derivatives will be differentiated again.
    static HIGHER: Cell<u32> = const { Cell::new(0) };
}

/// Whether the code running now is inside a transformation whose results will be
/// differentiated again (a nested `kiln::grad`, `vjp` or `jvp`, or `hvp`'s function): constructs
/// whose backward rule is not itself differentiable (a loop's carried Jacobian) then record
/// their steps instead.
pub(crate) fn higher_order() -> bool {
    HIGHER.with(|h| h.get() > 0)
}

/// Marks a transformation's function as differentiated again while it runs (see
/// [`higher_order`]); nothing when `on` is false.
pub(crate) struct HigherOrder(bool);
impl HigherOrder {
    pub(crate) fn enter(on: bool) -> HigherOrder {
        if on {
            HIGHER.with(|h| h.set(h.get() + 1));
        }
        HigherOrder(on)
    }
}
impl Drop for HigherOrder {
    fn drop(&mut self) {
        if self.0 {
            HIGHER.with(|h| h.set(h.get() - 1));
        }
    }
}

pub(crate) fn recording() -> bool {
    RECORDING.with(|r| r.get())
}

/// Whether this thread records derivatives now (false inside [`suspend_grad`]).
///
/// ```
/// assert!(kiln::ad::grad_recording());
/// assert!(!kiln::ad::suspend_grad(kiln::ad::grad_recording));
/// ```
pub fn grad_recording() -> bool {
    recording()
}

/// Sets the recording flag and restores the previous one on drop (also on a panic).
pub(crate) struct RecordingGuard(bool);
impl RecordingGuard {
    pub(crate) fn set(on: bool) -> RecordingGuard {
        RecordingGuard(RECORDING.with(|r| r.replace(on)))
    }
}
impl Drop for RecordingGuard {
    fn drop(&mut self) {
        RECORDING.with(|r| r.set(self.0));
    }
}

fn isolate_boundary() -> u64 {
    ISOLATE.with(|s| s.borrow().last().copied().unwrap_or(0))
}

fn stash_isolated(ad: AdIndex, ct: Grad, retain_graph: bool) {
    STASH.with(|s| {
        if let Some(top) = s.borrow_mut().last_mut() {
            // the node must outlive the scope: its number is what the scope's end sends to
            graph::inc_ref(ad);
            top.push((ad, ct, retain_graph));
        }
    })
}

/// Run `f` with no isolation boundary (a pass that must reach its own targets, `backward_to`,
/// inside an `isolate_grad` scope).
fn without_isolation<R>(f: impl FnOnce() -> R) -> R {
    ISOLATE.with(|s| s.borrow_mut().push(0));
    STASH.with(|s| s.borrow_mut().push(Vec::new()));
    struct Pop;
    impl Drop for Pop {
        fn drop(&mut self) {
            ISOLATE.with(|s| s.borrow_mut().pop());
            STASH.with(|s| s.borrow_mut().pop());
        }
    }
    let _pop = Pop;
    f()
}

/// Run `f` without recording derivatives: arrays computed inside carry no gradient.
///
/// ```
/// use kiln::prelude::*;
/// let mut x = Float32::from_slice(&[1.0, 2.0]);
/// x.enable_grad();
/// let y = kiln::ad::suspend_grad(|| &x * 2.0);
/// assert!(!y.grad_enabled());
/// ```
pub fn suspend_grad<R>(f: impl FnOnce() -> R) -> R {
    let _g = RecordingGuard::set(false);
    f()
}

/// Turn derivative recording on this thread on or off and return what it was: for scopes that
/// cannot be a closure (a Python `with kiln.suspend_grad():` block enters and leaves in two
/// calls). Restore the returned value when the scope ends; [`suspend_grad`] and [`resume_grad`]
/// do both for a closure.
///
/// ```
/// use kiln::prelude::*;
/// let mut x = Float32::from_slice(&[1.0]);
/// x.enable_grad();
/// let was = kiln::ad::set_grad_recording(false);
/// let y = &x * 2.0;
/// kiln::ad::set_grad_recording(was);
/// assert!(!y.grad_enabled() && (&x * 2.0).grad_enabled());
/// ```
pub fn set_grad_recording(on: bool) -> bool {
    RECORDING.with(|r| r.replace(on))
}

/// Run `f` recording derivatives again (inside a [`suspend_grad`] scope).
///
/// ```
/// use kiln::prelude::*;
/// let mut x = Float32::from_slice(&[1.0]);
/// x.enable_grad();
/// let y = kiln::ad::suspend_grad(|| kiln::ad::resume_grad(|| &x * 2.0));
/// assert!(y.grad_enabled());
/// ```
pub fn resume_grad<R>(f: impl FnOnce() -> R) -> R {
    let _g = RecordingGuard::set(true);
    f()
}

/// Run `f` with backward passes stopping at the nodes that existed before it: inside, a
/// `backward` reaches only what `f` computed; what arrives at the older nodes is propagated
/// further when `f` returns (Dr.Jit's `isolate_grad`, used to bound the work of a pass that must
/// run inside a larger computation).
///
/// ```
/// use kiln::prelude::*;
/// let mut x = Float64::from_slice(&[3.0]);
/// x.enable_grad();
/// let y = &x * 2.0;
/// kiln::ad::isolate_grad(|| {
///     let z = &y * &y;       // z = 4x²
///     z.backward();
///     assert_eq!(x.grad().item(), 0.0); // held at y until the scope ends
/// });
/// assert_eq!(x.grad().item(), 24.0);
/// ```
pub fn isolate_grad<R>(f: impl FnOnce() -> R) -> R {
    let _scope = IsolateScope::begin();
    f()
}

/// An open [`isolate_grad`] scope, for a caller that cannot pass a closure (a Python `with`
/// block): begun by [`IsolateScope::begin`], ended by [`IsolateScope::end`] or by dropping it
/// (which logs a failure to carry the held gradients on instead of returning it). Scopes end in
/// the reverse order of their beginning, on the thread that began them (the type is not `Send`).
///
/// ```
/// use kiln::prelude::*;
/// let mut x = Float64::from_slice(&[3.0]);
/// x.enable_grad();
/// let y = &x * 2.0;
/// let scope = kiln::ad::IsolateScope::begin();
/// (&y * &y).backward();
/// assert_eq!(x.grad().item(), 0.0);
/// scope.end().unwrap();
/// assert_eq!(x.grad().item(), 24.0);
/// ```
pub struct IsolateScope {
    ended: bool,
    _thread: std::marker::PhantomData<*const ()>,
}

impl IsolateScope {
    /// Begin a scope: backward passes stop at the nodes that exist now until it ends.
    pub fn begin() -> IsolateScope {
        let start = graph::with(|g| g.next_seq());
        ISOLATE.with(|s| s.borrow_mut().push(start));
        STASH.with(|s| s.borrow_mut().push(Vec::new()));
        IsolateScope {
            ended: false,
            _thread: std::marker::PhantomData,
        }
    }
    /// End the scope: what reached the older nodes is propagated further now.
    pub fn end(mut self) -> Result<()> {
        self.ended = true;
        Self::finish(true)
    }
    fn finish(propagate: bool) -> Result<()> {
        ISOLATE.with(|s| s.borrow_mut().pop());
        let held = STASH.with(|s| s.borrow_mut().pop()).unwrap_or_default();
        let ads: Vec<AdIndex> = held.iter().map(|h| h.0).collect();
        let r = if held.is_empty() || !propagate {
            Ok(())
        } else {
            // the graph stays if any pass that reached the boundary kept it
            let retain_graph = held.iter().any(|h| h.2);
            let seeds = held.into_iter().map(|(ad, ct, _)| (ad, ct)).collect();
            carry_on(seeds, retain_graph)
        };
        ads.into_iter().for_each(graph::dec_ref);
        r
    }
}

/// Carry cotangents that arrived at nodes across a boundary (an `isolate_grad` scope's end, a
/// frozen function's exit) on into the graph behind those nodes: one backward pass from them.
pub(crate) fn carry_on(seeds: Vec<(AdIndex, Grad)>, retain_graph: bool) -> Result<()> {
    let how = Backward {
        retain_graph,
        create_graph: false,
    };
    propagate::backward(seeds, how, &[]).map(|_| ())
}

impl Drop for IsolateScope {
    fn drop(&mut self) {
        if !self.ended {
            if let Err(e) = Self::finish(!std::thread::panicking()) {
                tracing::warn!(target: "kiln::ad", "isolate_grad: propagating past the scope failed: {e}");
            }
        }
    }
}

impl<T: Scalar> Array<T> {
    /// Whether the array has a node in the AD graph (it can carry a gradient).
    ///
    /// ```
    /// assert!(!kiln::Float32::zeros(2).grad_enabled());
    /// ```
    pub fn grad_enabled(&self) -> bool {
        self.ad != 0
    }
    /// The same values, detached from the AD graph (no gradient flows through the result).
    ///
    /// ```
    /// use kiln::prelude::*;
    /// let mut x = Float32::from_slice(&[1.0]);
    /// x.enable_grad();
    /// assert!(!x.detach().grad_enabled());
    /// ```
    pub fn detach(&self) -> Array<T> {
        kiln_core::inc_ref(self.id());
        Array::wrap(self.id())
    }
    /// The array's node in the AD graph (Dr.Jit's `index_ad`): 0 for an array without one.
    /// Arrays with one node share their gradient, whatever their values.
    ///
    /// ```
    /// use kiln::prelude::*;
    /// let mut x = Float32::from_slice(&[1.0]);
    /// assert_eq!(x.ad_index(), 0);
    /// x.enable_grad();
    /// assert_ne!(x.ad_index(), 0);
    /// assert_eq!(x.clone().ad_index(), x.ad_index());
    /// ```
    pub fn ad_index(&self) -> u64 {
        u64::from(self.ad)
    }
}

impl<T: Float> Array<T> {
    /// This array's values with the place in the AD graph of `grads` (Dr.Jit's `replace_grad`):
    /// what is computed from the result differentiates as if computed from `grads`, so the
    /// result passes its gradient to where `grads` came from (a straight-through estimator:
    /// round in the forward pass, the identity's gradient backward). One of the two may have
    /// size 1; it is broadcast to the other's size (a size-1 `grads` then receives the sum of
    /// the lanes' gradients).
    ///
    /// ```
    /// use kiln::prelude::*;
    /// let mut x = Float32::from_slice(&[0.4, 1.6]);
    /// x.enable_grad();
    /// let q = x.round().replace_grad(&x).unwrap(); // the values rounded, the gradient x's
    /// assert_eq!(q.to_vec(), vec![0.0, 2.0]);
    /// (&q * 3.0).sum().backward();
    /// assert_eq!(x.grad().to_vec(), vec![3.0, 3.0]);
    /// ```
    pub fn replace_grad(&self, grads: &Array<T>) -> Result<Array<T>> {
        // (sizes as `Size`: inside a frozen function the recording follows the inputs' sizes)
        let (n, m) = (self.size(), grads.size());
        let (n_one, m_one) = (n.is_one(), m.is_one());
        if !n_one && !m_one && !n.same_as(m) {
            return Err(Error::SizeMismatch {
                op: "replace_grad".into(),
                lhs: kiln_core::describe(self.id()),
                lhs_size: n.get(),
                rhs: kiln_core::describe(grads.id()),
                rhs_size: m.get(),
            });
        }
        // a size-1 side is broadcast (`· 1` keeps a -0.0, which `+ 0` would not)
        let value = if n_one && !m_one {
            self.detach() * Array::<T>::ones(m)
        } else {
            self.detach()
        };
        let grads = if m_one && !n_one {
            grads * &Array::<T>::ones(n)
        } else {
            grads.clone()
        };
        Ok(grads.same_node(value.into_id()))
    }
    /// Make this array a leaf of the AD graph: operations on it record derivatives, and
    /// `backward` passes store its gradient (readable with [`Array::grad`]). On an array that is
    /// already in the graph (computed from one that is), its gradient is kept by later passes.
    /// Only float arrays have this method (integer arrays carry no gradient; see
    /// `kiln::ad::enable_grad` for sets with mixed types).
    ///
    /// ```
    /// let mut x = kiln::Float32::from_slice(&[1.0, 2.0]);
    /// x.enable_grad();
    /// assert!(x.grad_enabled());
    /// ```
    pub fn enable_grad(&mut self) -> &mut Self {
        if self.ad == 0 {
            let ad = graph::new_node(T::TYPE, kiln_core::size(self.id()), Vec::new(), None);
            self.ad = ad;
        }
        let var = self.id().0;
        graph::with(|g| {
            let n = g.node_mut(self.ad);
            n.keeps_grad = true;
            n.var = var; // for whos()
        });
        self
    }
    /// The gradient accumulated by backward passes (or the tangent set by a forward pass); zeros
    /// when there is none or the array carries no gradient (Dr.Jit and JAX do the same). A lazy
    /// array: reading it inside a frozen function records the kernels that compute it.
    ///
    /// ```
    /// let x = kiln::Float32::from_slice(&[1.0, 2.0]);
    /// assert_eq!(x.grad().to_vec(), vec![0.0, 0.0]);
    /// ```
    pub fn grad(&self) -> Array<T> {
        if self.ad != 0 {
            if let Some(g) = graph::with(|g| g.node(self.ad).grad.clone()) {
                return rules::broadcast(g.array::<T>(), self.size());
            }
        }
        Array::zeros(self.size())
    }
    /// Replace the gradient (size 1 or the array's size).
    ///
    /// ```
    /// let mut x = kiln::Float32::from_slice(&[1.0, 2.0]);
    /// x.enable_grad();
    /// x.set_grad(&kiln::Float32::from(3.0f32));
    /// assert_eq!(x.grad().to_vec(), vec![3.0, 3.0]);
    /// ```
    pub fn set_grad(&self, g: &Array<T>) {
        ok(self.try_set_grad(g, false))
    }
    /// Add to the gradient.
    ///
    /// ```
    /// let mut x = kiln::Float32::from_slice(&[1.0]);
    /// x.enable_grad();
    /// x.accum_grad(&kiln::Float32::from(1.0f32));
    /// x.accum_grad(&kiln::Float32::from(2.0f32));
    /// assert_eq!(x.grad().item(), 3.0);
    /// ```
    pub fn accum_grad(&self, g: &Array<T>) {
        ok(self.try_set_grad(g, true))
    }
    fn try_set_grad(&self, g: &Array<T>, add: bool) -> Result<()> {
        if self.ad == 0 {
            return Err(Error::Ad(format!(
                "set_grad/accum_grad on {}, which carries no gradient; call `enable_grad()` on it first",
                kiln_core::describe(self.id())
            )));
        }
        let (n, m) = (g.size(), self.size());
        if !n.is_one() && !n.same_as(m) {
            return Err(Error::Ad(format!(
                "a gradient of {n} elements for {} of {}; give one value or one per element",
                kiln_core::describe(self.id()),
                m
            )));
        }
        // one value for every lane is stored as one per lane: the rules of non-elementwise
        // operations (a scatter's gather of its cotangent, block and prefix sums) read lanes
        // of the cotangent by index, where a one-element array would read 0 or one block
        let new = rules::broadcast(g.detach(), m);
        let old = graph::with(|gr| gr.node_mut(self.ad).grad.take());
        let v = match (add, old) {
            (true, Some(o)) => o.array::<T>() + new,
            _ => new,
        };
        let prev = graph::with(|gr| gr.node_mut(self.ad).grad.replace(Grad::of(v)));
        drop(prev);
        Ok(())
    }
    /// Forget the gradient.
    ///
    /// ```
    /// let mut x = kiln::Float32::from_slice(&[1.0]);
    /// x.enable_grad();
    /// x.set_grad(&kiln::Float32::from(1.0f32));
    /// x.clear_grad();
    /// assert_eq!(x.grad().item(), 0.0);
    /// ```
    pub fn clear_grad(&self) {
        if self.ad != 0 {
            let prev = graph::with(|gr| gr.node_mut(self.ad).grad.take());
            drop(prev);
        }
    }
    /// Reverse mode from this scalar: the gradient of `self` with respect to every leaf it
    /// depends on is added to that leaf's [`Array::grad`]. Panics on a non-scalar or a consumed
    /// graph; see [`Array::try_backward`].
    ///
    /// ```
    /// let mut x = kiln::Float64::from(3.0);
    /// x.enable_grad();
    /// (&x * &x * &x).backward();
    /// assert_eq!(x.grad().item(), 27.0);
    /// ```
    #[track_caller]
    pub fn backward(&self) {
        ok(self.try_backward())
    }
    /// As [`Array::backward`], returning an error on a non-scalar (use [`backward_from`] with a
    /// seed), or on a graph an earlier pass consumed. On an array that carries no gradient it
    /// does nothing (every gradient it could give is zero).
    pub fn try_backward(&self) -> Result<()> {
        let n = self.size();
        if !n.is_one() {
            return Err(Error::Ad(format!(
                "backward() on {}, which has {n} elements, not one: seed it with `kiln::ad::backward_from(&y, &seed)` (a seed of y's size, e.g. ones for the gradient of y.sum()), or reduce it first",
                kiln_core::describe(self.id())
            )));
        }
        backward_from(self, &Array::ones(1))
    }
}

/// Reverse mode from `y` with cotangent `seed` (size 1 or `y`'s size).
///
/// ```
/// use kiln::prelude::*;
/// let mut x = Float64::from_slice(&[1.0, 2.0]);
/// x.enable_grad();
/// let y = &x * 3.0;
/// kiln::ad::backward_from(&y, &Float64::from_slice(&[1.0, 10.0])).unwrap();
/// assert_eq!(x.grad().to_vec(), vec![3.0, 30.0]);
/// ```
pub fn backward_from<T: Float>(y: &Array<T>, seed: &Array<T>) -> Result<()> {
    backward_with(y, seed, false)
}

/// As [`backward_from`]; with `retain_graph` the pass leaves the graph in place, so that
/// another pass may cross it.
///
/// ```
/// use kiln::prelude::*;
/// let mut x = Float64::from(2.0);
/// x.enable_grad();
/// let y = &x * &x;
/// kiln::ad::backward_with(&y, &Float64::from(1.0), true).unwrap();
/// kiln::ad::backward_with(&y, &Float64::from(1.0), false).unwrap();
/// assert_eq!(x.grad().item(), 8.0);
/// assert!(kiln::ad::backward_from(&y, &Float64::from(1.0)).is_err()); // consumed
/// ```
pub fn backward_with<T: Float>(y: &Array<T>, seed: &Array<T>, retain_graph: bool) -> Result<()> {
    let (n, m) = (seed.size(), y.size());
    if !n.is_one() && !n.same_as(m) {
        return Err(Error::Ad(format!(
            "backward_from: the seed has {n} elements but {} has {m}; give one value or one per element",
            kiln_core::describe(y.id())
        )));
    }
    if y.ad == 0 {
        return Ok(());
    }
    let seed = rules::broadcast(seed.detach(), m);
    let how = Backward {
        retain_graph,
        create_graph: false,
    };
    propagate::backward(vec![(y.ad, Grad::of(seed))], how, &[]).map(|_| ())
}

/// Forward mode from `x`: its gradient (set with [`Array::set_grad`]; ones if none) is pushed
/// through everything computed from it, and each result's [`Array::grad`] then holds its
/// tangent (Dr.Jit's `forward_from`).
///
/// ```
/// use kiln::prelude::*;
/// let mut x = Float64::from_slice(&[1.0, 2.0]);
/// x.enable_grad();
/// let y = &x * &x;
/// kiln::ad::forward(&x).unwrap();
/// assert_eq!(y.grad().to_vec(), vec![2.0, 4.0]);
/// ```
pub fn forward<T: Float>(x: &Array<T>) -> Result<()> {
    push_forward(x, None)
}

/// Forward mode from every leaf with a gradient set towards `y` only: `y.grad()` is then the
/// directional derivative along those gradients (Dr.Jit's `forward_to`).
///
/// ```
/// use kiln::prelude::*;
/// let (mut a, mut b) = (Float64::from(2.0), Float64::from(5.0));
/// a.enable_grad();
/// b.enable_grad();
/// let y = &a * &b;
/// a.set_grad(&Float64::from(1.0));
/// b.set_grad(&Float64::from(0.5));
/// kiln::ad::forward_to(&y).unwrap();
/// assert_eq!(y.grad().item(), 5.0 + 0.5 * 2.0);
/// ```
pub fn forward_to<T: Float>(y: &Array<T>) -> Result<()> {
    if y.ad == 0 {
        return Ok(());
    }
    // seeds: the ancestors of y that hold a gradient
    let seeds = seeds_above(y.ad)?;
    let ts = propagate::forward(seeds, Some(&[y.ad]))?;
    if let Some(t) = ts.get(&y.ad) {
        let prev = graph::with(|g| g.node_mut(y.ad).grad.replace(t.detached()));
        drop(prev);
    }
    Ok(())
}

/// The nearest ancestors of `ad` that hold a gradient. An error when the walk meets a node whose
/// edges a backward pass consumed: the tangent would silently miss what flowed through it.
fn seeds_above(ad: AdIndex) -> Result<Vec<(AdIndex, Grad)>> {
    graph::with(|g| {
        let mut seen = std::collections::HashSet::new();
        let mut stack = vec![ad];
        let mut out = Vec::new();
        while let Some(i) = stack.pop() {
            if !seen.insert(i) {
                continue;
            }
            let n = g.node(i);
            if i != ad {
                if let Some(gr) = &n.grad {
                    out.push((i, gr.clone()));
                    continue;
                }
            }
            if n.consumed {
                return Err(Error::Ad(format!(
                    "forward_to: the path to it crosses a {}-element {} array whose graph an earlier `backward` consumed; call `backward_with(.., retain_graph = true)` the first time, or recompute the expression",
                    n.size, n.ty
                )));
            }
            stack.extend(n.parents.iter().copied());
        }
        Ok(out)
    })
}

fn push_forward<T: Float>(x: &Array<T>, to: Option<&[AdIndex]>) -> Result<()> {
    if x.ad == 0 {
        return Err(Error::Ad(format!(
            "forward from {}, which carries no gradient; call `enable_grad()` on it before computing from it",
            kiln_core::describe(x.id())
        )));
    }
    let seed = match graph::with(|g| g.node(x.ad).grad.clone()) {
        Some(g) => g,
        None => Grad::of(Array::<T>::ones(x.size())),
    };
    let ts = propagate::forward(vec![(x.ad, seed)], to)?;
    store_tangents(ts, &[x.ad]);
    Ok(())
}

/// Store the tangents of a forward pass as the gradients of the arrays reached, except the seeds
/// `from`. A node no array refers to (an intermediate dropped already, an op's internal node)
/// gets none: nobody could read it, and it would only hold memory and act as a seed of a later
/// pass.
pub(crate) fn store_tangents(ts: HashMap<AdIndex, Grad>, from: &[AdIndex]) {
    for (ad, t) in ts {
        if !from.contains(&ad) {
            let prev = graph::with(|g| {
                if g.has_handles(ad) {
                    g.node_mut(ad).grad.replace(t.detached())
                } else {
                    None
                }
            });
            drop(prev);
        }
    }
}

/// The AD graph's size now: (nodes, edges, bytes of gradients held). Also in `kiln::stats()`.
pub(crate) fn counters() -> (u64, u64, u64) {
    graph::counters()
}

/// One partial per node (None: no dependence).
pub(crate) type Partials = Vec<Option<Grad>>;

/// Per-lane partials of `y` (traced from `start` on) in its `leaves` and in the nodes `captured`
/// it reaches (arrays a traced closure captured, or what the trace computed from them alone;
/// each of one element or one per lane of `y`): the leaves' by one reverse pass that stops at
/// the captured nodes (what reaches them is dropped: the graph beyond is neither changed nor
/// consumed), each captured node's by a forward pass from it through the nodes traced since
/// `start` that stops at the other captured nodes (each its own parent: a captured array also
/// read through a sum of it gets the two parts, each once).
pub(crate) fn lane_partials_within(
    y: &Grad,
    leaves: &[AdIndex],
    captured: &[AdIndex],
    start: u64,
) -> Result<(Partials, Partials)> {
    let mut of_captured = Vec::with_capacity(captured.len());
    for &c in captured {
        let (size, ty) = graph::with(|g| (g.node(c).size, g.node(c).ty));
        let seed = Grad::own(kiln_core::literal(ty, control::one_bits(ty), size), 0);
        of_captured.push(propagate::forward_within(y.ad(), c, seed, start, captured)?);
    }
    Ok((lane_partials(y, leaves, captured)?, of_captured))
}

/// The per-lane partial derivatives of `y` with respect to each of `leaves` (nodes made by
/// `jax::new_leaf` for this), by one reverse pass seeded with ones: exact where lane `i` of `y`
/// depends only on lane `i` of the leaves (a stencil's value in its taps). `None` where `y` does
/// not depend on a leaf. The pass stops at the nodes `stops` (constants to it) and consumes the
/// rest of `y`'s graph.
fn lane_partials(y: &Grad, leaves: &[AdIndex], stops: &[AdIndex]) -> Result<Vec<Option<Grad>>> {
    if y.ad() == 0 {
        return Ok(vec![None; leaves.len()]);
    }
    let ty = y.ty();
    let one = control::one_bits(ty);
    let seed = Grad::own(
        kiln_core::literal(ty, one, kiln_core::freeze::size_of(y.id())),
        0,
    );
    let how = Backward {
        retain_graph: false,
        create_graph: false,
    };
    propagate::backward_stopping(vec![(y.ad(), seed)], how, &[], stops)?;
    Ok(leaves
        .iter()
        .map(|&a| graph::with(|g| g.node_mut(a).grad.take()))
        .collect())
}
