//! The CLI's client subcommands against an in-process collector's control API.

use std::process::Command;

use dta_collector::{Collector, CollectorConfig};
use dta_proto::hash::{HashProfile, KeyHasher};
use dta_proto::layout::{AppendFormat, AppendLayout, KeyWriteLayout};
use dta_proto::Key;

const BIN: &str = env!("CARGO_BIN_EXE_dta-collector");

fn run(args: &[&str]) -> (i32, String, String) {
    let o = Command::new(BIN)
        .args(args)
        .env("RUST_LOG", "off")
        .output()
        .unwrap();
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
