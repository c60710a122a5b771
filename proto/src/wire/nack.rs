//! DTA NACKs: what the translator sends a reporter (to UDP port 40044) when a retransmittable
//! reporter's sequence numbers show a gap.
//!
//! Two formats, one per report profile:
//!
//! ```text
//! reference (2 B):  seqnum u8 | flags u8 (bit7 nack = 1, bits6..0 reserved)
//! extended (12 B):  0xD1 | kind u8 (0x80 = NACK) | reserved u16 | first_missing u32 | count u32
//! sketch (16 B):    0xD2 | kind u8 (0x81 = column NACK) | sketch_id u16 | switch_id u32 |
//!                   epoch u32 | expected_column u32
//! ```
//!
//! The sketch-column NACK (extended profile version 2, `PROTOCOL.md` §5.7) answers a
//! Sketch-Merge report whose column is not the next one the translator expects from that
//! switch: it names the column to resend from.
//!
//! A reference NACK carries the last in-order seqnum the translator accepted (not the missing
//! one, reference §2.6); an extended NACK names the missing range itself. [`NackRepr::parse`]
//! tells them apart by length first (exactly 2 bytes is a reference NACK, whatever its first
//! byte), then by the extended magic.

use crate::wire::dta_ext::{is_extended, MAGIC_VERSION};
use crate::wire::{Error, Result};

/// Length of a reference NACK.
pub const REFERENCE_NACK_LEN: usize = 2;
/// Length of an extended NACK.
pub const EXT_NACK_LEN: usize = 12;
/// Bit 7 of a reference NACK's flags byte: always 1 (the reference has no positive ACKs).
pub const REFERENCE_NACK_FLAG: u8 = 0x80;
/// `kind` of an extended NACK. Other kinds are reserved for future control messages.
pub const EXT_KIND_NACK: u8 = 0x80;
/// `kind` of a sketch-column NACK (version 2).
pub const EXT_KIND_SKETCH_NACK: u8 = 0x81;
/// Length of a sketch-column NACK.
pub const SKETCH_NACK_LEN: usize = 16;

mod field {
    pub type Field = core::ops::Range<usize>;

    pub const REF_SEQNUM: usize = 0;
    pub const REF_FLAGS: usize = 1;

    pub const EXT_MAGIC_VERSION: usize = 0;
    pub const EXT_KIND: usize = 1;
    pub const EXT_RESERVED: Field = 2..4;
    pub const EXT_FIRST_MISSING: Field = 4..8;
    pub const EXT_COUNT: Field = 8..12;

    pub const SK_SKETCH_ID: Field = 2..4;
    pub const SK_SWITCH: Field = 4..8;
    pub const SK_EPOCH: Field = 8..12;
    pub const SK_COLUMN: Field = 12..16;
}

#[inline]
fn be_u32(b: &[u8]) -> u32 {
    u32::from_be_bytes([b[0], b[1], b[2], b[3]])
}

/// A view of a reference NACK.
#[derive(Debug, Clone)]
pub struct ReferenceNack<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> ReferenceNack<T> {
    /// Wrap a buffer without checking its length.
    #[inline]
    pub const fn new_unchecked(buffer: T) -> ReferenceNack<T> {
        ReferenceNack { buffer }
    }

    /// Wrap a buffer, checking that it holds 2 bytes.
    #[inline]
    pub fn new_checked(buffer: T) -> Result<ReferenceNack<T>> {
        let n = Self::new_unchecked(buffer);
        n.check_len()?;
        Ok(n)
    }

    /// [`Error::Truncated`] if shorter than 2 bytes.
    #[inline]
    pub fn check_len(&self) -> Result<()> {
        if self.buffer.as_ref().len() < REFERENCE_NACK_LEN {
            Err(Error::Truncated)
        } else {
            Ok(())
        }
    }

    /// The wrapped buffer.
    #[inline]
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// The last in-order seqnum the translator accepted.
    #[inline]
    pub fn seqnum(&self) -> u8 {
        self.buffer.as_ref()[field::REF_SEQNUM]
    }

