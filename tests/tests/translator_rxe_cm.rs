//! The translator against a real RNIC stack through real RDMA_CM.
//!
//! Inside the Soft-RoCE VM runs the collector built with the `rdma` feature: kernel rdma_cm
//! listeners (ib_cm validates our REQ) and rxe QPs. On the host, the translator's own RDMA_CM
//! initiator connects to each store over the VM's wire (raw RoCEv2 frames), receives the
//! metadata SENDs, and the production pipeline then writes Key-Write, Append and Key-Increment
//! reports; the collector's query CLI inside the guest must return what was sent.
//!
//! Skips with a printed reason without QEMU/the image or without the `rdma` feature's build
//! dependencies.

use std::io::Write;
use std::net::SocketAddrV4;
use std::time::{Duration, Instant};

use dta_proto::batch::{Datagram, TxBatch};
use dta_proto::wire::ethernet::MacAddr;
use dta_proto::wire::ib::{Psn, Qpn};
use dta_proto::wire::report::{ParseConfig, Primitive, Profile, Report};
use dta_proto::wire::roce::{parse_frame, L2L4_LEN};
use dta_proto::{Key, Value};
use dta_tests::harness::extended_header;
use dta_tests::rdma_feature::{cpio, extra_guest_libs, feature_binaries, run_until};
use dta_tests::rxe_vm::{vm_available, Vm, GUEST_IP, GUEST_MAC, HOST_IP, HOST_MAC};
use dta_translator::control::cm::{CmEvent, CmInitiator};
use dta_translator::datapath::pipeline::{
    CollectorTarget, Pipeline, PipelineConfig, RateLimit, Route,
};
use dta_translator::datapath::qp::QpTuning;

fn skip(why: &str) {
    let _ = writeln!(std::io::stderr(), "SKIP: {why}");
}

const CONFIG: &str = r#"
[collector]
backend = "rdma"
roce = "10.77.0.2:4791"
control = "127.0.0.1:14791"
hugepages = false
cm_allow = ["10.77.0.1"]          # the host's initiators

[[store]]
name = "paths"
kind = "keywrite"
slots = 1024
slot_size = 16
port = 1337

[[store]]
name = "losses"
kind = "append"
lists = 2
capacity = 64
entry_size = 8
batch = 4
port = 1338

[[store]]
name = "bytes"
kind = "keyincrement"
slots = 1024
port = 1339
"#;

