//! Telemetry Reports written byte by byte from the P4.org specification (never with our
//! emitter), read by our parser, every field checked.

use dta_proto::wire::telemetry_report::{
    DropInfo, FlowKey, InType, InnerConfig, IntKind, QueueOccupancy, RepType, ReportError,
    TelemetryReport,
};

/// The specification's "Example with Embedded INT-MD in a TCP Packet" (v2.0): Switch3 (the
/// sink) reports its queue occupancy in the individual report, and the truncated IPv4 packet
/// still carries the INT-over-UDP shim, the INT-MD header and the stack of hop2 and hop1 (node
/// ID and queue occupancy each), then the original TCP header.
fn spec_v2_example() -> Vec<u8> {
    let mut b = Vec::new();
    // Group header: Ver=2, hw_id=5, Sequence Number=0x12345, Node ID of Switch3 = 3.
    let w0: u32 = 2 << 28 | 5 << 22 | 0x12345;
    b.extend_from_slice(&w0.to_be_bytes());
    b.extend_from_slice(&3u32.to_be_bytes());
    // Individual report header: RepType=1, InType=4, RepLength=23, MD Length=1, F=1.
    b.extend_from_slice(&[0x14, 23, 1, 0b0010_0000]);
    // RepMdBits: bit 3 (queue ID + occupancy) = 0x1000; Domain Specific ID 0.
    b.extend_from_slice(&[0x10, 0x00, 0x00, 0x00]);
    // DSMdBits, DSMdstatus.
    b.extend_from_slice(&[0, 0, 0, 0]);
    // Queue occupancy of Switch3: queue 7, occupancy 0x000321.
    b.extend_from_slice(&[7, 0x00, 0x03, 0x21]);
    // Original IPv4 header, protocol 17 (a UDP header was added for INT).
    let ip_len: u16 = 20 + 8 + 4 + 12 + 16 + 20 + 1000;
    b.extend_from_slice(&[0x45, 0x00]);
    b.extend_from_slice(&ip_len.to_be_bytes());
    b.extend_from_slice(&[0x00, 0x01, 0x40, 0x00]);
    b.extend_from_slice(&[62, 17, 0x00, 0x00]); // TTL 62, checksum not checked
    b.extend_from_slice(&[10, 0, 1, 1]);
    b.extend_from_slice(&[10, 0, 2, 2]);
    // UDP header: source port 5555, destination INT_TBD (our 40045), length, checksum 0.
    b.extend_from_slice(&5555u16.to_be_bytes());
    b.extend_from_slice(&40045u16.to_be_bytes());
    b.extend_from_slice(&(ip_len - 20).to_be_bytes());
    b.extend_from_slice(&[0, 0]);
    // INT shim: Type=1 (INT-MD), NPT=2, Length=7, Reserved, IP proto = 6.
    b.extend_from_slice(&[0b0001_1000, 7, 0, 6]);
    // INT-MD header: Ver=2, D=E=M=0, HopML=2, Remaining Hop Count=6.
    b.extend_from_slice(&[0x20, 0x00, 0x02, 0x06]);
    // Instruction bitmap 1001 0000 ... (node ID, queue), Domain Specific ID 0.
    b.extend_from_slice(&[0x90, 0x00, 0x00, 0x00]);
    // DS Instruction, DS Flags.
    b.extend_from_slice(&[0, 0, 0, 0]);
    // Stack, newest first: hop2 (node 2, queue 1 occupancy 0x20), hop1 (node 1, queue 4
    // occupancy 0x10).
    b.extend_from_slice(&2u32.to_be_bytes());
    b.extend_from_slice(&[1, 0, 0, 0x20]);
    b.extend_from_slice(&1u32.to_be_bytes());
    b.extend_from_slice(&[4, 0, 0, 0x10]);
    // Original TCP header: 40000 -> 443, data offset 5.
    b.extend_from_slice(&40000u16.to_be_bytes());
    b.extend_from_slice(&443u16.to_be_bytes());
    b.extend_from_slice(&[0; 8]);
    b.extend_from_slice(&[0x50, 0x10, 0xFF, 0xFF, 0, 0, 0, 0]);
    // RepLength 23 words after the first: 2 fixed + 1 MD + 5 IP + 2 UDP + 1 shim + 3 INT +
    // 4 stack + 5 TCP.
    assert_eq!(b.len(), 8 + 4 + 23 * 4);
    b
}

