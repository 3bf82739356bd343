//! PyTensor's face run differentiated: when a declared input carries a gradient, or the body
//! captures one, the body runs once per step on ordinary lazy tensors with derivatives recorded,
//! and each step is evaluated before the next (one kernel group per step, as in stepped mode).
//! AD then goes through the scan as through any code — both modes, any order — with sequence
//! taps, recurrent outputs with taps (SITSOT, MITSOT), NITSOT outputs, non-sequences, captured
//! tensors, `go_backwards`/`reverse`, `until` (gradients stop with the step where the scan
//! stopped) and `keep`. `truncate_gradient(k)` runs every step before the last `k` with
//! derivatives suspended, so nothing flows back past them (PyTensor's truncated BPTT). Every
//! step's values stay alive for the backward pass: memory grows with the steps run, as with a
//! MITMOT buffer, and no scan rewrite applies (the report says `differentiated`).

use super::erased::Erased;
use super::rows;
use super::run::{check_direction, check_inits, check_until, declare_outputs, RunOut};
use super::spec::{plan_storage, seq_span, step_count, Spec, StepIn, StepOut, Store};
use super::ScanReport;
use crate::tensor::Tensor;
use kiln_core::{Error, Result, Scalar, VarType};

/// Call `$f::<T>(args)` with `T` the element type `$ty` names.
macro_rules! typed {
    ($ty:expr, $f:ident ( $($a:expr),* )) => {
        match $ty {
            VarType::Bool => $f::<bool>($($a),*),
            VarType::I32 => $f::<i32>($($a),*),
            VarType::U32 => $f::<u32>($($a),*),
            VarType::I64 => $f::<i64>($($a),*),
            VarType::U64 => $f::<u64>($($a),*),
            VarType::F32 => $f::<f32>($($a),*),
            VarType::F64 => $f::<f64>($($a),*),
        }
    };
}

/// The tensor `e` holds (its type was dispatched on, so the read cannot fail).
fn tensor_of<T: Scalar>(e: &Erased) -> Tensor<T> {
    e.tensor::<T>(&String::new)
        .expect("kiln internal error: dispatched on the element type")
}

fn row_typed<T: Scalar>(e: &Erased, r: usize) -> Erased {
    Erased::of(&rows::row(&tensor_of::<T>(e), r))
}

/// Row `r` of `e` along its leading axis (a gradient is kept).
fn row(e: &Erased, r: usize) -> Erased {
    typed!(e.ty, row_typed(e, r))
}

fn stack_typed<T: Scalar>(parts: &[Erased], row_shape: &[usize]) -> Erased {
    if parts.is_empty() {
        let mut shape = vec![0];
        shape.extend_from_slice(row_shape);
        return Erased::of(&Tensor::<T>::from_vec(Vec::new(), &shape));
    }
    Erased::of(&rows::stack(parts.iter().map(tensor_of::<T>).collect()))
}

/// `e` through a step boundary ([`rows::step_boundary`]) when it carries a gradient.
pub(super) fn boundary(e: &Erased) -> Erased {
    match e.ty {
        VarType::F32 if e.carries_grad() => Erased::of(&rows::step_boundary(tensor_of::<f32>(e))),
        VarType::F64 if e.carries_grad() => Erased::of(&rows::step_boundary(tensor_of::<f64>(e))),
        _ => e.clone(),
    }
}

/// `parts` (of type `ty`, rows of `row_shape`) stacked on a new leading axis.
pub(super) fn stack(ty: VarType, parts: &[Erased], row_shape: &[usize]) -> Erased {
    typed!(ty, stack_typed(parts, row_shape))
}

/// Reads the rows of one sequence: one carrying a gradient through an [`rows::Unstack`] (one
/// adjoint for all its rows), any other by a gather at a data offset.
pub(super) enum Rows {
    F32(rows::Unstack<f32>),
    F64(rows::Unstack<f64>),
    Plain(Erased),
}

