//! The collector's real-RNIC backend (`--features rdma`), for real.
//!
//! 1. On this host (no RDMA device), `dta-collector run` with `backend = "rdma"` must fail with a
//!    message that says no RDMA device was found and how to run the software RNIC instead.
//! 2. Inside the Soft-RoCE VM (`scripts/rxe-vm`): the feature binaries travel in an extra cpio
//!    archive appended to the initramfs; `dta-rdma-selftest loopback` runs a collector with the
//!    backend and connects to its stores through RDMA_CM over rxe (metadata SEND with the rkey,
//!    RDMA WRITE with and without Immediate, FETCH_ADD, READ), checking the collector's query
//!    engine on the same memory; then the real `dta-collector run` CLI serves an external
//!    `dta-rdma-selftest client`.
//!
//! The feature build needs libibverbs-dev, librdmacm-dev, pkg-config and libclang
//! (`scripts/rdma-deps.sh`); without them, or without the VM, the tests print `SKIP: reason`.
//! The binaries are built once per test process into `target/rdma-feature` (a separate target
//! directory, so the outer `cargo test` lock is never contended), release, stripped.

use std::io::Write;

use std::process::{Command, Stdio};

use std::time::{Duration, Instant};

use dta_tests::rdma_feature::{cpio, extra_guest_libs, feature_binaries, run_until};
use dta_tests::rxe_vm::{vm_available, Vm, GUEST_IP};

fn skip(why: &str) {
    let _ = writeln!(std::io::stderr(), "SKIP: {why}");
}

const STORES: &str = r#"
[[store]]
name = "kw"
kind = "keywrite"
slots = 1024
slot_size = 8
port = 1337

[[store]]
name = "cnt"
kind = "keyincrement"
slots = 1024
port = 1338
"#;

fn config(ip: &str) -> String {
    // The in-process client connects from the device's own address (rxe loopback), the CLI's
    // client from the same machine: both in 10.77.0.0/24, outside the default allowlist.
    format!(
        "[collector]\nbackend = \"rdma\"\nroce = \"{ip}:4791\"\nhugepages = true\n\
         cm_allow = [\"10.77.0.0/24\", \"127.0.0.0/8\"]\n{STORES}"
    )
}

