//! `dta cluster-demo`: drive a collector cluster and check it answers as one system.
//!
//! [`drive`] sends the papers' mix (Key-Write INT paths keyed by flow, Key-Increment host
//! counters, Append loss and congestion events) from the workload generator to the cluster's
//! translators, each switch's reports to one translator (as switches send to their nearest),
//! and keeps the ground truth: each key's last value, each counter's sum, each list's entries
//! in order. [`verify`] then asks the cluster client: every Key-Write key must come back with
//! its value from the collector the cluster file says owns it, every counter with its sum,
//! every Append entry from its list's owner; it tallies what each collector answered.

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddrV4;
use std::time::{Duration, Instant};

use dta_collector::cluster::{ClusterClient, KeyQuery};
use dta_collector::query::keys::{parse_hex, to_hex};
use dta_proto::wire::report::Primitive;
use serde_json::Value;

use crate::gen::{Generator, Mix, Scenario};
use crate::sender::PacedSender;

/// What was sent: the answers the cluster must give.
#[derive(Debug, Clone, Default)]
pub struct Truth {
    /// Key-Write: key → last value.
    pub keywrite: HashMap<Vec<u8>, Vec<u8>>,
    /// Key-Increment: key → sum of deltas.
    pub counters: HashMap<Vec<u8>, u64>,
    /// Append: list → entries in the order sent.
    pub lists: BTreeMap<u32, Vec<Vec<u8>>>,
    /// Reports sent per translator.
    pub per_translator: Vec<u64>,
}

impl Truth {
    /// Adds `other` (a later phase) on top: newer values, added counts, appended entries.
    pub fn absorb(&mut self, other: &Truth) {
        for (k, v) in &other.keywrite {
            self.keywrite.insert(k.clone(), v.clone());
        }
        for (k, n) in &other.counters {
            *self.counters.entry(k.clone()).or_default() += n;
        }
        for (l, e) in &other.lists {
            self.lists.entry(*l).or_default().extend(e.iter().cloned());
        }
    }
}

/// The demo's workload: the papers' mix without postcards, `lists` Append lists per event
/// type, redundancy 2.
pub fn scenario(seed: u64, lists: u32) -> Scenario {
    Scenario {
        mix: Mix {
            keywrite: 4,
            postcard: 0,
            loss: 2,
            congestion: 1,
            counter: 2,
        },
        lists,
        seed,
        ..Scenario::default()
    }
}

/// Sends `count` reports of `sc` to `translators` at `rate` reports/s (each switch to
/// translator `switch % translators`, so a key's or a list's reports stay in order), and
/// returns what the cluster must now hold.
pub fn drive(
    sc: &Scenario,
    translators: &[SocketAddrV4],
    count: u64,
    rate: u64,
) -> Result<Truth, String> {
    if translators.is_empty() {
        return Err("no translator to send to".into());
    }
    let mut g = Generator::new(sc);
    let per_rate = rate.div_ceil(translators.len() as u64);
    let mut senders = translators
        .iter()
        .map(|&t| PacedSender::new(t, per_rate))
        .collect::<Result<Vec<_>, _>>()?;
    let mut truth = Truth {
        per_translator: vec![0; translators.len()],
        ..Truth::default()
    };
    let profile = sc.wire_profile();
    let mut buf = [0u8; 256];
    // Rate-paced only: the translators may be other processes.
    let unlimited = || u64::MAX / 2;
    for _ in 0..count {
        let r = g.next_report();
        let src = g.source_of(&r);
        let t = (u32::from(*src.ip()) as usize) % translators.len();
        match &r.primitive {
            Primitive::KeyWrite { key, value, .. } => {
                truth
                    .keywrite
                    .insert(key.as_bytes().to_vec(), value.as_bytes().to_vec());
            }
            Primitive::KeyIncrement { key, delta, .. } => {
                *truth.counters.entry(key.as_bytes().to_vec()).or_default() += delta;
            }
            Primitive::Append { list, value } => {
                truth
                    .lists
                    .entry(*list)
                    .or_default()
                    .push(value.as_bytes().to_vec());
            }
            Primitive::Postcard { .. } => continue,
        }
        let n = r.emit(profile, &mut buf).map_err(|e| format!("{e:?}"))?;
        senders[t].push(&buf[..n], unlimited)?;
        truth.per_translator[t] += 1;
    }
    for s in &mut senders {
        s.flush(unlimited)?;
    }
    Ok(truth)
}

