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

use crate::wire::{Error, Result};

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

mod field {
    use core::ops::Range;
    // v2.0 group header.
    pub const G_VER_HW_SEQ: Range<usize> = 0..4;
    pub const G_NODE_ID: Range<usize> = 4..8;
    // v2.0 individual report header (offsets from its start).
    pub const I_TYPES: usize = 0;
    pub const I_REPORT_LEN: usize = 1;
    pub const I_MD_LEN: usize = 2;
    pub const I_FLAGS: usize = 3;
    pub const I_REP_MD_BITS: Range<usize> = 4..6;
    pub const I_DS_ID: Range<usize> = 6..8;
    pub const I_DS_MD_BITS: Range<usize> = 8..10;
    pub const I_DS_MD_STATUS: Range<usize> = 10..12;
    // v1.0 header.
    pub const V1_WORD0: Range<usize> = 0..4;
    pub const V1_SWITCH_ID: Range<usize> = 4..8;
    pub const V1_SEQ: Range<usize> = 8..12;
    pub const V1_INGRESS_TS: Range<usize> = 12..16;
    // INT shim and metadata header.
    pub const SHIM_TYPE: usize = 0;
    pub const SHIM_LEN: usize = 1;
    pub const SHIM_FIELD: Range<usize> = 2..4;
    // INT 1.0 shim: Type(8) | Reserved(8) | Length(8) | DSCP(6) R R.
    pub const SHIM1_LEN: usize = 2;
    pub const MD_VER: usize = 0;
    pub const MD_HOP_ML: usize = 2;
    pub const MD_REMAINING: usize = 3;
    pub const MD_INSTRUCTION: Range<usize> = 4..6;
    pub const MD_DS_ID: Range<usize> = 6..8;
    pub const MD_DS_INSTRUCTION: Range<usize> = 8..10;
    pub const MD_DS_FLAGS: Range<usize> = 10..12;
    // Inner packet headers.
    pub const ETH_TYPE: Range<usize> = 12..14;
    pub const IP_VER_IHL: usize = 0;
    pub const IP_TOS: usize = 1;
    pub const IP_LEN: Range<usize> = 2..4;
    pub const IP_TTL: usize = 8;
    pub const IP_PROTO: usize = 9;
    pub const IP_SRC: Range<usize> = 12..16;
    pub const IP_DST: Range<usize> = 16..20;
    pub const L4_SPORT: Range<usize> = 0..2;
    pub const L4_DPORT: Range<usize> = 2..4;
    pub const TCP_DATA_OFF: usize = 12;
}

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

#[inline(always)]
fn get<const N: usize>(b: &[u8], at: usize) -> core::result::Result<[u8; N], ReportError> {
    match b.get(at..at + N) {
        Some(s) => Ok(s.try_into().unwrap_or([0; N])),
        None => Err(ReportError::Truncated),
    }
}

#[inline(always)]
fn be16(b: &[u8], at: usize) -> core::result::Result<u16, ReportError> {
    get::<2>(b, at).map(u16::from_be_bytes)
}

#[inline(always)]
fn be32(b: &[u8], at: usize) -> core::result::Result<u32, ReportError> {
    get::<4>(b, at).map(u32::from_be_bytes)
}

#[inline(always)]
fn be64(b: &[u8], at: usize) -> core::result::Result<u64, ReportError> {
    get::<8>(b, at).map(u64::from_be_bytes)
}

#[inline(always)]
fn byte(b: &[u8], at: usize) -> core::result::Result<u8, ReportError> {
    b.get(at).copied().ok_or(ReportError::Truncated)
}

// ---------------------------------------------------------------------------------------------
// Per-hop metadata and the three bitmaps that select it.

/// A queue's ID and occupancy (24 bits).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct QueueOccupancy {
    /// Queue ID.
    pub id: u8,
    /// Occupancy, in the device's units (24 bits).
    pub occupancy: u32,
}

/// A drop: the queue and the reason code (e.g. `p4lang/switch`'s `drop_reason_codes.h`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct DropInfo {
    /// Queue ID.
    pub queue: u8,
    /// Drop reason.
    pub reason: u8,
}

/// One hop's metadata: whichever fields its bitmap selected.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct HopMetadata {
    /// Node (switch) ID.
    pub node_id: Option<u32>,
    /// Level 1 ingress and egress interface IDs.
    pub l1_ports: Option<(u16, u16)>,
    /// Hop latency.
    pub hop_latency: Option<u32>,
    /// Queue ID and occupancy.
    pub queue: Option<QueueOccupancy>,
    /// Ingress timestamp (64 bits; v1.0 has none in its metadata).
    pub ingress_ts: Option<u64>,
    /// Egress timestamp (64 bits; 32 in v1.0).
    pub egress_ts: Option<u64>,
    /// Level 2 ingress and egress interface IDs.
    pub l2_ports: Option<(u32, u32)>,
    /// Egress port TX utilisation.
    pub tx_util: Option<u32>,
    /// Buffer ID and occupancy.
    pub buffer: Option<QueueOccupancy>,
    /// Queue ID and drop reason (v2.0 RepMdBits bit 15, v1.0 bit 4).
    pub drop: Option<DropInfo>,
}

/// Which bitmap selects a metadata block.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MdFormat {
    /// The INT 2.x instruction bitmap (embedded stacks, INT-MX).
    IntInstruction,
    /// The INT 1.0 instruction bitmap (4-byte timestamps, bit 8 reserved).
    IntInstructionV1,
    /// v2.0 RepMdBits (16 bits).
    RepMdV2,
    /// v1.0 RepMdBits (6 bits).
    RepMdV1,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Item {
    NodeId,
    L1Ports,
    HopLatency,
    Queue,
    IngressTs,
    IngressTs32,
    EgressTs,
    EgressTs32,
    L2Ports,
    TxUtil,
    Buffer,
    Drop,
    Skip4,
}

impl Item {
    const fn len(self) -> usize {
        match self {
            Item::IngressTs | Item::EgressTs | Item::L2Ports => 8,
            _ => 4,
        }
    }
}

use Item::*;
const INT_ITEMS: [Item; 16] = [
    NodeId, L1Ports, HopLatency, Queue, IngressTs, EgressTs, L2Ports, TxUtil, Buffer, Skip4, Skip4,
    Skip4, Skip4, Skip4, Skip4, Skip4,
];
const V2_ITEMS: [Item; 16] = [
    Skip4, L1Ports, HopLatency, Queue, IngressTs, EgressTs, L2Ports, TxUtil, Buffer, Skip4, Skip4,
    Skip4, Skip4, Skip4, Skip4, Drop,
];
const INT1_ITEMS: [Item; 16] = [
    NodeId,
    L1Ports,
    HopLatency,
    Queue,
    IngressTs32,
    EgressTs32,
    L2Ports,
    TxUtil,
    Skip4,
    Skip4,
    Skip4,
    Skip4,
    Skip4,
    Skip4,
    Skip4,
    Skip4,
];
const V1_ITEMS: [Item; 6] = [L1Ports, HopLatency, Queue, EgressTs32, Drop, TxUtil];

impl MdFormat {
    /// The instruction bitmap of INT metadata header version `version` (1: INT 1.0, else
    /// INT 2.x).
    #[inline]
    pub const fn int(version: u8) -> MdFormat {
        if version == 1 {
            MdFormat::IntInstructionV1
        } else {
            MdFormat::IntInstruction
        }
    }

