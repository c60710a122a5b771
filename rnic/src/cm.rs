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
//! A REQ from a source address outside the store's allowlist ([`Service::allow`]) is answered
//! with a REJ (reason 28, consumer reject; [`NOT_ALLOWED_TEXT`] in the private data) before
//! anything else happens: no QP, no record, no effect on other connections. Starting PSNs
//! and communication IDs are drawn from the kernel's random source.
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
    rej_reason, service_port, CmMessage, CmRej, CmRep, MadHeaderRepr, MSG_REQ,
    REP_PRIVATE_DATA_LEN, TRANSPORT_RC,
};
use dta_proto::wire::roce::{RoceEndpoint, L2L4_LEN};

use crate::allow::PeerAllowlist;
use crate::append::list_heads;
use crate::memory::Region;
use crate::responder::{QpConfig, Responder};
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
        /// Connections replaced by a new REQ from the same peer (translator restarts, or the
        /// peer's oldest beyond `MAX_CONNS_PER_PEER`).
        cm_replaced,
        /// REQs naming a service ID (port) no store listens on.
        cm_unknown_service,
        /// REQs refused because their source address is not in the store's `cm_allow` list
        /// (answered with a REJ, reason 28 "consumer reject"; no QP is created).
        cm_rejected,
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
    /// Carry `record` in the REP's private data (bytes 64..128, after the name) instead of a
    /// SEND after RTU: a ZERO agent's region record ([`dta_proto::zero::RegionRecord`]), which
    /// its pull collector needs before it can READ, and which a real RNIC's `rdma_accept`
    /// carries the same way.
    pub record_in_rep: bool,
    /// A sequenced Append store's memory and geometry: its lists' heads are read and sent
    /// after the record (which must then carry the list-heads flag). `None` otherwise.
    pub heads: Option<(Arc<Region>, AppendGeometry)>,
    /// Source addresses that may connect; a REQ from anyone else gets a REJ.
    pub allow: PeerAllowlist,
}

/// Private data of the REJ sent to a peer outside a store's allowlist (rdma_cm hands it to
/// the initiating application with `RDMA_CM_EVENT_REJECTED`).
pub const NOT_ALLOWED_TEXT: &[u8] = b"dta: source address not in the store's cm_allow list";

/// Distinct refused peers logged at `warn` (later refusals of a logged peer go to `debug`, so
/// a peer retrying, or a flood of REQs, cannot fill the log).
const REFUSED_LOGGED: usize = 256;

#[derive(Debug, Clone, PartialEq, Eq)]
enum State {
    RepSent { sent_at: u64, tries: u32 },
    Established,
}

/// Live connections kept per (peer address, service); see the module documentation. The
/// real-RNIC backend (`rdma`, feature `rdma`) keeps the same bound per (peer IP, store), where each
/// connection also costs a file descriptor, a CQ and a QP of the NIC.
pub const MAX_CONNS_PER_PEER: usize = 64;

