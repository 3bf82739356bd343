//! Reductions of evaluated buffers on the host (whole, several in one pass, per block), prefix
//! sums and compaction.

use crate::error::Result;
use crate::launch;
use crate::op::{eval_reduce, reduce_identity, ReduceOp};
use crate::registry::Buffer;
use crate::ty::VarType;

/// Element `i` of a buffer as bits. Callers pass `i < buf.len`.
pub(super) fn elem(buf: &Buffer, i: usize) -> u64 {
    debug_assert!(i < buf.len);
    // SAFETY: i < buf.len (caller contract), so the element lies inside the buffer.
    unsafe { crate::backend::read_bits(buf.ptr(), buf.ty(), i) }
}

/// Write element `i`. Callers pass `i < buf.len` and own element `i` (disjoint ranges per thread).
pub(super) fn set_elem(buf: &Buffer, i: usize, v: u64) {
    debug_assert!(i < buf.len);
    // SAFETY: i < buf.len and no other thread writes element i (caller contract).
    unsafe { crate::backend::write_bits(buf.ptr(), buf.ty(), i, v) }
}

/// A reduction in progress over consecutive pieces of one range. Feeding pieces whose lengths are
/// multiples of 16 (all but the last) gives the same bits as feeding the whole range at once, so a
/// fused reduction that produces its input piece by piece agrees with one over an evaluated array.
/// The smallest (or largest) float of a run given as bits, as IEEE 754-2019 `minimum` /
/// `maximum` over it would give, or `None` when the run holds a NaN (the caller then takes the
/// exact path, which propagates it). Plain float comparisons vectorise (`vminpd`); the one case
/// they get wrong, −0 against +0, is settled from two flags: a zero result is −0 for a minimum
/// when the run holds a −0, +0 for a maximum when it holds a +0.
macro_rules! float_extreme {
    ($name:ident, $imp:ident, $f:ty, $bits:ty, $lanes:expr) => {
        fn $name(xs: &[$bits], max: bool) -> Option<$bits> {
            if max {
                $imp::<true>(xs)
            } else {
                $imp::<false>(xs)
            }
        }
        fn $imp<const MAX: bool>(xs: &[$bits]) -> Option<$bits> {
            const SIGN: $bits = 1 << (<$bits>::BITS - 1);
            let init = if MAX {
                <$f>::NEG_INFINITY
            } else {
                <$f>::INFINITY
            };
            let mut acc = [init; $lanes];
            // per lane: the sum of v − v, which stays 0 unless a NaN (or an infinity) comes by
            let mut check = [0.0 as $f; $lanes];
            // (one compare and a blend per element; zeros of either sign compare equal and are
            // settled afterwards)
            let pick = |a: $f, v: $f| {
                if MAX {
                    if v > a {
                        v
                    } else {
                        a
                    }
                } else if v < a {
                    v
                } else {
                    a
                }
            };
            let chunks = xs.chunks_exact($lanes);
            let rest = chunks.remainder();
            for c in chunks {
                for l in 0..$lanes {
                    let v = <$f>::from_bits(c[l]);
                    check[l] += v - v;
                    acc[l] = pick(acc[l], v);
                }
            }
            let mut best = init;
            let mut sum = 0.0 as $f;
            for &b in rest {
                let v = <$f>::from_bits(b);
                sum += v - v;
                best = pick(best, v);
            }
            for l in 0..$lanes {
                sum += check[l];
                best = pick(best, acc[l]);
            }
            if sum != 0.0 {
                // a NaN, or an infinity: the NaN check again, exactly
                if xs.iter().any(|&b| <$f>::from_bits(b).is_nan()) {
                    return None;
                }
            }
            if best == 0.0 {
                // −0 for a minimum when the run holds a −0, +0 for a maximum when it holds a +0
                let negative = if MAX {
                    !xs.iter().any(|&b| b == 0)
                } else {
                    xs.iter().any(|&b| b == SIGN)
                };
                return Some(if negative { SIGN } else { 0 });
            }
            Some(best.to_bits())
        }
    };
}
float_extreme!(extreme_f32, extreme_f32_as, f32, u32, 16);
float_extreme!(extreme_f64, extreme_f64_as, f64, u64, 8);

