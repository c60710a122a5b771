use super::*;
use dta_proto::icrc::check_frame;
use dta_proto::wire::ib::{opcode, NakCode, RethRepr, Syndrome};
use dta_proto::wire::roce::{FrameTemplate, RoceEndpoint, L2L4_LEN};
use std::net::Ipv4Addr;

const START: u32 = 0xFF_FFFA;
const DEST: SocketAddrV4 = SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 2), 4791);

fn tmpl(payload: usize) -> FrameTemplate {
    let ep = RoceEndpoint {
        src_ip: Ipv4Addr::new(10, 0, 0, 1),
        dst_ip: Ipv4Addr::new(10, 0, 0, 2),
        ..RoceEndpoint::default()
    };
    FrameTemplate::new(&ep, opcode::RC_RDMA_WRITE_ONLY, Qpn::new(0x11), payload)
}

fn tuning(window: u32) -> QpTuning {
    QpTuning {
        ack_every: 4,
        ack_timeout_ns: 1000,
        rto_min_ns: 1000,
        rto_max_ns: 64_000,
        broken_after_ns: 1_000_000,
        retransmit_window: window,
        max_outstanding: MAX_OUTSTANDING,
    }
}

fn qp(window: u32) -> QpTx {
    QpTx::new(
        Qpn::new(0x100),
        Qpn::new(0x11),
        Psn::new(START),
        tuning(window),
        tmpl(8).frame_len(),
    )
}

fn reth() -> RethRepr {
    RethRepr {
        va: 0x1000,
        rkey: dta_proto::wire::ib::Rkey(1),
        dma_len: 8,
    }
}

/// Takes a frame carrying `tag` as the sender does: into `tx` if direct, else the ring.
fn send(q: &mut QpTx, now: u64, tx: &mut TxBatch, tag: u8) -> Psn {
    let t = tmpl(8);
    match q.take(now, tx.remaining() > 0).expect("takes") {
        Take::Direct { psn, ack_req } => {
            assert!(tx.push_with(DEST, 0, |buf| match q.direct_slot(psn) {
                Some(copy) => t.emit_write_twice(buf, copy, psn, ack_req, &reth(), None, &[tag; 8]),
                None => t.emit_write(buf, psn, ack_req, &reth(), None, &[tag; 8]),
            }));
            psn
        }
        Take::Queued { psn } => {
            let slot = q.ring_slot(psn).unwrap();
            t.emit_write(slot, psn, false, &reth(), None, &[tag; 8]);
            psn
        }
    }
}

fn filler(buf: &mut [u8], psn: Psn, ack_req: bool) -> usize {
    tmpl(0).emit_write(
        buf,
        psn,
        ack_req,
        &RethRepr {
            dma_len: 0,
            ..reth()
        },
        None,
        &[],
    )
}

/// (PSN, AckReq, first payload byte) of each frame `poll_transmit` pushes.
fn transmit(q: &mut QpTx, now: u64, room: usize) -> Vec<(Psn, bool, u8)> {
    let mut tx = TxBatch::new(room.max(1), 256);
    if room == 0 {
        return vec![];
    }
    q.poll_transmit(now, &mut tx, DEST, 0, filler);
    (0..tx.len())
        .map(|i| {
            let f = tx.frame(i);
            assert!(check_frame(f), "a valid ICRC");
            let r = RoceFrame::new_unchecked(f);
            (
                r.psn(),
                r.ack_req(),
                f.get(L2L4_LEN + 12 + 16).copied().unwrap_or(0),
            )
        })
        .collect()
}

fn ack(q: &mut QpTx, now: u64, psn: Psn) -> QpEvent {
    q.on_response(now, Syndrome::Ack { credits: 31 }, psn)
}

fn nak(q: &mut QpTx, now: u64, psn: Psn) -> QpEvent {
    q.on_response(now, Syndrome::Nak(NakCode::PsnSequenceError), psn)
}

fn frames_of(tx: &TxBatch) -> Vec<(Psn, bool)> {
    (0..tx.len())
        .map(|i| {
            let r = RoceFrame::new_unchecked(tx.frame(i));
            (r.psn(), r.ack_req())
        })
        .collect()
}

