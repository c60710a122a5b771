//! `dta`: the DTA workbench. `dta demo` runs the whole system on loopback; `dta gen` writes
//! telemetry workloads to a UDP target or a pcap file; `dta replay` replays a pcap through the
//! translator; `dta bench` runs the sweeps behind the figures in `bench/README.md`.
//!
//! This file parses the command line and dispatches; the rooms around it: `cli` (the clap
//! argument structs, i.e. everything `--help` shows, and nothing that runs), `gen` (`dta gen`,
//! `dta gen-sketch`), `replay` (`dta replay`, with `--backend`) and `bench` (`dta bench
//! FIGURE`). The measuring itself lives in the `dta_bench` library; these modules only turn
//! arguments into its options and print what it returns.

mod bench;
mod cli;
mod gen;
mod replay;

use std::time::Duration;

use clap::Parser;

use dta_bench::demo::{self, DemoOptions};
use dta_bench::figures::FigOptions;

use bench::bench_cmd;
use cli::{Cli, Cmd, DbArg};
use gen::{gen_cmd, gen_sketch_cmd, gen_traffic_cmd};
use replay::{backend_cmd, replay_cmd};

fn main() {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn")).init();
    match Cli::parse().cmd {
        Cmd::P4Constants => print!("{}", dta_p4_constants::render()),
        #[allow(unused_variables)]
        Cmd::BareRxDpdk { ns, iface, idle_ms } => {
            #[cfg(feature = "dpdk")]
            match dta_bench::backend_replay::bare_rx_dpdk_child(
                &ns,
                &iface,
                Duration::from_millis(idle_ms),
            ) {
                Ok(s) => println!("{s}"),
                Err(e) => {
                    println!("ERROR {e}");
                    std::process::exit(1);
                }
            }
            #[cfg(not(feature = "dpdk"))]
            {
                println!("ERROR dpdk is not compiled in");
                std::process::exit(1);
            }
        }
        Cmd::PcapCheck {
            file,
            roce_port,
            json,
        } => match dta_bench::pcapcheck::check_file(&file, &roce_port) {
            Ok(c) => {
                if json {
                    println!(
                        "{}",
                        serde_json::to_string_pretty(&c).expect("JSON serialises")
                    );
                } else {
                    print!("{}: {}", file.display(), c.summary());
                }
                if !c.passed() {
                    std::process::exit(1);
                }
            }
            Err(e) => {
                eprintln!("dta pcap-check: {e}");
                std::process::exit(2);
            }
        },
        Cmd::Corpus { out } => match dta_conformance::write_corpus(&out) {
            Ok(n) => println!("wrote {n} cases to {}", out.display()),
            Err(e) => {
                eprintln!("dta corpus: {e}");
                std::process::exit(1);
            }
        },
        Cmd::ClusterDemo {
            cluster,
            translators,
            count,
            rate,
            lists,
            seed,
            settle_secs,
        } => {
            use dta_bench::cluster as cd;
            let r = dta_collector::cluster::load_cluster(&cluster).and_then(|c| {
                let client = dta_collector::cluster::ClusterClient::new(c);
                let truth = cd::drive(&cd::scenario(seed, lists), &translators, count, rate)?;
                let v = cd::verify_settled(
                    &client,
                    &truth,
                    None,
                    std::time::Duration::from_secs(settle_secs),
                )?;
                cd::print(&v, &truth);
                Ok(v.mismatches.is_empty())
            });
            match r {
                Ok(true) => println!("cluster-demo: every answer matches"),
                Ok(false) => {
                    eprintln!("dta cluster-demo: mismatches (above)");
                    std::process::exit(1);
                }
                Err(e) => {
                    eprintln!("dta cluster-demo: {e}");
                    std::process::exit(1);
                }
            }
        }
        Cmd::Demo {
            keywrite,
            append,
            lists,
            capacity,
            slots_log2,
            redundancy,
            batch,
            rate,
            seed,
        } => {
            let opts = DemoOptions {
                keywrite,
                append,
                lists,
                capacity,
                slots_log2,
                redundancy,
                batch,
                rate,
                seed,
                progress: true,
            };
            match demo::run(&opts) {
                Ok(r) => {
                    demo::print(&opts, &r);
                    if !demo::checks(&opts, &r).is_empty() {
                        std::process::exit(1);
                    }
                }
                Err(e) => {
                    eprintln!("dta demo: {e}");
                    std::process::exit(1);
                }
            }
        }
        Cmd::Gen {
            scenario,
            traffic,
            count,
            pcap,
            target,
            rate,
        } => {
            let r = scenario.scenario().and_then(|sc| match &traffic.traffic {
                Some(capture) => gen_traffic_cmd(&sc, capture, &traffic, pcap, target, rate),
                None => gen_cmd(&sc, count, pcap, target, rate),
            });
            if let Err(e) = r {
                eprintln!("dta gen: {e}");
                std::process::exit(1);
            }
        }
        Cmd::GenSketch {
            pcap,
            target,
            epochs,
            k,
            flows,
            cm_rows,
            cm_columns,
            hll_registers,
            columns_per_report,
            hash,
            seed,
            rate,
        } => {
            let r = gen_sketch_cmd(
                pcap,
                target,
                epochs,
                (k, flows, seed),
                (cm_rows, cm_columns, hll_registers, hash),
                columns_per_report,
                rate,
            );
            if let Err(e) = r {
                eprintln!("dta gen-sketch: {e}");
                std::process::exit(1);
            }
        }
        Cmd::Replay {
            pcap,
            scenario,
            path,
            workers,
            loops,
            no_rnic,
            port,
            rate,
            json,
            backend,
            prefill,
            rounds,
            collector_rx,
        } => {
            let port = (port != 0).then_some(port);
            if !backend.is_empty() {
                if let Err(e) = backend_cmd(
                    &scenario,
                    &pcap,
                    &backend,
                    loops,
                    port,
                    rate,
                    (prefill, rounds),
                    collector_rx,
                    json.as_deref(),
                ) {
                    eprintln!("dta replay: {e}");
                    std::process::exit(1);
                }
                return;
            }
            if let Err(e) = replay_cmd(
                &scenario, &pcap, path, workers, loops, no_rnic, port, rate, json,
            ) {
                eprintln!("dta replay: {e}");
                std::process::exit(1);
            }
        }
        Cmd::Ingest {
            db,
            server,
            listen,
            database,
            batch,
            flush_ms,
            profile,
        } => {
            use dta_bench::collectors::ingest::{self, Db, IngestOptions};
            let db = match db {
                DbArg::Redis => Db::Redis,
                DbArg::Clickhouse => Db::ClickHouse,
                DbArg::Influxdb => Db::InfluxDb,
            };
            let mut o = IngestOptions::new(db, &server, &database);
            if let Some(b) = batch {
                o.batch = b.max(1);
            }
            if let Some(ms) = flush_ms {
                o.flush = Duration::from_millis(ms);
            }
            o.parse = dta_bench::gen::Scenario {
                profile,
                ..Default::default()
            }
            .parse_config();
            match ingest::command(&o, listen) {
                Ok(st) => println!(
                    "DONE {}",
                    serde_json::to_string(&st).expect("stats serialise")
                ),
                Err(e) => {
                    println!("ERROR {e}");
                    eprintln!("dta ingest: {e}");
                    std::process::exit(1);
                }
            }
        }
        Cmd::Bench {
            figure,
            reports,
            loops,
            out,
            no_pin,
            profile,
            qps,
            agents,
            zi,
            servers,
        } => {
            let zi = dta_bench::interference::InterferenceOptions {
                secs: zi.secs,
                rounds: zi.rounds,
                monitors: zi.monitors,
                clients: zi.clients,
                pipeline: zi.pipeline,
                requests: zi.requests,
                monitored_core: zi.monitored_core,
                other_core: zi.other_core,
                interval_ms: zi.interval_ms,
                cpu_shares: zi.cpu_shares,
                work: zi.work,
                keep_work: zi.keep_work,
                bin_dir: zi.bin_dir,
                out: out.clone(),
                ..Default::default()
            };
            let o = FigOptions {
                reports,
                loops,
                out,
                pin: !no_pin,
                verbose: true,
            };
            if let Err(e) = bench_cmd(figure, &o, profile, &qps, &agents, &zi, &servers) {
                eprintln!("dta bench: {e}");
                std::process::exit(1);
            }
        }
    }
}
