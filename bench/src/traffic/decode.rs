//! Ordinary traffic out of one capture record: link layer → IPv4 / IPv6 → TCP, UDP, ICMP.
//!
//! This is a reader of other people's packets, not a DTA wire format, so it lives with the
//! generator rather than in `dta_proto::wire` (which holds what DTA emits and must agree on).
//! It differs from `dta_proto`'s IPv4 view on purpose: it never checks checksums (captures taken
//! on a sender show offloaded checksums as wrong) and it reads past a snap length (a header
//! whose fields were captured is enough; the lengths come from the IP header, so a record
//! truncated by `tcpdump -s 96` still counts the packet's real size).
//!
//! Every access goes through [`Bytes`], so no input can make it panic: what does not fit is
//! [`Skip::Truncated`] or [`Skip::Malformed`].

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Link types this reader understands (the pcap `LINKTYPE_*` values).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Link {
    /// `LINKTYPE_ETHERNET` (1), with any number of 802.1Q / 802.1ad tags (up to 4).
    Ethernet,
    /// `LINKTYPE_LINUX_SLL` (113): Linux "cooked" capture v1 (`tcpdump -i any`).
    LinuxSll,
    /// `LINKTYPE_LINUX_SLL2` (276): Linux cooked capture v2.
    LinuxSll2,
    /// `LINKTYPE_RAW` (101; also 12 and 14, the DLT values some systems wrote): bare IPv4/IPv6.
    RawIp,
    /// `LINKTYPE_IPV4` (228).
    Ipv4,
    /// `LINKTYPE_IPV6` (229).
    Ipv6,
    /// `LINKTYPE_NULL` (0) and `LINKTYPE_LOOP` (108): a 4-byte address family, then IP.
    Loopback,
}

impl Link {
    /// The link type of a pcap `LINKTYPE_*` value; `None` if this reader cannot read it.
    pub fn from_linktype(v: u32) -> Option<Link> {
        Some(match v {
            1 => Link::Ethernet,
            113 => Link::LinuxSll,
            276 => Link::LinuxSll2,
            12 | 14 | 101 => Link::RawIp,
            228 => Link::Ipv4,
            229 => Link::Ipv6,
            0 | 108 => Link::Loopback,
            _ => return None,
        })
    }

    /// A short name (for messages and the ground truth).
    pub fn name(self) -> &'static str {
        match self {
            Link::Ethernet => "ethernet",
            Link::LinuxSll => "linux-sll",
            Link::LinuxSll2 => "linux-sll2",
            Link::RawIp => "raw-ip",
            Link::Ipv4 => "ipv4",
            Link::Ipv6 => "ipv6",
            Link::Loopback => "loopback",
        }
    }
}

/// Why a record carries no packet the generator can use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Skip {
    /// Not IPv4 or IPv6 (ARP, LLDP, spanning tree, MPLS, ...).
    NotIp,
    /// An IPv4 fragment or an IPv6 packet with a Fragment header (not an atomic fragment):
    /// only the first would carry ports, so every fragment is left out.
    Fragment,
    /// The record ends before the headers the generator needs (link, IP, or the first bytes
    /// of TCP/UDP).
    Truncated,
    /// A header contradicts itself (IHL < 5, a total length shorter than the header, a TCP
    /// data offset beyond the segment, an IP version that is neither 4 nor 6).
    Malformed,
}

/// TCP fields of a segment (what retransmission detection reads).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TcpSegment {
    /// Sequence number.
    pub seq: u32,
    /// Flags byte (FIN 0x01, SYN 0x02, RST 0x04, PSH 0x08, ACK 0x10, ...).
    pub flags: u8,
    /// Payload bytes (from the IP lengths, not from what was captured).
    pub payload: u32,
}

impl TcpSegment {
    /// FIN.
    pub const FIN: u8 = 0x01;
    /// SYN.
    pub const SYN: u8 = 0x02;
    /// RST.
    pub const RST: u8 = 0x04;

