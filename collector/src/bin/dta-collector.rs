//! `dta-collector`: host DTA stores behind the embedded software RNIC and answer queries.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Parser, Subcommand};

use dta_collector::{Collector, CollectorConfig};

/// The DTA collector: hosts the memory DTA reports are written into (Key-Write, Key-Increment,
/// Append and Postcarding stores) behind an RDMA NIC, and answers queries from that memory.
///
/// Without an RDMA NIC it runs the embedded software RNIC, a strict RoCEv2 responder on a UDP
/// socket (port 4791 by default). Logging is controlled with RUST_LOG (default: info).
#[derive(Parser, Debug)]
#[command(version, about, long_about)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// Run the collector until SIGINT/SIGTERM.
    Run {
        /// Configuration file (TOML); see collector/collector.example.toml.
        #[arg(short, long, value_name = "FILE")]
        config: PathBuf,
        /// Seconds between progress lines (0 = none).
        #[arg(long, default_value_t = 10)]
        progress: u64,
    },
    /// Check a configuration file and print the stores it would create.
    Check {
        /// Configuration file (TOML).
        #[arg(short, long, value_name = "FILE")]
        config: PathBuf,
    },
}

fn main() {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("info")).init();
    let cli = Cli::parse();
    match cli.cmd {
        Cmd::Check { config } => {
            let cfg = load(&config);
            for s in &cfg.stores {
                match dta_collector::store::layout_of(s) {
                    Ok((k, len)) => println!("{:<16} {:<13} {:>14} bytes", s.name, k.name(), len),
                    Err(e) => {
                        eprintln!("dta-collector: {e}");
                        std::process::exit(2);
                    }
                }
            }
        }
        Cmd::Run { config, progress } => {
            let cfg = load(&config);
            let c = match Collector::start(cfg) {
                Ok(c) => c,
                Err(e) => {
                    eprintln!("dta-collector: {e}");
                    std::process::exit(1);
                }
            };
            let stop = dta_io::signal::install_stop_flag();
            let mut last = std::time::Instant::now();
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(100));
                if progress > 0 && last.elapsed() >= Duration::from_secs(progress) {
                    last = std::time::Instant::now();
                    let k = c.counters();
                    log::info!(
                        "rcvd_pkts {} writes {} atomics {} naks {} bad_icrc {}",
                        k.rcvd_pkts,
                        k.writes,
                        k.atomics,
                        k.naks_sent,
                        k.bad_icrc
                    );
                }
            }
            log::info!("shutting down");
            c.shutdown();
        }
    }
}

fn load(path: &std::path::Path) -> CollectorConfig {
    CollectorConfig::load(path).unwrap_or_else(|e| {
        eprintln!("dta-collector: {e}");
        std::process::exit(2);
    })
}
