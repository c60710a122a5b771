//! The ground-truth check `dta replay` runs on a converted capture: the trace through the
//! production translator pipeline and software RNIC (one worker, in memory: `replay::Rig`),
//! then every store queried and compared with what the conversion says the switches reported.
//!
//! - Key-Write: every flow's path, exactly (the value's first 4·L bytes, zeros after);
//! - Key-Increment: every flow's packet and byte counters, exactly;
//! - Postcarding: every flow's path, hop by hop;
//! - Append: the loss and congestion lists hold exactly the events sent (as multisets);
//! - Sketch-Merge: every epoch still in its slot (not overwritten by a later epoch) reads back
//!   cell for cell as the sketches built centrally from the truth's per-epoch flow sizes and
//!   paths (Count-Min: each flow's packets once per switch it crosses; HyperLogLog: each flow).

use std::collections::BTreeMap;

use dta_collector::query::append::{ListReader, Start};
use dta_collector::query::keywrite::{KeyWriteAnswer, Vote};
use dta_collector::query::postcard::PathAnswer;
use dta_proto::sketch::Sketch;
use dta_proto::Key;
use serde::Serialize;

use super::convert::{TrafficFile, COUNTER_BYTES, COUNTER_PACKETS};
use crate::replay::{MemOptions, Rig, RnicMode};
use crate::trace::Trace;

/// Answers that matched, of those checked.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Tally {
    /// Matched.
    pub ok: u64,
    /// Checked.
    pub total: u64,
}

impl Tally {
    fn add(&mut self, ok: bool) {
        self.ok += ok as u64;
        self.total += 1;
    }

    /// True if every answer matched.
    pub fn all(&self) -> bool {
        self.ok == self.total
    }
}

impl std::fmt::Display for Tally {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.ok, self.total)
    }
}

/// What the check found.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Check {
    /// Reports fed.
    pub reports: u64,
    /// Reports the translator dropped (must be 0).
    pub dropped: u64,
    /// Drop counters that moved, by name.
    pub drop_reasons: Vec<(String, u64)>,
    /// Flows whose Key-Write path reads back.
    pub paths: Tally,
    /// Flows whose packet and byte counters read back exactly.
    pub counters: Tally,
    /// Flows whose postcard path reads back.
    pub postcards: Tally,
    /// Loss events found in the lists.
    pub losses: Tally,
    /// Congestion events found in the lists.
    pub congestion: Tally,
    /// Append entries read that no event accounts for.
    pub unexpected_entries: u64,
    /// Epochs whose merged Count-Min and HyperLogLog equal the central ones.
    pub sketch_epochs: Tally,
    /// Per checked epoch: (epoch, flows, merged HyperLogLog estimate).
    pub distinct_flows: Vec<(u32, u64, f64)>,
    /// The first few mismatches, described.
    pub mismatches: Vec<String>,
}

impl Check {
    /// True if everything matched and nothing was dropped.
    pub fn passed(&self) -> bool {
        self.dropped == 0
            && self.unexpected_entries == 0
            && [
                self.paths,
                self.counters,
                self.postcards,
                self.losses,
                self.congestion,
                self.sketch_epochs,
            ]
            .iter()
            .all(Tally::all)
    }

    fn mismatch(&mut self, what: String) {
        if self.mismatches.len() < 20 {
            self.mismatches.push(what);
        }
    }
}

fn unhex(s: &str) -> Result<Vec<u8>, String> {
    if s.len() % 2 != 0 {
        return Err(format!("odd-length hex {s:?}"));
    }
    (0..s.len() / 2)
        .map(|i| u8::from_str_radix(&s[2 * i..2 * i + 2], 16).map_err(|e| format!("{s:?}: {e}")))
        .collect()
}

