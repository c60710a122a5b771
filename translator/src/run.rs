//! Running the translator: sockets, worker threads and the static set-up, around the
//! sans-I/O [`Pipeline`].

use std::net::{Ipv4Addr, SocketAddrV4};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use dta_io::backend::Backend;
use dta_io::udp::{UdpBackend, UdpOptions, UdpRx, UdpSocket, Waker, MAX_BURST};
use dta_proto::batch::{Datagram, TxBatch};
use dta_proto::meta::{CollectorMeta, QpMeta, StoreKind, StoreMeta};
use dta_proto::wire::ethernet::MacAddr;
use dta_proto::wire::ib::{Psn, Qpn};
use dta_proto::wire::report::ParseConfig;

use crate::config::TranslatorConfig;
use crate::control::cluster::{cluster_routes, RouteBoard};
use crate::control::cm::{CmEvent, CmInitiator};
use crate::datapath::pipeline::{
    CollectorTarget, Handoff, Pipeline, PipelineConfig, QpBinding, RateLimit, Route,
};
use crate::datapath::qp::{QpStats, QpTuning};
use crate::datapath::stats::TranslatorCounters;

/// What one worker publishes for the control plane.
#[derive(Debug, Clone, Default)]
pub struct WorkerSnapshot {
    /// Pipeline counters.
    pub counters: TranslatorCounters,
    /// Per-store QP stats: (store, our QPN, stats).
    pub qps: Vec<(String, u32, QpStats)>,
    /// Reports pending in batches, caches and backlog.
    pub pending: u64,
    /// Kernel drops on the report socket (receive buffer overflow).
    pub socket_drops: u64,
    /// recvmmsg calls on the report socket.
    pub rx_ios: u64,
    /// sendmmsg calls.
    pub tx_ios: u64,
    /// Datagrams the kernel refused to send.
    pub tx_errors: u64,
    /// RDMA_CM reconnections started after a QP broke.
    pub reconnects: u64,
    /// RDMA_CM initiator counters (all collectors).
    pub cm: crate::control::cm::CmClientCounters,
}

/// Our QPN number `slot` on worker `worker` of `workers`: `(0x100 + slot) * workers + worker`,
/// so `qpn % workers == worker` (the rule `roce_steering = "qpn"` steers answers by; see
/// `dta_io::reuseport`). QPNs 0..0x100 are never used (QP 1 is the GSI).
pub fn worker_qpn(slot: u32, worker: usize, workers: usize) -> u32 {
    let n = workers.max(1) as u32;
    let slots = 0xFF_FFFF / n - 0x100;
    (0x100 + slot % slots) * n + worker as u32
}

/// Connects `ports` through `cm` over `backend`, blocking until all are ready or `timeout`.
/// Our QPN for port i is `qpn_base + i * qpn_stride`; starting PSNs are random.
pub fn connect_blocking(
    backend: &mut dyn Backend,
    cm: &mut CmInitiator,
    ports: &[u16],
    (qpn_base, qpn_stride): (u32, u32),
    timeout: Duration,
) -> Result<Vec<(u16, StoreMeta, QpBinding)>, String> {
    let epoch = Instant::now();
    let now = || epoch.elapsed().as_nanos() as u64;
    let mut tx = TxBatch::new(256, 2048);
    for (i, &port) in ports.iter().enumerate() {
        cm.connect(
            port,
            Qpn::new(qpn_base + i as u32 * qpn_stride),
            Psn::new(dta_io::random::random_u32()),
            now(),
            &mut tx,
        );
    }
    let mut ready: Vec<Option<(StoreMeta, QpBinding)>> = vec![None; ports.len()];
    let mut failure: Option<String> = None;
    while ready.iter().any(Option::is_none) {
        if epoch.elapsed() > timeout {
            let missing: Vec<u16> = ports
                .iter()
                .zip(&ready)
                .filter(|(_, r)| r.is_none())
                .map(|(p, _)| *p)
                .collect();
            return Err(format!(
                "RDMA_CM connection to ports {missing:?} timed out{}",
                failure.map(|f| format!(" ({f})")).unwrap_or_default()
            ));
        }
        if !tx.is_empty() {
            backend.send_batch(&tx).map_err(|e| e.to_string())?;
            tx.clear();
        }
        let mut events = Vec::new();
        backend
            .recv_with(Duration::from_millis(20), &mut |burst| {
                for d in burst {
                    if cm.wants(d) {
                        cm.handle(now(), d, &mut tx);
                    }
                }
            })
            .map_err(|e| e.to_string())?;
        cm.poll(now(), &mut tx);
        events.extend(std::iter::from_fn(|| cm.poll_event()));
        for e in events {
            match e {
                CmEvent::Ready {
                    port,
                    meta,
                    binding,
                } => {
                    if let Some(i) = ports.iter().position(|&p| p == port) {
                        ready[i] = Some((meta, binding));
                    }
                }
                CmEvent::Failed { port, reason } => {
                    let why = match reason {
                        Some(8) => {
                            format!("port {port}: no store listens there (REJ invalid service ID)")
                        }
                        Some(r) => format!("port {port}: rejected, reason {r}"),
                        None => format!("port {port}: no answer"),
                    };
                    log::warn!("RDMA_CM: {why}; retrying");
                    failure = Some(why);
                    let i = ports.iter().position(|&p| p == port).unwrap_or(0);
                    cm.connect(
                        port,
                        Qpn::new(qpn_base + i as u32 * qpn_stride),
                        Psn::new(dta_io::random::random_u32()),
                        now(),
                        &mut tx,
                    );
                }
            }
        }
    }
    if !tx.is_empty() {
        let _ = backend.send_batch(&tx);
    }
    Ok(ports
        .iter()
        .zip(ready)
        .map(|(&p, r)| {
            let (m, b) = r.expect("all ready");
            (p, m, b)
        })
        .collect())
}

/// An RDMA_CM initiator and the (rdma_cm port, store name) pairs it connects.
pub type StoreInitiator = (CmInitiator, Vec<(u16, String)>);

/// One worker thread: a pipeline driven by a backend.
pub struct Worker {
    /// Worker index.
    pub index: usize,
    /// The sans-I/O pipeline.
    pub pipeline: Pipeline,
    /// Packet I/O.
    pub backend: Box<dyn Backend>,
    /// Datagrams to this UDP port are reports; everything else is RoCEv2 responses.
    pub report_port: u16,
    /// Datagrams to this UDP port are P4.org Telemetry Reports (0: none).
    pub int_port: u16,
    /// Set to stop (after flushing).
    pub stop: Arc<AtomicBool>,
    /// Where to publish snapshots.
    pub snapshots: Arc<Vec<Mutex<WorkerSnapshot>>>,
    /// RDMA_CM initiators (one per CM collector) with the (port, store name) they serve.
    pub initiators: Vec<StoreInitiator>,
    /// Workers in the translator (QPN allocation: see [`worker_qpn`]).
    pub workers: usize,
    /// Next QPN slot to use for a reconnection (see [`worker_qpn`]).
    pub qpn_slot: u32,
    /// Reports copied to us by the dispatcher (`report_steering = "dispatcher"`).
    pub dispatched: Option<DispatchRx>,
    /// Hand-off links to the other workers.
    pub links: HandoffLinks,
    /// Reconnections started.
    pub reconnects: u64,
    /// Period of [`Worker::publish`].
    pub stats_interval_ns: u64,
    /// A collector cluster's routes and the generation this worker routes by.
    pub routes: Option<(Arc<RouteBoard>, u64)>,
}

/// A receive that returned at least this many datagrams found a queue waiting (the smallest
/// backend burst is DPDK's 32): the worker may hold its transmissions for the next burst.
const FULL_BURST: usize = 32;
/// Most frames held back while receives come back full (well under the transmit batch's room
/// beyond one full burst, so a burst always fits).
const TX_COALESCE_FRAMES: usize = 64;
/// Longest a frame is held back while receives come back full.
const TX_COALESCE_NS: u64 = 50_000;

/// First QPN slot used for reconnections (initial connections use `collector * 0x40 + port`).
const RECONNECT_SLOTS: u32 = 0x200;

/// Reports the dispatcher copied for one worker: payloads back to back, with their addresses.
pub struct DispatchBurst {
    data: Vec<u8>,
    /// (source, destination, offset in `data`, length).
    items: Vec<(SocketAddrV4, SocketAddrV4, u32, u32)>,
}

impl DispatchBurst {
    fn new() -> DispatchBurst {
        DispatchBurst {
            data: Vec::with_capacity(MAX_BURST * 256),
            items: Vec::with_capacity(MAX_BURST),
        }
    }

    fn clear(&mut self) {
        self.data.clear();
        self.items.clear();
    }
}

