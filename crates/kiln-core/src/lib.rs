//! kiln-core: the untyped engine under kiln.
//!
//! Variables are ids into one registry; operations on them are traced, not run. `eval` groups what
//! must be materialised by size, builds one kernel per group, compiles it (Cranelift, or the reference
//! interpreter) and launches it on all cores. The typed front end (`kiln`) puts `Array<T>`, operators
//! and math on top; this crate knows nothing of Rust element types beyond [`VarType`].
//!
//! ```
//! use kiln_core::{self as core, Op, VarType};
//! let a = core::counter(VarType::U32, 4).unwrap();
//! let b = core::literal(VarType::U32, 10, 1);
//! let c = core::op(Op::Add, &[a, b]).unwrap();
//! let bytes = core::read_bytes(c).unwrap();
//! assert_eq!(bytes.len(), 16);
//! for v in [a, b, c] { core::dec_ref(v); }
//! ```

pub mod alloc;
pub mod backend;
pub(crate) mod build;
pub mod cache;
pub mod config;
pub mod context;
pub mod control;
pub mod device;
pub mod diskcache;
pub mod error;
pub mod freeze;
pub mod handle;
pub mod inplace;
pub mod inspect;
pub mod kernel;
pub mod lanes;
pub mod launch;
pub(crate) mod log;
pub mod op;
pub mod plan;
pub mod privatise;
pub mod registry;
pub mod schedule;
pub mod size;
pub mod stats;
pub mod stencil;
pub mod trace;
pub mod ty;

pub use backend::select::{backend, with_backend};
pub use backend::BackendKind;
pub use device::Trans;
pub use error::{Error, Result};
pub use freeze::Size;
pub use handle::{Handle, Handles};
pub use log::set_log_level;
pub use op::{Op, ReduceOp};
pub use registry::{whos, whos_with, Buffer, VarId, Whos};
pub use schedule::{eval, eval_all, kernels_for};
pub use stats::Stats;
pub use trace::{
    convert, counter, gather, gather_view, literal, literal_value, op, scaled_operand, scatter,
    stencil_node,
};
pub use ty::{Scalar, VarType};

use registry::{Var, STATE};
use std::sync::Arc;

/// Add an external reference (a new user handle).
pub fn inc_ref(id: VarId) {
    STATE.lock().inc_ext(id.0);
}

/// Drop an external reference; the variable is freed when nothing refers to it.
pub fn dec_ref(id: VarId) {
    let mut garbage = Vec::new();
    let mut st = STATE.lock();
    st.dec_ext(id.0, &mut garbage);
    drop(st);
    drop(garbage);
    registry::release_deferred_owners();
}

/// What recomputing the unevaluated `id` costs: the number of distinct unevaluated, non-literal
/// variables its value depends on (counting stops at `limit`), and whether one of them reads other
/// lanes (a gather or a stencil node), which makes recomputing it at other indices dearer still.
pub fn lazy_cost(id: VarId, limit: usize) -> (usize, bool) {
    let st = STATE.lock();
    let mut seen = registry::FxSet::default();
    let mut stack = vec![id.0];
    let mut reads_others = false;
    while let Some(i) = stack.pop() {
        let v = st.var(i);
        if v.is_evaluated() || v.is_literal() || !seen.insert(i) {
            continue;
        }
        if seen.len() >= limit {
            break;
        }
        reads_others |= matches!(v.op, Op::Gather | Op::Tap | Op::Split) || v.region.is_some();
        stack.extend(v.dep_ids());
    }
    (seen.len(), reads_others)
}

/// The unevaluated variables `id` is computed from that something else also holds (an external
/// reference) and that read other lanes (a gather or stencil node in their expression): evaluated
/// with `id`, in the same kernel, they are stored instead of computed again by a later
/// evaluation — which keeps a chain of such values (a cotangent summed over the steps of a
/// stencil loop) from growing by one step's expression at each step. The walk stops at `limit`
/// variables.
pub fn shared_operands(id: VarId, limit: usize) -> Vec<VarId> {
    let st = STATE.lock();
    let size = st.var(id.0).size;
    let reads_others = |root: u32| {
        let mut seen = registry::FxSet::default();
        let mut stack = vec![root];
        while let Some(i) = stack.pop() {
            let v = st.var(i);
            if v.is_evaluated() || v.is_literal() || !seen.insert(i) || seen.len() >= limit {
                continue;
            }
            if matches!(v.op, Op::Gather | Op::Tap | Op::Split) {
                return true;
            }
            stack.extend(v.dep_ids());
        }
        false
    };
    let mut seen = registry::FxSet::default();
    let mut stack: Vec<u32> = st.var(id.0).dep_ids().collect();
    let mut out = Vec::new();
    while let Some(i) = stack.pop() {
        let v = st.var(i);
        if v.is_evaluated() || v.is_literal() || !seen.insert(i) || seen.len() >= limit {
            continue;
        }
        if v.ext > 0 && v.size == size && v.region.is_none() && reads_others(i) {
            out.push(VarId(i));
            continue;
        }
        stack.extend(v.dep_ids());
    }
    out
}

