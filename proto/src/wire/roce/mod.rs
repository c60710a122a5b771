//! RoCEv2 frames: Ethernet + IPv4 + UDP + BTH + extension headers + payload + pad + ICRC.
//!
//! Three ways in and out:
//! - [`RocePacket::parse`] reads a UDP payload (BTH .. ICRC); [`parse_frame`] reads a whole
//!   Ethernet frame. Neither checks the ICRC: that is [`crate::icrc`]'s job.
//! - [`FrameTemplate`] is the translator's hot path: everything that is constant per
//!   (connection, opcode, payload length), including the CRC register over the constant prefix,
//!   is computed once, so a frame costs a 54-byte copy, the caller's field writes and a CRC over
//!   the variable tail (28 bytes for a Key-Write).
//! - [`build_frame`] is the general, slower builder for rare frames (CM MADs, ACKs, read
//!   responses of varying length).
//!
//! Frames always carry DF, UDP checksum 0, and the ICRC least-significant byte first, as rxe.
//!
//! Rooms: this module owns the transport parse/emit ([`RocePacket`]), whole-frame parsing and
//! the slow builder, and the private `field` module, the only home of the frame offsets the
//! others patch; `template` holds [`FrameTemplate`], `rdma` the per-frame hot path
//! [`RdmaTemplate`] (ICRC by linearity), `frame` the [`RoceFrame`] view of a frame already
//! built. The headers themselves are [`super::ib`]'s; the CRC tables are [`crate::icrc`]'s.

use std::net::Ipv4Addr;

use super::ethernet::{self, EthernetFrame, EthernetRepr, MacAddr};
use super::ib::{
    opcode_info, Aeth, AethRepr, AtomicAckEth, AtomicAckEthRepr, AtomicEth, AtomicEthRepr, Bth,
    BthRepr, Deth, DethRepr, ImmDt, Reth, RethRepr, AETH_LEN, ATOMIC_ACK_ETH_LEN, ATOMIC_ETH_LEN,
    BTH_LEN, DETH_LEN, ICRC_LEN, IMMDT_LEN, RETH_LEN,
};
use super::ipv4::{self, Ipv4Packet, Ipv4Repr};
use super::udp::{self, UdpPacket, UdpRepr};
use super::{Error, Result};
use crate::consts::ROCEV2_PORT;
use crate::icrc;

/// Ethernet + IPv4 (no options) + UDP header bytes: `&frame[FRAME_HEADERS_LEN..]` is the UDP
/// payload.
pub const FRAME_HEADERS_LEN: usize = ethernet::HEADER_LEN + ipv4::HEADER_LEN + udp::HEADER_LEN;
/// Alias of [`FRAME_HEADERS_LEN`].
pub const L2L4_LEN: usize = FRAME_HEADERS_LEN;

mod frame;
mod rdma;
mod template;
#[cfg(test)]
mod tests;

pub use frame::RoceFrame;
pub use rdma::{RdmaRegion, RdmaTemplate, PADDED_PAYLOAD, RDMA_HEAD_MAX, RDMA_PADDED_ROOM};
pub use template::FrameTemplate;

/// Where the headers sit in a frame this crate builds (Ethernet, a 20-byte IPv4 header, UDP,
/// BTH, then the first extension header): the only home of the frame offsets the templates
/// patch and [`RoceFrame`] reads.
mod field {
    use core::ops::Range;

    use super::super::{ethernet, ib::BTH_LEN, ipv4, udp};
    use super::L2L4_LEN;

