//! P4.org Telemetry Reports written byte by byte from the specifications' field diagrams
//! (Telemetry Report v1.0 at p4lang/p4-applications e5d0c4f and v2.0; INT v1.0 and v2.1), fed
//! through the real translator pipeline into the software RNIC, and checked on the collector's
//! side: paths by Key-Write query, per-flow counters by Key-Increment query, drop and
//! congestion events by reading the Append lists, postcards by the path query. Every malformed
//! report is counted under one `int_drop_*` reason and derives nothing; the accounting
//! identity of `translator/src/datapath/stats.rs` holds after every datagram, for these
//! vectors and (property test) for any bytes derived from them.
//!
//! Nothing here uses `dta_proto`'s Telemetry Report emitter.

use std::cell::RefCell;
use std::collections::BTreeSet;
use std::net::{Ipv4Addr, SocketAddrV4};

use dta_bench::gen::Scenario;
use dta_bench::replay::{MemOptions, Rig, RnicMode};
use dta_collector::query::append::{ListReader, Start};
use dta_collector::query::keywrite::{KeyWriteAnswer, Vote};
use dta_collector::query::postcard::PathAnswer;
use dta_proto::batch::Datagram;
use dta_proto::wire::telemetry_report::InnerConfig;
use dta_proto::Key;
use dta_translator::datapath::int_ingest::{IntSettings, MAX_DERIVED};
use dta_translator::datapath::stats::TranslatorCounters;
use proptest::prelude::*;
use proptest::test_runner::{Config as PropConfig, TestRunner};

/// The DSCP value that marks INT over TCP/UDP in this deployment (the INT specs' examples use
/// 0x17).
const INT_DSCP: u8 = 0x17;
/// The INT-over-UDP destination port ("INT_TBD"; `[int] md_udp_port`).
const INT_UDP_PORT: u16 = 40045;
/// Node IDs of the postcard path (the postcard store's value range).
const POSTCARD_NODES: [u32; 5] = [21, 22, 23, 24, 25];

// ---------------------------------------------------------------------------------------------
// Headers, by hand.

/// IPv4 header (RFC 791): version 4, IHL 5, DSCP, total length, DF, TTL, protocol, source
/// 10.0.`net`.1, destination 10.9.9.9; the checksum is left 0 (truncated packets are not
/// checked).
fn ipv4(net: u8, proto: u8, dscp: u8, ttl: u8, total: u16) -> Vec<u8> {
    let mut h = vec![0x45, dscp << 2];
    h.extend_from_slice(&total.to_be_bytes());
    h.extend_from_slice(&[0x12, 0x34, 0x40, 0x00]);
    h.extend_from_slice(&[ttl, proto, 0, 0]);
    h.extend_from_slice(&[10, 0, net, 1, 10, 9, 9, 9]);
    h
}

/// TCP header (RFC 793), data offset 5, ACK.
fn tcp(sport: u16, dport: u16) -> Vec<u8> {
    let mut t = Vec::new();
    t.extend_from_slice(&sport.to_be_bytes());
    t.extend_from_slice(&dport.to_be_bytes());
    t.extend_from_slice(&[0, 0, 0, 1, 0, 0, 0, 0]);
    t.extend_from_slice(&[0x50, 0x10, 0xFF, 0xFF, 0, 0, 0, 0]);
    t
}

/// UDP header (RFC 768), checksum 0.
fn udp(sport: u16, dport: u16, len: u16) -> Vec<u8> {
    let mut u = Vec::new();
    u.extend_from_slice(&sport.to_be_bytes());
    u.extend_from_slice(&dport.to_be_bytes());
    u.extend_from_slice(&len.to_be_bytes());
    u.extend_from_slice(&[0, 0]);
    u
}

