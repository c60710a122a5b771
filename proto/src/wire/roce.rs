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

use std::net::Ipv4Addr;

use super::ethernet::{self, EthernetFrame, EthernetRepr, MacAddr};
use super::ib::{
    opcode_info, Aeth, AethRepr, AtomicAckEth, AtomicAckEthRepr, AtomicEth, AtomicEthRepr, Bth,
    BthRepr, Deth, DethRepr, ImmDt, Psn, Qpn, Reth, RethRepr, Rkey, AETH_LEN, ATOMIC_ACK_ETH_LEN,
    ATOMIC_ETH_LEN, BTH_LEN, DETH_LEN, ICRC_LEN, IMMDT_LEN, RETH_LEN,
};
use super::ipv4::{self, Ipv4Packet, Ipv4Repr};
use super::udp::{self, UdpPacket, UdpRepr};
use super::{Error, Result};
use crate::consts::ROCEV2_PORT;
use crate::crc::IEEE;
use crate::icrc;

/// Ethernet + IPv4 (no options) + UDP header bytes: `&frame[FRAME_HEADERS_LEN..]` is the UDP
/// payload.
pub const FRAME_HEADERS_LEN: usize = ethernet::HEADER_LEN + ipv4::HEADER_LEN + udp::HEADER_LEN;
/// Alias of [`FRAME_HEADERS_LEN`].
pub const L2L4_LEN: usize = FRAME_HEADERS_LEN;

/// Frame offset of the BTH.
const BTH_OFFSET: usize = L2L4_LEN;
/// Frame offset of the BTH word holding AckReq and the PSN.
const PSN_WORD_OFFSET: usize = BTH_OFFSET + 8;
/// Frame bytes up to and including the BTH.
const HEADERS_WITH_BTH: usize = BTH_OFFSET + BTH_LEN;

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
    ip.copy_from_slice(&frame[ethernet::HEADER_LEN..ethernet::HEADER_LEN + 20]);
    let mut udp = [0u8; 8];
    udp.copy_from_slice(&frame[ethernet::HEADER_LEN + 20..L2L4_LEN]);
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

/// A precomputed frame for one (endpoint, BTH, payload length): the translator's hot path.
///
/// Holds the Ethernet, IPv4 (with checksum), UDP and BTH bytes, and the ICRC register after the
/// constant prefix (the eight 0xFF bytes, the masked IPv4 and UDP headers and BTH bytes 0..8).
/// [`emit`](Self::emit) then only copies, lets the caller write the extension headers and
/// payload in place, sets AckReq and the PSN and finishes the CRC over the variable tail. No
/// allocation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FrameTemplate {
    headers: [u8; HEADERS_WITH_BTH],
    prefix_state: u32,
    ext_len: usize,
    payload_len: usize,
    frame_len: usize,
}

impl FrameTemplate {
    /// A template with P_Key 0xFFFF, MigReq set (like the reference artefact; rxe ignores it),
    /// SE clear, and the pad count derived from `payload_len`.
    ///
    /// Panics on an opcode outside [`opcode_info`], a nonzero payload for an opcode without
    /// one, or a frame over the IPv4 length limit (all programming errors).
    pub fn new(ep: &RoceEndpoint, opcode: u8, dest_qp: Qpn, payload_len: usize) -> FrameTemplate {
        let bth = BthRepr::rc(opcode, dest_qp, Psn::new(0), false);
        Self::with_bth(ep, &bth, payload_len)
    }

    /// A template from a full BTH; its `pad_count`, `ack_req` and `psn` are ignored (the first
    /// is derived from `payload_len`, the others are per frame). Panics like [`new`](Self::new).
    pub fn with_bth(ep: &RoceEndpoint, bth: &BthRepr, payload_len: usize) -> FrameTemplate {
        let info = opcode_info(bth.opcode).expect("FrameTemplate: unsupported opcode");
        assert!(
            info.has_payload || payload_len == 0,
            "FrameTemplate: opcode {:#04x} carries no payload",
            bth.opcode
        );
        let ext_len = info.ext_len();
        let frame_len = frame_len(ext_len, payload_len);
        assert!(
            frame_len - ethernet::HEADER_LEN <= u16::MAX as usize,
            "FrameTemplate: frame too long"
        );
        let bth = BthRepr {
            pad_count: pad_len(payload_len) as u8,
            ack_req: false,
            psn: Psn::new(0),
            ..*bth
        };
        let mut headers = [0u8; HEADERS_WITH_BTH];
        write_headers(ep, &bth, frame_len - L2L4_LEN, &mut headers);
        let (ip, udp) = l3l4_headers(&headers);
        let prefix_state =
            icrc::masked_prefix_state(&ip, &udp, &headers[BTH_OFFSET..PSN_WORD_OFFSET]);
        FrameTemplate {
            headers,
            prefix_state,
            ext_len,
            payload_len,
            frame_len,
        }
    }

    /// Length of every frame this template emits.
    #[inline]
    pub fn frame_len(&self) -> usize {
        self.frame_len
    }

    /// Length of the extension headers the caller writes.
    #[inline]
    pub fn ext_len(&self) -> usize {
        self.ext_len
    }

    /// Payload length (without pad).
    #[inline]
    pub fn payload_len(&self) -> usize {
        self.payload_len
    }

    /// Frame offset of the payload (after the extension headers).
    #[inline]
    pub fn payload_offset(&self) -> usize {
        HEADERS_WITH_BTH + self.ext_len
    }

    /// The BTH opcode.
    #[inline]
    pub fn opcode(&self) -> u8 {
        self.headers[BTH_OFFSET]
    }

    /// The BTH destination QP.
    #[inline]
    pub fn dest_qp(&self) -> Qpn {
        Bth::new_unchecked(&self.headers[BTH_OFFSET..]).dest_qp()
    }

