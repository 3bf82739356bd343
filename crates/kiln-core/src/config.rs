//! Engine switches: every `KILN_*` environment variable, declared once ([`VARIABLES`], the source
//! of the README's table), each read once per process on first use ([`env`]), and the switches a
//! program may also flip at run time ([`set_freeze`], [`set_inplace`], [`set_threads`], …), as
//! Dr.Jit's `set_flag` does. The lowest layer: any module, logging included, asks here.
//!
//! Run-time settings owned elsewhere, because the value lives there: the backend
//! (`kiln_core::with_backend`, per thread), the log filter (`kiln_core::set_log_level`), the lane
//! blocking policy (`backend::blocked::set_policy`), in-place off for one closure
//! (`inplace::with_inplace`).

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, AtomicUsize, Ordering::Relaxed};
use std::sync::OnceLock;

/// One environment variable: its name, the values it takes, what it does.
#[derive(Clone, Copy, Debug)]
pub struct Variable {
    pub name: &'static str,
    pub values: &'static str,
    pub meaning: &'static str,
}

/// Every variable kiln reads, in the README table's order.
///
/// ```
/// use kiln_core::config::VARIABLES;
/// assert!(VARIABLES.iter().any(|v| v.name == "KILN_THREADS"));
/// ```
pub const VARIABLES: [Variable; 15] = [
    Variable {
        name: "KILN_BACKEND",
        values: "llvm, cranelift, interp",
        meaning: "the backend (default: LLVM when a libLLVM >= 15 is found, else Cranelift)",
    },
    Variable {
        name: "KILN_LLVM_PATH",
        values: "a file or folder",
        meaning: "the libLLVM to use",
    },
    Variable {
        name: "KILN_LLVM_WIDTH",
        values: "4, 8, 16, 32",
        meaning: "lanes per LLVM vector iteration (default: from the CPU)",
    },
    Variable {
        name: "KILN_CACHE_DIR",
        values: "a folder",
        meaning: "where LLVM's compiled kernels are kept between runs",
    },
    Variable {
        name: "KILN_DISK_CACHE",
        values: "0",
        meaning: "no disk cache",
    },
    Variable {
        name: "KILN_CACHE_MAX_MB",
        values: "n",
        meaning: "size limit of the disk cache (default 512); set_cache_max_mb",
    },
    Variable {
        name: "KILN_LOG",
        values: "a tracing filter",
        meaning: "logging (set_log_level at run time)",
    },
    Variable {
        name: "KILN_DEBUG",
        values: "1",
        meaning: "warn about out-of-range gathers and scatters; set_debug_mode",
    },
    Variable {
        name: "KILN_THREADS",
        values: "n",
        meaning:
            "size of kiln's thread pool (default: all cores); set_threads before the first launch",
    },
    Variable {
        name: "KILN_LANE_BLOCK",
        values: "n",
        meaning:
            "lanes per block at most of a lane-blocked scan loop (default 65536; 0 never blocks)",
    },
    Variable {
        name: "KILN_FREEZE",
        values: "0",
        meaning: "run every frozen function unfrozen; set_freeze",
    },
    Variable {
        name: "KILN_INPLACE",
        values: "0",
        meaning: "never write a result into an operand's buffer; set_inplace",
    },
    Variable {
        name: "KILN_WARN_RECOMPUTE",
        values: "0",
        meaning: "no warning about arrays recomputed by many kernels; set_warn_recompute",
    },
    Variable {
        name: "KILN_SCAN_REWRITES",
        values: "0",
        meaning: "no scan rewrites; set_scan_rewrites",
    },
    Variable {
        name: "KILN_PLAIN_SCATTER",
        values: "0",
        meaning: "few-bin scatter reductions stay atomic (no private copies); set_plain_scatter",
    },
];

static VALUES: [OnceLock<Option<std::ffi::OsString>>; 15] = [const { OnceLock::new() }; 15];

/// The value of the `KILN_*` variable `name` as this process first read it (an empty value counts
/// as unset). Panics on a name not in [`VARIABLES`]: every variable is declared there.
///
/// ```
/// // unset in the doctest's environment unless the caller set it
/// let _threads: Option<String> = kiln_core::config::env("KILN_THREADS");
/// ```
pub fn env(name: &str) -> Option<String> {
    env_os(name).and_then(|v| v.into_string().ok())
}

/// As [`env`], for values that need not be UTF-8 (paths).
pub fn env_os(name: &str) -> Option<std::ffi::OsString> {
    let k = VARIABLES
        .iter()
        .position(|v| v.name == name)
        .unwrap_or_else(|| {
            panic!("kiln internal error: {name} is not declared in config::VARIABLES")
        });
    VALUES[k]
        .get_or_init(|| std::env::var_os(name).filter(|v| !v.to_string_lossy().trim().is_empty()))
        .clone()
}

