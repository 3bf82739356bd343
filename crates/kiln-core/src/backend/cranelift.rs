//! Cranelift backend: compiles kernel IR to native SIMD code with the Cranelift JIT.
//!
//! This module owns the translation of a [`Kernel`] into one machine-code function
//! `extern "C" fn(args: *const LaunchArgs, start: u64, end: u64)` that runs lanes `[start, end)` four
//! at a time in 128-bit vectors (32-bit types as one `I32X4`/`F32X4`, 64-bit types as two
//! `I64X2`/`F64X2`, masks as `I32X4` all-ones/zero lanes), and the JIT memory that holds it: one
//! `JITModule` per kernel, freed when the last `Arc` to the compiled kernel is dropped. The results
//! are bit-for-bit those of the scalar semantics in `op` (as run by the interpreter), NaN payloads
//! aside. Ops that Cranelift cannot lower as vectors (integer division, per-lane variable shifts,
//! some 64-bit conversions) fall back to per-lane scalar code; gathers are per-lane loads with a
//! branchless bounds check, and scatters call the shared [`scatter_lane_extern`] helper.
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
use cranelift_codegen::ir::condcodes::{FloatCC, IntCC};
use cranelift_codegen::ir::types::{self as ct, F32X4, F64X2, I32, I32X4, I64, I64X2, I8X16};
use cranelift_codegen::ir::{
    AbiParam, AtomicRmwOp, ConstantData, Endianness, FuncRef, InstBuilder, MemFlags, Type, Value,
};
use cranelift_codegen::isa::OwnedTargetIsa;
use cranelift_codegen::settings::{self, Configurable};
use cranelift_frontend::{FunctionBuilder, FunctionBuilderContext, Variable};
use cranelift_jit::{JITBuilder, JITModule};
use cranelift_module::{default_libcall_names, Linkage, Module};
use parking_lot::Mutex;
use std::sync::Arc;

/// Lanes per loop iteration (one 128-bit vector of 32-bit lanes).
const W: i64 = 4;
/// Symbol under which compiled code finds `scatter_lane_extern`.
const SCATTER_SYMBOL: &str = "kiln_scatter_lane";

/// The Cranelift JIT backend. Holds the host ISA; each kernel gets its own JIT module.
pub struct CraneliftBackend {
    isa: OwnedTargetIsa,
}

impl CraneliftBackend {
    /// A backend for the host CPU (its SIMD features detected), optimizing for speed.
    pub fn new() -> Result<Self> {
        Self::with_settings(&[])
    }

