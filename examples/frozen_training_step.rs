//! A frozen training step: fit `y = a·x + b` to noisy data by gradient descent, with the step
//! (forward pass, loss, gradients, parameter update) recorded once and replayed 2 000 times.
//!
//! ```text
//! cargo run --release --example frozen_training_step
//! ```
//!
//! It prints the loss as training goes, the fitted parameters, what freezing recorded, and the
//! time per step frozen and unfrozen.

use kiln::prelude::*;
use kiln::Traverse;
use std::time::Instant;

/// The model's parameters: updated in place by the step (a `&mut` argument).
#[derive(Traverse, Clone)]
struct Params {
    a: Float32,
    b: Float32,
}

/// The training data and settings: plain scalars are part of the frozen key.
#[derive(Traverse)]
struct Data {
    x: Float32,
    y: Float32,
    learning_rate: f32,
}

/// One gradient-descent step; returns the mean squared error before the update.
fn step(p: &mut Params, d: &Data) -> Float32 {
    let n = Float32::full(1.0, d.x.size()).sum(); // the count, on the device: replays follow it
    let err = &p.a * &d.x + &p.b - &d.y;
    let loss = (&err * &err).sum() / &n;
    let grad_a = (&err * &d.x).sum() * 2.0 / &n;
    let grad_b = err.sum() * 2.0 / &n;
    p.a = &p.a - grad_a * d.learning_rate;
    p.b = &p.b - grad_b * d.learning_rate;
    kiln::eval!(p.a, p.b, loss);
    loss
}

fn main() {
    const N: usize = 4_096;
    const STEPS: usize = 2_000;
    let mut rng = Pcg32::new(N);
    let x = (rng.next_f32() * 4.0 - 2.0).label("x");
    let noise = (rng.next_f32() - 0.5) * 0.2;
    let y = (&x * 3.0 - 1.0 + noise).label("y");
    kiln::eval!(x, y);
    let data = Data {
        x,
        y,
        learning_rate: 0.1,
    };
    let fresh = || Params {
        a: Float32::opaque(0.0),
        b: Float32::opaque(0.0),
    };

    let mut frozen = kiln::freeze(step);
    let mut p = fresh();
    // the first call records the step (tracing it and compiling its kernels): timed apart, as
    // the first unfrozen step below, so that the per-step figures compare steady states
    let t = Instant::now();
    let loss = frozen.call(&mut p, &data).expect("training step");
    let frozen_first = t.elapsed().as_secs_f64();
    println!("step {:>5}: loss {:.6}", 0, loss.item());
    let t = Instant::now();
    for i in 1..STEPS {
        let loss = frozen.call(&mut p, &data).expect("training step");
        if i % 400 == 0 || i == STEPS - 1 {
            println!("step {i:>5}: loss {:.6}", loss.item());
        }
    }
    let frozen_s = t.elapsed().as_secs_f64();
    println!(
        "fitted a = {:.4}, b = {:.4} (data made with a = 3, b = -1)",
        p.a.item(),
        p.b.item()
    );
    println!("freezing: {}", frozen.stats());

    // the same steps unfrozen, for comparison (and as a check: the parameters must agree)
    let mut q = fresh();
    let t = Instant::now();
    step(&mut q, &data);
    let unfrozen_first = t.elapsed().as_secs_f64();
    let t = Instant::now();
    for _ in 1..STEPS {
        step(&mut q, &data);
    }
    let unfrozen_s = t.elapsed().as_secs_f64();
    let same = p.a.item().to_bits() == q.a.item().to_bits()
        && p.b.item().to_bits() == q.b.item().to_bits();
    let per = |s: f64| s / (STEPS - 1) as f64 * 1e6;
    println!(
        "first step: frozen {:.1} ms (records; compiles the kernels), unfrozen {:.1} ms (kernels already cached)",
        frozen_first * 1e3,
        unfrozen_first * 1e3
    );
    println!(
        "{} more steps on {N} points: frozen {:.1} us/step, unfrozen {:.1} us/step ({:.1}x faster frozen); same parameters bit for bit: {same}",
        STEPS - 1,
        per(frozen_s),
        per(unfrozen_s),
        unfrozen_s / frozen_s
    );
    assert!(same, "frozen and unfrozen training diverged");
}
