//! The translator's transmit capture (`translator.capture`, and the pcap backend's output)
//! checked by `dta pcap-check`'s ICRC checker and by tshark.
//!
//! 1. Kernel UDP backend on loopback into the software RNIC, capturing: every RoCEv2 frame in
//!    the capture has a correct ICRC; a flipped byte makes the check (and the `dta pcap-check`
//!    binary's exit status) fail; tshark decodes the frames as RoCE with nothing malformed.
//! 2. pcap backend: a generated report pcap replayed through the translator's workers, the
//!    frames they transmit written to `[pcap] output`: every one verifies.

use std::io::Write;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use dta_bench::gen::{Generator, Mix, Scenario};
use dta_bench::pcapcheck::check_file;
use dta_bench::replay::{UdpReplayOptions, UdpRig};
use dta_bench::trace::Trace;
use dta_collector::config::{CollectorConfig, DeviceSection, StaticPeer};
use dta_collector::Collector;
use dta_translator::config::{BackendKind, CollectorSection, TranslatorConfig};
use dta_translator::Translator;

fn scenario() -> Scenario {
    Scenario {
        mix: Mix::parse("kw=2,pc=2,loss=2,ctr=1").unwrap(),
        slots_log2: 14,
        chunks_log2: 12,
        capacity: 4096,
        ..Scenario::default()
    }
}

fn tmp(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("dta-capture-{}-{name}", std::process::id()))
}

/// Runs tshark over `path`: (frames decoded with an InfiniBand BTH, lines with malformed or
/// expert-error marks). None when tshark is missing.
fn tshark(path: &Path, roce_port: u16) -> Option<(usize, Vec<String>)> {
    if Command::new("tshark").arg("--version").output().is_err() {
        return None;
    }
    let out = Command::new("tshark")
        .args(["-n", "-o", "ip.check_checksum:TRUE", "-d"])
        .arg(format!("udp.port=={roce_port},infiniband"))
        .arg("-r")
        .arg(path)
        .args([
            "-T",
            "fields",
            "-e",
            "frame.number",
            "-e",
            "udp.dstport",
            "-e",
            "infiniband.bth.opcode",
            "-e",
            "_ws.malformed",
            "-e",
            "_ws.expert.severity",
        ])
        .output()
        .expect("tshark runs");
    assert!(
        out.status.success(),
        "tshark failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let s = String::from_utf8_lossy(&out.stdout).into_owned();
    let mut roce = 0;
    let mut bad = Vec::new();
    for l in s.lines() {
        let f: Vec<&str> = l.split('\t').collect();
        if f.get(1) == Some(&roce_port.to_string().as_str())
            && f.get(2).is_some_and(|o| !o.is_empty())
        {
            roce += 1;
        }
        // 8388608 = error severity (malformed); warnings and notes are not failures.
        if f.get(3).is_some_and(|m| !m.is_empty())
            || f.get(4).is_some_and(|e| e.contains("8388608"))
        {
            bad.push(l.to_string());
        }
    }
    Some((roce, bad))
}

#[test]
fn kernel_udp_capture_verifies_and_a_flipped_byte_fails() {
    let sc = scenario();
    let trace = Trace::generate(&mut Generator::new(&sc), 3000).unwrap();
    let cap = tmp("udp.pcap");
    let rig = UdpRig::start_capturing(&sc, Some(&cap)).unwrap();
    let port = rig.collector.roce.port();
    let r = rig
        .run(
            &trace,
            &UdpReplayOptions {
                loops: 1,
                rate: 200_000,
                window: 2048,
            },
        )
        .unwrap();
    rig.stop();
    assert!(r.frames > 0, "{r:?}");
    let c = check_file(&cap, &[port]).unwrap();
    assert!(c.passed(), "{}", c.summary());
    // Every frame the workers sent is in the capture (NACKs, if any, are not RoCE).
    assert!(
        c.ok >= r.frames,
        "{} frames sent, capture: {}",
        r.frames,
        c.summary()
    );
    assert!(c.opcodes.len() >= 2, "writes and atomics: {}", c.summary());

    // The CLI agrees, and fails on a corrupted copy.
    let dta = env!("CARGO_BIN_EXE_dta");
    let st = Command::new(dta)
        .args(["pcap-check", "--roce-port", &port.to_string()])
        .arg(&cap)
        .output()
        .unwrap();
    assert!(
        st.status.success(),
        "{}",
        String::from_utf8_lossy(&st.stdout)
    );
    let mut bytes = std::fs::read(&cap).unwrap();
    // Last byte of the first record's frame: its ICRC (24-byte file header, 16-byte record
    // header; the first frame is RoCEv2 since reports never go out).
    let incl = u32::from_le_bytes(bytes[24 + 8..24 + 12].try_into().unwrap()) as usize;
    bytes[24 + 16 + incl - 10] ^= 0x20;
    let bad = tmp("udp-bad.pcap");
    std::fs::write(&bad, &bytes).unwrap();
    let c2 = check_file(&bad, &[port]).unwrap();
    assert_eq!((c2.bad_icrc, c2.malformed), (1, 0), "{}", c2.summary());
    let st = Command::new(dta)
        .args(["pcap-check", "--roce-port", &port.to_string()])
        .arg(&bad)
        .output()
        .unwrap();
    assert_eq!(
        st.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&st.stdout)
    );
    let _ = std::fs::remove_file(&bad);

    match tshark(&cap, port) {
        None => {
            let _ = writeln!(
                std::io::stderr(),
                "SKIP: tshark not installed (scripts/install-tshark.sh installs it)"
            );
        }
        Some((roce, bad)) => {
            assert_eq!(
                roce as u64,
                c.ok + c.bad_icrc,
                "tshark decodes every frame as RoCE"
            );
            assert!(bad.is_empty(), "tshark flags frames: {bad:?}");
        }
    }
    let _ = std::fs::remove_file(&cap);
}