/// The minimum and the maximum of a run in one loop over it (what `extreme_*` gives for each:
/// `None` where that one falls back to the exact path), for a minimum and a maximum of one
/// buffer reduced together (`normalize`).
///
/// kiln-core is compiled for the baseline x86-64 (two f64 per SSE2 instruction), which made this
/// loop compute-bound (`normalize` on 1.8 GB: 138 ms against 63 ms for one memory pass); the same
/// body is therefore also compiled for AVX2 and picked at run time where the CPU has it (the
/// operations are the same IEEE compares and adds lane by lane, so the bits are too).
macro_rules! float_min_max {
    ($name:ident, $generic:ident, $avx2:ident, $f:ty, $bits:ty, $lanes:expr) => {
        fn $name(xs: &[$bits]) -> Option<($bits, $bits)> {
            #[cfg(target_arch = "x86_64")]
            if std::arch::is_x86_feature_detected!("avx2") {
                // SAFETY: the CPU supports AVX2 (checked just above), the only requirement of a
                // `target_feature(enable = "avx2")` function.
                return unsafe { $avx2(xs) };
            }
            $generic(xs)
        }
        #[cfg(target_arch = "x86_64")]
        #[target_feature(enable = "avx2")]
        fn $avx2(xs: &[$bits]) -> Option<($bits, $bits)> {
            $generic(xs)
        }
        #[inline(always)]
        fn $generic(xs: &[$bits]) -> Option<($bits, $bits)> {
            const SIGN: $bits = 1 << (<$bits>::BITS - 1);
            let mut lo = [<$f>::INFINITY; $lanes];
            let mut hi = [<$f>::NEG_INFINITY; $lanes];
            let mut check = [0.0 as $f; $lanes];
            let chunks = xs.chunks_exact($lanes);
            let rest = chunks.remainder();
            for c in chunks {
                for l in 0..$lanes {
                    let v = <$f>::from_bits(c[l]);
                    check[l] += v - v;
                    lo[l] = if v < lo[l] { v } else { lo[l] };
                    hi[l] = if v > hi[l] { v } else { hi[l] };
                }
            }
            let (mut bl, mut bh, mut sum) = (<$f>::INFINITY, <$f>::NEG_INFINITY, 0.0 as $f);
            for &b in rest {
                let v = <$f>::from_bits(b);
                sum += v - v;
                bl = if v < bl { v } else { bl };
                bh = if v > bh { v } else { bh };
            }
            for l in 0..$lanes {
                sum += check[l];
                bl = if lo[l] < bl { lo[l] } else { bl };
                bh = if hi[l] > bh { hi[l] } else { bh };
            }
            if sum != 0.0 && xs.iter().any(|&b| <$f>::from_bits(b).is_nan()) {
                return None;
            }
            let lo_bits = if bl == 0.0 {
                if xs.iter().any(|&b| b == SIGN) {
                    SIGN
                } else {
                    0
                }
            } else {
                bl.to_bits()
            };
            let hi_bits = if bh == 0.0 {
                if xs.iter().any(|&b| b == 0) {
                    0
                } else {
                    SIGN
                }
            } else {
                bh.to_bits()
            };
            Some((lo_bits, hi_bits))
        }
    };
}
float_min_max!(
    min_max_f32,
    min_max_f32_generic,
    min_max_f32_avx2,
    f32,
    u32,
    16
);
float_min_max!(
    min_max_f64,
    min_max_f64_generic,
    min_max_f64_avx2,
    f64,
    u64,
    8
);

