//! Regression: the translator must never reuse a PSN the responder already executed (a
//! duplicate atomic is answered from saved results and NOT executed: the increment is lost),
//! and with retransmission no increment is lost either: lost ACKs and frames make the
//! translator resend frames unchanged, which the responder executes once (duplicates are
//! replayed from its saved results), so every counter ends exact.

use dta_collector::config::{StoreConfig, StoreKindConfig};
use dta_proto::hash::HashProfile;
use dta_proto::meta::StoreKind;
use dta_proto::wire::report::{Primitive, Profile, Report};
use dta_proto::Key;
use dta_tests::harness::{extended_header, Harness, HarnessOptions};

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
                cm_allow: None,
                kind: StoreKindConfig::new(StoreKind::KeyIncrement {
                    slots: 1 << 12,
                    hash: HashProfile::Independent,
                })
                .with_redundancy(2),
            }],
            HarnessOptions::default(),
        );
        h.imp.response_loss = seed_loss;
        h.imp.loss = frame_loss;
        for round in 0..200u32 {
            let reports: Vec<Report> = (0..50u32)
                .map(|i| Report {
                    header: extended_header(0),
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
        // Recovery after heavy loss backs off (up to rto_max): give it time to finish.
        for _ in 0..10 {
            h.advance(1_000_000_000);
        }
        let k = h.rnic.counters();
        let (_, _, q) = h.pipeline.qp_stats().next().unwrap();
        let r = h.region("ctr");
        let mut b = vec![0u8; r.len()];
        r.read(0, &mut b).unwrap();
        let sum: u64 = b
            .chunks_exact(8)
            .map(|c| u64::from_le_bytes(c.try_into().unwrap()))
            .sum();
        // No increment ran twice or in the place of another (no PSN reuse), and every report
        // is accounted for: translated (each of its 2 FETCH_ADDs executed, or counted lost in
        // `psn_skipped` or possibly lost in `noops_in_place`, which also count no-ops standing
        // in for probes or for frames the responder had executed, hence ≥) or dropped
        // with a reason (under heavy loss the QP's ring fills with frames it must keep for
        // retransmission: `drop_qp_queue_full`).
        assert_eq!(sum, k.atomics, "loss {frame_loss}/{seed_loss}: {k:?} {q:?}");
        let c = *h.pipeline.counters();
        assert_eq!(c.translated + c.dropped(), 10_000, "{c:?}");
        assert_eq!(c.dropped(), c.drop_qp_queue_full, "{c:?}");
        assert!(
            k.atomics <= 2 * c.translated
                && k.atomics + q.psn_skipped + q.noops_in_place >= 2 * c.translated,
            "loss {frame_loss}/{seed_loss}: {k:?} {q:?}"
        );
        if frame_loss <= 0.02 {
            // Up to 2 % loss the window (1024 frames) is never overrun: nothing is lost.
            assert_eq!(
                (k.atomics, q.retx_overruns),
                (20_000, 0),
                "loss {frame_loss}/{seed_loss}: {k:?} {q:?}"
            );
        }
        println!(
            "loss {frame_loss}/{seed_loss}: {} executed, {} resent in {} rounds, {} overruns, {} skipped, {} reports dropped (queue full)",
            k.atomics, q.retransmitted_frames, q.retransmit_events, q.retx_overruns, q.psn_skipped, c.drop_qp_queue_full
        );
        assert!(
            !h.pipeline.broken_stores().any(|_| true),
            "loss {frame_loss}/{seed_loss}: QP broke: {q:?}"
        );
    }
}
