//! PyTensor's face run differentiated. First choice: a gradient scan ([`super::grad`]; see
//! `gradient_scan` below for when it applies — any taps, windows of MITSOT rows carried). When
//! it does not (`keep_states`, a `keep` that drops rows, higher orders, a frozen recording, side
//! effects), and a declared input carries a gradient or the body captures one, the body runs
//! once per step on ordinary lazy tensors with derivatives recorded,
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

/// The scan as a gradient scan ([`super::grad`]) when it has the pattern: every output a
/// recurrent one (SITSOT, or MITSOT with any taps: its carry is the window of its last rows) or
/// a NITSOT with every row kept, sequences read at any taps (each tap a view of the rows the
/// steps read, whose cotangents the gradient scan stacks), no `keep_states`, first order,
/// outside a frozen recording, and a body without side effects. `go_backwards`, `reverse`,
/// `until` (the gradient scan runs over the steps the scan ran) and `truncate_gradient` (over
/// the last `k` of them) are the gradient scan's too. `None`: it does not apply.
fn gradient_scan(
    spec: &Spec,
    body: &mut dyn FnMut(&StepIn) -> Result<StepOut>,
    n: usize,
) -> Result<Option<RunOut>> {
    use super::spec::Keep;
    let backwards = spec.go_backwards || spec.reverse;
    let len = spec.seqs.first().map_or(n, |q| q.data.shape[0]);
    // sequences read at tap 0 only are handed over whole (read backwards by the gradient scan
    // itself, all of one length); otherwise each tap is a view of the rows its steps read
    let at_zero = spec.seqs.iter().all(|q| q.taps == [0]);
    let applies = n > 0
        && (!backwards || !at_zero || spec.seqs.iter().all(|q| q.data.shape[0] == len))
        && spec.outs.iter().all(|o| matches!(o.keep, Keep::All))
        && spec
            .pending_keep
            .iter()
            .all(|(_, k)| matches!(k, Keep::All))
        && !spec.keep_states
        && super::grad::possible();
    if !applies {
        return Ok(None);
    }
    // the carry: per recurrent output, its window of rows (one for a SITSOT)
    let layout: Vec<(usize, usize)> = (0..spec.outs.len())
        .filter(|&j| spec.outs[j].init.is_some())
        .map(|j| (j, spec.outs[j].window()))
        .collect();
    let init: Vec<Erased> = layout
        .iter()
        .flat_map(|&(j, w)| {
            let o = &spec.outs[j];
            let init = o.init.clone().expect("a recurrent output");
            if o.mitsot_layout() {
                (0..w).map(|r| row(&init, r)).collect()
            } else {
                vec![init]
            }
        })
        .collect();
    let (xs, slots) = if at_zero {
        (spec.seqs.iter().map(|q| q.data.clone()).collect(), None)
    } else {
        tap_views(spec, n, backwards)?
    };
    let row0: Vec<Erased> = xs.iter().map(first_row).collect::<Result<_>>()?;
    let shape = StepShape {
        layout: &layout,
        slots: slots.as_deref(),
    };
    if super::grad::has_effects(&mut step_of(spec, &shape, body), &init, &row0) {
        return Ok(None);
    }
    // the plain scan forward, keeping every recurrent output's rows and every step's products
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
    // (after `until`, the steps the scan ran)
    let steps_run = fwd.report.steps_run;
    let Some(mut captured) = fwd.captured.take() else {
        return Ok(None);
    };
    let Some((states, finals)) = carry_states(spec, &layout, &fwd, steps_run) else {
        return Ok(None);
    };
    if steps_run == 0 {
        return Ok(None);
    }
    // truncated where a kept step still reads a MITSOT's initial rows: the gradient scan stops
    // its carry's cotangent at the first kept step, which would drop their part
    let first_kept = spec.truncate.map_or(0, |k| steps_run.saturating_sub(k));
    if first_kept > 0 && layout.iter().any(|&(_, w)| first_kept < w) {
        return Ok(None);
    }
    captured.extend(spec.non_seqs.iter().cloned());
    let fw = super::grad::Forward {
        init,
        xs,
        finals,
        ys: fwd.outputs.clone(),
        states,
        captured,
        pushed: std::mem::take(&mut fwd.pushed),
        saved: std::mem::take(&mut fwd.saved),
        reads: Vec::new(),
        n: steps_run,
        reverse: backwards && at_zero,
        ys_reversed: spec.reverse,
        truncate: spec.truncate,
    };
    let mut report = fwd.report.clone();
    let mut step = step_of(spec, &shape, body);
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

/// How the gradient scan's carry and rows map to the body's inputs.
struct StepShape<'a> {
    /// Per recurrent output in carry order: (output, rows of its window).
    layout: &'a [(usize, usize)],
    /// Per sequence, per tap: its row's position among the gradient scan's rows (None: one row
    /// per sequence, tap 0).
    slots: Option<&'a [Vec<usize>]>,
}

