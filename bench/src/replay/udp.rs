//! The kernel UDP replay: a collector (software RNIC on a UDP socket) and a translator (kernel
//! UDP backend) started in this process on loopback, the trace sent with `sendmmsg`,
//! flow-controlled ([`UdpRig`]).

use std::net::{Ipv4Addr, SocketAddrV4};
use std::time::{Duration, Instant};

use dta_collector::Collector;
use dta_proto::wire::roce::L2L4_LEN;
use dta_translator::config::{CollectorSection, TranslatorConfig};
use dta_translator::datapath::stats::TranslatorCounters;
use dta_translator::driver::WorkerSnapshot;
use dta_translator::Translator;

use super::*;
use crate::gen::Scenario;
use crate::sender::{free_udp_port, PacedSender};
use crate::sys;
use crate::trace::Trace;

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
        let collector =
            Collector::start(loopback_collector(sc, roce_c, meta_file.clone(), roce_t))?;
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
        // Done when every report was taken in and decided, and every frame confirmed: an ACK
        // covers a frame only once the collector executed it, and a frame the wire lost is
        // confirmed after its resend. (Counting the frames the collector received instead
        // waited the whole timeout after one loss: the translator counts both the lost copy
        // and its resend.)
        let settled = self
            .translator
            .wait_snapshots(Duration::from_secs(30), |snaps| settled(snaps, &c0, sent));
        if !settled {
            eprintln!(
                "  replay: after 30 s the translator has not decided every report or the \
                 collector has not confirmed every frame; reporting what arrived"
            );
        }
        let secs = t0.elapsed().as_secs_f64();
        let c = self.translator.counters();
        let frames = c.frames - c0.frames;
        // The collector publishes its counters every ~50 ms: wait for them to show every frame
        // (all it will show, if the wire lost some that were resent).
        self.collector.wait_for(Duration::from_millis(500), |k| {
            k.rcvd_pkts + k.bad_icrc + k.malformed >= rn0.rcvd_pkts + frames
        });
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

/// Whether a replay of `sent` reports is over, from the workers' snapshots (`c0`: the
/// counters before it): every report taken in and decided (translated or dropped), and every
/// frame confirmed by the collector. Not whether the collector received as many frames as the
/// translator sent: a frame the wire lost is counted twice by the translator (the lost copy
/// and its resend) and once by the collector.
fn settled(snaps: &[WorkerSnapshot], c0: &TranslatorCounters, sent: u64) -> bool {
    let c = WorkerSnapshot::total(snaps);
    c.rx_datagrams - c0.rx_datagrams >= sent
        && c.translated + c.dropped() >= c0.translated + c0.dropped() + sent
        && WorkerSnapshot::all_confirmed(snaps)
}

#[cfg(test)]
mod settled_tests {
    use super::*;

    /// A replay whose one frame the wire lost (101 frames sent for 100 reports, the resend
    /// confirmed) is over; one with a frame unconfirmed, or a report not yet decided, is not.
    #[test]
    fn a_replay_is_over_when_every_frame_is_confirmed_not_when_every_frame_arrived() {
        let c0 = TranslatorCounters {
            rx_datagrams: 7,
            translated: 7,
            frames: 7,
            ..TranslatorCounters::default()
        };
        let after = |translated: u64, unconfirmed: u64| WorkerSnapshot {
            counters: TranslatorCounters {
                rx_datagrams: 107,
                translated,
                frames: 108,
                ..TranslatorCounters::default()
            },
            unconfirmed,
            ..WorkerSnapshot::default()
        };
        assert!(settled(&[after(107, 0)], &c0, 100));
        assert!(!settled(&[after(107, 1)], &c0, 100));
        assert!(!settled(&[after(106, 0)], &c0, 100));
        assert!(!settled(&[after(107, 0), after(0, 2)], &c0, 100));
    }
}

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
