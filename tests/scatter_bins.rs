//! `scatter_reduce` into few bins (issue 24, item 5): blocks accumulate small targets privately
//! and fold them in block order; consecutive scatters of one size fuse into one kernel. Every
//! backend is checked against a host loop (exact kinds) and against the interpreter (float sums),
//! over sizes around the 16 384-lane block boundary, masked and with out-of-range indices.

mod common;
use common::{delta, leak_checked};
use kiln::prelude::*;
use kiln_core::{self as core, BackendKind};

const SIZES: [usize; 6] = [0, 1, 17, 16_383, 16_384, 16_385];

fn backends() -> Vec<BackendKind> {
    let mut b = vec![BackendKind::Interp, BackendKind::Cranelift];
    if core::backend::llvm::shared().is_ok() {
        b.push(BackendKind::Llvm);
    }
    b
}

/// Deterministic pseudo-random stream.
fn lcg(seed: u64) -> impl FnMut() -> u64 {
    let mut s = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    move || {
        s = s
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        s >> 33
    }
}

/// Indices in `[0, bins + 2)`: about 2 in `bins + 2` lanes fall outside the target.
fn indices(n: usize, bins: usize, seed: u64) -> Vec<u32> {
    let mut r = lcg(seed);
    (0..n).map(|_| (r() % (bins as u64 + 2)) as u32).collect()
}

fn mask(n: usize, seed: u64) -> Vec<bool> {
    let mut r = lcg(seed ^ 0x55);
    (0..n).map(|_| r() % 3 != 0).collect()
}

/// The host loop: `t[i] = f(t[i], v)` for every active lane in range; returns the result and the
/// number of active lanes that were out of range.
fn host<T: Copy>(
    init: &[T],
    vals: &[T],
    idx: &[u32],
    m: Option<&[bool]>,
    f: impl Fn(T, T) -> T,
) -> (Vec<T>, u64) {
    let mut t = init.to_vec();
    let mut oob = 0;
    for (k, (&v, &i)) in vals.iter().zip(idx).enumerate() {
        if m.is_some_and(|m| !m[k]) {
            continue;
        }
        match t.get_mut(i as usize) {
            Some(x) => *x = f(*x, v),
            None => oob += 1,
        }
    }
    (t, oob)
}

/// Runs one scatter_reduce on `backend`, returning the target and the out-of-range writes counted.
fn run<T: kiln::Scalar>(
    backend: BackendKind,
    op: ReduceOp,
    init: &[T],
    vals: &[T],
    idx: &[u32],
    m: Option<&[bool]>,
) -> (Vec<T>, u64) {
    core::with_backend(backend, || {
        let mut t = Array::<T>::from_slice(init);
        let (v, i) = (Array::<T>::from_slice(vals), UInt32::from_slice(idx));
        let ((), d) = delta(|| {
            match m {
                None => scatter_reduce(op, &mut t, &v, &i),
                Some(m) => scatter_reduce_masked(op, &mut t, &v, &i, Bool::from_slice(m)),
            }
            kiln::eval!(t);
        });
        (t.to_vec(), d.oob_writes)
    })
}

/// Checks one exact reduction kind on every backend and size, masked and not, small and big bins.
fn exact_kind<T: kiln::Scalar + PartialEq + std::fmt::Debug>(
    op: ReduceOp,
    init_of: impl Fn(usize) -> T,
    val_of: impl Fn(u64) -> T,
    f: impl Fn(T, T) -> T + Copy,
) {
    for backend in backends() {
        for (s, &n) in SIZES.iter().enumerate() {
            // 1 bin, few bins, and a target too big to privatise at these sizes
            for bins in [1usize, 8, 5000] {
                let seed = (s * 31 + bins) as u64;
                let init: Vec<T> = (0..bins).map(&init_of).collect();
                let mut r = lcg(seed ^ 0xabc);
                let vals: Vec<T> = (0..n).map(|_| val_of(r())).collect();
                let idx = indices(n, bins, seed);
                let m = mask(n, seed);
                for masked in [false, true] {
                    let mm = masked.then_some(&m[..]);
                    let want = host(&init, &vals, &idx, mm, f);
                    let got = run(backend, op, &init, &vals, &idx, mm);
                    assert_eq!(
                        got, want,
                        "{op:?} on {backend}: n={n}, bins={bins}, masked={masked}"
                    );
                }
            }
        }
    }
}