    /// The IPv4 header (no options).
    pub const IPV4: Range<usize> = ethernet::HEADER_LEN..ethernet::HEADER_LEN + ipv4::HEADER_LEN;
    /// The IPv4 version and header length byte (0x45 without options).
    pub const IPV4_VERSION_IHL: usize = IPV4.start;
    /// The IPv4 total length.
    pub const IPV4_TOTAL_LEN: Range<usize> = IPV4.start + 2..IPV4.start + 4;
    /// The UDP header.
    pub const UDP: Range<usize> = IPV4.end..IPV4.end + udp::HEADER_LEN;
    /// Frame offset of the BTH.
    pub const BTH: usize = L2L4_LEN;
    /// The BTH word holding AckReq and the PSN.
    pub const PSN_WORD: Range<usize> = BTH + 8..BTH + BTH_LEN;
    /// Frame bytes up to and including the BTH: where the extension headers start.
    pub const HEADERS_WITH_BTH: usize = BTH + BTH_LEN;
    /// The virtual address of the first extension header (a RETH or an AtomicETH), right
    /// after the PSN word.
    pub const EXT_VA: Range<usize> = HEADERS_WITH_BTH..HEADERS_WITH_BTH + 8;
}

use field::HEADERS_WITH_BTH;

/// Pad bytes that bring a payload to a multiple of 4.
#[inline]
pub const fn pad_len(payload_len: usize) -> usize {
    payload_len.wrapping_neg() & 3
}

/// Length of a whole frame with `ext_len` bytes of extension headers and a `payload_len`-byte
/// payload (pad and ICRC included).
#[inline]
pub const fn frame_len(ext_len: usize, payload_len: usize) -> usize {
    HEADERS_WITH_BTH + ext_len + payload_len + pad_len(payload_len) + ICRC_LEN
}

/// The transport part of a RoCEv2 packet (the UDP payload), parsed.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct RocePacket<'a> {
    /// Base transport header.
    pub bth: BthRepr,
    /// RETH, for opcodes that carry one.
    pub reth: Option<RethRepr>,
    /// AtomicETH, for Compare & Swap and Fetch & Add.
    pub atomic: Option<AtomicEthRepr>,
    /// AETH, for acknowledgements and read responses.
    pub aeth: Option<AethRepr>,
    /// AtomicAckETH, for atomic acknowledgements.
    pub atomic_ack: Option<AtomicAckEthRepr>,
    /// Immediate data, for the `_IMM` opcodes.
    pub imm: Option<u32>,
    /// DETH, for UD sends.
    pub deth: Option<DethRepr>,
    /// The payload without pad bytes.
    pub payload: &'a [u8],
    /// The ICRC as rxe computes it: `u32::from_le_bytes(last four bytes)`.
    pub icrc: u32,
}

impl<'a> RocePacket<'a> {
    /// Parses a UDP payload from the BTH to the ICRC.
    ///
    /// `Truncated` if shorter than its headers and ICRC; `UnknownOpcode` for opcodes outside
    /// [`opcode_info`]; `Malformed` if TVer ≠ 0, the pad count exceeds the payload, or an opcode
    /// without payload carries bytes after its headers. Never panics.
    pub fn parse(transport: &'a [u8]) -> Result<Self> {
        if transport.len() < BTH_LEN + ICRC_LEN {
            return Err(Error::Truncated);
        }
        let bth = BthRepr::parse(&Bth::new_unchecked(transport))?;
        let info = opcode_info(bth.opcode).ok_or(Error::UnknownOpcode)?;
        if bth.tver != 0 {
            return Err(Error::Malformed);
        }
        let body_end = transport.len() - ICRC_LEN;
        if body_end < BTH_LEN + info.ext_len() {
            return Err(Error::Truncated);
        }
        let mut off = BTH_LEN;
        let mut take = |n: usize| {
            let s = &transport[off..off + n];
            off += n;
            s
        };
        let deth = match info.deth {
            true => Some(DethRepr::parse(&Deth::new_unchecked(take(DETH_LEN)))?),
            false => None,
        };
        let reth = match info.reth {
            true => Some(RethRepr::parse(&Reth::new_unchecked(take(RETH_LEN)))?),
            false => None,
        };
        let atomic = match info.atomic_eth {
            true => Some(AtomicEthRepr::parse(&AtomicEth::new_unchecked(take(
                ATOMIC_ETH_LEN,
            )))?),
            false => None,
        };
        let aeth = match info.aeth {
            true => Some(AethRepr::parse(&Aeth::new_unchecked(take(AETH_LEN)))?),
            false => None,
        };
        let atomic_ack = match info.atomic_ack {
            true => Some(AtomicAckEthRepr::parse(&AtomicAckEth::new_unchecked(
                take(ATOMIC_ACK_ETH_LEN),
            ))?),
            false => None,
        };
        let imm = match info.imm {
            true => Some(ImmDt::new_checked(take(IMMDT_LEN))?.imm()),
            false => None,
        };
        let padded = &transport[off..body_end];
        let pad = bth.pad_count as usize;
        if pad > padded.len() || (!info.has_payload && !padded.is_empty()) {
            return Err(Error::Malformed);
        }
        let icrc = &transport[body_end..];
        Ok(RocePacket {
            bth,
            reth,
            atomic,
            aeth,
            atomic_ack,
            imm,
            deth,
            payload: &padded[..padded.len() - pad],
            icrc: u32::from_le_bytes([icrc[0], icrc[1], icrc[2], icrc[3]]),
        })
    }

