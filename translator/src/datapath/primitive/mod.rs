//! The DTA primitives, one module each, behind one small interface ([`StorePrimitive`]):
//! admit a report (before any budget is spent), accept it (emit its frames through the
//! store's [`QpSender`]), fire timers, say when they fire next, count what is held, flush.
//! The last four have defaults for primitives that hold nothing between reports.
//!
//! A store's state is a [`PrimitiveState`], dispatched by `match` (the hot path inlines each
//! arm; no virtual call per report). A new primitive is a new module, a variant here and its
//! arm in [`dispatch!`].

use dta_proto::batch::TxBatch;
use dta_proto::geometry::StoreGeometry;
use dta_proto::meta::Redundancy;
use dta_proto::wire::report::Report;

use super::sender::QpSender;
use super::stats::TranslatorCounters;

pub mod append;
pub mod keyincrement;
pub mod keywrite;
pub mod postcard;
pub mod sketch;

pub use append::Append;
pub use keyincrement::KeyIncrement;
pub use keywrite::KeyWrite;
pub use postcard::Postcarding;
pub use sketch::{SketchMerge, SketchSettings, SketchSwitch};

/// Why a store refused a report (each a `drop_*` counter).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// Redundancy 0 or above the configured maximum.
    BadRedundancy,
    /// Redundancy other than the N the store is written with.
    RedundancyMismatch,
    /// Value longer than the slot or entry.
    ValueTooLong,
    /// Postcard hop or path length outside the hop bound.
    BadHop,
    /// The store does not serve this primitive (or this list).
    WrongStore,
}

impl Refusal {
    /// Counts the refusal.
    #[inline]
    pub fn count(self, c: &mut TranslatorCounters) {
        match self {
            Refusal::BadRedundancy => c.drop_bad_redundancy += 1,
            Refusal::RedundancyMismatch => c.drop_redundancy_mismatch += 1,
            Refusal::ValueTooLong => c.drop_value_too_long += 1,
            Refusal::BadHop => c.drop_bad_hop += 1,
            Refusal::WrongStore => c.drop_no_store += 1,
        }
    }
}

/// What the pipeline tells a primitive about the worker it runs on.
#[derive(Debug, Clone, Copy)]
pub struct Shard {
    /// This worker.
    pub worker: usize,
    /// Workers sharing the sharded state.
    pub workers: usize,
}

/// The interface every primitive implements.
pub trait StorePrimitive {
    /// Checks `r` before any budget is spent. `Ok(n)`: it will cost `n` RDMA messages now
    /// (0 when it only joins a batch or a cache entry).
    fn admit(&self, r: &Report, max_redundancy: u8) -> Result<u64, Refusal>;

    /// The worker that owns `r` and a hint the owner may reuse (a postcard's cache index;
    /// `u32::MAX` for none).
    fn owner(&self, r: &Report, shard: Shard) -> (usize, u32) {
        let _ = r;
        (shard.worker, u32::MAX)
    }

    /// Translates an admitted report: emits its frames now, or holds it in a batch or cache.
    fn accept(
        &mut self,
        now: u64,
        r: &Report,
        hint: u32,
        out: &mut QpSender,
        tx: &mut TxBatch,
        c: &mut TranslatorCounters,
    );

    // A stateless primitive (Key-Write, Key-Increment) emits everything in `accept` and
    // holds nothing: it keeps the defaults below (no timer, nothing pending, nothing to
    // flush).

    /// Fires timers that expired at `now` (partial batches, aged cache entries).
    fn poll(&mut self, now: u64, out: &mut QpSender, tx: &mut TxBatch, c: &mut TranslatorCounters) {
        let _ = (now, out, tx, c);
    }

    /// When [`StorePrimitive::poll`] must run next.
    fn next_deadline(&self) -> Option<u64> {
        None
    }

    /// Reports held (partial batches, cached postcards).
    fn pending(&self) -> u64 {
        0
    }

    /// Writes everything held (clean shutdown). False if the QP could not take it all: send
    /// and call again.
    fn flush(
        &mut self,
        now: u64,
        out: &mut QpSender,
        tx: &mut TxBatch,
        c: &mut TranslatorCounters,
    ) -> bool {
        let _ = (now, out, tx, c);
        true
    }
}

/// A primitive whose reports' frames can all go straight into the transmit batch, no
/// question asked of the QP but its next PSN: Key-Write and Key-Increment, in a keyed run
/// (`Pipeline::keyed_run`).
pub trait AcceptDirect: StorePrimitive {
    /// [`StorePrimitive::accept`] of a report within a [`QpSender::direct_budget`] of the
    /// pipeline's frames per report; returns the frames it took.
    fn accept_direct(
        &mut self,
        now: u64,
        r: &Report,
        out: &mut QpSender,
        tx: &mut TxBatch,
        c: &mut TranslatorCounters,
    ) -> usize;
}

