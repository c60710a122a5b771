//! `dta bench sketch`: Sketch-Merge on one core, in memory.
//!
//! 1. The merge kernel (`dta_proto::sketch::merge_wire_cells`, what the translator runs per
//!    column): 32-bit counter merges per second, against two baselines measured in the same
//!    run over the same bytes: `memcpy` (the memory traffic alone) and a scalar loop (the same
//!    saturating add, one counter at a time, kept from vectorising).
//! 2. The production path: datagrams of 100 switches' Count-Min columns through the
//!    translator's [`Pipeline`] (parse, per-switch column tracking, merge, batch WRITEs):
//!    reports, columns and counter merges per second.
//! 3. Accuracy (`sketch.svg`): the fat tree's per-switch Count-Min and HyperLogLog sketches
//!    (`workload::SketchWorkload`) merged by the production pipeline, read back from the
//!    frames it emitted, against the same sketches built centrally (identical, checked) and
//!    the ground truth.

use std::hint::black_box;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::time::Instant;

use dta_proto::batch::{Datagram, TxBatch};
use dta_proto::meta::StoreKind;
use dta_proto::sketch::{
    merge_wire_cells, CellWidth, MergeOp, Sketch, SketchKind, SketchLayout, SketchShape,
};
use dta_proto::wire::roce::parse_frame;
use dta_translator::datapath::pipeline::single_store_pipeline_with;
use dta_translator::datapath::primitive::SketchSettings;
use serde_json::json;

use crate::figures::FigOptions;
use crate::svg::{Chart, Series};
use crate::trace::Trace;
use crate::workload::{FatTree, Flows, SketchWorkload, SplitMix64};

/// Seconds each kernel measurement runs for (at least).
const KERNEL_SECS: f64 = 0.5;

fn rate(n: u64, secs: f64) -> f64 {
    n as f64 / secs.max(1e-9)
}

/// The report of `n` columns of `s` from `col`, as switch `switch` sends it.
fn report(id: u16, s: &Sketch, switch: u32, epoch: u32, col: u32, n: u32) -> Vec<u8> {
    s.column_report(id, switch, epoch, col, n)
        .expect("columns within the sketch")
}

/// All reports of a sketch, `per` columns each.
fn reports(id: u16, s: &Sketch, switch: u32, epoch: u32, per: u32) -> Vec<Vec<u8>> {
    let cols = s.shape().columns;
    (0..cols)
        .step_by(per as usize)
        .map(|c| report(id, s, switch, epoch, c, per.min(cols - c)))
        .collect()
}

/// Part 1: the kernel against memcpy and a scalar loop.
fn kernel() -> serde_json::Value {
    const COUNTERS: usize = 4 * 8192; // a 4 × 8192 Count-Min: 128 KiB, in L2
    let mut rng = SplitMix64(7);
    let src: Vec<u8> = (0..COUNTERS * 4).map(|_| rng.next_u64() as u8).collect();
    let mut dst = vec![0u32; COUNTERS];
    let w = CellWidth::new(4).expect("4-byte cells");
    // Per "report": 1,024 bytes of cells (256 counters), as the translator merges them.
    let chunk = 256;
    let run = |f: &mut dyn FnMut(usize)| -> (u64, f64) {
        let t = Instant::now();
        let mut merged = 0u64;
        while t.elapsed().as_secs_f64() < KERNEL_SECS {
            for c in 0..COUNTERS / chunk {
                f(c);
            }
            merged += COUNTERS as u64;
        }
        (merged, t.elapsed().as_secs_f64())
    };
    let (n_merge, s_merge) = run(&mut |c| {
        let at = c * chunk;
        merge_wire_cells(
            MergeOp::Sum,
            w,
            &mut dst[at..at + chunk],
            black_box(&src[at * 4..(at + chunk) * 4]),
        );
    });
    black_box(&dst);
    let (n_max, s_max) = run(&mut |c| {
        let at = c * chunk;
        merge_wire_cells(
            MergeOp::Max,
            w,
            &mut dst[at..at + chunk],
            black_box(&src[at * 4..(at + chunk) * 4]),
        );
    });
    black_box(&dst);
    let mut bytes = vec![0u8; COUNTERS * 4];
    let (n_copy, s_copy) = run(&mut |c| {
        let at = c * chunk * 4;
        bytes[at..at + chunk * 4].copy_from_slice(black_box(&src[at..at + chunk * 4]));
    });
    black_box(&bytes);
    let (n_scalar, s_scalar) = run(&mut |c| {
        let at = c * chunk;
        for i in at..at + chunk {
            let b = &src[i * 4..i * 4 + 4];
            let v = u32::from_be_bytes([b[0], b[1], b[2], b[3]]);
            // black_box per counter keeps the loop scalar: the unvectorised baseline.
            dst[i] = black_box(dst[i]).saturating_add(v);
        }
    });
    black_box(&dst);
    let sum = rate(n_merge, s_merge);
    let max = rate(n_max, s_max);
    let copy = rate(n_copy, s_copy);
    let scalar = rate(n_scalar, s_scalar);
    json!({
        "counters": COUNTERS,
        "sum_counters_per_sec": sum,
        "max_counters_per_sec": max,
        "memcpy_counters_per_sec": copy,
        "scalar_counters_per_sec": scalar,
        "sum_over_memcpy": sum / copy,
        "sum_over_scalar": sum / scalar,
        "target_counters_per_sec": 1e9,
    })
}

