//! Reverse and forward mode on straight-line code: known values, lifetimes, bad input.
use kiln::prelude::*;
use std::sync::Mutex;

/// The AD graph's counters are global: tests of this file run one at a time so that one of them
/// can compare counts before and after.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn close(a: &[f64], b: &[f64], tol: f64) {
    assert_eq!(a.len(), b.len());
    for (x, y) in a.iter().zip(b) {
        assert!((x - y).abs() <= tol * (1.0 + y.abs()), "{a:?} vs {b:?}");
    }
}

#[test]
fn reverse_of_the_issue_expression() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let xs = [-1.5, -0.3, 0.2, 0.7, 2.0];
    let mut x = Float64::from_slice(&xs);
    x.enable_grad();
    let y = ((&x * &x + 1.0).tanh() * (-&x).exp() + x.abs().sqrt()).sum();
    y.backward();
    let want: Vec<f64> = xs
        .iter()
        .map(|&v: &f64| {
            let t = (v * v + 1.0).tanh();
            (1.0 - t * t) * 2.0 * v * (-v).exp() - t * (-v).exp()
                + v.signum() * 0.5 / v.abs().sqrt()
        })
        .collect();
    close(&x.grad().to_vec(), &want, 1e-12);
}

#[test]
fn forward_matches_reverse() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let mut x = Float64::from_slice(&[0.3, 0.9, 1.7]);
    x.enable_grad();
    let y = (x.sin() * x.log() + x.pow(2.5)).atan2(&x + 0.5);
    kiln::ad::forward(&x).unwrap();
    let fwd = y.grad().to_vec();
    let mut x2 = x.detach();
    x2.enable_grad();
    let y2 = (x2.sin() * x2.log() + x2.pow(2.5)).atan2(&x2 + 0.5);
    kiln::ad::backward_from(&y2, &Float64::ones(3)).unwrap();
    close(&x2.grad().to_vec(), &fwd, 1e-12);
}

#[test]
fn graph_freed_after_backward_and_drop() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let before = kiln::stats();
    for _ in 0..50 {
        let mut x = Float32::linspace(0.0, 1.0, 100);
        x.enable_grad();
        let y = (&x * &x).exp().sum();
        y.backward();
        let _ = x.grad();
    }
    let after = kiln::stats();
    assert_eq!(after.ad_nodes, before.ad_nodes);
    assert_eq!(after.ad_edges, before.ad_edges);
}

#[test]
fn second_backward_through_consumed_graph_is_an_error() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let mut x = Float64::from(2.0);
    x.enable_grad();
    let y = &x * &x;
    y.backward();
    let e = y.try_backward().unwrap_err();
    assert!(e.to_string().contains("consumed"), "{e}");
}

#[test]
fn non_scalar_backward_needs_a_seed() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let mut x = Float64::from_slice(&[1.0, 2.0]);
    x.enable_grad();
    let y = &x * 2.0;
    assert!(y
        .try_backward()
        .unwrap_err()
        .to_string()
        .contains("backward_from"));
}

#[test]
fn prod_min_max_select_cast() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let mut x = Float64::from_slice(&[2.0, 0.0, 3.0, 3.0]);
    x.enable_grad();
    let y = x.prod()
        + x.reduce_max()
        + select(&x.gt(1.0), &x * 2.0, &x * 5.0).sum()
        + x.cast::<f32>().cast::<f64>().sum();
    y.backward();
    close(
        &x.grad().to_vec(),
        &[
            0.0 + 2.0 + 1.0,
            18.0 + 5.0 + 1.0,
            0.5 + 2.0 + 1.0,
            0.5 + 2.0 + 1.0,
        ],
        1e-12,
    );
}
