//! RDMA_CM, initiator side: how the translator connects a QP to each collector store.
//!
//! A sans-I/O state machine, driven with the current time like the pipeline:
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
//! counted and ignored.

use std::net::SocketAddrV4;

use dta_proto::batch::{Datagram, TxBatch};
use dta_proto::meta::StoreMeta;
use dta_proto::wire::cm::{build_cm_frame, is_gsi, parse_cm};
use dta_proto::wire::ethernet::MacAddr;
use dta_proto::wire::ib::{
    opcode as op, AethRepr, Bth, BthRepr, Psn, Qpn, RethRepr, Rkey, Syndrome,
};
use dta_proto::wire::listheads::{HeadsAssembly, ListHeads};
use dta_proto::wire::mad::{CmDreq, CmMessage, CmReq, CmRtu, MadHeaderRepr};
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

#[derive(Debug, Clone, PartialEq, Eq)]
enum State {
    ReqSent {
        sent_at: u64,
        tries: u32,
    },
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
    /// DREQ sent (the connection was replaced or the translator stops); waiting for the DREP.
    Closing {
        remote_qpn: Qpn,
        sent_at: u64,
        tries: u32,
    },
}

impl State {
    /// The collector's QPN once the REP named it.
    fn remote_qpn(&self) -> Option<Qpn> {
        match self {
            State::ReqSent { .. } => None,
            State::AwaitMeta { remote_qpn, .. }
            | State::AwaitHeads { remote_qpn, .. }
            | State::Syncing { remote_qpn, .. }
            | State::Ready { remote_qpn, .. }
            | State::Closing { remote_qpn, .. } => Some(*remote_qpn),
        }
    }
}

