//! `dta replay --backend B`: the production translator driven through one I/O backend, next
//! to a bare receive loop on the same backend kind, fed the same trace in the same run.
//!
//! On this small shared machine the kernel sender, not the receiver, sets the packet rate, so
//! wall-clock packets/s says little about a receiver's capacity. Each side is therefore judged
//! by **packets per receiver CPU-second**: the receiving thread's CPU time (user + system,
//! `CLOCK_THREAD_CPUTIME_ID` for the bare loop, `/proc/self/task/TID/schedstat` for the
//! translator's worker) divided into the packets it took. That is what one dedicated core would
//! sustain. Wall-clock rates are reported too.
//!
//! | backend | bare loop | translator | feed |
//! |---|---|---|---|
//! | `udp` | `recvmmsg` bursts into a counter (`UdpRx`) | kernel UDP backend, 1 worker, software RNIC on loopback | `sendmmsg` on loopback, flow-controlled |
//! | `pcap` | `PcapBackend` replay into a counter | `translator.backend = "pcap"`, frames counted and discarded | pre-filled: the trace in memory, no sender |
//! | `af_xdp` | `AfXdpBackend` on veth B into a counter | `translator.backend = "af_xdp"` on veth B, software RNIC in namespace A | `sendmmsg` from namespace A |
//! | `dpdk` | `DpdkBackend` (net_af_packet on veth B) into a counter | `translator.backend = "dpdk"` (a second net_af_packet port on veth B) | `sendmmsg` from namespace A |
//!
//! The translator side does everything the bare side does plus parsing, hashing, RoCEv2 frame
//! generation with ICRC, transmission and ACK processing; the ratio is the fraction of the
//! backend's receive capacity left once the translation work is added.

use std::net::{Ipv4Addr, SocketAddrV4};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use dta_collector::config::{CollectorConfig, DeviceSection, StaticPeer};
use dta_collector::Collector;
use dta_io::backend::Backend;
use dta_translator::config::{BackendKind, CollectorSection, TranslatorConfig};
use dta_translator::Translator;

use crate::gen::Scenario;
use crate::replay::{UdpReplayOptions, UdpRig};
use crate::sender::PacedSender;
use crate::sys;
use crate::trace::Trace;
use dta_io::netns::{enter_netns, Netns, ADDR_A, ADDR_B, MAC_A, MAC_B};

/// One side of a comparison.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct Side {
    /// What ran.
    pub name: String,
    /// Packets the receiving thread took.
    pub packets: u64,
    /// Wall-clock seconds from the first send to the last packet taken.
    pub secs: f64,
    /// The receiving thread's CPU seconds.
    pub cpu_secs: f64,
    /// Packets per wall second.
    pub per_sec: f64,
    /// Packets per receiver CPU-second.
    pub per_cpu_sec: f64,
    /// Receive calls that returned packets (0 where not known).
    pub bursts: u64,
}

impl Side {
    fn new(name: &str, packets: u64, secs: f64, cpu_secs: f64) -> Side {
        Side {
            name: name.into(),
            packets,
            secs,
            cpu_secs,
            per_sec: packets as f64 / secs.max(1e-9),
            per_cpu_sec: packets as f64 / cpu_secs.max(1e-9),
            bursts: 0,
        }
    }

    fn with_bursts(mut self, bursts: u64) -> Side {
        self.bursts = bursts;
        self
    }
}

/// A backend's translator next to its bare loop.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct Comparison {
    /// Backend name.
    pub backend: String,
    /// The bare receive loop.
    pub bare: Side,
    /// The translator through the backend.
    pub translator: Side,
    /// translator.per_cpu_sec / bare.per_cpu_sec.
    pub ratio_per_cpu_sec: f64,
    /// translator.per_sec / bare.per_sec.
    pub ratio_wall: f64,
    /// Reports translated.
    pub translated: u64,
    /// Reports dropped by the pipeline (any reason).
    pub dropped: u64,
    /// RoCEv2 frames the translator sent.
    pub frames: u64,
    /// Frames the software RNIC executed (`None` where no RNIC runs: the pcap comparison).
    pub rnic_executed: Option<u64>,
    /// Valid requests the RNIC did not execute because of their PSN: resends of executed
    /// frames (re-ACKed) and frames behind a loss (NAKed or dropped, then resent).
    pub rnic_resent: Option<u64>,
    /// Requests the RNIC rejected (malformed, bad opcode or ICRC, unknown QP, wrong peer or
    /// P_Key, R_Key/bounds/access violations, invalid requests).
    pub rnic_rejected: Option<u64>,
}

/// The RNIC's counters of [`Comparison::rnic_resent`] and [`Comparison::rnic_rejected`]
/// between two snapshots.
fn rnic_resent_rejected(
    k0: &dta_collector::rnic::counters::RnicCounters,
    k: &dta_collector::rnic::counters::RnicCounters,
) -> (Option<u64>, Option<u64>) {
    let resent = |c: &dta_collector::rnic::counters::RnicCounters| {
        c.duplicate_request + c.out_of_seq_request + c.out_of_seq_dropped
    };
    let rejected = |c: &dta_collector::rnic::counters::RnicCounters| {
        c.malformed
            + c.bad_opcode
            + c.bad_icrc
            + c.unknown_qpn
            + c.addr_mismatch
            + c.bad_pkey
            + c.rkey_violation
            + c.out_of_bounds
            + c.access_denied
            + c.invalid_request
    };
    (
        Some(resent(k) - resent(k0)),
        Some(rejected(k) - rejected(k0)),
    )
}

impl Comparison {
    fn finish(mut self) -> Comparison {
        self.ratio_per_cpu_sec = self.translator.per_cpu_sec / self.bare.per_cpu_sec.max(1e-9);
        self.ratio_wall = self.translator.per_sec / self.bare.per_sec.max(1e-9);
        self
    }

    /// Whether the software RNIC took what the translator sent: it rejected none of it, and
    /// at least 90% of the frames were executed or were valid resends (a loaded host loses
    /// frames on the wire and resends them, or resends frames whose ACK was late). A
    /// translator whose frames the RNIC rejects (e.g. a bad ICRC) does less work than a
    /// correct one, so its ratio means nothing. Always true where no RNIC runs.
    pub fn rnic_accepted(&self) -> bool {
        let Some(n) = self.rnic_executed else {
            return true;
        };
        let taken = n + self.rnic_resent.unwrap_or(0);
        self.rnic_rejected.unwrap_or(0) == 0 && taken as f64 >= 0.9 * self.frames as f64
    }

    /// One line for the terminal.
    pub fn line(&self) -> String {
        let warning = if self.rnic_accepted() {
            String::new()
        } else {
            format!(
                " | INVALID: the RNIC executed {} and took {} resends of {} frames, rejected {}",
                self.rnic_executed.unwrap_or(0),
                self.rnic_resent.unwrap_or(0),
                self.frames,
                self.rnic_rejected.unwrap_or(0)
            )
        };
        format!(
            "{:>7}: bare {:>9.0} pkt/s wall, {:>9.0} pkt/CPU-s | translator {:>9.0} pkt/s wall, \
             {:>9.0} pkt/CPU-s | ratio per CPU-s {:.2}, wall {:.2} | translated {} dropped {} \
             frames {} executed {} | pkts/burst bare {:.1} translator {:.1} | took bare {} \
             translator {}{warning}",
            self.backend,
            self.bare.per_sec,
            self.bare.per_cpu_sec,
            self.translator.per_sec,
            self.translator.per_cpu_sec,
            self.ratio_per_cpu_sec,
            self.ratio_wall,
            self.translated,
            self.dropped,
            self.frames,
            self.rnic_executed
                .map_or_else(|| "-".to_string(), |n| n.to_string()),
            self.bare.packets as f64 / self.bare.bursts.max(1) as f64,
            self.translator.packets as f64 / self.translator.bursts.max(1) as f64,
            self.bare.packets,
            self.translator.packets,
        )
    }
}

