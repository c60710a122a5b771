//! Loss recovery under random loss in both directions (issue 13): no stall, nothing lost
//! silently, resends bounded, recovery time reported.
//!
//! In-memory harness with a 10 µs one-way delay (a 20 µs round trip, a rack-local collector),
//! Key-Write N = 1 (one frame per report), reports paced at a fixed rate, loss applied to RDMA
//! frames and to the collector's ACKs/NAKs alike.
//!
//! Go-back-N (what an RC responder forces: after a gap it drops everything until the missing
//! PSN arrives) resends what was in flight behind a lost frame, so resent / lost is about
//! 1 + the frames sent per round trip: the frame that reveals a gap (the responder NAKs it)
//! is itself dropped, so 2 is the floor wherever a later frame reveals the loss; a lost NAK or
//! a lost resend costs an RTO's worth of frames on top. At 25 k reports/s (half a frame per
//! round trip) it must stay within 10 % of that floor at 1 % loss and under 3.5 at 5 %; at
//! 100 k/s (2 per round trip) and in bulk (1,000 per millisecond) the figures are printed,
//! and in bulk the loss window bounds it and sheds what the lossy link cannot carry as counted
//! drops, never silently.

use dta_proto::wire::report::{Primitive, Profile, Report};
use dta_proto::{Key, Value};
use dta_tests::harness::{extended_header, keywrite_store, Harness, HarnessOptions};
use dta_translator::datapath::qp::QpTuning;

const US: u64 = 1_000;

struct Figures {
    dropped: u64,
    lost: u64,
    resent: u64,
    recoveries: u64,
    recovery_max_us: u64,
    recovery_mean_us: u64,
    loss_events: u64,
}

/// Sends `n` reports, `per_step` every `step_ns`, over a wire losing `loss` of the frames and
/// of the responses; then a clean minute. Checks that every report's write executed once.
fn run(loss: f64, n: u32, per_step: u32, step_ns: u64) -> Figures {
    let mut h = Harness::new(
        vec![keywrite_store(1 << 18, 16, 1)],
        HarnessOptions {
            qp: QpTuning {
                // A rack-local collector: round trips of tens of microseconds, so the RTO
                // floor sits well below the 2 ms default of a shared host.
                rto_min_ns: 200 * US,
                ..HarnessOptions::default().qp
            },
            ..HarnessOptions::default()
        },
    );
    h.imp.one_way_ns = 10 * US;
    h.imp.loss = loss;
    h.imp.response_loss = loss;
    let mut sent = 0;
    while sent < n {
        let reports: Vec<Report> = (sent..(sent + per_step).min(n))
            .map(|i| Report {
                header: extended_header(i),
                primitive: Primitive::KeyWrite {
                    redundancy: 1,
                    key: Key::new(&i.to_be_bytes()).unwrap(),
                    value: Value::new(&[7; 8]).unwrap(),
                },
            })
            .collect();
        sent += reports.len() as u32;
        h.send(&reports, Profile::Extended);
        h.advance(step_ns);
    }
    h.imp.loss = 0.0;
    h.imp.response_loss = 0.0;
    h.advance(60_000_000_000);
    let c = *h.pipeline.counters();
    let k = h.rnic.counters();
    let (_, _, q) = h.pipeline.qp_stats().next().unwrap();
    assert_eq!(h.pipeline.broken_stores().count(), 0, "{q:?}");
    // Every report is translated or dropped with a reason (a queue full of frames kept for
    // retransmission), and every translated report's write executed exactly once.
    assert_eq!(c.translated + c.drop_qp_queue_full, n as u64, "{c:?}");
    assert_eq!(c.dropped(), c.drop_qp_queue_full, "{c:?}");
    assert_eq!(
        (k.writes, q.psn_skipped, q.noops_in_place),
        (c.translated, 0, 0),
        "every write executed exactly once, none given up: {k:?} {q:?}"
    );
    assert_eq!(h.pipeline.unconfirmed_frames(), 0, "no stall: {q:?}");
    Figures {
        dropped: c.drop_qp_queue_full,
        lost: h.frames_lost,
        resent: q.retransmitted_frames,
        recoveries: q.recoveries,
        recovery_max_us: q.recovery_ns_max / US,
        recovery_mean_us: q.recovery_ns_total / q.recoveries.max(1) / US,
        loss_events: q.loss_events,
    }
}

fn figure(what: &str, loss: f64, f: &Figures) {
    eprintln!(
        "FIGURE {what} loss {:.0}%: {} frames lost, {} resent ({:.2}x), {} loss events, \
         {} recoveries, mean {} us, max {} us, {} reports dropped (queue full)",
        loss * 100.0,
        f.lost,
        f.resent,
        f.resent as f64 / f.lost.max(1) as f64,
        f.loss_events,
        f.recoveries,
        f.recovery_mean_us,
        f.recovery_max_us,
        f.dropped
    );
}

#[test]
fn paced_traffic_resends_at_most_twice_what_was_lost() {
    for loss in [0.01, 0.05] {
        // 25 k reports/s: one report every 40 µs, half a frame per round trip.
        let f = run(loss, 20_000, 1, 40 * US);
        figure("paced 25k/s", loss, &f);
        assert!(f.lost > 0 && f.dropped == 0);
        let bound = if loss < 0.02 { 22 } else { 35 };
        assert!(
            f.resent * 10 <= bound * f.lost,
            "loss {loss}: {} resent for {} lost",
            f.resent,
            f.lost
        );
        // 100 k reports/s: two frames per round trip, each loss costs about three resends.
        let f = run(loss, 20_000, 1, 10 * US);
        figure("paced 100k/s", loss, &f);
        // (At 5 % the window may briefly hold back more than the ring keeps: counted drops.)
        assert!(f.lost > 0 && f.dropped * 1000 <= 20_000);
        assert!(
            f.resent <= 5 * f.lost,
            "loss {loss}: {} for {}",
            f.resent,
            f.lost
        );
    }
}

#[test]
fn bulk_traffic_resends_are_bounded_by_the_loss_window() {
    for loss in [0.01, 0.05] {
        // 1,000 reports at once every millisecond: a burst far larger than a round trip.
        let f = run(loss, 20_000, 1000, 1_000 * US);
        figure("bulk 1000/ms", loss, &f);
        assert!(f.lost > 0);
        assert!(
            f.resent <= 40 * f.lost,
            "loss {loss}: {} resent for {} lost",
            f.resent,
            f.lost
        );
    }
}