/// INT v2.1 §5.6.2 shim for TCP/UDP (`Type(4) | NPT(2) | R R | Length(8) | 16 bits`, Length
/// counting the metadata header and stack, not the shim) and §5.7 INT-MD metadata header
/// (`Ver=2 | D E M | Reserved(12) | Hop ML(5) | Remaining Hop Count(8)`, `Instruction
/// Bitmap(16) | Domain Specific ID(16)`, `DS Instruction(16) | DS Flags(16)`), then the stack:
/// `hops` newest first, each a list of 4-byte words.
fn int21_md(
    npt: u8,
    shim_field: u16,
    hop_ml: u8,
    instruction: u16,
    ds: (u16, u16),
    hops: &[&[u32]],
) -> Vec<u8> {
    let words: usize = hops.iter().map(|h| h.len()).sum();
    let mut b = vec![0x10 | npt << 2, (3 + words) as u8];
    b.extend_from_slice(&shim_field.to_be_bytes());
    b.extend_from_slice(&[0x20, 0x00, hop_ml & 0x1F, 8 - hops.len() as u8]);
    b.extend_from_slice(&instruction.to_be_bytes());
    b.extend_from_slice(&ds.0.to_be_bytes());
    b.extend_from_slice(&ds.1.to_be_bytes());
    b.extend_from_slice(&[0, 0]);
    for h in hops {
        for w in *h {
            b.extend_from_slice(&w.to_be_bytes());
        }
    }
    b
}

/// INT v1.0 §4.7.1 shim for TCP/UDP (`Type(8)=1 | Reserved(8) | Length(8) | DSCP(6) R R`,
/// Length counting shim, metadata header and stack: "the total length of INT metadata header,
/// INT stack and the shim header in 4-byte words") and §4.8 hop-by-hop metadata header (`Ver=1
/// | Rep(2) | C | E | M | Reserved(10) | Hop ML(5) | Remaining Hop Count(8)`, `Instruction
/// Bitmap(16) | Reserved(16)`), then the stack, newest first. `len` overrides Length.
fn int10_md(hop_ml: u8, instruction: u16, hops: &[&[u32]], len: Option<u8>) -> Vec<u8> {
    let words: usize = hops.iter().map(|h| h.len()).sum();
    let mut b = vec![0x01, 0x00, len.unwrap_or((3 + words) as u8), 0x0A << 2];
    b.extend_from_slice(&[0x10, 0x00, hop_ml & 0x1F, 8 - hops.len() as u8]);
    b.extend_from_slice(&instruction.to_be_bytes());
    b.extend_from_slice(&[0, 0]);
    for h in hops {
        for w in *h {
            b.extend_from_slice(&w.to_be_bytes());
        }
    }
    b
}

/// Telemetry Report v2.0 §3.2 Individual Report Header (`RepType(4)=1 | InType(4) | Report
/// Length(8) | MD Length(8) | D Q F I | Rsvd(4)`), the INT main contents (`RepMdBits(16) |
/// Domain Specific ID(16)`, `DSMdBits(16) | DSMdstatus(16)`), `md` (the RepMdBits' words),
/// then `inner` padded to a word. Report Length counts the words after the first.
fn v2_int_report(in_type: u8, dqfi: u8, rep_md_bits: u16, md: &[u32], inner: &[u8]) -> Vec<u8> {
    let mut inner = inner.to_vec();
    while !inner.len().is_multiple_of(4) {
        inner.push(0);
    }
    let words = 2 + md.len() + inner.len() / 4;
    let mut b = vec![0x10 | in_type, words as u8, md.len() as u8, dqfi << 4];
    b.extend_from_slice(&rep_md_bits.to_be_bytes());
    b.extend_from_slice(&[0; 6]);
    for w in md {
        b.extend_from_slice(&w.to_be_bytes());
    }
    b.extend_from_slice(&inner);
    b
}

/// Telemetry Report v2.0 §3.1 Group Header (`Ver(4)=2 | hw_id(6) | Sequence Number(22)`,
/// `Node ID(32)`), then the individual reports.
fn v2_datagram(node: u32, seq: u32, reports: &[Vec<u8>]) -> Vec<u8> {
    let mut b = (2u32 << 28 | 1 << 22 | seq & 0x3F_FFFF)
        .to_be_bytes()
        .to_vec();
    b.extend_from_slice(&node.to_be_bytes());
    for r in reports {
        b.extend_from_slice(r);
    }
    b
}

