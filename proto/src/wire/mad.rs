//! InfiniBand Communication Management (CM) MADs, as RDMA_CM uses them over RoCEv2.
//!
//! RDMA_CM sets up an RC connection with three datagrams between the two General Services
//! Interfaces: the active side sends a ConnectRequest (REQ), the passive side answers with a
//! ConnectReply (REP) or a ConnectReject (REJ), and the active side confirms with ReadyToUse
//! (RTU). DisconnectRequest/Reply (DREQ/DREP) tear the connection down, and MessageReceiptAck
//! (MRA) asks the peer for more time. On RoCEv2 each of them is one UD SEND-Only packet to QP 1
//! (the GSI) with the well-known GSI Q_Key: BTH + DETH + a 256-byte MAD (+ ICRC). This module
//! owns only the 256-byte MAD: a 24-byte common header ([`MadHeader`], [`MadHeaderRepr`]) and a
//! 232-byte body whose layout depends on the attribute ID ([`CmMessage`]).
//!
//! Layouts follow IBA volume 1, chapter 12 (tables "REQ/MRA/REJ/REP/RTU/DREQ/DREP Message
//! Contents"). Offsets in this module are from the first byte *after* the MAD header. Sub-byte
//! fields are declared in the specification's `Byte[Bit]` notation, where bit 0 is the most
//! significant bit of the byte; all multi-byte fields are big-endian.
//!
//! RDMA_CM adds two conventions on top of the IB CM: the service ID encodes the port space and
//! port ([`rdma_cm_service_id`]), and the first 36 bytes of the REQ private data carry the IP
//! addressing of the connection ([`CmPrivateIp`]). On RoCE the GIDs are IPv4-mapped IPv6
//! addresses ([`ipv4_gid`]).
//!
//! Parsing never panics: every parser checks the length first and only then indexes. `emit`
//! functions write every byte of their output (reserved fields become zero) and panic only when
//! handed a buffer shorter than the `buffer_len()` they report. Values wider than their field are
//! truncated to the field's width on emit.

use core::net::Ipv4Addr;

use super::{Error, Result};

/// Bytes in a MAD (every CM message is exactly one MAD).
pub const MAD_LEN: usize = 256;
/// Bytes in the MAD common header.
pub const MAD_HEADER_LEN: usize = 24;
/// Bytes of MAD data after the common header (the CM message body).
pub const MAD_DATA_LEN: usize = MAD_LEN - MAD_HEADER_LEN;

/// QP number of the General Services Interface, which receives CM MADs.
pub const GSI_QPN: u32 = 1;
/// The well-known Q_Key of the GSI.
pub const GSI_QKEY: u32 = 0x8001_0000;

/// The MAD base version every MAD carries.
pub const MAD_BASE_VERSION: u8 = 1;
/// Management class of Communication Management.
pub const MGMT_CLASS_CM: u8 = 0x07;
/// CM class version (IBA 1.2 and later).
pub const CM_CLASS_VERSION: u8 = 2;
/// MAD method `Get`.
pub const METHOD_GET: u8 = 0x01;
/// MAD method `Send`, the only method CM messages use.
pub const METHOD_SEND: u8 = 0x03;
/// Bit of the method byte that marks a response.
pub const METHOD_RESPONSE: u8 = 0x80;

/// Attribute ID of ClassPortInfo.
pub const ATTR_CLASS_PORT_INFO: u16 = 0x0001;
/// Attribute ID of ConnectRequest (REQ).
pub const ATTR_REQ: u16 = 0x0010;
/// Attribute ID of MessageReceiptAcknowledgement (MRA).
pub const ATTR_MRA: u16 = 0x0011;
/// Attribute ID of ConnectReject (REJ).
pub const ATTR_REJ: u16 = 0x0012;
/// Attribute ID of ConnectReply (REP).
pub const ATTR_REP: u16 = 0x0013;
/// Attribute ID of ReadyToUse (RTU).
pub const ATTR_RTU: u16 = 0x0014;
/// Attribute ID of DisconnectRequest (DREQ).
pub const ATTR_DREQ: u16 = 0x0015;
/// Attribute ID of DisconnectReply (DREP).
pub const ATTR_DREP: u16 = 0x0016;
/// Attribute ID of ServiceIDResolutionRequest (SIDR_REQ).
pub const ATTR_SIDR_REQ: u16 = 0x0017;
/// Attribute ID of ServiceIDResolutionResponse (SIDR_REP).
pub const ATTR_SIDR_REP: u16 = 0x0018;
/// Attribute ID of LoadAlternatePath (LAP).
pub const ATTR_LAP: u16 = 0x0019;
/// Attribute ID of AlternatePathResponse (APR).
pub const ATTR_APR: u16 = 0x001A;

/// Private data bytes of a REQ.
pub const REQ_PRIVATE_DATA_LEN: usize = 92;
/// Private data bytes of a REP.
pub const REP_PRIVATE_DATA_LEN: usize = 196;
/// Private data bytes of an RTU.
pub const RTU_PRIVATE_DATA_LEN: usize = 224;
/// Additional Rejection Information bytes of a REJ.
pub const REJ_ARI_LEN: usize = 72;
/// Private data bytes of a REJ.
pub const REJ_PRIVATE_DATA_LEN: usize = 148;
/// Private data bytes of a DREQ.
pub const DREQ_PRIVATE_DATA_LEN: usize = 220;
/// Private data bytes of a DREP.
pub const DREP_PRIVATE_DATA_LEN: usize = 224;

/// REQ/REP "Transport Service Type" of a Reliable Connection.
pub const TRANSPORT_RC: u8 = 0;
/// REQ/REP "Transport Service Type" of an Unreliable Connection.
pub const TRANSPORT_UC: u8 = 1;

/// REJ "Message Rejected" / MRA "Message MRAed" value naming a REQ.
pub const MSG_REQ: u8 = 0;
/// REJ "Message Rejected" / MRA "Message MRAed" value naming a REP.
pub const MSG_REP: u8 = 1;
/// REJ "Message Rejected" / MRA "Message MRAed" value naming any other message (LAP).
pub const MSG_OTHER: u8 = 2;

/// The RDMA_CM service-ID prefix of IP-based connections in the TCP port space (`RDMA_PS_TCP`).
pub const RDMA_IP_PS_TCP: u64 = 0x0000_0000_0106_0000;
/// Mask selecting the port-space part of an RDMA_CM IP service ID.
pub const RDMA_IP_PS_MASK: u64 = 0xFFFF_FFFF_FFFF_0000;

/// REJ reason codes (IBA vol 1, "Reject Reason" table of chapter 12).
pub mod rej_reason {
    /// No QP available.
    pub const NO_QP: u16 = 1;
    /// No EE context available.
    pub const NO_EEC: u16 = 2;
    /// No resources available.
    pub const NO_RESOURCES: u16 = 3;
    /// Timed out waiting for a reply.
    pub const TIMEOUT: u16 = 4;
    /// The REQ asked for something unsupported.
    pub const UNSUPPORTED: u16 = 5;
    /// Invalid communication ID.
    pub const INVALID_COMM_ID: u16 = 6;
    /// Invalid communication instance.
    pub const INVALID_COMM_INSTANCE: u16 = 7;
    /// No listener for the service ID (RDMA_CM: no one listens on the port).
    pub const INVALID_SERVICE_ID: u16 = 8;
    /// Invalid transport service type.
    pub const INVALID_TRANSPORT_TYPE: u16 = 9;
    /// The connection is stale (its QPN or comm ID is still in time-wait).
    pub const STALE_CONNECTION: u16 = 10;
    /// Invalid primary GID.
    pub const INVALID_GID: u16 = 12;
    /// Invalid path MTU.
    pub const INVALID_MTU: u16 = 26;
    /// Too few responder resources for the initiator depth asked for.
    pub const INSUFFICIENT_RESP_RESOURCES: u16 = 27;
    /// Rejected by the consumer (RDMA_CM: `rdma_reject`).
    pub const CONSUMER_REJECT: u16 = 28;
    /// Duplicate local communication ID.
    pub const DUPLICATE_LOCAL_COMM_ID: u16 = 30;
    /// Unsupported CM class version.
    pub const INVALID_CLASS_VERSION: u16 = 31;
}

/// The RDMA_CM service ID of `port` in the TCP port space (`0x0000_0000_0106_xxxx`).
#[inline]
pub const fn rdma_cm_service_id(port: u16) -> u64 {
    RDMA_IP_PS_TCP | port as u64
}

/// The port of an RDMA_CM TCP-port-space service ID, or `None` for any other service ID.
#[inline]
pub const fn service_port(service_id: u64) -> Option<u16> {
    if service_id & RDMA_IP_PS_MASK == RDMA_IP_PS_TCP {
        Some(service_id as u16)
    } else {
        None
    }
}

/// The RoCE GID of an IPv4 address: the IPv4-mapped IPv6 address `::ffff:a.b.c.d`.
#[inline]
pub const fn ipv4_gid(ip: Ipv4Addr) -> [u8; 16] {
    let o = ip.octets();
    [
        0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xFF, 0xFF, o[0], o[1], o[2], o[3],
    ]
}

/// The IPv4 address of an IPv4-mapped GID, or `None` for any other GID.
#[inline]
pub fn gid_ipv4(gid: &[u8; 16]) -> Option<Ipv4Addr> {
    if gid[..10].iter().all(|&b| b == 0) && gid[10] == 0xFF && gid[11] == 0xFF {
        Some(Ipv4Addr::new(gid[12], gid[13], gid[14], gid[15]))
    } else {
        None
    }
}

