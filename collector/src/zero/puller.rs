//! The pull collector's threads: one or two *collecting* threads issue the READs, and one
//! *processing* thread turns what they pulled into the [`PullStore`] (and hands each snapshot
//! to an optional callback).
//!
//! A collecting thread owns a UDP socket (its RoCEv2 address), its share of the agents, their
//! QPs ([`ReadQp`]), its RDMA_CM initiator ([`PullCm`]) and its share of the Credit-FC total
//! ([`CreditFc`]). Every `interval` it starts a *round* for each agent: one READ per run of
//! adjacent blocks (at most [`PullConfig::max_read`] bytes), and the 64-byte control header
//! every [`PullConfig::control_every`] rounds; a header whose generation changed is followed by
//! a READ of the whole control area, which replaces the agent's block list. Each block of a
//! completed READ is checked ([`dta_proto::zero::verify_block`]); one caught mid-update or
//! torn is read again on its own (up to [`PullConfig::torn_retries`] times), and is never
//! passed on. A round still running when the next is due is counted as an overrun (the
//! thread, or the agent, cannot keep up with the interval).
//!
//! **Hybrid I/O** (ZERO §4): with [`IoMode::Hybrid`], a thread with at least
//! `event_above` READs in flight waits for completions in the kernel (event-driven: each wake
//! finds a burst), and one with fewer busy-polls the socket for up to `spin_us` before it
//! sleeps (low latency for a few hosts); with nothing in flight it sleeps until the next round
//! is due. [`IoMode::Poll`] always spins, [`IoMode::Event`] always sleeps.

use std::collections::{BinaryHeap, VecDeque};
use std::net::SocketAddrV4;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender, TrySendError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use dta_io::udp::{UdpOptions, UdpRx, UdpSocket, UdpTx, MAX_BURST};
use dta_proto::batch::TxBatch;
use dta_proto::wire::cm::is_gsi;
use dta_proto::wire::ib::{Qpn, Rkey};
use dta_proto::wire::roce::RocePacket;
use dta_proto::zero::{
    decode_control, verify_block, BlockDesc, ControlHeader, ZeroError, HEADER_LEN,
};

use super::cm::{PullCm, PullCmCounters, PullCmEvent};
pub use super::config::{AgentSpec, IoMode, PullConfig};
use super::credit::CreditFc;
use super::reader::{ReadCounters, ReadQp, ReadQpConfig};
use super::store::{BlockInfo, BlockView, PullStore};

dta_proto::define_counters!(
    /// A collecting thread's counters (beyond its QPs' and CM's).
    pub struct PullCounters {
        /// Rounds started.
        rounds,
        /// Rounds completed (every block pulled or given up).
        rounds_done,
        /// Rounds due while the previous one of the agent was still running (skipped).
        rounds_overrun,
        /// Blocks pulled with a consistent snapshot.
        blocks_pulled,
        /// Block snapshots caught mid-update (sequence words differ or odd): read again.
        blocks_in_progress,
        /// Block snapshots whose checksum failed (torn across updates): read again.
        blocks_torn,
        /// Blocks given up in a round after every retry found them mid-update or torn.
        blocks_given_up,
        /// Control areas read.
        control_reads,
        /// Control areas (or headers) refused: bad magic, malformed, misplaced blocks.
        control_invalid,
        /// Blocks whose bytes do not parse at all (entries mismatch): the control area is
        /// read again.
        blocks_invalid,
        /// QPs given up (NAK class C, or timeouts) and reconnected.
        qp_faults,
        /// Waits in the kernel for completions (event-driven).
        event_waits,
        /// Busy-poll passes over the socket.
        busy_polls,
        /// Snapshots dropped because processing fell behind.
        snapshots_dropped,
        /// Datagrams that were not for any of our QPs or the CM.
        rx_unknown,
        /// Datagrams that did not parse as RoCEv2.
        rx_invalid,
    }
);

/// A latency histogram: 8 buckets per power of two from 1 ns (±9 %).
#[derive(Debug, Clone)]
pub struct LatencyHist {
    buckets: Vec<u64>,
    count: u64,
    sum: u64,
    max: u64,
}

impl Default for LatencyHist {
    fn default() -> Self {
        LatencyHist {
            buckets: vec![0; 64 * 8],
            count: 0,
            sum: 0,
            max: 0,
        }
    }
}

impl LatencyHist {
    fn index(ns: u64) -> usize {
        let ns = ns.max(1);
        let lz = 63 - ns.leading_zeros() as usize;
        let frac = if lz >= 3 {
            ((ns >> (lz - 3)) & 7) as usize
        } else {
            ((ns << (3 - lz)) & 7) as usize
        };
        lz * 8 + frac
    }

    fn upper(i: usize) -> u64 {
        let (lz, frac) = (i / 8, (i % 8) as u64);
        let base = 1u64 << lz;
        base + ((base * (frac + 1)) >> 3)
    }

    /// Records one latency (ns).
    pub fn record(&mut self, ns: u64) {
        self.buckets[Self::index(ns)] += 1;
        self.count += 1;
        self.sum = self.sum.saturating_add(ns);
        self.max = self.max.max(ns);
    }

    /// Samples recorded.
    pub fn count(&self) -> u64 {
        self.count
    }

    /// Sum of the samples (ns).
    pub fn sum(&self) -> u64 {
        self.sum
    }

    /// The `q` quantile (0..=1), in ns (a bucket's upper bound; the maximum for q = 1).
    pub fn quantile(&self, q: f64) -> u64 {
        if self.count == 0 {
            return 0;
        }
        if q >= 1.0 {
            return self.max;
        }
        let want = ((self.count as f64 * q).ceil() as u64).max(1);
        let mut seen = 0;
        for (i, &b) in self.buckets.iter().enumerate() {
            seen += b;
            if seen >= want {
                return Self::upper(i).min(self.max);
            }
        }
        self.max
    }

    /// Adds another histogram.
    pub fn merge(&mut self, o: &LatencyHist) {
        for (a, b) in self.buckets.iter_mut().zip(&o.buckets) {
            *a += b;
        }
        self.count += o.count;
        self.sum = self.sum.saturating_add(o.sum);
        self.max = self.max.max(o.max);
    }
}