/// Settings shared by every comparison.
#[derive(Debug, Clone)]
pub struct CompareOptions {
    /// Passes over the trace.
    pub loops: u32,
    /// Sender rate in packets/s (0: as fast as the receiver takes them).
    pub rate: u64,
    /// Packets allowed in flight beyond what the receiver has taken.
    pub window: u64,
}

impl Default for CompareOptions {
    fn default() -> Self {
        CompareOptions {
            loops: 1,
            rate: 0,
            window: 4096,
        }
    }
}

/// Sends the trace `loops` times, flow-controlled against `received`.
fn send_trace(
    s: &mut PacedSender,
    trace: &Trace,
    loops: u32,
    received: &dyn Fn() -> u64,
) -> Result<u64, String> {
    for _ in 0..loops.max(1) {
        for i in 0..trace.len() {
            s.push(trace.payload(i), received)?;
        }
    }
    s.flush(received)?;
    Ok(s.sent)
}

/// Runs `rx` on its own thread (after `setup`, e.g. entering a namespace) until `stop`,
/// counting into `count`; returns the thread's CPU seconds.
fn bare_thread<B: Backend + 'static>(
    open: impl FnOnce() -> Result<B, String> + Send + 'static,
    stop: Arc<AtomicBool>,
    count: Arc<AtomicU64>,
    ready: std::sync::mpsc::Sender<Result<(), String>>,
) -> std::thread::JoinHandle<(f64, u64)> {
    std::thread::spawn(move || {
        let mut b = match open() {
            Ok(b) => {
                let _ = ready.send(Ok(()));
                b
            }
            Err(e) => {
                let _ = ready.send(Err(e));
                return (0.0, 0);
            }
        };
        let c0 = sys::thread_cpu_ns();
        let mut n = 0u64;
        let mut bursts = 0u64;
        while !stop.load(Ordering::Relaxed) {
            if let Ok(k) = b.recv_with(Duration::from_millis(5), &mut |burst| {
                n += burst.len() as u64;
            }) {
                bursts += (k > 0) as u64;
            }
            count.store(n, Ordering::Relaxed);
        }
        ((sys::thread_cpu_ns() - c0) as f64 * 1e-9, bursts)
    })
}

/// Waits until `count` reaches `want` (or `timeout`), then stops the bare thread.
fn finish_bare(
    name: &str,
    t0: Instant,
    want: u64,
    count: &AtomicU64,
    stop: &AtomicBool,
    th: std::thread::JoinHandle<(f64, u64)>,
) -> Side {
    let deadline = Instant::now() + Duration::from_secs(10);
    while count.load(Ordering::Relaxed) < want && Instant::now() < deadline {
        std::thread::sleep(Duration::from_micros(200));
    }
    let secs = t0.elapsed().as_secs_f64();
    stop.store(true, Ordering::Relaxed);
    let (cpu, bursts) = th.join().unwrap_or((0.0, 0));
    Side::new(name, count.load(Ordering::Relaxed), secs, cpu).with_bursts(bursts)
}

/// Kernel UDP: bare `recvmmsg` loop vs the translator (1 worker) writing into the software
/// RNIC, both on loopback.
pub fn compare_udp(sc: &Scenario, trace: &Trace, o: &CompareOptions) -> Result<Comparison, String> {
    use dta_io::udp::{UdpBackend, UdpOptions, UdpSocket};
    let sock = UdpSocket::bind(
        SocketAddrV4::new(Ipv4Addr::LOCALHOST, 0),
        &UdpOptions {
            rcvbuf: 64 << 20,
            sndbuf: 1 << 20,
            reuse_port: false,
        },
    )
    .map_err(|e| e.to_string())?;
    let addr = sock.local_addr();
    let (rx, tx) = sock.split();
    let stop = Arc::new(AtomicBool::new(false));
    let count = Arc::new(AtomicU64::new(0));
    let (rtx, rrx) = std::sync::mpsc::channel();
    let th = bare_thread(
        move || Ok(UdpBackend::new(vec![rx], tx)),
        stop.clone(),
        count.clone(),
        rtx,
    );
    rrx.recv().map_err(|e| e.to_string())??;
    let mut s = PacedSender::new(addr, o.rate)?;
    s.set_window(o.window);
    let t0 = Instant::now();
    let c = count.clone();
    let sent = send_trace(&mut s, trace, o.loops, &move || c.load(Ordering::Relaxed))?;
    let bare = finish_bare("recvmmsg", t0, sent, &count, &stop, th);

    let rig = UdpRig::start(sc)?;
    let r = rig.run(
        trace,
        &UdpReplayOptions {
            loops: o.loops,
            rate: o.rate,
            window: o.window,
        },
    );
    let bursts: u64 = rig.translator.snapshots().iter().map(|s| s.rx_ios).sum();
    rig.stop();
    let r = r?;
    Ok(Comparison {
        backend: "udp".into(),
        bare,
        translator: Side::new("translator/udp", r.reports, r.secs, r.worker_cpu_secs)
            .with_bursts(bursts),
        translated: r.translated,
        dropped: r.dropped,
        frames: r.frames,
        rnic_executed: Some(r.rnic_executed),
        ..Comparison::default()
    }
    .finish())
}

