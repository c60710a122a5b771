//! Memory safety of the software RNIC (the DTA target), as properties over arbitrary frame
//! sequences: well-formed RoCEv2 requests with arbitrary opcodes, PSNs, VAs, lengths, R_Keys,
//! QPNs and source addresses.
//!
//! (a) no byte outside a range some in-bounds request named is ever written, a read-only and
//!     a deregistered region are never written;
//! (b) only the connected peer can write: a frame from another IP, or to a QP whose peer is
//!     someone else, changes nothing and counts `addr_mismatch`;
//! (c) a duplicate is never executed twice: replaying a sequence leaves memory as the first
//!     pass left it, and counts `duplicate_request`;
//! (d) a frame with a stale PSN (behind the window) or a PSN ahead of it changes nothing and
//!     is counted.
//!
//! The responder is compared against a model of every region (a copy taken before each
//! frame); see also the `rnic` fuzz target, which checks the same invariants on raw bytes.

use std::net::{Ipv4Addr, SocketAddrV4};
use std::sync::Arc;

use dta_collector::memory::Region;
use dta_collector::rnic::counters::RnicCounters;
use dta_collector::rnic::responder::{Access, DeviceConfig, QpConfig, QpState, Responder};
use dta_proto::batch::{Datagram, IpMeta, TxBatch};
use dta_proto::wire::ethernet::MacAddr;
use dta_proto::wire::ib::{opcode as op, BthRepr, Psn, Qpn};
use dta_proto::wire::roce::{build_frame, frame_len, RoceEndpoint, RocePacket, L2L4_LEN};
use proptest::prelude::*;

const COLLECTOR: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 51);
const PEERS: [Ipv4Addr; 2] = [Ipv4Addr::new(10, 0, 0, 101), Ipv4Addr::new(10, 0, 0, 102)];
const A_LEN: usize = 2048 - 24;
const B_LEN: usize = 256;
const START_PSN: u32 = 0xFFFF00;

/// The opcodes a requester can send (plus ones a responder must refuse).
const OPCODES: [u8; 13] = [
    op::RC_RDMA_WRITE_FIRST,
    op::RC_RDMA_WRITE_MIDDLE,
    op::RC_RDMA_WRITE_LAST,
    op::RC_RDMA_WRITE_LAST_IMM,
    op::RC_RDMA_WRITE_ONLY,
    op::RC_RDMA_WRITE_ONLY_IMM,
    op::RC_RDMA_READ_REQUEST,
    op::RC_COMPARE_SWAP,
    op::RC_FETCH_ADD,
    op::RC_SEND_ONLY,
    op::RC_SEND_FIRST,
    op::RC_ACKNOWLEDGE,
    op::RC_RDMA_READ_RESPONSE_ONLY,
];

/// The device under test: region A (all access), B (read only), C (deregistered) and two QPs,
/// one per peer.
struct Target {
    rnic: Responder,
    regions: [Arc<Region>; 3],
    rkeys: [u32; 3],
    qpns: [Qpn; 2],
    tx: TxBatch,
}

impl Target {
    fn new(pmtu: u32) -> Target {
        let mut rnic = Responder::new(DeviceConfig {
            local: SocketAddrV4::new(COLLECTOR, 4791),
            local_mac: MacAddr([2, 0, 0, 0, 0, 0x51]),
            pmtu,
            l2_frames: false,
        });
        let m = |len| Arc::new(Region::anonymous(len, false).expect("region"));
        let regions = [m(A_LEN), m(B_LEN), m(B_LEN)];
        let ka = rnic.register(regions[0].clone(), Access::ALL);
        let kb = rnic.register(
            regions[1].clone(),
            Access {
                remote_write: false,
                remote_read: true,
                remote_atomic: false,
            },
        );
        let kc = rnic.register(regions[2].clone(), Access::ALL);
        rnic.deregister(kc);
        let mut qpns = [Qpn::new(0); 2];
        for (i, peer) in PEERS.iter().enumerate() {
            qpns[i] = rnic.create_qp(QpConfig {
                peer: SocketAddrV4::new(*peer, 4791),
                peer_mac: MacAddr([2, 0, 0, 0, 0, 1]),
                peer_qpn: Qpn::new(0x100 + i as u32),
                rq_psn: Psn::new(START_PSN),
                sq_psn: Psn::new(0),
                verify_icrc: true,
                recv_credits: 1 << 16,
            });
        }
        Target {
            rnic,
            regions,
            rkeys: [ka.0, kb.0, kc.0],
            qpns,
            tx: TxBatch::new(64, 4200),
        }
    }

