//! The per-core translation pipeline: DTA reports in, RoCEv2 frames and DTA NACKs out.
//!
//! A [`Pipeline`] is a plain struct owned by one worker. Feed it bursts of report datagrams
//! ([`Pipeline::handle_reports`]) and of RoCEv2 responses ([`Pipeline::handle_responses`]) with
//! the current time, call [`Pipeline::poll`] when [`Pipeline::next_deadline`] passes, and send
//! whatever it queued in the caller's [`TxBatch`]. It performs no I/O, reads no clock and does
//! not allocate per packet.
//!
//! State is sharded by worker: each worker has its own queue pair per store (so no PSN is
//! shared between cores), owns the Append lists and the postcard cache slots that hash to it,
//! and forwards reports it does not own to their owner through a hand-off sink.

use std::collections::VecDeque;
use std::net::{Ipv4Addr, SocketAddrV4};

use dta_proto::batch::{Datagram, TxBatch};
use dta_proto::crc::IEEE;
use dta_proto::hash::{KeyHasher, PostcardHasher, MAX_REDUNDANCY};
use dta_proto::layout::{
    AppendFormat, AppendLayout, CounterLayout, KeyWriteLayout, PostcardLayout,
};
use dta_proto::meta::{StoreKind, StoreMeta};
use dta_proto::wire::ib::{opcode as op, Psn, Qpn, Rkey, ATOMIC_ETH_LEN, RETH_LEN};
use dta_proto::wire::nack::NackRepr;
use dta_proto::wire::report::{
    parse_report_into, ParseConfig, Primitive, Priority, Profile, Report,
};
use dta_proto::wire::roce::{FrameTemplate, RethReplica, RoceEndpoint, RocePacket, L2L4_LEN};
use dta_proto::wire::Error as WireError;
use dta_proto::{Key, MAX_VALUE_LEN};

use super::qp::{QpEvent, QpStats, QpTuning, QpTx};
use super::retx::copy_frame;
use super::stats::TranslatorCounters;

/// How reports of one primitive pick their store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Route {
    /// Every report goes to the same store.
    Single(usize),
    /// The report's IPv4 destination selects the store (the reference's behaviour).
    ByDestination(Vec<(Ipv4Addr, usize)>),
    /// CRC-32 of the key, modulo the number of stores, selects the store.
    ByKeyHash(Vec<usize>),
    /// No store serves this primitive.
    None,
}

/// Message-rate cap towards one collector NIC (a token bucket), shared fairly by workers.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RateLimit {
    /// RDMA messages per second for this worker (0 = unlimited).
    pub messages_per_sec: u64,
    /// Bucket depth in messages.
    pub burst: u64,
    /// Share of the bucket only high priority may use (low priority needs tokens above
    /// `low_reserve` of the depth, medium above `medium_reserve`).
    pub low_reserve: f64,
    /// See `low_reserve`.
    pub medium_reserve: f64,
}

impl Default for RateLimit {
    fn default() -> Self {
        RateLimit {
            messages_per_sec: 0,
            burst: 4096,
            low_reserve: 0.5,
            medium_reserve: 0.25,
        }
    }
}

/// Everything a pipeline needs, derived from configuration and collector metadata.
#[derive(Debug, Clone)]
pub struct PipelineConfig {
    /// This worker's index and the number of workers.
    pub worker: usize,
    /// Number of workers sharing the sharded state.
    pub workers: usize,
    /// Report parsing (profiles, reference variant, default priority).
    pub parse: ParseConfig,
    /// Highest Key-Write / Key-Increment redundancy accepted.
    pub max_redundancy: u8,
    /// Emit full Ethernet frames (raw backends) instead of UDP payloads.
    pub l2_frames: bool,
    /// Our RoCEv2 identity (IP, port, MAC) towards collectors.
    pub local: SocketAddrV4,
    /// Our MAC.
    pub local_mac: dta_proto::wire::ethernet::MacAddr,
    /// UDP port reporters receive NACKs on.
    pub nack_port: u16,
    /// A partial Append batch is written after waiting this long (ns).
    pub append_flush_ns: u64,
    /// A partial postcard entry is written after waiting this long (ns; 0 = only on
    /// collision or shutdown).
    pub postcard_flush_ns: u64,
    /// Postcard cache slots (across all workers; a power of two).
    pub postcard_cache_slots: u32,
    /// Copies written per postcard chunk.
    pub postcard_redundancy: u8,
    /// Reliability tuning of every QP.
    pub qp: QpTuning,
    /// Rate limit per collector (per worker share).
    pub rate: RateLimit,
    /// High-priority reports held while the budget is exhausted.
    pub backlog: usize,
    /// Reporters tracked for sequence gaps.
    pub max_reporters: usize,
    /// Routing of Key-Write reports.
    pub route_keywrite: Route,
    /// Routing of Key-Increment reports.
    pub route_keyincrement: Route,
    /// Routing of postcards.
    pub route_postcard: Route,
}

/// One collector as seen by this worker.
#[derive(Debug, Clone)]
pub struct CollectorTarget {
    /// RoCEv2 address of the collector NIC.
    pub roce: SocketAddrV4,
    /// Its MAC.
    pub mac: dta_proto::wire::ethernet::MacAddr,
    /// Stores it hosts, with the QP this worker uses for each.
    pub stores: Vec<(StoreMeta, QpBinding)>,
}

/// The QP a worker uses for a store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QpBinding {
    /// Our (translator-side) QPN.
    pub local_qpn: Qpn,
    /// The collector's QPN.
    pub remote_qpn: Qpn,
    /// The first PSN (the REQ's starting PSN).
    pub start_psn: Psn,
}

/// Why a pipeline could not be built.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError(pub String);

impl std::fmt::Display for ConfigError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ConfigError {}

struct Templates {
    write: FrameTemplate,
    /// Turns a `write` frame into the next replica's (Key-Write and Postcarding redundancy).
    replica: RethReplica,
    write_imm: FrameTemplate,
    /// Zero-length WRITE (probes).
    probe: FrameTemplate,
    /// Zero-length WRITE with Immediate (notifications without data).
    imm0: FrameTemplate,
}

impl Templates {
    /// The longest frame a store with these templates emits (its retransmission slot size).
    fn max_frame_len(&self, state: &StoreState) -> usize {
        let mut n = [&self.write, &self.write_imm, &self.probe, &self.imm0]
            .iter()
            .map(|t| t.frame_len())
            .max()
            .unwrap_or(0);
        if let StoreState::KeyIncrement { atomic, .. } = state {
            n = n.max(atomic.frame_len());
        }
        n
    }

    fn new(ep: &RoceEndpoint, remote: Qpn, payload_len: usize) -> Templates {
        let write = FrameTemplate::new(ep, op::RC_RDMA_WRITE_ONLY, remote, payload_len);
        Templates {
            replica: RethReplica::new(&write).expect("WRITE Only starts with a RETH"),
            write,
            write_imm: FrameTemplate::new(ep, op::RC_RDMA_WRITE_ONLY_IMM, remote, payload_len),
            probe: FrameTemplate::new(ep, op::RC_RDMA_WRITE_ONLY, remote, 0),
            imm0: FrameTemplate::new(ep, op::RC_RDMA_WRITE_ONLY_IMM, remote, 0),
        }
    }
}

enum StoreState {
    KeyWrite {
        hasher: KeyHasher,
        layout: KeyWriteLayout,
    },
    KeyIncrement {
        hasher: KeyHasher,
        layout: CounterLayout,
        atomic: FrameTemplate,
    },
    Append(AppendState),
    Postcard(PostcardState),
}

struct Store {
    name: String,
    collector: usize,
    dest: SocketAddrV4,
    base: u64,
    rkey: Rkey,
    qp: QpTx,
    tmpl: Templates,
    ep: RoceEndpoint,
    payload_len: usize,
    state: StoreState,
}

