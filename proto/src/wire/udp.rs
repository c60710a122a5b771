//! UDP headers. RoCEv2 frames carry UDP checksum 0 (allowed over IPv4, and what the reference
//! and rxe send); DTA reports and NACKs may carry a real one.

use std::net::Ipv4Addr;

use super::ipv4::{checksum, PROTO_UDP};
use super::{Error, Result};

/// Length of a UDP header.
pub const HEADER_LEN: usize = 8;

mod field {
    use core::ops::Range;
    pub const SRC_PORT: Range<usize> = 0..2;
    pub const DST_PORT: Range<usize> = 2..4;
    pub const LENGTH: Range<usize> = 4..6;
    pub const CHECKSUM: Range<usize> = 6..8;
}

/// A view of a UDP datagram.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UdpPacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> UdpPacket<T> {
    /// Wraps a buffer without checking it.
    #[inline]
    pub const fn new_unchecked(buffer: T) -> Self {
        UdpPacket { buffer }
    }

    /// Wraps a buffer after [`check_len`](Self::check_len).
    #[inline]
    pub fn new_checked(buffer: T) -> Result<Self> {
        let p = Self::new_unchecked(buffer);
        p.check_len()?;
        Ok(p)
    }

    /// Checks the header fits and the length field lies in `8..=buffer length`
    /// (`Truncated` if the buffer is short, `Malformed` if the field is below 8).
    #[inline]
    pub fn check_len(&self) -> Result<()> {
        let len = self.buffer.as_ref().len();
        if len < HEADER_LEN {
            return Err(Error::Truncated);
        }
        let field_len = self.len() as usize;
        if field_len < HEADER_LEN {
            return Err(Error::Malformed);
        }
        if field_len > len {
            return Err(Error::Truncated);
        }
        Ok(())
    }

    /// Returns the underlying buffer.
    #[inline]
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// Source port.
    #[inline]
    pub fn src_port(&self) -> u16 {
        self.read_u16(field::SRC_PORT.start)
    }

    /// Destination port.
    #[inline]
    pub fn dst_port(&self) -> u16 {
        self.read_u16(field::DST_PORT.start)
    }

    /// Length field (header and payload).
    #[inline]
    pub fn len(&self) -> u16 {
        self.read_u16(field::LENGTH.start)
    }

    /// Whether the length field claims no payload.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len() as usize <= HEADER_LEN
    }

    /// Checksum as stored (0 = none).
    #[inline]
    pub fn checksum(&self) -> u16 {
        self.read_u16(field::CHECKSUM.start)
    }

    /// The payload, bounded by the length field.
    #[inline]
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[HEADER_LEN..self.len() as usize]
    }

    /// Whether the checksum is absent (0) or correct for this pseudo-header.
    pub fn verify_checksum(&self, src: Ipv4Addr, dst: Ipv4Addr) -> bool {
        if self.checksum() == 0 {
            return true;
        }
        let dgram = &self.buffer.as_ref()[..self.len() as usize];
        checksum::fold(checksum::sum(pseudo_sum(src, dst, self.len()), dgram)) == 0xFFFF
    }

    #[inline]
    fn read_u16(&self, at: usize) -> u16 {
        let b = self.buffer.as_ref();
        u16::from_be_bytes([b[at], b[at + 1]])
    }
}

fn pseudo_sum(src: Ipv4Addr, dst: Ipv4Addr, len: u16) -> u32 {
    let mut acc = checksum::sum(0, &src.octets());
    acc = checksum::sum(acc, &dst.octets());
    acc + PROTO_UDP as u32 + len as u32
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> UdpPacket<T> {
    /// Sets the source port.
    #[inline]
    pub fn set_src_port(&mut self, v: u16) {
        self.write_u16(field::SRC_PORT.start, v);
    }

    /// Sets the destination port.
    #[inline]
    pub fn set_dst_port(&mut self, v: u16) {
        self.write_u16(field::DST_PORT.start, v);
    }

    /// Sets the length field.
    #[inline]
    pub fn set_len(&mut self, v: u16) {
        self.write_u16(field::LENGTH.start, v);
    }

    /// Stores a checksum value as is (0 = none).
    #[inline]
    pub fn set_checksum(&mut self, v: u16) {
        self.write_u16(field::CHECKSUM.start, v);
    }

    /// Computes and stores the real checksum over the IPv4 pseudo-header, header and payload
    /// (the length field must already be set); a computed 0 is sent as 0xFFFF (RFC 768).
    pub fn fill_checksum(&mut self, src: Ipv4Addr, dst: Ipv4Addr) {
        self.set_checksum(0);
        let len = self.len();
        let dgram = &self.buffer.as_ref()[..len as usize];
        let sum = !checksum::fold(checksum::sum(pseudo_sum(src, dst, len), dgram));
        self.set_checksum(if sum == 0 { 0xFFFF } else { sum });
    }

    /// Mutable payload, bounded by the length field.
    #[inline]
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let len = self.len() as usize;
        &mut self.buffer.as_mut()[HEADER_LEN..len]
    }

    #[inline]
    fn write_u16(&mut self, at: usize, v: u16) {
        self.buffer.as_mut()[at..at + 2].copy_from_slice(&v.to_be_bytes());
    }
}

