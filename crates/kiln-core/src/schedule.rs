//! Evaluation: decide what to materialise, build one kernel per size, run them.
//!
//! `eval` collects the roots (the variables asked for, or every user-held one for `eval_all`) and the
//! pending side effects, groups them by size, and for each group walks the graph from the roots:
//! evaluated variables become input parameters, literals become constants, everything else is
//! computed in registers — intermediates never touch memory. Each group becomes one kernel whose
//! outputs are the group's roots. Kernels are compiled (or found in the cache) and launched with the
//! registry lock released; evals from several threads are serialised by `EVAL_LOCK` (reentrant, so a
//! kernel-launching thread that is asked to eval again cannot deadlock itself).

use crate::backend::select::backend;
use crate::backend::BackendKind;
use crate::build::{Binding, Built, Group};
use crate::cache;
use crate::device;
use crate::error::Result;
use crate::kernel::{Kernel, ParamKind, Reg};
use crate::op::{Op, ReduceOp};
use crate::plan::{self, Dest, Intent, Plan, Summary};
use crate::registry::{Buffer, State, VarId, STATE};
use crate::ty::VarType;
use parking_lot::{MutexGuard, ReentrantMutex};
use std::cell::Cell;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

static EVAL_LOCK: ReentrantMutex<()> = ReentrantMutex::new(());

/// How a thread waits for [`EVAL_LOCK`] while another thread holds it, when a binding set it
/// (see [`set_eval_wait`]).
static EVAL_WAIT: std::sync::OnceLock<fn(&(dyn Fn() + Sync))> = std::sync::OnceLock::new();

/// Have every wait for the evaluation lock run through `wait`, which must call its argument (the
/// wait itself; a hook that returns without calling it makes the waiting thread spin). A binding
/// to a language with a global interpreter lock releases that lock around the wait: the holder
/// may be a frozen function's recording whose body needs it, so waiting with it held would
/// deadlock. Set once per process: returns whether this call set it (later calls change
/// nothing).
///
/// ```
/// fn plain(wait: &(dyn Fn() + Sync)) {
///     wait()
/// }
/// kiln_core::schedule::set_eval_wait(plain);
/// assert!(!kiln_core::schedule::set_eval_wait(plain)); // already set
/// ```
pub fn set_eval_wait(wait: fn(&(dyn Fn() + Sync))) -> bool {
    EVAL_WAIT.set(wait).is_ok()
}

/// Take the evaluation lock (reentrant), waiting through the hook of [`set_eval_wait`].
fn lock_eval() -> parking_lot::ReentrantMutexGuard<'static, ()> {
    if let Some(g) = EVAL_LOCK.try_lock() {
        return g;
    }
    let Some(hook) = EVAL_WAIT.get() else {
        return EVAL_LOCK.lock();
    };
    loop {
        // (wait until the holder lets go, then take it; another thread may have been faster)
        hook(&|| drop(EVAL_LOCK.lock()));
        if let Some(g) = EVAL_LOCK.try_lock() {
            return g;
        }
    }
}

/// The kernels that evaluating `ids` now would launch (pending side effects included), without
/// running anything: for inspection, logs and golden tests (the kernels of [`plan_for`]).
pub fn kernels_for(ids: &[VarId]) -> Vec<Kernel> {
    plan_for(ids).into_kernels()
}

/// What evaluating `ids` now would run (pending side effects included), planned but not run: the
/// kernels, their parameters, and where each result would go (update-in-place decisions
/// included). Print it to see what fuses and what is reused.
///
/// Pending reductions are evaluated first (a kernel reads them as evaluated size-1 data), so
/// that the plan is the one an evaluation would run; if that fails, the plan is made anyway.
///
/// ```
/// use kiln_core::{self as core, Op};
/// let x = core::from_scalars(&[1.0f32, 2.0]).unwrap();
/// let y = core::op(Op::Sqrt, &[x]).unwrap();
/// core::dec_ref(x); // only `y` reads `x` now: its buffer can take the result
/// assert!(core::schedule::plan_for(&[y]).to_string().contains("in place of p0"));
/// core::dec_ref(y);
/// ```
pub fn plan_for(ids: &[VarId]) -> Summary {
    let _serial = lock_eval();
    let ids32: Vec<u32> = ids.iter().map(|i| i.0).collect();
    let _ = resolve_reductions(Some(&ids32), &[]);
    let mut st = STATE.lock();
    let roots = collect_roots(&st, Some(ids));
    let side = st.runnable_effects();
    // (held as an evaluation holds them: the in-place policy counts that reference)
    for &r in &roots {
        st.inc_int(r);
    }
    let summary = plan::plan(&st, roots.clone(), side, Intent::default()).summary(&st);
    let mut garbage = Vec::new();
    for &r in &roots {
        st.dec_int(r, &mut garbage);
    }
    drop(st);
    drop(garbage);
    summary
}

/// The unevaluated variables an evaluation of `ids` computes (`None`: every one a handle of this
/// thread holds), with the other held outputs of the regions among them: a region runs once, not
/// once per output.
fn collect_roots(st: &State, ids: Option<&[VarId]>) -> Vec<u32> {
    let mut roots: Vec<u32> = Vec::new();
    match ids {
        Some(ids) => {
            for id in ids {
                let v = st.var(id.0);
                if v.alive && !v.is_evaluated() && !roots.contains(&id.0) {
                    roots.push(id.0);
                }
            }
        }
        None => {
            // inside a frozen function's recording, only what the function made
            let recording = crate::context::recording();
            let me = crate::registry::thread_token();
            for (i, v) in st.vars.iter().enumerate().skip(1) {
                if v.alive
                    && v.thread == me
                    && v.ext > 0
                    && !v.is_evaluated()
                    && !matches!(v.op, Op::Scatter(_))
                    && (v.fresh || !recording)
                {
                    roots.push(i as u32);
                }
            }
        }
    }
    let mut k = 0;
    while k < roots.len() {
        let v = st.var(roots[k]);
        if v.op == Op::Out {
            let node = v.deps[0];
            if let Some(outs) = st.region_outs.get(&node) {
                for &o in outs {
                    let ov = st.var(o);
                    if ov.alive
                        && ov.op == Op::Out
                        && ov.deps[0] == node
                        && ov.ext > 0
                        && !ov.is_evaluated()
                        && !roots.contains(&o)
                    {
                        roots.push(o);
                    }
                }
            }
        }
        k += 1;
    }
    roots
}

// ---------------------------------------------------------------------------------------------
// Eval

/// Hold the evaluation lock (reentrant): other threads' evaluations wait until the guard drops.
/// A frozen function's recording holds it so that no other thread's work runs inside it.
pub fn hold_eval_lock() -> parking_lot::ReentrantMutexGuard<'static, ()> {
    lock_eval()
}

/// Whether this thread holds the evaluation lock (inside an evaluation, or a frozen function's
/// recording).
///
/// ```
/// assert!(!kiln_core::schedule::eval_lock_held_here());
/// let g = kiln_core::schedule::hold_eval_lock();
/// assert!(kiln_core::schedule::eval_lock_held_here());
/// drop(g);
/// ```
pub fn eval_lock_held_here() -> bool {
    EVAL_LOCK.is_owned_by_current_thread()
}

