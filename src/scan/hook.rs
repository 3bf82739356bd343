//! The matrix-product hook: while a scan body is traced, `Tensor::matmul` asks here first. In the
//! analysis trace it records each product's operands (so the rewrites can see which ones read a
//! sequence row and a loop-invariant matrix); in a stepped scan's step it substitutes what the
//! rewrites decided: a row of a product computed for all steps at once (PushOutDot1), or a
//! loop-invariant operand evaluated once before the loop.

use crate::tensor::Tensor;
use kiln_core::Handle;
use kiln_core::{Result, Scalar, VarId};
use std::cell::RefCell;

/// One product the analysis trace saw.
pub(crate) struct Seen {
    pub a: Handle,
    pub b: Handle,
    /// What the (refused) product returned in the trace.
    pub result: Handle,
    pub m: usize,
    pub k: usize,
    pub n: usize,
}

/// What to do with the `i`-th product of a step.
#[derive(Clone, Debug)]
pub(crate) enum Subst {
    /// Compute it as written.
    Keep,
    /// Read row `row` (an index, u32 or u64, size 1) of `all` (the product over every step),
    /// `m × n` elements per step.
    Row {
        all: VarId,
        row: VarId,
        m: usize,
        n: usize,
    },
    /// Use `b` (the right operand, evaluated once) instead of what the step computed.
    Operand { b: VarId },
    /// Not computed in the loop (it is computed after it, for all steps at once): zeros.
    Skip,
    /// Compute it as written and keep its result in the hook's `saved` (the stepped run stores
    /// it: a gradient scan reads it back).
    Save,
}

pub(crate) enum Hook {
    Analyze(Vec<Seen>),
    Step {
        subst: Vec<Subst>,
        next: usize,
        /// The products kept by [`Subst::Save`]: (product index, result).
        saved: Vec<(usize, Handle)>,
    },
}

thread_local! {
    /// A stack: scans nest (a scan in a scan's body).
    static HOOKS: RefCell<Vec<Hook>> = const { RefCell::new(Vec::new()) };
}

impl Hook {
    /// A hook that substitutes nothing: installed for the whole of a scan, so that the products
    /// of a scan nested in another's body never take the outer step's substitutions.
    pub(crate) fn neutral() -> Hook {
        Hook::Step {
            subst: Vec::new(),
            next: 0,
            saved: Vec::new(),
        }
    }
}

/// Holds a hook installed for as long as it lives.
pub(crate) struct Installed;

impl Installed {
    pub fn new(h: Hook) -> Installed {
        HOOKS.with(|s| s.borrow_mut().push(h));
        Installed
    }
    /// Remove the hook and return it.
    pub fn take(self) -> Hook {
        let h = HOOKS.with(|s| s.borrow_mut().pop()).expect("installed");
        std::mem::forget(self);
        h
    }
}

impl Drop for Installed {
    fn drop(&mut self) {
        // not taken: the body unwound; what the analysis saw holds references
        if let Some(Hook::Analyze(seen)) = HOOKS.with(|s| s.borrow_mut().pop()) {
            drop(seen);
        }
    }
}

/// Called by `Tensor::try_matmul` with the checked shapes: `Some` replaces the product.
pub(crate) fn matmul_hook<T: Scalar>(
    a: &Tensor<T>,
    b: &Tensor<T>,
    m: usize,
    k: usize,
    n: usize,
) -> Option<Result<Tensor<T>>> {
    enum Act {
        None,
        Analyze,
        Row(VarId, VarId, usize, usize),
        Operand(VarId),
        Skip,
        Save(usize),
    }
    let act = HOOKS.with(|s| {
        let mut s = s.borrow_mut();
        match s.last_mut() {
            Some(Hook::Analyze(_)) => Act::Analyze,
            Some(Hook::Step { subst, next, .. }) => {
                let i = *next;
                *next += 1;
                match subst.get(i) {
                    Some(Subst::Row { all, row, m, n }) => Act::Row(*all, *row, *m, *n),
                    Some(Subst::Operand { b }) => Act::Operand(*b),
                    Some(Subst::Skip) => Act::Skip,
                    Some(Subst::Save) => Act::Save(i),
                    _ => Act::None,
                }
            }
            None => Act::None,
        }
    });
    let wrap = |id: VarId| Tensor::from_array(crate::array::Array::from_id(id), &[m, n]);
    match act {
        Act::None => None,
        Act::Analyze => {
            // the product itself (refused in the symbolic trace: a placeholder that depends on
            // both operands), noted with its result
            let r = kiln_core::matmul(a.array().id(), b.array().id(), m, k, n);
            if let Ok(result) = r {
                HOOKS.with(|s| {
                    if let Some(Hook::Analyze(seen)) = s.borrow_mut().last_mut() {
                        seen.push(Seen {
                            a: Handle::borrow(a.array().id()),
                            b: Handle::borrow(b.array().id()),
                            result: Handle::borrow(result),
                            m,
                            k,
                            n,
                        });
                    }
                });
            }
            Some(r.map(wrap))
        }
        Act::Row(all, row, m, n) => Some(row_of(all, row, m * n).map(wrap)),
        // the hoisted operand replaces what the step traced (which is dropped unevaluated)
        Act::Operand(bid) => Some(kiln_core::matmul(a.array().id(), bid, m, k, n).map(wrap)),
        Act::Skip => Some(Ok(wrap(kiln_core::literal(T::TYPE, 0, m * n)))),
        Act::Save(i) => {
            let r = kiln_core::matmul(a.array().id(), b.array().id(), m, k, n);
            if let Ok(result) = r {
                HOOKS.with(|s| {
                    if let Some(Hook::Step { saved, .. }) = s.borrow_mut().last_mut() {
                        saved.push((i, Handle::borrow(result)));
                    }
                });
            }
            Some(r.map(wrap))
        }
    }
}

/// `len` elements of `all` from `row * len`: a view whose index is the lane counter plus a
/// uniform offset, which the backends turn into a vector load.
pub(crate) fn row_of(all: VarId, row: VarId, len: usize) -> Result<VarId> {
    let ity = kiln_core::var_type(row);
    let all_true = Handle::own(kiln_core::literal(kiln_core::VarType::Bool, 1, 1));
    if len == 1 {
        return kiln_core::gather(all, row, all_true.id());
    }
    // (each handle releases its variable on every path out, errors included)
    let len_lit = Handle::own(kiln_core::literal(ity, len as u64, 1));
    let base = Handle::own(kiln_core::op(kiln_core::Op::Mul, &[row, len_lit.id()])?);
    let lane = Handle::own(kiln_core::counter(ity, len)?);
    let idx = Handle::own(kiln_core::op(kiln_core::Op::Add, &[base.id(), lane.id()])?);
    kiln_core::gather(all, idx.id(), all_true.id())
}
