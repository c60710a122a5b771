//! RDMA READ on the software RNIC (issue 13): responses go out as the transmit batch has room
//! and the rest follows on the next poll, as rxe's responder does, instead of every response
//! being pushed at once and the tail lost to a full batch. Fails on the responder before the
//! fix (8 of 64 responses, the rest counted as `tx_dropped`).

use std::net::{Ipv4Addr, SocketAddrV4};
use std::sync::Arc;

use dta_collector::memory::Region;
use dta_collector::rnic::responder::{Access, DeviceConfig, QpConfig, Responder};
use dta_proto::batch::{Datagram, IpMeta, TxBatch};
use dta_proto::wire::ethernet::MacAddr;
use dta_proto::wire::ib::{opcode as op, BthRepr, NakCode, Psn, Qpn, RethRepr, Rkey, Syndrome};
use dta_proto::wire::roce::{build_frame, frame_len, RoceEndpoint, RocePacket, L2L4_LEN};

const COLLECTOR: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 51);
const PEER: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 101);
const PMTU: u32 = 256;
const PACKETS: u32 = 64;

struct Rig {
    rnic: Responder,
    region: Arc<Region>,
    rkey: Rkey,
    qpn: Qpn,
    next_psn: Psn,
}

fn rig() -> Rig {
    let mut rnic = Responder::new(DeviceConfig {
        local: SocketAddrV4::new(COLLECTOR, 4791),
        local_mac: MacAddr([2, 0, 0, 0, 0, 0x51]),
        pmtu: PMTU,
        l2_frames: false,
    });
    let region = Arc::new(Region::anonymous((PACKETS * PMTU) as usize, false).unwrap());
    let pattern: Vec<u8> = (0..region.len()).map(|i| (i * 7 + i / 251) as u8).collect();
    region.write(0, &pattern).unwrap();
    let rkey = rnic.register(region.clone(), Access::ALL);
    let qpn = rnic.create_qp(QpConfig {
        peer: SocketAddrV4::new(PEER, 4791),
        peer_mac: MacAddr([2, 0, 0, 0, 0, 1]),
        peer_qpn: Qpn::new(0x100),
        rq_psn: Psn::new(0xFF_FFF0),
        sq_psn: Psn::new(0),
        verify_icrc: true,
        recv_credits: 16,
    });
    Rig {
        rnic,
        region,
        rkey,
        qpn,
        next_psn: Psn::new(0xFF_FFF0),
    }
}

impl Rig {
    /// A READ request frame for `len` bytes at region offset `offset`, with PSN `psn`.
    fn read_frame(&self, psn: Psn, offset: u64, len: u32, rkey: Rkey) -> Vec<u8> {
        let ep = RoceEndpoint {
            src_ip: PEER,
            dst_ip: COLLECTOR,
            ..RoceEndpoint::default()
        };
        let bth = BthRepr::rc(op::RC_RDMA_READ_REQUEST, self.qpn, psn, true);
        let reth = RethRepr {
            va: self.region.addr() + offset,
            rkey,
            dma_len: len,
        };
        let mut f = vec![0u8; frame_len(16, 0)];
        let n = build_frame(&ep, &bth, &reth.to_bytes(), &[], &mut f);
        f.truncate(n);
        f
    }

    fn deliver(&mut self, frame: &[u8], tx: &mut TxBatch) {
        let d = Datagram {
            src: SocketAddrV4::new(PEER, 4791),
            dst: SocketAddrV4::new(COLLECTOR, 4791),
            ip: Some(IpMeta {
                ident: 0,
                dont_frag: true,
                ttl: 64,
                tos: 0,
            }),
            payload: &frame[L2L4_LEN..],
        };
        self.rnic.handle(&d, tx);
    }
}

/// (opcode, PSN, payload) of each response in `tx`.
fn responses(tx: &TxBatch) -> Vec<(u8, Psn, Vec<u8>, Option<Syndrome>)> {
    (0..tx.len())
        .map(|i| {
            let p = RocePacket::parse(tx.payload(i)).expect("a RoCEv2 response");
            (
                p.bth.opcode,
                p.bth.psn,
                p.payload.to_vec(),
                p.aeth.map(|a| a.syndrome),
            )
        })
        .collect()
}

