//! The ACK Extended Transport Header of acknowledgements and READ responses: its syndrome
//! ([`Syndrome`], [`NakCode`]), view ([`Aeth`]) and representation ([`AethRepr`]).

use super::{rd_u24, wr_u24, AETH_LEN, MASK24};
use crate::wire::Result;

mod field {
    use core::ops::Range;
    pub const SYNDROME: usize = 0;
    pub const MSN: Range<usize> = 1..4;
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

crate::wire::view::fixed_view!(
    /// A view of an ACK Extended Transport Header.
    Aeth,
    AETH_LEN
);

impl<T: AsRef<[u8]>> Aeth<T> {
    /// The raw syndrome byte.
    #[inline]
    pub fn syndrome_byte(&self) -> u8 {
        self.buffer.as_ref()[field::SYNDROME]
    }

    /// The decoded syndrome.
    #[inline]
    pub fn syndrome(&self) -> Syndrome {
        Syndrome::from_byte(self.syndrome_byte())
    }

    /// Message sequence number (24 bits).
    #[inline]
    pub fn msn(&self) -> u32 {
        rd_u24(self.buffer.as_ref(), field::MSN.start)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Aeth<T> {
    /// Sets the syndrome.
    #[inline]
    pub fn set_syndrome(&mut self, s: Syndrome) {
        self.buffer.as_mut()[field::SYNDROME] = s.to_byte();
    }

    /// Sets the MSN (low 24 bits).
    #[inline]
    pub fn set_msn(&mut self, v: u32) {
        wr_u24(self.buffer.as_mut(), field::MSN.start, v & MASK24);
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
