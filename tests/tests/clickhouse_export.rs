//! Issue 17, part 3: `dta-collector export` puts every Append entry into ClickHouse exactly
//! once, across exporters killed with SIGKILL (one with a stale state file, one in the
//! middle of a stream) and a ClickHouse
//! outage; its counter snapshots match live queries; an unreachable server or a wrong
//! password gives clear errors and counted retries.
//!
//! A private ClickHouse server per test comes from `scripts/clickhouse.sh` (Debian's
//! clickhouse-server 18.16, installed by `scripts/test` as root); without one the tests print
//! `SKIP: reason` and pass. Entries travel for real: UDP reports → translator → RoCEv2 RDMA
//! WRITEs → the collector's software RNIC → its memory → the control API → the exporter. The
//! exporter runs in a child process (this test binary, re-executed into
//! `exporter_child`), so it can be killed like a crashed process.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddrV4, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::{Duration, Instant};

use dta_collector::export::metrics::{ExportMetrics, Source};
use dta_collector::export::Exporter;
use dta_collector::{Collector, CollectorConfig};
use dta_proto::wire::report::{Primitive, Priority, Profile, Report, ReportHeader};
use dta_proto::{Key, Value};
use dta_translator::config::{CollectorSection, TranslatorConfig};
use dta_translator::Translator;

const LISTS: u32 = 4;
const BATCH: u32 = 8;
const AP_PORT: u16 = 1450;
const KI_PORT: u16 = 1451;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace root")
        .to_path_buf()
}

