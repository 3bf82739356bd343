//! AD inside frozen functions: a training step (loss, `backward` or `kiln::grad`, optimizer
//! update of `&mut` parameters) replays bit for bit like unfrozen calls at several input sizes;
//! the AD graph keeps a constant size over 1000 steps; the AD boundary of a frozen call; reading
//! gradients inside.
//!
//! The graph's counters are global, so every test here holds `LOCK` (no other test of this
//! binary makes nodes while one counts).
use kiln::opt::{Adam, Sgd};
use kiln::prelude::*;
use kiln::Traverse;
use std::sync::Mutex;

static LOCK: Mutex<()> = Mutex::new(());

fn lock() -> std::sync::MutexGuard<'static, ()> {
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

#[derive(Traverse, Clone)]
struct Params {
    w: Vec<Float32>,
    b: Float32,
}

#[derive(Traverse)]
struct Data {
    x: Vec<Float32>,
    y: Float32,
}

const D: usize = 3;

fn data(n: usize) -> Data {
    let mut rng = Pcg32::new(n);
    let x: Vec<Float32> = (0..D).map(|_| rng.next_f32() * 4.0 - 2.0).collect();
    let z = &x[0] * 1.5 - &x[1] * 2.0 + &x[2] * 0.5 + 0.3;
    let y = select(&z.gt(&(rng.next_f32() - 0.5)), 1.0f32, 0.0f32);
    for a in &x {
        a.eval();
    }
    y.eval();
    Data { x, y }
}

fn init() -> Params {
    Params {
        w: (0..D).map(|j| Float32::opaque(0.1 * j as f32)).collect(),
        b: Float32::opaque(0.0),
    }
}

/// Mean logistic loss (stable form: max(z, 0) − z·y + log(1 + e^−|z|)).
fn loss_of(p: &Params, d: &Data) -> Float32 {
    let mut z = &d.x[0] * &p.w[0] + &p.b;
    for j in 1..D {
        z += &d.x[j] * &p.w[j];
    }
    let n = Float32::full(1.0, d.y.size()).sum();
    let l = z.max(0.0f32) - &z * &d.y + ((-z.abs()).exp() + 1.0).log();
    l.sum() / n
}

fn step(p: &mut Params, opt: &mut Adam, d: &Data) -> Float32 {
    kiln::ad::enable_grad(p).unwrap();
    let loss = loss_of(p, d);
    loss.backward();
    opt.step(p);
    loss
}

fn step_jax(p: &mut Params, opt: &mut Sgd, d: &Data) -> (Float32, Params) {
    let (loss, g) = kiln::value_and_grad(|p: &Params| loss_of(p, d), p).unwrap();
    opt.step_with(p, &g);
    (loss, g)
}

fn bits(p: &Params) -> Vec<u32> {
    let mut v: Vec<u32> = p.w.iter().map(|w| w.item().to_bits()).collect();
    v.push(p.b.item().to_bits());
    v
}

#[test]
fn backward_and_adam_replay_bit_for_bit_at_two_sizes() {
    let _l = lock();
    let mut frozen = kiln::freeze(step);
    for n in [300, 5000] {
        let d = data(n);
        let (mut pf, mut pu) = (init(), init());
        let mut of = Adam::new(0.05).init(&pf);
        let mut ou = Adam::new(0.05).init(&pu);
        let mut first = None;
        for _ in 0..6 {
            let lf = frozen.call(&mut pf, &mut of, &d).unwrap();
            let lu = step(&mut pu, &mut ou, &d);
            assert_eq!(lf.item().to_bits(), lu.item().to_bits(), "n = {n}");
            assert_eq!(bits(&pf), bits(&pu), "n = {n}");
            first.get_or_insert(lf.item());
            assert!(!lf.grad_enabled());
        }
        // it learns
        assert!(loss_of(&pf, &d).item() < first.unwrap());
    }
    // two recordings serve both sizes (the backward pass follows the input sizes): `step`
    // enables gradients on `p`, so after the first call `p` tracks derivatives, as after the
    // unfrozen call, and the second call's `p` is a new layout (one that carries gradients)
    let s = frozen.stats();
    assert_eq!((s.recordings, s.replays), (2, 10), "{s}");
}

