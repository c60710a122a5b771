//! The operator interface end to end: a running Collector with a control port, data written
//! into its regions as translators would, and every endpoint fetched over HTTP. `/metrics` is
//! checked with `promtool check metrics` when promtool is installed
//! (`scripts/prepare-tools.sh`), and always with this file's own exposition-format parser.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use serde_json::Value;

use dta_collector::client::request;
use dta_collector::query::postcard::encode_chunk;
use dta_collector::{Collector, CollectorConfig};
use dta_proto::hash::{HashProfile, KeyHasher, PostcardHasher, MAX_REDUNDANCY};
use dta_proto::layout::{AppendFormat, AppendLayout, KeyWriteLayout, PostcardLayout};
use dta_proto::Key;

const CONFIG: &str = r#"
[collector]
roce = "127.0.0.1:0"
control = "127.0.0.1:0"
hugepages = false

[[store]]
name = "paths"
kind = "keywrite"
slots = 1024
slot_size = 32

[[store]]
name = "counts"
kind = "keyincrement"
slots = 1024

[[store]]
name = "events"
kind = "append"
lists = 2
first_list = 10
capacity = 16
entry_size = 4
batch = 4

[[store]]
name = "postcards"
kind = "postcard"
chunks = 1024
hops = 5
redundancy = 2
values = [[1, 1000]]
"#;

/// The admin token of the tests' collectors (`POST /epoch` needs it).
const TOKEN: &str = "metrics-test-admin-token-0123456789";

