//! `dta-collector`: host DTA stores behind the embedded software RNIC and answer queries.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use serde_json::Value;

use dta_collector::client;
use dta_collector::{Collector, CollectorConfig};

/// The DTA collector: hosts the memory DTA reports are written into (Key-Write, Key-Increment,
/// Append and Postcarding stores) behind an RDMA NIC, and answers queries from that memory.
///
/// Without an RDMA NIC it runs the embedded software RNIC, a strict RoCEv2 responder on a UDP
/// socket (port 4791 by default), or, with `[rnic] backend = "af_xdp"` or `"dpdk"` (builds
/// with the cargo features of the same names), on an AF_XDP socket or a DPDK port configured
/// in `[af_xdp]` / `[dpdk]` as for the translator. Logging is controlled with RUST_LOG
/// (default: info).
///
/// `query`, `tail`, `stats` and `epoch` talk to a running collector's HTTP control API.
/// Keys are hex (`0a000001`) or an IPv4 5-tuple (`10.0.0.1:8080-10.0.0.2:80/udp`).
#[derive(Parser, Debug)]
#[command(version, about, long_about)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

/// Where the running collector's control API is.
#[derive(Args, Debug, Clone)]
struct Control {
    /// Control API address (ip:port).
    #[arg(long, value_name = "ADDR", env = "DTA_CONTROL")]
    control: Option<String>,
    /// Take the control address from this configuration file ([collector] control).
    #[arg(short, long, value_name = "FILE")]
    config: Option<PathBuf>,
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
    /// Check a configuration file and print the stores it would create, with their memory.
    Check {
        /// Configuration file (TOML).
        #[arg(short, long, value_name = "FILE")]
        config: PathBuf,
    },
    /// Query a store of a running collector.
    Query {
        #[command(subcommand)]
        what: QueryCmd,
    },
    /// Print an Append list's entries as JSON Lines.
    Tail {
        /// Global list ID.
        list: u32,
        /// Append store (default: the one holding the list).
        #[arg(long)]
        store: Option<String>,
        /// Keep polling for new entries.
        #[arg(short, long)]
        follow: bool,
        /// First batch: a sequence number, `oldest` or `newest`.
        #[arg(long, default_value = "oldest")]
        from: String,
        /// Poll interval with --follow, in milliseconds.
        #[arg(long, default_value_t = 200)]
        interval_ms: u64,
        #[command(flatten)]
        control: Control,
    },
    /// Print the running collector's counters and stores (JSON).
    Stats {
        #[command(flatten)]
        control: Control,
    },
    /// Reset a Key-Increment store's counters (start a new epoch).
    Epoch {
        /// Store name.
        store: String,
        #[command(flatten)]
        control: Control,
    },
}

#[derive(Subcommand, Debug)]
enum QueryCmd {
    /// Key-Write: the plurality value (or consensus with --threshold).
    Keywrite {
        /// Key (hex or 5-tuple).
        key: String,
        /// Store (default: the only Key-Write store).
        #[arg(long)]
        store: Option<String>,
        /// Replicas to read (default: the collector's max_redundancy).
        #[arg(short)]
        n: Option<u8>,
        /// Require this many agreeing slots.
        #[arg(long)]
        threshold: Option<u8>,
        #[command(flatten)]
        control: Control,
    },
    /// Postcarding: the flow's path.
    Path {
        /// Flow (hex or 5-tuple).
        flow: String,
        /// Store (default: the only Postcarding store).
        #[arg(long)]
        store: Option<String>,
        /// Chunks to read (default: the store's redundancy).
        #[arg(short)]
        n: Option<u8>,
        /// Require this many agreeing valid chunks.
        #[arg(long)]
        copies: Option<u8>,
        #[command(flatten)]
        control: Control,
    },
    /// Key-Increment: the count-min estimate.
    Counter {
        /// Key (hex or 5-tuple).
        key: String,
        /// Store (default: the only Key-Increment store).
        #[arg(long)]
        store: Option<String>,
        /// Counters to read (default: the collector's max_redundancy).
        #[arg(short)]
        n: Option<u8>,
        #[command(flatten)]
        control: Control,
    },
}

