//! Adversarial use of AD: aliased operands, size-1 broadcasts, CSE/folding traps, in-place
//! updates, odd call orders, leaks after errors and panics, threads. The oracle is central
//! finite differences in f64 (and forward vs reverse mode).
use kiln::prelude::*;
use std::sync::Mutex;

/// The AD graph and its counters are global: tests run one at a time so that counts compare.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn lock() -> std::sync::MutexGuard<'static, ()> {
    ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner())
}

fn close(got: &[f64], want: &[f64], tol: f64) {
    assert_eq!(got.len(), want.len(), "{got:?} vs {want:?}");
    for (x, y) in got.iter().zip(want) {
        assert!(
            (x - y).abs() <= tol * (1.0 + y.abs()),
            "got {got:?}\nwant {want:?}"
        );
    }
}

/// Central differences of the scalar `f` at `x`.
fn fd(f: &dyn Fn(&Float64) -> Float64, x: &[f64]) -> Vec<f64> {
    (0..x.len())
        .map(|i| {
            let h = 1e-6 * (1.0 + x[i].abs());
            let (mut a, mut b) = (x.to_vec(), x.to_vec());
            a[i] += h;
            b[i] -= h;
            let fa = f(&Float64::from_slice(&a)).item();
            let fb = f(&Float64::from_slice(&b)).item();
            (fa - fb) / (2.0 * h)
        })
        .collect()
}

/// Reverse mode (leaf + backward), `kiln::grad`, forward mode (one direction per coordinate)
/// and finite differences of the scalar `f` at `x` must all agree.
fn check(name: &str, f: &dyn Fn(&Float64) -> Float64, x: &[f64]) {
    let want = fd(f, x);
    // Dr.Jit face
    let mut xa = Float64::from_slice(x);
    xa.enable_grad();
    let y = f(&xa);
    assert_eq!(y.size(), 1, "{name}: not a scalar");
    y.backward();
    let rev = xa.grad().to_vec();
    drop((xa, y));
    // JAX face
    let g = kiln::grad(|x: &Float64| f(x), &Float64::from_slice(x))
        .unwrap()
        .to_vec();
    // forward mode, coordinate by coordinate
    let fwd: Vec<f64> = (0..x.len())
        .map(|i| {
            let mut e = vec![0.0; x.len()];
            e[i] = 1.0;
            let (_, t) = kiln::jvp(
                |x: &Float64| f(x),
                &Float64::from_slice(x),
                &Float64::from_slice(&e),
            )
            .unwrap();
            t.item()
        })
        .collect();
    for (what, got) in [("reverse", &rev), ("kiln::grad", &g), ("forward", &fwd)] {
        assert_eq!(got.len(), want.len(), "{name} {what}");
        for (a, b) in got.iter().zip(&want) {
            assert!(
                (a - b).abs() <= 1e-5 * (1.0 + b.abs()),
                "{name} ({what}): got {got:?}, finite differences {want:?}"
            );
        }
    }
}

const X: [f64; 4] = [0.3, -0.7, 1.2, 2.1];
const XP: [f64; 4] = [0.3, 0.7, 1.2, 2.1];

#[test]
fn aliased_operands() {
    let _one = lock();
    check("x*x", &|x| (x * x).sum(), &X);
    check("x+x", &|x| (x + x).sum(), &X);
    check("x-x", &|x| (x - x + x * 0.5).sum(), &X);
    check("x/x", &|x| (x / x * x).sum(), &X);
    check("select(m,x,x)", &|x| select(&x.gt(0.5), x, x).sum(), &X);
    check(
        "select(m,x*x,x)",
        &|x| select(&x.gt(0.5), x * x, x).sum(),
        &X,
    );
    check("atan2(x,x)", &|x| (x.atan2(x) + x).sum(), &X);
    check("pow(x,x)", &|x| x.pow(x).sum(), &XP);
    check("fma(x,x,x)", &|x| x.fma(x, x).sum(), &X);
    check("min(x,x)", &|x| (x.min(x) * x).sum(), &X);
    check("max(x,x)", &|x| (x.max(x) * x).sum(), &X);
    check("x*x*x", &|x| (x * x * x).sum(), &X);
}

