//! Conformance against a real RNIC implementation: Linux Soft-RoCE (rdma_rxe) in a QEMU VM.
//!
//! 1. The translator pipeline's own frames (Key-Write N=2, Append batches) are sent to rxe and
//!    must land in the guest's memory region exactly where `proto`'s layout says, and the same
//!    frames replayed into our software RNIC must produce the same memory image.
//! 2. One hand-ordered frame sequence (in order, gap, silent drop, duplicate, bad ICRC, atomic,
//!    wrong R_Key, after-error) goes to rxe and to our software RNIC; both must answer with the
//!    same ACK/NAK sequence (opcode, PSN, syndrome, MSN, atomic original value).
//!
//! Skips with a printed reason where QEMU or the VM image is unavailable.

use std::io::Write;
use std::net::SocketAddrV4;
use std::sync::Arc;
use std::time::Duration;

use dta_collector::memory::Region;
use dta_collector::rnic::responder::{Access, DeviceConfig, QpConfig, Responder};
use dta_proto::batch::{Datagram, IpMeta, TxBatch};
use dta_proto::hash::{HashProfile, KeyHasher, MAX_REDUNDANCY};
use dta_proto::layout::{AppendFormat, AppendLayout, KeyWriteLayout};
use dta_proto::meta::{QpMeta, StoreKind, StoreMeta};
use dta_proto::wire::ethernet::MacAddr;
use dta_proto::wire::ib::{opcode as op, BthRepr, Psn, Qpn};
use dta_proto::wire::report::{ParseConfig, Primitive, Profile, Report};
use dta_proto::wire::roce::{build_frame, parse_frame, RoceEndpoint, L2L4_LEN};
use dta_proto::{Key, Value};
use dta_tests::harness::extended_header;
use dta_tests::rxe_vm::{vm_available, Target, Vm, GUEST_IP, GUEST_MAC, HOST_IP, HOST_MAC};
use dta_translator::datapath::pipeline::{
    CollectorTarget, Pipeline, PipelineConfig, QpBinding, RateLimit, Route,
};
use dta_translator::datapath::qp::QpTuning;

const PEER_QPN: u32 = 0x100;
const START_PSN: u32 = 0xF000;

fn skip(reason: &str) {
    let _ = writeln!(std::io::stderr(), "SKIP: {reason}");
}

fn host() -> SocketAddrV4 {
    SocketAddrV4::new(HOST_IP, 4791)
}
fn guest() -> SocketAddrV4 {
    SocketAddrV4::new(GUEST_IP, 4791)
}

