//! Running a scan: validation, the analysis trace, the rewrites (save-mem, push-out, removal of
//! unused inputs, merging), the choice between one kernel and stepped execution, both
//! executions, and the outputs as the caller asked for them. Every decision is logged under
//! `KILN_LOG=scan` and kept in the [`ScanReport`].

use super::analyze::{analyze, Analysis};
use super::erased::{Arrays, Erased};
use super::hook::{row_of, Hook, Installed, Subst};
use super::spec::{
    plan_storage, seq_span, step_count, Keep, OutSpec, Spec, StepIn, StepOut, Store,
};
use super::{ScanMode, ScanReport};
use kiln_core::control as cc;
use kiln_core::{Error, Handle, Op, ReduceOp, Result, VarId, VarType};

/// What a run hands back to a face.
pub(crate) struct RunOut {
    /// Per output: the rows the caller asked for, `[rows, row…]`.
    pub outputs: Vec<Erased>,
    /// Per recurrent output: its value after the last step (the initial row when none ran).
    pub finals: Vec<Option<Erased>>,
    /// Per recurrent output with `keep_states`: initial rows then every step's row.
    pub states: Vec<Option<Erased>>,
    pub report: ScanReport,
    /// The arrays the body captured from its environment (read by its kernels); `None` when
    /// the body has side effects (a gradient scan would repeat them).
    pub captured: Option<Vec<Erased>>,
    /// Per product of the body: its push-out over a sequence's rows, when a stepped run made one.
    pub pushed: Vec<Option<PushedRow>>,
    /// Per product of the body, with `Spec::save_products`: every step's result.
    pub saved: Vec<Option<Erased>>,
}

/// One reference to a variable, released on drop (for the ids built here).
type V = Handle;

/// How this module builds its values.
trait Build: Sized {
    fn lit(ty: VarType, v: u64) -> Self;
    fn op(op: Op, args: &[&Self]) -> Result<Self>;
    fn erased(self, shape: Vec<usize>) -> Erased;
    fn share(&self) -> Self;
}

impl Build for Handle {
    fn lit(ty: VarType, v: u64) -> V {
        V::own(kiln_core::literal(ty, v, 1))
    }
    fn op(op: Op, args: &[&V]) -> Result<V> {
        let ids: Vec<VarId> = args.iter().map(|a| a.id()).collect();
        kiln_core::op(op, &ids).map(V::own)
    }
    fn erased(self, shape: Vec<usize>) -> Erased {
        Erased::own(self.into_id(), shape)
    }
    fn share(&self) -> V {
        self.clone()
    }
}

fn log(report: &mut ScanReport, msg: String) {
    tracing::info!(target: "scan", "scan {}: {msg}", report.label);
    report.rewrites.push(msg);
}

/// The index type for flat positions up to `n`.
fn index_type(n: usize) -> VarType {
    if n < u32::MAX as usize {
        VarType::U32
    } else {
        VarType::U64
    }
}

/// `reverse` and `go_backwards` exclude each other.
pub(crate) fn check_direction(spec: &Spec) -> Result<()> {
    if spec.reverse && spec.go_backwards {
        return Err(Error::Scan(format!(
            "scan {}: both `reverse` and `go_backwards` are set; `go_backwards` reverses the inputs only, `reverse` inputs and outputs — choose one",
            spec.label
        )));
    }
    Ok(())
}

/// Check each output's initial state against its taps.
pub(crate) fn check_inits(spec: &Spec) -> Result<()> {
    let label = &spec.label;
    for (j, o) in spec.outs.iter().enumerate() {
        let Some(init) = &o.init else { continue };
        if o.mitsot_layout() {
            let win = o.window();
            if init.shape.first() != Some(&win) {
                return Err(Error::Scan(format!(
                    "scan {label}: {} has taps {:?}, which need an initial state of {win} rows (init[0] is the value at tap {}), but it has shape {:?}; give a [{win}, …] tensor",
                    spec.out_name(j),
                    o.taps,
                    -(win as i64),
                    init.shape
                )));
            }
        }
    }
    Ok(())
}

/// Make every declared input an evaluated array (rows are read from their buffers).
fn evaluate_inputs(spec: &Spec) -> Result<()> {
    let ids = spec.input_ids();
    let pending: Vec<VarId> = ids
        .into_iter()
        .filter(|&i| !kiln_core::is_evaluated(i) && kiln_core::literal_value(i).is_none())
        .collect();
    kiln_core::eval(&pending)?;
    // rows are read from a sequence's buffer: a literal one (`zeros`) gets one
    for s in &spec.seqs {
        if !kiln_core::is_evaluated(s.data.id()) {
            drop(V::own(kiln_core::make_opaque(s.data.id())?));
        }
    }
    Ok(())
}

pub(crate) fn run(
    mut spec: Spec,
    body: &mut dyn FnMut(&StepIn) -> Result<StepOut>,
) -> Result<RunOut> {
    let label = spec.label.clone();
    let rewrites = spec
        .rewrites
        .unwrap_or_else(kiln_core::config::scan_rewrites);
    check_direction(&spec)?;
    check_inits(&spec)?;
    let n_req = step_count(&spec)?;
    // inside another loop's symbolic trace (a scan in a scan's body): only a one-kernel scan with
    // evaluated inputs that stores no rows can become a loop in that kernel; anything else makes
    // the enclosing loop run step by step, where this scan runs for real
    let nested = cc::symbolic();
    if nested {
        let unevaluated = spec
            .input_ids()
            .into_iter()
            .any(|i| !kiln_core::is_evaluated(i) && kiln_core::literal_value(i).is_none());
        if unevaluated {
            let an = analyze(&spec, body)?;
            return nested_refusal(
                &spec,
                &an,
                n_req,
                "a scan over values the enclosing body computes",
            );
        }
    }
    if kiln_core::freeze::record::active() {
        // the step count is a constant of the kernels: a frozen function records anew for
        // sequences of another length rather than replaying the old count
        for s in &spec.seqs {
            kiln_core::freeze::record::observe_len(s.data.id());
        }
    }
    if !nested {
        evaluate_inputs(&spec)?;
    }
    let an = analyze(&spec, body)?;

    declare_outputs(&mut spec, &an.out_types, &an.out_rows, &label)?;
    check_analysis(&spec, &an, &label)?;
    let n_out = an.out_types.len();
    let mut report = new_report(&spec, &an, n_req, rewrites, &label);
    let rows = plan_rows(&spec, &an, n_req, rewrites, &mut report);
    if nested {
        let stores_rows = rows.stores.iter().any(|s| s.rows() > 0) || spec.keep_states;
        let why = if an.until {
            Some("reading its contents") // a while-scan reads its condition on the host
        } else if an.refusal.is_some() || lane_width(&spec, &an).is_err() {
            Some("a stepped scan")
        } else if stores_rows {
            Some("a scan that stores rows")
        } else {
            None
        };
        if let Some(how) = why {
            return nested_refusal(&spec, &an, n_req, how);
        }
    }
    let exec = execute(&spec, &an, body, &rows, rewrites, &label, &mut report)?;
    report.steps_run = exec.run;
    let post_out = push_out(&spec, &an, &rows.post, &exec, n_req, &mut report)?;
    report_in_place(&spec, &an, &exec, rows.steps, &mut report);
    let outputs = expose(&spec, &an, &exec, &rows, post_out, n_req)?;
    debug_assert_eq!(outputs.len(), n_out);
    Ok(RunOut {
        outputs,
        finals: exec.finals,
        states: exec.states,
        report,
        captured: (!an.effects).then(|| an.captured.clone()),
        pushed: exec.pushed,
        saved: exec.saved,
    })
}

