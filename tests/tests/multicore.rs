//! Two workers over kernel UDP on loopback, for each way of sharing sockets between them:
//! reports by `SO_REUSEPORT` or by the dispatcher; RoCEv2 answers on a port per worker or on one
//! shared port steered by QPN with the BPF program. In every combination the workers connect
//! over RDMA_CM, every report is translated exactly once, Append lists (handed between workers)
//! land in order per reporter, and every ACK reaches the worker that owns its QP.

use std::net::{Ipv4Addr, SocketAddrV4};
use std::time::Duration;

use dta_collector::config::{CollectorConfig, DeviceSection, StoreConfig, StoreKindConfig};
use dta_collector::query::append::{ListReader, Start};
use dta_collector::Collector;
use dta_proto::layout::{AppendFormat, AppendLayout};
use dta_proto::meta::StoreKind;
use dta_proto::wire::report::{Primitive, Profile, Report};
use dta_proto::Value;
use dta_tests::harness::extended_header;
use dta_tests::harness::free_port;
use dta_translator::config::{CollectorSection, ReportSteering, RoceSteering, TranslatorConfig};
use dta_translator::Translator;

fn two_workers(report: ReportSteering, roce: RoceSteering, translator_ip: Ipv4Addr) {
    let lo = Ipv4Addr::LOCALHOST;
    let c_addr = SocketAddrV4::new(lo, free_port(lo));
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
    cfg.translator.listen = SocketAddrV4::new(lo, 0);
    // Port 0: with QPN steering both workers share the first one's ephemeral port.
    cfg.translator.roce = SocketAddrV4::new(translator_ip, 0);
    cfg.translator.report_steering = report;
    cfg.translator.roce_steering = roce;
    cfg.append.flush_delay_us = 2000;
    // An ACK for every 4th frame: many answers, each of which must reach its QP's owner.
    cfg.reliability.ack_every = 4;
    cfg.collectors = vec![CollectorSection::with_cm("c", c_addr, vec![1400])];
    let t = Translator::start(cfg).expect("two workers connect over RDMA_CM");
    // 32 reporters on ephemeral ports, so that "both workers received reports" holds whatever
    // hash spreads them (8 failed about once in six runs). With the dispatcher its hash is
    // known: reporters are added until each worker has some.
    let mut reporters: Vec<std::net::UdpSocket> = (0..32)
        .map(|_| std::net::UdpSocket::bind("127.0.0.1:0").unwrap())
        .collect();
    let served = |rs: &[std::net::UdpSocket], w: usize| {
        rs.iter().any(|s| {
            let std::net::SocketAddr::V4(a) = s.local_addr().unwrap() else {
                unreachable!("bound to IPv4")
            };
            dta_translator::driver::dispatch_worker(a, 2) == w
        })
    };
    if report == ReportSteering::Dispatcher {
        while !(served(&reporters, 0) && served(&reporters, 1)) {
            reporters.remove(0);
            reporters.push(std::net::UdpSocket::bind("127.0.0.1:0").unwrap());
        }
    }
    let per = 50u64;
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
    // On the shared port: frames too short for a BTH go to worker 0, and a BTH-sized frame to
    // an odd (worker 1) QPN nobody owns goes to worker 1; each counts it as invalid and drops it.
    let shared = roce == RoceSteering::Qpn;
    if shared {
        let junk = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        for len in 1..12 {
            junk.send_to(&[0xAAu8; 11][..len], t.roce_addr).unwrap();
        }
        let mut bth = [0u8; 12];
        bth[0] = 0x11;
        bth[5..8].copy_from_slice(&[0, 0x03, 0xFF]);
        junk.send_to(&bth, t.roce_addr).unwrap();
    }
    let total = per * reporters.len() as u64 * 4;
    assert!(
        t.wait_for(Duration::from_secs(10), |c| c.rx_datagrams >= total),
        "{:?}",
        t.counters()
    );
    std::thread::sleep(Duration::from_millis(100));
    let snaps = t.shutdown();
    let c = dta_translator::driver::WorkerSnapshot::total(&snaps);
    let what = format!("{report:?}/{roce:?}");
    assert_eq!(c.rx_datagrams, total, "{what}");
    assert_eq!(c.translated + c.dropped(), total, "{what}: {c:?}");
    assert_eq!(c.dropped(), 0, "{what}: {c:?}");
    assert!(
        snaps.iter().all(|s| s.counters.rx_datagrams > 0),
        "{what}: both workers received reports"
    );
    assert!(
        c.handoffs_out > 0,
        "{what}: lists owned by the other worker"
    );
    // Every answer reached the worker owning its QP: none was unknown to the receiver, and
    // every worker's QP saw ACKs and lost nothing (a probe after a slow ACK is allowed: the
    // retransmission timeout adapts to the measured round trip, which a loaded machine
    // sometimes exceeds).
    let invalid: Vec<u64> = snaps.iter().map(|s| s.counters.roce_rx_invalid).collect();
    let expect = if shared { vec![11, 1] } else { vec![0, 0] };
    assert_eq!(invalid, expect, "{what}: {c:?}");
    for (w, s) in snaps.iter().enumerate() {
        assert!(!s.qps.is_empty());
        for (name, qpn, st) in &s.qps {
            assert!(st.acks > 0, "{what}: worker {w} store {name}: {st:?}");
            // A worker descheduled for longer than the answer's timeout may resend its oldest
            // frame once after the probes (the responder drops it as a duplicate); nothing
            // more, and no sequence error.
            assert!(
                st.retransmitted_frames <= 2 && (st.psn_skipped, st.nak_seq) == (0, 0),
                "{what}: worker {w} store {name}: {st:?}"
            );
            assert_eq!(
                *qpn as usize % 2,
                w,
                "{what}: QPN {qpn:#x} encodes worker {w}"
            );
        }
    }
    std::thread::sleep(Duration::from_millis(300));
    let s = col.store("ap").unwrap();
    let StoreKind::Append { list_stride, .. } = s.meta.kind else {
        panic!()
    };
    let layout = AppendLayout::new(AppendFormat::Sequenced, 4096, 8, 4).unwrap();
    for list in 0..4u64 {
        let mut r = ListReader::new(&s.region, layout, list * list_stride, Start::Seq(1));
        let mut next = vec![0u64; reporters.len()];
        r.poll(&s.region, usize::MAX, |_, e| {
            let v = u64::from_le_bytes(e.try_into().unwrap());
            let (rep, k) = ((v >> 32) as usize, v & 0xffff_ffff);
            assert_eq!(
                k, next[rep],
                "{what}: list {list}, reporter {rep}: in order"
            );
            next[rep] += 1;
        });
        assert!(
            next.iter().all(|&n| n == per),
            "{what}: list {list}: {next:?}"
        );
    }
}

#[test]
fn reuseport_reports_and_qpn_steered_answers_on_one_port() {
    two_workers(
        ReportSteering::Reuseport,
        RoceSteering::Qpn,
        Ipv4Addr::new(127, 0, 0, 6),
    );
}

#[test]
fn dispatcher_reports_and_qpn_steered_answers_on_one_port() {
    two_workers(
        ReportSteering::Dispatcher,
        RoceSteering::Qpn,
        Ipv4Addr::new(127, 0, 0, 7),
    );
}

#[test]
fn dispatcher_reports_and_a_roce_port_per_worker() {
    two_workers(
        ReportSteering::Dispatcher,
        RoceSteering::PortPerWorker,
        Ipv4Addr::new(127, 0, 0, 8),
    );
}
