//! Runs `scripts/p4-check.sh`: the P4 programs preprocess cleanly under every knob combination
//! and, where `p4test` exists, compile with the P4 front end. Prints SKIP when bash is missing.

use std::io::Write;
use std::path::Path;
use std::process::Command;

#[test]
fn p4_programs_check() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let out = match Command::new("bash")
        .arg(root.join("scripts/p4-check.sh"))
        .output()
    {
        Ok(o) => o,
        Err(e) => {
            let _ = writeln!(std::io::stderr(), "SKIP: cannot run bash: {e}");
            return;
        }
    };
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let _ = writeln!(std::io::stderr(), "{text}");
    assert!(out.status.success(), "scripts/p4-check.sh failed:\n{text}");
    assert!(!text.contains("FAIL"), "{text}");
}