/// Collector metadata for a translator that only needs it (pcap backend): a software RNIC
/// on loopback publishes its stores.
fn metadata_collector(sc: &Scenario, dir: &Path, peer: SocketAddrV4) -> Result<Collector, String> {
    Collector::start(CollectorConfig {
        collector: DeviceSection {
            roce: SocketAddrV4::new(Ipv4Addr::LOCALHOST, 0),
            metadata_file: Some(dir.join("collector.json")),
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
    })
}

fn translator_config(sc: &Scenario, meta: PathBuf) -> TranslatorConfig {
    let mut t = TranslatorConfig::default();
    t.translator.max_redundancy = 8;
    // The sender's window is checked against the translator's published counters: publish
    // often enough that the window, not the publication period, bounds the rate (at the
    // default 20 ms a 4,096-packet window capped the translator near 200 k packets/s).
    t.translator.stats_interval_ms = 1;
    t.reports.reference_variant = sc.parse_config().reference_variant;
    t.postcard.cache_slots = sc.cache_slots;
    t.collectors = vec![CollectorSection::with_metadata("c", meta)];
    t
}

fn scratch_dir(tag: &str) -> Result<PathBuf, String> {
    let dir = std::env::temp_dir().join(format!("dta-backend-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    Ok(dir)
}

/// Waits for the translator to take `want` reports and settle; returns (wall secs, worker
/// CPU secs) measured from `t0` / `cpu0`.
fn translator_side(
    name: &str,
    tr: &Translator,
    want: u64,
    t0: Instant,
    tids: &[u64],
    cpu0: u64,
    timeout: Duration,
) -> (Side, dta_translator::datapath::stats::TranslatorCounters) {
    tr.wait_for(timeout, |c| {
        c.rx_datagrams >= want && c.translated + c.dropped() >= want
    });
    let secs = t0.elapsed().as_secs_f64();
    let cpu = tids
        .iter()
        .filter_map(|&t| sys::task_cpu_ns(t))
        .sum::<u64>()
        .saturating_sub(cpu0);
    let c = tr.counters();
    let bursts = tr.snapshots().iter().map(|s| s.rx_ios).sum();
    (
        Side::new(name, c.rx_datagrams, secs, cpu as f64 * 1e-9).with_bursts(bursts),
        c,
    )
}

/// pcap: the trace in memory, replayed by a bare `PcapBackend` loop and by the translator's
/// pcap backend (no sender at all; RoCEv2 frames are counted and discarded, ACK timeouts are
/// pushed beyond the run so the QPs are never probed).
pub fn compare_pcap(
    sc: &Scenario,
    trace: &Trace,
    o: &CompareOptions,
) -> Result<Comparison, String> {
    use dta_io::frame::FrameFilter;
    use dta_io::pcap::{PcapBackend, PcapTrace, ReplayConfig};
    let dir = scratch_dir("pcap")?;
    let input = dir.join("in.pcap");
    trace.write_pcap(&input, Duration::from_micros(1))?;
    let want = trace.len() as u64 * o.loops.max(1) as u64;
    let replay = |t: Arc<PcapTrace>| {
        PcapBackend::new(
            t,
            ReplayConfig {
                loops: Some(o.loops.max(1) as u64),
                rate: None,
                burst: dta_io::pcap::MAX_BURST,
                filter: FrameFilter::ports(&[dta_proto::consts::DTA_PORT]).expect("one port"),
            },
        )
    };
    let ptrace = Arc::new(PcapTrace::open(&input).map_err(|e| e.to_string())?);
    let stop = Arc::new(AtomicBool::new(false));
    let count = Arc::new(AtomicU64::new(0));
    let (rtx, rrx) = std::sync::mpsc::channel();
    let b = replay(ptrace);
    let t0 = Instant::now();
    let th = bare_thread(move || Ok(b), stop.clone(), count.clone(), rtx);
    rrx.recv().map_err(|e| e.to_string())??;
    let bare = finish_bare("pcap replay", t0, want, &count, &stop, th);

    let roce_t = SocketAddrV4::new(Ipv4Addr::new(127, 0, 0, 2), 4791);
    let collector = metadata_collector(sc, &dir, roce_t)?;
    let mut cfg = translator_config(sc, dir.join("collector.json"));
    cfg.translator.backend = BackendKind::Pcap;
    cfg.translator.roce = roce_t;
    cfg.reliability.ack_timeout_us = 3_600_000_000;
    cfg.pcap.input = vec![input];
    cfg.pcap.loops = o.loops.max(1) as u64;
    let before = sys::threads_named_now("dta-worker-0");
    let t0 = Instant::now();
    let tr = Translator::start(cfg)?;
    let tids = sys::new_threads_named("dta-worker-0", &before);
    let (side, c) = translator_side(
        "translator/pcap",
        &tr,
        want,
        t0,
        &tids,
        0,
        Duration::from_secs(120),
    );
    let _ = tr.shutdown();
    collector.shutdown();
    let _ = std::fs::remove_dir_all(&dir);
    Ok(Comparison {
        backend: "pcap".into(),
        bare,
        translator: side,
        translated: c.translated,
        dropped: c.dropped(),
        frames: c.frames,
        ..Comparison::default()
    }
    .finish())
}

/// Runs `f` on a new thread inside namespace `ns` and returns its result.
fn in_netns<T: Send + 'static>(
    ns: &str,
    f: impl FnOnce() -> Result<T, String> + Send + 'static,
) -> Result<T, String> {
    let ns = ns.to_string();
    std::thread::spawn(move || {
        enter_netns(&ns)?;
        f()
    })
    .join()
    .map_err(|_| "thread panicked".to_string())?
}

/// A raw backend on the veth pair: the bare loop and the translator on veth B (namespace
/// B), the sender and the software RNIC in namespace A.
///
/// `open_bare` opens the bare loop's backend (called inside namespace B); `configure` sets the
/// translator's backend section.
pub fn compare_netns<B: Backend + 'static>(
    name: &str,
    net: &Netns,
    sc: &Scenario,
    trace: &Trace,
    o: &CompareOptions,
    open_bare: impl FnOnce() -> Result<B, String> + Send + 'static,
    configure: impl FnOnce(&mut TranslatorConfig),
) -> Result<Comparison, String> {
    let bare = bare_netns(name, net, trace, o, open_bare)?;
    translator_netns(name, net, sc, trace, o, configure, bare)
}

/// The bare loop of [`compare_netns`]: `open_bare`'s backend in namespace B, counting what
/// a flow-controlled sender in namespace A sends.
pub fn bare_netns<B: Backend + 'static>(
    name: &str,
    net: &Netns,
    trace: &Trace,
    o: &CompareOptions,
    open_bare: impl FnOnce() -> Result<B, String> + Send + 'static,
) -> Result<Side, String> {
    let target = SocketAddrV4::new(ADDR_B, dta_proto::consts::DTA_PORT);
    let stop = Arc::new(AtomicBool::new(false));
    let count = Arc::new(AtomicU64::new(0));
    let (rtx, rrx) = std::sync::mpsc::channel();
    let ns_b = net.ns_b.clone();
    let th = bare_thread(
        move || {
            enter_netns(&ns_b)?;
            open_bare()
        },
        stop.clone(),
        count.clone(),
        rtx,
    );
    rrx.recv().map_err(|e| e.to_string())??;
    let (c, t, loops, rate, window) = (count.clone(), trace.clone(), o.loops, o.rate, o.window);
    let t0 = Instant::now();
    let sent = in_netns(&net.ns_a, move || {
        let mut s = PacedSender::new_from(ADDR_A, target, rate)?;
        s.set_window(window);
        send_trace(&mut s, &t, loops, &move || c.load(Ordering::Relaxed))
    })?;
    Ok(finish_bare(
        &format!("{name} rx"),
        t0,
        sent,
        &count,
        &stop,
        th,
    ))
}

