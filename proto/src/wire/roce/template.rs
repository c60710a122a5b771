//! [`FrameTemplate`]: a precomputed frame for one (endpoint, BTH, payload length), the direct
//! way (the CRC register over the constant prefix kept, the variable tail's CRC computed per
//! frame). The translator's general per-frame path and the reference [`super::RdmaTemplate`]
//! is checked against. Owns no offsets: they are [`super`]'s `field`.

use super::field::{self, HEADERS_WITH_BTH};
use super::{frame_len, l3l4_headers, pad_len, write_headers, RoceEndpoint, L2L4_LEN};
use crate::crc::IEEE;
use crate::icrc;
use crate::wire::ethernet;
use crate::wire::ib::{
    opcode_info, AtomicEth, AtomicEthRepr, Bth, BthRepr, ImmDt, Psn, Qpn, Reth, RethRepr,
    ATOMIC_ETH_LEN, ICRC_LEN, IMMDT_LEN, RETH_LEN,
};

/// A precomputed frame for one (endpoint, BTH, payload length): the translator's hot path.
///
/// Holds the Ethernet, IPv4 (with checksum), UDP and BTH bytes, and the ICRC register after the
/// constant prefix (the eight 0xFF bytes, the masked IPv4 and UDP headers and BTH bytes 0..8).
/// [`emit`](Self::emit) then only copies, lets the caller write the extension headers and
/// payload in place, sets AckReq and the PSN and finishes the CRC over the variable tail. No
/// allocation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FrameTemplate {
    /// Ethernet, IPv4, UDP and BTH (AckReq and PSN zero).
    pub(super) headers: [u8; HEADERS_WITH_BTH],
    /// The ICRC register after the constant prefix.
    pub(super) prefix_state: u32,
    /// The ICRC register after the eight 0xFF bytes and the masked IPv4 and UDP headers
    /// (before the BTH): where [`FrameTemplate::emit`] starts the folds.
    l4_state: u32,
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
            icrc::masked_prefix_state(&ip, &udp, &headers[field::BTH..field::PSN_WORD.start]);
        let l4_state = icrc::masked_prefix_state(&ip, &udp, &[]);
        FrameTemplate {
            headers,
            prefix_state,
            l4_state,
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
        self.headers[field::BTH]
    }

    /// The BTH destination QP.
    #[inline]
    pub fn dest_qp(&self) -> Qpn {
        Bth::new_unchecked(&self.headers[field::BTH..]).dest_qp()
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
        out[field::PSN_WORD].copy_from_slice(&word.to_be_bytes());
        // Where the CPU has carry-less multiplication and the transport is at least 16 bytes
        // (an ACK is exactly that), the whole transport is folded 16 bytes at a time from the
        // register before the BTH ([`icrc::residue_fold`], BTH byte 4 masked as the ICRC
        // wants); otherwise the tables take the variable tail after the constant prefix.
        // Both give the same ICRC.
        let crc = match icrc::residue_fold(self.l4_state, &out[field::BTH..icrc_at]) {
            Some(reg) => !reg,
            None => !IEEE.update(self.prefix_state, &out[field::PSN_WORD.start..icrc_at]),
        };
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
            b[field::PSN_WORD].copy_from_slice(&word);
        }
        let crc =
            (!IEEE.update(self.prefix_state, &out[field::PSN_WORD.start..icrc_at])).to_le_bytes();
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