/// The duration a 5-bit CM timeout exponent stands for, `4.096 µs × 2^exp`, in nanoseconds.
///
/// CM response timeouts, the local ACK timeout and the target ACK delay all use this encoding.
#[inline]
pub const fn timeout_nanos(exp: u8) -> u64 {
    4096u64 << (exp & 0x1F)
}

mod field {
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
}

use field::{Bits, Field};

/// Reads a big-endian unsigned field of up to 8 bytes. The caller has checked the length.
#[inline]
fn get_be(b: &[u8], f: Field) -> u64 {
    b[f].iter().fold(0u64, |acc, &x| (acc << 8) | x as u64)
}

/// Writes the low bytes of `v` as a big-endian field of up to 8 bytes.
#[inline]
fn put_be(b: &mut [u8], f: Field, v: u64) {
    let n = f.len();
    for (i, o) in b[f].iter_mut().enumerate() {
        *o = (v >> (8 * (n - 1 - i))) as u8;
    }
}

#[inline]
fn get_bits(b: &[u8], f: Bits) -> u8 {
    (b[f.byte] & f.mask) >> f.shift
}

#[inline]
fn put_bits(b: &mut [u8], f: Bits, v: u8) {
    b[f.byte] = (b[f.byte] & !f.mask) | ((v << f.shift) & f.mask);
}

#[inline]
fn get_array<const N: usize>(b: &[u8], f: Field) -> [u8; N] {
    let mut out = [0u8; N];
    out.copy_from_slice(&b[f]);
    out
}

/// Checks that `data` holds a whole CM message body.
#[inline]
fn check_data(data: &[u8]) -> Result<()> {
    if data.len() < MAD_DATA_LEN {
        Err(Error::Truncated)
    } else {
        Ok(())
    }
}

/// Zeroes the whole body so reserved fields go out as zero.
#[inline]
fn clear_data(data: &mut [u8]) -> &mut [u8] {
    let data = &mut data[..MAD_DATA_LEN];
    data.fill(0);
    data
}

/// A read/write view of a MAD common header (and the MAD data after it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MadHeader<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> MadHeader<T> {
    /// Wraps a buffer without checking its length.
    #[inline]
    pub const fn new_unchecked(buffer: T) -> MadHeader<T> {
        MadHeader { buffer }
    }

    /// Wraps a buffer after checking it holds at least a MAD header.
    #[inline]
    pub fn new_checked(buffer: T) -> Result<MadHeader<T>> {
        let h = Self::new_unchecked(buffer);
        h.check_len()?;
        Ok(h)
    }

    /// Checks that the buffer holds at least [`MAD_HEADER_LEN`] bytes.
    #[inline]
    pub fn check_len(&self) -> Result<()> {
        if self.buffer.as_ref().len() < MAD_HEADER_LEN {
            Err(Error::Truncated)
        } else {
            Ok(())
        }
    }

    /// Returns the underlying buffer.
    #[inline]
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// MAD base version (1).
    #[inline]
    pub fn base_version(&self) -> u8 {
        self.buffer.as_ref()[field::BASE_VERSION]
    }

    /// Management class.
    #[inline]
    pub fn mgmt_class(&self) -> u8 {
        self.buffer.as_ref()[field::MGMT_CLASS]
    }

    /// Version of the management class.
    #[inline]
    pub fn class_version(&self) -> u8 {
        self.buffer.as_ref()[field::CLASS_VERSION]
    }

    /// Method (with the response bit).
    #[inline]
    pub fn method(&self) -> u8 {
        self.buffer.as_ref()[field::METHOD]
    }

    /// Status.
    #[inline]
    pub fn status(&self) -> u16 {
        get_be(self.buffer.as_ref(), field::STATUS) as u16
    }

    /// Class-specific word.
    #[inline]
    pub fn class_specific(&self) -> u16 {
        get_be(self.buffer.as_ref(), field::CLASS_SPECIFIC) as u16
    }

    /// Transaction ID.
    #[inline]
    pub fn tid(&self) -> u64 {
        get_be(self.buffer.as_ref(), field::TID)
    }

    /// Attribute ID.
    #[inline]
    pub fn attr_id(&self) -> u16 {
        get_be(self.buffer.as_ref(), field::ATTR_ID) as u16
    }

    /// Attribute modifier.
    #[inline]
    pub fn attr_mod(&self) -> u32 {
        get_be(self.buffer.as_ref(), field::ATTR_MOD) as u32
    }

    /// The MAD data after the header (the whole rest of the buffer).
    #[inline]
    pub fn data(&self) -> &[u8] {
        &self.buffer.as_ref()[MAD_HEADER_LEN..]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> MadHeader<T> {
    /// Sets the base version.
    #[inline]
    pub fn set_base_version(&mut self, v: u8) {
        self.buffer.as_mut()[field::BASE_VERSION] = v;
    }

    /// Sets the management class.
    #[inline]
    pub fn set_mgmt_class(&mut self, v: u8) {
        self.buffer.as_mut()[field::MGMT_CLASS] = v;
    }

    /// Sets the class version.
    #[inline]
    pub fn set_class_version(&mut self, v: u8) {
        self.buffer.as_mut()[field::CLASS_VERSION] = v;
    }

    /// Sets the method.
    #[inline]
    pub fn set_method(&mut self, v: u8) {
        self.buffer.as_mut()[field::METHOD] = v;
    }

    /// Sets the status.
    #[inline]
    pub fn set_status(&mut self, v: u16) {
        put_be(self.buffer.as_mut(), field::STATUS, v as u64);
    }

    /// Sets the class-specific word.
    #[inline]
    pub fn set_class_specific(&mut self, v: u16) {
        put_be(self.buffer.as_mut(), field::CLASS_SPECIFIC, v as u64);
    }

    /// Sets the transaction ID.
    #[inline]
    pub fn set_tid(&mut self, v: u64) {
        put_be(self.buffer.as_mut(), field::TID, v);
    }

    /// Sets the attribute ID.
    #[inline]
    pub fn set_attr_id(&mut self, v: u16) {
        put_be(self.buffer.as_mut(), field::ATTR_ID, v as u64);
    }

    /// Zeroes the reserved word between the attribute ID and modifier.
    #[inline]
    pub fn clear_reserved(&mut self) {
        put_be(self.buffer.as_mut(), field::RESERVED, 0);
    }

    /// Sets the attribute modifier.
    #[inline]
    pub fn set_attr_mod(&mut self, v: u32) {
        put_be(self.buffer.as_mut(), field::ATTR_MOD, v as u64);
    }

    /// The MAD data after the header, writable.
    #[inline]
    pub fn data_mut(&mut self) -> &mut [u8] {
        &mut self.buffer.as_mut()[MAD_HEADER_LEN..]
    }
}

/// A parsed MAD common header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct MadHeaderRepr {
    /// Base version (1).
    pub base_version: u8,
    /// Management class ([`MGMT_CLASS_CM`] for CM).
    pub mgmt_class: u8,
    /// Class version ([`CM_CLASS_VERSION`] for CM).
    pub class_version: u8,
    /// Method ([`METHOD_SEND`] for CM).
    pub method: u8,
    /// Status (0 in CM messages).
    pub status: u16,
    /// Class-specific word (0 in CM messages).
    pub class_specific: u16,
    /// Transaction ID; a REQ's TID is echoed by nothing, each side picks its own.
    pub tid: u64,
    /// Attribute ID: which CM message follows.
    pub attr_id: u16,
    /// Attribute modifier (recent Linux CMs carry ECE bits here).
    pub attr_mod: u32,
}

impl MadHeaderRepr {
    /// The header of a CM `Send` with the given transaction ID and attribute modifier; the
    /// attribute ID is left 0 for [`CmMessage::emit`] to fill in.
    #[inline]
    pub const fn cm_send(tid: u64, attr_mod: u32) -> MadHeaderRepr {
        MadHeaderRepr {
            base_version: MAD_BASE_VERSION,
            mgmt_class: MGMT_CLASS_CM,
            class_version: CM_CLASS_VERSION,
            method: METHOD_SEND,
            status: 0,
            class_specific: 0,
            tid,
            attr_id: 0,
            attr_mod,
        }
    }

    /// Parses a MAD header; only the base version is checked, the class is the caller's.
    pub fn parse<T: AsRef<[u8]> + ?Sized>(h: &MadHeader<&T>) -> Result<MadHeaderRepr> {
        h.check_len()?;
        if h.base_version() != MAD_BASE_VERSION {
            return Err(Error::UnsupportedVersion);
        }
        Ok(MadHeaderRepr {
            base_version: h.base_version(),
            mgmt_class: h.mgmt_class(),
            class_version: h.class_version(),
            method: h.method(),
            status: h.status(),
            class_specific: h.class_specific(),
            tid: h.tid(),
            attr_id: h.attr_id(),
            attr_mod: h.attr_mod(),
        })
    }

    /// Bytes the header occupies.
    #[inline]
    pub const fn buffer_len(&self) -> usize {
        MAD_HEADER_LEN
    }

    /// Writes the header (the reserved word becomes zero).
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, h: &mut MadHeader<T>) {
        h.set_base_version(self.base_version);
        h.set_mgmt_class(self.mgmt_class);
        h.set_class_version(self.class_version);
        h.set_method(self.method);
        h.set_status(self.status);
        h.set_class_specific(self.class_specific);
        h.set_tid(self.tid);
        h.set_attr_id(self.attr_id);
        h.clear_reserved();
        h.set_attr_mod(self.attr_mod);
    }
}

