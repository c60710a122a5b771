//! `dta replay`: a pcap through the translator in memory and/or over kernel UDP, or through
//! each I/O backend next to a bare receive loop (`--backend`), with the results printed and
//! written as JSON.

use std::path::PathBuf;

use crate::cli::{BackendArg, CollectorRx, ReplayPath, ScenarioArgs};
use dta_bench::figures;
use dta_bench::gen::Scenario;
use dta_bench::replay::{replay_memory, replay_udp, MemOptions, RnicMode, UdpReplayOptions};
use dta_bench::trace::Trace;

#[allow(clippy::too_many_arguments)]
pub(crate) fn replay_cmd(
    args: &ScenarioArgs,
    pcap: &PathBuf,
    path: ReplayPath,
    workers: Vec<usize>,
    loops: u32,
    no_rnic: bool,
    port: Option<u16>,
    rate: u64,
    out: Option<PathBuf>,
) -> Result<(), String> {
    let side = PathBuf::from(format!("{}.json", pcap.display()));
    let side_text = std::fs::read_to_string(&side).ok();
    let sc: Scenario = match &side_text {
        Some(s) => serde_json::from_str(s).map_err(|e| format!("{}: {e}", side.display()))?,
        None => args.scenario()?,
    };
    // `dta gen --traffic` leaves the ground truth beside the scenario.
    let traffic = match &side_text {
        Some(s)
            if serde_json::from_str::<serde_json::Value>(s)
                .is_ok_and(|v| v.get("traffic").is_some()) =>
        {
            Some(
                serde_json::from_str::<dta_bench::traffic::TrafficFile>(s)
                    .map_err(|e| format!("{}: traffic: {e}", side.display()))?,
            )
        }
        _ => None,
    };
    // A Telemetry Report capture: keep the datagrams to the INT port (unless --port says).
    let port = match port {
        Some(dta_proto::consts::DTA_PORT) if sc.telemetry != 0 => Some(sc.int_port),
        p => p,
    };
    let t = Trace::read_pcap_to(pcap, port)?;
    eprintln!(
        "dta replay: {} reports from {} ({} frames skipped), profile {}",
        t.len(),
        pcap.display(),
        t.skipped,
        sc.profile
    );
    let workers = if sc.sketch.is_some() && workers.iter().any(|&w| w != 1) {
        eprintln!("  (Sketch-Merge stores are merged by one translator worker: --workers 1)");
        vec![1]
    } else {
        workers
    };
    let mut results = Vec::new();
    if path != ReplayPath::Udp {
        for &w in &workers {
            let r = replay_memory(
                &sc,
                &t,
                &MemOptions {
                    workers: w,
                    loops,
                    rnic: if no_rnic {
                        RnicMode::Off
                    } else {
                        RnicMode::Inline
                    },
                    ..MemOptions::default()
                },
            )?;
            print_result(&r);
            results.push(r);
        }
    }
    if path != ReplayPath::Memory {
        let r = replay_udp(
            &sc,
            &t,
            &UdpReplayOptions {
                loops,
                rate,
                ..UdpReplayOptions::default()
            },
        )?;
        print_result(&r);
        results.push(r);
    }
    let check = match &traffic {
        Some(f) => {
            let c = dta_bench::traffic::check::check(f, &t)?;
            eprintln!(
                "  ground truth (in memory, 1 worker): Key-Write paths {}, flow counters exact \
                 {}, postcard paths {}, loss events {}, congestion events {}, sketch epochs \
                 {}; {} reports dropped, {} unexpected Append entries",
                c.paths,
                c.counters,
                c.postcards,
                c.losses,
                c.congestion,
                c.sketch_epochs,
                c.dropped,
                c.unexpected_entries
            );
            for (e, flows, est) in &c.distinct_flows {
                eprintln!("    epoch {e}: {flows} flows, merged HyperLogLog estimate {est:.1}");
            }
            Some(c)
        }
        None => None,
    };
    if let Some(o) = out {
        let v = serde_json::json!({"pcap": pcap, "scenario": sc, "machine": figures::machine(), "results": results, "check": check});
        std::fs::write(
            &o,
            serde_json::to_string_pretty(&v).map_err(|e| e.to_string())?,
        )
        .map_err(|e| format!("{}: {e}", o.display()))?;
    }
    if let Some(c) = check.filter(|c| !c.passed()) {
        return Err(format!(
            "the stores differ from the ground truth: {}; translator drops {:?}",
            c.mismatches.join("; "),
            c.drop_reasons
        ));
    }
    Ok(())
}

