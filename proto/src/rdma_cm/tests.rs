use super::*;
use crate::wire::cm::parse_cm;
use crate::wire::mad::{CmDrep, CmRep};

const US: SocketAddrV4 = SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 1), 4791);
const PEER: SocketAddrV4 = SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 2), 4791);
const OTHER: SocketAddrV4 = SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 3), 4791);
const MAC: MacAddr = MacAddr([2, 0, 0, 0, 0, 2]);

fn cfg() -> InitiatorConfig {
    InitiatorConfig {
        req_timeout_ns: 100,
        req_tries: 3,
        dreq_timeout_ns: 50,
        dreq_tries: 2,
        ..InitiatorConfig::new(US, 7)
    }
}

/// The CM messages in `tx` (with their destinations), and `tx` emptied.
fn sent(tx: &mut TxBatch) -> Vec<(SocketAddrV4, u64, CmMessage)> {
    let out = (0..tx.len())
        .map(|i| {
            let p = parse_cm(tx.payload(i)).expect("a CM MAD");
            (tx.dest(i), p.hdr.tid, p.msg)
        })
        .collect();
    tx.clear();
    out
}

/// `msg` as the peer at `from` sends it.
fn from_peer(from: SocketAddrV4, tid: u64, msg: CmMessage, out: &mut TxBatch) -> usize {
    let ep = RoceEndpoint {
        src_ip: *from.ip(),
        dst_ip: *US.ip(),
        src_port: from.port(),
        dst_port: US.port(),
        ..RoceEndpoint::default()
    };
    let hdr = MadHeaderRepr::cm_send(tid, 0);
    out.push_with(US, L2L4_LEN, |b| {
        build_cm_frame(&ep, Psn::new(0), &hdr, &msg, b)
    });
    out.len() - 1
}

fn deliver(
    cm: &mut Initiator<u16>,
    from: SocketAddrV4,
    tid: u64,
    msg: CmMessage,
    tx: &mut TxBatch,
) {
    let mut wire = TxBatch::new(4, 512);
    let i = from_peer(from, tid, msg, &mut wire);
    let d = Datagram {
        src: from,
        dst: US,
        ip: None,
        payload: wire.payload(i),
    };
    cm.handle(&d, tx);
}

fn events(cm: &mut Initiator<u16>) -> Vec<Event<u16>> {
    std::iter::from_fn(|| cm.poll_event()).collect()
}

/// The REQ `cm` sent for a connection, answered with a REP from `peer`'s QP 0x55.
fn rep_for(req: &CmReq) -> CmMessage {
    CmMessage::Rep(CmRep {
        local_comm_id: 0xabc0 + req.local_comm_id,
        remote_comm_id: req.local_comm_id,
        local_qpn: 0x55,
        starting_psn: 0x1234,
        responder_resources: 4,
        ..CmRep::default()
    })
}

fn connected(cm: &mut Initiator<u16>, key: u16, tx: &mut TxBatch) -> CmReq {
    cm.connect(
        key,
        (PEER, MAC),
        9000 + key,
        Qpn::new(0x100 + key as u32),
        Psn::new(1),
        0,
        tx,
    );
    let s = sent(tx);
    let (_, tid, CmMessage::Req(req)) = s[0] else {
        panic!("{s:?}");
    };
    deliver(cm, PEER, tid, rep_for(&req), tx);
    sent(tx);
    events(cm);
    req
}

#[test]
fn a_rep_establishes_once_and_a_repeated_rep_gets_the_rtu_again() {
    let mut cm = Initiator::new(cfg());
    let mut tx = TxBatch::new(16, 512);
    cm.connect(
        1,
        (PEER, MAC),
        9001,
        Qpn::new(0x101),
        Psn::new(77),
        0,
        &mut tx,
    );
    let s = sent(&mut tx);
    assert_eq!(s.len(), 1);
    let (dest, tid, CmMessage::Req(req)) = s[0] else {
        panic!("{s:?}");
    };
    assert_eq!(dest, PEER);
    assert_eq!((req.local_qpn, req.starting_psn), (0x101, 77));
    assert_eq!(cm.next_deadline(), Some(100));
    assert_eq!(cm.connecting(), 1);

    for round in 0..2 {
        deliver(&mut cm, PEER, tid, rep_for(&req), &mut tx);
        let s = sent(&mut tx);
        assert!(
            matches!(s[..], [(PEER, t, CmMessage::Rtu(r))] if t == tid && r.local_comm_id == req.local_comm_id),
            "{s:?}"
        );
        let ev = events(&mut cm);
        if round == 0 {
            let [Event::Established {
                key: 1,
                local_qpn,
                ref rep,
            }] = ev[..]
            else {
                panic!("{ev:?}");
            };
            assert_eq!(local_qpn, Qpn::new(0x101));
            assert_eq!(rep.local_qpn, 0x55);
        } else {
            assert!(ev.is_empty(), "{ev:?}");
        }
    }
    assert!(cm.is_established(1));
    assert_eq!(cm.next_deadline(), None);
    assert_eq!((cm.counters.cm_rep, cm.counters.cm_established), (2, 1));
    // A REP from another address names no connection of ours.
    deliver(&mut cm, OTHER, tid, rep_for(&req), &mut tx);
    assert!(sent(&mut tx).is_empty());
    assert_eq!(cm.counters.cm_invalid, 1);
}