#[test]
fn integer_sums_are_exact_on_every_backend() {
    leak_checked(|| {
        exact_kind::<u32>(
            ReduceOp::Add,
            |i| i as u32 * 7,
            |r| r as u32,
            |a, b| a.wrapping_add(b),
        );
        exact_kind::<i64>(
            ReduceOp::Add,
            |i| -(i as i64),
            |r| r as i64 - (1 << 30),
            |a, b| a.wrapping_add(b),
        );
    });
}

#[test]
fn min_max_mul_are_exact_on_every_backend() {
    leak_checked(|| {
        exact_kind::<i32>(ReduceOp::Min, |_| i32::MAX - 3, |r| r as i32, i32::min);
        exact_kind::<i32>(ReduceOp::Max, |i| i as i32 - 5, |r| -(r as i32), i32::max);
        // odd factors: the wrapping product never collapses to zero
        exact_kind::<u64>(
            ReduceOp::Mul,
            |i| 2 * i as u64 + 1,
            |r| r | 1,
            |a, b| a.wrapping_mul(b),
        );
        // distinct non-zero floats: min/max are total orders, exact in any grouping
        exact_kind::<f32>(
            ReduceOp::Min,
            |i| 1e30 + i as f32,
            |r| (r % 100_000) as f32 * 0.25 + 1.0,
            f32::min,
        );
        exact_kind::<f32>(
            ReduceOp::Max,
            |_| -1e30,
            |r| -((r % 100_000) as f32) * 0.5 - 1.0,
            f32::max,
        );
        // float sums of small integers are exact whatever the grouping
        exact_kind::<f32>(
            ReduceOp::Add,
            |i| i as f32,
            |r| (r % 64) as f32 - 32.0,
            |a, b| a + b,
        );
    });
}

#[test]
fn mask_or_and_into_few_bins() {
    leak_checked(|| {
        exact_kind::<bool>(ReduceOp::Or, |_| false, |r| r % 5 == 0, |a, b| a | b);
        exact_kind::<bool>(ReduceOp::And, |_| true, |r| r % 7 != 0, |a, b| a & b);
    });
}

/// Float sums with rounding: every backend gives the interpreter's bits, and running again
/// gives the same bits (blocks fold in block order, whatever thread ran them).
#[test]
fn float_sums_match_the_interpreter_and_repeat_bit_for_bit() {
    leak_checked(|| {
        for &n in SIZES.iter().chain(&[70_001]) {
            let mut r = lcg(n as u64);
            let vals: Vec<f32> = (0..n).map(|_| (r() % 10_000) as f32 * 0.001_37).collect();
            let idx = indices(n, 8, 99);
            let init = vec![0.5f32; 8];
            let oracle = run(BackendKind::Interp, ReduceOp::Add, &init, &vals, &idx, None);
            for backend in backends() {
                for _ in 0..2 {
                    let got = run(backend, ReduceOp::Add, &init, &vals, &idx, None);
                    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                    assert_eq!(bits(&got.0), bits(&oracle.0), "{backend}, n={n}");
                    assert_eq!(got.1, oracle.1);
                }
            }
            // and the sums are right to float accuracy
            let (want, _) = host(&init, &vals, &idx, None, |a: f32, b| a + b);
            for (g, w) in oracle.0.iter().zip(&want) {
                assert!(
                    (g - w).abs() <= 1e-3 * w.abs().max(1.0),
                    "n={n}: {g} vs {w}"
                );
            }
        }
    });
}

/// A target of −0.0 that only −0.0s are added to stays −0.0 (the private copies start from −0.0,
/// not +0.0).
#[test]
fn negative_zero_survives_private_sums() {
    leak_checked(|| {
        for backend in backends() {
            let n = 50_000;
            let idx = indices(n, 4, 5);
            let (got, oob) = run(
                backend,
                ReduceOp::Add,
                &[-0.0f32; 4],
                &vec![-0.0f32; n],
                &idx,
                None,
            );
            assert_eq!(oob, idx.iter().filter(|&&i| i >= 4).count() as u64);
            assert!(
                got.iter().all(|x| x.to_bits() == (-0.0f32).to_bits()),
                "{backend}: {got:?}"
            );
        }
    });
}

