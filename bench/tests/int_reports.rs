//! P4.org Telemetry Reports end to end: `dta gen --telemetry` output, decoded by an independent
//! parser written here from the specification (it shares no code with `dta_proto`), agrees
//! with ours on every field; the capture (written to and read back from pcap) goes through the
//! real translator pipeline into the software RNIC, and every store holds what the reports
//! said.

use std::collections::{BTreeMap, BTreeSet};

use dta_bench::gen::{Generator, Scenario};
use dta_bench::replay::{MemOptions, Rig, RnicMode};
use dta_bench::trace::Trace;
use dta_collector::query::append::{ListReader, Start};
use dta_collector::query::keywrite::{KeyWriteAnswer, Vote};
use dta_collector::query::postcard::PathAnswer;
use dta_proto::wire::telemetry_report::{
    CongestionEvent, DropEvent, InnerConfig, TelemetryReport, DEFAULT_MD_UDP_PORT,
};
use dta_proto::Key;

/// One individual report as the independent parser sees it.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
struct Indep {
    version: u8,
    hw_id: u8,
    seq: u32,
    node: u32,
    d: bool,
    q: bool,
    f: bool,
    hop_latency: Option<u32>,
    queue: Option<(u8, u32)>,
    drop: Option<(u8, u8)>,
    flow: [u8; 13],
    ttl: u8,
    /// (node, latency, queue id, occupancy), source first.
    stack: Vec<(u32, u32, u8, u32)>,
}

fn u16be(b: &[u8], i: usize) -> u16 {
    (b[i] as u16) << 8 | b[i + 1] as u16
}

fn u32be(b: &[u8], i: usize) -> u32 {
    (u16be(b, i) as u32) << 16 | u16be(b, i + 2) as u32
}

/// Decodes a datagram from the spec's bit layouts (v1.0 header, v2.0 group + individual
/// headers, RepMdBits, INT 2.1 shim and MD header, IPv4/TCP/UDP). Panics on anything it does
/// not expect: it only reads what `dta gen` writes.
fn independent(b: &[u8]) -> Vec<Indep> {
    let ver = b[0] >> 4;
    let mut out = Vec::new();
    let mut r = Indep {
        version: ver,
        ..Indep::default()
    };
    // Returns (offset after metadata) reading `bits` with per-bit widths `widths`.
    let md = |r: &mut Indep, bits: u16, nbits: usize, b: &[u8], mut at: usize, v1: bool| {
        for i in 0..nbits {
            if bits >> (nbits - 1 - i) & 1 == 0 {
                continue;
            }
            // v2.0 bit -> meaning (bit 0 reserved, 4/5/6 eight bytes); v1.0: ports, latency,
            // queue, egress ts, drop, tx util.
            let (what, width) = if v1 {
                (["ports", "lat", "queue", "ets", "drop", "util"][i], 4)
            } else {
                match i {
                    2 => ("lat", 4),
                    3 => ("queue", 4),
                    4..=6 => ("other", 8),
                    15 => ("drop", 4),
                    _ => ("other", 4),
                }
            };
            match what {
                "lat" => r.hop_latency = Some(u32be(b, at)),
                "queue" => r.queue = Some((b[at], u32be(b, at) & 0xFF_FFFF)),
                "drop" => r.drop = Some((b[at], b[at + 1])),
                _ => {}
            }
            at += width;
        }
        at
    };
    let inner = |r: &mut Indep, p: &[u8], eth: bool| {
        let ip = if eth {
            assert_eq!(u16be(p, 12), 0x0800);
            &p[14..]
        } else {
            p
        };
        assert_eq!(ip[0] >> 4, 4);
        let ihl = (ip[0] & 15) as usize * 4;
        r.ttl = ip[8];
        r.flow[0..8].copy_from_slice(&ip[12..20]);
        let mut proto = ip[9];
        let mut l4 = &ip[ihl..];
        if proto == 17 && u16be(l4, 2) == DEFAULT_MD_UDP_PORT {
            let shim = &l4[8..];
            assert_eq!(shim[0] >> 4, 1, "INT-MD shim");
            assert_eq!(shim[0] >> 2 & 3, 2, "NPT 2");
            let words = shim[1] as usize;
            proto = shim[3];
            let h = &shim[4..4 + words * 4];
            assert_eq!(h[0] >> 4, 2);
            let hop_ml = (h[2] & 0x1F) as usize;
            let instr = u16be(h, 4);
            assert_eq!(instr, 0b1011 << 12, "node, latency, queue");
            let stack = &h[12..];
            let n = stack.len() / (hop_ml * 4);
            for k in (0..n).rev() {
                let s = &stack[k * hop_ml * 4..];
                r.stack
                    .push((u32be(s, 0), u32be(s, 4), s[8], u32be(s, 8) & 0xFF_FFFF));
            }
            l4 = &shim[4 + words * 4..];
        }
        r.flow[8] = proto;
        r.flow[9..11].copy_from_slice(&l4[0..2]);
        r.flow[11..13].copy_from_slice(&l4[2..4]);
    };
    if ver == 1 {
        let w = u32be(b, 0);
        let len = (w >> 24 & 15) as usize;
        let nproto = w >> 21 & 7;
        let bits = (w >> 15 & 0x3F) as u16;
        r.d = w >> 8 & 1 == 1;
        r.q = w >> 7 & 1 == 1;
        r.f = w >> 6 & 1 == 1;
        r.hw_id = (w & 0x3F) as u8;
        r.node = u32be(b, 4);
        r.seq = u32be(b, 8);
        let end = md(&mut r, bits, 6, b, 16, true);
        assert_eq!(end, len * 4, "Len counts the whole header in words");
        inner(&mut r, &b[end..], nproto == 0);
        out.push(r);
        return out;
    }
    assert_eq!(ver, 2);
    let w = u32be(b, 0);
    r.hw_id = (w >> 22 & 0x3F) as u8;
    r.seq = w & 0x3F_FFFF;
    r.node = u32be(b, 4);
    let mut at = 8;
    while at + 4 <= b.len() {
        let mut x = r.clone();
        let h = &b[at..];
        let rep_type = h[0] >> 4;
        let in_type = h[0] & 15;
        let len = 4 + h[1] as usize * 4;
        let md_len = h[2] as usize * 4;
        x.d = h[3] & 0x80 != 0;
        x.q = h[3] & 0x40 != 0;
        x.f = h[3] & 0x20 != 0;
        let mut p = 4;
        if rep_type == 1 {
            let bits = u16be(h, 4);
            let end = md(&mut x, bits, 16, h, 12, false);
            assert!(end <= 12 + md_len);
            p = 12 + md_len;
        }
        inner(&mut x, &h[p..len], in_type == 3);
        out.push(x);
        at += len;
    }
    out
}

