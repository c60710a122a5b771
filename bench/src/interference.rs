//! `dta bench zero-interference`: what monitoring costs the monitored host (issue 30; the ZERO
//! paper's Figures 3 and 4, redone here).
//!
//! A Redis server runs on one core (`--monitored-core`, 1: the monitored host) under a steady,
//! closed-loop `redis-benchmark` GET load from the other core (`--other-core`, 0), and is
//! monitored every `--interval-ms` (1 s) by one of:
//!
//! - nothing (the baseline);
//! - Prometheus' node_exporter with its default collectors, on the monitored core, scraped by a
//!   Prometheus server on the other core;
//! - node_exporter with only the `cpu`, `netdev` and `stat` collectors (what `dta-agent`
//!   publishes: `/proc/stat` and `/proc/net/dev`), scraped the same way;
//! - `dta-agent` on the monitored core (software RNIC), pulled with RDMA READ by `dta-collector`
//!   (`[pull]`) on the other core.
//!
//! Every run starts its own servers (Debian's binaries, private data directories under a work
//! directory, 127.0.0.1 ports nothing listens on, pinned with `taskset`, with a parent-death
//! signal through `setpriv` so that none outlives this process) and stops them at its end,
//! whatever happens. Configurations are interleaved and repeated (`--rounds`, each round in a
//! rotated order) because two shared cores are noisy; the summary gives medians and the spread.
//! With `--cpu-shares` the bench and all it starts run in a cgroup `cpu` group of that weight,
//! so that other login sessions' work on a shared machine leaves Redis most of its core.
//!
//! Measured per run, over the load's window only (after start-up and a settle time):
//! Redis throughput and latency quantiles from redis-benchmark's own histogram (parsed by
//! [`parse_redis_benchmark`]; p99.9 from its printed percentile and cumulative distributions,
//! see [`RedisBench::p999_ms`]); the monitor's CPU on the monitored core (utime + stime from
//! `/proc/PID/stat`), and for `dta-agent` its threads' CPU (`/proc/PID/task/TID/schedstat`):
//! the main thread runs the software RNIC that answers READs (a real RNIC answers them with no
//! host CPU), the `dta-agent-sample` thread reads `/proc` and republishes the blocks, which is
//! what remains on a real RNIC; the collecting side's CPU (Prometheus or `dta-collector`, not
//! on the monitored host); and proof that the monitor worked during the window (successful
//! scrapes from Prometheus' `up` series; pull rounds done and READs served from the
//! collector's and the agent's `/metrics`).
//!
//! This is a control-plane harness: nothing here is on a per-packet path.

use std::fs::File;
use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde::Serialize;
use serde_json::json;

use crate::sender::free_udp_port;

/// One redis-benchmark test's results, from its default (neither `-q` nor `--csv`) output.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RedisBench {
    /// The test (`GET`).
    pub test: String,
    /// Requests completed.
    pub requests: u64,
    /// Seconds the test took.
    pub secs: f64,
    /// Parallel clients.
    pub clients: u32,
    /// Throughput (requests per second, the summary's).
    pub rps: f64,
    /// Mean latency (ms).
    pub avg_ms: f64,
    /// Minimum latency (ms).
    pub min_ms: f64,
    /// Median latency (ms; redis-benchmark's hdr_value_at_percentile).
    pub p50_ms: f64,
    /// 95th percentile (ms).
    pub p95_ms: f64,
    /// 99th percentile (ms).
    pub p99_ms: f64,
    /// p99.9 (ms): the smallest latency printed (in the percentile or the cumulative
    /// distribution) with at least 99.9 % of the requests at or below it: an upper bound,
    /// exact when redis-benchmark printed that point. The summary has no p99.9.
    pub p999_ms: f64,
    /// The largest latency printed with fewer than 99.9 % of the requests at or below it: p99.9
    /// lies in (`p999_lower_ms`, `p999_ms`].
    pub p999_lower_ms: f64,
    /// Maximum latency (ms).
    pub max_ms: f64,
}

/// A latency and the requests at or below it, as redis-benchmark prints them.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Point {
    ms: f64,
    count: u64,
}

/// `"99.902% <= 92.223 milliseconds (cumulative count 99907)"` → (92.223, 99907).
fn parse_point(line: &str) -> Option<Point> {
    let (_, rest) = line.split_once("% <= ")?;
    let (ms, rest) = rest.split_once(" milliseconds (cumulative count ")?;
    let count = rest.strip_suffix(')')?;
    Some(Point {
        ms: ms.trim().parse().ok()?,
        count: count.trim().parse().ok()?,
    })
}

/// The bracket (lower, upper] of quantile `q` from cumulative points: the smallest latency with
/// at least ⌈q · total⌉ requests at or below it, and the largest with fewer.
fn quantile_bracket(points: &[Point], total: u64, q: f64) -> Option<(f64, f64)> {
    let target = ((q * total as f64).ceil() as u64).max(1);
    let upper = points
        .iter()
        .filter(|p| p.count >= target)
        .map(|p| p.ms)
        .min_by(f64::total_cmp)?;
    let lower = points
        .iter()
        .filter(|p| p.count < target)
        .map(|p| p.ms)
        .max_by(f64::total_cmp)
        .unwrap_or(0.0);
    Some((lower, upper))
}

/// Parses redis-benchmark's output for one test (progress lines, separated by `\r`, are
/// skipped): requests, time, clients, both latency distributions and the summary.
pub fn parse_redis_benchmark(out: &str) -> Result<RedisBench, String> {
    let text = out.replace('\r', "\n");
    let mut lines = text.lines().map(str::trim);
    let test = lines
        .by_ref()
        .find_map(|l| {
            l.strip_prefix("====== ")
                .and_then(|r| r.strip_suffix(" ======"))
                .map(str::to_string)
        })
        .ok_or("redis-benchmark printed no \"====== TEST ======\" report (was it run with -q or --csv?)")?;
    let (mut requests, mut secs, mut clients, mut rps) = (None, None, None, None);
    let mut points = Vec::new();
    let mut summary: Option<Vec<(String, f64)>> = None;
    let mut header: Option<Vec<String>> = None;
    for l in lines {
        if l.starts_with("====== ") {
            break;
        }
        if let Some(r) = l.strip_suffix(" seconds") {
            if let Some((n, s)) = r.split_once(" requests completed in ") {
                requests = n.trim().parse::<u64>().ok();
                secs = s.trim().parse::<f64>().ok();
            }
        } else if let Some(n) = l.strip_suffix(" parallel clients") {
            clients = n.trim().parse::<u32>().ok();
        } else if let Some(p) = parse_point(l) {
            points.push(p);
        } else if let Some(r) = l.strip_prefix("throughput summary: ") {
            rps = r
                .strip_suffix(" requests per second")
                .and_then(|v| v.trim().parse::<f64>().ok());
        } else if l.starts_with("avg") && l.contains("p50") {
            header = Some(l.split_whitespace().map(str::to_string).collect());
        } else if let (Some(h), None) = (&header, &summary) {
            let vals: Vec<f64> = l
                .split_whitespace()
                .filter_map(|v| v.parse().ok())
                .collect();
            if vals.len() == h.len() && !vals.is_empty() {
                summary = Some(h.iter().cloned().zip(vals).collect());
            }
        }
    }
    let requests = requests.ok_or("no \"N requests completed in S seconds\" line")?;
    if requests == 0 {
        return Err("redis-benchmark completed 0 requests".into());
    }
    let summary = summary.ok_or("no latency summary (avg min p50 p95 p99 max)")?;
    let get = |k: &str| {
        summary
            .iter()
            .find(|(n, _)| n == k)
            .map(|(_, v)| *v)
            .ok_or(format!("the latency summary has no {k}"))
    };
    if points.last().map(|p| p.count) != Some(requests)
        && !points.iter().any(|p| p.count == requests)
    {
        return Err(format!(
            "the latency distribution does not reach the {requests} requests completed"
        ));
    }
    let (p999_lower_ms, p999_ms) =
        quantile_bracket(&points, requests, 0.999).ok_or("no latency distribution")?;
    Ok(RedisBench {
        test,
        requests,
        secs: secs.ok_or("no test duration")?,
        clients: clients.ok_or("no \"N parallel clients\" line")?,
        rps: rps.ok_or("no throughput summary")?,
        avg_ms: get("avg")?,
        min_ms: get("min")?,
        p50_ms: get("p50")?,
        p95_ms: get("p95")?,
        p99_ms: get("p99")?,
        p999_ms,
        p999_lower_ms,
        max_ms: get("max")?,
    })
}

