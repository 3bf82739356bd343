//! Reverse mode through a loop by recomputation: [`crate::control::Loop::grad_checkpoint`].
//!
//! The forward runs without recording derivatives, in segments (each one plain loop, symbolic
//! when the body allows: one kernel), and keeps the state at the start of each segment. The
//! loop's result gets one custom-op node; its backward replays the segments last to first, each
//! from its saved state with the iterations recorded (`select(active, body(state), state)`, like
//! [`LoopGrad::Recorded`](crate::control::LoopGrad::Recorded)), and carries the cotangent back
//! through it with a pass of its own. Memory is the saved states plus one segment's recorded
//! iterations; with [`Checkpoints::Auto`] both grow as the square root of the trip count, whose
//! length is not known beforehand: when the saved states outnumber the segment length by two,
//! every other one is dropped and segments double. The closures must be `'static`: the backward
//! pass calls them after `run` has returned.
//!
//! The body may mix lanes (the replay is recorded like straight-line code); arrays with gradients
//! it captures are refused (their gradients would have to leave the replay's own pass: take them
//! through the state). Forward mode replays the segments first to last. The rule is first order:
//! inside a transformation whose derivatives are differentiated again the loop records itself
//! instead.

use super::control::{
    arrays, body_forward, captured, captured_by, fit, lanes, mixes_lanes, rebuild_with,
    recorded_step, Nodes,
};
use super::graph::{self, AdIndex};
use super::propagate::{self, Backward};
use super::value::Grad;
use super::RecordingGuard;
use crate::array::{Bool, UInt32};
use crate::control::{Checkpoints, Loop, LoopGrad};
use crate::freeze::traverse::Traverse;
use kiln_core::{Error, Result, VarId, VarType};
use parking_lot::Mutex;

/// The loop's condition, as the node keeps it.
type Cond<S> = Box<dyn FnMut(&S) -> Bool + Send>;
/// The loop's body, as the node keeps it.
type Body<S> = Box<dyn FnMut(&S) -> S + Send>;

/// A checkpointed loop's closures (called again by the passes).
struct Fns<S> {
    cond: Cond<S>,
    body: Body<S>,
}

/// The custom op standing for one checkpointed loop.
struct Op<S> {
    label: String,
    fns: Mutex<Fns<S>>,
    /// The state at the start of each segment (evaluated, detached), with its iteration.
    saved: Vec<(u64, S)>,
    /// The iteration after which no lane was active (an upper bound: the last segment's length).
    end: u64,
    /// The loop's result (detached), handed to `custom` as the op's value.
    result: S,
    /// The body is lane-local: finished lanes replay on their state detached (see
    /// `recorded_step`).
    detach_finished: bool,
}

/// `Loop::grad_checkpoint(plan).run(cond, body)`.
pub(crate) fn run<S: Traverse + Clone + Send + Sync + 'static>(
    lp: Loop<S>,
    plan: Checkpoints,
    cond: impl FnMut(&S) -> Bool + Send + 'static,
    body: impl FnMut(&S) -> S + Send + 'static,
) -> Result<S> {
    if let Checkpoints::AtMost(0) | Checkpoints::Every(0) = plan {
        return Err(Error::Invalid(format!(
            "loop {}: `grad_checkpoint({plan:?})` keeps no state to recompute from; keep at least one (`Checkpoints::AtMost(1)`, `Every(1)`), or `Checkpoints::Auto`",
            lp.label
        )));
    }
    let (ids, ads) = arrays(&lp.state);
    let tracked = ids
        .iter()
        .zip(&ads)
        .any(|(&id, &ad)| ad != 0 && differentiable(kiln_core::var_type(id)));
    if !super::control::involved(&lp.state) || !tracked {
        // nothing to recompute for (a captured gradient is still found and refused)
        return lp.run(cond, body);
    }
    if kiln_core::freeze::active() {
        return in_frozen_function(lp, cond, body);
    }
    if super::higher_order() || lanes(&ids).is_zero() {
        // (the rule below is first order: derivatives of derivatives need every iteration)
        return super::control::run_recorded(lp, cond, body);
    }
    let mut fns = Fns {
        cond: Box::new(cond),
        body: Box::new(body),
    };
    refuse_captured(&lp, &mut fns)?;
    let detach_finished = !mixes_lanes(&mut fns.body, &lp.state);
    let start = rebuild_with(&lp.state, &ids, &vec![0; ids.len()]);
    let (result, saved, end) = forward(&lp, plan, &mut fns, start)?;
    let op = Op {
        label: lp.label,
        fns: Mutex::new(fns),
        saved,
        end,
        result,
        detach_finished,
    };
    Ok(super::custom(op, &lp.state))
}