impl Rows {
    pub(super) fn of(e: &Erased) -> Rows {
        let tracked = e.carries_grad() && e.shape.first().is_some_and(|&n| n > 0);
        match e.ty {
            VarType::F32 if tracked => Rows::F32(rows::Unstack::new(&tensor_of::<f32>(e))),
            VarType::F64 if tracked => Rows::F64(rows::Unstack::new(&tensor_of::<f64>(e))),
            _ => Rows::Plain(e.clone()),
        }
    }
    /// Row `t`.
    pub(super) fn row(&self, t: usize) -> Erased {
        match self {
            Rows::F32(u) => Erased::of(&u.row(t)),
            Rows::F64(u) => Erased::of(&u.row(t)),
            Rows::Plain(e) => row(e, t),
        }
    }
}

/// What the steps produced.
struct History {
    /// Per recurrent output: its initial rows, then each step's row (empty for a NITSOT).
    hist: Vec<Vec<Erased>>,
    /// Per output: each step's value.
    rows: Vec<Vec<Erased>>,
    /// Per output: the type and row shape the first step returned.
    kinds: Vec<(VarType, Vec<usize>)>,
    /// Whether the body sets `until`.
    until: bool,
    steps_run: usize,
}

/// Run the scan of `spec` step by step with derivatives recorded (see the module docs).
pub(crate) fn run(
    mut spec: Spec,
    body: &mut dyn FnMut(&StepIn) -> Result<StepOut>,
) -> Result<RunOut> {
    check_direction(&spec)?;
    check_inits(&spec)?;
    let n = step_count(&spec)?;
    if let Some(out) = gradient_scan(&spec, body, n)? {
        return Ok(out);
    }
    if n == 0 {
        // no step: the outputs' shapes come from the traced scan; the states and finals are the
        // initial rows, with their gradients
        let mut out = crate::ad::suspend_grad(|| super::run::run(spec.clone(), body))?;
        let initial: Vec<Vec<Erased>> = spec.outs.iter().map(initial_rows).collect();
        for (j, o) in spec.outs.iter().enumerate() {
            let Some(init) = &o.init else { continue };
            let row_shape = o.row_shape().unwrap_or_default();
            if let Some(f) = out.finals.get_mut(j) {
                *f = initial[j].last().cloned();
            }
            if spec.keep_states {
                if let Some(s) = out.states.get_mut(j) {
                    *s = Some(stack(init.ty, &initial[j], &row_shape));
                }
            }
        }
        return Ok(out);
    }
    // truncated: the last `k` steps record derivatives; with `until` the count is known only
    // after a first pass, run without derivatives
    let recorded_from = match spec.truncate {
        Some(k) if k < n => {
            let ran = crate::ad::suspend_grad(|| steps(&mut spec.clone(), body, n, n, true))?;
            ran.steps_run.saturating_sub(k)
        }
        _ => 0,
    };
    let h = steps(&mut spec, body, n, recorded_from, false)?;
    Ok(finish(&spec, h, n))
}

