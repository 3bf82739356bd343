//! The core engine from a user's point of view: fusion, caching, evaluation, memory ops, reductions,
//! value semantics, and every row of the bad-input table.

mod common;
use common::{delta, leak_checked, panic_message};
use kiln::prelude::*;

#[test]
fn elementwise_chain_is_one_kernel_and_matches_rust() {
    leak_checked(|| {
        let n = 50_000;
        let x = Float32::linspace(0.0, 1.0, n).label("x");
        let y = (&x * &x + 1.0).sqrt() * 2.0 + x.abs() - 0.5;
        let (v, d) = delta(|| y.to_vec());
        assert_eq!(d.launches, 1, "the whole chain fuses into one kernel");
        for (i, got) in v.iter().enumerate() {
            let xv = i as f32 * (1.0 / (n - 1) as f32);
            let want = (xv * xv + 1.0).sqrt() * 2.0 + xv.abs() - 0.5;
            assert!(
                (got - want).abs() <= 1e-6 * want.abs().max(1.0),
                "lane {i}: {got} vs {want}"
            );
        }
    });
}

#[test]
fn nothing_runs_until_needed() {
    leak_checked(|| {
        let (y, d) = delta(|| {
            let x = Float32::arange(1000);
            &x * 3.0 + 1.0
        });
        assert_eq!(d.launches, 0);
        assert!(!y.is_evaluated());
        assert_eq!(y.to_vec()[999], 2998.0);
    });
}

#[test]
fn two_outputs_of_one_size_share_a_kernel() {
    leak_checked(|| {
        let x = Float32::arange(1000);
        let a = &x + 1.0;
        let b = &x * 2.0;
        let c = UInt32::arange(10) * 3u32; // another size: its own kernel
        let ((), d) = delta(|| kiln::eval!(a, b, c));
        assert_eq!(d.launches, 2);
        assert_eq!(a.to_vec()[10], 11.0);
        assert_eq!(b.to_vec()[10], 20.0);
        assert_eq!(c.to_vec()[9], 27);
    });
}

#[test]
fn same_program_at_another_size_hits_the_cache() {
    leak_checked(|| {
        let prog = |n: usize| {
            let x = Float64::arange(n);
            (&x * 0.5 + 3.0).sqrt()
        };
        let a = prog(1234);
        let b = prog(98_765);
        let ka = kiln_core::kernels_for(&[a.id()]);
        let kb = kiln_core::kernels_for(&[b.id()]);
        assert_eq!(ka[0].hash(), kb[0].hash(), "sizes are parameters, not code");
        let ((), d1) = delta(|| {
            a.eval();
        });
        let ((), d2) = delta(|| {
            b.eval();
        });
        assert_eq!(d1.launches + d2.launches, 2);
        assert_eq!(d2.cache_hits, 1, "second size reuses the compiled kernel");
        assert_eq!(d2.kernels_compiled, 0);
    });
}

#[test]
fn literals_are_code_and_make_opaque_turns_them_into_parameters() {
    leak_checked(|| {
        let x = Float32::arange(100);
        let k1 = kiln_core::kernels_for(&[(&x + 1.0).id()])[0].hash();
        let k2 = kiln_core::kernels_for(&[(&x + 2.0).id()])[0].hash();
        assert_ne!(k1, k2, "a literal is baked into the kernel");
        let o1 = kiln::make_opaque(&Float32::from(1.0f32));
        let o2 = kiln::make_opaque(&Float32::from(2.0f32));
        let k3 = kiln_core::kernels_for(&[(&x + &o1).id()])[0].hash();
        let k4 = kiln_core::kernels_for(&[(&x + &o2).id()])[0].hash();
        assert_eq!(k3, k4, "opaque values are parameters");
        assert_eq!((&x + &o2).to_vec()[5], 7.0);
    });
}

