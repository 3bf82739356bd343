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

/// Passes from several arrays at once (Dr.Jit's `enqueue` + `traverse`) equal the sum of the
/// single passes, in both modes, over arrays of mixed precision that share parts of the graph;
/// the seeds keep their gradients, and an array without one adds nothing.
#[test]
fn passes_from_several_arrays_add_up_as_single_passes() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let xs = [0.3, -1.2, 2.5];
    let mut a = Float64::from_slice(&xs);
    let mut b = Float32::from_slice(&[0.5, 1.5, -0.5]);
    a.enable_grad();
    b.enable_grad();
    let u = a.sin() * b.cast::<f64>();
    let v = &u * &a + b.cast::<f64>().exp();
    let w = &v * 2.0 + &u;
    // forward: tangents of a and b at once against one pass each (w's tangent is linear in them)
    let (ta, tb) = (
        Float64::from_slice(&[1.0, 0.5, -2.0]),
        Float32::from(3.0f32),
    );
    let single = |seed_a: bool| {
        a.clear_grad();
        b.clear_grad();
        if seed_a {
            a.set_grad(&ta);
            kiln::ad::forward_to(&w).unwrap();
        } else {
            b.set_grad(&tb);
            kiln::ad::forward_to(&w).unwrap();
        }
        w.grad().to_vec()
    };
    let (wa, wb) = (single(true), single(false));
    a.set_grad(&ta);
    b.set_grad(&tb);
    let unseeded = Float64::from(7.0);
    kiln::ad::forward_from_all(&(a.clone(), b.clone(), unseeded), false).unwrap();
    let sum: Vec<f64> = wa.iter().zip(&wb).map(|(x, y)| x + y).collect();
    close(&w.grad().to_vec(), &sum, 1e-6);
    close(&a.grad().to_vec(), &ta.to_vec(), 0.0);
    // reverse: cotangents on v and w at once against the two seeded passes
    let (cv, cw) = (Float64::from_slice(&[1.0, -1.0, 2.0]), Float64::from(0.25));
    let grads = |y: &Float64, c: &Float64| {
        a.clear_grad();
        b.clear_grad();
        kiln::ad::backward_with(y, c, true).unwrap();
        (a.grad().to_vec(), b.grad().to_vec())
    };
    let ((va, vb), (wa, wb)) = (grads(&v, &cv), grads(&w, &cw));
    a.clear_grad();
    b.clear_grad();
    v.set_grad(&cv);
    w.set_grad(&cw);
    kiln::ad::backward_from_all(&(v.clone(), w.clone()), false, false).unwrap();
    let add = |p: &[f64], q: &[f64]| -> Vec<f64> { p.iter().zip(q).map(|(x, y)| x + y).collect() };
    close(&a.grad().to_vec(), &add(&va, &wa), 1e-12);
    let bg: Vec<f64> = b.grad().to_vec().iter().map(|&g| g as f64).collect();
    let want: Vec<f64> = add(
        &vb.iter().map(|&g| g as f64).collect::<Vec<_>>(),
        &wb.iter().map(|&g| g as f64).collect::<Vec<_>>(),
    );
    close(&bg, &want, 1e-5);
    close(&v.grad().to_vec(), &cv.to_vec(), 0.0);
    // the pass consumed the graph
    assert!(kiln::ad::backward_from(&w, &Float64::from(1.0)).is_err());
}