#[test]
fn spec_v2_example_is_read_field_by_field() {
    let b = spec_v2_example();
    let t = TelemetryReport::parse(&b).unwrap();
    assert_eq!(t.version, 2);
    assert_eq!(t.hw_id, 5);
    assert_eq!(t.seq_no, 0x12345);
    assert_eq!(t.node_id, 3);
    let mut it = t.reports();
    let r = it.next().unwrap().unwrap();
    assert!(it.next().is_none());
    assert_eq!(r.rep_type, RepType::Int);
    assert_eq!(r.in_type, InType::Ipv4);
    assert!(r.flags.tracked);
    assert!(!r.flags.dropped && !r.flags.congested && !r.flags.intermediate);
    assert_eq!(r.rep_md_bits, 0x1000);
    assert_eq!(
        (r.domain_specific_id, r.ds_md_bits, r.ds_md_status),
        (0, 0, 0)
    );
    assert_eq!(
        r.local.queue,
        Some(QueueOccupancy {
            id: 7,
            occupancy: 0x321
        })
    );
    assert_eq!(r.local.node_id, None);
    assert_eq!(r.local.hop_latency, None);
    let p = r.parse_inner(&InnerConfig::default()).unwrap();
    assert_eq!(
        p.flow,
        FlowKey {
            src: [10, 0, 1, 1],
            dst: [10, 0, 2, 2],
            proto: 6,
            sport: 40000,
            dport: 443,
        }
    );
    assert_eq!(p.ttl, 62);
    assert_eq!(p.ip_len, 20 + 8 + 4 + 12 + 16 + 20 + 1000);
    let e = p.int.unwrap();
    assert_eq!(e.kind, IntKind::Md);
    assert_eq!(e.hop_ml, 2);
    assert_eq!(e.version, 2);
    assert_eq!(e.remaining_hop_count, 6);
    assert_eq!(e.instruction, 0x9000);
    assert_eq!(e.hops(), 2);
    let h1 = e.hop_from_source(0).unwrap();
    let h2 = e.hop_from_source(1).unwrap();
    assert_eq!(h1.node_id, Some(1));
    assert_eq!(
        h1.queue,
        Some(QueueOccupancy {
            id: 4,
            occupancy: 0x10
        })
    );
    assert_eq!(h2.node_id, Some(2));
    assert_eq!(
        h2.queue,
        Some(QueueOccupancy {
            id: 1,
            occupancy: 0x20
        })
    );
    assert!(e.hop_from_source(2).is_none());
    // Without the INT port configured the flow is the outer UDP one and no stack is seen.
    let p = r
        .parse_inner(&InnerConfig {
            md_udp_port: 0,
            ..InnerConfig::default()
        })
        .unwrap();
    assert_eq!((p.flow.proto, p.flow.dport), (17, 40045));
    assert!(p.int.is_none());
}

