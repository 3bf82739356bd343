//! Derivative rules of the memory ops, block and prefix sums, `dot` and `Vector` ops: reverse
//! mode = forward mode = central finite differences, in f64, with masked and out-of-range lanes,
//! index collisions and sizes 0 and 1; the AD graph is freed afterwards.
mod ad_check;
use ad_check::{check, no_leak, rand, serial};
use kiln::prelude::*;

const TOL: f64 = 1e-6;

#[test]
fn one_value_set_as_the_gradient_of_every_lane_reaches_lanes_read_by_index() {
    // `set_grad(y, 1)` means 1 for every lane of y: the rules that read a cotangent's lanes by
    // index (a scatter's, block and prefix sums') must see all of them, not one element
    let _s = serial();
    let seed = |y: &Float64| {
        y.set_grad(&Float64::from(2.0));
    };
    let mut x = Float64::from_slice(&[1.0, 2.0, 3.0, 4.0]);
    x.enable_grad();
    let mut u = Float64::zeros(6);
    scatter(&mut u, &x, &UInt32::from_slice(&[5, 4, 3, 2]));
    seed(&u);
    kiln::ad::backward_to(&x, false, false).unwrap();
    assert_eq!(x.grad().to_vec(), vec![2.0; 4], "scatter");
    for (name, f) in [
        (
            "block_sum",
            (|x: &Float64| x.block_sum(2)) as fn(&Float64) -> Float64,
        ),
        ("prefix_sum", |x: &Float64| x.prefix_sum(false)),
    ] {
        let mut x = Float64::from_slice(&[1.0, 2.0, 3.0, 4.0]);
        x.enable_grad();
        let y = f(&x);
        seed(&y);
        kiln::ad::backward_to(&x, false, false).unwrap();
        let want = if name == "block_sum" {
            vec![2.0; 4]
        } else {
            vec![8.0, 6.0, 4.0, 2.0]
        };
        assert_eq!(x.grad().to_vec(), want, "{name}");
    }
}

#[test]
fn gather_masked_and_out_of_range_lanes() {
    let _s = serial();
    let idx = UInt32::from_slice(&[0, 2, 2, 4, 7, 1, 3]);
    let mask = Bool::from_slice(&[true, true, true, false, true, true, true]);
    let (i, m) = (idx.clone(), mask.clone());
    check(
        &[rand(5, 1)],
        move |x| gather_masked(&(&x[0] * &x[0]), &i, &m).sin(),
        TOL,
    );
    // a masked lane and an out-of-range one give nothing: exact values
    let mut x = Float64::from_slice(&[1.0, 2.0, 3.0, 4.0, 5.0]);
    x.enable_grad();
    let y = gather_masked(&x, &idx, &mask);
    kiln::ad::backward_from(
        &y,
        &Float64::from_slice(&[1.0, 10.0, 100.0, 1e3, 1e4, 1e5, 1e6]),
    )
    .unwrap();
    assert_eq!(x.grad().to_vec(), vec![1.0, 1e5, 110.0, 1e6, 0.0]);
}

#[test]
fn gather_signed_negative_index_gets_nothing() {
    let _s = serial();
    let mut x = Float64::from_slice(&[1.0, 2.0]);
    x.enable_grad();
    let y = gather(&x, &Int32::from_slice(&[-1, 1, 1]));
    kiln::ad::backward_from(&y, &Float64::ones(3)).unwrap();
    assert_eq!(x.grad().to_vec(), vec![0.0, 2.0]);
}

#[test]
fn gather_sizes_zero_and_one() {
    let _s = serial();
    for (n, lanes) in [(1usize, 0usize), (1, 1), (1, 3), (3, 1), (3, 0)] {
        let i = UInt32::from_slice(&(0..lanes as u32).map(|v| v % n as u32).collect::<Vec<_>>());
        check(&[rand(n, 2)], move |x| gather(&x[0], &i).exp(), TOL);
    }
    // gathering from an empty source reads only zeros and gives an empty gradient
    let i = UInt32::from_slice(&[0, 1]);
    check(&[vec![]], move |x| gather(&x[0], &i) + 1.0, TOL);
}