/// utime + stime (clock ticks) of a `/proc/PID/stat` line: fields 14 and 15, counted after the
/// parenthesised command name (which may hold spaces and parentheses).
pub fn stat_cpu_ticks(stat: &str) -> Option<u64> {
    let rest = stat.get(stat.rfind(')')? + 1..)?;
    let f: Vec<&str> = rest.split_whitespace().collect();
    Some(f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?)
}

/// One core's time from `/proc/stat` (USER_HZ ticks).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CoreTicks {
    /// user + nice + system + irq + softirq (guest time is inside user and nice).
    pub busy: u64,
    /// idle + iowait.
    pub idle: u64,
    /// Time the hypervisor ran something else.
    pub steal: u64,
}

/// The `cpuN` line of `/proc/stat` for `core`.
pub fn core_ticks(proc_stat: &str, core: usize) -> Option<CoreTicks> {
    let name = format!("cpu{core}");
    let line = proc_stat
        .lines()
        .find(|l| l.split_whitespace().next() == Some(name.as_str()))?;
    let v: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .map(|x| x.parse().unwrap_or(0))
        .collect();
    let at = |i: usize| v.get(i).copied().unwrap_or(0);
    Some(CoreTicks {
        busy: at(0) + at(1) + at(2) + at(5) + at(6),
        idle: at(3) + at(4),
        steal: at(7),
    })
}

/// The sum of every series of metric `name` (with or without labels) in a Prometheus text
/// page; `None` when the page has none.
pub fn prom_sum(page: &str, name: &str) -> Option<f64> {
    let mut sum = None;
    for l in page.lines().filter(|l| !l.starts_with('#')) {
        let Some(rest) = l.strip_prefix(name) else {
            continue;
        };
        let value = if rest.starts_with('{') {
            rest.rfind('}').map(|i| &rest[i + 1..])
        } else if rest.starts_with(' ') {
            Some(rest)
        } else {
            None
        };
        if let Some(v) = value
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse::<f64>().ok())
        {
            *sum.get_or_insert(0.0) += v;
        }
    }
    sum
}

/// The value of a Prometheus instant-query answer with one series (`/api/v1/query`).
pub fn prom_query_value(answer: &str) -> Option<f64> {
    let v: serde_json::Value = serde_json::from_str(answer).ok()?;
    if v["status"] != "success" {
        return None;
    }
    v["data"]["result"][0]["value"][1].as_str()?.parse().ok()
}

/// Median, minimum and maximum of `v` (NaN for none).
pub fn spread(v: &[f64]) -> (f64, f64, f64) {
    let mut s: Vec<f64> = v.iter().copied().filter(|x| x.is_finite()).collect();
    if s.is_empty() {
        return (f64::NAN, f64::NAN, f64::NAN);
    }
    s.sort_by(f64::total_cmp);
    let n = s.len();
    let median = if n % 2 == 1 {
        s[n / 2]
    } else {
        (s[n / 2 - 1] + s[n / 2]) / 2.0
    };
    (median, s[0], s[n - 1])
}

/// Who monitors the Redis host in a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
pub enum Monitor {
    /// Nothing: the baseline.
    None,
    /// node_exporter, default collectors, scraped by Prometheus.
    NodeExporter,
    /// node_exporter with the cpu, netdev and stat collectors only, scraped by Prometheus.
    NodeExporterMatched,
    /// dta-agent (software RNIC) pulled with RDMA READ by dta-collector.
    DtaAgent,
}

impl Monitor {
    /// Every configuration, in the first round's order.
    pub const ALL: [Monitor; 4] = [
        Monitor::None,
        Monitor::NodeExporter,
        Monitor::NodeExporterMatched,
        Monitor::DtaAgent,
    ];

    /// The JSON key.
    pub fn key(self) -> &'static str {
        match self {
            Monitor::None => "none",
            Monitor::NodeExporter => "node_exporter",
            Monitor::NodeExporterMatched => "node_exporter_matched",
            Monitor::DtaAgent => "dta_agent",
        }
    }

    /// What the figure and table call it.
    pub fn label(self) -> &'static str {
        match self {
            Monitor::None => "no monitoring",
            Monitor::NodeExporter => "node_exporter (defaults) + Prometheus",
            Monitor::NodeExporterMatched => "node_exporter (cpu, netdev, stat) + Prometheus",
            Monitor::DtaAgent => "dta-agent + pull collector (RDMA READ)",
        }
    }
}

/// `dta bench zero-interference` settings.
#[derive(Debug, Clone, Serialize)]
pub struct InterferenceOptions {
    /// Seconds of load per run (sets the requests per run when `requests` is 0).
    pub secs: f64,
    /// Rounds; each runs every monitor once, in an order rotated by one per round.
    pub rounds: u32,
    /// The configurations measured.
    pub monitors: Vec<Monitor>,
    /// redis-benchmark parallel clients.
    pub clients: u32,
    /// redis-benchmark pipeline depth.
    pub pipeline: u32,
    /// Keys (GETs pick one of them at random; SETs fill them first).
    pub keys: u64,
    /// Value size in bytes.
    pub value_bytes: u32,
    /// Requests per run; 0: `secs` times the throughput of a calibration run.
    pub requests: u64,
    /// The monitored host's core: Redis and the monitor's agent.
    pub monitored_core: usize,
    /// The other side's core: load generator, Prometheus, the pull collector.
    pub other_core: usize,
    /// Monitoring interval (scrape, pull and agent sampling), ms.
    pub interval_ms: u32,
    /// Seconds between a monitor answering and the load starting (start-up costs stay out).
    pub settle_secs: f64,
    /// Run this bench, and so every process it starts, in its own cgroup v1 `cpu` group with
    /// this `cpu.shares` (root; 0: leave scheduling alone). A session's processes otherwise
    /// share the CPU with every other session's as one autogroup of weight 1024 whatever their
    /// nice values, so on a machine shared with other work this is how the two cores come to
    /// behave more like a dedicated host; inside the group Redis and the monitor compete as
    /// equals, as on a real host.
    pub cpu_shares: u64,
    /// Where the runs keep their data (a fresh directory under the system's temporary one
    /// when unset); removed at the end unless `keep_work`.
    pub work: Option<PathBuf>,
    /// Keep the work directory (servers' logs and data).
    pub keep_work: bool,
    /// Where `dta-agent` and `dta-collector` are (the `dta` binary's directory when unset).
    pub bin_dir: Option<PathBuf>,
    /// Output directory (`zero-interference.json` and `.svg`).
    pub out: PathBuf,
}