#[test]
fn a_large_read_is_answered_in_steps_through_a_small_batch() {
    let mut r = rig();
    let mut tx = TxBatch::new(8, 2048);
    let first = r.next_psn;
    let f = r.read_frame(first, 0, PACKETS * PMTU, r.rkey);
    r.deliver(&f, &mut tx);
    let mut got = responses(&tx);
    assert_eq!(got.len(), 8, "as many as fit");
    for _ in 0..100 {
        tx.clear();
        r.rnic.poll(1, &mut tx);
        if tx.is_empty() {
            break;
        }
        got.extend(responses(&tx));
    }
    assert_eq!(got.len(), PACKETS as usize, "every response, none lost");
    let mut mem = vec![0u8; r.region.len()];
    r.region.read(0, &mut mem).unwrap();
    for (i, (opc, psn, payload, aeth)) in got.iter().enumerate() {
        let want_op = match i {
            0 => op::RC_RDMA_READ_RESPONSE_FIRST,
            x if x == PACKETS as usize - 1 => op::RC_RDMA_READ_RESPONSE_LAST,
            _ => op::RC_RDMA_READ_RESPONSE_MIDDLE,
        };
        assert_eq!(*opc, want_op, "response {i}");
        assert_eq!(
            *psn,
            first.add(i as u32),
            "in PSN order across the PSN wrap"
        );
        assert_eq!(
            &payload[..],
            &mem[i * PMTU as usize..(i + 1) * PMTU as usize],
            "response {i}'s bytes"
        );
        assert_eq!(aeth.is_some(), want_op != op::RC_RDMA_READ_RESPONSE_MIDDLE);
    }
    let c = r.rnic.qp_counters(r.qpn).unwrap();
    assert_eq!((c.tx_dropped, c.reads), (0, 1), "{c:?}");
    assert_eq!(r.rnic.expected_psn(r.qpn), Some(first.add(PACKETS)));
}

#[test]
fn a_request_behind_a_streaming_read_waits_its_turn() {
    let mut r = rig();
    let mut tx = TxBatch::new(4, 2048);
    let first = r.next_psn;
    let f = r.read_frame(first, 0, 16 * PMTU, r.rkey);
    r.deliver(&f, &mut tx);
    assert_eq!(tx.len(), 4);
    // The next request arrives while the batch is still full: it must not be answered
    // before the READ's remaining responses (responses are ordered); it is dropped, counted.
    let g = r.read_frame(first.add(16), 0, 8, r.rkey);
    r.deliver(&g, &mut tx);
    assert_eq!(tx.len(), 4, "nothing overtakes the READ");
    let c = r.rnic.qp_counters(r.qpn).unwrap();
    assert_eq!(c.read_busy_drops, 1, "{c:?}");
    // Room again: the READ finishes, then the resent request is answered.
    let mut got = Vec::new();
    while {
        tx.clear();
        r.rnic.poll(1, &mut tx);
        got.extend(responses(&tx));
        !tx.is_empty()
    } {}
    assert_eq!(got.len(), 12);
    tx.clear();
    r.deliver(&g, &mut tx);
    let last = responses(&tx);
    assert_eq!(last.len(), 1);
    assert_eq!(
        (last[0].0, last[0].1),
        (op::RC_RDMA_READ_RESPONSE_ONLY, first.add(16))
    );
}

#[test]
fn a_duplicate_read_is_replayed_from_the_psn_asked_for() {
    let mut r = rig();
    let mut tx = TxBatch::new(64, 2048);
    let first = r.next_psn;
    let f = r.read_frame(first, 0, 4 * PMTU, r.rkey);
    r.deliver(&f, &mut tx);
    assert_eq!(tx.len(), 4);
    tx.clear();
    // The requester lost the last two responses and asks again from the third one's PSN.
    let mut again = r.read_frame(first.add(2), 2 * PMTU as u64, 2 * PMTU, r.rkey);
    r.deliver(&again, &mut tx);
    let got = responses(&tx);
    assert_eq!(got.len(), 2);
    assert_eq!((got[0].1, got[1].1), (first.add(2), first.add(3)));
    assert_eq!(got[1].0, op::RC_RDMA_READ_RESPONSE_LAST);
    // A duplicate naming a PSN outside any saved READ is ignored.
    tx.clear();
    again = r.read_frame(first.sub(5), 0, 8, r.rkey);
    r.deliver(&again, &mut tx);
    assert!(tx.is_empty());
}

#[test]
fn hostile_reads_are_refused_with_the_right_nak() {
    for (what, offset, len, bad_key) in [
        ("beyond the region", (PACKETS * PMTU) as u64 - 8, 16, false),
        ("huge length", 0, u32::MAX, false),
        ("unknown R_Key", 0, 8, true),
    ] {
        let mut r = rig();
        let mut tx = TxBatch::new(8, 2048);
        let key = if bad_key {
            Rkey(r.rkey.0 ^ 0xFF)
        } else {
            r.rkey
        };
        let f = r.read_frame(r.next_psn, offset, len, key);
        r.deliver(&f, &mut tx);
        let got = responses(&tx);
        assert_eq!(got.len(), 1, "{what}");
        assert_eq!(got[0].0, op::RC_ACKNOWLEDGE, "{what}");
        assert_eq!(
            got[0].3,
            Some(Syndrome::Nak(NakCode::RemoteAccessError)),
            "{what}"
        );
    }
    // A zero-length READ is answered with one empty response.
    let mut r = rig();
    let mut tx = TxBatch::new(8, 2048);
    let f = r.read_frame(r.next_psn, 0, 0, r.rkey);
    r.deliver(&f, &mut tx);
    let got = responses(&tx);
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].0, op::RC_RDMA_READ_RESPONSE_ONLY);
    assert!(got[0].2.is_empty());
}