/// The translator half of [`compare_netns`], compared with `bare`.
pub fn translator_netns(
    name: &str,
    net: &Netns,
    sc: &Scenario,
    trace: &Trace,
    o: &CompareOptions,
    configure: impl FnOnce(&mut TranslatorConfig),
    bare: Side,
) -> Result<Comparison, String> {
    let port = dta_proto::consts::DTA_PORT;
    let target = SocketAddrV4::new(ADDR_B, port);
    let (loops, rate, window) = (o.loops, o.rate, o.window);
    // Translator on B, collector (software RNIC) on A.
    let dir = scratch_dir(name)?;
    let meta = dir.join("collector.json");
    let roce_t = SocketAddrV4::new(ADDR_B, dta_proto::consts::ROCEV2_PORT);
    let stores = sc.stores();
    let m2 = meta.clone();
    let collector = in_netns(&net.ns_a, move || {
        Collector::start(CollectorConfig {
            collector: DeviceSection {
                roce: SocketAddrV4::new(ADDR_A, dta_proto::consts::ROCEV2_PORT),
                mac: MAC_A.into(),
                metadata_file: Some(m2),
                // The scenario's stores are written with its N (up to 8).
                max_redundancy: 8,
                ..DeviceSection::default()
            },
            static_peers: vec![StaticPeer {
                roce: roce_t,
                workers: 1,
                qpn_base: 0x100,
                mac: MAC_B.into(),
            }],
            stores,
            export: Default::default(),
            pull: None,
        })
    })?;
    let mut cfg = translator_config(sc, meta);
    cfg.translator.listen = SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, port);
    cfg.translator.roce = roce_t;
    cfg.translator.mac = MAC_B.into();
    configure(&mut cfg);
    let before = sys::threads_named_now("dta-worker-0");
    let tr = match in_netns(&net.ns_b, move || Translator::start(cfg)) {
        Ok(t) => t,
        Err(e) => {
            collector.shutdown();
            return Err(e);
        }
    };
    let tids = sys::new_threads_named("dta-worker-0", &before);
    let cpu0: u64 = tids.iter().filter_map(|&t| sys::task_cpu_ns(t)).sum();
    let rn0 = collector.counters();
    let c0 = tr.counters();
    let tr = Arc::new(tr);
    let (t2, tr2) = (trace.clone(), tr.clone());
    let t0 = Instant::now();
    let sent = in_netns(&net.ns_a, move || {
        let mut s = PacedSender::new_from(ADDR_A, target, rate)?;
        s.set_window(window);
        send_trace(&mut s, &t2, loops, &move || {
            tr2.counters().rx_datagrams - c0.rx_datagrams
        })
    })?;
    let (side, c) = translator_side(
        &format!("translator/{name}"),
        &tr,
        sent + c0.rx_datagrams,
        t0,
        &tids,
        cpu0,
        Duration::from_secs(30),
    );
    collector.wait_for(Duration::from_secs(5), |k| {
        k.rcvd_pkts >= rn0.rcvd_pkts + c.frames - c0.frames
    });
    let k = collector.counters();
    let resent_rejected = rnic_resent_rejected(&rn0, &k);
    let tr = Arc::try_unwrap(tr).map_err(|_| "translator still shared".to_string())?;
    let _ = tr.shutdown();
    collector.shutdown();
    let _ = std::fs::remove_dir_all(&dir);
    Ok(Comparison {
        backend: name.into(),
        bare,
        translator: Side::new(
            &side.name,
            side.packets - c0.rx_datagrams,
            side.secs,
            side.cpu_secs,
        )
        .with_bursts(side.bursts),
        translated: c.translated - c0.translated,
        dropped: c.dropped() - c0.dropped(),
        frames: c.frames - c0.frames,
        rnic_executed: Some((k.writes + k.atomics) - (rn0.writes + rn0.atomics)),
        rnic_resent: resent_rejected.0,
        rnic_rejected: resent_rejected.1,
        ..Comparison::default()
    }
    .finish())
}

/// AF_XDP on the veth pair (native mode, copy). Needs the `af_xdp` feature and root.
#[cfg(feature = "af_xdp")]
pub fn compare_af_xdp(
    net: &Netns,
    sc: &Scenario,
    trace: &Trace,
    o: &CompareOptions,
) -> Result<Comparison, String> {
    use dta_io::af_xdp::{AfXdpBackend, AfXdpConfig};
    let ifb = net.if_b.clone();
    compare_netns(
        "af_xdp",
        net,
        sc,
        trace,
        o,
        move || {
            AfXdpBackend::open(AfXdpConfig::new(
                &ifb,
                &[dta_proto::consts::DTA_PORT, dta_proto::consts::ROCEV2_PORT],
            ))
            .map_err(|e| format!("AF_XDP on {ifb}: {e}"))
        },
        |cfg| {
            cfg.translator.backend = BackendKind::AfXdp;
            cfg.af_xdp.interface = net.if_b.clone();
        },
    )
}

/// Frames in the net_af_packet ring (`framecnt`): deep enough for the pre-filled runs.
#[cfg(feature = "dpdk")]
pub const DPDK_FRAMECNT: u32 = 32768;

/// The EAL arguments for DPDK on veth B: one net_af_packet port. (Two af_packet ports on one
/// interface in one process join the same PACKET_FANOUT group in DPDK 22.11 and split the
/// traffic between them, so the bare loop runs in a child process with its own EAL.)
#[cfg(feature = "dpdk")]
pub fn dpdk_eal_args(if_b: &str, prefix: &str) -> Vec<String> {
    [
        "-l",
        "0",
        "--no-pci",
        "--no-huge",
        "-m",
        "512",
        "--log-level=lib.eal:error",
    ]
    .iter()
    .map(|s| s.to_string())
    .chain([
        format!("--file-prefix={prefix}"),
        format!("--vdev=net_af_packet0,iface={if_b},framecnt={DPDK_FRAMECNT}"),
    ])
    .collect()
}

/// The child-process side of the bare DPDK loop (`dta bare-rx-dpdk`): enters namespace `ns`,
/// opens net_af_packet0 on `iface`, prints `READY`, counts packets until none arrived for
/// `idle` after the first (or for 30 s), and prints `{"packets", "secs", "cpu_secs"}` as JSON.
#[cfg(feature = "dpdk")]
pub fn bare_rx_dpdk_child(ns: &str, iface: &str, idle: Duration) -> Result<String, String> {
    use dta_io::dpdk::{DpdkBackend, DpdkConfig};
    use std::io::Write;
    enter_netns(ns)?;
    let prefix = format!("dta-bare-{}", std::process::id());
    let args = dpdk_eal_args(iface, &prefix);
    let a: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut c = DpdkConfig::new(&a, Some("net_af_packet0"));
    c.filter = dta_io::frame::FrameFilter::ports(&[
        dta_proto::consts::DTA_PORT,
        dta_proto::consts::ROCEV2_PORT,
    ])
    .expect("two ports");
    let mut b = DpdkBackend::open(c).map_err(|e| format!("DPDK: {e}"))?;
    println!("READY {}", crate::sys::gettid());
    let _ = std::io::stdout().flush();
    let start = Instant::now();
    // (time, thread CPU, packets) after the first burst, and at the latest CPU reading.
    let mut first: Option<(Instant, u64, u64)> = None;
    let mut at_cpu = (0u64, 0u64);
    let mut last = Instant::now();
    let mut n = 0u64;
    let mut bursts = 0u64;
    loop {
        let got = b
            .recv_with(Duration::from_millis(5), &mut |burst| {
                n += burst.len() as u64
            })
            .map_err(|e| e.to_string())?;
        let now = Instant::now();
        if got > 0 {
            bursts += 1;
            last = now;
            // The thread CPU clock is a system call (no vDSO): read it every 8th burst only,
            // and scale to the packets taken between the readings, so the bare loop does not
            // pay a clock per burst that the translator (measured from outside) does not.
            if first.is_none() {
                let c = sys::thread_cpu_ns();
                first = Some((now, c, n));
                at_cpu = (c, n);
            } else if bursts % 8 == 0 {
                at_cpu = (sys::thread_cpu_ns(), n);
            }
        }
        match first {
            Some(_) if now - last > idle => break,
            None if now - start > Duration::from_secs(30) => break,
            _ => {}
        }
    }
    let (t0, c0, n0) = first.unwrap_or((last, 0, 0));
    let secs = (last - t0).as_secs_f64();
    let measured = at_cpu.1.saturating_sub(n0);
    let cpu = if measured == 0 {
        0.0
    } else {
        at_cpu.0.saturating_sub(c0) as f64 * 1e-9 * n as f64 / measured as f64
    };
    drop(b);
    let _ = std::fs::remove_dir_all(format!("/var/run/dpdk/{prefix}"));
    Ok(
        serde_json::json!({"packets": n, "secs": secs, "cpu_secs": cpu, "bursts": bursts})
            .to_string(),
    )
}

