//! The benchmark sweeps behind `dta bench ...`: each mirrors a figure of the papers, writes
//! `<name>.json` with every measurement and `<name>.svg` with the chart.
//!
//! | Command | Papers' figure | What is swept |
//! |---|---|---|
//! | `micro` | issue-4 targets | one core: Append b=16, Key-Write N=2, Postcarding, Key-Increment N=2; 2 vs 1 worker |
//! | `append` | Fig. 10 | Append reports/s against batch size |
//! | `keywrite` | Fig. 12 | Key-Write reports/s against redundancy N |
//! | `postcard` | Fig. 14 | Postcarding postcards/s and frames per postcard against cache size × concurrent flows |
//! | `query` | Fig. 15 | Key-Write query success against load factor, with the formula |
//! | `baselines` | Table/§7 | collector CPU ns per report: cuckoo hash, MultiLog, dta software RNIC |
//! | `sketch` | issue 15 | Sketch-Merge: counter merges/s (vs memcpy, scalar), pipeline columns/s, merged vs central vs truth (`crate::sketchbench`) |

use std::path::{Path, PathBuf};

use dta_collector::query::keywrite::{KeyWriteAnswer, Vote};
use dta_proto::analysis::keywrite_p_empty;
use dta_proto::batch::Datagram;
use dta_proto::wire::report::{Primitive, Priority, Profile, Report, ReportFormat, ReportHeader};
use dta_proto::{Key, Value};
use serde::Serialize;
use serde_json::json;

use crate::baseline::{run_baseline, BaselineKind, BaselineResult};
use crate::gen::{Generator, Kind, Mix, Scenario, TRANSLATOR_REPORTS};
use crate::replay::{
    replay_memory, rnic_saturated, MemOptions, ReplayResult, Rig, RnicMode, RnicSaturated,
    UdpReplayOptions, UdpRig,
};
use crate::svg::{Chart, Series};
use crate::trace::Trace;
use crate::workload::Flows;

/// Sweep settings shared by every figure.
#[derive(Debug, Clone)]
pub struct FigOptions {
    /// Reports per generated trace.
    pub reports: usize,
    /// Times each trace is replayed.
    pub loops: u32,
    /// Output directory.
    pub out: PathBuf,
    /// Pin workers to cores.
    pub pin: bool,
    /// Print progress lines.
    pub verbose: bool,
}

impl Default for FigOptions {
    fn default() -> Self {
        FigOptions {
            reports: 1_000_000,
            loops: 3,
            out: PathBuf::from("bench/results"),
            pin: true,
            verbose: true,
        }
    }
}

/// The machine a result was measured on.
pub fn machine() -> serde_json::Value {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|m| m.trim().to_string())
        })
        .unwrap_or_default();
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    json!({
        "cpu": cpu,
        "cores": std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1),
        "unix_time": secs,
    })
}

/// Writes a figure's measurements (`NAME.json`) and draws its charts.
pub(crate) fn write(out: &Path, name: &str, v: &serde_json::Value) -> Result<(), String> {
    std::fs::create_dir_all(out).map_err(|e| format!("{}: {e}", out.display()))?;
    let p = out.join(format!("{name}.json"));
    let s = serde_json::to_string_pretty(v).map_err(|e| e.to_string())?;
    std::fs::write(&p, s).map_err(|e| format!("{}: {e}", p.display()))?;
    draw(out, name, v)
}

/// Figures whose charts go one above the other into one `NAME.svg`.
/// The heading of a figure drawn as one stacked document (all its charts in `NAME.svg`).
fn stacked_heading(name: &str) -> Option<&'static str> {
    match name {
        "zero-interference" => Some("Monitoring a Redis host: none, node_exporter, dta-agent"),
        "collectors" => {
            Some("Storing the same telemetry: dta against the databases operators deploy")
        }
        _ => None,
    }
}

/// Draws a figure's charts (`NAME.svg`, `NAME-2.svg`, ...; the figures with a [`stacked_heading`]: all in
/// `NAME.svg`) from its measurements; never touches `NAME.json`.
pub fn draw(out: &Path, name: &str, v: &serde_json::Value) -> Result<(), String> {
    let charts = charts(name, v);
    if let Some(heading) = stacked_heading(name) {
        // Panels of one comparison: one document, readable on its own.
        let p = out.join(format!("{name}.svg"));
        return std::fs::write(&p, crate::svg::stack(heading, &charts))
            .map_err(|e| format!("{}: {e}", p.display()));
    }
    for (i, c) in charts.iter().enumerate() {
        let n = if i == 0 {
            format!("{name}.svg")
        } else {
            format!("{name}-{}.svg", i + 1)
        };
        let p = out.join(n);
        std::fs::write(&p, c.render()).map_err(|e| format!("{}: {e}", p.display()))?;
    }
    Ok(())
}

fn trace_for(sc: &Scenario, n: usize) -> Result<Trace, String> {
    sc.validate()?;
    Trace::generate(&mut Generator::new(sc), n)
}

fn mem(o: &FigOptions, workers: usize, rnic: RnicMode) -> MemOptions {
    MemOptions {
        workers,
        loops: o.loops,
        rnic,
        pin: o.pin,
        ..MemOptions::default()
    }
}

fn log(o: &FigOptions, what: &str, r: &ReplayResult) {
    if o.verbose {
        eprintln!(
            "  {what:<50} {:>6.2} M reports/s ({:>6.2} M per CPU-s)  {:>6.2} M frames/s  {:.3} frames/report  p50 {} ns",
            r.reports_per_sec / 1e6,
            r.reports_per_cpu_sec / 1e6,
            r.frames_per_sec / 1e6,
            r.frames_per_report,
            r.latency.map_or(0, |l| l.p50_ns)
        );
    }
}

/// One primitive on one core, pipeline only and with the software RNIC inline.
#[derive(Debug, Clone, Serialize)]
pub struct MicroRow {
    /// What was measured.
    pub name: String,
    /// The issue-4 target (reports/s, pipeline only).
    pub target_reports_per_sec: f64,
    /// Translator pipeline alone.
    pub pipeline: ReplayResult,
    /// Translator pipeline + software RNIC in the same thread.
    pub with_rnic: ReplayResult,
}