fn free_tcp() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn free_udp() -> u16 {
    std::net::UdpSocket::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A private ClickHouse server (scripts/clickhouse.sh), stopped and removed on drop.
struct Server {
    dir: PathBuf,
    http: u16,
    tcp: u16,
}

impl Server {
    fn start(tag: &str) -> Option<Server> {
        let dir = std::env::temp_dir().join(format!("dta-ch-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let s = Server {
            dir,
            http: free_tcp(),
            tcp: free_tcp(),
        };
        s.up().then_some(s)
    }

    /// Starts (or restarts) the server; false (after printing SKIP) if it cannot.
    fn up(&self) -> bool {
        let out = Command::new("bash")
            .arg(root().join("scripts/clickhouse.sh"))
            .arg("start")
            .arg(&self.dir)
            .arg(self.http.to_string())
            .arg(self.tcp.to_string())
            .output()
            .expect("bash runs");
        let text = String::from_utf8_lossy(&out.stdout);
        if let Some(l) = text.lines().find(|l| l.starts_with("SKIP")) {
            eprintln!("{l}");
            return false;
        }
        assert!(text.contains("READY"), "{text}");
        true
    }

    fn down(&self) {
        let _ = Command::new("bash")
            .arg(root().join("scripts/clickhouse.sh"))
            .arg("stop")
            .arg(&self.dir)
            .output();
    }

    /// Runs `sql` as `default` in the database `dta`; the TabSeparated answer.
    fn query(&self, sql: &str) -> Result<String, String> {
        self.query_in("dta", sql)
    }

    fn query_in(&self, db: &str, sql: &str) -> Result<String, String> {
        let mut s = TcpStream::connect(("127.0.0.1", self.http)).map_err(|e| e.to_string())?;
        s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        let req = format!(
            "POST /?database={db} HTTP/1.0\r\nContent-Length: {}\r\n\r\n{sql}",
            sql.len()
        );
        s.write_all(req.as_bytes()).map_err(|e| e.to_string())?;
        let mut out = String::new();
        s.read_to_string(&mut out).map_err(|e| e.to_string())?;
        let (head, body) = out.split_once("\r\n\r\n").ok_or("no HTTP answer")?;
        if !head.starts_with("HTTP/1.0 200") && !head.starts_with("HTTP/1.1 200") {
            return Err(format!("{head}\n{body}"));
        }
        Ok(body.trim().to_string())
    }

    fn count(&self, sql: &str) -> u64 {
        self.query(sql).map(|s| s.parse().unwrap_or(0)).unwrap_or(0)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.down();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The collector's configuration with an `[export.clickhouse]` section.
fn config_text(dir: &Path, control: u16, roce: u16, ch_http: u16, extra: &str) -> String {
    format!(
        r#"
[collector]
roce = "127.0.0.1:{roce}"
control = "127.0.0.1:{control}"
hugepages = false

[[store]]
name = "ev"
kind = "append"
lists = {LISTS}
capacity = 32768
entry_size = 8
batch = {BATCH}
port = {AP_PORT}

[[store]]
name = "ki"
kind = "keyincrement"
slots = 4096
port = {KI_PORT}

[export.clickhouse]
url = "http://127.0.0.1:{ch_http}"
user = "dta"
password_file = "{pw}"
state_file = "{state}"
batch_rows = 2000
interval_ms = 50
snapshot_secs = 1
max_backoff_ms = 400
timeout_secs = 5
{extra}

[[export.clickhouse.keys]]
store = "ki"
file = "{keys}"
"#,
        pw = dir.join("pw").display(),
        state = dir.join("state.json").display(),
        keys = dir.join("keys.txt").display(),
    )
}

fn translator(c_addr: SocketAddrV4) -> Translator {
    let mut cfg = TranslatorConfig::default();
    cfg.translator.listen = SocketAddrV4::new(Ipv4Addr::LOCALHOST, 0);
    cfg.translator.roce = SocketAddrV4::new(Ipv4Addr::new(127, 0, 0, 7), 0);
    cfg.collectors = vec![CollectorSection::with_cm(
        "c",
        c_addr,
        vec![AP_PORT, KI_PORT],
    )];
    Translator::start(cfg).expect("translator connects over RDMA_CM")
}

fn header() -> ReportHeader {
    ReportHeader {
        profile: Profile::Extended,
        immediate: false,
        retransmittable: false,
        seq: Some(0),
        priority: Priority::Medium,
    }
}

/// Appends entries `(list, i)` for `i` in `from..to` to every list, paced so the
/// translator's socket never overflows, and waits until the translator took them all.
fn append(t: &Translator, from: u32, to: u32) {
    let sock = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let mut buf = [0u8; 128];
    let before = t.counters().rx_datagrams;
    for i in from..to {
        for l in 0..LISTS {
            let r = Report {
                header: header(),
                primitive: Primitive::Append {
                    list: l,
                    value: Value::new(&[l.to_le_bytes(), i.to_le_bytes()].concat()).unwrap(),
                },
            };
            let len = r.emit(Profile::Extended, &mut buf).unwrap();
            sock.send_to(&buf[..len], t.report_addr).unwrap();
        }
        if i % 64 == 0 {
            std::thread::sleep(Duration::from_millis(2));
        }
    }
    let want = before + ((to - from) * LISTS) as u64;
    assert!(
        t.wait_for(Duration::from_secs(20), |c| c.rx_datagrams >= want),
        "the translator got {} of {want} reports",
        t.counters().rx_datagrams
    );
}

/// Waits until `f` holds (polling), or panics with `what` after `secs`.
fn wait(secs: u64, what: &str, mut f: impl FnMut() -> bool) {
    let t0 = Instant::now();
    while !f() {
        assert!(
            t0.elapsed() < Duration::from_secs(secs),
            "timed out: {what}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// An exporter child process, killed (SIGKILL) when dropped, so a failing test leaves none.
struct ExporterProcess(Child);

impl ExporterProcess {
    fn kill(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Drop for ExporterProcess {
    fn drop(&mut self) {
        self.kill();
    }
}

/// The exporter in a child process: this binary, running only `exporter_child`.
fn spawn_exporter(config: &Path, metrics: u16) -> ExporterProcess {
    let child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "exporter_child",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("DTA_TEST_EXPORTER_CONFIG", config)
        .env("DTA_TEST_EXPORTER_METRICS", metrics.to_string())
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .spawn()
        .expect("re-exec the test binary");
    ExporterProcess(child)
}

/// Not a test of its own: the body of the exporter child process (returns at once unless
/// `DTA_TEST_EXPORTER_CONFIG` is set).
#[test]
fn exporter_child() {
    let Some(path) = std::env::var_os("DTA_TEST_EXPORTER_CONFIG") else {
        return;
    };
    let cfg = CollectorConfig::load(Path::new(&path)).unwrap();
    let control = cfg.collector.control.unwrap().to_string();
    let metrics = Arc::new(ExportMetrics::default());
    // The scrape endpoint, like `dta-collector export`'s: a plain listener answering
    // /metrics with the page.
    let port: u16 = std::env::var("DTA_TEST_EXPORTER_METRICS")
        .unwrap()
        .parse()
        .unwrap();
    let l = TcpListener::bind(("127.0.0.1", port)).unwrap();
    let m = metrics.clone();
    std::thread::spawn(move || {
        for mut c in l.incoming().flatten() {
            let mut b = [0u8; 1024];
            let _ = c.read(&mut b);
            let page = m.render();
            let _ = write!(
                c,
                "HTTP/1.0 200 OK\r\nContent-Length: {}\r\n\r\n{page}",
                page.len()
            );
        }
    });
    let mut ex = Exporter::new(
        &cfg,
        dta_collector::client::Endpoint::plain(&control),
        metrics,
    )
    .unwrap();
    let stop = AtomicBool::new(false);
    ex.run(&stop).unwrap();
}

/// One sample of the child's /metrics page.
fn scrape(port: u16, sample: &str) -> Option<f64> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.write_all(b"GET /metrics HTTP/1.0\r\n\r\n").ok()?;
    let mut out = String::new();
    s.read_to_string(&mut out).ok()?;
    out.lines()
        .find_map(|l| l.strip_prefix(sample)?.strip_prefix(' ')?.parse().ok())
}

#[test]
fn every_append_entry_lands_exactly_once_across_a_kill_and_an_outage() {
    let Some(ch) = Server::start("once") else {
        return;
    };
    let dir = ch.dir.join("exporter");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("pw"), "dta-test\n").unwrap();
    let keys: Vec<Key> = (0..20u32)
        .map(|k| Key::new(&(0x0a00_0000 + k).to_be_bytes()).unwrap())
        .collect();
    std::fs::write(
        dir.join("keys.txt"),
        keys.iter()
            .map(|k| dta_collector::query::keys::to_hex(k.as_bytes()) + "\n")
            .collect::<String>(),
    )
    .unwrap();
    let control = free_tcp();
    let roce = free_udp();
    let text = config_text(&dir, control, roce, ch.http, "");
    let cfg_path = dir.join("collector.toml");
    std::fs::write(&cfg_path, &text).unwrap();
    let col = Collector::start(CollectorConfig::from_toml(&text).unwrap()).unwrap();
    let t = translator(col.roce);

    // A wrong password is a clear error at start, not a retry loop.
    let mut bad = CollectorConfig::from_toml(&text).unwrap();
    std::fs::write(dir.join("pw-bad"), "nope\n").unwrap();
    bad.export.clickhouse.as_mut().unwrap().password_file = Some(dir.join("pw-bad"));
    let e = Exporter::new(
        &bad,
        dta_collector::client::Endpoint::plain(&format!("127.0.0.1:{control}")),
        Arc::new(ExportMetrics::default()),
    )
    .unwrap()
    .start(&AtomicBool::new(false))
    .unwrap_err();
    assert!(e.contains("password") || e.contains("193"), "{e}");

    // Key-Increment counts: key k gets 3k + 1.
    let sock = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let mut buf = [0u8; 128];
    let mut sent = 0u64;
    for (k, key) in keys.iter().enumerate() {
        for _ in 0..3 * k + 1 {
            let r = Report {
                header: header(),
                primitive: Primitive::KeyIncrement {
                    redundancy: 2,
                    key: *key,
                    delta: 1,
                },
            };
            let len = r.emit(Profile::Extended, &mut buf).unwrap();
            sock.send_to(&buf[..len], t.report_addr).unwrap();
            sent += 1;
        }
    }
    assert!(col.wait_for(Duration::from_secs(20), |c| c.atomics >= 2 * sent));

    // append_entries as a plain MergeTree (same columns and order): a ReplacingMergeTree
    // would collapse duplicates in a background merge and hide them from this test, which
    // checks the exporter's own exactly-once logic (the exporter's CREATE TABLE IF NOT
    // EXISTS leaves this table alone).
    ch.query_in("default", "CREATE DATABASE IF NOT EXISTS dta")
        .unwrap();
    let schema = dta_collector::export::clickhouse::statements(dta_collector::export::SCHEMA);
    ch.query(&schema[0].replace("ReplacingMergeTree()", "MergeTree()"))
        .unwrap();
    // Phase 1 with exporter A.
    let metrics_a = free_tcp();
    let mut a = spawn_exporter(&cfg_path, metrics_a);
    const PER_PHASE: u32 = 1024;
    let phase = (PER_PHASE * LISTS) as u64;
    let rows = || ch.count("SELECT count() FROM append_entries");
    append(&t, 0, PER_PHASE);
    wait(60, "exporter A exports phase 1", || rows() == phase);
    // The state file as it is now: restored after phase 2 is in ClickHouse too, it stands
    // for a crash between ClickHouse's acknowledgement and the state file's rename, which
    // only ClickHouse's own max(seq) can then correct.
    let state = dir.join("state.json");
    wait(30, "the state file after phase 1", || {
        std::fs::read_to_string(&state).is_ok_and(|s| s.contains("ev/3"))
    });
    let stale = std::fs::read(&state).unwrap();
    append(&t, PER_PHASE, 2 * PER_PHASE);
    wait(60, "exporter A exports phase 2", || rows() == 2 * phase);
    a.kill();
    std::fs::write(&state, &stale).unwrap();
    // Exporter B takes over from the stale state file and from ClickHouse; it dies
    // (SIGKILL: no clean-up, no state save) while phase 3 streams in.
    let metrics_b = free_tcp();
    let mut b = spawn_exporter(&cfg_path, metrics_b);
    let writer = std::thread::scope(|s| {
        let t = &t;
        let h = s.spawn(move || append(t, 2 * PER_PHASE, 3 * PER_PHASE));
        wait(60, "exporter B exports part of phase 3", || {
            rows() > 2 * phase
        });
        b.kill();
        h.join().is_ok()
    });
    assert!(writer);
    // Exporter C, then phase 4 across a ClickHouse outage.
    let metrics_c = free_tcp();
    let mut c = spawn_exporter(&cfg_path, metrics_c);
    wait(60, "exporter C serves its metrics", || {
        scrape(metrics_c, "dta_export_retries_total").is_some()
    });
    ch.down();
    append(&t, 3 * PER_PHASE, 4 * PER_PHASE);
    std::thread::sleep(Duration::from_millis(1500));
    assert!(ch.up(), "ClickHouse restarts");
    let total = 4 * phase;
    wait(120, "every entry in ClickHouse", || {
        ch.count("SELECT count() FROM append_entries") >= total
    });
    // Nothing more arrives: a duplicate would push the count past the total.
    std::thread::sleep(Duration::from_millis(1000));
    let retries = scrape(metrics_c, "dta_export_retries_total").unwrap_or(0.0);
    let ch_errors =
        scrape(metrics_c, "dta_export_errors_total{source=\"clickhouse\"}").unwrap_or(0.0);
    let lost = scrape(metrics_c, "dta_export_lost_batches_total").unwrap_or(-1.0);
    c.kill();
    let summary = ch
        .query(
            "SELECT count(), uniqExact(store, list, generation, seq, idx), uniqExact(entry), \
             min(seq), countIf(length(entry) != 8) FROM append_entries",
        )
        .unwrap();
    assert_eq!(
        summary,
        format!("{total}\t{total}\t{total}\t1\t0"),
        "rows, identities, distinct entries, first batch, wrong widths"
    );
    // Every (list, i) is there, in its own list, in order of sequence.
    let per_list = ch
        .query(
            "SELECT list, count(), min(reinterpretAsUInt32(substring(entry, 5, 4))), \
             max(reinterpretAsUInt32(substring(entry, 5, 4))), \
             countIf(reinterpretAsUInt32(substring(entry, 1, 4)) != list) FROM append_entries \
             GROUP BY list ORDER BY list",
        )
        .unwrap();
    let want: Vec<String> = (0..LISTS)
        .map(|l| format!("{l}\t{}\t0\t{}\t0", 4 * PER_PHASE, 4 * PER_PHASE - 1))
        .collect();
    assert_eq!(per_list, want.join("\n"));
    assert!(retries >= 1.0, "retries counted: {retries}");
    assert!(ch_errors >= 1.0, "ClickHouse errors counted: {ch_errors}");
    assert_eq!(lost, 0.0, "no batch overwritten");

    // Counter snapshots match live queries (the counts no longer change).
    wait(30, "a counter snapshot", || {
        ch.count("SELECT count() FROM counter_snapshots") >= keys.len() as u64
    });
    let snap = ch
        .query(
            "SELECT hex(key), argMax(estimate, snapshot_time) FROM counter_snapshots \
             GROUP BY key ORDER BY key",
        )
        .unwrap();
    let ki = col.store("ki").unwrap().counter().unwrap();
    let mut live: Vec<(String, u64)> = keys
        .iter()
        .map(|k| {
            (
                dta_collector::query::keys::to_hex(k.as_bytes()).to_uppercase(),
                ki.query(k, 2).estimate,
            )
        })
        .collect();
    live.sort();
    let want: Vec<String> = live.iter().map(|(k, v)| format!("{k}\t{v}")).collect();
    assert_eq!(snap, want.join("\n"));
    // Count-min never undercounts: key k got 3k + 1.
    for (k, key) in keys.iter().enumerate() {
        assert!(ki.query(key, 2).estimate > 3 * k as u64);
    }

    // The example queries and the Grafana dashboard's SQL run on this server, over the
    // real schema (FINAL needs the ReplacingMergeTree).
    ch.query("DROP TABLE append_entries").unwrap();
    ch.query(&schema[0]).unwrap();
    let queries = std::fs::read_to_string(root().join("collector/clickhouse/queries.sql")).unwrap();
    for q in dta_collector::export::clickhouse::statements(&queries) {
        ch.query(&q)
            .unwrap_or_else(|e| panic!("queries.sql: {q}: {e}"));
    }
    let dash: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(root().join("packaging/grafana/dta-clickhouse.json")).unwrap(),
    )
    .unwrap();
    for p in dash["panels"].as_array().unwrap() {
        let Some(sql) = p["targets"][0]["rawSql"].as_str() else {
            continue;
        };
        let mut q = sql.to_string();
        while let Some(i) = q.find("$__timeFilter(") {
            let end = i + q[i..].find(')').unwrap();
            let col = q[i + "$__timeFilter(".len()..end].to_string();
            q.replace_range(i..=end, &format!("{col} > now() - 86400"));
        }
        ch.query(&q)
            .unwrap_or_else(|e| panic!("dashboard panel {}: {e}", p["title"]));
    }
    drop(t);
    drop(col);
}

#[test]
fn an_unreachable_clickhouse_is_retried_with_counted_errors() {
    let dir = std::env::temp_dir().join(format!("dta-ch-unreach-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("pw"), "x\n").unwrap();
    std::fs::write(dir.join("keys.txt"), "00\n").unwrap();
    // Nothing listens on a port just freed.
    let text = config_text(&dir, free_tcp(), free_udp(), free_tcp(), "");
    let cfg = CollectorConfig::from_toml(&text).unwrap();
    let metrics = Arc::new(ExportMetrics::default());
    let mut ex = Exporter::new(
        &cfg,
        dta_collector::client::Endpoint::plain(&cfg.collector.control.unwrap().to_string()),
        metrics.clone(),
    )
    .unwrap();
    // Returns (stopped) instead of failing: the server may come later.
    run_for(&mut ex, Duration::from_millis(1500));
    let errors = metrics.errors(Source::ClickHouse);
    let retries = metrics.retries.load(std::sync::atomic::Ordering::Relaxed);
    // 100 + 200 + 400 + 400 ms of back-off fit in 1.5 s: at least 3 tries.
    assert!(errors >= 3, "errors {errors}");
    assert!(retries >= 2, "retries {retries}");
    assert!(metrics
        .render()
        .contains("dta_export_errors_total{source=\"clickhouse\"}"));
    let _ = std::fs::remove_dir_all(&dir);
}

/// Runs the exporter in this thread for `d`, then stops it (it returns, stopped, instead of
/// failing on errors).
fn run_for(ex: &mut Exporter, d: Duration) {
    let stop = Arc::new(AtomicBool::new(false));
    let h = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            std::thread::sleep(d);
            stop.store(true, std::sync::atomic::Ordering::Relaxed);
        })
    };
    ex.run(&stop).unwrap();
    h.join().unwrap();
}

/// CPU seconds (user + system) of process `pid` so far.
fn cpu_seconds(pid: &str) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the command's closing parenthesis; utime and stime are fields 14 and 15.
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<f64> = rest
        .split_whitespace()
        .map(|x| x.parse().unwrap_or(0.0))
        .collect();
    let tick = Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8_lossy(&o.stdout).trim().parse().ok())
        .unwrap_or(100.0);
    f.get(11)
        .zip(f.get(12))
        .map_or(0.0, |(u, s)| (u + s) / tick)
}

/// The exporter's throughput and CPU cost on a full store: 64 lists of 65,536 8-byte entries
/// (4.2 M rows) written straight into the collector's memory in the sequenced layout, then
/// exported by one exporter process into a private ClickHouse. Prints rows/s and CPU seconds
/// per million rows (the exporter process, and the collector process serving its /tail
/// requests). `cargo test -p dta-tests --test clickhouse_export -- --ignored --nocapture`;
/// set `DTA_EXPORT_MEASURE_SECS` to measure a steady state instead: no backlog, a new batch
/// per list every 10 ms for that long (for running `dta bench micro` next to it).
#[test]
#[ignore]
fn measure_export_throughput() {
    let Some(ch) = Server::start("measure") else {
        return;
    };
    let dir = ch.dir.join("exporter");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("pw"), "dta-test\n").unwrap();
    std::fs::write(dir.join("keys.txt"), "00\n").unwrap();
    const L: u32 = 64;
    let text = config_text(&dir, free_tcp(), free_udp(), ch.http, "")
        .replace("lists = 4\n", &format!("lists = {L}\n"))
        .replace("capacity = 32768", "capacity = 65536")
        .replace("batch = 8\n", "batch = 16\n")
        .replace("batch_rows = 2000", "batch_rows = 100000")
        .replace("interval_ms = 50", "interval_ms = 200");
    let cfg_path = dir.join("collector.toml");
    std::fs::write(&cfg_path, &text).unwrap();
    let col = Collector::start(CollectorConfig::from_toml(&text).unwrap()).unwrap();
    let st = col.store("ev").unwrap().clone();
    let a = st.append().unwrap();
    let batches = a.layout.batch_slots() as u64;
    let fill = |from: u64, to: u64| {
        for l in 0..L {
            let base = a.list_offset(l);
            for seq in from..to {
                let slot = a.layout.slot_for_seq(seq);
                let mut b = [0u8; 16 * 8];
                for (i, e) in b.chunks_exact_mut(8).enumerate() {
                    e[..4].copy_from_slice(&l.to_le_bytes());
                    e[4..].copy_from_slice(&((seq * 16 + i as u64) as u32).to_le_bytes());
                }
                st.region
                    .write(base + a.layout.batch_offset(slot), &b)
                    .unwrap();
                let t = u64::from_le_bytes(a.layout.encode_trailer(seq, 16));
                st.region
                    .store_u64_release(base + a.layout.trailer_offset(slot).unwrap(), t)
                    .unwrap();
            }
        }
    };
    let secs: u64 = std::env::var("DTA_EXPORT_MEASURE_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    // A backlog of full rings to measure throughput; none when measuring a steady state.
    let filled = if secs > 0 { 0 } else { batches };
    fill(1, filled + 1);
    let total = L as u64 * batches * 16;
    let rows = || ch.count("SELECT count() FROM append_entries");
    let ch_pid = std::fs::read_to_string(ch.dir.join("pid"))
        .unwrap()
        .trim()
        .to_string();
    let ch_cpu0 = cpu_seconds(&ch_pid);
    let me_cpu0 = cpu_seconds("self");
    let t0 = Instant::now();
    let ex = spawn_exporter(&cfg_path, free_tcp());
    let pid = ex.0.id().to_string();
    let mut ex = ex;
    if secs > 0 {
        // Keep the store busy: a new batch per list every 10 ms (102 k entries/s), the ring
        // lapping the exporter if it falls behind.
        let mut next = filled + 1;
        while t0.elapsed() < Duration::from_secs(secs) {
            fill(next, next + 1);
            next += 1;
            std::thread::sleep(Duration::from_millis(10));
        }
        let n = rows();
        let cpu = cpu_seconds(&pid);
        println!(
            "exported {n} rows in {secs} s while writing; exporter CPU {cpu:.2} s ({:.2} s per M rows)",
            cpu / (n as f64 / 1e6)
        );
        ex.kill();
        return;
    }
    wait(600, "every row exported", || rows() >= total);
    let wall = t0.elapsed().as_secs_f64();
    let cpu = cpu_seconds(&pid);
    let me_cpu = cpu_seconds("self") - me_cpu0;
    let ch_cpu = cpu_seconds(&ch_pid) - ch_cpu0;
    ex.kill();
    let m = total as f64 / 1e6;
    println!(
        "exported {total} Append rows in {wall:.2} s: {:.0} rows/s; exporter CPU {cpu:.2} s \
         ({:.2} s per M rows); collector (control API) CPU {me_cpu:.2} s ({:.2} s per M rows); \
         ClickHouse CPU {ch_cpu:.2} s ({:.2} s per M rows)",
        total as f64 / wall,
        cpu / m,
        me_cpu / m,
        ch_cpu / m
    );
    assert_eq!(rows(), total);
}

/// ZERO mode: with a `[pull]` section the exporter writes every block's newest snapshot into
/// `pulled_metrics`, one row per value, and every row is a value the agent wrote at that
/// snapshot's sequence.
#[test]
fn pulled_agent_metrics_land_in_clickhouse() {
    use dta_bench::zerobench::{agent_value, AgentFleet};
    let Some(ch) = Server::start("pull") else {
        return;
    };
    let dir = ch.dir.join("exporter");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("pw"), "dta-test\n").unwrap();
    std::fs::write(dir.join("keys.txt"), "00\n").unwrap();
    let fleet = AgentFleet::start_at(3000, 2, 2, 8, Duration::from_millis(5), 1).expect("agents");
    let mut pull = format!(
        "\n[pull]\nlisten = \"127.0.0.1:{}\"\ninterval_ms = 20\n",
        free_udp()
    );
    for a in &fleet.specs {
        pull += &format!(
            "[[pull.agent]]\nname = \"{}\"\nroce = \"{}\"\ncm_port = {}\n",
            a.name, a.roce, a.cm_port
        );
    }
    let control = free_tcp();
    let text = config_text(&dir, control, free_udp(), ch.http, "") + &pull;
    let cfg = CollectorConfig::from_toml(&text).unwrap();
    let col = Collector::start(cfg.clone()).unwrap();
    let metrics = Arc::new(ExportMetrics::default());
    let mut ex = Exporter::new(
        &cfg,
        dta_collector::client::Endpoint::plain(&format!("127.0.0.1:{control}")),
        metrics.clone(),
    )
    .unwrap();
    run_for(&mut ex, Duration::from_millis(3500));
    drop(col);
    drop(fleet);
    let rows = ch
        .query("SELECT agent, block, idx, seq, value FROM pulled_metrics FINAL")
        .unwrap();
    let mut n = 0;
    let mut snapshots = std::collections::HashSet::new();
    for l in rows.lines() {
        let f: Vec<&str> = l.split('\t').collect();
        let agent: usize = f[0].trim_start_matches("agent").parse().unwrap();
        let (idx, seq, value): (usize, u64, u64) = (
            f[2].parse().unwrap(),
            f[3].parse().unwrap(),
            f[4].parse().unwrap(),
        );
        assert_eq!(value, agent_value(agent, seq / 2, idx), "{l}");
        snapshots.insert((f[0].to_string(), f[1].to_string(), seq));
        n += 1;
    }
    eprintln!(
        "{n} pulled values in ClickHouse, {} snapshots",
        snapshots.len()
    );
    // 2 agents x 2 blocks, at least 2 snapshot times (snapshot_secs = 1), 8 values each.
    assert!(snapshots.len() >= 8, "{snapshots:?}");
    assert_eq!(n % 8, 0);
}