/// A boolean switch: its variable turns it off with `0` (or `off`/`false`/`no`) or on with any
/// other value; a setter overrides both.
struct Switch {
    name: &'static str,
    default: bool,
    /// 0: not yet read, 1: off, 2: on.
    state: AtomicU8,
}

impl Switch {
    const fn new(name: &'static str, default: bool) -> Switch {
        Switch {
            name,
            default,
            state: AtomicU8::new(0),
        }
    }
    fn get(&self) -> bool {
        match self.state.load(Relaxed) {
            1 => false,
            2 => true,
            _ => {
                let on = match env(self.name).as_deref().map(str::trim) {
                    None => self.default,
                    Some("0" | "off" | "false" | "no") => false,
                    Some(_) => true,
                };
                // (a setter that ran meanwhile wins)
                let _ = self
                    .state
                    .compare_exchange(0, 1 + u8::from(on), Relaxed, Relaxed);
                self.state.load(Relaxed) == 2
            }
        }
    }
    fn set(&self, on: bool) {
        self.state.store(1 + u8::from(on), Relaxed);
    }
}

static DEBUG: Switch = Switch::new("KILN_DEBUG", false);
static FREEZE: Switch = Switch::new("KILN_FREEZE", true);
static INPLACE: Switch = Switch::new("KILN_INPLACE", true);
static WARN_RECOMPUTE: Switch = Switch::new("KILN_WARN_RECOMPUTE", true);
static SCAN_REWRITES: Switch = Switch::new("KILN_SCAN_REWRITES", true);
static PLAIN_SCATTER: Switch = Switch::new("KILN_PLAIN_SCATTER", true);

/// Whether out-of-range accesses are reported as warnings, and warnings shown without `KILN_LOG`
/// (`KILN_DEBUG=1`).
///
/// ```
/// let _on: bool = kiln_core::config::debug_mode();
/// ```
pub fn debug_mode() -> bool {
    DEBUG.get()
}

/// Turn [`debug_mode`] on or off for the whole process.
///
/// ```
/// let before = kiln_core::config::debug_mode();
/// kiln_core::config::set_debug_mode(true);
/// assert!(kiln_core::config::debug_mode());
/// kiln_core::config::set_debug_mode(before);
/// ```
pub fn set_debug_mode(on: bool) {
    DEBUG.set(on);
}

/// Whether frozen functions record and replay (`KILN_FREEZE=0`: every call runs unfrozen).
///
/// ```
/// let _on: bool = kiln_core::config::freeze_enabled();
/// ```
pub fn freeze_enabled() -> bool {
    FREEZE.get() && THREAD_FREEZE.with(|f| f.get())
}

thread_local! {
    /// This thread's own switch (Dr.Jit's `JitFlag.KernelFreezing`), under the process's.
    static THREAD_FREEZE: std::cell::Cell<bool> = const { std::cell::Cell::new(true) };
}

/// Turn freezing on or off for this thread only (Dr.Jit's `JitFlag.KernelFreezing`; the
/// process-wide [`set_freeze`] still rules over it); returns the previous setting.
///
/// ```
/// let before = kiln_core::config::set_thread_freeze(false);
/// assert!(!kiln_core::config::freeze_enabled());
/// kiln_core::config::set_thread_freeze(before);
/// ```
pub fn set_thread_freeze(on: bool) -> bool {
    THREAD_FREEZE.with(|f| f.replace(on))
}

/// This thread's own freezing switch (see [`set_thread_freeze`]).
pub fn thread_freeze() -> bool {
    THREAD_FREEZE.with(|f| f.get())
}

/// Turn freezing on or off for the whole process (calls already replaying finish as they began).
///
/// ```
/// let before = kiln_core::config::freeze_enabled();
/// kiln_core::config::set_freeze(false);
/// assert!(!kiln_core::config::freeze_enabled());
/// kiln_core::config::set_freeze(before);
/// ```
pub fn set_freeze(on: bool) {
    FREEZE.set(on);
}

/// Whether evaluations may write a result into an operand's buffer (`KILN_INPLACE=0`: never).
///
/// ```
/// let _on: bool = kiln_core::config::inplace_enabled();
/// ```
pub fn inplace_enabled() -> bool {
    INPLACE.get()
}

/// Allow or forbid update-in-place for the whole process (`inplace::with_inplace` sets it for one
/// closure on one thread, and wins over this).
///
/// ```
/// let before = kiln_core::config::inplace_enabled();
/// kiln_core::config::set_inplace(false);
/// assert!(!kiln_core::config::inplace_enabled());
/// kiln_core::config::set_inplace(before);
/// ```
pub fn set_inplace(on: bool) {
    INPLACE.set(on);
}

