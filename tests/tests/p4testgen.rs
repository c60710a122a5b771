//! P4Testgen equivalence: the tests P4Testgen generated from `p4/translator/dta_translator.p4`
//! (committed as JSON under `tests/corpus/p4testgen/`, see its README) replayed through the Rust
//! translator. Needs no compiler.
//!
//! Each vector is one input packet, the table entries and register cells P4Testgen chose, and
//! what the P4 program does with it: its ingress drop reason, the table branches it took and
//! the bridged header and words its ingress hands to egress. The Rust side configures a
//! pipeline with the same routes (a store of the report's kind exactly when the P4 route table
//! hits), recreates the Append batch state the registers describe by feeding the entries they
//! hold, feeds the packet and must agree: reject the same reports, drop the same unrouted ones,
//! hold the same Append entries, and write a completed batch with the same entries, immediate
//! flag, immediate data and trailer. P4Testgen's egress half does not continue from the ingress
//! (README), so the RoCEv2 frame builder is left to the corpus. Vectors the Rust pipeline cannot
//! take part in (not a report, a collector response, multicast replicas P4Testgen does not
//! follow, postcard cache state, control-plane values `dta_bfrt.py` never installs) are counted
//! by class; the classes and the intended differences are listed in the README, and the counts
//! per knob set are pinned in `expected-classes.json` there.

use std::collections::BTreeMap;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::path::{Path, PathBuf};

use dta_proto::batch::{Datagram, TxBatch};
use dta_proto::hash::HashProfile;
use dta_proto::layout::AppendFormat;
use dta_proto::meta::StoreKind;
use dta_proto::wire::dta::BaseVariant;
use dta_proto::wire::report::{
    parse_report, ParseConfig, Primitive, Priority, Profile, Report, ReportHeader,
};
use dta_proto::Value;
use dta_translator::datapath::pipeline::{single_store_pipeline_with, Pipeline, Route};
use serde::Deserialize;
use serde_json::Value as Json;

#[derive(Deserialize)]
struct Vectors {
    knobs: String,
    defines: String,
    tests: Vec<Vector>,
}

#[derive(Deserialize)]
struct Vector {
    name: String,
    packet: String,
    tables: Vec<Entry>,
    registers: Vec<Cell>,
    table_branches: Vec<(String, String)>,
    ingress_drop_reason: u8,
    ingress_emits: Vec<(String, BTreeMap<String, u64>)>,
}

#[derive(Deserialize)]
struct Entry {
    table: String,
    key: BTreeMap<String, Json>,
    action: String,
    args: BTreeMap<String, Json>,
}

#[derive(Deserialize)]
struct Cell {
    register: String,
    index: u64,
    value: u64,
}

/// Ingress drop reasons of the P4 program (`DROP_*` in dta_translator.p4).
const DROP_BAD_REDUNDANCY: u8 = 1;
const DROP_EXT_LENGTH: u8 = 2;
const DROP_NO_ROUTE: u8 = 3;
const DROP_UNKNOWN_LIST: u8 = 4;
const DROP_BAD_HOP: u8 = 5;
const DROP_BAD_VERSION: u8 = 6;
const HELD_APPEND: u8 = 9;
const DROP_MALFORMED: u8 = 11;

/// The compile-time knobs a vector file was generated with.
struct Knobs {
    variant: BaseVariant,
    hash: HashProfile,
    max_n: u8,
    batch: u32,
    format: AppendFormat,
    pc_hops: u8,
}

impl Knobs {
    fn from_defines(d: &str) -> Knobs {
        let num = |name: &str, default: u32| {
            d.split_whitespace()
                .find_map(|f| f.strip_prefix(&format!("-D{name}=")))
                .map_or(default, |v| v.parse().expect("numeric knob"))
        };
        Knobs {
            variant: if d.contains("-DDTA_REF_VARIANT_B") {
                BaseVariant::B
            } else {
                BaseVariant::A
            },
            hash: if d.contains("-DDTA_HASH_REFERENCE") {
                HashProfile::Reference
            } else {
                HashProfile::Independent
            },
            max_n: num("DTA_MAX_N", 4) as u8,
            batch: num("DTA_AP_BATCH", 4),
            format: if d.contains("-DDTA_AP_REFERENCE_RING") {
                AppendFormat::Reference
            } else {
                AppendFormat::Sequenced
            },
            pc_hops: num("DTA_PC_HOPS", 5) as u8,
        }
    }