/// Feed elements `s..e` of `buf` to a minimum and a maximum accumulator of it in one pass (the
/// bits `Accum::feed` gives each).
fn feed_min_max(lo: &mut Accum, hi: &mut Accum, buf: &Buffer, s: usize, e: usize) {
    // SAFETY: the buffer holds buf.len >= e initialised elements of its type.
    let pair = match buf.ty() {
        VarType::F32 => {
            let xs = unsafe { std::slice::from_raw_parts(buf.ptr() as *const u32, buf.len) };
            min_max_f32(&xs[s..e]).map(|(a, b)| (a as u64, b as u64))
        }
        VarType::F64 => {
            let xs = unsafe { std::slice::from_raw_parts(buf.ptr() as *const u64, buf.len) };
            min_max_f64(&xs[s..e])
        }
        _ => None,
    };
    match pair {
        Some((a, b)) => {
            lo.bits = eval_reduce(lo.op, lo.ty, lo.bits, a);
            hi.bits = eval_reduce(hi.op, hi.ty, hi.bits, b);
        }
        None => {
            lo.feed(buf, s, e);
            hi.feed(buf, s, e);
        }
    }
}

/// Typed fast paths for the hot reductions (sum of f32/f64, count of masks); others use bit-level
/// `eval_reduce`, which defines the semantics.
pub(super) struct Accum {
    op: ReduceOp,
    ty: VarType,
    f32s: [f32; 16],
    f64s: [f64; 8],
    /// Sum of the elements after the last whole group (f32/f64 sums) or the running value.
    tail: f64,
    bits: u64,
}

impl Accum {
    pub(super) fn new(op: ReduceOp, ty: VarType) -> Accum {
        Accum {
            op,
            ty,
            f32s: [0.0; 16],
            f64s: [0.0; 8],
            tail: 0.0,
            bits: reduce_identity(op, ty),
        }
    }

    /// Add elements `s..e` of `buf`.
    pub(super) fn feed(&mut self, buf: &Buffer, s: usize, e: usize) {
        // SAFETY (all slices below): the buffer holds buf.len >= e initialised elements of the type.
        match (self.op, self.ty) {
            (ReduceOp::Add, VarType::F32) => {
                let xs = unsafe { std::slice::from_raw_parts(buf.ptr() as *const f32, buf.len) };
                let chunks = xs[s..e].chunks_exact(16);
                self.tail += chunks.remainder().iter().map(|&v| v as f64).sum::<f64>();
                // a local copy stays in registers through the hot loop
                let mut acc = self.f32s;
                for c in chunks {
                    for (a, v) in acc.iter_mut().zip(c) {
                        *a += v;
                    }
                }
                self.f32s = acc;
            }
            (ReduceOp::Add, VarType::F64) => {
                let xs = unsafe { std::slice::from_raw_parts(buf.ptr() as *const f64, buf.len) };
                let chunks = xs[s..e].chunks_exact(8);
                self.tail += chunks.remainder().iter().sum::<f64>();
                let mut acc = self.f64s;
                for c in chunks {
                    for (a, v) in acc.iter_mut().zip(c) {
                        *a += v;
                    }
                }
                self.f64s = acc;
            }
            (ReduceOp::Add, VarType::Bool) => {
                let xs = unsafe { std::slice::from_raw_parts(buf.ptr(), buf.len) };
                self.bits += xs[s..e].iter().map(|&b| (b & 1) as u64).sum::<u64>();
            }
            (ReduceOp::Or | ReduceOp::Max, VarType::Bool) => {
                // masks hold 0 or 1: "any" is "some byte is not 0" (vectorises)
                let xs = unsafe { std::slice::from_raw_parts(buf.ptr(), buf.len) };
                self.bits |= u64::from(xs[s..e].iter().fold(0u8, |a, &b| a | b) & 1);
            }
            (ReduceOp::And | ReduceOp::Min, VarType::Bool) => {
                let xs = unsafe { std::slice::from_raw_parts(buf.ptr(), buf.len) };
                self.bits &= u64::from(xs[s..e].iter().fold(1u8, |a, &b| a & b) & 1);
            }
            (ReduceOp::Min | ReduceOp::Max, VarType::F32) => {
                let xs = unsafe { std::slice::from_raw_parts(buf.ptr() as *const u32, buf.len) };
                match extreme_f32(&xs[s..e], self.op == ReduceOp::Max) {
                    Some(v) => self.bits = eval_reduce(self.op, self.ty, self.bits, v as u64),
                    None => self.feed_exact(buf, s, e),
                }
            }
            (ReduceOp::Min | ReduceOp::Max, VarType::F64) => {
                let xs = unsafe { std::slice::from_raw_parts(buf.ptr() as *const u64, buf.len) };
                match extreme_f64(&xs[s..e], self.op == ReduceOp::Max) {
                    Some(v) => self.bits = eval_reduce(self.op, self.ty, self.bits, v),
                    None => self.feed_exact(buf, s, e),
                }
            }
            _ => self.feed_exact(buf, s, e),
        }
    }

