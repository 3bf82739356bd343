//! Custom operations: a black-box function whose derivatives the user writes (Dr.Jit's
//! `CustomOp`, JAX's `custom_vjp`/`custom_jvp`).
//!
//! The primal runs on detached inputs with recording off, so nothing inside it enters the AD
//! graph; the op gets one node (a hub whose parents are the inputs that carry gradients) plus a
//! handle node per float output. A backward pass parks each output's cotangent at its handle,
//! and the hub — created before the handles, so crossed after them — hands them all to the user's
//! `backward` at once; a forward pass runs the user's `forward` once at the hub and hands each
//! handle its tangent. Like every rule, both are traced lazy array code.

use super::control::{arrays, rebuild_with};
use super::graph::{self, AdIndex, Rule};
use super::value::Grad;
use super::{recording, suspend_grad};
use crate::array::Array;
use crate::freeze::traverse::Traverse;
use kiln_core::{Error, Result, VarId, VarType};
use parking_lot::Mutex;
use std::sync::Arc;

/// A function with hand-written derivatives, applied with [`custom`].
///
/// `Input` and `Output` are any [`Traverse`] values (arrays, tuples, `Vector`s, tensors,
/// `#[derive(Traverse)]` structs). Only the float arrays of `Input` that carry a gradient get
/// one back; everything the op depends on differentiably must be in `Input` (arrays it captures
/// are constants to it).
///
/// ```
/// use kiln::prelude::*;
/// use kiln::ad::CustomOp;
///
/// /// y = x³, with its derivative written by hand.
/// struct Cube;
/// impl CustomOp for Cube {
///     type Input = Float64;
///     type Output = Float64;
///     fn name(&self) -> &'static str { "cube" }
///     fn eval(&self, x: &Float64) -> Float64 { x * x * x }
///     fn backward(&self, x: &Float64, _y: &Float64, dy: &Float64) -> Float64 {
///         dy * x * x * 3.0
///     }
///     fn forward(&self, x: &Float64, _y: &Float64, dx: &Float64) -> Option<Float64> {
///         Some(dx * x * x * 3.0)
///     }
/// }
///
/// let mut x = Float64::from_slice(&[1.0, 2.0]);
/// x.enable_grad();
/// let y = kiln::ad::custom(Cube, &x);
/// y.sum().backward();
/// assert_eq!(x.grad().to_vec(), vec![3.0, 12.0]);
/// ```
pub trait CustomOp: Send + Sync + 'static {
    /// What the op takes.
    type Input: Traverse + Clone + Send + Sync + 'static;
    /// What the op returns.
    type Output: Traverse + Clone + Send + Sync + 'static;
    /// A name for messages and `whos()`.
    fn name(&self) -> &'static str {
        "custom"
    }
    /// The primal: computed on detached inputs, with derivatives not recorded.
    fn eval(&self, input: &Self::Input) -> Self::Output;
    /// Reverse mode: the gradient with respect to the input (same structure; size 1 means "this
    /// value in every lane") given the output's cotangent `grad_output` (zeros for outputs no
    /// cotangent reached, and for integer outputs). Entries for inputs that carry no gradient
    /// are ignored (return zeros there).
    fn backward(
        &self,
        input: &Self::Input,
        output: &Self::Output,
        grad_output: &Self::Output,
    ) -> Self::Input;
    /// Whether output lane `i` depends only on lane `i` of each input (or on size-1 inputs).
    /// Declaring it lets the op run inside a differentiated branch or loop body, which kiln
    /// differentiates lane by lane (with forward mode: it then needs [`CustomOp::forward`]).
    fn lane_local(&self) -> bool {
        false
    }
    /// Forward mode: the output's tangent given the input's (`grad_input`, zeros where an input
    /// has no tangent). `None`, the default, makes forward mode through the op an error.
    fn forward(
        &self,
        input: &Self::Input,
        output: &Self::Output,
        grad_input: &Self::Input,
    ) -> Option<Self::Output> {
        let _ = (input, output, grad_input);
        None
    }
}