/// Part 2: the production path, 100 switches × a 4 × 4096 Count-Min, 64 columns a report.
fn pipeline(o: &FigOptions) -> serde_json::Value {
    const SWITCHES: u32 = 100;
    let shape = SketchShape::new(SketchKind::CountMin, 4, 4096, 4).expect("shape");
    let kind = StoreKind::Sketch {
        sketch_id: 1,
        sketch: SketchKind::CountMin,
        rows: 4,
        columns: 4096,
        cell_width: 4,
        batch: 32,
        epochs: 2,
        hash: shape.hash,
    };
    let mut p = single_store_pipeline_with(kind, |c| {
        c.sketch = SketchSettings {
            expected_switches: SWITCHES as u16,
            max_switches: 4096,
            flush_ns: 1_000_000_000,
            ..SketchSettings::default()
        };
    });
    let mut rng = SplitMix64(11);
    let sketches: Vec<Sketch> = (0..SWITCHES)
        .map(|_| {
            let mut s = Sketch::new(shape);
            for c in s.cells_mut() {
                *c = rng.below(1000) as u32;
            }
            s
        })
        .collect();
    let src = SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 9), 5000);
    let dst = SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 101), 40040);
    let mut tx = TxBatch::new(4096, 2048);
    let epochs = o.loops.max(1) * 4;
    // Datagrams of every epoch, interleaved by switch, prepared before timing.
    let bursts: Vec<Vec<Vec<u8>>> = (0..epochs)
        .map(|e| {
            let per: Vec<Vec<Vec<u8>>> = sketches
                .iter()
                .enumerate()
                .map(|(i, s)| reports(1, s, i as u32, e + 1, 64))
                .collect();
            let mut out = Vec::new();
            for r in 0..per[0].len() {
                for sw in &per {
                    out.push(sw[r].clone());
                }
            }
            out
        })
        .collect();
    let t = Instant::now();
    let mut now = 1u64;
    for epoch in &bursts {
        for burst in epoch.chunks(32) {
            let dg: Vec<Datagram<'_>> = burst
                .iter()
                .map(|b| Datagram {
                    src,
                    dst,
                    ip: None,
                    payload: b,
                })
                .collect();
            p.handle_reports(now, &dg, &mut tx);
            tx.clear();
            now += 1000;
        }
    }
    let secs = t.elapsed().as_secs_f64();
    let c = p.counters();
    let cols = c.sketch_columns_merged;
    json!({
        "switches": SWITCHES,
        "epochs": epochs,
        "reports": c.reports_sketch,
        "translated": c.translated,
        "dropped": c.dropped(),
        "columns": cols,
        "batches_written": c.sketch_batches_complete,
        "secs": secs,
        "reports_per_sec": rate(c.reports_sketch, secs),
        "columns_per_sec": rate(cols, secs),
        "counters_per_sec": rate(cols * 4, secs),
    })
}

