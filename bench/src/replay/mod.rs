//! `dta replay`: a trace through the production translator pipeline and software RNIC, in
//! memory on 1..k pinned workers or over the kernel UDP backend on loopback.
//!
//! In memory, each worker thread owns a [`Rig`]: one [`Pipeline`] (worker `i` of `k`) wired to
//! its own [`Responder`] and collector stores, exactly as the translator and the collector run
//! them, with the wires replaced by function calls. The trace is sharded before the clock
//! starts by the pipeline's own ownership rule (an Append report goes to worker `list % k`, a
//! postcard to the owner of its cache slot, everything else round-robin), so no report is
//! handed between workers. Latency is measured per burst: every report of a burst is stamped
//! when the burst is injected, and reports are credited, oldest first, when the pipeline's
//! `translated` and drop counters move (exact for Key-Write and Key-Increment, which translate
//! at once; first-in-first-out across lists for Append and postcards).
//!
//! Rooms: this module holds the options and the result types ([`MemOptions`], [`ReplayResult`],
//! [`Latency`]) and how RNIC errors are counted; `rig` the in-memory pipeline-plus-RNIC;
//! `memory` the sharded multi-worker replay over rigs; `udp` the kernel UDP replay; `saturated`
//! the software RNIC at saturation. None of them changes the translator or the RNIC: they only
//! drive the production code.

mod memory;
mod rig;
mod saturated;
#[cfg(test)]
mod tests;
mod udp;

pub use memory::{replay_memory, shard};
pub use rig::Rig;
pub use saturated::{rnic_saturated, rnic_saturated_then, RnicSaturated};
pub use udp::{replay_udp, UdpReplayOptions, UdpRig};

use std::net::{Ipv4Addr, SocketAddrV4};
use std::path::PathBuf;

use dta_collector::config::{CollectorConfig, DeviceSection, StaticPeer};

use dta_collector::rnic::counters::RnicCounters;
use dta_proto::wire::ethernet::MacAddr;
use dta_translator::datapath::stats::TranslatorCounters;
use hdrhistogram::Histogram;
use serde::Serialize;

use crate::gen::Scenario;
use crate::sys;

/// The translator's RoCEv2 address inside a rig.
pub const RIG_TRANSLATOR: SocketAddrV4 = SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 101), 4791);
/// The collector's RoCEv2 address inside a rig.
pub const RIG_COLLECTOR: SocketAddrV4 = SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 51), 4791);
const TRANSLATOR_MAC: MacAddr = MacAddr([2, 0, 0, 0, 0, 0x01]);
const COLLECTOR_MAC: MacAddr = MacAddr([2, 0, 0, 0, 0, 0x51]);

/// A software-RNIC collector for a scenario's stores (written with its N, up to 8): RoCEv2 on
/// `roce`, its metadata published to `meta`, and one static peer, a one-worker translator at
/// `peer` (QPNs from 0x100). The loopback rigs, `dta bench collectors` and the pcap backend's
/// comparison start their collectors from this.
pub(crate) fn loopback_collector(
    sc: &Scenario,
    roce: SocketAddrV4,
    meta: PathBuf,
    peer: SocketAddrV4,
) -> CollectorConfig {
    CollectorConfig {
        collector: DeviceSection {
            roce,
            metadata_file: Some(meta),
            // The scenario's stores are written with its N (up to 8).
            max_redundancy: 8,
            ..DeviceSection::default()
        },
        static_peers: vec![StaticPeer {
            roce: peer,
            workers: 1,
            qpn_base: 0x100,
            mac: "02:00:00:00:00:01".into(),
        }],
        stores: sc.stores(),
        export: Default::default(),
        pull: None,
    }
}

/// What happens to the translator's frames in memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum RnicMode {
    /// The worker's own software RNIC executes every frame, and its ACKs return (the whole
    /// system on one core per worker).
    Inline,
    /// Frames are counted and discarded: the translator pipeline alone (no ACKs come back, so
    /// the ACK timeout is set beyond the run).
    Off,
}

