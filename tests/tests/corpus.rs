//! The shared conformance corpus (`tests/corpus/`, see its README): the real translator
//! pipeline must emit every case's expected RoCEv2 frames byte for byte, and the software RNIC
//! executing them must leave exactly the expected memory.
//!
//! `DTA_REGEN_CORPUS=1 cargo test -p dta-tests --test corpus` (or `cargo run -p dta-bench --
//! corpus`) regenerates the files from the model in `bench/src/corpus.rs`.

use std::net::{Ipv4Addr, SocketAddrV4};
use std::path::{Path, PathBuf};

use dta_collector::config::{CollectorConfig, DeviceSection};
use dta_collector::rnic::responder::{DeviceConfig, QpConfig, Responder};
use dta_collector::store::build_stores;
use dta_conformance::{
    self as corpus, CaseFile, ResponseKind, COLLECTOR, COLLECTOR_MAC, TRANSLATOR, TRANSLATOR_MAC,
};
use dta_proto::batch::{Datagram, IpMeta, TxBatch};
use dta_proto::wire::dta::BaseVariant;
use dta_proto::wire::ib::{Psn, Qpn};
use dta_proto::wire::report::{ParseConfig, Priority};
use dta_proto::wire::roce::{parse_frame, L2L4_LEN};
use dta_translator::datapath::pipeline::{
    CollectorTarget, Pipeline, PipelineConfig, QpBinding, RateLimit, Route,
};
use dta_translator::datapath::primitive::SketchSettings;
use dta_translator::datapath::qp::QpTuning;

fn corpus_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("corpus")
}

fn case_dirs() -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(corpus_dir())
        .expect("tests/corpus exists")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.join("case.json").exists())
        .collect();
    v.sort();
    v
}

fn describe(frame: &[u8]) -> String {
    if corpus::is_nack_frame(frame) {
        return format!(
            "NACK frame len {} {:?} {:02x?}",
            frame.len(),
            dta_proto::wire::nack::NackRepr::parse(&frame[42..]),
            frame
        );
    }
    match parse_frame(frame) {
        Ok(p) => format!(
            "len {} opcode {:#04x} dest_qp {:#x} psn {:#08x} ack_req {} transport {:02x?}",
            frame.len(),
            p.roce.bth.opcode,
            p.roce.bth.dest_qp.value(),
            p.roce.bth.psn.value(),
            p.roce.bth.ack_req,
            &frame[L2L4_LEN + 12..frame.len().min(L2L4_LEN + 12 + 48)]
        ),
        Err(e) => format!("unparsable ({e:?}) {:02x?}", &frame[..frame.len().min(64)]),
    }
}

struct Run {
    frames: Vec<Vec<u8>>,
    /// How many of `frames` the reports caused (the rest came from the final flush).
    before_flush: usize,
    memory: Vec<Vec<u8>>,
}

