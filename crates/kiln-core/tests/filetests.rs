//! Backend filetests: kernels written as IR text (`Kernel::parse`), with their inputs and the
//! results they must give, in `tests/filetests/*.kir`. Each file runs on the interpreter (the
//! oracle) and on every compiled backend this machine has — Cranelift for this host and for SSE
//! only, LLVM at this host's width and at every width another host may pick — and each must give
//! the file's expected buffers and status counters, bit for bit (NaNs alike).
//!
//! Directives are comments the kernel parser skips, `;! …`:
//!
//! ```text
//! ;! lanes 2..7                  the launch range (required)
//! ;! p0 = 1 2 -3                 a parameter's contents before the run (for an input or output:
//!                                 lanes 0, 1, … up to the range's end; missing values are 0)
//! ;! len p2 = 10                 an indexed or broadcast buffer's length (default: its values)
//! ;! expect p3 = 2.5 nan …       its contents after the run: over the launch range for an
//!                                 output, the whole buffer for an indexed one
//! ;! expect status = 3 0 0       out-of-range reads, writes, truncated loop lanes
//! ;! llvm widths 8 16            pin the LLVM IR generated at these lane widths (golden text in
//!                                 `tests/snapshots/filetests__llvm_<file>_w<width>.snap`)
//! ;! sweep                       also run over every range of `EDGE_RANGES` and compare each
//!                                 backend with the interpreter (the inputs' values repeated
//!                                 cyclically to the range's end)
//! ```
//!
//! Besides the explicit expectations, every run checks that an output's lanes below the range
//! keep what they held (`0xA5` bytes where the file gives no value), and every kernel runs on
//! Cranelift's code-generation variants too (and, on an AVX-512 host, on Cranelift configured as
//! for an AVX2 host) and is compiled for the other kinds of x86-64 host.
//!
//! Values: `true`/`false` (or 0/1) for `bool`, decimal integers, decimal floats, `nan`, `inf`,
//! `-inf`, or raw bits as `0x…`.

mod common;
use common::{
    compiles_for_other_hosts, cranelift_other_host, llvm, same_bits as same, variant_backends, Buf,
};
use kiln_core::backend::cranelift::CraneliftBackend;
use kiln_core::backend::interp::Interp;
use kiln_core::backend::llvm::LlvmBackend;
use kiln_core::backend::{Backend, CompiledKernel, LaunchArgs, STATUS_LEN};
use kiln_core::kernel::{Kernel, ParamKind};
use kiln_core::VarType;
use std::sync::atomic::{AtomicU64, Ordering};

/// One file: its kernel and directives.
struct Case {
    kernel: Kernel,
    range: (usize, usize),
    init: Vec<(usize, Vec<u64>)>,
    lens: Vec<(usize, usize)>,
    expect: Vec<(usize, Vec<u64>)>,
    status: Option<[u64; STATUS_LEN]>,
    /// Lane widths whose generated LLVM IR is pinned (`;! llvm widths …`).
    llvm_widths: Vec<usize>,
    /// Whether the kernel also runs over every range of [`EDGE_RANGES`] (`;! sweep`).
    sweep: bool,
}

/// The ranges of `;! sweep`: empty, single lanes, non-multiples of every vector width, the
/// interpreter's 256-lane chunks, a range starting inside one.
const EDGE_RANGES: [(usize, usize); 9] = [
    (0, 0),
    (0, 1),
    (0, 3),
    (1, 4),
    (3, 37),
    (0, 64),
    (5, 256),
    (0, 257),
    (250, 700),
];

fn value(ty: VarType, w: &str) -> Result<u64, String> {
    let bad = || format!("`{w}` is not a {ty} value");
    if let Some(h) = w.strip_prefix("0x") {
        return u64::from_str_radix(h, 16).map_err(|_| bad());
    }
    let f = |v: f64| match ty {
        VarType::F32 => (v as f32).to_bits() as u64,
        _ => v.to_bits(),
    };
    Ok(match (ty, w) {
        (VarType::Bool, "true" | "1") => 1,
        (VarType::Bool, "false" | "0") => 0,
        (VarType::Bool, _) => return Err(bad()),
        (VarType::F32 | VarType::F64, "nan") => f(f64::NAN),
        (VarType::F32 | VarType::F64, "inf") => f(f64::INFINITY),
        (VarType::F32 | VarType::F64, "-inf") => f(f64::NEG_INFINITY),
        (VarType::F32 | VarType::F64, _) => f(w.parse().map_err(|_| bad())?),
        (VarType::I32 | VarType::I64, _) => {
            w.parse::<i64>().map_err(|_| bad())? as u64 & ty.bit_mask()
        }
        _ => w.parse::<u64>().map_err(|_| bad())?,
    })
}

