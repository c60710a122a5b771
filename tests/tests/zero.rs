//! ZERO mode end to end (issue 18): 100 `dta-agent`s in this process, each on its own loopback
//! address with its own software RNIC and RC QP, their blocks rewritten continuously by a
//! writer thread, pulled with RDMA READ by the pull collector.
//!
//! Checked: every snapshot the puller passes on equals what the agent wrote at that snapshot's
//! sequence (the values are a function of the update count, `seq / 2`), so a torn or mixed read
//! that slipped through would fail; Credit-FC never lets more than T bytes be in flight (the
//! puller asserts it at every grant; the high-water mark is checked here) while a T far
//! smaller than one round's bytes makes READs wait for credits; and the collector's `[pull]`
//! section serves the snapshots over HTTP and `/metrics`.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddrV4, TcpStream};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use dta_bench::zerobench::{agent_value, pull_config, wait_up, AgentFleet};
use dta_collector::zero::puller::{Puller, SnapshotHook, SnapshotRef};

const AGENTS: usize = 100;

/// Pulls `fleet` with `cfg` for `secs`, checking every snapshot; returns (snapshots, stats).
fn pull_and_check(
    fleet: &AgentFleet,
    cfg: dta_collector::zero::puller::PullConfig,
    secs: u64,
) -> (u64, dta_collector::zero::puller::PullStats, Vec<u64>) {
    let n = fleet.specs.len();
    let seen = Arc::new(AtomicU64::new(0));
    let bad = Arc::new(Mutex::new(Vec::<String>::new()));
    let per_agent = Arc::new(Mutex::new(vec![0u64; n]));
    let hook: SnapshotHook = {
        let (seen, bad, per_agent) = (seen.clone(), bad.clone(), per_agent.clone());
        Box::new(move |s: &SnapshotRef<'_>| {
            seen.fetch_add(1, Ordering::Relaxed);
            per_agent.lock().unwrap()[s.agent] += 1;
            let c = s.seq / 2;
            if !s.seq.is_multiple_of(2)
                || s.values.len() != s.block.entries as usize
                || s.values.iter().enumerate().any(|(i, &v)| {
                    v != if c == 0 {
                        0
                    } else {
                        agent_value(s.agent, c, i)
                    }
                })
            {
                let mut b = bad.lock().unwrap();
                if b.len() < 5 {
                    b.push(format!(
                        "agent {} block {} seq {}: {:?}",
                        s.agent,
                        s.block.name,
                        s.seq,
                        &s.values[..s.values.len().min(4)]
                    ));
                }
            }
        })
    };
    let p = Puller::start(cfg, Some(hook)).expect("puller");
    assert!(
        wait_up(&p, n, Duration::from_secs(60)),
        "agents up: {} of {n}",
        p.stats().agents_up
    );
    std::thread::sleep(Duration::from_secs(secs));
    let st = p.stop();
    let bad = bad.lock().unwrap().clone();
    assert!(
        bad.is_empty(),
        "pulled values the agents never wrote: {bad:?}"
    );
    let per = per_agent.lock().unwrap().clone();
    (seen.load(Ordering::Relaxed), st, per)
}

#[test]
fn a_hundred_agents_pulled_every_snapshot_exact_and_credits_bound_in_flight_bytes() {
    // Two blocks per agent (16 and 16 values), rewritten every millisecond.
    let fleet = AgentFleet::start(AGENTS, 2, 16, Duration::from_millis(1), 2).expect("agents");
    let mut cfg = pull_config(&fleet, Duration::from_millis(20));
    cfg.credit_bytes = 96 << 10;
    let t = cfg.credit_bytes;
    let (seen, st, per) = pull_and_check(&fleet, cfg, 4);
    eprintln!(
        "{seen} snapshots; {:?}\n{:?}\nREAD p50 {} us p99 {} us",
        st.pull,
        st.reads,
        st.read_latency.quantile(0.5) / 1000,
        st.read_latency.quantile(0.99) / 1000
    );
    assert_eq!(st.agents_up as usize, AGENTS);
    assert!(
        per.iter().all(|&k| k >= 20),
        "every agent is pulled, many times: {per:?}"
    );
    assert!(
        st.in_flight_high_water <= t,
        "{} > T",
        st.in_flight_high_water
    );
    assert_eq!(st.pull.qp_faults, 0);
    assert!(st.pull.rounds_done > (AGENTS * 50) as u64, "{:?}", st.pull);

    // Incast: one 64 KiB block per agent, T = 256 KiB, so one round (6.4 MB) must wait for
    // credits again and again: in flight never exceeds T.
    drop(fleet);
    let fleet = AgentFleet::start(
        AGENTS,
        1,
        dta_proto::zero::MAX_ENTRIES,
        Duration::from_millis(5),
        2,
    )
    .expect("agents");
    let mut cfg = pull_config(&fleet, Duration::from_millis(200));
    cfg.credit_bytes = 256 << 10;
    let t = cfg.credit_bytes;
    let (seen, st, per) = pull_and_check(&fleet, cfg, 3);
    eprintln!(
        "incast: {seen} snapshots; {:?}\ncredit waits {}",
        st.pull, st.credit_waits
    );
    assert!(per.iter().all(|&k| k >= 3), "{per:?}");
    assert!(
        st.credit_waits > 0,
        "T far below a round's bytes: READs wait"
    );
    assert!(
        st.in_flight_high_water <= t,
        "{} > T",
        st.in_flight_high_water
    );
    assert!(
        st.in_flight_high_water >= 64 << 10,
        "credits are used: {}",
        st.in_flight_high_water
    );
}