/// `micro`: the issue-4 one-core targets and the 2-worker scaling ratio.
pub fn micro(o: &FigOptions) -> Result<serde_json::Value, String> {
    let cases: [(&str, Kind, f64); 4] = [
        ("Append batch 16 (18-byte loss events)", Kind::Loss, 25e6),
        (
            "Key-Write N=2 (INT paths, 20-byte values)",
            Kind::KeyWrite,
            8e6,
        ),
        ("Postcarding (5-hop INT-XD postcards)", Kind::Postcard, 15e6),
        (
            "Key-Increment N=2 (Marple host counters)",
            Kind::Counter,
            8e6,
        ),
    ];
    let mut rows = Vec::new();
    for (name, kind, target) in cases {
        let sc = Scenario {
            mix: Mix::only(kind),
            ..Scenario::default()
        };
        let t = trace_for(&sc, o.reports)?;
        let pipeline = replay_memory(&sc, &t, &mem(o, 1, RnicMode::Off))?;
        log(o, &format!("{name} [pipeline]"), &pipeline);
        if pipeline.dropped > 0 {
            // Nothing acknowledges the pipeline alone: past the QP's cap on unconfirmed PSNs
            // it refuses reports, and a rate of refusals is not the translator's rate.
            return Err(format!(
                "{name} [pipeline]: {} of {} reports refused (the pipeline alone is never \
                 acknowledged and stops at {} unconfirmed frames per QP): use fewer --reports",
                pipeline.dropped,
                pipeline.reports,
                dta_translator::datapath::qp::MAX_OUTSTANDING
            ));
        }
        let with_rnic = replay_memory(&sc, &t, &mem(o, 1, RnicMode::Inline))?;
        log(o, &format!("{name} [+RNIC]"), &with_rnic);
        rows.push(MicroRow {
            name: name.into(),
            target_reports_per_sec: target,
            pipeline,
            with_rnic,
        });
    }
    // INT ingest: P4.org Telemetry Reports (the default mix as INT-MD sink reports, INT-XD
    // postcards, drop, congestion and inner-only reports) of each version, per core. A report
    // derives about 1.85 DTA reports (every one a per-flow count, most also a path, postcard
    // or event), so these rows count Telemetry Reports, not derived ones.
    let mut int_rows = Vec::new();
    for version in [1u8, 2] {
        let sc = Scenario {
            telemetry: version,
            ..Scenario::default()
        };
        let t = trace_for(&sc, o.reports)?;
        let name = format!("INT ingest, Telemetry Report v{version}.0 (default mix)");
        let pipeline = replay_memory(&sc, &t, &mem(o, 1, RnicMode::Off))?;
        log(o, &format!("{name} [pipeline]"), &pipeline);
        if pipeline.dropped > 0 {
            // Nothing acknowledges the pipeline alone: past the QP's cap on unconfirmed PSNs
            // it refuses reports, and a rate of refusals is not the translator's rate.
            return Err(format!(
                "{name} [pipeline]: {} of {} reports refused (the pipeline alone is never \
                 acknowledged and stops at {} unconfirmed frames per QP): use fewer --reports",
                pipeline.dropped,
                pipeline.reports,
                dta_translator::datapath::qp::MAX_OUTSTANDING
            ));
        }
        let with_rnic = replay_memory(&sc, &t, &mem(o, 1, RnicMode::Inline))?;
        log(o, &format!("{name} [+RNIC]"), &with_rnic);
        int_rows.push(MicroRow {
            name,
            target_reports_per_sec: 0.0,
            pipeline,
            with_rnic,
        });
    }
    // Reporter demultiplexing: the same Append reports, retransmittable and sequenced, from
    // one reporter and from 10,000 (each tracked for sequence gaps): per-report lookups are
    // O(1), so the two rates must be within 10 %.
    let sc = Scenario {
        mix: Mix::only(Kind::Loss),
        ..Scenario::default()
    };
    let base = trace_for(&sc, o.reports)?;
    let mut reporters = Vec::new();
    for n in [1u32, 10_000] {
        let t = sequenced(&base, n)?;
        let r = replay_memory(&sc, &t, &mem(o, 1, RnicMode::Off))?;
        log(o, &format!("Append b=16, sequenced, {n} reporter(s)"), &r);
        reporters.push(r);
    }
    let reporter_ratio =
        reporters[1].reports_per_cpu_sec / reporters[0].reports_per_cpu_sec.max(1e-9);
    if o.verbose {
        eprintln!("  10,000 reporters / 1 reporter = {reporter_ratio:.3} (target >= 0.9)");
    }
    // Scaling: the demo's mix (Key-Write N=2 paths and Append loss events) on 1 and 2 workers.
    let sc = Scenario {
        mix: Mix::parse("kw=1,loss=1").expect("valid mix"),
        ..Scenario::default()
    };
    let t = trace_for(&sc, o.reports)?;
    let one = replay_memory(&sc, &t, &mem(o, 1, RnicMode::Off))?;
    log(o, "Key-Write+Append mix, 1 worker", &one);
    let two = replay_memory(&sc, &t, &mem(o, 2, RnicMode::Off))?;
    log(o, "Key-Write+Append mix, 2 workers", &two);
    let ratio = two.reports_per_sec / one.reports_per_sec.max(1e-9);
    if o.verbose {
        eprintln!("  2 workers / 1 worker = {ratio:.2}");
    }
    let v = json!({
        "figure": "micro",
        "machine": machine(),
        "reports_per_trace": o.reports,
        "loops": o.loops,
        "rows": rows,
        "int_rows": int_rows,
        "scaling": { "one_worker": one, "two_workers": two, "ratio": ratio, "target": 1.7 },
        "reporters": {
            "one": reporters[0], "ten_thousand": reporters[1],
            "ratio": reporter_ratio, "target": 0.9,
        },
    });
    write(&o.out, "micro", &v)?;
    Ok(v)
}

/// `t`'s reports made retransmittable and sequenced, sent round-robin by `reporters`
/// reporters (10.r.r.r:40041), each numbering its own reports from 1.
fn sequenced(t: &Trace, reporters: u32) -> Result<Trace, String> {
    let parse = dta_proto::wire::report::ParseConfig::default();
    let mut out = Trace::with_capacity(t.len());
    let mut next = vec![1u32; reporters as usize];
    let mut buf = [0u8; 128];
    for i in 0..t.len() {
        let d = t.get(i);
        let mut r = dta_proto::wire::report::parse_report(d.payload, &parse)
            .map_err(|e| format!("report {i}: {e:?}"))?;
        let who = i as u32 % reporters;
        r.header.retransmittable = true;
        r.header.seq = Some(next[who as usize]);
        next[who as usize] += 1;
        let n = r
            .emit(r.header.profile, &mut buf)
            .map_err(|e| format!("report {i}: {e:?}"))?;
        let src = std::net::SocketAddrV4::new(std::net::Ipv4Addr::from(0x0a00_0000 + who), 40041);
        out.push(src, d.dst, &buf[..n]);
    }
    Ok(out)
}