/// `backward_to` (Dr.Jit's): the arrays below the targets that hold gradients are the seeds, only
/// the targets receive, and what they get equals a seeded pass restricted to them.
#[test]
fn backward_to_delivers_to_its_targets_only() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let (mut a, mut b, mut c) = (
        Float64::from_slice(&[1.0, 2.0]),
        Float64::from_slice(&[2.0, -1.0]),
        Float64::from_slice(&[3.0, 0.5]),
    );
    a.enable_grad();
    b.enable_grad();
    c.enable_grad();
    let (d, e, f) = (&a + &b, &a + &c, &b + &c);
    let (g, h, i) = (&d * &d, &e * &e, &f * &f);
    let seeds = [(&g, 10.0), (&h, 100.0), (&i, 1000.0)];
    for (y, s) in &seeds {
        y.set_grad(&Float64::from(*s));
    }
    b.set_grad(&Float64::from(-7.0)); // a non-target keeps what it holds
    kiln::ad::backward_to(&a, true, false).unwrap();
    // dg/da = 2d, dh/da = 2e; i does not depend on a
    let want: Vec<f64> = (0..2)
        .map(|k| 10.0 * 2.0 * d.to_vec()[k] + 100.0 * 2.0 * e.to_vec()[k])
        .collect();
    close(&a.grad().to_vec(), &want, 1e-12);
    close(&b.grad().to_vec(), &[-7.0, -7.0], 0.0);
    close(&c.grad().to_vec(), &[0.0, 0.0], 0.0);
    close(&g.grad().to_vec(), &[10.0, 10.0], 0.0);
    // a second call adds; clear_seeds leaves the seeds without gradients; without retain_graph
    // the graph is consumed
    kiln::ad::backward_to(&(a.clone(), c.clone()), false, true).unwrap();
    let twice: Vec<f64> = want.iter().map(|w| 2.0 * w).collect();
    close(&a.grad().to_vec(), &twice, 1e-12);
    let wc: Vec<f64> = (0..2)
        .map(|k| 100.0 * 2.0 * e.to_vec()[k] + 1000.0 * 2.0 * f.to_vec()[k])
        .collect();
    close(&c.grad().to_vec(), &wc, 1e-12);
    assert_eq!(h.grad().to_vec(), vec![0.0, 0.0]);
    assert!(kiln::ad::backward_from(&g, &Float64::from(1.0)).is_err());
}

/// An `isolate_grad` scope keeps the nodes it holds cotangents for alive until it ends (a freed
/// node's number may be reused by another array, which must not get them), and carries them on
/// keeping the graph when the pass that parked them kept it.
#[test]
fn isolate_scope_holds_its_nodes_and_the_passes_retain_flag() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let mut x = Float64::from(3.0);
    x.enable_grad();
    let z = &x * 2.0;
    let scope = kiln::ad::IsolateScope::begin();
    let y = &z * &z;
    y.backward();
    drop((y, z));
    let mut w = Float64::from(1.0);
    w.enable_grad(); // may take the freed number of a node the scope holds a cotangent for
    scope.end().unwrap();
    assert_eq!((x.grad().item(), w.grad().item()), (24.0, 0.0));
    // a retained pass inside: the graph stays for a pass after the scope
    let a = &x * 1.0;
    x.clear_grad();
    let scope = kiln::ad::IsolateScope::begin();
    kiln::ad::backward_with(&(&a * &a), &Float64::from(1.0), true).unwrap();
    scope.end().unwrap();
    (&a * 3.0).backward();
    assert_eq!(x.grad().item(), 2.0 * 3.0 + 3.0);
}

/// `backward_to` ends at its targets: an interior target without `enable_grad` gets its
/// gradient, the graph above it is neither consumed nor required, no other array's gradient
/// changes (also while another thread runs passes into them), and inside an `isolate_grad`
/// scope it still reaches its targets.
#[test]
fn backward_to_ends_at_its_targets() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let (mut x, mut w) = (Float64::from(3.0), Float64::from(2.0));
    x.enable_grad();
    w.enable_grad();
    let a = &x * &w; // 6
    let c = &a * &a;
    c.set_grad(&Float64::from(1.0));
    kiln::ad::backward_to(&a, false, false).unwrap();
    assert_eq!(a.grad().item(), 12.0);
    assert_eq!((x.grad().item(), w.grad().item()), (0.0, 0.0));
    (&a * 5.0).backward(); // the graph above `a` was not consumed
    assert_eq!((x.grad().item(), w.grad().item()), (10.0, 15.0));
    // the part above the target already consumed: not needed
    let b = &x * 1.0;
    (&b * 1.0).backward();
    let d = &b * &b;
    d.set_grad(&Float64::from(1.0));
    kiln::ad::backward_to(&b, true, false).unwrap();
    assert_eq!(b.grad().item(), 6.0);
    // inside an isolate scope
    x.clear_grad();
    let e = &x * &w;
    let scope = kiln::ad::IsolateScope::begin();
    let f = &e * &e;
    f.set_grad(&Float64::from(1.0));
    kiln::ad::backward_to(&x, true, false).unwrap();
    assert_eq!(x.grad().item(), 2.0 * 6.0 * 2.0);
    scope.end().unwrap();
    assert_eq!(w.grad().item(), 15.0, "backward_to reached only x");
    // another thread's passes into x while backward_to runs again and again
    x.clear_grad();
    let g = &x * &w;
    let h = &g * &g;
    h.set_grad(&Float64::from(1.0));
    let xs = x.clone();
    let runs = 200;
    let other = std::thread::spawn(move || {
        for _ in 0..runs {
            (&xs * 1.0).backward();
        }
    });
    for _ in 0..50 {
        kiln::ad::backward_to(&g, true, false).unwrap();
    }
    other.join().unwrap();
    assert_eq!(x.grad().item(), runs as f64);
    assert_eq!(g.grad().item(), 50.0 * 2.0 * 6.0);
}

