//! Kernel cache: compiled kernels by (backend, 128-bit kernel hash), in memory. (Backends may
//! keep their own disk cache underneath: a kernel they load from disk counts as a disk hit.)
//!
//! A hit costs one hash-map lookup; a miss compiles through the backend, counts and logs the compile
//! time. The cache never evicts on its own: kernels are small, and programs use few distinct
//! ones; [`flush`] empties it on request.

use crate::backend::{Backend, BackendKind, CompiledKernel};
use crate::error::Result;
use crate::kernel::{Kernel, KernelHash};
use crate::stats;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::Instant;

type Map = HashMap<(BackendKind, KernelHash), Arc<dyn CompiledKernel>>;
static CACHE: Mutex<Option<Map>> = Mutex::new(None);

/// Whether the last `get` was a hit, and the compile time if not.
pub struct Lookup {
    pub kernel: Arc<dyn CompiledKernel>,
    pub hit: bool,
    pub compile_ns: u64,
}

/// The compiled form of `kernel` (hash `hash`) for `backend`, compiling on a miss.
pub fn get(backend: &Arc<dyn Backend>, kernel: &Kernel, hash: KernelHash) -> Result<Lookup> {
    let key = (backend.kind(), hash);
    if let Some(k) = CACHE.lock().as_ref().and_then(|m| m.get(&key).cloned()) {
        stats::CACHE_HITS.fetch_add(1, Relaxed);
        return Ok(Lookup {
            kernel: k,
            hit: true,
            compile_ns: 0,
        });
    }
    #[cfg(debug_assertions)]
    if let Err(errs) = kernel.verify() {
        panic!(
            "kiln internal error: scheduled kernel fails verification:\n{}\n{kernel}",
            errs.join("\n")
        );
    }
    let t = Instant::now();
    // (a blocked kernel counts as one compile: its three parts are one cache entry)
    let (compiled, blocked) = crate::backend::blocked::compile(backend, kernel)?;
    if blocked {
        stats::KERNELS_BLOCKED.fetch_add(1, Relaxed);
    }
    let ns = t.elapsed().as_nanos() as u64;
    if compiled.loaded_from_disk() {
        stats::DISK_HITS.fetch_add(1, Relaxed);
    } else {
        stats::CACHE_MISSES.fetch_add(1, Relaxed);
        stats::KERNELS_COMPILED.fetch_add(1, Relaxed);
    }
    stats::COMPILE_NS.fetch_add(ns, Relaxed);
    // a hash's IR size never changes: noted once, when the kernel enters the cache
    crate::device::history::note_ops(hash, kernel.len());
    CACHE
        .lock()
        .get_or_insert_with(HashMap::new)
        .insert(key, compiled.clone());
    Ok(Lookup {
        kernel: compiled,
        hit: false,
        compile_ns: ns,
    })
}

/// Bumped by every [`flush`]: a frozen function whose recordings predate it records again.
static EPOCH: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Drop every compiled kernel kept in memory (Dr.Jit's `flush_kernel_cache`): each kernel
/// compiles (or loads from the disk cache) again at its next use, and frozen functions record
/// again (their recordings hold compiled kernels). Launches running now and recordings still
/// held keep their kernels alive until they let go.
///
/// ```
/// let x = kiln_core::counter(kiln_core::VarType::U32, 10).unwrap();
/// let y = kiln_core::op(kiln_core::Op::Add, &[x, x]).unwrap();
/// kiln_core::eval(&[y]).unwrap();
/// let before = kiln_core::cache::epoch();
/// kiln_core::cache::flush();
/// assert_eq!(kiln_core::cache::epoch(), before + 1);
/// for id in [x, y] { kiln_core::dec_ref(id); }
/// ```
pub fn flush() {
    let old = CACHE.lock().take();
    EPOCH.fetch_add(1, Relaxed);
    drop(old); // (outside the lock: a kernel's drop may free JIT memory)
}

/// How many times [`flush`] ran.
pub fn epoch() -> u64 {
    EPOCH.load(Relaxed)
}

/// Number of cached kernels.
pub fn len() -> usize {
    CACHE.lock().as_ref().map(|m| m.len()).unwrap_or(0)
}
