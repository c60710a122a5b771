//! The charts of the two stacked figures (one document of panels each, under a heading):
//! `zero-interference` and `collectors`.

use super::charts::{empty_rows, f, line, utc_date};
use crate::svg::{Chart, Series};

/// `zero-interference.svg`: Redis latency, the monitored core's CPU spent on monitoring, and
/// Redis throughput, per monitoring configuration (medians over the rounds; the spread as
/// dashed markers).
pub(super) fn zero_interference_charts(v: &serde_json::Value) -> Vec<Chart> {
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
pub(super) fn collectors_charts(v: &serde_json::Value, cap: &str) -> Vec<Chart> {
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
