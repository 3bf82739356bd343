//! The lanes that run an evaluated body: a per-thread stack consulted by user-level scatters.
//!
//! A symbolic loop body, branch or call target is a region of one kernel, and a scatter in it
//! happens only for the lanes that run it. In *evaluated* mode the front end runs the body as
//! ordinary traced code: a loop replays its step with an `active` mask over all lanes, and a call
//! runs each target on its own lanes, compacted. So that side effects still happen only for the
//! lanes that run the body (as Dr.Jit does), the front end pushes a [`Frame`] describing those
//! lanes while the body runs ([`push_mask`], [`push_compact`]), and [`scatter`] combines its mask
//! with the top frame's:
//!
//! * a scatter over the frame's lanes (its size is the frame's) is ANDed with the frame's mask;
//! * a scatter of size 1 (a literal index and value) runs once per lane that runs the body, as in
//!   a symbolic region: it is broadcast to the frame's lanes and masked;
//! * inside a compacted body, a scatter over the *full* lane count (an index the body captured
//!   instead of taking it from its arguments) is ANDed with the full-size mask of the lanes that
//!   run, or gathered at them;
//! * any other size is an error naming both sizes: it cannot be told which of its elements
//!   belong to which lane.
//!
//! Frames hold references to their masks and lane lists and release them when popped (the
//! guards pop on drop, unwinding included). Kiln's own scatters (state write-back, call results)
//! use the unmasked [`crate::scatter`].

use crate::error::{Error, Result};
use crate::freeze::size_of;
use crate::op::{Op, ReduceOp};
use crate::registry::{VarId, STATE};
use crate::ty::VarType;
use std::cell::RefCell;

/// Another lane count a scatter inside a compacted body may have: the full count `size`, with
/// the frame's lanes as indices into it (`lanes`, one per frame lane) and, where known, the
/// full-size mask of the lanes that run the body.
struct Wide {
    size: usize,
    lanes: VarId,
    mask: Option<VarId>,
}

/// The lanes running an evaluated body.
struct Frame {
    /// How many lanes run the body (the body's arrays have this size).
    size: usize,
    /// A variable of `size` elements (its size expression sizes broadcast literals in a
    /// recording).
    like: VarId,
    /// Which of them run it (size `size` or 1); `None`: all.
    mask: Option<VarId>,
    wide: Vec<Wide>,
    /// Why scatters over some other size cannot be masked (a loop over full-size arrays inside a
    /// body compacted without a full-size mask): `(size, reason)`.
    unknown: Option<(usize, String)>,
    /// References this frame holds.
    owned: Vec<VarId>,
}

thread_local! {
    static STACK: RefCell<Vec<Frame>> = const { RefCell::new(Vec::new()) };
}

/// Pops the frame it pushed when dropped (unwinding included).
#[must_use = "the frame is popped when the guard is dropped"]
pub struct LanesGuard {
    depth: usize,
}

impl Drop for LanesGuard {
    fn drop(&mut self) {
        let frames: Vec<Frame> = STACK.with(|s| {
            let mut s = s.borrow_mut();
            let from = (self.depth - 1).min(s.len());
            s.drain(from..).collect()
        });
        for f in frames {
            for id in f.owned {
                crate::dec_ref(id);
            }
        }
    }
}

/// Whether an evaluated body is running on this thread (a frame is pushed).
pub fn active() -> bool {
    STACK.with(|s| !s.borrow().is_empty())
}

fn push(frame: Frame) -> LanesGuard {
    STACK.with(|s| {
        let mut s = s.borrow_mut();
        s.push(frame);
        LanesGuard { depth: s.len() }
    })
}

/// Keeps new references until they are handed to a frame (released on an early return).
struct Refs(Vec<VarId>);
impl Refs {
    fn keep(&mut self, id: VarId) -> VarId {
        self.0.push(id);
        id
    }
}
impl Drop for Refs {
    fn drop(&mut self) {
        for &id in &self.0 {
            crate::dec_ref(id);
        }
    }
}

