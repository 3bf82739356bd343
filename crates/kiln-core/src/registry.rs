//! The variable registry: every traced or evaluated array value is a `Var` in one dense slab.
//!
//! A variable is an op with operand ids (a node of the traced graph), a literal, or an evaluated
//! buffer. It carries two reference counts: *external* (user handles) and *internal* (edges from other
//! variables and pending side effects); when both reach zero it is freed, releasing its operands in
//! turn. Identical pure variables are deduplicated on creation (the CSE table). This module owns that
//! state behind one lock (`STATE`), held briefly; it never schedules or runs work (`schedule`,
//! `device`) and never simplifies (`trace`).

use crate::alloc::{self, Block};
use crate::error::Result;
use crate::op::Op;
use crate::ty::VarType;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::fmt::{self, Write};
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::Arc;

/// A small multiplicative hasher for the CSE table (keys are a few machine words; SipHash would
/// dominate the cost of tracing an op).
#[derive(Default)]
pub(crate) struct FxHasher(u64);
impl Hasher for FxHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for c in bytes.chunks(8) {
            let mut w = [0u8; 8];
            w[..c.len()].copy_from_slice(c);
            self.write_u64(u64::from_le_bytes(w));
        }
    }
    fn write_u64(&mut self, v: u64) {
        self.0 = (self.0.rotate_left(5) ^ v).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
    fn write_u32(&mut self, v: u32) {
        self.write_u64(v as u64)
    }
    fn write_u8(&mut self, v: u8) {
        self.write_u64(v as u64)
    }
    fn write_usize(&mut self, v: usize) {
        self.write_u64(v as u64)
    }
}

/// A hash map with [`FxHasher`]: for the engine's tables keyed by variable ids and registers,
/// built and probed once per traced op or per node of a kernel (SipHash's cost showed in profiles).
pub(crate) type FxMap<K, V> = HashMap<K, V, BuildHasherDefault<FxHasher>>;
/// A hash set with [`FxHasher`] (see [`FxMap`]).
pub(crate) type FxSet<K> = std::collections::HashSet<K, BuildHasherDefault<FxHasher>>;

/// Identifier of a variable (0 is never used).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct VarId(pub u32);

/// An evaluated buffer: `len` elements of `ty`, 64-byte aligned, with slack after the end; or,
/// for [`Buffer::foreign`], another library's memory (element-aligned, never written, read at
/// most 256 bytes past its end within its last page).
pub struct Buffer {
    block: Option<Block>,
    /// Memory another library owns, read in place (then `block` is `None`; see
    /// [`alloc::ForeignMemory`]).
    foreign: Option<Box<dyn alloc::ForeignMemory>>,
    pub len: usize,
    /// The element type (a `u8` index of [`VarType::ALL`]): it changes when a result of another
    /// type of the same width is written into the buffer in place (a cast's update-in-place).
    ty: std::sync::atomic::AtomicU8,
}

