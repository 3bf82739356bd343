//! kiln-core: the untyped engine under kiln.
pub mod alloc;
pub mod backend;
pub mod error;
pub mod kernel;
pub mod op;
pub mod ty;

pub use error::{Error, Result};
pub use op::{Op, ReduceOp};
pub use ty::{Scalar, VarType};
