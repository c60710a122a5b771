//! The RDMA_CM state machines: the collector's `CmResponder` (with its software RNIC) and the
//! translator's `CmInitiator`, connected by two in-memory wires the fuzzer controls. Operations:
//! start connections, deliver / drop / duplicate / corrupt the next frame in either direction,
//! inject raw bytes, inject re-sealed CM messages with one fuzz-chosen field word changed, and
//! advance time. Nothing may panic, and the responder never holds more connections than
//! REQs it accepted.
#![no_main]

use std::collections::VecDeque;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::sync::OnceLock;

use dta_collector::allow::PeerAllowlist;
use dta_collector::config::{StoreConfig, StoreKindConfig};
use dta_collector::rnic::cm::{CmResponder, Service};
use dta_collector::rnic::responder::{DeviceConfig, Responder};
use dta_fuzz::Reader;
use dta_proto::batch::{Datagram, TxBatch};
use dta_proto::hash::HashProfile;
use dta_proto::meta::StoreKind;
use dta_proto::wire::cm::{build_cm_frame, is_gsi};
use dta_proto::wire::ethernet::MacAddr;
use dta_proto::wire::ib::{Psn, Qpn};
use dta_proto::wire::mad::{CmMessage, MadHeaderRepr, MAD_LEN};
use dta_proto::wire::metarec::MetaRecord;
use dta_proto::wire::roce::{parse_frame, RoceEndpoint, L2L4_LEN};
use dta_tests::harness::{Harness, HarnessOptions};
use dta_translator::control::cm::CmInitiator;
use libfuzzer_sys::fuzz_target;

const COLLECTOR: SocketAddrV4 = SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 51), 4791);
const TRANSLATOR: SocketAddrV4 = SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 101), 4791);
const PORTS: [u16; 2] = [20000, 20001];

/// Metadata records of two real stores (built once).
fn records() -> &'static [[u8; 64]; 2] {
    static R: OnceLock<[[u8; 64]; 2]> = OnceLock::new();
    R.get_or_init(|| {
        let h = Harness::new(
            vec![
                StoreConfig {
                    name: "kw".into(),
                    port: None,
                    cm_allow: None,
                    kind: StoreKindConfig::new(StoreKind::KeyWrite {
                        slots: 64,
                        slot_size: 8,
                        hash: HashProfile::Independent,
                    })
                    .with_redundancy(2),
                },
                StoreConfig {
                    name: "ki".into(),
                    port: None,
                    cm_allow: None,
                    kind: StoreKindConfig::new(StoreKind::KeyIncrement {
                        slots: 64,
                        hash: HashProfile::Independent,
                    })
                    .with_redundancy(2),
                },
            ],
            HarnessOptions::default(),
        );
        [
            MetaRecord::from_store_meta(&h.stores[0].meta, true).to_bytes(),
            MetaRecord::from_store_meta(&h.stores[1].meta, false).to_bytes(),
        ]
    })
}

/// One frame on a wire: (source address, Ethernet frame).
type Wire = VecDeque<(SocketAddrV4, Vec<u8>)>;

struct World {
    rnic: Responder,
    cm: CmResponder,
    init: CmInitiator,
    to_collector: Wire,
    to_translator: Wire,
    seen: Vec<(MadHeaderRepr, CmMessage)>,
    tx: TxBatch,
    now: u64,
    reqs: u64,
}

fn drain(tx: &mut TxBatch, wire: &mut Wire, from: SocketAddrV4) {
    for i in 0..tx.len() {
        if wire.len() < 64 {
            wire.push_back((from, tx.frame(i).to_vec()));
        }
    }
    tx.clear();
}

