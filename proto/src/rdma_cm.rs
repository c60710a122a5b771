//! RDMA_CM, active side: one sans-I/O initiator of RC connections, shared by the translator
//! (one connection per collector store) and the pull collector (one per agent).
//!
//! ```text
//!   connect(key) ─▶ REQ (our QPN, starting PSN, service = port)    retransmitted every
//!                                                                  req_timeout_ns, req_tries times
//!   REP ─▶ RTU (again for a repeated REP); Event::Established once
//!         (a REP that `accept_rep` refuses: REJ "consumer reject", Event::Failed)
//!   REJ ─▶ Event::Failed (Rejected)        silence ─▶ Event::Failed (Timeout)
//!
//!   disconnect(key) ─▶ DREQ, retransmitted every dreq_timeout_ns until the DREP, or given up
//!                      after dreq_tries (Event::Closed, confirmed or not)
//!   DREQ from the peer ─▶ DREP; Event::Failed (Disconnected) for a live connection
//! ```
//!
//! It is fed received CM MADs ([`Initiator::handle`]) and the time ([`Initiator::poll`], due at
//! [`Initiator::next_deadline`]); it writes what it sends into a caller-supplied
//! [`TxBatch`] and queues what the caller must learn as [`Event`]s, drained with
//! [`Initiator::poll_event`]. It owns the CM exchange and its timers, nothing after the RTU:
//! what a connection carries (the translator's metadata record and PSN probe, the agent's
//! region record in the REP) is its owner's. No I/O, no clock, no logging.
//!
//! Each connection has a caller-chosen key (a store's port, an agent's index). At most one
//! connection per key is live (connecting or established); connections being closed are
//! kept apart until their DREP, so a new connection of the same key may start at once.

use std::collections::{HashMap, VecDeque};
use std::net::{Ipv4Addr, SocketAddrV4};

use crate::batch::{Datagram, TxBatch};
use crate::wire::cm::{build_cm_frame, parse_cm};
use crate::wire::ethernet::MacAddr;
use crate::wire::ib::{Psn, Qpn};
use crate::wire::mad::{
    rej_reason, CmDreq, CmMessage, CmRej, CmRep, CmReq, CmRtu, MadHeaderRepr, MSG_REP,
};
use crate::wire::roce::{RoceEndpoint, L2L4_LEN};

/// How an [`Initiator`] identifies itself and times its retransmissions.
#[derive(Debug, Clone)]
pub struct InitiatorConfig {
    /// Our RoCEv2 address (the REQ's source; the peer answers here).
    pub local: SocketAddrV4,
    /// Our MAC: the source of frames when `l2_frames` is set.
    pub local_mac: MacAddr,
    /// Whole Ethernet frames are sent (a raw-frame backend); false: a kernel UDP socket sends
    /// each frame from its BTH on.
    pub l2_frames: bool,
    /// The Local CA GUID every REQ carries.
    pub ca_guid: u64,
    /// The first local communication ID (odd; each connection takes the next by steps of 2).
    pub first_comm_id: u32,
    /// Transaction IDs are this plus 1, 2, ... (one per connection).
    pub tid_base: u64,
    /// REQ retransmission interval (ns).
    pub req_timeout_ns: u64,
    /// REQs sent before an attempt fails.
    pub req_tries: u32,
    /// DREQ retransmission interval (ns).
    pub dreq_timeout_ns: u64,
    /// DREQs sent before a disconnection is given up.
    pub dreq_tries: u32,
    /// RDMA READ/atomic requests we ask the peer to accept in flight (the REQ's initiator
    /// depth; our responder resources are 0: we answer none).
    pub initiator_depth: u8,
    /// Whether a REP's content is usable (e.g. its private data); a refused REP is answered
    /// with a REJ (consumer reject) instead of the RTU and fails the attempt.
    pub accept_rep: fn(&CmRep) -> bool,
}

impl InitiatorConfig {
    /// An initiator at `local` (L3 frames, MAC zero) with `seed`-derived communication and
    /// transaction IDs, accepting every REP; the timings are the caller's.
    pub fn new(local: SocketAddrV4, seed: u32) -> InitiatorConfig {
        InitiatorConfig {
            local,
            local_mac: MacAddr::ZERO,
            l2_frames: false,
            ca_guid: 0x0200_00ff_fe00_0001,
            first_comm_id: seed | 1,
            tid_base: (seed as u64) << 16,
            req_timeout_ns: 250_000_000,
            req_tries: 8,
            dreq_timeout_ns: 100_000_000,
            dreq_tries: 5,
            initiator_depth: 16,
            accept_rep: |_| true,
        }
    }
}