/// Counters of the dispatcher thread, published once per burst.
#[derive(Debug, Default)]
pub struct DispatchStats {
    /// Datagrams the kernel dropped on the report socket (receive buffer full).
    pub socket_drops: AtomicU64,
    /// `recvmmsg` calls.
    pub rx_ios: AtomicU64,
}

/// A worker's end of the dispatcher: bursts in, emptied bursts back.
pub struct DispatchRx {
    rx: Receiver<DispatchBurst>,
    back: SyncSender<DispatchBurst>,
    /// Signalled after each burst queued for this worker (its backend polls it).
    waker: Arc<Waker>,
    /// The dispatcher's counters (worker 0 publishes them).
    stats: Option<Arc<DispatchStats>>,
}

/// Bursts in flight per worker between the dispatcher and the worker.
const DISPATCH_QUEUE: usize = 64;

/// The worker that gets a reporter's datagrams under `report_steering = "dispatcher"`: a hash
/// of the source address, so one reporter's reports stay on one worker, in order.
pub fn dispatch_worker(src: SocketAddrV4, workers: usize) -> usize {
    let x = (u32::from(*src.ip()) as u64) << 16 | src.port() as u64;
    let h = x.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    ((h >> 32) as usize * workers) >> 32
}

/// The dispatcher thread: reads the one report socket and copies each datagram to its worker.
struct Dispatcher {
    rx: UdpRx,
    to: Vec<SyncSender<DispatchBurst>>,
    wakers: Vec<Arc<Waker>>,
    returned: Receiver<DispatchBurst>,
    spare: Vec<DispatchBurst>,
    filling: Vec<DispatchBurst>,
    stats: Arc<DispatchStats>,
    stop: Arc<AtomicBool>,
}

impl Dispatcher {
    /// The dispatcher and one [`DispatchRx`] per worker.
    fn new(
        rx: UdpRx,
        workers: usize,
        stop: Arc<AtomicBool>,
    ) -> std::io::Result<(Dispatcher, Vec<DispatchRx>)> {
        let stats = Arc::new(DispatchStats::default());
        let (back, returned) = sync_channel(DISPATCH_QUEUE * workers + workers);
        let mut to = Vec::new();
        let mut wakers = Vec::new();
        let mut ends = Vec::new();
        for w in 0..workers {
            let (s, r) = sync_channel(DISPATCH_QUEUE);
            to.push(s);
            let waker = Arc::new(Waker::new()?);
            wakers.push(waker.clone());
            ends.push(DispatchRx {
                rx: r,
                back: back.clone(),
                waker,
                stats: (w == 0).then(|| stats.clone()),
            });
        }
        let d = Dispatcher {
            rx,
            to,
            wakers,
            returned,
            spare: Vec::new(),
            filling: (0..workers).map(|_| DispatchBurst::new()).collect(),
            stats,
            stop,
        };
        Ok((d, ends))
    }

    fn run(mut self) {
        let workers = self.to.len();
        let mut published = Instant::now();
        while !self.stop.load(Ordering::Relaxed) {
            let filling = &mut self.filling;
            let r = self.rx.recv_with(Duration::from_millis(10), |burst| {
                for d in burst {
                    let b = &mut filling[dispatch_worker(d.src, workers)];
                    b.items
                        .push((d.src, d.dst, b.data.len() as u32, d.payload.len() as u32));
                    b.data.extend_from_slice(d.payload);
                }
            });
            if let Err(e) = r {
                log::error!("dispatcher: receive failed: {e}");
                std::thread::sleep(Duration::from_millis(10));
            }
            // The kernel's drop count costs a getsockopt: publish it as often as workers
            // publish their snapshots.
            if published.elapsed() >= Duration::from_millis(20) {
                published = Instant::now();
                let st = self.rx.stats();
                self.stats
                    .socket_drops
                    .store(st.kernel_drops + st.truncated, Ordering::Relaxed);
                self.stats.rx_ios.store(st.ios, Ordering::Relaxed);
            }
            while let Ok(mut b) = self.returned.try_recv() {
                b.clear();
                self.spare.push(b);
            }
            for w in 0..workers {
                if self.filling[w].items.is_empty() {
                    continue;
                }
                let next = self.spare.pop().unwrap_or_else(DispatchBurst::new);
                let full = std::mem::replace(&mut self.filling[w], next);
                // Blocks while the worker is behind: the kernel buffer then absorbs (and
                // counts) the overflow, as with one socket per worker.
                if self.to[w].send(full).is_err() {
                    return;
                }
                self.wakers[w].wake();
            }
        }
    }
}

/// A burst of hand-offs: (sending worker, reports).
type HandoffBurst = (usize, Vec<Handoff>);

/// Channels that carry reports between workers, a burst at a time: one `Vec` per destination
/// per burst, recycled through a return channel, so the per-report cost is a copy into a
/// vector, not a synchronised operation.
pub struct HandoffLinks {
    /// To worker i (None for ourselves).
    to: Vec<Option<SyncSender<HandoffBurst>>>,
    /// Bursts handed to us: (sender, reports).
    from: Receiver<HandoffBurst>,
    /// Emptied vectors going back to worker i.
    give_back: Vec<Option<SyncSender<Vec<Handoff>>>>,
    /// Our emptied vectors coming back.
    returned: Receiver<Vec<Handoff>>,
    spare: Vec<Vec<Handoff>>,
    /// Vectors being filled for each destination this burst.
    outgoing: Vec<Vec<Handoff>>,
}

impl HandoffLinks {
    /// Links for `n` workers, indexed by worker.
    pub fn mesh(n: usize) -> Vec<HandoffLinks> {
        let mut senders = Vec::new();
        let mut receivers = Vec::new();
        let mut ret_senders = Vec::new();
        let mut ret_receivers = Vec::new();
        for _ in 0..n {
            let (s, r) = sync_channel(1024);
            senders.push(s);
            receivers.push(r);
            let (s, r) = sync_channel(1024);
            ret_senders.push(s);
            ret_receivers.push(r);
        }
        receivers
            .into_iter()
            .zip(ret_receivers)
            .enumerate()
            .map(|(w, (from, returned))| HandoffLinks {
                to: (0..n)
                    .map(|i| (i != w).then(|| senders[i].clone()))
                    .collect(),
                from,
                give_back: (0..n)
                    .map(|i| (i != w).then(|| ret_senders[i].clone()))
                    .collect(),
                returned,
                spare: Vec::new(),
                outgoing: (0..n).map(|_| Vec::new()).collect(),
            })
            .collect()
    }
}

