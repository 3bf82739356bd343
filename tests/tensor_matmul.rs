//! `Tensor::matmul`: values against a naive product, shapes, errors, empty dimensions, and record
//! and replay inside a frozen function.

mod common;
use common::leak_checked;
use kiln::prelude::*;

fn naive(a: &[f64], b: &[f64], m: usize, k: usize, n: usize) -> Vec<f64> {
    let mut c = vec![0.0; m * n];
    for i in 0..m {
        for j in 0..n {
            c[i * n + j] = (0..k).map(|p| a[i * k + p] * b[p * n + j]).sum();
        }
    }
    c
}

#[test]
fn matmul_matches_naive_product() {
    leak_checked(|| {
        for (m, k, n) in [
            (1, 1, 1),
            (3, 5, 2),
            (65, 17, 130),
            (200, 64, 3),
            (0, 4, 3),
            (3, 0, 2),
        ] {
            let a: Vec<f64> = (0..m * k).map(|i| ((i * 7) % 11) as f64 - 5.0).collect();
            let b: Vec<f64> = (0..k * n).map(|i| ((i * 5) % 13) as f64 - 6.0).collect();
            let ta = Tensor::from_slice(&a, &[m, k]);
            let tb = Tensor::from_slice(&b, &[k, n]);
            let c = ta.matmul(&tb);
            assert_eq!(c.shape(), &[m, n]);
            assert_eq!(c.to_vec(), naive(&a, &b, m, k, n), "{m}x{k}x{n}");
            // f32, through lazy views of the operands
            let c32 = ta
                .cast::<f32>()
                .transpose()
                .transpose()
                .matmul(&tb.cast::<f32>());
            let want: Vec<f32> = naive(&a, &b, m, k, n).iter().map(|&v| v as f32).collect();
            assert_eq!(c32.to_vec(), want);
        }
    });
}

#[test]
fn matmul_errors_name_the_shapes() {
    leak_checked(|| {
        let a = Tensor::<f32>::zeros(&[2, 3]);
        let e = a
            .try_matmul(&Tensor::zeros(&[2, 3]))
            .unwrap_err()
            .to_string();
        assert!(e.contains("[2, 3]") && e.contains("[k, n]"), "{e}");
        // (a 1-d right operand is a column since batched products came: [2, 3] @ [3] is [2])
        let e = a.try_matmul(&Tensor::zeros(&[2])).unwrap_err().to_string();
        assert!(
            e.contains("[2, 3]") && e.contains("inner lengths 3 and 2"),
            "{e}"
        );
        let e = Tensor::<f32>::zeros(&[2, 2, 3])
            .try_matmul(&Tensor::zeros(&[3, 3, 1]))
            .unwrap_err()
            .to_string();
        assert!(e.contains("batch") && e.contains("[3, 3, 1]"), "{e}");
        let e = Tensor::<f32>::zeros(&[])
            .try_matmul(&Tensor::zeros(&[3]))
            .unwrap_err()
            .to_string();
        assert!(e.contains("0-d") && e.contains('*'), "{e}");
    });
}

/// NumPy's matmul over `shape_a` and `shape_b`, by hand: batches broadcast, 1-d operands a row
/// (left) or a column (right) whose axis leaves the result.
fn naive_nd(a: &[f64], sa: &[usize], b: &[f64], sb: &[usize]) -> (Vec<f64>, Vec<usize>) {
    let sa2: Vec<usize> = if sa.len() == 1 {
        vec![1, sa[0]]
    } else {
        sa.to_vec()
    };
    let sb2: Vec<usize> = if sb.len() == 1 {
        vec![sb[0], 1]
    } else {
        sb.to_vec()
    };
    let (m, k, n) = (sa2[sa2.len() - 2], sa2[sa2.len() - 1], sb2[sb2.len() - 1]);
    let (ba, bb) = (&sa2[..sa2.len() - 2], &sb2[..sb2.len() - 2]);
    let rank = ba.len().max(bb.len());
    let pad = |s: &[usize]| [vec![1; rank - s.len()], s.to_vec()].concat();
    let (pa, pb) = (pad(ba), pad(bb));
    let batch: Vec<usize> = pa
        .iter()
        .zip(&pb)
        .map(|(&x, &y)| if x == 1 { y } else { x })
        .collect();
    let count: usize = batch.iter().product();
    let mut out = Vec::new();
    for i in 0..count {
        // the batch index, and the operands' elements it reads (axes of length 1 repeat)
        let (mut rest, mut ia, mut ib) = (i, 0, 0);
        let (mut stride_a, mut stride_b) = (1, 1);
        for d in (0..rank).rev() {
            let j = rest % batch[d];
            rest /= batch[d];
            ia += if pa[d] == 1 { 0 } else { j * stride_a };
            ib += if pb[d] == 1 { 0 } else { j * stride_b };
            stride_a *= pa[d];
            stride_b *= pb[d];
        }
        out.extend(naive(
            &a[ia * m * k..][..m * k],
            &b[ib * k * n..][..k * n],
            m,
            k,
            n,
        ));
    }
    let mut shape = [batch, vec![m, n]].concat();
    if sb.len() == 1 {
        shape.pop();
    }
    if sa.len() == 1 {
        let at = shape.len() - if sb.len() == 1 { 1 } else { 2 };
        shape.remove(at);
    }
    (out, shape)
}