#[test]
fn size_one_broadcast_operands() {
    let _one = lock();
    let v = Float64::from_slice(&[0.5, -1.5, 2.5, 0.1]);
    // x is a single value broadcast against four
    let s = [0.8];
    let v1 = v.clone();
    check("s*v", &move |x| (x * &v1).sum(), &s);
    let v1 = v.clone();
    check("v/s", &move |x| (&v1 / x).sum(), &s);
    let v1 = v.clone();
    check("s/v", &move |x| (x / &v1).sum(), &s);
    let v1 = v.clone();
    check("v-s", &move |x| (&v1 - x).sum(), &s);
    let v1 = v.clone();
    check("fma(v,v,s)", &move |x| v1.fma(&v1, x).sum(), &s);
    let v1 = v.clone();
    check("fma(s,v,v)", &move |x| x.fma(&v1, &v1).sum(), &s);
    let v1 = v.clone();
    check("fma(v,s,v)", &move |x| v1.fma(x, &v1).sum(), &s);
    let v1 = v.clone();
    check("fma(v,s,s)", &move |x| v1.fma(x, x).sum(), &s);
    let v1 = v.clone();
    check(
        "select(m,s,v)",
        &move |x| select(&v1.gt(0.3), x, &v1).sum(),
        &s,
    );
    let v1 = v.clone();
    check(
        "select(m,v,s)",
        &move |x| select(&v1.gt(0.3), &v1, x).sum(),
        &s,
    );
    let v1 = v.clone();
    check("min(v,s)", &move |x| v1.min(x).sum(), &s);
    let v1 = v.clone();
    check("max(s,v)", &move |x| x.max(&v1).sum(), &s);
    let v1 = v.clone();
    check("atan2(s,v)", &move |x| x.atan2(&v1).sum(), &s);
    let v1 = v.clone();
    check("atan2(v,s)", &move |x| v1.atan2(x).sum(), &s);
    let v1 = v.clone().abs();
    check("pow(v,s)", &move |x| v1.pow(x).sum(), &s);
    let v1 = v.clone();
    check("pow(s,v)", &move |x| x.pow(&v1).sum(), &s);
    let v1 = v.clone();
    check("copysign(s,v)", &move |x| x.copysign(&v1).sum(), &s);
    let v1 = v.clone();
    check("s%v", &move |x| (x % &v1).sum(), &[3.33]);
    let v1 = v.clone();
    check("v%s", &move |x| (&v1 % x).sum(), &[0.7]);
}

#[test]
fn unusual_math() {
    let _one = lock();
    check("rcp", &|x| x.rcp().sum(), &X);
    check("rsqrt", &|x| x.rsqrt().sum(), &XP);
    check("copysign(x,-1)", &|x| x.copysign(-1.0).sum(), &X);
    check(
        "copysign(1,x)",
        &|x| Float64::full(1.0, x.size()).copysign(x).sum() + x.sum(),
        &X,
    );
    check("x%0.5", &|x| (x % 0.5).sum(), &[0.3, 0.7, 1.2, 2.1]);
    check(
        "x%y",
        &|x| (x % (x * 0.3 + 0.1)).sum(),
        &[0.3, 0.7, 1.2, 2.1],
    );
    check("neg", &|x| (-x).exp().sum(), &X);
    check("abs", &|x| x.abs().sum(), &X);
}

#[test]
fn folding_and_cse_traps() {
    let _one = lock();
    check("x+0", &|x| (x + 0.0).sum(), &X);
    check("x*1", &|x| (x * 1.0).sum(), &X);
    check("0*x + x", &|x| (x * 0.0 + x).sum(), &X);
    check("x-0", &|x| ((x - 0.0) * (x / 1.0)).sum(), &X);
    check("literal only", &|x| x.sum() * 0.0 + (x * 2.0).sum(), &X);
    // an expression traced untracked first, then the same expression tracked: CSE must not
    // hand the tracked trace the untracked node
    let mut x = Float64::from_slice(&X);
    let plain = kiln::ad::suspend_grad(|| {
        x.enable_grad();
        (&x * &x).sum()
    });
    assert!(!plain.grad_enabled());
    let tracked = (&x * &x).sum();
    assert!(tracked.grad_enabled());
    tracked.backward();
    close(
        &x.grad().to_vec(),
        &X.iter().map(|v| 2.0 * v).collect::<Vec<_>>(),
        1e-12,
    );
    // and the reverse: traced tracked, then suspended (no gradient leaks into the plain one)
    x.clear_grad();
    let t2 = (&x * 3.0).sum();
    let p2 = kiln::ad::suspend_grad(|| (&x * 3.0).sum());
    assert!(t2.grad_enabled() && !p2.grad_enabled());
    assert_eq!(p2.item(), t2.item());
}

#[test]
fn f32_inputs_and_casts() {
    let _one = lock();
    let mut x = Float32::from_slice(&[0.5, 1.5, -2.0]);
    x.enable_grad();
    let y = ((x.cast::<f64>() * x.cast::<f64>()).sin().cast::<f32>() * &x).sum();
    y.backward();
    let g = x.grad().to_vec();
    for (i, &v) in [0.5f64, 1.5, -2.0].iter().enumerate() {
        let want = 2.0 * v * (v * v).cos() * v + (v * v).sin();
        assert!(
            (g[i] as f64 - want).abs() < 1e-4 * (1.0 + want.abs()),
            "{g:?}"
        );
    }
    // an f32 → integer cast carries no gradient, and does not break the rest
    let mut x = Float32::from_slice(&[0.5, 1.5]);
    x.enable_grad();
    let y = (x.cast::<i32>().cast::<f32>() * &x).sum();
    y.backward();
    assert_eq!(x.grad().to_vec(), vec![0.0, 1.0]);
}