/// Take the evaluation lock for the rest of the process, waiting at most `timeout` (through the
/// hook of [`set_eval_wait`]); returns whether it was taken. A binding calls this as its
/// interpreter shuts down: threads it cannot join (Python's daemon threads) then stop at their
/// next evaluation, waiting, instead of running on into the interpreter's teardown (CPython ends
/// such a thread by unwinding it where it takes its interpreter lock back, which aborts the
/// process when the unwind meets native frames). This thread keeps evaluating (the lock is
/// reentrant); an evaluation in flight on another thread finishes first.
///
/// ```
/// use std::time::Duration;
/// // (in a test process: other threads' evaluations would wait from now on)
/// assert!(kiln_core::schedule::hold_eval_lock_until_exit(Duration::from_secs(1)));
/// let x = kiln_core::schedule::hold_eval_lock(); // this thread still takes it
/// drop(x);
/// let other = std::thread::spawn(|| {
///     kiln_core::schedule::hold_eval_lock_until_exit(Duration::from_millis(50))
/// });
/// assert!(!other.join().unwrap()); // another thread gives up after its timeout
/// ```
pub fn hold_eval_lock_until_exit(timeout: std::time::Duration) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(g) = EVAL_LOCK.try_lock() {
            std::mem::forget(g);
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        let wait = || drop(EVAL_LOCK.try_lock_until(deadline));
        match EVAL_WAIT.get() {
            Some(hook) => hook(&wait),
            None => wait(),
        }
    }
}

/// Evaluate `ids` (and every pending side effect) now.
pub fn eval(ids: &[VarId]) -> Result<()> {
    let r = run(Some(ids));
    crate::registry::release_deferred_owners();
    r
}

thread_local! {
    /// Set while [`eval_leaving_effects`] runs: pending side effects stay pending.
    static HOLD_EFFECTS: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Evaluate `ids` but leave this thread's pending side effects (scatters) pending: a scatter
/// materialises its target this way, so that consecutive scatters of one size (k-means' sums and
/// counts) stay pending and run in one kernel with the values and indices they share. Nothing
/// `ids` computes can depend on a pending scatter: tracing a read of an array a scatter will write
/// runs that scatter first (`trace::lock_clean`).
pub fn eval_leaving_effects(ids: &[VarId]) -> Result<()> {
    holding_effects(|| run(Some(ids)))
}

/// `f` with this thread's pending side effects held back (the previous setting restored after,
/// also on a panic: these nest).
fn holding_effects<R>(f: impl FnOnce() -> R) -> R {
    struct Restore(bool);
    impl Drop for Restore {
        fn drop(&mut self) {
            HOLD_EFFECTS.with(|h| h.set(self.0));
        }
    }
    let _restore = Restore(HOLD_EFFECTS.with(|h| h.replace(true)));
    f()
}

/// Run pending side effects (scatters) only.
pub fn eval_side_effects() -> Result<()> {
    run(Some(&[]))
}

/// Evaluate every variable that this thread traced and a user handle refers to, and this
/// thread's pending side effects (another thread's values may be in the middle of a body trace).
pub fn eval_all() -> Result<()> {
    run(None)
}

/// Evaluate `id` (a row-major matrix of rows of `cols` elements, or more dimensions flattened into
/// rows) with its kernel run in 2-d tiles: for expressions that read a transposed source, whose
/// lanes would otherwise each touch another cache line. Falls back to a linear launch where tiles
/// do not fit.
pub fn eval_tiled(id: VarId, cols: usize) -> Result<()> {
    run_with(Some(&[id]), Some((id.0, cols)))
}

/// Evaluate `expr` into the buffer of `target` (a caller-provided output, `x.assign(expr)`):
/// when `target` is evaluated, of `expr`'s type and length, and nothing but its one handle can
/// see it once this evaluation is done (no clone, no view, no pending expression; `expr` itself
/// may read it at each lane's own index), `expr`'s kernel stores straight into that buffer and no
/// operand of `expr` is reused (as in DAPHNE when the caller passes a result). Returns whether it
/// did; otherwise `expr` is evaluated as usual (the caller rebinds its handle either way, so a
/// clone of the target keeps the old values: copy-on-write).
pub fn eval_into(expr: &mut VarId, target: VarId) -> Result<bool> {
    let _serial = lock_eval();
    // (a pending reduction of the target holds a reference to it)
    resolve_reductions(Some(&[expr.0]), &[target.0])?;
    {
        let mut st = STATE.lock();
        let (e, t) = (st.var(expr.0), st.var(target.0));
        let fits = e.alive
            && t.is_evaluated()
            && t.ty == e.ty
            && t.size == e.size
            && t.ext == 1
            && !t.dirty
            && (t.fresh || !crate::context::recording())
            && crate::inplace::enabled();
        if !fits {
            drop(st);
            run(Some(&[*expr]))?;
            return Ok(false);
        }
        if e.is_evaluated() || e.is_literal() {
            // a value with nothing left to compute is copied into the target by a kernel of
            // its own: `select(true, v, v)`, exact for every type (NaN payloads, -0.0)
            let (ty, size, sym) = (e.ty, e.size, e.sym);
            let mut yes = crate::registry::Var::new(Op::Literal, VarType::Bool, 1);
            yes.literal = 1;
            let yes = st.insert(yes);
            let mut copy = crate::registry::Var::new(Op::Select, ty, size);
            copy.sym = sym;
            copy.deps = [yes, expr.0, expr.0, 0];
            let copy = st.insert(copy);
            let mut garbage = Vec::new();
            st.dec_ext(yes, &mut garbage);
            st.dec_ext(expr.0, &mut garbage);
            *expr = VarId(copy);
        }
    }
    let mut into = Some(target.0);
    run_with_into(Some(&[*expr]), None, &mut into)?;
    Ok(into.is_none())
}

fn run(ids: Option<&[VarId]>) -> Result<()> {
    if let Some(ids) = ids {
        fill_literals(ids)?;
    }
    run_with(ids, None)
}

/// The largest literal (in bytes) [`fill_literals`] uploads.
const FILL_BYTES: usize = 1 << 20;

/// Give the unevaluated literals among `ids` their buffers by uploading their values, not by a
/// kernel with the value baked in: such a kernel compiles anew for every value, so `opaque(lr)`
/// (or a gather from a scalar) in a training loop compiled at every step. Inside a recording
/// the kernel path stays: a literal's size may be an expression of the inputs there, which an
/// upload of fixed bytes would not follow. The literal leaves the CSE table (as `make_opaque`
/// takes it out), so constants traced later stay literals. Literals over [`FILL_BYTES`] still run
/// a kernel: it fills on every core, and its compile is small beside writing that much.
fn fill_literals(ids: &[VarId]) -> Result<()> {
    if crate::context::recording() {
        return Ok(());
    }
    for &id in ids {
        let (ty, size, bits) = {
            let st = STATE.lock();
            let v = st.var(id.0);
            let bytes = v.size.saturating_mul(v.ty.size_bytes());
            if !v.is_literal() || v.is_evaluated() || v.sym != 0 || bytes == 0 || bytes > FILL_BYTES
            {
                continue;
            }
            (v.ty, v.size, v.literal)
        };
        // (under the evaluation lock, as any evaluation: the variable may be shared by CSE)
        let _serial = hold_eval_lock();
        let bytes = bits.to_le_bytes()[..ty.size_bytes()].repeat(size);
        let buf = device::upload(ty, &bytes)?;
        let mut garbage = Vec::new();
        STATE.lock().set_data(id.0, Arc::new(buf), &mut garbage);
    }
    Ok(())
}

fn run_with(ids: Option<&[VarId]>, tile: Option<(u32, usize)>) -> Result<()> {
    run_with_into(ids, tile, &mut None)
}

thread_local! {
    /// Arrays [`schedule_eval`] marked: they join this thread's next evaluation.
    static SCHEDULED: std::cell::RefCell<Vec<crate::handle::Handle>> =
        const { std::cell::RefCell::new(Vec::new()) };
}

/// Mark `ids` to be evaluated together with whatever this thread evaluates next, explicitly
/// (`eval`) or because a value is needed (Dr.Jit's `dr.schedule`): one evaluation then computes
/// them all, sharing kernels where their sizes match. The marks hold a reference until then.
///
/// ```
/// let x = kiln_core::counter(kiln_core::VarType::U32, 100).unwrap();
/// let y = kiln_core::op(kiln_core::Op::Add, &[x, x]).unwrap();
/// let z = kiln_core::op(kiln_core::Op::Mul, &[x, x]).unwrap();
/// kiln_core::schedule::schedule_eval(&[y]);
/// kiln_core::eval(&[z]).unwrap();          // evaluates y too, in the same kernel
/// assert!(kiln_core::is_evaluated(y) && kiln_core::is_evaluated(z));
/// for id in [x, y, z] { kiln_core::dec_ref(id); }
/// ```
pub fn schedule_eval(ids: &[VarId]) {
    SCHEDULED.with(|s| {
        let mut s = s.borrow_mut();
        for &id in ids {
            s.push(crate::handle::Handle::borrow(id));
        }
    });
}

fn run_with_into(
    ids: Option<&[VarId]>,
    tile: Option<(u32, usize)>,
    into: &mut Option<u32>,
) -> Result<()> {
    // arrays scheduled on this thread join this evaluation (not a symbolic body's, which runs
    // nothing; they wait for a real one)
    let scheduled: Vec<crate::handle::Handle> = if crate::context::symbolic() {
        Vec::new()
    } else {
        SCHEDULED.with(|s| std::mem::take(&mut *s.borrow_mut()))
    };
    let merged: Vec<VarId>;
    let ids = match ids {
        Some(list) if !scheduled.is_empty() => {
            merged = list
                .iter()
                .copied()
                .chain(scheduled.iter().map(|h| h.id()))
                .collect();
            Some(&merged[..])
        }
        other => other,
    };
    let _serial = lock_eval();
    // pending reductions first: whatever reads them finds them evaluated (size-1 data), and
    // their references to their sources are gone before in-place reuse counts references
    let ids32: Option<Vec<u32>> = ids.map(|ids| ids.iter().map(|i| i.0).collect());
    let touch: Vec<u32> = into.iter().copied().collect();
    resolve_reductions(ids32.as_deref(), &touch)?;
    let mut st = STATE.lock();
    let mut roots = collect_roots(&st, ids);
    if crate::context::symbolic() {
        // a symbolic body's values are not known yet: nothing runs (the body's own side effects
        // stay pending; they become part of its region)
        if let Some(&r) = roots.first() {
            let label = st.label_of(r);
            crate::context::refuse(|| label, "evaluating it");
        }
        return Ok(());
    }
    // (not in an evaluation that resolving reductions starts: it settles its own scalars)
    let reused = if RESOLVING.get() {
        Vec::new()
    } else {
        reused_scalars(&st, &roots)
    };
    if !reused.is_empty() {
        with_roots_held(&mut st, &mut roots, || {
            settle(&reused, "needed again by a later evaluation")
        })?;
    }
    // the settling above released the lock: a pending reduction may have come within reach
    // since the one at the top (seen with reductions traced by other threads meanwhile); a
    // kernel must never meet one
    if !st.pending_reductions.is_empty()
        && !RESOLVING.get()
        && roots.iter().any(|&r| reaches_pending(&st, r))
    {
        let held = roots.clone();
        with_roots_held(&mut st, &mut roots, || {
            resolve_reductions(Some(&held), &touch)
        })?;
    }
    let side = if HOLD_EFFECTS.with(std::cell::Cell::get) {
        Vec::new()
    } else {
        st.take_runnable_effects()
    };
    if roots.is_empty() && side.is_empty() {
        return Ok(());
    }
    for &r in &roots {
        st.inc_int(r);
    }
    let held = roots.clone();
    let planned = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        plan::plan(&st, roots, side, Intent { tile, into: *into })
    }));
    let plan = match planned {
        Ok(p) => p,
        Err(panic) => {
            // a build refused the expression (a loop body's trace value used after the loop):
            // release what this evaluation held before reporting it
            let mut garbage = Vec::new();
            for &r in &held {
                st.dec_int(r, &mut garbage);
            }
            MutexGuard::unlocked(&mut st, || drop(garbage));
            std::panic::resume_unwind(panic);
        }
    };
    if plan.assigns() {
        // (tells `eval_into` the result went into the target's buffer)
        *into = None;
    }
    execute(st, plan)
}

