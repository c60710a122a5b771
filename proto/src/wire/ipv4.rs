//! IPv4 headers. Options are accepted on receive (and skipped); we only ever emit 20-byte headers.
//! Fragments are rejected: neither DTA reports nor RoCEv2 frames are ever fragmented, and a
//! fragment's ICRC or report cannot be checked without reassembly.

use std::net::Ipv4Addr;

use super::{Error, Result};

/// Length of an IPv4 header without options.
pub const HEADER_LEN: usize = 20;
/// IP protocol number of UDP.
pub const PROTO_UDP: u8 = 17;

mod field {
    use core::ops::Range;
    pub const VER_IHL: usize = 0;
    pub const TOS: usize = 1;
    pub const LENGTH: Range<usize> = 2..4;
    pub const IDENT: Range<usize> = 4..6;
    pub const FLG_OFF: Range<usize> = 6..8;
    pub const TTL: usize = 8;
    pub const PROTOCOL: usize = 9;
    pub const CHECKSUM: Range<usize> = 10..12;
    pub const SRC: Range<usize> = 12..16;
    pub const DST: Range<usize> = 16..20;
}

const FLAG_DF: u16 = 0x4000;
const FLAG_MF: u16 = 0x2000;
const FRAG_OFFSET_MASK: u16 = 0x1FFF;

/// The Internet checksum (RFC 1071) shared by IPv4 and UDP.
pub(crate) mod checksum {
    /// Adds `data` as big-endian 16-bit words (odd tail padded with zero) to a running sum.
    #[inline]
    pub fn sum(mut acc: u32, data: &[u8]) -> u32 {
        let mut words = data.chunks_exact(2);
        for w in &mut words {
            acc += u16::from_be_bytes([w[0], w[1]]) as u32;
        }
        if let [last] = words.remainder() {
            acc += (*last as u32) << 8;
        }
        // Fold early so that even a 64 KiB input cannot overflow.
        (acc & 0xFFFF) + (acc >> 16)
    }

    /// Folds a running sum into the one's-complement 16-bit result (not yet inverted).
    #[inline]
    pub fn fold(mut acc: u32) -> u16 {
        while acc > 0xFFFF {
            acc = (acc & 0xFFFF) + (acc >> 16);
        }
        acc as u16
    }
}

