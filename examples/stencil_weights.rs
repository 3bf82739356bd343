//! Learn the weights a stencil kernel captures, by gradient descent through the stencil.
//!
//! A kernel may read arrays that carry gradients besides its relatively indexed inputs: a
//! weight of one element (every lane reads it) or a field of one element per lane. `backward`
//! gives them their gradients like any other operand, and forward mode their tangents.
//!
//! 1. **System identification:** an unknown 3×3 filter blurred an image; from the image and
//!    the blurred result, recover the filter's nine weights (Adam on the squared error).
//! 2. **A coefficient through many steps:** a plate diffused for 40 explicit steps of
//!    `u ← u + α·∇²u`; from the start and the end, recover the diffusion coefficient α. Its
//!    gradient sums the contributions of all 40 steps; the secant method finds its root (the
//!    gradient is checked once against a central difference in f64).
//!
//! Run: `cargo run --release --example stencil_weights [-- <grid side>]`

use kiln::opt::Adam;
use kiln::prelude::*;
use std::time::Instant;

/// The nine offsets of a 3×3 filter, row by row.
const OFFSETS: [[i64; 2]; 9] = [
    [-1, -1],
    [-1, 0],
    [-1, 1],
    [0, -1],
    [0, 0],
    [0, 1],
    [1, -1],
    [1, 0],
    [1, 1],
];

/// The image filtered by `w` (one weight per offset), mirrored at the edges.
fn filter(img: &Tensor<f32>, w: &[Float32]) -> kiln::Result<Tensor<f32>> {
    let k = kiln::stencil(|a: &Rel<f32>| {
        let mut acc = a.at(OFFSETS[0]) * &w[0];
        for (o, wk) in OFFSETS.iter().zip(w).skip(1) {
            acc += a.at(*o) * wk;
        }
        acc
    })
    .boundary(Boundary::Reflect);
    k.apply(img)
}

/// `steps` explicit diffusion steps with coefficient `alpha`, mirrored at the edges.
fn diffuse<T: kiln::Float>(u0: &Tensor<T>, alpha: &Array<T>, steps: usize) -> Tensor<T> {
    let k = kiln::stencil(|a: &Rel<T>| {
        let lap = a.at([0, 1]) + a.at([0, -1]) + a.at([1, 0]) + a.at([-1, 0])
            - a.at([0, 0]) * T::from_f64(4.0);
        a.at([0, 0]) + lap * alpha
    })
    .boundary(Boundary::Reflect);
    let mut u = u0.clone();
    for _ in 0..steps {
        u = k.apply(&u).expect("a 2-d grid");
    }
    u
}

fn main() -> kiln::Result<()> {
    let n: usize = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(256);
    learn_filter(n)?;
    println!();
    learn_coefficient(n)?;
    Ok(())
}

fn learn_filter(n: usize) -> kiln::Result<()> {
    let truth = [0.05f32, 0.1, 0.05, 0.1, 0.4, 0.1, 0.05, 0.1, 0.05];
    let mut rng = Pcg32::seeded(7, UInt64::arange(n * n));
    let img = Tensor::from_array(rng.next_f32(), &[n, n]);
    let tw: Vec<Float32> = truth.iter().map(|&v| Float32::from_slice(&[v])).collect();
    let blurred = filter(&img, &tw)?;
    blurred.eval();

    let mut w: Vec<Float32> = (0..9).map(|_| Float32::from_slice(&[0.0])).collect();
    let mut opt = Adam::new(0.01);
    let count = (n * n) as f32;
    let iters = 300;
    let (mut first, mut last) = (0.0, 0.0);
    let t = Instant::now();
    for it in 0..iters {
        kiln::ad::enable_grad(&mut w)?;
        let d = &filter(&img, &w)? - &blurred;
        let loss = (d.array() * d.array()).sum() / count;
        loss.backward();
        opt.step(&mut w);
        last = loss.item();
        if it == 0 {
            first = last;
        }
        if it % 75 == 0 {
            println!("filter, iteration {it:3}: mean squared error {last:.3e}");
        }
    }
    let per_step = t.elapsed().as_secs_f64() / iters as f64;
    let learned: Vec<f32> = w.iter().map(|a| a.item()).collect();
    let worst = learned
        .iter()
        .zip(truth)
        .map(|(a, b)| (a - b).abs())
        .fold(0.0f32, f32::max);
    println!("3x3 filter on a {n}x{n} image, {iters} Adam steps: mean squared error {first:.3e} -> {last:.3e}");
    println!("  learned {learned:.3?}");
    println!("  truth   {truth:.3?}  (largest difference {worst:.1e})");
    println!(
        "  cost: {:.2} ms per step (filter, loss, gradient of the nine weights, update)",
        per_step * 1e3
    );
    Ok(())
}