    fn memory(&self) -> Vec<Vec<u8>> {
        self.regions
            .iter()
            .map(|r| {
                let mut b = vec![0u8; r.len()];
                r.read(0, &mut b).expect("whole region");
                b
            })
            .collect()
    }

    fn qp(&self, i: usize) -> (Option<Psn>, Option<QpState>, RnicCounters) {
        let q = self.qpns[i];
        (
            self.rnic.expected_psn(q),
            self.rnic.qp_state(q),
            self.rnic.qp_counters(q).expect("qp exists"),
        )
    }

    /// Delivers one frame built by [`Req::frame`]; returns the transport payload it carried.
    fn deliver(&mut self, src: Ipv4Addr, frame: &[u8]) {
        let d = Datagram {
            src: SocketAddrV4::new(src, 4791),
            dst: SocketAddrV4::new(COLLECTOR, 4791),
            ip: Some(IpMeta {
                ident: 0,
                dont_frag: true,
                ttl: 64,
                tos: 0,
            }),
            payload: &frame[L2L4_LEN..],
        };
        self.rnic.handle(&d, &mut self.tx);
        self.tx.clear();
    }
}

/// One request with arbitrary fields. `qp`, `rkey` and `va` are selectors resolved against a
/// [`Target`] so that a useful share of requests hits real QPs and regions.
#[derive(Debug, Clone)]
struct Req {
    opcode: u8,
    /// 0/1: our QPs; anything else: that raw QPN.
    qp: u32,
    /// Offset from the expected PSN (negative: stale; positive: ahead).
    psn_delta: i32,
    /// 0..3: the region's key; anything else: a raw R_Key.
    rkey: u32,
    /// Offset into the region (may run past its end or, wrapped, before its start).
    va_off: i64,
    dma_len: u32,
    payload: Vec<u8>,
    operand: u64,
    ack_req: bool,
}

fn req() -> impl Strategy<Value = Req> {
    (
        prop::sample::select(OPCODES.to_vec()),
        prop_oneof![4 => 0u32..2, 1 => any::<u32>()],
        prop_oneof![6 => Just(0i32), 1 => -64i32..64, 1 => any::<i32>()],
        prop_oneof![4 => Just(0u32), 1 => 1u32..3, 1 => any::<u32>()],
        prop_oneof![4 => -16i64..(A_LEN as i64 + 16), 1 => any::<i64>()],
        prop_oneof![4 => 0u32..600, 1 => any::<u32>()],
        prop::collection::vec(any::<u8>(), 0..600),
        any::<u64>(),
        any::<bool>(),
    )
        .prop_map(
            |(opcode, qp, psn_delta, rkey, va_off, dma_len, payload, operand, ack_req)| Req {
                opcode,
                qp,
                psn_delta,
                rkey,
                va_off,
                dma_len,
                payload,
                operand,
                ack_req,
            },
        )
}

impl Req {
    /// Resolves selectors and builds the Ethernet frame, from `src`.
    fn frame(&self, t: &Target, src: Ipv4Addr) -> Vec<u8> {
        let dest_qp = match self.qp {
            q @ (0 | 1) => t.qpns[q as usize],
            q => Qpn::new(q),
        };
        let epsn = t.rnic.expected_psn(dest_qp).unwrap_or(Psn::new(0));
        let psn = if self.psn_delta >= 0 {
            epsn.add(self.psn_delta as u32)
        } else {
            epsn.sub(self.psn_delta.unsigned_abs())
        };
        let (rkey, base) = match self.rkey {
            k @ 0..=2 => (t.rkeys[k as usize], t.regions[k as usize].addr()),
            k => (k, t.regions[0].addr()),
        };
        let va = base.wrapping_add(self.va_off as u64);
        let mut ext = Vec::new();
        let reth = |ext: &mut Vec<u8>| {
            ext.extend_from_slice(&va.to_be_bytes());
            ext.extend_from_slice(&rkey.to_be_bytes());
            ext.extend_from_slice(&self.dma_len.to_be_bytes());
        };
        let mut payload: &[u8] = &self.payload;
        match self.opcode {
            op::RC_RDMA_WRITE_FIRST | op::RC_RDMA_WRITE_ONLY => reth(&mut ext),
            op::RC_RDMA_READ_REQUEST => {
                reth(&mut ext);
                payload = &[];
            }
            op::RC_RDMA_WRITE_ONLY_IMM => {
                reth(&mut ext);
                ext.extend_from_slice(&(self.operand as u32).to_be_bytes());
            }
            op::RC_RDMA_WRITE_LAST_IMM => {
                ext.extend_from_slice(&(self.operand as u32).to_be_bytes())
            }
            op::RC_COMPARE_SWAP | op::RC_FETCH_ADD => {
                ext.extend_from_slice(&va.to_be_bytes());
                ext.extend_from_slice(&rkey.to_be_bytes());
                ext.extend_from_slice(&self.operand.to_be_bytes());
                ext.extend_from_slice(&self.operand.rotate_left(7).to_be_bytes());
                payload = &[];
            }
            op::RC_ACKNOWLEDGE => {
                ext.extend_from_slice(&(self.operand as u32).to_be_bytes());
                payload = &[];
            }
            op::RC_RDMA_READ_RESPONSE_ONLY => {
                ext.extend_from_slice(&(self.operand as u32).to_be_bytes())
            }
            _ => {}
        }
        build(src, dest_qp, self.opcode, psn, self.ack_req, &ext, payload)
    }
}

