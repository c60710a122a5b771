//! Connection set-up and repair: the blocking RDMA_CM connect used at start
//! ([`connect_blocking`], also by `--control-only` and the DART emulator), our QPN allocation
//! ([`worker_qpn`]), a worker's reconnection of a broken QP with back-off, the RDMA_CM answers
//! that complete it, and the DREQ/DREP exchange on shutdown. The CM state machine itself is
//! [`crate::control::cm`]'s; this module only drives it over a backend.

use std::time::{Duration, Instant};

use dta_io::backend::Backend;
use dta_proto::batch::{Datagram, TxBatch};
use dta_proto::meta::StoreMeta;
use dta_proto::wire::ib::{Psn, Qpn};

use super::Worker;
use crate::control::cm::{CmEvent, CmInitiator};
use crate::datapath::pipeline::{Pipeline, QpBinding};

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

/// First QPN slot used for reconnections (initial connections use `collector * 0x40 + port`).
pub(super) const RECONNECT_SLOTS: u32 = 0x200;

impl Worker {
    /// Closes every RDMA_CM connection (DREQ) and waits, bounded by the DREQ retries, for the
    /// collectors' DREPs, so they release our QPs instead of keeping them forever.
    pub(super) fn disconnect(&mut self, epoch: Instant, tx: &mut TxBatch) {
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
    pub(super) fn reconnect(
        &mut self,
        now: u64,
        tx: &mut TxBatch,
        state: &mut Vec<(String, u64, u64)>,
    ) {
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
}

/// An RDMA_CM message for `init` arrived in a worker's receive loop: a reconnection that
/// completes rebinds its store's QP in the pipeline and continues its Append lists.
pub(super) fn cm_answer(
    pipeline: &mut Pipeline,
    init: &mut StoreInitiator,
    t: u64,
    d: &Datagram<'_>,
    tx: &mut TxBatch,
) {
    let (c, names) = init;
    c.handle(t, d, tx);
    // Only a reconnection's Ready matters here; a failure shows as the store still broken,
    // and `reconnect` retries it.
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
}
