//! Engine-wide counters: kernels, cache, launches, timing, out-of-range accesses, memory.
//!
//! Counters are plain atomics bumped by the layer that does the work (cache, launch, device); `stats()`
//! snapshots them together with the allocator's figures into a `Stats` value with public fields.

use crate::kernel::KernelHash;
use parking_lot::Mutex;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

pub(crate) static KERNELS_COMPILED: AtomicU64 = AtomicU64::new(0);
pub(crate) static KERNELS_BLOCKED: AtomicU64 = AtomicU64::new(0);
pub(crate) static CACHE_HITS: AtomicU64 = AtomicU64::new(0);
pub(crate) static CACHE_MISSES: AtomicU64 = AtomicU64::new(0);
pub(crate) static DISK_HITS: AtomicU64 = AtomicU64::new(0);
pub(crate) static LAUNCHES: AtomicU64 = AtomicU64::new(0);
pub(crate) static COMPILE_NS: AtomicU64 = AtomicU64::new(0);
pub(crate) static RUN_NS: AtomicU64 = AtomicU64::new(0);
pub(crate) static OOB_READS: AtomicU64 = AtomicU64::new(0);
pub(crate) static OOB_WRITES: AtomicU64 = AtomicU64::new(0);
pub(crate) static DEVICE_OPS: AtomicU64 = AtomicU64::new(0);
pub(crate) static VARS_CREATED: AtomicU64 = AtomicU64::new(0);
pub(crate) static LOOPS_TRUNCATED: AtomicU64 = AtomicU64::new(0);
pub(crate) static STENCIL_LAUNCHES: AtomicU64 = AtomicU64::new(0);
// (bumped by `inplace`, which owns the decisions they count)
pub(crate) static INPLACE_REUSES: AtomicU64 = AtomicU64::new(0);
pub(crate) static INPLACE_BYTES_SAVED: AtomicU64 = AtomicU64::new(0);
pub(crate) static INPLACE_DECLINED: AtomicU64 = AtomicU64::new(0);

