//! The translator pipeline fed arbitrary datagrams (raw bytes, and well-formed reports in both
//! profiles with fuzz-chosen fields, from several reporters), interleaved with time steps, with
//! frames flowing to the software RNIC and its ACKs/NAKs back (the in-memory harness).
//!
//! After every step the accounting identity holds: `rx_datagrams = translated + dropped +
//! pending`. At the end (after a flush) nothing is pending and every datagram was counted.
#![no_main]

use std::net::{Ipv4Addr, SocketAddrV4};

use dta_collector::config::{CollectorConfig, DeviceSection};
use dta_collector::config::{StoreConfig, StoreKindConfig};
use dta_collector::rnic::responder::{Access, DeviceConfig, QpConfig, Responder};
use dta_collector::store::{build_stores, Store};
use dta_fuzz::Reader;
use dta_proto::batch::{Datagram, IpMeta, TxBatch};
use dta_proto::hash::HashProfile;
use dta_proto::layout::AppendFormat;
use dta_proto::meta::StoreKind;
use dta_proto::meta::{QpMeta, StoreMeta};
use dta_proto::wire::dta::BaseVariant;
use dta_proto::wire::ethernet::MacAddr;
use dta_proto::wire::ib::{Psn, Qpn};
use dta_proto::wire::report::{
    ParseConfig, Primitive, Priority, Profile, Report, ReportHeader, MAX_EMIT_LEN,
};
use dta_proto::wire::roce::{parse_frame, L2L4_LEN};
use dta_proto::{Key, Value};
use dta_translator::datapath::pipeline::{
    CollectorTarget, Pipeline, PipelineConfig, QpBinding, RateLimit, Route,
};
use dta_translator::datapath::qp::QpTuning;
use libfuzzer_sys::fuzz_target;
use std::sync::OnceLock;

fn stores() -> Vec<StoreConfig> {
    let s = |name: &str, kind| StoreConfig {
        name: name.into(),
        port: None,
        cm_allow: None,
        kind,
    };
    vec![
        s(
            "kw",
            StoreKindConfig::new(StoreKind::KeyWrite {
                slots: 64,
                slot_size: 8,
                hash: HashProfile::Independent,
            })
            .with_redundancy(2),
        ),
        s(
            "ki",
            StoreKindConfig::new(StoreKind::KeyIncrement {
                slots: 64,
                hash: HashProfile::Independent,
            })
            .with_redundancy(2),
        ),
        s(
            "ap",
            StoreKindConfig::new(StoreKind::Append {
                lists: 2,
                first_list: 0,
                capacity: 16,
                entry_size: 4,
                batch: 4,
                format: AppendFormat::Sequenced,
                list_stride: 0,
            }),
        ),
        s(
            "pc",
            StoreKindConfig::new(StoreKind::Postcard {
                chunks: 16,
                hops: 5,
                hash: HashProfile::Independent,
            })
            .with_redundancy(1),
        ),
    ]
}

fn report(r: &mut Reader<'_>) -> (Report, Profile) {
    let sel = r.u8();
    let profile = [Profile::Extended, Profile::ReferenceB, Profile::ReferenceA][sel as usize % 3];
    let header = ReportHeader {
        profile,
        immediate: r.bool(),
        retransmittable: r.bool(),
        seq: Some(r.u32() % 64),
        priority: [Priority::Low, Priority::Medium, Priority::High][r.u8() as usize % 3],
    };
    let key_len = 1 + r.u8() as usize % 16;
    let key = Key::new(r.bytes(key_len)).unwrap_or_else(|| Key::new(b"k").expect("key"));
    let vlen = 1 + r.u8() as usize % 8;
    let value = Value::new(r.bytes(vlen)).unwrap_or_else(|| Value::new(b"v").expect("value"));
    let primitive = match (sel >> 2) % 4 {
        0 => Primitive::KeyWrite {
            redundancy: r.u8() % 6,
            key,
            value,
        },
        1 => Primitive::KeyIncrement {
            redundancy: r.u8() % 6,
            key,
            delta: r.u64(),
        },
        2 => Primitive::Append {
            list: r.u32() % 4,
            value,
        },
        _ => Primitive::Postcard {
            flow: key,
            hop: r.u8() % 8,
            path_len: r.u8() % 8,
            value: r.u32(),
        },
    };
    (Report { header, primitive }, profile)
}

const TRANSLATOR: SocketAddrV4 = SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 101), 4791);
const COLLECTOR: SocketAddrV4 = SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 51), 4791);
const REPORT_DST: SocketAddrV4 = SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 101), 40040);
const NACK_PORT: u16 = 40044;