/// `append` (Fig. 10): Append reports/s against batch size.
pub fn append(o: &FigOptions) -> Result<serde_json::Value, String> {
    let mut rows = Vec::new();
    for batch in [1u32, 2, 4, 8, 16] {
        let sc = Scenario {
            mix: Mix::only(Kind::Loss),
            batch,
            ..Scenario::default()
        };
        let t = trace_for(&sc, o.reports)?;
        let p = replay_memory(&sc, &t, &mem(o, 1, RnicMode::Off))?;
        log(o, &format!("Append batch {batch} [pipeline]"), &p);
        let r = replay_memory(&sc, &t, &mem(o, 1, RnicMode::Inline))?;
        log(o, &format!("Append batch {batch} [+RNIC]"), &r);
        rows.push(json!({"batch": batch, "pipeline": p, "with_rnic": r}));
    }
    let v = json!({"figure": "append", "paper": "Fig. 10", "machine": machine(), "rows": rows});
    write(&o.out, "append", &v)?;
    Ok(v)
}

/// `keywrite` (Fig. 12): Key-Write reports/s against N.
pub fn keywrite(o: &FigOptions) -> Result<serde_json::Value, String> {
    let mut rows = Vec::new();
    for n in [1u8, 2, 3, 4] {
        let sc = Scenario {
            mix: Mix::only(Kind::KeyWrite),
            redundancy: n,
            ..Scenario::default()
        };
        let t = trace_for(&sc, o.reports)?;
        let p = replay_memory(&sc, &t, &mem(o, 1, RnicMode::Off))?;
        log(o, &format!("Key-Write N={n} [pipeline]"), &p);
        let r = replay_memory(&sc, &t, &mem(o, 1, RnicMode::Inline))?;
        log(o, &format!("Key-Write N={n} [+RNIC]"), &r);
        rows.push(json!({"n": n, "pipeline": p, "with_rnic": r}));
    }
    let v = json!({"figure": "keywrite", "paper": "Fig. 12", "machine": machine(), "rows": rows});
    write(&o.out, "keywrite", &v)?;
    Ok(v)
}

/// `postcard` (Fig. 14): Postcarding against cache size and concurrent flows.
pub fn postcard(o: &FigOptions) -> Result<serde_json::Value, String> {
    let caches = [256u32, 1024, 4096, 16384, 65536];
    let concurrents = [256u32, 4096, 65536];
    let mut rows = Vec::new();
    for &conc in &concurrents {
        for &cache in &caches {
            let sc = Scenario {
                mix: Mix::only(Kind::Postcard),
                cache_slots: cache,
                concurrent: conc,
                ..Scenario::default()
            };
            let t = trace_for(&sc, o.reports)?;
            // Entries leave the cache when their path completes or another flow needs the slot
            // (as in the papers' cache), not because the generator spaced a path's postcards
            // further apart than a flush delay.
            let mo = MemOptions {
                postcard_flush_ns: 1_000_000_000,
                ..mem(o, 1, RnicMode::Inline)
            };
            let r = replay_memory(&sc, &t, &mo)?;
            log(o, &format!("Postcards cache {cache} flows {conc}"), &r);
            rows.push(json!({"cache_slots": cache, "concurrent_flows": conc, "result": r}));
        }
    }
    let v = json!({"figure": "postcard", "paper": "Fig. 14", "machine": machine(), "rows": rows});
    write(&o.out, "postcard", &v)?;
    Ok(v)
}

/// Key-Write query outcome counts at one load.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct QueryPoint {
    /// Redundancy N.
    pub n: u8,
    /// Keys written / slots.
    pub load: f64,
    /// Keys written (and queried).
    pub keys: u64,
    /// Fraction answered with the value written.
    pub success: f64,
    /// Fraction answered empty.
    pub empty: f64,
    /// Fraction answered with a conflict.
    pub conflict: f64,
    /// Fraction answered with a wrong value (must be ~0).
    pub wrong: f64,
    /// The formula's success bound: 1 − mean over keys of p_empty(α_key, N, 32), where α_key is
    /// the load written after the key.
    pub formula_success: f64,
}

/// Writes `keys` distinct Key-Write reports through a rig into `2^slots_log2` slots with
/// redundancy `n`, then queries every key.
pub fn query_point(n: u8, slots_log2: u32, keys: u64, seed: u64) -> Result<QueryPoint, String> {
    let sc = Scenario {
        mix: Mix::only(Kind::KeyWrite),
        redundancy: n,
        slots_log2,
        ..Scenario::default()
    };
    let mut rig = Rig::new(
        &sc,
        0,
        1,
        &MemOptions {
            pin: false,
            ..MemOptions::default()
        },
    )?;
    let flows = Flows { seed, shape: 1.3 };
    let value = |i: u64| {
        let mut v = [0u8; 20];
        v[..8].copy_from_slice(&i.to_be_bytes());
        v[8..16].copy_from_slice(&crate::workload::mix(i ^ seed).to_be_bytes());
        v
    };
    let profile = Profile::Extended;
    let mut bufs = vec![[0u8; 64]; 64];
    let mut lens = [0usize; 64];
    let mut i = 0u64;
    while i < keys {
        let m = (keys - i).min(64) as usize;
        for j in 0..m {
            let r = Report {
                header: ReportHeader {
                    profile,
                    immediate: false,
                    retransmittable: false,
                    seq: Some((i + j as u64) as u32),
                    priority: Priority::Medium,
                },
                primitive: Primitive::KeyWrite {
                    redundancy: n,
                    key: Key::new(&flows.tuple(i + j as u64)).expect("13 bytes"),
                    value: Value::new(&value(i + j as u64)).expect("20 bytes"),
                },
            };
            lens[j] = r.emit(profile, &mut bufs[j]).map_err(|e| e.to_string())?;
        }
        let views: Vec<Datagram<'_>> = (0..m)
            .map(|j| Datagram {
                src: TRANSLATOR_REPORTS,
                dst: TRANSLATOR_REPORTS,
                ip: None,
                payload: &bufs[j][..lens[j]],
            })
            .collect();
        rig.feed(1_000_000 + i, &views);
        i += m as u64;
    }
    rig.flush(1_000_000 + keys);
    let st = rig.store("paths").ok_or("no paths store")?;
    let view = st.keywrite().ok_or("paths is not Key-Write")?;
    let (mut ok, mut empty, mut conflict, mut wrong, mut predicted) = (0u64, 0u64, 0u64, 0u64, 0.0);
    for i in 0..keys {
        let key = Key::new(&flows.tuple(i)).expect("13 bytes");
        match view.query(&key, n as usize, Vote::Plurality) {
            KeyWriteAnswer::Value { value: v, .. } => {
                if v.as_bytes()[..20] == value(i) {
                    ok += 1;
                } else {
                    wrong += 1;
                }
            }
            KeyWriteAnswer::Empty => empty += 1,
            KeyWriteAnswer::Conflict { .. } => conflict += 1,
        }
        predicted += keywrite_p_empty(
            (keys - 1 - i) as f64 / view.layout.slots() as f64,
            n as u32,
            32,
        );
    }
    let k = keys.max(1) as f64;
    Ok(QueryPoint {
        n,
        load: keys as f64 / view.layout.slots() as f64,
        keys,
        success: ok as f64 / k,
        empty: empty as f64 / k,
        conflict: conflict as f64 / k,
        wrong: wrong as f64 / k,
        formula_success: 1.0 - predicted / k,
    })
}

