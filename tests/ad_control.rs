//! AD through control flow: branches, calls and dispatch (reverse and forward mode), loops
//! (both modes), scans (JAX's face; PyTensor's refused) and stencils, in symbolic and evaluated mode.
//! Oracles: central finite differences in f64, and forward mode against reverse mode.
use kiln::control::{Branch, Loop, Mode, Switch, Target};
use kiln::prelude::*;
use std::sync::Mutex;

/// The AD graph is global: tests that count its nodes run one at a time.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

const MODES: [Mode; 2] = [Mode::Symbolic, Mode::Evaluated];
const H: f64 = 1e-6;

fn close(got: &[f64], want: &[f64], tol: f64, what: &str) {
    assert_eq!(got.len(), want.len(), "{what}");
    for (i, (a, b)) in got.iter().zip(want).enumerate() {
        assert!(
            (a - b).abs() <= tol * (1.0 + b.abs()),
            "{what}: lane {i}: {a} vs {b}\n got {got:?}\nwant {want:?}"
        );
    }
}

fn nodes() -> u64 {
    kiln::stats().ad_nodes
}

/// Central differences of a lane-local function `f` of `x` (all lanes perturbed at once: lane
/// `i` of the result depends only on lane `i` of `x`).
fn fd_lanes(f: &dyn Fn(&Float64) -> Float64, x: &[f64]) -> Vec<f64> {
    let up: Vec<f64> = x.iter().map(|v| v + H).collect();
    let dn: Vec<f64> = x.iter().map(|v| v - H).collect();
    let a = f(&Float64::from_slice(&up)).to_vec();
    let b = f(&Float64::from_slice(&dn)).to_vec();
    a.iter().zip(&b).map(|(a, b)| (a - b) / (2.0 * H)).collect()
}

/// Central difference of `Σ f` in a size-1 parameter.
fn fd_scalar(f: &dyn Fn(f64) -> Float64, w: f64) -> f64 {
    (f(w + H).sum().item() - f(w - H).sum().item()) / (2.0 * H)
}

// ---------------------------------------------------------------------------------------------
// if_then_else

fn branch(mode: Mode, x: &Float64, w: &Float64) -> Float64 {
    Branch::new()
        .mode(mode)
        .run(
            &x.detach().lt(0.5),
            |(x, w): &(Float64, Float64)| x.sin() * w + x * x,
            |(x, w): &(Float64, Float64)| (x * w).exp() - x.sqrt(),
            &(x.clone(), w.clone()),
        )
        .unwrap()
}

const XS: [f64; 7] = [-1.3, 0.1, 0.3, 0.7, 0.9, 1.6, 2.2];

#[test]
fn if_then_else_reverse_matches_finite_differences() {
    let _s = serial();
    let before = nodes();
    for mode in MODES {
        let mut x = Float64::from_slice(&XS);
        let mut w = Float64::from(0.75);
        x.enable_grad();
        w.enable_grad();
        let y = branch(mode, &x, &w);
        assert!(y.grad_enabled());
        y.sum().backward();
        let wv = Float64::from(0.75);
        let want_x = fd_lanes(&|x| branch(mode, x, &wv), &XS);
        close(&x.grad().to_vec(), &want_x, 1e-7, &format!("{mode:?} d/dx"));
        let xv = Float64::from_slice(&XS);
        let want_w = fd_scalar(&|w| branch(mode, &xv, &Float64::from(w)), 0.75);
        close(
            &w.grad().to_vec(),
            &[want_w],
            1e-7,
            &format!("{mode:?} d/dw"),
        );
        // the primal is what the construct computes without gradients
        let plain = branch(mode, &x.detach(), &w.detach()).to_vec();
        close(&y.to_vec(), &plain, 0.0, "primal");
    }
    assert_eq!(nodes(), before);
}

#[test]
fn if_then_else_forward_matches_reverse() {
    let _s = serial();
    let before = nodes();
    for mode in MODES {
        let mut x = Float64::from_slice(&XS);
        x.enable_grad();
        let w = Float64::from(1.25);
        let y = branch(mode, &x, &w);
        kiln::ad::forward(&x).unwrap();
        let fwd = y.grad().to_vec();
        let mut x2 = x.detach();
        x2.enable_grad();
        let y2 = branch(mode, &x2, &w);
        kiln::ad::backward_from(&y2, &Float64::ones(XS.len())).unwrap();
        close(&fwd, &x2.grad().to_vec(), 1e-12, &format!("{mode:?}"));
        // and both against finite differences
        close(&fwd, &fd_lanes(&|x| branch(mode, x, &w), &XS), 1e-7, "fd");
    }
    assert_eq!(nodes(), before);
}

#[test]
fn branch_singularity_on_the_other_side_does_not_poison_gradients() {
    // log(x) on the lanes with x ≤ 0 is NaN, and its derivative infinite, but those lanes take
    // the other branch: their gradient must be the other branch's
    let _s = serial();
    for mode in MODES {
        let mut x = Float64::from_slice(&[-2.0, 0.0, 3.0]);
        x.enable_grad();
        let y = Branch::new()
            .mode(mode)
            .run(
                &x.detach().gt(0.0),
                |x: &Float64| x.log(),
                |x: &Float64| x * 2.0,
                &x,
            )
            .unwrap();
        y.sum().backward();
        close(&x.grad().to_vec(), &[2.0, 2.0, 1.0 / 3.0], 1e-14, "grad");
    }
}

