//! Reading a capture of ordinary traffic: pcap (microsecond or nanosecond) or pcapng, any link
//! type [`Link`] knows, into time-ordered [`Packet`]s, with every record that is not used
//! counted by reason in [`CaptureStats`].

use std::io::{BufReader, Read};
use std::path::Path;

use pcap_file::pcap::PcapReader;
use pcap_file::pcapng::blocks::interface_description::{
    InterfaceDescriptionBlock, InterfaceDescriptionOption,
};
use pcap_file::pcapng::{Block, PcapNgReader};
use pcap_file::TsResolution;
use serde::{Deserialize, Serialize};

use super::decode::{decode, Decoded, Link, Skip};

/// One IP packet of the capture.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Packet {
    /// Capture time (ns since the Unix epoch).
    pub ts_ns: u64,
    /// The record's number in the file, from 1 (what Wireshark calls the frame number).
    pub frame: u32,
    /// Addresses, protocol, ports, size, TCP fields.
    pub ip: Decoded,
}

/// What reading a capture found.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CaptureStats {
    /// `pcap` or `pcapng`.
    pub format: String,
    /// Link types of the interfaces that carried packets.
    pub link_types: Vec<String>,
    /// Packet records read.
    pub records: u64,
    /// IP packets used.
    pub packets: u64,
    /// Records that are not IPv4 or IPv6.
    pub not_ip: u64,
    /// IP fragments (left out).
    pub fragments: u64,
    /// Records too short for the headers needed.
    pub truncated: u64,
    /// Records with contradictory headers.
    pub malformed: u64,
    /// Records of a link type this reader does not know (counted, not decoded).
    pub unsupported_link: u64,
    /// Packets whose source and destination address are the same host (loopback traffic
    /// never crosses a switch).
    pub same_host: u64,
    /// Records with an impossible timestamp (fraction beyond a second) or on an interface
    /// the file never described.
    pub bad_records: u64,
    /// The file ended inside a record (a capture cut short); what came before is used.
    pub cut_short: bool,
    /// Packets whose timestamp was behind the one before (the packets are put in time order).
    pub reordered: u64,
}

impl CaptureStats {
    fn skip(&mut self, s: Skip) {
        match s {
            Skip::NotIp => self.not_ip += 1,
            Skip::Fragment => self.fragments += 1,
            Skip::Truncated => self.truncated += 1,
            Skip::Malformed => self.malformed += 1,
        }
    }

    fn link(&mut self, l: Link) {
        if !self.link_types.iter().any(|n| n == l.name()) {
            self.link_types.push(l.name().to_string());
        }
    }
}

/// A capture's packets in time order (stable: records with equal timestamps keep the file's
/// order) and what was skipped.
#[derive(Debug, Clone, Default)]
pub struct Capture {
    /// The packets.
    pub packets: Vec<Packet>,
    /// The counts.
    pub stats: CaptureStats,
}

const PCAPNG_MAGIC: [u8; 4] = [0x0A, 0x0D, 0x0D, 0x0A];

impl Capture {
    /// Reads a pcap or pcapng file.
    pub fn open(path: &Path) -> Result<Capture, String> {
        let f = std::fs::File::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
        Capture::read(BufReader::new(f)).map_err(|e| format!("{}: {e}", path.display()))
    }

    /// Reads a pcap or pcapng image (told apart by the first four bytes).
    pub fn read(mut r: impl Read) -> Result<Capture, String> {
        let mut magic = [0u8; 4];
        r.read_exact(&mut magic)
            .map_err(|e| format!("not a capture: {e}"))?;
        let r = std::io::Cursor::new(magic).chain(r);
        let mut c = if magic == PCAPNG_MAGIC {
            read_pcapng(r)?
        } else {
            read_pcap(r)?
        };
        c.finish();
        Ok(c)
    }

    fn push(&mut self, link: Option<Link>, ts_ns: u64, frame: u32, data: &[u8], orig_len: u32) {
        self.stats.records += 1;
        let Some(link) = link else {
            self.stats.unsupported_link += 1;
            return;
        };
        match decode(link, data, orig_len.max(data.len() as u32)) {
            Err(s) => self.stats.skip(s),
            Ok(d) if d.src == d.dst => self.stats.same_host += 1,
            Ok(ip) => {
                self.stats.link(link);
                self.stats.packets += 1;
                self.packets.push(Packet { ts_ns, frame, ip });
            }
        }
    }

    fn finish(&mut self) {
        let mut back = 0;
        for w in self.packets.windows(2) {
            back += (w[1].ts_ns < w[0].ts_ns) as u64;
        }
        self.stats.reordered = back;
        if back > 0 {
            self.packets.sort_by_key(|p| p.ts_ns);
        }
    }
}

