//! Cranelift backend: compiles kernel IR to native SIMD code with the Cranelift JIT.
//!
//! This module owns the translation of a [`Kernel`] into one machine-code function
//! `extern "C" fn(args: *const LaunchArgs, start: u64, end: u64)` that runs lanes `[start, end)` four
//! at a time in 128-bit vectors (32-bit types as one `I32X4`/`F32X4`, 64-bit types as two
//! `I64X2`/`F64X2`, masks as `I32X4` all-ones/zero lanes), and the JIT memory that holds it: one
//! `JITModule` per kernel, freed when the last `Arc` to the compiled kernel is dropped. The results
//! are bit-for-bit those of the scalar semantics in `op` (as run by the interpreter), NaN payloads
//! aside. Ops that Cranelift cannot lower as vectors (integer division, some 64-bit conversions)
//! fall back to per-lane scalar code; per-lane variable shifts of 32-bit lanes are multiplies by
//! powers of two made from float exponents (x86 has no variable vector shifts before AVX2, and
//! Cranelift emits none); gathers are per-lane loads with a branchless bounds check, and scatters
//! call the shared [`scatter_lane_extern`] helper.
//!
//! The function has two loops. The main loop runs `G` (1–4, fewer for bigger kernels) groups of
//! four lanes per iteration while `4 G` lanes remain, its groups lowered instruction by instruction
//! side by side, so that latency-bound chains (polynomials, 64-bit multiplies) of different groups
//! overlap; there, registers that are affine functions of the lane index (`affine_values`) are
//! computed from the index directly. A one-group loop, the generic code, finishes the range.
//! Instructions that do not depend on the lane are computed once before the loops. Cranelift's
//! e-graph pass is off (it would re-sequence the interleaved groups); the backend does the little
//! it would do here itself: dead-code removal and constants materialised at their uses, read
//! from a per-kernel table (`Target::pool`) so that x64 can fold them into their users.
//!
//! The last vector of a range may read and write up to three lanes past `end` for plain loads and
//! stores (every buffer has [`crate::alloc::SLACK_BYTES`] of slack); gathers and scatters only act on
//! lanes below `end`.

use super::{
    encode_reduce, scatter_lane_extern, Backend, BackendKind, CompiledKernel, LaunchArgs,
    STATUS_OOB_READS,
};
use crate::error::{Error, Result};
use crate::kernel::{Kernel, ParamKind};
use crate::op::Op;
use crate::ty::VarType;
use cranelift_codegen::entity::SecondaryMap;
use cranelift_codegen::ir::condcodes::{FloatCC, IntCC};
use cranelift_codegen::ir::types::{self as ct, F32X4, F64X2, I32, I32X4, I64, I64X2, I8X16};
use cranelift_codegen::ir::Opcode;
use cranelift_codegen::ir::{
    AbiParam, AtomicRmwOp, ConstantData, Endianness, FuncRef, Function, GlobalValue, InstBuilder,
    MemFlags, Type, Value,
};
use cranelift_codegen::isa::OwnedTargetIsa;
use cranelift_codegen::settings::{self, Configurable};
use cranelift_frontend::{FunctionBuilder, FunctionBuilderContext, Variable};
use cranelift_jit::{JITBuilder, JITModule};
use cranelift_module::{default_libcall_names, DataDescription, Linkage, Module};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::Arc;

/// Lanes per loop iteration (one 128-bit vector of 32-bit lanes).
const W: i64 = 4;
/// Symbol under which compiled code finds `scatter_lane_extern`.
const SCATTER_SYMBOL: &str = "kiln_scatter_lane";

/// The Cranelift JIT backend. Holds the host ISA; each kernel gets its own JIT module.
pub struct CraneliftBackend {
    isa: OwnedTargetIsa,
    tuning: Tuning,
}

/// Code-generation choices that never change results, only speed.
#[derive(Clone, Copy, Debug)]
struct Tuning {
    /// Groups of four lanes per iteration of the main loop; 0 picks one from the kernel's size.
    unroll: usize,
    /// Emit the groups of an unrolled iteration this many at a time, instruction by instruction
    /// (so that independent chains sit next to each other); 1: one group after the other.
    interleave: usize,
    /// Compute registers that are affine functions of the lane index from the index directly
    /// (see `affine_values`).
    affine: bool,
    /// Read each constant at each use (0), once per instruction of all interleaved groups (1), or
    /// once per loop body (2).
    const_cache: u8,
    /// Reorder the loop body to keep few values live (see `Gen::body_order`).
    schedule: bool,
}

impl CraneliftBackend {
    /// A backend for the host CPU (its SIMD features detected), optimizing for speed.
    pub fn new() -> Result<Self> {
        Self::with_settings(&[])
    }

    /// Like [`CraneliftBackend::new`], with Cranelift settings overridden after host detection:
    /// shared ones (e.g. `("enable_verifier", "true")`, `("opt_level", "speed")`) or ISA ones
    /// (e.g. `("has_avx", "false")`, `("has_fma", "false")` to exercise the SSE-only code paths in
    /// tests), and kiln's own code-generation choices, which change speed but never results (so
    /// that tests can cover each code path): `("kiln_unroll", "1".."8" | "auto")`: four-lane groups
    /// per main-loop iteration; `("kiln_interleave", "1".."8")`: how many of them are lowered
    /// together; `("kiln_const_cache", "1".."3")`: a constant is read at each use, once per
    /// instruction of the interleaved groups, or once per loop body; `("kiln_affine", bool)`,
    /// `("kiln_schedule", bool)`: see `affine_values` and `Gen::body_order`.
    #[doc(hidden)]
    pub fn with_settings(overrides: &[(&str, &str)]) -> Result<Self> {
        let unavailable = |reason: String| Error::BackendUnavailable {
            name: "cranelift".into(),
            reason,
        };
        let mut flags = settings::builder();
        for (k, v) in [
            // No e-graph pass: it would re-sequence the interleaved groups of an unrolled loop
            // (and their loads of constants) one after the other; see `build_function`.
            ("opt_level", "none"),
            ("is_pic", "false"),
            (
                "enable_verifier",
                if cfg!(debug_assertions) {
                    "true"
                } else {
                    "false"
                },
            ),
        ] {
            flags
                .set(k, v)
                .map_err(|e| unavailable(format!("setting {k}={v}: {e}")))?;
        }
        let mut isa = cranelift_native::builder()
            .map_err(|e| unavailable(format!("unsupported host: {e}")))?;
        let mut tuning = Tuning {
            unroll: 0,
            interleave: 4,
            affine: true,
            const_cache: 1,
            schedule: true,
        };
        for &(k, v) in overrides {
            let bad = || unavailable(format!("setting {k}={v}: bad value"));
            let number = |max: usize| match v.parse::<usize>() {
                Ok(x) if (1..=max).contains(&x) => Ok(x),
                _ => Err(bad()),
            };
            let boolean = || v.parse::<bool>().map_err(|_| bad());
            match k {
                "kiln_unroll" if v == "auto" => tuning.unroll = 0,
                "kiln_unroll" => tuning.unroll = number(8)?,
                "kiln_interleave" => tuning.interleave = number(8)?,
                "kiln_const_cache" => tuning.const_cache = number(3)? as u8 - 1,
                "kiln_affine" => tuning.affine = boolean()?,
                "kiln_schedule" => tuning.schedule = boolean()?,
                _ => {
                    if flags.set(k, v).is_err() {
                        isa.set(k, v)
                            .map_err(|e| unavailable(format!("setting {k}={v}: {e}")))?;
                    }
                }
            }
        }
        let isa = isa
            .finish(settings::Flags::new(flags))
            .map_err(|e| unavailable(format!("building the ISA: {e}")))?;
        Ok(CraneliftBackend { isa, tuning })
    }

    fn target(&self) -> Target {
        let flag = |name: &str| {
            self.isa
                .isa_flags()
                .iter()
                .any(|f| f.name == name && f.as_bool() == Some(true))
        };
        Target {
            x86: self.isa.name() == "x64",
            sse41: flag("has_sse41"),
            egraph: self.isa.flags().opt_level() != settings::OptLevel::None,
            pool: self.isa.name() == "x64"
                && flag("has_avx")
                && self.isa.flags().opt_level() == settings::OptLevel::None,
        }
    }

    fn compile_kernel(&self, kernel: &Kernel) -> Result<JitKernel, String> {
        kernel
            .verify()
            .map_err(|errs| format!("invalid kernel: {}", errs.join("; ")))?;
        let mut jb = JITBuilder::with_isa(self.isa.clone(), default_libcall_names());
        jb.symbol(SCATTER_SYMBOL, scatter_lane_extern as *const u8);
        // Vector `fma` without hardware FMA lowers to these libcalls: point them at Rust's (exact) fma.
        jb.symbol("fmaf", fmaf_shim as *const u8);
        jb.symbol("fma", fma_shim as *const u8);
        // Rounding without SSE4.1 lowers to libcalls too.
        for (name, f) in ROUNDING_SHIMS {
            jb.symbol(name, f);
        }
        let mut owner = ModuleOwner(Some(JITModule::new(jb)));
        let module = owner.0.as_mut().expect("just created");

        let ptr = module.target_config().pointer_type();
        if ptr != I64 {
            return Err(format!("unsupported pointer type {ptr}"));
        }
        let mut sig = module.make_signature();
        sig.params
            .extend([AbiParam::new(I64), AbiParam::new(I64), AbiParam::new(I64)]);
        let func_id = module
            .declare_function("kiln_kernel", Linkage::Local, &sig)
            .map_err(|e| e.to_string())?;
        let has_scatter = kernel.insts.iter().any(|i| matches!(i.op, Op::Scatter(_)));
        let scatter_id = if has_scatter {
            let mut s = module.make_signature();
            s.params.push(AbiParam::new(I32));
            s.params.extend([AbiParam::new(I64); 5]);
            Some(
                module
                    .declare_function(SCATTER_SYMBOL, Linkage::Import, &s)
                    .map_err(|e| e.to_string())?,
            )
        } else {
            None
        };

        let mut ctx = module.make_context();
        ctx.func.signature = sig;
        let mut fctx = FunctionBuilderContext::new();
        let target = self.target();
        // Literals read from a table of this module's own rather than the function's constant
        // pool: x64 folds such a load into the instruction that uses it, saving one per use.
        let pool_id = if target.pool {
            Some(
                module
                    .declare_anonymous_data(false, false)
                    .map_err(|e| e.to_string())?,
            )
        } else {
            None
        };
        let pool = {
            let mut b = FunctionBuilder::new(&mut ctx.func, &mut fctx);
            let scatter = scatter_id.map(|id| module.declare_func_in_func(id, b.func));
            let pool_gv = pool_id.map(|id| module.declare_data_in_func(id, b.func));
            let pool = build_function(&mut b, kernel, scatter, pool_gv, self.tuning, target)?;
            b.finalize();
            pool
        };
        if !target.egraph {
            remove_dead_code(&mut ctx.func);
        }
        if let Some(id) = pool_id {
            let mut data = DataDescription::new();
            data.define(pool.into_boxed_slice());
            data.set_align(16);
            module.define_data(id, &data).map_err(|e| e.to_string())?;
        }
        // `KILN_LOG=kiln::cranelift=trace` prints each kernel's CLIF and machine code.
        let dump = tracing::enabled!(target: "kiln::cranelift", tracing::Level::TRACE);
        ctx.set_disasm(dump);
        module
            .define_function(func_id, &mut ctx)
            .map_err(|e| {
                tracing::debug!(target: "kiln::cranelift", "kernel {} failed to compile ({e}):\n{}", kernel.hash(), ctx.func.display());
                match e {
                    cranelift_module::ModuleError::Compilation(ce) => ce.to_string(),
                    e => e.to_string(),
                }
            })?;
        if dump {
            let asm = ctx
                .compiled_code()
                .and_then(|c| c.vcode.clone())
                .unwrap_or_default();
            tracing::trace!(target: "kiln::cranelift", "kernel {}:\n{}\nmachine code:\n{asm}", kernel.hash(), ctx.func.display());
        }
        module.clear_context(&mut ctx);
        module.finalize_definitions().map_err(|e| e.to_string())?;
        let code = module.get_finalized_function(func_id);
        // SAFETY: `code` is the finalized entry of a function compiled with signature
        // (i64, i64, i64) -> () in the host's default calling convention, which is the C ABI of
        // `KernelFn`; the memory stays mapped while `owner` (moved into the JitKernel) lives.
        let func = unsafe { std::mem::transmute::<*const u8, KernelFn>(code) };
        Ok(JitKernel {
            func,
            _module: Mutex::new(owner),
        })
    }
}