#[test]
fn making_a_value_opaque_compiles_nothing() {
    // a learning-rate schedule: a new opaque value every step must not mean a new kernel
    leak_checked(|| {
        let x = Float64::arange(1000);
        let before = kiln::stats();
        let mut total = 0.0;
        for step in 0..20u32 {
            let lr = Float64::opaque(0.5 / (1 + step) as f64);
            let big = kiln::make_opaque(&Float32::full(step as f32 - 3.5, 70_001));
            let flag = kiln::make_opaque(&Bool::full(step % 2 == 0, 3));
            let small = kiln::make_opaque(&Int64::full(-(step as i64) * 1_000_000_007, 5));
            assert_eq!(big.to_vec()[70_000], step as f32 - 3.5);
            assert_eq!(flag.to_vec(), vec![step % 2 == 0; 3]);
            assert_eq!(small.to_vec(), vec![-(step as i64) * 1_000_000_007; 5]);
            total += (&x * &lr).sum().item();
        }
        let want: f64 = (0..20).map(|s| 0.5 / (1 + s) as f64 * 499_500.0).sum();
        assert!((total - want).abs() < 1e-6 * want);
        let compiled = kiln::stats().kernels_compiled - before.kernels_compiled;
        assert!(
            compiled <= 1,
            "{compiled} kernels compiled for 20 values (one: x * lr)"
        );
    });
}

#[test]
fn cse_and_simplification() {
    leak_checked(|| {
        let x = Float32::arange(10);
        let a = &x * 2.0;
        let b = &x * 2.0;
        assert_eq!(a.id(), b.id(), "identical expressions are one variable");
        let c = &x * 1.0;
        assert_eq!(c.id(), x.id(), "x * 1 is x");
        let m = Int32::arange(4).lt(2);
        let s = select(&Bool::from(true), &m, &!&m);
        assert_eq!(s.id(), m.id(), "select on a literal mask picks a side");
        let f = Float32::from(3.0f32) * 2.0 + 1.0;
        assert_eq!(
            kiln_core::literal_value(f.id()),
            Some(7.0f32.to_bits() as u64),
            "constant folding"
        );
        let i = Int32::arange(5);
        assert_eq!((-(-&i)).id(), i.id(), "double negation");
    });
}

#[test]
fn reductions_and_horizontal_ops() {
    leak_checked(|| {
        let x = Int32::arange(100_000);
        assert_eq!(
            x.sum().item(),
            (0..100_000i32).fold(0i32, |a, b| a.wrapping_add(b)),
            "integer sums wrap"
        );
        assert_eq!(x.reduce_max().item(), 99_999);
        assert_eq!((&x - 7).reduce_min().item(), -7);
        let f = Float64::arange(1000) + 1.0;
        assert_eq!(f.sum().item(), 500_500.0);
        assert_eq!(
            f.dot(&f).item(),
            (1..=1000).map(|v| (v * v) as f64).sum::<f64>()
        );
        let small = Float32::from_slice(&[1.0, 2.0, 3.0, 4.0]);
        assert_eq!(small.prod().item(), 24.0);
        assert_eq!(Int32::arange(5).block_sum(2).to_vec(), vec![1, 5, 4]);
        assert_eq!(
            Int32::arange(5).prefix_sum(true).to_vec(),
            vec![0, 0, 1, 3, 6]
        );
        let m = (Int32::arange(20) % 3).eq(0);
        assert_eq!(m.count(), 7);
        assert_eq!(m.compress().to_vec(), vec![0, 3, 6, 9, 12, 15, 18]);
        assert!(m.any() && !m.all() && !m.none());
        assert!(m.any_or(false) && !m.all_or(true));
        // a reduction result is pending until something needs it (issue 24: sibling reductions
        // evaluated together share one pass), then evaluated on the device, not read back
        let s = x.sum();
        assert!(!s.is_evaluated());
        s.eval();
        assert!(s.is_evaluated());
        // large block sums cross the parallel split
        let big = UInt64::arange(300_001);
        let bs = big.block_sum(100_000).to_vec();
        assert_eq!(bs.len(), 4);
        assert_eq!(bs[3], 300_000);
    });
}

