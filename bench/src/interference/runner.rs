//! The measurement: Redis and redis-benchmark started, each monitor run in rotated rounds, its
//! window's CPU and latency taken, and the results written (`zero_interference`).

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::json;

use super::host::{
    core_now, foreign_monitors, free_tcp_port, loadavg, pinned, proc_cpu, redis_ping, wait_for,
    CpuGroup, Server, Tools,
};
use super::monitors::Running;
use super::parse::parse_redis_benchmark;
use super::report::{f, summarize, table};
use super::*;

/// Runs redis-benchmark pinned to `core`; its stdout.
pub(super) fn redis_benchmark(
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
pub(super) fn start_redis(
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

pub(super) fn get_args(o: &InterferenceOptions, requests: u64) -> Vec<String> {
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
pub(super) fn run_one(
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

pub(super) fn measure(
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
