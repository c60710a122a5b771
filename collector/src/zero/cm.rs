//! RDMA_CM, initiator side, for the pull collector: one RC connection to each agent.
//!
//! ```text
//!  pull collector                        agent
//!   REQ (service, our QPN, PSN)       ─▶      retransmitted until answered
//!                                    ◀─ REP (its QPN, the PSN it expects, READs it answers in
//!                                        flight; private data: name, region record)
//!   RTU                               ─▶      (again for a repeated REP)
//!   READs at the REP's starting PSN   ─▶
//!   DREQ ─▶ ◀─ DREP                           either side may close
//! ```
//!
//! The region record ([`dta_proto::zero::RegionRecord`], REP private data bytes 64..128) tells
//! where the region is and its R_Key, so nothing follows the RTU. An agent's REJ, a REP with
//! no valid record, or silence through [`REQ_TRIES`] REQs fails the attempt; the caller retries
//! later.

use std::net::SocketAddrV4;

use dta_proto::batch::{Datagram, TxBatch};
use dta_proto::wire::cm::{build_cm_frame, parse_cm};
use dta_proto::wire::ethernet::MacAddr;
use dta_proto::wire::ib::{Psn, Qpn};
use dta_proto::wire::mad::{
    rej_reason, CmDreq, CmMessage, CmRej, CmReq, CmRtu, MadHeaderRepr, MSG_REP,
};
use dta_proto::wire::roce::{RoceEndpoint, L2L4_LEN};
use dta_proto::zero::{RegionRecord, RECORD_LEN, RECORD_REP_OFFSET};

/// REQ retransmission interval (ns).
pub const REQ_TIMEOUT_NS: u64 = 200_000_000;
/// REQs sent before an attempt fails.
pub const REQ_TRIES: u32 = 5;
/// READs we ask an agent to accept in flight (its REP may grant fewer).
pub const INITIATOR_DEPTH: u8 = 16;

dta_proto::define_counters!(
    /// The pull collector's RDMA_CM counters.
    pub struct PullCmCounters {
        /// REQs sent (with retransmissions).
        cm_req_sent,
        /// REPs received.
        cm_rep,
        /// Connections established.
        cm_established,
        /// REJs received.
        cm_rej,
        /// REPs without a valid region record (answered with a REJ).
        cm_bad_record,
        /// Attempts that timed out.
        cm_timeouts,
        /// DREQs received from agents.
        cm_dreq_received,
        /// DREQs sent.
        cm_dreq_sent,
        /// CM packets that did not parse or named no attempt.
        cm_invalid,
    }
);

/// What a connection attempt ended in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PullCmEvent {
    /// Connected: READ with these.
    Up {
        /// The caller's agent index.
        agent: usize,
        /// Our QPN (as given to [`PullCm::connect`]).
        local_qpn: Qpn,
        /// The agent's QPN.
        peer_qpn: Qpn,
        /// The PSN the agent expects first.
        start_psn: Psn,
        /// READs the agent answers in flight.
        max_reads: u8,
        /// Where its region is.
        record: RegionRecord,
    },
    /// The attempt failed or the agent closed the connection.
    Down {
        /// The caller's agent index.
        agent: usize,
        /// A REJ's reason; `None` for a timeout, a bad record or a DREQ.
        reason: Option<u16>,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    ReqSent { sent_at: u64, tries: u32 },
    Up,
}

#[derive(Debug, Clone)]
struct Conn {
    agent: usize,
    peer: SocketAddrV4,
    local_comm_id: u32,
    remote_comm_id: u32,
    tid: u64,
    req: CmReq,
    state: State,
}

/// The RDMA_CM initiator of one collecting thread (module docs).
#[derive(Debug)]
pub struct PullCm {
    local: SocketAddrV4,
    ca_guid: u64,
    conns: Vec<Conn>,
    next_comm_id: u32,
    next_tid: u64,
    /// Counters.
    pub counters: PullCmCounters,
}