#[test]
fn silent_peers_fail_every_attempt_in_one_poll() {
    let mut cm = Initiator::new(cfg());
    let mut tx = TxBatch::new(16, 512);
    for key in 1..=3 {
        cm.connect(
            key,
            (PEER, MAC),
            9000,
            Qpn::new(0x100 + key as u32),
            Psn::new(1),
            0,
            &mut tx,
        );
    }
    assert_eq!(sent(&mut tx).len(), 3);
    cm.poll(99, &mut tx);
    assert!(tx.is_empty());
    cm.poll(100, &mut tx);
    assert_eq!(sent(&mut tx).len(), 3, "retransmitted");
    cm.poll(200, &mut tx);
    assert_eq!(sent(&mut tx).len(), 3);
    assert!(events(&mut cm).is_empty());
    cm.poll(300, &mut tx);
    assert!(tx.is_empty());
    let ev = events(&mut cm);
    assert_eq!(
        ev,
        (1..=3)
            .map(|key| Event::Failed {
                key,
                cause: Failure::Timeout
            })
            .collect::<Vec<_>>()
    );
    assert_eq!(cm.counters.cm_req_sent, 9);
    assert_eq!(cm.counters.cm_timeouts, 3);
    assert_eq!(cm.next_deadline(), None);
}

#[test]
fn rejections_and_refused_reps_fail_the_attempt() {
    let mut cm = Initiator::new(InitiatorConfig {
        accept_rep: |rep| rep.responder_resources > 0,
        ..cfg()
    });
    let mut tx = TxBatch::new(16, 512);
    cm.connect(
        1,
        (PEER, MAC),
        9001,
        Qpn::new(0x101),
        Psn::new(1),
        0,
        &mut tx,
    );
    cm.connect(
        2,
        (PEER, MAC),
        9002,
        Qpn::new(0x102),
        Psn::new(1),
        0,
        &mut tx,
    );
    let s = sent(&mut tx);
    let (CmMessage::Req(r1), CmMessage::Req(r2)) = (s[0].2, s[1].2) else {
        panic!("{s:?}");
    };
    deliver(
        &mut cm,
        PEER,
        s[0].1,
        CmMessage::Rej(CmRej {
            remote_comm_id: r1.local_comm_id,
            reason: rej_reason::INVALID_SERVICE_ID,
            ..CmRej::default()
        }),
        &mut tx,
    );
    assert!(tx.is_empty());
    let CmMessage::Rep(mut rep) = rep_for(&r2) else {
        unreachable!()
    };
    rep.responder_resources = 0;
    deliver(&mut cm, PEER, s[1].1, CmMessage::Rep(rep), &mut tx);
    let back = sent(&mut tx);
    assert!(
        matches!(back[..], [(PEER, _, CmMessage::Rej(j))] if j.msg_rejected == MSG_REP
            && j.reason == rej_reason::CONSUMER_REJECT && j.remote_comm_id == rep.local_comm_id),
        "{back:?}"
    );
    assert_eq!(
        events(&mut cm),
        [
            Event::Failed {
                key: 1,
                cause: Failure::Rejected(rej_reason::INVALID_SERVICE_ID)
            },
            Event::Failed {
                key: 2,
                cause: Failure::RepRefused
            }
        ]
    );
    assert!(!cm.is_live(1) && !cm.is_live(2));
    assert_eq!(cm.counters.cm_rep_refused, 1);
}