    /// Length of the extension headers present.
    #[inline]
    pub fn ext_len(&self) -> usize {
        self.deth.map_or(0, |_| DETH_LEN)
            + self.reth.map_or(0, |_| RETH_LEN)
            + self.atomic.map_or(0, |_| ATOMIC_ETH_LEN)
            + self.aeth.map_or(0, |_| AETH_LEN)
            + self.atomic_ack.map_or(0, |_| ATOMIC_ACK_ETH_LEN)
            + self.imm.map_or(0, |_| IMMDT_LEN)
    }

    /// Bytes `emit` writes: BTH, extension headers, payload, `bth.pad_count` pad bytes, ICRC.
    #[inline]
    pub fn buffer_len(&self) -> usize {
        BTH_LEN + self.ext_len() + self.payload.len() + (self.bth.pad_count & 3) as usize + ICRC_LEN
    }

    /// Writes the extension headers present, in the spec's order, and returns their length.
    pub fn emit_ext(&self, buf: &mut [u8]) -> usize {
        let mut off = 0;
        let mut next = |n: usize| {
            let s = off..off + n;
            off += n;
            s
        };
        if let Some(d) = &self.deth {
            d.emit(&mut Deth::new_unchecked(&mut buf[next(DETH_LEN)]));
        }
        if let Some(r) = &self.reth {
            r.emit(&mut Reth::new_unchecked(&mut buf[next(RETH_LEN)]));
        }
        if let Some(a) = &self.atomic {
            a.emit(&mut AtomicEth::new_unchecked(
                &mut buf[next(ATOMIC_ETH_LEN)],
            ));
        }
        if let Some(a) = &self.aeth {
            a.emit(&mut Aeth::new_unchecked(&mut buf[next(AETH_LEN)]));
        }
        if let Some(a) = &self.atomic_ack {
            a.emit(&mut AtomicAckEth::new_unchecked(
                &mut buf[next(ATOMIC_ACK_ETH_LEN)],
            ));
        }
        if let Some(i) = self.imm {
            ImmDt::new_unchecked(&mut buf[next(IMMDT_LEN)]).set_imm(i);
        }
        off
    }

    /// Writes the transport bytes as they are (the BTH as given, zero pad bytes, `self.icrc`
    /// little-endian, not recomputed) and returns [`buffer_len`](Self::buffer_len).
    pub fn emit(&self, buf: &mut [u8]) -> usize {
        let len = self.buffer_len();
        let buf = &mut buf[..len];
        self.bth.emit(&mut Bth::new_unchecked(&mut buf[..BTH_LEN]));
        let mut off = BTH_LEN + self.emit_ext(&mut buf[BTH_LEN..]);
        buf[off..off + self.payload.len()].copy_from_slice(self.payload);
        off += self.payload.len();
        buf[off..len - ICRC_LEN].fill(0);
        buf[len - ICRC_LEN..].copy_from_slice(&self.icrc.to_le_bytes());
        len
    }
}

