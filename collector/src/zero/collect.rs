//! The collecting side of the pull collector as a sans-I/O state machine: one [`Collector`]
//! per collecting thread owns its share of the agents, their QPs ([`ReadQp`]), its RDMA_CM
//! initiator ([`PullCm`]) and its share of the Credit-FC total ([`CreditFc`]).
//!
//! It is fed the time ([`Collector::poll`], [`Collector::handle_timeout`]) and received
//! datagrams ([`Collector::handle`]); it writes the READs, CM messages and retransmissions it
//! sends into its transmit batch ([`Collector::transmit`]), which the driver
//! ([`super::puller`]) flushes, and it gathers what it pulled into a [`Batch`] for the
//! processing thread ([`Collector::take_batch`]). [`Collector::next_deadline`] says when it next
//! has work (a round, a reconnection, a READ or CM timeout). It owns no socket, thread or clock
//! and may not wait: how completions are waited for (hybrid I/O) is the driver's.
//!
//! Every `interval` it starts a *round* for each agent: one READ per run of adjacent blocks (at
//! most [`PullConfig::max_read`] bytes), and the 64-byte control header every
//! [`PullConfig::control_every`] rounds; a header whose generation changed is followed by a READ
//! of the whole control area, which replaces the agent's block list. Each block of a completed
//! READ is checked ([`dta_proto::zero::verify_block`]); one caught mid-update or torn is read
//! again on its own (up to [`PullConfig::torn_retries`] times), and is never passed on. A round
//! still running when the next is due is counted as an overrun (the thread, or the agent,
//! cannot keep up with the interval).
//!
//! When the transmit batch fills, the machine stops where it is and says so
//! ([`Collector::poll`] returns false); the driver flushes and calls it again.

use std::collections::{BinaryHeap, VecDeque};
use std::net::SocketAddrV4;

use dta_proto::batch::{Datagram, TxBatch};
use dta_proto::wire::cm::is_gsi;
use dta_proto::wire::ib::{Qpn, Rkey};
use dta_proto::wire::roce::RocePacket;
use dta_proto::zero::{
    decode_control, verify_block, BlockDesc, ControlHeader, ZeroError, HEADER_LEN,
};

use super::cm::{PullCm, PullCmEvent};
use super::config::{AgentSpec, PullConfig};
use super::credit::CreditFc;
use super::reader::{ReadCounters, ReadQp, ReadQpConfig};
use super::stats::PullStats;
use super::store::BlockInfo;

/// One block snapshot handed to the processing thread.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Pulled {
    pub(crate) agent: u32,
    pub(crate) block: u32,
    pub(crate) seq: u64,
    /// The agent's sample time (its clock).
    pub(crate) sampled_ns: u64,
    pub(crate) at_ns: u64,
    /// Range in the batch's `values`.
    pub(crate) first: u32,
    pub(crate) count: u32,
}

/// An agent's block list: its generation and blocks.
pub(crate) type Layout = (u32, Vec<BlockInfo>);

/// What a collecting thread sends to processing.
#[derive(Debug, Default)]
pub(crate) struct Batch {
    pub(crate) pulled: Vec<Pulled>,
    pub(crate) values: Vec<u64>,
    /// Agents whose block list is new, or that went down.
    pub(crate) layouts: Vec<(u32, Option<Layout>)>,
}

impl Batch {
    fn is_empty(&self) -> bool {
        self.pulled.is_empty() && self.layouts.is_empty()
    }

    /// Empties the batch, keeping its buffers.
    pub(crate) fn clear(&mut self) {
        self.pulled.clear();
        self.values.clear();
        self.layouts.clear();
    }
}

/// What a READ is for (the tag's top byte).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ReadKind {
    Header = 1,
    Control = 2,
    Span = 3,
    Block = 4,
}

fn tag(kind: ReadKind, idx: u32) -> u64 {
    ((kind as u64) << 32) | idx as u64
}

fn untag(t: u64) -> (u64, u32) {
    (t >> 32, t as u32)
}

/// A run of adjacent blocks read together.
#[derive(Debug, Clone)]
struct Span {
    off: u64,
    len: u32,
    /// Block indices, in offset order.
    blocks: Vec<u32>,
}

