//! Differential tests: the Cranelift backend against the reference interpreter.
//!
//! Random well-typed kernels (every op, every type combination `Kernel::verify` accepts) run on both
//! backends over copies of the same random buffers and random `[start, end)` ranges; every buffer and
//! the status counters must agree bit for bit (any NaN equals any NaN). Hand-written tests pin the
//! edge cases of `op`'s integer and float rules, gather/scatter bounds counting and big kernels.
//! Random kernels with nested loops and switches (`build_region_kernel`) run the same way, with
//! hand-written region edge cases, the region checks of `Kernel::verify`, and minimised known
//! disagreements (ignored tests, each naming the bug).

mod common;
use common::{
    compiles_for_other_hosts, cranelift_other_host, llvm, same_bits, variant_backends, Buf,
};
use kiln_core::backend::cranelift::CraneliftBackend;
use kiln_core::backend::interp::Interp;
use kiln_core::backend::llvm::LlvmBackend;
use kiln_core::backend::{Backend, CompiledKernel, LaunchArgs, STATUS_LEN};
use kiln_core::kernel::{Inst, Kernel, Param, ParamKind, Reg};
use kiln_core::{Op, ReduceOp, VarType};
use proptest::prelude::*;
use proptest::test_runner::Config;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

// ---------------------------------------------------------------------------------------------
// Buffers with slack, launching.

/// Runs `kernel` compiled by `backend` over `[start, end)` on `bufs`; returns the status counters.
fn launch(
    backend: &dyn Backend,
    kernel: &Kernel,
    bufs: &mut [Buf],
    start: u64,
    end: u64,
) -> [u64; STATUS_LEN] {
    let compiled = backend
        .compile(kernel)
        .unwrap_or_else(|e| panic!("{e}\n{kernel}"));
    run(&*compiled, bufs, start, end)
}

/// Runs a compiled kernel over `[start, end)` on `bufs`; returns the status counters.
fn run(compiled: &dyn CompiledKernel, bufs: &mut [Buf], start: u64, end: u64) -> [u64; STATUS_LEN] {
    let ptrs: Vec<*mut u8> = bufs.iter().map(|b| b.ptr()).collect();
    let lens: Vec<u64> = bufs.iter().map(|b| b.len as u64).collect();
    let status: [AtomicU64; STATUS_LEN] = Default::default();
    let args = LaunchArgs {
        ptrs: ptrs.as_ptr(),
        lens: lens.as_ptr(),
        status: status.as_ptr(),
    };
    // SAFETY: one buffer per parameter of the parameter's type; inputs/outputs hold `end` elements
    // (plus slack), broadcast ones 1, indexed ones `len`.
    unsafe { compiled.run(&args, start, end) };
    std::array::from_fn(|i| status[i].load(Ordering::Relaxed))
}

fn cranelift() -> &'static CraneliftBackend {
    static BE: OnceLock<CraneliftBackend> = OnceLock::new();
    BE.get_or_init(|| CraneliftBackend::new().expect("cranelift backend"))
}

fn cranelift_sse_only() -> &'static CraneliftBackend {
    static BE: OnceLock<CraneliftBackend> = OnceLock::new();
    BE.get_or_init(|| {
        let off = [
            "has_avx",
            "has_avx2",
            "has_fma",
            "has_bmi1",
            "has_bmi2",
            "has_lzcnt",
            "has_avx512f",
        ];
        let mut overrides: Vec<(&str, &str)> = off.iter().map(|k| (*k, "false")).collect();
        overrides.push(("enable_verifier", "true"));
        CraneliftBackend::with_settings(&overrides).expect("cranelift backend (SSE only)")
    })
}

fn fmt_bits(ty: VarType, b: u64) -> String {
    match ty {
        VarType::F32 => format!("{:#010x} ({:?})", b as u32, f32::from_bits(b as u32)),
        VarType::F64 => format!("{b:#018x} ({:?})", f64::from_bits(b)),
        VarType::I32 => format!("{}", b as u32 as i32),
        VarType::I64 => format!("{}", b as i64),
        _ => format!("{b}"),
    }
}

/// Runs both backends on copies of `bufs` and compares every buffer and the status.
fn check(
    kernel: &Kernel,
    bufs: &[Buf],
    start: u64,
    end: u64,
    backend: &dyn Backend,
) -> Result<(), String> {
    let compiled = backend
        .compile(kernel)
        .map_err(|e| format!("{e}\n{kernel}"))?;
    check_compiled(kernel, &*compiled, bufs, start, end)?;
    // every hand-written case runs through LLVM too, when this machine has it: at the width this
    // host's backend picks, and at the widest one any host's can pick
    if let Some(l) = llvm() {
        let compiled = l
            .compile(kernel)
            .map_err(|e| format!("llvm: {e}\n{kernel}"))?;
        check_compiled(kernel, &*compiled, bufs, start, end).map_err(|e| format!("llvm: {e}"))?;
    }
    if let Some(bes) = llvm_widths() {
        let (w, l) = bes.last().expect("widths");
        let compiled = l
            .compile(kernel)
            .map_err(|e| format!("llvm w{w}: {e}\n{kernel}"))?;
        check_compiled(kernel, &*compiled, bufs, start, end)
            .map_err(|e| format!("llvm w{w}: {e}"))?;
    }
    // on an AVX-512 host, Cranelift as it is configured on an AVX2 host runs here too
    if let (be, true) = cranelift_other_host() {
        let compiled = be
            .compile(kernel)
            .map_err(|e| format!("cranelift without AVX-512: {e}\n{kernel}"))?;
        check_compiled(kernel, &*compiled, bufs, start, end)
            .map_err(|e| format!("cranelift without AVX-512: {e}"))?;
    }
    compiles_for_other_hosts(kernel)
}

