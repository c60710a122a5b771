//! The conformance model behind `dta corpus` and the shared conformance corpus (`tests/corpus/`), one folder per case:
//!
//! - `case.json`: the collector stores, the translator knobs and the *canonical* RDMA
//!   coordinates (addresses, R_Keys, QPNs, start PSNs) every translator under test must use;
//! - `reports.pcap`: the DTA reports (Ethernet/IPv4/UDP, 10.0.0.200:40041 → 10.0.0.101:40040);
//! - `expected.pcap`: the RoCEv2 frames a translator must emit, byte for byte, reports first
//!   and then a clean-shutdown flush of partial Append batches and postcard entries;
//! - `memory-<store>.bin`: each store's memory after a collector executed those frames.
//!
//! Sketch-Merge cases (`sketch`, `PROTOCOL.md` §3.4, §5.7, §9) also expect the sketch-column
//! NACK frames the reports cause, in `expected.pcap` among the RoCEv2 frames, in the order a
//! translator emits them.
//!
//! The expected frames and memory come from the **model** in this module, written against the
//! protocol documents with nothing but `dta_proto`'s hashes, layouts and frame builder; it does
//! not use the translator. `tests/tests/corpus.rs` runs the real pipeline and software RNIC
//! against every case; `p4/README.md` explains how a Tofino run is checked against it.

use std::fs;
use std::io;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::path::Path;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use dta_collector::config::{StoreConfig, StoreKindConfig};
use dta_collector::store::layout_of;
use dta_proto::geometry::StoreGeometry;
use dta_proto::hash::{HashProfile, KeyHasher, PostcardHasher, MAX_HOPS};
use dta_proto::layout::{
    AppendFormat, AppendLayout, CounterLayout, KeyWriteLayout, PostcardLayout,
};
use dta_proto::meta::{StoreKind, StoreMeta};
use dta_proto::wire::ethernet::{EthernetFrame, EthernetRepr, MacAddr, ETHERTYPE_IPV4};
use dta_proto::wire::ib::{opcode as op, AethRepr, BthRepr, NakCode, Psn, Qpn, Syndrome};
use dta_proto::wire::ipv4::{Ipv4Packet, Ipv4Repr, PROTO_UDP};
use dta_proto::wire::report::{Primitive, Priority, Profile, Report, ReportHeader};
use dta_proto::wire::roce::{build_frame, frame_len, RoceEndpoint};
use dta_proto::wire::udp::{UdpPacket, UdpRepr};
use dta_proto::{Key, Value};

mod sketch;

pub use sketch::{is_nack_frame, SketchCase, SketchSwitches};

/// The reporter every report comes from.
pub const REPORTER: SocketAddrV4 = SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 200), 40041);
/// Where reports are sent (the translator).
pub const REPORT_DST: SocketAddrV4 = SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 101), 40040);
/// The translator's RoCEv2 address.
pub const TRANSLATOR: SocketAddrV4 = SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 101), 4791);
/// The collector's RoCEv2 address.
pub const COLLECTOR: SocketAddrV4 = SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 51), 4791);
/// The translator's MAC.
pub const TRANSLATOR_MAC: MacAddr = MacAddr([2, 0, 0, 0, 0, 1]);
/// The collector's MAC.
pub const COLLECTOR_MAC: MacAddr = MacAddr([2, 0, 0, 0, 0, 0x51]);
/// The reporter's MAC.
pub const REPORTER_MAC: MacAddr = MacAddr([2, 0, 0, 0, 0, 0x20]);

/// Canonical RDMA coordinates of one store's QP.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct CanonicalQp {
    /// Region base address the frames use.
    pub addr: u64,
    /// R_Key the frames carry.
    pub rkey: u32,
    /// Translator-side QPN.
    pub local_qpn: u32,
    /// Collector QPN (BTH destination QP).
    pub remote_qpn: u32,
    /// First PSN.
    pub psn: u32,
}

/// Everything a translator needs to replay a case, as stored in `case.json`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CaseFile {
    /// Folder name.
    pub name: String,
    /// What the case covers.
    pub description: String,
    /// Reference base variant the reports use ("A" or "B").
    pub reference_variant: String,
    /// translator.max_redundancy.
    pub max_redundancy: u8,
    /// reliability.ack_every.
    pub ack_every: u32,
    /// postcard.cache_slots.
    pub postcard_cache_slots: u32,
    /// postcard.redundancy.
    pub postcard_redundancy: u8,
    /// The store descriptions (layout as the collector publishes it, canonical coordinates).
    pub metas: Vec<StoreMeta>,
    /// Canonical QP coordinates, one per store.
    pub qps: Vec<CanonicalQp>,
    /// Number of reports and of expected frames (a quick consistency check).
    pub reports: usize,
    /// See `reports`.
    pub frames: usize,
    /// How many of the expected frames the reports cause directly; the rest come from the
    /// final flush (a translator without flush timers, such as the Tofino program, emits only
    /// this prefix).
    pub frames_before_flush: usize,
    /// `-D` flags that compile `p4/translator/dta_translator.p4` for this case.
    pub p4_defines: String,
    /// Whether the Tofino program can run this case (4-byte keys and values, 8-byte slots);
    /// if not, why.
    pub p4_unsupported: Option<String>,
    /// Sketch-Merge settings and switches (cases with Sketch stores only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sketch: Option<SketchCase>,
    /// Collector responses (ACKs, NAKs) to inject, in order, each after report `after_report`
    /// (1-based) has been translated; their frames are `responses.pcap`. Empty in most cases.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub responses: Vec<CaseResponse>,
}

/// A collector response a case injects (`responses.pcap` holds its frame).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct CaseResponse {
    /// Injected after this many reports (1-based) were translated.
    pub after_report: usize,
    /// The store (index into `metas` / `qps`) whose QP it answers.
    pub store: usize,
    /// What it is.
    pub syndrome: ResponseKind,
    /// The PSN it names: the PSN ACKed, or the PSN the responder expects (NAK).
    pub psn: u32,
    /// Whether the translator must act on it: an ACK of a PSN it sent, a NAK naming a PSN
    /// after everything ACKed; `false`: stale (a NAK naming a PSN the responder already
    /// executed), ignored and counted.
    pub fresh: bool,
}

/// The AETH syndromes a case injects.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ResponseKind {
    /// ACK.
    Ack,
    /// NAK "PSN sequence error".
    NakPsnSequenceError,
}

impl CaseFile {
    /// The collector's store configuration, in order (the first store of each kind serves its
    /// primitive), rebuilt from the published layouts in [`CaseFile::metas`].
    pub fn store_configs(&self) -> Vec<StoreConfig> {
        self.metas
            .iter()
            .map(|m| StoreConfig {
                name: m.name.clone(),
                port: None,
                cm_allow: None,
                // The published layout is the configured one (an Append store's list stride
                // is the collector's again).
                kind: StoreKindConfig::new(m.kind.clone()).with_redundancy(match m.kind {
                    StoreKind::Postcard { .. } => self.postcard_redundancy,
                    _ => kv_redundancy(m),
                }),
            })
            .collect()
    }
}

