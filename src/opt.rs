//! Optimizers: [`Sgd`] (with momentum) and [`Adam`] over any [`Traverse`] parameter set.
//!
//! This module owns the update rules and the optimizers' state (momentum buffers, Adam's
//! moments and bias-correction powers). The state is kiln arrays with one entry per array of the
//! parameter set, and an optimizer is itself a [`Traverse`] value: pass it to a frozen function
//! as a `&mut` argument and its state is read and written by the replays like the parameters.
//!
//! A step reads the gradients, evaluates them, then writes the new moments and parameters into
//! their own buffers with `assign` (update-in-place: no new buffer per step when nothing else
//! holds them), without recording derivatives. Inside a frozen function's recording, where the
//! engine does not write a call's inputs in place, it instead evaluates every new value in one
//! go (fewer kernels for each replay to launch); both ways compute the same values bit for bit. Parameters that carried gradients come out as
//! fresh leaves with no gradient, so each iteration starts a new AD graph and the old one is
//! freed: the graph does not grow across iterations.

use crate::ad::jax::{self, Item};
use crate::ad::{AdIndex, Grad};
use crate::array::{ok, Array};
use crate::freeze::traverse::{Assign, Traversal, Traverse};
use crate::types::Float;
use kiln_core::{Error, Result, VarType};

/// One state array per parameter position (`None` for an integer or mask parameter).
#[derive(Clone)]
enum Slot {
    None,
    F32(Array<f32>),
    F64(Array<f64>),
}

impl Slot {
    /// Zeros like the parameter at `it`, in memory (so that the first and later calls of a frozen
    /// step see the same kind of input).
    fn zeros_like(it: &Item) -> Slot {
        let n = kiln_core::freeze::size_of(it.id);
        match it.ty {
            VarType::F32 => Slot::F32(crate::make_opaque(&Array::<f32>::zeros(n))),
            VarType::F64 => Slot::F64(crate::make_opaque(&Array::<f64>::zeros(n))),
            _ => Slot::None,
        }
    }
}

impl Traverse for Slot {
    fn traverse(&self, t: &mut Traversal) {
        match self {
            Slot::None => t.structure("Slot::None", 0),
            Slot::F32(a) => {
                t.structure("Slot::F32", 1);
                a.traverse(t)
            }
            Slot::F64(a) => {
                t.structure("Slot::F64", 1);
                a.traverse(t)
            }
        }
    }
    fn traverse_mut(&mut self, a: &mut Assign) {
        match self {
            Slot::None => {}
            Slot::F32(x) => x.traverse_mut(a),
            Slot::F64(x) => x.traverse_mut(a),
        }
    }
}

/// A parameter set taken apart for an update: each array as the only handle to its buffer.
struct Taken {
    items: Vec<Item>,
    /// Per position: the array (no AD node), taken by the update that replaces it.
    arrays: Vec<Option<Grad>>,
    /// Per position: the gradient (evaluated), for float positions.
    grads: Vec<Option<Grad>>,
    /// Per position: whether it carried a gradient (it gets a fresh leaf back).
    had_grad: Vec<bool>,
}

/// Take the arrays out of `params` and read their gradients (from `grads` if given, else from
/// the arrays' nodes, which are emptied). `params` holds empty placeholders until `put_back`.
fn take<P: Traverse + ?Sized>(params: &mut P, grads: Option<&P>) -> Result<Taken> {
    let items = jax::items(params);
    let given: Option<Vec<Item>> = grads.map(|g| jax::items(g));
    if let Some(g) = grads {
        jax::check_like("opt::step_with", "gradients", &items, g)?;
    }
    let mut gs: Vec<Option<Grad>> = Vec::with_capacity(items.len());
    for (i, it) in items.iter().enumerate() {
        if !it.ty.is_float() {
            gs.push(None);
            continue;
        }
        gs.push(Some(match &given {
            Some(g) => jax::widen(Grad::share(g[i].id, 0), it.id),
            None => jax::gradient_of(it.ad, it.id, true),
        }));
    }
    // the gradients may be expressions of the parameters: evaluate them before any parameter is
    // overwritten in place (and so that nothing but the parameter set holds their buffers)
    if in_place() {
        let ids: Vec<_> = gs.iter().flatten().map(|g| g.id()).collect();
        crate::eval_ids(&ids)?;
    }
    let arrays = items.iter().map(|it| Some(Grad::share(it.id, 0))).collect();
    let had_grad = items.iter().map(|it| it.ad != 0).collect();
    params.traverse_mut(&mut Assign::placeholders());
    Ok(Taken {
        items,
        arrays,
        grads: gs,
        had_grad,
    })
}

