//! Report steering over kernel UDP: `SO_REUSEPORT` per worker vs a dispatcher thread, measured.
//!
//! A collector (software RNIC: static peers, or RDMA_CM for the shared-port QPN steering case)
//! and a translator with 1 or 2 workers run on loopback;
//! `R` reporter sockets (distinct source ports) send the default report mix with `sendmmsg`,
//! flow-controlled against what the translator has taken. Printed per configuration: reports/s
//! (wall), CPU seconds of each worker, of the dispatcher and of the software RNIC (from
//! `/proc/self/task/TID/schedstat`), CPU ns per report of the translator threads, kernel
//! socket drops, drops by the pipeline, hand-offs, and `reporter_late` (reports that arrived
//! behind their reporter's sequence: 0 means per-reporter order was kept).
//!
//! ```sh
//! cargo run -p dta-bench --example steering -- 400000 32 3 [ab | only:I]
//! #                                           reports reporters rounds
//! ```

use std::net::{Ipv4Addr, SocketAddrV4};
use std::time::{Duration, Instant};

use dta_bench::gen::{Generator, Scenario};
use dta_bench::sender::free_udp_port;
use dta_bench::sys;
use dta_bench::trace::Trace;
use dta_collector::config::{CollectorConfig, DeviceSection, StaticPeer};
use dta_collector::Collector;
use dta_io::udp::{UdpOptions, UdpSocket, UdpTx};
use dta_proto::batch::TxBatch;
use dta_translator::config::{CollectorSection, ReportSteering, RoceSteering, TranslatorConfig};
use dta_translator::Translator;

struct Outcome {
    reports: u64,
    secs: f64,
    worker_cpu: Vec<f64>,
    dispatch_cpu: f64,
    rnic_cpu: f64,
    socket_drops: u64,
    dropped: u64,
    handoffs: u64,
    late: u64,
    roce_invalid: u64,
    probes: u64,
    per_worker_rx: Vec<u64>,
    reasons: String,
    sender_cpu: f64,
    process_cpu: f64,
}

fn cpu(tids: &[u64]) -> f64 {
    tids.iter()
        .filter_map(|&t| sys::task_cpu_ns(t))
        .sum::<u64>() as f64
        * 1e-9
}

