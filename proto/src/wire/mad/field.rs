//! Where every CM MAD field sits: the MAD common header from the start of the MAD, then each
//! message body (and the RDMA_CM private-data IP header) from the start of the MAD data. The
//! only home of the byte offsets; the views and Reprs in the sibling modules read and write
//! through these ranges and never by literal offset.
pub type Field = core::ops::Range<usize>;

/// A sub-byte field in the specification's `Byte[Bit]` notation (bit 0 = MSB).
#[derive(Clone, Copy)]
pub struct Bits {
    pub byte: usize,
    pub shift: u8,
    pub mask: u8,
}

impl Bits {
    /// The field starting at `Byte[bit]`, `width` bits wide, within one byte.
    pub const fn at(byte: usize, bit: u8, width: u8) -> Bits {
        let shift = 8 - bit - width;
        Bits {
            byte,
            shift,
            mask: (((1u16 << width) - 1) as u8) << shift,
        }
    }
}

// MAD common header, from the start of the MAD.
pub const BASE_VERSION: usize = 0;
pub const MGMT_CLASS: usize = 1;
pub const CLASS_VERSION: usize = 2;
pub const METHOD: usize = 3;
pub const STATUS: Field = 4..6;
pub const CLASS_SPECIFIC: Field = 6..8;
pub const TID: Field = 8..16;
pub const ATTR_ID: Field = 16..18;
pub const RESERVED: Field = 18..20;
pub const ATTR_MOD: Field = 20..24;

// From here on, offsets are from the start of the MAD data.

/// ConnectRequest.
pub mod req {
    use super::{Bits, Field};
    pub const LOCAL_COMM_ID: Field = 0..4;
    /// Byte 4 is reserved; the ECE vendor ID fills bytes 5..8.
    pub const VENDOR_ID: Field = 5..8;
    pub const SERVICE_ID: Field = 8..16;
    pub const LOCAL_CA_GUID: Field = 16..24;
    pub const LOCAL_QKEY: Field = 28..32;
    pub const LOCAL_QPN: Field = 32..35;
    pub const RESPONDER_RESOURCES: usize = 35;
    pub const LOCAL_EECN: Field = 36..39;
    pub const INITIATOR_DEPTH: usize = 39;
    pub const REMOTE_EECN: Field = 40..43;
    pub const REMOTE_CM_RESPONSE_TIMEOUT: Bits = Bits::at(43, 0, 5);
    pub const TRANSPORT_TYPE: Bits = Bits::at(43, 5, 2);
    pub const FLOW_CONTROL: Bits = Bits::at(43, 7, 1);
    pub const STARTING_PSN: Field = 44..47;
    pub const LOCAL_CM_RESPONSE_TIMEOUT: Bits = Bits::at(47, 0, 5);
    pub const RETRY_COUNT: Bits = Bits::at(47, 5, 3);
    pub const PKEY: Field = 48..50;
    pub const PATH_MTU: Bits = Bits::at(50, 0, 4);
    pub const RDC_EXISTS: Bits = Bits::at(50, 4, 1);
    pub const RNR_RETRY_COUNT: Bits = Bits::at(50, 5, 3);
    pub const MAX_CM_RETRIES: Bits = Bits::at(51, 0, 4);
    pub const SRQ: Bits = Bits::at(51, 4, 1);
    pub const PRIMARY_LOCAL_LID: Field = 52..54;
    pub const PRIMARY_REMOTE_LID: Field = 54..56;
    pub const PRIMARY_LOCAL_GID: Field = 56..72;
    pub const PRIMARY_REMOTE_GID: Field = 72..88;
    /// Flow label in the upper 20 bits, 6 reserved bits, packet rate in the low 6 bits.
    pub const PRIMARY_FLOW_LABEL_RATE: Field = 88..92;
    pub const PRIMARY_TRAFFIC_CLASS: usize = 92;
    pub const PRIMARY_HOP_LIMIT: usize = 93;
    pub const PRIMARY_SL: Bits = Bits::at(94, 0, 4);
    pub const PRIMARY_SUBNET_LOCAL: Bits = Bits::at(94, 4, 1);
    pub const PRIMARY_LOCAL_ACK_TIMEOUT: Bits = Bits::at(95, 0, 5);
    /// The alternate path (LIDs, GIDs, flow label, ...), unused on RoCE.
    pub const ALTERNATE_PATH: Field = 96..140;
    pub const PRIVATE_DATA: Field = 140..232;
}