#[derive(Clone, Copy, Default)]
struct ListState {
    /// Batches written so far (the next batch's sequence number minus one).
    written: u64,
    /// Generation of the pending batch (to invalidate flush deadlines).
    gen: u32,
    /// Entries pending in the current batch.
    pending: u8,
    /// Whether the pending batch contains an immediate report.
    imm: bool,
}

struct AppendState {
    layout: AppendLayout,
    first_list: u32,
    lists: u32,
    list_stride: u64,
    entry: usize,
    batch: usize,
    /// Per list state.
    list: Vec<ListState>,
    /// Bytes per list in `buf`: one batch of entries, then [`MAX_VALUE_LEN`] bytes of slack so
    /// an entry is stored with one fixed-size copy of its zero-padded value, and the sequenced
    /// trailer is built in place behind the entries (the batch goes out as one slice).
    buf_stride: usize,
    /// Pending entries of every list, `buf_stride` bytes per list.
    buf: Vec<u8>,
    /// (deadline, list, generation) of batches waiting for their flush delay, in order.
    deadlines: VecDeque<(u64, u32, u32)>,
}

#[derive(Clone, Copy)]
struct CacheEntry {
    flow: Key,
    occupied: bool,
    immediate: bool,
    path_len: u8,
    /// Hops present (the bits of `mask`).
    count: u8,
    mask: u16,
    gen: u32,
    values: [u32; dta_proto::hash::MAX_HOPS],
}

struct PostcardState {
    hasher: PostcardHasher,
    layout: PostcardLayout,
    hops: u8,
    redundancy: u8,
    cache: Vec<CacheEntry>,
    deadlines: VecDeque<(u64, u32, u32)>,
}

struct TokenBucket {
    nano_tokens: u64,
    cap: u64,
    rate: u64,
    last: u64,
    low_floor: u64,
    medium_floor: u64,
}

impl TokenBucket {
    const UNIT: u64 = 1_000_000_000;

    fn new(r: &RateLimit) -> Option<TokenBucket> {
        if r.messages_per_sec == 0 {
            return None;
        }
        let cap = r.burst.max(1).saturating_mul(Self::UNIT);
        Some(TokenBucket {
            nano_tokens: cap,
            cap,
            rate: r.messages_per_sec,
            last: 0,
            low_floor: (cap as f64 * r.low_reserve) as u64,
            medium_floor: (cap as f64 * r.medium_reserve) as u64,
        })
    }

    #[inline]
    fn refill(&mut self, now: u64) {
        if now > self.last {
            let add = (now - self.last).saturating_mul(self.rate);
            self.nano_tokens = self.nano_tokens.saturating_add(add).min(self.cap);
            self.last = now;
        }
    }

    /// Takes `n` messages for a report of `prio` if the bucket allows it.
    #[inline]
    fn try_take(&mut self, now: u64, n: u64, prio: Priority) -> bool {
        self.refill(now);
        let need = n * Self::UNIT;
        let floor = match prio {
            Priority::Low => self.low_floor,
            Priority::Medium => self.medium_floor,
            Priority::High => 0,
        };
        if self.nano_tokens >= need + floor {
            self.nano_tokens -= need;
            true
        } else {
            false
        }
    }

    /// Takes `n` messages that must go out whatever the budget (resent frames): as many
    /// tokens as there are, never waiting.
    fn charge(&mut self, now: u64, n: u64) {
        self.refill(now);
        self.nano_tokens = self
            .nano_tokens
            .saturating_sub(n.saturating_mul(Self::UNIT));
    }

    fn next_token_at(&self, n: u64) -> u64 {
        let need = n * Self::UNIT;
        if self.nano_tokens >= need {
            self.last
        } else {
            self.last + (need - self.nano_tokens).div_ceil(self.rate)
        }
    }
}

#[derive(Clone, Copy)]
struct ReporterState {
    addr: SocketAddrV4,
    next: u32,
}

/// A report this worker does not own, for the worker that does.
#[derive(Debug, Clone, Copy)]
pub struct Handoff {
    /// The owning worker.
    pub worker: usize,
    /// When it arrived (ns).
    pub at: u64,
    /// The parsed report.
    pub report: Report,
    /// Where it came from (for the destination route).
    pub dst: Ipv4Addr,
}

/// The translator's per-core state machine.
pub struct Pipeline {
    cfg: PipelineConfig,
    stores: Vec<Store>,
    buckets: Vec<Option<TokenBucket>>,
    backlog: VecDeque<(Report, Ipv4Addr)>,
    reporters: Vec<ReporterState>,
    counters: TranslatorCounters,
    handoffs: Vec<Handoff>,
    /// Frames a single report may need (N replicas + one immediate + slack).
    max_frames_per_report: usize,
    /// Some QP has frames waiting to be resent (they go out before any new frame).
    resending: bool,
}

/// No precomputed postcard cache index.
const NO_HINT: u32 = u32::MAX;

/// `hint` if the flow's cache index was already computed (cache indices are below 2^31), else
/// the flow's cache index.
#[inline(always)]
fn cache_hash(p: &PostcardState, flow: &Key, hint: u32) -> u32 {
    if hint != NO_HINT {
        hint
    } else {
        p.hasher.cache_index(flow)
    }
}

/// Largest single RDMA payload the pipeline builds (a 16-entry batch of 32-byte entries plus
/// the trailer, or a 16-hop chunk).
const MAX_PAYLOAD: usize = 16 * MAX_VALUE_LEN + 8;

impl Pipeline {
    /// Builds a worker's pipeline for the given collectors.
    pub fn new(
        cfg: PipelineConfig,
        collectors: &[CollectorTarget],
    ) -> Result<Pipeline, ConfigError> {
        if cfg.workers == 0 || cfg.worker >= cfg.workers {
            return Err(ConfigError(format!(
                "worker {} of {}",
                cfg.worker, cfg.workers
            )));
        }
        if cfg.max_redundancy == 0 || cfg.max_redundancy as usize > MAX_REDUNDANCY {
            return Err(ConfigError(format!(
                "max_redundancy must be 1..={MAX_REDUNDANCY}"
            )));
        }
        let mut stores = Vec::new();
        let mut buckets = Vec::new();
        for (ci, c) in collectors.iter().enumerate() {
            buckets.push(TokenBucket::new(&cfg.rate));
            let ep = RoceEndpoint {
                src_mac: cfg.local_mac,
                dst_mac: c.mac,
                src_ip: *cfg.local.ip(),
                dst_ip: *c.roce.ip(),
                src_port: cfg.local.port(),
                dst_port: c.roce.port(),
                ttl: 64,
                tos: 0,
                ident: 0,
            };
            for (meta, qpb) in &c.stores {
                stores.push(Self::build_store(&cfg, ci, c.roce, &ep, meta, *qpb)?);
            }
        }
        let n_stores = stores.len();
        for (what, r) in [
            ("keywrite", &cfg.route_keywrite),
            ("keyincrement", &cfg.route_keyincrement),
            ("postcard", &cfg.route_postcard),
        ] {
            let idxs: Vec<usize> = match r {
                Route::Single(i) => vec![*i],
                Route::ByDestination(v) => v.iter().map(|(_, i)| *i).collect(),
                Route::ByKeyHash(v) => {
                    if v.is_empty() {
                        return Err(ConfigError(format!(
                            "{what}: key-hash route with no stores"
                        )));
                    }
                    v.clone()
                }
                Route::None => vec![],
            };
            for i in idxs {
                let ok = i < n_stores
                    && matches!(
                        (&stores[i].state, what),
                        (StoreState::KeyWrite { .. }, "keywrite")
                            | (StoreState::KeyIncrement { .. }, "keyincrement")
                            | (StoreState::Postcard(_), "postcard")
                    );
                if !ok {
                    return Err(ConfigError(format!(
                        "{what} route names store #{i}, which is not a {what} store"
                    )));
                }
            }
        }
        let max_frames_per_report =
            (cfg.max_redundancy as usize).max(cfg.postcard_redundancy as usize * 2) + 2;
        Ok(Pipeline {
            backlog: VecDeque::with_capacity(cfg.backlog),
            reporters: Vec::with_capacity(cfg.max_reporters),
            counters: TranslatorCounters::default(),
            handoffs: Vec::with_capacity(256),
            buckets,
            stores,
            cfg,
            max_frames_per_report,
            resending: false,
        })
    }