    fn parse_config(&self) -> ParseConfig {
        ParseConfig {
            reference_variant: self.variant,
            accept_reference: true,
            accept_extended: true,
            reference_priority: Priority::Medium,
        }
    }
}

/// What a vector showed, by class (the README names each).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Class {
    /// Not an IPv4/UDP datagram to the DTA port: forwarded or dropped by the switch's
    /// `tbl_forward`; the software translator never receives it.
    NotAReport,
    /// A RoCEv2 datagram: a collector response (egress PSN registers), or a frame the P4
    /// forwards; nothing the report path emits.
    RoceResponse,
    /// IPv4 with options or fragmented: the P4 parser does not read it as a report (D2).
    Ipv4OptionsOrFragment,
    /// Both reject the report (validation).
    BothReject,
    /// An extended report with keys or values other than 4 bytes: Rust accepts, P4 drops (D1).
    WideKeyOrValue,
    /// Both drop the report for redundancy outside 1..=max.
    BothBadRedundancy,
    /// Both drop the report: no route / unknown list.
    BothNoRoute,
    /// Routed Key-Write / Key-Increment: P4 multicasts (P4Testgen does not follow replication),
    /// Rust emits N frames.
    KvRoutedMulticast,
    /// Both drop a postcard whose hop has no place (hop >= B, or >= its path length).
    BothBadHop,
    /// Both hold an Append entry in its batch.
    BothHoldAppend,
    /// Both complete the Append batch: the P4 ingress bridges the same entries, immediate flag
    /// and immediate data (list ID) and trailer the Rust WRITE carries.
    AppendBatchAgrees,
    /// Register or table values the control plane never installs or the program never
    /// reaches (batch position >= B, a pending immediate flag with an empty batch).
    UnreachableState,
    /// P4Testgen's trace shows the report's own list ID with another value than the test's
    /// packet (the trace was printed from an earlier solver model): the bridged words in the
    /// trace cannot be trusted for this vector.
    TraceModelMismatch,
    /// A postcard past validation: its fate depends on the cache registers, which the Rust
    /// cache is not set up from.
    PostcardCacheState,
}

fn unhex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).expect("hex"))
        .collect()
}

fn json_u64(v: &Json) -> u64 {
    match v {
        Json::Number(n) => n.as_u64().expect("unsigned"),
        Json::Object(o) => json_u64(&o["value"]),
        _ => panic!("not a number: {v}"),
    }
}

fn branch<'a>(v: &'a Vector, table: &str) -> Option<&'a str> {
    v.table_branches
        .iter()
        .find(|(t, _)| t.ends_with(table))
        .map(|(_, a)| a.as_str())
}

/// A field of a header the P4 ingress deparser emitted (the bridged header and payload words).
fn emitted(v: &Vector, header: &str, field: &str) -> Option<u64> {
    v.ingress_emits
        .iter()
        .find(|(h, _)| h == header)
        .and_then(|(_, f)| f.get(field).copied())
}

fn entry<'a>(v: &'a Vector, table: &str) -> Option<&'a Entry> {
    v.tables.iter().find(|e| e.table.ends_with(table))
}

fn datagram(payload: &[u8]) -> Datagram<'_> {
    Datagram {
        src: SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 200), 40041),
        dst: SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 101), 40040),
        ip: None,
        payload,
    }
}

/// Feeds `payloads` in order; returns the frames the last one caused.
fn feed(p: &mut Pipeline, payloads: &[Vec<u8>]) -> Vec<Vec<u8>> {
    let mut tx = TxBatch::new(64, 2048);
    let mut frames = Vec::new();
    for pl in payloads {
        tx.clear();
        frames.clear();
        p.handle_reports(1_000_000, &[datagram(pl)], &mut tx);
        frames.extend((0..tx.len()).map(|i| tx.frame(i).to_vec()));
    }
    frames
}

fn kv_store(k: &Knobs, increment: bool) -> StoreKind {
    if increment {
        StoreKind::KeyIncrement {
            slots: 1024,
            hash: k.hash,
        }
    } else {
        StoreKind::KeyWrite {
            slots: 1024,
            slot_size: 8,
            hash: k.hash,
        }
    }
}

