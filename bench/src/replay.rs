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

use std::collections::VecDeque;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use dta_collector::config::{CollectorConfig, DeviceSection, StaticPeer};
use dta_collector::rnic::counters::RnicCounters;
use dta_collector::rnic::responder::{DeviceConfig, QpConfig, Responder};
use dta_collector::store::{build_stores, Store};
use dta_collector::Collector;
use dta_proto::batch::{Datagram, IpMeta, TxBatch};
use dta_proto::hash::{HashProfile, PostcardHasher};
use dta_proto::meta::QpMeta;
use dta_proto::wire::ethernet::MacAddr;
use dta_proto::wire::ib::{Psn, Qpn};
use dta_proto::wire::report::{parse_report, Primitive};
use dta_proto::wire::roce::L2L4_LEN;
use dta_translator::config::{CollectorSection, TranslatorConfig};
use dta_translator::datapath::pipeline::{
    CollectorTarget, Pipeline, PipelineConfig, QpBinding, RateLimit, Route,
};
use dta_translator::datapath::qp::QpTuning;
use dta_translator::datapath::stats::TranslatorCounters;
use dta_translator::Translator;
use hdrhistogram::Histogram;
use serde::Serialize;

use crate::gen::Scenario;
use crate::sender::{free_udp_port, PacedSender};
use crate::sys;
use crate::trace::Trace;

/// The translator's RoCEv2 address inside a rig.
pub const RIG_TRANSLATOR: SocketAddrV4 = SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 101), 4791);
/// The collector's RoCEv2 address inside a rig.
pub const RIG_COLLECTOR: SocketAddrV4 = SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 51), 4791);
const TRANSLATOR_MAC: MacAddr = MacAddr([2, 0, 0, 0, 0, 0x01]);
const COLLECTOR_MAC: MacAddr = MacAddr([2, 0, 0, 0, 0, 0x51]);

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

/// One worker's translator pipeline wired to its own software RNIC, in memory.
pub struct Rig {
    /// The translator pipeline (production code).
    pub pipeline: Pipeline,
    /// The software RNIC (production code).
    pub rnic: Responder,
    /// The collector stores, in [`Scenario::stores`] order.
    pub stores: Vec<Store>,
    tx: TxBatch,
    rnic_tx: TxBatch,
    mode: RnicMode,
    /// Datagrams to this port go to the INT ingest (Telemetry Report scenarios).
    int_port: Option<u16>,
    /// Frames emitted and their bytes.
    pub frames: u64,
    /// Bytes of the frames emitted.
    pub frame_bytes: u64,
}

impl Rig {
    /// Builds worker `worker` of `workers` for `sc`.
    pub fn new(
        sc: &Scenario,
        worker: usize,
        workers: usize,
        o: &MemOptions,
    ) -> Result<Rig, String> {
        let cfg = CollectorConfig {
            collector: DeviceSection {
                roce: RIG_COLLECTOR,
                hugepages: false,
                verify_icrc: o.verify_icrc,
                // The scenario's stores are written with its N (up to 8).
                max_redundancy: 8,
                ..DeviceSection::default()
            },
            static_peers: vec![],
            stores: sc.stores(),
            export: Default::default(),
            pull: None,
        };
        let mut rnic = Responder::new(DeviceConfig {
            local: RIG_COLLECTOR,
            local_mac: COLLECTOR_MAC,
            pmtu: 4096,
            l2_frames: true,
        });
        let mut stores = build_stores(&cfg, &mut rnic)?;
        let mut metas = Vec::new();
        for (i, s) in stores.iter_mut().enumerate() {
            let psn = Psn::new(0x1000 + i as u32 * 0x111);
            let peer_qpn = 0x100 + (worker * 16 + i) as u32;
            let qpn = rnic.create_qp(QpConfig {
                peer: RIG_TRANSLATOR,
                peer_mac: TRANSLATOR_MAC,
                peer_qpn: Qpn::new(peer_qpn),
                rq_psn: psn,
                sq_psn: Psn::new(0),
                verify_icrc: o.verify_icrc,
                recv_credits: 1 << 20,
            });
            s.meta.qps.push(QpMeta {
                qpn: qpn.value(),
                psn: psn.value(),
                peer_qpn,
            });
            metas.push(s.meta.clone());
        }
        let target = CollectorTarget {
            roce: RIG_COLLECTOR,
            mac: COLLECTOR_MAC,
            stores: metas
                .iter()
                .map(|m| {
                    (
                        m.clone(),
                        QpBinding {
                            local_qpn: Qpn::new(m.qps[0].peer_qpn),
                            remote_qpn: Qpn::new(m.qps[0].qpn),
                            start_psn: Psn::new(m.qps[0].psn),
                        },
                    )
                })
                .collect(),
        };
        let ack_timeout_ns = match o.rnic {
            RnicMode::Inline => 2_000_000,
            RnicMode::Off => u64::MAX / 4,
        };
        let pc = PipelineConfig {
            worker,
            workers,
            parse: sc.parse_config(),
            max_redundancy: 8,
            l2_frames: true,
            local: RIG_TRANSLATOR,
            local_mac: TRANSLATOR_MAC,
            nack_port: dta_proto::consts::DTA_NACK_PORT,
            append_flush_ns: o.append_flush_ns,
            postcard_flush_ns: o.postcard_flush_ns,
            postcard_cache_slots: sc.cache_slots,
            postcard_redundancy: 1,
            qp: QpTuning {
                ack_every: 16,
                ack_timeout_ns,
                ..QpTuning::default()
            },
            rate: RateLimit::default(),
            backlog: 1024,
            max_reporters: o.max_reporters,
            route_keywrite: Route::Single(0),
            route_keyincrement: Route::Single(1),
            route_postcard: Route::Single(2),
            sketch: sc.sketch.map(|s| s.settings()).unwrap_or_default(),
        };
        let mut pipeline = Pipeline::new(pc, &[target]).map_err(|e| e.to_string())?;
        let int_port = (sc.telemetry != 0).then_some(sc.int_port);
        if int_port.is_some() {
            pipeline.set_int_ingest(sc.int_settings());
        }
        // A Telemetry Report may derive up to MAX_DERIVED reports.
        let per = pipeline.frames_per_report_max()
            * if int_port.is_some() {
                dta_translator::datapath::int_ingest::MAX_DERIVED
            } else {
                1
            };
        let cap = o.burst.max(1) * per + 256;
        Ok(Rig {
            pipeline,
            rnic,
            stores,
            tx: TxBatch::new(cap, 2048),
            rnic_tx: TxBatch::new(cap, 256),
            mode: o.rnic,
            int_port,
            frames: 0,
            frame_bytes: 0,
        })
    }

