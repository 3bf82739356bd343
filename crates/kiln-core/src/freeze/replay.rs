//! Recordings and their replay: re-run captured device ops on new input buffers with no tracing,
//! code generation or hashing.
//!
//! A replay first evaluates every size expression for the new input sizes and checks the guards the
//! trace recorded (the dry run); then it runs the ops in order, allocating each output at its
//! evaluated size and dropping each buffer after its last use. Before every launch it checks that
//! each buffer has the length the kernel will touch, so a replay can never read or write out of
//! bounds even if an expression were wrong. Lengths that depend on data (compress) are read as the
//! op completes and the remaining expressions and guards are checked then.
//!
//! Update-in-place happens again at replay, decided anew for each call: an output may take the
//! buffer of an intermediate that dies at its kernel (as it did when recorded), and of an input the
//! caller releases — a `&mut` argument's array that the call replaces and that nothing else holds
//! (see [`Recording::replay_releasing`]), which is how a traced call writes such state in place.

use super::record::{Origin, Parts, RecBuf};
use super::size::{class_of, Eval, ExprId, SizeNode};
use crate::backend::CompiledKernel;
use crate::device::{self, LaunchSpec};
use crate::error::{Error, Result};
use crate::kernel::{KernelHash, Param, ParamKind};
use crate::op::ReduceOp;
use crate::registry::{Buffer, Var, VarId, STATE};
use crate::ty::VarType;
use crate::Op;
use std::collections::HashMap;
use std::fmt;
use std::panic::Location;
use std::sync::Arc;

/// Where Rust code observed a size, and how (`len()` at src/main.rs:12).
pub type Site = (&'static Location<'static>, &'static str);

/// A decision the trace (or the Rust code around it) made about sizes, which a replay must find
/// true again.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Guard {
    /// The expression's value lies in `[lo, hi]` (a size class, or one value Rust code saw).
    Range {
        e: ExprId,
        lo: u64,
        hi: u64,
        site: Option<Site>,
    },
    /// The two expressions are equal.
    Eq(ExprId, ExprId),
}

/// Where an output of the recorded function comes from.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Out {
    /// Input slot `k` itself (possibly written in place).
    Slot(u32),
    /// A buffer an op produced.
    Buf(u32),
    /// A literal (no memory), sized by an expression.
    Literal {
        ty: VarType,
        bits: u64,
        size: ExprId,
    },
}

/// A recorded device op in replayable form.
pub(crate) enum ReplayKind {
    Launch {
        hash: KernelHash,
        kernel: Arc<dyn CompiledKernel>,
        params: Arc<[Param]>,
        modified: Arc<[u32]>,
        block: usize,
        tile_cols: usize,
        /// (output, input) parameters that shared a buffer when recorded (update-in-place):
        /// the only pairs a replay may write in place again.
        in_place: Arc<[(u32, u32)]>,
        /// Reduce-scatter targets that blocks may accumulate privately, as when recorded.
        private: crate::privatise::Private,
        /// Per parameter: the inputs an output may take the buffer of, when the caller gave
        /// the input up (`Kernel::takes`; empty: none).
        takes: Arc<[u64]>,
    },
    LaunchSplit {
        general: (KernelHash, Arc<dyn CompiledKernel>, Arc<[Param]>),
        interior: (KernelHash, Arc<dyn CompiledKernel>, Arc<[Param]>),
        shifts: Arc<[i64]>,
        plan: Arc<crate::stencil::SplitPlan>,
        through_gaps: bool,
    },
    LaunchReduce {
        hash: KernelHash,
        kernel: Arc<dyn CompiledKernel>,
        params: Arc<[Param]>,
        out_param: usize,
        op: ReduceOp,
        block: usize,
    },
    LaunchBlockReduce {
        hash: KernelHash,
        kernel: Arc<dyn CompiledKernel>,
        params: Arc<[Param]>,
        out_param: usize,
        op: ReduceOp,
        block: usize,
        launch_block: usize,
    },
    /// Sibling reductions of one kernel's outputs in one pass: (output parameter, operation).
    LaunchReduceMany {
        hash: KernelHash,
        kernel: Arc<dyn CompiledKernel>,
        params: Arc<[Param]>,
        reds: Arc<[(usize, ReduceOp)]>,
        block: usize,
    },
    Reduce(ReduceOp),
    /// Reductions of evaluated buffers of one length in one pass.
    ReduceMany(Arc<[ReduceOp]>),
    BlockReduce {
        op: ReduceOp,
        block: usize,
    },
    PrefixSum {
        exclusive: bool,
    },
    Compress {
        data: u32,
    },
    Memcpy,
    Upload {
        ty: VarType,
        bytes: Arc<[u8]>,
    },
    Matmul {
        m: usize,
        k: usize,
        n: usize,
        trans: device::Trans,
    },
    /// An evaluated loop: `body` (one iteration's ops, recorded once) runs until no lane of the
    /// Bool buffer `active` is true; between iterations each `carried` pair's output buffer
    /// becomes its input. The final state is in the outputs.
    LoopDriver {
        body: Vec<RecOp>,
        carried: Vec<(u32, u32)>,
        active: u32,
        max_iterations: u64,
        label: Arc<str>,
        /// With `max_iterations`: the ops of `cond(state) & active` on the state an iteration
        /// leaves, and the buffer of that mask. At the limit they tell the lanes truncated
        /// (still running) from those that finished exactly at it.
        probe: Option<(Vec<RecOp>, u32)>,
    },
}