/// A collector with the admin token in a file of its own, which is removed once the collector
/// has read it at start (every run used to leave a `dta-metrics-token-PID` directory behind).
fn start() -> (Collector, String) {
    use std::os::unix::fs::PermissionsExt as _;
    use std::sync::atomic::{AtomicUsize, Ordering};
    static STARTED: AtomicUsize = AtomicUsize::new(0);
    let dir = std::env::temp_dir().join(format!(
        "dta-metrics-token-{}-{}",
        std::process::id(),
        STARTED.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let token = dir.join("token");
    std::fs::write(&token, TOKEN).unwrap();
    std::fs::set_permissions(&token, std::fs::Permissions::from_mode(0o600)).unwrap();
    let cfg = CONFIG.replace(
        "hugepages = false\n",
        &format!("hugepages = false\nadmin_token_file = {token:?}\n"),
    );
    let cfg = CollectorConfig::from_toml(&cfg).unwrap();
    let c = Collector::start(cfg);
    std::fs::remove_dir_all(&dir).unwrap();
    let c = c.unwrap();
    let addr = c.control_addr().expect("control API runs").to_string();
    (c, addr)
}

fn get(addr: &str, path: &str) -> (u16, String) {
    let r = request(addr, "GET", path).unwrap();
    (r.status, r.body)
}

fn json(addr: &str, path: &str) -> Value {
    let (s, b) = get(addr, path);
    assert_eq!(s, 200, "{path}: {b}");
    serde_json::from_str(&b).unwrap()
}

/// The 13-byte key of 10.0.0.1:8080-10.0.0.2:80/udp.
fn flow() -> Key {
    Key::new(&[10, 0, 0, 1, 10, 0, 0, 2, 17, 0x1f, 0x90, 0, 80]).unwrap()
}
const FLOW: &str = "10.0.0.1:8080-10.0.0.2:80/udp";

#[test]
fn every_endpoint_answers_from_memory() {
    let (c, addr) = start();
    // Key-Write: N = 2 replicas of a 20-byte path.
    let kw = c.store("paths").unwrap();
    let l = KeyWriteLayout::new(1024, 32).unwrap();
    let h = KeyHasher::new(HashProfile::Independent, 1024).unwrap();
    let mut s = [0u32; MAX_REDUNDANCY];
    let cs = h.checksum_and_slots(&flow(), 2, &mut s);
    let mut slot = [0u8; 32];
    l.encode_slot(cs, &[1, 2, 3, 4], &mut slot);
    for &x in &s[..2] {
        kw.region.write(l.slot_offset(x), &slot).unwrap();
    }
    let v = json(&addr, &format!("/query/keywrite/paths/{FLOW}?n=2"));
    assert_eq!(v["result"], "value", "{v}");
    assert_eq!(v["value"].as_str().unwrap()[..8].to_string(), "01020304");
    assert_eq!(
        (v["votes"].as_u64(), v["matches"].as_u64()),
        (Some(2), Some(2))
    );
    let v = json(&addr, "/query/keywrite/paths/0x0a0000ff?n=2");
    assert_eq!(v["result"], "empty");
    // A threshold above n cannot be met: a 400, not a "conflict".
    let (status, body) = get(
        &addr,
        &format!("/query/keywrite/paths/{FLOW}?n=2&threshold=3"),
    );
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("threshold"), "{body}");

    // Key-Increment.
    let ki = c.store("counts").unwrap();
    for r in 0..2 {
        ki.region
            .fetch_add(h.slot(&flow(), r) as u64 * 8, 7 + r as u64)
            .unwrap();
    }
    let v = json(&addr, &format!("/query/counter/counts/{FLOW}?n=2"));
    assert_eq!(v["estimate"], 7, "{v}");
    // The same keys in bulk, through the server: one JSON line per key, in order.
    let r = dta_collector::client::request_with_body(
        &addr,
        "POST",
        "/query/counter/counts",
        format!("0a\n{FLOW}\n").as_bytes(),
    )
    .unwrap();
    assert_eq!(r.status, 200, "{}", r.body);
    let est: Vec<Value> = r
        .body
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap()["estimate"].clone())
        .collect();
    assert_eq!(est, [Value::from(0), Value::from(7)], "{}", r.body);
    let huge = vec![b'\n'; dta_collector::http::MAX_BODY + 1];
    let r = dta_collector::client::request_with_body(&addr, "POST", "/query/counter/counts", &huge)
        .unwrap();
    assert_eq!(r.status, 413, "{}", r.body);
    let admin = dta_collector::client::Endpoint {
        token: Some(TOKEN.into()),
        ..dta_collector::client::Endpoint::plain(&addr)
    };
    let r = admin.request("POST", "/epoch/counts").unwrap();
    assert_eq!(r.status, 200, "{}", r.body);
    let v = json(&addr, &format!("/query/counter/counts/{FLOW}?n=2"));
    assert_eq!(
        (v["estimate"].as_u64(), v["epoch"]["epoch"].as_u64()),
        (Some(0), Some(1))
    );

    // Postcarding, both copies.
    let pc = c.store("postcards").unwrap();
    let pl = PostcardLayout::new(1024, 5).unwrap();
    let ph = PostcardHasher::new(HashProfile::Independent, 1024, 1, 5).unwrap();
    let mut chunk = [0u8; 20];
    encode_chunk(&ph, &flow(), &[11, 12, 13], &mut chunk).unwrap();
    for r in 0..2 {
        pc.region
            .write(pl.chunk_offset(ph.chunk(&flow(), r)), &chunk)
            .unwrap();
    }
    let v = json(&addr, &format!("/query/path/postcards/{FLOW}"));
    assert_eq!(v["path"], serde_json::json!([11, 12, 13]), "{v}");
    assert_eq!(v["copies"], 2);
    let v = json(&addr, "/query/path/postcards/0a0000010a000002111f900050");
    assert_eq!(v["result"], "path", "hex and 5-tuple name the same flow");

    // Append: list 11 (the store's second), batches 1..=6 in a 4-slot ring: 1 and 2 are gone.
    let ap = c.store("events").unwrap();
    let al = AppendLayout::new(AppendFormat::Sequenced, 16, 4, 4).unwrap();
    let stride = match ap.meta.kind {
        dta_proto::meta::StoreKind::Append { list_stride, .. } => list_stride,
        _ => unreachable!(),
    };
    let write_batch = |seq: u64| {
        let mut b = vec![0u8; al.stride() as usize];
        for i in 0..4 {
            b[4 * i..4 * i + 4].copy_from_slice(&((seq as u32) * 10 + i as u32).to_be_bytes());
        }
        b[16..].copy_from_slice(&al.encode_trailer(seq, 4));
        ap.region
            .write(stride + al.batch_offset(al.slot_for_seq(seq)), &b)
            .unwrap();
    };
    for seq in 1..=2 {
        write_batch(seq);
    }
    let r = request(&addr, "GET", "/tail/events/11?from=1&consumer=ops").unwrap();
    assert_eq!(r.status, 200);
    assert_eq!(r.body.lines().count(), 8, "{}", r.body);
    assert_eq!(r.header("x-dta-next-seq"), Some("3"));
    for seq in 3..=8 {
        write_batch(seq);
    }
    let r = request(&addr, "GET", "/tail/events/11?consumer=ops").unwrap();
    assert_eq!(r.header("x-dta-lost-batches"), Some("2"), "{}", r.body);
    let first: Value = serde_json::from_str(r.body.lines().next().unwrap()).unwrap();
    assert_eq!(
        (first["seq"].as_u64(), first["entry"].as_str()),
        (Some(5), Some("00000032"))
    );
    assert_eq!(r.body.lines().count(), 16);
    let (s, _) = get(&addr, "/tail/events/12");
    assert_eq!(s, 404, "list 12 is not in the store");

    // Stores and stats.
    let st = json(&addr, "/stores");
    let names: Vec<&str> = st
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["paths", "counts", "events", "postcards"]);
    for s in st.as_array().unwrap() {
        assert!(s["memory_bytes"].as_u64().unwrap() >= s["region_bytes"].as_u64().unwrap());
        assert!(s["estimate"]["expected_success"].as_f64().is_some());
    }
    let stats = json(&addr, "/stats");
    assert!(stats["rnic"]["rcvd_pkts"].is_u64());

    // Errors are JSON with a status.
    assert_eq!(get(&addr, "/query/keywrite/nope/00").0, 404);
    assert_eq!(get(&addr, "/query/keywrite/paths/xyz").0, 400);
    assert_eq!(get(&addr, "/query/counter/paths/00").0, 400);
    assert_eq!(get(&addr, "/nothing").0, 404);
    assert_eq!(request(&addr, "POST", "/metrics").unwrap().status, 405);

    // /metrics after the consumer exists, so reader-lag series are present.
    let (s, m) = get(&addr, "/metrics");
    assert_eq!(s, 200);
    check_exposition(&m);
    for want in [
        "dta_collector_rnic_rx_packets_total ",
        "dta_collector_rnic_drops_total{reason=\"malformed\"} ",
        "dta_collector_rnic_messages_total{op=\"write\"} ",
        "dta_collector_immediate_events_total ",
        "dta_collector_store_memory_bytes{store=\"paths\"",
        "dta_collector_store_load_factor{store=\"postcards\"",
        "dta_collector_append_reader_lag_batches{store=\"events\",list=\"11\",consumer=\"ops\"} 0",
        "dta_collector_append_reader_lost_batches_total{store=\"events\",list=\"11\",consumer=\"ops\"} 2",
        "dta_collector_epoch{store=\"counts\"} 1",
        "\nprocess_resident_memory_bytes ",
        "\nprocess_start_time_seconds ",
        "\ndta_build_info{version=\"",
    ] {
        assert!(m.contains(want), "missing {want:?} in\n{m}");
    }
    promtool(&m);

    c.shutdown();
    assert!(
        request(&addr, "GET", "/stats").is_err(),
        "the control API stops with the collector"
    );
}