impl Worker {
    /// Runs until `stop` is set, then flushes partial batches and caches and lingers briefly
    /// for the last ACKs.
    pub fn run(mut self) {
        // Continue every Append list after the collector's head (list-head messages of the
        // initial RDMA_CM connections).
        for (cm, names) in &mut self.initiators {
            for (port, name) in names.iter() {
                if let Some(h) = cm.take_list_heads(*port) {
                    let n = self.pipeline.seed_append_heads(name, &h);
                    log::info!(
                        "store {name}: worker {} continues {n} Append list(s) after the collector's heads",
                        self.index
                    );
                }
            }
        }
        let epoch = Instant::now();
        let now = || epoch.elapsed().as_nanos() as u64;
        let per_report = self.pipeline.frames_per_report_max();
        let mut tx = TxBatch::new(256 * per_report + 256, 2048);
        let mut last_pub = 0u64;
        let mut stopping: Option<Instant> = None;
        let mut reconnect_at: Vec<(String, u64, u64)> = Vec::new();
        let report_port = self.report_port;
        let int_port = self.int_port;
        // The time at the end of the previous iteration: timers are coarse enough that the
        // microseconds the send took do not matter, and a clock read is not free under KVM.
        let mut n = now();
        let mut last_tx = n;
        loop {
            let wait = match self.pipeline.next_deadline() {
                Some(d) if d <= n => Duration::ZERO,
                Some(d) => Duration::from_nanos(d - n).min(Duration::from_millis(10)),
                None => Duration::from_millis(10),
            };
            let pipeline = &mut self.pipeline;
            let initiators = &mut self.initiators;
            let txr = &mut tx;
            let mut got_at = None;
            let r = self.backend.recv_with(wait, &mut |burst| {
                let t = *got_at.get_or_insert_with(now);
                let mut i = 0;
                while i < burst.len() {
                    let is_report = burst[i].dst.port() == report_port;
                    let is_int = int_port != 0 && burst[i].dst.port() == int_port;
                    let mut j = i + 1;
                    while j < burst.len()
                        && (burst[j].dst.port() == report_port) == is_report
                        && (int_port != 0 && burst[j].dst.port() == int_port) == is_int
                    {
                        j += 1;
                    }
                    if is_report {
                        pipeline.handle_reports(t, &burst[i..j], txr);
                    } else if is_int {
                        pipeline.handle_int_reports(t, &burst[i..j], txr);
                    } else {
                        // Responses go to the pipeline in runs (one call per run of
                        // datagrams); RDMA_CM messages (QP 1) to their initiator.
                        let run = &burst[i..j];
                        let mut k = 0;
                        while k < run.len() {
                            let cm = initiators.iter().position(|(c, _)| c.wants(&run[k]));
                            let Some(ci) = cm else {
                                let mut e = k + 1;
                                while e < run.len()
                                    && !initiators.iter().any(|(c, _)| c.wants(&run[e]))
                                {
                                    e += 1;
                                }
                                pipeline.handle_responses(t, &run[k..e], txr);
                                k = e;
                                continue;
                            };
                            let (c, names) = &mut initiators[ci];
                            c.handle(t, &run[k], txr);
                            // Only a reconnection's Ready matters here; a failure shows as
                            // the store still broken, and `reconnect` retries it.
                            while let Some(e) = c.poll_event() {
                                let CmEvent::Ready {
                                    port,
                                    meta,
                                    binding,
                                } = e
                                else {
                                    continue;
                                };
                                if let Some((_, name)) = names.iter().find(|(p, _)| *p == port) {
                                    log::info!(
                                        "store {name}: reconnected (QP {:#x})",
                                        binding.local_qpn.value()
                                    );
                                    let before = pipeline.redundancy_of(name);
                                    if meta.redundancy.is_some() && meta.redundancy != before {
                                        log::warn!(
                                            "store {name}: the collector now records redundancy \
                                             {:?} (was {before:?}); reports are held to it",
                                            meta.redundancy.map(|n| n.get())
                                        );
                                    }
                                    pipeline.rebind(name, binding, Some(&meta));
                                    if let Some(h) = c.take_list_heads(port) {
                                        pipeline.seed_append_heads(name, &h);
                                    }
                                }
                            }
                            k += 1;
                        }
                    }
                    i = j;
                }
            });
            let got = match r {
                Ok(k) => k,
                Err(e) => {
                    log::error!("worker {}: receive failed: {e}", self.index);
                    std::thread::sleep(Duration::from_millis(10));
                    0
                }
            };
            // One clock read per iteration: the receive callback's, or one now if nothing
            // arrived (reads showed up at ~5% of a worker's time when each step took its own).
            let t = got_at.unwrap_or_else(now);
            n = t;
            self.follow_routes();
            self.take_dispatched(t, &mut tx);
            if self.workers > 1 {
                self.exchange_handoffs(t, &mut tx);
            }
            self.reconnect(t, &mut tx, &mut reconnect_at);
            // Timers, then what the QPs hold for sending (queued frames, go-back-N passes),
            // as far as the batch has room; a full batch goes out and the rest follows.
            self.pipeline.poll(t, &mut tx);
            while self.pipeline.poll_transmit(t, &mut tx) {
                let _ = self.backend.send_batch(&tx);
                tx.clear();
                last_tx = t;
            }
            // While receives come back full (a queue is waiting), transmit once every few
            // bursts rather than after each: every backend pays a system call (and AF_XDP a
            // completion reap) per transmit call. Flushed as soon as a receive comes back
            // short, once TX_COALESCE_FRAMES are pending, or TX_COALESCE_NS after the last
            // transmit, so the added delay is bounded and only under load.
            let queued = got >= FULL_BURST
                && tx.len() < TX_COALESCE_FRAMES
                && t.saturating_sub(last_tx) < TX_COALESCE_NS;
            if !tx.is_empty() && !queued {
                let _ = self.backend.send_batch(&tx);
                tx.clear();
                last_tx = t;
            }
            let want_stop = self.stop.load(Ordering::Relaxed);
            if want_stop && stopping.is_none() {
                stopping = Some(Instant::now());
                // Let the other workers' last hand-offs arrive before flushing.
                let t0 = Instant::now();
                while t0.elapsed() < Duration::from_millis(50) {
                    self.exchange_handoffs(now(), &mut tx);
                    std::thread::sleep(Duration::from_millis(1));
                }
                while !self.pipeline.flush_all(now(), &mut tx) {
                    let _ = self.backend.send_batch(&tx);
                    tx.clear();
                    // A QP that cannot take the rest waits for ACKs (its window) or breaks.
                    self.pump_responses(epoch, Duration::from_millis(1), &mut tx);
                    if stopping.is_some_and(|t: Instant| t.elapsed() > Duration::from_secs(1)) {
                        break;
                    }
                }
                let _ = self.backend.send_batch(&tx);
                tx.clear();
                // Ask the collectors to confirm what is outstanding; lost frames are resent
                // while the loop below keeps running.
                self.pipeline.confirm_promptly();
            }
            if want_stop || t.saturating_sub(last_pub) >= self.stats_interval_ns {
                last_pub = t;
                self.publish();
            }
            // Stop 100 ms after the flush once every frame is confirmed (resent if lost), or
            // after 1 s whatever is outstanding.
            if stopping.is_some_and(|t| {
                t.elapsed() > Duration::from_millis(100)
                    && (self.pipeline.unconfirmed_frames() == 0
                        || t.elapsed() > Duration::from_secs(1))
            }) {
                self.disconnect(epoch, &mut tx);
                self.publish();
                break;
            }
        }
    }

    /// Takes up a collector cluster's new routes (a new epoch) if the board has them: one
    /// atomic load per loop iteration, a copy of the tables when they changed.
    fn follow_routes(&mut self) {
        let Some((board, seen)) = &mut self.routes else {
            return;
        };
        if board.generation() == *seen {
            return;
        }
        let (g, r) = board.current();
        *seen = g;
        match self.pipeline.set_routes(&r) {
            Ok(()) => log::info!(
                "worker {}: routing by cluster epoch {}",
                self.index,
                r.epoch
            ),
            Err(e) => log::error!(
                "worker {}: cluster epoch {} refused: {e}",
                self.index,
                r.epoch
            ),
        }
    }

    /// Closes every RDMA_CM connection (DREQ) and waits, bounded by the DREQ retries, for the
    /// collectors' DREPs, so they release our QPs instead of keeping them forever.
    fn disconnect(&mut self, epoch: Instant, tx: &mut TxBatch) {
        use crate::control::cm::{DREQ_TIMEOUT_NS, DREQ_TRIES};
        let now = || epoch.elapsed().as_nanos() as u64;
        for (cm, _) in &mut self.initiators {
            cm.disconnect_all(now(), tx);
        }
        let limit = Duration::from_nanos(DREQ_TIMEOUT_NS * DREQ_TRIES as u64 + 20_000_000);
        let t0 = Instant::now();
        loop {
            if !tx.is_empty() {
                let _ = self.backend.send_batch(tx);
                tx.clear();
            }
            if !self.initiators.iter().any(|(cm, _)| cm.closing()) || t0.elapsed() > limit {
                break;
            }
            let initiators = &mut self.initiators;
            let txr = &mut *tx;
            let _ = self
                .backend
                .recv_with(Duration::from_millis(5), &mut |burst| {
                    let t = epoch.elapsed().as_nanos() as u64;
                    for d in burst {
                        if let Some((cm, _)) = initiators.iter_mut().find(|(c, _)| c.wants(d)) {
                            cm.handle(t, d, txr);
                            while cm.poll_event().is_some() {}
                        }
                    }
                });
            for (cm, _) in &mut self.initiators {
                cm.poll(now(), tx);
                while cm.poll_event().is_some() {}
            }
        }
    }

    /// Reconnects stores whose QP broke, with exponential back-off (100 ms .. 5 s).
    fn reconnect(&mut self, now: u64, tx: &mut TxBatch, state: &mut Vec<(String, u64, u64)>) {
        for (cm, _) in &mut self.initiators {
            cm.poll(now, tx);
            while let Some(e) = cm.poll_event() {
                if let CmEvent::Failed { port, .. } = e {
                    log::warn!("RDMA_CM: reconnection of port {port} failed; backing off");
                }
            }
        }
        let broken: Vec<String> = self.pipeline.broken_stores().map(str::to_string).collect();
        for name in broken {
            let Some((cm, port)) = self.initiators.iter_mut().find_map(|(cm, names)| {
                names
                    .iter()
                    .find(|(_, n)| *n == name)
                    .map(|(p, _)| (cm, *p))
            }) else {
                continue;
            };
            let e = match state.iter_mut().find(|(n, _, _)| *n == name) {
                Some(e) => e,
                None => {
                    state.push((name.clone(), 0, 100_000_000));
                    state.last_mut().expect("just pushed")
                }
            };
            if now < e.1 || cm.busy() {
                continue;
            }
            e.1 = now + e.2;
            e.2 = (e.2 * 2).min(5_000_000_000);
            let qpn = Qpn::new(worker_qpn(self.qpn_slot, self.index, self.workers));
            self.qpn_slot = self.qpn_slot.wrapping_add(1).max(RECONNECT_SLOTS);
            log::warn!("store {name}: QP broken, reconnecting over RDMA_CM (port {port})");
            self.reconnects += 1;
            cm.connect(port, qpn, Psn::new(dta_io::random::random_u32()), now, tx);
        }
        state.retain(|(n, _, _)| self.pipeline.broken_stores().any(|b| b == n));
    }