pub(crate) struct RecOp {
    pub kind: ReplayKind,
    /// Buffers in the device op's order (see `DeviceOpKind`).
    pub bufs: Vec<u32>,
    /// Launch size expression (launches only).
    pub size: ExprId,
}

/// Why a recording cannot be replayed for these inputs.
#[derive(Clone, Debug)]
pub enum Reject {
    /// A size decision of the trace would come out differently: record anew, keeping this
    /// recording for inputs it fits.
    Mismatch(String),
    /// Rust code used a size's value as a plain number (`len()` at `site`), and it differs now:
    /// record anew (and tell the user where).
    Observed { reason: String, site: Site },
    /// A size expression is invalid for these inputs (overflow, underflow, division by zero): the
    /// recording is replaced by a new one.
    Invalid(String),
}

impl fmt::Display for Reject {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Reject::Mismatch(s) | Reject::Invalid(s) => f.write_str(s),
            Reject::Observed { reason, .. } => f.write_str(reason),
        }
    }
}

/// The result of a replay attempt.
pub enum Replayed {
    /// The outputs, one new reference each, in the order given to `record::finish`.
    Done(Vec<VarId>),
    /// A data-dependent length broke a guard midway; nothing visible happened: record anew.
    Retrace(Reject),
}

/// One recorded call of a frozen function.
pub struct Recording {
    nodes: Vec<SizeNode>,
    record_values: Vec<u64>,
    guards: Vec<Guard>,
    n_slots: usize,
    slot_types: Vec<VarType>,
    bufs: Vec<RecBuf>,
    ops: Vec<RecOp>,
    /// Per op: the buffers to drop after it ran.
    frees: Vec<Vec<u32>>,
    /// Per input slot: the op that reads it last (`usize::MAX`: none), i.e. after which a
    /// released slot's buffer may hold results.
    slot_last_use: Vec<usize>,
    /// Per input slot: whether an output of the function is the slot itself (never released).
    slot_is_output: Vec<bool>,
    outputs: Vec<Out>,
    mutated: Vec<u32>,
    n_data: u32,
}

impl Recording {
    pub(crate) fn new(parts: Parts, outputs: Vec<Out>) -> Recording {
        let Parts {
            nodes,
            values,
            guards,
            n_slots,
            bufs,
            ops,
            mutated,
            n_data,
        } = parts;
        let mut last_use = vec![usize::MAX; bufs.len()];
        for (i, op) in ops.iter().enumerate() {
            for &b in &op.bufs {
                last_use[b as usize] = i;
            }
        }
        for o in &outputs {
            if let Out::Buf(b) = o {
                last_use[*b as usize] = usize::MAX;
            }
        }
        let mut frees = vec![Vec::new(); ops.len()];
        for (b, &u) in last_use.iter().enumerate() {
            if u != usize::MAX && matches!(bufs[b].origin, Origin::Op(_)) {
                frees[u].push(b as u32);
            }
        }
        let slot_types = bufs[..n_slots].iter().map(|b| b.ty).collect();
        let mut slot_last_use = vec![usize::MAX; n_slots];
        for (i, op) in ops.iter().enumerate() {
            for &b in &op.bufs {
                if (b as usize) < n_slots {
                    slot_last_use[b as usize] = i;
                }
            }
        }
        let mut slot_is_output = vec![false; n_slots];
        for o in &outputs {
            if let Out::Slot(k) = *o {
                slot_is_output[k as usize] = true;
            }
        }
        Recording {
            nodes,
            record_values: values,
            guards,
            n_slots,
            slot_types,
            bufs,
            ops,
            frees,
            slot_last_use,
            slot_is_output,
            outputs,
            mutated,
            n_data,
        }
    }

