//! RDMA_CM, initiator side: how the translator connects a QP to each collector store.
//!
//! The CM exchange itself (REQ/REP/RTU, DREQ/DREP, their retransmissions) is
//! [`dta_proto::rdma_cm::Initiator`], the one initiator the pull collector uses too. This
//! module owns what a store's connection carries after the RTU, and may not touch the CM
//! exchange or the data path:
//!
//! ```text
//!   connect(port) ─▶ REQ (our QPN, starting PSN S, service = port)      retransmitted
//!   REP ─▶ RTU; remember the collector's QPN and its send PSN
//!   RC SEND (64-byte metadata record) at the collector's PSN ─▶ RC ACK with that SEND's PSN
//!   [sequenced Append, record flag bit 2: list-head SENDs at the following PSNs, each ACKed in
//!    order, until every list is covered; `take_list_heads` hands them to the pipeline]
//!   ─▶ Ready: the data-path QP starts writing at S (the REQ's PSN, as IB CM defines it; the
//!      reference used the REP's PSN and began out of sequence)
//!   REJ ─▶ Rejected (the caller backs off and retries)
//!
//!   disconnect / reconnection of a port ─▶ DREQ, retransmitted until the DREP (or given up
//!   after DREQ_TRIES): the collector destroys the QP and drops its metrics
//!   DREQ from the collector ─▶ DREP; the store's connection is reported Failed
//! ```
//!
//! A duplicate metadata SEND (our ACK was lost) is ACKed again. Everything unexpected is
//! counted and ignored. Events are queued: drain them with [`CmInitiator::poll_event`] after
//! [`CmInitiator::handle`] and [`CmInitiator::poll`].

use std::collections::VecDeque;
use std::net::SocketAddrV4;

use dta_proto::batch::{Datagram, TxBatch};
use dta_proto::meta::StoreMeta;
use dta_proto::rdma_cm::{Event, Failure, Initiator, InitiatorConfig};
use dta_proto::wire::cm::is_gsi;
use dta_proto::wire::ethernet::MacAddr;
use dta_proto::wire::ib::{
    opcode as op, AethRepr, Bth, BthRepr, Psn, Qpn, RethRepr, Rkey, Syndrome,
};
use dta_proto::wire::listheads::{HeadsAssembly, ListHeads};
use dta_proto::wire::metarec::MetaRecord;
use dta_proto::wire::roce::{build_frame, RoceEndpoint, RocePacket, L2L4_LEN};

use crate::datapath::pipeline::QpBinding;

/// REQ retransmission interval (ns).
pub const REQ_TIMEOUT_NS: u64 = 250_000_000;
/// REQ transmissions before giving up on one attempt.
pub const REQ_TRIES: u32 = 8;
/// How long the list-head messages may take to arrive after the metadata record (ns).
pub const HEADS_TIMEOUT_NS: u64 = REQ_TIMEOUT_NS * REQ_TRIES as u64;
/// DREQ retransmission interval (ns).
pub const DREQ_TIMEOUT_NS: u64 = 100_000_000;
/// DREQ transmissions before a disconnection is given up (the collector is gone).
pub const DREQ_TRIES: u32 = 5;
/// Most lists whose heads an initiator collects for one store (a larger store is refused).
pub const MAX_HEAD_LISTS: u32 = 1 << 22;

/// What the caller learns from [`CmInitiator::handle`] and [`CmInitiator::poll`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CmEvent {
    /// The store is connected: its description and the QP to write with.
    Ready {
        /// The rdma_cm port (service) connected.
        port: u16,
        /// The store (name from the REP's private data; address, R_Key, layout from the
        /// metadata record).
        meta: StoreMeta,
        /// The data-path QP.
        binding: QpBinding,
    },
    /// The collector rejected the connection (reason code), or it timed out (`None`).
    Failed {
        /// The rdma_cm port.
        port: u16,
        /// The REJ reason, or `None` for a timeout.
        reason: Option<u16>,
    },
}

