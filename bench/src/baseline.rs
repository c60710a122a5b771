//! CPU-collector baselines, measured side by side with `dta`: the same reports arrive on a UDP
//! socket (`recvmmsg` bursts), are parsed, and are inserted into
//!
//! - a **cuckoo hash table** (the papers' "Cuckoo": two candidate buckets per key, four slots
//!   per bucket, random-walk displacement), keyed by the report's key, or for Append events by
//!   (list, arrival number); or
//! - a **MultiLog-style append log** with a per-key index: every report is appended to one log,
//!   each record links to the previous record of its key, and a cuckoo index maps each key to
//!   its newest record, so all reports of a flow can be read back newest first.
//!
//! The collector thread's CPU time (`CLOCK_THREAD_CPUTIME_ID`, user + system, so the receive
//! syscalls count) divided by the reports it took is the baseline's cost per report.

use std::net::{Ipv4Addr, SocketAddrV4};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use dta_io::udp::{UdpOptions, UdpSocket};
use dta_proto::wire::report::{parse_report, ParseConfig, Primitive, Report};
use dta_proto::{Key, Value};
use serde::Serialize;

use crate::sender::PacedSender;
use crate::sys;
use crate::trace::Trace;
use crate::workload::mix;

const SLOTS: usize = 4;
const MAX_KICKS: u32 = 500;

#[derive(Clone)]
struct Bucket<V: Copy> {
    used: u8,
    keys: [Key; SLOTS],
    vals: [V; SLOTS],
}

/// A bucketized two-choice cuckoo hash table with a fixed number of buckets.
pub struct CuckooTable<V: Copy + Default> {
    buckets: Vec<Bucket<V>>,
    mask: u64,
    len: usize,
    rng: u64,
    /// Displacements performed.
    pub kicks: u64,
    /// Inserts that failed (table too full); the displaced entry is lost.
    pub failures: u64,
}

/// A 64-bit hash of a key's bytes.
#[inline]
pub fn hash_key(b: &[u8]) -> u64 {
    let mut h = 0x9E37_79B9_7F4A_7C15u64 ^ b.len() as u64;
    for c in b.chunks(8) {
        let mut w = [0u8; 8];
        w[..c.len()].copy_from_slice(c);
        h = (h ^ u64::from_le_bytes(w)).wrapping_mul(0xff51_afd7_ed55_8ccd);
        h = h.rotate_left(29);
    }
    mix(h)
}

impl<V: Copy + Default> CuckooTable<V> {
    /// A table sized for `entries` at a 90% load factor (power-of-two buckets).
    pub fn with_capacity(entries: usize) -> Self {
        let buckets = (entries * 10 / 9 / SLOTS + 1).next_power_of_two().max(2);
        CuckooTable {
            buckets: vec![
                Bucket {
                    used: 0,
                    keys: [Key::default(); SLOTS],
                    vals: [V::default(); SLOTS],
                };
                buckets
            ],
            mask: buckets as u64 - 1,
            len: 0,
            rng: 0x1234_5678,
            kicks: 0,
            failures: 0,
        }
    }

    /// Entries stored.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True if empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Slots in the table.
    pub fn capacity(&self) -> usize {
        self.buckets.len() * SLOTS
    }

    #[inline]
    fn candidates(&self, key: &Key) -> (usize, usize) {
        let h = hash_key(key.as_bytes());
        let b1 = h & self.mask;
        let mut b2 = (h >> 32) & self.mask;
        if b2 == b1 {
            b2 ^= 1;
        }
        (b1 as usize, b2 as usize)
    }

    #[inline]
    fn find(&self, key: &Key) -> Option<(usize, usize)> {
        let (b1, b2) = self.candidates(key);
        for b in [b1, b2] {
            let bk = &self.buckets[b];
            for s in 0..SLOTS {
                if bk.used & (1 << s) != 0 && bk.keys[s] == *key {
                    return Some((b, s));
                }
            }
        }
        None
    }

    /// The value of `key`.
    pub fn get(&self, key: &Key) -> Option<&V> {
        self.find(key).map(|(b, s)| &self.buckets[b].vals[s])
    }

    #[inline]
    fn place(&mut self, b: usize, key: Key, v: V) -> bool {
        let bk = &mut self.buckets[b];
        if bk.used == (1 << SLOTS) - 1 {
            return false;
        }
        let s = (!bk.used).trailing_zeros() as usize;
        bk.used |= 1 << s;
        bk.keys[s] = key;
        bk.vals[s] = v;
        true
    }

