//! Which backend evaluations use: `KILN_BACKEND` (read once through `config`), else LLVM where a
//! usable libLLVM is found and Cranelift otherwise, a per-thread override for tests that compare
//! backends, and one shared instance of each backend (their compiled-kernel caches live in
//! `cache`, keyed by kind).

use super::{Backend, BackendKind};
use crate::error::Result;
use parking_lot::Mutex;
use std::cell::Cell;
use std::sync::{Arc, OnceLock};

static DEFAULT_BACKEND: OnceLock<BackendKind> = OnceLock::new();
static BACKENDS: Mutex<Vec<(BackendKind, Arc<dyn Backend>)>> = Mutex::new(Vec::new());
thread_local! {
    static OVERRIDE: Cell<Option<BackendKind>> = const { Cell::new(None) };
}

/// Parse `KILN_BACKEND`; without it, LLVM when a usable libLLVM is found, else Cranelift (with one
/// `info` line saying why). Asking for `llvm` where it is missing keeps `Llvm`: every evaluation then
/// fails with `BackendUnavailable`, which names the reason and the fix.
fn default_backend() -> BackendKind {
    *DEFAULT_BACKEND.get_or_init(|| match crate::config::env("KILN_BACKEND").as_deref() {
        Some("interp") => BackendKind::Interp,
        Some("cranelift") => BackendKind::Cranelift,
        Some("llvm") => BackendKind::Llvm,
        None => auto_backend(),
        Some(other) => {
            let pick = auto_backend();
            tracing::warn!(target: "kiln::kernel", "KILN_BACKEND={other} is not a known backend (interp, cranelift, llvm); using {pick}");
            pick
        }
    })
}

fn auto_backend() -> BackendKind {
    match super::llvm::shared() {
        Ok(_) => BackendKind::Llvm,
        Err(reason) => {
            // a library the user named that does not work deserves a warning; no LLVM at all is normal
            if crate::config::env_os("KILN_LLVM_PATH").is_some() {
                tracing::warn!(target: "kiln::kernel", "using the Cranelift backend: {reason}");
            } else {
                tracing::info!(target: "kiln::kernel", "using the Cranelift backend: {reason}");
            }
            BackendKind::Cranelift
        }
    }
}

/// The backend evaluations on this thread use.
pub fn backend() -> BackendKind {
    OVERRIDE.with(|o| o.get()).unwrap_or_else(default_backend)
}

/// Run `f` with evaluations on this thread using `kind` (tests compare backends this way).
pub fn with_backend<R>(kind: BackendKind, f: impl FnOnce() -> R) -> R {
    struct Reset(Option<BackendKind>);
    impl Drop for Reset {
        fn drop(&mut self) {
            OVERRIDE.with(|o| o.set(self.0));
        }
    }
    let _reset = Reset(OVERRIDE.with(|o| o.replace(Some(kind))));
    f()
}

/// The compiled-kernel factory of `kind`, created on first use and shared by every thread.
pub(crate) fn instance(kind: BackendKind) -> Result<Arc<dyn Backend>> {
    let mut b = BACKENDS.lock();
    if let Some((_, be)) = b.iter().find(|(k, _)| *k == kind) {
        return Ok(be.clone());
    }
    let be = super::create(kind)?;
    b.push((kind, be.clone()));
    Ok(be)
}
