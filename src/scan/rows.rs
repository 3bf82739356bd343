//! Rows of a sequence and stacked outputs, for the scan that runs differentiated step by step.
//!
//! Row `t` of a tensor is read at an offset held in an evaluated one-element array, not written
//! into the kernel as a constant: every step then runs the same compiled kernels (a tensor view
//! at a constant offset compiles one kernel per step). The `y`s are stacked by scattering each
//! into its rows of one buffer, one pass over the data (a concatenation of `T` parts costs `T`
//! selects per element). Stacked values that carry gradients get one node ([`Stacked`]) whose
//! rules are themselves ordinary, differentiable array code: a row of the cotangent per part in
//! reverse mode, the tangents stacked in forward mode.

use crate::ad::graph::{self, Rule};
use crate::ad::rules::broadcast;
use crate::ad::Grad;
use crate::array::{Array, Int64};
use crate::memory::{gather, scatter};
use crate::tensor::Tensor;
use crate::types::Float;
use kiln_core::{Scalar, VarType};
use std::sync::Arc;

/// Positions `t·len .. (t+1)·len`, with `t·len` as kernel data.
fn row_index(len: usize, t: usize) -> Int64 {
    Int64::arange(len) + &Int64::from_slice(&[(t * len) as i64])
}

/// Row `t` of `x` along its leading axis. Without a gradient: a gather at a data offset (one
/// kernel for every row); with one, a view (differentiable to any order).
pub(crate) fn row<T: Scalar>(x: &Tensor<T>, t: usize) -> Tensor<T> {
    if crate::ad::rules::tracks(x.array()) {
        return x.index_axis(0, t);
    }
    let shape = x.shape()[1..].to_vec();
    let len: usize = shape.iter().product();
    Tensor::from_array(gather(&x.array().detach(), &row_index(len, t)), &shape)
}

/// The values of `parts` (`len` elements each) one after the other. Evaluated parts outside a
/// frozen function's recording and a symbolic trace are copied into one new buffer (one pass; a
/// scatter per part goes lane by lane); otherwise each part is scattered into its rows, which a
/// frozen function records and replays.
fn joined<T: Scalar>(parts: &[Tensor<T>], len: usize) -> Array<T> {
    let direct = !kiln_core::freeze::record::active()
        && !kiln_core::control::symbolic()
        && parts
            .iter()
            .all(|p| kiln_core::is_evaluated(p.array().id()));
    if direct {
        let mut bytes = Vec::with_capacity(parts.len() * len * T::TYPE.size_bytes());
        let copied = parts.iter().try_for_each(|p| {
            bytes.extend_from_slice(&kiln_core::read_bytes(p.array().id())?);
            Ok::<(), kiln_core::Error>(())
        });
        if let Ok(id) = copied.and_then(|()| kiln_core::from_bytes(T::TYPE, &bytes)) {
            return Array::from_id(id);
        }
    }
    let mut out = Array::<T>::full(T::from_bits64(0), parts.len() * len);
    for (t, p) in parts.iter().enumerate() {
        scatter(&mut out, p.array().detach(), &row_index(len, t));
    }
    out
}

/// `parts` (one shape) stacked along a new leading axis.
pub(crate) fn stack<T: Scalar>(parts: Vec<Tensor<T>>) -> Tensor<T> {
    let row_shape = parts[0].shape().to_vec();
    let len: usize = row_shape.iter().product();
    let mut shape = vec![parts.len()];
    shape.extend_from_slice(&row_shape);
    let out = joined(&parts, len);
    let tracked: Vec<(usize, u32)> = parts
        .iter()
        .enumerate()
        .filter(|(_, p)| crate::ad::rules::tracks(p.array()))
        .map(|(t, p)| (t, p.array().ad))
        .collect();
    if tracked.is_empty() || !matches!(T::TYPE, VarType::F32 | VarType::F64) {
        return Tensor::from_array(out, &shape);
    }
    let rule = Stacked {
        ty: T::TYPE,
        len,
        rows: parts.len(),
        at: tracked.iter().map(|p| p.0).collect(),
    };
    let parents: Vec<u32> = tracked.iter().map(|p| p.1).collect();
    let ad = graph::new_node_with(
        T::TYPE,
        parts.len() * len,
        &parents,
        Some(Arc::new(rule)),
        out.id(),
    );
    Tensor::from_array(out.with_ad(ad), &shape)
}

/// The node of a stack: its parents are the parts that carry gradients, at rows `at`.
struct Stacked {
    ty: VarType,
    len: usize,
    rows: usize,
    at: Vec<usize>,
}

