//! `dta-agent`: the ZERO-mode agent daemon. Publishes this host's counters in a memory region
//! and serves it to pull collectors with one-sided RDMA READ on an embedded software RNIC.

use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use clap::Parser;
use serde::Deserialize;

use dta_agent::metrics::{render, Published};
use dta_agent::region::{DEFAULT_CAPACITY, DEFAULT_MAX_BLOCKS};
use dta_agent::server::{DEFAULT_CM_PORT, DEFAULT_PMTU, DEFAULT_ROCE_PORT};
use dta_agent::{AgentOptions, AgentRegion, AgentServer, HostSampler, SamplerConfig};
use dta_rnic::allow::{Cidr, PeerAllowlist};

const ABOUT: &str = "ZERO-mode agent: publishes this host's counters for one-sided RDMA READ";

const LONG_ABOUT: &str = "\
ZERO-mode agent of dta (Direct Telemetry Access).

It keeps this host's counters in one memory region and serves that region, READ-only, on an \
embedded software RNIC (RoCEv2 over UDP), or with --backend rdma through this host's RDMA NIC, \
which then answers every READ with no CPU here. A pull collector (dta-collector's [pull]) \
connects with RDMA_CM (the REP carries the region's address, length, R_Key and path MTU) and \
reads the metrics with one-sided RDMA READ on its own schedule; the agent never sends anything \
unasked.

Published blocks (dta_proto::zero layout; see agent/README.md):
  net/<ifname>  the 16 counters of the interface's /proc/net/dev line, in file order
  cpu           the aggregate /proc/stat cpu line (10 fields, USER_HZ ticks)
  stat          ctxt, processes, procs_running, procs_blocked, intr total, btime

Settings come from --config (TOML; unknown keys are refused) and the flags, which override \
the file. The RoCEv2 address is required: it is the host's GID on the fabric.

Example:
  dta-agent --listen 192.0.2.10 --allow 192.0.2.0/24 --metrics-listen 127.0.0.1:9471";

#[derive(Parser, Debug)]
#[command(name = "dta-agent", version, about = ABOUT, long_about = LONG_ABOUT)]
struct Cli {
    /// TOML configuration file (see dta-agent.toml); flags override its settings.
    #[arg(long, short = 'c', value_name = "FILE")]
    config: Option<PathBuf>,
    /// RoCEv2 address of this host: IP or IP:PORT (port 4791 unless given). Required, here or
    /// in the file.
    #[arg(long, value_name = "IP[:PORT]")]
    listen: Option<String>,
    /// rdma_cm port (service ID) the collector connects to [default: 7700].
    #[arg(long, value_name = "PORT")]
    cm_port: Option<u16>,
    /// How often the host counters are re-read and published, in ms [default: 1000].
    #[arg(long, value_name = "MS")]
    interval_ms: Option<u32>,
    /// Publish /proc/net/dev (one block per interface) [default: on].
    #[arg(long, value_name = "on|off", value_parser = on_off)]
    net_dev: Option<bool>,
    /// Publish /proc/stat (the `cpu` and `stat` blocks) [default: on].
    #[arg(long, value_name = "on|off", value_parser = on_off)]
    proc_stat: Option<bool>,
    /// Who may connect: IPv4 networks, comma-separated or repeated [default: 127.0.0.0/8].
    #[arg(long, value_name = "CIDR", value_delimiter = ',')]
    allow: Option<Vec<Cidr>>,
    /// Serve Prometheus metrics on http://ADDR/metrics [default: off].
    #[arg(long, value_name = "ADDR")]
    metrics_listen: Option<SocketAddr>,
    /// Who answers READs: `software` (the embedded software RNIC on a UDP socket) or `rdma`
    /// (the RDMA NIC that owns the listen address; no agent CPU per READ; needs a build with
    /// the `rdma` feature) [default: software].
    #[arg(long, value_name = "software|rdma", value_parser = backend)]
    backend: Option<Backend>,
    /// Check the settings, print them and exit.
    #[arg(long)]
    check: bool,
}