/// The collector's stores, built once per process; every run zeroes them and registers them
/// with a fresh responder in the same order, which yields the same R_Keys.
fn shared_stores() -> &'static Vec<Store> {
    static S: OnceLock<Vec<Store>> = OnceLock::new();
    S.get_or_init(|| {
        let mut rnic = Responder::new(device());
        build_stores(&collector_config(), &mut rnic).expect("stores build")
    })
}

fn collector_config() -> CollectorConfig {
    CollectorConfig {
        collector: DeviceSection {
            roce: COLLECTOR,
            hugepages: false,
            verify_icrc: true,
            ..DeviceSection::default()
        },
        static_peers: vec![],
        stores: stores(),
        export: Default::default(),
        pull: None,
    }
}

fn device() -> DeviceConfig {
    DeviceConfig {
        local: COLLECTOR,
        local_mac: MacAddr([2, 0, 0, 0, 0, 0x51]),
        pmtu: 4096,
        l2_frames: true,
    }
}

/// Pipeline → wire (with optional loss) → responder → pipeline, in memory, with small batches.
struct World {
    pipeline: Pipeline,
    rnic: Responder,
    tx: TxBatch,
    rnic_tx: TxBatch,
    now: u64,
    loss_every: u64,
    wire_count: u64,
}

fn first_of(metas: &[StoreMeta], kind: &str) -> Route {
    metas
        .iter()
        .position(|s| s.kind.name() == kind)
        .map_or(Route::None, Route::Single)
}

impl World {
    fn new(setup: u8) -> World {
        let mut rnic = Responder::new(device());
        let mut metas = Vec::new();
        for (i, s) in shared_stores().iter().enumerate() {
            s.region.zero(0, s.region.len()).expect("whole region");
            // R_Keys are random per registration: the translator learns this one.
            let rkey = rnic.register(s.region.clone(), Access::ALL);
            let psn = Psn::new(0xFFFFF0 + i as u32);
            let qpn = rnic.create_qp(QpConfig {
                peer: TRANSLATOR,
                peer_mac: MacAddr([2, 0, 0, 0, 0, 1]),
                peer_qpn: Qpn::new(0x100 + i as u32),
                rq_psn: psn,
                sq_psn: Psn::new(0),
                verify_icrc: true,
                recv_credits: 1 << 20,
            });
            let mut meta = s.meta.clone();
            meta.rkey = rkey.0;
            meta.qps.push(QpMeta {
                qpn: qpn.value(),
                psn: psn.value(),
                peer_qpn: 0x100 + i as u32,
            });
            metas.push(meta);
        }
        let target = CollectorTarget {
            roce: COLLECTOR,
            mac: MacAddr([2, 0, 0, 0, 0, 0x51]),
            stores: metas
                .iter()
                .map(|m| {
                    (
                        m.clone(),
                        QpBinding {
                            local_qpn: Qpn::new(m.qps[0].peer_qpn),
                            remote_qpn: Qpn::new(m.qps[0].qpn),
                            start_psn: Psn::new(m.qps[0].psn),
                        },
                    )
                })
                .collect(),
        };
        let pc = PipelineConfig {
            worker: 0,
            workers: 1,
            parse: ParseConfig {
                reference_variant: if setup & 1 != 0 {
                    BaseVariant::A
                } else {
                    BaseVariant::B
                },
                ..ParseConfig::default()
            },
            max_redundancy: 4,
            l2_frames: true,
            local: TRANSLATOR,
            local_mac: MacAddr([2, 0, 0, 0, 0, 1]),
            nack_port: NACK_PORT,
            append_flush_ns: 1_000_000,
            postcard_flush_ns: if setup & 2 != 0 { 1_000_000 } else { 0 },
            postcard_cache_slots: 64,
            postcard_redundancy: 1,
            qp: QpTuning {
                ack_every: 4,
                ack_timeout_ns: 2_000_000,
                // A small ring: overruns are reachable, and an execution does not zero the
                // default 1,024-frame rings of four QPs (which cut the rate to ~600/s).
                // Setup bit 8 selects no ring (count and resync).
                retransmit_window: if setup & 8 != 0 { 0 } else { 32 },
                ..QpTuning::default()
            },
            rate: RateLimit::default(),
            backlog: 64,
            max_reporters: 8,
            route_keywrite: first_of(&metas, "keywrite"),
            route_keyincrement: first_of(&metas, "keyincrement"),
            route_postcard: first_of(&metas, "postcard"),
            sketch: Default::default(),
        };
        World {
            pipeline: Pipeline::new(pc, &[target]).expect("pipeline builds"),
            rnic,
            tx: TxBatch::new(16, 2048),
            rnic_tx: TxBatch::new(16, 2048),
            now: 1_000_000,
            loss_every: if setup & 4 != 0 { 7 } else { 0 },
            wire_count: 0,
        }
    }

