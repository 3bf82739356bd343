//! Engine-wide counters: kernels, cache, launches, timing, out-of-range accesses, memory.
//!
//! Counters are plain atomics bumped by the layer that does the work (cache, launch, device); `stats()`
//! snapshots them together with the allocator's figures into a `Stats` value with public fields.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

pub(crate) static KERNELS_COMPILED: AtomicU64 = AtomicU64::new(0);
pub(crate) static CACHE_HITS: AtomicU64 = AtomicU64::new(0);
pub(crate) static CACHE_MISSES: AtomicU64 = AtomicU64::new(0);
pub(crate) static LAUNCHES: AtomicU64 = AtomicU64::new(0);
pub(crate) static COMPILE_NS: AtomicU64 = AtomicU64::new(0);
pub(crate) static RUN_NS: AtomicU64 = AtomicU64::new(0);
pub(crate) static OOB_READS: AtomicU64 = AtomicU64::new(0);
pub(crate) static OOB_WRITES: AtomicU64 = AtomicU64::new(0);
pub(crate) static DEVICE_OPS: AtomicU64 = AtomicU64::new(0);
pub(crate) static VARS_CREATED: AtomicU64 = AtomicU64::new(0);

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
    /// Launches whose kernel was already in the cache.
    pub cache_hits: u64,
    /// Launches whose kernel had to be compiled.
    pub cache_misses: u64,
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
}

pub(crate) fn snapshot(vars_alive: u64) -> Stats {
    let a = crate::alloc::stats();
    Stats {
        kernels_compiled: KERNELS_COMPILED.load(Relaxed),
        cache_hits: CACHE_HITS.load(Relaxed),
        cache_misses: CACHE_MISSES.load(Relaxed),
        launches: LAUNCHES.load(Relaxed),
        device_ops: DEVICE_OPS.load(Relaxed),
        compile_ns: COMPILE_NS.load(Relaxed),
        run_ns: RUN_NS.load(Relaxed),
        oob_reads: OOB_READS.load(Relaxed),
        oob_writes: OOB_WRITES.load(Relaxed),
        vars_created: VARS_CREATED.load(Relaxed),
        vars_alive,
        bytes_allocated: a.allocated,
        bytes_cached: a.cached,
        bytes_peak: a.peak,
        live_buffers: a.live_blocks,
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
            crate::registry::fmt_bytes(self.bytes_allocated),
            crate::registry::fmt_bytes(self.bytes_cached),
            crate::registry::fmt_bytes(self.bytes_peak)
        )
    }
}