/// Where a store's live connection is, after the CM exchange.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Phase {
    /// REQ sent (the CM exchange is [`Initiator`]'s).
    Connecting,
    /// RTU sent; waiting for the metadata SEND at `send_psn`.
    AwaitMeta {
        remote_qpn: Qpn,
        send_psn: Psn,
        name: String,
    },
    /// Metadata received and ACKed; list-head SENDs expected from `next_psn` on.
    AwaitHeads {
        remote_qpn: Qpn,
        meta_psn: Psn,
        next_psn: Psn,
        rep_psn: Psn,
        meta: Box<StoreMeta>,
        heads: HeadsAssembly,
        since: u64,
    },
    /// Metadata received; a zero-length WRITE probe at our starting PSN asks the responder
    /// which PSN it expects (stacks disagree on whose CM PSN that is).
    Syncing {
        remote_qpn: Qpn,
        meta_psn: Psn,
        /// The PSN of the last control SEND ACKed (the record's, or the last list-head's).
        last_psn: Psn,
        /// The PSN the probe carries: the REP's starting PSN.
        probe_psn: Psn,
        meta: Box<StoreMeta>,
        sent_at: u64,
        tries: u32,
    },
    Ready {
        remote_qpn: Qpn,
        meta_psn: Psn,
        last_psn: Psn,
    },
}

/// One store's live connection (closing ones are the [`Initiator`]'s alone).
#[derive(Debug, Clone)]
struct Conn {
    port: u16,
    local_qpn: Qpn,
    start_psn: Psn,
    phase: Phase,
    /// The lists' next batch numbers from the collector, until taken.
    heads: Option<Vec<u64>>,
}

dta_proto::define_counters!(
    /// RDMA_CM initiator counters.
    pub struct CmClientCounters {
        /// REQs sent (including retransmissions).
        cm_req_sent,
        /// REPs received.
        cm_rep,
        /// REJs received.
        cm_rej,
        /// Connections that completed (metadata received and ACKed).
        cm_ready,
        /// Attempts that timed out.
        cm_timeouts,
        /// Metadata SENDs received again (our ACK was lost) and re-ACKed.
        cm_meta_duplicates,
        /// List-head messages received and taken.
        cm_list_heads,
        /// List-head messages that did not parse or did not fit the store (not ACKed).
        cm_list_heads_invalid,
        /// DREQs sent (including retransmissions): connections replaced or closed at stop.
        cm_dreq_sent,
        /// DREPs received for our DREQs (the collector released the QP).
        cm_drep,
        /// Disconnections given up after DREQ_TRIES DREQs without a DREP.
        cm_dreq_timeouts,
        /// DREQs received from a collector (answered with a DREP; the store reconnects).
        cm_dreq_received,
        /// CM or control packets that did not parse or matched no connection.
        cm_invalid,
    }
);

/// The RDMA_CM initiator of one translator worker towards one collector.
pub struct CmInitiator {
    local: SocketAddrV4,
    local_mac: MacAddr,
    collector: SocketAddrV4,
    collector_mac: MacAddr,
    l2: bool,
    cm: Initiator<u16>,
    conns: Vec<Conn>,
    events: VecDeque<CmEvent>,
    /// Control packets that did not parse or matched no connection (beyond the CM's).
    rc_invalid: u64,
    /// Connections that timed out after the CM exchange.
    rc_timeouts: u64,
    /// Counters.
    pub counters: CmClientCounters,
}

/// The Local CA GUID our REQs carry unless [`CmInitiator::with_ca_guid`] sets one.
pub const DEFAULT_CA_GUID: u64 = 0x0200_00ff_fe00_0001;

/// A CA GUID naming one translator process: every worker of the process sends the same one,
/// a restarted process another. The collector reads a REQ from a known address with a new GUID
/// as a restart and drops the old process's QPs, while QPs of sibling workers (same GUID,
/// other QPNs, possibly on one shared RoCEv2 port) are kept.
pub fn incarnation_guid(random: u32) -> u64 {
    0x0200_00ff_0000_0000 | random as u64
}

impl CmInitiator {
    /// An initiator from our RoCEv2 address to a collector's.
    pub fn new(
        local: SocketAddrV4,
        local_mac: MacAddr,
        collector: SocketAddrV4,
        collector_mac: MacAddr,
        l2: bool,
        seed: u32,
    ) -> CmInitiator {
        let cm = Initiator::new(InitiatorConfig {
            local,
            local_mac,
            l2_frames: l2,
            ca_guid: DEFAULT_CA_GUID,
            first_comm_id: seed | 1,
            tid_base: (seed as u64) << 16,
            req_timeout_ns: REQ_TIMEOUT_NS,
            req_tries: REQ_TRIES,
            dreq_timeout_ns: DREQ_TIMEOUT_NS,
            dreq_tries: DREQ_TRIES,
            // We never issue READs, but FETCH_ADD needs the collector to accept outstanding
            // atomics: ask for 16.
            initiator_depth: 16,
            accept_rep: |_| true,
        });
        CmInitiator {
            local,
            local_mac,
            collector,
            collector_mac,
            l2,
            cm,
            conns: Vec::new(),
            events: VecDeque::new(),
            rc_invalid: 0,
            rc_timeouts: 0,
            counters: CmClientCounters::default(),
        }
    }

