//! LLVM backend: kernel IR → LLVM IR text → optimised (O2) object code → linked by ORC's LLJIT,
//! all through a libLLVM found and loaded at run time (`api`).
//!
//! The object code is what the disk cache keeps (`crate::diskcache`), keyed by kernel hash, CPU and
//! library, so a second run of a program links cached objects instead of compiling. A kernel that
//! this libLLVM rejects is compiled by Cranelift instead, with a warning naming the library and
//! LLVM's message: one bad kernel never stops a program. One process-wide instance (`shared`)
//! owns the JIT; kernels are never unloaded (the kernel cache never evicts either).

pub mod api;
pub mod ir;

use crate::backend::cranelift::CraneliftBackend;
use crate::backend::{Backend, BackendKind, CompiledKernel, LaunchArgs};
use crate::diskcache;
use crate::error::{Error, Result};
use crate::kernel::{Kernel, KernelHash};
use api::{Library, Ptr, SymbolPair};
use parking_lot::Mutex;
use std::collections::{HashMap, HashSet};
use std::ffi::{c_char, CString};
use std::sync::{Arc, OnceLock};

/// LLVM's `LLVMCodeGenOptLevel::Aggressive`, `LLVMRelocMode::PIC`, `LLVMCodeModel::Small`,
/// `LLVMCodeGenFileType::Object`, `LLVMVerifierFailureAction::ReturnStatus`.
const OPT_AGGRESSIVE: i32 = 3;
const RELOC_PIC: i32 = 2;
const CODE_MODEL_SMALL: i32 = 3;
const FILE_OBJECT: i32 = 1;
const VERIFY_RETURN_STATUS: i32 = 2;

/// The process's LLVM backend, created on first use; the error says why there is none.
pub fn shared() -> std::result::Result<Arc<LlvmBackend>, String> {
    static SHARED: OnceLock<std::result::Result<Arc<LlvmBackend>, String>> = OnceLock::new();
    SHARED
        .get_or_init(|| LlvmBackend::create(true).map(Arc::new))
        .clone()
}

/// Lanes per vector iteration for this CPU: 16 with AVX-512, 8 with AVX2, 4 otherwise
/// (`KILN_LLVM_WIDTH` overrides it with 4, 8, 16 or 32).
pub fn vector_width() -> usize {
    if let Some(w) = crate::config::env("KILN_LLVM_WIDTH")
        .and_then(|v| v.parse::<usize>().ok())
        .filter(|w| [4, 8, 16, 32].contains(w))
    {
        return w;
    }
    #[cfg(target_arch = "x86_64")]
    {
        if std::is_x86_feature_detected!("avx512f") {
            return 16;
        }
        if std::is_x86_feature_detected!("avx2") {
            return 8;
        }
    }
    4
}

/// The JIT and code generator state; used under one lock (LLVM compiles are rare and serialised).
struct Jit {
    lljit: Ptr,
    dylib: Ptr,
    machine: Ptr,
    triple: CString,
    /// Symbol names already defined in the JIT (a retry after a bad cached object needs another).
    names: HashSet<String>,
}

// SAFETY: the raw LLVM handles are only used while holding the backend's mutex; LLJIT and the
// target machine may be used from any thread as long as calls are not concurrent.
unsafe impl Send for Jit {}

/// The LLVM backend.
pub struct LlvmBackend {
    lib: &'static Library,
    jit: Mutex<Jit>,
    width: usize,
    /// What a cached object depends on besides the kernel: target, CPU, features, library, width.
    target: String,
    compiled: Mutex<HashMap<KernelHash, Arc<LlvmKernel>>>,
    disk_cache: bool,
    /// Report compile errors instead of falling back to Cranelift (tests).
    strict: bool,
    /// Widen small kernels (`ir::width_for`) rather than always using `width` lanes.
    widen: bool,
    /// Kernels compiled by Cranelift because this library rejected them.
    fallbacks: std::sync::atomic::AtomicU64,
    /// Tests: append garbage to every generated module, so that LLVM rejects it.
    #[cfg(test)]
    break_ir: bool,
    fallback: OnceLock<std::result::Result<Arc<CraneliftBackend>, String>>,
}

impl LlvmBackend {
    /// A backend of its own (its own JIT), keeping objects in the disk cache or not. Programs use
    /// `shared()`; tests that compile thousands of random kernels make one without the disk cache.
    pub fn create(disk_cache: bool) -> std::result::Result<LlvmBackend, String> {
        let fixed = crate::config::env("KILN_LLVM_WIDTH").is_some();
        let mut be = LlvmBackend::create_with(disk_cache, vector_width())?;
        be.widen = !fixed;
        Ok(be)
    }