/// Run `evaluate` with the registry unlocked and `roots` held (it may evaluate some of them: a root
/// below another root is settled by its own walk), then keep in `roots` what is still work.
fn with_roots_held(
    st: &mut MutexGuard<'static, State>,
    roots: &mut Vec<u32>,
    evaluate: impl FnOnce() -> Result<()>,
) -> Result<()> {
    for &r in roots.iter() {
        st.inc_int(r);
    }
    let done = MutexGuard::unlocked(st, evaluate);
    let mut garbage = Vec::new();
    for &r in roots.iter() {
        st.dec_int(r, &mut garbage);
    }
    // (buffers are freed with the registry unlocked)
    MutexGuard::unlocked(st, || drop(garbage));
    done?;
    roots.retain(|&r| {
        let v = st.var(r);
        v.alive && !v.is_evaluated()
    });
    Ok(())
}

/// Run a plan: count its in-place decisions, allocate the outputs that need new buffers, launch
/// its kernels with the registry unlocked, publish the results (only if everything ran), and
/// release what the evaluation held (its roots' and side effects' references).
fn execute(mut st: MutexGuard<'static, State>, mut plan: Plan) -> Result<()> {
    let mut failure = None;
    'steps: for step in plan.steps.iter_mut() {
        plan::note_decisions(&st, step);
        let mut dests = std::mem::take(&mut step.dests).into_iter();
        let b = &mut step.built;
        for &r in &b.roots {
            let out = match dests.next() {
                Some(Dest::Reuse { buf, .. } | Dest::Target { buf, .. }) => buf,
                Some(Dest::Fresh) | None => {
                    let v = st.var(r);
                    match crate::device::alloc(v.ty, b.size, &|| {
                        format!("evaluating {}", st.label_of(r))
                    }) {
                        Ok(buf) => Arc::new(buf),
                        Err(e) => {
                            failure = Some(e);
                            break 'steps;
                        }
                    }
                }
            };
            b.outputs.push(out);
        }
    }
    let result = match failure {
        Some(e) => Err(e),
        None => MutexGuard::unlocked(&mut st, || launch_all(&plan.steps)).map(|missed| {
            for (s, missed) in plan.steps.iter().zip(missed) {
                note_computed(&mut st, &s.built.computed, missed);
            }
        }),
    };
    // publish results (only if everything ran) and release what the eval held
    let mut garbage = Vec::new();
    if result.is_ok() {
        for b in plan.steps.iter().map(|s| &s.built) {
            for (r, out) in b.roots.iter().zip(&b.outputs) {
                if !st.var(*r).is_evaluated() {
                    // (a cast written over an operand of the same width: the buffer's elements
                    // are of the result's type now)
                    let ty = st.var(*r).ty;
                    if out.ty() != ty {
                        out.retype(ty);
                    }
                    st.set_data(*r, out.clone(), &mut garbage);
                }
            }
        }
    }
    for &s in &plan.side {
        // a scatter's target, or the targets of the scatters inside a region node
        for t in st.effect_targets(s) {
            st.var_mut(t).dirty = false;
        }
        st.dec_int(s, &mut garbage);
    }
    for &r in &plan.roots {
        st.dec_int(r, &mut garbage);
    }
    drop(st);
    drop(garbage);
    drop(plan);
    result
}

