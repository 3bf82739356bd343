//! The Cranelift JIT backend proper: [`CraneliftBackend`] (host ISA detection, settings and
//! kiln's tuning overrides), compiling a kernel into its own `JITModule`, and the compiled kernel
//! ([`CompiledKernel`] impl) that frees its code memory when the last `Arc` to it is dropped. Also
//! the libcall shims (fma, rounding) that the compiled code may call.

use super::function::build_function;
use super::opt::remove_dead_code;
use super::{Target, Tuning, SCATTER_SYMBOL};
use crate::backend::{scatter_lane_extern, Backend, BackendKind, CompiledKernel, LaunchArgs};
use crate::error::{Error, Result};
use crate::kernel::Kernel;
use crate::op::{Op, ReduceOp};
use cranelift_codegen::ir::types::{I32, I64};
use cranelift_codegen::ir::AbiParam;
use cranelift_codegen::isa::OwnedTargetIsa;
use cranelift_codegen::settings::{self, Configurable};
use cranelift_frontend::{FunctionBuilder, FunctionBuilderContext};
use cranelift_jit::{JITBuilder, JITModule};
use cranelift_module::{default_libcall_names, DataDescription, Linkage, Module};
use parking_lot::Mutex;
use std::sync::Arc;

/// The Cranelift JIT backend. Holds the host ISA; each kernel gets its own JIT module.
pub struct CraneliftBackend {
    isa: OwnedTargetIsa,
    tuning: Tuning,
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
            sse_only: self.isa.name() == "x64" && !flag("has_avx"),
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
        // Plain scatters store inline (see `Gen::scatter`); only reducing ones call the helper.
        let calls_helper = kernel
            .insts
            .iter()
            .any(|i| matches!(i.op, Op::Scatter(r) if r != ReduceOp::None));
        let scatter_id = if calls_helper {
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

#[cfg(test)]
mod tests {
    use super::CraneliftBackend;
    use crate::backend::Backend;
    use crate::error::Error;
    use crate::kernel::{Inst, Kernel, Param, ParamKind};
    use crate::op::Op;
    use crate::ty::VarType;
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