fn read_pcap(r: impl Read) -> Result<Capture, String> {
    let mut rd = PcapReader::new(r).map_err(|e| format!("pcap: {e}"))?;
    let h = rd.header();
    let link = Link::from_linktype(u32::from(h.datalink));
    let nano = h.ts_resolution == TsResolution::NanoSecond;
    let mut c = Capture::default();
    c.stats.format = "pcap".into();
    let mut frame = 0u32;
    while let Some(p) = rd.next_raw_packet() {
        // The raw record: pcap-file's checked packet refuses an original length beyond the
        // header's snap length, which TSO captures and some writers produce.
        let Ok(p) = p else {
            c.stats.cut_short = true;
            break;
        };
        frame = frame.wrapping_add(1);
        let frac_ns = if nano {
            p.ts_frac as u64
        } else {
            p.ts_frac as u64 * 1000
        };
        if frac_ns >= 1_000_000_000 {
            c.stats.records += 1;
            c.stats.bad_records += 1;
            continue;
        }
        let ts = p.ts_sec as u64 * 1_000_000_000 + frac_ns;
        c.push(link, ts, frame, &p.data, p.orig_len);
    }
    Ok(c)
}

/// An interface of a pcapng section: its link type and how to read its timestamps.
#[derive(Debug, Clone, Copy)]
struct Interface {
    link: Option<Link>,
    /// `if_tsresol`: units per second as 10^x (`false`) or 2^x (`true`).
    resol: (bool, u8),
    /// `if_tsoffset`, seconds.
    offset: u64,
}

impl Interface {
    fn of(idb: &InterfaceDescriptionBlock<'_>) -> Interface {
        let mut i = Interface {
            link: Link::from_linktype(u32::from(idb.linktype)),
            resol: (false, 6),
            offset: 0,
        };
        for o in &idb.options {
            match o {
                InterfaceDescriptionOption::IfTsResol(r) => i.resol = (r & 0x80 != 0, r & 0x7F),
                InterfaceDescriptionOption::IfTsOffset(s) => i.offset = *s,
                _ => {}
            }
        }
        i
    }

    /// Nanoseconds of a raw 64-bit timestamp.
    fn ns(&self, raw: u64) -> u64 {
        let ns = match self.resol {
            (false, e) if e <= 9 => raw as u128 * 10u128.pow(9 - e as u32),
            (false, e) => raw as u128 / 10u128.pow((e as u32 - 9).min(38)),
            (true, e) => (raw as u128 * 1_000_000_000) >> e.min(127),
        };
        (ns as u64).saturating_add(self.offset.saturating_mul(1_000_000_000))
    }
}

fn read_pcapng(r: impl Read) -> Result<Capture, String> {
    let mut rd = PcapNgReader::new(r).map_err(|e| format!("pcapng: {e}"))?;
    let mut c = Capture::default();
    c.stats.format = "pcapng".into();
    let mut ifs: Vec<Interface> = Vec::new();
    let mut frame = 0u32;
    let mut last_ts = 0u64;
    while let Some(b) = rd.next_block() {
        let Ok(b) = b else {
            c.stats.cut_short = true;
            break;
        };
        let (iface, raw, data, orig) = match b {
            Block::SectionHeader(_) => {
                ifs.clear();
                continue;
            }
            Block::InterfaceDescription(idb) => {
                ifs.push(Interface::of(&idb));
                continue;
            }
            // pcap-file reads the 64-bit timestamp as if it were nanoseconds; it is in the
            // interface's units (microseconds unless if_tsresol says otherwise).
            Block::EnhancedPacket(p) => (
                p.interface_id as usize,
                Some(p.timestamp.as_nanos() as u64),
                p.data,
                p.original_len,
            ),
            Block::Packet(p) => (
                p.interface_id as usize,
                Some(p.timestamp),
                p.data,
                p.original_len,
            ),
            // No timestamp: it takes the previous packet's.
            Block::SimplePacket(p) => (0, None, p.data, p.original_len),
            _ => continue,
        };
        frame = frame.wrapping_add(1);
        let Some(i) = ifs.get(iface) else {
            c.stats.records += 1;
            c.stats.bad_records += 1;
            continue;
        };
        let ts = raw.map_or(last_ts, |t| i.ns(t));
        last_ts = ts;
        c.push(i.link, ts, frame, &data, orig);
    }
    Ok(c)
}

#[cfg(test)]
mod tests {
    use super::*;
    use pcap_file::pcap::{PcapHeader, PcapPacket, PcapWriter};
    use pcap_file::pcapng::blocks::enhanced_packet::EnhancedPacketBlock;
    use pcap_file::pcapng::PcapNgWriter;
    use pcap_file::{DataLink, Endianness};
    use std::borrow::Cow;
    use std::time::Duration;

    fn udp4(sport: u16) -> Vec<u8> {
        let mut p = vec![
            0x45, 0, 0, 32, 0, 0, 0, 0, 64, 17, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2,
        ];
        p.extend_from_slice(&sport.to_be_bytes());
        p.extend_from_slice(&[0, 53, 0, 12, 0, 0, 1, 2, 3, 4]);
        p
    }