/// The N a collector store is configured with for a case's store: the one its metadata
/// records, or the default. The corpus's metadata records none (the translator then accepts
/// any N up to `max_redundancy`, which the cases exercise, bad N included); the translator's
/// own tests cover stores that record one.
fn kv_redundancy(m: &StoreMeta) -> u8 {
    m.redundancy.map_or(
        dta_collector::config::DEFAULT_KV_REDUNDANCY,
        dta_proto::meta::Redundancy::get,
    )
}

/// A case before it is modelled.
struct Spec {
    name: String,
    description: String,
    variant_b: bool,
    max_redundancy: u8,
    ack_every: u32,
    cache_slots: u32,
    pc_redundancy: u8,
    first_psn: Option<u32>,
    stores: Vec<StoreConfig>,
    reports: Vec<(Report, Profile)>,
    /// Sketch-Merge datagrams (UDP payloads), sent after `reports`.
    sketch_reports: Vec<Vec<u8>>,
    /// `[sketch] expected_switches`.
    sketch_expected: u16,
    /// (after report, store, kind, PSN): collector responses (see [`CaseResponse`]).
    responses: Vec<(usize, usize, ResponseKind, u32)>,
}

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

fn header(profile: Profile, immediate: bool, seq: u32) -> ReportHeader {
    ReportHeader {
        profile,
        immediate,
        retransmittable: false,
        seq: match profile {
            Profile::ReferenceA => None,
            Profile::ReferenceB => Some(seq & 0xff),
            Profile::Extended => Some(seq),
        },
        priority: match profile {
            Profile::Extended => Priority::High,
            _ => Priority::Medium,
        },
    }
}

fn store(name: &str, kind: StoreKindConfig) -> StoreConfig {
    StoreConfig {
        name: name.into(),
        port: None,
        cm_allow: None,
        kind,
    }
}

fn hash_name(h: HashProfile) -> &'static str {
    match h {
        HashProfile::Reference => "refhash",
        HashProfile::Independent => "indhash",
    }
}

fn profile_name(p: Profile) -> &'static str {
    match p {
        Profile::ReferenceA => "refA",
        Profile::ReferenceB => "refB",
        Profile::Extended => "ext",
    }
}

fn key_for(profile: Profile, k: u32) -> Key {
    match profile {
        Profile::Extended => Key::new(&k.to_be_bytes()).expect("4-byte key"),
        _ => Key::from_u32_reference(k),
    }
}

