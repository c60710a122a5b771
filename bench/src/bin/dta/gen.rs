//! `dta gen` and `dta gen-sketch`: a workload to a pcap file (with its FILE.json) or to a UDP
//! target.

use std::net::SocketAddrV4;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use crate::cli::{SketchHashArg, TrafficArgs};
use dta_bench::gen::{Generator, Scenario};
use dta_bench::progress::Progress;
use dta_bench::sender::PacedSender;
use dta_bench::trace::Trace;

/// Writes `t` to the pcap `path` (capture timestamps `1 / rate` apart, 1 µs for rate 0) and
/// `about` as JSON next to it (`path.json`, returned): what `dta gen` and `dta gen-sketch`
/// leave for `dta replay` and for the user.
pub(crate) fn write_trace(
    t: &Trace,
    path: &std::path::Path,
    rate: u64,
    about: &impl serde::Serialize,
) -> Result<PathBuf, String> {
    let gap = if rate > 0 {
        Duration::from_secs_f64(1.0 / rate as f64)
    } else {
        Duration::from_micros(1)
    };
    t.write_pcap(path, gap)?;
    let side = PathBuf::from(format!("{}.json", path.display()));
    let js = serde_json::to_string_pretty(about).map_err(|e| e.to_string())?;
    std::fs::write(&side, js).map_err(|e| format!("{}: {e}", side.display()))?;
    Ok(side)
}

pub(crate) fn gen_sketch_cmd(
    pcap: Option<PathBuf>,
    target: SocketAddrV4,
    epochs: u32,
    (k, flows, seed): (u32, u64, u64),
    (cm_rows, cm_columns, hll_registers, hash): (u8, u32, u32, SketchHashArg),
    per: u32,
    rate: u64,
) -> Result<(), String> {
    use dta_bench::workload::{FatTree, Flows, SketchWorkload};
    use dta_proto::sketch::{SketchHash, SketchKind, SketchShape};
    let hash = match hash {
        SketchHashArg::Independent => SketchHash::Independent,
        SketchHashArg::Tofino => SketchHash::Tofino,
    };
    if k < 2 || k % 2 != 0 || k > 64 {
        return Err(format!("--k {k}: the fat-tree arity must be even, 2..=64"));
    }
    let cm = SketchShape::new(SketchKind::CountMin, cm_rows, cm_columns, 4)
        .map_err(|e| format!("Count-Min {cm_rows} x {cm_columns}: {e}"))?
        .with_hash(hash);
    let hll = SketchShape::new(SketchKind::HyperLogLog, 1, hll_registers, 1)
        .map_err(|e| format!("HyperLogLog with {hll_registers} registers: {e}"))?
        .with_hash(hash);
    let wl = SketchWorkload {
        tree: FatTree { k, id_base: 1 },
        flows: Flows { seed, shape: 1.2 },
        flows_per_epoch: flows,
        cm,
        hll,
    };
    let (t, truth) = dta_bench::sketchbench::sketch_trace(&wl, epochs, per, target)?;
    if let Some(path) = pcap {
        let side = write_trace(&t, &path, rate, &truth)?;
        eprintln!(
            "dta gen-sketch: wrote {} reports ({} payload bytes) from {} switches x {epochs} \
             epochs to {} (shapes and ground truth in {})",
            t.len(),
            t.payload_bytes(),
            wl.tree.switches(),
            path.display(),
            side.display()
        );
        return Ok(());
    }
    let mut s = PacedSender::new(target, rate)?;
    s.set_window(u64::MAX / 2);
    let done = || 0u64;
    let t0 = Instant::now();
    for i in 0..t.len() {
        s.push(t.get(i).payload, done)?;
    }
    s.flush(done)?;
    eprintln!(
        "dta gen-sketch: sent {} reports to {target} in {:.2} s",
        s.sent,
        t0.elapsed().as_secs_f64()
    );
    Ok(())
}

pub(crate) fn gen_cmd(
    sc: &Scenario,
    count: u64,
    pcap: Option<PathBuf>,
    target: Option<SocketAddrV4>,
    rate: u64,
) -> Result<(), String> {
    let mut g = Generator::new(sc);
    if let Some(path) = pcap {
        let t = Trace::generate(&mut g, count as usize)?;
        let side = write_trace(&t, &path, rate, sc)?;
        eprintln!(
            "dta gen: wrote {} reports ({} payload bytes) to {} (scenario in {})",
            t.len(),
            t.payload_bytes(),
            path.display(),
            side.display()
        );
        eprintln!("  {}", per_kind(&g.per_kind));
        return Ok(());
    }
    let target = target.ok_or("give --pcap FILE or --target IP:PORT")?;
    let mut s = PacedSender::new(target, rate)?;
    // No receiver feedback towards a remote target: the window is unbounded.
    s.set_window(u64::MAX / 2);
    let profile = sc.wire_profile();
    let mut buf = [0u8; dta_bench::trace::MAX_INT_LEN];
    let t0 = Instant::now();
    let mut progress = Progress::new(count, "reports", Duration::from_secs(2));
    let done = || 0u64;
    for i in 0..count {
        let n = if sc.telemetry != 0 {
            g.next_int_report(&mut buf).1
        } else {
            g.next_report()
                .emit(profile, &mut buf)
                .map_err(|e| format!("emit: {e}"))?
        };
        s.push(&buf[..n], done)?;
        if i % 1024 == 0 && progress.due() {
            progress.set(i + 1, "sent");
        }
    }
    s.flush(done)?;
    progress.finish();
    eprintln!(
        "dta gen: sent {} reports to {target} in {:.2} s; {}",
        s.sent,
        t0.elapsed().as_secs_f64(),
        per_kind(&g.per_kind)
    );
    Ok(())
}