/// Telemetry Report v1.0 §3.2 header: `Ver(4)=1 | Length(4) | NProt(3) | RepMdBits(6) |
/// Reserved(6) | D Q F | hw_id(6)` (Length: "the length of the telemetry report header in
/// multiples of 4 octets, including the variable optional metadata"), Switch id, Sequence
/// Number, Ingress Timestamp, the metadata, then the packet NProt names (0 Ethernet, 1 IPv4).
fn v1_datagram(
    switch: u32,
    seq: u32,
    nprot: u32,
    dqf: u32,
    rep_md_bits: u32,
    md: &[u32],
    inner: &[u8],
) -> Vec<u8> {
    let len = 4 + md.len() as u32;
    let w0 = 1 << 28 | len << 24 | nprot << 21 | rep_md_bits << 15 | dqf << 6 | 5;
    let mut b = w0.to_be_bytes().to_vec();
    b.extend_from_slice(&switch.to_be_bytes());
    b.extend_from_slice(&seq.to_be_bytes());
    b.extend_from_slice(&0x5EED_0000u32.to_be_bytes());
    for w in md {
        b.extend_from_slice(&w.to_be_bytes());
    }
    b.extend_from_slice(inner);
    b
}

/// The 13-byte flow key: source, destination, protocol, ports.
fn flow(net: u8, proto: u8, sport: u16, dport: u16) -> [u8; 13] {
    let mut f = [0u8; 13];
    f[..8].copy_from_slice(&[10, 0, net, 1, 10, 9, 9, 9]);
    f[8] = proto;
    f[9..11].copy_from_slice(&sport.to_be_bytes());
    f[11..].copy_from_slice(&dport.to_be_bytes());
    f
}

// ---------------------------------------------------------------------------------------------
// The vectors.

/// A sink's report with a stack (v2.0, INT 2.1 over UDP with NPT 2: "another (the original)
/// L4 header follows the INT stack"); Telemetry Report v2.0's "Example with Embedded INT-MD in
/// a TCP Packet": hop1 and hop2 pushed node ID + queue ID/occupancy, the sink (node 3) reports
/// its queue in RepMdBits bit 3.
fn v2_int21_path() -> Vec<u8> {
    let stack = int21_md(
        2,
        6,
        2,
        0x9000,
        (0, 0),
        &[&[2, 0x0100_0020], &[1, 0x0400_0010]],
    );
    let total = 20 + 8 + stack.len() + 20 + 1000;
    let mut p = ipv4(1, 17, 0, 62, total as u16);
    p.extend(udp(5555, INT_UDP_PORT, (total - 20) as u16));
    p.extend(stack);
    p.extend(tcp(40000, 443));
    v2_datagram(
        3,
        1,
        &[v2_int_report(4, 0b0010, 0x1000, &[0x0700_0321], &p)],
    )
}

/// INT 2.1 with domain specific metadata: Hop ML 2 > the Instruction Bitmap's 1 word (node
/// ID); DS Instruction bit 0 asks each hop for one more word; hop 0x11 does not know domain
/// 0xABCD and pads with all-ones. NPT 1: "the original UDP payload follows the INT stack, and
/// the last two bytes of the shim header carry the original UDP destination port" (53).
fn v2_int21_ds_path(seq: u32) -> Vec<u8> {
    let stack = int21_md(
        1,
        53,
        2,
        0x8000,
        (0xABCD, 0x8000),
        &[
            &[0x33, 0xD5D5_0003],
            &[0x22, 0xD5D5_0002],
            &[0x11, 0xFFFF_FFFF],
        ],
    );
    let total = 20 + 8 + stack.len() + 64;
    let mut p = ipv4(2, 17, 0, 61, total as u16);
    p.extend(udp(3333, INT_UDP_PORT, (total - 20) as u16));
    p.extend(stack);
    v2_datagram(4, seq, &[v2_int_report(4, 0b0010, 0, &[], &p)])
}

/// INT v1.0's "Example with INT over TCP" as Switch3 (here switch 5) reports it in a
/// Telemetry Report v1.0 (NProt 0: Ethernet), with the shim Length the normative text gives
/// (`len` None: 7) or another.
fn v1_int10_dscp_path(len: Option<u8>) -> Vec<u8> {
    let stack = int10_md(2, 0x9000, &[&[2, 0x0100_0020], &[1, 0x0400_0010]], len);
    let mut p = vec![0x02, 0, 0, 0, 0, 0x02, 0x02, 0, 0, 0, 0, 0x01, 0x08, 0x00];
    p.extend(ipv4(
        3,
        6,
        INT_DSCP,
        62,
        (20 + 20 + stack.len() + 500) as u16,
    ));
    p.extend(tcp(40001, 8080));
    p.extend(stack);
    p.extend_from_slice(b"TCP payload.");
    // RepMdBits 001000 (bit 2: queue ID + occupancy), F=1.
    v1_datagram(5, 77, 0, 0b001, 0b00_1000, &[0x0200_0100], &p)
}