    /// Number of recorded device ops.
    pub fn len(&self) -> usize {
        self.ops.len()
    }
    /// Whether nothing was recorded.
    pub fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }
    /// Number of kernel launches among the ops.
    pub fn launches(&self) -> usize {
        self.ops
            .iter()
            .filter(|o| {
                matches!(
                    o.kind,
                    ReplayKind::Launch { .. }
                        | ReplayKind::LaunchReduce { .. }
                        | ReplayKind::LaunchReduceMany { .. }
                        | ReplayKind::LaunchBlockReduce { .. }
                )
            })
            .count()
    }
    /// The input sizes the recording was made with.
    pub fn recorded_sizes(&self) -> Vec<u64> {
        self.nodes
            .iter()
            .zip(&self.record_values)
            .filter_map(|(n, &v)| matches!(n, SizeNode::Input(_)).then_some(v))
            .collect()
    }

    fn evaluate(&self, sizes: &[u64], data: &[Option<u64>]) -> Result<Vec<Option<u64>>, Reject> {
        let mut vals: Vec<Option<u64>> = vec![None; self.nodes.len()];
        for (i, n) in self.nodes.iter().enumerate().skip(1) {
            match n.eval(&vals, sizes, data) {
                Eval::Known(v) => vals[i] = Some(v),
                Eval::Unknown => {}
                Eval::Invalid => {
                    return Err(Reject::Invalid(format!(
                        "the size {} is invalid for input sizes {sizes:?} (overflow, underflow or division by zero)",
                        self.show(i as ExprId)
                    )))
                }
            }
        }
        for g in &self.guards {
            match *g {
                Guard::Range { e, lo, hi, site } => {
                    let Some(v) = vals[e as usize] else { continue };
                    if (lo..=hi).contains(&v) {
                        continue;
                    }
                    let was = self.record_values[e as usize];
                    return Err(match site {
                        Some((at, how)) => Reject::Observed {
                            reason: format!(
                                "the size {} is {v} now but was {was} when recorded, and `{how}` at {at} used its value as a plain number",
                                self.show(e)
                            ),
                            site: (at, how),
                        },
                        None => Reject::Mismatch(format!(
                            "the size {} is {v} now but was {was} when recorded ({})",
                            self.show(e),
                            if class_of(v) != class_of(was) {
                                "empty, 1 and larger sizes trace differently"
                            } else {
                                "the traced code chose by it"
                            }
                        )),
                    });
                }
                Guard::Eq(a, b) => {
                    if let (Some(x), Some(y)) = (vals[a as usize], vals[b as usize]) {
                        if x != y {
                            return Err(Reject::Mismatch(format!(
                                "the sizes {} ({x}) and {} ({y}) were equal when recorded",
                                self.show(a),
                                self.show(b)
                            )));
                        }
                    }
                }
            }
        }
        Ok(vals)
    }

    /// The dry run: can this recording replay for inputs of these sizes?
    pub fn check(&self, sizes: &[u64]) -> Result<(), Reject> {
        if sizes.len() != self.n_slots {
            return Err(Reject::Mismatch("a different number of inputs".into()));
        }
        self.evaluate(sizes, &vec![None; self.n_data as usize])
            .map(|_| ())
    }

    /// A readable form of expression `e` (`in0 / 2`).
    fn show(&self, e: ExprId) -> String {
        use SizeNode::*;
        match self.nodes[e as usize] {
            Const(v) => v.to_string(),
            Input(k) => format!("size(in{k})"),
            Data(k) => format!("count(compress#{k})"),
            Add(a, b) => format!("({} + {})", self.show(a), self.show(b)),
            Sub(a, b) => format!("({} - {})", self.show(a), self.show(b)),
            Mul(a, b) => format!("({} * {})", self.show(a), self.show(b)),
            Div(a, b) => format!("({} / {})", self.show(a), self.show(b)),
            DivCeil(a, b) => format!("ceil({} / {})", self.show(a), self.show(b)),
            Min(a, b) => format!("min({}, {})", self.show(a), self.show(b)),
            Max(a, b) => format!("max({}, {})", self.show(a), self.show(b)),
        }
    }

    /// Replay with `slots` (deduplicated inputs in the recorded order; every non-literal one
    /// evaluated). Call [`Recording::check`] first. Inputs are only read (or, for a recorded
    /// scatter into an input, written as the traced call did).
    pub fn replay(&self, slots: &[VarId]) -> Result<Replayed> {
        self.replay_releasing(slots, &[])
    }

    /// [`Recording::replay`] for a caller that gives up its handles on the slots marked in
    /// `released` once the replay returns (the arrays of `&mut` arguments that the outputs
    /// replace): an output of a kernel may then be written into such a slot's buffer, as a traced
    /// call writes its state in place. A marked slot is still only read unless, at the start of the
    /// replay, nothing else can see it — that one handle is its only reference, no pending
    /// expression reads it, no view shares its buffer, no output of the function is the slot itself
    /// — and no length of the recording depends on data (a failed guard must leave the caller's
    /// arrays untouched); its buffer is taken only by the kernel that reads it last, at each lane's
    /// own index, for an output of its length and type. Results are the same bit for bit either
    /// way; `KILN_INPLACE=0` turns this off like every reuse.
    ///
    /// ```
    /// use kiln_core::{self as core, freeze, Op, VarType};
    /// let bytes: Vec<u8> = [1.0f32, 2.0, 3.0].iter().flat_map(|v| v.to_le_bytes()).collect();
    /// let x = core::from_bytes(VarType::F32, &bytes).unwrap();
    /// freeze::prepare_inputs(&[x]).unwrap();
    /// freeze::begin(&[x]).unwrap();
    /// let one = core::literal(VarType::F32, 1.0f32.to_bits() as u64, 1);
    /// let y = core::op(Op::Add, &[x, one]).unwrap();
    /// core::eval(&[y]).unwrap();
    /// let rec = freeze::finish(&[x], &[y]).unwrap();
    /// core::dec_ref(y);
    ///
    /// // `x += 1` on a state the caller holds alone: the result lands in x's own buffer
    /// let before = core::buffer_addr(x);
    /// let freeze::Replayed::Done(outs) = rec.replay_releasing(&[x], &[true]).unwrap() else {
    ///     panic!("replay")
    /// };
    /// assert_eq!(core::buffer_addr(outs[0]), before);
    /// core::dec_ref(x); // the caller's old handle goes, as `*x = y` drops it
    /// let out = core::read_bytes(outs[0]).unwrap();
    /// assert_eq!(f32::from_le_bytes(out[8..12].try_into().unwrap()), 4.0);
    /// for id in [one, outs[0]] { core::dec_ref(id); }
    /// ```
    pub fn replay_releasing(&self, slots: &[VarId], released: &[bool]) -> Result<Replayed> {
        let _mode = crate::device::history::replaying();
        // inputs: sizes and buffers; mutated slots that someone else can see are copied first
        let mut slot_vars: Vec<VarId> = slots.to_vec();
        // released slots that nothing else can see: their buffers may take results
        let mut free_slots: Vec<bool> = Vec::new();
        let mut own: Vec<VarId> = Vec::new();
        let mut table: Vec<Option<Arc<Buffer>>> = vec![None; self.bufs.len()];
        let mut sizes = Vec::with_capacity(slots.len());
        let mut to_copy = Vec::new();
        {
            let st = STATE.lock();
            for (k, id) in slots.iter().enumerate() {
                let v = st.var(id.0);
                if v.ty != self.slot_types[k] {
                    return Err(Error::Invalid(
                        "kiln internal error: a replay got an input of another type".into(),
                    ));
                }
                sizes.push(v.size as u64);
                table[k] = v.data.clone();
                let mutated = self.mutated.contains(&(k as u32));
                if released.get(k).copied().unwrap_or(false)
                    && !mutated
                    && !self.slot_is_output[k]
                    && self.slot_last_use[k] != usize::MAX
                    && self.n_data == 0
                    && v.ext == 1
                    && v.int == 0
                    // the variable's reference and the table's: no view shares the buffer
                    && v.data.as_ref().is_some_and(|b| crate::registry::holders(b) == 2)
                    && crate::inplace::enabled()
                {
                    if free_slots.is_empty() {
                        free_slots = vec![false; slots.len()];
                    }
                    free_slots[k] = true;
                }
                if mutated {
                    let shared = v.ext > 1
                        || v.int > 0
                        || v.data
                            .as_ref()
                            .is_some_and(|b| crate::registry::holders(b) > 2)
                        || self.n_data > 0;
                    if shared {
                        to_copy.push(k);
                    }
                }
            }
        }
        let vals = match self.evaluate(&sizes, &vec![None; self.n_data as usize]) {
            Ok(v) => v,
            Err(r) => return Ok(Replayed::Retrace(r)),
        };
        let mut copy_inputs = || -> Result<()> {
            for &k in &to_copy {
                let src = table[k].clone().expect("a mutated input is evaluated");
                let copy = Arc::new(device::copy_buffer(&src)?);
                let mut v = Var::new(Op::Data, src.ty(), src.len);
                v.data = Some(copy.clone());
                let id = VarId(STATE.lock().insert(v));
                own.push(id);
                slot_vars[k] = id;
                table[k] = Some(copy);
            }
            Ok(())
        };
        let result = match copy_inputs() {
            Err(e) => Err(e),
            Ok(()) => match self.run(&mut table, vals, &sizes, &free_slots) {
                Ok(Ok(vals)) => self.outputs(&table, &slot_vars, &vals).map(Replayed::Done),
                Ok(Err(reject)) => Ok(Replayed::Retrace(reject)),
                Err(e) => Err(e),
            },
        };
        for id in own {
            crate::dec_ref(id);
        }
        result
    }

    /// Run the ops; returns the final size values. `Ok(Err(_))`: a data-dependent guard failed
    /// midway.
    fn run(
        &self,
        table: &mut [Option<Arc<Buffer>>],
        mut vals: Vec<Option<u64>>,
        sizes: &[u64],
        free_slots: &[bool],
    ) -> Result<Result<Vec<Option<u64>>, Reject>> {
        let mut data: Vec<Option<u64>> = vec![None; self.n_data as usize];
        let mut dying: Vec<u32> = Vec::new();
        for (i, op) in self.ops.iter().enumerate() {
            // the released slots whose last reader this is die here too
            let frees: &[u32] = if free_slots.is_empty() {
                &self.frees[i]
            } else {
                dying.clear();
                dying.extend_from_slice(&self.frees[i]);
                dying.extend(
                    (0..self.n_slots)
                        .filter(|&k| free_slots[k] && self.slot_last_use[k] == i)
                        .map(|k| k as u32),
                );
                &dying
            };
            if let Err(r) = self.run_op(op, table, &mut vals, &mut data, sizes, frees)? {
                return Ok(Err(r));
            }
            for &b in &self.frees[i] {
                table[b as usize] = None;
            }
        }
        Ok(Ok(vals))
    }

    /// Run one recorded op. `Ok(Err(_))`: a data-dependent guard failed.
    fn run_op(
        &self,
        op: &RecOp,
        table: &mut [Option<Arc<Buffer>>],
        vals: &mut Vec<Option<u64>>,
        data: &mut [Option<u64>],
        sizes: &[u64],
        dying: &[u32],
    ) -> Result<Result<(), Reject>> {
        let get = |table: &[Option<Arc<Buffer>>], b: u32| -> Result<Arc<Buffer>> {
            table[b as usize].clone().ok_or_else(|| {
                Error::Invalid("kiln internal error: a replayed op lost its input".into())
            })
        };
        let mut outs: Vec<(u32, Buffer)> = Vec::new();
        // every recorded kind must say how it runs again: no wildcard arm
        match &op.kind {
            ReplayKind::Launch {
                hash,
                kernel,
                params,
                modified,
                block,
                tile_cols,
                in_place,
                private,
                takes,
            } => {
                let size = known(vals, op.size)?;
                let reuse = replay_in_place(
                    table,
                    (in_place, takes),
                    params,
                    &op.bufs,
                    size,
                    dying,
                    self.n_slots,
                );
                let held = kernel_buffers(table, params, &op.bufs, size, reuse)?;
                let refs: Vec<&Buffer> = held.iter().map(|b| b.as_ref()).collect();
                let mut spec = LaunchSpec::constant(kernel, *hash, params, modified, *block);
                spec.tile_cols = *tile_cols;
                spec.private = *private;
                device::launch_kernel(spec, size, &refs);
            }
            ReplayKind::LaunchSplit {
                general,
                interior,
                shifts,
                plan,
                through_gaps,
            } => {
                let size = known(vals, op.size)?;
                let ng = general.2.len();
                let mut held = kernel_buffers(table, &general.2, &op.bufs[..ng], size, Vec::new())?;
                for (j, p) in interior.2.iter().enumerate() {
                    let buf = get(table, op.bufs[ng + j])?;
                    if p.kind != ParamKind::Input {
                        check_len(p.kind, buf.len, size)?;
                    }
                    held.push(buf);
                }
                let grefs: Vec<&Buffer> = held[..ng].iter().map(|b| b.as_ref()).collect();
                let irefs: Vec<(&Buffer, i64)> = held[ng..]
                    .iter()
                    .zip(shifts.iter())
                    .map(|(b, &off)| (b.as_ref(), off))
                    .collect();
                let gspec = LaunchSpec::constant(&general.1, general.0, &general.2, &[], 0);
                let ispec = LaunchSpec::constant(&interior.1, interior.0, &interior.2, &[], 0);
                device::launch_split(gspec, &grefs, ispec, &irefs, size, plan, *through_gaps);
            }
            ReplayKind::LaunchReduce {
                hash,
                kernel,
                params,
                out_param,
                op: rop,
                block,
            } => {
                let size = known(vals, op.size)?;
                let n = op.bufs.len();
                let held = fused_inputs(table, &op.bufs[..n - 1], params, *out_param, size)?;
                let refs: Vec<&Buffer> = held.iter().map(|b| b.as_ref()).collect();
                let spec = LaunchSpec::constant(kernel, *hash, params, &[], *block);
                let (out, _, _) = device::launch_reduce(spec, size, &refs, *out_param, *rop)?;
                outs.push((op.bufs[n - 1], out));
            }
            ReplayKind::LaunchBlockReduce {
                hash,
                kernel,
                params,
                out_param,
                op: rop,
                block,
                launch_block,
            } => {
                let size = known(vals, op.size)?;
                let n = op.bufs.len();
                let held = fused_inputs(table, &op.bufs[..n - 1], params, *out_param, size)?;
                let refs: Vec<&Buffer> = held.iter().map(|b| b.as_ref()).collect();
                let spec = LaunchSpec::constant(kernel, *hash, params, &[], *launch_block);
                let (out, _) =
                    device::launch_block_reduce(spec, size, &refs, *out_param, *rop, *block)?;
                outs.push((op.bufs[n - 1], out));
            }
            ReplayKind::LaunchReduceMany {
                hash,
                kernel,
                params,
                reds,
                block,
            } => {
                let size = known(vals, op.size)?;
                let k = reds.len();
                let n = op.bufs.len();
                let inputs: Vec<Param> = params
                    .iter()
                    .filter(|p| p.kind != ParamKind::Output)
                    .cloned()
                    .collect();
                let mut held = Vec::with_capacity(n - k);
                for (j, &b) in op.bufs[..n - k].iter().enumerate() {
                    let buf = get(table, b)?;
                    check_len(inputs[j].kind, buf.len, size)?;
                    held.push(buf);
                }
                let refs: Vec<&Buffer> = held.iter().map(|b| b.as_ref()).collect();
                let spec = LaunchSpec::constant(kernel, *hash, params, &[], *block);
                let (res, _, _) = device::launch_reduce_many(spec, size, &refs, reds)?;
                for (j, out) in res.into_iter().enumerate() {
                    outs.push((op.bufs[n - k + j], out));
                }
            }
            ReplayKind::ReduceMany(ops) => {
                let k = ops.len();
                let mut held = Vec::with_capacity(k);
                for &b in &op.bufs[..k] {
                    held.push(get(table, b)?);
                }
                let len = held.first().map_or(0, |b| b.len);
                if held.iter().any(|b| b.len != len) {
                    return Err(Error::Invalid(
                        "kiln internal error: a replayed multi-reduction's inputs differ in length"
                            .into(),
                    ));
                }
                let pairs: Vec<(ReduceOp, &Buffer)> = ops
                    .iter()
                    .copied()
                    .zip(held.iter().map(|b| b.as_ref()))
                    .collect();
                for (j, out) in device::reduce_many(&pairs)?.into_iter().enumerate() {
                    outs.push((op.bufs[k + j], out));
                }
            }
            ReplayKind::Reduce(rop) => {
                let src = get(table, op.bufs[0])?;
                outs.push((op.bufs[1], device::reduce(*rop, &src)?));
            }
            ReplayKind::BlockReduce { op: rop, block } => {
                let src = get(table, op.bufs[0])?;
                outs.push((op.bufs[1], device::block_reduce(*rop, &src, *block)?));
            }
            ReplayKind::PrefixSum { exclusive } => {
                let src = get(table, op.bufs[0])?;
                outs.push((op.bufs[1], device::prefix_sum(&src, *exclusive)?));
            }
            ReplayKind::Compress { data: k } => {
                let src = get(table, op.bufs[0])?;
                let out = device::compress(&src)?;
                data[*k as usize] = Some(out.len as u64);
                outs.push((op.bufs[1], out));
                // lengths that follow from this count are known now
                *vals = match self.evaluate(sizes, data) {
                    Ok(v) => v,
                    Err(r) => return Ok(Err(r)),
                };
            }
            ReplayKind::Memcpy => {
                let src = get(table, op.bufs[0])?;
                outs.push((op.bufs[1], device::copy_buffer(&src)?));
            }
            ReplayKind::Matmul { m, k, n, trans } => {
                let (a, b) = (get(table, op.bufs[0])?, get(table, op.bufs[1])?);
                if a.len != m * k || b.len != k * n {
                    return Err(Error::Invalid(
                        "kiln internal error: a replayed matmul got operands of other sizes".into(),
                    ));
                }
                outs.push((op.bufs[2], device::matmul(&a, &b, *m, *k, *n, *trans)?));
            }
            ReplayKind::Upload { ty, bytes } => {
                outs.push((op.bufs[0], device::upload(*ty, bytes)?));
            }
            ReplayKind::LoopDriver {
                body,
                carried,
                active,
                max_iterations,
                label,
                probe,
            } => {
                let mut iterations = 0u64;
                loop {
                    for b in body {
                        if let Err(r) = self.run_op(b, table, vals, data, sizes, &[])? {
                            return Ok(Err(r));
                        }
                    }
                    let mask = get(table, *active)?;
                    if device::reduce_bits(ReduceOp::Or, &mask) & 1 == 0 {
                        break;
                    }
                    iterations += 1;
                    if *max_iterations > 0 && iterations >= *max_iterations {
                        let still = match probe {
                            Some((ops, buf)) => {
                                for o in ops {
                                    if let Err(r) = self.run_op(o, table, vals, data, sizes, &[])? {
                                        return Ok(Err(r));
                                    }
                                }
                                device::reduce_bits(ReduceOp::Add, &*get(table, *buf)?)
                            }
                            None => device::reduce_bits(ReduceOp::Add, &mask),
                        };
                        if still > 0 {
                            crate::stats::note_truncated_loop(label, still);
                        }
                        break;
                    }
                    for &(input, output) in carried {
                        table[input as usize] = table[output as usize].clone();
                    }
                }
            }
        }
        for (b, buf) in outs {
            table[b as usize] = Some(Arc::new(buf));
        }
        Ok(Ok(()))
    }

    fn outputs(
        &self,
        table: &[Option<Arc<Buffer>>],
        slot_vars: &[VarId],
        vals: &[Option<u64>],
    ) -> Result<Vec<VarId>> {
        let mut made: HashMap<u32, VarId> = HashMap::new();
        let mut ids = Vec::with_capacity(self.outputs.len());
        let result = self.collect_outputs(table, slot_vars, vals, &mut made, &mut ids);
        if result.is_err() {
            // hand back what was made so far
            for id in ids.drain(..) {
                crate::dec_ref(id);
            }
        }
        result.map(|()| ids)
    }

    fn collect_outputs(
        &self,
        table: &[Option<Arc<Buffer>>],
        slot_vars: &[VarId],
        vals: &[Option<u64>],
        made: &mut HashMap<u32, VarId>,
        ids: &mut Vec<VarId>,
    ) -> Result<()> {
        for o in &self.outputs {
            let id = match *o {
                Out::Slot(k) => {
                    crate::inc_ref(slot_vars[k as usize]);
                    slot_vars[k as usize]
                }
                Out::Buf(b) => match made.get(&b) {
                    Some(&id) => {
                        crate::inc_ref(id);
                        id
                    }
                    None => {
                        let buf = table[b as usize].clone().ok_or_else(|| {
                            Error::Invalid(
                                "kiln internal error: a replay lost an output buffer".into(),
                            )
                        })?;
                        let mut v = Var::new(Op::Data, buf.ty(), buf.len);
                        v.data = Some(buf);
                        let id = VarId(STATE.lock().insert(v));
                        made.insert(b, id);
                        id
                    }
                },
                Out::Literal { ty, bits, size } => {
                    crate::trace::literal(ty, bits, known(vals, size)?)
                }
            };
            ids.push(id);
        }
        Ok(())
    }
}