#[test]
fn vector_and_tensor_chains() {
    let _one = lock();
    check(
        "vector norm",
        &|x| {
            let v = Vector3d::new(x * 2.0, x.sin(), x * x);
            (v.norm() + v.dot(&v.cross(&Vector3d::new(x.clone(), x + 1.0, x.cos())))).sum()
        },
        &X,
    );
    check(
        "tensor views",
        &|x| {
            let t = Tensor::from_array(x.clone(), &[2, 2]);
            let tt = t.transpose();
            let a = (tt.array() * t.array()).sum();
            let b = t.sum_axis(0).array().exp().sum();
            let c = t.flip(1).array().sin().sum() * t.index_axis(0, 1).sum();
            a + b + c
        },
        &X,
    );
}

#[test]
fn assign_and_scatter_into_tracked() {
    let _one = lock();
    // assign into a tracked array: afterwards it holds the new expression's value and gradient
    let mut x = Float64::from_slice(&[1.0, 2.0]);
    x.enable_grad();
    let mut y = &x * 3.0;
    y.assign(&x * &x);
    assert_eq!(y.to_vec(), vec![1.0, 4.0]);
    y.sum().backward();
    assert_eq!(x.grad().to_vec(), vec![2.0, 4.0], "gradient after assign");

    // scatter a tracked value into a tracked target, then read it
    let mut x = Float64::from_slice(&[1.0, 2.0, 3.0]);
    x.enable_grad();
    let mut v = Float64::from_slice(&[10.0]);
    v.enable_grad();
    let mut t = &x * 2.0;
    scatter(&mut t, &v * &v, &UInt32::from_slice(&[1]));
    assert_eq!(t.to_vec(), vec![2.0, 100.0, 6.0]);
    (&t * &t).sum().backward();
    // d/dx: 2t * 2 at lanes 0, 2; lane 1 overwritten
    assert_eq!(x.grad().to_vec(), vec![8.0, 0.0, 24.0], "target gradient");
    assert_eq!(
        v.grad().to_vec(),
        vec![2.0 * 100.0 * 20.0],
        "value gradient"
    );
}

#[test]
fn in_place_ops_with_moved_operands() {
    let _one = lock();
    let mut x = Float64::from_slice(&[1.0, 2.0]);
    x.enable_grad();
    let mut y = &x * 1.0;
    y += &x; // 2x
    y *= x.clone(); // 2x²
    let z = x.clone();
    y -= z; // moved-from tracked operand: 2x² - x
    y /= 2.0;
    let w = y + x.clone() * x.clone(); // moved lhs
    w.sum().backward();
    // d/dx (x² - x/2 + x²) = 4x - 0.5
    assert_eq!(x.grad().to_vec(), vec![3.5, 7.5]);
}

#[test]
fn odd_call_orders() {
    let _one = lock();
    // enable_grad twice: the same leaf, gradients kept
    let mut x = Float64::from_slice(&[1.0, 2.0]);
    x.enable_grad();
    let ad1 = (&x * 1.0).sum();
    x.enable_grad();
    let y = (&x * &x).sum() + ad1;
    y.backward();
    assert_eq!(x.grad().to_vec(), vec![3.0, 5.0]);

    // detach then enable_grad: a fresh leaf that does not feed the old one
    let mut x = Float64::from_slice(&[1.0, 2.0]);
    x.enable_grad();
    let mut d = x.detach();
    d.enable_grad();
    (&d * &d).sum().backward();
    assert_eq!(d.grad().to_vec(), vec![2.0, 4.0]);
    assert_eq!(x.grad().to_vec(), vec![0.0, 0.0]);

    // set_grad then backward: backward accumulates on top
    let mut x = Float64::from_slice(&[1.0, 2.0]);
    x.enable_grad();
    x.set_grad(&Float64::from(10.0));
    (&x * 3.0).sum().backward();
    assert_eq!(x.grad().to_vec(), vec![13.0, 13.0]);

    // interior enable_grad: its gradient is kept, and the leaf still gets the full chain
    let mut x = Float64::from_slice(&[1.0, 2.0]);
    x.enable_grad();
    let mut h = &x * &x;
    h.enable_grad();
    (&h * 5.0).sum().backward();
    assert_eq!(h.grad().to_vec(), vec![5.0, 5.0]);
    assert_eq!(x.grad().to_vec(), vec![10.0, 20.0]);

    // the gradient of something that does not depend on the input: zeros
    let g = kiln::grad(
        |_x: &Float64| Float64::from(3.0),
        &Float64::from_slice(&[1.0, 2.0]),
    )
    .unwrap();
    assert_eq!(g.to_vec(), vec![0.0, 0.0]);
    let g = kiln::grad(
        |x: &Float64| kiln::ad::suspend_grad(|| x.sum()),
        &Float64::from_slice(&[1.0, 2.0]),
    )
    .unwrap();
    assert_eq!(g.to_vec(), vec![0.0, 0.0]);
}