/// The RDMA_CM IP addressing header at the start of REQ private data (IPv4 only).
///
/// Layout (36 bytes): version `0x00`; IP version in the upper nibble (`0x40`); source port
/// (big-endian); source and destination address as 16-byte fields with an IPv4 address in the
/// last 4 bytes. The destination port is not here: it is the low 16 bits of the service ID.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CmPrivateIp {
    /// The active side's port (RDMA_CM picks an ephemeral one).
    pub src_port: u16,
    /// The active side's IPv4 address.
    pub src: Ipv4Addr,
    /// The passive side's IPv4 address.
    pub dst: Ipv4Addr,
}

impl CmPrivateIp {
    /// Bytes of the header.
    pub const LEN: usize = 36;
    /// The only RDMA_CM header version.
    pub const CMA_VERSION: u8 = 0x00;
    /// The IP-version byte of IPv4 (version in the upper nibble).
    pub const IP_VERSION_4: u8 = 4 << 4;

    /// Parses the header from the start of REQ private data.
    ///
    /// A header version other than 0 or an IPv6 header is [`Error::UnsupportedVersion`]. The
    /// 12 bytes before each IPv4 address are not checked: Linux zeroes them, and some user-space
    /// variants put UD session fields there.
    pub fn parse(private_data: &[u8]) -> Result<CmPrivateIp> {
        use field::cma;
        if private_data.len() < Self::LEN {
            return Err(Error::Truncated);
        }
        if private_data[cma::VERSION] != Self::CMA_VERSION
            || private_data[cma::IP_VERSION] >> 4 != 4
        {
            return Err(Error::UnsupportedVersion);
        }
        let ip = |f: Field| Ipv4Addr::from(get_be(private_data, f) as u32);
        Ok(CmPrivateIp {
            src_port: get_be(private_data, cma::SRC_PORT) as u16,
            src: ip(cma::SRC_IPV4),
            dst: ip(cma::DST_IPV4),
        })
    }

    /// Bytes the header occupies.
    #[inline]
    pub const fn buffer_len(&self) -> usize {
        Self::LEN
    }

    /// Writes the 36-byte header (address padding zero, as Linux writes it).
    pub fn emit(&self, out: &mut [u8]) {
        use field::cma;
        let out = &mut out[..Self::LEN];
        out.fill(0);
        out[cma::VERSION] = Self::CMA_VERSION;
        out[cma::IP_VERSION] = Self::IP_VERSION_4;
        put_be(out, cma::SRC_PORT, self.src_port as u64);
        put_be(out, cma::SRC_IPV4, u32::from(self.src) as u64);
        put_be(out, cma::DST_IPV4, u32::from(self.dst) as u64);
    }

    /// A whole REQ private-data field holding this header followed by zeros.
    pub fn to_req_private_data(&self) -> [u8; REQ_PRIVATE_DATA_LEN] {
        let mut pd = [0u8; REQ_PRIVATE_DATA_LEN];
        self.emit(&mut pd);
        pd
    }
}

/// ConnectRequest: the active side's offer (its QP, starting PSN and path).
///
/// The alternate path and the remote EECN are emitted as zero and ignored on parse (RoCE has
/// no alternate path; RC has no EE context).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CmReq {
    /// The sender's communication ID for this connection.
    pub local_comm_id: u32,
    /// ECE vendor ID (24 bits, in the formerly reserved word at offset 4; 0 without ECE).
    pub vendor_id: u32,
    /// Service ID (RDMA_CM: [`rdma_cm_service_id`] of the destination port).
    pub service_id: u64,
    /// The sender's CA GUID.
    pub local_ca_guid: u64,
    /// The sender's Q_Key (UD/RD only; 0 for RC).
    pub local_qkey: u32,
    /// The sender's QPN (24 bits).
    pub local_qpn: u32,
    /// RDMA READ/atomic requests the sender accepts in flight as a responder.
    pub responder_resources: u8,
    /// The sender's EE context (24 bits; 0 for RC).
    pub local_eecn: u32,
    /// RDMA READ/atomic requests the sender will issue in flight.
    pub initiator_depth: u8,
    /// How long the sender waits for the REP (5-bit exponent, [`timeout_nanos`]).
    pub remote_cm_response_timeout: u8,
    /// Transport service type (2 bits; [`TRANSPORT_RC`]).
    pub transport_type: u8,
    /// End-to-end flow control.
    pub flow_control: bool,
    /// The first PSN the sender will send (24 bits): the passive side's expected PSN.
    pub starting_psn: u32,
    /// How long the passive side may take to answer (5-bit exponent).
    pub local_cm_response_timeout: u8,
    /// Transport retries on ACK timeout (3 bits).
    pub retry_count: u8,
    /// Partition key.
    pub pkey: u16,
    /// Path MTU code (4 bits; 1 = 256 B … 5 = 4096 B).
    pub path_mtu: u8,
    /// RD only: an RDC exists.
    pub rdc_exists: bool,
    /// RNR NAK retries (3 bits; 7 = infinite).
    pub rnr_retry_count: u8,
    /// CM retries of this REQ (4 bits).
    pub max_cm_retries: u8,
    /// The sender uses an SRQ.
    pub srq: bool,
    /// Primary path: local LID (0xFFFF on RoCE).
    pub primary_local_lid: u16,
    /// Primary path: remote LID (0xFFFF on RoCE).
    pub primary_remote_lid: u16,
    /// Primary path: local GID (on RoCEv2, [`ipv4_gid`] of the source address).
    pub primary_local_gid: [u8; 16],
    /// Primary path: remote GID.
    pub primary_remote_gid: [u8; 16],
    /// Primary path: flow label (20 bits).
    pub primary_flow_label: u32,
    /// Primary path: packet rate (6 bits).
    pub primary_packet_rate: u8,
    /// Primary path: traffic class.
    pub primary_traffic_class: u8,
    /// Primary path: hop limit.
    pub primary_hop_limit: u8,
    /// Primary path: service level (4 bits).
    pub primary_sl: u8,
    /// Primary path: the remote port is in the local subnet.
    pub primary_subnet_local: bool,
    /// Primary path: local ACK timeout (5-bit exponent).
    pub primary_local_ack_timeout: u8,
    /// Private data (RDMA_CM: starts with [`CmPrivateIp`]).
    pub private_data: [u8; REQ_PRIVATE_DATA_LEN],
}

impl Default for CmReq {
    fn default() -> CmReq {
        CmReq {
            local_comm_id: 0,
            vendor_id: 0,
            service_id: 0,
            local_ca_guid: 0,
            local_qkey: 0,
            local_qpn: 0,
            responder_resources: 0,
            local_eecn: 0,
            initiator_depth: 0,
            remote_cm_response_timeout: 0,
            transport_type: TRANSPORT_RC,
            flow_control: false,
            starting_psn: 0,
            local_cm_response_timeout: 0,
            retry_count: 0,
            pkey: 0,
            path_mtu: 0,
            rdc_exists: false,
            rnr_retry_count: 0,
            max_cm_retries: 0,
            srq: false,
            primary_local_lid: 0,
            primary_remote_lid: 0,
            primary_local_gid: [0; 16],
            primary_remote_gid: [0; 16],
            primary_flow_label: 0,
            primary_packet_rate: 0,
            primary_traffic_class: 0,
            primary_hop_limit: 0,
            primary_sl: 0,
            primary_subnet_local: false,
            primary_local_ack_timeout: 0,
            private_data: [0; REQ_PRIVATE_DATA_LEN],
        }
    }
}

impl CmReq {
    /// The REQ our RDMA_CM initiators send for an RC connection over RoCEv2: `local` is our
    /// RoCEv2 address (its port goes into the RDMA_CM private-data header), `remote` the
    /// passive side's, `port` the rdma_cm service. `responder_resources` is how many READs or
    /// atomics we answer in flight, `initiator_depth` how many we issue; path MTU 4096, the
    /// retry counts at their maximum.
    #[allow(clippy::too_many_arguments)]
    pub fn rc_connect(
        local_comm_id: u32,
        port: u16,
        ca_guid: u64,
        local_qpn: u32,
        starting_psn: u32,
        local: std::net::SocketAddrV4,
        remote: Ipv4Addr,
        responder_resources: u8,
        initiator_depth: u8,
    ) -> CmReq {
        let private = CmPrivateIp {
            src_port: local.port(),
            src: *local.ip(),
            dst: remote,
        };
        CmReq {
            local_comm_id,
            service_id: rdma_cm_service_id(port),
            local_ca_guid: ca_guid,
            local_qpn,
            responder_resources,
            initiator_depth,
            remote_cm_response_timeout: 20,
            transport_type: TRANSPORT_RC,
            starting_psn,
            local_cm_response_timeout: 20,
            retry_count: 7,
            pkey: 0xffff,
            path_mtu: 5, // 4096
            rnr_retry_count: 7,
            max_cm_retries: 15,
            primary_local_lid: 0xffff,
            primary_remote_lid: 0xffff,
            primary_local_gid: ipv4_gid(*local.ip()),
            primary_remote_gid: ipv4_gid(remote),
            primary_hop_limit: 64,
            primary_local_ack_timeout: 14,
            private_data: private.to_req_private_data(),
            ..CmReq::default()
        }
    }
}