fn build(
    src: Ipv4Addr,
    dest_qp: Qpn,
    opcode: u8,
    psn: Psn,
    ack_req: bool,
    ext: &[u8],
    payload: &[u8],
) -> Vec<u8> {
    let ep = RoceEndpoint {
        src_mac: MacAddr([2, 0, 0, 0, 0, 1]),
        dst_mac: MacAddr([2, 0, 0, 0, 0, 0x51]),
        src_ip: src,
        dst_ip: COLLECTOR,
        src_port: 4791,
        dst_port: 4791,
        ttl: 64,
        tos: 0,
        ident: 0,
    };
    let bth = BthRepr {
        opcode,
        solicited: false,
        mig_req: true,
        pad_count: 0,
        tver: 0,
        pkey: 0xffff,
        fecn: false,
        becn: false,
        dest_qp,
        ack_req,
        psn,
    };
    let mut out = vec![0u8; frame_len(ext.len(), payload.len())];
    let n = build_frame(&ep, &bth, ext, payload, &mut out);
    out.truncate(n);
    out
}

/// Marks the bytes of region A that the RETH/AtomicETH of `frame` names, if the whole range
/// lies inside A and names A's R_Key.
fn allow(t: &Target, frame: &[u8], allowed: &mut [bool]) {
    let Ok(p) = RocePacket::parse(&frame[L2L4_LEN..]) else {
        return;
    };
    let (va, rkey, len) = match (p.reth, p.atomic) {
        (Some(r), _) => (r.va, r.rkey.0, r.dma_len as u64),
        (_, Some(a)) => (a.va, a.rkey.0, 8),
        _ => return,
    };
    if rkey != t.rkeys[0] {
        return;
    }
    let Some(off) = va.checked_sub(t.regions[0].addr()) else {
        return;
    };
    match off.checked_add(len) {
        Some(end) if end <= A_LEN as u64 => {
            allowed[off as usize..end as usize].fill(true);
        }
        _ => {}
    }
}