#[test]
fn empty_arrays_work_and_reduce_to_identities() {
    leak_checked(|| {
        let e = Float32::zeros(0);
        let y = (&e * 2.0 + 1.0).sqrt();
        assert!(y.to_vec().is_empty());
        assert!(y.is_empty());
        assert_eq!(e.sum().item(), 0.0);
        assert_eq!(e.prod().item(), 1.0);
        assert_eq!(e.reduce_min().item(), f32::INFINITY);
        assert_eq!(e.reduce_max().item(), f32::NEG_INFINITY);
        let ei = Int32::from_slice(&[]);
        assert_eq!(ei.reduce_min().item(), i32::MAX);
        let m = ei.gt(0);
        assert_eq!(m.count(), 0);
        assert!(m.all() && !m.any());
        assert!(m.compress().is_empty());
        assert!(ei.prefix_sum(false).to_vec().is_empty());
        assert!(ei.block_sum(3).to_vec().is_empty());
        let g = gather(&Float32::from_slice(&[1.0]), &UInt32::zeros(0));
        assert!(g.to_vec().is_empty());
        // size 0 combined with a broadcast operand stays size 0
        assert_eq!((&e + &Float32::from(1.0f32)).len(), 0);
    });
}

#[test]
fn size_mismatch_panics_naming_both_operands_and_try_form_errs() {
    leak_checked(|| {
        let a = Float32::zeros(3).label("a");
        let b = Float32::zeros(5).label("b");
        let msg = panic_message(std::panic::AssertUnwindSafe(|| {
            let _ = &a + &b;
        }));
        for needle in ["'a'", "'b'", "3", "5", "size 1"] {
            assert!(msg.contains(needle), "message lacks {needle}: {msg}");
        }
        let err = Float32::try_binary(Op::Add, &a, &b).unwrap_err();
        assert!(
            matches!(
                err,
                kiln::Error::SizeMismatch {
                    lhs_size: 3,
                    rhs_size: 5,
                    ..
                }
            ),
            "{err}"
        );
    });
}

#[test]
fn item_on_non_scalar_is_an_error_naming_the_size() {
    leak_checked(|| {
        let a = Float32::zeros(4).label("weights");
        let e = a.try_item().unwrap_err();
        assert!(matches!(e, kiln::Error::NotScalar { size: 4, .. }));
        assert!(e.to_string().contains("weights") && e.to_string().contains('4'));
    });
}

#[test]
fn gathers_out_of_range_read_zero_and_are_counted() {
    leak_checked(|| {
        let src = Float32::from_slice(&[1.0, 2.0, 3.0]);
        let (v, d) =
            delta(|| gather(&src, &Int32::from_slice(&[0, -1, 2, 3, i32::MIN, i32::MAX])).to_vec());
        assert_eq!(v, vec![1.0, 0.0, 3.0, 0.0, 0.0, 0.0]);
        assert_eq!(d.oob_reads, 4);
        // masked-off lanes are not reads at all
        let idx = UInt32::from_slice(&[0, 99]);
        let (v, d) = delta(|| gather_masked(&src, &idx, idx.lt(3)).to_vec());
        assert_eq!(v, vec![1.0, 0.0]);
        assert_eq!(d.oob_reads, 0);
        // u64 indices beyond the signed range are out of range too
        let (v, _) = delta(|| gather(&src, &UInt64::from_slice(&[u64::MAX, 1])).to_vec());
        assert_eq!(v, vec![0.0, 2.0]);
        // gathering from an unevaluated source evaluates it first
        let lazy = Float32::arange(10) * 2.0;
        assert_eq!(gather(&lazy, &UInt32::from_slice(&[4])).item(), 8.0);
        assert!(lazy.is_evaluated());
    });
}