/// A store's primitive state.
pub enum PrimitiveState {
    /// Key-Write.
    KeyWrite(KeyWrite),
    /// Key-Increment.
    KeyIncrement(KeyIncrement),
    /// Append.
    Append(Append),
    /// Postcarding.
    Postcard(Postcarding),
    /// Sketch-Merge.
    Sketch(SketchMerge),
}

/// Runs `$body` with `$p` bound to the primitive inside `$state` (a `PrimitiveState` or a
/// reference to one).
#[macro_export]
#[doc(hidden)]
macro_rules! dispatch {
    ($state:expr, $p:ident => $body:expr) => {
        match $state {
            $crate::datapath::primitive::PrimitiveState::KeyWrite($p) => $body,
            $crate::datapath::primitive::PrimitiveState::KeyIncrement($p) => $body,
            $crate::datapath::primitive::PrimitiveState::Append($p) => $body,
            $crate::datapath::primitive::PrimitiveState::Postcard($p) => $body,
            $crate::datapath::primitive::PrimitiveState::Sketch($p) => $body,
        }
    };
}
pub use dispatch;

/// Settings a primitive takes from the pipeline's configuration.
#[derive(Debug, Clone)]
pub struct PrimitiveConfig {
    /// This worker and the number of workers.
    pub shard: Shard,
    /// A partial Append batch is written after this long (ns; 0 = only when full or at
    /// shutdown).
    pub append_flush_ns: u64,
    /// A partial postcard entry is written after this long (ns; 0 = only on collision or
    /// shutdown).
    pub postcard_flush_ns: u64,
    /// Postcard cache slots across all workers (a power of two).
    pub postcard_cache_slots: u32,
    /// Copies written per postcard chunk when the store records no N.
    pub postcard_redundancy: u8,
    /// Sketch-Merge settings.
    pub sketch: SketchSettings,
    /// Where NACKs a primitive sends (Sketch-Merge column NACKs) go.
    pub nack: crate::datapath::udp_frame::NackOut,
}

impl PrimitiveState {
    /// The state for a store of geometry `g` written with redundancy `n` (`None`: the store
    /// records none), and the payload of its plain WRITEs.
    pub fn new(
        g: &StoreGeometry,
        n: Option<Redundancy>,
        cfg: &PrimitiveConfig,
    ) -> Result<(PrimitiveState, usize), String> {
        Ok(match g {
            StoreGeometry::KeyWrite { layout, hasher } => {
                let p = KeyWrite::new(*layout, *hasher, n);
                (PrimitiveState::KeyWrite(p), layout.slot_size() as usize)
            }
            StoreGeometry::KeyIncrement { layout, hasher } => (
                PrimitiveState::KeyIncrement(KeyIncrement::new(*layout, *hasher, n)),
                0,
            ),
            StoreGeometry::Append(a) => {
                let p = Append::new(*a, cfg)?;
                let len = p.payload_len();
                (PrimitiveState::Append(p), len)
            }
            StoreGeometry::Postcard { layout, hasher } => {
                let n = n.map_or(cfg.postcard_redundancy, Redundancy::get);
                let p = Postcarding::new(*layout, *hasher, n, cfg)?;
                (PrimitiveState::Postcard(p), layout.chunk_size() as usize)
            }
            StoreGeometry::Sketch { layout, sketch_id } => {
                let p = SketchMerge::new(*layout, *sketch_id, cfg)?;
                let len = p.payload_len();
                (PrimitiveState::Sketch(p), len)
            }
        })
    }

    /// The redundancy N the store is written with, if it records one (Postcarding: the
    /// copies written, recorded or configured).
    pub fn redundancy(&self) -> Option<Redundancy> {
        match self {
            PrimitiveState::KeyWrite(p) => p.redundancy(),
            PrimitiveState::KeyIncrement(p) => p.redundancy(),
            PrimitiveState::Append(_) | PrimitiveState::Sketch(_) => None,
            PrimitiveState::Postcard(p) => Redundancy::new(p.redundancy()),
        }
    }

    /// Takes the N a reconnection's metadata records (`None`: it records none; a postcard
    /// store then keeps the N it had).
    pub fn set_redundancy(&mut self, n: Option<Redundancy>) {
        match self {
            PrimitiveState::KeyWrite(p) => p.set_redundancy(n),
            PrimitiveState::KeyIncrement(p) => p.set_redundancy(n),
            PrimitiveState::Append(_) | PrimitiveState::Sketch(_) => {}
            PrimitiveState::Postcard(p) => {
                if let Some(n) = n {
                    p.set_redundancy(n.get());
                }
            }
        }
    }

    /// The most frames one report can make this store emit.
    pub fn frames_per_report(&self, max_redundancy: u8) -> usize {
        match self {
            PrimitiveState::KeyWrite(_) => max_redundancy as usize + 1,
            PrimitiveState::KeyIncrement(_) => max_redundancy as usize + 1,
            PrimitiveState::Append(_) => 1,
            // An eviction and the entry's own completion.
            PrimitiveState::Postcard(p) => 2 * p.redundancy() as usize + 1,
            PrimitiveState::Sketch(p) => p.frames_per_report(),
        }
    }
}