/// INT 1.0 behind a UDP header to the INT port, bitmap 1000 1100 ... (switch ID and the
/// 4-byte ingress and egress timestamps of INT 1.0), one hop; Telemetry Report v1.0, IPv4.
fn v1_int10_udp_path() -> Vec<u8> {
    let stack = int10_md(3, 0x8C00, &[&[0x0A0B_0C0D, 0x1111_1111, 0x2222_2222]], None);
    let total = 20 + 8 + stack.len() + 16;
    let mut p = ipv4(4, 17, 0, 63, total as u16);
    p.extend(udp(7000, INT_UDP_PORT, (total - 20) as u16));
    p.extend(stack);
    v1_datagram(6, 1, 1, 0b001, 0, &[], &p)
}

/// An INT 1.0 stack (by DSCP, behind the packet's own UDP header) in a Telemetry Report v2.0:
/// a mixed deployment's sink.
fn v2_int10_dscp_path() -> Vec<u8> {
    let stack = int10_md(1, 0x8000, &[&[0x77], &[0x66]], None);
    let total = 20 + 8 + stack.len() + 40;
    let mut p = ipv4(5, 17, INT_DSCP, 60, total as u16);
    p.extend(udp(9999, 4789, (total - 20) as u16));
    p.extend(stack);
    v2_datagram(7, 1, &[v2_int_report(4, 0b0010, 0, &[], &p)])
}

/// Two coalesced reports from node 8: a drop report (D, InType 3 Ethernet, RepMdBits bit 1
/// L1 ports and bit 15 queue ID + drop reason + padding) and a congestion report (Q, InType 4,
/// bit 2 hop latency and bit 3 queue ID + occupancy).
fn v2_drop_and_congestion() -> Vec<u8> {
    let mut e = vec![2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1, 0x08, 0x00];
    e.extend(ipv4(6, 17, 0, 64, 28));
    e.extend(udp(12345, 53, 8));
    let drop = v2_int_report(3, 0b1000, 0x4001, &[0x0011_0022, 0x0347_0000], &e);
    let mut q = ipv4(7, 6, 0, 33, 1500);
    q.extend(tcp(1024, 80));
    let cong = v2_int_report(4, 0b0100, 0x3000, &[1500, 0x0901_0000], &q);
    v2_datagram(8, 1, &[drop, cong])
}

/// A v1.0 drop report from switch 9: D=1, RepMdBits bit 4 (queue ID + drop reason + padding).
fn v1_drop() -> Vec<u8> {
    let mut p = ipv4(8, 6, 0, 50, 40);
    p.extend(tcp(5000, 22));
    v1_datagram(9, 1, 1, 0b100, 0b00_0010, &[0x0208_0000], &p)
}

/// INT-XD postcards (F, no stack) of one packet from the five nodes of its path, TTL 64 at
/// the first; and one whose TTL (70) is above `initial_ttl` = 64 (the hop is unknown).
fn postcards() -> Vec<Vec<u8>> {
    let mut v: Vec<Vec<u8>> = POSTCARD_NODES
        .iter()
        .enumerate()
        .map(|(i, &node)| {
            let mut p = ipv4(9, 6, 0, 64 - i as u8, 60);
            p.extend(tcp(6000, 443));
            v2_datagram(node, 10 + i as u32, &[v2_int_report(4, 0b0010, 0, &[], &p)])
        })
        .collect();
    let mut p = ipv4(10, 6, 0, 70, 60);
    p.extend(tcp(6001, 443));
    v.push(v2_datagram(21, 20, &[v2_int_report(4, 0b0010, 0, &[], &p)]));
    v
}