#[derive(Debug)]
struct Pending {
    kind: ReadKind,
    idx: u32,
    off: u64,
    len: u32,
}

impl Pending {
    /// The 64-byte control header.
    const HEADER: Pending = Pending {
        kind: ReadKind::Header,
        idx: 0,
        off: 0,
        len: HEADER_LEN as u32,
    };

    /// The control area (`len` bytes from the start).
    fn control(len: u32) -> Pending {
        Pending {
            kind: ReadKind::Control,
            idx: 0,
            off: 0,
            len,
        }
    }
}

enum Link {
    /// Not connected; reconnect at this time.
    Down {
        retry_at: u64,
    },
    Connecting,
    Up {
        qp: Box<ReadQp>,
        region_len: u64,
    },
}

struct Agent {
    spec: AgentSpec,
    qpn: Qpn,
    link: Link,
    generation: Option<u32>,
    /// A control area read once, waiting for a second identical read before it is used.
    control_candidate: Vec<u8>,
    blocks: Vec<BlockDesc>,
    spans: Vec<Span>,
    /// Block retries in this round.
    tries: Vec<u32>,
    pending: VecDeque<Pending>,
    in_round: bool,
    round_start: u64,
    rounds: u64,
    next_due: u64,
}

impl Agent {
    /// Queues a READ of every span (the data of one round).
    fn queue_spans(&mut self) {
        for (k, s) in self.spans.iter().enumerate() {
            self.pending.push_back(Pending {
                kind: ReadKind::Span,
                idx: k as u32,
                off: s.off,
                len: s.len,
            });
        }
    }
}

/// The collecting state machine of one thread (module docs).
pub(crate) struct Collector {
    cfg: PullConfig,
    local: SocketAddrV4,
    agents: Vec<Agent>,
    /// Global agent index of each local one.
    global: Vec<u32>,
    /// What to send; the driver flushes it.
    tx: TxBatch,
    cm: PullCm,
    credits: CreditFc,
    due: BinaryHeap<std::cmp::Reverse<(u64, usize)>>,
    ready: VecDeque<usize>,
    in_ready: Vec<bool>,
    stats: PullStats,
    /// Counters of QPs already closed.
    closed_reads: ReadCounters,
    batch: Batch,
    in_flight_reads: usize,
    done: done_buf::Buf,
    /// Earliest reconnection due.
    connect_at: u64,
    /// No READ or CM timer is due before this (a lower bound: progress only moves timers
    /// later; each pass in [`Collector::handle_timeout`] makes it exact again).
    timers_at: u64,
}

/// Blocks this close are read with one READ (the bytes between them come along).
const SPAN_GAP: u64 = 256;

/// QPNs of a collecting thread's QPs: `QPN_BASE + 0x10000 * thread + local index`.
const QPN_BASE: u32 = 0x20_0000;

impl Collector {
    /// Collecting thread `k` at our RoCEv2 address `local`, pulling from the agents `mine`
    /// (indices in `cfg.agents`); it sends through a batch of `tx_frames` frames; `seed` varies
    /// RDMA_CM identifiers between runs.
    pub(crate) fn new(
        cfg: &PullConfig,
        k: usize,
        local: SocketAddrV4,
        mine: Vec<usize>,
        tx_frames: usize,
        seed: u32,
    ) -> Collector {
        let n = mine.len();
        let agents = mine
            .iter()
            .enumerate()
            .map(|(j, &g)| Agent {
                spec: cfg.agents[g].clone(),
                qpn: Qpn::new(QPN_BASE + 0x10_0000 * k as u32 + j as u32),
                link: Link::Down { retry_at: 0 },
                generation: None,
                control_candidate: Vec::new(),
                blocks: Vec::new(),
                spans: Vec::new(),
                tries: Vec::new(),
                pending: VecDeque::new(),
                in_round: false,
                round_start: 0,
                rounds: 0,
                next_due: 0,
            })
            .collect();
        let credits = CreditFc::new(
            cfg.credit_bytes / cfg.collect_threads as u64,
            n,
            cfg.credit_fc,
        );
        Collector {
            cfg: cfg.clone(),
            local,
            agents,
            global: mine.iter().map(|&g| g as u32).collect(),
            tx: TxBatch::new(tx_frames, 512),
            cm: PullCm::new(local, seed),
            credits,
            due: BinaryHeap::new(),
            ready: VecDeque::new(),
            in_ready: vec![false; n],
            stats: PullStats::default(),
            closed_reads: ReadCounters::default(),
            batch: Batch::default(),
            in_flight_reads: 0,
            done: done_buf::Buf::default(),
            connect_at: 0,
            timers_at: u64::MAX,
        }
    }

