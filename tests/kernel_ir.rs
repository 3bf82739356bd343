//! Golden tests of kernel IR text: what the scheduler builds for representative programs. A diff in
//! a snapshot is a design decision to review. Each test also asserts the behaviour it shows, so a
//! snapshot is never the only check.

mod common;
use common::{delta, leak_checked};
use kiln::prelude::*;

fn ir<T: kiln::Scalar>(ids: &[&Array<T>]) -> Vec<kiln_core::kernel::Kernel> {
    kiln_core::kernels_for(&ids.iter().map(|a| a.id()).collect::<Vec<_>>())
}

/// The text form is `Kernel::parse`'s input: every golden kernel parses back to itself.
fn parses_back(k: &kiln_core::kernel::Kernel) {
    let text = k.to_string();
    let back = kiln_core::kernel::Kernel::parse(&text).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(&back, k, "{text}");
    assert_eq!(back.hash(), k.hash());
}

#[test]
fn fused_chain_keeps_intermediates_in_registers() {
    leak_checked(|| {
        let x = Float32::from_vec((0..100).map(|i| i as f32).collect());
        let y = (&x * &x + 1.0).sqrt() * 0.5;
        let ks = ir(&[&y]);
        assert_eq!(ks.len(), 1);
        insta::assert_snapshot!("fused_chain", ks[0].to_string());
        parses_back(&ks[0]);
        // one input, one output: the products and sums never touch memory
        assert_eq!(ks[0].params.len(), 2);
        let (_, d) = delta(|| y.eval());
        assert_eq!(d.launches, 1);
    });
}

#[test]
fn two_outputs_in_one_kernel() {
    leak_checked(|| {
        let x = Float32::from_vec((0..100).map(|i| i as f32).collect());
        let a = &x + 1.0;
        let b = (&x * 2.0).lt(50.0);
        let ks = kiln_core::kernels_for(&[a.id(), b.id()]);
        assert_eq!(ks.len(), 1);
        insta::assert_snapshot!("two_outputs", ks[0].to_string());
        parses_back(&ks[0]);
        let (_, d) = delta(|| kiln::eval!(a, b));
        assert_eq!(d.launches, 1, "both outputs come from one launch");
        assert_eq!(b.count(), 25);
    });
}

#[test]
fn another_size_is_a_cache_hit() {
    leak_checked(|| {
        let prog = |n: usize| Float64::arange(n) * 3.0 + 2.0;
        let (small, large) = (prog(10), prog(100_000));
        let (ks, kl) = (ir(&[&small]), ir(&[&large]));
        assert_eq!(ks[0].to_string(), kl[0].to_string());
        assert_eq!(ks[0].hash(), kl[0].hash());
        insta::assert_snapshot!("arange_affine", ks[0].to_string());
        parses_back(&ks[0]);
        small.eval();
        let (_, d) = delta(|| large.eval());
        assert_eq!((d.cache_hits, d.kernels_compiled), (1, 0));
        assert_eq!(large.to_vec()[99_999], 299_999.0);
    });
}

#[test]
fn gather_and_scatter_kernel() {
    leak_checked(|| {
        let src = Float32::from_vec(vec![1.0, 2.0, 3.0]);
        let idx = UInt32::arange(8) % 4u32;
        let mut target = Float32::zeros(8);
        target.eval();
        let g = gather(&src, &idx);
        scatter(&mut target, &(&g * 10.0), &(UInt32::arange(8) + 0u32));
        let ks = kiln_core::kernels_for(&[]);
        assert_eq!(
            ks.len(),
            1,
            "the pending scatter is one kernel with the gather fused in"
        );
        insta::assert_snapshot!("gather_scatter", ks[0].to_string());
        parses_back(&ks[0]);
        let (_, d) = delta(|| target.to_vec());
        assert_eq!(
            d.oob_reads, 2,
            "index 3 is outside the 3-element source, twice"
        );
        assert_eq!(
            target.to_vec(),
            vec![10.0, 20.0, 30.0, 0.0, 10.0, 20.0, 30.0, 0.0]
        );
    });
}