fn append_store(k: &Knobs, first_list: u32) -> StoreKind {
    let stride = u64::from(k.batch) * 4
        + if k.format == AppendFormat::Sequenced {
            8
        } else {
            0
        };
    StoreKind::Append {
        lists: 1,
        first_list,
        capacity: k.batch * 16,
        entry_size: 4,
        batch: k.batch,
        format: k.format,
        list_stride: stride * 16,
    }
}

/// An extended Append report of memory-ready `word` (extended values are written as sent).
fn append_report(list: u32, word: u32, immediate: bool) -> Vec<u8> {
    let r = Report {
        header: ReportHeader {
            profile: Profile::Extended,
            immediate,
            retransmittable: false,
            seq: Some(0),
            priority: Priority::Medium,
        },
        primitive: Primitive::Append {
            list,
            value: Value::new(&word.to_be_bytes()).expect("4-byte value"),
        },
    };
    let mut b = vec![0u8; r.buffer_len(Profile::Extended).expect("len")];
    r.emit(Profile::Extended, &mut b).expect("emit");
    b
}

/// Offset of the first payload byte and the ImmDt of a RoCEv2 WRITE frame (Ethernet/IPv4/UDP).
fn write_payload(frame: &[u8]) -> (u8, Option<u32>, &[u8]) {
    // Key-Write/Append WRITE: BTH (12) + RETH (16) [+ ImmDt (4)] + payload.
    let bth = 42;
    let opcode = frame[bth];
    let mut at = bth + 12 + 16;
    let imm = if opcode == dta_proto::wire::ib::opcode::RC_RDMA_WRITE_ONLY_IMM {
        at += 4;
        Some(u32::from_be_bytes(frame[at - 4..at].try_into().unwrap()))
    } else {
        None
    };
    (opcode, imm, &frame[at.min(frame.len())..])
}