/// One variable of an [`expression_signature`], its operands named by their place in it.
#[derive(Clone, Debug, PartialEq, Eq)]
enum SigNode {
    /// The `i`-th of the inputs given (its type).
    Input(usize, VarType),
    /// Another evaluated array: its type and whether it has one element, not its contents.
    Data(VarType, bool),
    /// An unevaluated variable: op, type, one element or not, literal bits (a literal's value,
    /// another op's immediate), operands (places, 0: none), a stencil node's domain and reach.
    Node {
        op: Op,
        ty: VarType,
        one: bool,
        literal: u64,
        deps: [u32; 4],
        meta: Option<Arc<stencil::StencilMeta>>,
    },
}

/// The structure of the unevaluated expression of `id`, compared exactly (no hash): equal
/// signatures compute the same function of `inputs` (each stands for its place in the list) and
/// of other evaluated arrays that play the same parts, up to the boundary rule of stencil taps
/// (a tap is its source, offsets and domain). A caller caches what follows from an expression's
/// structure alone (a stencil kernel's constant partial derivatives) under it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Signature(Vec<SigNode>);

/// The [`Signature`] of `id`'s expression over `inputs`; `None` when it passes `limit` variables,
/// holds a loop or branch region (whose bodies are not walked), or when one array is listed as
/// two inputs (the expression could not say which of the two places it reads).
///
/// ```
/// use kiln_core::{expression_signature, from_scalars, literal, trace::op, Op, VarType};
/// let (a, b) = (from_scalars(&[1.0f32, 2.0]).unwrap(), from_scalars(&[3.0f32, 4.0]).unwrap());
/// let two = literal(VarType::F32, 2.0f32.to_bits() as u64, 1);
/// let x = op(Op::Mul, &[a, two]).unwrap();
/// let y = op(Op::Mul, &[b, two]).unwrap();
/// // the same function of its one input, whichever array that is
/// assert_eq!(expression_signature(x, &[a], 16), expression_signature(y, &[b], 16));
/// let three = literal(VarType::F32, 3.0f32.to_bits() as u64, 1);
/// let z = op(Op::Mul, &[b, three]).unwrap();
/// assert_ne!(expression_signature(x, &[a], 16), expression_signature(z, &[b], 16));
/// // one array in two places: which one an expression reads cannot be told
/// assert_eq!(expression_signature(x, &[a, a], 16), None);
/// ```
pub fn expression_signature(id: VarId, inputs: &[VarId], limit: usize) -> Option<Signature> {
    if (1..inputs.len()).any(|i| inputs[..i].contains(&inputs[i])) {
        return None;
    }
    let st = STATE.lock();
    let mut place: registry::FxMap<u32, u32> = registry::FxMap::default();
    let mut nodes = Vec::with_capacity(32);
    let mut stack = Vec::with_capacity(32);
    stack.push((id.0, false));
    while let Some((i, expanded)) = stack.pop() {
        if place.contains_key(&i) {
            continue;
        }
        let v = st.var(i);
        let leaf = if let Some(k) = inputs.iter().position(|x| x.0 == i) {
            Some(SigNode::Input(k, v.ty))
        } else if v.is_evaluated() {
            Some(SigNode::Data(v.ty, v.size == 1))
        } else {
            None
        };
        let node = match leaf {
            Some(leaf) => leaf,
            None if v.region.is_some() => return None,
            None if !expanded => {
                stack.push((i, true));
                for &d in signature_operands(v) {
                    if d != 0 && !place.contains_key(&d) {
                        stack.push((d, false));
                    }
                }
                continue;
            }
            None => {
                let mut deps = [0u32; 4];
                for (slot, &d) in deps.iter_mut().zip(signature_operands(v)) {
                    *slot = if d == 0 { 0 } else { place[&d] + 1 };
                }
                let meta = matches!(v.op, Op::Tap | Op::Split)
                    .then(|| st.stencil.get(&i).cloned())
                    .flatten();
                SigNode::Node {
                    op: v.op,
                    ty: v.ty,
                    one: v.size == 1,
                    literal: v.literal,
                    deps,
                    meta,
                }
            }
        };
        if nodes.len() >= limit {
            return None;
        }
        place.insert(i, nodes.len() as u32);
        nodes.push(node);
    }
    Some(Signature(nodes))
}