/// DPDK (net_af_packet) on the veth pair. Needs the `dpdk` feature and root. `exe` is a `dta`
/// binary built with the feature (normally `std::env::current_exe()`): the bare loop runs as
/// `exe bare-rx-dpdk` in a child process. The sender is not flow-controlled for the bare loop
/// (the child cannot report progress); it sends at `o.rate` (0: as fast as it can), and the
/// bare side is judged by what it took.
#[cfg(feature = "dpdk")]
pub fn compare_dpdk(
    exe: &Path,
    net: &Netns,
    sc: &Scenario,
    trace: &Trace,
    o: &CompareOptions,
) -> Result<Comparison, String> {
    use std::io::BufRead;
    let mut child = std::process::Command::new(exe)
        .args(["bare-rx-dpdk", "--ns", &net.ns_b, "--iface", &net.if_b])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .map_err(|e| format!("cannot start {}: {e}", exe.display()))?;
    let mut out = std::io::BufReader::new(child.stdout.take().expect("piped"));
    let mut line = String::new();
    out.read_line(&mut line).map_err(|e| e.to_string())?;
    if !line.starts_with("READY") {
        let _ = child.wait();
        return Err(format!("bare DPDK loop did not start: {line:?}"));
    }
    let (t, loops, rate) = (trace.clone(), o.loops, o.rate);
    let target = SocketAddrV4::new(ADDR_B, dta_proto::consts::DTA_PORT);
    in_netns(&net.ns_a, move || {
        let mut s = PacedSender::new_from(ADDR_A, target, rate)?;
        s.set_window(u64::MAX / 4);
        send_trace(&mut s, &t, loops, &|| 0)
    })?;
    line.clear();
    out.read_line(&mut line).map_err(|e| e.to_string())?;
    let _ = child.wait();
    let v: serde_json::Value =
        serde_json::from_str(line.trim()).map_err(|e| format!("bare DPDK loop: {e}: {line:?}"))?;
    let f = |k: &str| v[k].as_f64().unwrap_or(0.0);
    let bare = Side::new("dpdk rx", f("packets") as u64, f("secs"), f("cpu_secs"));
    with_dpdk_translator(net, |configure| {
        translator_netns("dpdk", net, sc, trace, o, configure, bare)
    })
}

/// Runs `run` with the configuration of a translator on DPDK (net_af_packet on veth B, an EAL
/// file prefix of its own), then removes the EAL's runtime directory: without `--in-memory`
/// (which `--no-huge` excludes) the EAL leaves it behind.
#[cfg(feature = "dpdk")]
fn with_dpdk_translator<R>(
    net: &Netns,
    run: impl FnOnce(Box<dyn FnOnce(&mut TranslatorConfig)>) -> R,
) -> R {
    let prefix = format!("dta-replay-{}", std::process::id());
    let args = dpdk_eal_args(&net.if_b, &prefix);
    let r = run(Box::new(move |cfg: &mut TranslatorConfig| {
        cfg.translator.backend = BackendKind::Dpdk;
        cfg.dpdk.eal_args = args;
        cfg.dpdk.ports = vec!["net_af_packet0".into()];
    }));
    let _ = std::fs::remove_dir_all(format!("/var/run/dpdk/{prefix}"));
    r
}

// ---------------------------------------------------------------------------------------------
// Full-burst capacity: pre-fill the receive queue while the receiver is frozen, time the drain.
// ---------------------------------------------------------------------------------------------

const FREEZER_ROOT: &str = "/sys/fs/cgroup/freezer";

/// Pauses single threads with the cgroup v1 freezer (`/sys/fs/cgroup/freezer`, root): a
/// frozen thread takes nothing from its receive queue, so a sender can fill the queue to any
/// depth, and the receiver, once thawed, works through full bursts. The thread's CPU clock
/// stops while frozen. Dropping the freezer thaws and releases every thread it froze.
pub struct Freezer {
    dir: PathBuf,
}

