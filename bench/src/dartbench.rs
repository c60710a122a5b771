//! `dta bench dart`: DART (every reporter its own QP, no translator) against DTA (one
//! translator, one QP) into the same software-RNIC collector, as the number of reporter QPs
//! grows.
//!
//! For each QP count the harness starts a fresh collector with one Key-Write store, connects a
//! [`DartFleet`] of that many reporters over RDMA_CM, and has the reporters write the same
//! INT-path reports (report i from reporter i mod QPs, as the switch that saw the flow). The
//! baseline, measured in the same run, sends the same reports through one translator into a
//! fresh collector. Per point:
//!
//! - collector CPU per report: on-CPU time of the software RNIC's thread
//!   (`/proc/self/task/TID/schedstat`) from the first report until every frame is confirmed,
//!   divided by the reports;
//! - lost writes: reports dropped (a reporter's ring stayed full) plus frames abandoned
//!   (`psn_skipped`); late writes: frames that landed only after a resend;
//! - query correctness over all keys (the same layout and hashes, so it should match).
//!
//! The software RNIC keeps every QP's state in memory and has no QP cache to thrash, so the
//! figure shows what the QP count costs a software responder; a real RNIC's cache misses
//! (DTA's argument) need the real-RNIC backend on hardware.

use std::net::{Ipv4Addr, SocketAddrV4};
use std::time::{Duration, Instant};

use dta_collector::config::{CollectorConfig, DeviceSection, StoreConfig, StoreKindConfig};
use dta_collector::query::keywrite::{KeyWriteAnswer, Vote};
use dta_collector::Collector;
use dta_proto::hash::HashProfile;
use dta_proto::meta::StoreKind;
use dta_proto::wire::report::{Primitive, Profile};
use dta_translator::config::{CollectorSection, TranslatorConfig};
use dta_translator::driver::WorkerSnapshot;
use dta_translator::Translator;
use serde_json::json;

use crate::dart::{DartFleet, DartOptions};
use crate::figures::FigOptions;
use crate::sender::{free_udp_port, PacedSender};
use crate::sys;
use crate::workload::Workload;

/// The store's rdma_cm port.
const PORT: u16 = 1450;
/// Slots of the Key-Write store (N = 2).
const SLOTS: u32 = 1 << 20;

/// One point of the figure.
#[derive(Debug, Clone, Default)]
pub struct DartPoint {
    /// "dart" or "dta".
    pub path: &'static str,
    /// Reporter QPs at the collector.
    pub qps: u32,
    /// Reports written.
    pub reports: u64,
    /// RDMA frames the reporters (or the translator) sent.
    pub frames: u64,
    /// Software-RNIC thread CPU per report (ns).
    pub rnic_ns_per_report: f64,
    /// Reports dropped plus frames abandoned.
    pub lost: u64,
    /// Frames resent (writes that landed late).
    pub late: u64,
    /// Keys whose query returns their value.
    pub correct: u64,
    /// Seconds to connect every QP.
    pub connect_secs: f64,
    /// Seconds from the first report until every frame was confirmed.
    pub secs: f64,
    /// QPs that broke (no answer for 5 s): their unconfirmed writes are lost.
    pub broken: u64,
    /// The collector's sequence-error NAKs and duplicate requests (resends it had executed).
    pub naks: u64,
    /// Duplicate requests at the collector.
    pub duplicates: u64,
}

fn collector() -> Result<(Collector, SocketAddrV4), String> {
    let ip = Ipv4Addr::LOCALHOST;
    let addr = SocketAddrV4::new(ip, free_udp_port(ip)?);
    let c = Collector::start(CollectorConfig {
        collector: DeviceSection {
            roce: addr,
            hugepages: false,
            ..DeviceSection::default()
        },
        static_peers: vec![],
        stores: vec![StoreConfig {
            name: "paths".into(),
            port: Some(PORT),
            cm_allow: None,
            kind: StoreKindConfig::new(StoreKind::KeyWrite {
                slots: SLOTS,
                slot_size: 32,
                hash: HashProfile::Independent,
            })
            .with_redundancy(2),
        }],
        export: Default::default(),
        pull: None,
    })
    .map_err(|e| format!("collector: {e}"))?;
    Ok((c, addr))
}

fn rnic_cpu(tids: &[u64]) -> u64 {
    tids.iter().filter_map(|&t| sys::task_cpu_ns(t)).sum()
}