fn main() {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("info")).init();
    let cli = Cli::parse();
    let r = match cli.cmd {
        Cmd::Check { config } => check(&config),
        Cmd::Run { config, progress } => run(&config, progress),
        Cmd::Query { what } => query(what),
        Cmd::Tail {
            list,
            store,
            follow,
            from,
            interval_ms,
            control,
        } => tail(&control, list, store, follow, &from, interval_ms),
        Cmd::Stats { control } => control_addr(&control).and_then(|a| {
            let s = get_json(&a, "/stats")?;
            let st = get_json(&a, "/stores")?;
            println!(
                "{}",
                serde_json::to_string_pretty(&serde_json::json!({ "stats": s, "stores": st }))
                    .expect("json")
            );
            Ok(())
        }),
        Cmd::Epoch { store, control } => control_addr(&control).and_then(|a| {
            let r = client::request(&a, "POST", &format!("/epoch/{}", enc(&store)))?;
            print_answer(r)
        }),
    };
    if let Err(e) = r {
        eprintln!("dta-collector: {e}");
        std::process::exit(1);
    }
}

fn check(config: &std::path::Path) -> Result<(), String> {
    let cfg = load(config);
    println!(
        "{:<16} {:<13} {:>14} {:>14}",
        "store", "kind", "region bytes", "memory bytes"
    );
    // Regions go on hugepages only when some are reserved; otherwise on 4 KiB pages.
    let reserved = std::fs::read_to_string("/proc/sys/vm/nr_hugepages")
        .ok()
        .and_then(|s| s.trim().parse::<u64>().ok())
        .unwrap_or(0);
    let page = if cfg.collector.hugepages && cfg.collector.persist_dir.is_none() && reserved > 0 {
        dta_collector::memory::HUGE_PAGE as u64
    } else {
        4096
    };
    let mut total = 0;
    for s in &cfg.stores {
        let (k, len) = dta_collector::store::layout_of(s)?;
        let mem = len.div_ceil(page) * page;
        total += mem;
        println!("{:<16} {:<13} {:>14} {:>14}", s.name, k.name(), len, mem);
    }
    println!(
        "total memory {total} bytes ({} pages of {page} bytes)",
        total / page
    );
    if cfg.collector.backend == dta_collector::config::Backend::Software {
        let io = &cfg.collector.rnic;
        let on = match io.backend {
            dta_collector::config::RnicBackend::Udp => String::new(),
            dta_collector::config::RnicBackend::AfXdp => {
                format!(" on {} queue {}", io.af_xdp.interface, io.af_xdp.queue)
            }
            dta_collector::config::RnicBackend::Dpdk => {
                format!(" on DPDK port {:?}", io.dpdk.ports.first())
            }
        };
        println!(
            "software RNIC at {} through the {} backend{on}",
            cfg.collector.roce,
            io.backend.name()
        );
    }
    Ok(())
}

fn run(config: &std::path::Path, progress: u64) -> Result<(), String> {
    let cfg = load(config);
    let c = Collector::start(cfg)?;
    for s in &c.stores {
        log::info!(
            "store {:?}: {} bytes of memory ({})",
            s.name(),
            s.memory_bytes(),
            s.region.backing()
        );
    }
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
    Ok(())
}

fn load(path: &std::path::Path) -> CollectorConfig {
    CollectorConfig::load(path).unwrap_or_else(|e| {
        eprintln!("dta-collector: {e}");
        std::process::exit(2);
    })
}

fn control_addr(c: &Control) -> Result<String, String> {
    if let Some(a) = &c.control {
        return Ok(a.clone());
    }
    if let Some(p) = &c.config {
        let cfg = CollectorConfig::load(p)?;
        return cfg.collector.control.map(|a| a.to_string()).ok_or_else(|| {
            format!(
                "{}: no [collector] control address; pass --control",
                p.display()
            )
        });
    }
    Err("where is the collector? pass --control ADDR or -c FILE (or set DTA_CONTROL)".into())
}