/// Why a live connection (or an attempt) ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failure {
    /// The peer sent a REJ with this reason.
    Rejected(u16),
    /// `accept_rep` refused the REP (we sent a REJ).
    RepRefused,
    /// No REP through every REQ.
    Timeout,
    /// The peer closed the connection (DREQ; we answered with a DREP).
    Disconnected,
}

/// What the caller learns, in order, from [`Initiator::poll_event`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event<K> {
    /// The first REP of a connection arrived and was accepted; the RTU is sent.
    Established {
        /// The connection's key.
        key: K,
        /// Our QPN (as given to [`Initiator::connect`]).
        local_qpn: Qpn,
        /// The REP (the peer's QPN, its starting PSN, resources and private data).
        rep: Box<CmRep>,
    },
    /// A live connection or an attempt ended; the key is free.
    Failed {
        /// The connection's key.
        key: K,
        /// Why.
        cause: Failure,
    },
    /// A connection being closed is gone: the peer confirmed (DREP, its own DREQ or a REJ),
    /// or every DREQ went unanswered.
    Closed {
        /// The connection's key (another connection of it may be live by now).
        key: K,
        /// False if the peer never answered.
        confirmed: bool,
    },
}

crate::define_counters!(
    /// RDMA_CM initiator counters.
    pub struct InitiatorCounters {
        /// REQs sent (including retransmissions).
        cm_req_sent,
        /// REPs received.
        cm_rep,
        /// Connections established (first REP accepted).
        cm_established,
        /// REPs refused by `accept_rep` (answered with a REJ).
        cm_rep_refused,
        /// REJs received.
        cm_rej,
        /// Attempts that timed out.
        cm_timeouts,
        /// DREQs sent (including retransmissions).
        cm_dreq_sent,
        /// DREPs received for our DREQs.
        cm_drep,
        /// Disconnections given up without a DREP.
        cm_dreq_timeouts,
        /// DREQs received from peers (answered with a DREP).
        cm_dreq_received,
        /// CM packets that did not parse or matched no connection.
        cm_invalid,
    }
);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// REQ sent, no REP yet.
    ReqSent { sent_at: u64, tries: u32 },
    /// REP received and accepted: the peer's QP is ours until a DREQ.
    Established { remote_qpn: Qpn },
    /// DREQ sent; waiting for the DREP.
    Closing {
        remote_qpn: Qpn,
        sent_at: u64,
        tries: u32,
    },
}

#[derive(Debug, Clone)]
struct Conn<K> {
    key: K,
    peer: SocketAddrV4,
    peer_mac: MacAddr,
    local_comm_id: u32,
    remote_comm_id: u32,
    tid: u64,
    req: CmReq,
    state: State,
}

impl<K> Conn<K> {
    fn live(&self) -> bool {
        !matches!(self.state, State::Closing { .. })
    }
}

/// The RDMA_CM initiator (module docs), its connections keyed by `K`.
#[derive(Debug)]
pub struct Initiator<K> {
    cfg: InitiatorConfig,
    conns: Vec<Conn<K>>,
    /// Where each peer we connected to is (a DREQ that names no connection is answered there).
    peers: HashMap<Ipv4Addr, (SocketAddrV4, MacAddr)>,
    next_comm_id: u32,
    next_tid: u64,
    events: VecDeque<Event<K>>,
    /// The earliest timer of any connection (cached: recomputed after each change).
    deadline: Option<u64>,
    /// Counters.
    pub counters: InitiatorCounters,
}

impl<K: Copy + Eq> Initiator<K> {
    /// An initiator with no connections.
    pub fn new(cfg: InitiatorConfig) -> Initiator<K> {
        Initiator {
            next_comm_id: cfg.first_comm_id,
            next_tid: cfg.tid_base,
            cfg,
            conns: Vec::new(),
            peers: HashMap::new(),
            events: VecDeque::new(),
            deadline: None,
            counters: InitiatorCounters::default(),
        }
    }

    /// The configuration.
    pub fn config(&self) -> &InitiatorConfig {
        &self.cfg
    }

