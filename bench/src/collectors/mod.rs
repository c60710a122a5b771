//! `dta bench collectors`: the collector's CPU against what an operator would deploy today to
//! store the same telemetry: Redis, ClickHouse and InfluxDB, each fed by an ingest process
//! (`dta ingest`, [`ingest`]) that receives the reports over UDP, parses them and writes them
//! in the database's native batched protocol; next to `dta` on the software RNIC and on a real
//! RNIC.
//!
//! One workload for every contender: the papers' mix of Key-Write INT paths, Key-Increment host
//! counters and Append loss and congestion events ([`scenario`]), sent over loopback UDP by
//! this process with `sendmmsg`, flow-controlled by what the receiver reports having taken.
//! Per contender it measures
//!
//! - **collector-host CPU per stored report**: the database server's CPU (`/proc/PID/stat`,
//!   every thread, plus reaped children such as a Redis snapshot) from the first report sent to
//!   the last acknowledged, plus the settle period after it less the server's idle rate
//!   (background merges and snapshots the load caused), and the ingest process's CPU, divided
//!   by the reports the database acknowledged. For `dta` the software RNIC thread's CPU
//!   divided by the reports its frames carry: the translator (on its own host in a deployment)
//!   translates the trace ahead of time and its RoCEv2 frames reach the RNIC over loopback UDP
//!   as fast as it takes them, so it gets full receive bursts as the ingest processes do. On a
//!   real RNIC 0 by construction (not measured);
//! - **memory per million entries**: the server's resident memory growth over the run
//!   (`VmRSS`), per million entries of the data set (distinct Key-Write keys + distinct
//!   counter keys + Append entries); the database's own figure next to it. For `dta` the
//!   regions of the four stores, sized for this data set (what it allocates, whatever it holds);
//! - **point-lookup latency**: p50 and p99 over `lookups` random Key-Write keys, one request at
//!   a time over one kept-alive connection (Redis `GET`, ClickHouse `SELECT`, InfluxQL
//!   `SELECT`, `dta`'s HTTP query API), and `dta`'s query engine called in process;
//! - **what it holds**: keys and entries counted in the database, every lookup's answer and a
//!   sample of counters compared with the ground truth computed from the trace. A contender
//!   that does not hold the data is reported as such.

pub mod http;
pub mod ingest;
pub mod lineproto;
pub mod resp;

use std::collections::{BTreeMap, HashMap};
use std::io::{BufRead, BufReader, Write};
use std::net::SocketAddrV4;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use dta_collector::query::append::{ListReader, Start};
use dta_collector::query::keywrite::{KeyWriteAnswer, Vote};
use dta_proto::wire::report::{parse_report, ParseConfig, Primitive};
use dta_proto::{Key, Value};
use serde::Serialize;

use crate::gen::{Mix, Scenario};
use crate::replay::rnic_saturated_then;
use crate::sender::PacedSender;
use crate::sys;
use crate::trace::Trace;
use crate::workload::SplitMix64;
use dta_collector::service::Collector;

use self::http::HttpConn;
use self::ingest::{Db, IngestStats};
use self::lineproto::hex;

/// The workload: the papers' default mix without Postcarding (which none of the three
/// databases has a primitive for): INT-MD paths (Key-Write), NetSeer loss and INT congestion
/// events (Append), Marple host counters (Key-Increment).
pub fn scenario() -> Scenario {
    Scenario {
        mix: Mix::parse("kw=4,loss=2,cong=1,ctr=2").expect("a valid mix"),
        ..Scenario::default()
    }
}

/// A database server to measure (started by `scripts/bench-collectors.sh`).
#[derive(Debug, Clone)]
pub struct Server {
    /// `host:port` of its native protocol (Redis) or HTTP interface (ClickHouse, InfluxDB).
    pub addr: String,
    /// Its process ID (for `/proc/PID/stat`).
    pub pid: u32,
}

/// Settings of `dta bench collectors`.
#[derive(Debug, Clone)]
pub struct CollectorsOptions {
    /// Reports sent to every contender.
    pub reports: usize,
    /// Redis, if measured.
    pub redis: Option<Server>,
    /// ClickHouse, if measured.
    pub clickhouse: Option<Server>,
    /// InfluxDB, if measured.
    pub influxdb: Option<Server>,
    /// The `dta` binary whose `ingest` subcommand is the ingest process.
    pub exe: PathBuf,
    /// Point lookups per contender.
    pub lookups: usize,
    /// Counters compared with the truth per contender.
    pub counter_checks: usize,
    /// Time after the last acknowledgement during which the servers' CPU above their idle
    /// rate still counts.
    pub settle: Duration,
    /// Reports in flight beyond what the ingest process took.
    pub window: u64,
    /// Output directory.
    pub out: PathBuf,
    /// Print progress.
    pub verbose: bool,
}

/// The ground truth of a trace: what a lossless store of it holds.
#[derive(Debug, Default)]
pub struct Truth {
    /// Key-Write: the last value of every key.
    pub paths: HashMap<Key, Value>,
    /// Key-Increment: every key's sum.
    pub counters: HashMap<Key, u64>,
    /// Append: entries per list.
    pub lists: BTreeMap<u32, u64>,
    /// Append: every (list, entry) and how often it was appended.
    pub entries: HashMap<(u32, Value), u32>,
    /// Append entries in all.
    pub appends: u64,
    /// Reports of the three stored kinds.
    pub reports: u64,
}

impl Truth {
    /// The truth of `trace`.
    pub fn of(trace: &Trace, parse: &ParseConfig) -> Result<Truth, String> {
        let mut t = Truth::default();
        for i in 0..trace.len() {
            let r =
                parse_report(trace.payload(i), parse).map_err(|e| format!("report {i}: {e:?}"))?;
            match r.primitive {
                Primitive::KeyWrite { key, value, .. } => {
                    t.paths.insert(key, value);
                }
                Primitive::KeyIncrement { key, delta, .. } => {
                    *t.counters.entry(key).or_default() += delta;
                }
                Primitive::Append { list, value } => {
                    *t.lists.entry(list).or_default() += 1;
                    *t.entries.entry((list, value)).or_default() += 1;
                    t.appends += 1;
                }
                _ => continue,
            }
            t.reports += 1;
        }
        Ok(t)
    }