impl Stacked {
    fn rows_of<T: Float>(&self, ct: &Grad) -> Vec<Option<Grad>> {
        let ct = broadcast(ct.array::<T>(), (self.rows * self.len).into());
        self.at
            .iter()
            .map(|&t| Some(Grad::of(gather(&ct, &row_index(self.len, t)))))
            .collect()
    }
    fn stacked<T: Float>(&self, ts: &[Option<Grad>]) -> Option<Grad> {
        if ts.iter().all(Option::is_none) {
            return None;
        }
        let mut out = Array::<T>::full(T::from_bits64(0), self.rows * self.len);
        for (&t, g) in self.at.iter().zip(ts) {
            if let Some(g) = g {
                let v = broadcast(g.array::<T>(), self.len.into());
                scatter(&mut out, &v, &row_index(self.len, t));
            }
        }
        Some(Grad::of(out))
    }
}

impl Rule for Stacked {
    fn name(&self) -> &'static str {
        "scan stack"
    }
    fn backward(&self, ct: &Grad) -> Vec<Option<Grad>> {
        match self.ty {
            VarType::F32 => self.rows_of::<f32>(ct),
            _ => self.rows_of::<f64>(ct),
        }
    }
    fn forward(&self, tangents: &[Option<Grad>]) -> Option<Grad> {
        match self.ty {
            VarType::F32 => self.stacked::<f32>(tangents),
            _ => self.stacked::<f64>(tangents),
        }
    }
}

/// The rows of a tensor that carries a gradient, read one per step (a differentiated scan's
/// sequence, or a product computed for every step at once): one node per row, all children of
/// one gate node over the whole tensor. A row's adjoint, a view of the full tensor that is zero
/// outside the row, would make the backward pass add one full-size array per step (quadratic in
/// the steps); instead each row's node keeps its cotangent for the gate, which stacks them once
/// (its own rule ordinary array code, so higher orders go through it).
pub(crate) struct Unstack<T: Float> {
    /// The values (no gradient) and the gate's node.
    values: Tensor<T>,
    gate: crate::ad::AdIndex,
    slots: Arc<Slots>,
}

/// The cotangents the rows kept in the current backward pass, by row.
type Slots = parking_lot::Mutex<Vec<Option<(u64, Grad)>>>;

impl<T: Float> Unstack<T> {
    pub(crate) fn new(src: &Tensor<T>) -> Unstack<T> {
        let rows = src.shape()[0];
        let row_shape = src.shape()[1..].to_vec();
        let len: usize = row_shape.iter().product();
        let slots: Arc<Slots> = Arc::new(parking_lot::Mutex::new(vec![None; rows]));
        let rule = Gate::<T> {
            row_shape,
            slots: slots.clone(),
            _t: std::marker::PhantomData,
        };
        let values = Tensor::from_array(src.array().detach(), src.shape());
        let gate = graph::new_node_with(
            T::TYPE,
            rows * len,
            &[src.array().ad],
            Some(Arc::new(rule)),
            values.array().id(),
        );
        Unstack {
            values,
            gate,
            slots,
        }
    }
    /// Row `t`, with its node.
    pub(crate) fn row(&self, t: usize) -> Tensor<T> {
        let plain = row(&self.values, t);
        let rule = RowOf::<T> {
            t,
            shape: self.values.shape().to_vec(),
            slots: self.slots.clone(),
            _t: std::marker::PhantomData,
        };
        let ad = graph::new_node_with(
            T::TYPE,
            plain.len(),
            &[self.gate],
            Some(Arc::new(rule)),
            plain.array().id(),
        );
        let shape = plain.shape().to_vec();
        Tensor::from_array(plain.into_array().with_ad(ad), &shape)
    }
}

impl<T: Float> Drop for Unstack<T> {
    fn drop(&mut self) {
        graph::dec_ref(self.gate);
    }
}

/// The node of row `t`: in reverse mode it keeps its cotangent for the gate (and passes a zero),
/// in forward mode it is row `t` of the gate's tangent.
struct RowOf<T> {
    t: usize,
    shape: Vec<usize>,
    slots: Arc<Slots>,
    _t: std::marker::PhantomData<T>,
}

