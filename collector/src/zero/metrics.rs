//! The pull collector's `/metrics` families (`dta_pull_*`).

use dta_proto::stats::{PromKind, PromWriter};

use super::cm::PullCmCounters;
use super::puller::PullView;
use super::reader::ReadCounters;
use super::stats::{LatencyHist, PullCounters};

/// Quantiles written for each latency.
const QUANTILES: [(f64, &str); 5] = [
    (0.5, "0.5"),
    (0.9, "0.9"),
    (0.99, "0.99"),
    (0.999, "0.999"),
    (1.0, "1"),
];

fn latency(w: &mut PromWriter, name: &str, help: &str, h: &LatencyHist) {
    let qs: Vec<(&str, f64)> = QUANTILES
        .iter()
        .map(|&(q, label)| (label, h.quantile(q) as f64 / 1e9))
        .collect();
    w.summary(name, help, &qs, h.sum() as f64 / 1e9, h.count());
}

/// Writes the puller's counters, gauges and latency quantiles.
pub fn write(w: &mut PromWriter, view: &PullView) {
    let s = view.stats();
    w.counter_families(
        "dta_pull",
        PullCounters::INFO,
        &[],
        &[(vec![], s.pull.values())],
    );
    w.counter_families(
        "dta_pull_qp",
        ReadCounters::INFO,
        &[],
        &[(vec![], s.reads.values())],
    );
    w.counter_families(
        "dta_pull",
        PullCmCounters::INFO,
        &[],
        &[(vec![], s.cm.values())],
    );
    w.single(
        PromKind::Gauge,
        "dta_pull_agents_up",
        "Agents connected (an RC QP each).",
        s.agents_up as f64,
    );
    w.single(
        PromKind::Gauge,
        "dta_pull_in_flight_bytes",
        "READ response bytes asked for and not yet received (Credit-FC keeps it at most T).",
        s.in_flight as f64,
    );
    w.single(
        PromKind::Gauge,
        "dta_pull_in_flight_high_water_bytes",
        "The most READ response bytes in flight at once since the start.",
        s.in_flight_high_water as f64,
    );
    w.single(
        PromKind::Gauge,
        "dta_pull_credit_bytes",
        "Credit-FC's total T ([pull] credit_bytes).",
        view.credit_bytes() as f64,
    );
    w.single(
        PromKind::Counter,
        "dta_pull_credit_waits",
        "READs that waited for Credit-FC credits.",
        s.credit_waits as f64,
    );
    w.single(
        PromKind::Counter,
        "dta_pull_kernel_drops",
        "Datagrams the kernel dropped on the collecting sockets (receive buffer full: incast).",
        s.kernel_drops as f64,
    );
    w.single(
        PromKind::Counter,
        "dta_pull_collect_cpu_seconds",
        "CPU time of the collecting threads.",
        s.collect_cpu_ns as f64 / 1e9,
    );
    latency(
        w,
        "dta_pull_read_latency_seconds",
        "RDMA READ latency (request sent to last response), by quantile, since the start.",
        &s.read_latency,
    );
    latency(
        w,
        "dta_pull_round_latency_seconds",
        "Time to pull every block of an agent once (a round), by quantile, since the start.",
        &s.round_latency,
    );
}
