//! No QEMU outlives a test that panics: the VM harness stops QEMU while unwinding (two VMs
//! leaked after test panics in an earlier session). Skips (and passes) where the VM can't run.

use std::io::{self, Write};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use dta_tests::rxe_vm::{process_alive, vm_available, Vm};

#[test]
fn a_panicking_test_leaves_no_qemu_behind() {
    let image = match vm_available() {
        Ok(image) => image,
        Err(reason) => {
            let _ = writeln!(io::stderr(), "SKIP: rxe VM not available: {reason}");
            return;
        }
    };
    let pid = Arc::new(AtomicU32::new(0));
    let seen = pid.clone();
    // A "test" that boots a VM and then panics while holding it.
    let r = std::thread::spawn(move || {
        let vm = Vm::boot(&image).expect("VM boots");
        seen.store(vm.qemu_pid(), Ordering::SeqCst);
        assert!(
            process_alive(vm.qemu_pid()),
            "QEMU runs while the test holds the VM"
        );
        panic!("deliberate test failure with a live VM");
    })
    .join();
    assert!(r.is_err(), "the inner test panicked");
    let pid = pid.load(Ordering::SeqCst);
    assert_ne!(pid, 0, "the VM booted before the panic");
    // Unwinding dropped the VM, which stopped QEMU (TERM, then KILL after 5 s).
    let t0 = Instant::now();
    while process_alive(pid) && t0.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(
        !process_alive(pid),
        "QEMU {pid} survived the panicking test"
    );
}
