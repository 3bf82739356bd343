//! Function freezing: record a traced function's device operations once, replay them later with no
//! tracing, no code generation and no hashing.
//!
//! [`freeze`] wraps a closure. Each call traverses the arguments ([`Traverse`]) into a layout key
//! and a deduplicated list of input arrays. The first call with a new key evaluates the inputs,
//! traces the function while the engine records every device operation (launches, reductions,
//! prefix sums, compress, copies, uploads) with buffers identified by input slot, and evaluates the
//! outputs. Later calls with a compatible key run a dry run (every size expression evaluated for
//! the new input sizes, every size decision of the trace checked) and replay the recorded
//! operations on the new buffers. Sizes are never guessed: see [`kiln_core::Size`].

mod args;
mod explain;
mod grads;
mod stats;
pub mod traverse;

pub use args::{ArgItem, ArgList, Mut, Ref, Shape, Signature};
pub use stats::FreezeStats;
pub use traverse::{Assign, Traversal, Traverse};

use kiln_core::freeze::{self as engine, Recording, Reject, Replayed};
use kiln_core::{Error, Result, VarId};
use std::any::Any;
use std::collections::{HashMap, HashSet};
use std::marker::PhantomData;
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::time::Instant;

/// A frozen function: call it with `call` (same arguments as the closure); configure it with the
/// builder methods below.
///
/// ```
/// use kiln::prelude::*;
/// let mut f = kiln::freeze(|x: &Float32, k: &u32| -> Float32 { x * *k as f32 })
///     .limit(2)          // at most two recordings; further layouts run unfrozen
///     .warn_after(1);    // warn once it records more than once
/// let x = Float32::ones(3);
/// for k in [1u32, 2, 3, 1] {
///     assert_eq!(f.call(&x, &k).unwrap().to_vec(), vec![k as f32; 3]);
/// }
/// let s = f.stats();
/// assert_eq!((s.recordings, s.replays, s.unfrozen), (2, 1, 1));
/// println!("{s}");
/// ```
pub struct Frozen<F, M: Shape> {
    f: F,
    #[allow(clippy::type_complexity)]
    state_fn: Option<Box<dyn for<'a> FnMut(M::Args<'a>) -> Box<dyn Traverse> + Send>>,
    state: FrozenState,
    _m: PhantomData<M>,
}