#[test]
fn spec_v2_coalesced_drop_and_congestion_reports() {
    let mut b = Vec::new();
    b.extend_from_slice(&(2u32 << 28 | 0x3FFFFF).to_be_bytes()); // hw_id 0, max seq
    b.extend_from_slice(&0xAABBCCDDu32.to_be_bytes());
    // Report 1: INT, InType 3 (Ethernet), D=1, RepMdBits bit 1 (L1 ports) and bit 15 (queue +
    // drop reason), MD Length 2, then Ethernet + IPv4 + UDP (14 + 20 + 8 = 42, padded to 44).
    b.extend_from_slice(&[0x13, 2 + 2 + 11, 2, 0b1000_0000]);
    b.extend_from_slice(&[0x40, 0x01, 0, 0, 0, 0, 0, 0]);
    b.extend_from_slice(&[0x00, 0x11, 0x00, 0x22]); // ingress 17, egress 34
    b.extend_from_slice(&[3, 71, 0, 0]); // queue 3, drop reason 71
    b.extend_from_slice(&[2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1, 0x08, 0x00]);
    b.extend_from_slice(&[0x45, 0, 0, 28, 0, 0, 0, 0, 64, 17, 0, 0]);
    b.extend_from_slice(&[192, 168, 0, 1, 192, 168, 0, 2]);
    b.extend_from_slice(&[0x30, 0x39, 0x00, 0x35, 0, 8, 0, 0]); // 12345 -> 53
    b.extend_from_slice(&[0, 0]); // padding to a word
                                  // Report 2: INT, InType 4 (IPv4), Q=1, RepMdBits bit 2 (hop latency), bit 3 (queue), MD 2.
    b.extend_from_slice(&[0x14, 2 + 2 + 10, 2, 0b0100_0000]);
    b.extend_from_slice(&[0x30, 0x00, 0, 0, 0, 0, 0, 0]);
    b.extend_from_slice(&1500u32.to_be_bytes());
    b.extend_from_slice(&[9, 0x01, 0x00, 0x00]); // queue 9, occupancy 65536
    b.extend_from_slice(&[0x45, 0, 0x05, 0xDC, 0, 0, 0, 0, 33, 6, 0, 0]);
    b.extend_from_slice(&[10, 1, 1, 1, 10, 2, 2, 2]);
    b.extend_from_slice(&[0x04, 0x00, 0x00, 0x50, 0, 0, 0, 0]);
    b.extend_from_slice(&[0, 0, 0, 0, 0x50, 0x02, 0, 0, 0, 0, 0, 0]);
    let t = TelemetryReport::parse(&b).unwrap();
    assert_eq!((t.version, t.hw_id, t.seq_no), (2, 0, 0x3FFFFF));
    assert_eq!(t.node_id, 0xAABBCCDD);
    let all: Vec<_> = t.reports().collect();
    assert_eq!(all.len(), 2);
    let d = all[0].unwrap();
    assert_eq!(d.in_type, InType::Ethernet);
    assert!(d.flags.dropped && !d.flags.congested);
    assert_eq!(d.local.l1_ports, Some((17, 34)));
    assert_eq!(
        d.local.drop,
        Some(DropInfo {
            queue: 3,
            reason: 71
        })
    );
    let p = d.parse_inner(&InnerConfig::default()).unwrap();
    assert_eq!(
        p.flow,
        FlowKey {
            src: [192, 168, 0, 1],
            dst: [192, 168, 0, 2],
            proto: 17,
            sport: 12345,
            dport: 53
        }
    );
    let q = all[1].unwrap();
    assert!(q.flags.congested && !q.flags.dropped);
    assert_eq!(q.local.hop_latency, Some(1500));
    assert_eq!(
        q.local.queue,
        Some(QueueOccupancy {
            id: 9,
            occupancy: 65536
        })
    );
    let p = q.parse_inner(&InnerConfig::default()).unwrap();
    assert_eq!((p.flow.proto, p.flow.sport, p.flow.dport), (6, 1024, 80));
    assert_eq!((p.ttl, p.ip_len), (33, 1500));
}