impl Freezer {
    /// A new freezer cgroup for this process; Err(reason) without cgroup v1's freezer or
    /// without the rights to use it.
    pub fn new(tag: &str) -> Result<Freezer, String> {
        let root = Path::new(FREEZER_ROOT);
        if !root.join("tasks").exists() {
            return Err(format!("no cgroup v1 freezer at {FREEZER_ROOT}"));
        }
        let dir = root.join(format!("dta-bench-{}-{tag}", std::process::id()));
        match std::fs::create_dir(&dir) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(format!("cannot create {}: {e}", dir.display())),
        }
        Ok(Freezer { dir })
    }

    fn write(&self, file: &str, v: &str) -> Result<(), String> {
        std::fs::write(self.dir.join(file), v)
            .map_err(|e| format!("{}/{file} <- {v}: {e}", self.dir.display()))
    }

    /// Freezes thread `tid` (of any process) and waits until it is frozen.
    pub fn freeze(&self, tid: u64) -> Result<(), String> {
        self.write("tasks", &tid.to_string())?;
        self.write("freezer.state", "FROZEN")?;
        let t0 = Instant::now();
        loop {
            let s = std::fs::read_to_string(self.dir.join("freezer.state")).unwrap_or_default();
            if s.trim() == "FROZEN" {
                return Ok(());
            }
            if t0.elapsed() > Duration::from_secs(5) {
                let _ = self.thaw();
                return Err(format!("thread {tid} did not freeze ({})", s.trim()));
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// Thaws every thread it froze.
    pub fn thaw(&self) -> Result<(), String> {
        self.write("freezer.state", "THAWED")
    }
}

impl Drop for Freezer {
    fn drop(&mut self) {
        let _ = self.thaw();
        let tasks = std::fs::read_to_string(self.dir.join("tasks")).unwrap_or_default();
        for t in tasks.lines() {
            let _ = std::fs::write(Path::new(FREEZER_ROOT).join("tasks"), t);
        }
        let _ = std::fs::remove_dir(&self.dir);
    }
}

/// Sends `n` datagrams (the trace's payloads, cycled) as fast as `s` goes, without flow
/// control: the receiver is frozen and its queue absorbs them.
fn send_n(s: &mut PacedSender, trace: &Trace, n: u64) -> Result<u64, String> {
    s.set_window(u64::MAX / 4);
    for i in 0..n {
        s.push(trace.payload(i as usize % trace.len()), || 0)?;
    }
    s.flush(|| 0)?;
    Ok(s.sent)
}

/// Thaws the receiver and times its drain: wall time from the thaw to the last change of
/// `taken` (packets, bursts), CPU time of thread `tid` over the same span
/// (`/proc/self/task/TID/schedstat`, read when the count changes). Ends once the count has not
/// moved for `idle`.
fn time_drain(
    name: &str,
    freezer: &Freezer,
    tid: u64,
    before: (u64, u64),
    taken: &dyn Fn() -> (u64, u64),
    idle: Duration,
) -> Result<Side, String> {
    let c0 = sys::task_cpu_ns(tid).ok_or("no CPU clock for the receiver")?;
    let t0 = Instant::now();
    freezer.thaw()?;
    let mut last = (t0, c0, before);
    loop {
        std::thread::sleep(Duration::from_micros(100));
        let now_taken = taken();
        let now = Instant::now();
        if now_taken.0 != last.2 .0 {
            last = (now, sys::task_cpu_ns(tid).unwrap_or(last.1), now_taken);
        } else if now - last.0 > idle || now - t0 > Duration::from_secs(60) {
            break;
        }
    }
    let (t1, c1, (p1, b1)) = last;
    Ok(Side::new(
        name,
        p1 - before.0,
        (t1 - t0).as_secs_f64(),
        c1.saturating_sub(c0) as f64 * 1e-9,
    )
    .with_bursts(b1 - before.1))
}

/// A bare receive loop for the pre-filled measurement: `open` runs on the new thread (after
/// entering a namespace, if it wants); the thread reports its TID, then counts packets and
/// bursts into `taken` until `stop`.
fn bare_counting_thread<B: Backend + 'static>(
    open: impl FnOnce() -> Result<B, String> + Send + 'static,
    stop: Arc<AtomicBool>,
    taken: Arc<(AtomicU64, AtomicU64)>,
) -> Result<(u64, std::thread::JoinHandle<()>), String> {
    let (rtx, rrx) = std::sync::mpsc::channel();
    let th = std::thread::spawn(move || {
        let mut b = match open() {
            Ok(b) => b,
            Err(e) => {
                let _ = rtx.send(Err(e));
                return;
            }
        };
        let _ = rtx.send(Ok(crate::sys::gettid()));
        let (mut n, mut bursts) = (0u64, 0u64);
        while !stop.load(Ordering::Relaxed) {
            if let Ok(k) = b.recv_with(Duration::from_millis(5), &mut |burst| {
                n += burst.len() as u64;
            }) {
                if k > 0 {
                    bursts += 1;
                    taken.0.store(n, Ordering::Relaxed);
                    taken.1.store(bursts, Ordering::Relaxed);
                }
            }
        }
    });
    let tid = rrx.recv().map_err(|e| e.to_string())??;
    Ok((tid, th))
}

/// How deep the queues are filled and how long a drain may pause before it counts as done.
#[derive(Debug, Clone, Copy)]
pub struct Prefill {
    /// Datagrams queued while the receiver is frozen.
    pub packets: u64,
    /// Datagrams sent (flow-controlled) before freezing, to warm caches, QPs and rings.
    pub warmup: u64,
    /// Freeze-fill-drain rounds per side; the side's figures are the sums over the rounds.
    pub rounds: u32,
}

impl Side {
    /// Adds another round's figures.
    fn add(self, o: &Side) -> Side {
        Side::new(
            &self.name,
            self.packets + o.packets,
            self.secs + o.secs,
            self.cpu_secs + o.cpu_secs,
        )
        .with_bursts(self.bursts + o.bursts)
    }
}

/// Runs `round` `rounds` times and sums the sides.
fn sum_rounds(
    name: &str,
    rounds: u32,
    mut round: impl FnMut() -> Result<Side, String>,
) -> Result<Side, String> {
    let mut total = Side::new(name, 0, 0.0, 0.0);
    for _ in 0..rounds.max(1) {
        total = total.add(&round()?);
    }
    Ok(total)
}

/// The bare side of a pre-filled comparison: `open`'s backend on a counting thread, warmed up,
/// frozen, filled with `p.packets` datagrams by `send` (called with a count), thawed and timed.
fn bare_prefilled<B: Backend + 'static>(
    name: &str,
    freezer: &Freezer,
    p: Prefill,
    open: impl FnOnce() -> Result<B, String> + Send + 'static,
    send: &dyn Fn(u64, bool) -> Result<u64, String>,
) -> Result<Side, String> {
    let stop = Arc::new(AtomicBool::new(false));
    let taken = Arc::new((AtomicU64::new(0), AtomicU64::new(0)));
    let (tid, th) = bare_counting_thread(open, stop.clone(), taken.clone())?;
    let get = || {
        (
            taken.0.load(Ordering::Relaxed),
            taken.1.load(Ordering::Relaxed),
        )
    };
    let r = (|| {
        let warm = send(p.warmup, true)?;
        let t = Instant::now();
        while get().0 < warm && t.elapsed() < Duration::from_secs(10) {
            std::thread::sleep(Duration::from_millis(1));
        }
        std::thread::sleep(Duration::from_millis(20));
        sum_rounds(name, p.rounds, || {
            let before = get();
            freezer.freeze(tid)?;
            send(p.packets, false)?;
            std::thread::sleep(Duration::from_millis(100));
            time_drain(name, freezer, tid, before, &get, Duration::from_millis(50))
        })
    })();
    let _ = freezer.thaw();
    stop.store(true, Ordering::Relaxed);
    let _ = th.join();
    r
}

/// The translator side of a pre-filled comparison: warmed up with `p.warmup` reports sent
/// with flow control, worker 0 frozen, `p.packets` reports queued, thawed and timed.
fn translator_prefilled(
    name: &str,
    freezer: &Freezer,
    p: Prefill,
    tr: &Translator,
    tid: u64,
    send: &dyn Fn(u64, bool) -> Result<u64, String>,
) -> Result<Side, String> {
    // Polled every 100 us during a drain: only the counters (one short lock per worker), not
    // the snapshots (their QP lists are cloned under the lock the worker publishes through).
    // The receive calls are read once the drain is over.
    let bursts = || tr.snapshots().iter().map(|s| s.rx_ios).sum::<u64>();
    let get = || (tr.counters().rx_datagrams, 0);
    let r = (|| {
        let base = get().0;
        let warm = send(p.warmup, true)?;
        tr.wait_for(Duration::from_secs(10), |c| c.rx_datagrams >= base + warm);
        std::thread::sleep(Duration::from_millis(50));
        sum_rounds(name, p.rounds, || {
            // Read before freezing: a worker frozen while publishing would hold the lock.
            let before = get();
            let b0 = bursts();
            freezer.freeze(tid)?;
            send(p.packets, false)?;
            std::thread::sleep(Duration::from_millis(100));
            let side = time_drain(name, freezer, tid, before, &get, Duration::from_millis(50))?;
            Ok(side.with_bursts(bursts() - b0))
        })
    })();
    let _ = freezer.thaw();
    r
}

/// Kernel UDP, pre-filled: a bare `recvmmsg` loop and the translator (1 worker, software RNIC
/// on loopback), each frozen while `p.packets` reports queue in its socket (64 MiB buffers),
/// then timed draining them.
pub fn compare_udp_prefilled(
    sc: &Scenario,
    trace: &Trace,
    p: Prefill,
    freezer: &Freezer,
) -> Result<Comparison, String> {
    use dta_io::udp::{UdpBackend, UdpOptions, UdpSocket};
    let sock = UdpSocket::bind(
        SocketAddrV4::new(Ipv4Addr::LOCALHOST, 0),
        &UdpOptions {
            rcvbuf: 64 << 20,
            sndbuf: 1 << 20,
            reuse_port: false,
        },
    )
    .map_err(|e| e.to_string())?;
    let addr = sock.local_addr();
    let (rx, tx) = sock.split();
    let sender = |to: SocketAddrV4| {
        move |n: u64, _warm: bool| {
            let mut s = PacedSender::new(to, 0)?;
            send_n(&mut s, trace, n)
        }
    };
    let bare = bare_prefilled(
        "recvmmsg",
        freezer,
        p,
        move || Ok(UdpBackend::new(vec![rx], tx)),
        &sender(addr),
    )?;
    let rig = UdpRig::start(sc)?;
    let tid = sys::threads_named("dta-worker-0")
        .into_iter()
        .max()
        .ok_or("no worker thread")?;
    let c0 = rig.translator.counters();
    let k0 = rig.collector.counters();
    let side = translator_prefilled(
        "translator/udp",
        freezer,
        p,
        &rig.translator,
        tid,
        &sender(rig.translator.report_addr),
    );
    let c = rig.translator.counters();
    rig.collector.wait_for(Duration::from_secs(5), |k| {
        k.rcvd_pkts >= k0.rcvd_pkts + c.frames - c0.frames
    });
    let k = rig.collector.counters();
    let resent_rejected = rnic_resent_rejected(&k0, &k);
    rig.stop();
    Ok(Comparison {
        backend: "udp".into(),
        bare,
        translator: side?,
        translated: c.translated - c0.translated,
        dropped: c.dropped() - c0.dropped(),
        frames: c.frames - c0.frames,
        rnic_executed: Some((k.writes + k.atomics) - (k0.writes + k0.atomics)),
        rnic_resent: resent_rejected.0,
        rnic_rejected: resent_rejected.1,
        ..Comparison::default()
    }
    .finish())
}

