//! P4.org Telemetry Reports (versions 1.0 and 2.0) and the INT metadata they carry.
//!
//! Switches that speak In-band Network Telemetry send their reports to a collector in the
//! format of the P4.org Applications WG's *Telemetry Report Format Specification*. This module
//! reads and writes both versions still found in the field; the translator maps what it reads
//! onto DTA primitives (`translator/src/datapath/int_ingest.rs`).
//!
//! # Version 2.0 (2020)
//! A *Telemetry Report Group Header* (8 bytes: `Ver=2 | hw_id(6) | Sequence Number(22) |
//! Node ID(32)`) is followed by one or more *Individual Reports*, each a 4-byte header
//! (`RepType(4) | InType(4) | Report Length(8, words after this one) | MD Length(8) | D Q F I |
//! Rsvd(4)`) and its contents. For RepType 1 (INT) the contents start with `RepMdBits(16) |
//! Domain Specific ID(16) | DSMdBits(16) | DSMdstatus(16)`, then `MD Length` words of the
//! reporting node's metadata, then the inner contents selected by InType (a truncated
//! Ethernet/IPv4 packet, or TLVs holding one).
//!
//! # Version 1.0 (2018)
//! One 16-byte header per datagram: `Ver=1 | Len(4) | NProto(3) | RepMdBits(6) | Rsvd(6) | D Q F
//! | hw_id(6)`, `Switch ID(32)`, `Sequence Number(32)`, `Ingress Timestamp(32)`, then the
//! metadata the six RepMdBits select (4 bytes each, most significant bit first: ingress and
//! egress port IDs (16+16), hop latency, queue ID (8) and occupancy (24), egress timestamp,
//! queue ID (8), drop reason (8) and padding (16), egress port TX utilisation), then the
//! truncated packet NProto names (0 Ethernet, 1 IPv4, 2 IPv6). `Len` is read as the header's
//! length in words including the 4 fixed words; a `Len` equal to the metadata words alone is
//! accepted too (both readings occur), anything else is [`ReportError::BadLength`].
//!
//! # Embedded INT-MD (INT 2.1 over TCP/UDP)
//! A sink's truncated packet may still carry the INT-MD stack of the hops before it: an INT shim
//! (`Type(4) | NPT(2) | R(2) | Length(8) | 16 bits that depend on NPT`) behind the L4 header,
//! then the 12-byte INT-MD metadata header (`Ver=2 | D E M | Rsvd(12) | HopML(5) | Remaining
//! Hop Count(8) | Instruction Bitmap(16) | Domain Specific ID(16) | DS Instruction(16) | DS
//! Flags(16)`), then the stack, newest hop first, `HopML` words per hop. The shim is found
//! either behind a UDP header whose destination port is the deployment's INT port
//! ([`InnerConfig::md_udp_port`]; NPT 1 keeps the original destination port in the shim, NPT 2
//! the original IP protocol, whose L4 header then follows the stack), or, when the IPv4 DSCP
//! matches [`InnerConfig::md_dscp`], behind the packet's own TCP/UDP header. Shim type 3 is
//! INT-MX (instructions only, no stack).
//!
//! `HopML` is the length of one hop's metadata *including* the domain-specific metadata the DS
//! Instruction selects (and, for a domain a hop does not know, the all-ones padding it adds to
//! reach `HopML`): a stack is stepped through `HopML` words at a time, the Instruction
//! Bitmap's fields are read from the start of each hop and the rest of the hop is skipped.
//! `HopML` smaller than the bitmap's words, or a stack that is not a whole number of hops
//! (which also covers a source's 'source-only' domain-specific metadata, whose length only the
//! domain knows), is [`ReportError::BadLength`].
//!
//! # Embedded INT 1.0 (INT over TCP/UDP, 2018)
//! INT 1.0 deployments (those that send Telemetry Report v1.0) carry a different shim: `Type(8)
//! | Reserved(8) | Length(8) | DSCP(6) | R(2)`, Type 1 hop-by-hop (2 destination, not read),
//! Length the words of shim, metadata header *and* stack; then the 8-byte hop-by-hop metadata
//! header (`Ver=1 | Rep(2) | C | E | M | Rsvd(10) | HopML(5) | Remaining Hop Count(8) |
//! Instruction Bitmap(16) | Rsvd(16)`) and the stack, newest hop first. The two shims are told
//! apart by their first byte (an INT 2.x type is in its high nibble, an INT 1.0 type fills it:
//! 1 or 2, high nibble 0), and the metadata header's Ver must match. They are found by the same
//! rules (UDP port, DSCP); INT 1.0 keeps no original destination port, so behind the INT UDP
//! port the flow is the packet's own 5-tuple. The INT 1.0 worked example ("Example with INT
//! over TCP") prints Length = 8 for 1 + 2 + 4 words: a leftover of the tail header v1.0
//! removed; the normative definition (7) is what is read, and 8 is `BadLength`.
//!
//! # Metadata bitmaps
//! Three bitmaps select per-hop metadata, each bit a field in a fixed order, 4 bytes each unless
//! noted: the INT instruction bitmap (bit 0 node ID, 1 L1 interface IDs, 2 hop latency, 3 queue
//! ID + occupancy, 4 ingress timestamp (8 B), 5 egress timestamp (8 B), 6 L2 interface IDs
//! (8 B), 7 egress TX utilisation, 8 buffer ID + occupancy, 9–14 reserved, 15 checksum
//! complement; INT 1.0: the timestamps are 4 B and bit 8 is reserved); v2.0 RepMdBits (the
//! same, except bit 0 reserved because the node ID is in the group header, and bit 15 queue
//! ID, drop reason and padding); v1.0 RepMdBits (above). Reserved bits are skipped 4 bytes
//! each. [`HopMetadata`] holds whichever fields were present.
//!
//! Nothing here allocates: a datagram is walked in place ([`TelemetryReport::reports`]) and
//! every error is a [`ReportError`], a `Copy` enum the translator counts by reason.
//!
//! # Layout of this module
//! One file per job, smoltcp's two levels in each: views (`new_unchecked`/`new_checked` and
//! accessors over a private `field` module) and the plain structs parsed from them and emitted
//! into them. `header` holds the views of the fixed headers ([`GroupHeader`],
//! [`IndividualHeader`], [`V1Header`]); `group` the datagram (group header or v1.0 header, the
//! walk over individual reports, datagram emission); `individual` one v2.0 individual report or
//! the v1.0 report (types, flags, TLVs, parse, emit); `metadata` the three bitmaps and
//! [`HopMetadata`]; `inner` the truncated packet ([`InnerEthernet`], [`InnerIpv4`],
//! [`L4Ports`], the flow); `int` an embedded INT shim, metadata header and stack ([`IntShim`],
//! [`IntMdHeader`]); `events` the drop and congestion entries the translator appends. Each
//! reads and writes only its own part of the datagram, and only through its own `field`
//! offsets; none does I/O.

