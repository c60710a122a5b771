use super::*;
use std::net::Ipv4Addr;
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

use crate::memory::Region;
use crate::rnic::cm::{CmResponder, Service};
use crate::rnic::responder::{Access, DeviceConfig, Responder};
use dta_io::udp::{UdpOptions, UdpSocket};
use dta_proto::batch::TxBatch;
use dta_proto::wire::cm::is_gsi;
use dta_proto::wire::ethernet::MacAddr;
use dta_proto::zero::{block_len, encode_block, MetricKind, RegionRecord};
use dta_proto::zero::{BlockDesc, ControlHeader, HEADER_LEN};

/// Value `i` of block `b` after update `seq`.
fn value(b: usize, seq: u64, i: usize) -> u64 {
    seq.wrapping_mul(i as u64 + 1) ^ ((b as u64) << 56)
}

/// A minimal agent: a region with `sizes` blocks, a writer thread updating them as fast as
/// it can, and a software RNIC answering READs.
fn agent(
    addr: SocketAddrV4,
    sizes: &[u32],
    stop: Arc<AtomicBool>,
) -> Vec<std::thread::JoinHandle<()>> {
    let mut descs = Vec::new();
    let mut off = (HEADER_LEN + 64 * sizes.len()) as u64;
    off = off.next_multiple_of(8);
    for (b, &n) in sizes.iter().enumerate() {
        descs.push(BlockDesc {
            name: format!("b{b}"),
            offset: off,
            entries: n,
            kind: MetricKind::Counter,
            interval_ms: 1,
        });
        off += block_len(n) as u64;
    }
    let region = Arc::new(Region::anonymous(off as usize, false).unwrap());
    let h = ControlHeader {
        blocks: descs.len() as u16,
        generation: 1,
        region_len: off,
    };
    region.write(0, &h.encode()).unwrap();
    for (k, d) in descs.iter().enumerate() {
        region
            .write((HEADER_LEN + 64 * k) as u64, &d.encode().unwrap())
            .unwrap();
    }
    let writer = {
        let (region, descs, stop) = (region.clone(), descs.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut seq = 0u64;
            let mut buf = Vec::new();
            let mut vals = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                seq += 2;
                for (b, d) in descs.iter().enumerate() {
                    vals.clear();
                    vals.extend((0..d.entries as usize).map(|i| value(b, seq, i)));
                    buf.resize(block_len(d.entries), 0);
                    encode_block(seq, seq * 1_000, &vals, &mut buf);
                    region.store_u64_release(d.offset, seq - 1).unwrap();
                    region.write(d.offset + 8, &buf[8..]).unwrap();
                    region.store_u64_release(d.offset, seq).unwrap();
                }
            }
        })
    };
    let mut rnic = Responder::new(DeviceConfig {
        local: addr,
        local_mac: MacAddr::ZERO,
        pmtu: 1024,
        l2_frames: false,
    });
    let read_only = Access {
        remote_read: true,
        remote_write: false,
        remote_atomic: false,
    };
    let rkey = rnic.register(region.clone(), read_only);
    let record = RegionRecord {
        addr: region.addr(),
        len: region.len() as u64,
        rkey: rkey.0,
        verify_icrc: true,
        pmtu: 1024,
    };
    let mut cm = CmResponder::new(
        addr,
        MacAddr::ZERO,
        vec![Service {
            port: 7700,
            name: "agent".into(),
            record: record.encode(),
            record_in_rep: true,
            heads: None,
            allow: crate::allow::PeerAllowlist::any(),
        }],
        true,
    );
    let sock = UdpSocket::bind(addr, &UdpOptions::default()).unwrap();
    let server = std::thread::spawn(move || {
        let (mut rx, mut txs) = sock.split();
        let mut tx = TxBatch::new(256, 2048);
        let t0 = Instant::now();
        while !stop.load(Ordering::Relaxed) {
            let now = t0.elapsed().as_nanos() as u64;
            let _ = rx.recv_with(Duration::from_millis(5), |burst| {
                for d in burst {
                    if is_gsi(d.payload) {
                        cm.handle(now, d, &mut rnic, &mut tx);
                    } else {
                        rnic.handle(d, &mut tx);
                    }
                }
            });
            cm.poll(now, &mut rnic, &mut tx);
            loop {
                rnic.poll(now, &mut tx);
                let _ = txs.send_batch(&tx);
                tx.clear();
                if !rnic.has_pending_output() {
                    break;
                }
            }
        }
    });
    vec![writer, server]
}

#[test]
fn every_snapshot_pulled_is_one_the_agent_wrote_and_credits_hold() {
    let stop = Arc::new(AtomicBool::new(false));
    let mut threads = Vec::new();
    let mut agents = Vec::new();
    for k in 0..3u8 {
        let addr = SocketAddrV4::new(Ipv4Addr::new(127, 0, 41, 10 + k), 4791);
        threads.extend(agent(addr, &[4, 100, 1000], stop.clone()));
        agents.push(AgentSpec {
            name: format!("h{k}"),
            roce: addr,
            cm_port: 7700,
        });
    }
    let mut cfg = PullConfig::new(
        SocketAddrV4::new(Ipv4Addr::new(127, 0, 41, 1), 0),
        agents,
        Duration::from_millis(5),
    );
    cfg.max_read = 4096;
    cfg.credit_bytes = 128 << 10;
    let bad = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let seen = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let hook: SnapshotHook = {
        let (bad, seen) = (bad.clone(), seen.clone());
        Box::new(move |s: &SnapshotRef<'_>| {
            seen.fetch_add(1, Ordering::Relaxed);
            let b: usize = s.block.name[1..].parse().unwrap();
            if s.values.len() != s.block.entries as usize
                || s.values
                    .iter()
                    .enumerate()
                    .any(|(i, &v)| v != value(b, s.seq, i))
            {
                bad.fetch_add(1, Ordering::Relaxed);
            }
        })
    };
    let p = Puller::start(cfg, Some(hook)).unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    let q = p.store().query_json(Some("h1"), Some("b1"));
    let st = p.stop();
    stop.store(true, Ordering::Relaxed);
    for t in threads {
        t.join().unwrap();
    }
    eprintln!("{:?}\n{:?}\n{:?}", st.pull, st.reads, st.cm);
    assert_eq!(st.agents_up, 3);
    assert!(seen.load(Ordering::Relaxed) > 100, "{seen:?}");
    assert_eq!(
        bad.load(Ordering::Relaxed),
        0,
        "a pulled value differs from the agent's"
    );
    assert!(st.in_flight_high_water <= 128 << 10);
    assert!(st.pull.rounds_done > 50);
    assert_eq!(q.unwrap()["blocks"][0]["entries"], 100);
}