    /// The frames to send (the driver sends and clears them).
    pub(crate) fn transmit(&mut self) -> &mut TxBatch {
        &mut self.tx
    }

    /// Connects the agents whose reconnection is due, starts the rounds that are due and
    /// issues the READs that credits and QPs allow. False if it stopped because the transmit
    /// batch is full: flush it and call again.
    pub(crate) fn poll(&mut self, now: u64) -> bool {
        self.connect_due(now) && {
            self.start_due_rounds(now);
            self.issue(now)
        }
    }

    /// READ and CM timeouts: asks again or gives up (a pass over the agents, only when a
    /// timer is due). False if it stopped because the transmit batch is full: flush it and
    /// call again.
    pub(crate) fn handle_timeout(&mut self, now: u64) -> bool {
        self.poll_timers(now)
    }

    /// When [`Collector::poll`] or [`Collector::handle_timeout`] next has work (ns): a round
    /// or a reconnection due, or a READ or CM timer; `None` if nothing is scheduled.
    pub(crate) fn next_deadline(&self) -> Option<u64> {
        let round = self.due.peek().map(|r| r.0 .0);
        // With no READ in flight only the CM has timers (exact, not the bound).
        let timers = if self.in_flight_reads > 0 {
            Some(self.timers_at)
        } else {
            self.cm.next_deadline()
        };
        [Some(self.connect_at), round, timers]
            .into_iter()
            .flatten()
            .filter(|&t| t != u64::MAX)
            .min()
    }

    /// READs in flight (the driver's hybrid I/O decides by it how to wait).
    pub(crate) fn in_flight_reads(&self) -> usize {
        self.in_flight_reads
    }

    /// True if snapshots or layouts wait for [`Collector::take_batch`].
    pub(crate) fn has_batch(&self) -> bool {
        !self.batch.is_empty()
    }

    /// The snapshots and layouts gathered since the last call, if any, replaced by `fresh`
    /// (an empty batch to fill next).
    pub(crate) fn take_batch(&mut self, fresh: Batch) -> Option<Batch> {
        if self.batch.is_empty() {
            return None;
        }
        Some(std::mem::replace(&mut self.batch, fresh))
    }

    /// A batch processing could not take: its snapshots are counted as dropped, its layouts
    /// (rare, needed) are kept for the next one.
    pub(crate) fn return_batch(&mut self, b: Batch) {
        self.stats.pull.snapshots_dropped += b.pulled.len() as u64;
        self.batch.layouts.extend(b.layouts);
    }

    /// Closes every agent's connection (the puller stops).
    pub(crate) fn close_all(&mut self, now: u64) {
        for i in 0..self.agents.len() {
            self.cm.disconnect(i, now, &mut self.tx);
        }
    }

    /// What this thread measured so far (the driver adds its own: CPU time, kernel drops,
    /// waits).
    pub(crate) fn stats(&self) -> PullStats {
        let mut reads = self.closed_reads;
        let mut up = 0;
        for a in &self.agents {
            if let Link::Up { qp, .. } = &a.link {
                reads.merge(&qp.counters);
                up += 1;
            }
        }
        PullStats {
            pull: self.stats.pull,
            reads,
            cm: self.cm.counters,
            read_latency: self.stats.read_latency.clone(),
            round_latency: self.stats.round_latency.clone(),
            in_flight: self.credits.in_flight(),
            in_flight_high_water: self.credits.high_water(),
            credit_waits: self.credits.waits,
            agents_up: up,
            collect_cpu_ns: 0,
            kernel_drops: 0,
        }
    }