/// In-memory replay settings.
#[derive(Debug, Clone)]
pub struct MemOptions {
    /// Worker threads (each with its own pipeline and RNIC).
    pub workers: usize,
    /// Times the trace is replayed.
    pub loops: u32,
    /// Reports per `handle_reports` call.
    pub burst: usize,
    /// Frame sink.
    pub rnic: RnicMode,
    /// Pin worker `i` to core `i`.
    pub pin: bool,
    /// Let the RNIC verify every ICRC.
    pub verify_icrc: bool,
    /// Append flush delay (ns).
    pub append_flush_ns: u64,
    /// Postcard flush delay (ns).
    pub postcard_flush_ns: u64,
    /// Reporters tracked for sequence gaps.
    pub max_reporters: usize,
}

impl Default for MemOptions {
    fn default() -> Self {
        MemOptions {
            workers: 1,
            loops: 1,
            burst: 32,
            rnic: RnicMode::Inline,
            pin: true,
            verify_icrc: true,
            append_flush_ns: 1_000_000,
            postcard_flush_ns: 1_000_000,
            max_reporters: 16_384,
        }
    }
}

/// Latency percentiles in nanoseconds.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct Latency {
    /// Reports measured.
    pub count: u64,
    /// 50th percentile.
    pub p50_ns: u64,
    /// 90th percentile.
    pub p90_ns: u64,
    /// 99th percentile.
    pub p99_ns: u64,
    /// 99.9th percentile.
    pub p999_ns: u64,
    /// Largest.
    pub max_ns: u64,
}

impl Latency {
    fn of(h: &Histogram<u64>) -> Latency {
        Latency {
            count: h.len(),
            p50_ns: h.value_at_quantile(0.5),
            p90_ns: h.value_at_quantile(0.9),
            p99_ns: h.value_at_quantile(0.99),
            p999_ns: h.value_at_quantile(0.999),
            max_ns: h.max(),
        }
    }
}

/// What one replay measured.
#[derive(Debug, Clone, Default, Serialize)]
pub struct ReplayResult {
    /// `memory` or `udp`.
    pub path: String,
    /// Worker threads.
    pub workers: usize,
    /// Reports injected.
    pub reports: u64,
    /// Reports translated (their data left in an RDMA frame).
    pub translated: u64,
    /// Reports dropped by the translator (all reasons).
    pub dropped: u64,
    /// Reports handed between workers (0 when sharding follows ownership).
    pub handoffs: u64,
    /// RoCEv2 frames emitted.
    pub frames: u64,
    /// Bytes of those frames (Ethernet to ICRC).
    pub frame_bytes: u64,
    /// RDMA messages the software RNIC executed (0 with the RNIC off).
    pub rnic_executed: u64,
    /// RNIC drop and error counters, summed (must be 0).
    pub rnic_errors: u64,
    /// Non-zero translator drop counters and RNIC error counters, by name.
    pub drop_reasons: Vec<(String, u64)>,
    /// Datagrams the kernel dropped (UDP path).
    pub socket_drops: u64,
    /// Wall time of the measured phase (s).
    pub secs: f64,
    /// Reports per second of wall time.
    pub reports_per_sec: f64,
    /// Reports per CPU second of the worker threads: what one dedicated core would sustain
    /// (the honest figure on a shared machine, where a worker gets only part of a core).
    pub reports_per_cpu_sec: f64,
    /// RoCEv2 frames per second.
    pub frames_per_sec: f64,
    /// Frames per report.
    pub frames_per_report: f64,
    /// Frame bytes per report.
    pub bytes_per_report: f64,
    /// Injection → frame emission (memory path only).
    pub latency: Option<Latency>,
    /// CPU seconds of the whole process during the run (getrusage).
    pub cpu_secs: f64,
    /// CPU seconds of the worker threads (memory) or the translator worker (UDP).
    pub worker_cpu_secs: f64,
    /// CPU seconds of the software RNIC thread (UDP path).
    pub rnic_cpu_secs: Option<f64>,
    /// Peak resident memory of the process so far (KiB, VmHWM).
    pub peak_rss_kib: u64,
    /// Datagrams on the INT Telemetry Report port (`reports` counts them too).
    pub int_datagrams: u64,
    /// Telemetry Report v1.0 reports read.
    pub int_reports_v1: u64,
    /// Telemetry Report v2.0 individual reports read.
    pub int_reports_v2: u64,
    /// DTA reports derived from them.
    pub int_derived: u64,
    /// Telemetry Reports not read or mapped (all reasons).
    pub int_dropped: u64,
    /// Non-zero `int_drop_*` counters, by reason.
    pub int_drop_reasons: Vec<(String, u64)>,
    /// Sequence gaps per (node, hw_id), and reports missing in them.
    pub int_seq_gaps: u64,
    /// Reports missing in those gaps.
    pub int_seq_missing: u64,
}

