//! Logistic regression fitted with Adam inside a frozen training step: the forward pass, the
//! loss, the backward pass (`backward()`) and the optimizer's in-place update are recorded once
//! and replayed at every later step.
//!
//! ```text
//! cargo run --release --example logistic_regression
//! ```
//!
//! It prints the loss curve, the accuracy on held-out data, what freezing recorded and the time
//! per step replayed and traced (the same step, unfrozen).

use kiln::opt::Adam;
use kiln::prelude::*;
use kiln::Traverse;
use std::time::Instant;

/// Number of features.
const D: usize = 8;

/// The model: one weight per feature and a bias (updated in place by the step).
#[derive(Traverse, Clone)]
struct Model {
    w: Vec<Float32>,
    b: Float32,
}

/// Samples: one column per feature, labels 0 or 1.
#[derive(Traverse)]
struct Data {
    x: Vec<Float32>,
    y: Float32,
}

/// The logits `x·w + b` of every sample.
fn logits(m: &Model, d: &Data) -> Float32 {
    let mut z = &d.x[0] * &m.w[0] + &m.b;
    for j in 1..D {
        z += &d.x[j] * &m.w[j];
    }
    z
}

/// Mean cross-entropy, in the stable form `max(z, 0) − z·y + log(1 + e^−|z|)`.
fn loss(m: &Model, d: &Data) -> Float32 {
    let z = logits(m, d);
    let n = Float32::full(1.0, d.y.size()).sum(); // the count on the device: replays follow it
    (z.max(0.0f32) - &z * &d.y + ((-z.abs()).exp() + 1.0).log()).sum() / n
}

/// One training step: the loss before the update.
fn step(m: &mut Model, opt: &mut Adam, d: &Data) -> Float32 {
    kiln::ad::enable_grad(m).expect("float parameters");
    let l = loss(m, d);
    l.backward();
    opt.step(m);
    l
}

/// `n` samples labelled by a fixed hyperplane, with 5% of the labels flipped.
fn make_data(n: usize, seed: u64, truth: &[f32]) -> Data {
    let mut rng = Pcg32::seeded(seed, UInt64::arange(n));
    let x: Vec<Float32> = (0..D).map(|_| rng.next_f32() * 2.0 - 1.0).collect();
    let mut z = Float32::full(0.25, n);
    for j in 0..D {
        z += &x[j] * truth[j];
    }
    let flip = rng.next_f32().lt(0.05f32);
    let y = select(&(z.gt(0.0f32) ^ flip), 1.0f32, 0.0f32);
    for a in &x {
        a.eval();
    }
    y.eval();
    Data { x, y }
}

fn accuracy(m: &Model, d: &Data) -> f32 {
    let right = logits(m, d).gt(0.0f32).eq(d.y.gt(0.5f32));
    select(&right, 1.0f32, 0.0f32).sum().item() / d.y.len() as f32
}

fn fresh() -> Model {
    Model {
        w: (0..D).map(|_| Float32::opaque(0.0)).collect(),
        b: Float32::opaque(0.0),
    }
}

fn main() {
    const N: usize = 200_000;
    const STEPS: usize = 600;
    let truth: Vec<f32> = (0..D).map(|j| (j as f32 - 3.5) * 0.6).collect();
    let train = make_data(N, 1, &truth);
    let test = make_data(N / 4, 2, &truth);

    let mut model = fresh();
    let mut opt = Adam::new(0.05).init(&model);
    let mut frozen = kiln::freeze(step);
    let t = Instant::now();
    for i in 0..STEPS {
        let l = frozen
            .call(&mut model, &mut opt, &train)
            .expect("training step");
        if i % 60 == 0 || i == STEPS - 1 {
            println!("step {i:>4}: loss {:.5}", l.item());
        }
    }
    let frozen_s = t.elapsed().as_secs_f64();
    println!(
        "accuracy: {:.2}% on the training set, {:.2}% held out (5% of the labels are flipped)",
        accuracy(&model, &train) * 100.0,
        accuracy(&model, &test) * 100.0
    );
    println!("freezing: {}", frozen.stats());

    // the same steps traced every time, for comparison and as a check
    let mut traced = fresh();
    let mut opt2 = Adam::new(0.05).init(&traced);
    const TRACED: usize = 60;
    let t = Instant::now();
    for _ in 0..TRACED {
        step(&mut traced, &mut opt2, &train).eval();
    }
    let traced_us = t.elapsed().as_secs_f64() / TRACED as f64 * 1e6;
    let s = frozen.stats();
    println!(
        "n = {N}: per step {:.0} µs replayed, {traced_us:.0} µs traced ({:.1}×); the recording call took {:.0} ms; {STEPS} steps {frozen_s:.2} s",
        s.mean_replay_us(),
        traced_us / s.mean_replay_us(),
        s.record_ns as f64 / 1e6
    );
    // replays and traced calls compute the same thing, bit for bit
    let mut again = fresh();
    let mut opt3 = Adam::new(0.05).init(&again);
    let mut check = kiln::freeze(step);
    for _ in 0..TRACED {
        check
            .call(&mut again, &mut opt3, &train)
            .expect("training step");
    }
    let same = again
        .w
        .iter()
        .chain([&again.b])
        .zip(traced.w.iter().chain([&traced.b]))
        .all(|(a, b)| a.item().to_bits() == b.item().to_bits());
    println!("after {TRACED} steps, frozen and traced parameters are bit-identical: {same}");

    // at a small size the step is all overhead: what replay saves is tracing, AD bookkeeping,
    // kernel lookup and launch decisions
    let small = make_data(1024, 3, &truth);
    let (mut a, mut b) = (fresh(), fresh());
    let (mut oa, mut ob) = (Adam::new(0.05).init(&a), Adam::new(0.05).init(&b));
    let mut f = kiln::freeze(step);
    f.call(&mut a, &mut oa, &small).expect("training step");
    const SMALL: usize = 300;
    let t = Instant::now();
    for _ in 0..SMALL {
        f.call(&mut a, &mut oa, &small).expect("training step");
    }
    let replay_us = t.elapsed().as_secs_f64() / SMALL as f64 * 1e6;
    step(&mut b, &mut ob, &small).eval();
    let t = Instant::now();
    for _ in 0..SMALL {
        step(&mut b, &mut ob, &small).eval();
    }
    let traced_us = t.elapsed().as_secs_f64() / SMALL as f64 * 1e6;
    println!(
        "n = 1024: per step {replay_us:.0} µs replayed, {traced_us:.0} µs traced ({:.1}× faster replayed)",
        traced_us / replay_us
    );
    let s = kiln::stats();
    println!(
        "AD graph now: {} nodes, {} edges, {} gradient bytes",
        s.ad_nodes, s.ad_edges, s.ad_grad_bytes
    );
}
