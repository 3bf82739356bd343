//! Variable creation: the only way new variables enter the registry.
//!
//! Each function checks its operands (types, sizes: equal or 1 = broadcast), simplifies where the
//! result is known without running anything (constant folding of literals, `x + 0`, `x * 1`, `select`
//! on a literal mask, double negation), and otherwise records a new variable (CSE happens in the
//! registry). A variable whose pending scatter has not run yet (`dirty`) is flushed by an eval
//! before anyone reads it. Nothing here computes on buffers.

use crate::context;
use crate::error::{Error, Result};
use crate::op::{self, Op, ReduceOp};
use crate::registry::{State, Var, VarId, STATE};
use crate::size::Size;
use crate::ty::VarType;
use parking_lot::MutexGuard;

/// Log one traced op like the seed's `cuda_trace_append(11 <- 10, 10)`.
fn log_append(st: &State, id: u32) {
    if tracing::enabled!(target: "kiln::trace", tracing::Level::TRACE) {
        let v = st.var(id);
        let deps: Vec<String> = v.dep_ids().map(|d| d.to_string()).collect();
        let arrow = if deps.is_empty() {
            String::new()
        } else {
            format!(" <- {}", deps.join(", "))
        };
        tracing::trace!(target: "kiln::trace", "trace_append({id}{arrow}): {}.{} size={}", v.op, v.ty, v.size);
    }
}

/// Lock the registry, first running pending scatters if any of `ids` is dirty.
pub(crate) fn lock_clean(ids: &[u32]) -> Result<MutexGuard<'static, State>> {
    crate::log::init_from_env();
    loop {
        let mut st = STATE.lock();
        if !ids.iter().any(|&i| i != 0 && st.var(i).dirty) {
            return Ok(st);
        }
        let dirty: Vec<u32> = ids
            .iter()
            .copied()
            .filter(|&i| i != 0 && st.var(i).dirty)
            .collect();
        if !crate::control::symbolic() && !st.pending_writes(&dirty) {
            // nothing pending can write these any more (a discarded trace's scatters)
            for &i in &dirty {
                st.var_mut(i).dirty = false;
            }
            return Ok(st);
        }
        if crate::control::refuse(
            || "an array scattered to in the same body".into(),
            "reading an array that the body also writes",
        ) {
            return Ok(st);
        }
        // (another thread's scatter into an array handed to this one runs here, for its reader)
        let mine = st.has_runnable_effects();
        if st.adopt_effects(&dirty) == 0 && !mine {
            let label = st.label_of(dirty[0]);
            return Err(Error::Invalid(format!(
                "{label} has a pending scatter that another thread is tracing inside a loop, \
                 branch or scan body; read it after that thread's body trace has ended"
            )));
        }
        drop(st);
        crate::schedule::eval_side_effects()?;
    }
}

/// A size-`size` literal of type `ty` with bits `bits` (masked to the type's width). `size` is a
/// plain count or a [`Size`] (which, inside a frozen function, follows the inputs' sizes).
pub fn literal(ty: VarType, bits: u64, size: impl Into<Size>) -> VarId {
    crate::log::init_from_env();
    let size = size.into();
    let mut st = STATE.lock();
    literal_locked(&mut st, ty, bits, size.value, size.live_expr())
}

fn literal_locked(st: &mut State, ty: VarType, bits: u64, size: usize, sym: u32) -> VarId {
    let mut v = Var::new(Op::Literal, ty, size);
    v.sym = sym;
    v.literal = bits & ty.bit_mask();
    let id = st.insert(v);
    log_append(st, id);
    VarId(id)
}

/// The lane index `0..size` as type `ty` (an integer type).
pub fn counter(ty: VarType, size: impl Into<Size>) -> Result<VarId> {
    let size = size.into();
    let sym = size.live_expr();
    let size = size.value;
    if !ty.is_int() {
        return Err(type_error(
            "arange/counter",
            ty,
            "index",
            "use an integer type and cast the result",
        ));
    }
    // a one-lane counter is the literal 0, unless its size follows a frozen function's inputs
    if size == 1 && sym == 0 {
        return Ok(literal(ty, 0, 1));
    }
    let mut st = STATE.lock();
    let mut v = Var::new(Op::Counter, ty, size);
    v.sym = sym;
    let id = st.insert(v);
    log_append(&st, id);
    Ok(VarId(id))
}