/// Freeze `f`: record its device operations on the first call with a new input layout and replay
/// them on later calls.
///
/// `f` takes 1 to 8 arguments, each `&T` or `&mut T` with `T: Traverse`, and returns a
/// `Traverse + Clone` value (`()` included). What `f` does to a `&mut` argument (a scatter into it,
/// replacing one of its arrays) happens again on replay, to the caller's object. As in a traced
/// call, a replay writes a `&mut` argument's new arrays into the old ones' buffers when the
/// caller holds those alone (no clone, no pending expression reading them): a clone the caller
/// kept still has the old values.
///
/// **Captured values are baked in.** A plain value the closure captures (`let spp = 4;
/// freeze(move |x: &Float32| x * spp as f32)`) is a constant of the recording: changing it later
/// has no effect on replays. To make such a value part of the key (a new value records anew), pass
/// it as an argument or return it from [`Frozen::with_state`]. Arrays the closure captures must be
/// passed the same way: using one is an error that says so.
///
/// **Gradients.** A frozen function is a boundary of the AD graph, because a replay runs kernels,
/// not the function's Rust code, and so cannot repeat what the function did to the graph. Inside,
/// everything AD offers works and is recorded (a loss, `backward()` or `kiln::grad`, reading
/// `p.grad()` lazily, an optimizer step); across the boundary:
/// - a `&mut` argument's float array that carries a gradient on entry is re-leafed: the function
///   sees a fresh leaf with no gradient (so `backward` inside fills it), and the caller gets a
///   fresh leaf back, after a recording and after a replay alike, whose gradient is what it held
///   before the call plus what the passes inside left on the leaf (Dr.Jit's pattern: `backward`
///   inside the frozen step, the optimizer outside). An optimizer stepped inside consumes the
///   gradients, so then nothing is added. Inside, the leaf starts without the caller's gradient,
///   so `set_grad`/`clear_grad` there act on what this call's passes bring, and the sum is
///   added on exit (a plain call would replace the caller's gradient instead); two places of the
///   arguments holding one array (clones sharing its node) get a leaf each, and each its own
///   part of the gradient. An array the caller computed from others (`y = f(x)`, an interior
///   node) that the function leaves as it was gets its own node back instead, and what the
///   passes inside delivered to it flows on to `x`, as when an `isolate_grad` scope ends
///   (Dr.Jit's rule). A call that fails leaves the caller's gradients as they were;
/// - a `&` argument's gradient-carrying arrays are constants inside: a `backward` there stops
///   at them (nothing reaches the caller's graph);
/// - everything returned, and every other array of the `&mut` arguments, comes back detached.
///
/// Reading a value inside (`p.grad().to_vec()`) is refused like any read (`Error::FrozenRead`);
/// return lazy gradients (`kiln::ad::grads(&p)`) or read them after the call. A call that
/// runs unfrozen (freezing turned off, the recording limit reached, or nested in another frozen
/// function's recording) is a plain call, without this boundary.
///
/// Inside the function, size new arrays with `x.size()` (a [`kiln_core::Size`]), not `x.len()`:
/// `UInt32::arange(x.size() / 2)` replays at any width, while a plain integer ties the recording
/// to the input sizes it was made with (a call with other sizes then records anew and warns).
///
/// ```
/// use kiln::prelude::*;
/// let mut step = kiln::freeze(|x: &Float32, seed: &UInt32| -> Float32 {
///     let noise = (seed + UInt32::arange(x.size())).cast::<f32>() * 1e-3;
///     x * 2.0 + noise
/// });
/// let x = Float32::linspace(0.0, 1.0, 1000);
/// for i in 0..5u32 {
///     let y = step.call(&x, &UInt32::opaque(i)).unwrap();   // 1st call records, later ones replay
///     assert_eq!(y.len(), 1000);
/// }
/// assert_eq!(step.stats().recordings, 1);
/// assert_eq!(step.stats().replays, 4);
///
/// // gradients from a backward pass inside reach the caller's `&mut` arrays
/// let mut grad_step = kiln::freeze(|w: &mut Float32, x: &Float32| (&*w * x).sum().backward());
/// let mut w = Float32::from_slice(&[1.0, 1.0]);
/// w.enable_grad();
/// for _ in 0..3 {
///     grad_step.call(&mut w, &Float32::from_slice(&[2.0, 4.0])).unwrap();
///     w = (&w - w.grad() * 0.25).detach();   // a plain descent step outside
///     w.enable_grad();
/// }
/// assert_eq!(w.to_vec(), vec![-0.5, -2.0]);
/// assert_eq!(grad_step.stats().replays, 2);
/// ```
pub fn freeze<M: Shape, F: Signature<M>>(f: F) -> Frozen<F, M> {
    Frozen {
        f,
        state_fn: None,
        state: FrozenState::new(),
        _m: PhantomData,
    }
}