/// A one-store pipeline writing into the target's memory region.
fn pipeline_for(t: &Target, kind: StoreKind) -> Pipeline {
    let meta = StoreMeta {
        name: "s".into(),
        addr: t.vaddr,
        len: t.len as u64,
        rkey: t.rkey,
        qps: vec![QpMeta {
            qpn: t.qpn,
            psn: START_PSN,
            peer_qpn: PEER_QPN,
        }],
        redundancy: None,
        kind,
    };
    let route = |k: &str| {
        if meta.kind.name() == k {
            Route::Single(0)
        } else {
            Route::None
        }
    };
    let pc = PipelineConfig {
        worker: 0,
        workers: 1,
        parse: ParseConfig::default(),
        max_redundancy: 4,
        l2_frames: true,
        local: host(),
        local_mac: MacAddr(HOST_MAC),
        nack_port: 40044,
        append_flush_ns: 1_000_000_000,
        postcard_flush_ns: 0,
        postcard_cache_slots: 64,
        postcard_redundancy: 1,
        qp: QpTuning {
            ack_every: 8,
            ack_timeout_ns: 10_000_000_000,
            ..QpTuning::default()
        },
        rate: RateLimit::default(),
        backlog: 16,
        max_reporters: 4,
        route_keywrite: route("keywrite"),
        route_keyincrement: route("keyincrement"),
        route_postcard: route("postcard"),
        sketch: Default::default(),
    };
    let target = CollectorTarget {
        roce: guest(),
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

/// Our software RNIC, configured exactly like the rxe target (same QPN, PSN, VA and R_Key are
/// emulated by rewriting nothing: the region is registered and frames are re-addressed).
struct Soft {
    rnic: Responder,
    region: Arc<Region>,
    qpn: Qpn,
    rkey: u32,
}

impl Soft {
    fn new(len: usize) -> Soft {
        let mut rnic = Responder::new(DeviceConfig {
            local: guest(),
            local_mac: MacAddr(GUEST_MAC),
            pmtu: 1024,
            l2_frames: true,
        });
        let region = Arc::new(Region::anonymous(len, false).unwrap());
        let rkey = rnic.register(region.clone(), Access::ALL).0;
        let qpn = rnic.create_qp(QpConfig {
            peer: host(),
            peer_mac: MacAddr(HOST_MAC),
            peer_qpn: Qpn::new(PEER_QPN),
            rq_psn: Psn::new(START_PSN),
            sq_psn: Psn::new(0),
            verify_icrc: true,
            recv_credits: 16,
        });
        Soft {
            rnic,
            region,
            qpn,
            rkey,
        }
    }

    /// Re-addresses a frame built for the rxe target (QPN, VA, R_Key) to this RNIC, keeping
    /// everything else, and re-seals it. `corrupt` flips an ICRC bit after sealing.
    fn readdress(&self, t: &Target, frame: &[u8], corrupt: bool) -> Vec<u8> {
        let p = parse_frame(frame).expect("well-formed");
        let mut bth: BthRepr = p.roce.bth;
        bth.dest_qp = self.qpn;
        let mut ext = vec![0u8; 64];
        let n = p.roce.emit_ext(&mut ext);
        ext.truncate(n);
        if p.roce.reth.is_some() || p.roce.atomic.is_some() {
            let va = u64::from_be_bytes(ext[0..8].try_into().unwrap());
            let rkey = u32::from_be_bytes(ext[8..12].try_into().unwrap());
            let va = va.wrapping_sub(t.vaddr).wrapping_add(self.region.addr());
            let rkey = if rkey == t.rkey {
                self.rkey
            } else {
                rkey ^ t.rkey ^ self.rkey
            };
            ext[0..8].copy_from_slice(&va.to_be_bytes());
            ext[8..12].copy_from_slice(&rkey.to_be_bytes());
        }
        let ep = RoceEndpoint {
            src_mac: MacAddr(HOST_MAC),
            dst_mac: MacAddr(GUEST_MAC),
            src_ip: p.ip.src,
            dst_ip: p.ip.dst,
            src_port: p.udp.src_port,
            dst_port: p.udp.dst_port,
            ttl: p.ip.ttl,
            tos: p.ip.tos,
            ident: p.ip.ident,
        };
        let mut out = vec![0u8; frame.len() + 64];
        let len = build_frame(&ep, &bth, &ext, p.roce.payload, &mut out);
        out.truncate(len);
        if corrupt {
            let l = out.len();
            out[l - 1] ^= 0x40;
        }
        out
    }

    fn deliver(&mut self, frame: &[u8]) -> Vec<Vec<u8>> {
        let mut tx = TxBatch::new(64, 2048);
        let p = parse_frame(frame).expect("well-formed");
        let d = Datagram {
            src: SocketAddrV4::new(p.ip.src, p.udp.src_port),
            dst: SocketAddrV4::new(p.ip.dst, p.udp.dst_port),
            ip: Some(IpMeta {
                ident: p.ip.ident,
                dont_frag: p.ip.dont_frag,
                ttl: p.ip.ttl,
                tos: p.ip.tos,
            }),
            payload: &frame[L2L4_LEN..],
        };
        self.rnic.handle(&d, &mut tx);
        (0..tx.len()).map(|i| tx.frame(i).to_vec()).collect()
    }
}

/// (opcode, PSN, syndrome byte, MSN, atomic original) of a response frame.
fn summary(f: &[u8]) -> (u8, u32, u8, u32, Option<u64>, Vec<u8>) {
    let p = parse_frame(f).expect("responses parse");
    let a = p.roce.aeth.expect("responses carry an AETH");
    (
        p.roce.bth.opcode,
        p.roce.bth.psn.value(),
        a.syndrome.to_byte(),
        a.msn,
        p.roce.atomic_ack.map(|x| x.orig),
        p.roce.payload.to_vec(),
    )
}

fn rxe_roundtrip(vm: &Vm, frame: &[u8], expect_reply: bool) -> Vec<Vec<u8>> {
    vm.send_frame(frame).unwrap();
    let wait = if expect_reply {
        Duration::from_secs(3)
    } else {
        Duration::from_millis(400)
    };
    let mut got = Vec::new();
    let frames = vm.recv_until(wait, |_| true).unwrap_or_default();
    for f in frames {
        if parse_frame(&f).is_ok_and(|p| p.udp.dst_port == 4791 || p.udp.src_port == 4791) {
            got.push(f);
        }
    }
    got
}

/// Runs reports through the pipeline, sends every frame to rxe (feeding responses back), and
/// returns the frames sent.
fn drive(vm: &Vm, p: &mut Pipeline, reports: &[Report]) -> Vec<Vec<u8>> {
    let mut tx = TxBatch::new(4096, 2048);
    let bufs: Vec<Vec<u8>> = reports
        .iter()
        .map(|r| {
            let mut b = vec![0u8; 128];
            let n = r.emit(Profile::Extended, &mut b).unwrap();
            b.truncate(n);
            b
        })
        .collect();
    let src = SocketAddrV4::new(std::net::Ipv4Addr::new(10, 77, 0, 9), 5000);
    let dgrams: Vec<Datagram<'_>> = bufs
        .iter()
        .map(|b| Datagram {
            src,
            dst: host(),
            ip: None,
            payload: b,
        })
        .collect();
    p.handle_reports(1, &dgrams, &mut tx);
    assert!(p.flush_all(2, &mut tx), "the batch holds every frame");
    let frames: Vec<Vec<u8>> = (0..tx.len()).map(|i| tx.frame(i).to_vec()).collect();
    for f in &frames {
        vm.send_frame(f).unwrap();
    }
    // Collect ACKs and hand them back to the pipeline.
    let acks = vm
        .recv_until(Duration::from_secs(3), |_| false)
        .unwrap_or_default();
    let mut tx2 = TxBatch::new(64, 2048);
    for a in &acks {
        if let Ok(pf) = parse_frame(a) {
            let d = Datagram {
                src: SocketAddrV4::new(pf.ip.src, pf.udp.src_port),
                dst: host(),
                ip: None,
                payload: &a[L2L4_LEN..],
            };
            p.handle_responses(3, &[d], &mut tx2);
        }
    }
    frames
}

#[test]
fn rxe_accepts_translator_frames_and_soft_rnic_agrees() {
    let img = match vm_available() {
        Ok(i) => i,
        Err(e) => return skip(&e),
    };
    let vm = Vm::boot(&img).expect("VM boots");

    // --- Key-Write, N = 2, into 512 slots of 8 bytes (the target's 4 KiB region).
    let t = vm
        .start_target(PEER_QPN, START_PSN, "")
        .expect("target starts");
    let slots = t.len / 8;
    let mut p = pipeline_for(
        &t,
        StoreKind::KeyWrite {
            slots,
            slot_size: 8,
            hash: HashProfile::Independent,
        },
    );
    let reports: Vec<Report> = (0..60u32)
        .map(|i| Report {
            header: extended_header(0),
            primitive: Primitive::KeyWrite {
                redundancy: 2,
                key: Key::new(&(0x0a00_0000 + i).to_be_bytes()).unwrap(),
                value: Value::new(&(i * 1000 + 7).to_be_bytes()).unwrap(),
            },
        })
        .collect();
    let frames = drive(&vm, &mut p, &reports);
    assert_eq!(frames.len(), 120);
    // The model image.
    let layout = KeyWriteLayout::new(slots, 8).unwrap();
    let hasher = KeyHasher::new(HashProfile::Independent, slots).unwrap();
    let mut model = vec![0u8; t.len as usize];
    for r in &reports {
        let Primitive::KeyWrite { key, value, .. } = r.primitive else {
            unreachable!()
        };
        let mut s = [0u32; MAX_REDUNDANCY];
        hasher.slots(&key, 2, &mut s);
        for &slot in &s[..2] {
            let o = layout.slot_offset(slot) as usize;
            layout.encode_slot(
                hasher.checksum(&key),
                value.as_bytes(),
                &mut model[o..o + 8],
            );
        }
    }
    let rxe_mem = vm.dump(0, t.len).unwrap();
    assert_eq!(
        rxe_mem, model,
        "rxe's memory holds exactly the Key-Write layout"
    );
    // Our software RNIC, fed the same frames, ends with the same image.
    let mut soft = Soft::new(t.len as usize);
    for f in &frames {
        soft.deliver(&soft.readdress(&t, f, false));
    }
    let mut soft_mem = vec![0u8; t.len as usize];
    soft.region.read(0, &mut soft_mem).unwrap();
    assert_eq!(soft_mem, model, "the software RNIC agrees with rxe");
    let qs: Vec<_> = p.qp_stats().collect();
    assert!(
        qs[0].2.acks > 0 && qs[0].2.nak_seq == 0,
        "rxe ACKed the pipeline's frames: {:?}",
        qs[0].2
    );

    // --- Append, batch 4 of 8-byte entries, sequenced, over a fresh QP.
    let t = vm
        .start_target(PEER_QPN, START_PSN, "")
        .expect("target restarts");
    let kind = StoreKind::Append {
        lists: 1,
        first_list: 0,
        capacity: 32,
        entry_size: 8,
        batch: 4,
        format: AppendFormat::Sequenced,
        list_stride: 512,
    };
    let mut p = pipeline_for(&t, kind);
    let reports: Vec<Report> = (0..50u64)
        .map(|i| Report {
            header: extended_header(0),
            primitive: Primitive::Append {
                list: 0,
                value: Value::new(&(0xA000 + i).to_le_bytes()).unwrap(),
            },
        })
        .collect();
    let frames = drive(&vm, &mut p, &reports);
    assert_eq!(frames.len(), 13, "12 full batches and one partial flush");
    let layout = AppendLayout::new(AppendFormat::Sequenced, 32, 8, 4).unwrap();
    let rxe_mem = vm.dump(0, layout.region_len() as u32).unwrap();
    let mut model = vec![0u8; layout.region_len() as usize];
    for s in 1..=13u64 {
        let j = layout.slot_for_seq(s);
        let o = layout.batch_offset(j) as usize;
        let count = if s == 13 { 2 } else { 4 };
        for e in 0..4 {
            let v = if e < count {
                (0xA000 + (s - 1) * 4 + e).to_le_bytes()
            } else {
                [0; 8]
            };
            model[o + 8 * e as usize..o + 8 * e as usize + 8].copy_from_slice(&v);
        }
        let to = layout.trailer_offset(j).unwrap() as usize;
        model[to..to + 8].copy_from_slice(&layout.encode_trailer(s, count as u16));
    }
    assert_eq!(rxe_mem, model, "rxe's memory holds exactly the Append ring");
}

#[test]
fn soft_rnic_answers_like_rxe() {
    let img = match vm_available() {
        Ok(i) => i,
        Err(e) => return skip(&e),
    };
    let vm = Vm::boot(&img).expect("VM boots");
    let t = vm
        .start_target(PEER_QPN, START_PSN, "")
        .expect("target starts");
    let mut soft = Soft::new(t.len as usize);
    let ep = RoceEndpoint {
        src_mac: MacAddr(HOST_MAC),
        dst_mac: MacAddr(GUEST_MAC),
        src_ip: HOST_IP,
        dst_ip: GUEST_IP,
        src_port: 4791,
        dst_port: 4791,
        ttl: 64,
        tos: 0,
        ident: 0,
    };
    let frame = |opc: u8, psn: u32, ext: &[u8], payload: &[u8]| -> Vec<u8> {
        let bth = BthRepr {
            opcode: opc,
            solicited: false,
            mig_req: true,
            pad_count: 0,
            tver: 0,
            pkey: 0xffff,
            fecn: false,
            becn: false,
            dest_qp: Qpn::new(t.qpn),
            ack_req: true,
            psn: Psn::new(psn),
        };
        let mut out = vec![0u8; 2048];
        let n = build_frame(&ep, &bth, ext, payload, &mut out);
        out.truncate(n);
        out
    };
    let reth = |off: u64, rkey: u32, len: u32| -> Vec<u8> {
        let mut r = (t.vaddr + off).to_be_bytes().to_vec();
        r.extend_from_slice(&rkey.to_be_bytes());
        r.extend_from_slice(&len.to_be_bytes());
        r
    };
    let atomic2 = |off: u64, swap_add: u64, compare: u64| -> Vec<u8> {
        let mut a = (t.vaddr + off).to_be_bytes().to_vec();
        a.extend_from_slice(&t.rkey.to_be_bytes());
        a.extend_from_slice(&swap_add.to_be_bytes());
        a.extend_from_slice(&compare.to_be_bytes());
        a
    };
    let atomic = |off: u64, add: u64| atomic2(off, add, 0);
    let mut imm_ext = reth(40, t.rkey, 8);
    imm_ext.extend_from_slice(&0xCAFE_F00Du32.to_be_bytes());
    let p = START_PSN;
    // (name, frame, corrupt the ICRC?, an answer expected from rxe?)
    let steps: Vec<(&str, Vec<u8>, bool, bool)> = vec![
        (
            "in order",
            frame(op::RC_RDMA_WRITE_ONLY, p, &reth(0, t.rkey, 8), b"aaaaaaaa"),
            false,
            true,
        ),
        (
            "gap",
            frame(
                op::RC_RDMA_WRITE_ONLY,
                p + 10,
                &reth(8, t.rkey, 8),
                b"bbbbbbbb",
            ),
            false,
            true,
        ),
        (
            "after gap",
            frame(
                op::RC_RDMA_WRITE_ONLY,
                p + 11,
                &reth(8, t.rkey, 8),
                b"cccccccc",
            ),
            false,
            false,
        ),
        (
            "duplicate",
            frame(op::RC_RDMA_WRITE_ONLY, p, &reth(0, t.rkey, 8), b"dddddddd"),
            false,
            true,
        ),
        (
            "bad ICRC",
            frame(
                op::RC_RDMA_WRITE_ONLY,
                p + 1,
                &reth(16, t.rkey, 8),
                b"eeeeeeee",
            ),
            true,
            false,
        ),
        (
            "resume",
            frame(
                op::RC_RDMA_WRITE_ONLY,
                p + 1,
                &reth(16, t.rkey, 8),
                b"ffffffff",
            ),
            false,
            true,
        ),
        (
            "fetch-add",
            frame(op::RC_FETCH_ADD, p + 2, &atomic(64, 5), &[]),
            false,
            true,
        ),
        (
            "fetch-add 2",
            frame(op::RC_FETCH_ADD, p + 3, &atomic(64, 0x1_0000_0000), &[]),
            false,
            true,
        ),
        (
            "duplicate atomic",
            frame(op::RC_FETCH_ADD, p + 2, &atomic(64, 5), &[]),
            false,
            true,
        ),
        (
            "read",
            frame(op::RC_RDMA_READ_REQUEST, p + 4, &reth(0, t.rkey, 24), &[]),
            false,
            true,
        ),
        (
            "compare-swap hit",
            frame(
                op::RC_COMPARE_SWAP,
                p + 5,
                &atomic2(64, 0xDEAD, 0x1_0000_0005),
                &[],
            ),
            false,
            true,
        ),
        (
            "compare-swap miss",
            frame(op::RC_COMPARE_SWAP, p + 6, &atomic2(64, 0xBEEF, 7), &[]),
            false,
            true,
        ),
        (
            "send",
            frame(op::RC_SEND_ONLY, p + 7, &[], b"hello, collector"),
            false,
            true,
        ),
        (
            "write with immediate",
            frame(op::RC_RDMA_WRITE_ONLY_IMM, p + 8, &imm_ext, b"iiiiiiii"),
            false,
            true,
        ),
        (
            "wrong R_Key",
            frame(
                op::RC_RDMA_WRITE_ONLY,
                p + 9,
                &reth(24, t.rkey ^ 0x4000, 8),
                b"gggggggg",
            ),
            false,
            true,
        ),
        (
            "after error",
            frame(
                op::RC_RDMA_WRITE_ONLY,
                p + 10,
                &reth(32, t.rkey, 8),
                b"hhhhhhhh",
            ),
            false,
            false,
        ),
    ];
    for (name, f, corrupt, want) in &steps {
        let mut to_rxe = f.clone();
        if *corrupt {
            let l = to_rxe.len();
            to_rxe[l - 1] ^= 0x40;
        }
        let rxe: Vec<_> = rxe_roundtrip(&vm, &to_rxe, *want)
            .iter()
            .map(|r| summary(r))
            .collect();
        let ours: Vec<_> = soft
            .deliver(&soft.readdress(&t, f, *corrupt))
            .iter()
            .map(|r| summary(r))
            .collect();
        assert_eq!(ours, rxe, "step {name:?}: our responses differ from rxe's");
        assert_eq!(
            !rxe.is_empty(),
            *want,
            "step {name:?}: rxe {}answered",
            if rxe.is_empty() { "never " } else { "" }
        );
    }
    let rxe_mem = vm.dump(0, 72).unwrap();
    let mut ours = vec![0u8; 72];
    // The SEND and the WRITE with Immediate raised completions on both sides.
    let log = vm.guest_log().unwrap().join("\n");
    assert!(
        log.contains("imm=0xcafef00d"),
        "rxe raised the immediate completion: {log}"
    );
    let mut ours_cq = Vec::new();
    while let Some(c) = soft.rnic.poll_completion() {
        ours_cq.push(c);
    }
    assert!(ours_cq.iter().any(|c| matches!(c, dta_collector::rnic::responder::Completion::Recv { data, .. } if data == b"hello, collector")));
    assert!(ours_cq.iter().any(|c| matches!(
        c,
        dta_collector::rnic::responder::Completion::WriteWithImm {
            imm: 0xCAFE_F00D,
            len: 8,
            ..
        }
    )));
    soft.region.read(0, &mut ours).unwrap();
    assert_eq!(ours, rxe_mem, "same memory after the sequence");
    assert_eq!(
        &rxe_mem[0..8],
        b"aaaaaaaa",
        "the duplicate was not re-executed"
    );
    assert_eq!(&rxe_mem[16..24], b"ffffffff");
    assert_eq!(
        u64::from_le_bytes(rxe_mem[64..72].try_into().unwrap()),
        0xDEAD,
        "the compare-swap hit swapped once"
    );
    assert_eq!(&rxe_mem[40..48], b"iiiiiiii");
}
