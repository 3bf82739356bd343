//! Function freezing, engine side: symbolic sizes, the recorder and the replayer.
//!
//! The front end (`kiln::freeze`) traverses a function's inputs and decides when to record and when to
//! replay; this module owns what happens underneath: while recording, every variable carries a size
//! *expression* over the input sizes ([`size`]), every device op is captured with its buffers
//! identified by slot ([`record`]), and a finished [`Recording`] can be replayed against new input
//! buffers without tracing, code generation or hashing ([`replay`]).

pub mod record;
pub mod replay;
pub mod size;

pub use record::{abort, active, begin, finish, observe_empty, observe_len, size_of, take_refusal};
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