/// As `check`, with the kernel already compiled by the backend under test.
fn check_compiled(
    kernel: &Kernel,
    compiled: &dyn CompiledKernel,
    bufs: &[Buf],
    start: u64,
    end: u64,
) -> Result<(), String> {
    let mut want: Vec<Buf> = bufs.iter().map(Buf::copy).collect();
    let mut got: Vec<Buf> = bufs.iter().map(Buf::copy).collect();
    let s_want = launch(&Interp, kernel, &mut want, start, end);
    let s_got = run(compiled, &mut got, start, end);
    for (p, (w, g)) in want.iter().zip(&got).enumerate() {
        for i in 0..w.len {
            let (x, y) = (w.get(i), g.get(i));
            if !same_bits(w.ty, x, y) {
                return Err(format!(
                    "p{p} ({:?} {}) element {i} of {}: interpreter {} vs compiled {} (range {start}..{end})\n{kernel}",
                    kernel.params[p].kind,
                    w.ty,
                    w.len,
                    fmt_bits(w.ty, x),
                    fmt_bits(w.ty, y)
                ));
            }
        }
    }
    if s_want != s_got {
        return Err(format!(
            "status: interpreter {s_want:?} vs compiled {s_got:?} (range {start}..{end})\n{kernel}"
        ));
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Random values.

/// SplitMix64: a small deterministic generator for buffer contents.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

const F64_SPECIALS: &[f64] = &[
    0.0,
    -0.0,
    1.0,
    -1.0,
    0.5,
    -0.5,
    1.5,
    2.5,
    -2.5,
    3.5,
    f64::NAN,
    f64::INFINITY,
    f64::NEG_INFINITY,
    f64::MIN_POSITIVE,
    5e-324,
    f64::MAX,
    f64::MIN,
    2147483647.0,
    2147483647.5,
    2147483648.0,
    -2147483648.0,
    -2147483649.0,
    4294967295.0,
    4294967296.0,
    9.223372036854775e18,
    -9.223372036854775e18,
    1.8446744073709552e19,
    1e300,
    -1e300,
    1e-40,
    16777217.0,
    9007199254740993.0,
    // the bounds of float-to-integer conversion: saturation starts exactly there
    9223372036854775808.0,
    -9223372036854775808.0,
    18446744073709551616.0,
    -0.99,
    4294967295.5,
    -2147483648.5,
];

/// Random bits of type `ty`, biased toward the values where semantics get interesting.
fn rand_bits(rng: &mut Rng, ty: VarType) -> u64 {
    let pick = rng.below(10);
    let bits = match ty {
        VarType::Bool => rng.next() & 1,
        VarType::F32 | VarType::F64 => {
            let v = match pick {
                0..=2 => F64_SPECIALS[rng.below(F64_SPECIALS.len() as u64) as usize],
                3..=5 => (rng.below(161) as f64 - 80.0) / 4.0,
                6 => -(f64::from_bits(rng.next() >> 2)),
                _ => {
                    let raw = rng.next();
                    return if ty == VarType::F32 {
                        raw & 0xffff_ffff
                    } else {
                        raw
                    };
                }
            };
            if ty == VarType::F32 {
                (v as f32).to_bits() as u64
            } else {
                v.to_bits()
            }
        }
        _ => {
            let bits = ty.bits();
            let min = 1u64 << (bits - 1);
            match pick {
                0..=3 => (rng.below(28) as i64 - 4) as u64,
                4 => [
                    0,
                    1,
                    u64::MAX,
                    min,
                    min - 1,
                    min + 1,
                    u64::MAX - 1,
                    31,
                    32,
                    33,
                    63,
                    64,
                    65,
                ][rng.below(13) as usize],
                5 => rng.next() >> rng.below(64),
                _ => rng.next(),
            }
        }
    };
    bits & ty.bit_mask()
}

// ---------------------------------------------------------------------------------------------
// Random kernels.

const NUMERIC: [VarType; 6] = [
    VarType::I32,
    VarType::U32,
    VarType::I64,
    VarType::U64,
    VarType::F32,
    VarType::F64,
];
const INTS: [VarType; 4] = [VarType::I32, VarType::U32, VarType::I64, VarType::U64];
const FLOATS: [VarType; 2] = [VarType::F32, VarType::F64];

const OPS: &[Op] = &[
    Op::Literal,
    Op::Counter,
    Op::Load,
    Op::Store,
    Op::Neg,
    Op::Not,
    Op::Abs,
    Op::Sqrt,
    Op::Floor,
    Op::Ceil,
    Op::Round,
    Op::Trunc,
    Op::Cast,
    Op::Cast,
    Op::Cast,
    Op::Bitcast,
    Op::Add,
    Op::Sub,
    Op::Mul,
    Op::Div,
    Op::Rem,
    Op::Min,
    Op::Max,
    Op::And,
    Op::Or,
    Op::Xor,
    Op::Shl,
    Op::Shr,
    Op::Eq,
    Op::Ne,
    Op::Lt,
    Op::Le,
    Op::Gt,
    Op::Ge,
    Op::Fma,
    Op::Select,
    Op::Select,
    Op::Gather,
    Op::Gather,
    Op::Scatter(ReduceOp::None),
    Op::Scatter(ReduceOp::Add),
    Op::Scatter(ReduceOp::Mul),
    Op::Scatter(ReduceOp::Min),
    Op::Scatter(ReduceOp::Max),
    Op::Scatter(ReduceOp::And),
    Op::Scatter(ReduceOp::Or),
];

/// One random instruction choice: op selector, type selector, three operand selectors, immediate.
type Choice = (u8, u8, [u16; 3], u64);

struct KernelBuilder {
    k: Kernel,
    /// Indexed parameters that are gather sources (never scatter targets).
    gather_sources: Vec<usize>,
    /// Per register: whether its bits are the same in both backends even when it is a NaN. NaN
    /// payloads are unspecified (any NaN equals any NaN), so results of float arithmetic are not
    /// exact; ops that expose a float's bits (bitwise ops, bitcasts) only take exact operands.
    exact: Vec<bool>,
}

impl KernelBuilder {
    fn push(&mut self, inst: Inst) -> Reg {
        let ops_exact = inst.operands().iter().all(|&r| self.exact[r as usize]);
        let exact = !inst.ty.is_float()
            || match inst.op {
                Op::Literal | Op::Load | Op::Gather => true,
                Op::Neg | Op::Abs | Op::Not | Op::And | Op::Or | Op::Xor | Op::Bitcast => ops_exact,
                Op::Select => {
                    self.exact[inst.args[1] as usize] && self.exact[inst.args[2] as usize]
                }
                Op::Cast => self.k.ty(inst.args[0]) == inst.ty && ops_exact,
                _ => false,
            };
        self.exact.push(exact);
        self.k.insts.push(inst);
        (self.k.insts.len() - 1) as Reg
    }
    fn param(&mut self, ty: VarType, kind: ParamKind, sel: u16) -> usize {
        let existing: Vec<usize> = (0..self.k.params.len())
            .filter(|&p| self.k.params[p] == Param { ty, kind })
            .collect();
        if !existing.is_empty() && sel % 3 != 0 {
            return existing[sel as usize % existing.len()];
        }
        self.k.params.push(Param { ty, kind });
        self.k.params.len() - 1
    }
    /// `counter + uniform` (a row of a stacked array, which the backends read and write as vectors
    /// when the run is in bounds): the uniform part a small literal (−2..4, wrapped) or a broadcast
    /// load (random bits: mostly far out of range).
    fn row_index(&mut self, ity: VarType, sel: u16, imm: u64) -> Reg {
        let c = self.push(Inst::new(Op::Counter, ity, &[], 0));
        let base = if sel % 4 == 0 {
            let p = self.param(ity, ParamKind::Broadcast, sel);
            self.push(Inst::new(Op::Load, ity, &[], p as u64))
        } else {
            let v = ((imm >> 8) % 7) as i64 - 2;
            self.push(Inst::new(Op::Literal, ity, &[], v as u64 & ity.bit_mask()))
        };
        self.push(Inst::new(Op::Add, ity, &[c, base], 0))
    }
    /// A register of type `ty`: an existing one, or a fresh source (literal, load, counter).
    fn reg(&mut self, ty: VarType, sel: u16, imm: u64) -> Reg {
        self.reg_of(ty, sel, imm, false)
    }
    /// Like `reg`, but a float register must have exact bits (see `exact`).
    fn reg_exact(&mut self, ty: VarType, sel: u16, imm: u64) -> Reg {
        self.reg_of(ty, sel, imm, ty.is_float())
    }
    fn reg_of(&mut self, ty: VarType, sel: u16, imm: u64, exact_only: bool) -> Reg {
        let cands: Vec<Reg> = (0..self.k.insts.len())
            .filter(|&r| self.k.insts[r].has_value() && self.k.insts[r].ty == ty)
            .filter(|&r| !exact_only || self.exact[r])
            .map(|r| r as Reg)
            .collect();
        if !cands.is_empty() && sel % 5 != 0 {
            return cands[(sel / 5) as usize % cands.len()];
        }
        match (sel / 5) % 4 {
            0 | 1 => {
                let mut rng = Rng(imm ^ sel as u64);
                let bits = rand_bits(&mut rng, ty);
                self.push(Inst::new(Op::Literal, ty, &[], bits))
            }
            2 => {
                let p = self.param(ty, ParamKind::Input, sel / 20);
                self.push(Inst::new(Op::Load, ty, &[], p as u64))
            }
            _ if ty.is_int() => self.push(Inst::new(Op::Counter, ty, &[], 0)),
            _ => {
                let p = self.param(ty, ParamKind::Broadcast, sel / 20);
                self.push(Inst::new(Op::Load, ty, &[], p as u64))
            }
        }
    }

    fn add(&mut self, (op_sel, ty_sel, a, imm): Choice) {
        let op = OPS[op_sel as usize % OPS.len()];
        let pick = |list: &[VarType]| list[ty_sel as usize % list.len()];
        let any = pick(&VarType::ALL);
        match op {
            Op::Literal => {
                let mut rng = Rng(imm);
                let bits = rand_bits(&mut rng, any);
                self.push(Inst::new(Op::Literal, any, &[], bits));
            }
            Op::Counter => {
                self.push(Inst::new(Op::Counter, pick(&INTS), &[], 0));
            }
            Op::Load => {
                let kind = if a[0] % 4 == 0 {
                    ParamKind::Broadcast
                } else {
                    ParamKind::Input
                };
                let p = self.param(any, kind, a[1]);
                self.push(Inst::new(Op::Load, any, &[], p as u64));
            }
            Op::Store => {
                let x = self.reg(any, a[0], imm);
                let p = self.param(any, ParamKind::Output, a[1]);
                self.push(Inst::new(Op::Store, any, &[x], p as u64));
            }
            Op::Neg | Op::Abs => {
                let x = self.reg(any, a[0], imm);
                self.push(Inst::new(op, any, &[x], 0));
            }
            Op::Not => {
                let x = self.reg_exact(any, a[0], imm);
                self.push(Inst::new(op, any, &[x], 0));
            }
            Op::Sqrt | Op::Floor | Op::Ceil | Op::Round | Op::Trunc => {
                let t = pick(&FLOATS);
                let x = self.reg(t, a[0], imm);
                self.push(Inst::new(op, t, &[x], 0));
            }
            Op::Cast => {
                let from = VarType::ALL[a[1] as usize % 7];
                let x = self.reg(from, a[0], imm);
                self.push(Inst::new(Op::Cast, any, &[x], 0));
            }
            Op::Bitcast => {
                let to = pick(&NUMERIC);
                let same: Vec<VarType> = NUMERIC
                    .iter()
                    .copied()
                    .filter(|t| t.size_bytes() == to.size_bytes())
                    .collect();
                let from = same[a[1] as usize % same.len()];
                let x = self.reg_exact(from, a[0], imm);
                self.push(Inst::new(Op::Bitcast, to, &[x], 0));
            }
            Op::Rem
            | Op::Shl
            | Op::Shr
            | Op::Div
            | Op::Add
            | Op::Sub
            | Op::Mul
            | Op::Min
            | Op::Max
            | Op::And
            | Op::Or
            | Op::Xor => {
                let t = match op {
                    Op::Rem | Op::Shl | Op::Shr => pick(&INTS),
                    // `div` has no definition for masks (the interpreter panics on it).
                    Op::Div => pick(&NUMERIC),
                    _ => any,
                };
                let (x, y) = if matches!(op, Op::And | Op::Or | Op::Xor) {
                    (
                        self.reg_exact(t, a[0], imm),
                        self.reg_exact(t, a[1], imm.rotate_left(17)),
                    )
                } else {
                    (
                        self.reg(t, a[0], imm),
                        self.reg(t, a[1], imm.rotate_left(17)),
                    )
                };
                self.push(Inst::new(op, t, &[x, y], 0));
            }
            Op::Eq | Op::Ne | Op::Lt | Op::Le | Op::Gt | Op::Ge => {
                let x = self.reg(any, a[0], imm);
                let y = self.reg(any, a[1], imm.rotate_left(17));
                self.push(Inst::new(op, VarType::Bool, &[x, y], 0));
            }
            Op::Fma => {
                let x = self.reg(any, a[0], imm);
                let y = self.reg(any, a[1], imm.rotate_left(17));
                let z = self.reg(any, a[2], imm.rotate_left(34));
                self.push(Inst::new(op, any, &[x, y, z], 0));
            }
            Op::Select => {
                let m = self.reg(VarType::Bool, a[0], imm);
                let x = self.reg(any, a[1], imm.rotate_left(17));
                let y = self.reg(any, a[2], imm.rotate_left(34));
                self.push(Inst::new(op, any, &[m, x, y], 0));
            }
            Op::Gather => {
                let ity = INTS[a[2] as usize % 4];
                let idx = if imm % 3 == 0 {
                    self.row_index(ity, a[0], imm)
                } else {
                    self.reg(ity, a[0], imm)
                };
                let mask = self.reg(VarType::Bool, a[1], imm.rotate_left(17));
                let reuse: Vec<usize> = self
                    .gather_sources
                    .iter()
                    .copied()
                    .filter(|&p| self.k.params[p].ty == any)
                    .collect();
                let p = if !reuse.is_empty() && imm % 2 == 0 {
                    reuse[(imm >> 8) as usize % reuse.len()]
                } else {
                    self.k.params.push(Param {
                        ty: any,
                        kind: ParamKind::Indexed,
                    });
                    self.gather_sources.push(self.k.params.len() - 1);
                    self.k.params.len() - 1
                };
                self.push(Inst::new(Op::Gather, any, &[idx, mask], p as u64));
            }
            Op::Scatter(_) => {
                // A fresh target per scatter: different reductions into one buffer depend on the
                // order of instructions vs lanes, which the backends need not share.
                let ity = INTS[(a[2] / 7) as usize % 4];
                let x = if matches!(op, Op::Scatter(ReduceOp::And | ReduceOp::Or)) {
                    self.reg_exact(any, a[0], imm)
                } else {
                    self.reg(any, a[0], imm)
                };
                let idx = if imm % 3 == 1 {
                    self.row_index(ity, a[1], imm)
                } else {
                    self.reg(ity, a[1], imm.rotate_left(17))
                };
                let mask = self.reg(VarType::Bool, a[2], imm.rotate_left(34));
                self.k.params.push(Param {
                    ty: any,
                    kind: ParamKind::Indexed,
                });
                let p = self.k.params.len() - 1;
                self.push(Inst::new(op, any, &[x, idx, mask], p as u64));
            }
            // registry-only: never in kernels
            Op::Data | Op::Tap | Op::Split | Op::Reduce(_) => unreachable!(),
            // regions have generators of their own (see the end of this file)
            Op::LoopBegin
            | Op::Phi
            | Op::LoopCond
            | Op::LoopNext
            | Op::LoopEnd
            | Op::Switch
            | Op::Case
            | Op::Yield
            | Op::SwitchEnd
            | Op::Out => unreachable!(),
        }
    }
}

/// A random well-typed kernel; every value register is stored to an output so nothing is dead.
fn build_kernel(choices: &[Choice]) -> Kernel {
    let mut b = KernelBuilder {
        k: Kernel::default(),
        gather_sources: Vec::new(),
        exact: Vec::new(),
    };
    for &c in choices {
        b.add(c);
    }
    let n = b.k.insts.len();
    for r in 0..n {
        let inst = b.k.insts[r];
        if inst.has_value() {
            b.k.params.push(Param {
                ty: inst.ty,
                kind: ParamKind::Output,
            });
            let p = b.k.params.len() - 1;
            b.push(Inst::new(Op::Store, inst.ty, &[r as Reg], p as u64));
        }
    }
    if let Err(errs) = b.k.verify() {
        panic!("generated an invalid kernel: {errs:?}\n{}", b.k);
    }
    b.k
}

/// Random buffers for `kernel` with `end` lanes (inputs/outputs), plus random indexed lengths.
fn make_buffers(kernel: &Kernel, end: u64, seed: u64) -> Vec<Buf> {
    let mut rng = Rng(seed);
    kernel
        .params
        .iter()
        .map(|p| {
            let len = match p.kind {
                ParamKind::Input | ParamKind::Output => end as usize,
                ParamKind::Broadcast => 1,
                ParamKind::Indexed => [0, 1, 4, 7, 16, 24][rng.below(6) as usize],
            };
            let mut b = Buf::new(p.ty, len);
            for i in 0..len {
                b.set(i, rand_bits(&mut rng, p.ty));
            }
            b
        })
        .collect()
}

fn choice() -> impl Strategy<Value = Choice> {
    (any::<u8>(), any::<u8>(), any::<[u16; 3]>(), any::<u64>())
}

/// The kernel's text form parses back to the same kernel (the parser is `Display`'s inverse).
fn text_round_trips(kernel: &Kernel) -> Result<(), String> {
    let text = kernel.to_string();
    match Kernel::parse(&text) {
        Ok(k) if k == *kernel => Ok(()),
        Ok(k) => Err(format!(
            "text parsed to another kernel:\n{text}\nparsed:\n{k}\n{k:?}\nwas {kernel:?}"
        )),
        Err(e) => Err(format!("{e}\nof\n{text}")),
    }
}

/// Runs one kernel over two random ranges with `end` drawn from `ends`.
fn diff_case(
    choices: &[Choice],
    ranges: &[(u64, u64)],
    seed: u64,
    backend: &dyn Backend,
) -> Result<(), TestCaseError> {
    let kernel = build_kernel(choices);
    text_round_trips(&kernel).map_err(TestCaseError::fail)?;
    let compiled = backend
        .compile(&kernel)
        .map_err(|e| TestCaseError::fail(format!("{e}\n{kernel}")))?;
    for (j, &(start, end)) in ranges.iter().enumerate() {
        let bufs = make_buffers(&kernel, end, seed.wrapping_add(j as u64));
        check_compiled(&kernel, &*compiled, &bufs, start, end).map_err(TestCaseError::fail)?;
    }
    Ok(())
}

fn small_range() -> impl Strategy<Value = (u64, u64)> {
    prop_oneof![
        3 => (0u64..=9).prop_map(|n| (0, n)),
        3 => (0u64..70).prop_flat_map(|n| (0..=n, Just(n))),
        1 => (0u64..400).prop_flat_map(|n| (0..=n, Just(n))),
    ]
}

fn block_range() -> impl Strategy<Value = (u64, u64)> {
    let end = prop_oneof![
        Just(16383u64),
        Just(16384u64),
        Just(16385u64),
        16300u64..16500,
        1000u64..20000
    ];
    end.prop_flat_map(|n| {
        (
            prop_oneof![
                Just(0u64),
                Just(1),
                Just(3),
                0..=n,
                (n.saturating_sub(9))..=n
            ],
            Just(n),
        )
    })
}

/// `cases` per test function (13 500 in all), or `PROPTEST_CASES` each when set (for soak runs).
fn config(cases: u32) -> Config {
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(cases);
    Config {
        cases,
        failure_persistence: None,
        max_shrink_iters: 2000,
        ..Config::default()
    }
}

proptest! {
    #![proptest_config(config(9000))]
    #[test]
    fn random_kernels_small_ranges(
        choices in prop::collection::vec(choice(), 1..20),
        r1 in small_range(),
        r2 in small_range(),
        seed in any::<u64>(),
    ) {
        diff_case(&choices, &[r1, r2], seed, cranelift())?;
    }
}

proptest! {
    #![proptest_config(config(2500))]
    #[test]
    fn random_kernels_block_ranges(
        choices in prop::collection::vec(choice(), 1..12),
        r in block_range(),
        seed in any::<u64>(),
    ) {
        diff_case(&choices, &[r], seed, cranelift())?;
    }
}

proptest! {
    #![proptest_config(config(2000))]
    #[test]
    fn random_kernels_sse_only(
        choices in prop::collection::vec(choice(), 1..20),
        r1 in small_range(),
        seed in any::<u64>(),
    ) {
        diff_case(&choices, &[r1, (3, 37)], seed, cranelift_sse_only())?;
    }
}

/// A key naming what an instruction exercises: op, result type, first operand type (or the index
/// type of a gather/scatter, or the parameter kind of a load).
fn coverage_key(k: &Kernel, inst: &Inst) -> (Op, VarType, String) {
    let extra = match inst.op {
        Op::Load => format!("{:?}", k.params[inst.imm as usize].kind),
        Op::Gather => k.ty(inst.args[0]).to_string(),
        Op::Scatter(_) => k.ty(inst.args[1]).to_string(),
        Op::Literal | Op::Counter | Op::Store => String::new(),
        _ => k.ty(inst.args[0]).to_string(),
    };
    (inst.op, inst.ty, extra)
}

#[test]
fn generator_covers_every_op_and_type_combination() {
    use std::collections::BTreeSet;
    use VarType::*;
    let mut want = BTreeSet::new();
    let key = |op: Op, ty: VarType, extra: String| (format!("{op:?}"), ty, extra);
    for &t in &VarType::ALL {
        want.insert(key(Op::Literal, t, String::new()));
        want.insert(key(Op::Store, t, String::new()));
        for kind in ["Input", "Broadcast"] {
            want.insert(key(Op::Load, t, kind.into()));
        }
        for from in VarType::ALL {
            want.insert(key(Op::Cast, t, from.to_string()));
            if t != Bool && from != Bool && from.size_bytes() == t.size_bytes() {
                want.insert(key(Op::Bitcast, t, from.to_string()));
            }
        }
        for op in [Op::Eq, Op::Ne, Op::Lt, Op::Le, Op::Gt, Op::Ge] {
            want.insert(key(op, Bool, t.to_string()));
        }
        let unary: &[Op] = match t {
            F32 | F64 => &[
                Op::Neg,
                Op::Not,
                Op::Abs,
                Op::Sqrt,
                Op::Floor,
                Op::Ceil,
                Op::Round,
                Op::Trunc,
            ],
            _ => &[Op::Neg, Op::Not, Op::Abs],
        };
        let mut binary = vec![
            Op::Add,
            Op::Sub,
            Op::Mul,
            Op::Min,
            Op::Max,
            Op::And,
            Op::Or,
            Op::Xor,
            Op::Fma,
            Op::Select,
        ];
        if t != Bool {
            binary.push(Op::Div);
        }
        if t.is_int() {
            binary.extend([Op::Rem, Op::Shl, Op::Shr]);
            want.insert(key(Op::Counter, t, String::new()));
        }
        for &op in unary.iter().chain(&binary) {
            let first = if op == Op::Select { Bool } else { t };
            want.insert(key(op, t, first.to_string()));
        }
        for ity in INTS {
            want.insert(key(Op::Gather, t, ity.to_string()));
            for rop in ReduceOp::ALL {
                want.insert(key(Op::Scatter(rop), t, ity.to_string()));
            }
        }
    }
    let mut seen = BTreeSet::new();
    let mut rng = Rng(2024);
    for _ in 0..4000 {
        let n = 1 + rng.below(20) as usize;
        let choices: Vec<Choice> = (0..n)
            .map(|_| {
                (
                    rng.next() as u8,
                    rng.next() as u8,
                    [rng.next() as u16, rng.next() as u16, rng.next() as u16],
                    rng.next(),
                )
            })
            .collect();
        let k = build_kernel(&choices);
        for inst in &k.insts {
            let (op, ty, extra) = coverage_key(&k, inst);
            seen.insert(key(op, ty, extra));
        }
    }
    let missing: Vec<_> = want.difference(&seen).collect();
    assert!(
        missing.is_empty(),
        "the generator never produces {} combinations: {missing:?}",
        missing.len()
    );
}

// ---------------------------------------------------------------------------------------------
// Hand-written cases.

fn p(ty: VarType, kind: ParamKind) -> Param {
    Param { ty, kind }
}

// Integer division and remainder, shifts by masked amounts, wrapping arithmetic and signed
// against unsigned comparisons are filetests now (`tests/filetests/div_rem_*.kir`, `shifts_*.kir`,
// `wrapping_*.kir`), run on every backend instead of Cranelift only.

/// `scatter` (registers 0, 1, 2 into parameter 3) of loaded values of `ty`, indices of `ity` and
/// a mask, into an indexed target of `ty`.
fn scatter_kernel(ty: VarType, ity: VarType, scatter: Inst) -> Kernel {
    use VarType::*;
    Kernel {
        params: vec![
            p(ty, ParamKind::Input),
            p(ity, ParamKind::Input),
            p(Bool, ParamKind::Input),
            p(ty, ParamKind::Indexed),
        ],
        insts: vec![
            Inst::new(Op::Load, ty, &[], 0),
            Inst::new(Op::Load, ity, &[], 1),
            Inst::new(Op::Load, Bool, &[], 2),
            scatter,
        ],
    }
}

#[test]
fn ranges_of_every_alignment_and_empty() {
    use VarType::*;
    let k = Kernel {
        params: vec![
            p(F64, ParamKind::Input),
            p(Bool, ParamKind::Output),
            p(U32, ParamKind::Output),
        ],
        insts: vec![
            Inst::new(Op::Load, F64, &[], 0),
            Inst::new(Op::Counter, U32, &[], 0),
            Inst::new(Op::Cast, F64, &[1], 0),
            Inst::new(Op::Lt, Bool, &[0, 2], 0),
            Inst::new(Op::Store, Bool, &[3], 1),
            Inst::new(Op::Store, U32, &[1], 2),
        ],
    };
    let mut rng = Rng(1);
    for end in 0..23u64 {
        for start in 0..=end {
            let vals: Vec<u64> = (0..end)
                .map(|_| ((rng.below(40) as f64) * 0.5).to_bits())
                .collect();
            let bufs = vec![
                Buf::from_bits(F64, &vals),
                Buf::new(Bool, end as usize),
                Buf::new(U32, end as usize),
            ];
            check(&k, &bufs, start, end, cranelift()).unwrap();
        }
    }
}

/// A long random chain of float and integer ops (and a 240-instruction kernel from the generator).
fn big_kernel(n: usize) -> Kernel {
    use VarType::*;
    let mut insts = vec![
        Inst::new(Op::Load, F32, &[], 0),
        Inst::new(Op::Load, F32, &[], 1),
        Inst::new(Op::Counter, I32, &[], 0),
        Inst::new(Op::Literal, F32, &[], 0.75f32.to_bits() as u64),
    ];
    let mut rng = Rng(42);
    while insts.len() < n {
        let r = insts.len() as Reg;
        let pick = |rng: &mut Rng, ty: VarType, insts: &[Inst]| -> Reg {
            let c: Vec<Reg> = (0..insts.len())
                .filter(|&i| insts[i].ty == ty && insts[i].has_value())
                .map(|i| i as Reg)
                .collect();
            c[rng.below(c.len() as u64) as usize]
        };
        let inst = match rng.below(8) {
            0 => Inst::new(
                Op::Add,
                F32,
                &[pick(&mut rng, F32, &insts), pick(&mut rng, F32, &insts)],
                0,
            ),
            1 => Inst::new(
                Op::Mul,
                F32,
                &[pick(&mut rng, F32, &insts), pick(&mut rng, F32, &insts)],
                0,
            ),
            2 => Inst::new(
                Op::Fma,
                F32,
                &[
                    pick(&mut rng, F32, &insts),
                    pick(&mut rng, F32, &insts),
                    pick(&mut rng, F32, &insts),
                ],
                0,
            ),
            3 => Inst::new(
                Op::Min,
                F32,
                &[pick(&mut rng, F32, &insts), pick(&mut rng, F32, &insts)],
                0,
            ),
            4 => Inst::new(Op::Cast, I32, &[pick(&mut rng, F32, &insts)], 0),
            5 => Inst::new(
                Op::Xor,
                I32,
                &[pick(&mut rng, I32, &insts), pick(&mut rng, I32, &insts)],
                0,
            ),
            6 => Inst::new(Op::Cast, F32, &[pick(&mut rng, I32, &insts)], 0),
            _ => {
                let m = Inst::new(
                    Op::Lt,
                    Bool,
                    &[pick(&mut rng, F32, &insts), pick(&mut rng, F32, &insts)],
                    0,
                );
                insts.push(m);
                Inst::new(
                    Op::Select,
                    F32,
                    &[r, pick(&mut rng, F32, &insts), pick(&mut rng, F32, &insts)],
                    0,
                )
            }
        };
        insts.push(inst);
    }
    // Store every fourth value and the last one, so that most of the code is live.
    let mut params = vec![p(F32, ParamKind::Input), p(F32, ParamKind::Input)];
    let n = insts.len();
    for r in (0..n).filter(|&r| r % 4 == 3 || r == n - 1) {
        let ty = insts[r].ty;
        params.push(p(ty, ParamKind::Output));
        insts.push(Inst::new(
            Op::Store,
            ty,
            &[r as Reg],
            (params.len() - 1) as u64,
        ));
    }
    Kernel { params, insts }
}

#[test]
fn kernels_of_200_plus_instructions_compile_and_agree() {
    let k = big_kernel(220);
    assert!(k.verify().is_ok());
    assert!(k.len() >= 200);
    let t = std::time::Instant::now();
    cranelift().compile(&k).unwrap();
    eprintln!(
        "compiled a {}-instruction kernel in {:.1} ms",
        k.len(),
        t.elapsed().as_secs_f64() * 1e3
    );
    let bufs = make_buffers(&k, 1003, 5);
    check(&k, &bufs, 1, 1003, cranelift()).unwrap();

    // The generator's kernels at that size too (every op and type).
    let mut rng = Rng(99);
    let choices: Vec<Choice> = (0..120)
        .map(|_| {
            (
                rng.next() as u8,
                rng.next() as u8,
                [rng.next() as u16, rng.next() as u16, rng.next() as u16],
                rng.next(),
            )
        })
        .collect();
    let k = build_kernel(&choices);
    assert!(k.len() >= 200, "{}", k.len());
    let bufs = make_buffers(&k, 517, 3);
    check(&k, &bufs, 2, 517, cranelift()).unwrap();
}

/// Rough performance numbers: `cargo test --release --test backend_diff -- --ignored --nocapture`.
#[test]
#[ignore = "a measurement, not a check: run with --ignored --nocapture"]
fn measure_compile_time_and_throughput() {
    use VarType::*;
    let k = big_kernel(200);
    let runs = 20;
    let verifying = CraneliftBackend::with_settings(&[("enable_verifier", "true")]).unwrap();
    let best_ms = |be: &dyn Backend, k: &Kernel| {
        (0..runs)
            .map(|_| {
                let t = std::time::Instant::now();
                be.compile(k).unwrap();
                t.elapsed().as_secs_f64() * 1e3
            })
            .fold(f64::MAX, f64::min)
    };
    eprintln!(
        "compile, float chain of {} insts: {:.2} ms (with the IR verifier: {:.2} ms)",
        k.len(),
        best_ms(cranelift(), &k),
        best_ms(&verifying, &k)
    );
    let mut rng = Rng(99);
    let choices: Vec<Choice> = (0..100)
        .map(|_| {
            (
                rng.next() as u8,
                rng.next() as u8,
                [rng.next() as u16, rng.next() as u16, rng.next() as u16],
                rng.next(),
            )
        })
        .collect();
    let k = build_kernel(&choices);
    eprintln!(
        "compile, random kernel of {} insts (all ops, every value stored): {:.2} ms (with the IR verifier: {:.2} ms)",
        k.len(),
        best_ms(cranelift(), &k),
        best_ms(&verifying, &k)
    );

    // out = a * x + y over 10M f32 lanes, one thread.
    let n = 10_000_000usize;
    let k = Kernel {
        params: vec![
            p(F32, ParamKind::Input),
            p(F32, ParamKind::Input),
            p(F32, ParamKind::Output),
        ],
        insts: vec![
            Inst::new(Op::Literal, F32, &[], 2.5f32.to_bits() as u64),
            Inst::new(Op::Load, F32, &[], 0),
            Inst::new(Op::Load, F32, &[], 1),
            Inst::new(Op::Mul, F32, &[0, 1], 0),
            Inst::new(Op::Add, F32, &[3, 2], 0),
            Inst::new(Op::Store, F32, &[4], 2),
        ],
    };
    let mut bufs: Vec<Buf> = (0..3).map(|_| Buf::new(F32, n)).collect();
    for i in 0..n {
        bufs[0].set(i, (i as f32).to_bits() as u64);
        bufs[1].set(i, 1f32.to_bits() as u64);
    }
    for (name, be) in [
        ("cranelift", cranelift() as &dyn Backend),
        ("interp", &Interp),
    ] {
        let compiled = be.compile(&k).unwrap();
        let ptrs: Vec<*mut u8> = bufs.iter().map(|b| b.ptr()).collect();
        let lens: Vec<u64> = bufs.iter().map(|b| b.len as u64).collect();
        let status: [AtomicU64; STATUS_LEN] = Default::default();
        let args = LaunchArgs {
            ptrs: ptrs.as_ptr(),
            lens: lens.as_ptr(),
            status: status.as_ptr(),
        };
        let mut best = f64::MAX;
        for _ in 0..5 {
            let t = std::time::Instant::now();
            // SAFETY: three buffers of n f32 lanes plus slack.
            unsafe { compiled.run(&args, 0, n as u64) };
            best = best.min(t.elapsed().as_secs_f64());
        }
        eprintln!(
            "{name}: a*x+y over {n} f32 lanes: {:.2} ms, {:.2} GB/s (12 bytes/lane)",
            best * 1e3,
            (12 * n) as f64 / best / 1e9
        );
    }
    assert_eq!(bufs[2].get(7), (2.5f32 * 7.0 + 1.0).to_bits() as u64);
}

// ---------------------------------------------------------------------------------------------
// Code-generation variants: unrolled and interleaved loops, SIMD variable shifts and rotations,
// affine values of the lane index, literal operands. Each runs against the interpreter under
// several of the backend's code-generation settings, which change speed but never results.

/// `check` on every variant backend.
fn check_variants(kernel: &Kernel, bufs: &[Buf], start: u64, end: u64) {
    for (name, be) in variant_backends() {
        if let Err(e) = check(kernel, bufs, start, end, be) {
            panic!("backend {name}: {e}");
        }
    }
}

proptest! {
    #![proptest_config(config(1500))]
    #[test]
    fn random_kernels_every_code_generation_variant(
        choices in prop::collection::vec(choice(), 1..16),
        r in prop_oneof![small_range(), (0u64..200).prop_flat_map(|n| (0..=n, Just(n)))],
        variant in 0usize..10,
        seed in any::<u64>(),
    ) {
        let (_, be) = &variant_backends()[variant % variant_backends().len()];
        diff_case(&choices, &[r, (5, 90)], seed, be)?;
    }
}

#[test]
fn unrolled_loops_cover_every_start_and_end() {
    use VarType::*;
    // Counters, a 64-bit affine chain, a load and a mask store: every path of the main and the
    // remainder loop.
    let k = Kernel {
        params: vec![
            p(F32, ParamKind::Input),
            p(U32, ParamKind::Output),
            p(U64, ParamKind::Output),
            p(Bool, ParamKind::Output),
        ],
        insts: vec![
            Inst::new(Op::Load, F32, &[], 0),
            Inst::new(Op::Counter, U32, &[], 0),
            Inst::new(Op::Cast, U64, &[1], 0),
            Inst::new(Op::Literal, U64, &[], 0x5851_f42d_4c95_7f2d),
            Inst::new(Op::Mul, U64, &[2, 3], 0),
            Inst::new(Op::Add, U64, &[4, 2], 0),
            Inst::new(Op::Cast, F32, &[1], 0),
            Inst::new(Op::Lt, Bool, &[0, 6], 0),
            Inst::new(Op::Store, U32, &[1], 1),
            Inst::new(Op::Store, U64, &[5], 2),
            Inst::new(Op::Store, Bool, &[7], 3),
        ],
    };
    let mut rng = Rng(5);
    for end in 0..75u64 {
        for start in 0..=end {
            let vals: Vec<u64> = (0..end)
                .map(|_| ((rng.below(160) as f32) * 0.5).to_bits() as u64)
                .collect();
            let bufs = vec![
                Buf::from_bits(F32, &vals),
                Buf::new(U32, end as usize),
                Buf::new(U64, end as usize),
                Buf::new(Bool, end as usize),
            ];
            check_variants(&k, &bufs, start, end);
        }
    }
}

/// Values whose shifts show every bit: ones, alternating bits, the sign bit, random.
fn shift_operands(ty: VarType, n: usize, rng: &mut Rng) -> Vec<u64> {
    let patterns = [
        1,
        u64::MAX,
        0x8000_0000_0000_0000 >> (64 - ty.bits()),
        0x5555_5555_5555_5555,
        0xdead_beef_0123_4567,
    ];
    (0..n)
        .map(|i| {
            if i % 3 == 0 {
                rng.next()
            } else {
                patterns[(i / 3) % patterns.len()]
            }
        } & ty.bit_mask())
        .collect()
}

#[test]
fn variable_shifts_of_every_amount() {
    let mut rng = Rng(17);
    for ty in INTS {
        for op in [Op::Shl, Op::Shr] {
            // Per-lane amounts 0..=130 (past every width, and negative for signed types), one
            // amount per lane; a broadcast amount; and each literal amount.
            let amounts: Vec<u64> = (0..=130u64)
                .chain([u64::MAX, 1 << 31, (1 << 32) + 3])
                .map(|a| a & ty.bit_mask())
                .collect();
            let n = amounts.len();
            let xs = shift_operands(ty, n, &mut rng);
            let per_lane = Kernel {
                params: vec![
                    p(ty, ParamKind::Input),
                    p(ty, ParamKind::Input),
                    p(ty, ParamKind::Output),
                ],
                insts: vec![
                    Inst::new(Op::Load, ty, &[], 0),
                    Inst::new(Op::Load, ty, &[], 1),
                    Inst::new(op, ty, &[0, 1], 0),
                    Inst::new(Op::Store, ty, &[2], 2),
                ],
            };
            let bufs = vec![
                Buf::from_bits(ty, &xs),
                Buf::from_bits(ty, &amounts),
                Buf::new(ty, n),
            ];
            check_variants(&per_lane, &bufs, 0, n as u64);
            check_variants(&per_lane, &bufs, 3, n as u64);
            for &a in amounts.iter().step_by(7).chain([&63, &64, &31, &32]) {
                let broadcast = Kernel {
                    params: vec![
                        p(ty, ParamKind::Input),
                        p(ty, ParamKind::Broadcast),
                        p(ty, ParamKind::Output),
                    ],
                    ..per_lane.clone()
                };
                let bufs = vec![
                    Buf::from_bits(ty, &xs),
                    Buf::from_bits(ty, &[a & ty.bit_mask()]),
                    Buf::new(ty, n),
                ];
                check_variants(&broadcast, &bufs, 0, n as u64);
                let literal = Kernel {
                    params: vec![p(ty, ParamKind::Input), p(ty, ParamKind::Output)],
                    insts: vec![
                        Inst::new(Op::Load, ty, &[], 0),
                        Inst::new(Op::Literal, ty, &[], a & ty.bit_mask()),
                        Inst::new(op, ty, &[0, 1], 0),
                        Inst::new(Op::Store, ty, &[2], 1),
                    ],
                };
                let bufs = vec![Buf::from_bits(ty, &xs), Buf::new(ty, n)];
                check_variants(&literal, &bufs, 0, n as u64);
            }
        }
    }
}

/// `(x >> r) | (x << ((32 - r) & 31))` on `u32`, in both orders of the `or` and of the `and`, with
/// `r` per lane (any value: the pattern masks it) or from a 64-bit value's top five bits, and
/// with the shifts also stored (so that they are not dead code) or not.
#[test]
fn rotations_of_every_amount() {
    use VarType::*;
    let mut rng = Rng(23);
    let n = 140usize;
    let xs = shift_operands(U32, n, &mut rng);
    let rs: Vec<u64> = (0..n as u64)
        .map(|r| if r < 100 { r } else { rng.next() & 0xffff_ffff })
        .collect();
    let wide: Vec<u64> = (0..n as u64)
        .map(|r| (r << 59) | (rng.next() >> 5))
        .collect();
    for (from_wide, or_swapped, and_swapped, store_shifts) in
        (0..16).map(|b| (b & 1 != 0, b & 2 != 0, b & 4 != 0, b & 8 != 0))
    {
        let mut insts = vec![Inst::new(Op::Load, U32, &[], 0)];
        let r = if from_wide {
            insts.push(Inst::new(Op::Load, U64, &[], 2));
            insts.push(Inst::new(Op::Literal, U64, &[], 59));
            insts.push(Inst::new(Op::Shr, U64, &[1, 2], 0));
            insts.push(Inst::new(Op::Cast, U32, &[3], 0));
            4
        } else {
            insts.push(Inst::new(Op::Load, U32, &[], 1));
            1
        };
        let at = insts.len() as u32;
        insts.push(Inst::new(Op::Literal, U32, &[], 32));
        insts.push(Inst::new(Op::Sub, U32, &[at, r], 0));
        insts.push(Inst::new(Op::Literal, U32, &[], 31));
        if and_swapped {
            insts.push(Inst::new(Op::And, U32, &[at + 2, at + 1], 0));
        } else {
            insts.push(Inst::new(Op::And, U32, &[at + 1, at + 2], 0));
        }
        insts.push(Inst::new(Op::Shr, U32, &[0, r], 0));
        insts.push(Inst::new(Op::Shl, U32, &[0, at + 3], 0));
        if or_swapped {
            insts.push(Inst::new(Op::Or, U32, &[at + 5, at + 4], 0));
        } else {
            insts.push(Inst::new(Op::Or, U32, &[at + 4, at + 5], 0));
        }
        insts.push(Inst::new(Op::Store, U32, &[at + 6], 3));
        if store_shifts {
            insts.push(Inst::new(Op::Store, U32, &[at + 4], 4));
            insts.push(Inst::new(Op::Store, U32, &[at + 5], 5));
        }
        let k = Kernel {
            params: vec![
                p(U32, ParamKind::Input),
                p(U32, ParamKind::Input),
                p(U64, ParamKind::Input),
                p(U32, ParamKind::Output),
                p(U32, ParamKind::Output),
                p(U32, ParamKind::Output),
            ],
            insts,
        };
        let bufs = vec![
            Buf::from_bits(U32, &xs),
            Buf::from_bits(U32, &rs),
            Buf::from_bits(U64, &wide),
            Buf::new(U32, n),
            Buf::new(U32, n),
            Buf::new(U32, n),
        ];
        check_variants(&k, &bufs, 0, n as u64);
        check_variants(&k, &bufs, 1, n as u64);
    }
}

/// Affine functions of the lane index (computed from the index directly in the main loop): a
/// PCG-style seeding chain from 32-bit counters of both signs, with every op the analysis knows.
fn affine_kernel(counter: VarType) -> Vec<Inst> {
    use VarType::*;
    let c = |bits: u64| Inst::new(Op::Literal, U64, &[], bits);
    vec![
        Inst::new(Op::Counter, counter, &[], 0), // 0
        Inst::new(Op::Cast, U64, &[0], 0),       // 1
        c(1),                                    // 2
        Inst::new(Op::Shl, U64, &[1, 2], 0),     // 3: i << 1
        Inst::new(Op::Or, U64, &[3, 2], 0),      // 4: | 1
        c(0x853c_49e6_748f_ea9b),                // 5
        Inst::new(Op::Add, U64, &[4, 5], 0),     // 6
        c(0x5851_f42d_4c95_7f2d),                // 7
        Inst::new(Op::Mul, U64, &[6, 7], 0),     // 8
        Inst::new(Op::Add, U64, &[8, 4], 0),     // 9
        Inst::new(Op::Fma, U64, &[7, 9, 4], 0),  // 10
        Inst::new(Op::Sub, U64, &[10, 1], 0),    // 11
        Inst::new(Op::Neg, U64, &[11], 0),       // 12
        c(6),                                    // 13: not within the zero low bits
        Inst::new(Op::Xor, U64, &[3, 13], 0),    // 14
        Inst::new(Op::Cast, U32, &[12], 0),      // 15
        Inst::new(Op::Literal, U32, &[], 3),     // 16
        Inst::new(Op::Mul, U32, &[15, 16], 0),   // 17
        Inst::new(Op::Cast, I64, &[0], 0),       // 18
        Inst::new(Op::Sub, U64, &[9, 1], 0),     // 19
        Inst::new(Op::Shr, U64, &[12, 2], 0),    // 20: not affine
    ]
}

#[test]
fn affine_values_of_the_lane_index() {
    use VarType::*;
    for counter in [U32, I32, U64] {
        let mut insts = affine_kernel(counter);
        let stored: Vec<(u32, VarType)> = [1, 4, 6, 8, 9, 10, 11, 12, 14, 15, 17, 18, 19, 20]
            .iter()
            .map(|&r| (r, insts[r as usize].ty))
            .collect();
        let mut params = Vec::new();
        for (j, &(r, ty)) in stored.iter().enumerate() {
            params.push(p(ty, ParamKind::Output));
            insts.push(Inst::new(Op::Store, ty, &[r], j as u64));
        }
        let k = Kernel { params, insts };
        for (start, end) in [(0, 1), (0, 16), (0, 64), (3, 61), (16, 200), (13, 14)] {
            let bufs: Vec<Buf> = stored
                .iter()
                .map(|&(_, ty)| Buf::new(ty, end as usize))
                .collect();
            check_variants(&k, &bufs, start, end);
        }
    }
}

/// The affine forms of 32-bit counters extended to 64 bits hold only below lane 2^31: ranges
/// beyond (here summed into a scatter target, so that no buffer needs that many elements) take
/// the generic loop, and the 32-bit counter wraps at 2^32.
#[test]
fn affine_values_at_huge_lane_indices() {
    use VarType::*;
    for counter in [U32, I32] {
        let mut insts = affine_kernel(counter);
        let at = insts.len() as u32;
        insts.push(Inst::new(Op::Literal, Bool, &[], 1));
        insts.push(Inst::new(Op::Literal, U32, &[], 0));
        let mut params = Vec::new();
        for (j, r) in [1u32, 9, 12, 18].into_iter().enumerate() {
            let ty = insts[r as usize].ty;
            params.push(p(ty, ParamKind::Indexed));
            insts.push(Inst::new(
                Op::Scatter(ReduceOp::Add),
                ty,
                &[r, at + 1, at],
                j as u64,
            ));
        }
        let k = Kernel { params, insts };
        let two31 = 1u64 << 31;
        for (start, end) in [
            (two31 - 64, two31),
            (two31 - 40, two31 + 40),
            (two31, two31 + 17),
            ((1 << 32) - 20, (1 << 32) + 30),
            (5 << 32, (5 << 32) + 9),
        ] {
            let bufs: Vec<Buf> = k
                .params
                .iter()
                .map(|p| Buf::from_bits(p.ty, &[0]))
                .collect();
            check_variants(&k, &bufs, start, end);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Structured regions: loops and switches.

// ---------------------------------------------------------------------------------------------
// Random region kernels: straight-line code with randomly nested loops and switches.

/// The choices behind a random region kernel, read in order. Past the end every choice is 0, the
/// simplest one, so that proptest shrinks a failing tape towards a small kernel.
struct Tape<'a> {
    vals: &'a [u64],
    pos: usize,
}

impl Tape<'_> {
    fn next(&mut self) -> u64 {
        let v = self.vals.get(self.pos).copied().unwrap_or(0);
        self.pos += 1;
        v
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
    /// True with probability `num / den` (false on a 0 choice).
    fn maybe(&mut self, num: u64, den: u64) -> bool {
        self.next() % den >= den - num
    }
    fn pick<T: Copy>(&mut self, xs: &[T]) -> T {
        xs[self.below(xs.len() as u64) as usize]
    }
}

/// Types of loop-carried values and switch outputs.
const REGION_TYPES: [VarType; 5] = [
    VarType::U32,
    VarType::I32,
    VarType::F32,
    VarType::F64,
    VarType::I64,
];

/// Bound on the iterations of all enclosing loops together (per lane), which keeps the
/// interpreter's work per kernel small.
const ITER_BUDGET: u64 = 300;

struct RegionGen<'a> {
    t: Tape<'a>,
    k: Kernel,
    /// Registers visible here, per open region (the outermost first). Phis belong to the region
    /// around their loop, outputs of a switch to the region around the switch.
    scopes: Vec<Vec<Reg>>,
    /// Indexed parameters that are gather sources (scatters always get a fresh target).
    gather_sources: Vec<usize>,
    /// Bound on the iterations of the enclosing loops together.
    iters: u64,
    /// Open loops; open regions of both kinds.
    loops: usize,
    depth: usize,
    /// Whether `next`s may come before a nested region of the loop body (not only at its end).
    early_next: bool,
    /// Whether a loop's condition code may gather and scatter.
    cond_effects: bool,
    /// Set while generating condition code without effects.
    no_effects: bool,
}

impl RegionGen<'_> {
    fn push(&mut self, inst: Inst) -> Reg {
        self.k.insts.push(inst);
        let r = (self.k.insts.len() - 1) as Reg;
        if inst.has_value() {
            self.scopes.last_mut().expect("a scope").push(r);
        }
        r
    }
    fn visible(&self, ty: VarType) -> Vec<Reg> {
        self.scopes
            .iter()
            .flatten()
            .copied()
            .filter(|&r| self.k.ty(r) == ty)
            .collect()
    }
    /// A literal of value `v` in type `ty`.
    fn small(&mut self, ty: VarType, v: i64) -> Reg {
        let bits = match ty {
            VarType::F32 => (v as f32).to_bits() as u64,
            VarType::F64 => (v as f64).to_bits(),
            VarType::Bool => (v != 0) as u64,
            _ => v as u64 & ty.bit_mask(),
        };
        self.push(Inst::new(Op::Literal, ty, &[], bits))
    }
    fn param(&mut self, ty: VarType, kind: ParamKind) -> usize {
        let existing: Vec<usize> = (0..self.k.params.len())
            .filter(|&p| self.k.params[p] == Param { ty, kind })
            .collect();
        if !existing.is_empty() && !self.t.maybe(1, 3) {
            return existing[self.t.below(existing.len() as u64) as usize];
        }
        self.k.params.push(Param { ty, kind });
        self.k.params.len() - 1
    }
    fn load(&mut self, ty: VarType) -> Reg {
        let kind = if self.t.maybe(1, 5) {
            ParamKind::Broadcast
        } else {
            ParamKind::Input
        };
        let p = self.param(ty, kind);
        self.push(Inst::new(Op::Load, ty, &[], p as u64))
    }
    /// A register of type `ty` visible here: mostly an existing one, else a fresh literal, load or
    /// lane index.
    fn reg(&mut self, ty: VarType) -> Reg {
        let c = self.visible(ty);
        if !c.is_empty() && !self.t.maybe(1, 5) {
            return c[self.t.below(c.len() as u64) as usize];
        }
        if ty == VarType::Bool {
            return self.mask();
        }
        match self.t.below(5) {
            0 => {
                let v = self.t.below(44) as i64 - 4;
                self.small(ty, v)
            }
            1 => {
                let mut rng = Rng(self.t.next());
                let bits = rand_bits(&mut rng, ty);
                self.push(Inst::new(Op::Literal, ty, &[], bits))
            }
            2 | 3 => self.load(ty),
            _ if ty.is_int() => self.push(Inst::new(Op::Counter, ty, &[], 0)),
            _ => self.load(ty),
        }
    }
    /// A mask: an existing one, a literal or a fresh comparison.
    fn mask(&mut self) -> Reg {
        let c = self.visible(VarType::Bool);
        match self.t.below(4) {
            0 => self.small(VarType::Bool, 1),
            1 if !c.is_empty() => c[self.t.below(c.len() as u64) as usize],
            _ => {
                let ty = self.t.pick(&REGION_TYPES);
                let x = self.reg(ty);
                let y = self.reg(ty);
                let op = self
                    .t
                    .pick(&[Op::Lt, Op::Le, Op::Gt, Op::Ge, Op::Eq, Op::Ne]);
                self.push(Inst::new(op, VarType::Bool, &[x, y], 0))
            }
        }
    }
    /// A value of type `ty` computed from `x` (of that type) and other visible values.
    fn arith(&mut self, ty: VarType, x: Reg) -> Reg {
        const INT_OPS: &[Op] = &[
            Op::Add,
            Op::Sub,
            Op::Mul,
            Op::Xor,
            Op::And,
            Op::Or,
            Op::Min,
            Op::Max,
            Op::Div,
            Op::Rem,
            Op::Shl,
            Op::Shr,
        ];
        const FLOAT_OPS: &[Op] = &[Op::Add, Op::Sub, Op::Mul, Op::Div, Op::Min, Op::Max];
        match self.t.below(8) {
            0..=4 => {
                let op = self.t.pick(if ty.is_int() { INT_OPS } else { FLOAT_OPS });
                let y = self.reg(ty);
                let args = if self.t.maybe(1, 3) { [y, x] } else { [x, y] };
                self.push(Inst::new(op, ty, &args, 0))
            }
            5 => {
                let op = if ty.is_int() {
                    self.t.pick(&[Op::Neg, Op::Abs, Op::Not])
                } else {
                    self.t.pick(&[
                        Op::Neg,
                        Op::Abs,
                        Op::Sqrt,
                        Op::Floor,
                        Op::Ceil,
                        Op::Round,
                        Op::Trunc,
                    ])
                };
                self.push(Inst::new(op, ty, &[x], 0))
            }
            6 => {
                let (y, z) = (self.reg(ty), self.reg(ty));
                self.push(Inst::new(Op::Fma, ty, &[x, y, z], 0))
            }
            _ => {
                let m = self.mask();
                let y = self.reg(ty);
                self.push(Inst::new(Op::Select, ty, &[m, x, y], 0))
            }
        }
    }
    /// `source[idx]` from an indexed parameter (a literal index and mask now and then, values that
    /// the backend may treat as uniform).
    fn gather(&mut self, ty: VarType) -> Reg {
        let ity = self.t.pick(&INTS);
        let idx = match self.t.below(4) {
            0 => {
                let v = self.t.below(30) as i64 - 2;
                self.small(ity, v)
            }
            1 => {
                let x = self.reg(ity);
                let m = self.small(ity, 15);
                self.push(Inst::new(Op::And, ity, &[x, m], 0))
            }
            _ => self.reg(ity),
        };
        let mask = if self.t.maybe(1, 2) {
            self.mask()
        } else {
            self.small(VarType::Bool, 1)
        };
        let reuse: Vec<usize> = self
            .gather_sources
            .iter()
            .copied()
            .filter(|&p| self.k.params[p].ty == ty)
            .collect();
        let p = if !reuse.is_empty() && self.t.maybe(1, 2) {
            reuse[self.t.below(reuse.len() as u64) as usize]
        } else {
            self.k.params.push(Param {
                ty,
                kind: ParamKind::Indexed,
            });
            self.gather_sources.push(self.k.params.len() - 1);
            self.k.params.len() - 1
        };
        self.push(Inst::new(Op::Gather, ty, &[idx, mask], p as u64))
    }
    /// A scatter into a fresh indexed parameter. Inside loops the result must not depend on the
    /// order of lanes across iterations (the backends run lanes in different groupings): exact
    /// commutative reductions, or plain stores at the lane's own index.
    fn scatter(&mut self) {
        let ty = self.t.pick(&REGION_TYPES);
        let rop = match (ty.is_int(), self.loops > 0) {
            (true, _) => self.t.pick(&[
                ReduceOp::Add,
                ReduceOp::None,
                ReduceOp::Mul,
                ReduceOp::Min,
                ReduceOp::Max,
                ReduceOp::And,
                ReduceOp::Or,
            ]),
            (false, true) => self.t.pick(&[ReduceOp::Min, ReduceOp::None, ReduceOp::Max]),
            (false, false) => self.t.pick(&[
                ReduceOp::Add,
                ReduceOp::None,
                ReduceOp::Min,
                ReduceOp::Max,
                ReduceOp::Mul,
            ]),
        };
        let x = self.reg(ty);
        let ity = self.t.pick(&INTS);
        let idx = if rop == ReduceOp::None && self.loops > 0 {
            self.push(Inst::new(Op::Counter, ity, &[], 0))
        } else if self.t.maybe(1, 2) {
            let v = self.reg(ity);
            let m = self.small(ity, 7);
            self.push(Inst::new(Op::And, ity, &[v, m], 0))
        } else {
            self.reg(ity)
        };
        let mask = if self.t.maybe(1, 2) {
            self.mask()
        } else {
            self.small(VarType::Bool, 1)
        };
        self.k.params.push(Param {
            ty,
            kind: ParamKind::Indexed,
        });
        let p = self.k.params.len() - 1;
        self.push(Inst::new(Op::Scatter(rop), ty, &[x, idx, mask], p as u64));
    }
    /// One random straight-line instruction (with the values it needs).
    fn op(&mut self) {
        let ty = self.t.pick(&REGION_TYPES);
        match self.t.below(12) {
            0..=4 => {
                let x = self.reg(ty);
                self.arith(ty, x);
            }
            5 => {
                let from = self.t.pick(&VarType::ALL);
                let x = self.reg(from);
                self.push(Inst::new(Op::Cast, ty, &[x], 0));
            }
            6 | 7 => {
                self.mask();
            }
            8 => {
                let (a, b) = (self.mask(), self.mask());
                let op = self.t.pick(&[Op::And, Op::Or, Op::Xor, Op::Mul, Op::Add]);
                self.push(Inst::new(op, VarType::Bool, &[a, b], 0));
            }
            9 | 10 if !self.no_effects => {
                self.gather(ty);
            }
            11 if !self.no_effects => self.scatter(),
            _ => {
                let x = self.reg(ty);
                self.arith(ty, x);
            }
        }
    }
    fn ops(&mut self, max: u64) {
        for _ in 0..self.t.below(max + 1) {
            self.op();
        }
    }
    /// A loop or a switch, if nesting allows; else straight-line code.
    fn region(&mut self) {
        if self.depth >= 3 {
            return self.ops(2);
        }
        let can_loop = ITER_BUDGET / self.iters >= 2;
        if can_loop && self.t.below(2) == 0 {
            self.gen_loop();
        } else {
            self.gen_switch();
        }
    }

    fn gen_loop(&mut self) {
        use VarType::*;
        let allowed = ITER_BUDGET / self.iters;
        // How the loop ends: a counter phi below a bound ≤ 40 (then no limit, or a limit too), or
        // only the iteration limit.
        let mode = if allowed >= 4 { self.t.below(3) } else { 1 };
        let counter = mode != 1;
        let max = if mode == 0 {
            0
        } else {
            1 + self.t.below(allowed.min(49))
        };
        let blim = if counter {
            self.t.below((allowed - 3).min(40) + 1)
        } else {
            0
        };
        let bound_iters = match mode {
            0 => blim + 3,
            1 => max,
            _ => max.min(blim + 3),
        };
        // everything the loop needs from before it
        let mut phis: Vec<(VarType, Reg)> = Vec::new();
        let mut bound = None;
        if counter {
            let ty = self.t.pick(&[U32, I32]);
            let start = if ty == U32 {
                self.t.below(4) as i64
            } else {
                self.t.below(7) as i64 - 3
            };
            let init = self.small(ty, start);
            let raw = if self.t.maybe(1, 3) {
                self.reg(ty)
            } else {
                self.load(ty)
            };
            let lim = self.small(ty, blim as i64);
            bound = Some(self.push(Inst::new(Op::Min, ty, &[raw, lim], 0)));
            phis.push((ty, init));
        }
        let extra = self.t.below(3) as usize + usize::from(!counter);
        for _ in 0..extra.min(3 - phis.len()) {
            let ty = self.t.pick(&REGION_TYPES);
            let init = self.reg(ty);
            phis.push((ty, init));
        }
        // (the phis, the loop's results, join the scope around it)
        let lp = self.push(Inst::new(Op::LoopBegin, U32, &[], max));
        let phi_regs: Vec<Reg> = phis
            .iter()
            .map(|&(ty, init)| self.push(Inst::new(Op::Phi, ty, &[init], 0)))
            .collect();
        self.scopes.push(Vec::new());
        let (old_iters, old_depth) = (self.iters, self.depth);
        self.iters *= bound_iters.max(1);
        self.loops += 1;
        self.depth += 1;

        // condition
        self.no_effects = !self.cond_effects;
        self.ops(1);
        let c0 = bound.map(|b| {
            let (x, y) = (phi_regs[0], b);
            if self.t.maybe(1, 2) {
                self.push(Inst::new(Op::Gt, Bool, &[y, x], 0))
            } else {
                self.push(Inst::new(Op::Lt, Bool, &[x, y], 0))
            }
        });
        let c1 = if !counter || self.t.maybe(1, 2) {
            let first = usize::from(counter && phi_regs.len() > 1);
            let i = first + self.t.below((phi_regs.len() - first) as u64) as usize;
            let (ty, ph) = (phis[i].0, phi_regs[i]);
            Some(match self.t.below(6) {
                0 if max != 0 => self.small(Bool, 1), // never false: stopped by the limit
                1 if !self.no_effects => {
                    let g = self.gather(ty);
                    self.push(Inst::new(Op::Lt, Bool, &[ph, g], 0))
                }
                k => {
                    let other = match k {
                        2 => self.load(ty),
                        3 => self.reg(ty),
                        _ => {
                            let v = self.t.below(60) as i64 - 10;
                            self.small(ty, v)
                        }
                    };
                    let op = self
                        .t
                        .pick(&[Op::Lt, Op::Le, Op::Gt, Op::Ge, Op::Ne, Op::Eq]);
                    self.push(Inst::new(op, Bool, &[ph, other], 0))
                }
            })
        } else {
            None
        };
        let cond = match (c0, c1) {
            (Some(a), Some(b)) => {
                let op = self.t.pick(&[Op::And, Op::Mul, Op::Min]);
                self.push(Inst::new(op, Bool, &[a, b], 0))
            }
            (Some(a), None) | (None, Some(a)) => a,
            (None, None) => unreachable!("a loop has a condition"),
        };
        self.push(Inst::new(Op::LoopCond, Bool, &[cond], 0));
        self.no_effects = false;

        // body, with the next values at its end (or, if allowed, before a nested region)
        self.ops(3);
        let early: Vec<usize> = if self.early_next {
            (0..phis.len()).filter(|_| self.t.maybe(1, 3)).collect()
        } else {
            Vec::new()
        };
        let late: Vec<usize> = (0..phis.len()).filter(|i| !early.contains(i)).collect();
        self.nexts(&phis, &phi_regs, counter, &early);
        if !early.is_empty() || self.t.maybe(1, 2) {
            self.region();
            self.ops(2);
        }
        self.nexts(&phis, &phi_regs, counter, &late);
        self.push(Inst::new(Op::LoopEnd, U32, &[lp], 0));
        self.scopes.pop();
        self.iters = old_iters;
        self.depth = old_depth;
        self.loops -= 1;
    }

    /// `next` for the phis `which`, in random order; the counter (the first phi when `counter`)
    /// steps up by 1 or 2.
    fn nexts(&mut self, phis: &[(VarType, Reg)], phi_regs: &[Reg], counter: bool, which: &[usize]) {
        let mut order = which.to_vec();
        for i in (1..order.len()).rev() {
            let j = self.t.below(i as u64 + 1) as usize;
            order.swap(i, j);
        }
        // the values first (other instructions may sit between them), then the nexts
        let mut vals = Vec::new();
        for &i in &order {
            let (ty, ph) = (phis[i].0, phi_regs[i]);
            let v = if counter && i == 0 {
                let step = 1 + self.t.below(2) as i64;
                let s = self.small(ty, step);
                self.push(Inst::new(Op::Add, ty, &[ph, s], 0))
            } else {
                match self.t.below(5) {
                    // another phi of the same type (a swap) or any visible value
                    0 => {
                        let same: Vec<Reg> = phi_regs
                            .iter()
                            .copied()
                            .filter(|&q| self.k.ty(q) == ty)
                            .collect();
                        same[self.t.below(same.len() as u64) as usize]
                    }
                    1 => self.reg(ty),
                    _ => self.arith(ty, ph),
                }
            };
            vals.push((ph, v));
            if self.t.maybe(1, 3) {
                self.op();
            }
        }
        for (ph, v) in vals {
            let ty = self.k.ty(ph);
            self.push(Inst::new(Op::LoopNext, ty, &[ph, v], 0));
        }
    }

    fn gen_switch(&mut self) {
        use VarType::*;
        let ncases = 1 + self.t.below(4) as usize;
        let sel = match self.t.below(4) {
            0 | 1 => {
                let x = self.load(U32);
                let m = self.t.pick(&[3, 7]);
                let m = self.small(U32, m);
                self.push(Inst::new(Op::And, U32, &[x, m], 0))
            }
            2 => self.load(U32),
            _ => self.reg(U32),
        };
        let masks: Vec<Reg> = match self.t.below(5) {
            // disjoint: equal to distinct literals
            0 | 1 => {
                let mut vals: Vec<i64> = (0..8).collect();
                for i in (1..vals.len()).rev() {
                    let j = self.t.below(i as u64 + 1) as usize;
                    vals.swap(i, j);
                }
                vals[..ncases]
                    .iter()
                    .map(|&v| {
                        let c = self.small(U32, v);
                        self.push(Inst::new(Op::Eq, Bool, &[sel, c], 0))
                    })
                    .collect()
            }
            // disjoint: consecutive ranges
            2 => {
                let mut lo = 0i64;
                let mut masks = Vec::new();
                for _ in 0..ncases {
                    let hi = lo + 1 + self.t.below(4) as i64;
                    let (a, b) = (self.small(U32, lo), self.small(U32, hi));
                    let ge = self.push(Inst::new(Op::Ge, Bool, &[sel, a], 0));
                    let lt = self.push(Inst::new(Op::Lt, Bool, &[sel, b], 0));
                    masks.push(self.push(Inst::new(Op::And, Bool, &[ge, lt], 0)));
                    lo = hi;
                }
                masks
            }
            // disjoint, with cases that no lane takes
            3 => (0..ncases)
                .map(|j| match self.t.below(3) {
                    0 => self.small(Bool, 0),
                    1 => {
                        let m = self.small(U32, 3);
                        let x = self.push(Inst::new(Op::And, U32, &[sel, m], 0));
                        let c = self.small(U32, 4 + j as i64);
                        self.push(Inst::new(Op::Eq, Bool, &[x, c], 0))
                    }
                    _ => {
                        let c = self.small(U32, j as i64);
                        self.push(Inst::new(Op::Eq, Bool, &[sel, c], 0))
                    }
                })
                .collect(),
            // anything (overlapping masks: the later case's yields win)
            _ => (0..ncases).map(|_| self.mask()).collect(),
        };
        let slots: Vec<VarType> = (0..self.t.below(4))
            .map(|_| {
                if self.t.maybe(1, 8) {
                    Bool
                } else {
                    self.t.pick(&REGION_TYPES)
                }
            })
            .collect();
        let kind = self.t.below(2);
        let sw = self.push(Inst::new(Op::Switch, U32, &[], kind));
        let old_depth = self.depth;
        self.depth += 1;
        let mut yielded = vec![false; slots.len()];
        for m in masks {
            self.push(Inst::new(Op::Case, U32, &[m], 0));
            self.scopes.push(Vec::new());
            self.ops(3);
            if self.t.maybe(2, 5) {
                self.region();
                self.ops(1);
            }
            for (j, &ty) in slots.iter().enumerate() {
                if !self.t.maybe(1, 4) {
                    let v = self.reg(ty);
                    self.push(Inst::new(Op::Yield, ty, &[v], j as u64));
                    yielded[j] = true;
                }
            }
            self.scopes.pop();
        }
        self.push(Inst::new(Op::SwitchEnd, U32, &[sw], 0));
        self.depth = old_depth;
        for (j, &ty) in slots.iter().enumerate() {
            // an output nobody reads now and then
            if yielded[j] && !self.t.maybe(1, 6) {
                self.push(Inst::new(Op::Out, ty, &[sw], j as u64));
            }
        }
    }
}

/// A random well-formed kernel with regions, driven by `tape`; every value visible at the end
/// is stored. `early_next`: `next`s may precede a nested region in a loop body; `cond_effects`:
/// loop conditions may gather and scatter.
fn build_region_kernel(tape: &[u64], early_next: bool, cond_effects: bool) -> Kernel {
    let mut g = RegionGen {
        t: Tape { vals: tape, pos: 0 },
        k: Kernel::default(),
        scopes: vec![Vec::new()],
        gather_sources: Vec::new(),
        iters: 1,
        loops: 0,
        depth: 0,
        early_next,
        cond_effects,
        no_effects: false,
    };
    for _ in 0..1 + g.t.below(3) {
        g.ops(3);
        g.region();
    }
    g.ops(2);
    let top = g.scopes[0].clone();
    for r in top {
        let ty = g.k.ty(r);
        g.k.params.push(Param {
            ty,
            kind: ParamKind::Output,
        });
        let p = g.k.params.len() - 1;
        g.k.insts.push(Inst::new(Op::Store, ty, &[r], p as u64));
    }
    if let Err(errs) = g.k.verify() {
        panic!("generated an invalid region kernel: {errs:?}\n{}", g.k);
    }
    g.k
}

/// How many loops of `k` have a condition with the same value in every lane (the Cranelift
/// backend runs those without masks): literals, broadcast loads, pure values of those, and phis
/// whose initial and next values are such values in loops with such conditions (the greatest
/// fixpoint).
fn uniform_loops(k: &Kernel) -> usize {
    use std::collections::HashMap;
    let (mut loop_of, mut cond_of, mut next_of) = (HashMap::new(), HashMap::new(), HashMap::new());
    let mut open = Vec::new();
    for (i, inst) in k.insts.iter().enumerate() {
        match inst.op {
            Op::LoopBegin | Op::Switch => open.push(i),
            Op::LoopEnd | Op::SwitchEnd => {
                open.pop();
            }
            Op::Phi => {
                loop_of.insert(i, *open.last().expect("a loop"));
            }
            Op::LoopCond => {
                cond_of.insert(*open.last().expect("a loop"), inst.args[0] as usize);
            }
            Op::LoopNext => {
                next_of.insert(inst.args[0] as usize, inst.args[1] as usize);
            }
            _ => {}
        }
    }
    let mut ok: HashMap<usize, bool> = loop_of.keys().map(|&p| (p, true)).collect();
    loop {
        let mut u = vec![false; k.insts.len()];
        for (i, inst) in k.insts.iter().enumerate() {
            u[i] = match inst.op {
                Op::Literal => true,
                Op::Load => k.params[inst.imm as usize].kind == ParamKind::Broadcast,
                Op::Phi => ok[&i] && u[inst.args[0] as usize],
                op if op.is_region() => false,
                op => {
                    op.is_pure()
                        && op != Op::Counter
                        && inst.has_value()
                        && inst.operands().iter().all(|&a| u[a as usize])
                }
            };
        }
        let mut changed = false;
        for (&p, good) in ok.iter_mut() {
            let still = u[p] && next_of.get(&p).is_some_and(|&x| u[x]) && u[cond_of[&loop_of[&p]]];
            if *good && !still {
                *good = false;
                changed = true;
            }
        }
        if !changed {
            return cond_of.values().filter(|&&c| u[c]).count();
        }
    }
}

/// The filetest of uniform loops that only some lanes enter (`uniform_loops_entered_by_some_lanes_*`,
/// moved from here) does exercise uniform loops: the backends find at least two in its kernel.
#[test]
fn the_uniform_loop_filetests_have_uniform_loops() {
    for text in [
        include_str!("filetests/uniform_loops_entered_by_some_lanes_0_0.kir"),
        include_str!("filetests/uniform_loops_entered_by_some_lanes_0_257.kir"),
    ] {
        let k = Kernel::parse(text).expect("the filetest parses");
        assert!(uniform_loops(&k) >= 2, "{k}");
    }
}

/// The shapes a region kernel contains (what the generator is meant to produce), by name.
fn region_shapes(k: &Kernel) -> std::collections::BTreeSet<String> {
    let mut shapes = std::collections::BTreeSet::new();
    let mut add = |s: &str| {
        shapes.insert(s.to_string());
    };
    if uniform_loops(k) > 0 {
        add("loop with a uniform condition");
    }
    // the kinds of the open regions (innermost last), and the phis of the open loops
    let mut open: Vec<Op> = Vec::new();
    let mut phis_of: Vec<Vec<Reg>> = Vec::new();
    for (i, inst) in k.insts.iter().enumerate() {
        let in_loop = open.contains(&Op::LoopBegin);
        match inst.op {
            Op::LoopBegin => {
                add(if inst.imm == 0 {
                    "loop without limit"
                } else {
                    "loop with limit"
                });
                if in_loop {
                    add("loop in loop");
                }
                if open.last() == Some(&Op::Case) && in_loop {
                    add("loop in case in loop");
                }
                open.push(Op::LoopBegin);
                phis_of.push(Vec::new());
            }
            Op::Phi => {
                phis_of.last_mut().expect("loop").push(i as Reg);
                add(&format!("phi {}", inst.ty));
            }
            Op::LoopNext
                if phis_of.last().expect("loop").contains(&inst.args[1])
                    && inst.args[0] != inst.args[1] =>
            {
                add("next from another phi")
            }
            Op::LoopEnd => {
                open.pop();
                phis_of.pop();
            }
            Op::Switch => {
                if in_loop {
                    add("switch in loop");
                }
                if open.last() == Some(&Op::Case) {
                    add("switch in case");
                }
                open.push(Op::Switch);
            }
            Op::Case => {
                if open.last() == Some(&Op::Case) {
                    open.pop();
                } else {
                    add("switch with cases");
                }
                let m = &k.insts[inst.args[0] as usize];
                if m.op == Op::Literal && m.imm == 0 {
                    add("case never taken");
                }
                open.push(Op::Case);
            }
            Op::SwitchEnd => {
                if open.last() == Some(&Op::Case) {
                    open.pop();
                } else {
                    add("switch without cases");
                }
                open.pop();
            }
            Op::Out => add("switch output"),
            Op::Gather if in_loop => add("gather in loop"),
            Op::Scatter(_) if in_loop => add("scatter in loop"),
            Op::Gather if !open.is_empty() => add("gather in case"),
            Op::Scatter(_) if !open.is_empty() => add("scatter in case"),
            _ => {}
        }
    }
    shapes
}

/// Ranges for region kernels: small ones, around the interpreter's 256-lane chunks and around
/// the 16384-lane blocks.
fn region_range() -> impl Strategy<Value = (u64, u64)> {
    prop_oneof![
        6 => small_range(),
        1 => prop::sample::select(vec![255u64, 256, 257, 511, 512, 513, 1023])
            .prop_flat_map(|n| (prop_oneof![Just(0u64), Just(1), Just(3), 0..=n, (n - 6)..=n], Just(n))),
        1 => prop::sample::select(vec![16383u64, 16384, 16385])
            .prop_flat_map(|n| (prop_oneof![Just(0u64), Just(n - 1), (n - 300)..=n], Just(n))),
    ]
}

proptest! {
    #![proptest_config(config(300))]
    /// Random region kernels on a random code-generation variant against the interpreter, over a
    /// random range and a fixed one.
    #[test]
    fn random_region_kernels_agree(
        tape in prop::collection::vec(any::<u64>(), 0..200),
        r in region_range(),
        variant in 0usize..10,
        seed in any::<u64>(),
    ) {
        let kernel = build_region_kernel(&tape, true, true);
        text_round_trips(&kernel).map_err(TestCaseError::fail)?;
        let (name, be) = &variant_backends()[variant % variant_backends().len()];
        let compiled = be
            .compile(&kernel)
            .map_err(|e| TestCaseError::fail(format!("{name}: {e}\n{kernel}")))?;
        for (j, &(start, end)) in [r, (5, 23)].iter().enumerate() {
            let bufs = make_buffers(&kernel, end, seed.wrapping_add(j as u64));
            check_compiled(&kernel, &*compiled, &bufs, start, end)
                .map_err(|e| TestCaseError::fail(format!("{name}: {e}")))?;
        }
    }
}

#[test]
fn region_generator_produces_every_shape() {
    let want = [
        "loop without limit",
        "loop with limit",
        "loop in loop",
        "loop in case in loop",
        "loop with a uniform condition",
        "switch in loop",
        "switch in case",
        "switch output",
        "case never taken",
        "next from another phi",
        "gather in loop",
        "scatter in loop",
        "gather in case",
        "scatter in case",
        "phi u32",
        "phi i32",
        "phi f32",
        "phi f64",
        "phi i64",
    ];
    let mut seen = std::collections::BTreeMap::new();
    let mut rng = Rng(77);
    for _ in 0..1000 {
        let len = rng.below(200) as usize;
        let tape: Vec<u64> = (0..len).map(|_| rng.next()).collect();
        for shape in region_shapes(&build_region_kernel(&tape, false, false)) {
            *seen.entry(shape).or_insert(0) += 1;
        }
    }
    eprintln!("shapes in 1000 kernels: {seen:?}");
    let missing: Vec<&str> = want
        .iter()
        .copied()
        .filter(|s| !seen.contains_key(*s))
        .collect();
    assert!(
        missing.is_empty(),
        "the generator never produces {missing:?}"
    );
}

// ---------------------------------------------------------------------------------------------
// Region edge cases, each checked against hand-computed results on both backends.

/// Checks `k` on every code-generation variant against the interpreter (buffers and status), and
/// returns the interpreter's buffers and status after asserting that the default Cranelift
/// backend reports the same status.
/// LLVM backends at every width the backend can pick on any host (4, 8 or 16 lanes per vector,
/// times 1, 2 or 4 for smaller kernels), run on this CPU whatever its vector registers (LLVM
/// splits or merges them); None where this machine has no libLLVM.
fn llvm_widths() -> Option<&'static [(usize, LlvmBackend)]> {
    static BE: OnceLock<Option<Vec<(usize, LlvmBackend)>>> = OnceLock::new();
    llvm()?;
    BE.get_or_init(|| {
        [4usize, 8, 16, 32, 64]
            .into_iter()
            .map(|w| {
                LlvmBackend::create_with(false, w)
                    .map(|b| (w, b.strict()))
                    .ok()
            })
            .collect()
    })
    .as_deref()
}

proptest! {
    #![proptest_config(config(1200))]
    /// Random straight-line kernels through LLVM at every vector width, against the interpreter.
    #[test]
    fn llvm_random_kernels_small_ranges(
        choices in prop::collection::vec(choice(), 1..20),
        r1 in small_range(),
        r2 in small_range(),
        width in 0usize..5,
        seed in any::<u64>(),
    ) {
        if let Some(bes) = llvm_widths() {
            diff_case(&choices, &[r1, r2], seed, &bes[width].1)?;
            if seed % 16 == 0 {
                // (a sixteenth of the cases: three more LLVM compiles each)
                compiles_for_other_hosts(&build_kernel(&choices)).map_err(TestCaseError::fail)?;
            }
        }
    }
}

proptest! {
    #![proptest_config(config(200))]
    /// As above over ranges around the launcher's block size.
    #[test]
    fn llvm_random_kernels_block_ranges(
        choices in prop::collection::vec(choice(), 1..12),
        r in block_range(),
        seed in any::<u64>(),
    ) {
        if let Some(be) = llvm() {
            diff_case(&choices, &[r], seed, be)?;
        }
    }
}

proptest! {
    #![proptest_config(config(300))]
    /// Random region kernels (nested loops and switches) through LLVM at every width.
    #[test]
    fn llvm_random_region_kernels_agree(
        tape in prop::collection::vec(any::<u64>(), 0..200),
        r in region_range(),
        width in 0usize..5,
        seed in any::<u64>(),
    ) {
        if let Some(bes) = llvm_widths() {
            let (w, be) = &bes[width];
            let kernel = build_region_kernel(&tape, true, true);
            if seed % 4 == 0 {
                compiles_for_other_hosts(&kernel).map_err(TestCaseError::fail)?;
            }
            let compiled = be
                .compile(&kernel)
                .map_err(|e| TestCaseError::fail(format!("llvm w{w}: {e}\n{kernel}")))?;
            for (j, &(start, end)) in [r, (5, 23)].iter().enumerate() {
                let bufs = make_buffers(&kernel, end, seed.wrapping_add(j as u64));
                check_compiled(&kernel, &*compiled, &bufs, start, end)
                    .map_err(|e| TestCaseError::fail(format!("llvm w{w}: {e}")))?;
            }
        }
    }
}

/// Outputs past `streaming_bytes()` take LLVM's second lane loop (non-temporal stores) when their
/// first lane is 32-byte aligned (starts 0 and 8), the plain loop otherwise (start 3): the same
/// values, a range that ends off the vector grid (37 lanes past a multiple of 16), every width.
#[test]
fn llvm_streaming_stores_for_big_outputs_agree() {
    let n = (kiln_core::backend::llvm::ir::streaming_bytes() / 4) as usize + 37;
    let k = Kernel {
        params: vec![
            p(VarType::F32, ParamKind::Input),
            p(VarType::F32, ParamKind::Input),
            p(VarType::F32, ParamKind::Output),
            p(VarType::I64, ParamKind::Output),
        ],
        insts: vec![
            Inst::new(Op::Load, VarType::F32, &[], 0),
            Inst::new(Op::Load, VarType::F32, &[], 1),
            Inst::new(Op::Literal, VarType::F32, &[], 1.5f32.to_bits() as u64),
            Inst::new(Op::Fma, VarType::F32, &[2, 0, 1], 0),
            Inst::new(Op::Store, VarType::F32, &[3], 2),
            Inst::new(Op::Counter, VarType::I64, &[], 0),
            Inst::new(Op::Store, VarType::I64, &[5], 3),
        ],
    };
    let mut rng = Rng(7);
    let a: Vec<u64> = (0..n).map(|_| rand_bits(&mut rng, VarType::F32)).collect();
    let b: Vec<u64> = (0..n).map(|_| rand_bits(&mut rng, VarType::F32)).collect();
    let bufs = vec![
        Buf::from_bits(VarType::F32, &a),
        Buf::from_bits(VarType::F32, &b),
        Buf::new(VarType::F32, n),
        Buf::new(VarType::I64, n),
    ];
    // (a launch always ends at its outputs' length: Cranelift may write a whole last vector into
    // the slack past it)
    check(&k, &bufs, 5, n as u64, cranelift()).unwrap();
    if let Some(bes) = llvm_widths() {
        for (w, be) in bes {
            let c = be.compile(&k).unwrap();
            for start in [0, 3, 8] {
                check_compiled(&k, &*c, &bufs, start, n as u64)
                    .unwrap_or_else(|e| panic!("llvm w{w} from lane {start}: {e}"));
            }
        }
    }
}

#[test]
fn llvm_is_tested_here_or_says_why_not() {
    match llvm() {
        Some(be) => eprintln!(
            "LLVM backend under test: {} ({} lanes)",
            be.library_path().display(),
            be.width()
        ),
        None => eprintln!("LLVM backend tests SKIPPED on this machine (see the reason above)"),
    }
}

// ---------------------------------------------------------------------------------------------
// Backend disagreements found by the region generator, minimised (fixed; kept as regressions).

/// Runs `f` in a forked child process and returns whether it exited normally with success (so
/// that a test can report a crash of generated code instead of dying of it).
fn succeeds_in_child(f: &dyn Fn()) -> bool {
    // SAFETY: the child only runs `f` and leaves with `_exit`; the parent waits for it.
    unsafe {
        let pid = libc::fork();
        assert!(pid >= 0, "fork failed");
        if pid == 0 {
            let ok = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).is_ok();
            libc::_exit(if ok { 0 } else { 1 });
        }
        let mut st = 0;
        libc::waitpid(pid, &mut st, 0);
        libc::WIFEXITED(st) && libc::WEXITSTATUS(st) == 0
    }
}