/// Sends `n` reports of `trace` from namespace A to the backend side (`ADDR_B`, the DTA port)
/// as fast as the sender goes: the fill of a pre-filled round on the veth pair.
fn send_from_a(net: &Netns, trace: &Trace, n: u64) -> Result<u64, String> {
    let (t, ns) = (trace.clone(), net.ns_a.clone());
    let target = SocketAddrV4::new(ADDR_B, dta_proto::consts::DTA_PORT);
    in_netns(&ns, move || {
        let mut s = PacedSender::new_from(ADDR_A, target, 0)?;
        send_n(&mut s, &t, n)
    })
}

/// Kernel UDP on the veth pair, pre-filled: like [`compare_udp_prefilled`], but the bare
/// `recvmmsg` loop and the translator listen in namespace B and the software RNIC runs in
/// namespace A, so with [`Netns::up`]'s `collector_rx_thread` the RNIC's receive is not charged
/// to the translator's worker (on loopback it always is: the kernel delivers in the sender's
/// context).
pub fn compare_udp_netns_prefilled(
    net: &Netns,
    sc: &Scenario,
    trace: &Trace,
    p: Prefill,
    freezer: &Freezer,
) -> Result<Comparison, String> {
    use dta_io::udp::{UdpBackend, UdpOptions, UdpSocket};
    const BUFFER: usize = 64 << 20;
    let port = dta_proto::consts::DTA_PORT;
    let target = SocketAddrV4::new(ADDR_B, port);
    let sock = in_netns(&net.ns_b, move || {
        UdpSocket::bind(
            target,
            &UdpOptions {
                rcvbuf: BUFFER,
                sndbuf: 1 << 20,
                reuse_port: false,
            },
        )
        .map_err(|e| format!("bind {target} in the backend namespace: {e}"))
    })?;
    let (rx, tx) = sock.split();
    let send = |n: u64, _warm: bool| send_from_a(net, trace, n);
    let bare = bare_prefilled(
        "recvmmsg",
        freezer,
        p,
        move || Ok(UdpBackend::new(vec![rx], tx)),
        &send,
    )?;
    translator_netns_prefilled(
        "udp",
        net,
        sc,
        trace,
        p,
        freezer,
        |cfg| {
            cfg.translator.backend = BackendKind::Udp;
            cfg.translator.socket_buffer = BUFFER;
        },
        bare,
    )
}

/// The translator of a raw backend on veth B (namespace B), software RNIC in namespace A,
/// pre-filled and timed like its bare loop (`bare`).
#[allow(clippy::too_many_arguments)]
pub fn translator_netns_prefilled(
    name: &str,
    net: &Netns,
    sc: &Scenario,
    trace: &Trace,
    p: Prefill,
    freezer: &Freezer,
    configure: impl FnOnce(&mut TranslatorConfig),
    bare: Side,
) -> Result<Comparison, String> {
    let port = dta_proto::consts::DTA_PORT;
    let dir = scratch_dir(name)?;
    let meta = dir.join("collector.json");
    let roce_t = SocketAddrV4::new(ADDR_B, dta_proto::consts::ROCEV2_PORT);
    let stores = sc.stores();
    let m2 = meta.clone();
    let if_a = net.if_a.clone();
    let collector = in_netns(&net.ns_a, move || {
        let mut c = CollectorConfig {
            collector: DeviceSection {
                roce: SocketAddrV4::new(ADDR_A, dta_proto::consts::ROCEV2_PORT),
                mac: MAC_A.into(),
                metadata_file: Some(m2),
                hugepages: false,
                // The scenario's stores are written with its N (up to 8).
                max_redundancy: 8,
                ..DeviceSection::default()
            },
            static_peers: vec![StaticPeer {
                roce: roce_t,
                workers: 1,
                qpn_base: 0x100,
                mac: MAC_B.into(),
            }],
            stores,
            export: Default::default(),
            pull: None,
        };
        // The software RNIC on AF_XDP when it is compiled in: the frames the translator sends
        // over the veth are then redirected by XDP on arrival, instead of running namespace
        // A's whole UDP receive path in the sending thread (veth delivers in the sender's
        // context), which would be charged to the translator's worker.
        if RNIC_ON_AF_XDP {
            c.collector.rnic.backend = dta_collector::config::RnicBackend::AfXdp;
            c.collector.rnic.af_xdp.interface = if_a;
        }
        Collector::start(c)
    })?;
    let mut cfg = translator_config(sc, meta);
    cfg.translator.listen = SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, port);
    cfg.translator.roce = roce_t;
    cfg.translator.mac = MAC_B.into();
    configure(&mut cfg);
    let before = sys::threads_named_now("dta-worker-0");
    let tr = match in_netns(&net.ns_b, move || Translator::start(cfg)) {
        Ok(t) => t,
        Err(e) => {
            collector.shutdown();
            return Err(e);
        }
    };
    let tid = sys::new_threads_named("dta-worker-0", &before)
        .into_iter()
        .next()
        .ok_or_else(|| "no worker thread".to_string());
    let c0 = tr.counters();
    let k0 = collector.counters();
    let send = |n: u64, _warm: bool| send_from_a(net, trace, n);
    let side = tid.and_then(|tid| {
        translator_prefilled(&format!("translator/{name}"), freezer, p, &tr, tid, &send)
    });
    let c = tr.counters();
    collector.wait_for(Duration::from_secs(5), |k| {
        k.rcvd_pkts >= k0.rcvd_pkts + c.frames - c0.frames
    });
    let k = collector.counters();
    let resent_rejected = rnic_resent_rejected(&k0, &k);
    let _ = tr.shutdown();
    collector.shutdown();
    let _ = std::fs::remove_dir_all(&dir);
    Ok(Comparison {
        backend: name.into(),
        bare,
        translator: side?,
        translated: c.translated - c0.translated,
        dropped: c.dropped() - c0.dropped(),
        frames: c.frames - c0.frames,
        rnic_executed: Some((k.writes + k.atomics) - (k0.writes + k0.atomics)),
        rnic_resent: resent_rejected.0,
        rnic_rejected: resent_rejected.1,
        ..Comparison::default()
    }
    .finish())
}

/// Whether the pre-filled veth comparisons run the software RNIC on AF_XDP (`[rnic] backend
/// = "af_xdp"` on veth A), i.e. whether `dta` was built with `af_xdp`.
pub const RNIC_ON_AF_XDP: bool = cfg!(feature = "af_xdp");

/// UMEM frames for the pre-filled AF_XDP runs: half of them receive, so the RX ring holds
/// 32,768 frames.
#[cfg(feature = "af_xdp")]
pub const PREFILL_XDP_FRAMES: u32 = 65536;

