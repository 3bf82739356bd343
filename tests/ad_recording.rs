//! The recorded nodes of elementwise ops (the compact rules that keep tracing with gradients
//! cheap): each op's reverse gradient against central finite differences in f64, with a size-1
//! input broadcast over the others, and forward mode against reverse mode.
use kiln::prelude::*;
use std::sync::Mutex;

/// The tests that read engine-wide counters run one at a time (the others take it too).
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

const XS: [f64; 5] = [-1.7, -0.4, 0.3, 0.9, 2.2];
const S: f64 = 0.6;

type F = fn(&Float64, &Float64) -> Float64;

/// The ops under test, as functions of `x` (5 lanes) and `s` (1 lane, broadcast).
fn cases() -> Vec<(&'static str, F)> {
    vec![
        ("add", |x, s| x + s),
        ("sub", |x, s| s - x),
        ("mul", |x, s| x * s),
        ("mul self", |x, _| x * x),
        ("div x/s", |x, s| x / s),
        ("div s/x", |x, s| s / x),
        ("neg", |x, s| -(x * s)),
        ("abs sqrt", |x, s| (x * s).abs().sqrt()),
        ("min", |x, s| x.min(s)),
        ("max", |x, s| x.max(s)),
        ("fma", |x, s| x.fma(s, x)),
        ("fma 3", |x, s| s.fma(x, s)),
        ("chain", |x, s| ((x * s + 1.0) * x - s) / (x.abs() + s)),
    ]
}

fn total(f: F, xs: &[f64], s: f64) -> f64 {
    f(&Float64::from_slice(xs), &Float64::from(s)).sum().item()
}

/// Central differences of `sum(f(x, s))` with respect to each lane of x and to s.
fn numeric(f: F) -> (Vec<f64>, f64) {
    let h = 1e-6;
    let gx = (0..XS.len())
        .map(|i| {
            let (mut up, mut dn) = (XS.to_vec(), XS.to_vec());
            up[i] += h;
            dn[i] -= h;
            (total(f, &up, S) - total(f, &dn, S)) / (2.0 * h)
        })
        .collect();
    let gs = (total(f, &XS, S + h) - total(f, &XS, S - h)) / (2.0 * h);
    (gx, gs)
}

fn close(what: &str, got: f64, want: f64) {
    assert!(
        (got - want).abs() <= 1e-6 * (1.0 + want.abs()),
        "{what}: {got} vs finite differences {want}"
    );
}

#[test]
fn reverse_mode_matches_finite_differences() {
    let _serial = serial();
    for (name, f) in cases() {
        let (mut x, mut s) = (Float64::from_slice(&XS), Float64::from(S));
        x.enable_grad();
        s.enable_grad();
        f(&x, &s).sum().backward();
        let (gx, gs) = numeric(f);
        for (i, (got, want)) in x.grad().to_vec().into_iter().zip(gx).enumerate() {
            close(&format!("{name}: d/dx[{i}]"), got, want);
        }
        let g = s.grad();
        assert_eq!(
            g.len(),
            1,
            "{name}: the size-1 input's gradient has one lane"
        );
        close(&format!("{name}: d/ds"), g.item(), gs);
    }
}

#[test]
fn only_the_tracked_operand_gets_a_gradient() {
    let _serial = serial();
    // x carries a gradient, s does not (and the reverse): the rule captures only what the
    // tracked side's partial needs, and the untracked side stays without a node
    for (name, f) in cases() {
        let (gx, gs) = numeric(f);
        let mut x = Float64::from_slice(&XS);
        x.enable_grad();
        let s = Float64::from(S);
        f(&x, &s).sum().backward();
        for (i, (got, want)) in x.grad().to_vec().into_iter().zip(&gx).enumerate() {
            close(&format!("{name} (x only): d/dx[{i}]"), got, *want);
        }
        assert!(!s.grad_enabled());
        let x = Float64::from_slice(&XS);
        let mut s = Float64::from(S);
        s.enable_grad();
        f(&x, &s).sum().backward();
        close(&format!("{name} (s only): d/ds"), s.grad().item(), gs);
    }
}

#[test]
fn forward_mode_matches_reverse_mode() {
    let _serial = serial();
    for (name, f) in cases() {
        // the tangent along x = 1 in every lane: lane i of the output's tangent is d f_i / d x_i
        let (mut x, s) = (Float64::from_slice(&XS), Float64::from(S));
        x.enable_grad();
        let y = f(&x, &s);
        kiln::ad::forward(&x).unwrap();
        let fwd = y.grad().to_vec();
        let mut x2 = Float64::from_slice(&XS);
        x2.enable_grad();
        f(&x2, &s).sum().backward();
        for (i, (a, b)) in fwd.into_iter().zip(x2.grad().to_vec()).enumerate() {
            close(&format!("{name}: forward vs reverse [{i}]"), a, b);
        }
        // along s (one lane standing for all of the output's lanes)
        let (x, mut s) = (Float64::from_slice(&XS), Float64::from(S));
        s.enable_grad();
        let y = f(&x, &s);
        kiln::ad::forward(&s).unwrap();
        let t = y.grad();
        assert_eq!(
            t.len(),
            XS.len(),
            "{name}: the tangent has the output's lanes"
        );
        let (_, gs) = numeric(f);
        close(&format!("{name}: forward along s"), t.sum().item(), gs);
    }
}