fn type_error(op: &str, ty: VarType, label: &str, hint: &str) -> Error {
    Error::Type {
        op: op.into(),
        ty,
        label: label.into(),
        hint: hint.into(),
    }
}

/// Result size of an op over operands of the given sizes (and, while recording a frozen function,
/// its expression), or a size-mismatch error.
fn result_size(st: &State, op: Op, ids: &[u32]) -> Result<(usize, u32)> {
    let size = plain_result_size(st, op, ids)?;
    let sym = if context::recording() {
        let operands: Vec<(u32, usize)> = ids
            .iter()
            .map(|&i| (st.var(i).sym, st.var(i).size))
            .collect();
        context::result_sym(&operands, size)
    } else {
        0
    };
    Ok((size, sym))
}

fn plain_result_size(st: &State, op: Op, ids: &[u32]) -> Result<usize> {
    let mut size = 1usize;
    let mut first_big: Option<u32> = None;
    for &i in ids {
        let s = st.var(i).size;
        if s == 1 {
            continue;
        }
        match first_big {
            None => {
                first_big = Some(i);
                size = s;
            }
            Some(f) if s != size => {
                return Err(Error::SizeMismatch {
                    op: op.name().into(),
                    lhs: st.label_of(f),
                    lhs_size: size,
                    rhs: st.label_of(i),
                    rhs_size: s,
                })
            }
            _ => {}
        }
    }
    // size 0 with a broadcast operand stays 0
    if ids.iter().any(|&i| st.var(i).size == 0) {
        return Ok(0);
    }
    Ok(size)
}

fn check_types(st: &State, op: Op, ids: &[u32]) -> Result<VarType> {
    let t = |k: usize| st.var(ids[k]).ty;
    let bad = |k: usize, hint: &str| Err(type_error(op.name(), t(k), &st.label_of(ids[k]), hint));
    match op {
        Op::Select => {
            if t(0) != VarType::Bool {
                return bad(
                    0,
                    "the mask of `select` must be a Bool array (use a comparison)",
                );
            }
            if t(1) != t(2) {
                return bad(
                    2,
                    &format!(
                        "both branches of `select` need the same type ({} here); cast one",
                        t(1)
                    ),
                );
            }
            Ok(t(1))
        }
        _ => {
            for k in 1..ids.len() {
                if t(k) != t(0) {
                    return bad(
                        k,
                        &format!(
                            "operands must have the same type ({} and {}); cast one with `cast`",
                            t(0),
                            t(k)
                        ),
                    );
                }
            }
            let ty = t(0);
            if ty.is_bool() && matches!(op, Op::Div | Op::Rem) {
                return bad(
                    0,
                    "masks do not support division; cast to an integer type first",
                );
            }
            let float_only = matches!(op, Op::Sqrt | Op::Floor | Op::Ceil | Op::Round | Op::Trunc);
            let int_only = matches!(op, Op::Rem | Op::Shl | Op::Shr);
            if float_only && !ty.is_float() {
                return bad(
                    0,
                    "this op needs a floating-point array; cast to f32/f64 first",
                );
            }
            if int_only && !ty.is_int() {
                return bad(0, "this op needs an integer array");
            }
            if op.is_comparison() {
                Ok(VarType::Bool)
            } else {
                Ok(ty)
            }
        }
    }
}