impl Default for InterferenceOptions {
    fn default() -> Self {
        InterferenceOptions {
            secs: 60.0,
            rounds: 3,
            monitors: Monitor::ALL.to_vec(),
            clients: 50,
            pipeline: 1,
            keys: 100_000,
            value_bytes: 64,
            requests: 0,
            monitored_core: 1,
            other_core: 0,
            interval_ms: 1000,
            settle_secs: 3.0,
            cpu_shares: 0,
            work: None,
            keep_work: false,
            bin_dir: None,
            out: PathBuf::from("bench/results"),
        }
    }
}

const CPU_CGROUP: &str = "/sys/fs/cgroup/cpu";

/// A cgroup v1 `cpu` group holding this process, so every process it starts from now on
/// (module docs, [`InterferenceOptions::cpu_shares`]). Dropping it moves this process back to
/// the root group and removes the group (its other members are gone by then).
struct CpuGroup {
    dir: PathBuf,
}

impl CpuGroup {
    fn enter(shares: u64) -> Result<CpuGroup, String> {
        let root = Path::new(CPU_CGROUP);
        if !root.join("cpu.shares").exists() {
            return Err(format!(
                "--cpu-shares: no cgroup v1 cpu controller at {CPU_CGROUP}"
            ));
        }
        let dir = root.join(format!("dta-zero-interference-{}", std::process::id()));
        match std::fs::create_dir(&dir) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => {
                return Err(format!(
                    "--cpu-shares: cannot create {}: {e}",
                    dir.display()
                ))
            }
        }
        let g = CpuGroup { dir };
        let write = |file: &str, v: String| {
            std::fs::write(g.dir.join(file), &v)
                .map_err(|e| format!("--cpu-shares: {}/{file} <- {v}: {e}", g.dir.display()))
        };
        write("cpu.shares", shares.to_string())?;
        write("cgroup.procs", std::process::id().to_string())?;
        Ok(g)
    }
}

impl Drop for CpuGroup {
    fn drop(&mut self) {
        let _ = std::fs::write(
            Path::new(CPU_CGROUP).join("cgroup.procs"),
            std::process::id().to_string(),
        );
        let _ = std::fs::remove_dir(&self.dir);
    }
}

/// `taskset -c CORE program`: how every process of a run starts.
fn pinned(core: usize, program: &Path) -> Vec<String> {
    vec![
        "taskset".to_string(),
        "-c".to_string(),
        core.to_string(),
        program.display().to_string(),
    ]
}

/// A server this harness started: killed (and reaped) when dropped. It also gets SIGTERM from
/// the kernel if the thread that started it dies first (`setpriv --pdeathsig`), so it never
/// outlives a crashed or killed bench.
struct Server {
    name: String,
    child: Child,
    log: PathBuf,
}

