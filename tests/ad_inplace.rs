//! Update-in-place (issue 13) under AD (issue 23).
//!
//! A moved-from operand's buffer may be reused for the result — unless the backward pass still
//! needs its values. These tests check that:
//! 1. a frozen training step (logistic regression, `backward`, Adam updating `&mut` parameters)
//!    and its traced twin give bit-identical losses, gradients and parameters with update-in-place
//!    on and off (`kiln::with_inplace`), while "on" really reuses buffers;
//! 2. elementwise chains whose evaluated intermediates are moved into the next op give the same
//!    gradients on and off, and those gradients match the closed form (a buffer the backward pass
//!    reads, overwritten by a later op, would make them wrong), with and without a frozen call.

mod common;
use common::leak_checked;
use kiln::opt::Adam;
use kiln::prelude::*;
use kiln::Traverse;

const D: usize = 4;

#[derive(Traverse, Clone)]
struct Model {
    w: Vec<Float32>,
    b: Float32,
}

#[derive(Traverse)]
struct Data {
    x: Vec<Float32>,
    y: Float32,
}

fn loss(m: &Model, d: &Data) -> Float32 {
    let mut z = &d.x[0] * &m.w[0] + &m.b;
    for j in 1..D {
        z += &d.x[j] * &m.w[j];
    }
    let n = Float32::full(1.0, d.y.size()).sum();
    (z.max(0.0f32) - &z * &d.y + ((-z.abs()).exp() + 1.0).log()).sum() / n
}

/// The step of `examples/logistic_regression.rs`, also returning the gradients it used.
fn step(m: &mut Model, opt: &mut Adam, d: &Data) -> (Float32, Model) {
    kiln::ad::enable_grad(m).expect("float parameters");
    let l = loss(m, d);
    l.backward();
    let g = kiln::ad::grads(m);
    opt.step_with(m, &g);
    (l, g)
}

fn data(n: usize) -> Data {
    let mut rng = Pcg32::seeded(7, UInt64::arange(n));
    let x: Vec<Float32> = (0..D).map(|_| rng.next_f32() * 2.0 - 1.0).collect();
    let mut z = Float32::full(0.1, n);
    for (j, xj) in x.iter().enumerate() {
        z += xj * (j as f32 - 1.5);
    }
    let y = select(&(z.gt(0.0f32) ^ rng.next_f32().lt(0.1f32)), 1.0f32, 0.0f32);
    for a in &x {
        a.eval();
    }
    y.eval();
    Data { x, y }
}

fn fresh() -> (Model, Adam) {
    let m = Model {
        w: (0..D).map(|j| Float32::opaque(0.1 * j as f32)).collect(),
        b: Float32::opaque(-0.2),
    };
    let opt = Adam::new(0.05).init(&m);
    (m, opt)
}

fn bits(m: &Model) -> Vec<u32> {
    m.w.iter()
        .chain([&m.b])
        .map(|a| a.item().to_bits())
        .collect()
}

/// Losses and gradients of 6 frozen or traced steps, and the parameters after a 7th, as bits.
type Trace = (Vec<u32>, Vec<Vec<u32>>, Vec<u32>);

fn train(on: bool, d: &Data) -> (Trace, Trace, u64) {
    kiln::with_inplace(on, || {
        let reuses = kiln::stats().inplace_reuses;
        let run = |frozen: bool| {
            let (mut m, mut opt) = fresh();
            let mut f = kiln::freeze(step);
            let (mut losses, mut grads) = (Vec::new(), Vec::new());
            for _ in 0..6 {
                let (l, g) = if frozen {
                    f.call(&mut m, &mut opt, d).expect("training step")
                } else {
                    step(&mut m, &mut opt, d)
                };
                losses.push(l.item().to_bits());
                grads.push(bits(&g));
            }
            if frozen {
                // (`step` enables the parameters' gradients, which they keep after the call as
                // after the unfrozen one: the second call records the layout that carries them)
                let s = f.stats();
                assert_eq!((s.recordings, s.replays), (2, 4), "{s}");
            }
            // one more step from the final state: Adam's moments enter its update
            let (l, _) = step(&mut m, &mut opt, d);
            l.eval();
            (losses, grads, bits(&m))
        };
        let frozen = run(true);
        let traced = run(false);
        (frozen, traced, kiln::stats().inplace_reuses - reuses)
    })
}

#[test]
fn training_step_is_bit_identical_with_inplace_on_and_off() {
    leak_checked(|| {
        let d = data(2048);
        let (frozen_on, traced_on, reuses_on) = train(true, &d);
        let (frozen_off, traced_off, reuses_off) = train(false, &d);
        assert!(reuses_on > 0, "update-in-place reused no buffer");
        assert_eq!(reuses_off, 0);
        assert_eq!(frozen_on, frozen_off, "frozen step: in-place on vs off");
        assert_eq!(traced_on, traced_off, "traced step: in-place on vs off");
        // and replays compute what the traced steps compute
        assert_eq!(frozen_on, traced_on, "frozen vs traced");
        // the loss went down, so the steps did something
        let l = &frozen_on.0;
        assert!(f32::from_bits(l[5]) < f32::from_bits(l[0]), "{l:?}");
    });
}