    /// Receives for up to `wait` and hands every RoCEv2 response to the pipeline (shutdown
    /// flushing, where new reports are no longer taken), then polls it.
    fn pump_responses(&mut self, epoch: Instant, wait: Duration, tx: &mut TxBatch) {
        let pipeline = &mut self.pipeline;
        let report_port = self.report_port;
        let int_port = self.int_port;
        let is_report = |p: u16| p == report_port || int_port != 0 && p == int_port;
        let _ = self.backend.recv_with(wait, &mut |burst| {
            let now = epoch.elapsed().as_nanos() as u64;
            // Runs of responses go over in one call each (reports are no longer taken).
            let mut i = 0;
            while i < burst.len() {
                if is_report(burst[i].dst.port()) {
                    i += 1;
                    continue;
                }
                let mut j = i + 1;
                while j < burst.len() && !is_report(burst[j].dst.port()) {
                    j += 1;
                }
                pipeline.handle_responses(now, &burst[i..j], tx);
                i = j;
            }
        });
        let now = epoch.elapsed().as_nanos() as u64;
        self.pipeline.poll(now, tx);
    }

    /// Translates the bursts the dispatcher copied to us and gives the buffers back.
    fn take_dispatched(&mut self, now: u64, tx: &mut TxBatch) {
        let Some(d) = &self.dispatched else { return };
        let per_report = self.pipeline.frames_per_report_max();
        while let Ok(b) = d.rx.try_recv() {
            let mut burst = [Datagram {
                src: SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 0),
                dst: SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 0),
                ip: None,
                payload: &[],
            }; MAX_BURST];
            for chunk in b.items.chunks(MAX_BURST) {
                for (slot, &(src, dst, at, len)) in burst.iter_mut().zip(chunk) {
                    *slot = Datagram {
                        src,
                        dst,
                        ip: None,
                        payload: &b.data[at as usize..(at + len) as usize],
                    };
                }
                // Frames that find no room wait in their QP; sending first keeps them few.
                if tx.remaining() < chunk.len() * per_report {
                    let _ = self.backend.send_batch(tx);
                    tx.clear();
                }
                self.pipeline.handle_reports(now, &burst[..chunk.len()], tx);
            }
            let _ = d.back.try_send(b);
        }
    }

    /// Sends reports this worker does not own to their owners and processes what others sent.
    fn exchange_handoffs(&mut self, now: u64, tx: &mut TxBatch) {
        let me = self.index;
        let l = &mut self.links;
        while let Ok(v) = l.returned.try_recv() {
            l.spare.push(v);
        }
        for h in self.pipeline.take_handoffs() {
            if l.outgoing[h.worker].capacity() == 0 {
                l.outgoing[h.worker] = l.spare.pop().unwrap_or_else(|| Vec::with_capacity(256));
            }
            l.outgoing[h.worker].push(h);
        }
        let mut dropped = 0;
        for w in 0..l.to.len() {
            if l.outgoing[w].is_empty() {
                continue;
            }
            let v = std::mem::take(&mut l.outgoing[w]);
            let n = v.len() as u64;
            if let Some(Err(e)) = l.to[w].as_ref().map(|s| s.try_send((me, v))) {
                dropped += n;
                let (_, mut v) = match e {
                    std::sync::mpsc::TrySendError::Full(x)
                    | std::sync::mpsc::TrySendError::Disconnected(x) => x,
                };
                v.clear();
                l.spare.push(v);
            }
        }
        if dropped > 0 {
            self.pipeline.count_handoff_drops(dropped);
        }
        let per_report = self.pipeline.frames_per_report_max();
        while let Ok((from, mut v)) = self.links.from.try_recv() {
            for h in &v {
                if tx.remaining() < per_report {
                    let _ = self.backend.send_batch(tx);
                    tx.clear();
                }
                self.pipeline.handle_handoff(now, h, tx);
            }
            v.clear();
            if let Some(back) = self.links.give_back[from].as_ref() {
                let _ = back.try_send(v);
            }
        }
    }

    fn publish(&self) {
        let mut s = self.snapshots[self.index].lock().expect("snapshot lock");
        s.counters = *self.pipeline.counters();
        // In place: no allocation per publication once the QP list is stable.
        let mut i = 0;
        for (n, q, st) in self.pipeline.qp_stats() {
            match s.qps.get_mut(i) {
                Some(e) if e.0 == n => (e.1, e.2) = (q.value(), st),
                Some(e) => *e = (n.to_string(), q.value(), st),
                None => s.qps.push((n.to_string(), q.value(), st)),
            }
            i += 1;
        }
        s.qps.truncate(i);
        s.pending = self.pipeline.pending_reports();
        let b = self.backend.stats();
        s.socket_drops = b.rx_dropped;
        s.rx_ios = b.rx_ios;
        if let Some(st) = self.dispatched.as_ref().and_then(|d| d.stats.as_ref()) {
            s.socket_drops += st.socket_drops.load(Ordering::Relaxed);
            s.rx_ios += st.rx_ios.load(Ordering::Relaxed);
        }
        s.tx_ios = b.tx_ios;
        s.tx_errors = b.tx_errors;
        s.reconnects = self.reconnects;
        let mut cm = crate::control::cm::CmClientCounters::default();
        for (c, _) in &self.initiators {
            cm.merge(&c.counters);
        }
        s.cm = cm;
    }
}

/// A running translator.
pub struct Translator {
    /// The metrics endpoint, if configured.
    pub metrics: Option<crate::control::metrics::MetricsServer>,
    /// Where reports are received.
    pub report_addr: SocketAddrV4,
    /// Our RoCEv2 address.
    pub roce_addr: SocketAddrV4,
    snapshots: Arc<Vec<Mutex<WorkerSnapshot>>>,
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
    /// A collector cluster's routes, if this translator is a member of one.
    board: Option<Arc<RouteBoard>>,
}

/// Loads every collector's published metadata.
pub fn load_collectors(cfg: &TranslatorConfig) -> Result<Vec<(String, CollectorMeta)>, String> {
    let mut out = Vec::new();
    for c in cfg.collectors.iter().filter(|c| c.cm.is_none()) {
        let Some(path) = &c.metadata else {
            return Err(format!(
                "collector {:?}: no `metadata` file given (RDMA_CM set-up is configured with `cm`)",
                c.name
            ));
        };
        let s = std::fs::read_to_string(path).map_err(|e| {
            format!(
                "collector {:?}: cannot read {}: {e} (is the collector running?)",
                c.name,
                path.display()
            )
        })?;
        let m: CollectorMeta = serde_json::from_str(&s)
            .map_err(|e| format!("collector {:?}: {}: {e}", c.name, path.display()))?;
        out.push((c.name.clone(), m));
    }
    Ok(out)
}

/// Resolves the `[routing]` rules against the flattened store list (collector order, then
/// store order).
pub fn resolve_routes(
    cfg: &TranslatorConfig,
    collectors: &[(String, CollectorMeta)],
) -> Result<(Route, Route, Route), String> {
    let flat: Vec<(String, String, &StoreKind, Ipv4Addr)> = collectors
        .iter()
        .flat_map(|(cn, m)| {
            m.stores
                .iter()
                .map(move |s| (cn.clone(), s.name.clone(), &s.kind, *m.roce.ip()))
        })
        .collect();
    let resolve =
        |what: &str, rule: &str| -> Result<Route, String> {
            let of_kind: Vec<usize> = flat
                .iter()
                .enumerate()
                .filter(|(_, (_, _, k, _))| k.name() == what)
                .map(|(i, _)| i)
                .collect();
            let find = |name: &str| -> Option<usize> {
                flat.iter().position(|(cn, sn, k, _)| {
                    k.name() == what && (sn == name || format!("{cn}/{sn}") == name)
                })
            };
            Ok(match rule {
                "none" => Route::None,
                "single" => of_kind.first().map_or(Route::None, |&i| Route::Single(i)),
                "key-hash" if of_kind.is_empty() => Route::None,
                "key-hash" => Route::ByKeyHash(of_kind),
                "destination" => {
                    let mut v = Vec::new();
                    for (ip, target) in &cfg.routing.destinations {
                        let ip: Ipv4Addr = ip
                            .parse()
                            .map_err(|_| format!("routing.destinations: bad IP {ip:?}"))?;
                        if let Some(i) = find(target) {
                            v.push((ip, i));
                        }
                    }
                    // Reports addressed to a collector's own IP go to that collector's store.
                    for &i in &of_kind {
                        if !v.iter().any(|(ip, _)| *ip == flat[i].3) {
                            v.push((flat[i].3, i));
                        }
                    }
                    Route::ByDestination(v)
                }
                r => {
                    let name = r.strip_prefix("single:").unwrap_or(r);
                    Route::Single(find(name).ok_or_else(|| {
                        format!("routing.{what}: no {what} store called {name:?}")
                    })?)
                }
            })
        };
    Ok((
        resolve("keywrite", &cfg.routing.keywrite)?,
        resolve("keyincrement", &cfg.routing.keyincrement)?,
        resolve("postcard", &cfg.routing.postcard)?,
    ))
}

