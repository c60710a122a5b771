//! Report traces: a flat arena of report datagrams, built from a [`Generator`] or read from a
//! pcap file, and written as pcap (Ethernet / IPv4 / UDP with valid checksums).
//!
//! The arena is allocated once; replaying hands out borrowed [`Datagram`]s, so the measured loop
//! allocates nothing.

use std::io::{BufReader, BufWriter};
use std::net::SocketAddrV4;
use std::path::Path;
use std::time::Duration;

use dta_proto::batch::Datagram;
use dta_proto::wire::ethernet::{self, EthernetFrame, EthernetRepr, MacAddr};
use dta_proto::wire::ipv4::{self, Ipv4Packet, Ipv4Repr};
use dta_proto::wire::report::MAX_EMIT_LEN;
use dta_proto::wire::udp::{self, UdpPacket, UdpRepr};
use pcap_file::pcap::{PcapHeader, PcapPacket, PcapReader, PcapWriter};
use pcap_file::DataLink;

use crate::gen::{Generator, TRANSLATOR_REPORTS};

/// Report datagrams in one arena.
#[derive(Debug, Default, Clone)]
pub struct Trace {
    buf: Vec<u8>,
    spans: Vec<(u32, u16)>,
    src: Vec<SocketAddrV4>,
    dst: Vec<SocketAddrV4>,
    /// Pcap records skipped because they were not Ethernet/IPv4/UDP (or failed a checksum).
    pub skipped: u64,
}

/// Longest generated Telemetry Report datagram (and the room [`Trace::write_pcap`] keeps per
/// frame).
pub const MAX_INT_LEN: usize = 512;

/// Headers in front of every report in a generated frame.
pub const FRAME_OVERHEAD: usize = ethernet::HEADER_LEN + ipv4::HEADER_LEN + udp::HEADER_LEN;

impl Trace {
    /// An empty trace with room for `n` datagrams.
    pub fn with_capacity(n: usize) -> Trace {
        Trace {
            buf: Vec::with_capacity(n * 48),
            spans: Vec::with_capacity(n),
            src: Vec::with_capacity(n),
            dst: Vec::with_capacity(n),
            skipped: 0,
        }
    }

    /// Number of datagrams.
    pub fn len(&self) -> usize {
        self.spans.len()
    }

    /// True if there are none.
    pub fn is_empty(&self) -> bool {
        self.spans.is_empty()
    }

    /// Total payload bytes.
    pub fn payload_bytes(&self) -> usize {
        self.buf.len()
    }

    /// Appends one datagram.
    pub fn push(&mut self, src: SocketAddrV4, dst: SocketAddrV4, payload: &[u8]) {
        let off = self.buf.len() as u32;
        self.buf.extend_from_slice(payload);
        self.spans.push((off, payload.len() as u16));
        self.src.push(src);
        self.dst.push(dst);
    }