impl Buffer {
    /// Allocate an uninitialised buffer for `len` elements.
    pub fn new(ty: VarType, len: usize, what: &dyn Fn() -> String) -> Result<Buffer> {
        let bytes = (len as u128) * ty.size_bytes() as u128;
        if bytes > (isize::MAX as u128) / 2 {
            return Err(crate::Error::OutOfMemory {
                bytes,
                what: what(),
            });
        }
        let block = alloc::alloc(bytes as usize, what)?;
        Ok(Buffer {
            block: Some(block),
            foreign: None,
            len,
            ty: std::sync::atomic::AtomicU8::new(ty.index()),
        })
    }
    /// `len` elements of `ty` that `mem` holds, read in place, or why they cannot be (see
    /// [`alloc::foreign_refusal`]; the caller then copies them). `kiln_core::from_foreign`
    /// makes a variable of it; its example shows both.
    pub fn foreign(
        ty: VarType,
        len: usize,
        mem: Box<dyn alloc::ForeignMemory>,
    ) -> std::result::Result<Buffer, &'static str> {
        let bytes = len
            .checked_mul(ty.size_bytes())
            .ok_or("its size overflows")?;
        if mem.bytes() < bytes {
            return Err("it holds fewer bytes than the elements need");
        }
        if let Some(why) = alloc::foreign_refusal(mem.ptr(), bytes, ty.size_bytes()) {
            return Err(why);
        }
        Ok(Buffer {
            block: None,
            foreign: Some(mem),
            len,
            ty: std::sync::atomic::AtomicU8::new(ty.index()),
        })
    }
    /// Whether the memory belongs to another library (never written in place).
    pub fn is_foreign(&self) -> bool {
        self.foreign.is_some()
    }
    /// The element type.
    pub fn ty(&self) -> VarType {
        VarType::ALL[self.ty.load(std::sync::atomic::Ordering::Relaxed) as usize]
    }
    /// Declare that the buffer now holds elements of `ty` (of the same width): a result of
    /// another type was written over the old contents in place.
    pub(crate) fn retype(&self, ty: VarType) {
        debug_assert_eq!(ty.size_bytes(), self.ty().size_bytes());
        self.ty
            .store(ty.index(), std::sync::atomic::Ordering::Relaxed);
    }
    /// Start of the data.
    pub fn ptr(&self) -> *mut u8 {
        match (&self.block, &self.foreign) {
            (Some(b), _) => b.as_ptr(),
            // (only read: `holders` keeps every in-place write away from it)
            (None, Some(f)) => f.ptr() as *mut u8,
            (None, None) => std::ptr::null_mut(),
        }
    }
    /// Size in bytes of the elements (without slack).
    pub fn bytes(&self) -> usize {
        self.len * self.ty().size_bytes()
    }
    /// Copy the elements out as raw bytes.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut v = vec![0u8; self.bytes()];
        // SAFETY: the buffer holds `bytes()` initialised bytes (every buffer is written by a device op
        // before any handle can read it) and `v` has exactly that length.
        unsafe { std::ptr::copy_nonoverlapping(self.ptr(), v.as_mut_ptr(), v.len()) };
        v
    }
}

/// How many hold `buf`: its `Arc`s, plus one for a foreign owner, which may read or write the
/// memory at any time. Every decision to write into an existing buffer in place asks this, so a
/// buffer another library owns is never written.
pub(crate) fn holders(buf: &Arc<Buffer>) -> usize {
    Arc::strong_count(buf) + usize::from(buf.is_foreign())
}

/// Foreign owners whose buffer died while the registry was locked, released by
/// [`release_deferred_owners`] (an owner's drop may call back into kiln: a NumPy array viewing a
/// kiln buffer drops a kiln handle).
static DEFERRED_OWNERS: Mutex<Vec<Box<dyn alloc::ForeignMemory>>> = Mutex::new(Vec::new());
static OWNERS_DEFERRED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Release the foreign owners set aside while the registry was locked. Called where this thread
/// does not hold the registry lock (after a handle is dropped, after an evaluation, `sync`); it
/// may hold the evaluation lock (an evaluation inside a frozen function's recording), which is
/// reentrant, so an owner's drop may still call into kiln.
pub(crate) fn release_deferred_owners() {
    // (a plain load first: this runs at every handle drop, and a swap is a locked instruction)
    if !OWNERS_DEFERRED.load(std::sync::atomic::Ordering::Acquire)
        || !OWNERS_DEFERRED.swap(false, std::sync::atomic::Ordering::AcqRel)
    {
        return;
    }
    let owners = std::mem::take(&mut *DEFERRED_OWNERS.lock());
    drop(owners);
}

impl Drop for Buffer {
    fn drop(&mut self) {
        if let Some(owner) = self.foreign.take() {
            // (locked by this thread or another: either way, not released under the lock)
            if STATE.is_locked() {
                DEFERRED_OWNERS.lock().push(owner);
                OWNERS_DEFERRED.store(true, std::sync::atomic::Ordering::Release);
            } else {
                drop(owner);
            }
        }
        if let Some(b) = self.block.take() {
            alloc::free(b);
        }
    }
}

