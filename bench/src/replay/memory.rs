//! The in-memory replay: the trace sharded by the pipeline's ownership rule, one pinned
//! worker thread per shard, each driving its own [`Rig`], and the results merged.

use std::collections::VecDeque;
use std::sync::{Arc, Barrier};
use std::time::Instant;

use dta_collector::rnic::counters::RnicCounters;
use dta_proto::batch::Datagram;
use dta_proto::hash::{HashProfile, PostcardHasher};
use dta_proto::wire::report::{parse_report, Primitive};
use dta_translator::datapath::stats::TranslatorCounters;
use hdrhistogram::Histogram;

use super::rig::Rig;
use super::*;
use crate::gen::Scenario;
use crate::sys;
use crate::trace::Trace;

/// Splits `trace` into one trace per worker by the pipeline's ownership rule.
pub fn shard(sc: &Scenario, trace: &Trace, workers: usize) -> Vec<Trace> {
    let per = trace.len() / workers.max(1) + 1;
    let mut out: Vec<Trace> = (0..workers).map(|_| Trace::with_capacity(per)).collect();
    if workers <= 1 {
        out[0] = trace.clone();
        return out;
    }
    let cfg = sc.parse_config();
    let ph = PostcardHasher::new(
        HashProfile::Independent,
        1 << sc.chunks_log2,
        sc.cache_slots,
        5,
    );
    let mut rr = 0usize;
    for i in 0..trace.len() {
        let d = trace.get(i);
        let owner = match parse_report(d.payload, &cfg).map(|r| r.primitive) {
            Ok(Primitive::Append { list, .. }) => list as usize % workers,
            Ok(Primitive::Postcard { flow, .. }) if ph.is_some() => {
                ph.as_ref().expect("checked").cache_index(&flow) as usize % workers
            }
            _ => {
                rr += 1;
                rr % workers
            }
        };
        out[owner].push(d.src, d.dst, d.payload);
    }
    out
}

pub(super) struct WorkerOut {
    reports: u64,
    counters: TranslatorCounters,
    frames: u64,
    frame_bytes: u64,
    rnic: RnicCounters,
    secs: f64,
    cpu_ns: u64,
    hist: Histogram<u64>,
}

pub(super) fn run_worker(
    sc: &Scenario,
    trace: &Trace,
    w: usize,
    o: &MemOptions,
    start: &Barrier,
) -> Result<WorkerOut, String> {
    if o.pin {
        sys::pin_to(w);
    }
    let built = Rig::new(sc, w, o.workers, o);
    start.wait();
    let mut rig = built?;
    let mut hist =
        Histogram::<u64>::new_with_bounds(1, 3_600_000_000_000, 3).map_err(|e| e.to_string())?;
    let burst = o.burst.max(1);
    let mut pending: VecDeque<(u64, u64)> = VecDeque::with_capacity(1 << 16);
    let mut credited = 0u64;
    let mut views: Vec<Datagram<'_>> = Vec::with_capacity(burst);
    let cpu0 = sys::thread_cpu_ns();
    let epoch = Instant::now();
    let base = 1_000_000u64;
    let clock = || base + epoch.elapsed().as_nanos() as u64;
    let mut reports = 0u64;
    let credit = |rig: &Rig,
                  pending: &mut VecDeque<(u64, u64)>,
                  credited: &mut u64,
                  hist: &mut Histogram<u64>,
                  t: u64| {
        let c = rig.pipeline.counters();
        let done = c.translated + c.dropped();
        let mut n = done - *credited;
        *credited = done;
        while n > 0 {
            let Some(front) = pending.front_mut() else {
                break;
            };
            let k = front.1.min(n);
            let _ = hist.record_n(t.saturating_sub(front.0).max(1), k);
            front.1 -= k;
            n -= k;
            if front.1 == 0 {
                pending.pop_front();
            }
        }
    };
    for _ in 0..o.loops.max(1) {
        let mut i = 0;
        while i < trace.len() {
            let j = (i + burst).min(trace.len());
            views.clear();
            views.extend((i..j).map(|k| trace.get(k)));
            let t0 = clock();
            pending.push_back((t0, (j - i) as u64));
            rig.tick(t0);
            rig.feed(t0, &views);
            let t1 = clock();
            credit(&rig, &mut pending, &mut credited, &mut hist, t1);
            reports += (j - i) as u64;
            i = j;
        }
    }
    let t = clock();
    rig.flush(t);
    let t1 = clock();
    credit(&rig, &mut pending, &mut credited, &mut hist, t1);
    let secs = epoch.elapsed().as_secs_f64();
    let cpu_ns = sys::thread_cpu_ns().saturating_sub(cpu0);
    Ok(WorkerOut {
        reports,
        counters: *rig.pipeline.counters(),
        frames: rig.frames,
        frame_bytes: rig.frame_bytes,
        rnic: rig.rnic.counters(),
        secs,
        cpu_ns,
        hist,
    })
}

/// Replays `trace` in memory on `o.workers` pinned threads.
pub fn replay_memory(sc: &Scenario, trace: &Trace, o: &MemOptions) -> Result<ReplayResult, String> {
    let workers = o.workers.max(1);
    let o = MemOptions {
        workers,
        ..o.clone()
    };
    let shards = shard(sc, trace, workers);
    let start = Arc::new(Barrier::new(workers));
    let cpu0 = sys::process_cpu_secs();
    let outs: Vec<Result<WorkerOut, String>> = std::thread::scope(|s| {
        let hs: Vec<_> = shards
            .iter()
            .enumerate()
            .map(|(w, t)| {
                let (sc, o, start) = (sc, &o, start.clone());
                std::thread::Builder::new()
                    .name(format!("dta-replay-{w}"))
                    .spawn_scoped(s, move || run_worker(sc, t, w, o, &start))
                    .expect("spawn replay worker")
            })
            .collect();
        hs.into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err("replay worker panicked".into()))
            })
            .collect()
    });
    let mut r = ReplayResult {
        path: "memory".into(),
        workers,
        cpu_secs: sys::process_cpu_secs() - cpu0,
        ..ReplayResult::default()
    };
    let mut hist =
        Histogram::<u64>::new_with_bounds(1, 3_600_000_000_000, 3).map_err(|e| e.to_string())?;
    for out in outs {
        let w = out?;
        r.reports += w.reports;
        r.translated += w.counters.translated;
        r.dropped += w.counters.dropped();
        r.handoffs += w.counters.handoffs_out;
        r.add_int(&w.counters);
        r.frames += w.frames;
        r.frame_bytes += w.frame_bytes;
        r.rnic_executed += w.rnic.writes + w.rnic.atomics;
        r.rnic_errors += rnic_error_sum(&w.rnic);
        add_reasons(
            &mut r.drop_reasons,
            &w.counters,
            &TranslatorCounters::default(),
            &w.rnic,
            &RnicCounters::default(),
        );
        r.secs = r.secs.max(w.secs);
        r.worker_cpu_secs += w.cpu_ns as f64 * 1e-9;
        let _ = hist.add(&w.hist);
    }
    r.latency = Some(Latency::of(&hist));
    r.finish();
    Ok(r)
}
