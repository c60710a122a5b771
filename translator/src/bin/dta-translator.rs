//! `dta-translator`: run the software DTA translator.

use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;

use dta_translator::{Translator, TranslatorConfig};

/// The DTA software translator: receives DTA telemetry reports (UDP 40040) and turns them into
/// RoCEv2 RDMA writes into collector memory.
///
/// Every tunable lives in the TOML configuration file (see `translator/translator.example.toml`
/// for each option with its default and meaning). Logging is controlled with RUST_LOG
/// (e.g. RUST_LOG=info).
///
/// Packet I/O is chosen by `translator.backend`: "udp" (kernel sockets, default), "af_xdp"
/// (section [af_xdp]; cargo feature `af_xdp`), "dpdk" ([dpdk]; feature `dpdk`) or "pcap"
/// (replay [pcap] input files, write what is sent to [pcap] output). `translator.capture`
/// writes every transmitted frame to a pcap file with any backend; `dta pcap-check FILE`
/// verifies the ICRCs.
#[derive(Parser, Debug)]
#[command(version, about, long_about)]
struct Cli {
    /// Configuration file (TOML).
    #[arg(short, long, value_name = "FILE")]
    config: PathBuf,
    /// Join the collector cluster this file describes (collectors, and how keys, Append lists
    /// and sketches are partitioned among them, epoch by epoch): replaces `cluster` in the
    /// configuration, which must then have no [[collector]] of its own. The file is re-read
    /// while running; the workers switch routes when a new epoch starts.
    #[arg(long, value_name = "FILE")]
    cluster: Option<PathBuf>,
    /// Override `translator.workers`.
    #[arg(long)]
    workers: Option<usize>,
    /// Override `translator.report_steering`: how reports reach several workers over kernel
    /// UDP. "reuseport": one SO_REUSEPORT socket per worker, the kernel hashes each reporter's
    /// 4-tuple to one worker. "dispatcher": one socket read by a dispatcher thread that copies
    /// each report to a worker chosen by a hash of its source address (an extra thread and a
    /// copy per report; all receiving on one thread). "auto" (default): dispatcher for 2 or 3
    /// workers (cheaper per report here), reuseport for more (one dispatcher thread feeds about
    /// three workers). Measurements: translator/README.md.
    #[arg(long, value_name = "auto|reuseport|dispatcher")]
    report_steering: Option<String>,
    /// Override `translator.roce_steering`: how RoCEv2 answers reach the worker owning their
    /// QP. "qpn": all workers share `roce` (SO_REUSEPORT) and a classic BPF program picks the
    /// worker from the BTH destination QP (QPNs are allocated with qpn % workers == worker);
    /// needed with real RNICs, which answer to UDP 4791. "port-per-worker": worker w uses
    /// port roce.port + w (software-RNIC static peers). "auto" (default): "qpn" when roce
    /// uses port 4791 and workers > 1.
    #[arg(long, value_name = "auto|qpn|port-per-worker")]
    roce_steering: Option<String>,
    /// Print the effective configuration and exit.
    #[arg(long)]
    print_config: bool,
    /// Connect every store (RDMA_CM or static metadata) on behalf of a hardware (Tofino)
    /// translator, write the connections as JSON (to the --emit-connections file, or stdout),
    /// and exit without starting workers. The QPs stay connected.
    #[arg(long)]
    control_only: bool,
    /// Where --control-only writes its JSON ("-" = stdout). The file holds every store's
    /// address, R_Key, QPNs and PSNs: it is created anew, readable by its owner only (0600).
    #[arg(long, value_name = "FILE", default_value = "-")]
    emit_connections: String,
    /// Seconds between progress lines on stderr (0 = none).
    #[arg(long, default_value_t = 10)]
    progress: u64,
}

fn main() {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("info")).init();
    let cli = Cli::parse();
    let mut cfg = match TranslatorConfig::load_member(&cli.config, cli.cluster.as_deref()) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("dta-translator: {e}");
            std::process::exit(2);
        }
    };
    if let Some(w) = cli.workers {
        cfg.translator.workers = w;
    }
    if let Some(v) = &cli.report_steering {
        match serde_json::from_value(serde_json::Value::String(v.clone())) {
            Ok(x) => cfg.translator.report_steering = x,
            Err(_) => {
                eprintln!(
                    "dta-translator: --report-steering must be auto, reuseport or dispatcher"
                );
                std::process::exit(2);
            }
        }
    }
    if let Some(v) = &cli.roce_steering {
        match serde_json::from_value(serde_json::Value::String(v.clone())) {
            Ok(x) => cfg.translator.roce_steering = x,
            Err(_) => {
                eprintln!("dta-translator: --roce-steering must be auto, qpn or port-per-worker");
                std::process::exit(2);
            }
        }
    }
    if cli.print_config {
        println!(
            "{}",
            toml::to_string_pretty(&cfg).expect("config serialises")
        );
        return;
    }
    if cli.control_only {
        match dta_translator::driver::control_only(&cfg) {
            Ok(v) => {
                let s = serde_json::to_string_pretty(&v).expect("JSON serialises");
                if cli.emit_connections == "-" {
                    println!("{s}");
                } else if let Err(e) = dta_io::private_file::create(cli.emit_connections.as_ref())
                    .and_then(|mut f| std::io::Write::write_all(&mut f, s.as_bytes()))
                {
                    eprintln!("dta-translator: {}: {e}", cli.emit_connections);
                    std::process::exit(1);
                }
                return;
            }
            Err(e) => {
                eprintln!("dta-translator: {e}");
                std::process::exit(1);
            }
        }
    }
    let t = match Translator::start(cfg) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("dta-translator: {e}");
            std::process::exit(1);
        }
    };
    let stop = dta_io::signal::install_stop_flag();
    let mut last = std::time::Instant::now();
    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
        std::thread::sleep(Duration::from_millis(100));
        if cli.progress > 0 && last.elapsed() >= Duration::from_secs(cli.progress) {
            last = std::time::Instant::now();
            let c = t.counters();
            log::info!(
                "reports {} translated {} dropped {} frames {} nacks {}",
                c.reports(),
                c.translated,
                c.dropped(),
                c.frames,
                c.nacks_sent
            );
        }
    }
    log::info!("shutting down: flushing partial batches and postcard caches");
    let snaps = t.shutdown();
    let c = dta_translator::driver::WorkerSnapshot::total(&snaps);
    log::info!(
        "final: reports {} translated {} dropped {} frames {}",
        c.reports(),
        c.translated,
        c.dropped(),
        c.frames
    );
}