    /// Like [`CraneliftBackend::new`], with Cranelift settings overridden after host detection:
    /// shared ones (e.g. `("enable_verifier", "true")`) or ISA ones (e.g. `("has_avx", "false")`,
    /// `("has_fma", "false")` to exercise the SSE-only code paths in tests).
    #[doc(hidden)]
    pub fn with_settings(overrides: &[(&str, &str)]) -> Result<Self> {
        let unavailable = |reason: String| Error::BackendUnavailable {
            name: "cranelift".into(),
            reason,
        };
        let mut flags = settings::builder();
        for (k, v) in [
            ("opt_level", "speed"),
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
        for &(k, v) in overrides {
            if flags.set(k, v).is_err() {
                isa.set(k, v)
                    .map_err(|e| unavailable(format!("setting {k}={v}: {e}")))?;
            }
        }
        let isa = isa
            .finish(settings::Flags::new(flags))
            .map_err(|e| unavailable(format!("building the ISA: {e}")))?;
        Ok(CraneliftBackend { isa })
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
        {
            let mut b = FunctionBuilder::new(&mut ctx.func, &mut fctx);
            let scatter = scatter_id.map(|id| module.declare_func_in_func(id, b.func));
            build_function(&mut b, kernel, scatter)?;
            b.finalize();
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

struct Gen<'a, 'f> {
    b: &'a mut FunctionBuilder<'f>,
    k: &'a Kernel,
    mem: MemFlags,
    vals: Vec<Option<V>>,
    uniform: Vec<bool>,
    bases: Vec<Option<Value>>,
    lens: Vec<Option<Value>>,
    status: Value,
    lane: Value,
    active: Option<Value>,
    oob: Option<Variable>,
    scatter: Option<FuncRef>,
}

fn build_function(
    b: &mut FunctionBuilder<'_>,
    k: &Kernel,
    scatter: Option<FuncRef>,
) -> Result<(), String> {
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

    let mut g = Gen {
        b,
        k,
        mem: MemFlags::new().with_notrap(),
        vals: vec![None; k.insts.len()],
        uniform: vec![false; k.insts.len()],
        bases,
        lens,
        status,
        lane: start,
        active: None,
        oob,
        scatter,
    };

    // Loop-invariant values: literals and broadcast loads, computed once in the entry block.
    for (r, inst) in k.insts.iter().enumerate() {
        let hoisted = match inst.op {
            Op::Literal => Some(g.literal(inst.ty, inst.imm)),
            Op::Load if k.params[inst.imm as usize].kind == ParamKind::Broadcast => {
                Some(g.load_broadcast(inst.imm as usize, inst.ty)?)
            }
            _ => None,
        };
        if let Some(v) = hoisted {
            g.vals[r] = Some(v);
            g.uniform[r] = true;
        } else if inst.op.is_pure() && inst.op != Op::Counter && inst.has_value() {
            g.uniform[r] = inst.operands().iter().all(|&a| g.uniform[a as usize]);
        }
    }

    let header = g.b.create_block();
    let body = g.b.create_block();
    let exit = g.b.create_block();
    g.b.ins().jump(header, &[]);

    g.b.switch_to_block(header);
    let i = g.b.use_var(lane_var);
    let more = g.b.ins().icmp(IntCC::UnsignedLessThan, i, end);
    g.b.ins().brif(more, body, &[], exit, &[]);

    g.b.switch_to_block(body);
    g.b.seal_block(body);
    g.lane = i;
    if has_random_access {
        // Lanes of this iteration below `end`: (end - i) min 4 > [0, 1, 2, 3].
        let rem = g.b.ins().isub(end, i);
        let four = g.b.ins().iconst(I64, W);
        let rem = g.b.ins().umin(rem, four);
        let rem = g.b.ins().ireduce(I32, rem);
        let rem = g.b.ins().splat(I32X4, rem);
        let iota = g.vconst(I32X4, &[0u32, 1, 2, 3]);
        g.active = Some(g.b.ins().icmp(IntCC::SignedGreaterThan, rem, iota));
    }
    for r in 0..k.insts.len() {
        if g.vals[r].is_none() {
            let v = g.lower(r)?;
            g.vals[r] = v;
        }
    }
    let next = g.b.ins().iadd_imm(i, W);
    g.b.def_var(lane_var, next);
    g.b.ins().jump(header, &[]);
    g.b.seal_block(header);

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
    Ok(())
}

impl<'f> Gen<'_, 'f> {
    fn val(&self, r: u32) -> Result<V, String> {
        self.vals
            .get(r as usize)
            .copied()
            .flatten()
            .ok_or_else(|| format!("register r{r} has no value"))
    }

    /// Reinterpret a vector as another vector type of the same width (no-op if already `to`).
    fn bc(&mut self, to: Type, v: Value) -> Value {
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
            VarType::F32 => {
                let x = self.splat32(imm as u32);
                V::One(self.bc(F32X4, x))
            }
            VarType::I64 | VarType::U64 => {
                let x = self.splat64(imm);
                V::Two(x, x)
            }
            VarType::F64 => {
                let x = self.splat64(imm);
                let x = self.bc(F64X2, x);
                V::Two(x, x)
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

    fn lower(&mut self, r: usize) -> Result<Option<V>, String> {
        let inst = self.k.insts[r];
        let t = inst.ty;
        let p = inst.imm as usize;
        let k = self.k;
        let arg = |g: &Self, j: usize| g.val(inst.args[j]);
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
                    VarType::F32 | VarType::F64 => self.map1(a, |b, x| b.ins().fneg(x)),
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
                    VarType::F32 | VarType::F64 => self.map1(a, |b, x| b.ins().fabs(x)),
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
            Op::Cast => {
                let a = arg(self, 0)?;
                self.cast(from(0), t, a)
            }
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
                let (a, b) = (arg(self, 0)?, arg(self, 1)?);
                let amount_uniform = self.uniform[inst.args[1] as usize];
                self.binary(inst.op, t, a, b, amount_uniform)?
            }
            Op::Eq | Op::Ne | Op::Lt | Op::Le | Op::Gt | Op::Ge => {
                let (a, b) = (arg(self, 0)?, arg(self, 1)?);
                self.compare(inst.op, from(0), a, b)
            }
            Op::Fma => {
                let (a, b, c) = (arg(self, 0)?, arg(self, 1)?, arg(self, 2)?);
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
                match (x, y) {
                    (V::One(x), V::One(y)) => {
                        let m = self.bc(vty(t), m);
                        V::One(self.b.ins().bitselect(m, x, y))
                    }
                    (V::Two(x0, x1), V::Two(y0, y1)) => {
                        let (m0, m1) = self.widen_mask(m);
                        let m0 = self.bc(vty(t), m0);
                        let m1 = self.bc(vty(t), m1);
                        let lo = self.b.ins().bitselect(m0, x0, y0);
                        let hi = self.b.ins().bitselect(m1, x1, y1);
                        V::Two(lo, hi)
                    }
                    _ => return Err("select operands differ in shape".into()),
                }
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

    fn binary(
        &mut self,
        op: Op,
        t: VarType,
        a: V,
        b: V,
        amount_uniform: bool,
    ) -> Result<V, String> {
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
                Op::Min => self.map2(a, b, |b, x, y| b.ins().fmin(x, y)),
                Op::Max => self.map2(a, b, |b, x, y| b.ins().fmax(x, y)),
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
            Op::Or => self.map2(a, b, |b, x, y| b.ins().bor(x, y)),
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
            Op::Shl | Op::Shr => {
                let shift = move |b: &mut FunctionBuilder<'f>, x: Value, s: Value| match op {
                    Op::Shl => b.ins().ishl(x, s),
                    _ if signed => b.ins().sshr(x, s),
                    _ => b.ins().ushr(x, s),
                };
                if amount_uniform {
                    // Same amount in every lane: one vector shift by a scalar.
                    let s = self.extract(b, 0);
                    let s = self.b.ins().band_imm(s, bits - 1);
                    self.map1(a, |b, x| shift(b, x, s))
                } else {
                    self.scalar_map(t, &[a, b], |b, xs| {
                        let s = b.ins().band_imm(xs[1], bits - 1);
                        shift(b, xs[0], s)
                    })
                }
            }
            _ => return Err(format!("{op} on {t}")),
        })
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