    /// Sends `guid` as the Local CA GUID of every REQ (see [`incarnation_guid`]).
    pub fn with_ca_guid(mut self, guid: u64) -> CmInitiator {
        self.cm.set_ca_guid(guid);
        self
    }

    /// The collector this initiator talks to.
    pub fn collector(&self) -> SocketAddrV4 {
        self.collector
    }

    fn ep(&self) -> RoceEndpoint {
        RoceEndpoint {
            src_mac: self.local_mac,
            dst_mac: self.collector_mac,
            src_ip: *self.local.ip(),
            dst_ip: *self.collector.ip(),
            src_port: self.local.port(),
            dst_port: self.collector.port(),
            ttl: 64,
            tos: 0,
            ident: 0,
        }
    }

    fn off(&self) -> usize {
        if self.l2 {
            0
        } else {
            L2L4_LEN
        }
    }

    /// The CM's counters and ours, as one set.
    fn sync_counters(&mut self) {
        let (c, m) = (&mut self.counters, &self.cm.counters);
        c.cm_req_sent = m.cm_req_sent;
        c.cm_rep = m.cm_rep;
        c.cm_rej = m.cm_rej;
        c.cm_timeouts = m.cm_timeouts + self.rc_timeouts;
        c.cm_dreq_sent = m.cm_dreq_sent;
        c.cm_drep = m.cm_drep;
        c.cm_dreq_timeouts = m.cm_dreq_timeouts;
        c.cm_dreq_received = m.cm_dreq_received;
        c.cm_invalid = m.cm_invalid + self.rc_invalid;
    }

    /// The next batch number of every list (store-local index order) the collector sent for
    /// the store on `port` at its last connection; `None` if it sent none (not a sequenced
    /// Append store, or a collector that does not send heads) or they were taken already.
    pub fn take_list_heads(&mut self, port: u16) -> Option<Vec<u64>> {
        self.conns
            .iter_mut()
            .find(|c| c.port == port)
            .and_then(|c| c.heads.take())
    }

    /// True if any connection attempt is still in progress.
    pub fn busy(&self) -> bool {
        self.conns
            .iter()
            .any(|c| !matches!(c.phase, Phase::Ready { .. }))
    }

    /// True while a DREQ waits for its DREP.
    pub fn closing(&self) -> bool {
        self.cm.closing()
    }

    /// True if `qpn` is one of ours that is connecting or connected (not being closed).
    pub fn owns_qp(&self, qpn: Qpn) -> bool {
        self.conns.iter().any(|c| c.local_qpn == qpn)
    }

    /// Closes every connection (DREQ, retransmitted by [`CmInitiator::poll`] until the DREP);
    /// attempts the collector never answered are forgotten. The collector destroys the QPs.
    pub fn disconnect_all(&mut self, now: u64, tx: &mut TxBatch) {
        self.conns.clear();
        self.cm.disconnect_all(now, tx);
        self.sync_counters();
    }

    /// Starts connecting our QP `local_qpn` (first PSN `start_psn`) to the store listening on
    /// rdma_cm `port`. A previous connection for the same port is closed (DREQ), so the
    /// collector does not keep its QP.
    pub fn connect(
        &mut self,
        port: u16,
        local_qpn: Qpn,
        start_psn: Psn,
        now: u64,
        tx: &mut TxBatch,
    ) {
        self.conns.retain(|c| c.port != port);
        let peer = (self.collector, self.collector_mac);
        self.cm
            .connect(port, peer, port, local_qpn, start_psn, now, tx);
        self.conns.push(Conn {
            port,
            local_qpn,
            start_psn,
            phase: Phase::Connecting,
            heads: None,
        });
        self.sync_counters();
    }