fn specs() -> Vec<Spec> {
    let mut out = Vec::new();
    let mut rng = Rng(0x00C0_4205);
    let base = |name: String, description: String, variant_b: bool| Spec {
        name,
        description,
        variant_b,
        max_redundancy: 4,
        ack_every: 4,
        cache_slots: 8,
        pc_redundancy: 1,
        first_psn: None,
        stores: vec![],
        reports: vec![],
        sketch_reports: vec![],
        sketch_expected: 1,
        responses: vec![],
    };

    // Key-Write: both hash profiles, both report profiles, N = 1..4, 16 slots (collisions).
    for hash in [HashProfile::Reference, HashProfile::Independent] {
        for profile in [Profile::ReferenceB, Profile::Extended] {
            for n in 1..=4u8 {
                let mut s = base(
                    format!(
                        "keywrite_{}_{}_n{n}",
                        hash_name(hash),
                        profile_name(profile)
                    ),
                    format!(
                        "Key-Write, {hash:?} hashes, {profile:?} reports, N = {n}, 16 slots: \
                         colliding keys overwrite each other; one immediate report"
                    ),
                    true,
                );
                s.stores.push(store(
                    "kw",
                    StoreKindConfig::new(StoreKind::KeyWrite {
                        slots: 16,
                        slot_size: 8,
                        hash,
                    })
                    .with_redundancy(n),
                ));
                for i in 0..24u32 {
                    let k = rng.below(12) as u32;
                    let v = rng.next() as u32;
                    s.reports.push((
                        Report {
                            header: header(profile, i == 5, i),
                            primitive: Primitive::KeyWrite {
                                redundancy: n,
                                key: key_for(profile, k),
                                value: Value::new(&v.to_be_bytes()).expect("value"),
                            },
                        },
                        profile,
                    ));
                }
                out.push(s);
            }
        }
    }
    // Key-Write with wider values and invalid redundancy (dropped, no frames).
    {
        let mut s = base(
            "keywrite_wide_values_and_bad_redundancy".into(),
            "Key-Write, 32-byte slots, 13-byte keys and 20-byte values (extended), plus reports \
             with N = 0 and N = 5 that must be dropped"
                .into(),
            false,
        );
        s.stores.push(store(
            "kw",
            StoreKindConfig::new(StoreKind::KeyWrite {
                slots: 64,
                slot_size: 32,
                hash: HashProfile::Independent,
            })
            .with_redundancy(dta_collector::config::DEFAULT_KV_REDUNDANCY),
        ));
        for i in 0..12u32 {
            let mut key = [0u8; 13];
            key[..4].copy_from_slice(&(10 << 24 | i).to_be_bytes());
            let mut val = [0u8; 20];
            for (j, b) in val.iter_mut().enumerate() {
                *b = (i as u8).wrapping_mul(7).wrapping_add(j as u8);
            }
            let n = [2u8, 0, 3, 5, 1, 4][i as usize % 6];
            s.reports.push((
                Report {
                    header: header(Profile::Extended, false, i),
                    primitive: Primitive::KeyWrite {
                        redundancy: n,
                        key: Key::new(&key).expect("key"),
                        value: Value::new(&val).expect("value"),
                    },
                },
                Profile::Extended,
            ));
        }
        out.push(s);
    }
    // PSN wrap.
    {
        let mut s = base(
            "keywrite_psn_wrap".into(),
            "Key-Write, N = 2, the QP starts at PSN 0xFFFFF9 so the 24-bit PSN wraps".into(),
            false,
        );
        s.first_psn = Some(0xFF_FFF9);
        s.stores.push(kw_256_store());
        for i in 0..10u32 {
            s.reports.push((
                Report {
                    header: header(Profile::ReferenceA, false, i),
                    primitive: Primitive::KeyWrite {
                        redundancy: 2,
                        key: key_for(Profile::ReferenceA, i * 977),
                        value: Value::new(&(i ^ 0xA5A5).to_be_bytes()).expect("value"),
                    },
                },
                Profile::ReferenceA,
            ));
        }
        out.push(s);
    }
    // PSN resync: collector ACKs and NAKs across the PSN wrap. Stale NAKs name PSNs the
    // responder already executed (ACKed): a translator that moved its PSN back to them would
    // send the next frames under executed PSNs, which the responder silently drops as
    // duplicates, and the frames here would differ. The fresh NAK names the next PSN.
    {
        let mut s = base(
            "keywrite_psn_resync".into(),
            "Key-Write, N = 2, from PSN 0xFFFFF0 across the 24-bit wrap, with collector \
             responses: ACKs, stale NAKs naming executed PSNs (before and across the wrap, \
             ignored and counted) and a fresh NAK naming the next PSN (nothing lost)"
                .into(),
            false,
        );
        s.first_psn = Some(0xFF_FFF0);
        s.stores.push(kw_256_store());
        for i in 0..12u32 {
            s.reports.push((
                Report {
                    header: header(Profile::ReferenceA, false, i),
                    primitive: Primitive::KeyWrite {
                        redundancy: 2,
                        key: key_for(Profile::ReferenceA, i * 613 + 5),
                        value: Value::new(&(i ^ 0x5A5A).to_be_bytes()).expect("value"),
                    },
                },
                Profile::ReferenceA,
            ));
        }
        // Two frames per report: after report r, PSNs 0xFFFFF0 .. 0xFFFFF0 + 2r - 1 were sent.
        use ResponseKind::{Ack, NakPsnSequenceError as Nak};
        s.responses = vec![
            (3, 0, Ack, 0xFF_FFF3),  // F0..F3 executed
            (5, 0, Nak, 0xFF_FFF2),  // stale: F2 was ACKed
            (6, 0, Nak, 0xFF_FFFC),  // fresh: the next PSN (nothing lost)
            (9, 0, Ack, 0x00_0001),  // across the wrap: everything through 1 executed
            (10, 0, Nak, 0xFF_FFFE), // stale, across the wrap
            (11, 0, Nak, 0x00_0000), // stale: 0 was ACKed
        ];
        out.push(s);
    }
    // Key-Increment: both hash profiles, N = 1..4, immediate notifications.
    for hash in [HashProfile::Reference, HashProfile::Independent] {
        for n in 1..=4u8 {
            let profile = if n % 2 == 0 {
                Profile::Extended
            } else {
                Profile::ReferenceB
            };
            let mut s = base(
                format!("keyincrement_{}_n{n}", hash_name(hash)),
                format!(
                    "Key-Increment, {hash:?} hashes, N = {n}, 32 counters, {profile:?} reports, \
                     repeated keys; two immediate reports (zero-length WRITE with Immediate)"
                ),
                true,
            );
            s.stores.push(store(
                "ki",
                StoreKindConfig::new(StoreKind::KeyIncrement { slots: 32, hash })
                    .with_redundancy(n),
            ));
            for i in 0..20u32 {
                s.reports.push((
                    Report {
                        header: header(profile, i == 3 || i == 11, i),
                        primitive: Primitive::KeyIncrement {
                            redundancy: n,
                            key: key_for(profile, rng.below(6) as u32),
                            delta: rng.below(1000) + (i as u64) * 0x1_0000_0001,
                        },
                    },
                    profile,
                ));
            }
            out.push(s);
        }
    }
    // Append: batch 1, 4, 16; both formats; wraps; partial batches flushed at the end.
    for batch in [1u32, 4, 16] {
        for format in [AppendFormat::Reference, AppendFormat::Sequenced] {
            let profile = if batch == 4 {
                Profile::Extended
            } else {
                Profile::ReferenceA
            };
            let fname = match format {
                AppendFormat::Reference => "ring",
                AppendFormat::Sequenced => "sequenced",
            };
            let mut s = base(
                format!("append_b{batch}_{fname}"),
                format!(
                    "Append, batch {batch}, {format:?} format, 3 lists of 4 batches each, \
                     {profile:?} reports: every list wraps at least once, the last batches are \
                     partial and flushed at shutdown, one immediate report"
                ),
                false,
            );
            s.stores.push(store(
                "ap",
                StoreKindConfig::new(StoreKind::Append {
                    lists: 3,
                    first_list: 7,
                    capacity: 4 * batch,
                    entry_size: 4,
                    batch,
                    format,
                    list_stride: 0,
                }),
            ));
            let count = 3 * (4 * batch + batch / 2 + 1) + 5;
            for i in 0..count {
                let list = 7 + rng.below(3) as u32;
                s.reports.push((
                    Report {
                        header: header(profile, i == 2, i),
                        primitive: Primitive::Append {
                            list,
                            value: Value::new(&(0x1000_0000 + i).to_le_bytes()).expect("value"),
                        },
                    },
                    profile,
                ));
            }
            // An unknown list is dropped.
            s.reports.push((
                Report {
                    header: header(profile, false, count),
                    primitive: Primitive::Append {
                        list: 99,
                        value: Value::new(&[1, 2, 3, 4]).expect("value"),
                    },
                },
                profile,
            ));
            out.push(s);
        }
    }
    // Postcarding: short paths 1..B, collisions in an 8-entry cache, both hash profiles,
    // chunk redundancy 1 and 2, reference postcards (unknown path length).
    for (hash, hops, pc_r, profile) in [
        (HashProfile::Independent, 5u8, 1u8, Profile::Extended),
        (HashProfile::Independent, 3, 2, Profile::Extended),
        (HashProfile::Reference, 5, 1, Profile::Extended),
        (HashProfile::Reference, 5, 2, Profile::ReferenceB),
        (HashProfile::Independent, 5, 1, Profile::ReferenceA),
    ] {
        let mut s = base(
            format!(
                "postcard_{}_{}_h{hops}_r{pc_r}",
                hash_name(hash),
                profile_name(profile)
            ),
            format!(
                "Postcarding, {hash:?} hashes, {hops} hops, {pc_r} chunk copies, 8-entry cache \
                 (collisions evict the old flow to its own chunk), {profile:?} postcards, paths of \
                 length 1..{hops} (extended) or unknown (reference), interleaved flows, a duplicate \
                 hop, incomplete paths flushed at shutdown"
            ),
            matches!(profile, Profile::ReferenceB),
        );
        s.pc_redundancy = pc_r;
        s.stores.push(store(
            "pc",
            StoreKindConfig::new(StoreKind::Postcard {
                chunks: 64,
                hops,
                hash,
            })
            .with_redundancy(pc_r),
        ));
        let mut flows: Vec<(u32, u8, Vec<u8>)> = Vec::new();
        for f in 0..14u32 {
            let len = if profile == Profile::Extended {
                1 + (f % hops as u32) as u8
            } else {
                hops
            };
            let mut order: Vec<u8> = (0..len).collect();
            // Shuffle the hop order; drop the last hop of some flows (incomplete at shutdown).
            for i in (1..order.len()).rev() {
                order.swap(i, rng.below(i as u64 + 1) as usize);
            }
            if f % 5 == 4 && order.len() > 1 {
                order.pop();
            }
            if f == 6 {
                order.insert(0, order[0]); // a duplicate hop overwrites the value
            }
            flows.push((0x0A00_0000 + f * 0x0101, len, order));
        }
        let mut cursor = vec![0usize; flows.len()];
        let mut seq = 0u32;
        loop {
            let live: Vec<usize> = (0..flows.len())
                .filter(|&f| cursor[f] < flows[f].2.len())
                .collect();
            if live.is_empty() {
                break;
            }
            let f = live[rng.below(live.len().min(3) as u64) as usize];
            let (flow, len, order) = &flows[f];
            let hop = order[cursor[f]];
            cursor[f] += 1;
            s.reports.push((
                Report {
                    header: header(profile, false, seq),
                    primitive: Primitive::Postcard {
                        flow: Key::new(&flow.to_be_bytes()).expect("flow"),
                        hop,
                        path_len: if profile == Profile::Extended {
                            *len
                        } else {
                            0
                        },
                        value: 0x5100_0000 | (hop as u32) << 8 | f as u32,
                    },
                },
                profile,
            ));
            seq += 1;
        }
        out.push(s);
    }
    // Every primitive through one QP each, in one stream.
    {
        let mut s = base(
            "mixed_all_primitives".into(),
            "One collector with a Key-Write, a Key-Increment, an Append and a Postcarding store; \
             reports of all four primitives interleaved (each store has its own QP and PSNs)"
                .into(),
            true,
        );
        s.stores = vec![
            store(
                "kw",
                StoreKindConfig::new(StoreKind::KeyWrite {
                    slots: 32,
                    slot_size: 8,
                    hash: HashProfile::Independent,
                })
                .with_redundancy(dta_collector::config::DEFAULT_KV_REDUNDANCY),
            ),
            store(
                "ki",
                StoreKindConfig::new(StoreKind::KeyIncrement {
                    slots: 32,
                    hash: HashProfile::Independent,
                })
                .with_redundancy(dta_collector::config::DEFAULT_KV_REDUNDANCY),
            ),
            store(
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
            store(
                "pc",
                StoreKindConfig::new(StoreKind::Postcard {
                    chunks: 32,
                    hops: 5,
                    hash: HashProfile::Independent,
                })
                .with_redundancy(1),
            ),
        ];
        for i in 0..60u32 {
            let p = Profile::ReferenceB;
            let prim = match i % 4 {
                0 => Primitive::KeyWrite {
                    redundancy: 1 + (i % 3) as u8,
                    key: key_for(p, i),
                    value: Value::new(&i.to_be_bytes()).expect("value"),
                },
                1 => Primitive::KeyIncrement {
                    redundancy: 2,
                    key: key_for(p, i % 7),
                    delta: i as u64,
                },
                2 => Primitive::Append {
                    list: i % 2,
                    value: Value::new(&i.to_le_bytes()).expect("value"),
                },
                _ => Primitive::Postcard {
                    flow: Key::new(&(0xC0A8_0000 + i / 20).to_be_bytes()).expect("flow"),
                    hop: ((i / 4) % 5) as u8,
                    path_len: 0,
                    value: i,
                },
            };
            s.reports.push((
                Report {
                    header: header(p, false, i),
                    primitive: prim,
                },
                p,
            ));
        }
        out.push(s);
    }
    out.extend(sketch::specs(&mut rng, &|name, description| {
        base(name, description, false)
    }));
    out
}

// ------------------------------------------------------------------------------------ model

struct Cache {
    flow: Key,
    mask: u16,
    path_len: u8,
    imm: bool,
    values: [u32; MAX_HOPS],
}

enum State {
    KeyWrite(KeyHasher, KeyWriteLayout),
    KeyIncrement(KeyHasher, CounterLayout),
    Append {
        layout: AppendLayout,
        first: u32,
        stride: u64,
        pending: Vec<Vec<Vec<u8>>>,
        imm: Vec<bool>,
        written: Vec<u64>,
    },
    Postcard {
        hasher: PostcardHasher,
        layout: PostcardLayout,
        cache: Vec<Option<Cache>>,
    },
    Sketch(Box<sketch::SketchModel>),
}

struct ModelStore {
    qp: CanonicalQp,
    psn: u32,
    /// The first PSN the responder is not known to have executed (ACKs and fresh NAKs move
    /// it); a NAK naming an earlier PSN is stale.
    executed_to: u32,
    /// The last fresh NAK's PSN (a repeat of it is stale too).
    last_nak: Option<u32>,
    since_ack: u32,
    mem: Vec<u8>,
    state: State,
}

struct Model {
    stores: Vec<ModelStore>,
    ack_every: u32,
    max_redundancy: u8,
    pc_redundancy: u8,
    frames: Vec<Vec<u8>>,
    /// Evictions whose new entry completed at once (a 1-hop path): two chunks from one
    /// postcard, which the Tofino program cannot emit.
    short_on_evict: usize,
    /// `[sketch] expected_switches`.
    sketch_expected: u16,
    /// Batches written because a newer epoch started before they were complete (the Tofino
    /// program writes complete columns only).
    sketch_rollover_writes: usize,
    /// Merged reports that carried more than one column (the Tofino program takes one).
    sketch_multi_column: usize,
    /// Sketch reports the epoch rules of `PROTOCOL.md` §3.4 treat otherwise than the Tofino
    /// program (which moves the epoch on at the first report of a newer one): the next
    /// epoch held while the current one still merges, a far-ahead vote, a restart.
    sketch_epoch_rules: usize,
}

enum Op<'a> {
    Write {
        va: u64,
        payload: &'a [u8],
        imm: Option<u32>,
    },
    FetchAdd {
        va: u64,
        add: u64,
    },
}