/// `query` (Fig. 15): Key-Write query success against load factor, measured and formula.
pub fn query(o: &FigOptions) -> Result<serde_json::Value, String> {
    let slots_log2 = 18;
    let loads = [0.05, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0];
    let mut pts = Vec::new();
    for n in [1u8, 2, 4] {
        for &a in &loads {
            let keys = (a * (1u64 << slots_log2) as f64) as u64;
            let p = query_point(n, slots_log2, keys, 77)?;
            if o.verbose {
                eprintln!(
                    "  Key-Write N={n} load {a:.2}: success {:.4} (formula {:.4}) empty {:.4} conflict {:.4} wrong {}",
                    p.success, p.formula_success, p.empty, p.conflict, p.wrong
                );
            }
            pts.push(p);
        }
    }
    let v = json!({"figure": "query", "paper": "Fig. 15", "machine": machine(), "slots": 1u64 << slots_log2, "points": pts});
    write(&o.out, "query", &v)?;
    Ok(v)
}

/// The `baselines` comparison.
#[derive(Debug, Clone, Serialize)]
pub struct BaselineComparison {
    /// Receive-and-parse only.
    pub parse_only: BaselineResult,
    /// Cuckoo hash table.
    pub cuckoo: BaselineResult,
    /// MultiLog-style log.
    pub multilog: BaselineResult,
    /// dta over kernel UDP into the software RNIC.
    pub dta: ReplayResult,
    /// Software RNIC thread CPU per translated report (ns).
    pub dta_rnic_ns_per_report: f64,
    /// Translator worker CPU per translated report (ns), for reference.
    pub dta_translator_ns_per_report: f64,
    /// A real RNIC executes RDMA WRITEs without the collector's CPU.
    pub dta_real_rnic_ns_per_report: f64,
    /// dta software RNIC ns/report ÷ cuckoo ns/report, end to end (target ≤ 0.1).
    pub ratio_vs_cuckoo: f64,
    /// The software RNIC fed the same reports' frames at saturation (full receive bursts, as
    /// the baselines get).
    pub dta_saturated: RnicSaturated,
    /// Saturated software RNIC ns/report ÷ cuckoo ns/report.
    pub saturated_ratio_vs_cuckoo: f64,
    /// dta software RNIC ns/report ÷ MultiLog ns/report.
    pub ratio_vs_multilog: f64,
}

/// `baselines`: collector CPU per report for the same Append stream (batch 16).
pub fn baselines(o: &FigOptions, profile: ReportFormat) -> Result<BaselineComparison, String> {
    let sc = Scenario {
        mix: Mix::only(Kind::Loss),
        batch: 16,
        profile,
        ..Scenario::default()
    };
    let t = trace_for(&sc, o.reports)?;
    let window = 8192;
    let run = |k| -> Result<BaselineResult, String> {
        let r = run_baseline(k, sc.parse_config(), &t, o.loops, window)?;
        if o.verbose {
            eprintln!(
                "  {k:?}: {} of {} reports, {:.1} ns CPU/report (drops {}, failures {})",
                r.received, r.sent, r.cpu_ns_per_report, r.socket_drops, r.failures
            );
        }
        Ok(r)
    };
    let parse_only = run(BaselineKind::Parse)?;
    let cuckoo = run(BaselineKind::Cuckoo)?;
    let multilog = run(BaselineKind::Multilog)?;
    let rig = UdpRig::start(&sc)?;
    let dta = rig.run(
        &t,
        &UdpReplayOptions {
            loops: o.loops,
            rate: 0,
            window,
        },
    );
    rig.stop();
    let dta = dta?;
    // Per report whose data the translator sent: reports it dropped never cost the RNIC.
    let per = |s: f64| s * 1e9 / dta.translated.max(1) as f64;
    let rnic_ns = per(dta.rnic_cpu_secs.unwrap_or(0.0));
    let sat = rnic_saturated(&sc, &t, o.loops)?;
    let cmp = BaselineComparison {
        saturated_ratio_vs_cuckoo: sat.ns_per_report / cuckoo.cpu_ns_per_report.max(1e-9),
        dta_saturated: sat,
        dta_rnic_ns_per_report: rnic_ns,
        dta_translator_ns_per_report: per(dta.worker_cpu_secs),
        dta_real_rnic_ns_per_report: 0.0,
        ratio_vs_cuckoo: rnic_ns / cuckoo.cpu_ns_per_report.max(1e-9),
        ratio_vs_multilog: rnic_ns / multilog.cpu_ns_per_report.max(1e-9),
        parse_only,
        cuckoo,
        multilog,
        dta,
    };
    if o.verbose {
        eprintln!(
            "  dta software RNIC: {:.1} ns CPU/report ({} frames for {} reports), translator {:.1} ns/report; ratio vs cuckoo {:.3}",
            cmp.dta_rnic_ns_per_report,
            cmp.dta.frames,
            cmp.dta.reports,
            cmp.dta_translator_ns_per_report,
            cmp.ratio_vs_cuckoo
        );
        eprintln!(
            "  dta software RNIC at saturation: {:.1} ns CPU/report ({:.0} ns/frame, {} frames, errors {}); ratio vs cuckoo {:.3}",
            cmp.dta_saturated.ns_per_report,
            cmp.dta_saturated.ns_per_frame,
            cmp.dta_saturated.frames,
            cmp.dta_saturated.rnic_errors,
            cmp.saturated_ratio_vs_cuckoo
        );
    }
    let v = json!({"figure": "baselines", "machine": machine(), "reports": o.reports, "loops": o.loops, "result": cmp});
    write(&o.out, "baselines", &v)?;
    Ok(cmp)
}