/// Put the updated arrays back into `params`; positions that carried gradients get fresh leaves.
fn put_back<P: Traverse + ?Sized>(params: &mut P, t: Taken) {
    let parts: Vec<Grad> = t
        .arrays
        .iter()
        .zip(&t.had_grad)
        .zip(&t.items)
        .map(|((a, &on), it)| {
            let a = a.as_ref().expect("kiln: an optimizer lost a parameter");
            let ad: AdIndex = if on && it.ty.is_float() {
                jax::new_leaf(a.id())
            } else {
                0
            };
            kiln_core::inc_ref(a.id());
            Grad::own(a.id(), ad)
        })
        .collect();
    drop(t);
    jax::assign_parts(params, &parts);
}

/// Whether updates write into the existing buffers one by one (outside a recording), or are
/// evaluated together at the end of the step (inside one: see the module's notes).
fn in_place() -> bool {
    !kiln_core::freeze::in_recording()
}

/// `dst ← v`: into `dst`'s buffer when updating in place, else rebound (evaluated by `finish`).
fn put<T: Float>(dst: &mut Array<T>, v: Array<T>) {
    if in_place() {
        dst.assign(v);
    } else {
        *dst = v;
    }
}

/// Evaluate the new values together when they were rebound rather than assigned.
fn finish(ids: Vec<kiln_core::VarId>) -> Result<()> {
    if in_place() {
        Ok(())
    } else {
        crate::eval_ids(&ids)
    }
}

/// A typed handle to the array held by `g` (sharing it).
fn typed<T: Float>(g: &Grad) -> Array<T> {
    g.array::<T>()
}

/// The array held by `g` as a typed handle, the reference moved (so that a sole owner stays one
/// and `assign` can write in place).
fn owned<T: Float>(g: Grad) -> Array<T> {
    let a = g.array::<T>();
    drop(g);
    a
}

fn lit<T: Float>(v: f64) -> Array<T> {
    Array::scalar(T::from_f64(v))
}

/// Error when the state was made for a parameter set of another structure, or must be made
/// inside a recording (which cannot change a `&mut` argument's structure).
fn check_state(name: &str, state_len: usize, items: &[Item]) -> Result<bool> {
    if state_len == items.len() {
        return Ok(false);
    }
    if state_len != 0 {
        return Err(Error::Invalid(format!(
            "{name}: the optimizer's state was made for {state_len} arrays but the parameters hold {}; use one optimizer per parameter set",
            items.len()
        )));
    }
    if kiln_core::freeze::in_recording() {
        return Err(Error::Invalid(format!(
            "{name}: the optimizer's state is made on its first step, which is inside a frozen function here; call `opt.init(&params)` before the first frozen call (a frozen function may not change the structure of a `&mut` argument)"
        )));
    }
    Ok(true)
}

/// Stochastic gradient descent with momentum (PyTorch's form: `b ← μ·b + g`, `p ← p − lr·b`;
/// with `μ = 0` plain `p ← p − lr·g` and no state).
///
/// The hyperparameters are part of a frozen function's key when the optimizer is passed as a
/// `&mut` argument: a new value records anew.
///
/// ```
/// use kiln::prelude::*;
/// let mut p = Float64::from_slice(&[1.0, -2.0]);
/// p.enable_grad();
/// let mut opt = kiln::opt::Sgd::new(0.1).momentum(0.9);
/// for _ in 0..200 {
///     (&p * &p).sum().backward();      // minimize Σ p²
///     opt.step(&mut p);
/// }
/// assert!(p.to_vec().iter().all(|v| v.abs() < 1e-3));
/// assert!(p.grad_enabled());          // a fresh leaf, ready for the next step
/// ```
#[derive(Clone)]
pub struct Sgd {
    /// Learning rate.
    pub lr: f64,
    /// Momentum factor `μ` (0: none).
    pub momentum: f64,
    buf: Vec<Slot>,
}