#[test]
fn gather_view_of_an_expression() {
    let _s = serial();
    let i = UInt32::from_slice(&[3, 2, 1, 0, 0]);
    check(
        &[rand(4, 3)],
        move |x| gather_view(&(&x[0] * 3.0).tanh(), &i) * &gather_view(&x[0], &i),
        TOL,
    );
}

#[test]
fn gather_with_heavy_collisions_small_source() {
    let _s = serial();
    // 2000 lanes from 5 sources: the one-hot adjoint
    let idx: Vec<u32> = (0..2000u32).map(|i| (i * 7 + i / 3) % 6).collect(); // 5 is out of range
    let mask: Vec<bool> = (0..2000).map(|i| i % 11 != 0).collect();
    let (i, m) = (UInt32::from_slice(&idx), Bool::from_slice(&mask));
    check(
        &[rand(5, 4)],
        move |x| gather_masked(&x[0], &i, &m) * &gather_masked(&x[0], &i, &m),
        TOL,
    );
    // exact: the gradient of Σ gather is the masked histogram of the in-range indices
    let mut x = Float64::from_slice(&rand(5, 4));
    x.enable_grad();
    let y = gather_masked(&x, &UInt32::from_slice(&idx), Bool::from_slice(&mask)).sum();
    y.backward();
    let mut want = vec![0.0; 5];
    for (k, &j) in idx.iter().enumerate() {
        if mask[k] && j < 5 {
            want[j as usize] += 1.0;
        }
    }
    assert_eq!(x.grad().to_vec(), want);
}

#[test]
fn gather_with_collisions_large_source() {
    let _s = serial();
    // 300 lanes from 100 sources: the scatter-add adjoint, with repeats
    let idx: Vec<u32> = rand(300, 5)
        .iter()
        .map(|v| ((v + 1.0) * 55.0) as u32)
        .collect();
    let i = UInt32::from_slice(&idx);
    check(&[rand(100, 6)], move |x| gather(&x[0], &i).sqr_like(), TOL);
}

trait SqrLike {
    fn sqr_like(&self) -> Self;
}
impl SqrLike for Float64 {
    fn sqr_like(&self) -> Self {
        self * self * 0.5 + self
    }
}

#[test]
fn scatter_overwrites_target_and_value() {
    let _s = serial();
    let idx = UInt32::from_slice(&[1, 4, 9, 2]);
    let mask = Bool::from_slice(&[true, true, true, false]);
    let (i, m) = (idx.clone(), mask.clone());
    check(
        &[rand(6, 7), rand(4, 8)],
        move |x| {
            let mut t = &x[0] * 2.0;
            scatter_masked(&mut t, x[1].exp(), &i, &m);
            t.sin() * &x[0]
        },
        TOL,
    );
    // a size-1 value broadcast over the lanes
    let i = idx.clone();
    check(
        &[rand(6, 9), rand(1, 10)],
        move |x| {
            let mut t = x[0].clone();
            scatter(&mut t, &(&x[1] * &x[1]), &i);
            t.cos()
        },
        TOL,
    );
    // only the value carries a gradient; the target is a constant
    let i = idx.clone();
    check(
        &[rand(4, 11)],
        move |x| {
            let mut t = Float64::from_slice(&[5.0; 6]);
            scatter(&mut t, &x[0], &i);
            &t * &t
        },
        TOL,
    );
}

#[test]
fn scatter_keeps_clones_and_their_gradients_apart() {
    let _s = serial();
    let mut x = Float64::from_slice(&[1.0, 2.0, 3.0]);
    x.enable_grad();
    let mut t = &x * 1.0;
    let before = t.clone();
    scatter(&mut t, 0.0, &UInt32::from_slice(&[1]));
    let y = (&before * 10.0 + &t).sum();
    y.backward();
    assert_eq!(x.grad().to_vec(), vec![11.0, 10.0, 11.0]);
}