impl<F, M: Shape> Frozen<F, M> {
    /// Extra state to traverse with the arguments, computed from them before every record or
    /// replay: arrays the function uses that its arguments do not expose (hidden inputs), or plain
    /// values that should be part of the key.
    ///
    /// ```
    /// use kiln::prelude::*;
    /// let table = Float32::from_slice(&[10.0, 20.0, 30.0]);
    /// let t2 = table.clone();
    /// let mut f = kiln::freeze(move |i: &UInt32| -> Float32 { kiln::gather(&t2, i) })
    ///     .with_state({ let t = table.clone(); move |_args| t.clone() });
    /// assert_eq!(f.call(&UInt32::from_slice(&[2, 0])).unwrap().to_vec(), vec![30.0, 10.0]);
    /// ```
    pub fn with_state<S: Traverse + 'static>(
        mut self,
        mut state: impl for<'a> FnMut(M::Args<'a>) -> S + Send + 'static,
    ) -> Self {
        self.state_fn = Some(Box::new(move |a| Box::new(state(a)) as Box<dyn Traverse>));
        self
    }
    /// At most `n` recordings; further layouts run unfrozen (traced as usual), or, with
    /// [`Frozen::evict_least_recent`], replace the recording used longest ago.
    pub fn limit(mut self, n: usize) -> Self {
        self.state.limit = n;
        self
    }
    /// With a [`Frozen::limit`] reached, a new layout drops the recording that was used (recorded
    /// or replayed) longest ago and records, instead of running unfrozen (Dr.Jit's rule). Right
    /// when the layouts drift (a new phase of a program); the default is right when more
    /// layouts than the limit alternate, where evicting would record at every call.
    ///
    /// ```
    /// use kiln::prelude::*;
    /// let mut f = kiln::freeze(|x: &Float32, k: &u32| x + *k as f32)
    ///     .limit(1)
    ///     .evict_least_recent(true);
    /// let x = Float32::from_slice(&[1.0, 2.0]);
    /// for k in [1u32, 2, 2, 1] {
    ///     f.call(&x, &k).unwrap();
    /// }
    /// assert_eq!((f.stats().recordings, f.cached_recordings()), (3, 1));
    /// ```
    pub fn evict_least_recent(mut self, on: bool) -> Self {
        self.state.evict_lru = on;
        self
    }
    /// Warn when the function has been recorded more than `n` times.
    pub fn warn_after(mut self, n: usize) -> Self {
        self.state.warn_after = n;
        self
    }
    /// Turn freezing on or off for this function (off: every call traces as usual).
    pub fn enabled(mut self, on: bool) -> Self {
        self.state.enabled = on;
        self
    }
    /// Make literal inputs whose value changes between calls opaque automatically (default: on).
    pub fn auto_opaque(mut self, on: bool) -> Self {
        self.state.auto_opaque = on;
        self
    }
    /// A recording that reads an array captured from the environment (a `HiddenInput`) returns
    /// its results and turns freezing off, instead of failing: for kiln's own loops, whose steps
    /// run while the captured arrays are alive and unchanged, so tracing each step is merely
    /// slower.
    pub(crate) fn unfreeze_on_hidden_input(mut self) -> Self {
        self.state.unfreeze_on_hidden = true;
        self
    }
    /// Record with derivatives recorded or not as the caller has it (a frozen function's body
    /// otherwise always records them): for kiln's own loops.
    pub(crate) fn grad_mode_as_is(mut self) -> Self {
        self.state.grad_as_is = true;
        self
    }
    /// The same recordings with another function to call when none fits: for kiln's own
    /// loops, which record a step while the user's closure is at hand and replay it after it is
    /// gone (a scan's gradient scan); `g` then reports that a replay was impossible.
    pub(crate) fn with_fn<G>(self, g: G) -> Frozen<G, M> {
        Frozen {
            f: g,
            state_fn: self.state_fn,
            state: self.state,
            _m: PhantomData,
        }
    }
    /// Recordings, replays, re-traces and why, and the mean cost of each kind of call.
    pub fn stats(&self) -> &FreezeStats {
        &self.state.stats
    }
    /// Turn freezing on or off from now on, keeping the recordings (Dr.Jit's
    /// `frozen.enabled = …`); see [`Frozen::enabled`].
    ///
    /// ```
    /// use kiln::prelude::*;
    /// let mut f = kiln::freeze(|x: &Float32| x + 1.0).enabled(false);
    /// f.call(&Float32::arange(4)).unwrap();
    /// assert_eq!(f.stats().recordings, 0);
    /// f.set_enabled(true);
    /// assert!(f.is_enabled());
    /// f.call(&Float32::arange(4)).unwrap();
    /// assert_eq!((f.stats().recordings, f.cached_recordings()), (1, 1));
    /// ```
    pub fn set_enabled(&mut self, on: bool) {
        self.state.enabled = on;
    }
    /// Whether freezing is on for this function.
    pub fn is_enabled(&self) -> bool {
        self.state.enabled
    }
    /// Recordings kept now (at most the [`Frozen::limit`]; `clear` drops them).
    pub fn cached_recordings(&self) -> usize {
        self.state.entries.values().map(|l| l.len()).sum()
    }
    /// Drop every recording (the next call records anew).
    pub fn clear(&mut self) {
        self.state.entries.clear();
        self.state.layouts.clear();
    }
}

/// One recording with what must match to use it.
struct Entry {
    rec: Recording,
    /// Literal input values baked into the recording (slot, bits), for slots not made opaque.
    literals: Vec<(u32, u64)>,
    /// The returned value with placeholder arrays: a replay clones it and assigns the new arrays.
    template: Box<dyn Any + Send>,
    /// Number of array positions in the returned value (then come the `&mut` arguments).
    n_returned: usize,
    /// The `&mut` positions whose gradient the function's passes delivered: the recording's
    /// last outputs, in this order, each with whether the function kept its entry leaf (see
    /// `grads::at_end`).
    grads_at: Vec<(usize, bool)>,
    /// Per `&mut` position: whether the argument tracks derivatives when the function returns
    /// (it may `enable_grad` or detach one): a replay leaves the caller's arrays so, as the
    /// unfrozen call does, each tracking one a fresh leaf (the call is an AD boundary).
    tracked_after: Vec<bool>,
    /// The call (`FrozenState::clock`) that last recorded or replayed it, for eviction.
    used: std::cell::Cell<u64>,
}