    /// Datagram `i`.
    #[inline]
    pub fn get(&self, i: usize) -> Datagram<'_> {
        let (off, len) = self.spans[i];
        Datagram {
            src: self.src[i],
            dst: self.dst[i],
            ip: None,
            payload: &self.buf[off as usize..off as usize + len as usize],
        }
    }

    /// The payload of datagram `i`.
    #[inline]
    pub fn payload(&self, i: usize) -> &[u8] {
        self.get(i).payload
    }

    /// `n` reports of `g`'s stream, emitted in its scenario's profile.
    pub fn generate(g: &mut Generator, n: usize) -> Result<Trace, String> {
        let profile = g.scenario().wire_profile();
        let mut t = Trace::with_capacity(n);
        if g.scenario().telemetry != 0 {
            let dst = SocketAddrV4::new(*TRANSLATOR_REPORTS.ip(), g.scenario().int_port);
            let mut b = [0u8; MAX_INT_LEN];
            for _ in 0..n {
                let (src, len, _) = g.next_int_report(&mut b);
                t.push(src, dst, &b[..len]);
            }
            return Ok(t);
        }
        let mut b = [0u8; MAX_EMIT_LEN];
        for _ in 0..n {
            let r = g.next_report();
            let len = r.emit(profile, &mut b).map_err(|e| format!("emit: {e}"))?;
            t.push(g.source_of(&r), TRANSLATOR_REPORTS, &b[..len]);
        }
        Ok(t)
    }

    /// Writes datagram `i` as an Ethernet/IPv4/UDP frame into `out`; returns its length.
    pub fn frame(&self, i: usize, ident: u16, out: &mut [u8]) -> usize {
        let d = self.get(i);
        build_udp_frame(d.src, d.dst, ident, d.payload, out)
    }

    /// Writes the trace as a pcap file (Ethernet link type), one frame per datagram, spaced
    /// `gap` apart in capture time.
    pub fn write_pcap(&self, path: &Path, gap: Duration) -> Result<(), String> {
        let start = Duration::from_secs(1_700_000_000);
        self.write_pcap_with(path, |i| start + gap * i as u32)
    }

    /// Writes the trace as a pcap file (Ethernet link type, microsecond timestamps), datagram
    /// `i` at `times_ns[i]` nanoseconds since the Unix epoch.
    pub fn write_pcap_at(&self, path: &Path, times_ns: &[u64]) -> Result<(), String> {
        if times_ns.len() != self.len() {
            return Err(format!(
                "{} timestamps for {} datagrams",
                times_ns.len(),
                self.len()
            ));
        }
        self.write_pcap_with(path, |i| Duration::from_nanos(times_ns[i]))
    }

    fn write_pcap_with(&self, path: &Path, ts: impl Fn(usize) -> Duration) -> Result<(), String> {
        let f = std::fs::File::create(path).map_err(|e| format!("{}: {e}", path.display()))?;
        let header = PcapHeader {
            datalink: DataLink::ETHERNET,
            ..PcapHeader::default()
        };
        let mut w =
            PcapWriter::with_header(BufWriter::new(f), header).map_err(|e| format!("pcap: {e}"))?;
        // Room for the longest datagram (Sketch-Merge reports exceed MAX_INT_LEN).
        let longest = self.spans.iter().map(|s| s.1 as usize).max().unwrap_or(0);
        let mut frame = vec![0u8; FRAME_OVERHEAD + longest.max(MAX_INT_LEN)];
        for i in 0..self.len() {
            let n = self.frame(i, i as u16, &mut frame);
            let p = PcapPacket::new(ts(i), n as u32, &frame[..n]);
            w.write_packet(&p).map_err(|e| format!("pcap: {e}"))?;
        }
        Ok(())
    }

    /// Reads every Ethernet/IPv4/UDP frame of a pcap file (any destination port), skipping and
    /// counting the rest.
    pub fn read_pcap(path: &Path) -> Result<Trace, String> {
        Self::read_pcap_to(path, None)
    }

    /// Like [`Trace::read_pcap`], keeping only datagrams to UDP port `port` when given.
    pub fn read_pcap_to(path: &Path, port: Option<u16>) -> Result<Trace, String> {
        let f = std::fs::File::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
        let mut r = PcapReader::new(BufReader::new(f)).map_err(|e| format!("pcap: {e}"))?;
        if r.header().datalink != DataLink::ETHERNET {
            return Err(format!(
                "{}: link type {:?}, expected Ethernet",
                path.display(),
                r.header().datalink
            ));
        }
        let mut t = Trace::default();
        while let Some(p) = r.next_packet() {
            let p = p.map_err(|e| format!("pcap: {e}"))?;
            match parse_udp_frame(&p.data) {
                Some((src, dst, payload)) if port.is_none_or(|q| q == dst.port()) => {
                    t.push(src, dst, payload)
                }
                _ => t.skipped += 1,
            }
        }
        Ok(t)
    }
}