    /// Sends `guid` as the Local CA GUID of every later REQ.
    pub fn set_ca_guid(&mut self, guid: u64) {
        self.cfg.ca_guid = guid;
    }

    fn send(
        &self,
        peer: SocketAddrV4,
        peer_mac: MacAddr,
        tid: u64,
        msg: &CmMessage,
        tx: &mut TxBatch,
    ) -> bool {
        let ep = RoceEndpoint {
            src_mac: self.cfg.local_mac,
            dst_mac: peer_mac,
            src_ip: *self.cfg.local.ip(),
            dst_ip: *peer.ip(),
            src_port: self.cfg.local.port(),
            dst_port: peer.port(),
            ttl: 64,
            tos: 0,
            ident: 0,
        };
        let off = if self.cfg.l2_frames { 0 } else { L2L4_LEN };
        let hdr = MadHeaderRepr::cm_send(tid, 0);
        tx.push_with(peer, off, |b| {
            build_cm_frame(&ep, Psn::new(0), &hdr, msg, b)
        })
    }

    fn send_req(&mut self, i: usize, tx: &mut TxBatch) {
        let c = &self.conns[i];
        if self.send(c.peer, c.peer_mac, c.tid, &CmMessage::Req(c.req), tx) {
            self.counters.cm_req_sent += 1;
        }
    }

    fn send_dreq(&mut self, i: usize, remote_qpn: Qpn, tx: &mut TxBatch) {
        let c = &self.conns[i];
        let msg = CmMessage::Dreq(CmDreq {
            local_comm_id: c.local_comm_id,
            remote_comm_id: c.remote_comm_id,
            remote_qpn_eecn: remote_qpn.value(),
            ..CmDreq::default()
        });
        if self.send(c.peer, c.peer_mac, c.tid, &msg, tx) {
            self.counters.cm_dreq_sent += 1;
        }
    }

    /// Starts connecting our QP `local_qpn` (first PSN `start_psn`) to the service on rdma_cm
    /// `port` at `peer` (`peer_mac`: the destination of whole frames). The live connection of
    /// `key`, if any, is closed first ([`Initiator::disconnect`]).
    #[allow(clippy::too_many_arguments)]
    pub fn connect(
        &mut self,
        key: K,
        (peer, peer_mac): (SocketAddrV4, MacAddr),
        port: u16,
        local_qpn: Qpn,
        start_psn: Psn,
        now: u64,
        tx: &mut TxBatch,
    ) {
        self.close_live(key, now, tx);
        self.peers.insert(*peer.ip(), (peer, peer_mac));
        let local_comm_id = self.next_comm_id;
        self.next_comm_id = self.next_comm_id.wrapping_add(2);
        self.next_tid += 1;
        // We never answer READs: offer none, ask for `initiator_depth`.
        let req = CmReq::rc_connect(
            local_comm_id,
            port,
            self.cfg.ca_guid,
            local_qpn.value(),
            start_psn.value(),
            self.cfg.local,
            *peer.ip(),
            0,
            self.cfg.initiator_depth,
        );
        self.conns.push(Conn {
            key,
            peer,
            peer_mac,
            local_comm_id,
            remote_comm_id: 0,
            tid: self.next_tid,
            req,
            state: State::ReqSent {
                sent_at: now,
                tries: 1,
            },
        });
        self.send_req(self.conns.len() - 1, tx);
        self.update_deadline();
    }

    /// Closes `key`'s live connection: a DREQ, retransmitted by [`Initiator::poll`] until the
    /// DREP, if the peer named its side (REP); an attempt it never answered is forgotten. No
    /// event for the closed connection but its final [`Event::Closed`].
    pub fn disconnect(&mut self, key: K, now: u64, tx: &mut TxBatch) {
        self.close_live(key, now, tx);
        self.update_deadline();
    }

    /// Closes every live connection, as [`Initiator::disconnect`].
    pub fn disconnect_all(&mut self, now: u64, tx: &mut TxBatch) {
        let mut i = 0;
        while i < self.conns.len() {
            if self.close(i, now, tx) {
                i += 1;
            }
        }
        self.update_deadline();
    }

    /// Forgets `key`'s live connection without a word to the peer (what it carries failed;
    /// the peer's QP is left to its own timers) and without an event.
    pub fn forget(&mut self, key: K) {
        self.conns.retain(|c| !(c.key == key && c.live()));
        self.update_deadline();
    }

