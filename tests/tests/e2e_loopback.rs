//! End to end over real loopback sockets: translator thread → UDP → software RNIC thread.
//!
//! Collector memory is checked byte for byte against an independent model built from
//! `dta_proto`'s layout and hash definitions, Append entries are tailed in order across several
//! ring wraps while they are written, and Key-Write queries return the written values.

use std::net::{Ipv4Addr, SocketAddrV4};
use std::time::{Duration, Instant};

use dta_collector::config::{
    CollectorConfig, DeviceSection, StaticPeer, StoreConfig, StoreKindConfig,
};
use dta_collector::query::append::{ListReader, Start};
use dta_collector::query::keywrite::{KeyWriteAnswer, KeyWriteView, Vote};
use dta_collector::Collector;
use dta_proto::hash::{HashProfile, KeyHasher, MAX_REDUNDANCY};
use dta_proto::layout::{AppendFormat, AppendLayout, KeyWriteLayout};
use dta_proto::meta::StoreKind;
use dta_proto::wire::report::{Primitive, Profile, Report};
use dta_proto::{Key, Value};
use dta_tests::harness::extended_header;
use dta_tests::harness::{free_port, keywrite_store};
use dta_translator::config::{CollectorSection, TranslatorConfig};
use dta_translator::Translator;

struct System {
    collector: Collector,
    translator: Translator,
    sock: std::net::UdpSocket,
    sent: u64,
    _dir: dta_tests::scratch::ScratchDir,
}

impl System {
    fn start(stores: Vec<StoreConfig>, append_flush_us: u64) -> System {
        let dir = dta_tests::scratch::ScratchDir::new("dta-e2e");
        let meta = dir.path().join("collector.json");
        let c_ip = Ipv4Addr::new(127, 0, 0, 1);
        let t_ip = Ipv4Addr::new(127, 0, 0, 2);
        let roce_t = SocketAddrV4::new(t_ip, free_port(t_ip));
        let collector = Collector::start(CollectorConfig {
            collector: DeviceSection {
                roce: SocketAddrV4::new(c_ip, 0),
                metadata_file: Some(meta.clone()),
                hugepages: false,
                ..DeviceSection::default()
            },
            static_peers: vec![StaticPeer {
                roce: roce_t,
                workers: 1,
                qpn_base: 0x200,
                mac: "02:00:00:00:00:01".into(),
            }],
            stores,
            export: Default::default(),
            pull: None,
        })
        .expect("collector starts");
        let mut t = TranslatorConfig::default();
        t.translator.listen = SocketAddrV4::new(Ipv4Addr::LOCALHOST, 0);
        t.translator.roce = roce_t;
        t.append.flush_delay_us = append_flush_us;
        t.collectors = vec![CollectorSection::with_metadata("c", meta)];
        let translator = Translator::start(t).expect("translator starts");
        let sock = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        sock.connect(translator.report_addr).unwrap();
        System {
            collector,
            translator,
            sock,
            sent: 0,
            _dir: dir,
        }
    }

    /// Sends reports, at most a few thousand ahead of the translator.
    fn send(&mut self, reports: &[Report]) {
        let mut buf = [0u8; 128];
        for r in reports {
            while self.sent >= self.translator.counters().rx_datagrams + 2000 {
                std::thread::sleep(Duration::from_millis(1));
            }
            let n = r.emit(Profile::Extended, &mut buf).unwrap();
            self.sock.send(&buf[..n]).unwrap();
            self.sent += 1;
        }
    }

    fn settle(&self) {
        assert!(
            self.translator
                .wait_for(Duration::from_secs(10), |c| c.rx_datagrams >= self.sent),
            "translator received everything"
        );
        let frames = self.translator.counters().frames;
        assert!(
            self.collector
                .wait_for(Duration::from_secs(10), |k| k.rcvd_pkts >= frames),
            "collector executed every frame"
        );
    }
}

