//! Derivative rules of tensors: views, broadcasting, axis reductions, `argmax`, `matmul`:
//! reverse mode = forward mode = central finite differences in f64, sizes 0 and 1 included; the
//! AD graph is freed afterwards.
mod ad_check;
use ad_check::{check, no_leak, rand, serial};
use kiln::prelude::*;

const TOL: f64 = 1e-6;

fn t(x: &Float64, shape: &[usize]) -> Tensor<f64> {
    Tensor::from_array(x.clone(), shape)
}

/// A tensor function checked as a function of the flat arrays (the output weighted so that
/// every element matters differently).
fn check_t(shapes: &[&[usize]], f: impl Fn(&[Tensor<f64>]) -> Tensor<f64> + 'static) {
    let shapes: Vec<Vec<usize>> = shapes.iter().map(|s| s.to_vec()).collect();
    let xs: Vec<Vec<f64>> = shapes
        .iter()
        .enumerate()
        .map(|(k, s)| rand(s.iter().product(), 100 + k as u64))
        .collect();
    check(
        &xs,
        move |a| {
            let ts: Vec<Tensor<f64>> = a.iter().zip(&shapes).map(|(x, s)| t(x, s)).collect();
            let out = f(&ts);
            // nonlinear, so that a wrong cotangent shows
            out.into_array().sin()
        },
        TOL,
    );
}

#[test]
fn permute_and_transpose() {
    let _s = serial();
    check_t(&[&[2, 3, 4]], |x| x[0].permute(&[2, 0, 1]) * 2.0);
    check_t(&[&[3, 5]], |x| x[0].transpose().exp());
    check_t(&[&[0, 3]], |x| x[0].transpose());
    check_t(&[&[1, 1]], |x| x[0].transpose());
    // a transposed view used twice, combined with the original
    check_t(&[&[3, 3]], |x| &x[0].transpose() * &x[0] + x[0].transpose());
}

#[test]
#[allow(clippy::reversed_empty_ranges)] // negative steps walk from start down to stop
fn slices_flips_and_index_axis() {
    let _s = serial();
    check_t(&[&[4, 6]], |x| x[0].slice(kiln::s![1..3, ..;2]));
    check_t(&[&[4, 6]], |x| x[0].slice(kiln::s![-1, ..;-2]));
    check_t(&[&[4, 6]], |x| x[0].slice(kiln::s![2..2, ..]));
    check_t(&[&[1]], |x| x[0].slice(kiln::s![..]));
    check_t(&[&[3, 2, 2]], |x| x[0].flip(1) * &x[0]);
    check_t(&[&[3, 4]], |x| x[0].index_axis(1, 2));
    check_t(&[&[3, 4]], |x| {
        &x[0].index_axis(0, 0) + &x[0].index_axis(0, 2)
    });
    check_t(&[&[2, 5]], |x| x[0].slice(kiln::s![1..2;5, 4..0;-2]));
    check_t(&[&[3, 7, 2]], |x| {
        x[0].slice(kiln::s![..;2, 1..;3, -1]).exp()
    });
    // overlapping slices of one tensor add up
    check_t(&[&[8]], |x| {
        &x[0].slice(kiln::s![..6]) * &x[0].slice(kiln::s![2..])
    });
}

#[test]
fn reshape_squeeze_and_get() {
    let _s = serial();
    check_t(&[&[2, 6]], |x| {
        x[0].reshape(&[3, 4]).transpose().reshape(&[12])
    });
    check_t(&[&[1, 3, 1]], |x| x[0].squeeze().unsqueeze(0));
    check_t(&[&[2, 3]], |x| {
        let g = x[0].get(&[1, 2]);
        x[0].map(|a| a * &g)
    });
}

#[test]
fn broadcasting() {
    let _s = serial();
    check_t(&[&[3, 1]], |x| x[0].broadcast_to(&[2, 3, 4]));
    check_t(&[&[]], |x| x[0].broadcast_to(&[2, 2]));
    check_t(&[&[1]], |x| x[0].broadcast_to(&[0, 3]));
    check_t(&[&[2, 3], &[3]], |x| &x[0] * &x[1]);
    check_t(&[&[2, 1, 4], &[3, 1]], |x| (&x[0] - &x[1]).tanh() * &x[1]);
    check_t(&[&[4]], |x| &x[0] / &Tensor::scalar(3.0));
}

#[test]
fn concat_and_stack() {
    let _s = serial();
    check_t(&[&[2, 3], &[2, 1], &[2, 0]], |x| {
        Tensor::concat(&[x[0].clone(), x[1].clone(), x[2].clone()], 1)
    });
    // an untracked part between tracked ones
    check_t(&[&[1, 2], &[3, 2]], |x| {
        Tensor::concat(&[x[0].clone(), Tensor::full(5.0, &[2, 2]), x[1].clone()], 0) * 1.5
    });
    check_t(&[&[3], &[3]], |x| {
        Tensor::stack(&[x[0].clone(), x[1].exp()], 1)
    });
    check_t(&[&[2, 2]], |x| {
        Tensor::stack(&[x[0].clone(), x[0].transpose()], 0)
    });
}

