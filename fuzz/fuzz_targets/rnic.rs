//! RoCEv2 into the software RNIC's responder, as a stateful sequence of frames.
//!
//! The input decodes into a setup byte and a sequence of operations: well-formed requests built
//! from fuzz-chosen fields (opcode, QPN, PSN near or far from the expected one, VA in or around
//! a region, R_Key of a writable, read-only, deregistered or unknown region, DMA and payload
//! lengths, source address of the peer, of the other QP's peer or spoofed), optionally with one
//! byte corrupted; raw transport bytes; receive credits; and timer polls. After every frame:
//!
//! - the read-only and the deregistered regions are still all zero;
//! - every byte of the writable region that changed lies inside a range some RETH or AtomicETH
//!   naming that region's R_Key described (a write never lands outside what was asked);
//! - a frame whose source IP is not the peer of the QP it names changes no byte and increments
//!   that QP's `addr_mismatch`;
//! - a request whose PSN is behind the QP's expected PSN (a duplicate) changes no byte;
//! - a QP in the error state changes no byte;
//! - nothing panics.
#![no_main]

use std::net::{Ipv4Addr, SocketAddrV4};
use std::sync::{Arc, OnceLock};

use dta_collector::memory::Region;
use dta_collector::rnic::responder::{Access, DeviceConfig, QpConfig, QpState, Responder};
use dta_fuzz::{build, FrameSpec, Reader, OPCODES};
use dta_proto::batch::{Datagram, IpMeta, TxBatch};
use dta_proto::wire::ethernet::MacAddr;
use dta_proto::wire::ib::{Psn, Qpn};
use dta_proto::wire::roce::{RocePacket, L2L4_LEN};
use libfuzzer_sys::fuzz_target;

const COLLECTOR: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 51);
const PEERS: [Ipv4Addr; 2] = [Ipv4Addr::new(10, 0, 0, 101), Ipv4Addr::new(10, 0, 0, 102)];
const SPOOF: Ipv4Addr = Ipv4Addr::new(10, 9, 9, 9);
/// Not a multiple of 8 or of a page: the tail of the mapping is outside the region.
const A_LEN: usize = 1024 - 40;
const B_LEN: usize = 64;

/// The three regions, mapped once per process and zeroed before every run (a fresh mapping per
/// run costs more than the run itself). Their addresses stay the same, so runs replay exactly.
fn regions() -> &'static [Arc<Region>; 3] {
    static R: OnceLock<[Arc<Region>; 3]> = OnceLock::new();
    R.get_or_init(|| {
        let m = |len| Arc::new(Region::anonymous(len, false).expect("region"));
        [m(A_LEN), m(B_LEN), m(B_LEN)]
    })
}

struct World {
    rnic: Responder,
    a: Arc<Region>,
    b: Arc<Region>,
    c: Arc<Region>,
    rkeys: [u32; 3],
    qpns: [Qpn; 2],
    /// Bytes of A some RETH/AtomicETH naming A's R_Key covered.
    allowed: Vec<bool>,
    snap: Vec<u8>,
    after: Vec<u8>,
    tx: TxBatch,
    now: u64,
}

fn region_bytes(r: &Region, out: &mut Vec<u8>) {
    out.resize(r.len(), 0);
    r.read(0, out).expect("whole region");
}

fn is_zero(r: &Region) -> bool {
    let mut b = [0u8; B_LEN];
    r.read(0, &mut b).expect("whole region");
    b == [0u8; B_LEN]
}

