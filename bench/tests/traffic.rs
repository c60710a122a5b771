//! `dta gen --traffic` on captures no one here made (tcpdump's test captures, in
//! `bench/tests/captures/`, see its README) and on a capture built here byte by byte:
//!
//! - the conversion's counts are stable and agree with expectations computed without our
//!   decoder: numbers read off `tshark` 4.0 (written below), and `tshark` itself when it is
//!   installed (flows, packets and IP bytes per flow, and `tcp.analysis.retransmission` frame
//!   by frame); skipped with a message otherwise;
//! - every path is a shortest path of the topology, hop by hop over its links, from the
//!   source's switch to the destination's;
//! - the reports, through a pcap file and back and through the production translator pipeline
//!   and software RNIC, leave every store matching the ground truth (`traffic::check`), and the
//!   `dta` binary does the same from the command line.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::process::Command;

use dta_bench::gen::{Scenario, SketchStores};
use dta_bench::trace::Trace;
use dta_bench::traffic::check::check;
use dta_bench::traffic::topology::Topology;
use dta_bench::traffic::{from_capture, Traffic, TrafficFile, TrafficOptions};

fn capture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/captures")
        .join(name)
}

fn tmp(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("dta-traffic-{}-{name}", std::process::id()))
}

fn sketch() -> SketchStores {
    SketchStores {
        cm_rows: 4,
        cm_columns: 512,
        hll_registers: 512,
        epochs: 16,
        switches: 1,
    }
}