/// Replays `trace` (what `dta gen --traffic` wrote for `file`) and checks every store.
pub fn check(file: &TrafficFile, trace: &Trace) -> Result<Check, String> {
    let sc = &file.scenario;
    let truth = &file.traffic;
    let sk = sc.sketch.ok_or("the scenario has no Sketch-Merge stores")?;
    let mut rig = Rig::new(
        sc,
        0,
        1,
        &MemOptions {
            workers: 1,
            rnic: RnicMode::Inline,
            pin: false,
            ..MemOptions::default()
        },
    )?;
    let mut now = 1_000_000u64;
    let mut views = Vec::with_capacity(32);
    let mut i = 0;
    while i < trace.len() {
        let j = (i + 32).min(trace.len());
        views.clear();
        views.extend((i..j).map(|k| trace.get(k)));
        rig.tick(now);
        rig.feed(now, &views);
        now += 10_000;
        i = j;
    }
    rig.flush(now);
    // Let every timer fire (the sketch merge writes what it holds on its flush timer).
    now += 1_000_000_000;
    rig.tick(now);
    rig.flush(now);
    let mut c = Check {
        reports: trace.len() as u64,
        ..Check::default()
    };
    let counters = *rig.pipeline.counters();
    c.dropped = counters.dropped();
    for (info, v) in counters.iter() {
        if info.name.starts_with("drop_") && v > 0 {
            c.drop_reasons.push((info.name.to_string(), v));
        }
    }
    let n = sc.redundancy as usize;
    let keys: Vec<Vec<u8>> = truth
        .flows
        .iter()
        .map(|f| unhex(&f.key))
        .collect::<Result<_, _>>()?;

    let kw = rig
        .store("paths")
        .and_then(|s| s.keywrite())
        .ok_or("no paths store")?;
    let ctr = rig
        .store("counters")
        .and_then(|s| s.counter())
        .ok_or("no counters store")?;
    let pc = rig
        .store("postcards")
        .and_then(|s| s.postcard())
        .ok_or("no postcards store")?;
    let mut found = Vec::new();
    for (f, k) in truth.flows.iter().zip(&keys) {
        let key = Key::new(k).ok_or("a flow key of the truth is not 1..=16 bytes")?;
        let want: Vec<u8> = f.path.iter().flat_map(|x| x.to_be_bytes()).collect();
        let ok = match kw.query(&key, n, Vote::Plurality) {
            KeyWriteAnswer::Value { value, .. } => {
                let v = value.as_bytes();
                v.len() >= want.len()
                    && v[..want.len()] == want[..]
                    && v[want.len()..].iter().all(|&b| b == 0)
            }
            _ => false,
        };
        c.paths.add(ok);
        if !ok {
            found.push(format!("path of flow {} ({} -> {})", f.key, f.src, f.dst));
        }
        let mut exact = true;
        for (suffix, want) in [(COUNTER_PACKETS, f.packets), (COUNTER_BYTES, f.bytes)] {
            let mut kk = k.clone();
            kk.push(suffix);
            let got = ctr.query(&Key::new(&kk).ok_or("counter key")?, n).estimate;
            if got != want {
                exact = false;
                found.push(format!(
                    "counter {} of flow {}: {got}, sent {want}",
                    suffix as char, f.key
                ));
            }
        }
        c.counters.add(exact);
        let ok = matches!(pc.query(&key, 1, 1), PathAnswer::Path { path, .. } if path.hops() == f.path.as_slice());
        c.postcards.add(ok);
        if !ok {
            found.push(format!("postcard path of flow {}", f.key));
        }
    }

    // Append: multisets of entries.
    // Every list of the store (ListReader takes the store's own list index, 0..lists).
    let lists = |store: &str, want: Vec<Vec<u8>>, tally: &mut Tally| {
        let mut need: BTreeMap<Vec<u8>, u64> = BTreeMap::new();
        for w in &want {
            *need.entry(w.clone()).or_default() += 1;
        }
        let mut extra = 0u64;
        if let Some(s) = rig.store(store) {
            if let Some(a) = s.append() {
                for l in 0..sc.lists {
                    let mut r =
                        ListReader::new(&s.region, a.layout, a.list_offset(l), Start::Seq(1));
                    r.poll(&s.region, usize::MAX, |_, e| {
                        let w = want.first().map_or(e.len(), |w| w.len().min(e.len()));
                        let (head, pad) = e.split_at(w);
                        match need.get_mut(head) {
                            Some(k) if *k > 0 && pad.iter().all(|&b| b == 0) => {
                                *k -= 1;
                                tally.ok += 1;
                            }
                            _ => extra += 1,
                        }
                    });
                }
            }
        }
        tally.total += want.len() as u64;
        extra
    };
    let loss_want = truth
        .losses
        .iter()
        .map(|l| unhex(&l.entry))
        .collect::<Result<Vec<_>, _>>()?;
    let cong_want: Vec<Vec<u8>> = truth
        .congestion
        .iter()
        .map(|e| {
            let mut v = e.switch.to_be_bytes().to_vec();
            v.extend_from_slice(&e.depth.to_be_bytes());
            v
        })
        .collect();
    let mut losses = Tally::default();
    let mut congestion = Tally::default();
    c.unexpected_entries += lists("losses", loss_want, &mut losses);
    c.unexpected_entries += lists("congestion", cong_want, &mut congestion);
    if !losses.all() {
        found.push(format!("{} of {} loss events", losses.ok, losses.total));
    }
    if !congestion.all() {
        found.push(format!(
            "{} of {} congestion events",
            congestion.ok, congestion.total
        ));
    }
    c.losses = losses;
    c.congestion = congestion;

    // Sketch-Merge: the epochs still in their slots.
    let (cm_shape, hll_shape) = (sk.cm_shape()?, sk.hll_shape()?);
    let cm_view = rig
        .store("flow-sizes")
        .and_then(|s| s.sketch())
        .ok_or("no flow-sizes store")?;
    let hll_view = rig
        .store("flows")
        .and_then(|s| s.sketch())
        .ok_or("no flows store")?;
    let mut last_in_slot: BTreeMap<u32, u32> = BTreeMap::new();
    for ep in &truth.epochs {
        last_in_slot.insert(ep.epoch % sk.epochs, ep.epoch);
    }
    for ep in &truth.epochs {
        if last_in_slot.get(&(ep.epoch % sk.epochs)) != Some(&ep.epoch) {
            continue;
        }
        let mut cm = Sketch::new(cm_shape);
        let mut hll = Sketch::new(hll_shape);
        for &(fi, pkts) in &ep.flows {
            let f = truth
                .flows
                .get(fi as usize)
                .ok_or("an epoch names a flow the truth does not have")?;
            let key = Key::new(&keys[fi as usize]).ok_or("flow key")?;
            for _ in &f.path {
                cm.update(&key, pkts.min(u32::MAX as u64) as u32);
            }
            hll.update(&key, 1);
        }
        let got_cm = cm_view.read_epoch(ep.epoch).sketch;
        let got_hll = hll_view.read_epoch(ep.epoch).sketch;
        let ok = got_cm.cells() == cm.cells() && got_hll.cells() == hll.cells();
        c.sketch_epochs.add(ok);
        if !ok {
            found.push(format!("sketches of epoch {}", ep.epoch));
        }
        c.distinct_flows.push((
            ep.epoch,
            ep.flows.len() as u64,
            got_hll.cardinality().unwrap_or(0.0),
        ));
    }
    for m in found {
        c.mismatch(m);
    }
    Ok(c)
}