#[test]
fn grad_read_after_its_graph_was_consumed() {
    let _one = lock();
    let mut x = Float64::from_slice(&[1.0, 2.0]);
    x.enable_grad();
    let h = &x * &x;
    let y = h.sum();
    y.backward();
    // h's graph is consumed, but reading values and x's gradient is fine
    assert_eq!(h.to_vec(), vec![1.0, 4.0]);
    assert_eq!(x.grad().to_vec(), vec![2.0, 4.0]);
    // a new computation from the consumed interior node: backward through it errs clearly
    let z = (&h * 2.0).sum();
    let e = z.try_backward().unwrap_err().to_string();
    assert!(e.contains("consumed"), "{e}");
}

#[test]
fn bad_input_is_a_clear_error() {
    let _one = lock();
    let mut x = Float64::from_slice(&[1.0, 2.0]);
    x.enable_grad();
    let y = &x * 2.0;
    assert!(y.try_backward().is_err());
    let e = kiln::grad(|x: &Float64| x * 2.0, &Float64::from_slice(&[1.0, 2.0]));
    assert!(e.is_err());
    let mut ints = (Float64::from(1.0), UInt32::from_slice(&[1, 2]));
    let e = kiln::ad::enable_grad(&mut ints).unwrap_err().to_string();
    assert!(
        e.contains("u32") || e.contains("UInt32") || e.contains("integer"),
        "{e}"
    );
    // the float part was not half-enabled
    assert!(!ints.0.grad_enabled());
    // wrong seed size
    assert!(kiln::ad::backward_from(&y, &Float64::from_slice(&[1.0, 2.0, 3.0])).is_err());
}

#[test]
fn hvp_with_reductions() {
    let _one = lock();
    // f(x) = (Σx²)² + Σ sin(x) * max(x) ; H v against finite differences of the gradient
    let f = |x: &Float64| {
        let s = (x * x).sum();
        &s * &s + x.sin().sum() * x.reduce_max() + x.prod()
    };
    let x0 = [0.3, -0.7, 1.2];
    let v0 = [1.0, 0.5, -2.0];
    let hv = kiln::hvp(f, &Float64::from_slice(&x0), &Float64::from_slice(&v0))
        .unwrap()
        .to_vec();
    let h = 1e-5;
    let xp: Vec<f64> = x0.iter().zip(&v0).map(|(a, b)| a + h * b).collect();
    let xm: Vec<f64> = x0.iter().zip(&v0).map(|(a, b)| a - h * b).collect();
    let gp = kiln::grad(f, &Float64::from_slice(&xp)).unwrap().to_vec();
    let gm = kiln::grad(f, &Float64::from_slice(&xm)).unwrap().to_vec();
    let want: Vec<f64> = gp
        .iter()
        .zip(&gm)
        .map(|(a, b)| (a - b) / (2.0 * h))
        .collect();
    close(&hv, &want, 1e-5);
}

#[derive(kiln::Traverse, Clone)]
struct Inner {
    a: Float64,
    n: UInt32,
}

#[derive(kiln::Traverse, Clone)]
struct Outer {
    inner: Inner,
    v: Vector2d,
    b: Float64,
}

