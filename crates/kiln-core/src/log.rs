//! Logging set-up: `KILN_LOG` (tracing-subscriber filter syntax) and `set_log_level` at run time.
//!
//! kiln emits `tracing` events under `kiln::trace`, `kiln::kernel`, `kiln::schedule`, …. If the
//! program installs its own subscriber, those events go there. Otherwise, the first time kiln runs
//! with `KILN_LOG` set (or `set_log_level` is called) kiln installs a stderr subscriber whose filter
//! can be changed later — like the seed's `cuda_set_log_level`. `KILN_DEBUG=1` alone installs it at
//! `warn`, so its out-of-range reports are visible.

use parking_lot::Mutex;
use std::sync::Once;
use tracing_subscriber::{
    layer::SubscriberExt, reload, util::SubscriberInitExt, EnvFilter, Registry,
};

static INIT: Once = Once::new();
static HANDLE: Mutex<Option<reload::Handle<EnvFilter, Registry>>> = Mutex::new(None);

fn install(filter: &str) {
    let f = EnvFilter::try_new(filter).unwrap_or_else(|_| EnvFilter::new("warn"));
    let (layer, handle) = reload::Layer::new(f);
    let ok = tracing_subscriber::registry()
        .with(layer)
        .with(
            tracing_subscriber::fmt::layer()
                .with_writer(std::io::stderr)
                .with_target(true),
        )
        .try_init()
        .is_ok();
    if ok {
        *HANDLE.lock() = Some(handle);
    }
}

/// Install kiln's subscriber if `KILN_LOG` is set (called on first use of the engine).
pub fn init_from_env() {
    INIT.call_once(|| {
        if let Some(filter) = crate::config::env("KILN_LOG") {
            install(&filter);
        } else if crate::config::debug_mode() {
            // KILN_DEBUG=1 promises visible warnings even without KILN_LOG
            install("warn");
        }
    });
}

/// Change kiln's log filter at run time, e.g. `"info"`, `"kiln::kernel=trace"`, `"off"`.
///
/// Returns false if another subscriber owns logging (then configure that one instead).
///
/// ```
/// kiln_core::set_log_level("warn");
/// ```
pub fn set_log_level(filter: &str) -> bool {
    init_from_env();
    let mut h = HANDLE.lock();
    if h.is_none() {
        drop(h);
        install(filter);
        h = HANDLE.lock();
    }
    match h.as_ref() {
        Some(handle) => EnvFilter::try_new(filter)
            .map(|f| handle.reload(f).is_ok())
            .unwrap_or(false),
        None => false,
    }
}