/// One variable.
pub(crate) struct Var {
    pub op: Op,
    pub ty: VarType,
    pub size: usize,
    /// While a frozen function is being recorded on this thread: the size's expression over the
    /// inputs' sizes (see `freeze::size`). 0: the size is a constant.
    pub sym: u32,
    /// Operand ids (0 = unused). Gather: [source, index, mask]; Scatter: [target, value, index, mask].
    pub deps: [u32; 4],
    /// Literal bits.
    pub literal: u64,
    /// Evaluated contents (op is then `Data`).
    pub data: Option<Arc<Buffer>>,
    pub ext: u32,
    pub int: u32,
    pub label: Option<Box<str>>,
    /// A pending scatter writes into this variable's buffer: it must run before anyone reads it.
    pub dirty: bool,
    /// Whether this var is registered in the CSE table.
    pub in_cse: bool,
    /// Created while this thread was recording a frozen function (a lazy array made before the
    /// recording and used inside it would be rebound to new inputs on replay: refused).
    pub fresh: bool,
    /// False once freed (the slot waits in the free list).
    pub alive: bool,
    /// A loop or switch node (`op` is `LoopBegin` or `Switch`): its parts, each an operand.
    pub region: Option<Box<Region>>,
    /// The thread that traced it ([`thread_token`]): `eval_all` evaluates only its own thread's.
    pub thread: u32,
    /// How many launched kernels computed this lazy variable in registers (saturating): a value
    /// needed again after that is state a host loop never evaluated (see `schedule`'s host-loop
    /// rules).
    pub computed: u16,
}

/// The parts of a control-flow node in the traced graph (see `control`).
#[derive(Clone, Debug)]
pub(crate) enum Region {
    Loop {
        /// Initial values, the placeholders (`Phi` variables) the body was traced with, the
        /// condition, the next values and the body's side effects, in order.
        inits: Vec<u32>,
        phis: Vec<u32>,
        cond: u32,
        nexts: Vec<u32>,
        effects: Vec<u32>,
        max_iterations: u64,
    },
    Switch {
        /// 0: a conditional, 1: an indirect call (presentation only).
        kind: u64,
        /// Per case: its mask, its outputs and its side effects.
        masks: Vec<u32>,
        yields: Vec<Vec<u32>>,
        effects: Vec<Vec<u32>>,
    },
}

impl Region {
    /// Every variable the node refers to.
    pub fn ids(&self) -> Vec<u32> {
        match self {
            Region::Loop {
                inits,
                phis,
                cond,
                nexts,
                effects,
                ..
            } => inits
                .iter()
                .chain(phis)
                .chain(std::iter::once(cond))
                .chain(nexts)
                .chain(effects)
                .copied()
                .collect(),
            Region::Switch {
                masks,
                yields,
                effects,
                ..
            } => masks
                .iter()
                .chain(yields.iter().flatten())
                .chain(effects.iter().flatten())
                .copied()
                .collect(),
        }
    }
}

impl Var {
    pub fn new(op: Op, ty: VarType, size: usize) -> Var {
        Var {
            op,
            ty,
            size,
            sym: 0,
            deps: [0; 4],
            literal: 0,
            data: None,
            ext: 0,
            int: 0,
            label: None,
            dirty: false,
            in_cse: false,
            fresh: false,
            alive: true,
            region: None,
            thread: 0,
            computed: 0,
        }
    }
    pub fn is_evaluated(&self) -> bool {
        self.data.is_some()
    }
    pub fn is_literal(&self) -> bool {
        self.op == Op::Literal
    }
    pub fn dep_ids(&self) -> impl Iterator<Item = u32> + '_ {
        let region = self.region.as_ref().map(|r| r.ids()).unwrap_or_default();
        self.deps.iter().copied().filter(|&d| d != 0).chain(region)
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct CseKey {
    op: Op,
    ty: VarType,
    size: usize,
    sym: u32,
    deps: [u32; 4],
    literal: u64,
}

impl CseKey {
    fn of(v: &Var) -> CseKey {
        CseKey {
            op: v.op,
            ty: v.ty,
            size: v.size,
            sym: v.sym,
            deps: v.deps,
            literal: v.literal,
        }
    }
}

/// A pending side effect (a scatter, or a loop or switch node holding scatters) and the thread
/// that traced it. Side effects are per thread: an evaluation runs its own thread's (and those of
/// threads that ended), never another thread's, which may be in the middle of tracing a loop body
/// or recording a frozen function. Another thread's are run only for a reader of their target
/// (an array handed over with a scatter pending), and never while they are part of a body trace.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Pending {
    pub id: u32,
    /// [`thread_token`] of the tracing thread; 0 once that thread has ended.
    pub thread: u32,
    /// Creation order over all threads (a symbolic scope takes its thread's from a mark on).
    pub seq: u64,
    /// Traced inside a symbolic body: it belongs to that body's region, not to the thread's list.
    pub symbolic: bool,
}