#[test]
fn scatters_drop_out_of_range_writes_and_have_value_semantics() {
    leak_checked(|| {
        let mut t = Int32::zeros(5).label("target");
        let before = t.clone();
        let traced_before = &t + 100;
        let (_, d) = delta(|| {
            scatter(
                &mut t,
                Int32::from_slice(&[7, 8, 9]),
                &Int32::from_slice(&[1, 5, -1]),
            );
            t.eval();
        });
        assert_eq!(d.oob_writes, 2);
        assert_eq!(t.to_vec(), vec![0, 7, 0, 0, 0]);
        assert_eq!(
            before.to_vec(),
            vec![0; 5],
            "a clone taken before keeps the old contents"
        );
        assert_eq!(
            traced_before.to_vec(),
            vec![100; 5],
            "an expression traced before sees the old contents"
        );
        let after = &t * 2;
        assert_eq!(
            after.to_vec(),
            vec![0, 14, 0, 0, 0],
            "later uses see the write"
        );

        // unshared target: updated in place, no copy
        let mut u = Float32::zeros(4);
        u.eval();
        let id = u.id();
        scatter(&mut u, 1.5f32, &UInt32::from_slice(&[2]));
        assert_eq!(u.id(), id, "a uniquely held target is written in place");
        assert_eq!(u.to_vec(), vec![0.0, 0.0, 1.5, 0.0]);

        // reductions: every duplicate counts
        let mut h = UInt32::zeros(4);
        scatter_reduce(
            ReduceOp::Add,
            &mut h,
            1u32,
            &UInt32::from_slice(&[0, 3, 3, 3, 1, 3]),
        );
        assert_eq!(h.to_vec(), vec![1, 1, 0, 4]);
        let mut mx = Float32::full(-1.0, 2);
        scatter_reduce(
            ReduceOp::Max,
            &mut mx,
            Float32::from_slice(&[3.0, 5.0, 4.0]),
            &UInt32::from_slice(&[0, 0, 1]),
        );
        assert_eq!(mx.to_vec(), vec![5.0, 4.0]);
        let mut mn = Int64::full(10, 2);
        scatter_reduce(
            ReduceOp::Min,
            &mut mn,
            Int64::from_slice(&[3, -5]),
            &UInt32::from_slice(&[1, 1]),
        );
        assert_eq!(mn.to_vec(), vec![10, -5]);
        // large scatter-add across threads
        let n = 200_000;
        let mut bins = UInt64::zeros(7);
        scatter_reduce(ReduceOp::Add, &mut bins, 1u64, &(UInt32::arange(n) % 7u32));
        assert_eq!(bins.to_vec().iter().sum::<u64>(), n as u64);
    });
}

#[test]
fn integer_division_by_zero_shifts_and_overflow_are_defined() {
    leak_checked(|| {
        let a = Int32::from_slice(&[7, -7, i32::MIN, i32::MIN, 5]);
        let b = Int32::from_slice(&[0, 0, -1, 1, 2]);
        assert_eq!((&a / &b).to_vec(), vec![0, 0, i32::MIN, i32::MIN, 2]);
        assert_eq!((&a % &b).to_vec(), vec![7, -7, 0, 0, 1]);
        let u = UInt32::from_slice(&[1, 1, 0x8000_0000]);
        let s = UInt32::from_slice(&[31, 32, 33]);
        assert_eq!((&u << &s).to_vec(), vec![0x8000_0000, 1, 0]);
        assert_eq!((&u >> &s).to_vec(), vec![0, 1, 0x4000_0000]);
        assert_eq!((Int32::from(i32::MAX) + 1).item(), i32::MIN);
        assert_eq!((UInt64::from(0u64) - 1u64).item(), u64::MAX);
        assert_eq!(Int32::from(i32::MIN).abs().item(), i32::MIN);
        assert_eq!(
            (Int32::from_slice(&[-8]) >> 1).to_vec(),
            vec![-4],
            "signed shift is arithmetic"
        );
    });
}