/// The operands a signature walks: a tap's source alone, every other variable's all. A tap
/// counts as its source read at its offsets over its domain; its value at lanes whose read
/// leaves the domain (the boundary rule's expression) is not compared — a caller that depends
/// on it keys on the rule itself.
fn signature_operands(v: &Var) -> &[u32] {
    &v.deps[..if v.op == Op::Tap { 1 } else { v.deps.len() }]
}

/// Number of elements.
pub fn size(id: VarId) -> usize {
    STATE.lock().var(id.0).size
}

/// Element type.
pub fn var_type(id: VarId) -> VarType {
    STATE.lock().var(id.0).ty
}

/// Whether the variable holds evaluated data.
pub fn is_evaluated(id: VarId) -> bool {
    STATE.lock().var(id.0).is_evaluated()
}

/// Attach a label (shown by `whos()`, logs and error messages).
pub fn set_label(id: VarId, label: &str) {
    STATE.lock().var_mut(id.0).label = Some(label.into());
}

/// The label, if any.
pub fn label(id: VarId) -> Option<String> {
    STATE.lock().var(id.0).label.as_deref().map(String::from)
}

/// Describe a variable for messages: label, id, type and size.
pub fn describe(id: VarId) -> String {
    STATE.lock().label_of(id.0)
}

pub(crate) fn data_var(ty: VarType, buf: Buffer) -> VarId {
    log::init_from_env();
    let mut v = Var::new(Op::Data, ty, buf.len);
    // while recording, the buffer's size follows from the op that made it
    v.sym = context::buffer_sym(buf.ptr());
    v.data = Some(Arc::new(buf));
    VarId(STATE.lock().insert(v))
}

/// A new evaluated variable whose `len` elements of `ty` are another library's memory, read in
/// place without a copy (a NumPy array, a DLPack tensor). kiln never writes into it (see
/// [`alloc::ForeignMemory`]); the variable sees what the owner writes there later. `Err` says why
/// the memory cannot be read in place (misaligned, too short, ending too close to a page
/// boundary for vector reads past the end, already read by another kiln array, or made inside a
/// frozen function's recording); the caller then copies it.
///
/// ```
/// use kiln_core::alloc::ForeignMemory;
/// struct Held(Vec<f32>);
/// // SAFETY: the vector is owned by the value and never resized while it lives.
/// unsafe impl ForeignMemory for Held {
///     fn ptr(&self) -> *const u8 { self.0.as_ptr().cast() }
///     fn bytes(&self) -> usize { self.0.len() * 4 }
/// }
/// let mut v = Vec::with_capacity(4096);
/// v.extend([1.0f32, 2.0, 3.0]);
/// match kiln_core::from_foreign(kiln_core::VarType::F32, 3, Box::new(Held(v))) {
///     Ok(id) => {
///         let bytes = kiln_core::read_bytes(id).unwrap();
///         assert_eq!(&bytes[4..8], &2.0f32.to_le_bytes());
///         kiln_core::dec_ref(id);
///     }
///     Err(why) => println!("copied instead: {why}"),
/// }
/// ```
pub fn from_foreign(
    ty: VarType,
    len: usize,
    mem: Box<dyn alloc::ForeignMemory>,
) -> std::result::Result<VarId, &'static str> {
    if freeze::in_recording() {
        // (a recording keeps what is made inside it as uploaded data; a replay could not bind
        // memory that another library may have freed or changed by then)
        return Err("it is made inside a frozen function's recording, which keeps a copy");
    }
    let buf = Buffer::foreign(ty, len, mem)?;
    // one name per byte: a recording tells inputs apart by buffer address, so a second array
    // over the same memory (the same NumPy array shared twice, a view of it, a kiln buffer seen
    // through DLPack) would be read as the first
    // through DLPack) would be read as the first. The same memory read as the same array is
    // that array again; any other overlap is refused (the caller copies).
    let at = buf.ptr() as usize;
    let mut st = STATE.lock();
    let verdict = match st.overlapping_buffer(at, at + buf.bytes()) {
        None => {
            drop(st);
            return Ok(data_var(ty, buf));
        }
        Some(id) if same_memory(st.var(id), ty, len, at) => {
            st.inc_ext(id);
            Ok(VarId(id))
        }
        Some(_) => Err(
            "another kiln array already reads part of this memory (a view of it, or a kiln buffer seen through DLPack)",
        ),
    };
    drop(st);
    drop(buf);
    registry::release_deferred_owners();
    verdict
}