impl Pending {
    /// Whether thread `me`'s evaluation runs it: its own outside symbolic bodies, and orphans.
    fn runnable_by(&self, me: u32) -> bool {
        (self.thread == me && !self.symbolic) || self.thread == 0
    }
}

static NEXT_THREAD: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(1);

/// A thread's identity in the registry; when the thread ends, its pending side effects become
/// orphans (thread 0) that the next evaluation of any thread runs, so none is lost or leaked.
struct ThreadToken(u32);

impl Drop for ThreadToken {
    fn drop(&mut self) {
        let mut st = STATE.lock();
        for p in st.side_effects.iter_mut().filter(|p| p.thread == self.0) {
            p.thread = 0;
            p.symbolic = false;
        }
    }
}

thread_local! {
    static TOKEN: ThreadToken =
        ThreadToken(NEXT_THREAD.fetch_add(1, std::sync::atomic::Ordering::Relaxed));
}

/// This thread's token (never 0; 0 while the thread is being torn down).
pub(crate) fn thread_token() -> u32 {
    TOKEN.try_with(|t| t.0).unwrap_or(0)
}

/// All registry state. Reached only through `STATE`.
pub(crate) struct State {
    pub vars: Vec<Var>,
    free_ids: Vec<u32>,
    cse: HashMap<CseKey, u32, BuildHasherDefault<FxHasher>>,
    /// Pending side effects of all threads, in creation order; each holds an internal reference.
    /// Reach them through the methods below, which keep each thread to its own.
    side_effects: Vec<Pending>,
    next_seq: u64,
    /// The outputs of each loop or switch node (no references: an evaluation of one output
    /// evaluates the others a user still holds with it, so the region runs once).
    pub region_outs: HashMap<u32, Vec<u32>, BuildHasherDefault<FxHasher>>,
    /// The domain and reach of each live `Tap` and `Split` node (see `stencil`).
    pub stencil: HashMap<u32, Arc<crate::stencil::StencilMeta>, BuildHasherDefault<FxHasher>>,
    /// Pending reductions (`Op::Reduce`) of all threads, without references: an entry whose
    /// variable died, was evaluated or was reused for another operation is skipped and pruned when
    /// the scheduler resolves this list (see `schedule::resolve_reductions`).
    pub pending_reductions: Vec<u32>,
    pub alive: usize,
}

pub(crate) static STATE: Mutex<State> = Mutex::new(State::new());

impl State {
    const fn new() -> State {
        State {
            vars: Vec::new(),
            free_ids: Vec::new(),
            cse: HashMap::with_hasher(BuildHasherDefault::new()),
            side_effects: Vec::new(),
            next_seq: 0,
            region_outs: HashMap::with_hasher(BuildHasherDefault::new()),
            stencil: HashMap::with_hasher(BuildHasherDefault::new()),
            pending_reductions: Vec::new(),
            alive: 0,
        }
    }

    pub fn var(&self, id: u32) -> &Var {
        &self.vars[id as usize]
    }
    pub fn var_mut(&mut self, id: u32) -> &mut Var {
        &mut self.vars[id as usize]
    }

    /// Insert a variable (taking one internal reference on each operand); pure ops go through CSE.
    /// The new (or reused) variable is returned with one *external* reference added.
    pub fn insert(&mut self, v: Var) -> u32 {
        // (a pending reduction is not shared: each thread resolves its own, and a frozen
        // recording must see the reductions its function made)
        let cse_ok = v.op.is_pure() && v.data.is_none() && !matches!(v.op, Op::Reduce(_));
        let key = CseKey::of(&v);
        let recording = crate::context::recording();
        if cse_ok {
            if let Some(&id) = self.cse.get(&key) {
                // inside a recording, reuse only what the recording made
                if !recording || self.vars[id as usize].fresh {
                    self.vars[id as usize].ext += 1;
                    return id;
                }
            }
        }
        if self.vars.is_empty() {
            // id 0 is reserved so that 0 can mean "no operand"
            let mut dead = Var::new(Op::Literal, VarType::Bool, 0);
            dead.alive = false;
            self.vars.push(dead);
        }
        for d in v.dep_ids() {
            self.vars[d as usize].int += 1;
        }
        let mut v = v;
        v.ext = 1;
        v.in_cse = cse_ok;
        v.fresh = recording;
        v.thread = thread_token();
        let id = match self.free_ids.pop() {
            Some(id) => {
                self.vars[id as usize] = v;
                id
            }
            None => {
                self.vars.push(v);
                (self.vars.len() - 1) as u32
            }
        };
        if cse_ok {
            self.cse.insert(key, id);
        }
        self.alive += 1;
        crate::stats::VARS_CREATED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        id
    }

