//! `dta-rdma-selftest`: proves the real-RNIC backend on a machine with an RDMA device (the
//! Soft-RoCE VM of scripts/rxe-vm is enough).
//!
//! - `loopback --config FILE`: starts a collector with `backend = "rdma"` in this process,
//!   connects to every Key-Write and Key-Increment store through RDMA_CM (rxe loopback),
//!   writes a key's replicas with RDMA WRITE (one with Immediate), FETCH_ADDs a key's counters,
//!   and checks the answers of the collector's query engine on the same regions, the immediate
//!   event count, and a reconnect.
//! - `client --server IP:PORT`: connects to a running collector's store, prints the metadata
//!   record, and does the same writes, checked with RDMA READ.
//!
//! Lines starting `SELFTEST PASS` / `SELFTEST FAIL` report each check; the last line is
//! `SELFTEST OK` (exit 0) or `SELFTEST FAILED` (exit 1).

use std::net::SocketAddrV4;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use clap::{Parser, Subcommand};

use dta_collector::query::keywrite::{KeyWriteAnswer, Vote};
use dta_collector::rdma::client::Connection;
use dta_collector::rnic::responder::Completion;
use dta_collector::{Collector, CollectorConfig};
use dta_proto::geometry::StoreGeometry;
use dta_proto::hash::MAX_REDUNDANCY;
use dta_proto::meta::StoreKind;
use dta_proto::wire::metarec::MetaRecord;
use dta_proto::Key;

/// Replicas written per key.
const N: usize = 2;
const TIMEOUT: Duration = Duration::from_secs(10);
/// Immediate data of the WRITE with Immediate.
const IMM: u32 = 0xD7A0_0001;

#[derive(Parser)]
#[command(about = "End-to-end check of the collector's real-RNIC backend")]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Run a collector (backend = "rdma") in this process and test it through rxe loopback.
    Loopback {
        /// Collector configuration (TOML) with `backend = "rdma"`.
        #[arg(short, long)]
        config: PathBuf,
        /// Address to connect to (default: the configuration's `roce` IP).
        #[arg(long)]
        ip: Option<std::net::Ipv4Addr>,
    },
    /// Connect to a running collector's store and write into it.
    Client {
        /// The store's RDMA_CM address (collector IP and store port).
        #[arg(short, long)]
        server: SocketAddrV4,
        /// Key to write (Key-Write) or count (Key-Increment).
        #[arg(long, default_value = "flow-1")]
        key: String,
    },
}

struct Report {
    failed: bool,
}

impl Report {
    fn check(&mut self, ok: bool, what: &str) {
        if ok {
            println!("SELFTEST PASS {what}");
        } else {
            println!("SELFTEST FAIL {what}");
            self.failed = true;
        }
    }
}

fn main() {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("info")).init();
    let cli = Cli::parse();
    let mut r = Report { failed: false };
    let res = match cli.cmd {
        Cmd::Loopback { config, ip } => loopback(&config, ip, &mut r),
        Cmd::Client { server, key } => client(server, &key, &mut r),
    };
    if let Err(e) = res {
        println!("SELFTEST FAIL {e}");
        r.failed = true;
    }
    if r.failed {
        println!("SELFTEST FAILED");
        std::process::exit(1);
    }
    println!("SELFTEST OK");
}

fn print_meta(m: &MetaRecord) {
    println!(
        "META addr={:#x} len={} rkey={:#x} kind={} verify_icrc={}",
        m.addr,
        m.len,
        m.rkey,
        m.kind.name(),
        m.verify_icrc
    );
}

/// The store's geometry as the metadata record describes it (validated against its region).
fn geometry(m: &MetaRecord) -> Result<StoreGeometry, String> {
    StoreGeometry::try_from(&m.to_store_meta(String::new()))
        .map_err(|e| format!("the metadata record describes no usable store: {e}"))
}

/// The key's replica slots and checksum, and one encoded slot holding `value`.
fn keywrite_slots(m: &MetaRecord, key: &Key, value: &[u8]) -> Result<(Vec<u64>, Vec<u8>), String> {
    let StoreGeometry::KeyWrite { layout, hasher } = geometry(m)? else {
        return Err("not a Key-Write store".into());
    };
    let mut s = [0u32; MAX_REDUNDANCY];
    let checksum = hasher.checksum_and_slots(key, N, &mut s);
    let mut bytes = vec![0u8; layout.slot_size() as usize];
    let w = layout.value_width().min(value.len());
    layout.encode_slot(checksum, &value[..w], &mut bytes);
    Ok((
        s[..N].iter().map(|&x| layout.slot_offset(x)).collect(),
        bytes,
    ))
}

fn counter_offsets(m: &MetaRecord, key: &Key) -> Result<Vec<u64>, String> {
    let StoreGeometry::KeyIncrement { layout, hasher } = geometry(m)? else {
        return Err("not a Key-Increment store".into());
    };
    let mut s = [0u32; MAX_REDUNDANCY];
    hasher.slots(key, N, &mut s);
    Ok(s[..N].iter().map(|&x| layout.slot_offset(x)).collect())
}