/// Part 3: the fat tree's sketches merged by the pipeline vs built centrally vs the truth.
fn accuracy() -> Result<(serde_json::Value, Chart), String> {
    let cm = SketchShape::new(SketchKind::CountMin, 4, 2048, 4).expect("shape");
    let hll = SketchShape::new(SketchKind::HyperLogLog, 1, 1024, 1).expect("shape");
    let wl = SketchWorkload {
        tree: FatTree { k: 8, id_base: 0 },
        flows: Flows {
            seed: 2023,
            shape: 1.2,
        },
        flows_per_epoch: 20_000,
        cm,
        hll,
    };
    let ep = wl.epoch(0);
    let n = ep.switches.len() as u16;
    let merged_cm = merge_through_pipeline(1, cm, n, ep.switches.iter().map(|s| &s.0))?;
    let merged_hll = merge_through_pipeline(2, hll, n, ep.switches.iter().map(|s| &s.1))?;
    if merged_cm != ep.central.0 || merged_hll != ep.central.1 {
        return Err("the merged sketches differ from the central ones".into());
    }
    let mut truth = ep.truth.clone();
    truth.sort_by_key(|t| std::cmp::Reverse(t.1));
    let (mut under, mut err_sum) = (0u64, 0f64);
    let mut points = Vec::new();
    let mut central_pts = Vec::new();
    for (i, (k, t, _)) in truth.iter().enumerate() {
        let m = merged_cm.point(k).unwrap_or(0);
        let c = ep.central.0.point(k).unwrap_or(0);
        under += (m < *t as i64) as u64;
        err_sum += (m - *t as i64) as f64 / *t as f64;
        if i < 300 {
            points.push((*t as f64, m as f64));
            central_pts.push((*t as f64, c as f64));
        }
    }
    let card = merged_hll.cardinality().unwrap_or(0.0);
    let distinct = wl.flows_per_epoch as f64;
    let v = json!({
        "switches": n,
        "flows": wl.flows_per_epoch,
        "merged_equals_central": true,
        "cm_under_truth": under,
        "cm_mean_relative_overestimate": err_sum / truth.len() as f64,
        "hll_estimate": card,
        "hll_central_estimate": ep.central.1.cardinality(),
        "hll_truth": distinct,
        "hll_relative_error": (card - distinct) / distinct,
    });
    let max = points.first().map_or(1.0, |p| p.0);
    let chart = Chart {
        title: format!(
            "Sketch-Merge: Count-Min merged from {n} switches (k = 8 fat tree, 20,000 flows)"
        ),
        x_label: "true packets (summed over a flow's hops)".into(),
        y_label: "estimate".into(),
        log_x: false,
        log_y: false,
        series: vec![
            Series {
                label: "merged by the translator".into(),
                points,
                dashed: false,
            },
            Series {
                label: "built centrally (identical)".into(),
                points: central_pts,
                dashed: true,
            },
            Series {
                label: "ground truth".into(),
                points: vec![(0.0, 0.0), (max, max)],
                dashed: true,
            },
        ],
        categories: Vec::new(),
        caption: format!(
            "300 largest flows; no estimate below the truth ({under} of {} flows). \
             HyperLogLog: merged {card:.0}, central identical, truth {distinct:.0}.",
            truth.len()
        ),
        value_labels: false,
    };
    Ok((v, chart))
}

/// Merges `sketches` (switch i = the i-th) through the production pipeline and reads the
/// merged sketch back from the frames it emitted.
fn merge_through_pipeline<'a>(
    id: u16,
    shape: SketchShape,
    switches: u16,
    sketches: impl Iterator<Item = &'a Sketch>,
) -> Result<Sketch, String> {
    let layout = SketchLayout::new(shape, 32, 1).map_err(|e| e.to_string())?;
    let kind = StoreKind::Sketch {
        sketch_id: id,
        sketch: shape.kind,
        rows: shape.rows,
        columns: shape.columns,
        cell_width: shape.width.bytes() as u8,
        batch: 32,
        epochs: 1,
        hash: shape.hash,
    };
    let mut p = single_store_pipeline_with(kind, |c| {
        c.sketch = SketchSettings {
            expected_switches: switches,
            max_switches: 4096,
            flush_ns: 1_000_000,
            ..SketchSettings::default()
        };
    });
    let per = (dta_proto::wire::sketch::MAX_CELL_BYTES / shape.column_bytes()) as u32;
    let src = SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 9), 5000);
    let dst = SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 101), 40040);
    let mut mem = vec![0u8; layout.region_len() as usize];
    let mut tx = TxBatch::new(4096, 2048);
    let base = 0x7f00_0000_0000u64;
    let mut apply = |tx: &mut TxBatch| {
        for i in 0..tx.len() {
            if let Ok(f) = parse_frame(tx.frame(i)) {
                if let Some(reth) = f.roce.reth {
                    let at = (reth.va - base) as usize;
                    mem[at..at + f.roce.payload.len()].copy_from_slice(f.roce.payload);
                }
            }
        }
        tx.clear();
    };
    for (i, s) in sketches.enumerate() {
        for b in reports(id, s, i as u32, 1, per) {
            let d = [Datagram {
                src,
                dst,
                ip: None,
                payload: &b,
            }];
            p.handle_reports(1, &d, &mut tx);
            apply(&mut tx);
        }
    }
    p.poll(10_000_000, &mut tx);
    apply(&mut tx);
    let mut out = Sketch::new(shape);
    let rows = shape.rows as usize;
    let mut col = [0u32; 8];
    for c in 0..shape.columns {
        let at = layout.column_offset(1, c) as usize;
        let (e, _, _) =
            layout.decode_record(&mem[at..at + layout.column_stride() as usize], &mut col);
        if e == 1 {
            out.cells_mut()[c as usize * rows..(c as usize + 1) * rows]
                .copy_from_slice(&col[..rows]);
        }
    }
    Ok(out)
}