/// Float comparisons with an operand loaded once, from odd lanes: without AVX, Cranelift 0.123
/// folds the load into the SSE `cmpps`/`cmppd`, which require a 16-byte-aligned memory operand
/// (their definitions in cranelift-assembler-x64-meta lack `align(...)`, unlike `addps`), and the
/// kernel dies of SIGSEGV. Found by the region generator, whose loads often have a single use (the
/// other generators store every value); not specific to regions.
#[test]
fn sse_float_comparison_with_a_misaligned_load() {
    use VarType::*;
    let be = CraneliftBackend::with_settings(&[("has_avx", "false")]).expect("backend");
    let f64_lt = Kernel {
        // -y < x, -y <= x, ...: x is the memory operand
        params: vec![
            p(F64, ParamKind::Input),
            p(F64, ParamKind::Input),
            p(Bool, ParamKind::Output),
        ],
        insts: vec![
            Inst::new(Op::Load, F64, &[], 1),
            Inst::new(Op::Neg, F64, &[0], 0),
            Inst::new(Op::Load, F64, &[], 0),
            Inst::new(Op::Lt, Bool, &[1, 2], 0),
            Inst::new(Op::Store, Bool, &[3], 2),
        ],
    };
    let f32_ge = Kernel {
        // x >= 0 becomes 0 <= x: x is the memory operand
        params: vec![
            p(F32, ParamKind::Input),
            p(F32, ParamKind::Input),
            p(Bool, ParamKind::Output),
        ],
        insts: vec![
            Inst::new(Op::Literal, F32, &[], 0),
            Inst::new(Op::Load, F32, &[], 0),
            Inst::new(Op::Ge, Bool, &[1, 0], 0),
            Inst::new(Op::Store, Bool, &[2], 2),
        ],
    };
    for k in [f64_lt, f32_ge] {
        let compiled = be.compile(&k).expect("compiles");
        let n = 40u64;
        let ty = k.params[0].ty;
        let mut rng = Rng(5);
        let xs: Vec<u64> = (0..n).map(|_| rand_bits(&mut rng, ty)).collect();
        let bufs = vec![
            Buf::from_bits(ty, &xs),
            Buf::from_bits(ty, &xs),
            Buf::new(Bool, n as usize),
        ];
        for start in [0, 1, 2, 3] {
            let ok = succeeds_in_child(&|| {
                check_compiled(&k, &*compiled, &bufs, start, n).unwrap();
            });
            assert!(
                ok,
                "from lane {start}: the compiled kernel crashed or disagreed\n{k}"
            );
        }
    }
}