/// Per sequence and tap, the rows its steps read (`n` of them, in step order: a view, its
/// gradient kept), and where each landed.
#[allow(clippy::type_complexity)]
fn tap_views(
    spec: &Spec,
    n: usize,
    backwards: bool,
) -> Result<(Vec<Erased>, Option<Vec<Vec<usize>>>)> {
    let mut xs = Vec::new();
    let mut slots = Vec::new();
    for q in &spec.seqs {
        let (off, _) = seq_span(&q.taps, q.data.shape[0]);
        let mut at = Vec::new();
        for &tap in &q.taps {
            let start = (off + tap) as usize;
            let v = rows_from(&q.data, start, n, backwards);
            // (a recorded step reads its inputs' buffers)
            kiln_core::eval(&[v.id()])?;
            at.push(xs.len());
            xs.push(v);
        }
        slots.push(at);
    }
    Ok((xs, Some(slots)))
}

/// Per carry entry, the rows it held at each step (at least `steps_run + 1`) and its final value,
/// from the plain forward's `keep_states` buffers (a window entry `i` of a MITSOT is its
/// history from row `i`). None: the forward kept none.
fn carry_states(
    spec: &Spec,
    layout: &[(usize, usize)],
    fwd: &RunOut,
    steps_run: usize,
) -> Option<(Vec<Erased>, Vec<Erased>)> {
    let (mut states, mut finals) = (Vec::new(), Vec::new());
    for &(j, w) in layout {
        let hist = fwd.states.get(j).cloned().flatten()?;
        if !spec.outs[j].mitsot_layout() {
            states.push(hist);
            finals.push(fwd.finals.get(j).cloned().flatten()?);
            continue;
        }
        let rows = hist.shape[0];
        for i in 0..w {
            states.push(rows_from(&hist, i, rows - i, false));
            finals.push(row(&hist, steps_run + i));
        }
    }
    Some((states, finals))
}

/// Rows `start..start + count` of `e` along its leading axis (counted from the last row when
/// `backwards`): a view, its gradient kept.
fn rows_from(e: &Erased, start: usize, count: usize, backwards: bool) -> Erased {
    typed!(e.ty, rows_from_typed(e, start, count, backwards))
}

fn rows_from_typed<T: Scalar>(e: &Erased, start: usize, count: usize, backwards: bool) -> Erased {
    let t = tensor_of::<T>(e);
    let t = if backwards { t.flip(0) } else { t };
    let r = crate::tensor::SliceArg::Range {
        start: Some(start as isize),
        stop: Some((start + count) as isize),
        step: 1,
    };
    Erased::of(&t.slice(&[r]))
}

/// The body as the gradient scan calls it: the carry (each recurrent output's window, in
/// order) and the rows (a row per sequence, or per sequence and tap) to the new carry (each
/// window moved on by the output's new row) and every output (an `until` it sets is the plain
/// forward's business: the gradient scan runs over the steps that ran).
fn step_of<'a>(
    spec: &'a Spec,
    shape: &'a StepShape<'a>,
    body: &'a mut dyn FnMut(&StepIn) -> Result<StepOut>,
) -> impl FnMut(&Erased, &[Erased], &[Erased]) -> super::grad::Stepped + 'a {
    move |s, c, x| {
        let mut out_rows: Vec<Vec<Erased>> = vec![Vec::new(); spec.outs.len()];
        let mut base = 0;
        for &(j, w) in shape.layout {
            let o = &spec.outs[j];
            out_rows[j] = if o.mitsot_layout() {
                o.taps
                    .iter()
                    .map(|&tap| c[base + (w as i64 + tap) as usize].clone())
                    .collect()
            } else {
                vec![c[base].clone()]
            };
            base += w;
        }
        let seq_rows = match shape.slots {
            None => x.iter().map(|r| vec![r.clone()]).collect(),
            Some(slots) => slots
                .iter()
                .map(|at| at.iter().map(|&k| x[k].clone()).collect())
                .collect(),
        };
        let input = StepIn {
            t: s.clone(),
            seq_rows,
            out_rows,
            non_seqs: spec.non_seqs.clone(),
        };
        let out = body(&input)?;
        let mut carry = Vec::new();
        let mut base = 0;
        for &(j, w) in shape.layout {
            if spec.outs[j].mitsot_layout() {
                carry.extend(c[base + 1..base + w].iter().cloned());
            }
            if let Some(r) = out.outs.get(j) {
                carry.push(r.clone());
            }
            base += w;
        }
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