fn f(v: &serde_json::Value) -> f64 {
    v.as_f64().unwrap_or(f64::NAN)
}

fn line(label: &str, points: Vec<(f64, f64)>, dashed: bool) -> Series {
    Series {
        label: label.into(),
        points,
        dashed,
    }
}

fn empty_rows() -> &'static Vec<serde_json::Value> {
    static EMPTY: Vec<serde_json::Value> = Vec::new();
    &EMPTY
}

/// The caption of a figure: how much was measured, on what, when (from its JSON).
fn caption(v: &serde_json::Value) -> String {
    let mut parts = Vec::new();
    if let Some(n) = v["reports_per_trace"].as_u64() {
        parts.push(format!("{n} reports per trace"));
    }
    if let Some(l) = v["loops"].as_u64() {
        parts.push(format!("{l} runs each"));
    }
    let m = &v["machine"];
    if let Some(cpu) = m["cpu"].as_str() {
        let cores = m["cores"].as_u64().unwrap_or(0);
        parts.push(format!("{cpu}, {cores} cores"));
    }
    if let Some(t) = m["unix_time"].as_u64() {
        parts.push(utc_date(t));
    }
    parts.join("; ")
}

/// `YYYY-MM-DD HH:MM UTC` of a Unix time (the civil calendar from days since 1970).
fn utc_date(t: u64) -> String {
    let days = (t / 86_400) as i64;
    let secs = t % 86_400;
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02} UTC",
        secs / 3600,
        secs % 3600 / 60
    )
}