/// Replays one vector; `Err` names a disagreement.
fn replay(k: &Knobs, v: &Vector) -> Result<Class, String> {
    let pkt = unhex(&v.packet);
    let is_ipv4 = pkt.len() >= 34 && pkt[12..14] == [0x08, 0x00];
    if !is_ipv4 || pkt[23] != 17 || pkt.len() < 42 {
        return Ok(Class::NotAReport);
    }
    let (ihl, frag) = (
        pkt[14] & 0x0f,
        u16::from_be_bytes([pkt[20], pkt[21]]) & 0x1fff,
    );
    let dport = u16::from_be_bytes([pkt[36], pkt[37]]);
    if dport == dta_proto::consts::ROCEV2_PORT {
        return Ok(Class::RoceResponse);
    }
    if dport != dta_proto::consts::DTA_PORT {
        return Ok(Class::NotAReport);
    }
    if ihl != 5 || frag != 0 {
        return Ok(Class::Ipv4OptionsOrFragment);
    }
    // The datagram the software translator's socket would deliver: as long as UDP says.
    let udp_len = usize::from(u16::from_be_bytes([pkt[38], pkt[39]]));
    let payload = pkt[42..pkt.len().min(42 + udp_len.saturating_sub(8))].to_vec();
    let reason = v.ingress_drop_reason;
    let validation = matches!(
        reason,
        DROP_MALFORMED | DROP_BAD_VERSION | DROP_EXT_LENGTH | DROP_BAD_REDUNDANCY | DROP_BAD_HOP
    );
    let parsed = if udp_len < 8 {
        Err("UDP length below 8".to_string())
    } else {
        parse_report(&payload, &k.parse_config()).map_err(|e| format!("{e:?}"))
    };
    let report = match parsed {
        Err(_) if validation => return Ok(Class::BothReject),
        // The P4 let it through only by a table entry the control plane never installs.
        Err(_) if uninstallable(k, v) => return Ok(Class::UnreachableState),
        Err(e) => {
            return Err(format!(
                "Rust rejects the report ({e}), P4 does not (drop reason {reason}, branches {:?})",
                v.table_branches
            ))
        }
        Ok(r) => r,
    };
    match (reason, &report.primitive) {
        (DROP_MALFORMED | DROP_BAD_VERSION, _) => {
            return Err(format!(
                "P4 rejects the report (reason {reason}), Rust accepts {report:?}"
            ))
        }
        (DROP_EXT_LENGTH, p) => {
            let wide = match p {
                Primitive::KeyWrite { key, value, .. } => key.len() != 4 || value.len() != 4,
                Primitive::KeyIncrement { key, .. } => key.len() != 4,
                Primitive::Append { value, .. } => value.len() != 4,
                Primitive::Postcard { flow, .. } => flow.len() != 4,
            };
            return if wide {
                Ok(Class::WideKeyOrValue)
            } else {
                Err(format!(
                    "P4 drops a report with 4-byte keys and values for length: {report:?}"
                ))
            };
        }
        _ => {}
    }
    // `drop` is each route table's default action; `dta_bfrt.py` never installs it as an
    // entry (and such an entry still counts as a hit, so the P4 goes on with its registers).
    if uninstallable(k, v) {
        return Ok(Class::UnreachableState);
    }
    match report.primitive {
        Primitive::KeyWrite { redundancy, .. } | Primitive::KeyIncrement { redundancy, .. } => {
            let inc = matches!(report.primitive, Primitive::KeyIncrement { .. });
            let routed = branch(v, "tbl_kv_route") == Some("kv_replicate");
            let mut p = single_store_pipeline_with(kv_store(k, inc), |c| {
                c.parse = k.parse_config();
                c.max_redundancy = k.max_n;
                if !routed {
                    c.route_keywrite = Route::None;
                    c.route_keyincrement = Route::None;
                }
            });
            let frames = feed(&mut p, &[payload]);
            let bad_n = redundancy == 0 || redundancy > k.max_n;
            if bad_n || reason == DROP_BAD_REDUNDANCY {
                return if bad_n && reason == DROP_BAD_REDUNDANCY && frames.is_empty() {
                    Ok(Class::BothBadRedundancy)
                } else {
                    Err(format!(
                        "redundancy {redundancy} (max {}): P4 reason {reason}, Rust {} frames",
                        k.max_n,
                        frames.len()
                    ))
                };
            }
            let want = usize::from(redundancy) + usize::from(inc && report.header.immediate);
            match (routed, reason, frames.len()) {
                (false, DROP_NO_ROUTE, 0) => Ok(Class::BothNoRoute),
                (true, 0, n) if n == want => Ok(Class::KvRoutedMulticast),
                (r, _, n) => Err(format!(
                    "Key-Write/Increment: P4 routed {r} reason {reason}; Rust {n} frames, want {want}"
                )),
            }
        }
        Primitive::Append { list, .. } => {
            let hit = branch(v, "tbl_ap_list") == Some("ap_list");
            if !hit {
                let mut p =
                    single_store_pipeline_with(append_store(k, list.wrapping_add(1)), |c| {
                        c.parse = k.parse_config();
                    });
                let frames = feed(&mut p, &[payload]);
                return match (reason, frames.len()) {
                    (DROP_UNKNOWN_LIST, 0) => Ok(Class::BothNoRoute),
                    (r, n) => Err(format!("Append miss: P4 reason {r}, Rust {n} frames")),
                };
            }
            let e = entry(v, "tbl_ap_list").expect("tbl_ap_list entry");
            assert_eq!(e.action, "Ingress.ap_list", "{}", v.name);
            let lidx = json_u64(&e.args["list_idx"]);
            let cell = |name: &str| {
                v.registers
                    .iter()
                    .find(|c| c.register.ends_with(name) && c.index == lidx)
                    .map_or(0, |c| c.value)
            };
            let pos = cell("ap_pos_reg");
            let imm = cell("ap_imm_reg");
            // The position counts 0..B-1 and the immediate cell is an OR of 1-bit flags,
            // cleared with each batch: other values are never reached.
            if pos >= u64::from(k.batch) || imm > 1 || (pos == 0 && imm != 0) {
                return Ok(Class::UnreachableState);
            }
            let mut p = single_store_pipeline_with(append_store(k, list), |c| {
                c.parse = k.parse_config();
                c.append_flush_ns = 0;
            });
            let mut feed_list: Vec<Vec<u8>> = (0..pos)
                .map(|j| {
                    append_report(
                        list,
                        cell(&format!("ap_e{j}_reg")) as u32,
                        j == 0 && imm != 0,
                    )
                })
                .collect();
            feed_list.push(payload);
            let frames = feed(&mut p, &feed_list);
            if pos + 1 < u64::from(k.batch) {
                return match (reason, frames.len()) {
                    (HELD_APPEND, 0) => Ok(Class::BothHoldAppend),
                    (r, n) => Err(format!(
                        "Append held at {pos}: P4 reason {r}, Rust {n} frames"
                    )),
                };
            }
            if reason != 0 || frames.len() != 1 {
                return Err(format!(
                    "Append batch end: P4 reason {reason}, Rust {} frames",
                    frames.len()
                ));
            }
            // The batch as the P4 ingress hands it to egress (the bridged header and words;
            // P4Testgen's egress half does not continue from it, see the README).
            let kind = emitted(v, "bridge", "kind");
            let p4_imm = emitted(v, "bridge", "immediate") == Some(1);
            let p4_key = emitted(v, "bridge", "key").map(|x| x as u32);
            let words: Vec<u8> = (0..k.batch)
                .flat_map(|j| {
                    let w = emitted(v, &format!("ap_words[{j}]"), "w").unwrap_or(u64::MAX);
                    (w as u32).to_be_bytes()
                })
                .collect();
            if p4_key != Some(list) {
                // The P4 sets bridge.key = the report's list ID; a trace value that is not the
                // packet's was printed from another solver model than the test's.
                return Ok(Class::TraceModelMismatch);
            }
            let (gop, gimm, gpay) = write_payload(&frames[0]);
            let n = k.batch as usize * 4;
            let rust_imm = gop == dta_proto::wire::ib::opcode::RC_RDMA_WRITE_ONLY_IMM;
            let mut trailer_ok = true;
            if k.format == AppendFormat::Sequenced {
                // count = B in the trailer's top 16 bits; the sequence number when both
                // are on their first batch (the Rust list starts at its head).
                let count = emitted(v, "ap_trailer", "count_le").unwrap_or(u64::MAX) as u32;
                let got = gpay.get(n..n + 8).unwrap_or(&[]);
                trailer_ok = got.get(4..8) == Some(&count.to_be_bytes()[..]);
                if cell("ap_seq_reg") == 0 && cell("ap_off_reg") == 0 {
                    let seq: Vec<u8> = (0..4)
                        .map(|i| emitted(v, "ap_trailer", &format!("seq{i}")).unwrap_or(256) as u8)
                        .collect();
                    trailer_ok &= got.get(..4) == Some(&seq[..]);
                }
            }
            if kind != Some(2)
                || p4_imm != rust_imm
                || (rust_imm && gimm != p4_key)
                || gpay.get(..n) != Some(&words[..])
                || !trailer_ok
            {
                return Err(format!(
                    "Append WRITE differs: P4 kind {kind:?} immediate {p4_imm} key {p4_key:?} \
                     words {words:02x?}; Rust opcode {gop:#x} imm {gimm:?} payload {:02x?}",
                    gpay.get(..n + 8)
                ));
            }
            Ok(Class::AppendBatchAgrees)
        }
        Primitive::Postcard { hop, path_len, .. } => {
            let routed = branch(v, "tbl_pc_route") == Some("pc_route");
            let mut p = single_store_pipeline_with(
                StoreKind::Postcard {
                    chunks: 64,
                    hops: k.pc_hops,
                    hash: k.hash,
                },
                |c| {
                    c.parse = k.parse_config();
                    c.postcard_flush_ns = 0;
                    if !routed {
                        c.route_postcard = Route::None;
                    }
                },
            );
            let frames = feed(&mut p, &[payload]);
            let dropped = drops(&p);
            if !routed {
                return match (reason, frames.len(), dropped) {
                    (DROP_NO_ROUTE, 0, 1) => Ok(Class::BothNoRoute),
                    (r, n, d) => Err(format!(
                        "postcard unrouted: P4 reason {r}, Rust {n} frames, {d} drops"
                    )),
                };
            }
            // The entries `dta_bfrt.py` installs: hop < B and path length 0 (unknown) or
            // hop < path length <= B; anything else misses (DROP_BAD_HOP).
            let installed = |h: u8, l: u8| h < k.pc_hops && (l == 0 || (h < l && l <= k.pc_hops));
            match branch(v, "tbl_pc_hop") {
                Some("pc_hop") => {
                    let e = entry(v, "tbl_pc_hop").expect("tbl_pc_hop entry");
                    let (h, l) = (json_u64(&e.key["md.hop"]), json_u64(&e.key["md.path_len"]));
                    if !installed(h as u8, l as u8) || h > 255 || l > 255 {
                        return Ok(Class::UnreachableState);
                    }
                    Ok(Class::PostcardCacheState)
                }
                _ => {
                    if installed(hop, path_len) {
                        // The control plane would have installed the entry P4Testgen left out.
                        return Ok(Class::UnreachableState);
                    }
                    match (reason, frames.len(), dropped) {
                        (DROP_BAD_HOP, 0, 1) => Ok(Class::BothBadHop),
                        (r, n, d) => Err(format!(
                            "postcard hop {hop} of {path_len}: P4 reason {r}, Rust {n} frames, \
                             {d} drops"
                        )),
                    }
                }
            }
        }
    }
}