/// Apply custom op `op` to `input`: its [`CustomOp::eval`], with one node in the AD graph when
/// an input carries a gradient (and gradients are recorded). See [`CustomOp`] for an example;
/// `examples/custom_op.rs` has a stable log-sum-exp.
pub fn custom<C: CustomOp>(op: C, input: &C::Input) -> C::Output {
    let (ids, ads) = arrays(input);
    let wrt: Vec<usize> = (0..ids.len())
        .filter(|&k| ads[k] != 0 && differentiable(kiln_core::var_type(ids[k])))
        .collect();
    let x = rebuild_with(input, &ids, &vec![0; ids.len()]);
    let y = suspend_grad(|| op.eval(&x));
    let (yids, yads) = arrays(&y);
    if wrt.is_empty() || !recording() {
        return y;
    }
    let outs = yids.len();
    let shared = Arc::new(Shared {
        name: op.name(),
        op,
        x,
        y: rebuild_with(&y, &yids, &vec![0; outs]),
        x_ids: ids.clone(),
        wrt: wrt.clone(),
        parents: wrt.iter().map(|&k| ads[k]).collect(),
        cts: Mutex::new((0..outs).map(|_| None).collect()),
        tangents: Mutex::new((0..outs).map(|_| None).collect()),
    });
    drop(yads);
    let hub = graph::new_node(
        VarType::F64,
        1,
        wrt.iter().map(|&k| ads[k]).collect(),
        Some(Arc::new(Hub(shared.clone()))),
    );
    let handles: Vec<AdIndex> = yids
        .iter()
        .enumerate()
        .map(|(j, &o)| {
            let ty = kiln_core::var_type(o);
            if !differentiable(ty) {
                return 0;
            }
            let rule = Handle {
                shared: shared.clone(),
                j,
            };
            graph::new_node(ty, kiln_core::size(o), vec![hub], Some(Arc::new(rule)))
        })
        .collect();
    graph::dec_ref(hub);
    let out = rebuild_with(&y, &yids, &handles);
    handles.iter().for_each(|&h| graph::dec_ref(h));
    out
}

fn differentiable(ty: VarType) -> bool {
    matches!(ty, VarType::F32 | VarType::F64)
}

/// What the hub and the handles of one application share.
struct Shared<C: CustomOp> {
    name: &'static str,
    op: C,
    x: C::Input,
    y: C::Output,
    x_ids: Vec<VarId>,
    /// Input positions that are the hub's parents, in order.
    wrt: Vec<usize>,
    /// The hub's parents (not counted: the hub's edges keep them alive while its rule lives).
    parents: Vec<AdIndex>,
    /// Cotangents parked by the handles during a backward pass, by output position.
    cts: Mutex<Vec<Option<Grad>>>,
    /// Tangents computed by the hub during a forward pass, by output position.
    tangents: Mutex<Vec<Option<Grad>>>,
}

/// The value that stands for "the handles parked their cotangents" on the hub.
fn token() -> Grad {
    Grad::of(Array::<f64>::scalar(0.0))
}

/// A new handle to array `id` with AD node `ad` (new references on both).
fn grad_with(id: VarId, ad: AdIndex) -> Grad {
    kiln_core::inc_ref(id);
    graph::inc_ref(ad);
    match kiln_core::var_type(id) {
        VarType::F32 => Grad::of(Array::<f32>::wrap(id).with_ad(ad)),
        _ => Grad::of(Array::<f64>::wrap(id).with_ad(ad)),
    }
}

/// Array `g` (node `ad`) as `n` lanes (a size-1 value widened), or an explanation naming the op.
fn fitted(name: &str, what: &str, g: VarId, ad: AdIndex, ty: VarType, n: usize) -> Result<Grad> {
    let (gt, gn) = (kiln_core::var_type(g), kiln_core::size(g));
    if gt != ty || (gn != 1 && gn != n) {
        return Err(Error::Ad(format!(
            "custom op `{name}`: its {what} returned a {gn}-element {gt} array for a {n}-element {ty} value; return one of the same type, with one element or one per element"
        )));
    }
    let v = grad_with(g, ad);
    Ok(match ty {
        VarType::F32 => Grad::of(super::rules::broadcast(v.array::<f32>(), n.into())),
        _ => Grad::of(super::rules::broadcast(v.array::<f64>(), n.into())),
    })
}

/// Zeros of the type and size of `id` (a new reference).
fn zeros_like(id: VarId) -> VarId {
    kiln_core::literal(kiln_core::var_type(id), 0, kiln_core::freeze::size_of(id))
}

struct Hub<C: CustomOp>(Arc<Shared<C>>);