impl Model {
    fn send(&mut self, si: usize, op: Op<'_>) {
        let s = &mut self.stores[si];
        let psn = s.psn;
        s.psn = (s.psn + 1) & 0xFF_FFFF;
        s.since_ack += 1;
        let ack_req = s.since_ack >= self.ack_every;
        if ack_req {
            s.since_ack = 0;
        }
        let ep = RoceEndpoint {
            src_mac: TRANSLATOR_MAC,
            dst_mac: COLLECTOR_MAC,
            src_ip: *TRANSLATOR.ip(),
            dst_ip: *COLLECTOR.ip(),
            src_port: TRANSLATOR.port(),
            dst_port: COLLECTOR.port(),
            ttl: 64,
            tos: 0,
            ident: 0,
        };
        let mut ext = Vec::with_capacity(28);
        let (opcode, payload): (u8, &[u8]) = match op {
            Op::Write { va, payload, imm } => {
                ext.extend_from_slice(&va.to_be_bytes());
                ext.extend_from_slice(&s.qp.rkey.to_be_bytes());
                ext.extend_from_slice(&(payload.len() as u32).to_be_bytes());
                let off = (va - s.qp.addr) as usize;
                s.mem[off..off + payload.len()].copy_from_slice(payload);
                match imm {
                    Some(v) => {
                        ext.extend_from_slice(&v.to_be_bytes());
                        (op::RC_RDMA_WRITE_ONLY_IMM, payload)
                    }
                    None => (op::RC_RDMA_WRITE_ONLY, payload),
                }
            }
            Op::FetchAdd { va, add } => {
                ext.extend_from_slice(&va.to_be_bytes());
                ext.extend_from_slice(&s.qp.rkey.to_be_bytes());
                ext.extend_from_slice(&add.to_be_bytes());
                ext.extend_from_slice(&0u64.to_be_bytes());
                let off = (va - s.qp.addr) as usize;
                let mut c = [0u8; 8];
                c.copy_from_slice(&s.mem[off..off + 8]);
                let v = u64::from_le_bytes(c).wrapping_add(add);
                s.mem[off..off + 8].copy_from_slice(&v.to_le_bytes());
                (op::RC_FETCH_ADD, &[][..])
            }
        };
        let bth = BthRepr::rc(opcode, Qpn::new(s.qp.remote_qpn), Psn::new(psn), ack_req);
        let mut buf = vec![0u8; frame_len(ext.len(), payload.len())];
        let n = build_frame(&ep, &bth, &ext, payload, &mut buf);
        buf.truncate(n);
        self.frames.push(buf);
    }