/// A QP of `window` ring frames that takes at most `cap` PSNs unconfirmed.
fn capped(window: u32, cap: u32) -> QpTx {
    QpTx::new(
        Qpn::new(0x100),
        Qpn::new(0x11),
        Psn::new(START),
        QpTuning {
            max_outstanding: cap,
            ..tuning(window)
        },
        tmpl(8).frame_len(),
    )
}

/// Takes one-frame reports while the QP lets them (a report of `per` frames is asked
/// for), at most `limit`; returns how many frames were taken.
fn fill(q: &mut QpTx, now: u64, per: usize, limit: usize) -> usize {
    let mut tx = TxBatch::new(4096, 256);
    let mut n = 0;
    while n < limit && q.can_take(now, per, tx.remaining()) {
        send(q, now, &mut tx, 1);
        n += 1;
        if tx.is_full() {
            tx.clear();
        }
    }
    n
}

#[test]
fn outstanding_psns_stop_at_the_cap_with_or_without_a_ring() {
    for window in [0, 64] {
        let mut q = capped(window, 1000);
        let s = Psn::new(START);
        // The PSNs wrap past 0 on the way; reports of 4 frames stop 4 short of the cap.
        assert_eq!(fill(&mut q, 0, 4, 5000), 997, "window {window}");
        assert_eq!(fill(&mut q, 0, 1, 5000), 3, "window {window}");
        assert_eq!((q.unconfirmed(), q.next_psn()), (1000, s.add(1000)));
        assert!(!q.can_take(0, 1, usize::MAX));
        // An ACK makes room for exactly what it confirmed.
        ack(&mut q, 10, s.add(99));
        assert_eq!(fill(&mut q, 10, 1, 5000), 100, "window {window}");
        assert_eq!(q.unconfirmed(), 1000);
    }
}

#[test]
fn the_default_cap_keeps_a_silent_collectors_qp_below_2_23_psns() {
    // Without loss the window is unlimited: only the cap stops a QP whose collector is
    // silent. Past 2^23 PSNs `unconfirmed` read 0 and every answer looked stale.
    let mut q = QpTx::new(
        Qpn::new(0x100),
        Qpn::new(0x11),
        Psn::new(START),
        QpTuning {
            retransmit_window: 0,
            ..QpTuning::default()
        },
        tmpl(8).frame_len(),
    );
    let taken = fill(&mut q, 0, 1, (1 << 23) + 16);
    assert_eq!(taken, DEFAULT_MAX_OUTSTANDING as usize);
    assert_eq!(q.unconfirmed(), taken);
    // The collector answers the newest frame: taken, everything confirmed.
    let newest = q.next_psn().sub(1);
    assert_eq!(ack(&mut q, 1, newest), QpEvent::None);
    assert_eq!((q.unconfirmed(), q.stats.stale_responses), (0, 0));
    // A cap beyond MAX_OUTSTANDING is taken as MAX_OUTSTANDING.
    let q = capped(0, u32::MAX);
    assert_eq!(q.max_outstanding, MAX_OUTSTANDING);
}

#[test]
fn a_timeout_at_the_cap_resends_the_oldest_instead_of_taking_a_psn() {
    for window in [0, 64] {
        let mut q = capped(window, 64);
        let s = Psn::new(START);
        assert_eq!(fill(&mut q, 0, 1, 1000), 64);
        // Silence: every timeout asks with the oldest frame, never with a probe on a
        // fresh PSN, however long it lasts.
        let mut t = 0;
        for _ in 0..6 {
            t = q.next_deadline().unwrap().max(t + 1);
            q.poll_timeout(t);
            assert!(!q.wants_probe(), "window {window}");
            let got = transmit(&mut q, t, 8);
            assert_eq!(got.len(), 1, "window {window}");
            assert_eq!((got[0].0, got[0].1), (s, true), "window {window}");
            assert_eq!(q.next_psn(), s.add(64), "window {window}");
        }
        assert_eq!(q.unconfirmed(), 64);
        // The responder executes it: one PSN of room, and the next question may take it.
        ack(&mut q, t + 1, s);
        assert_eq!(q.unconfirmed(), 63);
        assert!(q.can_take(t + 1, 1, 8) && !q.can_take(t + 1, 2, 8));
    }
}

