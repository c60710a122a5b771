//! Ethernet/IPv4/UDP frame parsing shared by the raw backends (pcap, AF_XDP, DPDK).
//!
//! A raw backend sees whole Ethernet frames. It keeps IPv4 unicast UDP datagrams addressed to
//! the ports it serves and hands them over as [`Datagram`]s with [`IpMeta`] filled in; every
//! other frame is dropped and counted by reason in [`FrameStats`]. Parsing goes through the
//! checked views of `dta_proto::wire`, so hostile frames cannot panic it.

use std::net::SocketAddrV4;

use dta_proto::batch::{Datagram, IpMeta};
use dta_proto::wire::ethernet::{self, EthernetFrame};
use dta_proto::wire::ipv4::{self, Ipv4Packet, Ipv4Repr};
use dta_proto::wire::udp::{UdpPacket, UdpRepr};

/// Most UDP destination ports a [`FrameFilter`] holds.
pub const MAX_PORTS: usize = 8;

/// Which frames a raw backend delivers and how strictly it checks them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameFilter {
    ports: [u16; MAX_PORTS],
    nports: usize,
    /// Drop frames whose IPv4 header checksum is wrong.
    pub verify_ip_checksum: bool,
    /// Drop frames whose (nonzero) UDP checksum is wrong. Frames sent by the local kernel over
    /// a veth with checksum offload carry a partial checksum: turn offload off on the sender
    /// (`ethtool -K IF tx off`, as `scripts/netns.sh` does) or turn this off.
    pub verify_udp_checksum: bool,
}

impl Default for FrameFilter {
    /// Every UDP port, both checksums verified.
    fn default() -> Self {
        FrameFilter {
            ports: [0; MAX_PORTS],
            nports: 0,
            verify_ip_checksum: true,
            verify_udp_checksum: true,
        }
    }
}

impl FrameFilter {
    /// Delivers only datagrams to one of `ports` (at most [`MAX_PORTS`]; an empty list means
    /// every port). Returns `None` if there are too many ports.
    pub fn ports(ports: &[u16]) -> Option<FrameFilter> {
        if ports.len() > MAX_PORTS {
            return None;
        }
        let mut f = FrameFilter::default();
        f.ports[..ports.len()].copy_from_slice(ports);
        f.nports = ports.len();
        Some(f)
    }

    /// Sets both checksum checks.
    pub fn with_checksums(mut self, ip: bool, udp: bool) -> FrameFilter {
        self.verify_ip_checksum = ip;
        self.verify_udp_checksum = udp;
        self
    }

    /// The ports delivered (empty: all).
    pub fn port_list(&self) -> &[u16] {
        &self.ports[..self.nports]
    }

    /// True if datagrams to `port` are delivered.
    #[inline]
    pub fn accepts(&self, port: u16) -> bool {
        self.nports == 0 || self.ports[..self.nports].contains(&port)
    }
}

/// Why a frame was not delivered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FrameDrop {
    /// Not an IPv4 frame (ARP, IPv6, VLAN-tagged, ...).
    NotIpv4,
    /// IPv4 but not UDP.
    NotUdp,
    /// UDP to a port the filter does not deliver.
    Filtered,
    /// Truncated or inconsistent headers, or a fragment.
    Malformed,
    /// A wrong IPv4 header or UDP checksum (a partial UDP checksum, from a sender with TX
    /// checksum offload on a veth, looks like this).
    BadChecksum,
}

/// Frames dropped by reason.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct FrameStats {
    /// Non-IPv4 frames.
    pub not_ipv4: u64,
    /// IPv4 frames that were not UDP.
    pub not_udp: u64,
    /// UDP to other ports.
    pub filtered: u64,
    /// Malformed frames.
    pub malformed: u64,
    /// Frames with a wrong IPv4 or UDP checksum.
    pub bad_checksum: u64,
}

