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

//!
//! Rooms: this module holds the options, the machine description, writing `NAME.json` and
//! drawing `NAME.svg` (`write`, `draw`, `plot`); the sweeps live in `throughput` (micro,
//! append, keywrite, postcard), `query` and `baselines`; `charts` (and `stacked`, the panels
//! of `zero-interference` and `collectors`) turn a figure's JSON into charts and may not
//! measure or write.

mod baselines;
mod charts;
mod query;
mod stacked;
#[cfg(test)]
mod tests;
mod throughput;

pub use baselines::{baselines, BaselineComparison};
pub use charts::charts;
pub use query::{query, query_point, QueryPoint};
pub use throughput::{append, keywrite, micro, postcard, MicroRow};

use std::path::{Path, PathBuf};

use serde_json::json;

use crate::gen::{Generator, Scenario};
use crate::replay::{MemOptions, ReplayResult, RnicMode};
use crate::trace::Trace;

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