/// Addresses and IPv4 fields of one direction of a RoCEv2 flow.
///
/// `ident` is 0 by default because Linux sends ID 0 for DF datagrams of unconnected UDP
/// sockets, so a translator sending through a kernel UDP socket produces exactly the header the
/// ICRC was computed over (and a responder behind a UDP socket verifies it at full strength).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct RoceEndpoint {
    /// Source MAC.
    pub src_mac: MacAddr,
    /// Destination MAC.
    pub dst_mac: MacAddr,
    /// Source IPv4 address.
    pub src_ip: Ipv4Addr,
    /// Destination IPv4 address.
    pub dst_ip: Ipv4Addr,
    /// UDP source port.
    pub src_port: u16,
    /// UDP destination port (4791).
    pub dst_port: u16,
    /// IPv4 TTL.
    pub ttl: u8,
    /// IPv4 TOS byte (DSCP and ECN).
    pub tos: u8,
    /// IPv4 identification.
    pub ident: u16,
}

impl Default for RoceEndpoint {
    fn default() -> Self {
        RoceEndpoint {
            src_mac: MacAddr::ZERO,
            dst_mac: MacAddr::ZERO,
            src_ip: Ipv4Addr::UNSPECIFIED,
            dst_ip: Ipv4Addr::UNSPECIFIED,
            src_port: ROCEV2_PORT,
            dst_port: ROCEV2_PORT,
            ttl: 64,
            tos: 0,
            ident: 0,
        }
    }
}

impl RoceEndpoint {
    /// The other direction: MACs, addresses and ports swapped; TTL, TOS and ident kept.
    #[inline]
    pub fn reversed(&self) -> RoceEndpoint {
        RoceEndpoint {
            src_mac: self.dst_mac,
            dst_mac: self.src_mac,
            src_ip: self.dst_ip,
            dst_ip: self.src_ip,
            src_port: self.dst_port,
            dst_port: self.src_port,
            ..*self
        }
    }
}

/// Writes Ethernet, IPv4 (with checksum), UDP (checksum 0) and the BTH into `out[..54]` for a
/// UDP payload of `transport_len` bytes.
fn write_headers(ep: &RoceEndpoint, bth: &BthRepr, transport_len: usize, out: &mut [u8]) {
    let out = &mut out[..HEADERS_WITH_BTH];
    EthernetRepr {
        src: ep.src_mac,
        dst: ep.dst_mac,
        ethertype: ethernet::ETHERTYPE_IPV4,
    }
    .emit(&mut EthernetFrame::new_unchecked(&mut out[..]));
    let l3 = &mut out[ethernet::HEADER_LEN..];
    Ipv4Repr {
        src: ep.src_ip,
        dst: ep.dst_ip,
        protocol: ipv4::PROTO_UDP,
        ttl: ep.ttl,
        tos: ep.tos,
        ident: ep.ident,
        dont_frag: true,
        payload_len: udp::HEADER_LEN + transport_len,
    }
    .emit(&mut Ipv4Packet::new_unchecked(&mut l3[..ipv4::HEADER_LEN]));
    let l4 = &mut l3[ipv4::HEADER_LEN..];
    UdpRepr {
        src_port: ep.src_port,
        dst_port: ep.dst_port,
        payload_len: transport_len,
    }
    .emit(&mut UdpPacket::new_unchecked(&mut l4[..udp::HEADER_LEN]));
    bth.emit(&mut Bth::new_unchecked(&mut l4[udp::HEADER_LEN..]));
}