#[test]
fn psns_wrap_and_every_kth_frame_asks_for_an_ack() {
    let mut q = qp(64);
    let mut tx = TxBatch::new(64, 256);
    for i in 0..8 {
        send(&mut q, 0, &mut tx, i);
    }
    let got: Vec<(u32, bool)> = frames_of(&tx)
        .into_iter()
        .map(|(p, a)| (p.value(), a))
        .collect();
    assert_eq!(
        got,
        [
            (0xFF_FFFA, false),
            (0xFF_FFFB, false),
            (0xFF_FFFC, false),
            (0xFF_FFFD, true),
            (0xFF_FFFE, false),
            (0xFF_FFFF, false),
            (0, false),
            (1, true)
        ]
    );
    assert_eq!(q.unconfirmed(), 8);
    ack(&mut q, 10, Psn::new(1));
    assert_eq!((q.unconfirmed(), q.next_deadline()), (0, None));
}

#[test]
fn a_nak_resends_exactly_from_the_frame_it_names() {
    let mut q = qp(64);
    let mut tx = TxBatch::new(64, 256);
    let s = Psn::new(START);
    for i in 0..9 {
        send(&mut q, 0, &mut tx, i);
    }
    // The responder executed s..s+2 and lost s+3: it NAKs naming s+3.
    ack(&mut q, 5, s.add(1));
    assert_eq!(nak(&mut q, 6, s.add(3)), QpEvent::None);
    assert!(q.wants_transmit(6));
    // Room for 4 now, the rest later: resent unchanged, in order, the last with AckReq.
    let mut got = transmit(&mut q, 7, 4);
    got.extend(transmit(&mut q, 8, 64));
    let psns: Vec<Psn> = got.iter().map(|g| g.0).collect();
    assert_eq!(psns, (3..9).map(|i| s.add(i)).collect::<Vec<_>>());
    assert_eq!(
        got.iter().map(|g| g.2).collect::<Vec<_>>(),
        [3, 4, 5, 6, 7, 8]
    );
    assert!(got[5].1, "the pass's last frame asks for an ACK");
    assert_eq!(q.stats.retransmitted_frames, 6);
    assert_eq!(q.stats.retransmit_events, 1);
    // The same NAK again (e.g. for a frame that was in flight): ignored.
    nak(&mut q, 9, s.add(3));
    assert!(!q.wants_transmit(9));
    assert_eq!(q.stats.retransmit_events, 1);
    ack(&mut q, 20, s.add(8));
    assert_eq!(q.unconfirmed(), 0);
    assert_eq!(q.stats.recoveries, 1);
    assert_eq!(q.next_psn(), s.add(9), "no PSN was taken again");
}

#[test]
fn a_timeout_asks_with_a_fresh_probe_and_a_late_ack_costs_no_resend() {
    let mut q = qp(64);
    let mut tx = TxBatch::new(64, 256);
    let s = Psn::new(START);
    for i in 0..4 {
        send(&mut q, 0, &mut tx, i);
    }
    // s+3 carries AckReq; its ACK is late (the collector was descheduled).
    assert_eq!(q.next_deadline(), Some(1000));
    q.poll_timeout(1000);
    assert_eq!(q.stats.ack_timeouts, 1);
    assert!(q.wants_probe(), "a probe, not a resend");
    let p = q.take_probe();
    assert_eq!(p, s.add(4));
    let slot = q.ring_slot(p).unwrap();
    filler(slot, p, true);
    let got = transmit(&mut q, 1000, 8);
    assert_eq!((got.len(), got[0].0, got[0].1), (1, p, true));
    assert_eq!(q.stats.retransmitted_frames, 0);
    // The late ACK arrives, then the probe's: nothing was resent.
    ack(&mut q, 1500, s.add(3));
    ack(&mut q, 1600, p);
    assert_eq!(q.unconfirmed(), 0);
    assert_eq!(q.next_deadline(), None);
    assert_eq!((q.stats.retransmitted_frames, q.stats.probes), (0, 1));
    assert_eq!(q.stats.recoveries, 1);
}