#[test]
fn value_and_grad_and_sgd_replay_bit_for_bit_at_two_sizes() {
    let _l = lock();
    let mut frozen = kiln::freeze(step_jax);
    for n in [257, 4000] {
        let d = data(n);
        let (mut pf, mut pu) = (init(), init());
        let mut of = Sgd::new(0.5).momentum(0.9).init(&pf);
        let mut ou = Sgd::new(0.5).momentum(0.9).init(&pu);
        for _ in 0..5 {
            let (lf, gf) = frozen.call(&mut pf, &mut of, &d).unwrap();
            let (lu, gu) = step_jax(&mut pu, &mut ou, &d);
            assert_eq!(lf.item().to_bits(), lu.item().to_bits());
            assert_eq!(bits(&gf), bits(&gu));
            assert_eq!(bits(&pf), bits(&pu));
            assert!(bits(&gf).iter().any(|&b| b != 0));
        }
    }
    let s = frozen.stats();
    assert_eq!((s.recordings, s.replays), (1, 9), "{s}");
}

#[test]
fn reading_gradients_inside_a_frozen_function() {
    let _l = lock();
    // lazily: recorded and replayed
    let body = |p: &mut Params, d: &Data| -> Params {
        kiln::ad::enable_grad(p).unwrap();
        loss_of(p, d).backward();
        kiln::ad::grads(p)
    };
    let mut frozen = kiln::freeze(body);
    let d = data(500);
    for _ in 0..3 {
        let (mut pf, mut pu) = (init(), init());
        let gf = frozen.call(&mut pf, &d).unwrap();
        let gu = body(&mut pu, &d);
        assert_eq!(bits(&gf), bits(&gu));
        assert!(bits(&gf).iter().any(|&b| b != 0));
    }
    assert_eq!(frozen.stats().replays, 2);
    // reading its values inside is refused like any read
    let mut reads = kiln::freeze(|p: &Params, d: &Data| -> Float32 {
        let mut q = p.clone();
        kiln::ad::enable_grad(&mut q).unwrap();
        loss_of(&q, d).backward();
        Float32::from_slice(&q.b.grad().to_vec())
    });
    match reads.call(&init(), &d) {
        Err(kiln::Error::FrozenRead { .. }) => {}
        Err(e) => panic!("wrong error: {e}"),
        Ok(_) => panic!("a read inside a frozen function was not refused"),
    }
}

#[test]
fn a_frozen_call_is_a_boundary_of_the_graph() {
    let _l = lock();
    let d = data(200);
    // `&mut` parameters that carry gradients come back as fresh leaves, recorded or replayed
    let mut p = init();
    kiln::ad::enable_grad(&mut p).unwrap();
    let mut opt = Adam::new(0.05).init(&p);
    let mut frozen = kiln::freeze(step);
    for _ in 0..3 {
        frozen.call(&mut p, &mut opt, &d).unwrap();
        assert!(p.b.grad_enabled() && p.w.iter().all(|w| w.grad_enabled()));
        assert_eq!(p.b.grad().item(), 0.0);
    }
    // without gradients on entry, they leave as the function left them: `step` enables them,
    // so they leave as fresh leaves, as after the unfrozen call
    let mut q = init();
    frozen.call(&mut q, &mut opt, &d).unwrap();
    assert!(q.b.grad_enabled() && q.b.grad().item() == 0.0);

    // a `&` argument's graph is a constant inside: the caller's leaf gets nothing
    let mut c = Float32::from_slice(&[2.0]);
    c.enable_grad();
    let k = &c * 1.0;
    let mut g = kiln::freeze(|x: &Float32, k: &Float32| -> Float32 {
        let mut y = x.clone();
        y.enable_grad();
        (&y * k).sum().backward();
        y.grad()
    });
    let x = Float32::from_slice(&[1.0, 2.0, 3.0]);
    for _ in 0..3 {
        assert_eq!(g.call(&x, &k).unwrap().to_vec(), vec![2.0; 3]);
        assert_eq!(c.grad().item(), 0.0);
    }
    assert_eq!(g.stats().replays, 2);
    // and its graph is still whole
    kiln::ad::backward_from(&k, &Float32::from(1.0f32)).unwrap();
    assert_eq!(c.grad().item(), 1.0);
}

fn counters() -> (u64, u64, u64) {
    let s = kiln::stats();
    (s.ad_nodes, s.ad_edges, s.ad_grad_bytes)
}