/// v1.0: `Ver=1 | Len | NProto | RepMdBits | Rsvd | D Q F | hw_id`, Switch ID, Sequence
/// Number, Ingress Timestamp, then the metadata, then the truncated packet.
#[test]
fn spec_v1_report_is_read_field_by_field() {
    let mut b = Vec::new();
    // RepMdBits (6b, MSB first): ports (bit 0), queue (bit 2), drop (bit 4) = 0b101010.
    let bits: u32 = 0b10_1010;
    let w0: u32 = 1 << 28 | (4 + 3) << 24 | 1 << 21 | bits << 15 | 1 << 8 | 1 << 6 | 0x2A;
    b.extend_from_slice(&w0.to_be_bytes());
    b.extend_from_slice(&0x0102_0304u32.to_be_bytes()); // switch ID
    b.extend_from_slice(&0xFFFF_FFF0u32.to_be_bytes()); // sequence number
    b.extend_from_slice(&0xDEAD_BEEFu32.to_be_bytes()); // ingress timestamp
    b.extend_from_slice(&[0x00, 0x05, 0x00, 0x06]); // ports 5, 6
    b.extend_from_slice(&[2, 0x00, 0x10, 0x00]); // queue 2, occupancy 4096
    b.extend_from_slice(&[2, 8, 0, 0]); // queue 2, drop reason 8
    b.extend_from_slice(&[0x45, 0, 0, 40, 0, 0, 0, 0, 60, 6, 0, 0]);
    b.extend_from_slice(&[172, 16, 0, 1, 172, 16, 0, 9]);
    b.extend_from_slice(&[
        0xC0, 0x00, 0x01, 0xBB, 0, 0, 0, 0, 0, 0, 0, 0, 0x50, 0, 0, 0,
    ]);
    b.extend_from_slice(&[0, 0, 0, 0]);
    let t = TelemetryReport::parse(&b).unwrap();
    assert_eq!(t.version, 1);
    assert_eq!(t.hw_id, 0x2A);
    assert_eq!(t.seq_no, 0xFFFF_FFF0);
    assert_eq!(t.node_id, 0x0102_0304);
    let r = t.reports().next().unwrap().unwrap();
    assert_eq!(r.in_type, InType::Ipv4);
    assert!(r.flags.dropped && r.flags.tracked && !r.flags.congested);
    assert_eq!(r.rep_md_bits, 0b10_1010);
    assert_eq!(r.ingress_ts32, Some(0xDEAD_BEEF));
    assert_eq!(r.local.l1_ports, Some((5, 6)));
    assert_eq!(
        r.local.queue,
        Some(QueueOccupancy {
            id: 2,
            occupancy: 4096
        })
    );
    assert_eq!(
        r.local.drop,
        Some(DropInfo {
            queue: 2,
            reason: 8
        })
    );
    assert_eq!(r.local.hop_latency, None);
    let p = r.parse_inner(&InnerConfig::default()).unwrap();
    assert_eq!(
        p.flow,
        FlowKey {
            src: [172, 16, 0, 1],
            dst: [172, 16, 0, 9],
            proto: 6,
            sport: 0xC000,
            dport: 443
        }
    );
    assert_eq!(p.ttl, 60);
    // The same header with a Len matching neither reading.
    let mut bad = b.clone();
    bad[0] = 0x1F;
    let t = TelemetryReport::parse(&bad).unwrap();
    assert_eq!(t.reports().next(), Some(Err(ReportError::BadLength)));
    // NProto 2 (IPv6) is read, but no flow can be taken from it.
    let mut v6 = b.clone();
    v6[1] = (v6[1] & 0x1F) | 2 << 5;
    let t = TelemetryReport::parse(&v6).unwrap();
    let r = t.reports().next().unwrap().unwrap();
    assert_eq!(r.in_type, InType::Ipv6);
    assert_eq!(
        r.parse_inner(&InnerConfig::default()),
        Err(ReportError::UnsupportedInnerType)
    );
}

// ---------------------------------------------------------------------------------------------
// INT-MD stacks with domain-specific metadata (INT v2.1 §5.7 "INT-MD Metadata Header Format")
// and INT 1.0 shims (INT v1.0 §4.7.1 "INT over TCP/UDP", §4.8 "INT Hop-by-Hop Metadata Header
// Format"), carried in the truncated packet of a Telemetry Report. Every byte below is written
// from those sections' field diagrams.

