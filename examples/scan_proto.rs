use kiln::prelude::*;
use rayon::prelude::*;
use std::time::Instant;
fn best(mut f: impl FnMut()) -> f64 { let mut b = f64::MAX; for _ in 0..7 { let t = Instant::now(); f(); b = b.min(t.elapsed().as_secs_f64()*1e3); } b }
fn main() {
    let (w, n) = (10_000usize, 1000usize);
    let x0 = Tensor::<f32>::full(0.5, &[w]); x0.eval();
    // (a) final only
    let ka = best(|| { let (c, ()) = kiln::scan::Lax::new(&x0, &()).length(n).run(|x, _| (x * 0.999f32 + 0.001f32, ())).unwrap(); c.eval(); kiln::sync().unwrap(); });
    let mut out = vec![0f32; w];
    let ra = best(|| { out.par_chunks_mut(64).for_each(|o| { let mut x = [0.5f32; 64]; for _ in 0..n { for v in x.iter_mut() { *v = *v * 0.999 + 0.001; } } o.copy_from_slice(&x[..o.len()]); }); });
    // (b) all steps stacked
    let kb = best(|| { let (_, ys) = kiln::scan::Lax::new(&x0, &()).length(n).run(|x, _| { let y = x * 0.999f32 + 0.001f32; (y.clone(), y) }).unwrap(); ys.eval(); kiln::sync().unwrap(); });
    let mut buf = vec![0f32; w * n];
    let rb = best(|| { let bp = buf.as_mut_ptr() as usize; (0..w/64 + 1).into_par_iter().for_each(|c| { let lo = c*64; let hi = (lo+64).min(w); let mut x = [0.5f32; 64]; for t in 0..n { let row = unsafe { std::slice::from_raw_parts_mut((bp as *mut f32).add(t*w + lo), hi-lo) }; for i in 0..hi-lo { x[i] = x[i]*0.999+0.001; row[i] = x[i]; } } }); });
    println!("(a) kiln {ka:.3} ms  rayon {ra:.3} ms  ratio {:.2}", ka/ra);
    println!("(b) kiln {kb:.3} ms  rayon {rb:.3} ms  ratio {:.2}", kb/rb);
    let (_, ys) = kiln::scan::Lax::new(&x0, &()).length(n).run(|x, _| { let y = x * 0.999f32 + 0.001f32; (y.clone(), y) }).unwrap();
    let v = ys.to_vec(); println!("check {} {}", v[w], buf[w]);
}