    /// Feeds one burst of reports at `now`, and moves every frame it produced.
    #[inline]
    pub fn feed(&mut self, now: u64, burst: &[Datagram<'_>]) {
        match self.int_port {
            None => self.pipeline.handle_reports(now, burst, &mut self.tx),
            Some(port) => {
                // Runs of INT and of DTA datagrams, each to its handler.
                let mut i = 0;
                while i < burst.len() {
                    let int = burst[i].dst.port() == port;
                    let mut j = i + 1;
                    while j < burst.len() && (burst[j].dst.port() == port) == int {
                        j += 1;
                    }
                    if int {
                        self.pipeline
                            .handle_int_reports(now, &burst[i..j], &mut self.tx);
                    } else {
                        self.pipeline
                            .handle_reports(now, &burst[i..j], &mut self.tx);
                    }
                    i = j;
                }
            }
        }
        self.pump(now);
    }

    /// Fires due timers.
    #[inline]
    pub fn tick(&mut self, now: u64) {
        if self.pipeline.next_deadline().is_some_and(|d| d <= now) {
            self.pipeline.poll(now, &mut self.tx);
            self.pump(now);
        }
    }

    /// Writes every partial batch and cache entry and moves the frames.
    pub fn flush(&mut self, now: u64) {
        while !self.pipeline.flush_all(now, &mut self.tx) {
            self.pump(now);
        }
        self.pump(now);
    }

    /// Moves queued frames: translator → RNIC, and the RNIC's ACKs back.
    #[inline]
    pub fn pump(&mut self, now: u64) {
        for i in 0..self.tx.len() {
            self.frame_bytes += self.tx.frame(i).len() as u64;
        }
        self.frames += self.tx.len() as u64;
        if self.mode == RnicMode::Off {
            self.tx.clear();
            return;
        }
        for i in 0..self.tx.len() {
            let f = self.tx.frame(i);
            if f.len() <= L2L4_LEN || self.tx.dest(i).port() != RIG_COLLECTOR.port() {
                continue;
            }
            // What a raw backend reads out of the IPv4 header for the ICRC.
            let d = Datagram {
                src: RIG_TRANSLATOR,
                dst: RIG_COLLECTOR,
                ip: Some(IpMeta {
                    ident: u16::from_be_bytes([f[18], f[19]]),
                    dont_frag: f[20] & 0x40 != 0,
                    ttl: f[22],
                    tos: f[15],
                }),
                payload: &f[L2L4_LEN..],
            };
            self.rnic.handle(&d, &mut self.rnic_tx);
        }
        self.tx.clear();
        for i in 0..self.rnic_tx.len() {
            let f = self.rnic_tx.frame(i);
            if f.len() <= L2L4_LEN {
                continue;
            }
            let d = Datagram {
                src: RIG_COLLECTOR,
                dst: RIG_TRANSLATOR,
                ip: None,
                payload: &f[L2L4_LEN..],
            };
            self.pipeline
                .handle_responses(now, std::slice::from_ref(&d), &mut self.tx);
        }
        self.rnic_tx.clear();
        // Responses may release queued or resent frames.
        self.pipeline.poll_transmit(now, &mut self.tx);
        if !self.tx.is_empty() {
            self.frames += self.tx.len() as u64;
            for i in 0..self.tx.len() {
                self.frame_bytes += self.tx.frame(i).len() as u64;
                let f = self.tx.frame(i);
                if f.len() > L2L4_LEN {
                    let d = Datagram {
                        src: RIG_TRANSLATOR,
                        dst: RIG_COLLECTOR,
                        ip: Some(IpMeta {
                            ident: u16::from_be_bytes([f[18], f[19]]),
                            dont_frag: f[20] & 0x40 != 0,
                            ttl: f[22],
                            tos: f[15],
                        }),
                        payload: &f[L2L4_LEN..],
                    };
                    self.rnic.handle(&d, &mut self.rnic_tx);
                }
            }
            self.tx.clear();
            // ACKs of these are folded into the next pump.
        }
    }

    /// The store called `name`.
    pub fn store(&self, name: &str) -> Option<&Store> {
        self.stores.iter().find(|s| s.meta.name == name)
    }
}

/// Splits `trace` into one trace per worker by the pipeline's ownership rule.
pub fn shard(sc: &Scenario, trace: &Trace, workers: usize) -> Vec<Trace> {
    let per = trace.len() / workers.max(1) + 1;
    let mut out: Vec<Trace> = (0..workers).map(|_| Trace::with_capacity(per)).collect();
    if workers <= 1 {
        out[0] = trace.clone();
        return out;
    }
    let cfg = sc.parse_config();
    let ph = PostcardHasher::new(
        HashProfile::Independent,
        1 << sc.chunks_log2,
        sc.cache_slots,
        5,
    );
    let mut rr = 0usize;
    for i in 0..trace.len() {
        let d = trace.get(i);
        let owner = match parse_report(d.payload, &cfg).map(|r| r.primitive) {
            Ok(Primitive::Append { list, .. }) => list as usize % workers,
            Ok(Primitive::Postcard { flow, .. }) if ph.is_some() => {
                ph.as_ref().expect("checked").cache_index(&flow) as usize % workers
            }
            _ => {
                rr += 1;
                rr % workers
            }
        };
        out[owner].push(d.src, d.dst, d.payload);
    }
    out
}

struct WorkerOut {
    reports: u64,
    counters: TranslatorCounters,
    frames: u64,
    frame_bytes: u64,
    rnic: RnicCounters,
    secs: f64,
    cpu_ns: u64,
    hist: Histogram<u64>,
}

fn run_worker(
    sc: &Scenario,
    trace: &Trace,
    w: usize,
    o: &MemOptions,
    start: &Barrier,
) -> Result<WorkerOut, String> {
    if o.pin {
        sys::pin_to(w);
    }
    let built = Rig::new(sc, w, o.workers, o);
    start.wait();
    let mut rig = built?;
    let mut hist =
        Histogram::<u64>::new_with_bounds(1, 3_600_000_000_000, 3).map_err(|e| e.to_string())?;
    let burst = o.burst.max(1);
    let mut pending: VecDeque<(u64, u64)> = VecDeque::with_capacity(1 << 16);
    let mut credited = 0u64;
    let mut views: Vec<Datagram<'_>> = Vec::with_capacity(burst);
    let cpu0 = sys::thread_cpu_ns();
    let epoch = Instant::now();
    let base = 1_000_000u64;
    let clock = || base + epoch.elapsed().as_nanos() as u64;
    let mut reports = 0u64;
    let credit = |rig: &Rig,
                  pending: &mut VecDeque<(u64, u64)>,
                  credited: &mut u64,
                  hist: &mut Histogram<u64>,
                  t: u64| {
        let c = rig.pipeline.counters();
        let done = c.translated + c.dropped();
        let mut n = done - *credited;
        *credited = done;
        while n > 0 {
            let Some(front) = pending.front_mut() else {
                break;
            };
            let k = front.1.min(n);
            let _ = hist.record_n(t.saturating_sub(front.0).max(1), k);
            front.1 -= k;
            n -= k;
            if front.1 == 0 {
                pending.pop_front();
            }
        }
    };
    for _ in 0..o.loops.max(1) {
        let mut i = 0;
        while i < trace.len() {
            let j = (i + burst).min(trace.len());
            views.clear();
            views.extend((i..j).map(|k| trace.get(k)));
            let t0 = clock();
            pending.push_back((t0, (j - i) as u64));
            rig.tick(t0);
            rig.feed(t0, &views);
            let t1 = clock();
            credit(&rig, &mut pending, &mut credited, &mut hist, t1);
            reports += (j - i) as u64;
            i = j;
        }
    }
    let t = clock();
    rig.flush(t);
    let t1 = clock();
    credit(&rig, &mut pending, &mut credited, &mut hist, t1);
    let secs = epoch.elapsed().as_secs_f64();
    let cpu_ns = sys::thread_cpu_ns().saturating_sub(cpu0);
    Ok(WorkerOut {
        reports,
        counters: *rig.pipeline.counters(),
        frames: rig.frames,
        frame_bytes: rig.frame_bytes,
        rnic: rig.rnic.counters(),
        secs,
        cpu_ns,
        hist,
    })
}

/// Replays `trace` in memory on `o.workers` pinned threads.
pub fn replay_memory(sc: &Scenario, trace: &Trace, o: &MemOptions) -> Result<ReplayResult, String> {
    let workers = o.workers.max(1);
    let o = MemOptions {
        workers,
        ..o.clone()
    };
    let shards = shard(sc, trace, workers);
    let start = Arc::new(Barrier::new(workers));
    let cpu0 = sys::process_cpu_secs();
    let outs: Vec<Result<WorkerOut, String>> = std::thread::scope(|s| {
        let hs: Vec<_> = shards
            .iter()
            .enumerate()
            .map(|(w, t)| {
                let (sc, o, start) = (sc, &o, start.clone());
                std::thread::Builder::new()
                    .name(format!("dta-replay-{w}"))
                    .spawn_scoped(s, move || run_worker(sc, t, w, o, &start))
                    .expect("spawn replay worker")
            })
            .collect();
        hs.into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err("replay worker panicked".into()))
            })
            .collect()
    });
    let mut r = ReplayResult {
        path: "memory".into(),
        workers,
        cpu_secs: sys::process_cpu_secs() - cpu0,
        ..ReplayResult::default()
    };
    let mut hist =
        Histogram::<u64>::new_with_bounds(1, 3_600_000_000_000, 3).map_err(|e| e.to_string())?;
    for out in outs {
        let w = out?;
        r.reports += w.reports;
        r.translated += w.counters.translated;
        r.dropped += w.counters.dropped();
        r.handoffs += w.counters.handoffs_out;
        r.add_int(&w.counters);
        r.frames += w.frames;
        r.frame_bytes += w.frame_bytes;
        r.rnic_executed += w.rnic.writes + w.rnic.atomics;
        r.rnic_errors += rnic_error_sum(&w.rnic);
        add_reasons(
            &mut r.drop_reasons,
            &w.counters,
            &TranslatorCounters::default(),
            &w.rnic,
            &RnicCounters::default(),
        );
        r.secs = r.secs.max(w.secs);
        r.worker_cpu_secs += w.cpu_ns as f64 * 1e-9;
        let _ = hist.add(&w.hist);
    }
    r.latency = Some(Latency::of(&hist));
    r.finish();
    Ok(r)
}