impl CmReq {
    /// Parses a REQ from the MAD data (the bytes after the MAD header).
    pub fn parse(data: &[u8]) -> Result<CmReq> {
        use field::req as f;
        check_data(data)?;
        let d = data;
        let flow = get_be(d, f::PRIMARY_FLOW_LABEL_RATE) as u32;
        Ok(CmReq {
            local_comm_id: get_be(d, f::LOCAL_COMM_ID) as u32,
            vendor_id: get_be(d, f::VENDOR_ID) as u32,
            service_id: get_be(d, f::SERVICE_ID),
            local_ca_guid: get_be(d, f::LOCAL_CA_GUID),
            local_qkey: get_be(d, f::LOCAL_QKEY) as u32,
            local_qpn: get_be(d, f::LOCAL_QPN) as u32,
            responder_resources: d[f::RESPONDER_RESOURCES],
            local_eecn: get_be(d, f::LOCAL_EECN) as u32,
            initiator_depth: d[f::INITIATOR_DEPTH],
            remote_cm_response_timeout: get_bits(d, f::REMOTE_CM_RESPONSE_TIMEOUT),
            transport_type: get_bits(d, f::TRANSPORT_TYPE),
            flow_control: get_bits(d, f::FLOW_CONTROL) != 0,
            starting_psn: get_be(d, f::STARTING_PSN) as u32,
            local_cm_response_timeout: get_bits(d, f::LOCAL_CM_RESPONSE_TIMEOUT),
            retry_count: get_bits(d, f::RETRY_COUNT),
            pkey: get_be(d, f::PKEY) as u16,
            path_mtu: get_bits(d, f::PATH_MTU),
            rdc_exists: get_bits(d, f::RDC_EXISTS) != 0,
            rnr_retry_count: get_bits(d, f::RNR_RETRY_COUNT),
            max_cm_retries: get_bits(d, f::MAX_CM_RETRIES),
            srq: get_bits(d, f::SRQ) != 0,
            primary_local_lid: get_be(d, f::PRIMARY_LOCAL_LID) as u16,
            primary_remote_lid: get_be(d, f::PRIMARY_REMOTE_LID) as u16,
            primary_local_gid: get_array(d, f::PRIMARY_LOCAL_GID),
            primary_remote_gid: get_array(d, f::PRIMARY_REMOTE_GID),
            primary_flow_label: flow >> 12,
            primary_packet_rate: (flow & 0x3F) as u8,
            primary_traffic_class: d[f::PRIMARY_TRAFFIC_CLASS],
            primary_hop_limit: d[f::PRIMARY_HOP_LIMIT],
            primary_sl: get_bits(d, f::PRIMARY_SL),
            primary_subnet_local: get_bits(d, f::PRIMARY_SUBNET_LOCAL) != 0,
            primary_local_ack_timeout: get_bits(d, f::PRIMARY_LOCAL_ACK_TIMEOUT),
            private_data: get_array(d, f::PRIVATE_DATA),
        })
    }

    /// Bytes the message occupies (the whole MAD data).
    #[inline]
    pub const fn buffer_len(&self) -> usize {
        MAD_DATA_LEN
    }

    /// Writes the REQ into the MAD data.
    pub fn emit(&self, data: &mut [u8]) {
        use field::req as f;
        let d = clear_data(data);
        put_be(d, f::LOCAL_COMM_ID, self.local_comm_id as u64);
        put_be(d, f::VENDOR_ID, self.vendor_id as u64);
        put_be(d, f::SERVICE_ID, self.service_id);
        put_be(d, f::LOCAL_CA_GUID, self.local_ca_guid);
        put_be(d, f::LOCAL_QKEY, self.local_qkey as u64);
        put_be(d, f::LOCAL_QPN, self.local_qpn as u64);
        d[f::RESPONDER_RESOURCES] = self.responder_resources;
        put_be(d, f::LOCAL_EECN, self.local_eecn as u64);
        d[f::INITIATOR_DEPTH] = self.initiator_depth;
        put_be(d, f::REMOTE_EECN, 0);
        put_bits(
            d,
            f::REMOTE_CM_RESPONSE_TIMEOUT,
            self.remote_cm_response_timeout,
        );
        put_bits(d, f::TRANSPORT_TYPE, self.transport_type);
        put_bits(d, f::FLOW_CONTROL, self.flow_control as u8);
        put_be(d, f::STARTING_PSN, self.starting_psn as u64);
        put_bits(
            d,
            f::LOCAL_CM_RESPONSE_TIMEOUT,
            self.local_cm_response_timeout,
        );
        put_bits(d, f::RETRY_COUNT, self.retry_count);
        put_be(d, f::PKEY, self.pkey as u64);
        put_bits(d, f::PATH_MTU, self.path_mtu);
        put_bits(d, f::RDC_EXISTS, self.rdc_exists as u8);
        put_bits(d, f::RNR_RETRY_COUNT, self.rnr_retry_count);
        put_bits(d, f::MAX_CM_RETRIES, self.max_cm_retries);
        put_bits(d, f::SRQ, self.srq as u8);
        put_be(d, f::PRIMARY_LOCAL_LID, self.primary_local_lid as u64);
        put_be(d, f::PRIMARY_REMOTE_LID, self.primary_remote_lid as u64);
        d[f::PRIMARY_LOCAL_GID].copy_from_slice(&self.primary_local_gid);
        d[f::PRIMARY_REMOTE_GID].copy_from_slice(&self.primary_remote_gid);
        let flow =
            ((self.primary_flow_label & 0xF_FFFF) << 12) | (self.primary_packet_rate & 0x3F) as u32;
        put_be(d, f::PRIMARY_FLOW_LABEL_RATE, flow as u64);
        d[f::PRIMARY_TRAFFIC_CLASS] = self.primary_traffic_class;
        d[f::PRIMARY_HOP_LIMIT] = self.primary_hop_limit;
        put_bits(d, f::PRIMARY_SL, self.primary_sl);
        put_bits(d, f::PRIMARY_SUBNET_LOCAL, self.primary_subnet_local as u8);
        put_bits(
            d,
            f::PRIMARY_LOCAL_ACK_TIMEOUT,
            self.primary_local_ack_timeout,
        );
        d[f::ALTERNATE_PATH].fill(0);
        d[f::PRIVATE_DATA].copy_from_slice(&self.private_data);
    }

    /// The RDMA_CM IP header at the start of the private data.
    #[inline]
    pub fn private_ip(&self) -> Result<CmPrivateIp> {
        CmPrivateIp::parse(&self.private_data)
    }
}

/// ConnectReply: the passive side's acceptance (its QP and starting PSN).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CmRep {
    /// The sender's (passive side's) communication ID.
    pub local_comm_id: u32,
    /// The REQ's local communication ID.
    pub remote_comm_id: u32,
    /// The sender's Q_Key (UD/RD only).
    pub local_qkey: u32,
    /// The sender's QPN (24 bits): the destination QP of the active side's requests.
    pub local_qpn: u32,
    /// The sender's EE context (24 bits; 0 for RC).
    pub local_eecn: u32,
    /// The first PSN the *sender* will send (24 bits); not the PSN it expects.
    pub starting_psn: u32,
    /// ECE vendor ID (24 bits, split over bytes 15, 19 and 23; 0 without ECE).
    pub vendor_id: u32,
    /// RDMA READ/atomic requests the sender accepts in flight as a responder.
    pub responder_resources: u8,
    /// RDMA READ/atomic requests the sender will issue in flight.
    pub initiator_depth: u8,
    /// Target ACK delay (5-bit exponent).
    pub target_ack_delay: u8,
    /// Failover accepted (2 bits; 0 = accepted).
    pub failover_accepted: u8,
    /// End-to-end flow control.
    pub end_to_end_flow_control: bool,
    /// RNR NAK retries the sender wants (3 bits).
    pub rnr_retry_count: u8,
    /// The sender uses an SRQ.
    pub srq: bool,
    /// The sender's CA GUID.
    pub local_ca_guid: u64,
    /// Private data.
    pub private_data: [u8; REP_PRIVATE_DATA_LEN],
}

impl Default for CmRep {
    fn default() -> CmRep {
        CmRep {
            local_comm_id: 0,
            remote_comm_id: 0,
            local_qkey: 0,
            local_qpn: 0,
            local_eecn: 0,
            starting_psn: 0,
            vendor_id: 0,
            responder_resources: 0,
            initiator_depth: 0,
            target_ack_delay: 0,
            failover_accepted: 0,
            end_to_end_flow_control: false,
            rnr_retry_count: 0,
            srq: false,
            local_ca_guid: 0,
            private_data: [0; REP_PRIVATE_DATA_LEN],
        }
    }
}

impl CmRep {
    /// Parses a REP from the MAD data.
    pub fn parse(data: &[u8]) -> Result<CmRep> {
        use field::rep as f;
        check_data(data)?;
        let d = data;
        Ok(CmRep {
            local_comm_id: get_be(d, f::LOCAL_COMM_ID) as u32,
            remote_comm_id: get_be(d, f::REMOTE_COMM_ID) as u32,
            local_qkey: get_be(d, f::LOCAL_QKEY) as u32,
            local_qpn: get_be(d, f::LOCAL_QPN) as u32,
            local_eecn: get_be(d, f::LOCAL_EECN) as u32,
            starting_psn: get_be(d, f::STARTING_PSN) as u32,
            vendor_id: (d[f::VENDOR_ID_H] as u32) << 16
                | (d[f::VENDOR_ID_M] as u32) << 8
                | d[f::VENDOR_ID_L] as u32,
            responder_resources: d[f::RESPONDER_RESOURCES],
            initiator_depth: d[f::INITIATOR_DEPTH],
            target_ack_delay: get_bits(d, f::TARGET_ACK_DELAY),
            failover_accepted: get_bits(d, f::FAILOVER_ACCEPTED),
            end_to_end_flow_control: get_bits(d, f::END_TO_END_FLOW_CONTROL) != 0,
            rnr_retry_count: get_bits(d, f::RNR_RETRY_COUNT),
            srq: get_bits(d, f::SRQ) != 0,
            local_ca_guid: get_be(d, f::LOCAL_CA_GUID),
            private_data: get_array(d, f::PRIVATE_DATA),
        })
    }

