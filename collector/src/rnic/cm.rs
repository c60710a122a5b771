//! RDMA_CM, responder side, for the software RNIC: the listener a translator connects to.
//!
//! Each store is one service (an rdma_cm port in the TCP port space, like the reference's
//! 1336–1341). The exchange, on the GSI QP over RoCEv2:
//!
//! ```text
//!  translator                          collector
//!   REQ (service, QPN, starting PSN) ─▶ create an RC QP expecting that PSN
//!                                   ◀─ REP (our QPN, our PSN, store name in private data)
//!   RTU                              ─▶ established
//!                                   ◀─ RC SEND: 64-byte metadata record (address, length,
//!   RC ACK (PSN of that SEND)        ─▶   R_Key, layout), retransmitted until ACKed
//!   DREQ                             ─▶ destroy the QP
//!                                   ◀─ DREP
//! ```
//!
//! Fixes of the reference: the record carries the region's R_Key (not the lkey), and the accept
//! offers responder resources ≥ 1 so atomics work. PSNs follow Linux's passive rdma_cm as
//! measured against rxe (`tests/tests/translator_rxe_cm.rs`): the initiator's writes are
//! expected at the REP's starting PSN, and the responder's own SENDs start at the REQ's. (IB CM
//! reads the other way round; the translator's initiator probes which PSN a responder expects,
//! so it works with either.) A new REQ from the same peer address for the same service
//! replaces (and destroys) the old QPs when it carries another Local CA GUID (the translator
//! sends one GUID per process: a restart) or the same peer QPN. QPs of the same GUID and other
//! QPNs are kept: the workers of one translator may share its RoCEv2 port (answers steered to
//! them by QPN). QPs a reconnecting peer abandoned are bounded: at most
//! [`MAX_CONNS_PER_PEER`] per peer address and service, the oldest destroyed first.
//!
//! A sequenced Append store's record carries flag bit 2, and the metadata SEND is followed by
//! list-head SENDs ([`dta_proto::wire::listheads`]): at RTU the listener reads every trailer of
//! every list once, and tells the translator the batch number each list continues at, so a
//! restarted translator never overwrites a batch before the ring is due to lap it.

use std::net::SocketAddrV4;
use std::sync::Arc;

use dta_proto::batch::{Datagram, TxBatch};
use dta_proto::wire::cm::{build_cm_frame, parse_cm};
use dta_proto::wire::ethernet::MacAddr;
use dta_proto::wire::ib::{Psn, Qpn};
use dta_proto::wire::listheads;
use dta_proto::wire::mad::{
    rej_reason, service_port, CmDrep, CmMessage, CmRej, CmRep, MadHeaderRepr, MSG_REQ,
    REP_PRIVATE_DATA_LEN, TRANSPORT_RC,
};
use dta_proto::wire::roce::{RoceEndpoint, L2L4_LEN};

use super::responder::{QpConfig, Responder};
use crate::memory::Region;
use crate::query::append::{ListReader, Start};
use dta_proto::geometry::AppendGeometry;

/// How long to wait for the RTU before resending the REP (ns).
pub const REP_TIMEOUT_NS: u64 = 200_000_000;
/// REP retransmissions before the half-open connection is dropped.
pub const REP_RETRIES: u32 = 10;

dta_proto::define_counters!(
    /// RDMA_CM responder counters.
    pub struct CmCounters {
        /// ConnectRequests received.
        cm_req,
        /// ConnectReplies sent (including retransmissions).
        cm_rep_sent,
        /// ReadyToUse received.
        cm_rtu,
        /// Connections established.
        cm_established,
        /// ConnectRejects sent.
        cm_rej_sent,
        /// ConnectRejects received.
        cm_rej_received,
        /// DisconnectRequests received.
        cm_dreq,
        /// Metadata records sent (one per established connection).
        cm_metadata_sent,
        /// List-head messages sent after a sequenced Append store's record.
        cm_list_heads_sent,
        /// Connections replaced by a new REQ from the same peer (translator restarts).
        cm_replaced,
        /// REQs naming a service ID (port) no store listens on.
        cm_unknown_service,
        /// CM packets that did not parse, or named no known connection.
        cm_invalid,
        /// Half-open connections dropped after the REP went unanswered.
        cm_timeouts,
    }
);