    /// The raw flags byte.
    #[inline]
    pub fn flags(&self) -> u8 {
        self.buffer.as_ref()[field::REF_FLAGS]
    }

    /// The `nack` bit.
    #[inline]
    pub fn nack(&self) -> bool {
        self.flags() & REFERENCE_NACK_FLAG != 0
    }

    /// The reserved flag bits (ignored, as by the reference).
    #[inline]
    pub fn reserved_flags(&self) -> u8 {
        self.flags() & !REFERENCE_NACK_FLAG
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> ReferenceNack<T> {
    /// Set the seqnum.
    #[inline]
    pub fn set_seqnum(&mut self, v: u8) {
        self.buffer.as_mut()[field::REF_SEQNUM] = v;
    }
    /// Set the raw flags byte.
    #[inline]
    pub fn set_flags(&mut self, v: u8) {
        self.buffer.as_mut()[field::REF_FLAGS] = v;
    }
}

/// A view of an extended NACK.
#[derive(Debug, Clone)]
pub struct ExtNack<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> ExtNack<T> {
    /// Wrap a buffer without checking it.
    #[inline]
    pub const fn new_unchecked(buffer: T) -> ExtNack<T> {
        ExtNack { buffer }
    }

    /// Wrap a buffer, checking magic, version and length (in that order).
    #[inline]
    pub fn new_checked(buffer: T) -> Result<ExtNack<T>> {
        let n = Self::new_unchecked(buffer);
        n.check_len()?;
        Ok(n)
    }

    /// [`Error::Truncated`] if empty, [`Error::Malformed`] without the extended magic,
    /// [`Error::UnsupportedVersion`] for a version other than 1, [`Error::Truncated`] if shorter
    /// than 12 bytes.
    #[inline]
    pub fn check_len(&self) -> Result<()> {
        let b = self.buffer.as_ref();
        let first = *b.first().ok_or(Error::Truncated)?;
        if !is_extended(first) {
            return Err(Error::Malformed);
        }
        if first != MAGIC_VERSION {
            return Err(Error::UnsupportedVersion);
        }
        if b.len() < EXT_NACK_LEN {
            return Err(Error::Truncated);
        }
        Ok(())
    }

    /// The wrapped buffer.
    #[inline]
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// The first byte (magic and version).
    #[inline]
    pub fn magic_version(&self) -> u8 {
        self.buffer.as_ref()[field::EXT_MAGIC_VERSION]
    }
    /// The message kind (0x80 for a NACK).
    #[inline]
    pub fn kind(&self) -> u8 {
        self.buffer.as_ref()[field::EXT_KIND]
    }
    /// The reserved u16 (must be zero).
    #[inline]
    pub fn reserved(&self) -> u16 {
        let b = &self.buffer.as_ref()[field::EXT_RESERVED];
        u16::from_be_bytes([b[0], b[1]])
    }
    /// The first missing sequence number.
    #[inline]
    pub fn first_missing(&self) -> u32 {
        be_u32(&self.buffer.as_ref()[field::EXT_FIRST_MISSING])
    }
    /// How many consecutive sequence numbers are missing, from `first_missing` on (mod 2^32).
    #[inline]
    pub fn missing_count(&self) -> u32 {
        be_u32(&self.buffer.as_ref()[field::EXT_COUNT])
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> ExtNack<T> {
    /// Set the first byte.
    #[inline]
    pub fn set_magic_version(&mut self, v: u8) {
        self.buffer.as_mut()[field::EXT_MAGIC_VERSION] = v;
    }
    /// Set the kind.
    #[inline]
    pub fn set_kind(&mut self, v: u8) {
        self.buffer.as_mut()[field::EXT_KIND] = v;
    }
    /// Set the reserved u16.
    #[inline]
    pub fn set_reserved(&mut self, v: u16) {
        self.buffer.as_mut()[field::EXT_RESERVED].copy_from_slice(&v.to_be_bytes());
    }
    /// Set the first missing sequence number.
    #[inline]
    pub fn set_first_missing(&mut self, v: u32) {
        self.buffer.as_mut()[field::EXT_FIRST_MISSING].copy_from_slice(&v.to_be_bytes());
    }
    /// Set the missing count.
    #[inline]
    pub fn set_missing_count(&mut self, v: u32) {
        self.buffer.as_mut()[field::EXT_COUNT].copy_from_slice(&v.to_be_bytes());
    }
}

/// A parsed NACK of either profile.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum NackRepr {
    /// The reference's 2-byte NACK: "the last seqnum I accepted in order was this".
    Reference {
        /// Last in-order seqnum the translator accepted.
        last_in_order: u8,
    },
    /// Our 12-byte NACK: "these `count` sequence numbers from `first_missing` on are missing".
    Extended {
        /// First missing sequence number.
        first_missing: u32,
        /// Number of missing sequence numbers (at least 1; wraps mod 2^32).
        count: u32,
    },
    /// The sketch-column NACK (version 2): "switch `switch`, resend sketch `sketch_id`'s
    /// epoch `epoch` from column `expected_column` on".
    SketchColumn {
        /// The sketch.
        sketch_id: u16,
        /// The switch the NACK is for (as it put it in its reports).
        switch: u32,
        /// The epoch the translator is merging for that switch.
        epoch: u32,
        /// The next column the translator expects from the switch.
        expected_column: u32,
    },
}

impl NackRepr {
    /// Parse a UDP payload received on port 40044, detecting the format.
    ///
    /// Exactly 2 bytes: reference ([`Error::Malformed`] if the nack bit is clear; reserved bits
    /// are ignored). Otherwise an extended first byte selects the extended format:
    /// [`Error::UnsupportedVersion`], [`Error::Truncated`], [`Error::UnknownOpcode`] for a kind
    /// other than NACK, [`Error::Malformed`] for reserved bits, a zero count or trailing bytes.
    /// Anything else is [`Error::Truncated`] (0–1 bytes) or [`Error::Malformed`].
    pub fn parse(bytes: &[u8]) -> Result<NackRepr> {
        if bytes.len() == REFERENCE_NACK_LEN {
            let n = ReferenceNack::new_checked(bytes)?;
            if !n.nack() {
                return Err(Error::Malformed);
            }
            return Ok(NackRepr::Reference {
                last_in_order: n.seqnum(),
            });
        }
        match bytes.first() {
            None => Err(Error::Truncated),
            Some(&crate::wire::sketch::MAGIC_VERSION) => {
                if bytes.len() < SKETCH_NACK_LEN {
                    return Err(Error::Truncated);
                }
                if bytes[1] != EXT_KIND_SKETCH_NACK {
                    return Err(Error::UnknownOpcode);
                }
                if bytes.len() != SKETCH_NACK_LEN {
                    return Err(Error::Malformed);
                }
                let be = |f: core::ops::Range<usize>| be_u32(&bytes[f]);
                Ok(NackRepr::SketchColumn {
                    sketch_id: u16::from_be_bytes([bytes[2], bytes[3]]),
                    switch: be(field::SK_SWITCH),
                    epoch: be(field::SK_EPOCH),
                    expected_column: be(field::SK_COLUMN),
                })
            }
            Some(&b) if is_extended(b) => {
                let n = ExtNack::new_checked(bytes)?;
                if n.kind() != EXT_KIND_NACK {
                    return Err(Error::UnknownOpcode);
                }
                if n.reserved() != 0 || n.missing_count() == 0 || bytes.len() != EXT_NACK_LEN {
                    return Err(Error::Malformed);
                }
                Ok(NackRepr::Extended {
                    first_missing: n.first_missing(),
                    count: n.missing_count(),
                })
            }
            Some(_) if bytes.len() < REFERENCE_NACK_LEN => Err(Error::Truncated),
            Some(_) => Err(Error::Malformed),
        }
    }

    /// [`Error::Malformed`] for an extended NACK with a zero count (it would name nothing).
    #[inline]
    pub fn check(&self) -> Result<()> {
        match self {
            NackRepr::Extended { count: 0, .. } => Err(Error::Malformed),
            _ => Ok(()),
        }
    }

    /// Length on the wire.
    #[inline]
    pub const fn buffer_len(&self) -> usize {
        match self {
            NackRepr::Reference { .. } => REFERENCE_NACK_LEN,
            NackRepr::Extended { .. } => EXT_NACK_LEN,
            NackRepr::SketchColumn { .. } => SKETCH_NACK_LEN,
        }
    }

    /// Write into the first [`Self::buffer_len`] bytes of `buf`; returns that length.
    pub fn emit(&self, buf: &mut [u8]) -> usize {
        let len = self.buffer_len();
        match *self {
            NackRepr::Reference { last_in_order } => {
                let mut n = ReferenceNack::new_unchecked(&mut buf[..len]);
                n.set_seqnum(last_in_order);
                n.set_flags(REFERENCE_NACK_FLAG);
            }
            NackRepr::Extended {
                first_missing,
                count,
            } => {
                let mut n = ExtNack::new_unchecked(&mut buf[..len]);
                n.set_magic_version(MAGIC_VERSION);
                n.set_kind(EXT_KIND_NACK);
                n.set_reserved(0);
                n.set_first_missing(first_missing);
                n.set_missing_count(count);
            }
            NackRepr::SketchColumn {
                sketch_id,
                switch,
                epoch,
                expected_column,
            } => {
                let b = &mut buf[..len];
                b[0] = crate::wire::sketch::MAGIC_VERSION;
                b[1] = EXT_KIND_SKETCH_NACK;
                b[field::SK_SKETCH_ID].copy_from_slice(&sketch_id.to_be_bytes());
                b[field::SK_SWITCH].copy_from_slice(&switch.to_be_bytes());
                b[field::SK_EPOCH].copy_from_slice(&epoch.to_be_bytes());
                b[field::SK_COLUMN].copy_from_slice(&expected_column.to_be_bytes());
            }
        }
        len
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn reference_golden() {
        let r = NackRepr::Reference {
            last_in_order: 0x2a,
        };
        let mut b = [0u8; 12];
        assert_eq!(r.emit(&mut b), 2);
        assert_eq!(&b[..2], &[0x2a, 0x80]);
        assert_eq!(NackRepr::parse(&[0x2a, 0x80]), Ok(r));
        // Reserved bits are ignored, as the reference does.
        assert_eq!(NackRepr::parse(&[0x2a, 0xff]), Ok(r));
        let v = ReferenceNack::new_checked(&[0x2a, 0xff][..]).unwrap();
        assert_eq!(
            (v.seqnum(), v.nack(), v.reserved_flags()),
            (0x2a, true, 0x7f)
        );
        // No positive ACKs exist.
        assert_eq!(NackRepr::parse(&[0x2a, 0x00]), Err(Error::Malformed));
        // Length decides: a 2-byte NACK whose seqnum looks like the extended magic is reference.
        assert_eq!(
            NackRepr::parse(&[0xd1, 0x80]),
            Ok(NackRepr::Reference {
                last_in_order: 0xd1
            })
        );
    }

    #[test]
    fn extended_golden() {
        let r = NackRepr::Extended {
            first_missing: 0x0102_0304,
            count: 3,
        };
        let mut b = [0u8; 12];
        assert_eq!(r.emit(&mut b), 12);
        assert_eq!(b, [0xd1, 0x80, 0, 0, 1, 2, 3, 4, 0, 0, 0, 3]);
        assert_eq!(NackRepr::parse(&b), Ok(r));
        let v = ExtNack::new_checked(&b[..]).unwrap();
        assert_eq!((v.magic_version(), v.kind(), v.reserved()), (0xd1, 0x80, 0));
    }

    #[test]
    fn errors() {
        let good = [0xd1, 0x80, 0, 0, 1, 2, 3, 4, 0, 0, 0, 3];
        assert_eq!(NackRepr::parse(&[]), Err(Error::Truncated));
        assert_eq!(NackRepr::parse(&[0x2a]), Err(Error::Truncated));
        assert_eq!(NackRepr::parse(&[0x2a, 0x80, 0]), Err(Error::Malformed));
        for n in 3..12 {
            assert_eq!(NackRepr::parse(&good[..n]), Err(Error::Truncated), "{n}");
        }
        assert_eq!(NackRepr::parse(&good[..1]), Err(Error::Truncated));
        let with = |i: usize, v: u8| {
            let mut b = good;
            b[i] = v;
            NackRepr::parse(&b)
        };
        // 0xD2 is version 2, whose only NACK (the sketch-column NACK) is 16 bytes long.
        assert_eq!(with(0, 0xd2), Err(Error::Truncated));
        assert_eq!(with(0, 0xd3), Err(Error::UnsupportedVersion));
        assert_eq!(with(0, 0xd0), Err(Error::UnsupportedVersion));
        assert_eq!(with(1, 0x81), Err(Error::UnknownOpcode));
        assert_eq!(with(2, 1), Err(Error::Malformed));
        assert_eq!(with(3, 1), Err(Error::Malformed));
        assert_eq!(with(11, 0), Err(Error::Malformed)); // count 0
        let mut long = good.to_vec();
        long.push(0);
        assert_eq!(NackRepr::parse(&long), Err(Error::Malformed));
        assert_eq!(
            NackRepr::Extended {
                first_missing: 1,
                count: 0
            }
            .check(),
            Err(Error::Malformed)
        );
        assert_eq!(
            ExtNack::new_checked(&[0x01u8; 12][..]).err(),
            Some(Error::Malformed)
        );
        assert_eq!(
            ReferenceNack::new_checked(&[0x01u8][..]).err(),
            Some(Error::Truncated)
        );
    }

    #[test]
    fn sketch_column_golden_and_errors() {
        let b = [
            0xd2, 0x81, 0x00, 0x07, 0x0a, 0x00, 0x00, 0x01, 0, 0, 0, 3, 0, 0, 0x01, 0x00,
        ];
        let n = NackRepr::parse(&b).unwrap();
        assert_eq!(
            n,
            NackRepr::SketchColumn {
                sketch_id: 7,
                switch: 0x0a00_0001,
                epoch: 3,
                expected_column: 256
            }
        );
        let mut out = [0u8; SKETCH_NACK_LEN];
        assert_eq!(n.emit(&mut out), 16);
        assert_eq!(out, b);
        for len in 3..16 {
            assert_eq!(NackRepr::parse(&b[..len]), Err(Error::Truncated), "{len}");
        }
        let mut k = b;
        k[1] = 0x80;
        assert_eq!(NackRepr::parse(&k), Err(Error::UnknownOpcode));
        let mut long = b.to_vec();
        long.push(0);
        assert_eq!(NackRepr::parse(&long), Err(Error::Malformed));
    }

    fn arb_nack() -> impl Strategy<Value = NackRepr> {
        prop_oneof![
            any::<u8>().prop_map(|s| NackRepr::Reference { last_in_order: s }),
            (any::<u32>(), 1..=u32::MAX).prop_map(|(f, c)| NackRepr::Extended {
                first_missing: f,
                count: c
            }),
            (any::<u16>(), any::<u32>(), any::<u32>(), any::<u32>()).prop_map(
                |(sketch_id, switch, epoch, expected_column)| NackRepr::SketchColumn {
                    sketch_id,
                    switch,
                    epoch,
                    expected_column
                }
            ),
        ]
    }

    proptest! {
        #[test]
        fn roundtrip(r in arb_nack()) {
            let mut b = [0u8; SKETCH_NACK_LEN];
            let n = r.emit(&mut b);
            prop_assert_eq!(n, r.buffer_len());
            prop_assert_eq!(NackRepr::parse(&b[..n]), Ok(r));
        }

        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..20)) {
            if let Ok(r) = NackRepr::parse(&bytes) {
                prop_assert_eq!(r.buffer_len(), bytes.len());
            }
        }

        #[test]
        fn magic_prefixed_bytes_never_panic(rest in proptest::collection::vec(any::<u8>(), 0..16)) {
            let mut bytes = vec![MAGIC_VERSION, EXT_KIND_NACK];
            bytes.extend_from_slice(&rest);
            if let Ok(r) = NackRepr::parse(&bytes) {
                let mut b = [0u8; SKETCH_NACK_LEN];
                let n = r.emit(&mut b);
                prop_assert_eq!(&b[..n], &bytes[..]);
            }
        }
    }
}