// ---------------------------------------------------------------------------------------------
// `Kernel::verify` rejects malformed regions, naming the problem.

/// A counting loop (`r2`..`r9`), its phi `r3` stored after it.
fn counting_loop() -> Vec<Inst> {
    use VarType::*;
    vec![
        Inst::new(Op::Literal, U32, &[], 0),      // r0
        Inst::new(Op::Literal, U32, &[], 5),      // r1
        Inst::new(Op::LoopBegin, U32, &[], 0),    // r2
        Inst::new(Op::Phi, U32, &[0], 0),         // r3
        Inst::new(Op::Lt, Bool, &[3, 1], 0),      // r4
        Inst::new(Op::LoopCond, Bool, &[4], 0),   // r5
        Inst::new(Op::Literal, U32, &[], 1),      // r6
        Inst::new(Op::Add, U32, &[3, 6], 0),      // r7
        Inst::new(Op::LoopNext, U32, &[3, 7], 0), // r8
        Inst::new(Op::LoopEnd, U32, &[2], 0),     // r9
        Inst::new(Op::Store, U32, &[3], 0),       // r10
    ]
}

/// A two-case switch on `r0` (`r3`..`r10`), its output stored after it.
fn two_case_switch() -> Vec<Inst> {
    use VarType::*;
    vec![
        Inst::new(Op::Literal, U32, &[], 1),    // r0
        Inst::new(Op::Literal, Bool, &[], 1),   // r1
        Inst::new(Op::Not, Bool, &[1], 0),      // r2
        Inst::new(Op::Switch, U32, &[], 0),     // r3
        Inst::new(Op::Case, U32, &[1], 0),      // r4
        Inst::new(Op::Add, U32, &[0, 0], 0),    // r5
        Inst::new(Op::Yield, U32, &[5], 0),     // r6
        Inst::new(Op::Case, U32, &[2], 0),      // r7
        Inst::new(Op::Yield, U32, &[0], 0),     // r8
        Inst::new(Op::SwitchEnd, U32, &[3], 0), // r9
        Inst::new(Op::Out, U32, &[3], 0),       // r10
        Inst::new(Op::Store, U32, &[10], 0),    // r11
    ]
}