    fn build_store(
        cfg: &PipelineConfig,
        ci: usize,
        dest: SocketAddrV4,
        ep: &RoceEndpoint,
        meta: &StoreMeta,
        qpb: QpBinding,
    ) -> Result<Store, ConfigError> {
        let err = |m: &str| ConfigError(format!("store {}: {m}", meta.name));
        let (state, payload_len) = match &meta.kind {
            StoreKind::KeyWrite {
                slots,
                slot_size,
                hash,
            } => {
                let layout = KeyWriteLayout::new(*slots, *slot_size)
                    .map_err(|e| err(&format!("bad Key-Write geometry: {e}")))?;
                let hasher = KeyHasher::new(*hash, *slots).ok_or_else(|| err("bad slot count"))?;
                (StoreState::KeyWrite { hasher, layout }, *slot_size as usize)
            }
            StoreKind::KeyIncrement { slots, hash } => {
                let layout = CounterLayout::new(*slots)
                    .map_err(|e| err(&format!("bad counter geometry: {e}")))?;
                let hasher = KeyHasher::new(*hash, *slots).ok_or_else(|| err("bad slot count"))?;
                let atomic = FrameTemplate::new(ep, op::RC_FETCH_ADD, qpb.remote_qpn, 0);
                (
                    StoreState::KeyIncrement {
                        hasher,
                        layout,
                        atomic,
                    },
                    0,
                )
            }
            StoreKind::Append {
                lists,
                first_list,
                capacity,
                entry_size,
                batch,
                format,
                list_stride,
            } => {
                let layout = AppendLayout::new(*format, *capacity, *entry_size, *batch)
                    .map_err(|e| err(&format!("bad Append geometry: {e}")))?;
                if *list_stride < layout.region_len()
                    || list_stride.saturating_mul(*lists as u64) > meta.len
                {
                    return Err(err("lists do not fit the region"));
                }
                let payload = match format {
                    AppendFormat::Sequenced => layout.stride() as usize,
                    AppendFormat::Reference => (*batch * *entry_size) as usize,
                };
                if payload > MAX_PAYLOAD {
                    return Err(err("batch too large"));
                }
                let n = *lists as usize;
                let st = AppendState {
                    layout,
                    first_list: *first_list,
                    lists: *lists,
                    list_stride: *list_stride,
                    entry: *entry_size as usize,
                    batch: *batch as usize,
                    list: vec![ListState::default(); n],
                    buf_stride: (*batch * *entry_size) as usize + MAX_VALUE_LEN,
                    buf: vec![0; n * ((*batch * *entry_size) as usize + MAX_VALUE_LEN)],
                    deadlines: VecDeque::with_capacity(n.min(1 << 16) + 1024),
                };
                (StoreState::Append(st), payload)
            }
            StoreKind::Postcard { chunks, hops, hash } => {
                let layout = PostcardLayout::new(*chunks, *hops)
                    .map_err(|e| err(&format!("bad Postcarding geometry: {e}")))?;
                let cache_slots = cfg.postcard_cache_slots;
                let hasher = PostcardHasher::new(*hash, *chunks, cache_slots, *hops)
                    .ok_or_else(|| err("bad postcard hashing parameters"))?;
                let local = (cache_slots as usize).div_ceil(cfg.workers);
                let empty = CacheEntry {
                    flow: Key::default(),
                    occupied: false,
                    immediate: false,
                    path_len: 0,
                    count: 0,
                    mask: 0,
                    gen: 0,
                    values: [0; dta_proto::hash::MAX_HOPS],
                };
                let st = PostcardState {
                    hasher,
                    hops: *hops,
                    redundancy: cfg.postcard_redundancy.max(1),
                    cache: vec![empty; local],
                    deadlines: VecDeque::with_capacity(local.min(1 << 16) + 1024),
                    layout,
                };
                (StoreState::Postcard(st), layout.chunk_size() as usize)
            }
        };
        let tmpl = Templates::new(ep, qpb.remote_qpn, payload_len);
        let frame_len = tmpl.max_frame_len(&state);
        Ok(Store {
            name: meta.name.clone(),
            collector: ci,
            dest,
            base: meta.addr,
            rkey: Rkey(meta.rkey),
            qp: QpTx::new(
                qpb.local_qpn,
                qpb.remote_qpn,
                qpb.start_psn,
                cfg.qp,
                frame_len,
            ),
            tmpl,
            ep: *ep,
            payload_len,
            state,
        })
    }

    /// Transmit-batch frames one report may need in the worst case; a batch with room for
    /// `burst * frames_per_report_max() + 64` frames never stops a burst half-way.
    pub fn frames_per_report_max(&self) -> usize {
        self.max_frames_per_report + 1
    }

    /// Counters so far.
    pub fn counters(&self) -> &TranslatorCounters {
        &self.counters
    }