#[test]
fn the_graph_keeps_its_size_over_1000_steps() {
    let _l = lock();
    let d = data(256);
    // unfrozen
    let mut p = init();
    let mut opt = Adam::new(0.01).init(&p);
    let mut at10 = None;
    for i in 0..1000 {
        let loss = step(&mut p, &mut opt, &d);
        drop(loss);
        if i == 10 {
            at10 = Some(counters());
        }
    }
    assert_eq!(Some(counters()), at10, "unfrozen");
    assert!(at10.unwrap().0 >= (D + 1) as u64); // the parameters' leaves
    drop(p);
    // frozen
    let mut p = init();
    let mut opt = Adam::new(0.01).init(&p);
    let mut frozen = kiln::freeze(step);
    let mut at10 = None;
    for i in 0..1000 {
        frozen.call(&mut p, &mut opt, &d).unwrap();
        if i == 10 {
            at10 = Some(counters());
        }
    }
    assert_eq!(Some(counters()), at10, "frozen");
    // (the first call enables `p`'s gradients, as `step` does unfrozen: the second records the
    // layout with them, and every later call replays it)
    assert_eq!(frozen.stats().recordings, 2);
}

#[test]
fn transformations_free_their_graphs() {
    let _l = lock();
    let base = counters();
    let x = Float64::from_slice(&[1.0, 2.0, 3.0]);
    let (y, pb) = kiln::vjp(|x: &Float64| (x.exp() * x).sum(), &x).unwrap();
    assert!(counters().0 >= base.0 + 3); // the pullback holds its graph
    let g1 = pb(&Float64::from(1.0)).unwrap();
    let g2 = pb(&Float64::from(1.0)).unwrap();
    assert_eq!(g1.to_vec(), g2.to_vec());
    drop(pb);
    assert_eq!(counters(), base);
    assert!(!y.grad_enabled() && !g1.grad_enabled());
    let _ = kiln::grad(|x: &Float64| (x * x).sum(), &x).unwrap();
    let _ = kiln::hvp(|x: &Float64| (x * x * x).sum(), &x, &x).unwrap();
    let _ = kiln::jvp(|x: &Float64| x.sin(), &x, &x).unwrap();
    assert_eq!(counters(), base);
}

#[test]
fn unwinding_leaves_no_boundary_and_no_nodes() {
    let _l = lock();
    let base = counters();
    let x = Float64::from_slice(&[1.0, 2.0]);
    let r = std::panic::catch_unwind(|| {
        kiln::grad(
            |x: &Float64| -> Float64 {
                let _y = x * x; // a node of the function, freed by the unwind
                panic!("inside f")
            },
            &x,
        )
    });
    assert!(r.is_err());
    assert_eq!(counters(), base);
    // a refused read inside a frozen function unwinds through its AD boundary
    let mut reads = kiln::freeze(|x: &Float64| -> Float64 {
        let g = kiln::grad(|x: &Float64| (x * x).sum(), x).unwrap();
        Float64::from_slice(&g.to_vec())
    });
    assert!(matches!(
        reads.call(&x),
        Err(kiln::Error::FrozenRead { .. })
    ));
    // no boundary is left behind: a pass reaches a leaf made before
    let mut a = Float64::from(3.0);
    a.enable_grad();
    (&a * &a).backward();
    assert_eq!(a.grad().item(), 6.0);
    drop(a);
    assert_eq!(counters(), base);
}

/// The function-freezing document's own pattern: `backward()` inside the frozen step, the
/// optimizer outside, reading the parameters' gradients after the call.
fn grads_only(p: &mut Params, d: &Data) -> Float32 {
    let loss = loss_of(p, d);
    loss.backward();
    loss
}

fn grad_bits(p: &Params) -> Vec<u32> {
    let mut v: Vec<u32> = p.w.iter().map(|w| w.grad().item().to_bits()).collect();
    v.push(p.b.grad().item().to_bits());
    v
}