/// Everything a frozen function keeps between calls, independent of its argument types.
pub(crate) struct FrozenState {
    entries: HashMap<u64, Vec<Entry>>,
    /// Per layout key: array positions made opaque (their literal value changed between calls).
    opaque: HashMap<u64, Vec<bool>>,
    limit: usize,
    /// Past the limit, evict the least recently used recording instead of running unfrozen.
    evict_lru: bool,
    /// Calls so far (the time stamp of `Entry::used`).
    clock: u64,
    /// The kernel cache's flush count the recordings were made under (a flush drops them).
    cache_epoch: u64,
    warn_after: usize,
    enabled: bool,
    auto_opaque: bool,
    unfreeze_on_hidden: bool,
    /// Derivatives recorded as the caller has it (see `grad_mode_as_is`).
    grad_as_is: bool,
    warned: HashSet<String>,
    stats: FreezeStats,
    /// What each recorded layout key was made of (to say why a new key records).
    layouts: HashMap<u64, explain::Layout>,
}

/// Log a warning the first time `key` comes up.
fn warn_once(warned: &mut HashSet<String>, key: String, msg: impl FnOnce() -> String) {
    if warned.insert(key) {
        tracing::warn!(target: "kiln::freeze", "{}", msg());
    }
}

/// The unwinding payload of a read refused inside a recording (see `array::raise`): the
/// recording returns the error instead of propagating the unwind.
struct RefusedRead(Error);

/// Unwind from a refused read to the recording in progress, without the panic hook (nothing is
/// printed: the frozen call returns the error).
pub(crate) fn unwind_refused_read(e: Error) -> ! {
    resume_unwind(Box::new(RefusedRead(e)))
}

/// Ends a recording if the traced function unwinds.
struct RecordingGuard(bool);
impl Drop for RecordingGuard {
    fn drop(&mut self) {
        if self.0 {
            engine::abort();
        }
    }
}

impl FrozenState {
    /// Drop the recording used longest ago (see [`Frozen::evict_least_recent`]).
    fn evict_least_recent(&mut self) {
        let oldest = self
            .entries
            .iter()
            .flat_map(|(k, l)| {
                l.iter()
                    .enumerate()
                    .map(move |(i, e)| (e.used.get(), *k, i))
            })
            .min();
        if let Some((_, key, i)) = oldest {
            let list = self.entries.get_mut(&key).expect("the key just found");
            list.remove(i);
            if list.is_empty() {
                self.entries.remove(&key);
            }
        }
    }
    fn new() -> FrozenState {
        FrozenState {
            entries: HashMap::new(),
            opaque: HashMap::new(),
            limit: usize::MAX,
            evict_lru: false,
            clock: 0,
            cache_epoch: kiln_core::cache::epoch(),
            warn_after: 10,
            enabled: true,
            auto_opaque: true,
            unfreeze_on_hidden: false,
            grad_as_is: false,
            warned: HashSet::new(),
            stats: FreezeStats::default(),
            layouts: HashMap::new(),
        }
    }

    /// Whether a call will record or replay (so extra state is worth computing).
    pub(crate) fn wants_state(&self) -> bool {
        self.enabled && kiln_core::config::freeze_enabled() && !engine::in_recording()
    }

