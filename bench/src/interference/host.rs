//! The monitored host's plumbing: the cgroup `cpu` group, pinned and parent-death-signalled
//! servers with their logs, free ports, plain HTTP GETs, per-process and per-core CPU from
//! `/proc`, and finding the tools (and monitors left running by someone else).

use std::fs::File;
use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::parse::{core_ticks, stat_cpu_ticks, CoreTicks};
use super::*;

pub(super) const CPU_CGROUP: &str = "/sys/fs/cgroup/cpu";

/// A cgroup v1 `cpu` group holding this process, so every process it starts from now on
/// (module docs, [`InterferenceOptions::cpu_shares`]). Dropping it moves this process back to
/// the root group and removes the group (its other members are gone by then).
pub(super) struct CpuGroup {
    pub(super) dir: PathBuf,
}

impl CpuGroup {
    pub(super) fn enter(shares: u64) -> Result<CpuGroup, String> {
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
pub(super) fn pinned(core: usize, program: &Path) -> Vec<String> {
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
pub(super) struct Server {
    pub(super) name: String,
    pub(super) child: Child,
    pub(super) log: PathBuf,
}

impl Server {
    /// Starts `program args` pinned to `core`, its output in `dir/NAME.log`.
    pub(super) fn start(
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

    pub(super) fn pid(&self) -> u32 {
        self.child.id()
    }

    /// An error naming the server and the end of its log if it has exited.
    pub(super) fn check(&mut self) -> Result<(), String> {
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

pub(super) fn log_tail(p: &Path) -> String {
    let s = std::fs::read_to_string(p).unwrap_or_default();
    let lines: Vec<&str> = s.lines().rev().take(3).collect();
    lines.into_iter().rev().collect::<Vec<_>>().join(" | ")
}

/// A TCP port on 127.0.0.1 that nothing listens on right now.
pub(super) fn free_tcp_port() -> Result<u16, String> {
    let l = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).map_err(|e| e.to_string())?;
    Ok(l.local_addr().map_err(|e| e.to_string())?.port())
}

pub(super) fn loopback(port: u16) -> SocketAddr {
    SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::LOCALHOST, port))
}

/// `GET path` on 127.0.0.1:`port`: the body of a 200 answer.
pub(super) fn http_get(port: u16, path: &str) -> Result<String, String> {
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
pub(super) fn url_encode(s: &str) -> String {
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
pub(super) fn wait_for<T>(
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
pub(super) fn redis_ping(port: u16) -> bool {
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
pub(super) struct ProcCpu {
    pub(super) ns: u64,
    pub(super) threads: Vec<(u64, String, u64)>,
}

pub(super) fn proc_cpu(pid: u32) -> Option<ProcCpu> {
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
    pub(super) fn since(&self, before: &ProcCpu) -> u64 {
        let threads = self.threads_since(before, |_, _| true);
        if self.exited(before) == 0 && !self.threads.is_empty() {
            threads
        } else {
            threads.max(self.ns.saturating_sub(before.ns))
        }
    }

    /// Threads of `before` that are gone.
    pub(super) fn exited(&self, before: &ProcCpu) -> usize {
        before
            .threads
            .iter()
            .filter(|(t, _, _)| !self.threads.iter().any(|(u, _, _)| u == t))
            .count()
    }

    /// Thread CPU (ns) between samples of the threads `pick` selects (by tid and name).
    pub(super) fn threads_since(&self, before: &ProcCpu, pick: impl Fn(u64, &str) -> bool) -> u64 {
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
pub(super) fn core_now(core: usize) -> CoreTicks {
    std::fs::read_to_string("/proc/stat")
        .ok()
        .and_then(|s| core_ticks(&s, core))
        .unwrap_or_default()
}

pub(super) fn loadavg() -> f64 {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| s.split_whitespace().next().and_then(|v| v.parse().ok()))
        .unwrap_or(f64::NAN)
}

/// Paths of the programs a run needs.
#[derive(Debug, Clone)]
pub(super) struct Tools {
    pub(super) redis_server: PathBuf,
    pub(super) redis_benchmark: PathBuf,
    pub(super) prometheus: PathBuf,
    pub(super) node_exporter: PathBuf,
    pub(super) agent: PathBuf,
    pub(super) collector: PathBuf,
}

pub(super) fn which(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .chain([PathBuf::from("/usr/sbin"), PathBuf::from("/usr/bin")])
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

impl Tools {
    pub(super) fn find(o: &InterferenceOptions) -> Result<Tools, String> {
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
    pub(super) fn version(program: &Path) -> String {
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
pub(super) fn foreign_monitors(ours: &[u32]) -> Vec<String> {
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