    /// Entries of the data set: distinct Key-Write keys, distinct counters, Append entries.
    pub fn entries(&self) -> u64 {
        self.paths.len() as u64 + self.counters.len() as u64 + self.appends
    }

    /// `n` distinct keys of `map`, drawn with `seed` (all of them if fewer), in a stable order.
    pub fn sample<V>(map: &HashMap<Key, V>, n: usize, seed: u64) -> Vec<Key> {
        let mut keys: Vec<Key> = map.keys().copied().collect();
        keys.sort_unstable_by(|a, b| a.as_bytes().cmp(b.as_bytes()));
        let mut rng = SplitMix64(seed);
        // Partial Fisher-Yates.
        let n = n.min(keys.len());
        for i in 0..n {
            let j = i + rng.below((keys.len() - i) as u64) as usize;
            keys.swap(i, j);
        }
        keys.truncate(n);
        keys
    }
}

/// What a contender holds, against the truth.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Holds {
    /// Distinct Key-Write keys held (`None`: not countable in this store).
    pub keywrite_keys: Option<u64>,
    /// Distinct Key-Write keys sent.
    pub keywrite_expected: u64,
    /// Distinct counters held.
    pub counter_keys: Option<u64>,
    /// Distinct counters sent.
    pub counter_expected: u64,
    /// Append entries held.
    pub append_entries: u64,
    /// Append entries sent.
    pub append_expected: u64,
    /// Lists whose entry count differs from the truth.
    pub lists_off: u64,
    /// Entries read back that were never sent (`dta`, whose rings are read entry by entry).
    pub append_strays: u64,
    /// Rows or points the database holds (history included), when it says.
    pub rows_held: Option<u64>,
    /// Key-Write lookups answered with the value sent.
    pub lookups_ok: u64,
    /// Key-Write lookups made.
    pub lookups: u64,
    /// Counters read back equal to the truth.
    pub counters_ok: u64,
    /// Counters read back.
    pub counters_checked: u64,
}

impl Holds {
    /// True if everything sent is there and every check matched.
    pub fn complete(&self) -> bool {
        self.keywrite_keys
            .is_none_or(|k| k == self.keywrite_expected)
            && self.counter_keys.is_none_or(|k| k == self.counter_expected)
            && self.append_entries == self.append_expected
            && self.lists_off == 0
            && self.append_strays == 0
            && self.lookups_ok == self.lookups
            && self.counters_ok == self.counters_checked
    }
}

/// Point-lookup latency.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct LookupLatency {
    /// Lookups timed.
    pub count: u64,
    /// Median (µs).
    pub p50_us: f64,
    /// 99th percentile (µs).
    pub p99_us: f64,
    /// Mean (µs).
    pub mean_us: f64,
    /// Slowest (µs).
    pub max_us: f64,
}

impl LookupLatency {
    fn of(mut ns: Vec<u64>) -> LookupLatency {
        if ns.is_empty() {
            return LookupLatency::default();
        }
        ns.sort_unstable();
        let q = |p: f64| ns[((ns.len() as f64 * p).ceil() as usize).clamp(1, ns.len()) - 1];
        LookupLatency {
            count: ns.len() as u64,
            p50_us: q(0.5) as f64 / 1e3,
            p99_us: q(0.99) as f64 / 1e3,
            mean_us: ns.iter().sum::<u64>() as f64 / ns.len() as f64 / 1e3,
            max_us: *ns.last().expect("not empty") as f64 / 1e3,
        }
    }
}

/// Memory of a contender.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Memory {
    /// What `bytes` is.
    pub basis: String,
    /// The bytes charged to the data set (RSS growth, or `dta`'s regions).
    pub bytes: i64,
    /// Per million entries of the data set.
    pub bytes_per_million_entries: f64,
    /// The server's resident memory before and after (bytes).
    pub rss_before: Option<u64>,
    /// After.
    pub rss_after: Option<u64>,
    /// The database's own figure: Redis `used_memory` growth, ClickHouse's active parts on
    /// disk (`bytes_on_disk`), InfluxDB's Go heap in use growth (`HeapInuse`).
    pub db_reported: Option<i64>,
    /// What `db_reported` is.
    pub db_reported_what: String,
}

/// One contender's row.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Contender {
    /// `redis`, `clickhouse`, `influxdb`, `dta-sw-rnic`, `dta-real-rnic`.
    pub id: String,
    /// Name and version.
    pub name: String,
    /// False for the real RNIC: its numbers follow from its design, not from a run.
    pub measured: bool,
    /// Reports sent.
    pub sent: u64,
    /// Reports acknowledged by the database (`dta`: translated into RDMA WRITEs).
    pub stored: u64,
    /// Wall time from the first report sent to the last acknowledged (s).
    pub secs: f64,
    /// Server CPU over the run (ns; all threads, reaped children included).
    pub server_run_cpu_ns: u64,
    /// Of it, reaped children's (ns).
    pub server_children_cpu_ns: u64,
    /// Server CPU above its idle rate during the settle period after the run (ns).
    pub server_settle_cpu_ns: u64,
    /// The server's CPU before the run, at rest (ms per s).
    pub server_idle_ms_per_s: f64,
    /// Ingest process CPU (ns).
    pub ingest_cpu_ns: u64,
    /// Server CPU per stored report (ns).
    pub server_ns_per_report: f64,
    /// Ingest CPU per stored report (ns).
    pub ingest_ns_per_report: f64,
    /// Collector-host CPU per stored report: server + ingest (ns).
    pub total_ns_per_report: f64,
    /// Memory.
    pub memory: Memory,
    /// Point lookups through the contender's query interface.
    pub lookup: Option<LookupLatency>,
    /// `dta`: the query engine called in process.
    pub lookup_in_process: Option<LookupLatency>,
    /// What it holds.
    pub holds: Holds,
    /// The ingest's counters.
    pub ingest: Option<IngestStats>,
    /// Anything a reader must know about this row.
    pub notes: Vec<String>,
}

/// The `dta ingest` process, driven over its standard input and output.
pub struct IngestChild {
    child: Child,
    stdin: Option<ChildStdin>,
    /// Where it receives reports.
    pub addr: SocketAddrV4,
    received: Arc<AtomicU64>,
    done: mpsc::Receiver<Result<IngestStats, String>>,
}

