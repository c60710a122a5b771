//! The CLI's client subcommands against an in-process collector's control API.

use std::io::Write as _;
use std::process::{Command, Stdio};

use dta_collector::{Collector, CollectorConfig};
use dta_proto::hash::{HashProfile, KeyHasher};
use dta_proto::layout::{AppendFormat, AppendLayout, KeyWriteLayout};
use dta_proto::Key;

const BIN: &str = env!("CARGO_BIN_EXE_dta-collector");

fn run(args: &[&str]) -> (i32, String, String) {
    run_with_stdin(args, b"")
}

fn run_with_stdin(args: &[&str], stdin: &[u8]) -> (i32, String, String) {
    let mut child = Command::new(BIN)
        .args(args)
        .env("RUST_LOG", "off")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(stdin).unwrap();
    let o = child.wait_with_output().unwrap();
    (
        o.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

#[test]
fn query_tail_stats_and_errors() {
    let cfg = CollectorConfig::from_toml(
        r#"
[collector]
roce = "127.0.0.1:0"
control = "127.0.0.1:0"
hugepages = false
[[store]]
name = "paths"
kind = "keywrite"
slots = 256
slot_size = 8
redundancy = 1
[[store]]
name = "events"
kind = "append"
lists = 1
first_list = 7
capacity = 4
entry_size = 4
batch = 2
"#,
    )
    .unwrap();
    let c = Collector::start(cfg).unwrap();
    let addr = c.control_addr().unwrap().to_string();
    let key = Key::new(&[10, 0, 0, 1, 10, 0, 0, 2, 6, 0, 1, 0, 2]).unwrap();
    let l = KeyWriteLayout::new(256, 8).unwrap();
    let h = KeyHasher::new(HashProfile::Independent, 256).unwrap();
    let mut slot = [0u8; 8];
    l.encode_slot(h.checksum(&key), &[0xde, 0xad, 0xbe, 0xef], &mut slot);
    let region = &c.store("paths").unwrap().region;
    region.write(l.slot_offset(h.slot(&key, 0)), &slot).unwrap();

    let (rc, out, err) = run(&[
        "query",
        "keywrite",
        "10.0.0.1:1-10.0.0.2:2/tcp",
        "-n",
        "1",
        "--control",
        &addr,
    ]);
    assert_eq!(rc, 0, "{err}");
    assert!(out.contains("\"value\":\"deadbeef\""), "{out}");
    // Without -n the store's N (1) is read.
    let (rc, out, err) = run(&[
        "query",
        "keywrite",
        "10.0.0.1:1-10.0.0.2:2/tcp",
        "--control",
        &addr,
    ]);
    assert_eq!(rc, 0, "{err}");
    assert!(
        out.contains("\"value\":\"deadbeef\"") && out.contains("\"n\":1"),
        "{out}"
    );
    // Another N is refused, unless forced (and then the answer says so).
    let (rc, _, err) = run(&["query", "keywrite", "0a", "-n", "2", "--control", &addr]);
    assert_eq!(rc, 1);
    assert!(err.contains("N=1") && err.contains("force"), "{err}");
    let (rc, out, err) = run(&[
        "query",
        "keywrite",
        "0a",
        "-n",
        "2",
        "--force",
        "--control",
        &addr,
    ]);
    assert_eq!(rc, 0, "{err}");
    assert!(out.contains("\"forced\":true"), "{out}");
    // Out-of-range numbers are refused by the CLI with the range that is valid.
    let (rc, _, err) = run(&["query", "keywrite", "0a", "-n", "300", "--control", &addr]);
    assert_eq!(rc, 2);
    assert!(err.contains("1..=8"), "{err}");
    let (rc, _, err) = run(&["query", "keywrite", "0a", "-n", "0", "--control", &addr]);
    assert_eq!(rc, 2);
    assert!(err.contains("1..=8"), "{err}");
    let (rc, _, err) = run(&[
        "query",
        "keywrite",
        "0a",
        "--threshold",
        "9",
        "--control",
        &addr,
    ]);
    assert_eq!(rc, 2, "{err}");
    let (rc, _, err) = run(&[
        "query",
        "keywrite",
        "0a",
        "--threshold",
        "2",
        "--control",
        &addr,
    ]);
    assert_eq!(rc, 1);
    assert!(err.contains("threshold"), "{err}");
    let (rc, _, err) = run(&["query", "keywrite", "--control", &addr]);
    assert_eq!(rc, 2);
    assert!(err.contains("KEY") || err.contains("key"), "{err}");

    // Many keys in one request: from a file, and from standard input.
    let keys = std::env::temp_dir().join(format!("dta-cli-keys-{}", std::process::id()));
    std::fs::write(&keys, "0a\n10.0.0.1:1-10.0.0.2:2/tcp\n# comment\nxyz\n").unwrap();
    let kf = keys.display().to_string();
    let (rc, out, err) = run(&["query", "keywrite", "--keys-file", &kf, "--control", &addr]);
    assert_eq!(rc, 0, "{err}");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 3, "{out}");
    assert!(lines[0].contains("\"result\":\"empty\""), "{out}");
    assert!(lines[1].contains("\"value\":\"deadbeef\""), "{out}");
    assert!(lines[2].contains("\"error\""), "{out}");
    let (rc, out, err) = run_with_stdin(
        &["query", "keywrite", "--keys-file", "-", "--control", &addr],
        br#"["10.0.0.1:1-10.0.0.2:2/tcp", "0a"]"#,
    );
    assert_eq!(rc, 0, "{err}");
    assert_eq!(out.lines().count(), 2, "{out}");
    assert!(out.lines().next().unwrap().contains("deadbeef"), "{out}");
    let (rc, _, err) = run(&[
        "query",
        "keywrite",
        "0a",
        "--keys-file",
        &kf,
        "--control",
        &addr,
    ]);
    assert_eq!(rc, 2, "a key and a keys file: {err}");
    let _ = std::fs::remove_file(&keys);

    let al = AppendLayout::new(AppendFormat::Sequenced, 4, 4, 2).unwrap();
    let mut b = [0u8; 16];
    b[..8].copy_from_slice(b"abcdefgh");
    b[8..].copy_from_slice(&al.encode_trailer(1, 2));
    c.store("events").unwrap().region.write(0, &b).unwrap();
    let (rc, out, err) = run(&["tail", "7", "--control", &addr]);
    assert_eq!(rc, 0, "{err}");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 2, "{out}");
    assert!(lines[0].contains("\"entry\":\"61626364\"") && lines[0].contains("\"seq\":1"));

    // A poll interval of 0 would busy-loop the collector: refused, with the minimum.
    let (rc, _, err) = run(&[
        "tail",
        "7",
        "--follow",
        "--interval-ms",
        "0",
        "--control",
        &addr,
    ]);
    assert_eq!(rc, 2);
    assert!(err.contains("10.."), "{err}");

    let (rc, out, _) = run(&["stats", "--control", &addr]);
    assert_eq!(rc, 0);
    assert!(out.contains("\"rnic\""));
    let (rc, _, err) = run(&["query", "counter", "00", "--control", &addr]);
    assert_eq!(rc, 1);
    assert!(err.contains("no keyincrement store"), "{err}");
    let (rc, _, err) = run(&["query", "keywrite", "xyz", "--control", &addr]);
    assert_eq!(rc, 1);
    assert!(err.contains("not a key"), "{err}");
    c.shutdown();

    let (rc, _, err) = run(&["stats", "--control", &addr]);
    assert_eq!(rc, 1);
    assert!(err.contains("cannot reach the collector"), "{err}");
    let (rc, _, err) = run(&["stats"]);
    assert_eq!(rc, 1);
    assert!(err.contains("--control"), "{err}");
}

