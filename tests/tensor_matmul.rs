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
        let e = a.try_matmul(&Tensor::zeros(&[3])).unwrap_err().to_string();
        assert!(e.contains("2-d"), "{e}");
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