#[test]
fn nan_and_infinities_follow_ieee() {
    leak_checked(|| {
        let x = Float32::from_slice(&[f32::NAN, 1.0, f32::INFINITY, -0.0, f32::NEG_INFINITY]);
        let y = Float32::from_slice(&[1.0, f32::NAN, 2.0, 0.0, 3.0]);
        let mn = x.min(&y).to_vec();
        assert!(mn[0].is_nan() && mn[1].is_nan(), "min propagates NaN");
        assert_eq!(mn[2], 2.0);
        assert!(mn[3] == 0.0 && mn[3].is_sign_negative(), "-0 < +0");
        assert_eq!(mn[4], f32::NEG_INFINITY);
        let mx = x.max(&y).to_vec();
        assert!(mx[0].is_nan() && mx[3].is_sign_positive());
        assert_eq!(x.lt(&y).to_vec(), vec![false, false, false, false, true]);
        assert_eq!(x.ne(&y).to_vec(), vec![true, true, true, false, true]);
        assert_eq!(x.eq(&x).to_vec(), vec![false, true, true, true, true]);
        assert_eq!(
            x.cast::<i32>().to_vec(),
            vec![0, 1, i32::MAX, 0, i32::MIN],
            "float→int saturates, NaN → 0"
        );
        assert_eq!(x.cast::<u32>().to_vec(), vec![0, 1, u32::MAX, 0, 0]);
        assert!(Float64::from(-1.0).sqrt().item().is_nan());
        assert_eq!((Float32::from(1.0f32) / 0.0).item(), f32::INFINITY);
        assert_eq!(
            x.cast::<bool>().to_vec(),
            vec![true, true, true, false, true]
        );
    });
}

#[test]
fn huge_allocation_is_an_error_and_the_process_continues() {
    leak_checked(|| {
        let z = Float32::zeros(1usize << 40);
        let e = z.try_eval().unwrap_err();
        match &e {
            kiln::Error::OutOfMemory { bytes, .. } => assert_eq!(*bytes, 4u128 << 40),
            other => panic!("expected OutOfMemory, got {other}"),
        }
        assert!(e.to_string().contains("4398046511104"), "{e}");
        assert!(z.try_to_vec().is_err());
        // the engine still works
        assert_eq!((Float32::arange(3) + 1.0).to_vec(), vec![1.0, 2.0, 3.0]);
    });
}

#[test]
fn type_errors_are_reported() {
    leak_checked(|| {
        let m = Int32::arange(3).lt(1);
        let e = kiln_core::op(Op::Add, &[Int32::arange(3).id(), Float32::arange(3).id()]);
        assert!(matches!(e, Err(kiln::Error::Type { .. })));
        drop(m);
    });
}

#[test]
fn whos_lists_labels_refs_and_savings() {
    leak_checked(|| {
        let x = Float32::linspace(0.0, 1.0, 1000).label("x");
        let y = (&x * &x + 1.0).sqrt().label("y");
        let w = kiln::whos().to_string();
        assert!(w.contains("x") && w.contains("y"), "{w}");
        assert!(w.contains("Memory savings"), "{w}");
        assert!(w.contains("E/I Refs"), "{w}");
        y.eval();
        let w = kiln::whos().to_string();
        assert!(w.contains("[x]"), "evaluated rows show ready: {w}");
    });
}

#[test]
fn eval_all_evaluates_every_handle() {
    leak_checked(|| {
        let a = Float32::arange(10) + 1.0;
        let b = Int64::arange(3) * 2;
        kiln::eval_all().unwrap();
        assert!(a.is_evaluated() && b.is_evaluated());
    });
}