fn case(text: &str) -> Result<Case, String> {
    let kernel = Kernel::parse(text).map_err(|e| e.to_string())?;
    kernel.verify().map_err(|e| e.join("\n"))?;
    let mut c = Case {
        kernel,
        range: (0, 0),
        init: vec![],
        lens: vec![],
        expect: vec![],
        status: None,
        llvm_widths: vec![],
        sweep: false,
    };
    let mut ranged = false;
    let param = |w: &str, k: &Kernel| -> Result<usize, String> {
        w.trim()
            .strip_prefix('p')
            .and_then(|n| n.parse::<usize>().ok())
            .filter(|&p| p < k.params.len())
            .ok_or(format!("`{w}` is not a parameter of the kernel"))
    };
    for line in text.lines().filter_map(|l| l.trim().strip_prefix(";!")) {
        let line = line.trim();
        if let Some(r) = line.strip_prefix("lanes ") {
            let (a, b) = r.split_once("..").ok_or("expected `lanes A..B`")?;
            c.range = (
                a.trim().parse().map_err(|_| "bad range start")?,
                b.trim().parse().map_err(|_| "bad range end")?,
            );
            ranged = true;
        } else if let Some(r) = line.strip_prefix("expect status = ") {
            let v: Vec<u64> = r
                .split_whitespace()
                .filter_map(|w| w.parse().ok())
                .collect();
            c.status = Some(v.try_into().map_err(|_| "expected three status counters")?);
        } else if line == "sweep" {
            c.sweep = true;
        } else if let Some(r) = line.strip_prefix("llvm widths ") {
            c.llvm_widths = r
                .split_whitespace()
                .map(|w| w.parse().map_err(|_| format!("bad width `{w}`")))
                .collect::<Result<_, _>>()?;
        } else if let Some(r) = line.strip_prefix("len ") {
            let (p, n) = r.split_once('=').ok_or("expected `len pK = N`")?;
            let p = param(p, &c.kernel)?;
            c.lens
                .push((p, n.trim().parse().map_err(|_| "bad length")?));
        } else {
            let (target, vals) = line
                .split_once('=')
                .ok_or(format!("unknown directive `{line}`"))?;
            let (expect, p) = match target.trim().strip_prefix("expect ") {
                Some(p) => (true, param(p, &c.kernel)?),
                None => (false, param(target, &c.kernel)?),
            };
            let ty = c.kernel.params[p].ty;
            let vals = vals
                .split_whitespace()
                .map(|w| value(ty, w))
                .collect::<Result<Vec<_>, _>>()?;
            if expect { &mut c.expect } else { &mut c.init }.push((p, vals));
        }
    }
    if !ranged {
        return Err("no `;! lanes A..B` directive".into());
    }
    Ok(c)
}

/// The buffers of `c` before a run ending at lane `end`: each parameter's given values (repeated
/// to its length when `cycle`), the rest zero for inputs and `0xA5` bytes for outputs.
fn buffers(c: &Case, end: usize, cycle: bool) -> Vec<Buf> {
    c.kernel
        .params
        .iter()
        .enumerate()
        .map(|(p, prm)| {
            let given = c
                .init
                .iter()
                .find(|(q, _)| *q == p)
                .map_or(&[][..], |(_, v)| v.as_slice());
            let len = match c.lens.iter().find(|(q, _)| *q == p) {
                // (inputs and outputs hold at least the lanes a run reads and writes)
                Some(&(_, n)) if matches!(prm.kind, ParamKind::Input | ParamKind::Output) => {
                    n.max(end)
                }
                Some(&(_, n)) => n,
                None => match prm.kind {
                    ParamKind::Input | ParamKind::Output => end,
                    ParamKind::Broadcast => 1,
                    ParamKind::Indexed => given.len(),
                },
            };
            let mut b = if prm.kind == ParamKind::Output {
                Buf::new(prm.ty, len)
            } else {
                Buf::zeroed(prm.ty, len)
            };
            let values: Box<dyn Iterator<Item = &u64>> = if cycle && !given.is_empty() {
                Box::new(given.iter().cycle())
            } else {
                Box::new(given.iter())
            };
            for (i, &v) in values.enumerate().take(len) {
                b.set(i, v);
            }
            b
        })
        .collect()
}