/// Runs one case through the production pipeline (with the case's canonical coordinates) and
/// the software RNIC (frames relocated to the RNIC's real regions).
fn run_case(case: &CaseFile, reports: &[Vec<u8>], responses: &[Vec<u8>]) -> Run {
    let cfg = CollectorConfig {
        collector: DeviceSection {
            roce: COLLECTOR,
            hugepages: false,
            verify_icrc: true,
            ..DeviceSection::default()
        },
        static_peers: vec![],
        stores: case.store_configs(),
        export: Default::default(),
        pull: None,
    };
    let mut rnic = Responder::new(DeviceConfig {
        local: COLLECTOR,
        local_mac: COLLECTOR_MAC,
        pmtu: 4096,
        l2_frames: true,
    });
    let stores = build_stores(&cfg, &mut rnic).expect("stores build");
    let mut real_qpn = Vec::new();
    for (i, s) in stores.iter().enumerate() {
        let q = case.qps[i];
        assert_eq!(
            s.meta.kind, case.metas[i].kind,
            "{}: layout of store {i}",
            case.name
        );
        assert_eq!(
            s.meta.len, case.metas[i].len,
            "{}: length of store {i}",
            case.name
        );
        real_qpn.push(rnic.create_qp(QpConfig {
            peer: TRANSLATOR,
            peer_mac: TRANSLATOR_MAC,
            peer_qpn: Qpn::new(q.local_qpn),
            rq_psn: Psn::new(q.psn),
            sq_psn: Psn::new(0),
            verify_icrc: true,
            recv_credits: 1 << 20,
        }));
    }
    let first_of = |kind: &str| {
        case.metas
            .iter()
            .position(|m| m.kind.name() == kind)
            .map_or(Route::None, Route::Single)
    };
    let target = CollectorTarget {
        roce: COLLECTOR,
        mac: COLLECTOR_MAC,
        stores: case
            .metas
            .iter()
            .zip(&case.qps)
            .map(|(m, q)| {
                (
                    m.clone(),
                    QpBinding {
                        local_qpn: Qpn::new(q.local_qpn),
                        remote_qpn: Qpn::new(q.remote_qpn),
                        start_psn: Psn::new(q.psn),
                    },
                )
            })
            .collect(),
    };
    let variant = match case.reference_variant.as_str() {
        "A" => BaseVariant::A,
        _ => BaseVariant::B,
    };
    let pc = PipelineConfig {
        worker: 0,
        workers: 1,
        parse: ParseConfig {
            reference_variant: variant,
            accept_reference: true,
            accept_extended: true,
            reference_priority: Priority::Medium,
        },
        max_redundancy: case.max_redundancy,
        l2_frames: true,
        local: TRANSLATOR,
        local_mac: TRANSLATOR_MAC,
        nack_port: 40044,
        append_flush_ns: 0,
        postcard_flush_ns: 0,
        postcard_cache_slots: case.postcard_cache_slots,
        postcard_redundancy: case.postcard_redundancy,
        qp: QpTuning {
            ack_every: case.ack_every,
            ack_timeout_ns: 1_000_000_000,
            ..QpTuning::default()
        },
        rate: RateLimit::default(),
        backlog: 1024,
        max_reporters: 64,
        route_keywrite: first_of("keywrite"),
        route_keyincrement: first_of("keyincrement"),
        route_postcard: first_of("postcard"),
        sketch: case
            .sketch
            .as_ref()
            .map_or_else(SketchSettings::default, |sk| SketchSettings {
                expected_switches: sk.expected_switches,
                max_switches: sk.max_switches,
                // No timers: the harness never polls, so nothing is written or NACKed late.
                ..SketchSettings::default()
            }),
    };
    let mut pipeline = Pipeline::new(pc, &[target]).expect("pipeline builds");
    let mut tx = TxBatch::new(4096, 2048);
    let mut frames = Vec::new();
    let now = 1_000_000;
    let take = |tx: &mut TxBatch, frames: &mut Vec<Vec<u8>>| {
        for i in 0..tx.len() {
            frames.push(tx.frame(i).to_vec());
        }
        tx.clear();
    };
    assert_eq!(
        responses.len(),
        case.responses.len(),
        "{}: responses.pcap",
        case.name
    );
    for (ri, r) in reports.iter().enumerate() {
        assert!(r.len() >= 42, "report frame too short");
        let src = SocketAddrV4::new(
            Ipv4Addr::new(r[26], r[27], r[28], r[29]),
            u16::from_be_bytes([r[34], r[35]]),
        );
        let dst = SocketAddrV4::new(
            Ipv4Addr::new(r[30], r[31], r[32], r[33]),
            u16::from_be_bytes([r[36], r[37]]),
        );
        let d = Datagram {
            src,
            dst,
            ip: None,
            payload: &r[42..],
        };
        pipeline.handle_reports(now, &[d], &mut tx);
        take(&mut tx, &mut frames);
        // The collector's responses to what was sent so far (ACKs, stale and fresh NAKs).
        for (f, _) in responses
            .iter()
            .zip(&case.responses)
            .filter(|(_, c)| c.after_report == ri + 1)
        {
            let p = parse_frame(f).expect("response frame parses");
            let d = Datagram {
                src: SocketAddrV4::new(p.ip.src, p.udp.src_port),
                dst: SocketAddrV4::new(p.ip.dst, p.udp.dst_port),
                ip: None,
                payload: &f[L2L4_LEN..],
            };
            pipeline.handle_responses(now, &[d], &mut tx);
            pipeline.poll_transmit(now, &mut tx);
            take(&mut tx, &mut frames);
        }
    }
    // Every stale NAK was ignored and counted, every fresh one taken.
    let stats: Vec<_> = pipeline.qp_stats().map(|(_, _, s)| s).collect();
    let nak = |fresh: bool| {
        case.responses
            .iter()
            .filter(|r| r.syndrome == ResponseKind::NakPsnSequenceError && r.fresh == fresh)
            .count() as u64
    };
    let stale: u64 = stats.iter().map(|s| s.stale_responses).sum();
    let nak_seq: u64 = stats.iter().map(|s| s.nak_seq).sum();
    assert_eq!(
        (stale, nak_seq),
        (nak(false), nak(true)),
        "{}: (stale responses, fresh NAKs) counted by the QPs",
        case.name
    );
    let before_flush = frames.len();
    while !pipeline.flush_all(now, &mut tx) {
        take(&mut tx, &mut frames);
    }
    take(&mut tx, &mut frames);

    // Relocate canonical coordinates to the RNIC's real ones and execute.
    let mut rnic_tx = TxBatch::new(4096, 2048);
    // Sketch-column NACKs go back to the reporter, not to the collector.
    for f in frames.iter().filter(|f| !corpus::is_nack_frame(f)) {
        let mut g = f.clone();
        let bth = L2L4_LEN;
        let dest = u32::from_be_bytes([0, g[bth + 5], g[bth + 6], g[bth + 7]]);
        let Some(i) = case.qps.iter().position(|q| q.remote_qpn == dest) else {
            continue;
        };
        let q = case.qps[i];
        g[bth + 5..bth + 8].copy_from_slice(&real_qpn[i].value().to_be_bytes()[1..]);
        let va = u64::from_be_bytes(g[bth + 12..bth + 20].try_into().unwrap());
        let real = va - q.addr + stores[i].meta.addr;
        g[bth + 12..bth + 20].copy_from_slice(&real.to_be_bytes());
        g[bth + 20..bth + 24].copy_from_slice(&stores[i].meta.rkey.to_be_bytes());
        let n = g.len();
        let ip: [u8; 20] = g[14..34].try_into().unwrap();
        let udp: [u8; 8] = g[34..42].try_into().unwrap();
        let icrc = dta_proto::icrc::icrc_ipv4(&ip, &udp, &g[42..n - 4]);
        g[n - 4..].copy_from_slice(&icrc.to_le_bytes());
        let p = parse_frame(&g).expect("relocated frame parses");
        let d = Datagram {
            src: SocketAddrV4::new(p.ip.src, p.udp.src_port),
            dst: SocketAddrV4::new(p.ip.dst, p.udp.dst_port),
            ip: Some(IpMeta {
                ident: p.ip.ident,
                dont_frag: p.ip.dont_frag,
                ttl: p.ip.ttl,
                tos: p.ip.tos,
            }),
            payload: &g[L2L4_LEN..],
        };
        rnic.handle(&d, &mut rnic_tx);
        rnic_tx.clear();
    }
    let memory = stores
        .iter()
        .map(|s| {
            let mut b = vec![0u8; s.meta.len as usize];
            s.region.read(0, &mut b).expect("region read");
            b
        })
        .collect();
    Run {
        frames,
        before_flush,
        memory,
    }
}