/// Complete and check the outputs against what the body returns: every returned value when none
/// is declared (with the `keep`s asked for), the JAX face's per-step outputs after the carry; each
/// recurrent value keeps its type and shape; strict mode refuses captured arrays.
pub(crate) fn declare_outputs(
    spec: &mut Spec,
    out_types: &[VarType],
    out_rows: &[Vec<usize>],
    label: &str,
) -> Result<()> {
    let n_out = out_types.len();
    if spec.outs.is_empty() {
        for _ in 0..n_out {
            spec.outs.push(OutSpec {
                init: None,
                taps: Vec::new(),
                keep: Keep::All,
                owned: false,
            });
        }
        for (j, k) in std::mem::take(&mut spec.pending_keep) {
            match spec.outs.get_mut(j) {
                Some(o) => o.keep = k,
                None => {
                    return Err(Error::Scan(format!(
                    "scan {label}: `keep` names output {j}, but the body returns {n_out} output(s)"
                )))
                }
            }
        }
    } else if spec.carry_names.is_some() && n_out > spec.outs.len() {
        // the JAX face: the per-step outputs follow the carry
        while spec.outs.len() < n_out {
            spec.outs.push(OutSpec {
                init: None,
                taps: Vec::new(),
                keep: Keep::All,
                owned: false,
            });
        }
    } else if !spec.pending_keep.is_empty() {
        let (j, _) = spec.pending_keep[0];
        return Err(Error::Scan(format!(
            "scan {label}: `keep` names output {j}, but only {} output(s) are declared",
            spec.outs.len()
        )));
    }
    if spec.outs.len() != n_out {
        let declared = spec.outs.len();
        return Err(Error::Scan(if spec.carry_names.is_some() {
            format!("scan {label}: the body returned {n_out} value(s) but {declared} were expected")
        } else {
            format!(
                "scan {label}: the body returns {n_out} output(s) but {declared} are declared; declare one per returned value, with `.output_none()` for any output that does not feed back"
            )
        }));
    }
    for (j, o) in spec.outs.iter().enumerate() {
        if let (Some(init), Some(row)) = (&o.init, o.row_shape()) {
            let (ty, shape) = (out_types[j], &out_rows[j]);
            if ty != init.ty || shape != &row {
                return Err(Error::Scan(format!(
                    "scan {label}: {} changes from {} {row:?} (its initial state) to {ty} {shape:?} (what the body returns); a recurrent value must keep its type and shape — cast or reshape it in the body, or change the initial state",
                    spec.out_name(j),
                    init.ty
                )));
            }
        }
    }
    Ok(())
}

/// What the traced body shows that the spec forbids: captured arrays under `strict`, `until`
/// with `reverse`.
fn check_analysis(spec: &Spec, an: &Analysis, label: &str) -> Result<()> {
    if spec.strict && !an.captured.is_empty() {
        return Err(Error::Scan(format!(
            "scan {label}: strict mode, and the body uses {} captured from its environment; pass {} with `.non_sequence(..)` (or turn strict off)",
            an.captured_names
                .iter()
                .map(|n| format!("`{n}`"))
                .collect::<Vec<_>>()
                .join(", "),
            if an.captured.len() == 1 { "it" } else { "them" }
        )));
    }
    check_until(spec, an.until)
}

/// `until` and `reverse` exclude each other.
pub(crate) fn check_until(spec: &Spec, until: bool) -> Result<()> {
    if until && spec.reverse {
        return Err(Error::Scan(format!(
            "scan {}: `until` with `reverse`: the stored rows would depend on where the loop stops; use `go_backwards` instead",
            spec.label
        )));
    }
    Ok(())
}

/// The scan's report before it runs: its inputs, and the rewrites found by the analysis.
fn new_report(spec: &Spec, an: &Analysis, n_req: usize, rewrites: bool, label: &str) -> ScanReport {
    let mut report = ScanReport {
        label: label.to_string(),
        steps_requested: n_req,
        inputs: an.inputs.names.clone(),
        connection: an.connection.clone(),
        captured: an.captured_names.clone(),
        ..Default::default()
    };
    if !an.captured.is_empty() {
        log(
            &mut report,
            format!(
                "captured arrays become non-sequences: {}",
                an.captured_names.join(", ")
            ),
        );
    }
    if rewrites {
        if !an.unused.is_empty() {
            report.inputs_removed = an.unused.len();
            log(
                &mut report,
                format!(
                    "removed unused inputs: {} (nothing reads them; sequences still bound the step count)",
                    an.unused.join(", ")
                ),
            );
        }
        let consts = spec
            .non_seqs
            .iter()
            .enumerate()
            .filter(|(_, e)| kiln_core::literal_value(e.id()).is_some())
            .map(|(k, _)| format!("non-sequence {k}"))
            .collect::<Vec<_>>();
        if !consts.is_empty() {
            log(
                &mut report,
                format!(
                    "constant inputs folded into the body: {}",
                    consts.join(", ")
                ),
            );
        }
        let dups = duplicate_inputs(spec);
        if dups > 0 {
            report.merged += dups;
            log(
                &mut report,
                format!("merged {dups} identical outer input(s): their rows are read once"),
            );
        }
        if !an.same_outputs.is_empty() {
            report.merged += an.same_outputs.len();
            log(
                &mut report,
                format!(
                    "merged identical outputs {:?} (later, earlier): computed once",
                    an.same_outputs
                ),
            );
        }
    }

    report
}

/// Which steps run, which rows each output stores, which outputs are a recurrent output's final
/// state (no buffer) and which are pushed out of the loop as one product (save-mem and
/// PushOutScanOutput), each decision logged in the report.
struct Rows {
    steps: usize,
    stores: Vec<Store>,
    from_final: Vec<bool>,
    post: Vec<Post>,
}

fn plan_rows(
    spec: &Spec,
    an: &Analysis,
    n_req: usize,
    rewrites: bool,
    report: &mut ScanReport,
) -> Rows {
    let n_out = an.out_types.len();
    // save-mem: which steps run and which rows each output stores
    let keeps: Vec<Keep> = spec.outs.iter().map(|o| o.keep.clone()).collect();
    let (steps, mut stores) = if rewrites && !spec.reverse {
        plan_storage(&keeps, n_req, an.until, spec.carry_names.is_some())
    } else {
        (n_req, vec![Store::Range(0, n_req); n_out])
    };
    // a recurrent output of which only the last row is used needs no buffer: that row is the
    // loop's final state
    let from_final: Vec<bool> = spec
        .outs
        .iter()
        .map(|o| {
            rewrites
                && !an.until
                && !spec.reverse
                && o.init.is_some()
                && matches!(o.keep, Keep::Last(1) | Keep::Row(-1))
        })
        .collect();
    for (j, &f) in from_final.iter().enumerate() {
        if f {
            stores[j] = Store::Nothing;
        }
    }
    // push-out of trailing work (PushOutScanOutput): an output that is a recurrent output's new
    // value times a loop-invariant matrix is one product over all stored steps, after the loop
    let mut post: Vec<Post> = Vec::new();
    if rewrites {
        for (k, p) in an.products.iter().enumerate() {
            let (Some(j), Some(m), Some(_)) = (p.a_is_output, p.is_output, &p.invariant_b) else {
                continue;
            };
            let ok = j != m
                && spec.outs[j].init.is_some()
                && spec.outs[m].init.is_none()
                && spec.outs[m].keep == Keep::All
                && stores[j] == Store::Range(0, n_req)
                && an.out_rows[j] == [p.m, p.k]
                && an.out_rows[m] == [p.m, p.n]
                && !post.iter().any(|q| q.output == m);
            if ok {
                stores[m] = Store::Nothing;
                post.push(Post {
                    product: k,
                    from: j,
                    output: m,
                });
            }
        }
    }
    if rewrites && steps < n_req {
        log(
            report,
            format!("save-mem: no output uses steps past {steps}: the loop runs {steps} of {n_req} steps"),
        );
    }
    for (j, &f) in from_final.iter().enumerate() {
        if f {
            log(
                report,
                format!(
                    "save-mem: only the last row of {} is used: it is the loop's final state, no buffer",
                    spec.out_name(j)
                ),
            );
        }
    }
    if rewrites {
        for (j, s) in stores.iter().enumerate() {
            if from_final[j] {
                continue;
            }
            if s.rows() < n_req.min(steps) || matches!(s, Store::Ring(_)) {
                log(
                    report,
                    format!(
                        "save-mem: {} stores {} row(s) ({s:?}) instead of {n_req}",
                        spec.out_name(j),
                        s.rows()
                    ),
                );
            }
        }
    }
    report.buffer_rows = stores
        .iter()
        .zip(&from_final)
        .map(|(s, &f)| if f { 1 } else { s.rows() })
        .collect();
    report.ops_in_loop = an.ops_in_loop;

    Rows {
        steps,
        stores,
        from_final,
        post,
    }
}