#[test]
fn a_backward_inside_reaches_the_callers_arrays() {
    let _l = lock();
    let mut frozen = kiln::freeze(grads_only);
    for n in [300, 4000] {
        let d = data(n);
        let (mut pf, mut pu) = (init(), init());
        kiln::ad::enable_grad(&mut pf).unwrap();
        kiln::ad::enable_grad(&mut pu).unwrap();
        let mut of = Adam::new(0.05).init(&pf);
        let mut ou = Adam::new(0.05).init(&pu);
        for _ in 0..4 {
            let lf = frozen.call(&mut pf, &d).unwrap();
            let lu = grads_only(&mut pu, &d);
            assert_eq!(lf.item().to_bits(), lu.item().to_bits(), "n = {n}");
            assert_eq!(grad_bits(&pf), grad_bits(&pu), "n = {n}");
            assert!(grad_bits(&pf).iter().any(|&b| b != 0));
            // the optimizer outside reads and consumes them
            of.step(&mut pf);
            ou.step(&mut pu);
            assert_eq!(bits(&pf), bits(&pu), "n = {n}");
            assert_eq!(pf.b.grad().item(), 0.0);
        }
    }
    let s = frozen.stats();
    assert_eq!((s.recordings, s.replays), (1, 7), "{s}");

    // gradients add up over calls, onto what the caller's arrays held before
    let d = data(500);
    let mut p = init();
    kiln::ad::enable_grad(&mut p).unwrap();
    p.b.set_grad(&Float32::from(100.0f32));
    frozen.call(&mut p, &d).unwrap();
    let once = p.w[1].grad().item();
    let b_once = p.b.grad().item();
    frozen.call(&mut p, &d).unwrap();
    let mut q = init();
    kiln::ad::enable_grad(&mut q).unwrap();
    grads_only(&mut q, &d);
    assert_eq!(once, q.w[1].grad().item());
    assert_eq!(b_once, 100.0 + q.b.grad().item());
    assert_eq!(p.w[1].grad().item(), 2.0 * once);
    assert_eq!(p.b.grad().item(), b_once + q.b.grad().item());

    // arrays without gradients get none, and a call with them tracked again still does
    let mut r = init();
    frozen.call(&mut r, &d).unwrap();
    assert!(!r.b.grad_enabled());
    kiln::ad::enable_grad(&mut r).unwrap();
    frozen.call(&mut r, &d).unwrap();
    assert_eq!(r.w[1].grad().item(), once);
}

#[test]
fn a_backward_inside_reaches_what_an_argument_was_computed_from() {
    let _l = lock();
    // `y = 2x` passed in, `backward(3y)` inside: x gets 6 per call, recorded and replayed, as
    // when an isolate_grad scope ends (the call is one); y keeps its own node
    let mut frozen = kiln::freeze(|y: &mut Float32| (&*y * 3.0).sum().backward());
    let before = counters();
    for call in 0..3 {
        let mut x = Float32::from_slice(&[0.0, 1.0, 2.0]);
        x.enable_grad();
        let mut y = kiln::make_opaque(&(&x * 2.0));
        frozen.call(&mut y).unwrap();
        assert_eq!(x.grad().to_vec(), vec![6.0; 3], "call {call}");
        // what the unfrozen function does inside an isolate_grad scope
        let mut x2 = Float32::from_slice(&[0.0, 1.0, 2.0]);
        x2.enable_grad();
        let y2 = &x2 * 2.0;
        kiln::ad::isolate_grad(|| (&y2 * 3.0).sum().backward());
        assert_eq!(x.grad().to_vec(), x2.grad().to_vec());
    }
    let s = frozen.stats();
    assert_eq!((s.recordings, s.replays), (1, 2), "{s}");
    assert_eq!(counters(), before, "no node or variable left behind");
    // an interior argument the function replaces is a fresh leaf with what it delivered, as a
    // leaf argument is: the new value was not computed from x
    let mut shift = kiln::freeze(|y: &mut Float32| {
        (&*y * &*y).sum().backward();
        *y = &*y + 1.0;
    });
    let mut x = Float32::from_slice(&[1.0, 2.0]);
    x.enable_grad();
    let mut y = &x * 1.0;
    shift.call(&mut y).unwrap();
    assert_eq!(y.to_vec(), vec![2.0, 3.0]);
    assert_eq!(y.grad().to_vec(), vec![2.0, 4.0]);
    assert_eq!(x.grad().to_vec(), vec![0.0, 0.0]);
}

#[test]
fn gradients_delivered_by_frozen_calls_leave_no_nodes_behind() {
    let _l = lock();
    let d = data(256);
    let mut p = init();
    kiln::ad::enable_grad(&mut p).unwrap();
    let mut opt = Sgd::new(0.1).init(&p);
    let mut frozen = kiln::freeze(grads_only);
    let mut at10 = None;
    for i in 0..300 {
        frozen.call(&mut p, &d).unwrap();
        opt.step(&mut p);
        if i == 10 {
            at10 = Some(counters());
        }
    }
    assert_eq!(Some(counters()), at10);
    // a function that replaces its parameter: the gradient of what it received on entry goes
    // to the array the caller holds at that place
    let mut shift = kiln::freeze(|x: &mut Float32| {
        (&*x * &*x).sum().backward();
        *x = &*x + 1.0;
    });
    let mut x = Float32::from_slice(&[1.0, 2.0]);
    x.enable_grad();
    for k in 0..3 {
        shift.call(&mut x).unwrap();
        assert_eq!(x.to_vec(), vec![2.0 + k as f32, 3.0 + k as f32]);
        let want: Vec<f32> = (0..=k)
            .map(|j| vec![2.0 * (1.0 + j as f32), 2.0 * (2.0 + j as f32)])
            .fold(vec![0.0, 0.0], |a, g| vec![a[0] + g[0], a[1] + g[1]]);
        assert_eq!(x.grad().to_vec(), want);
    }
}