    fn close_live(&mut self, key: K, now: u64, tx: &mut TxBatch) {
        if let Some(i) = self.conns.iter().position(|c| c.key == key && c.live()) {
            self.close(i, now, tx);
        }
    }

    /// Turns connection `i` into a closing one and sends its DREQ; removes it instead (false)
    /// if the peer never named its side.
    fn close(&mut self, i: usize, now: u64, tx: &mut TxBatch) -> bool {
        let remote_qpn = match self.conns[i].state {
            State::Closing { .. } => return true,
            State::ReqSent { .. } => {
                self.conns.remove(i);
                return false;
            }
            State::Established { remote_qpn } => remote_qpn,
        };
        self.conns[i].state = State::Closing {
            remote_qpn,
            sent_at: now,
            tries: 1,
        };
        self.send_dreq(i, remote_qpn, tx);
        true
    }

    /// True if `key` has a live connection (connecting or established).
    pub fn is_live(&self, key: K) -> bool {
        self.conns.iter().any(|c| c.key == key && c.live())
    }

    /// True if `key`'s live connection is established (its REP accepted).
    pub fn is_established(&self, key: K) -> bool {
        self.conns
            .iter()
            .any(|c| c.key == key && matches!(c.state, State::Established { .. }))
    }

    /// Attempts waiting for a REP.
    pub fn connecting(&self) -> usize {
        self.conns
            .iter()
            .filter(|c| matches!(c.state, State::ReqSent { .. }))
            .count()
    }

    /// True while a DREQ waits for its DREP.
    pub fn closing(&self) -> bool {
        self.conns.iter().any(|c| !c.live())
    }

    /// Handles a CM MAD (a datagram to the GSI QP) from a peer.
    pub fn handle(&mut self, d: &Datagram<'_>, tx: &mut TxBatch) {
        let Ok(p) = parse_cm(d.payload) else {
            self.counters.cm_invalid += 1;
            return;
        };
        let find = |conns: &[Conn<K>], id: u32| {
            conns
                .iter()
                .position(|c| c.local_comm_id == id && c.peer.ip() == d.src.ip())
        };
        match p.msg {
            CmMessage::Rep(rep) => {
                let Some(i) = find(&self.conns, rep.remote_comm_id) else {
                    self.counters.cm_invalid += 1;
                    return;
                };
                self.counters.cm_rep += 1;
                self.on_rep(i, &rep, tx);
            }
            CmMessage::Rej(rej) => {
                let Some(i) = find(&self.conns, rej.remote_comm_id) else {
                    return;
                };
                self.counters.cm_rej += 1;
                let c = self.conns.remove(i);
                self.events.push_back(if c.live() {
                    Event::Failed {
                        key: c.key,
                        cause: Failure::Rejected(rej.reason),
                    }
                } else {
                    Event::Closed {
                        key: c.key,
                        confirmed: true,
                    }
                });
            }
            CmMessage::Drep(drep) => {
                let Some(i) =
                    find(&self.conns, drep.remote_comm_id).filter(|&i| !self.conns[i].live())
                else {
                    // A DREP again (our retransmitted DREQ crossed it): nothing left to close.
                    self.counters.cm_invalid += 1;
                    return;
                };
                self.counters.cm_drep += 1;
                let c = self.conns.remove(i);
                self.events.push_back(Event::Closed {
                    key: c.key,
                    confirmed: true,
                });
            }
            CmMessage::Dreq(dreq) => {
                // The peer released the QP: confirm, whether or not we still know it.
                self.counters.cm_dreq_received += 1;
                let i = find(&self.conns, dreq.remote_comm_id);
                let (peer, peer_mac) = match i {
                    Some(i) => (self.conns[i].peer, self.conns[i].peer_mac),
                    None => self
                        .peers
                        .get(d.src.ip())
                        .copied()
                        .unwrap_or((d.src, MacAddr::BROADCAST)),
                };
                self.send(
                    peer,
                    peer_mac,
                    p.hdr.tid,
                    &CmMessage::Drep(dreq.answer()),
                    tx,
                );
                if let Some(i) = i {
                    let c = self.conns.remove(i);
                    self.events.push_back(if c.live() {
                        Event::Failed {
                            key: c.key,
                            cause: Failure::Disconnected,
                        }
                    } else {
                        Event::Closed {
                            key: c.key,
                            confirmed: true,
                        }
                    });
                }
            }
            _ => self.counters.cm_invalid += 1,
        }
        self.update_deadline();
    }