/// Apply a pure arithmetic/logic op (unary, binary, `Fma`, `Select`) to operands. Any other op,
/// or a wrong number of operands, is an error naming the op and the function that creates it.
pub fn op(op: Op, args: &[VarId]) -> Result<VarId> {
    if let Some(instead) = not_by_op(op) {
        return Err(Error::Invalid(format!(
            "`{}` cannot be created with `op`, which applies pure arithmetic and logic ops (unary, binary, `fma`, `select`); use {instead}",
            op.name()
        )));
    }
    if args.len() != op.arity() {
        return Err(Error::Invalid(format!(
            "`{}` takes {}, {} given; pass exactly that many operand ids",
            op.name(),
            operands(op.arity()),
            args.len()
        )));
    }
    let ids: Vec<u32> = args.iter().map(|a| a.0).collect();
    let mut st = lock_clean(&ids)?;
    let ty = check_types(&st, op, &ids)?;
    let (size, sym) = result_size(&st, op, &ids)?;
    if let Some(r) = simplify(&mut st, op, ty, size, sym, &ids) {
        return Ok(r);
    }
    let mut v = Var::new(op, ty, size);
    v.sym = sym;
    v.deps[..ids.len()].copy_from_slice(&ids);
    let id = st.insert(v);
    log_append(&st, id);
    Ok(VarId(id))
}

/// "1 operand", "2 operands".
fn operands(n: usize) -> String {
    if n == 1 {
        "1 operand".into()
    } else {
        format!("{n} operands")
    }
}

/// For an op that [`op`] does not create, the function that does (`None`: [`op`] creates it).
fn not_by_op(op: Op) -> Option<&'static str> {
    match op {
        Op::Literal => Some("`literal`"),
        Op::Counter => Some("`counter`"),
        Op::Cast | Op::Bitcast => Some("`convert`"),
        Op::Data => Some("`from_bytes`"),
        Op::Gather => Some("`gather` or `gather_view`"),
        Op::Scatter(_) => Some("`scatter`"),
        Op::Tap | Op::Split => Some("`stencil_node`"),
        Op::Load | Op::Store => Some("evaluation: loads and stores exist only inside kernels"),
        _ if !op.is_pure() => Some("the control-flow API (`control`), which traces regions"),
        _ => None,
    }
}

