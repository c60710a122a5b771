//! Issue 18, DART mode: reporters that write RDMA themselves (one QP each, connected through
//! our RDMA_CM initiator) produce the same Key-Write query results as the translator path for
//! the same reports, in the same store layout, over loopback into one software-RNIC collector.

use std::net::{Ipv4Addr, SocketAddrV4};
use std::time::{Duration, Instant};

use dta_bench::dart::{DartFleet, DartOptions};
use dta_collector::config::{CollectorConfig, DeviceSection, StoreConfig, StoreKindConfig};
use dta_collector::query::keywrite::Vote;
use dta_collector::Collector;
use dta_proto::hash::HashProfile;
use dta_proto::meta::StoreKind;
use dta_proto::wire::report::{Primitive, Profile, Report};
use dta_proto::{Key, Value};
use dta_tests::harness::extended_header;
use dta_tests::harness::free_port;
use dta_translator::config::{CollectorSection, TranslatorConfig};
use dta_translator::Translator;

const SLOTS: u32 = 1 << 16;
const N: u8 = 2;
const KEYS: u32 = 12_000;
const REPORTERS: u32 = 48;
const DART_PORT: u16 = 1450;
const DTA_PORT: u16 = 1451;

fn kw_store(name: &str, port: u16) -> StoreConfig {
    StoreConfig {
        name: name.into(),
        port: Some(port),
        cm_allow: None,
        kind: StoreKindConfig::new(StoreKind::KeyWrite {
            slots: SLOTS,
            slot_size: 32,
            hash: HashProfile::Independent,
        })
        .with_redundancy(N),
    }
}

/// Report i: a 5-tuple key (some repeated, so later values overwrite earlier ones) and a
/// 20-byte value.
fn report(i: u32) -> Report {
    let flow = if i % 7 == 3 { i / 2 } else { i };
    let [a, b, c, d] = flow.to_be_bytes();
    let key = Key::new(&[10, a, b, c, 10, 9, 8, d, 17, 0x30, 0x39, 0x12, 0xB5]).unwrap();
    let value: Vec<u8> = (0..20).map(|k| (i as u8).wrapping_add(k * 13)).collect();
    Report {
        header: extended_header(0),
        primitive: Primitive::KeyWrite {
            redundancy: N,
            key,
            value: Value::new(&value).unwrap(),
        },
    }
}

#[test]
fn dart_reporters_and_the_translator_give_the_same_keywrite_answers() {
    let c_ip = Ipv4Addr::new(127, 0, 0, 1);
    let c_addr = SocketAddrV4::new(c_ip, free_port(c_ip));
    let collector = Collector::start(CollectorConfig {
        collector: DeviceSection {
            roce: c_addr,
            hugepages: false,
            ..DeviceSection::default()
        },
        static_peers: vec![],
        stores: vec![kw_store("dart", DART_PORT), kw_store("dta", DTA_PORT)],
        export: Default::default(),
        pull: None,
    })
    .expect("collector starts");

    // DART: every reporter its own QP.
    let o = DartOptions::new(c_addr, DART_PORT, REPORTERS);
    let mut fleet = DartFleet::connect(&o).expect("every reporter connects over RDMA_CM");
    assert_eq!(fleet.len(), REPORTERS as usize);
    assert_eq!(
        fleet.addresses().len(),
        2,
        "32 reporters per source address"
    );
    // The collector publishes its state every 50 ms.
    let t0 = Instant::now();
    let qps = || {
        collector.with_published(|p| {
            p.connections
                .iter()
                .filter(|c| c.0 == DART_PORT && c.3)
                .count()
        })
    };
    while qps() < REPORTERS as usize && t0.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(qps(), REPORTERS as usize, "one QP per DART reporter");
    let reports: Vec<Report> = (0..KEYS).map(report).collect();
    for (i, r) in reports.iter().enumerate() {
        // The switch that saw the flow writes it.
        fleet.write(i % REPORTERS as usize, r, Duration::from_secs(5));
        // Out at once, so the collector executes the reporters' writes in report order (as
        // the translator's): colliding keys then resolve alike and the stores match byte for
        // byte. (Reporters on several addresses otherwise interleave by batch.)
        fleet.flush();
        if i % 64 == 63 {
            fleet.poll(Duration::ZERO);
        }
    }
    assert!(
        fleet.drain(Duration::from_secs(20)),
        "every DART frame confirmed"
    );
    let c = fleet.counters();
    assert_eq!((c.translated, c.dropped()), (KEYS as u64, 0), "{c:?}");
    assert_eq!(fleet.foreign_responses, 0);

    // The same reports through one translator (one QP).
    let mut t = TranslatorConfig::default();
    t.translator.listen = SocketAddrV4::new(Ipv4Addr::LOCALHOST, 0);
    t.translator.roce = SocketAddrV4::new(Ipv4Addr::new(127, 0, 0, 8), 0);
    t.collectors = vec![CollectorSection::with_cm("c", c_addr, vec![DTA_PORT])];
    let translator = Translator::start(t).expect("translator connects");
    let sock = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let mut buf = [0u8; 128];
    for (i, r) in reports.iter().enumerate() {
        let len = r.emit(Profile::Extended, &mut buf).unwrap();
        sock.send_to(&buf[..len], translator.report_addr).unwrap();
        if i % 256 == 255 {
            // Stay within the socket buffer.
            let t0 = Instant::now();
            while translator.counters().rx_datagrams + 512 < i as u64
                && t0.elapsed() < Duration::from_secs(5)
            {
                std::thread::sleep(Duration::from_micros(200));
            }
        }
    }
    assert!(translator.wait_for(Duration::from_secs(10), |c| c.translated >= KEYS as u64));
    let snaps = translator.shutdown();
    let frames: u64 = snaps.iter().map(|s| s.counters.frames).sum();
    let dart_frames: u64 = fleet.qp_stats().map(|s| s.frames).sum();
    assert!(
        collector.wait_for(Duration::from_secs(10), |k| k.rcvd_pkts
            >= frames + dart_frames),
        "{:?}",
        collector.counters()
    );

    // Same answers for every key (and the same bytes: both wrote the same slots in order).
    let dart = collector.store("dart").unwrap();
    let dta = collector.store("dta").unwrap();
    let (vd, vt) = (dart.keywrite().unwrap(), dta.keywrite().unwrap());
    let mut answered = 0;
    for r in &reports {
        let Primitive::KeyWrite { key, .. } = r.primitive else {
            unreachable!()
        };
        let a = vd.query(&key, N as usize, Vote::Plurality);
        assert_eq!(a, vt.query(&key, N as usize, Vote::Plurality), "{key:?}");
        answered += matches!(
            a,
            dta_collector::query::keywrite::KeyWriteAnswer::Value { .. }
        ) as u32;
    }
    assert!(answered > KEYS * 8 / 10, "{answered} of {KEYS} answered");
    let len = SLOTS as usize * 32;
    let (mut a, mut b) = (vec![0u8; len], vec![0u8; len]);
    dart.region.read(0, &mut a).unwrap();
    dta.region.read(0, &mut b).unwrap();
    assert!(a == b, "the two stores hold the same bytes");
    let k = collector.counters();
    assert_eq!(k.rkey_violation + k.bad_icrc, 0, "{k:?}");
    collector.shutdown();
}
