//! Issue 7, finding 5: a collector that stalls for seconds (a starved process) must not get its
//! QP declared broken; one that never answers again must, after the configured silence, and
//! the reports that follow are counted as `drop_qp_broken` (the worker then reconnects).
//!
//! In-memory harness, simulated time, 10 Key-Write reports per millisecond, default
//! `[reliability]` tuning except AckReq every 16 frames and a 2 ms initial timeout
//! (`broken_after` 5 s, `rto_max` 1 s).

use dta_proto::wire::report::{Primitive, Priority, Profile, Report, ReportHeader};
use dta_proto::{Key, Value};
use dta_tests::harness::{keywrite_store, Harness, HarnessOptions};
use dta_translator::datapath::qp::QpTuning;

const MS: u64 = 1_000_000;
const PER_MS: u32 = 10;

fn harness() -> Harness {
    Harness::new(
        vec![keywrite_store(1 << 16, 16, 1)],
        HarnessOptions::default(),
    )
}

/// Sends one millisecond of traffic and advances time by 1 ms.
fn tick(h: &mut Harness, n: &mut u32) {
    let reports: Vec<Report> = (0..PER_MS)
        .map(|i| Report {
            header: ReportHeader {
                profile: Profile::Extended,
                immediate: false,
                retransmittable: false,
                seq: Some(0),
                priority: Priority::Medium,
            },
            primitive: Primitive::KeyWrite {
                redundancy: 1,
                key: Key::new(&(*n + i).to_be_bytes()).unwrap(),
                value: Value::new(&[7; 8]).unwrap(),
            },
        })
        .collect();
    *n += PER_MS;
    h.send(&reports, Profile::Extended);
    h.advance(MS);
}

fn acks(h: &Harness) -> u64 {
    h.pipeline
        .qp_stats()
        .map(|(_, _, s)| s.acks + s.nak_seq)
        .sum()
}

/// Runs 200 ms clean, a 2 s stall, then traffic until the QP is answered again; returns the
/// recovery time (resume → first ACK or NAK) in ns.
fn stall_2s(h: &mut Harness, drops: bool) -> u64 {
    let mut n = 0;
    for _ in 0..200 {
        tick(h, &mut n);
    }
    h.imp.stalled = true;
    h.imp.stall_drops = drops;
    for _ in 0..2000 {
        tick(h, &mut n);
        assert_eq!(
            h.pipeline.broken_stores().count(),
            0,
            "broken during the stall"
        );
    }
    let before = acks(h);
    let resumed = h.now;
    h.resume();
    let mut recovered = None;
    for _ in 0..2000 {
        if recovered.is_none() && acks(h) > before {
            recovered = Some(h.now - resumed);
        }
        tick(h, &mut n);
    }
    h.flush();
    h.advance(100 * MS);
    let c = *h.pipeline.counters();
    assert_eq!(h.pipeline.broken_stores().count(), 0);
    assert_eq!(c.drop_qp_broken, 0, "{c:?}");
    assert_eq!(c.dropped(), 0, "no report dropped: {c:?}");
    assert_eq!(c.translated, n as u64);
    assert_eq!(c.rx_datagrams, c.translated + c.dropped());
    recovered.expect("the QP was answered again")
}

#[test]
fn a_collector_that_stalls_for_two_seconds_keeps_its_qp() {
    // The stalled collector's receive queue holds the frames (the soak's case): every write
    // executes when it catches up.
    let mut h = harness();
    let rec = stall_2s(&mut h, false);
    let s = h.pipeline.qp_stats().next().unwrap().2;
    let k = h.rnic.counters();
    assert_eq!(s.psn_skipped, 0, "{s:?}");
    assert!(
        k.writes >= 22_000 + 2_000,
        "every report's write executed: {k:?}"
    );
    assert!(rec <= MS, "answered as soon as it resumed: {rec} ns");
    // The silence lasted the stall; the probes backed off (2 ms initial RTO doubling to
    // 1 s: about a dozen, not hundreds).
    assert!(s.silence_ns_max >= 1_990 * MS, "{s:?}");
    assert!(s.probes <= 14, "{s:?}");
    eprintln!(
        "FIGURE stall held: recovery {} us, probes {}, silence {} ms, srtt {} us, rto {} us",
        rec / 1000,
        s.probes,
        s.silence_ns_max / MS,
        s.srtt_ns / 1000,
        s.rto_ns / 1000
    );
}

#[test]
fn a_collector_that_drops_during_a_two_second_stall_recovers_within_rto_max() {
    // A full receive queue: frames sent during the stall are lost (those that left the ring
    // are counted as skipped PSNs), but the QP survives and recovers within one backed-off
    // timeout.
    let mut h = harness();
    let rec = stall_2s(&mut h, true);
    let s = h.pipeline.qp_stats().next().unwrap().2;
    assert!(s.psn_skipped >= 1 && s.retransmit_events >= 1, "{s:?}");
    let rto_max = QpTuning::default().rto_max_ns;
    assert!(rec <= rto_max + 2 * MS, "recovery {rec} ns");
    eprintln!(
        "FIGURE stall dropped: recovery {} us, frames resent {}, skipped {}, probes {}",
        rec / 1000,
        s.retransmitted_frames,
        s.psn_skipped,
        s.probes
    );
}

#[test]
fn a_collector_that_never_answers_breaks_the_qp_after_broken_after() {
    let mut h = harness();
    let mut n = 0;
    for _ in 0..100 {
        tick(&mut h, &mut n);
    }
    h.imp.stalled = true;
    h.imp.stall_drops = true;
    let since = h.now;
    let mut broken_at = None;
    for _ in 0..8000 {
        tick(&mut h, &mut n);
        if broken_at.is_none() && h.pipeline.broken_stores().count() == 1 {
            broken_at = Some(h.now - since);
        }
    }
    let t = broken_at.expect("the QP is declared broken");
    let q = QpTuning::default();
    assert!(
        t >= q.broken_after_ns && t <= q.broken_after_ns + q.rto_max_ns + 2 * MS,
        "broken after {t} ns"
    );
    let c = *h.pipeline.counters();
    // Everything after the break is counted, none silently lost.
    let after = (8000 * MS - t) / MS * PER_MS as u64;
    assert!(
        c.drop_qp_broken + PER_MS as u64 >= after,
        "{} dropped, {after} sent after the break",
        c.drop_qp_broken
    );
    assert_eq!(
        c.rx_datagrams,
        c.translated + c.dropped() + h.pipeline.pending_reports()
    );
    eprintln!("FIGURE never answers: broken after {} ms", t / MS);
}