impl FrameStats {
    /// Counts one drop.
    #[inline]
    pub fn count(&mut self, why: FrameDrop) {
        match why {
            FrameDrop::NotIpv4 => self.not_ipv4 += 1,
            FrameDrop::NotUdp => self.not_udp += 1,
            FrameDrop::Filtered => self.filtered += 1,
            FrameDrop::Malformed => self.malformed += 1,
            FrameDrop::BadChecksum => self.bad_checksum += 1,
        }
    }

    /// All drops.
    pub fn total(&self) -> u64 {
        self.not_ipv4 + self.not_udp + self.filtered + self.malformed + self.bad_checksum
    }
}

/// Parses one Ethernet frame into a [`Datagram`] borrowing its UDP payload.
#[inline]
pub fn parse_udp_frame<'a>(
    frame: &'a [u8],
    filter: &FrameFilter,
) -> Result<Datagram<'a>, FrameDrop> {
    let eth = EthernetFrame::new_checked(frame).map_err(|_| FrameDrop::Malformed)?;
    if eth.ethertype() != ethernet::ETHERTYPE_IPV4 {
        return Err(FrameDrop::NotIpv4);
    }
    let l3 = &frame[ethernet::HEADER_LEN..];
    let ip_view = Ipv4Packet::new_checked(l3).map_err(|_| FrameDrop::Malformed)?;
    let ip = Ipv4Repr::parse_ignoring_checksum(&ip_view).map_err(|_| FrameDrop::Malformed)?;
    if ip.protocol != ipv4::PROTO_UDP {
        return Err(FrameDrop::NotUdp);
    }
    let hl = ip_view.header_len();
    let l4 = &l3[hl..hl + ip.payload_len];
    let udp_view = UdpPacket::new_checked(l4).map_err(|_| FrameDrop::Malformed)?;
    let udp = UdpRepr::parse(&udp_view).map_err(|_| FrameDrop::Malformed)?;
    if !filter.accepts(udp.dst_port) {
        return Err(FrameDrop::Filtered);
    }
    if filter.verify_ip_checksum && !ip_view.verify_checksum() {
        return Err(FrameDrop::BadChecksum);
    }
    if filter.verify_udp_checksum && !udp_view.verify_checksum(ip.src, ip.dst) {
        return Err(FrameDrop::BadChecksum);
    }
    let payload = &l4[8..8 + udp.payload_len];
    Ok(Datagram {
        src: SocketAddrV4::new(ip.src, udp.src_port),
        dst: SocketAddrV4::new(ip.dst, udp.dst_port),
        ip: Some(IpMeta {
            ident: ip.ident,
            dont_frag: ip.dont_frag,
            ttl: ip.ttl,
            tos: ip.tos,
        }),
        payload,
    })
}

/// Peers' MAC addresses learned from received frames, for a raw backend that answers
/// whoever asked (the collector's software RNIC: RDMA_CM peers are not configured, so its
/// frames to them name no real MAC).
///
/// While on, the backend calls [`PeerMacs::learn`] for every frame it delivers (source IPv4 →
/// source MAC) and [`PeerMacs::address`] on every frame it transmits, which replaces the
/// destination MAC by the one learned for the frame's destination IPv4, if any. A fixed table
/// of [`PEER_MACS`] entries, replaced oldest first: no allocation, and a burst from one peer
/// costs one comparison per frame.
#[derive(Debug, Clone)]
pub struct PeerMacs {
    on: bool,
    ips: [u32; PEER_MACS],
    macs: [[u8; 6]; PEER_MACS],
    len: usize,
    next: usize,
    last: usize,
    /// Entries added or changed.
    pub learned: u64,
    /// Transmitted frames whose destination MAC was set from the table.
    pub addressed: u64,
}

/// Entries a [`PeerMacs`] table holds.
pub const PEER_MACS: usize = 64;

const IP_SRC: std::ops::Range<usize> = ethernet::HEADER_LEN + 12..ethernet::HEADER_LEN + 16;
const IP_DST: std::ops::Range<usize> = ethernet::HEADER_LEN + 16..ethernet::HEADER_LEN + 20;

