//! `Pcg32` against a scalar transcription of the reference C pcg32, and `Vector` geometry against
//! hand-computed values.

use kiln::prelude::*;
use kiln::random::{PCG32_DEFAULT_STATE, PCG32_MULT};

/// The reference `pcg32_random_t` and its functions (pcg-c-basic), in plain scalar Rust.
#[derive(Clone, Copy, Debug)]
struct RefPcg32 {
    state: u64,
    inc: u64,
}

impl RefPcg32 {
    /// `pcg32_srandom_r`
    fn srandom(initstate: u64, initseq: u64) -> Self {
        let mut rng = RefPcg32 {
            state: 0,
            inc: (initseq << 1) | 1,
        };
        rng.random();
        rng.state = rng.state.wrapping_add(initstate);
        rng.random();
        rng
    }
    /// `pcg32_random_r`
    fn random(&mut self) -> u32 {
        let old = self.state;
        self.state = old.wrapping_mul(6364136223846793005).wrapping_add(self.inc);
        let xorshifted = (((old >> 18) ^ old) >> 27) as u32;
        let rot = (old >> 59) as u32;
        (xorshifted >> rot) | (xorshifted << ((rot.wrapping_neg()) & 31))
    }
    /// `pcg32_boundedrand_r`
    fn boundedrand(&mut self, bound: u32) -> u32 {
        let threshold = bound.wrapping_neg() % bound;
        loop {
            let r = self.random();
            if r >= threshold {
                return r % bound;
            }
        }
    }
    /// `pcg32_advance_r`
    fn advance(&mut self, mut delta: u64) {
        let (mut cur_mult, mut cur_plus) = (6364136223846793005u64, self.inc);
        let (mut acc_mult, mut acc_plus) = (1u64, 0u64);
        while delta > 0 {
            if delta & 1 == 1 {
                acc_mult = acc_mult.wrapping_mul(cur_mult);
                acc_plus = acc_plus.wrapping_mul(cur_mult).wrapping_add(cur_plus);
            }
            cur_plus = cur_mult.wrapping_add(1).wrapping_mul(cur_plus);
            cur_mult = cur_mult.wrapping_mul(cur_mult);
            delta /= 2;
        }
        self.state = acc_mult.wrapping_mul(self.state).wrapping_add(acc_plus);
    }
}