// ---------------------------------------------------------------------------------------------
// Elementwise chains with moved-from operands

/// One chain: its value and gradient with respect to `x` (closed form for the check).
struct Chain {
    name: &'static str,
    /// y(x), built from moved-from evaluated intermediates.
    run: fn(&Float64) -> Float64,
    /// dy/dx.
    grad: fn(f64) -> f64,
}

/// An evaluated intermediate, to be moved into the next op (its buffer is then a reuse candidate).
fn ev(a: Float64) -> Float64 {
    a.eval();
    a
}

const CHAINS: &[Chain] = &[
    // exp's partial reads its result: `e` is moved into `e * 3.0` but must survive for backward
    Chain {
        name: "exp then scale",
        run: |x| {
            let a = ev(x * 0.5);
            let e = ev(a.exp());
            ev(e * 3.0) + 1.0
        },
        grad: |x| 1.5 * (0.5 * x).exp(),
    },
    // sin's partial reads its operand `a`, which is moved into the next op afterwards
    Chain {
        name: "sin of a moved operand",
        run: |x| {
            let a = ev(x + 0.25);
            let s = ev(a.sin());
            let b = ev(a * 2.0); // `a` moved: sin's backward still needs it
            s * b
        },
        grad: |x| {
            let a = x + 0.25;
            a.cos() * 2.0 * a + a.sin() * 2.0
        },
    },
    // a product of two moved operands: each partial is the other operand
    Chain {
        name: "product of moved operands",
        run: |x| {
            let a = ev(x * 2.0);
            let c = ev(x + 1.0);
            let p = ev(a * c); // both moved
            ev(p * 0.5) - 3.0
        },
        grad: |x| 0.5 * (2.0 * (x + 1.0) + 2.0 * x),
    },
    // division and sqrt (partials read operands and results), then a moved square
    Chain {
        name: "div, sqrt, square",
        run: |x| {
            let a = ev(x * x + 1.0);
            let r = ev(a.sqrt());
            let q = ev(x / r); // `r` moved
            let q2 = ev(q.clone() * q);
            q2 + 0.0
        },
        grad: |x| {
            // (x / sqrt(x² + 1))² = x² / (x² + 1)
            2.0 * x / ((x * x + 1.0) * (x * x + 1.0))
        },
    },
];

fn chain_grad(c: &Chain, xs: &[f64], frozen: bool) -> (Vec<u64>, Vec<u64>) {
    let x = Float64::from_slice(xs);
    x.eval();
    if frozen {
        // the chain and its backward inside a frozen function, called three times
        let mut f = kiln::freeze(|x: &Float64, run: &u32| -> (Float64, Float64) {
            let c = &CHAINS[*run as usize];
            let mut x = x.clone();
            x.enable_grad();
            let y = (c.run)(&x);
            y.sum().backward();
            (y, x.grad())
        });
        let i = CHAINS.iter().position(|k| k.name == c.name).unwrap() as u32;
        let mut out = None;
        for _ in 0..3 {
            out = Some(f.call(&x, &i).expect("frozen chain"));
        }
        assert_eq!(f.stats().replays, 2, "{}", f.stats());
        let (y, g) = out.unwrap();
        let b = |a: &Float64| a.to_vec().iter().map(|v| v.to_bits()).collect();
        (b(&y), b(&g))
    } else {
        let mut x = x;
        x.enable_grad();
        let y = (c.run)(&x);
        y.sum().backward();
        let b = |a: &Float64| a.to_vec().iter().map(|v| v.to_bits()).collect();
        (b(&y), b(&x.grad()))
    }
}

#[test]
fn moved_operands_keep_what_the_backward_pass_reads() {
    leak_checked(|| {
        let xs: Vec<f64> = (0..3000).map(|i| -1.5 + i as f64 * 1e-3).collect();
        for c in CHAINS {
            for frozen in [false, true] {
                let before = kiln::stats().inplace_reuses;
                let on = kiln::with_inplace(true, || chain_grad(c, &xs, frozen));
                let reused = kiln::stats().inplace_reuses - before;
                let off = kiln::with_inplace(false, || chain_grad(c, &xs, frozen));
                assert_eq!(on, off, "{} (frozen: {frozen}): in-place on vs off", c.name);
                if !frozen {
                    assert!(reused > 0, "{}: no buffer was reused", c.name);
                }
                for (i, (&x, &g)) in xs.iter().zip(&on.1).enumerate() {
                    let (g, want) = (f64::from_bits(g), (c.grad)(x));
                    assert!(
                        (g - want).abs() <= 1e-12 * (1.0 + want.abs()),
                        "{} (frozen: {frozen}) lane {i}: gradient {g}, closed form {want}",
                        c.name
                    );
                }
            }
        }
    });
}