    #[inline]
    fn items(self) -> &'static [Item] {
        match self {
            MdFormat::IntInstruction => &INT_ITEMS,
            MdFormat::IntInstructionV1 => &INT1_ITEMS,
            MdFormat::RepMdV2 => &V2_ITEMS,
            MdFormat::RepMdV1 => &V1_ITEMS,
        }
    }

    /// The bitmap's mask for bit `i` (bit 0 is the most significant).
    #[inline]
    fn mask(self, i: usize) -> u16 {
        let width = self.items().len();
        1 << (width - 1 - i)
    }

    /// Bytes of metadata `bits` selects.
    #[inline]
    pub fn md_len(self, bits: u16) -> usize {
        let mut n = 0;
        for (i, it) in self.items().iter().enumerate() {
            if bits & self.mask(i) != 0 {
                n += it.len();
            }
        }
        n
    }

    /// Reads the metadata `bits` selects from the front of `b` (which may be longer).
    pub fn parse(self, bits: u16, b: &[u8]) -> core::result::Result<HopMetadata, ReportError> {
        let mut m = HopMetadata::default();
        let mut at = 0;
        for (i, it) in self.items().iter().enumerate() {
            if bits & self.mask(i) == 0 {
                continue;
            }
            match it {
                NodeId => m.node_id = Some(be32(b, at)?),
                L1Ports => m.l1_ports = Some((be16(b, at)?, be16(b, at + 2)?)),
                HopLatency => m.hop_latency = Some(be32(b, at)?),
                Queue => {
                    let w = be32(b, at)?;
                    m.queue = Some(QueueOccupancy {
                        id: (w >> 24) as u8,
                        occupancy: w & 0x00FF_FFFF,
                    })
                }
                IngressTs => m.ingress_ts = Some(be64(b, at)?),
                IngressTs32 => m.ingress_ts = Some(be32(b, at)? as u64),
                EgressTs => m.egress_ts = Some(be64(b, at)?),
                EgressTs32 => m.egress_ts = Some(be32(b, at)? as u64),
                L2Ports => m.l2_ports = Some((be32(b, at)?, be32(b, at + 4)?)),
                TxUtil => m.tx_util = Some(be32(b, at)?),
                Buffer => {
                    let w = be32(b, at)?;
                    m.buffer = Some(QueueOccupancy {
                        id: (w >> 24) as u8,
                        occupancy: w & 0x00FF_FFFF,
                    })
                }
                Drop => {
                    let w = get::<4>(b, at)?;
                    m.drop = Some(DropInfo {
                        queue: w[0],
                        reason: w[1],
                    })
                }
                Skip4 => {
                    get::<4>(b, at)?;
                }
            }
            at += it.len();
        }
        Ok(m)
    }

    /// The bitmap for the fields `m` holds (fields this format cannot carry are left out).
    pub fn bits_of(self, m: &HopMetadata) -> u16 {
        let mut bits = 0;
        for (i, it) in self.items().iter().enumerate() {
            let present = match it {
                NodeId => m.node_id.is_some(),
                L1Ports => m.l1_ports.is_some(),
                HopLatency => m.hop_latency.is_some(),
                Queue => m.queue.is_some(),
                IngressTs | IngressTs32 => m.ingress_ts.is_some(),
                EgressTs | EgressTs32 => m.egress_ts.is_some(),
                L2Ports => m.l2_ports.is_some(),
                TxUtil => m.tx_util.is_some(),
                Buffer => m.buffer.is_some(),
                Drop => m.drop.is_some(),
                Skip4 => false,
            };
            if present {
                bits |= self.mask(i);
            }
        }
        bits
    }

    /// Writes the fields `bits` selects from `m` (absent ones as zeros) to the front of `out`
    /// and returns the bytes written. Panics if `out` is shorter than [`MdFormat::md_len`].
    pub fn emit(self, bits: u16, m: &HopMetadata, out: &mut [u8]) -> usize {
        let mut at = 0;
        for (i, it) in self.items().iter().enumerate() {
            if bits & self.mask(i) == 0 {
                continue;
            }
            let o = &mut out[at..at + it.len()];
            let q = |q: Option<QueueOccupancy>| {
                q.map_or(0, |q| (q.id as u32) << 24 | (q.occupancy & 0x00FF_FFFF))
            };
            match it {
                NodeId => o.copy_from_slice(&m.node_id.unwrap_or(0).to_be_bytes()),
                L1Ports => {
                    let (a, b) = m.l1_ports.unwrap_or_default();
                    o[..2].copy_from_slice(&a.to_be_bytes());
                    o[2..].copy_from_slice(&b.to_be_bytes());
                }
                HopLatency => o.copy_from_slice(&m.hop_latency.unwrap_or(0).to_be_bytes()),
                Queue => o.copy_from_slice(&q(m.queue).to_be_bytes()),
                IngressTs => o.copy_from_slice(&m.ingress_ts.unwrap_or(0).to_be_bytes()),
                IngressTs32 => o.copy_from_slice(&(m.ingress_ts.unwrap_or(0) as u32).to_be_bytes()),
                EgressTs => o.copy_from_slice(&m.egress_ts.unwrap_or(0).to_be_bytes()),
                EgressTs32 => o.copy_from_slice(&(m.egress_ts.unwrap_or(0) as u32).to_be_bytes()),
                L2Ports => {
                    let (a, b) = m.l2_ports.unwrap_or_default();
                    o[..4].copy_from_slice(&a.to_be_bytes());
                    o[4..].copy_from_slice(&b.to_be_bytes());
                }
                TxUtil => o.copy_from_slice(&m.tx_util.unwrap_or(0).to_be_bytes()),
                Buffer => o.copy_from_slice(&q(m.buffer).to_be_bytes()),
                Drop => {
                    let d = m.drop.unwrap_or_default();
                    o.copy_from_slice(&[d.queue, d.reason, 0, 0]);
                }
                Skip4 => o.fill(0),
            }
            at += it.len();
        }
        at
    }
}

// ---------------------------------------------------------------------------------------------
// Inner packets: the flow, and an embedded INT stack.

/// An IPv4 5-tuple.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct FlowKey {
    /// Source address.
    pub src: [u8; 4],
    /// Destination address.
    pub dst: [u8; 4],
    /// IP protocol.
    pub proto: u8,
    /// Source port (0 for protocols without ports).
    pub sport: u16,
    /// Destination port.
    pub dport: u16,
}

/// Length of [`FlowKey::to_bytes`].
pub const FLOW_KEY_LEN: usize = 13;

impl FlowKey {
    /// The 13-byte key the translator hashes: source IP, destination IP, protocol, source port,
    /// destination port, in network byte order (the layout `dta gen` uses for its flows).
    #[inline]
    pub fn to_bytes(&self) -> [u8; FLOW_KEY_LEN] {
        let mut b = [0u8; FLOW_KEY_LEN];
        b[0..4].copy_from_slice(&self.src);
        b[4..8].copy_from_slice(&self.dst);
        b[8] = self.proto;
        b[9..11].copy_from_slice(&self.sport.to_be_bytes());
        b[11..13].copy_from_slice(&self.dport.to_be_bytes());
        b
    }

    /// The inverse of [`FlowKey::to_bytes`].
    #[inline]
    pub fn from_bytes(b: &[u8; FLOW_KEY_LEN]) -> FlowKey {
        FlowKey {
            src: [b[0], b[1], b[2], b[3]],
            dst: [b[4], b[5], b[6], b[7]],
            proto: b[8],
            sport: u16::from_be_bytes([b[9], b[10]]),
            dport: u16::from_be_bytes([b[11], b[12]]),
        }
    }
}

/// INT shim types (INT 2.1; an INT 1.0 hop-by-hop stack is `Md`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum IntKind {
    /// INT-MD (INT 1.0: hop-by-hop): instructions and a metadata stack.
    Md,
    /// INT-MX: instructions only; every hop reports for itself.
    Mx,
}

/// An INT-MD (or INT-MX, or INT 1.0 hop-by-hop) header and stack embedded in a truncated
/// packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EmbeddedInt<'a> {
    /// MD or MX.
    pub kind: IntKind,
    /// The metadata header's version: 1 (INT 1.0 shim and header) or 2 (INT 2.x).
    pub version: u8,
    /// Per-hop metadata length in words, domain-specific metadata included (0 for INT-MX).
    pub hop_ml: u8,
    /// Remaining hop count.
    pub remaining_hop_count: u8,
    /// Instruction bitmap.
    pub instruction: u16,
    /// Domain Specific ID.
    pub domain_specific_id: u16,
    /// The stack, newest hop first (`hop_ml` words per hop).
    pub stack: &'a [u8],
}