/// Kernel UDP replay settings.
#[derive(Debug, Clone)]
pub struct UdpReplayOptions {
    /// Times the trace is replayed.
    pub loops: u32,
    /// Reports per second (0 = as fast as the translator takes them).
    pub rate: u64,
    /// Reports allowed in flight beyond what the translator has taken.
    pub window: u64,
}

impl Default for UdpReplayOptions {
    fn default() -> Self {
        UdpReplayOptions {
            loops: 1,
            rate: 0,
            window: 4096,
        }
    }
}

/// Replays `trace` with `sendmmsg` into a translator (kernel UDP backend, one worker) that
/// writes into a collector (software RNIC on a UDP socket), both started here on loopback.
pub fn replay_udp(
    sc: &Scenario,
    trace: &Trace,
    o: &UdpReplayOptions,
) -> Result<ReplayResult, String> {
    let rig = UdpRig::start(sc)?;
    let res = rig.run(trace, o);
    rig.stop();
    res
}

/// A collector and a translator running on loopback for a scenario.
pub struct UdpRig {
    dir: std::path::PathBuf,
    rnic_tids: Vec<u64>,
    worker_tids: Vec<u64>,
    /// The collector service.
    pub collector: Collector,
    /// The translator service.
    pub translator: Translator,
}

impl UdpRig {
    /// Starts both services.
    pub fn start(sc: &Scenario) -> Result<UdpRig, String> {
        UdpRig::start_capturing(sc, None)
    }