    /// Inserts or overwrites; false if the table was too full (one entry was lost).
    pub fn insert(&mut self, key: Key, v: V) -> bool {
        self.upsert(key, v, |old| *old = v)
    }

    /// Applies `update` to the existing value, or inserts `v`.
    #[inline]
    pub fn upsert(&mut self, key: Key, v: V, update: impl FnOnce(&mut V)) -> bool {
        if let Some((b, s)) = self.find(&key) {
            update(&mut self.buckets[b].vals[s]);
            return true;
        }
        let (b1, b2) = self.candidates(&key);
        if self.place(b1, key, v) || self.place(b2, key, v) {
            self.len += 1;
            return true;
        }
        // Random walk: evict a random slot of one candidate and move the victim to its other
        // bucket.
        self.rng = mix(self.rng.wrapping_add(0x9E37_79B9_7F4A_7C15));
        let (mut k, mut val) = (key, v);
        let mut b = if self.rng & 1 == 1 { b2 } else { b1 };
        for _ in 0..MAX_KICKS {
            // `b` is always one of the carried entry's two candidate buckets, and full.
            self.rng = mix(self.rng.wrapping_add(0x9E37_79B9_7F4A_7C15));
            let s = (self.rng >> 8) as usize % SLOTS;
            let bk = &mut self.buckets[b];
            std::mem::swap(&mut bk.keys[s], &mut k);
            std::mem::swap(&mut bk.vals[s], &mut val);
            self.kicks += 1;
            let (c1, c2) = self.candidates(&k);
            let alt = if c1 == b { c2 } else { c1 };
            if self.place(alt, k, val) {
                self.len += 1;
                return true;
            }
            b = alt;
        }
        self.failures += 1;
        false
    }
}

/// A MultiLog-style store: one append-only log of records linked per key, plus a cuckoo index
/// from each key to its newest record.
pub struct MultiLog {
    log: Vec<u8>,
    index: CuckooTable<u64>,
    /// Records appended.
    pub records: u64,
    /// Records refused because the log was full.
    pub full: u64,
}

const NO_RECORD: u64 = 0;

impl MultiLog {
    /// A log of `bytes` bytes indexing up to `keys` keys.
    pub fn new(bytes: usize, keys: usize) -> MultiLog {
        MultiLog {
            log: Vec::with_capacity(bytes),
            index: CuckooTable::with_capacity(keys),
            records: 0,
            full: 0,
        }
    }

    /// Appends `value` under `key`.
    #[inline]
    pub fn append(&mut self, key: Key, value: &[u8]) -> bool {
        let need = 9 + value.len();
        if self.log.len() + need > self.log.capacity() {
            self.full += 1;
            return false;
        }
        // Offsets are stored +1 so that 0 means "no earlier record".
        let at = self.log.len() as u64 + 1;
        let prev = self.index.get(&key).copied().unwrap_or(NO_RECORD);
        self.log.extend_from_slice(&prev.to_le_bytes());
        self.log.push(value.len() as u8);
        self.log.extend_from_slice(value);
        self.records += 1;
        self.index.insert(key, at)
    }

    /// Every value stored under `key`, newest first.
    pub fn query(&self, key: &Key) -> Vec<&[u8]> {
        let mut out = Vec::new();
        let mut at = self.index.get(key).copied().unwrap_or(NO_RECORD);
        while at != NO_RECORD {
            let o = (at - 1) as usize;
            let prev = u64::from_le_bytes(self.log[o..o + 8].try_into().expect("8 bytes"));
            let len = self.log[o + 8] as usize;
            out.push(&self.log[o + 9..o + 9 + len]);
            at = prev;
        }
        out
    }

    /// Index insert failures.
    pub fn index_failures(&self) -> u64 {
        self.index.failures
    }
}

/// Which CPU collector.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum BaselineKind {
    /// Receive and parse only (the floor every CPU collector pays).
    Parse,
    /// Cuckoo hash table.
    Cuckoo,
    /// MultiLog-style append log with a per-key index.
    Multilog,
}

/// A CPU collector's store.
pub enum BaselineStore {
    /// Receive and parse only.
    Parse(u64),
    /// Cuckoo hash table.
    Cuckoo(CuckooTable<Value>, u64),
    /// Append log.
    Multilog(MultiLog),
}

impl BaselineStore {
    /// A store for about `reports` reports.
    pub fn new(kind: BaselineKind, reports: usize) -> BaselineStore {
        match kind {
            BaselineKind::Parse => BaselineStore::Parse(0),
            BaselineKind::Cuckoo => BaselineStore::Cuckoo(CuckooTable::with_capacity(reports), 0),
            BaselineKind::Multilog => {
                BaselineStore::Multilog(MultiLog::new(reports * 48 + 4096, reports))
            }
        }
    }

