//! In-place permutations (update-in-place of transposes and flips) on the host.

use super::super::*;
use crate::launch;
use crate::registry::Buffer;
use crate::stats;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Instant;

// ---------------------------------------------------------------------------------------------
// In-place permutations (update-in-place of transposes and flips)

/// A raw pointer the permutation tasks share; each task touches elements no other task does.
#[derive(Clone, Copy)]
struct Shared<T>(*mut T);
impl<T> Shared<T> {
    /// The pointer (a method, so that closures capture the whole `Send` wrapper, not the field).
    fn at(self, i: usize) -> *mut T {
        self.0.wrapping_add(i)
    }
}
// SAFETY: the tasks of one permutation write disjoint elements (see each use).
unsafe impl<T> Send for Shared<T> {}
// SAFETY: as above.
unsafe impl<T> Sync for Shared<T> {}

/// Rearrange `buf`'s elements as `p` says, in place. The caller guarantees that nothing else can
/// see the buffer while this runs (a uniquely held array) and that `p.elements() == buf.len`.
pub(in crate::device) fn permute_in_place(buf: &Buffer, p: Permutation) {
    assert_eq!(p.elements(), Some(buf.len), "permutation of another length");
    let t = Instant::now();
    // on kiln's own pool, like kernel blocks
    launch::pool().install(|| match buf.ty().size_bytes() {
        1 => permute_typed::<u8>(buf, p),
        2 => permute_typed::<u16>(buf, p),
        4 => permute_typed::<u32>(buf, p),
        _ => permute_typed::<u64>(buf, p),
    });
    stats::DEVICE_OPS.fetch_add(1, Relaxed);
    stats::RUN_NS.fetch_add(t.elapsed().as_nanos() as u64, Relaxed);
}

fn permute_typed<T: Copy + Default + Send + Sync>(buf: &Buffer, p: Permutation) {
    use rayon::prelude::*;
    debug_assert_eq!(std::mem::size_of::<T>(), buf.ty().size_bytes());
    let base = Shared(buf.ptr() as *mut T);
    match p {
        Permutation::Transpose { rows, cols } if rows == cols => {
            let n = rows;
            const TILE: usize = 32;
            let tiles = n.div_ceil(TILE);
            // every pair of tiles (a, b) with a <= b trades places with its mirror image, so the
            // tasks touch disjoint elements. Both tiles are copied row by row into local arrays
            // and written back transposed, row by row: every access to the matrix runs along a
            // row (prefetchable), and the transposition happens in L1.
            (0..tiles * tiles)
                .into_par_iter()
                .filter(|k| k / tiles <= k % tiles)
                .for_each(|k| {
                    let (ta, tb) = (k / tiles, k % tiles);
                    let (r0, r1) = (ta * TILE, ((ta + 1) * TILE).min(n));
                    let (c0, c1) = (tb * TILE, ((tb + 1) * TILE).min(n));
                    let (h, w) = (r1 - r0, c1 - c0);
                    let mut a = [T::default(); TILE * TILE];
                    let mut b = [T::default(); TILE * TILE];
                    // (rows and columns stay below n, so every offset below lies inside the n·n
                    // elements; tile (ta, tb) and its mirror (tb, ta) belong to this task only)
                    for i in 0..h {
                        let src =
                            // SAFETY: a run of one tile's row inside the matrix, touched by this task alone.
                            unsafe { std::slice::from_raw_parts(base.at((r0 + i) * n + c0), w) };
                        a[i * TILE..i * TILE + w].copy_from_slice(src);
                    }
                    if ta != tb {
                        for i in 0..w {
                            // SAFETY: a run of one tile's row inside the matrix, touched by this task alone.
                            let src = unsafe {
                                std::slice::from_raw_parts(base.at((c0 + i) * n + r0), h)
                            };
                            b[i * TILE..i * TILE + h].copy_from_slice(src);
                        }
                    } else {
                        b = a;
                    }
                    // tile (ta, tb) gets the mirror's transpose, the mirror gets this one's
                    for i in 0..h {
                        // SAFETY: a run of one tile's row inside the matrix, touched by this task alone.
                        let dst = unsafe {
                            std::slice::from_raw_parts_mut(base.at((r0 + i) * n + c0), w)
                        };
                        for (j, d) in dst.iter_mut().enumerate() {
                            *d = b[j * TILE + i];
                        }
                    }
                    if ta != tb {
                        for i in 0..w {
                            // SAFETY: a run of one tile's row inside the matrix, touched by this task alone.
                            let dst = unsafe {
                                std::slice::from_raw_parts_mut(base.at((c0 + i) * n + r0), h)
                            };
                            for (j, d) in dst.iter_mut().enumerate() {
                                *d = a[j * TILE + i];
                            }
                        }
                    }
                });
        }
        Permutation::Transpose { rows, cols } => {
            // the element at k = i·cols + j goes to j·rows + i = k·rows mod (N − 1); follow each
            // cycle once (a bit per element says which are done)
            let n = rows * cols;
            if n < 3 {
                return;
            }
            let m = n - 1;
            let mut done = vec![0u64; n.div_ceil(64)];
            let dest = |k: usize| ((k as u128 * rows as u128) % m as u128) as usize;
            for start in 1..m {
                if done[start / 64] >> (start % 64) & 1 == 1 {
                    continue;
                }
                // SAFETY: start < n; the buffer is held by this call alone.
                let mut carried = unsafe { *base.at(start) };
                let mut k = start;
                loop {
                    let to = dest(k);
                    done[to / 64] |= 1 << (to % 64);
                    // SAFETY: to < m < n.
                    unsafe { std::ptr::swap(base.at(to), &mut carried) };
                    k = to;
                    if k == start {
                        break;
                    }
                }
            }
        }
        Permutation::Flip { outer, len, inner } => {
            let half = len / 2;
            // each (block, k) pair swaps row k with row len−1−k of its block: disjoint elements
            (0..outer * half).into_par_iter().for_each(|t| {
                let (o, k) = (t / half, t % half);
                let a = (o * len + k) * inner;
                let b = (o * len + (len - 1 - k)) * inner;
                // SAFETY: k < len − 1 − k < len, so both runs of `inner` elements lie inside the
                // block and do not overlap.
                unsafe { std::ptr::swap_nonoverlapping(base.at(a), base.at(b), inner) };
            });
        }
    }
}