    /// As `create`, with `width` lanes per vector iteration (any power of two from 2 to 64; tests
    /// run every width on any CPU, LLVM splitting or merging registers as needed).
    pub fn create_with(disk_cache: bool, width: usize) -> std::result::Result<LlvmBackend, String> {
        LlvmBackend::create_for(disk_cache, width, None)
    }

    /// A backend that generates code for another x86-64 CPU (`cpu` as LLVM names it, e.g.
    /// `"skylake-avx512"`, `"haswell"`, `"x86-64"`; `features` e.g. `"+avx512f,+avx512vl"` or
    /// `""`), at `width` lanes. Its code may not run on this machine: use
    /// [`LlvmBackend::object_code`] to check that LLVM accepts and compiles a kernel for it (tests
    /// cover an AVX-512 host's code on an AVX2 host this way, and the other way round).
    pub fn create_for_cpu(
        width: usize,
        cpu: &str,
        features: &str,
    ) -> std::result::Result<LlvmBackend, String> {
        LlvmBackend::create_for(false, width, Some((cpu, features)))
    }

    fn create_for(
        disk_cache: bool,
        width: usize,
        target_cpu: Option<(&str, &str)>,
    ) -> std::result::Result<LlvmBackend, String> {
        if !(2..=64).contains(&width) || !width.is_power_of_two() {
            return Err(format!(
                "{width} lanes per vector is not a power of two from 2 to 64"
            ));
        }
        if !cfg!(target_arch = "x86_64") {
            return Err("kiln's LLVM backend supports x86-64 only for now".into());
        }
        let lib = Library::find().map_err(|e| e.to_string())?;
        let a = &lib.api;
        let fail =
            |what: &str, msg: String| format!("{}: {what} failed: {msg}", lib.path.display());
        // SAFETY: every call below follows the llvm-c contract: targets are initialised before a
        // target machine or JIT is created, out-pointers are valid, and every message or handle
        // LLVM returns is either kept (owned by `Jit`) or disposed with its matching function.
        unsafe {
            (a.LLVMInitializeX86TargetInfo)();
            (a.LLVMInitializeX86Target)();
            (a.LLVMInitializeX86TargetMC)();
            (a.LLVMInitializeX86AsmPrinter)();
            let triple_raw = (a.LLVMGetDefaultTargetTriple)();
            let triple = lib.take_message(triple_raw);
            let (cpu, features) = match target_cpu {
                Some((cpu, features)) => (cpu.to_string(), features.to_string()),
                None => (
                    lib.take_message((a.LLVMGetHostCPUName)()),
                    lib.take_message((a.LLVMGetHostCPUFeatures)()),
                ),
            };
            let triple_c = CString::new(triple.clone()).map_err(|e| e.to_string())?;
            let cpu_c = CString::new(cpu.clone()).map_err(|e| e.to_string())?;
            let feat_c = CString::new(features.clone()).map_err(|e| e.to_string())?;
            let mut target: Ptr = std::ptr::null_mut();
            let mut msg: *mut c_char = std::ptr::null_mut();
            if (a.LLVMGetTargetFromTriple)(triple_c.as_ptr(), &mut target, &mut msg) != 0 {
                return Err(fail("LLVMGetTargetFromTriple", lib.take_message(msg)));
            }
            let machine = (a.LLVMCreateTargetMachine)(
                target,
                triple_c.as_ptr(),
                cpu_c.as_ptr(),
                feat_c.as_ptr(),
                OPT_AGGRESSIVE,
                RELOC_PIC,
                CODE_MODEL_SMALL,
            );
            if machine.is_null() {
                return Err(fail("LLVMCreateTargetMachine", triple));
            }
            let mut lljit: Ptr = std::ptr::null_mut();
            lib.check((a.LLVMOrcCreateLLJIT)(
                &mut lljit,
                (a.LLVMOrcCreateLLJITBuilder)(),
            ))
            .map_err(|m| fail("LLVMOrcCreateLLJIT", m))?;
            let dylib = (a.LLVMOrcLLJITGetMainJITDylib)(lljit);
            // what generated code calls: the scatter helper, and the C library's memcpy/memset
            // (LLVM lowers the last partial vector's copies to them)
            let symbols: [(&str, u64); 3] = [
                (
                    ir::SCATTER_SYMBOL,
                    crate::backend::scatter_lane_extern as *const () as usize as u64,
                ),
                ("memcpy", libc::memcpy as *const () as usize as u64),
                ("memset", libc::memset as *const () as usize as u64),
            ];
            let mut pairs: Vec<SymbolPair> = symbols
                .iter()
                .map(|&(name, address)| {
                    let c = CString::new(name).expect("no NUL");
                    SymbolPair {
                        name: (a.LLVMOrcLLJITMangleAndIntern)(lljit, c.as_ptr()),
                        address,
                        generic_flags: api::FLAGS_EXPORTED_CALLABLE,
                        target_flags: 0,
                    }
                })
                .collect();
            let unit = (a.LLVMOrcAbsoluteSymbols)(pairs.as_mut_ptr(), pairs.len());
            lib.check((a.LLVMOrcJITDylibDefine)(dylib, unit))
                .map_err(|m| fail("LLVMOrcJITDylibDefine", m))?;
            let target = format!("{triple} {cpu} {features} {} w{width}", lib.path.display());
            tracing::info!(target: "kiln::llvm", "using {} (LLVM {}) for {triple} {cpu}, {width} lanes per vector", lib.path.display(), lib.version);
            Ok(LlvmBackend {
                lib,
                jit: Mutex::new(Jit {
                    lljit,
                    dylib,
                    machine,
                    triple: triple_c,
                    names: HashSet::new(),
                }),
                width,
                target,
                compiled: Mutex::new(HashMap::new()),
                fallback: OnceLock::new(),
                disk_cache,
                strict: false,
                widen: false,
                fallbacks: std::sync::atomic::AtomicU64::new(0),
                #[cfg(test)]
                break_ir: false,
            })
        }
    }

