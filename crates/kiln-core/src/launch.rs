//! The thread pool and how launches are cut into blocks: block sizes, the tile shape, and the
//! helpers that run a closure over blocks on the pool. Running compiled kernels over those blocks
//! (the pointer arithmetic of tiled, exact and split launches) is the host device's
//! (`device::host::run`).
//!
//! A kernel runs over `[0, n)` split into blocks (16 384 lanes by default, a per-launch choice so that
//! kernels with much work per lane can use smaller blocks). A single block runs inline on the calling
//! thread — no pool overhead for small work; more blocks run on kiln's own rayon pool (not the global
//! one, so a user's rayon tasks never wait behind kernel blocks). Size with `KILN_THREADS`.

use rayon::prelude::*;
use std::sync::OnceLock;

/// Default lanes per block.
pub const DEFAULT_BLOCK: usize = 16_384;
/// Lanes per block for a kernel of `insts` instructions: the default for light kernels, fewer
/// lanes for heavy ones so that their work still spreads over the cores (a block should hold
/// roughly the same amount of work, about 16 384 lanes × 16 instructions).
pub fn block_for(insts: usize) -> usize {
    const WORK: usize = DEFAULT_BLOCK * 16;
    (WORK / insts.max(1)).clamp(MIN_BLOCK, DEFAULT_BLOCK)
}
/// The block size of a kernel with loops: each lane may do much work, so even a few thousand
/// lanes are split so that every core gets several blocks.
pub fn loop_block(n: usize) -> usize {
    let threads = pool().current_num_threads().max(1);
    // a multiple of 64 lanes: whole unrolled iterations (up to 16 vectors of four), so that only
    // the launch's last block runs the one-vector remainder loop
    (n / (threads * 4))
        .next_multiple_of(64)
        .clamp(64, DEFAULT_BLOCK)
}

/// The smallest block [`block_for`] picks (below it, handing work to the pool costs more than it
/// saves).
pub const MIN_BLOCK: usize = 512;

/// Blocks start at multiples of this many lanes (the widest vector any backend uses).
pub const BLOCK_ALIGN: usize = 16;

pub(crate) fn pool() -> &'static rayon::ThreadPool {
    static POOL: OnceLock<rayon::ThreadPool> = OnceLock::new();
    POOL.get_or_init(|| {
        crate::config::pool_started();
        let n = crate::config::threads();
        rayon::ThreadPoolBuilder::new()
            .num_threads(n.max(1))
            .thread_name(|i| format!("kiln-{i}"))
            .build()
            .expect("kiln: could not start the thread pool")
    })
}

/// Number of worker threads.
pub fn threads() -> usize {
    pool().current_num_threads()
}

/// Run `f(start, end)` over `[0, n)` in blocks of `block` on the pool (inline for one block).
///
/// The block size is rounded up to a multiple of [`BLOCK_ALIGN`]: vector code writes whole vectors,
/// so concurrently running blocks must not share one.
pub fn for_blocks(n: usize, block: usize, f: impl Fn(usize, usize) + Send + Sync) {
    let block = block.max(1).next_multiple_of(BLOCK_ALIGN);
    if n == 0 {
        return;
    }
    if n <= block {
        f(0, n);
        return;
    }
    let blocks = n.div_ceil(block);
    pool().install(|| {
        (0..blocks).into_par_iter().for_each(|b| {
            let s = b * block;
            f(s, (s + block).min(n));
        })
    });
}

/// The smallest side (rows and columns) of a launch that runs tiled.
pub const TILE: usize = 64;

/// Whether a launch of `n` lanes can run in 2-d tiles of rows of `cols` lanes (every segment a
/// whole number of 4-lane vectors, so that no vector written crosses into another segment).
pub fn can_tile(n: usize, cols: usize) -> bool {
    cols >= TILE && cols % 4 == 0 && n % cols == 0 && n / cols >= TILE
}

/// Lanes of one row segment in a tiled launch: one AVX-512 vector of `f32` (two AVX2 ones).
///
/// Narrow, tall tiles suit a strided (transposed) source: a segment of 16 lanes reads 16 source
/// rows, each at one cache line, and the next rows of the band read the same 16 lines again (16
/// consecutive `f32` share a line), so every source line is fetched once per band. With 64-lane
/// segments the 64 lines a segment reads all sit 16 KiB apart (a 4096-wide `f32` source), i.e.
/// in one L1 set of 8 ways, and were evicted before the next row came back for them: measured on
/// an AVX-512 host (2 threads, 4096² `transpose * 2 + 1`), CPU time per call fell from 64 ms
/// (64 × 64 tiles) to 24 ms (16 lanes × 512 rows).
pub const TILE_LANES: usize = 16;

/// Map `f` over the blocks of `[0, n)` in parallel and return the per-block results in order.
pub fn map_blocks<R: Send>(
    n: usize,
    block: usize,
    f: impl Fn(usize, usize) -> R + Send + Sync,
) -> Vec<R> {
    let block = block.max(1);
    let blocks = n.div_ceil(block);
    if blocks <= 1 {
        return (0..blocks)
            .map(|b| f(b * block, n.min((b + 1) * block)))
            .collect();
    }
    pool().install(|| {
        (0..blocks)
            .into_par_iter()
            .map(|b| f(b * block, n.min((b + 1) * block)))
            .collect()
    })
}