#[test]
fn a_failed_call_leaves_the_callers_gradients_as_they_were() {
    let _l = lock();
    // a read inside is refused after the backward pass ran: the call fails, and the caller's
    // gradient is what it held before (not the failed call's)
    let mut f = kiln::freeze(|w: &mut Float32| -> Float32 {
        (&*w * &*w).sum().backward();
        Float32::from_slice(&w.grad().to_vec())
    });
    let mut w = Float32::from_slice(&[1.0, 2.0]);
    w.enable_grad();
    w.set_grad(&Float32::from_slice(&[5.0, 5.0]));
    assert!(matches!(
        f.call(&mut w),
        Err(kiln::Error::FrozenRead { .. })
    ));
    assert!(w.grad_enabled());
    assert_eq!(w.grad().to_vec(), vec![5.0, 5.0]);
    // a panic inside unwinds to the caller with the same guarantee
    let mut g = kiln::freeze(|w: &mut Float32| -> Float32 {
        (&*w * 3.0).sum().backward();
        panic!("inside");
    });
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| g.call(&mut w)));
    assert!(r.is_err());
    assert_eq!(w.grad().to_vec(), vec![5.0, 5.0]);
}

#[test]
fn enabling_or_disabling_gradients_of_an_argument_inside_reaches_the_caller() {
    let _l = lock();
    // the unfrozen function's effect, recorded and replayed: `enable_grad` on an argument
    // inside leaves the caller's array tracking derivatives, `detach` leaves it not tracking
    let mut on = kiln::freeze(|x: &mut Float32, k: &Float32| {
        x.enable_grad();
        &*x * k
    });
    let mut off = kiln::freeze(|x: &mut Float32, k: &Float32| {
        *x = x.detach();
        &*x * k
    });
    let before = counters();
    for call in 0..3 {
        let k = Float32::from_slice(&[2.0, 3.0]);
        let mut a = Float32::from_slice(&[1.0, 2.0]);
        let y = on.call(&mut a, &k).unwrap();
        assert!(a.grad_enabled(), "call {call}: enable_grad inside");
        assert_eq!(y.to_vec(), vec![2.0, 6.0]);
        // the array tracks derivatives from here on, as after the unfrozen call
        (&a * &k).sum().backward();
        assert_eq!(a.grad().to_vec(), vec![2.0, 3.0], "call {call}");
        let mut b = Float32::from_slice(&[1.0, 2.0]);
        b.enable_grad();
        let y = off.call(&mut b, &k).unwrap();
        assert!(!b.grad_enabled(), "call {call}: detached inside");
        assert_eq!((y.to_vec(), b.to_vec()), (vec![2.0, 6.0], vec![1.0, 2.0]));
    }
    let (s, t) = (on.stats(), off.stats());
    assert_eq!(
        (s.recordings, s.replays, t.recordings, t.replays),
        (1, 2, 1, 2),
        "{s} {t}"
    );
    // and what a backward inside leaves on an argument it enabled reaches the caller's array,
    // recorded and replayed at other sizes, as the unfrozen call leaves it there
    fn f(x: &mut Float64, out: &mut Float64) {
        x.enable_grad();
        (&*x * &*x * 3.0).sum().backward();
        *out = x.grad();
    }
    let mut fr = kiln::freeze(f);
    for n in [3u32, 3, 5, 3] {
        let v: Vec<f64> = (1..=n).map(f64::from).collect();
        let (mut x, mut o) = (Float64::from_slice(&v), Float64::zeros(n as usize));
        fr.call(&mut x, &mut o).unwrap();
        let (mut xu, mut ou) = (Float64::from_slice(&v), Float64::zeros(n as usize));
        f(&mut xu, &mut ou);
        assert_eq!(x.grad().to_vec(), xu.grad().to_vec(), "n = {n}");
        assert_eq!(o.to_vec(), ou.to_vec());
        assert!(x.grad_enabled() && xu.grad_enabled());
    }
    assert_eq!((fr.stats().recordings, fr.stats().replays), (1, 3));
    drop((on, off, fr));
    assert_eq!(counters(), before, "no node or variable left behind");
}