/// A view of an IPv4 packet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ipv4Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Ipv4Packet<T> {
    /// Wraps a buffer without checking it.
    #[inline]
    pub const fn new_unchecked(buffer: T) -> Self {
        Ipv4Packet { buffer }
    }

    /// Wraps a buffer after [`check_len`](Self::check_len).
    #[inline]
    pub fn new_checked(buffer: T) -> Result<Self> {
        let p = Self::new_unchecked(buffer);
        p.check_len()?;
        Ok(p)
    }

    /// Checks that the header (with options) and the total length the header claims fit the
    /// buffer, so that every accessor, `payload` and the checksum functions are in bounds.
    ///
    /// `Truncated` if the buffer is shorter than either; `Malformed` if IHL < 5 or the total
    /// length is shorter than the header.
    pub fn check_len(&self) -> Result<()> {
        let len = self.buffer.as_ref().len();
        if len < HEADER_LEN {
            return Err(Error::Truncated);
        }
        let hl = self.header_len();
        if hl < HEADER_LEN {
            return Err(Error::Malformed);
        }
        let total = self.total_len() as usize;
        if total < hl {
            return Err(Error::Malformed);
        }
        if len < hl || len < total {
            return Err(Error::Truncated);
        }
        Ok(())
    }

    /// Returns the underlying buffer.
    #[inline]
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// IP version (4 for a valid packet).
    #[inline]
    pub fn version(&self) -> u8 {
        self.buffer.as_ref()[field::VER_IHL] >> 4
    }

    /// Header length in bytes (IHL × 4).
    #[inline]
    pub fn header_len(&self) -> usize {
        ((self.buffer.as_ref()[field::VER_IHL] & 0x0F) as usize) * 4
    }

    /// Type-of-service byte (DSCP and ECN).
    #[inline]
    pub fn tos(&self) -> u8 {
        self.buffer.as_ref()[field::TOS]
    }

    /// Total length (header and payload).
    #[inline]
    pub fn total_len(&self) -> u16 {
        self.read_u16(field::LENGTH.start)
    }

    /// Identification.
    #[inline]
    pub fn ident(&self) -> u16 {
        self.read_u16(field::IDENT.start)
    }

    /// Don't-Fragment flag.
    #[inline]
    pub fn dont_frag(&self) -> bool {
        self.read_u16(field::FLG_OFF.start) & FLAG_DF != 0
    }

    /// More-Fragments flag.
    #[inline]
    pub fn more_frags(&self) -> bool {
        self.read_u16(field::FLG_OFF.start) & FLAG_MF != 0
    }

    /// Fragment offset in bytes.
    #[inline]
    pub fn frag_offset(&self) -> u16 {
        (self.read_u16(field::FLG_OFF.start) & FRAG_OFFSET_MASK) << 3
    }

    /// Time to live.
    #[inline]
    pub fn ttl(&self) -> u8 {
        self.buffer.as_ref()[field::TTL]
    }

    /// Payload protocol number.
    #[inline]
    pub fn protocol(&self) -> u8 {
        self.buffer.as_ref()[field::PROTOCOL]
    }

    /// Header checksum as stored.
    #[inline]
    pub fn checksum(&self) -> u16 {
        self.read_u16(field::CHECKSUM.start)
    }

    /// Source address.
    #[inline]
    pub fn src_addr(&self) -> Ipv4Addr {
        let b = &self.buffer.as_ref()[field::SRC];
        Ipv4Addr::new(b[0], b[1], b[2], b[3])
    }

    /// Destination address.
    #[inline]
    pub fn dst_addr(&self) -> Ipv4Addr {
        let b = &self.buffer.as_ref()[field::DST];
        Ipv4Addr::new(b[0], b[1], b[2], b[3])
    }

    /// Whether the header checksum (over the header with options) is correct.
    #[inline]
    pub fn verify_checksum(&self) -> bool {
        let hdr = &self.buffer.as_ref()[..self.header_len()];
        checksum::fold(checksum::sum(0, hdr)) == 0xFFFF
    }

    /// The header bytes, options included.
    #[inline]
    pub fn header(&self) -> &[u8] {
        &self.buffer.as_ref()[..self.header_len()]
    }

    /// The payload, bounded by the total length (Ethernet padding excluded).
    #[inline]
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[self.header_len()..self.total_len() as usize]
    }

    #[inline]
    fn read_u16(&self, at: usize) -> u16 {
        let b = self.buffer.as_ref();
        u16::from_be_bytes([b[at], b[at + 1]])
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Ipv4Packet<T> {
    /// Sets version 4 and the header length in bytes (a multiple of 4, 20..=60).
    #[inline]
    pub fn set_version_and_header_len(&mut self, header_len: usize) {
        self.buffer.as_mut()[field::VER_IHL] = 0x40 | ((header_len / 4) as u8 & 0x0F);
    }

    /// Sets the type-of-service byte.
    #[inline]
    pub fn set_tos(&mut self, v: u8) {
        self.buffer.as_mut()[field::TOS] = v;
    }

    /// Sets the total length.
    #[inline]
    pub fn set_total_len(&mut self, v: u16) {
        self.write_u16(field::LENGTH.start, v);
    }

    /// Sets the identification.
    #[inline]
    pub fn set_ident(&mut self, v: u16) {
        self.write_u16(field::IDENT.start, v);
    }

    /// Sets the flags (DF, MF) and the fragment offset in bytes (a multiple of 8); the reserved
    /// flag is cleared.
    #[inline]
    pub fn set_flags_and_frag_offset(&mut self, dont_frag: bool, more_frags: bool, offset: u16) {
        let mut v = (offset >> 3) & FRAG_OFFSET_MASK;
        if dont_frag {
            v |= FLAG_DF;
        }
        if more_frags {
            v |= FLAG_MF;
        }
        self.write_u16(field::FLG_OFF.start, v);
    }

    /// Sets the time to live.
    #[inline]
    pub fn set_ttl(&mut self, v: u8) {
        self.buffer.as_mut()[field::TTL] = v;
    }

    /// Sets the payload protocol.
    #[inline]
    pub fn set_protocol(&mut self, v: u8) {
        self.buffer.as_mut()[field::PROTOCOL] = v;
    }

    /// Stores a checksum value as is.
    #[inline]
    pub fn set_checksum(&mut self, v: u16) {
        self.write_u16(field::CHECKSUM.start, v);
    }

    /// Sets the source address.
    #[inline]
    pub fn set_src_addr(&mut self, a: Ipv4Addr) {
        self.buffer.as_mut()[field::SRC].copy_from_slice(&a.octets());
    }

    /// Sets the destination address.
    #[inline]
    pub fn set_dst_addr(&mut self, a: Ipv4Addr) {
        self.buffer.as_mut()[field::DST].copy_from_slice(&a.octets());
    }

    /// Computes and stores the header checksum (over the header with options).
    #[inline]
    pub fn fill_checksum(&mut self) {
        self.set_checksum(0);
        let hl = self.header_len();
        let sum = checksum::fold(checksum::sum(0, &self.buffer.as_ref()[..hl]));
        self.set_checksum(!sum);
    }

    /// Mutable payload, bounded by the total length.
    #[inline]
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let (hl, tl) = (self.header_len(), self.total_len() as usize);
        &mut self.buffer.as_mut()[hl..tl]
    }

    #[inline]
    fn write_u16(&mut self, at: usize, v: u16) {
        self.buffer.as_mut()[at..at + 2].copy_from_slice(&v.to_be_bytes());
    }
}