/// Launch the built kernels in order; returns, per kernel, whether it had to be built (compiled or
/// loaded from disk) rather than found in memory.
fn launch_all(steps: &[plan::Step]) -> Result<Vec<bool>> {
    let kind = backend();
    let be = crate::backend::select::instance(kind)?;
    let mut missed = vec![false; steps.len()];
    for (bi, b) in steps.iter().map(|s| &s.built).enumerate() {
        if b.kernel.is_empty() {
            continue;
        }
        let hash = b.kernel.hash();
        let look = cache::get(&be, &b.kernel, hash)?;
        missed[bi] = !look.hit;
        if !b.loop_labels.is_empty() {
            crate::stats::note_loop_labels(hash, b.loop_labels.clone());
        }
        if tracing::enabled!(target: "kiln::kernel", tracing::Level::TRACE) {
            tracing::trace!(target: "kiln::kernel", "kernel IR:\n{}", b.kernel);
        }
        let buffers: Vec<&Buffer> = b
            .bindings
            .iter()
            .map(|bind| match bind {
                Binding::Input(buf) | Binding::Shifted(buf, _) => buf.as_ref(),
                Binding::Output(i) => b.outputs[*i].as_ref(),
            })
            .collect();
        let t = Instant::now();
        let status = match &b.interior {
            None => device::launch_kernel(b.spec(&look.kernel, hash), b.size, &buffers),
            Some(inner) => {
                if !look.hit || !look.kernel.variants_prepared() {
                    // the general kernel rewrites each row's few border lanes: a narrow variant,
                    // and one on strided lanes (at the first split launch, which need not be the
                    // kernel's first: a small grid runs it unsplit)
                    be.prepare_short_runs(&b.kernel);
                }
                let ihash = inner.kernel.hash();
                let ilook = cache::get(&be, &inner.kernel, ihash)?;
                if tracing::enabled!(target: "kiln::kernel", tracing::Level::TRACE) {
                    tracing::trace!(target: "kiln::kernel", "stencil interior kernel IR:\n{}", inner.kernel);
                }
                let ibufs: Vec<(&Buffer, i64)> = inner
                    .bindings
                    .iter()
                    .map(|bind| match bind {
                        Binding::Input(buf) => (buf.as_ref(), 0),
                        Binding::Shifted(buf, off) => (buf.as_ref(), *off),
                        Binding::Output(i) => (b.outputs[*i].as_ref(), 0),
                    })
                    .collect();
                let ispec = device::LaunchSpec::constant(
                    &ilook.kernel,
                    ihash,
                    &inner.kernel.params,
                    &[],
                    0,
                );
                // wrong values in a few border lanes are harmless only without effects, loops or
                // lane-dependent gathers (whose out-of-range reads there would be counted)
                let k = &inner.kernel;
                let uniform = |r: Reg| {
                    let i = &k.insts[r as usize];
                    i.op == Op::Literal
                        || (i.op == Op::Load
                            && k.params[i.imm as usize].kind == ParamKind::Broadcast)
                };
                let through_gaps = !k.insts.iter().any(|i| {
                    matches!(i.op, Op::Scatter(_))
                        || i.op.is_region()
                        // (a gather at one index for all lanes, like a weight, counts the same
                        // in every lane, junk or not)
                        || (i.op == Op::Gather && !uniform(i.args[0]))
                });
                device::launch_split(
                    b.spec(&look.kernel, hash),
                    &buffers,
                    ispec,
                    &ibufs,
                    b.size,
                    &inner.plan,
                    through_gaps,
                )
            }
        };
        report_launch(b, kind, &look, t, status, "eval()");
    }
    Ok(missed)
}

/// Log a launch like the seed (`eval(): launching kernel (n=…, in=…, out=…, ops=…)`, cache hit or
/// miss, hash, compile and run time) and, under `KILN_DEBUG=1`, warn about out-of-range accesses.
fn report_launch(
    b: &Built,
    kind: BackendKind,
    look: &cache::Lookup,
    t: Instant,
    status: [u64; crate::backend::STATUS_LEN],
    what: &str,
) {
    let hash = b.kernel.hash();
    let run_us = t.elapsed().as_secs_f64() * 1e6;
    let n_in = b
        .kernel
        .params
        .iter()
        .filter(|p| p.kind != ParamKind::Output)
        .count();
    tracing::debug!(
        target: "kiln::kernel",
        "{what}: launching kernel (n={}, in={}, out={}, ops={}) on {}: cache {}, hash {}, compile {:.3} ms, run {:.1} us",
        b.size,
        n_in,
        b.roots.len(),
        b.kernel.len(),
        kind,
        if look.hit { "hit" } else { "miss" },
        hash,
        look.compile_ns as f64 / 1e6,
        run_us
    );
    if (status[0] > 0 || status[1] > 0) && debug_mode() {
        tracing::warn!(
            target: "kiln::kernel",
            "kernel {hash} (n={}): {} out-of-range gather reads (read as 0), {} out-of-range scatter writes (dropped)",
            b.size,
            status[0],
            status[1]
        );
    }
}

/// A kernel computing the unevaluated `id` whose single output is consumed as it is produced
/// (never stored): what the fused reductions launch.
struct FusedKernel<'a> {
    built: &'a Built,
    look: &'a cache::Lookup,
    kind: BackendKind,
    hash: crate::kernel::KernelHash,
    /// The kernel's non-output parameters, in order.
    inputs: Vec<&'a Buffer>,
    out_param: usize,
}

/// Build and compile the kernel of the unevaluated `id` and hand it to `run`; `None` (and nothing
/// run) when `id` is evaluated.
fn with_fused_kernel<R>(
    id: VarId,
    what: &str,
    run: impl FnOnce(&FusedKernel) -> Result<R>,
) -> Result<Option<R>> {
    // pending reductions first (they may be the lazy scalars below), then the lazy scalars
    resolve_reductions(Some(&[id.0]), &[])?;
    settle_broadcast_scalars(id)?;
    eval_side_effects()?;
    let _serial = lock_eval();
    let mut st = STATE.lock();
    let v = st.var(id.0);
    if v.is_evaluated() || !v.alive {
        return Ok(None);
    }
    let (size, sym) = (v.size, v.sym);
    st.inc_int(id.0);
    let group = Group {
        size,
        sym,
        roots: vec![id.0],
        side: Vec::new(),
    };
    let built = plan::plan_fused(&st, group).into_built();
    if !built.stencil_seen.is_empty() {
        // a stencil is worth its split launch (plain loads in the interior): evaluate it, then
        // the caller reduces the buffer
        let mut garbage = Vec::new();
        st.dec_int(id.0, &mut garbage);
        drop(st);
        drop(garbage);
        return Ok(None);
    }
    drop(st);
    let mut missed = false;
    let result = (|| {
        let kind = backend();
        let be = crate::backend::select::instance(kind)?;
        let hash = built.kernel.hash();
        let look = cache::get(&be, &built.kernel, hash)?;
        missed = !look.hit;
        if tracing::enabled!(target: "kiln::kernel", tracing::Level::TRACE) {
            tracing::trace!(target: "kiln::kernel", "kernel IR ({what}):\n{}", built.kernel);
        }
        let inputs: Vec<&Buffer> = built
            .bindings
            .iter()
            .filter_map(|bind| match bind {
                Binding::Input(buf) | Binding::Shifted(buf, _) => Some(buf.as_ref()),
                Binding::Output(_) => None,
            })
            .collect();
        let out_param = built
            .bindings
            .iter()
            .position(|b| matches!(b, Binding::Output(_)))
            .expect("one output");
        run(&FusedKernel {
            built: &built,
            look: &look,
            kind,
            hash,
            inputs,
            out_param,
        })
        .map(Some)
    })();
    let mut garbage = Vec::new();
    let mut st = STATE.lock();
    if result.is_ok() {
        note_computed(&mut st, &built.computed, missed);
    }
    st.dec_int(id.0, &mut garbage);
    drop(st);
    drop(garbage);
    result
}

/// Reduce an unevaluated variable without materialising it: its kernel runs block by block into a
/// cache-sized scratch buffer that is reduced at once (one fused launch, no full-size array).
/// Returns `None` — and does nothing — when `id` is evaluated (reduce its buffer instead). The
/// variable itself stays unevaluated (a stencil's output is evaluated, then `None`): evaluate it
/// first if it will be read again.
pub fn reduce_fused(op: ReduceOp, id: VarId) -> Result<Option<(Buffer, u64)>> {
    with_fused_kernel(id, "fused reduction", |f| {
        let t = Instant::now();
        let spec = f.built.spec(&f.look.kernel, f.hash);
        let (out, bits, status) =
            device::launch_reduce(spec, f.built.size, &f.inputs, f.out_param, op)?;
        report_launch(f.built, f.kind, f.look, t, status, "reduce()");
        Ok((out, bits))
    })
}