#[test]
fn axis_reductions() {
    let _s = serial();
    for axis in 0..3 {
        check_t(&[&[2, 3, 4]], move |x| x[0].sum_axis(axis));
        check_t(&[&[2, 3, 4]], move |x| x[0].mean_axis_keepdim(axis) * 3.0);
        check_t(&[&[2, 3, 4]], move |x| x[0].prod_axis(axis));
        check_t(&[&[2, 3, 4]], move |x| x[0].max_axis(axis));
        check_t(&[&[2, 3, 4]], move |x| x[0].min_axis_keepdim(axis));
    }
    check_t(&[&[3, 0]], |x| x[0].sum_axis(1));
    check_t(&[&[0, 3]], |x| x[0].max_axis(1));
    check_t(&[&[1, 1]], |x| x[0].prod_axis(0));
    // a product along an axis with a zero in a slice (two zeros in another)
    let mut x = Float64::from_slice(&[0.0, 2.0, 3.0, 0.0, 0.0, 5.0]);
    x.enable_grad();
    let y = t(&x, &[2, 3]).prod_axis(1).sum();
    y.backward();
    assert_eq!(x.grad().to_vec(), vec![6.0, 0.0, 0.0, 0.0, 0.0, 0.0]);
    // ties split the cotangent
    let mut x = Float64::from_slice(&[4.0, 1.0, 4.0, 2.0]);
    x.enable_grad();
    t(&x, &[2, 2]).max_axis(0).sum().backward();
    assert_eq!(x.grad().to_vec(), vec![0.5, 0.0, 0.5, 1.0]);
}

#[test]
fn argmax_has_no_gradient_and_records_nothing() {
    let _s = serial();
    let mut x = Float64::from_slice(&rand(6, 5));
    x.enable_grad();
    let before = kiln::stats().ad_nodes;
    let i = t(&x, &[2, 3]).argmax_axis(1);
    assert_eq!(kiln::stats().ad_nodes, before);
    let picked = gather(
        &x,
        &(i.into_array().cast::<u32>() + UInt32::from_slice(&[0, 3])),
    );
    picked.sum().backward();
    let v = x.detach().to_vec();
    let g = x.grad().to_vec();
    for r in 0..2 {
        let row = &v[r * 3..r * 3 + 3];
        let m = (0..3).fold(0, |b, k| if row[k] > row[b] { k } else { b });
        for k in 0..3 {
            assert_eq!(g[r * 3 + k], if k == m { 1.0 } else { 0.0 });
        }
    }
}

#[test]
fn matmul_rule() {
    let _s = serial();
    check_t(&[&[3, 4], &[4, 2]], |x| x[0].matmul(&x[1]));
    check_t(&[&[1, 1], &[1, 5]], |x| x[0].matmul(&x[1]));
    check_t(&[&[2, 0], &[0, 3]], |x| x[0].matmul(&x[1]) + 1.0);
    check_t(&[&[3, 3]], |x| x[0].matmul(&x[0].transpose()));
    check_t(&[&[3, 3]], |x| x[0].matmul(&x[0]));
    // one operand a constant
    check_t(&[&[2, 3]], |x| {
        x[0].matmul(&Tensor::eye(3)).matmul(&x[0].transpose())
    });
}

#[test]
fn f32_views_keep_their_type() {
    let _s = serial();
    let mut x = Float32::from_slice(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
    x.enable_grad();
    let tt = Tensor::from_array(x.clone(), &[2, 3]);
    let y = (&tt.transpose().slice(kiln::s![1.., ..]) * &tt.sum_axis_keepdim(1).transpose()).sum();
    y.backward();
    // y = Σ_{j≥1, i} x[i][j] · s_i with s_i the row sums
    let v = x.detach().to_vec();
    let s = [v[0] + v[1] + v[2], v[3] + v[4] + v[5]];
    let mut want = vec![0.0f32; 6];
    for i in 0..2 {
        for j in 0..3 {
            let own = if j >= 1 { s[i] } else { 0.0 };
            let through_sum = v[i * 3 + 1] + v[i * 3 + 2];
            want[i * 3 + j] = own + through_sum;
        }
    }
    assert_eq!(x.grad().to_vec(), want);
}

#[test]
fn no_leak_across_the_rules() {
    let _s = serial();
    let run = || {
        for _ in 0..10 {
            let mut a = Float64::from_slice(&rand(12, 1));
            let mut b = Float64::from_slice(&rand(4, 2));
            a.enable_grad();
            b.enable_grad();
            let ta = t(&a, &[3, 4]);
            let tb = t(&b, &[4, 1]);
            let c = ta.matmul(&tb).broadcast_to(&[2, 3, 1]);
            let d = Tensor::concat(
                &[
                    c.permute(&[1, 0, 2]).reshape(&[3, 2]),
                    ta.slice(kiln::s![.., 1..3]),
                ],
                1,
            );
            let y = (d.flip(0).max_axis(1).sum_axis(0).sum() + ta.prod_axis(0).mean_axis(0).sum())
                .sum();
            y.backward();
            let _ = (a.grad(), b.grad());
            a.set_grad(&Float64::ones(12));
            kiln::ad::forward(&a).unwrap();
            let _ = y.grad();
            let _ = ta.argmax_axis(0);
        }
    };
    run();
    no_leak(run);
}

#[test]
fn in_place_transpose_and_flip_keep_gradients_right() {
    let _s = serial();
    check_t(&[&[2, 3]], |x| {
        let mut y = &x[0] * 1.0;
        y.eval();
        y.transpose_in_place();
        &y * &Tensor::from_vec(vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0], &[3, 2])
    });
    check_t(&[&[3, 2]], |x| {
        let y = (&x[0] * 1.0).into_flipped(0);
        &y * &Tensor::from_vec(vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0], &[3, 2])
    });
    check_t(&[&[2, 2]], |x| {
        let y = x[0].exp();
        y.eval();
        y.into_transposed() * &Tensor::from_vec(vec![1.0, 2.0, 3.0, 4.0], &[2, 2])
    });
}

