//! Every figure's charts, drawn from its JSON alone (so that `dta bench plot` redraws them
//! later): the axes, series and captions. Measures nothing and writes no file.

use super::stacked::{collectors_charts, zero_interference_charts};
use crate::svg::{Chart, Series};

pub(super) fn f(v: &serde_json::Value) -> f64 {
    v.as_f64().unwrap_or(f64::NAN)
}

pub(super) fn line(label: &str, points: Vec<(f64, f64)>, dashed: bool) -> Series {
    Series {
        label: label.into(),
        points,
        dashed,
    }
}

pub(super) fn empty_rows() -> &'static Vec<serde_json::Value> {
    static EMPTY: Vec<serde_json::Value> = Vec::new();
    &EMPTY
}

/// The caption of a figure: how much was measured, on what, when (from its JSON).
pub(super) fn caption(v: &serde_json::Value) -> String {
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
pub(super) fn utc_date(t: u64) -> String {
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