/// A v2.0 Telemetry Report (group header, one INT individual report with no local metadata,
/// InType 4) around `ip` (an IPv4 packet, padded here to a word).
fn v2_report_around(ip: &[u8]) -> Vec<u8> {
    let mut ip = ip.to_vec();
    while ip.len() % 4 != 0 {
        ip.push(0);
    }
    let mut b = Vec::new();
    // Group header: Ver=2, hw_id=1, Sequence Number=7; Node ID 3 (the sink).
    b.extend_from_slice(&(2u32 << 28 | 1 << 22 | 7).to_be_bytes());
    b.extend_from_slice(&3u32.to_be_bytes());
    // Individual report header: RepType=1 | InType=4, Report Length (words after this one:
    // the 2 fixed words of the main contents and the packet), MD Length=0, F=1.
    b.extend_from_slice(&[0x14, (2 + ip.len() / 4) as u8, 0, 0b0010_0000]);
    // RepMdBits 0, Domain Specific ID 0, DSMdBits 0, DSMdstatus 0.
    b.extend_from_slice(&[0; 8]);
    b.extend_from_slice(&ip);
    b
}

/// An IPv4 header 10.0.1.1 → 10.0.2.2 with `proto`, `dscp` and `ttl`, whose total length
/// claims `total` bytes (the checksum is left 0: readers of truncated packets do not check it).
fn ipv4(proto: u8, dscp: u8, ttl: u8, total: u16) -> Vec<u8> {
    let mut h = vec![0x45, dscp << 2];
    h.extend_from_slice(&total.to_be_bytes());
    h.extend_from_slice(&[0x00, 0x01, 0x40, 0x00]);
    h.extend_from_slice(&[ttl, proto, 0, 0]);
    h.extend_from_slice(&[10, 0, 1, 1, 10, 0, 2, 2]);
    h
}

/// A TCP header 40000 → 443, data offset 5, ACK.
fn tcp_40000_443() -> Vec<u8> {
    let mut t = Vec::new();
    t.extend_from_slice(&40000u16.to_be_bytes());
    t.extend_from_slice(&443u16.to_be_bytes());
    t.extend_from_slice(&[0; 8]);
    t.extend_from_slice(&[0x50, 0x10, 0xFF, 0xFF, 0, 0, 0, 0]);
    t
}

/// INT v2.1 "Example with INT-MD including domain specific source-only metadata" has the
/// stack's shape; here every hop (not only the source) adds one word of domain specific
/// metadata after its baseline node ID, so Hop ML (2) is larger than the Instruction Bitmap's
/// words (1): "Hop ML: ... the length of metadata including the Domain Specific Metadata".
/// Hop 1 does not know domain 0xABCD and pads to Hop ML with all-ones ("Pad the node's INT
/// Metadata stack with the special all-ones reserved value for a Domain Specific Metadata
/// length, calculated by subtracting from the Hop ML a length computed from all bits in the
/// 16-bit Instruction Bitmap").
fn int21_stack_with_ds_metadata(hop_ml: u8, instruction: u16) -> Vec<u8> {
    let mut p = ipv4(17, 0, 61, 20 + 8 + 4 + 12 + 24 + 20 + 100);
    // UDP header: 5555 → INT_TBD (our 40045), length, checksum 0.
    p.extend_from_slice(&5555u16.to_be_bytes());
    p.extend_from_slice(&40045u16.to_be_bytes());
    p.extend_from_slice(&(8u16 + 4 + 12 + 24 + 20 + 100).to_be_bytes());
    p.extend_from_slice(&[0, 0]);
    // INT shim for TCP/UDP: Type=1 (INT-MD) | NPT=2 | R R; Length = 3 (metadata header) + 6
    // (stack) words, the shim not counted "since INT version 2.0"; Reserved; IP proto = 6.
    p.extend_from_slice(&[0b0001_1000, 9, 0, 6]);
    // INT-MD metadata header: Ver=2 | D E M = 0 | Reserved | Hop ML | Remaining Hop Count=5.
    p.extend_from_slice(&[0x20, 0x00, hop_ml & 0x1F, 5]);
    // Instruction Bitmap | Domain Specific ID = 0xABCD.
    p.extend_from_slice(&instruction.to_be_bytes());
    p.extend_from_slice(&[0xAB, 0xCD]);
    // DS Instruction (bit 0: one word per hop) | DS Flags.
    p.extend_from_slice(&[0x80, 0x00, 0x00, 0x00]);
    // Stack, newest first: hop3 (node 0x33, DS word), hop2 (node 0x22, DS word), hop1 (node
    // 0x11, all-ones padding: it does not know the domain).
    p.extend_from_slice(&0x33u32.to_be_bytes());
    p.extend_from_slice(&0xD5D5_0003u32.to_be_bytes());
    p.extend_from_slice(&0x22u32.to_be_bytes());
    p.extend_from_slice(&0xD5D5_0002u32.to_be_bytes());
    p.extend_from_slice(&0x11u32.to_be_bytes());
    p.extend_from_slice(&0xFFFF_FFFFu32.to_be_bytes());
    p.extend_from_slice(&tcp_40000_443());
    v2_report_around(&p)
}