impl Backend for CraneliftBackend {
    fn kind(&self) -> BackendKind {
        BackendKind::Cranelift
    }
    fn compile(&self, kernel: &Kernel) -> Result<Arc<dyn CompiledKernel>> {
        let err = |message: String| Error::Compile {
            backend: "cranelift".into(),
            hash: kernel.hash().to_string(),
            message,
        };
        match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.compile_kernel(kernel)))
        {
            Ok(Ok(k)) => Ok(Arc::new(k)),
            Ok(Err(msg)) => Err(err(msg)),
            Err(payload) => {
                let what = payload
                    .downcast_ref::<&str>()
                    .map(|s| s.to_string())
                    .or_else(|| payload.downcast_ref::<String>().cloned())
                    .unwrap_or_else(|| "unknown panic".into());
                Err(err(format!("internal error in code generation: {what}")))
            }
        }
    }
}

extern "C" fn fmaf_shim(a: f32, b: f32, c: f32) -> f32 {
    a.mul_add(b, c)
}
extern "C" fn fma_shim(a: f64, b: f64, c: f64) -> f64 {
    a.mul_add(b, c)
}

extern "C" fn floorf_shim(x: f32) -> f32 {
    x.floor()
}
extern "C" fn ceilf_shim(x: f32) -> f32 {
    x.ceil()
}
extern "C" fn truncf_shim(x: f32) -> f32 {
    x.trunc()
}
extern "C" fn nearbyintf_shim(x: f32) -> f32 {
    x.round_ties_even()
}
extern "C" fn floor_shim(x: f64) -> f64 {
    x.floor()
}
extern "C" fn ceil_shim(x: f64) -> f64 {
    x.ceil()
}
extern "C" fn trunc_shim(x: f64) -> f64 {
    x.trunc()
}
extern "C" fn nearbyint_shim(x: f64) -> f64 {
    x.round_ties_even()
}
/// Cranelift's libcalls for rounding (used without SSE4.1), by symbol.
const ROUNDING_SHIMS: [(&str, *const u8); 8] = [
    ("floorf", floorf_shim as *const u8),
    ("ceilf", ceilf_shim as *const u8),
    ("truncf", truncf_shim as *const u8),
    ("nearbyintf", nearbyintf_shim as *const u8),
    ("floor", floor_shim as *const u8),
    ("ceil", ceil_shim as *const u8),
    ("trunc", trunc_shim as *const u8),
    ("nearbyint", nearbyint_shim as *const u8),
];

type KernelFn = unsafe extern "C" fn(*const LaunchArgs, u64, u64);

/// Owns a kernel's JIT module and frees its code memory on drop.
struct ModuleOwner(Option<JITModule>);

// SAFETY: the module is only touched on the compiling thread and then in `Drop` (exclusive access);
// in between it merely keeps its code pages mapped. Its raw pointers refer to memory it owns.
unsafe impl Send for ModuleOwner {}

impl Drop for ModuleOwner {
    fn drop(&mut self) {
        if let Some(m) = self.0.take() {
            // SAFETY: the module is dropped only with its JitKernel (or on a failed compile), so no
            // function pointer into it can be called afterwards: `run` borrows the JitKernel.
            unsafe { m.free_memory() };
        }
    }
}

/// A compiled kernel: the entry point and the module holding its code.
struct JitKernel {
    func: KernelFn,
    _module: Mutex<ModuleOwner>,
}

impl CompiledKernel for JitKernel {
    unsafe fn run(&self, args: &LaunchArgs, start: u64, end: u64) {
        if start >= end {
            return;
        }
        // SAFETY: the caller guarantees `args` matches the kernel's parameters (see the trait); the
        // code is alive while `self` is.
        unsafe { (self.func)(args, start, end) }
    }
}

// ---------------------------------------------------------------------------------------------
// Code generation.

/// A kernel register's value for the four lanes of one iteration.
#[derive(Clone, Copy, Debug)]
enum V {
    /// Bool (an `I32X4` mask), I32/U32 (`I32X4`), F32 (`F32X4`).
    One(Value),
    /// I64/U64 (`I64X2` ×2), F64 (`F64X2` ×2): lanes 0–1, then 2–3.
    Two(Value, Value),
}

fn is_wide(t: VarType) -> bool {
    t.size_bytes() == 8
}
/// Vector type of one part of a value of type `t`.
fn vty(t: VarType) -> Type {
    match t {
        VarType::Bool | VarType::I32 | VarType::U32 => I32X4,
        VarType::F32 => F32X4,
        VarType::I64 | VarType::U64 => I64X2,
        VarType::F64 => F64X2,
    }
}
/// Integer vector type with the same lanes as `vty(t)`.
fn ivty(t: VarType) -> Type {
    if is_wide(t) {
        I64X2
    } else {
        I32X4
    }
}
/// Scalar type of one lane of `vty(t)`.
fn lane_ty(t: VarType) -> Type {
    vty(t).lane_type()
}
fn log2_size(t: VarType) -> i64 {
    t.size_bytes().trailing_zeros() as i64
}
fn type_index(t: VarType) -> u32 {
    VarType::ALL
        .iter()
        .position(|&x| x == t)
        .expect("every type is in ALL") as u32
}

/// Shuffle mask taking 32-bit lanes `lanes` (0–7 over the concatenation of both operands).
fn lanes32(lanes: [u8; 4]) -> Vec<u8> {
    lanes
        .iter()
        .flat_map(|&l| (0..4).map(move |b| l * 4 + b))
        .collect()
}

/// Deletes instructions whose results are unused and that have no effect (the e-graph pass would,
/// when it runs). Beyond saving work, this matters to x64's load folding: a value counts as used
/// more than once, and so cannot have a load folded into it, if any user (even a dead one) of a
/// value computed from it is used more than once.
fn remove_dead_code(func: &mut Function) {
    func.dfg.resolve_all_aliases();
    let mut uses: SecondaryMap<Value, u32> = SecondaryMap::new();
    let blocks: Vec<_> = func.layout.blocks().collect();
    for &block in &blocks {
        for inst in func.layout.block_insts(block) {
            for v in func.dfg.inst_values(inst) {
                uses[v] += 1;
            }
        }
    }
    let removable = |func: &Function, inst| {
        let data = &func.dfg.insts[inst];
        let op = data.opcode();
        // Loads that cannot trap (reads of inputs and constant tables): unused, they can go.
        let quiet_load =
            op == Opcode::Load && data.memflags().is_some_and(|f| f.trap_code().is_none());
        let effect = op.is_terminator()
            || op.is_call()
            || op.can_load()
            || op.can_store()
            || op.can_trap()
            || op.other_side_effects();
        quiet_load || !(effect || func.dfg.inst_results(inst).is_empty())
    };
    loop {
        let mut changed = false;
        for &block in blocks.iter().rev() {
            let insts: Vec<_> = func.layout.block_insts(block).collect();
            for &inst in insts.iter().rev() {
                if removable(func, inst)
                    && func.dfg.inst_results(inst).iter().all(|&r| uses[r] == 0)
                {
                    let args: Vec<Value> = func.dfg.inst_values(inst).collect();
                    for v in args {
                        uses[v] -= 1;
                    }
                    func.layout.remove_inst(inst);
                    changed = true;
                }
            }
        }
        if !changed {
            break;
        }
    }
}

/// What the code generator knows about the target beyond the Cranelift ISA flags.
#[derive(Clone, Copy, Debug)]
struct Target {
    /// x86-64: the `x86_*` CLIF instructions lower.
    x86: bool,
    /// SSE4.1 (`blendv`, `pmulld`).
    sse41: bool,
    /// Whether Cranelift's e-graph pass runs (opt_level other than none): without it, literals are
    /// materialised where they are used rather than kept in registers across the loop.
    egraph: bool,
    /// Loop-body constants are loads from a table (folded into their users' memory operands, which
    /// with AVX need no alignment) emitted right before their use, instead of `vconst`s.
    pool: bool,
}

struct Gen<'a, 'f> {
    b: &'a mut FunctionBuilder<'f>,
    k: &'a Kernel,
    target: Target,
    mem: MemFlags,
    /// Values of the group being lowered (loop-invariant ones shared by all groups).
    vals: Vec<Option<V>>,
    uniform: Vec<bool>,
    /// Literal bits of `Literal` registers.
    lit: Vec<Option<u64>>,
    /// Shift amounts of registers that are loop-invariant shift amounts (not literals), as the
    /// masked scalar every lane shifts by.
    amount: Vec<Option<Value>>,
    bases: Vec<Option<Value>>,
    lens: Vec<Option<Value>>,
    status: Value,
    lane: Value,
    active: Option<Value>,
    /// Lowering the loop body (not the entry block).
    in_loop: bool,
    /// While lowering the main loop: each register's affine form in the lane index, if known
    /// (empty otherwise), and its broadcast value at the iteration's first lane.
    affine: Vec<Option<Affine>>,
    affine_base: Vec<Option<Value>>,
    /// The first lane of the iteration and the index of the group being lowered in it.
    iter_lane: Value,
    group: usize,
    /// The constant table (16-byte entries), its entries' offsets and its address.
    pool: Vec<u8>,
    pool_index: HashMap<[u8; 16], u32>,
    pool_base: Option<Value>,
    /// Constants already read from the table, reused while valid: within one instruction of the
    /// interleaved groups (`const_cache_per_inst`) or the whole loop body.
    const_cache_on: bool,
    const_cache_per_inst: bool,
    const_cache: HashMap<([u8; 16], Type), Value>,
    /// Lower the loop body in `body_order` rather than in the kernel's order.
    schedule: bool,
    oob: Option<Variable>,
    scatter: Option<FuncRef>,
}

/// A register whose value in lane `i` is `a * i + b`, wrapping in its type's width.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Affine {
    a: u64,
    b: u64,
    /// Holds only for lane indices below 2^31 (a 32-bit counter extended to 64 bits).
    small_lanes: bool,
}