/// Forward mode from several seeds where one is computed from another: that seed's tangent is
/// its own plus what flows into it, the sum of the single passes.
#[test]
fn forward_from_a_seed_below_another_adds_both() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let mut x = Float64::from(3.0);
    x.enable_grad();
    let y = &x * 2.0; // 6
    let z = &y * &y;
    x.set_grad(&Float64::from(1.0));
    y.set_grad(&Float64::from(10.0));
    kiln::ad::forward_from_all(&(x.clone(), y.clone()), false).unwrap();
    // dz = 2y (dy_own + 2 dx) = 12 (10 + 2)
    assert_eq!(z.grad().item(), 144.0);
    assert_eq!(
        y.grad().item(),
        10.0,
        "a seed keeps the gradient it was given"
    );
}

#[test]
fn replace_grad_routes_gradients_to_its_source_in_both_modes() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let before = kiln::stats().vars_alive;
    {
        // y = replace_grad(x^3, 2x): values of x^3, derivative that of 2x
        let mut x = Float64::from_slice(&[0.5, -1.5, 2.0]);
        x.enable_grad();
        let two_x = &x * 2.0;
        let y = (&x * &x * &x).replace_grad(&two_x).unwrap();
        assert_eq!(y.to_vec(), vec![0.125, -3.375, 8.0]);
        assert_eq!(y.ad_index(), two_x.ad_index()); // one node: one gradient
        (&y * &y).sum().backward(); // d(y^2) = 2 y dy = 2 x^3 · 2 dx
        close(&x.grad().to_vec(), &[0.5, -13.5, 32.0], 1e-12);
        // forward mode agrees
        x.clear_grad();
        let y = (&x * &x * &x).replace_grad(&(&x * 2.0)).unwrap();
        let z = &y * &y;
        x.set_grad(&Float64::from_slice(&[1.0, 1.0, 1.0]));
        kiln::ad::forward_from_all(&(x.clone(),), false).unwrap();
        close(&z.grad().to_vec(), &[0.5, -13.5, 32.0], 1e-12);
        // a size-1 source gets the lanes' sum; other sizes are refused, naming both arrays
        let mut s = Float64::from_slice(&[3.0]);
        s.enable_grad();
        let w = Float64::from_slice(&[1.0, 2.0]).replace_grad(&s).unwrap();
        (&w * 5.0).sum().backward();
        assert_eq!(s.grad().to_vec(), vec![10.0]);
        let e = x
            .replace_grad(&Float64::from_slice(&[1.0, 2.0]))
            .unwrap_err();
        assert!(e.to_string().contains("replace_grad"), "{e}");
        // a broadcast value keeps its sign (-0.0 stays -0.0)
        let q = Float64::from_slice(&[-0.0]).replace_grad(&w).unwrap();
        assert_eq!(
            (Float64::from(1.0) / &q).to_vec(),
            vec![f64::NEG_INFINITY; 2]
        );
        // inside a frozen function the recording follows the sizes (one recording, replays)
        let mut frozen = kiln::freeze(|v: &Float64, g: &mut Float64| {
            (v.replace_grad(g).unwrap() * 2.0).sum().backward();
        });
        for n in [2usize, 3, 5] {
            let mut g = Float64::zeros(n);
            g.enable_grad();
            frozen.call(&Float64::full(1.5, n), &mut g).unwrap();
            assert_eq!(g.grad().to_vec(), vec![2.0; n]);
        }
        assert_eq!(frozen.stats().recordings, 1, "{}", frozen.stats());
    }
    assert_eq!(kiln::stats().vars_alive, before);
}