/// Checks the text exposition format 0.0.4: HELP/TYPE before samples, valid names, labels
/// and values, no family declared twice, counters named `_total`.
fn check_exposition(m: &str) {
    let name_ok = |n: &str| {
        !n.is_empty()
            && n.chars().enumerate().all(|(i, c)| {
                c.is_ascii_alphabetic() || c == '_' || c == ':' || (i > 0 && c.is_ascii_digit())
            })
    };
    let mut types: HashMap<String, String> = HashMap::new();
    let mut helps: HashSet<String> = HashSet::new();
    let mut series: HashSet<String> = HashSet::new();
    for line in m.lines() {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            let name = rest.split(' ').next().unwrap();
            assert!(name_ok(name) && helps.insert(name.into()), "{line}");
        } else if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, t) = rest.split_once(' ').unwrap();
            assert!(
                ["counter", "gauge", "histogram", "summary", "untyped"].contains(&t),
                "{line}"
            );
            assert!(
                types.insert(name.into(), t.into()).is_none(),
                "TYPE twice: {line}"
            );
            if t == "counter" {
                assert!(name.ends_with("_total"), "{line}");
            }
        } else {
            assert!(
                !line.starts_with('#') && !line.is_empty(),
                "stray line {line:?}"
            );
            let (series_id, value) = line.rsplit_once(' ').unwrap();
            assert!(
                value.parse::<f64>().is_ok() || ["NaN", "+Inf", "-Inf"].contains(&value),
                "{line}"
            );
            let name = series_id.split('{').next().unwrap();
            assert!(
                name_ok(name)
                    && ["dta_collector_", "process_", "dta_build_info"]
                        .iter()
                        .any(|p| name.starts_with(p)),
                "{line}"
            );
            assert!(
                types.contains_key(name) && helps.contains(name),
                "no TYPE/HELP: {line}"
            );
            if let Some(labels) = series_id.strip_prefix(name) {
                if !labels.is_empty() {
                    let inner = labels.strip_prefix('{').and_then(|l| l.strip_suffix('}'));
                    let inner = inner.unwrap_or_else(|| panic!("bad labels: {line}"));
                    for kv in inner.split("\",") {
                        let (k, v) = kv.split_once("=\"").unwrap_or_else(|| panic!("{line}"));
                        assert!(name_ok(k), "{line}");
                        assert!(!v.trim_end_matches('"').contains('\n'), "{line}");
                    }
                }
            }
            assert!(series.insert(series_id.into()), "duplicate series: {line}");
        }
    }
    assert!(series.len() > 30);
}