    /// Applies a collector response to store `si`'s QP; returns whether it is fresh.
    ///
    /// The rule (`PROTOCOL.md`, reliability): PSNs compare as 24-bit serial numbers. An ACK of
    /// `p` between what is known executed and what was sent says everything through `p`
    /// executed. A NAK "PSN sequence error" names the PSN the responder expects: everything
    /// before it executed, nothing from it on. It is stale, ignored, when it names a PSN
    /// before what is known executed (the PSN must never move back over executed frames:
    /// the responder would take the new frames there as duplicates and not execute them),
    /// after what was sent, or the last fresh NAK's again. A fresh NAK naming a PSN before the
    /// next one to send asks for a go-back-N resend, which the Tofino program does not do;
    /// the corpus only names the next PSN (nothing lost), where both translators go on as
    /// before.
    fn respond(&mut self, si: usize, kind: ResponseKind, psn: u32) -> Result<bool, String> {
        let s = &mut self.stores[si];
        let diff = |a: u32, b: u32| ((a.wrapping_sub(b) << 8) as i32) >> 8;
        match kind {
            ResponseKind::Ack => {
                let fresh = diff(psn, s.executed_to) >= 0 && diff(psn, s.psn) < 0;
                if fresh {
                    s.executed_to = (psn + 1) & 0xFF_FFFF;
                }
                Ok(fresh)
            }
            ResponseKind::NakPsnSequenceError => {
                let fresh = diff(psn, s.executed_to) >= 0
                    && diff(psn, s.psn) <= 0
                    && s.last_nak != Some(psn);
                if fresh && psn != s.psn {
                    return Err(format!(
                        "a fresh NAK naming {psn:#x} before the next PSN {:#x} asks for a resend, \
                         which the corpus does not model",
                        s.psn
                    ));
                }
                if fresh {
                    s.executed_to = psn;
                    s.last_nak = Some(psn);
                }
                Ok(fresh)
            }
        }
    }

    fn first_of(&self, f: impl Fn(&State) -> bool) -> Option<usize> {
        self.stores.iter().position(|s| f(&s.state))
    }

    fn report(&mut self, r: &Report) {
        let imm = r.header.immediate;
        match r.primitive {
            Primitive::KeyWrite {
                redundancy,
                key,
                value,
            } => {
                let Some(si) = self.first_of(|s| matches!(s, State::KeyWrite(..))) else {
                    return;
                };
                let State::KeyWrite(h, l) = &self.stores[si].state else {
                    unreachable!()
                };
                let (h, l) = (*h, *l);
                if redundancy == 0
                    || redundancy > self.max_redundancy
                    || value.len() > l.value_width()
                {
                    return;
                }
                let checksum = h.checksum(&key);
                let mut slot = vec![0u8; l.slot_size() as usize];
                l.encode_slot(checksum, value.as_bytes(), &mut slot);
                let vas: Vec<u64> = (0..redundancy)
                    .map(|n| self.stores[si].qp.addr + l.slot_offset(h.slot(&key, n)))
                    .collect();
                for (n, va) in vas.into_iter().enumerate() {
                    let imm = (imm && n == 0).then_some(checksum);
                    self.send(
                        si,
                        Op::Write {
                            va,
                            payload: &slot,
                            imm,
                        },
                    );
                }
            }
            Primitive::KeyIncrement {
                redundancy,
                key,
                delta,
            } => {
                let Some(si) = self.first_of(|s| matches!(s, State::KeyIncrement(..))) else {
                    return;
                };
                let State::KeyIncrement(h, l) = &self.stores[si].state else {
                    unreachable!()
                };
                let (h, l) = (*h, *l);
                if redundancy == 0 || redundancy > self.max_redundancy {
                    return;
                }
                let checksum = h.checksum(&key);
                let base = self.stores[si].qp.addr;
                let vas: Vec<u64> = (0..redundancy)
                    .map(|n| base + l.slot_offset(h.slot(&key, n)))
                    .collect();
                for va in vas {
                    self.send(si, Op::FetchAdd { va, add: delta });
                }
                if imm {
                    self.send(
                        si,
                        Op::Write {
                            va: base,
                            payload: &[],
                            imm: Some(checksum),
                        },
                    );
                }
            }
            Primitive::Append { list, value } => {
                let Some(si) = self.stores.iter().position(|s| match &s.state {
                    State::Append { first, pending, .. } => {
                        list.wrapping_sub(*first) < pending.len() as u32
                    }
                    _ => false,
                }) else {
                    return;
                };
                let State::Append {
                    layout,
                    first,
                    pending,
                    imm: imms,
                    ..
                } = &mut self.stores[si].state
                else {
                    unreachable!()
                };
                if value.len() > layout.entry_size() as usize {
                    return;
                }
                let li = (list - *first) as usize;
                let mut e = value.as_bytes().to_vec();
                e.resize(layout.entry_size() as usize, 0);
                pending[li].push(e);
                imms[li] |= imm;
                if pending[li].len() == layout.batch() as usize {
                    self.flush_list(si, li);
                }
            }
            Primitive::Postcard {
                flow,
                hop,
                path_len,
                value,
            } => {
                let Some(si) = self.first_of(|s| matches!(s, State::Postcard { .. })) else {
                    return;
                };
                let State::Postcard { layout, .. } = &self.stores[si].state else {
                    unreachable!()
                };
                let hops = layout.hops();
                if hop >= hops || path_len > hops || (path_len != 0 && hop >= path_len) {
                    return;
                }
                self.postcard(si, flow, hop, path_len, value, imm);
            }
        }
    }

    fn flush_list(&mut self, si: usize, li: usize) {
        let s = &mut self.stores[si];
        let State::Append {
            layout,
            stride,
            pending,
            imm,
            written,
            first,
        } = &mut s.state
        else {
            unreachable!()
        };
        let count = pending[li].len();
        let mut payload: Vec<u8> = pending[li].concat();
        payload.resize(layout.entries_len() as usize, 0);
        let seq = written[li] + 1;
        written[li] = seq;
        if layout.format() == AppendFormat::Sequenced {
            payload.extend_from_slice(&layout.encode_trailer(seq, count as u16));
        }
        let va = s.qp.addr + li as u64 * *stride + layout.batch_offset(layout.slot_for_seq(seq));
        let immv = imm[li].then_some(*first + li as u32);
        pending[li].clear();
        imm[li] = false;
        self.send(
            si,
            Op::Write {
                va,
                payload: &payload,
                imm: immv,
            },
        );
    }