// ---------------------------------------------------------------------------------------------
// Control flow: one loop, one branch, one call

/// The lines of a kernel's body (after the header and the parameters), each with its indentation.
fn body_lines(k: &kiln_core::kernel::Kernel) -> Vec<String> {
    k.to_string()
        .lines()
        .skip(1 + k.params.len())
        .map(str::to_string)
        .collect()
}

/// The indentation (in spaces) of the first line whose text after the indentation starts with or
/// contains `needle`.
fn indent_of(lines: &[String], needle: &str) -> usize {
    let l = lines
        .iter()
        .find(|l| l.contains(needle))
        .unwrap_or_else(|| panic!("no line with {needle:?} in\n{}", lines.join("\n")));
    l.len() - l.trim_start().len()
}

#[test]
fn collatz_loop_kernel() {
    leak_checked(|| {
        let x = UInt32::arange(8) + 1u32;
        let (_, steps) = kiln::while_loop(
            (x, UInt32::zeros(8)),
            |(x, _)| x.ne(1u32),
            |(x, n)| {
                (
                    select(&(x & 1u32).eq(0u32), &(x >> 1u32), &(x * 3u32 + 1u32)),
                    n + 1u32,
                )
            },
        )
        .unwrap();
        let ks = ir(&[&steps]);
        assert_eq!(ks.len(), 1, "the whole loop is one kernel");
        insta::assert_snapshot!("collatz_loop", ks[0].to_string());
        parses_back(&ks[0]);
        let text = ks[0].to_string();
        let lines = body_lines(&ks[0]);
        // two carried entries: two phis, two nexts, one while, one loop/endloop pair
        assert_eq!(text.matches(" = phi.u32 ").count(), 2, "{text}");
        assert_eq!(text.matches("  next r").count(), 2, "{text}");
        assert_eq!(text.matches("  while r").count(), 1, "{text}");
        assert_eq!(text.matches(" = loop").count(), 1, "{text}");
        assert_eq!(text.matches("  endloop r").count(), 1, "{text}");
        // the body is indented one level deeper than the loop and its end
        let (l, w, e) = (
            indent_of(&lines, " = loop"),
            indent_of(&lines, "while r"),
            indent_of(&lines, "endloop r"),
        );
        assert_eq!((w, e), (l + 2, l), "{text}");
        assert_eq!(indent_of(&lines, " = phi."), l + 2, "{text}");
        assert_eq!(indent_of(&lines, "next r"), l + 2, "{text}");
        let (_, d) = delta(|| steps.eval());
        assert_eq!(d.launches, 1);
        assert_eq!(steps.to_vec(), vec![0, 1, 7, 2, 5, 8, 16, 3]);
    });
}

#[test]
fn if_then_else_kernel() {
    leak_checked(|| {
        let x = Float32::from_vec((0..8).map(|i| i as f32).collect());
        let y = kiln::if_then_else(
            &x.lt(4.0),
            |x: &Float32| x * 2.0,
            |x: &Float32| x + 100.0,
            &x,
        )
        .unwrap();
        let ks = ir(&[&y]);
        assert_eq!(ks.len(), 1);
        insta::assert_snapshot!("if_then_else", ks[0].to_string());
        parses_back(&ks[0]);
        let text = ks[0].to_string();
        let lines = body_lines(&ks[0]);
        assert_eq!(text.matches(" = switch (if)").count(), 1, "{text}");
        assert_eq!(text.matches("  case r").count(), 2, "{text}");
        assert_eq!(text.matches("  yield 0, r").count(), 2, "{text}");
        assert_eq!(text.matches("  endswitch r").count(), 1, "{text}");
        assert_eq!(text.matches(" = out.f32 r").count(), 1, "{text}");
        let s = indent_of(&lines, " = switch (if)");
        assert_eq!(indent_of(&lines, "case r"), s + 2, "{text}");
        assert_eq!(indent_of(&lines, "yield 0"), s + 4, "{text}");
        assert_eq!(indent_of(&lines, "endswitch r"), s, "{text}");
        assert_eq!(indent_of(&lines, " = out.f32"), s, "{text}");
        assert_eq!(
            y.to_vec(),
            vec![0.0, 2.0, 4.0, 6.0, 104.0, 105.0, 106.0, 107.0]
        );
    });
}

