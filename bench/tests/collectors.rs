//! The ingest of `dta bench collectors` against real servers: `dta ingest` (the binary, driven
//! as the benchmark drives it) receives a few thousand reports of the benchmark's mix over UDP,
//! plus datagrams that are not reports and reports of a kind it does not store, and writes
//! them into a private Redis, ClickHouse and InfluxDB (`scripts/redis.sh`,
//! `scripts/clickhouse.sh`, `scripts/influxdb.sh`). Each database must then hold exactly what
//! was sent: every Key-Write key with its last value, every counter's sum, every list's
//! entries. A server that cannot be installed or started prints `SKIP: reason`.

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use dta_bench::collectors::ingest::Db;
use dta_bench::collectors::{read_back, scenario, IngestChild, Truth};
use dta_bench::gen::Generator;
use dta_bench::trace::Trace;
use dta_proto::wire::report::{Primitive, Priority, Profile, Report, ReportHeader};
use dta_proto::Key;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// A private server started by its script, stopped and removed on drop.
struct Server {
    script: &'static str,
    dir: PathBuf,
    addr: String,
}

impl Server {
    fn start(script: &'static str) -> Option<Server> {
        let dir = std::env::temp_dir().join(format!("dta-coll-{script}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let out = Command::new("bash")
            .arg(root().join("scripts").join(format!("{script}.sh")))
            .arg("start")
            .arg(&dir)
            .output()
            .expect("bash runs");
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        let mut s = Server {
            script,
            dir,
            addr: String::new(),
        };
        match text.lines().find(|l| l.starts_with("READY ")) {
            Some(l) => {
                let port = l.split_whitespace().nth(1).expect("READY <port> <pid>");
                s.addr = format!("127.0.0.1:{port}");
                Some(s)
            }
            None => {
                let why = text
                    .lines()
                    .find(|l| l.starts_with("SKIP"))
                    .unwrap_or(&text);
                eprintln!("{script}: {why}");
                None
            }
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = Command::new("bash")
            .arg(root().join("scripts").join(format!("{}.sh", self.script)))
            .arg("stop")
            .arg(&self.dir)
            .output();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Sends the trace, then datagrams that are not reports and one report of a kind the ingest
/// does not store; checks what the database holds.
fn ingest_writes_what_it_parsed(db: Db, script: &'static str) {
    let Some(server) = Server::start(script) else {
        eprintln!("SKIP: no {script} server for the {} ingest test", db.name());
        return;
    };
    let sc = scenario();
    let trace = Trace::generate(&mut Generator::new(&sc), 3000).unwrap();
    let truth = Truth::of(&trace, &sc.parse_config()).unwrap();
    let database = "dta_ingest_test";
    dta_bench::collectors::ingest::prepare(db, &server.addr, database, true).unwrap();
    let exe = PathBuf::from(env!("CARGO_BIN_EXE_dta"));
    let mut child = IngestChild::spawn(&exe, db, &server.addr, database).unwrap();
    let tx = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    for i in 0..trace.len() {
        tx.send_to(trace.payload(i), child.addr).unwrap();
        if i % 256 == 255 {
            // Stay well inside the receive buffer on a loaded machine.
            let t = std::time::Instant::now();
            while child.received() + 1024 < i as u64 && t.elapsed() < Duration::from_secs(10) {
                std::thread::sleep(Duration::from_millis(1));
            }
        }
    }
    // Hostile and foreign input: an empty datagram, garbage, a truncated report, a postcard.
    let mut buf = [0u8; 128];
    let postcard = Report {
        header: ReportHeader {
            profile: Profile::Extended,
            immediate: false,
            retransmittable: false,
            seq: Some(1),
            priority: Priority::Medium,
        },
        primitive: Primitive::Postcard {
            flow: Key::new(&[1; 13]).unwrap(),
            hop: 0,
            path_len: 5,
            value: 7,
        },
    };
    let n = postcard.emit(Profile::Extended, &mut buf).unwrap();
    let truncated = trace.payload(0);
    for d in [
        &[][..],
        b"GET / HTTP/1.1\r\n\r\n",
        &truncated[..truncated.len() / 2],
        &buf[..n],
    ] {
        tx.send_to(d, child.addr).unwrap();
    }
    let sent = trace.len() as u64 + 4;
    let st = child.finish(sent, Duration::from_secs(120)).unwrap();
    assert_eq!(st.datagrams, sent, "{st:?}");
    assert_eq!(st.malformed, 3, "{st:?}");
    assert_eq!(st.unsupported, 1, "{st:?}");
    assert_eq!(st.refused, 0, "{st:?}");
    assert_eq!(st.stored(), truth.reports, "{st:?}");
    let keys = Truth::sample(&truth.paths, 200, 1);
    let ctr = Truth::sample(&truth.counters, 100, 2);
    let (holds, lookups, name) =
        read_back(db, &server.addr, database, &truth, &keys, &ctr).unwrap();
    eprintln!(
        "{name}: {holds:?}, lookup p50 {:.1} us p99 {:.1} us",
        lookups.p50_us, lookups.p99_us
    );
    assert!(holds.complete(), "{name} holds {holds:?}");
    assert_eq!(holds.lookups, 200);
    assert_eq!(lookups.count, 200);
    // Nothing of the postcard or the garbage got in: only the three kinds' rows.
    match db {
        Db::Redis => assert_eq!(
            holds.rows_held,
            Some(truth.paths.len() as u64 + truth.counters.len() as u64 + truth.lists.len() as u64)
        ),
        // Every point has its own timestamp: InfluxDB keeps one per report.
        Db::InfluxDb => assert_eq!(holds.rows_held, Some(truth.reports)),
        // One row per report until merges collapse a key's rows (ReplacingMergeTree,
        // SummingMergeTree).
        Db::ClickHouse => {
            let rows = holds.rows_held.unwrap();
            assert!((truth.entries()..=truth.reports).contains(&rows), "{rows}");
        }
    }
}

#[test]
fn redis_ingest_writes_what_it_parsed() {
    ingest_writes_what_it_parsed(Db::Redis, "redis");
}

#[test]
fn clickhouse_ingest_writes_what_it_parsed() {
    ingest_writes_what_it_parsed(Db::ClickHouse, "clickhouse");
}

#[test]
fn influxdb_ingest_writes_what_it_parsed() {
    ingest_writes_what_it_parsed(Db::InfluxDb, "influxdb");
}