impl PullCm {
    /// An initiator sending from our RoCEv2 address `local`; `seed` varies communication and
    /// transaction IDs between runs.
    pub fn new(local: SocketAddrV4, seed: u32) -> PullCm {
        PullCm {
            local,
            ca_guid: 0x0200_00ff_0000_0000 | seed as u64,
            conns: Vec::new(),
            next_comm_id: seed | 1,
            next_tid: (seed as u64) << 20,
            counters: PullCmCounters::default(),
        }
    }

    fn ep(&self, peer: SocketAddrV4) -> RoceEndpoint {
        RoceEndpoint {
            src_mac: MacAddr::ZERO,
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

    fn send(&self, peer: SocketAddrV4, tid: u64, msg: &CmMessage, tx: &mut TxBatch) -> bool {
        let ep = self.ep(peer);
        let hdr = MadHeaderRepr::cm_send(tid, 0);
        tx.push_with(peer, L2L4_LEN, |b| {
            build_cm_frame(&ep, Psn::new(0), &hdr, msg, b)
        })
    }

    /// Starts connecting `agent` at `peer` (its RoCEv2 address) on rdma_cm service `port`,
    /// with our QP `local_qpn` (its PSNs are the agent's to choose: we send at the REP's).
    /// Replaces an earlier attempt or connection of the same agent (without a DREQ: call
    /// [`PullCm::disconnect`] first to close one).
    pub fn connect(
        &mut self,
        agent: usize,
        peer: SocketAddrV4,
        port: u16,
        local_qpn: Qpn,
        now: u64,
        tx: &mut TxBatch,
    ) {
        self.conns.retain(|c| c.agent != agent);
        let local_comm_id = self.next_comm_id;
        self.next_comm_id = self.next_comm_id.wrapping_add(2);
        self.next_tid += 1;
        // We answer no READs (responder resources 0) and issue up to INITIATOR_DEPTH.
        let req = CmReq::rc_connect(
            local_comm_id,
            port,
            self.ca_guid,
            local_qpn.value(),
            dta_io::random::random_u32() & 0xff_ffff,
            self.local,
            *peer.ip(),
            0,
            INITIATOR_DEPTH,
        );
        let c = Conn {
            agent,
            peer,
            local_comm_id,
            remote_comm_id: 0,
            tid: self.next_tid,
            req,
            state: State::ReqSent {
                sent_at: now,
                tries: 1,
            },
        };
        if self.send(peer, c.tid, &CmMessage::Req(req), tx) {
            self.counters.cm_req_sent += 1;
        }
        self.conns.push(c);
    }

    /// Closes `agent`'s connection with a DREQ (sent once: an agent that misses it finds the
    /// QP idle and keeps it until we connect again, which replaces it).
    pub fn disconnect(&mut self, agent: usize, tx: &mut TxBatch) {
        let Some(k) = self.conns.iter().position(|c| c.agent == agent) else {
            return;
        };
        let c = self.conns.remove(k);
        if c.state == State::Up {
            let dreq = CmMessage::Dreq(CmDreq {
                local_comm_id: c.local_comm_id,
                remote_comm_id: c.remote_comm_id,
                remote_qpn_eecn: 0,
                ..CmDreq::default()
            });
            if self.send(c.peer, c.tid, &dreq, tx) {
                self.counters.cm_dreq_sent += 1;
            }
        }
    }

    /// Handles a CM MAD (the caller checked `is_gsi`).
    pub fn handle(&mut self, d: &Datagram<'_>, tx: &mut TxBatch) -> Option<PullCmEvent> {
        let Ok(p) = parse_cm(d.payload) else {
            self.counters.cm_invalid += 1;
            return None;
        };
        let find = |conns: &[Conn], id: u32| {
            conns
                .iter()
                .position(|c| c.local_comm_id == id && c.peer.ip() == d.src.ip())
        };
        match p.msg {
            CmMessage::Rep(rep) => {
                let Some(i) = find(&self.conns, rep.remote_comm_id) else {
                    self.counters.cm_invalid += 1;
                    return None;
                };
                self.counters.cm_rep += 1;
                let at = RECORD_REP_OFFSET;
                let record = RegionRecord::decode(&rep.private_data[at..at + RECORD_LEN]);
                let c = &mut self.conns[i];
                c.remote_comm_id = rep.local_comm_id;
                let (peer, tid, agent) = (c.peer, c.tid, c.agent);
                let Ok(record) = record else {
                    self.counters.cm_bad_record += 1;
                    let rej = CmMessage::Rej(CmRej {
                        local_comm_id: c.local_comm_id,
                        remote_comm_id: rep.local_comm_id,
                        msg_rejected: MSG_REP,
                        reason: rej_reason::CONSUMER_REJECT,
                        ..CmRej::default()
                    });
                    self.conns.remove(i);
                    self.send(peer, tid, &rej, tx);
                    return Some(PullCmEvent::Down {
                        agent,
                        reason: None,
                    });
                };
                // (Re)send the RTU: a repeated REP means the agent did not get it.
                let rtu = CmMessage::Rtu(CmRtu {
                    local_comm_id: c.local_comm_id,
                    remote_comm_id: c.remote_comm_id,
                    ..CmRtu::default()
                });
                let first = c.state != State::Up;
                c.state = State::Up;
                let local_qpn = Qpn::new(c.req.local_qpn);
                self.send(peer, tid, &rtu, tx);
                if !first {
                    return None;
                }
                self.counters.cm_established += 1;
                Some(PullCmEvent::Up {
                    agent,
                    local_qpn,
                    peer_qpn: Qpn::new(rep.local_qpn),
                    start_psn: Psn::new(rep.starting_psn),
                    max_reads: rep.responder_resources.clamp(1, INITIATOR_DEPTH),
                    record,
                })
            }
            CmMessage::Rej(rej) => {
                let i = find(&self.conns, rej.remote_comm_id)?;
                self.counters.cm_rej += 1;
                let c = self.conns.remove(i);
                Some(PullCmEvent::Down {
                    agent: c.agent,
                    reason: Some(rej.reason),
                })
            }
            CmMessage::Dreq(dreq) => {
                self.counters.cm_dreq_received += 1;
                let drep = CmMessage::Drep(dreq.answer());
                self.send(d.src, p.hdr.tid, &drep, tx);
                let i = find(&self.conns, dreq.remote_comm_id)?;
                let c = self.conns.remove(i);
                Some(PullCmEvent::Down {
                    agent: c.agent,
                    reason: None,
                })
            }
            // A DREP for a DREQ we sent: nothing is left to close.
            CmMessage::Drep(_) => None,
            _ => {
                self.counters.cm_invalid += 1;
                None
            }
        }
    }

    /// Resends overdue REQs; returns an attempt that ran out of tries.
    pub fn poll(&mut self, now: u64, tx: &mut TxBatch) -> Option<PullCmEvent> {
        let mut k = 0;
        while k < self.conns.len() {
            if let State::ReqSent { sent_at, tries } = self.conns[k].state {
                if now.saturating_sub(sent_at) >= REQ_TIMEOUT_NS {
                    if tries >= REQ_TRIES {
                        self.counters.cm_timeouts += 1;
                        let c = self.conns.remove(k);
                        return Some(PullCmEvent::Down {
                            agent: c.agent,
                            reason: None,
                        });
                    }
                    let (peer, tid, req) =
                        (self.conns[k].peer, self.conns[k].tid, self.conns[k].req);
                    if self.send(peer, tid, &CmMessage::Req(req), tx) {
                        self.counters.cm_req_sent += 1;
                    }
                    self.conns[k].state = State::ReqSent {
                        sent_at: now,
                        tries: tries + 1,
                    };
                }
            }
            k += 1;
        }
        None
    }

    /// Attempts in progress.
    pub fn connecting(&self) -> usize {
        self.conns
            .iter()
            .filter(|c| matches!(c.state, State::ReqSent { .. }))
            .count()
    }
}