fn convert(path: &Path, topology: &str, o: &TrafficOptions) -> Traffic {
    from_capture(path, topology, &Scenario::default(), sketch(), o)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// A public capture and what tshark 4.0.17 says about it: name, link type, records, IP
/// packets, unidirectional 5-tuples, and the frames `tcp.analysis.retransmission` marks.
type Expected = (&'static str, &'static str, u64, u64, usize, &'static [u32]);

const PUBLIC: &[Expected] = &[
    ("ssh.pcap", "ethernet", 54, 54, 2, &[49]),
    ("pptp.pcap", "ethernet", 23, 23, 3, &[3, 9, 14, 20]),
    ("mptcp-v0.pcap", "ethernet", 264, 264, 4, &[]),
    ("bgp-4byte-asn.pcap", "ethernet", 91, 79, 12, &[]),
    ("babel.pcap", "linux-sll", 25, 25, 6, &[]),
    ("OSPFv2_Capture_FINAL.pcapng", "ethernet", 30, 30, 8, &[]),
    ("tcp-handshake-nano.pcap", "linux-sll", 3, 3, 2, &[]),
];

#[test]
fn public_captures_convert_with_stable_counts() {
    let o = TrafficOptions::default();
    for &(name, link, records, packets, flows, retrans) in PUBLIC {
        let t = convert(&capture(name), "fat-tree:k=8", &o);
        let tr = &t.file.traffic;
        let st = &tr.capture_stats;
        assert_eq!(st.link_types, [link], "{name}");
        assert_eq!((st.records, st.packets), (records, packets), "{name}");
        assert_eq!(
            st.not_ip,
            records - packets,
            "{name}: ARP is the only non-IP"
        );
        assert_eq!(
            st.fragments + st.truncated + st.malformed + st.same_host + st.bad_records,
            0,
            "{name}"
        );
        assert_eq!(tr.flows.len(), flows, "{name}");
        let frames: Vec<u32> = tr.losses.iter().map(|l| l.frame).collect();
        assert_eq!(frames, retrans, "{name}: retransmissions");
        assert_eq!(
            tr.flows.iter().map(|f| f.packets).sum::<u64>(),
            packets,
            "{name}"
        );
        // Report counts, each from its rule: one path per flow; every hop of every packet;
        // one loss per retransmission; two counters per active flow per epoch; every switch's
        // sketches (8 Count-Min reports of 64 columns, 1 HyperLogLog) per epoch with traffic.
        let r = tr.reports;
        assert_eq!(r.keywrite, flows as u64, "{name}");
        let hops: u64 = tr
            .flows
            .iter()
            .map(|f| f.packets * f.path.len() as u64)
            .sum();
        assert_eq!(r.postcards, hops, "{name}");
        assert_eq!(r.loss, retrans.len() as u64, "{name}");
        let active: u64 = tr.epochs.iter().map(|e| e.flows.len() as u64).sum();
        assert_eq!(r.counters, 2 * active, "{name}");
        assert_eq!(r.sketch, tr.epochs.len() as u64 * 80 * 9, "{name}");
        assert_eq!(
            r.congestion, 0,
            "{name}: 10 Gb/s links never queue these captures"
        );
        assert_eq!(t.trace.len() as u64, r.total(), "{name}");
        assert!(t.times_ns.windows(2).all(|w| w[0] <= w[1]), "{name}");
    }
    // The numbers the README quotes.
    let t = convert(&capture("pptp.pcap"), "fat-tree:k=8", &o);
    let r = t.file.traffic.reports;
    assert_eq!(
        (
            r.keywrite,
            r.postcards,
            r.loss,
            r.congestion,
            r.counters,
            r.sketch
        ),
        (3, 115, 4, 0, 10, 1440)
    );
}

/// tshark's decoding, field by field: (frame, src, dst, IPv4 protocol, sport, dport, IP bytes).
type TsharkRow = (u32, String, String, Option<u8>, u16, u16, u64);

fn tshark(path: &Path, filter: &str) -> Option<Vec<TsharkRow>> {
    let out = Command::new("tshark")
        .arg("-r")
        .arg(path)
        .args(["-Y", filter, "-T", "fields", "-E", "occurrence=f"])
        .args(["-e", "frame.number", "-e", "ip.src", "-e", "ipv6.src"])
        .args(["-e", "ip.dst", "-e", "ipv6.dst", "-e", "ip.proto"])
        .args(["-e", "tcp.srcport", "-e", "udp.srcport"])
        .args(["-e", "tcp.dstport", "-e", "udp.dstport"])
        .args(["-e", "ip.len", "-e", "ipv6.plen"])
        .output()
        .ok()?;
    assert!(
        out.status.success(),
        "tshark: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rows = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| {
            let c: Vec<&str> = l.split('\t').collect();
            let or = |a: &str, b: &str| if a.is_empty() { b } else { a }.to_string();
            let num = |s: &str| s.parse::<u64>().unwrap_or(0);
            let v6 = c[1].is_empty();
            (
                num(c[0]) as u32,
                or(c[1], c[2]),
                or(c[3], c[4]),
                (!v6).then(|| num(c[5]) as u8),
                num(or(c[6], c[7]).as_str()) as u16,
                num(or(c[8], c[9]).as_str()) as u16,
                if v6 { num(c[11]) + 40 } else { num(c[10]) },
            )
        })
        .collect();
    Some(rows)
}

#[test]
fn tshark_agrees_on_flows_bytes_and_retransmissions() {
    if Command::new("tshark").arg("--version").output().is_err() {
        eprintln!("SKIP: tshark not installed (scripts/install-tshark.sh installs it)");
        return;
    }
    let o = TrafficOptions::default();
    for &(name, ..) in PUBLIC {
        let path = capture(name);
        let t = convert(&path, "fat-tree:k=8", &o);
        let tr = &t.file.traffic;
        let rows = tshark(&path, "ip or ipv6").unwrap();
        assert_eq!(rows.len() as u64, tr.capture_stats.packets, "{name}");
        // Flows by tshark's fields: packets and IP bytes per (src, dst, ports).
        // (src, dst, sport, dport) -> (packets, bytes, IPv4 protocol)
        type Flows = BTreeMap<(String, String, u16, u16), (u64, u64, Option<u8>)>;
        let mut want = Flows::new();
        for (_, s, d, proto, sp, dp, len) in &rows {
            let e = want
                .entry((s.clone(), d.clone(), *sp, *dp))
                .or_insert((0, 0, *proto));
            e.0 += 1;
            e.1 += len;
        }
        let mut got = BTreeMap::new();
        for f in &tr.flows {
            let v4 = f.src.parse::<IpAddr>().unwrap().is_ipv4();
            got.insert(
                (f.src.clone(), f.dst.clone(), f.sport, f.dport),
                (f.packets, f.bytes, v4.then_some(f.proto)),
            );
        }
        assert_eq!(got, want, "{name}");
        let retrans: Vec<u32> = tshark(&path, "tcp.analysis.retransmission")
            .unwrap()
            .iter()
            .map(|r| r.0)
            .collect();
        let ours: Vec<u32> = tr.losses.iter().map(|l| l.frame).collect();
        assert_eq!(ours, retrans, "{name}");
    }
}

fn check_paths(t: &Traffic, topo: &mut Topology) {
    let tr = &t.file.traffic;
    assert_eq!(tr.switch_ids, topo.ids());
    let ids = topo.ids().to_vec();
    let index = |id: u32| ids.iter().position(|&x| x == id).unwrap() as u32;
    for f in &tr.flows {
        let hops: Vec<u32> = f.path.iter().map(|&id| index(id)).collect();
        let (src, dst): (IpAddr, IpAddr) = (f.src.parse().unwrap(), f.dst.parse().unwrap());
        assert_eq!(hops[0], topo.attach(&src), "{f:?}");
        assert_eq!(*hops.last().unwrap(), topo.attach(&dst), "{f:?}");
        for w in hops.windows(2) {
            assert!(topo.linked(w[0], w[1]), "{f:?}");
        }
        // Shortest: one switch per link of the distance, none twice.
        assert_eq!(
            topo.distance(hops[0], *hops.last().unwrap()) as usize + 1,
            hops.len()
        );
    }
}

#[test]
fn paths_are_shortest_paths_of_the_topology() {
    let o = TrafficOptions::default();
    for k in [4, 8] {
        for &(name, ..) in PUBLIC {
            let spec = format!("fat-tree:k={k}");
            let t = convert(&capture(name), &spec, &o);
            let mut topo = Topology::fat_tree(k, |i| 1 + i).unwrap();
            check_paths(&t, &mut topo);
        }
    }
    let file = tmp("leafspine.topo");
    std::fs::write(&file, LEAF_SPINE).unwrap();
    let t = convert(&capture("mptcp-v0.pcap"), file.to_str().unwrap(), &o);
    let mut topo = Topology::parse("t", LEAF_SPINE).unwrap();
    check_paths(&t, &mut topo);
    let _ = std::fs::remove_file(&file);
    // 10.1.1.2 and 10.1.2.2 sit on leaf 2, 10.2.1.2 on leaf 1: every path crosses a spine.
    for f in &t.file.traffic.flows {
        assert_eq!(f.path.len(), 3, "{f:?}");
        assert!(f.path[1] == 10 || f.path[1] == 11);
    }
    assert_eq!(t.file.scenario.postcard_hops, 3);
}

const LEAF_SPINE: &str = "\
# two leaves, two spines
switch 1 2 10 11
link 1 10
link 1 11
link 2 10
link 2 11
edge 1 2
host 10.0.0.0/24 1
host 10.2.0.0/16 1
host 10.0.1.0/24 2
host 10.1.0.0/16 2
host 2001:db8::/32 2
";

/// Writes `t` as `dta gen --traffic --pcap` does, reads it back as `dta replay` does, and runs
/// the ground-truth check.
fn round_trip_and_check(t: &Traffic, name: &str) -> dta_bench::traffic::check::Check {
    let p = tmp(&format!("{name}.pcap"));
    t.trace.write_pcap_at(&p, &t.times_ns).unwrap();
    let js = serde_json::to_string(&t.file).unwrap();
    let back = Trace::read_pcap(&p).unwrap();
    let _ = std::fs::remove_file(&p);
    assert_eq!((back.len(), back.skipped), (t.trace.len(), 0));
    // The scenario reads back as `dta replay` reads it, and the truth with it.
    let sc: Scenario = serde_json::from_str(&js).unwrap();
    assert_eq!(sc, t.file.scenario);
    let file: TrafficFile = serde_json::from_str(&js).unwrap();
    assert_eq!(file, t.file);
    let c = check(&file, &back).unwrap();
    assert!(c.passed(), "{name}: {c:?}");
    c
}

#[test]
fn public_captures_replay_to_their_ground_truth() {
    let o = TrafficOptions {
        epoch_ns: 200_000_000,
        ..TrafficOptions::default()
    };
    for name in [
        "ssh.pcap",
        "pptp.pcap",
        "babel.pcap",
        "OSPFv2_Capture_FINAL.pcapng",
    ] {
        let t = convert(&capture(name), "fat-tree:k=4", &o);
        let c = round_trip_and_check(&t, name);
        let tr = &t.file.traffic;
        assert_eq!(c.paths.total, tr.flows.len() as u64);
        assert_eq!(c.losses.total, tr.losses.len() as u64);
        assert!(c.sketch_epochs.total >= 1);
        // The merged HyperLogLog counts each epoch's few flows about right.
        for &(_, flows, est) in &c.distinct_flows {
            assert!(
                (est - flows as f64).abs() <= 1.0 + 0.1 * flows as f64,
                "{name}"
            );
        }
    }
}

// ---- A capture built here, byte by byte (RFC 791, 8200, 9293, 768, 792; 802.1Q; the
// ---- LINKTYPE_LINUX_SLL2 header from tcpdump's print-sll.c), with every answer known.

fn eth(ethertype: u16, vlan: Option<u16>, l3: &[u8]) -> Vec<u8> {
    let mut f = vec![2, 0, 0, 0, 0, 1, 2, 0, 0, 0, 0, 2];
    if let Some(v) = vlan {
        f.extend_from_slice(&[0x81, 0x00]);
        f.extend_from_slice(&v.to_be_bytes());
    }
    f.extend_from_slice(&ethertype.to_be_bytes());
    f.extend_from_slice(l3);
    f
}

fn ipv4(src: [u8; 4], dst: [u8; 4], proto: u8, frag: u16, l4: &[u8]) -> Vec<u8> {
    let total = (20 + l4.len()) as u16;
    let mut p = vec![0x45, 0];
    p.extend_from_slice(&total.to_be_bytes());
    p.extend_from_slice(&[0, 7]);
    p.extend_from_slice(&frag.to_be_bytes());
    p.extend_from_slice(&[64, proto, 0, 0]);
    p.extend_from_slice(&src);
    p.extend_from_slice(&dst);
    p.extend_from_slice(l4);
    p
}

fn tcp(sport: u16, dport: u16, seq: u32, flags: u8, payload: usize) -> Vec<u8> {
    let mut t = Vec::new();
    t.extend_from_slice(&sport.to_be_bytes());
    t.extend_from_slice(&dport.to_be_bytes());
    t.extend_from_slice(&seq.to_be_bytes());
    t.extend_from_slice(&[0, 0, 0, 0, 0x50, flags, 0xFF, 0xFF, 0, 0, 0, 0]);
    t.extend(std::iter::repeat_n(0x5A, payload));
    t
}

const SYN: u8 = 0x02;
const ACK: u8 = 0x10;

/// The test capture: (interface, time in µs, record).
fn built_capture() -> Vec<(u32, u64, Vec<u8>)> {
    let a = [10, 0, 0, 1];
    let b = [10, 0, 1, 1];
    let data = |seq: u32, n: usize| ipv4(a, b, 6, 0x4000, &tcp(1000, 80, seq, ACK, n));
    let mut udp6 = vec![0x60, 0, 0, 0, 0, 12, 17, 64];
    udp6.extend_from_slice(
        &"2001:db8::1"
            .parse::<std::net::Ipv6Addr>()
            .unwrap()
            .octets(),
    );
    udp6.extend_from_slice(
        &"2001:db8::2"
            .parse::<std::net::Ipv6Addr>()
            .unwrap()
            .octets(),
    );
    udp6.extend_from_slice(&[0x14, 0xE9, 0, 53, 0, 12, 0, 0, 1, 2, 3, 4]);
    // SLL2: protocol, reserved, interface index, ARPHRD_ETHER, packet type, address length,
    // address (8).
    let mut sll2 = vec![
        0x86, 0xDD, 0, 0, 0, 0, 0, 3, 0, 1, 4, 6, 2, 0, 0, 0, 0, 9, 0, 0,
    ];
    sll2.extend_from_slice(&udp6);
    let icmp = ipv4(a, b, 1, 0, &[8, 0, 0, 0, 0, 1, 0, 1]);
    vec![
        (
            0,
            0,
            eth(
                0x0800,
                Some(100),
                &ipv4(a, b, 6, 0x4000, &tcp(1000, 80, 100, SYN, 0)),
            ),
        ),
        (
            0,
            10,
            eth(
                0x0800,
                None,
                &ipv4(b, a, 6, 0x4000, &tcp(80, 1000, 500, SYN | ACK, 0)),
            ),
        ),
        (0, 20, eth(0x0800, None, &data(101, 1000))),
        (0, 30, eth(0x0800, None, &data(1101, 1000))),
        // Frame 5: the same bytes again.
        (0, 40, eth(0x0800, None, &data(1101, 1000))),
        // Frames 6, 7: a reorder (3101 before 2101) is not a retransmission.
        (0, 50, eth(0x0800, None, &data(3101, 1000))),
        (0, 60, eth(0x0800, None, &data(2101, 1000))),
        (1, 70, sll2),
        // A fragment, ARP, and a packet from a host to itself.
        (0, 80, eth(0x0800, None, &ipv4(a, b, 17, 0x2000, &[0; 16]))),
        (0, 85, eth(0x0806, None, &[0; 28])),
        (
            0,
            88,
            eth(
                0x0800,
                None,
                &ipv4([10, 0, 0, 9], [10, 0, 0, 9], 17, 0, &[0; 12]),
            ),
        ),
        (0, 2_500_000, eth(0x0800, Some(100), &data(4101, 500))),
        (0, 90, eth(0x0800, None, &icmp)),
    ]
}

fn write_built(path: &Path) {
    use pcap_file::pcapng::blocks::enhanced_packet::EnhancedPacketBlock;
    use pcap_file::pcapng::blocks::interface_description::{
        InterfaceDescriptionBlock, InterfaceDescriptionOption,
    };
    use pcap_file::pcapng::PcapNgWriter;
    use pcap_file::DataLink;
    let mut w = PcapNgWriter::new(std::fs::File::create(path).unwrap()).unwrap();
    w.write_pcapng_block(InterfaceDescriptionBlock::new(DataLink::ETHERNET, 65535))
        .unwrap();
    let mut ns = InterfaceDescriptionBlock::new(DataLink::LINUX_SLL2, 65535);
    ns.options.push(InterfaceDescriptionOption::IfTsResol(9));
    w.write_pcapng_block(ns).unwrap();
    let base_us = 1_700_000_000_000_000u64;
    for (iface, us, rec) in built_capture() {
        // pcap-file writes the Duration's nanoseconds as the raw timestamp, in the
        // interface's units (µs for interface 0, ns for interface 1).
        let raw = if iface == 0 {
            base_us + us
        } else {
            (base_us + us) * 1000
        };
        w.write_pcapng_block(EnhancedPacketBlock {
            interface_id: iface,
            timestamp: std::time::Duration::from_nanos(raw),
            original_len: rec.len() as u32,
            data: rec.into(),
            options: vec![],
        })
        .unwrap();
    }
}

#[test]
fn a_built_capture_gives_exactly_what_it_was_built_to() {
    let path = tmp("built.pcapng");
    write_built(&path);
    let topo = tmp("built.topo");
    std::fs::write(&topo, LEAF_SPINE).unwrap();
    // 10 Mb/s links (1.25 bytes/µs), 2,500-byte threshold.
    let o = TrafficOptions {
        link_bps: 10e6,
        queue_threshold: 2500,
        ..TrafficOptions::default()
    };
    let t = convert(&path, topo.to_str().unwrap(), &o);
    let _ = std::fs::remove_file(&path);
    let _ = std::fs::remove_file(&topo);
    let tr = &t.file.traffic;
    let st = &tr.capture_stats;
    assert_eq!(st.format, "pcapng");
    assert_eq!((st.records, st.packets), (13, 10));
    assert_eq!((st.not_ip, st.fragments, st.same_host), (1, 1, 1));
    assert_eq!(
        st.reordered, 1,
        "the ICMP packet was written after a later one"
    );
    assert_eq!(st.link_types, ["ethernet", "linux-sll2"]);
    // Flows: TCP both ways, the IPv6 UDP flow, ICMP.
    let f: Vec<(&str, &str, u8, u64, u64)> = tr
        .flows
        .iter()
        .map(|f| (f.src.as_str(), f.dst.as_str(), f.proto, f.packets, f.bytes))
        .collect();
    assert_eq!(
        f,
        [
            ("10.0.0.1", "10.0.1.1", 6, 7, 40 + 5 * 1040 + 540),
            ("10.0.1.1", "10.0.0.1", 6, 1, 40),
            ("2001:db8::1", "2001:db8::2", 17, 1, 52),
            ("10.0.0.1", "10.0.1.1", 1, 1, 28),
        ]
    );
    // Paths: leaf 1 -> a spine -> leaf 2; the IPv6 hosts share leaf 2.
    assert_eq!(tr.flows[0].path.len(), 3);
    assert_eq!((tr.flows[0].path[0], tr.flows[0].path[2]), (1, 2));
    assert_eq!(tr.flows[2].path, [2]);
    // The IPv6 key folds each address to 32 bits.
    let fold = |s: &str| dta_bench::gen::digest(&s.parse::<std::net::Ipv6Addr>().unwrap().octets());
    assert_eq!(
        &tr.flows[2].key[..16],
        format!("{:08x}{:08x}", fold("2001:db8::1"), fold("2001:db8::2"))
    );
    // One retransmission (frame 5), reported by leaf 1, whose queue is the deepest.
    assert_eq!(tr.losses.len(), 1);
    let l = &tr.losses[0];
    assert_eq!((l.frame, l.seq, l.switch, l.list), (5, 1101, 1, 1));
    assert_eq!(&l.entry[26..], format!("01{:08x}", 1101));
    // The queue at leaf 1 towards the spine, by hand: 40 B at 0 µs; 1,040 B at 20 µs after
    // draining 25 (1,055); 30 µs: 1,042.5 + 1,040 = 2,082.5; 40 µs: 2,070 + 1,040 = 3,110
    // > 2,500: the one event. Downstream queues receive one packet per 832 µs and never build.
    assert_eq!(tr.congestion.len(), 1, "{:?}", tr.congestion);
    let c = &tr.congestion[0];
    assert_eq!((c.frame, c.switch, c.depth), (5, 1, 3110));
    assert_eq!(c.port, format!("switch {}", tr.flows[0].path[1]));
    // Two epochs of 1 s with traffic, 1 and 3; epoch 2 between them is empty but still
    // exported (switches export on a timer), so the merge never has to jump.
    let e: Vec<u32> = tr.epochs.iter().map(|e| e.epoch).collect();
    assert_eq!(e, [1, 2, 3]);
    assert_eq!(tr.epochs[0].flows.len(), 4);
    assert!(tr.epochs[1].flows.is_empty());
    assert_eq!(tr.epochs[2].flows, [(0, 1)]);
    let r = tr.reports;
    assert_eq!(
        (r.keywrite, r.postcards, r.loss, r.congestion, r.counters),
        (4, 7 * 3 + 3 + 1 + 3, 1, 1, 2 * (4 + 1))
    );
    // 4 switches x 3 epochs x (8 Count-Min + 1 HyperLogLog reports).
    assert_eq!(r.sketch, 4 * 3 * 9);
    let c = round_trip_and_check(&t, "built");
    assert_eq!(
        (c.losses.ok, c.congestion.ok, c.sketch_epochs.ok),
        (1, 1, 3)
    );
    assert_eq!(c.dropped, 0, "{:?}", c.drop_reasons);
}

#[test]
fn postcard_sampling_and_speed() {
    let path = capture("mptcp-v0.pcap");
    let base = convert(&path, "fat-tree:k=4", &TrafficOptions::default());
    let o = TrafficOptions {
        postcard_every: 10,
        speed: 4.0,
        ..TrafficOptions::default()
    };
    let t = convert(&path, "fat-tree:k=4", &o);
    let tr = &t.file.traffic;
    let want: u64 = tr
        .flows
        .iter()
        .map(|f| f.packets.div_ceil(10) * f.path.len() as u64)
        .sum();
    assert_eq!(tr.reports.postcards, want);
    // Four times faster: a quarter of the span, and as many epochs or fewer.
    let span = |t: &Traffic| t.times_ns.last().unwrap() - t.times_ns[0];
    let (a, b) = (span(&base) as f64, span(&t) as f64);
    assert!((b / a - 0.25).abs() < 0.05, "{a} {b}");
    assert!(tr.epochs.len() <= base.file.traffic.epochs.len());
    round_trip_and_check(&t, "sampled");
}

#[test]
fn bad_arguments_are_refused_with_a_reason() {
    let path = capture("ssh.pcap");
    let o = TrafficOptions::default();
    let sc = Scenario::default();
    let err = |topo: &str, sc: &Scenario, o: &TrafficOptions| {
        from_capture(&path, topo, sc, sketch(), o).unwrap_err()
    };
    assert!(err("fat-tree:k=5", &sc, &o).contains("even"));
    assert!(err("/no/such/topology", &sc, &o).contains("/no/such/topology"));
    let zero = Scenario {
        id_base: 0,
        ..Scenario::default()
    };
    assert!(err("fat-tree:k=4", &zero, &o).contains("reserved"));
    let dup = Scenario {
        switch_ids: vec![5, 6, 7],
        ..Scenario::default()
    };
    assert!(err("fat-tree:k=4", &dup, &o).contains("twice"));
    let reference = Scenario {
        profile: dta_proto::wire::report::ReportFormat::Reference(
            dta_proto::wire::dta::BaseVariant::B,
        ),
        ..Scenario::default()
    };
    assert!(err("fat-tree:k=4", &reference, &o).contains("extended"));
    for bad in [
        TrafficOptions { speed: 0.0, ..o },
        TrafficOptions { epoch_ns: 0, ..o },
        TrafficOptions {
            postcard_every: 0,
            ..o
        },
    ] {
        assert!(from_capture(&path, "fat-tree:k=4", &sc, sketch(), &bad).is_err());
    }
    let bad_sketch = SketchStores {
        cm_columns: 500,
        ..sketch()
    };
    assert!(from_capture(&path, "fat-tree:k=4", &sc, bad_sketch, &o)
        .unwrap_err()
        .contains("Count-Min"));
    let not = tmp("not-a-capture");
    std::fs::write(&not, b"hello, this is not a capture").unwrap();
    assert!(from_capture(&not, "fat-tree:k=4", &sc, sketch(), &o).is_err());
    let _ = std::fs::remove_file(&not);
}

#[test]
fn the_dta_binary_converts_and_replays_a_public_capture() {
    let out = tmp("cli.pcap");
    let dta = env!("CARGO_BIN_EXE_dta");
    let g = Command::new(dta)
        .args(["gen", "--traffic"])
        .arg(capture("pptp.pcap"))
        .args(["--topology", "fat-tree:k=4", "--epoch", "500ms", "--pcap"])
        .arg(&out)
        .output()
        .unwrap();
    let gerr = String::from_utf8_lossy(&g.stderr);
    assert!(g.status.success(), "{gerr}");
    assert!(
        gerr.contains("3 flows over fat-tree:k=4 (20 switches)"),
        "{gerr}"
    );
    assert!(gerr.contains("loss events 4"), "{gerr}");
    let r = Command::new(dta)
        .arg("replay")
        .arg(&out)
        .args(["--path", "memory"])
        .output()
        .unwrap();
    let rerr = String::from_utf8_lossy(&r.stderr);
    assert!(r.status.success(), "{rerr}");
    assert!(
        rerr.contains(
            "Key-Write paths 3/3, flow counters exact 3/3, postcard paths 3/3, loss events 4/4"
        ),
        "{rerr}"
    );
    // A wrong store answer fails the replay: corrupt the truth's first path.
    let side = PathBuf::from(format!("{}.json", out.display()));
    let mut v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&side).unwrap()).unwrap();
    v["traffic"]["flows"][0]["path"][0] = serde_json::json!(999);
    std::fs::write(&side, v.to_string()).unwrap();
    let bad = Command::new(dta)
        .arg("replay")
        .arg(&out)
        .args(["--path", "memory"])
        .output()
        .unwrap();
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("differ from the ground truth"));
    // Options that need --traffic are refused without it.
    let e = Command::new(dta)
        .args([
            "gen",
            "--topology",
            "fat-tree:k=4",
            "--count",
            "1",
            "--pcap",
        ])
        .arg(&out)
        .output()
        .unwrap();
    assert!(!e.status.success());
    assert!(String::from_utf8_lossy(&e.stderr).contains("--traffic"));
    let _ = std::fs::remove_file(&out);
    let _ = std::fs::remove_file(&side);
}