/// Asserts that `insts` (one `u32` output) fail `verify` with an error containing `want`.
fn assert_rejected(insts: Vec<Inst>, want: &str) {
    let k = Kernel {
        params: vec![p(VarType::U32, ParamKind::Output)],
        insts,
    };
    match k.verify() {
        Ok(()) => panic!("verify accepted a kernel expected to fail with `{want}`:\n{k}"),
        Err(errs) => assert!(
            errs.iter().any(|e| e.contains(want)),
            "expected an error containing `{want}`, got {errs:?}\n{k}"
        ),
    }
}

#[test]
fn verify_rejects_malformed_regions() {
    use VarType::*;
    let ok = |insts: Vec<Inst>| {
        let k = Kernel {
            params: vec![p(U32, ParamKind::Output)],
            insts,
        };
        k.verify().unwrap_or_else(|e| panic!("{e:?}\n{k}"));
    };
    ok(counting_loop());
    ok(two_case_switch());

    // a register defined inside a loop, used after its endloop
    let mut k = counting_loop();
    k.insert(10, Inst::new(Op::Add, U32, &[7, 7], 0));
    assert_rejected(k, "operand r7 is defined inside a region that has ended");
    // ... or as the value stored
    let mut k = counting_loop();
    k[10] = Inst::new(Op::Store, U32, &[7], 0);
    assert_rejected(k, "operand r7 is defined inside a region that has ended");
    // a value of one case used in the next
    let mut k = two_case_switch();
    k[8] = Inst::new(Op::Yield, U32, &[5], 0);
    assert_rejected(k, "operand r5 is defined inside a region that has ended");

    // a phi that does not directly follow its loop
    let mut k = counting_loop();
    k.insert(3, Inst::new(Op::Literal, U32, &[], 2));
    for i in &mut k[4..] {
        let n = i.op.arity();
        for a in &mut i.args[..n] {
            if *a >= 3 {
                *a += 1;
            }
        }
    }
    assert_rejected(k, "a phi must directly follow its loop or another phi");
    // a phi outside any loop
    let mut k = counting_loop();
    k[10] = Inst::new(Op::Phi, U32, &[0], 0);
    assert_rejected(k, "a phi must directly follow its loop or another phi");

    // a case mask defined inside the switch (in the previous case)
    let mut k = two_case_switch();
    k[5] = Inst::new(Op::Not, Bool, &[1], 0);
    k[6] = Inst::new(Op::Yield, U32, &[0], 0);
    k[7] = Inst::new(Op::Case, U32, &[5], 0);
    assert_rejected(k, "mask r5 is defined inside the switch");

    // a phi without its next value
    let mut k = counting_loop();
    k[8] = Inst::new(Op::Literal, U32, &[], 9);
    assert_rejected(k, "phi r3 has no next value");

    // regions never closed: a loop, a switch
    let mut k = counting_loop();
    k.truncate(9);
    assert_rejected(k, "region is never closed");
    let mut k = two_case_switch();
    k.truncate(9);
    assert_rejected(k, "region is never closed");

    // stores inside a loop and inside a case
    let mut k = counting_loop();
    k.insert(8, Inst::new(Op::Store, U32, &[7], 0));
    assert_rejected(k, "stores go outside every region");
    let mut k = two_case_switch();
    k[6] = Inst::new(Op::Store, U32, &[5], 0);
    assert_rejected(k, "stores go outside every region");
}

