//! kiln: array programs that are traced lazily, fused into kernels, compiled at run time, cached,
//! and run on all cores.
//!
//! Write ordinary arithmetic on whole arrays; kiln records it instead of computing it, and evaluates
//! everything of one size in a single compiled kernel when a value is needed.
//!
//! ```
//! use kiln::prelude::*;
//! let x = Float32::linspace(0.0, 1.0, 1000).label("x");
//! let y = (&x * &x + 1.0).sqrt();          // traced, nothing runs yet
//! let s = y.sum();                         // one fused kernel + a reduction
//! assert!((s.item() - 1147.8).abs() < 1.0);
//! ```
//!
//! Backends: LLVM (loaded at run time when a libLLVM ≥ 15 is installed), Cranelift (embedded, the
//! fallback) and the reference interpreter (`KILN_BACKEND=interp|cranelift|llvm` picks one).
//! Logging: `KILN_LOG=info`, `KILN_LOG=kiln::kernel=trace` (prints kernel IR), or [`set_log_level`].

extern crate self as kiln;

pub mod ad;
pub mod array;
pub mod control;
pub mod engine;
pub mod freeze;
#[cfg(feature = "ndarray")]
mod interop;
pub mod math;
pub mod memory;
pub mod ops;
pub mod opt;
pub mod random;
pub mod reduce;
pub mod scan;
pub mod stencil;
pub mod tensor;
pub mod types;
pub mod vector;

pub use ad::{grad, hvp, jvp, value_and_grad, vjp};
pub use array::IntoSize;
pub use array::{Array, Bool, Float32, Float64, Int32, Int64, IntoArray, UInt32, UInt64};
pub use control::{
    dispatch, if_then_else, switch, while_loop, Checkpoints, LoopGrad, Mode, Registry,
};
pub use freeze::{freeze, Frozen, Traverse};
pub use kiln_core::device::history::{
    kernel_history, kernel_history_enabled, set_kernel_history, KernelKind, KernelRecord,
    RecordingMode,
};
pub use kiln_core::{
    set_log_level, BackendKind, Error, Op, ReduceOp, Result, Scalar, Size, Stats, VarType, Whos,
};
pub use kiln_derive::Traverse;
pub use memory::{
    gather, gather_masked, gather_view, scatter, scatter_masked, scatter_reduce,
    scatter_reduce_masked, try_gather, try_gather_masked, try_scatter, try_scatter_masked,
    try_scatter_reduce, try_scatter_reduce_masked,
};
pub use ops::select;
pub use random::Pcg32;
pub use scan::{scan, Scan, ScanReport};
pub use stencil::{median, stencil, Boundary, Rel, Stencil};
pub use tensor::Tensor;
pub use tensor::TensorOperand;
pub use types::{Float, Integer, Numeric, Signed};
pub use vector::*;

/// Everything a typical program needs: `use kiln::prelude::*;`.
pub mod prelude {
    pub use crate::array::{
        Array, Bool, Float32, Float64, Int32, Int64, IntoArray, IntoSize, UInt32, UInt64,
    };
    pub use crate::control::{dispatch, if_then_else, switch, while_loop, Mode};
    pub use crate::memory::{
        gather, gather_masked, gather_view, scatter, scatter_masked, scatter_reduce,
        scatter_reduce_masked,
    };
    pub use crate::ops::select;
    pub use crate::random::Pcg32;
    pub use crate::scan::{Keep, Scan, ScanMode};
    pub use crate::stencil::{Boundary, Rel, Stencil};
    pub use crate::tensor::{SliceArg, Tensor};
    pub use crate::types::{Float, Integer, Numeric, Signed};
    pub use crate::vector::{
        Vector, Vector2d, Vector2f, Vector2i, Vector3d, Vector3f, Vector3i, Vector4d, Vector4f,
        Vector4i,
    };
    pub use kiln_core::{Op, ReduceOp};
}