/// `dta gen --traffic CAPTURE`: the capture's reports to a pcap (with FILE.json: the
/// scenario and the ground truth) or live to a UDP target, following the capture's timestamps
/// (divided by --speed), or at --rate.
pub(crate) fn gen_traffic_cmd(
    sc: &Scenario,
    capture: &std::path::Path,
    a: &TrafficArgs,
    pcap: Option<PathBuf>,
    target: Option<SocketAddrV4>,
    rate: u64,
) -> Result<(), String> {
    use dta_bench::gen::SketchStores;
    use dta_bench::traffic::{from_capture, parse_duration_ns, TrafficOptions};
    let o = TrafficOptions {
        epoch_ns: parse_duration_ns(&a.epoch).map_err(|e| format!("--epoch {e}"))?,
        speed: a.speed,
        postcard_every: a.postcard_every,
        link_bps: a.link_gbps * 1e9,
        queue_threshold: a.queue_threshold,
    };
    let topology = a
        .topology
        .clone()
        .unwrap_or_else(|| format!("fat-tree:k={}", sc.k));
    let sketch = SketchStores {
        cm_rows: a.cm_rows,
        cm_columns: a.cm_columns,
        hll_registers: a.hll_registers,
        epochs: dta_proto::sketch::MAX_EPOCHS,
        switches: 1,
    };
    let t = from_capture(capture, &topology, sc, sketch, &o)?;
    let truth = &t.file.traffic;
    let st = &truth.capture_stats;
    eprintln!(
        "dta gen --traffic: {} ({}, {}): {} records, {} IP packets used; skipped: {} not IP, {} \
         fragments, {} truncated, {} malformed, {} same-host, {} unsupported link type{}",
        capture.display(),
        st.format,
        st.link_types.join("+"),
        st.records,
        st.packets,
        st.not_ip,
        st.fragments,
        st.truncated,
        st.malformed,
        st.same_host,
        st.unsupported_link,
        if st.cut_short {
            "; the file ends inside a record"
        } else {
            ""
        }
    );
    eprintln!(
        "  {} flows over {} ({} switches), {} epochs ({} with traffic), {} retransmissions",
        truth.flows.len(),
        truth.topology,
        truth.switch_ids.len(),
        truth.epochs.len(),
        truth.epochs.iter().filter(|e| !e.flows.is_empty()).count(),
        truth.losses.len()
    );
    eprintln!("  {} reports: {}", truth.reports.total(), truth.reports);
    if let Some(path) = pcap {
        t.trace.write_pcap_at(&path, &t.times_ns)?;
        let side = PathBuf::from(format!("{}.json", path.display()));
        let js = serde_json::to_string_pretty(&t.file).map_err(|e| e.to_string())?;
        std::fs::write(&side, js).map_err(|e| format!("{}: {e}", side.display()))?;
        eprintln!(
            "  wrote {} ({} payload bytes; scenario and ground truth in {})",
            path.display(),
            t.trace.payload_bytes(),
            side.display()
        );
        return Ok(());
    }
    let target = target.ok_or("give --pcap FILE or --target IP:PORT")?;
    let mut s = PacedSender::new(target, rate)?;
    s.set_window(u64::MAX / 2);
    let done = || 0u64;
    let t0 = Instant::now();
    let first = t.times_ns.first().copied().unwrap_or(0);
    for i in 0..t.trace.len() {
        if rate == 0 {
            // Follow the capture: wait for the report's time (bursts within 1 ms go together).
            let due = Duration::from_nanos(t.times_ns[i] - first);
            let el = t0.elapsed();
            if due > el + Duration::from_millis(1) {
                s.flush(done)?;
                std::thread::sleep(due - t0.elapsed().min(due));
            }
        }
        s.push(t.trace.payload(i), done)?;
    }
    s.flush(done)?;
    eprintln!(
        "  sent {} reports to {target} in {:.2} s",
        s.sent,
        t0.elapsed().as_secs_f64()
    );
    Ok(())
}

/// The generator's per-kind counts, named.
pub(crate) fn per_kind(k: &[u64; 5]) -> String {
    format!(
        "Key-Write paths {}, postcards {}, loss events {}, congestion events {}, counters {}",
        k[0], k[1], k[2], k[3], k[4]
    )
}
