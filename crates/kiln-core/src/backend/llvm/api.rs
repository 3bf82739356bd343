//! Finding and loading libLLVM at run time, and the part of its C API kiln calls.
//!
//! kiln never links LLVM: the default build and its tests need nothing installed. When the backend is
//! first wanted, `Library::find` looks for a shared libLLVM (≥ 15, the first with opaque pointers
//! and the new pass manager in the C API), opens it with `libloading` and resolves every function
//! below up front, so a library that lacks one is refused with that symbol's name instead of failing
//! later in the middle of a compile. The handles are opaque pointers; their owners (`mod.rs`) free
//! them.

use libloading::Library as Dylib;
use std::ffi::{c_char, c_void, CStr};
use std::path::{Path, PathBuf};

/// The lowest LLVM major version kiln's generated IR and C API calls need.
pub const MIN_VERSION: u32 = 15;
/// The newest major version searched for by name.
const MAX_VERSION: u32 = 22;

pub type Ptr = *mut c_void;
pub type Bool = i32;

/// `LLVMOrcCSymbolMapPair`: a name and its absolute address.
#[repr(C)]
pub struct SymbolPair {
    pub name: Ptr,
    pub address: u64,
    pub generic_flags: u8,
    pub target_flags: u8,
}
/// `LLVMJITSymbolGenericFlagsExported | LLVMJITSymbolGenericFlagsCallable`.
pub const FLAGS_EXPORTED_CALLABLE: u8 = 0b11;

/// Declares the function table: each entry's name is also its C symbol.
macro_rules! api {
    ($($name:ident : fn($($arg:ty),*) $(-> $ret:ty)?;)*) => {
        /// Every libLLVM function kiln calls, resolved when the library is opened.
        #[allow(non_snake_case)]
        pub struct Api {
            $(pub $name: unsafe extern "C" fn($($arg),*) $(-> $ret)?,)*
        }
        impl Api {
            /// Resolve every function; the error names the first missing symbol.
            fn resolve(lib: &Dylib) -> Result<Api, String> {
                Ok(Api {
                    $($name: {
                        // SAFETY: the symbol's type is the C prototype from LLVM's llvm-c headers
                        // (stable since LLVM 15); the pointer is copied out, and the library it
                        // points into is kept loaded for the process's lifetime (`Library` is leaked).
                        let f = unsafe {
                            lib.get::<unsafe extern "C" fn($($arg),*) $(-> $ret)?>(
                                concat!(stringify!($name), "\0").as_bytes(),
                            )
                        }
                        .map_err(|_| stringify!($name).to_string())?;
                        *f
                    },)*
                })
            }
        }
    };
}