#[test]
fn corpus_matches_the_model() {
    if std::env::var_os("DTA_REGEN_CORPUS").is_some() {
        let n = corpus::write_corpus(&corpus_dir()).expect("corpus regenerates");
        eprintln!("regenerated {n} corpus cases");
    }
    let cases = corpus::cases().expect("model runs");
    let dirs = case_dirs();
    let names: Vec<String> = dirs
        .iter()
        .map(|d| d.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    let mut want: Vec<String> = cases.iter().map(|c| c.case.name.clone()).collect();
    want.sort();
    assert_eq!(
        names, want,
        "tests/corpus is stale: regenerate with `cargo run -p dta-bench -- corpus`"
    );
    for c in &cases {
        let d = corpus_dir().join(&c.case.name);
        let on_disk: CaseFile =
            serde_json::from_str(&std::fs::read_to_string(d.join("case.json")).unwrap()).unwrap();
        assert_eq!(
            serde_json::to_value(&on_disk).unwrap(),
            serde_json::to_value(&c.case).unwrap(),
            "{}: case.json is stale",
            c.case.name
        );
        assert_eq!(
            corpus::read_pcap(&d.join("expected.pcap")).unwrap(),
            c.frames,
            "{}: expected.pcap is stale",
            c.case.name
        );
        if !c.responses.is_empty() {
            assert_eq!(
                corpus::read_pcap(&d.join("responses.pcap")).unwrap(),
                c.responses,
                "{}: responses.pcap is stale",
                c.case.name
            );
        }
        for (m, mem) in c.case.metas.iter().zip(&c.memory) {
            assert_eq!(
                &std::fs::read(d.join(format!("memory-{}.bin", m.name))).unwrap(),
                mem,
                "{}: memory-{}.bin is stale",
                c.case.name,
                m.name
            );
        }
    }
}

#[test]
fn translator_passes_the_corpus() {
    let dirs = case_dirs();
    assert!(!dirs.is_empty(), "tests/corpus has no cases");
    let mut failures = Vec::new();
    for d in &dirs {
        let case: CaseFile =
            serde_json::from_str(&std::fs::read_to_string(d.join("case.json")).unwrap()).unwrap();
        let reports = corpus::read_pcap(&d.join("reports.pcap")).unwrap();
        let expected = corpus::read_pcap(&d.join("expected.pcap")).unwrap();
        let responses = if case.responses.is_empty() {
            Vec::new()
        } else {
            corpus::read_pcap(&d.join("responses.pcap")).unwrap()
        };
        assert_eq!(reports.len(), case.reports, "{}", case.name);
        let run = run_case(&case, &reports, &responses);
        if run.frames != expected {
            let i = run
                .frames
                .iter()
                .zip(&expected)
                .position(|(a, b)| a != b)
                .unwrap_or(run.frames.len().min(expected.len()));
            let got = run.frames.get(i).map_or("none".into(), |f| describe(f));
            let want = expected.get(i).map_or("none".into(), |f| describe(f));
            failures.push(format!(
                "{}: {} frames, expected {}; first difference at frame {i}:\n  got  {got}\n  want {want}",
                case.name,
                run.frames.len(),
                expected.len()
            ));
            continue;
        }
        // The Tofino program emits only what the reports cause: the split matters.
        if run.before_flush != case.frames_before_flush {
            failures.push(format!(
                "{}: {} frames before the final flush, expected {}",
                case.name, run.before_flush, case.frames_before_flush
            ));
            continue;
        }
        for (m, mem) in case.metas.iter().zip(&run.memory) {
            let want = std::fs::read(d.join(format!("memory-{}.bin", m.name))).unwrap();
            if &want != mem {
                let at = want.iter().zip(mem).position(|(a, b)| a != b);
                failures.push(format!(
                    "{}: memory of store {} differs (first at byte {at:?})",
                    case.name, m.name
                ));
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} corpus cases failed:\n{}",
        failures.len(),
        dirs.len(),
        failures.join("\n")
    );
}
