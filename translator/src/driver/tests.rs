use std::net::{Ipv4Addr, SocketAddrV4};

use dta_proto::meta::{CollectorMeta, QpMeta, StoreKind, StoreMeta};

use super::connect::RECONNECT_SLOTS;
use super::routes::check_sketch_workers;
use super::*;
use crate::config::TranslatorConfig;

#[test]
fn qpns_encode_their_worker_and_stay_in_range() {
    for workers in 1..=64 {
        for w in 0..workers {
            for slot in [0, 1, 0x40, RECONNECT_SLOTS, 0xFFFF, u32::MAX] {
                let q = worker_qpn(slot, w, workers);
                assert_eq!(dta_io::reuseport::worker_of_qpn(q, workers), w);
                assert!((0x100..=0xFF_FFFF).contains(&q), "{q:#x}");
            }
        }
    }
    // One worker keeps the QPNs it always had.
    assert_eq!(worker_qpn(0x41, 0, 1), 0x141);
}

#[test]
fn dispatch_keeps_a_reporter_on_one_worker_and_spreads_reporters() {
    let mut per = [0usize; 4];
    for port in 0..4000u16 {
        let src = SocketAddrV4::new(Ipv4Addr::new(10, 0, (port >> 8) as u8, 1), port);
        let w = dispatch_worker(src, 4);
        assert_eq!(w, dispatch_worker(src, 4));
        per[w] += 1;
    }
    assert!(per.iter().all(|&n| n > 800), "{per:?}");
}

fn collector(stores: Vec<StoreMeta>) -> Vec<(String, CollectorMeta)> {
    vec![(
        "c".into(),
        CollectorMeta {
            roce: "127.0.0.1:4791".parse().unwrap(),
            mac: "02:00:00:00:00:51".into(),
            verify_icrc: true,
            stores,
        },
    )]
}

fn store(name: &str, kind: StoreKind, n: u8) -> StoreMeta {
    StoreMeta {
        name: name.into(),
        addr: 0x1000,
        len: 1 << 20,
        rkey: 1,
        qps: vec![QpMeta {
            qpn: 0x11,
            psn: 0,
            peer_qpn: 0x100,
        }],
        redundancy: dta_proto::meta::Redundancy::new(n),
        kind,
    }
}

fn kw() -> StoreKind {
    StoreKind::KeyWrite {
        slots: 1024,
        slot_size: 32,
        hash: dta_proto::hash::HashProfile::Independent,
    }
}

fn pc() -> StoreKind {
    StoreKind::Postcard {
        chunks: 1024,
        hops: 5,
        hash: dta_proto::hash::HashProfile::Independent,
    }
}

#[test]
fn sketch_stores_refuse_several_workers() {
    let sk = StoreKind::Sketch {
        sketch_id: 1,
        sketch: dta_proto::sketch::SketchKind::CountMin,
        rows: 4,
        columns: 1024,
        cell_width: 4,
        batch: 16,
        epochs: 2,
        hash: Default::default(),
    };
    let with = collector(vec![store("kw", kw(), 2), store("flows", sk, 1)]);
    assert!(check_sketch_workers(&with, 1).is_ok());
    let e = check_sketch_workers(&with, 2).unwrap_err();
    assert!(e.contains("\"flows\"") && e.contains("workers = 1"), "{e}");
    // Without a sketch store, any number of workers.
    assert!(check_sketch_workers(&collector(vec![store("kw", kw(), 2)]), 4).is_ok());
}

#[test]
fn report_kinds_without_a_store_are_named() {
    let mut cfg = TranslatorConfig::default();
    // Only a Key-Write store: the three other kinds have none.
    let w = unserved_report_kinds(&cfg, &collector(vec![store("kw", kw(), 2)]));
    assert_eq!(w.len(), 3, "{w:?}");
    assert!(
        w.iter().any(|l| l.contains("no keyincrement store")),
        "{w:?}"
    );
    assert!(w.iter().any(|l| l.contains("no postcard store")), "{w:?}");
    assert!(w
        .iter()
        .any(|l| l.contains("Append report") && l.contains("drop_unknown_list")));
    // Every kind served: nothing to say, unless a rule routes a kind nowhere.
    let all = collector(vec![
        store("kw", kw(), 2),
        store(
            "ki",
            StoreKind::KeyIncrement {
                slots: 1024,
                hash: dta_proto::hash::HashProfile::Independent,
            },
            2,
        ),
        store("pc", pc(), 1),
        store(
            "ap",
            StoreKind::Append {
                lists: 4,
                first_list: 0,
                capacity: 16,
                entry_size: 4,
                batch: 4,
                format: dta_proto::layout::AppendFormat::Sequenced,
                list_stride: 1024,
            },
            0,
        ),
    ]);
    assert_eq!(unserved_report_kinds(&cfg, &all), Vec::<String>::new());
    // A kind routed nowhere on purpose is not warned about.
    cfg.routing.keyincrement = "none".into();
    cfg.routing.postcard = "none".into();
    let w = unserved_report_kinds(&cfg, &collector(vec![store("kw", kw(), 2)]));
    assert_eq!(w.len(), 1, "{w:?}");
    assert!(w[0].contains("Append"), "{w:?}");
}

#[test]
fn a_configured_postcard_redundancy_must_match_the_stores() {
    let mut cfg = TranslatorConfig {
        collectors: vec![crate::config::CollectorSection::with_metadata(
            "c",
            "/nonexistent".into(),
        )],
        ..TranslatorConfig::default()
    };
    let local: SocketAddrV4 = "127.0.0.1:4792".parse().unwrap();
    let c = collector(vec![store("pc", pc(), 2)]);
    // Not set: the store's N applies.
    let (pcfg, _) = pipeline_for(&cfg, 0, local, &c).unwrap();
    assert_eq!(
        pcfg.postcard_redundancy, 1,
        "the fallback for stores without N"
    );
    cfg.postcard.redundancy = Some(2);
    assert!(pipeline_for(&cfg, 0, local, &c).is_ok());
    cfg.postcard.redundancy = Some(1);
    let e = pipeline_for(&cfg, 0, local, &c).err().unwrap();
    assert!(
        e.contains("redundancy 2") && e.contains("[postcard] redundancy = 1"),
        "{e}"
    );
}
