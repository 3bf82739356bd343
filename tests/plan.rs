//! The plan of an evaluation (issue 25) from a user's point of view: `kiln_core::schedule::plan_for`
//! shows what an evaluation would run — which roots fuse into which kernel, what each parameter is,
//! which operand's buffer takes which result and which operands were turned down, and why — and
//! evaluating runs exactly that plan. Snapshots pin the text; each test also asserts the behaviour
//! the text claims, so a snapshot is never the only check.

mod common;
use common::{delta, leak_checked};
use kiln::prelude::*;
use kiln_core::plan::Summary;
use kiln_core::schedule::plan_for;

fn plan<T: kiln::Scalar>(arrays: &[&Array<T>]) -> Summary {
    plan_for(&arrays.iter().map(|a| a.id()).collect::<Vec<_>>())
}

/// Each test alone (tests of one binary share the registry), with update-in-place on.
fn check<R>(f: impl FnOnce() -> R) -> R {
    leak_checked(|| kiln::with_inplace(true, f))
}

#[test]
fn a_moved_operand_takes_the_result_and_a_held_one_is_declined() {
    check(|| {
        let x = Float32::from_vec((0..100).map(|i| i as f32).collect()).label("x");
        let w = Float32::from_vec(vec![2.0; 100]).label("w");
        x.eval();
        w.eval();
        let y = (x * 2.0 + &w).label("y");
        let p = plan(&[&y]);
        insta::assert_snapshot!("moved_and_held", p.to_string());
        // planning counts nothing; evaluating runs the plan: one reuse, one operand declined
        let counts = || {
            let s = kiln::stats();
            (s.inplace_reuses, s.inplace_declined)
        };
        let before = counts();
        drop(plan(&[&y]).to_string());
        assert_eq!(counts(), before);
        // (a summary holds no buffer: `p`, still alive, does not keep `x`'s from being taken)
        let (_, ran) = delta(|| y.eval());
        assert_eq!(counts(), (before.0 + 1, before.1 + 1));
        assert_eq!(ran.launches, 1);
        assert_eq!(y.to_vec()[3], 8.0);
    });
}

#[test]
fn roots_of_two_sizes_run_as_two_kernels() {
    check(|| {
        let a = Float64::from_vec(vec![1.0; 10]).label("a");
        let b = Float64::from_vec(vec![3.0; 7]).label("b");
        let (sa, sb) = ((&a + 1.0).label("sa"), (&b * &b).label("sb"));
        let p = plan(&[&sa, &sb]);
        insta::assert_snapshot!("two_sizes", p.to_string());
        assert_eq!(p.kernels().len(), 2);
        let (_, d) = delta(|| kiln::eval!(sa, sb));
        assert_eq!(d.launches, 2);
        assert_eq!((sa.to_vec()[0], sb.to_vec()[6]), (2.0, 9.0));
    });
}

#[test]
fn a_pending_scatter_joins_the_kernel_of_its_size() {
    check(|| {
        let mut hist = UInt32::zeros(4).label("hist");
        hist.eval();
        let idx = UInt32::from_slice(&[0, 3, 3, 1]).label("idx");
        scatter_reduce(ReduceOp::Add, &mut hist, 1u32, &idx);
        let p = plan::<u32>(&[]);
        insta::assert_snapshot!("pending_scatter", p.to_string());
        assert!(p.to_string().contains("(written by a scatter)"), "{p}");
        assert_eq!(hist.to_vec(), vec![1, 1, 0, 2]);
    });
}

#[test]
fn a_stencil_plans_its_interior_apart() {
    check(|| {
        let g = Tensor::<f64>::arange(64).reshape(&[8, 8]);
        let lap = kiln::stencil(|a: &Rel<f64>| {
            a.at([0, 1]) + a.at([0, -1]) + a.at([1, 0]) + a.at([-1, 0]) - a.at([0, 0]) * 4.0
        });
        let out = lap.apply(&g).unwrap();
        let arr = out.array();
        let p = plan(&[arr]);
        insta::assert_snapshot!("stencil_split", p.to_string());
        assert!(
            p.to_string().contains("stencil: interior [1, 1]..[7, 7]"),
            "{p}"
        );
        // the arange is affine in the lane: the Laplacian is 0 inside
        assert_eq!(out.to_vec()[9], 0.0);
    });
}

#[test]
fn nothing_pending_plans_nothing() {
    check(|| {
        let x = Float32::from_vec(vec![1.0; 5]);
        x.eval();
        let p = plan(&[&x]);
        assert_eq!(p.kernels().len(), 0);
        assert_eq!(p.to_string(), "nothing to run\n");
    });
}