    /// True if the datagram is control traffic for this initiator (a CM MAD, or a SEND to one of
    /// our connecting QPs), so the worker hands it here instead of to the pipeline.
    pub fn wants(&self, d: &Datagram<'_>) -> bool {
        if d.src.ip() != self.collector.ip() {
            return false;
        }
        if is_gsi(d.payload) {
            return true;
        }
        let Ok(bth) = Bth::new_checked(d.payload) else {
            return false;
        };
        let qpn = bth.dest_qp();
        match bth.opcode() {
            op::RC_SEND_ONLY => self.owns_qp(qpn),
            // Answers to the PSN-synchronisation probe.
            op::RC_ACKNOWLEDGE => self
                .conns
                .iter()
                .any(|c| c.local_qpn == qpn && matches!(c.phase, Phase::Syncing { .. })),
            _ => false,
        }
    }

    /// Handles a CM MAD or a metadata SEND; what it ends in is queued for
    /// [`CmInitiator::poll_event`].
    pub fn handle(&mut self, now: u64, d: &Datagram<'_>, tx: &mut TxBatch) {
        if is_gsi(d.payload) {
            self.cm.handle(d, tx);
            self.take_cm_events();
        } else if let Some(e) = self.handle_control(now, d, tx) {
            self.events.push_back(e);
        }
        self.sync_counters();
    }

    /// Forgets the live connection `i` without a word to the collector (its metadata
    /// exchange failed).
    fn forget(&mut self, i: usize) -> Conn {
        let c = self.conns.remove(i);
        self.cm.forget(c.port);
        c
    }

    /// Turns the CM's events into ours.
    fn take_cm_events(&mut self) {
        while let Some(e) = self.cm.poll_event() {
            match e {
                Event::Established { key, rep, .. } => {
                    let Some(c) = self.conns.iter_mut().find(|c| c.port == key) else {
                        continue;
                    };
                    let name_len = rep
                        .private_data
                        .iter()
                        .take(64)
                        .position(|&b| b == 0)
                        .unwrap_or(64);
                    let name = String::from_utf8_lossy(&rep.private_data[..name_len]).into_owned();
                    c.phase = Phase::AwaitMeta {
                        remote_qpn: Qpn::new(rep.local_qpn),
                        send_psn: Psn::new(rep.starting_psn),
                        name,
                    };
                }
                Event::Failed { key: port, cause } => {
                    self.conns.retain(|c| c.port != port);
                    let reason = match cause {
                        Failure::Rejected(reason) => {
                            log::warn!(
                                "RDMA_CM: collector {} rejected port {port} (reason {reason})",
                                self.collector
                            );
                            Some(reason)
                        }
                        Failure::Disconnected => {
                            log::warn!(
                                "RDMA_CM: collector {} disconnected port {port}",
                                self.collector
                            );
                            None
                        }
                        Failure::Timeout | Failure::RepRefused => None,
                    };
                    self.events.push_back(CmEvent::Failed { port, reason });
                }
                Event::Closed {
                    key: port,
                    confirmed: false,
                } => log::warn!(
                    "RDMA_CM: collector {} never confirmed closing port {port} (no DREP)",
                    self.collector
                ),
                Event::Closed { .. } => {}
            }
        }
    }