#[test]
fn scatter_add_with_duplicates() {
    let _s = serial();
    let i = UInt32::from_slice(&[0, 0, 3, 3, 3, 1, 8]);
    let m = Bool::from_slice(&[true, true, true, false, true, true, true]);
    check(
        &[rand(4, 12), rand(7, 13)],
        move |x| {
            let mut t = &x[0] * &x[0];
            scatter_reduce_masked(ReduceOp::Add, &mut t, x[1].sin(), &i, &m);
            &t * &t
        },
        TOL,
    );
    let i = UInt32::from_slice(&[2, 2, 2]);
    check(
        &[rand(1, 14)],
        move |x| {
            let mut t = Float64::zeros(3);
            scatter_reduce(ReduceOp::Add, &mut t, &x[0], &i);
            t.exp()
        },
        TOL,
    );
}

#[test]
fn other_scatter_reductions_refuse_tracked_operands() {
    let _s = serial();
    let mut v = Float64::from_slice(&[2.0]);
    v.enable_grad();
    for op in [ReduceOp::Mul, ReduceOp::Min, ReduceOp::Max] {
        let mut t = Float64::from_slice(&[1.0, 1.0]);
        let e = kiln::try_scatter(op, &mut t, &v, &UInt32::from_slice(&[0]), true).unwrap_err();
        assert!(matches!(e, kiln::Error::NotDifferentiable { .. }), "{e}");
        assert_eq!(t.to_vec(), vec![1.0, 1.0], "the target is left unchanged");
    }
    // untracked: as before
    let mut t = Float64::from_slice(&[1.0, 1.0]);
    scatter_reduce(ReduceOp::Mul, &mut t, v.detach(), &UInt32::from_slice(&[1]));
    assert_eq!(t.to_vec(), vec![1.0, 2.0]);
    // under suspend_grad nothing is recorded, so nothing is refused
    let mut t = Float64::from_slice(&[1.0, 1.0]);
    kiln::ad::suspend_grad(|| scatter_reduce(ReduceOp::Max, &mut t, &v, &UInt32::from_slice(&[0])));
    assert_eq!(t.to_vec(), vec![2.0, 1.0]);
}

/// (size, block) pairs of the block rules' checks: empty, one lane, partial and whole blocks.
const BLOCKS: [(usize, usize); 8] = [
    (0, 2),
    (1, 1),
    (1, 3),
    (5, 2),
    (7, 3),
    (6, 1),
    (6, 6),
    (40, 16),
];

#[test]
fn block_sum_rule() {
    let _s = serial();
    for (n, b) in BLOCKS {
        check(
            &[rand(n, 15)],
            move |x| (&x[0] * &x[0]).block_sum(b).sin(),
            TOL,
        );
    }
}

#[test]
fn block_reduce_rules() {
    let _s = serial();
    for op in [ReduceOp::Mul, ReduceOp::Min, ReduceOp::Max] {
        for (n, b) in BLOCKS {
            check(
                &[rand(n, 17)],
                move |x| (&x[0] * 1.5 + 0.25).block_reduce(op, b).sin(),
                TOL,
            );
        }
    }
    // a product with zeros: the lane that is zero gets the product of the others; with two
    // zeros in a block, every lane gets 0 (no 0/0)
    let mut x = Float64::from_slice(&[0.0, 2.0, 3.0, 0.0, 0.0, 4.0, 5.0]);
    x.enable_grad();
    let y = x.block_reduce(ReduceOp::Mul, 3);
    assert_eq!(y.to_vec(), vec![0.0, 0.0, 5.0]);
    kiln::ad::backward_from(&y, &Float64::from_slice(&[1.0, 10.0, 100.0])).unwrap();
    assert_eq!(x.grad().to_vec(), vec![6.0, 0.0, 0.0, 0.0, 0.0, 0.0, 100.0]);
    // ties in a block share its cotangent, as the full reductions do
    let mut x = Float64::from_slice(&[3.0, 3.0, 1.0, 2.0]);
    x.enable_grad();
    let y = x.block_reduce(ReduceOp::Max, 3);
    assert_eq!(y.to_vec(), vec![3.0, 2.0]);
    kiln::ad::backward_from(&y, &Float64::from_slice(&[1.0, 10.0])).unwrap();
    assert_eq!(x.grad().to_vec(), vec![0.5, 0.5, 0.0, 10.0]);
    // integers reduce without derivatives; floats refuse And/Or; block 0 is an error
    let i = Int32::from_slice(&[6, 3, 5, 1, 7]);
    assert_eq!(i.block_reduce(ReduceOp::And, 2).to_vec(), vec![2, 1, 7]);
    assert_eq!(i.block_reduce(ReduceOp::Min, 2).to_vec(), vec![3, 1, 7]);
    let e = Float32::from_slice(&[1.0])
        .try_block_reduce(ReduceOp::Or, 1)
        .unwrap_err();
    assert!(e.to_string().contains("And/Or for integers"), "{e}");
    assert!(i.try_block_reduce(ReduceOp::Max, 0).is_err());
}

