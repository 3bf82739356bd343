//! Differential tests: the Cranelift backend against the reference interpreter.
//!
//! Random well-typed kernels (every op, every type combination `Kernel::verify` accepts) run on both
//! backends over copies of the same random buffers and random `[start, end)` ranges; every buffer and
//! the status counters must agree bit for bit (any NaN equals any NaN). Hand-written tests pin the
//! edge cases of `op`'s integer and float rules, gather/scatter bounds counting and big kernels.

use kiln_core::alloc::{self, Block};
use kiln_core::backend::cranelift::CraneliftBackend;
use kiln_core::backend::interp::Interp;
use kiln_core::backend::{
    Backend, CompiledKernel, LaunchArgs, STATUS_LEN, STATUS_OOB_READS, STATUS_OOB_WRITES,
};
use kiln_core::kernel::{Inst, Kernel, Param, ParamKind, Reg};
use kiln_core::op::{cast, eval_binary, eval_ternary, eval_unary};
use kiln_core::{Op, ReduceOp, VarType};
use proptest::prelude::*;
use proptest::test_runner::Config;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

// ---------------------------------------------------------------------------------------------
// Buffers with slack, launching.

/// A buffer from the crate's allocator (64-byte aligned, `SLACK_BYTES` of slack).
struct Buf {
    block: Option<Block>,
    ty: VarType,
    len: usize,
}

impl Buf {
    fn new(ty: VarType, len: usize) -> Buf {
        let block =
            alloc::alloc(len * ty.size_bytes(), &|| "test buffer".into()).expect("allocation");
        // SAFETY: the block holds `capacity()` writable bytes.
        unsafe { std::ptr::write_bytes(block.as_ptr(), 0xA5, block.capacity()) };
        Buf {
            block: Some(block),
            ty,
            len,
        }
    }
    fn ptr(&self) -> *mut u8 {
        self.block.as_ref().expect("live").as_ptr()
    }
    fn get(&self, i: usize) -> u64 {
        assert!(i < self.len);
        // SAFETY: i < len, and the block holds len elements of ty.
        unsafe {
            match self.ty.size_bytes() {
                1 => *self.ptr().add(i) as u64,
                4 => (self.ptr().add(4 * i) as *const u32).read() as u64,
                _ => (self.ptr().add(8 * i) as *const u64).read(),
            }
        }
    }
    fn set(&mut self, i: usize, bits: u64) {
        assert!(i < self.len);
        // SAFETY: as in `get`.
        unsafe {
            match self.ty.size_bytes() {
                1 => *self.ptr().add(i) = bits as u8,
                4 => (self.ptr().add(4 * i) as *mut u32).write(bits as u32),
                _ => (self.ptr().add(8 * i) as *mut u64).write(bits),
            }
        }
    }
    fn copy(&self) -> Buf {
        let mut b = Buf::new(self.ty, self.len);
        for i in 0..self.len {
            b.set(i, self.get(i));
        }
        b
    }
    fn from_bits(ty: VarType, bits: &[u64]) -> Buf {
        let mut b = Buf::new(ty, bits.len());
        for (i, &x) in bits.iter().enumerate() {
            b.set(i, x);
        }
        b
    }
    fn bits(&self) -> Vec<u64> {
        (0..self.len).map(|i| self.get(i)).collect()
    }
}

impl Drop for Buf {
    fn drop(&mut self) {
        if let Some(b) = self.block.take() {
            alloc::free(b);
        }
    }
}

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

fn same_bits(ty: VarType, a: u64, b: u64) -> bool {
    a == b
        || match ty {
            VarType::F32 => f32::from_bits(a as u32).is_nan() && f32::from_bits(b as u32).is_nan(),
            VarType::F64 => f64::from_bits(a).is_nan() && f64::from_bits(b).is_nan(),
            _ => false,
        }
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
    check_compiled(kernel, &*compiled, bufs, start, end)
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
                    "p{p} ({:?} {}) element {i} of {}: interpreter {} vs cranelift {} (range {start}..{end})\n{kernel}",
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
        return Err(format!("status: interpreter {s_want:?} vs cranelift {s_got:?} (range {start}..{end})\n{kernel}"));
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
                let idx = self.reg(ity, a[0], imm);
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
                let idx = self.reg(ity, a[1], imm.rotate_left(17));
                let mask = self.reg(VarType::Bool, a[2], imm.rotate_left(34));
                self.k.params.push(Param {
                    ty: any,
                    kind: ParamKind::Indexed,
                });
                let p = self.k.params.len() - 1;
                self.push(Inst::new(op, any, &[x, idx, mask], p as u64));
            }
            Op::Data => unreachable!(),
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

