//! The flow-controlled comparisons: the trace sent while the receiver runs, the sender held
//! back by what the receiver took (`udp`, `pcap`, and any backend on the veth pair through
//! [`compare_netns`]), and the translator set up for them (collector metadata, configuration,
//! scratch directories, network namespaces).

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

use super::*;
use crate::gen::Scenario;
use crate::replay::{loopback_collector, UdpReplayOptions, UdpRig};
use crate::sender::PacedSender;
use crate::sys;
use crate::trace::Trace;
use dta_io::netns::{enter_netns, Netns, ADDR_A, ADDR_B, MAC_A, MAC_B};

/// Sends the trace `loops` times, flow-controlled against `received`.
pub(super) fn send_trace(
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

/// The bare loop's kernel UDP socket on loopback (a free port, 64 MiB receive buffer).
pub(super) fn loopback_socket() -> Result<dta_io::udp::UdpSocket, String> {
    use dta_io::udp::{UdpOptions, UdpSocket};
    UdpSocket::bind(
        SocketAddrV4::new(Ipv4Addr::LOCALHOST, 0),
        &UdpOptions {
            rcvbuf: 64 << 20,
            sndbuf: 1 << 20,
            reuse_port: false,
        },
    )
    .map_err(|e| e.to_string())
}

/// Kernel UDP: bare `recvmmsg` loop vs the translator (1 worker) writing into the software
/// RNIC, both on loopback.
pub fn compare_udp(sc: &Scenario, trace: &Trace, o: &CompareOptions) -> Result<Comparison, String> {
    use dta_io::udp::UdpBackend;
    let sock = loopback_socket()?;
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
    let roce = SocketAddrV4::new(Ipv4Addr::LOCALHOST, 0);
    Collector::start(loopback_collector(
        sc,
        roce,
        dir.join("collector.json"),
        peer,
    ))
}

pub(super) fn translator_config(sc: &Scenario, meta: PathBuf) -> TranslatorConfig {
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

pub(super) fn scratch_dir(tag: &str) -> Result<PathBuf, String> {
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
pub(super) fn in_netns<T: Send + 'static>(
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

/// What [`start_veth`] started: the scratch directory, the collector in namespace A, the
/// translator in namespace B and its new worker threads' IDs.
pub(super) type Veth = (PathBuf, Collector, Translator, Vec<u64>);

/// Starts a comparison's translator on veth B (namespace B, listening on `port`) and its
/// collector (software RNIC) in namespace A with the scenario's stores, the translator its
/// one static peer. `tune` adjusts the collector's configuration and `configure` the
/// translator's before they start; if the translator does not start, the collector is shut
/// down.
pub(super) fn start_veth(
    name: &str,
    net: &Netns,
    sc: &Scenario,
    port: u16,
    tune: impl FnOnce(&mut CollectorConfig) + Send + 'static,
    configure: impl FnOnce(&mut TranslatorConfig),
) -> Result<Veth, String> {
    let dir = scratch_dir(name)?;
    let meta = dir.join("collector.json");
    let roce_t = SocketAddrV4::new(ADDR_B, dta_proto::consts::ROCEV2_PORT);
    let stores = sc.stores();
    let m2 = meta.clone();
    let collector = in_netns(&net.ns_a, move || {
        let mut c = CollectorConfig {
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
        };
        tune(&mut c);
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
    let tids = sys::new_threads_named("dta-worker-0", &before);
    Ok((dir, collector, tr, tids))
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
    let (dir, collector, tr, tids) = start_veth(name, net, sc, port, |_| {}, configure)?;
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
