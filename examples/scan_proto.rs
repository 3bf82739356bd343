use kiln::prelude::*;
use rayon::prelude::*;
use std::time::Instant;
fn best(mut f: impl FnMut()) -> f64 {
    let mut b = f64::MAX;
    for _ in 0..7 {
        let t = Instant::now();
        f();
        b = b.min(t.elapsed().as_secs_f64() * 1e3);
    }
    b
}
fn main() {
    let (w, n) = (10_000usize, 1000usize);
    let x0 = Tensor::<f32>::full(0.5, &[w]);
    x0.eval();
    // (a) final only
    let ka = best(|| {
        let (c, ()) = kiln::scan::Lax::new(&x0, &())
            .length(n)
            .run(|x, _| (x * 0.999f32 + 0.001f32, ()))
            .unwrap();
        c.eval();
        kiln::sync().unwrap();
    });
    let mut out = vec![0f32; w];
    let ra = best(|| {
        out.par_chunks_mut(64).for_each(|o| {
            let mut x = [0.5f32; 64];
            for _ in 0..n {
                for v in x.iter_mut() {
                    *v = *v * 0.999 + 0.001;
                }
            }
            o.copy_from_slice(&x[..o.len()]);
        });
    });
    // (b) all steps stacked
    let kb = best(|| {
        let (_, ys) = kiln::scan::Lax::new(&x0, &())
            .length(n)
            .run(|x, _| {
                let y = x * 0.999f32 + 0.001f32;
                (y.clone(), y)
            })
            .unwrap();
        ys.eval();
        kiln::sync().unwrap();
    });
    let mut buf = vec![0f32; w * n];
    let rb = best(|| {
        let bp = buf.as_mut_ptr() as usize;
        (0..w / 64 + 1).into_par_iter().for_each(|c| {
            let lo = c * 64;
            let hi = (lo + 64).min(w);
            let mut x = [0.5f32; 64];
            for t in 0..n {
                let row = unsafe {
                    std::slice::from_raw_parts_mut((bp as *mut f32).add(t * w + lo), hi - lo)
                };
                for i in 0..hi - lo {
                    x[i] = x[i] * 0.999 + 0.001;
                    row[i] = x[i];
                }
            }
        });
    });
    println!(
        "(a) kiln {ka:.3} ms  rayon {ra:.3} ms  ratio {:.2}",
        ka / ra
    );
    println!(
        "(b) kiln {kb:.3} ms  rayon {rb:.3} ms  ratio {:.2}",
        kb / rb
    );
    let (_, ys) = kiln::scan::Lax::new(&x0, &())
        .length(n)
        .run(|x, _| {
            let y = x * 0.999f32 + 0.001f32;
            (y.clone(), y)
        })
        .unwrap();
    let v = ys.to_vec();
    println!("check {} {}", v[w], buf[w]);
    post();
}
pub fn post() {
    let (t, b, h) = (50usize, 8usize, 16usize);
    let mk = |n: usize, s: f32| -> Vec<f32> {
        (0..n)
            .map(|i| ((i * 2654435761usize % 1000) as f32 / 1000.0 - 0.5) * s)
            .collect()
    };
    let w = Tensor::from_vec(mk(h * h, 0.3), &[h, h]);
    let v = Tensor::from_vec(mk(h * 3, 0.3), &[h, 3]);
    let xs = Tensor::from_vec(mk(t * b * h, 1.0), &[t, b, h]);
    let h0 = Tensor::<f32>::zeros(&[b, h]);
    let mut outs = vec![];
    for rw in [true, false] {
        let r = Scan::<f32>::new()
            .sequence(&xs)
            .output(&h0)
            .output_none()
            .rewrites(rw)
            .run(|s| {
                let hn = (s.out(0, -1).matmul(&w) + s.seq(0, 0)).tanh();
                let y = hn.matmul(&v);
                (hn, y)
            })
            .unwrap();
        println!("{}", r.report());
        outs.push(r.output::<f32>(1).to_vec());
    }
    let d = outs[0]
        .iter()
        .zip(&outs[1])
        .map(|(a, b)| (a - b).abs())
        .fold(0f32, f32::max);
    println!("post maxdiff {d} len {}", outs[0].len());
    // in place
    let r = Scan::<f32>::new()
        .output_owned(Tensor::zeros(&[1000]))
        .keep(0, Keep::Last(1))
        .n_steps(3)
        .run(|s| s.out(0, -1) + 1.0)
        .unwrap();
    println!(
        "in place {:?} {:?}",
        r.report().in_place,
        &r.output::<f32>(0).to_vec()[..3]
    );
}
pub fn rnn() {
    let (t, b, h) = (200usize, 64usize, 256usize);
    let mut rng = kiln::Pcg32::new(7);
    let _ = &mut rng;
    let mk = |n: usize, s: f32| -> Vec<f32> {
        (0..n)
            .map(|i| ((i * 2654435761usize % 1000) as f32 / 1000.0 - 0.5) * s)
            .collect()
    };
    let w = Tensor::from_vec(mk(h * h, 0.1), &[h, h]);
    w.eval();
    let u = Tensor::from_vec(mk(h * h, 0.1), &[h, h]);
    u.eval();
    let bias = Tensor::from_vec(mk(h, 0.1), &[h]);
    bias.eval();
    let xs = Tensor::from_vec(mk(t * b * h, 1.0), &[t, b, h]);
    xs.eval();
    let h0 = Tensor::<f32>::zeros(&[b, h]);
    h0.eval();
    let wt = w.transpose();
    let ut = u.transpose();
    for rewrites in [true, false] {
        let mut rep = kiln::ScanReport::default();
        let mut last = vec![];
        let ms = best(|| {
            let r = Scan::<f32>::new()
                .sequence(&xs)
                .output(&h0)
                .rewrites(rewrites)
                .run(|s| (s.out(0, -1).matmul(&wt) + s.seq(0, 0).matmul(&ut) + &bias).tanh())
                .unwrap();
            let y = r.output::<f32>(0);
            y.eval();
            kiln::sync().unwrap();
            rep = r.report().clone();
            last = y.index_axis(0, t - 1).to_vec();
        });
        println!(
            "rnn rewrites={rewrites}: {ms:.2} ms  per step {:.1} us  {}",
            ms * 1e3 / t as f64,
            rep
        );
        println!("  h[-1][0..3] = {:?}", &last[..3]);
    }
    // reference: a plain loop of kiln ops
    let ms = best(|| {
        let mut hh = h0.clone();
        let mut outs = Vec::new();
        for i in 0..t {
            hh = (hh.matmul(&wt) + xs.index_axis(0, i).matmul(&ut) + &bias).tanh();
            hh.eval();
            outs.push(hh.clone());
        }
        kiln::sync().unwrap();
    });
    println!("rnn plain kiln loop: {ms:.2} ms");
    let a = Tensor::<f32>::full(1.0, &[64, 256]);
    a.eval();
    let mm = best(|| {
        for _ in 0..10 {
            let c = a.matmul(&w);
            c.eval();
        }
        kiln::sync().unwrap();
    }) / 10.0;
    println!(
        "one matmul [64,256]x[256,256]: {mm:.3} ms ({:.1} GFLOP/s)",
        2.0 * 64.0 * 256.0 * 256.0 / mm / 1e6
    );
}