/// What each collector answered, and what did not match.
#[derive(Debug, Clone, Default)]
pub struct Verdict {
    /// Per collector (cluster order): Key-Write keys, counter keys, counted total, Append
    /// entries it answered.
    pub per_collector: Vec<(String, u64, u64, u64, u64)>,
    /// Key-Write keys answered with the right value by the right collector.
    pub keywrite_ok: u64,
    /// Counters answered with their exact sum.
    pub counters_ok: u64,
    /// Sum of the counters as sent, and as answered.
    pub counted: (u64, u64),
    /// Append entries sent and recovered.
    pub entries: (u64, u64),
    /// Every mismatch, one sentence each (empty: the cluster answered everything right).
    pub mismatches: Vec<String>,
}

/// Bytes of an answer's hex field.
fn hex_field(v: &Value, k: &str) -> Option<Vec<u8>> {
    parse_hex(v.get(k)?.as_str()?).ok()
}

/// `got` is `want` padded with zeros (a store slot or entry is at least as long as what was
/// sent).
fn padded_eq(got: &[u8], want: &[u8]) -> bool {
    got.len() >= want.len()
        && got[..want.len()] == *want
        && got[want.len()..].iter().all(|&b| b == 0)
}

/// Asks the cluster about everything in `truth` (for cluster epoch `epoch`, or by default the
/// newest with fallback) and compares. Key-Write answers must come from the collector the
/// newest epoch (or `epoch`) assigns the key to, unless `owner_check` is false.
pub fn verify(c: &ClusterClient, truth: &Truth, epoch: Option<u32>) -> Result<Verdict, String> {
    let cl = c.cluster();
    let names: Vec<String> = cl
        .collectors
        .iter()
        .map(|x| x.endpoint.name.clone())
        .collect();
    let mut v = Verdict {
        per_collector: names.iter().map(|n| (n.clone(), 0, 0, 0, 0)).collect(),
        ..Verdict::default()
    };
    let part = match epoch {
        Some(e) => cl.epoch(e).ok_or(format!("no cluster epoch {e}"))?,
        None => cl.newest(),
    };
    let idx = |v: &Value| -> Option<usize> {
        let n = v.get("collector")?.as_str()?;
        names.iter().position(|x| x == n)
    };
    let mut kw: Vec<(&Vec<u8>, &Vec<u8>)> = truth.keywrite.iter().collect();
    kw.sort();
    let keys: Vec<String> = kw.iter().map(|(k, _)| to_hex(k)).collect();
    if !keys.is_empty() {
        let answers = c.query(KeyQuery::KeyWrite, &keys, epoch, "")?;
        for ((k, want), a) in kw.iter().zip(&answers) {
            let who = idx(a);
            if let Some(i) = who {
                v.per_collector[i].1 += 1;
            }
            let owner = part.key_owner(k);
            let value_ok = hex_field(a, "value").is_some_and(|g| padded_eq(&g, want));
            if !value_ok {
                v.mismatches.push(format!(
                    "keywrite {}: wanted {}, got {a}",
                    to_hex(k),
                    to_hex(want)
                ));
            } else if who != owner {
                v.mismatches.push(format!(
                    "keywrite {}: answered by {:?}, but the cluster places it on {:?}",
                    to_hex(k),
                    who.map(|i| &names[i]),
                    owner.map(|i| &names[i])
                ));
            } else {
                v.keywrite_ok += 1;
            }
        }
    }
    let mut ki: Vec<(&Vec<u8>, &u64)> = truth.counters.iter().collect();
    ki.sort();
    let keys: Vec<String> = ki.iter().map(|(k, _)| to_hex(k)).collect();
    if !keys.is_empty() {
        let answers = c.query(KeyQuery::Counter, &keys, epoch, "")?;
        for ((k, &want), a) in ki.iter().zip(&answers) {
            let got = a.get("estimate").and_then(Value::as_u64).unwrap_or(0);
            v.counted.0 += want;
            v.counted.1 += got;
            let parts: Vec<(Option<usize>, u64)> = match a.get("parts").and_then(Value::as_array) {
                Some(ps) => ps
                    .iter()
                    .map(|p| {
                        (
                            idx(p),
                            p.get("estimate").and_then(Value::as_u64).unwrap_or(0),
                        )
                    })
                    .collect(),
                None => vec![(idx(a), got)],
            };
            for (who, n) in parts {
                if let Some(i) = who {
                    v.per_collector[i].2 += 1;
                    v.per_collector[i].3 += n;
                }
            }
            if got == want {
                v.counters_ok += 1;
            } else {
                v.mismatches
                    .push(format!("counter {}: wanted {want}, got {got}", to_hex(k)));
            }
        }
    }
    for (list, want) in &truth.lists {
        let (got, lost) = c.tail(*list, epoch, "")?;
        v.entries.0 += want.len() as u64;
        if lost > 0 {
            v.mismatches.push(format!(
                "list {list}: {lost} batch(es) overwritten before read"
            ));
        }
        let mut recovered = 0;
        for (i, w) in want.iter().enumerate() {
            match got.get(i) {
                Some(e) if hex_field(e, "entry").is_some_and(|g| padded_eq(&g, w)) => {
                    recovered += 1;
                    if let Some(c) = idx(e) {
                        v.per_collector[c].4 += 1;
                    }
                }
                Some(e) => {
                    v.mismatches.push(format!(
                        "list {list} entry {i}: wanted {}, got {e}",
                        to_hex(w)
                    ));
                    break;
                }
                None => {
                    v.mismatches.push(format!(
                        "list {list}: {} of {} entries recovered",
                        got.len(),
                        want.len()
                    ));
                    break;
                }
            }
        }
        if got.len() > want.len() {
            v.mismatches.push(format!(
                "list {list}: {} entries, {} sent",
                got.len(),
                want.len()
            ));
        }
        v.entries.1 += recovered;
    }
    if v.counted.0 != v.counted.1 {
        v.mismatches.push(format!(
            "counter totals: sent {}, answered {}",
            v.counted.0, v.counted.1
        ));
    }
    Ok(v)
}

