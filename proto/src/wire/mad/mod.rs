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
//! Rooms: this module owns the constants, the RDMA_CM service-ID and GID conventions and the
//! MAD header ([`MadHeader`], [`MadHeaderRepr`]); `field` owns every byte offset (nothing
//! else indexes a MAD by literal offset); `connect` the handshake (REQ, REP, RTU and the
//! private-data IP header), `reject` REJ and MRA, `disconnect` DREQ and DREP, `message` the
//! [`CmMessage`] dispatch over a whole MAD. None of them does I/O or keeps state: the CM state
//! machines are `crate::rdma_cm`'s and the software RNIC's.
//!
//! Parsing never panics: every parser checks the length first and only then indexes. `emit`
//! functions write every byte of their output (reserved fields become zero) and panic only when
//! handed a buffer shorter than the `buffer_len()` they report. Values wider than their field are
//! truncated to the field's width on emit.

use core::net::Ipv4Addr;

use super::{Error, Result};

mod connect;
mod disconnect;
mod field;
mod message;
mod reject;
#[cfg(test)]
mod tests;

pub use connect::{CmPrivateIp, CmRep, CmReq, CmRtu};
pub use disconnect::{CmDrep, CmDreq};
pub use message::CmMessage;
pub use reject::{CmMra, CmRej};

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

use field::{Bits, Field};

/// Reads a big-endian unsigned field of up to 8 bytes. The caller has checked the length.
#[inline]
pub(super) fn get_be(b: &[u8], f: Field) -> u64 {
    b[f].iter().fold(0u64, |acc, &x| (acc << 8) | x as u64)
}

/// Writes the low bytes of `v` as a big-endian field of up to 8 bytes.
#[inline]
pub(super) fn put_be(b: &mut [u8], f: Field, v: u64) {
    let n = f.len();
    for (i, o) in b[f].iter_mut().enumerate() {
        *o = (v >> (8 * (n - 1 - i))) as u8;
    }
}

#[inline]
pub(super) fn get_bits(b: &[u8], f: Bits) -> u8 {
    (b[f.byte] & f.mask) >> f.shift
}

#[inline]
pub(super) fn put_bits(b: &mut [u8], f: Bits, v: u8) {
    b[f.byte] = (b[f.byte] & !f.mask) | ((v << f.shift) & f.mask);
}

#[inline]
pub(super) fn get_array<const N: usize>(b: &[u8], f: Field) -> [u8; N] {
    let mut out = [0u8; N];
    out.copy_from_slice(&b[f]);
    out
}

/// Checks that `data` holds a whole CM message body.
#[inline]
pub(super) fn check_data(data: &[u8]) -> Result<()> {
    if data.len() < MAD_DATA_LEN {
        Err(Error::Truncated)
    } else {
        Ok(())
    }
}

/// Zeroes the whole body so reserved fields go out as zero.
#[inline]
pub(super) fn clear_data(data: &mut [u8]) -> &mut [u8] {
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
