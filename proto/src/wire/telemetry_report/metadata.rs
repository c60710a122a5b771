//! Per-hop metadata and the three bitmaps that select it (INT instruction bitmaps, v2.0 and
//! v1.0 RepMdBits): reading, sizing and writing one hop's fields. Knows nothing of the headers
//! around a metadata block.

use super::ReportError;

/// A queue's ID and occupancy (24 bits).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct QueueOccupancy {
    /// Queue ID.
    pub id: u8,
    /// Occupancy, in the device's units (24 bits).
    pub occupancy: u32,
}

impl QueueOccupancy {
    /// From its 32-bit word: ID (8) | occupancy (24).
    #[inline]
    const fn from_word(w: u32) -> QueueOccupancy {
        QueueOccupancy {
            id: (w >> 24) as u8,
            occupancy: w & 0x00FF_FFFF,
        }
    }
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
            // The fields lie back to back from the front: the first that runs past the end
            // of `b` makes the block truncated.
            let f = b.get(at..at + it.len()).ok_or(ReportError::Truncated)?;
            let be16 = |o: usize| u16::from_be_bytes([f[o], f[o + 1]]);
            let be32 = |o: usize| u32::from_be_bytes([f[o], f[o + 1], f[o + 2], f[o + 3]]);
            match it {
                NodeId => m.node_id = Some(be32(0)),
                L1Ports => m.l1_ports = Some((be16(0), be16(2))),
                HopLatency => m.hop_latency = Some(be32(0)),
                Queue => m.queue = Some(QueueOccupancy::from_word(be32(0))),
                IngressTs => m.ingress_ts = Some((be32(0) as u64) << 32 | be32(4) as u64),
                IngressTs32 => m.ingress_ts = Some(be32(0) as u64),
                EgressTs => m.egress_ts = Some((be32(0) as u64) << 32 | be32(4) as u64),
                EgressTs32 => m.egress_ts = Some(be32(0) as u64),
                L2Ports => m.l2_ports = Some((be32(0), be32(4))),
                TxUtil => m.tx_util = Some(be32(0)),
                Buffer => m.buffer = Some(QueueOccupancy::from_word(be32(0))),
                Drop => {
                    m.drop = Some(DropInfo {
                        queue: f[0],
                        reason: f[1],
                    })
                }
                Skip4 => {}
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