/// The input buffers of a fused reduction's kernel (every parameter but the output at
/// `out_param`), each checked against the launch size.
fn fused_inputs(
    table: &[Option<Arc<Buffer>>],
    bufs: &[u32],
    params: &[Param],
    out_param: usize,
    size: usize,
) -> Result<Vec<Arc<Buffer>>> {
    bufs.iter()
        .enumerate()
        .map(|(j, &b)| {
            let p = if j < out_param { j } else { j + 1 };
            let buf = table[b as usize].clone().ok_or_else(|| {
                Error::Invalid("kiln internal error: a replayed op lost its input".into())
            })?;
            check_len(params[p].kind, buf.len, size)?;
            Ok(buf)
        })
        .collect()
}

fn known(vals: &[Option<u64>], e: ExprId) -> Result<usize> {
    vals[e as usize].map(|v| v as usize).ok_or_else(|| {
        Error::Invalid("kiln internal error: a replayed launch size is not known yet".into())
    })
}

/// Update-in-place at replay: for each output parameter of a replayed kernel that shared an
/// input's buffer when recorded (`pairs`), that input's buffer again if the rule of the live
/// evaluation still holds for it now — an
/// intermediate of this replay read only
/// at each lane's own index, with the output's length and element width, that no later op and
/// no output of the function uses (`dying`: dropped after this op) and nothing else holds.
/// Then, for the outputs still without a buffer, an input slot in `dying` (below `n_slots`: one
/// the caller released and nothing else can see, see [`Recording::replay_releasing`]) read at
/// each lane's own index, of the output's length and type, and read before the output's store
/// (`takes`): the recording never paired those (an input of a recording is never written).
fn replay_in_place(
    table: &[Option<Arc<Buffer>>],
    (pairs, takes): (&[(u32, u32)], &[u64]),
    params: &[Param],
    bufs: &[u32],
    size: usize,
    dying: &[u32],
    n_slots: usize,
) -> Vec<Option<Arc<Buffer>>> {
    let slot_dies = dying.iter().any(|&b| (b as usize) < n_slots);
    // (nothing recorded in place or nothing dies here: no allocation on the replay path)
    if (pairs.is_empty() && !slot_dies) || dying.is_empty() || !crate::inplace::enabled() {
        return Vec::new();
    }
    let mut reuse: Vec<Option<Arc<Buffer>>> = vec![None; params.len()];
    let mut taken: Vec<u32> = Vec::new();
    for (p, param) in params.iter().enumerate() {
        if param.kind != ParamKind::Output {
            continue;
        }
        let fits = |q: usize| {
            dying_input(q, params, bufs, table, dying, &taken, |buf| {
                buf.len == size
                    && buf.ty().size_bytes() == param.ty.size_bytes()
                    && crate::registry::holders(buf) == 1
            })
        };
        // the inputs recorded as sharing this output's buffer, lowest first (scanning only the
        // pairs: a wide kernel, like an optimizer's step over every parameter, has dozens of
        // inputs and outputs)
        let q = pairs
            .iter()
            .filter(|&&(o, q)| o as usize == p && (q as usize) < p)
            .map(|&(_, q)| q as usize)
            .filter(|&q| fits(q))
            .min();
        if let Some(q) = q {
            let b = bufs[q];
            taken.push(b);
            let buf = table[b as usize].clone().expect("checked");
            crate::inplace::note_reuse(
                &|| format!("replayed intermediate #{b} ({} × {})", buf.ty(), buf.len),
                &|| format!("replayed output #{}", bufs[p]),
                buf.bytes() as u64,
            );
            reuse[p] = Some(buf);
        }
    }
    if !slot_dies {
        return reuse;
    }
    for (p, param) in params.iter().enumerate() {
        if param.kind != ParamKind::Output || reuse[p].is_some() {
            continue;
        }
        // (an input read after the output's store, `acc` beside `y = 3x` stored first, would
        // find its lanes overwritten: `takes` names those read before)
        let allowed = takes.get(p).copied().unwrap_or(0);
        // (every parameter bound to the buffer, when it is bound to several)
        let read_before = |q: usize| {
            (0..params.len()).all(|r| bufs[r] != bufs[q] || (r < 64 && allowed & (1 << r) != 0))
        };
        let q = (0..params.len().min(64)).find(|&q| {
            read_before(q)
                && (bufs[q] as usize) < n_slots
                // the caller's variable and the table hold it, nothing else (checked when the
                // replay began; no op since took a view of it)
                && dying_input(q, params, bufs, table, dying, &taken, |buf| {
                    buf.len == size && buf.ty() == param.ty && crate::registry::holders(buf) == 2
                })
        });
        if let Some(q) = q {
            let b = bufs[q];
            taken.push(b);
            let buf = table[b as usize].clone().expect("checked");
            crate::inplace::note_reuse(
                &|| {
                    format!(
                        "the released input #{b} ({} × {}) of a replay",
                        buf.ty(),
                        buf.len
                    )
                },
                &|| format!("replayed output #{}", bufs[p]),
                buf.bytes() as u64,
            );
            reuse[p] = Some(buf);
        }
    }
    reuse
}