/// The scan as a gradient scan ([`super::grad`]) when it has the simple pattern: every sequence
/// read at tap 0 (with a gradient or not; all of one length when read backwards), every output a
/// SITSOT (taps `[-1]`) or a NITSOT with every row kept, no `keep_states`, first order, outside a
/// frozen recording, and a body without side effects. `go_backwards`, `reverse`, `until` (the
/// gradient scan runs over the steps the scan ran) and `truncate_gradient` (over the last `k`
/// of them) are the gradient scan's too. `None`: it does not apply.
fn gradient_scan(
    spec: &Spec,
    body: &mut dyn FnMut(&StepIn) -> Result<StepOut>,
    n: usize,
) -> Result<Option<RunOut>> {
    use super::spec::Keep;
    let sitsot = |o: &super::spec::OutSpec| o.init.is_some() && o.taps == [-1];
    let backwards = spec.go_backwards || spec.reverse;
    let len = spec.seqs.first().map_or(n, |q| q.data.shape[0]);
    let applies = n > 0
        && spec.seqs.iter().all(|q| q.taps == [0])
        && (!backwards || spec.seqs.iter().all(|q| q.data.shape[0] == len))
        && spec
            .outs
            .iter()
            .all(|o| (sitsot(o) || o.init.is_none()) && matches!(o.keep, Keep::All))
        && spec
            .pending_keep
            .iter()
            .all(|(_, k)| matches!(k, Keep::All))
        && !spec.keep_states
        && super::grad::possible();
    if !applies {
        return Ok(None);
    }
    let carried: Vec<usize> = (0..spec.outs.len())
        .filter(|&j| sitsot(&spec.outs[j]))
        .collect();
    let init: Vec<Erased> = carried
        .iter()
        .map(|&j| spec.outs[j].init.clone().expect("a SITSOT"))
        .collect();
    let row0: Vec<Erased> = spec
        .seqs
        .iter()
        .map(|q| first_row(&q.data))
        .collect::<Result<_>>()?;
    if super::grad::has_effects(&mut step_of(spec, &carried, body), &init, &row0) {
        return Ok(None);
    }
    // the plain scan forward, keeping every carry state and every step's products
    let mut plain = spec.clone();
    plain.keep_states = true;
    plain.save_products = true;
    // (`Fused` asked of a body one kernel cannot run, a product say, is the plain scan's
    // refusal: a differentiated scan runs step by step then, as before the gradient scan)
    let mut fwd = match crate::ad::suspend_grad(|| super::run::run(plain, body)) {
        Ok(f) => f,
        Err(e) if spec.mode == super::ScanMode::Fused && super::run::is_fused_refusal(&e) => {
            tracing::debug!(target: "scan", "scan {}: the gradient scan's plain forward refused `Fused` ({e}): the scan runs step by step", spec.label);
            return Ok(None);
        }
        Err(e) => return Err(e),
    };
    let (Some(mut captured), Some(states)) = (
        fwd.captured.take(),
        carried
            .iter()
            .map(|&j| fwd.states.get(j).cloned().flatten())
            .collect::<Option<Vec<Erased>>>(),
    ) else {
        return Ok(None);
    };
    // (after `until`, the steps the scan ran)
    let n = fwd.report.steps_run;
    if n == 0 {
        return Ok(None);
    }
    captured.extend(spec.non_seqs.iter().cloned());
    let fw = super::grad::Forward {
        init,
        xs: spec.seqs.iter().map(|q| q.data.clone()).collect(),
        finals: carried
            .iter()
            .map(|&j| fwd.finals.get(j).cloned().flatten())
            .collect::<Option<Vec<Erased>>>()
            .unwrap_or_default(),
        ys: fwd.outputs.clone(),
        states,
        captured,
        pushed: std::mem::take(&mut fwd.pushed),
        saved: std::mem::take(&mut fwd.saved),
        reads: Vec::new(),
        n,
        reverse: backwards,
        ys_reversed: spec.reverse,
        truncate: spec.truncate,
    };
    if fw.finals.len() != carried.len() {
        return Ok(None);
    }
    let mut report = fwd.report.clone();
    let mut step = step_of(spec, &carried, body);
    let Some((_, ys)) = super::grad::attach(fw, &mut step, &spec.label, &mut report)? else {
        return Ok(None);
    };
    Ok(Some(RunOut {
        outputs: ys,
        finals: fwd.finals,
        states: fwd.states.iter().map(|_| None).collect(),
        report,
        captured: None,
        pushed: Vec::new(),
        saved: Vec::new(),
    }))
}

/// The body as the gradient scan calls it: the carry (the SITSOT outputs `carried`, in order)
/// and a row of each sequence to the new carry and every output (an `until` it sets is the
/// plain forward's business: the gradient scan runs over the steps that ran).
fn step_of<'a>(
    spec: &'a Spec,
    carried: &'a [usize],
    body: &'a mut dyn FnMut(&StepIn) -> Result<StepOut>,
) -> impl FnMut(&Erased, &[Erased], &[Erased]) -> super::grad::Stepped + 'a {
    move |s, c, x| {
        let mut out_rows: Vec<Vec<Erased>> = vec![Vec::new(); spec.outs.len()];
        for (&j, e) in carried.iter().zip(c) {
            out_rows[j] = vec![e.clone()];
        }
        let input = StepIn {
            t: s.clone(),
            seq_rows: x.iter().map(|r| vec![r.clone()]).collect(),
            out_rows,
            non_seqs: spec.non_seqs.clone(),
        };
        let out = body(&input)?;
        let carry = carried
            .iter()
            .filter_map(|&j| out.outs.get(j).cloned())
            .collect();
        Ok((carry, out.outs))
    }
}