/// A `[postcard] redundancy` that differs from the N a postcard store records is an error:
/// the store's queries read its own N, so writing another would only waste copies or leave
/// queries reading chunks nobody wrote.
fn check_postcard_redundancy(
    cfg: &TranslatorConfig,
    collectors: &[(String, CollectorMeta)],
) -> Result<(), String> {
    let Some(want) = cfg.postcard.redundancy else {
        return Ok(());
    };
    for (cn, m) in collectors {
        for s in &m.stores {
            if let (StoreKind::Postcard { .. }, Some(n)) = (&s.kind, s.redundancy) {
                if n.get() != want {
                    return Err(format!(
                        "collector {cn:?} store {:?} is written with redundancy {n}, but \
                         [postcard] redundancy = {want}: remove the setting (a store's own N \
                         applies) or make them agree",
                        s.name
                    ));
                }
            }
        }
    }
    Ok(())
}

/// Sketch-Merge needs one worker: every worker merges the switches whose reports reach it
/// into its own copy of a sketch and writes it to the same collector memory, so with several
/// workers each column in memory would hold only one worker's switches (the last writer's).
/// Refused at start, naming the store, instead of writing wrong sketches.
fn check_sketch_workers(
    collectors: &[(String, CollectorMeta)],
    workers: usize,
) -> Result<(), String> {
    if workers <= 1 {
        return Ok(());
    }
    for (cn, m) in collectors {
        if let Some(s) = m
            .stores
            .iter()
            .find(|s| matches!(s.kind, StoreKind::Sketch { .. }))
        {
            return Err(format!(
                "collector {cn:?} store {:?} is a Sketch-Merge store, which one translator worker \
                 merges (with {workers} workers each would write its own partial sketch over the \
                 others'): set [translator] workers = 1, or give the sketches a translator of \
                 their own",
                s.name
            ));
        }
    }
    Ok(())
}

/// What the translator will drop for want of a store, one sentence per report kind that no
/// store serves (a kind routed `"none"` on purpose is not named). Logged as warnings at start
/// (every such report is counted as `drop_no_store` or `drop_unknown_list`).
pub fn unserved_report_kinds(
    cfg: &TranslatorConfig,
    collectors: &[(String, CollectorMeta)],
) -> Vec<String> {
    let stores: Vec<&StoreMeta> = collectors.iter().flat_map(|(_, m)| &m.stores).collect();
    let mut out = Vec::new();
    for (what, rule, report) in [
        ("keywrite", &cfg.routing.keywrite, "Key-Write"),
        ("keyincrement", &cfg.routing.keyincrement, "Key-Increment"),
        ("postcard", &cfg.routing.postcard, "Postcarding"),
    ] {
        if rule != "none" && !stores.iter().any(|s| s.kind.name() == what) {
            out.push(format!(
                "no {what} store among the collectors' stores: every {report} report will be \
                 dropped (drop_no_store); connect its store's port, or set routing.{what} = \
                 \"none\" if none is meant to be served"
            ));
        }
    }
    if !stores
        .iter()
        .any(|s| matches!(s.kind, StoreKind::Append { .. }))
    {
        out.push(
            "no append store among the collectors' stores: every Append report will be \
             dropped (drop_unknown_list); connect its store's port"
                .into(),
        );
    }
    out
}

/// Builds worker `w`'s pipeline configuration and collector targets.
pub fn pipeline_for(
    cfg: &TranslatorConfig,
    w: usize,
    local: SocketAddrV4,
    collectors: &[(String, CollectorMeta)],
) -> Result<(PipelineConfig, Vec<CollectorTarget>), String> {
    let t = &cfg.translator;
    let (route_keywrite, route_keyincrement, route_postcard) = resolve_routes(cfg, collectors)?;
    let workers = t.workers;
    let rate = RateLimit {
        messages_per_sec: cfg.overload.messages_per_sec.div_ceil(workers as u64),
        burst: cfg.overload.burst.div_ceil(workers as u64).max(1),
        low_reserve: cfg.overload.low_reserve,
        medium_reserve: cfg.overload.medium_reserve,
    };
    let pc = PipelineConfig {
        worker: w,
        workers,
        parse: ParseConfig {
            reference_variant: cfg.reports.reference_variant,
            accept_reference: cfg.reports.accept_reference,
            accept_extended: cfg.reports.accept_extended,
            reference_priority: cfg.reports.reference_priority,
        },
        max_redundancy: t.max_redundancy,
        l2_frames: false,
        local,
        local_mac: t
            .mac
            .parse()
            .map_err(|_| format!("translator.mac: bad MAC {:?}", t.mac))?,
        nack_port: t.nack_port,
        append_flush_ns: cfg.append.flush_delay_us * 1000,
        postcard_flush_ns: cfg.postcard.flush_delay_us * 1000,
        postcard_cache_slots: cfg.postcard.cache_slots,
        postcard_redundancy: cfg.postcard.redundancy.unwrap_or(1),
        qp: QpTuning {
            ack_every: cfg.reliability.ack_every,
            ack_timeout_ns: cfg.reliability.ack_timeout_us * 1000,
            rto_min_ns: cfg.reliability.rto_min_us * 1000,
            rto_max_ns: cfg.reliability.rto_max_us * 1000,
            broken_after_ns: cfg.reliability.broken_after_ms * 1_000_000,
            retransmit_window: t.retransmit_window,
            max_outstanding: cfg.reliability.max_outstanding_psns,
        },
        rate,
        backlog: cfg.overload.backlog,
        max_reporters: t.max_reporters,
        route_keywrite,
        route_keyincrement,
        route_postcard,
        sketch: crate::datapath::primitive::SketchSettings {
            expected_switches: cfg.sketch.expected_switches,
            max_switches: cfg.sketch.max_switches,
            flush_ns: cfg.sketch.flush_delay_ms * 1_000_000,
            epoch_quorum: cfg.sketch.epoch_quorum.unwrap_or(0),
            idle_epochs: cfg.sketch.idle_epochs,
            late_epochs: cfg.sketch.late_epochs,
            switches: cfg
                .sketch
                .switch
                .iter()
                .map(|w| crate::datapath::primitive::SketchSwitch {
                    id: w.id,
                    addr: w.address,
                })
                .collect(),
        },
    };
    check_postcard_redundancy(cfg, collectors)?;
    let mut targets = Vec::new();
    for (cn, m) in collectors {
        let mac: MacAddr = m
            .mac
            .parse()
            .map_err(|_| format!("collector {cn:?}: bad MAC {:?}", m.mac))?;
        let mut stores = Vec::new();
        for s in &m.stores {
            let q = s.qps.get(w).ok_or_else(|| {
                format!("collector {cn:?} store {:?} prepared {} QP(s), but the translator runs {workers} workers: set `workers = {workers}` in the collector's [[static_peer]]", s.name, s.qps.len())
            })?;
            stores.push((
                s.clone(),
                QpBinding {
                    local_qpn: Qpn::new(q.peer_qpn),
                    remote_qpn: Qpn::new(q.qpn),
                    start_psn: Psn::new(q.psn),
                },
            ));
        }
        targets.push(CollectorTarget {
            roce: m.roce,
            mac,
            stores,
        });
    }
    Ok((pc, targets))
}

/// What [`bind_report_sockets`] returns: one report socket per worker (reuseport) or none, the
/// report address, and the dispatcher with its worker ends (dispatcher).
type ReportSockets = (
    Vec<Option<UdpRx>>,
    SocketAddrV4,
    Option<(Dispatcher, Vec<DispatchRx>)>,
);