impl<'a> EmbeddedInt<'a> {
    /// Hops in the stack.
    #[inline]
    pub fn hops(&self) -> usize {
        match self.hop_ml {
            0 => 0,
            ml => self.stack.len() / (ml as usize * 4),
        }
    }

    /// The bitmap format of the hops' metadata (INT 1.0 or 2.x).
    #[inline]
    pub fn format(&self) -> MdFormat {
        MdFormat::int(self.version)
    }

    /// Hop `i` counted from the source (0 is the first hop that pushed metadata; the stack
    /// holds the newest first): the Instruction Bitmap's fields, read from the start of the
    /// hop's `hop_ml` words (any domain-specific metadata after them is skipped). `None`
    /// beyond [`EmbeddedInt::hops`].
    #[inline]
    pub fn hop_from_source(&self, i: usize) -> Option<HopMetadata> {
        let n = self.hops();
        if i >= n {
            return None;
        }
        let w = self.hop_ml as usize * 4;
        let at = (n - 1 - i) * w;
        self.format()
            .parse(self.instruction, self.stack.get(at..at + w)?)
            .ok()
    }
}

/// What a report's truncated packet says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InnerPacket<'a> {
    /// The original packet's 5-tuple.
    pub flow: FlowKey,
    /// IPv4 total length of the original packet.
    pub ip_len: u16,
    /// IPv4 TTL as the reporting node saw it.
    pub ttl: u8,
    /// DSCP.
    pub dscp: u8,
    /// The embedded INT header and stack, if any.
    pub int: Option<EmbeddedInt<'a>>,
}

/// Where embedded INT is found in truncated packets (a deployment's settings).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct InnerConfig {
    /// UDP destination port that announces an INT shim (INT over UDP; "INT_TBD" in the spec,
    /// which IANA has not assigned). 0: none.
    pub md_udp_port: u16,
    /// DSCP value that announces an INT shim behind the packet's own TCP/UDP header. `None`:
    /// DSCP is not used.
    pub md_dscp: Option<u8>,
    /// Bits of the DSCP compared with `md_dscp`.
    pub md_dscp_mask: u8,
}

/// The default INT-over-UDP port of `dta` (INT_TBD has no IANA value; configure yours).
pub const DEFAULT_MD_UDP_PORT: u16 = 40045;

impl Default for InnerConfig {
    fn default() -> Self {
        InnerConfig {
            md_udp_port: DEFAULT_MD_UDP_PORT,
            md_dscp: None,
            md_dscp_mask: 0x3F,
        }
    }
}

const ETHERTYPE_IPV4: u16 = 0x0800;
const ETHERTYPE_VLAN: u16 = 0x8100;
const PROTO_TCP: u8 = 6;
const PROTO_UDP: u8 = 17;

/// What the first byte of an inner packet is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum InnerStart {
    /// An Ethernet header.
    Ethernet,
    /// An IPv4 header.
    Ipv4,
}

/// Reads the flow (and any embedded INT) from a truncated packet.
pub fn parse_inner<'a>(
    start: InnerStart,
    b: &'a [u8],
    cfg: &InnerConfig,
) -> core::result::Result<InnerPacket<'a>, ReportError> {
    let ip = match start {
        InnerStart::Ipv4 => b,
        InnerStart::Ethernet => {
            let mut et = be16(b, field::ETH_TYPE.start)?;
            let mut at = 14;
            if et == ETHERTYPE_VLAN {
                et = be16(b, 16)?;
                at = 18;
            }
            if et != ETHERTYPE_IPV4 {
                return Err(ReportError::UnsupportedInnerType);
            }
            &b[at..]
        }
    };
    let vi = byte(ip, field::IP_VER_IHL)?;
    if vi >> 4 != 4 {
        return Err(if vi >> 4 == 6 {
            ReportError::UnsupportedInnerType
        } else {
            ReportError::MalformedInner
        });
    }
    let ihl = (vi & 0x0F) as usize * 4;
    if ihl < 20 {
        return Err(ReportError::MalformedInner);
    }
    get::<20>(ip, 0)?;
    let l4 = ip.get(ihl..).ok_or(ReportError::Truncated)?;
    let dscp = byte(ip, field::IP_TOS)? >> 2;
    let mut flow = FlowKey {
        src: get::<4>(ip, field::IP_SRC.start)?,
        dst: get::<4>(ip, field::IP_DST.start)?,
        proto: byte(ip, field::IP_PROTO)?,
        sport: 0,
        dport: 0,
    };
    let mut int = None;
    if flow.proto == PROTO_TCP || flow.proto == PROTO_UDP {
        flow.sport = be16(l4, field::L4_SPORT.start)?;
        flow.dport = be16(l4, field::L4_DPORT.start)?;
        let l4_len = if flow.proto == PROTO_UDP {
            8
        } else {
            let off = (byte(l4, field::TCP_DATA_OFF)? >> 4) as usize * 4;
            if off < 20 {
                return Err(ReportError::MalformedInner);
            }
            off
        };
        let by_port =
            flow.proto == PROTO_UDP && cfg.md_udp_port != 0 && flow.dport == cfg.md_udp_port;
        let by_dscp = cfg
            .md_dscp
            .is_some_and(|d| dscp & cfg.md_dscp_mask == d & cfg.md_dscp_mask);
        if by_port || by_dscp {
            let shim_at = if by_port { 8 } else { l4_len };
            let shim = l4.get(shim_at..).ok_or(ReportError::Truncated)?;
            if let Some((e, after)) = parse_shim(shim)? {
                int = Some(e);
                // INT 1.0 has no NPT: its shim keeps no original port or protocol.
                if by_port && e.version == 2 {
                    let npt = (shim[field::SHIM_TYPE] >> 2) & 0x3;
                    let f = be16(shim, field::SHIM_FIELD.start)?;
                    match npt {
                        // The original destination port, replaced by the INT port.
                        1 => flow.dport = f,
                        // A UDP header was added; the original L4 header follows the stack.
                        2 => {
                            flow.proto = f as u8;
                            let orig = shim.get(after..).ok_or(ReportError::Truncated)?;
                            if flow.proto == PROTO_TCP || flow.proto == PROTO_UDP {
                                flow.sport = be16(orig, field::L4_SPORT.start)?;
                                flow.dport = be16(orig, field::L4_DPORT.start)?;
                            } else {
                                flow.sport = 0;
                                flow.dport = 0;
                            }
                        }
                        _ => {}
                    }
                }
            }
        }
    }
    Ok(InnerPacket {
        flow,
        ip_len: be16(ip, field::IP_LEN.start)?,
        ttl: byte(ip, field::IP_TTL)?,
        dscp,
        int,
    })
}