/// Who answers READs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
enum Backend {
    /// The embedded software RNIC.
    Software,
    /// A real RNIC (`ibv_reg_mr`, rdma_cm).
    Rdma,
}

fn backend(s: &str) -> Result<Backend, String> {
    match s {
        "software" => Ok(Backend::Software),
        "rdma" => Ok(Backend::Rdma),
        _ => Err(format!("{s:?}: say software or rdma")),
    }
}

fn on_off(s: &str) -> Result<bool, String> {
    match s {
        "on" | "true" | "yes" | "1" => Ok(true),
        "off" | "false" | "no" | "0" => Ok(false),
        _ => Err(format!("{s:?}: say on or off")),
    }
}

/// The configuration file. Every key is optional; flags override them.
#[derive(Deserialize, Debug, Default)]
#[serde(deny_unknown_fields)]
struct FileConfig {
    listen: Option<String>,
    cm_port: Option<u16>,
    interval_ms: Option<u32>,
    net_dev: Option<bool>,
    proc_stat: Option<bool>,
    allow: Option<Vec<Cidr>>,
    metrics_listen: Option<SocketAddr>,
    region_bytes: Option<usize>,
    max_blocks: Option<u16>,
    max_interfaces: Option<usize>,
    pmtu: Option<u32>,
    verify_icrc: Option<bool>,
    backend: Option<Backend>,
    /// The metrics server's web settings: the collector's keys (`web_config_file`,
    /// `admin_token_file`, `control_hostnames`).
    #[serde(flatten)]
    web: dta_http::WebSettings,
}

/// Everything the daemon runs with.
#[derive(Debug)]
struct Settings {
    listen: SocketAddrV4,
    options: AgentOptions,
    sampler: SamplerConfig,
    metrics_listen: Option<SocketAddr>,
    web: dta_http::WebSettings,
    region_bytes: usize,
    max_blocks: u16,
    backend: Backend,
}

fn parse_listen(s: &str) -> Result<SocketAddrV4, String> {
    let s = s.trim();
    if let Ok(a) = s.parse::<SocketAddrV4>() {
        return Ok(a);
    }
    s.parse::<Ipv4Addr>()
        .map(|ip| SocketAddrV4::new(ip, DEFAULT_ROCE_PORT))
        .map_err(|_| format!("listen {s:?}: not an IPv4 address or IPv4:port"))
}

fn load_file(path: &Path) -> Result<FileConfig, String> {
    let text =
        std::fs::read_to_string(path).map_err(|e| format!("config {}: {e}", path.display()))?;
    toml::from_str(&text).map_err(|e| format!("config {}: {e}", path.display()))
}