fn pmtu() -> impl Strategy<Value = u32> {
    prop::sample::select(vec![256u32, 1024, 4096])
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1024))]

    /// (a) Writes land only inside in-bounds ranges of the writable region that some request
    /// named; the read-only and the deregistered regions stay zero.
    #[test]
    fn never_writes_outside_a_registered_range(pmtu in pmtu(), reqs in prop::collection::vec(req(), 1..48)) {
        let mut t = Target::new(pmtu);
        let mut allowed = vec![false; A_LEN];
        for r in &reqs {
            let peer = PEERS[(r.qp & 1) as usize];
            let f = r.frame(&t, peer);
            allow(&t, &f, &mut allowed);
            let before = t.memory();
            t.deliver(peer, &f);
            let after = t.memory();
            for (i, (x, y)) in before[0].iter().zip(&after[0]).enumerate() {
                prop_assert!(x == y || allowed[i], "byte {} of A written by {:?}", i, r);
            }
            prop_assert!(after[1].iter().all(|&b| b == 0), "read-only region written by {:?}", r);
            prop_assert!(after[2].iter().all(|&b| b == 0), "deregistered region written by {:?}", r);
        }
    }

    /// (b) Interleaved with the peer's own traffic, frames from a spoofed source IP, and frames
    /// from the other QP's peer, change no memory and no QP state, and each counts one
    /// `addr_mismatch`.
    #[test]
    fn only_the_connected_peer_is_accepted(
        pmtu in pmtu(),
        reqs in prop::collection::vec((req(), 0u8..3, any::<u8>()), 1..48),
    ) {
        let mut t = Target::new(pmtu);
        for (r, who, last) in &reqs {
            let qi = (r.qp & 1) as usize;
            let mut r = r.clone();
            r.qp = qi as u32;
            let src = match who {
                0 => PEERS[qi],
                1 => PEERS[1 - qi],
                _ => Ipv4Addr::new(10, 0, 0, *last),
            };
            let f = r.frame(&t, src);
            let (mem, q) = (t.memory(), t.qp(qi));
            t.deliver(src, &f);
            if src != PEERS[qi] {
                let q2 = t.qp(qi);
                prop_assert_eq!(t.memory(), mem, "spoofed frame from {} changed memory", src);
                prop_assert_eq!((q2.0, q2.1), (q.0, q.1), "spoofed frame changed the QP");
                prop_assert_eq!(q2.2.addr_mismatch, q.2.addr_mismatch + 1);
                prop_assert_eq!(q2.2.rcvd_pkts, q.2.rcvd_pkts);
            }
        }
    }

    /// (c) A sequence of in-order WRITEs and atomics, replayed (identically, and again with
    /// different payloads and operands), leaves memory exactly as the first pass left it; every
    /// replayed request counts one `duplicate_request` and atomics replay their saved result.
    #[test]
    fn duplicates_are_never_executed_twice(
        ops in prop::collection::vec((any::<bool>(), 0usize..(A_LEN / 8), 1usize..64, any::<u8>(), any::<bool>()), 1..16),
    ) {
        let mut t = Target::new(1024);
        let base = t.regions[0].addr();
        let rkey = t.rkeys[0];
        let mut frames = Vec::new();
        let mut mutated = Vec::new();
        for (i, (atomic, slot, len, fill, ack_req)) in ops.iter().enumerate() {
            let psn = Psn::new(START_PSN).add(i as u32);
            let va = base + (*slot as u64) * 8;
            let mk = |fill: u8| {
                let mut ext = Vec::new();
                ext.extend_from_slice(&va.to_be_bytes());
                ext.extend_from_slice(&rkey.to_be_bytes());
                if *atomic {
                    ext.extend_from_slice(&(fill as u64 + 1).to_be_bytes());
                    ext.extend_from_slice(&0u64.to_be_bytes());
                    build(PEERS[0], t.qpns[0], op::RC_FETCH_ADD, psn, true, &ext, &[])
                } else {
                    let len = (*len).min(A_LEN - slot * 8);
                    ext.extend_from_slice(&(len as u32).to_be_bytes());
                    build(PEERS[0], t.qpns[0], op::RC_RDMA_WRITE_ONLY, psn, *ack_req, &ext, &vec![fill; len])
                }
            };
            frames.push(mk(*fill));
            mutated.push(mk(fill.wrapping_add(1)));
        }
        for f in &frames {
            t.deliver(PEERS[0], f);
        }
        let first = t.memory();
        let c1 = t.qp(0).2;
        prop_assert_eq!(c1.writes + c1.atomics, ops.len() as u64, "{:?}", c1);
        for f in frames.iter().chain(&mutated) {
            t.deliver(PEERS[0], f);
        }
        prop_assert_eq!(t.memory(), first, "a replayed request changed memory");
        let c2 = t.qp(0).2;
        prop_assert_eq!(c2.duplicate_request - c1.duplicate_request, 2 * ops.len() as u64);
        prop_assert_eq!(c2.writes + c2.atomics, c1.writes + c1.atomics, "nothing re-executed");
        prop_assert_eq!(t.qp(0).0, Some(Psn::new(START_PSN).add(ops.len() as u32)));
    }

    /// (d) A request from the peer whose PSN is behind the expected PSN (anywhere in the stale
    /// half of the PSN space) or ahead of it changes nothing; behind counts
    /// `duplicate_request`, ahead counts `out_of_seq_request` (first) or `out_of_seq_dropped`.
    #[test]
    fn stale_or_future_psn_changes_nothing(
        warmup in 0u32..8,
        delta in prop_oneof![1u32..64, 64u32..(1 << 23)],
        behind in any::<bool>(),
        r in req(),
    ) {
        let mut t = Target::new(4096);
        let base = t.regions[0].addr();
        // Advance the QP with `warmup` good writes first.
        for i in 0..warmup {
            let mut ext = Vec::new();
            ext.extend_from_slice(&(base + 8 * i as u64).to_be_bytes());
            ext.extend_from_slice(&t.rkeys[0].to_be_bytes());
            ext.extend_from_slice(&8u32.to_be_bytes());
            let f = build(PEERS[0], t.qpns[0], op::RC_RDMA_WRITE_ONLY, Psn::new(START_PSN).add(i), false, &ext, &[0xEE; 8]);
            t.deliver(PEERS[0], &f);
        }
        prop_assert_eq!(t.qp(0).0, Some(Psn::new(START_PSN).add(warmup)));
        let mut r = r;
        r.qp = 0;
        r.psn_delta = if behind { -(delta as i32) } else { delta as i32 };
        let f = r.frame(&t, PEERS[0]);
        let (mem, q) = (t.memory(), t.qp(0));
        t.deliver(PEERS[0], &f);
        let q2 = t.qp(0);
        prop_assert_eq!(t.memory(), mem, "PSN {} off the window changed memory", r.psn_delta);
        prop_assert_eq!(q2.0, q.0, "the expected PSN moved");
        if matches!(r.opcode, op::RC_ACKNOWLEDGE | op::RC_RDMA_READ_RESPONSE_ONLY) {
            // Responses go to the QP's requester side (our metadata SENDs), not the window.
            return Ok(());
        }
        let counted = q2.2.duplicate_request + q2.2.out_of_seq_request + q2.2.out_of_seq_dropped
            + q2.2.bad_opcode + q2.2.invalid_request;
        let before = q.2.duplicate_request + q.2.out_of_seq_request + q.2.out_of_seq_dropped
            + q.2.bad_opcode + q.2.invalid_request;
        prop_assert_eq!(counted, before + 1, "{:?} -> {:?}", q.2, q2.2);
        if behind {
            prop_assert_eq!(q2.2.duplicate_request, q.2.duplicate_request + 1);
        } else {
            prop_assert_eq!(q2.2.out_of_seq_request + q2.2.out_of_seq_dropped, q.2.out_of_seq_request + q.2.out_of_seq_dropped + 1);
        }
    }
}