impl World {
    fn new(setup: u8) -> World {
        let pmtu = [256, 1024, 4096, 512][(setup & 3) as usize];
        let verify_icrc = setup & 4 != 0;
        let mut rnic = Responder::new(DeviceConfig {
            local: SocketAddrV4::new(COLLECTOR, 4791),
            local_mac: MacAddr([2, 0, 0, 0, 0, 0x51]),
            pmtu,
            l2_frames: setup & 8 != 0,
        });
        let [a, b, c] = regions().clone();
        for r in [&a, &b, &c] {
            r.zero(0, r.len()).expect("whole region");
        }
        let ka = rnic.register(a.clone(), Access::ALL);
        let kb = rnic.register(
            b.clone(),
            Access {
                remote_write: false,
                remote_read: true,
                remote_atomic: false,
            },
        );
        let kc = rnic.register(c.clone(), Access::ALL);
        rnic.deregister(kc);
        let mut qpns = [Qpn::new(0); 2];
        for (i, peer) in PEERS.iter().enumerate() {
            qpns[i] = rnic.create_qp(QpConfig {
                peer: SocketAddrV4::new(*peer, 4791),
                peer_mac: MacAddr([2, 0, 0, 0, 0, 1 + i as u8]),
                peer_qpn: Qpn::new(0x100 + i as u32),
                rq_psn: Psn::new(if setup & 16 != 0 { 0xFFFFF0 } else { 0x1000 }),
                sq_psn: Psn::new(0),
                verify_icrc,
                recv_credits: (setup >> 5) as u32,
            });
        }
        World {
            rnic,
            a,
            b,
            c,
            rkeys: [ka.0, kb.0, kc.0],
            qpns,
            allowed: vec![false; A_LEN],
            snap: vec![0; A_LEN],
            after: Vec::with_capacity(A_LEN),
            tx: TxBatch::new(8, 4200),
            now: 1_000_000,
        }
    }

    fn allow(&mut self, rkey: u32, va: u64, len: u64) {
        if rkey != self.rkeys[0] {
            return;
        }
        let base = self.a.addr();
        let Some(off) = va.checked_sub(base) else {
            return;
        };
        let end = off.saturating_add(len).min(A_LEN as u64) as usize;
        let start = off.min(A_LEN as u64) as usize;
        if start < end {
            self.allowed[start..end].fill(true);
        }
    }

    fn spec(&self, r: &mut Reader<'_>) -> FrameSpec {
        let sel = r.u8();
        let qi = (sel & 1) as usize;
        let dest_qp = match (sel >> 1) & 3 {
            0 | 1 => self.qpns[qi],
            2 => self.qpns[1 - qi],
            _ => Qpn::new(r.u32()),
        };
        let src_ip = match (sel >> 3) & 3 {
            0 | 1 => PEERS[qi],
            2 => PEERS[1 - qi],
            _ => SPOOF,
        };
        let opcode = if sel & 0x20 != 0 {
            r.u8()
        } else {
            OPCODES[r.u8() as usize % OPCODES.len()]
        };
        let epsn = self.rnic.expected_psn(dest_qp).unwrap_or(Psn::new(0));
        let psn = match r.u8() {
            0..=191 => epsn,
            192..=239 => epsn.sub(1 + (r.u8() as u32 % 8)),
            240..=253 => epsn.add(1 + (r.u8() as u32 % 8)),
            _ => Psn::new(r.u32()),
        };
        let k = r.u8();
        let rkey = match k % 4 {
            0 | 1 => self.rkeys[0],
            2 => self.rkeys[1 + (k as usize >> 2) % 2],
            _ => r.u32(),
        };
        let base = match rkey {
            x if x == self.rkeys[1] => self.b.addr(),
            x if x == self.rkeys[2] => self.c.addr(),
            _ => self.a.addr(),
        };
        let va = match r.u8() % 4 {
            0..=2 => base
                .wrapping_add(r.u16() as u64 % (A_LEN as u64 + 64))
                .wrapping_sub(32),
            _ => r.u64(),
        };
        let dma_len = match r.u8() % 4 {
            0 | 1 => r.u8() as u32,
            2 => r.u16() as u32 % 9000,
            _ => r.u32(),
        };
        let payload_len = match r.u8() % 4 {
            0 | 1 => dma_len.min(4096) as usize,
            2 => r.u8() as usize,
            _ => r.u16() as usize % 4100,
        };
        FrameSpec {
            src_ip,
            dst_ip: COLLECTOR,
            opcode,
            dest_qp,
            psn,
            ack_req: r.bool(),
            pkey: if r.u8() == 0xAA { r.u16() } else { 0xffff },
            va,
            rkey,
            dma_len,
            operand: r.u64(),
            payload_len,
            fill: r.u8() | 1,
        }
    }