/// Malformed reports, each with the one reason it is counted under.
fn malformed() -> Vec<(Vec<u8>, &'static str)> {
    let good = v2_int21_path();
    let mut v = vec![(good[..5].to_vec(), "int_drop_truncated")];
    let mut b = good.clone();
    b[0] = 0x30 | (b[0] & 0x0F); // Ver=3
    v.push((b, "int_drop_bad_version"));
    let mut b = good.clone();
    b[9] = 0xFE; // Report Length beyond the datagram
    v.push((b, "int_drop_truncated"));
    let mut b = good.clone();
    b[8] = 0x24; // RepType 2 (IOAM)
    v.push((b, "int_drop_unknown_rep_type"));
    let mut b = good.clone();
    b[8] = 0x15; // InType 5 (IPv6)
    v.push((b, "int_drop_unsupported_inner_type"));
    let mut b = good.clone();
    b[10] = 0; // MD Length 0 below RepMdBits' one word
    v.push((b, "int_drop_bad_length"));
    // INT 2.1: Hop ML 1 below the bitmap's 2 words (node ID, queue).
    let mut b = good.clone();
    let hop_ml_at = 8 + 12 + 4 + 20 + 8 + 4 + 2;
    assert_eq!(b[hop_ml_at], 2);
    b[hop_ml_at] = 1;
    v.push((b, "int_drop_bad_length"));
    // INT 1.0: the worked example's shim Length 8 (a removed tail header counted).
    v.push((v1_int10_dscp_path(Some(8)), "int_drop_bad_length"));
    // INT 1.0 shim whose metadata header says Ver=2.
    let mut b = v1_int10_dscp_path(None);
    let ver_at = 16 + 4 + 14 + 20 + 20 + 4;
    assert_eq!(b[ver_at], 0x10);
    b[ver_at] = 0x20;
    v.push((b, "int_drop_malformed_inner"));
    // v1.0 Length matching neither reading.
    let mut b = v1_drop();
    b[0] = 0x1F;
    v.push((b, "int_drop_bad_length"));
    v
}

// ---------------------------------------------------------------------------------------------
// The rig.

fn scenario() -> Scenario {
    Scenario {
        telemetry: 2,
        concurrent: 16,
        k: 4,
        slots_log2: 12,
        chunks_log2: 10,
        capacity: 1024,
        cache_slots: 1 << 10,
        switch_ids: POSTCARD_NODES.to_vec(),
        ..Scenario::default()
    }
}

fn rig(sc: &Scenario) -> Rig {
    sc.validate().unwrap();
    let mut rig = Rig::new(
        sc,
        0,
        1,
        &MemOptions {
            workers: 1,
            rnic: RnicMode::Inline,
            ..MemOptions::default()
        },
    )
    .unwrap();
    // The scenario's settings, with INT over TCP/UDP also announced by DSCP.
    rig.pipeline.set_int_ingest(IntSettings {
        inner: InnerConfig {
            md_udp_port: INT_UDP_PORT,
            md_dscp: Some(INT_DSCP),
            md_dscp_mask: 0x3F,
        },
        ..sc.int_settings()
    });
    rig
}

fn feed(rig: &mut Rig, sc: &Scenario, now: u64, payload: &[u8]) {
    let d = Datagram {
        src: SocketAddrV4::new(Ipv4Addr::new(192, 0, 2, 1), 32000),
        dst: SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 101), sc.int_port),
        ip: None,
        payload,
    };
    rig.tick(now);
    rig.feed(now, &[d]);
}

/// `rx_datagrams + int_derived() == translated + dropped() + pending` (stats.rs).
fn identity_holds(rig: &Rig) -> Result<(), String> {
    let c = rig.pipeline.counters();
    let pending = rig.pipeline.pending_reports();
    if c.rx_datagrams + c.int_derived() == c.translated + c.dropped() + pending {
        Ok(())
    } else {
        Err(format!(
            "rx {} + derived {} != translated {} + dropped {} + pending {pending}",
            c.rx_datagrams,
            c.int_derived(),
            c.translated,
            c.dropped()
        ))
    }
}

fn ids(v: &[u32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_be_bytes()).collect()
}