    /// Sequence space the segment occupies: payload, plus one each for SYN and FIN.
    pub fn seq_len(&self) -> u32 {
        self.payload + (self.flags & Self::SYN != 0) as u32 + (self.flags & Self::FIN != 0) as u32
    }
}

/// One IP packet as the generator sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Decoded {
    /// Source address.
    pub src: IpAddr,
    /// Destination address.
    pub dst: IpAddr,
    /// IP protocol (IPv6: the upper-layer next header).
    pub proto: u8,
    /// Source port (0 for protocols without ports).
    pub sport: u16,
    /// Destination port (0 for protocols without ports).
    pub dport: u16,
    /// Bytes of the IP packet (header and payload): what the switches count.
    pub len: u32,
    /// TCP fields, for TCP.
    pub tcp: Option<TcpSegment>,
}

mod field {
    pub const ETH_TYPE: usize = 12;
    pub const ETH_HEADER: usize = 14;
    pub const VLAN_TAG: usize = 4;
    pub const SLL_PROTOCOL: usize = 14;
    pub const SLL_HEADER: usize = 16;
    pub const SLL2_PROTOCOL: usize = 0;
    pub const SLL2_HEADER: usize = 20;
    pub const LOOPBACK_HEADER: usize = 4;

    pub const IPV4_HEADER: usize = 20;
    pub const IPV4_TOTAL_LEN: usize = 2;
    pub const IPV4_FLAGS_FRAG: usize = 6;
    pub const IPV4_PROTOCOL: usize = 9;
    pub const IPV4_SRC: usize = 12;
    pub const IPV4_DST: usize = 16;

    pub const IPV6_HEADER: usize = 40;
    pub const IPV6_PAYLOAD_LEN: usize = 4;
    pub const IPV6_NEXT_HEADER: usize = 6;
    pub const IPV6_SRC: usize = 8;
    pub const IPV6_DST: usize = 24;

    pub const TCP_SEQ: usize = 4;
    pub const TCP_DATA_OFFSET: usize = 12;
    pub const TCP_FLAGS: usize = 13;
    pub const TCP_MIN_HEADER: usize = 20;
}

/// Ethertypes.
const ETHERTYPE_IPV4: u16 = 0x0800;
const ETHERTYPE_IPV6: u16 = 0x86DD;
const ETHERTYPE_VLAN: u16 = 0x8100;
const ETHERTYPE_QINQ: u16 = 0x88A8;
const ETHERTYPE_QINQ_OLD: u16 = 0x9100;
/// Tags read at most before giving up (a hostile frame could stack them to the end).
const MAX_VLAN_TAGS: usize = 4;
/// IPv6 extension headers walked at most.
const MAX_EXTENSION_HEADERS: usize = 8;

/// IP protocols.
pub const PROTO_ICMP: u8 = 1;
/// TCP.
pub const PROTO_TCP: u8 = 6;
/// UDP.
pub const PROTO_UDP: u8 = 17;
/// ICMPv6.
pub const PROTO_ICMPV6: u8 = 58;
const PROTO_DCCP: u8 = 33;
const PROTO_SCTP: u8 = 132;
const PROTO_UDPLITE: u8 = 136;

/// Bounds-checked reads of a record.
#[derive(Clone, Copy)]
struct Bytes<'a>(&'a [u8]);

impl<'a> Bytes<'a> {
    fn u8(&self, at: usize) -> Result<u8, Skip> {
        self.0.get(at).copied().ok_or(Skip::Truncated)
    }

    fn u16(&self, at: usize) -> Result<u16, Skip> {
        Ok(u16::from_be_bytes([self.u8(at)?, self.u8(at + 1)?]))
    }

    fn u32(&self, at: usize) -> Result<u32, Skip> {
        Ok(u32::from_be_bytes([
            self.u8(at)?,
            self.u8(at + 1)?,
            self.u8(at + 2)?,
            self.u8(at + 3)?,
        ]))
    }