fn settings(cli: Cli) -> Result<Settings, String> {
    let file = match &cli.config {
        Some(p) => load_file(p)?,
        None => FileConfig::default(),
    };
    let listen = cli.listen.or(file.listen).ok_or(
        "no RoCEv2 address: give --listen IP[:PORT] (or `listen` in the config file): the \
         host's address on the RDMA fabric",
    )?;
    let listen = parse_listen(&listen)?;
    if listen.ip().is_unspecified() {
        return Err(format!(
            "listen {listen}: needs the host's concrete address (its RoCEv2 GID), not 0.0.0.0"
        ));
    }
    let interval_ms = cli.interval_ms.or(file.interval_ms).unwrap_or(1000);
    if !(1..=3_600_000).contains(&interval_ms) {
        return Err(format!(
            "interval_ms {interval_ms}: must be 1..=3600000 (1 ms to an hour)"
        ));
    }
    let pmtu = file.pmtu.unwrap_or(DEFAULT_PMTU);
    if !(256..=4096).contains(&pmtu) || !pmtu.is_power_of_two() {
        return Err(format!("pmtu {pmtu}: must be 256, 512, 1024, 2048 or 4096"));
    }
    let max_blocks = file.max_blocks.unwrap_or(DEFAULT_MAX_BLOCKS);
    if !(3..=dta_proto::zero::MAX_BLOCKS).contains(&max_blocks) {
        return Err(format!(
            "max_blocks {max_blocks}: must be 3..={}",
            dta_proto::zero::MAX_BLOCKS
        ));
    }
    let max_interfaces = file
        .max_interfaces
        .unwrap_or(dta_agent::host::DEFAULT_MAX_INTERFACES);
    if max_interfaces + 2 > max_blocks as usize {
        return Err(format!(
            "max_interfaces {max_interfaces}: the region has {max_blocks} blocks, two of them \
             for /proc/stat: raise max_blocks or lower max_interfaces"
        ));
    }
    let allow = match cli.allow.or(file.allow) {
        Some(nets) => PeerAllowlist::new(nets),
        None => PeerAllowlist::default_for([]),
    };
    let on = |cli: Option<bool>, file: Option<bool>| cli.or(file).unwrap_or(true);
    let metrics_listen = cli.metrics_listen.or(file.metrics_listen);
    if metrics_listen.is_none() && file.web != dta_http::WebSettings::default() {
        return Err(
            "web_config_file, admin_token_file and control_hostnames configure the metrics \
             server: set metrics_listen (or --metrics-listen) too, or remove them"
                .into(),
        );
    }
    // Read and check the files now: a broken web configuration refuses the start.
    file.web.server_options("dta-agent-http")?;
    Ok(Settings {
        listen,
        options: AgentOptions {
            cm_port: cli.cm_port.or(file.cm_port).unwrap_or(DEFAULT_CM_PORT),
            allow,
            verify_icrc: file.verify_icrc.unwrap_or(true),
            pmtu,
            ..AgentOptions::default()
        },
        sampler: SamplerConfig {
            net_dev: on(cli.net_dev, file.net_dev).then(|| "/proc/net/dev".into()),
            proc_stat: on(cli.proc_stat, file.proc_stat).then(|| "/proc/stat".into()),
            interval_ms,
            max_interfaces,
        },
        metrics_listen,
        web: file.web,
        region_bytes: file.region_bytes.unwrap_or(DEFAULT_CAPACITY),
        max_blocks,
        backend: cli.backend.or(file.backend).unwrap_or(Backend::Software),
    })
}

fn main() -> ExitCode {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("info")).init();
    let cli = Cli::parse();
    let check = cli.check;
    let s = match settings(cli) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("dta-agent: {e}");
            return ExitCode::from(2);
        }
    };
    if check {
        println!("{s:#?}");
        return ExitCode::SUCCESS;
    }
    match run(s) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("dta-agent: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(s: Settings) -> Result<(), String> {
    let region = AgentRegion::new(s.region_bytes, s.max_blocks)
        .map_err(|e| format!("metric region: {e}"))?;
    let mut sampler =
        HostSampler::new(&region, s.sampler.clone()).map_err(|e| format!("metric region: {e}"))?;
    sampler.sample();
    if s.backend == Backend::Rdma {
        return run_rdma(&s, &region, sampler);
    }
    let mut server = AgentServer::bind_with(s.listen, &region, &s.options)
        .map_err(|e| format!("RoCEv2 on {}: {e}", s.listen))?;
    log::info!(
        "serving a {}-byte region ({} blocks) on {} (RDMA_CM port {}, from {}); record: addr \
         {:#x}, R_Key {:#x}",
        region.len(),
        region.blocks().len(),
        server.local_addr(),
        s.options.cm_port,
        s.options.allow,
        server.record().addr,
        server.record().rkey
    );
    let stop = dta_io::signal::install_stop_flag();
    let published = Arc::new(Mutex::new(Published::default()));
    let _http = metrics_server(&s, &region, &published)?;
    let sampling = start_sampler(&s, sampler, &stop, &published)?;
    let mut last = Instant::now();
    let mut result = Ok(());
    while !stop.load(Ordering::Relaxed) {
        if let Err(e) = server.poll_wait(Duration::from_millis(50)) {
            result = Err(format!("RoCEv2 socket: {e}"));
            break;
        }
        if last.elapsed() >= Duration::from_millis(250) {
            last = Instant::now();
            published
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .agent = server.counters();
        }
    }
    stop.store(true, Ordering::Relaxed);
    let _ = sampling.join();
    let k = server.counters();
    log::info!(
        "stopped: {} READs served, {} bytes sent, {:.3} s of RNIC CPU",
        k.rnic.reads,
        k.tx_bytes,
        k.cpu_ns as f64 / 1e9
    );
    result
}

