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
//! The CM exchange itself (REQ/REP/RTU, DREQ/DREP, retransmissions) is
//! [`dta_proto::rdma_cm::Initiator`], the one initiator the translator uses too; this module
//! only says what a usable REP is for the puller and turns the initiator's events into
//! [`PullCmEvent`]s. It may not touch the READs (that is [`super::reader`]).
//!
//! The region record ([`dta_proto::zero::RegionRecord`], REP private data bytes 64..128) tells
//! where the region is and its R_Key, so nothing follows the RTU. An agent's REJ, a REP with
//! no valid record, or silence through [`REQ_TRIES`] REQs fails the attempt; the caller retries
//! later. Events are queued: drain them with [`PullCm::poll_event`].

use std::collections::VecDeque;
use std::net::SocketAddrV4;

use dta_proto::batch::{Datagram, TxBatch};
use dta_proto::rdma_cm::{Event, Failure, Initiator, InitiatorConfig};
use dta_proto::wire::ethernet::MacAddr;
use dta_proto::wire::ib::{Psn, Qpn};
use dta_proto::wire::mad::CmRep;
use dta_proto::zero::{RegionRecord, RECORD_LEN, RECORD_REP_OFFSET};

/// REQ retransmission interval (ns).
pub const REQ_TIMEOUT_NS: u64 = 200_000_000;
/// REQs sent before an attempt fails.
pub const REQ_TRIES: u32 = 5;
/// READs we ask an agent to accept in flight (its REP may grant fewer).
pub const INITIATOR_DEPTH: u8 = 16;
/// How long a DREQ waits for its DREP before the initiator forgets the connection (ns). The
/// DREQ is sent once: an agent that misses it finds the QP idle and keeps it until we connect
/// again, which replaces it.
const DREQ_TIMEOUT_NS: u64 = 200_000_000;

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

/// The region record in a REP's private data, if it is a valid one.
fn record_of(rep: &CmRep) -> Option<RegionRecord> {
    let at = RECORD_REP_OFFSET;
    RegionRecord::decode(&rep.private_data[at..at + RECORD_LEN]).ok()
}

/// The RDMA_CM initiator of one collecting thread (module docs).
#[derive(Debug)]
pub struct PullCm {
    cm: Initiator<usize>,
    events: VecDeque<PullCmEvent>,
    /// Counters.
    pub counters: PullCmCounters,
}

impl PullCm {
    /// An initiator sending from our RoCEv2 address `local`; `seed` varies communication and
    /// transaction IDs between runs.
    pub fn new(local: SocketAddrV4, seed: u32) -> PullCm {
        PullCm {
            cm: Initiator::new(InitiatorConfig {
                ca_guid: 0x0200_00ff_0000_0000 | seed as u64,
                tid_base: (seed as u64) << 20,
                req_timeout_ns: REQ_TIMEOUT_NS,
                req_tries: REQ_TRIES,
                dreq_timeout_ns: DREQ_TIMEOUT_NS,
                dreq_tries: 1,
                // We answer no READs (responder resources 0) and issue up to INITIATOR_DEPTH.
                initiator_depth: INITIATOR_DEPTH,
                accept_rep: |rep| record_of(rep).is_some(),
                ..InitiatorConfig::new(local, seed)
            }),
            events: VecDeque::new(),
            counters: PullCmCounters::default(),
        }
    }

    /// Starts connecting `agent` at `peer` (its RoCEv2 address) on rdma_cm service `port`,
    /// with our QP `local_qpn` (its PSNs are the agent's to choose: we send at the REP's).
    /// Replaces an earlier attempt of the same agent (an established connection is closed
    /// first with a DREQ).
    pub fn connect(
        &mut self,
        agent: usize,
        peer: SocketAddrV4,
        port: u16,
        local_qpn: Qpn,
        now: u64,
        tx: &mut TxBatch,
    ) {
        let start_psn = Psn::new(dta_io::random::random_u32() & 0xff_ffff);
        self.cm.connect(
            agent,
            (peer, MacAddr::BROADCAST),
            port,
            local_qpn,
            start_psn,
            now,
            tx,
        );
        self.sync_counters();
    }

    /// Closes `agent`'s connection with a DREQ (sent once: an agent that misses it finds the
    /// QP idle and keeps it until we connect again, which replaces it); an attempt is forgotten.
    pub fn disconnect(&mut self, agent: usize, now: u64, tx: &mut TxBatch) {
        self.cm.disconnect(agent, now, tx);
        self.sync_counters();
    }

    /// Handles a CM MAD (the caller checked `is_gsi`); what it ends in is queued.
    pub fn handle(&mut self, d: &Datagram<'_>, tx: &mut TxBatch) {
        self.cm.handle(d, tx);
        self.take_events();
    }

    /// Resends overdue REQs; queues the attempts that ran out of tries.
    pub fn poll(&mut self, now: u64, tx: &mut TxBatch) {
        self.cm.poll(now, tx);
        self.take_events();
    }

    /// The next event, oldest first.
    pub fn poll_event(&mut self) -> Option<PullCmEvent> {
        self.events.pop_front()
    }

    /// When [`PullCm::poll`] next has work (ns), if ever.
    pub fn next_deadline(&self) -> Option<u64> {
        self.cm.next_deadline()
    }

    /// Attempts in progress.
    pub fn connecting(&self) -> usize {
        self.cm.connecting()
    }

    fn take_events(&mut self) {
        while let Some(e) = self.cm.poll_event() {
            self.events.push_back(match e {
                Event::Established {
                    key,
                    local_qpn,
                    rep,
                } => {
                    let Some(record) = record_of(&rep) else {
                        continue; // `accept_rep` refused it already.
                    };
                    PullCmEvent::Up {
                        agent: key,
                        local_qpn,
                        peer_qpn: Qpn::new(rep.local_qpn),
                        start_psn: Psn::new(rep.starting_psn),
                        max_reads: rep.responder_resources.clamp(1, INITIATOR_DEPTH),
                        record,
                    }
                }
                Event::Failed { key, cause } => PullCmEvent::Down {
                    agent: key,
                    reason: match cause {
                        Failure::Rejected(r) => Some(r),
                        Failure::RepRefused | Failure::Timeout | Failure::Disconnected => None,
                    },
                },
                Event::Closed { .. } => continue,
            });
        }
        self.sync_counters();
    }

    /// The initiator's counters under the puller's names.
    fn sync_counters(&mut self) {
        let (c, m) = (&mut self.counters, &self.cm.counters);
        c.cm_req_sent = m.cm_req_sent;
        c.cm_rep = m.cm_rep;
        c.cm_established = m.cm_established;
        c.cm_rej = m.cm_rej;
        c.cm_bad_record = m.cm_rep_refused;
        c.cm_timeouts = m.cm_timeouts;
        c.cm_dreq_received = m.cm_dreq_received;
        c.cm_dreq_sent = m.cm_dreq_sent;
        c.cm_invalid = m.cm_invalid;
    }
}