fn run(
    sc: &Scenario,
    trace: &Trace,
    workers: usize,
    steering: ReportSteering,
    roce: RoceSteering,
    reporters: usize,
) -> Result<Outcome, String> {
    let dir = std::env::temp_dir().join(format!("dta-steering-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    let meta_file = dir.join("collector.json");
    let cip = Ipv4Addr::new(127, 0, 0, 1);
    let tip = Ipv4Addr::new(127, 0, 0, 2);
    let roce_c = SocketAddrV4::new(cip, free_udp_port(cip)?);
    // Worker w answers on port + w: leave room above a free port.
    let roce_t = SocketAddrV4::new(tip, free_udp_port(tip)?.min(60000));
    let rnic_before = sys::threads_named_now("dta-rnic");
    // QPN steering: the workers share one RoCEv2 port and connect over RDMA_CM (the software
    // RNIC answers the REQ's address); otherwise static peers answer worker w on port + w.
    let cm = roce == RoceSteering::Qpn;
    let mut stores = sc.stores();
    let ports: Vec<u16> = (0..stores.len() as u16).map(|i| 1500 + i).collect();
    if cm {
        for (s, &p) in stores.iter_mut().zip(&ports) {
            s.port = Some(p);
        }
    }
    let collector = Collector::start(CollectorConfig {
        collector: DeviceSection {
            roce: roce_c,
            metadata_file: Some(meta_file.clone()),
            ..DeviceSection::default()
        },
        static_peers: if cm {
            Vec::new()
        } else {
            vec![StaticPeer {
                roce: roce_t,
                workers: workers as u32,
                qpn_base: 0x100,
                mac: "02:00:00:00:00:01".into(),
            }]
        },
        stores,
        export: Default::default(),
        pull: None,
    })?;
    let rnic = sys::new_threads_named("dta-rnic", &rnic_before);
    let mut cfg = TranslatorConfig::default();
    cfg.translator.workers = workers;
    cfg.translator.listen = SocketAddrV4::new(Ipv4Addr::LOCALHOST, 0);
    cfg.translator.roce = roce_t;
    cfg.translator.roce_steering = roce;
    cfg.translator.report_steering = steering;
    cfg.translator.max_redundancy = 8;
    cfg.translator.socket_buffer = 64 << 20;
    cfg.reports.reference_variant = sc.parse_config().reference_variant;
    cfg.postcard.cache_slots = sc.cache_slots;
    // On a loaded shared machine the RNIC thread can miss the default 20 ms ACK timeout for
    // long enough that QPs are declared broken (drop_qp_broken); this measures steering, not
    // that, so give ACKs 200 ms.
    cfg.reliability.ack_timeout_us = 200_000;
    cfg.collectors = vec![if cm {
        CollectorSection::with_cm("local", roce_c, ports)
    } else {
        CollectorSection::with_metadata("local", meta_file)
    }];
    let before: Vec<Vec<u64>> = (0..workers)
        .map(|w| sys::threads_named_now(&format!("dta-worker-{w}")))
        .collect();
    let dbefore = sys::threads_named_now("dta-dispatch");
    let t = Translator::start(cfg)?;
    let wt: Vec<Vec<u64>> = (0..workers)
        .map(|w| sys::new_threads_named(&format!("dta-worker-{w}"), &before[w]))
        .collect();
    let dt = if steering == ReportSteering::Dispatcher && workers > 1 {
        sys::new_threads_named("dta-dispatch", &dbefore)
    } else {
        Vec::new()
    };
    let mut txs: Vec<(UdpTx, TxBatch)> = (0..reporters)
        .map(|_| {
            let s = UdpSocket::bind(
                SocketAddrV4::new(Ipv4Addr::LOCALHOST, 0),
                &UdpOptions::default(),
            )
            .expect("reporter socket");
            (s.split().1, TxBatch::new(64, 256))
        })
        .collect();
    let dest = t.report_addr;
    let c0 = t.counters();
    let w0: Vec<f64> = wt.iter().map(|v| cpu(v)).collect();
    let (d0, r0) = (cpu(&dt), cpu(&rnic));
    let window = 16384u64;
    let (s0, p0) = (sys::thread_cpu_ns(), sys::process_cpu_secs());
    let t0 = Instant::now();
    let mut sent = 0u64;
    let mut taken = 0u64;
    for i in 0..trace.len() {
        let (tx, b) = &mut txs[i % reporters];
        let p = trace.payload(i);
        b.push_with(dest, 0, |buf| {
            buf[..p.len()].copy_from_slice(p);
            p.len()
        });
        if b.len() == 64 {
            while sent + 64 > taken + window {
                taken = t.counters().rx_datagrams - c0.rx_datagrams;
                if sent + 64 > taken + window {
                    std::thread::sleep(Duration::from_micros(200));
                }
            }
            sent += tx.send_batch(b).map_err(|e| e.to_string())? as u64;
            b.clear();
        }
    }
    for (tx, b) in &mut txs {
        sent += tx.send_batch(b).map_err(|e| e.to_string())? as u64;
        b.clear();
    }
    t.wait_for(Duration::from_secs(30), |c| {
        let got = c.rx_datagrams - c0.rx_datagrams;
        got >= sent && c.translated + c.dropped() >= c0.translated + c0.dropped() + got
    });
    let secs = t0.elapsed().as_secs_f64();
    let sender_cpu = (sys::thread_cpu_ns() - s0) as f64 * 1e-9;
    let process_cpu = sys::process_cpu_secs() - p0;
    let c = t.counters();
    let snaps = t.snapshots();
    let out = Outcome {
        reports: c.rx_datagrams - c0.rx_datagrams,
        secs,
        worker_cpu: wt.iter().zip(&w0).map(|(v, a)| cpu(v) - a).collect(),
        dispatch_cpu: cpu(&dt) - d0,
        rnic_cpu: cpu(&rnic) - r0,
        socket_drops: snaps.iter().map(|s| s.socket_drops).sum(),
        dropped: c.dropped() - c0.dropped(),
        handoffs: c.handoffs_out - c0.handoffs_out,
        late: c.reporter_late - c0.reporter_late,
        roce_invalid: c.roce_rx_invalid - c0.roce_rx_invalid,
        probes: snaps
            .iter()
            .flat_map(|s| s.qps.iter().map(|q| q.2.probes))
            .sum(),
        per_worker_rx: snaps.iter().map(|s| s.counters.rx_datagrams).collect(),
        sender_cpu,
        process_cpu,
        reasons: c
            .iter()
            .zip(c0.iter())
            .filter(|((i, v), (_, v0))| i.name.starts_with("drop_") && v > v0)
            .map(|((i, v), (_, v0))| format!("{}={}", i.name, v - v0))
            .collect::<Vec<_>>()
            .join(","),
    };
    let _ = t.shutdown();
    collector.shutdown();
    let _ = std::fs::remove_dir_all(&dir);
    Ok(out)
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let n: usize = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(400_000);
    let reporters: usize = args.get(2).and_then(|a| a.parse().ok()).unwrap_or(32);
    let rounds: usize = args.get(3).and_then(|a| a.parse().ok()).unwrap_or(3);
    // `ab`: only the two 2-worker report steerings, alternating which goes first.
    let ab = args.get(4).is_some_and(|a| a == "ab");
    let sc = Scenario::default();
    let trace = Trace::generate(&mut Generator::new(&sc), n).expect("trace");
    println!(
        "{n} reports (default mix), {reporters} reporters, {rounds} rounds; load {:?}",
        std::fs::read_to_string("/proc/loadavg")
            .unwrap_or_default()
            .trim()
    );
    println!("config                       | M rep/s wall | worker CPU s          | dispatch s | rnic s | sender s | process s | translator ns/rep | sock drops | dropped | handoffs | late | roce invalid | probes | rx per worker");
    for round in 0..rounds {
        let all = [
            (1, ReportSteering::Reuseport, RoceSteering::PortPerWorker),
            (2, ReportSteering::Reuseport, RoceSteering::PortPerWorker),
            (2, ReportSteering::Dispatcher, RoceSteering::PortPerWorker),
            (2, ReportSteering::Reuseport, RoceSteering::Qpn),
        ];
        // `only:I`: configuration I of the four alone (e.g. for profiling).
        let only: Option<usize> = args
            .get(4)
            .and_then(|a| a.strip_prefix("only:"))
            .and_then(|i| i.parse().ok());
        let configs: Vec<_> = match (ab, round % 2) {
            _ if only.is_some() => vec![all[only.unwrap_or(0).min(3)]],
            (false, _) => all.to_vec(),
            (true, 0) => vec![all[1], all[2]],
            (true, _) => vec![all[2], all[1]],
        };
        for (workers, steering, roce) in configs {
            match run(&sc, &trace, workers, steering, roce, reporters) {
                Ok(o) => {
                    let tcpu: f64 = o.worker_cpu.iter().sum::<f64>() + o.dispatch_cpu;
                    println!(
                        "r{round} {workers}w {:<23} | {:>12.3} | {:<21} | {:>10.3} | {:>6.3} | {:>8.3} | {:>9.3} | {:>17.0} | {:>10} | {:>7} | {:>8} | {:>4} | {:>12} | {:>6} | {:?} {}",
                        format!("{steering:?}/{roce:?}"),
                        o.reports as f64 / o.secs / 1e6,
                        o.worker_cpu
                            .iter()
                            .map(|c| format!("{c:.3}"))
                            .collect::<Vec<_>>()
                            .join(" + "),
                        o.dispatch_cpu,
                        o.rnic_cpu,
                        o.sender_cpu,
                        o.process_cpu,
                        tcpu * 1e9 / o.reports.max(1) as f64,
                        o.socket_drops,
                        o.dropped,
                        o.handoffs,
                        o.late,
                        o.roce_invalid,
                        o.probes,
                        o.per_worker_rx,
                        o.reasons,
                    );
                }
                Err(e) => println!("r{round} {workers}w {steering:?}/{roce:?}: {e}"),
            }
        }
    }
}
