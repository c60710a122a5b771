//! One database contender run end to end (Redis, ClickHouse or InfluxDB behind a `dta ingest`
//! child): the trace sent, CPU and memory taken, lookups timed; and the database's own memory
//! figure.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use dta_proto::Key;

use crate::sys;
use crate::trace::Trace;

use super::child::IngestChild;
use super::http::HttpConn;
use super::ingest::Db;
use super::readback::read_back;
use super::*;

#[allow(clippy::too_many_arguments)]
pub(super) fn run_db(
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
pub(super) fn db_memory(
    db: Db,
    addr: &str,
    database: &str,
) -> Result<(Option<i64>, String), String> {
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
