//! The datapath under stress (issue 13, item 1): output room never decides whether input is
//! counted, a stalled collector draws no spurious resends, an idle QP is not a silent one, and
//! a store whose layout does not fit its region is refused.
//!
//! Each test fails on the code before the datapath rewrite (commit b0b73b5):
//! - `a_full_transmit_batch_never_loses_reports`: `handle_reports` returned early when the
//!   transmit batch filled with two go-back-N rounds, and the rest of the burst vanished
//!   uncounted;
//! - `a_stalled_collector_draws_no_go_back_n_round`: the ACK of an AckReq'd frame that
//!   outlasted the RTO was taken for the answer to the resent oldest frame, and everything
//!   sent after it went again (hundreds of duplicates);
//! - `a_minute_idle_does_not_break_the_qp`: the silence clock was left running after the last
//!   answer, and the first timer after an idle minute declared the QP broken;
//! - `a_store_larger_than_its_region_is_refused`: the pipeline accepted any metadata and would
//!   have written past the region.

use std::net::{Ipv4Addr, SocketAddrV4};

use dta_collector::config::StoreConfig;
use dta_proto::batch::{Datagram, TxBatch};
use dta_proto::hash::HashProfile;
use dta_proto::meta::{QpMeta, StoreKind, StoreMeta};
use dta_proto::wire::ethernet::MacAddr;
use dta_proto::wire::ib::{opcode, AethRepr, BthRepr, NakCode, Psn, Qpn, Syndrome};
use dta_proto::wire::report::{Primitive, Profile, Report};
use dta_proto::wire::roce::{build_frame, RoceEndpoint, L2L4_LEN};
use dta_proto::{Key, Value};
use dta_tests::harness::{extended_header, keywrite_store, Harness, HarnessOptions};
use dta_translator::datapath::pipeline::{
    CollectorTarget, Pipeline, PipelineConfig, QpBinding, Route,
};

const MS: u64 = 1_000_000;
const TRANSLATOR: SocketAddrV4 = SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 101), 4791);
const COLLECTOR: SocketAddrV4 = SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 51), 4791);
const REPORTER: SocketAddrV4 = SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 200), 40041);
const REPORT_DST: SocketAddrV4 = SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 101), 40040);

fn kw_meta(name: &str, addr: u64, len: u64) -> StoreMeta {
    StoreMeta {
        name: name.into(),
        addr,
        len,
        rkey: 0x1234,
        qps: vec![],
        redundancy: None,
        kind: StoreKind::KeyWrite {
            slots: 1 << 16,
            slot_size: 16,
            hash: HashProfile::Independent,
        },
    }
}

fn binding(i: u32) -> QpBinding {
    QpBinding {
        local_qpn: Qpn::new(0x100 + i),
        remote_qpn: Qpn::new(0x11 + i),
        start_psn: Psn::new(1000 * i),
    }
}

/// A one-worker pipeline with two Key-Write stores, reports split between them by key hash.
fn two_store_pipeline() -> Pipeline {
    let mut cfg = PipelineConfig::defaults(TRANSLATOR, MacAddr([2, 0, 0, 0, 0, 1]));
    cfg.route_keywrite = Route::ByKeyHash(vec![0, 1]);
    let target = CollectorTarget {
        roce: COLLECTOR,
        mac: MacAddr([2, 0, 0, 0, 0, 0x51]),
        stores: vec![
            (kw_meta("a", 0x10_0000_0000, 16 << 16), binding(0)),
            (kw_meta("b", 0x20_0000_0000, 16 << 16), binding(1)),
        ],
    };
    Pipeline::new(cfg, &[target]).expect("pipeline builds")
}