    /// Per-store QP counters: (store name, our QPN, stats).
    pub fn qp_stats(&self) -> impl Iterator<Item = (&str, Qpn, QpStats)> + '_ {
        self.stores
            .iter()
            .map(|s| (s.name.as_str(), s.qp.local_qpn, s.qp.stats))
    }

    /// Stores whose QP the responder broke (the control plane must reconnect them).
    pub fn broken_stores(&self) -> impl Iterator<Item = &str> + '_ {
        self.stores
            .iter()
            .filter(|s| s.qp.is_broken())
            .map(|s| s.name.as_str())
    }

    /// Replaces a store's QP after the control plane reconnected it.
    pub fn rebind(&mut self, store: &str, qpb: QpBinding, meta: Option<&StoreMeta>) -> bool {
        let tuning = self.cfg.qp;
        let Some(s) = self.stores.iter_mut().find(|s| s.name == store) else {
            return false;
        };
        if let Some(m) = meta {
            s.base = m.addr;
            s.rkey = Rkey(m.rkey);
        }
        s.tmpl = Templates::new(&s.ep, qpb.remote_qpn, s.payload_len);
        if let StoreState::KeyIncrement { atomic, .. } = &mut s.state {
            *atomic = FrameTemplate::new(&s.ep, op::RC_FETCH_ADD, qpb.remote_qpn, 0);
        }
        let frame_len = s.tmpl.max_frame_len(&s.state);
        self.counters.frames_unconfirmed_at_reconnect += s.qp.unconfirmed() as u64;
        s.qp = QpTx::new(
            qpb.local_qpn,
            qpb.remote_qpn,
            qpb.start_psn,
            tuning,
            frame_len,
        );
        true
    }

    /// Continues the Append lists of `store` that this worker owns after the collector's heads:
    /// `next[l]` is the sequence number the collector expects next for store-local list `l`
    /// (RDMA_CM list-head messages). A list never moves backwards (a reconnecting worker may be
    /// ahead of what reached the collector). Returns the lists moved forward.
    pub fn seed_append_heads(&mut self, store: &str, next: &[u64]) -> u32 {
        let (worker, workers) = (self.cfg.worker, self.cfg.workers.max(1));
        let Some(s) = self.stores.iter_mut().find(|s| s.name == store) else {
            return 0;
        };
        let StoreState::Append(a) = &mut s.state else {
            return 0;
        };
        if a.layout.format() != AppendFormat::Sequenced {
            return 0;
        }
        let mut moved = 0;
        for (li, &n) in next.iter().enumerate().take(a.lists as usize) {
            let owned = workers == 1 || (a.first_list as usize + li) % workers == worker;
            let last = n.saturating_sub(1).min(AppendLayout::MAX_SEQ - 1);
            if owned && last > a.list[li].written {
                a.list[li].written = last;
                moved += 1;
            }
        }
        moved
    }

    /// Reports handed off to other workers since the last call.
    pub fn take_handoffs(&mut self) -> std::vec::Drain<'_, Handoff> {
        self.handoffs.drain(..)
    }

    /// Reports pending inside the pipeline (Append batches, postcard entries, backlog).
    pub fn pending_reports(&self) -> u64 {
        let mut n = self.backlog.len() as u64;
        for s in &self.stores {
            match &s.state {
                StoreState::Append(a) => n += a.list.iter().map(|l| l.pending as u64).sum::<u64>(),
                StoreState::Postcard(p) => {
                    n += p
                        .cache
                        .iter()
                        .filter(|e| e.occupied)
                        .map(|e| e.count as u64)
                        .sum::<u64>()
                }
                _ => {}
            }
        }
        n
    }

    /// Processes a burst of report datagrams. Returns how many were consumed: fewer than
    /// `burst.len()` only when `tx` ran out of room (send it and call again with the rest).
    ///
    /// Reports are handled [`LOOKAHEAD`] at a time in two passes: the first parses them and,
    /// for postcards, hashes the flow and loads its cache entry; the second translates them in
    /// order. The passes' iterations are independent of each other, so the CPU overlaps one
    /// report's CRC chain and cache miss with the next report's instead of waiting for each in
    /// turn. The first pass has no side effects: every count happens in the second.
    pub fn handle_reports(&mut self, now: u64, burst: &[Datagram<'_>], tx: &mut TxBatch) -> usize {
        if self.resending {
            self.retransmit(now, tx);
        }
        let mut report = Report::PLACEHOLDER;
        for (i, d) in burst.iter().enumerate() {
            if tx.remaining() < self.max_frames_per_report + 1 {
                return i;
            }
            self.counters.rx_datagrams += 1;
            match parse_report_into(d.payload, &self.cfg.parse, &mut report) {
                Ok(()) => {}
                Err(e) => {
                    match e {
                        WireError::Truncated => self.counters.drop_truncated += 1,
                        WireError::Malformed => self.counters.drop_malformed += 1,
                        WireError::UnknownOpcode => self.counters.drop_unknown_opcode += 1,
                        WireError::UnsupportedVersion => self.counters.drop_bad_version += 1,
                    }
                    continue;
                }
            };
            match report.primitive {
                Primitive::KeyWrite { .. } => self.counters.reports_keywrite += 1,
                Primitive::KeyIncrement { .. } => self.counters.reports_keyincrement += 1,
                Primitive::Append { .. } => self.counters.reports_append += 1,
                Primitive::Postcard { .. } => self.counters.reports_postcard += 1,
            }
            if report.header.retransmittable {
                if let Some(seq) = report.header.seq {
                    self.track_sequence(d.src, seq, report.header.profile, tx);
                }
            }
            self.dispatch(now, &report, *d.dst.ip(), tx);
        }
        burst.len()
    }

    /// Counts hand-offs the worker could not deliver (the owner's ring was full).
    pub fn count_handoff_drops(&mut self, n: u64) {
        self.counters.drop_handoff_full += n;
    }

    /// Processes a report another worker handed over (it was already counted there as
    /// received; here it is translated or dropped).
    pub fn handle_handoff(&mut self, now: u64, h: &Handoff, tx: &mut TxBatch) -> bool {
        if self.resending {
            self.retransmit(now, tx);
        }
        if tx.remaining() < self.max_frames_per_report + 1 {
            return false;
        }
        self.dispatch(now, &h.report, h.dst, tx);
        true
    }

    /// The worker that owns report `r` for store `store`, and the postcard cache index computed
    /// on the way ([`NO_HINT`] if none was).
    #[inline(always)]
    fn owner_of(&self, store: usize, r: &Report) -> (usize, u32) {
        if self.cfg.workers == 1 {
            return (0, NO_HINT);
        }
        match (&self.stores[store].state, r.primitive) {
            (StoreState::Append(_), Primitive::Append { list, .. }) => {
                (list as usize % self.cfg.workers, NO_HINT)
            }
            (StoreState::Postcard(p), Primitive::Postcard { flow, .. }) => {
                let h = p.hasher.cache_index(&flow);
                (h as usize % self.cfg.workers, h)
            }
            _ => (self.cfg.worker, NO_HINT),
        }
    }

    #[inline(always)]
    fn route(&self, r: &Report, dst: Ipv4Addr) -> Option<usize> {
        let (route, key) = match &r.primitive {
            Primitive::KeyWrite { key, .. } => (&self.cfg.route_keywrite, key),
            Primitive::KeyIncrement { key, .. } => (&self.cfg.route_keyincrement, key),
            Primitive::Postcard { flow, .. } => (&self.cfg.route_postcard, flow),
            Primitive::Append { list, .. } => {
                return self.stores.iter().position(|s| match &s.state {
                    StoreState::Append(a) => list.wrapping_sub(a.first_list) < a.lists,
                    _ => false,
                });
            }
        };
        match route {
            Route::Single(i) => Some(*i),
            Route::ByDestination(v) => v.iter().find(|(ip, _)| *ip == dst).map(|(_, i)| *i),
            Route::ByKeyHash(v) => Some(v[IEEE.checksum(key.as_bytes()) as usize % v.len()]),
            Route::None => None,
        }
    }

    #[inline(always)]
    fn dispatch(&mut self, now: u64, r: &Report, dst: Ipv4Addr, tx: &mut TxBatch) {
        let Some(si) = self.route(r, dst) else {
            match r.primitive {
                Primitive::Append { .. } => self.counters.drop_unknown_list += 1,
                _ => self.counters.drop_no_store += 1,
            }
            return;
        };
        let (owner, hint) = self.owner_of(si, r);
        if owner != self.cfg.worker {
            self.counters.handoffs_out += 1;
            self.handoffs.push(Handoff {
                worker: owner,
                at: now,
                report: *r,
                dst,
            });
            return;
        }
        // Validate before spending budget.
        let messages = match (&self.stores[si].state, &r.primitive) {
            (
                StoreState::KeyWrite { layout, .. },
                Primitive::KeyWrite {
                    redundancy, value, ..
                },
            ) => {
                if *redundancy == 0 || *redundancy > self.cfg.max_redundancy {
                    self.counters.drop_bad_redundancy += 1;
                    return;
                }
                if value.len() > layout.value_width() {
                    self.counters.drop_value_too_long += 1;
                    return;
                }
                *redundancy as u64
            }
            (StoreState::KeyIncrement { .. }, Primitive::KeyIncrement { redundancy, .. }) => {
                if *redundancy == 0 || *redundancy > self.cfg.max_redundancy {
                    self.counters.drop_bad_redundancy += 1;
                    return;
                }
                *redundancy as u64 + r.header.immediate as u64
            }
            (StoreState::Append(a), Primitive::Append { value, .. }) => {
                if value.len() > a.entry {
                    self.counters.drop_value_too_long += 1;
                    return;
                }
                // One message per batch; charge it when the batch starts.
                0
            }
            (StoreState::Postcard(p), Primitive::Postcard { hop, path_len, .. }) => {
                if *hop >= p.hops || *path_len > p.hops || (*path_len != 0 && *hop >= *path_len) {
                    self.counters.drop_bad_hop += 1;
                    return;
                }
                0
            }
            _ => {
                self.counters.drop_no_store += 1;
                return;
            }
        };
        let store = &self.stores[si];
        if store.qp.is_broken() {
            self.counters.drop_qp_broken += 1;
            return;
        }
        if store.qp.is_paused(now) {
            if r.header.priority == Priority::High && self.backlog.len() < self.cfg.backlog {
                self.counters.queued_high += 1;
                self.backlog.push_back((*r, dst));
            } else {
                self.counters.drop_qp_paused += 1;
            }
            return;
        }
        let needs_budget = match &store.state {
            StoreState::Append(a) => {
                let Primitive::Append { list, .. } = r.primitive else {
                    unreachable!()
                };
                a.list[(list - a.first_list) as usize].pending == 0
            }
            StoreState::Postcard(_) => false,
            _ => true,
        };
        if needs_budget {
            let ci = store.collector;
            if let Some(b) = self.buckets[ci].as_mut() {
                if !b.try_take(now, messages.max(1), r.header.priority) {
                    match r.header.priority {
                        Priority::Low => self.counters.drop_overload_low += 1,
                        Priority::Medium => self.counters.drop_overload_medium += 1,
                        Priority::High => {
                            if self.backlog.len() < self.cfg.backlog {
                                self.counters.queued_high += 1;
                                self.backlog.push_back((*r, dst));
                            } else {
                                self.counters.drop_backlog_full += 1;
                            }
                        }
                    }
                    return;
                }
            }
        }
        self.translate(now, si, r, hint, tx);
    }

    #[inline(always)]
    fn translate(&mut self, now: u64, si: usize, r: &Report, hint: u32, tx: &mut TxBatch) {
        let off = if self.cfg.l2_frames { 0 } else { L2L4_LEN };
        let imm_flag = r.header.immediate;
        let s = &mut self.stores[si];
        let c = &mut self.counters;
        match (&mut s.state, &r.primitive) {
            (
                StoreState::KeyWrite { hasher, layout },
                Primitive::KeyWrite {
                    redundancy,
                    key,
                    value,
                },
            ) => {
                let n = *redundancy as usize;
                let mut slots = [0u32; MAX_REDUNDANCY];
                let checksum = hasher.checksum_and_slots(key, n, &mut slots);
                let ss = layout.slot_size() as usize;
                let mut payload = [0u8; 64];
                layout.encode_slot(checksum, value.as_bytes(), &mut payload[..ss]);
                for (i, &slot) in slots[..n].iter().enumerate() {
                    let va = s.base + layout.slot_offset(slot);
                    if i > imm_flag as usize {
                        // The previous frame is a plain WRITE of the same payload.
                        emit_replica(&mut s.qp, &s.tmpl, now, va, tx, c);
                        continue;
                    }
                    let imm = imm_flag && i == 0;
                    emit_write(
                        &mut s.qp,
                        &s.tmpl,
                        s.dest,
                        s.rkey,
                        now,
                        va,
                        &payload[..ss],
                        imm.then_some(checksum),
                        off,
                        tx,
                        c,
                    );
                }
                c.translated += 1;
            }
            (
                StoreState::KeyIncrement {
                    hasher,
                    layout,
                    atomic,
                },
                Primitive::KeyIncrement {
                    redundancy,
                    key,
                    delta,
                },
            ) => {
                let n = *redundancy as usize;
                let mut slots = [0u32; MAX_REDUNDANCY];
                hasher.slots(key, n, &mut slots);
                for &slot in &slots[..n] {
                    let va = s.base + layout.slot_offset(slot);
                    let (psn, ack_req) = s.qp.take(now);
                    let rkey = s.rkey;
                    let fill = |ext: &mut [u8]| {
                        ext[0..8].copy_from_slice(&va.to_be_bytes());
                        ext[8..12].copy_from_slice(&rkey.0.to_be_bytes());
                        ext[12..20].copy_from_slice(&delta.to_be_bytes());
                        ext[20..28].fill(0);
                        debug_assert_eq!(ext.len(), ATOMIC_ETH_LEN);
                    };
                    let ok = match s.qp.ring_slot(psn) {
                        // Built in its retransmission slot, then copied out.
                        Some(slot) => {
                            let n = atomic.emit(slot, psn, ack_req, fill);
                            let f = &slot[..n];
                            tx.push_with(s.dest, off, |buf| {
                                copy_frame(buf, f);
                                n
                            })
                        }
                        None => {
                            tx.push_with(s.dest, off, |buf| atomic.emit(buf, psn, ack_req, fill))
                        }
                    };
                    debug_assert!(ok, "tx room is checked per report");
                    c.frames += 1;
                    c.frames_atomic += 1;
                }
                if imm_flag {
                    let checksum = hasher.checksum(key);
                    emit_write(
                        &mut s.qp,
                        &s.tmpl,
                        s.dest,
                        s.rkey,
                        now,
                        s.base,
                        &[],
                        Some(checksum),
                        off,
                        tx,
                        c,
                    );
                }
                c.translated += 1;
            }
            (StoreState::Append(a), Primitive::Append { list, value }) => {
                let li = (list - a.first_list) as usize;
                let st = &mut a.list[li];
                let p = st.pending as usize;
                let at = li * a.buf_stride + p * a.entry;
                // The padded value fills the entry (value, then zeros) and spills zeros into
                // entries not yet written or the slack; `flush_list` zeroes what a partial
                // batch leaves behind.
                a.buf[at..at + MAX_VALUE_LEN].copy_from_slice(value.padded());
                st.pending += 1;
                st.imm |= imm_flag;
                if p == 0 && self.cfg.append_flush_ns > 0 {
                    a.deadlines
                        .push_back((now + self.cfg.append_flush_ns, li as u32, st.gen));
                }
                if p + 1 == a.batch {
                    flush_list(s, li, now, off, tx, c);
                    c.append_batches += 1;
                }
            }
            (
                StoreState::Postcard(_),
                Primitive::Postcard {
                    flow,
                    hop,
                    path_len,
                    value,
                },
            ) => {
                postcard(
                    s,
                    self.cfg.workers,
                    now,
                    self.cfg.postcard_flush_ns,
                    flow,
                    hint,
                    *hop,
                    *path_len,
                    *value,
                    imm_flag,
                    off,
                    tx,
                    c,
                );
            }
            _ => unreachable!("dispatch matched store and primitive"),
        }
    }

    fn track_sequence(&mut self, src: SocketAddrV4, seq: u32, profile: Profile, tx: &mut TxBatch) {
        let wide = profile == Profile::Extended;
        let modulus_mask: u32 = if wide { u32::MAX } else { 0xff };
        let idx = match self.reporters.iter().position(|r| r.addr == src) {
            Some(i) => i,
            None => {
                if self.reporters.len() >= self.cfg.max_reporters {
                    return;
                }
                // The reference tracker starts at 0 and expects 1 first; extended reporters are
                // learned from their first report.
                let next = if wide { seq.wrapping_add(1) } else { 1 };
                self.reporters.push(ReporterState { addr: src, next });
                if wide {
                    return;
                }
                self.reporters.len() - 1
            }
        };
        let st = &mut self.reporters[idx];
        let ahead = seq.wrapping_sub(st.next) & modulus_mask;
        let half = if wide { 1u32 << 31 } else { 128 };
        if ahead == 0 {
            st.next = st.next.wrapping_add(1) & modulus_mask;
            return;
        }
        if ahead >= half {
            self.counters.reporter_late += 1;
            return;
        }
        let first = st.next;
        let last_in_order = st.next.wrapping_sub(1) & modulus_mask;
        st.next = seq.wrapping_add(1) & modulus_mask;
        self.counters.reporter_gaps += 1;
        self.counters.reporter_missing += ahead as u64;
        let nack = if wide {
            NackRepr::Extended {
                first_missing: first,
                count: ahead,
            }
        } else {
            NackRepr::Reference {
                last_in_order: last_in_order as u8,
            }
        };
        let dest = SocketAddrV4::new(*src.ip(), self.cfg.nack_port);
        let l2 = self.cfg.l2_frames;
        let (local, mac) = (self.cfg.local, self.cfg.local_mac);
        let ok = tx.push_with(dest, if l2 { L2L4_LEN } else { 0 }, |buf| {
            if l2 {
                crate::datapath::udp_frame::emit(buf, mac, local, dest, |p| nack.emit(p))
            } else {
                nack.emit(buf)
            }
        });
        if ok {
            self.counters.nacks_sent += 1;
        }
    }

    /// Processes RoCEv2 responses (ACK, NAK, atomic ACK) from collectors.
    pub fn handle_responses(&mut self, now: u64, burst: &[Datagram<'_>], tx: &mut TxBatch) {
        for d in burst {
            self.counters.roce_rx += 1;
            let Ok(pkt) = RocePacket::parse(d.payload) else {
                self.counters.roce_rx_invalid += 1;
                continue;
            };
            let (Some(aeth), true) = (
                pkt.aeth,
                matches!(
                    pkt.bth.opcode,
                    op::RC_ACKNOWLEDGE | op::RC_ATOMIC_ACKNOWLEDGE
                ),
            ) else {
                self.counters.roce_rx_invalid += 1;
                continue;
            };
            let Some(s) = self
                .stores
                .iter_mut()
                .find(|s| s.qp.local_qpn == pkt.bth.dest_qp && s.dest.ip() == d.src.ip())
            else {
                self.counters.roce_rx_invalid += 1;
                continue;
            };
            match s.qp.on_response(now, aeth.syndrome, pkt.bth.psn) {
                QpEvent::Broken => log::warn!(
                    "store {}: collector reported a fatal error ({:?}); QP needs reconnecting",
                    s.name,
                    aeth.syndrome
                ),
                QpEvent::Retransmit => self.resending = true,
                QpEvent::None | QpEvent::Probe => {}
            }
        }
        if self.resending {
            self.retransmit(now, tx);
        }
        self.drain_backlog(now, tx);
    }

    /// Pushes every QP's frames waiting to be resent (go-back-N) to `tx`, before any new frame.
    ///
    /// Resent frames are RDMA messages like any other: each takes a token from its collector's
    /// bucket when there is one, but never waits for one and is never dropped for priority (the
    /// responder must see them before anything newer), so under overload they leave fewer
    /// tokens to new low-priority reports. They count in `frames` and, per QP, in
    /// `retransmitted_frames`.
    fn retransmit(&mut self, now: u64, tx: &mut TxBatch) {
        let off = if self.cfg.l2_frames { 0 } else { L2L4_LEN };
        let mut pending = false;
        for s in &mut self.stores {
            if !s.qp.resend_pending() {
                continue;
            }
            let n = s.qp.retransmit(now, tx, s.dest, off);
            if n > 0 {
                self.counters.frames += n as u64;
                if let Some(b) = self.buckets[s.collector].as_mut() {
                    b.charge(now, n as u64);
                }
            }
            pending |= s.qp.resend_pending();
        }
        self.resending = pending;
    }

    /// Fires timers: partial Append batches, aged postcard entries, ACK timeouts (probes),
    /// backlog draining.
    pub fn poll(&mut self, now: u64, tx: &mut TxBatch) {
        let off = if self.cfg.l2_frames { 0 } else { L2L4_LEN };
        for si in 0..self.stores.len() {
            let s = &mut self.stores[si];
            let c = &mut self.counters;
            if let Some(psn) = s.qp.poll_timeout(now) {
                if tx.remaining() > 0 {
                    let got = s.qp.take_probe(now);
                    debug_assert_eq!(got, psn);
                    let (base, rkey) = (s.base, s.rkey);
                    let t = &s.tmpl.probe;
                    if tx.push_with(s.dest, off, |buf| {
                        t.emit(buf, got, true, |ext| write_reth(ext, base, rkey, 0))
                    }) {
                        s.qp.record(got, tx.frame(tx.len() - 1));
                    }
                    c.frames += 1;
                }
            }
            if s.qp.resend_pending() {
                // Resends go out before this store's timers emit new frames.
                let n = s.qp.retransmit(now, tx, s.dest, off);
                if n > 0 {
                    c.frames += n as u64;
                    if let Some(b) = self.buckets[s.collector].as_mut() {
                        b.charge(now, n as u64);
                    }
                }
                self.resending |= s.qp.resend_pending();
            }
            match &s.state {
                StoreState::Append(_) => append_timeouts(s, now, off, tx, c),
                StoreState::Postcard(_) => postcard_timeouts(s, now, off, tx, c),
                _ => {}
            }
        }
        if self.resending {
            self.retransmit(now, tx);
        }
        self.drain_backlog(now, tx);
    }

    fn drain_backlog(&mut self, now: u64, tx: &mut TxBatch) {
        while let Some(&(r, dst)) = self.backlog.front() {
            if tx.remaining() < self.max_frames_per_report + 1 {
                return;
            }
            let Some(si) = self.route(&r, dst) else {
                self.backlog.pop_front();
                self.counters.drop_no_store += 1;
                continue;
            };
            let s = &self.stores[si];
            if s.qp.is_broken() {
                self.backlog.pop_front();
                self.counters.drop_qp_broken += 1;
                continue;
            }
            if s.qp.is_paused(now) {
                return;
            }
            let n = match r.primitive {
                Primitive::KeyWrite { redundancy, .. }
                | Primitive::KeyIncrement { redundancy, .. } => redundancy as u64,
                _ => 1,
            };
            if let Some(b) = self.buckets[s.collector].as_mut() {
                if !b.try_take(now, n, Priority::High) {
                    return;
                }
            }
            self.backlog.pop_front();
            self.translate(now, si, &r, NO_HINT, tx);
        }
    }

    /// When [`Pipeline::poll`] should run next (ns), if any timer is armed.
    pub fn next_deadline(&self) -> Option<u64> {
        let mut t: Option<u64> = None;
        let mut min = |x: u64| t = Some(t.map_or(x, |y: u64| y.min(x)));
        for s in &self.stores {
            if let Some(d) = s.qp.next_deadline() {
                min(d);
            }
            match &s.state {
                StoreState::Append(a) => {
                    if let Some(&(d, _, _)) = a.deadlines.front() {
                        min(d);
                    }
                }
                StoreState::Postcard(p) => {
                    if let Some(&(d, _, _)) = p.deadlines.front() {
                        min(d);
                    }
                }
                _ => {}
            }
        }
        if !self.backlog.is_empty() {
            for b in self.buckets.iter().flatten() {
                min(b.next_token_at(1));
            }
        }
        t
    }

    /// Frames sent and not yet confirmed by the collectors (still held for retransmission), on
    /// QPs that are not broken. After [`Pipeline::confirm_promptly`], polling drives this to 0
    /// on a working link: a clean shutdown waits for it.
    pub fn unconfirmed_frames(&self) -> u64 {
        self.stores
            .iter()
            .filter(|s| !s.qp.is_broken())
            .map(|s| s.qp.unconfirmed() as u64)
            .sum()
    }

    /// Makes every QP ask about its unconfirmed frames at once (shutdown): a lost last frame is
    /// then resent within a round trip instead of a few RTOs.
    pub fn confirm_promptly(&mut self) {
        for s in &mut self.stores {
            s.qp.confirm_promptly();
        }
    }

    /// Writes every partial Append batch and postcard entry now (clean shutdown).
    pub fn flush_all(&mut self, now: u64, tx: &mut TxBatch) -> bool {
        let off = if self.cfg.l2_frames { 0 } else { L2L4_LEN };
        for s in &mut self.stores {
            let c = &mut self.counters;
            match &mut s.state {
                StoreState::Append(a) => {
                    let lists: Vec<usize> = (0..a.lists as usize)
                        .filter(|&li| a.list[li].pending > 0)
                        .collect();
                    for li in lists {
                        if tx.remaining() < 2 {
                            return false;
                        }
                        flush_list(s, li, now, off, tx, c);
                        c.append_partial_flushes += 1;
                    }
                }
                StoreState::Postcard(p) => {
                    let n = p.cache.len();
                    for i in 0..n {
                        let StoreState::Postcard(p) = &mut s.state else {
                            unreachable!()
                        };
                        if !p.cache[i].occupied {
                            continue;
                        }
                        if tx.remaining() < p.redundancy as usize + 1 {
                            return false;
                        }
                        emit_chunk(s, i, now, off, tx, c);
                        c.postcard_timeouts += 1;
                    }
                }
                _ => {}
            }
        }
        true
    }
}

#[inline]
fn write_reth(ext: &mut [u8], va: u64, rkey: Rkey, len: u32) {
    ext[0..8].copy_from_slice(&va.to_be_bytes());
    ext[8..12].copy_from_slice(&rkey.0.to_be_bytes());
    ext[12..16].copy_from_slice(&len.to_be_bytes());
}

#[allow(clippy::too_many_arguments)]
#[inline]
fn emit_write(
    qp: &mut QpTx,
    t: &Templates,
    dest: SocketAddrV4,
    rkey: Rkey,
    now: u64,
    va: u64,
    payload: &[u8],
    imm: Option<u32>,
    off: usize,
    tx: &mut TxBatch,
    c: &mut TranslatorCounters,
) {
    let (psn, ack_req) = qp.take(now);
    let pl = payload.len();
    let tmpl = match (imm, pl) {
        (Some(_), 0) => &t.imm0,
        (Some(_), _) => &t.write_imm,
        (None, 0) => &t.probe,
        (None, _) => &t.write,
    };
    let ok = tx.push_with(dest, off, |buf| {
        let n = tmpl.emit(buf, psn, ack_req, |ext| {
            write_reth(ext, va, rkey, pl as u32);
            let mut o = RETH_LEN;
            if let Some(v) = imm {
                ext[o..o + 4].copy_from_slice(&v.to_be_bytes());
                o += 4;
            }
            ext[o..o + pl].copy_from_slice(payload);
        });
        qp.record(psn, &buf[..n]);
        n
    });
    debug_assert!(ok, "tx room is checked per report");
    c.frames += 1;
    if imm.is_some() {
        c.frames_imm += 1;
    }
}

/// Emits the next replica of the plain WRITE just pushed to `tx`: same payload, new PSN and
/// address (see [`RethReplica`]).
#[inline]
fn emit_replica(
    qp: &mut QpTx,
    t: &Templates,
    now: u64,
    va: u64,
    tx: &mut TxBatch,
    c: &mut TranslatorCounters,
) {
    let (psn, ack_req) = qp.take(now);
    let ok = tx.push_copy_of_last(|f| {
        t.replica.patch(f, psn, ack_req, va);
        qp.record(psn, f);
    });
    debug_assert!(ok, "tx room is checked per report");
    c.frames += 1;
}

fn flush_list(
    s: &mut Store,
    li: usize,
    now: u64,
    off: usize,
    tx: &mut TxBatch,
    c: &mut TranslatorCounters,
) {
    let StoreState::Append(a) = &mut s.state else {
        unreachable!()
    };
    let st = &mut a.list[li];
    let count = st.pending as usize;
    let bsz = a.batch * a.entry;
    let seq = st.written + 1;
    let imm = st.imm.then_some(a.first_list + li as u32);
    st.written = seq;
    st.pending = 0;
    st.imm = false;
    st.gen = st.gen.wrapping_add(1);
    let slot = a.layout.slot_for_seq(seq);
    let va = s.base + li as u64 * a.list_stride + a.layout.batch_offset(slot);
    let start = li * a.buf_stride;
    if count < a.batch {
        // Entries a previous batch left behind.
        a.buf[start + count * a.entry..start + bsz].fill(0);
    }
    let len = match a.layout.format() {
        AppendFormat::Sequenced => {
            a.buf[start + bsz..start + bsz + 8]
                .copy_from_slice(&a.layout.encode_trailer(seq, count as u16));
            bsz + 8
        }
        AppendFormat::Reference => bsz,
    };
    emit_write(
        &mut s.qp,
        &s.tmpl,
        s.dest,
        s.rkey,
        now,
        va,
        &a.buf[start..start + len],
        imm,
        off,
        tx,
        c,
    );
    c.translated += count as u64;
}

#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn postcard(
    s: &mut Store,
    workers: usize,
    now: u64,
    flush_ns: u64,
    flow: &Key,
    hint: u32,
    hop: u8,
    path_len: u8,
    value: u32,
    imm: bool,
    off: usize,
    tx: &mut TxBatch,
    c: &mut TranslatorCounters,
) {
    let StoreState::Postcard(p) = &mut s.state else {
        unreachable!()
    };
    // Worker w owns the cache indices h with h % workers == w, stored at h / workers, which
    // is below ceil(cache_slots / workers) = cache.len(). No division with one worker.
    let h = cache_hash(p, flow, hint) as usize;
    let idx = if workers == 1 { h } else { h / workers };
    let e = &p.cache[idx];
    if e.occupied && e.flow != *flow {
        // Another flow holds the slot: write the *old* flow's postcards to the *old* flow's
        // chunk before reusing the slot (the reference wrote them to the new flow's chunk).
        emit_chunk(s, idx, now, off, tx, c);
        c.postcard_evictions += 1;
    }
    let StoreState::Postcard(p) = &mut s.state else {
        unreachable!()
    };
    let e = &mut p.cache[idx];
    if !e.occupied {
        e.occupied = true;
        e.flow = *flow;
        e.mask = 0;
        e.count = 0;
        e.path_len = 0;
        e.immediate = false;
        e.gen = e.gen.wrapping_add(1);
        if flush_ns > 0 {
            p.deadlines.push_back((now + flush_ns, idx as u32, e.gen));
        }
    }
    let bit = 1u16 << hop;
    if e.mask & bit != 0 {
        c.drop_postcard_duplicate_hop += 1;
    } else {
        e.mask |= bit;
        e.count += 1;
    }
    e.values[hop as usize] = value;
    e.immediate |= imm;
    if path_len != 0 {
        e.path_len = path_len;
    }
    let want = if e.path_len != 0 { e.path_len } else { p.hops };
    if e.count >= want {
        emit_chunk(s, idx, now, off, tx, c);
        c.postcard_emits += 1;
    }
}