api! {
    LLVMContextCreate: fn() -> Ptr;
    LLVMContextDispose: fn(Ptr);
    LLVMCreateMemoryBufferWithMemoryRangeCopy: fn(*const c_char, usize, *const c_char) -> Ptr;
    LLVMGetBufferStart: fn(Ptr) -> *const c_char;
    LLVMGetBufferSize: fn(Ptr) -> usize;
    LLVMDisposeMemoryBuffer: fn(Ptr);
    LLVMParseIRInContext: fn(Ptr, Ptr, *mut Ptr, *mut *mut c_char) -> Bool;
    LLVMVerifyModule: fn(Ptr, i32, *mut *mut c_char) -> Bool;
    LLVMDisposeModule: fn(Ptr);
    LLVMDisposeMessage: fn(*mut c_char);
    LLVMSetTarget: fn(Ptr, *const c_char);
    LLVMSetModuleDataLayout: fn(Ptr, Ptr);
    LLVMGetDefaultTargetTriple: fn() -> *mut c_char;
    LLVMGetHostCPUName: fn() -> *mut c_char;
    LLVMGetHostCPUFeatures: fn() -> *mut c_char;
    LLVMGetTargetFromTriple: fn(*const c_char, *mut Ptr, *mut *mut c_char) -> Bool;
    LLVMCreateTargetMachine: fn(Ptr, *const c_char, *const c_char, *const c_char, i32, i32, i32) -> Ptr;
    LLVMDisposeTargetMachine: fn(Ptr);
    LLVMCreateTargetDataLayout: fn(Ptr) -> Ptr;
    LLVMDisposeTargetData: fn(Ptr);
    LLVMTargetMachineEmitToMemoryBuffer: fn(Ptr, Ptr, i32, *mut *mut c_char, *mut Ptr) -> Bool;
    LLVMCreatePassBuilderOptions: fn() -> Ptr;
    LLVMDisposePassBuilderOptions: fn(Ptr);
    LLVMRunPasses: fn(Ptr, *const c_char, Ptr, Ptr) -> Ptr;
    LLVMGetErrorMessage: fn(Ptr) -> *mut c_char;
    LLVMDisposeErrorMessage: fn(*mut c_char);
    LLVMInitializeX86TargetInfo: fn();
    LLVMInitializeX86Target: fn();
    LLVMInitializeX86TargetMC: fn();
    LLVMInitializeX86AsmPrinter: fn();
    LLVMOrcCreateLLJITBuilder: fn() -> Ptr;
    LLVMOrcCreateLLJIT: fn(*mut Ptr, Ptr) -> Ptr;
    LLVMOrcLLJITGetMainJITDylib: fn(Ptr) -> Ptr;
    LLVMOrcLLJITAddObjectFile: fn(Ptr, Ptr, Ptr) -> Ptr;
    LLVMOrcLLJITLookup: fn(Ptr, *mut u64, *const c_char) -> Ptr;
    LLVMOrcLLJITMangleAndIntern: fn(Ptr, *const c_char) -> Ptr;
    LLVMOrcAbsoluteSymbols: fn(*mut SymbolPair, usize) -> Ptr;
    LLVMOrcJITDylibDefine: fn(Ptr, Ptr) -> Ptr;
}

/// An opened libLLVM with its functions resolved. Leaked on purpose: compiled kernels point into
/// memory that the library's JIT owns, so it must never be unloaded.
pub struct Library {
    pub path: PathBuf,
    pub version: u32,
    pub api: Api,
}

/// Why no usable libLLVM was found (the message is logged once, then kiln uses Cranelift).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LoadError {
    /// Nothing named like libLLVM in the searched places.
    NotFound,
    /// Only versions older than [`MIN_VERSION`] were found.
    TooOld { path: PathBuf, version: u32 },
    /// The library could not be opened.
    Open { path: PathBuf, message: String },
    /// The library lacks a function kiln needs.
    MissingSymbol { path: PathBuf, symbol: String },
}

impl std::fmt::Display for LoadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LoadError::NotFound => write!(
                f,
                "no libLLVM found (searched KILN_LLVM_PATH, libLLVM-{MAX_VERSION}.so … libLLVM-{MIN_VERSION}.so in the system library folders and /usr/lib/llvm-*/lib); install LLVM ≥ {MIN_VERSION} or set KILN_LLVM_PATH to its libLLVM.so"
            ),
            LoadError::TooOld { path, version } => write!(
                f,
                "{} is LLVM {version}, kiln needs LLVM ≥ {MIN_VERSION}; install a newer libLLVM or set KILN_LLVM_PATH to one",
                path.display()
            ),
            LoadError::Open { path, message } => write!(
                f,
                "could not load {}: {message}; point KILN_LLVM_PATH at a working libLLVM ≥ {MIN_VERSION}",
                path.display()
            ),
            LoadError::MissingSymbol { path, symbol } => write!(
                f,
                "{} lacks the function {symbol} (not a libLLVM ≥ {MIN_VERSION}?); point KILN_LLVM_PATH at a libLLVM ≥ {MIN_VERSION}",
                path.display()
            ),
        }
    }
}