/// Runs `c` on `backend` over `range` (buffers as [`buffers`] makes them); the buffers and
/// status after the run.
fn run_over(
    c: &Case,
    compiled: &dyn CompiledKernel,
    (start, end): (usize, usize),
    cycle: bool,
) -> (Vec<Buf>, [u64; STATUS_LEN]) {
    let bufs = buffers(c, end, cycle);
    let ptrs: Vec<*mut u8> = bufs.iter().map(Buf::ptr).collect();
    let lens: Vec<u64> = bufs.iter().map(|b| b.len as u64).collect();
    let status: [AtomicU64; STATUS_LEN] = Default::default();
    let args = LaunchArgs {
        ptrs: ptrs.as_ptr(),
        lens: lens.as_ptr(),
        status: status.as_ptr(),
    };
    // SAFETY: one buffer per parameter, of its type, inputs and outputs holding at least the
    // range's end (plus the allocator's slack), broadcast ones 1 element, indexed ones their len.
    unsafe { compiled.run(&args, start as u64, end as u64) };
    (
        bufs,
        std::array::from_fn(|i| status[i].load(Ordering::Relaxed)),
    )
}

/// Runs `c` over its own range.
fn run(c: &Case, backend: &dyn Backend) -> Result<(Vec<Buf>, [u64; STATUS_LEN]), String> {
    let compiled = backend.compile(&c.kernel).map_err(|e| e.to_string())?;
    Ok(run_over(c, &*compiled, c.range, false))
}

/// Whether every output's lanes below `start` still hold what they held before the run.
fn untouched_below(
    c: &Case,
    bufs: &[Buf],
    (start, end): (usize, usize),
    cycle: bool,
) -> Result<(), String> {
    let before = buffers(c, end, cycle);
    for (p, prm) in c.kernel.params.iter().enumerate() {
        if prm.kind != ParamKind::Output {
            continue;
        }
        for i in 0..start.min(bufs[p].len) {
            if bufs[p].get(i) != before[p].get(i) {
                return Err(format!(
                    "p{p}[{i}] = {:#x} was written, below the range {start}..{end}",
                    bufs[p].get(i)
                ));
            }
        }
    }
    Ok(())
}

/// Whether `got` (a backend's run over `range`) equals `want` (the interpreter's): outputs over
/// the range, indexed buffers whole, the status counters.
fn same_as_oracle(
    c: &Case,
    got: &(Vec<Buf>, [u64; STATUS_LEN]),
    want: &(Vec<Buf>, [u64; STATUS_LEN]),
    (start, end): (usize, usize),
) -> Result<(), String> {
    if got.1 != want.1 {
        return Err(format!(
            "status {:?}, the interpreter's {:?}",
            got.1, want.1
        ));
    }
    for (p, prm) in c.kernel.params.iter().enumerate() {
        let lanes = match prm.kind {
            ParamKind::Output => start..end,
            ParamKind::Indexed => 0..want.0[p].len,
            _ => continue,
        };
        for i in lanes {
            let (g, w) = (got.0[p].get(i), want.0[p].get(i));
            if !same(prm.ty, g, w) {
                return Err(format!("p{p}[{i}] = {g:#x}, the interpreter's {w:#x}"));
            }
        }
    }
    Ok(())
}

/// Whether a run gave the file's expectations.
fn check(c: &Case, bufs: &[Buf], status: [u64; STATUS_LEN]) -> Result<(), String> {
    untouched_below(c, bufs, c.range, false)?;
    if let Some(want) = c.status {
        if want != status {
            return Err(format!("status {status:?}, expected {want:?}"));
        }
    }
    for (p, want) in &c.expect {
        let b = &bufs[*p];
        let lanes: Vec<usize> = match c.kernel.params[*p].kind {
            ParamKind::Output | ParamKind::Input => (c.range.0..c.range.1).collect(),
            _ => (0..b.len).collect(),
        };
        if lanes.len() != want.len() {
            return Err(format!(
                "expect p{p} gives {} values for {} elements",
                want.len(),
                lanes.len()
            ));
        }
        for (&i, &w) in lanes.iter().zip(want) {
            if !same(b.ty, b.get(i), w) {
                return Err(format!("p{p}[{i}] = {:#x}, expected {w:#x}", b.get(i)));
            }
        }
    }
    Ok(())
}

