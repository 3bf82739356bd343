//! Stencil domains: which lanes of a kernel are *interior* (every relative read lands inside the
//! array, so it is a plain load at a constant distance from the lane) and which are *border*.
//!
//! The front end (`kiln::stencil`) traces a stencil into two registry-only ops (see `op`):
//! `Tap` (an input read at a relative offset: the source, plus the *general* value that applies
//! the boundary rule anywhere) and `Split` (a value that differs on the border, e.g. `cval`). Each
//! carries a [`StencilMeta`]: the domain's shape and the offsets it reads (`lo..=hi` per
//! dimension). The scheduler builds a group holding them twice: a *general* kernel in which both
//! ops are their general operand (correct at every lane), and an *interior* kernel in which a tap
//! is a `Load` of its source through a pointer shifted by the tap's flat offset and a split is its
//! fast operand. A [`SplitPlan`] — the box of interior lanes, computed from every meta the interior
//! kernel reads — tells the launch which lanes run which kernel. Shapes are launch data, not
//! kernel code: the same stencil on another grid size reuses both compiled kernels.

use std::sync::Arc;

/// The domain and reach of one `Tap` or `Split` node.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct StencilMeta {
    /// Row-major shape of the domain (the first relatively indexed input's).
    pub shape: Vec<usize>,
    /// Lowest offset read per dimension (a tap: its offset).
    pub lo: Vec<i64>,
    /// Highest offset read per dimension (a tap: its offset).
    pub hi: Vec<i64>,
}

impl StencilMeta {
    /// Bits that tell metas apart in the CSE table (two taps of one source at different offsets
    /// must stay two variables).
    pub fn key(&self) -> u64 {
        let mut bytes = Vec::with_capacity(8 * (self.shape.len() * 3 + 1));
        bytes.extend_from_slice(&(self.shape.len() as u64).to_le_bytes());
        for d in &self.shape {
            bytes.extend_from_slice(&(*d as u64).to_le_bytes());
        }
        for v in self.lo.iter().chain(&self.hi) {
            bytes.extend_from_slice(&v.to_le_bytes());
        }
        xxhash_rust::xxh3::xxh3_64(&bytes)
    }

    /// Flat distance of a tap at `lo` (its offset) in a row-major array of `shape`.
    pub fn flat_offset(&self) -> i64 {
        let mut stride = 1i64;
        let mut off = 0i64;
        for (d, &o) in self.shape.iter().zip(&self.lo).rev() {
            // (saturating: a tap that far out never reads through this offset, see `SplitPlan`)
            off = off.saturating_add(o.saturating_mul(stride));
            stride = stride.saturating_mul(*d as i64);
        }
        off
    }
}

/// Which lanes of a stencil kernel run the interior kernel: the box `start[d]..end[d]` of a
/// row-major `shape`. Every other lane is border and runs the general kernel.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SplitPlan {
    pub shape: Vec<usize>,
    pub start: Vec<usize>,
    pub end: Vec<usize>,
}

impl SplitPlan {
    /// The interior common to `metas` over a domain of `size` lanes, or `None` when they disagree on
    /// the shape (the group then runs its general kernel everywhere).
    pub fn new(size: usize, metas: &[Arc<StencilMeta>]) -> Option<SplitPlan> {
        let first = metas.first()?;
        let shape = first.shape.clone();
        if shape.is_empty() || shape.iter().product::<usize>() != size {
            return None;
        }
        let mut start = vec![0usize; shape.len()];
        let mut end = shape.clone();
        for m in metas {
            if m.shape != shape || m.lo.len() != shape.len() || m.hi.len() != shape.len() {
                return None;
            }
            for d in 0..shape.len() {
                let below = (-m.lo[d]).max(0) as u64;
                let above = m.hi[d].max(0) as u64;
                start[d] = start[d].max(below.min(shape[d] as u64) as usize);
                end[d] = end[d].min((shape[d] as u64).saturating_sub(above) as usize);
            }
        }
        Some(SplitPlan { shape, start, end })
    }

    /// Total lanes.
    pub fn size(&self) -> usize {
        self.shape.iter().product()
    }

    /// Whether no lane is interior.
    pub fn interior_is_empty(&self) -> bool {
        self.start.iter().zip(&self.end).any(|(s, e)| s >= e)
    }

    /// Lanes in the interior's rows (the last dimension's interior length).
    pub fn row_len(&self) -> usize {
        if self.interior_is_empty() {
            0
        } else {
            self.end[self.end.len() - 1] - self.start[self.start.len() - 1]
        }
    }