#[test]
fn no_device_error_is_clear() {
    let (collector, _) = match feature_binaries() {
        Ok(b) => b,
        Err(why) => return skip(&why),
    };
    let devices = std::fs::read_dir("/sys/class/infiniband")
        .map(|d| d.count())
        .unwrap_or(0);
    if devices > 0 {
        return skip("this host has RDMA devices; the no-device path can't be exercised here");
    }
    let dir = std::env::temp_dir().join(format!("dta-rdma-nodev-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let cfg = dir.join("c.toml");
    std::fs::write(&cfg, config("127.0.0.1")).unwrap();
    let out = Command::new(&collector)
        .args(["run", "--config"])
        .arg(&cfg)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "stderr: {err}");
    assert!(err.contains("no RDMA device found"), "stderr: {err}");
    assert!(err.contains("backend = \"software\""), "stderr: {err}");
}

#[test]
fn backend_serves_rdma_cm_in_rxe_vm() {
    let image = match vm_available() {
        Ok(i) => i,
        Err(why) => return skip(&format!("rxe VM unavailable: {why}")),
    };
    let (collector, selftest) = match feature_binaries() {
        Ok(b) => b,
        Err(why) => return skip(&why),
    };
    let mut files = vec![
        (
            "usr/local/bin/dta-collector",
            std::fs::read(&collector).unwrap(),
            0o755,
        ),
        (
            "usr/local/bin/dta-rdma-selftest",
            std::fs::read(&selftest).unwrap(),
            0o755,
        ),
        (
            "etc/dta/rdma.toml",
            config(&GUEST_IP.to_string()).into_bytes(),
            0o644,
        ),
    ];
    files.extend(extra_guest_libs());
    let archive = cpio(&files);
    let cpio_path = std::env::temp_dir().join(format!("dta-rdma-{}.cpio", std::process::id()));
    std::fs::write(&cpio_path, &archive).unwrap();
    let vm = Vm::boot_with_initrd(&image, &cpio_path).expect("boot the rxe VM");
    let _ = std::fs::remove_file(&cpio_path);
    eprintln!("rxe VM booted in {:.1}s", vm.boot_time().as_secs_f64());

    // The libraries the binaries link (libibverbs, librdmacm, libnl, libgcc_s, glibc 2.36)
    // are all in the guest image.
    let (v, status) = vm.ctl_status("dta-collector --version 2>&1").unwrap();
    assert_eq!(status, 0, "the collector does not run in the guest: {v}");

    // Reserve hugepages so the regions (and so the MRs) are hugepage-backed, as in production.
    let huge = vm
        .ctl("echo 16 > /proc/sys/vm/nr_hugepages; grep HugePages_Total /proc/meminfo")
        .unwrap();
    let hugepages = huge.contains("HugePages_Total") && !huge.contains("HugePages_Total:       0");
    eprintln!("guest hugepages: {}", huge.trim());

    // 1. In-process collector + initiator over rxe loopback, checked with the query engine.
    let t0 = Instant::now();
    let out = run_until(
        &vm,
        "RUST_LOG=info dta-rdma-selftest loopback --config /etc/dta/rdma.toml",
        "/tmp/loopback.log",
        "SELFTEST O",
        Duration::from_secs(120),
    );
    eprintln!(
        "---- loopback selftest ({:.1}s) ----\n{out}",
        t0.elapsed().as_secs_f64()
    );
    assert!(
        out.contains("SELFTEST OK"),
        "loopback selftest failed:\n{out}"
    );
    if hugepages {
        assert!(
            out.contains("keywrite 8192 bytes") && out.contains("(hugepages)"),
            "the regions should be on hugepages:\n{out}"
        );
    }
    assert!(!out.contains("SELFTEST FAIL"), "{out}");
    for want in [
        "metadata record matches the store",
        "is the MR's rkey",
        "query answers Value",
        "counter query (min of 2) = 10",
        "immediate events seen by the collector: 1",
        "reconnect gets the same record",
        "the collector's event carries imm 0xd7a00001",
    ] {
        assert!(out.contains(want), "missing {want:?} in:\n{out}");
    }

    // 2. The real CLI, served to a client in another process.
    let log = run_until(
        &vm,
        "RUST_LOG=info dta-collector run --config /etc/dta/rdma.toml --progress 1",
        "/tmp/collector.log",
        "listening for RDMA_CM on 10.77.0.2:1338",
        Duration::from_secs(60),
    );
    assert!(
        log.contains("listening for RDMA_CM on 10.77.0.2:1337"),
        "{log}"
    );
    for port in [1337, 1338] {
        let out = vm
            .ctl(&format!(
                "timeout 60 dta-rdma-selftest client --server {GUEST_IP}:{port} 2>&1"
            ))
            .unwrap();
        eprintln!("---- client of port {port} ----\n{out}");
        assert!(out.contains("SELFTEST OK"), "client failed:\n{out}");
        assert!(out.contains("META addr="), "{out}");
    }
    let t0 = Instant::now();
    let mut log = String::new();
    while t0.elapsed() < Duration::from_secs(20) {
        log = vm.ctl("cat /tmp/collector.log").unwrap();
        if log.matches("metadata delivered").count() >= 2 && log.matches("closed").count() >= 2 {
            break;
        }
        std::thread::sleep(Duration::from_millis(300));
    }
    vm.ctl("kill -TERM $(pidof dta-collector) 2>/dev/null; sleep 1")
        .unwrap();
    let log = vm.ctl("cat /tmp/collector.log").unwrap_or(log);
    eprintln!("---- collector log ----\n{log}");
    assert_eq!(log.matches("metadata delivered").count(), 2, "{log}");
    assert!(log.contains("closed: RDMA_CM_EVENT_DISCONNECTED"), "{log}");
    assert!(log.contains("shutting down"), "{log}");
}
