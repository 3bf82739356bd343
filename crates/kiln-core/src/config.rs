//! Engine switches read from the environment: the lowest layer, so that any module (logging
//! included) can ask without reaching into the ones that act on the answer.

use std::sync::OnceLock;

/// Whether `KILN_DEBUG=1` is set (report out-of-range accesses as warnings, and show warnings
/// even without `KILN_LOG`).
///
/// ```
/// // read once per process; any value but "" and "0" turns it on
/// let _on: bool = kiln_core::config::debug_mode();
/// ```
pub fn debug_mode() -> bool {
    static DEBUG: OnceLock<bool> = OnceLock::new();
    *DEBUG.get_or_init(|| {
        std::env::var("KILN_DEBUG")
            .map(|v| v != "0" && !v.is_empty())
            .unwrap_or(false)
    })
}