fn learn_coefficient(n: usize) -> kiln::Result<()> {
    let steps = 40;
    let alpha_true = 0.17f32;
    let mut rng = Pcg32::seeded(11, UInt64::arange(n * n));
    let u0 = Tensor::from_array(rng.next_f32(), &[n, n]);
    let t = Instant::now();
    let observed = diffuse(&u0, &Float32::from_slice(&[alpha_true]), steps);
    observed.eval();
    let forward = t.elapsed().as_secs_f64();

    // one coefficient: the secant method on the gradient (a root of d loss / d alpha)
    let count = (n * n) as f32;
    let loss_and_grad = |a: f32| -> (f32, f32) {
        let mut alpha = Float32::from_slice(&[a]);
        alpha.enable_grad();
        let d = &diffuse(&u0, &alpha, steps) - &observed;
        let loss = (d.array() * d.array()).sum() / count;
        loss.backward();
        (loss.item(), alpha.grad().item())
    };
    let t = Instant::now();
    let (mut a0, mut a1) = (0.05f32, 0.1f32);
    let (_, mut g0) = loss_and_grad(a0);
    let mut iters = 1;
    for it in 1..=12 {
        let (l1, g1) = loss_and_grad(a1);
        iters += 1;
        println!("coefficient, iteration {it:2}: alpha {a1:.6}, loss {l1:.3e}, gradient {g1:.3e}");
        if g1 == 0.0 || g1 == g0 || (a1 - a0).abs() < 1e-6 {
            break;
        }
        let next = a1 - g1 * (a1 - a0) / (g1 - g0);
        (a0, g0, a1) = (a1, g1, next);
    }
    let alpha = [Float32::from_slice(&[a1])];
    let per_step = t.elapsed().as_secs_f64() / iters as f64;
    println!(
        "diffusion coefficient through {steps} steps on {n}x{n}: {:.6} learned, {alpha_true} true",
        alpha[0].item()
    );
    println!(
        "  cost: forward {:.2} ms (with compiling), one loss + gradient {:.2} ms",
        forward * 1e3,
        per_step * 1e3
    );

    // the gradient in f64 against a central difference, on a smaller plate
    let m = 48;
    let v0 = Tensor::from_array(
        Pcg32::seeded(3, UInt64::arange(m * m))
            .next_f32()
            .cast::<f64>(),
        &[m, m],
    );
    let loss = |a: f64| {
        let u = diffuse(&v0, &Float64::from_slice(&[a]), steps);
        (u.array() * u.array()).sum()
    };
    let mut a = Float64::from_slice(&[0.1]);
    a.enable_grad();
    let u = diffuse(&v0, &a, steps);
    (u.array() * u.array()).sum().backward();
    let h = 1e-6;
    let fd = (loss(0.1 + h).item() - loss(0.1 - h).item()) / (2.0 * h);
    println!(
        "  check (f64, {m}x{m}): d loss / d alpha = {:.9e} by backward, {fd:.9e} by central difference",
        a.grad().item()
    );
    Ok(())
}