    /// Connects agents whose reconnection is due (a pass over the agents only when one is).
    fn connect_due(&mut self, now: u64) -> bool {
        if now < self.connect_at {
            return true;
        }
        self.connect_at = u64::MAX;
        for i in 0..self.agents.len() {
            if let Link::Down { retry_at } = self.agents[i].link {
                if now < retry_at {
                    self.connect_at = self.connect_at.min(retry_at);
                } else if self.tx.is_full() {
                    // Flushed and called again: the pass resumes with this agent.
                    self.connect_at = now;
                    return false;
                } else {
                    let a = &mut self.agents[i];
                    a.link = Link::Connecting;
                    self.cm
                        .connect(i, a.spec.roce, a.spec.cm_port, a.qpn, now, &mut self.tx);
                }
            }
        }
        self.cm_timer();
        true
    }

    /// Lowers the timer bound to the CM's next deadline.
    fn cm_timer(&mut self) {
        if let Some(t) = self.cm.next_deadline() {
            self.timers_at = self.timers_at.min(t);
        }
    }

    fn start_due_rounds(&mut self, now: u64) {
        while let Some(&std::cmp::Reverse((t, i))) = self.due.peek() {
            if t > now {
                break;
            }
            self.due.pop();
            let interval = self.cfg.interval.as_nanos() as u64;
            let a = &mut self.agents[i];
            if !matches!(a.link, Link::Up { .. }) || a.next_due != t {
                continue;
            }
            // The next round is due one interval after this one was, whatever happens.
            a.next_due = t + interval;
            let next = a.next_due.max(now);
            a.next_due = next;
            self.due.push(std::cmp::Reverse((next, i)));
            if a.in_round {
                self.stats.pull.rounds_overrun += 1;
                continue;
            }
            self.stats.pull.rounds += 1;
            a.in_round = true;
            a.round_start = now;
            a.rounds += 1;
            a.tries.iter_mut().for_each(|t| *t = 0);
            if a.generation.is_none() || a.rounds % self.cfg.control_every as u64 == 0 {
                a.pending.push_back(Pending::HEADER);
            }
            if a.generation.is_some() {
                a.queue_spans();
            }
            self.mark_ready(i);
        }
    }

    fn mark_ready(&mut self, i: usize) {
        if !self.in_ready[i] {
            self.in_ready[i] = true;
            self.ready.push_back(i);
        }
    }

    /// Issues pending READs, agents in turn, as credits and QPs allow. An agent that must
    /// wait for one of its own READs (its QP's READs in flight, or its share of T) leaves the
    /// ready queue until a READ of its completes; when the total T is used up, every agent
    /// waits, the first in line keeping its place. Each call costs the READs it issues. False
    /// if the transmit batch filled (the agent in turn keeps its place).
    fn issue(&mut self, now: u64) -> bool {
        while let Some(&i) = self.ready.front() {
            let mut total_full = false;
            {
                let a = &mut self.agents[i];
                let Link::Up { qp, .. } = &mut a.link else {
                    a.pending.clear();
                    self.in_ready[i] = false;
                    self.ready.pop_front();
                    continue;
                };
                while let Some(p) = a.pending.front() {
                    if !qp.has_room() {
                        break;
                    }
                    if self.tx.is_full() {
                        return false;
                    }
                    if !self.credits.take(i, p.len as u64) {
                        total_full = !self.credits.total_has_room(p.len as u64);
                        break;
                    }
                    if !qp.issue(tag(p.kind, p.idx), p.off, p.len, now, &mut self.tx) {
                        self.credits.give_back(i, p.len as u64);
                        break;
                    }
                    self.in_flight_reads += 1;
                    a.pending.pop_front();
                    if let Some(t) = qp.next_deadline() {
                        self.timers_at = self.timers_at.min(t);
                    }
                }
            }
            if total_full {
                break;
            }
            self.ready.pop_front();
            self.in_ready[i] = false;
        }
        true
    }