/// An INT shim (2.x, or 1.0) and what follows it: the embedded header, and the offset just
/// past the stack. `None` for shims this reader does not take (INT-Destination, reserved
/// types).
fn parse_shim(b: &[u8]) -> core::result::Result<Option<(EmbeddedInt<'_>, usize)>, ReportError> {
    let t = byte(b, field::SHIM_TYPE)?;
    // INT 2.x: Type(4) | NPT(2) | R(2) | Length(8, words after the shim) | 16 bits.
    // INT 1.0: Type(8) | Reserved(8) | Length(8, words including the shim) | DSCP(6) R R.
    let (kind, version, header_len, body) = match t >> 4 {
        0 => {
            if t != 1 {
                // 2: destination header; others reserved.
                return Ok(None);
            }
            let words = byte(b, field::SHIM1_LEN)? as usize;
            if words * 4 < INT1_SHIM_LEN + INT1_MD_HEADER_LEN {
                return Err(ReportError::MalformedInner);
            }
            let body = b
                .get(INT1_SHIM_LEN..words * 4)
                .ok_or(ReportError::Truncated)?;
            (IntKind::Md, 1, INT1_MD_HEADER_LEN, body)
        }
        1 | 3 => {
            let words = byte(b, field::SHIM_LEN)? as usize;
            if words * 4 < INT_MD_HEADER_LEN {
                return Err(ReportError::MalformedInner);
            }
            let body = b
                .get(INT_SHIM_LEN..INT_SHIM_LEN + words * 4)
                .ok_or(ReportError::Truncated)?;
            let kind = if t >> 4 == 1 {
                IntKind::Md
            } else {
                IntKind::Mx
            };
            (kind, 2, INT_MD_HEADER_LEN, body)
        }
        // 2: INT-Destination; others reserved.
        _ => return Ok(None),
    };
    if byte(body, field::MD_VER)? >> 4 != version {
        return Err(ReportError::MalformedInner);
    }
    let hop_ml = byte(body, field::MD_HOP_ML)? & 0x1F;
    let stack = &body[header_len..];
    let instruction = be16(body, field::MD_INSTRUCTION.start)?;
    let format = MdFormat::int(version);
    if kind == IntKind::Md {
        let per_hop = hop_ml as usize * 4;
        // Hop ML counts domain-specific metadata (or a hop's padding) after the bitmap's
        // fields: it may exceed what the bitmap selects, never fall short of it.
        let bad = if per_hop == 0 {
            !stack.is_empty()
        } else {
            stack.len() % per_hop != 0
                || stack.len() / per_hop > MAX_STACK_HOPS
                || format.md_len(instruction) > per_hop
        };
        if bad {
            return Err(ReportError::BadLength);
        }
    }
    let domain_specific_id = if version == 2 {
        let _ = be16(body, field::MD_DS_INSTRUCTION.start)?;
        let _ = be16(body, field::MD_DS_FLAGS.start)?;
        be16(body, field::MD_DS_ID.start)?
    } else {
        0
    };
    let after = INT_SHIM_LEN + body.len();
    Ok(Some((
        EmbeddedInt {
            kind,
            version,
            hop_ml: if kind == IntKind::Md { hop_ml } else { 0 },
            remaining_hop_count: byte(body, field::MD_REMAINING)?,
            instruction,
            domain_specific_id,
            stack,
        },
        after,
    )))
}

/// An embedded INT header and stack to emit (tests and `dta gen`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EmbeddedIntRepr<'h> {
    /// MD (with `hops`) or MX (no stack).
    pub kind: IntKind,
    /// Instruction bitmap (each hop's fields).
    pub instruction: u16,
    /// Remaining hop count.
    pub remaining_hop_count: u8,
    /// Hops in path order, the source first (emitted newest first).
    pub hops: &'h [HopMetadata],
}

impl EmbeddedIntRepr<'_> {
    /// Shim, header and stack length.
    pub fn buffer_len(&self) -> usize {
        INT_SHIM_LEN + INT_MD_HEADER_LEN + self.stack_len()
    }

    fn stack_len(&self) -> usize {
        match self.kind {
            IntKind::Md => self.hops.len() * MdFormat::IntInstruction.md_len(self.instruction),
            IntKind::Mx => 0,
        }
    }

    /// Emits shim (with `npt` and its 16-bit field), header and stack; returns the length.
    fn emit(&self, npt: u8, shim_field: u16, out: &mut [u8]) -> usize {
        let n = self.buffer_len();
        let out = &mut out[..n];
        out.fill(0);
        out[0] = (match self.kind {
            IntKind::Md => 1,
            IntKind::Mx => 3,
        }) << 4
            | (npt & 3) << 2;
        out[1] = ((n - INT_SHIM_LEN) / 4) as u8;
        out[2..4].copy_from_slice(&shim_field.to_be_bytes());
        let h = &mut out[INT_SHIM_LEN..];
        h[0] = 2 << 4;
        let per_hop = MdFormat::IntInstruction.md_len(self.instruction);
        h[field::MD_HOP_ML] = match self.kind {
            IntKind::Md => (per_hop / 4) as u8 & 0x1F,
            IntKind::Mx => 0,
        };
        h[field::MD_REMAINING] = self.remaining_hop_count;
        h[field::MD_INSTRUCTION].copy_from_slice(&self.instruction.to_be_bytes());
        if self.kind == IntKind::Md {
            let mut at = INT_MD_HEADER_LEN;
            for hop in self.hops.iter().rev() {
                at += MdFormat::IntInstruction.emit(self.instruction, hop, &mut h[at..]);
            }
        }
        n
    }
}

/// A truncated packet to emit: Ethernet (optional), IPv4, then TCP or UDP; with an embedded
/// INT header carried over UDP port `md_udp_port` (shim NPT 2: the original L4 header follows
/// the stack), as a sink that keeps the stack in its report would send it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InnerPacketRepr<'h> {
    /// Start with an Ethernet header.
    pub ethernet: bool,
    /// The flow (protocol 6 or 17 gets a TCP or UDP header; others none).
    pub flow: FlowKey,
    /// TTL.
    pub ttl: u8,
    /// DSCP.
    pub dscp: u8,
    /// Payload bytes the original packet carried beyond its headers (only the IPv4 total
    /// length says so: the report is truncated after the headers).
    pub payload_len: u16,
    /// Embedded INT, carried over UDP to `md_udp_port`.
    pub int: Option<(EmbeddedIntRepr<'h>, u16)>,
}

impl InnerPacketRepr<'_> {
    fn l4_len(&self) -> usize {
        match self.flow.proto {
            PROTO_TCP => 20,
            PROTO_UDP => 8,
            _ => 0,
        }
    }

    /// Bytes [`InnerPacketRepr::emit`] writes (a multiple of 4 is not guaranteed; callers
    /// pad).
    pub fn buffer_len(&self) -> usize {
        let int = self.int.map_or(0, |(e, _)| 8 + e.buffer_len());
        self.ethernet as usize * 14 + 20 + int + self.l4_len()
    }

    /// Writes the packet to the front of `out`; returns its length. Panics if `out` is
    /// shorter than [`InnerPacketRepr::buffer_len`].
    pub fn emit(&self, out: &mut [u8]) -> usize {
        let n = self.buffer_len();
        let out = &mut out[..n];
        out.fill(0);
        let mut at = 0;
        if self.ethernet {
            out[0..6].copy_from_slice(&[0x02, 0, 0, 0, 0, 0x02]);
            out[6..12].copy_from_slice(&[0x02, 0, 0, 0, 0, 0x01]);
            out[field::ETH_TYPE].copy_from_slice(&ETHERTYPE_IPV4.to_be_bytes());
            at = 14;
        }
        let ip_at = at;
        let headers = n - at;
        let ip = &mut out[ip_at..];
        ip[0] = 0x45;
        ip[field::IP_TOS] = self.dscp << 2;
        let total = (headers + self.payload_len as usize).min(u16::MAX as usize) as u16;
        ip[field::IP_LEN].copy_from_slice(&total.to_be_bytes());
        ip[6] = 0x40; // DF
        ip[field::IP_TTL] = self.ttl;
        ip[field::IP_PROTO] = if self.int.is_some() {
            PROTO_UDP
        } else {
            self.flow.proto
        };
        ip[field::IP_SRC].copy_from_slice(&self.flow.src);
        ip[field::IP_DST].copy_from_slice(&self.flow.dst);
        let sum = crate::wire::ipv4::checksum::fold(crate::wire::ipv4::checksum::sum(0, &ip[..20]));
        ip[10..12].copy_from_slice(&(!sum).to_be_bytes());
        at = 20;
        if let Some((e, port)) = self.int {
            let udp_len = (total as usize).saturating_sub(20).min(u16::MAX as usize) as u16;
            ip[at..at + 2].copy_from_slice(&self.flow.sport.to_be_bytes());
            ip[at + 2..at + 4].copy_from_slice(&port.to_be_bytes());
            ip[at + 4..at + 6].copy_from_slice(&udp_len.to_be_bytes());
            at += 8;
            at += e.emit(2, self.flow.proto as u16, &mut ip[at..]);
        }
        let l4 = &mut ip[at..];
        match self.flow.proto {
            PROTO_TCP => {
                l4[0..2].copy_from_slice(&self.flow.sport.to_be_bytes());
                l4[2..4].copy_from_slice(&self.flow.dport.to_be_bytes());
                l4[field::TCP_DATA_OFF] = 5 << 4;
                l4[13] = 0x10; // ACK
                l4[14..16].copy_from_slice(&0xFFFFu16.to_be_bytes());
            }
            PROTO_UDP => {
                l4[0..2].copy_from_slice(&self.flow.sport.to_be_bytes());
                l4[2..4].copy_from_slice(&self.flow.dport.to_be_bytes());
                let len = (8 + self.payload_len as usize).min(u16::MAX as usize) as u16;
                l4[4..6].copy_from_slice(&len.to_be_bytes());
            }
            _ => {}
        }
        n
    }
}

