//! The recorder: while a frozen function is traced on this thread, capture every device op with its
//! buffers identified by slot, and every size decision the trace made (guards).
//!
//! State is thread-local: a recording sees only the work of the thread that records (kiln's kernel
//! blocks run on the pool, but every device op is issued — and observed — on the calling thread).
//! Trace functions ask [`active`] (one thread-local read) before doing any recording work, so code
//! outside a frozen function pays nothing.

use super::replay::{Guard, Out, RecOp, Recording, ReplayKind, Site};
use super::size::{class_of, ExprId, Size, SizeNode};
use crate::context;
use crate::device::{DeviceOpKind, DeviceOpRecord};
use crate::error::{Error, Result};
use crate::kernel::ParamKind;
use crate::registry::{VarId, STATE};
use crate::ty::VarType;
use std::cell::RefCell;
use std::collections::HashMap;
use std::panic::Location;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

static NEXT_EPOCH: AtomicU64 = AtomicU64::new(1);

thread_local! {
    // (the epoch of the recording in progress is in `context`, which the lower layers read)
    static REC: RefCell<Option<Recorder>> = const { RefCell::new(None) };
    /// The refused read of the last aborted recording (reported as the call's error).
    static REFUSAL: RefCell<Option<Error>> = const { RefCell::new(None) };
}

/// The error of a read refused during the last aborted recording on this thread, if any.
pub fn take_refusal() -> Option<Error> {
    REFUSAL.with(|r| r.borrow_mut().take())
}

/// Where a recorded buffer came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Origin {
    Slot(u32),
    Op(u32),
}

/// A buffer the recording knows: an input slot's or one an op produced.
#[derive(Clone, Debug)]
pub(crate) struct RecBuf {
    pub ty: VarType,
    pub size: ExprId,
    pub origin: Origin,
}