#[test]
fn pcap_backend_replays_reports_and_its_output_verifies() {
    let sc = scenario();
    let trace = Trace::generate(&mut Generator::new(&sc), 2000).unwrap();
    let input = tmp("in.pcap");
    trace.write_pcap(&input, Duration::from_micros(1)).unwrap();
    // The metadata goes into a directory of our own (the collector refuses /tmp itself).
    let meta_dir = tmp("meta");
    let meta = meta_dir.join("collector.json");
    let c_ip = Ipv4Addr::new(127, 0, 0, 1);
    let roce_t = SocketAddrV4::new(Ipv4Addr::new(127, 0, 0, 2), 4791);
    // The collector only publishes the metadata here: the pcap backend sends nowhere.
    let collector = Collector::start(CollectorConfig {
        collector: DeviceSection {
            roce: SocketAddrV4::new(c_ip, 0),
            metadata_file: Some(meta.clone()),
            // The scenario's stores are written with its N (up to 8).
            max_redundancy: 8,
            ..DeviceSection::default()
        },
        static_peers: vec![StaticPeer {
            roce: roce_t,
            workers: 2,
            qpn_base: 0x100,
            mac: "02:00:00:00:00:01".into(),
        }],
        stores: sc.stores(),
        export: Default::default(),
        pull: None,
    })
    .unwrap();
    let port = collector.roce.port();
    let out = tmp("out.pcap");
    let mut t = TranslatorConfig::default();
    t.translator.backend = BackendKind::Pcap;
    t.translator.workers = 2;
    t.translator.roce = roce_t;
    t.translator.max_redundancy = 8;
    t.reports.reference_variant = sc.parse_config().reference_variant;
    t.postcard.cache_slots = sc.cache_slots;
    t.pcap.input = vec![input.clone()];
    t.pcap.loops = 1;
    t.pcap.output = Some(out.clone());
    t.collectors = vec![CollectorSection::with_metadata("local", meta.clone())];
    let tr = Translator::start(t).unwrap();
    assert!(
        tr.wait_for(Duration::from_secs(20), |c| c.rx_datagrams >= 2000),
        "both workers replayed their share: {:?}",
        tr.counters()
    );
    let snaps = tr.shutdown();
    collector.shutdown();
    let frames: u64 = snaps.iter().map(|s| s.counters.frames).sum();
    assert!(frames > 0);
    let mut ok = 0;
    for w in 0..2 {
        let p = dta_translator::backends::capture_path(&out, w, 2);
        let c = check_file(&p, &[port]).unwrap();
        assert!(c.passed(), "worker {w}: {}", c.summary());
        assert!(c.ok > 0, "worker {w}: {}", c.summary());
        ok += c.ok;
        let _ = std::fs::remove_file(&p);
    }
    // Every frame (including probes and flushes at shutdown) was written.
    assert_eq!(ok, frames);
    for p in [input, meta] {
        let _ = std::fs::remove_file(p);
    }
    let _ = std::fs::remove_dir_all(meta_dir);
}