// ---------------------------------------------------------------------------------------------
// The reports.

/// Individual report types (v2.0 RepType).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RepType {
    /// 0: the inner contents only.
    InnerOnly,
    /// 1: INT metadata, then the inner contents.
    Int,
}

/// Inner contents types (v2.0 InType; v1.0 NProto maps onto 3–5).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum InType {
    /// 0: none.
    None,
    /// 1: TLVs.
    Tlv,
    /// 2: domain specific extension data.
    DomainSpecific,
    /// 3: Ethernet.
    Ethernet,
    /// 4: IPv4.
    Ipv4,
    /// 5: IPv6.
    Ipv6,
    /// 6–15: reserved.
    Reserved(u8),
}

impl InType {
    /// From the 4-bit field.
    pub const fn from_bits(v: u8) -> InType {
        match v & 0xF {
            0 => InType::None,
            1 => InType::Tlv,
            2 => InType::DomainSpecific,
            3 => InType::Ethernet,
            4 => InType::Ipv4,
            5 => InType::Ipv6,
            r => InType::Reserved(r),
        }
    }

    /// The 4-bit field.
    pub const fn bits(self) -> u8 {
        match self {
            InType::None => 0,
            InType::Tlv => 1,
            InType::DomainSpecific => 2,
            InType::Ethernet => 3,
            InType::Ipv4 => 4,
            InType::Ipv6 => 5,
            InType::Reserved(r) => r & 0xF,
        }
    }
}

/// The association bits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Flags {
    /// D: a packet was dropped.
    pub dropped: bool,
    /// Q: congested queue.
    pub congested: bool,
    /// F: tracked flow.
    pub tracked: bool,
    /// I: intermediate report (v2.0 only).
    pub intermediate: bool,
}

/// One individual report, borrowed from its datagram.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IndividualReport<'a> {
    /// Report type.
    pub rep_type: RepType,
    /// Inner contents type.
    pub in_type: InType,
    /// Association bits.
    pub flags: Flags,
    /// The metadata bitmap (v2.0 or v1.0 RepMdBits).
    pub rep_md_bits: u16,
    /// Domain Specific ID (v2.0 INT reports; else 0).
    pub domain_specific_id: u16,
    /// DSMdBits (v2.0 INT reports; else 0).
    pub ds_md_bits: u16,
    /// DSMdstatus (v2.0 INT reports; else 0).
    pub ds_md_status: u16,
    /// The reporting node's own metadata.
    pub local: HopMetadata,
    /// v1.0's 32-bit ingress timestamp.
    pub ingress_ts32: Option<u32>,
    /// The inner contents (a truncated packet, TLVs, ...), as InType says.
    pub inner: &'a [u8],
}

impl<'a> IndividualReport<'a> {
    /// The truncated packet and where it starts: from the inner contents directly, or from
    /// the first Ethernet/IPv4 TLV.
    pub fn packet(&self) -> core::result::Result<(InnerStart, &'a [u8]), ReportError> {
        match self.in_type {
            InType::Ethernet => Ok((InnerStart::Ethernet, self.inner)),
            InType::Ipv4 => Ok((InnerStart::Ipv4, self.inner)),
            InType::Tlv => {
                let mut b = self.inner;
                while b.len() >= 4 {
                    let t = b[0] >> 4;
                    let len = 4 + b[1] as usize * 4;
                    let data = b.get(4..len).ok_or(ReportError::Truncated)?;
                    match t {
                        1 => return Ok((InnerStart::Ethernet, data)),
                        2 => return Ok((InnerStart::Ipv4, data)),
                        _ => b = &b[len..],
                    }
                }
                Err(ReportError::UnsupportedInnerType)
            }
            _ => Err(ReportError::UnsupportedInnerType),
        }
    }

    /// [`IndividualReport::packet`] parsed with [`parse_inner`].
    pub fn parse_inner(
        &self,
        cfg: &InnerConfig,
    ) -> core::result::Result<InnerPacket<'a>, ReportError> {
        let (start, b) = self.packet()?;
        parse_inner(start, b, cfg)
    }
}

/// A telemetry report datagram, checked as far as its headers go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TelemetryReport<'a> {
    /// 1 or 2.
    pub version: u8,
    /// Hardware ID within the node.
    pub hw_id: u8,
    /// Sequence number (22 bits in v2.0, 32 in v1.0).
    pub seq_no: u32,
    /// Node (switch) ID.
    pub node_id: u32,
    body: &'a [u8],
}

impl<'a> TelemetryReport<'a> {
    /// Reads the group header (v2.0) or the report header (v1.0) of a UDP payload.
    pub fn parse(b: &'a [u8]) -> core::result::Result<TelemetryReport<'a>, ReportError> {
        let ver = byte(b, 0)? >> 4;
        match ver {
            VERSION_2 => {
                let w = be32(b, field::G_VER_HW_SEQ.start)?;
                let node_id = be32(b, field::G_NODE_ID.start)?;
                let body = &b[GROUP_HEADER_LEN..];
                if body.len() < INDIVIDUAL_HEADER_LEN {
                    return Err(ReportError::Truncated);
                }
                Ok(TelemetryReport {
                    version: VERSION_2,
                    hw_id: ((w >> 22) & 0x3F) as u8,
                    seq_no: w & V2_SEQ_MAX,
                    node_id,
                    body,
                })
            }
            VERSION_1 => {
                let w = be32(b, field::V1_WORD0.start)?;
                let switch_id = be32(b, field::V1_SWITCH_ID.start)?;
                let seq = be32(b, field::V1_SEQ.start)?;
                be32(b, field::V1_INGRESS_TS.start)?;
                Ok(TelemetryReport {
                    version: VERSION_1,
                    hw_id: (w & 0x3F) as u8,
                    seq_no: seq,
                    node_id: switch_id,
                    body: b,
                })
            }
            _ => Err(ReportError::BadVersion),
        }
    }

    /// The individual reports (one for v1.0). Each item is a report or the error that ends
    /// the walk (the iterator stops after an error).
    #[inline]
    pub fn reports(&self) -> Reports<'a> {
        Reports {
            version: self.version,
            rest: self.body,
            done: false,
        }
    }
}

/// Iterator over a datagram's individual reports.
#[derive(Debug, Clone)]
pub struct Reports<'a> {
    version: u8,
    rest: &'a [u8],
    done: bool,
}

impl<'a> Iterator for Reports<'a> {
    type Item = core::result::Result<IndividualReport<'a>, ReportError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        let r = if self.version == VERSION_1 {
            self.done = true;
            parse_v1(self.rest)
        } else {
            if self.rest.len() < INDIVIDUAL_HEADER_LEN {
                // Trailing padding shorter than a header ends the walk; a datagram is
                // checked to hold at least one report when parsed.
                self.done = true;
                return None;
            }
            match parse_v2_individual(self.rest) {
                Ok((r, used)) => {
                    self.rest = &self.rest[used..];
                    Ok(r)
                }
                Err(e) => Err(e),
            }
        };
        if r.is_err() {
            self.done = true;
        }
        Some(r)
    }
}

