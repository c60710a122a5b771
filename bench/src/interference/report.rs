//! The summary: medians and spread per monitoring configuration, and the printed table.

use serde_json::json;

use super::parse::spread;
use super::*;

pub(super) fn f(v: &serde_json::Value) -> f64 {
    v.as_f64().unwrap_or(f64::NAN)
}

/// Medians and spreads over the successful runs of `m`.
pub(super) fn summarize(m: Monitor, runs: &[serde_json::Value]) -> serde_json::Value {
    let mine: Vec<&serde_json::Value> = runs
        .iter()
        .filter(|r| r["monitor"] == m.key() && r["error"].is_null())
        .collect();
    let s = |get: &dyn Fn(&serde_json::Value) -> f64| {
        let v: Vec<f64> = mine.iter().map(|r| get(r)).collect();
        let (median, min, max) = spread(&v);
        json!({"median": median, "min": min, "max": max})
    };
    json!({
        "monitor": m.key(), "label": m.label(), "runs": mine.len(),
        "rps": s(&|r| f(&r["redis"]["rps"])),
        "p50_ms": s(&|r| f(&r["redis"]["p50_ms"])),
        "p99_ms": s(&|r| f(&r["redis"]["p99_ms"])),
        "p999_ms": s(&|r| f(&r["redis"]["p999_ms"])),
        "max_ms": s(&|r| f(&r["redis"]["max_ms"])),
        "monitor_cpu_pct": s(&|r| f(&r["monitor_cpu_pct"])),
        "software_rnic_thread_cpu_pct": s(&|r| f(&r["software_rnic_thread_cpu_pct"])),
        "real_rnic_cpu_pct": s(&|r| f(&r["real_rnic_cpu_pct"])),
        "collector_cpu_pct": s(&|r| f(&r["collector_cpu_pct"])),
        "redis_cpu_pct": s(&|r| f(&r["redis_cpu_pct"])),
        "core_busy_pct": s(&|r| f(&r["core_busy_pct"])),
        "collections_per_due": s(&|r| f(&r["collections"]) / f(&r["collections_due"])),
    })
}

/// The summary as a Markdown table (bench/README.md).
pub fn table(v: &serde_json::Value) -> String {
    let mut t = String::from(
        "| configuration | runs | Redis GET/s | p50 ms | p99 ms | p99.9 ms | monitor CPU on the \
         monitored core (% of a core) | of it software-RNIC thread | with a real RNIC | \
         collecting side (other core) |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    let cell = |x: &serde_json::Value, digits: usize| {
        let (m, lo, hi) = (f(&x["median"]), f(&x["min"]), f(&x["max"]));
        if m.is_nan() {
            "–".to_string()
        } else {
            format!("{m:.digits$} ({lo:.digits$}–{hi:.digits$})")
        }
    };
    for s in v["summary"].as_array().into_iter().flatten() {
        t.push_str(&format!(
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |\n",
            s["label"].as_str().unwrap_or(""),
            s["runs"],
            cell(&s["rps"], 0),
            cell(&s["p50_ms"], 3),
            cell(&s["p99_ms"], 3),
            cell(&s["p999_ms"], 3),
            cell(&s["monitor_cpu_pct"], 3),
            cell(&s["software_rnic_thread_cpu_pct"], 3),
            cell(&s["real_rnic_cpu_pct"], 3),
            cell(&s["collector_cpu_pct"], 2),
        ));
    }
    t
}