#[test]
fn branch_with_integer_and_float_outputs() {
    let _s = serial();
    for mode in MODES {
        let mut x = Float64::from_slice(&[0.2, 0.8]);
        x.enable_grad();
        let (y, k) = Branch::new()
            .mode(mode)
            .run(
                &x.detach().lt(0.5),
                |x: &Float64| (x * 3.0, UInt32::full(1, 2)),
                |x: &Float64| (x * x, UInt32::full(2, 2)),
                &x,
            )
            .unwrap();
        assert_eq!(k.to_vec(), vec![1, 2]);
        y.sum().backward();
        close(&x.grad().to_vec(), &[3.0, 1.6], 1e-14, "grad");
    }
}

// ---------------------------------------------------------------------------------------------
// switch and dispatch

fn switch_run(mode: Mode, idx: &UInt32, x: &Float64, w: &Float64) -> Float64 {
    let a = |(x, w): &(Float64, Float64)| x.cos() * w;
    let b = |(x, w): &(Float64, Float64)| x * x * x + w;
    let c = |(x, _w): &(Float64, Float64)| x.tanh();
    let targets: [Target<'_, (Float64, Float64), Float64>; 4] =
        [Some(&a), Some(&b), None, Some(&c)];
    Switch::new()
        .mode(mode)
        .run(idx, &targets, &(x.clone(), w.clone()))
        .unwrap()
}

#[test]
fn switch_reverse_and_forward_match_finite_differences() {
    let _s = serial();
    let before = nodes();
    let idx = UInt32::from_slice(&[0, 1, 2, 3, 1, 0, 3]);
    let wv: Vec<f64> = vec![0.5, -1.0, 2.0, 0.25, 1.5, 3.0, -0.5];
    for mode in MODES {
        let mut x = Float64::from_slice(&XS);
        let mut w = Float64::from_slice(&wv);
        x.enable_grad();
        w.enable_grad();
        let y = switch_run(mode, &idx, &x, &w);
        kiln::ad::backward_from(&y, &Float64::ones(XS.len())).unwrap();
        let w0 = Float64::from_slice(&wv);
        let x0 = Float64::from_slice(&XS);
        let want_x = fd_lanes(&|x| switch_run(mode, &idx, x, &w0), &XS);
        let want_w = fd_lanes(&|w| switch_run(mode, &idx, &x0, w), &wv);
        close(&x.grad().to_vec(), &want_x, 1e-7, &format!("{mode:?} d/dx"));
        close(&w.grad().to_vec(), &want_w, 1e-7, &format!("{mode:?} d/dw"));
        // the None target's lane gets nothing
        assert_eq!(x.grad().to_vec()[2], 0.0);
        // forward mode from x
        let mut x3 = x0.detach();
        x3.enable_grad();
        let y3 = switch_run(mode, &idx, &x3, &w0);
        kiln::ad::forward(&x3).unwrap();
        close(
            &y3.grad().to_vec(),
            &want_x,
            1e-7,
            &format!("{mode:?} forward"),
        );
    }
    assert_eq!(nodes(), before);
}

trait Shape: Sync {
    fn value(&self, p: &(Float64, Float64)) -> Float64;
}
struct Disc(f64);
struct Wave(f64);
impl Shape for Disc {
    fn value(&self, (x, y): &(Float64, Float64)) -> Float64 {
        (x * x + y * y) * self.0
    }
}
impl Shape for Wave {
    fn value(&self, (x, y): &(Float64, Float64)) -> Float64 {
        (x * self.0).sin() * y.exp()
    }
}

#[test]
fn dispatch_over_trait_objects() {
    let _s = serial();
    let before = nodes();
    let shapes: [&dyn Shape; 2] = [&Disc(2.0), &Wave(3.0)];
    let idx = UInt32::from_slice(&[1, 0, 0, 1, 1]);
    let xs = [0.1, -0.4, 0.9, 1.3, -2.0];
    let ys = [0.3, 0.2, -0.7, 0.5, 0.05];
    for mode in MODES {
        let run = |x: &Float64, y: &Float64| {
            Switch::new()
                .mode(mode)
                .dispatch(&idx, &shapes, &(x.clone(), y.clone()), |s, p| s.value(p))
                .unwrap()
        };
        let (mut x, mut y) = (Float64::from_slice(&xs), Float64::from_slice(&ys));
        x.enable_grad();
        y.enable_grad();
        run(&x, &y).sum().backward();
        let y0 = Float64::from_slice(&ys);
        let x0 = Float64::from_slice(&xs);
        close(
            &x.grad().to_vec(),
            &fd_lanes(&|x| run(x, &y0), &xs),
            1e-7,
            "d/dx",
        );
        close(
            &y.grad().to_vec(),
            &fd_lanes(&|y| run(&x0, y), &ys),
            1e-7,
            "d/dy",
        );
    }
    // kiln::dispatch (automatic mode) too
    let mut x = Float64::from_slice(&xs);
    x.enable_grad();
    let y0 = Float64::from_slice(&ys);
    let v = kiln::dispatch(&idx, &shapes, &(x.clone(), y0.clone()), |s, p| s.value(p)).unwrap();
    kiln::ad::forward(&x).unwrap();
    let want = fd_lanes(
        &|x| kiln::dispatch(&idx, &shapes, &(x.clone(), y0.clone()), |s, p| s.value(p)).unwrap(),
        &xs,
    );
    close(&v.grad().to_vec(), &want, 1e-7, "auto forward");
    drop((v, x));
    assert_eq!(nodes(), before);
}

/// A lane-local function of one array, boxed.
type Lanewise<'a> = Box<dyn Fn(&Float64) -> Float64 + 'a>;

/// Central differences of the gradient `g` (a lane-local function of `x`): the diagonal of the
/// Hessian, what `hvp` along ones gives for a lane-local function.
fn fd_of_gradient(g: &dyn Fn(&Float64) -> Float64, x: &[f64]) -> Vec<f64> {
    let h = 1e-5;
    let up: Vec<f64> = x.iter().map(|v| v + h).collect();
    let dn: Vec<f64> = x.iter().map(|v| v - h).collect();
    let a = g(&Float64::from_slice(&up)).to_vec();
    let b = g(&Float64::from_slice(&dn)).to_vec();
    a.iter().zip(&b).map(|(a, b)| (a - b) / (2.0 * h)).collect()
}

/// Second derivatives through branches, switches and dispatch in both modes (issue 26): inside
/// `kiln::hvp` and nested transformations each target runs on its own lanes with its
/// derivatives recorded, so the gradient is differentiated again — against central differences
/// of the first-order gradient, per lane; a third derivative by `jvp` over `hvp`; nothing leaks.
#[test]
fn second_and_third_derivatives_through_branches_switches_and_dispatch() {
    let _s = serial();
    let before = nodes();
    let wv: Vec<f64> = vec![0.5, -1.0, 2.0, 0.25, 1.5, 3.0, -0.5];
    let idx = UInt32::from_slice(&[0, 1, 2, 3, 1, 0, 3]);
    let shapes: [&dyn Shape; 2] = [&Disc(2.0), &Wave(3.0)];
    let which = UInt32::from_slice(&[1, 0, 0, 1, 1, 0, 1]);
    let ys = Float64::from_slice(&[0.3, 0.2, -0.7, 0.5, 0.05, 0.4, -0.2]);
    let ones = Float64::ones(XS.len());
    for mode in MODES {
        let w = Float64::from_slice(&wv);
        let fs: [(&str, Lanewise<'_>); 3] = [
            ("if_then_else", Box::new(|x: &Float64| branch(mode, x, &w))),
            (
                "switch",
                Box::new(|x: &Float64| switch_run(mode, &idx, x, &w)),
            ),
            (
                "dispatch",
                Box::new(|x: &Float64| {
                    Switch::new()
                        .mode(mode)
                        .dispatch(&which, &shapes, &(x.clone(), ys.clone()), |s, p| s.value(p))
                        .unwrap()
                }),
            ),
        ];
        for (name, f) in &fs {
            let what = format!("{name} {mode:?}");
            let grad = |x: &Float64| kiln::grad(|x: &Float64| f(x).sum(), x).unwrap();
            let x = Float64::from_slice(&XS);
            let hv = kiln::hvp(|x: &Float64| f(x).sum(), &x, &ones).unwrap();
            close(&hv.to_vec(), &fd_of_gradient(&grad, &XS), 1e-6, &what);
            // the third derivative: forward mode over the Hessian-vector product
            let hvp_at = |x: &Float64| kiln::hvp(|x: &Float64| f(x).sum(), x, &ones).unwrap();
            let (_, third) = kiln::jvp(|x: &Float64| hvp_at(x), &x, &ones).unwrap();
            close(
                &third.to_vec(),
                &fd_of_gradient(&hvp_at, &XS),
                1e-5,
                &format!("{what} third"),
            );
        }
    }
    assert_eq!(nodes(), before, "AD nodes leaked");
}

/// Found by adversarial testing of the recorded branch: a target returning one value (a
/// captured weight), and a one-element argument under a condition of several lanes, keep their
/// values inside `hvp` (each lane of the target gets the value, as at first order) and their
/// second derivatives; a target that mixes the lanes of a tracked argument is refused there too.
#[test]
fn recorded_branches_broadcast_one_value_and_refuse_mixing() {
    let _s = serial();
    let before = nodes();
    let xs = [-0.7, 0.4, -1.2, 0.9, 0.3, -0.2, 1.5];
    let c = Float64::from_slice(&[0.5, -1.0, 0.2, -0.3, 0.8, -0.6, 0.1]);
    for mode in MODES {
        let w = Float64::from_slice(&[0.8]);
        let f = |x: &Float64| {
            Branch::new()
                .mode(mode)
                .run(
                    &x.detach().lt(0.0),
                    |x: &Float64| x * x * x,
                    |_: &Float64| w.clone(),
                    x,
                )
                .unwrap()
                .sum()
        };
        let x = Float64::from_slice(&xs);
        let inside = std::cell::Cell::new(0.0);
        let hv = kiln::hvp(
            |x: &Float64| {
                let y = f(x);
                inside.set(y.detach().item());
                y
            },
            &x,
            &Float64::ones(xs.len()),
        )
        .unwrap();
        let plain = f(&x).item();
        assert!(
            (inside.get() - plain).abs() < 1e-12,
            "{mode:?}: {} vs {plain}",
            inside.get()
        );
        let want: Vec<f64> = xs
            .iter()
            .map(|&v| if v < 0.0 { 6.0 * v } else { 0.0 })
            .collect();
        close(&hv.to_vec(), &want, 1e-12, &format!("{mode:?} one value"));
        // a one-element argument under a condition of seven lanes
        let g = |x: &Float64| {
            Branch::new()
                .mode(mode)
                .run(
                    &c.lt(0.0),
                    |x: &Float64| x * x * x,
                    |x: &Float64| x.sin(),
                    x,
                )
                .unwrap()
                .sum()
        };
        let x1 = Float64::from_slice(&[0.7]);
        let hv = kiln::hvp(g, &x1, &Float64::from_slice(&[1.0]))
            .unwrap()
            .item();
        // three lanes take x³ (6x), four take sin (−sin x)
        let want = 3.0 * 6.0 * 0.7 - 4.0 * 0.7f64.sin();
        assert!((hv - want).abs() < 1e-12, "{mode:?}: {hv} vs {want}");
        // a target mixing its argument's lanes: refused at any order
        let m = |x: &Float64| {
            Branch::new()
                .mode(mode)
                .run(
                    &x.detach().lt(0.0),
                    |x: &Float64| x * x.sum(),
                    |x: &Float64| x.clone(),
                    x,
                )
                .map(|y| y.sum())
        };
        let said = std::cell::RefCell::new(Vec::new());
        let caught = |x: &Float64| match m(x) {
            Ok(v) => v,
            Err(e) => {
                said.borrow_mut().push(e.to_string());
                x.sum()
            }
        };
        kiln::hvp(caught, &x, &x).unwrap();
        kiln::grad(caught, &x).unwrap();
        let said = said.borrow();
        assert_eq!(said.len(), 2, "{mode:?}: both orders refuse: {said:?}");
        assert!(
            said.iter()
                .all(|e| e.contains("sum") && e.contains("lanes")),
            "{said:?}"
        );
    }
    assert_eq!(nodes(), before, "AD nodes leaked");
}

/// A weight the targets capture (not an argument) gets mixed second derivatives; side effects
/// in a target happen only on its lanes, also when the branch is recorded for second order.
#[test]
fn mixed_second_derivatives_of_a_captured_weight_and_side_effects() {
    let _s = serial();
    let before = nodes();
    for mode in MODES {
        let x = Float64::from_slice(&XS);
        // (one array per side: a symbolic branch refuses two sides scattering into one)
        let hits = [
            std::cell::RefCell::new(UInt32::zeros(1)),
            std::cell::RefCell::new(UInt32::zeros(1)),
        ];
        let f = |x: &Float64, w: &Float64| -> Float64 {
            Branch::new()
                .mode(mode)
                .run(
                    &x.detach().lt(0.5),
                    |x: &Float64| {
                        let mut h = hits[0].borrow_mut();
                        kiln::scatter_reduce(ReduceOp::Add, &mut h, 1u32, &UInt32::zeros(1));
                        (x * w).sin()
                    },
                    |x: &Float64| {
                        let mut h = hits[1].borrow_mut();
                        kiln::scatter_reduce(ReduceOp::Add, &mut h, 1u32, &UInt32::zeros(1));
                        x * x * w * w
                    },
                    x,
                )
                .unwrap()
        };
        // d/dw of (Σ d f / d x): the inner gradient runs under the outer transformation
        let inner = |w: &Float64| kiln::grad(|x: &Float64| f(x, w).sum(), &x).unwrap().sum();
        let w0 = 0.7;
        let got = kiln::grad(inner, &Float64::from_slice(&[w0]))
            .unwrap()
            .item();
        let h = 1e-5;
        let want = (inner(&Float64::from_slice(&[w0 + h])).item()
            - inner(&Float64::from_slice(&[w0 - h])).item())
            / (2.0 * h);
        assert!(
            (got - want).abs() <= 1e-6 * (1.0 + want.abs()),
            "{mode:?}: {got} vs {want}"
        );
        // every call ran each side once per lane it took: 3 lanes below 0.5, 4 above
        let calls = [hits[0].borrow().item(), hits[1].borrow().item()];
        assert!(
            calls[0] % 3 == 0 && calls[1] % 4 == 0 && calls[0] > 0,
            "{mode:?}: {calls:?}"
        );
    }
    assert_eq!(nodes(), before, "AD nodes leaked");
}

#[test]
fn nested_branch_inside_a_switch_target() {
    let _s = serial();
    let idx = UInt32::from_slice(&[0, 1, 0, 1]);
    let xs = [0.2, 0.6, 1.4, -0.3];
    let run = |mode: Mode, x: &Float64| {
        let inner = move |x: &Float64| {
            Branch::new()
                .mode(mode)
                .run(&x.lt(1.0), |x: &Float64| x * x, |x: &Float64| x.exp(), x)
                .unwrap()
        };
        let other = |x: &Float64| x * 5.0;
        let t: [Target<'_, Float64, Float64>; 2] = [Some(&inner), Some(&other)];
        Switch::new().mode(mode).run(&idx, &t, x).unwrap()
    };
    for mode in MODES {
        let mut x = Float64::from_slice(&xs);
        x.enable_grad();
        run(mode, &x).sum().backward();
        close(
            &x.grad().to_vec(),
            &fd_lanes(&|x| run(mode, x), &xs),
            1e-7,
            &format!("{mode:?}"),
        );
    }
}

// ---------------------------------------------------------------------------------------------
// while_loop: forward mode; reverse refused

/// Newton's iteration for √a from x₀ = a (stops per lane), scaled by a parameter.
fn newton(mode: Mode, a: &Float64, k: &Float64) -> Float64 {
    let (_, x, _) = Loop::new((a.clone(), a.clone(), UInt32::zeros(a.len())))
        .label("newton")
        .mode(mode)
        .run(
            |(_, _, i)| i.lt(6u32),
            |(a, x, i)| (a.clone(), (x + a / x) * 0.5, i + 1u32),
        )
        .unwrap();
    x * k
}

#[test]
fn while_loop_forward_matches_finite_differences() {
    let _s = serial();
    let before = nodes();
    let av = [0.5, 2.0, 9.0, 30.0];
    for mode in MODES {
        let mut a = Float64::from_slice(&av);
        a.enable_grad();
        let k = Float64::from(1.5);
        let y = newton(mode, &a, &k);
        kiln::ad::forward(&a).unwrap();
        let want = fd_lanes(&|a| newton(mode, a, &k), &av);
        close(&y.grad().to_vec(), &want, 1e-7, &format!("{mode:?}"));
        // close to the derivative of 1.5·√a after 6 Newton steps
        let exact: Vec<f64> = av.iter().map(|a| 0.75 / a.sqrt()).collect();
        close(&y.grad().to_vec(), &exact, 1e-3, "analytic");
    }
    assert_eq!(nodes(), before);
}

#[test]
fn while_loop_with_per_lane_trip_counts() {
    // y = x·1.5^k with k the first step where y ≥ 4: piecewise linear in x
    let _s = serial();
    let xv = [0.5, 2.0, 3.9, 0.01];
    for mode in MODES {
        let mut x = Float64::from_slice(&xv);
        x.enable_grad();
        let y = Loop::new(x.clone())
            .mode(mode)
            .run(|y| y.lt(4.0), |y| y * 1.5)
            .unwrap();
        kiln::ad::forward(&x).unwrap();
        let want: Vec<f64> = xv
            .iter()
            .map(|&x0| {
                let (mut v, mut d) = (x0, 1.0);
                while v < 4.0 {
                    v *= 1.5;
                    d *= 1.5;
                }
                d
            })
            .collect();
        close(&y.grad().to_vec(), &want, 1e-14, &format!("{mode:?}"));
    }
}

#[test]
fn compressed_evaluated_loop_carries_tangents() {
    let _s = serial();
    let before = nodes();
    let xv = [0.5, 2.0, 3.9, 0.01, 1.0];
    let mut x = Float64::from_slice(&xv);
    x.enable_grad();
    let y = Loop::new((x.clone(), UInt32::zeros(5)))
        .mode(Mode::Evaluated)
        .compress(true)
        .run(|(y, _)| y.lt(4.0), |(y, k)| (y * y + 0.5, k + 1u32))
        .unwrap()
        .0;
    kiln::ad::forward(&x).unwrap();
    let want: Vec<f64> = xv
        .iter()
        .map(|&x0| {
            let (mut v, mut d) = (x0, 1.0);
            while v < 4.0 {
                d *= 2.0 * v;
                v = v * v + 0.5;
            }
            d
        })
        .collect();
    close(&y.grad().to_vec(), &want, 1e-13, "compressed");
    drop((x, y));
    assert_eq!(nodes(), before);
}

#[test]
fn loop_inside_a_branch_is_differentiable_in_reverse_mode() {
    // the loop is differentiated inside the branch's body (forward passes there), so reverse
    // mode through the branch is exact even though reverse mode through a bare loop is refused
    let _s = serial();
    let before = nodes();
    let xv = [0.3, 1.7, 2.5, 0.9];
    for mode in MODES {
        let run = |x: &Float64| {
            let looped = move |x: &Float64| {
                Loop::new((x.clone(), Int32::zeros(1)))
                    .mode(mode)
                    .run(|(_, i)| i.lt(3), |(y, i)| (y.sin() + y * 0.5, i + 1))
                    .unwrap()
                    .0
            };
            Branch::new()
                .mode(mode)
                .run(&x.detach().lt(2.0), looped, |x: &Float64| x.exp(), x)
                .unwrap()
        };
        let mut x = Float64::from_slice(&xv);
        x.enable_grad();
        run(&x).sum().backward();
        close(
            &x.grad().to_vec(),
            &fd_lanes(&run, &xv),
            1e-7,
            &format!("{mode:?}"),
        );
    }
    assert_eq!(nodes(), before);
}

#[test]
fn while_loop_forward_through_two_coupled_entries() {
    // a rotation applied n times: the tangent of (u, v) follows the same rotation
    let _s = serial();
    for mode in MODES {
        let run = |u: &Float64, v: &Float64, t: &Float64| {
            let (u, v, _, _) = Loop::new((u.clone(), v.clone(), t.clone(), Int32::zeros(2)))
                .mode(mode)
                .run(
                    |(_, _, _, i)| i.lt(5),
                    |(u, v, t, i)| {
                        (
                            u * t.cos() - v * t.sin(),
                            u * t.sin() + v * t.cos(),
                            t.clone(),
                            i + 1,
                        )
                    },
                )
                .unwrap();
            u * 2.0 + v * 3.0
        };
        let (uv, vv, tv) = ([1.0, 0.3], [0.0, -0.8], [0.2, 1.1]);
        let (mut u, v, mut t) = (
            Float64::from_slice(&uv),
            Float64::from_slice(&vv),
            Float64::from_slice(&tv),
        );
        u.enable_grad();
        t.enable_grad();
        let y = run(&u, &v, &t);
        u.set_grad(&Float64::from(1.0));
        t.set_grad(&Float64::from(0.0));
        kiln::ad::forward_to(&y).unwrap();
        let v0 = Float64::from_slice(&vv);
        let t0 = Float64::from_slice(&tv);
        close(
            &y.grad().to_vec(),
            &fd_lanes(&|u| run(u, &v0, &t0), &uv),
            1e-7,
            "d/du",
        );
        let u0 = Float64::from_slice(&uv);
        let mut t2 = t0.detach();
        t2.enable_grad();
        let mut u2 = u0.detach();
        u2.enable_grad();
        let y2 = run(&u2, &v0, &t2);
        kiln::ad::forward(&t2).unwrap();
        close(
            &y2.grad().to_vec(),
            &fd_lanes(&|t| run(&u0, &v0, t), &tv),
            1e-7,
            "d/dt",
        );
    }
}

#[test]
fn while_loop_reverse_matches_forward_and_finite_differences() {
    // (refused until issue 26; tests/ad_loops.rs has more)
    let _s = serial();
    let before = nodes();
    for mode in MODES {
        let a0 = [2.0, 3.0, 0.7];
        let mut a = Float64::from_slice(&a0);
        a.enable_grad();
        newton(mode, &a, &Float64::from(1.0)).sum().backward();
        let rev = a.grad().to_vec();
        let fd = fd_lanes(&|a| newton(mode, a, &Float64::from(1.0)), &a0);
        close(&rev, &fd, 1e-7, "reverse through newton");
        // (six Newton steps from x = a: close to 1 / (2 sqrt a))
        for (g, a) in rev.iter().zip(a0) {
            assert!(
                (g - 0.5 / a.sqrt()).abs() < 1e-3,
                "{g} vs {}",
                0.5 / a.sqrt()
            );
        }
    }
    assert_eq!(nodes(), before);
}

// ---------------------------------------------------------------------------------------------
// bodies AD cannot see through: errors, never wrong gradients

#[test]
fn captured_gradients_in_branches_are_differentiated() {
    // a target that captures an array with a gradient (instead of taking it as an argument):
    // found by tracing the targets once, then differentiated like an argument
    let _s = serial();
    let before = nodes();
    let xv = [0.1, 0.9, 0.4, 1.5];
    for mode in MODES {
        let run = |x: &Float64, w: &Float64, v: &Float64| {
            Branch::new()
                .mode(mode)
                .run(
                    &x.detach().lt(0.5),
                    |x: &Float64| (x * w).sin(),
                    |x: &Float64| x * x * v,
                    x,
                )
                .unwrap()
        };
        let mut x = Float64::from_slice(&xv);
        let mut w = Float64::from(2.0); // size 1: every lane's share is summed
                                        // one per lane (symbolic mode; an evaluated target sees only its own lanes, so what
                                        // it captures must be of size 1 there)
        let mut v = if mode == Mode::Symbolic {
            Float64::from_slice(&[1.0, -2.0, 3.0, 0.5])
        } else {
            Float64::from(-1.5)
        };
        x.enable_grad();
        w.enable_grad();
        v.enable_grad();
        run(&x, &w, &v).sum().backward();
        let (w0, v0, x0) = (w.detach(), v.detach(), x.detach());
        close(
            &x.grad().to_vec(),
            &fd_lanes(&|x| run(x, &w0, &v0), &xv),
            1e-7,
            "d/dx",
        );
        let gw = fd_scalar(&|w| run(&x0, &Float64::from(w), &v0), 2.0);
        close(&w.grad().to_vec(), &[gw], 1e-7, "d/dw");
        if mode == Mode::Symbolic {
            let vv = v0.to_vec();
            close(
                &v.grad().to_vec(),
                &fd_lanes(&|v| run(&x0, &w0, v), &vv),
                1e-7,
                "d/dv",
            );
        } else {
            let gv = fd_scalar(&|v| run(&x0, &w0, &Float64::from(v)), -1.5);
            close(&v.grad().to_vec(), &[gv], 1e-7, "d/dv");
        }
        // forward mode from the captured scalar
        let mut w2 = w0.detach();
        w2.enable_grad();
        let y = run(&x0, &w2, &v0);
        kiln::ad::forward(&w2).unwrap();
        let per_lane: Vec<f64> = xv
            .iter()
            .map(|&x| if x < 0.5 { (x * 2.0).cos() * x } else { 0.0 })
            .collect();
        close(&y.grad().to_vec(), &per_lane, 1e-12, "forward d/dw");
    }
    assert_eq!(nodes(), before);
}

trait Material: kiln::Traverse + Sync {
    fn shade(&self, x: &Float64) -> Float64;
}
#[derive(kiln::Traverse)]
struct Glossy {
    k: Float64,
}
impl Material for Glossy {
    fn shade(&self, x: &Float64) -> Float64 {
        (x * &self.k).exp()
    }
}

#[test]
fn registry_instances_with_gradients() {
    // Dr.Jit's differentiable-material case: parameters live in the dispatched instances
    let _s = serial();
    let before = nodes();
    {
        let mut k0 = Float64::from(0.5);
        let mut k1 = Float64::from(-1.0);
        k0.enable_grad();
        k1.enable_grad();
        let mut reg: kiln::Registry<dyn Material> = kiln::Registry::new();
        reg.register(Box::new(Glossy { k: k0.clone() }));
        reg.register(Box::new(Glossy { k: k1.clone() }));
        let idx = UInt32::from_slice(&[0, 1, 1, 0]);
        let xv = [0.3, 1.2, -0.7, 2.0];
        let x = Float64::from_slice(&xv);
        reg.dispatch(&idx, &x, |m, x| m.shade(x))
            .unwrap()
            .sum()
            .backward();
        let g0: f64 = [0usize, 3]
            .iter()
            .map(|&i| xv[i] * (xv[i] * 0.5).exp())
            .sum();
        let g1: f64 = [1usize, 2].iter().map(|&i| xv[i] * (-xv[i]).exp()).sum();
        close(&k0.grad().to_vec(), &[g0], 1e-12, "k0");
        close(&k1.grad().to_vec(), &[g1], 1e-12, "k1");
    }
    assert_eq!(nodes(), before);
}

#[test]
fn captured_gradients_in_a_loop_are_columns_of_its_jacobian() {
    let _s = serial();
    let before = nodes();
    let x = Float64::from_slice(&[0.1, 0.9]);
    for mode in MODES {
        // a captured scalar: y ← y + w until y ≥ 1 (4 and 1 steps): dΣy/dw = 5, dy/dx = 1
        let mut w = Float64::from(0.25);
        w.enable_grad();
        let mut x2 = x.clone();
        x2.enable_grad();
        let y = Loop::new(x2.clone())
            .mode(mode)
            .run(|y| y.lt(1.0), |y| y + &w)
            .unwrap();
        close(&y.to_vec(), &[1.1, 1.15], 1e-12, "y");
        y.sum().backward();
        close(&w.grad().to_vec(), &[5.0], 1e-12, "dw");
        close(&x2.grad().to_vec(), &[1.0, 1.0], 1e-12, "dx");
        // forward mode from the captured array (its gradient is the seed: a fresh one)
        let mut w = Float64::from(0.25);
        w.enable_grad();
        let y = Loop::new(x.clone())
            .mode(mode)
            .run(|y| y.lt(1.0), |y| y + &w)
            .unwrap();
        kiln::ad::forward(&w).unwrap();
        close(&y.grad().to_vec(), &[4.0, 1.0], 1e-12, "tangent");
        // a captured per-lane array: y ← y·a + 0.1 three times from 1: dy/da = 3a² + 0.2a + 0.1
        let mut a = Float64::from_slice(&[0.5, 1.5]);
        a.enable_grad();
        let (y, _) = Loop::new((Float64::ones(2), UInt32::zeros(2)))
            .mode(mode)
            .run(|(_, i)| i.lt(3u32), |(y, i)| (y * &a + 0.1, i + 1u32))
            .unwrap();
        y.sum().backward();
        let want: Vec<f64> = [0.5f64, 1.5]
            .iter()
            .map(|a| 3.0 * a * a + 0.2 * a + 0.1)
            .collect();
        close(&a.grad().to_vec(), &want, 1e-12, "da");
        // one of another size than the lanes cannot be carried per lane
        let mut v = Float64::from_slice(&[1.0, 2.0, 3.0]);
        v.enable_grad();
        let e = Loop::new(x.clone())
            .mode(mode)
            .run(|y| y.lt(1.0), |y| y + v.sum() * 0.1)
            .unwrap_err();
        assert!(e.to_string().contains("captured"), "{e}");
    }
    let mut w = Float64::from(2.0);
    w.enable_grad();
    // without recording it is a constant, as asked
    let y = kiln::ad::suspend_grad(|| {
        kiln::if_then_else(
            &x.lt(0.5),
            |x: &Float64| x * &w,
            |x: &Float64| x.clone(),
            &x,
        )
    })
    .unwrap();
    assert_eq!(y.to_vec(), vec![0.2, 0.9]);
    assert!(!y.grad_enabled());
    drop(w);
    assert_eq!(nodes(), before);
}

#[test]
fn body_mixing_lanes_is_an_error_in_evaluated_mode() {
    let _s = serial();
    let before = nodes();
    let mut x = Float64::from_slice(&[0.1, 0.9, 0.3]);
    x.enable_grad();
    let e = Branch::new()
        .mode(Mode::Evaluated)
        .run(
            &x.detach().lt(0.5),
            |x: &Float64| x - x.sum(),
            |x: &Float64| x.clone(),
            &x,
        )
        .unwrap_err();
    assert!(e.to_string().contains("different lanes"), "{e}");
    drop(x);
    assert_eq!(nodes(), before);
}

#[test]
fn panic_inside_a_body_leaks_no_nodes() {
    let _s = serial();
    let before = nodes();
    for mode in MODES {
        let r = std::panic::catch_unwind(|| {
            let mut x = Float64::from_slice(&[0.1, 0.9]);
            x.enable_grad();
            let _ = Branch::new().mode(mode).run(
                &x.detach().lt(0.5),
                |x: &Float64| -> Float64 {
                    let _t = x * 2.0;
                    panic!("boom")
                },
                |x: &Float64| x.clone(),
                &x,
            );
        });
        assert!(r.is_err());
        let r = std::panic::catch_unwind(|| {
            let mut x = Float64::from_slice(&[0.1, 0.9]);
            x.enable_grad();
            let _ = Loop::new(x.clone()).mode(mode).run(
                |y| y.lt(1.0),
                |y| -> Float64 {
                    let _t = y.exp();
                    panic!("boom")
                },
            );
        });
        assert!(r.is_err());
    }
    assert_eq!(nodes(), before);
}

// ---------------------------------------------------------------------------------------------
// scans: JAX's face differentiated, PyTensor's refused; stencils: differentiated

/// A tensor over `v` that carries a gradient.
fn tracked(v: &[f64], shape: &[usize]) -> Tensor<f64> {
    let mut a = Float64::from_slice(v);
    a.enable_grad();
    Tensor::from_array(a, shape)
}

#[test]
fn scans_with_a_gradient() {
    // both faces are differentiated (until issue 26 they were refused; tests/ad_scan.rs and
    // tests/ad_scan_pytensor.rs have more)
    let _s = serial();
    let before = nodes();
    {
        let xs = tracked(&[1.0, 2.0, 3.0], &[3]);
        let init = Tensor::<f64>::scalar(0.0);
        let (c, _) = kiln::scan(&init, &xs, |c, x| (c + x, c.clone())).unwrap();
        c.array().sum().backward();
        assert_eq!(xs.array().grad().to_vec(), vec![1.0, 1.0, 1.0]);
        // a captured tensor with a gradient in the body
        let cap = tracked(&[10.0], &[]);
        let plain = Tensor::<f64>::from_vec(vec![1.0, 2.0, 3.0], &[3]);
        let (c, _) = kiln::scan(&init, &plain, |c, x| {
            let s = &(c + x) + &cap;
            (s.clone(), s)
        })
        .unwrap();
        assert_eq!(c.to_vec(), vec![36.0]);
        c.array().sum().backward();
        assert_eq!(cap.array().grad().to_vec(), vec![3.0]);
        // PyTensor's face: running sums, Σ_t Σ_{s≤t} x_s = 3x0 + 2x1 + x2
        let xs = tracked(&[1.0, 2.0, 3.0], &[3]);
        let r = kiln::scan::Scan::new()
            .sequence(&xs)
            .output(&Tensor::scalar(0.0f64))
            .run(|s| s.seq(0, 0) + s.out(0, -1))
            .unwrap();
        assert_eq!(r.output::<f64>(0).to_vec(), vec![1.0, 3.0, 6.0]);
        assert_eq!(r.report().mode, "differentiated, gradient scan");
        r.output::<f64>(0).array().sum().backward();
        assert_eq!(xs.array().grad().to_vec(), vec![3.0, 2.0, 1.0]);
    }
    assert_eq!(nodes(), before);
}

#[test]
fn stencil_with_a_gradient_is_differentiated() {
    // (it was refused until issue 26; tests/ad_stencil.rs checks every mode against finite
    // differences)
    let _s = serial();
    let before = nodes();
    {
        let a = tracked(&[1.0, 2.0, 4.0, 8.0], &[4]);
        let k = kiln::stencil(|a: &Rel<f64>| a.at([1]) - a.at([0]));
        let y = k.apply(&a).unwrap();
        assert!(y.array().grad_enabled());
        y.array().sum().backward();
        // y = [x1 − x0, x2 − x1, x3 − x2, 0]: Σy = x3 − x0
        assert_eq!(a.array().grad().to_vec(), vec![-1.0, 0.0, 0.0, 1.0]);
    }
    assert_eq!(nodes(), before);
}