impl Server {
    /// Starts `program args` pinned to `core`, its output in `dir/NAME.log`.
    fn start(
        name: &str,
        core: usize,
        program: &Path,
        args: &[String],
        dir: &Path,
    ) -> Result<Server, String> {
        let log = dir.join(format!("{name}.log"));
        let out = File::create(&log).map_err(|e| format!("{}: {e}", log.display()))?;
        let err = out.try_clone().map_err(|e| e.to_string())?;
        let child = Command::new("setpriv")
            .args(["--pdeathsig", "TERM", "--"])
            .args(pinned(core, program))
            .args(args)
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .map_err(|e| format!("cannot start {name} ({}): {e}", program.display()))?;
        Ok(Server {
            name: name.to_string(),
            child,
            log,
        })
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    /// An error naming the server and the end of its log if it has exited.
    fn check(&mut self) -> Result<(), String> {
        match self.child.try_wait() {
            Ok(None) => Ok(()),
            Ok(Some(st)) => Err(format!(
                "{} exited ({st}): {}",
                self.name,
                log_tail(&self.log)
            )),
            Err(e) => Err(format!("{}: {e}", self.name)),
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn log_tail(p: &Path) -> String {
    let s = std::fs::read_to_string(p).unwrap_or_default();
    let lines: Vec<&str> = s.lines().rev().take(3).collect();
    lines.into_iter().rev().collect::<Vec<_>>().join(" | ")
}

/// A TCP port on 127.0.0.1 that nothing listens on right now.
fn free_tcp_port() -> Result<u16, String> {
    let l = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).map_err(|e| e.to_string())?;
    Ok(l.local_addr().map_err(|e| e.to_string())?.port())
}

fn loopback(port: u16) -> SocketAddr {
    SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::LOCALHOST, port))
}

/// `GET path` on 127.0.0.1:`port`: the body of a 200 answer.
fn http_get(port: u16, path: &str) -> Result<String, String> {
    let req = format!("GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n");
    let raw =
        dta_http::client::exchange(loopback(port), None, req.as_bytes(), Duration::from_secs(5))
            .map_err(|e| format!("GET 127.0.0.1:{port}{path}: {e}"))?;
    let a = dta_http::client::parse_answer(&raw)
        .ok_or_else(|| format!("GET 127.0.0.1:{port}{path}: not an HTTP answer"))?;
    if a.status != 200 {
        return Err(format!("GET 127.0.0.1:{port}{path}: status {}", a.status));
    }
    Ok(String::from_utf8_lossy(&a.body).into_owned())
}

/// Percent-encodes a URL query value.
fn url_encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// Polls `f` every 100 ms until it gives a value or `timeout` passes.
fn wait_for<T>(
    what: &str,
    timeout: Duration,
    mut f: impl FnMut() -> Option<T>,
) -> Result<T, String> {
    let t0 = Instant::now();
    loop {
        if let Some(v) = f() {
            return Ok(v);
        }
        if t0.elapsed() > timeout {
            return Err(format!("timed out after {timeout:?} waiting for {what}"));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Redis answers PING on `port`.
fn redis_ping(port: u16) -> bool {
    let Ok(mut s) = TcpStream::connect_timeout(&loopback(port), Duration::from_millis(500)) else {
        return false;
    };
    let _ = s.set_read_timeout(Some(Duration::from_millis(500)));
    let mut buf = [0u8; 16];
    s.write_all(b"PING\r\n").is_ok()
        && s.read(&mut buf)
            .is_ok_and(|n| buf[..n].starts_with(b"+PONG"))
}

/// A process's CPU so far: utime + stime (ns, from clock ticks) and each live thread's
/// on-CPU time (ns, schedstat) by name.
#[derive(Debug, Clone, Default)]
struct ProcCpu {
    ns: u64,
    threads: Vec<(u64, String, u64)>,
}

fn proc_cpu(pid: u32) -> Option<ProcCpu> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let ns = stat_cpu_ticks(&stat)? * 1_000_000_000 / crate::sys::clock_ticks_per_sec();
    let mut threads = Vec::new();
    if let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/task")) {
        for e in dir.flatten() {
            let Some(tid) = e.file_name().to_str().and_then(|t| t.parse::<u64>().ok()) else {
                continue;
            };
            let comm = std::fs::read_to_string(e.path().join("comm")).unwrap_or_default();
            let sched = std::fs::read_to_string(e.path().join("schedstat")).unwrap_or_default();
            if let Some(t) = sched.split_whitespace().next().and_then(|v| v.parse().ok()) {
                threads.push((tid, comm.trim_end().to_string(), t));
            }
        }
    }
    Some(ProcCpu { ns, threads })
}

impl ProcCpu {
    /// CPU (ns) between an earlier sample and `self`. utime + stime and the threads' schedstat
    /// count the same time: the first to the clock tick (each sample floored) but with the
    /// threads that exited in between, the second to the nanosecond but only for the threads
    /// still alive. The threads' sum when none exited, else the larger of the two.
    fn since(&self, before: &ProcCpu) -> u64 {
        let threads = self.threads_since(before, |_, _| true);
        if self.exited(before) == 0 && !self.threads.is_empty() {
            threads
        } else {
            threads.max(self.ns.saturating_sub(before.ns))
        }
    }

    /// Threads of `before` that are gone.
    fn exited(&self, before: &ProcCpu) -> usize {
        before
            .threads
            .iter()
            .filter(|(t, _, _)| !self.threads.iter().any(|(u, _, _)| u == t))
            .count()
    }

    /// Thread CPU (ns) between samples of the threads `pick` selects (by tid and name).
    fn threads_since(&self, before: &ProcCpu, pick: impl Fn(u64, &str) -> bool) -> u64 {
        self.threads
            .iter()
            .filter(|(tid, name, _)| pick(*tid, name))
            .map(|(tid, _, ns)| {
                let b = before
                    .threads
                    .iter()
                    .find(|(t, _, _)| t == tid)
                    .map_or(0, |(_, _, n)| *n);
                ns.saturating_sub(b)
            })
            .sum()
    }
}

/// The monitored core's ticks now.
fn core_now(core: usize) -> CoreTicks {
    std::fs::read_to_string("/proc/stat")
        .ok()
        .and_then(|s| core_ticks(&s, core))
        .unwrap_or_default()
}

fn loadavg() -> f64 {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| s.split_whitespace().next().and_then(|v| v.parse().ok()))
        .unwrap_or(f64::NAN)
}

/// Paths of the programs a run needs.
#[derive(Debug, Clone)]
struct Tools {
    redis_server: PathBuf,
    redis_benchmark: PathBuf,
    prometheus: PathBuf,
    node_exporter: PathBuf,
    agent: PathBuf,
    collector: PathBuf,
}

fn which(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .chain([PathBuf::from("/usr/sbin"), PathBuf::from("/usr/bin")])
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

impl Tools {
    fn find(o: &InterferenceOptions) -> Result<Tools, String> {
        let need = |name: &str, pkg: &str| {
            which(name).ok_or(format!(
                "{name} not found: apt-get install {pkg} (scripts/bench-zero-interference.sh does)"
            ))
        };
        for (t, pkg) in [("taskset", "util-linux"), ("setpriv", "util-linux")] {
            need(t, pkg)?;
        }
        let bin_dir = match &o.bin_dir {
            Some(d) => d.clone(),
            None => std::env::current_exe()
                .ok()
                .and_then(|p| p.parent().map(Path::to_path_buf))
                .ok_or("cannot tell where the dta binary is: give --bin-dir")?,
        };
        let ours = |name: &str| {
            let p = bin_dir.join(name);
            p.is_file().then_some(p).ok_or(format!(
                "{name} not found in {}: cargo build --release -p dta-agent -p dta-collector",
                bin_dir.display()
            ))
        };
        Ok(Tools {
            redis_server: need("redis-server", "redis-server")?,
            redis_benchmark: need("redis-benchmark", "redis-tools")?,
            prometheus: need("prometheus", "prometheus")?,
            node_exporter: need("prometheus-node-exporter", "prometheus-node-exporter")?,
            agent: ours("dta-agent")?,
            collector: ours("dta-collector")?,
        })
    }

    /// The first line of `program --version`.
    fn version(program: &Path) -> String {
        Command::new(program)
            .arg("--version")
            .output()
            .map(|o| {
                let s = if o.stdout.is_empty() {
                    o.stderr
                } else {
                    o.stdout
                };
                String::from_utf8_lossy(&s)
                    .lines()
                    .next()
                    .unwrap_or("")
                    .to_string()
            })
            .unwrap_or_default()
    }
}

/// Monitors this harness did not start (a system node_exporter, Prometheus or Redis would be
/// load it does not account for): their pids and names.
fn foreign_monitors(ours: &[u32]) -> Vec<String> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let names = [
        "prometheus",
        "prometheus-node",
        "node_exporter",
        "redis-server",
        "dta-agent",
        "netdata",
    ];
    dir.flatten()
        .filter_map(|e| {
            let pid: u32 = e.file_name().to_str()?.parse().ok()?;
            let comm = std::fs::read_to_string(e.path().join("comm")).ok()?;
            let comm = comm.trim_end();
            (names.contains(&comm) && !ours.contains(&pid)).then(|| format!("{pid} {comm}"))
        })
        .collect()
}

/// The monitor of one run, started and answering.
struct Running {
    /// On the monitored core: node_exporter or dta-agent.
    host: Option<Server>,
    /// On the other core: Prometheus or dta-collector.
    collector: Option<Server>,
    /// Prometheus' web port, or the collector's control port.
    collector_port: u16,
    /// dta-agent's metrics port.
    agent_port: u16,
}

/// What proves the monitor worked, read before and after the load.
#[derive(Debug, Clone, Copy, Default)]
struct Collected {
    /// Scrapes that succeeded (Prometheus `up`) or pull rounds done.
    done: f64,
    /// Scrapes attempted; READs the agent served.
    tried: f64,
    /// Software-RNIC CPU the agent counts (s).
    rnic_cpu_s: f64,
    /// Samples per scrape (Prometheus) or blocks in the agent's region.
    size: f64,
}

/// Prometheus' configuration: one job, `node`, scraping 127.0.0.1:`port` every `interval_ms`
/// (in ms: Prometheus durations take whole units only), time-out the same.
fn prometheus_config(interval_ms: u32, port: u16) -> String {
    format!(
        "global:\n  scrape_interval: {interval_ms}ms\n  scrape_timeout: {interval_ms}ms\n  \
         evaluation_interval: 1h\nscrape_configs:\n  - job_name: node\n    \
         static_configs:\n      - targets: [\"127.0.0.1:{port}\"]\n"
    )
}

fn prometheus_query(port: u16, q: &str) -> Option<f64> {
    let body = http_get(port, &format!("/api/v1/query?query={}", url_encode(q))).ok()?;
    prom_query_value(&body)
}

impl Running {
    fn start(
        m: Monitor,
        o: &InterferenceOptions,
        tools: &Tools,
        dir: &Path,
    ) -> Result<Running, String> {
        let (mc, oc) = (o.monitored_core, o.other_core);
        match m {
            Monitor::None => Ok(Running {
                host: None,
                collector: None,
                collector_port: 0,
                agent_port: 0,
            }),
            Monitor::NodeExporter | Monitor::NodeExporterMatched => {
                let ne_port = free_tcp_port()?;
                let mut args = vec![format!("--web.listen-address=127.0.0.1:{ne_port}")];
                if m == Monitor::NodeExporterMatched {
                    args.extend(
                        [
                            "--collector.disable-defaults",
                            "--collector.cpu",
                            "--collector.netdev",
                            "--collector.stat",
                        ]
                        .map(String::from),
                    );
                }
                let host = Server::start("node_exporter", mc, &tools.node_exporter, &args, dir)?;
                let prom_port = free_tcp_port()?;
                let cfg = dir.join("prometheus.yml");
                std::fs::write(&cfg, prometheus_config(o.interval_ms, ne_port))
                    .map_err(|e| format!("{}: {e}", cfg.display()))?;
                let args = vec![
                    format!("--config.file={}", cfg.display()),
                    format!("--storage.tsdb.path={}", dir.join("tsdb").display()),
                    "--storage.tsdb.retention.time=1h".to_string(),
                    format!("--web.listen-address=127.0.0.1:{prom_port}"),
                    "--log.level=warn".to_string(),
                ];
                let collector = Server::start("prometheus", oc, &tools.prometheus, &args, dir)?;
                Ok(Running {
                    host: Some(host),
                    collector: Some(collector),
                    collector_port: prom_port,
                    agent_port: 0,
                })
            }
            Monitor::DtaAgent => {
                let roce = free_udp_port(Ipv4Addr::LOCALHOST)?;
                let agent_port = free_tcp_port()?;
                let args = vec![
                    "--listen".to_string(),
                    format!("127.0.0.1:{roce}"),
                    "--interval-ms".to_string(),
                    o.interval_ms.to_string(),
                    "--allow".to_string(),
                    "127.0.0.0/8".to_string(),
                    "--metrics-listen".to_string(),
                    format!("127.0.0.1:{agent_port}"),
                ];
                let host = Server::start("dta-agent", mc, &tools.agent, &args, dir)?;
                let control = free_tcp_port()?;
                let (rnic, pull) = (
                    free_udp_port(Ipv4Addr::LOCALHOST)?,
                    free_udp_port(Ipv4Addr::LOCALHOST)?,
                );
                let cfg = dir.join("collector.toml");
                std::fs::write(
                    &cfg,
                    format!(
                        "[collector]\nroce = \"127.0.0.1:{rnic}\"\ncontrol = \"127.0.0.1:{control}\"\n\
                         hugepages = false\n\n[pull]\nlisten = \"127.0.0.1:{pull}\"\n\
                         interval_ms = {}\n\n[[pull.agent]]\nname = \"redis-host\"\n\
                         roce = \"127.0.0.1:{roce}\"\ncm_port = 7700\n",
                        o.interval_ms
                    ),
                )
                .map_err(|e| format!("{}: {e}", cfg.display()))?;
                let args = vec![
                    "run".to_string(),
                    "-c".to_string(),
                    cfg.display().to_string(),
                ];
                let collector = Server::start("dta-collector", oc, &tools.collector, &args, dir)?;
                Ok(Running {
                    host: Some(host),
                    collector: Some(collector),
                    collector_port: control,
                    agent_port,
                })
            }
        }
    }

