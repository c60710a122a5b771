//! Process signals as a flag the main loop polls (no work inside the handler).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// Sets the returned flag on SIGINT or SIGTERM (for a clean shutdown that flushes batches).
pub fn install_stop_flag() -> Arc<AtomicBool> {
    static FLAG: std::sync::OnceLock<Arc<AtomicBool>> = std::sync::OnceLock::new();
    let f = FLAG
        .get_or_init(|| Arc::new(AtomicBool::new(false)))
        .clone();
    extern "C" fn on_signal(_: libc::c_int) {
        if let Some(f) = FLAG.get() {
            f.store(true, Ordering::Relaxed);
        }
    }
    // SAFETY: the handler only performs an atomic store, which is async-signal-safe.
    unsafe {
        libc::signal(libc::SIGINT, on_signal as *const () as libc::sighandler_t);
        libc::signal(libc::SIGTERM, on_signal as *const () as libc::sighandler_t);
    }
    f
}
