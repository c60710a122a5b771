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

/// Where the running collector's control API is, and how to authenticate to it.
///
/// With `-c FILE` the address, the admin token file and the TLS certificate come from the
/// collector's configuration. Basic-auth credentials come from `DTA_BASIC_AUTH=user:password`
/// (never a command-line argument, which every user can see).
#[derive(Args, Debug, Clone)]
struct Control {
    /// Control API address (ip:port; `https://ip:port` for TLS).
    #[arg(long, value_name = "ADDR", env = "DTA_CONTROL")]
    control: Option<String>,
    /// Take the control address (and token file, TLS certificate) from this configuration
    /// file.
    #[arg(short, long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// File holding the admin bearer token (needed by `epoch`).
    #[arg(long, value_name = "FILE", env = "DTA_ADMIN_TOKEN_FILE")]
    token_file: Option<PathBuf>,
    /// Trust this certificate (PEM: a CA or the collector's own) for TLS.
    #[arg(long, value_name = "FILE", env = "DTA_CA_FILE")]
    ca_file: Option<PathBuf>,
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
        /// Poll interval with --follow, in milliseconds (at least 10: each poll is an HTTP
        /// request, and a list with nothing new is polled again only after this long).
        #[arg(long, default_value_t = 200, value_parser = clap::value_parser!(u64).range(MIN_INTERVAL_MS..))]
        interval_ms: u64,
        #[command(flatten)]
        control: Control,
    },
    /// Print the running collector's counters and stores (JSON).
    Stats {
        #[command(flatten)]
        control: Control,
    },
    /// A collector cluster as one system (the cluster file: collectors, and which one holds
    /// each key, Append list and sketch, epoch by epoch).
    Cluster {
        #[command(subcommand)]
        what: ClusterCmd,
    },
    /// Stream Append entries and periodic snapshots into ClickHouse (`[export.clickhouse]`).
    ///
    /// Runs until SIGINT/SIGTERM, next to (or far from) a running collector whose control API
    /// it reads, never its memory or its RNIC: every entry of every sequenced Append list
    /// goes to the table `append_entries` exactly once, across restarts of the exporter,
    /// of ClickHouse and of the collector; every `snapshot_secs` the active keys' counters,
    /// Key-Write answers and sketch estimates go to the `*_snapshots` tables. ClickHouse
    /// errors are retried with exponential back-off; the cursor lives in `state_file`.
    /// The tables are in collector/clickhouse/schema.sql (created at start unless
    /// `create_tables = false`); collector/README.md explains the exactly-once argument.
    Export {
        /// Check the configuration and ClickHouse (credentials, tables, cursors) and exit.
        #[arg(long)]
        check: bool,
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
enum ClusterCmd {
    /// Check a cluster file and print its partitioning (JSON: collectors, and per epoch the
    /// key slot table, list ranges and sketch owners), the plan translators and the P4
    /// control plane route by.
    Check {
        /// Cluster file (TOML); see examples/cluster/cluster.toml.
        #[arg(long, value_name = "FILE", env = "DTA_CLUSTER")]
        cluster: PathBuf,
    },
    /// Query keys across the cluster: each key goes to the collector holding it (one bulk
    /// request per collector, in parallel); one JSON line per key, in order, naming the
    /// collector and cluster epoch that answered.
    Query {
        /// keywrite, counter or path.
        #[arg(value_parser = ["keywrite", "counter", "path"])]
        kind: String,
        /// Keys (hex or 5-tuple).
        #[arg(required_unless_present = "keys_file")]
        keys: Vec<String>,
        /// Read the keys from this file (`-`: standard input): one per line or a JSON array.
        #[arg(long, value_name = "FILE", conflicts_with = "keys")]
        keys_file: Option<PathBuf>,
        /// Ask only this cluster epoch's owners (default: the newest epoch's, falling back to
        /// older epochs' owners for keys they do not have; counters add every owner's).
        #[arg(long)]
        epoch: Option<u32>,
        /// Replicas to read (passed on to the collectors).
        #[arg(short, value_parser = clap::value_parser!(u8).range(1..=8))]
        n: Option<u8>,
        /// Cluster file.
        #[arg(long, value_name = "FILE", env = "DTA_CLUSTER")]
        cluster: PathBuf,
    },
    /// Print an Append list's entries from every collector that held it, oldest epoch first.
    Tail {
        /// Global list ID.
        list: u32,
        /// Only this cluster epoch's owner.
        #[arg(long)]
        epoch: Option<u32>,
        /// Cluster file.
        #[arg(long, value_name = "FILE", env = "DTA_CLUSTER")]
        cluster: PathBuf,
    },
    /// Serve the single collector's query API (/query, /tail, /query/sketch) answered from
    /// the cluster, with /cluster, /stores, /stats and /metrics, until SIGINT/SIGTERM. The
    /// cluster file is re-read when it changes.
    Serve {
        /// Cluster file.
        #[arg(long, value_name = "FILE", env = "DTA_CLUSTER")]
        cluster: PathBuf,
        /// Address to listen on.
        #[arg(long, default_value = "127.0.0.1:14790")]
        listen: std::net::SocketAddr,
    },
}

/// Shortest `tail --follow --interval-ms`.
const MIN_INTERVAL_MS: u64 = 10;

/// How a query reads the store, and which keys it asks about.
#[derive(Args, Debug, Clone)]
struct QueryOpts {
    /// Read the keys from this file instead (`-`: standard input): one key per line (blank
    /// lines and `#` comments skipped) or a JSON array of strings. One request answers all of
    /// them, one JSON line per key, in order.
    #[arg(long, value_name = "FILE", conflicts_with = "key")]
    keys_file: Option<PathBuf>,
    /// Store (default: the only store of the kind).
    #[arg(long)]
    store: Option<String>,
    /// Replicas to read, 1..=8. Default and only accepted value: the store's own redundancy
    /// N; another N needs --force.
    #[arg(short, value_parser = clap::value_parser!(u8).range(1..=8))]
    n: Option<u8>,
    /// Read -n replicas even though the store is written with another N (the answer says
    /// "forced": true; a counter read with more than the store's N can be 0).
    #[arg(long, requires = "n")]
    force: bool,
    #[command(flatten)]
    control: Control,
}

#[derive(Subcommand, Debug)]
enum QueryCmd {
    /// Key-Write: the plurality value (or consensus with --threshold).
    Keywrite {
        /// Key (hex or 5-tuple).
        #[arg(required_unless_present = "keys_file")]
        key: Option<String>,
        /// Require this many agreeing slots (1..=N).
        #[arg(long, value_parser = clap::value_parser!(u8).range(1..=8))]
        threshold: Option<u8>,
        #[command(flatten)]
        opts: QueryOpts,
    },
    /// Postcarding: the flow's path.
    Path {
        /// Flow (hex or 5-tuple).
        #[arg(required_unless_present = "keys_file")]
        key: Option<String>,
        /// Require this many agreeing valid chunks (1..=N).
        #[arg(long, value_parser = clap::value_parser!(u8).range(1..=8))]
        copies: Option<u8>,
        #[command(flatten)]
        opts: QueryOpts,
    },
    /// Key-Increment: the count-min estimate.
    Counter {
        /// Key (hex or 5-tuple).
        #[arg(required_unless_present = "keys_file")]
        key: Option<String>,
        #[command(flatten)]
        opts: QueryOpts,
    },
    /// Sketch-Merge: point estimates, cardinality, heavy hitters, completeness.
    Sketch {
        #[command(subcommand)]
        what: SketchCmd,
    },
}

/// Which sketch store and epoch a sketch query reads.
#[derive(Args, Debug, Clone)]
struct SketchOpts {
    /// Store (default: the only sketch store).
    #[arg(long)]
    store: Option<String>,
    /// Epoch (default: the newest the store holds).
    #[arg(long)]
    epoch: Option<u32>,
    #[command(flatten)]
    control: Control,
}

#[derive(Subcommand, Debug)]
enum SketchCmd {
    /// Count-Min or Count sketch: the point estimate of a key (or of every key of a file).
    Point {
        /// Key (hex or 5-tuple).
        #[arg(required_unless_present = "keys_file")]
        key: Option<String>,
        /// Read the keys from this file (`-`: standard input), one per line or a JSON array.
        #[arg(long, value_name = "FILE", conflicts_with = "key")]
        keys_file: Option<PathBuf>,
        #[command(flatten)]
        opts: SketchOpts,
    },
    /// HyperLogLog: the cardinality estimate.
    Cardinality {
        #[command(flatten)]
        opts: SketchOpts,
    },
    /// The candidate keys of a file whose estimate reaches --threshold, largest first.
    Heavy {
        /// Candidate keys (`-`: standard input), one per line or a JSON array.
        #[arg(long, value_name = "FILE")]
        keys_file: PathBuf,
        /// Smallest estimate reported.
        #[arg(long)]
        threshold: i64,
        #[command(flatten)]
        opts: SketchOpts,
    },
    /// Columns written and complete, switches merged per column.
    Completeness {
        #[command(flatten)]
        opts: SketchOpts,
    },
    /// The epochs the store holds, newest first.
    Epochs {
        #[command(flatten)]
        opts: SketchOpts,
    },
}

fn main() {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("info")).init();
    let cli = Cli::parse();
    if !matches!(cli.cmd, Cmd::Run { .. }) {
        // Client subcommands print; `stats | head` ends them quietly. `run` serves TCP and
        // must not die of a peer's closed connection.
        dta_io::signal::quiet_sigpipe();
    }
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
        Cmd::Stats { control } => endpoint(&control).and_then(|a| {
            let s = get_json(&a, "/stats")?;
            let st = get_json(&a, "/stores")?;
            println!(
                "{}",
                serde_json::to_string_pretty(&serde_json::json!({ "stats": s, "stores": st }))
                    .expect("json")
            );
            Ok(())
        }),
        Cmd::Cluster { what } => cluster(what),
        Cmd::Export { check, control } => export(&control, check),
        Cmd::Epoch { store, control } => endpoint(&control).and_then(|a| {
            let r = a.request("POST", &format!("/epoch/{}", enc(&store)))?;
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
    if let Some(m) = &cfg.collector.metadata_file {
        dta_collector::service::metadata_dir(m, false)?;
        println!("metadata file {} (mode 0600)", m.display());
    }
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

fn export(control: &Control, check: bool) -> Result<(), String> {
    use dta_collector::export::{metrics::ExportMetrics, Exporter};
    use std::sync::Arc;
    let path = control.config.as_ref().ok_or(
        "export needs the collector's configuration: -c FILE (with [collector] control and \
         [export.clickhouse])",
    )?;
    let cfg = CollectorConfig::load(path)?;
    let ch = cfg.export.clickhouse.as_ref().ok_or_else(|| {
        format!(
            "{}: no [export.clickhouse] section (see collector/collector.example.toml)",
            path.display()
        )
    })?;
    let metrics = Arc::new(ExportMetrics::default());
    let _server = match (ch.metrics, check) {
        (Some(addr), false) => {
            let m = metrics.clone();
            let handler: dta_http::Handler = Arc::new(move |req: dta_http::Request| {
                match (req.method.as_str(), req.target.split('?').next()) {
                    ("GET", Some("/metrics")) => dta_http::Response {
                        status: 200,
                        content_type: "text/plain; version=0.0.4; charset=utf-8".into(),
                        headers: Vec::new(),
                        body: m.render().into_bytes(),
                    },
                    _ => dta_http::Response::text(404, "the exporter serves GET /metrics only"),
                }
            });
            let opts = dta_http::ServerOptions {
                name: "dta-export-http".into(),
                hosts: dta_http::HostPolicy::Checked(cfg.collector.web.control_hostnames.clone()),
                ..Default::default()
            };
            let s = dta_http::Server::spawn(std::net::SocketAddr::V4(addr), opts, handler)
                .map_err(|e| format!("[export.clickhouse] metrics: {e}"))?;
            log::info!("exporter metrics on http://{}/metrics", s.local_addr());
            Some(s)
        }
        _ => None,
    };
    let mut ex = Exporter::new(&cfg, endpoint(control)?, metrics)?;
    let stop = dta_io::signal::install_stop_flag();
    if check {
        if ex.start(&stop)? {
            println!("ClickHouse reachable, tables present, cursors read: ready to export");
        }
        return Ok(());
    }
    ex.run(&stop)
}

fn load(path: &std::path::Path) -> CollectorConfig {
    CollectorConfig::load(path).unwrap_or_else(|e| {
        eprintln!("dta-collector: {e}");
        std::process::exit(2);
    })
}

fn endpoint(c: &Control) -> Result<client::Endpoint, String> {
    let cfg = match &c.config {
        Some(p) => Some(CollectorConfig::load(p)?),
        None => None,
    };
    let (addr, mut tls) = match (&c.control, &cfg) {
        (Some(a), _) => match a.strip_prefix("https://") {
            Some(rest) => (rest.trim_end_matches('/').to_string(), true),
            None => (
                a.strip_prefix("http://")
                    .unwrap_or(a)
                    .trim_end_matches('/')
                    .to_string(),
                false,
            ),
        },
        (None, Some(cfg)) => {
            let a = cfg.collector.control.ok_or_else(|| {
                format!(
                    "{}: no [collector] control address; pass --control",
                    c.config
                        .as_deref()
                        .unwrap_or(std::path::Path::new("?"))
                        .display()
                )
            })?;
            (a.to_string(), false)
        }
        (None, None) => {
            return Err(
                "where is the collector? pass --control ADDR or -c FILE (or set DTA_CONTROL)"
                    .into(),
            )
        }
    };
    let mut ep = client::Endpoint::plain(&addr);
    // The collector's own certificate file serves as the trust anchor when the CLI runs
    // next to it with its configuration.
    let mut ca = c.ca_file.clone();
    if let Some(w) = cfg
        .as_ref()
        .and_then(|cfg| cfg.collector.web.web_config_file.as_ref())
    {
        if let Some(t) = dta_http::WebConfig::load(w)?.tls_server_config {
            tls = true;
            ca = ca.or(Some(t.cert_file));
        }
    }
    if tls || c.ca_file.is_some() {
        let ca = ca.ok_or("TLS needs a certificate to trust: pass --ca-file (or -c FILE)")?;
        ep = ep.with_tls(&ca)?;
    }
    let token_file = c.token_file.clone().or_else(|| {
        cfg.as_ref()
            .and_then(|cfg| cfg.collector.web.admin_token_file.clone())
    });
    if let Some(f) = token_file {
        // Readable only by the collector's operators; without it the read-only commands
        // still work, and `epoch` says what is missing.
        match dta_http::AdminToken::from_file(&f) {
            Ok(t) => ep.token = Some(t.as_str().to_string()),
            Err(e) if c.token_file.is_some() => return Err(e),
            Err(e) => log::debug!("no admin token: {e}"),
        }
    }
    if let Ok(b) = std::env::var("DTA_BASIC_AUTH") {
        let (u, p) = b
            .split_once(':')
            .ok_or("DTA_BASIC_AUTH must be user:password")?;
        ep.basic = Some((u.to_string(), p.to_string()));
    }
    Ok(ep)
}

/// What [`enc`] leaves as it is: letters, digits, `-`, `.`, `_` and `:`.
const SEGMENT: &percent_encoding::AsciiSet = &percent_encoding::NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b':');

/// Percent-encodes a path segment (keys keep `:`, `-`, `.`; `/` becomes `%2F`).
fn enc(s: &str) -> String {
    percent_encoding::utf8_percent_encode(s, SEGMENT).to_string()
}

fn get_json(ep: &client::Endpoint, path: &str) -> Result<Value, String> {
    let r = ep.request("GET", path)?;
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
fn pick_store(ep: &client::Endpoint, want: Option<String>, kind: &str) -> Result<String, String> {
    if let Some(s) = want {
        return Ok(s);
    }
    let stores = get_json(ep, "/stores")?;
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

fn sketch_query(q: SketchCmd) -> Result<(), String> {
    let (opts, what, key, file, mut params) = match q {
        SketchCmd::Point {
            key,
            keys_file,
            opts,
        } => (opts, "point", key, keys_file, Vec::new()),
        SketchCmd::Cardinality { opts } => (opts, "cardinality", None, None, Vec::new()),
        SketchCmd::Heavy {
            keys_file,
            threshold,
            opts,
        } => (
            opts,
            "heavy",
            None,
            Some(keys_file),
            vec![format!("threshold={threshold}")],
        ),
        SketchCmd::Completeness { opts } => (opts, "completeness", None, None, Vec::new()),
        SketchCmd::Epochs { opts } => (opts, "epochs", None, None, Vec::new()),
    };
    if let (Some(e), false) = (opts.epoch, what == "epochs") {
        params.push(format!("epoch={e}"));
    }
    let query = if params.is_empty() {
        String::new()
    } else {
        format!("?{}", params.join("&"))
    };
    let addr = endpoint(&opts.control)?;
    let store = enc(&pick_store(&addr, opts.store, "sketch")?);
    if let Some(file) = &file {
        let body = read_keys(file)?;
        let path = match what {
            "heavy" => format!("/query/sketch/{store}/heavy{query}"),
            _ => format!("/query/sketch/{store}{query}"),
        };
        return print_answer(addr.request_with_body("POST", &path, &body)?);
    }
    let path = match key {
        Some(k) => {
            dta_collector::query::keys::parse_key(&k)?;
            format!("/query/sketch/{store}/point/{}{query}", enc(&k))
        }
        None => format!("/query/sketch/{store}/{what}{query}"),
    };
    print_answer(addr.request("GET", &path)?)
}

fn query(q: QueryCmd) -> Result<(), String> {
    let (kind, path_kind, key, opts, mut params) = match q {
        QueryCmd::Sketch { what } => return sketch_query(what),
        QueryCmd::Keywrite {
            key,
            threshold,
            opts,
        } => (
            "keywrite",
            "keywrite",
            key,
            opts,
            threshold
                .map(|t| format!("threshold={t}"))
                .into_iter()
                .collect(),
        ),
        QueryCmd::Path { key, copies, opts } => (
            "postcard",
            "path",
            key,
            opts,
            copies.map(|c| format!("copies={c}")).into_iter().collect(),
        ),
        QueryCmd::Counter { key, opts } => ("keyincrement", "counter", key, opts, Vec::new()),
    };
    if let Some(n) = opts.n {
        params.push(format!("n={n}"));
    }
    if opts.force {
        params.push("force=1".into());
    }
    let query = if params.is_empty() {
        String::new()
    } else {
        format!("?{}", params.join("&"))
    };
    if let Some(file) = &opts.keys_file {
        let body = read_keys(file)?;
        let addr = endpoint(&opts.control)?;
        let store = pick_store(&addr, opts.store, kind)?;
        let path = format!("/query/{path_kind}/{}{query}", enc(&store));
        return print_answer(addr.request_with_body("POST", &path, &body)?);
    }
    let key = key.ok_or("give a KEY or --keys-file FILE")?;
    dta_collector::query::keys::parse_key(&key)?;
    let addr = endpoint(&opts.control)?;
    let store = pick_store(&addr, opts.store, kind)?;
    let path = format!("/query/{path_kind}/{}/{}{query}", enc(&store), enc(&key));
    print_answer(addr.request("GET", &path)?)
}

/// A bulk query's keys: the file's bytes (`-`: standard input), at most the server's limit.
fn read_keys(file: &std::path::Path) -> Result<Vec<u8>, String> {
    use std::io::Read as _;
    let limit = dta_collector::http::MAX_BODY;
    let mut body = Vec::new();
    let r = if file == std::path::Path::new("-") {
        std::io::stdin()
            .lock()
            .take(limit as u64 + 1)
            .read_to_end(&mut body)
    } else {
        std::fs::File::open(file).and_then(|f| f.take(limit as u64 + 1).read_to_end(&mut body))
    };
    r.map_err(|e| format!("{}: {e}", file.display()))?;
    if body.len() > limit {
        return Err(format!(
            "{}: longer than {limit} bytes, the most one request takes: split it",
            file.display()
        ));
    }
    Ok(body)
}

fn tail(
    control: &Control,
    list: u32,
    store: Option<String>,
    follow: bool,
    from: &str,
    interval_ms: u64,
) -> Result<(), String> {
    let addr = endpoint(control)?;
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
        let r = addr.request(
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

fn cluster(what: ClusterCmd) -> Result<(), String> {
    use dta_collector::cluster::{describe, load_cluster, ClusterClient, Gateway, KeyQuery};
    match what {
        ClusterCmd::Check { cluster } => {
            let c = load_cluster(&cluster)?;
            println!(
                "{}",
                serde_json::to_string_pretty(&describe(&c)).expect("json")
            );
            Ok(())
        }
        ClusterCmd::Query {
            kind,
            keys,
            keys_file,
            epoch,
            n,
            cluster,
        } => {
            let client = ClusterClient::new(load_cluster(&cluster)?);
            let keys = match keys_file {
                Some(f) => {
                    let body = read_keys(&f)?;
                    dta_collector::http::bulk_keys(&body).map_err(|r| r.body.trim().to_string())?
                }
                None => keys,
            };
            let params = n.map(|n| format!("?n={n}")).unwrap_or_default();
            let kind = KeyQuery::parse(&kind).expect("clap checked the kind");
            for line in client.query(kind, &keys, epoch, &params)? {
                println!("{line}");
            }
            Ok(())
        }
        ClusterCmd::Tail {
            list,
            epoch,
            cluster,
        } => {
            let client = ClusterClient::new(load_cluster(&cluster)?);
            let (entries, lost) = client.tail(list, epoch, "")?;
            for e in entries {
                println!("{e}");
            }
            if lost > 0 {
                eprintln!("dta-collector: {lost} batch(es) of list {list} were overwritten before they were read");
            }
            Ok(())
        }
        ClusterCmd::Serve { cluster, listen } => {
            let gw = std::sync::Arc::new(Gateway::new(ClusterClient::new(load_cluster(&cluster)?)));
            let server = dta_collector::cluster::serve(listen, gw.clone())?;
            log::info!(
                "cluster gateway on {} for {}",
                server.local_addr(),
                cluster.display()
            );
            let stop = dta_io::signal::install_stop_flag();
            let mut text = std::fs::read(&cluster).unwrap_or_default();
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(200));
                let Ok(now) = std::fs::read(&cluster) else {
                    continue;
                };
                if now != text {
                    text = now;
                    match load_cluster(&cluster) {
                        Ok(c) => {
                            log::info!("cluster file changed: epochs up to {}", c.epoch);
                            gw.replace(ClusterClient::new(c));
                        }
                        Err(e) => log::error!("{e}; keeping the previous cluster"),
                    }
                }
            }
            Ok(())
        }
    }
}