#[test]
fn prefix_sum_rule() {
    let _s = serial();
    for n in [0usize, 1, 2, 6, 33] {
        for excl in [false, true] {
            check(
                &[rand(n, 16)],
                move |x| x[0].exp().prefix_sum(excl) * &x[0],
                TOL,
            );
        }
    }
}

#[test]
fn dot_and_vector_ops() {
    let _s = serial();
    check(
        &[rand(5, 17), rand(5, 18)],
        |x| x[0].dot(&x[1]) * x[0].dot(&x[0]),
        TOL,
    );
    let vec3 = |x: &Float64, k: usize| -> Vector3d {
        let part = |j: u32| gather(x, &(UInt32::arange(2) * 3 + j + k as u32 * 6));
        Vector3d::new(part(0), part(1), part(2))
    };
    check(
        &[rand(12, 19)],
        move |x| {
            let (a, b) = (vec3(&x[0], 0), vec3(&x[0], 1));
            let c = a.cross(&b).normalize();
            c.dot(&a) + a.norm() * &c[0] + &c[1] * b.norm() + &c[2]
        },
        TOL,
    );
}

#[test]
fn no_leak_across_the_rules() {
    let _s = serial();
    let run = || {
        for _ in 0..20 {
            let mut x = Float64::from_slice(&rand(8, 20));
            let mut v = Float64::from_slice(&rand(3, 21));
            x.enable_grad();
            v.enable_grad();
            let i = UInt32::from_slice(&[1, 1, 6]);
            let mut t = gather(&x, &UInt32::arange(8)).prefix_sum(true).block_sum(2);
            scatter(&mut t, &v, &UInt32::from_slice(&[0, 3, 9]));
            scatter_reduce(ReduceOp::Add, &mut t, &v, &UInt32::from_slice(&[1, 1, 2]));
            let y = (gather_view(&t, &i) * &v).sum();
            y.backward();
            let _ = (x.grad(), v.grad());
            v.set_grad(&Float64::ones(3));
            kiln::ad::forward(&v).unwrap();
            let _ = y.grad();
            // a refused scatter leaves nothing behind either
            let mut u = Float64::zeros(2);
            let _ = kiln::try_scatter(ReduceOp::Mul, &mut u, &v, &UInt32::from_slice(&[0]), true);
        }
    };
    run(); // warm-up: anything cached on first use is not a leak
    no_leak(run);
}

#[test]
fn scatter_of_tracked_values_in_an_evaluated_branch_is_refused() {
    let _s = serial();
    let mut v = Float64::from_slice(&[1.0, 2.0, 3.0]);
    v.enable_grad();
    let refused = std::cell::Cell::new(None);
    let x = Float64::from_slice(&[0.0, 0.0, 0.0]);
    let body = |x: &Float64| {
        let mut t = x.clone();
        let r = kiln::try_scatter(ReduceOp::None, &mut t, &v, &UInt32::arange(3), true);
        refused.set(Some(matches!(
            r,
            Err(kiln::Error::NotDifferentiable { .. })
        )));
        t
    };
    let _ = kiln::control::Branch::new().mode(Mode::Evaluated).run(
        &UInt32::arange(3).lt(2),
        body,
        |x: &Float64| x.clone(),
        &x,
    );
    assert_eq!(refused.get(), Some(true));
    // outside an evaluated body the same scatter is differentiable
    let mut t = x.clone();
    kiln::try_scatter(ReduceOp::None, &mut t, &v, &UInt32::arange(3), true).unwrap();
    assert!(t.grad_enabled());
}