#[test]
fn jvp_vjp_on_nested_structs() {
    let _one = lock();
    let f = |o: &Outer| -> (Float64, Inner) {
        let y = (&o.inner.a * &o.v[0] + o.b.sin() * &o.v[1]).sum();
        let z = Inner {
            a: &o.inner.a * &o.b + o.inner.n.cast::<f64>(),
            n: o.inner.n.clone() + 1u32,
        };
        (y, z)
    };
    let p = Outer {
        inner: Inner {
            a: Float64::from_slice(&[0.5, -1.0]),
            n: UInt32::from_slice(&[1, 2]),
        },
        v: Vector2d::new(
            Float64::from_slice(&[2.0, 3.0]),
            Float64::from_slice(&[-1.0, 0.25]),
        ),
        b: Float64::from(0.7),
    };
    let t = Outer {
        inner: Inner {
            a: Float64::from_slice(&[1.0, 0.0]),
            n: UInt32::from_slice(&[0, 0]),
        },
        v: Vector2d::new(
            Float64::from_slice(&[0.0, 1.0]),
            Float64::from_slice(&[0.5, 0.0]),
        ),
        b: Float64::from(1.0),
    };
    let (_, tan) = kiln::jvp(f, &p, &t).unwrap();
    let (_, pull) = kiln::vjp(f, &p).unwrap();
    // <ct, J t> == <J^T ct, t>
    let ct = (
        Float64::from(1.5),
        Inner {
            a: Float64::from_slice(&[0.3, -2.0]),
            n: UInt32::from_slice(&[0, 0]),
        },
    );
    let back = pull(&ct).unwrap();
    let lhs = 1.5 * tan.0.item() + (&tan.1.a * &ct.1.a).sum().item();
    let rhs = (&back.inner.a * &t.inner.a).sum().item()
        + (&back.v[0] * &t.v[0]).sum().item()
        + (&back.v[1] * &t.v[1]).sum().item()
        + (&back.b * &t.b).sum().item();
    assert!(
        (lhs - rhs).abs() < 1e-12 * (1.0 + lhs.abs()),
        "{lhs} vs {rhs}"
    );
    // and the directional derivative by finite differences
    let shift = |e: f64| {
        let q = Outer {
            inner: Inner {
                a: &p.inner.a + &t.inner.a * e,
                n: p.inner.n.clone(),
            },
            v: Vector2d::new(&p.v[0] + &t.v[0] * e, &p.v[1] + &t.v[1] * e),
            b: &p.b + &t.b * e,
        };
        f(&q).0.item()
    };
    let h = 1e-6;
    let want = (shift(h) - shift(-h)) / (2.0 * h);
    assert!((tan.0.item() - want).abs() < 1e-6 * (1.0 + want.abs()));
}

fn counts() -> (u64, u64, u64, u64) {
    let s = kiln::stats();
    (s.ad_nodes, s.ad_edges, s.ad_grad_bytes, s.vars_alive)
}

#[test]
fn no_leaks_after_errors_and_panics() {
    let _one = lock();
    // warm up whatever is cached once
    let _ = kiln::grad(|x: &Float64| (x * x).sum(), &Float64::from_slice(&[1.0])).unwrap();
    let before = counts();
    {
        // backward then drop
        let mut x = Float64::from_slice(&[1.0, 2.0]);
        x.enable_grad();
        (&x * &x).sum().backward();
        let _ = x.grad().to_vec();
    }
    assert_eq!(counts(), before, "after backward");
    {
        // non-scalar backward error
        let mut x = Float64::from_slice(&[1.0, 2.0]);
        x.enable_grad();
        let y = &x * 2.0;
        assert!(y.try_backward().is_err());
        assert!(kiln::grad(|x: &Float64| x * 2.0, &Float64::from_slice(&[1.0, 2.0])).is_err());
    }
    assert_eq!(counts(), before, "after non-scalar errors");
    {
        // consumed graph error
        let mut x = Float64::from(2.0);
        x.enable_grad();
        let y = &x * &x;
        y.backward();
        assert!(y.try_backward().is_err());
    }
    assert_eq!(counts(), before, "after consumed-graph error");
    // panics inside closures
    let r = std::panic::catch_unwind(|| {
        kiln::grad(
            |x: &Float64| -> Float64 {
                let _y = x * x;
                panic!("boom");
            },
            &Float64::from_slice(&[1.0, 2.0]),
        )
    });
    assert!(r.is_err());
    assert_eq!(counts(), before, "after a panic in kiln::grad");
    let r = std::panic::catch_unwind(|| {
        let _ = kiln::vjp(
            |x: &Float64| -> Float64 {
                let _y = x.exp();
                panic!("boom");
            },
            &Float64::from_slice(&[1.0, 2.0]),
        );
    });
    assert!(r.is_err());
    assert_eq!(counts(), before, "after a panic in kiln::vjp");
    // a vjp whose pullback is dropped unused
    {
        let (y, pull) =
            kiln::vjp(|x: &Float64| x.sin() * x, &Float64::from_slice(&[1.0, 2.0])).unwrap();
        let _ = y.to_vec();
        drop(pull);
    }
    assert_eq!(counts(), before, "after dropping a pullback");
    // a pullback called twice then dropped
    {
        let (_y, pull) =
            kiln::vjp(|x: &Float64| x.sin() * x, &Float64::from_slice(&[1.0, 2.0])).unwrap();
        let a = pull(&Float64::from_slice(&[1.0, 1.0])).unwrap().to_vec();
        let b = pull(&Float64::from_slice(&[1.0, 1.0])).unwrap().to_vec();
        assert_eq!(a, b, "a pullback called twice gives the same answer");
    }
    assert_eq!(counts(), before, "after calling a pullback twice");
    // forward mode, then drop
    {
        let mut x = Float64::from_slice(&[1.0, 2.0]);
        x.enable_grad();
        let y = x.exp() * &x;
        kiln::ad::forward(&x).unwrap();
        let _ = y.grad().to_vec();
    }
    assert_eq!(counts(), before, "after forward mode");
    // hvp
    {
        let _ = kiln::hvp(
            |x: &Float64| (x * x * x).sum(),
            &Float64::from_slice(&[1.0, 2.0]),
            &Float64::from_slice(&[1.0, 0.0]),
        )
        .unwrap();
    }
    assert_eq!(counts(), before, "after hvp");
}

