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
//!
//! Rooms: this module holds the workload, the options, the ground truth and the result types,
//! the shared CPU and sending helpers, and [`collectors`], which runs every contender and writes
//! the JSON; `child` drives a `dta ingest` process; `databases` runs one database contender and
//! `readback` checks what it holds; `dta` runs `dta` itself. The database protocols live in
//! `resp`, `http` and `lineproto`, the ingest process in `ingest`.

pub mod http;
pub mod ingest;
pub mod lineproto;
pub mod resp;

mod child;
mod databases;
mod dta;
mod readback;
#[cfg(test)]
mod tests;

pub use child::IngestChild;
pub use dta::{dta_per_primitive, PrimitiveCost};
pub use readback::read_back;

use databases::run_db;
use dta::run_dta;

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddrV4;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use dta_proto::wire::report::{parse_report, ParseConfig, Primitive};
use dta_proto::{Key, Value};
use serde::Serialize;

use crate::gen::{Mix, Scenario};
use crate::sender::PacedSender;
use crate::sys;
use crate::trace::Trace;
use crate::workload::SplitMix64;

use self::ingest::{Db, IngestStats};

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