mod events;
mod group;
mod header;
mod individual;
mod inner;
mod int;
mod metadata;

pub use events::{CongestionEvent, DropEvent, CONGESTION_ENTRY_LEN, DROP_ENTRY_LEN};
pub use group::{buffer_len, emit, GroupRepr, Reports, TelemetryReport};
pub use header::{version_of, GroupHeader, IndividualHeader, V1Header, V1Word0};
pub use individual::{Flags, InType, IndividualReport, IndividualRepr, RepType};
pub use inner::{
    parse_inner, FlowKey, InnerConfig, InnerEthernet, InnerIpv4, InnerPacket, InnerPacketRepr,
    InnerStart, L4Ports, DEFAULT_MD_UDP_PORT, FLOW_KEY_LEN,
};
pub use int::{shim_kind, EmbeddedInt, EmbeddedIntRepr, IntKind, IntMdHeader, IntShim};
pub use metadata::{DropInfo, HopMetadata, MdFormat, QueueOccupancy};

use crate::wire::Error;

/// Version 1.0 of the report header.
pub const VERSION_1: u8 = 1;
/// Version 2.0 (group header).
pub const VERSION_2: u8 = 2;
/// Length of the v2.0 Telemetry Report Group Header.
pub const GROUP_HEADER_LEN: usize = 8;
/// Length of a v2.0 Individual Report Header.
pub const INDIVIDUAL_HEADER_LEN: usize = 4;
/// Length of the fixed part of a v2.0 INT individual report's main contents.
pub const INT_MAIN_LEN: usize = 8;
/// Length of the fixed part of a v1.0 report header.
pub const V1_HEADER_LEN: usize = 16;
/// Length of an INT 2.x shim.
pub const INT_SHIM_LEN: usize = 4;
/// Length of the INT 2.x metadata header (INT-MD and INT-MX).
pub const INT_MD_HEADER_LEN: usize = 12;
/// Length of the INT 1.0 hop-by-hop metadata header.
pub const INT1_MD_HEADER_LEN: usize = 8;
/// Length of the INT 1.0 shim (its Length field counts it).
pub const INT1_SHIM_LEN: usize = 4;
/// Most hops an embedded stack may hold (the INT Remaining Hop Count is 8 bits, but no
/// deployment comes close; a longer stack is [`ReportError::BadLength`]).
pub const MAX_STACK_HOPS: usize = 32;
/// Largest sequence number of a v2.0 group header (22 bits).
pub const V2_SEQ_MAX: u32 = (1 << 22) - 1;