/// k-means' sums and counts: three scatters of one size that share their index run in one
/// kernel with the computation of that index.
#[test]
fn sibling_scatters_fuse_into_one_launch() {
    leak_checked(|| {
        let n = 40_000;
        let x = Float32::arange(n) * 0.001;
        let y = Float32::arange(n) * 0.002;
        kiln::eval!(x, y);
        let (mut sx, mut sy, mut count) = (Float32::zeros(8), Float32::zeros(8), UInt32::zeros(8));
        kiln::eval!(sx, sy, count);
        let ((), d) = delta(|| {
            let label = (&x * 100.0).cast::<u32>() % 8u32;
            scatter_reduce(ReduceOp::Add, &mut sx, &x, &label);
            scatter_reduce(ReduceOp::Add, &mut sy, &y, &label);
            scatter_reduce(ReduceOp::Add, &mut count, 1u32, &label);
            kiln::eval!(sx, sy, count);
        });
        assert_eq!(d.launches, 1, "{d:?}");
        let xs = x.to_vec();
        let mut want = [0u32; 8];
        for v in &xs {
            want[((v * 100.0) as u32 % 8) as usize] += 1;
        }
        assert_eq!(count.to_vec(), want.to_vec());
        assert_eq!(count.to_vec().iter().sum::<u32>(), n as u32);
    });
}

/// A frozen function with a few-bin scatter_reduce replays at other sizes with the bits of the
/// unfrozen call.
#[test]
fn frozen_few_bin_scatter_replays_at_other_sizes() {
    leak_checked(|| {
        let body = |v: &Float32, i: &UInt32| -> Float32 {
            let mut t = Float32::zeros(8);
            scatter_reduce(ReduceOp::Add, &mut t, &(v * 1.5), i);
            t
        };
        let mut f = kiln::freeze(body);
        for (k, &n) in [30_000usize, 70_001, 16_385, 100].iter().enumerate() {
            let mut r = lcg(n as u64);
            let vals: Vec<f32> = (0..n).map(|_| (r() % 1000) as f32 * 0.013).collect();
            let (v, i) = (
                Float32::from_slice(&vals),
                UInt32::from_slice(&indices(n, 8, 7)),
            );
            let frozen = f.call(&v, &i).unwrap().to_vec();
            let plain = body(&v, &i).to_vec();
            let bits = |x: &[f32]| x.iter().map(|y| y.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&frozen), bits(&plain), "call {k}, n={n}");
        }
        let s = f.stats();
        assert!(s.replays >= 2, "{s}");
    });
}

/// Histograms built on several threads at once: each gets its own exact counts.
#[test]
fn threads_build_histograms_at_once() {
    leak_checked(|| {
        let handles: Vec<_> = (0..4u64)
            .map(|t| {
                std::thread::spawn(move || {
                    let n = 40_000 + t as usize * 1001;
                    let idx = indices(n, 16, t);
                    let mut h = UInt32::zeros(16);
                    scatter_reduce(ReduceOp::Add, &mut h, 1u32, &UInt32::from_slice(&idx));
                    let got = h.to_vec();
                    let (want, _) = host(&[0u32; 16], &vec![1u32; n], &idx, None, |a, b| a + b);
                    assert_eq!(got, want, "thread {t}");
                })
            })
            .collect();
        for h in handles {
            h.join().unwrap();
        }
    });
}

// ---------------------------------------------------------------------------------------------
// Plain (non-atomic) updates of privatised targets

/// The text of the kernel the pending scatters would run in.
fn pending_kernel() -> String {
    let ks = core::kernels_for(&[]);
    assert_eq!(ks.len(), 1, "one pending kernel");
    ks[0].to_string()
}

/// A reduce-scatter into a target of at most 16 KiB compiles to plain updates (`exclusive` in
/// the IR, so its cache entry is not the atomic kernel's); a bigger target, a plain overwrite and a
/// target the kernel also reads stay atomic.
#[test]
fn small_reduce_targets_compile_plain_updates() {
    leak_checked(|| {
        let n = 20_000;
        let v = Float32::arange(n) * 0.5;
        let i = UInt32::arange(n) % 7u32;
        kiln::eval!(v, i);
        let case = |bins: usize, op: ReduceOp| -> String {
            let mut t = UInt32::zeros(bins);
            t.eval();
            scatter_reduce(op, &mut t, 3u32, &i);
            let text = pending_kernel();
            t.eval();
            text
        };
        assert!(case(8, ReduceOp::Add).contains(", exclusive"));
        assert!(case(4096, ReduceOp::Max).contains(", exclusive"), "16 KiB");
        assert!(
            !case(4097, ReduceOp::Add).contains(", exclusive"),
            "past 16 KiB"
        );
        assert!(
            !case(8, ReduceOp::None).contains(", exclusive"),
            "overwrite"
        );
        // a gather from the target in the same kernel reads it as it was: the launch sees one
        // buffer bound to two parameters and runs the blocks in order on one thread
        let mut t = UInt32::from_slice(&[1, 2, 3, 4, 5, 6, 7, 8]);
        t.eval();
        let g = gather(&t, &i);
        scatter_reduce(ReduceOp::Add, &mut t, &(&g * 2u32), &i);
        assert!(pending_kernel().contains(", exclusive"));
        let mut want = [1u32, 2, 3, 4, 5, 6, 7, 8];
        for k in 0..n {
            want[k % 7] += 2 * (k % 7 + 1) as u32;
        }
        assert_eq!(t.to_vec(), want.to_vec());
        // the flag is part of the hash
        let mut t = Float32::zeros(8);
        t.eval();
        scatter_reduce(ReduceOp::Add, &mut t, &v, &i);
        let k = core::kernels_for(&[]).remove(0);
        t.eval();
        let mut atomic = k.clone();
        for inst in &mut atomic.insts {
            inst.imm &= !core::kernel::SCATTER_EXCLUSIVE;
        }
        assert!(k.insts.iter().any(|x| x.exclusive()));
        assert_ne!(k.hash(), atomic.hash());
    });
}