#[test]
fn no_leaks_after_panics_in_branches_and_loops() {
    let _one = lock();
    let _ = kiln::grad(|x: &Float64| (x * x).sum(), &Float64::from_slice(&[1.0])).unwrap();
    let before = counts();
    let r = std::panic::catch_unwind(|| {
        let mut x = Float64::from_slice(&[1.0, -2.0]);
        x.enable_grad();
        let m = x.gt(0.0);
        let _y: Float64 = kiln::if_then_else(
            &m,
            |x: &Float64| x * x,
            |_x: &Float64| -> Float64 { panic!("boom in a branch") },
            &x,
        )
        .unwrap();
    });
    assert!(r.is_err());
    assert_eq!(counts(), before, "after a panic in a branch");
}

#[test]
fn threads_train_concurrently() {
    let _one = lock();
    let _ = kiln::grad(|x: &Float64| (x * x).sum(), &Float64::from_slice(&[1.0])).unwrap();
    let before = counts();
    let hs: Vec<_> = (0..4)
        .map(|k| {
            std::thread::spawn(move || {
                let xs = Float64::linspace(-1.0, 1.0, 16);
                let ys = &xs * (2.0 + k as f64) - 0.5;
                let mut w = (Float64::from(0.0), Float64::from(0.0));
                for _ in 0..60 {
                    let (xs2, ys2) = (xs.clone(), ys.clone());
                    let g = kiln::grad(
                        move |(a, b): &(Float64, Float64)| {
                            let e = a * &xs2 + b - &ys2;
                            (&e * &e).sum() / 16.0
                        },
                        &w,
                    )
                    .unwrap();
                    w = (&w.0 - &g.0 * 0.5, &w.1 - &g.1 * 0.5);
                    w.0.eval();
                    w.1.eval();
                }
                (w.0.item(), w.1.item(), 2.0 + k as f64)
            })
        })
        .collect();
    // meanwhile on other threads: the Dr.Jit face and nested transformations
    let others: Vec<_> = (0..2)
        .map(|k| {
            std::thread::spawn(move || {
                for _ in 0..30 {
                    let mut x = Float64::from_slice(&[0.5 + k as f64, -1.0]);
                    x.enable_grad();
                    let y = kiln::ad::suspend_grad(|| (&x * 100.0).sum()) + (&x * &x * &x).sum();
                    y.backward();
                    let g2 = kiln::grad(
                        |x: &Float64| {
                            kiln::grad(|y: &Float64| (y * y * y).sum(), x)
                                .unwrap()
                                .sum()
                        },
                        &x.detach(),
                    )
                    .unwrap();
                    let xv = x.to_vec();
                    assert_eq!(
                        x.grad().to_vec(),
                        vec![3.0 * xv[0] * xv[0], 3.0 * xv[1] * xv[1]]
                    );
                    assert_eq!(g2.to_vec(), vec![6.0 * xv[0], 6.0 * xv[1]]);
                }
            })
        })
        .collect();
    for h in others {
        h.join().unwrap();
    }
    for h in hs {
        let (a, b, want) = h.join().unwrap();
        assert!(
            (a - want).abs() < 1e-3 && (b + 0.5).abs() < 1e-3,
            "{a} {b} vs {want}"
        );
    }
    assert_eq!(counts(), before, "after threads");
}

/// A custom op whose backward panics (a user's bug).
struct PanicsBackward;
impl kiln::ad::CustomOp for PanicsBackward {
    type Input = Float64;
    type Output = Float64;
    fn eval(&self, x: &Float64) -> Float64 {
        x * 2.0
    }
    fn backward(&self, _x: &Float64, _y: &Float64, _dy: &Float64) -> Float64 {
        panic!("custom backward panics")
    }
    fn forward(&self, _x: &Float64, _y: &Float64, _dx: &Float64) -> Option<Float64> {
        panic!("custom forward panics")
    }
}