/// The LLVM major version a library's file name (or its folder, `/usr/lib/llvm-N/lib`) says, after
/// following symbolic links: `libLLVM-15.so.1`, `libLLVM.so.18.1`, `libLLVM-17.0.6.so`.
pub fn version_from_path(path: &Path) -> Option<u32> {
    let real = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
    for p in [&real, &path.to_path_buf()] {
        let name = p.file_name()?.to_string_lossy().into_owned();
        let digits = |s: &str| -> Option<u32> {
            let d: String = s.chars().take_while(|c| c.is_ascii_digit()).collect();
            d.parse().ok()
        };
        if let Some(rest) = name.strip_prefix("libLLVM-") {
            if let Some(v) = digits(rest) {
                return Some(v);
            }
        }
        if let Some(rest) = name.strip_prefix("libLLVM.so.") {
            if let Some(v) = digits(rest) {
                return Some(v);
            }
        }
        for comp in p.components() {
            let c = comp.as_os_str().to_string_lossy();
            if let Some(rest) = c.strip_prefix("llvm-") {
                if let Some(v) = digits(rest) {
                    return Some(v);
                }
            }
        }
    }
    None
}

/// Candidate libraries in search order: newest version first.
fn candidates() -> Vec<PathBuf> {
    let dirs = [
        "/usr/lib/x86_64-linux-gnu",
        "/usr/lib/aarch64-linux-gnu",
        "/usr/lib64",
        "/usr/lib",
        "/usr/local/lib",
        "/opt/homebrew/opt/llvm/lib",
        "/usr/local/opt/llvm/lib",
    ];
    let mut out = Vec::new();
    for v in (MIN_VERSION - 1..=MAX_VERSION).rev() {
        let names = [
            format!("libLLVM-{v}.so"),
            format!("libLLVM-{v}.so.1"),
            format!("libLLVM.so.{v}"),
            format!("libLLVM.so.{v}.1"),
            format!("libLLVM-{v}.dylib"),
        ];
        let llvm_dir = format!("/usr/lib/llvm-{v}/lib");
        for d in dirs.iter().copied().chain([llvm_dir.as_str()]) {
            for n in &names {
                out.push(Path::new(d).join(n));
            }
        }
        out.push(PathBuf::from(&llvm_dir).join("libLLVM.so"));
    }
    for d in dirs {
        out.push(Path::new(d).join("libLLVM.so"));
    }
    out
}

