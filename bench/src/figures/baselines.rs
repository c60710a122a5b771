//! `baselines`: collector CPU per report for the same Append stream: receive-and-parse only,
//! a cuckoo hash table, a MultiLog-style log and dta's software RNIC.

use dta_proto::wire::report::ReportFormat;
use serde::Serialize;
use serde_json::json;

use super::{machine, trace_for, write, FigOptions};
use crate::baseline::{run_baseline, BaselineKind, BaselineResult};
use crate::gen::{Kind, Mix, Scenario};
use crate::replay::{rnic_saturated, ReplayResult, RnicSaturated, UdpReplayOptions, UdpRig};

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