/// The charts of figure `name` drawn from its JSON results (so they can be redrawn later with
/// `dta bench plot`).
pub fn charts(name: &str, v: &serde_json::Value) -> Vec<Chart> {
    let rows = v["rows"].as_array().unwrap_or(empty_rows());
    let cap = caption(v);
    let chart = |title: &str, x: &str, y: &str, log_x: bool, series: Vec<Series>| Chart {
        title: title.into(),
        x_label: x.into(),
        y_label: y.into(),
        log_x,
        log_y: false,
        series,
        categories: Vec::new(),
        caption: cap.clone(),
        value_labels: false,
    };
    let bars = |title: &str, cats: &[&str], y: &str, series: Vec<Series>| Chart {
        title: title.into(),
        x_label: String::new(),
        y_label: y.into(),
        log_x: false,
        log_y: false,
        series,
        categories: cats.iter().map(|c| c.to_string()).collect(),
        caption: cap.clone(),
        value_labels: false,
    };
    match name {
        "micro" => {
            let pts = |k: &str, key: &str| -> Vec<(f64, f64)> {
                rows.iter()
                    .enumerate()
                    .map(|(i, r)| (i as f64 + 1.0, f(&r[k][key]) / 1e6))
                    .collect()
            };
            let target: Vec<(f64, f64)> = rows
                .iter()
                .enumerate()
                .map(|(i, r)| (i as f64 + 1.0, f(&r["target_reports_per_sec"]) / 1e6))
                .collect();
            vec![bars(
                "One core, in memory: reports per CPU second, per primitive",
                &[
                    "Append b=16",
                    "Key-Write N=2",
                    "Postcarding",
                    "Key-Increment N=2",
                ],
                "million reports per CPU second",
                vec![
                    line(
                        "pipeline, per CPU s",
                        pts("pipeline", "reports_per_cpu_sec"),
                        false,
                    ),
                    line(
                        "+ software RNIC, per CPU s",
                        pts("with_rnic", "reports_per_cpu_sec"),
                        false,
                    ),
                    line("issue-4 target", target, true),
                ],
            )]
        }
        "append" | "keywrite" => {
            let x = if name == "append" { "batch" } else { "n" };
            let pts = |k: &str, key: &str| -> Vec<(f64, f64)> {
                rows.iter()
                    .map(|r| (f(&r[x]), f(&r[k][key]) / 1e6))
                    .collect()
            };
            let series = vec![
                line(
                    "pipeline, per CPU s",
                    pts("pipeline", "reports_per_cpu_sec"),
                    false,
                ),
                line(
                    "+ RNIC, per CPU s",
                    pts("with_rnic", "reports_per_cpu_sec"),
                    false,
                ),
                line(
                    "pipeline, per wall s",
                    pts("pipeline", "reports_per_sec"),
                    true,
                ),
            ];
            if name == "append" {
                vec![chart(
                    "Append throughput vs batch size (Fig. 10), one core",
                    "entries per RDMA WRITE (batch)",
                    "million reports per second",
                    true,
                    series,
                )]
            } else {
                vec![
                    chart(
                        "Key-Write throughput vs redundancy N (Fig. 12), one core",
                        "redundancy N",
                        "million reports per second",
                        false,
                        series,
                    ),
                    chart(
                        "Key-Write: RDMA frames sent vs redundancy N, one core",
                        "redundancy N",
                        "million RDMA frames per second (wall)",
                        false,
                        vec![line("pipeline", pts("pipeline", "frames_per_sec"), false)],
                    ),
                ]
            }
        }
        "postcard" => {
            let mut conc: Vec<u64> = rows
                .iter()
                .filter_map(|r| r["concurrent_flows"].as_u64())
                .collect();
            conc.sort_unstable();
            conc.dedup();
            let series = |g: &dyn Fn(&serde_json::Value) -> f64| -> Vec<Series> {
                conc.iter()
                    .map(|&c| {
                        line(
                            &format!("{c} concurrent flows"),
                            rows.iter()
                                .filter(|r| r["concurrent_flows"].as_u64() == Some(c))
                                .map(|r| (f(&r["cache_slots"]), g(&r["result"])))
                                .collect(),
                            false,
                        )
                    })
                    .collect()
            };
            vec![
                chart(
                    "Postcarding vs cache size (Fig. 14), one core + RNIC",
                    "translator cache slots",
                    "million postcards per CPU second",
                    true,
                    series(&|r| f(&r["reports_per_cpu_sec"]) / 1e6),
                ),
                chart(
                    "RDMA frames per postcard (0.2 = one chunk per 5-hop path)",
                    "translator cache slots",
                    "frames per postcard",
                    true,
                    series(&|r| f(&r["frames_per_report"])),
                ),
            ]
        }
        "query" => {
            let pts = v["points"].as_array().unwrap_or(empty_rows());
            let mut ns: Vec<u64> = pts.iter().filter_map(|p| p["n"].as_u64()).collect();
            ns.dedup();
            let mut series = Vec::new();
            for n in ns {
                let of = |k: &str| -> Vec<(f64, f64)> {
                    pts.iter()
                        .filter(|p| p["n"].as_u64() == Some(n))
                        .map(|p| (f(&p["load"]), f(&p[k])))
                        .collect()
                };
                series.push(line(&format!("N={n} measured"), of("success"), false));
                series.push(line(&format!("N={n} formula"), of("formula_success"), true));
            }
            vec![chart(
                "Key-Write query success vs load factor (Fig. 15), 32-bit checksums",
                "keys written / slots",
                "query success rate",
                false,
                series,
            )]
        }
        "baselines" => {
            let r = &v["result"];
            vec![bars(
                "Collector CPU per report, same Append stream (dta: batch 16)",
                &[
                    "parse only",
                    "cuckoo",
                    "MultiLog",
                    "dta, sw RNIC",
                    "same, saturated",
                    "dta, real RNIC",
                ],
                "collector CPU ns per report",
                vec![line(
                    "collector thread CPU",
                    vec![
                        (1.0, f(&r["parse_only"]["cpu_ns_per_report"])),
                        (2.0, f(&r["cuckoo"]["cpu_ns_per_report"])),
                        (3.0, f(&r["multilog"]["cpu_ns_per_report"])),
                        (4.0, f(&r["dta_rnic_ns_per_report"])),
                        (5.0, f(&r["dta_saturated"]["ns_per_report"])),
                        (6.0, f(&r["dta_real_rnic_ns_per_report"])),
                    ],
                    false,
                )],
            )]
        }
        "dart" => {
            let of = |path: &str, key: &str, per_m: bool| -> Vec<(f64, f64)> {
                rows.iter()
                    .filter(|r| r["path"] == path)
                    .map(|r| {
                        let y = f(&r[key]);
                        let y = if per_m {
                            y * 1e6 / f(&r["reports"]).max(1.0)
                        } else {
                            y
                        };
                        (f(&r["qps"]), y)
                    })
                    .collect()
            };
            // The translator's single QP, drawn across the sweep (its runs' mean).
            let across = |key: &str, per_m: bool| -> Vec<(f64, f64)> {
                let b = of("dta", key, per_m);
                let m = b.iter().map(|p| p.1).sum::<f64>() / b.len().max(1) as f64;
                let xs: Vec<f64> = of("dart", key, per_m).iter().map(|p| p.0).collect();
                match (xs.first(), xs.last()) {
                    (Some(&a), Some(&z)) if !b.is_empty() => vec![(a, m), (z, m)],
                    _ => Vec::new(),
                }
            };
            vec![
                chart(
                    "Collector CPU per report: DART reporter QPs vs one DTA translator",
                    "reporter QPs at the collector (DART)",
                    "software-RNIC CPU ns per report",
                    true,
                    vec![
                        line(
                            "DART: one QP per reporter",
                            of("dart", "rnic_ns_per_report", false),
                            false,
                        ),
                        line(
                            "DTA: one translator, one QP",
                            across("rnic_ns_per_report", false),
                            true,
                        ),
                    ],
                ),
                chart(
                    "Lost and late writes per million reports",
                    "reporter QPs at the collector (DART)",
                    "writes per 10^6 reports",
                    true,
                    vec![
                        line("DART lost", of("dart", "lost", true), false),
                        line("DART late (resent)", of("dart", "late", true), false),
                        line("DTA lost", across("lost", true), true),
                        line("DTA late (resent)", across("late", true), true),
                    ],
                ),
            ]
        }
        "zero" => {
            let cap = v["capacity"].as_array().unwrap_or(empty_rows());
            let inc = v["incast"].as_array().unwrap_or(empty_rows());
            let per_agents = |key: &str, scale: f64| -> Vec<(f64, f64)> {
                cap.iter()
                    .map(|r| (f(&r["agents"]), f(&r[key]) * scale))
                    .collect()
            };
            // Latency quantiles (x: 1 p50, 2 p90, 3 p99, 4 p99.9, 5 max) of the first run of
            // each setting.
            let quantiles = |credit: bool| -> Vec<(f64, f64)> {
                let Some(r) = inc.iter().find(|r| r["credit_fc"] == credit) else {
                    return Vec::new();
                };
                let l = &r["stats"]["read_latency"];
                [
                    (1.0, "p50_us"),
                    (2.0, "p90_us"),
                    (3.0, "p99_us"),
                    (4.0, "p999_us"),
                    (5.0, "max_us"),
                ]
                .iter()
                .map(|(x, k)| (*x, f(&l[*k])))
                .collect()
            };
            vec![
                chart(
                    "ZERO pull: collecting-thread CPU per agent round (software RNIC agents)",
                    "agents pulled",
                    "CPU us per round / sustainable agents at 1 s (thousands)",
                    true,
                    vec![
                        line(
                            "CPU us per round",
                            per_agents("collect_cpu_ns_per_round", 1e-3),
                            false,
                        ),
                        line(
                            "agents one thread sustains at 1 s (x1000)",
                            per_agents("sustainable_agents_at_1s", 1e-3),
                            true,
                        ),
                    ],
                ),
                chart(
                    "READ latency under incast (all agents due at once), with and without Credit-FC",
                    "quantile: 1 = p50, 2 = p90, 3 = p99, 4 = p99.9, 5 = max",
                    "READ latency (us)",
                    false,
                    vec![
                        line("Credit-FC", quantiles(true), false),
                        line("no Credit-FC", quantiles(false), true),
                    ],
                ),
            ]
        }
        "zero-interference" => zero_interference_charts(v),
        "collectors" => collectors_charts(v, &cap),
        _ => Vec::new(),
    }
}