    /// Elements `s..e` one at a time through `eval_reduce` (the definition).
    pub(super) fn feed_exact(&mut self, buf: &Buffer, s: usize, e: usize) {
        for i in s..e {
            self.bits = eval_reduce(self.op, self.ty, self.bits, elem(buf, i));
        }
    }

    pub(super) fn finish(&self) -> u64 {
        match (self.op, self.ty) {
            (ReduceOp::Add, VarType::F32) => {
                let t: f64 = self.f32s.iter().map(|&v| v as f64).sum::<f64>() + self.tail;
                (t as f32).to_bits() as u64
            }
            (ReduceOp::Add, VarType::F64) => (self.f64s.iter().sum::<f64>() + self.tail).to_bits(),
            _ => self.bits,
        }
    }
}

/// Reduce elements `s..e` of `buf` to bits.
pub(super) fn reduce_range(op: ReduceOp, buf: &Buffer, s: usize, e: usize) -> u64 {
    let mut acc = Accum::new(op, buf.ty());
    acc.feed(buf, s, e);
    acc.finish()
}

/// Combine per-block partial results (f32 partials were carried as f32 bits). Float sums start
/// at +0.0, the identity `reduce_identity` gives: `Iterator::sum` of floats starts at -0.0, which
/// made the sum of an empty f32 array -0.0 (NumPy and f64 give +0.0).
pub(super) fn combine(op: ReduceOp, ty: VarType, parts: &[u64]) -> u64 {
    match (op, ty) {
        (ReduceOp::Add, VarType::F32) => (parts
            .iter()
            .fold(0.0f64, |a, &b| a + f32::from_bits(b as u32) as f64)
            as f32)
            .to_bits() as u64,
        (ReduceOp::Add, VarType::Bool) => parts.iter().sum(),
        _ => parts
            .iter()
            .fold(reduce_identity(op, ty), |a, &b| eval_reduce(op, ty, a, b)),
    }
}

const RED_BLOCK: usize = 1 << 16;

/// Reduce a whole buffer to one value (bits). For `Bool` with `Add`, the count of true lanes.
/// This reads the result to the host (a `Read` op for observers).
pub(in crate::device) fn reduce_bits(op: ReduceOp, buf: &Buffer) -> u64 {
    let parts = launch::map_blocks(buf.len, RED_BLOCK, |s, e| reduce_range(op, buf, s, e));
    combine(op, buf.ty(), &parts)
}

/// Reduce a buffer to a size-1 buffer (no host read of the data).
pub(in crate::device) fn reduce(op: ReduceOp, buf: &Buffer) -> Result<Buffer> {
    let parts = launch::map_blocks(buf.len, RED_BLOCK, |s, e| reduce_range(op, buf, s, e));
    let out = Buffer::new(buf.ty(), 1, &|| "a reduction result".into())?;
    set_elem(&out, 0, combine(op, buf.ty(), &parts));
    Ok(out)
}

/// Reduce each block of `block` consecutive elements (a partial last block too).
pub(in crate::device) fn block_reduce(op: ReduceOp, buf: &Buffer, block: usize) -> Result<Buffer> {
    let n_out = buf.len.div_ceil(block);
    let out = Buffer::new(buf.ty(), n_out, &|| {
        format!("block reduction output of {n_out} × {}", buf.ty())
    })?;
    let per_task = (RED_BLOCK / block).max(1);
    launch::for_blocks(n_out, per_task, |s, e| {
        for o in s..e {
            let v = reduce_range(op, buf, o * block, ((o + 1) * block).min(buf.len));
            set_elem(&out, o, v);
        }
    });
    Ok(out)
}

