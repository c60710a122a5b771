//! The agent end to end: its blocks under a racing reader, and its region READ over loopback
//! RoCEv2 by a hand-driven requester (RDMA_CM with the record in the REP, then RC READs), by
//! one agent and by a hundred served from two threads.

mod common;

use std::net::{Ipv4Addr, SocketAddrV4};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{CmAnswer, Conn, Requester};
use dta_agent::{AgentPoller, AgentRegion, AgentServer};
use dta_proto::wire::ib::{NakCode, Syndrome};
use dta_proto::wire::mad::rej_reason;
use dta_proto::zero::{
    block_len, decode_control, verify_block, ControlHeader, MetricKind, ZeroError, HEADER_LEN,
};
use dta_rnic::allow::PeerAllowlist;

/// The value a writer publishes at entry `i` of the update with sequence `seq`.
fn value(seq: u64, i: usize) -> u64 {
    seq.wrapping_mul(i as u64 + 1).wrapping_add(7)
}

#[test]
fn a_racing_reader_takes_whole_updates_or_refuses_the_snapshot() {
    const N: u32 = 64;
    let region = AgentRegion::new(1 << 16, 4).unwrap();
    let mut w = region
        .register_array("app/race", N, MetricKind::Counter, 0)
        .unwrap();
    let (off, len) = (w.offset(), w.block_len());
    let stop = Arc::new(AtomicBool::new(false));
    let published = Arc::new(AtomicU64::new(0));
    let writer = {
        let (stop, published) = (stop.clone(), published.clone());
        std::thread::spawn(move || {
            let mut vals = vec![0u64; N as usize];
            while !stop.load(Ordering::Relaxed) {
                let seq = w.seq() + 2;
                for (i, v) in vals.iter_mut().enumerate() {
                    *v = value(seq, i);
                }
                w.publish(&vals);
                published.store(seq / 2, Ordering::Relaxed);
            }
        })
    };
    let mem = region.region().clone();
    let mut buf = vec![0u8; len];
    let (mut accepted, mut in_progress, mut torn, mut last) = (0u64, 0u64, 0u64, 0u64);
    let t0 = Instant::now();
    // At least 700 ms of racing, and on until both sides made enough progress to mean
    // something (a loaded CI machine may starve either thread for a while), within 30 s.
    let enough = |accepted: u64| accepted > 100 && published.load(Ordering::Relaxed) > 1000;
    while t0.elapsed() < Duration::from_millis(700)
        || (!enough(accepted) && t0.elapsed() < Duration::from_secs(30))
    {
        mem.read(off, &mut buf).unwrap();
        match verify_block(&buf, N) {
            Ok(s) => {
                if s.seq > 0 {
                    for (i, v) in s.iter().enumerate() {
                        assert_eq!(v, value(s.seq, i), "seq {} entry {i}", s.seq);
                    }
                }
                assert!(s.seq >= last, "snapshots never go back");
                last = s.seq;
                accepted += 1;
            }
            Err(ZeroError::InProgress) => in_progress += 1,
            Err(ZeroError::Torn) => torn += 1,
            Err(e) => panic!("{e:?}"),
        }
    }
    stop.store(true, Ordering::Relaxed);
    writer.join().unwrap();
    let updates = published.load(Ordering::Relaxed);
    println!(
        "{updates} updates; reader: {accepted} accepted, {in_progress} in progress, {torn} torn \
         (CRC), newest seq {last}"
    );
    assert!(accepted > 100 && updates > 1000, "both sides ran");
    assert!(last > 0);
}

fn agent_region() -> (AgentRegion, dta_agent::ArrayWriter) {
    let region = AgentRegion::new(64 << 10, 16).unwrap();
    let mut w = region
        .register_array("app/e2e", 5, MetricKind::Gauge, 100)
        .unwrap();
    w.publish(&[10, 20, 30, 40, 50]);
    (region, w)
}

/// Reads the control area (header first, then all of it) and every block, verified.
fn read_all(req: &mut Requester, c: &mut Conn) -> Vec<(String, Vec<u64>)> {
    let head = req.read(c, 0, HEADER_LEN as u32).unwrap();
    let h = ControlHeader::decode(&head).unwrap();
    assert_eq!(h.region_len, c.record.len);
    let control = req.read(c, 0, h.control_len() as u32).unwrap();
    let (_, descs) = decode_control(&control).unwrap();
    descs
        .into_iter()
        .map(|d| {
            let b = req.read(c, d.offset, block_len(d.entries) as u32).unwrap();
            let s = verify_block(&b, d.entries).unwrap();
            (d.name, s.iter().collect())
        })
        .collect()
}