    /// Emits one frame into `out` and returns its length.
    ///
    /// `fill` receives the `ext_len() + payload_len()` bytes after the BTH (extension headers,
    /// then payload) and must write all of them; their previous contents are unspecified. Pad
    /// bytes are zeroed, AckReq and the PSN set, and the ICRC computed and stored. Panics if
    /// `out` is shorter than [`frame_len`](Self::frame_len).
    #[inline]
    pub fn emit<F: FnOnce(&mut [u8])>(
        &self,
        out: &mut [u8],
        psn: Psn,
        ack_req: bool,
        fill: F,
    ) -> usize {
        let len = self.frame_len;
        let out = &mut out[..len];
        let icrc_at = len - ICRC_LEN;
        let body_end = HEADERS_WITH_BTH + self.ext_len + self.payload_len;
        out[..HEADERS_WITH_BTH].copy_from_slice(&self.headers);
        fill(&mut out[HEADERS_WITH_BTH..body_end]);
        // Pad and ICRC together are at least 4 bytes: one fixed-size store clears the pad
        // (a variable-length fill would be a memset call); the ICRC overwrites the rest.
        out[body_end..body_end + 4].copy_from_slice(&[0; 4]);
        let word = (ack_req as u32) << 31 | psn.value();
        out[PSN_WORD_OFFSET..HEADERS_WITH_BTH].copy_from_slice(&word.to_be_bytes());
        let crc = !IEEE.update(self.prefix_state, &out[PSN_WORD_OFFSET..icrc_at]);
        out[icrc_at..].copy_from_slice(&crc.to_le_bytes());
        len
    }

    /// [`FrameTemplate::emit`] into two buffers at once (the frame to send and the copy a
    /// requester keeps for retransmission): every field is stored to both and the ICRC is
    /// computed once. Cheaper than emitting and then copying the frame, whose just-written
    /// bytes a wide load cannot take from the store buffer. `fill` is called once per buffer.
    #[inline(always)]
    pub fn emit_twice<F: Fn(&mut [u8])>(
        &self,
        out: &mut [u8],
        copy: &mut [u8],
        psn: Psn,
        ack_req: bool,
        fill: F,
    ) -> usize {
        let len = self.frame_len;
        let (out, copy) = (&mut out[..len], &mut copy[..len]);
        let icrc_at = len - ICRC_LEN;
        let body_end = HEADERS_WITH_BTH + self.ext_len + self.payload_len;
        let word = ((ack_req as u32) << 31 | psn.value()).to_be_bytes();
        for b in [&mut *out, &mut *copy] {
            b[..HEADERS_WITH_BTH].copy_from_slice(&self.headers);
            fill(&mut b[HEADERS_WITH_BTH..body_end]);
            b[body_end..body_end + 4].copy_from_slice(&[0; 4]);
            b[PSN_WORD_OFFSET..HEADERS_WITH_BTH].copy_from_slice(&word);
        }
        let crc = (!IEEE.update(self.prefix_state, &out[PSN_WORD_OFFSET..icrc_at])).to_le_bytes();
        out[icrc_at..].copy_from_slice(&crc);
        copy[icrc_at..].copy_from_slice(&crc);
        len
    }

    /// [`FrameTemplate::emit_write`] into two buffers at once (see
    /// [`FrameTemplate::emit_twice`]).
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    pub fn emit_write_twice(
        &self,
        out: &mut [u8],
        copy: &mut [u8],
        psn: Psn,
        ack_req: bool,
        reth: &RethRepr,
        imm: Option<u32>,
        payload: &[u8],
    ) -> usize {
        let ext = RETH_LEN + if imm.is_some() { IMMDT_LEN } else { 0 };
        assert!(self.ext_len == ext && payload.len() == self.payload_len);
        self.emit_twice(out, copy, psn, ack_req, |b| {
            reth.emit(&mut Reth::new_unchecked(&mut b[..RETH_LEN]));
            if let Some(v) = imm {
                ImmDt::new_unchecked(&mut b[RETH_LEN..ext]).set_imm(v);
            }
            b[ext..].copy_from_slice(payload);
        })
    }

    /// [`FrameTemplate::emit_atomic`] into two buffers at once (see
    /// [`FrameTemplate::emit_twice`]).
    #[inline(always)]
    pub fn emit_atomic_twice(
        &self,
        out: &mut [u8],
        copy: &mut [u8],
        psn: Psn,
        ack_req: bool,
        atomic: &AtomicEthRepr,
    ) -> usize {
        assert!(self.ext_len == ATOMIC_ETH_LEN && self.payload_len == 0);
        self.emit_twice(out, copy, psn, ack_req, |b| {
            atomic.emit(&mut AtomicEth::new_unchecked(b));
        })
    }

    /// Emits an RDMA WRITE/READ-request frame whose only extension header is a RETH.
    ///
    /// Panics if the template's extension headers are not exactly one RETH or `payload` is not
    /// `payload_len()` bytes.
    #[inline]
    pub fn emit_reth(
        &self,
        out: &mut [u8],
        psn: Psn,
        ack_req: bool,
        reth: &RethRepr,
        payload: &[u8],
    ) -> usize {
        assert!(self.ext_len == RETH_LEN && payload.len() == self.payload_len);
        self.emit(out, psn, ack_req, |b| {
            b[..RETH_LEN].copy_from_slice(&reth.to_bytes());
            b[RETH_LEN..].copy_from_slice(payload);
        })
    }

    /// Emits an RDMA WRITE (Only, or Only with Immediate when `imm` is given; the template's
    /// opcode decides) carrying `payload` to `reth`.
    ///
    /// Panics if the template's extension headers are not a RETH (and an ImmDt with `imm`) or
    /// `payload` is not `payload_len()` bytes.
    #[inline(always)]
    pub fn emit_write(
        &self,
        out: &mut [u8],
        psn: Psn,
        ack_req: bool,
        reth: &RethRepr,
        imm: Option<u32>,
        payload: &[u8],
    ) -> usize {
        let ext = RETH_LEN + if imm.is_some() { IMMDT_LEN } else { 0 };
        assert!(self.ext_len == ext && payload.len() == self.payload_len);
        self.emit(out, psn, ack_req, |b| {
            reth.emit(&mut Reth::new_unchecked(&mut b[..RETH_LEN]));
            if let Some(v) = imm {
                ImmDt::new_unchecked(&mut b[RETH_LEN..ext]).set_imm(v);
            }
            b[ext..].copy_from_slice(payload);
        })
    }

    /// Emits a Compare & Swap or Fetch & Add frame.
    ///
    /// Panics if the template's extension headers are not exactly one AtomicETH.
    #[inline(always)]
    pub fn emit_atomic(
        &self,
        out: &mut [u8],
        psn: Psn,
        ack_req: bool,
        atomic: &AtomicEthRepr,
    ) -> usize {
        assert!(self.ext_len == ATOMIC_ETH_LEN && self.payload_len == 0);
        self.emit(out, psn, ack_req, |b| {
            atomic.emit(&mut AtomicEth::new_unchecked(b));
        })
    }
}

