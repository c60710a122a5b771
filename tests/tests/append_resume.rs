//! Issue 7, finding 2: a translator that starts (or reconnects) while a collector already holds
//! Append data continues every list after the collector's head instead of restarting at batch
//! 1 and overwriting older batches. Translator 1 writes K batches per list and is dropped;
//! translator 2 connects over RDMA_CM, receives the list heads after the metadata record, and
//! writes K more. A tail reader that followed translator 1 reads every entry of both, in order,
//! and nothing was lost or overwritten.

use std::net::{Ipv4Addr, SocketAddrV4};
use std::time::Duration;

use dta_collector::config::{CollectorConfig, DeviceSection, StoreConfig, StoreKindConfig};
use dta_collector::query::append::{ListReader, Start};
use dta_collector::Collector;
use dta_proto::layout::AppendFormat;
use dta_proto::meta::StoreKind;
use dta_proto::wire::report::{Primitive, Priority, Profile, Report, ReportHeader};
use dta_proto::Value;
use dta_tests::harness::free_port;
use dta_translator::config::{CollectorSection, TranslatorConfig};
use dta_translator::Translator;

/// More lists than one list-head message holds at the collector's 4096-byte PMTU (509), so
/// the heads arrive in two messages.
const LISTS: u32 = 600;
/// The lists written (the first, one in the second message, the last).
const WRITTEN: [u32; 3] = [0, 510, 599];
const BATCH: u32 = 8;
/// 32 batch slots per list: the two translators' 2 × K batches fit without lapping.
const CAPACITY: u32 = 256;
const K: u32 = 6;

fn translator(c_addr: SocketAddrV4, t_ip: Ipv4Addr) -> Translator {
    let mut cfg = TranslatorConfig::default();
    cfg.translator.listen = SocketAddrV4::new(Ipv4Addr::LOCALHOST, 0);
    cfg.translator.roce = SocketAddrV4::new(t_ip, 0);
    cfg.reliability.ack_every = 4;
    // Batches here are all full; a partial-batch flush on a scheduling gap (1 ms by default)
    // would split one and shift every later sequence number (seen on a loaded CI host).
    cfg.append.flush_delay_us = 60_000_000;
    cfg.collectors = vec![CollectorSection::with_cm("c", c_addr, vec![1440])];
    Translator::start(cfg).expect("translator connects over RDMA_CM")
}

/// Sends entries `from .. from + n` to every list (value = (list, index)) and waits until the
/// collector executed `frames` writes in all.
fn write(t: &Translator, col: &Collector, from: u32, n: u32, frames: u64) {
    let sock = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let mut buf = [0u8; 128];
    let before = t.counters().rx_datagrams;
    for i in from..from + n {
        for l in WRITTEN {
            let r = Report {
                header: ReportHeader {
                    profile: Profile::Extended,
                    immediate: false,
                    retransmittable: false,
                    seq: Some(0),
                    priority: Priority::Medium,
                },
                primitive: Primitive::Append {
                    list: l,
                    value: Value::new(&[l.to_le_bytes(), i.to_le_bytes()].concat()).unwrap(),
                },
            };
            let len = r.emit(Profile::Extended, &mut buf).unwrap();
            sock.send_to(&buf[..len], t.report_addr).unwrap();
        }
    }
    assert!(t.wait_for(Duration::from_secs(10), |c| c.rx_datagrams
        >= before + (n * WRITTEN.len() as u32) as u64));
    assert!(
        col.wait_for(Duration::from_secs(10), |k| k.writes >= frames),
        "{:?}",
        col.counters()
    );
}

#[test]
fn a_new_translator_continues_every_append_list_after_the_collectors_head() {
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
            port: Some(1440),
            cm_allow: None,
            kind: StoreKindConfig::new(StoreKind::Append {
                lists: LISTS,
                first_list: 0,
                capacity: CAPACITY,
                entry_size: 8,
                batch: BATCH,
                format: AppendFormat::Sequenced,
                list_stride: 0,
            }),
        }],
        export: Default::default(),
        pull: None,
    })
    .expect("collector starts");
    let store = col.store("ap").unwrap().clone();
    let a = store.append().unwrap();
    let mut readers: Vec<ListReader> = WRITTEN
        .iter()
        .map(|&l| ListReader::new(&store.region, a.layout, a.list_offset(l), Start::Oldest))
        .collect();
    let mut got: Vec<Vec<u32>> = vec![Vec::new(); WRITTEN.len()];
    let read = |readers: &mut Vec<ListReader>, got: &mut Vec<Vec<u32>>| {
        for (k, r) in readers.iter_mut().enumerate() {
            r.poll(&store.region, 1024, |_, e| {
                assert_eq!(
                    u32::from_le_bytes(e[0..4].try_into().unwrap()),
                    WRITTEN[k],
                    "entry of another list"
                );
                got[k].push(u32::from_le_bytes(e[4..8].try_into().unwrap()));
            });
        }
    };

    // Translator 1: K full batches per list.
    let t1 = translator(c_addr, Ipv4Addr::new(127, 0, 0, 5));
    let per_phase = K as u64 * WRITTEN.len() as u64;
    write(&t1, &col, 0, K * BATCH, per_phase);
    read(&mut readers, &mut got);
    for g in &got {
        assert_eq!(*g, (0..K * BATCH).collect::<Vec<_>>());
    }
    drop(t1);

    // Translator 2, a fresh process state at another address: it must start each list at
    // batch K + 1.
    let sent_before = col.with_published(|p| p.cm.cm_list_heads_sent);
    assert_eq!(sent_before, 2, "600 lists: two list-head messages");
    let t2 = translator(c_addr, Ipv4Addr::new(127, 0, 0, 6));
    let t0 = std::time::Instant::now();
    while col.with_published(|p| p.cm.cm_list_heads_sent) < sent_before + 2
        && t0.elapsed() < Duration::from_secs(2)
    {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(
        col.with_published(|p| p.cm.cm_list_heads_sent),
        sent_before + 2
    );
    write(&t2, &col, K * BATCH, K * BATCH, 2 * per_phase);
    read(&mut readers, &mut got);
    for (l, g) in got.iter().enumerate() {
        assert_eq!(
            *g,
            (0..2 * K * BATCH).collect::<Vec<_>>(),
            "list {l}: every entry of both translators, in order"
        );
        assert_eq!(readers[l].lost_batches, 0);
        assert_eq!(readers[l].next_seq(), 2 * K as u64 + 1);
    }
    // A reader that starts now from the oldest batch sees the same, so nothing was overwritten.
    for l in WRITTEN {
        let mut r = ListReader::new(&store.region, a.layout, a.list_offset(l), Start::Oldest);
        let mut all = Vec::new();
        r.poll(&store.region, 1024, |_, e| {
            all.push(u32::from_le_bytes(e[4..8].try_into().unwrap()))
        });
        assert_eq!(all, (0..2 * K * BATCH).collect::<Vec<_>>(), "list {l}");
    }
    let k = col.counters();
    assert_eq!(k.out_of_seq_request + k.rkey_violation, 0, "{k:?}");
    drop(t2);
}