fn differentiable(ty: VarType) -> bool {
    matches!(ty, VarType::F32 | VarType::F64)
}

/// A checkpointed loop inside a frozen function's recording or replay: the segments end where
/// the host decides and replay in `backward`, which a replay could not repeat. A loop that can
/// carry its Jacobian (a lane-local body; captured gradients of one element or one per lane)
/// needs no saved state at all, so it runs in that mode, which replays — within any memory
/// budget. One whose body mixes lanes is refused, naming the ways out.
fn in_frozen_function<S: Traverse + Clone + Send + Sync + 'static>(
    lp: Loop<S>,
    cond: impl FnMut(&S) -> Bool + Send + 'static,
    mut body: impl FnMut(&S) -> S + Send + 'static,
) -> Result<S> {
    let (ids, _) = arrays(&lp.state);
    if !super::higher_order() && super::control::carries_jacobian(&mut body, &lp.state, lanes(&ids))
    {
        tracing::debug!(target: "kiln::ad", "loop {}: checkpointed inside a frozen function: its Jacobian travels with it instead (no state kept)", lp.label);
        return lp.grad_mode(LoopGrad::Jacobian).run(cond, body);
    }
    Err(Error::ControlFlow(format!(
        "loop {}: a checkpointed loop whose body mixes lanes (or inside a nested transformation) cannot run inside a frozen function: its segments end where the host decides and replay in `backward`, which a frozen function's replay cannot repeat; run the loop outside the frozen function, or make the body lane-local (each lane computed from its own lane of the state), which differentiates without keeping any state",
        lp.label
    )))
}

/// An error if the body uses an array with a gradient that it does not take through the state:
/// the body is traced once on leaves, in a symbolic trace thrown away (no side effect happens).
fn refuse_captured<S: Traverse + Clone>(lp: &Loop<S>, fns: &mut Fns<S>) -> Result<()> {
    let (ids, _) = arrays(&lp.state);
    let rows: Vec<usize> = (0..ids.len())
        .filter(|&k| differentiable(kiln_core::var_type(ids[k])))
        .collect();
    let mut found = Nodes(Vec::new());
    let trace = crate::control::Trace::enter()?;
    captured_by(|s: &S| (fns.body)(s), &lp.state, &rows, &mut found);
    drop(trace);
    match found.0.first() {
        Some(&a) => {
            let (size, ty) = graph::with(|g| (g.node(a).size, g.node(a).ty));
            let what = format!("loop {} (checkpointed)", lp.label);
            Err(captured(&what, size, ty))
        }
        None => Ok(()),
    }
}

/// A fresh leaf (keeping the gradients passes bring it) for each float array of `ids`, 0 for the
/// others.
fn float_leaves(ids: &[VarId]) -> Nodes {
    Nodes(
        ids.iter()
            .map(|&id| {
                if differentiable(kiln_core::var_type(id)) {
                    super::jax::new_leaf(id)
                } else {
                    0
                }
            })
            .collect(),
    )
}