/// The head an [`RdmaTemplate`] copies, whatever its own: the headers through the BTH and the
/// longest extension headers (an AtomicETH), rounded up to whole 16-byte moves. Buffers it
/// emits into are at least this long.
pub const RDMA_HEAD_MAX: usize = (HEADERS_WITH_BTH + ATOMIC_ETH_LEN).next_multiple_of(16);

/// Largest payload [`RdmaTemplate::emit_write_padded`] takes: a Key-Write slot or a Postcarding
/// chunk, copied as one fixed-size block.
pub const PADDED_PAYLOAD: usize = 64;

/// Room [`RdmaTemplate::emit_write_padded`] needs in a buffer: it stores whole fixed-size blocks
/// (the head, then the padded payload) and copies the frame in 32-byte moves.
pub const RDMA_PADDED_ROOM: usize =
    (HEADERS_WITH_BTH + RETH_LEN + IMMDT_LEN + PADDED_PAYLOAD).next_multiple_of(32);

/// Which request an [`RdmaTemplate`] builds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum RdmaKind {
    /// RDMA WRITE Only: RETH, payload.
    Write,
    /// RDMA WRITE Only with Immediate: RETH, ImmDt, payload.
    WriteImm,
    /// FETCH_ADD or COMPARE_SWAP: AtomicETH.
    Atomic,
}

/// The region an [`RdmaTemplate`]'s requests address.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RdmaRegion {
    /// Its first address.
    pub va: u64,
    /// Its length in bytes.
    pub len: u64,
    /// Its R_Key.
    pub rkey: Rkey,
}

/// The translator's per-frame hot path: a frame template for the RDMA requests of one queue
/// pair into one region (RDMA WRITE Only, with or without Immediate, of one payload length;
/// FETCH_ADD; COMPARE_SWAP), with the R_Key and DMA length already in place and the ICRC
/// computed by linearity.
///
/// A frame differs from its template in the BTH word holding AckReq and the PSN, the virtual
/// address, and its tail (the immediate and payload, or the atomic operands). The ICRC register
/// is the template's register with those zero ([`RdmaTemplate`] keeps it), XOR the share of the
/// PSN word and address (twelve table loads, [`icrc::WindowTables`]), XOR the register of the
/// tail from zero ([`RdmaTemplate::tail_reg`]), which the caller computes once for all the
/// frames that carry the same tail (a Key-Write's N replicas, a Key-Increment's N counters).
/// So a frame costs one copy of its head, a few stores and twelve table loads, whatever its
/// headers, and the CRC of its tail once per report. [`FrameTemplate`] computes the same bytes
/// the direct way (checked by the tests).
#[derive(Clone, Debug)]
pub struct RdmaTemplate {
    head: [u8; RDMA_HEAD_MAX],
    head_len: usize,
    payload_len: usize,
    frame_len: usize,
    kind: RdmaKind,
    /// The ICRC register of the frame with its PSN word and tail zero and the region's base
    /// address.
    base: u32,
    window: &'static icrc::WindowTables,
    /// The region's base address (the address in [`RdmaTemplate::base`]'s frame).
    va_base: u64,
    /// Every address in the region differs from the base in its low four bytes only.
    narrow: bool,
}

impl RdmaTemplate {
    /// A template for `opcode` (RC RDMA WRITE Only, WRITE Only with Immediate, FETCH_ADD or
    /// COMPARE_SWAP) towards `dest_qp`, into the region of `rkey`, with `payload_len`-byte
    /// payloads (0 for atomics). `None` for another opcode, a payload on an atomic, or a frame
    /// longer than the linear ICRC serves ([`icrc::MAX_WINDOW_DISTANCE`]): use
    /// [`FrameTemplate`] then.
    pub fn new(
        ep: &RoceEndpoint,
        opcode: u8,
        dest_qp: Qpn,
        region: RdmaRegion,
        payload_len: usize,
    ) -> Option<RdmaTemplate> {
        let RdmaRegion {
            va: va_base,
            len: region_len,
            rkey,
        } = region;
        let kind = match opcode {
            super::ib::opcode::RC_RDMA_WRITE_ONLY => RdmaKind::Write,
            super::ib::opcode::RC_RDMA_WRITE_ONLY_IMM => RdmaKind::WriteImm,
            super::ib::opcode::RC_FETCH_ADD | super::ib::opcode::RC_COMPARE_SWAP
                if payload_len == 0 =>
            {
                RdmaKind::Atomic
            }
            _ => return None,
        };
        let t = FrameTemplate::new(ep, opcode, dest_qp, payload_len);
        let frame_len = t.frame_len();
        let head_len = HEADERS_WITH_BTH + t.ext_len();
        let crc_end = frame_len - ICRC_LEN;
        let window = icrc::WindowTables::get(crc_end - (PSN_WORD_OFFSET + icrc::WINDOW_LEN))?;
        // The frame with every per-frame field zero: its head is what every frame copies, and
        // its ICRC register is the base the shares are added to.
        let mut zero = vec![0u8; frame_len];
        let ext = &mut zero[HEADERS_WITH_BTH..head_len];
        match kind {
            RdmaKind::Write | RdmaKind::WriteImm => RethRepr {
                va: va_base,
                rkey,
                dma_len: payload_len as u32,
            }
            .emit(&mut Reth::new_unchecked(&mut ext[..RETH_LEN])),
            RdmaKind::Atomic => AtomicEthRepr {
                va: va_base,
                rkey,
                swap_add: 0,
                compare: 0,
            }
            .emit(&mut AtomicEth::new_unchecked(ext)),
        }
        zero[..HEADERS_WITH_BTH].copy_from_slice(&t.headers);
        let base = IEEE.update(t.prefix_state, &zero[PSN_WORD_OFFSET..crc_end]);
        let mut head = [0u8; RDMA_HEAD_MAX];
        head[..head_len].copy_from_slice(&zero[..head_len]);
        // The addresses of the region share all but their low four bytes with the base when
        // its first and last byte do.
        let last = va_base.saturating_add(region_len.saturating_sub(1));
        Some(RdmaTemplate {
            head,
            head_len,
            payload_len,
            frame_len,
            kind,
            base,
            window,
            va_base,
            narrow: (va_base ^ last) >> 32 == 0,
        })
    }

    /// Length of every frame this template emits.
    #[inline]
    pub fn frame_len(&self) -> usize {
        self.frame_len
    }

    /// Payload length (without pad).
    #[inline]
    pub fn payload_len(&self) -> usize {
        self.payload_len
    }