/// Every backend the files run on: the interpreter, Cranelift for this host and for SSE only,
/// LLVM at this host's width and at every width another host may pick, and Cranelift's
/// code-generation variants. (Created once per test process.)
fn backends() -> Vec<(String, &'static dyn Backend)> {
    fn leak(b: impl Backend + 'static) -> &'static dyn Backend {
        Box::leak(Box::new(b))
    }
    let mut v: Vec<(String, &'static dyn Backend)> = vec![
        ("interpreter".into(), leak(Interp)),
        (
            "cranelift".into(),
            leak(CraneliftBackend::new().expect("cranelift")),
        ),
        (
            "cranelift sse".into(),
            leak(
                CraneliftBackend::with_settings(&[
                    ("has_avx", "false"),
                    ("has_avx2", "false"),
                    ("has_fma", "false"),
                    ("has_avx512f", "false"),
                ])
                .expect("cranelift (SSE only)"),
            ),
        ),
    ];
    if let Some(b) = llvm() {
        v.push(("llvm".into(), b as &dyn Backend));
        for w in [4usize, 8, 16, 32, 64] {
            if let Ok(b) = LlvmBackend::create_with(false, w) {
                v.push((format!("llvm w{w}"), leak(b.strict())));
            }
        }
    }
    for (name, be) in variant_backends() {
        v.push((format!("cranelift {name}"), be as &dyn Backend));
    }
    // on an AVX-512 host, Cranelift as an AVX2 host configures it (elsewhere it is compiled only,
    // by `compiles_for_other_hosts`)
    if let (be, true) = cranelift_other_host() {
        v.push(("cranelift without AVX-512".into(), be as &dyn Backend));
    }
    v
}

#[test]
fn every_filetest_passes_on_every_backend() {
    let backends = backends();
    let mut failures = Vec::new();
    let mut swept = 0;
    for (name, text) in files() {
        let c = match case(&text) {
            Ok(c) => c,
            Err(e) => {
                failures.push(format!("{name}: {e}"));
                continue;
            }
        };
        if let Err(e) = compiles_for_other_hosts(&c.kernel) {
            failures.push(format!("{name}: {e}"));
        }
        for (be, backend) in &backends {
            if let Err(e) = run(&c, *backend).and_then(|(b, s)| check(&c, &b, s)) {
                failures.push(format!("{name} on {be}: {e}"));
            }
        }
        if c.sweep {
            swept += 1;
            failures.extend(
                sweep(&c, &backends)
                    .into_iter()
                    .map(|e| format!("{name}: {e}")),
            );
        }
    }
    assert!(swept >= 20, "only {swept} files sweep the edge ranges");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// `;! sweep`: every backend over every range of [`EDGE_RANGES`] against the interpreter.
fn sweep(c: &Case, backends: &[(String, &'static dyn Backend)]) -> Vec<String> {
    let oracle = match Interp.compile(&c.kernel) {
        Ok(k) => k,
        Err(e) => return vec![format!("interpreter: {e}")],
    };
    let want: Vec<_> = EDGE_RANGES
        .iter()
        .map(|&r| run_over(c, &*oracle, r, true))
        .collect();
    let mut failures = Vec::new();
    for (be, backend) in backends {
        let compiled = match backend.compile(&c.kernel) {
            Ok(k) => k,
            Err(e) => {
                failures.push(format!("on {be}: {e}"));
                continue;
            }
        };
        for (&range, want) in EDGE_RANGES.iter().zip(&want) {
            let got = run_over(c, &*compiled, range, true);
            let checked = untouched_below(c, &got.0, range, true)
                .and_then(|()| same_as_oracle(c, &got, want, range));
            if let Err(e) = checked {
                failures.push(format!("on {be} over {}..{}: {e}", range.0, range.1));
            }
        }
    }
    failures
}

/// The filetests' `.kir` files, sorted, with their names.
fn files() -> Vec<(String, String)> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/filetests");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .expect("tests/filetests")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "kir"))
        .collect();
    files.sort();
    assert!(files.len() >= 5, "the filetests are missing from {dir:?}");
    files
        .iter()
        .map(|f| {
            let stem = f.file_stem().unwrap_or_default().to_string_lossy();
            (
                stem.into_owned(),
                std::fs::read_to_string(f).expect("readable"),
            )
        })
        .collect()
}

/// The LLVM IR kiln generates for a kernel is pinned for the files that ask (`;! llvm widths`): a
/// diff is a code-generation change to review (the snapshot shows it), not only a result that
/// still matches. The text is generated without LLVM, so this runs on every host; the filetest
/// above compiles and runs the same kernels on LLVM where it is installed. The one host-dependent
/// number, the output length past which stores stream (the last-level cache's size), is masked.
#[test]
fn llvm_ir_is_golden() {
    let mut pinned = 0;
    for (name, text) in files() {
        let c = case(&text).unwrap_or_else(|e| panic!("{name}: {e}"));
        for &w in &c.llvm_widths {
            let ir = kiln_core::backend::llvm::ir::module(&c.kernel, "kernel", w);
            let masked: Vec<String> = ir
                .lines()
                .map(|l| match l.split_once("%bigout = icmp uge i64 ") {
                    Some((pre, rest)) => {
                        let len = rest.split(',').next().unwrap_or_default();
                        format!("{pre}%bigout = icmp uge i64 {len}, <cache bytes / element>")
                    }
                    None => l.to_string(),
                })
                .collect();
            insta::assert_snapshot!(format!("llvm_{name}_w{w}"), masked.join("\n"));
            pinned += 1;
        }
    }
    assert!(pinned >= 8, "only {pinned} kernels have golden LLVM IR");
}

/// A file with a wrong expectation fails, naming the element (the runner is not vacuous).
#[test]
fn a_wrong_expectation_is_reported() {
    let c = case(
        ";! lanes 0..3\n;! p0 = 1 2 3\n;! expect p1 = 2 4 7\np0: in i32\np1: out i32\nr0 = load.i32 p0\nr1 = add.i32 r0, r0\nstore.i32 p1, r1\n",
    )
    .unwrap();
    let (bufs, status) = run(&c, &Interp).unwrap();
    let e = check(&c, &bufs, status).unwrap_err();
    assert!(e.contains("p1[2] = 0x6, expected 0x7"), "{e}");
}

/// An output lane below the range that changed is reported, and a sweep finds a backend that
/// differs from the interpreter over one of its ranges.
#[test]
fn a_write_below_the_range_and_a_sweep_difference_are_reported() {
    let c = case(
        ";! lanes 2..4\n;! sweep\n;! p0 = 1 2 3 4\n;! expect p1 = 6 8\np0: in i32\np1: out i32\nr0 = load.i32 p0\nr1 = add.i32 r0, r0\nstore.i32 p1, r1\n",
    )
    .unwrap();
    let (mut bufs, status) = run(&c, &Interp).unwrap();
    check(&c, &bufs, status).unwrap();
    bufs[1].set(1, 0);
    let e = check(&c, &bufs, status).unwrap_err();
    assert!(
        e.contains("p1[1] = 0x0 was written, below the range 2..4"),
        "{e}"
    );
    // a "backend" that doubles the other way round: r0 - r0 (0 where the interpreter has 2x)
    let wrong = case(&c_text_with("sub.i32 r0, r0")).unwrap().kernel;
    struct Wrong(Kernel);
    impl Backend for Wrong {
        fn kind(&self) -> kiln_core::backend::BackendKind {
            Interp.kind()
        }
        fn compile(
            &self,
            _: &Kernel,
        ) -> kiln_core::error::Result<std::sync::Arc<dyn CompiledKernel>> {
            Interp.compile(&self.0)
        }
    }
    let be: &'static dyn Backend = Box::leak(Box::new(Wrong(wrong)));
    let failures = sweep(&c, &[("wrong".into(), be)]);
    assert!(
        failures
            .iter()
            .any(|f| f.contains("on wrong over 3..37: p1[3] = 0x0, the interpreter's")),
        "{failures:?}"
    );
}

fn c_text_with(op: &str) -> String {
    format!(
        ";! lanes 2..4\np0: in i32\np1: out i32\nr0 = load.i32 p0\nr1 = {op}\nstore.i32 p1, r1\n"
    )
}
