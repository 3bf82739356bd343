//! Matrix products on the host (`matrixmultiply`), split in row and column bands over the pool.

use crate::error::Result;
use crate::launch;
use crate::registry::Buffer;
use crate::ty::VarType;

/// The fewest rows of the product per parallel task of `matmul`. Each task multiplies a band of
/// `a`'s rows by all of `b` and packs `b` for itself, so bands are as few as there are threads.
const MATMUL_MIN_ROWS: usize = 64;

/// The fewest columns of the product per parallel task when `matmul` splits columns.
const MATMUL_MIN_COLS: usize = 64;

/// How `matmul` splits an `m × n` product in bands of `band` rows over `threads` threads:
/// (row bands, column bands). Columns are split only when there are fewer row bands than
/// threads, into bands of at least `MATMUL_MIN_COLS` columns.
fn matmul_split(m: usize, n: usize, band: usize, threads: usize) -> (usize, usize) {
    let row_bands = m.div_ceil(band.max(1)).max(1);
    if row_bands >= threads {
        return (row_bands, 1);
    }
    let col_bands = threads.div_ceil(row_bands).min(n / MATMUL_MIN_COLS).max(1);
    (row_bands, col_bands)
}

/// The row-major product of `a` (`m × k`) and `b` (`k × n`), f32 or f64, on all cores; an
/// operand `trans` marks is stored transposed (read with swapped strides). Callers check the
/// types and that `a.len == m·k`, `b.len == k·n`.
pub(in crate::device) fn matmul(
    a: &Buffer,
    b: &Buffer,
    m: usize,
    k: usize,
    n: usize,
    trans: crate::device::Trans,
) -> Result<Buffer> {
    let ty = a.ty();
    assert!(
        a.len == m * k && b.len == k * n && b.ty() == ty && ty.is_float(),
        "kiln internal error: matmul operands do not match [{m}, {k}] × [{k}, {n}]"
    );
    let out = Buffer::new(ty, m * n, &|| format!("a matmul product of {m} × {n} {ty}"))?;
    if k == 0 {
        // SAFETY: the output holds m·n elements of ty.
        unsafe { std::ptr::write_bytes(out.ptr(), 0, out.bytes()) };
    } else if m * n > 0 {
        let (pa, pb, pc) = (a.ptr() as usize, b.ptr() as usize, out.ptr() as usize);
        let band = m.div_ceil(launch::threads()).max(MATMUL_MIN_ROWS);
        // Too few rows for every thread to get a band (an RNN step: a batch of 64 rows): split the
        // columns too, so that a [64, 256] × [256, 256] product still runs on every core. Each
        // element is the same dot product, accumulated over k in the same blocks, whichever task
        // computes it: the split never changes a bit of the result.
        let (row_bands, col_bands) = matmul_split(m, n, band, launch::threads());
        let col_band = n.div_ceil(col_bands);
        // (row stride, column stride) of each operand as stored
        let (rsa, csa) = if trans.a { (1, m) } else { (k, 1) };
        let (rsb, csb) = if trans.b { (1, k) } else { (n, 1) };
        let task = |t: usize| {
            let (rb, cb) = (t / col_bands, t % col_bands);
            let (s, e) = (rb * band, ((rb + 1) * band).min(m));
            let (c0, c1) = (cb * col_band, ((cb + 1) * col_band).min(n));
            if s >= e || c0 >= c1 {
                return;
            }
            let (rows, cols) = (e - s, c1 - c0);
            // SAFETY: a holds m·k elements and b k·n (checked above); element (i, p) of a is read
            // at i·rsa + p·csa < m·k for i < m, p < k (either layout), and element (p, j) of b at
            // p·rsb + j·csb < k·n for j < n; rows s..e < m and columns c0..c1 < n of the output
            // (n each, out.len = m·n) are written, and the (row band, column band) blocks of the
            // output are disjoint between tasks.
            unsafe {
                if ty == VarType::F32 {
                    let (a, b, c) = (pa as *const f32, pb as *const f32, pc as *mut f32);
                    matrixmultiply::sgemm(
                        rows,
                        k,
                        cols,
                        1.0,
                        a.add(s * rsa),
                        rsa as isize,
                        csa as isize,
                        b.add(c0 * csb),
                        rsb as isize,
                        csb as isize,
                        0.0,
                        c.add(s * n + c0),
                        n as isize,
                        1,
                    );
                } else {
                    let (a, b, c) = (pa as *const f64, pb as *const f64, pc as *mut f64);
                    matrixmultiply::dgemm(
                        rows,
                        k,
                        cols,
                        1.0,
                        a.add(s * rsa),
                        rsa as isize,
                        csa as isize,
                        b.add(c0 * csb),
                        rsb as isize,
                        csb as isize,
                        0.0,
                        c.add(s * n + c0),
                        n as isize,
                        1,
                    );
                }
            }
        };
        let tasks = row_bands * col_bands;
        if tasks == 1 {
            task(0);
        } else {
            use rayon::prelude::*;
            launch::pool().install(|| (0..tasks).into_par_iter().for_each(task));
        }
    }
    Ok(out)
}