/// Whether `v` is a foreign buffer over exactly `len` elements of `ty` at `at`.
fn same_memory(v: &Var, ty: VarType, len: usize, at: usize) -> bool {
    v.ty == ty
        && v.size == len
        && v.data
            .as_ref()
            .is_some_and(|b| b.is_foreign() && b.ptr() as usize == at)
}

/// A new evaluated variable holding `bytes` (little-endian elements of `ty`).
pub fn from_bytes(ty: VarType, bytes: &[u8]) -> Result<VarId> {
    let buf = device::upload(ty, bytes)?;
    Ok(data_var(ty, buf))
}

/// A new evaluated variable holding a copy of `data` (one copy: a block copy for the primitive
/// element types).
///
/// ```
/// let a = kiln_core::from_scalars(&[1.5f32, 2.5]).unwrap();
/// assert_eq!(kiln_core::read_bytes(a).unwrap(), [1.5f32.to_le_bytes(), 2.5f32.to_le_bytes()].concat());
/// kiln_core::dec_ref(a);
/// ```
pub fn from_scalars<T: Scalar>(data: &[T]) -> Result<VarId> {
    let buf = device::upload_scalars(data)?;
    Ok(data_var(T::TYPE, buf))
}

/// A new evaluated variable of `len` elements written from `values` in one pass (host data that is
/// not contiguous: a strided view). Fewer values than `len` is an error.
///
/// ```
/// let a = kiln_core::from_iter_exact(3, (0..3u32).rev()).unwrap();
/// assert_eq!(kiln_core::read_bytes(a).unwrap(), [2u32, 1, 0].map(u32::to_le_bytes).concat());
/// kiln_core::dec_ref(a);
/// ```
pub fn from_iter_exact<T: Scalar>(
    len: usize,
    values: impl IntoIterator<Item = T>,
) -> Result<VarId> {
    let buf = device::upload_iter(len, values)?;
    Ok(data_var(T::TYPE, buf))
}

/// Inside a symbolic body: refuse a cross-lane request (see `control`) and return the placeholder
/// result `zeros` (a literal 0 of `ty` and `n` lanes) so that tracing goes on.
fn refuse_symbolic(id: VarId, how: &str, ty: VarType, n: usize) -> Option<VarId> {
    // an evaluated placeholder, not a literal: reading it later is refused too (and noted)
    let z =
        control::refuse(|| describe(id), how).then(|| match device::placeholder_zeros(ty, n) {
            Ok(buf) => data_var(ty, buf),
            Err(_) => literal(ty, 0, n),
        })?;
    inspect::note_refused(z, &[id]);
    Some(z)
}

/// Refuse a host read inside a frozen function's recording.
fn refuse_read(id: VarId, how: &str) -> Result<()> {
    if freeze::active() {
        return Err(freeze::record::refuse(Error::FrozenRead {
            label: describe(id),
            how: how.into(),
        }));
    }
    Ok(())
}

/// The address of `id`'s buffer, if it is evaluated: two arrays with the same address share one
/// buffer (tests of update-in-place ask this; nothing may be read or written through it).
///
/// ```
/// let a = kiln_core::from_bytes(kiln_core::VarType::U32, &[1, 0, 0, 0]).unwrap();
/// assert!(kiln_core::buffer_addr(a).is_some());
/// kiln_core::dec_ref(a);
/// ```
pub fn buffer_addr(id: VarId) -> Option<usize> {
    let st = STATE.lock();
    st.var(id.0).data.as_ref().map(|b| b.ptr() as usize)
}