fn append_timeouts(
    s: &mut Store,
    now: u64,
    off: usize,
    tx: &mut TxBatch,
    c: &mut TranslatorCounters,
) {
    loop {
        let StoreState::Append(a) = &mut s.state else {
            unreachable!()
        };
        let Some(&(deadline, li, gen)) = a.deadlines.front() else {
            return;
        };
        if deadline > now || tx.remaining() < 2 {
            return;
        }
        a.deadlines.pop_front();
        let li = li as usize;
        if a.list[li].gen == gen && a.list[li].pending > 0 {
            flush_list(s, li, now, off, tx, c);
            c.append_partial_flushes += 1;
        }
    }
}

fn postcard_timeouts(
    s: &mut Store,
    now: u64,
    off: usize,
    tx: &mut TxBatch,
    c: &mut TranslatorCounters,
) {
    loop {
        let StoreState::Postcard(p) = &mut s.state else {
            unreachable!()
        };
        let Some(&(deadline, idx, gen)) = p.deadlines.front() else {
            return;
        };
        if deadline > now || tx.remaining() < p.redundancy as usize + 1 {
            return;
        }
        p.deadlines.pop_front();
        let e = &p.cache[idx as usize];
        if e.occupied && e.gen == gen {
            emit_chunk(s, idx as usize, now, off, tx, c);
            c.postcard_timeouts += 1;
        }
    }
}