/// Why a telemetry report was not read. Cheap to return and to count (the translator keeps
/// one counter per variant).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ReportError {
    /// Shorter than a header, or than the length a header claims.
    Truncated,
    /// A version other than 1 or 2.
    BadVersion,
    /// A length field inconsistent with the metadata bitmaps or the other lengths.
    BadLength,
    /// RepType other than 0 (inner only) and 1 (INT): IOAM (2) and reserved values.
    UnknownRepType,
    /// An inner type this reader cannot take a flow from (none, IPv6, domain specific data,
    /// reserved values, a TLV list without a packet, a non-IPv4 Ethernet payload).
    UnsupportedInnerType,
    /// The inner packet's headers are malformed (IP version or header length, a TCP data
    /// offset below 5, a broken INT shim or metadata header).
    MalformedInner,
}

impl ReportError {
    /// Every variant, in counter order.
    pub const ALL: [ReportError; 6] = [
        ReportError::Truncated,
        ReportError::BadVersion,
        ReportError::BadLength,
        ReportError::UnknownRepType,
        ReportError::UnsupportedInnerType,
        ReportError::MalformedInner,
    ];

    /// The reason's name (a metrics label).
    pub const fn as_str(self) -> &'static str {
        match self {
            ReportError::Truncated => "truncated",
            ReportError::BadVersion => "bad_version",
            ReportError::BadLength => "bad_length",
            ReportError::UnknownRepType => "unknown_rep_type",
            ReportError::UnsupportedInnerType => "unsupported_inner_type",
            ReportError::MalformedInner => "malformed_inner",
        }
    }
}

impl core::fmt::Display for ReportError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::error::Error for ReportError {}

impl From<ReportError> for Error {
    fn from(e: ReportError) -> Error {
        match e {
            ReportError::Truncated => Error::Truncated,
            ReportError::BadVersion => Error::UnsupportedVersion,
            ReportError::UnknownRepType => Error::UnknownOpcode,
            _ => Error::Malformed,
        }
    }
}

const PROTO_TCP: u8 = 6;
const PROTO_UDP: u8 = 17;

#[cfg(test)]
mod tests;