    /// The register share of a WRITE's tail: the immediate (WRITE with Immediate only), the
    /// payload and the pad. Compute it once for frames that carry the same tail.
    ///
    /// Panics if `payload` is not `payload_len()` bytes, or `imm` is given to a plain WRITE
    /// template or missing from a WRITE with Immediate one (programming errors).
    #[inline]
    pub fn tail_reg(&self, imm: Option<u32>, payload: &[u8]) -> u32 {
        assert!(
            payload.len() == self.payload_len
                && imm.is_some() == (self.kind == RdmaKind::WriteImm)
                && self.kind != RdmaKind::Atomic
        );
        let mut reg = match imm {
            Some(v) => IEEE.update(0, &v.to_be_bytes()),
            None => 0,
        };
        reg = IEEE.update(reg, payload);
        for _ in 0..pad_len(payload.len()) {
            reg = IEEE.update_byte(reg, 0);
        }
        reg
    }

    /// The register share of an atomic's operands (swap or add, compare).
    #[inline]
    pub fn atomic_tail_reg(&self, swap_add: u64, compare: u64) -> u32 {
        assert!(self.kind == RdmaKind::Atomic);
        let ops = ((swap_add as u128) << 64 | compare as u128).to_be_bytes();
        IEEE.update(0, &ops)
    }

    /// The frame's ICRC from its PSN word, address and tail share. An address outside the
    /// region the template was made for costs the four lookups the narrow case leaves out.
    #[inline(always)]
    fn icrc(&self, word: [u8; 4], va: u64, tail_reg: u32) -> [u8; ICRC_LEN] {
        let dva = va ^ self.va_base;
        let narrow = self.narrow && dva >> 32 == 0;
        let share = self
            .window
            .share_word_va(u32::from_be_bytes(word), dva, narrow);
        (!(self.base ^ share ^ tail_reg)).to_le_bytes()
    }

    /// Writes the head, PSN word and address into `b`.
    #[inline(always)]
    fn put_head(&self, b: &mut [u8], word: [u8; 4], va: u64) {
        b[..RDMA_HEAD_MAX].copy_from_slice(&self.head);
        b[PSN_WORD_OFFSET..PSN_WORD_OFFSET + 4].copy_from_slice(&word);
        b[PSN_WORD_OFFSET + 4..PSN_WORD_OFFSET + 12].copy_from_slice(&va.to_be_bytes());
    }

    /// Emits a WRITE of `payload` to address `va` into `out`, and the same bytes into `copy`
    /// when given (the requester's retransmission copy). `tail_reg` is
    /// [`RdmaTemplate::tail_reg`]`(imm, payload)`. Returns the frame's length.
    ///
    /// Panics if `out` (or `copy`) is shorter than the longest head ([`RdmaTemplate`] copies
    /// its head whole) or than [`frame_len`](Self::frame_len), or on a payload of the wrong
    /// length.
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    pub fn emit_write(
        &self,
        out: &mut [u8],
        copy: Option<&mut [u8]>,
        psn: Psn,
        ack_req: bool,
        va: u64,
        imm: Option<u32>,
        payload: &[u8],
        tail_reg: u32,
    ) -> usize {
        assert!(payload.len() == self.payload_len && self.kind != RdmaKind::Atomic);
        let len = self.frame_len;
        let word = ((ack_req as u32) << 31 | psn.value()).to_be_bytes();
        let crc = self.icrc(word, va, tail_reg);
        let body = self.head_len;
        let end = body + payload.len();
        let put = |b: &mut [u8]| {
            let b = &mut b[..len.max(RDMA_HEAD_MAX)];
            self.put_head(b, word, va);
            if let Some(v) = imm {
                b[body - IMMDT_LEN..body].copy_from_slice(&v.to_be_bytes());
            }
            b[body..end].copy_from_slice(payload);
            // Pad and ICRC together are at least 4 bytes: one fixed-size store clears the pad
            // (the ICRC overwrites the rest).
            b[end..end + 4].copy_from_slice(&[0; 4]);
            b[len - ICRC_LEN..len].copy_from_slice(&crc);
        };
        put(out);
        if let Some(c) = copy {
            put(c);
        }
        len
    }

    /// [`RdmaTemplate::emit_write`] of a payload of at most [`PADDED_PAYLOAD`] bytes held at
    /// the start of a zero-filled block (`payload[payload_len()..]` must be zero: they become
    /// the pad), with fixed-size moves only: the head, the block and, into `copy`, the frame.
    /// `tail_reg` is [`RdmaTemplate::padded_tail_reg`]. Both buffers need
    /// [`RDMA_PADDED_ROOM`] bytes; what lies past the frame in them is unspecified.
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    pub fn emit_write_padded(
        &self,
        out: &mut [u8],
        copy: Option<&mut [u8]>,
        psn: Psn,
        ack_req: bool,
        va: u64,
        imm: Option<u32>,
        payload: &[u8; PADDED_PAYLOAD],
        tail_reg: u32,
    ) -> usize {
        assert!(self.payload_len <= PADDED_PAYLOAD && self.kind != RdmaKind::Atomic);
        debug_assert!(payload[self.payload_len..].iter().all(|&b| b == 0));
        let len = self.frame_len;
        let word = ((ack_req as u32) << 31 | psn.value()).to_be_bytes();
        let crc = self.icrc(word, va, tail_reg);
        let b: &mut [u8; RDMA_PADDED_ROOM] = (&mut out[..RDMA_PADDED_ROOM])
            .try_into()
            .expect("room for a padded frame");
        self.put_head(b, word, va);
        let body = self.head_len;
        if let Some(v) = imm {
            b[body - IMMDT_LEN..body].copy_from_slice(&v.to_be_bytes());
        }
        let block: &mut [u8; PADDED_PAYLOAD] = (&mut b[body..body + PADDED_PAYLOAD])
            .try_into()
            .expect("within the room");
        *block = *payload;
        b[len - ICRC_LEN..len].copy_from_slice(&crc);
        if let Some(c) = copy {
            let c: &mut [u8; RDMA_PADDED_ROOM] = (&mut c[..RDMA_PADDED_ROOM])
                .try_into()
                .expect("room for a padded frame");
            // Whole 32-byte moves up to the frame's end.
            for (d, s) in c
                .chunks_exact_mut(32)
                .zip(b.chunks_exact(32))
                .take(len.div_ceil(32))
            {
                let d: &mut [u8; 32] = d.try_into().expect("32 bytes");
                *d = s.try_into().expect("32 bytes");
            }
        }
        len
    }