#[test]
fn an_unanswered_probe_resends_the_oldest_then_goes_back_to_where_the_responder_waits() {
    // The responder lost s+2 and the NAK for it, and now drops everything silently.
    let mut q = qp(64);
    let mut tx = TxBatch::new(64, 256);
    let s = Psn::new(START);
    for i in 0..8 {
        send(&mut q, 0, &mut tx, i);
    }
    ack(&mut q, 100, s.add(1));
    // s+7 (AckReq) unanswered: a probe, unanswered too.
    q.poll_timeout(1100);
    let p = q.take_probe();
    let slot = q.ring_slot(p).unwrap();
    filler(slot, p, true);
    assert_eq!(transmit(&mut q, 1100, 8).len(), 1);
    // Backed off: the next timeout is 2 RTOs later, and resends the oldest (s+2).
    q.poll_timeout(2000);
    assert!(!q.wants_transmit(2000));
    q.poll_timeout(3100);
    let got = transmit(&mut q, 3100, 8);
    assert_eq!(
        got,
        vec![(s.add(2), true, 2)],
        "the oldest unconfirmed, with AckReq"
    );
    // The responder executes it and ACKs s+2: short of what was sent, but maybe a late
    // ACK: nothing is resent on that answer alone.
    ack(&mut q, 3200, s.add(2));
    assert!(!q.wants_transmit(3200));
    // The next timeout asks with a fresh probe, which the responder (now waiting at s+3,
    // its NAK flag cleared by s+2) NAKs: go back to s+3.
    let t = q.next_deadline().unwrap();
    q.poll_timeout(t);
    let p2 = q.take_probe();
    let slot = q.ring_slot(p2).unwrap();
    filler(slot, p2, true);
    assert_eq!(transmit(&mut q, t, 8).len(), 1);
    nak(&mut q, t + 50, s.add(3));
    let got = transmit(&mut q, t + 60, 64);
    let psns: Vec<Psn> = got.iter().map(|g| g.0).collect();
    assert_eq!(
        psns,
        (3..10).map(|i| s.add(i)).collect::<Vec<_>>(),
        "s+3 .. both probes"
    );
    assert_eq!(q.stats.loss_events, 1);
    ack(&mut q, t + 100, p2);
    assert_eq!(q.unconfirmed(), 0);
    assert_eq!(q.stats.psn_skipped, 0);
}

#[test]
fn a_responder_that_drops_fresh_frames_after_answering_is_gone_back_to() {
    // The responder executed s..s+4 (their ACK was lost), lost s+5 and its NAK, and now
    // drops everything out of order; our newest confirmed PSN is s+1.
    let mut q = qp(64);
    let mut tx = TxBatch::new(64, 256);
    let s = Psn::new(START);
    for i in 0..8 {
        send(&mut q, 0, &mut tx, i);
    }
    ack(&mut q, 100, s.add(1));
    let probe = |q: &mut QpTx, t: u64| {
        let p = q.take_probe();
        let slot = q.ring_slot(p).unwrap();
        filler(slot, p, true);
        transmit(q, t, 8);
    };
    // Timeout 1: a fresh probe, dropped.
    q.poll_timeout(1100);
    probe(&mut q, 1100);
    // Timeout 2: the oldest (s+2) resent: a duplicate, re-ACKed with s+4.
    q.poll_timeout(3100);
    assert_eq!(transmit(&mut q, 3100, 8).len(), 1);
    ack(&mut q, 3200, s.add(4));
    assert!(!q.wants_transmit(3200), "no round on that answer alone");
    // Timeout 3: a fresh probe again, dropped too (the responder still waits for s+5).
    let t = q.next_deadline().unwrap();
    q.poll_timeout(t);
    probe(&mut q, t);
    // Timeout 4: the responder is alive but drops fresh frames: go back to s+5.
    let t = q.next_deadline().unwrap();
    q.poll_timeout(t);
    let got = transmit(&mut q, t, 64);
    assert_eq!(got[0].0, s.add(5));
    assert_eq!(got[0].2, 5, "the frame as first sent");
    assert_eq!((q.stats.loss_events, q.stats.psn_skipped), (1, 0));
}