#[allow(clippy::too_many_arguments)]
pub(crate) fn backend_cmd(
    args: &ScenarioArgs,
    pcap: &PathBuf,
    backends: &[BackendArg],
    loops: u32,
    port: Option<u16>,
    rate: u64,
    (prefill, rounds): (u64, u32),
    collector_rx: CollectorRx,
    out: Option<&std::path::Path>,
) -> Result<(), String> {
    use dta_bench::backend_replay::{self as br, CompareOptions};
    let prefilled = if prefill > 0 {
        Some((
            br::Freezer::new("replay")?,
            br::Prefill {
                packets: prefill,
                warmup: 2000,
                rounds,
            },
        ))
    } else {
        None
    };
    let side = PathBuf::from(format!("{}.json", pcap.display()));
    let sc: Scenario = match std::fs::read_to_string(&side) {
        Ok(s) => serde_json::from_str(&s).map_err(|e| format!("{}: {e}", side.display()))?,
        Err(_) => args.scenario()?,
    };
    let t = Trace::read_pcap_to(pcap, port)?;
    eprintln!("dta replay: {} reports from {}", t.len(), pcap.display());
    let o = CompareOptions {
        loops,
        rate,
        ..CompareOptions::default()
    };
    let mut results = Vec::new();
    let mut memory = Vec::new();
    #[allow(unused_mut, unused_variables)]
    let mut net: Option<dta_io::netns::Netns> = None;
    let rx_thread = collector_rx == CollectorRx::Thread;
    #[allow(dead_code)]
    fn netns(
        net: &mut Option<dta_io::netns::Netns>,
        rx_thread: bool,
    ) -> Result<&dta_io::netns::Netns, String> {
        if net.is_none() {
            *net = Some(dta_io::netns::Netns::up("dtr", rx_thread)?);
        }
        Ok(net.as_ref().expect("just set"))
    }
    // DPDK before AF_XDP: a net_af_packet port opened after an AF_XDP socket was attached to
    // and removed from the same veth received nothing here.
    let mut order = backends.to_vec();
    order.sort_by_key(|b| match b {
        BackendArg::Memory => 0,
        BackendArg::Pcap => 1,
        BackendArg::Udp => 2,
        BackendArg::Dpdk => 3,
        BackendArg::AfXdp => 4,
    });
    order.dedup();
    for b in &order {
        let r = match b {
            BackendArg::Memory => {
                let r = replay_memory(
                    &sc,
                    &t,
                    &MemOptions {
                        workers: 1,
                        loops,
                        ..MemOptions::default()
                    },
                )?;
                print_result(&r);
                memory.push(r);
                continue;
            }
            BackendArg::Udp => match &prefilled {
                Some((f, p)) if rx_thread => {
                    br::compare_udp_netns_prefilled(netns(&mut net, rx_thread)?, &sc, &t, *p, f)
                }
                Some((f, p)) => br::compare_udp_prefilled(&sc, &t, *p, f),
                None => br::compare_udp(&sc, &t, &o),
            },
            BackendArg::Pcap => br::compare_pcap(&sc, &t, &o),
            BackendArg::AfXdp => {
                #[cfg(feature = "af_xdp")]
                match &prefilled {
                    Some((f, p)) => {
                        br::compare_af_xdp_prefilled(netns(&mut net, rx_thread)?, &sc, &t, *p, f)
                    }
                    None => br::compare_af_xdp(netns(&mut net, rx_thread)?, &sc, &t, &o),
                }
                #[cfg(not(feature = "af_xdp"))]
                Err("af_xdp is not compiled in: build dta with --features af_xdp".to_string())
            }
            BackendArg::Dpdk => {
                #[cfg(feature = "dpdk")]
                {
                    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
                    match &prefilled {
                        Some((f, p)) => br::compare_dpdk_prefilled(
                            &exe,
                            netns(&mut net, rx_thread)?,
                            &sc,
                            &t,
                            *p,
                            f,
                        ),
                        None => br::compare_dpdk(&exe, netns(&mut net, rx_thread)?, &sc, &t, &o),
                    }
                }
                #[cfg(not(feature = "dpdk"))]
                Err("dpdk is not compiled in: build dta with --features dpdk".to_string())
            }
        };
        match r {
            Ok(c) => {
                println!("{}", c.line());
                results.push(c);
            }
            Err(e) => eprintln!("dta replay --backend {b:?}: {e}"),
        }
    }
    if let Some(o) = out {
        let v = serde_json::json!({"pcap": pcap, "scenario": sc, "machine": figures::machine(),
            "comparisons": results, "memory": memory});
        std::fs::write(
            o,
            serde_json::to_string_pretty(&v).map_err(|e| e.to_string())?,
        )
        .map_err(|e| format!("{}: {e}", o.display()))?;
    }
    Ok(())
}

pub(crate) fn print_result(r: &dta_bench::replay::ReplayResult) {
    println!(
        "{:>6} x{}: {:>10} reports in {:.3} s = {:>6.2} M reports/s, {:>6.2} M frames/s, {:.3} frames/report, {:.1} B/report, dropped {}, RNIC errors {}, socket drops {}",
        r.path, r.workers, r.reports, r.secs, r.reports_per_sec / 1e6, r.frames_per_sec / 1e6,
        r.frames_per_report, r.bytes_per_report, r.dropped, r.rnic_errors, r.socket_drops
    );
    if !r.drop_reasons.is_empty() {
        println!("         drops: {:?}", r.drop_reasons);
    }
    if r.int_datagrams > 0 {
        println!(
            "         INT: {} datagrams, {} reports (v1 {}, v2 {}), {} DTA reports derived, {} not read {:?}, sequence gaps {} ({} missing)",
            r.int_datagrams, r.int_reports_v1 + r.int_reports_v2, r.int_reports_v1,
            r.int_reports_v2, r.int_derived, r.int_dropped, r.int_drop_reasons, r.int_seq_gaps,
            r.int_seq_missing
        );
    }
    if let Some(l) = r.latency {
        println!(
            "         latency ns: p50 {} p90 {} p99 {} p99.9 {} max {}",
            l.p50_ns, l.p90_ns, l.p99_ns, l.p999_ns, l.max_ns
        );
    }
    println!(
        "         CPU {:.3} s (workers {:.3} s{}), peak RSS {} KiB",
        r.cpu_secs,
        r.worker_cpu_secs,
        r.rnic_cpu_secs
            .map(|s| format!(", software RNIC {s:.3} s"))
            .unwrap_or_default(),
        r.peak_rss_kib
    );
}