fn kw_payloads(from: u32, n: u32) -> Vec<Vec<u8>> {
    (from..from + n)
        .map(|i| {
            let r = Report {
                header: extended_header(i),
                primitive: Primitive::KeyWrite {
                    redundancy: 2,
                    key: Key::new(&i.to_be_bytes()).unwrap(),
                    value: Value::new(&[i as u8; 8]).unwrap(),
                },
            };
            let mut b = vec![0u8; 64];
            let n = r.emit(Profile::Extended, &mut b).unwrap();
            b.truncate(n);
            b
        })
        .collect()
}

fn burst(payloads: &[Vec<u8>]) -> Vec<Datagram<'_>> {
    payloads
        .iter()
        .map(|p| Datagram {
            src: REPORTER,
            dst: REPORT_DST,
            ip: None,
            payload: p,
        })
        .collect()
}

/// The responder's NAK "PSN sequence error" naming `psn`, to our QP `local_qpn`, as a UDP
/// payload.
fn nak(local_qpn: Qpn, psn: Psn) -> Vec<u8> {
    let ep = RoceEndpoint {
        src_ip: *COLLECTOR.ip(),
        dst_ip: *TRANSLATOR.ip(),
        ..RoceEndpoint::default()
    };
    let bth = BthRepr::rc(opcode::RC_ACKNOWLEDGE, local_qpn, psn, false);
    let aeth = AethRepr {
        syndrome: Syndrome::Nak(NakCode::PsnSequenceError),
        msn: 0,
    };
    let mut ext = [0u8; 4];
    aeth.emit(&mut dta_proto::wire::ib::Aeth::new_unchecked(&mut ext[..]));
    let mut f = vec![0u8; 256];
    let n = build_frame(&ep, &bth, &ext, &[], &mut f);
    f[L2L4_LEN..n].to_vec()
}

#[test]
fn a_full_transmit_batch_never_loses_reports() {
    let mut p = two_store_pipeline();
    // The worker's transmit batch: room for a full burst (256 reports) and 256 more frames.
    let per_report = p.frames_per_report_max();
    let mut tx = TxBatch::new(256 * per_report + 256, 2048);
    // Fill both QPs' retransmission rings (1,024 frames each) with unconfirmed frames: 1,100
    // reports of N = 2 spread over the two stores.
    let first = kw_payloads(0, 1100);
    for chunk in first.chunks(256) {
        let b = burst(chunk);
        p.handle_reports(1_000, &b, &mut tx);
        tx.clear();
    }
    assert_eq!(p.counters().rx_datagrams, 1100);
    // Both collectors ask for everything again from the oldest frame each ring holds: two
    // go-back-N rounds of up to 1,024 frames, more than the batch has room for.
    let starts: Vec<(Qpn, Psn)> = p
        .qp_stats()
        .map(|(_, qpn, st)| {
            let start = if qpn == Qpn::new(0x100) { 0 } else { 1000 };
            (
                qpn,
                Psn::new(start).add((st.frames as u32).saturating_sub(1024)),
            )
        })
        .collect();
    let naks: Vec<Vec<u8>> = starts.iter().map(|&(q, psn)| nak(q, psn)).collect();
    let responses: Vec<Datagram<'_>> = naks
        .iter()
        .map(|n| Datagram {
            src: COLLECTOR,
            dst: TRANSLATOR,
            ip: None,
            payload: n,
        })
        .collect();
    p.handle_responses(2_000, &responses, &mut tx);
    // A full burst arrives in the same receive, behind the NAKs.
    let second = kw_payloads(5000, 256);
    let b = burst(&second);
    p.handle_reports(2_000, &b, &mut tx);
    let c = *p.counters();
    assert_eq!(
        c.rx_datagrams,
        1100 + 256,
        "every datagram of the burst is counted, whatever room the transmit batch had"
    );
    assert_eq!(
        c.translated + c.dropped() + p.pending_reports(),
        c.rx_datagrams,
        "each report is translated, pending or dropped with a reason: {c:?}"
    );
}

fn kw_store() -> StoreConfig {
    keywrite_store(1 << 16, 16, 1)
}