    pub fn inc_ext(&mut self, id: u32) {
        self.vars[id as usize].ext += 1;
    }
    pub fn inc_int(&mut self, id: u32) {
        self.vars[id as usize].int += 1;
    }

    /// Drop an external reference; frees the variable (and, transitively, its operands) at zero.
    pub fn dec_ext(&mut self, id: u32, garbage: &mut Vec<Arc<Buffer>>) {
        let v = &mut self.vars[id as usize];
        debug_assert!(v.ext > 0, "external refcount underflow on var {id}");
        v.ext -= 1;
        self.maybe_free(id, garbage);
    }
    pub fn dec_int(&mut self, id: u32, garbage: &mut Vec<Arc<Buffer>>) {
        let v = &mut self.vars[id as usize];
        debug_assert!(v.int > 0, "internal refcount underflow on var {id}");
        v.int -= 1;
        self.maybe_free(id, garbage);
    }

    fn maybe_free(&mut self, id: u32, garbage: &mut Vec<Arc<Buffer>>) {
        // (most calls free nothing: no allocation until one does)
        let v = &self.vars[id as usize];
        if v.ext != 0 || v.int != 0 || !v.alive {
            return;
        }
        let mut stack = vec![id];
        while let Some(id) = stack.pop() {
            let v = &mut self.vars[id as usize];
            if v.ext != 0 || v.int != 0 || !v.alive {
                continue;
            }
            v.alive = false;
            if let Some(b) = v.data.take() {
                garbage.push(b);
            }
            let operands = v.deps;
            let region = v.region.take();
            let region_ids: Vec<u32> = region.as_ref().map(|r| r.ids()).unwrap_or_default();
            v.label = None;
            if region.is_some() {
                self.region_outs.remove(&id);
            }
            if !self.stencil.is_empty() {
                // (a stencil node that was evaluated is `Data` now: its entry goes too)
                self.stencil.remove(&id);
            }
            self.uncse(id);
            self.free_ids.push(id);
            self.alive -= 1;
            for d in operands.into_iter().chain(region_ids).filter(|&d| d != 0) {
                let dv = &mut self.vars[d as usize];
                dv.int -= 1;
                stack.push(d);
            }
        }
    }

    /// Remove a variable from the CSE table (before its definition changes or it dies).
    pub fn uncse(&mut self, id: u32) {
        let v = &mut self.vars[id as usize];
        if v.in_cse {
            v.in_cse = false;
            let key = CseKey::of(v);
            if self.cse.get(&key) == Some(&id) {
                self.cse.remove(&key);
            }
        }
    }

    /// Turn a variable into evaluated data, releasing its operands.
    pub fn set_data(&mut self, id: u32, buf: Arc<Buffer>, garbage: &mut Vec<Arc<Buffer>>) {
        self.uncse(id);
        let v = &mut self.vars[id as usize];
        v.op = Op::Data;
        v.data = Some(buf);
        v.literal = 0;
        let deps = std::mem::take(&mut v.deps);
        for d in deps.into_iter().filter(|&d| d != 0) {
            self.dec_int(d, garbage);
        }
    }

    /// Set the size expression of a variable (it leaves the CSE table: its key changes).
    pub fn set_sym(&mut self, id: u32, sym: u32) {
        self.uncse(id);
        self.vars[id as usize].sym = sym;
    }