    /// Starts both services; the translator also writes every frame it transmits to
    /// `capture` (`translator.capture`), when given.
    pub fn start_capturing(
        sc: &Scenario,
        capture: Option<&std::path::Path>,
    ) -> Result<UdpRig, String> {
        let dir = std::env::temp_dir().join(format!(
            "dta-replay-{}-{}",
            std::process::id(),
            free_udp_port(Ipv4Addr::LOCALHOST)?
        ));
        std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
        let meta_file = dir.join("collector.json");
        let rnic_before = sys::threads_named_now("dta-rnic");
        let worker_before = sys::threads_named_now("dta-worker-0");
        let collector_ip = Ipv4Addr::new(127, 0, 0, 1);
        let translator_ip = Ipv4Addr::new(127, 0, 0, 2);
        let roce_c = SocketAddrV4::new(collector_ip, free_udp_port(collector_ip)?);
        let roce_t = SocketAddrV4::new(translator_ip, free_udp_port(translator_ip)?);
        let collector = Collector::start(CollectorConfig {
            collector: DeviceSection {
                roce: roce_c,
                metadata_file: Some(meta_file.clone()),
                // The scenario's stores are written with its N (up to 8).
                max_redundancy: 8,
                ..DeviceSection::default()
            },
            static_peers: vec![StaticPeer {
                roce: roce_t,
                workers: 1,
                qpn_base: 0x100,
                mac: "02:00:00:00:00:01".into(),
            }],
            stores: sc.stores(),
            export: Default::default(),
            pull: None,
        })?;
        let mut tcfg = TranslatorConfig::default();
        tcfg.translator.listen = SocketAddrV4::new(Ipv4Addr::LOCALHOST, 0);
        tcfg.translator.roce = roce_t;
        tcfg.translator.max_redundancy = 8;
        tcfg.translator.socket_buffer = 64 << 20;
        // The sender's window is checked against the published counters (see
        // `UdpReplayOptions::window`): publish often so the window, not the period, bounds it.
        tcfg.translator.stats_interval_ms = 1;
        tcfg.reports.reference_variant = sc.parse_config().reference_variant;
        tcfg.postcard.cache_slots = sc.cache_slots;
        if let Some(sk) = sc.sketch {
            let st = sk.settings();
            tcfg.sketch.expected_switches = st.expected_switches;
            tcfg.sketch.max_switches = st.max_switches;
        }
        tcfg.collectors = vec![CollectorSection::with_metadata("local", meta_file)];
        tcfg.translator.capture = capture.map(|p| p.to_path_buf());
        let translator = Translator::start(tcfg)?;
        Ok(UdpRig {
            dir,
            rnic_tids: sys::new_threads_named("dta-rnic", &rnic_before),
            worker_tids: sys::new_threads_named("dta-worker-0", &worker_before),
            collector,
            translator,
        })
    }