#[test]
fn switch_over_three_targets_kernel() {
    leak_checked(|| {
        let id = UInt32::from_vec(vec![0, 1, 2, 3, 2, 1, 0, 9]);
        let x = Float32::from_vec((0..8).map(|i| i as f32).collect());
        let f0 = |x: &Float32| x * 2.0;
        let f1 = |x: &Float32| x + 1.0;
        let f2 = |x: &Float32| x * x;
        let y = kiln::switch(&id, &[&f0, &f1, &f2], &x).unwrap();
        let ks = ir(&[&y]);
        assert_eq!(ks.len(), 1);
        insta::assert_snapshot!("switch_three_targets", ks[0].to_string());
        parses_back(&ks[0]);
        let text = ks[0].to_string();
        let lines = body_lines(&ks[0]);
        assert_eq!(text.matches(" = switch (call)").count(), 1, "{text}");
        assert_eq!(text.matches("  case r").count(), 3, "{text}");
        assert_eq!(text.matches("  yield 0, r").count(), 3, "{text}");
        assert_eq!(text.matches("  endswitch r").count(), 1, "{text}");
        let s = indent_of(&lines, " = switch (call)");
        assert_eq!(indent_of(&lines, "case r"), s + 2, "{text}");
        assert_eq!(indent_of(&lines, "endswitch r"), s, "{text}");
        // lanes 3 and 7 are out of range: 0
        assert_eq!(y.to_vec(), vec![0.0, 2.0, 4.0, 0.0, 16.0, 6.0, 12.0, 0.0]);
    });
}

/// The register a line defines (`rN = ...`), if any.
fn defined(line: &str) -> Option<String> {
    let t = line.trim_start();
    let (r, rest) = t.split_once(" = ")?;
    (r.starts_with('r') && !rest.is_empty()).then(|| r.to_string())
}

#[test]
fn loop_invariants_are_hoisted_and_unchanged_state_is_not_a_phi() {
    leak_checked(|| {
        let a = Float32::from_vec((0..8).map(|i| i as f32).collect());
        let b = Float32::from_vec((0..8).map(|i| 0.5 + i as f32).collect());
        let k = Float32::from_vec(vec![3.0; 8]);
        let (x, k2, i) = kiln::while_loop(
            (Float32::zeros(8), k, UInt32::zeros(8)),
            |(_, _, i)| i.lt(4u32),
            |(x, k, i)| (x + &a * &b + k, k.clone(), i + 1u32),
        )
        .unwrap();
        let ks = kiln_core::kernels_for(&[x.id(), k2.id(), i.id()]);
        assert_eq!(ks.len(), 1);
        let text = ks[0].to_string();
        let lines = body_lines(&ks[0]);
        let loop_at = lines
            .iter()
            .position(|l| l.contains(" = loop"))
            .unwrap_or_else(|| panic!("no loop in\n{text}"));
        // the product of the two inputs is computed once, before the loop
        let mul_at = lines
            .iter()
            .position(|l| l.contains(" = mul.f32 "))
            .unwrap_or_else(|| panic!("no mul in\n{text}"));
        assert!(mul_at < loop_at, "a * b is not hoisted:\n{text}");
        assert_eq!(
            lines.iter().filter(|l| l.contains(" = mul.f32 ")).count(),
            1,
            "{text}"
        );
        // the two loads of a and b are before the loop too
        let loads: Vec<usize> = lines
            .iter()
            .enumerate()
            .filter(|(_, l)| l.contains(" = load.f32 "))
            .map(|(p, _)| p)
            .collect();
        assert!(loads.iter().all(|&p| p < loop_at), "{text}");
        // `k` never changes: x and i are phis, k is not
        let phis: Vec<&String> = lines.iter().filter(|l| l.contains(" = phi.")).collect();
        assert_eq!(phis.len(), 2, "{text}");
        assert_eq!(
            phis.iter().filter(|l| l.contains("phi.f32")).count(),
            1,
            "{text}"
        );
        assert_eq!(
            phis.iter().filter(|l| l.contains("phi.u32")).count(),
            1,
            "{text}"
        );
        assert!(lines
            .iter()
            .all(|l| defined(l).is_some() || !l.contains(" = ")));
        let want: Vec<f32> = (0..8)
            .map(|j| {
                let mut x = 0.0f32;
                for _ in 0..4 {
                    x = x + j as f32 * (0.5 + j as f32) + 3.0;
                }
                x
            })
            .collect();
        assert_eq!(x.to_vec(), want);
        assert_eq!(k2.to_vec(), vec![3.0; 8]);
        assert_eq!(i.to_vec(), vec![4; 8]);
    });
}