/// Writes cache entry `idx` to its flow's chunk(s) and frees the entry.
fn emit_chunk(
    s: &mut Store,
    idx: usize,
    now: u64,
    off: usize,
    tx: &mut TxBatch,
    c: &mut TranslatorCounters,
) {
    let StoreState::Postcard(p) = &mut s.state else {
        unreachable!()
    };
    let e = &mut p.cache[idx];
    e.occupied = false;
    let e = &p.cache[idx];
    let hops = p.hops as usize;
    // Hops at or past the path length are blank whatever arrived for them.
    let present = if e.path_len != 0 {
        e.mask & ((1u32 << e.path_len) - 1) as u16
    } else {
        e.mask
    };
    let n = p.redundancy;
    let d = p.hasher.digest(&e.flow, (n as usize).max(1));
    let mut chunk = [0u8; 64];
    for (h, word) in chunk.chunks_exact_mut(4).take(hops).enumerate() {
        let w = if present & (1 << h) != 0 {
            p.hasher
                .encode_word(d.hop[h], e.values[h])
                .unwrap_or_else(|| p.hasher.blank_word(d.hop[h]))
        } else {
            p.hasher.blank_word(d.hop[h])
        };
        word.copy_from_slice(&w);
    }
    let cs = p.layout.chunk_size() as usize;
    let imm = e.immediate.then_some(d.chunk[0]);
    let translated = e.count as u64;
    let mut addrs = [0u64; MAX_REDUNDANCY];
    for (a, &c) in addrs.iter_mut().zip(&d.chunk).take(n as usize) {
        *a = s.base + p.layout.chunk_offset(c);
    }
    for (j, &va) in addrs[..n as usize].iter().enumerate() {
        if j > imm.is_some() as usize {
            emit_replica(&mut s.qp, &s.tmpl, now, va, tx, c);
            continue;
        }
        emit_write(
            &mut s.qp,
            &s.tmpl,
            s.dest,
            s.rkey,
            now,
            va,
            &chunk[..cs],
            if j == 0 { imm } else { None },
            off,
            tx,
            c,
        );
    }
    c.translated += translated;
}