/// Whether parameter `q` is an input whose buffer dies at this op and is not `taken` yet, read at
/// each lane's own index by every parameter bound to it, and whose table entry passes `ok`.
fn dying_input(
    q: usize,
    params: &[Param],
    bufs: &[u32],
    table: &[Option<Arc<Buffer>>],
    dying: &[u32],
    taken: &[u32],
    ok: impl Fn(&Arc<Buffer>) -> bool,
) -> bool {
    let b = bufs[q];
    params[q].kind == ParamKind::Input
        && dying.contains(&b)
        && !taken.contains(&b)
        && bufs
            .iter()
            .zip(params)
            .all(|(&o, op)| o != b || op.kind == ParamKind::Input)
        && table[b as usize].as_ref().is_some_and(ok)
}

/// The buffers of a replayed kernel's parameters: new outputs of `size` elements (entered in
/// `table`) or the input buffers `reuse` names for them, recorded buffers for the rest (their
/// lengths checked).
fn kernel_buffers(
    table: &mut [Option<Arc<Buffer>>],
    params: &[Param],
    bufs: &[u32],
    size: usize,
    mut reuse: Vec<Option<Arc<Buffer>>>,
) -> Result<Vec<Arc<Buffer>>> {
    let mut held: Vec<Arc<Buffer>> = Vec::with_capacity(params.len());
    for (i, (p, &b)) in params.iter().zip(bufs).enumerate() {
        if p.kind == ParamKind::Output {
            let buf = match reuse.get_mut(i).and_then(Option::take) {
                Some(buf) => {
                    if buf.ty() != p.ty {
                        buf.retype(p.ty);
                    }
                    buf
                }
                None => Arc::new(crate::device::alloc(p.ty, size, &|| {
                    format!("a replayed kernel output of {size} × {}", p.ty)
                })?),
            };
            table[b as usize] = Some(buf.clone());
            held.push(buf);
        } else {
            let buf = table[b as usize].clone().ok_or_else(|| {
                Error::Invalid("kiln internal error: a replayed op lost its input".into())
            })?;
            check_len(p.kind, buf.len, size)?;
            held.push(buf);
        }
    }
    Ok(held)
}

/// The length check that keeps a replay in bounds whatever the expressions say.
fn check_len(kind: ParamKind, len: usize, size: usize) -> Result<()> {
    let ok = match kind {
        ParamKind::Input => len == size,
        ParamKind::Broadcast => len == 1,
        ParamKind::Indexed | ParamKind::Output => true,
    };
    if ok {
        Ok(())
    } else {
        Err(Error::Invalid(format!(
            "kiln internal error: a replayed kernel expected {size} elements in an input of {len}; \
             disable freezing for this function (`.enabled(false)`) and please report it"
        )))
    }
}