/// Reduce each block of `block` consecutive elements of an unevaluated variable without
/// materialising it (the kernel runs into cache-sized scratch, block by block). `None` when `id`
/// is evaluated. Gives the same bits as evaluating first and reducing.
pub fn block_reduce_fused(op: ReduceOp, id: VarId, block: usize) -> Result<Option<Buffer>> {
    with_fused_kernel(id, "fused block reduction", |f| {
        let t = Instant::now();
        let spec = f.built.spec(&f.look.kernel, f.hash);
        let (out, status) =
            device::launch_block_reduce(spec, f.built.size, &f.inputs, f.out_param, op, block)?;
        report_launch(f.built, f.kind, f.look, t, status, "block_reduce()");
        Ok(out)
    })
}

// ---------------------------------------------------------------------------------------------
// Host loops (issue 24)
//
// State updated in a Rust loop that never evaluates (`w = &w - g * lr` with no `eval!`) makes every
// evaluation recompute the whole history in registers: each iteration's kernel is longer than the
// last, compiles anew, and the loop turns quadratic. Two rules keep such state evaluated without
// changing a bit of any result, and a warning covers what they do not:
// - before a fused reduction over more than one lane, the lazy size-1 values it broadcasts are
//   evaluated first (one size-1 kernel for all of them, as `eval!` on them would): the reduction's
//   kernel then loads them, its shape no longer depends on how they were computed, and its blocks —
//   which decide how the partial sums associate — are those of the loop written with `eval!`;
// - an evaluation that needs a lazy size-1 value that an earlier launch already computed in
//   registers evaluates that value first (it was needed again: it is state), so the graph behind
//   it stops growing;
// - a larger lazy array recomputed by many kernels, the last one newly compiled, is named in one
//   warning with the fix (materialising it automatically would cost a full-size buffer that a
//   program reading it twice on purpose never asked for).
// Size-1 kernels compute the same IEEE operations as the lanes of a broadcast did (the kernel IR
// has only explicit `fma`, and no backend contracts `a * b + c`), so moving a scalar's computation
// into a kernel of its own changes no bits.

/// Launches that computed a larger lazy array in registers before the warning below names it.
const RECOMPUTE_WARN_AT: u16 = 16;

/// Whether the recompute warning was given (once per process, or per [`warn_on_recompute`]`(true)`).
static RECOMPUTE_WARNED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
static RECOMPUTE_DETECTED: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Turn the warning about arrays recomputed by many kernels (state a host loop never evaluates) on
/// or off for the process; `KILN_WARN_RECOMPUTE=0` turns it off from the start. Detections are
/// still counted ([`recompute_detections`]).
///
/// ```
/// kiln_core::schedule::warn_on_recompute(false);
/// kiln_core::schedule::warn_on_recompute(true);
/// ```
pub fn warn_on_recompute(on: bool) {
    crate::config::set_warn_recompute(on);
    if on {
        RECOMPUTE_WARNED.store(false, std::sync::atomic::Ordering::Relaxed);
    }
}

/// How many times a larger lazy array was found recomputed by [`RECOMPUTE_WARN_AT`] kernels, the
/// last one newly compiled (the first detection is also logged as a warning, target
/// `kiln::eval`, unless [`warn_on_recompute`] turned it off).
///
/// ```
/// let before = kiln_core::schedule::recompute_detections();
/// assert!(kiln_core::schedule::recompute_detections() >= before);
/// ```
pub fn recompute_detections() -> u64 {
    RECOMPUTE_DETECTED.load(std::sync::atomic::Ordering::Relaxed)
}

/// Variables a walk has seen: a short list searched in place while the walk is small (most
/// evaluations in a loop are), a hash set (the registry's small hasher) beyond — these walks run
/// on every evaluation.
#[derive(Default)]
struct SeenSet {
    few: Vec<u32>,
    many: std::collections::HashSet<u32, std::hash::BuildHasherDefault<crate::registry::FxHasher>>,
}

impl SeenSet {
    /// Add `id`; false if it was there.
    fn insert(&mut self, id: u32) -> bool {
        if self.many.is_empty() {
            if self.few.contains(&id) {
                return false;
            }
            if self.few.len() < 32 {
                self.few.push(id);
                return true;
            }
            self.many.extend(self.few.drain(..));
        }
        self.many.insert(id)
    }
}

/// Whether a lazy variable of this op can be evaluated on its own (a loop's placeholder, a region
/// node and a side effect cannot; a size-1 counter is the constant 0 in any kernel).
fn evaluable_alone(op: Op) -> bool {
    !matches!(
        op,
        Op::Phi | Op::LoopBegin | Op::Switch | Op::Scatter(_) | Op::Counter
    )
}

/// Whether the walks below look through a lazy variable of this op to its operands (not into
/// control-flow regions, whose bodies are evaluated only as a whole).
fn walk_through(op: Op) -> bool {
    !matches!(
        op,
        Op::Phi | Op::LoopBegin | Op::Switch | Op::Out | Op::Scatter(_)
    )
}

/// The lazy size-1 values below `roots` (roots excluded) that an earlier launch already computed
/// in registers: evaluating them now stops the graph behind them from growing. All of them, not
/// only the topmost: one evaluation stores them all (a size-1 store costs nothing), and its own
/// walk then finds none left.
fn reused_scalars(st: &State, roots: &[u32]) -> Vec<u32> {
    let mut found = Vec::new();
    let mut seen = SeenSet::default();
    let mut stack: Vec<u32> = Vec::new();
    for &r in roots {
        let v = st.var(r);
        if walk_through(v.op) {
            stack.extend(v.deps.iter().copied().filter(|&d| d != 0));
        }
    }
    while let Some(id) = stack.pop() {
        if !seen.insert(id) {
            continue;
        }
        let v = st.var(id);
        if !v.alive || v.is_evaluated() || v.is_literal() {
            continue;
        }
        if v.size == 1 && v.computed > 0 && evaluable_alone(v.op) && !roots.contains(&id) {
            found.push(id);
        }
        if walk_through(v.op) {
            stack.extend(v.deps.iter().copied().filter(|&d| d != 0));
        }
    }
    found
}

/// The topmost lazy size-1 values that the kernel of `id` (over more than one lane) would
/// broadcast.
fn broadcast_scalars(st: &State, id: u32) -> Vec<u32> {
    let v = st.var(id);
    if v.size <= 1 || v.is_evaluated() || !walk_through(v.op) {
        return Vec::new();
    }
    let mut found = Vec::new();
    let mut seen = SeenSet::default();
    let mut stack: Vec<u32> = v.deps.iter().copied().filter(|&d| d != 0).collect();
    while let Some(id) = stack.pop() {
        if !seen.insert(id) {
            continue;
        }
        let v = st.var(id);
        if !v.alive || v.is_evaluated() || v.is_literal() {
            continue;
        }
        if v.size == 1 {
            if evaluable_alone(v.op) {
                found.push(id);
            }
            continue;
        }
        if walk_through(v.op) {
            stack.extend(v.deps.iter().copied().filter(|&d| d != 0));
        }
    }
    found
}

/// Evaluate `ids` (lazy size-1 values) in one evaluation, before the one that needs them.
fn settle(ids: &[u32], why: &str) -> Result<()> {
    tracing::debug!(target: "kiln::eval", "evaluating {} lazy scalar(s) first: {why}", ids.len());
    let ids: Vec<VarId> = ids.iter().map(|&i| VarId(i)).collect();
    // (the scalars cannot read a pending scatter — tracing a read of a scatter's target runs it
    // first — but a pending scatter may read a pending reduction, which an evaluation started
    // while reductions resolve must not meet: the scatters run with the evaluation that waits)
    holding_effects(|| run(Some(&ids)))
}