#[test]
fn int21_hop_ml_counts_domain_specific_metadata() {
    let b = int21_stack_with_ds_metadata(2, 0x8000);
    let t = TelemetryReport::parse(&b).unwrap();
    let r = t.reports().next().unwrap().unwrap();
    let p = r.parse_inner(&InnerConfig::default()).unwrap();
    assert_eq!(
        (p.flow.proto, p.flow.sport, p.flow.dport),
        (6, 40000, 443),
        "NPT 2: the original L4 header follows the stack"
    );
    let e = p.int.unwrap();
    assert_eq!(
        (e.kind, e.hop_ml, e.domain_specific_id),
        (IntKind::Md, 2, 0xABCD)
    );
    assert_eq!(e.version, 2);
    assert_eq!(
        e.hops(),
        3,
        "the stack is stepped through by Hop ML, not by the bitmap"
    );
    let ids: Vec<_> = (0..3)
        .map(|i| e.hop_from_source(i).unwrap().node_id)
        .collect();
    assert_eq!(ids, [Some(0x11), Some(0x22), Some(0x33)]);
    // Only the bitmap's fields are read; the domain specific words are skipped.
    let h = e.hop_from_source(2).unwrap();
    assert_eq!((h.hop_latency, h.queue), (None, None));
}

#[test]
fn int21_hop_ml_below_the_bitmap_is_refused() {
    // Node ID + hop latency + queue (3 words) cannot fit in Hop ML 2.
    let b = int21_stack_with_ds_metadata(2, 0xB000);
    let t = TelemetryReport::parse(&b).unwrap();
    let r = t.reports().next().unwrap().unwrap();
    assert_eq!(
        r.parse_inner(&InnerConfig::default()),
        Err(ReportError::BadLength)
    );
}

/// INT v1.0 "Example with INT over TCP": the packet Switch3 (the INT sink) receives, IPv4 with
/// DSCP 0x17 marking INT, TCP, then the INT 1.0 shim (`Type(8)=1 | Reserved(8) | Length(8) |
/// DSCP(6) R R`), the 8-byte hop-by-hop metadata header (`Ver=1 | Rep(2) | C | E | M |
/// Reserved(10) | Hop ML(5) | Remaining Hop Count(8)`, `Instruction Bitmap(16) |
/// Reserved(16)`) and the stack of hop2 and hop1 (switch ID, then queue ID + occupancy),
/// then 8 bytes of TCP payload. `shim_len` is the shim's Length field: the normative text
/// says "the total length of INT metadata header, INT stack and the shim header in 4-byte
/// words" (1 + 2 + 4 = 7); the example itself still prints 8, a leftover of the tail header
/// that v1.0 removed.
fn int10_over_tcp(shim_len: u8) -> Vec<u8> {
    let mut p = ipv4(6, 0x17, 62, 20 + 20 + 28 + 8);
    p.extend_from_slice(&tcp_40000_443());
    // Shim: Type=1 (hop-by-hop), Reserved, Length, original DSCP 0x0A in the top 6 bits.
    p.extend_from_slice(&[0x01, 0x00, shim_len, 0x0A << 2]);
    // Metadata header: Ver=1, Rep=0, C=0, E=0 | M=0, Reserved | Reserved, HopML=2 |
    // Remaining Hop Count=6.
    p.extend_from_slice(&[0x10, 0x00, 0x02, 0x06]);
    // Instruction Bitmap 1001 0000 0000 0000 (switch ID, queue ID + occupancy) | Reserved.
    p.extend_from_slice(&[0x90, 0x00, 0x00, 0x00]);
    // sw id of hop2, queue occupancy of hop2 (queue 1, 0x20), sw id of hop1, queue
    // occupancy of hop1 (queue 4, 0x10).
    p.extend_from_slice(&2u32.to_be_bytes());
    p.extend_from_slice(&[1, 0, 0, 0x20]);
    p.extend_from_slice(&1u32.to_be_bytes());
    p.extend_from_slice(&[4, 0, 0, 0x10]);
    // TCP payload.
    p.extend_from_slice(b"payload!");
    p
}