    fn on_rep(&mut self, i: usize, rep: &CmRep, tx: &mut TxBatch) {
        let c = &mut self.conns[i];
        c.remote_comm_id = rep.local_comm_id;
        let (key, peer, peer_mac, tid, local_comm_id) =
            (c.key, c.peer, c.peer_mac, c.tid, c.local_comm_id);
        if c.live() && !(self.cfg.accept_rep)(rep) {
            self.counters.cm_rep_refused += 1;
            let rej = CmMessage::Rej(CmRej {
                local_comm_id,
                remote_comm_id: rep.local_comm_id,
                msg_rejected: MSG_REP,
                reason: rej_reason::CONSUMER_REJECT,
                ..CmRej::default()
            });
            self.conns.remove(i);
            self.send(peer, peer_mac, tid, &rej, tx);
            self.events.push_back(Event::Failed {
                key,
                cause: Failure::RepRefused,
            });
            return;
        }
        let first = matches!(c.state, State::ReqSent { .. });
        if first {
            c.state = State::Established {
                remote_qpn: Qpn::new(rep.local_qpn),
            };
        }
        let local_qpn = Qpn::new(c.req.local_qpn);
        // (Re)send the RTU: a repeated REP means the peer did not get it.
        let rtu = CmMessage::Rtu(CmRtu {
            local_comm_id,
            remote_comm_id: rep.local_comm_id,
            ..CmRtu::default()
        });
        self.send(peer, peer_mac, tid, &rtu, tx);
        if first {
            self.counters.cm_established += 1;
            self.events.push_back(Event::Established {
                key,
                local_qpn,
                rep: Box::new(*rep),
            });
        }
    }

    /// Retransmits overdue REQs and DREQs; fails attempts and gives up disconnections that
    /// ran out of tries (queued as events). Cheap before [`Initiator::next_deadline`].
    pub fn poll(&mut self, now: u64, tx: &mut TxBatch) {
        if self.deadline.is_none_or(|t| now < t) {
            return;
        }
        let mut i = 0;
        while i < self.conns.len() {
            match self.conns[i].state {
                State::ReqSent { sent_at, tries }
                    if now.saturating_sub(sent_at) >= self.cfg.req_timeout_ns =>
                {
                    if tries >= self.cfg.req_tries {
                        let c = self.conns.remove(i);
                        self.counters.cm_timeouts += 1;
                        self.events.push_back(Event::Failed {
                            key: c.key,
                            cause: Failure::Timeout,
                        });
                        continue;
                    }
                    self.send_req(i, tx);
                    self.conns[i].state = State::ReqSent {
                        sent_at: now,
                        tries: tries + 1,
                    };
                }
                State::Closing {
                    remote_qpn,
                    sent_at,
                    tries,
                } if now.saturating_sub(sent_at) >= self.cfg.dreq_timeout_ns => {
                    if tries >= self.cfg.dreq_tries {
                        let c = self.conns.remove(i);
                        self.counters.cm_dreq_timeouts += 1;
                        self.events.push_back(Event::Closed {
                            key: c.key,
                            confirmed: false,
                        });
                        continue;
                    }
                    self.send_dreq(i, remote_qpn, tx);
                    self.conns[i].state = State::Closing {
                        remote_qpn,
                        sent_at: now,
                        tries: tries + 1,
                    };
                }
                _ => {}
            }
            i += 1;
        }
        self.update_deadline();
    }

    /// The next event, oldest first.
    pub fn poll_event(&mut self) -> Option<Event<K>> {
        self.events.pop_front()
    }

    /// When [`Initiator::poll`] next has work (ns), if ever.
    pub fn next_deadline(&self) -> Option<u64> {
        self.deadline
    }

    fn update_deadline(&mut self) {
        let (req, dreq) = (self.cfg.req_timeout_ns, self.cfg.dreq_timeout_ns);
        self.deadline = self
            .conns
            .iter()
            .filter_map(|c| match c.state {
                State::ReqSent { sent_at, .. } => Some(sent_at + req),
                State::Closing { sent_at, .. } => Some(sent_at + dreq),
                State::Established { .. } => None,
            })
            .min();
    }
}

#[cfg(test)]
mod tests;