/// Try to replace `op(ids)` by something already known. Returns a new external reference.
fn simplify(
    st: &mut State,
    op: Op,
    ty: VarType,
    size: usize,
    sym: u32,
    ids: &[u32],
) -> Option<VarId> {
    let lit = |k: usize| {
        let v = st.var(ids[k]);
        v.is_literal().then_some(v.literal)
    };
    // constant folding
    if ids.iter().all(|&i| st.var(i).is_literal()) {
        let ot = st.var(ids[0]).ty;
        let bits = match op.arity() {
            1 => op::eval_unary(op, ty, ot, lit(0)?),
            2 => op::eval_binary(op, ot, lit(0)?, lit(1)?),
            _ => op::eval_ternary(op, ty, lit(0)?, lit(1)?, lit(2)?),
        };
        return Some(literal_locked(st, ty, bits, size, sym));
    }
    let keep = |st: &mut State, k: usize| -> Option<VarId> {
        if st.var(ids[k]).size == size {
            st.inc_ext(ids[k]);
            Some(VarId(ids[k]))
        } else {
            None
        }
    };
    let is = |k: usize, v: f64| -> bool {
        match lit(k) {
            None => false,
            Some(b) => match ty {
                VarType::F32 => {
                    f32::from_bits(b as u32) as f64 == v
                        && (v != 0.0 || (b as u32) >> 31 == (v.is_sign_negative() as u32))
                }
                VarType::F64 => {
                    f64::from_bits(b) == v && (v != 0.0 || (b >> 63) == v.is_sign_negative() as u64)
                }
                VarType::Bool => false,
                _ => b == v as i64 as u64 & ty.bit_mask(),
            },
        }
    };
    match op {
        // x + 0 (ints) and x + (-0.0) (floats) are exact identities
        Op::Add if !ty.is_bool() => {
            let zero = if ty.is_float() { -0.0 } else { 0.0 };
            if is(1, zero) {
                return keep(st, 0);
            }
            if is(0, zero) {
                return keep(st, 1);
            }
        }
        Op::Sub if !ty.is_bool() && is(1, 0.0) => return keep(st, 0),
        // unsigned division and remainder by a power of two are a shift and a mask (index math of
        // tensor views divides by dimensions; the backends have no vector integer division)
        Op::Div | Op::Rem if matches!(ty, VarType::U32 | VarType::U64) => {
            if let Some(d) = lit(1).filter(|d| d.is_power_of_two()) {
                let (op2, bits) = if op == Op::Div {
                    (Op::Shr, d.trailing_zeros() as u64)
                } else {
                    (Op::And, d - 1)
                };
                let c = literal_locked(st, ty, bits, 1, 0);
                let mut v = Var::new(op2, ty, size);
                v.sym = sym;
                v.deps[0] = ids[0];
                v.deps[1] = c.0;
                let id = st.insert(v);
                // the new variable holds the constant; drop the handle `literal_locked` gave
                let mut garbage = Vec::new();
                st.dec_ext(c.0, &mut garbage);
                log_append(st, id);
                return Some(VarId(id));
            }
        }
        Op::Mul if !ty.is_bool() => {
            if is(1, 1.0) {
                return keep(st, 0);
            }
            if is(0, 1.0) {
                return keep(st, 1);
            }
            // x * 0 == 0 for integers (not for floats: NaN * 0 and inf * 0 are NaN)
            if ty.is_int() && (is(0, 0.0) || is(1, 0.0)) {
                return Some(literal_locked(st, ty, 0, size, sym));
            }
            // integer multiplication by a power of two is a shift (the same bits, wrapping too)
            if ty.is_int() {
                for (k, other) in [(1usize, 0usize), (0, 1)] {
                    let Some(d) = lit(k).filter(|d| d.is_power_of_two() && *d > 1) else {
                        continue;
                    };
                    if st.var(ids[other]).size != size {
                        break;
                    }
                    let c = literal_locked(st, ty, d.trailing_zeros() as u64, 1, 0);
                    let mut v = Var::new(Op::Shl, ty, size);
                    v.sym = sym;
                    v.deps[0] = ids[other];
                    v.deps[1] = c.0;
                    let id = st.insert(v);
                    let mut garbage = Vec::new();
                    st.dec_ext(c.0, &mut garbage);
                    log_append(st, id);
                    return Some(VarId(id));
                }
            }
        }
        Op::And | Op::Or | Op::Xor if !ty.is_float() => {
            let zero = |k: usize| lit(k) == Some(0);
            if op != Op::And && zero(1) {
                return keep(st, 0);
            }
            if op != Op::And && zero(0) {
                return keep(st, 1);
            }
            if op == Op::And && (zero(0) || zero(1)) {
                return Some(literal_locked(st, ty, 0, size, sym));
            }
        }
        Op::Select => {
            if let Some(m) = lit(0) {
                return keep(st, if m & 1 != 0 { 1 } else { 2 });
            }
            if ids[1] == ids[2] {
                return keep(st, 1);
            }
        }
        Op::Neg | Op::Not => {
            let inner = st.var(ids[0]);
            if inner.op == op && !inner.is_evaluated() {
                let x = inner.deps[0];
                if st.var(x).size == size {
                    st.inc_ext(x);
                    return Some(VarId(x));
                }
            }
        }
        _ => {}
    }
    None
}

/// Convert values to type `to` (`Op::Cast`) or reinterpret their bits (`Op::Bitcast`).
pub fn convert(op: Op, a: VarId, to: VarType) -> Result<VarId> {
    if !matches!(op, Op::Cast | Op::Bitcast) {
        return Err(Error::Invalid(format!(
            "`convert` takes `Op::Cast` or `Op::Bitcast`, not `{}`; use `op` for arithmetic",
            op.name()
        )));
    }
    let mut st = lock_clean(&[a.0])?;
    let v = st.var(a.0);
    let (from, size, sym) = (v.ty, v.size, v.sym);
    if from == to {
        st.inc_ext(a.0);
        return Ok(a);
    }
    if op == Op::Bitcast && (from.size_bytes() != to.size_bytes() || from.is_bool() || to.is_bool())
    {
        return Err(type_error(
            "bitcast",
            from,
            &st.label_of(a.0),
            &format!("bitcast needs types of equal width; {from} → {to} changes it, use `cast`"),
        ));
    }
    if v.is_literal() {
        let bits = op::eval_unary(op, to, from, v.literal);
        return Ok(literal_locked(&mut st, to, bits, size, sym));
    }
    let mut nv = Var::new(op, to, size);
    nv.sym = sym;
    nv.deps[0] = a.0;
    let id = st.insert(nv);
    log_append(&st, id);
    Ok(VarId(id))
}

