use kiln::prelude::*;
use std::time::Instant;
fn main() {
    let n = 1_000_000;
    let i = Float32::arange(n);
    let x = (&i * 0.37f32).sin() * 10.0f32;
    let y = (&i * 0.11f32).cos() * 10.0f32;
    kiln::eval!(x, y);
    let cx = Float32::from_slice(
        &(0..8)
            .map(|c| (c as f32 * 2.4).cos() * 10.0)
            .collect::<Vec<_>>(),
    );
    let cy = &cx * 0.5f32;
    cy.eval();
    for variant in [5, 6, 7, 8] {
        let mut ts = vec![];
        for _ in 0..15 {
            let t = Instant::now();
            let s = match variant {
                0 => {
                    // 8 distances summed, literal centroids
                    let mut acc = Float32::zeros(n);
                    for c in 0..8 {
                        let d = &x - (c as f32);
                        acc = acc + &d * &d;
                    }
                    acc.sum()
                }
                1 => {
                    // 8 distances summed, gathered centroids
                    let mut acc = Float32::zeros(n);
                    for c in 0..8 {
                        let d = &x - &gather(&cx, &UInt32::from(c as u32));
                        acc = acc + &d * &d;
                    }
                    acc.sum()
                }
                2 => {
                    // min chain, literal
                    let mut best = Float32::full(f32::INFINITY, n);
                    for c in 0..8 {
                        let d = &x - (c as f32);
                        let d = &d * &d;
                        best = select(&d.lt(&best), &d, &best);
                    }
                    best.sum()
                }
                3 => {
                    // min via .min
                    let mut best = Float32::full(f32::INFINITY, n);
                    for c in 0..8 {
                        let d = &x - (c as f32);
                        let d = &d * &d;
                        best = best.min(&d);
                    }
                    best.sum()
                }
                5 | 6 | 7 => {
                    let mut best = Float32::full(f32::INFINITY, n);
                    let mut label = UInt32::zeros(n);
                    for c in 0..8 {
                        let ii = UInt32::from(c as u32);
                        let (dx, dy) = (&x - &gather(&cx, &ii), &y - &gather(&cy, &ii));
                        let d = &dx * &dx + &dy * &dy;
                        let closer = d.lt(&best);
                        best = select(&closer, &d, &best);
                        if variant != 6 {
                            label = select(&closer, c as u32, &label);
                        }
                    }
                    if variant == 7 {
                        label.cast::<f32>().sum()
                    } else if variant == 6 {
                        best.sum()
                    } else {
                        label.sum().cast::<f32>()
                    }
                }
                _ => {
                    // one distance
                    let d = &x - 1.0f32;
                    (&d * &d).sum()
                }
            };
            s.eval();
            ts.push(t.elapsed().as_secs_f64() * 1e3);
        }
        ts.sort_by(f64::total_cmp);
        println!("variant {variant}: median {:.2} ms", ts[ts.len() / 2]);
    }
}