/// [`verify`] until everything matches or `timeout` passes (the translators flush partial
/// Append batches after their flush delay, and the last frames may still be in flight).
pub fn verify_settled(
    c: &ClusterClient,
    truth: &Truth,
    epoch: Option<u32>,
    timeout: Duration,
) -> Result<Verdict, String> {
    let t0 = Instant::now();
    loop {
        let v = verify(c, truth, epoch)?;
        if v.mismatches.is_empty() || t0.elapsed() > timeout {
            return Ok(v);
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Prints the per-collector and total figures.
pub fn print(v: &Verdict, truth: &Truth) {
    println!(
        "{:<10} {:>14} {:>14} {:>16} {:>14}",
        "collector", "keywrite keys", "counter keys", "counted", "append entries"
    );
    for (n, kw, ck, ct, ap) in &v.per_collector {
        println!("{n:<10} {kw:>14} {ck:>14} {ct:>16} {ap:>14}");
    }
    let sum = |f: fn(&(String, u64, u64, u64, u64)) -> u64| -> u64 {
        v.per_collector.iter().map(f).sum()
    };
    println!(
        "{:<10} {:>14} {:>14} {:>16} {:>14}",
        "total",
        sum(|r| r.1),
        sum(|r| r.2),
        sum(|r| r.3),
        sum(|r| r.4)
    );
    println!(
        "sent {} reports ({}): {} Key-Write keys, {} counters summing to {}, {} Append entries \
         on {} lists",
        truth.per_translator.iter().sum::<u64>(),
        truth
            .per_translator
            .iter()
            .enumerate()
            .map(|(i, n)| format!("translator {} {n}", i + 1))
            .collect::<Vec<_>>()
            .join(", "),
        truth.keywrite.len(),
        truth.counters.len(),
        v.counted.0,
        v.entries.0,
        truth.lists.len()
    );
    println!(
        "keywrite: {}/{} answered right by their owner; counters: {}/{} exact (total {} of {}); \
         append: {}/{} entries recovered",
        v.keywrite_ok,
        truth.keywrite.len(),
        v.counters_ok,
        truth.counters.len(),
        v.counted.1,
        v.counted.0,
        v.entries.1,
        v.entries.0
    );
    for m in v.mismatches.iter().take(20) {
        println!("MISMATCH {m}");
    }
    if v.mismatches.len() > 20 {
        println!("... and {} more mismatches", v.mismatches.len() - 20);
    }
}
