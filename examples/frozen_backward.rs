//! The function-freezing document's pattern: `loss.backward()` inside a frozen step, the
//! optimizer outside it. A small logistic model is fitted with Adam; the frozen step computes
//! the loss and its gradients, which reach the parameters' `grad()` after every call (recorded
//! or replayed), and the optimizer steps them outside.
//!
//! ```text
//! cargo run --release --example frozen_backward
//! ```
//!
//! It prints the loss as training goes, the fitted weights, what freezing recorded, the kernels
//! one replay launched (the kernel history), and the time per step frozen and unfrozen.

use kiln::opt::Adam;
use kiln::prelude::*;
use kiln::Traverse;
use std::time::Instant;

#[derive(Traverse, Clone)]
struct Params {
    w: Float32,
    b: Float32,
}

#[derive(Traverse)]
struct Data {
    x: Float32,
    label: Float32,
}

/// Mean logistic loss, its gradients left on the parameters by `backward()`.
fn loss_and_grads(p: &mut Params, d: &Data) -> Float32 {
    let z = &p.w * &d.x + &p.b;
    let n = Float32::full(1.0, d.x.size()).sum();
    let l = z.max(0.0f32) - &z * &d.label + ((-z.abs()).exp() + 1.0).log();
    let loss = l.sum() / n;
    loss.backward();
    loss
}

fn main() {
    const N: usize = 100_000;
    const STEPS: usize = 300;
    let mut rng = Pcg32::new(N);
    let x = rng.next_f32() * 6.0 - 3.0;
    // labels from a true model w = 2, b = -0.5, with noise
    let p_true = ((&x * -2.0 + 0.5).exp() + 1.0).rcp();
    let label = select(&rng.next_f32().lt(&p_true), 1.0f32, 0.0f32);
    kiln::eval!(x, label);
    let data = Data { x, label };
    let fresh = || {
        let mut p = Params {
            w: Float32::opaque(0.0),
            b: Float32::opaque(0.0),
        };
        kiln::ad::enable_grad(&mut p).unwrap();
        p
    };

    let mut frozen = kiln::freeze(loss_and_grads);
    let mut p = fresh();
    let mut opt = Adam::new(0.05).init(&p);
    let t = Instant::now();
    for i in 0..STEPS {
        let loss = frozen.call(&mut p, &data).expect("frozen step");
        if i == STEPS - 1 {
            // one replay's launches, as the kernel history lists them
            kiln::set_kernel_history(true);
            frozen.call(&mut p, &data).expect("frozen step");
            for k in kiln::kernel_history() {
                println!(
                    "  replay launched: {:?} {} over {} lanes, {} in / {} out, {} ops, {:.1} us",
                    k.kind, k.what, k.size, k.inputs, k.outputs, k.ops, k.time_us
                );
            }
            kiln::set_kernel_history(false);
            p.w.clear_grad();
            p.b.clear_grad();
            frozen.call(&mut p, &data).expect("frozen step");
        }
        if i % 60 == 0 || i == STEPS - 1 {
            println!(
                "step {i:>4}: loss {:.5}, dloss/dw {:+.5}",
                loss.item(),
                p.w.grad().item()
            );
        }
        opt.step(&mut p); // outside the frozen function: reads and consumes the gradients
    }
    let frozen_s = t.elapsed().as_secs_f64();
    println!(
        "fitted w = {:.3}, b = {:.3} (labels drawn with w = 2, b = -0.5)",
        p.w.item(),
        p.b.item()
    );
    println!("freezing: {}", frozen.stats());

    // the same training unfrozen: the same parameters bit for bit
    let mut q = fresh();
    let mut oq = Adam::new(0.05).init(&q);
    let t = Instant::now();
    for i in 0..STEPS {
        loss_and_grads(&mut q, &data);
        if i == STEPS - 1 {
            for _ in 0..2 {
                q.w.clear_grad();
                q.b.clear_grad();
                loss_and_grads(&mut q, &data);
            }
        }
        oq.step(&mut q);
    }
    let unfrozen_s = t.elapsed().as_secs_f64();
    let same = p.w.item().to_bits() == q.w.item().to_bits()
        && p.b.item().to_bits() == q.b.item().to_bits();
    println!(
        "{STEPS} steps on {N} points: frozen {:.0} us/step, unfrozen {:.0} us/step; same parameters bit for bit: {same}",
        frozen_s / STEPS as f64 * 1e6,
        unfrozen_s / STEPS as f64 * 1e6
    );
    assert!(same, "frozen and unfrozen training diverged");
}