// Launches whose loops stopped at their iteration limit, not yet reported by a `try_` read on
// this thread: (where, lanes still active).
thread_local! {
    // per thread: a launch runs on the thread that asked for it, whose next read reports it
    static TRUNCATIONS: std::cell::RefCell<Vec<(Truncated, u64)>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Where a truncated loop ran.
enum Truncated {
    /// In a kernel (its loops' labels are looked up when the error is made).
    Kernel(KernelHash),
    /// Driven from the host (evaluated mode).
    Host(String),
}
/// The labels of the limited loops of each kernel that has any (for the messages).
static LOOP_LABELS: Mutex<Vec<(KernelHash, Vec<String>)>> = Mutex::new(Vec::new());

pub(crate) fn note_truncation(hash: KernelHash, lanes: u64) {
    TRUNCATIONS.with(|t| t.borrow_mut().push((Truncated::Kernel(hash), lanes)));
}

/// A host-driven loop (`label`) stopped at its iteration limit with `lanes` still active.
pub fn note_truncated_loop(label: &str, lanes: u64) {
    LOOPS_TRUNCATED.fetch_add(1, Relaxed);
    TRUNCATIONS.with(|t| t.borrow_mut().push((Truncated::Host(label.into()), lanes)));
}

/// Remember the labels of the loops with an iteration limit in kernel `hash`.
pub(crate) fn note_loop_labels(hash: KernelHash, labels: Vec<String>) {
    let mut l = LOOP_LABELS.lock();
    if !l.iter().any(|(h, _)| *h == hash) {
        l.push((hash, labels));
    }
}

/// Take the loop truncations since the last call as an error (`None`: there were none).
pub fn take_truncation_error() -> Option<crate::Error> {
    let t = TRUNCATIONS.with(|t| std::mem::take(&mut *t.borrow_mut()));
    if t.is_empty() {
        return None;
    }
    let labels = LOOP_LABELS.lock();
    let mut names: Vec<String> = Vec::new();
    let mut lanes = 0;
    for (src, n) in t {
        lanes += n;
        let these = match src {
            Truncated::Host(l) => vec![l],
            Truncated::Kernel(h) => labels
                .iter()
                .find(|(k, _)| *k == h)
                .map(|(_, l)| l.clone())
                .unwrap_or_else(|| vec!["(unlabelled)".into()]),
        };
        for l in these {
            if !names.contains(&l) {
                names.push(l);
            }
        }
    }
    Some(crate::Error::LoopTruncated {
        labels: names.join(", "),
        lanes,
    })
}

/// A snapshot of kiln's counters (see [`crate::stats`]).
///
/// ```
/// let s = kiln_core::stats();
/// assert!(s.cache_hits + s.cache_misses >= s.kernels_compiled.min(s.cache_misses));
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Kernels compiled by a backend (cache misses that compiled).
    pub kernels_compiled: u64,
    /// Of those, kernels compiled lane-blocked: a counted loop over the rows of stacked arrays
    /// (a fused scan) run step by step over cache-sized blocks of lanes (`backend::blocked`).
    pub kernels_blocked: u64,
    /// Launches whose kernel was already in the cache.
    pub cache_hits: u64,
    /// Launches whose kernel had to be compiled (neither in memory nor in the disk cache).
    pub cache_misses: u64,
    /// Kernels not in memory that were loaded from the disk cache instead of compiled (LLVM
    /// backend; see `KILN_CACHE_DIR`).
    pub disk_hits: u64,
    /// Kernel launches.
    pub launches: u64,
    /// Device operations of any kind (launches, reductions, copies, …).
    pub device_ops: u64,
    /// Total compile time, nanoseconds.
    pub compile_ns: u64,
    /// Total kernel run time (wall clock of launches), nanoseconds.
    pub run_ns: u64,
    /// Gathers that read out of range (they read 0).
    pub oob_reads: u64,
    /// Scatters that wrote out of range (they were dropped).
    pub oob_writes: u64,
    /// Launches in which a loop stopped at its `max_iterations` with lanes still active.
    pub loops_truncated: u64,
    /// Launches of stencil groups that ran their interior (plain loads) and border apart; each
    /// also counts once in `launches`.
    pub stencil_launches: u64,
    /// Variables created since start.
    pub vars_created: u64,
    /// Variables alive now.
    pub vars_alive: u64,
    /// Bytes in buffers handed out now.
    pub bytes_allocated: u64,
    /// Bytes held in the allocator's free lists.
    pub bytes_cached: u64,
    /// Highest `bytes_allocated` seen.
    pub bytes_peak: u64,
    /// Buffers handed out now.
    pub live_buffers: u64,
    /// Buffer requests made to kiln's allocator since start (its free lists' hits included).
    pub alloc_requests: u64,
    /// Of those, the requests the free lists could not serve (new memory from the system).
    pub alloc_system_requests: u64,
    /// Results written into an operand's buffer instead of a new one (update-in-place: kernels,
    /// replays, permutations, scatters into a uniquely held target, `assign`).
    pub inplace_reuses: u64,
    /// Bytes those reuses did not allocate.
    pub inplace_bytes_saved: u64,
    /// Operands examined for update-in-place that could not take a result (why:
    /// `KILN_LOG=inplace`). An evaluation examines its kernels' operands only when one of them
    /// has no handle left (under `KILN_LOG=inplace`, every operand, to log its reason), so this
    /// counts the near misses, not every borrowed operand.
    pub inplace_declined: u64,
    /// Automatic differentiation: nodes alive in the AD graph (one per array that can carry a
    /// gradient). Filled in by the front end (`kiln::stats()`); 0 from `kiln_core::stats()`.
    pub ad_nodes: u64,
    /// AD graph edges alive (node to input).
    pub ad_edges: u64,
    /// Bytes of gradients held by AD nodes (their arrays' sizes times element width).
    pub ad_grad_bytes: u64,
}