    /// Make compile errors errors instead of falling back to Cranelift (tests use this, so that a
    /// kernel LLVM rejects fails the test rather than silently running Cranelift's code).
    pub fn strict(mut self) -> LlvmBackend {
        self.strict = true;
        self
    }

    /// Kernels this backend handed to Cranelift because LLVM rejected them.
    pub fn fallbacks(&self) -> u64 {
        self.fallbacks.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// The library in use.
    pub fn library_path(&self) -> &std::path::Path {
        &self.lib.path
    }

    /// Lanes per vector iteration.
    pub fn width(&self) -> usize {
        self.width
    }

    /// LLVM IR text for `kernel` as this backend generates it (before optimisation).
    pub fn ir_text(&self, kernel: &Kernel) -> String {
        ir::module(
            kernel,
            &format!("kiln_{}", kernel.hash()),
            self.width_of(kernel),
        )
    }

    /// Optimised object code for `kernel` for this backend's CPU, without linking or running it:
    /// the IR must pass LLVM's verifier, its O2 pipeline and code generation. An `Err` carries
    /// LLVM's message.
    pub fn object_code(&self, kernel: &Kernel) -> std::result::Result<Vec<u8>, String> {
        let ir = self.ir_text(kernel);
        let jit = self.jit.lock();
        self.codegen(&jit, &ir)
    }

    /// Lanes per iteration of `kernel`'s code.
    fn width_of(&self, kernel: &Kernel) -> usize {
        if self.widen {
            ir::width_for(kernel, self.width)
        } else {
            self.width
        }
    }

    /// Optimised object code for `ir` (a module defining the kernel's function).
    fn codegen(&self, jit: &Jit, ir: &str) -> std::result::Result<Vec<u8>, String> {
        let a = &self.lib.api;
        let lib = self.lib;
        // SAFETY: llvm-c contract as in `new`; the context owns the module, the module is
        // disposed before its context, and the buffer returned by codegen is disposed after copying.
        unsafe {
            let ctx = (a.LLVMContextCreate)();
            let buf = (a.LLVMCreateMemoryBufferWithMemoryRangeCopy)(
                ir.as_ptr() as *const c_char,
                ir.len(),
                c"kiln".as_ptr(),
            );
            let mut module: Ptr = std::ptr::null_mut();
            let mut msg: *mut c_char = std::ptr::null_mut();
            // takes ownership of `buf`
            if (a.LLVMParseIRInContext)(ctx, buf, &mut module, &mut msg) != 0 {
                let m = lib.take_message(msg);
                (a.LLVMContextDispose)(ctx);
                return Err(format!("LLVM rejected the generated IR: {m}"));
            }
            let result = (|| {
                let mut msg: *mut c_char = std::ptr::null_mut();
                if (a.LLVMVerifyModule)(module, VERIFY_RETURN_STATUS, &mut msg) != 0 {
                    return Err(format!(
                        "the generated IR fails LLVM's verifier: {}",
                        lib.take_message(msg)
                    ));
                }
                lib.take_message(msg);
                (a.LLVMSetTarget)(module, jit.triple.as_ptr());
                let layout = (a.LLVMCreateTargetDataLayout)(jit.machine);
                (a.LLVMSetModuleDataLayout)(module, layout);
                (a.LLVMDisposeTargetData)(layout);
                let opts = (a.LLVMCreatePassBuilderOptions)();
                let err = (a.LLVMRunPasses)(module, c"default<O2>".as_ptr(), jit.machine, opts);
                (a.LLVMDisposePassBuilderOptions)(opts);
                lib.check(err)
                    .map_err(|m| format!("LLVM's O2 pipeline failed: {m}"))?;
                let mut out: Ptr = std::ptr::null_mut();
                let mut msg: *mut c_char = std::ptr::null_mut();
                if (a.LLVMTargetMachineEmitToMemoryBuffer)(
                    jit.machine,
                    module,
                    FILE_OBJECT,
                    &mut msg,
                    &mut out,
                ) != 0
                {
                    return Err(format!(
                        "LLVM code generation failed: {}",
                        lib.take_message(msg)
                    ));
                }
                let start = (a.LLVMGetBufferStart)(out) as *const u8;
                let len = (a.LLVMGetBufferSize)(out);
                let bytes = std::slice::from_raw_parts(start, len).to_vec();
                (a.LLVMDisposeMemoryBuffer)(out);
                Ok(bytes)
            })();
            (a.LLVMDisposeModule)(module);
            (a.LLVMContextDispose)(ctx);
            result
        }
    }

    /// Link object code into the JIT and return the address of `name`.
    fn link(&self, jit: &mut Jit, obj: &[u8], name: &str) -> std::result::Result<u64, String> {
        let a = &self.lib.api;
        let cname = CString::new(name).map_err(|e| e.to_string())?;
        jit.names.insert(name.to_string());
        // SAFETY: llvm-c contract: AddObjectFile takes ownership of the buffer; lookup writes the
        // address through a valid pointer.
        unsafe {
            let buf = (a.LLVMCreateMemoryBufferWithMemoryRangeCopy)(
                obj.as_ptr() as *const c_char,
                obj.len(),
                cname.as_ptr(),
            );
            self.lib
                .check((a.LLVMOrcLLJITAddObjectFile)(jit.lljit, jit.dylib, buf))
                .map_err(|m| format!("linking the object failed: {m}"))?;
            let mut addr = 0u64;
            self.lib
                .check((a.LLVMOrcLLJITLookup)(jit.lljit, &mut addr, cname.as_ptr()))
                .map_err(|m| format!("linking the object failed: {m}"))?;
            if addr == 0 {
                return Err(format!("the JIT has no symbol {name}"));
            }
            Ok(addr)
        }
    }

    fn compile_kernel(&self, kernel: &Kernel) -> std::result::Result<LlvmKernel, String> {
        self.compile_at(kernel, self.width_of(kernel))
    }

    /// `compile_kernel` at `width` lanes per iteration (a short-run variant asks for fewer).
    fn compile_at(&self, kernel: &Kernel, width: usize) -> std::result::Result<LlvmKernel, String> {
        let hash = kernel.hash();
        let mut jit = self.jit.lock();
        let mut name = format!("kiln_{hash}");
        let mut n = 0;
        while jit.names.contains(&name) {
            n += 1;
            name = format!("kiln_{hash}_{n}");
        }
        let ir = ir::module(kernel, &name, width);
        // The cache key covers the generated IR itself, so a changed code generator (or another
        // width) never picks up an old object, whatever the version number says.
        let target = format!(
            "{} ir:{:016x}",
            self.target,
            xxhash_rust::xxh3::xxh3_64(ir.as_bytes())
        );
        let key = diskcache::Key {
            kernel: hash,
            backend: "llvm",
            target: &target,
        };
        if self.disk_cache {
            if let Some(obj) = diskcache::load(&key) {
                match self.link(&mut jit, &obj, &name) {
                    Ok(addr) => return Ok(LlvmKernel::new(addr, true)),
                    Err(e) => {
                        tracing::debug!(target: "kiln::llvm", "cached object for kernel {hash} did not link ({e}); recompiling");
                        // the failed object may have claimed the name: compile under another
                        while jit.names.contains(&name) {
                            n += 1;
                            name = format!("kiln_{hash}_{n}");
                        }
                        let ir = ir::module(kernel, &name, width);
                        return self.compile_fresh(&mut jit, kernel, &name, ir, None);
                    }
                }
            }
        }
        self.compile_fresh(&mut jit, kernel, &name, ir, Some(&key))
    }

    /// Optimise `ir` (generated for `kernel` as `name`), link it and (given a key) store the
    /// object.
    fn compile_fresh(
        &self,
        jit: &mut Jit,
        kernel: &Kernel,
        name: &str,
        ir: String,
        store: Option<&diskcache::Key>,
    ) -> std::result::Result<LlvmKernel, String> {
        #[cfg(test)]
        let ir = if self.break_ir {
            ir + "\nthis line is not LLVM IR\n"
        } else {
            ir
        };
        if tracing::enabled!(target: "kiln::llvm", tracing::Level::TRACE) {
            tracing::trace!(target: "kiln::llvm", "kernel {}:\n{ir}", kernel.hash());
        }
        let obj = self.codegen(jit, &ir)?;
        let addr = self.link(jit, &obj, name)?;
        if let (Some(key), true) = (store, self.disk_cache) {
            diskcache::store(key, &obj);
        }
        Ok(LlvmKernel::new(addr, false))
    }

    fn cranelift(&self) -> Result<Arc<CraneliftBackend>> {
        self.fallback
            .get_or_init(|| {
                CraneliftBackend::new()
                    .map(Arc::new)
                    .map_err(|e| e.to_string())
            })
            .clone()
            .map_err(|message| Error::Compile {
                backend: "cranelift".into(),
                hash: String::new(),
                message,
            })
    }
}

impl Backend for LlvmBackend {
    fn kind(&self) -> BackendKind {
        BackendKind::Llvm
    }
    fn compile(&self, kernel: &Kernel) -> Result<Arc<dyn CompiledKernel>> {
        let hash = kernel.hash();
        if let Some(k) = self.compiled.lock().get(&hash) {
            return Ok(k.clone());
        }
        match self.compile_kernel(kernel) {
            Ok(k) => {
                let k = Arc::new(k);
                self.compiled.lock().insert(hash, k.clone());
                Ok(k)
            }
            Err(message) if self.strict => Err(Error::Compile {
                backend: "llvm".into(),
                hash: hash.to_string(),
                message,
            }),
            Err(msg) => {
                self.fallbacks
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                tracing::warn!(target: "kiln::llvm", "{} could not compile kernel {hash}: {msg}; compiling it with Cranelift instead (please report this kernel: KILN_LOG=kiln::llvm=trace prints its IR)", self.lib.path.display());
                self.cranelift()?.compile(kernel)
            }
        }
    }
    /// Compiles the [`SHORT_WIDTH`]-lane variant of a kernel this backend compiled (and linked
    /// itself: not for one Cranelift took over) when its own width is wider, and its variant on
    /// strided lanes. A variant LLVM rejects is left out: the kernel itself serves short runs
    /// then, and gaps run one by one.
    fn prepare_short_runs(&self, kernel: &Kernel) {
        let hash = kernel.hash();
        let Some(main) = self.compiled.lock().get(&hash).cloned() else {
            return;
        };
        if main.short.get().is_none() && self.width_of(kernel) > SHORT_WIDTH {
            match self.compile_at(kernel, SHORT_WIDTH) {
                // (a concurrent call may have set it first: either is the same code)
                Ok(k) => drop(main.short.set(Box::new(k))),
                Err(msg) => {
                    tracing::debug!(target: "kiln::llvm", "no short-run variant of kernel {hash}: {msg}")
                }
            }
        }
        if let (None, Some(moved)) = (main.strided.get(), kernel.at_strided_lanes()) {
            match self.compile_at(&moved, self.width_of(&moved)) {
                Ok(k) => drop(main.strided.set(Box::new(k))),
                Err(msg) => {
                    tracing::debug!(target: "kiln::llvm", "no strided variant of kernel {hash}: {msg}")
                }
            }
        }
        main.prepared
            .store(true, std::sync::atomic::Ordering::Release);
    }
}

type KernelFn = unsafe extern "C" fn(*const LaunchArgs, u64, u64);

/// A kernel linked into the JIT (its code lives as long as the process).
struct LlvmKernel {
    func: KernelFn,
    from_disk: bool,
    /// The same kernel at [`SHORT_WIDTH`] lanes, once `prepare_short_runs` compiled it.
    short: OnceLock<Box<LlvmKernel>>,
    /// The same kernel on strided lanes (`Kernel::at_strided_lanes`), likewise.
    strided: OnceLock<Box<LlvmKernel>>,
    /// Whether `prepare_short_runs` has run for it (its variants made, or found not to pay).
    prepared: std::sync::atomic::AtomicBool,
}

/// Lanes per iteration of a kernel's short-run variant (`CompiledKernel::short_runs`). A
/// stencil's general kernel rewrites the 2-lane border gap of every row; at 16 lanes its masked
/// gathers and 64-bit index arithmetic cost a whole wide iteration per gap. Heat steps on the
/// AVX-512 host, 100 steps of 1M points: 1024² 23.2 → 19.7 ms, 4096×256 40 → 29 ms, 16384×64
/// 112 → 69 ms with 4 lanes (2 lanes: 20.3, 25.7 and slower on narrow grids; 8: 20.9, 31.8).
pub const SHORT_WIDTH: usize = 4;

impl LlvmKernel {
    fn new(addr: u64, from_disk: bool) -> LlvmKernel {
        // SAFETY: `addr` is the address of a function the JIT linked from IR declaring
        // `void (ptr, i64, i64)` with the C calling convention, i.e. `KernelFn`; the JIT's code
        // memory is never freed (the backend lives for the process).
        let func = unsafe { std::mem::transmute::<usize, KernelFn>(addr as usize) };
        LlvmKernel {
            func,
            from_disk,
            short: OnceLock::new(),
            strided: OnceLock::new(),
            prepared: std::sync::atomic::AtomicBool::new(false),
        }
    }
}

impl CompiledKernel for LlvmKernel {
    unsafe fn run(&self, args: &LaunchArgs, start: u64, end: u64) {
        if start >= end {
            return;
        }
        // SAFETY: the caller guarantees `args` matches the kernel's parameters (see the trait).
        unsafe { (self.func)(args, start, end) }
    }
    fn loaded_from_disk(&self) -> bool {
        self.from_disk
    }
    /// (the last vector's lanes at or past `end` are loaded and stored masked: `ir::function`)
    fn writes_exactly(&self) -> bool {
        true
    }
    fn short_runs(&self) -> Option<&dyn CompiledKernel> {
        self.short.get().map(|k| k.as_ref() as &dyn CompiledKernel)
    }
    fn strided_runs(&self) -> Option<&dyn CompiledKernel> {
        self.strided
            .get()
            .map(|k| k.as_ref() as &dyn CompiledKernel)
    }
    fn variants_prepared(&self) -> bool {
        self.prepared.load(std::sync::atomic::Ordering::Acquire)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::STATUS_LEN;
    use crate::kernel::{Inst, Param, ParamKind};
    use crate::op::Op;
    use crate::ty::VarType;
    use std::sync::atomic::AtomicU64;

    /// `out[i] = 2.5` for every lane.
    fn fill_kernel() -> Kernel {
        Kernel {
            params: vec![Param {
                ty: VarType::F32,
                kind: ParamKind::Output,
            }],
            insts: vec![
                Inst::new(Op::Literal, VarType::F32, &[], 2.5f32.to_bits() as u64),
                Inst::new(Op::Store, VarType::F32, &[0], 0),
            ],
        }
    }

    #[repr(align(64))]
    struct Aligned([f32; 64]);

    fn run_fill(k: &dyn CompiledKernel, n: u64) -> Vec<f32> {
        run_fill_range(k, n, 0, n)
    }

    /// The fill kernel run over lanes `[start, end)` of an output of `len` elements (zeros).
    fn run_fill_range(k: &dyn CompiledKernel, len: u64, start: u64, end: u64) -> Vec<f32> {
        run_into_64(k, &[], len, start, end)
    }

    /// `k` over lanes `[start, end)` with the parameters `inputs` (pointer and length each)
    /// followed by one f32 output of `len` elements in a zeroed 64-element buffer, returned.
    fn run_into_64(
        k: &dyn CompiledKernel,
        inputs: &[(*mut u8, u64)],
        len: u64,
        start: u64,
        end: u64,
    ) -> Vec<f32> {
        let mut out = Aligned([0.0; 64]);
        let mut ptrs: Vec<*mut u8> = inputs.iter().map(|i| i.0).collect();
        let mut lens: Vec<u64> = inputs.iter().map(|i| i.1).collect();
        ptrs.push(out.0.as_mut_ptr() as *mut u8);
        lens.push(len);
        let status: [AtomicU64; STATUS_LEN] = Default::default();
        let args = LaunchArgs {
            ptrs: ptrs.as_ptr(),
            lens: lens.as_ptr(),
            status: status.as_ptr(),
        };
        // SAFETY: the callers' inputs are valid for their lengths and read inside them; one f32
        // output of `len` ≤ 64 elements in a 64-element buffer (slack past 48 for the callers
        // that run 48 or fewer), `end` ≤ `len`, as the kernels expect.
        unsafe { k.run(&args, start, end) };
        out.0.to_vec()
    }

    /// `out[i] = src[(7·i) mod 64]`: a gather at non-contiguous indices (one vector per
    /// iteration, the kind a stencil's general kernel is).
    fn strided_gather_kernel() -> Kernel {
        Kernel::parse(
            "p0: indexed f32\np1: out f32\nr0 = index.u32\nr1 = const.u32 7\nr2 = mul.u32 r0, r1\nr3 = const.u32 64\nr4 = rem.u32 r2, r3\nr5 = const.bool true\nr6 = gather.f32 p0[r4], mask r5\nstore.f32 p1, r6\n",
        )
        .expect("the kernel parses")
    }

    /// A short-run variant computes what its kernel computes, lane for lane, and writes only its
    /// range, for every base width a host uses (8 on AVX2, 16 on AVX-512, 32 widened; all run
    /// here, LLVM splitting or merging registers); a backend whose kernels are already that
    /// narrow makes none; and the variant's code generates for the other x86-64 CPUs too.
    #[test]
    fn short_run_variants_match_their_kernel() {
        let kernel = strided_gather_kernel();
        let src: Vec<f32> = (0..64).map(|i| i as f32 * 0.5 + 1.0).collect();
        // (a 64-element source read at indices below 64)
        let input = [(src.as_ptr() as *mut u8, 64u64)];
        let run = |k: &dyn CompiledKernel, start, end| run_into_64(k, &input, 64, start, end);
        for width in [8, 16, 32] {
            let Ok(be) = LlvmBackend::create_with(false, width) else {
                eprintln!("SKIPPED: no usable libLLVM on this machine");
                return;
            };
            let k = be.compile(&kernel).expect("LLVM compiles a gather");
            assert!(k.short_runs().is_none(), "made only when asked");
            be.prepare_short_runs(&kernel);
            let short = k
                .short_runs()
                .unwrap_or_else(|| panic!("a {width}-lane kernel gets a 4-lane variant"));
            for (start, end) in [(0u64, 64u64), (3, 5), (15, 17), (62, 64), (7, 8), (1, 30)] {
                let (a, b) = (run(&*k, start, end), run(short, start, end));
                for i in 0..64u64 {
                    let want = if (start..end).contains(&i) {
                        src[(i * 7 % 64) as usize]
                    } else {
                        0.0
                    };
                    let at = format!("width {width}, [{start}, {end}), lane {i}");
                    assert_eq!(a[i as usize], want, "kernel, {at}");
                    assert_eq!(b[i as usize], want, "variant, {at}");
                }
            }
        }
        let narrow = LlvmBackend::create_with(false, SHORT_WIDTH).expect("the same library");
        let k4 = narrow.compile(&kernel).expect("LLVM compiles a gather");
        narrow.prepare_short_runs(&kernel);
        assert!(
            k4.short_runs().is_none(),
            "already {SHORT_WIDTH} lanes wide"
        );
        // the variant is the kernel at SHORT_WIDTH lanes: LLVM must compile it for the CPUs this
        // host is not (an AVX2 host's 4-lane gathers, and the baseline's)
        generates_for_other_cpus(&kernel, SHORT_WIDTH);
    }

    /// LLVM generates `kernel`'s object code at `width` lanes for an AVX-512, an AVX2 and a
    /// baseline x86-64 CPU (whichever this host is).
    fn generates_for_other_cpus(kernel: &Kernel, width: usize) {
        for cpu in ["skylake-avx512", "haswell", "x86-64"] {
            let other = LlvmBackend::create_for_cpu(width, cpu, "").expect("the same library");
            let obj = other
                .object_code(kernel)
                .unwrap_or_else(|e| panic!("{cpu}: {e}"));
            assert!(!obj.is_empty(), "{cpu}: no object code");
        }
    }

    /// A strided variant computes its kernel's value of lane `(c / run) · stride + base + c % run`
    /// at launch lane `c` (a gather, a per-lane input and the lane index, all moved) and writes
    /// those lanes only, for runs of one and several lanes, at every width a host uses; and its code (scatters: AVX-512's instruction, a branch
    /// per lane elsewhere) generates for the other x86-64 CPUs too.
    #[test]
    fn strided_variants_write_their_lanes_only() {
        let kernel = Kernel::parse(
            "p0: indexed f32\np1: in f32\np2: out f32\nr0 = index.u32\nr1 = const.u32 7\n\
             r2 = mul.u32 r0, r1\nr3 = const.u32 64\nr4 = rem.u32 r2, r3\nr5 = const.bool true\n\
             r6 = gather.f32 p0[r4], mask r5\nr7 = load.f32 p1\nr8 = add.f32 r6, r7\n\
             r9 = cast.u32.f32 r0\nr10 = add.f32 r8, r9\nstore.f32 p2, r10\n",
        )
        .expect("the kernel parses");
        let src: Vec<f32> = (0..64).map(|i| i as f32 * 0.5 + 1.0).collect();
        let x: Vec<f32> = (0..64).map(|i| 1000.0 + i as f32).collect();
        let want = |l: usize| src[l * 7 % 64] + x[l] + l as f32;
        for width in [4, 8, 16, 32] {
            let Ok(be) = LlvmBackend::create_with(false, width) else {
                eprintln!("SKIPPED: no usable libLLVM on this machine");
                return;
            };
            let k = be.compile(&kernel).expect("LLVM compiles the kernel");
            assert!(k.strided_runs().is_none(), "made only when asked");
            assert!(!k.variants_prepared());
            be.prepare_short_runs(&kernel);
            assert!(k.variants_prepared());
            let strided = k
                .strided_runs()
                .expect("a straight-line kernel gets a strided variant");
            for (stride, base, count, run) in [
                (5i64, 2i64, 10u64, 1i64),
                (1, 0, 64, 1),
                (13, 7, 4, 1),
                (64, 3, 1, 1),
                (2, 1, 31, 1),
                // runs of several lanes: a 2-d grid's gaps, 2 and 4 lanes wide
                (8, 6, 7, 4),
                (16, 14, 4, 2),
                (9, 0, 7, 9),
                (33, 28, 2, 3),
                (64, 0, 1, 64),
            ] {
                let mut out = Aligned([0.0f32; 64]);
                let map = [stride, base, run];
                let ptrs: Vec<*mut u8> = vec![
                    src.as_ptr() as *mut u8,
                    x.as_ptr() as *mut u8,
                    out.0.as_mut_ptr() as *mut u8,
                    &map[0] as *const i64 as *mut u8,
                    &map[1] as *const i64 as *mut u8,
                    &map[2] as *const i64 as *mut u8,
                ];
                let lens = [64u64, 64, 64, 1, 1, 1];
                let status: [AtomicU64; STATUS_LEN] = Default::default();
                let args = LaunchArgs {
                    ptrs: ptrs.as_ptr(),
                    lens: lens.as_ptr(),
                    status: status.as_ptr(),
                };
                // SAFETY: three 64-element buffers and three size-1 i64s, as the variant's six
                // parameters; every lane g·stride + base + j for g < count, j < run is below 64.
                unsafe { strided.run(&args, 0, count * run as u64) };
                for (l, &v) in out.0.iter().enumerate() {
                    let off = l as i64 - base;
                    let listed = off >= 0 && off % stride < run && off / stride < count as i64;
                    let at =
                        format!("width {width}, stride {stride}, base {base}, run {run}, lane {l}");
                    assert_eq!(v, if listed { want(l) } else { 0.0 }, "{at}");
                }
                assert!(
                    status
                        .iter()
                        .all(|s| s.load(std::sync::atomic::Ordering::Relaxed) == 0),
                    "width {width}, stride {stride}, base {base}, run {run}: {status:?}"
                );
            }
        }
        // (AVX-512's width and AVX2's: the strided variant's f64 lane arithmetic at both)
        let strided = kernel.at_strided_lanes().expect("straight-line");
        generates_for_other_cpus(&strided, 16);
        generates_for_other_cpus(&strided, 8);
    }

    /// Every width's kernel writes exactly the lanes `[start, end)` it is given (what
    /// `writes_exactly` promises the launcher: ragged range ends run in place).
    #[test]
    fn kernels_write_exactly_their_range() {
        for width in [4, 8, 16, 32, 64] {
            let Ok(be) = LlvmBackend::create_with(false, width) else {
                eprintln!("SKIPPED: no usable libLLVM on this machine");
                return;
            };
            let k = be.compile(&fill_kernel()).expect("LLVM compiles a fill");
            assert!(k.writes_exactly());
            for (start, end) in [(3u64, 37u64), (16, 32), (5, 6), (0, 1), (1, 64), (63, 64)] {
                let out = run_fill_range(&*k, 64, start, end);
                for (i, &v) in out.iter().enumerate() {
                    let inside = (start..end).contains(&(i as u64));
                    assert_eq!(
                        v,
                        if inside { 2.5 } else { 0.0 },
                        "width {width}, [{start}, {end}), lane {i}"
                    );
                }
            }
        }
    }

    #[test]
    fn rejected_ir_falls_back_to_cranelift_or_is_an_error_when_strict() {
        let Ok(mut be) = LlvmBackend::create_with(false, 8) else {
            eprintln!("SKIPPED: no usable libLLVM on this machine");
            return;
        };
        let k = fill_kernel();
        // the real thing first
        let good = be.compile(&k).expect("LLVM compiles a store of a constant");
        assert_eq!(be.fallbacks(), 0);
        let out = run_fill(&*good, 37);
        assert!(
            out[..37].iter().all(|&x| x == 2.5) && out[37] == 0.0,
            "{out:?}"
        );
        // LLVM rejects the module: Cranelift's kernel runs instead, and it is counted
        be.break_ir = true;
        be.compiled.lock().clear();
        let fallback = be.compile(&k).expect("falls back to Cranelift");
        assert_eq!(be.fallbacks(), 1);
        // (Cranelift's kernel may write a whole last vector: the launcher runs ends in scratch)
        assert!(!fallback.writes_exactly());
        let out = run_fill(&*fallback, 45);
        // (Cranelift may write whole vectors into the slack past the end, which the ABI allows)
        assert!(out[..45].iter().all(|&x| x == 2.5), "{out:?}");
        // strict: LLVM's complaint is the error
        let mut strict = LlvmBackend::create_with(false, 8).unwrap().strict();
        strict.break_ir = true;
        match strict.compile(&k) {
            Err(Error::Compile {
                backend, message, ..
            }) => {
                assert_eq!(backend, "llvm");
                assert!(
                    message.contains("LLVM rejected the generated IR"),
                    "{message}"
                );
            }
            Err(e) => panic!("expected a compile error, got {e}"),
            Ok(_) => panic!("expected a compile error, got a kernel"),
        }
        assert_eq!(strict.fallbacks(), 0);
    }
}