/// `source[index]` where `mask` holds (else 0). Evaluates `source` first (the seed's rule: a gather
/// from an unevaluated array is not elementwise).
pub fn gather(source: VarId, index: VarId, mask: VarId) -> Result<VarId> {
    crate::schedule::eval(&[source])?;
    gather_traced(source, index, mask)
}

/// A *view*: like [`gather`], but an unevaluated `source` is not evaluated first: the consumer's
/// kernel recomputes it at the gathered indices (no intermediate array). Right for permutations,
/// slices and broadcasts, where each element is read about once; a source gathered many times over
/// is cheaper evaluated ([`gather`]). Evaluated sources behave exactly as in `gather`. Inside a
/// frozen function's recording, a source whose size follows the inputs is evaluated first (the
/// recomputed bounds check would bake its size in).
pub fn gather_view(source: VarId, index: VarId, mask: VarId) -> Result<VarId> {
    let (lazy, sym, recomputable) = {
        let st = lock_clean(&[source.0])?;
        let v = st.var(source.0);
        (
            !v.is_evaluated(),
            v.sym,
            recomputable_at_other_lanes(&st, source.0),
        )
    };
    if lazy && sym == 0 && recomputable {
        tracing::debug!(target: "kiln::schedule", "view of r{}: recomputed at the gathered indices in the consumer's kernel", source.0);
    } else {
        if lazy {
            tracing::debug!(target: "kiln::schedule", "view of r{}: evaluated first (its size follows a frozen function's inputs)", source.0);
        }
        crate::schedule::eval(&[source])?;
    }
    gather_traced(source, index, mask)
}

/// Whether the unevaluated expression of `id` can be recomputed at other lanes inside a consumer's
/// kernel: pure ops, gathers and stencil nodes only (a loop's or branch's output, a reduction, a
/// scatter's result cannot be: they are evaluated first). Bounded: a larger expression counts as
/// not recomputable, which only costs an evaluation.
fn recomputable_at_other_lanes(st: &State, id: u32) -> bool {
    let mut seen = crate::registry::FxSet::default();
    let mut stack = vec![id];
    while let Some(i) = stack.pop() {
        let v = st.var(i);
        if v.is_evaluated() || v.is_literal() || !seen.insert(i) {
            continue;
        }
        let ok = v.region.is_none()
            && (v.op.is_pure() || matches!(v.op, Op::Gather | Op::Tap | Op::Split));
        if !ok || seen.len() > 512 {
            return false;
        }
        stack.extend(v.dep_ids());
    }
    true
}

/// The bits of a gather that only repeats one constant: the source a one-element literal, the
/// index the literal 0 and the mask the literal `true`. That is how a number becomes a tensor's
/// operand (a 0-d tensor broadcast to the other's shape), and folding it to a literal lets the
/// constant reach the kernel as one, as `tensor * 0.5` from Rust does, instead of a masked
/// select at every lane (inside a loop, at every iteration).
fn repeated_literal(st: &State, source: VarId, index: VarId, mask: VarId) -> Option<u64> {
    let (s, i, m) = (st.var(source.0), st.var(index.0), st.var(mask.0));
    // (a source of symbolic size could hold no element on a frozen replay: not folded)
    let constant = s.is_literal() && s.size == 1 && s.sym == 0 && i.is_literal() && m.is_literal();
    (constant && i.literal == 0 && m.literal != 0).then_some(s.literal)
}

