//! The pull collector's driver: one or two *collecting* threads, each around a sans-I/O
//! [`Collector`] (the READs, rounds, RDMA_CM and Credit-FC: [`super::collect`]), and one
//! *processing* thread that turns what they pulled into the [`PullStore`] (and hands each
//! snapshot to an optional callback).
//!
//! A collecting thread owns a UDP socket (its RoCEv2 address) and a clock. It feeds its
//! collector the time and the datagrams it receives, flushes the collector's transmit batch,
//! and sleeps until the collector's next deadline or a datagram, whichever comes first. It makes
//! no protocol decision and has no fixed tick; it only chooses how to wait, publishes the
//! statistics every 50 ms and passes the collector's batches to processing.
//!
//! **Hybrid I/O** (ZERO §4): with [`IoMode::Hybrid`], a thread with at least
//! `event_above` READs in flight waits for completions in the kernel (event-driven: each wake
//! finds a burst), and one with fewer busy-polls the socket for up to `spin_us` before it
//! sleeps (low latency for a few hosts); with nothing in flight it sleeps until the next round
//! is due. [`IoMode::Poll`] always spins, [`IoMode::Event`] always sleeps.

use std::net::SocketAddrV4;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender, TrySendError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use dta_io::udp::{UdpOptions, UdpRx, UdpSocket, UdpTx, MAX_BURST};

use super::collect::{Batch, Collector};
pub use super::config::{AgentSpec, IoMode, PullConfig};
pub use super::stats::{LatencyHist, PullCounters, PullStats};
use super::store::{BlockInfo, BlockView, PullStore};

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
            let mut t = CollectDriver {
                m: Collector::new(
                    &cfg,
                    k,
                    local,
                    mine,
                    MAX_BURST * 4,
                    dta_io::random::random_u32(),
                ),
                tx_sock: tx,
                epoch,
                io: cfg.io,
                event_above: cfg.event_above,
                spin: Duration::from_micros(cfg.spin_us),
                event_waits: 0,
                busy_polls: 0,
            };
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

/// How long a collecting thread sleeps at most (ns): it looks at the stop flag and publishes
/// its statistics at least this often.
const MAX_SLEEP_NS: u64 = 100_000_000;

/// How often a collecting thread publishes its statistics (ns).
const PUBLISH_NS: u64 = 50_000_000;

/// A collecting thread: the collector, its socket and its clock.
struct CollectDriver {
    m: Collector,
    tx_sock: UdpTx,
    epoch: Instant,
    io: IoMode,
    event_above: usize,
    spin: Duration,
    /// Waits in the kernel and busy-poll passes (the driver's own counters).
    event_waits: u64,
    busy_polls: u64,
}

impl CollectDriver {
    fn now(&self) -> u64 {
        self.epoch.elapsed().as_nanos() as u64
    }

    fn flush(&mut self) {
        let tx = self.m.transmit();
        if !tx.is_empty() {
            let _ = self.tx_sock.send_batch(tx);
            tx.clear();
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
            while !self.m.poll(now) {
                self.flush();
            }
            self.flush();
            self.wait_and_receive(rx, now);
            let now = self.now();
            while !self.m.handle_timeout(now) {
                self.flush();
            }
            self.flush();
            self.send_batch(to_proc, recycle);
            if now - last_pub >= PUBLISH_NS {
                last_pub = now;
                self.publish(publish, rx, cpu0);
            }
        }
        let now = self.now();
        self.m.close_all(now);
        self.flush();
        self.publish(publish, rx, cpu0);
    }

    fn publish(&mut self, publish: &Mutex<PullStats>, rx: &UdpRx, cpu0: u64) {
        let mut s = self.m.stats();
        s.pull.event_waits += self.event_waits;
        s.pull.busy_polls += self.busy_polls;
        s.collect_cpu_ns = dta_io::process::thread_cpu_ns().saturating_sub(cpu0);
        s.kernel_drops = rx.stats().kernel_drops;
        *publish.lock().expect("pull stats lock") = s;
    }

    fn send_batch(&mut self, to_proc: &SyncSender<Batch>, recycle: &Mutex<Receiver<Batch>>) {
        if !self.m.has_batch() {
            return;
        }
        let fresh = recycle
            .lock()
            .ok()
            .and_then(|r| r.try_recv().ok())
            .unwrap_or_default();
        let Some(b) = self.m.take_batch(fresh) else {
            return;
        };
        match to_proc.try_send(b) {
            Ok(()) => {}
            Err(TrySendError::Full(b)) | Err(TrySendError::Disconnected(b)) => {
                // Processing is behind.
                self.m.return_batch(b);
            }
        }
    }

    fn wait_and_receive(&mut self, rx: &mut UdpRx, now: u64) {
        let in_flight = self.m.in_flight_reads();
        let event = match self.io {
            IoMode::Event => true,
            IoMode::Poll => false,
            IoMode::Hybrid => in_flight == 0 || in_flight >= self.event_above,
        };
        let mut got = self.receive_now(rx);
        if got > 0 {
            return;
        }
        if !event || (self.io == IoMode::Poll) {
            // Busy-poll for a while.
            let start = Instant::now();
            while start.elapsed() < self.spin {
                self.busy_polls += 1;
                got = self.receive_now(rx);
                if got > 0 {
                    return;
                }
                std::hint::spin_loop();
            }
            if self.io == IoMode::Poll {
                return;
            }
        }
        // Sleep until a completion or the collector's next deadline (a due round, a
        // reconnection, a READ or CM timeout).
        let until = self
            .m
            .next_deadline()
            .map_or(now + MAX_SLEEP_NS, |t| t.min(now + MAX_SLEEP_NS));
        let now2 = self.now();
        let wait = Duration::from_nanos(until.saturating_sub(now2)).max(Duration::from_millis(1));
        if until <= now2 && self.m.in_flight_reads() == 0 {
            return;
        }
        self.event_waits += 1;
        let epoch = self.epoch;
        let m = &mut self.m;
        let _ = rx.recv_with(wait, |burst| {
            let now = epoch.elapsed().as_nanos() as u64;
            for d in burst {
                m.handle(d, now);
            }
        });
        // Drain what else is queued.
        self.receive_now(rx);
    }

    fn receive_now(&mut self, rx: &mut UdpRx) -> usize {
        let mut total = 0;
        let epoch = self.epoch;
        let m = &mut self.m;
        for _ in 0..64 {
            let n = rx
                .recv_now(|burst| {
                    let now = epoch.elapsed().as_nanos() as u64;
                    for d in burst {
                        m.handle(d, now);
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
}

#[cfg(test)]
mod tests;