impl PipelineConfig {
    /// A one-worker configuration with every tunable at its default and no routes; callers set
    /// what they need (tests, benchmarks, the replay harness).
    pub fn defaults(
        local: SocketAddrV4,
        local_mac: dta_proto::wire::ethernet::MacAddr,
    ) -> PipelineConfig {
        PipelineConfig {
            worker: 0,
            workers: 1,
            parse: ParseConfig::default(),
            max_redundancy: 4,
            l2_frames: true,
            local,
            local_mac,
            nack_port: dta_proto::consts::DTA_NACK_PORT,
            append_flush_ns: 1_000_000,
            postcard_flush_ns: 0,
            postcard_cache_slots: 32768,
            postcard_redundancy: 1,
            qp: QpTuning::default(),
            rate: RateLimit::default(),
            backlog: 1024,
            max_reporters: 64,
            route_keywrite: Route::None,
            route_keyincrement: Route::None,
            route_postcard: Route::None,
        }
    }

    /// Routes every primitive the single store `kind` serves to store 0.
    pub fn route_all_to_first(mut self, kind: &StoreKind) -> PipelineConfig {
        match kind {
            StoreKind::KeyWrite { .. } => self.route_keywrite = Route::Single(0),
            StoreKind::KeyIncrement { .. } => self.route_keyincrement = Route::Single(0),
            StoreKind::Postcard { .. } => self.route_postcard = Route::Single(0),
            StoreKind::Append { .. } => {}
        }
        self
    }
}

