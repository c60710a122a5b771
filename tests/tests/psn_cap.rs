//! Issue 28, part 2: the RC requester never has 2^23 PSNs outstanding.
//!
//! While no loss has been seen the send window is unlimited, so before the cap a collector
//! that paused (a descheduled process, a stopped VM) let a fast QP take more than 2^23 PSNs
//! it had not confirmed. PSN comparisons are signed distances in a 24-bit circle, so past
//! 2^23 they flip: the translator's count of unconfirmed frames read 0, the collector, once
//! it resumed, took every new frame for a duplicate (it is "behind" the PSN it expects), and
//! the translator discarded the collector's ACKs as stale, until the silence broke the QP.
//!
//! In-memory harness, simulated time, default `[reliability]` tuning (AckReq every 16 frames,
//! 2 ms initial timeout). The collector pauses, dropping what reaches it (its receive queue
//! overflowed), while Key-Write reports of N = 4 arrive at 10 million a second (40 million
//! frames a second): 2^21 + 8192 reports, 2^23 + 32768 frames if every report were taken,
//! far more than the cap (`QpTuning::default().max_outstanding`) takes to fill. Then it
//! resumes and 2 s of traffic follow.

use dta_collector::query::keywrite::{KeyWriteAnswer, KeyWriteView, Vote};
use dta_proto::hash::{HashProfile, KeyHasher};
use dta_proto::layout::KeyWriteLayout;
use dta_proto::wire::report::{Primitive, Profile, Report};
use dta_proto::{Key, Value};
use dta_tests::harness::{extended_header, keywrite_store, Harness, HarnessOptions};

const MS: u64 = 1_000_000;
const SLOTS: u32 = 1 << 20;
const N: u8 = 4;

fn harness() -> Harness {
    Harness::new(
        vec![keywrite_store(SLOTS, 16, N)],
        HarnessOptions::default(),
    )
}

fn report(key: u32) -> Report {
    Report {
        header: extended_header(0),
        primitive: Primitive::KeyWrite {
            redundancy: N,
            key: Key::new(&key.to_be_bytes()).unwrap(),
            value: Value::new(&key.to_le_bytes()).unwrap(),
        },
    }
}

fn encode(r: &Report) -> Vec<u8> {
    let mut b = vec![0u8; 128];
    let n = r.emit(Profile::Extended, &mut b).unwrap();
    b.truncate(n);
    b
}

#[test]
fn a_collector_paused_past_2_23_psns_accepts_new_frames_when_it_resumes() {
    let mut h = harness();
    // Warm-up: round trips measured, everything confirmed.
    let warm: Vec<Report> = (0..1000).map(report).collect();
    h.send(&warm, Profile::Extended);
    h.advance(10 * MS);
    assert_eq!(h.pipeline.unconfirmed_frames(), 0);

    // The pause: 64 reports every 6.4 µs (the same 64 datagrams: what they carry is lost
    // anyway) for 2^21 + 8192 reports, about 0.21 s of simulated time.
    h.imp.stalled = true;
    h.imp.stall_drops = true;
    let burst: Vec<Vec<u8>> = (0..64).map(|i| encode(&report(1_000_000 + i))).collect();
    let refs: Vec<&[u8]> = burst.iter().map(|b| b.as_slice()).collect();
    let offered = (1u64 << 21) + 8192;
    let before = *h.pipeline.counters();
    for _ in 0..offered / 64 {
        h.send_raw(&refs);
        h.advance(6_400);
    }
    let paused = *h.pipeline.counters();
    let unconfirmed = h.pipeline.unconfirmed_frames();
    let taken_in_pause = paused.translated - before.translated;
    let refused_in_pause = paused.drop_qp_queue_full - before.drop_qp_queue_full;
    assert!(
        !h.pipeline.broken_stores().any(|_| true),
        "the pause is shorter than broken_after"
    );

    // The collector resumes; 2 s of traffic at 10 reports per ms, distinct keys.
    h.resume();
    let resumed = *h.pipeline.counters();
    let stale_before: u64 = h
        .pipeline
        .qp_stats()
        .map(|(_, _, q)| q.stale_responses)
        .sum();
    let dup_before = h.rnic.counters().duplicate_request;
    let mut sent = Vec::new();
    for ms in 0..2000u32 {
        let reports: Vec<Report> = (0..10).map(|i| report(2_000_000 + ms * 10 + i)).collect();
        sent.extend(2_000_000 + ms * 10..2_000_000 + ms * 10 + 10);
        h.send(&reports, Profile::Extended);
        h.advance(MS);
    }
    h.flush();
    h.advance(100 * MS);

    let c = *h.pipeline.counters();
    let q = h.pipeline.qp_stats().next().unwrap().2;
    let k = h.rnic.counters();
    eprintln!(
        "FIGURE psn cap: pause took {taken_in_pause} reports ({unconfirmed} frames \
         unconfirmed), refused {refused_in_pause}; after resume: {} translated, {} refused, \
         stale responses {}, duplicates {}, skipped PSNs {}, resent {}",
        c.translated - resumed.translated,
        c.drop_qp_queue_full - resumed.drop_qp_queue_full,
        q.stale_responses - stale_before,
        k.duplicate_request - dup_before,
        q.psn_skipped,
        q.retransmitted_frames,
    );
    // The QP survived, and the collector executed what came after it resumed: the last
    // second's keys all read back with their values (nothing taken for a duplicate).
    assert!(
        !h.pipeline.broken_stores().any(|_| true),
        "QP broken: {q:?} {c:?}"
    );
    let view = KeyWriteView {
        region: &h.region("kw"),
        layout: KeyWriteLayout::new(SLOTS, 16).unwrap(),
        hasher: KeyHasher::new(HashProfile::Independent, SLOTS).unwrap(),
    };
    let late = &sent[sent.len() - 10_000..];
    let found = late
        .iter()
        .filter(|&&key| {
            matches!(
                view.query(&Key::new(&key.to_be_bytes()).unwrap(), N as usize, Vote::Plurality),
                KeyWriteAnswer::Value { value, .. } if value.as_bytes()[..4] == key.to_le_bytes()
            )
        })
        .count();
    assert_eq!(
        found,
        late.len(),
        "keys of the last second read back: {q:?} {c:?} {k:?}"
    );
    // The translator took the collector's answers: everything is confirmed.
    assert_eq!(h.pipeline.unconfirmed_frames(), 0, "{q:?}");
    assert!(
        q.stale_responses - stale_before < 100,
        "the collector's answers were taken as stale: {q:?}"
    );
    // During the pause the QP stopped at its cap, below 2^23 (the reconnect count of
    // unconfirmed frames is right), and refused the rest, report by report.
    assert!(
        unconfirmed > 0 && unconfirmed < 1 << 23,
        "unconfirmed frames after the pause: {unconfirmed}"
    );
    assert!(
        taken_in_pause * (N as u64) < 1 << 23,
        "{taken_in_pause} reports taken"
    );
    assert_eq!(taken_in_pause + refused_in_pause, offered, "{paused:?}");
    // Every report counted once.
    assert_eq!(c.dropped(), c.drop_qp_queue_full, "{c:?}");
    assert_eq!(
        c.rx_datagrams,
        c.translated + c.dropped() + h.pipeline.pending_reports(),
        "{c:?}"
    );
}
