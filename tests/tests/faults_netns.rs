//! The fast network-fault experiments of `scripts/faults/` (issue 7), run against the real
//! binaries in network namespaces: `loss.sh --quick` (loss and duplication on the
//! translator↔collector link, loss/reordering/duplication on the reporter link with exact NACK
//! bookkeeping, accounting identity, no malformed entry) and a short `overload.sh` (2× the
//! message cap). About 45 s together. Prints `SKIP: reason` and passes when not root, when
//! the tools are missing, or when the binaries have not been built
//! (`cargo build --release -p dta-collector -p dta-translator -p dta-bench`).
//! `restart.sh` (~35 s) and `soak.sh` (10 min) stay one command away.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;

fn skip(why: &str) {
    let _ = writeln!(std::io::stderr(), "SKIP: faults_netns: {why}");
}

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace root")
        .to_path_buf()
}

/// The directory holding both server binaries: `$DTA_BIN`, else `target/release`, else
/// `target/debug` (under `$CARGO_TARGET_DIR` when set).
fn binaries() -> Option<PathBuf> {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| root().join("target"));
    let mut dirs: Vec<PathBuf> = std::env::var_os("DTA_BIN")
        .map(PathBuf::from)
        .into_iter()
        .collect();
    dirs.push(target.join("release"));
    dirs.push(target.join("debug"));
    dirs.into_iter()
        .find(|d| d.join("dta-collector").is_file() && d.join("dta-translator").is_file())
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
        .unwrap_or(false)
}

/// Runs a script; returns its output, or None when it printed SKIP.
fn run(bin: &Path, script: &str, args: &[&str]) -> Option<String> {
    let out = Command::new("bash")
        .arg(root().join("scripts/faults").join(script))
        .args(args)
        .env("DTA_BIN", bin)
        .output()
        .expect("bash runs");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    if let Some(line) = text.lines().find(|l| l.starts_with("SKIP:")) {
        skip(&format!("{script}: {line}"));
        return None;
    }
    for line in text.lines().filter(|l| {
        l.starts_with("FIGURE") || l.starts_with("KNOWN-FAIL") || l.starts_with("RESULT")
    }) {
        println!("{script}: {line}");
    }
    assert!(
        out.status.success() && text.contains("RESULT: PASS"),
        "{script} failed:\n{text}"
    );
    Some(text)
}

#[test]
fn fast_fault_scripts_pass() {
    if !is_root() {
        return skip("not root (network namespaces need CAP_NET_ADMIN)");
    }
    let Some(bin) = binaries() else {
        return skip("dta-collector / dta-translator not built (cargo build --release -p dta-collector -p dta-translator)");
    };
    if let Some(text) = run(&bin, "loss.sh", &["--quick"]) {
        assert!(text.contains("PASS: R->T"), "the NACK checks ran");
        assert!(
            !text.lines().any(|l| l.starts_with("FAIL:")),
            "no failed check:\n{text}"
        );
    }
    if let Some(text) = run(&bin, "overload.sh", &["4000", "8"]) {
        assert!(text.contains("PASS: cap holds within 5%"), "{text}");
    }
}