#[test]
fn spec_shaped_reports_land_in_the_collector_and_malformed_ones_are_counted_once() {
    let sc = scenario();
    let mut rig = rig(&sc);
    let mut now = 1_000_000u64;
    let mut valid = vec![
        v2_int21_path(),
        v2_int21_ds_path(1),
        v2_int21_ds_path(2),
        v1_int10_dscp_path(None),
        v1_int10_udp_path(),
        v2_int10_dscp_path(),
        v2_drop_and_congestion(),
        v1_drop(),
    ];
    valid.extend(postcards());
    for (i, b) in valid.iter().enumerate() {
        let before = *rig.pipeline.counters();
        feed(&mut rig, &sc, now, b);
        now += 10_000;
        let c = rig.pipeline.counters();
        assert_eq!(
            (c.int_dropped(), c.int_unmapped),
            (before.int_dropped(), before.int_unmapped),
            "valid vector {i} was not mapped: {c:?}"
        );
        identity_holds(&rig).unwrap();
    }
    for (b, reason) in malformed() {
        let before = *rig.pipeline.counters();
        feed(&mut rig, &sc, now, &b);
        now += 10_000;
        let c = *rig.pipeline.counters();
        assert_eq!(
            c.get(reason).unwrap(),
            before.get(reason).unwrap() + 1,
            "{reason}: {c:?}"
        );
        assert_eq!(
            c.int_dropped(),
            before.int_dropped() + 1,
            "{reason}: one reason"
        );
        assert_eq!(
            c.int_derived(),
            before.int_derived(),
            "{reason}: derives nothing"
        );
        identity_holds(&rig).unwrap();
    }
    rig.flush(now + 1_000_000_000);
    identity_holds(&rig).unwrap();
    let c: TranslatorCounters = *rig.pipeline.counters();
    assert_eq!(c.int_rx_datagrams, (valid.len() + malformed().len()) as u64);
    assert_eq!(c.dropped(), 0, "{c:?}");
    assert_eq!(c.get("int_postcard_ttl_above_initial"), Some(1), "{c:?}");

    let n = sc.redundancy as usize;
    // Paths (Key-Write query): source first, the reporting node last.
    let kw = rig.store("paths").unwrap().keywrite().unwrap();
    for (flow, path) in [
        (flow(1, 6, 40000, 443), vec![1, 2, 3]),
        (flow(2, 17, 3333, 53), vec![0x11, 0x22, 0x33, 4]),
        (flow(3, 6, 40001, 8080), vec![1, 2, 5]),
        (flow(4, 17, 7000, INT_UDP_PORT), vec![0x0A0B_0C0D, 6]),
        (flow(5, 17, 9999, 4789), vec![0x66, 0x77, 7]),
    ] {
        match kw.query(&Key::new(&flow).unwrap(), n, Vote::Plurality) {
            KeyWriteAnswer::Value { value, .. } => {
                let want = ids(&path);
                assert_eq!(&value.as_bytes()[..want.len()], &want[..], "{flow:?}");
                assert!(value.as_bytes()[want.len()..].iter().all(|&b| b == 0));
            }
            a => panic!("path of {flow:?}: {a:?}"),
        }
    }
    // Per-flow counters (Key-Increment query): one per report.
    let ctr = rig.store("counters").unwrap().counter().unwrap();
    for (flow, k) in [
        (flow(1, 6, 40000, 443), 1),
        (flow(2, 17, 3333, 53), 2),
        (flow(3, 6, 40001, 8080), 1),
        (flow(4, 17, 7000, INT_UDP_PORT), 1),
        (flow(5, 17, 9999, 4789), 1),
        (flow(6, 17, 12345, 53), 1),
        (flow(7, 6, 1024, 80), 1),
        (flow(8, 6, 5000, 22), 1),
        (flow(9, 6, 6000, 443), 5),
        (flow(10, 6, 6001, 443), 1),
    ] {
        assert_eq!(
            ctr.query(&Key::new(&flow).unwrap(), n).estimate,
            k,
            "{flow:?}"
        );
    }
    // Postcards: the five hops, in TTL order.
    let pc = rig.store("postcards").unwrap().postcard().unwrap();
    match pc.query(&Key::new(&flow(9, 6, 6000, 443)).unwrap(), 1, 1) {
        PathAnswer::Path { path, .. } => assert_eq!(path.hops(), &POSTCARD_NODES[..]),
        a => panic!("postcard path: {a:?}"),
    }
    assert!(!matches!(
        pc.query(&Key::new(&flow(10, 6, 6001, 443)).unwrap(), 1, 1),
        PathAnswer::Path { .. }
    ));
    // Drop events: flow (13), node (4 BE), drop reason, queue, 0.
    let entry = |f: [u8; 13], node: u32, tail: [u8; 3], len: usize| {
        let mut e = f.to_vec();
        e.extend_from_slice(&node.to_be_bytes());
        e.extend_from_slice(&tail);
        e.resize(len, 0);
        e
    };
    let want_drops: BTreeSet<Vec<u8>> = [
        entry(flow(6, 17, 12345, 53), 8, [71, 3, 0], 20),
        entry(flow(8, 6, 5000, 22), 9, [8, 2, 0], 20),
    ]
    .into();
    // Congestion events: flow, node, queue, occupancy (3 BE), 0 0 0.
    let want_cong: BTreeSet<Vec<u8>> = [entry(flow(7, 6, 1024, 80), 8, [9, 0x01, 0x00], 21)]
        .into_iter()
        .map(|mut e| {
            e.extend_from_slice(&[0, 0, 0]);
            e
        })
        .collect();
    for (store, want) in [("losses", want_drops), ("congestion", want_cong)] {
        let s = rig.store(store).unwrap();
        let a = s.append().unwrap();
        let mut got = BTreeSet::new();
        for l in 0..sc.lists {
            let mut r = ListReader::new(&s.region, a.layout, a.list_offset(l), Start::Seq(1));
            r.poll(&s.region, usize::MAX, |_, e| {
                got.insert(e.to_vec());
            });
        }
        assert_eq!(got, want, "{store}");
    }
}