/// Run the scan in the mode it allows (empty, invariant, fused into one kernel, or step by step),
/// saying which and why in the report.
#[allow(clippy::too_many_arguments)]
fn execute(
    spec: &Spec,
    an: &Analysis,
    body: &mut dyn FnMut(&StepIn) -> Result<StepOut>,
    rows: &Rows,
    rewrites: bool,
    label: &str,
    report: &mut ScanReport,
) -> Result<Exec> {
    let (steps, stores, post) = (rows.steps, &rows.stores, &rows.post);
    Ok(if steps == 0 {
        report.mode = "empty";
        report.mode_reason = "no step to run".into();
        empty(spec, an)?
    } else if rewrites && an.invariant {
        report.mode = "invariant";
        report.mode_reason =
            "no output depends on the step, a sequence or an earlier output: computed once".into();
        report.ops_hoisted = an.ops_invariant + an.ops_in_loop;
        report.ops_in_loop = 0;
        log(
            report,
            "push-out: the whole body is loop-invariant; no loop is emitted".into(),
        );
        invariant(spec, an, body, steps, stores)?
    } else {
        let width = lane_width(spec, an);
        let outer_recording = kiln_core::freeze::record::active();
        let fusable = match (&an.refusal, width) {
            (Some((l, how)), _) => Err(format!(
                "the body asks for {how} of {l}, which needs other lanes' values"
            )),
            (None, Err(why)) => Err(why),
            (None, Ok(0)) => Err("the rows are empty".into()),
            (None, Ok(_)) if outer_recording && an.until => {
                Err("a while-scan inside a frozen function reads its condition at each step".into())
            }
            (None, Ok(w)) => Ok(w),
        };
        match (spec.mode, fusable) {
            (ScanMode::Fused, Err(why)) => {
                return Err(Error::Scan(format!(
                    "scan {label}: {FUSED_REFUSAL}: {why}; use ScanMode::Auto (or Stepped) to run it one step at a time"
                )))
            }
            (ScanMode::Auto | ScanMode::Fused, Ok(w)) => {
                report.mode = "fused";
                report.mode_reason = format!(
                    "the body treats the {w} lanes of a row independently: one kernel, each lane looping over the steps"
                );
                report.ops_hoisted = an.ops_invariant;
                report.loops_emitted = 1;
                tracing::info!(target: "scan", "scan {label}: {}", report.mode_reason);
                fused(spec, an, body, steps, stores, w)?
            }
            (_, why) => {
                report.mode = "stepped";
                report.mode_reason = match (spec.mode, why) {
                    (ScanMode::Stepped, _) => "asked for".into(),
                    (_, Err(why)) => why,
                    (_, Ok(_)) => unreachable!(),
                };
                report.loops_emitted = 1;
                tracing::info!(target: "scan", "scan {label}: stepped: {}", report.mode_reason);
                stepped(spec, an, body, steps, stores, rewrites, post, report)?
            }
        }
    })
}

/// The outputs pushed out of the loop: one product over all the steps' stored rows each.
fn push_out(
    spec: &Spec,
    an: &Analysis,
    post: &[Post],
    exec: &Exec,
    n_req: usize,
    report: &mut ScanReport,
) -> Result<Vec<Option<Erased>>> {
    let n_out = an.out_types.len();
    let mut post_out: Vec<Option<Erased>> = (0..n_out).map(|_| None).collect();
    for q in post {
        let p = &an.products[q.product];
        let b = p.invariant_b.as_ref().expect("invariant");
        let run = exec.run;
        let e = if run == 0 {
            empty_rows(an.out_types[q.output], &an.out_rows[q.output])?
        } else {
            let buf = exec.bufs[q.from].as_ref().expect("stored in full");
            let w = p.m * p.k;
            let rows = rows_view(
                buf,
                an.out_types[q.from],
                &an.out_rows[q.from],
                w,
                n_req,
                0,
                run,
                None,
            )?;
            let id = kiln_core::matmul(rows.id(), b.id(), run * p.m, p.k, p.n)?;
            Erased::own(id, vec![run, p.m, p.n])
        };
        post_out[q.output] = Some(e);
        report.matmuls_pushed_out += 1;
        log(
            report,
            format!(
                "push-out (PushOutScanOutput): output {} = {}'s rows × an invariant [{}, {}], one product over all {run} steps after the loop",
                q.output,
                spec.out_name(q.from),
                p.k,
                p.n
            ),
        );
    }
    Ok(post_out)
}

/// Say in the report which final states were written over their initial state's buffer, and
/// why the other owned ones were not.
fn report_in_place(spec: &Spec, an: &Analysis, exec: &Exec, steps: usize, report: &mut ScanReport) {
    let label = report.label.clone();
    report.in_place = exec.in_place.clone();
    for (j, o) in spec.outs.iter().enumerate() {
        if o.owned && !exec.in_place.contains(&j) {
            log(
                report,
                format!(
                    "in place: not applied to {}: update-in-place writes a result over an operand only when no handle holds it, and the scan holds its initial states until the loop has run (ScanInplace is not built); its states use buffers from the allocator's cache",
                    spec.out_name(j)
                ),
            );
        }
    }
    for &j in &exec.in_place {
        log(
            report,
            format!(
                "in place: {}'s final state is written over its initial state's buffer (the scan owns it)",
                spec.out_name(j)
            ),
        );
    }
    if an.until && exec.run < steps {
        tracing::info!(target: "scan", "scan {label}: `until` held after step {}", exec.run - 1);
    }
}

/// The rows each output exposes: a view of its buffer (ring or range), its final state, its
/// pushed-out product, or nothing.
fn expose(
    spec: &Spec,
    an: &Analysis,
    exec: &Exec,
    rows: &Rows,
    mut post_out: Vec<Option<Erased>>,
    n_req: usize,
) -> Result<Vec<Erased>> {
    let (stores, from_final) = (&rows.stores, &rows.from_final);
    let n_out = an.out_types.len();
    let mut outputs = Vec::with_capacity(n_out);
    for (j, o) in spec.outs.iter().enumerate() {
        let row = an.out_rows[j].clone();
        let w: usize = row.iter().product();
        let ty = an.out_types[j];
        let (lo, hi) = wanted(&o.keep, exec.run, n_req, an.until);
        let e = match (&exec.bufs[j], &stores[j]) {
            (_, _) if hi <= lo => empty_rows(ty, &row)?,
            _ if post_out[j].is_some() => {
                let e = post_out[j].take().expect("checked");
                if (lo, hi) == (0, exec.run) {
                    e
                } else {
                    let buf = V::borrow(e.id());
                    rows_view(&buf, ty, &row, w, exec.run, lo, hi - lo, None)?
                }
            }
            _ if from_final[j] => {
                let f = exec.finals[j]
                    .as_ref()
                    .expect("a recurrent output's final state");
                let mut shape = vec![1];
                shape.extend_from_slice(&row);
                Erased::borrow(f.id(), shape)
            }
            (Some(buf), Store::Range(a, b)) => {
                debug_assert!(lo >= *a && hi <= *b.max(&exec.run));
                let rows_in_buf = b - a;
                rows_view(buf, ty, &row, w, rows_in_buf, lo - a, hi - lo, None)?
            }
            (Some(buf), Store::Ring(k)) => {
                rows_view(buf, ty, &row, w, *k, lo % k, hi - lo, Some(*k))?
            }
            _ => empty_rows(ty, &row)?,
        };
        outputs.push(e);
    }
    Ok(outputs)
}