pub(crate) fn snapshot(vars_alive: u64) -> Stats {
    let a = crate::alloc::stats();
    Stats {
        kernels_compiled: KERNELS_COMPILED.load(Relaxed),
        kernels_blocked: KERNELS_BLOCKED.load(Relaxed),
        cache_hits: CACHE_HITS.load(Relaxed),
        cache_misses: CACHE_MISSES.load(Relaxed),
        disk_hits: DISK_HITS.load(Relaxed),
        launches: LAUNCHES.load(Relaxed),
        device_ops: DEVICE_OPS.load(Relaxed),
        compile_ns: COMPILE_NS.load(Relaxed),
        run_ns: RUN_NS.load(Relaxed),
        oob_reads: OOB_READS.load(Relaxed),
        oob_writes: OOB_WRITES.load(Relaxed),
        loops_truncated: LOOPS_TRUNCATED.load(Relaxed),
        stencil_launches: STENCIL_LAUNCHES.load(Relaxed),
        vars_created: VARS_CREATED.load(Relaxed),
        vars_alive,
        bytes_allocated: a.allocated,
        bytes_cached: a.cached,
        bytes_peak: a.peak,
        live_buffers: a.live_blocks,
        alloc_requests: a.requests,
        alloc_system_requests: a.system_requests,
        inplace_reuses: INPLACE_REUSES.load(Relaxed),
        inplace_bytes_saved: INPLACE_BYTES_SAVED.load(Relaxed),
        inplace_declined: INPLACE_DECLINED.load(Relaxed),
        ad_nodes: 0,
        ad_edges: 0,
        ad_grad_bytes: 0,
    }
}

impl fmt::Display for Stats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "kernels compiled {}, cache hits {}, misses {}, launches {}, device ops {}",
            self.kernels_compiled,
            self.cache_hits,
            self.cache_misses,
            self.launches,
            self.device_ops
        )?;
        writeln!(
            f,
            "compile {:.3} ms, run {:.3} ms, out-of-range reads {}, writes {}",
            self.compile_ns as f64 / 1e6,
            self.run_ns as f64 / 1e6,
            self.oob_reads,
            self.oob_writes
        )?;
        write!(
            f,
            "variables alive {} (created {}), memory {} in use, {} cached, {} peak",
            self.vars_alive,
            self.vars_created,
            fmt_bytes(self.bytes_allocated),
            fmt_bytes(self.bytes_cached),
            fmt_bytes(self.bytes_peak)
        )?;
        write!(
            f,
            "\nbuffers requested {} ({} from the system), written in place {} ({} saved)",
            self.alloc_requests,
            self.alloc_system_requests,
            self.inplace_reuses,
            fmt_bytes(self.inplace_bytes_saved)
        )
    }
}

/// Human-readable byte count.
///
/// ```
/// assert_eq!(kiln_core::stats::fmt_bytes(1536), "1.50 KiB");
/// ```
pub fn fmt_bytes(b: u64) -> String {
    fmt_bytes_f64(b as f64)
}

/// As [`fmt_bytes`], for byte counts that may exceed `u64` (the memory of huge lazy arrays).
pub(crate) fn fmt_bytes_wide(b: u128) -> String {
    fmt_bytes_f64(b as f64)
}

fn fmt_bytes_f64(b: f64) -> String {
    if b < 1024.0 {
        format!("{b} B")
    } else if b < 1024.0 * 1024.0 {
        format!("{:.2} KiB", b / 1024.0)
    } else if b < 1024.0 * 1024.0 * 1024.0 {
        format!("{:.2} MiB", b / (1024.0 * 1024.0))
    } else {
        format!("{:.2} GiB", b / (1024.0 * 1024.0 * 1024.0))
    }
}