/// A parsed UDP header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct UdpRepr {
    /// Source port.
    pub src_port: u16,
    /// Destination port.
    pub dst_port: u16,
    /// Payload length (length field minus 8).
    pub payload_len: usize,
}

impl UdpRepr {
    /// Parses a header, validating the length field; the checksum is the caller's business
    /// ([`UdpPacket::verify_checksum`]) because it needs the IP addresses.
    #[inline]
    pub fn parse<T: AsRef<[u8]>>(packet: &UdpPacket<T>) -> Result<Self> {
        packet.check_len()?;
        Ok(UdpRepr {
            src_port: packet.src_port(),
            dst_port: packet.dst_port(),
            payload_len: packet.len() as usize - HEADER_LEN,
        })
    }

    /// Bytes of header `emit` writes.
    #[inline]
    pub const fn header_len(&self) -> usize {
        HEADER_LEN
    }

    /// Header plus payload, the length field.
    #[inline]
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN + self.payload_len
    }

    /// Writes the header with checksum 0; call [`UdpPacket::fill_checksum`] after the payload
    /// for a real one. Panics if the length does not fit 16 bits.
    #[inline]
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut UdpPacket<T>) {
        packet.set_src_port(self.src_port);
        packet.set_dst_port(self.dst_port);
        packet.set_len(u16::try_from(self.buffer_len()).expect("UDP payload too long"));
        packet.set_checksum(0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn known_checksum() {
        // 10.0.0.1:1234 -> 10.0.0.2:80, payload "hi"; worked by hand:
        // pseudo 0a00+0001+0a00+0002+0011+000a = 0x141e; header 04d2+0050+000a = 0x052c;
        // payload 6869; total 0x141e+0x052c+0x6869 = 0x81b3 -> !0x81b3 = 0x7e4c.
        let mut b = [0x04, 0xd2, 0x00, 0x50, 0x00, 0x0a, 0, 0, b'h', b'i'];
        let (s, d) = (Ipv4Addr::new(10, 0, 0, 1), Ipv4Addr::new(10, 0, 0, 2));
        let mut p = UdpPacket::new_unchecked(&mut b[..]);
        p.fill_checksum(s, d);
        assert_eq!(p.checksum(), 0x7e4c);
        assert!(p.verify_checksum(s, d));
        assert!(!p.verify_checksum(s, Ipv4Addr::new(10, 0, 0, 3)));
        p.set_checksum(0);
        assert!(p.verify_checksum(s, Ipv4Addr::new(10, 0, 0, 3)));
    }

    #[test]
    fn length_field_validated() {
        let mut b = [0u8; 12];
        b[5] = 7;
        assert_eq!(
            UdpPacket::new_checked(&b[..]).unwrap_err(),
            Error::Malformed
        );
        b[5] = 13;
        assert_eq!(
            UdpPacket::new_checked(&b[..]).unwrap_err(),
            Error::Truncated
        );
        b[5] = 10;
        assert_eq!(UdpPacket::new_checked(&b[..]).unwrap().payload().len(), 2);
        assert_eq!(
            UdpPacket::new_checked(&b[..7]).unwrap_err(),
            Error::Truncated
        );
    }

    proptest! {
        #[test]
        fn repr_round_trip(src_port in any::<u16>(), dst_port in any::<u16>(),
                           payload in proptest::collection::vec(any::<u8>(), 0..40),
                           sip in any::<[u8; 4]>(), dip in any::<[u8; 4]>()) {
            let r = UdpRepr { src_port, dst_port, payload_len: payload.len() };
            let mut buf = vec![0u8; r.buffer_len() + 3];
            buf[HEADER_LEN..r.buffer_len()].copy_from_slice(&payload);
            let mut p = UdpPacket::new_unchecked(&mut buf[..]);
            r.emit(&mut p);
            p.fill_checksum(sip.into(), dip.into());
            let p = UdpPacket::new_checked(&buf[..]).unwrap();
            prop_assert_ne!(p.checksum(), 0);
            prop_assert!(p.verify_checksum(sip.into(), dip.into()));
            prop_assert_eq!(UdpRepr::parse(&p).unwrap(), r);
            prop_assert_eq!(p.payload(), &payload[..]);
        }

        #[test]
        fn arbitrary_bytes_never_panic(buf in proptest::collection::vec(any::<u8>(), 0..40),
                                       sip in any::<[u8; 4]>()) {
            let p = UdpPacket::new_unchecked(&buf[..]);
            if let Ok(r) = UdpRepr::parse(&p) {
                prop_assert_eq!(p.payload().len(), r.payload_len);
                let _ = p.verify_checksum(sip.into(), sip.into());
            }
        }
    }
}
