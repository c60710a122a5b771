//! Runs the Tofino control plane's unit tests (`p4/control/test_dta_bfrt.py`, a fake bfrt
//! module) with `python3 -m unittest`. Prints SKIP when Python 3.11+ (tomllib) is missing.

use std::io::Write;
use std::path::Path;
use std::process::Command;

#[test]
fn bfrt_control_plane_against_fake_bfrt() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../p4/control");
    let version = Command::new("python3")
        .args(["-c", "import sys; print(sys.version_info >= (3, 11))"])
        .output();
    match version {
        Ok(o) if String::from_utf8_lossy(&o.stdout).trim() == "True" => {}
        Ok(_) => {
            let _ = writeln!(
                std::io::stderr(),
                "SKIP: python3 is older than 3.11 (no tomllib)"
            );
            return;
        }
        Err(e) => {
            let _ = writeln!(std::io::stderr(), "SKIP: python3 not found: {e}");
            return;
        }
    }
    let out = Command::new("python3")
        .args(["-m", "unittest", "-v", "test_dta_bfrt.py"])
        .current_dir(&dir)
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .output()
        .expect("python3 runs");
    let text = String::from_utf8_lossy(&out.stderr);
    let _ = writeln!(std::io::stderr(), "{text}");
    assert!(out.status.success(), "control plane tests failed:\n{text}");
    assert!(text.contains("OK"), "{text}");
}