#[test]
fn compound_assignment_and_scalar_on_the_left() {
    leak_checked(|| {
        let mut x = Float32::arange(4);
        x += 1.0;
        x *= &Float32::full(2.0, 4);
        x -= 0.5;
        x /= 2.0;
        assert_eq!(x.to_vec(), vec![0.75, 1.75, 2.75, 3.75]);
        let y = 2.0 * &x - 1.0;
        assert_eq!(y.to_vec(), vec![0.5, 2.5, 4.5, 6.5]);
        let mut m = UInt32::arange(4);
        m <<= 2u32;
        m |= 1u32;
        m ^= 3u32;
        assert_eq!(m.to_vec(), vec![2, 6, 10, 14]);
        let r = 10i64 % Int64::from_slice(&[3, 4]);
        assert_eq!(r.to_vec(), vec![1, 2]);
        let fm = Float64::from_slice(&[5.5, -5.5]) % 2.0;
        assert_eq!(fm.to_vec(), vec![1.5, -1.5]);
    });
}

#[test]
fn eight_threads_trace_and_evaluate_at_once() {
    leak_checked(|| {
        let handles: Vec<_> = (0..8)
            .map(|t| {
                std::thread::spawn(move || {
                    for round in 0..20 {
                        let n = 1000 + 37 * t + round;
                        let x = Float64::arange(n) * (t as f64 + 1.0);
                        let y = (&x + 1.0) * 2.0;
                        let s = y.sum().item();
                        let want: f64 = (0..n)
                            .map(|i| (i as f64 * (t as f64 + 1.0) + 1.0) * 2.0)
                            .sum();
                        assert_eq!(s, want, "thread {t} round {round}");
                        let mut h = UInt32::zeros(4);
                        scatter_reduce(ReduceOp::Add, &mut h, 1u32, &(UInt32::arange(n) % 4u32));
                        assert_eq!(h.to_vec().iter().map(|&v| v as usize).sum::<usize>(), n);
                    }
                })
            })
            .collect();
        for h in handles {
            h.join().unwrap();
        }
    });
}

#[test]
fn arrays_are_send_and_sync() {
    fn check<T: Send + Sync>() {}
    check::<Float32>();
    check::<Bool>();
}

#[test]
fn integer_identities_fold() {
    leak_checked(|| {
        let x = Int32::arange(6);
        let z = &x * &Int32::from(0);
        assert_eq!(kiln_core::literal_value(z.id()), Some(0));
        assert_eq!(z.len(), 6);
        assert_eq!((&x | 0).id(), x.id());
        let m = x.lt(3);
        assert_eq!(kiln_core::literal_value((&m & false).id()), Some(0));
        // floats keep x * 0 (NaN * 0 is NaN)
        let f = Float32::from_slice(&[f32::NAN, 1.0]) * 0.0;
        assert!(f.to_vec()[0].is_nan());
    });
}

#[test]
fn a_number_broadcast_to_a_shape_stays_a_constant() {
    leak_checked(|| {
        // a 0-d tensor of a literal (how a number meets a tensor from Python) broadcast to a
        // shape is the literal itself, so the kernel reads a constant, not a masked select
        let half = Tensor::from_array(Float32::from(0.5f32), &[]);
        let b = half.broadcast_to(&[4, 3]);
        assert_eq!(
            kiln_core::literal_value(b.array().id()),
            Some(0.5f32.to_bits() as u64)
        );
        assert_eq!(b.to_vec(), vec![0.5; 12]);
        // an evaluated element is read, not folded; an index past the one element reads 0 and
        // is counted, as any out-of-range gather
        let one = Tensor::from_array(Float32::from_slice(&[2.5]), &[]);
        let g = one.broadcast_to(&[5]);
        assert_eq!(kiln_core::literal_value(g.array().id()), None);
        assert_eq!(g.to_vec(), vec![2.5; 5]);
        let before = kiln::stats().oob_reads;
        let lit = Float32::from(1.5f32);
        let past = gather(&lit, &UInt32::full(1, 3));
        assert_eq!(kiln_core::literal_value(past.id()), None);
        assert_eq!(past.to_vec(), vec![0.0; 3]);
        assert_eq!(kiln::stats().oob_reads - before, 3);
        let at0 = gather(&lit, &UInt32::full(0, 3));
        assert_eq!(at0.to_vec(), vec![1.5; 3]);
    });
}