/// Runs the three parts; writes `sketch.json` and `sketch.svg` to `o.out`.
pub fn sketch(o: &FigOptions) -> Result<serde_json::Value, String> {
    let k = kernel();
    eprintln!(
        "  kernel: sum {:.2} G counters/s, max {:.2} G/s; memcpy {:.2} G/s, scalar {:.2} G/s; \
         sum/memcpy {:.2}, sum/scalar {:.2} (target >= 1 G/s)",
        k["sum_counters_per_sec"].as_f64().unwrap_or(0.0) / 1e9,
        k["max_counters_per_sec"].as_f64().unwrap_or(0.0) / 1e9,
        k["memcpy_counters_per_sec"].as_f64().unwrap_or(0.0) / 1e9,
        k["scalar_counters_per_sec"].as_f64().unwrap_or(0.0) / 1e9,
        k["sum_over_memcpy"].as_f64().unwrap_or(0.0),
        k["sum_over_scalar"].as_f64().unwrap_or(0.0),
    );
    let p = pipeline(o);
    eprintln!(
        "  pipeline: {:.2} M reports/s, {:.1} M columns/s, {:.2} G counter merges/s ({} \
         reports, {} dropped)",
        p["reports_per_sec"].as_f64().unwrap_or(0.0) / 1e6,
        p["columns_per_sec"].as_f64().unwrap_or(0.0) / 1e6,
        p["counters_per_sec"].as_f64().unwrap_or(0.0) / 1e9,
        p["reports"],
        p["dropped"],
    );
    let (a, chart) = accuracy()?;
    eprintln!(
        "  accuracy: merged == central; Count-Min below truth: {}; HyperLogLog {:.0} vs {} \
         ({:+.3})",
        a["cm_under_truth"],
        a["hll_estimate"].as_f64().unwrap_or(0.0),
        a["hll_truth"],
        a["hll_relative_error"].as_f64().unwrap_or(0.0),
    );
    let v = json!({ "kernel": k, "pipeline": p, "accuracy": a });
    std::fs::create_dir_all(&o.out).map_err(|e| format!("{}: {e}", o.out.display()))?;
    let j = o.out.join("sketch.json");
    std::fs::write(
        &j,
        serde_json::to_string_pretty(&v).map_err(|e| e.to_string())?,
    )
    .map_err(|e| format!("{}: {e}", j.display()))?;
    let s = o.out.join("sketch.svg");
    std::fs::write(&s, chart.render()).map_err(|e| format!("{}: {e}", s.display()))?;
    Ok(v)
}

/// Sketch IDs of the generated workload (`dta gen-sketch`, the accuracy figure).
pub const CM_SKETCH_ID: u16 = 1;
/// See [`CM_SKETCH_ID`].
pub const HLL_SKETCH_ID: u16 = 2;

/// The source address switch `id` sends its sketch reports from (10.1.x.y).
pub fn switch_addr(id: u32) -> SocketAddrV4 {
    SocketAddrV4::new(Ipv4Addr::new(10, 1, (id >> 8) as u8, id as u8), 40041)
}