/// Splits the IPv4 and UDP headers of a frame written by `write_headers` into arrays.
#[inline]
fn l3l4_headers(frame: &[u8]) -> ([u8; 20], [u8; 8]) {
    let mut ip = [0u8; 20];
    ip.copy_from_slice(&frame[field::IPV4]);
    let mut udp = [0u8; 8];
    udp.copy_from_slice(&frame[field::UDP]);
    (ip, udp)
}

/// Builds a whole frame (the slow, general path) and returns its length.
///
/// `bth.pad_count` is ignored and set from `payload.len()`; `ext` is copied as given, so the
/// caller answers for it matching the opcode ([`RocePacket::emit_ext`] writes it). Panics if
/// `out` is shorter than [`frame_len`]`(ext.len(), payload.len())` or the frame exceeds the
/// IPv4 length limit.
pub fn build_frame(
    ep: &RoceEndpoint,
    bth: &BthRepr,
    ext: &[u8],
    payload: &[u8],
    out: &mut [u8],
) -> usize {
    let pad = pad_len(payload.len());
    let len = frame_len(ext.len(), payload.len());
    let out = &mut out[..len];
    let bth = BthRepr {
        pad_count: pad as u8,
        ..*bth
    };
    write_headers(ep, &bth, len - L2L4_LEN, out);
    let mut off = HEADERS_WITH_BTH;
    out[off..off + ext.len()].copy_from_slice(ext);
    off += ext.len();
    out[off..off + payload.len()].copy_from_slice(payload);
    off += payload.len();
    out[off..off + pad].fill(0);
    off += pad;
    let (ip, udp) = l3l4_headers(out);
    let crc = icrc::icrc_ipv4(&ip, &udp, &out[L2L4_LEN..off]);
    out[off..].copy_from_slice(&crc.to_le_bytes());
    len
}

/// A whole RoCEv2 frame, parsed.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct ParsedFrame<'a> {
    /// Ethernet header.
    pub eth: EthernetRepr,
    /// IPv4 header.
    pub ip: Ipv4Repr,
    /// UDP header.
    pub udp: UdpRepr,
    /// Transport headers and payload.
    pub roce: RocePacket<'a>,
    /// The UDP payload (BTH .. ICRC), e.g. for [`crate::icrc::check_reconstructed`].
    pub transport: &'a [u8],
}

/// Parses an Ethernet frame carrying RoCEv2 over IPv4 (ICRC not checked; the UDP port is not
/// judged, so the caller decides what to do with non-4791 traffic).
///
/// `UnknownOpcode` for a non-IPv4 EtherType or a non-UDP protocol; otherwise the errors of the
/// layers (a bad IPv4 checksum, or a nonzero UDP checksum that is wrong, is `Malformed`).
/// Ethernet padding is ignored.
pub fn parse_frame(frame: &[u8]) -> Result<ParsedFrame<'_>> {
    let eth = EthernetRepr::parse(&EthernetFrame::new_checked(frame)?)?;
    if eth.ethertype != ethernet::ETHERTYPE_IPV4 {
        return Err(Error::UnknownOpcode);
    }
    let l3 = &frame[ethernet::HEADER_LEN..];
    let ip_view = Ipv4Packet::new_checked(l3)?;
    let ip = Ipv4Repr::parse(&ip_view)?;
    if ip.protocol != ipv4::PROTO_UDP {
        return Err(Error::UnknownOpcode);
    }
    let hl = ip_view.header_len();
    let l4 = &l3[hl..hl + ip.payload_len];
    let udp_view = UdpPacket::new_checked(l4)?;
    let udp = UdpRepr::parse(&udp_view)?;
    if !udp_view.verify_checksum(ip.src, ip.dst) {
        return Err(Error::Malformed);
    }
    let transport = &l4[udp::HEADER_LEN..udp::HEADER_LEN + udp.payload_len];
    let roce = RocePacket::parse(transport)?;
    Ok(ParsedFrame {
        eth,
        ip,
        udp,
        roce,
        transport,
    })
}