    /// Number of interior lanes.
    pub fn interior_lanes(&self) -> usize {
        if self.interior_is_empty() {
            return 0;
        }
        self.start
            .iter()
            .zip(&self.end)
            .map(|(s, e)| e - s)
            .product()
    }

    /// First and last interior lane (flat), if any.
    pub fn first_last(&self) -> Option<(usize, usize)> {
        if self.interior_is_empty() {
            return None;
        }
        let flat = |idx: &[usize]| idx.iter().zip(&self.shape).fold(0, |f, (&i, &d)| f * d + i);
        let last: Vec<usize> = self.end.iter().map(|e| e - 1).collect();
        Some((flat(&self.start), flat(&last)))
    }

    /// Whether running the interior apart pays: its contiguous runs are at least 16 lanes long
    /// when there is one run, or when an interior run may cross the short border gaps between
    /// them (`through_gaps`, see `device::host::run::launch_split`: each row then costs only a
    /// small general-kernel call over its gap), else at least 64 (each row is a call of its
    /// own). Shorter runs cost more than the general kernel everywhere. Measured on heat steps (`u + 0.2·lap(u)`, 1M points,
    /// AVX-512 host): 16384×64 took 2.4 ms a step with the general kernel everywhere, 1.1 ms
    /// split; 32768×32, 2.4 against 2.1 ms.
    pub fn worth_splitting(&self, through_gaps: bool) -> bool {
        if self.interior_is_empty() {
            return false;
        }
        let (k, len) = self.segment();
        let inner: usize = self.shape[k + 1..].iter().product();
        let gap = (self.shape[k] - (self.end[k] - self.start[k])) * inner;
        // (k = 0: one segment, no gap at all)
        len >= if k == 0 || (through_gaps && gap < 16) {
            16
        } else {
            64
        }
    }

    /// The interior as contiguous segments: the dimension `k` whose range starts each segment
    /// (every later dimension is wholly interior, so its rows touch) and the segment length.
    fn segment(&self) -> (usize, usize) {
        let rank = self.shape.len();
        let mut k = rank - 1;
        while k > 0 && self.start[k] == 0 && self.end[k] == self.shape[k] {
            k -= 1;
        }
        let inner: usize = self.shape[k + 1..].iter().product();
        (k, (self.end[k] - self.start[k]) * inner)
    }

    /// Call `f(start, len)` for every contiguous run of interior lanes, in increasing order.
    pub fn for_each_interior_segment(&self, mut f: impl FnMut(usize, usize)) {
        if self.interior_is_empty() {
            return;
        }
        let (k, len) = self.segment();
        let inner: usize = self.shape[k..].iter().product();
        let below: usize = self.shape[k + 1..].iter().product();
        let mut idx: Vec<usize> = self.start[..k].to_vec();
        loop {
            let outer = idx
                .iter()
                .zip(&self.shape[..k])
                .fold(0, |f, (&i, &d)| f * d + i);
            f(outer * inner + self.start[k] * below, len);
            let mut d = k;
            loop {
                if d == 0 {
                    return;
                }
                d -= 1;
                idx[d] += 1;
                if idx[d] < self.end[d] {
                    break;
                }
                idx[d] = self.start[d];
            }
        }
    }