/// `zero-interference.svg`: Redis latency, the monitored core's CPU spent on monitoring, and
/// Redis throughput, per monitoring configuration (medians over the rounds; the spread as
/// dashed markers).
fn zero_interference_charts(v: &serde_json::Value) -> Vec<Chart> {
    let rows = v["summary"].as_array().unwrap_or(empty_rows());
    let o = &v["options"];
    let m = &v["machine"];
    let walls: Vec<f64> = v["runs"]
        .as_array()
        .unwrap_or(empty_rows())
        .iter()
        .map(|r| f(&r["wall_secs"]))
        .collect();
    let cap = format!(
        "Redis on core {}, GET load from core {}; {} rounds x {:.1}M GETs (~{:.0} s), \
         interleaved; bars: medians; {}, {} cores; {}",
        o["monitored_core"],
        o["other_core"],
        o["rounds"],
        f(&v["requests_per_run"]) / 1e6,
        crate::interference::spread(&walls).0,
        m["cpu"].as_str().unwrap_or(""),
        m["cores"],
        m["unix_time"].as_u64().map(utc_date).unwrap_or_default()
    );
    let x_label = "node_exp. 3: node_exporter with only the cpu, netdev and stat collectors";
    let cats: Vec<String> = rows
        .iter()
        .map(|r| match r["monitor"].as_str().unwrap_or("") {
            "none" => "no monitoring".to_string(),
            "node_exporter" => "node_exporter".to_string(),
            "node_exporter_matched" => "node_exp. 3".to_string(),
            "dta_agent" => "dta-agent".to_string(),
            other => other.to_string(),
        })
        .collect();
    let of = |key: &str, stat: &str, scale: f64| -> Vec<(f64, f64)> {
        rows.iter()
            .enumerate()
            .map(|(i, r)| (i as f64 + 1.0, f(&r[key][stat]) * scale))
            .collect()
    };
    let bars = |title: &str, y: &str, series: Vec<Series>| Chart {
        title: title.into(),
        x_label: x_label.into(),
        y_label: y.into(),
        log_x: false,
        log_y: false,
        series,
        categories: cats.clone(),
        caption: cap.clone(),
        value_labels: false,
    };
    vec![
        bars(
            "Redis GET latency on the monitored core, monitored every 1 s by",
            "latency (ms)",
            vec![
                line("p50", of("p50_ms", "median", 1.0), false),
                line("p99", of("p99_ms", "median", 1.0), false),
                line("p99.9", of("p999_ms", "median", 1.0), false),
                line("p99.9 worst round", of("p999_ms", "max", 1.0), true),
            ],
        ),
        bars(
            "CPU the monitor takes on the monitored core (utime + stime)",
            "% of one core",
            vec![
                line("as run", of("monitor_cpu_pct", "median", 1.0), false),
                line(
                    "of it: software RNIC",
                    of("software_rnic_thread_cpu_pct", "median", 1.0),
                    false,
                ),
                line(
                    "with a real RNIC",
                    of("real_rnic_cpu_pct", "median", 1.0),
                    false,
                ),
                line(
                    "as run, worst round",
                    of("monitor_cpu_pct", "max", 1.0),
                    true,
                ),
            ],
        ),
        bars(
            "Redis GET throughput",
            "thousand GET/s",
            vec![
                line("median", of("rps", "median", 1e-3), false),
                line("slowest round", of("rps", "min", 1e-3), true),
                line("fastest round", of("rps", "max", 1e-3), true),
            ],
        ),
    ]
}

/// A contender's name under its bars: the product and its major.minor version.
fn contender_label(r: &serde_json::Value) -> String {
    match r["id"].as_str().unwrap_or("") {
        "dta-sw-rnic" => "dta, software RNIC".into(),
        "dta-real-rnic" => "dta, real RNIC".into(),
        _ => {
            let name = r["name"].as_str().unwrap_or("?");
            match name.split_once(' ') {
                Some((product, version)) => {
                    let mm: Vec<&str> = version.split('.').take(2).collect();
                    format!("{product} {}", mm.join("."))
                }
                None => name.to_string(),
            }
        }
    }
}

/// `collectors`: CPU per report, memory per million entries and lookup latency, one panel
/// each, every axis logarithmic (the contenders differ by orders of magnitude).
fn collectors_charts(v: &serde_json::Value, cap: &str) -> Vec<Chart> {
    let rows = v["rows"].as_array().unwrap_or(empty_rows());
    let panel = |title: &str, y: &str, cats: Vec<String>, series: Vec<Series>| Chart {
        title: title.into(),
        x_label: String::new(),
        y_label: y.into(),
        log_x: false,
        log_y: true,
        series,
        categories: cats,
        caption: cap.to_string(),
        value_labels: true,
    };
    let cats: Vec<String> = rows.iter().map(contender_label).collect();
    let at = |key: &str, scale: f64| -> Vec<(f64, f64)> {
        rows.iter()
            .enumerate()
            .map(|(i, r)| (i as f64 + 1.0, f(&r[key]) * scale))
            .collect()
    };
    let cpu = panel(
        "Collector-host CPU per stored report (lower is better; real RNIC: 0 by construction)",
        "CPU ns per report (log scale)",
        cats.clone(),
        vec![
            line(
                "server (dta: RNIC thread)",
                at("server_ns_per_report", 1.0),
                false,
            ),
            line(
                "ingest process (parse + client)",
                at("ingest_ns_per_report", 1.0),
                false,
            ),
            line(
                "total on the collector host",
                at("total_ns_per_report", 1.0),
                false,
            ),
        ],
    );
    let mem: Vec<(f64, f64)> = rows
        .iter()
        .enumerate()
        .map(|(i, r)| {
            let b = f(&r["memory"]["bytes_per_million_entries"]);
            (i as f64 + 1.0, b.max(0.0) / 1e6)
        })
        .collect();
    let memory = panel(
        "Memory per million entries (servers: resident memory growth; dta: its regions)",
        "MB per 10^6 entries (log scale)",
        cats,
        vec![line("memory per million entries", mem, false)],
    );
    // Lookups: each contender's query interface; dta's also in process. The real RNIC's rows
    // are the software RNIC's (same memory, same engine): drawn once.
    let mut lcats = Vec::new();
    let (mut p50, mut p99) = (Vec::new(), Vec::new());
    for r in rows.iter().filter(|r| r["id"] != "dta-real-rnic") {
        let mut add = |name: String, l: &serde_json::Value| {
            if l.is_null() {
                return;
            }
            lcats.push(name);
            let x = lcats.len() as f64;
            p50.push((x, f(&l["p50_us"])));
            p99.push((x, f(&l["p99_us"])));
        };
        if r["id"] == "dta-sw-rnic" {
            add("dta, HTTP API".into(), &r["lookup"]);
            add("dta, in process".into(), &r["lookup_in_process"]);
        } else {
            add(contender_label(r), &r["lookup"]);
        }
    }
    let lookups = panel(
        "Key-Write point lookup latency, one request at a time (lower is better)",
        "microseconds (log scale)",
        lcats,
        vec![line("p50", p50, false), line("p99", p99, false)],
    );
    let mut out = vec![cpu, memory, lookups];
    let prim = v["dta_per_primitive"].as_array().unwrap_or(empty_rows());
    if !prim.is_empty() {
        // Where the software RNIC's CPU goes: per frame, and frames per report by primitive.
        let cats = prim
            .iter()
            .map(|p| {
                let name = p["primitive"].as_str().unwrap_or("?");
                name.split(" (").next().unwrap_or(name).to_string()
            })
            .collect();
        let at = |key: &str| -> Vec<(f64, f64)> {
            prim.iter()
                .enumerate()
                .map(|(i, p)| (i as f64 + 1.0, f(&p[key])))
                .collect()
        };
        out.push(panel(
            "dta's software RNIC, each primitive of the mix alone: CPU per report and per frame",
            "CPU ns (log scale)",
            cats,
            vec![
                line("per report", at("ns_per_report"), false),
                line("per RoCEv2 frame", at("ns_per_frame"), false),
            ],
        ));
    }
    out
}