#[test]
fn no_leaks_after_a_panic_inside_a_pass() {
    let _one = lock();
    let _ = kiln::grad(|x: &Float64| (x * x).sum(), &Float64::from_slice(&[1.0])).unwrap();
    let before = counts();
    let r = std::panic::catch_unwind(|| {
        let mut x = Float64::from_slice(&[1.0, 2.0]);
        x.enable_grad();
        let y = (kiln::ad::custom(PanicsBackward, &(&x * &x)) * &x).sum();
        y.backward();
    });
    assert!(r.is_err());
    assert_eq!(counts(), before, "after a panic in a backward rule");
    let r = std::panic::catch_unwind(|| {
        kiln::grad(
            |x: &Float64| kiln::ad::custom(PanicsBackward, &x.exp()).sum(),
            &Float64::from_slice(&[1.0, 2.0]),
        )
    });
    assert!(r.is_err());
    assert_eq!(
        counts(),
        before,
        "after a panic in a backward rule under kiln::grad"
    );
    let r = std::panic::catch_unwind(|| {
        kiln::jvp(
            |x: &Float64| kiln::ad::custom(PanicsBackward, &x.exp()),
            &Float64::from_slice(&[1.0, 2.0]),
            &Float64::from_slice(&[1.0, 0.0]),
        )
    });
    assert!(r.is_err());
    assert_eq!(counts(), before, "after a panic in a forward rule");
    // and AD still works
    let g = kiln::grad(
        |x: &Float64| (x * x).sum(),
        &Float64::from_slice(&[1.0, 2.0]),
    )
    .unwrap();
    assert_eq!(g.to_vec(), vec![2.0, 4.0]);
}

#[test]
fn nested_grad_is_the_second_derivative() {
    let _one = lock();
    // d/dx Σ (d/dx Σ x³) = d/dx Σ 3x² = 6x: an inner kiln::grad must not treat x as a constant
    let x = Float64::from_slice(&[1.0, 2.0, -0.5]);
    let before = counts();
    let g = kiln::grad(
        |x: &Float64| {
            kiln::grad(|y: &Float64| (y * y * y).sum(), x)
                .unwrap()
                .sum()
        },
        &x,
    )
    .unwrap();
    assert_eq!(g.to_vec(), vec![6.0, 12.0, -3.0]);
    // mixed: f(x, w) = Σ w · ∂/∂x Σ sin(x) w = Σ w² cos(x); ∂/∂w = 2 w cos(x)
    let w = Float64::from_slice(&[0.5, -1.0, 2.0]);
    let (gx, gw) = kiln::grad(
        |(x, w): &(Float64, Float64)| {
            let w2 = w.clone();
            let inner = kiln::grad(move |x: &Float64| (x.sin() * &w2).sum(), x).unwrap();
            (inner * w).sum()
        },
        &(x.clone(), w.clone()),
    )
    .unwrap();
    let (xv, wv) = (x.to_vec(), w.to_vec());
    let want_x: Vec<f64> = xv.iter().zip(&wv).map(|(x, w)| -w * w * x.sin()).collect();
    let want_w: Vec<f64> = xv.iter().zip(&wv).map(|(x, w)| 2.0 * w * x.cos()).collect();
    close(&gx.to_vec(), &want_x, 1e-12);
    close(&gw.to_vec(), &want_w, 1e-12);
    // three levels: d³/dx³ Σ x⁴ = 24x
    let g3 = kiln::grad(
        |x: &Float64| {
            kiln::grad(
                |x: &Float64| {
                    kiln::grad(|x: &Float64| (x * x * x * x).sum(), x)
                        .unwrap()
                        .sum()
                },
                x,
            )
            .unwrap()
            .sum()
        },
        &x,
    )
    .unwrap();
    close(&g3.to_vec(), &[24.0, 48.0, -12.0], 1e-12);
    // a nested grad inside suspend_grad is a first-order gradient, as before
    let plain = kiln::ad::suspend_grad(|| kiln::grad(|y: &Float64| (y * y).sum(), &x).unwrap());
    assert!(!plain.grad_enabled());
    drop((g, gx, gw, g3, plain, w));
    assert_eq!(counts(), before, "nested grads leave nothing behind");
}

#[test]
fn jvp_vjp_hvp_inside_grad_are_differentiable() {
    let _one = lock();
    let x0 = [0.4, -1.1, 0.9];
    let before = counts();
    // each inner transformation applied to g(y) = sin(y) y², outer function summed
    let inner = |y: &Float64| y.sin() * y * y;
    let dir = Float64::from_slice(&[1.0, -0.5, 2.0]);
    let d2 = dir.clone();
    let via_jvp = move |x: &Float64| kiln::jvp(inner, x, &d2).unwrap().1.sum();
    let d2 = dir.clone();
    let via_vjp = move |x: &Float64| {
        let (y, pull) = kiln::vjp(inner, x).unwrap();
        (pull(&d2).unwrap() * y).sum()
    };
    let d2 = dir.clone();
    let via_hvp = move |x: &Float64| {
        (kiln::hvp(|y: &Float64| (y.sin() * y * y).sum(), x, &d2).unwrap() * x).sum()
    };
    check("jvp in grad", &via_jvp, &x0);
    check("vjp in grad", &via_vjp, &x0);
    check("hvp in grad", &via_hvp, &x0);
    drop((dir, via_jvp, via_vjp, via_hvp));
    assert_eq!(
        counts(),
        before,
        "nested transformations leave nothing behind"
    );
}

