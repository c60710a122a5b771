//! `dta`'s side of the comparison: the software RNIC fed the trace's RoCEv2 frames at
//! saturation, its stores' memory, lookups over the HTTP query API and in process, and the CPU
//! per primitive.

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use dta_collector::query::append::{ListReader, Start};
use dta_collector::query::keywrite::{KeyWriteAnswer, Vote};
use dta_proto::wire::report::{parse_report, Primitive};
use dta_proto::Key;
use serde::Serialize;

use crate::gen::Scenario;
use crate::replay::rnic_saturated_then;
use crate::trace::Trace;
use dta_collector::service::Collector;

use super::http::HttpConn;
use super::lineproto::hex;
use super::readback::lists_off;
use super::*;

/// The software RNIC's cost for one primitive of the mix alone.
#[derive(Debug, Clone, Serialize)]
pub struct PrimitiveCost {
    /// The primitive and what it carries.
    pub primitive: String,
    /// Reports of that primitive in the trace.
    pub reports: u64,
    /// RoCEv2 frames they became.
    pub frames: u64,
    /// RNIC drop and error counters, summed (must be 0).
    pub rnic_errors: u64,
    /// RNIC thread CPU per report (ns).
    pub ns_per_report: f64,
    /// RNIC thread CPU per frame (ns).
    pub ns_per_frame: f64,
}

/// The software RNIC fed each primitive's reports of `trace` alone (translated ahead of time,
/// at saturation): where its CPU per report comes from.
pub fn dta_per_primitive(sc: &Scenario, trace: &Trace) -> Result<Vec<PrimitiveCost>, String> {
    let parse = sc.parse_config();
    type Is = fn(&Primitive) -> bool;
    let kinds: [(String, Is); 3] = [
        (
            format!("Key-Write, N = {} (INT paths)", sc.redundancy),
            |p| matches!(p, Primitive::KeyWrite { .. }),
        ),
        (
            format!("Key-Increment, N = {} (host counters)", sc.redundancy),
            |p| matches!(p, Primitive::KeyIncrement { .. }),
        ),
        (
            format!("Append, batch {} (loss and congestion events)", sc.batch),
            |p| matches!(p, Primitive::Append { .. }),
        ),
    ];
    let mut out = Vec::new();
    for (name, is) in kinds {
        let mut sub = Trace::with_capacity(trace.len() / 2);
        for i in 0..trace.len() {
            let d = trace.get(i);
            if parse_report(d.payload, &parse).is_ok_and(|r| is(&r.primitive)) {
                sub.push(d.src, d.dst, d.payload);
            }
        }
        if sub.is_empty() {
            continue;
        }
        let r = crate::replay::rnic_saturated(sc, &sub, 1)?;
        out.push(PrimitiveCost {
            primitive: name,
            reports: r.reports,
            frames: r.frames,
            rnic_errors: r.rnic_errors,
            ns_per_report: r.ns_per_report,
            ns_per_frame: r.ns_per_frame,
        });
    }
    Ok(out)
}