fn parse_v2_individual(
    b: &[u8],
) -> core::result::Result<(IndividualReport<'_>, usize), ReportError> {
    let types = byte(b, field::I_TYPES)?;
    let rep_len = byte(b, field::I_REPORT_LEN)?;
    let md_words = byte(b, field::I_MD_LEN)? as usize;
    let fl = byte(b, field::I_FLAGS)?;
    let total = if rep_len == 0xFF {
        // "To the end of the UDP payload".
        b.len()
    } else {
        INDIVIDUAL_HEADER_LEN + rep_len as usize * 4
    };
    let rep = b.get(..total).ok_or(ReportError::Truncated)?;
    let rep_type = match types >> 4 {
        0 => RepType::InnerOnly,
        1 => RepType::Int,
        _ => return Err(ReportError::UnknownRepType),
    };
    let mut r = IndividualReport {
        rep_type,
        in_type: InType::from_bits(types),
        flags: Flags {
            dropped: fl & 0x80 != 0,
            congested: fl & 0x40 != 0,
            tracked: fl & 0x20 != 0,
            intermediate: fl & 0x10 != 0,
        },
        rep_md_bits: 0,
        domain_specific_id: 0,
        ds_md_bits: 0,
        ds_md_status: 0,
        local: HopMetadata::default(),
        ingress_ts32: None,
        inner: &[],
    };
    let inner_at = match rep_type {
        // MD Length is ignored on reception for inner-only reports.
        RepType::InnerOnly => INDIVIDUAL_HEADER_LEN,
        RepType::Int => {
            let main_end = INDIVIDUAL_HEADER_LEN + INT_MAIN_LEN;
            if rep.len() < main_end {
                return Err(if b.len() < main_end {
                    ReportError::Truncated
                } else {
                    ReportError::BadLength
                });
            }
            r.rep_md_bits = be16(rep, field::I_REP_MD_BITS.start)?;
            r.domain_specific_id = be16(rep, field::I_DS_ID.start)?;
            r.ds_md_bits = be16(rep, field::I_DS_MD_BITS.start)?;
            r.ds_md_status = be16(rep, field::I_DS_MD_STATUS.start)?;
            let md_end = main_end + md_words * 4;
            let md = rep.get(main_end..md_end).ok_or(ReportError::BadLength)?;
            // MD Length covers the baseline metadata and any domain specific metadata (whose
            // format we do not know): it must hold at least what RepMdBits selects.
            if MdFormat::RepMdV2.md_len(r.rep_md_bits) > md.len() {
                return Err(ReportError::BadLength);
            }
            r.local = MdFormat::RepMdV2.parse(r.rep_md_bits, md)?;
            md_end
        }
    };
    r.inner = &rep[inner_at..];
    Ok((r, total))
}

fn parse_v1(b: &[u8]) -> core::result::Result<IndividualReport<'_>, ReportError> {
    let w = be32(b, field::V1_WORD0.start)?;
    let len = ((w >> 24) & 0xF) as usize;
    let nproto = ((w >> 21) & 0x7) as u8;
    let bits = ((w >> 15) & 0x3F) as u16;
    let md_len = MdFormat::RepMdV1.md_len(bits);
    let words = md_len / 4;
    let header_len = if len == 4 + words || len == words && len < 4 {
        V1_HEADER_LEN + md_len
    } else {
        return Err(ReportError::BadLength);
    };
    let md = b
        .get(V1_HEADER_LEN..header_len)
        .ok_or(ReportError::Truncated)?;
    let in_type = match nproto {
        0 => InType::Ethernet,
        1 => InType::Ipv4,
        2 => InType::Ipv6,
        r => InType::Reserved(r + 3),
    };
    Ok(IndividualReport {
        rep_type: RepType::Int,
        in_type,
        flags: Flags {
            dropped: w & 0x0100 != 0,
            congested: w & 0x0080 != 0,
            tracked: w & 0x0040 != 0,
            intermediate: false,
        },
        rep_md_bits: bits,
        domain_specific_id: 0,
        ds_md_bits: 0,
        ds_md_status: 0,
        local: MdFormat::RepMdV1.parse(bits, md)?,
        ingress_ts32: Some(be32(b, field::V1_INGRESS_TS.start)?),
        inner: &b[header_len..],
    })
}

// ---------------------------------------------------------------------------------------------
// Emission (tests and `dta gen`).

/// The header fields of a datagram to emit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct GroupRepr {
    /// 1 or 2.
    pub version: u8,
    /// Hardware ID (6 bits).
    pub hw_id: u8,
    /// Sequence number (22 bits in v2.0).
    pub seq_no: u32,
    /// Node ID.
    pub node_id: u32,
}

/// One individual report to emit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IndividualRepr<'h> {
    /// INT (with `local` metadata) or inner only (v2.0).
    pub rep_type: RepType,
    /// Association bits (`intermediate` is v2.0 only).
    pub flags: Flags,
    /// The node's own metadata (fields the version cannot carry are left out).
    pub local: HopMetadata,
    /// v1.0's ingress timestamp.
    pub ingress_ts32: u32,
    /// The truncated packet.
    pub packet: InnerPacketRepr<'h>,
}

impl IndividualRepr<'_> {
    fn md_bits(&self, version: u8) -> u16 {
        match (version, self.rep_type) {
            (VERSION_1, _) => MdFormat::RepMdV1.bits_of(&self.local),
            (_, RepType::Int) => MdFormat::RepMdV2.bits_of(&self.local),
            (_, RepType::InnerOnly) => 0,
        }
    }

    fn packet_padded(&self) -> usize {
        self.packet.buffer_len().div_ceil(4) * 4
    }

    /// Bytes this report takes in a datagram of `version` (v1.0: the whole payload after
    /// nothing; v2.0: header, main and inner contents).
    pub fn buffer_len(&self, version: u8) -> usize {
        let bits = self.md_bits(version);
        match version {
            VERSION_1 => V1_HEADER_LEN + MdFormat::RepMdV1.md_len(bits) + self.packet.buffer_len(),
            _ => {
                let main = match self.rep_type {
                    RepType::Int => INT_MAIN_LEN + MdFormat::RepMdV2.md_len(bits),
                    RepType::InnerOnly => 0,
                };
                INDIVIDUAL_HEADER_LEN + main + self.packet_padded()
            }
        }
    }
}