impl IngestChild {
    /// Starts `exe ingest` for `db` at `server`, and waits until it listens.
    pub fn spawn(exe: &Path, db: Db, server: &str, database: &str) -> Result<IngestChild, String> {
        let mut child = Command::new(exe)
            .args(["ingest", "--db", db.name(), "--server", server])
            .args(["--database", database])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|e| format!("{}: {e}", exe.display()))?;
        let stdout = child.stdout.take().expect("piped");
        let received = Arc::new(AtomicU64::new(0));
        let (listen_tx, listen_rx) = mpsc::channel();
        let (done_tx, done) = mpsc::channel();
        let rcv = received.clone();
        std::thread::spawn(move || {
            let mut done_tx = Some(done_tx);
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if let Some(a) = line.strip_prefix("LISTEN ") {
                    let _ =
                        listen_tx.send(a.trim().parse::<SocketAddrV4>().map_err(|e| e.to_string()));
                } else if let Some(n) = line.strip_prefix("RECEIVED ") {
                    if let Ok(n) = n.trim().parse() {
                        rcv.store(n, Ordering::Relaxed);
                    }
                } else if let Some(j) = line.strip_prefix("DONE ") {
                    if let Some(tx) = done_tx.take() {
                        let _ = tx.send(serde_json::from_str(j).map_err(|e| e.to_string()));
                    }
                } else if let Some(e) = line.strip_prefix("ERROR ") {
                    if let Some(tx) = done_tx.take() {
                        let _ = tx.send(Err(e.to_string()));
                    }
                }
            }
            if let Some(tx) = done_tx {
                let _ = tx.send(Err("dta ingest exited without a result".into()));
            }
        });
        let stdin = child.stdin.take();
        let mut me = IngestChild {
            child,
            stdin,
            addr: SocketAddrV4::new(std::net::Ipv4Addr::LOCALHOST, 0),
            received,
            done,
        };
        me.addr = match listen_rx.recv_timeout(Duration::from_secs(60)) {
            Ok(Ok(a)) => a,
            Ok(Err(e)) => return Err(format!("dta ingest: {e}")),
            Err(_) => {
                return Err(match me.done.try_recv() {
                    Ok(Err(e)) => format!("dta ingest --db {}: {e}", db.name()),
                    _ => format!("dta ingest --db {} did not start listening", db.name()),
                })
            }
        };
        Ok(me)
    }

    /// Its process ID.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Datagrams it reported having received.
    pub fn received(&self) -> u64 {
        self.received.load(Ordering::Relaxed)
    }

    /// Tells it how many datagrams were sent and waits for its result (and its exit).
    pub fn finish(&mut self, sent: u64, timeout: Duration) -> Result<IngestStats, String> {
        if let Some(mut s) = self.stdin.take() {
            let _ = writeln!(s, "FINISH {sent}");
            let _ = s.flush();
            // Dropping it closes its standard input too.
        }
        let r = self
            .done
            .recv_timeout(timeout)
            .map_err(|_| "dta ingest: no result in time".to_string())?;
        let _ = self.child.wait();
        r
    }
}