/// Evaluate the lazy scalars that the fused reduction of `id` would broadcast (see the section's
/// notes); for a size-1 `id`, those an earlier launch computed. Nothing while a control-flow body
/// is traced symbolically.
fn settle_broadcast_scalars(id: VarId) -> Result<()> {
    if crate::context::symbolic() {
        return Ok(());
    }
    let scalars = {
        let st = STATE.lock();
        let v = st.var(id.0);
        if !v.alive || v.is_evaluated() {
            return Ok(());
        }
        if v.size == 1 {
            // a size-1 reduction broadcasts nothing; its own state may be reused
            reused_scalars(&st, &[id.0])
        } else {
            broadcast_scalars(&st, id.0)
        }
    };
    if scalars.is_empty() {
        return Ok(());
    }
    // (`id`, held by the caller, keeps them alive)
    settle(&scalars, "a reduction broadcasts them")
}

/// Count one more launch that computed each of `ids` in registers; `missed`: its kernel had to be
/// built. A larger array recomputed by many kernels, the last one new, is a host loop's state that
/// is never evaluated: warn once.
fn note_computed(st: &mut State, ids: &[u32], missed: bool) {
    let mut named: Vec<u32> = Vec::new();
    for &id in ids {
        let v = st.var_mut(id);
        if !v.alive || v.is_evaluated() {
            continue;
        }
        if v.computed < RECOMPUTE_WARN_AT && v.computed.saturating_add(1) >= RECOMPUTE_WARN_AT {
            if missed && v.size > 1 {
                named.push(id);
            } else {
                // (counted again on a later launch, until a new kernel computes it)
                continue;
            }
        }
        v.computed = v.computed.saturating_add(1);
    }
    if named.is_empty() {
        return;
    }
    RECOMPUTE_DETECTED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    if !crate::config::warn_recompute()
        || RECOMPUTE_WARNED.swap(true, std::sync::atomic::Ordering::Relaxed)
    {
        return;
    }
    // labelled arrays first: the names the user gave
    named.sort_by_key(|&id| (st.var(id).label.is_none(), id));
    let list: Vec<String> = named
        .iter()
        .take(3)
        .map(|&id| {
            let v = st.var(id);
            let deps: Vec<String> = v
                .deps
                .iter()
                .filter(|&&d| d != 0)
                .map(|&d| format!("r{d}"))
                .collect();
            format!("{} (a {:?} of {})", st.label_of(id), v.op, deps.join(", "))
        })
        .collect();
    let more = named.len().saturating_sub(3);
    tracing::warn!(
        target: "kiln::eval",
        "{}{} {} been recomputed in registers by {RECOMPUTE_WARN_AT} kernels, the last one newly compiled: each evaluation that reads an unevaluated array computes it again, with everything it depends on. If this is state updated in a loop on the host, evaluate it once per iteration with `kiln::eval!(…)` (or freeze the loop's step with `kiln::freeze`); if it is read several times on purpose, `eval()` it once first. (Name arrays with `.label(\"…\")`; silence this with KILN_WARN_RECOMPUTE=0 or `kiln::kiln_core::schedule::warn_on_recompute(false)`.)",
        list.join(", "),
        if more > 0 { format!(" and {more} more") } else { String::new() },
        if named.len() == 1 { "has" } else { "have" },
    );
}

/// Whether `KILN_DEBUG=1` is set (report out-of-range accesses as warnings).
pub use crate::config::debug_mode;

// ---------------------------------------------------------------------------------------------
// Pending reductions: sibling reductions share one pass

thread_local! {
    /// Set while this thread resolves its pending reductions (the evaluation of a stencil source
    /// that this itself starts must not start it again).
    static RESOLVING: Cell<bool> = const { Cell::new(false) };
}

/// Clears [`RESOLVING`] when dropped (also when a launch panics).
struct Resolving;

impl Drop for Resolving {
    fn drop(&mut self) {
        RESOLVING.set(false);
    }
}

/// A set of variable ids (the registry's small hasher: these walks run per evaluation while
/// reductions are pending).
type IdSet =
    std::collections::HashSet<u32, std::hash::BuildHasherDefault<crate::registry::FxHasher>>;

/// Whether the unevaluated part of `id`'s graph holds a pending reduction (other than `id`).
fn reaches_pending(st: &State, id: u32) -> bool {
    let mut seen = SeenSet::default();
    let mut stack = vec![id];
    while let Some(i) = stack.pop() {
        let v = st.var(i);
        if v.is_evaluated() || !seen.insert(i) {
            continue;
        }
        if matches!(v.op, Op::Reduce(_)) {
            return true;
        }
        stack.extend(v.dep_ids());
    }
    false
}

/// The variables of the unevaluated part of `from`'s graph, with the evaluated ones it reads.
fn graph_of(st: &State, from: &[u32]) -> IdSet {
    graph_walk(st, from, false)
}

/// The variables of the unevaluated part of `from`'s graph, with the evaluated ones it reads;
/// `stop_at_reductions`: a pending reduction is included but not walked through (what it reads
/// is its own business: a host loop's reductions each read the previous ones, and walking their
/// whole chain for each of them would cost the square of the loop's length).
fn graph_walk(st: &State, from: &[u32], stop_at_reductions: bool) -> IdSet {
    let mut seen = IdSet::default();
    let mut stack = from.to_vec();
    while let Some(i) = stack.pop() {
        if i == 0 || !seen.insert(i) {
            continue;
        }
        let v = st.var(i);
        let stop = stop_at_reductions && matches!(v.op, Op::Reduce(_)) && !from.contains(&i);
        if !v.is_evaluated() && !stop {
            stack.extend(v.dep_ids());
        }
    }
    seen
}

/// The level of each of `reductions`: how many pending reductions lie on the longest path below
/// it (0: it can be resolved now). Reductions are resolved level by level; one walk over the
/// graph, each variable once.
fn pending_levels(st: &State, reductions: &[u32]) -> HashMap<u32, u32> {
    // depth of a variable: the most pending reductions on a path from it, itself included
    let mut depth: HashMap<u32, u32> = HashMap::new();
    let mut stack: Vec<(u32, bool)> = reductions.iter().map(|&r| (r, false)).collect();
    while let Some((id, expanded)) = stack.pop() {
        if depth.contains_key(&id) {
            continue;
        }
        let v = st.var(id);
        if v.is_evaluated() {
            depth.insert(id, 0);
            continue;
        }
        if !expanded {
            stack.push((id, true));
            stack.extend(
                v.dep_ids()
                    .filter(|d| !depth.contains_key(d))
                    .map(|d| (d, false)),
            );
            continue;
        }
        let below = v
            .dep_ids()
            .map(|d| depth.get(&d).copied().unwrap_or(0))
            .max();
        let own = u32::from(matches!(v.op, Op::Reduce(_)));
        depth.insert(id, below.unwrap_or(0) + own);
    }
    reductions
        .iter()
        .map(|&r| (r, depth.get(&r).copied().unwrap_or(1).saturating_sub(1)))
        .collect()
}