/// Rearrange the elements of `id` in place (a transpose or a flip; see [`device::Permutation`])
/// when nothing but its one handle can see its buffer: evaluated, no clone, no view, no pending
/// expression reading it, not a value from before a frozen function's recording (a recording
/// has no such op; it gets the lazy view instead). Returns whether it did; the caller falls back
/// to an out-of-place view otherwise, so nobody else ever sees the old buffer change.
///
/// ```
/// use kiln_core::{device::Permutation, VarType};
/// let bytes: Vec<u8> = (1u32..=6).flat_map(|v| v.to_le_bytes()).collect();
/// let a = kiln_core::from_bytes(VarType::U32, &bytes).unwrap();
/// let done = kiln_core::permute_in_place(a, Permutation::Transpose { rows: 2, cols: 3 }).unwrap();
/// assert!(done);
/// let want: Vec<u8> = [1u32, 4, 2, 5, 3, 6].iter().flat_map(|v| v.to_le_bytes()).collect();
/// assert_eq!(kiln_core::read_bytes(a).unwrap(), want);
/// kiln_core::dec_ref(a);
/// ```
pub fn permute_in_place(id: VarId, p: device::Permutation) -> Result<bool> {
    let why_not = |st: &registry::State| -> Option<&'static str> {
        let v = st.var(id.0);
        if !inplace::enabled() {
            Some("KILN_INPLACE=0")
        } else if !v.is_evaluated() {
            Some("it is not evaluated (the lazy view fuses instead)")
        } else if p.elements() != Some(v.size) {
            Some("the permutation's shape does not match its length")
        } else if let Some(why) = not_sole_owner(v) {
            Some(why)
        } else if freeze::record::active() {
            Some("a frozen function is being recorded (it records the out-of-place view)")
        } else if control::symbolic() {
            Some("a symbolic body is being traced")
        } else {
            None
        }
    };
    let buf = {
        let st = STATE.lock();
        if let Some(why) = why_not(&st) {
            inplace::note_declined_permutation(&|| st.label_of(id.0), why);
            return Ok(false);
        }
        let buf = st.var(id.0).data.clone().expect("evaluated");
        inplace::note_reuse(
            &|| st.label_of(id.0),
            &|| format!("its {p:?}"),
            buf.bytes() as u64,
        );
        buf
    };
    // (the one handle is the caller's, held for the whole call: nothing else can reach the
    // buffer while it is rearranged)
    device::permute_in_place(&buf, p);
    Ok(true)
}

/// Whether `id` is evaluated and its buffer is reachable through exactly one handle: writing into
/// it then changes nothing anyone else can see (what update-in-place needs).
pub fn sole_owner(id: VarId) -> bool {
    let st = STATE.lock();
    let v = st.var(id.0);
    v.ext == 1 && v.is_evaluated() && not_sole_owner(v).is_none()
}

/// Why an evaluated variable's buffer is visible through more than its one handle (`None`: it
/// is not): the rule of [`sole_owner`] and of the in-place permutations, with its reason.
fn not_sole_owner(v: &Var) -> Option<&'static str> {
    if v.ext > 1 {
        Some("another handle is alive")
    } else if v.int > 0 {
        Some("a pending expression still reads it")
    } else if v.dirty {
        Some("a pending scatter writes into it")
    } else if v
        .data
        .as_ref()
        .is_some_and(|b| crate::registry::holders(b) > 1)
    {
        Some("a view or another array shares its buffer")
    } else {
        None
    }
}

/// An evaluated array of `len` elements whose contents are unspecified (what its memory last
/// held). For outputs whose every exposed element is written before anyone reads it (the rows a
/// scan stores), where zero-filling first would double the memory traffic.
pub fn uninit(ty: VarType, len: usize) -> Result<VarId> {
    let buf = device::alloc(ty, len, &|| format!("an array of {len} {ty} elements"))?;
    Ok(data_var(ty, buf))
}

/// Evaluate (if needed) and copy the contents out as little-endian bytes.
pub fn read_bytes(id: VarId) -> Result<Vec<u8>> {
    log::init_from_env();
    if control::refuse(|| describe(id), "reading its contents") {
        let (n, width) = (size(id), var_type(id).size_bytes());
        let bytes = n.checked_mul(width).ok_or_else(|| Error::OutOfMemory {
            bytes: n as u128 * width as u128,
            what: format!("the placeholder contents of {}", describe(id)),
        })?;
        return Ok(vec![0; bytes]);
    }
    refuse_read(id, "reading its contents")?;
    eval(&[id])?;
    let buf = evaluated_buffer(id)?;
    let bytes = device::read(&buf);
    // a loop that stopped at its iteration limit since the last read reports here
    if let Some(e) = stats::take_truncation_error() {
        return Err(e);
    }
    Ok(bytes)
}