/// Binds the report socket(s) as `translator.report_steering` says.
fn bind_report_sockets(
    cfg: &TranslatorConfig,
    stop: Arc<AtomicBool>,
) -> Result<ReportSockets, String> {
    let t = &cfg.translator;
    let dispatch = t.report_steering.dispatches(t.workers);
    let opts = UdpOptions {
        rcvbuf: t.socket_buffer,
        sndbuf: t.socket_buffer,
        reuse_port: t.workers > 1 && !dispatch,
    };
    let mut addr = t.listen;
    let mut rxs = Vec::new();
    for _ in 0..if dispatch { 1 } else { t.workers } {
        let rs = UdpSocket::bind(addr, &opts)
            .map_err(|e| format!("cannot bind the report socket {addr}: {e}"))?;
        addr = rs.local_addr();
        rxs.push(rs.split().0);
    }
    if dispatch {
        let rx = rxs.pop().expect("one socket");
        let (d, ends) = Dispatcher::new(rx, t.workers, stop)
            .map_err(|e| format!("cannot create the dispatcher's wakers: {e}"))?;
        return Ok((Vec::new(), addr, Some((d, ends))));
    }
    Ok((rxs.into_iter().map(Some).collect(), addr, None))
}

/// Binds one INT Telemetry Report socket per worker at `listen`'s IP and `int.port`
/// (`SO_REUSEPORT` across workers: one switch's reports stay on one worker, so its sequence
/// numbers are tracked in order); none when INT ingest is off.
fn bind_int_sockets(cfg: &TranslatorConfig) -> Result<Vec<Option<UdpRx>>, String> {
    let t = &cfg.translator;
    if cfg.int.port == 0 {
        return Ok(Vec::new());
    }
    let opts = UdpOptions {
        rcvbuf: t.socket_buffer,
        sndbuf: t.socket_buffer,
        reuse_port: t.workers > 1,
    };
    let addr = SocketAddrV4::new(*t.listen.ip(), cfg.int.port);
    (0..t.workers)
        .map(|_| {
            UdpSocket::bind(addr, &opts)
                .map(|s| Some(s.split().0))
                .map_err(|e| format!("cannot bind the INT report socket {addr}: {e}"))
        })
        .collect()
}

/// Binds one RoCEv2 socket per worker as `translator.roce_steering` says; returns them and
/// whether they share one port (BPF steering by QPN attached).
fn bind_roce_sockets(cfg: &TranslatorConfig) -> Result<(Vec<UdpSocket>, bool), String> {
    let t = &cfg.translator;
    let shared = t.roce_steering.shared_port(t.roce, t.workers);
    let opts = UdpOptions {
        rcvbuf: t.socket_buffer,
        sndbuf: t.socket_buffer,
        reuse_port: shared,
    };
    let mut socks: Vec<UdpSocket> = Vec::new();
    for w in 0..t.workers {
        let want = match (shared, socks.first()) {
            // Every member binds the first one's address (its port, if 0 was asked for), in
            // worker order: the group's socket index is the worker index.
            (true, Some(first)) => first.local_addr(),
            (true, None) => t.roce,
            (false, _) if t.roce.port() == 0 => t.roce,
            (false, _) => SocketAddrV4::new(*t.roce.ip(), t.roce.port() + w as u16),
        };
        let s = UdpSocket::bind(want, &opts)
            .map_err(|e| format!("cannot bind the RoCEv2 socket {want}: {e}"))?;
        socks.push(s);
    }
    if shared {
        dta_io::reuseport::attach_qpn_steering(&socks[0], t.workers).map_err(|e| {
            format!(
                "cannot attach the QPN-steering BPF program to the RoCEv2 port {}: {e} \
                 (set translator.roce_steering = \"port-per-worker\")",
                socks[0].local_addr()
            )
        })?;
    }
    Ok((socks, shared))
}

/// Under QPN steering every QP of worker `w` must satisfy `qpn % workers == w`.
fn check_qpn_steering(targets: &[CollectorTarget], w: usize, workers: usize) -> Result<(), String> {
    for t in targets {
        for (s, b) in &t.stores {
            let q = b.local_qpn.value();
            if dta_io::reuseport::worker_of_qpn(q, workers) != w {
                return Err(format!(
                    "store {:?}: worker {w} was given QPN {q:#x}, but roce_steering = \"qpn\" \
                     steers it to worker {}: give the collector's static peer a qpn_base that \
                     is a multiple of {workers}, or use roce_steering = \"port-per-worker\"",
                    s.name,
                    dta_io::reuseport::worker_of_qpn(q, workers)
                ));
            }
        }
    }
    Ok(())
}