    fn progress(&self, m: Monitor) -> Option<Collected> {
        match m {
            Monitor::None => Some(Collected::default()),
            Monitor::NodeExporter | Monitor::NodeExporterMatched => {
                let p = self.collector_port;
                Some(Collected {
                    done: prometheus_query(p, "sum_over_time(up{job=\"node\"}[1h])")?,
                    tried: prometheus_query(p, "count_over_time(up{job=\"node\"}[1h])")?,
                    rnic_cpu_s: 0.0,
                    size: prometheus_query(p, "scrape_samples_scraped{job=\"node\"}")?,
                })
            }
            Monitor::DtaAgent => {
                let c = http_get(self.collector_port, "/metrics").ok()?;
                let a = http_get(self.agent_port, "/metrics").ok()?;
                Some(Collected {
                    done: prom_sum(&c, "dta_pull_rounds_done_total")?,
                    tried: prom_sum(&a, "dta_agent_rnic_reads_total")?,
                    rnic_cpu_s: prom_sum(&a, "dta_agent_rnic_cpu_seconds_total")?,
                    size: prom_sum(&a, "dta_agent_region_blocks")?,
                })
            }
        }
    }

    /// Waits until the monitor has collected at least twice.
    fn wait_working(&mut self, m: Monitor) -> Result<(), String> {
        if m == Monitor::None {
            return Ok(());
        }
        let t0 = Instant::now();
        loop {
            for s in [&mut self.host, &mut self.collector].into_iter().flatten() {
                s.check()?;
            }
            if self.progress(m).is_some_and(|p| p.done >= 2.0) {
                return Ok(());
            }
            if t0.elapsed() > Duration::from_secs(60) {
                let logs: Vec<String> = [&self.host, &self.collector]
                    .into_iter()
                    .flatten()
                    .map(|s| format!("{}: {}", s.name, log_tail(&s.log)))
                    .collect();
                return Err(format!(
                    "{} did not collect twice within 60 s ({})",
                    m.label(),
                    logs.join("; ")
                ));
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    fn check(&mut self) -> Result<(), String> {
        for s in [&mut self.host, &mut self.collector].into_iter().flatten() {
            s.check()?;
        }
        Ok(())
    }
}

/// Runs redis-benchmark pinned to `core`; its stdout.
fn redis_benchmark(
    tools: &Tools,
    core: usize,
    port: u16,
    args: &[String],
) -> Result<String, String> {
    let cmd = pinned(core, &tools.redis_benchmark);
    let out = Command::new(&cmd[0])
        .args(&cmd[1..])
        .args(["-h", "127.0.0.1", "-p"])
        .arg(port.to_string())
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("redis-benchmark: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "redis-benchmark {args:?}: {} {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Starts Redis on the monitored core in `dir` and fills the keyspace.
fn start_redis(
    o: &InterferenceOptions,
    tools: &Tools,
    dir: &Path,
) -> Result<(Server, u16), String> {
    let port = free_tcp_port()?;
    let data = dir.join("redis");
    std::fs::create_dir_all(&data).map_err(|e| format!("{}: {e}", data.display()))?;
    let args: Vec<String> = [
        "--bind",
        "127.0.0.1",
        "--port",
        &port.to_string(),
        "--save",
        "",
        "--appendonly",
        "no",
        "--dir",
        &data.display().to_string(),
        "--daemonize",
        "no",
        "--loglevel",
        "warning",
    ]
    .map(String::from)
    .to_vec();
    let mut redis = Server::start(
        "redis-server",
        o.monitored_core,
        &tools.redis_server,
        &args,
        dir,
    )?;
    wait_for("Redis to answer PING", Duration::from_secs(20), || {
        redis_ping(port).then_some(())
    })
    .map_err(|e| match redis.check() {
        Err(why) => why,
        Ok(()) => e,
    })?;
    let fill: Vec<String> = vec![
        "-t".into(),
        "set".into(),
        "-n".into(),
        o.keys.to_string(),
        "-r".into(),
        o.keys.to_string(),
        "-d".into(),
        o.value_bytes.to_string(),
        "-c".into(),
        o.clients.to_string(),
        "-P".into(),
        "16".into(),
        "-q".into(),
    ];
    redis_benchmark(tools, o.other_core, port, &fill)?;
    Ok((redis, port))
}

fn get_args(o: &InterferenceOptions, requests: u64) -> Vec<String> {
    vec![
        "-t".into(),
        "get".into(),
        "-n".into(),
        requests.to_string(),
        "-r".into(),
        o.keys.to_string(),
        "-d".into(),
        o.value_bytes.to_string(),
        "-c".into(),
        o.clients.to_string(),
        "-P".into(),
        o.pipeline.to_string(),
        "--precision".into(),
        "3".into(),
    ]
}

/// One run: Redis, the monitor, the load, the measurements.
fn run_one(
    o: &InterferenceOptions,
    tools: &Tools,
    m: Monitor,
    requests: u64,
    dir: &Path,
) -> Result<serde_json::Value, String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let (mut redis, port) = start_redis(o, tools, dir)?;
    let mut mon = Running::start(m, o, tools, dir)?;
    mon.wait_working(m)?;
    std::thread::sleep(Duration::from_secs_f64(o.settle_secs));
    let sample = |s: &Option<Server>| s.as_ref().and_then(|s| proc_cpu(s.pid()));
    let host0 = sample(&mon.host);
    let coll0 = sample(&mon.collector);
    let redis0 = proc_cpu(redis.pid()).unwrap_or_default();
    let core0 = core_now(o.monitored_core);
    let prog0 = mon.progress(m).ok_or("the monitor stopped answering")?;
    let load0 = loadavg();
    let t0 = Instant::now();
    let out = redis_benchmark(tools, o.other_core, port, &get_args(o, requests))?;
    let wall = t0.elapsed().as_secs_f64();
    let prog1 = mon.progress(m).ok_or("the monitor stopped answering")?;
    let core1 = core_now(o.monitored_core);
    let redis1 = proc_cpu(redis.pid()).unwrap_or_default();
    let host1 = sample(&mon.host);
    let coll1 = sample(&mon.collector);
    let load1 = loadavg();
    mon.check()?;
    redis.check()?;
    let bench = parse_redis_benchmark(&out)?;
    let pct = |ns: u64| ns as f64 / (wall * 1e9) * 100.0;
    let (host_ns, rnic_thread_ns, sampler_ns) = match (&host0, &host1) {
        (Some(a), Some(b)) => {
            let pid = mon.host.as_ref().map_or(0, |s| s.pid() as u64);
            (
                b.since(a),
                b.threads_since(a, |tid, _| tid == pid),
                // "dta-agent-sample", cut to the kernel's 15 bytes.
                b.threads_since(a, |_, name| name.starts_with("dta-agent-sampl")),
            )
        }
        _ => (0, 0, 0),
    };
    let (host_ticks_ns, host_threads_exited) = match (&host0, &host1) {
        (Some(a), Some(b)) => (b.ns.saturating_sub(a.ns), b.exited(a)),
        _ => (0, 0),
    };
    let coll_ns = match (&coll0, &coll1) {
        (Some(a), Some(b)) => b.since(a),
        _ => 0,
    };
    let core_total = (core1.busy + core1.idle + core1.steal)
        .saturating_sub(core0.busy + core0.idle + core0.steal)
        .max(1);
    let agent = m == Monitor::DtaAgent;
    // With a real RNIC the NIC answers READs: what remains is everything but the software
    // RNIC's thread (the main thread).
    let real_rnic_ns = if agent {
        host_ns.saturating_sub(rnic_thread_ns)
    } else {
        host_ns
    };
    let collected = prog1.done - prog0.done;
    let due = wall * 1e3 / o.interval_ms as f64;
    Ok(json!({
        "monitor": m.key(), "label": m.label(), "requests": requests, "wall_secs": wall,
        "redis": bench,
        "monitor_cpu_ns": host_ns, "monitor_cpu_pct": pct(host_ns),
        "monitor_cpu_ticks_ns": host_ticks_ns,
        "monitor_threads_exited": host_threads_exited,
        "software_rnic_thread_cpu_ns": if agent { json!(rnic_thread_ns) } else { json!(null) },
        "software_rnic_thread_cpu_pct": if agent { json!(pct(rnic_thread_ns)) } else { json!(null) },
        "software_rnic_work_cpu_ns": if agent {
            json!(((prog1.rnic_cpu_s - prog0.rnic_cpu_s) * 1e9).round())
        } else { json!(null) },
        "sampler_thread_cpu_ns": if agent { json!(sampler_ns) } else { json!(null) },
        "real_rnic_cpu_ns": real_rnic_ns, "real_rnic_cpu_pct": pct(real_rnic_ns),
        "collector_cpu_ns": coll_ns, "collector_cpu_pct": pct(coll_ns),
        "redis_cpu_pct": pct(redis1.since(&redis0)),
        "core_busy_pct": (core1.busy.saturating_sub(core0.busy)) as f64 / core_total as f64 * 100.0,
        "core_steal_pct": (core1.steal.saturating_sub(core0.steal)) as f64 / core_total as f64 * 100.0,
        "collections": collected, "collections_due": due,
        "attempts": prog1.tried - prog0.tried,
        "reads_served": if agent { json!(prog1.tried - prog0.tried) } else { json!(null) },
        "samples_per_scrape_or_blocks": prog1.size,
        "loadavg": [load0, load1],
    }))
}

/// Runs the measurement (module docs) and writes `zero-interference.json` and `.svg` to `o.out`.
pub fn zero_interference(o: &InterferenceOptions) -> Result<(), String> {
    if o.monitors.is_empty() || o.rounds == 0 || o.secs.is_nan() || o.secs <= 0.0 {
        return Err("zero-interference: needs a monitor, a round and secs > 0".into());
    }
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    if o.monitored_core.max(o.other_core) >= cores || o.monitored_core == o.other_core {
        return Err(format!(
            "zero-interference: --monitored-core {} and --other-core {} must be two different \
             cores of the {cores} here",
            o.monitored_core, o.other_core
        ));
    }
    let tools = Tools::find(o)?;
    let work = match &o.work {
        Some(w) => w.clone(),
        None => std::env::temp_dir().join(format!("dta-zero-interference-{}", std::process::id())),
    };
    std::fs::create_dir_all(&work).map_err(|e| format!("{}: {e}", work.display()))?;
    let foreign = foreign_monitors(&[]);
    if !foreign.is_empty() {
        eprintln!(
            "zero-interference: warning: monitors or Redis servers this bench did not start are \
             running (their load is not accounted for): {}",
            foreign.join(", ")
        );
    }
    let group = match o.cpu_shares {
        0 => None,
        n => Some(CpuGroup::enter(n)?),
    };
    let result = measure(o, &tools, &work, &foreign);
    drop(group);
    if !o.keep_work {
        let _ = std::fs::remove_dir_all(&work);
    } else {
        eprintln!(
            "zero-interference: logs and data kept in {}",
            work.display()
        );
    }
    result
}

fn measure(
    o: &InterferenceOptions,
    tools: &Tools,
    work: &Path,
    foreign: &[String],
) -> Result<(), String> {
    let requests = if o.requests > 0 {
        o.requests
    } else {
        let dir = work.join("calibrate");
        std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let (_redis, port) = start_redis(o, tools, &dir)?;
        let out = redis_benchmark(tools, o.other_core, port, &get_args(o, 100_000))?;
        let b = parse_redis_benchmark(&out)?;
        let n = ((b.rps * o.secs).round() as u64).max(10_000);
        eprintln!(
            "zero-interference: calibration: {:.0} GET/s unmonitored, so {n} requests per run \
             (about {:.0} s)",
            b.rps, o.secs
        );
        n
    };
    let mut runs = Vec::new();
    let mut failed = 0;
    for round in 0..o.rounds {
        let k = o.monitors.len();
        for i in 0..k {
            let m = o.monitors[(i + round as usize) % k];
            let dir = work.join(format!("r{round}-{}", m.key()));
            let t = Instant::now();
            match run_one(o, tools, m, requests, &dir) {
                Ok(mut v) => {
                    v["round"] = json!(round);
                    v["position"] = json!(i);
                    let r = &v["redis"];
                    eprintln!(
                        "round {round} {:<48} {:>8.0} GET/s  p50 {:.3} p99 {:.3} p99.9 {:.3} ms  \
                         monitor {:.3} % of core {} (real RNIC {:.3} %)  collector {:.2} %  \
                         collected {:.0} of {:.0} due  [{:.0} s]",
                        m.label(),
                        f(&r["rps"]),
                        f(&r["p50_ms"]),
                        f(&r["p99_ms"]),
                        f(&r["p999_ms"]),
                        f(&v["monitor_cpu_pct"]),
                        o.monitored_core,
                        f(&v["real_rnic_cpu_pct"]),
                        f(&v["collector_cpu_pct"]),
                        f(&v["collections"]),
                        f(&v["collections_due"]),
                        t.elapsed().as_secs_f64()
                    );
                    runs.push(v);
                }
                Err(e) => {
                    failed += 1;
                    eprintln!("round {round} {}: FAILED: {e}", m.label());
                    runs.push(
                        json!({"monitor": m.key(), "label": m.label(), "round": round,
                                     "position": i, "error": e}),
                    );
                }
            }
        }
    }
    let summary: Vec<serde_json::Value> = o.monitors.iter().map(|&m| summarize(m, &runs)).collect();
    let v = json!({
        "machine": crate::figures::machine(),
        "options": o,
        "requests_per_run": requests,
        "versions": {
            "redis_server": Tools::version(&tools.redis_server),
            "prometheus": Tools::version(&tools.prometheus),
            "node_exporter": Tools::version(&tools.node_exporter),
        },
        "foreign_processes": foreign,
        "runs": runs,
        "summary": summary,
    });
    std::fs::create_dir_all(&o.out).map_err(|e| format!("{}: {e}", o.out.display()))?;
    let p = o.out.join("zero-interference.json");
    std::fs::write(&p, serde_json::to_string_pretty(&v).unwrap_or_default())
        .map_err(|e| format!("{}: {e}", p.display()))?;
    crate::figures::draw(&o.out, "zero-interference", &v)?;
    eprint!("{}", table(&v));
    if failed > 0 {
        return Err(format!(
            "{failed} run(s) failed (recorded in {})",
            p.display()
        ));
    }
    Ok(())
}

fn f(v: &serde_json::Value) -> f64 {
    v.as_f64().unwrap_or(f64::NAN)
}

/// Medians and spreads over the successful runs of `m`.
fn summarize(m: Monitor, runs: &[serde_json::Value]) -> serde_json::Value {
    let mine: Vec<&serde_json::Value> = runs
        .iter()
        .filter(|r| r["monitor"] == m.key() && r["error"].is_null())
        .collect();
    let s = |get: &dyn Fn(&serde_json::Value) -> f64| {
        let v: Vec<f64> = mine.iter().map(|r| get(r)).collect();
        let (median, min, max) = spread(&v);
        json!({"median": median, "min": min, "max": max})
    };
    json!({
        "monitor": m.key(), "label": m.label(), "runs": mine.len(),
        "rps": s(&|r| f(&r["redis"]["rps"])),
        "p50_ms": s(&|r| f(&r["redis"]["p50_ms"])),
        "p99_ms": s(&|r| f(&r["redis"]["p99_ms"])),
        "p999_ms": s(&|r| f(&r["redis"]["p999_ms"])),
        "max_ms": s(&|r| f(&r["redis"]["max_ms"])),
        "monitor_cpu_pct": s(&|r| f(&r["monitor_cpu_pct"])),
        "software_rnic_thread_cpu_pct": s(&|r| f(&r["software_rnic_thread_cpu_pct"])),
        "real_rnic_cpu_pct": s(&|r| f(&r["real_rnic_cpu_pct"])),
        "collector_cpu_pct": s(&|r| f(&r["collector_cpu_pct"])),
        "redis_cpu_pct": s(&|r| f(&r["redis_cpu_pct"])),
        "core_busy_pct": s(&|r| f(&r["core_busy_pct"])),
        "collections_per_due": s(&|r| f(&r["collections"]) / f(&r["collections_due"])),
    })
}

/// The summary as a Markdown table (bench/README.md).
pub fn table(v: &serde_json::Value) -> String {
    let mut t = String::from(
        "| configuration | runs | Redis GET/s | p50 ms | p99 ms | p99.9 ms | monitor CPU on the \
         monitored core (% of a core) | of it software-RNIC thread | with a real RNIC | \
         collecting side (other core) |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    let cell = |x: &serde_json::Value, digits: usize| {
        let (m, lo, hi) = (f(&x["median"]), f(&x["min"]), f(&x["max"]));
        if m.is_nan() {
            "–".to_string()
        } else {
            format!("{m:.digits$} ({lo:.digits$}–{hi:.digits$})")
        }
    };
    for s in v["summary"].as_array().into_iter().flatten() {
        t.push_str(&format!(
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |\n",
            s["label"].as_str().unwrap_or(""),
            s["runs"],
            cell(&s["rps"], 0),
            cell(&s["p50_ms"], 3),
            cell(&s["p99_ms"], 3),
            cell(&s["p999_ms"], 3),
            cell(&s["monitor_cpu_pct"], 3),
            cell(&s["software_rnic_thread_cpu_pct"], 3),
            cell(&s["real_rnic_cpu_pct"], 3),
            cell(&s["collector_cpu_pct"], 2),
        ));
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    /// redis-benchmark 7.0.15's output for `-t get -n 100000 -c 50 --precision 3` on this
    /// machine (two progress lines kept, the middle of both distributions cut).
    const OUT: &str = "GET: rps=0.0 (overall: 0.0) avg_msec=-nan (overall: -nan)\r\
GET: rps=11631.4 (overall: 11585.9) avg_msec=3.792 (overall: 3.792)\r====== GET ======
  100000 requests completed in 9.62 seconds
  50 parallel clients
  64 bytes payload
  keep alive: 1
  host configuration \"save\": 
  host configuration \"appendonly\": no
  multi-thread: no

Latency by percentile distribution:
0.000% <= 0.119 milliseconds (cumulative count 1)
50.000% <= 0.455 milliseconds (cumulative count 50046)
75.000% <= 6.863 milliseconds (cumulative count 75004)
99.219% <= 24.911 milliseconds (cumulative count 99221)
99.609% <= 36.159 milliseconds (cumulative count 99610)
99.805% <= 69.823 milliseconds (cumulative count 99805)
99.902% <= 92.223 milliseconds (cumulative count 99907)
99.951% <= 225.023 milliseconds (cumulative count 99956)
100.000% <= 225.663 milliseconds (cumulative count 100000)

Cumulative distribution of latencies:
0.000% <= 0.103 milliseconds (cumulative count 0)
0.454% <= 0.207 milliseconds (cumulative count 454)
99.609% <= 36.127 milliseconds (cumulative count 99609)
99.900% <= 80.127 milliseconds (cumulative count 99900)
99.901% <= 92.159 milliseconds (cumulative count 99901)
100.000% <= 226.175 milliseconds (cumulative count 100000)

Summary:
  throughput summary: 10399.33 requests per second
  latency summary (msec):
          avg       min       p50       p95       p99       max
        4.126     0.112     0.455    14.159    24.303   225.663
";

    #[test]
    fn parses_redis_benchmark_output() {
        let b = parse_redis_benchmark(OUT).unwrap();
        assert_eq!(b.test, "GET");
        assert_eq!((b.requests, b.clients), (100_000, 50));
        assert_eq!(b.secs, 9.62);
        assert_eq!(b.rps, 10399.33);
        assert_eq!(
            (b.avg_ms, b.min_ms, b.p50_ms, b.p95_ms, b.p99_ms, b.max_ms),
            (4.126, 0.112, 0.455, 14.159, 24.303, 225.663)
        );
        // 99,900 requests at or below 80.127 ms (the cumulative distribution) is the exact
        // p99.9; the percentile distribution alone would have said 92.223.
        assert_eq!(b.p999_ms, 80.127);
        assert_eq!(b.p999_lower_ms, 69.823);
    }

    #[test]
    fn refuses_what_is_not_a_report() {
        assert!(
            parse_redis_benchmark("GET: 10399.33 requests per second, p50=0.455 msec\n")
                .unwrap_err()
                .contains("-q")
        );
        // The summary cut off: no throughput.
        let cut = &OUT[..OUT.find("Summary:").unwrap()];
        assert!(parse_redis_benchmark(cut).is_err());
        // A distribution that does not add up to the requests completed.
        let short = OUT.replace("(cumulative count 100000)", "(cumulative count 99999)");
        assert!(parse_redis_benchmark(&short)
            .unwrap_err()
            .contains("does not reach"));
    }

    #[test]
    fn quantile_brackets() {
        let p = |ms, count| Point { ms, count };
        let pts = [p(1.0, 10), p(2.0, 50), p(3.0, 99), p(4.0, 100)];
        assert_eq!(quantile_bracket(&pts, 100, 0.5), Some((1.0, 2.0)));
        assert_eq!(quantile_bracket(&pts, 100, 0.99), Some((2.0, 3.0)));
        assert_eq!(quantile_bracket(&pts, 100, 0.999), Some((3.0, 4.0)));
        assert_eq!(quantile_bracket(&pts, 100, 0.01), Some((0.0, 1.0)));
        assert_eq!(quantile_bracket(&[], 100, 0.5), None);
    }

    #[test]
    fn proc_parsing() {
        // The command name may hold spaces and parentheses.
        let stat = "4242 (redis-server (x) 1) S 1 4242 4242 0 -1 4194560 300 0 0 0 \
                    1234 56 0 0 20 0 5 0 100 0 0";
        assert_eq!(stat_cpu_ticks(stat), Some(1290));
        assert_eq!(stat_cpu_ticks("4242 (x) S 1"), None);
        let ps = "cpu  10 0 10 100 0 0 0 0 0 0\ncpu0 1 2 3 4 5 6 7 8 0 0\n\
                  cpu1 100 1 50 1000 3 2 4 9 0 0\nintr 1 2\n";
        assert_eq!(
            core_ticks(ps, 1),
            Some(CoreTicks {
                busy: 100 + 1 + 50 + 2 + 4,
                idle: 1003,
                steal: 9
            })
        );
        assert_eq!(core_ticks(ps, 2), None);
    }

    #[test]
    fn prometheus_text_and_queries() {
        let page = "# HELP dta_pull_rounds_done_total Rounds.\n\
                    # TYPE dta_pull_rounds_done_total counter\n\
                    dta_pull_rounds_done_total{thread=\"0\"} 7\n\
                    dta_pull_rounds_done_total{thread=\"1\"} 5\n\
                    dta_pull_rounds_done_total_extra 100\n\
                    dta_agent_rnic_reads_total 42\n";
        assert_eq!(prom_sum(page, "dta_pull_rounds_done_total"), Some(12.0));
        assert_eq!(prom_sum(page, "dta_agent_rnic_reads_total"), Some(42.0));
        assert_eq!(prom_sum(page, "dta_agent_rnic"), None);
        let q = r#"{"status":"success","data":{"resultType":"vector","result":[{"metric":{},"value":[1700000000.1,"61"]}]}}"#;
        assert_eq!(prom_query_value(q), Some(61.0));
        assert_eq!(
            prom_query_value(r#"{"status":"success","data":{"result":[]}}"#),
            None
        );
        assert_eq!(
            url_encode("up{job=\"node\"}[1h]"),
            "up%7Bjob%3D%22node%22%7D%5B1h%5D"
        );
    }

    #[test]
    fn process_cpu_from_ticks_and_threads() {
        let t = |tid: u64, ns: u64| (tid, format!("t{tid}"), ns);
        let before = ProcCpu {
            ns: 10_000_000,
            threads: vec![t(1, 4_000_000), t(2, 6_000_000)],
        };
        // Same threads: their nanoseconds (ticks floored to 0 more here).
        let after = ProcCpu {
            ns: 10_000_000,
            threads: vec![t(1, 7_500_000), t(2, 6_100_000), t(3, 200_000)],
        };
        assert_eq!(after.exited(&before), 0);
        assert_eq!(after.since(&before), 3_500_000 + 100_000 + 200_000);
        assert_eq!(after.threads_since(&before, |tid, _| tid == 1), 3_500_000);
        // Thread 2 exited after working: utime + stime kept its time.
        let after = ProcCpu {
            ns: 40_000_000,
            threads: vec![t(1, 7_500_000)],
        };
        assert_eq!(after.exited(&before), 1);
        assert_eq!(after.since(&before), 30_000_000);
        // An idle thread exited: the threads' finer sum.
        let after = ProcCpu {
            ns: 10_000_000,
            threads: vec![t(1, 7_500_000)],
        };
        assert_eq!(after.since(&before), 3_500_000);
    }

    #[test]
    fn prometheus_scrapes_at_the_interval() {
        let c = prometheus_config(100, 9100);
        assert!(
            c.contains("  scrape_interval: 100ms\n  scrape_timeout: 100ms\n"),
            "{c}"
        );
        assert!(c.contains("      - targets: [\"127.0.0.1:9100\"]\n"), "{c}");
        assert!(prometheus_config(1000, 1).contains("scrape_interval: 1000ms"));
    }

    #[test]
    fn spreads() {
        assert_eq!(spread(&[3.0, 1.0, 2.0]), (2.0, 1.0, 3.0));
        assert_eq!(spread(&[4.0, 1.0, 2.0, 3.0]), (2.5, 1.0, 4.0));
        assert!(spread(&[f64::NAN]).0.is_nan());
    }
}