#[test]
fn a_stalled_collector_catching_up_draws_no_go_back_n() {
    let mut q = qp(256);
    let mut tx = TxBatch::new(256, 256);
    let s = Psn::new(START);
    for i in 0..64 {
        send(&mut q, 0, &mut tx, i as u8);
    }
    // Nothing answered for three timeouts: probe, oldest resent, probe again.
    for t in [1000, 3000, 7000] {
        q.poll_timeout(t);
        if q.wants_probe() {
            let p = q.take_probe();
            let slot = q.ring_slot(p).unwrap();
            filler(slot, p, true);
        }
        transmit(&mut q, t, 8);
    }
    assert_eq!(q.stats.retransmitted_frames, 1, "one duplicate at most");
    // The collector resumes and works through its queue: ACK after ACK, in order.
    let last = q.next_psn().sub(1);
    for k in (3..64).step_by(4) {
        ack(&mut q, 7100 + k as u64, s.add(k));
        assert!(!q.wants_transmit(7100), "no round while it catches up");
    }
    ack(&mut q, 7200, last);
    assert_eq!(q.unconfirmed(), 0);
    assert_eq!(q.stats.retransmitted_frames, 1);
    assert_eq!(q.stats.loss_events, 0);
    assert!(!q.is_broken());
}

#[test]
fn silence_runs_only_while_an_answer_is_due() {
    let mut q = qp(64);
    let mut tx = TxBatch::new(64, 256);
    for i in 0..4 {
        send(&mut q, 0, &mut tx, i);
    }
    let last = q.next_psn().sub(1);
    ack(&mut q, 10, last);
    // Idle far longer than broken_after: nothing is due, nothing fires.
    assert_eq!(q.next_deadline(), None);
    assert_eq!(q.poll_timeout(60_000_000_000), QpEvent::None);
    let mut tx = TxBatch::new(64, 256);
    send(&mut q, 60_000_000_000, &mut tx, 9);
    q.poll_timeout(60_000_100_000);
    assert!(!q.is_broken(), "idle is not silence");
    // Now an answer is due (the tail's probe) and none ever comes: broken after
    // broken_after, counted from when the answer became due.
    let mut t = 60_000_100_000;
    let mut due_since = None;
    while !q.is_broken() && t < 60_010_000_000 {
        t = q.next_deadline().unwrap().max(t + 1);
        q.poll_timeout(t);
        if q.wants_probe() {
            let p = q.take_probe();
            let slot = q.ring_slot(p).unwrap();
            filler(slot, p, true);
            due_since.get_or_insert(t);
        }
        transmit(&mut q, t, 8);
    }
    assert!(q.is_broken());
    let since = due_since.expect("a probe went out");
    // (The question was asked at the poll just before the probe went out.)
    assert!(
        t + 1 >= since + 1_000_000 && t <= since + 1_000_000 + 64_000,
        "{t} {since}"
    );
}

#[test]
fn fatal_naks_break_the_qp() {
    let mut q = qp(64);
    let mut tx = TxBatch::new(64, 256);
    send(&mut q, 0, &mut tx, 0);
    let ev = q.on_response(
        1,
        Syndrome::Nak(NakCode::RemoteAccessError),
        Psn::new(START),
    );
    assert_eq!(ev, QpEvent::Broken);
    assert!(q.is_broken() && q.next_deadline().is_none());
    assert!(q.take(2, true).is_none());
}

#[test]
fn rnr_pauses_then_resends_from_its_psn() {
    let mut q = qp(64);
    let mut tx = TxBatch::new(64, 256);
    let s = Psn::new(START);
    for i in 0..5 {
        send(&mut q, 0, &mut tx, i);
    }
    q.on_response(10, Syndrome::RnrNak { timer: 14 }, s.add(2));
    assert!(q.is_paused(1_000_000));
    assert!(
        transmit(&mut q, 1_000_000, 8).is_empty(),
        "nothing during the pause"
    );
    assert_eq!(q.next_deadline(), Some(10 + 1_280_000));
    // New frames queue behind the pass.
    let mut tx = TxBatch::new(64, 256);
    send(&mut q, 1_100_000, &mut tx, 5);
    assert!(tx.is_empty());
    let got = transmit(&mut q, 1_280_010, 8);
    assert_eq!(
        got.iter().map(|g| (g.0, g.2)).collect::<Vec<_>>(),
        vec![(s.add(2), 2), (s.add(3), 3), (s.add(4), 4), (s.add(5), 5)]
    );
}