/// Evaluate several values together: arrays, tensors, vectors, tuples and anything else that
/// implements [`Traverse`] (derive it for your own structs), owned or borrowed. Arrays of equal
/// size share one kernel. Panics with the error's message if evaluation fails; see [`try_eval!`].
///
/// ```
/// use kiln::prelude::*;
/// let x = Float32::arange(8);
/// let (a, b) = (&x + 1.0, &x * 2.0);
/// let t = Tensor::from_array(&x * 3.0, &[2, 4]);
/// let v = Vector2f::new(&x - 1.0, &x / 2.0);
/// kiln::eval!(a, b, t, &v);
/// assert!(a.is_evaluated() && b.is_evaluated() && t.is_evaluated() && v.y().is_evaluated());
/// ```
///
/// Anything else is refused at compile time, naming the type:
///
/// ```compile_fail
/// struct Settings { steps: usize }
/// let s = Settings { steps: 3 };
/// kiln::eval!(s); // error: `kiln::eval!` cannot evaluate `Settings`
/// ```
#[macro_export]
macro_rules! eval {
    ($($a:expr),+ $(,)?) => {
        $crate::try_eval!($($a),+).unwrap_or_else(|e| panic!("kiln: {e}"))
    };
}

/// As [`eval!`], returning the error (compilation, memory, a refused read) instead of panicking.
///
/// ```
/// use kiln::prelude::*;
/// let t = Tensor::<f64>::ones(&[3]) * 2.0;
/// kiln::try_eval!(t).unwrap();
/// assert!(t.is_evaluated());
/// ```
#[macro_export]
macro_rules! try_eval {
    ($($a:expr),+ $(,)?) => {{
        #[allow(unused_imports)]
        use $crate::Evaluate as _;
        let mut __kiln_found = $crate::freeze::Traversal::new();
        // method syntax: a borrowed value (`&x`, or `x` that is a reference) derefs to the value
        $( ($a).kiln_eval_collect(&mut __kiln_found); )+
        $crate::eval_traversal(&__kiln_found)
    }};
}

/// What [`eval!`] accepts: every type that implements [`Traverse`] (arrays, tensors, vectors,
/// tuples, `Vec`s and options of them, structs deriving `Traverse`).
#[diagnostic::on_unimplemented(
    message = "`kiln::eval!` cannot evaluate `{Self}`",
    label = "not an array, tensor, vector, or a type that implements `kiln::Traverse`",
    note = "eval! takes arrays, tensors, vectors, tuples of them, and structs that `#[derive(kiln::Traverse)]`"
)]
pub trait Evaluate {
    /// List the arrays this value holds into `t` (what `eval!` expands to).
    #[doc(hidden)]
    fn kiln_eval_collect(&self, t: &mut freeze::Traversal);
}
impl<X: Traverse + ?Sized> Evaluate for X {
    fn kiln_eval_collect(&self, t: &mut freeze::Traversal) {
        self.traverse(t);
    }
}

/// Evaluate every array a traversal found, together (what [`eval!`] expands to).
#[doc(hidden)]
pub fn eval_traversal(t: &freeze::Traversal) -> Result<()> {
    kiln_core::eval(&t.slots)
}

/// Evaluate variables by id.
pub fn eval_ids(ids: &[kiln_core::VarId]) -> Result<()> {
    kiln_core::eval(ids)
}

/// Evaluate everything pending: every array a handle refers to and every pending scatter.
///
/// ```
/// let y = kiln::Float32::arange(4) + 1.0;
/// kiln::eval_all().unwrap();
/// assert!(y.is_evaluated());
/// ```
pub fn eval_all() -> Result<()> {
    kiln_core::eval_all()
}

/// Wait until all launched work has finished (and pending scatters have run).
///
/// ```
/// kiln::sync().unwrap();
/// ```
pub fn sync() -> Result<()> {
    kiln_core::sync()
}