/// `promtool check metrics`: exit 0 and no lint warning. Passes with `SKIP: promtool not
/// found` where promtool is not installed (`scripts/prepare-tools.sh` installs it).
fn promtool(m: &str) {
    match dta_io::process::promtool_check_metrics(m) {
        None => eprintln!(
            "SKIP: promtool not found (scripts/prepare-tools.sh installs Debian's prometheus); \
             own parser checked the format"
        ),
        Some(Ok(())) => {}
        Some(Err(e)) => panic!("{e}"),
    }
}

#[test]
fn scheduled_epochs_reset_counters() {
    let cfg = CollectorConfig::from_toml(
        r#"
[collector]
roce = "127.0.0.1:0"
hugepages = false
[[store]]
name = "counts"
kind = "keyincrement"
slots = 16
epoch_secs = 1
"#,
    )
    .unwrap();
    let c = Collector::start(cfg).unwrap();
    assert!(c.control_addr().is_none());
    let s = c.store("counts").unwrap();
    s.region.fetch_add(8, 5).unwrap();
    let t0 = std::time::Instant::now();
    while s.epochs.info().epoch == 0 && t0.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(s.epochs.info().epoch, 1);
    assert_eq!(s.region.load_u64(8).unwrap(), 0);
    c.shutdown();
}