/// `dta gen-sketch`: every switch's Count-Min and HyperLogLog sketch reports, `per` columns
/// each and in column order, for epochs `0..epochs` of `wl`, switch by switch (what a
/// reporter sends at the end of an epoch), towards `target`. Returns the trace and the ground
/// truth per epoch: the distinct flows, the centrally built HyperLogLog's estimate and the
/// largest flows' true packet counts (summed over their hops, what the merged Count-Min
/// estimates).
pub fn sketch_trace(
    wl: &SketchWorkload,
    epochs: u32,
    per: u32,
    target: SocketAddrV4,
) -> Result<(Trace, serde_json::Value), String> {
    if per == 0 {
        return Err("columns per report must be at least 1".into());
    }
    let mut trace = Trace::with_capacity(0);
    let mut truth = Vec::new();
    for e in 0..epochs {
        let ep = wl.epoch(u64::from(e));
        for (i, (cm, hll)) in ep.switches.iter().enumerate() {
            let id = wl.tree.id_base + i as u32;
            for (sid, sk) in [(CM_SKETCH_ID, cm), (HLL_SKETCH_ID, hll)] {
                let cols = sk.shape().columns;
                for c in (0..cols).step_by(per as usize) {
                    let r = sk
                        .column_report(sid, id, e, c, per.min(cols - c))
                        .ok_or_else(|| {
                            format!("{per} columns of sketch {sid} do not fit one report")
                        })?;
                    trace.push(switch_addr(id), target, &r);
                }
            }
        }
        let mut top = ep.truth.clone();
        top.sort_by_key(|t| std::cmp::Reverse(t.1));
        top.truncate(20);
        truth.push(json!({
            "epoch": e,
            "distinct_flows": wl.flows_per_epoch,
            "hll_central_estimate": ep.central.1.cardinality(),
            "largest_flows": top.iter().map(|(k, hops_pkts, pkts)| json!({
                "key": k.as_bytes().iter().map(|b| format!("{b:02x}")).collect::<String>(),
                "packets_over_hops": hops_pkts,
                "packets": pkts,
            })).collect::<Vec<_>>(),
        }));
    }
    let v = json!({
        "switches": wl.tree.switches(),
        "fat_tree_k": wl.tree.k,
        "epochs": epochs,
        "columns_per_report": per,
        "sketches": [
            { "id": CM_SKETCH_ID, "kind": "count-min", "rows": wl.cm.rows,
              "columns": wl.cm.columns, "cell_bytes": wl.cm.width.bytes(),
              "hash": wl.cm.hash.name() },
            { "id": HLL_SKETCH_ID, "kind": "hyperloglog", "rows": wl.hll.rows,
              "columns": wl.hll.columns, "cell_bytes": wl.hll.width.bytes(),
              "hash": wl.hll.hash.name() },
        ],
        "truth": truth,
    });
    Ok((trace, v))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_sketch_reports_tile_every_sketch_in_column_order() {
        use dta_proto::wire::sketch::SketchReport;
        let wl = SketchWorkload {
            tree: FatTree { k: 4, id_base: 100 },
            flows: Flows {
                seed: 7,
                shape: 1.2,
            },
            flows_per_epoch: 300,
            cm: SketchShape::new(SketchKind::CountMin, 2, 64, 4).unwrap(),
            hll: SketchShape::new(SketchKind::HyperLogLog, 1, 16, 1).unwrap(),
        };
        let target = SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 101), 40040);
        let (t, v) = sketch_trace(&wl, 2, 5, target).unwrap();
        // 20 switches x 2 epochs x (ceil(64/5) + ceil(16/5)) reports.
        assert_eq!(t.len(), 20 * 2 * (13 + 4));
        let mut next = std::collections::HashMap::new();
        let rows = wl.cm.rows as usize;
        let mut cm = vec![vec![0u32; rows * 64]; 2];
        for i in 0..t.len() {
            let d = t.get(i);
            assert_eq!(d.dst, target);
            let r = SketchReport::new_checked(d.payload).unwrap();
            assert_eq!(d.src, switch_addr(r.switch_id()));
            let k = (r.switch_id(), r.sketch_id(), r.epoch());
            let col = next.entry(k).or_insert(0u32);
            assert_eq!(r.column(), *col, "columns in order");
            *col += u32::from(r.columns());
            if r.sketch_id() == CM_SKETCH_ID {
                let (c, n) = (r.column() as usize, r.columns() as usize);
                let dst = &mut cm[r.epoch() as usize][c * rows..(c + n) * rows];
                merge_wire_cells(MergeOp::Sum, wl.cm.width, dst, r.cells());
            }
        }
        assert_eq!(next.len(), 20 * 2 * 2);
        assert!(next
            .iter()
            .all(|(k, c)| *c == if k.1 == CM_SKETCH_ID { 64 } else { 16 }));
        // Merging every switch's columns gives the central Count-Min, epoch by epoch.
        for (e, merged) in cm.iter().enumerate() {
            assert_eq!(merged.as_slice(), wl.epoch(e as u64).central.0.cells());
        }
        assert_eq!(v["truth"].as_array().unwrap().len(), 2);
    }

    #[test]
    fn accuracy_merges_through_the_pipeline_identically() {
        let (v, chart) = accuracy().unwrap();
        assert_eq!(v["merged_equals_central"], true);
        assert_eq!(v["cm_under_truth"], 0);
        assert!(v["hll_relative_error"].as_f64().unwrap().abs() < 0.1, "{v}");
        assert_eq!(chart.series.len(), 3);
    }
}