/// Our parser's view, in the same shape.
fn ours(b: &[u8]) -> Vec<Indep> {
    let t = TelemetryReport::parse(b).unwrap();
    t.reports()
        .map(|ir| {
            let ir = ir.unwrap();
            let p = ir.parse_inner(&InnerConfig::default()).unwrap();
            Indep {
                version: t.version,
                hw_id: t.hw_id,
                seq: t.seq_no,
                node: t.node_id,
                d: ir.flags.dropped,
                q: ir.flags.congested,
                f: ir.flags.tracked,
                hop_latency: ir.local.hop_latency,
                queue: ir.local.queue.map(|q| (q.id, q.occupancy)),
                drop: ir.local.drop.map(|d| (d.queue, d.reason)),
                flow: p.flow.to_bytes(),
                ttl: p.ttl,
                stack: p
                    .int
                    .map(|e| {
                        (0..e.hops())
                            .map(|i| {
                                let h = e.hop_from_source(i).unwrap();
                                let q = h.queue.unwrap();
                                (
                                    h.node_id.unwrap(),
                                    h.hop_latency.unwrap(),
                                    q.id,
                                    q.occupancy,
                                )
                            })
                            .collect()
                    })
                    .unwrap_or_default(),
            }
        })
        .collect()
}

/// A flow's hops seen by hop index, and the hops of its packet in flight.
type FlowHops = (BTreeMap<u8, u32>, Vec<u32>);

fn scenario(version: u8) -> Scenario {
    Scenario {
        telemetry: version,
        concurrent: 200,
        k: 4,
        slots_log2: 16,
        chunks_log2: 14,
        capacity: 4096,
        cache_slots: 1 << 16,
        ..Scenario::default()
    }
}