#[test]
fn batched_and_one_dimensional_products_follow_numpy() {
    leak_checked(|| {
        let cases: [(&[usize], &[usize]); 10] = [
            (&[2, 3, 4], &[4, 5]),
            (&[3, 4], &[2, 4, 5]),
            (&[2, 1, 3, 4], &[5, 4, 2]),
            (&[4, 2, 3], &[4, 3, 1]),
            (&[0, 3, 4], &[4, 2]),
            (&[3], &[3, 2]),
            (&[2, 3], &[3]),
            (&[3], &[3]),
            (&[3], &[2, 3, 4]),
            (&[2, 2, 3], &[3]),
        ];
        for (sa, sb) in cases {
            let (na, nb): (usize, usize) = (sa.iter().product(), sb.iter().product());
            let a: Vec<f64> = (0..na).map(|i| ((i * 7) % 11) as f64 - 5.0).collect();
            let b: Vec<f64> = (0..nb).map(|i| ((i * 5) % 13) as f64 - 6.0).collect();
            let c = Tensor::from_slice(&a, sa).matmul(&Tensor::from_slice(&b, sb));
            let (want, shape) = naive_nd(&a, sa, &b, sb);
            assert_eq!(c.shape(), shape.as_slice(), "{sa:?} @ {sb:?}");
            assert_eq!(c.to_vec(), want, "{sa:?} @ {sb:?}");
        }
    });
}

#[test]
fn batched_product_gradients_match_finite_differences() {
    leak_checked(|| {
        let (sa, sb) = ([2usize, 1, 2, 3], [3usize, 3, 2]);
        let a0: Vec<f64> = (0..12).map(|i| (i as f64 * 0.37).sin()).collect();
        let b0: Vec<f64> = (0..18).map(|i| (i as f64 * 0.23).cos()).collect();
        let loss = |a: &Float64, b: &Float64| {
            let c = Tensor::from_array(a.clone(), &sa).matmul(&Tensor::from_array(b.clone(), &sb));
            (c.array() * c.array()).sum()
        };
        let mut a = Float64::from_slice(&a0);
        let mut b = Float64::from_slice(&b0);
        a.enable_grad();
        b.enable_grad();
        loss(&a, &b).backward();
        let (ga, gb) = (a.grad().to_vec(), b.grad().to_vec());
        let h = 1e-6;
        for (which, base, got) in [(0, &a0, &ga), (1, &b0, &gb)] {
            for i in 0..base.len() {
                let at = |d: f64| {
                    let mut v = base.clone();
                    v[i] += d;
                    let v = Float64::from_slice(&v);
                    let (x, y) = if which == 0 {
                        (v, Float64::from_slice(&b0))
                    } else {
                        (Float64::from_slice(&a0), v)
                    };
                    loss(&x, &y).item()
                };
                let fd = (at(h) - at(-h)) / (2.0 * h);
                assert!(
                    (fd - got[i]).abs() < 1e-6 * fd.abs().max(1.0),
                    "{which} {i}: {fd} vs {}",
                    got[i]
                );
            }
        }
    });
}

#[test]
fn batched_products_replay_at_the_shapes_they_were_recorded_for() {
    leak_checked(|| {
        let mut f = kiln::freeze(|a: &Tensor<f32>, b: &Tensor<f32>| a.matmul(b) * 2.0);
        for batch in [2usize, 5, 2, 5, 1] {
            let a: Vec<f64> = (0..batch * 12).map(|i| ((i * 3) % 7) as f64).collect();
            let b: Vec<f64> = (0..batch * 6).map(|i| ((i * 5) % 3) as f64).collect();
            let (want, _) = naive_nd(&a, &[batch, 4, 3], &b, &[batch, 3, 2]);
            let ta = Tensor::from_vec(a.iter().map(|&v| v as f32).collect(), &[batch, 4, 3]);
            let tb = Tensor::from_vec(b.iter().map(|&v| v as f32).collect(), &[batch, 3, 2]);
            let got = f.call(&ta, &tb).unwrap();
            assert_eq!(got.shape(), &[batch, 4, 2]);
            let want: Vec<f32> = want.iter().map(|&v| 2.0 * v as f32).collect();
            assert_eq!(got.to_vec(), want, "batch {batch}");
        }
        assert_eq!(
            f.stats().recordings,
            3,
            "one per batch size (shapes key recordings)"
        );
        assert_eq!(f.stats().replays, 2);
    });
}