/// Which of the pending reductions `mine` an evaluation of `roots` resolves: those it reads;
/// those that read an evaluated array it reads that no handle holds, or one of `touch` (their
/// references would keep that buffer from being updated in place or scattered into without a
/// copy); the pending reductions these wait for; and every pending reduction over a source of
/// the same size as one of these (siblings join the pass). Others stay pending: evaluating an
/// unrelated array does not compute them.
fn select_reductions(st: &State, roots: &[u32], touch: &[u32], mine: &[u32]) -> IdSet {
    let in_roots = graph_of(st, roots);
    let hot: IdSet = in_roots
        .iter()
        .copied()
        .filter(|&i| st.var(i).is_evaluated() && st.var(i).ext == 0)
        .chain(touch.iter().copied())
        .collect();
    // each source up to the pending reductions it reads (a reduction that reads a hot array
    // only through another one holds no reference to it: that other one does); walked only for
    // the reductions the evaluation does not read, since those it reads are chosen and so is
    // everything they wait for (a host loop read at the end reads them all: no walk)
    let sources: HashMap<u32, IdSet> = mine
        .iter()
        .filter(|p| !in_roots.contains(p))
        .map(|&p| (p, graph_walk(st, &[st.var(p).deps[0]], true)))
        .collect();
    let size_of = |p: u32| st.var(st.var(p).deps[0]).size;
    let in_mine: IdSet = mine.iter().copied().collect();
    let mut by_size: HashMap<usize, Vec<u32>> = HashMap::new();
    for &p in mine {
        by_size.entry(size_of(p)).or_default().push(p);
    }
    let mut work: Vec<u32> = mine
        .iter()
        .copied()
        .filter(|p| in_roots.contains(p) || !sources[p].is_disjoint(&hot))
        .collect();
    let mut chosen = IdSet::default();
    let mut sizes: std::collections::HashSet<usize> = std::collections::HashSet::new();
    while let Some(c) = work.pop() {
        if !chosen.insert(c) {
            continue;
        }
        if sizes.insert(size_of(c)) {
            work.extend(&by_size[&size_of(c)]);
        }
        // the pending reductions it waits for (theirs are taken in when they are chosen)
        if let Some(graph) = sources.get(&c) {
            work.extend(
                graph
                    .iter()
                    .copied()
                    .filter(|&i| i != c && in_mine.contains(&i)),
            );
        }
    }
    chosen
}

/// Evaluate the pending reductions (`Op::Reduce`, what `sum`, `prod`, `reduce_min` and
/// `reduce_max` return) of this thread that an evaluation of `roots` needs (see
/// [`select_reductions`]; `None`: all of them), before that evaluation builds its kernels.
/// Reductions are resolved phase by phase (one whose source holds another pending reduction
/// waits for the next phase); within a phase the reductions over one size share one pass:
/// evaluated sources of one length are reduced together by [`device::reduce_many`], and
/// unevaluated sources of one size become the outputs of one kernel whose blocks are reduced as
/// they are produced ([`device::launch_reduce_many`], no full-size array). Blocks are
/// [`device::REDUCE_BLOCK`] lanes whatever the kernel, so each result has the bits that reducing
/// its source alone gives. A lone reduction takes the single-reduction paths. Nothing runs inside
/// a symbolic body.
pub(crate) fn resolve_reductions(roots: Option<&[u32]>, touch: &[u32]) -> Result<()> {
    if RESOLVING.get() || crate::context::symbolic() {
        return Ok(());
    }
    if STATE.lock().pending_reductions.is_empty() {
        return Ok(());
    }
    let _serial = lock_eval();
    RESOLVING.set(true);
    let _reset = Resolving;
    // (no pending scatter is older than a pending reduction: `kiln_core::reduce` runs them when
    // it makes one, as the eager reduction did; so reductions run before the scatters, which may
    // read them)
    let mut chosen: Option<IdSet> = None;
    // what the evaluation reads: another thread's pending reduction in it (an array sent across
    // threads before it was evaluated) must be resolved here too, or its kernel would meet it
    let mut reads: Option<IdSet> = None;
    let mut levels: Option<HashMap<u32, u32>> = None;
    let mut read_reductions: Option<Vec<u32>> = None;
    loop {
        let mut st = STATE.lock();
        let me = crate::registry::thread_token();
        let reads = reads.get_or_insert_with(|| {
            // (CSE shares a reduction of equal operands between threads; the sources of this
            // thread's own pending reductions count too: a sibling chosen below may wait for
            // another thread's reduction)
            let mut from: Vec<u32> = roots.map(<[u32]>::to_vec).unwrap_or_default();
            from.extend(st.runnable_effects());
            from.extend(st.pending_reductions.iter().filter_map(|&p| {
                let v = st.var(p);
                (v.alive && v.thread == me && matches!(v.op, Op::Reduce(_))).then(|| v.deps[0])
            }));
            graph_of(&st, &from)
        });
        let list = std::mem::take(&mut st.pending_reductions);
        let (mut mine, mut others) = (Vec::new(), Vec::new());
        // (a set beside the list: a host loop read only at the end has hundreds pending)
        let mut in_mine = IdSet::default();
        for id in list {
            let v = st.var(id);
            if !v.alive || v.is_evaluated() || !matches!(v.op, Op::Reduce(_)) {
                continue;
            }
            if v.thread != me && !reads.contains(&id) {
                others.push(id);
            } else if in_mine.insert(id) {
                mine.push(id);
            }
        }
        // a pending reduction this evaluation reads is resolved whatever list it is on (or
        // whether another thread's resolution holds it off the list right now)
        // (the reductions among what it reads, found once: a host loop's graph is large)
        let read_reductions = read_reductions.get_or_insert_with(|| {
            let mut found: Vec<u32> = reads
                .iter()
                .copied()
                .filter(|&i| matches!(st.var(i).op, Op::Reduce(_)))
                .collect();
            found.sort_unstable();
            found
        });
        let unlisted: Vec<u32> = read_reductions
            .iter()
            .copied()
            .filter(|&i| {
                let v = st.var(i);
                v.alive
                    && !v.is_evaluated()
                    && matches!(v.op, Op::Reduce(_))
                    && !in_mine.contains(&i)
            })
            .collect();
        mine.extend(unlisted);
        let sel = chosen.get_or_insert_with(|| match roots {
            None => mine.iter().copied().collect(),
            Some(roots) => {
                // the pending scatters this evaluation runs may read reductions too
                let mut roots = roots.to_vec();
                roots.extend(st.runnable_effects());
                select_reductions(&st, &roots, touch, &mine)
            }
        });
        let (mine, rest): (Vec<u32>, Vec<u32>) = mine.into_iter().partition(|p| sel.contains(p));
        others.extend(rest);
        if mine.is_empty() {
            st.pending_reductions = others;
            return Ok(());
        }
        // (the lowest level first: checking every reduction each phase would cost the square
        // of a host loop's length; the full check when none of those is ready)
        let levels = levels.get_or_insert_with(|| pending_levels(&st, &mine));
        let low = mine.iter().filter_map(|r| levels.get(r)).min().copied();
        let is_ready = |r: u32| !reaches_pending(&st, st.var(r).deps[0]);
        let (mut ready, mut waiting): (Vec<u32>, Vec<u32>) = mine
            .iter()
            .partition(|&r| levels.get(r).is_none_or(|l| Some(*l) == low) && is_ready(*r));
        if ready.is_empty() {
            (ready, waiting) = mine.iter().partition(|&&r| is_ready(r));
        }
        others.extend(&waiting);
        st.pending_reductions = others;
        if ready.is_empty() {
            // they wait for reductions this resolution did not pick (held by another thread's
            // list, or made after the pick): take those in too and try again
            let srcs: Vec<u32> = mine.iter().map(|&r| st.var(r).deps[0]).collect();
            let mut blocking: Vec<u32> = graph_of(&st, &srcs)
                .into_iter()
                .filter(|&i| {
                    let v = st.var(i);
                    v.alive
                        && !v.is_evaluated()
                        && matches!(v.op, Op::Reduce(_))
                        && !mine.contains(&i)
                })
                .collect();
            if blocking.is_empty() {
                return Err(crate::Error::Invalid(
                    "kiln internal error: pending reductions wait for each other".into(),
                ));
            }
            blocking.sort_unstable();
            sel.extend(blocking.iter().copied());
            reads.extend(blocking.iter().copied());
            read_reductions.extend(blocking.iter().copied());
            read_reductions.sort_unstable();
            read_reductions.dedup();
            st.pending_reductions.extend(blocking);
            continue;
        }
        for &r in &ready {
            st.inc_int(r);
        }
        let scalars = phase_scalars(&st, &ready);
        drop(st);
        // (under `RESOLVING`: this evaluation resolves nothing itself; none of them reads a
        // pending reduction, since no source of `ready` does)
        let result = if scalars.is_empty() {
            Ok(())
        } else {
            settle(&scalars, "the reductions of this phase broadcast them")
        }
        .and_then(|()| resolve_phase(&ready));
        let mut st = STATE.lock();
        if result.is_err() {
            // still pending: a later evaluation tries again (or reports the error again)
            st.pending_reductions.extend(&ready);
        }
        let mut garbage = Vec::new();
        for &r in &ready {
            st.dec_int(r, &mut garbage);
        }
        drop(st);
        drop(garbage);
        result?;
    }
}

