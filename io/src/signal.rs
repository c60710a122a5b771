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

/// Lets SIGPIPE end the process quietly, as it ends other command-line tools: Rust ignores
/// it, so `dta-collector stats | head` would panic on the closed pipe instead. For the
/// client subcommands that print to standard output; long-running services keep ignoring it
/// (a closed socket is an error they handle).
pub fn quiet_sigpipe() {
    // SAFETY: setting SIGPIPE's disposition to the default has no preconditions; it is done
    // before any thread is started.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}