impl Library {
    /// Find and open libLLVM: `KILN_LLVM_PATH` if set (a file, or a folder to search), else the
    /// newest suitable library in the usual places.
    pub fn find() -> Result<&'static Library, LoadError> {
        if let Some(p) = crate::config::env_os("KILN_LLVM_PATH") {
            let p = PathBuf::from(p);
            if p.is_dir() {
                let mut found = None;
                for v in (MIN_VERSION - 1..=MAX_VERSION).rev() {
                    for n in [format!("libLLVM-{v}.so"), format!("libLLVM.so.{v}")] {
                        if found.is_none() && p.join(&n).exists() {
                            found = Some(p.join(n));
                        }
                    }
                }
                let file = found
                    .or_else(|| Some(p.join("libLLVM.so")).filter(|f| f.exists()))
                    .ok_or(LoadError::NotFound)?;
                return Library::open(&file);
            }
            return Library::open(&p);
        }
        let mut too_old = None;
        let mut seen = std::collections::HashSet::new();
        for c in candidates() {
            if !c.exists() {
                continue;
            }
            let real = std::fs::canonicalize(&c).unwrap_or_else(|_| c.clone());
            if !seen.insert(real) {
                continue;
            }
            match version_from_path(&c) {
                Some(v) if v < MIN_VERSION => {
                    too_old.get_or_insert(LoadError::TooOld {
                        path: c.clone(),
                        version: v,
                    });
                }
                _ => return Library::open(&c),
            }
        }
        Err(too_old.unwrap_or(LoadError::NotFound))
    }

    /// Open one library file and resolve the API. The version is checked from the file name before
    /// loading (an older LLVM is never loaded into the process).
    pub fn open(path: &Path) -> Result<&'static Library, LoadError> {
        if let Some(v) = version_from_path(path) {
            if v < MIN_VERSION {
                return Err(LoadError::TooOld {
                    path: path.to_path_buf(),
                    version: v,
                });
            }
        }
        // SAFETY: loading a shared library runs its initialisers; libLLVM's only register its
        // targets and options. The path was chosen by the user (KILN_LLVM_PATH) or is a system libLLVM.
        let lib = unsafe { Dylib::new(path) }.map_err(|e| LoadError::Open {
            path: path.to_path_buf(),
            message: e.to_string(),
        })?;
        let api = Api::resolve(&lib).map_err(|symbol| LoadError::MissingSymbol {
            path: path.to_path_buf(),
            symbol,
        })?;
        let version = version_from_path(path).unwrap_or(MIN_VERSION);
        // Keep the library mapped for the rest of the process (see the type's comment).
        std::mem::forget(lib);
        Ok(Box::leak(Box::new(Library {
            path: path.to_path_buf(),
            version,
            api,
        })))
    }

    /// Take an LLVM-allocated message (may be null) as a String, freeing it.
    pub(crate) fn take_message(&self, msg: *mut c_char) -> String {
        if msg.is_null() {
            return String::new();
        }
        // SAFETY: LLVM returned a NUL-terminated string it allocated; it is freed right after.
        let s = unsafe { CStr::from_ptr(msg) }
            .to_string_lossy()
            .into_owned();
        // SAFETY: `msg` came from an LLVM function documented to need LLVMDisposeMessage.
        unsafe { (self.api.LLVMDisposeMessage)(msg) };
        s
    }

    /// Turn an `LLVMErrorRef` into `Err(message)` (null means success), consuming it.
    pub(crate) fn check(&self, err: Ptr) -> Result<(), String> {
        if err.is_null() {
            return Ok(());
        }
        // SAFETY: a non-null LLVMErrorRef is consumed by LLVMGetErrorMessage, whose result is
        // freed with LLVMDisposeErrorMessage.
        unsafe {
            let m = (self.api.LLVMGetErrorMessage)(err);
            let s = CStr::from_ptr(m).to_string_lossy().into_owned();
            (self.api.LLVMDisposeErrorMessage)(m);
            Err(s)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_come_from_names_and_folders() {
        assert_eq!(version_from_path(Path::new("/x/libLLVM-15.so.1")), Some(15));
        assert_eq!(version_from_path(Path::new("/x/libLLVM.so.18.1")), Some(18));
        assert_eq!(
            version_from_path(Path::new("/x/libLLVM-17.0.6.so")),
            Some(17)
        );
        assert_eq!(
            version_from_path(Path::new("/nonexistent/llvm-16/lib/libLLVM.so")),
            Some(16)
        );
        assert_eq!(version_from_path(Path::new("/x/libfoo.so")), None);
    }

    #[test]
    fn an_old_or_fake_library_is_refused_with_a_reason() {
        match Library::open(Path::new("/nonexistent/libLLVM-14.so")) {
            Err(LoadError::TooOld { version: 14, .. }) => {}
            Err(e) => panic!("expected TooOld, got {e}"),
            Ok(_) => panic!("expected TooOld, got a library"),
        }
        let dir = std::env::temp_dir().join(format!("kiln-fake-llvm-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let fake = dir.join("libLLVM-fake.so");
        std::fs::write(&fake, b"not a shared library").unwrap();
        match Library::open(&fake) {
            Err(e @ LoadError::Open { .. }) => assert!(e.to_string().contains("libLLVM-fake.so")),
            Err(e) => panic!("expected Open, got {e}"),
            Ok(_) => panic!("expected Open, got a library"),
        }
        std::fs::remove_dir_all(&dir).ok();
        // a real shared library that is not LLVM: the first missing function is named
        let libc = [
            "/lib/x86_64-linux-gnu/libc.so.6",
            "/usr/lib/x86_64-linux-gnu/libc.so.6",
        ]
        .into_iter()
        .map(Path::new)
        .find(|p| p.exists());
        if let Some(libc) = libc {
            match Library::open(libc) {
                Err(e @ LoadError::MissingSymbol { .. }) => {
                    let msg = e.to_string();
                    assert!(
                        msg.contains("LLVMContextCreate") && msg.contains("libc.so.6"),
                        "{msg}"
                    );
                }
                Err(e) => panic!("expected MissingSymbol, got {e}"),
                Ok(_) => panic!("expected MissingSymbol, got a library"),
            }
        }
    }
}