/// Plain updates around the copy-size limit (4096 u32 = 16 KiB is privatised, 4097 and 5000 are
/// not) and across block boundaries: exact kinds equal the host loop, float sums the
/// interpreter's bits, masked and with out-of-range lanes, on every backend.
#[test]
fn plain_updates_match_around_the_copy_limit() {
    leak_checked(|| {
        for backend in backends() {
            for &n in &[16_384usize, 16_385, 70_001] {
                for bins in [1usize, 8, 4096, 4097, 5000] {
                    let seed = (n + bins) as u64;
                    let idx = indices(n, bins, seed);
                    let m = mask(n, seed);
                    let mut r = lcg(seed);
                    let ints: Vec<u32> = (0..n).map(|_| r() as u32).collect();
                    let floats: Vec<f32> = (0..n).map(|_| (r() % 5000) as f32 * 0.0031).collect();
                    for masked in [false, true] {
                        let mm = masked.then_some(&m[..]);
                        let init = vec![5u32; bins];
                        let want = host(&init, &ints, &idx, mm, |a, b| a.wrapping_add(b));
                        let got = run(backend, ReduceOp::Add, &init, &ints, &idx, mm);
                        assert_eq!(got, want, "u32 on {backend}: n={n} bins={bins} {masked}");
                        let init = vec![0.25f32; bins];
                        let got = run(backend, ReduceOp::Add, &init, &floats, &idx, mm);
                        if bins <= 4096 {
                            // privatised: the interpreter's bits, whatever thread ran a block
                            let oracle =
                                run(BackendKind::Interp, ReduceOp::Add, &init, &floats, &idx, mm);
                            let bits =
                                |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                            assert_eq!(
                                bits(&got.0),
                                bits(&oracle.0),
                                "f32 on {backend}: n={n} bins={bins} {masked}"
                            );
                        }
                        // (a shared target's float sums depend on which thread came first)
                        let (want, oob) = host(&init, &floats, &idx, mm, |a, b| a + b);
                        assert_eq!(got.1, oob);
                        for (g, w) in got.0.iter().zip(&want) {
                            assert!((g - w).abs() <= 1e-3 * w.abs().max(1.0), "{g} vs {w}");
                        }
                    }
                }
            }
        }
    });
}

/// A frozen histogram whose target length changes between calls: the recorded launch keeps its
/// plain updates exclusive (privatised, or blocks in order on one thread for a target past the
/// limit), so every call counts exactly.
#[test]
fn frozen_plain_updates_stay_exclusive_at_other_sizes() {
    leak_checked(|| {
        let body = |t: &UInt32, i: &UInt32| -> UInt32 {
            let mut h = t.clone();
            scatter_reduce(ReduceOp::Add, &mut h, 1u32, i);
            h
        };
        let mut f = kiln::freeze(body);
        for (k, &(n, bins)) in [
            (40_000usize, 8usize),
            (70_001, 8),
            (50_000, 6000),
            (16_385, 3),
        ]
        .iter()
        .enumerate()
        {
            let idx = indices(n, bins, k as u64);
            let (t, i) = (UInt32::zeros(bins), UInt32::from_slice(&idx));
            let got = f.call(&t, &i).unwrap().to_vec();
            let (want, _) = host(&vec![0u32; bins], &vec![1u32; n], &idx, None, |a, b| a + b);
            assert_eq!(got, want, "call {k}: n={n}, bins={bins}");
        }
    });
}

