//! The software RNIC alone at saturation: a trace's RoCEv2 frames, translated ahead of time,
//! fed to a collector over loopback UDP as fast as it takes them ([`rnic_saturated`]).

use std::net::{Ipv4Addr, SocketAddrV4};
use std::time::{Duration, Instant};

use dta_collector::Collector;
use dta_proto::batch::TxBatch;
use dta_translator::config::{CollectorSection, TranslatorConfig};
use dta_translator::datapath::pipeline::Pipeline;
use serde::Serialize;

use super::*;
use crate::gen::Scenario;
use crate::sender::free_udp_port;
use crate::sys;
use crate::trace::Trace;

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
    let mut ccfg = loopback_collector(sc, roce_c, meta_file.clone(), roce_t);
    ccfg.collector.control = control.then_some(SocketAddrV4::new(Ipv4Addr::LOCALHOST, 0));
    let collector = Collector::start(ccfg)?;
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