/// Inclusive or exclusive prefix sum (wrapping for integers, IEEE for floats; bools count as 0/1 into u32).
pub(in crate::device) fn prefix_sum(buf: &Buffer, exclusive: bool) -> Result<Buffer> {
    let ty = buf.ty();
    let out = Buffer::new(ty, buf.len, &|| format!("prefix sum of {} × {ty}", buf.len))?;
    let add = |a: u64, b: u64| crate::op::eval_binary(crate::op::Op::Add, ty, a, b);
    let totals = launch::map_blocks(buf.len, RED_BLOCK, |s, e| {
        let mut acc = 0u64;
        for i in s..e {
            acc = add(acc, elem(buf, i));
        }
        acc
    });
    let mut offsets = Vec::with_capacity(totals.len());
    let mut run = 0u64;
    for t in &totals {
        offsets.push(run);
        run = add(run, *t);
    }
    launch::map_blocks(buf.len, RED_BLOCK, |s, e| {
        let mut acc = offsets[s / RED_BLOCK];
        for i in s..e {
            let v = elem(buf, i);
            if exclusive {
                set_elem(&out, i, acc);
                acc = add(acc, v);
            } else {
                acc = add(acc, v);
                set_elem(&out, i, acc);
            }
        }
    });
    Ok(out)
}

/// Indices (u32) of the true lanes of a mask, in order.
pub(in crate::device) fn compress(buf: &Buffer) -> Result<Buffer> {
    // SAFETY: the mask buffer holds buf.len bytes.
    let xs = unsafe { std::slice::from_raw_parts(buf.ptr(), buf.len) };
    let counts = launch::map_blocks(buf.len, RED_BLOCK, |s, e| {
        xs[s..e].iter().filter(|&&b| b & 1 != 0).count()
    });
    let total: usize = counts.iter().sum();
    let out = Buffer::new(VarType::U32, total, &|| {
        format!("compress output of {total} indices")
    })?;
    let mut offsets = Vec::with_capacity(counts.len());
    let mut run = 0;
    for c in &counts {
        offsets.push(run);
        run += c;
    }
    launch::map_blocks(buf.len, RED_BLOCK, |s, e| {
        let mut o = offsets[s / RED_BLOCK];
        for (i, &b) in xs[s..e].iter().enumerate() {
            if b & 1 != 0 {
                set_elem(&out, o, (s + i) as u64);
                o += 1;
            }
        }
    });
    Ok(out)
}

/// Elements each buffer feeds its accumulator at a time in [`reduce_many`]: a multiple of 16
/// (pieces of one block reduce to the bits of the whole block) small enough that a piece read
/// for one reduction is still in the L1 cache for the next.
const MANY_PIECE: usize = 2048;

