//! Golden tests of kernel IR text: what the scheduler builds for representative programs. A diff in
//! a snapshot is a design decision to review. Each test also asserts the behaviour it shows, so a
//! snapshot is never the only check.

mod common;
use common::{delta, leak_checked};
use kiln::prelude::*;

fn ir<T: kiln::Scalar>(ids: &[&Array<T>]) -> Vec<kiln_core::kernel::Kernel> {
    kiln_core::kernels_for(&ids.iter().map(|a| a.id()).collect::<Vec<_>>())
}

#[test]
fn fused_chain_keeps_intermediates_in_registers() {
    leak_checked(|| {
        let x = Float32::from_vec((0..100).map(|i| i as f32).collect());
        let y = (&x * &x + 1.0).sqrt() * 0.5;
        let ks = ir(&[&y]);
        assert_eq!(ks.len(), 1);
        insta::assert_snapshot!("fused_chain", ks[0].to_string());
        // one input, one output: the products and sums never touch memory
        assert_eq!(ks[0].params.len(), 2);
        let (_, d) = delta(|| y.eval());
        assert_eq!(d.launches, 1);
    });
}

#[test]
fn two_outputs_in_one_kernel() {
    leak_checked(|| {
        let x = Float32::from_vec((0..100).map(|i| i as f32).collect());
        let a = &x + 1.0;
        let b = (&x * 2.0).lt(50.0);
        let ks = kiln_core::kernels_for(&[a.id(), b.id()]);
        assert_eq!(ks.len(), 1);
        insta::assert_snapshot!("two_outputs", ks[0].to_string());
        let (_, d) = delta(|| kiln::eval!(a, b));
        assert_eq!(d.launches, 1, "both outputs come from one launch");
        assert_eq!(b.count(), 25);
    });
}

#[test]
fn another_size_is_a_cache_hit() {
    leak_checked(|| {
        let prog = |n: usize| Float64::arange(n) * 3.0 + 2.0;
        let (small, large) = (prog(10), prog(100_000));
        let (ks, kl) = (ir(&[&small]), ir(&[&large]));
        assert_eq!(ks[0].to_string(), kl[0].to_string());
        assert_eq!(ks[0].hash(), kl[0].hash());
        insta::assert_snapshot!("arange_affine", ks[0].to_string());
        small.eval();
        let (_, d) = delta(|| large.eval());
        assert_eq!((d.cache_hits, d.kernels_compiled), (1, 0));
        assert_eq!(large.to_vec()[99_999], 299_999.0);
    });
}

#[test]
fn gather_and_scatter_kernel() {
    leak_checked(|| {
        let src = Float32::from_vec(vec![1.0, 2.0, 3.0]);
        let idx = UInt32::arange(8) % 4u32;
        let mut target = Float32::zeros(8);
        target.eval();
        let g = gather(&src, &idx);
        scatter(&mut target, &(&g * 10.0), &(UInt32::arange(8) + 0u32));
        let ks = kiln_core::kernels_for(&[]);
        assert_eq!(
            ks.len(),
            1,
            "the pending scatter is one kernel with the gather fused in"
        );
        insta::assert_snapshot!("gather_scatter", ks[0].to_string());
        let (_, d) = delta(|| target.to_vec());
        assert_eq!(
            d.oob_reads, 2,
            "index 3 is outside the 3-element source, twice"
        );
        assert_eq!(
            target.to_vec(),
            vec![10.0, 20.0, 30.0, 0.0, 10.0, 20.0, 30.0, 0.0]
        );
    });
}
