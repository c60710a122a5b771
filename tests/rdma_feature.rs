//! Building the collector with the `rdma` feature and shipping binaries into the rxe VM.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use crate::rxe_vm::Vm;

/// The workspace root.
pub fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Paths of `dta-collector` and `dta-rdma-selftest` built with `--features rdma`, or why not
/// (`dta-agent`, built with them: [`agent_binary`]).
pub fn feature_binaries() -> Result<(PathBuf, PathBuf), String> {
    static BUILT: OnceLock<Result<(PathBuf, PathBuf), String>> = OnceLock::new();
    BUILT.get_or_init(build_feature_binaries).clone()
}

/// `dta-agent` built with its `rdma` feature (a real RNIC answers READs), or why not.
pub fn agent_binary() -> Result<PathBuf, String> {
    let (collector, _) = feature_binaries()?;
    Ok(collector.with_file_name("dta-agent"))
}

fn build_feature_binaries() -> Result<(PathBuf, PathBuf), String> {
    for (h, pkg) in [
        ("/usr/include/infiniband/verbs.h", "libibverbs-dev"),
        ("/usr/include/rdma/rdma_cma.h", "librdmacm-dev"),
    ] {
        if !Path::new(h).is_file() {
            return Err(format!(
                "{pkg} is not installed (scripts/rdma-deps.sh installs it), so the `rdma` \
                 feature can't be built"
            ));
        }
    }
    let target = workspace().join("target/rdma-feature");
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let t0 = Instant::now();
    let out = Command::new(cargo)
        .current_dir(workspace())
        .args([
            "build",
            "-p",
            "dta-collector",
            "-p",
            "dta-agent",
            "--features",
            "dta-collector/rdma,dta-agent/rdma",
            "--release",
            "--bins",
            "--target-dir",
        ])
        .arg(&target)
        .env("CARGO_PROFILE_RELEASE_DEBUG", "0")
        .env("CARGO_PROFILE_RELEASE_STRIP", "true")
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("cannot run cargo: {e}"))?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        let tail: Vec<&str> = err.lines().rev().take(15).collect();
        let tail: Vec<&str> = tail.into_iter().rev().collect();
        // A missing libclang (bindgen) is a missing optional piece, not a failure of ours.
        if err.contains("libclang") || err.contains("pkg-config") {
            return Err(format!(
                "the rdma feature build lacks a system piece (scripts/rdma-deps.sh): {}",
                tail.join(" | ")
            ));
        }
        panic!("cargo build --features rdma failed:\n{}", tail.join("\n"));
    }
    eprintln!(
        "built the rdma feature binaries in {:.1}s",
        t0.elapsed().as_secs_f64()
    );
    let dir = target.join("release");
    Ok((dir.join("dta-collector"), dir.join("dta-rdma-selftest")))
}

/// A newc cpio archive holding `files` (guest path, contents, mode) and their directories.
pub fn cpio(files: &[(&str, Vec<u8>, u32)]) -> Vec<u8> {
    fn entry(out: &mut Vec<u8>, ino: u32, name: &str, mode: u32, data: &[u8]) {
        let hdr = format!(
            "070701{ino:08x}{mode:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}",
            0,
            0,
            1,
            0,
            data.len(),
            0,
            0,
            0,
            0,
            name.len() + 1,
            0
        );
        out.extend_from_slice(hdr.as_bytes());
        out.extend_from_slice(name.as_bytes());
        out.push(0);
        while !out.len().is_multiple_of(4) {
            out.push(0);
        }
        out.extend_from_slice(data);
        while !out.len().is_multiple_of(4) {
            out.push(0);
        }
    }
    let mut out = Vec::new();
    let mut ino = 1000;
    let mut dirs: Vec<String> = Vec::new();
    for (path, _, _) in files {
        let mut p = Path::new(path).parent();
        let mut chain = Vec::new();
        while let Some(d) = p.filter(|d| !d.as_os_str().is_empty()) {
            chain.push(d.to_string_lossy().into_owned());
            p = d.parent();
        }
        for d in chain.into_iter().rev() {
            if !dirs.contains(&d) {
                dirs.push(d);
            }
        }
    }
    for d in &dirs {
        ino += 1;
        entry(&mut out, ino, d, 0o040755, &[]);
    }
    for (path, data, mode) in files {
        ino += 1;
        entry(&mut out, ino, path, 0o100000 | mode, data);
    }
    entry(&mut out, 0, "TRAILER!!!", 0, &[]);
    out
}

/// Runs `cmd` in the guest in the background, output to `log`, and waits until the log
/// contains `done` (returns the log) or `timeout` passes.
pub fn run_until(vm: &Vm, cmd: &str, log: &str, done: &str, timeout: Duration) -> String {
    vm.ctl(&format!("( {cmd} ) > {log} 2>&1 &")).unwrap();
    let t0 = Instant::now();
    loop {
        let out = vm.ctl(&format!("cat {log}")).unwrap();
        if out.contains(done) || t0.elapsed() > timeout {
            return out;
        }
        std::thread::sleep(Duration::from_millis(300));
    }
}

/// Host libraries the feature binaries need that the VM image does not ship (glibc's libm,
/// pulled in by floating-point math in the estimates), as cpio entries. Host and guest are
/// both Debian 12, so the host's copy matches the guest's glibc.
pub fn extra_guest_libs() -> Vec<(&'static str, Vec<u8>, u32)> {
    let mut out = Vec::new();
    for (guest, host) in [(
        "lib/x86_64-linux-gnu/libm.so.6",
        "/lib/x86_64-linux-gnu/libm.so.6",
    )] {
        if let Ok(bytes) =
            std::fs::read(std::fs::canonicalize(host).unwrap_or_else(|_| host.into()))
        {
            out.push((guest, bytes, 0o644));
        }
    }
    out
}
