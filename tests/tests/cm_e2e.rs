//! RDMA_CM end to end over loopback sockets: the translator's initiator connects to the
//! collector's software RNIC (REQ/REP/RTU, metadata SEND parsed and ACKed), the first write lands
//! at the REQ's starting PSN, and every primitive's reports land. Then the collector restarts
//! and the translator reconnects with new QPs.

use std::net::{Ipv4Addr, SocketAddrV4};
use std::time::Duration;

use dta_collector::config::{CollectorConfig, DeviceSection, StoreConfig, StoreKindConfig};
use dta_collector::query::keywrite::{KeyWriteAnswer, KeyWriteView, Vote};
use dta_collector::Collector;
use dta_proto::hash::{HashProfile, KeyHasher, MAX_REDUNDANCY};
use dta_proto::layout::{AppendFormat, CounterLayout, KeyWriteLayout};
use dta_proto::meta::StoreKind;
use dta_proto::wire::report::{Primitive, Profile, Report};
use dta_proto::{Key, Value};
use dta_tests::harness::extended_header;
use dta_tests::harness::free_port;
use dta_translator::config::{CollectorSection, TranslatorConfig};
use dta_translator::driver::dispatch_worker;
use dta_translator::Translator;

fn stores() -> Vec<StoreConfig> {
    vec![
        StoreConfig {
            name: "kw".into(),
            port: Some(1337),
            cm_allow: None,
            kind: StoreKindConfig::new(StoreKind::KeyWrite {
                slots: 4096,
                slot_size: 16,
                hash: HashProfile::Independent,
            })
            .with_redundancy(2),
        },
        StoreConfig {
            name: "ap".into(),
            port: Some(1338),
            cm_allow: None,
            kind: StoreKindConfig::new(StoreKind::Append {
                lists: 2,
                first_list: 0,
                capacity: 256,
                entry_size: 4,
                batch: 8,
                format: AppendFormat::Sequenced,
                list_stride: 0,
            }),
        },
        StoreConfig {
            name: "ctr".into(),
            port: Some(1339),
            cm_allow: None,
            kind: StoreKindConfig::new(StoreKind::KeyIncrement {
                slots: 1024,
                hash: HashProfile::Independent,
            })
            .with_redundancy(1),
        },
    ]
}

fn collector(roce: SocketAddrV4) -> Collector {
    Collector::start(CollectorConfig {
        collector: DeviceSection {
            roce,
            hugepages: false,
            ..DeviceSection::default()
        },
        static_peers: vec![],
        stores: stores(),
        export: Default::default(),
        pull: None,
    })
    .expect("collector starts")
}

fn send(t: &Translator, sock: &std::net::UdpSocket, reports: &[Report]) {
    let before = t.counters().rx_datagrams;
    let mut buf = [0u8; 128];
    for r in reports {
        let n = r.emit(Profile::Extended, &mut buf).unwrap();
        sock.send_to(&buf[..n], t.report_addr).unwrap();
    }
    assert!(t.wait_for(Duration::from_secs(10), |c| c.rx_datagrams
        >= before + reports.len() as u64));
}

