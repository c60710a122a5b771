//! Regression: the translator must never reuse a PSN the responder already executed (a
//! duplicate atomic is answered from saved results and NOT executed: the increment is lost).

use dta_collector::config::{StoreConfig, StoreKindConfig};
use dta_proto::hash::HashProfile;
use dta_proto::wire::report::{Primitive, Priority, Profile, Report, ReportHeader};
use dta_proto::Key;
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

#[test]
fn lost_responses_never_cause_psn_reuse() {
    for (frame_loss, seed_loss) in [
        (0.0, 0.05),
        (0.0, 0.3),
        (0.0, 0.7),
        (0.02, 0.02),
        (0.1, 0.3),
    ] {
        let mut h = Harness::new(
            vec![StoreConfig {
                name: "ctr".into(),
                port: None,
                kind: StoreKindConfig::KeyIncrement {
                    slots: 1 << 12,
                    hash: HashProfile::Independent,
                    epoch_secs: 0,
                },
            }],
            HarnessOptions::default(),
        );
        h.imp.response_loss = seed_loss;
        h.imp.loss = frame_loss;
        for round in 0..200u32 {
            let reports: Vec<Report> = (0..50u32)
                .map(|i| Report {
                    header: hdr(),
                    primitive: Primitive::KeyIncrement {
                        redundancy: 2,
                        key: Key::new(&(round * 50 + i).to_be_bytes()).unwrap(),
                        delta: 1,
                    },
                })
                .collect();
            h.send(&reports, Profile::Extended);
            h.advance(1_000_000);
        }
        h.advance(100_000_000);
        let k = h.rnic.counters();
        assert_eq!(
            k.atomic_replays,
            0,
            "loss {seed_loss}: a PSN was reused: {k:?} {:?}",
            h.pipeline.qp_stats().next()
        );
        // Every request that was executed was executed once; recovery only used probes and NAKs.
        let (_, _, q) = h.pipeline.qp_stats().next().unwrap();
        assert!(
            !h.pipeline.broken_stores().any(|_| true),
            "loss {frame_loss}/{seed_loss}: QP broke: {q:?}"
        );
    }
}