    /// Sends the trace `o.loops` times and waits until the collector executed every frame.
    pub fn run(&self, trace: &Trace, o: &UdpReplayOptions) -> Result<ReplayResult, String> {
        let (worker_tid, rnic_tid) = (&self.worker_tids, &self.rnic_tids);
        let tcpu = |t: &[u64]| t.iter().filter_map(|&x| sys::task_cpu_ns(x)).sum::<u64>();
        let (w0, k0) = (tcpu(worker_tid), tcpu(rnic_tid));
        let c0 = self.translator.counters();
        let rn0 = self.collector.counters();
        let cpu0 = sys::process_cpu_secs();
        let mut sender = PacedSender::new(self.translator.report_addr, o.rate)?;
        sender.set_window(o.window);
        let received = || self.translator.counters().rx_datagrams - c0.rx_datagrams;
        let t0 = Instant::now();
        let mut last = Instant::now();
        let total = trace.len() as u64 * o.loops.max(1) as u64;
        for _ in 0..o.loops.max(1) {
            for i in 0..trace.len() {
                sender.push(trace.payload(i), received)?;
                if last.elapsed() >= Duration::from_secs(1) {
                    last = Instant::now();
                    eprintln!(
                        "  replay: sent {:>10}/{total} ({:.0} reports/s)",
                        sender.sent,
                        sender.sent as f64 / t0.elapsed().as_secs_f64()
                    );
                }
            }
        }
        sender.flush(received)?;
        let sent = sender.sent;
        self.translator.wait_for(Duration::from_secs(30), |c| {
            c.rx_datagrams - c0.rx_datagrams >= sent
                && c.translated + c.dropped() >= c0.translated + c0.dropped() + sent
        });
        let c = self.translator.counters();
        let frames = c.frames - c0.frames;
        self.collector.wait_for(Duration::from_secs(30), |k| {
            k.rcvd_pkts + k.bad_icrc + k.malformed >= rn0.rcvd_pkts + frames
        });
        let secs = t0.elapsed().as_secs_f64();
        let k = self.collector.counters();
        let snaps = self.translator.snapshots();
        let mut r = ReplayResult {
            path: "udp".into(),
            workers: 1,
            reports: sent,
            translated: c.translated - c0.translated,
            dropped: c.dropped() - c0.dropped(),
            handoffs: c.handoffs_out - c0.handoffs_out,
            frames,
            frame_bytes: 0,
            rnic_executed: (k.writes + k.atomics) - (rn0.writes + rn0.atomics),
            rnic_errors: rnic_error_sum(&k) - rnic_error_sum(&rn0),
            socket_drops: snaps.iter().map(|s| s.socket_drops).sum(),
            secs,
            cpu_secs: sys::process_cpu_secs() - cpu0,
            worker_cpu_secs: tcpu(worker_tid).saturating_sub(w0) as f64 * 1e-9,
            rnic_cpu_secs: Some(tcpu(rnic_tid).saturating_sub(k0) as f64 * 1e-9),
            ..ReplayResult::default()
        };
        add_reasons(&mut r.drop_reasons, &c, &c0, &k, &rn0);
        // The kernel path carries UDP payloads: count the frame bytes a NIC would put on the
        // wire (payload + Ethernet/IPv4/UDP headers) from the RNIC's received bytes.
        r.frame_bytes = (k.write_bytes - rn0.write_bytes) + frames * (L2L4_LEN as u64 + 32);
        r.finish();
        Ok(r)
    }