/// What the collecting threads measured, merged.
#[derive(Debug, Clone, Default)]
pub struct PullStats {
    /// Thread counters.
    pub pull: PullCounters,
    /// READ QP counters (every QP, including closed ones).
    pub reads: ReadCounters,
    /// RDMA_CM counters.
    pub cm: PullCmCounters,
    /// READ latency: request sent to last response received.
    pub read_latency: LatencyHist,
    /// Round latency: first READ of a round sent to its last block pulled.
    pub round_latency: LatencyHist,
    /// Response bytes in flight now (all threads).
    pub in_flight: u64,
    /// The most response bytes ever in flight at once, per thread, summed (each thread's
    /// share is asserted ≤ T / threads at every grant).
    pub in_flight_high_water: u64,
    /// READs that waited for credits.
    pub credit_waits: u64,
    /// Agents connected.
    pub agents_up: u64,
    /// CPU time of the collecting threads (ns).
    pub collect_cpu_ns: u64,
    /// Datagrams the kernel dropped on the collecting sockets (full receive buffers).
    pub kernel_drops: u64,
}

impl PullStats {
    fn merge(&mut self, o: &PullStats) {
        self.pull.merge(&o.pull);
        self.reads.merge(&o.reads);
        self.cm.merge(&o.cm);
        self.read_latency.merge(&o.read_latency);
        self.round_latency.merge(&o.round_latency);
        self.in_flight += o.in_flight;
        self.in_flight_high_water += o.in_flight_high_water;
        self.credit_waits += o.credit_waits;
        self.agents_up += o.agents_up;
        self.collect_cpu_ns += o.collect_cpu_ns;
        self.kernel_drops += o.kernel_drops;
    }
}

/// One block snapshot handed to the processing thread.
#[derive(Debug, Clone, Copy)]
struct Pulled {
    agent: u32,
    block: u32,
    seq: u64,
    /// The agent's sample time (its clock).
    sampled_ns: u64,
    at_ns: u64,
    /// Range in the batch's `values`.
    first: u32,
    count: u32,
}

/// An agent's block list: its generation and blocks.
type Layout = (u32, Vec<BlockInfo>);

/// What a collecting thread sends to processing.
#[derive(Debug, Default)]
struct Batch {
    pulled: Vec<Pulled>,
    values: Vec<u64>,
    /// Agents whose block list is new, or that went down.
    layouts: Vec<(u32, Option<Layout>)>,
}

impl Batch {
    fn is_empty(&self) -> bool {
        self.pulled.is_empty() && self.layouts.is_empty()
    }

    fn clear(&mut self) {
        self.pulled.clear();
        self.values.clear();
        self.layouts.clear();
    }
}

/// A snapshot as the processing callback sees it.
#[derive(Debug, Clone, Copy)]
pub struct SnapshotRef<'a> {
    /// The agent's index in [`PullConfig::agents`].
    pub agent: usize,
    /// The agent's name.
    pub agent_name: &'a str,
    /// The block.
    pub block: &'a BlockInfo,
    /// Its sequence word.
    pub seq: u64,
    /// When the agent took it (ns on the agent's clock; 0: never sampled).
    pub sampled_ns: u64,
    /// When it was pulled (ns since the puller started).
    pub at_ns: u64,
    /// The values.
    pub values: &'a [u64],
}