/// One listening store.
#[derive(Debug, Clone)]
pub struct Service {
    /// The rdma_cm port (service ID).
    pub port: u16,
    /// Store name, sent in the REP's private data.
    pub name: String,
    /// The 64-byte metadata record advertised after RTU.
    pub record: [u8; 64],
    /// A sequenced Append store's memory and geometry: its lists' heads are read and sent
    /// after the record (which must then carry the list-heads flag). `None` otherwise.
    pub heads: Option<(Arc<Region>, AppendGeometry)>,
}

/// The next batch number of every list of an Append store: its newest trailer's number + 1
/// (1 for a list never written). Reads every trailer of every list once.
pub fn list_heads(region: &Region, a: &AppendGeometry) -> Vec<u64> {
    (0..a.lists)
        .map(|l| {
            let r = ListReader::new(region, a.layout, a.list_offset(l), Start::Seq(1));
            (r.newest_seq(region) + 1).min(dta_proto::layout::AppendLayout::MAX_SEQ)
        })
        .collect()
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum State {
    RepSent { sent_at: u64, tries: u32 },
    Established,
}

/// Live connections kept per (peer address, service); see the module documentation.
pub const MAX_CONNS_PER_PEER: usize = 64;

#[derive(Debug, Clone)]
struct Conn {
    peer_qpn: u32,
    /// The Local CA GUID of the peer's REQ: one per translator process.
    peer_guid: u64,
    local_comm_id: u32,
    remote_comm_id: u32,
    peer: SocketAddrV4,
    service: usize,
    qpn: Qpn,
    tid: u64,
    rep: CmRep,
    state: State,
}

/// The RDMA_CM listener of one software RNIC device.
pub struct CmResponder {
    local: SocketAddrV4,
    local_mac: MacAddr,
    services: Vec<Service>,
    conns: Vec<Conn>,
    next_comm_id: u32,
    psn_seed: u32,
    verify_icrc: bool,
    recv_credits: u32,
    /// Counters.
    pub counters: CmCounters,
}

impl CmResponder {
    /// A listener for `services` on the device at `local`.
    pub fn new(
        local: SocketAddrV4,
        local_mac: MacAddr,
        services: Vec<Service>,
        verify_icrc: bool,
        seed: u32,
    ) -> CmResponder {
        CmResponder {
            local,
            local_mac,
            services,
            conns: Vec::new(),
            next_comm_id: seed | 1,
            psn_seed: seed.rotate_left(13) ^ 0x5a5a_5a5a,
            verify_icrc,
            recv_credits: 4096,
            counters: CmCounters::default(),
        }
    }

    /// Live connections: (service port, peer, our QPN, established?).
    pub fn connections(&self) -> Vec<(u16, SocketAddrV4, Qpn, bool)> {
        self.conns
            .iter()
            .map(|c| {
                (
                    self.services[c.service].port,
                    c.peer,
                    c.qpn,
                    c.state == State::Established,
                )
            })
            .collect()
    }

    fn ep(&self, peer: SocketAddrV4) -> RoceEndpoint {
        RoceEndpoint {
            src_mac: self.local_mac,
            dst_mac: MacAddr::BROADCAST,
            src_ip: *self.local.ip(),
            dst_ip: *peer.ip(),
            src_port: self.local.port(),
            dst_port: peer.port(),
            ttl: 64,
            tos: 0,
            ident: 0,
        }
    }

    fn send(
        &self,
        peer: SocketAddrV4,
        tid: u64,
        msg: &CmMessage,
        l2: bool,
        tx: &mut TxBatch,
    ) -> bool {
        let ep = self.ep(peer);
        let hdr = MadHeaderRepr::cm_send(tid, 0);
        tx.push_with(peer, if l2 { 0 } else { L2L4_LEN }, |b| {
            build_cm_frame(&ep, Psn::new(0), &hdr, msg, b)
        })
    }

    fn next_psn(&mut self) -> Psn {
        self.psn_seed = self
            .psn_seed
            .wrapping_mul(1_664_525)
            .wrapping_add(1_013_904_223);
        Psn::new(self.psn_seed >> 8)
    }

    /// Handles one datagram addressed to the GSI QP.
    pub fn handle(&mut self, now: u64, d: &Datagram<'_>, rnic: &mut Responder, tx: &mut TxBatch) {
        let l2 = rnic.device().l2_frames;
        let Ok(p) = parse_cm(d.payload) else {
            self.counters.cm_invalid += 1;
            return;
        };
        // Replies go back to the address the request came from (our translator receives on
        // its RoCEv2 socket's port).
        let peer = d.src;
        match p.msg {
            CmMessage::Req(req) => {
                self.counters.cm_req += 1;
                if let Some(c) = self
                    .conns
                    .iter_mut()
                    .find(|c| c.peer == peer && c.remote_comm_id == req.local_comm_id)
                {
                    // A retransmitted REQ: answer with the same REP.
                    let (tid, rep) = (c.tid, c.rep);
                    if self.send(peer, tid, &CmMessage::Rep(rep), l2, tx) {
                        self.counters.cm_rep_sent += 1;
                    }
                    return;
                }
                let service = service_port(req.service_id)
                    .and_then(|port| self.services.iter().position(|s| s.port == port));
                let reject = |reason: u16| CmRej {
                    local_comm_id: 0,
                    remote_comm_id: req.local_comm_id,
                    msg_rejected: MSG_REQ,
                    reason,
                    ..CmRej::default()
                };
                let Some(si) = service else {
                    self.counters.cm_unknown_service += 1;
                    if self.send(
                        peer,
                        p.hdr.tid,
                        &CmMessage::Rej(reject(rej_reason::INVALID_SERVICE_ID)),
                        l2,
                        tx,
                    ) {
                        self.counters.cm_rej_sent += 1;
                    }
                    return;
                };
                if req.transport_type != TRANSPORT_RC {
                    if self.send(
                        peer,
                        p.hdr.tid,
                        &CmMessage::Rej(reject(rej_reason::CONSUMER_REJECT)),
                        l2,
                        tx,
                    ) {
                        self.counters.cm_rej_sent += 1;
                    }
                    return;
                }
                // A restarted translator reconnects from the same address under a new CA
                // GUID (or, if it keeps its GUID, with the same QPN): drop its old QPs. QPs of
                // the same GUID and other QPNs are sibling workers sharing the address: keep
                // them (but the oldest beyond the per-peer bound go).
                let same_peer = |c: &Conn| c.peer == peer && c.service == si;
                let mut kept = 0;
                for i in (0..self.conns.len()).rev() {
                    let c = &self.conns[i];
                    if !same_peer(c) {
                        continue;
                    }
                    // Newest first: beyond the bound, the older ones go.
                    if c.peer_qpn == req.local_qpn
                        || c.peer_guid != req.local_ca_guid
                        || kept + 1 >= MAX_CONNS_PER_PEER
                    {
                        let old = self.conns.remove(i);
                        rnic.destroy_qp(old.qpn);
                        self.counters.cm_replaced += 1;
                    } else {
                        kept += 1;
                    }
                }
                // PSNs as Linux's passive rdma_cm sets them (measured against rxe): the
                // initiator's writes are expected at the PSN the REP announces, and our own
                // SENDs (the metadata record) start at the REQ's PSN.
                let rq_psn = self.next_psn();
                let qpn = rnic.create_qp(QpConfig {
                    peer,
                    peer_mac: MacAddr::BROADCAST,
                    peer_qpn: Qpn::new(req.local_qpn),
                    rq_psn,
                    sq_psn: Psn::new(req.starting_psn),
                    verify_icrc: self.verify_icrc,
                    recv_credits: self.recv_credits,
                });
                let local_comm_id = self.next_comm_id;
                self.next_comm_id = self.next_comm_id.wrapping_add(2);
                let mut private_data = [0u8; REP_PRIVATE_DATA_LEN];
                let name = self.services[si].name.as_bytes();
                let n = name.len().min(64);
                private_data[..n].copy_from_slice(&name[..n]);
                let rep = CmRep {
                    local_comm_id,
                    remote_comm_id: req.local_comm_id,
                    local_qpn: qpn.value(),
                    starting_psn: rq_psn.value(),
                    // At least one outstanding atomic/read, so Key-Increment's FETCH_ADDs work
                    // (the reference accepted with 0).
                    responder_resources: req.initiator_depth.clamp(1, 16),
                    initiator_depth: req.responder_resources.min(16),
                    target_ack_delay: 15,
                    failover_accepted: 0,
                    end_to_end_flow_control: false,
                    rnr_retry_count: 7,
                    srq: false,
                    local_ca_guid: 0x0200_00ff_fe00_0051,
                    private_data,
                    ..CmRep::default()
                };
                let sent = self.send(peer, p.hdr.tid, &CmMessage::Rep(rep), l2, tx);
                if sent {
                    self.counters.cm_rep_sent += 1;
                }
                log::info!(
                    "RDMA_CM: REQ from {peer} for store {:?}: QP {:#x} expects PSN {:#x}",
                    self.services[si].name,
                    qpn.value(),
                    rq_psn.value()
                );
                self.conns.push(Conn {
                    peer_qpn: req.local_qpn,
                    peer_guid: req.local_ca_guid,
                    local_comm_id,
                    remote_comm_id: req.local_comm_id,
                    peer,
                    service: si,
                    qpn,
                    tid: p.hdr.tid,
                    rep,
                    state: State::RepSent {
                        sent_at: now,
                        tries: 0,
                    },
                });
            }
            CmMessage::Rtu(rtu) => {
                let Some(c) = self
                    .conns
                    .iter_mut()
                    .find(|c| c.peer == peer && c.local_comm_id == rtu.remote_comm_id)
                else {
                    self.counters.cm_invalid += 1;
                    return;
                };
                self.counters.cm_rtu += 1;
                if c.state == State::Established {
                    return;
                }
                c.state = State::Established;
                self.counters.cm_established += 1;
                let (qpn, svc) = (c.qpn, c.service);
                let rec = self.services[svc].record;
                if rnic.post_send(qpn, &rec, now, tx) {
                    self.counters.cm_metadata_sent += 1;
                }
                if let Some((region, a)) = &self.services[svc].heads {
                    let next = list_heads(region, a);
                    let per = listheads::heads_per_message(rnic.device().pmtu as usize).max(1);
                    let mut buf = vec![0u8; listheads::message_len(per)];
                    for (k, chunk) in next.chunks(per).enumerate() {
                        let first = (k * per) as u32;
                        let Some(n) = listheads::emit(first, a.lists, chunk, &mut buf) else {
                            continue;
                        };
                        if rnic.post_send(qpn, &buf[..n], now, tx) {
                            self.counters.cm_list_heads_sent += 1;
                        }
                    }
                    log::info!(
                        "RDMA_CM: store {:?}: sent the heads of {} list(s) to {peer}",
                        self.services[svc].name,
                        next.len()
                    );
                }
            }
            CmMessage::Dreq(dreq) => {
                self.counters.cm_dreq += 1;
                let drep = CmDrep {
                    local_comm_id: dreq.remote_comm_id,
                    remote_comm_id: dreq.local_comm_id,
                    ..CmDrep::default()
                };
                if let Some(k) = self
                    .conns
                    .iter()
                    .position(|c| c.peer == peer && c.local_comm_id == dreq.remote_comm_id)
                {
                    let c = self.conns.remove(k);
                    rnic.destroy_qp(c.qpn);
                }
                // DREP even for an unknown connection: the peer may have missed an earlier one.
                self.send(peer, p.hdr.tid, &CmMessage::Drep(drep), l2, tx);
            }
            CmMessage::Rej(rej) => {
                self.counters.cm_rej_received += 1;
                if let Some(k) = self
                    .conns
                    .iter()
                    .position(|c| c.peer == peer && c.local_comm_id == rej.remote_comm_id)
                {
                    let c = self.conns.remove(k);
                    rnic.destroy_qp(c.qpn);
                }
            }
            _ => self.counters.cm_invalid += 1,
        }
    }

    /// Resends REPs whose RTU is overdue; drops connections that never complete.
    pub fn poll(&mut self, now: u64, rnic: &mut Responder, tx: &mut TxBatch) {
        let l2 = rnic.device().l2_frames;
        let mut k = 0;
        while k < self.conns.len() {
            let c = self.conns[k].clone();
            if let State::RepSent { sent_at, tries } = c.state {
                if now.saturating_sub(sent_at) >= REP_TIMEOUT_NS {
                    if tries >= REP_RETRIES {
                        self.counters.cm_timeouts += 1;
                        rnic.destroy_qp(c.qpn);
                        self.conns.remove(k);
                        continue;
                    }
                    if self.send(c.peer, c.tid, &CmMessage::Rep(c.rep), l2, tx) {
                        self.counters.cm_rep_sent += 1;
                    }
                    self.conns[k].state = State::RepSent {
                        sent_at: now,
                        tries: tries + 1,
                    };
                }
            }
            k += 1;
        }
    }
}