/// A small deterministic scalar generator for test inputs (splitmix64).
fn splitmix(x: &mut u64) -> u64 {
    *x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *x;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Seeds with edge cases (0, all ones, top bit) followed by pseudo-random ones.
fn seeds(n: usize, salt: u64) -> Vec<u64> {
    let mut s = salt;
    let mut v = vec![0, 1, u64::MAX, 1 << 63, 54, PCG32_DEFAULT_STATE];
    while v.len() < n {
        v.push(splitmix(&mut s));
    }
    v.truncate(n);
    v
}

#[test]
fn pcg32_demo_values() {
    // pcg32-demo: pcg32_srandom_r(&rng, 42u, 54u), first six pcg32_random_r values
    let expected = [
        0xa15c02b7u32,
        0x7b47f409,
        0xba1d3330,
        0x83d2f293,
        0xbfa4784b,
        0xcbed606e,
    ];
    let mut rng = Pcg32::seeded(42, 54u64);
    let got: Vec<u32> = (0..6).map(|_| rng.next_u32().item()).collect();
    assert_eq!(got, expected);

    // the same through the scalar reference, and many lanes with the same seed
    let mut r = RefPcg32::srandom(42, 54);
    assert_eq!((0..6).map(|_| r.random()).collect::<Vec<_>>(), expected);
    let mut rng = Pcg32::seeded(42, UInt64::full(54, 5));
    for e in expected {
        assert_eq!(rng.next_u32().to_vec(), vec![e; 5]);
    }
}

#[test]
fn pcg32_matches_reference_many_seeds_and_draws() {
    let n = 257;
    let states = seeds(n, 1);
    let seqs = seeds(n, 2);
    let mut rng = Pcg32::seeded(UInt64::from_slice(&states), UInt64::from_slice(&seqs));
    let mut refs: Vec<RefPcg32> = states
        .iter()
        .zip(&seqs)
        .map(|(&s, &q)| RefPcg32::srandom(s, q))
        .collect();
    assert_eq!(
        rng.state().to_vec(),
        refs.iter().map(|r| r.state).collect::<Vec<_>>()
    );
    assert_eq!(
        rng.inc().to_vec(),
        refs.iter().map(|r| r.inc).collect::<Vec<_>>()
    );
    // 64 draws, evaluated 16 at a time (one kernel per batch)
    for _batch in 0..4 {
        let draws: Vec<UInt32> = (0..16).map(|_| rng.next_u32()).collect();
        let ids: Vec<_> = draws
            .iter()
            .map(|d| d.id())
            .chain([rng.state().id()])
            .collect();
        kiln::eval_ids(&ids).unwrap();
        for d in &draws {
            let want: Vec<u32> = refs.iter_mut().map(RefPcg32::random).collect();
            assert_eq!(d.to_vec(), want);
        }
    }
    assert_eq!(
        rng.state().to_vec(),
        refs.iter().map(|r| r.state).collect::<Vec<_>>()
    );
}

#[test]
fn pcg32_scalar_seed_broadcasts_over_streams() {
    for (i, &initstate) in seeds(8, 3).iter().enumerate() {
        let seqs = seeds(16, 100 + i as u64);
        let mut rng = Pcg32::seeded(initstate, UInt64::from_slice(&seqs));
        let mut refs: Vec<_> = seqs
            .iter()
            .map(|&q| RefPcg32::srandom(initstate, q))
            .collect();
        for _ in 0..5 {
            let want: Vec<u32> = refs.iter_mut().map(RefPcg32::random).collect();
            assert_eq!(rng.next_u32().to_vec(), want);
        }
    }
    // a per-lane state with one stream broadcasts the other way
    let states = seeds(10, 9);
    let mut rng = Pcg32::seeded(UInt64::from_slice(&states), 7u64);
    assert_eq!(rng.len(), 10);
    let want: Vec<u32> = states
        .iter()
        .map(|&s| RefPcg32::srandom(s, 7).random())
        .collect();
    assert_eq!(rng.next_u32().to_vec(), want);
}

#[test]
fn pcg32_new_is_default_state_with_lane_streams() {
    let n = 100;
    let mut a = Pcg32::new(n);
    let mut b = Pcg32::seeded(PCG32_DEFAULT_STATE, UInt64::arange(n));
    assert_eq!(a.len(), n);
    assert_eq!(a.state().to_vec(), b.state().to_vec());
    assert_eq!(a.inc().to_vec(), b.inc().to_vec());
    for _ in 0..3 {
        assert_eq!(a.next_u32().to_vec(), b.next_u32().to_vec());
    }
    // and lane i is the reference seeded with stream i
    let mut c = Pcg32::new(n);
    let want: Vec<u32> = (0..n as u64)
        .map(|i| RefPcg32::srandom(PCG32_DEFAULT_STATE, i).random())
        .collect();
    assert_eq!(c.next_u32().to_vec(), want);
    assert!(Pcg32::new(0).is_empty());
}

#[test]
fn pcg32_next_u64_is_high_then_low() {
    let n = 33;
    let (states, seqs) = (seeds(n, 4), seeds(n, 5));
    let mut rng = Pcg32::seeded(UInt64::from_slice(&states), UInt64::from_slice(&seqs));
    let mut refs: Vec<_> = states
        .iter()
        .zip(&seqs)
        .map(|(&s, &q)| RefPcg32::srandom(s, q))
        .collect();
    for _ in 0..4 {
        let want: Vec<u64> = refs
            .iter_mut()
            .map(|r| {
                let hi = r.random() as u64;
                (hi << 32) | r.random() as u64
            })
            .collect();
        assert_eq!(rng.next_u64().to_vec(), want);
    }
}

#[test]
fn pcg32_bounded_matches_reference() {
    let n = 200;
    let bounds = [
        1u32,
        2,
        3,
        6,
        7,
        10,
        100,
        1000,
        1 << 20,
        (1 << 20) + 1,
        1_000_000_007,
        0x8000_0001, // worst case: rejects almost half the draws
        0xffff_fff0,
        u32::MAX,
    ];
    let (states, seqs) = (seeds(n, 6), seeds(n, 7));
    for &bound in &bounds {
        let mut rng = Pcg32::seeded(UInt64::from_slice(&states), UInt64::from_slice(&seqs));
        let mut refs: Vec<_> = states
            .iter()
            .zip(&seqs)
            .map(|(&s, &q)| RefPcg32::srandom(s, q))
            .collect();
        for draw in 0..4 {
            let got = rng.next_u32_bounded(bound).to_vec();
            let want: Vec<u32> = refs.iter_mut().map(|r| r.boundedrand(bound)).collect();
            assert_eq!(got, want, "bound {bound}, draw {draw}");
            assert!(got.iter().all(|&v| v < bound));
        }
        // rejected lanes advanced exactly as often as the reference
        assert_eq!(
            rng.state().to_vec(),
            refs.iter().map(|r| r.state).collect::<Vec<_>>(),
            "bound {bound}"
        );
    }
}

#[test]
fn pcg32_bounded_is_roughly_uniform() {
    let n = 60_000;
    let mut rng = Pcg32::new(n);
    let d = rng.next_u32_bounded(6).to_vec();
    let mut hist = [0usize; 6];
    for v in d {
        hist[v as usize] += 1;
    }
    for h in hist {
        assert!((h as f64 - 10_000.0).abs() < 500.0, "{hist:?}");
    }
}

#[test]
#[should_panic(expected = "bound must be positive")]
fn pcg32_bounded_zero_panics() {
    Pcg32::new(4).next_u32_bounded(0);
}

#[test]
fn pcg32_floats_in_unit_interval() {
    let n = 100_000;
    let mut rng = Pcg32::new(n);
    let f = rng.next_f32();
    let d = rng.next_f64();
    kiln::eval!(f, d);
    let fv = f.to_vec();
    let dv = d.to_vec();
    assert!(fv.iter().all(|&x| (0.0..1.0).contains(&x)));
    assert!(dv.iter().all(|&x| (0.0..1.0).contains(&x)));
    let mean_f = fv.iter().map(|&x| x as f64).sum::<f64>() / n as f64;
    let mean_d = dv.iter().sum::<f64>() / n as f64;
    // standard error of the mean is 1/sqrt(12 n) ≈ 0.0009
    assert!((mean_f - 0.5).abs() < 0.005, "{mean_f}");
    assert!((mean_d - 0.5).abs() < 0.005, "{mean_d}");
    let var_f = fv.iter().map(|&x| (x as f64 - mean_f).powi(2)).sum::<f64>() / n as f64;
    assert!((var_f - 1.0 / 12.0).abs() < 0.002, "{var_f}");
    // reduction on the device agrees
    assert!((f.sum().item() as f64 / n as f64 - mean_f).abs() < 1e-3);
}

#[test]
fn pcg32_floats_from_reference_bits() {
    let mut rng = Pcg32::seeded(42, 54u64);
    let mut r = RefPcg32::srandom(42, 54);
    for _ in 0..8 {
        let want = f32::from_bits((r.random() >> 9) | 0x3f80_0000) - 1.0;
        assert_eq!(rng.next_f32().item(), want);
    }
    for _ in 0..8 {
        let hi = r.random() as u64;
        let x = (hi << 32) | r.random() as u64;
        let want = f64::from_bits((x >> 12) | 0x3ff0_0000_0000_0000) - 1.0;
        assert_eq!(rng.next_f64().item(), want);
    }
}

#[test]
fn pcg32_masked_draws_advance_only_masked_lanes() {
    let n = 10;
    let mut rng = Pcg32::new(n);
    let mut refs: Vec<_> = (0..n as u64)
        .map(|i| RefPcg32::srandom(PCG32_DEFAULT_STATE, i))
        .collect();
    let mask = UInt32::arange(n).lt(4);
    let got = rng.next_u32_masked(&mask).to_vec();
    for (i, r) in refs.iter_mut().enumerate() {
        let peek = r.clone().random();
        assert_eq!(got[i], peek);
        if i < 4 {
            r.random();
        }
    }
    assert_eq!(
        rng.state().to_vec(),
        refs.iter().map(|r| r.state).collect::<Vec<_>>()
    );
}

#[test]
fn pcg32_advance_matches_reference() {
    let n = 16;
    let (states, seqs) = (seeds(n, 10), seeds(n, 11));
    for delta in [
        0u64,
        1,
        2,
        5,
        1000,
        123_456_789,
        u64::MAX,
        1u64.wrapping_neg() - 9,
    ] {
        let mut rng = Pcg32::seeded(UInt64::from_slice(&states), UInt64::from_slice(&seqs));
        let mut refs: Vec<_> = states
            .iter()
            .zip(&seqs)
            .map(|(&s, &q)| RefPcg32::srandom(s, q))
            .collect();
        rng.advance(delta);
        refs.iter_mut().for_each(|r| r.advance(delta));
        let want: Vec<u32> = refs.iter_mut().map(RefPcg32::random).collect();
        assert_eq!(rng.next_u32().to_vec(), want, "delta {delta}");
    }
    // stepping back undoes stepping forward
    let mut rng = Pcg32::new(8);
    let start = rng.state().to_vec();
    for _ in 0..7 {
        rng.next_u32();
    }
    rng.advance(7u64.wrapping_neg());
    assert_eq!(rng.state().to_vec(), start);
    assert_eq!(PCG32_MULT, 6364136223846793005);
}

#[test]
fn pcg32_tracing_is_lazy_and_fuses() {
    let before = kiln::stats();
    let mut rng = Pcg32::new(1000);
    let v = Vector3f::new(
        rng.next_f32() * 2.0 - 1.0,
        rng.next_f32() * 2.0 - 1.0,
        rng.next_f32() * 2.0 - 1.0,
    );
    let inside = v.squared_norm().lt(1.0);
    // nothing ran while tracing (other tests may launch concurrently, so compare our own arrays)
    assert!(!inside.is_evaluated() && !rng.state().is_evaluated());
    drop((v, rng));
    let count = inside.count();
    assert!(count > 400 && count < 650, "{count}");
    assert!(kiln::stats().launches > before.launches);
}

// ---------------------------------------------------------------------------------------------
// Vector

fn v3(x: f32, y: f32, z: f32) -> Vector3f {
    Vector3f::new(x, y, z)
}

fn items(v: &Vector3f) -> [f32; 3] {
    [v.x().item(), v.y().item(), v.z().item()]
}

#[test]
fn vector_cross_dot_norm_normalize() {
    let a = v3(1.0, 2.0, 3.0);
    let b = v3(4.0, 5.0, 6.0);
    // (2*6 - 3*5, 3*4 - 1*6, 1*5 - 2*4)
    assert_eq!(items(&a.cross(&b)), [-3.0, 6.0, -3.0]);
    assert_eq!(items(&b.cross(&a)), [3.0, -6.0, 3.0]);
    assert_eq!(a.dot(&b).item(), 32.0);
    assert_eq!(a.squared_norm().item(), 14.0);
    assert_eq!(v3(2.0, 3.0, 6.0).norm().item(), 7.0);
    let n = v3(2.0, 3.0, 6.0).normalize();
    let want = [2.0 / 7.0, 3.0 / 7.0, 6.0 / 7.0];
    for (g, w) in items(&n).iter().zip(want) {
        assert!((g - w).abs() < 1e-7, "{g} vs {w}");
    }
    // the cross product is orthogonal to both operands
    let c = a.cross(&b);
    assert_eq!(c.dot(&a).item(), 0.0);
    assert_eq!(c.dot(&b).item(), 0.0);
    // unit axes
    let (x, y, z) = (v3(1.0, 0.0, 0.0), v3(0.0, 1.0, 0.0), v3(0.0, 0.0, 1.0));
    assert_eq!(items(&x.cross(&y)), items(&z));
    assert_eq!(items(&y.cross(&z)), items(&x));
    assert_eq!(items(&z.cross(&x)), items(&y));
}

#[test]
fn vector_lanewise_over_arrays() {
    let n = 5;
    let t = Float32::arange(n);
    let v = Vector3f::new(t.clone(), &t * 2.0, Float32::full(2.0, n));
    // |(t, 2t, 2)|^2 = 5 t^2 + 4
    let want: Vec<f32> = (0..n).map(|i| 5.0 * (i * i) as f32 + 4.0).collect();
    assert_eq!(v.squared_norm().to_vec(), want);
    let lens = v.normalize().norm().to_vec();
    assert!(lens.iter().all(|l| (l - 1.0).abs() < 1e-6), "{lens:?}");
    assert_eq!(v.lanes(), n);

    // Float64 and Int32 flavours
    let d = Vector3d::new(Float64::from(3.0), Float64::from(4.0), Float64::from(12.0));
    assert_eq!(d.norm().item(), 13.0);
    let i = Vector3i::new(Int32::arange(3), Int32::from(1), Int32::from(-2));
    assert_eq!(i.squared_norm().to_vec(), vec![5, 6, 9]);
    // size-1 components (folded literals) broadcast: compare lane by lane
    let lanes = |a: &Int32| -> Vec<i32> {
        let v = a.to_vec();
        if v.len() == 1 {
            vec![v[0]; 3]
        } else {
            v
        }
    };
    // (x, 1, -2) × (1, 0, 0) = (0, -2, -1)
    let c = i.cross(&Vector3i::new(1, 0, 0));
    assert_eq!(lanes(c.x()), vec![0, 0, 0]);
    assert_eq!(lanes(c.y()), vec![-2, -2, -2]);
    assert_eq!(lanes(c.z()), vec![-1, -1, -1]);
    // (x, 1, -2) × (0, 0, 1) = (1, -x, 0)
    let c = i.cross(&Vector3i::new(0, 0, 1));
    assert_eq!(lanes(c.x()), vec![1, 1, 1]);
    assert_eq!(lanes(c.y()), vec![0, -1, -2]);
    assert_eq!(lanes(c.z()), vec![0, 0, 0]);
}

#[test]
fn vector_operators() {
    let a = v3(1.0, 2.0, 3.0);
    let b = v3(4.0, 5.0, 6.0);
    assert_eq!(items(&(&a + &b)), [5.0, 7.0, 9.0]);
    assert_eq!(items(&(&b - &a)), [3.0, 3.0, 3.0]);
    assert_eq!(items(&(&a * &b)), [4.0, 10.0, 18.0]);
    assert_eq!(items(&(&b / &a)), [4.0, 2.5, 2.0]);
    assert_eq!(items(&(a.clone() + b.clone())), [5.0, 7.0, 9.0]);
    assert_eq!(items(&(-&a)), [-1.0, -2.0, -3.0]);
    assert_eq!(items(&(-a.clone())), [-1.0, -2.0, -3.0]);
    // plain scalars on either side
    assert_eq!(items(&(&a * 2.0)), [2.0, 4.0, 6.0]);
    assert_eq!(items(&(2.0 * &a)), [2.0, 4.0, 6.0]);
    assert_eq!(items(&(&a + 1.0)), [2.0, 3.0, 4.0]);
    assert_eq!(items(&(1.0 - &a)), [0.0, -1.0, -2.0]);
    assert_eq!(items(&(6.0 / a.clone())), [6.0, 3.0, 2.0]);
    assert_eq!(items(&(a.clone() / 2.0)), [0.5, 1.0, 1.5]);
    // per-lane scalar arrays on either side
    let s = Float32::from(3.0);
    assert_eq!(items(&(&a * &s)), [3.0, 6.0, 9.0]);
    assert_eq!(items(&(&s * &a)), [3.0, 6.0, 9.0]);
    assert_eq!(items(&(&s - &a)), [2.0, 1.0, 0.0]);
    assert_eq!(items(&(a.clone() * s.clone())), [3.0, 6.0, 9.0]);
    // compound assignment
    let mut c = a.clone();
    c += &b;
    c -= v3(1.0, 1.0, 1.0);
    c *= 2.0;
    c /= &s;
    assert_eq!(items(&c), [8.0 / 3.0, 4.0, 16.0 / 3.0]);
    // indexing and accessors
    let mut d = a.clone();
    d[0] = Float32::from(9.0);
    *d.z_mut() += 1.0;
    assert_eq!(items(&d), [9.0, 2.0, 4.0]);
    assert_eq!(d[1].item(), 2.0);
    assert_eq!(d.len(), 3);
    // map, select, cast, min/max, hsum, abs
    assert_eq!(items(&a.clone().map(|c| c * 10.0)), [10.0, 20.0, 30.0]);
    let m = Vector::select(&Bool::from(true), &a, &b);
    assert_eq!(items(&m), [1.0, 2.0, 3.0]);
    assert_eq!(items(&a.min(&v3(2.0, 2.0, 2.0))), [1.0, 2.0, 2.0]);
    assert_eq!(items(&a.max(&v3(2.0, 2.0, 2.0))), [2.0, 2.0, 3.0]);
    assert_eq!(a.hsum().item(), 6.0);
    assert_eq!(items(&(-&a).abs()), [1.0, 2.0, 3.0]);
    let i = a.cast::<i32>();
    assert_eq!(i.z().item(), 3);
    // Debug shows the components
    let s = format!("{:?}", Vector2i::new(1, 2));
    assert!(s.contains("[1]") && s.contains("[2]"), "{s}");
}

#[test]
fn vector_2_and_4() {
    let v = Vector2f::new(3.0, 4.0);
    assert_eq!(v.norm().item(), 5.0);
    let n = v.normalize();
    assert_eq!((n.x().item(), n.y().item()), (0.6, 0.8));
    let w = Vector4d::new(1.0, 2.0, 3.0, 4.0);
    assert_eq!(w.dot(&w).item(), 30.0);
    assert_eq!(w.w().item(), 4.0);
    let i = Vector4i::from_fn(|k| Int32::from(k as i32 + 1));
    assert_eq!((&i * &i).hsum().item(), 30);
    let q = Vector2i::new(Int32::from(7), Int32::from(-3));
    assert_eq!((&q / 2).x().item(), 3);
    assert_eq!((&q * &q).y().item(), 9);
}

#[test]
fn sphere_volume_matches_scalar_reference() {
    // the example's computation, lane by lane against the scalar reference (a point within a few
    // ulps of the sphere may land either way if the backend contracts to fma: allow a tiny slack)
    let n = 20_000;
    let mut rng = Pcg32::new(n);
    let v = Vector3f::new(
        rng.next_f32() * 2.0 - 1.0,
        rng.next_f32() * 2.0 - 1.0,
        rng.next_f32() * 2.0 - 1.0,
    );
    let count = v.norm().lt(1.0).count() as i64;
    let want = (0..n as u64)
        .filter(|&i| {
            let mut r = RefPcg32::srandom(PCG32_DEFAULT_STATE, i);
            let mut c = || (f32::from_bits((r.random() >> 9) | 0x3f80_0000) - 1.0) * 2.0 - 1.0;
            let (x, y, z) = (c(), c(), c());
            (x * x + y * y + z * z).sqrt() < 1.0
        })
        .count() as i64;
    assert!((count - want).abs() <= 2, "{count} vs {want}");
    assert!((want as f64 / n as f64 - std::f64::consts::PI / 6.0).abs() < 0.01);
}