/// Length of the datagram [`emit`] writes.
pub fn buffer_len(g: &GroupRepr, reports: &[IndividualRepr<'_>]) -> usize {
    match g.version {
        VERSION_1 => reports.first().map_or(0, |r| r.buffer_len(VERSION_1)),
        _ => {
            GROUP_HEADER_LEN
                + reports
                    .iter()
                    .map(|r| r.buffer_len(VERSION_2))
                    .sum::<usize>()
        }
    }
}

/// Writes a telemetry report datagram (v1.0: the first report only) to the front of `out`;
/// returns its length. Errors: a version other than 1 or 2, no report, or a v2.0 report longer
/// than its 8-bit length field allows ([`Error::Malformed`]); `out` shorter than
/// [`buffer_len`] ([`Error::Truncated`]).
pub fn emit(g: &GroupRepr, reports: &[IndividualRepr<'_>], out: &mut [u8]) -> Result<usize> {
    let n = buffer_len(g, reports);
    if reports.is_empty() || !(VERSION_1..=VERSION_2).contains(&g.version) {
        return Err(Error::Malformed);
    }
    let out = out.get_mut(..n).ok_or(Error::Truncated)?;
    out.fill(0);
    if g.version == VERSION_1 {
        let r = &reports[0];
        let bits = r.md_bits(VERSION_1);
        let md = MdFormat::RepMdV1.md_len(bits);
        let nproto: u32 = if r.packet.ethernet { 0 } else { 1 };
        let w = (VERSION_1 as u32) << 28
            | ((4 + md / 4) as u32 & 0xF) << 24
            | nproto << 21
            | (bits as u32 & 0x3F) << 15
            | (r.flags.dropped as u32) << 8
            | (r.flags.congested as u32) << 7
            | (r.flags.tracked as u32) << 6
            | (g.hw_id as u32 & 0x3F);
        out[field::V1_WORD0].copy_from_slice(&w.to_be_bytes());
        out[field::V1_SWITCH_ID].copy_from_slice(&g.node_id.to_be_bytes());
        out[field::V1_SEQ].copy_from_slice(&g.seq_no.to_be_bytes());
        out[field::V1_INGRESS_TS].copy_from_slice(&r.ingress_ts32.to_be_bytes());
        let at = V1_HEADER_LEN + MdFormat::RepMdV1.emit(bits, &r.local, &mut out[V1_HEADER_LEN..]);
        r.packet.emit(&mut out[at..]);
        return Ok(n);
    }
    let w = (VERSION_2 as u32) << 28 | (g.hw_id as u32 & 0x3F) << 22 | (g.seq_no & V2_SEQ_MAX);
    out[field::G_VER_HW_SEQ].copy_from_slice(&w.to_be_bytes());
    out[field::G_NODE_ID].copy_from_slice(&g.node_id.to_be_bytes());
    let mut at = GROUP_HEADER_LEN;
    for r in reports {
        let len = r.buffer_len(VERSION_2);
        let words = (len - INDIVIDUAL_HEADER_LEN) / 4;
        if words >= 0xFF {
            return Err(Error::Malformed);
        }
        let bits = r.md_bits(VERSION_2);
        let md = MdFormat::RepMdV2.md_len(bits);
        let b = &mut out[at..at + len];
        let in_type = if r.packet.ethernet {
            InType::Ethernet
        } else {
            InType::Ipv4
        };
        let rt: u8 = match r.rep_type {
            RepType::InnerOnly => 0,
            RepType::Int => 1,
        };
        b[field::I_TYPES] = rt << 4 | in_type.bits();
        b[field::I_REPORT_LEN] = words as u8;
        b[field::I_MD_LEN] = match r.rep_type {
            RepType::Int => (md / 4) as u8,
            RepType::InnerOnly => 0,
        };
        b[field::I_FLAGS] = (r.flags.dropped as u8) << 7
            | (r.flags.congested as u8) << 6
            | (r.flags.tracked as u8) << 5
            | (r.flags.intermediate as u8) << 4;
        let mut p = INDIVIDUAL_HEADER_LEN;
        if r.rep_type == RepType::Int {
            b[field::I_REP_MD_BITS].copy_from_slice(&bits.to_be_bytes());
            p += INT_MAIN_LEN;
            p += MdFormat::RepMdV2.emit(bits, &r.local, &mut b[p..]);
        }
        r.packet.emit(&mut b[p..]);
        at += len;
    }
    Ok(n)
}

// ---------------------------------------------------------------------------------------------
// Collector memory layouts of the events the translator appends.

/// Bytes of a drop event entry: flow (13), node ID (4, BE), drop reason, queue ID, one zero.
pub const DROP_ENTRY_LEN: usize = 20;
/// Bytes of a congestion event entry: flow (13), node ID (4, BE), queue ID, occupancy (3, BE),
/// three zeros.
pub const CONGESTION_ENTRY_LEN: usize = 24;

/// A drop event as the translator appends it (and as queries read it back).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct DropEvent {
    /// The dropped packet's flow.
    pub flow: FlowKey,
    /// The node that dropped it.
    pub node_id: u32,
    /// Queue and reason.
    pub drop: DropInfo,
}

impl DropEvent {
    /// The entry bytes.
    pub fn to_bytes(&self) -> [u8; DROP_ENTRY_LEN] {
        let mut e = [0u8; DROP_ENTRY_LEN];
        e[..FLOW_KEY_LEN].copy_from_slice(&self.flow.to_bytes());
        e[13..17].copy_from_slice(&self.node_id.to_be_bytes());
        e[17] = self.drop.reason;
        e[18] = self.drop.queue;
        e
    }

    /// Reads an entry (`None` if `e` is shorter than [`DROP_ENTRY_LEN`]).
    pub fn from_bytes(e: &[u8]) -> Option<DropEvent> {
        let e: &[u8; DROP_ENTRY_LEN] = e.get(..DROP_ENTRY_LEN)?.try_into().ok()?;
        Some(DropEvent {
            flow: FlowKey::from_bytes(e[..FLOW_KEY_LEN].try_into().ok()?),
            node_id: u32::from_be_bytes([e[13], e[14], e[15], e[16]]),
            drop: DropInfo {
                reason: e[17],
                queue: e[18],
            },
        })
    }
}

/// A congestion event as the translator appends it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CongestionEvent {
    /// The flow that met the congested queue.
    pub flow: FlowKey,
    /// The node.
    pub node_id: u32,
    /// The queue and its occupancy.
    pub queue: QueueOccupancy,
}

impl CongestionEvent {
    /// The entry bytes.
    pub fn to_bytes(&self) -> [u8; CONGESTION_ENTRY_LEN] {
        let mut e = [0u8; CONGESTION_ENTRY_LEN];
        e[..FLOW_KEY_LEN].copy_from_slice(&self.flow.to_bytes());
        e[13..17].copy_from_slice(&self.node_id.to_be_bytes());
        e[17] = self.queue.id;
        e[18..21].copy_from_slice(&self.queue.occupancy.to_be_bytes()[1..]);
        e
    }