    /// Handles a metadata or list-head SEND, or the answer to the PSN probe.
    fn handle_control(&mut self, now: u64, d: &Datagram<'_>, tx: &mut TxBatch) -> Option<CmEvent> {
        let Ok(pkt) = RocePacket::parse(d.payload) else {
            self.rc_invalid += 1;
            return None;
        };
        let Some(i) = self
            .conns
            .iter()
            .position(|c| c.local_qpn == pkt.bth.dest_qp)
        else {
            self.rc_invalid += 1;
            return None;
        };
        let (port, local_qpn, start_psn) = (
            self.conns[i].port,
            self.conns[i].local_qpn,
            self.conns[i].start_psn,
        );
        match self.conns[i].phase.clone() {
            Phase::AwaitMeta {
                remote_qpn,
                send_psn,
                name,
            } if pkt.bth.psn == send_psn || pkt.bth.psn == start_psn => {
                let rep_psn = send_psn;
                // The record is self-validating (magic, version, CRC). Linux's passive rdma_cm
                // side sends it at the PSN of *our* REQ rather than at the REP's starting PSN
                // (seen with rxe), so it is accepted at either and ACKed with the PSN it carried.
                let send_psn = pkt.bth.psn;
                let Ok(rec) = MetaRecord::parse(pkt.payload) else {
                    self.rc_invalid += 1;
                    return None;
                };
                self.ack(remote_qpn, send_psn, tx);
                let meta = rec.to_store_meta(name);
                if rec.list_heads {
                    let lists = match meta.kind {
                        dta_proto::meta::StoreKind::Append { lists, .. } => lists,
                        _ => 0,
                    };
                    if lists == 0 || lists > MAX_HEAD_LISTS {
                        self.counters.cm_list_heads_invalid += 1;
                        self.forget(i);
                        return Some(CmEvent::Failed { port, reason: None });
                    }
                    self.conns[i].phase = Phase::AwaitHeads {
                        remote_qpn,
                        meta_psn: send_psn,
                        next_psn: send_psn.next(),
                        rep_psn,
                        meta: Box::new(meta),
                        heads: HeadsAssembly::new(lists),
                        since: now,
                    };
                    return None;
                }
                // Probe at the REP's starting PSN: Linux's passive rdma_cm (rxe) expects the
                // initiator there (not at the REQ's PSN, as IB CM reads); a responder that
                // expects the REQ's PSN instead answers with a NAK or a duplicate ACK naming it.
                let probe_psn = rep_psn;
                self.send_sync_probe(remote_qpn, probe_psn, &meta, tx);
                self.conns[i].phase = Phase::Syncing {
                    remote_qpn,
                    meta_psn: send_psn,
                    last_psn: send_psn,
                    probe_psn,
                    meta: Box::new(meta),
                    sent_at: now,
                    tries: 1,
                };
                None
            }
            Phase::AwaitHeads {
                remote_qpn,
                meta_psn,
                next_psn,
                rep_psn,
                meta,
                mut heads,
                ..
            } if pkt.bth.opcode == op::RC_SEND_ONLY => {
                if pkt.bth.psn != next_psn {
                    // The record or a list-head message again (our ACK was lost): ACK again.
                    // Anything ahead of `next_psn` waits for the collector's retransmission.
                    if pkt.bth.psn.diff(meta_psn) >= 0 && next_psn.diff(pkt.bth.psn) > 0 {
                        self.counters.cm_meta_duplicates += 1;
                        self.ack(remote_qpn, pkt.bth.psn, tx);
                    } else {
                        self.rc_invalid += 1;
                    }
                    return None;
                }
                let taken = ListHeads::new_checked(pkt.payload).and_then(|m| heads.add(&m));
                if taken.is_err() {
                    self.counters.cm_list_heads_invalid += 1;
                    return None;
                }
                self.counters.cm_list_heads += 1;
                self.ack(remote_qpn, next_psn, tx);
                if !heads.complete() {
                    if let Phase::AwaitHeads {
                        next_psn: n,
                        heads: h,
                        ..
                    } = &mut self.conns[i].phase
                    {
                        *n = next_psn.next();
                        *h = heads;
                    }
                    return None;
                }
                self.conns[i].heads = Some(heads.into_heads());
                self.send_sync_probe(remote_qpn, rep_psn, &meta, tx);
                self.conns[i].phase = Phase::Syncing {
                    remote_qpn,
                    meta_psn,
                    last_psn: next_psn,
                    probe_psn: rep_psn,
                    meta,
                    sent_at: now,
                    tries: 1,
                };
                None
            }
            Phase::Syncing {
                remote_qpn,
                meta_psn,
                last_psn,
                meta,
                ..
            } if pkt.bth.opcode == op::RC_ACKNOWLEDGE => {
                // ACK X: the responder executed (or, for a duplicate, had executed) up to X and
                // expects X + 1. NAK "PSN sequence error" E: it expects E.
                let Some(aeth) = pkt.aeth else {
                    self.rc_invalid += 1;
                    return None;
                };
                let expected = match aeth.syndrome {
                    Syndrome::Ack { .. } => pkt.bth.psn.next(),
                    Syndrome::Nak(dta_proto::wire::ib::NakCode::PsnSequenceError) => pkt.bth.psn,
                    _ => {
                        self.rc_invalid += 1;
                        return None;
                    }
                };
                if expected != start_psn {
                    log::info!("RDMA_CM port {port}: responder expects PSN {:#x}, not the REQ's {:#x}; following it", expected.value(), start_psn.value());
                }
                let binding = QpBinding {
                    local_qpn,
                    remote_qpn,
                    start_psn: expected,
                };
                self.conns[i].phase = Phase::Ready {
                    remote_qpn,
                    meta_psn,
                    last_psn,
                };
                self.counters.cm_ready += 1;
                Some(CmEvent::Ready {
                    port,
                    meta: *meta,
                    binding,
                })
            }
            Phase::Syncing {
                remote_qpn,
                meta_psn,
                last_psn,
                ..
            }
            | Phase::Ready {
                remote_qpn,
                meta_psn,
                last_psn,
            } if pkt.bth.opcode == op::RC_SEND_ONLY
                && pkt.bth.psn.diff(meta_psn) >= 0
                && last_psn.diff(pkt.bth.psn) >= 0 =>
            {
                self.counters.cm_meta_duplicates += 1;
                self.ack(remote_qpn, pkt.bth.psn, tx);
                None
            }
            _ => {
                self.rc_invalid += 1;
                None
            }
        }
    }