/// ConnectReply.
pub mod rep {
    use super::{Bits, Field};
    pub const LOCAL_COMM_ID: Field = 0..4;
    pub const REMOTE_COMM_ID: Field = 4..8;
    pub const LOCAL_QKEY: Field = 8..12;
    pub const LOCAL_QPN: Field = 12..15;
    /// The ECE vendor ID is split over the low bytes of three 24-bit fields.
    pub const VENDOR_ID_H: usize = 15;
    pub const LOCAL_EECN: Field = 16..19;
    pub const VENDOR_ID_M: usize = 19;
    pub const STARTING_PSN: Field = 20..23;
    pub const VENDOR_ID_L: usize = 23;
    pub const RESPONDER_RESOURCES: usize = 24;
    pub const INITIATOR_DEPTH: usize = 25;
    pub const TARGET_ACK_DELAY: Bits = Bits::at(26, 0, 5);
    pub const FAILOVER_ACCEPTED: Bits = Bits::at(26, 5, 2);
    pub const END_TO_END_FLOW_CONTROL: Bits = Bits::at(26, 7, 1);
    pub const RNR_RETRY_COUNT: Bits = Bits::at(27, 0, 3);
    pub const SRQ: Bits = Bits::at(27, 3, 1);
    pub const LOCAL_CA_GUID: Field = 28..36;
    pub const PRIVATE_DATA: Field = 36..232;
}

/// ReadyToUse and DisconnectReply share this layout.
pub mod rtu {
    use super::Field;
    pub const LOCAL_COMM_ID: Field = 0..4;
    pub const REMOTE_COMM_ID: Field = 4..8;
    pub const PRIVATE_DATA: Field = 8..232;
}

/// ConnectReject.
pub mod rej {
    use super::{Bits, Field};
    pub const LOCAL_COMM_ID: Field = 0..4;
    pub const REMOTE_COMM_ID: Field = 4..8;
    pub const MSG_REJECTED: Bits = Bits::at(8, 0, 2);
    pub const REJECT_INFO_LENGTH: Bits = Bits::at(9, 0, 7);
    pub const REASON: Field = 10..12;
    pub const ARI: Field = 12..84;
    pub const PRIVATE_DATA: Field = 84..232;
}

/// DisconnectRequest.
pub mod dreq {
    use super::Field;
    pub const LOCAL_COMM_ID: Field = 0..4;
    pub const REMOTE_COMM_ID: Field = 4..8;
    pub const REMOTE_QPN_EECN: Field = 8..11;
    pub const PRIVATE_DATA: Field = 12..232;
}

/// MessageReceiptAcknowledgement.
pub mod mra {
    use super::{Bits, Field};
    pub const LOCAL_COMM_ID: Field = 0..4;
    pub const REMOTE_COMM_ID: Field = 4..8;
    pub const MSG_MRAED: Bits = Bits::at(8, 0, 2);
    pub const SERVICE_TIMEOUT: Bits = Bits::at(9, 0, 5);
}

/// The RDMA_CM IP header at the start of REQ private data.
pub mod cma {
    use super::Field;
    pub const VERSION: usize = 0;
    /// IP version in the upper nibble.
    pub const IP_VERSION: usize = 1;
    pub const SRC_PORT: Field = 2..4;
    pub const SRC_ADDR: Field = 4..20;
    pub const DST_ADDR: Field = 20..36;
    /// An IPv4 address sits in the last 4 bytes of its 16-byte field.
    pub const SRC_IPV4: Field = SRC_ADDR.end - 4..SRC_ADDR.end;
    pub const DST_IPV4: Field = DST_ADDR.end - 4..DST_ADDR.end;
}