    /// Reads an entry (`None` if `e` is shorter than [`CONGESTION_ENTRY_LEN`]).
    pub fn from_bytes(e: &[u8]) -> Option<CongestionEvent> {
        let e: &[u8; CONGESTION_ENTRY_LEN] = e.get(..CONGESTION_ENTRY_LEN)?.try_into().ok()?;
        Some(CongestionEvent {
            flow: FlowKey::from_bytes(e[..FLOW_KEY_LEN].try_into().ok()?),
            node_id: u32::from_be_bytes([e[13], e[14], e[15], e[16]]),
            queue: QueueOccupancy {
                id: e[17],
                occupancy: u32::from_be_bytes([0, e[18], e[19], e[20]]),
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn flow() -> FlowKey {
        FlowKey {
            src: [10, 0, 1, 1],
            dst: [10, 0, 2, 2],
            proto: PROTO_TCP,
            sport: 4321,
            dport: 80,
        }
    }

    #[test]
    fn bitmaps_have_the_spec_lengths() {
        // v2.0: bits 4, 5, 6 are 8 bytes, the rest 4.
        assert_eq!(MdFormat::RepMdV2.md_len(0x0800), 8);
        assert_eq!(MdFormat::RepMdV2.md_len(0x4000 | 0x1000), 8);
        assert_eq!(MdFormat::RepMdV2.md_len(0xFFFF), 13 * 4 + 3 * 8);
        assert_eq!(MdFormat::IntInstruction.md_len(0x9000), 8);
        // INT 1.0: timestamps are 4 bytes, only bit 6 (L2 interface IDs) is 8.
        assert_eq!(MdFormat::IntInstructionV1.md_len(0x8C00), 12);
        assert_eq!(MdFormat::IntInstruction.md_len(0x8C00), 20);
        assert_eq!(MdFormat::IntInstructionV1.md_len(0xFFFF), 7 * 4 + 8 + 8 * 4);
        assert_eq!(MdFormat::RepMdV1.md_len(0x3F), 24);
    }

    #[test]
    fn every_prefix_of_a_report_is_an_error_not_a_panic() {
        let hops = [
            HopMetadata {
                node_id: Some(1),
                queue: Some(QueueOccupancy {
                    id: 1,
                    occupancy: 7,
                }),
                ..HopMetadata::default()
            },
            HopMetadata {
                node_id: Some(2),
                queue: Some(QueueOccupancy {
                    id: 2,
                    occupancy: 9,
                }),
                ..HopMetadata::default()
            },
        ];
        for version in [VERSION_1, VERSION_2] {
            let r = IndividualRepr {
                rep_type: RepType::Int,
                flags: Flags {
                    tracked: true,
                    ..Flags::default()
                },
                local: HopMetadata {
                    queue: Some(QueueOccupancy {
                        id: 3,
                        occupancy: 5,
                    }),
                    ..HopMetadata::default()
                },
                ingress_ts32: 0,
                packet: InnerPacketRepr {
                    ethernet: false,
                    flow: flow(),
                    ttl: 61,
                    dscp: 0,
                    payload_len: 100,
                    int: Some((
                        EmbeddedIntRepr {
                            kind: IntKind::Md,
                            instruction: 0x9000,
                            remaining_hop_count: 6,
                            hops: &hops,
                        },
                        DEFAULT_MD_UDP_PORT,
                    )),
                },
            };
            let g = GroupRepr {
                version,
                hw_id: 1,
                seq_no: 9,
                node_id: 3,
            };
            let mut buf = [0u8; 256];
            let n = emit(&g, &[r], &mut buf).unwrap();
            let full = TelemetryReport::parse(&buf[..n]).unwrap();
            let ir = full.reports().next().unwrap().unwrap();
            let inner = ir.parse_inner(&InnerConfig::default()).unwrap();
            assert_eq!(inner.flow, flow());
            let e = inner.int.unwrap();
            assert_eq!(e.hops(), 2);
            assert_eq!(e.hop_from_source(0), Some(hops[0]));
            assert_eq!(e.hop_from_source(1), Some(hops[1]));
            for cut in 0..n {
                let b = &buf[..cut];
                if let Ok(t) = TelemetryReport::parse(b) {
                    for ir in t.reports().flatten() {
                        let _ = ir.parse_inner(&InnerConfig::default());
                    }
                }
            }
        }
    }

    #[test]
    fn bad_versions_and_types_are_named() {
        assert_eq!(
            TelemetryReport::parse(&[0x30, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]),
            Err(ReportError::BadVersion)
        );
        assert_eq!(TelemetryReport::parse(&[]), Err(ReportError::Truncated));
        let mut b = [0u8; 24];
        b[0] = 0x20;
        b[8] = 0x24; // RepType 2 (IOAM)
        b[9] = 1;
        let t = TelemetryReport::parse(&b).unwrap();
        assert_eq!(t.reports().next(), Some(Err(ReportError::UnknownRepType)));
        // Report Length beyond the datagram.
        b[8] = 0x14;
        b[9] = 40;
        let t = TelemetryReport::parse(&b).unwrap();
        assert_eq!(t.reports().next(), Some(Err(ReportError::Truncated)));
        // An INT report whose Report Length cannot hold its main contents.
        b[9] = 1;
        let t = TelemetryReport::parse(&b).unwrap();
        assert_eq!(t.reports().next(), Some(Err(ReportError::BadLength)));
    }

    fn arb_queue() -> impl Strategy<Value = Option<QueueOccupancy>> {
        proptest::option::of(
            (any::<u8>(), 0u32..(1 << 24))
                .prop_map(|(id, occupancy)| QueueOccupancy { id, occupancy }),
        )
    }

    prop_compose! {
        fn arb_md(v1: bool)(
            l1 in proptest::option::of(any::<(u16, u16)>()),
            lat in proptest::option::of(any::<u32>()),
            queue in arb_queue(),
            its in proptest::option::of(any::<u64>()),
            ets in proptest::option::of(any::<u64>()),
            l2 in proptest::option::of(any::<(u32, u32)>()),
            util in proptest::option::of(any::<u32>()),
            buffer in arb_queue(),
            drop in proptest::option::of(any::<(u8, u8)>()),
        ) -> HopMetadata {
            if v1 {
                HopMetadata {
                    l1_ports: l1, hop_latency: lat, queue,
                    egress_ts: ets.map(|t| t as u32 as u64), tx_util: util,
                    drop: drop.map(|(queue, reason)| DropInfo { queue, reason }),
                    ..HopMetadata::default()
                }
            } else {
                HopMetadata {
                    node_id: None, l1_ports: l1, hop_latency: lat, queue, ingress_ts: its,
                    egress_ts: ets, l2_ports: l2, tx_util: util, buffer,
                    drop: drop.map(|(queue, reason)| DropInfo { queue, reason }),
                }
            }
        }
    }

    prop_compose! {
        fn arb_hop()(node in any::<u32>(), lat in any::<u32>(), q in arb_queue()) -> HopMetadata {
            HopMetadata { node_id: Some(node), hop_latency: Some(lat),
                queue: Some(q.unwrap_or_default()), ..HopMetadata::default() }
        }
    }

    proptest! {
        #[test]
        fn round_trip(
            v1 in any::<bool>(),
            hw_id in 0u8..64,
            seq in any::<u32>(),
            node in any::<u32>(),
            flags in any::<(bool, bool, bool, bool)>(),
            local_v1 in arb_md(true),
            local_v2 in arb_md(false),
            ethernet in any::<bool>(),
            proto in prop_oneof![Just(PROTO_TCP), Just(PROTO_UDP)],
            ports in any::<(u16, u16)>(),
            addrs in any::<([u8; 4], [u8; 4])>(),
            ttl in any::<u8>(),
            hops in proptest::collection::vec(arb_hop(), 0..6),
            with_int in any::<bool>(),
            coalesced in 1usize..4,
            its in any::<u32>(),
        ) {
            let version = if v1 { VERSION_1 } else { VERSION_2 };
            let f = FlowKey { src: addrs.0, dst: addrs.1, proto, sport: ports.0, dport: ports.1 };
            let r = IndividualRepr {
                rep_type: RepType::Int,
                flags: Flags { dropped: flags.0, congested: flags.1, tracked: flags.2,
                    intermediate: flags.3 && !v1 },
                local: if v1 { local_v1 } else { local_v2 },
                ingress_ts32: if v1 { its } else { 0 },
                packet: InnerPacketRepr {
                    ethernet, flow: f, ttl, dscp: 0, payload_len: 0,
                    int: with_int.then_some((EmbeddedIntRepr {
                        kind: IntKind::Md, instruction: 0xB000, remaining_hop_count: 3,
                        hops: &hops }, DEFAULT_MD_UDP_PORT)),
                },
            };
            let n_reports = if v1 { 1 } else { coalesced };
            let reports = vec![r; n_reports];
            let g = GroupRepr { version, hw_id, seq_no: if v1 { seq } else { seq & V2_SEQ_MAX },
                node_id: node };
            let mut buf = vec![0u8; buffer_len(&g, &reports)];
            let n = emit(&g, &reports, &mut buf).unwrap();
            prop_assert_eq!(n, buf.len());
            let t = TelemetryReport::parse(&buf).unwrap();
            prop_assert_eq!((t.version, t.hw_id, t.seq_no, t.node_id),
                (g.version, g.hw_id, g.seq_no, g.node_id));
            let mut seen = 0;
            for ir in t.reports() {
                let ir = ir.unwrap();
                seen += 1;
                prop_assert_eq!(ir.flags, r.flags);
                prop_assert_eq!(ir.local, r.local);
                if v1 { prop_assert_eq!(ir.ingress_ts32, Some(its)); }
                let p = ir.parse_inner(&InnerConfig::default()).unwrap();
                prop_assert_eq!(p.flow, f);
                prop_assert_eq!(p.ttl, ttl);
                match p.int {
                    Some(e) => {
                        prop_assert!(with_int);
                        prop_assert_eq!(e.hops(), hops.len());
                        for (i, h) in hops.iter().enumerate() {
                            prop_assert_eq!(e.hop_from_source(i), Some(*h));
                        }
                    }
                    None => prop_assert!(!with_int),
                }
            }
            prop_assert_eq!(seen, n_reports);
        }

        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            let cfg = InnerConfig { md_dscp: Some(0x17), ..InnerConfig::default() };
            if let Ok(t) = TelemetryReport::parse(&bytes) {
                // Reports, then at most one error, which ends the walk; every report takes at
                // least a header, so the walk is bounded by the datagram.
                let items: Vec<_> = t.reports().take(bytes.len() + 2).collect();
                prop_assert!(!items.is_empty());
                prop_assert!(items.len() <= bytes.len() / INDIVIDUAL_HEADER_LEN + 1);
                let errors = items.iter().filter(|r| r.is_err()).count();
                prop_assert!(errors <= 1);
                prop_assert!(errors == 0 || items.last().is_some_and(|r| r.is_err()));
                for ir in t.reports().take(64).flatten() {
                    if let Ok(p) = ir.parse_inner(&cfg) {
                        if let Some(e) = p.int {
                            for i in 0..e.hops() + 1 { let _ = e.hop_from_source(i); }
                        }
                    }
                }
            }
        }
    }
}
