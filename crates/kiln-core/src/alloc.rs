//! Caching allocator for kernel buffers.
//!
//! Every buffer is 64-byte aligned and followed by `SLACK_BYTES` of slack that vector code may read
//! and write past the end of a partial last vector, so no backend needs a scalar tail for plain loads
//! and stores. Freed blocks go to a free list per size class and are reused; `trim()` returns them to
//! the system. Blocks of 2 MiB or more come from `mmap` with `madvise(MADV_HUGEPAGE)`, which avoids a
//! page fault per 4 KiB on first touch of large outputs. Allocation failure is an `Err`, never an
//! abort. Nothing else in kiln calls the system allocator for buffers.

use crate::error::{Error, Result};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};

/// Bytes of readable/writable slack after every buffer's last element.
pub const SLACK_BYTES: usize = 64;
const ALIGN: usize = 64;
const HUGE: usize = 2 << 20;

/// A raw, owned, 64-byte aligned block.
pub struct Block {
    ptr: *mut u8,
    cap: usize,
}

// SAFETY: a Block is uniquely owned memory; sending it between threads moves ownership.
unsafe impl Send for Block {}
// SAFETY: &Block only exposes the pointer value; writes through it are coordinated by the launcher.
unsafe impl Sync for Block {}

impl Block {
    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr
    }
    pub fn capacity(&self) -> usize {
        self.cap
    }
}

/// Memory that kiln reads without owning it: another library's array (a NumPy array, a DLPack
/// tensor) shared without a copy. kiln never writes into it: every path that would write into an
/// input's buffer in place (scatters, in-place kernels, permutations, frozen replays) counts the
/// owner as one more holder of the buffer and copies instead. Dropping the value releases the
/// memory to its owner. kiln never drops it while its registry is locked (an owner whose buffer
/// dies then is released at the next handle drop, evaluation or `sync`), so its `Drop` may call
/// back into kiln.
///
/// # Safety
/// `ptr()` stays valid for reading `bytes()` bytes for as long as the value lives, and those
/// bytes are not freed, moved or resized meanwhile. The owner may write them between kiln's
/// calls (kiln then reads the new values, as NumPy views do), but not while a kiln call that
/// reads them runs: that would be a data race.
pub unsafe trait ForeignMemory: Send + Sync {
    /// The first byte.
    fn ptr(&self) -> *const u8;
    /// The number of bytes readable from `ptr()`.
    fn bytes(&self) -> usize;
}

/// How far past a foreign buffer's last element compiled code is allowed to read: four times
/// the [`SLACK_BYTES`] kiln's own blocks have for a vector past a partial tail (the backends
/// promise to stay within that slack; the margin keeps a foreign buffer safe if one day a wider
/// vector does not).
const FOREIGN_OVERREAD: usize = 4 * SLACK_BYTES;

/// Why foreign memory of `bytes` bytes at `ptr` cannot be read in place as elements of
/// `elem_bytes` bytes (`None`: it can). It qualifies when the 256 bytes past its end lie in the
/// page of its last byte (a mapped page: reading it cannot fault, and the lanes read there are
/// discarded), which holds for about 15 in 16 arrays.
///
/// ```
/// use kiln_core::alloc::foreign_refusal;
/// let page = 1 << 20; // (an address only: nothing is read)
/// assert_eq!(foreign_refusal(page as *const u8, 400, 4), None);
/// assert!(foreign_refusal((page + 2) as *const u8, 400, 4).unwrap().contains("multiple"));
/// assert!(foreign_refusal(page as *const u8, 4096 - 252, 4).unwrap().contains("page boundary"));
/// ```
pub fn foreign_refusal(ptr: *const u8, bytes: usize, elem_bytes: usize) -> Option<&'static str> {
    const PAGE: usize = 4096;
    let at = ptr as usize;
    if bytes == 0 {
        return Some("it is empty");
    }
    if at == 0 || at % elem_bytes.max(1) != 0 {
        return Some("its address is not a multiple of the element size");
    }
    let Some(end) = at.checked_add(bytes) else {
        return Some("it wraps around the address space");
    };
    match end.checked_add(FOREIGN_OVERREAD) {
        Some(past) if (end - 1) / PAGE == (past - 1) / PAGE => None,
        _ => Some("it ends less than 256 bytes before a page boundary, where reading a vector past its end could fault"),
    }
}

/// Allocator statistics (bytes).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AllocStats {
    /// Bytes in blocks currently handed out.
    pub allocated: u64,
    /// Bytes in blocks held in free lists.
    pub cached: u64,
    /// Highest `allocated` seen.
    pub peak: u64,
    /// Blocks currently handed out.
    pub live_blocks: u64,
    /// Requests served since start, from the free lists or the system.
    pub requests: u64,
    /// Requests that had to go to the system (the free lists had no block of the class).
    pub system_requests: u64,
}

struct Pool {
    free: HashMap<usize, Vec<Block>>,
}

static POOL: Mutex<Option<Pool>> = Mutex::new(None);
static ALLOCATED: AtomicU64 = AtomicU64::new(0);
static CACHED: AtomicU64 = AtomicU64::new(0);
static PEAK: AtomicU64 = AtomicU64::new(0);
static LIVE: AtomicU64 = AtomicU64::new(0);
static REQUESTS: AtomicU64 = AtomicU64::new(0);
static SYSTEM_REQUESTS: AtomicU64 = AtomicU64::new(0);