    /// Stops both services.
    pub fn stop(self) {
        let _ = self.translator.shutdown();
        self.collector.shutdown();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gen::{Generator, Mix};

    fn trace(sc: &Scenario, n: usize) -> Trace {
        Trace::generate(&mut Generator::new(sc), n).unwrap()
    }

    #[test]
    fn memory_replay_translates_everything_on_two_workers() {
        let sc = Scenario {
            mix: Mix::parse("all").unwrap(),
            slots_log2: 14,
            chunks_log2: 12,
            ..Scenario::default()
        };
        let t = trace(&sc, 4000);
        for workers in [1, 2] {
            let r = replay_memory(
                &sc,
                &t,
                &MemOptions {
                    workers,
                    pin: false,
                    ..MemOptions::default()
                },
            )
            .unwrap();
            assert_eq!(r.reports, 4000);
            assert_eq!(r.handoffs, 0, "sharding follows ownership");
            assert_eq!(r.rnic_errors, 0);
            assert!(r.translated + r.dropped <= r.reports);
            // Duplicate postcard hops of a re-sent path may be dropped; nothing else.
            assert!(r.translated >= 3500, "{r:?}");
            assert!(r.rnic_executed > 0 && r.frames >= r.rnic_executed);
            assert_eq!(r.latency.unwrap().count, r.translated + r.dropped);
        }
    }

    #[test]
    fn shard_respects_list_ownership() {
        let sc = Scenario {
            mix: Mix::parse("loss,cong").unwrap(),
            ..Scenario::default()
        };
        let t = trace(&sc, 500);
        let s = shard(&sc, &t, 2);
        assert_eq!(s[0].len() + s[1].len(), 500);
        for (w, tr) in s.iter().enumerate() {
            for i in 0..tr.len() {
                let r = parse_report(tr.payload(i), &sc.parse_config()).unwrap();
                let Primitive::Append { list, .. } = r.primitive else {
                    panic!()
                };
                assert_eq!(list as usize % 2, w);
            }
        }
    }
}

/// Tests that start a collector find its RNIC thread as the `dta-rnic` thread that was not
/// there before: they must not start collectors concurrently (one test saw the other's thread
/// and counted two). Each holds this lock.
#[cfg(test)]
pub(crate) static RNIC_THREAD_TESTS: std::sync::Mutex<()> = std::sync::Mutex::new(());

#[cfg(test)]
mod udp_tests {
    use super::*;
    use crate::gen::{Generator, Mix};