/// The forward without derivatives: the result, the saved segment starts and the end.
#[allow(clippy::type_complexity)]
fn forward<S: Traverse + Clone + 'static>(
    lp: &Loop<S>,
    plan: Checkpoints,
    fns: &mut Fns<S>,
    mut s: S,
) -> Result<(S, Vec<(u64, S)>, u64)> {
    let _off = RecordingGuard::set(false);
    let mut every = match plan {
        Checkpoints::Every(k) => k,
        _ => 1,
    };
    let mut saved: Vec<(u64, S)> = Vec::new();
    let mut it = 0u64;
    loop {
        let active = (fns.cond)(&s);
        if !active.any() {
            return Ok((s, saved, it));
        }
        if lp.max_iterations > 0 && it >= lp.max_iterations {
            return Err(Error::LoopTruncated {
                labels: lp.label.clone(),
                lanes: active.count(),
            });
        }
        drop(active);
        saved.push((it, s.clone()));
        thin(plan, &mut saved, &mut every);
        let mut len = every;
        if lp.max_iterations > 0 {
            len = len.min(lp.max_iterations - it);
        }
        s = segment(lp, fns, s, len)?;
        kiln_core::eval(&arrays(&s).0)?;
        it += len;
    }
}

/// Drop every other saved state (and double the segments) when the plan says there are too many.
fn thin<S>(plan: Checkpoints, saved: &mut Vec<(u64, S)>, every: &mut u64) {
    let over = match plan {
        Checkpoints::Auto => saved.len() as u64 > 2 * *every + 1,
        Checkpoints::AtMost(n) => saved.len() > n,
        Checkpoints::Every(_) => false,
    };
    if over {
        let mut k = 0;
        saved.retain(|_| {
            k += 1;
            k % 2 == 1
        });
        *every *= 2;
    }
}

/// At most `len` iterations of the loop from `s`, as one plain loop (an iteration counter added
/// to the state).
fn segment<S: Traverse + Clone + 'static>(
    lp: &Loop<S>,
    fns: &mut Fns<S>,
    s: S,
    len: u64,
) -> Result<S> {
    let n = lanes(&arrays(&s).0);
    let counter = UInt32::from_id(kiln_core::literal(VarType::U32, 0, n));
    let limit = u32::try_from(len).unwrap_or(u32::MAX);
    let inner = Loop {
        state: (s, counter),
        label: lp.label.clone(),
        max_iterations: 0,
        mode: lp.mode,
        compress: false,
        grad: LoopGrad::Auto,
        optimize: lp.optimize,
    };
    let Fns { cond, body } = fns;
    let (s, _) = inner.run_plain(
        |(s, i): &(S, UInt32)| &cond(s) & &i.lt(limit),
        |(s, i): &(S, UInt32)| (body(s), i + 1u32),
    )?;
    Ok(s)
}

/// A new reference to `id` as a cotangent or tangent of its own type.
fn grad_of(id: VarId) -> Grad {
    kiln_core::inc_ref(id);
    match kiln_core::var_type(id) {
        VarType::F32 => Grad::of(crate::array::Array::<f32>::wrap(id)),
        _ => Grad::of(crate::array::Array::<f64>::wrap(id)),
    }
}