    fn postcard(&mut self, si: usize, flow: Key, hop: u8, path_len: u8, value: u32, imm: bool) {
        let State::Postcard { hasher, cache, .. } = &mut self.stores[si].state else {
            unreachable!()
        };
        let idx = hasher.cache_index(&flow) as usize % cache.len();
        let evicted = cache[idx].as_ref().is_some_and(|c| c.flow != flow);
        if evicted {
            self.emit_chunk(si, idx);
        }
        let State::Postcard { layout, cache, .. } = &mut self.stores[si].state else {
            unreachable!()
        };
        let hops = layout.hops();
        let c = cache[idx].get_or_insert(Cache {
            flow,
            mask: 0,
            path_len: 0,
            imm: false,
            values: [0; MAX_HOPS],
        });
        c.mask |= 1 << hop;
        c.values[hop as usize] = value;
        c.imm |= imm;
        if path_len != 0 {
            c.path_len = path_len;
        }
        let want = if c.path_len != 0 { c.path_len } else { hops };
        if c.mask.count_ones() >= want as u32 {
            if evicted {
                self.short_on_evict += 1;
            }
            self.emit_chunk(si, idx);
        }
    }

    fn emit_chunk(&mut self, si: usize, idx: usize) {
        let State::Postcard {
            hasher,
            layout,
            cache,
        } = &mut self.stores[si].state
        else {
            unreachable!()
        };
        let (hasher, layout) = (*hasher, *layout);
        let Some(c) = cache[idx].take() else { return };
        let hops = layout.hops() as usize;
        let len = if c.path_len != 0 {
            c.path_len as usize
        } else {
            hops
        };
        let mut chunk = vec![0u8; layout.chunk_size() as usize];
        for h in 0..hops {
            let w = if h < len && c.mask & (1 << h) != 0 {
                hasher
                    .encode(&c.flow, h, c.values[h])
                    .unwrap_or_else(|| hasher.encode_blank(&c.flow, h))
            } else {
                hasher.encode_blank(&c.flow, h)
            };
            chunk[4 * h..4 * h + 4].copy_from_slice(&w);
        }
        let base = self.stores[si].qp.addr;
        let vas: Vec<u64> = (0..self.pc_redundancy)
            .map(|j| base + layout.chunk_offset(hasher.chunk(&c.flow, j)))
            .collect();
        let imm = c.imm.then(|| hasher.chunk(&c.flow, 0));
        for (j, va) in vas.into_iter().enumerate() {
            self.send(
                si,
                Op::Write {
                    va,
                    payload: &chunk,
                    imm: if j == 0 { imm } else { None },
                },
            );
        }
    }

    /// A clean shutdown: partial Append batches (stores in order, lists in order), then
    /// occupied postcard entries (cache index order).
    fn flush(&mut self) {
        for si in 0..self.stores.len() {
            let lists = match &self.stores[si].state {
                State::Append { pending, .. } => pending.len(),
                State::Postcard { cache, .. } => {
                    for idx in 0..cache.len() {
                        self.emit_chunk(si, idx);
                    }
                    continue;
                }
                State::Sketch(_) => {
                    self.write_dirty(si);
                    continue;
                }
                _ => continue,
            };
            for li in 0..lists {
                let State::Append { pending, .. } = &self.stores[si].state else {
                    unreachable!()
                };
                if !pending[li].is_empty() {
                    self.flush_list(si, li);
                }
            }
        }
    }
}

/// The Tofino build flags for a case, and why the Tofino program cannot run it (if it cannot).
fn p4_fit(
    reports: &[(Report, Profile)],
    metas: &[StoreMeta],
    variant_b: bool,
    max_n: u8,
) -> (String, Option<String>) {
    let mut d = Vec::new();
    let mut why = Vec::new();
    if variant_b {
        d.push("-DDTA_REF_VARIANT_B".to_string());
    }
    d.push(format!("-DDTA_MAX_N={max_n}"));
    let mut hashes = Vec::new();
    for m in metas {
        match &m.kind {
            StoreKind::KeyWrite {
                slot_size, hash, ..
            } => {
                hashes.push(*hash);
                if *slot_size != 8 {
                    why.push(format!(
                        "Key-Write slots of {slot_size} bytes (the program writes 8)"
                    ));
                }
            }
            StoreKind::KeyIncrement { hash, .. } => hashes.push(*hash),
            StoreKind::Append {
                batch,
                format,
                entry_size,
                ..
            } => {
                d.push(format!("-DDTA_AP_BATCH={batch}"));
                if *batch > 4 {
                    why.push(format!(
                        "Append batch {batch} (Tofino-1 fits 1, 2 or 4: batch 8 needs 14 ingress \
                         stages, 16 needs 22)"
                    ));
                }
                if *format == AppendFormat::Reference {
                    d.push("-DDTA_AP_REFERENCE_RING".into());
                }
                if *entry_size != 4 {
                    why.push(format!("{entry_size}-byte Append entries"));
                }
            }
            StoreKind::Postcard { hops, hash, .. } => {
                hashes.push(*hash);
                d.push(format!("-DDTA_PC_HOPS={hops}"));
                if *hops > 5 {
                    why.push(format!(
                        "{hops} hops (Tofino-1 fits 1..5: 6 to 8 hops need 13 egress stages)"
                    ));
                }
            }
            StoreKind::Sketch {
                sketch,
                rows,
                cell_width,
                batch,
                epochs,
                ..
            } => {
                why.extend(sketch::p4_store_fit(
                    sketch,
                    *rows,
                    *cell_width,
                    *batch,
                    *epochs,
                ));
            }
        }
    }
    hashes.dedup();
    if hashes.len() > 1 {
        why.push("stores with different hash profiles (one profile per compile)".into());
    } else if hashes == [HashProfile::Reference] {
        d.push("-DDTA_HASH_REFERENCE".into());
    }
    for (r, _) in reports {
        let (k, v) = match &r.primitive {
            Primitive::KeyWrite { key, value, .. } => (key.len(), value.len()),
            Primitive::KeyIncrement { key, .. } => (key.len(), 4),
            Primitive::Append { value, .. } => (4, value.len()),
            Primitive::Postcard { flow, .. } => (flow.len(), 4),
        };
        if k != 4 || v != 4 {
            why.push(format!(
                "{k}-byte keys / {v}-byte values (the program takes 4 and 4)"
            ));
            break;
        }
    }
    d.push("-DDTA_PC_CACHE_BITS=3".into());
    (d.join(" "), (!why.is_empty()).then(|| why.join("; ")))
}

fn canonical_qp(i: usize, first_psn: Option<u32>) -> CanonicalQp {
    CanonicalQp {
        addr: 0x7f00_0000_0000 + ((i as u64) << 32),
        rkey: 0x1000 + i as u32,
        local_qpn: 0x100 + i as u32,
        remote_qpn: 0x11 + i as u32,
        psn: first_psn.unwrap_or(0xABC000 + i as u32 * 0x111) & 0xFF_FFFF,
    }
}

/// The frame of a collector response to `qp`: collector → translator, RC ACKNOWLEDGE with an
/// AETH (an ACK with rxe's "invalid credit count", or NAK "PSN sequence error"), MSN 0.
fn response_frame(qp: &CanonicalQp, kind: ResponseKind, psn: u32) -> Vec<u8> {
    let ep = RoceEndpoint {
        src_mac: COLLECTOR_MAC,
        dst_mac: TRANSLATOR_MAC,
        src_ip: *COLLECTOR.ip(),
        dst_ip: *TRANSLATOR.ip(),
        src_port: COLLECTOR.port(),
        dst_port: TRANSLATOR.port(),
        ttl: 64,
        tos: 0,
        ident: 0,
    };
    let syndrome = match kind {
        ResponseKind::Ack => Syndrome::Ack { credits: 0x1F },
        ResponseKind::NakPsnSequenceError => Syndrome::Nak(NakCode::PsnSequenceError),
    };
    let aeth = AethRepr { syndrome, msn: 0 }.to_bytes();
    let bth = BthRepr::rc(
        op::RC_ACKNOWLEDGE,
        Qpn::new(qp.local_qpn),
        Psn::new(psn),
        false,
    );
    let mut buf = vec![0u8; frame_len(aeth.len(), 0)];
    let n = build_frame(&ep, &bth, &aeth, &[], &mut buf);
    buf.truncate(n);
    buf
}