    /// Bytes the message occupies (the whole MAD data).
    #[inline]
    pub const fn buffer_len(&self) -> usize {
        MAD_DATA_LEN
    }

    /// Writes the REP into the MAD data.
    pub fn emit(&self, data: &mut [u8]) {
        use field::rep as f;
        let d = clear_data(data);
        put_be(d, f::LOCAL_COMM_ID, self.local_comm_id as u64);
        put_be(d, f::REMOTE_COMM_ID, self.remote_comm_id as u64);
        put_be(d, f::LOCAL_QKEY, self.local_qkey as u64);
        put_be(d, f::LOCAL_QPN, self.local_qpn as u64);
        d[f::VENDOR_ID_H] = (self.vendor_id >> 16) as u8;
        put_be(d, f::LOCAL_EECN, self.local_eecn as u64);
        d[f::VENDOR_ID_M] = (self.vendor_id >> 8) as u8;
        put_be(d, f::STARTING_PSN, self.starting_psn as u64);
        d[f::VENDOR_ID_L] = self.vendor_id as u8;
        d[f::RESPONDER_RESOURCES] = self.responder_resources;
        d[f::INITIATOR_DEPTH] = self.initiator_depth;
        put_bits(d, f::TARGET_ACK_DELAY, self.target_ack_delay);
        put_bits(d, f::FAILOVER_ACCEPTED, self.failover_accepted);
        put_bits(
            d,
            f::END_TO_END_FLOW_CONTROL,
            self.end_to_end_flow_control as u8,
        );
        put_bits(d, f::RNR_RETRY_COUNT, self.rnr_retry_count);
        put_bits(d, f::SRQ, self.srq as u8);
        put_be(d, f::LOCAL_CA_GUID, self.local_ca_guid);
        d[f::PRIVATE_DATA].copy_from_slice(&self.private_data);
    }
}

/// ReadyToUse: the active side confirms the REP; the connection is established.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CmRtu {
    /// The sender's communication ID.
    pub local_comm_id: u32,
    /// The peer's communication ID.
    pub remote_comm_id: u32,
    /// Private data.
    pub private_data: [u8; RTU_PRIVATE_DATA_LEN],
}

impl Default for CmRtu {
    fn default() -> CmRtu {
        CmRtu {
            local_comm_id: 0,
            remote_comm_id: 0,
            private_data: [0; RTU_PRIVATE_DATA_LEN],
        }
    }
}

impl CmRtu {
    /// Parses an RTU from the MAD data.
    pub fn parse(data: &[u8]) -> Result<CmRtu> {
        use field::rtu as f;
        check_data(data)?;
        Ok(CmRtu {
            local_comm_id: get_be(data, f::LOCAL_COMM_ID) as u32,
            remote_comm_id: get_be(data, f::REMOTE_COMM_ID) as u32,
            private_data: get_array(data, f::PRIVATE_DATA),
        })
    }

    /// Bytes the message occupies (the whole MAD data).
    #[inline]
    pub const fn buffer_len(&self) -> usize {
        MAD_DATA_LEN
    }

    /// Writes the RTU into the MAD data.
    pub fn emit(&self, data: &mut [u8]) {
        use field::rtu as f;
        let d = clear_data(data);
        put_be(d, f::LOCAL_COMM_ID, self.local_comm_id as u64);
        put_be(d, f::REMOTE_COMM_ID, self.remote_comm_id as u64);
        d[f::PRIVATE_DATA].copy_from_slice(&self.private_data);
    }
}

/// ConnectReject: either side refuses a REQ or REP.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CmRej {
    /// The sender's communication ID (0 if it never allocated one).
    pub local_comm_id: u32,
    /// The peer's communication ID.
    pub remote_comm_id: u32,
    /// Which message is rejected (2 bits; [`MSG_REQ`], [`MSG_REP`], [`MSG_OTHER`]).
    pub msg_rejected: u8,
    /// Meaningful bytes of `ari` (7 bits).
    pub reject_info_length: u8,
    /// Why ([`rej_reason`]).
    pub reason: u16,
    /// Additional Rejection Information.
    pub ari: [u8; REJ_ARI_LEN],
    /// Private data.
    pub private_data: [u8; REJ_PRIVATE_DATA_LEN],
}

impl Default for CmRej {
    fn default() -> CmRej {
        CmRej {
            local_comm_id: 0,
            remote_comm_id: 0,
            msg_rejected: MSG_REQ,
            reject_info_length: 0,
            reason: 0,
            ari: [0; REJ_ARI_LEN],
            private_data: [0; REJ_PRIVATE_DATA_LEN],
        }
    }
}

impl CmRej {
    /// Parses a REJ from the MAD data.
    pub fn parse(data: &[u8]) -> Result<CmRej> {
        use field::rej as f;
        check_data(data)?;
        Ok(CmRej {
            local_comm_id: get_be(data, f::LOCAL_COMM_ID) as u32,
            remote_comm_id: get_be(data, f::REMOTE_COMM_ID) as u32,
            msg_rejected: get_bits(data, f::MSG_REJECTED),
            reject_info_length: get_bits(data, f::REJECT_INFO_LENGTH),
            reason: get_be(data, f::REASON) as u16,
            ari: get_array(data, f::ARI),
            private_data: get_array(data, f::PRIVATE_DATA),
        })
    }

    /// Bytes the message occupies (the whole MAD data).
    #[inline]
    pub const fn buffer_len(&self) -> usize {
        MAD_DATA_LEN
    }

    /// Writes the REJ into the MAD data.
    pub fn emit(&self, data: &mut [u8]) {
        use field::rej as f;
        let d = clear_data(data);
        put_be(d, f::LOCAL_COMM_ID, self.local_comm_id as u64);
        put_be(d, f::REMOTE_COMM_ID, self.remote_comm_id as u64);
        put_bits(d, f::MSG_REJECTED, self.msg_rejected);
        put_bits(d, f::REJECT_INFO_LENGTH, self.reject_info_length);
        put_be(d, f::REASON, self.reason as u64);
        d[f::ARI].copy_from_slice(&self.ari);
        d[f::PRIVATE_DATA].copy_from_slice(&self.private_data);
    }
}

/// DisconnectRequest.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CmDreq {
    /// The sender's communication ID.
    pub local_comm_id: u32,
    /// The peer's communication ID.
    pub remote_comm_id: u32,
    /// The peer's QPN (or EECN) (24 bits).
    pub remote_qpn_eecn: u32,
    /// Private data.
    pub private_data: [u8; DREQ_PRIVATE_DATA_LEN],
}

impl Default for CmDreq {
    fn default() -> CmDreq {
        CmDreq {
            local_comm_id: 0,
            remote_comm_id: 0,
            remote_qpn_eecn: 0,
            private_data: [0; DREQ_PRIVATE_DATA_LEN],
        }
    }
}

impl CmDreq {
    /// The DREP answering this DREQ (the communication IDs swapped).
    pub fn answer(&self) -> CmDrep {
        CmDrep {
            local_comm_id: self.remote_comm_id,
            remote_comm_id: self.local_comm_id,
            ..CmDrep::default()
        }
    }

    /// Parses a DREQ from the MAD data.
    pub fn parse(data: &[u8]) -> Result<CmDreq> {
        use field::dreq as f;
        check_data(data)?;
        Ok(CmDreq {
            local_comm_id: get_be(data, f::LOCAL_COMM_ID) as u32,
            remote_comm_id: get_be(data, f::REMOTE_COMM_ID) as u32,
            remote_qpn_eecn: get_be(data, f::REMOTE_QPN_EECN) as u32,
            private_data: get_array(data, f::PRIVATE_DATA),
        })
    }

    /// Bytes the message occupies (the whole MAD data).
    #[inline]
    pub const fn buffer_len(&self) -> usize {
        MAD_DATA_LEN
    }

    /// Writes the DREQ into the MAD data.
    pub fn emit(&self, data: &mut [u8]) {
        use field::dreq as f;
        let d = clear_data(data);
        put_be(d, f::LOCAL_COMM_ID, self.local_comm_id as u64);
        put_be(d, f::REMOTE_COMM_ID, self.remote_comm_id as u64);
        put_be(d, f::REMOTE_QPN_EECN, self.remote_qpn_eecn as u64);
        d[f::PRIVATE_DATA].copy_from_slice(&self.private_data);
    }
}

/// DisconnectReply.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CmDrep {
    /// The sender's communication ID.
    pub local_comm_id: u32,
    /// The peer's communication ID.
    pub remote_comm_id: u32,
    /// Private data.
    pub private_data: [u8; DREP_PRIVATE_DATA_LEN],
}

impl Default for CmDrep {
    fn default() -> CmDrep {
        CmDrep {
            local_comm_id: 0,
            remote_comm_id: 0,
            private_data: [0; DREP_PRIVATE_DATA_LEN],
        }
    }
}