    /// Add side effect `id` (its internal reference is the list's) to this thread's pending list;
    /// `symbolic`: traced inside a symbolic body. Returns its sequence number.
    pub fn push_effect(&mut self, id: u32, symbolic: bool) -> u64 {
        let seq = self.next_seq;
        self.next_seq += 1;
        self.side_effects.push(Pending {
            id,
            thread: thread_token(),
            seq,
            symbolic,
        });
        seq
    }

    /// The sequence number the next side effect will get (a symbolic scope's mark).
    pub fn effect_mark(&self) -> u64 {
        self.next_seq
    }

    /// Remove and return (in order) the pending side effects that `take` selects.
    pub fn take_effects(&mut self, take: impl Fn(&Pending) -> bool) -> Vec<u32> {
        let mut out = Vec::new();
        self.side_effects.retain(|p| {
            let t = take(p);
            if t {
                out.push(p.id);
            }
            !t
        });
        out
    }

    /// The side effects this thread's evaluation runs: its own outside symbolic bodies, and those
    /// of ended threads. Removed from the list (each keeps its reference).
    pub fn take_runnable_effects(&mut self) -> Vec<u32> {
        let me = thread_token();
        self.take_effects(|p| p.runnable_by(me))
    }

    /// This thread's pending side effects, as `take_runnable_effects` would take them (not removed).
    pub fn runnable_effects(&self) -> Vec<u32> {
        let me = thread_token();
        self.side_effects
            .iter()
            .filter(|p| p.runnable_by(me))
            .map(|p| p.id)
            .collect()
    }

    /// Whether this thread's evaluation would run any pending side effect.
    pub fn has_runnable_effects(&self) -> bool {
        let me = thread_token();
        self.side_effects.iter().any(|p| p.runnable_by(me))
    }

    /// The arrays side effect `id` writes: a scatter's target, or the targets of the scatters
    /// inside a region node (and inside the regions nested in it).
    pub fn effect_targets(&self, id: u32) -> Vec<u32> {
        let mut out = Vec::new();
        let mut stack = vec![id];
        while let Some(e) = stack.pop() {
            let v = self.var(e);
            match v.region.as_deref() {
                Some(Region::Loop { effects, .. }) => stack.extend(effects),
                Some(Region::Switch { effects, .. }) => stack.extend(effects.iter().flatten()),
                None => out.push(v.deps[0]),
            }
        }
        out
    }

    /// Whether any pending side effect of any thread writes one of `ids`.
    pub fn pending_writes(&self, ids: &[u32]) -> bool {
        self.side_effects
            .iter()
            .any(|p| self.effect_targets(p.id).iter().any(|t| ids.contains(t)))
    }

    /// Hand to this thread the side effects of other threads that write one of `ids` and are
    /// not part of a body being traced (an array was passed on with its scatter pending: its
    /// reader runs that scatter). Returns how many were taken over.
    pub fn adopt_effects(&mut self, ids: &[u32]) -> usize {
        let me = thread_token();
        let mut n = 0;
        for k in 0..self.side_effects.len() {
            let p = self.side_effects[k];
            if p.thread != me
                && !p.symbolic
                && self.effect_targets(p.id).iter().any(|t| ids.contains(t))
            {
                self.side_effects[k].thread = me;
                n += 1;
            }
        }
        n
    }

    /// Forget every size expression and freshness mark (a recording ended; its expression ids mean
    /// nothing now).
    pub fn end_recording(&mut self) {
        for id in 1..self.vars.len() as u32 {
            if self.vars[id as usize].sym != 0 {
                self.set_sym(id, 0);
            }
            self.vars[id as usize].fresh = false;
        }
    }

    /// A live variable whose buffer overlaps the bytes `lo..hi`, if any (a scan of every
    /// variable: for `from_foreign`, which must not give memory a second name; foreign memory
    /// never overlaps two variables, so the first found is the one).
    pub fn overlapping_buffer(&self, lo: usize, hi: usize) -> Option<u32> {
        self.vars.iter().enumerate().skip(1).find_map(|(i, v)| {
            let hit = v.alive
                && v.data.as_ref().is_some_and(|b| {
                    let at = b.ptr() as usize;
                    at < hi && lo < at + b.bytes().max(1)
                });
            hit.then_some(i as u32)
        })
    }