/// A modelled case: its file description, report payloads, expected frames and memory.
pub struct Modelled {
    /// `case.json`.
    pub case: CaseFile,
    /// UDP payloads of the reports, in order.
    pub reports: Vec<Vec<u8>>,
    /// Expected RoCEv2 frames, in order.
    pub frames: Vec<Vec<u8>>,
    /// The collector responses' frames (`responses.pcap`), in [`CaseFile::responses`] order.
    pub responses: Vec<Vec<u8>>,
    /// Expected memory, per store.
    pub memory: Vec<Vec<u8>>,
}

fn model(spec: Spec) -> Result<Modelled, String> {
    let mut metas = Vec::new();
    let mut qps = Vec::new();
    let mut stores = Vec::new();
    for (i, sc) in spec.stores.iter().enumerate() {
        let (kind, len) = layout_of(sc)?;
        let qp = canonical_qp(i, spec.first_psn);
        let meta = StoreMeta {
            name: sc.name.clone(),
            addr: qp.addr,
            len,
            rkey: qp.rkey,
            qps: vec![dta_proto::meta::QpMeta {
                qpn: qp.remote_qpn,
                psn: qp.psn,
                peer_qpn: qp.local_qpn,
            }],
            // The corpus's stores record no N: see `kv_redundancy`.
            redundancy: None,
            kind,
        };
        let geometry =
            StoreGeometry::try_from(&meta).map_err(|e| format!("store {:?}: {e}", sc.name))?;
        let state = match geometry {
            StoreGeometry::KeyWrite { layout, hasher } => State::KeyWrite(hasher, layout),
            StoreGeometry::KeyIncrement { layout, hasher } => State::KeyIncrement(hasher, layout),
            StoreGeometry::Append(a) => State::Append {
                layout: a.layout,
                first: a.first_list,
                stride: a.list_stride,
                pending: vec![Vec::new(); a.lists as usize],
                imm: vec![false; a.lists as usize],
                written: vec![0; a.lists as usize],
            },
            StoreGeometry::Postcard { layout, hasher } => State::Postcard {
                hasher: hasher
                    .with_cache_slots(spec.cache_slots)
                    .ok_or("postcard cache slots")?,
                layout,
                cache: (0..spec.cache_slots).map(|_| None).collect(),
            },
            StoreGeometry::Sketch { layout, sketch_id } => {
                State::Sketch(Box::new(sketch::SketchModel::new(layout, sketch_id)))
            }
        };
        let mut mem = vec![0; len as usize];
        if let State::Sketch(s) = &state {
            // The collector writes the header when it allocates the store (§9).
            let h = s.layout.encode_header(s.sketch_id);
            mem[..h.len()].copy_from_slice(&h);
        }
        metas.push(meta);
        stores.push(ModelStore {
            qp,
            psn: qp.psn,
            executed_to: qp.psn,
            last_nak: None,
            since_ack: 0,
            mem,
            state,
        });
        qps.push(qp);
    }
    let mut m = Model {
        stores,
        ack_every: spec.ack_every,
        max_redundancy: spec.max_redundancy,
        pc_redundancy: spec.pc_redundancy,
        frames: Vec::new(),
        short_on_evict: 0,
        sketch_expected: spec.sketch_expected,
        sketch_rollover_writes: 0,
        sketch_multi_column: 0,
        sketch_epoch_rules: 0,
    };
    let mut reports = Vec::new();
    let mut responses = Vec::new();
    let mut response_frames = Vec::new();
    for (i, (r, profile)) in spec.reports.iter().enumerate() {
        let mut b = vec![0u8; 128];
        let n = r.emit(*profile, &mut b).map_err(|e| format!("{e:?}"))?;
        b.truncate(n);
        reports.push(b);
        m.report(r);
        for &(after, si, kind, psn) in spec.responses.iter().filter(|x| x.0 == i + 1) {
            let fresh = m.respond(si, kind, psn)?;
            response_frames.push(response_frame(&m.stores[si].qp, kind, psn));
            responses.push(CaseResponse {
                after_report: after,
                store: si,
                syndrome: kind,
                psn,
                fresh,
            });
        }
    }
    for p in &spec.sketch_reports {
        reports.push(p.clone());
        m.sketch_report(p, *REPORTER.ip());
    }
    let frames_before_flush = m.frames.len();
    m.flush();
    let (p4_defines, mut p4_unsupported) =
        p4_fit(&spec.reports, &metas, spec.variant_b, spec.max_redundancy);
    let mut behaviour = Vec::new();
    if m.short_on_evict > 0 {
        behaviour.push(format!(
            "{} eviction(s) whose new 1-hop path completes at once (two chunks from one postcard)",
            m.short_on_evict
        ));
    }
    if m.sketch_multi_column > 0 {
        behaviour.push(format!(
            "{} Sketch-Merge report(s) of several columns (the program takes one per report)",
            m.sketch_multi_column
        ));
    }
    if m.sketch_epoch_rules > 0 {
        behaviour.push(format!(
            "{} Sketch-Merge report(s) under the epoch rules the program does not have (an epoch \
             moved on by a quorum while the current one still merges, a far-ahead vote, a \
             restarted switch): the program moves on at the first report of a newer epoch",
            m.sketch_epoch_rules
        ));
    }
    if m.sketch_rollover_writes > 0 {
        behaviour.push(format!(
            "{} incomplete Sketch-Merge batch(es) written when a newer epoch starts (the program \
             writes complete columns only)",
            m.sketch_rollover_writes
        ));
    }
    for why in behaviour {
        p4_unsupported = Some(match p4_unsupported {
            Some(w) => format!("{w}; {why}"),
            None => why,
        });
    }
    let sketch = sketch::sketch_case(&spec);
    let case = CaseFile {
        name: spec.name,
        description: spec.description,
        reference_variant: if spec.variant_b { "B" } else { "A" }.into(),
        max_redundancy: spec.max_redundancy,
        ack_every: spec.ack_every,
        postcard_cache_slots: spec.cache_slots,
        postcard_redundancy: spec.pc_redundancy,
        metas,
        qps,
        reports: reports.len(),
        frames: m.frames.len(),
        frames_before_flush,
        p4_defines,
        p4_unsupported,
        sketch,
        responses,
    };
    Ok(Modelled {
        case,
        reports,
        responses: response_frames,
        frames: m.frames,
        memory: m.stores.into_iter().map(|s| s.mem).collect(),
    })
}

