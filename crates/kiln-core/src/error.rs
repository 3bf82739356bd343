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

    /// A frozen function read an array's contents while being recorded.
    #[error(
        "{label} was read (`{how}`) inside a frozen function: a replay does not run the function's \
         Rust code again, so nothing it decides from array contents can be replayed; return the \
         array and read it after the call, or keep the decision on the device (`select`, masks)"
    )]
    FrozenRead { label: String, how: String },

    /// A frozen function used an evaluated array that is neither an argument nor created inside.
    #[error(
        "{label} is used inside a frozen function ({during}) but is neither one of its arguments nor \
         created inside it, so a replay could not bind it; pass it as an argument, or return it from \
         `.with_state(|args| …)` so that it becomes part of the frozen state"
    )]
    HiddenInput { label: String, during: String },

    /// A loop stopped at its iteration limit with lanes still running.
    #[error(
        "loop {labels} stopped at its `max_iterations` with {lanes} lane(s) still active, so their \
         state is the state after the last iteration run, not a finished result; raise \
         `max_iterations`, or check the loop condition for lanes that never finish"
    )]
    LoopTruncated { labels: String, lanes: u64 },

    /// Control flow got a state or condition it cannot use (names the entry, sizes and types).
    #[error("{0}")]
    ControlFlow(String),

    /// An array's contents were read while a symbolic loop body, branch or call target was traced.
    #[error(
        "{label} was read (`{how}`) while tracing a symbolic {region}: the body is traced once for \
         all lanes and iterations, so its contents are not known yet; keep the decision on the device \
         (`select`, masks), or run this {region} in evaluated mode (`.mode(Mode::Evaluated)`)"
    )]
    SymbolicRead {
        label: String,
        how: String,
        region: String,
    },

    /// Invalid argument (bad block size, bad length …).
    #[error("{0}")]
    Invalid(String),

    /// A stencil that cannot be applied as written (`kiln::stencil`): the message names the input,
    /// the dimension, the sizes and the fix.
    #[error("stencil: {0}")]
    Stencil(String),
    /// A scan that cannot run as written (`kiln::scan`, `kiln::scan::Scan`): the message names
    /// the sequence, output or carry entry, both values that disagree, and the fix.
    #[error("scan: {0}")]
    Scan(String),
    /// Differentiation reached something it has no derivative rule for as used (a stencil
    /// reading at value-dependent offsets at first order, a `scatter_reduce` with `Mul`/`Min`/
    /// `Max`, a construct's first-order rule asked for a second derivative): never a wrong
    /// gradient. `detail` says what and how to get around it.
    #[error(
        "{construct} cannot be differentiated as used here: {detail}. Otherwise, compute it \
         outside the gradient (`kiln::ad::suspend_grad`, `detach()`)"
    )]
    NotDifferentiable { construct: String, detail: String },
    /// Automatic differentiation was asked something it cannot answer as asked (a non-scalar
    /// `backward` without a seed, an integer array, a graph already consumed …); the message
    /// names the array and the fix.
    #[error("autodiff: {0}")]
    Ad(String),
}

/// kiln's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;