#[test]
fn disconnecting_retransmits_the_dreq_until_the_drep() {
    let mut cm = Initiator::new(cfg());
    let mut tx = TxBatch::new(16, 512);
    let req = connected(&mut cm, 1, &mut tx);
    cm.disconnect(1, 1_000, &mut tx);
    let s = sent(&mut tx);
    let [(PEER, tid, CmMessage::Dreq(dreq))] = s[..] else {
        panic!("{s:?}");
    };
    assert_eq!(dreq.remote_qpn_eecn, 0x55);
    assert_eq!(dreq.local_comm_id, req.local_comm_id);
    assert!(cm.closing() && !cm.is_live(1));
    assert_eq!(cm.next_deadline(), Some(1_050));
    cm.poll(1_050, &mut tx);
    assert_eq!(sent(&mut tx).len(), 1, "DREQ again");
    deliver(
        &mut cm,
        PEER,
        tid,
        CmMessage::Drep(CmDrep {
            remote_comm_id: req.local_comm_id,
            ..CmDrep::default()
        }),
        &mut tx,
    );
    assert_eq!(
        events(&mut cm),
        [Event::Closed {
            key: 1,
            confirmed: true
        }]
    );
    assert!(!cm.closing());
    assert_eq!((cm.counters.cm_dreq_sent, cm.counters.cm_drep), (2, 1));

    // Unanswered: given up after dreq_tries.
    connected(&mut cm, 2, &mut tx);
    cm.disconnect_all(2_000, &mut tx);
    cm.poll(2_050, &mut tx);
    cm.poll(2_100, &mut tx);
    assert_eq!(sent(&mut tx).len(), 2);
    assert_eq!(
        events(&mut cm),
        [Event::Closed {
            key: 2,
            confirmed: false
        }]
    );
    assert_eq!(cm.counters.cm_dreq_timeouts, 1);
    // An attempt the peer never answered is forgotten without a DREQ.
    cm.connect(
        3,
        (PEER, MAC),
        9003,
        Qpn::new(0x103),
        Psn::new(1),
        3_000,
        &mut tx,
    );
    sent(&mut tx);
    cm.disconnect(3, 3_001, &mut tx);
    assert!(tx.is_empty() && !cm.closing() && !cm.is_live(3));
}

#[test]
fn a_peer_dreq_is_answered_and_fails_the_connection() {
    let mut cm = Initiator::new(cfg());
    let mut tx = TxBatch::new(16, 512);
    let req = connected(&mut cm, 4, &mut tx);
    let dreq = CmDreq {
        local_comm_id: 0xabc0 + req.local_comm_id,
        remote_comm_id: req.local_comm_id,
        remote_qpn_eecn: 0x104,
        ..CmDreq::default()
    };
    // From another source port: answered at the peer's address all the same.
    let from = SocketAddrV4::new(*PEER.ip(), 50_000);
    deliver(&mut cm, from, 0x77, CmMessage::Dreq(dreq), &mut tx);
    let s = sent(&mut tx);
    assert!(
        matches!(s[..], [(PEER, 0x77, CmMessage::Drep(d))] if d.remote_comm_id == dreq.local_comm_id),
        "{s:?}"
    );
    assert_eq!(
        events(&mut cm),
        [Event::Failed {
            key: 4,
            cause: Failure::Disconnected
        }]
    );
    // A DREQ for nothing we know is still answered.
    deliver(&mut cm, from, 0x78, CmMessage::Dreq(dreq), &mut tx);
    assert_eq!(sent(&mut tx).len(), 1);
    assert!(events(&mut cm).is_empty());
    assert_eq!(cm.counters.cm_dreq_received, 2);
}

#[test]
fn connecting_a_key_again_closes_its_connection_first() {
    let mut cm = Initiator::new(cfg());
    let mut tx = TxBatch::new(16, 512);
    let old = connected(&mut cm, 5, &mut tx);
    cm.connect(
        5,
        (PEER, MAC),
        9005,
        Qpn::new(0x205),
        Psn::new(9),
        10,
        &mut tx,
    );
    let s = sent(&mut tx);
    assert!(
        matches!(s[..], [(_, _, CmMessage::Dreq(d)), (_, _, CmMessage::Req(r))]
            if d.local_comm_id == old.local_comm_id && r.local_qpn == 0x205),
        "{s:?}"
    );
    assert!(cm.is_live(5) && cm.closing() && !cm.is_established(5));
    // The old connection's REJ only ends the closing.
    deliver(
        &mut cm,
        PEER,
        1,
        CmMessage::Rej(CmRej {
            remote_comm_id: old.local_comm_id,
            reason: rej_reason::STALE_CONNECTION,
            ..CmRej::default()
        }),
        &mut tx,
    );
    assert_eq!(
        events(&mut cm),
        [Event::Closed {
            key: 5,
            confirmed: true
        }]
    );
    assert!(cm.is_live(5));
    cm.forget(5);
    assert!(!cm.is_live(5));
    assert_eq!(cm.next_deadline(), None);
}