/// Bytes to feed: a vector, then some bytes overwritten and the end cut, or random bytes
/// with a version nibble.
fn arb_datagram() -> impl Strategy<Value = Vec<u8>> {
    let mut seeds = vec![
        v2_int21_path(),
        v2_int21_ds_path(1),
        v1_int10_dscp_path(None),
        v1_int10_udp_path(),
        v2_int10_dscp_path(),
        v2_drop_and_congestion(),
        v1_drop(),
    ];
    seeds.extend(postcards());
    seeds.extend(malformed().into_iter().map(|(b, _)| b));
    let mutated = (
        proptest::sample::select(seeds),
        proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 0..6),
        any::<prop::sample::Index>(),
        any::<bool>(),
    )
        .prop_map(|(mut b, edits, cut, do_cut)| {
            if !b.is_empty() {
                for (i, x) in edits {
                    let i = i.index(b.len());
                    b[i] = x;
                }
                if do_cut {
                    b.truncate(cut.index(b.len() + 1));
                }
            }
            b
        });
    let random = (
        prop_oneof![Just(0x10u8), Just(0x20u8), any::<u8>()],
        proptest::collection::vec(any::<u8>(), 0..300),
    )
        .prop_map(|(v, mut b)| {
            if let Some(f) = b.first_mut() {
                *f = v & 0xF0 | *f & 0x0F;
            }
            b
        });
    prop_oneof![3 => mutated, 1 => random]
}

/// Any bytes into the Telemetry Report reader either yield reports or one counted reason, no
/// report derives more than [`MAX_DERIVED`], and the accounting identity holds after each
/// datagram and after the final flush.
#[test]
fn any_bytes_yield_reports_or_one_counted_reason() {
    let sc = scenario();
    let rig = RefCell::new(rig(&sc));
    let now = RefCell::new(1_000_000u64);
    let mut runner = TestRunner::new(PropConfig {
        cases: 10_000,
        failure_persistence: None,
        ..PropConfig::default()
    });
    runner
        .run(&arb_datagram(), |b| {
            let mut rig = rig.borrow_mut();
            let mut now = now.borrow_mut();
            *now += 20_000;
            let before = *rig.pipeline.counters();
            feed(&mut rig, &sc, *now, &b);
            let c = *rig.pipeline.counters();
            let reports =
                c.int_reports_v1 + c.int_reports_v2 - before.int_reports_v1 - before.int_reports_v2;
            let reasons = c.int_dropped() - before.int_dropped();
            let derived = c.int_derived() - before.int_derived();
            let unmapped = c.int_unmapped - before.int_unmapped;
            prop_assert_eq!(c.int_rx_datagrams, before.int_rx_datagrams + 1);
            prop_assert!(reports + reasons >= 1, "nothing counted for {:02x?}", b);
            if reports == 0 {
                prop_assert_eq!(reasons, 1, "{:02x?}", b);
                prop_assert_eq!(derived, 0);
            }
            // At most one reason per report read, and one for the datagram's headers.
            prop_assert!(reasons <= reports + 1, "{:02x?}: {:?}", b, c);
            prop_assert!(unmapped <= reports);
            prop_assert!(derived <= reports * MAX_DERIVED as u64);
            identity_holds(&rig).map_err(TestCaseError::fail)?;
            Ok(())
        })
        .unwrap();
    let mut rig = rig.borrow_mut();
    let t = *now.borrow() + 1_000_000_000;
    rig.flush(t);
    identity_holds(&rig).unwrap();
    let c = rig.pipeline.counters();
    eprintln!(
        "{} datagrams: {} reports, {} reasons, {} derived, {} translated",
        c.int_rx_datagrams,
        c.int_reports_v1 + c.int_reports_v2,
        c.int_dropped(),
        c.int_derived(),
        c.translated
    );
}