/// Exclusive reduce-add scatters (`SCATTER_EXCLUSIVE`, what privatised launches compile) into
/// targets around the register sizes LLVM keeps them in (4/8/16 elements by type and width),
/// through LLVM at every width (4 to 64 lanes) and compiled for the other kinds of host: every
/// lane in range (the register path), and with masked-off and out-of-range lanes (the per-lane
/// path); the interpreter's bits, status counters included.
#[test]
fn llvm_exclusive_scatter_adds_into_small_targets_at_every_width() {
    use VarType::*;
    let Some(bes) = llvm_widths() else { return };
    for ty in [F32, F64, I32, U64] {
        for len in [1usize, 3, 4, 5, 8, 9, 16, 17] {
            for in_range in [true, false] {
                let mut scatter = Inst::new(Op::Scatter(ReduceOp::Add), ty, &[0, 1, 2], 3);
                scatter.imm |= kiln_core::kernel::SCATTER_EXCLUSIVE;
                let k = scatter_kernel(ty, U32, scatter);
                assert!(k.insts[3].exclusive());
                let mut rng = Rng(len as u64 * 31 + u64::from(in_range));
                let n = 203;
                let vals: Vec<u64> = (0..n).map(|_| rand_bits(&mut rng, ty)).collect();
                let spread = if in_range { len } else { len + 2 };
                let idx: Vec<u64> = (0..n).map(|_| rng.next() % spread as u64).collect();
                let mask: Vec<u64> = (0..n).map(|i| u64::from(in_range || i % 7 != 3)).collect();
                let target: Vec<u64> = (0..len).map(|_| rand_bits(&mut rng, ty)).collect();
                let bufs = vec![
                    Buf::from_bits(ty, &vals),
                    Buf::from_bits(U32, &idx),
                    Buf::from_bits(Bool, &mask),
                    Buf::from_bits(ty, &target),
                ];
                for (w, be) in bes {
                    let compiled = be.compile(&k).unwrap_or_else(|e| panic!("w{w}: {e}"));
                    for (s, e) in [(0, n as u64), (3, 150), (64, 128), (7, 8)] {
                        check_compiled(&k, &*compiled, &bufs, s, e).unwrap_or_else(|m| {
                            panic!("{ty} len {len} in range {in_range} w{w} [{s}, {e}): {m}")
                        });
                    }
                }
                compiles_for_other_hosts(&k).unwrap_or_else(|m| panic!("{m}"));
            }
        }
    }
}