/// The capacity class a request of `bytes` is served from.
fn size_class(bytes: usize) -> Option<usize> {
    let need = bytes.checked_add(SLACK_BYTES)?;
    if need <= 4096 {
        Some(need.next_power_of_two().max(ALIGN))
    } else if need < HUGE {
        // quarter-power-of-two classes keep waste under 25%
        let p = need.next_power_of_two();
        let q = p / 4;
        Some(need.div_ceil(q) * q)
    } else {
        Some(need.div_ceil(HUGE) * HUGE)
    }
}

/// Allocate a block of at least `bytes` (+ slack). `what` names the buffer for the error message.
pub fn alloc(bytes: usize, what: &dyn Fn() -> String) -> Result<Block> {
    let oom = || Error::OutOfMemory {
        bytes: bytes as u128,
        what: what(),
    };
    let cap = size_class(bytes).ok_or_else(oom)?;
    // Refuse what the machine cannot hold even if the kernel's overcommit would hand out the
    // address space: touching it later would get the process killed instead of returning an error.
    if cap as u64 > physical_memory() {
        return Err(oom());
    }
    let reused = POOL
        .lock()
        .as_mut()
        .and_then(|p| p.free.get_mut(&cap).and_then(|v| v.pop()));
    let block = match reused {
        Some(b) => {
            CACHED.fetch_sub(cap as u64, Ordering::Relaxed);
            b
        }
        None => {
            SYSTEM_REQUESTS.fetch_add(1, Ordering::Relaxed);
            sys_alloc(cap).ok_or_else(oom)?
        }
    };
    REQUESTS.fetch_add(1, Ordering::Relaxed);
    let now = ALLOCATED.fetch_add(cap as u64, Ordering::Relaxed) + cap as u64;
    PEAK.fetch_max(now, Ordering::Relaxed);
    LIVE.fetch_add(1, Ordering::Relaxed);
    Ok(block)
}

/// Return a block to its free list.
pub fn free(block: Block) {
    let cap = block.cap;
    ALLOCATED.fetch_sub(cap as u64, Ordering::Relaxed);
    LIVE.fetch_sub(1, Ordering::Relaxed);
    CACHED.fetch_add(cap as u64, Ordering::Relaxed);
    POOL.lock()
        .get_or_insert_with(|| Pool {
            free: HashMap::new(),
        })
        .free
        .entry(cap)
        .or_default()
        .push(block);
}

/// Release every cached block to the system.
pub fn trim() {
    let blocks: Vec<Block> = POOL
        .lock()
        .as_mut()
        .map(|p| p.free.drain().flat_map(|(_, v)| v).collect())
        .unwrap_or_default();
    for b in blocks {
        CACHED.fetch_sub(b.cap as u64, Ordering::Relaxed);
        sys_free(b);
    }
}

/// Current statistics.
pub fn stats() -> AllocStats {
    AllocStats {
        allocated: ALLOCATED.load(Ordering::Relaxed),
        cached: CACHED.load(Ordering::Relaxed),
        peak: PEAK.load(Ordering::Relaxed),
        live_blocks: LIVE.load(Ordering::Relaxed),
        requests: REQUESTS.load(Ordering::Relaxed),
        system_requests: SYSTEM_REQUESTS.load(Ordering::Relaxed),
    }
}

/// Bytes of physical memory (u64::MAX if unknown).
fn physical_memory() -> u64 {
    static MEM: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    *MEM.get_or_init(|| {
        // SAFETY: sysconf has no preconditions.
        let (pages, page) = unsafe {
            (
                libc::sysconf(libc::_SC_PHYS_PAGES),
                libc::sysconf(libc::_SC_PAGESIZE),
            )
        };
        if pages > 0 && page > 0 {
            pages as u64 * page as u64
        } else {
            u64::MAX
        }
    })
}

fn sys_alloc(cap: usize) -> Option<Block> {
    if cap >= HUGE {
        // SAFETY: anonymous private mapping; no file, no fixed address. The result is checked.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                cap,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return None;
        }
        // SAFETY: p..p+cap is the mapping just created. The advice is a hint; failure is harmless.
        unsafe { libc::madvise(p, cap, libc::MADV_HUGEPAGE) };
        Some(Block {
            ptr: p as *mut u8,
            cap,
        })
    } else {
        let layout = std::alloc::Layout::from_size_align(cap, ALIGN).ok()?;
        // SAFETY: layout has non-zero size (cap >= 64).
        let p = unsafe { std::alloc::alloc(layout) };
        if p.is_null() {
            None
        } else {
            Some(Block { ptr: p, cap })
        }
    }
}

fn sys_free(b: Block) {
    if b.cap >= HUGE {
        // SAFETY: the block came from mmap with exactly this length.
        unsafe { libc::munmap(b.ptr as *mut libc::c_void, b.cap) };
    } else {
        // SAFETY: allocated by sys_alloc with this layout.
        unsafe {
            std::alloc::dealloc(
                b.ptr,
                std::alloc::Layout::from_size_align_unchecked(b.cap, ALIGN),
            )
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn classes_cover_request_plus_slack() {
        for bytes in [0usize, 1, 63, 64, 4000, 5000, 100_000, 3 << 20] {
            let c = size_class(bytes).unwrap();
            assert!(c >= bytes + SLACK_BYTES, "{bytes} -> {c}");
        }
        assert!(size_class(usize::MAX).is_none());
    }
    #[test]
    fn huge_request_is_an_error() {
        let r = alloc(1 << 45, &|| "test".into());
        assert!(matches!(r, Err(Error::OutOfMemory { .. })));
    }
}