/// The 256-slot, 8-byte Key-Write store of the PSN cases.
fn kw_256_store() -> StoreConfig {
    store(
        "kw",
        StoreKindConfig::new(StoreKind::KeyWrite {
            slots: 256,
            slot_size: 8,
            hash: HashProfile::Independent,
        })
        .with_redundancy(dta_collector::config::DEFAULT_KV_REDUNDANCY),
    )
}

/// Every case, modelled.
pub fn cases() -> Result<Vec<Modelled>, String> {
    specs().into_iter().map(model).collect()
}

/// The Ethernet/IPv4/UDP frame of one report datagram.
pub fn report_frame(payload: &[u8]) -> Vec<u8> {
    let mut f = vec![0u8; 42 + payload.len()];
    EthernetRepr {
        src: REPORTER_MAC,
        dst: TRANSLATOR_MAC,
        ethertype: ETHERTYPE_IPV4,
    }
    .emit(&mut EthernetFrame::new_unchecked(&mut f[..]));
    Ipv4Repr {
        src: *REPORTER.ip(),
        dst: *REPORT_DST.ip(),
        protocol: PROTO_UDP,
        ttl: 64,
        tos: 0,
        ident: 0,
        dont_frag: true,
        payload_len: 8 + payload.len(),
    }
    .emit(&mut Ipv4Packet::new_unchecked(&mut f[14..34]));
    UdpRepr {
        src_port: REPORTER.port(),
        dst_port: REPORT_DST.port(),
        payload_len: payload.len(),
    }
    .emit(&mut UdpPacket::new_unchecked(&mut f[34..42]));
    f[42..].copy_from_slice(payload);
    f
}

/// Writes `frames` as a pcap file (Ethernet link type, 1 µs apart).
pub fn write_pcap(path: &Path, frames: &[Vec<u8>]) -> io::Result<()> {
    let file = fs::File::create(path)?;
    let mut w = pcap_file::pcap::PcapWriter::new(io::BufWriter::new(file))
        .map_err(|e| io::Error::other(e.to_string()))?;
    for (i, f) in frames.iter().enumerate() {
        let p =
            pcap_file::pcap::PcapPacket::new(Duration::from_micros(i as u64), f.len() as u32, f);
        w.write_packet(&p)
            .map_err(|e| io::Error::other(e.to_string()))?;
    }
    Ok(())
}

/// Reads every packet of a pcap file.
pub fn read_pcap(path: &Path) -> io::Result<Vec<Vec<u8>>> {
    let file = fs::File::open(path)?;
    let mut r = pcap_file::pcap::PcapReader::new(io::BufReader::new(file))
        .map_err(|e| io::Error::other(format!("{}: {e}", path.display())))?;
    let mut out = Vec::new();
    while let Some(p) = r.next_packet() {
        let p = p.map_err(|e| io::Error::other(format!("{}: {e}", path.display())))?;
        out.push(p.data.into_owned());
    }
    Ok(out)
}

/// Regenerates the corpus under `dir` (one folder per case; stale folders are removed).
pub fn write_corpus(dir: &Path) -> Result<usize, String> {
    let cases = cases()?;
    fs::create_dir_all(dir).map_err(|e| e.to_string())?;
    for entry in fs::read_dir(dir).map_err(|e| e.to_string())? {
        let entry = entry.map_err(|e| e.to_string())?;
        if entry.path().is_dir() {
            fs::remove_dir_all(entry.path()).map_err(|e| e.to_string())?;
        }
    }
    for c in &cases {
        let d = dir.join(&c.case.name);
        fs::create_dir_all(&d).map_err(|e| e.to_string())?;
        let json = serde_json::to_string_pretty(&c.case).map_err(|e| e.to_string())?;
        fs::write(d.join("case.json"), json + "\n").map_err(|e| e.to_string())?;
        let frames: Vec<Vec<u8>> = c.reports.iter().map(|p| report_frame(p)).collect();
        write_pcap(&d.join("reports.pcap"), &frames).map_err(|e| e.to_string())?;
        write_pcap(&d.join("expected.pcap"), &c.frames).map_err(|e| e.to_string())?;
        if !c.responses.is_empty() {
            write_pcap(&d.join("responses.pcap"), &c.responses).map_err(|e| e.to_string())?;
        }
        for (meta, mem) in c.case.metas.iter().zip(&c.memory) {
            fs::write(d.join(format!("memory-{}.bin", meta.name)), mem)
                .map_err(|e| e.to_string())?;
        }
    }
    Ok(cases.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn model_is_deterministic_and_covers_every_primitive() {
        let a = cases().unwrap();
        let b = cases().unwrap();
        assert_eq!(a.len(), b.len());
        for (x, y) in a.iter().zip(&b) {
            assert_eq!(x.frames, y.frames, "{}", x.case.name);
            assert_eq!(x.memory, y.memory);
            assert!(!x.frames.is_empty(), "{} emits nothing", x.case.name);
            for f in x.frames.iter().filter(|f| !is_nack_frame(f)) {
                assert!(dta_proto::icrc::check_frame(f), "{}: bad ICRC", x.case.name);
            }
        }
        for prefix in [
            "keywrite_",
            "keyincrement_",
            "append_",
            "postcard_",
            "mixed_",
            "sketch_",
        ] {
            assert!(
                a.iter().any(|c| c.case.name.starts_with(prefix)),
                "{prefix}"
            );
        }
    }

    #[test]
    fn the_resync_rule_ignores_nak_for_executed_psns_across_the_wrap() {
        let spec = specs()
            .into_iter()
            .find(|s| s.name == "keywrite_psn_resync")
            .unwrap();
        let c = model(spec).unwrap();
        let fresh: Vec<(ResponseKind, u32, bool)> = c
            .case
            .responses
            .iter()
            .map(|r| (r.syndrome, r.psn, r.fresh))
            .collect();
        use ResponseKind::{Ack, NakPsnSequenceError as Nak};
        assert_eq!(
            fresh,
            [
                (Ack, 0xFF_FFF3, true),
                (Nak, 0xFF_FFF2, false),
                (Nak, 0xFF_FFFC, true),
                (Ack, 0x00_0001, true),
                (Nak, 0xFF_FFFE, false),
                (Nak, 0x00_0000, false),
            ]
        );
        assert_eq!(c.responses.len(), 6);
        for f in &c.responses {
            assert!(dta_proto::icrc::check_frame(f), "response ICRC");
        }
        // A fresh NAK naming a PSN before the next one asks for a resend: not modelled.
        let mut spec = specs()
            .into_iter()
            .find(|s| s.name == "keywrite_psn_resync")
            .unwrap();
        spec.responses = vec![(4, 0, Nak, 0xFF_FFF5)];
        assert!(model(spec).err().unwrap().contains("resend"));
    }

    #[test]
    fn pcap_round_trip() {
        let dir = std::env::temp_dir().join(format!("dta-corpus-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let frames = vec![
            report_frame(&[1, 0, 2, 0, 0, 0, 1, 0, 0, 0, 9]),
            vec![0xAB; 70],
        ];
        let p = dir.join("x.pcap");
        write_pcap(&p, &frames).unwrap();
        assert_eq!(read_pcap(&p).unwrap(), frames);
        fs::remove_dir_all(&dir).unwrap();
    }
}