    fn array<const N: usize>(&self, at: usize) -> Result<[u8; N], Skip> {
        let s = self.0.get(at..at + N).ok_or(Skip::Truncated)?;
        let mut a = [0u8; N];
        a.copy_from_slice(s);
        Ok(a)
    }

    fn from(&self, at: usize) -> Result<Bytes<'a>, Skip> {
        self.0.get(at..).map(Bytes).ok_or(Skip::Truncated)
    }
}

/// Decodes one record of link type `link`. `orig_len` is the packet's length on the wire (the
/// record may hold less); it stands in for an IP length of 0 (TSO and jumbo packets).
pub fn decode(link: Link, record: &[u8], orig_len: u32) -> Result<Decoded, Skip> {
    let b = Bytes(record);
    let (ethertype, at) = match link {
        Link::Ethernet => (b.u16(field::ETH_TYPE)?, field::ETH_HEADER),
        Link::LinuxSll => (b.u16(field::SLL_PROTOCOL)?, field::SLL_HEADER),
        Link::LinuxSll2 => (b.u16(field::SLL2_PROTOCOL)?, field::SLL2_HEADER),
        Link::RawIp => return ip_by_version(b, orig_len),
        Link::Ipv4 => return ipv4(b, orig_len),
        Link::Ipv6 => return ipv6(b, orig_len),
        Link::Loopback => {
            // The address family is in the writer's byte order and differs between systems
            // (AF_INET6 is 10, 24, 28 or 30): the IP version nibble says more.
            let ip = b.from(field::LOOPBACK_HEADER)?;
            return ip_by_version(ip, orig_len.saturating_sub(field::LOOPBACK_HEADER as u32));
        }
    };
    // 802.1Q / 802.1ad tags (a cooked capture may carry them in its payload too).
    let (ethertype, at) = skip_tags(b, ethertype, at)?;
    let rest = orig_len.saturating_sub(at as u32);
    match ethertype {
        ETHERTYPE_IPV4 => ipv4(b.from(at)?, rest),
        ETHERTYPE_IPV6 => ipv6(b.from(at)?, rest),
        _ => Err(Skip::NotIp),
    }
}

fn skip_tags(b: Bytes<'_>, mut ethertype: u16, mut at: usize) -> Result<(u16, usize), Skip> {
    for _ in 0..MAX_VLAN_TAGS {
        if !matches!(
            ethertype,
            ETHERTYPE_VLAN | ETHERTYPE_QINQ | ETHERTYPE_QINQ_OLD
        ) {
            break;
        }
        ethertype = b.u16(at + 2)?;
        at += field::VLAN_TAG;
    }
    Ok((ethertype, at))
}

fn ip_by_version(b: Bytes<'_>, wire_len: u32) -> Result<Decoded, Skip> {
    match b.u8(0)? >> 4 {
        4 => ipv4(b, wire_len),
        6 => ipv6(b, wire_len),
        _ => Err(Skip::Malformed),
    }
}

fn ipv4(b: Bytes<'_>, wire_len: u32) -> Result<Decoded, Skip> {
    let vihl = b.u8(0)?;
    if vihl >> 4 != 4 {
        return Err(Skip::Malformed);
    }
    let hl = (vihl & 0x0F) as usize * 4;
    if hl < field::IPV4_HEADER {
        return Err(Skip::Malformed);
    }
    // The whole header must be there (options included): the ports follow it.
    b.array::<1>(hl - 1)?;
    let total = b.u16(field::IPV4_TOTAL_LEN)? as u32;
    // 0: a TSO super-packet as the sender's capture saw it; the wire length says more.
    let ip_len = if total == 0 { wire_len } else { total };
    if (ip_len as usize) < hl {
        return Err(Skip::Malformed);
    }
    let frag = b.u16(field::IPV4_FLAGS_FRAG)?;
    if frag & 0x2000 != 0 || frag & 0x1FFF != 0 {
        return Err(Skip::Fragment);
    }
    let proto = b.u8(field::IPV4_PROTOCOL)?;
    let src = Ipv4Addr::from(b.array::<4>(field::IPV4_SRC)?);
    let dst = Ipv4Addr::from(b.array::<4>(field::IPV4_DST)?);
    transport(
        b.from(hl)?,
        proto,
        ip_len - hl as u32,
        ip_len,
        IpAddr::V4(src),
        IpAddr::V4(dst),
    )
}

