//! InfiniBand transport headers as RoCEv2 carries them: BTH, RETH, AtomicETH, AtomicAckETH,
//! AETH, ImmDt and DETH, plus the 24-bit PSN and QPN types.
//!
//! All multi-byte fields are big-endian. Which extension headers follow the BTH is fixed by the
//! opcode ([`opcode_info`]); the spec's order is DETH, RETH, AtomicETH, AETH, AtomicAckETH,
//! ImmDt, then the payload, pad bytes (to a multiple of 4) and the 4-byte ICRC.
//!
//! Rooms: this module owns the lengths, [`Psn`], [`Qpn`], [`Rkey`], the opcode table and the
//! big-endian helpers the views share; each header has its own module with a view, a Repr
//! and a private `field` module that is the only home of its byte offsets: `bth`, `reth`,
//! `atomic` (AtomicETH and AtomicAckETH), `aeth` (with the syndrome and NAK codes), `immdt` and
//! `deth`. Frames (which headers follow which, the ICRC) are [`super::roce`]'s.

use core::fmt;

/// Base Transport Header length.
pub const BTH_LEN: usize = 12;
/// RDMA Extended Transport Header length.
pub const RETH_LEN: usize = 16;
/// Atomic Extended Transport Header length.
pub const ATOMIC_ETH_LEN: usize = 28;
/// Atomic Acknowledge Extended Transport Header length.
pub const ATOMIC_ACK_ETH_LEN: usize = 8;
/// ACK Extended Transport Header length.
pub const AETH_LEN: usize = 4;
/// Immediate data length.
pub const IMMDT_LEN: usize = 4;
/// Datagram Extended Transport Header length.
pub const DETH_LEN: usize = 8;
/// Invariant CRC length.
pub const ICRC_LEN: usize = 4;

const MASK24: u32 = 0x00FF_FFFF;

/// A 24-bit packet sequence number with wrapping arithmetic.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Default)]
pub struct Psn(u32);

impl Psn {
    /// The largest PSN, after which the sequence wraps to 0.
    pub const MAX: Psn = Psn(MASK24);

    /// A PSN from the low 24 bits of `v`.
    #[inline]
    pub const fn new(v: u32) -> Psn {
        Psn(v & MASK24)
    }

    /// The 24-bit value.
    #[inline]
    pub const fn value(self) -> u32 {
        self.0
    }

    /// The following PSN (wrapping).
    #[inline]
    pub const fn next(self) -> Psn {
        self.add(1)
    }

    /// `self + n` modulo 2^24.
    // The name is fixed by the crate's API; a `u32` offset is not an `Add<Psn>`.
    #[allow(clippy::should_implement_trait)]
    #[inline]
    pub const fn add(self, n: u32) -> Psn {
        Psn(self.0.wrapping_add(n) & MASK24)
    }

    /// `self - n` modulo 2^24.
    #[allow(clippy::should_implement_trait)]
    #[inline]
    pub const fn sub(self, n: u32) -> Psn {
        Psn(self.0.wrapping_sub(n) & MASK24)
    }

    /// Signed distance `self - other` in the 24-bit circle, in (−2^23, 2^23]: positive when
    /// `self` is ahead. `Psn::new(1).diff(Psn::new(0xFFFFFF)) == 2`.
    #[inline]
    pub const fn diff(self, other: Psn) -> i32 {
        let d = self.0.wrapping_sub(other.0) & MASK24;
        if d > 1 << 23 {
            d as i32 - (1 << 24)
        } else {
            d as i32
        }
    }
}

impl fmt::Display for Psn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// A 24-bit queue pair number.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Default)]
pub struct Qpn(u32);

impl Qpn {
    /// QP1, the General Services Interface that carries CM MADs.
    pub const GSI: Qpn = Qpn(1);

    /// A QPN from the low 24 bits of `v`.
    #[inline]
    pub const fn new(v: u32) -> Qpn {
        Qpn(v & MASK24)
    }

    /// The 24-bit value.
    #[inline]
    pub const fn value(self) -> u32 {
        self.0
    }
}

impl fmt::Display for Qpn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:#x}", self.0)
    }
}

/// A memory region's remote key.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Default)]
pub struct Rkey(pub u32);