    /// The border lanes as merged half-open ranges, in increasing order.
    pub fn border_segments(&self) -> Vec<(usize, usize)> {
        let n = self.size();
        if self.interior_is_empty() {
            return if n == 0 { Vec::new() } else { vec![(0, n)] };
        }
        let mut segs: Vec<(usize, usize)> = Vec::new();
        let mut at = 0usize;
        self.for_each_interior_segment(|s, len| {
            if s > at {
                segs.push((at, s));
            }
            at = s + len;
        });
        if at < n {
            segs.push((at, n));
        }
        segs
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta(shape: &[usize], lo: &[i64], hi: &[i64]) -> Arc<StencilMeta> {
        Arc::new(StencilMeta {
            shape: shape.to_vec(),
            lo: lo.to_vec(),
            hi: hi.to_vec(),
        })
    }

    #[test]
    fn laplacian_box_rows_and_border() {
        let m = [meta(&[4, 5], &[-1, -1], &[1, 1])];
        let p = SplitPlan::new(20, &m).unwrap();
        assert_eq!((p.start.clone(), p.end.clone()), (vec![1, 1], vec![3, 4]));
        let mut segs = Vec::new();
        p.for_each_interior_segment(|s, l| segs.push((s, l)));
        assert_eq!(segs, vec![(6, 3), (11, 3)]);
        assert_eq!(p.row_len(), 3);
        assert_eq!(p.border_segments(), vec![(0, 6), (9, 11), (14, 20)]);
        assert_eq!(p.first_last(), Some((6, 13)));
        assert_eq!(p.interior_lanes(), 6);
    }

    #[test]
    fn one_sided_neighbourhoods() {
        // positive only: the border is at the end
        let p = SplitPlan::new(60, &[meta(&[60], &[5], &[10])]).unwrap();
        assert_eq!((p.start[0], p.end[0]), (0, 50));
        assert_eq!(p.border_segments(), vec![(50, 60)]);
        // negative only: at the start
        let p = SplitPlan::new(60, &[meta(&[60], &[-10], &[-5])]).unwrap();
        assert_eq!(p.border_segments(), vec![(0, 10)]);
    }

    #[test]
    fn too_small_is_all_border_and_mixed_shapes_refuse() {
        let p = SplitPlan::new(4, &[meta(&[2, 2], &[-1, -1], &[1, 1])]).unwrap();
        assert!(p.interior_is_empty());
        assert_eq!(p.border_segments(), vec![(0, 4)]);
        let mut none = true;
        p.for_each_interior_segment(|_, _| none = false);
        assert!(none);
        let mixed = [
            meta(&[4, 6], &[0, 0], &[0, 0]),
            meta(&[6, 4], &[0, 0], &[0, 0]),
        ];
        assert!(SplitPlan::new(24, &mixed).is_none());
        assert!(SplitPlan::new(25, &[meta(&[4, 6], &[0, 0], &[0, 0])]).is_none());
    }

    #[test]
    fn three_d_rows_skip_border_planes() {
        let p = SplitPlan::new(64, &[meta(&[4, 8, 2], &[0, 0, 0], &[0, 1, 0])]).unwrap();
        // rows (i, j) with j < 7, each of 2 lanes: 7 rows touch, one segment of 14 per plane
        let mut segs = Vec::new();
        p.for_each_interior_segment(|s, l| segs.push((s, l)));
        assert_eq!(segs, vec![(0, 14), (16, 14), (32, 14), (48, 14)]);
        assert_eq!(p.border_segments()[0], (14, 16));
        assert_eq!(p.interior_lanes(), 56);
    }

    #[test]
    fn segments_merge_rows_whose_last_dimensions_are_whole() {
        let segs = |p: &SplitPlan| {
            let mut v = Vec::new();
            p.for_each_interior_segment(|s, l| v.push((s, l)));
            v
        };
        // only dimension 0 has a border: one segment
        let p = SplitPlan::new(60, &[meta(&[6, 10], &[-1, 0], &[1, 0])]).unwrap();
        assert_eq!(segs(&p), vec![(10, 40)]);
        assert!(p.worth_splitting(false)); // 40 lanes, one call

        // a border in the last dimension: one segment per row, like the rows
        let p = SplitPlan::new(20, &[meta(&[4, 5], &[-1, -1], &[1, 1])]).unwrap();
        assert_eq!(segs(&p), vec![(6, 3), (11, 3)]);
        // 3-d with the middle dimension bordered and the last whole
        let p = SplitPlan::new(64, &[meta(&[4, 8, 2], &[0, -1, 0], &[0, 0, 0])]).unwrap();
        assert_eq!(segs(&p), vec![(2, 14), (18, 14), (34, 14), (50, 14)]);
        let p = SplitPlan::new(1 << 20, &[meta(&[1 << 20, 1], &[-1, 0], &[1, 0])]).unwrap();
        assert_eq!(segs(&p), vec![(1, (1 << 20) - 2)]);
        assert!(p.worth_splitting(false));
        // rows of 28 interior lanes behind gaps of 2: worth it only when runs cross the gaps
        let p = SplitPlan::new(300, &[meta(&[10, 30], &[-1, -1], &[1, 1])]).unwrap();
        assert!(p.worth_splitting(true) && !p.worth_splitting(false));
        // gaps of 16 lanes or more are never crossed: rows of 60 do not pay
        let p = SplitPlan::new(760, &[meta(&[10, 76], &[0, -8], &[0, 8])]).unwrap();
        assert!(!p.worth_splitting(true));
    }

    #[test]
    fn flat_offsets() {
        let m = StencilMeta {
            shape: vec![3, 4, 5],
            lo: vec![1, -1, 2],
            hi: vec![1, -1, 2],
        };
        assert_eq!(m.flat_offset(), 20 - 5 + 2);
    }
}