#[test]
fn a_pull_collector_connects_reads_the_control_area_and_verifies_a_block() {
    let (region, mut w) = agent_region();
    let mut server = AgentServer::bind(
        SocketAddrV4::new(Ipv4Addr::LOCALHOST, 0),
        7700,
        &region,
        PeerAllowlist::new(vec!["127.0.0.1/32".parse().unwrap()]),
    )
    .unwrap();
    let agent = server.local_addr();
    let stop = Arc::new(AtomicBool::new(false));
    let thread = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            server.run(&stop).unwrap();
            server
        })
    };
    let mut req = Requester::bind(Ipv4Addr::LOCALHOST);
    let CmAnswer::Connected(mut c) = req.connect(agent, 7700) else {
        panic!("refused")
    };
    assert_eq!((c.record.addr, c.record.len), (region.addr(), region.len()));
    assert!(c.record.verify_icrc);
    let got = read_all(&mut req, &mut c);
    assert_eq!(got, vec![("app/e2e".to_string(), vec![10, 20, 30, 40, 50])]);

    // A block added later shows under a new generation; updates show on the next READ.
    let mut late = region
        .register_array("app/late", 2, MetricKind::Counter, 10)
        .unwrap();
    late.publish(&[1, 2]);
    w.update(|v| v[0] = 11);
    let got = read_all(&mut req, &mut c);
    assert_eq!(got.len(), 2);
    assert_eq!(got[0].1[0], 11);
    assert_eq!(got[1], ("app/late".to_string(), vec![1, 2]));
    // A READ across a block boundary and one large READ (several responses) work too.
    let whole = req.read(&mut c, 0, 8192).unwrap();
    let mut local = vec![0u8; 8192];
    region.region().read(0, &mut local).unwrap();
    assert_eq!(whole[..HEADER_LEN], local[..HEADER_LEN]);

    // The region is READ-only: a WRITE gets NAK remote access error (and the QP is done).
    assert_eq!(
        req.write(&mut c, 0, &[0xff; 8]),
        Syndrome::Nak(NakCode::RemoteAccessError)
    );

    // Someone outside the allowlist gets a REJ and no record.
    let mut stranger = Requester::bind(Ipv4Addr::new(127, 0, 0, 2));
    match stranger.connect(agent, 7700) {
        CmAnswer::Rejected(r) => assert_eq!(r, rej_reason::CONSUMER_REJECT),
        CmAnswer::Connected(_) => panic!("a stranger connected"),
    }
    // A REQ for another service: REJ, invalid service ID.
    let mut other = Requester::bind(Ipv4Addr::LOCALHOST);
    match other.connect(agent, 7701) {
        CmAnswer::Rejected(r) => assert_eq!(r, rej_reason::INVALID_SERVICE_ID),
        CmAnswer::Connected(_) => panic!("connected to a service nobody offers"),
    }

    stop.store(true, Ordering::Relaxed);
    let server = thread.join().unwrap();
    let k = server.counters();
    println!("{k:#?}");
    assert_eq!(k.rnic.reads, 8);
    assert_eq!(k.rnic.access_denied, 1);
    assert_eq!(
        (k.cm.cm_req, k.cm.cm_established, k.cm.cm_rejected),
        (3, 1, 1)
    );
    assert!(k.tx_bytes > 8192 && k.cpu_ns > 0);
    println!(
        "agent CPU per READ (software RNIC, loopback): {:.1} µs",
        k.cpu_ns_per_read().unwrap() / 1e3
    );
}