fn gather_traced(source: VarId, index: VarId, mask: VarId) -> Result<VarId> {
    let mut st = lock_clean(&[source.0, index.0, mask.0])?;
    let (it, mt) = (st.var(index.0).ty, st.var(mask.0).ty);
    if !it.is_int() {
        return Err(type_error(
            "gather",
            it,
            &st.label_of(index.0),
            "indices must be an integer array",
        ));
    }
    if mt != VarType::Bool {
        return Err(type_error(
            "gather",
            mt,
            &st.label_of(mask.0),
            "the mask must be a Bool array",
        ));
    }
    let (size, sym) = result_size(&st, Op::Gather, &[index.0, mask.0])?;
    let ty = st.var(source.0).ty;
    if st.var(mask.0).is_literal() && st.var(mask.0).literal == 0 {
        return Ok(literal_locked(&mut st, ty, 0, size, sym));
    }
    if let Some(bits) = repeated_literal(&st, source, index, mask) {
        return Ok(literal_locked(&mut st, ty, bits, size, sym));
    }
    let mut v = Var::new(Op::Gather, ty, size);
    v.sym = sym;
    v.deps[..3].copy_from_slice(&[source.0, index.0, mask.0]);
    let id = st.insert(v);
    log_append(&st, id);
    Ok(VarId(id))
}

/// `target[index] (op)= value` where `mask` holds. `target` is replaced by a handle to the written
/// buffer: if anyone else can still see the old contents (another handle, a pending expression, a
/// shared buffer), the buffer is copied first, so they keep the old values (copy-on-write).
pub fn scatter(
    target: &mut VarId,
    value: VarId,
    index: VarId,
    mask: VarId,
    rop: ReduceOp,
) -> Result<()> {
    let symbolic = crate::control::symbolic();
    if symbolic && !crate::is_evaluated(*target) {
        // a symbolic body cannot scatter into an array it computes: evaluated mode can
        let label = STATE.lock().label_of(target.0);
        crate::control::refuse(|| label, "scattering into an array the body computes");
        return Ok(());
    }
    if !crate::is_evaluated(*target) {
        // (other pending scatters stay pending: they fuse with this one when they share its size)
        crate::schedule::eval_leaving_effects(&[*target])?;
    }
    // a pending reduction of the target would see the scatter's writes, or force a copy
    crate::schedule::resolve_reductions(Some(&[]), &[target.0])?;
    // in a symbolic body, earlier scatters of the same body into the target stay pending: they
    // run before this one, in order, inside the region
    let mut st = if symbolic {
        lock_clean(&[value.0, index.0, mask.0])?
    } else {
        lock_clean(&[target.0, value.0, index.0, mask.0])?
    };
    let (tt, vt, it, mt) = (
        st.var(target.0).ty,
        st.var(value.0).ty,
        st.var(index.0).ty,
        st.var(mask.0).ty,
    );
    if vt != tt {
        return Err(type_error(
            "scatter",
            vt,
            &st.label_of(value.0),
            &format!("the values must have the target's type {tt}"),
        ));
    }
    if !it.is_int() {
        return Err(type_error(
            "scatter",
            it,
            &st.label_of(index.0),
            "indices must be an integer array",
        ));
    }
    if mt != VarType::Bool {
        return Err(type_error(
            "scatter",
            mt,
            &st.label_of(mask.0),
            "the mask must be a Bool array",
        ));
    }
    if rop != ReduceOp::None && tt.is_bool() && !matches!(rop, ReduceOp::And | ReduceOp::Or) {
        return Err(type_error(
            "scatter_reduce",
            tt,
            &st.label_of(target.0),
            "masks support only And/Or reductions",
        ));
    }
    let (size, sym) = result_size(&st, Op::Scatter(rop), &[value.0, index.0, mask.0])?;
    if sym != 0 {
        // an empty scatter is skipped: a replay must see the same emptiness
        context::guard_classes(&[(sym, size)]);
    }
    if size == 0 || (st.var(mask.0).is_literal() && st.var(mask.0).literal == 0) {
        return Ok(());
    }
    if symbolic && st.var(target.0).dirty {
        // a second scatter into one array in a symbolic trace: copy-on-write now would split the
        // two (the first's writes would go to the old buffer); evaluated mode orders them
        let label = st.label_of(target.0);
        drop(st);
        crate::control::refuse(|| label, "scattering twice into one array");
        return Ok(());
    }
    // copy-on-write: the target's buffer must be visible only through this handle
    let tv = st.var(target.0);
    let shared = tv.ext > 1
        || tv.int > 0
        || tv
            .data
            .as_ref()
            .map(|b| crate::registry::holders(b) > 1)
            .unwrap_or(false);
    {
        use crate::inplace::{note_declined, note_reuse, Declined};
        let what = || st.label_of(target.0);
        if !shared {
            let bytes = (tv.size * tt.size_bytes()) as u64;
            note_reuse(&what, &|| "a scatter".into(), bytes);
        } else if tv.ext > 1 {
            note_declined(&what, Declined::Handle);
        } else if tv.int > 0 {
            note_declined(&what, Declined::Pending);
        } else {
            note_declined(&what, Declined::SharedBuffer);
        }
    }
    if shared {
        let src = tv.data.clone().expect("scatter target was evaluated");
        let label = tv.label.clone();
        drop(st);
        let copy = crate::device::copy_buffer(&src)?;
        st = STATE.lock();
        let mut nv = Var::new(Op::Data, tt, src.len);
        nv.sym = context::buffer_sym(copy.ptr());
        nv.data = Some(std::sync::Arc::new(copy));
        nv.label = label;
        let nid = st.insert(nv);
        let mut garbage = Vec::new();
        st.dec_ext(target.0, &mut garbage);
        *target = VarId(nid);
        tracing::debug!(target: "kiln::schedule", "scatter into shared r{} → copied to r{nid} (copy-on-write)", target.0);
    }
    let mut v = Var::new(Op::Scatter(rop), tt, size);
    v.sym = sym;
    v.deps = [target.0, value.0, index.0, mask.0];
    let id = st.insert(v);
    // the side-effect list owns the scatter: turn its external reference into an internal one
    let sv = st.var_mut(id);
    sv.ext -= 1;
    sv.int += 1;
    st.push_effect(id, symbolic);
    st.var_mut(target.0).dirty = true;
    log_append(&st, id);
    Ok(())
}

