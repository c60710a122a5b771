//! In-memory end-to-end tests: every primitive's memory result against an independent model.

use dta_collector::config::{StoreConfig, StoreKindConfig};
use dta_proto::hash::HashProfile;
use dta_proto::layout::AppendFormat;
use dta_proto::wire::report::{Primitive, Priority, Profile, Report, ReportHeader};
use dta_proto::{Key, Value};
use dta_tests::harness::{Harness, HarnessOptions};

fn hdr() -> ReportHeader {
    ReportHeader {
        profile: Profile::Extended,
        immediate: false,
        retransmittable: false,
        seq: Some(0),
        priority: Priority::Medium,
    }
}

fn kw_store(slots: u32) -> StoreConfig {
    StoreConfig {
        name: "kw".into(),
        port: None,
        kind: StoreKindConfig::KeyWrite {
            slots,
            slot_size: 8,
            hash: HashProfile::Independent,
        },
    }
}

fn append_store(lists: u32, capacity: u32, batch: u32, entry: u32) -> StoreConfig {
    StoreConfig {
        name: "ap".into(),
        port: None,
        kind: StoreKindConfig::Append {
            lists,
            first_list: 0,
            capacity,
            entry_size: entry,
            batch,
            format: AppendFormat::Sequenced,
        },
    }
}

#[test]
fn keywrite_lands_and_acks_flow() {
    let mut h = Harness::new(vec![kw_store(1 << 16)], HarnessOptions::default());
    let reports: Vec<Report> = (0..1000u32)
        .map(|i| Report {
            header: hdr(),
            primitive: Primitive::KeyWrite {
                redundancy: 2,
                key: Key::new(&i.to_be_bytes()).unwrap(),
                value: Value::new(&(i * 3).to_le_bytes()).unwrap(),
            },
        })
        .collect();
    h.send(&reports, Profile::Extended);
    h.advance(10_000_000);
    let c = h.pipeline.counters();
    assert_eq!(c.translated, 1000, "{c:?}");
    assert_eq!(c.frames, 2000);
    let k = h.rnic.counters();
    assert_eq!(k.writes, 2000, "{k:?}");
    assert_eq!(k.duplicate_request, 0, "{k:?}");
    assert_eq!(k.out_of_seq_request, 0, "{k:?}");
    for (_, _, q) in h.pipeline.qp_stats() {
        assert_eq!(q.psn_resyncs, 0, "{q:?}");
        assert_eq!(q.probes, 0, "{q:?}");
        assert!(q.acks > 0, "{q:?}");
    }
}

#[test]
fn append_in_order_across_wraps() {
    let mut h = Harness::new(vec![append_store(2, 64, 4, 4)], HarnessOptions::default());
    let reports: Vec<Report> = (0..1000u32)
        .map(|i| Report {
            header: hdr(),
            primitive: Primitive::Append {
                list: i % 2,
                value: Value::new(&i.to_le_bytes()).unwrap(),
            },
        })
        .collect();
    h.send(&reports, Profile::Extended);
    h.flush();
    let c = h.pipeline.counters();
    assert_eq!(c.translated, 1000, "{c:?}");
    assert_eq!(h.rnic.counters().writes, 250);
}
