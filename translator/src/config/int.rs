//! `[int]`: how P4.org Telemetry Reports map onto DTA primitives (the rules; the mapping itself
//! is `datapath::int_ingest`). Parsing and defaults only: the cross-field checks are in
//! `validate.rs`.

use serde::{Deserialize, Serialize};

use dta_proto::wire::report::Priority;

pub use crate::datapath::int_ingest::{CountWhat, HopField, InitialTtl};

/// `[int]`: P4.org Telemetry Reports (v1.0 and v2.0) on their own UDP port, mapped onto DTA
/// primitives (`translator/src/datapath/int_ingest.rs`, PROTOCOL.md "INT ingest").
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct IntSection {
    /// UDP port Telemetry Reports arrive on, at `translator.listen`'s address (0: off). The
    /// specification leaves it to the deployment; 32766 is what the example uses.
    pub port: u16,
    /// UDP destination port that announces an embedded INT shim in a report's truncated
    /// packet (INT over UDP, "INT_TBD"; 0: none).
    pub md_udp_port: u16,
    /// DSCP value that announces an INT shim behind the packet's own TCP/UDP header (none:
    /// DSCP is not used).
    pub md_dscp: Option<u8>,
    /// DSCP bits compared with `md_dscp`.
    pub md_dscp_mask: u8,
    /// Priority of the derived reports.
    pub priority: Priority,
    /// (node ID, hw_id) sources tracked for sequence gaps, per worker.
    pub max_sources: usize,
    /// Path Key-Write.
    pub path: IntPathRule,
    /// Postcards.
    pub postcard: IntPostcardRule,
    /// Drop events (Append).
    pub drop: IntListRule,
    /// Congestion events (Append).
    pub congestion: IntListRule,
    /// Per-flow counters (Key-Increment).
    pub counter: IntCounterRule,
}

impl Default for IntSection {
    fn default() -> Self {
        IntSection {
            port: 0,
            md_udp_port: dta_proto::wire::telemetry_report::DEFAULT_MD_UDP_PORT,
            md_dscp: None,
            md_dscp_mask: 0x3F,
            priority: Priority::Medium,
            max_sources: 4096,
            path: IntPathRule::default(),
            postcard: IntPostcardRule::default(),
            drop: IntListRule {
                enabled: true,
                first_list: 0,
                lists: 8,
            },
            congestion: IntListRule {
                enabled: true,
                first_list: 8,
                lists: 8,
            },
            counter: IntCounterRule::default(),
        }
    }
}

/// `[int.path]`: reports carrying an INT-MD stack → Key-Write keyed by flow.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct IntPathRule {
    /// Map paths.
    pub enabled: bool,
    /// Per-hop field: node_id, ingress_port, egress_port, hop_latency, queue_occupancy,
    /// egress_timestamp.
    pub field: HopField,
    /// Redundancy N (0: the N of the store `routing.keywrite` picks).
    pub redundancy: u8,
}

impl Default for IntPathRule {
    fn default() -> Self {
        IntPathRule {
            enabled: true,
            field: HopField::NodeId,
            redundancy: 0,
        }
    }
}

/// `[int.postcard]`: tracked-flow reports without a stack (INT-XD, INT-MX) → Postcarding.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct IntPostcardRule {
    /// Map postcards.
    pub enabled: bool,
    /// Per-hop field (as for `[int.path]`).
    pub field: HopField,
    /// TTL the reported packets carry at their first hop: hop = initial_ttl − TTL. A number
    /// 1..=255, or "auto" (the smallest of 64, 128, 255 not below the packet's TTL: hosts of
    /// several kinds).
    pub initial_ttl: InitialTtl,
    /// Hops per path (0: unknown; an entry is written when it ages out).
    pub path_len: u8,
}

impl Default for IntPostcardRule {
    fn default() -> Self {
        IntPostcardRule {
            enabled: true,
            field: HopField::NodeId,
            initial_ttl: InitialTtl::Fixed(64),
            path_len: 0,
        }
    }
}

/// `[int.drop]`, `[int.congestion]`: events → Append to list `first_list + node % lists`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct IntListRule {
    /// Map these events.
    pub enabled: bool,
    /// First list.
    pub first_list: u32,
    /// Lists.
    pub lists: u32,
}

impl Default for IntListRule {
    fn default() -> Self {
        IntListRule {
            enabled: true,
            first_list: 0,
            lists: 1,
        }
    }
}

/// `[int.counter]`: every report with a flow → Key-Increment keyed by flow.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct IntCounterRule {
    /// Count.
    pub enabled: bool,
    /// "reports" (1 per report) or "bytes" (the packet's IPv4 total length).
    pub count: CountWhat,
    /// Redundancy N (0: the N of the store `routing.keyincrement` picks).
    pub redundancy: u8,
}

impl Default for IntCounterRule {
    fn default() -> Self {
        IntCounterRule {
            enabled: true,
            count: CountWhat::Reports,
            redundancy: 0,
        }
    }
}

impl IntSection {
    /// The datapath settings (`None` when INT ingest is off).
    pub fn settings(&self) -> Option<crate::datapath::int_ingest::IntSettings> {
        use crate::datapath::int_ingest::{IntSettings, ListRule};
        let list = |r: &IntListRule| {
            r.enabled.then_some(ListRule {
                first: r.first_list,
                lists: r.lists.max(1),
            })
        };
        (self.port != 0).then(|| IntSettings {
            inner: dta_proto::wire::telemetry_report::InnerConfig {
                md_udp_port: self.md_udp_port,
                md_dscp: self.md_dscp,
                md_dscp_mask: self.md_dscp_mask,
            },
            path: self
                .path
                .enabled
                .then_some((self.path.field, self.path.redundancy)),
            postcard: self.postcard.enabled.then_some((
                self.postcard.field,
                self.postcard.initial_ttl,
                self.postcard.path_len,
            )),
            drop: list(&self.drop),
            congestion: list(&self.congestion),
            counter: self
                .counter
                .enabled
                .then_some((self.counter.count, self.counter.redundancy)),
            priority: self.priority,
            max_sources: self.max_sources.max(1),
        })
    }
}