impl Default for PeerMacs {
    fn default() -> Self {
        PeerMacs {
            on: false,
            ips: [0; PEER_MACS],
            macs: [[0; 6]; PEER_MACS],
            len: 0,
            next: 0,
            last: 0,
            learned: 0,
            addressed: 0,
        }
    }
}

impl PeerMacs {
    /// Starts or stops learning and addressing.
    pub fn set_enabled(&mut self, on: bool) {
        self.on = on;
    }

    /// Whether it learns and addresses.
    #[inline]
    pub fn enabled(&self) -> bool {
        self.on
    }

    fn find(&self, ip: u32) -> Option<usize> {
        if self.last < self.len && self.ips[self.last] == ip {
            return Some(self.last);
        }
        self.ips[..self.len].iter().position(|&x| x == ip)
    }

    /// Records the source MAC of `frame`, an IPv4 frame [`parse_udp_frame`] accepted.
    #[inline]
    pub fn learn(&mut self, frame: &[u8]) {
        if !self.on || frame.len() < IP_DST.end {
            return;
        }
        let ip = u32::from_be_bytes(frame[IP_SRC].try_into().expect("4 bytes"));
        let mac: [u8; 6] = frame[6..12].try_into().expect("6 bytes");
        if mac[0] & 1 != 0 {
            return; // a multicast source MAC is bogus: never answer to it
        }
        match self.find(ip) {
            Some(i) => {
                self.last = i;
                if self.macs[i] != mac {
                    self.macs[i] = mac;
                    self.learned += 1;
                }
            }
            None => {
                let i = if self.len < PEER_MACS {
                    self.len += 1;
                    self.len - 1
                } else {
                    let i = self.next;
                    self.next = (self.next + 1) % PEER_MACS;
                    i
                };
                self.ips[i] = ip;
                self.macs[i] = mac;
                self.last = i;
                self.learned += 1;
            }
        }
    }

    /// The MAC learned for `ip`.
    pub fn lookup(&self, ip: std::net::Ipv4Addr) -> Option<ethernet::MacAddr> {
        self.find(u32::from(ip))
            .map(|i| ethernet::MacAddr(self.macs[i]))
    }

    /// Sets the destination MAC of the outgoing IPv4 `frame` to the one learned for its
    /// destination address (frames to unknown addresses, and non-IPv4 frames, are left alone).
    #[inline]
    pub fn address(&mut self, frame: &mut [u8]) {
        if !self.on || self.len == 0 || frame.len() < IP_DST.end || frame[12..14] != [8, 0] {
            return;
        }
        let ip = u32::from_be_bytes(frame[IP_DST].try_into().expect("4 bytes"));
        if let Some(i) = self.find(ip) {
            frame[..6].copy_from_slice(&self.macs[i]);
            self.addressed += 1;
        }
    }
}

/// Builds an Ethernet/IPv4/UDP frame around `payload` into `out` and returns its length (0 if
/// `out` is too short). Control-plane and test helper: benchmark senders and tests use it to
/// make frames; the hot path writes frames through `dta_proto::wire::roce::FrameTemplate`.
#[allow(clippy::too_many_arguments)]
pub fn build_udp_frame(
    src_mac: ethernet::MacAddr,
    dst_mac: ethernet::MacAddr,
    src: SocketAddrV4,
    dst: SocketAddrV4,
    ident: u16,
    payload: &[u8],
    udp_checksum: bool,
    out: &mut [u8],
) -> usize {
    let len = ethernet::HEADER_LEN + ipv4::HEADER_LEN + 8 + payload.len();
    if out.len() < len || ipv4::HEADER_LEN + 8 + payload.len() > u16::MAX as usize {
        return 0;
    }
    let out = &mut out[..len];
    ethernet::EthernetRepr {
        src: src_mac,
        dst: dst_mac,
        ethertype: ethernet::ETHERTYPE_IPV4,
    }
    .emit(&mut EthernetFrame::new_unchecked(&mut out[..]));
    let (_, l3) = out.split_at_mut(ethernet::HEADER_LEN);
    Ipv4Repr {
        src: *src.ip(),
        dst: *dst.ip(),
        protocol: ipv4::PROTO_UDP,
        ttl: 64,
        tos: 0,
        ident,
        dont_frag: true,
        payload_len: 8 + payload.len(),
    }
    .emit(&mut Ipv4Packet::new_unchecked(&mut l3[..ipv4::HEADER_LEN]));
    let l4 = &mut l3[ipv4::HEADER_LEN..];
    l4[8..].copy_from_slice(payload);
    let mut u = UdpPacket::new_unchecked(&mut l4[..]);
    UdpRepr {
        src_port: src.port(),
        dst_port: dst.port(),
        payload_len: payload.len(),
    }
    .emit(&mut u);
    if udp_checksum {
        u.fill_checksum(*src.ip(), *dst.ip());
    } else {
        u.set_checksum(0);
    }
    len
}