fn kw_reports(from: u32, n: u32) -> Vec<Report> {
    (from..from + n)
        .map(|i| Report {
            header: extended_header(i),
            primitive: Primitive::KeyWrite {
                redundancy: 1,
                key: Key::new(&i.to_be_bytes()).unwrap(),
                value: Value::new(&[7; 8]).unwrap(),
            },
        })
        .collect()
}

#[test]
fn a_stalled_collector_draws_no_go_back_n_round() {
    let mut h = Harness::new(vec![kw_store()], HarnessOptions::default());
    let mut n = 0;
    // 20 ms of traffic at 100 reports per millisecond: round trips are measured.
    for _ in 0..20 {
        h.send(&kw_reports(n, 100), Profile::Extended);
        n += 100;
        h.advance(MS);
    }
    // The collector is descheduled for 8 ms (its receive queue holds what arrives) while
    // traffic goes on: several RTOs pass without an answer.
    h.imp.stalled = true;
    for _ in 0..8 {
        h.send(&kw_reports(n, 100), Profile::Extended);
        n += 100;
        h.advance(MS);
    }
    h.resume();
    for _ in 0..20 {
        h.send(&kw_reports(n, 100), Profile::Extended);
        n += 100;
        h.advance(MS);
    }
    h.advance(100 * MS);
    let dup = h.rnic.counters().duplicate_request;
    let resent: u64 = h
        .pipeline
        .qp_stats()
        .map(|(_, _, s)| s.retransmitted_frames)
        .sum();
    assert_eq!(h.wire_drops, 0);
    // Nothing was lost: at most the odd frame resent to ask where the responder stands, never
    // a round of everything sent during the stall (800 frames).
    assert!(
        dup <= 4 && resent <= 4,
        "duplicates at the responder {dup}, frames resent {resent}"
    );
    assert_eq!(h.pipeline.broken_stores().count(), 0);
}

#[test]
fn a_minute_idle_does_not_break_the_qp() {
    let mut h = Harness::new(vec![kw_store()], HarnessOptions::default());
    // A little traffic (fewer frames than ack_every: only the tail timer asks for an ACK).
    h.send(&kw_reports(0, 5), Profile::Extended);
    h.advance(100 * MS);
    assert_eq!(h.pipeline.broken_stores().count(), 0);
    // A minute of silence, then a few more reports.
    h.advance(60_000 * MS);
    h.send(&kw_reports(5, 5), Profile::Extended);
    h.advance(100 * MS);
    assert_eq!(
        h.pipeline.broken_stores().count(),
        0,
        "an idle QP is not a silent collector"
    );
    let c = *h.pipeline.counters();
    assert_eq!((c.translated, c.drop_qp_broken), (10, 0));
}

#[test]
fn a_store_larger_than_its_region_is_refused() {
    let mut cfg = PipelineConfig::defaults(TRANSLATOR, MacAddr([2, 0, 0, 0, 0, 1]));
    cfg.route_keywrite = Route::Single(0);
    let target = |meta: StoreMeta| CollectorTarget {
        roce: COLLECTOR,
        mac: MacAddr([2, 0, 0, 0, 0, 0x51]),
        stores: vec![(
            StoreMeta {
                qps: vec![QpMeta {
                    qpn: 0x11,
                    psn: 0,
                    peer_qpn: 0x100,
                }],
                ..meta
            },
            binding(0),
        )],
    };
    // 65,536 slots of 16 bytes need 1 MiB.
    assert!(Pipeline::new(cfg.clone(), &[target(kw_meta("a", 0x1000, 1 << 20))]).is_ok());
    assert!(
        Pipeline::new(cfg.clone(), &[target(kw_meta("a", 0x1000, (1 << 20) - 16))]).is_err(),
        "a region one slot too short"
    );
    assert!(
        Pipeline::new(cfg, &[target(kw_meta("a", u64::MAX - 4096, 1 << 20))]).is_err(),
        "addresses that overflow"
    );
}
