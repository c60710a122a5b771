//! Retransmission against a real RNIC: Linux Soft-RoCE (rdma_rxe) in a QEMU VM.
//!
//! The translator pipeline sends Key-Increment FETCH_ADDs to rxe over a lossy wire (frames
//! dropped on the way out), feeding rxe's ACKs and NAKs back. Its QP resends what was lost,
//! unchanged (go-back-N after rxe's NAK "PSN sequence error", the oldest frame or a fresh probe
//! after a timeout, with AckReq patched in and the ICRC recomputed where needed). rxe must
//! accept every resent frame and never run an increment twice: its memory ends with exactly
//! the sums sent.
//!
//! Skips with a printed reason where QEMU or the VM image is unavailable.

use std::io::Write;
use std::net::SocketAddrV4;
use std::time::{Duration, Instant};

use dta_proto::batch::{Datagram, TxBatch};
use dta_proto::hash::{HashProfile, KeyHasher, MAX_REDUNDANCY};
use dta_proto::layout::CounterLayout;
use dta_proto::meta::{QpMeta, StoreKind, StoreMeta};
use dta_proto::wire::ethernet::MacAddr;
use dta_proto::wire::ib::{Psn, Qpn};
use dta_proto::wire::report::{ParseConfig, Primitive, Priority, Profile, Report, ReportHeader};
use dta_proto::wire::roce::{parse_frame, L2L4_LEN};
use dta_proto::Key;
use dta_tests::rxe_vm::{vm_available, Target, Vm, GUEST_IP, GUEST_MAC, HOST_IP, HOST_MAC};
use dta_translator::datapath::pipeline::{
    CollectorTarget, Pipeline, PipelineConfig, QpBinding, RateLimit, Route,
};
use dta_translator::datapath::qp::QpTuning;

const PEER_QPN: u32 = 0x100;
const START_PSN: u32 = 0xFF_FF00;

fn skip(reason: &str) {
    let _ = writeln!(std::io::stderr(), "SKIP: {reason}");
}

fn pipeline_for(t: &Target, slots: u32) -> Pipeline {
    let meta = StoreMeta {
        name: "ctr".into(),
        addr: t.vaddr,
        len: t.len as u64,
        rkey: t.rkey,
        qps: vec![QpMeta {
            qpn: t.qpn,
            psn: START_PSN,
            peer_qpn: PEER_QPN,
        }],
        redundancy: None,
        kind: StoreKind::KeyIncrement {
            slots,
            hash: HashProfile::Independent,
        },
    };
    let pc = PipelineConfig {
        worker: 0,
        workers: 1,
        parse: ParseConfig::default(),
        max_redundancy: 4,
        l2_frames: true,
        local: SocketAddrV4::new(HOST_IP, 4791),
        local_mac: MacAddr(HOST_MAC),
        nack_port: 40044,
        append_flush_ns: 1_000_000_000,
        postcard_flush_ns: 0,
        postcard_cache_slots: 64,
        postcard_redundancy: 1,
        qp: QpTuning {
            ack_every: 8,
            ack_timeout_ns: 100_000_000,
            rto_min_ns: 50_000_000,
            rto_max_ns: 400_000_000,
            broken_after_ns: 30_000_000_000,
            // The VM answers slowly (tens of ms) and loses frames of large bursts itself.
            retransmit_window: 8192,
            ..QpTuning::default()
        },
        rate: RateLimit::default(),
        backlog: 16,
        max_reporters: 4,
        route_keywrite: Route::None,
        route_keyincrement: Route::Single(0),
        route_postcard: Route::None,
        sketch: Default::default(),
    };
    let target = CollectorTarget {
        roce: SocketAddrV4::new(GUEST_IP, 4791),
        mac: MacAddr(GUEST_MAC),
        stores: vec![(
            meta,
            QpBinding {
                local_qpn: Qpn::new(PEER_QPN),
                remote_qpn: Qpn::new(t.qpn),
                start_psn: Psn::new(START_PSN),
            },
        )],
    };
    Pipeline::new(pc, &[target]).expect("pipeline builds")
}