    pub(crate) fn call<A: ArgList, O: Traverse + Clone + Send + 'static>(
        &mut self,
        args: &mut A,
        extra: Option<Box<dyn Traverse>>,
        run: &mut dyn FnMut(&mut A) -> O,
    ) -> Result<O> {
        if !self.wants_state() {
            // off, or nested in another recording: run inlined
            let out = run(args);
            if !engine::in_recording() && !self.unfreeze_on_hidden {
                // freezing turned off (`KILN_FREEZE=0`, `.enabled(false)`) must not change the
                // program's complexity: evaluate what a frozen call evaluates
                evaluate_outputs(&out, args)?;
            }
            return Ok(out);
        }
        let t0 = Instant::now();
        if self.cache_epoch != kiln_core::cache::epoch() {
            // the kernel cache was flushed: record again, as Dr.Jit does
            self.cache_epoch = kiln_core::cache::epoch();
            self.entries.clear();
        }
        let mut t = Traversal::new();
        args.traverse_all(&mut t);
        if let Some(s) = &extra {
            t.argument("state", |t| s.traverse(t));
        }
        // a frozen function is a boundary of the AD graph: the `&mut` arrays that carry
        // gradients get fresh leaves on entry and on exit (interior ones left unchanged get
        // their node back), and what passes inside bring those
        // leaves reaches the caller's arrays (see `Frozen` on AD and `grads`)
        let held: Option<grads::Held> = if t.found.iter().any(|f| f.ad != 0) {
            let mut tm = Traversal::new();
            args.traverse_mutable(&mut tm);
            let mask: Vec<bool> = tm.found.iter().map(|f| f.ad != 0).collect();
            mask.iter()
                .any(|&b| b)
                .then(|| grads::Held::take(args, mask))
        } else {
            None
        };
        let key = match &held {
            Some(h) => grads::key_with(t.key(), h.mask()),
            None => t.key(),
        };
        // a key never recorded: keep what it is made of, to explain the recording it needs
        let layout =
            (!self.entries.contains_key(&key)).then(|| explain::Layout::of(args, extra.as_deref()));

        // literal inputs that changed value before: make them opaque now
        if let Some(mask) = self.opaque.get(&key) {
            for (pos, f) in t.found.iter().enumerate() {
                if mask.get(pos).copied().unwrap_or(false) && engine::input_class(f.id).2 {
                    let id = kiln_core::make_opaque(f.id)?;
                    kiln_core::dec_ref(id);
                }
            }
        }
        let slots = t.slots.clone();
        let literals = literal_values(&slots);
        let sizes = engine::prepare_inputs(&slots)?;
        // the `&mut` arguments' arrays: the caller's handles on them are replaced when a replay
        // hands its outputs back, so a replay may write into them (see `replay_releasing`)
        let released: Vec<bool> = if A::ALL_MUTABLE && extra.is_none() {
            vec![true; slots.len()] // (one traversal less per call: Python's argument tree)
        } else {
            let mut tm = Traversal::new();
            args.traverse_mutable(&mut tm);
            let mut mutable: Vec<VarId> = tm.found.iter().map(|f| f.id).collect();
            mutable.sort_unstable();
            slots
                .iter()
                .map(|id| mutable.binary_search(id).is_ok())
                .collect()
        };

        // find a recording
        let mut overwrite: Option<usize> = None;
        let mut reasons: Vec<String> = Vec::new();
        // (slot, value when recorded, value now)
        let mut changed_literals: Vec<(u32, u64, u64)> = Vec::new();
        if let Some(list) = self.entries.get(&key) {
            for (i, e) in list.iter().enumerate() {
                if e.literals != literals {
                    // same slot literal in both, other value: a changing literal
                    for &(slot, bits) in &literals {
                        let before = e.literals.iter().find(|l| l.0 == slot);
                        if let Some(&(_, was)) = before {
                            if was != bits && !changed_literals.iter().any(|c| c.0 == slot) {
                                changed_literals.push((slot, was, bits));
                            }
                        }
                    }
                    continue;
                }
                let reject = match e.rec.check(&sizes) {
                    Ok(()) => match e.rec.replay_releasing(&slots, &released)? {
                        Replayed::Done(outs) => {
                            self.clock += 1;
                            e.used.set(self.clock);
                            let out = finish_replay(e, args, &outs);
                            let mut carried = Ok(());
                            if held.is_some() || e.tracked_after.iter().any(|&b| b) {
                                releaf_mutable(args, &e.tracked_after);
                            }
                            if !e.grads_at.is_empty() {
                                let none = grads::Held::none();
                                let h = held.as_ref().unwrap_or(&none);
                                let k = outs.len() - e.grads_at.len();
                                let got: Vec<(usize, VarId, bool)> = e
                                    .grads_at
                                    .iter()
                                    .zip(&outs[k..])
                                    .map(|(&(i, kept), &id)| (i, id, kept))
                                    .collect();
                                carried = grads::deliver(args, h, &got);
                            }
                            for id in outs {
                                kiln_core::dec_ref(id);
                            }
                            self.stats.replays += 1;
                            self.stats.replay_ns += t0.elapsed().as_nanos() as u64;
                            drop(extra);
                            return carried.map(|()| out);
                        }
                        // a length read back midway broke a guard: another recording may fit
                        Replayed::Retrace(r) => r,
                    },
                    Err(r) => r,
                };
                match reject {
                    Reject::Invalid(r) => {
                        reasons.push(r);
                        overwrite = Some(i);
                        break;
                    }
                    Reject::Observed {
                        reason,
                        site: (at, how),
                    } => {
                        let site = at.to_string();
                        warn_once(&mut self.warned, site.clone(), || {
                            format!(
                                "frozen function recorded again: `{how}` at {site} used a size that depends on the inputs as a plain number, so the recording holds only for that value; use `x.size()` (a kiln::Size) and its arithmetic so that replays follow the inputs, or `Size::fixed(n)` for a size that does not depend on them"
                            )
                        });
                        reasons.push(reason);
                    }
                    Reject::Mismatch(r) => reasons.push(r),
                }
            }
        }

        // a literal input changed value: make it opaque from now on (one extra recording)
        if !changed_literals.is_empty() {
            let mut paths_t = Traversal::with_paths();
            args.traverse_all(&mut paths_t);
            if let Some(s) = &extra {
                paths_t.argument("state", |t| s.traverse(t));
            }
            let mut paths = Vec::new();
            let mut values = Vec::new();
            for (pos, f) in t.found.iter().enumerate() {
                if let Some(&(_, was, now)) = changed_literals.iter().find(|c| c.0 == f.slot) {
                    let ty = engine::input_class(f.id).0;
                    paths.push(paths_t.paths[pos].clone());
                    values.push(format!(
                        "`{}` {} → {}",
                        paths_t.paths[pos],
                        explain::show(ty, was),
                        explain::show(ty, now)
                    ));
                }
            }
            let list = paths.join(", ");
            let values = values.join(", ");
            if self.auto_opaque {
                let mask = self
                    .opaque
                    .entry(key)
                    .or_insert_with(|| vec![false; t.found.len()]);
                for (pos, f) in t.found.iter().enumerate() {
                    if changed_literals.iter().any(|c| c.0 == f.slot) {
                        mask[pos] = true;
                        let id = kiln_core::make_opaque(f.id)?;
                        kiln_core::dec_ref(id);
                    }
                }
                warn_once(&mut self.warned, format!("opaque {key} {list}"), || {
                    format!(
                        "frozen function: the literal input(s) {list} changed value between calls and are made opaque from now on (one extra recording); pass `kiln::make_opaque(&x)` (or create them with `Array::opaque`) from the first call on to avoid it"
                    )
                });
                reasons.push(format!(
                    "literal input(s) {list} changed value ({values}): a literal is baked into a recording, so these are made opaque from now on (this one extra recording); create them with `Array::opaque` or pass `kiln::make_opaque(&x)` from the first call on to avoid it"
                ));
            } else {
                reasons.push(format!(
                    "literal input(s) {list} changed value ({values}): a literal is baked into a recording, and with `auto_opaque(false)` each new value records anew; create them with `Array::opaque` or pass `kiln::make_opaque(&x)`"
                ));
            }
        }
        if let Some(new) = &layout {
            let cleared = self.stats.recordings > 0 && self.entries.is_empty();
            if let Some(why) = new.explain(self.layouts.values(), cleared) {
                reasons.push(why);
            }
        }
        self.record(
            key, &slots, args, extra, run, overwrite, reasons, t0, held, layout,
        )
    }

    #[allow(clippy::too_many_arguments)]
    fn record<A: ArgList, O: Traverse + Clone + Send + 'static>(
        &mut self,
        key: u64,
        slots: &[VarId],
        args: &mut A,
        extra: Option<Box<dyn Traverse>>,
        run: &mut dyn FnMut(&mut A) -> O,
        overwrite: Option<usize>,
        reasons: Vec<String>,
        t0: Instant,
        held: Option<grads::Held>,
        layout: Option<explain::Layout>,
    ) -> Result<O> {
        let total: usize = self.entries.values().map(|l| l.len()).sum();
        if overwrite.is_none() && total >= self.limit && self.evict_lru && self.limit > 0 {
            self.evict_least_recent();
        } else if overwrite.is_none() && total >= self.limit {
            self.stats.unfrozen += 1;
            let limit = self.limit;
            warn_once(&mut self.warned, "limit".into(), || {
                format!(
                    "frozen function reached its limit of {limit} recordings; further new layouts run unfrozen"
                )
            });
            drop(extra);
            return Ok(run(args));
        }
        // other threads' evaluations wait until the recording is done: their pending work must
        // not run inside it, nor its pending scatters on their threads
        let _serial = kiln_core::schedule::hold_eval_lock();
        let mut before = Traversal::new();
        args.traverse_mutable(&mut before);
        let literals = literal_values(slots);
        let mask: Vec<bool> = held.as_ref().map(|h| h.mask().to_vec()).unwrap_or_default();
        engine::begin(slots)?;
        let mut guard = RecordingGuard(true);
        let as_is = self.grad_as_is;
        let body = || {
            let inner = || {
                // fresh leaves inside the boundary, so that passes inside reach them
                if mask.is_empty() {
                    return (run(args), None);
                }
                releaf_mutable(args, &mask);
                let leaves = grads::Leaves::of(args, &mask);
                let out = run(args);
                (out, Some(leaves))
            };
            if as_is {
                crate::ad::jax::bounded_as_is(inner)
            } else {
                crate::ad::jax::bounded(inner)
            }
        };
        let (out, delivered) = match catch_unwind(AssertUnwindSafe(body)) {
            Ok((mut o, leaves)) => {
                // results leave detached, as a replay's do (it runs no AD code)
                crate::ad::jax::detach_in_place(&mut o);
                // what the function left on the arguments that track derivatives now
                (o, grads::at_end(args, leaves.as_ref()))
            }
            Err(panic) => {
                // a refused read inside the function unwinds through `to_vec()`/`item()`: report
                // the read as the call's error
                drop(guard);
                // a call that failed delivers nothing: the caller's gradients stay as they were
                if let Some(h) = &held {
                    grads::restore(args, h);
                }
                if let Some(RefusedRead(e)) = panic.downcast_ref::<RefusedRead>() {
                    engine::take_refusal();
                    return Err(e.clone());
                }
                if let Some(e) = engine::take_refusal() {
                    let message = panic
                        .downcast_ref::<String>()
                        .map(String::as_str)
                        .or_else(|| panic.downcast_ref::<&str>().copied())
                        .unwrap_or("");
                    if message.contains(&e.to_string()) {
                        return Err(e);
                    }
                }
                resume_unwind(panic);
            }
        };
        // the `&mut` arguments leave as the function left them tracking derivatives or not, each
        // tracking one a fresh leaf (with what the function left on it: `delivered`)
        let tracked_after = tracked_mutable(args);
        releaf_mutable(args, &tracked_after);
        // outputs: the returned value, then the `&mut` arguments as they are now
        let mut t_out = Traversal::new();
        out.traverse(&mut t_out);
        let n_returned = t_out.found.len();
        let mut after = Traversal::new();
        args.traverse_mutable(&mut after);
        if after.shape_key() != before.shape_key() {
            drop(guard);
            if let Some(h) = &held {
                grads::restore(args, h);
            }
            return Err(Error::Invalid(
                "a frozen function changed the structure or a plain value of a `&mut` argument; replays reproduce only changes to its arrays — keep such state outside the function or return it".into(),
            ));
        }
        // then the gradients the function's passes delivered to the `&mut` arguments
        let mut out_ids: Vec<VarId> = t_out.found.iter().map(|f| f.id).collect();
        out_ids.extend(after.found.iter().map(|f| f.id));
        out_ids.extend(delivered.iter().map(|(_, g, _)| g.id()));
        let grads_at: Vec<(usize, bool)> =
            delivered.iter().map(|&(i, _, kept)| (i, kept)).collect();
        let pending: Vec<VarId> = out_ids
            .iter()
            .copied()
            .filter(|&id| !engine::input_class(id).2 && !kiln_core::is_evaluated(id))
            .collect();
        if let Err(e) = kiln_core::eval(&pending) {
            if let Some(h) = &held {
                grads::restore(args, h);
            }
            return Err(e);
        }
        guard.0 = false;
        let rec = match engine::finish(slots, &out_ids) {
            Err(Error::HiddenInput { label, during }) if self.unfreeze_on_hidden => {
                tracing::debug!(target: "kiln::freeze", "{label} is captured from the environment ({during}): this loop's steps run unfrozen");
                self.enabled = false;
                self.stats.unfrozen += 1;
                drop(extra);
                let none = grads::Held::none();
                let got: Vec<(usize, VarId, bool)> =
                    delivered.iter().map(|(i, g, k)| (*i, g.id(), *k)).collect();
                grads::deliver(args, held.as_ref().unwrap_or(&none), &got)?;
                return Ok(out);
            }
            Err(e) => {
                if let Some(h) = &held {
                    grads::restore(args, h);
                }
                return Err(e);
            }
            Ok(r) => r,
        };
        drop(extra);
        let mut template = out.clone();
        template.traverse_mut(&mut Assign::placeholders());
        let entry = Entry {
            rec,
            literals,
            template: Box::new(template),
            n_returned,
            grads_at,
            tracked_after,
            used: std::cell::Cell::new(self.clock + 1),
        };
        self.clock += 1;
        let none = grads::Held::none();
        let got: Vec<(usize, VarId, bool)> =
            delivered.iter().map(|(i, g, k)| (*i, g.id(), *k)).collect();
        grads::deliver(args, held.as_ref().unwrap_or(&none), &got)?;
        drop(delivered);
        if let Some(mut l) = layout {
            l.seq = self.stats.recordings;
            self.layouts.entry(key).or_insert(l);
        }
        let list = self.entries.entry(key).or_default();
        let retrace = !list.is_empty() || overwrite.is_some();
        match overwrite {
            Some(i) => list[i] = entry,
            None => list.push(entry),
        }
        let n = list.len();
        self.stats.recordings += 1;
        self.stats.record_ns += t0.elapsed().as_nanos() as u64;
        if retrace || !reasons.is_empty() {
            let why = if reasons.is_empty() {
                "new input layout".to_string()
            } else {
                reasons.join("; ")
            };
            self.stats.retraces.push(why);
        }
        let total: usize = self.entries.values().map(|l| l.len()).sum();
        if self.stats.recordings > self.warn_after {
            let count = self.stats.recordings;
            let last = self
                .stats
                .retraces
                .last()
                .cloned()
                .unwrap_or_else(|| "new input layout".into());
            warn_once(&mut self.warned, "warn_after".into(), || {
                format!(
                    "frozen function recorded {count} times ({total} kept, {n} for this layout); last reason: {last}. Make changing inputs opaque arrays, size with `x.size()`, or raise `.warn_after(n)`"
                )
            });
        }
        Ok(out)
    }
}