impl Sgd {
    /// Plain SGD with learning rate `lr`.
    pub fn new(lr: f64) -> Sgd {
        Sgd {
            lr,
            momentum: 0.0,
            buf: Vec::new(),
        }
    }
    /// With momentum `m`.
    pub fn momentum(mut self, m: f64) -> Sgd {
        self.momentum = m;
        self
    }
    /// Make the momentum buffers for `params` now (needed before a frozen step uses the
    /// optimizer; otherwise made on the first step).
    pub fn init<P: Traverse + ?Sized>(mut self, params: &P) -> Sgd {
        if self.momentum != 0.0 {
            self.buf = jax::items(params).iter().map(Slot::zeros_like).collect();
        }
        self
    }
    /// One step from the gradients the parameters hold (`p.grad()`, consumed).
    #[track_caller]
    pub fn step<P: Traverse + ?Sized>(&mut self, params: &mut P) {
        ok(self.try_step(params, None))
    }
    /// One step from the gradients `grads` (shaped like `params`, e.g. from `kiln::grad`).
    #[track_caller]
    pub fn step_with<P: Traverse + ?Sized>(&mut self, params: &mut P, grads: &P) {
        ok(self.try_step(params, Some(grads)))
    }
    /// As [`Sgd::step`] / [`Sgd::step_with`], returning errors (a gradient set of another
    /// structure, state made for other parameters, an evaluation error).
    pub fn try_step<P: Traverse + ?Sized>(
        &mut self,
        params: &mut P,
        grads: Option<&P>,
    ) -> Result<()> {
        let items = jax::items(params);
        if self.momentum != 0.0 && check_state("Sgd::step", self.buf.len(), &items)? {
            self.buf = items.iter().map(Slot::zeros_like).collect();
        }
        crate::ad::suspend_grad(|| {
            let mut t = take(params, grads)?;
            let (lr, mu) = (self.lr, self.momentum);
            for i in 0..t.items.len() {
                let Some(g) = t.grads[i].take() else { continue };
                let p = t.arrays[i]
                    .take()
                    .expect("kiln: an optimizer lost a parameter");
                let b = self.buf.get_mut(i);
                t.arrays[i] = Some(match t.items[i].ty {
                    VarType::F32 => sgd_one::<f32>(p, g, b.map(slot32), lr, mu),
                    _ => sgd_one::<f64>(p, g, b.map(slot64), lr, mu),
                });
            }
            let mut ids: Vec<_> = t.arrays.iter().flatten().map(|a| a.id()).collect();
            ids.extend(self.buf.iter().filter_map(slot_id));
            finish(ids)?;
            put_back(params, t);
            Ok(())
        })
    }
}

fn slot_id(s: &Slot) -> Option<kiln_core::VarId> {
    match s {
        Slot::None => None,
        Slot::F32(a) => Some(a.id()),
        Slot::F64(a) => Some(a.id()),
    }
}

fn slot32(s: &mut Slot) -> &mut Array<f32> {
    match s {
        Slot::F32(a) => a,
        _ => panic!("kiln: optimizer state of the wrong type (a parameter changed type)"),
    }
}
fn slot64(s: &mut Slot) -> &mut Array<f64> {
    match s {
        Slot::F64(a) => a,
        _ => panic!("kiln: optimizer state of the wrong type (a parameter changed type)"),
    }
}

/// One SGD update of the parameter held by `p` (moved into the result).
fn sgd_one<T: Float>(p: Grad, g: Grad, buf: Option<&mut Array<T>>, lr: f64, mu: f64) -> Grad {
    let g = owned::<T>(g);
    let dir = match buf {
        Some(b) if mu != 0.0 => {
            let nb = &*b * lit::<T>(mu) + &g;
            drop(g);
            put(b, nb);
            b.clone()
        }
        _ => g,
    };
    let mut p = owned::<T>(p);
    let np = &p - dir * lit::<T>(lr);
    put(&mut p, np);
    Grad::of(p)
}

