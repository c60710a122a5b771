//! `dta bench zero-interference`: what monitoring costs the monitored host (issue 30; the ZERO
//! paper's Figures 3 and 4, redone here).
//!
//! A Redis server runs on one core (`--monitored-core`, 1: the monitored host) under a steady,
//! closed-loop `redis-benchmark` GET load from the other core (`--other-core`, 0), and is
//! monitored every `--interval-ms` (1 s) by one of:
//!
//! - nothing (the baseline);
//! - Prometheus' node_exporter with its default collectors, on the monitored core, scraped by a
//!   Prometheus server on the other core;
//! - node_exporter with only the `cpu`, `netdev` and `stat` collectors (what `dta-agent`
//!   publishes: `/proc/stat` and `/proc/net/dev`), scraped the same way;
//! - `dta-agent` on the monitored core (software RNIC), pulled with RDMA READ by `dta-collector`
//!   (`[pull]`) on the other core.
//!
//! Every run starts its own servers (Debian's binaries, private data directories under a work
//! directory, 127.0.0.1 ports nothing listens on, pinned with `taskset`, with a parent-death
//! signal through `setpriv` so that none outlives this process) and stops them at its end,
//! whatever happens. Configurations are interleaved and repeated (`--rounds`, each round in a
//! rotated order) because two shared cores are noisy; the summary gives medians and the spread.
//! With `--cpu-shares` the bench and all it starts run in a cgroup `cpu` group of that weight,
//! so that other login sessions' work on a shared machine leaves Redis most of its core.
//!
//! Measured per run, over the load's window only (after start-up and a settle time):
//! Redis throughput and latency quantiles from redis-benchmark's own histogram (parsed by
//! [`parse_redis_benchmark`]; p99.9 from its printed percentile and cumulative distributions,
//! see [`RedisBench::p999_ms`]); the monitor's CPU on the monitored core (utime + stime from
//! `/proc/PID/stat`), and for `dta-agent` its threads' CPU (`/proc/PID/task/TID/schedstat`):
//! the main thread runs the software RNIC that answers READs (a real RNIC answers them with no
//! host CPU), the `dta-agent-sample` thread reads `/proc` and republishes the blocks, which is
//! what remains on a real RNIC; the collecting side's CPU (Prometheus or `dta-collector`, not
//! on the monitored host); and proof that the monitor worked during the window (successful
//! scrapes from Prometheus' `up` series; pull rounds done and READs served from the
//! collector's and the agent's `/metrics`).
//!
//! This is a control-plane harness: nothing here is on a per-packet path.
//!
//! Rooms: this module holds the options and the [`Monitor`] kinds; `parse` reads the tools'
//! output (pure functions); `host` starts and accounts for processes on the host; `monitors`
//! runs one monitoring configuration; `runner` runs the rounds and writes the JSON; `report`
//! summarises it. Only `runner` decides what is measured.

mod host;
mod monitors;
mod parse;
mod report;
mod runner;
#[cfg(test)]
mod tests;

pub use parse::{
    core_ticks, parse_redis_benchmark, prom_query_value, prom_sum, spread, stat_cpu_ticks,
    CoreTicks, RedisBench,
};
pub use report::table;
pub use runner::zero_interference;

use std::path::PathBuf;

use serde::Serialize;

/// Who monitors the Redis host in a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
pub enum Monitor {
    /// Nothing: the baseline.
    None,
    /// node_exporter, default collectors, scraped by Prometheus.
    NodeExporter,
    /// node_exporter with the cpu, netdev and stat collectors only, scraped by Prometheus.
    NodeExporterMatched,
    /// dta-agent (software RNIC) pulled with RDMA READ by dta-collector.
    DtaAgent,
}

impl Monitor {
    /// Every configuration, in the first round's order.
    pub const ALL: [Monitor; 4] = [
        Monitor::None,
        Monitor::NodeExporter,
        Monitor::NodeExporterMatched,
        Monitor::DtaAgent,
    ];

    /// The JSON key.
    pub fn key(self) -> &'static str {
        match self {
            Monitor::None => "none",
            Monitor::NodeExporter => "node_exporter",
            Monitor::NodeExporterMatched => "node_exporter_matched",
            Monitor::DtaAgent => "dta_agent",
        }
    }

    /// What the figure and table call it.
    pub fn label(self) -> &'static str {
        match self {
            Monitor::None => "no monitoring",
            Monitor::NodeExporter => "node_exporter (defaults) + Prometheus",
            Monitor::NodeExporterMatched => "node_exporter (cpu, netdev, stat) + Prometheus",
            Monitor::DtaAgent => "dta-agent + pull collector (RDMA READ)",
        }
    }
}

/// `dta bench zero-interference` settings.
#[derive(Debug, Clone, Serialize)]
pub struct InterferenceOptions {
    /// Seconds of load per run (sets the requests per run when `requests` is 0).
    pub secs: f64,
    /// Rounds; each runs every monitor once, in an order rotated by one per round.
    pub rounds: u32,
    /// The configurations measured.
    pub monitors: Vec<Monitor>,
    /// redis-benchmark parallel clients.
    pub clients: u32,
    /// redis-benchmark pipeline depth.
    pub pipeline: u32,
    /// Keys (GETs pick one of them at random; SETs fill them first).
    pub keys: u64,
    /// Value size in bytes.
    pub value_bytes: u32,
    /// Requests per run; 0: `secs` times the throughput of a calibration run.
    pub requests: u64,
    /// The monitored host's core: Redis and the monitor's agent.
    pub monitored_core: usize,
    /// The other side's core: load generator, Prometheus, the pull collector.
    pub other_core: usize,
    /// Monitoring interval (scrape, pull and agent sampling), ms.
    pub interval_ms: u32,
    /// Seconds between a monitor answering and the load starting (start-up costs stay out).
    pub settle_secs: f64,
    /// Run this bench, and so every process it starts, in its own cgroup v1 `cpu` group with
    /// this `cpu.shares` (root; 0: leave scheduling alone). A session's processes otherwise
    /// share the CPU with every other session's as one autogroup of weight 1024 whatever their
    /// nice values, so on a machine shared with other work this is how the two cores come to
    /// behave more like a dedicated host; inside the group Redis and the monitor compete as
    /// equals, as on a real host.
    pub cpu_shares: u64,
    /// Where the runs keep their data (a fresh directory under the system's temporary one
    /// when unset); removed at the end unless `keep_work`.
    pub work: Option<PathBuf>,
    /// Keep the work directory (servers' logs and data).
    pub keep_work: bool,
    /// Where `dta-agent` and `dta-collector` are (the `dta` binary's directory when unset).
    pub bin_dir: Option<PathBuf>,
    /// Output directory (`zero-interference.json` and `.svg`).
    pub out: PathBuf,
}

impl Default for InterferenceOptions {
    fn default() -> Self {
        InterferenceOptions {
            secs: 60.0,
            rounds: 3,
            monitors: Monitor::ALL.to_vec(),
            clients: 50,
            pipeline: 1,
            keys: 100_000,
            value_bytes: 64,
            requests: 0,
            monitored_core: 1,
            other_core: 0,
            interval_ms: 1000,
            settle_secs: 3.0,
            cpu_shares: 0,
            work: None,
            keep_work: false,
            bin_dir: None,
            out: PathBuf::from("bench/results"),
        }
    }
}