/// Evaluate a call's outputs as a frozen call does: the returned arrays, then the `&mut` arguments'
/// arrays as they are now (a call run with freezing off evaluates them too, so that a loop of such
/// calls keeps its state evaluated — and computes the same bits — as the frozen loop does).
fn evaluate_outputs<A: ArgList, O: Traverse>(out: &O, args: &mut A) -> Result<()> {
    let mut t = Traversal::new();
    out.traverse(&mut t);
    args.traverse_mutable(&mut t);
    let pending: Vec<VarId> = t
        .found
        .iter()
        .map(|f| f.id)
        .filter(|&id| !engine::input_class(id).2 && !kiln_core::is_evaluated(id))
        .collect();
    kiln_core::eval(&pending)
}

/// Give the `&mut` arguments' float arrays marked in `mask` fresh leaves; detach the others.
/// Per `&mut` position: whether its array tracks derivatives now.
fn tracked_mutable<A: ArgList>(args: &mut A) -> Vec<bool> {
    let mut t = Traversal::new();
    args.traverse_mutable(&mut t);
    t.found.iter().map(|f| f.ad != 0).collect()
}

fn releaf_mutable<A: ArgList>(args: &mut A, mask: &[bool]) {
    let mut t = Traversal::new();
    args.traverse_mutable(&mut t);
    let parts = crate::ad::jax::leaf_parts(&t.found, mask);
    let pairs = crate::ad::jax::pairs(&parts);
    args.assign_mutable(&mut Assign::with_ad(&pairs));
}

/// The values of literal slots (baked into a recording).
fn literal_values(slots: &[VarId]) -> Vec<(u32, u64)> {
    slots
        .iter()
        .enumerate()
        .filter_map(|(k, &id)| kiln_core::literal_value(id).map(|b| (k as u32, b)))
        .collect()
}

/// Build the returned value and update the `&mut` arguments from a replay's outputs.
fn finish_replay<A: ArgList, O: Traverse + Clone + Send + 'static>(
    e: &Entry,
    args: &mut A,
    outs: &[VarId],
) -> O {
    let template = e
        .template
        .downcast_ref::<O>()
        .expect("kiln internal error: a recording's output type changed");
    let mut out = template.clone();
    out.traverse_mut(&mut Assign::new(outs[..e.n_returned].to_vec()));
    let end = outs.len() - e.grads_at.len();
    args.assign_mutable(&mut Assign::new(outs[e.n_returned..end].to_vec()));
    out
}