/// Adam (Kingma & Ba): moments `m ← β₁m + (1−β₁)g`, `v ← β₂v + (1−β₂)g²`, and
/// `p ← p − lr · m̂ / (√v̂ + ε)` with the bias-corrected `m̂ = m/(1−β₁ᵗ)`, `v̂ = v/(1−β₂ᵗ)`.
///
/// Its state (both moments per parameter array, and `β₁ᵗ`, `β₂ᵗ` as device values) is made on
/// the first step, or by [`Adam::init`], which a frozen step needs: pass the optimizer to the
/// frozen function as a `&mut` argument.
///
/// ```
/// use kiln::prelude::*;
/// let mut p = (Float32::from_slice(&[3.0, -1.0]), Float64::from(2.0));
/// kiln::ad::enable_grad(&mut p).unwrap();
/// let mut opt = kiln::opt::Adam::new(0.05);
/// for _ in 0..400 {
///     ((&p.0 * &p.0).sum().cast::<f64>() + (&p.1 - 1.0) * (&p.1 - 1.0)).backward();
///     opt.step(&mut p);
/// }
/// assert!(p.0.to_vec().iter().all(|v| v.abs() < 0.05));
/// assert!((p.1.item() - 1.0).abs() < 0.05);
/// ```
#[derive(Clone)]
pub struct Adam {
    /// Learning rate.
    pub lr: f64,
    /// Decay of the first moment.
    pub beta1: f64,
    /// Decay of the second moment.
    pub beta2: f64,
    /// Added to `√v̂` (keeps the step finite).
    pub eps: f64,
    m: Vec<Slot>,
    v: Vec<Slot>,
    /// `β₁ᵗ` and `β₂ᵗ` after `t` steps (device values: a frozen step updates them).
    b1t: Array<f64>,
    b2t: Array<f64>,
}

impl Adam {
    /// Adam with learning rate `lr` and the usual `β₁ = 0.9`, `β₂ = 0.999`, `ε = 1e-8`.
    pub fn new(lr: f64) -> Adam {
        Adam {
            lr,
            beta1: 0.9,
            beta2: 0.999,
            eps: 1e-8,
            m: Vec::new(),
            v: Vec::new(),
            b1t: crate::make_opaque(&Array::scalar(1.0)),
            b2t: crate::make_opaque(&Array::scalar(1.0)),
        }
    }
    /// With decay rates `b1`, `b2`.
    pub fn betas(mut self, b1: f64, b2: f64) -> Adam {
        self.beta1 = b1;
        self.beta2 = b2;
        self
    }
    /// With `ε = e`.
    pub fn eps(mut self, e: f64) -> Adam {
        self.eps = e;
        self
    }
    /// Make the moments for `params` now (needed before a frozen step uses the optimizer;
    /// otherwise made on the first step). Restarts the step count.
    pub fn init<P: Traverse + ?Sized>(mut self, params: &P) -> Adam {
        self.reset(params);
        self
    }
    fn reset<P: Traverse + ?Sized>(&mut self, params: &P) {
        let items = jax::items(params);
        self.m = items.iter().map(Slot::zeros_like).collect();
        self.v = items.iter().map(Slot::zeros_like).collect();
        self.b1t = crate::make_opaque(&Array::scalar(1.0));
        self.b2t = crate::make_opaque(&Array::scalar(1.0));
    }
    /// One step from the gradients the parameters hold (`p.grad()`, consumed).
    #[track_caller]
    pub fn step<P: Traverse + ?Sized>(&mut self, params: &mut P) {
        ok(self.try_step(params, None))
    }
    /// One step from the gradients `grads` (shaped like `params`, e.g. from `kiln::grad`).
    #[track_caller]
    pub fn step_with<P: Traverse + ?Sized>(&mut self, params: &mut P, grads: &P) {
        ok(self.try_step(params, Some(grads)))
    }
    /// As [`Adam::step`] / [`Adam::step_with`], returning errors (a gradient set of another
    /// structure, state made for other parameters, an evaluation error).
    pub fn try_step<P: Traverse + ?Sized>(
        &mut self,
        params: &mut P,
        grads: Option<&P>,
    ) -> Result<()> {
        let items = jax::items(params);
        if check_state("Adam::step", self.m.len(), &items)? {
            self.reset(params);
        }
        crate::ad::suspend_grad(|| {
            let mut t = take(params, grads)?;
            // the moments first (they read the gradients), then the parameters
            for i in 0..t.items.len() {
                let Some(g) = t.grads[i].take() else { continue };
                match t.items[i].ty {
                    VarType::F32 => moments::<f32>(
                        &g,
                        slot32(&mut self.m[i]),
                        slot32(&mut self.v[i]),
                        self.beta1,
                        self.beta2,
                    ),
                    _ => moments::<f64>(
                        &g,
                        slot64(&mut self.m[i]),
                        slot64(&mut self.v[i]),
                        self.beta1,
                        self.beta2,
                    ),
                }
            }
            let nb1 = &self.b1t * self.beta1;
            put(&mut self.b1t, nb1);
            let nb2 = &self.b2t * self.beta2;
            put(&mut self.b2t, nb2);
            let c1 = Array::<f64>::scalar(1.0) - &self.b1t;
            let c2 = Array::<f64>::scalar(1.0) - &self.b2t;
            for i in 0..t.items.len() {
                let (lr, eps) = (self.lr, self.eps);
                let p = t.arrays[i]
                    .take()
                    .expect("kiln: an optimizer lost a parameter");
                t.arrays[i] = Some(match (&self.m[i], &self.v[i]) {
                    (Slot::F32(m), Slot::F32(v)) => adam_one::<f32>(p, m, v, &c1, &c2, lr, eps),
                    (Slot::F64(m), Slot::F64(v)) => adam_one::<f64>(p, m, v, &c1, &c2, lr, eps),
                    _ => p,
                });
            }
            let mut ids: Vec<_> = t.arrays.iter().flatten().map(|a| a.id()).collect();
            ids.extend(self.m.iter().chain(&self.v).filter_map(slot_id));
            ids.extend([self.b1t.id(), self.b2t.id()]);
            finish(ids)?;
            put_back(params, t);
            Ok(())
        })
    }
}