fn and(refs: &mut Refs, a: VarId, b: Option<VarId>) -> Result<VarId> {
    match b {
        None => Ok(a),
        Some(b) => Ok(refs.keep(crate::op(Op::And, &[a, b])?)),
    }
}

/// A copy of the top frame's facts needed to compose a new one.
struct Top {
    size: usize,
    like: VarId,
    mask: Option<VarId>,
    wide: Vec<(usize, VarId, Option<VarId>)>,
    unknown: Option<(usize, String)>,
}

fn top() -> Option<Top> {
    STACK.with(|s| {
        s.borrow().last().map(|f| Top {
            size: f.size,
            like: f.like,
            mask: f.mask,
            wide: f.wide.iter().map(|w| (w.size, w.lanes, w.mask)).collect(),
            unknown: f.unknown.clone(),
        })
    })
}

/// While the guard lives, only the lanes where `mask` (a Bool) holds run the body: scatters are
/// masked by it (and by the enclosing frames). The mask's size is the body's lane count.
pub fn push_mask(mask: VarId) -> Result<LanesGuard> {
    let size = crate::size(mask);
    let mut refs = Refs(Vec::new());
    crate::inc_ref(mask);
    refs.keep(mask);
    let mut frame = Frame {
        size,
        like: mask,
        mask: Some(mask),
        wide: Vec::new(),
        unknown: None,
        owned: Vec::new(),
    };
    if let Some(t) = top() {
        if t.size == size || t.size == 1 || size == 1 {
            // the same lanes (or a broadcast): both masks apply; a compacted body's wider sizes
            // still map through its lanes (their full-size masks do not know this one)
            let m = and(&mut refs, mask, t.mask)?;
            frame.mask = Some(m);
            frame.size = crate::size(m);
            frame.like = m;
            if t.size == frame.size {
                for (s, lanes, _) in t.wide {
                    crate::inc_ref(lanes);
                    refs.keep(lanes);
                    frame.wide.push(Wide {
                        size: s,
                        lanes,
                        mask: None,
                    });
                }
                frame.unknown = t.unknown;
            }
        } else if let Some(&(_, _, wide_mask)) = t.wide.iter().find(|w| w.0 == size) {
            // a loop over the full lanes inside a compacted body
            match wide_mask {
                Some(w) => frame.mask = Some(and(&mut refs, mask, Some(w))?),
                None => {
                    frame.unknown = Some((
                        size,
                        format!(
                            "it runs over the {size} lanes that a body compacted to {} lanes encloses, and which of those lanes run it is not known here",
                            t.size
                        ),
                    ))
                }
            }
        }
    }
    frame.owned = std::mem::take(&mut refs.0);
    Ok(push(frame))
}

/// While the guard lives, the body runs on compacted lanes: `lanes` (an integer array) holds,
/// per lane that runs, its index among the `full` lanes of the construct; `full_mask` (a Bool of
/// `full` lanes), where known, says which of them run. Scatters of the compacted size run for
/// every lane; scatters of the full size are masked by `full_mask`, or gathered at `lanes`.
pub fn push_compact(lanes: VarId, full: usize, full_mask: Option<VarId>) -> Result<LanesGuard> {
    let size = crate::size(lanes);
    let mut refs = Refs(Vec::new());
    crate::inc_ref(lanes);
    refs.keep(lanes);
    let mut frame = Frame {
        size,
        like: lanes,
        mask: None,
        wide: Vec::new(),
        unknown: None,
        owned: Vec::new(),
    };
    let mut wide_mask = full_mask;
    if let Some(m) = wide_mask {
        crate::inc_ref(m);
        refs.keep(m);
    }
    if let Some(t) = top() {
        // the enclosing frame's mask over the full lanes, if it runs over them
        let outer = if t.size == full || t.size == 1 {
            t.mask
        } else {
            t.wide.iter().find(|w| w.0 == full).and_then(|w| w.2)
        };
        if let Some(o) = outer {
            let all = refs.keep(crate::literal(VarType::Bool, 1, 1));
            frame.mask = Some(if crate::size(o) == 1 {
                o
            } else {
                refs.keep(crate::gather_view(o, lanes, all)?)
            });
            wide_mask = match wide_mask {
                Some(m) => Some(and(&mut refs, m, Some(o))?),
                None => None,
            };
        } else if t.size != full {
            if let Some((s, why)) = t.unknown.clone().filter(|u| u.0 == full) {
                frame.unknown = Some((s, why));
            }
        }
        if t.size == full {
            // the enclosing frame's own wider sizes map through both compactions
            let all = refs.keep(crate::literal(VarType::Bool, 1, 1));
            for (s, outer_lanes, _) in t.wide {
                let composed = refs.keep(crate::gather_view(outer_lanes, lanes, all)?);
                frame.wide.push(Wide {
                    size: s,
                    lanes: composed,
                    mask: None,
                });
            }
        }
    }
    if full != size {
        frame.wide.insert(
            0,
            Wide {
                size: full,
                lanes,
                mask: wide_mask,
            },
        );
    }
    frame.owned = std::mem::take(&mut refs.0);
    Ok(push(frame))
}