    /// [`RdmaTemplate::tail_reg`] of a payload held at the start of a zero-filled block
    /// ([`RdmaTemplate::emit_write_padded`]): its pad comes from the block.
    #[inline]
    pub fn padded_tail_reg(&self, imm: Option<u32>, payload: &[u8; PADDED_PAYLOAD]) -> u32 {
        assert!(
            self.payload_len <= PADDED_PAYLOAD
                && imm.is_some() == (self.kind == RdmaKind::WriteImm)
                && self.kind != RdmaKind::Atomic
        );
        let reg = match imm {
            Some(v) => IEEE.update(0, &v.to_be_bytes()),
            None => 0,
        };
        IEEE.update(
            reg,
            &payload[..self.payload_len + pad_len(self.payload_len)],
        )
    }

    /// Emits an atomic (FETCH_ADD or COMPARE_SWAP, as the template) at address `va` into
    /// `out`, and into `copy` when given. `tail_reg` is
    /// [`RdmaTemplate::atomic_tail_reg`]`(swap_add, compare)`. Returns the frame's length.
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    pub fn emit_atomic(
        &self,
        out: &mut [u8],
        copy: Option<&mut [u8]>,
        psn: Psn,
        ack_req: bool,
        va: u64,
        swap_add: u64,
        compare: u64,
        tail_reg: u32,
    ) -> usize {
        assert!(self.kind == RdmaKind::Atomic);
        let len = self.frame_len;
        let word = ((ack_req as u32) << 31 | psn.value()).to_be_bytes();
        let crc = self.icrc(word, va, tail_reg);
        let ops = ((swap_add as u128) << 64 | compare as u128).to_be_bytes();
        let at = self.head_len - 16;
        let put = |b: &mut [u8]| {
            let b = &mut b[..len.max(RDMA_HEAD_MAX)];
            self.put_head(b, word, va);
            b[at..at + 16].copy_from_slice(&ops);
            b[len - ICRC_LEN..len].copy_from_slice(&crc);
        };
        put(out);
        if let Some(c) = copy {
            put(c);
        }
        len
    }
}

/// A view of a complete RoCEv2 frame this host built (Ethernet, a 20-byte IPv4 header, UDP,
/// BTH, ...): what a requester needs to hold frames for retransmission without storing their
/// lengths, and to ask for an ACK on a frame it already sealed.
///
/// The buffer may be longer than the frame (a fixed-size slot); [`RoceFrame::len`] reads the
/// frame's length from its IPv4 total length. Use [`RoceFrame::new_checked`] on bytes of
/// unknown origin.
#[derive(Debug, Clone, Copy)]
pub struct RoceFrame<T: AsRef<[u8]>> {
    buffer: T,
}

/// Frame offset of the IPv4 total length.
const IP_TOTAL_LEN_OFFSET: usize = ethernet::HEADER_LEN + 2;

impl<T: AsRef<[u8]>> RoceFrame<T> {
    /// Wraps a buffer holding a frame built by [`FrameTemplate`] or [`build_frame`].
    #[inline]
    pub const fn new_unchecked(buffer: T) -> RoceFrame<T> {
        RoceFrame { buffer }
    }

    /// Wraps `buffer` after checking that it holds a whole IPv4 (no options) RoCEv2 frame:
    /// long enough for its headers and ICRC, and for the length its IPv4 header states.
    pub fn new_checked(buffer: T) -> Result<RoceFrame<T>> {
        let f = RoceFrame { buffer };
        let b = f.buffer.as_ref();
        if b.len() < HEADERS_WITH_BTH + ICRC_LEN {
            return Err(Error::Truncated);
        }
        if b[ethernet::HEADER_LEN] != 0x45 {
            return Err(Error::Malformed);
        }
        let len = f.len();
        if len < HEADERS_WITH_BTH + ICRC_LEN || len > b.len() {
            return Err(Error::Truncated);
        }
        Ok(f)
    }

    /// The frame's length (Ethernet header + IPv4 total length).
    #[inline]
    pub fn len(&self) -> usize {
        let b = self.buffer.as_ref();
        ethernet::HEADER_LEN
            + u16::from_be_bytes([b[IP_TOTAL_LEN_OFFSET], b[IP_TOTAL_LEN_OFFSET + 1]]) as usize
    }

    /// True for a frame of no bytes (never, for a checked frame).
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The frame's bytes (without any slack after it).
    #[inline]
    pub fn bytes(&self) -> &[u8] {
        &self.buffer.as_ref()[..self.len()]
    }

    /// The BTH opcode.
    #[inline]
    pub fn opcode(&self) -> u8 {
        Bth::new_unchecked(&self.buffer.as_ref()[BTH_OFFSET..]).opcode()
    }

    /// The BTH PSN.
    #[inline]
    pub fn psn(&self) -> Psn {
        Bth::new_unchecked(&self.buffer.as_ref()[BTH_OFFSET..]).psn()
    }