/// `dta` on the software RNIC (measured) and on a real RNIC (by construction).
pub(super) fn run_dta(
    base: &Scenario,
    trace: &Trace,
    truth: &Truth,
    keys: &[Key],
    ctr_keys: &[Key],
) -> Result<(Contender, Contender), String> {
    let sc = sized(base, truth)?;
    let (slots_log2, capacity) = (sc.slots_log2, sc.capacity);
    // The translator (on its own host in a deployment) translates the trace ahead of time;
    // its RoCEv2 frames then go to the collector's software RNIC over loopback UDP as fast as
    // the RNIC takes them (full receive bursts, as the ingest processes get).
    let inspect = |collector: &Collector| {
        let stores = ["paths", "counters", "losses", "congestion"];
        let mut region_bytes = 0u64;
        for s in stores {
            region_bytes += collector.store(s).ok_or(s)?.memory_bytes() as u64;
        }
        let mut h = Holds {
            keywrite_expected: truth.paths.len() as u64,
            counter_expected: truth.counters.len() as u64,
            append_expected: truth.appends,
            lookups: keys.len() as u64,
            counters_checked: ctr_keys.len() as u64,
            ..Holds::default()
        };
        // Every key through the query engine, in process; the sample's latency too.
        let paths = collector.store("paths").ok_or("paths")?;
        let view = paths.keywrite().ok_or("paths is not Key-Write")?;
        let n = sc.redundancy as usize;
        let answer = |k: &Key| match view.query(k, n, Vote::Plurality) {
            KeyWriteAnswer::Value { value, .. } => {
                let want = truth.paths[k];
                value.as_bytes().get(..want.len()) == Some(want.as_bytes())
            }
            _ => false,
        };
        h.keywrite_keys = Some(truth.paths.keys().filter(|k| answer(k)).count() as u64);
        let mut lat = Vec::with_capacity(keys.len());
        for k in keys {
            let t0 = Instant::now();
            let a = std::hint::black_box(view.query(k, n, Vote::Plurality));
            lat.push(t0.elapsed().as_nanos() as u64);
            let _ = a;
        }
        let in_process = LookupLatency::of(lat);
        // The same sample through the HTTP query API.
        let ctl = collector.control_addr().ok_or("no control port")?;
        let mut c = HttpConn::new(&ctl.to_string(), Duration::from_secs(30))?;
        let mut lat = Vec::with_capacity(keys.len());
        let mut body = Vec::new();
        let mut hx = [0u8; 128];
        for k in keys {
            let target = format!("/query/keywrite/paths/{}", hex(k.as_bytes(), &mut hx));
            let t0 = Instant::now();
            let status = c.request("GET", &target, "", b"", &mut body)?;
            lat.push(t0.elapsed().as_nanos() as u64);
            let v: serde_json::Value = serde_json::from_slice(&body)
                .map_err(|e| format!("dta query answered {status}: {e}"))?;
            let want = hex(truth.paths[k].as_bytes(), &mut hx).to_string();
            h.lookups_ok += u64::from(
                v["result"] == "value" && v["value"].as_str().is_some_and(|s| s.starts_with(&want)),
            );
        }
        let http = LookupLatency::of(lat);
        let counters = collector.store("counters").ok_or("counters")?;
        let cview = counters.counter().ok_or("counters is not Key-Increment")?;
        let exact = truth
            .counters
            .iter()
            .filter(|(k, &v)| cview.query(k, n).estimate == v)
            .count() as u64;
        h.counter_keys = Some(exact);
        h.counters_ok = ctr_keys
            .iter()
            .filter(|k| cview.query(k, n).estimate == truth.counters[*k])
            .count() as u64;
        // Every Append entry read back from the rings and matched against what was sent.
        // Entries are the reports' values zero-padded to the store's entry size: compare both
        // padded to 32 bytes.
        let pad = |b: &[u8]| {
            let mut p = [0u8; 32];
            let n = b.len().min(32);
            p[..n].copy_from_slice(&b[..n]);
            p
        };
        let mut left: HashMap<(u32, [u8; 32]), u32> = HashMap::with_capacity(truth.entries.len());
        for ((l, v), c) in &truth.entries {
            *left.entry((*l, pad(v.as_bytes()))).or_default() += c;
        }
        let mut got_lists: BTreeMap<u32, u64> = BTreeMap::new();
        let mut strays = 0u64;
        for name in ["losses", "congestion"] {
            let s = collector.store(name).ok_or(name)?;
            let g = s.append().ok_or("not Append")?;
            let first = match *s.config.kind.layout() {
                dta_proto::meta::StoreKind::Append {
                    first_list, lists, ..
                } => first_list..first_list + lists,
                _ => return Err(format!("{name} is not Append")),
            };
            for list in first.clone() {
                let mut rd = ListReader::new(
                    &s.region,
                    g.layout,
                    g.list_offset(list - first.start),
                    Start::Seq(1),
                );
                rd.poll(&s.region, usize::MAX, |_, e| {
                    *got_lists.entry(list).or_default() += 1;
                    match left.get_mut(&(list, pad(e))) {
                        Some(c) if *c > 0 => *c -= 1,
                        _ => strays += 1,
                    }
                });
            }
        }
        h.append_strays = strays;
        h.append_entries = truth.appends - left.values().map(|&c| c as u64).sum::<u64>();
        h.lists_off = lists_off(&truth.lists, &got_lists);
        Ok((region_bytes, h, in_process, http))
    };
    let (sat, (region_bytes, holds, in_process, http)) =
        rnic_saturated_then(&sc, trace, 1, true, inspect)?;
    let rnic_ns = (sat.rnic_cpu_secs * 1e9) as u64;
    let stored = sat.reports;
    let per = |ns: f64| ns / stored.max(1) as f64;
    let memory = Memory {
        basis: format!(
            "the four stores' regions as configured for this data set (2^{slots_log2} Key-Write \
             and Key-Increment slots, N = {}, Append rings of {capacity} entries)",
            sc.redundancy
        ),
        bytes: region_bytes as i64,
        bytes_per_million_entries: region_bytes as f64 * 1e6 / truth.entries().max(1) as f64,
        ..Memory::default()
    };
    let mut notes = vec![
        format!(
            "the translator (on its own host) translated the trace ahead of time; its {} \
             RoCEv2 frames went to the software RNIC over loopback UDP as fast as it took them",
            sat.frames
        ),
        "Key-Write keys and counters held: the ones the query engine answers exactly".into(),
    ];
    if sat.rnic_errors > 0 || sat.executed != sat.frames {
        notes.push(format!(
            "the RNIC executed {} of {} frames ({} errors)",
            sat.executed, sat.frames, sat.rnic_errors
        ));
    }
    let soft = Contender {
        id: "dta-sw-rnic".into(),
        name: "dta, software RNIC".into(),
        measured: true,
        sent: trace.len() as u64,
        stored,
        secs: sat.secs,
        server_run_cpu_ns: rnic_ns,
        ingest_cpu_ns: 0,
        server_ns_per_report: per(rnic_ns as f64),
        ingest_ns_per_report: 0.0,
        total_ns_per_report: per(rnic_ns as f64),
        memory: memory.clone(),
        lookup: Some(http),
        lookup_in_process: Some(in_process),
        holds: holds.clone(),
        notes,
        ..Contender::default()
    };
    let real = Contender {
        id: "dta-real-rnic".into(),
        name: "dta, real RNIC".into(),
        measured: false,
        memory,
        lookup: Some(http),
        lookup_in_process: Some(in_process),
        notes: vec![
            "not measured: the RNIC executes the RDMA WRITEs and atomics without the \
             collector's CPU, so collector CPU per report is 0 by construction; memory and \
             queries are the software RNIC's (same regions, same query engine)"
                .into(),
        ],
        ..Contender::default()
    };
    Ok((soft, real))
}