/// A Telemetry Report v1.0 (the format INT 1.0 deployments send) around `ip`: `Ver=1 | Len=5
/// | NProt=1 (IPv4) | RepMdBits=001000 (bit 2: queue ID + occupancy) | Rsvd | D=0 Q=0 F=1 |
/// hw_id=2`, Switch id 3, Sequence Number 41, Ingress Timestamp, the queue word.
fn v1_report_around(ip: &[u8]) -> Vec<u8> {
    let w0: u32 = 1 << 28 | 5 << 24 | 1 << 21 | 0b00_1000 << 15 | 1 << 6 | 2;
    let mut b = w0.to_be_bytes().to_vec();
    b.extend_from_slice(&3u32.to_be_bytes());
    b.extend_from_slice(&41u32.to_be_bytes());
    b.extend_from_slice(&0x0102_0304u32.to_be_bytes());
    b.extend_from_slice(&[9, 0, 0x01, 0x00]); // queue 9, occupancy 256
    b.extend_from_slice(ip);
    b
}

#[test]
fn int10_shim_over_tcp_is_read_by_dscp() {
    let b = v1_report_around(&int10_over_tcp(7));
    let t = TelemetryReport::parse(&b).unwrap();
    assert_eq!((t.version, t.node_id, t.seq_no, t.hw_id), (1, 3, 41, 2));
    let r = t.reports().next().unwrap().unwrap();
    assert!(r.flags.tracked);
    let cfg = InnerConfig {
        md_udp_port: 0,
        md_dscp: Some(0x17),
        md_dscp_mask: 0x3F,
    };
    let p = r.parse_inner(&cfg).unwrap();
    assert_eq!(
        p.flow,
        FlowKey {
            src: [10, 0, 1, 1],
            dst: [10, 0, 2, 2],
            proto: 6,
            sport: 40000,
            dport: 443
        }
    );
    assert_eq!(p.ttl, 62);
    let e = p.int.expect("the INT 1.0 stack is read");
    assert_eq!(
        (e.kind, e.hop_ml, e.remaining_hop_count),
        (IntKind::Md, 2, 6)
    );
    assert_eq!(e.version, 1);
    assert_eq!(e.instruction, 0x9000);
    assert_eq!(e.hops(), 2);
    let h1 = e.hop_from_source(0).unwrap();
    let h2 = e.hop_from_source(1).unwrap();
    assert_eq!(
        (h1.node_id, h1.queue),
        (
            Some(1),
            Some(QueueOccupancy {
                id: 4,
                occupancy: 0x10
            })
        )
    );
    assert_eq!(
        (h2.node_id, h2.queue),
        (
            Some(2),
            Some(QueueOccupancy {
                id: 1,
                occupancy: 0x20
            })
        )
    );
    // Without the DSCP rule the shim is TCP payload: the flow, no stack.
    let p = r.parse_inner(&InnerConfig::default()).unwrap();
    assert_eq!(p.flow.dport, 443);
    assert!(p.int.is_none());
    // The worked example's Length = 8 counts a word that is not there (the removed tail
    // header): 20 bytes of stack are not a whole number of 8-byte hops.
    let b = v1_report_around(&int10_over_tcp(8));
    let t = TelemetryReport::parse(&b).unwrap();
    let r = t.reports().next().unwrap().unwrap();
    assert_eq!(r.parse_inner(&cfg), Err(ReportError::BadLength));
}