/// Evaluated size-1 literal check helper for the front end: the literal bits, if `id` is a literal.
pub fn literal_value(id: VarId) -> Option<u64> {
    let st = STATE.lock();
    let v = st.var(id.0);
    v.is_literal().then_some(v.literal)
}

/// `id` as `x · c` with `c` a literal: `(x, c's bits)` when `id` is such a product (and not a
/// literal itself). A value read at other lanes can then be read as `x` there, scaled after.
pub fn scaled_operand(id: VarId) -> Option<(VarId, u64)> {
    let st = STATE.lock();
    let v = st.var(id.0);
    if v.op != Op::Mul || v.is_literal() || v.is_evaluated() {
        return None;
    }
    let d: Vec<u32> = v.dep_ids().collect();
    if d.len() != 2 {
        return None;
    }
    let (a, b) = (st.var(d[0]), st.var(d[1]));
    match (a.is_literal(), b.is_literal()) {
        (false, true) if a.ty == v.ty => Some((VarId(d[0]), b.literal)),
        (true, false) if b.ty == v.ty => Some((VarId(d[1]), a.literal)),
        _ => None,
    }
}

/// A stencil node (`Op::Tap` or `Op::Split`, see `stencil`): `a` is a tap's source or a split's
/// interior value, `general` the value at every lane (the node's meaning). Its type and size are
/// `general`'s; `a` must have the same size (and, for a split, the same type).
pub fn stencil_node(
    op: Op,
    a: VarId,
    general: VarId,
    meta: crate::stencil::StencilMeta,
) -> Result<VarId> {
    assert!(
        matches!(op, Op::Tap | Op::Split),
        "stencil_node takes Tap or Split"
    );
    let mut st = lock_clean(&[a.0, general.0])?;
    let (av, gv) = (st.var(a.0), st.var(general.0));
    let (ty, size, sym) = (gv.ty, gv.size, gv.sym);
    if av.size != size || av.ty != ty {
        return Err(Error::Invalid(format!(
            "kiln internal error: a stencil {op} joins {} × {} with {} × {}",
            av.size, av.ty, size, ty
        )));
    }
    let mut v = Var::new(op, ty, size);
    v.sym = sym;
    v.literal = meta.key();
    v.deps[..2].copy_from_slice(&[a.0, general.0]);
    let id = st.insert(v);
    st.stencil
        .entry(id)
        .or_insert_with(|| std::sync::Arc::new(meta));
    log_append(&st, id);
    Ok(VarId(id))
}