/// Whether the vector holds a table entry `dta_bfrt.py` never installs: the `drop` action (each
/// route table's default) as an entry, or a `tbl_pc_hop` entry for a hop that has no place.
fn uninstallable(k: &Knobs, v: &Vector) -> bool {
    v.tables.iter().any(|e| {
        e.action == "Ingress.drop"
            || (e.table.ends_with("tbl_pc_hop") && {
                let (h, l) = (json_u64(&e.key["md.hop"]), json_u64(&e.key["md.path_len"]));
                let b = u64::from(k.pc_hops);
                !(h < b && (l == 0 || (h < l && l <= b)))
            })
    })
}

/// Reports the pipeline dropped, under any reason.
fn drops(p: &Pipeline) -> u64 {
    p.counters()
        .iter()
        .filter(|(c, _)| c.name.starts_with("drop_"))
        .map(|(_, n)| n)
        .sum()
}

fn vector_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("corpus/p4testgen")
}

fn vector_files(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .expect("the vector directory exists")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.extension().is_some_and(|e| e == "json") && p != &dir.join("expected-classes.json")
        })
        .collect();
    v.sort();
    v
}

#[test]
fn rust_pipeline_agrees_with_p4testgen_vectors() {
    // DTA_P4TESTGEN_DIR: replay another directory of vectors (e.g. an uncommitted full
    // P4Testgen run, p4/README.md "P4Testgen"); its classes are printed, not checked.
    let other = std::env::var_os("DTA_P4TESTGEN_DIR").map(PathBuf::from);
    let dir = other.clone().unwrap_or_else(vector_dir);
    let files = vector_files(&dir);
    assert!(
        other.is_some() || files.len() >= 2,
        "at least two knob sets of vectors"
    );
    let documented: BTreeMap<String, BTreeMap<String, usize>> = serde_json::from_str(
        &std::fs::read_to_string(vector_dir().join("expected-classes.json"))
            .expect("expected-classes.json"),
    )
    .expect("expected-classes.json parses");
    let mut failures = Vec::new();
    let mut seen = BTreeMap::new();
    for f in &files {
        let vs: Vectors =
            serde_json::from_str(&std::fs::read_to_string(f).expect("read")).expect("parse");
        let k = Knobs::from_defines(&vs.defines);
        let mut classes: BTreeMap<String, usize> = BTreeMap::new();
        for v in &vs.tests {
            match replay(&k, v) {
                Ok(c) => *classes.entry(format!("{c:?}")).or_default() += 1,
                Err(e) => {
                    *classes.entry("Disagreement".into()).or_default() += 1;
                    failures.push(format!("{} {}: {e}", vs.knobs, v.name));
                }
            }
        }
        eprintln!("{}: {} vectors {classes:?}", vs.knobs, vs.tests.len());
        seen.insert(vs.knobs.clone(), classes);
    }
    assert!(
        failures.is_empty(),
        "{} disagreements:\n{}",
        failures.len(),
        failures.join("\n")
    );
    if other.is_some() {
        return;
    }
    assert_eq!(
        seen, documented,
        "vector classes changed: update tests/corpus/p4testgen/expected-classes.json and README"
    );
}
