//! `dta bench zero`: ZERO-mode pulling (one-sided RDMA READ from `dta-agent`s) on the software
//! RNIC, in one process: agents on their own loopback addresses (127.0.64.0/18), served by two
//! agent threads, each agent's blocks updated by a writer thread; the pull collector with one
//! collecting thread.
//!
//! Two measurements:
//!
//! - **capacity**: for each agent count, pull every agent every `interval` and measure the
//!   collecting thread's CPU per round (one round reads every block of one agent once). One
//!   thread sustains `interval / CPU per round` agents at that interval (the paper: one thread,
//!   1–10 k hosts at 0.1–1 s). Rounds completed against rounds due shows whether this run kept
//!   up, on a machine whose two cores also run the agents.
//! - **incast**: every agent holds one 64 KiB block and all are due at once, into a collecting
//!   socket with a small receive buffer (the bottleneck's buffer); the same run with and
//!   without Credit-FC: READ latency quantiles, kernel drops, retries.
//!
//! The agents' own cost (software RNIC CPU per READ served) is reported from their counters;
//! on a real RNIC it is zero (the NIC answers READs).

use std::net::{Ipv4Addr, SocketAddrV4};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use dta_agent::region::AgentRegion;
use dta_agent::server::{AgentOptions, AgentPoller, AgentServer};
use dta_collector::allow::PeerAllowlist;
use dta_collector::zero::puller::{AgentSpec, PullConfig, PullStats, Puller};
use dta_proto::zero::MetricKind;
use serde_json::json;

use crate::figures::FigOptions;

/// The agents' rdma_cm port.
pub const CM_PORT: u16 = 7700;

/// Agent `k`'s RoCEv2 address.
pub fn agent_addr(k: usize) -> SocketAddrV4 {
    SocketAddrV4::new(
        Ipv4Addr::new(
            127,
            64 + (k / 250 / 250) as u8,
            (k / 250 % 250) as u8,
            1 + (k % 250) as u8,
        ),
        4791,
    )
}

/// Value `i` of a block after its `c`-th update by agent `k` (what tests check pulls against).
pub fn agent_value(k: usize, c: u64, i: usize) -> u64 {
    c.wrapping_mul(i as u64 + 1).wrapping_add((k as u64) << 40)
}

/// Agents running in this process (module docs).
pub struct AgentFleet {
    stop: Arc<AtomicBool>,
    threads: Vec<std::thread::JoinHandle<Vec<AgentServer>>>,
    writer: Option<std::thread::JoinHandle<()>>,
    /// The agents' addresses and names.
    pub specs: Vec<AgentSpec>,
    servers: Vec<AgentServer>,
}

impl AgentFleet {
    /// `n` agents, each with `blocks` blocks of `entries` values (`b0`, `b1`, …), updated every
    /// `update` (zero: as fast as the writer goes), served by `threads` threads.
    pub fn start(
        n: usize,
        blocks: usize,
        entries: u32,
        update: Duration,
        threads: usize,
    ) -> Result<AgentFleet, String> {
        AgentFleet::start_at(0, n, blocks, entries, update, threads)
    }