/// A one-store pipeline writing to a synthetic collector (benchmarks and profiling).
pub fn single_store_pipeline(kind: StoreKind) -> Pipeline {
    single_store_pipeline_with(kind, |_| {})
}

/// [`single_store_pipeline`] with `tune` applied to the configuration first.
pub fn single_store_pipeline_with(
    kind: StoreKind,
    tune: impl FnOnce(&mut PipelineConfig),
) -> Pipeline {
    let local = SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 101), 4791);
    let mut cfg = PipelineConfig::defaults(
        local,
        dta_proto::wire::ethernet::MacAddr([2, 0, 0, 0, 0, 1]),
    )
    .route_all_to_first(&kind);
    tune(&mut cfg);
    let meta = StoreMeta {
        name: "s".into(),
        addr: 0x7f00_0000_0000,
        len: 1 << 30,
        rkey: 0x1234,
        qps: vec![dta_proto::meta::QpMeta {
            qpn: 0x11,
            psn: 0,
            peer_qpn: 0x100,
        }],
        kind,
    };
    let target = CollectorTarget {
        roce: SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 51), 4791),
        mac: dta_proto::wire::ethernet::MacAddr([2, 0, 0, 0, 0, 0x51]),
        stores: vec![(
            meta,
            QpBinding {
                local_qpn: Qpn::new(0x100),
                remote_qpn: Qpn::new(0x11),
                start_psn: Psn::new(0),
            },
        )],
    };
    Pipeline::new(cfg, &[target]).expect("a valid single-store pipeline")
}

#[cfg(test)]
mod tests {
    use super::*;
    use dta_proto::hash::HashProfile;
    use dta_proto::wire::report::{Profile, ReportHeader};
    use dta_proto::Value;

    #[test]
    fn a_reconnection_counts_the_frames_it_abandons() {
        let mut p = single_store_pipeline(StoreKind::KeyWrite {
            slots: 1024,
            slot_size: 32,
            hash: HashProfile::Independent,
        });
        let hdr = ReportHeader {
            profile: Profile::Extended,
            immediate: false,
            retransmittable: false,
            seq: Some(0),
            priority: Priority::Medium,
        };
        let bufs: Vec<Vec<u8>> = (0..5u32)
            .map(|i| {
                let r = Report {
                    header: hdr,
                    primitive: Primitive::KeyWrite {
                        redundancy: 2,
                        key: Key::new(&i.to_be_bytes()).unwrap(),
                        value: Value::new(&[7; 8]).unwrap(),
                    },
                };
                let mut b = vec![0u8; 64];
                let n = r.emit(Profile::Extended, &mut b).unwrap();
                b.truncate(n);
                b
            })
            .collect();
        let src = SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 9), 5000);
        let dst = SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 101), 40040);
        let burst: Vec<Datagram<'_>> = bufs
            .iter()
            .map(|b| Datagram {
                src,
                dst,
                ip: None,
                payload: b,
            })
            .collect();
        let mut tx = TxBatch::new(256, 2048);
        assert_eq!(p.handle_reports(1, &burst, &mut tx), 5);
        assert_eq!(p.counters().frames, 10);
        let qpb = QpBinding {
            local_qpn: Qpn::new(0x200),
            remote_qpn: Qpn::new(0x22),
            start_psn: Psn::new(100),
        };
        assert!(p.rebind("s", qpb, None));
        assert_eq!(p.counters().frames_unconfirmed_at_reconnect, 10);
        assert_eq!(p.unconfirmed_frames(), 0, "the new QP starts empty");
    }
}