    /// A zero-length RDMA WRITE with AckReq at `psn` (no memory is touched).
    fn send_sync_probe(&self, remote_qpn: Qpn, psn: Psn, meta: &StoreMeta, tx: &mut TxBatch) {
        let ep = self.ep();
        let bth = BthRepr::rc(op::RC_RDMA_WRITE_ONLY, remote_qpn, psn, true);
        let reth = RethRepr {
            va: meta.addr,
            rkey: Rkey(meta.rkey),
            dma_len: 0,
        }
        .to_bytes();
        tx.push_with(self.collector, self.off(), |b| {
            build_frame(&ep, &bth, &reth, &[], b)
        });
    }

    fn ack(&self, remote_qpn: Qpn, psn: Psn, tx: &mut TxBatch) {
        let ep = self.ep();
        let bth = BthRepr::rc(op::RC_ACKNOWLEDGE, remote_qpn, psn, false);
        // ACK with "invalid credits" (as rxe sends), MSN 1.
        let aeth = AethRepr {
            syndrome: Syndrome::Ack { credits: 0x1f },
            msn: 1,
        }
        .to_bytes();
        tx.push_with(self.collector, self.off(), |b| {
            build_frame(&ep, &bth, &aeth, &[], b)
        });
    }

    /// Retransmits overdue REQs, DREQs and PSN probes; queues the attempts that ran out of
    /// tries as events.
    pub fn poll(&mut self, now: u64, tx: &mut TxBatch) {
        self.cm.poll(now, tx);
        self.take_cm_events();
        let mut i = 0;
        while i < self.conns.len() {
            if let Phase::AwaitHeads { since, .. } = self.conns[i].phase {
                if now.saturating_sub(since) >= HEADS_TIMEOUT_NS {
                    let c = self.forget(i);
                    self.rc_timeouts += 1;
                    self.events.push_back(CmEvent::Failed {
                        port: c.port,
                        reason: None,
                    });
                    continue;
                }
            }
            if let Phase::Syncing {
                remote_qpn,
                sent_at,
                tries,
                probe_psn,
                ref meta,
                ..
            } = self.conns[i].phase
            {
                if now.saturating_sub(sent_at) >= REQ_TIMEOUT_NS {
                    if tries >= REQ_TRIES {
                        let c = self.forget(i);
                        self.rc_timeouts += 1;
                        self.events.push_back(CmEvent::Failed {
                            port: c.port,
                            reason: None,
                        });
                        continue;
                    }
                    let meta = (**meta).clone();
                    self.send_sync_probe(remote_qpn, probe_psn, &meta, tx);
                    if let Phase::Syncing { sent_at, tries, .. } = &mut self.conns[i].phase {
                        *sent_at = now;
                        *tries += 1;
                    }
                }
            }
            i += 1;
        }
        self.sync_counters();
    }

    /// The next event, oldest first.
    pub fn poll_event(&mut self) -> Option<CmEvent> {
        self.events.pop_front()
    }

    /// When `poll` should run next (ns).
    pub fn next_deadline(&self) -> Option<u64> {
        self.conns
            .iter()
            .filter_map(|c| match c.phase {
                Phase::Syncing { sent_at, .. } => Some(sent_at + REQ_TIMEOUT_NS),
                Phase::AwaitHeads { since, .. } => Some(since + HEADS_TIMEOUT_NS),
                _ => None,
            })
            .chain(self.cm.next_deadline())
            .min()
    }
}