    /// [`AgentFleet::start`] on the addresses of agents `first..first + n` (fleets that run at
    /// once need their own); values are still those of agents `0..n`.
    pub fn start_at(
        first: usize,
        n: usize,
        blocks: usize,
        entries: u32,
        update: Duration,
        threads: usize,
    ) -> Result<AgentFleet, String> {
        let stop = Arc::new(AtomicBool::new(false));
        let mut servers = Vec::with_capacity(n);
        let mut writers = Vec::with_capacity(n * blocks);
        let mut specs = Vec::with_capacity(n);
        let per_block = dta_proto::zero::block_len(entries);
        for k in 0..n {
            let cap = 64 + 64 * blocks + per_block * blocks + 4096;
            let region = AgentRegion::new(cap, blocks as u16).map_err(|e| e.to_string())?;
            for b in 0..blocks {
                let w = region
                    .register_array(&format!("b{b}"), entries, MetricKind::Counter, 1)
                    .map_err(|e| e.to_string())?;
                writers.push((k, w));
            }
            let addr = agent_addr(first + k);
            let opts = AgentOptions {
                cm_port: CM_PORT,
                allow: PeerAllowlist::any(),
                socket_buffer: 256 << 10,
                ..AgentOptions::default()
            };
            servers.push(
                AgentServer::bind_with(addr, &region, &opts)
                    .map_err(|e| format!("agent {k} at {addr}: {e}"))?,
            );
            specs.push(AgentSpec {
                name: format!("agent{k}"),
                roce: addr,
                cm_port: CM_PORT,
            });
        }
        let writer = {
            let stop = stop.clone();
            std::thread::Builder::new()
                .name("zero-writer".into())
                .spawn(move || {
                    let mut c = 0u64;
                    let mut vals = vec![0u64; entries as usize];
                    while !stop.load(Ordering::Relaxed) {
                        c += 1;
                        let t0 = Instant::now();
                        for (k, w) in writers.iter_mut() {
                            for (i, v) in vals.iter_mut().enumerate() {
                                *v = agent_value(*k, c, i);
                            }
                            w.publish(&vals);
                        }
                        if let Some(rest) = update.checked_sub(t0.elapsed()) {
                            std::thread::sleep(rest);
                        }
                    }
                })
                .map_err(|e| e.to_string())?
        };
        let mut fleet = AgentFleet {
            stop,
            threads: Vec::new(),
            writer: Some(writer),
            specs,
            servers: Vec::new(),
        };
        let per = n.div_ceil(threads.max(1));
        let mut rest = servers;
        while !rest.is_empty() {
            let tail = rest.split_off(per.min(rest.len()));
            let mut mine = std::mem::replace(&mut rest, tail);
            let stop = fleet.stop.clone();
            fleet.threads.push(
                std::thread::Builder::new()
                    .name("zero-agents".into())
                    .spawn(move || {
                        let mut p = AgentPoller::new();
                        if let Err(e) = p.run(&mut mine, &stop) {
                            log::error!("agent poller: {e}");
                        }
                        mine
                    })
                    .map_err(|e| e.to_string())?,
            );
        }
        Ok(fleet)
    }

    /// Stops the agents; returns (READs served, agent RNIC CPU ns) over all agents.
    pub fn stop(mut self) -> (u64, u64) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            if let Ok(s) = t.join() {
                self.servers.extend(s);
            }
        }
        if let Some(w) = self.writer.take() {
            let _ = w.join();
        }
        self.servers.iter().fold((0, 0), |(r, c), s| {
            let k = s.counters();
            (r + k.rnic.reads, c + k.cpu_ns)
        })
    }
}

impl Drop for AgentFleet {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
        if let Some(w) = self.writer.take() {
            let _ = w.join();
        }
    }
}

/// A puller configuration for `fleet` from 127.0.63.1.
pub fn pull_config(fleet: &AgentFleet, interval: Duration) -> PullConfig {
    PullConfig::new(
        SocketAddrV4::new(Ipv4Addr::new(127, 0, 63, 1), 0),
        fleet.specs.clone(),
        interval,
    )
}