/// `KILN_DEBUG=1` turns out-of-range accesses into visible warnings naming the kernel. The variable is
/// read once per process, so the check runs this test again in a child process with it set.
#[test]
fn debug_mode_reports_out_of_range_accesses() {
    if std::env::var_os("KILN_DEBUG_CHILD").is_some() {
        let src = Float32::from_slice(&[1.0, 2.0]);
        let v = gather(&src, &UInt32::from_slice(&[0, 5])).to_vec();
        let mut t = Float32::zeros(2);
        scatter(&mut t, 1.0f32, &UInt32::from_slice(&[9]));
        t.eval();
        assert_eq!(v, vec![1.0, 0.0]);
        return;
    }
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "debug_mode_reports_out_of_range_accesses",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("KILN_DEBUG", "1")
        .env("KILN_DEBUG_CHILD", "1")
        .env_remove("KILN_LOG")
        .output()
        .unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{text}");
    assert!(text.contains("1 out-of-range gather reads"), "{text}");
    assert!(text.contains("1 out-of-range scatter writes"), "{text}");
    assert!(
        text.contains("kernel "),
        "the warning names the kernel hash: {text}"
    );
}

/// The opening example: one fused kernel plus a reduction, accurate against f64 std.
#[test]
fn the_readme_example_fuses_and_is_accurate() {
    leak_checked(|| {
        let n = 1_000_000;
        let x = Float32::linspace(0.0, 1.0, n).label("x");
        let y = (&x * &x + 1.0).tanh() * (-&x).exp() + x.abs().sqrt();
        // (reductions are lazy since issue 24: the launch happens at the evaluation)
        let (s, d) = delta(|| y.sum().eval().clone());
        assert_eq!(d.launches, 1, "the whole chain is one kernel");
        assert_eq!(d.device_ops, 1, "the reduction is fused into the launch");
        assert!(!y.is_evaluated(), "the full-size array was never stored");
        let reference: f64 = (0..n)
            .map(|i| {
                let xv = (i as f32 * (1.0 / (n - 1) as f32)) as f64;
                (xv * xv + 1.0).tanh() * (-xv).exp() + xv.abs().sqrt()
            })
            .sum();
        let got = s.item() as f64;
        assert!(
            (got - reference).abs() / reference < 1e-5,
            "{got} vs {reference}"
        );
        let w = kiln::whos().to_string();
        assert!(w.contains('x'));
    });
}

#[test]
fn fused_reductions_agree_with_reductions_of_evaluated_arrays() {
    leak_checked(|| {
        for n in [0usize, 1, 5, 16_383, 16_384, 16_385, 100_003] {
            let make = || (Int64::arange(n) * 3 - 7) % 1000;
            // evaluate one copy first: an evaluated variable leaves the CSE table, so the second
            // `make()` is a fresh, lazy variable
            let stored = make();
            stored.eval();
            let lazy = make();
            assert_ne!(lazy.id(), stored.id());
            assert_eq!(lazy.sum().item(), stored.sum().item(), "sum, n={n}");
            assert_eq!(lazy.prod().item(), stored.prod().item(), "prod, n={n}");
            assert_eq!(
                lazy.reduce_min().item(),
                stored.reduce_min().item(),
                "min, n={n}"
            );
            assert_eq!(
                lazy.reduce_max().item(),
                stored.reduce_max().item(),
                "max, n={n}"
            );
            let m = || (Int64::arange(n) % 7).eq(3);
            let ms = m();
            ms.eval();
            assert_eq!(m().count(), ms.count(), "count, n={n}");
            assert_eq!(m().any(), ms.any(), "any, n={n}");
            assert_eq!(m().all(), ms.all(), "all, n={n}");
            assert!(!lazy.is_evaluated());
        }
        // floats: same blocks of work, sums agree to rounding
        let x = Float32::linspace(-1.0, 1.0, 300_001);
        let lazy = (&x * &x).sum().item();
        let stored = {
            let y = &x * &x;
            y.eval();
            y.sum().item()
        };
        assert!(
            (lazy - stored).abs() <= 1e-6 * stored.abs(),
            "{lazy} vs {stored}"
        );
        // out-of-range gathers inside a fused reduction are still counted
        let src = Float32::from_slice(&[1.0, 2.0]);
        let (s, d) = delta(|| gather(&src, &UInt32::arange(4)).sum().item());
        assert_eq!(s, 3.0);
        assert_eq!(d.oob_reads, 2);
    });
}