#[cfg(test)]
mod matmul_tests {
    use super::*;
    use crate::device::{read, upload};
    use crate::ty::VarType;

    /// Splitting a product's columns between tasks (few rows, several threads) gives the same
    /// bits as one `sgemm` call over the whole product: the same dot products, accumulated in the
    /// same order.
    #[test]
    fn split_products_equal_one_call_bit_for_bit() {
        for (m, k, n) in [
            (64, 256, 256),
            (5, 7, 200),
            (1, 3, 130),
            (64, 33, 65),
            (3, 300, 64),
        ] {
            let a: Vec<f32> = (0..m * k)
                .map(|i| ((i * 7919) % 997) as f32 * 0.013 - 6.0)
                .collect();
            let b: Vec<f32> = (0..k * n)
                .map(|i| ((i * 104729) % 991) as f32 * 0.011 - 5.0)
                .collect();
            let up = |v: &[f32]| {
                let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
                upload(VarType::F32, &bytes).expect("upload")
            };
            let got = read(&matmul(&up(&a), &up(&b), m, k, n, Default::default()).expect("matmul"));
            let mut want = vec![0f32; m * n];
            // SAFETY: a, b and want hold m·k, k·n and m·n elements, row-major.
            unsafe {
                matrixmultiply::sgemm(
                    m,
                    k,
                    n,
                    1.0,
                    a.as_ptr(),
                    k as isize,
                    1,
                    b.as_ptr(),
                    n as isize,
                    1,
                    0.0,
                    want.as_mut_ptr(),
                    n as isize,
                    1,
                );
            }
            let want: Vec<u8> = want.iter().flat_map(|x| x.to_le_bytes()).collect();
            assert!(
                got == want,
                "{m}x{k}x{n}: split product differs from one call"
            );
        }
    }

    #[test]
    fn columns_are_split_only_when_rows_are_too_few() {
        // enough row bands: rows only
        assert_eq!(matmul_split(1024, 1024, 512, 2), (2, 1));
        // one row band of 64 on 2 threads: 2 column bands (of >= 64 columns)
        assert_eq!(matmul_split(64, 256, 64, 2), (1, 2));
        // too few columns to split
        assert_eq!(matmul_split(64, 100, 64, 4), (1, 1));
        // 16 threads, one row band, 256 columns: at most 4 bands of 64
        assert_eq!(matmul_split(64, 256, 64, 16), (1, 4));
        assert_eq!(matmul_split(0, 256, 64, 2).0, 1);
    }

    /// Operands stored transposed give the product of the matrices they hold, in every
    /// combination, for shapes that split in row and column bands and shapes that do not.
    #[test]
    fn transposed_operands_are_read_in_place() {
        for (m, k, n) in [
            (64, 256, 256),
            (5, 7, 200),
            (1, 3, 1),
            (130, 65, 3),
            (2, 0, 3),
        ] {
            let a: Vec<f64> = (0..m * k).map(|i| ((i * 31) % 17) as f64 - 8.0).collect();
            let b: Vec<f64> = (0..k * n).map(|i| ((i * 13) % 11) as f64 - 5.0).collect();
            let mut want = vec![0f64; m * n];
            for i in 0..m {
                for j in 0..n {
                    want[i * n + j] = (0..k).map(|p| a[i * k + p] * b[p * n + j]).sum();
                }
            }
            let at: Vec<f64> = (0..m * k).map(|q| a[(q % m) * k + q / m]).collect();
            let bt: Vec<f64> = (0..k * n).map(|q| b[(q % k) * n + q / k]).collect();
            let up = |v: &[f64]| {
                let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
                upload(VarType::F64, &bytes).expect("upload")
            };
            for (ta, tb) in [(false, false), (true, false), (false, true), (true, true)] {
                let (x, y) = (if ta { &at } else { &a }, if tb { &bt } else { &b });
                let t = crate::device::Trans { a: ta, b: tb };
                let got = read(&matmul(&up(x), &up(y), m, k, n, t).expect("matmul"));
                let got: Vec<f64> = got
                    .chunks(8)
                    .map(|c| f64::from_le_bytes(c.try_into().unwrap()))
                    .collect();
                assert_eq!(got, want, "{m}x{k}x{n}, transposed {ta}/{tb}");
            }
        }
    }
}