    #[test]
    fn udp_replay_reaches_the_collector_and_measures_threads() {
        let _serial = RNIC_THREAD_TESTS.lock().unwrap_or_else(|e| e.into_inner());
        let sc = Scenario {
            mix: Mix::parse("kw=1,loss=2,ctr=1").unwrap(),
            slots_log2: 14,
            chunks_log2: 12,
            ..Scenario::default()
        };
        let t = Trace::generate(&mut Generator::new(&sc), 3000).unwrap();
        let rig = UdpRig::start(&sc).unwrap();
        assert_eq!(rig.worker_tids.len(), 1);
        assert_eq!(rig.rnic_tids.len(), 1);
        let r = rig
            .run(
                &t,
                &UdpReplayOptions {
                    loops: 1,
                    rate: 200_000,
                    window: 2048,
                },
            )
            .unwrap();
        rig.stop();
        assert_eq!(r.reports, 3000);
        assert!(r.translated + r.dropped >= 2990, "{r:?}");
        assert!(r.rnic_executed > 0, "{r:?}");
        assert!(
            r.worker_cpu_secs > 0.0 && r.rnic_cpu_secs.unwrap() > 0.0,
            "{r:?}"
        );
    }
}

/// The software RNIC driven at saturation with frames the translator pipeline produced
/// beforehand, so that (like the CPU-collector baselines) it receives full `recvmmsg` bursts.
#[derive(Debug, Clone, Default, Serialize)]
pub struct RnicSaturated {
    /// Reports the frames carry (translated).
    pub reports: u64,
    /// RoCEv2 frames sent.
    pub frames: u64,
    /// RDMA messages the RNIC executed.
    pub executed: u64,
    /// RNIC drop and error counters, summed (must be 0).
    pub rnic_errors: u64,
    /// Software RNIC thread CPU (s).
    pub rnic_cpu_secs: f64,
    /// RNIC CPU per report (ns).
    pub ns_per_report: f64,
    /// RNIC CPU per frame (ns).
    pub ns_per_frame: f64,
    /// Wall time (s).
    pub secs: f64,
}

/// Translates `trace` (`loops` times) in memory with a pipeline bound to a running
/// collector's queue pairs, then sends the frames to that collector's software RNIC over
/// loopback UDP as fast as it takes them, and measures the RNIC thread's CPU.
pub fn rnic_saturated(sc: &Scenario, trace: &Trace, loops: u32) -> Result<RnicSaturated, String> {
    rnic_saturated_then(sc, trace, loops, false, |_| Ok(())).map(|(r, ())| r)
}

/// [`rnic_saturated`], then `after` with the collector before it stops (to read back and
/// query what it holds); with `control`, the collector also serves its HTTP API on a free
/// loopback port.
pub fn rnic_saturated_then<T>(
    sc: &Scenario,
    trace: &Trace,
    loops: u32,
    control: bool,
    after: impl FnOnce(&Collector) -> Result<T, String>,
) -> Result<(RnicSaturated, T), String> {
    use dta_io::udp::{UdpOptions, UdpSocket, MAX_BURST};
    use dta_translator::driver::{load_collectors, pipeline_for};
    let dir = std::env::temp_dir().join(format!(
        "dta-rnicsat-{}-{}",
        std::process::id(),
        free_udp_port(Ipv4Addr::LOCALHOST)?
    ));
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    let meta_file = dir.join("collector.json");
    let roce_c = SocketAddrV4::new(Ipv4Addr::LOCALHOST, free_udp_port(Ipv4Addr::LOCALHOST)?);
    let t_ip = Ipv4Addr::new(127, 0, 0, 2);
    let roce_t = SocketAddrV4::new(t_ip, free_udp_port(t_ip)?);
    let rnic_before = sys::threads_named_now("dta-rnic");
    let collector = Collector::start(CollectorConfig {
        collector: DeviceSection {
            roce: roce_c,
            metadata_file: Some(meta_file.clone()),
            // The scenario's stores are written with its N (up to 8).
            max_redundancy: 8,
            control: control.then_some(SocketAddrV4::new(Ipv4Addr::LOCALHOST, 0)),
            ..DeviceSection::default()
        },
        static_peers: vec![StaticPeer {
            roce: roce_t,
            workers: 1,
            qpn_base: 0x100,
            mac: "02:00:00:00:00:01".into(),
        }],
        stores: sc.stores(),
        export: Default::default(),
        pull: None,
    })?;
    let run = || -> Result<(RnicSaturated, T), String> {
        let mut tcfg = TranslatorConfig::default();
        tcfg.translator.roce = roce_t;
        tcfg.translator.max_redundancy = 8;
        tcfg.reports.reference_variant = sc.parse_config().reference_variant;
        tcfg.postcard.cache_slots = sc.cache_slots;
        tcfg.collectors = vec![CollectorSection::with_metadata("local", meta_file.clone())];
        let cols = load_collectors(&tcfg)?;
        let (mut pc, targets) = pipeline_for(&tcfg, 0, roce_t, &cols)?;
        // No ACK is fed back while translating ahead of time.
        pc.qp.ack_timeout_ns = u64::MAX / 4;
        let mut p = Pipeline::new(pc, &targets).map_err(|e| e.to_string())?;
        let mut frames = Trace::with_capacity(trace.len() / 4 + 1024);
        let mut tx = TxBatch::new(64 * p.frames_per_report_max() + 256, 2048);
        let mut views = Vec::with_capacity(64);
        let keep = |tx: &mut TxBatch, frames: &mut Trace| {
            for (d, pl) in tx.iter_payloads() {
                frames.push(roce_t, d, pl);
            }
            tx.clear();
        };
        for _ in 0..loops.max(1) {
            let mut i = 0;
            while i < trace.len() {
                let j = (i + 64).min(trace.len());
                views.clear();
                views.extend((i..j).map(|k| trace.get(k)));
                p.handle_reports(1_000_000, &views, &mut tx);
                keep(&mut tx, &mut frames);
                i = j;
            }
        }
        while !p.flush_all(1_000_000, &mut tx) {
            keep(&mut tx, &mut frames);
        }
        keep(&mut tx, &mut frames);
        let reports = p.counters().translated;
        let sock = UdpSocket::bind(roce_t, &UdpOptions::default()).map_err(|e| e.to_string())?;
        let (_rx, mut utx) = sock.split();
        let rnic = sys::new_threads_named("dta-rnic", &rnic_before);
        let cpu = || {
            rnic.iter()
                .filter_map(|&t| sys::task_cpu_ns(t))
                .sum::<u64>()
        };
        let k0 = collector.counters();
        let cpu0 = cpu();
        let t0 = Instant::now();
        let window = 4096u64;
        let mut batch = TxBatch::new(MAX_BURST, 2048);
        let mut sent = 0u64;
        for i in 0..frames.len() {
            let d = frames.get(i);
            batch.push_with(d.dst, 0, |b| {
                b[..d.payload.len()].copy_from_slice(d.payload);
                d.payload.len()
            });
            if batch.is_full() || i + 1 == frames.len() {
                let n = batch.len() as u64;
                let wait = Instant::now();
                while sent + n > collector.counters().rcvd_pkts - k0.rcvd_pkts + window {
                    if wait.elapsed() > Duration::from_secs(10) {
                        return Err("software RNIC stalled".into());
                    }
                    std::thread::sleep(Duration::from_micros(200));
                }
                utx.send_batch(&batch).map_err(|e| e.to_string())?;
                sent += n;
                batch.clear();
            }
        }
        collector.wait_for(Duration::from_secs(20), |k| {
            k.rcvd_pkts - k0.rcvd_pkts >= frames.len() as u64
        });
        let secs = t0.elapsed().as_secs_f64();
        let cpu_ns = cpu().saturating_sub(cpu0);
        let k = collector.counters();
        let r = RnicSaturated {
            reports,
            frames: frames.len() as u64,
            executed: (k.writes + k.atomics) - (k0.writes + k0.atomics),
            rnic_errors: rnic_error_sum(&k) - rnic_error_sum(&k0),
            rnic_cpu_secs: cpu_ns as f64 * 1e-9,
            ns_per_report: cpu_ns as f64 / reports.max(1) as f64,
            ns_per_frame: cpu_ns as f64 / frames.len().max(1) as f64,
            secs,
        };
        Ok((r, after(&collector)?))
    };
    let r = run();
    collector.shutdown();
    let _ = std::fs::remove_dir_all(&dir);
    r
}

#[cfg(test)]
mod saturated_tests {
    use super::*;
    use crate::gen::{Generator, Kind, Mix};

    #[test]
    fn saturated_rnic_executes_every_frame() {
        let _serial = RNIC_THREAD_TESTS.lock().unwrap_or_else(|e| e.into_inner());
        let sc = Scenario {
            mix: Mix::only(Kind::Loss),
            slots_log2: 12,
            chunks_log2: 10,
            ..Scenario::default()
        };
        let t = Trace::generate(&mut Generator::new(&sc), 5000).unwrap();
        let r = rnic_saturated(&sc, &t, 1).unwrap();
        assert_eq!(r.reports, 5000, "{r:?}");
        assert_eq!(r.rnic_errors, 0, "{r:?}");
        // Batches of 16 on 16 lists: about one frame per 16 reports, plus partial flushes.
        assert!(r.frames >= 5000 / 16 && r.frames <= 5000 / 16 + 16, "{r:?}");
        assert_eq!(r.executed, r.frames, "{r:?}");
        assert!(r.ns_per_report > 0.0);
    }
}