#[test]
fn keywrite_memory_byte_for_byte_and_queries() {
    const SLOTS: u32 = 1 << 14;
    const N: u8 = 3;
    let mut sys = System::start(vec![keywrite_store(SLOTS, 32, N)], 1000);
    let layout = KeyWriteLayout::new(SLOTS, 32).unwrap();
    let hasher = KeyHasher::new(HashProfile::Independent, SLOTS).unwrap();
    let keys = 1500u32;
    let mut model = vec![[0u8; 32]; SLOTS as usize];
    let mut reports = Vec::new();
    for i in 0..keys {
        let key = Key::new(&[
            (i >> 8) as u8,
            i as u8,
            0xAB,
            0xCD,
            0x11,
            0x22,
            0x33,
            0x44,
            0x55,
            0x66,
            0x77,
            0x88,
            6,
        ])
        .unwrap();
        let value: Vec<u8> = (0..20)
            .map(|b| (i as u8).wrapping_mul(7).wrapping_add(b))
            .collect();
        let cs = hasher.checksum(&key);
        let mut slots = [0u32; MAX_REDUNDANCY];
        hasher.slots(&key, N as usize, &mut slots);
        for &s in &slots[..N as usize] {
            layout.encode_slot(cs, &value, &mut model[s as usize]);
        }
        reports.push(Report {
            header: extended_header(0),
            primitive: Primitive::KeyWrite {
                redundancy: N,
                key,
                value: Value::new(&value).unwrap(),
            },
        });
    }
    sys.send(&reports);
    sys.settle();
    let store = sys.collector.store("kw").unwrap();
    let mut got = [0u8; 32];
    for s in 0..SLOTS {
        store.region.read(layout.slot_offset(s), &mut got).unwrap();
        assert_eq!(got, model[s as usize], "slot {s} differs from the model");
    }
    // The last 200 keys were followed by at most 600 writes into 16384 slots: all must answer.
    let view = KeyWriteView {
        region: &store.region,
        layout,
        hasher,
    };
    let mut correct = 0;
    for (i, r) in reports.iter().enumerate() {
        let Primitive::KeyWrite { key, value, .. } = r.primitive else {
            unreachable!()
        };
        match view.query(&key, N as usize, Vote::Plurality) {
            KeyWriteAnswer::Value { value: v, .. } => {
                assert_eq!(&v.as_bytes()[..20], value.as_bytes(), "never a wrong value");
                correct += 1;
            }
            other => assert!(i < 1300, "recent key {i} not answered: {other:?}"),
        }
    }
    assert!(correct as f64 >= 0.97 * keys as f64, "{correct} of {keys}");
    let k = sys.collector.counters();
    assert_eq!(
        (k.bad_icrc, k.out_of_seq_request, k.rkey_violation),
        (0, 0, 0),
        "{k:?}"
    );
    // Duplicates only from frames the translator sent again (an ACK slower than the
    // retransmission timeout on a loaded machine); the responder ignores them.
    let resent: u64 = sys
        .translator
        .snapshots()
        .iter()
        .flat_map(|s| {
            s.qps
                .iter()
                .map(|(_, _, q)| q.retransmitted_frames + q.probes)
        })
        .sum();
    assert!(
        k.duplicate_request <= resent,
        "duplicates without retransmissions: {k:?}, resent {resent}"
    );
}

#[test]
fn append_entries_in_order_across_wraps() {
    const CAP: u32 = 128;
    const BATCH: u32 = 4;
    const LISTS: u32 = 3;
    let mut sys = System::start(
        vec![StoreConfig {
            name: "ap".into(),
            port: None,
            cm_allow: None,
            kind: StoreKindConfig::new(StoreKind::Append {
                lists: LISTS,
                first_list: 10,
                capacity: CAP,
                entry_size: 8,
                batch: BATCH,
                format: AppendFormat::Sequenced,
                list_stride: 0,
            }),
        }],
        // A long flush delay: every batch is written full, so memory is deterministic.
        10_000_000,
    );
    let store = sys.collector.store("ap").unwrap();
    let StoreKind::Append { list_stride, .. } = store.meta.kind else {
        panic!()
    };
    let layout = AppendLayout::new(AppendFormat::Sequenced, CAP, 8, BATCH).unwrap();
    let region = store.region.clone();
    let mut readers: Vec<ListReader> = (0..LISTS)
        .map(|l| ListReader::new(&region, layout, l as u64 * list_stride, Start::Seq(1)))
        .collect();
    let per_list = CAP as u64 * 5 / 2; // two and a half wraps
    let mut next = vec![0u64; LISTS as usize];
    let entry = |l: u64, k: u64| -> [u8; 8] { ((l << 32) | k).to_le_bytes() };
    let t0 = Instant::now();
    for chunk in 0..(per_list / 16) {
        let reports: Vec<Report> = (0..16)
            .flat_map(|k| (0..LISTS as u64).map(move |l| (l, chunk * 16 + k)))
            .map(|(l, k)| Report {
                header: extended_header(0),
                primitive: Primitive::Append {
                    list: 10 + l as u32,
                    value: Value::new(&entry(l, k)).unwrap(),
                },
            })
            .collect();
        sys.send(&reports);
        sys.settle();
        for (l, r) in readers.iter_mut().enumerate() {
            let st = r.poll(&region, usize::MAX, |_, e| {
                assert_eq!(
                    e,
                    entry(l as u64, next[l]),
                    "list {l} entry {} out of order",
                    next[l]
                );
                next[l] += 1;
            });
            assert_eq!(st.lost_batches, 0);
        }
    }
    assert!(t0.elapsed() < Duration::from_secs(60));
    for (l, n) in next.iter().enumerate() {
        assert_eq!(*n, per_list, "list {l}: every entry recovered in order");
    }
    // Byte for byte: the final ring image of every list.
    let batches = per_list / BATCH as u64;
    assert!(
        batches > 2 * layout.batch_slots() as u64,
        "at least two wraps"
    );
    for l in 0..LISTS as u64 {
        let mut want = vec![0u8; layout.region_len() as usize];
        for s in 1..=batches {
            let j = layout.slot_for_seq(s) as usize;
            let off = layout.batch_offset(j as u32) as usize;
            for i in 0..BATCH as u64 {
                let k = (s - 1) * BATCH as u64 + i;
                want[off + 8 * i as usize..off + 8 * i as usize + 8].copy_from_slice(&entry(l, k));
            }
            let t = layout.trailer_offset(j as u32).unwrap() as usize;
            want[t..t + 8].copy_from_slice(&layout.encode_trailer(s, BATCH as u16));
        }
        let mut got = vec![0u8; want.len()];
        region.read(l * list_stride, &mut got).unwrap();
        assert_eq!(got, want, "list {l} memory image");
    }
    let c = sys.translator.counters();
    assert_eq!(c.translated, per_list * LISTS as u64);
    assert_eq!(c.append_batches, per_list * LISTS as u64 / BATCH as u64);
    assert_eq!(c.dropped(), 0);
}
