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