impl CmDrep {
    /// Parses a DREP from the MAD data.
    pub fn parse(data: &[u8]) -> Result<CmDrep> {
        use field::rtu as f;
        check_data(data)?;
        Ok(CmDrep {
            local_comm_id: get_be(data, f::LOCAL_COMM_ID) as u32,
            remote_comm_id: get_be(data, f::REMOTE_COMM_ID) as u32,
            private_data: get_array(data, f::PRIVATE_DATA),
        })
    }

    /// Bytes the message occupies (the whole MAD data).
    #[inline]
    pub const fn buffer_len(&self) -> usize {
        MAD_DATA_LEN
    }

    /// Writes the DREP into the MAD data (same layout as an RTU).
    pub fn emit(&self, data: &mut [u8]) {
        use field::rtu as f;
        let d = clear_data(data);
        put_be(d, f::LOCAL_COMM_ID, self.local_comm_id as u64);
        put_be(d, f::REMOTE_COMM_ID, self.remote_comm_id as u64);
        d[f::PRIVATE_DATA].copy_from_slice(&self.private_data);
    }
}

/// MessageReceiptAcknowledgement: "I got your message, give me `service_timeout` longer".
///
/// Private data is ignored on parse and zero on emit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct CmMra {
    /// The sender's communication ID.
    pub local_comm_id: u32,
    /// The peer's communication ID.
    pub remote_comm_id: u32,
    /// Which message is acknowledged (2 bits; [`MSG_REQ`], [`MSG_REP`], [`MSG_OTHER`]).
    pub msg_mraed: u8,
    /// Extra time the sender needs (5-bit exponent).
    pub service_timeout: u8,
}

impl CmMra {
    /// Parses an MRA from the MAD data.
    pub fn parse(data: &[u8]) -> Result<CmMra> {
        use field::mra as f;
        check_data(data)?;
        Ok(CmMra {
            local_comm_id: get_be(data, f::LOCAL_COMM_ID) as u32,
            remote_comm_id: get_be(data, f::REMOTE_COMM_ID) as u32,
            msg_mraed: get_bits(data, f::MSG_MRAED),
            service_timeout: get_bits(data, f::SERVICE_TIMEOUT),
        })
    }

    /// Bytes the message occupies (the whole MAD data).
    #[inline]
    pub const fn buffer_len(&self) -> usize {
        MAD_DATA_LEN
    }

    /// Writes the MRA into the MAD data.
    pub fn emit(&self, data: &mut [u8]) {
        use field::mra as f;
        let d = clear_data(data);
        put_be(d, f::LOCAL_COMM_ID, self.local_comm_id as u64);
        put_be(d, f::REMOTE_COMM_ID, self.remote_comm_id as u64);
        put_bits(d, f::MSG_MRAED, self.msg_mraed);
        put_bits(d, f::SERVICE_TIMEOUT, self.service_timeout);
    }
}

/// One CM message, selected by the MAD attribute ID.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CmMessage {
    /// ConnectRequest.
    Req(CmReq),
    /// ConnectReply.
    Rep(CmRep),
    /// ReadyToUse.
    Rtu(CmRtu),
    /// ConnectReject.
    Rej(CmRej),
    /// DisconnectRequest.
    Dreq(CmDreq),
    /// DisconnectReply.
    Drep(CmDrep),
    /// MessageReceiptAcknowledgement.
    Mra(CmMra),
}

impl CmMessage {
    /// The MAD attribute ID of this message.
    #[inline]
    pub const fn attr_id(&self) -> u16 {
        match self {
            CmMessage::Req(_) => ATTR_REQ,
            CmMessage::Rep(_) => ATTR_REP,
            CmMessage::Rtu(_) => ATTR_RTU,
            CmMessage::Rej(_) => ATTR_REJ,
            CmMessage::Dreq(_) => ATTR_DREQ,
            CmMessage::Drep(_) => ATTR_DREP,
            CmMessage::Mra(_) => ATTR_MRA,
        }
    }

    /// The sender's communication ID, which every CM message starts with.
    #[inline]
    pub const fn local_comm_id(&self) -> u32 {
        match self {
            CmMessage::Req(m) => m.local_comm_id,
            CmMessage::Rep(m) => m.local_comm_id,
            CmMessage::Rtu(m) => m.local_comm_id,
            CmMessage::Rej(m) => m.local_comm_id,
            CmMessage::Dreq(m) => m.local_comm_id,
            CmMessage::Drep(m) => m.local_comm_id,
            CmMessage::Mra(m) => m.local_comm_id,
        }
    }

    /// Parses a whole CM MAD (at least [`MAD_LEN`] bytes; anything after them is ignored).
    ///
    /// Errors: shorter than a MAD → [`Error::Truncated`]; base version ≠ 1 or class version ≠ 2
    /// → [`Error::UnsupportedVersion`]; a class other than CM → [`Error::Malformed`]; a method
    /// other than `Send`, or an attribute this module does not model (SIDR, LAP, APR,
    /// ClassPortInfo, …) → [`Error::UnknownOpcode`].
    pub fn parse(mad: &[u8]) -> Result<(MadHeaderRepr, CmMessage)> {
        if mad.len() < MAD_LEN {
            return Err(Error::Truncated);
        }
        let view = MadHeader::new_checked(&mad[..MAD_LEN])?;
        let hdr = MadHeaderRepr::parse(&view)?;
        if hdr.mgmt_class != MGMT_CLASS_CM {
            return Err(Error::Malformed);
        }
        if hdr.class_version != CM_CLASS_VERSION {
            return Err(Error::UnsupportedVersion);
        }
        if hdr.method != METHOD_SEND {
            return Err(Error::UnknownOpcode);
        }
        let data = view.data();
        let msg = match hdr.attr_id {
            ATTR_REQ => CmMessage::Req(CmReq::parse(data)?),
            ATTR_REP => CmMessage::Rep(CmRep::parse(data)?),
            ATTR_RTU => CmMessage::Rtu(CmRtu::parse(data)?),
            ATTR_REJ => CmMessage::Rej(CmRej::parse(data)?),
            ATTR_DREQ => CmMessage::Dreq(CmDreq::parse(data)?),
            ATTR_DREP => CmMessage::Drep(CmDrep::parse(data)?),
            ATTR_MRA => CmMessage::Mra(CmMra::parse(data)?),
            _ => return Err(Error::UnknownOpcode),
        };
        Ok((hdr, msg))
    }

    /// Bytes the message occupies (a whole MAD).
    #[inline]
    pub const fn buffer_len(&self) -> usize {
        MAD_LEN
    }

    /// Writes `hdr` (with its attribute ID replaced by this message's) and the message body.
    pub fn emit(&self, hdr: &MadHeaderRepr, out: &mut [u8; MAD_LEN]) {
        let hdr = MadHeaderRepr {
            attr_id: self.attr_id(),
            ..*hdr
        };
        let mut view = MadHeader::new_unchecked(&mut out[..]);
        hdr.emit(&mut view);
        let data = view.data_mut();
        match self {
            CmMessage::Req(m) => m.emit(data),
            CmMessage::Rep(m) => m.emit(data),
            CmMessage::Rtu(m) => m.emit(data),
            CmMessage::Rej(m) => m.emit(data),
            CmMessage::Dreq(m) => m.emit(data),
            CmMessage::Drep(m) => m.emit(data),
            CmMessage::Mra(m) => m.emit(data),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const P: u16 = 1337;
    const LOCAL_IP: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 101);
    const REMOTE_IP: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 51);

    /// The REQ the reference's `init_rdma_connection.py` sends (dta-reference.md §5.2).
    fn reference_req() -> (MadHeaderRepr, CmReq) {
        let hdr = MadHeaderRepr::cm_send(0x0000_0006_7C31_3D63, 0x3000_0000);
        let req = CmReq {
            local_comm_id: P as u32,
            vendor_id: 0x15B3,
            service_id: rdma_cm_service_id(P),
            local_ca_guid: 0xB8CE_F603_00D2_1326,
            local_qkey: 0,
            local_qpn: P as u32,
            responder_resources: 0,
            local_eecn: 0,
            initiator_depth: 3,
            remote_cm_response_timeout: 22,
            transport_type: TRANSPORT_RC,
            flow_control: false,
            starting_psn: 0xE6FB20,
            local_cm_response_timeout: 22,
            retry_count: 3,
            pkey: 0xFFFF,
            path_mtu: 3,
            rdc_exists: false,
            rnr_retry_count: 0,
            max_cm_retries: 15,
            srq: false,
            primary_local_lid: 0xFFFF,
            primary_remote_lid: 0xFFFF,
            primary_local_gid: ipv4_gid(LOCAL_IP),
            primary_remote_gid: ipv4_gid(REMOTE_IP),
            primary_flow_label: 0x943E0,
            primary_packet_rate: 7,
            primary_traffic_class: 0,
            primary_hop_limit: 64,
            primary_sl: 0,
            primary_subnet_local: false,
            primary_local_ack_timeout: 19,
            private_data: CmPrivateIp {
                src_port: 0xD079,
                src: LOCAL_IP,
                dst: REMOTE_IP,
            }
            .to_req_private_data(),
        };
        (hdr, req)
    }