/// A gather at a literal index (one scalar load, broadcast; out-of-range lanes counted only when
/// the index is out of range) at every LLVM width, in and out of range, masked.
#[test]
fn llvm_literal_index_gathers_at_every_width() {
    use VarType::*;
    let Some(bes) = llvm_widths() else { return };
    for (lit, len) in [(2u64, 5usize), (4, 5), (5, 5), (u32::MAX as u64, 5), (0, 0)] {
        let k = Kernel {
            params: vec![
                p(F32, ParamKind::Indexed),
                p(Bool, ParamKind::Input),
                p(F32, ParamKind::Output),
            ],
            insts: vec![
                Inst::new(Op::Literal, U32, &[], lit),
                Inst::new(Op::Load, Bool, &[], 1),
                Inst::new(Op::Gather, F32, &[0, 1], 0),
                Inst::new(Op::Store, F32, &[2], 2),
            ],
        };
        let mut rng = Rng(lit ^ 0x5a);
        let n = 77;
        let src: Vec<u64> = (0..len).map(|_| rand_bits(&mut rng, F32)).collect();
        let mask: Vec<u64> = (0..n).map(|i| u64::from(i % 3 != 1)).collect();
        let bufs = vec![
            Buf::from_bits(F32, &src),
            Buf::from_bits(Bool, &mask),
            Buf::from_bits(F32, &vec![0; n]),
        ];
        for (w, be) in bes {
            let compiled = be.compile(&k).unwrap_or_else(|e| panic!("w{w}: {e}"));
            for (s, e) in [(0, n as u64), (5, 70), (76, 77)] {
                check_compiled(&k, &*compiled, &bufs, s, e)
                    .unwrap_or_else(|m| panic!("index {lit} of {len}, w{w} [{s}, {e}): {m}"));
            }
        }
        compiles_for_other_hosts(&k).unwrap_or_else(|m| panic!("{m}"));
    }
}