fn ipv6(b: Bytes<'_>, wire_len: u32) -> Result<Decoded, Skip> {
    if b.u8(0)? >> 4 != 6 {
        return Err(Skip::Malformed);
    }
    let plen = b.u16(field::IPV6_PAYLOAD_LEN)? as u32;
    let src = Ipv6Addr::from(b.array::<16>(field::IPV6_SRC)?);
    let dst = Ipv6Addr::from(b.array::<16>(field::IPV6_DST)?);
    let h = field::IPV6_HEADER as u32;
    // 0: a jumbogram (the length is in a hop-by-hop option) or a TSO super-packet.
    let ip_len = if plen == 0 { wire_len.max(h) } else { h + plen };
    let mut next = b.u8(field::IPV6_NEXT_HEADER)?;
    let mut at = field::IPV6_HEADER;
    for _ in 0..MAX_EXTENSION_HEADERS {
        let len = match next {
            // Hop-by-hop, routing, destination options, mobility, HIP, shim6.
            0 | 43 | 60 | 135 | 139 | 140 => (b.u8(at + 1)? as usize + 1) * 8,
            // Authentication header: length in 4-byte units, minus 2.
            51 => (b.u8(at + 1)? as usize + 2) * 4,
            44 => {
                let off_m = b.u16(at + 2)?;
                // An atomic fragment (offset 0, M clear, RFC 6946) is a whole packet.
                if off_m & 0xFFF9 != 0 {
                    return Err(Skip::Fragment);
                }
                8
            }
            _ => break,
        };
        next = b.u8(at)?;
        at += len;
        if at as u32 > ip_len {
            return Err(Skip::Malformed);
        }
    }
    if matches!(next, 0 | 43 | 44 | 51 | 60 | 135 | 139 | 140) {
        // More extension headers than anyone sends.
        return Err(Skip::Malformed);
    }
    transport(
        b.from(at)?,
        next,
        ip_len - at as u32,
        ip_len,
        IpAddr::V6(src),
        IpAddr::V6(dst),
    )
}