/// `target[index] (rop)= value` where `mask` holds, for the lanes that run the evaluated body
/// this thread is in (see the module docs); outside one, exactly [`crate::scatter`].
///
/// Inside a frozen function's recording, a target made before the recording and not evaluated
/// yet (a literal captured by the function) is a hidden input: a replay would write into a new
/// buffer of its own, never into the captured array.
pub fn scatter(
    target: &mut VarId,
    value: VarId,
    index: VarId,
    mask: VarId,
    rop: ReduceOp,
) -> Result<()> {
    if crate::context::recording() && !crate::context::symbolic() {
        let captured = {
            let st = STATE.lock();
            let t = st.var(target.0);
            (!t.fresh && !t.is_evaluated() && t.sym == 0).then(|| st.label_of(target.0))
        };
        if let Some(label) = captured {
            crate::context::captured_expression(label);
        }
    }
    let Some(Top {
        size: fsize,
        like,
        mask: fmask,
        wide,
        unknown,
    }) = top()
    else {
        return crate::scatter(target, value, index, mask, rop);
    };
    let sizes = [value, index, mask].map(crate::size);
    let s = sizes.iter().copied().find(|&s| s != 1).unwrap_or(1);
    if sizes.iter().any(|&x| x != 1 && x != s) || s == 0 {
        // a size error (or nothing to do): the plain scatter says which
        return crate::scatter(target, value, index, mask, rop);
    }
    let mut refs = Refs(Vec::new());
    let (value, index, mask) = if s == fsize {
        (value, index, and(&mut refs, mask, fmask)?)
    } else if s == 1 {
        let m = match fmask {
            Some(f) => f,
            None => refs.keep(crate::literal(VarType::Bool, 1, size_of(like))),
        };
        (value, index, and(&mut refs, m, Some(mask))?)
    } else if let Some(&(_, lanes, wmask)) = wide.iter().find(|w| w.0 == s) {
        match wmask {
            Some(w) => (value, index, and(&mut refs, mask, Some(w))?),
            None => {
                let all = refs.keep(crate::literal(VarType::Bool, 1, 1));
                let mut at = |x: VarId| -> Result<VarId> {
                    Ok(if crate::size(x) == 1 {
                        x
                    } else {
                        refs.keep(crate::gather_view(x, lanes, all)?)
                    })
                };
                let (v, i, m) = (at(value)?, at(index)?, at(mask)?);
                (v, i, and(&mut refs, m, fmask)?)
            }
        }
    } else {
        let why = match unknown {
            Some((u, why)) if u == s => format!(": {why}"),
            _ => String::new(),
        };
        let full = wide
            .first()
            .map(|w| format!(" (compacted from {} lanes)", w.0))
            .unwrap_or_default();
        return Err(Error::ControlFlow(format!(
            "scatter into {}: its index ({}) or values have {s} elements, but it runs inside a loop body, branch or call in evaluated mode over {fsize} lanes{full}{why}; a scatter there must have one element per lane (or be of size 1, then it runs once per lane) — build the index from the body's arguments",
            crate::describe(*target),
            crate::describe(index),
        )));
    };
    crate::scatter(target, value, index, mask, rop)
}