/// Called by the processing thread for every snapshot.
pub type SnapshotHook = Box<dyn FnMut(&SnapshotRef<'_>) + Send>;

/// What the control plane reads of a running puller (queries, `/metrics`).
#[derive(Clone)]
pub struct PullView {
    published: Vec<Arc<Mutex<PullStats>>>,
    store: Arc<PullStore>,
    credit_bytes: u64,
}

impl PullView {
    /// Counters and latencies so far (published every 50 ms by each collecting thread).
    pub fn stats(&self) -> PullStats {
        let mut s = PullStats::default();
        for p in &self.published {
            s.merge(&p.lock().expect("pull stats lock"));
        }
        s
    }

    /// The newest snapshots.
    pub fn store(&self) -> &Arc<PullStore> {
        &self.store
    }

    /// Credit-FC's T.
    pub fn credit_bytes(&self) -> u64 {
        self.credit_bytes
    }
}

/// The running pull collector.
pub struct Puller {
    stop: Arc<AtomicBool>,
    threads: Vec<std::thread::JoinHandle<()>>,
    view: PullView,
    locals: Vec<SocketAddrV4>,
}

impl Puller {
    /// Binds the collecting sockets and starts the threads.
    pub fn start(cfg: PullConfig, hook: Option<SnapshotHook>) -> Result<Puller, String> {
        cfg.validate()?;
        let store = Arc::new(PullStore::new(
            &cfg.agents
                .iter()
                .map(|a| (a.name.clone(), a.roce))
                .collect::<Vec<_>>(),
        ));
        let stop = Arc::new(AtomicBool::new(false));
        let epoch = Instant::now();
        let (to_proc, from_collect) = sync_channel::<Batch>(64);
        let (recycle_tx, recycle_rx) = sync_channel::<Batch>(64);
        let recycle_rx = Arc::new(Mutex::new(recycle_rx));
        let n = cfg.collect_threads;
        let mut threads = Vec::new();
        let mut published = Vec::new();
        let mut locals = Vec::new();
        for k in 0..n {
            let port = if cfg.local.port() == 0 {
                0
            } else {
                cfg.local.port() + k as u16
            };
            let addr = SocketAddrV4::new(*cfg.local.ip(), port);
            let sock = UdpSocket::bind(
                addr,
                &UdpOptions {
                    rcvbuf: cfg.rcvbuf,
                    ..UdpOptions::default()
                },
            )
            .map_err(|e| format!("pull: binding {addr}: {e}"))?;
            let local = sock.local_addr();
            locals.push(local);
            let (rx, tx) = sock.split();
            let mine: Vec<usize> = (0..cfg.agents.len()).filter(|i| i % n == k).collect();
            let pubs = Arc::new(Mutex::new(PullStats::default()));
            published.push(pubs.clone());
            let mut t = CollectThread::new(&cfg, k, local, mine, tx, epoch);
            let mut rx = rx;
            let (stop, to_proc, recycle) = (stop.clone(), to_proc.clone(), recycle_rx.clone());
            threads.push(
                std::thread::Builder::new()
                    .name(format!("dta-pull-{k}"))
                    .spawn(move || t.run(&mut rx, &stop, &to_proc, &recycle, &pubs))
                    .map_err(|e| e.to_string())?,
            );
        }
        drop(to_proc);
        {
            let store = store.clone();
            let names: Vec<String> = cfg.agents.iter().map(|a| a.name.clone()).collect();
            let mut hook = hook;
            threads.push(
                std::thread::Builder::new()
                    .name("dta-pull-proc".into())
                    .spawn(move || process(&from_collect, &recycle_tx, &store, &names, &mut hook))
                    .map_err(|e| e.to_string())?,
            );
        }
        Ok(Puller {
            stop,
            threads,
            view: PullView {
                published,
                store,
                credit_bytes: cfg.credit_bytes,
            },
            locals,
        })
    }

    /// The collecting threads' RoCEv2 addresses.
    pub fn local_addrs(&self) -> &[SocketAddrV4] {
        &self.locals
    }

    /// What the control plane reads.
    pub fn view(&self) -> PullView {
        self.view.clone()
    }

    /// Credit-FC's T.
    pub fn credit_bytes(&self) -> u64 {
        self.view.credit_bytes
    }

    /// The newest snapshots.
    pub fn store(&self) -> &Arc<PullStore> {
        &self.view.store
    }

    /// Counters and latencies so far (published every 50 ms by each collecting thread).
    pub fn stats(&self) -> PullStats {
        self.view.stats()
    }

    /// Stops the threads (disconnecting every agent) and returns the final statistics.
    pub fn stop(mut self) -> PullStats {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
        self.stats()
    }
}

impl Drop for Puller {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

/// The processing thread: applies batches to the store, calls the hook.
fn process(
    rx: &Receiver<Batch>,
    recycle: &SyncSender<Batch>,
    store: &PullStore,
    names: &[String],
    hook: &mut Option<SnapshotHook>,
) {
    while let Ok(mut b) = rx.recv() {
        store.apply(|agents| {
            for (agent, layout) in b.layouts.drain(..) {
                let a = &mut agents[agent as usize];
                match layout {
                    Some((generation, blocks)) => {
                        a.up = true;
                        a.generation = generation;
                        a.blocks = blocks
                            .into_iter()
                            .map(|info| BlockView {
                                info,
                                last: None,
                                prev: None,
                            })
                            .collect();
                    }
                    None => a.up = false,
                }
            }
            for p in &b.pulled {
                let a = &mut agents[p.agent as usize];
                let Some(bv) = a.blocks.get_mut(p.block as usize) else {
                    continue;
                };
                let vals = &b.values[p.first as usize..(p.first + p.count) as usize];
                if let Some(h) = hook.as_mut() {
                    h(&SnapshotRef {
                        agent: p.agent as usize,
                        agent_name: &names[p.agent as usize],
                        block: &bv.info,
                        seq: p.seq,
                        sampled_ns: p.sampled_ns,
                        at_ns: p.at_ns,
                        values: vals,
                    });
                }
                bv.observe(p.seq, p.sampled_ns, p.at_ns, vals);
            }
        });
        b.clear();
        let _ = recycle.try_send(b);
    }
}

/// What a READ is for (the tag's top byte).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ReadKind {
    Header = 1,
    Control = 2,
    Span = 3,
    Block = 4,
}

fn tag(kind: ReadKind, idx: u32) -> u64 {
    ((kind as u64) << 32) | idx as u64
}

fn untag(t: u64) -> (u64, u32) {
    (t >> 32, t as u32)
}

/// A run of adjacent blocks read together.
#[derive(Debug, Clone)]
struct Span {
    off: u64,
    len: u32,
    /// Block indices, in offset order.
    blocks: Vec<u32>,
}

#[derive(Debug)]
struct Pending {
    kind: ReadKind,
    idx: u32,
    off: u64,
    len: u32,
}

impl Pending {
    /// The 64-byte control header.
    const HEADER: Pending = Pending {
        kind: ReadKind::Header,
        idx: 0,
        off: 0,
        len: HEADER_LEN as u32,
    };

    /// The control area (`len` bytes from the start).
    fn control(len: u32) -> Pending {
        Pending {
            kind: ReadKind::Control,
            idx: 0,
            off: 0,
            len,
        }
    }
}

enum Link {
    /// Not connected; reconnect at this time.
    Down {
        retry_at: u64,
    },
    Connecting,
    Up {
        qp: Box<ReadQp>,
        region_len: u64,
    },
}

struct Agent {
    spec: AgentSpec,
    qpn: Qpn,
    link: Link,
    generation: Option<u32>,
    /// A control area read once, waiting for a second identical read before it is used.
    control_candidate: Vec<u8>,
    blocks: Vec<BlockDesc>,
    spans: Vec<Span>,
    /// Block retries in this round.
    tries: Vec<u32>,
    pending: VecDeque<Pending>,
    in_round: bool,
    round_start: u64,
    rounds: u64,
    next_due: u64,
}

impl Agent {
    /// Queues a READ of every span (the data of one round).
    fn queue_spans(&mut self) {
        for (k, s) in self.spans.iter().enumerate() {
            self.pending.push_back(Pending {
                kind: ReadKind::Span,
                idx: k as u32,
                off: s.off,
                len: s.len,
            });
        }
    }
}

struct CollectThread {
    cfg: PullConfig,
    local: SocketAddrV4,
    agents: Vec<Agent>,
    /// Global agent index of each local one.
    global: Vec<u32>,
    tx_sock: UdpTx,
    tx: TxBatch,
    cm: PullCm,
    credits: CreditFc,
    due: BinaryHeap<std::cmp::Reverse<(u64, usize)>>,
    ready: VecDeque<usize>,
    in_ready: Vec<bool>,
    stats: PullStats,
    /// Counters of QPs already closed.
    closed_reads: ReadCounters,
    batch: Batch,
    epoch: Instant,
    in_flight_reads: usize,
    done: done_buf::Buf,
    /// Earliest reconnection due.
    connect_at: u64,
    /// Next timer pass.
    timers_at: u64,
}

/// Blocks this close are read with one READ (the bytes between them come along).
const SPAN_GAP: u64 = 256;

/// How often READ and CM timeouts are checked (ns).
const TIMER_TICK_NS: u64 = 1_000_000;

/// QPNs of a collecting thread's QPs: `QPN_BASE + 0x10000 * thread + local index`.
const QPN_BASE: u32 = 0x20_0000;

impl CollectThread {
    fn new(
        cfg: &PullConfig,
        k: usize,
        local: SocketAddrV4,
        mine: Vec<usize>,
        tx_sock: UdpTx,
        epoch: Instant,
    ) -> CollectThread {
        let n = mine.len();
        let agents = mine
            .iter()
            .enumerate()
            .map(|(j, &g)| Agent {
                spec: cfg.agents[g].clone(),
                qpn: Qpn::new(QPN_BASE + 0x10_0000 * k as u32 + j as u32),
                link: Link::Down { retry_at: 0 },
                generation: None,
                control_candidate: Vec::new(),
                blocks: Vec::new(),
                spans: Vec::new(),
                tries: Vec::new(),
                pending: VecDeque::new(),
                in_round: false,
                round_start: 0,
                rounds: 0,
                next_due: 0,
            })
            .collect();
        let credits = CreditFc::new(
            cfg.credit_bytes / cfg.collect_threads as u64,
            n,
            cfg.credit_fc,
        );
        CollectThread {
            cfg: cfg.clone(),
            local,
            agents,
            global: mine.iter().map(|&g| g as u32).collect(),
            tx_sock,
            tx: TxBatch::new(MAX_BURST * 4, 512),
            cm: PullCm::new(local, dta_io::random::random_u32()),
            credits,
            due: BinaryHeap::new(),
            ready: VecDeque::new(),
            in_ready: vec![false; n],
            stats: PullStats::default(),
            closed_reads: ReadCounters::default(),
            batch: Batch::default(),
            epoch,
            in_flight_reads: 0,
            done: done_buf::Buf::default(),
            connect_at: 0,
            timers_at: 0,
        }
    }

    fn now(&self) -> u64 {
        self.epoch.elapsed().as_nanos() as u64
    }

    fn flush(&mut self) {
        if !self.tx.is_empty() {
            let _ = self.tx_sock.send_batch(&self.tx);
            self.tx.clear();
        }
    }

    fn run(
        &mut self,
        rx: &mut UdpRx,
        stop: &AtomicBool,
        to_proc: &SyncSender<Batch>,
        recycle: &Mutex<Receiver<Batch>>,
        publish: &Mutex<PullStats>,
    ) {
        let cpu0 = dta_io::process::thread_cpu_ns();
        let mut last_pub = 0u64;
        while !stop.load(Ordering::Relaxed) {
            let now = self.now();
            self.connect_due(now);
            self.start_due_rounds(now);
            self.issue(now);
            self.flush();
            self.wait_and_receive(rx, now);
            let now = self.now();
            self.poll_timers(now);
            self.flush();
            if !self.batch.is_empty() {
                self.send_batch(to_proc, recycle);
            }
            if now - last_pub >= 50_000_000 {
                last_pub = now;
                self.publish(publish, rx, cpu0);
            }
        }
        let mut tx = std::mem::replace(&mut self.tx, TxBatch::new(1, 64));
        let now = self.now();
        for i in 0..self.agents.len() {
            self.cm.disconnect(i, now, &mut tx);
        }
        self.tx = tx;
        self.flush();
        self.publish(publish, rx, cpu0);
    }

    fn publish(&mut self, publish: &Mutex<PullStats>, rx: &UdpRx, cpu0: u64) {
        let mut reads = self.closed_reads;
        let mut up = 0;
        for a in &self.agents {
            if let Link::Up { qp, .. } = &a.link {
                reads.merge(&qp.counters);
                up += 1;
            }
        }
        let mut p = publish.lock().expect("pull stats lock");
        p.pull = self.stats.pull;
        p.reads = reads;
        p.cm = self.cm.counters;
        p.read_latency = self.stats.read_latency.clone();
        p.round_latency = self.stats.round_latency.clone();
        p.in_flight = self.credits.in_flight();
        p.in_flight_high_water = self.credits.high_water();
        p.credit_waits = self.credits.waits;
        p.agents_up = up;
        p.collect_cpu_ns = dta_io::process::thread_cpu_ns().saturating_sub(cpu0);
        p.kernel_drops = rx.stats().kernel_drops;
    }

    fn send_batch(&mut self, to_proc: &SyncSender<Batch>, recycle: &Mutex<Receiver<Batch>>) {
        let fresh = recycle
            .lock()
            .ok()
            .and_then(|r| r.try_recv().ok())
            .unwrap_or_default();
        let b = std::mem::replace(&mut self.batch, fresh);
        match to_proc.try_send(b) {
            Ok(()) => {}
            Err(TrySendError::Full(b)) | Err(TrySendError::Disconnected(b)) => {
                // Processing is behind: keep the layouts (rare, needed), drop the snapshots.
                self.stats.pull.snapshots_dropped += b.pulled.len() as u64;
                self.batch.layouts.extend(b.layouts);
            }
        }
    }

    /// Connects agents whose reconnection is due (a pass over the agents only when one is).
    fn connect_due(&mut self, now: u64) {
        if now < self.connect_at {
            return;
        }
        self.connect_at = u64::MAX;
        for i in 0..self.agents.len() {
            if let Link::Down { retry_at } = self.agents[i].link {
                if now < retry_at {
                    self.connect_at = self.connect_at.min(retry_at);
                } else {
                    let a = &mut self.agents[i];
                    a.link = Link::Connecting;
                    self.cm
                        .connect(i, a.spec.roce, a.spec.cm_port, a.qpn, now, &mut self.tx);
                    if self.tx.is_full() {
                        self.flush();
                    }
                }
            }
        }
    }

    fn start_due_rounds(&mut self, now: u64) {
        while let Some(&std::cmp::Reverse((t, i))) = self.due.peek() {
            if t > now {
                break;
            }
            self.due.pop();
            let interval = self.cfg.interval.as_nanos() as u64;
            let a = &mut self.agents[i];
            if !matches!(a.link, Link::Up { .. }) || a.next_due != t {
                continue;
            }
            // The next round is due one interval after this one was, whatever happens.
            a.next_due = t + interval;
            let next = a.next_due.max(now);
            a.next_due = next;
            self.due.push(std::cmp::Reverse((next, i)));
            if a.in_round {
                self.stats.pull.rounds_overrun += 1;
                continue;
            }
            self.stats.pull.rounds += 1;
            a.in_round = true;
            a.round_start = now;
            a.rounds += 1;
            a.tries.iter_mut().for_each(|t| *t = 0);
            if a.generation.is_none() || a.rounds % self.cfg.control_every as u64 == 0 {
                a.pending.push_back(Pending::HEADER);
            }
            if a.generation.is_some() {
                a.queue_spans();
            }
            self.mark_ready(i);
        }
    }

    fn mark_ready(&mut self, i: usize) {
        if !self.in_ready[i] {
            self.in_ready[i] = true;
            self.ready.push_back(i);
        }
    }

    /// Issues pending READs, agents in turn, as credits and QPs allow. An agent that must
    /// wait for one of its own READs (its QP's READs in flight, or its share of T) leaves the
    /// ready queue until a READ of its completes; when the total T is used up, every agent
    /// waits, the first in line keeping its place. Each call costs the READs it issues.
    fn issue(&mut self, now: u64) {
        while let Some(&i) = self.ready.front() {
            let mut total_full = false;
            {
                let a = &mut self.agents[i];
                let Link::Up { qp, .. } = &mut a.link else {
                    a.pending.clear();
                    self.in_ready[i] = false;
                    self.ready.pop_front();
                    continue;
                };
                while let Some(p) = a.pending.front() {
                    if !qp.has_room() {
                        break;
                    }
                    if !self.credits.take(i, p.len as u64) {
                        total_full = !self.credits.total_has_room(p.len as u64);
                        break;
                    }
                    if self.tx.is_full() {
                        let _ = self.tx_sock.send_batch(&self.tx);
                        self.tx.clear();
                    }
                    if !qp.issue(tag(p.kind, p.idx), p.off, p.len, now, &mut self.tx) {
                        self.credits.give_back(i, p.len as u64);
                        break;
                    }
                    self.in_flight_reads += 1;
                    a.pending.pop_front();
                }
            }
            if total_full {
                break;
            }
            self.ready.pop_front();
            self.in_ready[i] = false;
        }
    }

    fn wait_and_receive(&mut self, rx: &mut UdpRx, now: u64) {
        let spin = Duration::from_micros(self.cfg.spin_us);
        let event = match self.cfg.io {
            IoMode::Event => true,
            IoMode::Poll => false,
            IoMode::Hybrid => {
                self.in_flight_reads == 0 || self.in_flight_reads >= self.cfg.event_above
            }
        };
        let mut got = self.receive_now(rx);
        if got > 0 {
            return;
        }
        if !event || (self.cfg.io == IoMode::Poll) {
            // Busy-poll for a while.
            let start = Instant::now();
            while start.elapsed() < spin {
                self.stats.pull.busy_polls += 1;
                got = self.receive_now(rx);
                if got > 0 {
                    return;
                }
                std::hint::spin_loop();
            }
            if self.cfg.io == IoMode::Poll {
                return;
            }
        }
        // Sleep until a completion, a due round, a reconnection or the timer tick.
        let mut until = (now + 100_000_000).min(self.connect_at);
        if let Some(&std::cmp::Reverse((t, _))) = self.due.peek() {
            until = until.min(t);
        }
        if self.in_flight_reads > 0 || self.cm.connecting() > 0 {
            until = until.min(self.timers_at);
        }
        let now2 = self.now();
        let wait = Duration::from_nanos(until.saturating_sub(now2)).max(Duration::from_millis(1));
        if until <= now2 && self.in_flight_reads == 0 {
            return;
        }
        self.stats.pull.event_waits += 1;
        let _ = rx.recv_with(wait, |burst| {
            let now = self.now();
            for d in burst {
                self.on_datagram(d, now);
            }
        });
        // Drain what else is queued.
        self.receive_now(rx);
    }

    fn receive_now(&mut self, rx: &mut UdpRx) -> usize {
        let mut total = 0;
        for _ in 0..64 {
            let n = rx
                .recv_now(|burst| {
                    let now = self.now();
                    for d in burst {
                        self.on_datagram(d, now);
                    }
                })
                .unwrap_or(0);
            total += n;
            if n < MAX_BURST {
                break;
            }
        }
        total
    }

    fn on_datagram(&mut self, d: &dta_proto::batch::Datagram<'_>, now: u64) {
        if is_gsi(d.payload) {
            self.cm.handle(d, &mut self.tx);
            while let Some(ev) = self.cm.poll_event() {
                self.on_cm(ev, now);
            }
            return;
        }
        let Ok(pkt) = RocePacket::parse(d.payload) else {
            self.stats.pull.rx_invalid += 1;
            return;
        };
        let q = pkt.bth.dest_qp.value();
        let k = (q.wrapping_sub(QPN_BASE) & 0xF_FFFF) as usize;
        let Some(a) = self.agents.get_mut(k) else {
            self.stats.pull.rx_unknown += 1;
            return;
        };
        if a.qpn.value() != q || d.src.ip() != a.spec.roce.ip() {
            self.stats.pull.rx_unknown += 1;
            return;
        }
        let Link::Up { qp, .. } = &mut a.link else {
            self.stats.pull.rx_unknown += 1;
            return;
        };
        // Completed READs are handled once the QP is no longer borrowed: copied out into a
        // buffer kept for reuse.
        let mut done = std::mem::take(&mut self.done);
        done.clear();
        qp.handle(&pkt, now, &mut self.tx, &mut |t, issued, bytes| {
            done.push(t, issued, bytes);
        });
        for (t, issued, range) in done.items() {
            self.completed(k, *t, *issued, &done.data()[range.clone()], now);
        }
        self.done = done;
    }

    fn on_cm(&mut self, ev: PullCmEvent, now: u64) {
        match ev {
            PullCmEvent::Up {
                agent,
                local_qpn,
                peer_qpn,
                start_psn,
                max_reads,
                record,
            } => {
                let a = &mut self.agents[agent];
                let qp = ReadQp::new(ReadQpConfig {
                    local: self.local,
                    peer: a.spec.roce,
                    local_qpn,
                    peer_qpn,
                    start_psn,
                    rkey: Rkey(record.rkey),
                    base: record.addr,
                    // The agent's: its responses are cut at its path MTU.
                    pmtu: record.pmtu,
                    max_outstanding: max_reads as usize,
                    timeout_ns: self.cfg.read_timeout.as_nanos() as u64,
                    retries: self.cfg.read_retries,
                });
                log::info!(
                    "pull: agent {:?} at {} connected (region {} bytes, {} READs in flight)",
                    a.spec.name,
                    a.spec.roce,
                    record.len,
                    max_reads
                );
                a.link = Link::Up {
                    qp: Box::new(qp),
                    region_len: record.len,
                };
                a.generation = None;
                a.in_round = false;
                a.pending.clear();
                a.next_due = now;
                self.due.push(std::cmp::Reverse((now, agent)));
                let up = self
                    .agents
                    .iter()
                    .filter(|a| matches!(a.link, Link::Up { .. }))
                    .count();
                self.credits.set_active(up);
            }
            PullCmEvent::Down { agent, reason } => {
                log::warn!(
                    "pull: agent {:?} at {}: connection failed or closed (REJ reason {:?})",
                    self.agents[agent].spec.name,
                    self.agents[agent].spec.roce,
                    reason
                );
                self.drop_link(agent, now);
            }
        }
    }

    /// Forgets an agent's QP (returning its credits) and schedules a reconnection.
    fn drop_link(&mut self, i: usize, now: u64) {
        let retry_at = now + self.cfg.reconnect.as_nanos() as u64;
        self.connect_at = self.connect_at.min(retry_at);
        let old = std::mem::replace(&mut self.agents[i].link, Link::Down { retry_at });
        if let Link::Up { mut qp, .. } = old {
            for (_, len) in qp.in_flight() {
                self.credits.give_back(i, len as u64);
                self.in_flight_reads -= 1;
            }
            qp.clear();
            self.closed_reads.merge(&qp.counters);
        }
        let a = &mut self.agents[i];
        a.pending.clear();
        a.in_round = false;
        a.generation = None;
        self.batch.layouts.push((self.global[i], None));
        let up = self
            .agents
            .iter()
            .filter(|a| matches!(a.link, Link::Up { .. }))
            .count();
        self.credits.set_active(up);
    }

    /// READ and CM timeouts, checked every [`TIMER_TICK_NS`] (a pass over the agents; a
    /// READ's timeout is far longer than the tick).
    fn poll_timers(&mut self, now: u64) {
        if now < self.timers_at {
            return;
        }
        self.timers_at = now + TIMER_TICK_NS;
        self.cm.poll(now, &mut self.tx);
        while let Some(ev) = self.cm.poll_event() {
            self.on_cm(ev, now);
        }
        if self.in_flight_reads == 0 {
            return;
        }
        for i in 0..self.agents.len() {
            let fault = match &mut self.agents[i].link {
                Link::Up { qp, .. } => {
                    qp.poll(now, &mut self.tx);
                    if self.tx.is_full() {
                        let _ = self.tx_sock.send_batch(&self.tx);
                        self.tx.clear();
                    }
                    qp.fault()
                }
                _ => None,
            };
            if let Some(f) = fault {
                self.stats.pull.qp_faults += 1;
                log::warn!(
                    "pull: agent {:?}: QP failed ({f:?}); reconnecting",
                    self.agents[i].spec.name
                );
                self.cm.disconnect(i, now, &mut self.tx);
                self.drop_link(i, now);
            }
        }
    }

    /// A READ of agent `i` completed (the agent may issue again: it rejoins the ready queue
    /// if it has READs waiting).
    fn completed(&mut self, i: usize, t: u64, issued: u64, bytes: &[u8], now: u64) {
        if !self.agents[i].pending.is_empty() {
            self.mark_ready(i);
        }
        self.in_flight_reads -= 1;
        self.credits.give_back(i, bytes.len() as u64);
        self.stats.read_latency.record(now.saturating_sub(issued));
        let (kind, idx) = untag(t);
        match kind {
            k if k == ReadKind::Header as u64 => self.on_header(i, bytes),
            k if k == ReadKind::Control as u64 => self.on_control(i, bytes),
            k if k == ReadKind::Span as u64 => {
                // By index, not a copy of the span: nothing allocates per READ.
                for j in 0.. {
                    let a = &self.agents[i];
                    let Some(s) = a.spans.get(idx as usize) else {
                        break;
                    };
                    let Some(&b) = s.blocks.get(j) else {
                        break;
                    };
                    let at = (a.blocks[b as usize].offset - s.off) as usize;
                    self.on_block(i, b, &bytes[at..], now);
                }
            }
            k if k == ReadKind::Block as u64 => self.on_block(i, idx, bytes, now),
            _ => {}
        }
        self.finish_round_if_done(i, now);
    }

    fn on_header(&mut self, i: usize, bytes: &[u8]) {
        let credit_total = self.credits.total();
        let a = &mut self.agents[i];
        let region_len = match &a.link {
            Link::Up { region_len, .. } => *region_len,
            _ => return,
        };
        match ControlHeader::decode(bytes) {
            Ok(h) if h.region_len <= region_len && h.control_len() as u64 <= credit_total => {
                if a.generation != Some(h.generation) {
                    // The block list changed (or is not known yet): read it before the data.
                    a.pending.retain(|p| p.kind != ReadKind::Span);
                    a.pending
                        .push_front(Pending::control(h.control_len() as u32));
                    self.mark_ready(i);
                }
            }
            _ => {
                self.stats.pull.control_invalid += 1;
                a.generation = None;
            }
        }
    }

    fn on_control(&mut self, i: usize, bytes: &[u8]) {
        self.stats.pull.control_reads += 1;
        let max_read = self.cfg.max_read;
        let a = &mut self.agents[i];
        let region_len = match &a.link {
            Link::Up { region_len, .. } => *region_len,
            _ => return,
        };
        // A READ racing the agent's registration of a block can return a descriptor half
        // written (nothing in the layout can tell): a control area is used only once two
        // consecutive reads of it agree.
        if a.control_candidate != bytes {
            a.control_candidate.clear();
            a.control_candidate.extend_from_slice(bytes);
            a.pending.push_front(Pending::control(bytes.len() as u32));
            self.mark_ready(i);
            return;
        }
        a.control_candidate.clear();
        let (h, blocks) = match decode_control(bytes) {
            Ok(x) if x.0.region_len <= region_len => x,
            _ => {
                self.stats.pull.control_invalid += 1;
                a.generation = None;
                return;
            }
        };
        // Spans: blocks in offset order, neighbours (at most SPAN_GAP bytes apart) together up
        // to max_read.
        let mut order: Vec<u32> = (0..blocks.len() as u32).collect();
        order.sort_by_key(|&b| blocks[b as usize].offset);
        let mut spans: Vec<Span> = Vec::new();
        for b in order {
            let d = &blocks[b as usize];
            let len = d.len() as u32;
            match spans.last_mut() {
                Some(s)
                    if d.offset >= s.off + s.len as u64
                        && d.offset - (s.off + s.len as u64) <= SPAN_GAP
                        && d.offset + len as u64 - s.off <= max_read as u64 =>
                {
                    s.len = (d.offset + len as u64 - s.off) as u32;
                    s.blocks.push(b);
                }
                _ => spans.push(Span {
                    off: d.offset,
                    len,
                    blocks: vec![b],
                }),
            }
        }
        a.generation = Some(h.generation);
        a.tries = vec![0; blocks.len()];
        let infos: Vec<BlockInfo> = blocks
            .iter()
            .map(|d| BlockInfo {
                name: d.name.clone(),
                kind: d.kind,
                entries: d.entries,
            })
            .collect();
        a.blocks = blocks;
        a.spans = spans;
        // This round reads the data now.
        a.queue_spans();
        self.batch
            .layouts
            .push((self.global[i], Some((h.generation, infos))));
        self.mark_ready(i);
    }

    fn on_block(&mut self, i: usize, b: u32, bytes: &[u8], now: u64) {
        let a = &mut self.agents[i];
        let Some(d) = a.blocks.get(b as usize) else {
            return;
        };
        match verify_block(bytes, d.entries) {
            Ok(s) => {
                self.stats.pull.blocks_pulled += 1;
                let first = self.batch.values.len() as u32;
                self.batch.values.extend(s.iter());
                self.batch.pulled.push(Pulled {
                    agent: self.global[i],
                    block: b,
                    seq: s.seq,
                    sampled_ns: s.sampled_ns,
                    at_ns: now,
                    first,
                    count: d.entries,
                });
            }
            Err(e @ (ZeroError::InProgress | ZeroError::Torn)) => {
                if e == ZeroError::Torn {
                    self.stats.pull.blocks_torn += 1;
                } else {
                    self.stats.pull.blocks_in_progress += 1;
                }
                a.tries[b as usize] += 1;
                if a.tries[b as usize] > self.cfg.torn_retries {
                    self.stats.pull.blocks_given_up += 1;
                    return;
                }
                let (off, len) = (d.offset, d.len() as u32);
                a.pending.push_back(Pending {
                    kind: ReadKind::Block,
                    idx: b,
                    off,
                    len,
                });
                self.mark_ready(i);
            }
            Err(_) => {
                // The bytes are not this block at all: the layout changed under us.
                self.stats.pull.blocks_invalid += 1;
                a.generation = None;
                a.pending.retain(|p| p.kind == ReadKind::Header);
                if !a.pending.iter().any(|p| p.kind == ReadKind::Header) {
                    a.pending.push_back(Pending::HEADER);
                }
                self.mark_ready(i);
            }
        }
    }

    fn finish_round_if_done(&mut self, i: usize, now: u64) {
        let a = &mut self.agents[i];
        let idle = match &a.link {
            Link::Up { qp, .. } => qp.outstanding() == 0,
            _ => true,
        };
        if a.in_round && a.pending.is_empty() && idle {
            a.in_round = false;
            self.stats.pull.rounds_done += 1;
            self.stats
                .round_latency
                .record(now.saturating_sub(a.round_start));
        }
    }
}

mod done_buf {
    /// Completed READs of one packet (at most one in practice), copied out of the QP so it
    /// can be borrowed again; the buffer is reused.
    #[derive(Default)]
    pub struct Buf {
        items: Vec<(u64, u64, std::ops::Range<usize>)>,
        data: Vec<u8>,
    }

    impl Buf {
        pub fn push(&mut self, t: u64, issued: u64, bytes: &[u8]) {
            let at = self.data.len();
            self.data.extend_from_slice(bytes);
            self.items.push((t, issued, at..at + bytes.len()));
        }

        pub fn clear(&mut self) {
            self.items.clear();
            self.data.clear();
        }

        pub fn items(&self) -> &[(u64, u64, std::ops::Range<usize>)] {
            &self.items
        }

        pub fn data(&self) -> &[u8] {
            &self.data
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::Region;
    use crate::rnic::cm::{CmResponder, Service};
    use crate::rnic::responder::{Access, DeviceConfig, Responder};
    use dta_proto::wire::ethernet::MacAddr;
    use dta_proto::zero::{block_len, encode_block, MetricKind, RegionRecord};
    use std::net::Ipv4Addr;

    /// Value `i` of block `b` after update `seq`.
    fn value(b: usize, seq: u64, i: usize) -> u64 {
        seq.wrapping_mul(i as u64 + 1) ^ ((b as u64) << 56)
    }

    /// A minimal agent: a region with `sizes` blocks, a writer thread updating them as fast as
    /// it can, and a software RNIC answering READs.
    fn agent(
        addr: SocketAddrV4,
        sizes: &[u32],
        stop: Arc<AtomicBool>,
    ) -> Vec<std::thread::JoinHandle<()>> {
        let mut descs = Vec::new();
        let mut off = (HEADER_LEN + 64 * sizes.len()) as u64;
        off = off.next_multiple_of(8);
        for (b, &n) in sizes.iter().enumerate() {
            descs.push(BlockDesc {
                name: format!("b{b}"),
                offset: off,
                entries: n,
                kind: MetricKind::Counter,
                interval_ms: 1,
            });
            off += block_len(n) as u64;
        }
        let region = Arc::new(Region::anonymous(off as usize, false).unwrap());
        let h = ControlHeader {
            blocks: descs.len() as u16,
            generation: 1,
            region_len: off,
        };
        region.write(0, &h.encode()).unwrap();
        for (k, d) in descs.iter().enumerate() {
            region
                .write((HEADER_LEN + 64 * k) as u64, &d.encode().unwrap())
                .unwrap();
        }
        let writer = {
            let (region, descs, stop) = (region.clone(), descs.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut seq = 0u64;
                let mut buf = Vec::new();
                let mut vals = Vec::new();
                while !stop.load(Ordering::Relaxed) {
                    seq += 2;
                    for (b, d) in descs.iter().enumerate() {
                        vals.clear();
                        vals.extend((0..d.entries as usize).map(|i| value(b, seq, i)));
                        buf.resize(block_len(d.entries), 0);
                        encode_block(seq, seq * 1_000, &vals, &mut buf);
                        region.store_u64_release(d.offset, seq - 1).unwrap();
                        region.write(d.offset + 8, &buf[8..]).unwrap();
                        region.store_u64_release(d.offset, seq).unwrap();
                    }
                }
            })
        };
        let mut rnic = Responder::new(DeviceConfig {
            local: addr,
            local_mac: MacAddr::ZERO,
            pmtu: 1024,
            l2_frames: false,
        });
        let read_only = Access {
            remote_read: true,
            remote_write: false,
            remote_atomic: false,
        };
        let rkey = rnic.register(region.clone(), read_only);
        let record = RegionRecord {
            addr: region.addr(),
            len: region.len() as u64,
            rkey: rkey.0,
            verify_icrc: true,
            pmtu: 1024,
        };
        let mut cm = CmResponder::new(
            addr,
            MacAddr::ZERO,
            vec![Service {
                port: 7700,
                name: "agent".into(),
                record: record.encode(),
                record_in_rep: true,
                heads: None,
                allow: crate::allow::PeerAllowlist::any(),
            }],
            true,
        );
        let sock = UdpSocket::bind(addr, &UdpOptions::default()).unwrap();
        let server = std::thread::spawn(move || {
            let (mut rx, mut txs) = sock.split();
            let mut tx = TxBatch::new(256, 2048);
            let t0 = Instant::now();
            while !stop.load(Ordering::Relaxed) {
                let now = t0.elapsed().as_nanos() as u64;
                let _ = rx.recv_with(Duration::from_millis(5), |burst| {
                    for d in burst {
                        if is_gsi(d.payload) {
                            cm.handle(now, d, &mut rnic, &mut tx);
                        } else {
                            rnic.handle(d, &mut tx);
                        }
                    }
                });
                cm.poll(now, &mut rnic, &mut tx);
                loop {
                    rnic.poll(now, &mut tx);
                    let _ = txs.send_batch(&tx);
                    tx.clear();
                    if !rnic.has_pending_output() {
                        break;
                    }
                }
            }
        });
        vec![writer, server]
    }

    #[test]
    fn every_snapshot_pulled_is_one_the_agent_wrote_and_credits_hold() {
        let stop = Arc::new(AtomicBool::new(false));
        let mut threads = Vec::new();
        let mut agents = Vec::new();
        for k in 0..3u8 {
            let addr = SocketAddrV4::new(Ipv4Addr::new(127, 0, 41, 10 + k), 4791);
            threads.extend(agent(addr, &[4, 100, 1000], stop.clone()));
            agents.push(AgentSpec {
                name: format!("h{k}"),
                roce: addr,
                cm_port: 7700,
            });
        }
        let mut cfg = PullConfig::new(
            SocketAddrV4::new(Ipv4Addr::new(127, 0, 41, 1), 0),
            agents,
            Duration::from_millis(5),
        );
        cfg.max_read = 4096;
        cfg.credit_bytes = 128 << 10;
        let bad = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let seen = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let hook: SnapshotHook = {
            let (bad, seen) = (bad.clone(), seen.clone());
            Box::new(move |s: &SnapshotRef<'_>| {
                seen.fetch_add(1, Ordering::Relaxed);
                let b: usize = s.block.name[1..].parse().unwrap();
                if s.values.len() != s.block.entries as usize
                    || s.values
                        .iter()
                        .enumerate()
                        .any(|(i, &v)| v != value(b, s.seq, i))
                {
                    bad.fetch_add(1, Ordering::Relaxed);
                }
            })
        };
        let p = Puller::start(cfg, Some(hook)).unwrap();
        std::thread::sleep(Duration::from_millis(1500));
        let q = p.store().query_json(Some("h1"), Some("b1"));
        let st = p.stop();
        stop.store(true, Ordering::Relaxed);
        for t in threads {
            t.join().unwrap();
        }
        eprintln!("{:?}\n{:?}\n{:?}", st.pull, st.reads, st.cm);
        assert_eq!(st.agents_up, 3);
        assert!(seen.load(Ordering::Relaxed) > 100, "{seen:?}");
        assert_eq!(
            bad.load(Ordering::Relaxed),
            0,
            "a pulled value differs from the agent's"
        );
        assert!(st.in_flight_high_water <= 128 << 10);
        assert!(st.pull.rounds_done > 50);
        assert_eq!(q.unwrap()["blocks"][0]["entries"], 100);
    }
}
