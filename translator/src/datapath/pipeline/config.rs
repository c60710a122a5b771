//! What a [`Pipeline`] is built from: its configuration ([`PipelineConfig`]), the collectors
//! and QPs it writes to ([`CollectorTarget`], [`QpBinding`]), how reports pick a store
//! ([`Route`], [`RouteSet`]), the check that routes name stores of their primitive, and the
//! one-store constructors benchmarks and profiling use. No per-packet state lives here, except
//! [`Route::pick`], which the report path inlines.

use std::net::{Ipv4Addr, SocketAddrV4};

use dta_proto::cluster::key_slot;
use dta_proto::meta::{StoreKind, StoreMeta};
use dta_proto::wire::ib::{Psn, Qpn};
use dta_proto::wire::report::ParseConfig;

use super::{Pipeline, Store};
use crate::datapath::primitive::PrimitiveState;
use crate::datapath::qp::QpTuning;
use crate::datapath::rate::RateLimit;

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

impl Route {
    /// The store a report with `key` addressed to `dst` goes to. Key hashing is
    /// [`dta_proto::cluster::key_slot`], the rule every member of a collector cluster uses: a
    /// table of one entry per store is `[routing] key-hash`, a cluster epoch's slot table
    /// repeats stores.
    #[inline(always)]
    pub fn pick(&self, key: &[u8], dst: Ipv4Addr) -> Option<usize> {
        match self {
            Route::Single(i) => Some(*i),
            Route::ByDestination(v) => v.iter().find(|(ip, _)| *ip == dst).map(|(_, i)| *i),
            Route::ByKeyHash(v) => Some(v[key_slot(key, v.len())]),
            Route::None => None,
        }
    }
}

/// Append lists `first..end` go to store `store` (a collector cluster's list ranges).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ListRoute {
    /// First list ID.
    pub first: u32,
    /// One past the last list ID.
    pub end: u64,
    /// Store index.
    pub store: usize,
}

/// Every route of one collector-cluster epoch, swapped into a running pipeline at the epoch
/// boundary ([`Pipeline::set_routes`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RouteSet {
    /// The cluster epoch these routes implement.
    pub epoch: u32,
    /// Key-Write reports.
    pub keywrite: Route,
    /// Key-Increment reports.
    pub keyincrement: Route,
    /// Postcards.
    pub postcard: Route,
    /// Append lists, sorted by first list and disjoint (empty: each list goes to the first
    /// Append store that holds it).
    pub append: Vec<ListRoute>,
}

/// Everything a pipeline needs, derived from configuration and collector metadata.
#[derive(Debug, Clone)]
pub struct PipelineConfig {
    /// This worker's index.
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
    /// Copies written per postcard chunk to a store whose metadata records no N (a store
    /// that records one is written with its own).
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
    /// Sketch-Merge settings (sketch reports go to the store serving their sketch ID).
    pub sketch: crate::datapath::primitive::SketchSettings,
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

/// Checks that every route names stores of its primitive.
pub(super) fn check_routes(cfg: &PipelineConfig, stores: &[Store]) -> Result<(), ConfigError> {
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
            let ok = stores.get(i).is_some_and(|s| {
                matches!(
                    (&s.prim, what),
                    (PrimitiveState::KeyWrite(_), "keywrite")
                        | (PrimitiveState::KeyIncrement(_), "keyincrement")
                        | (PrimitiveState::Postcard(_), "postcard")
                )
            });
            if !ok {
                return Err(ConfigError(format!(
                    "{what} route names store #{i}, which is not a {what} store"
                )));
            }
        }
    }
    Ok(())
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
            sketch: crate::datapath::primitive::SketchSettings::default(),
        }
    }

    /// Routes every primitive the single store `kind` serves to store 0.
    pub fn route_all_to_first(self, kind: &StoreKind) -> PipelineConfig {
        self.route_to(kind, 0)
    }

    /// Routes `kind`'s primitive to store `si` (Append and Sketch-Merge stores are found by
    /// their lists and sketch IDs).
    fn route_to(mut self, kind: &StoreKind, si: usize) -> PipelineConfig {
        match kind {
            StoreKind::KeyWrite { .. } => self.route_keywrite = Route::Single(si),
            StoreKind::KeyIncrement { .. } => self.route_keyincrement = Route::Single(si),
            StoreKind::Postcard { .. } => self.route_postcard = Route::Single(si),
            StoreKind::Append { .. } | StoreKind::Sketch { .. } => {}
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
    single_store_meta(kind, None, tune).expect("a valid single-store pipeline")
}

/// A pipeline of one store of each of `kinds` (of different primitives, or Append stores of
/// disjoint lists), each with its own QP and region, on one synthetic collector; each
/// primitive routed to its store. For benchmarks and profiling of mixed traffic.
pub fn stores_pipeline_with(
    kinds: &[StoreKind],
    tune: impl FnOnce(&mut PipelineConfig),
) -> Pipeline {
    synthetic(kinds, None, tune).expect("a valid pipeline")
}

/// A one-store pipeline whose store records redundancy `n`.
pub(super) fn single_store_meta(
    kind: StoreKind,
    n: Option<dta_proto::meta::Redundancy>,
    tune: impl FnOnce(&mut PipelineConfig),
) -> Result<Pipeline, ConfigError> {
    synthetic(&[kind], n, tune)
}

/// [`stores_pipeline_with`], each store recording redundancy `n`.
fn synthetic(
    kinds: &[StoreKind],
    n: Option<dta_proto::meta::Redundancy>,
    tune: impl FnOnce(&mut PipelineConfig),
) -> Result<Pipeline, ConfigError> {
    let local = SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 101), 4791);
    let mut cfg = PipelineConfig::defaults(
        local,
        dta_proto::wire::ethernet::MacAddr([2, 0, 0, 0, 0, 1]),
    );
    for (si, kind) in kinds.iter().enumerate() {
        cfg = cfg.route_to(kind, si);
    }
    tune(&mut cfg);
    let stores = kinds
        .iter()
        .enumerate()
        .map(|(si, kind)| {
            let i = si as u32;
            let meta = StoreMeta {
                name: if kinds.len() == 1 {
                    "s".into()
                } else {
                    format!("s{si}")
                },
                addr: 0x7f00_0000_0000 + (u64::from(i) << 32),
                len: 1 << 30,
                rkey: 0x1234 + i,
                qps: vec![dta_proto::meta::QpMeta {
                    qpn: 0x11 + i,
                    psn: 0,
                    peer_qpn: 0x100 + i,
                }],
                redundancy: n,
                kind: kind.clone(),
            };
            let qp = QpBinding {
                local_qpn: Qpn::new(0x100 + i),
                remote_qpn: Qpn::new(0x11 + i),
                start_psn: Psn::new(0),
            };
            (meta, qp)
        })
        .collect();
    let target = CollectorTarget {
        roce: SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 51), 4791),
        mac: dta_proto::wire::ethernet::MacAddr([2, 0, 0, 0, 0, 0x51]),
        stores,
    };
    Pipeline::new(cfg, &[target])
}