/// BTH opcodes: the RC set (0x00..=0x14) and the two UD sends.
pub mod opcode {
    /// RC SEND First.
    pub const RC_SEND_FIRST: u8 = 0x00;
    /// RC SEND Middle.
    pub const RC_SEND_MIDDLE: u8 = 0x01;
    /// RC SEND Last.
    pub const RC_SEND_LAST: u8 = 0x02;
    /// RC SEND Last with Immediate.
    pub const RC_SEND_LAST_IMM: u8 = 0x03;
    /// RC SEND Only.
    pub const RC_SEND_ONLY: u8 = 0x04;
    /// RC SEND Only with Immediate.
    pub const RC_SEND_ONLY_IMM: u8 = 0x05;
    /// RC RDMA WRITE First.
    pub const RC_RDMA_WRITE_FIRST: u8 = 0x06;
    /// RC RDMA WRITE Middle.
    pub const RC_RDMA_WRITE_MIDDLE: u8 = 0x07;
    /// RC RDMA WRITE Last.
    pub const RC_RDMA_WRITE_LAST: u8 = 0x08;
    /// RC RDMA WRITE Last with Immediate.
    pub const RC_RDMA_WRITE_LAST_IMM: u8 = 0x09;
    /// RC RDMA WRITE Only (every DTA Key-Write, Append and Postcard frame).
    pub const RC_RDMA_WRITE_ONLY: u8 = 0x0A;
    /// RC RDMA WRITE Only with Immediate.
    pub const RC_RDMA_WRITE_ONLY_IMM: u8 = 0x0B;
    /// RC RDMA READ Request.
    pub const RC_RDMA_READ_REQUEST: u8 = 0x0C;
    /// RC RDMA READ Response First.
    pub const RC_RDMA_READ_RESPONSE_FIRST: u8 = 0x0D;
    /// RC RDMA READ Response Middle.
    pub const RC_RDMA_READ_RESPONSE_MIDDLE: u8 = 0x0E;
    /// RC RDMA READ Response Last.
    pub const RC_RDMA_READ_RESPONSE_LAST: u8 = 0x0F;
    /// RC RDMA READ Response Only.
    pub const RC_RDMA_READ_RESPONSE_ONLY: u8 = 0x10;
    /// RC Acknowledge.
    pub const RC_ACKNOWLEDGE: u8 = 0x11;
    /// RC Atomic Acknowledge.
    pub const RC_ATOMIC_ACKNOWLEDGE: u8 = 0x12;
    /// RC Compare & Swap.
    pub const RC_COMPARE_SWAP: u8 = 0x13;
    /// RC Fetch & Add (every DTA Key-Increment frame).
    pub const RC_FETCH_ADD: u8 = 0x14;
    /// UD SEND Only (CM MADs to QP1).
    pub const UD_SEND_ONLY: u8 = 0x64;
    /// UD SEND Only with Immediate.
    pub const UD_SEND_ONLY_IMM: u8 = 0x65;

    /// A short upper-case name for logs and metrics labels, `"UNKNOWN"` for other opcodes.
    pub const fn name(op: u8) -> &'static str {
        match op {
            RC_SEND_FIRST => "RC_SEND_FIRST",
            RC_SEND_MIDDLE => "RC_SEND_MIDDLE",
            RC_SEND_LAST => "RC_SEND_LAST",
            RC_SEND_LAST_IMM => "RC_SEND_LAST_IMM",
            RC_SEND_ONLY => "RC_SEND_ONLY",
            RC_SEND_ONLY_IMM => "RC_SEND_ONLY_IMM",
            RC_RDMA_WRITE_FIRST => "RC_RDMA_WRITE_FIRST",
            RC_RDMA_WRITE_MIDDLE => "RC_RDMA_WRITE_MIDDLE",
            RC_RDMA_WRITE_LAST => "RC_RDMA_WRITE_LAST",
            RC_RDMA_WRITE_LAST_IMM => "RC_RDMA_WRITE_LAST_IMM",
            RC_RDMA_WRITE_ONLY => "RC_RDMA_WRITE_ONLY",
            RC_RDMA_WRITE_ONLY_IMM => "RC_RDMA_WRITE_ONLY_IMM",
            RC_RDMA_READ_REQUEST => "RC_RDMA_READ_REQUEST",
            RC_RDMA_READ_RESPONSE_FIRST => "RC_RDMA_READ_RESPONSE_FIRST",
            RC_RDMA_READ_RESPONSE_MIDDLE => "RC_RDMA_READ_RESPONSE_MIDDLE",
            RC_RDMA_READ_RESPONSE_LAST => "RC_RDMA_READ_RESPONSE_LAST",
            RC_RDMA_READ_RESPONSE_ONLY => "RC_RDMA_READ_RESPONSE_ONLY",
            RC_ACKNOWLEDGE => "RC_ACKNOWLEDGE",
            RC_ATOMIC_ACKNOWLEDGE => "RC_ATOMIC_ACKNOWLEDGE",
            RC_COMPARE_SWAP => "RC_COMPARE_SWAP",
            RC_FETCH_ADD => "RC_FETCH_ADD",
            UD_SEND_ONLY => "UD_SEND_ONLY",
            UD_SEND_ONLY_IMM => "UD_SEND_ONLY_IMM",
            _ => "UNKNOWN",
        }
    }
}

