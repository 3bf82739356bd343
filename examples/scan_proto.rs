use kiln::prelude::*;
fn main() {
    let xs = Tensor::from_vec(vec![1i64, 2, 3, 4], &[4]);
    let mut rep = kiln::ScanReport::default();
    let (c, ys) = kiln::scan::Lax::new(&Tensor::scalar(0i64), &xs)
        .report(&mut rep)
        .run(|a, x| {
            let s = a * 10i64 + x;
            (s.clone(), s)
        })
        .unwrap();
    println!("c={:?} ys={:?}\n{rep}", c.to_vec(), ys.to_vec());
    let r = Scan::<i64>::new()
        .output(&Tensor::scalar(0i64))
        .n_steps(10)
        .keep(0, Keep::Row(-3))
        .run(|s| s.out(0, -1) + 1i64)
        .unwrap();
    println!("{:?} {}", r.output::<i64>(0).to_vec(), r.report());
}