#[test]
fn one_thread_serves_fifty_agents_and_two_serve_a_hundred() {
    const AGENTS: usize = 100;
    const THREADS: usize = 2;
    let mut regions = Vec::new();
    let mut servers: Vec<Vec<AgentServer>> = (0..THREADS).map(|_| Vec::new()).collect();
    let mut addrs = Vec::new();
    for a in 0..AGENTS {
        let region = AgentRegion::new(16 << 10, 4).unwrap();
        let mut w = region
            .register_array("host/load", 3, MetricKind::Gauge, 1000)
            .unwrap();
        w.publish(&[a as u64, 2 * a as u64, 3 * a as u64]);
        let ip = Ipv4Addr::new(127, 0, 1 + (a / 200) as u8, 1 + (a % 200) as u8);
        let s = AgentServer::bind(
            SocketAddrV4::new(ip, 0),
            7700,
            &region,
            PeerAllowlist::any(),
        )
        .unwrap();
        addrs.push(s.local_addr());
        servers[a % THREADS].push(s);
        regions.push((region, w));
    }
    let stop = Arc::new(AtomicBool::new(false));
    let threads: Vec<_> = servers
        .into_iter()
        .map(|mut set| {
            let stop = stop.clone();
            std::thread::spawn(move || {
                let t0 = dta_agent::server::thread_cpu_ns();
                AgentPoller::new().run(&mut set, &stop).unwrap();
                (set, dta_agent::server::thread_cpu_ns() - t0)
            })
        })
        .collect();
    let mut req = Requester::bind(Ipv4Addr::LOCALHOST);
    for round in 0..2 {
        for (a, agent) in addrs.iter().enumerate() {
            let CmAnswer::Connected(mut c) = req.connect(*agent, 7700) else {
                panic!("agent {a} refused")
            };
            let got = read_all(&mut req, &mut c);
            assert_eq!(
                got,
                vec![(
                    "host/load".to_string(),
                    vec![a as u64, 2 * a as u64, 3 * a as u64]
                )],
                "agent {a}, round {round}"
            );
        }
    }
    stop.store(true, Ordering::Relaxed);
    let (mut reads, mut cpu, mut thread_cpu) = (0, 0, 0);
    for t in threads {
        let (set, tcpu) = t.join().unwrap();
        thread_cpu += tcpu;
        for s in &set {
            let k = s.counters();
            assert_eq!(k.rnic.reads, 6, "two rounds of three READs");
            assert_eq!(k.cm.cm_established, 2);
            reads += k.rnic.reads;
            cpu += k.cpu_ns;
        }
    }
    println!(
        "{AGENTS} agents on {THREADS} threads: {reads} READs; CPU inside the agents {:.1} µs per \
         READ (their threads' total incl. polling: {:.1} ms)",
        cpu as f64 / reads as f64 / 1e3,
        thread_cpu as f64 / 1e6
    );
    assert_eq!(reads, 6 * AGENTS as u64);
}

/// A reader copying the control area while blocks are being added sees a consistent set each
/// time it decodes one: a prefix of the final descriptors, never a block that is not there.
#[test]
fn a_control_area_read_during_registrations_is_a_prefix_of_the_final_one() {
    const BLOCKS: u16 = 200;
    let region = AgentRegion::new(1 << 20, BLOCKS).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let reads = Arc::new(AtomicU64::new(0));
    let reader = {
        let (mem, stop, reads) = (region.region().clone(), stop.clone(), reads.clone());
        std::thread::spawn(move || {
            let mut buf = vec![0u8; HEADER_LEN + BLOCKS as usize * 64];
            let mut seen = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                mem.read(0, &mut buf).unwrap();
                reads.fetch_add(1, Ordering::Relaxed);
                match decode_control(&buf) {
                    Ok((h, d)) => seen.push((h.generation, d)),
                    Err(e) => panic!("the software path copies in address order: {e:?}"),
                }
            }
            seen
        })
    };
    let mut writers = Vec::new();
    for i in 0..BLOCKS {
        // At least one read between two registrations (and some during them).
        let r = reads.load(Ordering::Relaxed);
        while reads.load(Ordering::Relaxed) == r {
            std::hint::spin_loop();
        }
        let name = format!("app/{i}");
        writers.push(
            region
                .register_array(&name, 1 + i as u32 % 7, MetricKind::Counter, 1)
                .unwrap(),
        );
    }
    std::thread::sleep(Duration::from_millis(20));
    stop.store(true, Ordering::Relaxed);
    let seen = reader.join().unwrap();
    let last = region.blocks();
    let mut growing = 0;
    for (generation, d) in &seen {
        assert_eq!(&last[..d.len()], &d[..], "a prefix of the final set");
        // The generation is written after the count: never newer than the count says.
        assert!(*generation <= 1 + d.len() as u32);
        growing += (d.len() < last.len()) as usize;
    }
    println!(
        "{} control areas read, {growing} during registrations",
        seen.len()
    );
    assert!(
        growing >= BLOCKS as usize,
        "the reads interleaved with the registrations"
    );
    assert_eq!(seen.last().unwrap().1.len(), BLOCKS as usize);
}