impl<S: Traverse + Clone + 'static> Op<S> {
    /// The segment that starts at saved state `k`, recorded on fresh leaves (one per float
    /// array): the leaves, the node of each array of the segment's end, and that end.
    fn replay(&self, k: usize) -> Result<(Nodes, Vec<AdIndex>, S)> {
        let (from, s0) = &self.saved[k];
        let to = self.saved.get(k + 1).map_or(self.end, |s| s.0);
        let _rec = RecordingGuard::set(true);
        let (ids, _) = arrays(s0);
        let leaves = float_leaves(&ids);
        let mut s = rebuild_with(s0, &ids, &leaves.0);
        let mut fns = self.fns.lock();
        let Fns { cond, body } = &mut *fns;
        for _ in *from..to {
            let active = cond(&s);
            if !active.any() {
                break;
            }
            s = recorded_step(&active, body, &s, self.detach_finished)?;
        }
        let (_, ads) = arrays(&s);
        Ok((leaves, ads, s))
    }

    /// The cotangent at the start of segment `k` given the one at its end (by array position).
    fn pull_back(&self, k: usize, ct: Vec<Option<Grad>>) -> Result<Vec<Option<Grad>>> {
        let (leaves, outs, end) = self.replay(k)?;
        // (an entry of one element the forward widened, all lanes equal, and the replay kept:
        // the lanes' cotangents sum into it)
        let seeds: Vec<(AdIndex, Grad)> = outs
            .iter()
            .zip(ct)
            .filter_map(|(&ad, c)| Some((ad, c?)).filter(|(ad, _)| *ad != 0))
            .map(|(ad, c)| {
                let size = graph::with(|g| g.node(ad).size);
                (ad, fit(&c, size, kiln_core::size(c.id())))
            })
            .collect();
        if !seeds.is_empty() {
            let how = Backward {
                retain_graph: false,
                create_graph: false,
            };
            propagate::backward(seeds, how, &[])?;
        }
        // (the end's handles hold the nodes the pass started from)
        drop(end);
        let ct: Vec<Option<Grad>> = leaves
            .0
            .iter()
            .map(|&a| {
                if a == 0 {
                    None
                } else {
                    graph::with(|g| g.node_mut(a).grad.take())
                }
            })
            .collect();
        settled(ct)
    }

    /// The tangent at the end of segment `k` given the one at its start.
    fn push_forward(&self, k: usize, t: Vec<Option<Grad>>) -> Result<Vec<Option<Grad>>> {
        let start = graph::with(|g| g.next_seq());
        let (leaves, outs, end) = self.replay(k)?;
        let seeds: Vec<(AdIndex, Grad)> = leaves
            .0
            .iter()
            .zip(t)
            .filter_map(|(&ad, t)| Some((ad, t?)).filter(|(ad, _)| *ad != 0))
            .collect();
        let ts = body_forward(&outs, start, seeds)?;
        let out = outs
            .iter()
            .map(|a| if *a == 0 { None } else { ts.get(a).cloned() })
            .collect();
        drop((end, leaves));
        settled(out)
    }

    fn failed(&self, e: Error) -> ! {
        panic!(
            "kiln: loop {}: replaying a checkpointed segment failed: {e}",
            self.label
        )
    }
}

/// `gs` evaluated: a lazy cotangent or tangent would hold the segment's recorded values until
/// the whole sweep is read, which is the memory that checkpointing saves.
fn settled(gs: Vec<Option<Grad>>) -> Result<Vec<Option<Grad>>> {
    let ids: Vec<VarId> = gs.iter().flatten().map(|g| g.id()).collect();
    kiln_core::eval(&ids)?;
    Ok(gs)
}

/// `value`'s arrays as gradients (`None` for arrays that are not floats).
fn as_grads<S: Traverse>(value: &S) -> Vec<Option<Grad>> {
    arrays(value)
        .0
        .iter()
        .map(|&id| differentiable(kiln_core::var_type(id)).then(|| grad_of(id)))
        .collect()
}

/// `like` with the arrays `gs` (zeros where `None`).
fn from_grads<S: Traverse + Clone>(like: &S, gs: &[Option<Grad>]) -> S {
    let (ids, _) = arrays(like);
    let owned = kiln_core::Handles::own(
        ids.iter()
            .zip(gs)
            .map(|(&id, g)| match g {
                Some(g) => {
                    kiln_core::inc_ref(g.id());
                    g.id()
                }
                None => kiln_core::literal(kiln_core::var_type(id), 0, 1usize),
            })
            .collect(),
    );
    rebuild_with(like, owned.ids(), &vec![0; ids.len()])
}

impl<S: Traverse + Clone + Send + Sync + 'static> super::CustomOp for Op<S> {
    type Input = S;
    type Output = S;
    fn name(&self) -> &'static str {
        "while_loop (checkpointed)"
    }
    fn eval(&self, _input: &S) -> S {
        self.result.clone()
    }
    fn backward(&self, _input: &S, _output: &S, grad_output: &S) -> S {
        let mut ct = as_grads(grad_output);
        for k in (0..self.saved.len()).rev() {
            ct = self.pull_back(k, ct).unwrap_or_else(|e| self.failed(e));
        }
        from_grads(grad_output, &ct)
    }
    fn forward(&self, _input: &S, output: &S, grad_input: &S) -> Option<S> {
        let mut t = as_grads(grad_input);
        for k in 0..self.saved.len() {
            t = self.push_forward(k, t).unwrap_or_else(|e| self.failed(e));
        }
        Some(from_grads(output, &t))
    }
}