#[derive(Debug, Clone)]
struct Conn {
    port: u16,
    local_comm_id: u32,
    remote_comm_id: u32,
    local_qpn: Qpn,
    start_psn: Psn,
    tid: u64,
    req: CmReq,
    state: State,
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
    conns: Vec<Conn>,
    next_comm_id: u32,
    next_tid: u64,
    ca_guid: u64,
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
        CmInitiator {
            local,
            local_mac,
            collector,
            collector_mac,
            l2,
            conns: Vec::new(),
            next_comm_id: seed | 1,
            next_tid: (seed as u64) << 16,
            ca_guid: DEFAULT_CA_GUID,
            counters: CmClientCounters::default(),
        }
    }

    /// Sends `guid` as the Local CA GUID of every REQ (see [`incarnation_guid`]).
    pub fn with_ca_guid(mut self, guid: u64) -> CmInitiator {
        self.ca_guid = guid;
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

    /// The next batch number of every list (store-local index order) the collector sent for
    /// the store on `port` at its last connection; `None` if it sent none (not a sequenced
    /// Append store, or a collector that does not send heads) or they were taken already.
    pub fn take_list_heads(&mut self, port: u16) -> Option<Vec<u64>> {
        self.conns
            .iter_mut()
            .find(|c| c.port == port && !matches!(c.state, State::Closing { .. }))
            .and_then(|c| c.heads.take())
    }

    /// True if any connection attempt is still in progress.
    pub fn busy(&self) -> bool {
        self.conns
            .iter()
            .any(|c| !matches!(c.state, State::Ready { .. } | State::Closing { .. }))
    }

    /// True while a DREQ waits for its DREP.
    pub fn closing(&self) -> bool {
        self.conns
            .iter()
            .any(|c| matches!(c.state, State::Closing { .. }))
    }

    /// True if `qpn` is one of ours that is connecting or connected (not being closed).
    pub fn owns_qp(&self, qpn: Qpn) -> bool {
        self.conns
            .iter()
            .any(|c| c.local_qpn == qpn && !matches!(c.state, State::Closing { .. }))
    }

    /// Closes every connection (DREQ, retransmitted by [`CmInitiator::poll`] until the DREP);
    /// attempts the collector never answered are forgotten. The collector destroys the QPs.
    pub fn disconnect_all(&mut self, now: u64, tx: &mut TxBatch) {
        let mut i = 0;
        while i < self.conns.len() {
            if !self.close(i, now, tx) {
                self.conns.remove(i);
            } else {
                i += 1;
            }
        }
    }

    /// Turns connection `i` into a closing one and sends its DREQ; false if the collector
    /// never named its side (no REP yet: nothing to release).
    fn close(&mut self, i: usize, now: u64, tx: &mut TxBatch) -> bool {
        let c = &self.conns[i];
        if matches!(c.state, State::Closing { .. }) {
            return true;
        }
        let Some(remote_qpn) = c.state.remote_qpn() else {
            return false;
        };
        self.conns[i].heads = None;
        self.conns[i].state = State::Closing {
            remote_qpn,
            sent_at: now,
            tries: 1,
        };
        self.send_dreq(i, tx);
        true
    }

    fn send_dreq(&mut self, i: usize, tx: &mut TxBatch) {
        let c = &self.conns[i];
        let Some(remote_qpn) = c.state.remote_qpn() else {
            return;
        };
        let msg = CmMessage::Dreq(CmDreq {
            local_comm_id: c.local_comm_id,
            remote_comm_id: c.remote_comm_id,
            remote_qpn_eecn: remote_qpn.value(),
            ..CmDreq::default()
        });
        let hdr = MadHeaderRepr::cm_send(c.tid, 0);
        let ep = self.ep();
        if tx.push_with(self.collector, self.off(), |b| {
            build_cm_frame(&ep, Psn::new(0), &hdr, &msg, b)
        }) {
            self.counters.cm_dreq_sent += 1;
        }
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
        let mut i = 0;
        while i < self.conns.len() {
            let replaced =
                self.conns[i].port == port && !matches!(self.conns[i].state, State::Closing { .. });
            if replaced && !self.close(i, now, tx) {
                self.conns.remove(i);
                continue;
            }
            i += 1;
        }
        let local_comm_id = self.next_comm_id;
        self.next_comm_id = self.next_comm_id.wrapping_add(2);
        self.next_tid += 1;
        // We never issue READs, but FETCH_ADD needs the collector to accept outstanding
        // atomics: offer none, ask for 16.
        let req = CmReq::rc_connect(
            local_comm_id,
            port,
            self.ca_guid,
            local_qpn.value(),
            start_psn.value(),
            self.local,
            *self.collector.ip(),
            0,
            16,
        );
        let c = Conn {
            port,
            local_comm_id,
            remote_comm_id: 0,
            local_qpn,
            start_psn,
            tid: self.next_tid,
            req,
            state: State::ReqSent {
                sent_at: now,
                tries: 1,
            },
            heads: None,
        };
        self.send_req(&c, tx);
        self.conns.push(c);
    }

    fn send_req(&mut self, c: &Conn, tx: &mut TxBatch) {
        let ep = self.ep();
        let hdr = MadHeaderRepr::cm_send(c.tid, 0);
        let msg = CmMessage::Req(c.req);
        if tx.push_with(self.collector, self.off(), |b| {
            build_cm_frame(&ep, Psn::new(0), &hdr, &msg, b)
        }) {
            self.counters.cm_req_sent += 1;
        }
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
                .any(|c| c.local_qpn == qpn && matches!(c.state, State::Syncing { .. })),
            _ => false,
        }
    }

    /// Handles a CM MAD or a metadata SEND.
    pub fn handle(&mut self, now: u64, d: &Datagram<'_>, tx: &mut TxBatch) -> Option<CmEvent> {
        if is_gsi(d.payload) {
            return self.handle_mad(d, tx);
        }
        let Ok(pkt) = RocePacket::parse(d.payload) else {
            self.counters.cm_invalid += 1;
            return None;
        };
        let Some(i) = self.conns.iter().position(|c| {
            c.local_qpn == pkt.bth.dest_qp && !matches!(c.state, State::Closing { .. })
        }) else {
            self.counters.cm_invalid += 1;
            return None;
        };
        let (port, local_qpn, start_psn) = (
            self.conns[i].port,
            self.conns[i].local_qpn,
            self.conns[i].start_psn,
        );
        match self.conns[i].state.clone() {
            State::AwaitMeta {
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
                    self.counters.cm_invalid += 1;
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
                        self.conns.remove(i);
                        return Some(CmEvent::Failed { port, reason: None });
                    }
                    self.conns[i].state = State::AwaitHeads {
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
                self.conns[i].state = State::Syncing {
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
            State::AwaitHeads {
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
                        self.counters.cm_invalid += 1;
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
                    if let State::AwaitHeads {
                        next_psn: n,
                        heads: h,
                        ..
                    } = &mut self.conns[i].state
                    {
                        *n = next_psn.next();
                        *h = heads;
                    }
                    return None;
                }
                self.conns[i].heads = Some(heads.into_heads());
                self.send_sync_probe(remote_qpn, rep_psn, &meta, tx);
                self.conns[i].state = State::Syncing {
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
            State::Syncing {
                remote_qpn,
                meta_psn,
                last_psn,
                meta,
                ..
            } if pkt.bth.opcode == op::RC_ACKNOWLEDGE => {
                // ACK X: the responder executed (or, for a duplicate, had executed) up to X and
                // expects X + 1. NAK "PSN sequence error" E: it expects E.
                let Some(aeth) = pkt.aeth else {
                    self.counters.cm_invalid += 1;
                    return None;
                };
                let expected = match aeth.syndrome {
                    Syndrome::Ack { .. } => pkt.bth.psn.next(),
                    Syndrome::Nak(dta_proto::wire::ib::NakCode::PsnSequenceError) => pkt.bth.psn,
                    _ => {
                        self.counters.cm_invalid += 1;
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
                self.conns[i].state = State::Ready {
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
            State::Syncing {
                remote_qpn,
                meta_psn,
                last_psn,
                ..
            }
            | State::Ready {
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
                self.counters.cm_invalid += 1;
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

    fn handle_mad(&mut self, d: &Datagram<'_>, tx: &mut TxBatch) -> Option<CmEvent> {
        let Ok(p) = parse_cm(d.payload) else {
            self.counters.cm_invalid += 1;
            return None;
        };
        match p.msg {
            CmMessage::Rep(rep) => {
                let Some(i) = self
                    .conns
                    .iter()
                    .position(|c| c.local_comm_id == rep.remote_comm_id)
                else {
                    self.counters.cm_invalid += 1;
                    return None;
                };
                self.counters.cm_rep += 1;
                let name_len = rep
                    .private_data
                    .iter()
                    .take(64)
                    .position(|&b| b == 0)
                    .unwrap_or(64);
                let name = String::from_utf8_lossy(&rep.private_data[..name_len]).into_owned();
                let c = &mut self.conns[i];
                c.remote_comm_id = rep.local_comm_id;
                if matches!(c.state, State::ReqSent { .. }) {
                    c.state = State::AwaitMeta {
                        remote_qpn: Qpn::new(rep.local_qpn),
                        send_psn: Psn::new(rep.starting_psn),
                        name,
                    };
                }
                // (Re)send the RTU: a repeated REP means our RTU was lost.
                let rtu = CmMessage::Rtu(CmRtu {
                    local_comm_id: c.local_comm_id,
                    remote_comm_id: c.remote_comm_id,
                    ..CmRtu::default()
                });
                let tid = c.tid;
                let ep = self.ep();
                let hdr = MadHeaderRepr::cm_send(tid, 0);
                tx.push_with(self.collector, self.off(), |b| {
                    build_cm_frame(&ep, Psn::new(0), &hdr, &rtu, b)
                });
                None
            }
            CmMessage::Rej(rej) => {
                let i = self
                    .conns
                    .iter()
                    .position(|c| c.local_comm_id == rej.remote_comm_id)?;
                self.counters.cm_rej += 1;
                let c = self.conns.remove(i);
                log::warn!(
                    "RDMA_CM: collector {} rejected port {} (reason {})",
                    self.collector,
                    c.port,
                    rej.reason
                );
                Some(CmEvent::Failed {
                    port: c.port,
                    reason: Some(rej.reason),
                })
            }
            CmMessage::Drep(drep) => {
                let Some(i) = self.conns.iter().position(|c| {
                    c.local_comm_id == drep.remote_comm_id
                        && matches!(c.state, State::Closing { .. })
                }) else {
                    // A DREP again (our retransmitted DREQ crossed it): nothing left to close.
                    self.counters.cm_invalid += 1;
                    return None;
                };
                self.counters.cm_drep += 1;
                self.conns.remove(i);
                None
            }
            CmMessage::Dreq(dreq) => {
                // The collector released the QP (it stops, or an operator closed it): confirm,
                // and let the worker reconnect the store.
                self.counters.cm_dreq_received += 1;
                let drep = CmMessage::Drep(dreq.answer());
                let ep = self.ep();
                let hdr = MadHeaderRepr::cm_send(p.hdr.tid, 0);
                tx.push_with(self.collector, self.off(), |b| {
                    build_cm_frame(&ep, Psn::new(0), &hdr, &drep, b)
                });
                let i = self
                    .conns
                    .iter()
                    .position(|c| c.local_comm_id == dreq.remote_comm_id)?;
                let c = self.conns.remove(i);
                if matches!(c.state, State::Closing { .. }) {
                    return None;
                }
                log::warn!(
                    "RDMA_CM: collector {} disconnected port {}",
                    self.collector,
                    c.port
                );
                Some(CmEvent::Failed {
                    port: c.port,
                    reason: None,
                })
            }
            _ => {
                self.counters.cm_invalid += 1;
                None
            }
        }
    }

    /// Retransmits overdue REQs and DREQs; reports attempts that ran out of tries.
    pub fn poll(&mut self, now: u64, tx: &mut TxBatch) -> Option<CmEvent> {
        let mut i = 0;
        while i < self.conns.len() {
            if let State::Closing { sent_at, tries, .. } = self.conns[i].state {
                if now.saturating_sub(sent_at) >= DREQ_TIMEOUT_NS {
                    if tries >= DREQ_TRIES {
                        let c = self.conns.remove(i);
                        self.counters.cm_dreq_timeouts += 1;
                        log::warn!(
                            "RDMA_CM: collector {} never confirmed closing port {} (no DREP)",
                            self.collector,
                            c.port
                        );
                        continue;
                    }
                    self.send_dreq(i, tx);
                    if let State::Closing { sent_at, tries, .. } = &mut self.conns[i].state {
                        *sent_at = now;
                        *tries += 1;
                    }
                }
                i += 1;
                continue;
            }
            if let State::AwaitHeads { since, .. } = self.conns[i].state {
                if now.saturating_sub(since) >= HEADS_TIMEOUT_NS {
                    let c = self.conns.remove(i);
                    self.counters.cm_timeouts += 1;
                    return Some(CmEvent::Failed {
                        port: c.port,
                        reason: None,
                    });
                }
            }
            if let State::Syncing {
                remote_qpn,
                sent_at,
                tries,
                ..
            } = &self.conns[i].state
            {
                if now.saturating_sub(*sent_at) >= REQ_TIMEOUT_NS {
                    let (remote_qpn, tries) = (*remote_qpn, *tries);
                    if tries >= REQ_TRIES {
                        let c = self.conns.remove(i);
                        self.counters.cm_timeouts += 1;
                        return Some(CmEvent::Failed {
                            port: c.port,
                            reason: None,
                        });
                    }
                    if let State::Syncing {
                        meta, probe_psn, ..
                    } = &self.conns[i].state
                    {
                        let (m, p) = ((**meta).clone(), *probe_psn);
                        self.send_sync_probe(remote_qpn, p, &m, tx);
                    }
                    if let State::Syncing { sent_at, tries, .. } = &mut self.conns[i].state {
                        *sent_at = now;
                        *tries += 1;
                    }
                }
            }
            if let State::ReqSent { sent_at, tries } = self.conns[i].state {
                if now.saturating_sub(sent_at) >= REQ_TIMEOUT_NS {
                    if tries >= REQ_TRIES {
                        let c = self.conns.remove(i);
                        self.counters.cm_timeouts += 1;
                        return Some(CmEvent::Failed {
                            port: c.port,
                            reason: None,
                        });
                    }
                    let c = self.conns[i].clone();
                    self.send_req(&c, tx);
                    self.conns[i].state = State::ReqSent {
                        sent_at: now,
                        tries: tries + 1,
                    };
                }
            }
            i += 1;
        }
        None
    }

    /// When `poll` should run next (ns).
    pub fn next_deadline(&self) -> Option<u64> {
        self.conns
            .iter()
            .filter_map(|c| match c.state {
                State::ReqSent { sent_at, .. } | State::Syncing { sent_at, .. } => {
                    Some(sent_at + REQ_TIMEOUT_NS)
                }
                State::AwaitHeads { since, .. } => Some(since + HEADS_TIMEOUT_NS),
                State::Closing { sent_at, .. } => Some(sent_at + DREQ_TIMEOUT_NS),
                _ => None,
            })
            .min()
    }
}
