//! The datapath tunables: `[reports]`, `[append]`, `[postcard]`, `[sketch]`, `[reliability]` and
//! `[overload]`. Parsing and defaults only: the cross-field checks are in `validate.rs`.

use serde::{Deserialize, Serialize};

use dta_proto::wire::dta::BaseVariant;
use dta_proto::wire::report::Priority;

/// `[reports]`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ReportsSection {
    /// Reference base header: "a" (2 bytes) or "b" (3 bytes, with seqnum).
    pub reference_variant: BaseVariant,
    /// Accept reference-profile reports.
    pub accept_reference: bool,
    /// Accept extended-profile reports.
    pub accept_extended: bool,
    /// Priority given to reference reports (which carry none).
    pub reference_priority: Priority,
}

impl Default for ReportsSection {
    fn default() -> Self {
        ReportsSection {
            reference_variant: BaseVariant::B,
            accept_reference: true,
            accept_extended: true,
            reference_priority: Priority::Medium,
        }
    }
}

/// `[append]`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AppendSection {
    /// A partial batch is written after this many microseconds.
    pub flush_delay_us: u64,
}

impl Default for AppendSection {
    fn default() -> Self {
        AppendSection {
            flush_delay_us: 1000,
        }
    }
}

/// `[postcard]`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PostcardSection {
    /// Cache slots across all workers (a power of two).
    pub cache_slots: u32,
    /// Copies written per chunk (N) to a store whose metadata records no N. A store that
    /// records one (every store of a current collector: `[[store]] redundancy`) is written
    /// with its own N, and setting a different one here is an error.
    pub redundancy: Option<u8>,
    /// A flow whose path is incomplete is written after this many microseconds (0 = only
    /// on eviction or shutdown).
    pub flush_delay_us: u64,
}

impl Default for PostcardSection {
    fn default() -> Self {
        PostcardSection {
            cache_slots: 32768,
            redundancy: None,
            flush_delay_us: 100_000,
        }
    }
}

/// `[sketch]`: how Sketch-Merge stores merge switches' sketches (one worker merges them: a
/// translator with Sketch-Merge stores and `workers` above 1 refuses to start).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SketchSection {
    /// Switches whose columns complete a column: a batch is written as soon as each of its
    /// columns has this many.
    pub expected_switches: u16,
    /// Switches tracked at most per sketch (the table is allocated up front).
    pub max_switches: u32,
    /// Milliseconds after a merge into a batch not yet written at which what changed is
    /// written anyway and switches that have not sent their whole sketch are NACKed.
    pub flush_delay_ms: u64,
    /// Switches expected in an epoch that must have sent the next epoch before the merge
    /// moves on (1..=expected_switches; absent: a majority of expected_switches).
    pub epoch_quorum: Option<u16>,
    /// Epochs a switch not listed in `[[sketch.switch]]` may stay silent before it leaves the
    /// switch table (1..=1000000).
    pub idle_epochs: u32,
    /// Epochs behind the merge a report counts as late (1..=1000); further behind, a report
    /// of column 0 is the switch restarting its epoch counter.
    pub late_epochs: u32,
    /// Switches with a fixed NACK address (`[[sketch.switch]]`): always expected in an epoch,
    /// never forgotten, and NACKed only there.
    pub switch: Vec<SketchSwitchEntry>,
}

/// `[[sketch.switch]]`: a switch whose sketch-column NACKs go to a fixed address.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct SketchSwitchEntry {
    /// The switch ID its reports carry.
    pub id: u32,
    /// The IPv4 address its NACKs go to.
    pub address: std::net::Ipv4Addr,
}

impl Default for SketchSection {
    fn default() -> Self {
        SketchSection {
            expected_switches: 1,
            max_switches: 4096,
            flush_delay_ms: 10,
            epoch_quorum: None,
            idle_epochs: 4,
            late_epochs: 2,
            switch: Vec::new(),
        }
    }
}

/// The smallest `[reliability] max_outstanding_psns`: room for the most frames one report
/// needs, many times over.
pub const MIN_OUTSTANDING_PSNS: u32 = 64;

/// `[reliability]`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ReliabilitySection {
    /// Ask for an ACK every k frames.
    pub ack_every: u32,
    /// The initial retransmission timeout (µs): silent loss is suspected after this long
    /// without the ACK, until round trips have been measured.
    pub ack_timeout_us: u64,
    /// Lower bound of the adaptive (RFC 6298, SRTT + 4·RTTVAR) timeout (µs). A spurious
    /// timeout costs one zero-length probe on a fresh PSN.
    pub rto_min_us: u64,
    /// Upper bound of the adaptive timeout and of the probe back-off (µs).
    pub rto_max_us: u64,
    /// The QP is declared broken (and reconnected over RDMA_CM) after this many milliseconds
    /// without any ACK or NAK while one was due. Must exceed the longest pause expected from
    /// a busy collector.
    pub broken_after_ms: u64,
    /// PSNs each QP may have taken and not yet seen confirmed (64..=4194304, and at least
    /// 2 × `ack_every`). PSNs are compared in a 24-bit circle, so a requester must never have
    /// 2^23 outstanding: a QP whose collector stopped answering stops here, and its reports
    /// are dropped (`drop_qp_queue_full`) until the collector confirms frames again. The
    /// default, 1048576, is a tenth of a second at 10 million frames a second.
    pub max_outstanding_psns: u32,
}

impl Default for ReliabilitySection {
    fn default() -> Self {
        ReliabilitySection {
            ack_every: 64,
            ack_timeout_us: 20_000,
            rto_min_us: 2_000,
            rto_max_us: 1_000_000,
            broken_after_ms: 5_000,
            max_outstanding_psns: crate::datapath::qp::DEFAULT_MAX_OUTSTANDING,
        }
    }
}

/// `[overload]`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct OverloadSection {
    /// RDMA messages per second per collector NIC, shared by the workers (0 = unlimited).
    pub messages_per_sec: u64,
    /// Token-bucket depth in messages.
    pub burst: u64,
    /// Low priority is shed while fewer than this fraction of the bucket's tokens remain.
    pub low_reserve: f64,
    /// Medium priority is shed below this fraction.
    pub medium_reserve: f64,
    /// High-priority reports queued per worker while the budget is exhausted.
    pub backlog: usize,
}

impl Default for OverloadSection {
    fn default() -> Self {
        OverloadSection {
            messages_per_sec: 0,
            burst: 4096,
            low_reserve: 0.5,
            medium_reserve: 0.25,
            backlog: 65536,
        }
    }
}
