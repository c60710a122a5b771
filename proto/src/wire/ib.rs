//! InfiniBand transport headers as RoCEv2 carries them: BTH, RETH, AtomicETH, AtomicAckETH,
//! AETH, ImmDt and DETH, plus the 24-bit PSN and QPN types.
//!
//! All multi-byte fields are big-endian. Which extension headers follow the BTH is fixed by the
//! opcode ([`opcode_info`]); the spec's order is DETH, RETH, AtomicETH, AETH, AtomicAckETH,
//! ImmDt, then the payload, pad bytes (to a multiple of 4) and the 4-byte ICRC.

use core::fmt;

use super::{Error, Result};

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

/// Declares a fixed-length header view with the usual constructors.
macro_rules! fixed_view {
    ($(#[$doc:meta])* $name:ident, $len:expr) => {
        $(#[$doc])*
        #[derive(Debug, Clone, PartialEq, Eq)]
        pub struct $name<T: AsRef<[u8]>> {
            buffer: T,
        }

        impl<T: AsRef<[u8]>> $name<T> {
            /// Wraps a buffer without checking its length.
            #[inline]
            pub const fn new_unchecked(buffer: T) -> Self {
                $name { buffer }
            }

            /// Wraps a buffer after checking it holds the whole header.
            #[inline]
            pub fn new_checked(buffer: T) -> Result<Self> {
                let h = Self::new_unchecked(buffer);
                h.check_len()?;
                Ok(h)
            }

            /// Checks that the buffer holds the whole header (extra bytes are allowed).
            #[inline]
            pub fn check_len(&self) -> Result<()> {
                if self.buffer.as_ref().len() < $len {
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
        }
    };
}

mod bth_field {
    pub const OPCODE: usize = 0;
    pub const FLAGS: usize = 1;
    pub const PKEY: usize = 2;
    pub const FECN_BECN: usize = 4;
    pub const DEST_QP: usize = 5;
    pub const ACK_REQ: usize = 8;
    pub const PSN: usize = 9;
}

fixed_view!(
    /// A view of a Base Transport Header.
    Bth,
    BTH_LEN
);

impl<T: AsRef<[u8]>> Bth<T> {
    /// Opcode.
    #[inline]
    pub fn opcode(&self) -> u8 {
        self.buffer.as_ref()[bth_field::OPCODE]
    }

    /// Solicited Event bit.
    #[inline]
    pub fn solicited(&self) -> bool {
        self.buffer.as_ref()[bth_field::FLAGS] & 0x80 != 0
    }

    /// MigReq bit.
    #[inline]
    pub fn mig_req(&self) -> bool {
        self.buffer.as_ref()[bth_field::FLAGS] & 0x40 != 0
    }

    /// Number of pad bytes (0..=3) between the payload and the ICRC.
    #[inline]
    pub fn pad_count(&self) -> u8 {
        (self.buffer.as_ref()[bth_field::FLAGS] >> 4) & 0x03
    }

    /// Transport header version (0).
    #[inline]
    pub fn tver(&self) -> u8 {
        self.buffer.as_ref()[bth_field::FLAGS] & 0x0F
    }

    /// Partition key.
    #[inline]
    pub fn pkey(&self) -> u16 {
        rd_u16(self.buffer.as_ref(), bth_field::PKEY)
    }

    /// Forward ECN bit.
    #[inline]
    pub fn fecn(&self) -> bool {
        self.buffer.as_ref()[bth_field::FECN_BECN] & 0x80 != 0
    }

    /// Backward ECN bit.
    #[inline]
    pub fn becn(&self) -> bool {
        self.buffer.as_ref()[bth_field::FECN_BECN] & 0x40 != 0
    }

    /// Destination QP.
    #[inline]
    pub fn dest_qp(&self) -> Qpn {
        Qpn(rd_u24(self.buffer.as_ref(), bth_field::DEST_QP))
    }

    /// AckReq bit.
    #[inline]
    pub fn ack_req(&self) -> bool {
        self.buffer.as_ref()[bth_field::ACK_REQ] & 0x80 != 0
    }

    /// Packet sequence number.
    #[inline]
    pub fn psn(&self) -> Psn {
        Psn(rd_u24(self.buffer.as_ref(), bth_field::PSN))
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Bth<T> {
    /// Sets the opcode.
    #[inline]
    pub fn set_opcode(&mut self, v: u8) {
        self.buffer.as_mut()[bth_field::OPCODE] = v;
    }

    /// Sets SE, MigReq, PadCnt and TVer (the latter two masked to 2 and 4 bits).
    #[inline]
    pub fn set_flags(&mut self, solicited: bool, mig_req: bool, pad_count: u8, tver: u8) {
        self.buffer.as_mut()[bth_field::FLAGS] =
            (solicited as u8) << 7 | (mig_req as u8) << 6 | (pad_count & 0x03) << 4 | (tver & 0x0F);
    }

    /// Sets the partition key.
    #[inline]
    pub fn set_pkey(&mut self, v: u16) {
        self.buffer.as_mut()[bth_field::PKEY..bth_field::PKEY + 2]
            .copy_from_slice(&v.to_be_bytes());
    }

    /// Sets FECN and BECN; the six reserved bits are cleared.
    #[inline]
    pub fn set_fecn_becn(&mut self, fecn: bool, becn: bool) {
        self.buffer.as_mut()[bth_field::FECN_BECN] = (fecn as u8) << 7 | (becn as u8) << 6;
    }

    /// Sets the destination QP.
    #[inline]
    pub fn set_dest_qp(&mut self, q: Qpn) {
        wr_u24(self.buffer.as_mut(), bth_field::DEST_QP, q.0);
    }

    /// Sets AckReq and the PSN in one word; the seven reserved bits are cleared.
    #[inline]
    pub fn set_ack_req_psn(&mut self, ack_req: bool, psn: Psn) {
        let w = (ack_req as u32) << 31 | psn.0;
        self.buffer.as_mut()[bth_field::ACK_REQ..bth_field::ACK_REQ + 4]
            .copy_from_slice(&w.to_be_bytes());
    }
}

/// A parsed Base Transport Header.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct BthRepr {
    /// Opcode (see [`opcode`]).
    pub opcode: u8,
    /// Solicited Event.
    pub solicited: bool,
    /// MigReq.
    pub mig_req: bool,
    /// Pad bytes after the payload (0..=3).
    pub pad_count: u8,
    /// Transport header version (must be 0).
    pub tver: u8,
    /// Partition key.
    pub pkey: u16,
    /// Forward ECN.
    pub fecn: bool,
    /// Backward ECN.
    pub becn: bool,
    /// Destination QP.
    pub dest_qp: Qpn,
    /// AckReq.
    pub ack_req: bool,
    /// Packet sequence number.
    pub psn: Psn,
}

impl BthRepr {
    /// The BTH an RC endpoint sends: default partition key, MigReq set (as rxe and ConnectX
    /// send it), no solicited event, no pad, TVer 0, no ECN marks.
    #[inline]
    pub const fn rc(opcode: u8, dest_qp: Qpn, psn: Psn, ack_req: bool) -> BthRepr {
        BthRepr {
            opcode,
            solicited: false,
            mig_req: true,
            pad_count: 0,
            tver: 0,
            pkey: 0xFFFF,
            fecn: false,
            becn: false,
            dest_qp,
            ack_req,
            psn,
        }
    }

    /// Reads every field; reserved bits are ignored and the opcode and TVer are not judged here.
    #[inline]
    pub fn parse<T: AsRef<[u8]>>(h: &Bth<T>) -> Result<Self> {
        h.check_len()?;
        Ok(BthRepr {
            opcode: h.opcode(),
            solicited: h.solicited(),
            mig_req: h.mig_req(),
            pad_count: h.pad_count(),
            tver: h.tver(),
            pkey: h.pkey(),
            fecn: h.fecn(),
            becn: h.becn(),
            dest_qp: h.dest_qp(),
            ack_req: h.ack_req(),
            psn: h.psn(),
        })
    }

    /// Bytes `emit` writes.
    #[inline]
    pub const fn header_len(&self) -> usize {
        BTH_LEN
    }

    /// Writes the header (reserved bits zero; PadCnt and TVer masked to their widths).
    #[inline]
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, h: &mut Bth<T>) {
        h.set_opcode(self.opcode);
        h.set_flags(self.solicited, self.mig_req, self.pad_count, self.tver);
        h.set_pkey(self.pkey);
        h.set_fecn_becn(self.fecn, self.becn);
        h.set_dest_qp(self.dest_qp);
        h.set_ack_req_psn(self.ack_req, self.psn);
    }
}

fixed_view!(
    /// A view of an RDMA Extended Transport Header.
    Reth,
    RETH_LEN
);

impl<T: AsRef<[u8]>> Reth<T> {
    /// Virtual address.
    #[inline]
    pub fn va(&self) -> u64 {
        rd_u64(self.buffer.as_ref(), 0)
    }

    /// Remote key.
    #[inline]
    pub fn rkey(&self) -> Rkey {
        Rkey(rd_u32(self.buffer.as_ref(), 8))
    }

    /// DMA length of the whole message.
    #[inline]
    pub fn dma_len(&self) -> u32 {
        rd_u32(self.buffer.as_ref(), 12)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Reth<T> {
    /// Sets the virtual address.
    #[inline]
    pub fn set_va(&mut self, v: u64) {
        self.buffer.as_mut()[0..8].copy_from_slice(&v.to_be_bytes());
    }

    /// Sets the remote key.
    #[inline]
    pub fn set_rkey(&mut self, k: Rkey) {
        self.buffer.as_mut()[8..12].copy_from_slice(&k.0.to_be_bytes());
    }

    /// Sets the DMA length.
    #[inline]
    pub fn set_dma_len(&mut self, v: u32) {
        self.buffer.as_mut()[12..16].copy_from_slice(&v.to_be_bytes());
    }
}

/// A parsed RETH.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct RethRepr {
    /// Virtual address.
    pub va: u64,
    /// Remote key.
    pub rkey: Rkey,
    /// DMA length of the whole message.
    pub dma_len: u32,
}

impl RethRepr {
    /// Reads the header.
    #[inline]
    pub fn parse<T: AsRef<[u8]>>(h: &Reth<T>) -> Result<Self> {
        h.check_len()?;
        Ok(RethRepr {
            va: h.va(),
            rkey: h.rkey(),
            dma_len: h.dma_len(),
        })
    }

    /// Bytes `emit` writes.
    #[inline]
    pub const fn header_len(&self) -> usize {
        RETH_LEN
    }

    /// Writes the header.
    #[inline]
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, h: &mut Reth<T>) {
        h.set_va(self.va);
        h.set_rkey(self.rkey);
        h.set_dma_len(self.dma_len);
    }

    /// The 16 wire bytes.
    // Assembled in a register so the caller's copy is one 16-byte store; three narrower
    // stores into a local array followed by a 16-byte load would stall store forwarding.
    #[inline]
    pub fn to_bytes(&self) -> [u8; RETH_LEN] {
        ((self.va as u128) << 64 | (self.rkey.0 as u128) << 32 | self.dma_len as u128).to_be_bytes()
    }
}

fixed_view!(
    /// A view of an Atomic Extended Transport Header.
    AtomicEth,
    ATOMIC_ETH_LEN
);

impl<T: AsRef<[u8]>> AtomicEth<T> {
    /// Virtual address (8-byte aligned for a valid atomic).
    #[inline]
    pub fn va(&self) -> u64 {
        rd_u64(self.buffer.as_ref(), 0)
    }

    /// Remote key.
    #[inline]
    pub fn rkey(&self) -> Rkey {
        Rkey(rd_u32(self.buffer.as_ref(), 8))
    }

    /// Swap (Compare & Swap) or Add (Fetch & Add) operand.
    #[inline]
    pub fn swap_add(&self) -> u64 {
        rd_u64(self.buffer.as_ref(), 12)
    }

    /// Compare operand (Compare & Swap only).
    #[inline]
    pub fn compare(&self) -> u64 {
        rd_u64(self.buffer.as_ref(), 20)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> AtomicEth<T> {
    /// Sets the virtual address.
    #[inline]
    pub fn set_va(&mut self, v: u64) {
        self.buffer.as_mut()[0..8].copy_from_slice(&v.to_be_bytes());
    }

    /// Sets the remote key.
    #[inline]
    pub fn set_rkey(&mut self, k: Rkey) {
        self.buffer.as_mut()[8..12].copy_from_slice(&k.0.to_be_bytes());
    }

    /// Sets the Swap/Add operand.
    #[inline]
    pub fn set_swap_add(&mut self, v: u64) {
        self.buffer.as_mut()[12..20].copy_from_slice(&v.to_be_bytes());
    }

    /// Sets the Compare operand.
    #[inline]
    pub fn set_compare(&mut self, v: u64) {
        self.buffer.as_mut()[20..28].copy_from_slice(&v.to_be_bytes());
    }
}

/// A parsed AtomicETH.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct AtomicEthRepr {
    /// Virtual address.
    pub va: u64,
    /// Remote key.
    pub rkey: Rkey,
    /// Swap or Add operand.
    pub swap_add: u64,
    /// Compare operand.
    pub compare: u64,
}

impl AtomicEthRepr {
    /// Reads the header.
    #[inline]
    pub fn parse<T: AsRef<[u8]>>(h: &AtomicEth<T>) -> Result<Self> {
        h.check_len()?;
        Ok(AtomicEthRepr {
            va: h.va(),
            rkey: h.rkey(),
            swap_add: h.swap_add(),
            compare: h.compare(),
        })
    }

    /// Bytes `emit` writes.
    #[inline]
    pub const fn header_len(&self) -> usize {
        ATOMIC_ETH_LEN
    }

    /// Writes the header.
    #[inline]
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, h: &mut AtomicEth<T>) {
        h.set_va(self.va);
        h.set_rkey(self.rkey);
        h.set_swap_add(self.swap_add);
        h.set_compare(self.compare);
    }

    /// The 28 wire bytes.
    #[inline]
    pub fn to_bytes(&self) -> [u8; ATOMIC_ETH_LEN] {
        let mut b = [0u8; ATOMIC_ETH_LEN];
        self.emit(&mut AtomicEth::new_unchecked(&mut b[..]));
        b
    }
}

fixed_view!(
    /// A view of an Atomic Acknowledge Extended Transport Header.
    AtomicAckEth,
    ATOMIC_ACK_ETH_LEN
);

impl<T: AsRef<[u8]>> AtomicAckEth<T> {
    /// The value at the target address before the atomic.
    #[inline]
    pub fn orig(&self) -> u64 {
        rd_u64(self.buffer.as_ref(), 0)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> AtomicAckEth<T> {
    /// Sets the original value.
    #[inline]
    pub fn set_orig(&mut self, v: u64) {
        self.buffer.as_mut()[0..8].copy_from_slice(&v.to_be_bytes());
    }
}

/// A parsed AtomicAckETH.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct AtomicAckEthRepr {
    /// The value at the target address before the atomic.
    pub orig: u64,
}

impl AtomicAckEthRepr {
    /// Reads the header.
    #[inline]
    pub fn parse<T: AsRef<[u8]>>(h: &AtomicAckEth<T>) -> Result<Self> {
        h.check_len()?;
        Ok(AtomicAckEthRepr { orig: h.orig() })
    }

    /// Bytes `emit` writes.
    #[inline]
    pub const fn header_len(&self) -> usize {
        ATOMIC_ACK_ETH_LEN
    }

    /// Writes the header.
    #[inline]
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, h: &mut AtomicAckEth<T>) {
        h.set_orig(self.orig);
    }
}

/// An AETH NAK code (the low five bits of a NAK syndrome).
///
/// Wire values: `PsnSequenceError` 0, `InvalidRequest` 1, `RemoteAccessError` 2,
/// `RemoteOperationalError` 3, `InvalidRdRequest` 4; `Other` holds any other (reserved) code.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum NakCode {
    /// The responder expected a different PSN (rxe sends one per gap).
    PsnSequenceError,
    /// Malformed or unsupported request (length errors, bad opcode sequence).
    InvalidRequest,
    /// R_Key, bounds or access-rights violation.
    RemoteAccessError,
    /// The responder could not complete the operation.
    RemoteOperationalError,
    /// Invalid RD request (reliable datagram only).
    InvalidRdRequest,
    /// A reserved code, 5..=31 (only the low five bits go on the wire).
    Other(u8),
}

impl NakCode {
    /// The five-bit wire code.
    #[inline]
    pub const fn code(self) -> u8 {
        match self {
            NakCode::PsnSequenceError => 0,
            NakCode::InvalidRequest => 1,
            NakCode::RemoteAccessError => 2,
            NakCode::RemoteOperationalError => 3,
            NakCode::InvalidRdRequest => 4,
            NakCode::Other(c) => c & 0x1F,
        }
    }

    /// The code for five wire bits (higher bits ignored).
    #[inline]
    pub const fn from_code(c: u8) -> NakCode {
        match c & 0x1F {
            0 => NakCode::PsnSequenceError,
            1 => NakCode::InvalidRequest,
            2 => NakCode::RemoteAccessError,
            3 => NakCode::RemoteOperationalError,
            4 => NakCode::InvalidRdRequest,
            c => NakCode::Other(c),
        }
    }
}

/// The AETH syndrome byte: bits 6..5 select ACK (00), RNR NAK (01) or NAK (11); the low five
/// bits are the credit count, the RNR timer or the NAK code.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum Syndrome {
    /// Positive acknowledgement; `credits` 0x1F means "invalid credit count", which rxe sends.
    Ack {
        /// Five-bit credit count.
        credits: u8,
    },
    /// Receiver-not-ready NAK with the five-bit RNR timer code.
    RnrNak {
        /// Five-bit timer code.
        timer: u8,
    },
    /// NAK.
    Nak(NakCode),
    /// Reserved encodings (class 10, or bit 7 set), kept as the whole byte.
    Reserved(u8),
}

impl Syndrome {
    /// ACK with the "invalid credit count" 0x1F, as rxe sends: byte 0x1F.
    pub const ACK_NO_CREDITS: Syndrome = Syndrome::Ack { credits: 0x1F };

    /// Decodes a syndrome byte; every byte decodes and `to_byte` gives it back.
    #[inline]
    pub const fn from_byte(b: u8) -> Syndrome {
        if b & 0x80 != 0 {
            return Syndrome::Reserved(b);
        }
        let low = b & 0x1F;
        match (b >> 5) & 0x03 {
            0 => Syndrome::Ack { credits: low },
            1 => Syndrome::RnrNak { timer: low },
            3 => Syndrome::Nak(NakCode::from_code(low)),
            _ => Syndrome::Reserved(b),
        }
    }

    /// Encodes the syndrome byte (five-bit fields masked).
    #[inline]
    pub const fn to_byte(self) -> u8 {
        match self {
            Syndrome::Ack { credits } => credits & 0x1F,
            Syndrome::RnrNak { timer } => 0x20 | (timer & 0x1F),
            Syndrome::Nak(c) => 0x60 | c.code(),
            Syndrome::Reserved(b) => b,
        }
    }

    /// Whether this is a positive acknowledgement.
    #[inline]
    pub const fn is_ack(self) -> bool {
        matches!(self, Syndrome::Ack { .. })
    }
}

fixed_view!(
    /// A view of an ACK Extended Transport Header.
    Aeth,
    AETH_LEN
);

impl<T: AsRef<[u8]>> Aeth<T> {
    /// The raw syndrome byte.
    #[inline]
    pub fn syndrome_byte(&self) -> u8 {
        self.buffer.as_ref()[0]
    }

    /// The decoded syndrome.
    #[inline]
    pub fn syndrome(&self) -> Syndrome {
        Syndrome::from_byte(self.syndrome_byte())
    }

    /// Message sequence number (24 bits).
    #[inline]
    pub fn msn(&self) -> u32 {
        rd_u24(self.buffer.as_ref(), 1)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Aeth<T> {
    /// Sets the syndrome.
    #[inline]
    pub fn set_syndrome(&mut self, s: Syndrome) {
        self.buffer.as_mut()[0] = s.to_byte();
    }

    /// Sets the MSN (low 24 bits).
    #[inline]
    pub fn set_msn(&mut self, v: u32) {
        wr_u24(self.buffer.as_mut(), 1, v & MASK24);
    }
}

/// A parsed AETH.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct AethRepr {
    /// Syndrome.
    pub syndrome: Syndrome,
    /// Message sequence number (24 bits; higher bits are dropped on emit).
    pub msn: u32,
}

impl AethRepr {
    /// Reads the header.
    #[inline]
    pub fn parse<T: AsRef<[u8]>>(h: &Aeth<T>) -> Result<Self> {
        h.check_len()?;
        Ok(AethRepr {
            syndrome: h.syndrome(),
            msn: h.msn(),
        })
    }

    /// Bytes `emit` writes.
    #[inline]
    pub const fn header_len(&self) -> usize {
        AETH_LEN
    }

    /// Writes the header.
    #[inline]
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, h: &mut Aeth<T>) {
        h.set_syndrome(self.syndrome);
        h.set_msn(self.msn);
    }

    /// The header as bytes (for callers that assemble a frame from parts).
    #[inline]
    pub fn to_bytes(&self) -> [u8; AETH_LEN] {
        let mut b = [0u8; AETH_LEN];
        self.emit(&mut Aeth::new_unchecked(&mut b[..]));
        b
    }
}

fixed_view!(
    /// A view of the immediate data header.
    ImmDt,
    IMMDT_LEN
);

impl<T: AsRef<[u8]>> ImmDt<T> {
    /// The immediate value (big-endian on the wire).
    #[inline]
    pub fn imm(&self) -> u32 {
        rd_u32(self.buffer.as_ref(), 0)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> ImmDt<T> {
    /// Sets the immediate value.
    #[inline]
    pub fn set_imm(&mut self, v: u32) {
        self.buffer.as_mut()[0..4].copy_from_slice(&v.to_be_bytes());
    }
}

fixed_view!(
    /// A view of a Datagram Extended Transport Header.
    Deth,
    DETH_LEN
);

impl<T: AsRef<[u8]>> Deth<T> {
    /// Queue key.
    #[inline]
    pub fn qkey(&self) -> u32 {
        rd_u32(self.buffer.as_ref(), 0)
    }

    /// Source QP.
    #[inline]
    pub fn src_qp(&self) -> Qpn {
        Qpn(rd_u24(self.buffer.as_ref(), 5))
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Deth<T> {
    /// Sets the queue key.
    #[inline]
    pub fn set_qkey(&mut self, v: u32) {
        self.buffer.as_mut()[0..4].copy_from_slice(&v.to_be_bytes());
    }

    /// Sets the source QP; the reserved byte is cleared.
    #[inline]
    pub fn set_src_qp(&mut self, q: Qpn) {
        let b = self.buffer.as_mut();
        b[4] = 0;
        wr_u24(b, 5, q.0);
    }
}

/// A parsed DETH.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct DethRepr {
    /// Queue key.
    pub qkey: u32,
    /// Source QP.
    pub src_qp: Qpn,
}

impl DethRepr {
    /// Reads the header (the reserved byte is ignored).
    #[inline]
    pub fn parse<T: AsRef<[u8]>>(h: &Deth<T>) -> Result<Self> {
        h.check_len()?;
        Ok(DethRepr {
            qkey: h.qkey(),
            src_qp: h.src_qp(),
        })
    }

    /// Bytes `emit` writes.
    #[inline]
    pub const fn header_len(&self) -> usize {
        DETH_LEN
    }

    /// Writes the header.
    #[inline]
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, h: &mut Deth<T>) {
        h.set_qkey(self.qkey);
        h.set_src_qp(self.src_qp);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn psn_arithmetic() {
        assert_eq!(Psn::new(0x1234_5678).value(), 0x34_5678);
        assert_eq!(Psn::MAX.next(), Psn::new(0));
        assert_eq!(Psn::new(0).sub(1), Psn::MAX);
        assert_eq!(Psn::new(0xFFFFFE).add(5), Psn::new(3));
        assert_eq!(Psn::new(1).diff(Psn::new(0xFFFFFF)), 2);
        assert_eq!(Psn::new(0xFFFFFF).diff(Psn::new(1)), -2);
        assert_eq!(Psn::new(5).diff(Psn::new(5)), 0);
        // The boundary: exactly half the circle apart counts as ahead, never as behind.
        assert_eq!(Psn::new(1 << 23).diff(Psn::new(0)), 1 << 23);
        assert_eq!(Psn::new(0).diff(Psn::new(1 << 23)), 1 << 23);
        assert_eq!(Psn::new((1 << 23) + 1).diff(Psn::new(0)), -((1 << 23) - 1));
        assert_eq!(Qpn::new(0xFF00_0ABC).value(), 0xABC);
    }

    #[test]
    fn rxe_aeth_bytes() {
        assert_eq!(Syndrome::from_byte(0x1F), Syndrome::Ack { credits: 31 });
        assert_eq!(Syndrome::ACK_NO_CREDITS.to_byte(), 0x1F);
        assert_eq!(
            Syndrome::from_byte(0x60),
            Syndrome::Nak(NakCode::PsnSequenceError)
        );
        assert_eq!(
            Syndrome::from_byte(0x61),
            Syndrome::Nak(NakCode::InvalidRequest)
        );
        assert_eq!(
            Syndrome::from_byte(0x62),
            Syndrome::Nak(NakCode::RemoteAccessError)
        );
        assert_eq!(
            Syndrome::from_byte(0x63),
            Syndrome::Nak(NakCode::RemoteOperationalError)
        );
        assert_eq!(
            Syndrome::from_byte(0x64),
            Syndrome::Nak(NakCode::InvalidRdRequest)
        );
        assert_eq!(Syndrome::from_byte(0x65), Syndrome::Nak(NakCode::Other(5)));
        assert_eq!(Syndrome::from_byte(0x2E), Syndrome::RnrNak { timer: 14 });
        assert_eq!(Syndrome::from_byte(0x00), Syndrome::Ack { credits: 0 });
        assert_eq!(Syndrome::from_byte(0x40), Syndrome::Reserved(0x40));
        assert_eq!(Syndrome::from_byte(0x9F), Syndrome::Reserved(0x9F));
        assert_eq!(Syndrome::Nak(NakCode::RemoteAccessError).to_byte(), 0x62);
        assert_eq!(Syndrome::Nak(NakCode::PsnSequenceError).to_byte(), 0x60);
        for b in 0..=255u8 {
            assert_eq!(Syndrome::from_byte(b).to_byte(), b);
        }
    }

    #[test]
    fn opcode_table() {
        use opcode::*;
        let len = |op| opcode_info(op).unwrap().ext_len();
        assert_eq!(len(RC_RDMA_WRITE_ONLY), 16);
        assert_eq!(len(RC_RDMA_WRITE_ONLY_IMM), 20);
        assert_eq!(len(RC_RDMA_WRITE_LAST_IMM), 4);
        assert_eq!(len(RC_RDMA_WRITE_MIDDLE), 0);
        assert_eq!(len(RC_SEND_ONLY_IMM), 4);
        assert_eq!(len(RC_RDMA_READ_REQUEST), 16);
        assert_eq!(len(RC_RDMA_READ_RESPONSE_FIRST), 4);
        assert_eq!(len(RC_RDMA_READ_RESPONSE_MIDDLE), 0);
        assert_eq!(len(RC_ACKNOWLEDGE), 4);
        assert_eq!(len(RC_ATOMIC_ACKNOWLEDGE), 12);
        assert_eq!(len(RC_FETCH_ADD), 28);
        assert_eq!(len(RC_COMPARE_SWAP), 28);
        assert_eq!(len(UD_SEND_ONLY), 8);
        assert_eq!(len(UD_SEND_ONLY_IMM), 12);
        let known: Vec<u8> = (0..=255u8)
            .filter(|&op| opcode_info(op).is_some())
            .collect();
        let mut expect: Vec<u8> = (0x00..=0x14).collect();
        expect.extend([0x64, 0x65]);
        assert_eq!(known, expect);
        for op in known {
            assert_ne!(name(op), "UNKNOWN");
            let i = opcode_info(op).unwrap();
            // Requests with a payload never also carry an AtomicETH, and vice versa.
            assert!(!(i.has_payload && (i.atomic_eth || i.atomic_ack)));
        }
        assert_eq!(name(0x15), "UNKNOWN");
    }

    #[test]
    fn bth_bit_positions() {
        // BTH of dta-reference.md §4.5: WRITE ONLY, MigReq, P_Key 0xFFFF, QP 0xABC, PSN 0xE6FB20.
        let b = [
            0x0a, 0x40, 0xff, 0xff, 0x00, 0x00, 0x0a, 0xbc, 0x00, 0xe6, 0xfb, 0x20,
        ];
        let r = BthRepr::parse(&Bth::new_checked(&b[..]).unwrap()).unwrap();
        assert_eq!(
            r,
            BthRepr {
                opcode: opcode::RC_RDMA_WRITE_ONLY,
                solicited: false,
                mig_req: true,
                pad_count: 0,
                tver: 0,
                pkey: 0xFFFF,
                fecn: false,
                becn: false,
                dest_qp: Qpn::new(0xABC),
                ack_req: false,
                psn: Psn::new(0xE6FB20),
            }
        );
        let mut x = [0u8; 12];
        let r2 = BthRepr {
            solicited: true,
            pad_count: 3,
            tver: 0xF,
            fecn: true,
            becn: true,
            ack_req: true,
            ..r
        };
        r2.emit(&mut Bth::new_unchecked(&mut x[..]));
        assert_eq!(
            x,
            [0x0a, 0xff, 0xff, 0xff, 0xc0, 0, 0x0a, 0xbc, 0x80, 0xe6, 0xfb, 0x20]
        );
        let d = [0x80, 0x01, 0x00, 0x00, 0x00, 0x00, 0x05, 0x39];
        let d = DethRepr::parse(&Deth::new_checked(&d[..]).unwrap()).unwrap();
        assert_eq!((d.qkey, d.src_qp), (0x8001_0000, Qpn::new(1337)));
    }

    fn arb_bth() -> impl Strategy<Value = BthRepr> {
        (
            any::<u8>(),
            any::<(bool, bool, bool, bool, bool)>(),
            0u8..4,
            0u8..16,
            any::<u16>(),
            0u32..1 << 24,
            0u32..1 << 24,
        )
            .prop_map(
                |(opcode, (s, m, f, b, a), pad, tver, pkey, qp, psn)| BthRepr {
                    opcode,
                    solicited: s,
                    mig_req: m,
                    pad_count: pad,
                    tver,
                    pkey,
                    fecn: f,
                    becn: b,
                    dest_qp: Qpn::new(qp),
                    ack_req: a,
                    psn: Psn::new(psn),
                },
            )
    }

    proptest! {
        #[test]
        fn psn_diff_inverts_add(a in 0u32..1 << 24, d in -(1i32 << 23) + 1..=(1 << 23)) {
            let p = Psn::new(a);
            let q = if d >= 0 { p.add(d as u32) } else { p.sub(d.unsigned_abs()) };
            prop_assert_eq!(q.diff(p), d);
            prop_assert_eq!(q.sub(q.diff(p) as u32), p);
        }

        #[test]
        fn bth_round_trip(r in arb_bth()) {
            let mut b = [0u8; BTH_LEN];
            r.emit(&mut Bth::new_unchecked(&mut b[..]));
            prop_assert_eq!(BthRepr::parse(&Bth::new_checked(&b[..]).unwrap()).unwrap(), r);
        }

        #[test]
        fn eth_round_trips(va in any::<u64>(), rkey in any::<u32>(), len in any::<u32>(),
                           sa in any::<u64>(), cmp in any::<u64>(), syn in any::<u8>(),
                           msn in 0u32..1 << 24, qkey in any::<u32>(), qp in 0u32..1 << 24,
                           imm in any::<u32>()) {
            let reth = RethRepr { va, rkey: Rkey(rkey), dma_len: len };
            let b = reth.to_bytes();
            prop_assert_eq!(RethRepr::parse(&Reth::new_checked(&b[..]).unwrap()).unwrap(), reth);

            let at = AtomicEthRepr { va, rkey: Rkey(rkey), swap_add: sa, compare: cmp };
            let b = at.to_bytes();
            prop_assert_eq!(AtomicEthRepr::parse(&AtomicEth::new_checked(&b[..]).unwrap()).unwrap(), at);

            let ack = AtomicAckEthRepr { orig: sa };
            let mut b = [0u8; ATOMIC_ACK_ETH_LEN];
            ack.emit(&mut AtomicAckEth::new_unchecked(&mut b[..]));
            prop_assert_eq!(AtomicAckEthRepr::parse(&AtomicAckEth::new_checked(&b[..]).unwrap()).unwrap(), ack);

            let aeth = AethRepr { syndrome: Syndrome::from_byte(syn), msn };
            let mut b = [0u8; AETH_LEN];
            aeth.emit(&mut Aeth::new_unchecked(&mut b[..]));
            prop_assert_eq!(b[0], syn);
            prop_assert_eq!(AethRepr::parse(&Aeth::new_checked(&b[..]).unwrap()).unwrap(), aeth);

            let deth = DethRepr { qkey, src_qp: Qpn::new(qp) };
            let mut b = [0xFFu8; DETH_LEN];
            deth.emit(&mut Deth::new_unchecked(&mut b[..]));
            prop_assert_eq!(b[4], 0);
            prop_assert_eq!(DethRepr::parse(&Deth::new_checked(&b[..]).unwrap()).unwrap(), deth);

            let mut b = [0u8; IMMDT_LEN];
            ImmDt::new_unchecked(&mut b[..]).set_imm(imm);
            prop_assert_eq!(ImmDt::new_checked(&b[..]).unwrap().imm(), imm);
        }

        #[test]
        fn arbitrary_bytes_never_panic(buf in proptest::collection::vec(any::<u8>(), 0..32)) {
            let b = &buf[..];
            let _ = Bth::new_checked(b).and_then(|h| BthRepr::parse(&h));
            let _ = Reth::new_checked(b).and_then(|h| RethRepr::parse(&h));
            let _ = AtomicEth::new_checked(b).and_then(|h| AtomicEthRepr::parse(&h));
            let _ = AtomicAckEth::new_checked(b).and_then(|h| AtomicAckEthRepr::parse(&h));
            let _ = Aeth::new_checked(b).and_then(|h| AethRepr::parse(&h));
            let _ = Deth::new_checked(b).and_then(|h| DethRepr::parse(&h));
            let _ = ImmDt::new_checked(b).map(|h| h.imm());
            // Parsing through an unchecked view still reports, never panics.
            let _ = BthRepr::parse(&Bth::new_unchecked(b));
            let _ = AtomicEthRepr::parse(&AtomicEth::new_unchecked(b));
        }
    }
}