/// The real-RNIC variant: the NIC that owns the listen address answers READs (the region is
/// registered READ-only; the REP carries its record); this process only samples.
fn run_rdma(s: &Settings, region: &AgentRegion, sampler: HostSampler) -> Result<(), String> {
    let stop = dta_io::signal::install_stop_flag();
    let nic = Arc::new(Mutex::new(dta_rnic::published::Published::default()));
    let thread = dta_rnic::rdma::serve_region(
        *s.listen.ip(),
        s.options.cm_port,
        "dta-agent",
        region.region().clone(),
        s.options.allow.clone(),
        nic.clone(),
        stop.clone(),
    )?;
    log::info!(
        "serving a {}-byte region ({} blocks) through the RDMA NIC of {} (RDMA_CM port {}, \
         from {}): READs take no CPU here",
        region.len(),
        region.blocks().len(),
        s.listen.ip(),
        s.options.cm_port,
        s.options.allow
    );
    let published = Arc::new(Mutex::new(Published::default()));
    let _http = metrics_server(s, region, &published)?;
    let sampling = start_sampler(s, sampler, &stop, &published)?;
    while !stop.load(Ordering::Relaxed) {
        std::thread::sleep(Duration::from_millis(250));
        let n = nic.lock().unwrap_or_else(PoisonError::into_inner);
        let mut p = published.lock().unwrap_or_else(PoisonError::into_inner);
        p.agent.rnic = n.counters;
        p.agent.cm = n.cm;
    }
    let _ = sampling.join();
    let _ = thread.join();
    let reads = nic
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .counters
        .reads;
    log::info!("stopped: the RNIC served {reads} READs");
    Ok(())
}

fn metrics_server(
    s: &Settings,
    region: &AgentRegion,
    published: &Arc<Mutex<Published>>,
) -> Result<Option<dta_http::Server>, String> {
    Ok(match s.metrics_listen {
        Some(addr) => {
            let opts = s.web.server_options("dta-agent-http")?;
            let stats = opts.stats.clone();
            let (region, published) = (region.clone(), published.clone());
            let handler: dta_http::Handler = Arc::new(move |req: dta_http::Request| {
                let path = req.target.split('?').next().unwrap_or("");
                if req.method != "GET" || path != "/metrics" {
                    return dta_http::Response::text(404, "not found: GET /metrics");
                }
                let mut p = *published.lock().unwrap_or_else(PoisonError::into_inner);
                p.http = stats.get();
                dta_http::Response {
                    status: 200,
                    content_type: "text/plain; version=0.0.4; charset=utf-8".into(),
                    headers: Vec::new(),
                    body: render(&region, &p).into_bytes(),
                }
            });
            Some(dta_http::Server::spawn(addr, opts, handler)?)
        }
        None => None,
    })
}

fn start_sampler(
    s: &Settings,
    mut sampler: HostSampler,
    stop: &Arc<AtomicBool>,
    published: &Arc<Mutex<Published>>,
) -> Result<std::thread::JoinHandle<()>, String> {
    let (stop, published) = (stop.clone(), published.clone());
    let every = Duration::from_millis(s.sampler.interval_ms as u64);
    std::thread::Builder::new()
        .name("dta-agent-sample".into())
        .spawn(move || sample_loop(&mut sampler, &stop, every, &published))
        .map_err(|e| format!("cannot start the sampler: {e}"))
}

fn sample_loop(
    sampler: &mut HostSampler,
    stop: &AtomicBool,
    every: Duration,
    published: &Mutex<Published>,
) {
    let mut next = Instant::now() + every;
    while !stop.load(Ordering::Relaxed) {
        let left = next.saturating_duration_since(Instant::now());
        if !left.is_zero() {
            std::thread::sleep(left.min(Duration::from_millis(100)));
            continue;
        }
        sampler.sample();
        published
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .sampler = sampler.counters();
        next = (next + every).max(Instant::now());
    }
}