#[test]
fn rdma_cm_connects_and_every_primitive_lands_then_reconnects_after_restart() {
    let c_addr = SocketAddrV4::new(
        Ipv4Addr::new(127, 0, 0, 1),
        free_port(Ipv4Addr::new(127, 0, 0, 1)),
    );
    let col = collector(c_addr);
    let t_ip = Ipv4Addr::new(127, 0, 0, 3);
    let mut cfg = TranslatorConfig::default();
    cfg.translator.listen = SocketAddrV4::new(Ipv4Addr::LOCALHOST, 0);
    cfg.translator.roce = SocketAddrV4::new(t_ip, 0);
    cfg.reliability.ack_every = 4;
    cfg.reliability.ack_timeout_us = 50_000;
    cfg.reliability.broken_after_ms = 300;
    cfg.reliability.rto_max_us = 100_000;
    cfg.collectors = vec![CollectorSection::with_cm(
        "c",
        c_addr,
        vec![1337, 1338, 1339],
    )];
    cfg.routing.keywrite = "single:kw".into();
    cfg.routing.keyincrement = "single:ctr".into();
    let t = Translator::start(cfg).expect("translator connects over RDMA_CM");
    let t0 = std::time::Instant::now();
    while col.with_published(|p| p.cm.cm_established) < 3 && t0.elapsed() < Duration::from_secs(2) {
        std::thread::sleep(Duration::from_millis(10));
    }
    let cm = col.with_published(|p| p.cm);
    assert_eq!(cm.cm_established, 3, "{cm:?}");
    assert_eq!(cm.cm_metadata_sent, 3);

    let sock = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let kw: Vec<Report> = (0..200u32)
        .map(|i| Report {
            header: extended_header(0),
            primitive: Primitive::KeyWrite {
                redundancy: 2,
                key: Key::new(&i.to_be_bytes()).unwrap(),
                value: Value::new(&[i as u8; 12]).unwrap(),
            },
        })
        .collect();
    let ap: Vec<Report> = (0..64u32)
        .map(|i| Report {
            header: extended_header(0),
            primitive: Primitive::Append {
                list: i % 2,
                value: Value::new(&i.to_le_bytes()).unwrap(),
            },
        })
        .collect();
    let ctr: Vec<Report> = (0..300u32)
        .map(|i| Report {
            header: extended_header(0),
            primitive: Primitive::KeyIncrement {
                redundancy: 1,
                key: Key::new(&(i % 3).to_be_bytes()).unwrap(),
                delta: 10,
            },
        })
        .collect();
    send(&t, &sock, &kw);
    send(&t, &sock, &ap);
    send(&t, &sock, &ctr);
    // The stores' N came with their metadata over RDMA_CM (record version 2): reports that
    // ask for another N are dropped and counted, not written where no query looks.
    let wrong_n: Vec<Report> = (0..5u32)
        .map(|i| Report {
            header: extended_header(0),
            primitive: Primitive::KeyIncrement {
                redundancy: 2,
                key: Key::new(&i.to_be_bytes()).unwrap(),
                delta: 1,
            },
        })
        .collect();
    send(&t, &sock, &wrong_n);
    let t0 = std::time::Instant::now();
    while t.counters().drop_redundancy_mismatch < 5 && t0.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(
        t.counters().drop_redundancy_mismatch,
        5,
        "{:?}",
        t.counters()
    );
    let frames_needed = 200 * 2 + 64 / 8 + 300;
    assert!(
        col.wait_for(Duration::from_secs(10), |k| k.writes + k.atomics
            >= frames_needed),
        "{:?}",
        col.counters()
    );
    let k = col.counters();
    assert_eq!(
        k.out_of_seq_request, 0,
        "the first write carried the PSN the responder expects: {k:?}"
    );
    assert_eq!(k.bad_icrc + k.rkey_violation, 0, "{k:?}");
    // A duplicate only ever comes from a frame the translator sent again: on a loaded machine
    // an ACK can take longer than the retransmission timeout, and the frames resent then are
    // duplicates the responder ignores (never executes twice). Snapshots lag the counters by a
    // publish interval.
    let resent = || -> u64 {
        t.snapshots()
            .iter()
            .flat_map(|s| {
                s.qps
                    .iter()
                    .map(|(_, _, q)| q.retransmitted_frames + q.probes)
            })
            .sum()
    };
    let t0 = std::time::Instant::now();
    while resent() < k.duplicate_request && t0.elapsed() < Duration::from_secs(2) {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(
        k.duplicate_request <= resent(),
        "duplicates without retransmissions: {k:?}, resent {}",
        resent()
    );

    // Memory holds what was sent.
    let s = col.store("kw").unwrap();
    let view = KeyWriteView {
        region: &s.region,
        layout: KeyWriteLayout::new(4096, 16).unwrap(),
        hasher: KeyHasher::new(HashProfile::Independent, 4096).unwrap(),
    };
    for i in 190..200u32 {
        match view.query(&Key::new(&i.to_be_bytes()).unwrap(), 2, Vote::Plurality) {
            KeyWriteAnswer::Value { value, .. } => assert_eq!(value.as_bytes(), &[i as u8; 12]),
            other => panic!("key {i}: {other:?}"),
        }
    }
    let s = col.store("ctr").unwrap();
    let h = KeyHasher::new(HashProfile::Independent, 1024).unwrap();
    let l = CounterLayout::new(1024).unwrap();
    for key in 0..3u32 {
        let mut slots = [0u32; MAX_REDUNDANCY];
        h.slots(&Key::new(&key.to_be_bytes()).unwrap(), 1, &mut slots);
        assert_eq!(
            s.region.load_u64(l.slot_offset(slots[0])).unwrap(),
            1000,
            "counter of key {key}"
        );
    }

    // Restart the collector on the same address: the translator notices (no ACKs), reconnects
    // with new QPs, and new writes land in the new collector's memory.
    drop(col);
    let col = collector(c_addr);
    let more: Vec<Report> = (1000..1400u32)
        .map(|i| Report {
            header: extended_header(0),
            primitive: Primitive::KeyWrite {
                redundancy: 2,
                key: Key::new(&i.to_be_bytes()).unwrap(),
                value: Value::new(&[7; 12]).unwrap(),
            },
        })
        .collect();
    let mut reconnected = false;
    for round in 0..60 {
        send(&t, &sock, &more[(round % 4) * 100..(round % 4) * 100 + 100]);
        std::thread::sleep(Duration::from_millis(100));
        if col.with_published(|p| p.cm.cm_established) >= 1 && col.counters().writes > 0 {
            reconnected = true;
            break;
        }
    }
    assert!(
        reconnected,
        "translator reconnected: collector {:?}, translator {:?}",
        col.with_published(|p| p.cm),
        t.counters()
    );
    let k = col.counters();
    assert_eq!(
        k.out_of_seq_request + k.bad_icrc,
        0,
        "new QPs start in sequence: {k:?}"
    );
    t.shutdown();
}

#[test]
fn two_workers_share_lists_through_handoffs_without_loss_or_reordering() {
    use dta_collector::query::append::{ListReader, Start};
    use dta_proto::layout::AppendLayout;
    let c_addr = SocketAddrV4::new(
        Ipv4Addr::new(127, 0, 0, 1),
        free_port(Ipv4Addr::new(127, 0, 0, 1)),
    );
    let col = Collector::start(CollectorConfig {
        collector: DeviceSection {
            roce: c_addr,
            hugepages: false,
            ..DeviceSection::default()
        },
        static_peers: vec![],
        stores: vec![StoreConfig {
            name: "ap".into(),
            port: Some(1400),
            cm_allow: None,
            kind: StoreKindConfig::new(StoreKind::Append {
                lists: 4,
                first_list: 0,
                capacity: 4096,
                entry_size: 8,
                batch: 4,
                format: AppendFormat::Sequenced,
                list_stride: 0,
            }),
        }],
        export: Default::default(),
        pull: None,
    })
    .unwrap();
    let mut cfg = TranslatorConfig::default();
    cfg.translator.workers = 2;
    cfg.translator.listen = SocketAddrV4::new(Ipv4Addr::LOCALHOST, 0);
    cfg.translator.roce = SocketAddrV4::new(Ipv4Addr::new(127, 0, 0, 4), 0);
    cfg.append.flush_delay_us = 2000;
    cfg.collectors = vec![CollectorSection::with_cm("c", c_addr, vec![1400])];
    let t = Translator::start(cfg).expect("two workers connect");
    // Eight reporters, each sending numbered entries to every list: four whose source the
    // dispatcher hashes to each worker (`report_steering = "auto"` dispatches for two), so
    // both workers receive reports whatever ports the kernel hands out (eight random ports
    // all hashing to one worker failed this test about once in 128 runs).
    assert!(cfg_dispatches_two_workers());
    let mut reporters: Vec<std::net::UdpSocket> = Vec::new();
    let mut per_worker = [0usize; 2];
    while reporters.len() < 8 {
        let s = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let std::net::SocketAddr::V4(a) = s.local_addr().unwrap() else {
            unreachable!("bound to an IPv4 address")
        };
        let w = dispatch_worker(a, 2);
        if per_worker[w] < 4 {
            per_worker[w] += 1;
            reporters.push(s);
        }
    }
    let per = 200u64;
    let mut buf = [0u8; 64];
    for k in 0..per {
        for (r, s) in reporters.iter().enumerate() {
            for list in 0..4u32 {
                let v = ((r as u64) << 32) | k;
                let rep = Report {
                    header: extended_header(0),
                    primitive: Primitive::Append {
                        list,
                        value: Value::new(&v.to_le_bytes()).unwrap(),
                    },
                };
                let n = rep.emit(Profile::Extended, &mut buf).unwrap();
                s.send_to(&buf[..n], t.report_addr).unwrap();
            }
        }
        if k % 20 == 19 {
            std::thread::sleep(Duration::from_millis(5));
        }
    }
    let total = per * 8 * 4;
    assert!(
        t.wait_for(Duration::from_secs(10), |c| c.rx_datagrams >= total),
        "{:?}",
        t.counters()
    );
    let snaps = t.shutdown();
    let c = dta_translator::driver::WorkerSnapshot::total(&snaps);
    assert_eq!(c.rx_datagrams, total);
    assert_eq!(
        c.translated + c.dropped(),
        total,
        "every report accounted for: {c:?}"
    );
    assert_eq!(c.dropped(), 0, "{c:?}");
    assert!(
        c.handoffs_out > 0,
        "some lists are owned by the other worker"
    );
    assert!(
        snaps.iter().all(|s| s.counters.rx_datagrams > 0),
        "both workers received reports"
    );
    std::thread::sleep(Duration::from_millis(300));
    let s = col.store("ap").unwrap();
    let StoreKind::Append { list_stride, .. } = s.meta.kind else {
        panic!()
    };
    let layout = AppendLayout::new(AppendFormat::Sequenced, 4096, 8, 4).unwrap();
    // Frames the collector did not receive (a loopback socket buffer overflowing on a loaded
    // machine) are retransmitted from the QP's ring; only frames that left the ring before the
    // collector asked for them (a window overrun) are lost, and those are counted. Everything
    // that landed is in order.
    let skipped: u64 = snaps
        .iter()
        .flat_map(|s| s.qps.iter().map(|(_, _, q)| q.psn_skipped))
        .sum();
    let overruns: u64 = snaps
        .iter()
        .flat_map(|s| s.qps.iter().map(|(_, _, q)| q.retx_overruns))
        .sum();
    let mut missing = 0u64;
    for list in 0..4u64 {
        let mut r = ListReader::new(&s.region, layout, list * list_stride, Start::Seq(1));
        let mut next = [0u64; 8];
        r.poll(&s.region, usize::MAX, |_, e| {
            let v = u64::from_le_bytes(e.try_into().unwrap());
            let (rep, k) = ((v >> 32) as usize, v & 0xffff_ffff);
            assert!(
                k >= next[rep],
                "list {list}, reporter {rep}: entry {k} after {}: out of order",
                next[rep]
            );
            missing += k - next[rep];
            next[rep] = k + 1;
        });
        missing += next.iter().map(|&n| per - n).sum::<u64>();
    }
    assert!(
        missing <= skipped * 4,
        "{missing} entries missing, but only {skipped} batch writes were lost in transit"
    );
    assert!(
        missing == 0 || overruns > 0,
        "{missing} entries missing without a window overrun: no hole may stay"
    );
}

fn http_get(addr: SocketAddrV4, path: &str) -> String {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    // The collector answers only Host headers naming an address, localhost or its
    // control_hostnames (DNS rebinding).
    write!(s, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    out
}

#[test]
fn control_only_mode_and_metrics_endpoint() {
    let c_addr = SocketAddrV4::new(
        Ipv4Addr::new(127, 0, 0, 1),
        free_port(Ipv4Addr::new(127, 0, 0, 1)),
    );
    let col = collector(c_addr);
    let mut cfg = TranslatorConfig::default();
    cfg.translator.listen = SocketAddrV4::new(Ipv4Addr::LOCALHOST, 0);
    cfg.translator.roce = SocketAddrV4::new(Ipv4Addr::new(127, 0, 0, 5), 0);
    cfg.collectors = vec![CollectorSection::with_cm(
        "c",
        c_addr,
        vec![1337, 1338, 1339],
    )];
    // Control-only: connections on behalf of a Tofino, as JSON.
    let v = dta_translator::driver::control_only(&cfg).expect("control-only connects");
    let arr = v.as_array().unwrap();
    assert_eq!(arr.len(), 3);
    let kw = arr.iter().find(|s| s["store"] == "kw").unwrap();
    let meta = col.store("kw").unwrap().meta.clone();
    assert_eq!(kw["rkey"], meta.rkey, "the record carries the R_Key");
    assert_eq!(kw["addr"], meta.addr);
    assert_eq!(kw["kind"], "keywrite");
    assert_eq!(kw["redundancy"], 2, "the record carries the store's N");
    assert!(kw["remote_qpn"].as_u64().unwrap() > 0 && kw["psn"].as_u64().is_some());
    // A full translator with a metrics endpoint.
    cfg.translator.metrics = Some(SocketAddrV4::new(Ipv4Addr::LOCALHOST, 0));
    let t = Translator::start(cfg).unwrap();
    let sock = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    send(
        &t,
        &sock,
        &[Report {
            header: extended_header(0),
            primitive: Primitive::KeyWrite {
                redundancy: 2,
                key: Key::new(b"m").unwrap(),
                value: Value::new(b"v").unwrap(),
            },
        }],
    );
    std::thread::sleep(Duration::from_millis(100));
    let addr = t.metrics.as_ref().unwrap().addr;
    let body = http_get(addr, "/metrics");
    assert!(
        body.starts_with("HTTP/1.") && body.contains("200"),
        "{body}"
    );
    assert!(body.contains("# TYPE dta_translator_translated_total counter"));
    assert!(
        body.contains("dta_translator_translated_total{worker=\"0\"} 1"),
        "{body}"
    );
    assert!(body.contains("dta_translator_qp_frames_total{worker=\"0\",store=\"kw\""));
    let stats = http_get(addr, "/stats");
    assert!(stats.contains("\"translated\":1"), "{stats}");
    t.shutdown();
}

/// A restarted translator (a new process: a new CA GUID in its REQs) reconnects from the same
/// RoCEv2 address with new QPs, and the collector drops the old process's QPs (that one never
/// sent a DREQ: it crashed, or left its QPs to a Tofino), while QPs of
/// sibling workers of one process (same GUID) are kept (`tests/multicore.rs`).
#[test]
fn translator_restart_replaces_the_old_qps() {
    let c_addr = SocketAddrV4::new(
        Ipv4Addr::new(127, 0, 0, 1),
        free_port(Ipv4Addr::new(127, 0, 0, 1)),
    );
    let col = collector(c_addr);
    let t_ip = Ipv4Addr::new(127, 0, 0, 4);
    let mut cfg = TranslatorConfig::default();
    cfg.translator.listen = SocketAddrV4::new(Ipv4Addr::LOCALHOST, 0);
    cfg.translator.roce = SocketAddrV4::new(t_ip, free_port(t_ip));
    cfg.collectors = vec![CollectorSection::with_cm(
        "c",
        c_addr,
        vec![1337, 1338, 1339],
    )];
    cfg.routing.keywrite = "single:kw".into();
    cfg.routing.keyincrement = "single:ctr".into();
    let established = |n: u64| {
        let t0 = std::time::Instant::now();
        while col.with_published(|p| p.cm.cm_established) < n
            && t0.elapsed() < Duration::from_secs(3)
        {
            std::thread::sleep(Duration::from_millis(10));
        }
        col.with_published(|p| p.cm)
    };
    // A process that connected and vanished without a DREQ (control-only mode leaves its
    // QPs to a Tofino; a crashed translator leaves them too).
    dta_translator::driver::control_only(&cfg).expect("first process connects");
    let cm = established(3);
    assert_eq!((cm.cm_established, cm.cm_replaced), (3, 0), "{cm:?}");
    let t = Translator::start(cfg).expect("restarted translator connects");
    let cm = established(6);
    assert_eq!(cm.cm_established, 6, "{cm:?}");
    assert_eq!(
        cm.cm_replaced, 3,
        "the old process's QPs are dropped: {cm:?}"
    );
    assert_eq!(col.with_published(|p| p.connections.len()), 3);
    t.shutdown();
}

/// A translator that stops sends a DREQ for each of its connections and waits for the DREPs:
/// the collector destroys the QPs, and their per-QP metric series go with them. Before, the
/// translator never disconnected and the collector kept every dead QP (`cm_dreq_total 0`).
#[test]
fn a_stopping_translator_disconnects_and_the_collector_forgets_its_qps() {
    let c_addr = SocketAddrV4::new(
        Ipv4Addr::new(127, 0, 0, 1),
        free_port(Ipv4Addr::new(127, 0, 0, 1)),
    );
    let col = Collector::start(CollectorConfig {
        collector: DeviceSection {
            roce: c_addr,
            hugepages: false,
            control: Some(SocketAddrV4::new(Ipv4Addr::LOCALHOST, 0)),
            ..DeviceSection::default()
        },
        static_peers: vec![],
        stores: stores(),
        export: Default::default(),
        pull: None,
    })
    .expect("collector starts");
    let t_ip = Ipv4Addr::new(127, 0, 0, 5);
    let mut cfg = TranslatorConfig::default();
    cfg.translator.listen = SocketAddrV4::new(Ipv4Addr::LOCALHOST, 0);
    cfg.translator.roce = SocketAddrV4::new(t_ip, free_port(t_ip));
    cfg.collectors = vec![CollectorSection::with_cm(
        "c",
        c_addr,
        vec![1337, 1338, 1339],
    )];
    cfg.routing.keywrite = "single:kw".into();
    cfg.routing.keyincrement = "single:ctr".into();
    let cfg_roce = cfg.translator.roce;
    let t = Translator::start(cfg).expect("translator connects");
    let sock = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let reports: Vec<Report> = (0..50u32)
        .map(|i| Report {
            header: extended_header(0),
            primitive: Primitive::KeyWrite {
                redundancy: 2,
                key: Key::new(&i.to_be_bytes()).unwrap(),
                value: Value::new(&[7; 12]).unwrap(),
            },
        })
        .collect();
    send(&t, &sock, &reports);
    let metrics = || http_get(col.control_addr().expect("control API"), "/metrics");
    let series = |body: &str| body.lines().filter(|l| l.contains("qpn=\"")).count();
    let wait = |pred: &dyn Fn() -> bool| {
        let t0 = std::time::Instant::now();
        while !pred() && t0.elapsed() < Duration::from_secs(3) {
            std::thread::sleep(Duration::from_millis(20));
        }
    };
    wait(&|| series(&metrics()) > 0);
    assert!(series(&metrics()) > 0, "per-QP series while connected");
    // Per-QP series name their store and the translator's RoCEv2 address.
    let body = metrics();
    let peer = cfg_roce.to_string();
    for store in ["kw", "ctr"] {
        let want =
            format!("dta_collector_qp_rx_packets_total{{store=\"{store}\",peer=\"{peer}\",qpn=\"");
        assert!(body.contains(&want), "{want} in\n{body}");
    }
    assert_eq!(col.with_published(|p| p.connections.len()), 3);

    let snaps = t.shutdown();
    let dreq_sent: u64 = snaps.iter().map(|s| s.cm.cm_dreq_sent).sum();
    let drep: u64 = snaps.iter().map(|s| s.cm.cm_drep).sum();
    assert_eq!(
        drep, 3,
        "every connection confirmed closed ({dreq_sent} DREQs sent)"
    );
    wait(&|| col.with_published(|p| p.connections.is_empty() && p.per_qp.is_empty()));
    let (cm, conns, qps) = col.with_published(|p| (p.cm, p.connections.len(), p.per_qp.len()));
    assert_eq!(cm.cm_dreq, 3, "{cm:?}");
    assert_eq!((conns, qps), (0, 0), "the collector keeps no dead QP");
    let body = metrics();
    assert_eq!(series(&body), 0, "no series of a dead QP");
    assert!(
        body.contains("cm_dreq_total 3"),
        "cm_dreq_total in /metrics"
    );
    assert!(body.contains("cm_connections 0"));
}

/// The attack: a second translator at 127.0.0.2, in no configuration, connects to a
/// collector whose RDMA_CM allowlist names only 127.0.0.1. Its REQs are answered with a REJ
/// (reason 28, consumer reject), counted in `cm_rejected`, and it never learns a store's
/// address or R_Key; the allowed translator beside it connects and writes.
#[test]
fn a_translator_outside_the_allowlist_is_rejected_and_counted() {
    let c_addr = SocketAddrV4::new(
        Ipv4Addr::new(127, 0, 0, 1),
        free_port(Ipv4Addr::new(127, 0, 0, 1)),
    );
    let col = Collector::start(CollectorConfig {
        collector: DeviceSection {
            roce: c_addr,
            hugepages: false,
            control: Some(SocketAddrV4::new(Ipv4Addr::LOCALHOST, 0)),
            cm_allow: Some(vec!["127.0.0.1/32".parse().unwrap()]),
            ..DeviceSection::default()
        },
        static_peers: vec![],
        stores: stores(),
        export: Default::default(),
        pull: None,
    })
    .expect("collector starts");
    let translator = |ip: Ipv4Addr| {
        let mut cfg = TranslatorConfig::default();
        cfg.translator.listen = SocketAddrV4::new(Ipv4Addr::LOCALHOST, 0);
        cfg.translator.roce = SocketAddrV4::new(ip, 0);
        let mut c = CollectorSection::with_cm("c", c_addr, vec![1337]);
        c.connect_timeout_secs = 1;
        cfg.collectors = vec![c];
        cfg.routing.keywrite = "single:kw".into();
        cfg.routing.keyincrement = "none".into();
        cfg.routing.postcard = "none".into();
        cfg
    };
    let e = Translator::start(translator(Ipv4Addr::new(127, 0, 0, 2)))
        .err()
        .expect("the stranger cannot connect");
    assert!(e.contains("rejected, reason 28"), "{e}");
    std::thread::sleep(Duration::from_millis(100));
    let cm = col.with_published(|p| p.cm);
    assert!(cm.cm_rejected >= 1, "{cm:?}");
    eprintln!("the stranger's REQs in 1 s: {}, all refused", cm.cm_req);
    assert_eq!(
        cm.cm_rejected, cm.cm_req,
        "every REQ of the stranger refused: {cm:?}"
    );
    assert_eq!((cm.cm_established, cm.cm_metadata_sent), (0, 0), "{cm:?}");
    assert!(col.with_published(|p| p.connections.is_empty()));
    // The counter is on /metrics.
    let m =
        dta_collector::client::request(&col.control_addr().unwrap().to_string(), "GET", "/metrics")
            .unwrap()
            .body;
    let line = m
        .lines()
        .find(|l| l.starts_with("dta_collector_cm_rejected_total "))
        .unwrap_or_else(|| panic!("no cm_rejected_total in\n{m}"));
    assert_eq!(
        line,
        format!("dta_collector_cm_rejected_total {}", cm.cm_rejected)
    );
    // The allowed translator is served.
    let t = Translator::start(translator(Ipv4Addr::LOCALHOST)).expect("127.0.0.1 connects");
    let sock = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    send(
        &t,
        &sock,
        &[Report {
            header: extended_header(0),
            primitive: Primitive::KeyWrite {
                // The store's N (`stores()`): a report with another N is dropped as
                // redundancy_mismatch.
                redundancy: 2,
                key: Key::new(b"ok").unwrap(),
                value: Value::new(b"v").unwrap(),
            },
        }],
    );
    assert!(col.wait_for(Duration::from_secs(5), |k| k.writes >= 1));
    let cm2 = col.with_published(|p| p.cm);
    assert_eq!(cm2.cm_rejected, cm.cm_rejected);
    assert_eq!(cm2.cm_established, 1);
    t.shutdown();
}

/// The translator's default report steering feeds two workers through the dispatcher (whose
/// hash the two-worker test picks its reporters by).
fn cfg_dispatches_two_workers() -> bool {
    TranslatorConfig::default()
        .translator
        .report_steering
        .dispatches(2)
}