/// INT 1.0 instruction bits 4 and 5 (ingress and egress timestamps) are 4 bytes each ("Each
/// instruction requests 4 bytes of metadata to be inserted at each hop, except if bit 6 is
/// set, which requires 8 bytes"); INT 2.0 made them 8. An INT 1.0 shim behind a UDP header to
/// the INT port is read too (INT 1.0 keeps no original port: the flow is the packet's own).
#[test]
fn int10_timestamps_are_one_word_and_the_udp_port_rule_applies() {
    let mut p = ipv4(17, 0, 60, 20 + 8 + 24 + 12);
    p.extend_from_slice(&7000u16.to_be_bytes());
    p.extend_from_slice(&40045u16.to_be_bytes());
    p.extend_from_slice(&(8u16 + 24 + 12).to_be_bytes());
    p.extend_from_slice(&[0, 0]);
    // Shim: Type=1, Length = 1 + 2 + 3 words, DSCP 0.
    p.extend_from_slice(&[0x01, 0x00, 6, 0x00]);
    // Header: Ver=1, HopML=3, Remaining Hop Count=7; bitmap 1000 1100 ... (switch ID,
    // ingress timestamp, egress timestamp).
    p.extend_from_slice(&[0x10, 0x00, 0x03, 0x07, 0x8C, 0x00, 0x00, 0x00]);
    // One hop: switch 0x0A0B0C0D, ingress 0x11111111, egress 0x22222222.
    p.extend_from_slice(&[0x0A, 0x0B, 0x0C, 0x0D]);
    p.extend_from_slice(&0x1111_1111u32.to_be_bytes());
    p.extend_from_slice(&0x2222_2222u32.to_be_bytes());
    let b = v1_report_around(&p);
    let t = TelemetryReport::parse(&b).unwrap();
    let r = t.reports().next().unwrap().unwrap();
    let p = r.parse_inner(&InnerConfig::default()).unwrap();
    assert_eq!(
        (p.flow.proto, p.flow.sport, p.flow.dport),
        (17, 7000, 40045)
    );
    let e = p.int.expect("the INT 1.0 stack is read");
    assert_eq!(e.hops(), 1);
    let h = e.hop_from_source(0).unwrap();
    assert_eq!(h.node_id, Some(0x0A0B_0C0D));
    assert_eq!(h.ingress_ts, Some(0x1111_1111));
    assert_eq!(h.egress_ts, Some(0x2222_2222));
}

#[test]
fn int10_destination_shims_and_version_mismatches() {
    let cfg = InnerConfig {
        md_udp_port: 0,
        md_dscp: Some(0x17),
        md_dscp_mask: 0x3F,
    };
    // Type 2 (destination header): not a hop-by-hop stack; the flow is still read.
    let mut ip = int10_over_tcp(7);
    ip[40] = 0x02;
    let b = v1_report_around(&ip);
    let t = TelemetryReport::parse(&b).unwrap();
    let p = t
        .reports()
        .next()
        .unwrap()
        .unwrap()
        .parse_inner(&cfg)
        .unwrap();
    assert_eq!(p.flow.dport, 443);
    assert!(p.int.is_none());
    // An INT 1.0 shim whose metadata header says Ver=2 is malformed.
    let mut ip = int10_over_tcp(7);
    ip[44] = 0x20;
    let b = v1_report_around(&ip);
    let t = TelemetryReport::parse(&b).unwrap();
    let r = t.reports().next().unwrap().unwrap();
    assert_eq!(r.parse_inner(&cfg), Err(ReportError::MalformedInner));
    // A Length shorter than shim + metadata header is malformed.
    let mut ip = int10_over_tcp(7);
    ip[42] = 2;
    let b = v1_report_around(&ip);
    let t = TelemetryReport::parse(&b).unwrap();
    let r = t.reports().next().unwrap().unwrap();
    assert_eq!(r.parse_inner(&cfg), Err(ReportError::MalformedInner));
}