/// A parsed, unfragmented IPv4 header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Ipv4Repr {
    /// Source address.
    pub src: Ipv4Addr,
    /// Destination address.
    pub dst: Ipv4Addr,
    /// Payload protocol.
    pub protocol: u8,
    /// Time to live.
    pub ttl: u8,
    /// Type-of-service byte (DSCP and ECN).
    pub tos: u8,
    /// Identification.
    pub ident: u16,
    /// Don't-Fragment flag.
    pub dont_frag: bool,
    /// Payload length in bytes (total length minus header length).
    pub payload_len: usize,
}

impl Ipv4Repr {
    /// Parses a header and checks its checksum (`Malformed` if wrong).
    ///
    /// Rejects version ≠ 4, IHL < 5, a total length shorter than the header (`Malformed`) or
    /// longer than the buffer (`Truncated`), and fragments (`Malformed`). Options are skipped.
    pub fn parse<T: AsRef<[u8]>>(packet: &Ipv4Packet<T>) -> Result<Self> {
        let r = Self::parse_ignoring_checksum(packet)?;
        if !packet.verify_checksum() {
            return Err(Error::Malformed);
        }
        Ok(r)
    }

    /// As [`parse`](Self::parse) but without checking the header checksum (for captures of
    /// locally sent traffic, whose checksum a NIC fills in after the capture point).
    pub fn parse_ignoring_checksum<T: AsRef<[u8]>>(packet: &Ipv4Packet<T>) -> Result<Self> {
        packet.check_len()?;
        if packet.version() != 4 {
            return Err(Error::Malformed);
        }
        if packet.more_frags() || packet.frag_offset() != 0 {
            return Err(Error::Malformed);
        }
        Ok(Ipv4Repr {
            src: packet.src_addr(),
            dst: packet.dst_addr(),
            protocol: packet.protocol(),
            ttl: packet.ttl(),
            tos: packet.tos(),
            ident: packet.ident(),
            dont_frag: packet.dont_frag(),
            payload_len: packet.total_len() as usize - packet.header_len(),
        })
    }

    /// Bytes `emit` writes (always a 20-byte header).
    #[inline]
    pub const fn header_len(&self) -> usize {
        HEADER_LEN
    }