    #[test]
    fn golden_reference_req() {
        let (hdr, req) = reference_req();
        let mut mad = [0xAAu8; MAD_LEN];
        CmMessage::Req(req).emit(&hdr, &mut mad);

        // MAD header.
        assert_eq!(
            mad[..24],
            [
                0x01, 0x07, 0x02, 0x03, 0, 0, 0, 0, // versions, class, method, status, cs
                0x00, 0x00, 0x00, 0x06, 0x7C, 0x31, 0x3D, 0x63, // TID
                0x00, 0x10, 0, 0, // ConnectRequest, reserved
                0x30, 0x00, 0x00, 0x00, // attribute modifier
            ]
        );
        let d = &mad[MAD_HEADER_LEN..];
        let at = |off: usize, len: usize| &d[off..off + len];
        // Every row of the §5.2 table, at its REQ offset.
        assert_eq!(at(0, 4), (P as u32).to_be_bytes());
        assert_eq!(at(4, 4), [0x00, 0x00, 0x15, 0xB3]);
        assert_eq!(at(8, 8), 0x0000_0000_0106_0539u64.to_be_bytes());
        assert_eq!(at(16, 8), 0xB8CE_F603_00D2_1326u64.to_be_bytes());
        assert_eq!(at(24, 4), [0; 4]);
        assert_eq!(at(28, 4), [0; 4]);
        assert_eq!(at(32, 4), [0x00, 0x05, 0x39, 0x00]); // QPN 1337, responder resources 0
        assert_eq!(at(36, 4), [0, 0, 0, 3]); // EECN 0, initiator depth 3
        assert_eq!(at(40, 4), [0, 0, 0, 22 << 3]); // remote EECN, timeout 22, RC, no E2E
        assert_eq!(at(44, 4), [0xE6, 0xFB, 0x20, (22 << 3) | 3]);
        assert_eq!(at(48, 4), [0xFF, 0xFF, 3 << 4, 15 << 4]); // P_Key, MTU/RDC/RNR, retries
        assert_eq!(at(52, 4), [0xFF; 4]);
        assert_eq!(
            at(56, 16),
            [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xFF, 0xFF, 10, 0, 0, 101]
        );
        assert_eq!(
            at(72, 16),
            [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xFF, 0xFF, 10, 0, 0, 51]
        );
        assert_eq!(at(88, 4), ((0x943E0u32 << 12) | 7).to_be_bytes());
        assert_eq!(at(92, 4), [0, 64, 0, 19 << 3]);
        assert!(at(96, 44).iter().all(|&b| b == 0));
        // Private data: rdma_cm IP header.
        assert_eq!(at(140, 4), [0x00, 0x40, 0xD0, 0x79]);
        assert_eq!(at(144, 12), [0; 12]);
        assert_eq!(at(156, 4), [10, 0, 0, 101]);
        assert_eq!(at(160, 12), [0; 12]);
        assert_eq!(at(172, 4), [10, 0, 0, 51]);
        assert!(at(176, 56).iter().all(|&b| b == 0));

        let (h2, m2) = CmMessage::parse(&mad).unwrap();
        assert_eq!(
            h2,
            MadHeaderRepr {
                attr_id: ATTR_REQ,
                ..hdr
            }
        );
        assert_eq!(m2, CmMessage::Req(req));
        let CmMessage::Req(r2) = m2 else {
            unreachable!()
        };
        assert_eq!(
            r2.private_ip().unwrap(),
            CmPrivateIp {
                src_port: 53369,
                src: LOCAL_IP,
                dst: REMOTE_IP
            }
        );
        assert_eq!(service_port(r2.service_id), Some(P));
        assert_eq!(gid_ipv4(&r2.primary_remote_gid), Some(REMOTE_IP));
    }

    #[test]
    fn rep_offsets_match_the_reference_parser() {
        // §5.3: local QPN at REP offset 12 and starting PSN at offset 20, both 24 bits.
        let rep = CmRep {
            local_comm_id: 0x1122_3344,
            remote_comm_id: P as u32,
            local_qpn: 0x00AB_CDEF,
            starting_psn: 0x0012_3456,
            vendor_id: 0x0002C9,
            responder_resources: 4,
            initiator_depth: 2,
            target_ack_delay: 15,
            rnr_retry_count: 7,
            srq: true,
            local_ca_guid: 0x0102_0304_0506_0708,
            ..CmRep::default()
        };
        let mut mad = [0u8; MAD_LEN];
        CmMessage::Rep(rep).emit(&MadHeaderRepr::cm_send(9, 0), &mut mad);
        let d = &mad[MAD_HEADER_LEN..];
        assert_eq!(d[0..4], [0x11, 0x22, 0x33, 0x44]);
        assert_eq!(d[4..8], (P as u32).to_be_bytes());
        assert_eq!(d[12..16], [0xAB, 0xCD, 0xEF, 0x00]);
        assert_eq!(d[16..20], [0, 0, 0, 0x02]);
        assert_eq!(d[20..24], [0x12, 0x34, 0x56, 0xC9]);
        assert_eq!(d[24..28], [4, 2, 15 << 3, (7 << 5) | (1 << 4)]);
        assert_eq!(d[28..36], [1, 2, 3, 4, 5, 6, 7, 8]);
        assert_eq!(mad[16..18], [0x00, 0x13]);
        assert_eq!(
            CmMessage::parse(&mad).unwrap().1,
            CmMessage::Rep(rep),
            "REP round trip"
        );
    }

    #[test]
    fn rej_and_dreq_layouts() {
        let rej = CmRej {
            local_comm_id: 1,
            remote_comm_id: 2,
            msg_rejected: MSG_REQ,
            reject_info_length: 0,
            reason: rej_reason::INVALID_SERVICE_ID,
            ..CmRej::default()
        };
        let mut mad = [0u8; MAD_LEN];
        CmMessage::Rej(rej).emit(&MadHeaderRepr::cm_send(1, 0), &mut mad);
        assert_eq!(mad[24 + 8..24 + 12], [0x00, 0x00, 0x00, 0x08]);
        let rej = CmRej {
            msg_rejected: MSG_OTHER,
            reject_info_length: 72,
            reason: rej_reason::CONSUMER_REJECT,
            ..rej
        };
        CmMessage::Rej(rej).emit(&MadHeaderRepr::cm_send(1, 0), &mut mad);
        assert_eq!(mad[24 + 8..24 + 12], [0x80, 72 << 1, 0x00, 28]);

        let dreq = CmDreq {
            local_comm_id: 1,
            remote_comm_id: 2,
            remote_qpn_eecn: 0x00FE_DCBA,
            ..CmDreq::default()
        };
        CmMessage::Dreq(dreq).emit(&MadHeaderRepr::cm_send(1, 0), &mut mad);
        assert_eq!(mad[24 + 8..24 + 12], [0xFE, 0xDC, 0xBA, 0x00]);
        assert_eq!(mad[16..18], [0x00, 0x15]);

        let mra = CmMra {
            local_comm_id: 1,
            remote_comm_id: 2,
            msg_mraed: MSG_REP,
            service_timeout: 31,
        };
        CmMessage::Mra(mra).emit(&MadHeaderRepr::cm_send(1, 0), &mut mad);
        assert_eq!(mad[24 + 8..24 + 10], [0x40, 0xF8]);
        assert!(mad[24 + 10..].iter().all(|&b| b == 0));
    }

    #[test]
    fn header_checks() {
        let (hdr, req) = reference_req();
        let mut mad = [0u8; MAD_LEN];
        CmMessage::Req(req).emit(&hdr, &mut mad);
        assert_eq!(CmMessage::parse(&mad[..MAD_LEN - 1]), Err(Error::Truncated));
        let mut longer = [0u8; MAD_LEN + 4];
        longer[..MAD_LEN].copy_from_slice(&mad);
        assert!(CmMessage::parse(&longer).is_ok());

        let mut bad = mad;
        bad[0] = 2;
        assert_eq!(CmMessage::parse(&bad), Err(Error::UnsupportedVersion));
        let mut bad = mad;
        bad[1] = 0x03; // Subnet Administration
        assert_eq!(CmMessage::parse(&bad), Err(Error::Malformed));
        let mut bad = mad;
        bad[2] = 1;
        assert_eq!(CmMessage::parse(&bad), Err(Error::UnsupportedVersion));
        let mut bad = mad;
        bad[3] = METHOD_GET;
        assert_eq!(CmMessage::parse(&bad), Err(Error::UnknownOpcode));
        for attr in [ATTR_SIDR_REQ, ATTR_LAP, ATTR_CLASS_PORT_INFO, 0xFFFF] {
            let mut bad = mad;
            bad[16..18].copy_from_slice(&attr.to_be_bytes());
            assert_eq!(CmMessage::parse(&bad), Err(Error::UnknownOpcode));
        }
        assert_eq!(
            MadHeader::new_checked(&mad[..23]).unwrap_err(),
            Error::Truncated
        );
        assert_eq!(CmReq::parse(&mad[24..255]), Err(Error::Truncated));
    }

    #[test]
    fn service_ids_and_gids() {
        assert_eq!(rdma_cm_service_id(1337), 0x0000_0000_0106_0539);
        assert_eq!(service_port(0x0000_0000_0106_0539), Some(1337));
        assert_eq!(service_port(0x0000_0000_0111_0539), None); // RDMA_PS_UDP
        assert_eq!(service_port(0x1000_0000_0106_0539), None);
        assert_eq!(gid_ipv4(&[0; 16]), None);
        let mut g = ipv4_gid(LOCAL_IP);
        assert_eq!(gid_ipv4(&g), Some(LOCAL_IP));
        g[0] = 0xFE;
        assert_eq!(gid_ipv4(&g), None);
        assert_eq!(timeout_nanos(0), 4096);
        assert_eq!(timeout_nanos(19), 2_147_483_648); // ~2.1 s, as §11.5 Q4 says
    }