/// Inside a symbolic trace, a scan that cannot be part of the enclosing kernel: refuse (the
/// enclosing loop then runs step by step and this scan for real) and return zeros of the right
/// shapes so that the trace can finish (it is thrown away).
fn nested_refusal(spec: &Spec, an: &Analysis, n_req: usize, how: &str) -> Result<RunOut> {
    cc::refuse_request(format!("scan {}", spec.label), how);
    // stand-ins that depend on everything the scan reads, so that the enclosing analysis sees
    // what its outputs depend on
    let mut reads = spec.input_ids();
    reads.extend(an.captured.iter().map(|c| c.id()));
    let zeros = |ty: VarType, shape: Vec<usize>| -> Result<Erased> {
        let n: usize = shape.iter().product();
        // (its contents are never read: the enclosing trace is thrown away)
        let out = kiln_core::uninit(ty, n)?;
        kiln_core::inspect::note_stand_in(out, &reads);
        Ok(Erased::own(out, shape))
    };
    let outputs = (0..an.out_types.len())
        .map(|j| {
            let mut shape = vec![n_req];
            shape.extend_from_slice(&an.out_rows[j]);
            zeros(an.out_types[j], shape)
        })
        .collect::<Result<_>>()?;
    let finals = spec
        .outs
        .iter()
        .enumerate()
        .map(|(j, o)| {
            o.init
                .as_ref()
                .map(|_| zeros(an.out_types[j], an.out_rows[j].clone()))
                .transpose()
        })
        .collect::<Result<_>>()?;
    let states = spec.outs.iter().map(|_| None).collect();
    Ok(RunOut {
        outputs,
        finals,
        states,
        report: ScanReport {
            label: spec.label.clone(),
            mode: "nested",
            mode_reason: format!(
                "inside another loop's trace: {how} makes the enclosing loop run step by step"
            ),
            ..Default::default()
        },
        captured: None,
        pushed: Vec::new(),
        saved: Vec::new(),
    })
}

/// An output computed after the loop from a stored recurrent output (PushOutScanOutput).
struct Post {
    /// The body's product (in call order).
    product: usize,
    /// The recurrent output whose rows are the left operand.
    from: usize,
    /// The output it computes.
    output: usize,
}

/// Identical sequences (same array and taps) and non-sequences.
fn duplicate_inputs(spec: &Spec) -> usize {
    let mut n = 0;
    for (i, s) in spec.seqs.iter().enumerate() {
        if spec.seqs[..i]
            .iter()
            .any(|p| p.data.id() == s.data.id() && p.taps == s.taps)
        {
            n += 1;
        }
    }
    for (k, x) in spec.non_seqs.iter().enumerate() {
        if spec.non_seqs[..k].iter().any(|p| p.id() == x.id()) {
            n += 1;
        }
    }
    n
}

/// Steps `[lo, hi)` the caller asked of an output after `run` steps. Counting from the end is
/// from the scan's full length `n_req` (save-mem may have stopped earlier), or from the steps
/// that ran in a while-scan.
fn wanted(keep: &Keep, run: usize, n_req: usize, until: bool) -> (usize, usize) {
    let end = if until { run } else { n_req };
    let clamp = |lo: usize, hi: usize| (lo.min(run), hi.min(run).max(lo.min(run)));
    match *keep {
        Keep::All => (0, run),
        Keep::Nothing => (0, 0),
        Keep::Last(k) => clamp(end.saturating_sub(k), end),
        Keep::Rows(ref r) => clamp(r.start, r.end),
        Keep::Row(i) if i >= 0 => clamp(i as usize, i as usize + 1),
        Keep::Row(i) => {
            let back = i.unsigned_abs();
            if back <= end {
                clamp(end - back, end - back + 1)
            } else {
                (0, 0)
            }
        }
    }
}

/// An empty `[0, row…]` output.
fn empty_rows(ty: VarType, row: &[usize]) -> Result<Erased> {
    let mut shape = vec![0];
    shape.extend_from_slice(row);
    Ok(Erased::own(kiln_core::literal(ty, 0, 0), shape))
}

/// `count` rows of `w` elements of `buf` (holding `cap` rows), from row `first`; in a ring of
/// `ring` rows the rows wrap around.
#[allow(clippy::too_many_arguments)]
fn rows_view(
    buf: &V,
    ty: VarType,
    row: &[usize],
    w: usize,
    cap: usize,
    first: usize,
    count: usize,
    ring: Option<usize>,
) -> Result<Erased> {
    let mut shape = vec![count];
    shape.extend_from_slice(row);
    if first == 0 && count == cap {
        return Ok(buf.share().erased(shape));
    }
    let ity = index_type(cap * w + w);
    let c = V::own(kiln_core::counter(ity, count * w)?);
    let idx = if let Some(k) = ring {
        // ((first + c / w) % k) * w + c % w
        let wl = V::lit(ity, w as u64);
        let r = V::op(Op::Div, &[&c, &wl])?;
        let l = V::op(Op::Rem, &[&c, &wl])?;
        let f = V::lit(ity, first as u64);
        let kk = V::lit(ity, k as u64);
        let r = V::op(Op::Add, &[&r, &f])?;
        let r = V::op(Op::Rem, &[&r, &kk])?;
        let r = V::op(Op::Mul, &[&r, &wl])?;
        V::op(Op::Add, &[&r, &l])?
    } else {
        let off = V::lit(ity, (first * w) as u64);
        V::op(Op::Add, &[&c, &off])?
    };
    let all = V::lit(VarType::Bool, 1);
    let _ = ty;
    let g = kiln_core::gather_view(buf.id(), idx.id(), all.id())?;
    Ok(Erased::own(g, shape))
}

/// The width of the one-kernel loop: every output row and recurrent row has the same number of
/// elements `w`, and every sequence row `w` or 1.
fn lane_width(spec: &Spec, an: &Analysis) -> std::result::Result<usize, String> {
    let w = an
        .out_rows
        .iter()
        .map(|r| r.iter().product::<usize>())
        .max()
        .unwrap_or(1);
    for (j, r) in an.out_rows.iter().enumerate() {
        let n: usize = r.iter().product();
        if n != w {
            return Err(format!(
                "{} has rows of {n} elements but another output {w}",
                spec.out_name(j)
            ));
        }
    }
    for (i, s) in spec.seqs.iter().enumerate() {
        let n: usize = s.data.shape[1..].iter().product();
        if n != w && n != 1 {
            return Err(format!(
                "sequence {i} has rows of {n} elements but the outputs {w}"
            ));
        }
    }
    Ok(w)
}

/// What an execution produced.
struct Exec {
    run: usize,
    /// Per output: its stored buffer (`None`: nothing stored).
    bufs: Vec<Option<V>>,
    finals: Vec<Option<Erased>>,
    states: Vec<Option<Erased>>,
    /// Outputs computed over their initial state's buffer.
    in_place: Vec<usize>,
    /// Per product of the body (stepped runs): the product over every row of a sequence that
    /// replaced it (PushOutDot1), see [`PushedRow`].
    pushed: Vec<Option<PushedRow>>,
    /// Per product of the body, with `save_products`: every step's result, row `t` for step `t`.
    saved: Vec<Option<Erased>>,
}

/// A product `x_t · B` of the body computed for every row of a sequence at once: row `r` of
/// `all` (`m × n` elements) is row `r` of the sequence times `B`.
#[derive(Clone)]
pub(crate) struct PushedRow {
    pub all: Erased,
    pub m: usize,
    pub n: usize,
}

/// The initial rows of output `o` (`window` of them, oldest first), flat `w` elements each.
fn init_rows(o: &OutSpec, w: usize) -> Result<Vec<V>> {
    let Some(init) = &o.init else {
        return Ok(Vec::new());
    };
    if !o.mitsot_layout() {
        return Ok(vec![V::borrow(init.id())]);
    }
    (0..o.window())
        .map(|r| {
            let ity = index_type((r + 1) * w + 1);
            let c = V::own(kiln_core::counter(ity, w)?);
            let off = V::lit(ity, (r * w) as u64);
            let idx = V::op(Op::Add, &[&c, &off])?;
            let all = V::lit(VarType::Bool, 1);
            kiln_core::gather(init.id(), idx.id(), all.id()).map(V::own)
        })
        .collect()
}