impl Translator {
    /// Binds the sockets, connects to every collector (RDMA_CM, or the static metadata), builds
    /// one pipeline per worker and starts the workers.
    ///
    /// Reports reach the workers as `translator.report_steering` says; RoCEv2 answers reach
    /// the worker owning their QP as `translator.roce_steering` says (one shared port with BPF
    /// steering, or port `roce.port + w` for worker `w`).
    pub fn start(cfg: TranslatorConfig) -> Result<Translator, String> {
        cfg.validate()?;
        let mut collectors = load_collectors(&cfg)?;
        let t = &cfg.translator;
        let stop = Arc::new(AtomicBool::new(false));
        let snapshots: Arc<Vec<Mutex<WorkerSnapshot>>> = Arc::new(
            (0..t.workers)
                .map(|_| Mutex::new(WorkerSnapshot::default()))
                .collect(),
        );
        let local_mac: MacAddr = t
            .mac
            .parse()
            .map_err(|_| format!("translator.mac: bad MAC {:?}", t.mac))?;
        let raw = match t.backend {
            crate::config::BackendKind::Udp => None,
            _ => Some(crate::backends::RawBackends::prepare(&cfg)?),
        };
        let mut report_addr = t.listen;
        let mut roce_addrs: Vec<SocketAddrV4> = Vec::new();
        let mut backends: Vec<Box<dyn Backend>> = Vec::new();
        let mut dispatcher = None;
        let mut shared_roce = false;
        if let Some(raw) = &raw {
            for w in 0..t.workers {
                let (b, roce_addr) = raw.open(&cfg, w)?;
                roce_addrs.push(roce_addr);
                backends.push(b);
            }
        } else {
            let (mut report_rxs, addr, d) = bind_report_sockets(&cfg, stop.clone())?;
            report_addr = addr;
            dispatcher = d;
            let (roce_socks, shared) = bind_roce_sockets(&cfg)?;
            let mut int_rxs = bind_int_sockets(&cfg)?;
            shared_roce = shared;
            roce_addrs = roce_socks.iter().map(|s| s.local_addr()).collect();
            if roce_addrs
                .iter()
                .any(|a| a.port() == report_addr.port() && a.ip() == report_addr.ip())
            {
                return Err(
                    "translator.listen and translator.roce must not be the same address".into(),
                );
            }
            for (w, qs) in roce_socks.into_iter().enumerate() {
                let (qrx, qtx) = qs.split();
                let mut rxs = Vec::new();
                if let Some(r) = report_rxs.get_mut(w).and_then(Option::take) {
                    rxs.push(r);
                }
                if let Some(r) = int_rxs.get_mut(w).and_then(Option::take) {
                    rxs.push(r);
                }
                rxs.push(qrx);
                let mut b = UdpBackend::new(rxs, qtx);
                if let Some((_, ends)) = &dispatcher {
                    b = b.with_waker(ends[w].waker.clone());
                }
                backends.push(Box::new(b));
            }
        }
        if let Some(base) = &t.capture {
            backends = backends
                .into_iter()
                .enumerate()
                .map(|(w, b)| {
                    let path = crate::backends::capture_path(base, w, t.workers);
                    crate::backends::with_capture(b, &path, local_mac, roce_addrs[w])
                })
                .collect::<Result<_, _>>()?;
        }
        let l2_frames = backends.first().is_some_and(|b| b.l2_frames());
        // RDMA_CM collectors: connect every worker's QPs now, all under one CA GUID for this
        // process, so a collector tells our restart (new GUID) from a sibling worker.
        let incarnation = crate::control::cm::incarnation_guid(dta_io::random::random_u32());
        let mut initiators: Vec<Vec<StoreInitiator>> = (0..t.workers).map(|_| Vec::new()).collect();
        for (ci, c) in cfg.collectors.iter().enumerate() {
            let Some(addr) = c.cm else { continue };
            let mac: MacAddr = match &c.mac {
                Some(m) => m
                    .parse()
                    .map_err(|_| format!("collector {:?}: bad MAC {m:?}", c.name))?,
                None => MacAddr::BROADCAST,
            };
            let mut metas: Vec<StoreMeta> = Vec::new();
            for (w, backend) in backends.iter_mut().enumerate() {
                // The worker index in the top byte of our communication IDs lets the BPF
                // program steer CM replies (see dta_io::reuseport); 2^22 connections fit below.
                let seed = (dta_io::random::random_u32() & 0x003F_FFFF) | (w as u32) << 24;
                let mut cm = CmInitiator::new(roce_addrs[w], local_mac, addr, mac, l2_frames, seed)
                    .with_ca_guid(incarnation);
                let n = t.workers as u32;
                let got = connect_blocking(
                    backend.as_mut(),
                    &mut cm,
                    &c.ports,
                    (worker_qpn(ci as u32 * 0x40, w, t.workers), n),
                    Duration::from_secs(c.connect_timeout_secs),
                )
                .map_err(|e| format!("collector {:?} ({addr}), worker {w}: {e}", c.name))?;
                let mut names = Vec::new();
                for (i, (port, meta, b)) in got.into_iter().enumerate() {
                    names.push((port, meta.name.clone()));
                    if w == 0 {
                        metas.push(StoreMeta {
                            qps: Vec::new(),
                            ..meta.clone()
                        });
                    }
                    metas[i].qps.push(QpMeta {
                        qpn: b.remote_qpn.value(),
                        psn: b.start_psn.value(),
                        peer_qpn: b.local_qpn.value(),
                    });
                }
                initiators[w].push((cm, names));
            }
            log::info!(
                "collector {:?}: connected {} store(s) over RDMA_CM for {} worker(s)",
                c.name,
                metas.len(),
                t.workers
            );
            collectors.insert(
                ci.min(collectors.len()),
                (
                    c.name.clone(),
                    CollectorMeta {
                        roce: addr,
                        mac: c.mac.clone().unwrap_or_else(|| "ff:ff:ff:ff:ff:ff".into()),
                        verify_icrc: true,
                        stores: metas,
                    },
                ),
            );
        }
        let cores = if t.pin_cores {
            core_affinity::get_core_ids().unwrap_or_default()
        } else {
            Vec::new()
        };
        let mut threads = Vec::new();
        let mut links: Vec<Option<HandoffLinks>> = HandoffLinks::mesh(t.workers)
            .into_iter()
            .map(Some)
            .collect();
        if shared_roce && cfg.collectors.iter().any(|c| c.cm.is_none()) {
            log::warn!(
                "translator: the {} workers share RoCEv2 address {} (roce_steering); a collector \
                 set up from static metadata must answer every worker there (a real RNIC does; \
                 the software RNIC's static peers answer worker w on port + w: use \
                 roce_steering = \"port-per-worker\" with them)",
                t.workers,
                roce_addrs[0]
            );
        }
        for warning in unserved_report_kinds(&cfg, &collectors) {
            log::warn!("translator: {warning}");
        }
        check_sketch_workers(&collectors, t.workers)?;
        for (cn, m) in &collectors {
            for s in &m.stores {
                if let StoreKind::Append {
                    lists, first_list, ..
                } = s.kind
                {
                    log::info!(
                        "collector {cn:?} store {:?}: Append lists {first_list}..{} (reports \
                         for other lists are dropped as drop_unknown_list)",
                        s.name,
                        first_list as u64 + lists as u64
                    );
                }
            }
        }
        // A cluster member routes by the epoch active now, and follows the epochs after it.
        let board = match &cfg.cluster_map {
            Some(cluster) => {
                let fallback = resolve_routes(&cfg, &collectors)?;
                let p = cluster.active_at(crate::control::cluster::unix_now());
                let rs = cluster_routes(cluster, p, &collectors, fallback.clone())?;
                log::info!(
                    "cluster {:?}: routing by epoch {} of {}",
                    cluster.name,
                    p.number,
                    cluster.epoch
                );
                let board = Arc::new(RouteBoard::new(rs));
                let path = cfg.cluster.clone().unwrap_or_default();
                threads.push(crate::control::cluster::spawn_watcher(
                    path,
                    cluster.clone(),
                    collectors.clone(),
                    fallback,
                    board.clone(),
                    stop.clone(),
                )?);
                Some(board)
            }
            None => None,
        };
        let mut pipelines = Vec::new();
        for (w, &roce) in roce_addrs.iter().enumerate() {
            let (mut pc, targets) = pipeline_for(&cfg, w, roce, &collectors)?;
            pc.l2_frames = l2_frames;
            if shared_roce {
                check_qpn_steering(&targets, w, t.workers)?;
            }
            let mut p = Pipeline::new(pc, &targets).map_err(|e| e.to_string())?;
            if let Some(b) = &board {
                p.set_routes(&b.current().1)
                    .map_err(|e| format!("cluster: {e}"))?;
            }
            if let Some(s) = cfg.int.settings() {
                p.set_int_ingest(s);
            }
            pipelines.push(p);
        }
        let mut dispatch_ends: Vec<Option<DispatchRx>> = Vec::new();
        if let Some((d, ends)) = dispatcher {
            dispatch_ends = ends.into_iter().map(Some).collect();
            // With pinning, the dispatcher takes the first core after the workers' (if any).
            let core = cores.get(t.workers).copied();
            let th = std::thread::Builder::new()
                .name("dta-dispatch".into())
                .spawn(move || {
                    if let Some(c) = core {
                        core_affinity::set_for_current(c);
                    }
                    d.run()
                })
                .map_err(|e| e.to_string())?;
            threads.push(th);
        }
        for (w, (backend, pipeline)) in backends.into_iter().zip(pipelines).enumerate() {
            let worker = Worker {
                index: w,
                pipeline,
                backend,
                report_port: report_addr.port(),
                int_port: cfg.int.port,
                stop: stop.clone(),
                snapshots: snapshots.clone(),
                initiators: std::mem::take(&mut initiators[w]),
                workers: t.workers,
                qpn_slot: RECONNECT_SLOTS,
                dispatched: dispatch_ends.get_mut(w).and_then(Option::take),
                links: links[w].take().expect("one link set per worker"),
                reconnects: 0,
                stats_interval_ns: t.stats_interval_ms * 1_000_000,
                routes: board.as_ref().map(|b| (b.clone(), b.generation())),
            };
            let core = cores.get(w).copied();
            let th = std::thread::Builder::new()
                .name(format!("dta-worker-{w}"))
                .spawn(move || {
                    if let Some(c) = core {
                        core_affinity::set_for_current(c);
                    }
                    worker.run();
                })
                .map_err(|e| e.to_string())?;
            threads.push(th);
        }
        let roce_addr = roce_addrs[0];
        log::info!(
            "translator: reports on {report_addr} ({}), RoCEv2 from {roce_addr} ({}), {} worker(s)",
            if t.report_steering.dispatches(t.workers) {
                "a dispatcher thread"
            } else {
                "a socket per worker"
            },
            if shared_roce {
                "one port, BPF steering by QPN"
            } else {
                "a port per worker"
            },
            t.workers
        );
        let metrics = match t.metrics {
            Some(a) => Some(crate::control::metrics::MetricsServer::spawn_with(
                a,
                snapshots.clone(),
                &t.web,
            )?),
            None => None,
        };
        Ok(Translator {
            metrics,
            report_addr,
            roce_addr,
            snapshots,
            stop,
            threads,
            board,
        })
    }

    /// The collector-cluster epoch the workers are told to route by (they take it up within
    /// a loop iteration), if this translator is a cluster member.
    pub fn cluster_epoch(&self) -> Option<u32> {
        self.board.as_ref().map(|b| b.current().1.epoch)
    }

    /// Per-worker snapshots (at most ~50 ms old).
    pub fn snapshots(&self) -> Vec<WorkerSnapshot> {
        self.snapshots
            .iter()
            .map(|m| m.lock().expect("snapshot lock").clone())
            .collect()
    }

    /// All workers' counters merged.
    pub fn counters(&self) -> TranslatorCounters {
        let mut c = TranslatorCounters::default();
        for s in self.snapshots() {
            c.merge(&s.counters);
        }
        c
    }