/// Each integer register's affine form in the lane index, where the kernel's arithmetic shows one:
/// counters and literals, and sums, differences, products with literals, shifts left by literals
/// of those (all exact in wrapping arithmetic). Such a register costs one scalar multiply-add and
/// one vector add per group instead of its whole computation: seeding a random number generator
/// per lane is a chain of 64-bit multiplies by constants, for instance.
fn affine_values(k: &Kernel) -> Vec<Option<Affine>> {
    let mut out: Vec<Option<Affine>> = Vec::with_capacity(k.insts.len());
    for inst in &k.insts {
        let t = inst.ty;
        let mask = t.bit_mask();
        let arg = |j: usize| out[inst.args[j] as usize];
        let form = |a: u64, b: u64, small: bool| {
            Some(Affine {
                a: a & mask,
                b: b & mask,
                small_lanes: small,
            })
        };
        // A constant operand: (value, holds only for small lane indices).
        let lit = |j: usize| arg(j).filter(|f| f.a == 0).map(|f| (f.b, f.small_lanes));
        let v = if !t.is_int() {
            None
        } else {
            match inst.op {
                Op::Literal => form(0, inst.imm, false),
                Op::Counter => form(1, 0, false),
                Op::Add | Op::Sub => match (arg(0), arg(1)) {
                    (Some(x), Some(y)) => {
                        let small = x.small_lanes || y.small_lanes;
                        if inst.op == Op::Add {
                            form(x.a.wrapping_add(y.a), x.b.wrapping_add(y.b), small)
                        } else {
                            form(x.a.wrapping_sub(y.a), x.b.wrapping_sub(y.b), small)
                        }
                    }
                    _ => None,
                },
                Op::Neg => {
                    arg(0).and_then(|x| form(x.a.wrapping_neg(), x.b.wrapping_neg(), x.small_lanes))
                }
                Op::Mul => match (arg(0), arg(1), lit(0), lit(1)) {
                    (_, Some(y), Some((c, cs)), _) | (Some(y), _, _, Some((c, cs))) => form(
                        y.a.wrapping_mul(c),
                        y.b.wrapping_mul(c),
                        y.small_lanes || cs,
                    ),
                    _ => None,
                },
                Op::Fma => match (arg(0), arg(1), arg(2), lit(0), lit(1)) {
                    (_, Some(y), Some(z), Some((c, cs)), _)
                    | (Some(y), _, Some(z), _, Some((c, cs))) => form(
                        y.a.wrapping_mul(c).wrapping_add(z.a),
                        y.b.wrapping_mul(c).wrapping_add(z.b),
                        y.small_lanes || z.small_lanes || cs,
                    ),
                    _ => None,
                },
                Op::Shl => match (arg(0), lit(1)) {
                    (Some(x), Some((c, cs))) => {
                        let s = (c & (t.bits() as u64 - 1)) as u32;
                        form(x.a << s, x.b << s, x.small_lanes || cs)
                    }
                    _ => None,
                },
                // `x | c` and `x ^ c` are `x + c` when `c` lies within bits that are zero in every
                // lane of `x`: below the lowest set bit of both `a` and `b`.
                Op::Or | Op::Xor => match (arg(0), arg(1), lit(0), lit(1)) {
                    (_, Some(x), Some((c, cs)), _) | (Some(x), _, _, Some((c, cs))) => {
                        let zeros = (x.a | x.b).trailing_zeros().min(t.bits());
                        if zeros >= 64 || c >> zeros == 0 {
                            form(x.a, x.b.wrapping_add(c), x.small_lanes || cs)
                        } else {
                            None
                        }
                    }
                    _ => None,
                },
                Op::Cast => {
                    let from = k.ty(inst.args[0]);
                    match arg(0) {
                        Some(x) if from.is_int() && from.bits() >= t.bits() => {
                            form(x.a, x.b, x.small_lanes)
                        }
                        // A 32-bit counter is the lane index itself for indices below 2^31,
                        // whether extended with zeros or with its sign.
                        Some(x) if from.is_int() && x.a == 1 && x.b == 0 => form(1, 0, true),
                        _ => None,
                    }
                }
                _ => None,
            }
        };
        out.push(v);
    }
    out
}

/// Groups of four lanes per main-loop iteration for a kernel with `body` per-lane instructions.
fn pick_unroll(tuning: Tuning, body: usize, has_scatter: bool) -> usize {
    if has_scatter {
        // Every scatter lane is a call, which clobbers all vector registers: nothing to overlap.
        return 1;
    }
    match tuning.unroll {
        0 => match body {
            0..=150 => 4,
            151..=500 => 2,
            _ => 1,
        },
        u => u,
    }
}

/// Builds the kernel's function; returns the contents of its constant table (see `Target::pool`).
fn build_function(
    b: &mut FunctionBuilder<'_>,
    k: &Kernel,
    scatter: Option<FuncRef>,
    pool: Option<GlobalValue>,
    tuning: Tuning,
    target: Target,
) -> Result<Vec<u8>, String> {
    let entry = b.create_block();
    b.append_block_params_for_function_params(entry);
    b.switch_to_block(entry);
    b.seal_block(entry);
    let (args, start, end) = {
        let p = b.block_params(entry);
        (p[0], p[1], p[2])
    };
    let trusted = MemFlags::trusted();
    let ptrs = b.ins().load(I64, trusted, args, 0);
    let lens_ptr = b.ins().load(I64, trusted, args, 8);
    let status = b.ins().load(I64, trusted, args, 16);

    let mut used = vec![false; k.params.len()];
    for i in &k.insts {
        if matches!(i.op, Op::Load | Op::Store | Op::Gather | Op::Scatter(_)) {
            used[i.imm as usize] = true;
        }
    }
    let mut bases = vec![None; k.params.len()];
    let mut lens = vec![None; k.params.len()];
    for (p, param) in k.params.iter().enumerate() {
        if used[p] {
            bases[p] = Some(b.ins().load(I64, trusted, ptrs, 8 * p as i32));
            if param.kind == ParamKind::Indexed {
                lens[p] = Some(b.ins().load(I64, trusted, lens_ptr, 8 * p as i32));
            }
        }
    }

    let has_gather = k.insts.iter().any(|i| i.op == Op::Gather);
    let has_random_access = has_gather || scatter.is_some();
    let oob = has_gather.then(|| {
        let v = b.declare_var(I64);
        let zero = b.ins().iconst(I64, 0);
        b.def_var(v, zero);
        v
    });
    let lane_var = b.declare_var(I64);
    b.def_var(lane_var, start);
    let pool_base = pool.map(|gv| b.ins().global_value(I64, gv));

    let n = k.insts.len();
    let mut g = Gen {
        b,
        k,
        target,
        mem: MemFlags::new().with_notrap(),
        vals: vec![None; n],
        uniform: vec![false; n],
        lit: k
            .insts
            .iter()
            .map(|i| (i.op == Op::Literal).then_some(i.imm))
            .collect(),
        amount: vec![None; n],
        bases,
        lens,
        status,
        lane: start,
        active: None,
        in_loop: false,
        affine: Vec::new(),
        affine_base: vec![None; n],
        iter_lane: start,
        group: 0,
        pool: Vec::new(),
        pool_index: HashMap::new(),
        pool_base,
        const_cache_on: tuning.const_cache > 0 && scatter.is_none(),
        const_cache_per_inst: tuning.const_cache == 1,
        const_cache: HashMap::new(),
        schedule: tuning.schedule,
        oob,
        scatter,
    };

    // Loop-invariant values (literals, broadcast loads and pure instructions of those), computed
    // once in the entry block.
    for (r, inst) in k.insts.iter().enumerate() {
        let invariant = match inst.op {
            Op::Literal => true,
            Op::Load => k.params[inst.imm as usize].kind == ParamKind::Broadcast,
            op => {
                op.is_pure()
                    && op != Op::Counter
                    && inst.has_value()
                    && inst.operands().iter().all(|&a| g.uniform[a as usize])
            }
        };
        if invariant {
            g.uniform[r] = true;
            g.vals[r] = g.lower(r)?;
        }
    }
    // Scalar shift amounts of invariant, non-literal amounts of lane-dependent shifts.
    for (r, inst) in k.insts.iter().enumerate() {
        if matches!(inst.op, Op::Shl | Op::Shr) && !g.uniform[r] {
            let a = inst.args[1] as usize;
            if g.uniform[a] && g.lit[a].is_none() && g.amount[a].is_none() {
                let v = g.val(a as u32)?;
                let s = g.extract(v, 0);
                g.amount[a] = Some(g.b.ins().band_imm(s, inst.ty.bits() as i64 - 1));
            }
        }
    }
    let invariant = g.vals.clone();
    let body = g.uniform.iter().filter(|&&u| !u).count();
    let groups = pick_unroll(tuning, body, scatter.is_some());
    tracing::debug!(target: "kiln::cranelift", "kernel of {} instructions, {body} per lane: {groups} groups per iteration", k.insts.len());
    // Affine values are worth a loop of their own when some lane-dependent instruction other
    // than a counter or a cast would be replaced.
    let affine = affine_values(k);
    let use_affine = tuning.affine
        && k.insts.iter().enumerate().any(|(r, inst)| {
            affine[r].is_some() && !g.uniform[r] && !matches!(inst.op, Op::Counter | Op::Cast)
        });

    let tail_header = g.b.create_block();
    let tail_body = g.b.create_block();
    let exit = g.b.create_block();
    if groups > 1 || use_affine {
        // Main loop: `groups` whole vectors per iteration while that many lanes remain.
        let step = W * groups as i64;
        let header = g.b.create_block();
        let body = g.b.create_block();
        if use_affine && affine.iter().flatten().any(|a| a.small_lanes) {
            // Some affine forms hold only for lane indices below 2^31: larger ranges take the
            // generic loop.
            let small =
                g.b.ins()
                    .icmp_imm(IntCC::UnsignedLessThanOrEqual, end, 1 << 31);
            g.b.ins().brif(small, header, &[], tail_header, &[]);
        } else {
            g.b.ins().jump(header, &[]);
        }
        g.affine = if use_affine { affine } else { Vec::new() };
        g.b.switch_to_block(header);
        let i = g.b.use_var(lane_var);
        let rem = g.b.ins().isub(end, i);
        let more =
            g.b.ins()
                .icmp_imm(IntCC::UnsignedGreaterThanOrEqual, rem, step);
        g.b.ins().brif(more, body, &[], tail_header, &[]);
        g.b.switch_to_block(body);
        g.b.seal_block(body);
        let lanes: Vec<Value> = (0..groups)
            .map(|u| {
                if u == 0 {
                    i
                } else {
                    g.b.ins().iadd_imm(i, W * u as i64)
                }
            })
            .collect();
        let active = if has_random_access {
            // Every lane of these groups is below `end`.
            Some(g.vconst(I32X4, &[u32::MAX; 4]))
        } else {
            None
        };
        g.emit_groups(&invariant, &lanes, active, tuning.interleave)?;
        g.affine = Vec::new();
        let next = g.b.ins().iadd_imm(i, step);
        g.b.def_var(lane_var, next);
        g.b.ins().jump(header, &[]);
        g.b.seal_block(header);
    } else {
        g.b.ins().jump(tail_header, &[]);
    }

    // One vector per iteration up to `end` (the whole range when not unrolled).
    g.b.switch_to_block(tail_header);
    let i = g.b.use_var(lane_var);
    let more = g.b.ins().icmp(IntCC::UnsignedLessThan, i, end);
    g.b.ins().brif(more, tail_body, &[], exit, &[]);

    g.b.switch_to_block(tail_body);
    g.b.seal_block(tail_body);
    let active = if has_random_access {
        // Lanes of this iteration below `end`: (end - i) min 4 > [0, 1, 2, 3].
        let rem = g.b.ins().isub(end, i);
        let four = g.b.ins().iconst(I64, W);
        let rem = g.b.ins().umin(rem, four);
        let rem = g.b.ins().ireduce(I32, rem);
        let rem = g.b.ins().splat(I32X4, rem);
        let iota = g.vconst(I32X4, &[0u32, 1, 2, 3]);
        Some(g.b.ins().icmp(IntCC::SignedGreaterThan, rem, iota))
    } else {
        None
    };
    g.emit_groups(&invariant, &[i], active, 1)?;
    let next = g.b.ins().iadd_imm(i, W);
    g.b.def_var(lane_var, next);
    g.b.ins().jump(tail_header, &[]);
    g.b.seal_block(tail_header);

    g.b.switch_to_block(exit);
    g.b.seal_block(exit);
    if let Some(oob) = g.oob {
        let count = g.b.use_var(oob);
        let add = g.b.create_block();
        let done = g.b.create_block();
        g.b.ins().brif(count, add, &[], done, &[]);
        g.b.switch_to_block(add);
        g.b.seal_block(add);
        let addr = g.b.ins().iadd_imm(g.status, 8 * STATUS_OOB_READS as i64);
        g.b.ins()
            .atomic_rmw(I64, MemFlags::trusted(), AtomicRmwOp::Add, addr, count);
        g.b.ins().jump(done, &[]);
        g.b.switch_to_block(done);
        g.b.seal_block(done);
    }
    g.b.ins().return_(&[]);
    let mut pool = g.pool;
    if pool.is_empty() {
        pool.resize(16, 0);
    }
    Ok(pool)
}

