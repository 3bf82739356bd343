//! Lazy views (`gather_view`): an unevaluated source is recomputed at the gathered indices inside
//! the consumer's kernel. Values must equal the evaluate-first gather; the kernel count shows the
//! fusion.

mod common;
use common::{delta, leak_checked};
use kiln::prelude::*;

#[test]
fn view_of_lazy_expression_is_one_kernel() {
    leak_checked(|| {
        let x = Float32::arange(1000);
        let y = (&x * 0.5).sin() + 1.0;
        let idx = 999u32 - UInt32::arange(1000);
        let (v, d) = delta(|| {
            let v = gather_view(&y, &idx) * 2.0;
            v.eval();
            v
        });
        assert_eq!(d.launches, 1);
        assert!(!y.is_evaluated());
        let eager = gather(&y, &idx) * 2.0;
        assert_eq!(v.to_vec(), eager.to_vec());
    });
}

#[test]
fn views_compose_and_mask_out_of_range() {
    leak_checked(|| {
        let x = Int32::arange(10);
        let y = &x * 3 - 7; // lazy
                            // negative and too-large indices read 0, whatever the expression gives there
        let idx = Int32::from_slice(&[-1, 0, 9, 10, 5, 2_000_000_000]);
        let v = gather_view(&y, &idx);
        assert_eq!(v.to_vec(), vec![0, -7, 20, 0, 8, 0]);
        // a view of a view: indices compose
        let rev = gather_view(&y, &(9 - Int32::arange(10)));
        let every_other = gather_view(&rev, &(UInt32::arange(5) * 2));
        assert_eq!(every_other.to_vec(), vec![20, 14, 8, 2, -4]);
        let (_, d) = delta(|| every_other.eval().clone());
        assert!(d.launches <= 1);
        // a view of a counter is the index itself; of a size-1 array, a broadcast
        let c = UInt64::arange(100);
        assert_eq!(
            gather_view(&c, &UInt32::from_slice(&[7, 99, 100])).to_vec(),
            vec![7, 99, 0]
        );
        let one = Float32::from(2.5) + Float32::from(1.0);
        assert_eq!(
            gather_view(&one, &UInt32::from_slice(&[0, 1])).to_vec(),
            vec![3.5, 0.0]
        );
    });
}

#[test]
fn view_of_evaluated_source_is_a_plain_gather() {
    leak_checked(|| {
        let y = Float32::from_slice(&[1.0, 2.0, 3.0]);
        let v = gather_view(&y, &UInt32::from_slice(&[2, 2, 0, 3]));
        assert_eq!(v.to_vec(), vec![3.0, 3.0, 1.0, 0.0]);
    });
}

/// Inside a frozen function a view of an input-sized expression is evaluated first (so no size is
/// baked into a kernel), and replays still follow the inputs.
#[test]
fn views_inside_frozen_functions() {
    leak_checked(|| {
        let mut f = kiln::freeze(|x: &Float32| -> Float32 {
            let y = x * 2.0 + 1.0;
            gather_view(&y, &(UInt32::arange(x.size()) + 1))
        });
        for n in [4usize, 7, 4, 9] {
            let x = Float32::arange(n);
            let want: Vec<f32> = (1..=n)
                .map(|i| if i < n { i as f32 * 2.0 + 1.0 } else { 0.0 })
                .collect();
            assert_eq!(f.call(&x).unwrap().to_vec(), want);
        }
        assert_eq!(f.stats().recordings, 1, "{}", f.stats());
    });
}

/// A block reduction of an unevaluated array runs its kernel piece by piece into cache-sized
/// scratch (never a full-size array) and gives the same bits as evaluating first, for every
/// reduction, block size (tiny, unaligned, larger than a piece) and backend.
#[test]
fn fused_block_reductions_equal_evaluated_ones() {
    leak_checked(|| {
        for backend in [
            kiln::BackendKind::Interp,
            kiln::BackendKind::Cranelift,
            kiln::BackendKind::Llvm,
        ] {
            if backend == kiln::BackendKind::Llvm && kiln_core::backend::llvm::shared().is_err() {
                continue;
            }
            kiln_core::with_backend(backend, || {
                for (n, block) in [
                    (0usize, 3usize),
                    (1, 1),
                    (100, 7),
                    (1000, 1),
                    (40_000, 16_385),
                    (70_001, 40_000),
                    (33, 64),
                ] {
                    let x = (Float32::arange(n) * 0.37).sin() * 100.0;
                    let xi = Int32::arange(n) * 7 % 13 - 6;
                    for op in [
                        kiln::ReduceOp::Add,
                        kiln::ReduceOp::Mul,
                        kiln::ReduceOp::Min,
                        kiln::ReduceOp::Max,
                    ] {
                        let lazy = kiln_core::block_reduce(op, x.id(), block).unwrap();
                        let lazy_i = kiln_core::block_reduce(op, xi.id(), block).unwrap();
                        let (xe, xie) = (x.clone(), xi.clone());
                        kiln::eval!(xe, xie);
                        let eager = kiln_core::block_reduce(op, xe.id(), block).unwrap();
                        let eager_i = kiln_core::block_reduce(op, xie.id(), block).unwrap();
                        let bits = |id| kiln_core::read_bytes(id).unwrap();
                        assert_eq!(
                            bits(lazy),
                            bits(eager),
                            "{backend} f32 {op:?} n={n} block={block}"
                        );
                        assert_eq!(
                            bits(lazy_i),
                            bits(eager_i),
                            "{backend} i32 {op:?} n={n} block={block}"
                        );
                        for id in [lazy, lazy_i, eager, eager_i] {
                            kiln_core::dec_ref(id);
                        }
                    }
                }
            });
        }
    });
}

/// An axis reduction of an expression (a view of it, even) is one launch.
#[test]
fn axis_reduction_of_an_expression_is_fused() {
    leak_checked(|| {
        let t = Tensor::<f32>::arange(12).reshape(&[3, 4]);
        let e = (&t * 2.0).exp().log(); // lazy
        let (s, d) = delta(|| {
            let s = e.sum_axis(0);
            s.eval();
            s
        });
        assert_eq!(d.launches, 1);
        let got = s.to_vec();
        let want = [24.0, 30.0, 36.0, 42.0];
        for (g, w) in got.iter().zip(want) {
            assert!((g - w).abs() < 1e-3, "{got:?}");
        }
    });
}

/// A view of a loop's unevaluated result evaluates the loop first (a consumer's kernel cannot
/// recompute a loop at other lanes; it crashed the kernel builder before).
#[test]
fn a_view_of_a_lazy_loop_result() {
    leak_checked(|| {
        let x = kiln::Float64::from_slice(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
        let (y, _) = kiln::while_loop(
            (x, kiln::UInt32::zeros(6)),
            |(_, i)| i.lt(2u32),
            |(y, i)| (y * 2.0, i + 1u32),
        )
        .unwrap();
        let t = kiln::Tensor::from_array(y, &[2, 3]);
        assert_eq!(
            t.transpose().to_vec(),
            vec![4.0, 16.0, 8.0, 20.0, 12.0, 24.0]
        );
        assert_eq!(t.index_axis(0, 1).to_vec(), vec![16.0, 20.0, 24.0]);
    });
}