    /// Waits until the merged counters satisfy `pred` or `timeout` passes.
    pub fn wait_for(&self, timeout: Duration, pred: impl Fn(&TranslatorCounters) -> bool) -> bool {
        let t0 = Instant::now();
        while t0.elapsed() < timeout {
            if pred(&self.counters()) {
                return true;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        false
    }

    /// Flushes partial batches and caches, then stops the workers.
    pub fn shutdown(mut self) -> Vec<WorkerSnapshot> {
        self.stop_workers();
        self.snapshots()
    }

    fn stop_workers(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

impl Drop for Translator {
    fn drop(&mut self) {
        self.stop_workers();
    }
}

/// `--control-only`: connect every store (RDMA_CM, or the static metadata) on behalf of a
/// hardware translator and return what its table writer needs, without starting workers.
///
/// The QPs stay connected after this returns (no DREQ is sent): the Tofino takes them over.
/// It must send from the same IP and UDP port (`translator.roce`) this process connected from.
pub fn control_only(cfg: &TranslatorConfig) -> Result<serde_json::Value, String> {
    cfg.validate()?;
    let t = &cfg.translator;
    let local_mac: MacAddr = t
        .mac
        .parse()
        .map_err(|_| format!("translator.mac: bad MAC {:?}", t.mac))?;
    let qs = UdpSocket::bind(t.roce, &UdpOptions::default())
        .map_err(|e| format!("cannot bind the RoCEv2 socket {}: {e}", t.roce))?;
    let local = qs.local_addr();
    let (qrx, qtx) = qs.split();
    let mut backend = UdpBackend::new(vec![qrx], qtx);
    let mut out = Vec::new();
    let mut push = |collector: &str, roce: SocketAddrV4, meta: &StoreMeta, q: &QpMeta| {
        let mut v = serde_json::to_value(meta).unwrap_or_default();
        if let Some(o) = v.as_object_mut() {
            o.remove("qps");
            o.insert("store".into(), meta.name.clone().into());
            o.insert("collector".into(), collector.into());
            o.insert("collector_roce".into(), roce.to_string().into());
            o.insert("translator_roce".into(), local.to_string().into());
            o.insert("qpn".into(), q.peer_qpn.into());
            o.insert("remote_qpn".into(), q.qpn.into());
            o.insert("psn".into(), q.psn.into());
        }
        out.push(v);
    };
    for (name, m) in load_collectors(cfg)? {
        for s in &m.stores {
            let q = s
                .qps
                .first()
                .ok_or_else(|| format!("collector {name:?} store {:?}: no QP prepared", s.name))?;
            push(&name, m.roce, s, q);
        }
    }
    for (ci, c) in cfg.collectors.iter().enumerate() {
        let Some(addr) = c.cm else { continue };
        let mac: MacAddr = match &c.mac {
            Some(m) => m
                .parse()
                .map_err(|_| format!("collector {:?}: bad MAC {m:?}", c.name))?,
            None => MacAddr::BROADCAST,
        };
        let mut cm = CmInitiator::new(
            local,
            local_mac,
            addr,
            mac,
            false,
            dta_io::random::random_u32(),
        )
        .with_ca_guid(crate::control::cm::incarnation_guid(
            dta_io::random::random_u32(),
        ));
        let got = connect_blocking(
            &mut backend,
            &mut cm,
            &c.ports,
            (0x100 + ci as u32 * 0x40, 1),
            Duration::from_secs(c.connect_timeout_secs),
        )
        .map_err(|e| format!("collector {:?} ({addr}): {e}", c.name))?;
        for (_, meta, b) in got {
            push(
                &c.name,
                addr,
                &meta,
                &QpMeta {
                    qpn: b.remote_qpn.value(),
                    psn: b.start_psn.value(),
                    peer_qpn: b.local_qpn.value(),
                },
            );
        }
    }
    Ok(serde_json::Value::Array(out))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn qpns_encode_their_worker_and_stay_in_range() {
        for workers in 1..=64 {
            for w in 0..workers {
                for slot in [0, 1, 0x40, RECONNECT_SLOTS, 0xFFFF, u32::MAX] {
                    let q = worker_qpn(slot, w, workers);
                    assert_eq!(dta_io::reuseport::worker_of_qpn(q, workers), w);
                    assert!((0x100..=0xFF_FFFF).contains(&q), "{q:#x}");
                }
            }
        }
        // One worker keeps the QPNs it always had.
        assert_eq!(worker_qpn(0x41, 0, 1), 0x141);
    }

    #[test]
    fn dispatch_keeps_a_reporter_on_one_worker_and_spreads_reporters() {
        let mut per = [0usize; 4];
        for port in 0..4000u16 {
            let src = SocketAddrV4::new(Ipv4Addr::new(10, 0, (port >> 8) as u8, 1), port);
            let w = dispatch_worker(src, 4);
            assert_eq!(w, dispatch_worker(src, 4));
            per[w] += 1;
        }
        assert!(per.iter().all(|&n| n > 800), "{per:?}");
    }

    fn collector(stores: Vec<StoreMeta>) -> Vec<(String, CollectorMeta)> {
        vec![(
            "c".into(),
            CollectorMeta {
                roce: "127.0.0.1:4791".parse().unwrap(),
                mac: "02:00:00:00:00:51".into(),
                verify_icrc: true,
                stores,
            },
        )]
    }

    fn store(name: &str, kind: StoreKind, n: u8) -> StoreMeta {
        StoreMeta {
            name: name.into(),
            addr: 0x1000,
            len: 1 << 20,
            rkey: 1,
            qps: vec![QpMeta {
                qpn: 0x11,
                psn: 0,
                peer_qpn: 0x100,
            }],
            redundancy: dta_proto::meta::Redundancy::new(n),
            kind,
        }
    }

    fn kw() -> StoreKind {
        StoreKind::KeyWrite {
            slots: 1024,
            slot_size: 32,
            hash: dta_proto::hash::HashProfile::Independent,
        }
    }

    fn pc() -> StoreKind {
        StoreKind::Postcard {
            chunks: 1024,
            hops: 5,
            hash: dta_proto::hash::HashProfile::Independent,
        }
    }

    #[test]
    fn sketch_stores_refuse_several_workers() {
        let sk = StoreKind::Sketch {
            sketch_id: 1,
            sketch: dta_proto::sketch::SketchKind::CountMin,
            rows: 4,
            columns: 1024,
            cell_width: 4,
            batch: 16,
            epochs: 2,
            hash: Default::default(),
        };
        let with = collector(vec![store("kw", kw(), 2), store("flows", sk, 1)]);
        assert!(check_sketch_workers(&with, 1).is_ok());
        let e = check_sketch_workers(&with, 2).unwrap_err();
        assert!(e.contains("\"flows\"") && e.contains("workers = 1"), "{e}");
        // Without a sketch store, any number of workers.
        assert!(check_sketch_workers(&collector(vec![store("kw", kw(), 2)]), 4).is_ok());
    }

    #[test]
    fn report_kinds_without_a_store_are_named() {
        let mut cfg = TranslatorConfig::default();
        // Only a Key-Write store: the three other kinds have none.
        let w = unserved_report_kinds(&cfg, &collector(vec![store("kw", kw(), 2)]));
        assert_eq!(w.len(), 3, "{w:?}");
        assert!(
            w.iter().any(|l| l.contains("no keyincrement store")),
            "{w:?}"
        );
        assert!(w.iter().any(|l| l.contains("no postcard store")), "{w:?}");
        assert!(w
            .iter()
            .any(|l| l.contains("Append report") && l.contains("drop_unknown_list")));
        // Every kind served: nothing to say, unless a rule routes a kind nowhere.
        let all = collector(vec![
            store("kw", kw(), 2),
            store(
                "ki",
                StoreKind::KeyIncrement {
                    slots: 1024,
                    hash: dta_proto::hash::HashProfile::Independent,
                },
                2,
            ),
            store("pc", pc(), 1),
            store(
                "ap",
                StoreKind::Append {
                    lists: 4,
                    first_list: 0,
                    capacity: 16,
                    entry_size: 4,
                    batch: 4,
                    format: dta_proto::layout::AppendFormat::Sequenced,
                    list_stride: 1024,
                },
                0,
            ),
        ]);
        assert_eq!(unserved_report_kinds(&cfg, &all), Vec::<String>::new());
        // A kind routed nowhere on purpose is not warned about.
        cfg.routing.keyincrement = "none".into();
        cfg.routing.postcard = "none".into();
        let w = unserved_report_kinds(&cfg, &collector(vec![store("kw", kw(), 2)]));
        assert_eq!(w.len(), 1, "{w:?}");
        assert!(w[0].contains("Append"), "{w:?}");
    }

    #[test]
    fn a_configured_postcard_redundancy_must_match_the_stores() {
        let mut cfg = TranslatorConfig {
            collectors: vec![crate::config::CollectorSection::with_metadata(
                "c",
                "/nonexistent".into(),
            )],
            ..TranslatorConfig::default()
        };
        let local: SocketAddrV4 = "127.0.0.1:4792".parse().unwrap();
        let c = collector(vec![store("pc", pc(), 2)]);
        // Not set: the store's N applies.
        let (pcfg, _) = pipeline_for(&cfg, 0, local, &c).unwrap();
        assert_eq!(
            pcfg.postcard_redundancy, 1,
            "the fallback for stores without N"
        );
        cfg.postcard.redundancy = Some(2);
        assert!(pipeline_for(&cfg, 0, local, &c).is_ok());
        cfg.postcard.redundancy = Some(1);
        let e = pipeline_for(&cfg, 0, local, &c).err().unwrap();
        assert!(
            e.contains("redundancy 2") && e.contains("[postcard] redundancy = 1"),
            "{e}"
        );
    }
}
