//! The engine's controls and inspection: what a user who tunes kiln or looks inside it needs of
//! `kiln_core`, the engine crate. Everything else in `kiln_core` is internal to kiln (recording a
//! frozen function by hand, holding the evaluation lock, raw buffers) and may change; a program
//! that needs it can depend on `kiln-core` itself.
//!
//! ```
//! use kiln::prelude::*;
//! let x = Float32::from_vec(vec![1.0, 2.0, 3.0]);
//! let y = (x * 2.0).sqrt();
//! // what evaluating `y` would run: one kernel, and `x`'s buffer (moved in) takes the result
//! let plan = kiln::engine::plan_for(&[y.id()]);
//! assert_eq!(plan.kernels().len(), 1);
//! assert!(plan.to_string().contains("in place of p0"), "{plan}");
//! assert_eq!(y.to_vec()[1], 2.0);
//! ```

/// Run-time settings: every `KILN_*` variable is declared in `config::VARIABLES`, read once,
/// and the switches have setters (`set_debug_mode`, `set_inplace`, `set_freeze`, `set_threads`,
/// `set_cache_max_mb`, …).
pub use kiln_core::config;
/// Observing device ops (every launch, reduction, copy, upload and read, with its buffers).
pub use kiln_core::device::{observe, unobserve, DeviceOpKind, DeviceOpRecord};
/// Kernel IR: what the scheduler builds, printable and parseable (`Kernel::parse`).
pub use kiln_core::kernel::{Kernel, KernelHash};
/// What an evaluation would run, planned but not run.
pub use kiln_core::plan::Summary as Plan;
/// The warning about arrays recomputed by many kernels (state a host loop never evaluates).
pub use kiln_core::schedule::{recompute_detections, warn_on_recompute};

/// Drop the compiled kernels kept in memory; frozen functions record again at their next call
/// (Dr.Jit's `flush_kernel_cache`). See `kiln_core::cache::flush`.
///
/// ```
/// use kiln::prelude::*;
/// let mut f = kiln::freeze(|x: &Float32| x * 2.0f32);
/// let x = Float32::from_slice(&[1.0, 2.0]);
/// f.call(&x).unwrap();
/// kiln::engine::flush_kernel_cache();
/// assert_eq!(f.call(&x).unwrap().to_vec(), vec![2.0, 4.0]);
/// assert_eq!(f.stats().recordings, 2);
/// ```
pub fn flush_kernel_cache() {
    kiln_core::cache::flush()
}
pub use kiln_core::{backend, kernels_for, schedule::plan_for, with_backend, VarId};

/// Lane blocking of fused scans over wide rows (`KILN_LANE_BLOCK`): how many lanes a block holds
/// and how far rows must span before blocking pays.
pub use kiln_core::backend::blocked::{set_policy as set_lane_blocking, Policy as LaneBlocking};

/// The number of threads kiln's pool runs on (`KILN_THREADS`, else all cores).
///
/// ```
/// assert!(kiln::engine::threads() >= 1);
/// ```
pub fn threads() -> usize {
    kiln_core::launch::threads()
}

/// Whether a usable libLLVM (15 or later) was found; `Err` says why not (kiln then compiles
/// with Cranelift).
///
/// ```
/// match kiln::engine::llvm_available() {
///     Ok(()) => println!("LLVM"),
///     Err(why) => println!("Cranelift: {why}"),
/// }
/// ```
pub fn llvm_available() -> Result<(), String> {
    kiln_core::backend::llvm::shared().map(|_| ())
}