#[test]
fn matmul_is_recorded_and_replayed() {
    leak_checked(|| {
        let mut f = kiln::freeze(|a: &Tensor<f32>, b: &Tensor<f32>| -> Tensor<f32> {
            (a.matmul(b) + 1.0).map(|x| x.sqrt())
        });
        for round in 0..3 {
            let a = Tensor::<f32>::full(round as f32, &[4, 8]);
            let b = Tensor::<f32>::ones(&[8, 2]);
            let a = Tensor::from_array(kiln::make_opaque(a.array()), &[4, 8]);
            let want = vec![(8.0 * round as f32 + 1.0).sqrt(); 8];
            assert_eq!(f.call(&a, &b).unwrap().to_vec(), want);
        }
        assert_eq!(
            (f.stats().recordings, f.stats().replays),
            (1, 2),
            "{}",
            f.stats()
        );
    });
}

/// Tensors are cheap handles that can be shared across threads; math functions keep the shape.
#[test]
fn tensors_are_send_sync_and_math_keeps_shape() {
    leak_checked(|| {
        fn assert_send_sync<T: Send + Sync>(_: &T) {}
        let t = Tensor::<f64>::arange(6).reshape(&[2, 3]);
        assert_send_sync(&t);
        let u = t.exp().log().max(&Tensor::full(1.0, &[3]));
        assert_eq!(u.shape(), &[2, 3]);
        let got = u.to_vec();
        let want = [1.0, 1.0, 2.0, 3.0, 4.0, 5.0];
        for (g, w) in got.iter().zip(want) {
            assert!((g - w).abs() < 1e-12, "{got:?}");
        }
    });
}

/// A transposing expression is evaluated in 2-d tiles (same values as linear evaluation, for
/// shapes that tile and shapes that do not).
#[test]
fn tiled_evaluation_of_transposes() {
    leak_checked(|| {
        for (r, c) in [
            (64usize, 64usize),
            (200, 128),
            (130, 68),
            (70, 66),
            (3, 256),
            (256, 3),
        ] {
            let data: Vec<f32> = (0..r * c).map(|i| i as f32).collect();
            let t = Tensor::from_slice(&data, &[r, c]);
            let y = t.transpose() * 2.0 + 1.0;
            let mut want = vec![0f32; r * c];
            for i in 0..r {
                for j in 0..c {
                    want[j * r + i] = data[i * c + j] * 2.0 + 1.0;
                }
            }
            assert_eq!(y.to_vec(), want, "{r}x{c}");
            // and through a frozen function (the tiled launch is recorded and replayed)
            let mut f = kiln::freeze(|t: &Tensor<f32>| -> Tensor<f32> {
                let y = t.transpose() * 2.0 + 1.0;
                y.eval();
                y
            });
            for _ in 0..2 {
                assert_eq!(f.call(&t).unwrap().to_vec(), want, "frozen {r}x{c}");
            }
        }
    });
}

/// Edge cases found in review: NaN in argmax, huge slice steps, inclusive ends of -1, functions
/// passed to `map` that are not elementwise, and concat reading no part out of range.
#[test]
// negative positions count from the end, so `1..=-2` is not empty (clippy reads it as a range)
#[allow(clippy::reversed_empty_ranges)]
fn review_edge_cases() {
    leak_checked(|| {
        let t = Tensor::<f32>::from_vec(vec![1.0, f32::NAN, 3.0, 4.0, 2.0, 1.0], &[2, 3]);
        assert_eq!(t.argmax_axis(1).to_vec(), vec![1, 0]);
        let r = Tensor::<i32>::arange(5);
        assert_eq!(r.slice(kiln::s![..;isize::MAX]).to_vec(), vec![0]);
        assert_eq!(r.slice(kiln::s![..;isize::MIN]).to_vec(), vec![4]);
        assert_eq!(r.slice(kiln::s![..=-1]).to_vec(), vec![0, 1, 2, 3, 4]);
        assert_eq!(r.slice(kiln::s![1..=-2]).to_vec(), vec![1, 2, 3]);
        assert!(r.try_slice(kiln::s![usize::MAX]).is_err());
        let msg = common::panic_message(|| {
            let _ = Tensor::<f32>::zeros(&[2, 3]).map(|a| a.sum());
        });
        assert!(msg.contains("elementwise"), "{msg}");
        let a = Tensor::<f32>::from_slice(&[1.0, 2.0], &[1, 2]);
        let b = Tensor::<f32>::from_slice(&[3.0, 4.0, 5.0, 6.0], &[2, 2]);
        let before = kiln::stats().oob_reads;
        assert_eq!(
            Tensor::concat(&[a, b], 0).to_vec(),
            vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0]
        );
        assert_eq!(kiln::stats().oob_reads, before);
    });
}