impl World {
    fn new(setup: u8) -> World {
        let rec = records();
        let services = vec![
            Service {
                port: PORTS[0],
                name: "kw".into(),
                record: rec[0],
                record_in_rep: false,
                heads: None,
                allow: PeerAllowlist::any(),
            },
            Service {
                port: PORTS[1],
                name: "ki".into(),
                record: rec[1],
                // Setup bit 2: the record travels in the REP (a ZERO agent's way).
                record_in_rep: setup & 4 != 0,
                heads: None,
                // The second store refuses the translator when setup bit 1 is set, so REJs
                // of the allowlist are exercised too.
                allow: if setup & 2 != 0 {
                    PeerAllowlist::new(vec![])
                } else {
                    PeerAllowlist::any()
                },
            },
        ];
        let verify = setup & 1 != 0;
        World {
            rnic: Responder::new(DeviceConfig {
                local: COLLECTOR,
                local_mac: MacAddr([2, 0, 0, 0, 0, 0x51]),
                pmtu: 4096,
                l2_frames: true,
            }),
            cm: CmResponder::new(COLLECTOR, MacAddr([2, 0, 0, 0, 0, 0x51]), services, verify),
            init: CmInitiator::new(
                TRANSLATOR,
                MacAddr([2, 0, 0, 0, 0, 1]),
                COLLECTOR,
                MacAddr([2, 0, 0, 0, 0, 0x51]),
                true,
                setup as u32,
            ),
            to_collector: VecDeque::new(),
            to_translator: VecDeque::new(),
            seen: Vec::new(),
            tx: TxBatch::new(64, 4200),
            now: 1_000_000_000,
            reqs: 0,
        }
    }

    fn remember(&mut self, payload: &[u8]) {
        if is_gsi(payload) {
            if let Ok(p) = dta_proto::wire::cm::parse_cm(payload) {
                if self.seen.len() < 16 {
                    self.seen.push((p.hdr, p.msg));
                }
            }
        }
    }

    fn deliver_collector(&mut self, src: SocketAddrV4, payload: &[u8]) {
        self.remember(payload);
        let d = Datagram {
            src,
            dst: COLLECTOR,
            ip: None,
            payload,
        };
        if is_gsi(payload) {
            let before = self.cm.counters.cm_req;
            self.cm.handle(self.now, &d, &mut self.rnic, &mut self.tx);
            self.reqs += self.cm.counters.cm_req - before;
        } else {
            self.rnic.handle(&d, &mut self.tx);
        }
        drain(&mut self.tx, &mut self.to_translator, COLLECTOR);
    }

    fn deliver_translator(&mut self, src: SocketAddrV4, payload: &[u8]) {
        self.remember(payload);
        let d = Datagram {
            src,
            dst: TRANSLATOR,
            ip: None,
            payload,
        };
        if self.init.wants(&d) {
            self.init.handle(self.now, &d, &mut self.tx);
            while self.init.poll_event().is_some() {}
        }
        drain(&mut self.tx, &mut self.to_collector, TRANSLATOR);
    }