/// The live variables: id, type, external/internal references, size, memory, ready, label; totals.
/// While arrays carry gradients, a `Grad` column says which variables they are and what each is
/// in the AD graph: `leaf` (`enable_grad`), the op that computed it (`mul`, `tanh`, …; `+ grad`
/// where backward passes keep its gradient), `used` once a backward pass consumed it.
///
/// ```
/// use kiln::prelude::*;
/// let mut x = Float32::from_slice(&[1.0, 2.0]).label("x");
/// x.enable_grad();
/// let y = (&x * 2.0).label("y");
/// let table = kiln::whos().to_string();
/// let row = |l: &str| table.lines().find(|r| r.ends_with(l)).unwrap().to_string();
/// assert!(row("x").contains("leaf") && row("y").contains("mul"), "{table}");
/// ```
pub fn whos() -> Whos {
    let grads: Vec<(kiln_core::VarId, String)> = ad::graph::var_kinds()
        .into_iter()
        .map(|(v, what)| (kiln_core::VarId(v), what))
        .collect();
    kiln_core::whos_with(&grads)
}

/// Engine counters (kernels compiled, cache hits/misses, launches, time, memory, out-of-range accesses).
///
/// ```
/// let s = kiln::stats();
/// assert!(s.launches >= s.cache_hits);
/// ```
pub fn stats() -> Stats {
    let mut s = kiln_core::stats();
    (s.ad_nodes, s.ad_edges, s.ad_grad_bytes) = ad::counters();
    s
}

/// Run `f` with update-in-place turned on or off on this thread (`KILN_INPLACE=0` turns it off
/// for the whole process). Results are bit-identical either way; with it on, a result may be
/// written into the buffer of an operand that nothing else can see any more (moved into the
/// expression, no clone, no view, no pending expression), and `stats().inplace_reuses` counts it.
///
/// ```
/// use kiln::Float64;
/// let run = || {
///     let x = Float64::arange(1 << 16);
///     x.eval();
///     let y = (x * 2.0).sqrt(); // one kernel; `x` moved
///     y.eval();
///     y.to_vec()
/// };
/// assert_eq!(kiln::with_inplace(true, run), kiln::with_inplace(false, run));
/// ```
pub fn with_inplace<R>(on: bool, f: impl FnOnce() -> R) -> R {
    kiln_core::inplace::with_inplace(on, f)
}

/// Release memory the allocator keeps cached for reuse.
///
/// ```
/// kiln::trim();
/// ```
pub fn trim() {
    kiln_core::trim()
}

/// The active backend: `KILN_BACKEND=interp|cranelift|llvm`, else LLVM when a libLLVM ≥ 15 is
/// found, else Cranelift.
///
/// ```
/// println!("{}", kiln::backend());
/// ```
pub fn backend() -> BackendKind {
    kiln_core::backend()
}

/// Give `x` a buffer of its own so changing a literal's value does not recompile kernels using it.
/// The result is `x` evaluated: it keeps `x`'s place in the AD graph, so gradients still flow
/// through it to what `x` was computed from.
///
/// ```
/// use kiln::prelude::*;
/// let s = kiln::make_opaque(&Float32::from(0.5f32));
/// assert!(s.is_evaluated());
/// let mut x = Float32::from_slice(&[1.0, 2.0]);
/// x.enable_grad();
/// let y = kiln::make_opaque(&(&x * 2.0));
/// (&y * 3.0).sum().backward();
/// assert_eq!(x.grad().to_vec(), vec![6.0, 6.0]);
/// ```
pub fn make_opaque<T: Scalar>(x: &Array<T>) -> Array<T> {
    x.same_node(array_ok(kiln_core::make_opaque(x.id())))
}

#[track_caller]
fn array_ok<R>(r: Result<R>) -> R {
    r.unwrap_or_else(|e| panic!("kiln: {e}"))
}