fn evaluated_buffer(id: VarId) -> Result<Arc<Buffer>> {
    eval(&[id])?;
    let st = STATE.lock();
    st.var(id.0)
        .data
        .clone()
        .ok_or_else(|| Error::Invalid(format!("{} could not be evaluated", st.label_of(id.0))))
}

/// Reduce all of `id`'s elements to a size-1 variable, lazily: the result is a pending
/// reduction that is evaluated when anything is next evaluated (`eval`, a read, a kernel that
/// uses it), together with every other pending reduction, sibling reductions over one size in
/// one pass (see `schedule::resolve_reductions`).
///
/// An unevaluated `id` is reduced as its kernel produces it (one fused launch; the full-size array is
/// never written) and stays unevaluated; an evaluated one is reduced from its buffer. A stencil's
/// output is evaluated first instead (its split launch reads the interior with plain loads).
/// Inside a symbolic body (a loop or branch being traced) a reduction is refused as before.
pub fn reduce(op: ReduceOp, id: VarId) -> Result<VarId> {
    if let Some(z) = refuse_symbolic(id, "a reduction", var_type(id), 1) {
        return Ok(z);
    }
    // pending scatters run now, as they did when reductions were eager: the reduction sees
    // them, and no pending scatter is ever older than a pending reduction (so the scheduler can
    // resolve reductions before the scatters, which may read them)
    if STATE.lock().has_runnable_effects() {
        schedule::eval_side_effects()?;
    }
    let mut st = STATE.lock();
    let ty = st.var(id.0).ty;
    let mut v = registry::Var::new(Op::Reduce(op), ty, 1);
    v.deps = [id.0, 0, 0, 0];
    let r = st.insert(v);
    st.pending_reductions.push(r);
    Ok(VarId(r))
}

/// Evaluate `id` and reduce it, returning the result's bits on the host (for `Bool` + `Add`: the
/// number of true lanes).
pub fn reduce_to_host(op: ReduceOp, id: VarId) -> Result<u64> {
    if control::refuse(|| describe(id), "reducing it to a host value") {
        return Ok(0);
    }
    refuse_read(id, "reducing it to a host value")?;
    if let Some((_, bits)) = schedule::reduce_fused(op, id)? {
        return Ok(bits);
    }
    let buf = evaluated_buffer(id)?;
    Ok(device::reduce_bits(op, &buf))
}

/// Reduce consecutive blocks of `block` elements (a partial last block too).
pub fn block_reduce(op: ReduceOp, id: VarId, block: usize) -> Result<VarId> {
    if block == 0 {
        return Err(Error::Invalid(format!(
            "block_reduce of {}: the block size must be at least 1",
            describe(id)
        )));
    }
    let ty = var_type(id);
    if let Some(z) = refuse_symbolic(id, "a block reduction", ty, size(id).div_ceil(block)) {
        return Ok(z);
    }
    // an unevaluated input is produced and reduced piece by piece, never stored
    if let Some(out) = schedule::block_reduce_fused(op, id, block)? {
        return Ok(data_var(ty, out));
    }
    let buf = evaluated_buffer(id)?;
    let out = device::block_reduce(op, &buf, block)?;
    Ok(data_var(ty, out))
}

/// Inclusive or exclusive prefix sum.
pub fn prefix_sum(id: VarId, exclusive: bool) -> Result<VarId> {
    if let Some(z) = refuse_symbolic(id, "a prefix sum", var_type(id), size(id)) {
        return Ok(z);
    }
    let buf = evaluated_buffer(id)?;
    let ty = buf.ty();
    let out = device::prefix_sum(&buf, exclusive)?;
    Ok(data_var(ty, out))
}

/// The row-major product of `a` (`m × k`) and `b` (`k × n`), both f32 or both f64.
pub fn matmul(a: VarId, b: VarId, m: usize, k: usize, n: usize) -> Result<VarId> {
    matmul_t(a, b, m, k, n, device::Trans::default())
}