/// Moves frames between the host-side state machines and the VM until `done` or timeout.
fn exchange(
    vm: &Vm,
    tx: &mut TxBatch,
    timeout: Duration,
    mut on_frame: impl FnMut(&Datagram<'_>, &mut TxBatch) -> bool,
) -> bool {
    let t0 = Instant::now();
    // Frames not yet sent: the emulated NIC (TCG) drops bursts, so send a few at a time and
    // read the answers in between.
    let mut backlog: std::collections::VecDeque<Vec<u8>> = std::collections::VecDeque::new();
    loop {
        backlog.extend((0..tx.len()).map(|i| tx.frame(i).to_vec()));
        tx.clear();
        for _ in 0..8 {
            let Some(f) = backlog.pop_front() else { break };
            vm.send_frame(&f).unwrap();
        }
        for f in vm
            .recv_frames(Duration::from_millis(if backlog.is_empty() {
                50
            } else {
                10
            }))
            .unwrap_or_default()
        {
            let Ok(p) = parse_frame(&f) else { continue };
            let d = Datagram {
                src: SocketAddrV4::new(p.ip.src, p.udp.src_port),
                dst: SocketAddrV4::new(p.ip.dst, p.udp.dst_port),
                ip: None,
                payload: &f[L2L4_LEN..],
            };
            if on_frame(&d, tx) {
                backlog.extend((0..tx.len()).map(|i| tx.frame(i).to_vec()));
                tx.clear();
                for f in backlog.drain(..) {
                    vm.send_frame(&f).unwrap();
                }
                return true;
            }
        }
        if t0.elapsed() > timeout && backlog.is_empty() {
            return false;
        }
    }
}

#[test]
fn translator_connects_to_rxe_through_rdma_cm_and_every_primitive_lands() {
    let image = match vm_available() {
        Ok(i) => i,
        Err(why) => return skip(&format!("rxe VM unavailable: {why}")),
    };
    let (collector, _) = match feature_binaries() {
        Ok(b) => b,
        Err(why) => return skip(&why),
    };
    let mut files = vec![
        (
            "usr/local/bin/dta-collector",
            std::fs::read(&collector).unwrap(),
            0o755,
        ),
        ("etc/dta/collector.toml", CONFIG.as_bytes().to_vec(), 0o644),
    ];
    files.extend(extra_guest_libs());
    let archive = cpio(&files);
    let cpio_path =
        std::env::temp_dir().join(format!("dta-translator-cm-{}.cpio", std::process::id()));
    std::fs::write(&cpio_path, &archive).unwrap();
    let vm = Vm::boot_with_initrd(&image, &cpio_path).expect("boot the rxe VM");
    let _ = std::fs::remove_file(&cpio_path);
    let log = run_until(
        &vm,
        "RUST_LOG=info dta-collector run --config /etc/dta/collector.toml --progress 0",
        "/tmp/collector.log",
        "listening for RDMA_CM on 10.77.0.2:1339",
        Duration::from_secs(60),
    );
    assert!(
        log.contains("listening for RDMA_CM on 10.77.0.2:1339"),
        "collector did not start:\n{log}"
    );

    // 1. RDMA_CM from the translator's initiator to the kernel's rdma_cm listeners.
    let host = SocketAddrV4::new(HOST_IP, 4791);
    let guest = SocketAddrV4::new(GUEST_IP, 4791);
    let mut cm = CmInitiator::new(
        host,
        MacAddr(HOST_MAC),
        guest,
        MacAddr(GUEST_MAC),
        true,
        0x5eed,
    );
    let mut tx = TxBatch::new(4096, 2048);
    let ports = [1337u16, 1338, 1339];
    for (i, &port) in ports.iter().enumerate() {
        cm.connect(
            port,
            Qpn::new(0x300 + i as u32),
            Psn::new(0x1000 * (i as u32 + 1)),
            0,
            &mut tx,
        );
    }
    let mut ready = Vec::new();
    let epoch = Instant::now();
    let ok = exchange(&vm, &mut tx, Duration::from_secs(30), |d, tx| {
        if cm.wants(d) {
            cm.handle(epoch.elapsed().as_nanos() as u64, d, tx);
            while let Some(e) = cm.poll_event() {
                match e {
                    CmEvent::Ready {
                        port,
                        meta,
                        binding,
                    } => ready.push((port, meta, binding)),
                    CmEvent::Failed { port, reason } => panic!("port {port} rejected: {reason:?}"),
                }
            }
        }
        ready.len() == ports.len()
    });
    let log = vm.ctl("cat /tmp/collector.log").unwrap();
    assert!(
        ok,
        "RDMA_CM did not complete ({} of 3 ready; initiator {:?})\ncollector log:\n{log}",
        ready.len(),
        cm.counters
    );
    ready.sort_by_key(|(p, _, _)| *p);
    for (port, m, b) in &ready {
        eprintln!(
            "READY port {port} store {} remote QPN {:#x} start PSN {:#x}",
            m.name,
            b.remote_qpn.value(),
            b.start_psn.value()
        );
    }
    let names: Vec<&str> = ready.iter().map(|(_, m, _)| m.name.as_str()).collect();
    assert_eq!(
        names,
        ["paths", "losses", "bytes"],
        "store names from the REP private data"
    );
    // The sequenced Append store announced its list heads and the real RNIC sent them after
    // the record: both lists are empty, so each continues at batch 1.
    assert_eq!(
        cm.take_list_heads(1338),
        Some(vec![1, 1]),
        "list heads over rxe; initiator {:?}",
        cm.counters
    );
    assert_eq!(
        cm.take_list_heads(1337),
        None,
        "a Key-Write store sends no heads"
    );

    // 2. The production pipeline writes over the connected QPs.
    let target = CollectorTarget {
        roce: guest,
        mac: MacAddr(GUEST_MAC),
        stores: ready.iter().map(|(_, m, b)| (m.clone(), *b)).collect(),
    };
    let pc = PipelineConfig {
        worker: 0,
        workers: 1,
        parse: ParseConfig::default(),
        max_redundancy: 4,
        l2_frames: true,
        local: host,
        local_mac: MacAddr(HOST_MAC),
        nack_port: 40044,
        append_flush_ns: 1_000_000_000,
        postcard_flush_ns: 0,
        postcard_cache_slots: 64,
        postcard_redundancy: 1,
        qp: QpTuning {
            ack_every: 4,
            ack_timeout_ns: 5_000_000_000,
            ..QpTuning::default()
        },
        rate: RateLimit::default(),
        backlog: 16,
        max_reporters: 4,
        route_keywrite: Route::Single(0),
        route_keyincrement: Route::Single(2),
        route_postcard: Route::None,
        sketch: Default::default(),
    };
    let mut p = Pipeline::new(pc, &[target]).expect("pipeline builds from the advertised stores");
    let mut reports = Vec::new();
    for i in 0..20u32 {
        let key = Key::new(&(0xAB00 + i).to_be_bytes()).unwrap();
        reports.push(Report {
            header: extended_header(0),
            primitive: Primitive::KeyWrite {
                redundancy: 2,
                key,
                value: Value::new(&[i as u8 + 1; 12]).unwrap(),
            },
        });
        reports.push(Report {
            header: extended_header(0),
            primitive: Primitive::KeyIncrement {
                redundancy: 2,
                key,
                delta: 1000 + i as u64,
            },
        });
    }
    for j in 0..10u64 {
        reports.push(Report {
            header: extended_header(0),
            primitive: Primitive::Append {
                list: (j % 2) as u32,
                value: Value::new(&(0xE000 + j).to_le_bytes()).unwrap(),
            },
        });
    }
    let bufs: Vec<Vec<u8>> = reports
        .iter()
        .map(|r| {
            let mut b = vec![0u8; 128];
            let n = r.emit(Profile::Extended, &mut b).unwrap();
            b.truncate(n);
            b
        })
        .collect();
    let src = SocketAddrV4::new(std::net::Ipv4Addr::new(10, 77, 0, 9), 5000);
    let dgrams: Vec<Datagram<'_>> = bufs
        .iter()
        .map(|b| Datagram {
            src,
            dst: host,
            ip: None,
            payload: b,
        })
        .collect();
    let now = || epoch.elapsed().as_nanos() as u64;
    p.handle_reports(now(), &dgrams, &mut tx);
    assert!(p.flush_all(now(), &mut tx), "the batch holds every frame");
    let sent = p.counters().frames;
    // Feed every response back for a few seconds (rxe under TCG answers within milliseconds).
    exchange(&vm, &mut tx, Duration::from_secs(4), |d, tx| {
        p.handle_responses(now(), std::slice::from_ref(d), tx);
        false
    });
    let stats: Vec<_> = p.qp_stats().map(|(n, _, q)| (n.to_string(), q)).collect();
    for (name, q) in &stats {
        assert_eq!(
            q.nak_seq + q.nak_access + q.nak_invalid + q.nak_other,
            0,
            "store {name}: no NAK from rxe: {q:?}"
        );
        assert!(q.acks > 0, "store {name}: rxe ACKed: {q:?}");
    }
    assert_eq!(
        sent,
        20 * 2 + 20 * 2 + 10 / 4 + 2,
        "frames: KW 2x20, KI 2x20, Append 2 full batches + 2 partial"
    );

    // 3. What the collector's query engine (its CLI inside the guest) says.
    let q = |cmd: &str| {
        vm.ctl(&format!(
            "DTA_CONTROL=127.0.0.1:14791 dta-collector {cmd} 2>&1"
        ))
        .unwrap()
    };
    for i in [0u32, 7, 19] {
        let out = q(&format!("query keywrite {:08x}", 0xAB00 + i));
        let want: String = std::iter::repeat_n(format!("{:02x}", i + 1), 12).collect();
        assert!(
            out.contains(&want),
            "key {i}: {out}\nQPs: {stats:?}\ncounters: {:?}",
            p.counters()
        );
        let out = q(&format!("query counter {:08x}", 0xAB00 + i));
        assert!(out.contains(&format!("{}", 1000 + i)), "counter {i}: {out}");
    }
    let out = q("tail 0 --from 1");
    let dbg = format!(
        "{}\n{}",
        q("stats"),
        vm.ctl("wget -qO- 'http://127.0.0.1:14791/tail/losses/0?from=1' 2>&1")
            .unwrap_or_default()
    );
    for j in [0u64, 2, 4, 6, 8] {
        let hex: String = (0xE000 + j)
            .to_le_bytes()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        assert!(out.contains(&hex), "list 0 misses entry {j}: {out}\n{dbg}");
    }

    // 4. A restarted translator (another CA GUID) learns where each list goes on: five entries
    // per list at batch 4 made two batches (one flushed partial), so batch 3 is next.
    let mut cm2 = CmInitiator::new(
        host,
        MacAddr(HOST_MAC),
        guest,
        MacAddr(GUEST_MAC),
        true,
        0xbeef,
    )
    .with_ca_guid(0x0d7a_0000_0000_0002);
    cm2.connect(1338, Qpn::new(0x400), Psn::new(0x7000), 0, &mut tx);
    let mut again = false;
    let ok = exchange(&vm, &mut tx, Duration::from_secs(30), |d, tx| {
        if cm2.wants(d) {
            cm2.handle(now(), d, tx);
            match cm2.poll_event() {
                Some(CmEvent::Ready { .. }) => again = true,
                Some(CmEvent::Failed { port, reason }) => {
                    panic!("port {port} rejected on reconnect: {reason:?}")
                }
                None => {}
            }
        }
        again
    });
    assert!(ok, "reconnect did not complete: {:?}", cm2.counters);
    assert_eq!(
        cm2.take_list_heads(1338),
        Some(vec![3, 3]),
        "heads after the writes; initiator {:?}\n{}",
        cm2.counters,
        vm.ctl("cat /tmp/collector.log").unwrap_or_default()
    );
}