/// Waits until every agent is connected (or `timeout`).
pub fn wait_up(p: &Puller, n: usize, timeout: Duration) -> bool {
    let t0 = Instant::now();
    while t0.elapsed() < timeout {
        if p.stats().agents_up as usize >= n {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    false
}

/// Starts a puller and waits until its `n` agents are connected and their first rounds done.
fn start_connected(cfg: PullConfig, n: usize) -> Result<Puller, String> {
    let p = Puller::start(cfg, None)?;
    if !wait_up(&p, n, Duration::from_secs(30)) {
        return Err(format!(
            "only {} of {n} agents connected",
            p.stats().agents_up
        ));
    }
    std::thread::sleep(Duration::from_millis(300));
    Ok(p)
}

fn stats_json(s: &PullStats) -> serde_json::Value {
    let q = |h: &dta_collector::zero::puller::LatencyHist| {
        json!({
            "p50_us": h.quantile(0.5) as f64 / 1e3, "p90_us": h.quantile(0.9) as f64 / 1e3,
            "p99_us": h.quantile(0.99) as f64 / 1e3, "p999_us": h.quantile(0.999) as f64 / 1e3,
            "max_us": h.quantile(1.0) as f64 / 1e3, "count": h.count(),
        })
    };
    json!({
        "rounds": s.pull.rounds, "rounds_done": s.pull.rounds_done,
        "rounds_overrun": s.pull.rounds_overrun, "blocks_pulled": s.pull.blocks_pulled,
        "blocks_in_progress": s.pull.blocks_in_progress, "blocks_torn": s.pull.blocks_torn,
        "blocks_given_up": s.pull.blocks_given_up, "qp_faults": s.pull.qp_faults,
        "reads": s.reads.reads, "read_retries": s.reads.read_retries,
        "timeouts": s.reads.timeouts, "gaps": s.reads.gaps,
        "kernel_drops": s.kernel_drops, "credit_waits": s.credit_waits,
        "in_flight_high_water": s.in_flight_high_water,
        "collect_cpu_ns": s.collect_cpu_ns, "event_waits": s.pull.event_waits,
        "busy_polls": s.pull.busy_polls,
        "read_latency": q(&s.read_latency), "round_latency": q(&s.round_latency),
    })
}

/// One capacity point: `n` agents (2 blocks: 16 and 10 values, like `net/eth0` and `cpu`)
/// pulled every `interval` for `secs`.
pub fn capacity_point(
    n: usize,
    interval: Duration,
    secs: f64,
) -> Result<serde_json::Value, String> {
    let fleet = AgentFleet::start(n, 2, 16, Duration::from_millis(10), 2)?;
    let mut cfg = pull_config(&fleet, interval);
    cfg.control_every = 1_000_000;
    let p = start_connected(cfg, n)?;
    let s0 = p.stats();
    let t0 = Instant::now();
    std::thread::sleep(Duration::from_secs_f64(secs));
    let s1 = p.stats();
    let wall = t0.elapsed().as_secs_f64();
    p.stop();
    let (reads, agent_cpu) = fleet.stop();
    let rounds = s1.pull.rounds_done - s0.pull.rounds_done;
    let due = (n as f64 * wall / interval.as_secs_f64()).round();
    let cpu = s1.collect_cpu_ns - s0.collect_cpu_ns;
    let cpu_per_round = cpu as f64 / rounds.max(1) as f64;
    let reads_per_round = (s1.reads.reads - s0.reads.reads) as f64 / rounds.max(1) as f64;
    let sustain_1s = 1e9 / cpu_per_round.max(1.0);
    eprintln!(
        "zero capacity: {n:>5} agents every {:>4} ms: {rounds} rounds in {wall:.1} s ({:.0} % of \
         {due:.0} due), collector CPU {:.2} us/round ({reads_per_round:.1} READs), round p50 \
         {:.0} us p99 {:.0} us; one thread sustains {:.0} agents at 1 s, {:.0} at 100 ms; agent \
         RNIC {:.2} us CPU/READ",
        interval.as_millis(),
        100.0 * rounds as f64 / due.max(1.0),
        cpu_per_round / 1e3,
        s1.round_latency.quantile(0.5) as f64 / 1e3,
        s1.round_latency.quantile(0.99) as f64 / 1e3,
        sustain_1s,
        sustain_1s / 10.0,
        agent_cpu as f64 / reads.max(1) as f64 / 1e3,
    );
    Ok(json!({
        "agents": n, "interval_ms": interval.as_millis() as u64, "secs": wall,
        "rounds_done": rounds, "rounds_due": due,
        "collect_cpu_ns_per_round": cpu_per_round, "reads_per_round": reads_per_round,
        "sustainable_agents_at_1s": sustain_1s,
        "agent_rnic_ns_per_read": agent_cpu as f64 / reads.max(1) as f64,
        "stats": stats_json(&s1),
    }))
}

/// One incast point: `n` agents with one 64 KiB block each, all due at once every
/// `interval`, into a collecting socket with `rcvbuf` bytes of buffer; Credit-FC on (T =
/// `credit`) or off.
pub fn incast_point(
    n: usize,
    interval: Duration,
    rcvbuf: usize,
    credit: Option<u64>,
    secs: f64,
) -> Result<serde_json::Value, String> {
    let entries = dta_proto::zero::MAX_ENTRIES;
    let fleet = AgentFleet::start(n, 1, entries, Duration::from_millis(50), 2)?;
    let mut cfg = pull_config(&fleet, interval);
    cfg.control_every = 1_000_000;
    cfg.rcvbuf = rcvbuf;
    cfg.credit_fc = credit.is_some();
    cfg.credit_bytes = credit.unwrap_or(256 << 10);
    cfg.read_retries = 50;
    let p = start_connected(cfg, n)?;
    std::thread::sleep(Duration::from_secs_f64(secs));
    let s = p.stop();
    let (reads, agent_cpu) = fleet.stop();
    let label = match credit {
        Some(t) => format!("Credit-FC T = {} KiB", t >> 10),
        None => "no Credit-FC".to_string(),
    };
    eprintln!(
        "zero incast: {n} agents x 64 KiB every {} ms, rcvbuf {} KiB, {label}: READ p50 {:.0} us \
         p99 {:.0} us p99.9 {:.0} us max {:.0} us; rounds {} done of {}; kernel drops {}, READ \
         retries {}, timeouts {}, QP faults {}, in flight at most {} KiB; agent RNIC {:.2} us CPU/READ",
        interval.as_millis(),
        rcvbuf >> 10,
        s.read_latency.quantile(0.5) as f64 / 1e3,
        s.read_latency.quantile(0.99) as f64 / 1e3,
        s.read_latency.quantile(0.999) as f64 / 1e3,
        s.read_latency.quantile(1.0) as f64 / 1e3,
        s.pull.rounds_done,
        s.pull.rounds,
        s.kernel_drops,
        s.reads.read_retries,
        s.reads.timeouts,
        s.pull.qp_faults,
        s.in_flight_high_water >> 10,
        agent_cpu as f64 / reads.max(1) as f64 / 1e3,
    );
    Ok(json!({
        "agents": n, "interval_ms": interval.as_millis() as u64, "rcvbuf": rcvbuf,
        "credit_fc": credit.is_some(), "credit_bytes": credit, "label": label,
        "agent_rnic_ns_per_read": agent_cpu as f64 / reads.max(1) as f64,
        "stats": stats_json(&s),
    }))
}

/// Runs both measurements; writes `zero.json` and the figure (`zero.svg`: collector CPU per
/// round and sustainable agents; `zero-2.svg`: READ latency quantiles under incast with and
/// without Credit-FC) to `o.out`.
pub fn zero(o: &FigOptions, agents: &[usize]) -> Result<(), String> {
    std::fs::create_dir_all(&o.out).map_err(|e| format!("{}: {e}", o.out.display()))?;
    let mut capacity = Vec::new();
    for &n in agents {
        // 100 ms for up to 1000 agents (10 k rounds/s), 1 s beyond.
        let interval = if n <= 1000 {
            Duration::from_millis(100)
        } else {
            Duration::from_secs(1)
        };
        capacity.push(capacity_point(n, interval, 3.0)?);
    }
    let n = 100;
    let (interval, rcvbuf) = (Duration::from_millis(250), 256 << 10);
    let incast = vec![
        incast_point(n, interval, rcvbuf, Some(256 << 10), 4.0)?,
        incast_point(n, interval, rcvbuf, None, 4.0)?,
        // The first again: the machine's drift over the run.
        incast_point(n, interval, rcvbuf, Some(256 << 10), 4.0)?,
    ];
    let v = json!({
        "machine": crate::figures::machine(),
        "capacity": capacity,
        "incast": incast,
    });
    let p = o.out.join("zero.json");
    std::fs::write(&p, serde_json::to_string_pretty(&v).unwrap_or_default())
        .map_err(|e| format!("{}: {e}", p.display()))?;
    crate::figures::draw(&o.out, "zero", &v)?;
    Ok(())
}