#[test]
fn nested_grad_through_a_captured_array() {
    let _one = lock();
    // the inner gradient is taken with respect to a constant, but depends on the outer
    // argument through a capture: d/dw Σ ∂/∂x Σ w x² = d/dw Σ 2 w x = 2 x
    let x0 = Float64::from_slice(&[1.5, -2.0]);
    let before = counts();
    let xc = x0.clone();
    let g = kiln::grad(
        move |w: &Float64| {
            let w2 = w.clone();
            kiln::grad(move |x: &Float64| (&w2 * x * x).sum(), &xc)
                .unwrap()
                .sum()
        },
        &Float64::from_slice(&[0.5, 3.0]),
    )
    .unwrap();
    close(&g.to_vec(), &[3.0, -4.0], 1e-12);
    let xc = x0.clone();
    let gj = kiln::grad(
        move |w: &Float64| {
            let w2 = w.clone();
            let (_, t) = kiln::jvp(move |x: &Float64| &w2 * x * x, &xc, &Float64::ones(2)).unwrap();
            t.sum()
        },
        &Float64::from_slice(&[0.5, 3.0]),
    )
    .unwrap();
    close(&gj.to_vec(), &[3.0, -4.0], 1e-12);
    drop((g, gj));
    assert_eq!(counts(), before);
}

#[test]
fn forward_mode_towards_a_consumed_graph_is_an_error() {
    let _one = lock();
    let mut x = Float64::from_slice(&[1.0, 2.0]);
    x.enable_grad();
    let y = &x * &x;
    y.sum().backward();
    x.set_grad(&Float64::ones(2));
    // y's graph is gone: its tangent cannot be computed, and a zero would be wrong
    let e = kiln::ad::forward_to(&y).unwrap_err().to_string();
    assert!(e.contains("consumed"), "{e}");
    let z = &y * 2.0;
    let e = kiln::ad::forward_to(&z).unwrap_err().to_string();
    assert!(e.contains("consumed"), "{e}");
    // a graph that was retained still works
    let mut a = Float64::from(3.0);
    a.enable_grad();
    let b = &a * &a;
    kiln::ad::backward_with(&b, &Float64::from(1.0), true).unwrap();
    a.set_grad(&Float64::from(1.0));
    kiln::ad::forward_to(&b).unwrap();
    assert_eq!(b.grad().item(), 6.0);
}

#[test]
fn no_leaks_after_reverse_through_a_loop_or_a_pytensor_scan() {
    let _one = lock();
    let _ = kiln::grad(|x: &Float64| (x * x).sum(), &Float64::from_slice(&[1.0])).unwrap();
    let before = counts();
    // reverse mode through a loop (refused until issue 26) leaves nothing behind
    let g = kiln::grad(
        |x: &Float64| {
            let (y, _) = kiln::while_loop(
                (x.clone(), UInt32::zeros(2)),
                |(_, i)| i.lt(3u32),
                |(y, i)| (y * 1.5 + y.sin(), i + 1u32),
            )
            .unwrap();
            y.sum()
        },
        &Float64::from_slice(&[0.2, 0.4]),
    )
    .unwrap();
    assert!(g.to_vec().iter().all(|v| v.is_finite() && *v > 1.0));
    drop(g);
    assert_eq!(counts(), before, "after reverse mode through a loop");
    // a scan (PyTensor's face) with a gradient (refused until issue 26), and a body that fails
    // at its second step: neither leaves anything behind
    {
        let mut x = Float64::from_slice(&[0.2, 0.4]);
        x.enable_grad();
        let xs = Tensor::from_array(x.clone(), &[2]);
        let r = kiln::scan::Scan::new()
            .sequence(&xs)
            .output(&Tensor::scalar(0.0f64))
            .run(|s| s.seq(0, 0) * s.out(0, -1) + s.seq(0, 0))
            .unwrap();
        r.output::<f64>(0).array().sum().backward();
        // y0 = x0, y1 = x1·x0 + x1: Σ = x0 + x1·x0 + x1
        let g = x.grad().to_vec();
        assert!(
            (g[0] - 1.4).abs() < 1e-12 && (g[1] - 1.2).abs() < 1e-12,
            "{g:?}"
        );
        let e = kiln::scan::Scan::new()
            .sequence(&xs)
            .output(&Tensor::scalar(0.0f64))
            .run(|s| {
                if s.t().to_vec()[0] == 1 {
                    s.seq(0, 0).reshape(&[1])
                } else {
                    s.seq(0, 0) + s.out(0, -1)
                }
            })
            .err()
            .expect("a shape change is an error");
        assert!(e.to_string().contains("step 1"), "{e}");
    }
    assert_eq!(counts(), before, "after a PyTensor scan with a gradient");
}