/// Builds an Ethernet/IPv4/UDP frame with valid IPv4 and UDP checksums.
pub fn build_udp_frame(
    src: SocketAddrV4,
    dst: SocketAddrV4,
    ident: u16,
    payload: &[u8],
    out: &mut [u8],
) -> usize {
    let len = FRAME_OVERHEAD + payload.len();
    let out = &mut out[..len];
    let ip_of = |a: &SocketAddrV4| {
        let o = a.ip().octets();
        MacAddr([0x02, 0x00, o[0], o[1], o[2], o[3]])
    };
    EthernetRepr {
        src: ip_of(&src),
        dst: ip_of(&dst),
        ethertype: ethernet::ETHERTYPE_IPV4,
    }
    .emit(&mut EthernetFrame::new_unchecked(&mut out[..]));
    let l3 = &mut out[ethernet::HEADER_LEN..];
    let udp_len = udp::HEADER_LEN + payload.len();
    Ipv4Repr {
        src: *src.ip(),
        dst: *dst.ip(),
        protocol: ipv4::PROTO_UDP,
        ttl: 64,
        tos: 0,
        ident,
        dont_frag: true,
        payload_len: udp_len,
    }
    .emit(&mut Ipv4Packet::new_unchecked(&mut l3[..]));
    let l4 = &mut l3[ipv4::HEADER_LEN..];
    l4[udp::HEADER_LEN..].copy_from_slice(payload);
    let mut u = UdpPacket::new_unchecked(&mut l4[..]);
    UdpRepr {
        src_port: src.port(),
        dst_port: dst.port(),
        payload_len: payload.len(),
    }
    .emit(&mut u);
    u.fill_checksum(*src.ip(), *dst.ip());
    len
}

/// Splits an Ethernet/IPv4/UDP frame into (source, destination, payload); `None` for anything
/// else, for fragments, and for bad IPv4 or UDP checksums.
pub fn parse_udp_frame(frame: &[u8]) -> Option<(SocketAddrV4, SocketAddrV4, &[u8])> {
    let eth = EthernetFrame::new_checked(frame).ok()?;
    if eth.ethertype() != ethernet::ETHERTYPE_IPV4 {
        return None;
    }
    let l3 = &frame[ethernet::HEADER_LEN..];
    let ipv = Ipv4Packet::new_checked(l3).ok()?;
    let ip = Ipv4Repr::parse(&ipv).ok()?;
    if ip.protocol != ipv4::PROTO_UDP || ipv.more_frags() || ipv.frag_offset() != 0 {
        return None;
    }
    let hl = ipv.header_len();
    let l4 = l3.get(hl..hl + ip.payload_len)?;
    let uv = UdpPacket::new_checked(l4).ok()?;
    let u = UdpRepr::parse(&uv).ok()?;
    if !uv.verify_checksum(ip.src, ip.dst) {
        return None;
    }
    let payload = l4.get(udp::HEADER_LEN..udp::HEADER_LEN + u.payload_len)?;
    Some((
        SocketAddrV4::new(ip.src, u.src_port),
        SocketAddrV4::new(ip.dst, u.dst_port),
        payload,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gen::{Mix, Scenario};

    #[test]
    fn pcap_round_trip() {
        let sc = Scenario {
            mix: Mix::parse("all").unwrap(),
            ..Scenario::default()
        };
        let mut g = Generator::new(&sc);
        let t = Trace::generate(&mut g, 2000).unwrap();
        let path = std::env::temp_dir().join(format!("dta-trace-{}.pcap", std::process::id()));
        t.write_pcap(&path, Duration::from_micros(1)).unwrap();
        let back = Trace::read_pcap(&path).unwrap();
        let none = Trace::read_pcap_to(&path, Some(9)).unwrap();
        let _ = std::fs::remove_file(&path);
        assert_eq!((none.len(), none.skipped), (0, 2000));
        assert_eq!(back.len(), t.len());
        assert_eq!(back.skipped, 0);
        for i in 0..t.len() {
            assert_eq!(back.payload(i), t.payload(i));
            assert_eq!(back.get(i).src, t.get(i).src);
            assert_eq!(back.get(i).dst, t.get(i).dst);
        }
    }

    #[test]
    fn corrupt_frames_are_skipped() {
        let mut f = [0u8; 128];
        let s = SocketAddrV4::new([10, 1, 0, 1].into(), 5);
        let n = build_udp_frame(s, TRANSLATOR_REPORTS, 1, b"hello", &mut f);
        assert!(parse_udp_frame(&f[..n]).is_some());
        f[n - 1] ^= 1;
        assert!(parse_udp_frame(&f[..n]).is_none(), "UDP checksum checked");
        assert!(parse_udp_frame(&f[..10]).is_none());
    }
}