    /// Moves frames translator → responder → translator until both sides are quiet.
    fn pump(&mut self) {
        for _ in 0..16 {
            self.pipeline.poll_transmit(self.now, &mut self.tx);
            if self.tx.is_empty() && self.rnic_tx.is_empty() {
                return;
            }
            for i in 0..self.tx.len() {
                let f = self.tx.frame(i);
                if self.tx.dest(i).port() == NACK_PORT {
                    continue;
                }
                let Ok(p) = parse_frame(f) else { continue };
                if p.udp.dst_port != 4791 {
                    continue;
                }
                self.wire_count += 1;
                if self.loss_every != 0 && self.wire_count.is_multiple_of(self.loss_every) {
                    continue;
                }
                let d = Datagram {
                    src: SocketAddrV4::new(p.ip.src, p.udp.src_port),
                    dst: SocketAddrV4::new(p.ip.dst, p.udp.dst_port),
                    ip: Some(IpMeta {
                        ident: p.ip.ident,
                        dont_frag: p.ip.dont_frag,
                        ttl: p.ip.ttl,
                        tos: p.ip.tos,
                    }),
                    payload: &f[L2L4_LEN..],
                };
                self.rnic.handle(&d, &mut self.rnic_tx);
            }
            self.tx.clear();
            for i in 0..self.rnic_tx.len() {
                let r = self.rnic_tx.frame(i);
                if let Ok(p) = parse_frame(r) {
                    let d = Datagram {
                        src: SocketAddrV4::new(p.ip.src, p.udp.src_port),
                        dst: SocketAddrV4::new(p.ip.dst, p.udp.dst_port),
                        ip: None,
                        payload: &r[L2L4_LEN..],
                    };
                    self.pipeline.handle_responses(self.now, &[d], &mut self.tx);
                }
            }
            self.rnic_tx.clear();
        }
    }

    fn send(&mut self, from: SocketAddrV4, payload: &[u8]) {
        let d = [Datagram {
            src: from,
            dst: REPORT_DST,
            ip: None,
            payload,
        }];
        let before = self.pipeline.counters().rx_datagrams;
        self.pipeline.handle_reports(self.now, &d, &mut self.tx);
        assert_eq!(
            self.pipeline.counters().rx_datagrams,
            before + 1,
            "every datagram is counted, whatever room the batch has"
        );
        self.pump();
    }

    fn advance(&mut self, ns: u64) {
        let end = self.now + ns;
        while let Some(d) = self.pipeline.next_deadline().filter(|&d| d <= end) {
            self.now = self.now.max(d);
            self.pipeline.poll(self.now, &mut self.tx);
            self.pump();
        }
        self.now = end;
        self.pipeline.poll(self.now, &mut self.tx);
        self.pump();
    }

    fn flush(&mut self) {
        for _ in 0..10_000 {
            if self.pipeline.flush_all(self.now, &mut self.tx) {
                break;
            }
            self.pump();
        }
        self.pump();
    }
}

fuzz_target!(|data: &[u8]| {
    let mut r = Reader::new(data);
    let mut h = World::new(r.u8());
    let mut sent = 0u64;
    let mut buf = [0u8; MAX_EMIT_LEN + 8];
    let mut steps = 0;
    while !r.is_empty() && steps < 100 {
        steps += 1;
        let op = r.u8();
        let from = SocketAddrV4::new(Ipv4Addr::new(10, 0, 1, op >> 5), 40000);
        match op % 4 {
            0 | 1 => {
                let (rep, profile) = report(&mut r);
                let Ok(n) = rep.emit(profile, &mut buf) else {
                    continue;
                };
                h.send(from, &buf[..n]);
                sent += 1;
            }
            2 => {
                let raw = r.chunk();
                h.send(from, raw);
                sent += 1;
            }
            _ => h.advance(r.u16() as u64 * 1000),
        }
        let c = *h.pipeline.counters();
        assert_eq!(c.rx_datagrams, sent);
        assert_eq!(
            c.rx_datagrams,
            c.translated + c.dropped() + h.pipeline.pending_reports(),
            "{c:?}"
        );
    }
    // Shut down cleanly: flush partial batches and let time run so that reports waiting in
    // the backlog behind a lost frame are sent after the retransmission (`flush_all` does not
    // touch the backlog; the QP's ACK timeout does).
    for _ in 0..200 {
        h.flush();
        if h.pipeline.pending_reports() == 0 {
            break;
        }
        h.advance(5_000_000);
    }
    let c = *h.pipeline.counters();
    assert_eq!(c.rx_datagrams, sent);
    assert_eq!(
        h.pipeline.pending_reports(),
        0,
        "a flush and 1 s of timers leave nothing pending"
    );
    assert_eq!(c.rx_datagrams, c.translated + c.dropped(), "{c:?}");
});