/// Percent-encodes a path segment (keys keep `:`, `-`, `.`; `/` becomes `%2F`).
fn enc(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b':' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

fn get_json(addr: &str, path: &str) -> Result<Value, String> {
    let r = client::request(addr, "GET", path)?;
    let v: Value = serde_json::from_str(&r.body)
        .map_err(|e| format!("GET {path}: bad JSON ({e}): {}", r.body.trim()))?;
    if r.status != 200 {
        return Err(format!(
            "GET {path}: {}",
            v["error"].as_str().unwrap_or(r.body.trim())
        ));
    }
    Ok(v)
}

fn print_answer(r: client::Response) -> Result<(), String> {
    if r.status != 200 {
        let v: Value = serde_json::from_str(&r.body).unwrap_or(Value::Null);
        return Err(v["error"].as_str().unwrap_or(r.body.trim()).to_string());
    }
    print!("{}", r.body);
    Ok(())
}

/// The store named `want`, or the only store of `kind`.
fn pick_store(addr: &str, want: Option<String>, kind: &str) -> Result<String, String> {
    if let Some(s) = want {
        return Ok(s);
    }
    let stores = get_json(addr, "/stores")?;
    let names: Vec<&str> = stores
        .as_array()
        .into_iter()
        .flatten()
        .filter(|s| s["kind"] == kind)
        .filter_map(|s| s["name"].as_str())
        .collect();
    match names.as_slice() {
        [one] => Ok(one.to_string()),
        [] => Err(format!("the collector has no {kind} store")),
        many => Err(format!(
            "several {kind} stores ({}); pick one with --store",
            many.join(", ")
        )),
    }
}

fn query(q: QueryCmd) -> Result<(), String> {
    let (kind, path_kind, key, store, control, params) = match q {
        QueryCmd::Keywrite {
            key,
            store,
            n,
            threshold,
            control,
        } => {
            let mut p = Vec::new();
            if let Some(n) = n {
                p.push(format!("n={n}"));
            }
            if let Some(t) = threshold {
                p.push(format!("threshold={t}"));
            }
            ("keywrite", "keywrite", key, store, control, p)
        }
        QueryCmd::Path {
            flow,
            store,
            n,
            copies,
            control,
        } => {
            let mut p = Vec::new();
            if let Some(n) = n {
                p.push(format!("n={n}"));
            }
            if let Some(c) = copies {
                p.push(format!("copies={c}"));
            }
            ("postcard", "path", flow, store, control, p)
        }
        QueryCmd::Counter {
            key,
            store,
            n,
            control,
        } => {
            let p = n.map(|n| vec![format!("n={n}")]).unwrap_or_default();
            ("keyincrement", "counter", key, store, control, p)
        }
    };
    dta_collector::query::keys::parse_key(&key)?;
    let addr = control_addr(&control)?;
    let store = pick_store(&addr, store, kind)?;
    let mut path = format!("/query/{path_kind}/{}/{}", enc(&store), enc(&key));
    if !params.is_empty() {
        path.push('?');
        path.push_str(&params.join("&"));
    }
    print_answer(client::request(&addr, "GET", &path)?)
}

fn tail(
    control: &Control,
    list: u32,
    store: Option<String>,
    follow: bool,
    from: &str,
    interval_ms: u64,
) -> Result<(), String> {
    let addr = control_addr(control)?;
    let store = match store {
        Some(s) => s,
        None => {
            let stores = get_json(&addr, "/stores")?;
            stores
                .as_array()
                .into_iter()
                .flatten()
                .find(|s| {
                    let first = s["meta"]["first_list"].as_u64().unwrap_or(0);
                    let lists = s["meta"]["lists"].as_u64().unwrap_or(0);
                    s["kind"] == "append" && (first..first + lists).contains(&(list as u64))
                })
                .and_then(|s| s["name"].as_str().map(String::from))
                .ok_or_else(|| format!("no Append store holds list {list}"))?
        }
    };
    let mut from = from.to_string();
    let mut lost_total = 0u64;
    loop {
        let r = client::request(
            &addr,
            "GET",
            &format!("/tail/{}/{list}?from={}", enc(&store), enc(&from)),
        )?;
        let next = r.header("x-dta-next-seq").map(String::from);
        let lost: u64 = r
            .header("x-dta-lost-batches")
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        let empty = r.body.is_empty();
        print_answer(r)?;
        if lost > 0 {
            lost_total += lost;
            eprintln!("dta-collector: lost {lost} batches to overruns ({lost_total} so far)");
        }
        if let Some(n) = next {
            from = n;
        }
        if !follow {
            return Ok(());
        }
        if empty {
            std::thread::sleep(Duration::from_millis(interval_ms));
        }
    }
}