/// An IPv4 packet carrying INT-MD over UDP written by a third party's encoder, not ours nor
/// by hand: the INT layer `scapy/contrib/int.py` of `secdev/scapy` at commit 94d67504 (a
/// contributed layer written from INT v2.1, not in a scapy release), run under scapy 2.8.0
/// (PyPI) as
///
/// ```python
/// hops = [INTMetaHop(node_id=n, latency=lat, que_id=q, que_occupy=occ) for (n, lat, q, occ)
///         in [(0x0C, 300, 2, 0x333), (0x0B, 200, 1, 0x222), (0x0A, 100, 0, 0x111)]]
/// md = INTMetaMd(version=2, hop_left=5, instr_bitmap=0xB000, meta_hops=hops)
/// shim = INTShimTcpUdp(type=1, npt=1, l4_dport=53, metadata=md)
/// p = IP(src="10.0.11.1", dst="10.9.9.9", ttl=61, id=0x1234, flags="DF") \
///     / UDP(sport=4242, dport=INT_L4_DPORT) / shim / Raw(b"\0" * 16)
/// bytes(p).hex()
/// ```
///
/// The layer's INT-over-UDP port is its `INT_L4_DPORT` (0x4568), its shim Length excludes the
/// shim (12 = 3 + 9 words) and it sets Hop ML from the first hop's length (3).
const SCAPY_INT21_MD_OVER_UDP: &str = "45000060123440003d1103470a000b010a09090910924568004c8e23\
    140c003520000305b0000000000000000000000c0000012c020003330000000b000000c8010002220000000a00\
    0000640000011100000000000000000000000000000000";

#[test]
fn a_third_party_int21_stack_lands_as_a_path() {
    let ip: Vec<u8> = (0..SCAPY_INT21_MD_OVER_UDP.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&SCAPY_INT21_MD_OVER_UDP[i..i + 2], 16).unwrap())
        .collect();
    assert_eq!(ip.len(), 96);
    let sc = scenario();
    let mut r = rig(&sc);
    r.pipeline.set_int_ingest(IntSettings {
        inner: InnerConfig {
            md_udp_port: 0x4568,
            ..InnerConfig::default()
        },
        ..sc.int_settings()
    });
    // A sink (node 13) reports it: Telemetry Report v2.0, INT, InType 4, F.
    let b = v2_datagram(13, 1, &[v2_int_report(4, 0b0010, 0, &[], &ip)]);
    feed(&mut r, &sc, 1_000_000, &b);
    r.flush(2_000_000_000);
    identity_holds(&r).unwrap();
    let c = *r.pipeline.counters();
    assert_eq!((c.int_dropped(), c.int_derived_keywrite), (0, 1), "{c:?}");
    let f = flow(11, 17, 4242, 53);
    let kw = r.store("paths").unwrap().keywrite().unwrap();
    match kw.query(
        &Key::new(&f).unwrap(),
        sc.redundancy as usize,
        Vote::Plurality,
    ) {
        KeyWriteAnswer::Value { value, .. } => {
            let want = ids(&[0x0A, 0x0B, 0x0C, 13]);
            assert_eq!(&value.as_bytes()[..want.len()], &want[..]);
        }
        a => panic!("path: {a:?}"),
    }
    let ctr = r.store("counters").unwrap().counter().unwrap();
    assert_eq!(
        ctr.query(&Key::new(&f).unwrap(), sc.redundancy as usize)
            .estimate,
        1
    );
}