/// Kernel text written by hand runs like the kernel the scheduler would build; bad text is an
/// error naming its line and what is wrong.
#[test]
fn kernel_text_parses_runs_and_reports_its_errors() {
    use kiln_core::backend::{self, BackendKind, LaunchArgs, STATUS_LEN};
    use kiln_core::kernel::Kernel;
    let k = Kernel::parse(
        "
        ; y = x * 2.5 + i
        p0: in f32
        p1: out f32
        r0 = load.f32 p0
        r1 = const.f32 2.5
        r2 = mul.f32 r0, r1
        r3 = index.u32
        r4 = cast.u32.f32 r3   ; the lane index as a float
        r5 = add.f32 r2, r4
        store.f32 p1, r5
        ",
    )
    .unwrap();
    k.verify()
        .unwrap_or_else(|e| panic!("{}\n{k}", e.join("\n")));
    let x: Vec<f32> = (0..5).map(|i| i as f32).collect();
    for kind in [BackendKind::Interp, BackendKind::Cranelift] {
        let compiled = backend::create(kind).unwrap().compile(&k).unwrap();
        let mut y = vec![0f32; 5 + 16];
        let mut xs = x.clone();
        xs.resize(5 + 16, 0.0);
        let ptrs = [xs.as_mut_ptr() as *mut u8, y.as_mut_ptr() as *mut u8];
        let lens = [5u64, 5];
        let status: [std::sync::atomic::AtomicU64; STATUS_LEN] = Default::default();
        let args = LaunchArgs {
            ptrs: ptrs.as_ptr(),
            lens: lens.as_ptr(),
            status: status.as_ptr(),
        };
        // SAFETY: one buffer per parameter with 16 elements of slack past the 5 lanes run
        unsafe { compiled.run(&args, 0, 5) };
        assert_eq!(&y[..5], &[0.0, 3.5, 7.0, 10.5, 14.0], "{kind:?}");
    }
    let bad = [
        (
            "p0: in f32\nr0 = load.f32 p0\nr2 = neg.f32 r0",
            3,
            "registers are positions",
        ),
        ("r0 = frob.f32", 1, "unknown op `frob.f32`"),
        ("r0 = const.i32 3000000000", 1, "not a i32 literal"),
        (
            "r0 = const.u32 1\nr1 = add.u32 r0, r7",
            2,
            "r7 is used before it is defined",
        ),
        ("p0: sideways f32", 1, "unknown parameter kind"),
        ("r0 = index.u32\nr1 = cast.f32.f64 r0", 2, "not of type f32"),
    ];
    for (text, line, why) in bad {
        let e = Kernel::parse(text).unwrap_err();
        assert_eq!(e.line, line, "{e}");
        assert!(e.to_string().contains(why), "{e}");
    }
}
