//! The per-core translation pipeline: DTA reports in, RoCEv2 frames and DTA NACKs out.
//!
//! A [`Pipeline`] is a plain struct owned by one worker (sans-I/O, after quinn): feed it bursts
//! of report datagrams ([`Pipeline::handle_reports`]) and of RoCEv2 responses
//! ([`Pipeline::handle_responses`]) with the current time, call [`Pipeline::poll`] when
//! [`Pipeline::next_deadline`] passes and [`Pipeline::poll_transmit`] before sending, and send
//! whatever it put in the caller's [`TxBatch`]. It performs no I/O, reads no clock and does
//! not allocate per packet.
//!
//! Every datagram handed in is counted: translated (its frames go straight into the transmit
//! batch, or wait in their QP's ring when the batch is full or the QP's window is closed),
//! held (an Append batch, a postcard cache entry, the high-priority backlog), handed to the
//! worker that owns it, or dropped under one `drop_*` reason. Room in the transmit batch never
//! decides any of that: [`Pipeline::poll_transmit`] pulls what waits.
//!
//! Each store is a [`QpSender`] (its QP, templates and typed emitters) and a primitive
//! ([`PrimitiveState`], one module per primitive). State is sharded by worker: each worker has
//! its own QP per store (so no PSN is shared between cores), owns the Append lists and the
//! postcard cache slots that hash to it, and hands reports it does not own to their owner.

use std::collections::VecDeque;
use std::net::{Ipv4Addr, SocketAddrV4};

use dta_proto::batch::{Datagram, TxBatch};
use dta_proto::geometry::StoreGeometry;
use dta_proto::hash::MAX_REDUNDANCY;
use dta_proto::meta::{StoreKind, StoreMeta};
use dta_proto::wire::ib::{opcode as op, Qpn};
use dta_proto::wire::nack::NackRepr;
use dta_proto::wire::report::{
    parse_append_fast, parse_keyed_into, parse_postcard_fast, parse_report_into, PostcardFields,
    Primitive, Priority, Profile, Report, ReportHeader,
};
use dta_proto::wire::roce::{RoceEndpoint, RocePacket, L2L4_LEN};
use dta_proto::wire::Error as WireError;
use dta_proto::Value;

use super::demux::{fast_map, FastMap};
use super::int_ingest::{count_error, Derived, IntIngest, IntSettings};
use super::primitive::{
    dispatch, postcard::NO_HINT, PrimitiveConfig, PrimitiveState, Refusal, Shard, StorePrimitive,
};
use super::qp::{QpEvent, QpStats};
pub use super::rate::RateLimit;
use super::rate::TokenBucket;
use super::reporters::{ReporterTracker, Sequence};
use super::sender::{QpSender, SenderSpec};
use super::stats::TranslatorCounters;
use super::udp_frame::NackOut;
use dta_proto::wire::sketch::{is_sketch_datagram, SketchReportRepr};
use dta_proto::wire::telemetry_report::TelemetryReport;

mod config;
mod runs;

use config::check_routes;
pub use config::{
    single_store_pipeline, single_store_pipeline_with, stores_pipeline_with, CollectorTarget,
    ConfigError, ListRoute, PipelineConfig, QpBinding, Route, RouteSet,
};

/// Frames a single report may need at most (over all stores), and a NACK.
fn max_frames_per_report(stores: &[Store], max_redundancy: u8) -> usize {
    stores
        .iter()
        .map(|s| s.prim.frames_per_report(max_redundancy))
        .max()
        .unwrap_or(1)
        + 1
}

/// One store: where its frames go, and its primitive.
struct Store {
    name: String,
    sender: QpSender,
    prim: PrimitiveState,
}

impl Store {
    /// Whether it is an Append store holding global list `list`.
    #[inline(always)]
    fn holds_list(&self, list: u32) -> bool {
        matches!(&self.prim, PrimitiveState::Append(a) if a.serves(list))
    }
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
    prim_cfg: PrimitiveConfig,
    stores: Vec<Store>,
    /// Our QPN → store index (ACK demultiplexing).
    by_qpn: FastMap<u32, usize>,
    /// Sketch ID → store index (Sketch-Merge reports).
    sketch_by_id: FastMap<u16, usize>,
    buckets: Vec<Option<TokenBucket>>,
    backlog: VecDeque<(Report, Ipv4Addr)>,
    reporters: ReporterTracker,
    counters: TranslatorCounters,
    handoffs: Vec<Handoff>,
    /// Frames a single report may need at most (over all stores), and a NACK.
    max_frames_per_report: usize,
    /// Append list ranges of a cluster epoch (empty: by the stores' own ranges).
    append_routes: Vec<ListRoute>,
    /// The cluster epoch routed, if the routes came from a cluster.
    route_epoch: Option<u32>,
    /// INT Telemetry Report ingest (`[int]`), if configured.
    int: Option<Box<IntIngest>>,
    /// Whether any store is an Append store (runs may take Appends: [`Pipeline::append_run`],
    /// and the Appends a keyed run takes).
    has_appends: bool,
    /// The store, if it is the only Append store (an Append's run store without a search).
    sole_append: Option<usize>,
}