    /// Stores one report.
    #[inline]
    pub fn insert(&mut self, r: &Report) {
        match self {
            BaselineStore::Parse(n) => {
                *n = n.wrapping_add(std::hint::black_box(r).header.seq.unwrap_or(0) as u64)
            }
            BaselineStore::Cuckoo(t, arrivals) => {
                *arrivals += 1;
                let _ = match r.primitive {
                    Primitive::KeyWrite { key, value, .. } => t.insert(key, value),
                    Primitive::KeyIncrement { key, delta, .. } => {
                        let v = Value::new(&delta.to_le_bytes()).expect("8 bytes");
                        t.upsert(key, v, |old| {
                            let mut b = [0u8; 8];
                            b.copy_from_slice(&old.as_bytes()[..8]);
                            let s = u64::from_le_bytes(b).wrapping_add(delta);
                            *old = Value::new(&s.to_le_bytes()).expect("8 bytes");
                        })
                    }
                    Primitive::Postcard {
                        flow, hop, value, ..
                    } => {
                        let mut k = [0u8; 16];
                        let f = flow.as_bytes();
                        let n = f.len().min(15);
                        k[..n].copy_from_slice(&f[..n]);
                        k[n] = hop;
                        t.insert(
                            Key::new(&k[..n + 1]).expect("fits"),
                            Value::new(&value.to_be_bytes()).expect("4 bytes"),
                        )
                    }
                    Primitive::Append { list, value } => {
                        let mut k = [0u8; 12];
                        k[..4].copy_from_slice(&list.to_be_bytes());
                        k[4..].copy_from_slice(&arrivals.to_be_bytes());
                        t.insert(Key::new(&k).expect("12 bytes"), value)
                    }
                };
            }
            BaselineStore::Multilog(m) => {
                let _ = match r.primitive {
                    Primitive::KeyWrite { key, value, .. } => m.append(key, value.as_bytes()),
                    Primitive::KeyIncrement { key, delta, .. } => {
                        m.append(key, &delta.to_le_bytes())
                    }
                    Primitive::Postcard {
                        flow, hop, value, ..
                    } => {
                        let mut v = [0u8; 5];
                        v[0] = hop;
                        v[1..].copy_from_slice(&value.to_be_bytes());
                        m.append(flow, &v)
                    }
                    Primitive::Append { value, .. } => {
                        // Loss events are indexed by flow: the entry's leading 5-tuple.
                        let b = value.as_bytes();
                        m.append(Key::new(&b[..b.len().min(13)]).expect("fits"), b)
                    }
                };
            }
        }
    }

    /// Entries lost to a full table or log.
    pub fn failures(&self) -> u64 {
        match self {
            BaselineStore::Parse(_) => 0,
            BaselineStore::Cuckoo(t, _) => t.failures,
            BaselineStore::Multilog(m) => m.full + m.index_failures(),
        }
    }
}

/// What one baseline run measured.
#[derive(Debug, Clone, Serialize)]
pub struct BaselineResult {
    /// The collector.
    pub kind: BaselineKind,
    /// Reports sent.
    pub sent: u64,
    /// Reports the collector received.
    pub received: u64,
    /// Reports that did not parse.
    pub malformed: u64,
    /// Datagrams the kernel dropped.
    pub socket_drops: u64,
    /// Entries lost to a full structure.
    pub failures: u64,
    /// Collector thread CPU time (s).
    pub cpu_secs: f64,
    /// Collector CPU per report received (ns).
    pub cpu_ns_per_report: f64,
    /// Wall time (s).
    pub secs: f64,
}