    /// Handles a datagram received at `now`: a CM MAD, or a READ response for one of the
    /// QPs.
    pub(crate) fn handle(&mut self, d: &Datagram<'_>, now: u64) {
        if is_gsi(d.payload) {
            self.cm.handle(d, &mut self.tx);
            while let Some(ev) = self.cm.poll_event() {
                self.on_cm(ev, now);
            }
            self.cm_timer();
            return;
        }
        let Ok(pkt) = RocePacket::parse(d.payload) else {
            self.stats.pull.rx_invalid += 1;
            return;
        };
        let q = pkt.bth.dest_qp.value();
        let k = (q.wrapping_sub(QPN_BASE) & 0xF_FFFF) as usize;
        let Some(a) = self.agents.get_mut(k) else {
            self.stats.pull.rx_unknown += 1;
            return;
        };
        if a.qpn.value() != q || d.src.ip() != a.spec.roce.ip() {
            self.stats.pull.rx_unknown += 1;
            return;
        }
        let Link::Up { qp, .. } = &mut a.link else {
            self.stats.pull.rx_unknown += 1;
            return;
        };
        // Completed READs are handled once the QP is no longer borrowed: copied out into a
        // buffer kept for reuse.
        let mut done = std::mem::take(&mut self.done);
        done.clear();
        qp.handle(&pkt, now, &mut self.tx, &mut |t, issued, bytes| {
            done.push(t, issued, bytes);
        });
        for (t, issued, range) in done.items() {
            self.completed(k, *t, *issued, &done.data()[range.clone()], now);
        }
        self.done = done;
    }

    fn on_cm(&mut self, ev: PullCmEvent, now: u64) {
        match ev {
            PullCmEvent::Up {
                agent,
                local_qpn,
                peer_qpn,
                start_psn,
                max_reads,
                record,
            } => {
                let a = &mut self.agents[agent];
                let qp = ReadQp::new(ReadQpConfig {
                    local: self.local,
                    peer: a.spec.roce,
                    local_qpn,
                    peer_qpn,
                    start_psn,
                    rkey: Rkey(record.rkey),
                    base: record.addr,
                    // The agent's: its responses are cut at its path MTU.
                    pmtu: record.pmtu,
                    max_outstanding: max_reads as usize,
                    timeout_ns: self.cfg.read_timeout.as_nanos() as u64,
                    retries: self.cfg.read_retries,
                });
                log::info!(
                    "pull: agent {:?} at {} connected (region {} bytes, {} READs in flight)",
                    a.spec.name,
                    a.spec.roce,
                    record.len,
                    max_reads
                );
                a.link = Link::Up {
                    qp: Box::new(qp),
                    region_len: record.len,
                };
                a.generation = None;
                a.in_round = false;
                a.pending.clear();
                a.next_due = now;
                self.due.push(std::cmp::Reverse((now, agent)));
                self.share_credits();
            }
            PullCmEvent::Down { agent, reason } => {
                log::warn!(
                    "pull: agent {:?} at {}: connection failed or closed (REJ reason {:?})",
                    self.agents[agent].spec.name,
                    self.agents[agent].spec.roce,
                    reason
                );
                self.drop_link(agent, now);
            }
        }
    }

    /// Shares the thread's part of T among the agents connected now.
    fn share_credits(&mut self) {
        let up = self
            .agents
            .iter()
            .filter(|a| matches!(a.link, Link::Up { .. }))
            .count();
        self.credits.set_active(up);
    }

    /// Forgets an agent's QP (returning its credits) and schedules a reconnection.
    fn drop_link(&mut self, i: usize, now: u64) {
        let retry_at = now + self.cfg.reconnect.as_nanos() as u64;
        self.connect_at = self.connect_at.min(retry_at);
        let old = std::mem::replace(&mut self.agents[i].link, Link::Down { retry_at });
        if let Link::Up { mut qp, .. } = old {
            for (_, len) in qp.in_flight() {
                self.credits.give_back(i, len as u64);
                self.in_flight_reads -= 1;
            }
            qp.clear();
            self.closed_reads.merge(&qp.counters);
        }
        let a = &mut self.agents[i];
        a.pending.clear();
        a.in_round = false;
        a.generation = None;
        self.batch.layouts.push((self.global[i], None));
        self.share_credits();
    }