/// Row 0 of `x` along its leading axis (for a probe trace).
fn first_row(x: &Erased) -> Result<Erased> {
    let shape = x.shape[1..].to_vec();
    let len: usize = shape.iter().product();
    let idx = kiln_core::Handle::own(kiln_core::counter(VarType::U32, len)?);
    let all = kiln_core::Handle::own(kiln_core::literal(VarType::Bool, 1, 1));
    let id = kiln_core::gather(x.id(), idx.id(), all.id())?;
    Ok(Erased::own(id, shape))
}

/// Run up to `n` steps, those before `recorded_from` with derivatives suspended. `probe`: stop
/// after the first step when it sets no `until` (the count is then `n`).
fn steps(
    spec: &mut Spec,
    body: &mut dyn FnMut(&StepIn) -> Result<StepOut>,
    n: usize,
    recorded_from: usize,
    probe: bool,
) -> Result<History> {
    let seqs: Vec<Rows> = spec.seqs.iter().map(|s| Rows::of(&s.data)).collect();
    let mut h = History {
        hist: spec.outs.iter().map(initial_rows).collect(),
        rows: Vec::new(),
        kinds: Vec::new(),
        until: false,
        steps_run: 0,
    };
    for k in 0..n {
        let input = step_in(spec, &seqs, &h, k);
        let out = if k < recorded_from {
            crate::ad::suspend_grad(|| body(&input))
        } else {
            body(&input)
        }?;
        drop(input);
        if k == 0 {
            first_step(spec, &mut h, &out)?;
        }
        let stop = push(spec, &mut h, out, k)?;
        h.steps_run = k + 1;
        if stop {
            break;
        }
        if probe && !h.until {
            h.steps_run = n;
            break;
        }
    }
    Ok(h)
}

/// A recurrent output's rows before the first step (none for a NITSOT).
fn initial_rows(o: &super::spec::OutSpec) -> Vec<Erased> {
    match &o.init {
        None => Vec::new(),
        Some(init) if o.mitsot_layout() => (0..o.window()).map(|r| row(init, r)).collect(),
        Some(init) => vec![init.clone()],
    }
}

/// The first step's outputs declare the outputs (NITSOTs when none was declared) and fix their
/// types and shapes.
fn first_step(spec: &mut Spec, h: &mut History, out: &StepOut) -> Result<()> {
    let label = spec.label.clone();
    let types: Vec<VarType> = out.outs.iter().map(|e| e.ty).collect();
    let shapes: Vec<Vec<usize>> = out.outs.iter().map(|e| e.shape.clone()).collect();
    declare_outputs(spec, &types, &shapes, &label)?;
    check_until(spec, out.until.is_some())?;
    h.kinds = types.into_iter().zip(shapes).collect();
    h.until = out.until.is_some();
    h.rows = spec.outs.iter().map(|_| Vec::new()).collect();
    h.hist.resize_with(spec.outs.len(), Vec::new);
    Ok(())
}

/// Step `k`'s inputs: sequence rows at their taps, recurrent outputs' earlier rows, the
/// non-sequences.
fn step_in(spec: &Spec, seqs: &[Rows], h: &History, k: usize) -> StepIn {
    let backwards = spec.go_backwards || spec.reverse;
    let seq_rows = spec
        .seqs
        .iter()
        .zip(seqs)
        .map(|(s, rows)| {
            let len = s.data.shape[0];
            let (off, _) = seq_span(&s.taps, len);
            s.taps
                .iter()
                .map(|&tap| {
                    let at = k + (off + tap) as usize;
                    rows.row(if backwards { len - 1 - at } else { at })
                })
                .collect()
        })
        .collect();
    let out_rows = spec
        .outs
        .iter()
        .enumerate()
        .map(|(j, o)| match h.hist.get(j) {
            Some(hist) if o.init.is_some() => o
                .taps
                .iter()
                .map(|&tap| hist[(o.window() as i64 + k as i64 + tap) as usize].clone())
                .collect(),
            _ => Vec::new(),
        })
        .collect();
    StepIn {
        t: Erased::of(&Tensor::<u32>::scalar(k as u32)),
        seq_rows,
        out_rows,
        non_seqs: spec.non_seqs.clone(),
    }
}