    #[test]
    fn private_ip_checks() {
        let ip = CmPrivateIp {
            src_port: 1,
            src: LOCAL_IP,
            dst: REMOTE_IP,
        };
        let pd = ip.to_req_private_data();
        assert_eq!(CmPrivateIp::parse(&pd), Ok(ip));
        assert_eq!(CmPrivateIp::parse(&pd[..35]), Err(Error::Truncated));
        let mut v6 = pd;
        v6[1] = 0x60;
        assert_eq!(CmPrivateIp::parse(&v6), Err(Error::UnsupportedVersion));
        let mut v1 = pd;
        v1[0] = 1;
        assert_eq!(CmPrivateIp::parse(&v1), Err(Error::UnsupportedVersion));
    }

    fn arr<const N: usize>() -> impl Strategy<Value = [u8; N]> {
        prop::collection::vec(any::<u8>(), N).prop_map(|v| v.try_into().unwrap())
    }

    prop_compose! {
        fn hdr_strategy()(tid in any::<u64>(), attr_mod in any::<u32>(),
                          status in any::<u16>(), cs in any::<u16>()) -> MadHeaderRepr {
            MadHeaderRepr { status, class_specific: cs, ..MadHeaderRepr::cm_send(tid, attr_mod) }
        }
    }

    prop_compose! {
        fn req_strategy()(
            ids in (any::<u32>(), 0u32..1 << 24, any::<u64>(), any::<u64>(), any::<u32>()),
            qp in (0u32..1 << 24, any::<u8>(), 0u32..1 << 24, any::<u8>()),
            t in (0u8..32, 0u8..4, any::<bool>(), 0u32..1 << 24, 0u8..32, 0u8..8),
            p in (any::<u16>(), 0u8..16, any::<bool>(), 0u8..8, 0u8..16, any::<bool>()),
            lids in (any::<u16>(), any::<u16>(), arr::<16>(), arr::<16>()),
            path in (0u32..1 << 20, 0u8..64, any::<u8>(), any::<u8>(), 0u8..16, any::<bool>(),
                     0u8..32),
            private_data in arr::<REQ_PRIVATE_DATA_LEN>(),
        ) -> CmReq {
            CmReq {
                local_comm_id: ids.0, vendor_id: ids.1, service_id: ids.2, local_ca_guid: ids.3,
                local_qkey: ids.4,
                local_qpn: qp.0, responder_resources: qp.1, local_eecn: qp.2,
                initiator_depth: qp.3,
                remote_cm_response_timeout: t.0, transport_type: t.1, flow_control: t.2,
                starting_psn: t.3, local_cm_response_timeout: t.4, retry_count: t.5,
                pkey: p.0, path_mtu: p.1, rdc_exists: p.2, rnr_retry_count: p.3,
                max_cm_retries: p.4, srq: p.5,
                primary_local_lid: lids.0, primary_remote_lid: lids.1,
                primary_local_gid: lids.2, primary_remote_gid: lids.3,
                primary_flow_label: path.0, primary_packet_rate: path.1,
                primary_traffic_class: path.2, primary_hop_limit: path.3, primary_sl: path.4,
                primary_subnet_local: path.5, primary_local_ack_timeout: path.6,
                private_data,
            }
        }
    }

    prop_compose! {
        fn rep_strategy()(
            ids in (any::<u32>(), any::<u32>(), any::<u32>(), 0u32..1 << 24, 0u32..1 << 24,
                    0u32..1 << 24, 0u32..1 << 24),
            r in (any::<u8>(), any::<u8>(), 0u8..32, 0u8..4, any::<bool>(), 0u8..8,
                  any::<bool>(), any::<u64>()),
            private_data in arr::<REP_PRIVATE_DATA_LEN>(),
        ) -> CmRep {
            CmRep {
                local_comm_id: ids.0, remote_comm_id: ids.1, local_qkey: ids.2,
                local_qpn: ids.3, local_eecn: ids.4, starting_psn: ids.5, vendor_id: ids.6,
                responder_resources: r.0, initiator_depth: r.1, target_ack_delay: r.2,
                failover_accepted: r.3, end_to_end_flow_control: r.4, rnr_retry_count: r.5,
                srq: r.6, local_ca_guid: r.7, private_data,
            }
        }
    }

    fn message_strategy() -> impl Strategy<Value = CmMessage> {
        let ids = (any::<u32>(), any::<u32>());
        prop_oneof![
            req_strategy().prop_map(CmMessage::Req),
            rep_strategy().prop_map(CmMessage::Rep),
            (ids, arr::<RTU_PRIVATE_DATA_LEN>()).prop_map(|((l, r), private_data)| {
                CmMessage::Rtu(CmRtu {
                    local_comm_id: l,
                    remote_comm_id: r,
                    private_data,
                })
            }),
            (
                ids,
                (0u8..4, 0u8..128, any::<u16>()),
                arr::<REJ_ARI_LEN>(),
                arr::<REJ_PRIVATE_DATA_LEN>()
            )
                .prop_map(|((l, r), (m, n, reason), ari, private_data)| {
                    CmMessage::Rej(CmRej {
                        local_comm_id: l,
                        remote_comm_id: r,
                        msg_rejected: m,
                        reject_info_length: n,
                        reason,
                        ari,
                        private_data,
                    })
                }),
            (ids, 0u32..1 << 24, arr::<DREQ_PRIVATE_DATA_LEN>()).prop_map(
                |((l, r), q, private_data)| {
                    CmMessage::Dreq(CmDreq {
                        local_comm_id: l,
                        remote_comm_id: r,
                        remote_qpn_eecn: q,
                        private_data,
                    })
                }
            ),
            (ids, arr::<DREP_PRIVATE_DATA_LEN>()).prop_map(|((l, r), private_data)| {
                CmMessage::Drep(CmDrep {
                    local_comm_id: l,
                    remote_comm_id: r,
                    private_data,
                })
            }),
            (ids, 0u8..4, 0u8..32).prop_map(|((l, r), m, t)| {
                CmMessage::Mra(CmMra {
                    local_comm_id: l,
                    remote_comm_id: r,
                    msg_mraed: m,
                    service_timeout: t,
                })
            }),
        ]
    }

    proptest! {
        #[test]
        fn message_round_trip(hdr in hdr_strategy(), msg in message_strategy()) {
            let mut mad = [0x5Au8; MAD_LEN];
            msg.emit(&hdr, &mut mad);
            let (h2, m2) = CmMessage::parse(&mad).unwrap();
            prop_assert_eq!(h2, MadHeaderRepr { attr_id: msg.attr_id(), ..hdr });
            prop_assert_eq!(m2, msg);
            let mut again = [0u8; MAD_LEN];
            m2.emit(&h2, &mut again);
            prop_assert_eq!(again, mad);
        }

        #[test]
        fn parse_emit_parse_is_stable(
            attr in prop::sample::select(vec![
                ATTR_REQ, ATTR_REP, ATTR_RTU, ATTR_REJ, ATTR_DREQ, ATTR_DREP, ATTR_MRA,
            ]),
            data in prop::collection::vec(any::<u8>(), MAD_DATA_LEN),
        ) {
            // Every field value a parser can produce survives emit and re-parse.
            let mut mad = [0u8; MAD_LEN];
            MadHeaderRepr { attr_id: attr, ..MadHeaderRepr::cm_send(7, 0) }
                .emit(&mut MadHeader::new_unchecked(&mut mad[..]));
            mad[MAD_HEADER_LEN..].copy_from_slice(&data);
            let (h, m) = CmMessage::parse(&mad).unwrap();
            let mut out = [0u8; MAD_LEN];
            m.emit(&h, &mut out);
            prop_assert_eq!(CmMessage::parse(&out).unwrap(), (h, m));
        }

        #[test]
        fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..300)) {
            let _ = CmMessage::parse(&bytes);
            let _ = CmPrivateIp::parse(&bytes);
            if let Ok(h) = MadHeader::new_checked(&bytes[..]) {
                let _ = MadHeaderRepr::parse(&h);
                let _ = (h.tid(), h.attr_id(), h.attr_mod(), h.data().len());
            }
        }

        #[test]
        fn arbitrary_cm_bodies_never_panic(
            attr in 0x0010u16..0x001B,
            body in prop::collection::vec(any::<u8>(), 0..300),
        ) {
            let mut mad = vec![0u8; MAD_HEADER_LEN];
            MadHeaderRepr { attr_id: attr, ..MadHeaderRepr::cm_send(0, 0) }
                .emit(&mut MadHeader::new_unchecked(&mut mad[..]));
            mad.extend_from_slice(&body);
            let r = CmMessage::parse(&mad);
            if mad.len() < MAD_LEN {
                prop_assert_eq!(r, Err(Error::Truncated));
            }
        }

        #[test]
        fn private_ip_round_trip(port in any::<u16>(), s in any::<u32>(), d in any::<u32>()) {
            let ip = CmPrivateIp { src_port: port, src: s.into(), dst: d.into() };
            prop_assert_eq!(CmPrivateIp::parse(&ip.to_req_private_data()), Ok(ip));
            prop_assert_eq!(gid_ipv4(&ipv4_gid(ip.src)), Some(ip.src));
        }
    }
}