    /// The variable whose buffer starts at `addr`, if any (for messages about hidden inputs).
    pub fn var_with_buffer(&self, addr: usize) -> Option<u32> {
        self.vars.iter().enumerate().skip(1).find_map(|(i, v)| {
            (v.alive && v.data.as_ref().is_some_and(|b| b.ptr() as usize == addr))
                .then_some(i as u32)
        })
    }

    pub fn label_of(&self, id: u32) -> String {
        let v = &self.vars[id as usize];
        match &v.label {
            Some(l) => format!("'{l}' (r{id}, {} × {})", v.ty, v.size),
            None => format!("r{id} ({} × {})", v.ty, v.size),
        }
    }
}

/// Human-readable byte count (kept here, where callers have always found it).
pub use crate::stats::fmt_bytes;
use crate::stats::fmt_bytes_wide;

/// The live-variable table (`whos()`).
pub struct Whos {
    text: String,
}

impl fmt::Display for Whos {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

/// List live variables: id, type, external/internal refs, size, memory, ready, label; then totals.
pub fn whos() -> Whos {
    whos_with(&[])
}

/// [`whos`] with a `Grad` column (before the label) saying, for the variables in `grads`, what
/// they are in a front end's AD graph (`leaf`, the op that computed them, …); the column is left
/// out when `grads` is empty.
pub fn whos_with(grads: &[(VarId, String)]) -> Whos {
    let mut grad_of: std::collections::HashMap<u32, String> = std::collections::HashMap::new();
    for (id, what) in grads {
        grad_of
            .entry(id.0)
            .and_modify(|w| {
                w.push_str(", ");
                w.push_str(what);
            })
            .or_insert_with(|| what.clone());
    }
    let gw = grad_of
        .values()
        .map(|w| w.chars().count() + 2)
        .max()
        .map_or(0, |w| w.max(6));
    let grad_cell = |id: usize| -> String {
        if gw == 0 {
            String::new()
        } else {
            let w = grad_of.get(&(id as u32)).map_or("", |s| s.as_str());
            format!("{w:<gw$}")
        }
    };
    let st = STATE.lock();
    let mut t = String::new();
    let _ = writeln!(
        t,
        "\n  {:<8}{:<6}{:<11}{:<12}{:<13}{:<8}{}Label",
        "ID",
        "Type",
        "E/I Refs",
        "Size",
        "Memory",
        "Ready",
        if gw == 0 {
            String::new()
        } else {
            format!("{:<gw$}", "Grad")
        }
    );
    // in u128: a lazy array may have up to usize::MAX elements, whose bytes (and their totals)
    // do not fit in u64 (this wrapped to 0 B before)
    let (mut ready, mut scheduled, mut savings) = (0u128, 0u128, 0u128);
    let mut rows = 0;
    for (id, v) in st.vars.iter().enumerate() {
        if !v.alive || id == 0 {
            continue;
        }
        let mem = v.size as u128 * v.ty.size_bytes() as u128;
        let is_ready = v.is_evaluated();
        if is_ready {
            ready += mem;
        } else if v.ext > 0 && !v.is_literal() {
            scheduled += mem;
        } else if !v.is_literal() {
            savings += mem;
        }
        rows += 1;
        if rows <= 200 {
            let _ = writeln!(
                t,
                "  {:<8}{:<6}{:<11}{:<12}{:<13}{:<8}{}{}",
                id,
                v.ty.name(),
                format!("{} / {}", v.ext, v.int),
                // a trailing space keeps a size wider than its column apart from the next
                format!("{} ", v.size),
                format!("{} ", fmt_bytes_wide(mem)),
                if is_ready { "[x]" } else { "[ ]" },
                grad_cell(id),
                v.label.as_deref().unwrap_or("")
            );
        }
    }
    if rows > 200 {
        let _ = writeln!(t, "  ... {} more rows", rows - 200);
    }
    let _ = writeln!(t);
    let _ = writeln!(t, "  Memory usage (ready)     : {}", fmt_bytes_wide(ready));
    let _ = writeln!(
        t,
        "  Memory usage (scheduled) : {} + {} = {}",
        fmt_bytes_wide(ready),
        fmt_bytes_wide(scheduled),
        fmt_bytes_wide(ready.saturating_add(scheduled))
    );
    let _ = writeln!(
        t,
        "  Memory savings           : {}",
        fmt_bytes_wide(savings)
    );
    Whos { text: t }
}