#[test]
fn a_full_batch_queues_frames_in_psn_order() {
    let mut q = qp(8);
    let mut tx = TxBatch::new(2, 256);
    for i in 0..5 {
        send(&mut q, 0, &mut tx, i);
    }
    assert_eq!(tx.len(), 2);
    assert_eq!(q.queued(), 3);
    // The ring keeps 8: 5 taken, 3 not yet sent; a report of 6 more frames does not fit
    // without overwriting one of those.
    assert!(q.can_take(0, 5, 0) && !q.can_take(0, 6, 0));
    let got = transmit(&mut q, 1, 64);
    assert_eq!(got.iter().map(|g| g.2).collect::<Vec<_>>(), [2, 3, 4]);
    assert!(
        got[2].1,
        "the last frame of a drained queue asks for an ACK"
    );
    assert_eq!(q.queued(), 0);
    assert_eq!(q.stats.retransmitted_frames, 0);
}

#[test]
fn frames_gone_from_the_ring_are_replaced_by_no_ops_never_reused() {
    let mut q = qp(4);
    let mut tx = TxBatch::new(64, 256);
    let s = Psn::new(START);
    for i in 0..10 {
        send(&mut q, 0, &mut tx, i);
    }
    // s+2 was lost; the ring only holds s+6 .. s+9.
    nak(&mut q, 5, s.add(2));
    let got = transmit(&mut q, 6, 64);
    let psns: Vec<Psn> = got.iter().map(|g| g.0).collect();
    assert_eq!(psns, (2..10).map(|i| s.add(i)).collect::<Vec<_>>());
    // s+2 .. s+5 are zero-length no-ops (their data is lost and counted), the rest the
    // frames as first sent.
    assert_eq!(q.stats.psn_skipped, 4);
    assert_eq!(q.stats.retx_overruns, 1);
    assert_eq!(got[4].2, 6);
    assert_eq!(q.next_psn(), s.add(10));
}

#[test]
fn the_window_halves_on_loss_and_grows_back() {
    let mut q = qp(1024);
    let mut tx = TxBatch::new(1024, 256);
    let s = Psn::new(START);
    for i in 0..100 {
        send(&mut q, 0, &mut tx, i as u8);
    }
    assert_eq!(q.window(), None);
    nak(&mut q, 1, s.add(50));
    assert_eq!(q.window(), Some(25), "half of the 50 frames in flight");
    // The pass goes out 25 at a time, the 25th asking for an ACK.
    let got = transmit(&mut q, 2, 1024);
    assert_eq!(got.len(), 25);
    assert!(got[24].1);
    // A second loss in the same window does not halve it again.
    nak(&mut q, 3, s.add(60));
    assert_eq!(q.window(), Some(25));
    // Every transmitted frame confirmed at once: the window grows by one per window's
    // worth of frames until it reaches the ring's capacity, then is unlimited.
    let mut t = 10;
    let mut rounds = 0;
    while q.window().is_some() && rounds < 10_000 {
        let mut tx = TxBatch::new(4096, 256);
        while q.queued() < 64 {
            send(&mut q, t, &mut tx, 1);
        }
        transmit(&mut q, t, 4096);
        // The responder executes everything on the wire.
        let newest = q.high.sub(1);
        ack(&mut q, t + 1, newest);
        t += 10;
        rounds += 1;
    }
    assert_eq!(q.window(), None, "unlimited again after {rounds} rounds");
    assert!(rounds > 10, "grows linearly, not at once");
}

#[test]
fn an_idle_unconfirmed_tail_is_asked_about_with_a_probe() {
    let mut q = qp(64);
    let mut tx = TxBatch::new(64, 256);
    for i in 0..3 {
        send(&mut q, 0, &mut tx, i);
    }
    // No AckReq went out: TAIL_RTOS RTOs after the last frame, a probe.
    assert_eq!(q.next_deadline(), Some(4000));
    q.poll_timeout(3999);
    assert!(!q.wants_probe());
    q.poll_timeout(4000);
    assert!(q.wants_probe());
    assert_eq!(q.stats.ack_timeouts, 0, "not counted as a timeout");
    let p = q.take_probe();
    let slot = q.ring_slot(p).unwrap();
    filler(slot, p, true);
    let got = transmit(&mut q, 4000, 8);
    assert_eq!((got.len(), got[0].0, got[0].1), (1, p, true));
    ack(&mut q, 4100, p);
    assert_eq!((q.unconfirmed(), q.next_deadline()), (0, None));
    // At shutdown the tail is asked about at once.
    let mut tx = TxBatch::new(64, 256);
    send(&mut q, 5000, &mut tx, 7);
    q.confirm_promptly();
    assert_eq!(q.next_deadline(), Some(5000));
}