/// Keys answered with their value (the last report of each key wins).
fn correct(c: &Collector, wl: &Workload, reports: u64) -> u64 {
    let Some(s) = c.store("paths") else { return 0 };
    let Some(v) = s.keywrite() else { return 0 };
    let mut last = std::collections::HashMap::new();
    for i in 0..reports {
        if let Primitive::KeyWrite { key, value, .. } = wl.path_report(i).primitive {
            last.insert(key, value);
        }
    }
    last.iter()
        .filter(|(k, want)| match v.query(k, 2, Vote::Plurality) {
            KeyWriteAnswer::Value { value, .. } => {
                value.as_bytes().get(..want.len()) == Some(want.as_bytes())
            }
            _ => false,
        })
        .count() as u64
}

/// How long to wait for the collector's counters to show every frame: about a second when
/// every frame was confirmed (the collector publishes them every ~50 ms), else longer.
fn settle(confirmed: bool) -> Duration {
    Duration::from_secs(if confirmed { 1 } else { 10 })
}

/// DART with `qps` reporters.
pub fn dart_point(qps: u32, reports: u64, wl: &Workload) -> Result<DartPoint, String> {
    let before = sys::threads_named_now("dta-rnic");
    let (c, addr) = collector()?;
    let tids = sys::new_threads_named("dta-rnic", &before);
    let mut o = DartOptions::new(addr, PORT, qps);
    o.connect_timeout = Duration::from_secs(10);
    let mut fleet = DartFleet::connect(&o)?;
    let cpu0 = rnic_cpu(&tids);
    let t0 = Instant::now();
    for i in 0..reports {
        fleet.write(
            (i % qps as u64) as usize,
            &wl.path_report(i),
            Duration::from_secs(2),
        );
        if i % 64 == 63 {
            fleet.poll(Duration::ZERO);
        }
    }
    let drained = fleet.drain(Duration::from_secs(30));
    let secs = t0.elapsed().as_secs_f64();
    let frames: u64 = fleet.qp_stats().map(|s| s.frames).sum();
    // Drained: every frame confirmed, so executed; the wait only lets the collector publish
    // its counters (a lost frame counts twice in `frames`, so waiting for them all to arrive
    // would sit out the timeout).
    c.wait_for(settle(drained), |k| k.rcvd_pkts >= frames);
    let cpu = rnic_cpu(&tids).saturating_sub(cpu0);
    let rc = c.counters();
    log::debug!("dart {qps} QPs: collector {rc:?}");
    let k = fleet.counters();
    let skipped: u64 = fleet.qp_stats().map(|s| s.psn_skipped).sum();
    let late: u64 = fleet.qp_stats().map(|s| s.retransmitted_frames).sum();
    if !drained {
        log::warn!("dart {qps} QPs: frames still unconfirmed after 30 s");
    }
    let p = DartPoint {
        path: "dart",
        qps,
        reports,
        frames,
        rnic_ns_per_report: cpu as f64 / reports.max(1) as f64,
        lost: k.dropped() + skipped,
        late,
        correct: correct(&c, wl, reports),
        connect_secs: fleet.connect_secs,
        secs,
        broken: fleet.broken() as u64,
        naks: rc.naks_sent,
        duplicates: rc.duplicate_request,
    };
    c.shutdown();
    Ok(p)
}

/// The same reports through one translator (one QP).
pub fn dta_point(reports: u64, wl: &Workload) -> Result<DartPoint, String> {
    let before = sys::threads_named_now("dta-rnic");
    let (c, addr) = collector()?;
    let tids = sys::new_threads_named("dta-rnic", &before);
    let mut t = TranslatorConfig::default();
    t.translator.listen = SocketAddrV4::new(Ipv4Addr::LOCALHOST, 0);
    t.translator.roce = SocketAddrV4::new(Ipv4Addr::LOCALHOST, 0);
    t.collectors = vec![CollectorSection::with_cm("c", addr, vec![PORT])];
    t.routing.keyincrement = "none".into();
    t.routing.postcard = "none".into();
    let tc = Instant::now();
    let tr = Translator::start(t).map_err(|e| format!("translator: {e}"))?;
    let connect_secs = tc.elapsed().as_secs_f64();
    let mut s = PacedSender::new(tr.report_addr, 0)?;
    let mut buf = [0u8; 128];
    let cpu0 = rnic_cpu(&tids);
    let t0 = Instant::now();
    for i in 0..reports {
        let n = wl
            .path_report(i)
            .emit(Profile::Extended, &mut buf)
            .map_err(|e| e.to_string())?;
        s.push(&buf[..n], || tr.counters().rx_datagrams)?;
    }
    s.flush(|| tr.counters().rx_datagrams)?;
    tr.wait_for(Duration::from_secs(20), |k| k.rx_datagrams >= reports);
    let snaps = tr.shutdown();
    let secs = t0.elapsed().as_secs_f64();
    let frames: u64 = snaps.iter().map(|s| s.counters.frames).sum();
    c.wait_for(settle(WorkerSnapshot::all_confirmed(&snaps)), |k| {
        k.rcvd_pkts >= frames
    });
    let cpu = rnic_cpu(&tids).saturating_sub(cpu0);
    let rc = c.counters();
    let mut k = dta_translator::datapath::stats::TranslatorCounters::default();
    let (mut skipped, mut late, mut socket_drops) = (0, 0, 0);
    for sn in &snaps {
        k.merge(&sn.counters);
        socket_drops += sn.socket_drops;
        for (_, _, q) in &sn.qps {
            skipped += q.psn_skipped;
            late += q.retransmitted_frames;
        }
    }
    let p = DartPoint {
        path: "dta",
        qps: 1,
        reports,
        frames,
        rnic_ns_per_report: cpu as f64 / reports.max(1) as f64,
        lost: k.dropped() + skipped + socket_drops,
        late,
        correct: correct(&c, wl, reports),
        connect_secs,
        secs,
        broken: 0,
        naks: rc.naks_sent,
        duplicates: rc.duplicate_request,
    };
    c.shutdown();
    Ok(p)
}