/// The connections a new one from the same peer replaces so that at most
/// [`MAX_CONNS_PER_PEER`] stay: given the peer's live connections as (key, accept order), the
/// oldest beyond `MAX_CONNS_PER_PEER - 1`, oldest first. Allocates only when there are some.
pub fn beyond_peer_limit<K: Copy>(mut live: Vec<(K, u64)>) -> Vec<K> {
    if live.len() < MAX_CONNS_PER_PEER {
        return Vec::new();
    }
    live.sort_unstable_by_key(|&(_, order)| order);
    let n = live.len() + 1 - MAX_CONNS_PER_PEER;
    live[..n].iter().map(|&(k, _)| k).collect()
}

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
    verify_icrc: bool,
    recv_credits: u32,
    /// Refused peers already logged at `warn` (at most [`REFUSED_LOGGED`]).
    refused_logged: std::collections::HashSet<std::net::Ipv4Addr>,
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
    ) -> CmResponder {
        CmResponder {
            local,
            local_mac,
            services,
            conns: Vec::new(),
            verify_icrc,
            recv_credits: 4096,
            refused_logged: std::collections::HashSet::new(),
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

    /// A starting PSN for a new QP, from the kernel's random source: a peer that did not see
    /// the REP cannot guess where the QP's sequence starts.
    fn next_psn(&mut self) -> Psn {
        Psn::new(dta_io::random::random_u32())
    }

    /// A random local communication ID that no live connection uses (and not 0, which a REJ
    /// sends for "never allocated"): a forged DREQ or RTU must name it.
    fn next_comm_id(&mut self) -> u32 {
        loop {
            let id = dta_io::random::random_u32();
            if id != 0 && !self.conns.iter().any(|c| c.local_comm_id == id) {
                return id;
            }
        }
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
                let allow = &self.services[si].allow;
                if !allow.allows(*peer.ip()) {
                    let first = self.refused_logged.len() < REFUSED_LOGGED
                        && self.refused_logged.insert(*peer.ip());
                    let level = if first {
                        log::Level::Warn
                    } else {
                        log::Level::Debug
                    };
                    log::log!(
                        level,
                        "RDMA_CM: refused a REQ from {peer} for store {:?}: not in its cm_allow                          list ({allow})",
                        self.services[si].name
                    );
                    self.counters.cm_rejected += 1;
                    let mut rej = reject(rej_reason::CONSUMER_REJECT);
                    rej.private_data[..NOT_ALLOWED_TEXT.len()].copy_from_slice(NOT_ALLOWED_TEXT);
                    if self.send(peer, p.hdr.tid, &CmMessage::Rej(rej), l2, tx) {
                        self.counters.cm_rej_sent += 1;
                    }
                    return;
                }
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
                let local_comm_id = self.next_comm_id();
                let mut private_data = [0u8; REP_PRIVATE_DATA_LEN];
                let name = self.services[si].name.as_bytes();
                let n = name.len().min(64);
                private_data[..n].copy_from_slice(&name[..n]);
                if self.services[si].record_in_rep {
                    let at = dta_proto::zero::RECORD_REP_OFFSET;
                    private_data[at..at + 64].copy_from_slice(&self.services[si].record);
                }
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
                if self.services[svc].record_in_rep {
                    return;
                }
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
                let drep = dreq.answer();
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

#[cfg(test)]
mod peer_limit_tests {
    use super::*;

    #[test]
    fn a_peers_oldest_connections_make_room_for_a_new_one() {
        // Fewer than the bound: nothing goes.
        let live: Vec<(u32, u64)> = (0..MAX_CONNS_PER_PEER as u32 - 1)
            .map(|k| (k, 100 + k as u64))
            .collect();
        assert!(beyond_peer_limit(live).is_empty());
        // At the bound, out of order: the oldest one goes, so the new one makes the bound.
        let mut live: Vec<(u32, u64)> = (0..MAX_CONNS_PER_PEER as u32)
            .map(|k| (k, 1_000 - k as u64))
            .collect();
        live.reverse();
        assert_eq!(beyond_peer_limit(live), vec![MAX_CONNS_PER_PEER as u32 - 1]);
        // Far beyond (a bound lowered, a table inherited): the oldest, oldest first.
        let live: Vec<(u32, u64)> = (0..MAX_CONNS_PER_PEER as u32 + 3)
            .map(|k| (k, k as u64))
            .collect();
        assert_eq!(beyond_peer_limit(live), vec![0, 1, 2, 3]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::responder::DeviceConfig;
    use dta_proto::wire::mad::{rdma_cm_service_id, CmReq};
    use std::net::Ipv4Addr;

    const PORT: u16 = 1337;

    fn listener(allow: PeerAllowlist) -> (CmResponder, Responder) {
        let local = SocketAddrV4::new(Ipv4Addr::LOCALHOST, 4791);
        let rnic = Responder::new(DeviceConfig::default());
        let svc = Service {
            port: PORT,
            name: "kw".into(),
            record: [0; 64],
            record_in_rep: false,
            heads: None,
            allow,
        };
        let cm = CmResponder::new(local, MacAddr([2, 0, 0, 0, 0, 0x51]), vec![svc], true);
        (cm, rnic)
    }

    /// Sends a REQ for `PORT` from `peer` and returns what the listener answered.
    fn req_from(
        cm: &mut CmResponder,
        rnic: &mut Responder,
        peer: SocketAddrV4,
        comm_id: u32,
    ) -> Vec<CmMessage> {
        let req = CmReq {
            local_comm_id: comm_id,
            service_id: rdma_cm_service_id(PORT),
            local_ca_guid: 0x1234,
            local_qpn: 0x99,
            starting_psn: 7,
            initiator_depth: 1,
            responder_resources: 1,
            ..CmReq::default()
        };
        let ep = RoceEndpoint {
            src_ip: *peer.ip(),
            src_port: peer.port(),
            dst_ip: Ipv4Addr::LOCALHOST,
            dst_port: 4791,
            ..RoceEndpoint::default()
        };
        let mut frame = [0u8; 512];
        let n = build_cm_frame(
            &ep,
            Psn::new(0),
            &MadHeaderRepr::cm_send(0x77, 0),
            &CmMessage::Req(req),
            &mut frame,
        );
        let d = Datagram {
            src: peer,
            dst: SocketAddrV4::new(Ipv4Addr::LOCALHOST, 4791),
            ip: None,
            payload: &frame[L2L4_LEN..n],
        };
        let mut tx = TxBatch::new(16, 2048);
        cm.handle(0, &d, rnic, &mut tx);
        (0..tx.len())
            .map(|i| {
                assert_eq!(tx.dest(i), peer, "answers go to the requester");
                parse_cm(tx.payload(i)).expect("a CM MAD").msg
            })
            .collect()
    }

    #[test]
    fn a_req_from_outside_the_allowlist_gets_a_consumer_reject_and_no_qp() {
        let allow = PeerAllowlist::new(vec!["127.0.0.1/32".parse().unwrap()]);
        let (mut cm, mut rnic) = listener(allow);
        let stranger = SocketAddrV4::new(Ipv4Addr::new(127, 0, 0, 2), 40000);
        let out = req_from(&mut cm, &mut rnic, stranger, 0xabc);
        match out.as_slice() {
            [CmMessage::Rej(rej)] => {
                assert_eq!(rej.reason, rej_reason::CONSUMER_REJECT);
                assert_eq!(rej.msg_rejected, MSG_REQ);
                assert_eq!(rej.remote_comm_id, 0xabc);
                assert!(rej.private_data.starts_with(NOT_ALLOWED_TEXT));
            }
            other => panic!("expected one REJ, got {other:?}"),
        }
        assert_eq!(cm.counters.cm_rejected, 1);
        assert_eq!(cm.counters.cm_rej_sent, 1);
        assert!(cm.connections().is_empty());
        assert!(rnic.qpns().is_empty(), "a refused REQ creates no QP");
        // Retrying changes nothing but the counters.
        req_from(&mut cm, &mut rnic, stranger, 0xabc);
        assert_eq!(cm.counters.cm_rejected, 2);
        assert!(rnic.qpns().is_empty());

        // The allowed peer is served, and a later refused REQ does not disturb its connection.
        let friend = SocketAddrV4::new(Ipv4Addr::LOCALHOST, 40001);
        let out = req_from(&mut cm, &mut rnic, friend, 0xdef);
        assert!(matches!(out.as_slice(), [CmMessage::Rep(_)]), "{out:?}");
        req_from(&mut cm, &mut rnic, stranger, 0xdef);
        assert_eq!(cm.connections().len(), 1);
        assert_eq!(rnic.qpns().len(), 1);
        assert_eq!(cm.counters.cm_rejected, 3);
    }

    #[test]
    fn starting_psns_and_comm_ids_are_random() {
        let (mut cm, mut rnic) = listener(PeerAllowlist::any());
        let reps: Vec<CmRep> = (0..8)
            .map(|i| {
                let peer = SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 1 + i as u8), 4791);
                match req_from(&mut cm, &mut rnic, peer, 100 + i).as_slice() {
                    [CmMessage::Rep(r)] => *r,
                    o => panic!("{o:?}"),
                }
            })
            .collect();
        // An LCG or a counter would show constant differences; random values do not (the odds
        // of 7 equal differences at random are 2^-168).
        for f in [|r: &CmRep| r.starting_psn, |r: &CmRep| r.local_comm_id] {
            let v: Vec<u32> = reps.iter().map(f).collect();
            let d: Vec<u32> = v.windows(2).map(|w| w[1].wrapping_sub(w[0])).collect();
            assert!(d.iter().any(|x| *x != d[0]), "{v:x?}");
        }
    }
}
