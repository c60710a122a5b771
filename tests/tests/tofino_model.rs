//! The P4 translator on Intel's Tofino model, compared with the corpus (p4/README.md, "Tofino
//! model"): `scripts/tofino-model.sh` runs a compiled build on `tofino-model` + `bf_switchd` in
//! a network namespace, `p4/control/twin_check.py` programs it through `bfshell -b
//! p4/control/dta_bfrt.py`, sends a case's reports, captures what leaves and compares it with
//! the case's `expected.pcap`, byte for byte and in order per QP.
//!
//! * `twin_check_harness_against_a_standin` checks that machinery itself, with the stand-ins
//!   of `p4/control/standin/` in place of the SDE (a "model" that replays the expected frames,
//!   a `bfshell` that runs dta_bfrt.py against strict_bfrt): a correct switch passes, a switch
//!   that gets one ICRC byte wrong fails with the field named. Needs root and iproute2.
//! * `corpus_on_the_tofino_model` runs every case the program supports on the real model: it
//!   needs the SDE (`SDE_INSTALL`, default /opt/bf-sde/install) and the compiled builds
//!   (`DTA_TOFINO_BUILDS`: the `P4_OUT` directory of `scripts/p4-check.sh`, one
//!   `dta_translator-N/` per knob set with its `defines`). Without them it prints `SKIP:`.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;

use dta_tests::scratch::ScratchDir;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn skip(test: &str, why: &str) {
    let _ = writeln!(std::io::stderr(), "SKIP: {test}: {why}");
}

/// Why this machine cannot run network namespaces with Python 3.11, if it cannot.
fn netns_missing() -> Option<String> {
    let uid = Command::new("id").arg("-u").output().ok()?;
    if String::from_utf8_lossy(&uid.stdout).trim() != "0" {
        return Some("network namespaces need root".into());
    }
    if Command::new("ip").arg("-V").output().is_err() {
        return Some("iproute2 (ip) not installed".into());
    }
    let py = Command::new("python3")
        .args([
            "-c",
            "import sys, tomllib; print(sys.version_info >= (3, 11))",
        ])
        .output();
    match py {
        Ok(o) if String::from_utf8_lossy(&o.stdout).trim() == "True" => None,
        _ => Some("python3 3.11+ (tomllib) not found".into()),
    }
}

struct Twin {
    equal: bool,
    skipped: bool,
    compared: u64,
    line: String,
}

/// Runs one case through `scripts/tofino-model.sh BUILD PORTS -- twin_check.py CASE`.
fn twin(build: &Path, case: &Path, env: &[(&str, String)], extra: &[&str]) -> Twin {
    let sketch = case.join("case.json");
    let text = std::fs::read_to_string(&sketch).expect("case.json");
    let json: serde_json::Value = serde_json::from_str(&text).expect("case.json parses");
    // Sketch reporters sit on pipe-1 ports (p4/README.md, "Sketch-Merge").
    let report_port = if json.get("sketch").is_some_and(|s| !s.is_null()) {
        "144"
    } else {
        "0"
    };
    let out = Command::new("bash")
        .arg(root().join("scripts/tofino-model.sh"))
        .arg(build)
        .args(["0", "136", "144", "--", "python3"])
        .arg(root().join("p4/control/twin_check.py"))
        .arg(case)
        .args(["--report-port", report_port, "--collector-port", "136"])
        .args(extra)
        .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
        .output()
        .expect("run scripts/tofino-model.sh");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let line = stdout
        .lines()
        .rev()
        .find(|l| l.starts_with('{'))
        .unwrap_or_else(|| panic!("{}: no result\n{stdout}\n{stderr}", case.display()))
        .to_string();
    let r: serde_json::Value = serde_json::from_str(&line).expect("twin_check prints JSON");
    Twin {
        equal: r["equal"].as_bool().unwrap_or(false),
        skipped: r.get("skipped").is_some(),
        compared: r["frames_compared"].as_u64().unwrap_or(0),
        line,
    }
}

/// `p4/control/bfrt/<file>` of the case's build, if committed (bfrt_schema.file_name).
fn reduced_schema(case: &Path) -> Option<PathBuf> {
    let text = std::fs::read_to_string(case.join("case.json")).ok()?;
    let json: serde_json::Value = serde_json::from_str(&text).ok()?;
    let mut flags: Vec<String> = json["p4_defines"]
        .as_str()?
        .split_whitespace()
        .map(|d| {
            let d = d.strip_prefix("-D").unwrap_or(d);
            d.strip_prefix("DTA_").unwrap_or(d).to_lowercase()
        })
        .collect();
    flags.sort();
    let mut name = vec!["dta_translator".to_string()];
    name.extend(flags);
    let file = root()
        .join("p4/control/bfrt")
        .join(format!("{}.json", name.join("__").replace('=', "-")));
    file.exists().then_some(file)
}