fn point_json(p: &DartPoint) -> serde_json::Value {
    json!({
        "path": p.path, "qps": p.qps, "reports": p.reports, "frames": p.frames,
        "rnic_ns_per_report": p.rnic_ns_per_report, "lost": p.lost, "late": p.late,
        "correct": p.correct, "connect_secs": p.connect_secs, "secs": p.secs,
        "broken_qps": p.broken, "naks": p.naks, "duplicates": p.duplicates,
    })
}

/// Runs the QP sweep and the translator baseline; writes `dart.json` and the figure
/// (`dart.svg`: collector CPU per report; `dart-2.svg`: lost and late writes per 10^6
/// reports) to `o.out`.
pub fn dart(o: &FigOptions, qps: &[u32]) -> Result<(), String> {
    std::fs::create_dir_all(&o.out).map_err(|e| format!("{}: {e}", o.out.display()))?;
    let reports = o.reports as u64;
    let wl = Workload::new(18);
    let mut rows = Vec::new();
    let show = |p: &DartPoint| {
        eprintln!(
            "{:>5} {:>6} QPs: {:>8} reports {:>8} frames in {:.2} s, software RNIC {:>7.1} ns/report, \
             lost {}, late {}, NAKs {}, duplicates {}, broken QPs {}, keys correct {}, connect {:.2} s",
            p.path, p.qps, p.reports, p.frames, p.secs, p.rnic_ns_per_report, p.lost, p.late,
            p.naks, p.duplicates, p.broken, p.correct, p.connect_secs
        );
    };
    let base = dta_point(reports, &wl)?;
    show(&base);
    rows.push(point_json(&base));
    for &q in qps {
        let p = dart_point(q, reports, &wl)?;
        show(&p);
        rows.push(point_json(&p));
    }
    // The baseline again at the end: the machine's drift over the run.
    let base2 = dta_point(reports, &wl)?;
    show(&base2);
    rows.push(point_json(&base2));
    let v = json!({
        "reports_per_trace": reports,
        "machine": crate::figures::machine(),
        "rows": rows,
    });
    let p = o.out.join("dart.json");
    std::fs::write(&p, serde_json::to_string_pretty(&v).unwrap_or_default())
        .map_err(|e| format!("{}: {e}", p.display()))?;
    crate::figures::draw(&o.out, "dart", &v)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    /// The figure draws both charts from the JSON rows: DART per QP count, the translator as a
    /// dashed line across the sweep at its runs' mean.
    #[test]
    fn the_dart_figure_draws_from_its_json() {
        let row = |path: &str, qps: u32, ns: f64, late: u64| {
            serde_json::json!({"path": path, "qps": qps, "reports": 1000, "rnic_ns_per_report": ns,
                               "lost": 0, "late": late})
        };
        let v = serde_json::json!({"rows": [row("dta", 1, 100.0, 0), row("dart", 1, 110.0, 0),
            row("dart", 1000, 400.0, 5), row("dta", 1, 120.0, 0)]});
        let c = crate::figures::charts("dart", &v);
        assert_eq!(c.len(), 2);
        assert_eq!(c[0].series[0].points, vec![(1.0, 110.0), (1000.0, 400.0)]);
        assert_eq!(c[0].series[1].points, vec![(1.0, 110.0), (1000.0, 110.0)]);
        assert_eq!(
            c[1].series[1].points,
            vec![(1.0, 0.0), (1000.0, 5000.0)],
            "per 10^6"
        );
    }
}