fn generated(version: u8, n: usize) -> (Scenario, Trace) {
    let sc = scenario(version);
    sc.validate().unwrap();
    let mut g = Generator::new(&sc);
    let t = Trace::generate(&mut g, n).unwrap();
    // Through a pcap file and back, as `dta gen --pcap` and `dta replay` do.
    let dir = std::env::temp_dir().join(format!("dta-int-{}-{version}-{n}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("int.pcap");
    t.write_pcap(&path, std::time::Duration::from_micros(1))
        .unwrap();
    let back = Trace::read_pcap_to(&path, Some(sc.int_port)).unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(back.len(), n);
    (sc, back)
}

#[test]
fn an_independent_parser_agrees_with_ours_on_every_field() {
    for version in [1u8, 2] {
        let (_, t) = generated(version, 5000);
        let mut kinds = BTreeMap::new();
        for i in 0..t.len() {
            let b = t.payload(i);
            let a = independent(b);
            let o = ours(b);
            assert_eq!(a, o, "v{version} datagram {i}");
            for r in &a {
                *kinds
                    .entry((r.d, r.q, r.f, !r.stack.is_empty()))
                    .or_insert(0) += 1;
            }
        }
        // Every kind of report appears: paths, postcards, drops, congestion, counter-only.
        assert_eq!(kinds.len(), 5, "v{version}: {kinds:?}");
    }
}

#[test]
fn generated_captures_land_in_the_right_stores() {
    for version in [1u8, 2] {
        let (sc, t) = generated(version, 8000);
        // Expectations from the independent decoding.
        let mut paths: BTreeMap<[u8; 13], Vec<u32>> = BTreeMap::new();
        let mut counts: BTreeMap<[u8; 13], u64> = BTreeMap::new();
        // Per flow: its path's hops seen so far, and the hops of the packet in flight.
        let mut postcards: BTreeMap<[u8; 13], FlowHops> = BTreeMap::new();
        let mut drops = BTreeSet::new();
        let mut congestion = BTreeSet::new();
        for i in 0..t.len() {
            for r in independent(t.payload(i)) {
                *counts.entry(r.flow).or_insert(0) += 1;
                if !r.stack.is_empty() {
                    let mut p: Vec<u32> = r.stack.iter().map(|h| h.0).collect();
                    p.push(r.node);
                    paths.insert(r.flow, p);
                } else if r.f {
                    let (all, cur) = postcards.entry(r.flow).or_default();
                    let hop = 64 - r.ttl;
                    all.insert(hop, r.node);
                    if hop == 0 {
                        cur.clear();
                    }
                    cur.push(r.node);
                }
                if r.d {
                    let (q, reason) = r.drop.unwrap();
                    let mut e = [0u8; 20];
                    e[..13].copy_from_slice(&r.flow);
                    e[13..17].copy_from_slice(&r.node.to_be_bytes());
                    e[17] = reason;
                    e[18] = q;
                    drops.insert(e);
                }
                if r.q {
                    let (q, occ) = r.queue.unwrap();
                    let mut e = [0u8; 24];
                    e[..13].copy_from_slice(&r.flow);
                    e[13..17].copy_from_slice(&r.node.to_be_bytes());
                    e[17] = q;
                    e[18..21].copy_from_slice(&occ.to_be_bytes()[1..]);
                    congestion.insert(e);
                }
            }
        }
        let mut rig = Rig::new(
            &sc,
            0,
            1,
            &MemOptions {
                workers: 1,
                rnic: RnicMode::Inline,
                ..MemOptions::default()
            },
        )
        .unwrap();
        let mut now = 1_000_000;
        for chunk in (0..t.len()).collect::<Vec<_>>().chunks(32) {
            let views: Vec<_> = chunk.iter().map(|&i| t.get(i)).collect();
            rig.tick(now);
            rig.feed(now, &views);
            now += 10_000;
        }
        rig.flush(now);
        let c = *rig.pipeline.counters();
        assert_eq!(c.int_rx_datagrams, t.len() as u64);
        assert_eq!(c.int_dropped() + c.int_unmapped, 0, "{c:?}");
        assert_eq!(c.dropped(), 0, "{c:?}");
        assert_eq!(
            c.translated + rig.pipeline.pending_reports(),
            c.int_derived(),
            "{c:?}"
        );
        assert_eq!(c.int_seq_gaps, 0);
        let n = sc.redundancy as usize;

        // Key-Write: every flow's path.
        let kw = rig.store("paths").unwrap().keywrite().unwrap();
        for (flow, p) in &paths {
            let key = Key::new(flow).unwrap();
            match kw.query(&key, n, Vote::Plurality) {
                KeyWriteAnswer::Value { value, .. } => {
                    let want: Vec<u8> = p.iter().flat_map(|x| x.to_be_bytes()).collect();
                    assert_eq!(&value.as_bytes()[..want.len()], &want[..], "v{version}");
                    assert!(value.as_bytes()[want.len()..].iter().all(|&b| b == 0));
                }
                a => panic!("v{version}: path of {flow:?}: {a:?}"),
            }
        }
        assert!(paths.len() > 100, "{}", paths.len());

        // Key-Increment: one per report of the flow (count-min: never below, and exact
        // unless every counter of the flow is shared with another flow).
        let ctr = rig.store("counters").unwrap().counter().unwrap();
        let mut exact = 0;
        for (flow, &k) in &counts {
            let e = ctr.query(&Key::new(flow).unwrap(), n).estimate;
            assert!(e >= k, "v{version}: {e} < {k}");
            exact += (e == k) as usize;
        }
        assert!(
            exact * 100 >= counts.len() * 99,
            "{exact} of {}",
            counts.len()
        );

        // Postcarding: a flow's chunk holds its last packet's hops (a complete path, or the
        // hops of the packet in flight written at the final flush). A cache collision can
        // leave a chunk the query rejects, never a wrong path.
        let pc = rig.store("postcards").unwrap().postcard().unwrap();
        let (mut exact, mut complete) = (0, 0);
        for (flow, (all, cur)) in &postcards {
            let full: Vec<u32> = all.values().copied().collect();
            complete += (all.len() == 5) as usize;
            if let PathAnswer::Path { path, .. } = pc.query(&Key::new(flow).unwrap(), 1, 1) {
                let h = path.hops();
                assert_eq!(
                    h,
                    &full[..h.len()],
                    "v{version}: a prefix of the flow's path"
                );
                exact += (h == &cur[..] || cur.len() == 5 && h == &full[..]) as usize;
            }
        }
        assert!(complete > 50, "{complete}");
        assert!(
            exact * 10 >= postcards.len() * 9,
            "v{version}: {exact} of {} flows decode to their last packet's hops",
            postcards.len()
        );

        // Append: the drop and congestion lists hold exactly the events sent.
        for (store, want, decode_ok) in [
            (
                "losses",
                &drops.iter().map(|e| e.to_vec()).collect::<BTreeSet<_>>(),
                (|e: &[u8]| DropEvent::from_bytes(e).is_some()) as fn(&[u8]) -> bool,
            ),
            (
                "congestion",
                &congestion.iter().map(|e| e.to_vec()).collect(),
                |e: &[u8]| CongestionEvent::from_bytes(e).is_some(),
            ),
        ] {
            let s = rig.store(store).unwrap();
            let a = s.append().unwrap();
            let mut got = BTreeSet::new();
            let mut entries = 0;
            for l in 0..sc.lists {
                let mut r = ListReader::new(&s.region, a.layout, a.list_offset(l), Start::Seq(1));
                r.poll(&s.region, usize::MAX, |_, e| {
                    assert!(decode_ok(e));
                    entries += 1;
                    got.insert(e.to_vec());
                });
            }
            assert_eq!(&got, want, "v{version} {store}");
            assert!(entries >= want.len());
        }
    }
}

#[test]
fn hostile_telemetry_reports_are_counted_by_reason_and_never_panic() {
    let (sc, t) = generated(2, 200);
    let mut rig = Rig::new(
        &sc,
        0,
        1,
        &MemOptions {
            workers: 1,
            rnic: RnicMode::Inline,
            ..MemOptions::default()
        },
    )
    .unwrap();
    let good = t.get(0);
    let mut cases: Vec<(Vec<u8>, &str)> = Vec::new();
    let p = good.payload.to_vec();
    cases.push((p[..5].to_vec(), "int_drop_truncated"));
    let mut bad = p.clone();
    bad[0] = 0x70 | (bad[0] & 0x0F);
    cases.push((bad, "int_drop_bad_version"));
    let mut huge = p.clone();
    huge[9] = 0xFE; // Report Length far beyond the datagram
    cases.push((huge, "int_drop_truncated"));
    let mut ioam = p.clone();
    ioam[8] = 0x24; // RepType 2 (IOAM)
    cases.push((ioam, "int_drop_unknown_rep_type"));
    let mut v6 = p.clone();
    v6[8] = (v6[8] & 0xF0) | 5; // InType IPv6
    cases.push((v6, "int_drop_unsupported_inner_type"));
    let mut mdlen = p.clone();
    mdlen[10] = 0xF0; // MD Length beyond the report
    cases.push((mdlen, "int_drop_bad_length"));
    for (bytes, reason) in &cases {
        let before = *rig.pipeline.counters();
        let d = dta_proto::batch::Datagram {
            payload: bytes,
            ..good
        };
        rig.feed(1_000_000, &[d]);
        let after = *rig.pipeline.counters();
        assert_eq!(
            after.get(reason).unwrap(),
            before.get(reason).unwrap() + 1,
            "{reason}: {after:?}"
        );
        assert_eq!(after.int_derived(), before.int_derived(), "{reason}");
    }
    // Random bytes and every truncation of a good report: no panic, every datagram counted.
    let mut x = 0x1234_5678u64;
    for i in 0..20_000 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let mut b: Vec<u8> = (0..(x % 160) as usize)
            .map(|k| (x >> (k % 8 * 8)) as u8 ^ k as u8)
            .collect();
        if i % 2 == 0 && !b.is_empty() {
            b[0] = 0x10 | b[0] & 0x0F; // version 1 or 2 often
            if i % 4 == 0 {
                b[0] = 0x20 | b[0] & 0x0F;
            }
        }
        let d = dta_proto::batch::Datagram {
            payload: &b,
            ..good
        };
        rig.feed(2_000_000, &[d]);
    }
    for cut in 0..good.payload.len() {
        let d = dta_proto::batch::Datagram {
            payload: &good.payload[..cut],
            ..good
        };
        rig.feed(3_000_000, &[d]);
    }
    rig.flush(4_000_000);
    let c = rig.pipeline.counters();
    assert_eq!(
        c.int_rx_datagrams,
        cases.len() as u64 + 20_000 + good.payload.len() as u64
    );
    assert_eq!(
        c.translated + c.dropped() + rig.pipeline.pending_reports(),
        c.int_derived()
    );
}

/// tshark reads the generated captures as clean Ethernet/IPv4/UDP to the INT port (valid IP
/// and UDP checksums, UDP lengths matching). Wireshark has no P4.org Telemetry Report
/// dissector (none in `tshark -G protocols` of 4.0), so the report headers themselves are
/// checked by the independent parser above; that part is skipped with a printed reason.
#[test]
fn tshark_reads_the_generated_captures() {
    use std::process::Command;
    if Command::new("tshark").arg("--version").output().is_err() {
        eprintln!("SKIP: tshark not installed (scripts/install-tshark.sh)");
        return;
    }
    let protocols = Command::new("tshark")
        .args(["-G", "protocols"])
        .output()
        .unwrap();
    let list = String::from_utf8_lossy(&protocols.stdout).to_lowercase();
    if !list
        .lines()
        .any(|l| l.contains("telemetry report") || l.ends_with("\tint"))
    {
        eprintln!(
            "SKIP (report headers): tshark has no Telemetry Report/INT dissector; outer \
             headers only"
        );
    }
    for version in [1u8, 2] {
        let sc = scenario(version);
        let mut g = Generator::new(&sc);
        let t = Trace::generate(&mut g, 300).unwrap();
        let path = std::env::temp_dir().join(format!(
            "dta-int-tshark-{}-{version}.pcap",
            std::process::id()
        ));
        t.write_pcap(&path, std::time::Duration::from_micros(1))
            .unwrap();
        let out = Command::new("tshark")
            .args(["-n", "-r"])
            .arg(&path)
            .args([
                "-o",
                "ip.check_checksum:TRUE",
                "-o",
                "udp.check_checksum:TRUE",
                "-T",
                "fields",
                "-e",
                "udp.dstport",
                "-e",
                "udp.length",
                "-e",
                "ip.checksum.status",
                "-e",
                "udp.checksum.status",
                "-e",
                "_ws.expert",
            ])
            .output()
            .expect("tshark runs");
        let _ = std::fs::remove_file(&path);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let text = String::from_utf8_lossy(&out.stdout);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 300, "v{version}");
        for (i, l) in lines.iter().enumerate() {
            let f: Vec<&str> = l.split('\t').collect();
            assert_eq!(f[0], sc.int_port.to_string(), "v{version} frame {i}: {l}");
            assert_eq!(
                f[1].parse::<usize>().unwrap(),
                8 + t.payload(i).len(),
                "v{version} frame {i}"
            );
            // Checksum status 1 is "good" (0 bad, 2 unverified).
            assert_eq!(f[2], "1", "v{version} frame {i}: IP checksum: {l}");
            assert_eq!(f[3], "1", "v{version} frame {i}: UDP checksum: {l}");
            assert!(f.get(4).is_none_or(|e| e.is_empty()), "expert info: {l}");
        }
    }
}