#[test]
fn rxe_accepts_resent_frames_and_runs_each_increment_once() {
    let img = match vm_available() {
        Ok(i) => i,
        Err(e) => return skip(&e),
    };
    let vm = Vm::boot(&img).expect("VM boots");
    let t = vm
        .start_target(PEER_QPN, START_PSN, "")
        .expect("target starts");
    let slots = t.len / 8;
    let mut p = pipeline_for(&t, slots);
    let hasher = KeyHasher::new(HashProfile::Independent, slots).unwrap();
    let layout = CounterLayout::new(slots).unwrap();
    // 24 keys on distinct slots, 240 increments each of 1..=240.
    let mut keys = Vec::new();
    let mut used = std::collections::HashSet::new();
    for k in 0u32.. {
        let mut s = [0u32; MAX_REDUNDANCY];
        hasher.slots(&Key::new(&k.to_be_bytes()).unwrap(), 1, &mut s);
        if used.insert(s[0]) {
            keys.push((k, s[0]));
        }
        if keys.len() == 24 {
            break;
        }
    }
    let reports: Vec<Vec<u8>> = (0..240u64)
        .flat_map(|i| keys.iter().map(move |&(k, _)| (k, i)))
        .map(|(k, i)| {
            let r = Report {
                header: ReportHeader {
                    profile: Profile::Extended,
                    immediate: false,
                    retransmittable: false,
                    seq: Some(0),
                    priority: Priority::Medium,
                },
                primitive: Primitive::KeyIncrement {
                    redundancy: 1,
                    key: Key::new(&k.to_be_bytes()).unwrap(),
                    delta: i + 1,
                },
            };
            let mut b = vec![0u8; 128];
            let n = r.emit(Profile::Extended, &mut b).unwrap();
            b.truncate(n);
            b
        })
        .collect();
    let src = SocketAddrV4::new(std::net::Ipv4Addr::new(10, 77, 0, 9), 5000);
    let start = Instant::now();
    let now = || start.elapsed().as_nanos() as u64;
    let mut tx = TxBatch::new(4096, 2048);
    let (mut sent, mut dropped, mut quiet) = (0u64, 0u64, 0);
    let mut next_report = 0;
    for round in 0..1000 {
        // Reports go in 24 bursts of 240; the wire loses every 9th frame during the first 16.
        if round % 3 == 0 && next_report < reports.len() {
            let end = (next_report + 240).min(reports.len());
            let dgrams: Vec<Datagram<'_>> = reports[next_report..end]
                .iter()
                .map(|b| Datagram {
                    src,
                    dst: SocketAddrV4::new(HOST_IP, 40040),
                    ip: None,
                    payload: b,
                })
                .collect();
            p.handle_reports(now(), &dgrams, &mut tx);
            next_report = end;
        }
        let lossy = next_report <= 16 * 240;
        for i in 0..tx.len() {
            sent += 1;
            if lossy && sent % 9 == 4 {
                dropped += 1;
                continue;
            }
            vm.send_frame(tx.frame(i)).unwrap();
        }
        tx.clear();
        let answers = vm
            .recv_until(Duration::from_millis(30), |_| false)
            .unwrap_or_default();
        for a in &answers {
            if let Ok(pf) = parse_frame(a) {
                if pf.udp.dst_port != 4791 {
                    continue;
                }
                let d = Datagram {
                    src: SocketAddrV4::new(pf.ip.src, pf.udp.src_port),
                    dst: SocketAddrV4::new(HOST_IP, 4791),
                    ip: None,
                    payload: &a[L2L4_LEN..],
                };
                p.handle_responses(now(), &[d], &mut tx);
            }
        }
        p.poll(now(), &mut tx);
        if next_report == reports.len() && tx.is_empty() && p.next_deadline().is_none() {
            quiet += 1;
            if quiet == 5 {
                break;
            }
        } else {
            quiet = 0;
        }
    }
    let (_, _, q) = p.qp_stats().next().unwrap();
    assert!(dropped > 100, "the wire lost frames: {dropped}");
    assert!(
        q.retransmit_events > 0 && q.retransmitted_frames >= dropped,
        "lost frames were resent: {q:?}"
    );
    assert_eq!((q.psn_skipped, q.retx_overruns), (0, 0), "{q:?}");
    assert_eq!(p.next_deadline(), None, "everything confirmed: {q:?}");
    let mem = vm.dump(0, t.len).unwrap();
    let total: u64 = (1..=240).sum();
    for &(k, slot) in &keys {
        let o = layout.slot_offset(slot) as usize;
        let v = u64::from_le_bytes(mem[o..o + 8].try_into().unwrap());
        assert_eq!(
            v, total,
            "key {k}: rxe ran every increment exactly once ({q:?})"
        );
    }
    let _ = writeln!(
        std::io::stderr(),
        "FIGURE rxe retransmission: {sent} frames on the wire, {dropped} lost, {} resent in {} rounds, {} probes, {} ACK timeouts",
        q.retransmitted_frames,
        q.retransmit_events,
        q.probes,
        q.ack_timeouts
    );
}