/// A fresh buffer of `len` elements for rows the loop writes before anyone reads them.
fn output_buffer(ty: VarType, len: usize) -> Result<V> {
    if kiln_core::freeze::record::active() {
        // an enclosing frozen function must see (and replay) the allocation
        let z = V::own(kiln_core::literal(ty, 0, len));
        kiln_core::eval(&[z.id()])?;
        let id = kiln_core::make_opaque(z.id())?;
        return Ok(V::own(id));
    }
    kiln_core::uninit(ty, len).map(V::own)
}

/// `keep_states` buffers: `window + steps` rows, the initial rows written first.
fn state_buffers(spec: &Spec, an: &Analysis, steps: usize) -> Result<Vec<Option<V>>> {
    spec.outs
        .iter()
        .enumerate()
        .map(|(j, o)| {
            if !spec.keep_states || o.init.is_none() {
                return Ok(None);
            }
            let w: usize = an.out_rows[j].iter().product();
            let win = o.window();
            let ty = an.out_types[j];
            let mut buf = output_buffer(ty, (win + steps) * w)?;
            let init = o.init.as_ref().expect("recurrent");
            let ity = index_type((win + steps) * w + 1);
            let idx = V::own(kiln_core::counter(ity, win * w)?);
            let all = V::lit(VarType::Bool, 1);
            kiln_core::scatter(buf.id_mut(), init.id(), idx.id(), all.id(), ReduceOp::None)?;
            Ok(Some(buf))
        })
        .collect()
}

/// The states output of a `keep_states` buffer after `run` steps.
fn states_out(
    bufs: Vec<Option<V>>,
    spec: &Spec,
    an: &Analysis,
    steps: usize,
    run: usize,
) -> Result<Vec<Option<Erased>>> {
    bufs.into_iter()
        .enumerate()
        .map(|(j, b)| {
            b.map(|b| {
                let win = spec.outs[j].window();
                let w: usize = an.out_rows[j].iter().product();
                rows_view(
                    &b,
                    an.out_types[j],
                    &an.out_rows[j],
                    w,
                    win + steps,
                    0,
                    win + run,
                    None,
                )
            })
            .transpose()
        })
        .collect()
}

/// No step runs: empty outputs of the right types; the finals are the initial states.
fn empty(spec: &Spec, an: &Analysis) -> Result<Exec> {
    let finals = spec
        .outs
        .iter()
        .enumerate()
        .map(|(j, o)| {
            let w: usize = an.out_rows[j].iter().product();
            Ok(match o.init {
                Some(_) => Some(
                    init_rows(o, w)?
                        .pop()
                        .expect("a window")
                        .erased(an.out_rows[j].clone()),
                ),
                None => None,
            })
        })
        .collect::<Result<Vec<_>>>()?;
    let sbufs = state_buffers(spec, an, 0)?;
    let states = states_out(sbufs, spec, an, 0, 0)?;
    Ok(Exec {
        run: 0,
        bufs: spec.outs.iter().map(|_| None).collect(),
        finals,
        states,
        in_place: Vec::new(),
        pushed: Vec::new(),
        saved: Vec::new(),
    })
}

/// The step's inputs from evaluated rows: `t`, sequence rows at step `t`, `windows`.
fn step_input(
    spec: &Spec,
    t: &V,
    rows: Vec<Vec<Erased>>,
    windows: &[Vec<Erased>],
) -> Result<StepIn> {
    let t32 = if kiln_core::var_type(t.id()) == VarType::U32 {
        t.share()
    } else {
        V::own(kiln_core::convert(Op::Cast, t.id(), VarType::U32)?)
    };
    let out_rows = spec
        .outs
        .iter()
        .enumerate()
        .map(|(j, o)| {
            let win = o.window();
            o.taps
                .iter()
                .map(|&tap| windows[j][(win as i64 + tap) as usize].clone())
                .collect()
        })
        .collect();
    Ok(StepIn {
        t: t32.erased(vec![]),
        seq_rows: rows,
        out_rows,
        non_seqs: spec.non_seqs.clone(),
    })
}

/// Row indices of each sequence tap at step `t` (index type `ity`).
fn seq_row_index(spec: &Spec, t: &V, ity: VarType) -> Result<Vec<Vec<V>>> {
    let backwards = spec.go_backwards || spec.reverse;
    spec.seqs
        .iter()
        .map(|s| {
            let len = s.data.shape[0];
            let (off, _) = seq_span(&s.taps, len);
            s.taps
                .iter()
                .map(|&tap| {
                    let shift = (off + tap) as u64;
                    if backwards {
                        // row len - 1 - (t + shift)
                        let top = V::lit(ity, (len as u64).wrapping_sub(1).wrapping_sub(shift));
                        V::op(Op::Sub, &[&top, t])
                    } else {
                        let sh = V::lit(ity, shift);
                        V::op(Op::Add, &[t, &sh])
                    }
                })
                .collect()
        })
        .collect()
}

/// Sequence rows at the given row indices.
fn seq_rows_at(spec: &Spec, idx: &[Vec<V>], lane: Option<&V>) -> Result<Vec<Vec<Erased>>> {
    spec.seqs
        .iter()
        .zip(idx)
        .map(|(s, per_tap)| {
            let row: Vec<usize> = s.data.shape[1..].to_vec();
            let w: usize = row.iter().product();
            per_tap
                .iter()
                .map(|r| {
                    let g = match lane {
                        // one kernel: the row's lane is the kernel's lane
                        Some(lane) if w > 1 => {
                            let ity = kiln_core::var_type(r.id());
                            let wl = V::lit(ity, w as u64);
                            let base = V::op(Op::Mul, &[r, &wl])?;
                            let i = V::op(Op::Add, &[&base, lane])?;
                            let all = V::lit(VarType::Bool, 1);
                            V::own(kiln_core::gather(s.data.id(), i.id(), all.id())?)
                        }
                        _ => V::own(row_of(s.data.id(), r.id(), w)?),
                    };
                    Ok(g.erased(row.clone()))
                })
                .collect()
        })
        .collect()
}

/// The position (row) in output `j`'s buffer for step `t`, and whether the step is stored.
fn store_position(
    store: &Store,
    t: &V,
    ity: VarType,
    steps: usize,
    reverse: bool,
) -> Result<Option<(V, Option<V>)>> {
    Ok(match *store {
        Store::Nothing => None,
        Store::Range(a, b) if reverse => {
            debug_assert_eq!((a, b), (0, steps));
            let top = V::lit(ity, (steps - 1) as u64);
            Some((V::op(Op::Sub, &[&top, t])?, None))
        }
        Store::Range(a, b) => {
            let av = V::lit(ity, a as u64);
            let pos = V::op(Op::Sub, &[t, &av])?;
            let mask = if a == 0 && b >= steps {
                None
            } else {
                let ge = V::op(Op::Ge, &[t, &av])?;
                let bv = V::lit(ity, b as u64);
                let lt = V::op(Op::Lt, &[t, &bv])?;
                Some(V::op(Op::And, &[&ge, &lt])?)
            };
            Some((pos, mask))
        }
        Store::Ring(k) => {
            let kv = V::lit(ity, k as u64);
            Some((V::op(Op::Rem, &[t, &kv])?, None))
        }
    })
}

/// Scatter `value` (a row of `w`) into `buf` at row `pos` (masked).
pub(super) fn store_row(
    buf: &mut VarId,
    value: VarId,
    pos: &V,
    mask: Option<&V>,
    w: usize,
    lane: Option<&V>,
) -> Result<()> {
    let ity = kiln_core::var_type(pos.id());
    let wl = V::lit(ity, w as u64);
    let base = V::op(Op::Mul, &[pos, &wl])?;
    let own_lane;
    let lane = match lane {
        Some(l) if w > 1 => l,
        _ if w > 1 => {
            own_lane = V::own(kiln_core::counter(ity, w)?);
            &own_lane
        }
        _ => {
            own_lane = V::lit(ity, 0);
            &own_lane
        }
    };
    let idx = V::op(Op::Add, &[&base, lane])?;
    let all = V::lit(VarType::Bool, 1);
    let m = mask.unwrap_or(&all);
    kiln_core::scatter(buf, value, idx.id(), m.id(), ReduceOp::None)
}