#[cfg(test)]
mod tests {
    use super::*;
    use ethernet::MacAddr;
    use std::net::Ipv4Addr;

    #[test]
    fn peer_macs_learn_sources_and_address_answers() {
        let a = SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 1), 5000);
        let b = SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 2), 4791);
        let mut buf = [0u8; 128];
        let n = build_udp_frame(
            MacAddr([2, 0, 0, 0, 0, 0xa]),
            MacAddr([2, 0, 0, 0, 0, 0xb]),
            a,
            b,
            1,
            b"req",
            true,
            &mut buf,
        );
        let req = buf[..n].to_vec();
        let mut answer = [0u8; 128];
        let m = build_udp_frame(
            MacAddr([2, 0, 0, 0, 0, 0xb]),
            MacAddr::BROADCAST,
            b,
            a,
            2,
            b"rsp",
            true,
            &mut answer,
        );
        let mut t = PeerMacs::default();
        // Off: nothing learned, nothing rewritten.
        t.learn(&req);
        t.address(&mut answer[..m]);
        assert_eq!(&answer[..6], &[0xff; 6]);
        assert_eq!(t.lookup(*a.ip()), None);
        t.set_enabled(true);
        t.learn(&req);
        t.learn(&req);
        assert_eq!(t.learned, 1);
        assert_eq!(t.lookup(*a.ip()), Some(MacAddr([2, 0, 0, 0, 0, 0xa])));
        t.address(&mut answer[..m]);
        assert_eq!(&answer[..6], &[2, 0, 0, 0, 0, 0xa]);
        assert_eq!(t.addressed, 1);
        // The rest of the frame is untouched and still parses.
        let d = parse_udp_frame(&answer[..m], &FrameFilter::default()).unwrap();
        assert_eq!((d.src, d.dst, d.payload), (b, a, &b"rsp"[..]));
        // A peer that moves to another MAC is followed; a multicast source is ignored.
        let mut moved = req.clone();
        moved[6..12].copy_from_slice(&[2, 0, 0, 0, 0, 0xc]);
        t.learn(&moved);
        assert_eq!(t.lookup(*a.ip()), Some(MacAddr([2, 0, 0, 0, 0, 0xc])));
        let mut mcast = req.clone();
        mcast[6..12].copy_from_slice(&[1, 0, 0x5e, 0, 0, 1]);
        t.learn(&mcast);
        assert_eq!(t.lookup(*a.ip()), Some(MacAddr([2, 0, 0, 0, 0, 0xc])));
        // Frames to unknown addresses, short frames and non-IPv4 frames are left alone.
        let mut other = answer;
        other[IP_DST].copy_from_slice(&[10, 9, 9, 9]);
        other[..6].copy_from_slice(&[0xff; 6]);
        t.address(&mut other[..m]);
        assert_eq!(&other[..6], &[0xff; 6]);
        t.address(&mut other[..10]);
        let mut arp = answer;
        arp[12..14].copy_from_slice(&[8, 6]);
        arp[..6].copy_from_slice(&[0xff; 6]);
        t.address(&mut arp[..m]);
        assert_eq!(&arp[..6], &[0xff; 6]);
        // A full table replaces its oldest entries.
        for i in 0..(PEER_MACS as u32 + 3) {
            let mut f = req.clone();
            f[IP_SRC].copy_from_slice(&(0x0b00_0000 + i).to_be_bytes());
            t.learn(&f);
        }
        assert_eq!(t.lookup(*a.ip()), None, "the oldest entry went first");
        assert!(t
            .lookup(Ipv4Addr::from(0x0b00_0000 + PEER_MACS as u32 + 2))
            .is_some());
    }

    fn frame(dport: u16, payload: &[u8]) -> Vec<u8> {
        let mut out = vec![0; 1600];
        let n = build_udp_frame(
            MacAddr([2, 0, 0, 0, 0, 1]),
            MacAddr([2, 0, 0, 0, 0, 2]),
            SocketAddrV4::new(Ipv4Addr::new(192, 0, 2, 1), 1234),
            SocketAddrV4::new(Ipv4Addr::new(192, 0, 2, 2), dport),
            0x4242,
            payload,
            true,
            &mut out,
        );
        out.truncate(n);
        out
    }

    #[test]
    fn parses_udp_with_ip_meta() {
        let f = frame(40000, b"hello");
        let d = parse_udp_frame(&f, &FrameFilter::default()).unwrap();
        assert_eq!(d.payload, b"hello");
        assert_eq!(d.src, "192.0.2.1:1234".parse().unwrap());
        assert_eq!(d.dst, "192.0.2.2:40000".parse().unwrap());
        let m = d.ip.unwrap();
        assert_eq!((m.ident, m.dont_frag, m.ttl, m.tos), (0x4242, true, 64, 0));
    }

    #[test]
    fn ethernet_padding_is_ignored() {
        let mut f = frame(4791, b"x");
        f.resize(60, 0xAB);
        assert_eq!(
            parse_udp_frame(&f, &FrameFilter::default())
                .unwrap()
                .payload,
            b"x"
        );
    }

    #[test]
    fn drops_by_reason() {
        let filt = FrameFilter::ports(&[4791, 40000]).unwrap();
        assert!(parse_udp_frame(&frame(4791, b"a"), &filt).is_ok());
        assert_eq!(
            parse_udp_frame(&frame(53, b"a"), &filt).unwrap_err(),
            FrameDrop::Filtered
        );
        let mut arp = frame(4791, b"a");
        arp[12..14].copy_from_slice(&0x0806u16.to_be_bytes());
        assert_eq!(
            parse_udp_frame(&arp, &filt).unwrap_err(),
            FrameDrop::NotIpv4
        );
        let mut tcp = frame(4791, b"a");
        tcp[14 + 9] = 6;
        assert_eq!(parse_udp_frame(&tcp, &filt).unwrap_err(), FrameDrop::NotUdp);
        let mut bad = frame(4791, b"abc");
        let last = bad.len() - 1;
        bad[last] ^= 1;
        assert_eq!(
            parse_udp_frame(&bad, &filt).unwrap_err(),
            FrameDrop::BadChecksum
        );
        let lax = filt.with_checksums(true, false);
        assert!(parse_udp_frame(&bad, &lax).is_ok());
        let good = frame(4791, b"abc");
        for cut in 0..good.len() {
            assert!(parse_udp_frame(&good[..cut], &filt).is_err(), "cut {cut}");
        }
        assert!(FrameFilter::ports(&[1; MAX_PORTS + 1]).is_none());
    }

    #[test]
    fn hostile_bytes_never_panic() {
        let mut seed = 0x9E37_79B9_7F4A_7C15u64;
        let base = frame(4791, &[7; 40]);
        for _ in 0..20_000 {
            let mut f = base.clone();
            for _ in 0..4 {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                let i = (seed as usize) % f.len();
                f[i] = (seed >> 32) as u8;
            }
            let cut = (seed >> 40) as usize % (f.len() + 1);
            let _ = parse_udp_frame(&f[..cut], &FrameFilter::default());
        }
    }
}