/// `epoch` needs the admin token (`--token-file`); read-only commands do not. Over TLS with
/// basic auth, the CLI trusts `--ca-file` and takes the credentials from `DTA_BASIC_AUTH`.
#[test]
fn epoch_needs_the_token_and_tls_with_basic_auth_works() {
    use std::os::unix::fs::PermissionsExt as _;
    let dir = std::env::temp_dir().join(format!("dta-cli-sec-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let token = dir.join("token");
    std::fs::write(&token, "cli-test-admin-token-0123456789\n").unwrap();
    std::fs::set_permissions(&token, std::fs::Permissions::from_mode(0o600)).unwrap();
    let data = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../io/http/tests/data");
    let web = dir.join("web.toml");
    std::fs::write(
        &web,
        format!(
            "[tls_server_config]\ncert_file = {:?}\nkey_file = {:?}\n[basic_auth_users]\n\
             ops = {:?}\n",
            data.join("server.pem"),
            data.join("server.key"),
            bcrypt::hash("pw", 4).unwrap()
        ),
    )
    .unwrap();
    let cfg = CollectorConfig::from_toml(&format!(
        "[collector]\nroce = \"127.0.0.1:0\"\ncontrol = \"127.0.0.1:0\"\nhugepages = false\n\
         admin_token_file = {token:?}\nweb_config_file = {web:?}\n\
         [[store]]\nname = \"counts\"\nkind = \"keyincrement\"\nslots = 64\n"
    ))
    .unwrap();
    let c = Collector::start(cfg).unwrap();
    let url = format!("https://{}", c.control_addr().unwrap());
    let ca = data.join("ca.pem");
    let cli = |args: &[&str], basic: Option<&str>| {
        let mut cmd = Command::new(BIN);
        cmd.args(args)
            .env("RUST_LOG", "off")
            .env_remove("DTA_BASIC_AUTH");
        if let Some(b) = basic {
            cmd.env("DTA_BASIC_AUTH", b);
        }
        let o = cmd.output().unwrap();
        (
            o.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&o.stdout).into_owned(),
            String::from_utf8_lossy(&o.stderr).into_owned(),
        )
    };
    let ca = ca.to_str().unwrap();
    let (rc, _, err) = cli(&["stats", "--control", &url, "--ca-file", ca], None);
    assert_eq!(rc, 1);
    assert!(err.contains("authentication required"), "{err}");
    let (rc, out, err) = cli(
        &["stats", "--control", &url, "--ca-file", ca],
        Some("ops:pw"),
    );
    assert_eq!(rc, 0, "{err}");
    assert!(out.contains("\"rnic\""));
    let (rc, _, err) = cli(
        &["epoch", "counts", "--control", &url, "--ca-file", ca],
        Some("ops:pw"),
    );
    assert_eq!(rc, 1);
    assert!(err.contains("admin bearer token"), "{err}");
    let t = token.to_str().unwrap();
    let (rc, out, err) = cli(
        &[
            "epoch",
            "counts",
            "--control",
            &url,
            "--ca-file",
            ca,
            "--token-file",
            t,
        ],
        None,
    );
    assert_eq!(rc, 0, "{err}");
    assert!(out.contains("\"epoch\":1"), "{out}");
    c.shutdown();
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `check` refuses a metadata file in a directory other users can write to (the collector
/// would only find out after allocating every store), and accepts one it would create.
#[test]
fn check_refuses_a_shared_metadata_directory() {
    use std::os::unix::fs::PermissionsExt as _;
    let dir = std::env::temp_dir().join(format!("dta-cli-check-{}", std::process::id()));
    let shared = dir.join("shared");
    std::fs::create_dir_all(&shared).unwrap();
    std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o777)).unwrap();
    let config = |meta: &std::path::Path| {
        let f = dir.join("c.toml");
        std::fs::write(
            &f,
            format!(
                "[collector]\nroce = \"127.0.0.1:4791\"\nhugepages = false\n\
                 metadata_file = \"{}\"\n[[store]]\nname = \"kw\"\nkind = \"keywrite\"\n\
                 slots = 16\n",
                meta.display()
            ),
        )
        .unwrap();
        f
    };
    let f = config(&shared.join("collector.json"));
    let (code, _, err) = run(&["check", "-c", f.to_str().unwrap()]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("can be written by other users"), "{err}");
    let f = config(&dir.join("private/collector.json"));
    let (code, out, err) = run(&["check", "-c", f.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("metadata file"), "{out}");
    assert!(!dir.join("private").exists(), "check created the directory");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A client subcommand whose reader goes away (`stats | head -c 10`) ends without a panic.
#[test]
fn a_closed_stdout_ends_a_client_command_quietly() {
    let c = Collector::start(
        CollectorConfig::from_toml(
            "[collector]\nroce = \"127.0.0.1:0\"\ncontrol = \"127.0.0.1:0\"\nhugepages = false\n\
             [[store]]\nname = \"kw\"\nkind = \"keywrite\"\nslots = 4096\n",
        )
        .unwrap(),
    )
    .unwrap();
    let addr = c.control_addr().unwrap().to_string();
    let mut child = Command::new(BIN)
        .args(["stats", "--control", &addr])
        .env("RUST_LOG", "off")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Close the read end at once: every write of the (multi-KiB) answer hits a closed pipe.
    drop(child.stdout.take());
    let o = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!err.contains("panicked"), "{err}");
}

#[test]
fn export_explains_itself_and_refuses_what_cannot_work() {
    let (code, out, _) = run(&["export", "--help"]);
    assert_eq!(code, 0);
    assert!(
        out.contains("ClickHouse") && out.contains("exactly once"),
        "{out}"
    );
    let dir = std::env::temp_dir().join(format!("dta-cli-export-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let base = "[collector]\nhugepages = false\ncontrol = \"127.0.0.1:1\"\n\
                [[store]]\nname = \"ev\"\nkind = \"append\"\nlists = 1\ncapacity = 4\nbatch = 2\n";
    let cfg = dir.join("c.toml");
    // No section.
    std::fs::write(&cfg, base).unwrap();
    let (code, _, err) = run(&["export", "-c", cfg.to_str().unwrap()]);
    assert_eq!(code, 1);
    assert!(err.contains("no [export.clickhouse] section"), "{err}");
    // A password file that is not there.
    std::fs::write(
        &cfg,
        format!(
            "{base}[export.clickhouse]\nurl = \"http://127.0.0.1:1\"\nstate_file = \"{}\"\n\
             password_file = \"{}\"\n",
            dir.join("s.json").display(),
            dir.join("missing").display()
        ),
    )
    .unwrap();
    let (code, _, err) = run(&["export", "-c", cfg.to_str().unwrap()]);
    assert_eq!(code, 1);
    assert!(err.contains("password_file"), "{err}");
    // A wrong key is refused by `check` too, with its name.
    std::fs::write(
        &cfg,
        format!(
            "{base}[export.clickhouse]\nurl = \"http://h\"\nstate_file = \"s\"\nbatch_rows = 0\n"
        ),
    )
    .unwrap();
    let (code, _, err) = run(&["check", "-c", cfg.to_str().unwrap()]);
    assert_ne!(code, 0);
    assert!(err.contains("batch_rows"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}