/// A collector numbers its QPs from a base of its own (random per start): a restarted
/// collector's QPs do not take the QPNs a translator's old connections still send to. Once a
/// QP exists, the base stays.
#[test]
fn qpn_base_moves_numbering_only_before_the_first_qp() {
    use dta_collector::rnic::responder::{MAX_QPN_BASE, QPN_BASE};
    let mut rnic = Responder::new(DeviceConfig {
        local: SocketAddrV4::new(COLLECTOR, 4791),
        local_mac: MacAddr([2, 0, 0, 0, 0, 0x51]),
        pmtu: 1024,
        l2_frames: false,
    });
    let qp = |rnic: &mut Responder, i: u32| {
        rnic.create_qp(QpConfig {
            peer: SocketAddrV4::new(PEERS[0], 4791),
            peer_mac: MacAddr([2, 0, 0, 0, 0, 1]),
            peer_qpn: Qpn::new(0x100 + i),
            rq_psn: Psn::new(START_PSN),
            sq_psn: Psn::new(0),
            verify_icrc: true,
            recv_credits: 16,
        })
    };
    assert!(rnic.set_qpn_base(0x12_3400));
    let a = qp(&mut rnic, 0);
    let b = qp(&mut rnic, 1);
    assert_eq!((a.value(), b.value()), (0x12_3400, 0x12_3401));
    assert!(rnic.qp_state(a).is_some() && rnic.qp_state(b).is_some());
    // The default numbering's first QPN is nobody's now.
    assert_eq!(rnic.qp_state(Qpn::new(QPN_BASE)), None);
    assert_eq!(rnic.expected_psn(Qpn::new(QPN_BASE)), None);
    assert!(!rnic.set_qpn_base(0x40_0000), "QPs exist: the base stays");
    assert_eq!(qp(&mut rnic, 2).value(), 0x12_3402);
    // Out-of-range bases are clamped into the 24-bit QPN space.
    let mut fresh = Responder::new(DeviceConfig::default());
    assert!(fresh.set_qpn_base(u32::MAX));
    assert_eq!(qp(&mut fresh, 0).value(), MAX_QPN_BASE);
}