#[test]
fn size_one_input_against_an_untracked_wide_one() {
    let _serial = serial();
    // s (1 lane, tracked) times c (5 lanes, no gradient): d/ds sum(s * c) = sum(c)
    let c = Float64::from_slice(&XS);
    let mut s = Float64::from(S);
    s.enable_grad();
    let y = (&s * &c).sum();
    y.backward();
    close("d/ds", s.grad().item(), XS.iter().sum());
    let mut s = Float64::from(S);
    s.enable_grad();
    let y = &s * &c;
    kiln::ad::forward(&s).unwrap();
    assert_eq!(y.grad().to_vec(), XS.to_vec());
}

fn row_of(table: &str, label: &str) -> String {
    table
        .lines()
        .find(|r| r.ends_with(label))
        .unwrap_or_else(|| panic!("no row {label}: {table}"))
        .to_string()
}

#[test]
fn whos_shows_which_variables_carry_gradients() {
    let _serial = serial();
    let mut x = Float64::from_slice(&XS).label("ad_whos_x");
    x.enable_grad();
    let y = x.sin().label("ad_whos_y");
    let plain = Float64::from_slice(&XS).label("ad_whos_plain");
    let table = kiln::whos().to_string();
    let row = |l: &str| row_of(&table, l);
    assert!(table.contains("Grad"), "{table}");
    assert!(row("ad_whos_x").contains("leaf"), "{table}");
    assert!(row("ad_whos_y").contains("sin"), "{table}");
    let p = row("ad_whos_plain");
    assert!(!p.contains("leaf") && !p.contains("sin"), "{table}");
    // a backward pass consumes y's node; dropping the handles takes the rows' marks away
    y.sum().backward();
    let table = kiln::whos().to_string();
    assert!(row_of(&table, "ad_whos_y").contains("used"), "{table}");
    drop(y);
    let table = kiln::whos().to_string();
    assert!(!table.contains("ad_whos_y"), "{table}");
    drop(x);
    let table = kiln::whos().to_string();
    assert!(
        table
            .lines()
            .filter(|r| r.ends_with("ad_whos_plain"))
            .all(|r| !r.contains("leaf")),
        "{table}"
    );
    drop(plain);
}

#[test]
fn backward_of_an_elementwise_chain_is_one_kernel() {
    let _serial = serial();
    let xs: Vec<f32> = (0..4096).map(|i| (i as f32 + 0.5) / 1024.0 - 2.0).collect();
    let mut x = Float32::from_slice(&xs);
    x.eval();
    x.enable_grad();
    let y = ((&x * &x + 1.0).tanh() * (-&x).exp() + x.abs().sqrt()).sum();
    let before = kiln::stats();
    y.backward();
    let g = x.grad();
    assert_eq!(
        kiln::stats().launches,
        before.launches,
        "backward only traces"
    );
    g.eval();
    assert_eq!(
        kiln::stats().launches - before.launches,
        1,
        "the gradient of an elementwise chain's sum is one fused kernel"
    );
    let g = g.to_vec();
    for (&v, &gi) in xs.iter().zip(&g) {
        let v = v as f64;
        let (t, e) = ((v * v + 1.0).tanh(), (-v).exp());
        let want = (1.0 - t * t) * 2.0 * v * e - t * e + v.signum() * 0.5 / v.abs().sqrt();
        assert!(
            (gi as f64 - want).abs() <= 1e-4 * (1.0 + want.abs()),
            "{v}: {gi} vs {want}"
        );
    }
}

#[test]
fn tracing_with_gradients_leaves_no_nodes_behind() {
    let _serial = serial();
    let before = kiln::stats();
    let a = Float32::from_slice(&[1.0; 16]);
    let b = Float32::from_slice(&[0.5; 16]);
    let mut ag = a.clone();
    ag.enable_grad();
    for _ in 0..10 {
        let mut y = &ag + &b;
        for j in 1..200 {
            y = if j % 2 == 0 { &y + &b } else { &y * &ag };
        }
        assert_eq!(kiln::stats().ad_nodes, before.ad_nodes + 201);
    }
    drop(ag);
    let after = kiln::stats();
    assert_eq!(after.ad_nodes, before.ad_nodes);
    assert_eq!(after.ad_edges, before.ad_edges);
}
