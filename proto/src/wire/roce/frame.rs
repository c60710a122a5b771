//! [`RoceFrame`]: a view of a whole frame this host built, for a requester's retransmission
//! queue (its length from the IPv4 header, its PSN and AckReq, resealing the ICRC when AckReq
//! is set). Owns no offsets: they are [`super`]'s `field`.

use super::field::{self, HEADERS_WITH_BTH};
use super::{l3l4_headers, L2L4_LEN};
use crate::icrc;
use crate::wire::ethernet;
use crate::wire::ib::{Bth, Psn, ICRC_LEN};
use crate::wire::{Error, Result};

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
        if b[field::IPV4_VERSION_IHL] != 0x45 {
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
            + u16::from_be_bytes([
                b[field::IPV4_TOTAL_LEN.start],
                b[field::IPV4_TOTAL_LEN.start + 1],
            ]) as usize
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
        Bth::new_unchecked(&self.buffer.as_ref()[field::BTH..]).opcode()
    }

    /// The BTH PSN.
    #[inline]
    pub fn psn(&self) -> Psn {
        Bth::new_unchecked(&self.buffer.as_ref()[field::BTH..]).psn()
    }

    /// The BTH AckReq bit.
    #[inline]
    pub fn ack_req(&self) -> bool {
        Bth::new_unchecked(&self.buffer.as_ref()[field::BTH..]).ack_req()
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
        Bth::new_unchecked(&mut b[field::BTH..]).set_ack_req_psn(true, psn);
        let icrc_at = len - ICRC_LEN;
        let (ip, udp) = l3l4_headers(b);
        let crc = icrc::icrc_ipv4(&ip, &udp, &b[L2L4_LEN..icrc_at]);
        b[icrc_at..].copy_from_slice(&crc.to_le_bytes());
    }
}