impl<T: Float> Rule for RowOf<T> {
    fn name(&self) -> &'static str {
        "scan row"
    }
    fn backward(&self, ct: &Grad) -> Vec<Option<Grad>> {
        let pass = crate::ad::current_pass();
        let mut slots = self.slots.lock();
        let kept = match slots[self.t].take() {
            Some((p, old)) if p == pass => Grad::of(old.array::<T>() + ct.array::<T>()),
            _ => ct.clone(),
        };
        // evaluated now, as the pass reaches each step: its expression is one step of the
        // chain, where the gate's stack of every row's expression would be all of them (an
        // error shows again where the stack reads it)
        if !kiln_core::is_evaluated(kept.id()) {
            kiln_core::eval(&[kept.id()]).ok();
        }
        slots[self.t] = Some((pass, kept));
        vec![Some(Grad::of(Array::<T>::full(T::from_bits64(0), 1)))]
    }
    fn forward(&self, tangents: &[Option<Grad>]) -> Option<Grad> {
        let g = tangents.first()?.as_ref()?;
        let len: usize = self.shape[1..].iter().product();
        let full = broadcast(g.array::<T>(), (self.shape[0] * len).into());
        Some(Grad::of(gather(&full, &row_index(len, self.t))))
    }
}

/// The gate over a tensor's rows: in reverse mode it stacks the cotangents its rows kept (zeros
/// for rows that got none), in forward mode it passes the tangent on.
struct Gate<T> {
    row_shape: Vec<usize>,
    slots: Arc<Slots>,
    _t: std::marker::PhantomData<T>,
}

impl<T: Float> Rule for Gate<T> {
    fn name(&self) -> &'static str {
        "scan rows"
    }
    fn backward(&self, _zero: &Grad) -> Vec<Option<Grad>> {
        let pass = crate::ad::current_pass();
        let kept: Vec<Option<(u64, Grad)>> = {
            let mut slots = self.slots.lock();
            let n = slots.len();
            std::mem::replace(&mut *slots, vec![None; n])
        };
        if !kept.iter().flatten().any(|(p, _)| *p == pass) {
            return vec![None];
        }
        let parts: Vec<Tensor<T>> = kept
            .into_iter()
            .map(|k| match k {
                Some((p, g)) if p == pass => {
                    let len: usize = self.row_shape.iter().product();
                    let g = broadcast(g.array::<T>(), len.into());
                    Tensor::from_array(g, &self.row_shape)
                }
                _ => Tensor::zeros(&self.row_shape),
            })
            .collect();
        vec![Some(Grad::of(stack(parts).into_array()))]
    }
    fn forward(&self, tangents: &[Option<Grad>]) -> Option<Grad> {
        tangents.first().cloned().flatten()
    }
}

/// `x` (evaluated) through a step boundary of a differentiated scan: an identity node that
/// evaluates the tangents and the cotangents that cross it. Such a
/// pass then runs step by step like the forward did, with one structure per step, so each step's
/// kernels are compiled once and replayed; without it a tangent or a recorded cotangent (forward
/// over reverse) grew across steps into kernels that differed at every step, each compiled anew
/// (10 s for `hvp` through 20 steps).
pub(crate) fn step_boundary<T: Float>(x: Tensor<T>) -> Tensor<T> {
    if !crate::ad::rules::tracks(x.array()) {
        return x;
    }
    let shape = x.shape().to_vec();
    let g = boundary(&Grad::of(x.into_array()));
    Tensor::from_array(g.array::<T>(), &shape)
}

/// [`step_boundary`] on a `Grad`: evaluated, and when it carries a node, behind a new
/// boundary node.
fn boundary(g: &Grad) -> Grad {
    if !kiln_core::is_evaluated(g.id()) {
        // (an error shows again where the value is read)
        kiln_core::eval(&[g.id()]).ok();
    }
    if g.ad() == 0 || !crate::ad::recording() {
        return g.clone();
    }
    let ad = graph::new_node_with(
        g.ty(),
        kiln_core::size(g.id()),
        &[g.ad()],
        Some(Arc::new(Boundary)),
        g.id(),
    );
    g.with_node(ad)
}

struct Boundary;

impl Rule for Boundary {
    fn name(&self) -> &'static str {
        "scan step"
    }
    fn backward(&self, ct: &Grad) -> Vec<Option<Grad>> {
        // evaluated at every step in a plain first-order pass too: left lazy, the carry's
        // cotangent grew by a step's expression at each step until `propagate::Cotangents` cut
        // it 128 rules deep, so every step's kernel recomputed the steps after it and differed
        // from the last (60 steps of a MITSOT over 4096 lanes: 198 kernels compiled, 31.6 s
        // with a cold kernel cache, 0.3 s warm; evaluated here: 38 kernels, 0.72 s, and 0.06 s)
        vec![Some(boundary(ct))]
    }
    fn forward(&self, tangents: &[Option<Grad>]) -> Option<Grad> {
        tangents.first()?.as_ref().map(boundary)
    }
    fn lane_local(&self) -> bool {
        true
    }
}