/// Rows read and written through `counter + uniform` indices (`x[t * stride + base + lane]`), the
/// access of a fused scan: in a loop with a uniform trip count (`looped`) or straight, plus a
/// scatter through the same index. The run check (one bounds compare per vector or per iteration's
/// groups) must send every run that is not wholly in bounds, starts below zero or wraps the index
/// type to the per-lane path, with the same out-of-range counts as the interpreter.
fn row_kernel(ity: VarType, ty: VarType, stride: u64, steps: u64, looped: bool) -> Kernel {
    use VarType::*;
    let mut insts = vec![
        Inst::new(Op::Counter, ity, &[], 0),      // r0 lane
        Inst::new(Op::Load, ity, &[], 0),         // r1 base (broadcast)
        Inst::new(Op::Literal, ity, &[], stride), // r2
        Inst::new(Op::Literal, ty, &[], 0),       // r3 initial sum
        Inst::new(Op::Literal, ity, &[], 0),      // r4 t = 0
        Inst::new(Op::Literal, ity, &[], 1),      // r5
        Inst::new(Op::Literal, ity, &[], steps),  // r6
        Inst::new(Op::Literal, Bool, &[], 1),     // r7 true
    ];
    if looped {
        insts.extend([
            Inst::new(Op::LoopBegin, ity, &[], 0),   // r8
            Inst::new(Op::Phi, ity, &[4], 0),        // r9 t
            Inst::new(Op::Phi, ty, &[3], 0),         // r10 sum
            Inst::new(Op::Lt, Bool, &[9, 6], 0),     // r11
            Inst::new(Op::LoopCond, Bool, &[11], 0), // r12
            Inst::new(Op::Mul, ity, &[9, 2], 0),     // r13 t * stride
            Inst::new(Op::Add, ity, &[13, 1], 0),    // r14 + base: uniform
            Inst::new(Op::Add, ity, &[0, 14], 0),    // r15 + lane: a row index
            Inst::new(Op::Gather, ty, &[15, 7], 1),  // r16
            Inst::new(Op::Add, ty, &[10, 16], 0),    // r17
            Inst::new(Op::Scatter(ReduceOp::None), ty, &[17, 15, 7], 2), // r18
            Inst::new(Op::Add, ity, &[9, 5], 0),     // r19
            Inst::new(Op::LoopNext, ity, &[9, 19], 0), // r20
            Inst::new(Op::LoopNext, ty, &[10, 17], 0), // r21
            Inst::new(Op::LoopEnd, ity, &[8], 0),    // r22
            Inst::new(Op::Store, ty, &[10], 3),      // r23
        ]);
    } else {
        insts.extend([
            Inst::new(Op::Add, ity, &[1, 0], 0),   // r8 base + lane
            Inst::new(Op::Gather, ty, &[8, 7], 1), // r9
            Inst::new(Op::Add, ty, &[9, 9], 0),    // r10
            Inst::new(Op::Scatter(ReduceOp::None), ty, &[10, 8, 7], 2), // r11
            Inst::new(Op::Store, ty, &[10], 3),    // r12
        ]);
    }
    Kernel {
        params: vec![
            p(ity, ParamKind::Broadcast),
            p(ty, ParamKind::Indexed),
            p(ty, ParamKind::Indexed),
            p(ty, ParamKind::Output),
        ],
        insts,
    }
}

/// Every Cranelift variant (1 to 8 groups per iteration, SSE only, no AVX) and LLVM at each
/// width, by name.
fn every_backend() -> Vec<(String, &'static dyn Backend)> {
    let mut backends: Vec<(String, &dyn Backend)> = variant_backends()
        .iter()
        .map(|(n, b)| (n.clone(), b as &dyn Backend))
        .collect();
    for (w, l) in llvm_widths().unwrap_or(&[]) {
        backends.push((format!("llvm w{w}"), l));
    }
    backends
}

#[test]
fn row_reads_and_writes_at_every_bound_and_wrap() {
    use VarType::*;
    let backends = every_backend();
    let mut rng = Rng(11);
    for (ity, ty) in [
        (I32, F32),
        (U32, F32),
        (I64, F32),
        (U64, F32),
        (I32, F64),
        (U64, F64),
        (U32, I32),
    ] {
        for (end, looped) in [
            (1u64, true),
            (7, false),
            (8, true),
            (9, true),
            (17, false),
            (33, true),
            (70, true),
            (70, false),
        ] {
            let (stride, steps) = (end + (end % 3), 3);
            let k = row_kernel(ity, ty, stride, steps, looped);
            k.verify().unwrap_or_else(|e| panic!("{e:?}\n{k}"));
            // the widths and instruction sets this host does not run: compiled and verified
            compiles_for_other_hosts(&k).unwrap_or_else(|e| panic!("{e}\n{k}"));
            let compiled: Vec<_> = backends
                .iter()
                .map(|(n, b)| (n, b.compile(&k).unwrap_or_else(|e| panic!("{n}: {e}\n{k}"))))
                .collect();
            let rows = (stride * steps) as i64;
            let top = ity.bit_mask() as i64; // -1 for 64-bit types
            for base in [
                0i64,
                1,
                5,
                -1,
                -4,
                stride as i64,
                rows - end as i64 + 1,
                top - 2,
            ] {
                for len in [rows + 4, rows - 3, end as i64] {
                    let len = len.max(0) as usize;
                    let src: Vec<u64> = (0..len).map(|_| rand_bits(&mut rng, ty)).collect();
                    let dst: Vec<u64> = (0..len).map(|_| rand_bits(&mut rng, ty)).collect();
                    let bufs = vec![
                        Buf::from_bits(ity, &[base as u64 & ity.bit_mask()]),
                        Buf::from_bits(ty, &src),
                        Buf::from_bits(ty, &dst),
                        Buf::new(ty, end as usize),
                    ];
                    for (s, e) in [(0, end), (end / 2, end), (1.min(end), end)] {
                        for (n, c) in &compiled {
                            check_compiled(&k, &**c, &bufs, s, e).unwrap_or_else(|m| {
                                panic!("{n}, {ity} index, {ty}, base {base}, source {len}: {m}")
                            });
                        }
                    }
                }
            }
        }
    }
}

/// A row read and write whose index (`counter + base`) and counter are used by nothing else, so
/// that Cranelift computes them only where a slow path needs them (`row_only_indices`), beside a
/// second counter with affine uses (`3 * lane + 1`), which turns on the affine loop: the lazily
/// computed counter must not take the affine path, whose per-iteration base would be defined in
/// one slow path and used in another. Bases in range (fast path) and out of it (slow path), with
/// the verifier on in every Cranelift variant.
#[test]
fn row_only_indices_beside_affine_values() {
    use VarType::*;
    let (ity, ty) = (U32, F32);
    let k = Kernel {
        params: vec![
            p(ity, ParamKind::Broadcast),
            p(ty, ParamKind::Indexed),
            p(ty, ParamKind::Indexed),
            p(ity, ParamKind::Output),
            p(ty, ParamKind::Output),
        ],
        insts: vec![
            Inst::new(Op::Counter, ity, &[], 0),   // r0 lane (rows only)
            Inst::new(Op::Load, ity, &[], 0),      // r1 base
            Inst::new(Op::Literal, Bool, &[], 1),  // r2
            Inst::new(Op::Counter, ity, &[], 0),   // r3 lane (affine uses)
            Inst::new(Op::Literal, ity, &[], 3),   // r4
            Inst::new(Op::Mul, ity, &[3, 4], 0),   // r5
            Inst::new(Op::Literal, ity, &[], 1),   // r6
            Inst::new(Op::Add, ity, &[5, 6], 0),   // r7 3 * lane + 1
            Inst::new(Op::Add, ity, &[1, 0], 0),   // r8 base + lane
            Inst::new(Op::Gather, ty, &[8, 2], 1), // r9
            Inst::new(Op::Add, ty, &[9, 9], 0),    // r10
            Inst::new(Op::Scatter(ReduceOp::None), ty, &[10, 8, 2], 2), // r11
            Inst::new(Op::Store, ity, &[7], 3),    // r12
            Inst::new(Op::Store, ty, &[10], 4),    // r13
        ],
    };
    k.verify().unwrap_or_else(|e| panic!("{e:?}\n{k}"));
    // the instruction sets this host does not run: compiled and verified
    compiles_for_other_hosts(&k).unwrap_or_else(|e| panic!("{e}"));
    let mut rng = Rng(5);
    let backends = every_backend();
    for end in [1u64, 9, 33, 70] {
        let len = end as usize + 6;
        for base in [0u64, 5, 7, u32::MAX as u64] {
            let src: Vec<u64> = (0..len).map(|_| rand_bits(&mut rng, ty)).collect();
            let dst: Vec<u64> = (0..len).map(|_| rand_bits(&mut rng, ty)).collect();
            let bufs = vec![
                Buf::from_bits(ity, &[base]),
                Buf::from_bits(ty, &src),
                Buf::from_bits(ty, &dst),
                Buf::new(ity, end as usize),
                Buf::new(ty, end as usize),
            ];
            for (n, be) in &backends {
                let c = be.compile(&k).unwrap_or_else(|e| panic!("{n}: {e}\n{k}"));
                check_compiled(&k, &*c, &bufs, 0, end)
                    .unwrap_or_else(|m| panic!("{n}, base {base}, end {end}: {m}"));
            }
        }
    }
}

/// A loop whose condition is the same in every lane, whose state's next value puts the state
/// second in an operation that does not commute (`k - phi`, `k / phi`, `k << phi`, ...), and whose
/// state is read by nothing but the condition and that next value. LLVM's InstCombine (before
/// LLVM 22, llvm-project PR 169120) scalarises such a vector phi under an `extractelement` of
/// lane 0 and rebuilds the operation with the phi *first*: `0 - phi` became `phi - 0`, the loop
/// never left, and every lane hit the iteration limit. The loop runs at the top level and inside a
/// loop whose condition differs per lane (as the random kernel that found it had it); a second
/// state counts the iterations, which the interpreter says is one.
#[test]
fn uniform_loops_whose_next_puts_the_state_second_agree() {
    use VarType::*;
    let cases: [(VarType, Op, u64, u64); 9] = [
        (U32, Op::Neg, 8, 0),
        (I32, Op::Sub, 8, 0),
        (U32, Op::Div, 8, 1),
        (I32, Op::Rem, 8, 100),
        (U32, Op::Shl, 3, 0),
        (U32, Op::Shr, 3, 0),
        (I64, Op::Sub, 5, 0),
        (F32, Op::Sub, 8f32.to_bits() as u64, 0),
        (F64, Op::Div, 8f64.to_bits(), 1f64.to_bits()),
    ];
    // every Cranelift variant too (no such rewrite there; kept so)
    let backends = every_backend();
    let mut failed = Vec::new();
    for (ty, op, a, k) in cases {
        for nested in [false, true] {
            let kern = state_second_loop(ty, op, a, k, nested);
            kern.verify().unwrap_or_else(|e| panic!("{e:?}\n{kern}"));
            // the instruction sets this host does not run: compiled and verified
            compiles_for_other_hosts(&kern).unwrap_or_else(|e| panic!("{e}"));
            for end in [1u64, 37] {
                let bufs = make_buffers(&kern, end, 3);
                let mut want: Vec<Buf> = bufs.iter().map(Buf::copy).collect();
                launch(&Interp, &kern, &mut want, 0, end);
                // (the shape under test: the inner loop runs once per entry)
                for (x, trips) in want[0].bits().iter().zip(want[1].bits()) {
                    let entries = if nested { 2 - (x & 1) } else { 1 };
                    assert_eq!(trips, entries, "{ty} {op:?}\n{kern}");
                }
                for (name, be) in &backends {
                    let compiled = be.compile(&kern).unwrap();
                    if let Err(e) = check_compiled(&kern, &*compiled, &bufs, 0, end) {
                        let first = e.lines().next().unwrap_or_default().to_string();
                        failed.push(format!("{name}, {ty} {op:?}, nested {nested}: {first}"));
                    }
                }
            }
        }
    }
    assert!(failed.is_empty(), "{}", failed.join("\n"));
}

/// `state = a; trips = 0; while state == a (at most 4 times) { trips += 1; state = op(k, state) }`,
/// stores `trips`; `nested`: inside a loop that runs twice in lanes whose input is even, once in
/// the others (its counter adds to `trips`).
fn state_second_loop(ty: VarType, op: Op, a: u64, k: u64, nested: bool) -> Kernel {
    use VarType::*;
    let mut insts = Vec::new();
    let mut push = |i: Inst| {
        insts.push(i);
        (insts.len() - 1) as Reg
    };
    let zero = push(Inst::new(Op::Literal, U32, &[], 0));
    let one = push(Inst::new(Op::Literal, U32, &[], 1));
    let mut outer = None;
    let mut trips0 = zero;
    if nested {
        // lanes whose input is even run the outer body twice, the others once
        let x = push(Inst::new(Op::Load, U32, &[], 0));
        let odd = push(Inst::new(Op::And, U32, &[x, one], 0));
        let two = push(Inst::new(Op::Literal, U32, &[], 2));
        let lim = push(Inst::new(Op::Sub, U32, &[two, odd], 0));
        let lp = push(Inst::new(Op::LoopBegin, U32, &[], 0));
        let i = push(Inst::new(Op::Phi, U32, &[zero], 0));
        let t = push(Inst::new(Op::Phi, U32, &[zero], 0));
        let c = push(Inst::new(Op::Lt, Bool, &[i, lim], 0));
        push(Inst::new(Op::LoopCond, Bool, &[c], 0));
        outer = Some((lp, i, t));
        trips0 = t;
    }
    let init = push(Inst::new(Op::Literal, ty, &[], a));
    let kk = push(Inst::new(Op::Literal, ty, &[], k));
    let lp = push(Inst::new(Op::LoopBegin, U32, &[], 4));
    let st = push(Inst::new(Op::Phi, ty, &[init], 0));
    let tr = push(Inst::new(Op::Phi, U32, &[trips0], 0));
    let c = push(Inst::new(Op::Eq, Bool, &[st, init], 0));
    push(Inst::new(Op::LoopCond, Bool, &[c], 0));
    let next = if op == Op::Neg {
        push(Inst::new(Op::Neg, ty, &[st], 0))
    } else {
        push(Inst::new(op, ty, &[kk, st], 0))
    };
    let tr1 = push(Inst::new(Op::Add, U32, &[tr, one], 0));
    push(Inst::new(Op::LoopNext, ty, &[st, next], 0));
    push(Inst::new(Op::LoopNext, U32, &[tr, tr1], 0));
    push(Inst::new(Op::LoopEnd, U32, &[lp], 0));
    let mut result = tr;
    if let Some((olp, i, t)) = outer {
        let i1 = push(Inst::new(Op::Add, U32, &[i, one], 0));
        push(Inst::new(Op::LoopNext, U32, &[i, i1], 0));
        push(Inst::new(Op::LoopNext, U32, &[t, tr], 0));
        push(Inst::new(Op::LoopEnd, U32, &[olp], 0));
        result = t;
    }
    push(Inst::new(Op::Store, U32, &[result], 1));
    Kernel {
        params: vec![p(U32, ParamKind::Input), p(U32, ParamKind::Output)],
        insts,
    }
}