impl<'f> Gen<'_, 'f> {
    fn val(&mut self, r: u32) -> Result<V, String> {
        if self.in_loop && !self.target.egraph {
            // Without the e-graph pass nothing rematerialises constants: a literal defined in the
            // entry block would hold a register across the whole loop.
            if let Some(bits) = self.lit.get(r as usize).copied().flatten() {
                return Ok(self.literal(self.k.ty(r), bits));
            }
        }
        self.vals
            .get(r as usize)
            .copied()
            .flatten()
            .ok_or_else(|| format!("register r{r} has no value"))
    }

    /// The order in which to lower the loop body's instructions: memory accesses (loads, stores,
    /// gathers, scatters) keep their order, and each pure instruction comes right before its
    /// first use, its operands computed in Sethi–Ullman order (the one needing more registers
    /// first). This keeps few values live at a time, which matters all the more when several
    /// groups are interleaved: x64 has 16 vector registers.
    fn body_order(&self) -> Vec<usize> {
        let k = self.k;
        let n = k.insts.len();
        let varying = |r: usize| !self.uniform[r];
        let mut need = vec![0u32; n];
        for r in 0..n {
            let mut kids: Vec<u32> = k.insts[r]
                .operands()
                .iter()
                .filter(|&&a| varying(a as usize))
                .map(|&a| need[a as usize])
                .collect();
            kids.sort_unstable_by(|a, b| b.cmp(a));
            need[r] = kids
                .iter()
                .enumerate()
                .map(|(i, &x)| x + i as u32)
                .max()
                .unwrap_or(1)
                .max(1);
        }
        let mut order = Vec::with_capacity(n);
        let mut done = vec![false; n];
        // Iterative post-order walk: (register, operands pushed yet).
        let mut stack: Vec<(usize, bool)> = Vec::new();
        for root in 0..n {
            if !varying(root) || k.insts[root].op.is_pure() {
                continue;
            }
            stack.push((root, false));
            while let Some((r, expanded)) = stack.pop() {
                if done[r] {
                    continue;
                }
                if expanded {
                    done[r] = true;
                    order.push(r);
                    continue;
                }
                stack.push((r, true));
                let mut kids: Vec<usize> = k.insts[r]
                    .operands()
                    .iter()
                    .map(|&a| a as usize)
                    .filter(|&a| varying(a) && !done[a] && k.insts[a].op.is_pure())
                    .collect();
                // Pushed last = visited first: the operand needing the most registers.
                kids.sort_by_key(|&a| need[a]);
                stack.extend(kids.into_iter().map(|a| (a, false)));
            }
        }
        order
    }

    /// Lower every lane-dependent instruction for each group of four lanes starting at `lanes`
    /// (`active`: the mask of lanes below `end`, for gathers and scatters). `invariant` holds the
    /// loop-invariant values, shared by all groups.
    fn emit_groups(
        &mut self,
        invariant: &[Option<V>],
        lanes: &[Value],
        active: Option<Value>,
        interleave: usize,
    ) -> Result<(), String> {
        self.active = active;
        self.in_loop = true;
        self.iter_lane = lanes[0];
        self.affine_base.iter_mut().for_each(|b| *b = None);
        self.const_cache.clear();
        let n = self.k.insts.len();
        let per_chunk = interleave.max(1);
        let order = if self.schedule {
            self.body_order()
        } else {
            (0..n).collect()
        };
        for (c, chunk) in lanes.chunks(per_chunk).enumerate() {
            let mut groups = vec![invariant.to_vec(); chunk.len()];
            for &r in &order {
                if invariant[r].is_some() || self.uniform[r] {
                    continue;
                }
                if self.const_cache_per_inst {
                    self.const_cache.clear();
                }
                let inst = self.k.insts[r];
                if inst.op == Op::Store && inst.ty == VarType::Bool && chunk.len() == 4 {
                    // Four groups' masks (16 consecutive lanes) packed into one 16-byte store.
                    let masks: Vec<V> = groups
                        .iter()
                        .map(|vals| vals[inst.args[0] as usize])
                        .collect::<Option<_>>()
                        .ok_or("stored register has no value")?;
                    self.lane = chunk[0];
                    self.store_masks(inst.imm as usize, &masks)?;
                    continue;
                }
                for (u, (vals, &lane)) in groups.iter_mut().zip(chunk).enumerate() {
                    std::mem::swap(&mut self.vals, vals);
                    self.lane = lane;
                    self.group = c * per_chunk + u;
                    let v = self.lower(r);
                    std::mem::swap(&mut self.vals, vals);
                    vals[r] = v?;
                }
            }
        }
        self.vals = invariant.to_vec();
        self.in_loop = false;
        Ok(())
    }

    /// Reinterpret a vector as another vector type of the same width (no-op if already `to`).
    fn bc(&mut self, to: Type, v: Value) -> Value {
        // Look through an earlier bitcast, so that chains of reinterpretations stay one deep (the
        // x64 lowering recognises `bitcast` of a comparison as a mask, but not two of them).
        let dfg = &self.b.func.dfg;
        let v = match dfg.value_def(v).inst() {
            Some(i) if dfg.insts[i].opcode() == Opcode::Bitcast => dfg.inst_args(i)[0],
            _ => v,
        };
        if self.b.func.dfg.value_type(v) == to {
            v
        } else {
            self.b
                .ins()
                .bitcast(to, MemFlags::new().with_endianness(Endianness::Little), v)
        }
    }
    fn bc_v(&mut self, to: Type, v: V) -> V {
        match v {
            V::One(x) => V::One(self.bc(to, x)),
            V::Two(x, y) => V::Two(self.bc(to, x), self.bc(to, y)),
        }
    }

    fn vconst<T: Copy + Into<u64>>(&mut self, ty: Type, lanes: &[T]) -> Value {
        let width = 16 / lanes.len();
        let bytes: Vec<u8> = lanes
            .iter()
            .flat_map(|&l| l.into().to_le_bytes().into_iter().take(width))
            .collect();
        if let (Some(base), true) = (self.pool_base, self.in_loop) {
            let trivial = bytes.iter().all(|&x| x == 0) || bytes.iter().all(|&x| x == 0xff);
            if !trivial {
                let key: [u8; 16] = bytes.as_slice().try_into().expect("16 bytes");
                if self.const_cache_on {
                    if let Some(&v) = self.const_cache.get(&(key, ty)) {
                        return v;
                    }
                }
                let next = self.pool.len() as u32;
                let off = *self.pool_index.entry(key).or_insert(next);
                if off == next {
                    self.pool.extend_from_slice(&key);
                }
                let flags = MemFlags::trusted().with_readonly();
                let v = self.b.ins().load(ty, flags, base, off as i32);
                if self.const_cache_on {
                    self.const_cache.insert((key, ty), v);
                }
                return v;
            }
        }
        let c = self.b.func.dfg.constants.insert(ConstantData::from(bytes));
        self.b.ins().vconst(ty, c)
    }
    fn splat32(&mut self, x: u32) -> Value {
        self.vconst(I32X4, &[x; 4])
    }
    fn splat64(&mut self, x: u64) -> Value {
        self.vconst(I64X2, &[x; 2])
    }
    fn shuffle(&mut self, a: Value, b: Value, mask: Vec<u8>) -> Value {
        let ta = self.b.func.dfg.value_type(a);
        let a8 = self.bc(I8X16, a);
        let b8 = self.bc(I8X16, b);
        let imm = self.b.func.dfg.immediates.push(ConstantData::from(mask));
        let r = self.b.ins().shuffle(a8, b8, imm);
        self.bc(ta, r)
    }
    /// 32-bit lanes 0 and 2 of `a`, then of `b` (truncation of two `I64X2` into one `I32X4`).
    fn narrow32(&mut self, a: Value, b: Value) -> Value {
        let a = self.bc(I32X4, a);
        let b = self.bc(I32X4, b);
        self.shuffle(a, b, lanes32([0, 2, 4, 6]))
    }
    /// Low 64 bits of `a`, then low 64 bits of `b`.
    fn concat_low(&mut self, a: Value, b: Value) -> Value {
        self.shuffle(a, b, lanes32([0, 1, 4, 5]))
    }
    /// The high two 32-bit lanes of `a` moved to the low half.
    fn high_to_low(&mut self, a: Value) -> Value {
        self.shuffle(a, a, lanes32([2, 3, 2, 3]))
    }
    /// A mask (`I32X4`) widened to two `I64X2` masks.
    fn widen_mask(&mut self, m: Value) -> (Value, Value) {
        (self.b.ins().swiden_low(m), self.b.ins().swiden_high(m))
    }

    fn map1(&mut self, a: V, mut f: impl FnMut(&mut FunctionBuilder<'f>, Value) -> Value) -> V {
        match a {
            V::One(x) => V::One(f(self.b, x)),
            V::Two(x, y) => {
                let lo = f(self.b, x);
                let hi = f(self.b, y);
                V::Two(lo, hi)
            }
        }
    }
    fn map2(
        &mut self,
        a: V,
        b: V,
        mut f: impl FnMut(&mut FunctionBuilder<'f>, Value, Value) -> Value,
    ) -> V {
        match (a, b) {
            (V::One(x), V::One(y)) => V::One(f(self.b, x, y)),
            (V::Two(x0, x1), V::Two(y0, y1)) => {
                let lo = f(self.b, x0, y0);
                let hi = f(self.b, x1, y1);
                V::Two(lo, hi)
            }
            _ => unreachable!("operands of one type have one shape"),
        }
    }
    fn map3(
        &mut self,
        a: V,
        b: V,
        c: V,
        mut f: impl FnMut(&mut FunctionBuilder<'f>, Value, Value, Value) -> Value,
    ) -> V {
        match (a, b, c) {
            (V::One(x), V::One(y), V::One(z)) => V::One(f(self.b, x, y, z)),
            (V::Two(x0, x1), V::Two(y0, y1), V::Two(z0, z1)) => {
                let lo = f(self.b, x0, y0, z0);
                let hi = f(self.b, x1, y1, z1);
                V::Two(lo, hi)
            }
            _ => unreachable!("operands of one type have one shape"),
        }
    }
    /// Bitwise op on the integer view of a value of type `t`.
    fn bitwise(
        &mut self,
        t: VarType,
        a: V,
        b: V,
        f: impl FnMut(&mut FunctionBuilder<'f>, Value, Value) -> Value,
    ) -> V {
        let a = self.bc_v(ivty(t), a);
        let b = self.bc_v(ivty(t), b);
        let r = self.map2(a, b, f);
        self.bc_v(vty(t), r)
    }

    /// Lane `l` (0–3) of a value, as a scalar of its lane type.
    fn extract(&mut self, v: V, l: usize) -> Value {
        match v {
            V::One(x) => self.b.ins().extractlane(x, l as u8),
            V::Two(x, _) if l < 2 => self.b.ins().extractlane(x, l as u8),
            V::Two(_, y) => self.b.ins().extractlane(y, (l - 2) as u8),
        }
    }
    /// A value of type `t` from four lane scalars of type `lane_ty(t)` (or its integer twin).
    fn build(&mut self, t: VarType, lanes: &[Value]) -> V {
        if is_wide(t) {
            let ty = self
                .b
                .func
                .dfg
                .value_type(lanes[0])
                .by(2)
                .expect("64-bit lanes");
            let mut halves = [lanes[0]; 2];
            for (h, half) in halves.iter_mut().enumerate() {
                let v = self.b.ins().scalar_to_vector(ty, lanes[2 * h]);
                *half = self.b.ins().insertlane(v, lanes[2 * h + 1], 1);
            }
            V::Two(halves[0], halves[1])
        } else {
            let ty = self
                .b
                .func
                .dfg
                .value_type(lanes[0])
                .by(4)
                .expect("32-bit lanes");
            let mut v = self.b.ins().scalar_to_vector(ty, lanes[0]);
            for (l, &x) in lanes.iter().enumerate().skip(1) {
                v = self.b.ins().insertlane(v, x, l as u8);
            }
            V::One(v)
        }
    }
    /// Per-lane scalar fallback: `f` maps the lane scalars of `args` to one scalar of `lane_ty(out)`.
    fn scalar_map(
        &mut self,
        out: VarType,
        args: &[V],
        mut f: impl FnMut(&mut FunctionBuilder<'f>, &[Value]) -> Value,
    ) -> V {
        let mut lanes = Vec::with_capacity(4);
        for l in 0..W as usize {
            let xs: Vec<Value> = args.iter().map(|&a| self.extract(a, l)).collect();
            lanes.push(f(self.b, &xs));
        }
        self.build(out, &lanes)
    }

    /// Byte address of element `lane` of parameter `p` (elements of type `t`).
    fn elem_addr(&mut self, p: usize, t: VarType, lane: Value) -> Result<Value, String> {
        let base = self.bases[p].ok_or_else(|| format!("parameter p{p} not loaded"))?;
        let off = if log2_size(t) == 0 {
            lane
        } else {
            self.b.ins().ishl_imm(lane, log2_size(t))
        };
        Ok(self.b.ins().iadd(base, off))
    }

    fn literal(&mut self, t: VarType, imm: u64) -> V {
        match t {
            VarType::Bool => V::One(self.splat32(if imm & 1 != 0 { u32::MAX } else { 0 })),
            VarType::I32 | VarType::U32 => V::One(self.splat32(imm as u32)),
            VarType::F32 => V::One(self.vconst(F32X4, &[imm as u32; 4])),
            VarType::I64 | VarType::U64 | VarType::F64 => {
                let ty = vty(t);
                let x = self.vconst(ty, &[imm; 2]);
                // From the table, each half its own load (each can then fold into its user).
                let y = if self.pool_base.is_some() && self.in_loop {
                    self.vconst(ty, &[imm; 2])
                } else {
                    x
                };
                V::Two(x, y)
            }
        }
    }

    fn load_broadcast(&mut self, p: usize, t: VarType) -> Result<V, String> {
        let base = self.bases[p].ok_or_else(|| format!("parameter p{p} not loaded"))?;
        let mem = self.mem;
        Ok(match t {
            VarType::Bool => {
                let x = self.b.ins().uload8(I32, mem, base, 0);
                let x = self.b.ins().band_imm(x, 1);
                let x = self.b.ins().ineg(x);
                V::One(self.b.ins().splat(I32X4, x))
            }
            _ => {
                let x = self.b.ins().load(lane_ty(t), mem, base, 0);
                let v = self.b.ins().splat(vty(t), x);
                if is_wide(t) {
                    V::Two(v, v)
                } else {
                    V::One(v)
                }
            }
        })
    }

    fn load_input(&mut self, p: usize, t: VarType) -> Result<V, String> {
        let lane = self.lane;
        let addr = self.elem_addr(p, t, lane)?;
        let mem = self.mem;
        Ok(match t {
            VarType::Bool => {
                let bytes = self.b.ins().uload8x8(mem, addr, 0);
                let x = self.b.ins().uwiden_low(bytes);
                let one = self.splat32(1);
                let x = self.b.ins().band(x, one);
                V::One(self.b.ins().ineg(x))
            }
            _ if is_wide(t) => {
                let lo = self.b.ins().load(vty(t), mem, addr, 0);
                let hi = self.b.ins().load(vty(t), mem, addr, 16);
                V::Two(lo, hi)
            }
            _ => V::One(self.b.ins().load(vty(t), mem, addr, 0)),
        })
    }

    fn store(&mut self, p: usize, t: VarType, v: V) -> Result<(), String> {
        let lane = self.lane;
        let addr = self.elem_addr(p, t, lane)?;
        let mem = self.mem;
        match (t, v) {
            (VarType::Bool, V::One(m)) => {
                let one = self.splat32(1);
                let x = self.b.ins().band(m, one);
                let x = self.b.ins().snarrow(x, x);
                let x = self.b.ins().snarrow(x, x);
                let x = self.bc(I32X4, x);
                let x = self.b.ins().extractlane(x, 0);
                self.b.ins().store(mem, x, addr, 0);
            }
            (_, V::One(x)) => {
                self.b.ins().store(mem, x, addr, 0);
            }
            (_, V::Two(lo, hi)) => {
                self.b.ins().store(mem, lo, addr, 0);
                self.b.ins().store(mem, hi, addr, 16);
            }
        }
        Ok(())
    }

    /// Stores the masks of four consecutive groups (starting at `self.lane`) as 16 bytes.
    fn store_masks(&mut self, p: usize, masks: &[V]) -> Result<(), String> {
        let m: Vec<Value> = masks
            .iter()
            .map(|&m| match m {
                V::One(m) => Ok(m),
                V::Two(..) => Err("mask is not a mask".to_string()),
            })
            .collect::<Result<_, _>>()?;
        let lane = self.lane;
        let addr = self.elem_addr(p, VarType::Bool, lane)?;
        // Lanes are 0 or -1: saturating narrowing keeps them so, then `& 1`.
        let lo = self.b.ins().snarrow(m[0], m[1]);
        let hi = self.b.ins().snarrow(m[2], m[3]);
        let bytes = self.b.ins().snarrow(lo, hi);
        let one = self.vconst(I8X16, &[1u8; 16]);
        let bytes = self.b.ins().band(bytes, one);
        let mem = self.mem;
        self.b.ins().store(mem, bytes, addr, 0);
        Ok(())
    }

    fn counter(&mut self, t: VarType) -> V {
        let lane = self.lane;
        if is_wide(t) {
            let s = self.b.ins().splat(I64X2, lane);
            let c01 = self.vconst(I64X2, &[0u64, 1]);
            let c23 = self.vconst(I64X2, &[2u64, 3]);
            let lo = self.b.ins().iadd(s, c01);
            let hi = self.b.ins().iadd(s, c23);
            V::Two(lo, hi)
        } else {
            let l = self.b.ins().ireduce(I32, lane);
            let s = self.b.ins().splat(I32X4, l);
            let iota = self.vconst(I32X4, &[0u32, 1, 2, 3]);
            V::One(self.b.ins().iadd(s, iota))
        }
    }

    /// The value of a register of type `t` whose lanes are `a * i + b` (see `Affine`), for the
    /// group at `self.lane`: a scalar multiply-add, broadcast, plus each lane's offset.
    fn affine(&mut self, r: usize, t: VarType, f: Affine) -> V {
        // One broadcast of `a * i + b` per iteration (`i`: the first group's lane), shared by its
        // groups, which add their lanes' offsets from `i`.
        let v = match self.affine_base[r] {
            Some(v) => v,
            None => {
                let lane = self.iter_lane;
                let s = match f.a {
                    1 => lane,
                    a => self.b.ins().imul_imm(lane, a as i64),
                };
                let s = if f.b == 0 {
                    s
                } else {
                    self.b.ins().iadd_imm(s, f.b as i64)
                };
                let v = if is_wide(t) {
                    self.b.ins().splat(I64X2, s)
                } else {
                    let s = self.b.ins().ireduce(I32, s);
                    self.b.ins().splat(I32X4, s)
                };
                self.affine_base[r] = Some(v);
                v
            }
        };
        let a = f.a;
        let first = W as u64 * self.group as u64;
        let off = |k: u64| a.wrapping_mul(first + k);
        if is_wide(t) {
            let lo = self.vconst(I64X2, &[off(0), off(1)]);
            let lo = self.b.ins().iadd(v, lo);
            let hi = self.vconst(I64X2, &[off(2), off(3)]);
            let hi = self.b.ins().iadd(v, hi);
            V::Two(lo, hi)
        } else {
            let offsets = self.vconst(I32X4, &[off(0), off(1), off(2), off(3)].map(|x| x as u32));
            V::One(self.b.ins().iadd(v, offsets))
        }
    }

    fn lower(&mut self, r: usize) -> Result<Option<V>, String> {
        let inst = self.k.insts[r];
        let t = inst.ty;
        if let Some(Some(f)) = self.affine.get(r) {
            return Ok(Some(self.affine(r, t, *f)));
        }
        let p = inst.imm as usize;
        let k = self.k;
        let arg = |g: &mut Self, j: usize| g.val(inst.args[j]);
        let from = |j: usize| k.ty(inst.args[j]);
        let v = match inst.op {
            Op::Literal => self.literal(t, inst.imm),
            Op::Data => return Err("`data` cannot appear in a kernel".into()),
            Op::Counter => self.counter(t),
            Op::Load => match self.k.params[p].kind {
                ParamKind::Broadcast => self.load_broadcast(p, t)?,
                _ => self.load_input(p, t)?,
            },
            Op::Store => {
                let a = arg(self, 0)?;
                self.store(p, t, a)?;
                return Ok(None);
            }
            Op::Neg => {
                let a = arg(self, 0)?;
                match t {
                    VarType::F32 | VarType::F64 => self.sign_bit_op(t, a, true),
                    VarType::Bool => a,
                    _ => self.map1(a, |b, x| b.ins().ineg(x)),
                }
            }
            Op::Not => {
                let a = arg(self, 0)?;
                let a = self.bc_v(ivty(t), a);
                let r = self.map1(a, |b, x| b.ins().bnot(x));
                self.bc_v(vty(t), r)
            }
            Op::Abs => {
                let a = arg(self, 0)?;
                match t {
                    VarType::F32 | VarType::F64 => self.sign_bit_op(t, a, false),
                    VarType::I32 | VarType::I64 => self.map1(a, |b, x| b.ins().iabs(x)),
                    _ => a,
                }
            }
            Op::Sqrt | Op::Floor | Op::Ceil | Op::Round | Op::Trunc => {
                let a = arg(self, 0)?;
                if !t.is_float() {
                    a
                } else {
                    let op = inst.op;
                    self.map1(a, |b, x| match op {
                        Op::Sqrt => b.ins().sqrt(x),
                        Op::Floor => b.ins().floor(x),
                        Op::Ceil => b.ins().ceil(x),
                        Op::Round => b.ins().nearest(x),
                        _ => b.ins().trunc(x),
                    })
                }
            }
            Op::Cast => match self.narrowed_shift(r)? {
                Some(v) => v,
                None => {
                    let a = arg(self, 0)?;
                    self.cast(from(0), t, a)
                }
            },
            Op::Bitcast => {
                let a = arg(self, 0)?;
                self.bc_v(vty(t), a)
            }
            Op::Add
            | Op::Sub
            | Op::Mul
            | Op::Div
            | Op::Rem
            | Op::Min
            | Op::Max
            | Op::And
            | Op::Or
            | Op::Xor
            | Op::Shl
            | Op::Shr => {
                let regs = self.literal_last(inst.op, inst.args[0], inst.args[1]);
                let (a, b) = (self.val(regs[0])?, self.val(regs[1])?);
                self.binary(inst.op, t, a, b, regs)?
            }
            Op::Eq | Op::Ne | Op::Lt | Op::Le | Op::Gt | Op::Ge => {
                let regs = self.literal_last(inst.op, inst.args[0], inst.args[1]);
                let op = if regs[0] == inst.args[0] {
                    inst.op
                } else {
                    match inst.op {
                        Op::Lt => Op::Gt,
                        Op::Le => Op::Ge,
                        Op::Gt => Op::Lt,
                        Op::Ge => Op::Le,
                        op => op,
                    }
                };
                let (a, b) = (self.val(regs[0])?, self.val(regs[1])?);
                self.compare(op, from(0), a, b)
            }
            Op::Fma => {
                let [mut x, mut y] = self.literal_last(Op::Mul, inst.args[0], inst.args[1]);
                let is_lit = |r: u32| self.lit[r as usize].is_some();
                if is_lit(y) && !is_lit(x) && is_lit(inst.args[2]) {
                    // With the addend read last (and folded), a literal factor goes first: x64's
                    // fused multiply-add overwrites its first operand, which would otherwise be
                    // copied when still live.
                    (x, y) = (y, x);
                }
                let (a, b, c) = (self.val(x)?, self.val(y)?, arg(self, 2)?);
                match t {
                    VarType::F32 | VarType::F64 => {
                        self.map3(a, b, c, |b, x, y, z| b.ins().fma(x, y, z))
                    }
                    VarType::Bool => self.map3(a, b, c, |b, x, y, z| {
                        let xy = b.ins().band(x, y);
                        b.ins().bor(xy, z)
                    }),
                    _ => self.map3(a, b, c, |b, x, y, z| {
                        let xy = b.ins().imul(x, y);
                        b.ins().iadd(xy, z)
                    }),
                }
            }
            Op::Select => {
                let (m, x, y) = (arg(self, 0)?, arg(self, 1)?, arg(self, 2)?);
                let V::One(m) = m else {
                    return Err("select mask is not a mask".into());
                };
                // Mask lanes are all ones or all zeros, so `blendv` (which looks at the top bit of
                // each lane) selects exactly like `bitselect`.
                // (x64 lowers it for integer vectors only.)
                let blendv = self.target.x86 && self.target.sse41;
                let sty = if blendv { ivty(t) } else { vty(t) };
                let (x, y) = (self.bc_v(sty, x), self.bc_v(sty, y));
                let r = match (x, y) {
                    (V::One(x), V::One(y)) => {
                        let m = self.bc(sty, m);
                        V::One(self.blend(blendv, m, x, y))
                    }
                    (V::Two(x0, x1), V::Two(y0, y1)) => {
                        let (m0, m1) = self.widen_mask(m);
                        let m0 = self.bc(sty, m0);
                        let m1 = self.bc(sty, m1);
                        let lo = self.blend(blendv, m0, x0, y0);
                        let hi = self.blend(blendv, m1, x1, y1);
                        V::Two(lo, hi)
                    }
                    _ => return Err("select operands differ in shape".into()),
                };
                self.bc_v(vty(t), r)
            }
            Op::Gather => {
                let (idx, mask) = (arg(self, 0)?, arg(self, 1)?);
                self.gather(p, t, idx, from(0), mask)?
            }
            Op::Scatter(rop) => {
                let (val, idx, mask) = (arg(self, 0)?, arg(self, 1)?, arg(self, 2)?);
                let op_ty = (u32::from(encode_reduce(rop)) << 8) | type_index(t);
                self.scatter(p, t, op_ty, val, idx, from(1), mask)?;
                return Ok(None);
            }
        };
        Ok(Some(v))
    }

    /// The operands `x`, `y` of a binary `op`, swapped (for comparisons, the caller mirrors the
    /// op) when only `x` is a literal and the order does not matter: the literal is then read last,
    /// right before its use, and can fold into the instruction as its memory operand.
    fn literal_last(&self, op: Op, x: u32, y: u32) -> [u32; 2] {
        let swappable = matches!(
            op,
            Op::Add
                | Op::Mul
                | Op::Min
                | Op::Max
                | Op::And
                | Op::Or
                | Op::Xor
                | Op::Eq
                | Op::Ne
                | Op::Lt
                | Op::Le
                | Op::Gt
                | Op::Ge
        );
        if swappable && self.lit[x as usize].is_some() && self.lit[y as usize].is_none() {
            [y, x]
        } else {
            [x, y]
        }
    }

    /// `op` on `a` and `b` of type `t` (registers `regs`).
    fn binary(&mut self, op: Op, t: VarType, a: V, b: V, regs: [u32; 2]) -> Result<V, String> {
        if t == VarType::Bool {
            // Masks: add/max are `or`, mul/min are `and`, sub is `xor`. `div` has no definition in
            // `op` for masks (the interpreter panics); `a & b` is x / y with x / 0 == 0.
            return Ok(match op {
                Op::And | Op::Mul | Op::Min | Op::Div => {
                    self.map2(a, b, |b, x, y| b.ins().band(x, y))
                }
                Op::Or | Op::Add | Op::Max => self.map2(a, b, |b, x, y| b.ins().bor(x, y)),
                Op::Xor | Op::Sub => self.map2(a, b, |b, x, y| b.ins().bxor(x, y)),
                _ => return Err(format!("{op} on bool")),
            });
        }
        if t.is_float() {
            return Ok(match op {
                Op::Add => self.map2(a, b, |b, x, y| b.ins().fadd(x, y)),
                Op::Sub => self.map2(a, b, |b, x, y| b.ins().fsub(x, y)),
                Op::Mul => self.map2(a, b, |b, x, y| b.ins().fmul(x, y)),
                Op::Div => self.map2(a, b, |b, x, y| b.ins().fdiv(x, y)),
                // Cranelift's fmin/fmax are IEEE 754-2019 minimum/maximum: NaN-propagating, -0 < +0.
                Op::Min | Op::Max => self.fmin_fmax(op, t, a, b, regs),
                Op::And => self.bitwise(t, a, b, |b, x, y| b.ins().band(x, y)),
                Op::Or => self.bitwise(t, a, b, |b, x, y| b.ins().bor(x, y)),
                Op::Xor => self.bitwise(t, a, b, |b, x, y| b.ins().bxor(x, y)),
                _ => return Err(format!("{op} on {t}")),
            });
        }
        let signed = t.is_signed();
        let bits = t.bits() as i64;
        let lt = lane_ty(t);
        Ok(match op {
            Op::Add => self.map2(a, b, |b, x, y| b.ins().iadd(x, y)),
            Op::Sub => self.map2(a, b, |b, x, y| b.ins().isub(x, y)),
            Op::Mul => self.map2(a, b, |b, x, y| b.ins().imul(x, y)),
            Op::And => self.map2(a, b, |b, x, y| b.ins().band(x, y)),
            Op::Or => match self.rotate(t, regs)? {
                Some(v) => v,
                None => self.map2(a, b, |b, x, y| b.ins().bor(x, y)),
            },
            Op::Xor => self.map2(a, b, |b, x, y| b.ins().bxor(x, y)),
            Op::Min if signed => self.map2(a, b, |b, x, y| b.ins().smin(x, y)),
            Op::Min => self.map2(a, b, |b, x, y| b.ins().umin(x, y)),
            Op::Max if signed => self.map2(a, b, |b, x, y| b.ins().smax(x, y)),
            Op::Max => self.map2(a, b, |b, x, y| b.ins().umax(x, y)),
            Op::Div | Op::Rem => {
                let is_div = op == Op::Div;
                let all_ones = if bits == 32 { u32::MAX as i64 } else { -1 };
                self.scalar_map(t, &[a, b], |b, xs| {
                    let (x, y) = (xs[0], xs[1]);
                    let zero = b.ins().iconst(lt, 0);
                    let one = b.ins().iconst(lt, 1);
                    let y0 = b.ins().icmp_imm(IntCC::Equal, y, 0);
                    if signed {
                        // x / 0 == 0, x % 0 == x, x / -1 == -x (wrapping), x % -1 == 0: the hardware
                        // divide only ever sees a divisor other than 0 and -1.
                        let m1 = b.ins().iconst(lt, all_ones);
                        let ym1 = b.ins().icmp(IntCC::Equal, y, m1);
                        let special = b.ins().bor(y0, ym1);
                        let ys = b.ins().select(special, one, y);
                        if is_div {
                            let q = b.ins().sdiv(x, ys);
                            let neg = b.ins().ineg(x);
                            let q = b.ins().select(ym1, neg, q);
                            b.ins().select(y0, zero, q)
                        } else {
                            let r = b.ins().srem(x, ys);
                            let r = b.ins().select(ym1, zero, r);
                            b.ins().select(y0, x, r)
                        }
                    } else {
                        let ys = b.ins().select(y0, one, y);
                        if is_div {
                            let q = b.ins().udiv(x, ys);
                            b.ins().select(y0, zero, q)
                        } else {
                            let r = b.ins().urem(x, ys);
                            b.ins().select(y0, x, r)
                        }
                    }
                })
            }
            Op::Shl | Op::Shr => self.shift(op, t, a, b, regs[1]),
            _ => return Err(format!("{op} on {t}")),
        })
    }

    /// IEEE 754-2019 minimum/maximum. Against a literal that is not NaN (nor the zero the native
    /// instruction would get wrong), x86's `minps`/`maxps` alone are exact: `min(c, x)` is
    /// `c < x ? c : x`, which is `x` when `x` is NaN or equal to `c`; only `c == -0.0` (min) or
    /// `c == +0.0` (max) against a zero of the other sign would differ.
    fn fmin_fmax(&mut self, op: Op, t: VarType, a: V, b: V, regs: [u32; 2]) -> V {
        let is_min = op == Op::Min;
        let usable = |bits: u64| {
            let (nan, sign, zero) = if t == VarType::F32 {
                let f = f32::from_bits(bits as u32);
                (f.is_nan(), f.is_sign_negative(), f == 0.0)
            } else {
                let f = f64::from_bits(bits);
                (f.is_nan(), f.is_sign_negative(), f == 0.0)
            };
            // The native instruction is wrong only for NaN and for this zero.
            let bad_zero = zero && sign == is_min;
            !(nan || bad_zero)
        };
        let lit = |r: u32| self.lit[r as usize].filter(|&c| usable(c));
        let (c, x) = match (lit(regs[0]), lit(regs[1])) {
            (_, Some(_)) => (b, a),
            (Some(_), None) => (a, b),
            (None, None) => {
                return if is_min {
                    self.map2(a, b, |b, x, y| b.ins().fmin(x, y))
                } else {
                    self.map2(a, b, |b, x, y| b.ins().fmax(x, y))
                };
            }
        };
        if !self.target.x86 {
            return if is_min {
                self.map2(x, c, |b, x, y| b.ins().fmin(x, y))
            } else {
                self.map2(x, c, |b, x, y| b.ins().fmax(x, y))
            };
        }
        // The shapes Cranelift's x64 lowering turns into one `minps`/`maxps` (min: `c < x ? c :
        // x`; max: `x < c ? c : x`).
        self.map2(c, x, |b, c, x| {
            let ity = b.func.dfg.value_type(c).as_int();
            let m = if is_min {
                b.ins().fcmp(FloatCC::LessThan, c, x)
            } else {
                b.ins().fcmp(FloatCC::LessThan, x, c)
            };
            debug_assert_eq!(b.func.dfg.value_type(m), ity);
            let fty = b.func.dfg.value_type(c);
            let m = b
                .ins()
                .bitcast(fty, MemFlags::new().with_endianness(Endianness::Little), m);
            b.ins().bitselect(m, c, x)
        })
    }

    /// `-x` (`neg`) or `|x|` of floats of type `t`: with a constant table, one `xor`/`and` with a
    /// mask read from it (Cranelift would build the mask from all-ones in two instructions).
    fn sign_bit_op(&mut self, t: VarType, a: V, neg: bool) -> V {
        if self.pool_base.is_none() || !self.in_loop {
            return if neg {
                self.map1(a, |b, x| b.ins().fneg(x))
            } else {
                self.map1(a, |b, x| b.ins().fabs(x))
            };
        }
        let half = |g: &mut Self, x: Value| {
            let m = if t == VarType::F32 {
                let sign = 1u32 << 31;
                g.vconst(F32X4, &[if neg { sign } else { !sign }; 4])
            } else {
                let sign = 1u64 << 63;
                g.vconst(F64X2, &[if neg { sign } else { !sign }; 2])
            };
            if neg {
                g.b.ins().bxor(x, m)
            } else {
                g.b.ins().band(x, m)
            }
        };
        match a {
            V::One(x) => V::One(half(self, x)),
            V::Two(x, y) => {
                let lo = half(self, x);
                let hi = half(self, y);
                V::Two(lo, hi)
            }
        }
    }

    /// `m ? x : y` per lane for a mask `m` whose lanes are all ones or all zeros (`blendv`: with
    /// x86's `blendv`, for integer vectors).
    fn blend(&mut self, blendv: bool, m: Value, x: Value, y: Value) -> Value {
        if blendv {
            self.b.ins().x86_blendv(m, x, y)
        } else {
            self.b.ins().bitselect(m, x, y)
        }
    }

    /// A 64-bit to 32-bit cast of a right shift of a 64-bit value by a literal of 32 or more (in
    /// register `r`): only the high halves matter, gathered into one vector and shifted by the
    /// rest (the 64-bit shifts themselves are then dead code).
    fn narrowed_shift(&mut self, r: usize) -> Result<Option<V>, String> {
        let cast = self.k.insts[r];
        let shr = self.k.insts[cast.args[0] as usize];
        if !is_wide(shr.ty)
            || is_wide(cast.ty)
            || !shr.ty.is_int()
            || !cast.ty.is_int()
            || shr.op != Op::Shr
            || !self.in_loop
            || self.uniform[cast.args[0] as usize]
        {
            return Ok(None);
        }
        let Some(c) = self.lit[shr.args[1] as usize].map(|c| c & 63) else {
            return Ok(None);
        };
        if c < 32 {
            return Ok(None);
        }
        let V::Two(lo, hi) = self.val(shr.args[0])? else {
            return Err("a 64-bit value in one vector".into());
        };
        let lo = self.bc(I32X4, lo);
        let hi = self.bc(I32X4, hi);
        let high = self.shuffle(lo, hi, lanes32([1, 3, 5, 7]));
        let high = self.bc(I32X4, high);
        Ok(Some(V::One(match c - 32 {
            0 => high,
            s => {
                let s = self.b.ins().iconst(I32, s as i64);
                if shr.ty.is_signed() {
                    self.b.ins().sshr(high, s)
                } else {
                    self.b.ins().ushr(high, s)
                }
            }
        })))
    }

    /// `(x >> r) | (x << ((32 - r) & 31))` (either order, `u32`), as the `Or` of registers `regs`:
    /// a rotation right by `r & 31`, computed from the 64-bit products `x * 2^(32 - (r & 31))`,
    /// whose low halves are the left shift and high halves the right shift. `None` if `regs` are
    /// not that pattern. (The shifts themselves, if nothing else uses them, are dead code.)
    fn rotate(&mut self, t: VarType, regs: [u32; 2]) -> Result<Option<V>, String> {
        if t != VarType::U32 || !self.target.x86 {
            return Ok(None);
        }
        let insts = &self.k.insts;
        let inst = |r: u32| insts[r as usize];
        let is_lit = |r: u32, c: u64| self.lit[r as usize] == Some(c);
        let matches = |shr: u32, shl: u32| {
            let (shr, shl) = (inst(shr), inst(shl));
            if shr.op != Op::Shr || shl.op != Op::Shl || shr.args[0] != shl.args[0] {
                return false;
            }
            let amount = inst(shl.args[1]);
            if amount.op != Op::And || self.uniform[shl.args[1] as usize] {
                return false;
            }
            let [p, q] = [amount.args[0], amount.args[1]];
            let sub = if is_lit(q, 31) {
                p
            } else if is_lit(p, 31) {
                q
            } else {
                return false;
            };
            let sub = inst(sub);
            sub.op == Op::Sub && is_lit(sub.args[0], 32) && sub.args[1] == shr.args[1]
        };
        let shr = if matches(regs[0], regs[1]) {
            regs[0]
        } else if matches(regs[1], regs[0]) {
            regs[1]
        } else {
            return Ok(None);
        };
        let [x, amount] = inst(shr).args[..2] else {
            unreachable!("two operands")
        };
        let (V::One(x), V::One(r)) = (self.val(x)?, self.val(amount)?) else {
            return Err("rotate operands are not 32-bit".into());
        };
        let r = if self.known_below(amount, 32, 0) {
            r
        } else {
            let m = self.splat32(31);
            self.b.ins().band(r, m)
        };
        // x * 2^(32 - r) = (x * 2^(31 - r)) << 1, whose factor fits 32 bits for every r in
        // 0..=31 (`pow2_32`); for r = 0 the product is x << 32, whose halves or-ed are x.
        let bias = self.splat32(127 + 31);
        let biased = self.b.ins().isub(bias, r);
        let p = self.pow2_32(biased);
        let (xl, pl) = (self.b.ins().uwiden_low(x), self.b.ins().uwiden_low(p));
        let lo = self.b.ins().imul(xl, pl);
        let (xh, ph) = (self.b.ins().uwiden_high(x), self.b.ins().uwiden_high(p));
        let hi = self.b.ins().imul(xh, ph);
        let one = self.b.ins().iconst(I32, 1);
        let lo = self.b.ins().ishl(lo, one);
        let hi = self.b.ins().ishl(hi, one);
        let left = self.narrow32(lo, hi);
        let right = self.shuffle(lo, hi, lanes32([1, 3, 5, 7]));
        let right = self.bc(I32X4, right);
        Ok(Some(V::One(self.b.ins().bor(left, right))))
    }

    /// Whether every lane of register `r` (an integer) is known to be below `bound`.
    fn known_below(&self, r: u32, bound: u64, depth: u32) -> bool {
        let inst = self.k.insts[r as usize];
        let t = inst.ty;
        if !t.is_int() || depth > 4 {
            return false;
        }
        let below = |j: usize| self.known_below(inst.args[j], bound, depth + 1);
        match inst.op {
            Op::Literal => inst.imm < bound,
            Op::And => {
                below(0)
                    || below(1)
                    || [0, 1]
                        .iter()
                        .any(|&j| self.lit[inst.args[j] as usize].is_some_and(|c| c < bound))
            }
            Op::Shr if !t.is_signed() => {
                below(0)
                    || self.lit[inst.args[1] as usize].is_some_and(|c| {
                        let s = (c & (t.bits() as u64 - 1)) as u32;
                        let width = t.bits() - s;
                        width < 64 && (1u64 << width) <= bound
                    })
            }
            Op::Cast => {
                let from = self.k.ty(inst.args[0]);
                from.is_int() && !from.is_signed() && bound <= 1 << 31 && below(0)
            }
            _ => false,
        }
    }

    /// `Shl`/`Shr` of `x` by `s` (register `amt`) for integer type `t`: the amount is taken modulo
    /// the width, right shifts are arithmetic for signed types.
    fn shift(&mut self, op: Op, t: VarType, x: V, s: V, amt: u32) -> V {
        let bits = t.bits() as i64;
        let signed = t.is_signed();
        let shift = move |b: &mut FunctionBuilder<'f>, x: Value, s: Value| match op {
            Op::Shl => b.ins().ishl(x, s),
            _ if signed => b.ins().sshr(x, s),
            _ => b.ins().ushr(x, s),
        };
        if let Some(c) = self.lit[amt as usize] {
            // A literal amount: an immediate shift.
            let s = self.b.ins().iconst(I32, (c as i64) & (bits - 1));
            return self.map1(x, |b, x| shift(b, x, s));
        }
        if self.uniform[amt as usize] {
            // Same amount in every lane: one vector shift by a scalar.
            let s = match self.amount[amt as usize] {
                Some(s) => s,
                None => {
                    let s = self.extract(s, 0);
                    self.b.ins().band_imm(s, bits - 1)
                }
            };
            return self.map1(x, |b, x| shift(b, x, s));
        }
        if !self.target.x86 {
            return self.scalar_map(t, &[x, s], |b, xs| {
                let s = b.ins().band_imm(xs[1], bits - 1);
                shift(b, xs[0], s)
            });
        }
        match (x, s) {
            (V::One(x), V::One(s)) => {
                let s = if self.known_below(amt, 32, 0) {
                    s
                } else {
                    let m = self.splat32(31);
                    self.b.ins().band(s, m)
                };
                V::One(match op {
                    Op::Shl => self.shl32(x, s),
                    _ if signed => {
                        // Arithmetic shift of x = logical shift of x ^ sign, then ^ sign again.
                        let sign = self.b.ins().iconst(I32, 31);
                        let sign = self.b.ins().sshr(x, sign);
                        let y = self.b.ins().bxor(x, sign);
                        let y = self.ushr32(y, s);
                        self.b.ins().bxor(y, sign)
                    }
                    _ => self.ushr32(x, s),
                })
            }
            (V::Two(x0, x1), V::Two(s0, s1)) => {
                // Two 64-bit lanes per vector: shift the whole vector by each lane's amount (the
                // scalar amount is taken modulo 64) and keep the matching lane of each.
                let mut half = |x: Value, s: Value| {
                    let a = self.b.ins().extractlane(s, 0);
                    let b = self.b.ins().extractlane(s, 1);
                    let ra = shift(self.b, x, a);
                    let rb = shift(self.b, x, b);
                    self.shuffle(ra, rb, lanes32([0, 1, 6, 7]))
                };
                let lo = half(x0, s0);
                let hi = half(x1, s1);
                V::Two(lo, hi)
            }
            _ => unreachable!("operands of one type have one shape"),
        }
    }

    /// `2^e` per lane for `e` in 0..=31 from `biased` = `e + 127` (an `I32X4`), as an integer
    /// (`2^31` is `0x8000_0000`): the float with that exponent, truncated by `cvttps2dq`, whose
    /// out-of-range answer `0x8000_0000` is exactly `2^31`.
    fn pow2_32(&mut self, biased: Value) -> Value {
        let e = self.b.ins().iconst(I32, 23);
        let f = self.b.ins().ishl(biased, e);
        let f = self.bc(F32X4, f);
        self.b.ins().x86_cvtt2dq(I32X4, f)
    }

    /// `x << s` per lane (`s` in 0..=31): `x * 2^s`, wrapping.
    fn shl32(&mut self, x: Value, s: Value) -> Value {
        let bias = self.splat32(127);
        let biased = self.b.ins().iadd(s, bias);
        let p = self.pow2_32(biased);
        self.b.ins().imul(x, p)
    }

    /// Logical `x >> s` per lane (`s` in 0..=31): bits 31..63 of the 64-bit product
    /// `x * 2^(31 - s)` (`pmuludq` on each pair of lanes).
    fn ushr32(&mut self, x: Value, s: Value) -> Value {
        let bias = self.splat32(127 + 31);
        let biased = self.b.ins().isub(bias, s);
        let p = self.pow2_32(biased);
        let (xl, pl) = (self.b.ins().uwiden_low(x), self.b.ins().uwiden_low(p));
        let lo = self.b.ins().imul(xl, pl);
        let (xh, ph) = (self.b.ins().uwiden_high(x), self.b.ins().uwiden_high(p));
        let hi = self.b.ins().imul(xh, ph);
        let k = self.b.ins().iconst(I32, 31);
        let lo = self.b.ins().ushr(lo, k);
        let hi = self.b.ins().ushr(hi, k);
        self.narrow32(lo, hi)
    }

    /// A comparison of two values of type `t`, as a mask.
    fn compare(&mut self, op: Op, t: VarType, a: V, b: V) -> V {
        if t == VarType::Bool {
            // Masks compare as 0 < 1.
            return match op {
                Op::Eq => self.map2(a, b, |b, x, y| b.ins().bxor_not(x, y)),
                Op::Ne => self.map2(a, b, |b, x, y| b.ins().bxor(x, y)),
                Op::Lt => self.map2(a, b, |b, x, y| b.ins().band_not(y, x)),
                Op::Le => self.map2(a, b, |b, x, y| b.ins().bor_not(y, x)),
                Op::Gt => self.map2(a, b, |b, x, y| b.ins().band_not(x, y)),
                _ => self.map2(a, b, |b, x, y| b.ins().bor_not(x, y)),
            };
        }
        let r = if t.is_float() {
            let cc = match op {
                Op::Eq => FloatCC::Equal,
                Op::Ne => FloatCC::NotEqual,
                Op::Lt => FloatCC::LessThan,
                Op::Le => FloatCC::LessThanOrEqual,
                Op::Gt => FloatCC::GreaterThan,
                _ => FloatCC::GreaterThanOrEqual,
            };
            self.map2(a, b, |b, x, y| b.ins().fcmp(cc, x, y))
        } else {
            let s = t.is_signed();
            let cc = match op {
                Op::Eq => IntCC::Equal,
                Op::Ne => IntCC::NotEqual,
                Op::Lt if s => IntCC::SignedLessThan,
                Op::Lt => IntCC::UnsignedLessThan,
                Op::Le if s => IntCC::SignedLessThanOrEqual,
                Op::Le => IntCC::UnsignedLessThanOrEqual,
                Op::Gt if s => IntCC::SignedGreaterThan,
                Op::Gt => IntCC::UnsignedGreaterThan,
                Op::Ge if s => IntCC::SignedGreaterThanOrEqual,
                _ => IntCC::UnsignedGreaterThanOrEqual,
            };
            self.map2(a, b, |b, x, y| b.ins().icmp(cc, x, y))
        };
        self.mask_of(r)
    }

    /// A lane-wise comparison result (one `I32X4` or two `I64X2`) as one `I32X4` mask.
    fn mask_of(&mut self, r: V) -> V {
        match r {
            V::One(m) => V::One(self.bc(I32X4, m)),
            V::Two(lo, hi) => V::One(self.narrow32(lo, hi)),
        }
    }

    /// `x != 0` per lane, as a mask (floats: `-0.0` is zero, NaN is not).
    fn nonzero(&mut self, t: VarType, a: V) -> V {
        let r = if t.is_float() {
            let zero = self.vconst(ivty(t), &[0u32; 4]);
            let zero = self.bc(vty(t), zero);
            self.map1(a, |b, x| b.ins().fcmp(FloatCC::NotEqual, x, zero))
        } else {
            let zero = self.vconst(ivty(t), &[0u32; 4]);
            self.map1(a, |b, x| b.ins().icmp(IntCC::NotEqual, x, zero))
        };
        self.mask_of(r)
    }

    fn cast(&mut self, from: VarType, to: VarType, a: V) -> V {
        use VarType::*;
        match (from, to) {
            (F32, F32) | (F64, F64) => a,
            (_, Bool) => self.nonzero(from, a),
            (Bool, _) => {
                let V::One(m) = a else {
                    unreachable!("masks are one vector")
                };
                // 0/-1 lanes, and-ed with the bits of 1 in the target type.
                if is_wide(to) {
                    let one = if to == F64 { 1f64.to_bits() } else { 1 };
                    let one = self.splat64(one);
                    let (lo, hi) = self.widen_mask(m);
                    let lo = self.b.ins().band(lo, one);
                    let hi = self.b.ins().band(hi, one);
                    self.bc_v(vty(to), V::Two(lo, hi))
                } else {
                    let one = if to == F32 { 1f32.to_bits() } else { 1 };
                    let one = self.splat32(one);
                    let r = self.b.ins().band(m, one);
                    self.bc_v(vty(to), V::One(r))
                }
            }
            (I32 | U32, I32 | U32) | (I64 | U64, I64 | U64) => a,
            (I32 | U32, I64 | U64) => {
                let V::One(x) = a else { unreachable!() };
                if from == I32 {
                    V::Two(self.b.ins().swiden_low(x), self.b.ins().swiden_high(x))
                } else {
                    V::Two(self.b.ins().uwiden_low(x), self.b.ins().uwiden_high(x))
                }
            }
            (I64 | U64, I32 | U32) => {
                let V::Two(lo, hi) = a else { unreachable!() };
                V::One(self.narrow32(lo, hi))
            }
            (I32, F32) => self.map1(a, |b, x| b.ins().fcvt_from_sint(F32X4, x)),
            (U32, F32) => self.map1(a, |b, x| b.ins().fcvt_from_uint(F32X4, x)),
            (I32 | U32, F64) => {
                // Exact: convert the low two lanes, then the high two moved down.
                let V::One(x) = a else { unreachable!() };
                let high = self.high_to_low(x);
                let cvt = |b: &mut FunctionBuilder<'f>, v: Value| {
                    if from == I32 {
                        let w = b.ins().swiden_low(v);
                        b.ins().fcvt_from_sint(F64X2, w)
                    } else {
                        let w = b.ins().uwiden_low(v);
                        b.ins().fcvt_from_uint(F64X2, w)
                    }
                };
                let lo = cvt(self.b, x);
                let hi = cvt(self.b, high);
                V::Two(lo, hi)
            }
            (I64, F64) => self.map1(a, |b, x| b.ins().fcvt_from_sint(F64X2, x)),
            (U64, F64) => self.map1(a, |b, x| b.ins().fcvt_from_uint(F64X2, x)),
            (I64, F32) => {
                self.scalar_map(F32, &[a], |b, xs| b.ins().fcvt_from_sint(ct::F32, xs[0]))
            }
            (U64, F32) => {
                self.scalar_map(F32, &[a], |b, xs| b.ins().fcvt_from_uint(ct::F32, xs[0]))
            }
            (F32, I32) => self.map1(a, |b, x| b.ins().fcvt_to_sint_sat(I32X4, x)),
            (F32, U32) => self.map1(a, |b, x| b.ins().fcvt_to_uint_sat(I32X4, x)),
            (F32 | F64, I64) => {
                self.scalar_map(I64, &[a], |b, xs| b.ins().fcvt_to_sint_sat(ct::I64, xs[0]))
            }
            (F32 | F64, U64) => {
                self.scalar_map(U64, &[a], |b, xs| b.ins().fcvt_to_uint_sat(ct::I64, xs[0]))
            }
            (F64, I32 | U32) => {
                let V::Two(lo, hi) = a else { unreachable!() };
                let signed = to == I32;
                // The saturating f64x2 -> i32x4 conversions Cranelift lowers natively (results in
                // the low two lanes, zeros above).
                let cvt = |g: &mut Self, x: Value| {
                    let zero = g.vconst(I64X2, &[0u64; 2]);
                    if signed {
                        let c = g.b.ins().fcvt_to_sint_sat(I64X2, x);
                        g.b.ins().snarrow(c, zero)
                    } else {
                        let c = g.b.ins().fcvt_to_uint_sat(I64X2, x);
                        g.b.ins().uunarrow(c, zero)
                    }
                };
                let lo = cvt(self, lo);
                let hi = cvt(self, hi);
                V::One(self.concat_low(lo, hi))
            }
            (F32, F64) => {
                let V::One(x) = a else { unreachable!() };
                let high = self.high_to_low(x);
                V::Two(
                    self.b.ins().fvpromote_low(x),
                    self.b.ins().fvpromote_low(high),
                )
            }
            (F64, F32) => {
                let V::Two(lo, hi) = a else { unreachable!() };
                let lo = self.b.ins().fvdemote(lo);
                let hi = self.b.ins().fvdemote(hi);
                V::One(self.concat_low(lo, hi))
            }
        }
    }

    /// Lane `l` of an index register as an i64 (sign-extended for signed types).
    fn index_lane(&mut self, idx: V, ity: VarType, l: usize) -> Value {
        let x = self.extract(idx, l);
        match ity {
            VarType::I32 => self.b.ins().sextend(I64, x),
            VarType::U32 => self.b.ins().uextend(I64, x),
            _ => x,
        }
    }

    /// The mask of active lanes (below `end`) and-ed with `mask`.
    fn active_mask(&mut self, mask: V) -> Result<Value, String> {
        let V::One(m) = mask else {
            return Err("mask is not a mask".into());
        };
        let active = self.active.ok_or("active mask missing")?;
        Ok(self.b.ins().band(m, active))
    }

    fn gather(&mut self, p: usize, t: VarType, idx: V, ity: VarType, mask: V) -> Result<V, String> {
        let m = self.active_mask(mask)?;
        let len = self.lens[p].ok_or_else(|| format!("parameter p{p} is not indexed"))?;
        let oob_var = self.oob.ok_or("oob counter missing")?;
        let mem = self.mem;
        let elt = match t {
            VarType::Bool => I32,
            _ => lane_ty(t).as_int(),
        };
        let mut lanes = Vec::with_capacity(4);
        let mut bad_total: Option<Value> = None;
        for l in 0..W as usize {
            let ml = self.b.ins().extractlane(m, l as u8);
            let on = self.b.ins().icmp_imm(IntCC::NotEqual, ml, 0);
            let ix = self.index_lane(idx, ity, l);
            // Unsigned compare: negative indices (and u64 ones past i64::MAX) are huge, hence out.
            let inside = self.b.ins().icmp(IntCC::UnsignedLessThan, ix, len);
            let ok = self.b.ins().band(on, inside);
            let outside = self
                .b
                .ins()
                .icmp(IntCC::UnsignedGreaterThanOrEqual, ix, len);
            let bad = self.b.ins().band(on, outside);
            let bad = self.b.ins().uextend(I64, bad);
            bad_total = Some(match bad_total {
                None => bad,
                Some(s) => self.b.ins().iadd(s, bad),
            });
            // Branchless: read element 0 (always mapped: slack) when the lane must not read.
            let zero64 = self.b.ins().iconst(I64, 0);
            let safe = self.b.ins().select(ok, ix, zero64);
            let addr = self.elem_addr(p, t, safe)?;
            let x = if t == VarType::Bool {
                let x = self.b.ins().uload8(I32, mem, addr, 0);
                self.b.ins().band_imm(x, 1)
            } else {
                self.b.ins().load(elt, mem, addr, 0)
            };
            let zero = self.b.ins().iconst(elt, 0);
            let x = self.b.ins().select(ok, x, zero);
            let x = if t == VarType::Bool {
                self.b.ins().ineg(x)
            } else {
                x
            };
            lanes.push(x);
        }
        let count = self.b.use_var(oob_var);
        let count = self.b.ins().iadd(count, bad_total.expect("four lanes"));
        self.b.def_var(oob_var, count);
        let v = self.build(t, &lanes);
        Ok(self.bc_v(vty(t), v))
    }

    #[allow(clippy::too_many_arguments)]
    fn scatter(
        &mut self,
        p: usize,
        t: VarType,
        op_ty: u32,
        val: V,
        idx: V,
        ity: VarType,
        mask: V,
    ) -> Result<(), String> {
        let m = self.active_mask(mask)?;
        let len = self.lens[p].ok_or_else(|| format!("parameter p{p} is not indexed"))?;
        let base = self.bases[p].ok_or_else(|| format!("parameter p{p} not loaded"))?;
        let func = self.scatter.ok_or("scatter helper not declared")?;
        let bits = self.bc_v(ivty(t), val);
        for l in 0..W as usize {
            let ml = self.b.ins().extractlane(m, l as u8);
            let call = self.b.create_block();
            let next = self.b.create_block();
            self.b.ins().brif(ml, call, &[], next, &[]);
            self.b.switch_to_block(call);
            self.b.seal_block(call);
            let mut ix = self.index_lane(idx, ity, l);
            if ity == VarType::U64 {
                let max = self.b.ins().iconst(I64, i64::MAX);
                ix = self.b.ins().umin(ix, max);
            }
            let x = self.extract(bits, l);
            let x = match t {
                VarType::Bool => {
                    let x = self.b.ins().band_imm(x, 1);
                    self.b.ins().uextend(I64, x)
                }
                _ if is_wide(t) => x,
                _ => self.b.ins().uextend(I64, x),
            };
            let op_ty = self.b.ins().iconst(I32, op_ty as i64);
            let status = self.status;
            self.b.ins().call(func, &[op_ty, base, len, ix, x, status]);
            self.b.ins().jump(next, &[]);
            self.b.switch_to_block(next);
            self.b.seal_block(next);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernel::{Inst, Param};

    #[test]
    fn compiles_and_reports_invalid_kernels() {
        let be = CraneliftBackend::new().unwrap();
        let k = Kernel {
            params: vec![Param {
                ty: VarType::F32,
                kind: ParamKind::Output,
            }],
            insts: vec![
                Inst::new(Op::Literal, VarType::F32, &[], 1.5f32.to_bits() as u64),
                Inst::new(Op::Store, VarType::F32, &[0], 0),
            ],
        };
        assert!(be.compile(&k).is_ok());
        let bad = Kernel {
            params: vec![],
            insts: vec![Inst::new(Op::Store, VarType::F32, &[0], 0)],
        };
        match be.compile(&bad) {
            Err(Error::Compile { backend, hash, .. }) => {
                assert_eq!(backend, "cranelift");
                assert_eq!(hash, bad.hash().to_string());
            }
            other => panic!("expected a compile error, got {:?}", other.err()),
        }
    }
}
