//! The `Error` type: what went wrong, with the user's names (labels, sizes, types), and the way out.

use crate::ty::VarType;
use thiserror::Error;

/// Everything in kiln that can fail at run time.
#[derive(Debug, Error, Clone, PartialEq)]
pub enum Error {
    /// Operands of one op have sizes that neither match nor broadcast.
    #[error(
        "size mismatch in `{op}`: {lhs} has {lhs_size} elements but {rhs} has {rhs_size}; operands must \
         have equal sizes or one of them size 1 (broadcast) — slice, pad or broadcast one of them first"
    )]
    SizeMismatch {
        op: String,
        lhs: String,
        lhs_size: usize,
        rhs: String,
        rhs_size: usize,
    },

    /// `item()` on an array whose size is not 1.
    #[error("`item()` needs an array of size 1, but {label} has {size} elements; use `to_vec()` or reduce it first (e.g. `sum()`)")]
    NotScalar { label: String, size: usize },

    /// An allocation could not be satisfied.
    #[error(
        "out of memory: could not allocate {bytes} bytes for {what}; free arrays you no longer need, \
         call `kiln::trim()` to release cached memory, or process the data in smaller pieces"
    )]
    OutOfMemory { bytes: u128, what: String },

    /// A backend failed to compile a kernel.
    #[error("{backend} could not compile kernel {hash}: {message}; set KILN_BACKEND=interp to run it in the reference interpreter, and please report this kernel (KILN_LOG=kiln::kernel=trace prints it)")]
    Compile {
        backend: String,
        hash: String,
        message: String,
    },

    /// A requested backend is not available.
    #[error("backend `{name}` is not available: {reason}")]
    BackendUnavailable { name: String, reason: String },

    /// An operation got an operand of a type it does not support.
    #[error("`{op}` does not support {ty} operands ({label}); {hint}")]
    Type {
        op: String,
        ty: VarType,
        label: String,
        hint: String,
    },

    /// Invalid argument (bad block size, bad length …).
    #[error("{0}")]
    Invalid(String),
}

/// kiln's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;