/// The lazy size-1 values the kernels of a phase's reductions `ready` would broadcast. A host loop
/// that reads its weights only at the end is resolved phase by phase, one iteration each; each
/// phase's kernel would inline every update of the weights so far (a new kernel per phase) unless
/// the weights of that iteration are evaluated first, as [`settle_broadcast_scalars`] does for a
/// lone reduction.
fn phase_scalars(st: &State, ready: &[u32]) -> Vec<u32> {
    let mut found: Vec<u32> = Vec::new();
    for &r in ready {
        let v = st.var(r);
        if !v.alive || v.is_evaluated() {
            continue;
        }
        for s in broadcast_scalars(st, v.deps[0]) {
            if !found.contains(&s) {
                found.push(s);
            }
        }
    }
    found
}

/// Evaluate the pending reductions `ready` (none of whose sources holds a pending reduction).
fn resolve_phase(ready: &[u32]) -> Result<()> {
    // (reduction, source, op) of each still-pending one
    let st = STATE.lock();
    let items: Vec<(u32, u32, ReduceOp)> = ready
        .iter()
        .filter_map(|&r| {
            let v = st.var(r);
            match v.op {
                Op::Reduce(op) if v.alive && !v.is_evaluated() => Some((r, v.deps[0], op)),
                _ => None,
            }
        })
        .collect();
    // evaluated sources, grouped by (length, size expression): a replay finds them equal again
    type Stored = Vec<(u32, ReduceOp, Arc<Buffer>)>;
    let mut stored: Vec<((usize, u32), Stored)> = Vec::new();
    // unevaluated sources, grouped by (size, size expression)
    type Key = (usize, u32);
    // (reduction, index of its source, operation)
    type Reds = Vec<(u32, usize, ReduceOp)>;
    let mut lazy: Vec<(Key, Vec<u32>, Reds)> = Vec::new();
    for &(r, src, op) in &items {
        let sv = st.var(src);
        if let Some(buf) = sv.data.clone() {
            let key = (buf.len, sv.sym);
            match stored.iter_mut().find(|g| g.0 == key) {
                Some(g) => g.1.push((r, op, buf)),
                None => stored.push((key, vec![(r, op, buf)])),
            }
            continue;
        }
        let key = (sv.size, sv.sym);
        let g = match lazy.iter().position(|g| g.0 == key) {
            Some(i) => &mut lazy[i],
            None => {
                lazy.push((key, Vec::new(), Vec::new()));
                lazy.last_mut().expect("just pushed")
            }
        };
        let k = match g.1.iter().position(|&s| s == src) {
            Some(k) => k,
            None => {
                g.1.push(src);
                g.1.len() - 1
            }
        };
        g.2.push((r, k, op));
    }
    drop(st);
    let mut results: Vec<(u32, Buffer)> = Vec::new();
    for (_, group) in stored {
        if let [(r, op, buf)] = &group[..] {
            results.push((*r, device::reduce(*op, buf)?));
        } else {
            let pairs: Vec<(ReduceOp, &Buffer)> =
                group.iter().map(|(_, op, b)| (*op, b.as_ref())).collect();
            let outs = device::reduce_many(&pairs)?;
            results.extend(group.iter().map(|g| g.0).zip(outs));
        }
    }
    let mut stencils: Vec<u32> = Vec::new();
    for ((size, sym), srcs, reds) in lazy {
        match reduce_sources(size, sym, &srcs, &reds)? {
            Some(r) => results.extend(r),
            None => stencils.extend(&srcs),
        }
    }
    if !stencils.is_empty() {
        let ids: Vec<VarId> = stencils.iter().map(|&s| VarId(s)).collect();
        run(Some(&ids))?;
        // (their reductions stay pending: the next phase reduces the buffers)
    }
    let mut st = STATE.lock();
    let mut garbage = Vec::new();
    for (r, out) in results {
        if st.var(r).alive && !st.var(r).is_evaluated() {
            st.set_data(r, Arc::new(out), &mut garbage);
        }
    }
    // the stencil sources' reductions go back on the list
    for &(r, src, _) in &items {
        if stencils.contains(&src) && !st.var(r).is_evaluated() {
            st.pending_reductions.push(r);
        }
    }
    drop(st);
    drop(garbage);
    Ok(())
}

/// Run the kernel computing the unevaluated `srcs` (all of `size` lanes) once and reduce its
/// outputs as they are produced, in blocks of [`device::REDUCE_BLOCK`] lanes whatever the kernel
/// (so that a result's bits never depend on what shares its pass): `reds` holds (reduction,
/// index into `srcs`, operation). Returns each reduction's size-1 result, or `None` (nothing run)
/// when the kernel holds a stencil, which is worth its split launch: the caller evaluates the
/// sources and reduces their buffers.
fn reduce_sources(
    size: usize,
    sym: u32,
    srcs: &[u32],
    reds: &[(u32, usize, ReduceOp)],
) -> Result<Option<Vec<(u32, Buffer)>>> {
    let mut st = STATE.lock();
    for &s in srcs {
        st.inc_int(s);
    }
    let group = Group {
        size,
        sym,
        roots: srcs.to_vec(),
        side: Vec::new(),
    };
    let built = plan::plan_fused(&st, group).into_built();
    drop(st);
    let mut missed = false;
    let result = (|| {
        if !built.stencil_seen.is_empty() {
            return Ok(None);
        }
        let kind = backend();
        let be = crate::backend::select::instance(kind)?;
        let hash = built.kernel.hash();
        let look = cache::get(&be, &built.kernel, hash)?;
        missed = !look.hit;
        if tracing::enabled!(target: "kiln::kernel", tracing::Level::TRACE) {
            tracing::trace!(target: "kiln::kernel", "kernel IR (sibling reductions):\n{}", built.kernel);
        }
        let inputs: Vec<&Buffer> = built
            .bindings
            .iter()
            .filter_map(|bind| match bind {
                Binding::Input(buf) | Binding::Shifted(buf, _) => Some(buf.as_ref()),
                Binding::Output(_) => None,
            })
            .collect();
        let out_param = |k: usize| {
            built
                .bindings
                .iter()
                .position(|b| matches!(b, Binding::Output(j) if *j == k))
                .expect("one output per source")
        };
        let mut spec = built.spec(&look.kernel, hash);
        spec.block = device::REDUCE_BLOCK;
        let t = Instant::now();
        if let [(r, k, op)] = reds {
            // one reduction alone: the single-reduction launch
            let (out, _, status) = device::launch_reduce(spec, size, &inputs, out_param(*k), *op)?;
            report_launch(&built, kind, &look, t, status, "reduce()");
            return Ok(Some(vec![(*r, out)]));
        }
        let pairs: Vec<(usize, ReduceOp)> =
            reds.iter().map(|&(_, k, op)| (out_param(k), op)).collect();
        let (outs, _, status) = device::launch_reduce_many(spec, size, &inputs, &pairs)?;
        report_launch(
            &built,
            kind,
            &look,
            t,
            status,
            "reduce() of sibling reductions",
        );
        Ok(Some(reds.iter().map(|r| r.0).zip(outs).collect()))
    })();
    let mut garbage = Vec::new();
    let mut st = STATE.lock();
    if matches!(result, Ok(Some(_))) {
        note_computed(&mut st, &built.computed, missed);
    }
    for &s in srcs {
        st.dec_int(s, &mut garbage);
    }
    drop(st);
    drop(garbage);
    result
}