impl<C: CustomOp> Rule for Hub<C> {
    fn name(&self) -> &'static str {
        self.0.name
    }
    fn lane_local(&self) -> bool {
        self.0.op.lane_local()
    }
    fn backward(&self, _token: &Grad) -> Vec<Option<Grad>> {
        let s = &self.0;
        let parked: Vec<Option<Grad>> = std::mem::take(&mut *s.cts.lock());
        let (yids, _) = arrays(&s.y);
        let mut dy = Vec::new();
        for (j, &o) in yids.iter().enumerate() {
            dy.push(match parked.get(j).and_then(|g| g.as_ref()) {
                Some(g) => {
                    kiln_core::inc_ref(g.id());
                    g.id()
                }
                None => zeros_like(o),
            });
        }
        let grad_y = rebuild_with(&s.y, &dy, &vec![0; dy.len()]);
        dy.iter().for_each(|&i| kiln_core::dec_ref(i));
        *s.cts.lock() = (0..yids.len()).map(|_| None).collect();
        let gx = s.op.backward(&s.x, &s.y, &grad_y);
        let (gids, gads) = arrays(&gx);
        if gids.len() != s.x_ids.len() {
            panic!(
                "kiln: custom op `{}`: backward returned {} arrays but the input has {}; return the input's structure",
                s.name,
                gids.len(),
                s.x_ids.len()
            );
        }
        s.wrt
            .iter()
            .map(|&k| {
                let x = s.x_ids[k];
                let g = fitted(
                    s.name,
                    "backward",
                    gids[k],
                    gads[k],
                    kiln_core::var_type(x),
                    kiln_core::size(x),
                );
                let g = g.unwrap_or_else(|e| panic!("kiln: {e}"));
                Some(super::control::guard_second_order(
                    g,
                    &s.parents,
                    "a custom op",
                ))
            })
            .collect()
    }
    fn forward(&self, tangents: &[Option<Grad>]) -> Option<Grad> {
        // propagate calls `try_forward`; this is for callers that cannot report an error
        self.try_forward(tangents).ok().flatten()
    }
    fn try_forward(&self, tangents: &[Option<Grad>]) -> Result<Option<Grad>> {
        let s = &self.0;
        let mut dx: Vec<VarId> = s.x_ids.iter().map(|&x| zeros_like(x)).collect();
        for (t, &k) in tangents.iter().zip(&s.wrt) {
            if let Some(t) = t {
                kiln_core::dec_ref(dx[k]);
                kiln_core::inc_ref(t.id());
                dx[k] = t.id();
            }
        }
        let grad_x = rebuild_with(&s.x, &dx, &vec![0; dx.len()]);
        dx.iter().for_each(|&i| kiln_core::dec_ref(i));
        let Some(dy) = s.op.forward(&s.x, &s.y, &grad_x) else {
            return Err(Error::Ad(format!(
                "forward mode reached custom op `{}`, which defines no `forward`; implement `CustomOp::forward` for it, or use reverse mode",
                s.name
            )));
        };
        let (dids, _) = arrays(&dy);
        let (yids, _) = arrays(&s.y);
        if dids.len() != yids.len() {
            return Err(Error::Ad(format!(
                "custom op `{}`: forward returned {} arrays but the output has {}; return the output's structure",
                s.name,
                dids.len(),
                yids.len()
            )));
        }
        let mut out = Vec::new();
        for (&d, &o) in dids.iter().zip(&yids) {
            let ty = kiln_core::var_type(o);
            out.push(if differentiable(ty) {
                Some(fitted(s.name, "forward", d, 0, ty, kiln_core::size(o))?)
            } else {
                None
            });
        }
        *s.tangents.lock() = out;
        Ok(Some(token()))
    }
}

/// One float output of a custom op.
struct Handle<C: CustomOp> {
    shared: Arc<Shared<C>>,
    j: usize,
}

impl<C: CustomOp> Rule for Handle<C> {
    fn name(&self) -> &'static str {
        self.shared.name
    }
    fn lane_local(&self) -> bool {
        self.shared.op.lane_local()
    }
    fn backward(&self, ct: &Grad) -> Vec<Option<Grad>> {
        let mut cts = self.shared.cts.lock();
        if cts.len() <= self.j {
            cts.resize_with(self.j + 1, || None);
        }
        cts[self.j] = Some(ct.clone());
        vec![Some(token())]
    }
    fn forward(&self, _token: &[Option<Grad>]) -> Option<Grad> {
        let mut ts = self.shared.tangents.lock();
        ts.get_mut(self.j).and_then(|t| t.take())
    }
}