/// A gather at one index for every lane (k-means reads a centroid this way) loads once and
/// broadcasts on LLVM: the same values and out-of-range counts as the interpreter, in range, out
/// of range, negative, masked, for f32, i32 and bool sources, over sizes around the block edge.
#[test]
fn gather_at_one_index_matches_the_interpreter() {
    leak_checked(|| {
        let eval_on = |backend: BackendKind, n: usize, at: i32| {
            core::with_backend(backend, || {
                let src = Float32::from_slice(&[1.5, -2.0, 3.25]);
                let ints = Int32::from_slice(&[7, -8, 9]);
                let flags = Bool::from_slice(&[true, false, true]);
                let m = UInt32::arange(n) % 3u32;
                let keep = m.ne(1u32);
                let i = Int32::from(at);
                let ((a, b, c, d), dl) = delta(|| {
                    let a = gather(&src, &i) + Float32::arange(n);
                    let b = gather_masked(&ints, &i, &keep) + 1i32;
                    let c = select(&gather(&flags, &i), 1u32, 2u32) + &m;
                    let d = gather(&src, &Int32::from(at)) * 2.0;
                    kiln::eval!(a, b, c, d);
                    (a.to_vec(), b.to_vec(), c.to_vec(), d.len())
                });
                (a, b, c, d, dl.oob_reads)
            })
        };
        for &n in &SIZES {
            for at in [0, 2, 3, -1] {
                let want = eval_on(BackendKind::Interp, n, at);
                for backend in backends() {
                    assert_eq!(
                        eval_on(backend, n, at),
                        want,
                        "{backend}: n={n}, index {at}"
                    );
                }
                if n > 0 && (0..3).contains(&at) {
                    assert_eq!(want.0[0], [1.5, -2.0, 3.25][at as usize]);
                } else if n > 0 {
                    assert!(want.4 > 0, "out of range is counted");
                }
            }
        }
    });
}

/// Targets small enough to stay in one register while a vector's lanes update them (at most 4, 8
/// or 16 elements, by type and width): every index in range and every lane active, so the kernel
/// takes that path; sums give the interpreter's bits, exact kinds the host loop's, for each length
/// around the register sizes.
#[test]
fn register_sized_targets_match_lane_by_lane() {
    fn in_range(n: usize, bins: usize, seed: u64) -> Vec<u32> {
        let mut r = lcg(seed);
        (0..n).map(|_| (r() % bins as u64) as u32).collect()
    }
    leak_checked(|| {
        let n = 40_000;
        for bins in 1..=17usize {
            let idx = in_range(n, bins, bins as u64);
            let mut r = lcg(bins as u64 ^ 7);
            let f32s: Vec<f32> = (0..n)
                .map(|_| (r() % 9_999) as f32 * 0.013 - 60.0)
                .collect();
            let f64s: Vec<f64> = (0..n)
                .map(|_| (r() % 9_999) as f64 * 0.0131 - 60.0)
                .collect();
            let u32s: Vec<u32> = (0..n).map(|_| r() as u32).collect();
            let i64s: Vec<i64> = (0..n).map(|_| r() as i64 - (1 << 30)).collect();
            let f32_init = vec![0.75f32; bins];
            let f64_init = vec![-0.0f64; bins];
            let want32 = run(
                BackendKind::Interp,
                ReduceOp::Add,
                &f32_init,
                &f32s,
                &idx,
                None,
            );
            let want64 = run(
                BackendKind::Interp,
                ReduceOp::Add,
                &f64_init,
                &f64s,
                &idx,
                None,
            );
            let want_u = host(&vec![3u32; bins], &u32s, &idx, None, u32::wrapping_add);
            let want_i = host(&vec![-5i64; bins], &i64s, &idx, None, i64::wrapping_add);
            for backend in backends() {
                let bits32 = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                let bits64 = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                let got = run(backend, ReduceOp::Add, &f32_init, &f32s, &idx, None);
                assert_eq!(
                    bits32(&got.0),
                    bits32(&want32.0),
                    "f32 {backend} bins={bins}"
                );
                let got = run(backend, ReduceOp::Add, &f64_init, &f64s, &idx, None);
                assert_eq!(
                    bits64(&got.0),
                    bits64(&want64.0),
                    "f64 {backend} bins={bins}"
                );
                let got = run(backend, ReduceOp::Add, &vec![3u32; bins], &u32s, &idx, None);
                assert_eq!(got, want_u, "u32 {backend} bins={bins}");
                let got = run(
                    backend,
                    ReduceOp::Add,
                    &vec![-5i64; bins],
                    &i64s,
                    &idx,
                    None,
                );
                assert_eq!(got, want_i, "i64 {backend} bins={bins}");
            }
        }
    });
}