    /// The BTH AckReq bit.
    #[inline]
    pub fn ack_req(&self) -> bool {
        Bth::new_unchecked(&self.buffer.as_ref()[BTH_OFFSET..]).ack_req()
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> RoceFrame<T> {
    /// Sets AckReq and reseals the ICRC (a no-op if it is already set).
    pub fn set_ack_req(&mut self) {
        if self.ack_req() {
            return;
        }
        let len = self.len();
        let psn = self.psn();
        let b = &mut self.buffer.as_mut()[..len];
        Bth::new_unchecked(&mut b[BTH_OFFSET..]).set_ack_req_psn(true, psn);
        let icrc_at = len - ICRC_LEN;
        let (ip, udp) = l3l4_headers(b);
        let crc = icrc::icrc_ipv4(&ip, &udp, &b[L2L4_LEN..icrc_at]);
        b[icrc_at..].copy_from_slice(&crc.to_le_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::ib::{opcode, opcode as op, Rkey, Syndrome};
    use proptest::prelude::*;

    fn ep() -> RoceEndpoint {
        RoceEndpoint {
            src_mac: MacAddr([0xb8, 0xce, 0xf6, 0xd2, 0x13, 0x26]),
            dst_mac: MacAddr([0xb8, 0xce, 0xf6, 0xd2, 0x12, 0xc7]),
            src_ip: Ipv4Addr::new(10, 0, 0, 101),
            dst_ip: Ipv4Addr::new(10, 0, 0, 51),
            src_port: 10000,
            ..RoceEndpoint::default()
        }
    }

    fn known_opcodes() -> Vec<u8> {
        (0..=255u8)
            .filter(|&op| opcode_info(op).is_some())
            .collect()
    }

    fn arb_packet() -> impl Strategy<Value = (u8, Vec<u8>, Vec<u8>, u32, u32, bool)> {
        (
            proptest::sample::select(known_opcodes()),
            proptest::collection::vec(any::<u8>(), 40),
            proptest::collection::vec(any::<u8>(), 0..40),
            0u32..1 << 24,
            0u32..1 << 24,
            any::<bool>(),
        )
    }

    fn bth(op: u8, qp: u32, psn: u32, ack_req: bool) -> BthRepr {
        BthRepr::rc(op, Qpn::new(qp), Psn::new(psn), ack_req)
    }

    #[test]
    fn pad_and_lengths() {
        assert_eq!([0, 1, 2, 3, 4, 5].map(pad_len), [0, 3, 2, 1, 0, 3]);
        assert_eq!(frame_len(RETH_LEN, 8), 14 + 68);
        assert_eq!(frame_len(ATOMIC_ETH_LEN, 0), 14 + 20 + 8 + 12 + 28 + 4);
        assert_eq!(L2L4_LEN, 42);
    }

    #[test]
    fn parse_rejections() {
        let mut t = [0u8; 12 + 16 + 8 + 4];
        t[0] = opcode::RC_RDMA_WRITE_ONLY;
        assert!(RocePacket::parse(&t).is_ok());
        assert_eq!(RocePacket::parse(&t[..15]), Err(Error::Truncated));
        assert_eq!(RocePacket::parse(&t[..12 + 15 + 4]), Err(Error::Truncated));
        t[1] = 0x01; // TVer 1
        assert_eq!(RocePacket::parse(&t), Err(Error::Malformed));
        t[1] = 0x30; // pad 3 of an 8-byte padded payload
        assert_eq!(RocePacket::parse(&t).unwrap().payload.len(), 5);
        t[0] = 0x15;
        assert_eq!(RocePacket::parse(&t), Err(Error::UnknownOpcode));
        let mut a = [0u8; 12 + 28 + 4];
        a[0] = opcode::RC_FETCH_ADD;
        assert!(RocePacket::parse(&a).is_ok());
        a[1] = 0x10; // pad on a payload-less opcode
        assert_eq!(RocePacket::parse(&a), Err(Error::Malformed));
        let mut a = [0u8; 12 + 28 + 4 + 4]; // the reference's stray 4 bytes after the AtomicETH
        a[0] = opcode::RC_FETCH_ADD;
        assert_eq!(RocePacket::parse(&a), Err(Error::Malformed));
        let mut s = [0u8; 12 + 1 + 4];
        s[0] = opcode::RC_SEND_ONLY;
        s[1] = 0x20; // pad 2 > 1-byte payload
        assert_eq!(RocePacket::parse(&s), Err(Error::Malformed));
    }

    #[test]
    fn ack_and_atomic_ack_parse() {
        let mut t = [0u8; 12 + 4 + 8 + 4];
        t[0] = opcode::RC_ATOMIC_ACKNOWLEDGE;
        t[12] = 0x1F;
        t[13..16].copy_from_slice(&[0, 0, 7]);
        t[16..24].copy_from_slice(&42u64.to_be_bytes());
        t[24..].copy_from_slice(&0xAABBCCDDu32.to_le_bytes());
        let p = RocePacket::parse(&t).unwrap();
        assert_eq!(p.aeth.unwrap().syndrome, Syndrome::ACK_NO_CREDITS);
        assert_eq!(p.aeth.unwrap().msn, 7);
        assert_eq!(p.atomic_ack.unwrap().orig, 42);
        assert_eq!(p.icrc, 0xAABBCCDD);
        assert!(p.payload.is_empty());
    }

    proptest! {
        /// Emitting into two buffers at once gives the frame a single emit gives, twice.
        #[test]
        fn emit_twice_equals_emit(
            imm in proptest::option::of(any::<u32>()),
            payload in proptest::collection::vec(any::<u8>(), 0..600),
            psn in 0u32..1 << 24,
            ack in any::<bool>(),
            va in any::<u64>(),
            rkey in any::<u32>(),
        ) {
            let op = if imm.is_some() {
                opcode::RC_RDMA_WRITE_ONLY_IMM
            } else {
                opcode::RC_RDMA_WRITE_ONLY
            };
            let t = FrameTemplate::new(&ep(), op, Qpn::new(0x11), payload.len());
            let reth = RethRepr { va, rkey: Rkey(rkey), dma_len: payload.len() as u32 };
            let mut one = vec![0xAAu8; t.frame_len()];
            t.emit_write(&mut one, Psn::new(psn), ack, &reth, imm, &payload);
            let (mut a, mut b) = (vec![0x55u8; t.frame_len()], vec![0x33u8; t.frame_len() + 9]);
            let n = t.emit_write_twice(&mut a, &mut b, Psn::new(psn), ack, &reth, imm, &payload);
            prop_assert_eq!(n, t.frame_len());
            prop_assert_eq!(&a, &one);
            prop_assert_eq!(&b[..n], &one[..]);
            prop_assert!(crate::icrc::check_frame(&a));
        }
    }

    #[test]
    fn atomic_emit_twice_equals_emit() {
        let t = FrameTemplate::new(&ep(), opcode::RC_FETCH_ADD, Qpn::new(0x11), 0);
        let atomic = AtomicEthRepr {
            va: 0x7f00_0000_0040,
            rkey: Rkey(9),
            swap_add: 12345,
            compare: 0,
        };
        let mut one = [0u8; 128];
        let n = t.emit_atomic(&mut one, Psn::new(3), true, &atomic);
        let (mut a, mut b) = ([0u8; 128], [0u8; 128]);
        assert_eq!(
            t.emit_atomic_twice(&mut a, &mut b, Psn::new(3), true, &atomic),
            n
        );
        assert_eq!((&a[..n], &b[..n]), (&one[..n], &one[..n]));
    }

    #[test]
    fn endpoint_reversed() {
        let e = ep();
        let r = e.reversed();
        assert_eq!((r.src_mac, r.dst_mac), (e.dst_mac, e.src_mac));
        assert_eq!((r.src_ip, r.dst_ip), (e.dst_ip, e.src_ip));
        assert_eq!((r.src_port, r.dst_port), (4791, 10000));
        assert_eq!(r.reversed(), e);
    }

    #[test]
    #[should_panic]
    fn template_rejects_payload_on_ack() {
        FrameTemplate::new(&ep(), opcode::RC_ACKNOWLEDGE, Qpn::new(1), 4);
    }

    proptest! {
        #[test]
        fn packet_round_trip((op, ext, payload, qp, psn, ack) in arb_packet(), icrc in any::<u32>()) {
            let info = opcode_info(op).unwrap();
            let payload: &[u8] = if info.has_payload { &payload } else { &[] };
            let mut t = vec![0u8; 12];
            BthRepr { pad_count: pad_len(payload.len()) as u8, ..bth(op, qp, psn, ack) }
                .emit(&mut Bth::new_unchecked(&mut t[..]));
            t.extend_from_slice(&ext[..info.ext_len()]);
            t.extend_from_slice(payload);
            t.resize(t.len() + pad_len(payload.len()), 0);
            t.extend_from_slice(&icrc.to_le_bytes());
            // DETH's reserved byte is zeroed on emit; everything else is reproduced exactly.
            if info.deth { t[12 + 4] = 0; }
            let p = RocePacket::parse(&t).unwrap();
            prop_assert_eq!(p.payload, payload);
            prop_assert_eq!(p.icrc, icrc);
            prop_assert_eq!(p.ext_len(), info.ext_len());
            let mut out = vec![0u8; p.buffer_len()];
            prop_assert_eq!(p.emit(&mut out), t.len());
            prop_assert_eq!(&out, &t);
            prop_assert_eq!(RocePacket::parse(&out).unwrap(), p);
        }

        #[test]
        fn rdma_template_matches_the_direct_way(
            which in 0usize..4, qp in 0u32..(1 << 24), rkey in any::<u32>(),
            payload in proptest::collection::vec(any::<u8>(), 0..1100),
            psn in 0u32..(1 << 24), ack in any::<bool>(), va in any::<u64>(), imm in any::<u32>(),
            swap in any::<u64>(), compare in any::<u64>(), ident in any::<u16>(),
            garbage in any::<u8>(), va_base_shift in 0u8..3, region_len in 1u64..(1 << 33)) {
            let e = RoceEndpoint { ident, ..ep() };
            let op = [op::RC_RDMA_WRITE_ONLY, op::RC_RDMA_WRITE_ONLY_IMM, op::RC_FETCH_ADD,
                      op::RC_COMPARE_SWAP][which];
            let atomic = which >= 2;
            let payload: &[u8] = if atomic { &[] } else { &payload };
            let region = RdmaRegion { va: va & !0xFFFF_FFFF ^ (va_base_shift as u64) << 32, len: region_len, rkey: Rkey(rkey) };
            let t = RdmaTemplate::new(&e, op, Qpn::new(qp), region, payload.len()).unwrap();
            let direct = FrameTemplate::new(&e, op, Qpn::new(qp), payload.len());
            prop_assert_eq!(t.frame_len(), direct.frame_len());
            let len = t.frame_len().max(RDMA_HEAD_MAX);
            let (mut a, mut a2, mut b) = (vec![garbage; len], vec![!garbage; len], vec![0u8; len]);
            let psn = Psn::new(psn);
            let n = if atomic {
                let r = t.atomic_tail_reg(swap, compare);
                let atom = AtomicEthRepr { va, rkey: Rkey(rkey), swap_add: swap, compare };
                direct.emit_atomic(&mut b, psn, ack, &atom);
                t.emit_atomic(&mut a, Some(&mut a2), psn, ack, va, swap, compare, r)
            } else {
                let imm = (which == 1).then_some(imm);
                let r = t.tail_reg(imm, payload);
                let reth = RethRepr { va, rkey: Rkey(rkey), dma_len: payload.len() as u32 };
                direct.emit_write(&mut b, psn, ack, &reth, imm, payload);
                t.emit_write(&mut a, Some(&mut a2), psn, ack, va, imm, payload, r)
            };
            prop_assert_eq!(n, direct.frame_len());
            prop_assert_eq!(&a[..n], &b[..n]);
            prop_assert_eq!(&a2[..n], &b[..n]);
            if !atomic && payload.len() <= PADDED_PAYLOAD {
                let mut block = [0u8; PADDED_PAYLOAD];
                block[..payload.len()].copy_from_slice(payload);
                let imm = (which == 1).then_some(imm);
                let r = t.padded_tail_reg(imm, &block);
                prop_assert_eq!(r, t.tail_reg(imm, payload));
                let (mut p, mut p2) = (vec![garbage; RDMA_PADDED_ROOM], vec![!garbage; RDMA_PADDED_ROOM]);
                let m = t.emit_write_padded(&mut p, Some(&mut p2), psn, ack, va, imm, &block, r);
                prop_assert_eq!(m, n);
                prop_assert_eq!(&p[..n], &b[..n]);
                prop_assert_eq!(&p2[..n], &b[..n]);
            }
            // The ICRC by a bit-serial CRC that shares no code with either fast path.
            let f = parse_frame(&a[..n]).unwrap();
            let mut masked = vec![0xFFu8; 8];
            masked.extend_from_slice(&a[ethernet::HEADER_LEN..n - ICRC_LEN]);
            for i in [1, 8, 10, 11] {
                masked[8 + i] = 0xFF;
            }
            masked[8 + 20 + 6] = 0xFF;
            masked[8 + 20 + 7] = 0xFF;
            masked[8 + 28 + 4] = 0xFF;
            let mut reg = 0xFFFF_FFFFu32;
            for &byte in &masked {
                reg ^= byte as u32;
                for _ in 0..8 {
                    reg = if reg & 1 != 0 { (reg >> 1) ^ 0xEDB8_8320 } else { reg >> 1 };
                }
            }
            prop_assert_eq!(!reg, u32::from_le_bytes(a[n - 4..n].try_into().unwrap()));
            prop_assert_eq!(f.roce.bth.psn, psn);
        }

        #[test]
        fn template_matches_build_frame((op, ext, payload, qp, psn, ack) in arb_packet(),
                                        ident in any::<u16>(), ttl in any::<u8>(), tos in any::<u8>(),
                                        garbage in any::<u8>()) {
            let info = opcode_info(op).unwrap();
            let payload: &[u8] = if info.has_payload { &payload } else { &[] };
            let ext = &ext[..info.ext_len()];
            let e = RoceEndpoint { ident, ttl, tos, ..ep() };
            let tpl = FrameTemplate::new(&e, op, Qpn::new(qp), payload.len());
            prop_assert_eq!(tpl.opcode(), op);
            prop_assert_eq!(tpl.dest_qp(), Qpn::new(qp));
            let mut a = vec![garbage; tpl.frame_len() + 3];
            let n = tpl.emit(&mut a, Psn::new(psn), ack, |b| {
                assert_eq!(b.len(), ext.len() + payload.len());
                b[..ext.len()].copy_from_slice(ext);
                b[ext.len()..].copy_from_slice(payload);
            });
            let mut b = vec![0u8; n];
            let m = build_frame(&e, &bth(op, qp, psn, ack), ext, payload, &mut b);
            prop_assert_eq!(n, m);
            prop_assert_eq!(&a[..n], &b[..]);
            prop_assert!(icrc::check_frame(&b));
            let f = parse_frame(&b).unwrap();
            prop_assert_eq!(f.roce.payload, payload);
            prop_assert_eq!(f.roce.bth.psn, Psn::new(psn));
            prop_assert_eq!(f.roce.bth.ack_req, ack);
            prop_assert_eq!(f.ip.ident, ident);
            prop_assert!(f.ip.dont_frag);
            prop_assert_eq!((f.udp.src_port, f.udp.dst_port), (10000, 4791));
            prop_assert_eq!(f.transport, &b[L2L4_LEN..]);
            // A real UDP checksum is honoured when present.
            let mut u = b.clone();
            UdpPacket::new_unchecked(&mut u[34..]).fill_checksum(e.src_ip, e.dst_ip);
            prop_assert!(parse_frame(&u).is_ok());
            u[n - 1] ^= 0x80;
            prop_assert_eq!(parse_frame(&u).unwrap_err(), Error::Malformed);
            // Corrupting any byte outside the masked fields breaks the ICRC.
            let mut c = b.clone();
            c[n - 5] ^= 0x01;
            prop_assert!(!icrc::check_frame(&c));
        }

        #[test]
        fn emit_reth_and_atomic(va in any::<u64>(), rkey in any::<u32>(), payload in proptest::collection::vec(any::<u8>(), 0..70),
                                sa in any::<u64>(), psn in any::<u32>()) {
            let reth = RethRepr { va, rkey: Rkey(rkey), dma_len: payload.len() as u32 };
            let tpl = FrameTemplate::new(&ep(), opcode::RC_RDMA_WRITE_ONLY, Qpn::new(0xABC), payload.len());
            let mut a = vec![0u8; tpl.frame_len()];
            tpl.emit_reth(&mut a, Psn::new(psn), false, &reth, &payload);
            let f = parse_frame(&a).unwrap();
            prop_assert_eq!(f.roce.reth, Some(reth));
            prop_assert_eq!(f.roce.payload, &payload[..]);
            prop_assert_eq!(&a[tpl.payload_offset()..tpl.payload_offset() + payload.len()], &payload[..]);
            prop_assert!(icrc::check_frame(&a));

            let at = AtomicEthRepr { va, rkey: Rkey(rkey), swap_add: sa, compare: 0 };
            let tpl = FrameTemplate::new(&ep(), opcode::RC_FETCH_ADD, Qpn::new(0xABC), 0);
            let mut a = vec![0u8; tpl.frame_len()];
            prop_assert_eq!(tpl.emit_atomic(&mut a, Psn::new(psn), true, &at), 14 + 20 + 8 + 12 + 28 + 4);
            let f = parse_frame(&a).unwrap();
            prop_assert_eq!(f.roce.atomic, Some(at));
            prop_assert!(f.roce.bth.ack_req);
            prop_assert!(icrc::check_frame(&a));
        }

        #[test]
        fn parse_never_panics(buf in proptest::collection::vec(any::<u8>(), 0..96)) {
            let _ = RocePacket::parse(&buf);
            let _ = parse_frame(&buf);
        }

        #[test]
        fn parse_never_panics_on_near_packets((op, ext, payload, qp, psn, ack) in arb_packet(),
                                              cut in 0usize..120, flip in 0usize..120, x in any::<u8>()) {
            let mut f = vec![0u8; frame_len(ext.len(), payload.len())];
            let n = build_frame(&ep(), &bth(op, qp, psn, ack), &ext, &payload, &mut f);
            f[flip % n] ^= x;
            let f = &f[..cut.min(n)];
            let _ = parse_frame(f);
            let _ = RocePacket::parse(f.get(L2L4_LEN..).unwrap_or(&[]));
            let _ = icrc::check_frame(f);
        }
    }

    #[test]
    fn roce_frame_view_reads_and_reseals_own_frames() {
        let t = FrameTemplate::new(&ep(), opcode::RC_RDMA_WRITE_ONLY, Qpn::new(0x11), 8);
        let mut slot = [0u8; 256];
        let n = t.emit(&mut slot, Psn::new(77), false, |ext| ext.fill(0x5a));
        let mut f = RoceFrame::new_checked(&mut slot[..]).expect("a whole frame");
        assert_eq!((f.len(), f.psn(), f.ack_req()), (n, Psn::new(77), false));
        assert_eq!(f.opcode(), opcode::RC_RDMA_WRITE_ONLY);
        assert!(icrc::check_frame(f.bytes()));
        f.set_ack_req();
        let mut want = [0u8; 256];
        let m = t.emit(&mut want, Psn::new(77), true, |ext| ext.fill(0x5a));
        assert_eq!(
            f.bytes(),
            &want[..m],
            "the same bytes as a frame built with AckReq"
        );
        let g = f.bytes().to_vec();
        for cut in 0..g.len() {
            assert!(RoceFrame::new_checked(&g[..cut]).is_err(), "cut {cut}");
        }
        let mut bad = g.clone();
        bad[ethernet::HEADER_LEN] = 0x46;
        assert!(RoceFrame::new_checked(&bad[..]).is_err(), "IPv4 options");
    }

    #[test]
    fn typed_write_emitter_matches_the_field_layout() {
        let reth = RethRepr {
            va: 0x7f00_0000_1234,
            rkey: Rkey(0x95),
            dma_len: 8,
        };
        for (op, imm) in [
            (opcode::RC_RDMA_WRITE_ONLY, None),
            (opcode::RC_RDMA_WRITE_ONLY_IMM, Some(0xdead_beef)),
        ] {
            let t = FrameTemplate::new(&ep(), op, Qpn::new(0x11), 8);
            let mut a = [0u8; 256];
            let n = t.emit_write(
                &mut a,
                Psn::new(5),
                true,
                &reth,
                imm,
                &[1, 2, 3, 4, 5, 6, 7, 8],
            );
            let p = parse_frame(&a[..n]).unwrap();
            assert_eq!(p.roce.reth, Some(reth));
            assert_eq!(p.roce.imm, imm);
            assert_eq!(p.roce.payload, &[1, 2, 3, 4, 5, 6, 7, 8]);
            assert!(icrc::check_frame(&a[..n]));
        }
    }
}