impl ReplayResult {
    /// Adds a worker's INT ingest counters.
    pub fn add_int(&mut self, c: &TranslatorCounters) {
        self.int_datagrams += c.int_rx_datagrams;
        self.int_reports_v1 += c.int_reports_v1;
        self.int_reports_v2 += c.int_reports_v2;
        self.int_derived += c.int_derived();
        self.int_dropped += c.int_dropped();
        self.int_seq_gaps += c.int_seq_gaps;
        self.int_seq_missing += c.int_seq_missing;
        for (i, v) in c.iter() {
            if let (Some(reason), true) = (i.name.strip_prefix("int_drop_"), v > 0) {
                merge_reason(&mut self.int_drop_reasons, reason, v);
            }
        }
    }
}

impl ReplayResult {
    fn finish(&mut self) {
        let s = self.secs.max(1e-9);
        self.reports_per_sec = self.reports as f64 / s;
        self.reports_per_cpu_sec = self.reports as f64 / self.worker_cpu_secs.max(1e-9);
        self.frames_per_sec = self.frames as f64 / s;
        self.frames_per_report = self.frames as f64 / self.reports.max(1) as f64;
        self.bytes_per_report = self.frame_bytes as f64 / self.reports.max(1) as f64;
        self.peak_rss_kib = sys::peak_rss_kib();
    }
}

fn is_rnic_error(name: &str) -> bool {
    !matches!(
        name,
        "rcvd_pkts"
            | "sent_pkts"
            | "writes"
            | "write_bytes"
            | "acks_sent"
            | "atomics"
            | "icrc_ident_solved"
            | "duplicate_request"
    )
}

fn add_reasons(
    out: &mut Vec<(String, u64)>,
    t: &TranslatorCounters,
    t0: &TranslatorCounters,
    k: &RnicCounters,
    k0: &RnicCounters,
) {
    let t0: Vec<u64> = t0.iter().map(|(_, v)| v).collect();
    for ((i, v), v0) in t.iter().zip(t0) {
        if i.name.starts_with("drop_") && v > v0 {
            merge_reason(out, &format!("translator.{}", i.name), v - v0);
        }
    }
    let k0: Vec<u64> = k0.iter().map(|(_, v)| v).collect();
    for ((i, v), v0) in k.iter().zip(k0) {
        if is_rnic_error(i.name) && v > v0 {
            merge_reason(out, &format!("rnic.{}", i.name), v - v0);
        }
    }
}

fn merge_reason(out: &mut Vec<(String, u64)>, name: &str, v: u64) {
    match out.iter_mut().find(|(n, _)| n == name) {
        Some(e) => e.1 += v,
        None => out.push((name.to_string(), v)),
    }
}

fn rnic_error_sum(k: &RnicCounters) -> u64 {
    k.iter()
        .filter(|(i, _)| {
            !matches!(
                i.name,
                "rcvd_pkts"
                    | "sent_pkts"
                    | "writes"
                    | "write_bytes"
                    | "acks_sent"
                    | "atomics"
                    | "icrc_ident_solved"
                    | "duplicate_request"
            )
        })
        .map(|(_, v)| v)
        .sum()
}

/// Tests that start a collector find its RNIC thread as the `dta-rnic` thread that was not
/// there before: they must not start collectors concurrently (one test saw the other's thread
/// and counted two). Each holds this lock.
#[cfg(test)]
pub(crate) static RNIC_THREAD_TESTS: std::sync::Mutex<()> = std::sync::Mutex::new(());
