//! One worker thread ([`Worker::run`]): the thin driver around a [`Pipeline`]. It owns the
//! worker's backend, sleeps until the pipeline's next deadline or a datagram, hands each burst
//! to the pipeline through the [`PortDemux`] (reports, INT reports, RoCEv2 answers, RDMA_CM
//! messages to their initiator), feeds it what the dispatcher and the other workers handed
//! over, sends its transmit batch, and publishes a [`WorkerSnapshot`] for the control plane. It
//! makes no protocol decision; on stop it flushes, asks for confirmation and disconnects.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use dta_io::backend::Backend;
use dta_proto::batch::TxBatch;

use super::connect::{cm_answer, StoreInitiator};
use super::dispatch::{DispatchRx, HandoffLinks};
use crate::control::cluster::RouteBoard;
use crate::datapath::demux::{Inbound, PortDemux};
use crate::datapath::pipeline::Pipeline;
use crate::datapath::qp::QpStats;
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
    /// Frames sent or queued that the collectors have not confirmed yet, on QPs that are not
    /// broken (an ACK confirms a frame only once the collector executed it).
    pub unconfirmed: u64,
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

impl WorkerSnapshot {
    /// The counters of every worker in `snaps`, summed: the translator's totals.
    pub fn total(snaps: &[WorkerSnapshot]) -> TranslatorCounters {
        let mut c = TranslatorCounters::default();
        for s in snaps {
            c.merge(&s.counters);
        }
        c
    }

    /// True if no worker in `snaps` has a frame the collectors have not confirmed.
    pub fn all_confirmed(snaps: &[WorkerSnapshot]) -> bool {
        snaps.iter().all(|s| s.unconfirmed == 0)
    }
}

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
    /// Workers in the translator (QPN allocation: see [`super::worker_qpn`]).
    pub workers: usize,
    /// Next QPN slot to use for a reconnection (see [`super::worker_qpn`]).
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
        let demux = PortDemux::new(self.report_port, self.int_port);
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
                // Reports and responses go to the pipeline in runs (one call per run of
                // datagrams); RDMA_CM messages (QP 1) to their initiator.
                let mut runs = demux.runs(burst);
                while let Some((kind, run)) =
                    runs.next_run(|d| initiators.iter().position(|(c, _)| c.wants(d)))
                {
                    match kind {
                        Inbound::Reports => pipeline.handle_reports(t, run, txr),
                        Inbound::IntReports => pipeline.handle_int_reports(t, run, txr),
                        Inbound::Responses => pipeline.handle_responses(t, run, txr),
                        Inbound::Cm(ci) => {
                            cm_answer(pipeline, &mut initiators[ci], t, &run[0], txr)
                        }
                    }
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

    /// Receives for up to `wait` and hands every RoCEv2 response to the pipeline (shutdown
    /// flushing, where new reports are no longer taken), then polls it.
    fn pump_responses(&mut self, epoch: Instant, wait: Duration, tx: &mut TxBatch) {
        let pipeline = &mut self.pipeline;
        let demux = PortDemux::new(self.report_port, self.int_port);
        let _ = self.backend.recv_with(wait, &mut |burst| {
            let now = epoch.elapsed().as_nanos() as u64;
            // Runs of responses go over in one call each (reports are no longer taken).
            let mut runs = demux.runs(burst);
            while let Some((kind, run)) = runs.next_run(|_| None) {
                if kind == Inbound::Responses {
                    pipeline.handle_responses(now, run, tx);
                }
            }
        });
        let now = epoch.elapsed().as_nanos() as u64;
        self.pipeline.poll(now, tx);
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
        s.unconfirmed = self.pipeline.unconfirmed_frames();
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