fn moments<T: Float>(g: &Grad, m: &mut Array<T>, v: &mut Array<T>, b1: f64, b2: f64) {
    let g = typed::<T>(g);
    let nm = &*m * lit::<T>(b1) + &g * lit::<T>(1.0 - b1);
    put(m, nm);
    let nv = &*v * lit::<T>(b2) + &g * &g * lit::<T>(1.0 - b2);
    put(v, nv);
}

fn adam_one<T: Float>(
    p: Grad,
    m: &Array<T>,
    v: &Array<T>,
    c1: &Array<f64>,
    c2: &Array<f64>,
    lr: f64,
    eps: f64,
) -> Grad {
    let mut p = owned::<T>(p);
    let mhat = m / c1.cast::<T>();
    let vhat = v / c2.cast::<T>();
    let np = &p - mhat * lit::<T>(lr) / (vhat.sqrt() + lit::<T>(eps));
    put(&mut p, np);
    Grad::of(p)
}

impl Traverse for Sgd {
    fn traverse(&self, t: &mut Traversal) {
        t.structure("Sgd", 3);
        t.scalar("f64", self.lr.to_bits());
        t.scalar("f64", self.momentum.to_bits());
        t.field("buf", |t| self.buf.traverse(t));
    }
    fn traverse_mut(&mut self, a: &mut Assign) {
        self.buf.traverse_mut(a);
    }
}

impl Traverse for Adam {
    fn traverse(&self, t: &mut Traversal) {
        t.structure("Adam", 8);
        for x in [self.lr, self.beta1, self.beta2, self.eps] {
            t.scalar("f64", x.to_bits());
        }
        t.field("m", |t| self.m.traverse(t));
        t.field("v", |t| self.v.traverse(t));
        t.field("b1t", |t| self.b1t.traverse(t));
        t.field("b2t", |t| self.b2t.traverse(t));
    }
    fn traverse_mut(&mut self, a: &mut Assign) {
        self.m.traverse_mut(a);
        self.v.traverse_mut(a);
        self.b1t.traverse_mut(a);
        self.b2t.traverse_mut(a);
    }
}