impl Pipeline {
    /// Builds a worker's pipeline for the given collectors. Every store's metadata is validated
    /// ([`StoreGeometry`]): its layout must fit its region, so no frame can address bytes
    /// outside it.
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
        let prim_cfg = PrimitiveConfig {
            shard: Shard {
                worker: cfg.worker,
                workers: cfg.workers,
            },
            append_flush_ns: cfg.append_flush_ns,
            postcard_flush_ns: cfg.postcard_flush_ns,
            postcard_cache_slots: cfg.postcard_cache_slots,
            postcard_redundancy: cfg.postcard_redundancy,
            sketch: cfg.sketch.clone(),
            nack: NackOut {
                local: cfg.local,
                mac: cfg.local_mac,
                l2: cfg.l2_frames,
                port: cfg.nack_port,
            },
        };
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
                let err = |m: String| ConfigError(format!("store {}: {m}", meta.name));
                let g = StoreGeometry::try_from(meta).map_err(|e| err(e.to_string()))?;
                if let (Some(n), StoreKind::KeyWrite { .. } | StoreKind::KeyIncrement { .. }) =
                    (meta.redundancy, &meta.kind)
                {
                    if n.get() > cfg.max_redundancy {
                        return Err(err(format!(
                            "written with redundancy N={n}, above max_redundancy {}: every \
                             report would be dropped (raise translator.max_redundancy)",
                            cfg.max_redundancy
                        )));
                    }
                }
                let (prim, payload_len) =
                    PrimitiveState::new(&g, meta.redundancy, &prim_cfg).map_err(err)?;
                let sender = QpSender::new(SenderSpec {
                    ep: &ep,
                    dest: c.roce,
                    l2_frames: cfg.l2_frames,
                    meta,
                    binding: *qpb,
                    tuning: cfg.qp,
                    payload_len,
                    atomic: matches!(prim, PrimitiveState::KeyIncrement(_)),
                    collector: ci,
                });
                stores.push(Store {
                    name: meta.name.clone(),
                    sender,
                    prim,
                });
            }
        }
        check_routes(&cfg, &stores)?;
        let mut sketch_by_id = fast_map(16);
        for (i, s) in stores.iter().enumerate() {
            if let PrimitiveState::Sketch(p) = &s.prim {
                if cfg.workers > 1 {
                    // A sketch is merged in one place; reports are not handed between workers
                    // with their columns (yet).
                    return Err(ConfigError(format!(
                        "store {}: Sketch-Merge stores need translator.workers = 1 ({} \
                         configured)",
                        s.name, cfg.workers
                    )));
                }
                if let Some(j) = sketch_by_id.insert(p.sketch_id(), i) {
                    return Err(ConfigError(format!(
                        "stores {} and {} both serve sketch ID {}",
                        stores[j].name,
                        s.name,
                        p.sketch_id()
                    )));
                }
            }
        }
        let mut by_qpn = fast_map(stores.len().max(16) * 2);
        for (i, s) in stores.iter().enumerate() {
            by_qpn.insert(s.sender.qp.local_qpn.value(), i);
        }
        let max_frames_per_report = max_frames_per_report(&stores, cfg.max_redundancy);
        let mut appends = stores
            .iter()
            .enumerate()
            .filter(|(_, s)| matches!(s.prim, PrimitiveState::Append(_)))
            .map(|(i, _)| i);
        let first_append = appends.next();
        let sole_append = first_append.filter(|_| appends.next().is_none());
        Ok(Pipeline {
            has_appends: first_append.is_some(),
            sole_append,
            backlog: VecDeque::with_capacity(cfg.backlog),
            reporters: ReporterTracker::new(cfg.max_reporters),
            counters: TranslatorCounters::default(),
            handoffs: Vec::with_capacity(256),
            buckets,
            by_qpn,
            stores,
            sketch_by_id,
            prim_cfg,
            cfg,
            max_frames_per_report,
            append_routes: Vec::new(),
            route_epoch: None,
            int: None,
        })
    }

    /// Replaces every route with a collector-cluster epoch's (between bursts: a report is
    /// routed either by the old epoch or by the new). Refused, with the routes left as they
    /// were, if a route names a store of another kind or an Append range a store does not
    /// hold.
    pub fn set_routes(&mut self, r: &RouteSet) -> Result<(), ConfigError> {
        let mut cfg = self.cfg.clone();
        cfg.route_keywrite = r.keywrite.clone();
        cfg.route_keyincrement = r.keyincrement.clone();
        cfg.route_postcard = r.postcard.clone();
        check_routes(&cfg, &self.stores)?;
        for w in r.append.windows(2) {
            if u64::from(w[1].first) < w[0].end {
                return Err(ConfigError(format!(
                    "append routes {}..{} and {}..{} overlap or are not sorted",
                    w[0].first, w[0].end, w[1].first, w[1].end
                )));
            }
        }
        for l in &r.append {
            let s = self.stores.get(l.store);
            let holds = s.is_some_and(|s| match &s.prim {
                PrimitiveState::Append(a) => {
                    l.end > u64::from(l.first) && a.serves(l.first) && a.serves((l.end - 1) as u32)
                }
                _ => false,
            });
            if !holds {
                return Err(ConfigError(format!(
                    "append lists {}..{} routed to store #{} ({}), which does not hold them",
                    l.first,
                    l.end,
                    l.store,
                    s.map_or("none", |s| s.name.as_str())
                )));
            }
        }
        self.cfg.route_keywrite = cfg.route_keywrite;
        self.cfg.route_keyincrement = cfg.route_keyincrement;
        self.cfg.route_postcard = cfg.route_postcard;
        self.append_routes.clone_from(&r.append);
        self.route_epoch = Some(r.epoch);
        Ok(())
    }

    /// The collector-cluster epoch this pipeline routes by, if any.
    pub fn route_epoch(&self) -> Option<u32> {
        self.route_epoch
    }

    /// Turns on INT Telemetry Report ingest ([`Pipeline::handle_int_reports`]). Redundancies
    /// left at 0 take the N of the store the derived reports route to.
    pub fn set_int_ingest(&mut self, s: IntSettings) {
        let n_of = |route: &Route| {
            let i = match route {
                Route::Single(i) => Some(*i),
                Route::ByKeyHash(v) => v.first().copied(),
                Route::ByDestination(v) => v.first().map(|(_, i)| *i),
                Route::None => None,
            }?;
            self.stores.get(i)?.prim.redundancy().map(|n| n.get())
        };
        let mut ing = IntIngest::new(s);
        ing.resolve_redundancy(
            n_of(&self.cfg.route_keywrite),
            n_of(&self.cfg.route_keyincrement),
        );
        self.int = Some(Box::new(ing));
    }

    /// The INT ingest settings, if INT ingest is on.
    pub fn int_settings(&self) -> Option<&IntSettings> {
        self.int.as_deref().map(IntIngest::settings)
    }

    /// Processes a burst of datagrams received on the INT Telemetry Report port: each
    /// individual report is mapped onto DTA reports ([`super::int_ingest`]), which are then
    /// dispatched like received ones. Datagrams are counted in `int_rx_datagrams`, reports
    /// that cannot be read under an `int_drop_*` reason. Without INT ingest every report is
    /// `int_unmapped`.
    pub fn handle_int_reports(&mut self, now: u64, burst: &[Datagram<'_>], tx: &mut TxBatch) {
        // Taken out for the burst, so `dispatch` can borrow the pipeline mutably.
        let Some(mut ing) = self.int.take() else {
            self.counters.int_rx_datagrams += burst.len() as u64;
            self.counters.int_unmapped += burst.len() as u64;
            return;
        };
        let mut out = Derived::default();
        for d in burst {
            self.counters.int_rx_datagrams += 1;
            let t = match TelemetryReport::parse(d.payload) {
                Ok(t) => t,
                Err(e) => {
                    count_error(e, &mut self.counters);
                    continue;
                }
            };
            ing.track_sequence(&t, &mut self.counters);
            for ir in t.reports() {
                let ir = match ir {
                    Ok(ir) => ir,
                    Err(e) => {
                        count_error(e, &mut self.counters);
                        break;
                    }
                };
                ing.derive(&t, &ir, &mut self.counters, &mut out);
                for r in out.as_slice() {
                    self.dispatch(now, r, *d.dst.ip(), tx);
                }
            }
        }
        self.int = Some(ing);
    }

    /// Transmit-batch frames one report may need in the worst case (a batch with room for
    /// `burst * frames_per_report_max()` sends a burst's frames without queueing them).
    pub fn frames_per_report_max(&self) -> usize {
        self.max_frames_per_report
    }

    /// Counters so far.
    pub fn counters(&self) -> &TranslatorCounters {
        &self.counters
    }

    /// Per-store QP counters: (store name, our QPN, stats).
    pub fn qp_stats(&self) -> impl Iterator<Item = (&str, Qpn, QpStats)> + '_ {
        self.stores.iter().map(|s| {
            (
                s.name.as_str(),
                s.sender.qp.local_qpn,
                s.sender.qp.snapshot(),
            )
        })
    }

    /// Stores whose QP broke (the control plane must reconnect them).
    pub fn broken_stores(&self) -> impl Iterator<Item = &str> + '_ {
        self.stores
            .iter()
            .filter(|s| s.sender.qp.is_broken())
            .map(|s| s.name.as_str())
    }

    /// Replaces a store's QP after the control plane reconnected it, taking the region and
    /// redundancy N of the new metadata, if any. Frames the old QP held unconfirmed (or still
    /// queued) are counted in `frames_unconfirmed_at_reconnect`.
    pub fn rebind(&mut self, store: &str, qpb: QpBinding, meta: Option<&StoreMeta>) -> bool {
        let Some(i) = self.stores.iter().position(|s| s.name == store) else {
            return false;
        };
        let s = &mut self.stores[i];
        self.by_qpn.remove(&s.sender.qp.local_qpn.value());
        self.counters.frames_unconfirmed_at_reconnect += s.sender.rebind(qpb, meta);
        if let Some(m) = meta {
            s.prim.set_redundancy(m.redundancy);
        }
        self.by_qpn.insert(qpb.local_qpn.value(), i);
        self.max_frames_per_report = max_frames_per_report(&self.stores, self.cfg.max_redundancy);
        true
    }

    /// The redundancy N a store is written with, as this pipeline knows it (`None`: no such
    /// store, or it records none).
    pub fn redundancy_of(&self, store: &str) -> Option<dta_proto::meta::Redundancy> {
        self.stores
            .iter()
            .find(|s| s.name == store)
            .and_then(|s| s.prim.redundancy())
    }

    /// Continues the Append lists of `store` that this worker owns after the collector's
    /// heads (see [`super::primitive::Append::seed_heads`]). Returns the lists moved forward.
    pub fn seed_append_heads(&mut self, store: &str, next: &[u64]) -> u32 {
        match self.stores.iter_mut().find(|s| s.name == store) {
            Some(Store {
                prim: PrimitiveState::Append(a),
                ..
            }) => a.seed_heads(next),
            _ => 0,
        }
    }

    /// Reports handed off to other workers since the last call.
    pub fn take_handoffs(&mut self) -> std::vec::Drain<'_, Handoff> {
        self.handoffs.drain(..)
    }

    /// Reports pending inside the pipeline (Append batches, postcard entries, backlog).
    pub fn pending_reports(&self) -> u64 {
        self.backlog.len() as u64
            + self
                .stores
                .iter()
                .map(|s| dispatch!(&s.prim, p => p.pending()))
                .sum::<u64>()
    }

    /// Processes a burst of report datagrams. Every datagram is counted (see the module
    /// docs), whatever room `tx` has.
    pub fn handle_reports(&mut self, now: u64, burst: &[Datagram<'_>], tx: &mut TxBatch) {
        if !self.reporters.is_empty() {
            // Reporters send retransmittable reports: the burst's first datagrams' slots,
            // which no earlier datagram of the burst prefetches
            // ([`Pipeline::note_lane_sequence`]).
            for d in burst.iter().take(PREFETCH_AHEAD) {
                self.reporters.prefetch(d.src);
            }
        }
        let mut next = 0;
        while let Some(d) = burst.get(next) {
            next += 1;
            self.counters.rx_datagrams += 1;
            if is_sketch_datagram(d.payload) {
                self.handle_sketch(now, d, tx);
                continue;
            }
            // Appends and postcards, the most frequent reports, take lanes that build no
            // `Report`.
            if let Some((h, list, value)) = parse_append_fast(d.payload, &self.cfg.parse) {
                self.counters.reports_append += 1;
                self.note_lane_sequence(&h, d.src, burst, next, tx);
                match self.append_run_store(list) {
                    Some(si) => {
                        next += self.append_run(now, si, (h, list, value), &burst[next..], tx)
                    }
                    None => self.dispatch_append(now, h, list, &value, *d.dst.ip(), tx),
                }
                continue;
            }
            if let Some((h, p)) = parse_postcard_fast(d.payload, &self.cfg.parse) {
                self.counters.reports_postcard += 1;
                self.note_lane_sequence(&h, d.src, burst, next, tx);
                self.dispatch_postcard(now, h, &p, *d.dst.ip(), tx);
                continue;
            }
            next += self.general(now, d, &burst[next..], tx);
        }
    }

    /// A report neither lane takes (Key-Write, Key-Increment, and what the lanes leave to the
    /// full parser): parsed, counted, sequence-tracked and dispatched, or starting a run
    /// ([`Pipeline::keyed_run`]); returns how many of `rest` (the datagrams after `d`) a run
    /// took. Out of line: the lanes' loop stays tight (with it inline, postcards ran 4 %
    /// slower), and a run is entered once.
    #[inline(never)]
    fn general(
        &mut self,
        now: u64,
        d: &Datagram<'_>,
        rest: &[Datagram<'_>],
        tx: &mut TxBatch,
    ) -> usize {
        let mut report = Report::PLACEHOLDER;
        if let Err(e) = parse_report_into(d.payload, &self.cfg.parse, &mut report) {
            self.count_parse_error(e);
            return 0;
        }
        match report.primitive {
            Primitive::KeyWrite { .. } => self.counters.reports_keywrite += 1,
            Primitive::KeyIncrement { .. } => self.counters.reports_keyincrement += 1,
            Primitive::Append { .. } => self.counters.reports_append += 1,
            Primitive::Postcard { .. } => self.counters.reports_postcard += 1,
        }
        self.note_sequence(&report.header, d.src, tx);
        match self.keyed_run_store(&report) {
            Some(si) => self.keyed_run(now, si, &mut report, rest, tx),
            None => {
                self.dispatch(now, &report, *d.dst.ip(), tx);
                0
            }
        }
    }

    fn count_parse_error(&mut self, e: WireError) {
        match e {
            WireError::Truncated => self.counters.drop_truncated += 1,
            WireError::Malformed => self.counters.drop_malformed += 1,
            WireError::UnknownOpcode => self.counters.drop_unknown_opcode += 1,
            WireError::UnsupportedVersion => self.counters.drop_bad_version += 1,
        }
    }

    /// A Sketch-Merge datagram (extended profile version 2): parsed with its cells borrowed
    /// from the datagram and merged by the store serving its sketch ID.
    fn handle_sketch(&mut self, now: u64, d: &Datagram<'_>, tx: &mut TxBatch) {
        if !self.cfg.parse.accept_extended {
            self.counters.drop_bad_version += 1;
            return;
        }
        let r = match SketchReportRepr::parse(d.payload) {
            Ok(r) => r,
            Err(e) => {
                self.count_parse_error(e.into());
                return;
            }
        };
        self.counters.reports_sketch += 1;
        let Some(&si) = self.sketch_by_id.get(&r.sketch_id) else {
            self.counters.drop_sketch_unknown += 1;
            return;
        };
        let Store { sender, prim, .. } = &mut self.stores[si];
        if !sender.admits(now, self.max_frames_per_report, tx, &mut self.counters) {
            return;
        }
        if let PrimitiveState::Sketch(p) = prim {
            p.accept_sketch(now, &r, *d.src.ip(), sender, tx, &mut self.counters);
        }
    }

    /// Counts hand-offs the worker could not deliver (the owner's ring was full).
    pub fn count_handoff_drops(&mut self, n: u64) {
        self.counters.drop_handoff_full += n;
    }

    /// Processes a report another worker handed over (it was already counted there as
    /// received; here it is translated or dropped).
    pub fn handle_handoff(&mut self, now: u64, h: &Handoff, tx: &mut TxBatch) {
        self.dispatch(now, &h.report, h.dst, tx);
    }

    #[inline(always)]
    fn route(&self, r: &Report, dst: Ipv4Addr) -> Option<usize> {
        let (route, key) = match &r.primitive {
            Primitive::KeyWrite { key, .. } => (&self.cfg.route_keywrite, key),
            Primitive::KeyIncrement { key, .. } => (&self.cfg.route_keyincrement, key),
            Primitive::Postcard { flow, .. } => (&self.cfg.route_postcard, flow),
            Primitive::Append { list, .. } => return self.append_store(*list),
        };
        route.pick(key.as_bytes(), dst)
    }

    /// The Append store that holds global list `list`: by the cluster's list routes when it
    /// has them, else the store serving the list.
    #[inline(always)]
    fn append_store(&self, list: u32) -> Option<usize> {
        if !self.append_routes.is_empty() {
            let i = self.append_routes.partition_point(|l| l.first <= list);
            let l = self.append_routes.get(i.checked_sub(1)?)?;
            return (u64::from(list) < l.end).then_some(l.store);
        }
        self.stores.iter().position(|s| s.holds_list(list))
    }

    /// [`Pipeline::dispatch`] of a report a lane read without building a [`Report`]: the
    /// same checks in the same order, with the same counters, through the primitive's own
    /// admit and accept. `si` is the report's route; `admit` answers `None` for a store of
    /// another primitive. No route, a multi-worker pipeline (the report may be another
    /// worker's), a store of another primitive and an overloaded collector (a high-priority
    /// report waits in the backlog) take the general path, with `report()` built.
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    fn dispatch_lane<T>(
        &mut self,
        now: u64,
        header: &ReportHeader,
        dst: Ipv4Addr,
        tx: &mut TxBatch,
        si: Option<usize>,
        report: impl Fn() -> Report,
        admit: impl FnOnce(&PrimitiveState) -> Option<Result<(u64, T), Refusal>>,
        accept: impl FnOnce(
            &mut PrimitiveState,
            T,
            &mut QpSender,
            &mut TxBatch,
            &mut TranslatorCounters,
        ),
    ) {
        let si = match si {
            Some(si) if self.prim_cfg.shard.workers == 1 => si,
            _ => return self.dispatch(now, &report(), dst, tx),
        };
        let (messages, t) = match admit(&self.stores[si].prim) {
            Some(Ok(m)) => m,
            Some(Err(why)) => {
                why.count(&mut self.counters);
                return;
            }
            None => return self.dispatch(now, &report(), dst, tx),
        };
        match self.gate(now, si, messages, header.priority, tx) {
            Gate::Pass => {}
            Gate::Refused => return,
            Gate::Overloaded => return self.overloaded(&report(), dst),
        }
        let Store { sender, prim, .. } = &mut self.stores[si];
        accept(prim, t, sender, tx, &mut self.counters);
    }

    /// An Append from its lane ([`parse_append_fast`]).
    #[inline(always)]
    fn dispatch_append(
        &mut self,
        now: u64,
        header: ReportHeader,
        list: u32,
        value: &Value,
        dst: Ipv4Addr,
        tx: &mut TxBatch,
    ) {
        let si = self.append_store(list);
        self.dispatch_lane(
            now,
            &header,
            dst,
            tx,
            si,
            || Report {
                header,
                primitive: Primitive::Append {
                    list,
                    value: *value,
                },
            },
            |prim| match prim {
                PrimitiveState::Append(a) => {
                    Some(a.admit_entry(list, value).map(|(li, m)| (m, li)))
                }
                _ => None,
            },
            |prim, li, sender, tx, c| {
                if let PrimitiveState::Append(a) = prim {
                    a.accept_entry(now, li, value, header.immediate, sender, tx, c);
                }
            },
        );
    }

    /// A postcard from its lane ([`parse_postcard_fast`]).
    #[inline(always)]
    fn dispatch_postcard(
        &mut self,
        now: u64,
        header: ReportHeader,
        p: &PostcardFields,
        dst: Ipv4Addr,
        tx: &mut TxBatch,
    ) {
        let si = self.cfg.route_postcard.pick(p.flow.as_bytes(), dst);
        self.dispatch_lane(
            now,
            &header,
            dst,
            tx,
            si,
            || Report {
                header,
                primitive: p.primitive(),
            },
            |prim| match prim {
                PrimitiveState::Postcard(pc) => {
                    Some(pc.admit_hop(p.hop, p.path_len).map(|m| (m, ())))
                }
                _ => None,
            },
            |prim, (), sender, tx, c| {
                if let PrimitiveState::Postcard(pc) = prim {
                    pc.accept_hop(now, p, header.immediate, NO_HINT, sender, tx, c);
                }
            },
        );
    }

    /// [`Pipeline::note_sequence`] of a lane's report from `src`; when it is retransmittable,
    /// first prefetches the reporter slot of the datagram [`PREFETCH_AHEAD`] after it
    /// (`burst[next - 1]` is the report, `burst[next]` the datagram after it). With thousands
    /// of reporters their slots are not in the L1 cache, and each report's sequence tracking
    /// waited for its own (`dta bench micro`'s 10,000-reporter row: 60 % of
    /// `track_sequence`'s time on the slot's load).
    #[inline(always)]
    fn note_lane_sequence(
        &mut self,
        header: &ReportHeader,
        src: SocketAddrV4,
        burst: &[Datagram<'_>],
        next: usize,
        tx: &mut TxBatch,
    ) {
        if header.retransmittable {
            if let Some(d) = burst.get(next - 1 + PREFETCH_AHEAD) {
                self.reporters.prefetch(d.src);
            }
        }
        self.note_sequence(header, src, tx);
    }

    /// Tracks a retransmittable report's sequence number ([`note_sequence`]).
    #[inline(always)]
    fn note_sequence(&mut self, header: &ReportHeader, src: SocketAddrV4, tx: &mut TxBatch) {
        note_sequence(
            &mut self.reporters,
            &mut self.counters,
            &self.cfg,
            header,
            src,
            tx,
        );
    }

    /// Whether store `si`'s QP and its collector's rate limit take a report that costs
    /// `messages` RDMA messages now (the budget is spent when they do); a refusal is counted.
    #[inline(always)]
    fn gate(
        &mut self,
        now: u64,
        si: usize,
        messages: u64,
        priority: Priority,
        tx: &TxBatch,
    ) -> Gate {
        let store = &self.stores[si];
        if !store
            .sender
            .admits(now, self.max_frames_per_report, tx, &mut self.counters)
        {
            return Gate::Refused;
        }
        if messages > 0 {
            if let Some(b) = self.buckets[store.sender.collector].as_mut() {
                if !b.try_take(now, messages, priority) {
                    return Gate::Overloaded;
                }
            }
        }
        Gate::Pass
    }

    /// A report the collector's rate limit refused: dropped by priority, a high-priority one
    /// kept in the backlog while it has room.
    #[cold]
    fn overloaded(&mut self, r: &Report, dst: Ipv4Addr) {
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
        let shard = self.prim_cfg.shard;
        let (owner, hint) = if shard.workers == 1 {
            (shard.worker, NO_HINT)
        } else {
            dispatch!(&self.stores[si].prim, p => p.owner(r, shard))
        };
        if owner != shard.worker {
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
        let messages = match dispatch!(&self.stores[si].prim, p => p.admit(r, self.cfg.max_redundancy))
        {
            Ok(m) => m,
            Err(why) => {
                why.count(&mut self.counters);
                return;
            }
        };
        match self.gate(now, si, messages, r.header.priority, tx) {
            Gate::Pass => {}
            Gate::Refused => return,
            Gate::Overloaded => return self.overloaded(r, dst),
        }
        let Store { sender, prim, .. } = &mut self.stores[si];
        let c = &mut self.counters;
        dispatch!(prim, p => p.accept(now, r, hint, sender, tx, c));
    }

    /// Processes RoCEv2 responses (ACK, NAK, atomic ACK) from collectors; what they ask to
    /// resend goes out with the next [`Pipeline::poll_transmit`].
    pub fn handle_responses(&mut self, now: u64, burst: &[Datagram<'_>], _tx: &mut TxBatch) {
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
            let Some(&si) = self.by_qpn.get(&pkt.bth.dest_qp.value()) else {
                self.counters.roce_rx_invalid += 1;
                continue;
            };
            let s = &mut self.stores[si];
            if s.sender.dest.ip() != d.src.ip() {
                self.counters.roce_rx_invalid += 1;
                continue;
            }
            if s.sender.qp.on_response(now, aeth.syndrome, pkt.bth.psn) == QpEvent::Broken {
                log::warn!(
                    "store {}: collector reported a fatal error ({:?}); QP needs reconnecting",
                    s.name,
                    aeth.syndrome
                );
            }
        }
    }

    /// Fires timers (QP timeouts and probes, partial Append batches, aged postcard entries),
    /// drains the high-priority backlog, and transmits what waits ([`Pipeline::poll_transmit`]).
    pub fn poll(&mut self, now: u64, tx: &mut TxBatch) {
        for s in &mut self.stores {
            let c = &mut self.counters;
            // A QP found broken here is reconnected by the control plane (which logs it).
            s.sender.poll(now, tx, c);
            // Resends go out before the store's timers emit new frames.
            s.sender.poll_transmit(now, tx, c);
            dispatch!(&mut s.prim, p => p.poll(now, &mut s.sender, tx, c));
        }
        self.drain_backlog(now, tx);
        self.poll_transmit(now, tx);
    }

    /// Pushes what the QPs hold for sending (queued frames, go-back-N passes, resends) to
    /// `tx`, as far as it has room and the QPs' windows allow. Resent frames take a token from
    /// their collector's bucket, if it has one, but never wait for one. Returns true if `tx`
    /// filled up with frames still waiting (send it and call again).
    pub fn poll_transmit(&mut self, now: u64, tx: &mut TxBatch) -> bool {
        for s in &mut self.stores {
            let (_, resent) = s.sender.poll_transmit(now, tx, &mut self.counters);
            if resent > 0 {
                if let Some(b) = self.buckets[s.sender.collector].as_mut() {
                    b.charge(now, resent as u64);
                }
            }
        }
        tx.is_full() && self.stores.iter().any(|s| s.sender.qp.wants_transmit(now))
    }

    fn drain_backlog(&mut self, now: u64, tx: &mut TxBatch) {
        while let Some(&(r, dst)) = self.backlog.front() {
            let Some(si) = self.route(&r, dst) else {
                self.backlog.pop_front();
                self.counters.drop_no_store += 1;
                continue;
            };
            let s = &self.stores[si];
            if s.sender.qp.is_broken() {
                self.backlog.pop_front();
                self.counters.drop_qp_broken += 1;
                continue;
            }
            if !s.sender.can_take(now, self.max_frames_per_report, tx) {
                return;
            }
            let n = match r.primitive {
                Primitive::KeyWrite { redundancy, .. }
                | Primitive::KeyIncrement { redundancy, .. } => redundancy as u64,
                _ => 1,
            };
            if let Some(b) = self.buckets[s.sender.collector].as_mut() {
                if !b.try_take(now, n, Priority::High) {
                    return;
                }
            }
            self.backlog.pop_front();
            let Store { sender, prim, .. } = &mut self.stores[si];
            let c = &mut self.counters;
            dispatch!(prim, p => p.accept(now, &r, NO_HINT, sender, tx, c));
        }
    }

    /// When [`Pipeline::poll`] should run next (ns), if any timer is armed (0: now).
    pub fn next_deadline(&self) -> Option<u64> {
        let mut t: Option<u64> = None;
        let mut min = |x: u64| t = Some(t.map_or(x, |y: u64| y.min(x)));
        for s in &self.stores {
            if let Some(d) = s.sender.qp.next_deadline() {
                min(d);
            }
            if let Some(d) = dispatch!(&s.prim, p => p.next_deadline()) {
                // A primitive's timer writes: it is due once its QP has room again (polling it
                // before would spin; the QP's own deadline, or an answer, comes first).
                let frames = s.prim.frames_per_report(self.cfg.max_redundancy);
                if let Some(room) = s.sender.qp.room_at(frames) {
                    min(d.max(room));
                }
            }
        }
        if !self.backlog.is_empty() {
            for b in self.buckets.iter().flatten() {
                min(b.next_token_at(1));
            }
        }
        t
    }

    /// True if every store's QP can take a report at `now` (its ring has room for the most
    /// frames one report needs and its PSN cap allows them; room in the caller's transmit
    /// batch is the caller's to provide): a caller that can wait (the DART fleet, a paced
    /// generator) waits instead of having the report dropped as `drop_qp_queue_full`.
    pub fn can_take(&self, now: u64) -> bool {
        self.stores.iter().all(|s| {
            s.sender
                .qp
                .can_take(now, self.max_frames_per_report, usize::MAX)
        })
    }

    /// Frames sent or queued and not yet confirmed by the collectors, on QPs that are not
    /// broken. After [`Pipeline::confirm_promptly`], polling drives this to 0 on a working
    /// link: a clean shutdown waits for it.
    pub fn unconfirmed_frames(&self) -> u64 {
        self.stores
            .iter()
            .filter(|s| !s.sender.qp.is_broken())
            .map(|s| s.sender.qp.unconfirmed() as u64)
            .sum()
    }

    /// Makes every QP ask about its unconfirmed frames at once (shutdown): a lost last frame is
    /// then resent within a round trip instead of a few RTOs.
    pub fn confirm_promptly(&mut self) {
        for s in &mut self.stores {
            s.sender.qp.confirm_promptly();
        }
    }

    /// Writes every partial Append batch and postcard entry now (clean shutdown), then
    /// transmits. False if a QP could not take it all or `tx` filled: send `tx` and call
    /// again.
    pub fn flush_all(&mut self, now: u64, tx: &mut TxBatch) -> bool {
        let mut done = true;
        for s in &mut self.stores {
            let c = &mut self.counters;
            done &= dispatch!(&mut s.prim, p => p.flush(now, &mut s.sender, tx, c));
        }
        let more = self.poll_transmit(now, tx);
        done && !more
    }
}

/// How many datagrams ahead of a retransmittable report the burst loop prefetches a reporter
/// slot ([`Pipeline::note_lane_sequence`]).
const PREFETCH_AHEAD: usize = 4;

/// Tracks the sequence number of a retransmittable report from reporter `src` (others carry
/// none that counts): a gap is counted and NACKed (into `tx`), a late report counted.
#[inline(always)]
fn note_sequence(
    reporters: &mut ReporterTracker,
    counters: &mut TranslatorCounters,
    cfg: &PipelineConfig,
    header: &ReportHeader,
    src: SocketAddrV4,
    tx: &mut TxBatch,
) {
    if let (true, Some(seq)) = (header.retransmittable, header.seq) {
        track_sequence(reporters, counters, cfg, src, seq, header.profile, tx);
    }
}

/// [`note_sequence`] of sequence number `seq`.
#[allow(clippy::too_many_arguments)]
fn track_sequence(
    reporters: &mut ReporterTracker,
    counters: &mut TranslatorCounters,
    cfg: &PipelineConfig,
    src: SocketAddrV4,
    seq: u32,
    profile: Profile,
    tx: &mut TxBatch,
) {
    let wide = profile == Profile::Extended;
    let nack = match reporters.track(src, seq, wide) {
        Sequence::InOrder | Sequence::Learned | Sequence::Untracked => return,
        Sequence::Late => {
            counters.reporter_late += 1;
            return;
        }
        Sequence::Gap {
            first_missing,
            count,
            last_in_order,
        } => {
            counters.reporter_gaps += 1;
            counters.reporter_missing += count as u64;
            if wide {
                NackRepr::Extended {
                    first_missing,
                    count,
                }
            } else {
                NackRepr::Reference {
                    last_in_order: last_in_order as u8,
                }
            }
        }
    };
    let dest = SocketAddrV4::new(*src.ip(), cfg.nack_port);
    let l2 = cfg.l2_frames;
    let (local, mac) = (cfg.local, cfg.local_mac);
    let ok = tx.push_with(dest, if l2 { L2L4_LEN } else { 0 }, |buf| {
        if l2 {
            crate::datapath::udp_frame::emit(buf, mac, local, dest, |p| nack.emit(p))
        } else {
            nack.emit(buf)
        }
    });
    if ok {
        counters.nacks_sent += 1;
    } else {
        // The reporter will find the gap from a later NACK or its own timeout.
        counters.nacks_unsent += 1;
    }
}

/// What [`Pipeline::gate`] says to a report.
enum Gate {
    /// Translate it.
    Pass,
    /// Dropped (and counted): the QP is broken or full.
    Refused,
    /// The collector's rate limit refused it ([`Pipeline::overloaded`] decides).
    Overloaded,
}

#[cfg(test)]
mod tests;