fn http_get(addr: SocketAddrV4, path: &str) -> (u16, String) {
    let mut s = TcpStream::connect(addr).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut r = String::new();
    s.read_to_string(&mut r).unwrap();
    let status = r[9..12].parse().unwrap();
    let body = r
        .split_once("\r\n\r\n")
        .map(|x| x.1)
        .unwrap_or("")
        .to_string();
    (status, body)
}

#[test]
fn the_collectors_pull_section_serves_snapshots_over_http_and_metrics() {
    // Addresses apart from the other test's fleets (tests run at once).
    let fleet = AgentFleet::start_at(1000, 3, 2, 16, Duration::from_millis(5), 1).expect("agents");
    let control = SocketAddrV4::new(
        Ipv4Addr::LOCALHOST,
        dta_tests::harness::free_port(Ipv4Addr::LOCALHOST),
    );
    let mut agents = String::new();
    for a in &fleet.specs {
        agents += &format!(
            "[[pull.agent]]\nname = \"{}\"\nroce = \"{}\"\ncm_port = {}\n",
            a.name, a.roce, a.cm_port
        );
    }
    let toml = format!(
        r#"
[collector]
hugepages = false
roce = "127.0.62.1:{roce}"
control = "{control}"
[pull]
listen = "127.0.62.2:0"
interval_ms = 20
{agents}"#,
        roce = dta_tests::harness::free_port(Ipv4Addr::new(127, 0, 62, 1)),
    );
    let cfg = dta_collector::config::CollectorConfig::from_toml(&toml).expect("config");
    let c = dta_collector::Collector::start(cfg).expect("collector");
    let p = c.pull().expect("puller");
    assert!(wait_up(p, 3, Duration::from_secs(20)));
    std::thread::sleep(Duration::from_millis(500));
    let (st, body) = http_get(control, "/pull/agent1/b0");
    assert_eq!(st, 200, "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    let b = &v["blocks"][0];
    assert_eq!(b["name"], "b0");
    let seq = b["seq"].as_u64().unwrap();
    let vals: Vec<u64> = b["values"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap())
        .collect();
    assert_eq!(
        vals,
        (0..16)
            .map(|i| agent_value(1, seq / 2, i))
            .collect::<Vec<_>>()
    );
    assert!(
        b["rates_per_s"].is_array(),
        "a counter block has rates: {b}"
    );
    let (st, body) = http_get(control, "/pull/nobody");
    assert_eq!(st, 404, "{body}");
    let (st, metrics) = http_get(control, "/metrics");
    assert_eq!(st, 200);
    for m in [
        "dta_pull_blocks_pulled_total",
        "dta_pull_agents_up 3",
        "dta_pull_read_latency_seconds{quantile=\"0.99\"}",
        "dta_pull_in_flight_high_water_bytes",
    ] {
        assert!(metrics.contains(m), "{m} missing from /metrics");
    }
    if let Some(r) = dta_io::process::promtool_check_metrics(&metrics) {
        r.expect("promtool check metrics");
    } else {
        eprintln!("promtool not installed: the page's syntax is not checked by it");
    }
    drop(c);
    drop(fleet);
}

/// Publishes `vals` as the sample the agent took at `agent_ns` on its own clock.
fn publish_sample(w: &mut dta_agent::ArrayWriter, vals: &[u64], agent_ns: u64) {
    w.publish_at(vals, agent_ns);
}

/// Issue 28, part 5: counter rates come from the agent's sample clock, not the collector's
/// arrival times. The agent samples every 100 ms *of its own clock*, which runs 10 % slow
/// against the puller's (100 agent-ms take 110 real ms, with ±15 ms of jitter) and starts
/// 7.3 s off; the puller reads every 100 ms at whatever phase that gives. Each sample adds
/// exactly 10 per agent-ms to entry 0 and 3 per agent-ms to entry 1, so every rate must be
/// exactly 10,000/s and 3,000/s. On arrival times a read that crosses a sample edge gives
/// about 2× or 0.5×, and every rate is ~10 % off.
#[test]
fn counter_rates_use_the_agents_sample_clock_through_offset_and_drift() {
    use dta_agent::region::AgentRegion;
    use dta_agent::server::{AgentOptions, AgentPoller, AgentServer};
    use dta_collector::zero::puller::{AgentSpec, PullConfig};
    use dta_proto::zero::MetricKind;
    use std::sync::atomic::AtomicBool;
    use std::time::Instant;

    let addr = SocketAddrV4::new(Ipv4Addr::new(127, 0, 61, 7), 4791);
    let region = AgentRegion::new(64 << 10, 4).expect("region");
    let mut w = region
        .register_array("ctr", 2, MetricKind::Counter, 100)
        .expect("block");
    let opts = AgentOptions {
        cm_port: 7700,
        allow: dta_collector::allow::PeerAllowlist::any(),
        ..AgentOptions::default()
    };
    let server = AgentServer::bind_with(addr, &region, &opts).expect("agent");
    let stop = Arc::new(AtomicBool::new(false));
    let serve = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let mut s = vec![server];
            AgentPoller::new().run(&mut s, &stop).expect("agent poller");
        })
    };
    // The agent's clock: 7.3 s ahead at its first sample; its samples 100 agent-ms apart
    // give or take up to 15 agent-ms (a sampler woken late), each 1.1× as long in real time.
    let sampler = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let mut agent_ms: u64 = 7_300;
            let mut k = 0u64;
            let t0 = Instant::now();
            let mut real_ms = 0f64;
            while !stop.load(Ordering::Relaxed) {
                publish_sample(&mut w, &[10 * agent_ms, 3 * agent_ms], agent_ms * 1_000_000);
                k += 1;
                let step = 100 + (k * 7919 % 31) - 15;
                agent_ms += step;
                real_ms += 1.1 * step as f64;
                let due = t0 + Duration::from_micros((real_ms * 1000.0) as u64);
                std::thread::sleep(due.saturating_duration_since(Instant::now()));
            }
        })
    };
    let mut cfg = PullConfig::new(
        SocketAddrV4::new(Ipv4Addr::new(127, 0, 61, 1), 0),
        vec![AgentSpec {
            name: "drifting".into(),
            roce: addr,
            cm_port: 7700,
        }],
        Duration::from_millis(100),
    );
    cfg.control_every = 1_000_000;
    let p = Puller::start(cfg, None).expect("puller");
    assert!(
        wait_up(&p, 1, Duration::from_secs(20)),
        "the agent connects"
    );
    // Every distinct (newest, previous) pair the store shows, with its rates.
    let mut seen: Vec<(u64, u64, Vec<f64>)> = Vec::new();
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_millis(4000) {
        p.store().with_agents(|a| {
            let Some(b) = a[0].blocks.first() else {
                return;
            };
            let (Some(last), Some(prev), Some(r)) = (&b.last, &b.prev, b.rates()) else {
                return;
            };
            if seen
                .last()
                .is_none_or(|s| (s.0, s.1) != (last.seq, prev.seq))
            {
                seen.push((last.seq, prev.seq, r));
            }
        });
        std::thread::sleep(Duration::from_millis(3));
    }
    let st = p.stop();
    stop.store(true, Ordering::Relaxed);
    sampler.join().unwrap();
    serve.join().unwrap();
    eprintln!("{} rates; {:?}", seen.len(), st.pull);
    assert!(
        seen.len() >= 20,
        "about 36 samples in 4 s: {} rates seen",
        seen.len()
    );
    let bad: Vec<_> = seen
        .iter()
        .filter(|(_, _, r)| {
            (r[0] - 10_000.0).abs() > 1e-6 * 10_000.0 || (r[1] - 3_000.0).abs() > 1e-6 * 3_000.0
        })
        .collect();
    assert!(
        bad.is_empty(),
        "{} of {} rates are not 10000/s and 3000/s per agent-second, e.g. {:?}",
        bad.len(),
        seen.len(),
        &bad[..bad.len().min(4)]
    );
}