#[test]
fn live_sending_follows_the_capture_times() {
    let rx = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    rx.set_read_timeout(Some(std::time::Duration::from_secs(5)))
        .unwrap();
    let port = rx.local_addr().unwrap().port();
    // Small sketches, so the receiver's default socket buffer holds an epoch's burst.
    let args = [
        "--topology",
        "fat-tree:k=4",
        "--epoch",
        "100ms",
        "--speed",
        "2",
        "--cm-columns",
        "64",
        "--hll-registers",
        "16",
    ];
    let path = capture("ssh.pcap");
    let o = TrafficOptions {
        epoch_ns: 100_000_000,
        speed: 2.0,
        ..TrafficOptions::default()
    };
    let small = SketchStores {
        cm_columns: 64,
        hll_registers: 16,
        ..sketch()
    };
    let want = from_capture(&path, "fat-tree:k=4", &Scenario::default(), small, &o).unwrap();
    let span = want.times_ns.last().unwrap() - want.times_ns[0];
    let t0 = std::time::Instant::now();
    let mut child = Command::new(env!("CARGO_BIN_EXE_dta"))
        .args(["gen", "--traffic"])
        .arg(&path)
        .args(args)
        .args(["--target", &format!("127.0.0.1:{port}")])
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut got = Vec::new();
    let mut b = [0u8; 2048];
    while got.len() < want.trace.len() {
        match rx.recv(&mut b) {
            Ok(n) => got.push(b[..n].to_vec()),
            Err(e) => panic!("after {} datagrams: {e}", got.len()),
        }
    }
    let elapsed = t0.elapsed();
    assert!(child.wait().unwrap().success());
    for (i, g) in got.iter().enumerate() {
        assert_eq!(g.as_slice(), want.trace.payload(i), "datagram {i}");
    }
    // The last report left no earlier than its time after the first (the capture's pace,
    // halved).
    assert!(elapsed.as_nanos() as u64 >= span, "{elapsed:?} < {span} ns");
}
