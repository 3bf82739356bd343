//! Function freezing, engine side: symbolic sizes, the recorder and the replayer.
//!
//! The front end (`kiln::freeze`) traverses a function's inputs and decides when to record and when to
//! replay; this module owns what happens underneath: while recording, every variable carries a size
//! *expression* over the input sizes ([`size`]), every device op is captured with its buffers
//! identified by slot ([`record`]), and a finished [`Recording`] can be replayed against new input
//! buffers without tracing, code generation or hashing ([`replay`]).
//!
//! ```
//! use kiln_core::{self as core, freeze, Op, VarType};
//! // record `x * 2` for an evaluated input
//! let bytes: Vec<u8> = [1.0f32, 2.0, 3.0].iter().flat_map(|v| v.to_le_bytes()).collect();
//! let x = core::from_bytes(VarType::F32, &bytes).unwrap();
//! freeze::prepare_inputs(&[x]).unwrap();
//! freeze::begin(&[x]).unwrap();
//! let two = core::literal(VarType::F32, 2.0f32.to_bits() as u64, 1);
//! let y = core::op(Op::Mul, &[x, two]).unwrap();
//! core::eval(&[y]).unwrap();
//! let rec = freeze::finish(&[x], &[y]).unwrap();
//! assert_eq!(rec.launches(), 1);
//!
//! // replay it on a longer input: no tracing, the kernel runs at the new size
//! let bytes: Vec<u8> = [5.0f32, 6.0, 7.0, 8.0].iter().flat_map(|v| v.to_le_bytes()).collect();
//! let x2 = core::from_bytes(VarType::F32, &bytes).unwrap();
//! rec.check(&freeze::prepare_inputs(&[x2]).unwrap()).unwrap();
//! let freeze::Replayed::Done(outs) = rec.replay(&[x2]).unwrap() else { panic!("replay") };
//! let out = core::read_bytes(outs[0]).unwrap();
//! assert_eq!(out.len(), 16);
//! assert_eq!(f32::from_le_bytes(out[12..16].try_into().unwrap()), 16.0);
//! for id in [x, two, y, x2, outs[0]] { core::dec_ref(id); }
//! ```

pub mod record;
pub mod replay;
/// Symbolic sizes (a layer below: the trace and the scheduler use them too).
pub use crate::size;

pub use record::{
    abort, active, begin, driver_finish, driver_mark, finish, in_recording, observe_empty,
    observe_len, pause, size_of, take_refusal, Paused,
};
pub use replay::{Recording, Reject, Replayed, Site};
pub use size::Size;

use crate::registry::STATE;
use crate::ty::VarType;
use crate::VarId;

/// Type, size and literal-ness of an input variable (what the layout key needs).
pub fn input_class(id: VarId) -> (VarType, usize, bool) {
    let st = STATE.lock();
    let v = st.var(id.0);
    (v.ty, v.size, v.is_literal())
}

/// Prepare a frozen call's inputs: run pending scatters and evaluate every non-literal slot, so
/// that each has a buffer. Returns each slot's size.
pub fn prepare_inputs(slots: &[VarId]) -> crate::Result<Vec<u64>> {
    let pending: Vec<VarId> = {
        let st = STATE.lock();
        slots
            .iter()
            .copied()
            .filter(|id| {
                let v = st.var(id.0);
                !v.is_evaluated() && !v.is_literal()
            })
            .collect()
    };
    crate::schedule::eval(&pending)?;
    let st = STATE.lock();
    Ok(slots.iter().map(|id| st.var(id.0).size as u64).collect())
}