/// Redraws the SVGs of every `NAME.json` in `dir`.
pub fn plot(dir: &Path) -> Result<usize, String> {
    let mut n = 0;
    for name in [
        "micro",
        "append",
        "keywrite",
        "postcard",
        "query",
        "baselines",
        "dart",
        "zero",
        "zero-interference",
        "collectors",
    ] {
        let p = dir.join(format!("{name}.json"));
        let Ok(s) = std::fs::read_to_string(&p) else {
            continue;
        };
        let v: serde_json::Value =
            serde_json::from_str(&s).map_err(|e| format!("{}: {e}", p.display()))?;
        draw(dir, name, &v)?;
        n += 1;
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `bench plot` redraws the SVGs and leaves the measurements byte for byte as they were.
    #[test]
    fn plot_never_rewrites_its_input() {
        let dir = std::env::temp_dir().join(format!("dta-plot-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        // Compact JSON: a rewrite would pretty-print it.
        let input = r#"{"rows":[{"batch":1,"pipeline":{"reports_per_sec":1e6,"reports_per_cpu_sec":2e6},"with_rnic":{"reports_per_cpu_sec":1e6}}]}"#;
        std::fs::write(dir.join("append.json"), input).unwrap();
        assert_eq!(plot(&dir).unwrap(), 1);
        assert_eq!(
            std::fs::read_to_string(dir.join("append.json")).unwrap(),
            input
        );
        assert!(dir.join("append.svg").exists());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn captions_say_runs_machine_and_date() {
        assert_eq!(utc_date(0), "1970-01-01 00:00 UTC");
        assert_eq!(utc_date(1_795_666_370), "2026-11-26 04:12 UTC");
        assert_eq!(utc_date(951_782_400), "2000-02-29 00:00 UTC");
        let v = json!({"loops": 3, "reports_per_trace": 1000,
                       "machine": {"cpu": "AMD EPYC", "cores": 2, "unix_time": 0}, "rows": []});
        assert_eq!(
            caption(&v),
            "1000 reports per trace; 3 runs each; AMD EPYC, 2 cores; 1970-01-01 00:00 UTC"
        );
        let c = charts("micro", &v);
        assert_eq!(c[0].categories.len(), 4, "categories as bars");
    }

    #[test]
    fn charts_redraw_from_json() {
        let v = json!({"rows": [
            {"batch": 1, "pipeline": {"reports_per_sec": 1e6, "reports_per_cpu_sec": 2e6}, "with_rnic": {"reports_per_cpu_sec": 1e6}},
            {"batch": 16, "pipeline": {"reports_per_sec": 4e6, "reports_per_cpu_sec": 9e6}, "with_rnic": {"reports_per_cpu_sec": 7e6}},
        ]});
        let c = charts("append", &v);
        assert_eq!(c.len(), 1);
        assert_eq!(c[0].series.len(), 3);
        assert_eq!(c[0].series[0].points, vec![(1.0, 2.0), (16.0, 9.0)]);
        assert!(charts("nothing", &v).is_empty());
    }

    /// The collectors figure: four log-scale panels in one document; the real RNIC's 0 is
    /// written, not drawn; dta's lookups appear twice (HTTP, in process), the real RNIC's not.
    #[test]
    fn collectors_panels_redraw_from_json() {
        let row = |id: &str, name: &str, server: f64, ingest: f64, mem: f64| {
            json!({"id": id, "name": name, "server_ns_per_report": server,
                   "ingest_ns_per_report": ingest, "total_ns_per_report": server + ingest,
                   "memory": {"bytes_per_million_entries": mem},
                   "lookup": {"p50_us": 20.0, "p99_us": 30.0},
                   "lookup_in_process": if id.starts_with("dta") {
                       json!({"p50_us": 0.2, "p99_us": 0.4}) } else { json!(null) }})
        };
        let v = json!({"rows": [
            row("redis", "Redis 7.0.15", 1000.0, 1050.0, 61e6),
            row("dta-sw-rnic", "dta, software RNIC", 2400.0, 0.0, 44e6),
            row("dta-real-rnic", "dta, real RNIC", 0.0, 0.0, 44e6),
        ], "dta_per_primitive": [
            {"primitive": "Append, batch 16 (events)", "ns_per_report": 62.0, "ns_per_frame": 990.0},
        ]});
        let c = charts("collectors", &v);
        assert_eq!(c.len(), 4);
        assert!(c.iter().all(|c| c.log_y && c.value_labels));
        assert_eq!(
            c[0].categories,
            vec!["Redis 7.0", "dta, software RNIC", "dta, real RNIC"]
        );
        assert_eq!(c[0].series[2].points[2], (3.0, 0.0));
        assert_eq!(
            c[2].categories,
            vec!["Redis 7.0", "dta, HTTP API", "dta, in process"]
        );
        assert_eq!(c[3].categories, vec!["Append, batch 16"]);
        let dir = std::env::temp_dir().join(format!("dta-coll-fig-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        draw(&dir, "collectors", &v).unwrap();
        let svg = std::fs::read_to_string(dir.join("collectors.svg")).unwrap();
        assert_eq!(
            svg.matches("<svg").count(),
            5,
            "one document of four panels"
        );
        assert!(svg.contains(">2.4k</text>") && svg.contains(">0</text>"));
        assert!(!dir.join("collectors-2.svg").exists());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn query_success_tracks_the_formula() {
        let p = query_point(2, 12, 410, 5).unwrap();
        assert_eq!(p.wrong, 0.0);
        assert!(p.success > 0.9, "{p:?}");
        assert!((p.success - p.formula_success).abs() < 0.05, "{p:?}");
        let heavy = query_point(1, 10, 1024, 5).unwrap();
        assert!(heavy.success < p.success);
        assert!(
            (heavy.success - heavy.formula_success).abs() < 0.06,
            "{heavy:?}"
        );
    }
}