#[test]
fn view_adjoints_are_views_fused_into_one_kernel() {
    let _s = serial();
    type View = fn(&Tensor<f64>) -> Tensor<f64>;
    let views: [View; 4] = [
        |t| t.permute(&[1, 0, 2]),
        |t| t.slice(kiln::s![1.., ..;-2, 1]),
        |t| t.flip(2).index_axis(0, 1),
        |t| Tensor::concat(&[t.slice(kiln::s![..1]), t.slice(kiln::s![1..])], 0).transpose(),
    ];
    for view in views {
        let mut x = Float64::from_slice(&rand(24, 3));
        x.eval();
        x.enable_grad();
        let y = (view(&t(&x, &[2, 3, 4])) * 3.0).exp().sum();
        y.eval();
        y.backward();
        let before = kiln::stats();
        let g = x.grad();
        g.eval();
        let after = kiln::stats();
        // one kernel (no scatter, no intermediate array) and nothing read out of range
        assert_eq!(after.launches - before.launches, 1);
        assert_eq!(after.oob_reads, before.oob_reads);
        assert!(g.to_vec().iter().any(|&v| v != 0.0));
    }
}

#[test]
fn matmul_gradients_replay_frozen_and_differentiate_again() {
    let _s = serial();
    // the backward products read Wᵀ and xᵀ in place (no transposed copy): a frozen step replays
    // them, and a pass that records itself (hvp) still differentiates them again
    let loss_at = |w: &Float64, x: &Float64| -> Float64 {
        let x = Tensor::from_array(x.clone(), &[3, 4]);
        let y = x.matmul(&Tensor::from_array(w.clone(), &[4, 2])).tanh();
        let z = y.matmul(&y.transpose());
        (z.array() * z.array()).sum()
    };
    let body = |w: &Float64, x: &Float64| -> Float64 {
        let mut w = w.detach();
        w.enable_grad();
        loss_at(&w, x).backward();
        w.grad()
    };
    let mut frozen = kiln::freeze(body);
    let x = Float64::from_slice(&rand(12, 3));
    for seed in 0..3 {
        let w = Float64::from_slice(&rand(8, 10 + seed));
        assert_eq!(
            frozen.call(&w, &x).unwrap().to_vec(),
            body(&w, &x).to_vec(),
            "call {seed}"
        );
    }
    let loss = |w: &Float64| loss_at(w, &x);
    assert_eq!(frozen.stats().replays, 2);
    let w0 = rand(8, 20);
    let v = rand(8, 21);
    let hv = kiln::hvp(loss, &Float64::from_slice(&w0), &Float64::from_slice(&v))
        .unwrap()
        .to_vec();
    let h = 1e-6;
    let at = |s: f64| {
        let w: Vec<f64> = w0.iter().zip(&v).map(|(a, b)| a + s * b).collect();
        kiln::grad(loss, &Float64::from_slice(&w)).unwrap().to_vec()
    };
    let (gp, gm) = (at(h), at(-h));
    for k in 0..8 {
        let fd = (gp[k] - gm[k]) / (2.0 * h);
        assert!(
            (hv[k] - fd).abs() < 1e-6 * (1.0 + fd.abs()),
            "{k}: {} vs {fd}",
            hv[k]
        );
    }
}

/// A tangent of one value (`set_grad(&Float64::from(1.0))`) stands for every element through
/// tensor views too, as it does through elementwise code.
#[test]
fn a_one_value_tangent_passes_through_views() {
    let _s = serial();
    let mut x = Float64::from_slice(&[1.0, 2.0, 3.0, 4.0]);
    x.enable_grad();
    x.set_grad(&Float64::from(1.0));
    let xs = Tensor::from_array(x.clone(), &[2, 2]);
    let y = (xs.index_axis(0, 1) * 2.0).array().clone();
    let z = xs.transpose().reshape(&[4]).array().clone();
    kiln::ad::forward(&x).unwrap();
    assert_eq!(y.grad().to_vec(), vec![2.0, 2.0]);
    assert_eq!(z.grad().to_vec(), vec![1.0; 4]);
}