/// AF_XDP on the veth pair, pre-filled (both sides with [`PREFILL_XDP_FRAMES`] UMEM frames).
#[cfg(feature = "af_xdp")]
pub fn compare_af_xdp_prefilled(
    net: &Netns,
    sc: &Scenario,
    trace: &Trace,
    p: Prefill,
    freezer: &Freezer,
) -> Result<Comparison, String> {
    use dta_io::af_xdp::{AfXdpBackend, AfXdpConfig};
    let p = Prefill {
        packets: p.packets.min(PREFILL_XDP_FRAMES as u64 / 2 - 1024),
        ..p
    };
    let (ifb, ns_b) = (net.if_b.clone(), net.ns_b.clone());
    let send = |n: u64, _warm: bool| send_from_a(net, trace, n);
    let bare = bare_prefilled(
        "af_xdp rx",
        freezer,
        p,
        move || {
            enter_netns(&ns_b)?;
            let mut c = AfXdpConfig::new(
                &ifb,
                &[dta_proto::consts::DTA_PORT, dta_proto::consts::ROCEV2_PORT],
            );
            c.frame_count = PREFILL_XDP_FRAMES;
            c.ring_size = PREFILL_XDP_FRAMES / 2;
            AfXdpBackend::open(c).map_err(|e| format!("AF_XDP on {ifb}: {e}"))
        },
        &send,
    )?;
    translator_netns_prefilled(
        "af_xdp",
        net,
        sc,
        trace,
        p,
        freezer,
        |cfg| {
            cfg.translator.backend = BackendKind::AfXdp;
            cfg.af_xdp.interface = net.if_b.clone();
            cfg.af_xdp.frame_count = PREFILL_XDP_FRAMES;
        },
        bare,
    )
}

/// DPDK (net_af_packet, `framecnt` 32,768) on the veth pair, pre-filled. The bare loop runs
/// in a child process (`exe bare-rx-dpdk`) that prints its thread ID; it is frozen there, and
/// measures its own drain from the first burst to the last.
#[cfg(feature = "dpdk")]
pub fn compare_dpdk_prefilled(
    exe: &Path,
    net: &Netns,
    sc: &Scenario,
    trace: &Trace,
    p: Prefill,
    freezer: &Freezer,
) -> Result<Comparison, String> {
    let p = Prefill {
        packets: p.packets.min(DPDK_FRAMECNT as u64 - 1024),
        ..p
    };
    let send = |n: u64| send_from_a(net, trace, n);
    let bare = sum_rounds("dpdk rx", p.rounds, || {
        bare_dpdk_child_round(exe, net, p.packets, freezer, &send)
    })?;
    with_dpdk_translator(net, |configure| {
        translator_netns_prefilled("dpdk", net, sc, trace, p, freezer, configure, bare)
    })
}

/// One pre-filled round of the bare DPDK loop in a child process (`exe bare-rx-dpdk`): the
/// child prints its thread ID, is frozen, filled by `send`, thawed, and reports the drain it
/// measured itself (first burst to last).
#[cfg(feature = "dpdk")]
fn bare_dpdk_child_round(
    exe: &Path,
    net: &Netns,
    packets: u64,
    freezer: &Freezer,
    send: &dyn Fn(u64) -> Result<u64, String>,
) -> Result<Side, String> {
    use std::io::BufRead;
    let mut child = std::process::Command::new(exe)
        .args(["bare-rx-dpdk", "--ns", &net.ns_b, "--iface", &net.if_b])
        .args(["--idle-ms", "300"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .map_err(|e| format!("cannot start {}: {e}", exe.display()))?;
    let mut out = std::io::BufReader::new(child.stdout.take().expect("piped"));
    let mut line = String::new();
    out.read_line(&mut line).map_err(|e| e.to_string())?;
    let Some(tid) = line
        .trim()
        .strip_prefix("READY ")
        .and_then(|t| t.parse::<u64>().ok())
    else {
        let _ = child.kill();
        let _ = child.wait();
        return Err(format!("bare DPDK loop did not start: {line:?}"));
    };
    let r = (|| {
        freezer.freeze(tid)?;
        send(packets)?;
        std::thread::sleep(Duration::from_millis(100));
        freezer.thaw()
    })();
    if let Err(e) = r {
        let _ = freezer.thaw();
        let _ = child.kill();
        let _ = child.wait();
        return Err(e);
    }
    line.clear();
    out.read_line(&mut line).map_err(|e| e.to_string())?;
    let _ = child.wait();
    let v: serde_json::Value =
        serde_json::from_str(line.trim()).map_err(|e| format!("bare DPDK loop: {e}: {line:?}"))?;
    let f = |k: &str| v[k].as_f64().unwrap_or(0.0);
    Ok(
        Side::new("dpdk rx", f("packets") as u64, f("secs"), f("cpu_secs"))
            .with_bursts(f("bursts") as u64),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A frozen thread's CPU clock stops and resumes after the thaw; SKIP without the cgroup
    /// v1 freezer or root.
    #[test]
    fn freezer_stops_a_spinning_thread_and_lets_it_go() {
        use std::io::Write;
        let f = match Freezer::new("selftest") {
            Ok(f) => f,
            Err(e) => {
                let _ = writeln!(std::io::stderr(), "SKIP: freezer: {e}");
                return;
            }
        };
        let stop = Arc::new(AtomicBool::new(false));
        let spins = Arc::new(AtomicU64::new(0));
        let (tx, rx) = std::sync::mpsc::channel();
        let (s2, n2) = (stop.clone(), spins.clone());
        let th = std::thread::spawn(move || {
            tx.send(crate::sys::gettid()).unwrap();
            while !s2.load(Ordering::Relaxed) {
                n2.fetch_add(1, Ordering::Relaxed);
            }
        });
        let tid = rx.recv().unwrap();
        if let Err(e) = f.freeze(tid) {
            stop.store(true, Ordering::Relaxed);
            let _ = th.join();
            let _ = writeln!(std::io::stderr(), "SKIP: freezer: {e}");
            return;
        }
        let (c0, n0) = (
            sys::task_cpu_ns(tid).unwrap(),
            spins.load(Ordering::Relaxed),
        );
        std::thread::sleep(Duration::from_millis(100));
        let (c1, n1) = (
            sys::task_cpu_ns(tid).unwrap(),
            spins.load(Ordering::Relaxed),
        );
        assert_eq!(n1, n0, "a frozen thread does not run");
        assert!(c1 - c0 < 1_000_000, "its CPU clock stops: {} ns", c1 - c0);
        f.thaw().unwrap();
        let t = Instant::now();
        while spins.load(Ordering::Relaxed) == n1 && t.elapsed() < Duration::from_secs(5) {
            std::thread::sleep(Duration::from_millis(1));
        }
        assert!(
            spins.load(Ordering::Relaxed) > n1,
            "it runs again after the thaw"
        );
        stop.store(true, Ordering::Relaxed);
        th.join().unwrap();
        drop(f);
        assert!(
            !Path::new(FREEZER_ROOT)
                .join(format!("dta-bench-{}-selftest", std::process::id()))
                .exists(),
            "the cgroup is removed"
        );
    }

    #[test]
    fn rnic_acceptance_counts_resends_and_refuses_any_rejection() {
        let c = |executed, resent, rejected| Comparison {
            frames: 3547,
            rnic_executed: Some(executed),
            rnic_resent: Some(resent),
            rnic_rejected: Some(rejected),
            ..Comparison::default()
        };
        // The CI run that failed the old rule (executed >= 90 % of frames) under load.
        assert!(c(3189, 358, 0).rnic_accepted());
        assert!(
            !c(3189, 0, 0).rnic_accepted(),
            "frames neither executed nor resends"
        );
        assert!(!c(3546, 0, 1).rnic_accepted(), "one rejected frame");
        assert!(
            Comparison::default().rnic_accepted(),
            "no RNIC: nothing to judge"
        );
    }
}