/// Writes `key`'s replicas (the first with Immediate `imm`) or adds 5 twice to its counters.
fn exercise(c: &mut Connection, key: &Key, r: &mut Report) -> Result<(), String> {
    let m = c.meta.clone();
    match m.kind {
        StoreKind::KeyWrite { .. } => {
            let (offs, slot) = keywrite_slots(&m, key, &[0xC0, 0xFF, 0xEE, 0x42])?;
            c.write_imm(offs[0], &slot, IMM)?;
            for &o in &offs[1..] {
                c.write(o, &slot)?;
            }
            for &o in &offs {
                let back = c.read(o, slot.len())?;
                r.check(back == slot, &format!("READ back of the slot at {o:#x}"));
            }
        }
        StoreKind::KeyIncrement { .. } => {
            let offs = counter_offsets(&m, key)?;
            for &o in &offs {
                let before = c.fetch_add(o, 5)?;
                let after = c.fetch_add(o, 5)?;
                r.check(
                    after == before.wrapping_add(5),
                    &format!("FETCH_ADD at {o:#x} returned {before} then {after}"),
                );
            }
        }
        _ => {}
    }
    Ok(())
}

fn client(server: SocketAddrV4, key: &str, r: &mut Report) -> Result<(), String> {
    let key = Key::new(key.as_bytes()).ok_or("key must be 1..=16 bytes")?;
    let mut c = Connection::connect(server, TIMEOUT)?;
    print_meta(&c.meta);
    r.check(c.meta.rkey != 0, "the metadata record carries an rkey");
    exercise(&mut c, &key, r)?;
    c.disconnect()?;
    r.check(true, "disconnect");
    Ok(())
}

fn loopback(
    config: &std::path::Path,
    ip: Option<std::net::Ipv4Addr>,
    r: &mut Report,
) -> Result<(), String> {
    let cfg = CollectorConfig::load(config)?;
    let ip = ip.unwrap_or(*cfg.collector.roce.ip());
    let collector = Collector::start(cfg)?;
    let key = Key::new(b"dta-selftest").expect("valid key");
    let mut writes = 0u64;
    for st in &collector.stores {
        let server = SocketAddrV4::new(ip, st.port);
        let mut c = Connection::connect(server, TIMEOUT)?;
        print_meta(&c.meta);
        let want = MetaRecord::from_store_meta(&st.meta, true);
        r.check(
            c.meta.addr == want.addr && c.meta.len == want.len && c.meta.kind == want.kind,
            &format!(
                "store {:?}: metadata record matches the store",
                st.meta.name
            ),
        );
        r.check(
            c.meta.rkey == st.meta.rkey && c.meta.rkey != 0,
            &format!(
                "store {:?}: advertised rkey {:#x} is the MR's rkey {:#x}",
                st.meta.name, c.meta.rkey, st.meta.rkey
            ),
        );
        exercise(&mut c, &key, r)?;
        match &st.geometry {
            StoreGeometry::KeyWrite { .. } => {
                writes += 1;
                let view = st
                    .keywrite()
                    .ok_or("a Key-Write store has a Key-Write view")?;
                let a = view.query(&key, N, Vote::Plurality);
                let ok = matches!(&a, KeyWriteAnswer::Value { value, votes, .. }
                    if value.as_bytes()[..4] == [0xC0, 0xFF, 0xEE, 0x42] && *votes == N as u8);
                r.check(
                    ok,
                    &format!("store {:?}: query answers {a:?}", st.meta.name),
                );
            }
            StoreGeometry::KeyIncrement { layout, hasher } => {
                let mut s = [0u32; MAX_REDUNDANCY];
                hasher.slots(&key, N, &mut s);
                let min = s[..N]
                    .iter()
                    .map(|&x| st.region.load_u64(layout.slot_offset(x)).unwrap_or(0))
                    .min()
                    .unwrap_or(0);
                r.check(
                    min == 10,
                    &format!(
                        "store {:?}: counter query (min of {N}) = {min}",
                        st.meta.name
                    ),
                );
            }
            _ => {}
        }
        let first = c.meta.clone();
        c.disconnect()?;
        // A second connection to the same store works after the first went away.
        let c2 = Connection::connect(server, TIMEOUT)?;
        r.check(
            c2.meta == first,
            &format!("store {:?}: reconnect gets the same record", st.meta.name),
        );
        c2.disconnect()?;
    }
    let t0 = Instant::now();
    let mut imm = 0;
    while t0.elapsed() < Duration::from_secs(3) {
        imm = collector.with_published(|p| p.immediate_events);
        if imm >= writes {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    r.check(
        imm == writes,
        &format!("immediate events seen by the collector: {imm} (expected {writes})"),
    );
    let imm_seen = collector.with_published(|p| {
        p.recent_events
            .iter()
            .any(|c| matches!(c, Completion::WriteWithImm { imm: IMM, len, .. } if *len == 8))
    });
    r.check(
        imm_seen,
        &format!("the collector's event carries imm {IMM:#x} and the 8-byte length"),
    );
    let k = collector.counters();
    println!(
        "COUNTERS rcvd_pkts={} sent_pkts={} write_imm={} duplicate_request={}",
        k.rcvd_pkts, k.sent_pkts, k.write_imm, k.duplicate_request
    );
    collector.shutdown();
    Ok(())
}
