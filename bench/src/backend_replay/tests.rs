use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::freezer::FREEZER_ROOT;
use super::*;
use crate::sys;

/// A frozen thread's CPU clock stops and resumes after the thaw; SKIP without the cgroup
/// v1 freezer or root.
#[test]
fn freezer_stops_a_spinning_thread_and_lets_it_go() {
    use std::io::Write;
    let f = match Freezer::new("selftest") {
        Ok(f) => f,
        Err(e) => {
            let _ = writeln!(std::io::stderr(), "SKIP: freezer: {e}");
            return;
        }
    };
    let stop = Arc::new(AtomicBool::new(false));
    let spins = Arc::new(AtomicU64::new(0));
    let (tx, rx) = std::sync::mpsc::channel();
    let (s2, n2) = (stop.clone(), spins.clone());
    let th = std::thread::spawn(move || {
        tx.send(crate::sys::gettid()).unwrap();
        while !s2.load(Ordering::Relaxed) {
            n2.fetch_add(1, Ordering::Relaxed);
        }
    });
    let tid = rx.recv().unwrap();
    if let Err(e) = f.freeze(tid) {
        stop.store(true, Ordering::Relaxed);
        let _ = th.join();
        let _ = writeln!(std::io::stderr(), "SKIP: freezer: {e}");
        return;
    }
    let (c0, n0) = (
        sys::task_cpu_ns(tid).unwrap(),
        spins.load(Ordering::Relaxed),
    );
    std::thread::sleep(Duration::from_millis(100));
    let (c1, n1) = (
        sys::task_cpu_ns(tid).unwrap(),
        spins.load(Ordering::Relaxed),
    );
    assert_eq!(n1, n0, "a frozen thread does not run");
    assert!(c1 - c0 < 1_000_000, "its CPU clock stops: {} ns", c1 - c0);
    f.thaw().unwrap();
    let t = Instant::now();
    while spins.load(Ordering::Relaxed) == n1 && t.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(1));
    }
    assert!(
        spins.load(Ordering::Relaxed) > n1,
        "it runs again after the thaw"
    );
    stop.store(true, Ordering::Relaxed);
    th.join().unwrap();
    drop(f);
    assert!(
        !Path::new(FREEZER_ROOT)
            .join(format!("dta-bench-{}-selftest", std::process::id()))
            .exists(),
        "the cgroup is removed"
    );
}

#[test]
fn rnic_acceptance_counts_resends_and_refuses_any_rejection() {
    let c = |executed, resent, rejected| Comparison {
        frames: 3547,
        rnic_executed: Some(executed),
        rnic_resent: Some(resent),
        rnic_rejected: Some(rejected),
        ..Comparison::default()
    };
    // The CI run that failed the old rule (executed >= 90 % of frames) under load.
    assert!(c(3189, 358, 0).rnic_accepted());
    assert!(
        !c(3189, 0, 0).rnic_accepted(),
        "frames neither executed nor resends"
    );
    assert!(!c(3546, 0, 1).rnic_accepted(), "one rejected frame");
    assert!(
        Comparison::default().rnic_accepted(),
        "no RNIC: nothing to judge"
    );
}