/// Check step `k`'s outputs against the first step's, evaluate them, and record them. Returns
/// whether `until` holds.
fn push(spec: &Spec, h: &mut History, out: StepOut, k: usize) -> Result<bool> {
    let label = &spec.label;
    let got: Vec<(VarType, Vec<usize>)> =
        out.outs.iter().map(|e| (e.ty, e.shape.clone())).collect();
    if got != h.kinds {
        return Err(Error::Scan(format!(
            "scan {label}: step {k} returned [{}] but the first step returned [{}]; the body must return the same outputs, of the same types and shapes, at every step",
            out.outs.iter().map(Erased::describe).collect::<Vec<_>>().join(", "),
            h.kinds
                .iter()
                .map(|(t, s)| format!("{t} {s:?}"))
                .collect::<Vec<_>>()
                .join(", ")
        )));
    }
    let mut ids: Vec<kiln_core::VarId> = out.outs.iter().map(Erased::id).collect();
    ids.extend(out.until.iter().map(Erased::id));
    kiln_core::eval(&ids)?;
    for (j, e) in out.outs.iter().map(boundary).enumerate() {
        if spec.outs[j].init.is_some() {
            h.hist[j].push(e.clone());
        }
        h.rows[j].push(e);
    }
    match out.until {
        None => Ok(false),
        Some(cond) => {
            let what = || format!("scan {label}: the `until` condition");
            let v = cond.tensor::<bool>(&what)?.to_vec();
            if v.len() != 1 {
                return Err(Error::Scan(format!(
                    "scan {label}: the `until` condition has {} elements; it must be one `bool` (reduce it with `all()` or `any()`)",
                    v.len()
                )));
            }
            Ok(v[0])
        }
    }
}

/// The outputs (the rows `keep` asks for), the recurrent outputs' finals and states, the report.
fn finish(spec: &Spec, h: History, n: usize) -> RunOut {
    let rewrites = spec
        .rewrites
        .unwrap_or_else(kiln_core::config::scan_rewrites);
    let keeps: Vec<_> = spec.outs.iter().map(|o| o.keep.clone()).collect();
    // (`keep` picks from the rows as stored, reversed ones too, as the scan without gradients)
    let stores = if rewrites {
        plan_storage(&keeps, h.steps_run, false, false).1
    } else {
        vec![Store::Range(0, h.steps_run); keeps.len()]
    };
    let mut outputs = Vec::new();
    let mut buffer_rows = Vec::new();
    for (j, store) in stores.iter().enumerate() {
        let mut rows = h.rows[j].clone();
        if spec.reverse {
            rows.reverse();
        }
        let (a, b) = match *store {
            Store::Range(a, b) => (a, b),
            _ => (0, 0),
        };
        let (ty, shape) = &h.kinds[j];
        outputs.push(stack(*ty, &rows[a..b], shape));
        buffer_rows.push(b - a);
    }
    let finals = h.hist.iter().map(|hist| hist.last().cloned()).collect();
    let states = spec
        .outs
        .iter()
        .enumerate()
        .map(|(j, o)| {
            let keep = spec.keep_states && o.init.is_some();
            keep.then(|| stack(h.kinds[j].0, &h.hist[j], &h.kinds[j].1))
        })
        .collect();
    let report = ScanReport {
        label: spec.label.clone(),
        steps_run: h.steps_run,
        steps_requested: n,
        loops_emitted: 0,
        mode: "differentiated",
        mode_reason: match spec.truncate {
            Some(k) => format!("an input carries a gradient: the body ran once per step with derivatives recorded for the last {k} step(s) (truncate_gradient); no rewrite applies"),
            None => "an input carries a gradient: the body ran once per step with derivatives recorded; no rewrite applies".into(),
        },
        buffer_rows,
        ..Default::default()
    };
    RunOut {
        outputs,
        finals,
        states,
        report,
        captured: None,
        pushed: Vec::new(),
        saved: Vec::new(),
    }
}