/// A fully invariant body: computed once, its rows repeated.
fn invariant(
    spec: &Spec,
    an: &Analysis,
    body: &mut dyn FnMut(&StepIn) -> Result<StepOut>,
    steps: usize,
    stores: &[Store],
) -> Result<Exec> {
    let ity = VarType::U32;
    let t = V::lit(ity, 0);
    let windows: Vec<Vec<Erased>> = spec
        .outs
        .iter()
        .enumerate()
        .map(|(j, o)| {
            let w: usize = an.out_rows[j].iter().product();
            Ok(init_rows(o, w)?
                .into_iter()
                .map(|v| v.erased(an.out_rows[j].clone()))
                .collect())
        })
        .collect::<Result<_>>()?;
    let idx = seq_row_index(spec, &t, ity)?;
    let rows = seq_rows_at(spec, &idx, None)?;
    let input = step_input(spec, &t, rows, &windows)?;
    let out = body(&input)?;
    let mut bufs = Vec::new();
    let mut finals = Vec::new();
    for (j, y) in out.outs.iter().enumerate() {
        let w = y.numel();
        let rows = stores[j].rows();
        bufs.push(if rows == 0 {
            None
        } else {
            // rows × the value: a view of one evaluated row
            let ity = index_type(rows * w + 1);
            let c = V::own(kiln_core::counter(ity, rows * w)?);
            // (one index per stored element, also when a row is one element)
            let wl = V::lit(ity, w as u64);
            let idx = V::op(Op::Rem, &[&c, &wl])?;
            kiln_core::eval(&[y.id()])?;
            let all = V::lit(VarType::Bool, 1);
            Some(V::own(kiln_core::gather_view(y.id(), idx.id(), all.id())?))
        });
        finals.push(spec.outs[j].init.as_ref().map(|_| y.clone()));
    }
    let states = spec
        .outs
        .iter()
        .enumerate()
        .map(|(j, o)| {
            if !spec.keep_states || o.init.is_none() {
                return Ok(None);
            }
            // the initial rows, then the same value at every step
            let w: usize = an.out_rows[j].iter().product();
            let mut parts: Vec<V> = init_rows(o, w)?;
            let y = &out.outs[j];
            for _ in 0..steps {
                parts.push(V::borrow(y.id()));
            }
            concat_rows(&parts, an.out_types[j], &an.out_rows[j], w).map(Some)
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(Exec {
        run: steps,
        bufs,
        finals,
        states,
        in_place: Vec::new(),
        pushed: Vec::new(),
        saved: Vec::new(),
    })
}

/// Rows (each `w` elements) stacked into one evaluated array `[n, row…]`.
fn concat_rows(parts: &[V], ty: VarType, row: &[usize], w: usize) -> Result<Erased> {
    let n = parts.len();
    let mut buf = output_buffer(ty, n * w)?;
    let ity = index_type(n * w + 1);
    for (r, p) in parts.iter().enumerate() {
        let pos = V::lit(ity, r as u64);
        store_row(buf.id_mut(), p.id(), &pos, None, w, None)?;
    }
    let mut shape = vec![n];
    shape.extend_from_slice(row);
    Ok(buf.erased(shape))
}

/// One kernel: each lane loops over the steps with the state in registers, reading sequence
/// rows and writing output rows directly.
fn fused(
    spec: &Spec,
    an: &Analysis,
    body: &mut dyn FnMut(&StepIn) -> Result<StepOut>,
    steps: usize,
    stores: &[Store],
    w: usize,
) -> Result<Exec> {
    let label = &spec.label;
    let n_out = spec.outs.len();
    let longest = spec
        .seqs
        .iter()
        .map(|s| s.data.numel())
        .chain(stores.iter().map(|s| s.rows() * w))
        .max()
        .unwrap_or(0)
        .max((steps + 2) * w);
    let ity = index_type(longest + w + 2);
    // buffers for the stored rows
    let mut bufs: Vec<Option<V>> = stores
        .iter()
        .zip(&an.out_types)
        .map(|(s, &ty)| {
            if s.rows() == 0 {
                Ok(None)
            } else {
                output_buffer(ty, s.rows() * w).map(Some)
            }
        })
        .collect::<Result<_>>()?;
    let mut sbufs = state_buffers(spec, an, steps)?;
    // loop state: the step, `until`'s flag, each recurrent output's window (oldest first)
    let mut inits: Vec<V> = vec![V::lit(ity, 0)];
    if an.until {
        inits.push(V::lit(VarType::Bool, 0));
    }
    let first_window = inits.len();
    let mut window_at = Vec::new();
    for o in &spec.outs {
        window_at.push(inits.len());
        inits.extend(init_rows(o, w)?);
    }
    let like = inits
        .iter()
        .find(|v| kiln_core::size(v.id()) == w)
        .map(|v| v.id())
        .unwrap_or(inits[0].id());
    let phis: Vec<V> = inits
        .iter()
        .enumerate()
        .map(|(k, v)| {
            // the step and the `until` flag are the same in every lane: one element, as the body
            // sees them (`s.t()` is a scalar)
            let n = if k < first_window { 1 } else { w };
            V::own(cc::placeholder(kiln_core::var_type(v.id()), n, k, like))
        })
        .collect();
    // a panic in the body discards what the trace made (its side effects hold placeholders)
    let trace = crate::control::Trace::enter()?;
    let traced = (|| -> Result<(Vec<V>, V)> {
        let t = &phis[0];
        let lane = V::own(kiln_core::counter(ity, w)?);
        let idx = seq_row_index(spec, t, ity)?;
        let rows = seq_rows_at(spec, &idx, Some(&lane))?;
        let windows: Vec<Vec<Erased>> = spec
            .outs
            .iter()
            .enumerate()
            .map(|(j, o)| {
                (0..o.window())
                    .map(|k| {
                        phis[window_at[j] + k]
                            .share()
                            .erased(an.out_rows[j].clone())
                    })
                    .collect()
            })
            .collect();
        let input = step_input(spec, t, rows, &windows)?;
        let out = body(&input)?;
        if out.outs.len() != n_out {
            return Err(Error::Scan(format!(
                "scan {label}: the body returned {} output(s) this time and {n_out} before; it must return the same outputs at every step",
                out.outs.len()
            )));
        }
        let one = V::lit(ity, 1);
        let mut nexts = vec![V::op(Op::Add, &[t, &one])?];
        if let Some(u) = &out.until {
            nexts.push(V::borrow(u.id()));
        }
        for (j, o) in spec.outs.iter().enumerate() {
            let win = o.window();
            for k in 1..win {
                nexts.push(phis[window_at[j] + k].share());
            }
            if win > 0 {
                nexts.push(V::borrow(out.outs[j].id()));
            }
        }
        for (j, y) in out.outs.iter().enumerate() {
            if let (Some(buf), Some((pos, mask))) = (
                &mut bufs[j],
                store_position(&stores[j], t, ity, steps, spec.reverse)?,
            ) {
                store_row(buf.id_mut(), y.id(), &pos, mask.as_ref(), w, Some(&lane))?;
            }
            if let Some(sb) = &mut sbufs[j] {
                let win = V::lit(ity, spec.outs[j].window() as u64);
                let pos = V::op(Op::Add, &[t, &win])?;
                store_row(sb.id_mut(), y.id(), &pos, None, w, Some(&lane))?;
            }
        }
        let limit = V::lit(ity, steps as u64);
        let mut cond = V::op(Op::Lt, &[t, &limit])?;
        if an.until {
            let go = V::op(Op::Not, &[&phis[1]])?;
            cond = V::op(Op::And, &[&cond, &go])?;
        }
        Ok((nexts, cond))
    })();
    let effects = trace.finish();
    let refusal = cc::take_refusal();
    let (nexts, cond) = match (traced, refusal) {
        (Ok(x), None) => x,
        (Err(e), _) => {
            drop(effects);
            return Err(e);
        }
        (Ok(_), Some((l, how))) => {
            drop(effects);
            return Err(Error::Scan(format!(
                "kiln internal error: scan {label}'s one-kernel trace asked for {how} of {l}, which its analysis did not"
            )));
        }
    };
    let init_ids: Vec<VarId> = inits.iter().map(|v| v.id()).collect();
    let phi_ids: Vec<VarId> = phis.iter().map(|v| v.id()).collect();
    let next_ids: Vec<VarId> = nexts.iter().map(|v| v.id()).collect();
    let outs: Vec<V> = cc::make_loop(
        label,
        w,
        like,
        &init_ids,
        &phi_ids,
        cond.id(),
        &next_ids,
        effects.take(),
        0,
    )
    .into_iter()
    .map(V::own)
    .collect();
    // run the loop now, once: its final states and its stored rows come from the same kernel
    // (evaluated separately, a later request for the other would run the loop again)
    let mut now: Vec<VarId> = outs.iter().map(|v| v.id()).collect();
    now.extend(bufs.iter().flatten().map(|b| b.id()));
    now.extend(sbufs.iter().flatten().map(|b| b.id()));
    if !cc::symbolic() {
        kiln_core::eval(&now)?;
    }
    let run = if an.until {
        // the steps that ran decide the outputs' lengths: read the final step number
        let bytes = kiln_core::read_bytes(outs[0].id())?;
        let n = if ity == VarType::U32 {
            u32::from_le_bytes(bytes[..4].try_into().expect("4 bytes")) as usize
        } else {
            u64::from_le_bytes(bytes[..8].try_into().expect("8 bytes")) as usize
        };
        n.min(steps)
    } else {
        steps
    };
    // (the engine writes a result over an operand no handle holds; the final state over an
    // owned initial state would need the scan to let go of that state before the loop runs:
    // not built)
    let in_place = Vec::new();
    let mut finals = Vec::new();
    for (j, o) in spec.outs.iter().enumerate() {
        let win = o.window();
        if win == 0 {
            finals.push(None);
            continue;
        }
        let last = outs[window_at[j] + win - 1].share();
        finals.push(Some(last.erased(an.out_rows[j].clone())));
    }
    let states = states_out(sbufs, spec, an, steps, run)?;
    Ok(Exec {
        run,
        bufs,
        finals,
        states,
        in_place,
        pushed: Vec::new(),
        saved: Vec::new(),
    })
}

/// One step per launch group: the step is frozen once and replayed, reading sequence rows by
/// the step number and scattering its rows into the stored outputs.
#[allow(clippy::too_many_arguments)]
fn stepped(
    spec: &Spec,
    an: &Analysis,
    body: &mut dyn FnMut(&StepIn) -> Result<StepOut>,
    steps: usize,
    stores: &[Store],
    rewrites: bool,
    post: &[Post],
    report: &mut ScanReport,
) -> Result<Exec> {
    let label = spec.label.clone();
    let n_out = spec.outs.len();
    let longest = spec
        .seqs
        .iter()
        .map(|s| s.data.numel())
        .chain(
            an.out_rows
                .iter()
                .zip(stores)
                .map(|(r, s)| s.rows() * r.iter().product::<usize>()),
        )
        .max()
        .unwrap_or(0)
        .max(steps + 2);
    let ity = index_type(longest + 2);
    let widths: Vec<usize> = an.out_rows.iter().map(|r| r.iter().product()).collect();

    // push-out: products of a sequence row and a loop-invariant matrix become one product over
    // every step; loop-invariant right operands are evaluated once
    let mut pre: Vec<Erased> = Vec::new(); // arrays the step reads besides its arguments
    enum Plan {
        Keep,
        Row {
            all: VarId,
            seq: usize,
            tap: i64,
            m: usize,
            n: usize,
        },
        Operand(VarId),
        Skip,
    }
    let mut plans = Vec::new();
    for (k, p) in an.products.iter().enumerate() {
        if post.iter().any(|q| q.product == k) {
            plans.push(Plan::Skip);
            continue;
        }
        let plan = match (&p.row_of, &p.invariant_b, rewrites) {
            // (the left operand is the row itself, maybe reshaped: its elements are row-major
            // `[m, k]`, so the sequence is `[rows · m, k]`)
            (Some((i, tap)), Some(b), true)
                if spec.seqs[*i].data.shape.len() >= 2
                    && spec.seqs[*i].data.shape[1..].iter().product::<usize>() == p.m * p.k =>
            {
                let s = &spec.seqs[*i];
                let rows = s.data.shape[0] * p.m;
                let all = kiln_core::matmul(s.data.id(), b.id(), rows, p.k, p.n)?;
                pre.push(Erased::own(all, vec![rows * p.n]));
                report.matmuls_pushed_out += 1;
                report.ops_hoisted += p.b_ops;
                log(
                    report,
                    format!(
                        "push-out (PushOutDot1): product {k}, sequence {i}'s row [{}, {}] × an invariant [{}, {}], computed for all {} rows at once",
                        p.m, p.k, p.k, p.n, s.data.shape[0]
                    ),
                );
                Plan::Row {
                    all,
                    seq: *i,
                    tap: *tap,
                    m: p.m,
                    n: p.n,
                }
            }
            (_, Some(b), true) if p.b_ops > 0 => {
                kiln_core::eval(&[b.id()])?;
                pre.push(b.clone());
                report.ops_hoisted += p.b_ops;
                log(
                    report,
                    format!(
                        "push-out: product {k}'s right operand ({} op(s), loop-invariant) is computed once before the loop",
                        p.b_ops
                    ),
                );
                Plan::Operand(b.id())
            }
            _ => Plan::Keep,
        };
        plans.push(plan);
    }
    let pushed: Vec<Option<PushedRow>> = plans
        .iter()
        .map(|p| match *p {
            Plan::Row {
                all, tap: 0, m, n, ..
            } => Some(PushedRow {
                all: Erased::borrow(all, vec![]),
                m,
                n,
            }),
            _ => None,
        })
        .collect();
    // a step recomputes its loop-invariant values unless they were hoisted
    report.ops_in_loop = an.ops_in_loop + an.ops_invariant.saturating_sub(report.ops_hoisted);

    // the stored rows
    let mut bufs = Arrays::default();
    let mut has_buf = Vec::new();
    for (j, s) in stores.iter().enumerate() {
        has_buf.push(s.rows() > 0);
        if s.rows() > 0 {
            bufs.0
                .push(output_buffer(an.out_types[j], s.rows() * widths[j])?.erased(vec![]));
        }
    }
    let sb = state_buffers(spec, an, steps)?;
    let has_states: Vec<bool> = sb.iter().map(Option::is_some).collect();
    bufs.0
        .extend(sb.into_iter().flatten().map(|v| v.erased(vec![])));
    // every step's result of the products the step computes as written, when asked (after the
    // states: `bufs` ends with them, one per saved product)
    let saves: Vec<bool> = plans
        .iter()
        .map(|p| spec.save_products && matches!(p, Plan::Keep))
        .collect();
    let first_save = bufs.0.len();
    for (k, p) in an.products.iter().enumerate() {
        if saves[k] {
            bufs.0
                .push(output_buffer(p.ty, steps * p.m * p.n)?.erased(vec![]));
        }
    }
    let save_widths: Vec<usize> = an.products.iter().map(|p| p.m * p.n).collect();

    // the windows of the recurrent outputs, carried by the host
    let mut windows: Vec<Vec<Erased>> = spec
        .outs
        .iter()
        .enumerate()
        .map(|(j, o)| {
            Ok(init_rows(o, widths[j])?
                .into_iter()
                .map(|v| v.erased(an.out_rows[j].clone()))
                .collect())
        })
        .collect::<Result<_>>()?;
    let win_counts: Vec<usize> = spec.outs.iter().map(OutSpec::window).collect();

    let failure: std::cell::RefCell<Option<Error>> = Default::default();
    let captured = an.captured.clone();
    // The body may read an initial state as an array of its own (it captured the matrix the carry
    // starts from): that state's first window row gets a buffer of its own, or the frozen step
    // would take both for one input and its replays would read the new row where the body reads
    // the captured array; the state is an input of the step for such reads.
    let inits: Vec<Erased> = spec
        .outs
        .iter()
        .filter_map(|o| o.init.clone())
        .filter(|i| an.reads_inputs.contains(&i.id().0))
        .collect();
    for w in windows.iter_mut().flatten() {
        if inits.iter().any(|i| i.id() == w.id()) {
            *w = Erased::own(cc::copy(w.id())?, w.shape.clone());
        }
    }
    let hidden: Arrays = Arrays(
        captured
            .into_iter()
            .chain(pre.iter().cloned())
            .chain(spec.seqs.iter().map(|q| q.data.clone()))
            .chain(spec.non_seqs.iter().cloned())
            .chain(inits)
            .collect(),
    );
    let host_read = an
        .refusal
        .as_ref()
        .is_some_and(|(_, how)| cc::is_host_read(how));
    let outer = kiln_core::freeze::record::active();
    let until = an.until;
    let reverse = spec.reverse;
    // arguments: [t, window rows…]; sequences and non-sequences are read from `spec`
    let mut step = crate::freeze::freeze(|args: &Arrays, bufs: &mut Arrays| -> Arrays {
        let r = (|| -> Result<Arrays> {
            let t = V::borrow(args.0[0].id());
            let idx = seq_row_index(spec, &t, ity)?;
            let rows = seq_rows_at(spec, &idx, None)?;
            let mut at = 1;
            let wins: Vec<Vec<Erased>> = win_counts
                .iter()
                .map(|&c| {
                    let v = args.0[at..at + c].to_vec();
                    at += c;
                    v
                })
                .collect();
            let subst = plans
                .iter()
                .zip(&saves)
                .map(|(p, &save)| match *p {
                    Plan::Keep if save => Subst::Save,
                    Plan::Keep => Subst::Keep,
                    Plan::Skip => Subst::Skip,
                    Plan::Operand(b) => Subst::Operand { b },
                    Plan::Row { all, seq, tap, m, n } => {
                        let k = spec.seqs[seq].taps.iter().position(|&x| x == tap).expect("a declared tap");
                        Subst::Row { all, row: idx[seq][k].id(), m, n }
                    }
                })
                .collect();
            let input = step_input(spec, &t, rows, &wins)?;
            let installed = Installed::new(Hook::Step { subst, next: 0, saved: Vec::new() });
            let out = body(&input);
            let saved = match installed.take() {
                Hook::Step { saved, .. } => saved,
                Hook::Analyze(_) => Vec::new(),
            };
            let out = out?;
            for (k, r) in saved {
                if saves.get(k).copied().unwrap_or(false) {
                    let at = first_save + saves[..k].iter().filter(|&&x| x).count();
                    store_row(bufs.0[at].h.id_mut(), r.id(), &t, None, save_widths[k], None)?;
                }
            }
            if out.outs.len() != n_out {
                return Err(Error::Scan(format!(
                    "scan {label}: the body returned {} output(s) this time and {n_out} before; it must return the same outputs at every step",
                    out.outs.len()
                )));
            }
            let mut b = 0;
            for (j, y) in out.outs.iter().enumerate() {
                if y.ty != an.out_types[j] || y.shape != an.out_rows[j] {
                    return Err(Error::Scan(format!(
                        "scan {label}: {} is {} at {} but was {} {:?} at the first",
                        spec.out_name(j),
                        y.describe(),
                        step_name(&t),
                        an.out_types[j],
                        an.out_rows[j]
                    )));
                }
                if has_buf[j] {
                    if let Some((pos, mask)) = store_position(&stores[j], &t, ity, steps, reverse)? {
                        store_row(bufs.0[b].h.id_mut(), y.id(), &pos, mask.as_ref(), widths[j], None)?;
                    }
                    b += 1;
                }
            }
            let mut sbuf = first_save - has_states.iter().filter(|&&x| x).count();
            for (j, y) in out.outs.iter().enumerate() {
                if has_states[j] {
                    let winv = V::lit(ity, win_counts[j] as u64);
                    let pos = V::op(Op::Add, &[&t, &winv])?;
                    store_row(bufs.0[sbuf].h.id_mut(), y.id(), &pos, None, widths[j], None)?;
                    sbuf += 1;
                }
            }
            let mut res: Vec<Erased> = out
                .outs
                .iter()
                .enumerate()
                .filter(|(j, _)| win_counts[*j] > 0)
                .map(|(_, y)| y.clone())
                .collect();
            if let Some(u) = out.until {
                res.push(u);
            }
            Ok(Arrays(res))
        })();
        match r {
            Ok(a) => a,
            Err(e) => {
                *failure.borrow_mut() = Some(e);
                Arrays::default()
            }
        }
    })
    .with_state(move |_| hidden.clone())
    .auto_opaque(false)
    .unfreeze_on_hidden_input()
    .grad_mode_as_is()
    .enabled(!outer && !host_read);
    let mut run = 0;
    for t in 0..steps {
        let tb = (t as u64).to_le_bytes();
        let tv = kiln_core::from_bytes(ity, &tb[..ity.size_bytes()])?;
        let mut args = Arrays(vec![Erased::own(tv, vec![])]);
        for w in &windows {
            args.0.extend(w.iter().cloned());
        }
        let res = step.call(&args, &mut bufs)?;
        if let Some(e) = failure.borrow_mut().take() {
            return Err(e);
        }
        run = t + 1;
        let mut it = res.0.into_iter();
        for (j, w) in windows.iter_mut().enumerate() {
            if win_counts[j] > 0 {
                let mut y = it.next().expect("a new row per recurrent output");
                y.shape = an.out_rows[j].clone();
                w.remove(0);
                w.push(y);
            }
        }
        if until {
            let u = it.next().expect("the until condition");
            if kiln_core::read_bytes(u.id())?.first().copied().unwrap_or(0) != 0 {
                break;
            }
        }
    }
    let fstats = step.stats();
    tracing::debug!(target: "scan", "scan {label}: stepped: {} recording(s), {} replay(s), {} unfrozen", fstats.recordings, fstats.replays, fstats.unfrozen);
    drop(step);
    let mut it = bufs.0.into_iter();
    let mut out_bufs = Vec::new();
    for &h in &has_buf {
        out_bufs.push(if h {
            Some(it.next().expect("a buffer").h.clone())
        } else {
            None
        });
    }
    let sbufs: Vec<Option<V>> = has_states
        .iter()
        .map(|&h| h.then(|| it.next().expect("a states buffer").h.clone()))
        .collect();
    // (shaped [rows, per step]: after `until` fewer steps ran than it has rows)
    let saved: Vec<Option<Erased>> = saves
        .iter()
        .zip(&save_widths)
        .map(|(&k, &w)| {
            k.then(|| {
                let e = it.next().expect("a saved product's buffer");
                let rows = kiln_core::size(e.id()) / w.max(1);
                Erased::borrow(e.id(), vec![rows, w])
            })
        })
        .collect();
    let finals = windows.into_iter().map(|mut w| w.pop()).collect();
    let states = states_out(sbufs, spec, an, steps, run)?;
    Ok(Exec {
        run,
        bufs: out_bufs,
        finals,
        states,
        in_place: Vec::new(),
        pushed,
        saved,
    })
}

/// "step k" when the step number `t` is known on the host (a body that read it), else "this
/// step" (the step is traced once for all steps; inside a recording nothing is read).
fn step_name(t: &V) -> String {
    let known = !kiln_core::freeze::record::active()
        && kiln_core::is_evaluated(t.id())
        && kiln_core::size(t.id()) == 1;
    let bytes = if known {
        kiln_core::read_bytes(t.id()).ok()
    } else {
        None
    };
    match bytes.as_deref() {
        Some(&[a, b, c, d]) => format!("step {}", u32::from_le_bytes([a, b, c, d])),
        Some(&[a, b, c, d, e, f, g, h]) => {
            format!("step {}", u64::from_le_bytes([a, b, c, d, e, f, g, h]))
        }
        _ => "this step".into(),
    }
}

/// Whether `e` is a plain scan's refusal of `ScanMode::Fused` for a body one kernel cannot run
/// (a differentiated scan then runs step by step instead).
pub(super) fn is_fused_refusal(e: &Error) -> bool {
    matches!(e, Error::Scan(m) if m.contains(FUSED_REFUSAL))
}

/// The words of that refusal.
const FUSED_REFUSAL: &str = "cannot run as one kernel";