    /// Header plus payload length, the IPv4 total length.
    #[inline]
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN + self.payload_len
    }

    /// Writes a 20-byte header (IHL 5, no options, offset 0) with a correct checksum.
    ///
    /// Panics if `payload_len` does not fit the 16-bit total length (a programming error).
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut Ipv4Packet<T>) {
        let total = u16::try_from(self.buffer_len()).expect("IPv4 payload too long");
        packet.set_version_and_header_len(HEADER_LEN);
        packet.set_tos(self.tos);
        packet.set_total_len(total);
        packet.set_ident(self.ident);
        packet.set_flags_and_frag_offset(self.dont_frag, false, 0);
        packet.set_ttl(self.ttl);
        packet.set_protocol(self.protocol);
        packet.set_src_addr(self.src);
        packet.set_dst_addr(self.dst);
        packet.fill_checksum();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    // The IPv4 header of the worked example in dta-reference.md §4.5.
    const EXAMPLE: [u8; 20] = [
        0x45, 0x00, 0x00, 0x44, 0x2c, 0x75, 0x40, 0x00, 0x40, 0x11, 0xf9, 0x9c, 0x0a, 0x00, 0x00,
        0x65, 0x0a, 0x00, 0x00, 0x33,
    ];

    fn example_buf() -> Vec<u8> {
        let mut b = EXAMPLE.to_vec();
        b.resize(0x44, 0);
        b
    }

    #[test]
    fn parse_example() {
        let b = example_buf();
        let p = Ipv4Packet::new_checked(&b[..]).unwrap();
        assert!(p.verify_checksum());
        let r = Ipv4Repr::parse(&p).unwrap();
        assert_eq!(
            r,
            Ipv4Repr {
                src: Ipv4Addr::new(10, 0, 0, 101),
                dst: Ipv4Addr::new(10, 0, 0, 51),
                protocol: PROTO_UDP,
                ttl: 64,
                tos: 0,
                ident: 0x2c75,
                dont_frag: true,
                payload_len: 48,
            }
        );
        let mut out = vec![0u8; r.buffer_len()];
        r.emit(&mut Ipv4Packet::new_unchecked(&mut out[..]));
        assert_eq!(out[..20], EXAMPLE);
    }

    #[test]
    fn rejects() {
        let good = example_buf();
        let check = |f: &dyn Fn(&mut Vec<u8>), e: Error| {
            let mut b = good.clone();
            f(&mut b);
            let mut p = Ipv4Packet::new_unchecked(&mut b[..]);
            p.fill_checksum();
            let p = Ipv4Packet::new_unchecked(&b[..]);
            assert_eq!(Ipv4Repr::parse(&p), Err(e));
        };
        check(&|b| b[0] = 0x65, Error::Malformed); // version 6
        check(&|b| b[0] = 0x44, Error::Malformed); // IHL 4
        check(&|b| b[3] = 19, Error::Malformed); // total < header
        check(&|b| b[3] = 0x45, Error::Truncated); // total > buffer
        check(&|b| b[6] = 0x20, Error::Malformed); // MF
        check(&|b| b[7] = 0x01, Error::Malformed); // offset 8
        let p = Ipv4Packet::new_unchecked(&good[..19]);
        assert_eq!(Ipv4Repr::parse(&p), Err(Error::Truncated));
        // Bad checksum.
        let mut b = good.clone();
        b[8] = 63;
        let p = Ipv4Packet::new_unchecked(&b[..]);
        assert_eq!(Ipv4Repr::parse(&p), Err(Error::Malformed));
        assert!(Ipv4Repr::parse_ignoring_checksum(&p).is_ok());
    }

    #[test]
    fn options_are_skipped() {
        let mut b = [0u8; 24 + 4];
        b[..20].copy_from_slice(&EXAMPLE);
        b[0] = 0x46;
        b[2..4].copy_from_slice(&28u16.to_be_bytes());
        b[20..24].copy_from_slice(&[1, 1, 1, 0]); // NOP NOP NOP EOL
        b[24..].copy_from_slice(b"data");
        let mut p = Ipv4Packet::new_unchecked(&mut b[..]);
        p.fill_checksum();
        let p = Ipv4Packet::new_checked(&b[..]).unwrap();
        let r = Ipv4Repr::parse(&p).unwrap();
        assert_eq!(r.payload_len, 4);
        assert_eq!(p.payload(), b"data");
    }

    proptest! {
        #[test]
        fn repr_round_trip(src in any::<[u8; 4]>(), dst in any::<[u8; 4]>(), protocol in any::<u8>(),
                           ttl in any::<u8>(), tos in any::<u8>(), ident in any::<u16>(),
                           dont_frag in any::<bool>(), payload_len in 0usize..64, pad in 0usize..8) {
            let r = Ipv4Repr {
                src: src.into(), dst: dst.into(), protocol, ttl, tos, ident, dont_frag, payload_len,
            };
            let mut buf = vec![0xAAu8; r.buffer_len() + pad];
            r.emit(&mut Ipv4Packet::new_unchecked(&mut buf[..]));
            let p = Ipv4Packet::new_checked(&buf[..]).unwrap();
            prop_assert!(p.verify_checksum());
            prop_assert_eq!(Ipv4Repr::parse(&p).unwrap(), r);
            prop_assert_eq!(p.payload().len(), payload_len);
        }

        #[test]
        fn arbitrary_bytes_never_panic(buf in proptest::collection::vec(any::<u8>(), 0..80)) {
            let _ = Ipv4Repr::parse(&Ipv4Packet::new_unchecked(&buf[..]))
                .or_else(|_| Ipv4Repr::parse_ignoring_checksum(&Ipv4Packet::new_unchecked(&buf[..])));
            if let Ok(p) = Ipv4Packet::new_checked(&buf[..]) {
                let _ = (p.version(), p.tos(), p.ident(), p.dont_frag(), p.more_frags(),
                         p.frag_offset(), p.ttl(), p.protocol(), p.checksum(), p.src_addr(),
                         p.dst_addr(), p.verify_checksum(), p.header().len(), p.payload().len());
            }
        }

        #[test]
        fn structured_bytes_never_panic(ihl in 0u8..16, total in 0u16..100,
                                        tail in proptest::collection::vec(any::<u8>(), 0..80)) {
            let mut buf = vec![0x40 | ihl, 0];
            buf.extend_from_slice(&total.to_be_bytes());
            buf.extend_from_slice(&tail);
            if let Ok(p) = Ipv4Packet::new_checked(&buf[..]) {
                prop_assert!(p.header_len() >= HEADER_LEN);
                let _ = (p.verify_checksum(), p.payload().len(), Ipv4Repr::parse(&p));
            }
        }
    }
}