/// Reduce evaluated buffers of one length in one pass: block by block as [`reduce`] does, each
/// block read piece by piece into every reduction, so memory is read once for all of them (a
/// minimum and a maximum of one array: one pass). Each result has the bits [`reduce`] gives.
pub(in crate::device) fn reduce_many(reds: &[(ReduceOp, &Buffer)]) -> Result<Vec<Buffer>> {
    let n = reds.first().map_or(0, |r| r.1.len);
    assert!(
        reds.iter().all(|r| r.1.len == n),
        "kiln internal error: reduce_many over buffers of different lengths"
    );
    // partner[j]: the maximum that goes with minimum j over the same float buffer (and back)
    let mut partner: Vec<Option<usize>> = vec![None; reds.len()];
    for j in 0..reds.len() {
        let (op, b) = reds[j];
        if op != ReduceOp::Min || !matches!(b.ty(), VarType::F32 | VarType::F64) {
            continue;
        }
        if let Some(k) = (0..reds.len()).find(|&k| {
            partner[k].is_none() && reds[k].0 == ReduceOp::Max && std::ptr::eq(reds[k].1, b)
        }) {
            partner[j] = Some(k);
            partner[k] = Some(j);
        }
    }
    let partner = &partner;
    let parts = launch::map_blocks(n, RED_BLOCK, |s, e| {
        let mut accs: Vec<Accum> = reds.iter().map(|&(op, b)| Accum::new(op, b.ty())).collect();
        let mut p = s;
        while p < e {
            let q = (p + MANY_PIECE).min(e);
            for j in 0..reds.len() {
                if let Some(k) = partner[j] {
                    if j < k {
                        // a float minimum and maximum of one buffer: one loop for both
                        let (a, b) = accs.split_at_mut(k);
                        let (first, second) = (&mut a[j], &mut b[0]);
                        let (lo, hi) = if reds[j].0 == ReduceOp::Min {
                            (first, second)
                        } else {
                            (second, first)
                        };
                        feed_min_max(lo, hi, reds[j].1, p, q);
                    }
                    continue;
                }
                accs[j].feed(reds[j].1, p, q);
            }
            p = q;
        }
        accs.iter().map(Accum::finish).collect::<Vec<u64>>()
    });
    let mut outs = Vec::with_capacity(reds.len());
    for (j, &(op, b)) in reds.iter().enumerate() {
        let col: Vec<u64> = parts.iter().map(|p| p[j]).collect();
        let out = Buffer::new(b.ty(), 1, &|| "a reduction result".into())?;
        set_elem(&out, 0, combine(op, b.ty(), &col));
        outs.push(out);
    }
    Ok(outs)
}

#[cfg(test)]
mod extreme_tests {
    use super::*;
    use crate::op::{eval_binary, Op};

    /// The vectorised float min/max equal the element-by-element definition, −0/+0 and
    /// infinities included; a NaN sends the run to the exact path.
    #[test]
    fn float_extremes_match_the_definition() {
        let specials = [
            0.0f64,
            -0.0,
            1.5,
            -1.5,
            f64::INFINITY,
            f64::NEG_INFINITY,
            1e-310,
            -1e-310,
        ];
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        for n in [0usize, 1, 7, 8, 9, 16, 17, 100] {
            for trial in 0..50 {
                let xs: Vec<f64> = (0..n)
                    .map(|_| {
                        seed = seed
                            .wrapping_mul(6364136223846793005)
                            .wrapping_add(1442695040888963407);
                        if trial % 2 == 0 {
                            specials[(seed >> 60) as usize % specials.len()]
                        } else {
                            ((seed >> 11) as f64 / (1u64 << 53) as f64 - 0.5) * 1e3
                        }
                    })
                    .collect();
                for (max, op) in [(false, Op::Min), (true, Op::Max)] {
                    let bits: Vec<u64> = xs.iter().map(|v| v.to_bits()).collect();
                    let rop = if max { ReduceOp::Max } else { ReduceOp::Min };
                    let want = bits
                        .iter()
                        .fold(reduce_identity(rop, VarType::F64), |a, &b| {
                            eval_binary(op, VarType::F64, a, b)
                        });
                    let got = eval_reduce(
                        rop,
                        VarType::F64,
                        reduce_identity(rop, VarType::F64),
                        extreme_f64(&bits, max).unwrap(),
                    );
                    assert_eq!(got, want, "{xs:?} max={max}");
                    let b32: Vec<u32> = xs.iter().map(|&v| (v as f32).to_bits()).collect();
                    let want = b32
                        .iter()
                        .fold(reduce_identity(rop, VarType::F32), |a, &b| {
                            eval_binary(op, VarType::F32, a, b as u64)
                        });
                    let got = eval_reduce(
                        rop,
                        VarType::F32,
                        reduce_identity(rop, VarType::F32),
                        extreme_f32(&b32, max).unwrap() as u64,
                    );
                    assert_eq!(got, want, "{xs:?} f32 max={max}");
                }
            }
        }
        assert!(extreme_f64(&[1.0f64.to_bits(), f64::NAN.to_bits()], false).is_none());
        assert!(extreme_f32(&[(-f32::NAN).to_bits()], true).is_none());
    }
}