/// Every `KILN_*` variable is declared once in `kiln_core::config::VARIABLES`, and the README's
/// table of variables names exactly those (no undeclared variable, none left out).
#[test]
fn the_readme_lists_every_declared_variable_and_no_other() {
    let whole = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../README.md"))
        .expect("README.md");
    // the engine's table (the benches' own variables, such as KILN_NUMPY_PYTHON, are elsewhere)
    let start = whole
        .find("## Backends and environment variables")
        .expect("the README's section on environment variables");
    let section = &whole[start..];
    let readme = &section[..section[3..].find("\n## ").map_or(section.len(), |e| e + 3)];
    let declared: std::collections::BTreeSet<&str> = kiln_core::config::VARIABLES
        .iter()
        .map(|v| v.name)
        .collect();
    let mut named = std::collections::BTreeSet::new();
    for (i, _) in readme.match_indices("KILN_") {
        let name: String = readme[i..]
            .chars()
            .take_while(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || *c == '_')
            .collect();
        named.insert(name);
    }
    let missing: Vec<_> = declared.iter().filter(|n| !named.contains(**n)).collect();
    let unknown: Vec<_> = named
        .iter()
        .filter(|n| !declared.contains(n.as_str()))
        .collect();
    assert!(
        missing.is_empty(),
        "declared but not in the README: {missing:?}"
    );
    assert!(
        unknown.is_empty(),
        "in the README but not declared: {unknown:?}"
    );
}

/// The run-time switches take effect, and `set_threads` after the pool started is refused with a
/// message naming the fix.
#[test]
fn configuration_switches_set_at_run_time() {
    leak_checked(|| {
        // (asking the pool its size starts it: from then on its size is fixed)
        let n = kiln_core::launch::threads();
        let e = kiln_core::config::set_threads(n + 1)
            .unwrap_err()
            .to_string();
        assert!(e.contains("before the first evaluation"), "{e}");
        assert_eq!(kiln_core::launch::threads(), n);
        let before = kiln_core::config::freeze_enabled();
        kiln_core::config::set_freeze(!before);
        assert_eq!(kiln_core::config::freeze_enabled(), !before);
        kiln_core::config::set_freeze(before);
    });
}

/// The integration tests are listed one by one in `tests/Cargo.toml` (they live in the package's
/// own directory, where cargo does not discover them): a file added here without its `[[test]]`
/// entry would never run. Every `tests/*.rs` has exactly one entry, and every entry a file.
#[test]
fn every_test_file_has_its_manifest_entry() {
    let dir = env!("CARGO_MANIFEST_DIR");
    let manifest = std::fs::read_to_string(format!("{dir}/Cargo.toml")).expect("tests/Cargo.toml");
    let mut listed: Vec<String> = manifest
        .lines()
        .filter_map(|l| l.strip_prefix("path = \""))
        .filter_map(|l| l.strip_suffix('"'))
        .map(str::to_string)
        .collect();
    let mut files: Vec<String> = std::fs::read_dir(dir)
        .expect("the tests directory")
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.ends_with(".rs"))
        .collect();
    listed.sort();
    files.sort();
    assert_eq!(
        listed, files,
        "tests/Cargo.toml's [[test]] paths against tests/*.rs"
    );
}