/// Which headers an opcode carries after the BTH.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Default)]
pub struct OpcodeInfo {
    /// RETH present.
    pub reth: bool,
    /// AtomicETH present.
    pub atomic_eth: bool,
    /// ImmDt present.
    pub imm: bool,
    /// AETH present.
    pub aeth: bool,
    /// AtomicAckETH present.
    pub atomic_ack: bool,
    /// DETH present.
    pub deth: bool,
    /// The packet may carry a payload (possibly empty); if false it must carry none.
    pub has_payload: bool,
}

impl OpcodeInfo {
    /// Total length of the extension headers between the BTH and the payload.
    #[inline]
    pub const fn ext_len(&self) -> usize {
        (self.deth as usize) * DETH_LEN
            + (self.reth as usize) * RETH_LEN
            + (self.atomic_eth as usize) * ATOMIC_ETH_LEN
            + (self.aeth as usize) * AETH_LEN
            + (self.atomic_ack as usize) * ATOMIC_ACK_ETH_LEN
            + (self.imm as usize) * IMMDT_LEN
    }
}

/// The header layout of a supported opcode; `None` for anything else.
pub const fn opcode_info(op: u8) -> Option<OpcodeInfo> {
    use opcode::*;
    const NONE: OpcodeInfo = OpcodeInfo {
        reth: false,
        atomic_eth: false,
        imm: false,
        aeth: false,
        atomic_ack: false,
        deth: false,
        has_payload: false,
    };
    const PAYLOAD: OpcodeInfo = OpcodeInfo {
        has_payload: true,
        ..NONE
    };
    Some(match op {
        RC_SEND_FIRST | RC_SEND_MIDDLE | RC_SEND_LAST | RC_SEND_ONLY => PAYLOAD,
        RC_SEND_LAST_IMM | RC_SEND_ONLY_IMM => OpcodeInfo {
            imm: true,
            ..PAYLOAD
        },
        RC_RDMA_WRITE_FIRST | RC_RDMA_WRITE_ONLY => OpcodeInfo {
            reth: true,
            ..PAYLOAD
        },
        RC_RDMA_WRITE_MIDDLE | RC_RDMA_WRITE_LAST => PAYLOAD,
        RC_RDMA_WRITE_LAST_IMM => OpcodeInfo {
            imm: true,
            ..PAYLOAD
        },
        RC_RDMA_WRITE_ONLY_IMM => OpcodeInfo {
            reth: true,
            imm: true,
            ..PAYLOAD
        },
        RC_RDMA_READ_REQUEST => OpcodeInfo { reth: true, ..NONE },
        RC_RDMA_READ_RESPONSE_FIRST | RC_RDMA_READ_RESPONSE_LAST | RC_RDMA_READ_RESPONSE_ONLY => {
            OpcodeInfo {
                aeth: true,
                ..PAYLOAD
            }
        }
        RC_RDMA_READ_RESPONSE_MIDDLE => PAYLOAD,
        RC_ACKNOWLEDGE => OpcodeInfo { aeth: true, ..NONE },
        RC_ATOMIC_ACKNOWLEDGE => OpcodeInfo {
            aeth: true,
            atomic_ack: true,
            ..NONE
        },
        RC_COMPARE_SWAP | RC_FETCH_ADD => OpcodeInfo {
            atomic_eth: true,
            ..NONE
        },
        UD_SEND_ONLY => OpcodeInfo {
            deth: true,
            ..PAYLOAD
        },
        UD_SEND_ONLY_IMM => OpcodeInfo {
            deth: true,
            imm: true,
            ..PAYLOAD
        },
        _ => return None,
    })
}

#[inline]
fn rd_u16(b: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([b[at], b[at + 1]])
}

#[inline]
fn rd_u24(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([0, b[at], b[at + 1], b[at + 2]])
}

#[inline]
fn rd_u32(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

#[inline]
fn rd_u64(b: &[u8], at: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[at..at + 8]);
    u64::from_be_bytes(a)
}

#[inline]
fn wr_u24(b: &mut [u8], at: usize, v: u32) {
    b[at..at + 3].copy_from_slice(&v.to_be_bytes()[1..]);
}

mod aeth;
mod atomic;
mod bth;
mod deth;
mod immdt;
mod reth;
#[cfg(test)]
mod tests;

pub use aeth::{Aeth, AethRepr, NakCode, Syndrome};
pub use atomic::{AtomicAckEth, AtomicAckEthRepr, AtomicEth, AtomicEthRepr};
pub use bth::{Bth, BthRepr};
pub use deth::{Deth, DethRepr};
pub use immdt::{ImmDt, ImmDtRepr};
pub use reth::{Reth, RethRepr};