#[test]
fn shutdown_leaves_no_files_except_persisted_regions() {
    let dir = std::env::temp_dir().join(format!("dta-shutdown-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let toml = |persist: bool| {
        format!(
            r#"
[collector]
roce = "127.0.0.1:0"
control = "127.0.0.1:0"
hugepages = true
metadata_file = "{}/collector.json"
{}
[[store]]
name = "paths"
kind = "keywrite"
slots = 1024
"#,
            dir.display(),
            if persist {
                format!("persist_dir = \"{}/regions\"", dir.display())
            } else {
                String::new()
            }
        )
    };
    let c = Collector::start(CollectorConfig::from_toml(&toml(false)).unwrap()).unwrap();
    assert!(dir.join("collector.json").exists());
    let addr = c.control_addr().unwrap().to_string();
    let stores = json(&addr, "/stores");
    assert!(stores[0]["memory_bytes"].as_u64().unwrap() >= 8192);
    c.shutdown();
    let left: Vec<_> = std::fs::read_dir(&dir).unwrap().collect();
    assert!(left.is_empty(), "files left behind: {left:?}");
    // A persist_dir that does not exist is refused (it used to be created silently).
    let e = CollectorConfig::from_toml(&toml(true)).unwrap_err();
    assert!(
        e.contains("persist_dir") && e.contains(&format!("{}/regions", dir.display())),
        "{e}"
    );
    std::fs::create_dir_all(dir.join("regions")).unwrap();
    // File-backed regions are kept by design: that is what persist_dir is for.
    let c = Collector::start(CollectorConfig::from_toml(&toml(true)).unwrap()).unwrap();
    c.shutdown();
    assert!(dir.join("regions/dta-paths.region").exists());
    assert!(!dir.join("collector.json").exists());
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `[rnic] rx_coalesce_us`: a trickle of datagrams (one every 200 µs) is taken in a few bursts
/// when the RNIC waits 5 ms after a short receive, and in one wake-up per datagram when it does
/// not wait; both are visible in `/metrics`.
#[test]
fn receive_coalescing_takes_a_trickle_in_bursts() {
    fn trickle(coalesce_us: u32) -> (u64, u64, String) {
        let cfg = CONFIG.replace(
            "hugepages = false\n",
            &format!("hugepages = false\n\n[rnic]\nrx_coalesce_us = {coalesce_us}\n"),
        );
        let cfg = CollectorConfig::from_toml(&cfg).unwrap();
        assert_eq!(cfg.collector.rnic.rx_coalesce_us, coalesce_us);
        let c = Collector::start(cfg).unwrap();
        let addr = c.control_addr().unwrap().to_string();
        let sock = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        for i in 0..100u8 {
            // Not RoCEv2: counted as malformed, but received like any frame.
            sock.send_to(&[i; 8], c.roce).unwrap();
            std::thread::sleep(Duration::from_micros(200));
        }
        c.wait_for(Duration::from_secs(5), |k| k.malformed >= 100);
        std::thread::sleep(Duration::from_millis(120));
        let (bursts, waits) = c.with_published(|p| (p.rx_bursts, p.rx_coalesce_waits));
        assert_eq!(c.counters().malformed, 100);
        let (_, metrics) = get(&addr, "/metrics");
        c.shutdown();
        (bursts, waits, metrics)
    }
    let (bursts, waits, metrics) = trickle(5000);
    assert!(waits > 0, "no coalescing wait");
    assert!(
        bursts <= 40,
        "100 datagrams over 20 ms in {bursts} receives with a 5 ms coalescing wait"
    );
    assert!(
        metrics.contains(&format!("rnic_rx_bursts_total {bursts}")),
        "{metrics}"
    );
    assert!(metrics.contains(&format!("rnic_rx_coalesce_waits_total {waits}")));
    let (bursts, waits, _) = trickle(0);
    assert_eq!(waits, 0, "rx_coalesce_us = 0 never waits");
    assert!(bursts > 0);
}
