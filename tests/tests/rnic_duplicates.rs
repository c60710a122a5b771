//! The software RNIC's answers to the duplicates a retransmitting requester produces (the
//! translator resends unacknowledged frames unchanged, go-back-N): a duplicate WRITE is not
//! executed again and is re-ACKed with the newest PSN executed; a duplicate FETCH_ADD or
//! COMPARE_SWAP is not executed again and is answered with the original value saved when it
//! ran (responder resources, `MAX_RD_ATOMIC` of them, as rxe); one older than those resources
//! is dropped without an answer and still not executed.

use std::net::{Ipv4Addr, SocketAddrV4};
use std::sync::Arc;

use dta_collector::memory::Region;
use dta_collector::rnic::responder::{Access, DeviceConfig, QpConfig, Responder, MAX_RD_ATOMIC};
use dta_proto::batch::{Datagram, TxBatch};
use dta_proto::wire::ethernet::MacAddr;
use dta_proto::wire::ib::{opcode as op, AtomicEthRepr, Psn, Qpn, Rkey, Syndrome};
use dta_proto::wire::roce::{FrameTemplate, RoceEndpoint, RocePacket, L2L4_LEN};

const COLLECTOR: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 51);
const PEER: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 101);
const START: u32 = 0xFF_FFF0;

struct Rig {
    rnic: Responder,
    region: Arc<Region>,
    rkey: Rkey,
    qpn: Qpn,
    ep: RoceEndpoint,
    tx: TxBatch,
}

impl Rig {
    fn new() -> Rig {
        let mut rnic = Responder::new(DeviceConfig {
            local: SocketAddrV4::new(COLLECTOR, 4791),
            local_mac: MacAddr([2, 0, 0, 0, 0, 0x51]),
            pmtu: 1024,
            l2_frames: false,
        });
        let region = Arc::new(Region::anonymous(4096, false).expect("region"));
        let rkey = rnic.register(region.clone(), Access::ALL);
        let qpn = rnic.create_qp(QpConfig {
            peer: SocketAddrV4::new(PEER, 4791),
            peer_mac: MacAddr([2, 0, 0, 0, 0, 1]),
            peer_qpn: Qpn::new(0x100),
            rq_psn: Psn::new(START),
            sq_psn: Psn::new(0),
            verify_icrc: true,
            recv_credits: 16,
        });
        let ep = RoceEndpoint {
            src_mac: MacAddr([2, 0, 0, 0, 0, 1]),
            dst_mac: MacAddr([2, 0, 0, 0, 0, 0x51]),
            src_ip: PEER,
            dst_ip: COLLECTOR,
            src_port: 4791,
            dst_port: 4791,
            ttl: 64,
            tos: 0,
            ident: 0,
        };
        Rig {
            rnic,
            region,
            rkey,
            qpn,
            ep,
            tx: TxBatch::new(64, 2048),
        }
    }

    fn psn(i: u32) -> Psn {
        Psn::new(START).add(i)
    }

    fn fetch_add(&self, psn: Psn, off: u64, add: u64) -> Vec<u8> {
        self.atomic(op::RC_FETCH_ADD, psn, off, 0, add)
    }

    fn cmp_swap(&self, psn: Psn, off: u64, compare: u64, swap: u64) -> Vec<u8> {
        self.atomic(op::RC_COMPARE_SWAP, psn, off, compare, swap)
    }

    fn atomic(&self, opcode: u8, psn: Psn, off: u64, compare: u64, swap_add: u64) -> Vec<u8> {
        let t = FrameTemplate::new(&self.ep, opcode, self.qpn, 0);
        let mut b = vec![0u8; 256];
        let n = t.emit_atomic(
            &mut b,
            psn,
            false,
            &AtomicEthRepr {
                va: self.region.addr() + off,
                rkey: self.rkey,
                swap_add,
                compare,
            },
        );
        b.truncate(n);
        b
    }

    fn write(&self, psn: Psn, off: u64, data: &[u8; 8], ack_req: bool) -> Vec<u8> {
        let t = FrameTemplate::new(&self.ep, op::RC_RDMA_WRITE_ONLY, self.qpn, 8);
        let mut b = vec![0u8; 256];
        let va = self.region.addr() + off;
        let rkey = self.rkey;
        let n = t.emit(&mut b, psn, ack_req, |ext| {
            ext[0..8].copy_from_slice(&va.to_be_bytes());
            ext[8..12].copy_from_slice(&rkey.0.to_be_bytes());
            ext[12..16].copy_from_slice(&8u32.to_be_bytes());
            ext[16..24].copy_from_slice(data);
        });
        b.truncate(n);
        b
    }

