//! Full-burst capacity: pre-fill the receive queue while the receiver is frozen, time the
//! drain (`udp` on loopback and on the veth pair; the AF_XDP and DPDK variants build on
//! these).

use std::net::SocketAddrV4;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use dta_collector::config::CollectorConfig;
use dta_io::backend::Backend;
use dta_translator::config::{BackendKind, TranslatorConfig};
use dta_translator::Translator;

use super::flow::{in_netns, loopback_socket, start_veth};
use super::*;
use crate::gen::Scenario;
use crate::replay::UdpRig;
use crate::sender::PacedSender;
use crate::sys;
use crate::trace::Trace;
use dta_io::netns::{Netns, ADDR_A, ADDR_B};

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

/// Runs `round` `rounds` times and sums the sides.
pub(super) fn sum_rounds(
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
pub(super) fn bare_prefilled<B: Backend + 'static>(
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
    use dta_io::udp::UdpBackend;
    let sock = loopback_socket()?;
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
pub(super) fn send_from_a(net: &Netns, trace: &Trace, n: u64) -> Result<u64, String> {
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
    let if_a = net.if_a.clone();
    let tune = move |c: &mut CollectorConfig| {
        c.collector.hugepages = false;
        // The software RNIC on AF_XDP when it is compiled in: the frames the translator sends
        // over the veth are then redirected by XDP on arrival, instead of running namespace
        // A's whole UDP receive path in the sending thread (veth delivers in the sender's
        // context), which would be charged to the translator's worker.
        if RNIC_ON_AF_XDP {
            c.collector.rnic.backend = dta_collector::config::RnicBackend::AfXdp;
            c.collector.rnic.af_xdp.interface = if_a;
        }
    };
    let (dir, collector, tr, tids) = start_veth(name, net, sc, port, tune, configure)?;
    let tid = tids
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