    /// READ and CM timeouts, when one is due (a pass over the agents, which also finds the
    /// next one). False if the transmit batch filled (the pass runs again).
    fn poll_timers(&mut self, now: u64) -> bool {
        if now < self.timers_at {
            return true;
        }
        self.cm.poll(now, &mut self.tx);
        while let Some(ev) = self.cm.poll_event() {
            self.on_cm(ev, now);
        }
        let mut next = self.cm.next_deadline().unwrap_or(u64::MAX);
        if self.in_flight_reads > 0 {
            for i in 0..self.agents.len() {
                let fault = match &mut self.agents[i].link {
                    Link::Up { qp, .. } => {
                        if self.tx.is_full() {
                            self.timers_at = now;
                            return false;
                        }
                        qp.poll(now, &mut self.tx);
                        if let Some(t) = qp.next_deadline() {
                            next = next.min(t);
                        }
                        qp.fault()
                    }
                    _ => None,
                };
                if let Some(f) = fault {
                    self.stats.pull.qp_faults += 1;
                    log::warn!(
                        "pull: agent {:?}: QP failed ({f:?}); reconnecting",
                        self.agents[i].spec.name
                    );
                    self.cm.disconnect(i, now, &mut self.tx);
                    self.drop_link(i, now);
                    if let Some(t) = self.cm.next_deadline() {
                        next = next.min(t);
                    }
                }
            }
        }
        self.timers_at = next;
        true
    }

    /// A READ of agent `i` completed (the agent may issue again: it rejoins the ready queue
    /// if it has READs waiting).
    fn completed(&mut self, i: usize, t: u64, issued: u64, bytes: &[u8], now: u64) {
        if !self.agents[i].pending.is_empty() {
            self.mark_ready(i);
        }
        self.in_flight_reads -= 1;
        self.credits.give_back(i, bytes.len() as u64);
        self.stats.read_latency.record(now.saturating_sub(issued));
        let (kind, idx) = untag(t);
        match kind {
            k if k == ReadKind::Header as u64 => self.on_header(i, bytes),
            k if k == ReadKind::Control as u64 => self.on_control(i, bytes),
            k if k == ReadKind::Span as u64 => {
                // By index, not a copy of the span: nothing allocates per READ.
                for j in 0.. {
                    let a = &self.agents[i];
                    let Some(s) = a.spans.get(idx as usize) else {
                        break;
                    };
                    let Some(&b) = s.blocks.get(j) else {
                        break;
                    };
                    let at = (a.blocks[b as usize].offset - s.off) as usize;
                    self.on_block(i, b, &bytes[at..], now);
                }
            }
            k if k == ReadKind::Block as u64 => self.on_block(i, idx, bytes, now),
            _ => {}
        }
        self.finish_round_if_done(i, now);
    }

    fn on_header(&mut self, i: usize, bytes: &[u8]) {
        let credit_total = self.credits.total();
        let a = &mut self.agents[i];
        let region_len = match &a.link {
            Link::Up { region_len, .. } => *region_len,
            _ => return,
        };
        match ControlHeader::decode(bytes) {
            Ok(h) if h.region_len <= region_len && h.control_len() as u64 <= credit_total => {
                if a.generation != Some(h.generation) {
                    // The block list changed (or is not known yet): read it before the data.
                    a.pending.retain(|p| p.kind != ReadKind::Span);
                    a.pending
                        .push_front(Pending::control(h.control_len() as u32));
                    self.mark_ready(i);
                }
            }
            _ => {
                self.stats.pull.control_invalid += 1;
                a.generation = None;
            }
        }
    }

    fn on_control(&mut self, i: usize, bytes: &[u8]) {
        self.stats.pull.control_reads += 1;
        let max_read = self.cfg.max_read;
        let a = &mut self.agents[i];
        let region_len = match &a.link {
            Link::Up { region_len, .. } => *region_len,
            _ => return,
        };
        // A READ racing the agent's registration of a block can return a descriptor half
        // written (nothing in the layout can tell): a control area is used only once two
        // consecutive reads of it agree.
        if a.control_candidate != bytes {
            a.control_candidate.clear();
            a.control_candidate.extend_from_slice(bytes);
            a.pending.push_front(Pending::control(bytes.len() as u32));
            self.mark_ready(i);
            return;
        }
        a.control_candidate.clear();
        let (h, blocks) = match decode_control(bytes) {
            Ok(x) if x.0.region_len <= region_len => x,
            _ => {
                self.stats.pull.control_invalid += 1;
                a.generation = None;
                return;
            }
        };
        // Spans: blocks in offset order, neighbours (at most SPAN_GAP bytes apart) together up
        // to max_read.
        let mut order: Vec<u32> = (0..blocks.len() as u32).collect();
        order.sort_by_key(|&b| blocks[b as usize].offset);
        let mut spans: Vec<Span> = Vec::new();
        for b in order {
            let d = &blocks[b as usize];
            let len = d.len() as u32;
            match spans.last_mut() {
                Some(s)
                    if d.offset >= s.off + s.len as u64
                        && d.offset - (s.off + s.len as u64) <= SPAN_GAP
                        && d.offset + len as u64 - s.off <= max_read as u64 =>
                {
                    s.len = (d.offset + len as u64 - s.off) as u32;
                    s.blocks.push(b);
                }
                _ => spans.push(Span {
                    off: d.offset,
                    len,
                    blocks: vec![b],
                }),
            }
        }
        a.generation = Some(h.generation);
        a.tries = vec![0; blocks.len()];
        let infos: Vec<BlockInfo> = blocks
            .iter()
            .map(|d| BlockInfo {
                name: d.name.clone(),
                kind: d.kind,
                entries: d.entries,
            })
            .collect();
        a.blocks = blocks;
        a.spans = spans;
        // This round reads the data now.
        a.queue_spans();
        self.batch
            .layouts
            .push((self.global[i], Some((h.generation, infos))));
        self.mark_ready(i);
    }