    /// Delivers one transport payload from `src` and checks every invariant.
    fn deliver(&mut self, src: Ipv4Addr, dst: Ipv4Addr, ip: Option<IpMeta>, transport: &[u8]) {
        let parsed = RocePacket::parse(transport).ok();
        let mut spoofed_qp = None;
        let mut no_change = false;
        if let Some(p) = &parsed {
            if let Some(reth) = p.reth {
                self.allow(reth.rkey.0, reth.va, reth.dma_len as u64);
            }
            if let Some(at) = p.atomic {
                self.allow(at.rkey.0, at.va, 8);
            }
            if let Some(qi) = self.qpns.iter().position(|&q| q == p.bth.dest_qp) {
                if src != PEERS[qi] {
                    spoofed_qp = Some(self.qpns[qi]);
                    no_change = true;
                }
                if self.rnic.qp_state(self.qpns[qi]) == Some(QpState::Error) {
                    no_change = true;
                }
                if let Some(e) = self.rnic.expected_psn(self.qpns[qi]) {
                    if p.bth.psn.diff(e) < 0 {
                        no_change = true;
                    }
                }
            }
        }
        let before_mismatch = spoofed_qp
            .and_then(|q| self.rnic.qp_counters(q))
            .map(|c| c.addr_mismatch);
        let d = Datagram {
            src: SocketAddrV4::new(src, 4791),
            dst: SocketAddrV4::new(dst, 4791),
            ip,
            payload: transport,
        };
        self.rnic.handle(&d, &mut self.tx);
        self.tx.clear();
        region_bytes(&self.a, &mut self.after);
        // Slice equality first: a per-byte loop would be traced by the fuzzer on every frame.
        let changed = self.snap != self.after;
        for (i, (x, y)) in self
            .snap
            .iter()
            .zip(&self.after)
            .enumerate()
            .filter(|_| changed)
        {
            if x != y {
                assert!(
                    self.allowed[i],
                    "byte {i} of the writable region changed, but no request named it"
                );
                assert!(
                    !no_change,
                    "byte {i} changed by a spoofed, duplicate or error-state frame"
                );
            }
        }
        // The snapshot for the next frame is this frame's result (one read per frame).
        std::mem::swap(&mut self.snap, &mut self.after);
        if let Some(q) = spoofed_qp {
            let now = self.rnic.qp_counters(q).expect("qp").addr_mismatch;
            assert_eq!(
                Some(now),
                before_mismatch.map(|c| c + 1),
                "addr_mismatch counts"
            );
        }
        assert!(is_zero(&self.b), "read-only region written");
        assert!(is_zero(&self.c), "deregistered region written");
    }
}

fuzz_target!(|data: &[u8]| {
    let mut r = Reader::new(data);
    let mut w = World::new(r.u8());
    let mut frame = Vec::with_capacity(4200);
    let mut ops = 0;
    while !r.is_empty() && ops < 64 {
        ops += 1;
        match r.u8() % 8 {
            0..=4 => {
                let s = w.spec(&mut r);
                build(&s, &mut frame);
                if r.u8() == 0x5A {
                    // Corrupt one byte after the Ethernet/IP/UDP headers (ICRC should catch it
                    // when verification is on).
                    let i = L2L4_LEN + r.u16() as usize % (frame.len() - L2L4_LEN);
                    frame[i] ^= r.u8() | 1;
                }
                let ip = Some(IpMeta {
                    ident: 0,
                    dont_frag: true,
                    ttl: 64,
                    tos: 0,
                });
                let transport = frame[L2L4_LEN..].to_vec();
                w.deliver(s.src_ip, s.dst_ip, ip, &transport);
            }
            5 => {
                let sel = r.u8();
                let src = match sel % 3 {
                    0 => PEERS[0],
                    1 => PEERS[1],
                    _ => SPOOF,
                };
                let raw = r.chunk().to_vec();
                w.deliver(src, COLLECTOR, None, &raw);
            }
            6 => {
                let q = w.qpns[(r.u8() & 1) as usize];
                w.rnic.post_recv(q, r.u8() as u32);
                while w.rnic.poll_completion().is_some() {}
            }
            _ => {
                w.now += r.u32() as u64 * 1000;
                let (now, rnic, tx) = (w.now, &mut w.rnic, &mut w.tx);
                rnic.poll(now, tx);
                tx.clear();
                if r.bool() {
                    let q = w.qpns[0];
                    let msg = r.chunk().to_vec();
                    w.rnic.post_send(q, &msg, w.now, &mut w.tx);
                }
            }
        }
    }
});
