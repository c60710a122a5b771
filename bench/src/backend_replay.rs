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
    /// Frames the software RNIC executed (0 where no RNIC runs).
    pub rnic_executed: u64,
}

impl Comparison {
    fn finish(mut self) -> Comparison {
        self.ratio_per_cpu_sec = self.translator.per_cpu_sec / self.bare.per_cpu_sec.max(1e-9);
        self.ratio_wall = self.translator.per_sec / self.bare.per_sec.max(1e-9);
        self
    }

    /// One line for the terminal.
    pub fn line(&self) -> String {
        format!(
            "{:>7}: bare {:>9.0} pkt/s wall, {:>9.0} pkt/CPU-s | translator {:>9.0} pkt/s wall, \
             {:>9.0} pkt/CPU-s | ratio per CPU-s {:.2}, wall {:.2} | translated {} dropped {} \
             frames {} | pkts/burst bare {:.1} translator {:.1}",
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
            self.bare.packets as f64 / self.bare.bursts.max(1) as f64,
            self.translator.packets as f64 / self.translator.bursts.max(1) as f64,
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
        rnic_executed: r.rnic_executed,
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
            ..DeviceSection::default()
        },
        static_peers: vec![StaticPeer {
            roce: peer,
            workers: 1,
            qpn_base: 0x100,
            mac: "02:00:00:00:00:01".into(),
        }],
        stores: sc.stores(),
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

/// Names and addresses of the veth topology (`scripts/netns.sh` with our own names).
pub struct Netns {
    env: Vec<(&'static str, String)>,
    /// Sender / collector side.
    pub ns_a: String,
    /// Backend side.
    pub ns_b: String,
    /// Backend-side interface.
    pub if_b: String,
}

/// Sender / collector address.
pub const ADDR_A: Ipv4Addr = Ipv4Addr::new(10, 77, 0, 1);
/// Backend-side address.
pub const ADDR_B: Ipv4Addr = Ipv4Addr::new(10, 77, 0, 2);
/// MAC of the sender / collector veth.
pub const MAC_A: &str = "02:00:00:77:00:01";
/// MAC of the backend veth.
pub const MAC_B: &str = "02:00:00:77:00:02";

fn netns_script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/netns.sh")
}

impl Netns {
    /// Creates the topology with names starting with `prefix` (e.g. "dtr"). Err(reason) when
    /// it cannot (not root, no `ip`): the caller prints SKIP.
    pub fn up(prefix: &str) -> Result<Netns, String> {
        let (ns_a, ns_b) = (format!("{prefix}-a"), format!("{prefix}-b"));
        let if_b = format!("{prefix}-vb");
        let env = vec![
            ("NS_A", ns_a.clone()),
            ("NS_B", ns_b.clone()),
            ("IF_A", format!("{prefix}-va")),
            ("IF_B", if_b.clone()),
        ];
        let out = std::process::Command::new("bash")
            .arg(netns_script())
            .arg("up")
            .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
            .output()
            .map_err(|e| format!("cannot run scripts/netns.sh: {e}"))?;
        let text = String::from_utf8_lossy(&out.stdout);
        if let Some(l) = text.lines().find(|l| l.starts_with("SKIP")) {
            return Err(l.to_string());
        }
        // A freshly created veth pair takes a moment to carry traffic; a DPDK af_packet port
        // opened at once sometimes received nothing.
        std::thread::sleep(Duration::from_secs(1));
        Ok(Netns {
            env,
            ns_a,
            ns_b,
            if_b,
        })
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = std::process::Command::new("bash")
            .arg(netns_script())
            .arg("down")
            .envs(self.env.iter().map(|(k, v)| (*k, v.as_str())))
            .output();
    }
}

/// Runs `f` on a new thread inside namespace `ns` and returns its result.
fn in_netns<T: Send + 'static>(
    ns: &str,
    f: impl FnOnce() -> Result<T, String> + Send + 'static,
) -> Result<T, String> {
    let ns = ns.to_string();
    std::thread::spawn(move || {
        sys::enter_netns(&ns)?;
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
            sys::enter_netns(&ns_b)?;
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
                ..DeviceSection::default()
            },
            static_peers: vec![StaticPeer {
                roce: roce_t,
                workers: 1,
                qpn_base: 0x100,
                mac: MAC_B.into(),
            }],
            stores,
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
        rnic_executed: (k.writes + k.atomics) - (rn0.writes + rn0.atomics),
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
        format!("--vdev=net_af_packet0,iface={if_b},framecnt=16384"),
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
    sys::enter_netns(ns)?;
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
    println!("READY");
    let _ = std::io::stdout().flush();
    let start = Instant::now();
    let mut first: Option<(Instant, u64)> = None;
    let mut last = Instant::now();
    let mut n = 0u64;
    let mut last_cpu = 0u64;
    loop {
        let got = b
            .recv_with(Duration::from_millis(5), &mut |burst| {
                n += burst.len() as u64
            })
            .map_err(|e| e.to_string())?;
        let now = Instant::now();
        if got > 0 {
            // One clock read per burst: the CPU clock stops at the last packet, not after
            // the idle wait that ends the run.
            last = now;
            last_cpu = sys::thread_cpu_ns();
            if first.is_none() {
                first = Some((now, last_cpu));
            }
        }
        match first {
            Some(_) if now - last > idle => break,
            None if now - start > Duration::from_secs(30) => break,
            _ => {}
        }
    }
    let (t0, c0) = first.unwrap_or((last, last_cpu));
    let secs = (last - t0).as_secs_f64();
    let cpu = last_cpu.saturating_sub(c0) as f64 * 1e-9;
    drop(b);
    let _ = std::fs::remove_dir_all(format!("/var/run/dpdk/{prefix}"));
    Ok(serde_json::json!({"packets": n, "secs": secs, "cpu_secs": cpu}).to_string())
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
    if line.trim() != "READY" {
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
    let prefix = format!("dta-replay-{}", std::process::id());
    let args = dpdk_eal_args(&net.if_b, &prefix);
    let r = translator_netns(
        "dpdk",
        net,
        sc,
        trace,
        o,
        move |cfg| {
            cfg.translator.backend = BackendKind::Dpdk;
            cfg.dpdk.eal_args = args;
            cfg.dpdk.ports = vec!["net_af_packet0".into()];
        },
        bare,
    );
    // Without --in-memory (which --no-huge excludes) the EAL leaves its runtime directory.
    let _ = std::fs::remove_dir_all(format!("/var/run/dpdk/{prefix}"));
    r
}