    fn on_block(&mut self, i: usize, b: u32, bytes: &[u8], now: u64) {
        let a = &mut self.agents[i];
        let Some(d) = a.blocks.get(b as usize) else {
            return;
        };
        match verify_block(bytes, d.entries) {
            Ok(s) => {
                self.stats.pull.blocks_pulled += 1;
                let first = self.batch.values.len() as u32;
                self.batch.values.extend(s.iter());
                self.batch.pulled.push(Pulled {
                    agent: self.global[i],
                    block: b,
                    seq: s.seq,
                    sampled_ns: s.sampled_ns,
                    at_ns: now,
                    first,
                    count: d.entries,
                });
            }
            Err(e @ (ZeroError::InProgress | ZeroError::Torn)) => {
                if e == ZeroError::Torn {
                    self.stats.pull.blocks_torn += 1;
                } else {
                    self.stats.pull.blocks_in_progress += 1;
                }
                a.tries[b as usize] += 1;
                if a.tries[b as usize] > self.cfg.torn_retries {
                    self.stats.pull.blocks_given_up += 1;
                    return;
                }
                let (off, len) = (d.offset, d.len() as u32);
                a.pending.push_back(Pending {
                    kind: ReadKind::Block,
                    idx: b,
                    off,
                    len,
                });
                self.mark_ready(i);
            }
            Err(_) => {
                // The bytes are not this block at all: the layout changed under us.
                self.stats.pull.blocks_invalid += 1;
                a.generation = None;
                a.pending.retain(|p| p.kind == ReadKind::Header);
                if !a.pending.iter().any(|p| p.kind == ReadKind::Header) {
                    a.pending.push_back(Pending::HEADER);
                }
                self.mark_ready(i);
            }
        }
    }

    fn finish_round_if_done(&mut self, i: usize, now: u64) {
        let a = &mut self.agents[i];
        let idle = match &a.link {
            Link::Up { qp, .. } => qp.outstanding() == 0,
            _ => true,
        };
        if a.in_round && a.pending.is_empty() && idle {
            a.in_round = false;
            self.stats.pull.rounds_done += 1;
            self.stats
                .round_latency
                .record(now.saturating_sub(a.round_start));
        }
    }
}

mod done_buf {
    /// Completed READs of one packet (at most one in practice), copied out of the QP so it
    /// can be borrowed again; the buffer is reused.
    #[derive(Default)]
    pub struct Buf {
        items: Vec<(u64, u64, std::ops::Range<usize>)>,
        data: Vec<u8>,
    }

    impl Buf {
        pub fn push(&mut self, t: u64, issued: u64, bytes: &[u8]) {
            let at = self.data.len();
            self.data.extend_from_slice(bytes);
            self.items.push((t, issued, at..at + bytes.len()));
        }

        pub fn clear(&mut self) {
            self.items.clear();
            self.data.clear();
        }

        pub fn items(&self) -> &[(u64, u64, std::ops::Range<usize>)] {
            &self.items
        }

        pub fn data(&self) -> &[u8] {
            &self.data
        }
    }
}