/// Runs one kernel over two random ranges with `end` drawn from `ends`.
fn diff_case(
    choices: &[Choice],
    ranges: &[(u64, u64)],
    seed: u64,
    backend: &dyn Backend,
) -> Result<(), TestCaseError> {
    let kernel = build_kernel(choices);
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
            for rop in [
                ReduceOp::None,
                ReduceOp::Add,
                ReduceOp::Mul,
                ReduceOp::Min,
                ReduceOp::Max,
                ReduceOp::And,
                ReduceOp::Or,
            ] {
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

/// out[i] = op(a[i], b[i]) through Cranelift, checked against the spec and against the interpreter.
fn binary_through_cranelift(op: Op, ty: VarType, a: &[u64], b: &[u64]) -> Vec<u64> {
    let out_ty = if op.is_comparison() {
        VarType::Bool
    } else {
        ty
    };
    let k = Kernel {
        params: vec![
            p(ty, ParamKind::Input),
            p(ty, ParamKind::Input),
            p(out_ty, ParamKind::Output),
        ],
        insts: vec![
            Inst::new(Op::Load, ty, &[], 0),
            Inst::new(Op::Load, ty, &[], 1),
            Inst::new(op, out_ty, &[0, 1], 0),
            Inst::new(Op::Store, out_ty, &[2], 2),
        ],
    };
    let n = a.len();
    let bufs = vec![
        Buf::from_bits(ty, a),
        Buf::from_bits(ty, b),
        Buf::new(out_ty, n),
    ];
    check(&k, &bufs, 0, n as u64, cranelift()).unwrap();
    let mut got: Vec<Buf> = bufs.iter().map(Buf::copy).collect();
    launch(cranelift(), &k, &mut got, 0, n as u64);
    let out = got[2].bits();
    for i in 0..n {
        let want = eval_binary(op, ty, a[i], b[i]);
        assert!(
            same_bits(out_ty, out[i], want),
            "{op} {ty} {:#x} {:#x}: {:#x} vs spec {want:#x}",
            a[i],
            b[i],
            out[i]
        );
    }
    out
}

/// out[i] = unary(a[i]) (cast from `from` when op is Cast).
fn unary_through_cranelift(op: Op, from: VarType, to: VarType, a: &[u64]) -> Vec<u64> {
    let k = Kernel {
        params: vec![p(from, ParamKind::Input), p(to, ParamKind::Output)],
        insts: vec![
            Inst::new(Op::Load, from, &[], 0),
            Inst::new(op, to, &[0], 0),
            Inst::new(Op::Store, to, &[1], 1),
        ],
    };
    let n = a.len();
    let bufs = vec![Buf::from_bits(from, a), Buf::new(to, n)];
    check(&k, &bufs, 0, n as u64, cranelift()).unwrap();
    let mut got: Vec<Buf> = bufs.iter().map(Buf::copy).collect();
    launch(cranelift(), &k, &mut got, 0, n as u64);
    let out = got[1].bits();
    for i in 0..n {
        let want = eval_unary(op, to, from, a[i]);
        assert!(
            same_bits(to, out[i], want),
            "{op} {from}->{to} {:#x}: {:#x} vs spec {want:#x}",
            a[i],
            out[i]
        );
    }
    out
}

fn i32s(v: &[i32]) -> Vec<u64> {
    v.iter().map(|&x| x as u32 as u64).collect()
}
fn i64s(v: &[i64]) -> Vec<u64> {
    v.iter().map(|&x| x as u64).collect()
}
fn f32s(v: &[f32]) -> Vec<u64> {
    v.iter().map(|&x| x.to_bits() as u64).collect()
}
fn f64s(v: &[f64]) -> Vec<u64> {
    v.iter().map(|&x| x.to_bits()).collect()
}

#[test]
fn integer_division_edge_cases() {
    let a = i32s(&[7, -7, i32::MIN, i32::MIN, 7, 0, -1, i32::MAX, 5]);
    let b = i32s(&[0, 2, -1, 0, -2, 0, -1, -1, 3]);
    let q = binary_through_cranelift(Op::Div, VarType::I32, &a, &b);
    assert_eq!(q, i32s(&[0, -3, i32::MIN, 0, -3, 0, 1, -i32::MAX, 1]));
    let r = binary_through_cranelift(Op::Rem, VarType::I32, &a, &b);
    assert_eq!(r, i32s(&[7, -1, 0, i32::MIN, 1, 0, 0, 0, 2]));

    let a = i64s(&[7, -7, i64::MIN, i64::MIN, 7, 0]);
    let b = i64s(&[0, 2, -1, 0, -2, 0]);
    assert_eq!(
        binary_through_cranelift(Op::Div, VarType::I64, &a, &b),
        i64s(&[0, -3, i64::MIN, 0, -3, 0])
    );
    assert_eq!(
        binary_through_cranelift(Op::Rem, VarType::I64, &a, &b),
        i64s(&[7, -1, 0, i64::MIN, 1, 0])
    );

    let a = vec![7, u32::MAX as u64, 0x8000_0000, 9];
    let b = vec![0, 2, u32::MAX as u64, 0];
    assert_eq!(
        binary_through_cranelift(Op::Div, VarType::U32, &a, &b),
        vec![0, 0x7fff_ffff, 0, 0]
    );
    assert_eq!(
        binary_through_cranelift(Op::Rem, VarType::U32, &a, &b),
        vec![7, 1, 0x8000_0000, 9]
    );
    let a = vec![7, u64::MAX, 1 << 63, 9, 100];
    let b = vec![0, 2, u64::MAX, 0, 7];
    assert_eq!(
        binary_through_cranelift(Op::Div, VarType::U64, &a, &b),
        vec![0, u64::MAX / 2, 0, 0, 14]
    );
    assert_eq!(
        binary_through_cranelift(Op::Rem, VarType::U64, &a, &b),
        vec![7, 1, 1 << 63, 9, 2]
    );
}

#[test]
fn shift_and_wrapping_edge_cases() {
    // Shift amounts are masked to bits - 1 (per-lane amounts: the scalar fallback).
    let a = i32s(&[1, 1, -8, -8, i32::MIN, 3]);
    let b = i32s(&[33, 32, 1, 33, 31, -1]);
    assert_eq!(
        binary_through_cranelift(Op::Shl, VarType::I32, &a, &b),
        i32s(&[2, 1, -16, -16, 0, i32::MIN])
    );
    assert_eq!(
        binary_through_cranelift(Op::Shr, VarType::I32, &a, &b),
        i32s(&[0, 1, -4, -4, -1, 0])
    );
    assert_eq!(
        binary_through_cranelift(Op::Shr, VarType::U32, &a, &b),
        vec![0, 1, 0x7fff_fffc, 0x7fff_fffc, 1, 0]
    );
    let a = i64s(&[1, -8, i64::MIN, -1]);
    let b = i64s(&[65, 64, 63, 1]);
    assert_eq!(
        binary_through_cranelift(Op::Shl, VarType::I64, &a, &b),
        i64s(&[2, -8, 0, -2])
    );
    assert_eq!(
        binary_through_cranelift(Op::Shr, VarType::I64, &a, &b),
        i64s(&[0, -8, -1, -1])
    );
    assert_eq!(
        binary_through_cranelift(Op::Shr, VarType::U64, &a, &b),
        vec![0, (-8i64) as u64, 1, u64::MAX >> 1]
    );

    // Wrapping add/mul/abs/neg, signed vs unsigned min and comparisons.
    let a = i32s(&[i32::MAX, i32::MIN, -1, 5]);
    let b = i32s(&[1, -1, 1, -5]);
    assert_eq!(
        binary_through_cranelift(Op::Add, VarType::I32, &a, &b),
        i32s(&[i32::MIN, i32::MAX, 0, 0])
    );
    assert_eq!(
        binary_through_cranelift(Op::Mul, VarType::I32, &a, &b),
        i32s(&[i32::MAX, i32::MIN, -1, -25])
    );
    assert_eq!(
        binary_through_cranelift(Op::Min, VarType::I32, &a, &b),
        i32s(&[1, i32::MIN, -1, -5])
    );
    assert_eq!(
        binary_through_cranelift(Op::Min, VarType::U32, &a, &b),
        i32s(&[1, i32::MIN, 1, 5])
    );
    assert_eq!(
        binary_through_cranelift(Op::Lt, VarType::I32, &a, &b),
        vec![0, 1, 1, 0]
    );
    assert_eq!(
        binary_through_cranelift(Op::Lt, VarType::U32, &a, &b),
        vec![0, 1, 0, 1]
    );
    let a64 = i64s(&[i64::MIN, -1, 3, i64::MAX]);
    let b64 = i64s(&[1, 0, 3, -1]);
    assert_eq!(
        binary_through_cranelift(Op::Gt, VarType::I64, &a64, &b64),
        vec![0, 0, 0, 1]
    );
    assert_eq!(
        binary_through_cranelift(Op::Gt, VarType::U64, &a64, &b64),
        vec![1, 1, 0, 0]
    );
    assert_eq!(
        binary_through_cranelift(Op::Max, VarType::U64, &a64, &b64),
        i64s(&[i64::MIN, -1, 3, -1])
    );
    assert_eq!(
        unary_through_cranelift(Op::Abs, VarType::I32, VarType::I32, &a),
        i32s(&[i32::MAX, i32::MIN, 1, 5])
    );
    assert_eq!(
        unary_through_cranelift(Op::Abs, VarType::I64, VarType::I64, &a64),
        i64s(&[i64::MIN, 1, 3, i64::MAX])
    );
    assert_eq!(
        unary_through_cranelift(Op::Neg, VarType::I32, VarType::I32, &a),
        i32s(&[-i32::MAX, i32::MIN, 1, -5])
    );
}

#[test]
fn float_rule_edge_cases() {
    let nan = f32::NAN;
    let a = f32s(&[1.0, nan, 0.0, -0.0, -1.0, f32::INFINITY]);
    let b = f32s(&[nan, 1.0, -0.0, 0.0, -1.0, 3.0]);
    let mn = binary_through_cranelift(Op::Min, VarType::F32, &a, &b);
    assert!(f32::from_bits(mn[0] as u32).is_nan() && f32::from_bits(mn[1] as u32).is_nan());
    assert_eq!(&mn[2..], &f32s(&[-0.0, -0.0, -1.0, 3.0])[..]);
    let mx = binary_through_cranelift(Op::Max, VarType::F32, &a, &b);
    assert_eq!(&mx[2..], &f32s(&[0.0, 0.0, -1.0, f32::INFINITY])[..]);
    let a64 = f64s(&[1.0, f64::NAN, 0.0, -0.0]);
    let b64 = f64s(&[f64::NAN, 1.0, -0.0, 0.0]);
    let mn = binary_through_cranelift(Op::Min, VarType::F64, &a64, &b64);
    assert_eq!(&mn[2..], &f64s(&[-0.0, -0.0])[..]);
    let mx = binary_through_cranelift(Op::Max, VarType::F64, &a64, &b64);
    assert_eq!(&mx[2..], &f64s(&[0.0, 0.0])[..]);
    // Comparisons with NaN: all false but `ne`.
    assert_eq!(
        binary_through_cranelift(Op::Ne, VarType::F32, &a, &b),
        vec![1, 1, 0, 0, 0, 1]
    );
    assert_eq!(
        binary_through_cranelift(Op::Le, VarType::F32, &a, &b),
        vec![0, 0, 1, 1, 1, 0]
    );
    assert_eq!(
        binary_through_cranelift(Op::Ge, VarType::F64, &a64, &b64),
        vec![0, 0, 1, 1]
    );

    // Round is ties-to-even; floor/ceil/trunc keep the sign of zero.
    let x = [0.5f32, 1.5, 2.5, -0.5, -1.5, -2.5, 0.49999997, 8388609.0];
    assert_eq!(
        unary_through_cranelift(Op::Round, VarType::F32, VarType::F32, &f32s(&x)),
        f32s(&[0.0, 2.0, 2.0, -0.0, -2.0, -2.0, 0.0, 8388609.0])
    );
    let y = [0.5f64, 2.5, -0.5, -2.5, -0.2, 1e300];
    assert_eq!(
        unary_through_cranelift(Op::Round, VarType::F64, VarType::F64, &f64s(&y)),
        f64s(&[0.0, 2.0, -0.0, -2.0, -0.0, 1e300])
    );
    assert_eq!(
        unary_through_cranelift(Op::Floor, VarType::F64, VarType::F64, &f64s(&y)),
        f64s(&[0.0, 2.0, -1.0, -3.0, -1.0, 1e300])
    );
    assert_eq!(
        unary_through_cranelift(Op::Ceil, VarType::F32, VarType::F32, &f32s(&x)),
        f32s(&[1.0, 2.0, 3.0, -0.0, -1.0, -2.0, 1.0, 8388609.0])
    );
    assert_eq!(
        unary_through_cranelift(Op::Trunc, VarType::F32, VarType::F32, &f32s(&x)),
        f32s(&[0.0, 1.0, 2.0, -0.0, -1.0, -2.0, 0.0, 8388609.0])
    );
    // Abs clears and Neg flips the sign bit, NaNs included.
    let s = [-0.0f32, 0.0, -nan, nan, -3.0];
    assert_eq!(
        unary_through_cranelift(Op::Abs, VarType::F32, VarType::F32, &f32s(&s)),
        f32s(&s).iter().map(|b| b & 0x7fff_ffff).collect::<Vec<_>>()
    );
    let neg = unary_through_cranelift(
        Op::Neg,
        VarType::F64,
        VarType::F64,
        &f64s(&[-0.0, 0.0, 2.0]),
    );
    assert_eq!(neg, f64s(&[0.0, -0.0, -2.0]));
    // sqrt of negative is NaN; fma is fused (one rounding).
    let r = unary_through_cranelift(
        Op::Sqrt,
        VarType::F32,
        VarType::F32,
        &f32s(&[-1.0, 4.0, -0.0]),
    );
    assert!(f32::from_bits(r[0] as u32).is_nan());
    assert_eq!(&r[1..], &f32s(&[2.0, -0.0])[..]);
    let e = f64::EPSILON;
    let (fa, fb, fc) = (1.0 + e, 1.0 - e, -1.0f64);
    let k = Kernel {
        params: vec![p(VarType::F64, ParamKind::Output)],
        insts: vec![
            Inst::new(Op::Literal, VarType::F64, &[], fa.to_bits()),
            Inst::new(Op::Literal, VarType::F64, &[], fb.to_bits()),
            Inst::new(Op::Literal, VarType::F64, &[], fc.to_bits()),
            Inst::new(Op::Fma, VarType::F64, &[0, 1, 2], 0),
            Inst::new(Op::Store, VarType::F64, &[3], 0),
        ],
    };
    let mut bufs = vec![Buf::new(VarType::F64, 5)];
    launch(cranelift(), &k, &mut bufs, 0, 5);
    assert_eq!(bufs[0].get(4), (-e * e).to_bits(), "fma must be fused");
    assert_eq!(
        eval_ternary(
            Op::Fma,
            VarType::F64,
            fa.to_bits(),
            fb.to_bits(),
            fc.to_bits()
        ),
        (-e * e).to_bits()
    );
}

#[test]
fn cast_edge_cases() {
    use VarType::*;
    let floats = [
        f64::NAN,
        -1.5,
        -0.0,
        0.0,
        0.7,
        2147483647.5,
        2147483648.0,
        -2147483649.0,
        4294967296.0,
        1e300,
        -1e300,
        f64::INFINITY,
        f64::NEG_INFINITY,
        1.8446744073709552e19,
        -9.3e18,
    ];
    let f64bits = f64s(&floats);
    let f32bits = f32s(&floats.iter().map(|&x| x as f32).collect::<Vec<_>>());
    for to in [I32, U32, I64, U64, Bool, F32] {
        unary_through_cranelift(Op::Cast, F64, to, &f64bits);
    }
    for to in [I32, U32, I64, U64, Bool, F64] {
        unary_through_cranelift(Op::Cast, F32, to, &f32bits);
    }
    // Saturating, NaN -> 0, and number -> bool is x != 0 (-0.0 is false, NaN is true).
    assert_eq!(
        unary_through_cranelift(Op::Cast, F64, I32, &f64bits[..4]),
        i32s(&[0, -1, 0, 0])
    );
    assert_eq!(
        unary_through_cranelift(Op::Cast, F64, U64, &f64s(&[1e300, -5.0, f64::NAN, 3.9])),
        vec![u64::MAX, 0, 0, 3]
    );
    assert_eq!(
        unary_through_cranelift(Op::Cast, F32, Bool, &f32s(&[-0.0, 0.0, f32::NAN, 1e-45])),
        vec![0, 0, 1, 1]
    );
    assert_eq!(
        unary_through_cranelift(Op::Cast, F32, I32, &f32s(&[3e9, -3e9, f32::NAN, -2.7])),
        i32s(&[i32::MAX, i32::MIN, 0, -2])
    );
    assert_eq!(
        unary_through_cranelift(Op::Cast, F32, U32, &f32s(&[3e9, -3e9, 5e9, 2.7])),
        vec![3_000_000_000, 0, u32::MAX as u64, 2]
    );
    // Integers: wrap or extend; int -> float rounds to nearest (even).
    let ints = i64s(&[
        -1,
        i64::MIN,
        i64::MAX,
        (1 << 53) + 1,
        16777217,
        -16777217,
        0x1_0000_0001,
        3,
    ]);
    for to in [Bool, I32, U32, U64, F32, F64] {
        unary_through_cranelift(Op::Cast, I64, to, &ints);
        unary_through_cranelift(Op::Cast, U64, to, &ints);
    }
    assert_eq!(
        unary_through_cranelift(Op::Cast, I64, I32, &ints[..4]),
        i32s(&[-1, 0, -1, 1])
    );
    assert_eq!(
        unary_through_cranelift(Op::Cast, U64, F32, &[u64::MAX, 1 << 63, 16777217, 16777219]),
        f32s(&[1.8446744e19, 9.223372e18, 16777216.0, 16777220.0])
    );
    let i32v = i32s(&[-1, i32::MIN, i32::MAX, 16777217, 0, 1]);
    for to in [Bool, U32, I64, U64, F32, F64] {
        unary_through_cranelift(Op::Cast, I32, to, &i32v);
        unary_through_cranelift(Op::Cast, U32, to, &i32v);
    }
    assert_eq!(
        unary_through_cranelift(Op::Cast, I32, I64, &i32v[..2]),
        i64s(&[-1, i32::MIN as i64])
    );
    assert_eq!(
        unary_through_cranelift(Op::Cast, U32, I64, &i32v[..2]),
        vec![u32::MAX as u64, 0x8000_0000]
    );
    assert_eq!(
        unary_through_cranelift(Op::Cast, U32, F32, &[u32::MAX as u64, 16777217]),
        f32s(&[4294967296.0, 16777216.0])
    );
    // Bool -> numbers are 0/1.
    for to in [I32, U32, I64, U64, F32, F64] {
        let out = unary_through_cranelift(Op::Cast, Bool, to, &[1, 0, 1, 1, 0]);
        let one = match to {
            F32 => 1f32.to_bits() as u64,
            F64 => 1f64.to_bits(),
            _ => 1,
        };
        assert_eq!(out, vec![one, 0, one, one, 0]);
    }
    assert_eq!(cast(F32, Bool, (-0.0f32).to_bits() as u64), 0);
}

#[test]
fn gather_counts_out_of_range_reads_of_active_lanes_only() {
    use VarType::*;
    // idx: I32 input, mask: Bool input; source: indexed f32 of length 10.
    let k = Kernel {
        params: vec![
            p(I32, ParamKind::Input),
            p(Bool, ParamKind::Input),
            p(F32, ParamKind::Indexed),
            p(F32, ParamKind::Output),
        ],
        insts: vec![
            Inst::new(Op::Load, I32, &[], 0),
            Inst::new(Op::Load, Bool, &[], 1),
            Inst::new(Op::Gather, F32, &[0, 1], 2),
            Inst::new(Op::Store, F32, &[2], 3),
        ],
    };
    let idx = i32s(&[0, 9, 10, -1, 3, 100, -5, 2, 11]);
    let mask = vec![1, 1, 1, 1, 1, 0, 1, 1, 1];
    let src: Vec<u64> = (0..10).map(|i| (i as f32 + 0.5).to_bits() as u64).collect();
    // Lanes 2..7 only: idx 10 (oob), -1 (oob), 3, 100 (masked off), -5 (oob) -> 3 oob reads; lanes
    // past 7 (idx 2, 11) are inactive even though the last vector covers them.
    let mut bufs = vec![
        Buf::from_bits(I32, &idx),
        Buf::from_bits(Bool, &mask),
        Buf::from_bits(F32, &src),
        Buf::new(F32, 9),
    ];
    bufs[0].len = 7;
    bufs[1].len = 7;
    bufs[3].len = 7;
    check(&k, &bufs, 2, 7, cranelift()).unwrap();
    let status = launch(cranelift(), &k, &mut bufs, 2, 7);
    assert_eq!(status[STATUS_OOB_READS], 3);
    assert_eq!(status[STATUS_OOB_WRITES], 0);
    let out = bufs[3].bits();
    assert_eq!(&out[2..7], &f32s(&[0.0, 0.0, 3.5, 0.0, 0.0])[..]);
    // u64 indices past i64::MAX are out of range too, and an empty source reads only zeros.
    let k64 = Kernel {
        params: vec![
            p(U64, ParamKind::Input),
            p(U32, ParamKind::Indexed),
            p(U32, ParamKind::Output),
        ],
        insts: vec![
            Inst::new(Op::Load, U64, &[], 0),
            Inst::new(Op::Literal, Bool, &[], 1),
            Inst::new(Op::Gather, U32, &[0, 1], 1),
            Inst::new(Op::Store, U32, &[2], 2),
        ],
    };
    let idx = vec![u64::MAX, 1 << 63, 1, 0, 5];
    for src_len in [0usize, 2] {
        let src: Vec<u64> = (0..src_len as u64).map(|i| 40 + i).collect();
        let mut bufs = vec![
            Buf::from_bits(U64, &idx),
            Buf::from_bits(U32, &src),
            Buf::new(U32, 5),
        ];
        check(&k64, &bufs, 0, 5, cranelift()).unwrap();
        let status = launch(cranelift(), &k64, &mut bufs, 0, 5);
        assert_eq!(status[STATUS_OOB_READS], if src_len == 0 { 5 } else { 3 });
    }
}

#[test]
fn scatter_reductions_and_out_of_range_writes() {
    use VarType::*;
    for (rop, ity) in [
        (ReduceOp::None, I32),
        (ReduceOp::Add, U64),
        (ReduceOp::Min, I64),
        (ReduceOp::Max, U32),
    ] {
        for ty in [I32, F32, F64, U64, Bool] {
            let k = Kernel {
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
                    Inst::new(Op::Scatter(rop), ty, &[0, 1, 2], 3),
                ],
            };
            let mut rng = Rng(7);
            let n = 37;
            let vals: Vec<u64> = (0..n).map(|_| rand_bits(&mut rng, ty)).collect();
            let idx: Vec<u64> = (0..n)
                .map(|i| ((i as i64 % 9) - 2) as u64 & ity.bit_mask())
                .collect();
            let mask: Vec<u64> = (0..n).map(|i| (i % 5 != 0) as u64).collect();
            let target: Vec<u64> = (0..5).map(|_| rand_bits(&mut rng, ty)).collect();
            let bufs = vec![
                Buf::from_bits(ty, &vals),
                Buf::from_bits(ity, &idx),
                Buf::from_bits(Bool, &mask),
                Buf::from_bits(ty, &target),
            ];
            for (s, e) in [(0, 37), (5, 6), (3, 30), (36, 37)] {
                check(&k, &bufs, s, e, cranelift())
                    .unwrap_or_else(|m| panic!("{rop:?} {ty} idx {ity}: {m}"));
            }
        }
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

/// Backends covering the code generator's choices (see `CraneliftBackend::with_settings`).
fn variant_backends() -> &'static [(String, CraneliftBackend)] {
    static BE: OnceLock<Vec<(String, CraneliftBackend)>> = OnceLock::new();
    BE.get_or_init(|| {
        let sets: &[&[(&str, &str)]] = &[
            &[],
            &[("kiln_unroll", "1")],
            &[("kiln_unroll", "2"), ("kiln_interleave", "1")],
            &[("kiln_unroll", "3"), ("kiln_const_cache", "3")],
            &[
                ("kiln_unroll", "4"),
                ("kiln_interleave", "2"),
                ("kiln_schedule", "false"),
            ],
            &[
                ("kiln_unroll", "8"),
                ("kiln_const_cache", "1"),
                ("kiln_affine", "false"),
            ],
            &[("opt_level", "speed")],
            &[("opt_level", "speed"), ("kiln_unroll", "2")],
            &[
                ("has_avx", "false"),
                ("has_avx2", "false"),
                ("has_fma", "false"),
                ("kiln_unroll", "4"),
            ],
            &[
                ("has_sse41", "false"),
                ("has_avx", "false"),
                ("has_avx2", "false"),
                ("has_fma", "false"),
            ],
        ];
        sets.iter()
            .map(|s| {
                let mut s = s.to_vec();
                s.push(("enable_verifier", "true"));
                let name = format!("{s:?}");
                let be = CraneliftBackend::with_settings(&s)
                    .unwrap_or_else(|e| panic!("backend {name}: {e}"));
                (name, be)
            })
            .collect()
    })
}

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

/// Casts to 32 bits of 64-bit right shifts by literals (those of 32 and more only read the high
/// halves).
#[test]
fn narrowing_casts_of_right_shifts() {
    use VarType::*;
    let mut rng = Rng(29);
    let n = 37usize;
    for (from, to) in [(U64, U32), (I64, I32), (I64, U32), (U64, I32)] {
        let xs = shift_operands(from, n, &mut rng);
        for c in [0u64, 1, 31, 32, 33, 45, 59, 63, 64, 95, 96, 127] {
            let k = Kernel {
                params: vec![p(from, ParamKind::Input), p(to, ParamKind::Output)],
                insts: vec![
                    Inst::new(Op::Load, from, &[], 0),
                    Inst::new(Op::Literal, from, &[], c),
                    Inst::new(Op::Shr, from, &[0, 1], 0),
                    Inst::new(Op::Cast, to, &[2], 0),
                    Inst::new(Op::Store, to, &[3], 1),
                ],
            };
            let bufs = vec![Buf::from_bits(from, &xs), Buf::new(to, n)];
            check_variants(&k, &bufs, 0, n as u64);
        }
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

/// `min`/`max` of floats against literals (x64's native instructions where they agree with the
/// IEEE 754-2019 rules), in both operand orders.
#[test]
fn float_min_max_against_literals() {
    use VarType::*;
    let lits = [
        0.0,
        -0.0,
        1.5,
        -2.0,
        f64::NAN,
        f64::INFINITY,
        f64::NEG_INFINITY,
    ];
    for ty in [F32, F64] {
        let bits = |x: f64| {
            if ty == F32 {
                (x as f32).to_bits() as u64
            } else {
                x.to_bits()
            }
        };
        let xs: Vec<u64> = F64_SPECIALS.iter().chain(&lits).map(|&x| bits(x)).collect();
        let n = xs.len();
        for op in [Op::Min, Op::Max] {
            for &c in &lits {
                for swapped in [false, true] {
                    let args: [u32; 2] = if swapped { [1, 0] } else { [0, 1] };
                    let k = Kernel {
                        params: vec![p(ty, ParamKind::Input), p(ty, ParamKind::Output)],
                        insts: vec![
                            Inst::new(Op::Load, ty, &[], 0),
                            Inst::new(Op::Literal, ty, &[], bits(c)),
                            Inst::new(op, ty, &args, 0),
                            Inst::new(Op::Store, ty, &[2], 1),
                        ],
                    };
                    let bufs = vec![Buf::from_bits(ty, &xs), Buf::new(ty, n)];
                    check_variants(&k, &bufs, 0, n as u64);
                }
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Structured regions: loops and switches.

/// Collatz steps of each input (`u32`), with an iteration limit `max` (0: none).
fn collatz_kernel(max: u64) -> Kernel {
    use VarType::*;
    Kernel {
        params: vec![p(U32, ParamKind::Input), p(U32, ParamKind::Output)],
        insts: vec![
            Inst::new(Op::Load, U32, &[], 0),            // r0 x
            Inst::new(Op::Literal, U32, &[], 0),         // r1 0
            Inst::new(Op::Literal, U32, &[], 1),         // r2 1
            Inst::new(Op::LoopBegin, U32, &[], max),     // r3
            Inst::new(Op::Phi, U32, &[0], 0),            // r4 x
            Inst::new(Op::Phi, U32, &[1], 0),            // r5 n
            Inst::new(Op::Gt, Bool, &[4, 2], 0),         // r6 x > 1
            Inst::new(Op::LoopCond, Bool, &[6], 0),      // r7
            Inst::new(Op::And, U32, &[4, 2], 0),         // r8 x & 1
            Inst::new(Op::Eq, Bool, &[8, 1], 0),         // r9 even
            Inst::new(Op::Shr, U32, &[4, 2], 0),         // r10 x >> 1
            Inst::new(Op::Literal, U32, &[], 3),         // r11 3
            Inst::new(Op::Fma, U32, &[4, 11, 2], 0),     // r12 3x+1
            Inst::new(Op::Select, U32, &[9, 10, 12], 0), // r13
            Inst::new(Op::Add, U32, &[5, 2], 0),         // r14 n+1
            Inst::new(Op::LoopNext, U32, &[4, 13], 0),   // r15
            Inst::new(Op::LoopNext, U32, &[5, 14], 0),   // r16
            Inst::new(Op::LoopEnd, U32, &[3], 0),        // r17
            Inst::new(Op::Store, U32, &[5], 1),          // r18
        ],
    }
}

#[test]
fn collatz_loop_agrees_and_counts_truncated_lanes() {
    use VarType::*;
    for max in [0u64, 5, 100] {
        let k = collatz_kernel(max);
        k.verify().unwrap_or_else(|e| panic!("{e:?}\n{k}"));
        for end in [0u64, 1, 3, 4, 5, 31, 32, 33, 100] {
            let vals: Vec<u64> = (0..end).map(|i| i + 1).collect();
            let bufs = vec![Buf::from_bits(U32, &vals), Buf::new(U32, end as usize)];
            check_variants(&k, &bufs, 0, end);
            if max == 0 {
                let mut b = bufs.iter().map(Buf::copy).collect::<Vec<_>>();
                let st = launch(cranelift(), &k, &mut b, 0, end);
                assert_eq!(st[2], 0);
                if end >= 27 {
                    assert_eq!(b[1].get(26), 111, "27 takes 111 steps");
                }
            }
        }
    }
}

/// `out = switch(idx) { 0 => a*a, 1 => a+1, _ => 0 }` with a gather in case 1 and a loop in case 0.
fn switch_kernel(ty: VarType) -> Kernel {
    use VarType::*;
    Kernel {
        params: vec![
            p(U32, ParamKind::Input),
            p(ty, ParamKind::Input),
            p(ty, ParamKind::Indexed),
            p(ty, ParamKind::Output),
        ],
        insts: vec![
            Inst::new(Op::Load, U32, &[], 0),       // r0 idx
            Inst::new(Op::Load, ty, &[], 1),        // r1 a
            Inst::new(Op::Literal, U32, &[], 0),    // r2
            Inst::new(Op::Literal, U32, &[], 1),    // r3
            Inst::new(Op::Eq, Bool, &[0, 2], 0),    // r4 idx == 0
            Inst::new(Op::Eq, Bool, &[0, 3], 0),    // r5 idx == 1
            Inst::new(Op::Switch, U32, &[], 1),     // r6
            Inst::new(Op::Case, U32, &[4], 0),      // r7
            Inst::new(Op::Mul, ty, &[1, 1], 0),     // r8 a*a
            Inst::new(Op::Yield, ty, &[8], 0),      // r9
            Inst::new(Op::Case, U32, &[5], 0),      // r10
            Inst::new(Op::Literal, Bool, &[], 1),   // r11
            Inst::new(Op::Gather, ty, &[0, 11], 2), // r12 table[idx]
            Inst::new(Op::Add, ty, &[1, 12], 0),    // r13
            Inst::new(Op::Yield, ty, &[13], 0),     // r14
            Inst::new(Op::SwitchEnd, U32, &[6], 0), // r15
            Inst::new(Op::Out, ty, &[6], 0),        // r16
            Inst::new(Op::Store, ty, &[16], 3),     // r17
        ],
    }
}

#[test]
fn switch_agrees_and_masks_gathers() {
    use VarType::*;
    let mut rng = Rng(7);
    for ty in [F32, I64, F64, U32] {
        let k = switch_kernel(ty);
        k.verify().unwrap_or_else(|e| panic!("{e:?}\n{k}"));
        for end in [0u64, 1, 4, 7, 33, 64] {
            let idx: Vec<u64> = (0..end).map(|_| rng.below(4)).collect();
            let a: Vec<u64> = (0..end).map(|_| rand_bits(&mut rng, ty)).collect();
            let table: Vec<u64> = (0..2).map(|_| rand_bits(&mut rng, ty)).collect();
            let bufs = vec![
                Buf::from_bits(U32, &idx),
                Buf::from_bits(ty, &a),
                Buf::from_bits(ty, &table),
                Buf::new(ty, end as usize),
            ];
            check_variants(&k, &bufs, 0, end);
        }
    }
}