    /// Delivers a frame and returns the answers: (opcode, syndrome, PSN, original value).
    fn deliver(&mut self, frame: &[u8]) -> Vec<(u8, Syndrome, Psn, Option<u64>)> {
        let d = Datagram {
            src: SocketAddrV4::new(PEER, 4791),
            dst: SocketAddrV4::new(COLLECTOR, 4791),
            ip: None,
            payload: &frame[L2L4_LEN..],
        };
        self.rnic.handle(&d, &mut self.tx);
        let out = self
            .tx
            .iter_payloads()
            .map(|(_, p)| {
                let r = RocePacket::parse(p).expect("a valid answer");
                (
                    r.bth.opcode,
                    r.aeth.expect("an ACK").syndrome,
                    r.bth.psn,
                    r.atomic_ack.map(|a| a.orig),
                )
            })
            .collect();
        self.tx.clear();
        out
    }

    fn load(&self, off: u64) -> u64 {
        self.region.load_u64(off).unwrap()
    }
}

#[test]
fn duplicate_atomics_replay_the_saved_original_and_never_run_twice() {
    let mut r = Rig::new();
    let f0 = r.fetch_add(Rig::psn(0), 0, 5);
    let f1 = r.fetch_add(Rig::psn(1), 0, 7);
    let c2 = r.cmp_swap(Rig::psn(2), 8, 0, 99);
    assert_eq!(r.deliver(&f0)[0].3, Some(0));
    assert_eq!(r.deliver(&f1)[0].3, Some(5));
    assert_eq!(r.deliver(&c2)[0].3, Some(0));
    assert_eq!((r.load(0), r.load(8)), (12, 99));
    // Resent unchanged (go-back-N from PSN 0): each is answered with the value it returned
    // the first time, at its own PSN, and memory does not change.
    for (f, psn, orig) in [(&f0, 0, 0), (&f1, 1, 5), (&c2, 2, 0)] {
        let a = r.deliver(f);
        assert_eq!(a.len(), 1, "one answer per duplicate");
        assert_eq!(a[0].0, op::RC_ATOMIC_ACKNOWLEDGE);
        assert_eq!((a[0].2, a[0].3), (Rig::psn(psn), Some(orig)));
    }
    assert_eq!((r.load(0), r.load(8)), (12, 99), "no atomic ran twice");
    let k = r.rnic.counters();
    assert_eq!((k.atomics, k.atomic_replays), (3, 3), "{k:?}");
    assert_eq!(r.rnic.expected_psn(r.qpn), Some(Rig::psn(3)));
    // Once MAX_RD_ATOMIC newer atomics ran, PSN 0's result is gone: its duplicate gets no
    // answer, and still does not run.
    for i in 0..MAX_RD_ATOMIC as u32 {
        let f = r.fetch_add(Rig::psn(3 + i), 16, 1);
        r.deliver(&f);
    }
    assert_eq!(r.load(16), MAX_RD_ATOMIC as u64);
    assert!(r.deliver(&f0).is_empty());
    assert_eq!(r.load(0), 12, "an old duplicate never runs");
    assert_eq!(r.rnic.counters().atomics, 3 + MAX_RD_ATOMIC as u64);
}

#[test]
fn duplicate_writes_are_reacked_with_the_newest_psn_and_not_executed() {
    let mut r = Rig::new();
    let w0 = r.write(Rig::psn(0), 64, &[1; 8], false);
    let w1 = r.write(Rig::psn(1), 64, &[2; 8], false);
    assert!(r.deliver(&w0).is_empty(), "no AckReq: no ACK");
    assert!(r.deliver(&w1).is_empty());
    assert_eq!(r.load(64), u64::from_le_bytes([2; 8]));
    // The older frame again (as a timeout resend would, with AckReq or not): not executed, so
    // it cannot undo the newer write, and re-ACKed with the newest PSN executed.
    let a = r.deliver(&w0);
    assert_eq!(a.len(), 1);
    assert_eq!(a[0].0, op::RC_ACKNOWLEDGE);
    assert!(matches!(a[0].1, Syndrome::Ack { .. }));
    assert_eq!(a[0].2, Rig::psn(1), "the newest executed PSN");
    assert_eq!(r.load(64), u64::from_le_bytes([2; 8]), "not executed twice");
    let k = r.rnic.counters();
    assert_eq!((k.writes, k.duplicate_request), (2, 1), "{k:?}");
}