fn transport(
    l4: Bytes<'_>,
    proto: u8,
    l4_len: u32,
    ip_len: u32,
    src: IpAddr,
    dst: IpAddr,
) -> Result<Decoded, Skip> {
    let mut d = Decoded {
        src,
        dst,
        proto,
        sport: 0,
        dport: 0,
        len: ip_len,
        tcp: None,
    };
    match proto {
        PROTO_TCP => {
            d.sport = l4.u16(0)?;
            d.dport = l4.u16(2)?;
            let seq = l4.u32(field::TCP_SEQ)?;
            let off = (l4.u8(field::TCP_DATA_OFFSET)? >> 4) as u32 * 4;
            let flags = l4.u8(field::TCP_FLAGS)?;
            if off < field::TCP_MIN_HEADER as u32 || off > l4_len {
                return Err(Skip::Malformed);
            }
            d.tcp = Some(TcpSegment {
                seq,
                flags,
                payload: l4_len - off,
            });
        }
        PROTO_UDP | PROTO_UDPLITE | PROTO_SCTP | PROTO_DCCP => {
            d.sport = l4.u16(0)?;
            d.dport = l4.u16(2)?;
        }
        _ => {}
    }
    Ok(d)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An IPv4/TCP packet written byte by byte from RFC 791 and RFC 9293.
    fn ipv4_tcp(payload: usize, flags: u8) -> Vec<u8> {
        let total = 20 + 20 + payload;
        let mut p = vec![
            0x45,
            0,
            (total >> 8) as u8,
            total as u8, // version/IHL, TOS, total length
            0,
            1,
            0x40,
            0, // ident, DF
            64,
            6,
            0,
            0, // TTL, TCP, checksum (wrong on purpose: offloaded)
            10,
            0,
            0,
            1, // src
            10,
            0,
            0,
            2, // dst
            0x30,
            0x39,
            0x00,
            0x50, // ports 12345 -> 80
            0,
            0,
            0x10,
            0, // seq 4096
            0,
            0,
            0,
            0, // ack
            0x50,
            flags,
            0xFF,
            0xFF, // data offset 5, flags, window
            0,
            0,
            0,
            0, // checksum, urgent
        ];
        p.extend(std::iter::repeat_n(0xAB, payload));
        p
    }

    fn eth(ethertype: u16, tags: &[u16], l3: &[u8]) -> Vec<u8> {
        let mut f = vec![2, 0, 0, 0, 0, 1, 2, 0, 0, 0, 0, 2];
        for &t in tags {
            f.extend_from_slice(&t.to_be_bytes());
            f.extend_from_slice(&[0x00, 0x64]);
        }
        f.extend_from_slice(&ethertype.to_be_bytes());
        f.extend_from_slice(l3);
        f
    }

    #[test]
    fn ethernet_ipv4_tcp() {
        let f = eth(0x0800, &[], &ipv4_tcp(100, 0x18));
        let d = decode(Link::Ethernet, &f, f.len() as u32).unwrap();
        assert_eq!(d.src, IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)));
        assert_eq!((d.proto, d.sport, d.dport, d.len), (6, 12345, 80, 140));
        let t = d.tcp.unwrap();
        assert_eq!(
            (t.seq, t.flags, t.payload, t.seq_len()),
            (4096, 0x18, 100, 100)
        );
    }

    #[test]
    fn vlan_and_qinq_tags_are_skipped() {
        let ip = ipv4_tcp(0, 0x02);
        for tags in [&[0x8100][..], &[0x88A8, 0x8100], &[0x9100, 0x8100]] {
            let f = eth(0x0800, tags, &ip);
            let d = decode(Link::Ethernet, &f, f.len() as u32).unwrap();
            assert_eq!(
                d.tcp.unwrap().seq_len(),
                1,
                "a SYN takes one sequence number"
            );
        }
        // Five tags: more than a frame carries; the ethertype under the fourth is a tag.
        let f = eth(0x0800, &[0x8100; 5], &ip);
        assert_eq!(decode(Link::Ethernet, &f, 100), Err(Skip::NotIp));
    }

    #[test]
    fn cooked_captures_raw_ip_and_loopback() {
        let ip = ipv4_tcp(10, 0x10);
        // SLL v1 (tcpdump's print-sll.c layout): type, ARPHRD, address length, address (8),
        // protocol.
        let mut sll = vec![0, 0, 0, 1, 0, 6, 2, 0, 0, 0, 0, 1, 0, 0, 0x08, 0x00];
        sll.extend_from_slice(&ip);
        // SLL v2: protocol, reserved, interface index, ARPHRD, type, address length, address.
        let mut sll2 = vec![
            0x08, 0x00, 0, 0, 0, 0, 0, 2, 0, 1, 0, 6, 2, 0, 0, 0, 0, 1, 0, 0,
        ];
        sll2.extend_from_slice(&ip);
        let mut null = 2u32.to_le_bytes().to_vec();
        null.extend_from_slice(&ip);
        for (link, rec) in [
            (Link::LinuxSll, &sll),
            (Link::LinuxSll2, &sll2),
            (Link::RawIp, &ip),
            (Link::Ipv4, &ip),
            (Link::Loopback, &null),
        ] {
            let d = decode(link, rec, rec.len() as u32).unwrap();
            assert_eq!((d.sport, d.len), (12345, 50), "{link:?}");
        }
        assert_eq!(Link::from_linktype(276), Some(Link::LinuxSll2));
        assert_eq!(Link::from_linktype(147), None);
    }

    #[test]
    fn ipv6_extension_headers_and_fragments() {
        // IPv6 (RFC 8200): hop-by-hop (8 bytes), then UDP 5353 -> 53 with 4 bytes of data.
        let mut p = vec![0x60, 0, 0, 0, 0, 20, 0, 64];
        p.extend_from_slice(&Ipv6Addr::LOCALHOST.octets());
        p.extend_from_slice(&"2001:db8::1".parse::<Ipv6Addr>().unwrap().octets());
        p.extend_from_slice(&[17, 0, 1, 4, 0, 0, 0, 0]);
        p.extend_from_slice(&[0x14, 0xE9, 0, 53, 0, 12, 0, 0, 1, 2, 3, 4]);
        let d = decode(Link::Ipv6, &p, p.len() as u32).unwrap();
        assert_eq!((d.proto, d.sport, d.dport, d.len), (17, 5353, 53, 60));
        // The same behind a Fragment header with offset 8: a fragment.
        let mut f = p.clone();
        f[6] = 44;
        f[40..48].copy_from_slice(&[17, 0, 0, 8 << 3, 0, 0, 0, 1]);
        assert_eq!(decode(Link::Ipv6, &f, 60), Err(Skip::Fragment));
        // An atomic fragment (offset 0, M clear) is a whole packet.
        f[42..44].copy_from_slice(&[0, 0]);
        assert_eq!(decode(Link::Ipv6, &f, 60).unwrap().dport, 53);
    }

    #[test]
    fn fragments_non_ip_and_truncation() {
        let mut p = ipv4_tcp(0, 0x10);
        p[6] = 0x20; // MF
        assert_eq!(decode(Link::RawIp, &p, 40), Err(Skip::Fragment));
        p[6] = 0x00;
        p[7] = 0x10; // offset 16
        assert_eq!(decode(Link::RawIp, &p, 40), Err(Skip::Fragment));
        let arp = eth(0x0806, &[], &[0; 28]);
        assert_eq!(decode(Link::Ethernet, &arp, 42), Err(Skip::NotIp));
        // Snap length: the TCP header's first 14 bytes are enough, the lengths come from IP.
        let full = eth(0x0800, &[], &ipv4_tcp(1000, 0x10));
        let d = decode(Link::Ethernet, &full[..14 + 20 + 14], full.len() as u32).unwrap();
        assert_eq!((d.len, d.tcp.unwrap().payload), (1040, 1000));
        assert_eq!(
            decode(Link::Ethernet, &full[..14 + 20 + 13], 1054),
            Err(Skip::Truncated)
        );
        // Every cut of a good frame: never a panic.
        for n in 0..full.len() {
            let _ = decode(Link::Ethernet, &full[..n], n as u32);
        }
        // A data offset past the segment, an IHL of 4, version 5.
        let mut bad = ipv4_tcp(0, 0x10);
        bad[32] = 0xF0;
        assert_eq!(decode(Link::RawIp, &bad, 40), Err(Skip::Malformed));
        bad = ipv4_tcp(0, 0x10);
        bad[0] = 0x44;
        assert_eq!(decode(Link::RawIp, &bad, 40), Err(Skip::Malformed));
        bad[0] = 0x55;
        assert_eq!(decode(Link::RawIp, &bad, 40), Err(Skip::Malformed));
    }

    #[test]
    fn random_records_never_panic() {
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        for i in 0..50_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let n = (x % 120) as usize;
            let mut r: Vec<u8> = (0..n).map(|k| (x >> (k % 8 * 8)) as u8 ^ k as u8).collect();
            if n > 14 && i % 2 == 0 {
                r[12] = 0x08;
                r[13] = if i % 4 == 0 { 0x00 } else { 0xDD };
                r[14] = if i % 4 == 0 { 0x45 } else { 0x60 };
            }
            for link in [Link::Ethernet, Link::LinuxSll2, Link::RawIp, Link::Loopback] {
                let _ = decode(link, &r, (x >> 40) as u32);
            }
        }
    }
}