/// [`matmul`] with operands stored transposed where `trans` says: `trans.a`, `a` holds the
/// `[m, k]` operand as `[k, m]`; `trans.b`, `b` holds `[k, n]` as `[n, k]` (no copy is made).
///
/// ```
/// // [[1, 2], [3, 4]] · [[5, 6], [7, 8]] with the first operand stored as its transpose
/// let at = kiln_core::from_scalars(&[1.0f64, 3.0, 2.0, 4.0]).unwrap();
/// let b = kiln_core::from_scalars(&[5.0f64, 6.0, 7.0, 8.0]).unwrap();
/// let t = kiln_core::Trans { a: true, b: false };
/// let c = kiln_core::matmul_t(at, b, 2, 2, 2, t).unwrap();
/// let want: Vec<u8> = [19.0f64, 22.0, 43.0, 50.0].iter().flat_map(|v| v.to_le_bytes()).collect();
/// assert_eq!(kiln_core::read_bytes(c).unwrap(), want);
/// for id in [at, b, c] { kiln_core::dec_ref(id); }
/// ```
pub fn matmul_t(
    a: VarId,
    b: VarId,
    m: usize,
    k: usize,
    n: usize,
    trans: device::Trans,
) -> Result<VarId> {
    let (ta, tb) = (var_type(a), var_type(b));
    if ta != tb || !ta.is_float() {
        return Err(Error::Type {
            op: "matmul".into(),
            ty: if ta.is_float() { tb } else { ta },
            label: describe(if ta.is_float() { b } else { a }),
            hint: "matmul multiplies f32 or f64 matrices of one type; cast the operands".into(),
        });
    }
    let (sa, sb) = (size(a), size(b));
    if m.checked_mul(n).is_none() {
        return Err(Error::Invalid(format!(
            "matmul of [{m}, {k}] × [{k}, {n}]: the product has more elements than fit in memory"
        )));
    }
    // compared as sizes: inside a frozen function an operand's length may be a count known only
    // as the replay runs (lanes an evaluated branch compressed), and the replay must check it too
    let fits = |id: VarId, rows: usize, cols: usize| {
        rows.checked_mul(cols)
            .is_some_and(|e| freeze::size_of(id).same_as(e))
    };
    let (fa, fb) = (fits(a, m, k), fits(b, k, n));
    if !fa || !fb {
        return Err(Error::Invalid(format!(
            "matmul of [{m}, {k}] × [{k}, {n}]: {} has {sa} elements and {} has {sb}",
            describe(a),
            describe(b)
        )));
    }
    if let Some(z) = refuse_symbolic(a, "a matrix product", ta, m * n) {
        inspect::note_refused(z, &[a, b]);
        return Ok(z);
    }
    let (ba, bb) = (evaluated_buffer(a)?, evaluated_buffer(b)?);
    let out = device::matmul(&ba, &bb, m, k, n, trans)?;
    Ok(data_var(ta, out))
}

/// Indices (u32) of the true lanes of a mask.
pub fn compress(id: VarId) -> Result<VarId> {
    if let Some(z) = refuse_symbolic(id, "compress", VarType::U32, 0) {
        return Ok(z);
    }
    let buf = evaluated_buffer(id)?;
    let out = device::compress(&buf)?;
    Ok(data_var(VarType::U32, out))
}

/// Evaluate `id` into a buffer of its own, so that changing a literal's value does not recompile
/// kernels that use it. A literal is evaluated in place (it stops being shared with other uses of
/// the same constant); returns a new reference to the evaluated variable.
pub fn make_opaque(id: VarId) -> Result<VarId> {
    // a literal's value is baked into kernels: take it out of the CSE table and give it a buffer
    if control::refuse(|| describe(id), "make_opaque") {
        inc_ref(id);
        return Ok(id);
    }
    STATE.lock().uncse(id.0);
    eval(&[id])?;
    inc_ref(id);
    Ok(id)
}

/// Wait for all launched work (launches are synchronous today, so this only flushes side effects).
pub fn sync() -> Result<()> {
    let r = schedule::eval_side_effects();
    registry::release_deferred_owners();
    r
}

/// Release cached memory to the system.
pub fn trim() {
    alloc::trim();
}

/// A snapshot of the engine's counters.
pub fn stats() -> Stats {
    let alive = STATE.lock().alive as u64;
    stats::snapshot(alive)
}