/// Sends `trace` `loops` times to a CPU collector of `kind` on loopback and measures its CPU.
pub fn run_baseline(
    kind: BaselineKind,
    parse: ParseConfig,
    trace: &Trace,
    loops: u32,
    window: u64,
) -> Result<BaselineResult, String> {
    let total = trace.len() as u64 * loops.max(1) as u64;
    let sock = UdpSocket::bind(
        SocketAddrV4::new(Ipv4Addr::LOCALHOST, 0),
        &UdpOptions {
            rcvbuf: 64 << 20,
            sndbuf: 8 << 20,
            reuse_port: false,
        },
    )
    .map_err(|e| e.to_string())?;
    let addr = sock.local_addr();
    let (mut rx, _tx) = sock.split();
    let received = Arc::new(AtomicU64::new(0));
    let done = Arc::new(AtomicBool::new(false));
    let (rcv, dn) = (received.clone(), done.clone());
    let collector = std::thread::Builder::new()
        .name("baseline".into())
        .spawn(move || {
            let mut store = BaselineStore::new(kind, total as usize);
            let mut malformed = 0u64;
            let mut got = 0u64;
            let cpu0 = sys::thread_cpu_ns();
            let mut idle_since: Option<Instant> = None;
            while got < total {
                let r = rx.recv_with(Duration::from_millis(10), |burst| {
                    for d in burst {
                        match parse_report(d.payload, &parse) {
                            Ok(r) => store.insert(&r),
                            Err(_) => malformed += 1,
                        }
                    }
                    got += burst.len() as u64;
                });
                rcv.store(got, Ordering::Relaxed);
                match r {
                    Ok(0) | Err(_) => {
                        if dn.load(Ordering::Relaxed) {
                            let t = *idle_since.get_or_insert_with(Instant::now);
                            if t.elapsed() > Duration::from_millis(500) {
                                break;
                            }
                        }
                    }
                    Ok(_) => idle_since = None,
                }
            }
            let cpu = sys::thread_cpu_ns().saturating_sub(cpu0);
            (
                got,
                malformed,
                store.failures(),
                cpu,
                rx.stats().kernel_drops,
            )
        })
        .map_err(|e| e.to_string())?;
    let t0 = Instant::now();
    let mut sender = PacedSender::new(addr, 0)?;
    sender.set_window(window);
    let rc = || received.load(Ordering::Relaxed);
    let mut res = Ok(());
    'send: for _ in 0..loops.max(1) {
        for i in 0..trace.len() {
            if let Err(e) = sender.push(trace.payload(i), rc) {
                res = Err(e);
                break 'send;
            }
        }
    }
    if res.is_ok() {
        res = sender.flush(rc);
    }
    done.store(true, Ordering::Relaxed);
    let (got, malformed, failures, cpu_ns, drops) = collector
        .join()
        .map_err(|_| "baseline collector panicked".to_string())?;
    res?;
    Ok(BaselineResult {
        kind,
        sent: sender.sent,
        received: got,
        malformed,
        socket_drops: drops,
        failures,
        cpu_secs: cpu_ns as f64 * 1e-9,
        cpu_ns_per_report: cpu_ns as f64 / got.max(1) as f64,
        secs: t0.elapsed().as_secs_f64(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(i: u64) -> Key {
        Key::new(&mix(i).to_be_bytes()).unwrap()
    }

    #[test]
    fn cuckoo_holds_ninety_percent_load() {
        let mut t = CuckooTable::<u64>::with_capacity(50_000);
        let n = t.capacity() * 9 / 10;
        for i in 0..n as u64 {
            assert!(t.insert(key(i), i), "insert {i} of {n}");
        }
        assert_eq!(t.len(), n);
        assert!(t.kicks > 0, "displacement was exercised");
        for i in 0..n as u64 {
            assert_eq!(t.get(&key(i)), Some(&i));
        }
        assert_eq!(t.get(&key(u64::MAX)), None);
        // Overwrite and upsert.
        assert!(t.insert(key(3), 7));
        assert_eq!(t.get(&key(3)), Some(&7));
        assert!(t.upsert(key(3), 0, |v| *v += 1));
        assert_eq!(t.get(&key(3)), Some(&8));
        assert_eq!(t.len(), n);
    }

    #[test]
    fn cuckoo_reports_overflow() {
        let mut t = CuckooTable::<u64>::with_capacity(16);
        let cap = t.capacity();
        let ok = (0..cap as u64 * 2).filter(|&i| t.insert(key(i), i)).count();
        assert!(t.failures > 0);
        assert!(ok >= cap / 2);
        assert!(t.len() <= cap);
    }

    #[test]
    fn multilog_chains_per_key() {
        let mut m = MultiLog::new(1 << 16, 100);
        for i in 0..30u8 {
            assert!(m.append(key(i as u64 % 3), &[i]));
        }
        let vals: Vec<u8> = m.query(&key(1)).iter().map(|v| v[0]).collect();
        assert_eq!(
            vals,
            (0..30u8).rev().filter(|i| i % 3 == 1).collect::<Vec<_>>()
        );
        assert!(m.query(&key(99)).is_empty());
        let mut small = MultiLog::new(20, 4);
        assert!(small.append(key(1), &[1; 8]));
        assert!(!small.append(key(1), &[1; 8]));
        assert_eq!(small.full, 1);
    }
}
