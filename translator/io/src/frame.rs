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
    /// Truncated or inconsistent headers, a fragment, or a wrong checksum.
    Malformed,
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
        }
    }

    /// All drops.
    pub fn total(&self) -> u64 {
        self.not_ipv4 + self.not_udp + self.filtered + self.malformed
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
        return Err(FrameDrop::Malformed);
    }
    if filter.verify_udp_checksum && !udp_view.verify_checksum(ip.src, ip.dst) {
        return Err(FrameDrop::Malformed);
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
            FrameDrop::Malformed
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