#[test]
fn twin_check_harness_against_a_standin() {
    const TEST: &str = "twin_check_harness_against_a_standin";
    if let Some(why) = netns_missing() {
        return skip(TEST, &why);
    }
    let sde = ScratchDir::new("dta-standin-sde");
    std::os::unix::fs::symlink(root().join("p4/control/standin"), sde.path().join("bin"))
        .expect("symlink the stand-in SDE");
    let build = ScratchDir::new("dta-standin-build");
    std::fs::write(build.path().join("dta_translator.conf"), "{}\n").expect("conf");
    for (case, corrupt) in [
        ("keywrite_psn_resync", false),
        ("sketch_gap_nack", false),
        ("keywrite_psn_resync", true),
    ] {
        let dir = root().join("tests/corpus").join(case);
        let mut env = vec![
            ("SDE_INSTALL", sde.path().display().to_string()),
            ("DTA_STANDIN_CASE", dir.display().to_string()),
            (
                "DTA_STANDIN_CORRUPT",
                if corrupt { "1" } else { "0" }.to_string(),
            ),
            ("TF_START_TIMEOUT", "30".to_string()),
        ];
        // With the build's reduced bf-rt.json, the stand-in bfshell writes through strict_bfrt.
        if let Some(schema) = reduced_schema(&dir) {
            env.push(("DTA_STANDIN_SCHEMA", schema.display().to_string()));
        }
        let out = build.path().join(format!("out-{case}-{corrupt}"));
        let out = out.display().to_string();
        let r = twin(
            build.path(),
            &dir,
            &env,
            &["--quiet-ms", "300", "--out", &out],
        );
        if corrupt {
            assert!(!r.equal, "{case}: a wrong ICRC passed: {}", r.line);
            assert!(r.line.contains("\"ICRC\""), "{case}: {}", r.line);
        } else {
            assert!(r.equal && r.compared > 0, "{case}: {}", r.line);
        }
    }
}

#[test]
fn corpus_on_the_tofino_model() {
    const TEST: &str = "corpus_on_the_tofino_model";
    let sde = std::env::var("SDE_INSTALL").unwrap_or_else(|_| "/opt/bf-sde/install".into());
    if !Path::new(&sde).join("bin/tofino-model").exists() {
        return skip(
            TEST,
            &format!(
                "{sde}/bin/tofino-model not installed (p4/README.md, \"Tofino model\", says why it \
                 cannot be built from public sources here)"
            ),
        );
    }
    let Ok(builds) = std::env::var("DTA_TOFINO_BUILDS") else {
        return skip(
            TEST,
            "DTA_TOFINO_BUILDS unset (the P4_OUT directory of scripts/p4-check.sh)",
        );
    };
    if let Some(why) = netns_missing() {
        return skip(TEST, &why);
    }
    // The compiled translator builds by their -D flags.
    let mut by_defines = std::collections::HashMap::new();
    for e in std::fs::read_dir(&builds).expect("DTA_TOFINO_BUILDS is a directory") {
        let p = e.expect("entry").path();
        let name = p
            .file_name()
            .unwrap_or_default()
            .to_string_lossy()
            .into_owned();
        if let (true, Ok(d)) = (
            name.starts_with("dta_translator-"),
            std::fs::read_to_string(p.join("defines")),
        ) {
            by_defines.insert(d.split_whitespace().collect::<Vec<_>>().join(" "), p);
        }
    }
    let mut cases: Vec<PathBuf> = std::fs::read_dir(root().join("tests/corpus"))
        .expect("corpus")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.join("case.json").exists())
        .collect();
    cases.sort();
    let (mut equal, mut differing, mut skipped, mut frames) = (0, 0, 0, 0);
    let mut report = Vec::new();
    for case in &cases {
        let text = std::fs::read_to_string(case.join("case.json")).expect("case.json");
        let json: serde_json::Value = serde_json::from_str(&text).expect("case.json parses");
        let defines = json["p4_defines"]
            .as_str()
            .unwrap_or("")
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ");
        let name = case.file_name().unwrap_or_default().to_string_lossy();
        if json.get("p4_unsupported").is_some_and(|v| !v.is_null()) {
            skipped += 1;
            continue;
        }
        let Some(build) = by_defines.get(&defines) else {
            report.push(format!(
                "{name}: no build with defines {defines:?} (skipped)"
            ));
            skipped += 1;
            continue;
        };
        let r = twin(build, case, &[("SDE_INSTALL", sde.clone())], &[]);
        frames += r.compared;
        if r.skipped {
            skipped += 1;
        } else if r.equal {
            equal += 1;
        } else {
            differing += 1;
            report.push(format!("{name}: {}", r.line));
        }
    }
    let _ = writeln!(
        std::io::stderr(),
        "twin check on tofino-model: {equal} equal, {differing} differing, {skipped} skipped; \
         {frames} frames compared\n{}",
        report.join("\n")
    );
    assert_eq!(differing, 0, "{}", report.join("\n"));
}