impl Drop for IngestChild {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Sends `trace` to `dest`, never more than `window` ahead of `received()`; the count sent.
fn send(
    trace: &Trace,
    dest: SocketAddrV4,
    window: u64,
    received: impl Fn() -> u64,
) -> Result<u64, String> {
    let mut s = PacedSender::new(dest, 0)?;
    s.set_window(window);
    for i in 0..trace.len() {
        s.push(trace.payload(i), &received)?;
    }
    s.flush(&received)?;
    Ok(s.sent)
}

fn cpu(pid: u32) -> Result<(u64, u64), String> {
    sys::pid_cpu_ns(pid).ok_or_else(|| format!("process {pid} is gone"))
}

/// A server's CPU at rest, in ns per second, over `d`.
fn idle_rate(pid: u32, d: Duration) -> Result<f64, String> {
    let (a, ac) = cpu(pid)?;
    let t = Instant::now();
    std::thread::sleep(d);
    let (b, bc) = cpu(pid)?;
    Ok(((b + bc) - (a + ac)) as f64 / t.elapsed().as_secs_f64())
}

/// Runs the whole comparison and writes `collectors.json` and `collectors.svg`.
pub fn collectors(o: &CollectorsOptions) -> Result<serde_json::Value, String> {
    let sc = scenario();
    sc.validate()?;
    let trace = Trace::generate(&mut crate::gen::Generator::new(&sc), o.reports)?;
    let truth = Truth::of(&trace, &sc.parse_config())?;
    let say = |s: String| {
        if o.verbose {
            eprintln!("{s}");
        }
    };
    say(format!(
        "  workload: {} reports: {} Key-Write keys, {} counters, {} Append entries on {} lists ({} entries)",
        trace.len(),
        truth.paths.len(),
        truth.counters.len(),
        truth.appends,
        truth.lists.len(),
        truth.entries()
    ));
    let keys = Truth::sample(&truth.paths, o.lookups, 0x100c);
    let ctr_keys = Truth::sample(&truth.counters, o.counter_checks, 0xc0c0);
    let mut rows: Vec<Contender> = Vec::new();
    let mut errors: Vec<(String, String)> = Vec::new();
    for (db, server) in [
        (Db::Redis, &o.redis),
        (Db::ClickHouse, &o.clickhouse),
        (Db::InfluxDb, &o.influxdb),
    ] {
        let Some(server) = server else {
            say(format!("  {}: not given, skipped", db.name()));
            continue;
        };
        say(format!(
            "== {} at {} (pid {})",
            db.name(),
            server.addr,
            server.pid
        ));
        match run_db(o, db, server, &trace, &truth, &keys, &ctr_keys) {
            Ok(r) => {
                say(line(&r));
                rows.push(r);
            }
            Err(e) => {
                eprintln!("  {}: {e}", db.name());
                errors.push((db.name().to_string(), e));
            }
        }
    }
    say("== dta (software RNIC)".into());
    let (soft, real) = run_dta(&sc, &trace, &truth, &keys, &ctr_keys)?;
    say(line(&soft));
    rows.push(soft);
    rows.push(real);
    say("== dta (software RNIC), each primitive alone".into());
    let per_primitive = dta_per_primitive(&sized(&sc, &truth)?, &trace)?;
    for p in &per_primitive {
        say(format!(
            "  {:<48} {:>8} reports {:>8} frames: {:>7.1} ns/report, {:>6.0} ns/frame (errors {})",
            p.primitive, p.reports, p.frames, p.ns_per_report, p.ns_per_frame, p.rnic_errors
        ));
    }
    let v = serde_json::json!({
        "figure": "collectors",
        "machine": crate::figures::machine(),
        "reports_per_trace": o.reports,
        "workload": {
            "mix": sc.mix,
            "profile": sc.profile,
            "keywrite_keys": truth.paths.len(),
            "counters": truth.counters.len(),
            "append_entries": truth.appends,
            "lists": truth.lists.len(),
            "entries": truth.entries(),
        },
        "lookups": o.lookups,
        "settle_secs": o.settle.as_secs_f64(),
        "rows": rows,
        "dta_per_primitive": per_primitive,
        "errors": errors,
    });
    crate::figures::write(&o.out, "collectors", &v)?;
    Ok(v)
}

/// A one-line summary of a row.
pub fn line(r: &Contender) -> String {
    let l = r
        .lookup
        .map(|l| format!("lookup p50 {:.1} us p99 {:.1} us", l.p50_us, l.p99_us))
        .unwrap_or_default();
    format!(
        "  {:<24} {:>9}/{} stored in {:.1} s: {:>8.1} ns/report (server {:.1} + ingest {:.1}); {:.1} MB per M entries; {l}; holds all: {}",
        r.name,
        r.stored,
        r.sent,
        r.secs,
        r.total_ns_per_report,
        r.server_ns_per_report,
        r.ingest_ns_per_report,
        r.memory.bytes_per_million_entries / 1e6,
        r.holds.complete()
    )
}

#[allow(clippy::too_many_arguments)]
fn run_db(
    o: &CollectorsOptions,
    db: Db,
    server: &Server,
    trace: &Trace,
    truth: &Truth,
    keys: &[Key],
    ctr_keys: &[Key],
) -> Result<Contender, String> {
    let database = "dta_bench";
    ingest::prepare(db, &server.addr, database, true)?;
    // Let the server come to rest after the DROP and CREATE, then take its idle rate.
    std::thread::sleep(Duration::from_millis(500));
    let idle = idle_rate(server.pid, Duration::from_secs(2))?;
    let rss0 = sys::pid_rss_bytes(server.pid);
    let db0 = db_memory(db, &server.addr, database)?;
    let mut child = IngestChild::spawn(&o.exe, db, &server.addr, database)?;
    let ipid = child.pid();
    let (s0, sc0) = cpu(server.pid)?;
    let (i0, _) = cpu(ipid)?;
    let t0 = Instant::now();
    let sent = send(trace, child.addr, o.window, || child.received())?;
    // The ingest's own CPU is read just before it exits (it prints its result, then returns).
    let ingest_cpu = Arc::new(AtomicU64::new(0));
    let st = {
        let ic = ingest_cpu.clone();
        let sampler_stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let ss = sampler_stop.clone();
        // Sample the ingest's CPU until it is gone: its last sample is its total.
        let sampler = std::thread::spawn(move || {
            while !ss.load(Ordering::Relaxed) {
                if let Some((c, _)) = sys::pid_cpu_ns(ipid) {
                    ic.store(c, Ordering::Relaxed);
                }
                std::thread::sleep(Duration::from_millis(5));
            }
        });
        let r = child.finish(sent, Duration::from_secs(600));
        sampler_stop.store(true, Ordering::Relaxed);
        let _ = sampler.join();
        r?
    };
    let secs = t0.elapsed().as_secs_f64();
    let (s1, sc1) = cpu(server.pid)?;
    std::thread::sleep(o.settle);
    let (s2, sc2) = cpu(server.pid)?;
    let settle_gross = (s2 + sc2) - (s1 + sc1);
    let settle_net = (settle_gross as f64 - idle * o.settle.as_secs_f64()).max(0.0) as u64;
    let rss1 = sys::pid_rss_bytes(server.pid);
    let db1 = db_memory(db, &server.addr, database)?;
    let ingest_ns = ingest_cpu.load(Ordering::Relaxed).saturating_sub(i0);
    let run_ns = (s1 + sc1) - (s0 + sc0);
    let stored = st.stored();
    let per = |ns: u64| ns as f64 / stored.max(1) as f64;
    let (holds, lookup, version) = read_back(db, &server.addr, database, truth, keys, ctr_keys)?;
    let growth = match (rss0, rss1) {
        (Some(a), Some(b)) => b as i64 - a as i64,
        _ => 0,
    };
    let mut notes = Vec::new();
    if st.kernel_drops > 0 || st.datagrams < sent {
        notes.push(format!(
            "the ingest received {} of {sent} reports (kernel drops {})",
            st.datagrams, st.kernel_drops
        ));
    }
    if let Some(e) = &st.first_error {
        notes.push(format!("refused {}: {e}", st.refused));
    }
    let (db_reported, what) = match (db0, db1) {
        ((Some(a), w), (Some(b), _)) if db == Db::ClickHouse => (Some(b - a.min(b)), w),
        ((Some(a), w), (Some(b), _)) => (Some(b - a), w),
        ((_, w), _) => (None, w),
    };
    Ok(Contender {
        id: db.name().into(),
        name: version,
        measured: true,
        sent,
        stored,
        secs,
        server_run_cpu_ns: run_ns,
        server_children_cpu_ns: sc1 - sc0,
        server_settle_cpu_ns: settle_net,
        server_idle_ms_per_s: idle / 1e6,
        ingest_cpu_ns: ingest_ns,
        server_ns_per_report: per(run_ns + settle_net),
        ingest_ns_per_report: per(ingest_ns),
        total_ns_per_report: per(run_ns + settle_net + ingest_ns),
        memory: Memory {
            basis: "server resident memory (VmRSS) growth over the run".into(),
            bytes: growth,
            bytes_per_million_entries: growth as f64 * 1e6 / truth.entries().max(1) as f64,
            rss_before: rss0,
            rss_after: rss1,
            db_reported,
            db_reported_what: what,
        },
        lookup: Some(lookup),
        lookup_in_process: None,
        holds,
        ingest: Some(st),
        notes,
    })
}

/// The database's own memory figure and what it is.
fn db_memory(db: Db, addr: &str, database: &str) -> Result<(Option<i64>, String), String> {
    let t = Duration::from_secs(30);
    Ok(match db {
        Db::Redis => {
            let mut c = resp::Connection::connect(addr, t)?;
            let info = c.call(&[b"INFO", b"memory"])?.unwrap_or_default();
            (
                resp::info_field(&info, "used_memory").map(|v| v as i64),
                "used_memory growth (INFO memory)".into(),
            )
        }
        Db::ClickHouse => {
            let mut h = HttpConn::new(addr, t)?;
            let q = format!(
                "SELECT sum(bytes_on_disk) FROM system.parts WHERE database = '{database}' AND active"
            );
            let v = ingest::clickhouse_query(&mut h, "", &q)?;
            (
                v.trim().parse::<i64>().ok(),
                "active parts on disk (system.parts bytes_on_disk), compressed".into(),
            )
        }
        Db::InfluxDb => {
            let mut h = HttpConn::new(addr, t)?;
            let mut body = Vec::new();
            let status = h.request("GET", "/debug/vars", "", b"", &mut body)?;
            let v: serde_json::Value = serde_json::from_slice(&body)
                .map_err(|e| format!("InfluxDB /debug/vars ({status}): {e}"))?;
            (
                v["memstats"]["HeapInuse"].as_i64(),
                "Go heap in use growth (/debug/vars memstats.HeapInuse)".into(),
            )
        }
    })
}

/// Counts what the database (as `dta ingest` wrote it into `database`) holds and reads
/// `keys` and `ctr_keys` back: (what it holds against `truth`, the lookups' latency, the
/// server's name and version).
pub fn read_back(
    db: Db,
    addr: &str,
    database: &str,
    truth: &Truth,
    keys: &[Key],
    ctr_keys: &[Key],
) -> Result<(Holds, LookupLatency, String), String> {
    let mut h = Holds {
        keywrite_expected: truth.paths.len() as u64,
        counter_expected: truth.counters.len() as u64,
        append_expected: truth.appends,
        lookups: keys.len() as u64,
        counters_checked: ctr_keys.len() as u64,
        ..Holds::default()
    };
    let t = Duration::from_secs(60);
    let mut lat = Vec::with_capacity(keys.len());
    let mut hx = [0u8; 128];
    let name;
    match db {
        Db::Redis => {
            let mut c = resp::Connection::connect(addr, t)?;
            let info = c.call(&[b"INFO", b"server"])?.unwrap_or_default();
            let version = std::str::from_utf8(&info)
                .ok()
                .and_then(|s| s.lines().find_map(|l| l.strip_prefix("redis_version:")))
                .unwrap_or("?")
                .trim()
                .to_string();
            name = format!("Redis {version}");
            h.keywrite_keys = Some(redis_scan_count(&mut c, b"kw:*")?);
            h.counter_keys = Some(redis_scan_count(&mut c, b"ctr:*")?);
            let mut k = Vec::new();
            for (&list, &n) in &truth.lists {
                ingest::redis_keys::list(list, &mut k);
                let got = c.call_int(&[b"LLEN", &k])? as u64;
                h.append_entries += got;
                h.lists_off += u64::from(got != n);
            }
            h.rows_held = Some(c.call_int(&[b"DBSIZE"])? as u64);
            for key in keys {
                ingest::redis_keys::keywrite(key.as_bytes(), &mut k);
                let t0 = Instant::now();
                let v = c.call(&[b"GET", &k])?;
                lat.push(t0.elapsed().as_nanos() as u64);
                h.lookups_ok +=
                    u64::from(v.as_deref() == truth.paths.get(key).map(|v| v.as_bytes()));
            }
            for key in ctr_keys {
                ingest::redis_keys::counter(key.as_bytes(), &mut k);
                let v = c.call(&[b"GET", &k])?;
                let n = v.and_then(|v| std::str::from_utf8(&v).ok()?.parse::<u64>().ok());
                h.counters_ok += u64::from(n == truth.counters.get(key).copied());
            }
        }
        Db::ClickHouse => {
            let mut c = HttpConn::new(addr, t)?;
            let mut q = |sql: &str| ingest::clickhouse_query(&mut c, database, sql);
            name = format!("ClickHouse {}", q("SELECT version()")?.trim());
            let num = |s: String| s.trim().parse::<u64>().map_err(|e| format!("{s:?}: {e}"));
            h.keywrite_keys = Some(num(q("SELECT uniqExact(flow) FROM paths")?)?);
            h.counter_keys = Some(num(q("SELECT uniqExact(host) FROM counters")?)?);
            let rows = num(q("SELECT count() FROM paths")?)?
                + num(q("SELECT count() FROM counters")?)?
                + num(q("SELECT count() FROM events")?)?;
            h.rows_held = Some(rows);
            let per_list = q("SELECT list, count() FROM events GROUP BY list ORDER BY list")?;
            let mut got: BTreeMap<u32, u64> = BTreeMap::new();
            for l in per_list.lines() {
                let mut f = l.split('\t');
                if let (Some(a), Some(b)) = (f.next(), f.next()) {
                    got.insert(
                        a.parse().map_err(|_| format!("{l:?}"))?,
                        b.parse().map_err(|_| format!("{l:?}"))?,
                    );
                }
            }
            h.append_entries = got.values().sum();
            h.lists_off = lists_off(&truth.lists, &got);
            for key in keys {
                let sql = format!(
                    "SELECT hex(argMax(path, at)) FROM paths WHERE flow = unhex('{}')",
                    hex(key.as_bytes(), &mut hx)
                );
                let t0 = Instant::now();
                let v = q(&sql)?;
                lat.push(t0.elapsed().as_nanos() as u64);
                let want = truth
                    .paths
                    .get(key)
                    .map(|v| hex(v.as_bytes(), &mut hx).to_ascii_uppercase());
                h.lookups_ok += u64::from(Some(v.trim().to_string()) == want);
            }
            for key in ctr_keys {
                let sql = format!(
                    "SELECT sum(bytes) FROM counters WHERE host = unhex('{}')",
                    hex(key.as_bytes(), &mut hx)
                );
                let v = q(&sql)?;
                h.counters_ok +=
                    u64::from(v.trim().parse::<u64>().ok() == truth.counters.get(key).copied());
            }
        }
        Db::InfluxDb => {
            let mut c = HttpConn::new(addr, t)?;
            let mut body = Vec::new();
            c.request("GET", "/ping", "", b"", &mut body)?;
            let mut q = |s: &str| ingest::influx_query(&mut c, database, s, false);
            let version = q("SHOW DIAGNOSTICS")
                .ok()
                .and_then(|v| influx_diag(&v, "build", "Version"))
                .unwrap_or_else(|| "?".into());
            name = format!("InfluxDB {version}");
            let card = |v: serde_json::Value| -> Option<u64> {
                v["results"][0]["series"][0]["values"][0][0].as_u64()
            };
            h.keywrite_keys = card(q("SHOW SERIES EXACT CARDINALITY FROM path")?);
            h.counter_keys = card(q("SHOW SERIES EXACT CARDINALITY FROM hostbytes")?);
            let count = |v: &serde_json::Value| -> u64 {
                v["results"][0]["series"][0]["values"][0][1]
                    .as_u64()
                    .unwrap_or(0)
            };
            let rows = count(&q("SELECT count(hops) FROM path")?)
                + count(&q("SELECT count(bytes) FROM hostbytes")?)
                + count(&q("SELECT count(entry) FROM event")?);
            h.rows_held = Some(rows);
            let per_list = q("SELECT count(entry) FROM event GROUP BY list")?;
            let mut got: BTreeMap<u32, u64> = BTreeMap::new();
            for s in per_list["results"][0]["series"]
                .as_array()
                .into_iter()
                .flatten()
            {
                let list = s["tags"]["list"].as_str().and_then(|l| l.parse().ok());
                let n = s["values"][0][1].as_u64();
                if let (Some(l), Some(n)) = (list, n) {
                    got.insert(l, n);
                }
            }
            h.append_entries = got.values().sum();
            h.lists_off = lists_off(&truth.lists, &got);
            for key in keys {
                let s = format!(
                    "SELECT last(hops) FROM path WHERE flow = '{}'",
                    hex(key.as_bytes(), &mut hx)
                );
                let t0 = Instant::now();
                let v = q(&s)?;
                lat.push(t0.elapsed().as_nanos() as u64);
                let want = truth
                    .paths
                    .get(key)
                    .map(|v| hex(v.as_bytes(), &mut hx).to_string());
                let got = v["results"][0]["series"][0]["values"][0][1]
                    .as_str()
                    .map(str::to_string);
                h.lookups_ok += u64::from(got.is_some() && got == want);
            }
            for key in ctr_keys {
                let s = format!(
                    "SELECT sum(bytes) FROM hostbytes WHERE host = '{}'",
                    hex(key.as_bytes(), &mut hx)
                );
                let v = q(&s)?;
                let got = v["results"][0]["series"][0]["values"][0][1].as_u64();
                h.counters_ok +=
                    u64::from(got.is_some() && got == truth.counters.get(key).copied());
            }
        }
    }
    Ok((h, LookupLatency::of(lat), name))
}

/// A value of `SHOW DIAGNOSTICS`: series `series`, column `column`.
fn influx_diag(v: &serde_json::Value, series: &str, column: &str) -> Option<String> {
    let s = v["results"][0]["series"]
        .as_array()?
        .iter()
        .find(|s| s["name"] == series)?;
    let i = s["columns"].as_array()?.iter().position(|c| c == column)?;
    s["values"][0][i].as_str().map(str::to_string)
}

fn lists_off(want: &BTreeMap<u32, u64>, got: &BTreeMap<u32, u64>) -> u64 {
    let mut off = want.iter().filter(|(l, n)| got.get(l) != Some(n)).count() as u64;
    off += got.keys().filter(|l| !want.contains_key(l)).count() as u64;
    off
}

/// Counts the distinct keys matching `pattern` with `SCAN` (never `KEYS`, which blocks the
/// server). `SCAN` may return a key twice (while the server rehashes): they are counted once.
fn redis_scan_count(c: &mut resp::Connection, pattern: &[u8]) -> Result<u64, String> {
    let mut cursor = b"0".to_vec();
    let mut seen: std::collections::HashSet<Vec<u8>> = std::collections::HashSet::new();
    loop {
        let mut cmd = Vec::new();
        resp::encode(
            &mut cmd,
            &[b"SCAN", &cursor, b"MATCH", pattern, b"COUNT", b"10000"],
        );
        c.send(&cmd)?;
        let bad = || "Redis: SCAN did not answer [cursor, [keys]]".to_string();
        if c.read_reply(|r| r == resp::Reply::Array(Some(2)))? {
            cursor = c
                .read_reply(|r| match r {
                    resp::Reply::Bulk(Some(b)) => Some(b.to_vec()),
                    _ => None,
                })?
                .ok_or_else(bad)?;
            let k = c
                .read_reply(|r| match r {
                    resp::Reply::Array(Some(k)) => Some(k),
                    _ => None,
                })?
                .ok_or_else(bad)?;
            for _ in 0..k {
                if let Some(key) = c.read_reply(|r| match r {
                    resp::Reply::Bulk(Some(b)) => Some(b.to_vec()),
                    _ => None,
                })? {
                    seen.insert(key);
                }
            }
        } else {
            return Err(bad());
        }
        if cursor == b"0" {
            return Ok(seen.len() as u64);
        }
    }
}

/// `base` with stores sized for the data set of `truth`: Key-Write and Key-Increment slots at
/// least twice the keys (load ≤ 0.5), Append rings that hold every entry of their busiest list.
fn sized(base: &Scenario, truth: &Truth) -> Result<Scenario, String> {
    let keys_max = truth.paths.len().max(truth.counters.len()).max(1) as u64;
    let slots_log2 = (2 * keys_max)
        .next_power_of_two()
        .trailing_zeros()
        .clamp(10, 28);
    let busiest = truth.lists.values().copied().max().unwrap_or(0);
    let batch = base.batch as u64;
    let capacity = busiest.div_ceil(batch).max(1) * batch;
    let sc = Scenario {
        slots_log2,
        capacity: u32::try_from(capacity).map_err(|_| "an Append list too long for a ring")?,
        chunks_log2: 4,
        ..base.clone()
    };
    sc.validate()?;
    Ok(sc)
}

/// The software RNIC's cost for one primitive of the mix alone.
#[derive(Debug, Clone, Serialize)]
pub struct PrimitiveCost {
    /// The primitive and what it carries.
    pub primitive: String,
    /// Reports of that primitive in the trace.
    pub reports: u64,
    /// RoCEv2 frames they became.
    pub frames: u64,
    /// RNIC drop and error counters, summed (must be 0).
    pub rnic_errors: u64,
    /// RNIC thread CPU per report (ns).
    pub ns_per_report: f64,
    /// RNIC thread CPU per frame (ns).
    pub ns_per_frame: f64,
}

/// The software RNIC fed each primitive's reports of `trace` alone (translated ahead of time,
/// at saturation): where its CPU per report comes from.
pub fn dta_per_primitive(sc: &Scenario, trace: &Trace) -> Result<Vec<PrimitiveCost>, String> {
    let parse = sc.parse_config();
    type Is = fn(&Primitive) -> bool;
    let kinds: [(String, Is); 3] = [
        (
            format!("Key-Write, N = {} (INT paths)", sc.redundancy),
            |p| matches!(p, Primitive::KeyWrite { .. }),
        ),
        (
            format!("Key-Increment, N = {} (host counters)", sc.redundancy),
            |p| matches!(p, Primitive::KeyIncrement { .. }),
        ),
        (
            format!("Append, batch {} (loss and congestion events)", sc.batch),
            |p| matches!(p, Primitive::Append { .. }),
        ),
    ];
    let mut out = Vec::new();
    for (name, is) in kinds {
        let mut sub = Trace::with_capacity(trace.len() / 2);
        for i in 0..trace.len() {
            let d = trace.get(i);
            if parse_report(d.payload, &parse).is_ok_and(|r| is(&r.primitive)) {
                sub.push(d.src, d.dst, d.payload);
            }
        }
        if sub.is_empty() {
            continue;
        }
        let r = crate::replay::rnic_saturated(sc, &sub, 1)?;
        out.push(PrimitiveCost {
            primitive: name,
            reports: r.reports,
            frames: r.frames,
            rnic_errors: r.rnic_errors,
            ns_per_report: r.ns_per_report,
            ns_per_frame: r.ns_per_frame,
        });
    }
    Ok(out)
}

/// `dta` on the software RNIC (measured) and on a real RNIC (by construction).
fn run_dta(
    base: &Scenario,
    trace: &Trace,
    truth: &Truth,
    keys: &[Key],
    ctr_keys: &[Key],
) -> Result<(Contender, Contender), String> {
    let sc = sized(base, truth)?;
    let (slots_log2, capacity) = (sc.slots_log2, sc.capacity);
    // The translator (on its own host in a deployment) translates the trace ahead of time;
    // its RoCEv2 frames then go to the collector's software RNIC over loopback UDP as fast as
    // the RNIC takes them (full receive bursts, as the ingest processes get).
    let inspect = |collector: &Collector| {
        let stores = ["paths", "counters", "losses", "congestion"];
        let mut region_bytes = 0u64;
        for s in stores {
            region_bytes += collector.store(s).ok_or(s)?.memory_bytes() as u64;
        }
        let mut h = Holds {
            keywrite_expected: truth.paths.len() as u64,
            counter_expected: truth.counters.len() as u64,
            append_expected: truth.appends,
            lookups: keys.len() as u64,
            counters_checked: ctr_keys.len() as u64,
            ..Holds::default()
        };
        // Every key through the query engine, in process; the sample's latency too.
        let paths = collector.store("paths").ok_or("paths")?;
        let view = paths.keywrite().ok_or("paths is not Key-Write")?;
        let n = sc.redundancy as usize;
        let answer = |k: &Key| match view.query(k, n, Vote::Plurality) {
            KeyWriteAnswer::Value { value, .. } => {
                let want = truth.paths[k];
                value.as_bytes().get(..want.len()) == Some(want.as_bytes())
            }
            _ => false,
        };
        h.keywrite_keys = Some(truth.paths.keys().filter(|k| answer(k)).count() as u64);
        let mut lat = Vec::with_capacity(keys.len());
        for k in keys {
            let t0 = Instant::now();
            let a = std::hint::black_box(view.query(k, n, Vote::Plurality));
            lat.push(t0.elapsed().as_nanos() as u64);
            let _ = a;
        }
        let in_process = LookupLatency::of(lat);
        // The same sample through the HTTP query API.
        let ctl = collector.control_addr().ok_or("no control port")?;
        let mut c = HttpConn::new(&ctl.to_string(), Duration::from_secs(30))?;
        let mut lat = Vec::with_capacity(keys.len());
        let mut body = Vec::new();
        let mut hx = [0u8; 128];
        for k in keys {
            let target = format!("/query/keywrite/paths/{}", hex(k.as_bytes(), &mut hx));
            let t0 = Instant::now();
            let status = c.request("GET", &target, "", b"", &mut body)?;
            lat.push(t0.elapsed().as_nanos() as u64);
            let v: serde_json::Value = serde_json::from_slice(&body)
                .map_err(|e| format!("dta query answered {status}: {e}"))?;
            let want = hex(truth.paths[k].as_bytes(), &mut hx).to_string();
            h.lookups_ok += u64::from(
                v["result"] == "value" && v["value"].as_str().is_some_and(|s| s.starts_with(&want)),
            );
        }
        let http = LookupLatency::of(lat);
        let counters = collector.store("counters").ok_or("counters")?;
        let cview = counters.counter().ok_or("counters is not Key-Increment")?;
        let exact = truth
            .counters
            .iter()
            .filter(|(k, &v)| cview.query(k, n).estimate == v)
            .count() as u64;
        h.counter_keys = Some(exact);
        h.counters_ok = ctr_keys
            .iter()
            .filter(|k| cview.query(k, n).estimate == truth.counters[*k])
            .count() as u64;
        // Every Append entry read back from the rings and matched against what was sent.
        // Entries are the reports' values zero-padded to the store's entry size: compare both
        // padded to 32 bytes.
        let pad = |b: &[u8]| {
            let mut p = [0u8; 32];
            let n = b.len().min(32);
            p[..n].copy_from_slice(&b[..n]);
            p
        };
        let mut left: HashMap<(u32, [u8; 32]), u32> = HashMap::with_capacity(truth.entries.len());
        for ((l, v), c) in &truth.entries {
            *left.entry((*l, pad(v.as_bytes()))).or_default() += c;
        }
        let mut got_lists: BTreeMap<u32, u64> = BTreeMap::new();
        let mut strays = 0u64;
        for name in ["losses", "congestion"] {
            let s = collector.store(name).ok_or(name)?;
            let g = s.append().ok_or("not Append")?;
            let first = match s.config.kind {
                dta_collector::config::StoreKindConfig::Append {
                    first_list, lists, ..
                } => first_list..first_list + lists,
                _ => return Err(format!("{name} is not Append")),
            };
            for list in first.clone() {
                let mut rd = ListReader::new(
                    &s.region,
                    g.layout,
                    g.list_offset(list - first.start),
                    Start::Seq(1),
                );
                rd.poll(&s.region, usize::MAX, |_, e| {
                    *got_lists.entry(list).or_default() += 1;
                    match left.get_mut(&(list, pad(e))) {
                        Some(c) if *c > 0 => *c -= 1,
                        _ => strays += 1,
                    }
                });
            }
        }
        h.append_strays = strays;
        h.append_entries = truth.appends - left.values().map(|&c| c as u64).sum::<u64>();
        h.lists_off = lists_off(&truth.lists, &got_lists);
        Ok((region_bytes, h, in_process, http))
    };
    let (sat, (region_bytes, holds, in_process, http)) =
        rnic_saturated_then(&sc, trace, 1, true, inspect)?;
    let rnic_ns = (sat.rnic_cpu_secs * 1e9) as u64;
    let stored = sat.reports;
    let per = |ns: f64| ns / stored.max(1) as f64;
    let memory = Memory {
        basis: format!(
            "the four stores' regions as configured for this data set (2^{slots_log2} Key-Write \
             and Key-Increment slots, N = {}, Append rings of {capacity} entries)",
            sc.redundancy
        ),
        bytes: region_bytes as i64,
        bytes_per_million_entries: region_bytes as f64 * 1e6 / truth.entries().max(1) as f64,
        ..Memory::default()
    };
    let mut notes = vec![
        format!(
            "the translator (on its own host) translated the trace ahead of time; its {} \
             RoCEv2 frames went to the software RNIC over loopback UDP as fast as it took them",
            sat.frames
        ),
        "Key-Write keys and counters held: the ones the query engine answers exactly".into(),
    ];
    if sat.rnic_errors > 0 || sat.executed != sat.frames {
        notes.push(format!(
            "the RNIC executed {} of {} frames ({} errors)",
            sat.executed, sat.frames, sat.rnic_errors
        ));
    }
    let soft = Contender {
        id: "dta-sw-rnic".into(),
        name: "dta, software RNIC".into(),
        measured: true,
        sent: trace.len() as u64,
        stored,
        secs: sat.secs,
        server_run_cpu_ns: rnic_ns,
        ingest_cpu_ns: 0,
        server_ns_per_report: per(rnic_ns as f64),
        ingest_ns_per_report: 0.0,
        total_ns_per_report: per(rnic_ns as f64),
        memory: memory.clone(),
        lookup: Some(http),
        lookup_in_process: Some(in_process),
        holds: holds.clone(),
        notes,
        ..Contender::default()
    };
    let real = Contender {
        id: "dta-real-rnic".into(),
        name: "dta, real RNIC".into(),
        measured: false,
        memory,
        lookup: Some(http),
        lookup_in_process: Some(in_process),
        notes: vec![
            "not measured: the RNIC executes the RDMA WRITEs and atomics without the \
             collector's CPU, so collector CPU per report is 0 by construction; memory and \
             queries are the software RNIC's (same regions, same query engine)"
                .into(),
        ],
        ..Contender::default()
    };
    Ok((soft, real))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn truth_of_a_trace() {
        let sc = scenario();
        let t = Trace::generate(&mut crate::gen::Generator::new(&sc), 3000).unwrap();
        let tr = Truth::of(&t, &sc.parse_config()).unwrap();
        assert_eq!(tr.reports, 3000, "the mix has only the three stored kinds");
        assert!(!tr.paths.is_empty() && !tr.counters.is_empty() && tr.appends > 0);
        assert_eq!(tr.lists.values().sum::<u64>(), tr.appends);
        assert_eq!(
            tr.entries.values().map(|&c| c as u64).sum::<u64>(),
            tr.appends
        );
        let s = Truth::sample(&tr.paths, 50, 1);
        assert_eq!(s.len(), 50);
        assert_eq!(s, Truth::sample(&tr.paths, 50, 1), "stable");
        let mut d = s.clone();
        d.sort_unstable_by(|a, b| a.as_bytes().cmp(b.as_bytes()));
        d.dedup();
        assert_eq!(d.len(), 50, "distinct");
        assert_eq!(
            Truth::sample(&tr.paths, usize::MAX, 1).len(),
            tr.paths.len()
        );
    }

    #[test]
    fn latency_quantiles() {
        let l = LookupLatency::of((1..=100).map(|i| i * 1000).collect());
        assert_eq!(
            (l.count, l.p50_us, l.p99_us, l.max_us),
            (100, 50.0, 99.0, 100.0)
        );
        assert_eq!(LookupLatency::of(Vec::new()).count, 0);
    }

    #[test]
    fn holds_is_complete_only_when_everything_matches() {
        let mut h = Holds {
            keywrite_keys: Some(3),
            keywrite_expected: 3,
            counter_keys: None,
            counter_expected: 2,
            append_entries: 5,
            append_expected: 5,
            lookups: 2,
            lookups_ok: 2,
            ..Holds::default()
        };
        assert!(h.complete());
        h.lookups_ok = 1;
        assert!(!h.complete());
        h.lookups_ok = 2;
        h.lists_off = 1;
        assert!(!h.complete());
    }
}