    fn step(&mut self, r: &mut Reader<'_>) {
        match r.u8() % 10 {
            0 => {
                let port = match r.u8() % 4 {
                    0 | 1 => PORTS[0],
                    2 => PORTS[1],
                    _ => r.u16(),
                };
                let qpn = Qpn::new(r.u32());
                let psn = Psn::new(r.u32());
                self.init.connect(port, qpn, psn, self.now, &mut self.tx);
                drain(&mut self.tx, &mut self.to_collector, TRANSLATOR);
            }
            k @ (1 | 2) => {
                let corrupt = r.u8() == 0xC3;
                let (pos, mask) = (r.u16() as usize, r.u8() | 1);
                let wire = if k == 1 {
                    &mut self.to_collector
                } else {
                    &mut self.to_translator
                };
                let Some((src, mut f)) = wire.pop_front() else {
                    return;
                };
                if corrupt && f.len() > L2L4_LEN {
                    let i = L2L4_LEN + pos % (f.len() - L2L4_LEN);
                    f[i] ^= mask;
                }
                let payload = f.get(L2L4_LEN..).unwrap_or(&[]).to_vec();
                if k == 1 {
                    self.deliver_collector(src, &payload);
                } else {
                    self.deliver_translator(src, &payload);
                }
            }
            3 => {
                if r.bool() {
                    self.to_collector.pop_front();
                } else {
                    self.to_translator.pop_front();
                }
            }
            4 => {
                let wire = if r.bool() {
                    &mut self.to_collector
                } else {
                    &mut self.to_translator
                };
                if let Some(f) = wire.front().cloned() {
                    if wire.len() < 64 {
                        wire.push_back(f);
                    }
                }
            }
            5 => {
                let src = if r.bool() {
                    TRANSLATOR
                } else {
                    SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, r.u8()), r.u16())
                };
                let raw = r.chunk().to_vec();
                self.deliver_collector(src, &raw);
            }
            6 => {
                let raw = r.chunk().to_vec();
                self.deliver_translator(COLLECTOR, &raw);
            }
            7 | 8 => {
                // A seen CM message with one 32-bit word of its MAD changed, re-sealed with a
                // valid ICRC, to either side.
                if self.seen.is_empty() {
                    return;
                }
                let (hdr, msg) = self.seen[r.u8() as usize % self.seen.len()];
                let mut mad = [0u8; MAD_LEN];
                msg.emit(&hdr, &mut mad);
                let at = 24 + (r.u8() as usize % ((MAD_LEN - 24) / 4)) * 4;
                mad[at..at + 4].copy_from_slice(&r.u32().to_be_bytes());
                let Ok((hdr2, msg2)) = CmMessage::parse(&mad) else {
                    return;
                };
                let to_collector = r.bool();
                let (from, to) = if to_collector {
                    (TRANSLATOR, COLLECTOR)
                } else {
                    (COLLECTOR, TRANSLATOR)
                };
                let ep = RoceEndpoint {
                    src_mac: MacAddr([2, 0, 0, 0, 0, 1]),
                    dst_mac: MacAddr([2, 0, 0, 0, 0, 0x51]),
                    src_ip: *from.ip(),
                    dst_ip: *to.ip(),
                    src_port: from.port(),
                    dst_port: to.port(),
                    ttl: 64,
                    tos: 0,
                    ident: 0,
                };
                let mut f = vec![0u8; 512];
                let n = build_cm_frame(&ep, Psn::new(0), &hdr2, &msg2, &mut f);
                f.truncate(n);
                if let Ok(p) = parse_frame(&f) {
                    assert!(p.roce.deth.is_some(), "a CM frame carries a DETH");
                }
                let payload = f[L2L4_LEN..].to_vec();
                if to_collector {
                    self.deliver_collector(from, &payload);
                } else {
                    self.deliver_translator(from, &payload);
                }
            }
            _ => {
                self.now += r.u32() as u64 * 1000;
                self.init.poll(self.now, &mut self.tx);
                while self.init.poll_event().is_some() {}
                drain(&mut self.tx, &mut self.to_collector, TRANSLATOR);
                self.cm.poll(self.now, &mut self.rnic, &mut self.tx);
                self.rnic.poll(self.now, &mut self.tx);
                drain(&mut self.tx, &mut self.to_translator, COLLECTOR);
            }
        }
        assert!(
            self.cm.connections().len() as u64 <= self.reqs,
            "more connections than REQs"
        );
    }
}

fuzz_target!(|data: &[u8]| {
    let mut r = Reader::new(data);
    let mut w = World::new(r.u8());
    // Always start one connection so the fuzzer sees the handshake from the first byte on.
    w.init
        .connect(PORTS[0], Qpn::new(0x100), Psn::new(0x42), w.now, &mut w.tx);
    drain(&mut w.tx, &mut w.to_collector, TRANSLATOR);
    let mut steps = 0;
    while !r.is_empty() && steps < 200 {
        steps += 1;
        w.step(&mut r);
    }
});