    #[test]
    fn pcap_nanosecond_and_raw_ip() {
        let mut out = Vec::new();
        let h = PcapHeader {
            datalink: DataLink::RAW,
            ts_resolution: TsResolution::NanoSecond,
            ..PcapHeader::default()
        };
        let mut w = PcapWriter::with_header(&mut out, h).unwrap();
        let mut same = udp4(7);
        same[16..20].copy_from_slice(&[10, 0, 0, 1]);
        for (ts, p) in [(5, udp4(1)), (3, udp4(2)), (4, same), (9, vec![0x45, 0])] {
            let d = Duration::new(100, ts);
            w.write_packet(&PcapPacket::new(d, p.len() as u32, &p))
                .unwrap();
        }
        let out = w.into_writer();
        let c = Capture::read(&out[..]).unwrap();
        assert_eq!(c.stats.format, "pcap");
        assert_eq!((c.stats.records, c.stats.packets), (4, 2));
        assert_eq!((c.stats.same_host, c.stats.truncated), (1, 1));
        assert_eq!(c.stats.reordered, 1);
        // Time order, frame numbers kept.
        let v: Vec<(u64, u32, u16)> = c
            .packets
            .iter()
            .map(|p| (p.ts_ns, p.frame, p.ip.sport))
            .collect();
        assert_eq!(v, [(100_000_000_003, 2, 2), (100_000_000_005, 1, 1)]);
        // A cut in the last record: what came before is kept.
        let cut = Capture::read(&out[..out.len() - 3]).unwrap();
        assert!(cut.stats.cut_short);
        assert_eq!(cut.stats.records, 3);
    }

    #[test]
    fn pcapng_timestamps_follow_the_interface_resolution() {
        let mut out = Vec::new();
        let mut w = PcapNgWriter::with_endianness(&mut out, Endianness::Little).unwrap();
        let mut micro = InterfaceDescriptionBlock::new(DataLink::RAW, 0xFFFF);
        micro
            .options
            .push(InterfaceDescriptionOption::IfTsOffset(1));
        let mut ms = InterfaceDescriptionBlock::new(DataLink::ETHERNET, 0xFFFF);
        ms.options.push(InterfaceDescriptionOption::IfTsResol(3));
        let mut pow2 = InterfaceDescriptionBlock::new(DataLink::RAW, 0xFFFF);
        pow2.options
            .push(InterfaceDescriptionOption::IfTsResol(0x80 | 10));
        let lldp = InterfaceDescriptionBlock::new(DataLink::IEEE802_11, 0xFFFF);
        for i in [micro, ms, pow2, lldp] {
            w.write_pcapng_block(i).unwrap();
        }
        let mut eth = vec![0u8; 12];
        eth.extend_from_slice(&[0x08, 0x00]);
        eth.extend_from_slice(&udp4(3));
        for (iface, units, data) in [
            (0u32, 2_000_000u64, udp4(1)),
            (1, 2_500, eth),
            (2, 3 * 1024, udp4(4)),
            (3, 1, udp4(5)),
        ] {
            let epb = EnhancedPacketBlock {
                interface_id: iface,
                // pcap-file writes the Duration's nanoseconds as the raw 64-bit value.
                timestamp: Duration::from_nanos(units),
                original_len: data.len() as u32,
                data: Cow::Owned(data),
                options: vec![],
            };
            w.write_pcapng_block(epb).unwrap();
        }
        let out = w.into_inner();
        // An Enhanced Packet Block naming interface 9, which no block described (pcap-file's
        // writer refuses to write it, so by hand: type 6, length, interface, timestamp,
        // lengths, 32 bytes of data, length).
        let data = udp4(6);
        let mut epb = Vec::new();
        for v in [6u32, 32 + 32, 9, 0, 1, 32, 32] {
            epb.extend_from_slice(&v.to_le_bytes());
        }
        epb.extend_from_slice(&data);
        epb.extend_from_slice(&64u32.to_le_bytes());
        out.extend_from_slice(&epb);
        let c = Capture::read(&out[..]).unwrap();
        assert_eq!(c.stats.format, "pcapng");
        assert_eq!(c.stats.records, 5);
        assert_eq!((c.stats.unsupported_link, c.stats.bad_records), (1, 1));
        let ts: Vec<(u16, u64)> = c.packets.iter().map(|p| (p.ip.sport, p.ts_ns)).collect();
        // 2 s of µs + 1 s offset; 2.5 s of ms; 3 s of 2^-10 s.
        assert_eq!(
            ts,
            [(3, 2_500_000_000), (1, 3_000_000_000), (4, 3_000_000_000)]
        );
        assert_eq!(c.stats.link_types, ["raw-ip", "ethernet"]);
    }

    #[test]
    fn garbage_is_an_error_or_counted_never_a_panic() {
        assert!(Capture::read(&b"not a capture at all"[..]).is_err());
        assert!(Capture::read(&b"ab"[..]).is_err());
        let mut x = 0x1234_5678_9ABC_DEF0u64;
        for n in 0..2000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let mut b: Vec<u8> = (0..(x % 300) as usize)
                .map(|k| (x >> (k % 8 * 8)) as u8)
                .collect();
            if b.len() > 4 {
                let m: [u8; 4] = if n % 2 == 0 {
                    PCAPNG_MAGIC
                } else {
                    [0xD4, 0xC3, 0xB2, 0xA1]
                };
                b[..4].copy_from_slice(&m);
            }
            let _ = Capture::read(&b[..]);
        }
    }
}