/// Whether arrays recomputed by many kernels are warned about (`KILN_WARN_RECOMPUTE=0`: no).
pub fn warn_recompute() -> bool {
    WARN_RECOMPUTE.get()
}

/// Turn the recompute warning on or off.
///
/// ```
/// kiln_core::config::set_warn_recompute(false);
/// assert!(!kiln_core::config::warn_recompute());
/// kiln_core::config::set_warn_recompute(true);
/// ```
pub fn set_warn_recompute(on: bool) {
    WARN_RECOMPUTE.set(on);
}

/// Whether scans are rewritten (fewer steps, rows stored, rings; `KILN_SCAN_REWRITES=0`: no).
pub fn scan_rewrites() -> bool {
    SCAN_REWRITES.get()
}

/// Turn the scan rewrites on or off.
///
/// ```
/// kiln_core::config::set_scan_rewrites(false);
/// assert!(!kiln_core::config::scan_rewrites());
/// kiln_core::config::set_scan_rewrites(true);
/// ```
pub fn set_scan_rewrites(on: bool) {
    SCAN_REWRITES.set(on);
}

/// Whether few-bin scatter reductions get private copies per thread (`KILN_PLAIN_SCATTER=0`: they
/// stay atomic). Read when a kernel is built: kernels already cached keep their form.
pub fn plain_scatter() -> bool {
    PLAIN_SCATTER.get()
}

/// Turn the private copies of few-bin scatter reductions on or off (for kernels built from now on).
///
/// ```
/// kiln_core::config::set_plain_scatter(false);
/// assert!(!kiln_core::config::plain_scatter());
/// kiln_core::config::set_plain_scatter(true);
/// ```
pub fn set_plain_scatter(on: bool) {
    PLAIN_SCATTER.set(on);
}

/// 0: not set at run time.
static CACHE_MAX_MB: AtomicU64 = AtomicU64::new(0);

/// The disk cache's size limit in MiB (`KILN_CACHE_MAX_MB`, default 512).
///
/// ```
/// assert!(kiln_core::config::cache_max_mb() > 0);
/// ```
pub fn cache_max_mb() -> u64 {
    match CACHE_MAX_MB.load(Relaxed) {
        0 => env("KILN_CACHE_MAX_MB")
            .and_then(|v| v.trim().parse::<u64>().ok())
            .filter(|&mb| mb > 0)
            .unwrap_or(512),
        mb => mb,
    }
}

/// Set the disk cache's size limit in MiB (at least 1); it applies at the next trim.
///
/// ```
/// let before = kiln_core::config::cache_max_mb();
/// kiln_core::config::set_cache_max_mb(64);
/// assert_eq!(kiln_core::config::cache_max_mb(), 64);
/// kiln_core::config::set_cache_max_mb(before);
/// ```
pub fn set_cache_max_mb(mb: u64) {
    CACHE_MAX_MB.store(mb.max(1), Relaxed);
}

/// 0: not set at run time.
static THREADS: AtomicUsize = AtomicUsize::new(0);
static POOL_STARTED: AtomicBool = AtomicBool::new(false);

/// The size of kiln's thread pool: [`set_threads`], else `KILN_THREADS`, else every core.
///
/// ```
/// assert!(kiln_core::config::threads() >= 1);
/// ```
pub fn threads() -> usize {
    match THREADS.load(Relaxed) {
        0 => env("KILN_THREADS")
            .and_then(|s| s.trim().parse().ok())
            .filter(|&n: &usize| n > 0)
            .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get())),
        n => n,
    }
}

/// Size kiln's thread pool. The pool starts with the first parallel launch and keeps its size, so
/// this must come before it: afterwards it returns an error saying so, and changes nothing.
///
/// ```
/// // (in this doctest nothing has launched yet)
/// kiln_core::config::set_threads(2).unwrap();
/// assert_eq!(kiln_core::config::threads(), 2);
/// ```
pub fn set_threads(n: usize) -> crate::error::Result<()> {
    if POOL_STARTED.load(Relaxed) {
        return Err(crate::error::Error::Invalid(format!(
            "set_threads({n}): kiln's thread pool already runs with {} threads; call it before the first evaluation (or set KILN_THREADS)",
            threads()
        )));
    }
    THREADS.store(n.max(1), Relaxed);
    Ok(())
}

/// The pool is being built with [`threads`] threads (`launch` tells; `set_threads` refuses after).
pub(crate) fn pool_started() {
    POOL_STARTED.store(true, Relaxed);
}