/// Why a recording cannot be used (the call fails with this error; nothing is kept).
#[derive(Clone, Debug)]
enum Failure {
    HiddenInput { addr: usize, op: &'static str },
    Error(Error),
}

pub(crate) struct Recorder {
    epoch: u64,
    pub nodes: Vec<SizeNode>,
    values: Vec<u64>,
    intern: HashMap<SizeNode, ExprId>,
    pub guards: Vec<Guard>,
    pub n_slots: usize,
    pub bufs: Vec<RecBuf>,
    addr: HashMap<usize, u32>,
    pub ops: Vec<RecOp>,
    failure: Option<Failure>,
    /// Slots whose buffers are written in place.
    pub mutated: Vec<u32>,
    /// Number of data-dependent lengths (compress results).
    pub n_data: u32,
}

impl Recorder {
    /// Intern a node whose value at record time is `value`; constants fold.
    fn node(&mut self, n: SizeNode, value: u64) -> ExprId {
        if let Some(&id) = self.intern.get(&n) {
            return id;
        }
        self.nodes.push(n);
        self.values.push(value);
        let id = (self.nodes.len() - 1) as ExprId;
        self.intern.insert(n, id);
        id
    }
    /// The expression of a size that is `sym` (0: the constant `size`).
    fn expr(&mut self, sym: ExprId, size: usize) -> ExprId {
        if sym != 0 {
            sym
        } else {
            self.node(SizeNode::Const(size as u64), size as u64)
        }
    }
    fn is_const(&self, e: ExprId) -> bool {
        matches!(self.nodes[e as usize], SizeNode::Const(_))
    }
    /// A var's `sym` for expression `e` (constants are 0).
    fn sym(&self, e: ExprId) -> ExprId {
        if self.is_const(e) {
            0
        } else {
            e
        }
    }
    /// The expression's value must stay within `[lo, hi]` (`site`: where Rust code observed it).
    fn guard_range(&mut self, e: ExprId, lo: u64, hi: u64, site: Option<Site>) {
        if self.is_const(e) {
            return;
        }
        let known = self.guards.iter().any(|g| {
            matches!(*g, Guard::Range { e: ge, lo: gl, hi: gh, .. } if ge == e && gl >= lo && gh <= hi)
        });
        if !known {
            self.guards.push(Guard::Range { e, lo, hi, site });
        }
    }
    /// The expression's size class (0, 1, more) must stay the same.
    fn guard_class(&mut self, e: ExprId) {
        let (lo, hi) = class_bounds(class_of(self.values[e as usize]));
        self.guard_range(e, lo, hi, None);
    }
    fn guard_eq(&mut self, a: ExprId, b: ExprId) {
        if a != b && !(self.is_const(a) && self.is_const(b)) {
            let (x, y) = (a.min(b), a.max(b));
            if !self
                .guards
                .iter()
                .any(|g| matches!(*g, Guard::Eq(p, q) if (p, q) == (x, y)))
            {
                self.guards.push(Guard::Eq(x, y));
            }
        }
    }
    fn fail(&mut self, f: Failure) {
        if self.failure.is_none() {
            self.failure = Some(f);
        }
    }
    /// The recorded buffer at `addr` (an input), or a hidden-input failure.
    fn input_buf(&mut self, addr: usize, op: &'static str) -> u32 {
        match self.addr.get(&addr) {
            Some(&b) => b,
            None => {
                self.fail(Failure::HiddenInput { addr, op });
                u32::MAX
            }
        }
    }
    fn new_buf(&mut self, addr: usize, ty: VarType, size: ExprId, op: u32) -> u32 {
        self.bufs.push(RecBuf {
            ty,
            size,
            origin: Origin::Op(op),
        });
        let b = (self.bufs.len() - 1) as u32;
        self.addr.insert(addr, b);
        b
    }
}

fn with<R>(f: impl FnOnce(&mut Recorder) -> R) -> Option<R> {
    REC.with(|r| r.borrow_mut().as_mut().map(f))
}

/// Whether a recording is in progress on this thread.
#[inline]
pub fn active() -> bool {
    context::recording()
}

/// Whether a recording is in progress on this thread, paused or not (see [`pause`]): frozen
/// calls inside it run inlined.
pub fn in_recording() -> bool {
    REC.with(|r| r.borrow().is_some())
}

/// The epoch of the recording in progress on this thread.
pub fn current_epoch() -> Option<u64> {
    context::recording_epoch()
}

// ---------------------------------------------------------------------------------------------
// Hooks called by the trace, the scheduler and the device layer

/// The recorder as the layers below see it (`context::Recorder`): each hook acts on this thread's
/// recording, if one is in progress.
struct Hooks;

impl crate::size::SizeRecorder for Hooks {
    fn combine(
        &self,
        a: Size,
        b: Size,
        node: fn(ExprId, ExprId) -> SizeNode,
    ) -> Option<(ExprId, u64)> {
        combine_sizes(a, b, node)
    }
    fn observe_value(
        &self,
        sym: ExprId,
        value: usize,
        at: &'static Location<'static>,
        how: &'static str,
    ) {
        observe_value(sym, value, at, how)
    }
    fn observe_same(&self, a: Size, b: Size) -> bool {
        observe_same(a, b)
    }
    fn observe_range(&self, sym: ExprId, value: usize, lo: u64, hi: u64) {
        observe_range(sym, value, lo, hi)
    }
}

impl crate::device::OpRecorder for Hooks {
    fn on_op(&self, rec: &DeviceOpRecord) {
        on_device_op(rec)
    }
}

impl context::Recorder for Hooks {
    fn result_sym(&self, operands: &[(u32, usize)], size: usize) -> u32 {
        result_sym(operands, size)
    }
    fn guard_classes(&self, sizes: &[(u32, usize)]) {
        guard_classes(sizes)
    }
    fn guard_equal(&self, a: (u32, usize), b: (u32, usize)) {
        guard_equal(a, b)
    }
    fn buffer_sym(&self, addr: usize) -> u32 {
        buffer_sym(addr)
    }
    fn captured_expression(&self, label: String) {
        captured_expression(label)
    }
}

/// Combine two sizes into a new expression node of the current recording.
pub(crate) fn combine_sizes(
    a: Size,
    b: Size,
    node: fn(ExprId, ExprId) -> SizeNode,
) -> Option<(ExprId, u64)> {
    with(|r| {
        let ea = r.expr(a.live_expr(), a.value);
        let eb = r.expr(b.live_expr(), b.value);
        let vals = [r.values[ea as usize], r.values[eb as usize]];
        let value = match node(ea, eb) {
            SizeNode::Add(..) => vals[0].checked_add(vals[1]),
            SizeNode::Sub(..) => vals[0].checked_sub(vals[1]),
            SizeNode::Mul(..) => vals[0].checked_mul(vals[1]),
            SizeNode::Div(..) => vals[0].checked_div(vals[1]),
            SizeNode::DivCeil(..) => (vals[1] != 0).then(|| vals[0].div_ceil(vals[1])),
            SizeNode::Min(..) => Some(vals[0].min(vals[1])),
            SizeNode::Max(..) => Some(vals[0].max(vals[1])),
            _ => None,
        }
        .unwrap_or(0);
        (r.node(node(ea, eb), value), r.epoch)
    })
}

/// The result size expression of an elementwise op over operands of these `(sym, size)`s whose
/// result has `size` elements, recording the guards the broadcasting decision depends on.
fn result_sym(operands: &[(u32, usize)], size: usize) -> u32 {
    if operands.iter().all(|&(sym, _)| sym == 0) {
        return 0;
    }
    with(|r| {
        // constant scalars broadcast whatever the other sizes are: they decide nothing
        let exprs: Vec<(ExprId, usize, ExprId)> = operands
            .iter()
            .filter(|&&(sym, size)| sym != 0 || size != 1)
            .map(|&(sym, size)| (r.expr(sym, size), size, sym))
            .collect();
        let result = exprs
            .iter()
            .find(|(_, s, sym)| *s == size && *sym != 0)
            .map_or(0, |e| e.2);
        let mixed = exprs.iter().any(|e| e.0 != exprs[0].0);
        for &(e, _, sym) in &exprs {
            if sym != 0 && (mixed || result == 0) {
                r.guard_class(e);
            }
        }
        if mixed {
            let big: Vec<ExprId> = exprs.iter().filter(|e| e.1 != 1).map(|e| e.0).collect();
            for w in big.windows(2) {
                r.guard_eq(w[0], w[1]);
            }
        }
        result
    })
    .unwrap_or(0)
}

/// Record that a decision depended on the size classes (0, 1, more) of these `(sym, size)`s.
pub(crate) fn guard_classes(sizes: &[(u32, usize)]) {
    with(|r| {
        for &(sym, size) in sizes {
            let e = r.expr(sym, size);
            r.guard_class(e);
        }
    });
}

/// Record that two sizes were found equal (and work was merged on that basis).
pub(crate) fn guard_equal(a: (u32, usize), b: (u32, usize)) {
    with(|r| {
        let (ea, eb) = (r.expr(a.0, a.1), r.expr(b.0, b.1));
        r.guard_eq(ea, eb);
    });
}

/// The size expression (as a var's `sym`) of the recorded buffer starting at `addr`.
fn buffer_sym(addr: usize) -> u32 {
    if !active() {
        return 0;
    }
    with(|r| match r.addr.get(&addr) {
        Some(&b) => r.sym(r.bufs[b as usize].size),
        None => 0,
    })
    .unwrap_or(0)
}

/// Rust code saw the value of a symbolic size (`len()`, `Size::get`, `==`): a replay must find the
/// same value (else it records anew, and the warning names `at`).
pub(crate) fn observe_value(
    sym: ExprId,
    value: usize,
    at: &'static Location<'static>,
    how: &'static str,
) {
    with(|r| {
        let v = value as u64;
        r.guard_range(sym, v, v, Some((at, how)));
    });
}

/// Rust code compared two sizes (`Size::same_as`): a replay must find the same answer. Equal sizes
/// become an equality of their expressions (so replays at any width where they stay equal still
/// replay); different ones keep their values, which the failed check's error message names.
pub(crate) fn observe_same(a: Size, b: Size) -> bool {
    let same = a.value == b.value;
    let (xa, xb) = (a.live_expr(), b.live_expr());
    if xa == 0 && xb == 0 {
        return same;
    }
    with(|r| {
        let (ea, eb) = (r.expr(xa, a.value), r.expr(xb, b.value));
        if same {
            r.guard_eq(ea, eb);
        } else {
            for (e, v) in [(ea, a.value as u64), (eb, b.value as u64)] {
                r.guard_range(e, v, v, None);
            }
        }
    });
    same
}

/// Rust code saw whether a symbolic size lies in `[lo, hi]` (`is_empty()`, `is_one()`, the index
/// type of `arange`): a replay must find the same answer.
pub(crate) fn observe_range(sym: ExprId, value: usize, lo: u64, hi: u64) {
    with(|r| {
        let v = value as u64;
        let (lo, hi) = if (lo..=hi).contains(&v) {
            (lo, hi)
        } else if v < lo {
            (0, lo - 1)
        } else {
            (hi + 1, u64::MAX)
        };
        r.guard_range(sym, lo, hi, None);
    });
}

/// `len()` on a variable: a size that depends on the inputs becomes a constant of the recording.
#[track_caller]
pub fn observe_len(id: VarId) -> usize {
    let (size, sym) = {
        let st = STATE.lock();
        let v = st.var(id.0);
        (v.size, v.sym)
    };
    if sym != 0 {
        observe_value(sym, size, Location::caller(), "len()");
    }
    size
}

/// `is_empty()` on a variable: a replay must find it empty (or not) again.
pub fn observe_empty(id: VarId) -> bool {
    let (size, sym) = {
        let st = STATE.lock();
        let v = st.var(id.0);
        (v.size, v.sym)
    };
    if sym != 0 {
        observe_range(sym, size, 0, 0);
    }
    size == 0
}

/// The symbolic size of a variable (what `x.size()` returns).
pub fn size_of(id: VarId) -> Size {
    let (size, sym) = {
        let st = STATE.lock();
        let v = st.var(id.0);
        (v.size, v.sym)
    };
    match (sym, current_epoch()) {
        (s, Some(epoch)) if s != 0 => Size {
            value: size,
            expr: s,
            epoch,
        },
        _ => Size::fixed(size),
    }
}

/// A lazy array made before the recording is computed inside it: a replay would compute it from
/// the new inputs, not from what it was made of.
pub(crate) fn captured_expression(label: String) {
    with(|r| {
        r.fail(Failure::Error(Error::HiddenInput {
            label,
            during: "an unevaluated array made before the call and computed inside".into(),
        }))
    });
}

/// An error that the recording must report instead of producing a recording (a refused read).
pub(crate) fn refuse(e: Error) -> Error {
    with(|r| r.fail(Failure::Error(e.clone())));
    e
}

/// Called by the device layer for every op.
pub(crate) fn on_device_op(rec: &DeviceOpRecord) {
    if !active() {
        return;
    }
    with(|r| record_op(r, rec));
}

fn record_op(r: &mut Recorder, rec: &DeviceOpRecord) {
    let op_index = r.ops.len() as u32;
    let addr = |i: usize| rec.buffers[i].ptr() as usize;
    let name = rec.kind.name();
    let mut bufs = Vec::with_capacity(rec.buffers.len());
    let mut launch_size = 0;
    // every kind must say how to record it (and `replay` how to run it): no wildcard arm
    let kind = match rec.kind {
        DeviceOpKind::Launch {
            hash,
            kernel,
            params,
            modified,
            block,
            tile_cols,
            size_sym,
            private,
            ir,
        } => {
            launch_size = r.expr(size_sym, rec.size);
            // outputs written over an input's buffer (update-in-place decided them)
            let in_place: Vec<(u32, u32)> = params
                .iter()
                .enumerate()
                .filter(|(_, p)| p.kind == ParamKind::Output)
                .filter_map(|(o, _)| {
                    params
                        .iter()
                        .enumerate()
                        .position(|(i, p)| p.kind == ParamKind::Input && addr(i) == addr(o))
                        .map(|i| (o as u32, i as u32))
                })
                .collect();
            for (i, p) in params.iter().enumerate() {
                if p.kind == ParamKind::Output {
                    bufs.push(r.new_buf(addr(i), p.ty, launch_size, op_index));
                } else {
                    let b = r.input_buf(addr(i), name);
                    if modified.contains(&(i as u32)) && b != u32::MAX {
                        if let Origin::Slot(k) = r.bufs[b as usize].origin {
                            if !r.mutated.contains(&k) {
                                r.mutated.push(k);
                            }
                        }
                    }
                    bufs.push(b);
                }
            }
            ReplayKind::Launch {
                hash,
                kernel: kernel.clone(),
                params: params.into(),
                modified: modified.into(),
                block,
                tile_cols,
                in_place: in_place.into(),
                private,
                takes: ir.map(|k| k.takes()).unwrap_or_default().into(),
            }
        }
        DeviceOpKind::LaunchSplit {
            general,
            interior,
            shifts,
            plan,
            through_gaps,
            size_sym,
        } => {
            launch_size = r.expr(size_sym, rec.size);
            let ng = general.2.len();
            for (i, p) in general.2.iter().enumerate() {
                if p.kind == ParamKind::Output {
                    bufs.push(r.new_buf(addr(i), p.ty, launch_size, op_index));
                } else {
                    bufs.push(r.input_buf(addr(i), name));
                }
            }
            // the interior kernel's outputs are the buffers just made; its inputs are inputs
            for i in 0..interior.2.len() {
                bufs.push(r.input_buf(addr(ng + i), name));
            }
            ReplayKind::LaunchSplit {
                general: (general.0, general.1.clone(), general.2.into()),
                interior: (interior.0, interior.1.clone(), interior.2.into()),
                shifts: shifts.into(),
                plan: plan.clone(),
                through_gaps,
            }
        }
        DeviceOpKind::LaunchReduce {
            hash,
            kernel,
            params,
            out_param,
            op,
            block,
            size_sym,
            ..
        } => {
            launch_size = r.expr(size_sym, rec.size);
            let n = rec.buffers.len();
            for i in 0..n - 1 {
                bufs.push(r.input_buf(addr(i), name));
            }
            let one = r.expr(0, 1);
            bufs.push(r.new_buf(addr(n - 1), params[out_param].ty, one, op_index));
            ReplayKind::LaunchReduce {
                hash,
                kernel: kernel.clone(),
                params: params.into(),
                out_param,
                op,
                block,
            }
        }
        DeviceOpKind::LaunchBlockReduce {
            hash,
            kernel,
            params,
            out_param,
            op,
            block,
            launch_block,
            size_sym,
        } => {
            launch_size = r.expr(size_sym, rec.size);
            let n = rec.buffers.len();
            for i in 0..n - 1 {
                bufs.push(r.input_buf(addr(i), name));
            }
            let bl = r.expr(0, block);
            let out_len = rec.buffers[n - 1].len as u64;
            let e = r.node(SizeNode::DivCeil(launch_size, bl), out_len);
            bufs.push(r.new_buf(addr(n - 1), params[out_param].ty, e, op_index));
            ReplayKind::LaunchBlockReduce {
                hash,
                kernel: kernel.clone(),
                params: params.into(),
                out_param,
                op,
                block,
                launch_block,
            }
        }
        DeviceOpKind::LaunchReduceMany {
            hash,
            kernel,
            params,
            reds,
            block,
            size_sym,
        } => {
            launch_size = r.expr(size_sym, rec.size);
            let n = rec.buffers.len();
            let k = reds.len();
            for i in 0..n - k {
                bufs.push(r.input_buf(addr(i), name));
            }
            let one = r.expr(0, 1);
            for (j, &(p, _)) in reds.iter().enumerate() {
                bufs.push(r.new_buf(addr(n - k + j), params[p].ty, one, op_index));
            }
            ReplayKind::LaunchReduceMany {
                hash,
                kernel: kernel.clone(),
                params: params.into(),
                reds: reds.into(),
                block,
            }
        }
        DeviceOpKind::ReduceMany(ops) => {
            let k = ops.len();
            for i in 0..k {
                bufs.push(r.input_buf(addr(i), name));
            }
            let one = r.expr(0, 1);
            for i in 0..k {
                bufs.push(r.new_buf(addr(k + i), rec.buffers[k + i].ty(), one, op_index));
            }
            ReplayKind::ReduceMany(ops.into())
        }
        DeviceOpKind::Reduce(op) => {
            bufs.push(r.input_buf(addr(0), name));
            let one = r.expr(0, 1);
            bufs.push(r.new_buf(addr(1), rec.buffers[1].ty(), one, op_index));
            ReplayKind::Reduce(op)
        }
        DeviceOpKind::BlockReduce { op, block } => {
            let b = r.input_buf(addr(0), name);
            bufs.push(b);
            let input = in_expr(r, b, rec.size);
            let bl = r.expr(0, block);
            let out_len = rec.buffers[1].len as u64;
            let e = r.node(SizeNode::DivCeil(input, bl), out_len);
            bufs.push(r.new_buf(addr(1), rec.buffers[1].ty(), e, op_index));
            ReplayKind::BlockReduce { op, block }
        }
        DeviceOpKind::PrefixSum { exclusive } => {
            let b = r.input_buf(addr(0), name);
            bufs.push(b);
            let e = in_expr(r, b, rec.size);
            bufs.push(r.new_buf(addr(1), rec.buffers[1].ty(), e, op_index));
            ReplayKind::PrefixSum { exclusive }
        }
        DeviceOpKind::Compress => {
            let b = r.input_buf(addr(0), name);
            bufs.push(b);
            let k = r.n_data;
            r.n_data += 1;
            let e = r.node(SizeNode::Data(k), rec.buffers[1].len as u64);
            bufs.push(r.new_buf(addr(1), VarType::U32, e, op_index));
            ReplayKind::Compress { data: k }
        }
        DeviceOpKind::Memcpy => {
            let b = r.input_buf(addr(0), name);
            bufs.push(b);
            let e = in_expr(r, b, rec.size);
            bufs.push(r.new_buf(addr(1), rec.buffers[1].ty(), e, op_index));
            ReplayKind::Memcpy
        }
        DeviceOpKind::Upload => {
            let buf = rec.buffers[0];
            let e = r.expr(0, buf.len);
            bufs.push(r.new_buf(addr(0), buf.ty(), e, op_index));
            ReplayKind::Upload {
                ty: buf.ty(),
                bytes: buf.to_bytes().into(),
            }
        }
        DeviceOpKind::Matmul { m, k, n, trans } => {
            bufs.push(r.input_buf(addr(0), name));
            bufs.push(r.input_buf(addr(1), name));
            let e = r.expr(0, m * n);
            bufs.push(r.new_buf(addr(2), rec.buffers[2].ty(), e, op_index));
            ReplayKind::Matmul { m, k, n, trans }
        }
        DeviceOpKind::Read => {
            // reads are refused before they run; one that slips through still must not be recorded
            r.fail(Failure::Error(Error::Invalid(
                "kiln internal error: a read reached the device inside a frozen function".into(),
            )));
            return;
        }
    };
    r.ops.push(RecOp {
        kind,
        bufs,
        size: launch_size,
    });
}

/// The value bounds of a size class.
fn class_bounds(class: u8) -> (u64, u64) {
    match class {
        0 => (0, 0),
        1 => (1, 1),
        _ => (2, u64::MAX),
    }
}

/// The expression of input buffer `b` (or the constant `size` for an unknown one).
fn in_expr(r: &mut Recorder, b: u32, size: usize) -> ExprId {
    if b == u32::MAX {
        r.expr(0, size)
    } else {
        r.bufs[b as usize].size
    }
}

// ---------------------------------------------------------------------------------------------
// Starting and finishing

/// Start recording on this thread with `slots` as the inputs (deduplicated; every non-literal one
/// must be evaluated). Fails if a recording is already in progress here.
pub fn begin(slots: &[VarId]) -> Result<()> {
    if in_recording() {
        return Err(Error::Invalid(
            "kiln internal error: nested recordings (frozen calls inside a recording run inlined)"
                .into(),
        ));
    }
    // reductions pending from before the call are not the function's work
    crate::schedule::resolve_reductions(None, &[])?;
    let epoch = NEXT_EPOCH.fetch_add(1, Relaxed);
    let mut r = Recorder {
        epoch,
        nodes: vec![SizeNode::Const(0)],
        values: vec![0],
        intern: HashMap::new(),
        guards: Vec::new(),
        n_slots: slots.len(),
        bufs: Vec::new(),
        addr: HashMap::new(),
        ops: Vec::new(),
        failure: None,
        mutated: Vec::new(),
        n_data: 0,
    };
    // node 0 is the "no expression" marker; keep it out of the intern table
    let mut st = STATE.lock();
    for (k, id) in slots.iter().enumerate() {
        let v = st.var(id.0);
        let (ty, size) = (v.ty, v.size);
        let addr = v.data.as_ref().map(|b| b.ptr() as usize);
        let e = r.node(SizeNode::Input(k as u32), size as u64);
        r.bufs.push(RecBuf {
            ty,
            size: e,
            origin: Origin::Slot(k as u32),
        });
        if let Some(a) = addr {
            r.addr.entry(a).or_insert(k as u32);
        }
        st.set_sym(id.0, e);
    }
    drop(st);
    REC.with(|c| *c.borrow_mut() = Some(r));
    context::install_recorder(&Hooks);
    crate::size::install_recorder(&Hooks);
    crate::device::install_recorder(&Hooks);
    context::set_recording_epoch(epoch);
    Ok(())
}

/// Stop recording without keeping anything (the traced function failed).
pub fn abort() {
    finish_state();
}

fn finish_state() -> Option<Recorder> {
    context::set_recording_epoch(0);
    let r = REC.with(|c| c.borrow_mut().take());
    let refusal = r.as_ref().and_then(|r| match &r.failure {
        Some(Failure::Error(e)) => Some(e.clone()),
        _ => None,
    });
    REFUSAL.with(|c| *c.borrow_mut() = refusal);
    STATE.lock().end_recording();
    r
}

/// Stop recording and produce the recording. `outputs` are the variables the function returned
/// (and its `&mut` arguments hold afterwards), in traversal order; they must be evaluated or
/// literals. `slots` are the inputs given to [`begin`].
pub fn finish(slots: &[VarId], outputs: &[VarId]) -> Result<Recording> {
    // map outputs while the recorder still knows buffer addresses and size expressions
    let mapped = with(|r| -> Result<Vec<Out>> {
        let st = STATE.lock();
        let mut outs = Vec::with_capacity(outputs.len());
        for id in outputs {
            let v = st.var(id.0);
            // an id the function freed and reused is not the input any more
            let slot = slots.iter().position(|s| s == id).filter(|_| !v.fresh);
            if let (Some(k), false) = (slot, v.is_evaluated()) {
                // an input literal handed back as it is
                outs.push(Out::Slot(k as u32));
                continue;
            }
            if v.is_literal() {
                let e = r.expr(v.sym, v.size);
                outs.push(Out::Literal {
                    ty: v.ty,
                    bits: v.literal,
                    size: e,
                });
            } else if let Some(buf) = &v.data {
                // by buffer, not by id: an input evaluated inside (a literal scattered into)
                // keeps its id but holds a buffer an op made
                match r.addr.get(&(buf.ptr() as usize)) {
                    Some(&b) => match r.bufs[b as usize].origin {
                        Origin::Slot(k) => outs.push(Out::Slot(k)),
                        Origin::Op(_) => outs.push(Out::Buf(b)),
                    },
                    None => {
                        return Err(Error::HiddenInput {
                            label: st.label_of(id.0),
                            during: "returned from the function".into(),
                        })
                    }
                }
            } else {
                return Err(Error::Invalid(format!(
                    "kiln internal error: output {} of a frozen function was not evaluated",
                    st.label_of(id.0)
                )));
            }
        }
        Ok(outs)
    });
    let r = finish_state().expect("a recording was in progress");
    let outs = mapped.expect("a recording was in progress")?;
    if let Some(f) = &r.failure {
        return Err(failure_error(f));
    }
    Ok(Recording::new(r.into_parts(), outs))
}

fn failure_error(f: &Failure) -> Error {
    match f {
        Failure::Error(e) => e.clone(),
        Failure::HiddenInput { addr, op } => {
            let st = STATE.lock();
            let label = match st.var_with_buffer(*addr) {
                Some(id) => st.label_of(id),
                None => "an evaluated array (freed since)".into(),
            };
            Error::HiddenInput {
                label,
                during: format!("read by a {op}"),
            }
        }
    }
}

/// Turn a finished recorder's parts over to the recording.
pub(crate) struct Parts {
    pub nodes: Vec<SizeNode>,
    pub values: Vec<u64>,
    pub guards: Vec<Guard>,
    pub n_slots: usize,
    pub bufs: Vec<RecBuf>,
    pub ops: Vec<RecOp>,
    pub mutated: Vec<u32>,
    pub n_data: u32,
}

impl Recorder {
    pub(crate) fn into_parts(self) -> Parts {
        Parts {
            nodes: self.nodes,
            values: self.values,
            guards: self.guards,
            n_slots: self.n_slots,
            bufs: self.bufs,
            ops: self.ops,
            mutated: self.mutated,
            n_data: self.n_data,
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Evaluated loops inside a recording

/// Where the ops of an evaluated loop's first iteration begin (`None`: not recording).
pub fn driver_mark() -> Option<usize> {
    if !active() {
        return None;
    }
    with(|r| r.ops.len())
}

/// While alive, this thread's recording ignores what happens (the later iterations of an
/// evaluated loop, which the loop driver replays instead of recording them).
pub struct Paused {
    epoch: u64,
}

/// Pause the recording in progress (if any) until the guard drops.
pub fn pause() -> Paused {
    let epoch = context::recording_epoch().unwrap_or(0);
    context::set_recording_epoch(0);
    Paused { epoch }
}

impl Drop for Paused {
    fn drop(&mut self) {
        context::set_recording_epoch(self.epoch);
    }
}

/// Turn the ops recorded since `mark` (an evaluated loop's first iteration) into a loop driver.
/// `ins`/`outs`: the state's buffers before and after that iteration (`ins` made inside the
/// recording, so that rebinding them between iterations touches no input); `active`: the Bool
/// buffer of lanes still running after it; `finals`: the variables holding the final state (made
/// by later iterations, which were not recorded) with the index of their state entry — they are
/// known to the recording as the driver's outputs from now on. `probe`: with a `max_iterations`,
/// where the ops of `cond(state) & active` on the state after that iteration start (recorded
/// after it) and that mask: the driver runs them at the limit to count the lanes truly cut off.
#[allow(clippy::too_many_arguments)]
pub fn driver_finish(
    mark: usize,
    ins: &[VarId],
    outs: &[VarId],
    active: VarId,
    finals: &[(VarId, usize)],
    max_iterations: u64,
    label: &str,
    probe: Option<(usize, VarId)>,
) {
    let ptr = |id: VarId| -> Option<usize> {
        STATE
            .lock()
            .var(id.0)
            .data
            .as_ref()
            .map(|b| b.ptr() as usize)
    };
    let ins: Vec<Option<usize>> = ins.iter().map(|&i| ptr(i)).collect();
    let outs: Vec<Option<usize>> = outs.iter().map(|&i| ptr(i)).collect();
    let active_ptr = ptr(active);
    let probe_ptr = probe.map(|(_, id)| ptr(id));
    let finals: Vec<(VarId, Option<usize>, usize)> =
        finals.iter().map(|&(id, k)| (id, ptr(id), k)).collect();
    with(|r| {
        let mut body = r.ops.split_off(mark.min(r.ops.len()));
        let probe_ops =
            probe.map(|(at, _)| body.split_off(at.saturating_sub(mark).min(body.len())));
        if body
            .iter()
            .any(|o| matches!(o.kind, ReplayKind::Compress { .. }))
        {
            r.fail(Failure::Error(Error::Invalid(format!(
                "evaluated loop {label} inside a frozen function compacts lanes (an evaluated branch or switch in its body, or `.compress(true)`), whose counts change from one iteration to the next and cannot be replayed; run the loop (or that branch) in symbolic mode, or the loop without `.compress(true)`"
            ))));
            return;
        }
        let mut lookup = |p: Option<usize>, what: &'static str| -> u32 {
            match p {
                Some(a) => r.input_buf(a, what),
                None => {
                    r.fail(Failure::Error(Error::Invalid(format!(
                        "kiln internal error: evaluated loop {label}: {what} is not evaluated"
                    ))));
                    u32::MAX
                }
            }
        };
        let in_bufs: Vec<u32> = ins.iter().map(|&p| lookup(p, "loop state")).collect();
        let out_bufs: Vec<u32> = outs.iter().map(|&p| lookup(p, "loop state")).collect();
        let active_buf = lookup(active_ptr, "loop mask");
        let probe_buf = probe_ptr.map(|p| lookup(p, "loop limit probe"));
        if r.failure.is_some() {
            return;
        }
        let mut all: Vec<u32> = body
            .iter()
            .chain(probe_ops.iter().flatten())
            .flat_map(|o| o.bufs.iter().copied())
            .collect();
        all.extend(probe_buf);
        all.extend(&in_bufs);
        all.extend(&out_bufs);
        all.push(active_buf);
        all.sort_unstable();
        all.dedup();
        let mut st = STATE.lock();
        for (id, p, k) in finals {
            let (Some(p), Some(&b)) = (p, out_bufs.get(k)) else {
                continue;
            };
            r.addr.insert(p, b);
            let e = r.sym(r.bufs[b as usize].size);
            st.set_sym(id.0, e);
        }
        drop(st);
        r.ops.push(RecOp {
            kind: ReplayKind::LoopDriver {
                body,
                carried: in_bufs.into_iter().zip(out_bufs).collect(),
                active: active_buf,
                max_iterations,
                label: label.into(),
                probe: probe_ops.zip(probe_buf),
            },
            bufs: all,
            size: 0,
        });
    });
}
