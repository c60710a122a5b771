//! `dta demo`: the whole system on loopback, end to end.
//!
//! ```text
//!  generator ──UDP 40040──▶ translator ──RoCEv2 (UDP 4791)──▶ software RNIC ──▶ collector memory
//!  (this process)            (worker thread)                   (collector thread)       │
//!                                                                       queries ◀───────┘
//! ```
//!
//! It sends a realistic mix (INT path tracing via 20-byte Key-Write values keyed by flow, and
//! NetSeer-style loss events via Append over several lists), tails the Append lists while they
//! are written, then queries every flow and prints what an operator wants to see.

use std::net::{Ipv4Addr, SocketAddrV4};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use dta_collector::config::{
    CollectorConfig, DeviceSection, StaticPeer, StoreConfig, StoreKindConfig,
};
use dta_collector::query::append::{ListReader, Start};

use crate::progress::Progress;
use dta_collector::query::keywrite::{KeyWriteAnswer, Vote};
use dta_collector::Collector;
use dta_proto::analysis::keywrite_p_empty;
use dta_proto::hash::HashProfile;
use dta_proto::layout::AppendFormat;
use dta_proto::meta::StoreKind;
use dta_proto::wire::report::Profile;
use dta_proto::Key;
use dta_translator::config::{CollectorSection, TranslatorConfig};
use dta_translator::Translator;

use crate::sender::{free_udp_port, PacedSender};
use crate::workload::Workload;

/// Demo parameters.
#[derive(Debug, Clone)]
pub struct DemoOptions {
    /// Key-Write INT path reports (one per flow).
    pub keywrite: u64,
    /// Append loss events.
    pub append: u64,
    /// Append lists.
    pub lists: u32,
    /// Ring capacity per list (entries).
    pub capacity: u32,
    /// Key-Write slots (log2).
    pub slots_log2: u32,
    /// Key-Write redundancy N.
    pub redundancy: u8,
    /// Append batch size.
    pub batch: u32,
    /// Send rate (reports/s; 0 = as fast as the translator takes them).
    pub rate: u64,
    /// Workload seed.
    pub seed: u64,
    /// Print progress lines.
    pub progress: bool,
}

impl Default for DemoOptions {
    fn default() -> Self {
        DemoOptions {
            keywrite: 1_000_000,
            append: 1_000_000,
            lists: 8,
            capacity: 65536,
            slots_log2: 23,
            redundancy: 2,
            batch: 16,
            rate: 0,
            seed: 2023,
            progress: true,
        }
    }
}

/// What the demo measured.
#[derive(Debug, Clone, Default)]
pub struct DemoReport {
    /// Reports the generator sent.
    pub sent: u64,
    /// Reports the translator received.
    pub received: u64,
    /// Reports translated.
    pub translated: u64,
    /// Reports dropped by the translator (all reasons).
    pub dropped: u64,
    /// The translator's drop counters (name, value), non-zero only.
    pub drop_reasons: Vec<(String, u64)>,
    /// Datagrams the kernel dropped before the translator saw them.
    pub socket_drops: u64,
    /// RoCEv2 frames the translator sent.
    pub frames: u64,
    /// RDMA messages the software RNIC executed.
    pub rnic_writes: u64,
    /// RNIC drop and error counters (name, value), non-zero only.
    pub rnic_errors: Vec<(String, u64)>,
    /// Frames the translator sent again (go-back-N passes and resends after timeouts).
    pub retransmitted: u64,
    /// ACK-timeout probes the translator sent (zero-length WRITEs; counted in `frames`).
    pub probes: u64,
    /// Frames the translator sent that the responder never executed (counted losses).
    pub psn_skipped: u64,
    /// Key-Write queries answered with the value sent.
    pub kw_correct: u64,
    /// Key-Write queries answered empty.
    pub kw_empty: u64,
    /// Key-Write queries answered with a conflict.
    pub kw_conflict: u64,
    /// Key-Write queries answered with a value that was not sent (must be 0).
    pub kw_wrong: u64,
    /// Predicted empty rate averaged over the keys (the papers' formula).
    pub kw_predicted_empty: f64,
    /// Append entries recovered in order by the tail readers.
    pub append_recovered: u64,
    /// Append entries out of order or corrupt (must be 0).
    pub append_misordered: u64,
    /// Batches the readers lost to overruns.
    pub append_lost_batches: u64,
    /// Entries the readers skipped (lost to overruns).
    pub append_skipped: u64,
    /// Wall time of the send phase.
    pub send_secs: f64,
}

fn kw_store() -> &'static str {
    "paths"
}

/// Runs the demo and returns its measurements.
pub fn run(opts: &DemoOptions) -> Result<DemoReport, String> {
    let dir = std::env::temp_dir().join(format!("dta-demo-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    let meta_file: PathBuf = dir.join("collector.json");
    let collector_ip = Ipv4Addr::new(127, 0, 0, 1);
    let translator_ip = Ipv4Addr::new(127, 0, 0, 2);
    let roce_c = SocketAddrV4::new(collector_ip, free_udp_port(collector_ip)?);
    let roce_t = SocketAddrV4::new(translator_ip, free_udp_port(translator_ip)?);
    let ccfg = CollectorConfig {
        collector: DeviceSection {
            roce: roce_c,
            metadata_file: Some(meta_file.clone()),
            max_redundancy: opts.redundancy.max(4),
            ..DeviceSection::default()
        },
        static_peers: vec![StaticPeer {
            roce: roce_t,
            workers: 1,
            qpn_base: 0x100,
            mac: "02:00:00:00:00:01".into(),
        }],
        stores: vec![
            StoreConfig {
                name: kw_store().into(),
                port: None,
                cm_allow: None,
                kind: StoreKindConfig::new(StoreKind::KeyWrite {
                    slots: 1 << opts.slots_log2,
                    slot_size: 32,
                    hash: HashProfile::Independent,
                })
                .with_redundancy(opts.redundancy),
            },
            StoreConfig {
                name: "losses".into(),
                port: None,
                cm_allow: None,
                kind: StoreKindConfig::new(StoreKind::Append {
                    lists: opts.lists,
                    first_list: 0,
                    capacity: opts.capacity,
                    entry_size: 20,
                    batch: opts.batch,
                    format: AppendFormat::Sequenced,
                    list_stride: 0,
                }),
            },
        ],
        export: Default::default(),
        pull: None,
    };
    let collector = Collector::start(ccfg)?;
    let mut tcfg = TranslatorConfig::default();
    tcfg.translator.listen = SocketAddrV4::new(Ipv4Addr::LOCALHOST, 0);
    tcfg.translator.roce = roce_t;
    tcfg.translator.max_redundancy = opts.redundancy.max(1);
    // The demo sends Key-Write and Append reports only.
    tcfg.routing.keyincrement = "none".into();
    tcfg.routing.postcard = "none".into();
    tcfg.collectors = vec![CollectorSection::with_metadata("local", meta_file)];
    let translator = Translator::start(tcfg)?;

    let wl = Workload {
        redundancy: opts.redundancy,
        lists: opts.lists,
        ..Workload::new(opts.seed)
    };

    // Tail readers follow the lists while they are written.
    let (append, region) = {
        let s = collector.store("losses").ok_or("no losses store")?;
        let a = s.append().ok_or("losses is not an Append store")?;
        (a, s.region.clone())
    };
    let mut readers: Vec<ListReader> = (0..opts.lists)
        .map(|l| ListReader::new(&region, append.layout, append.list_offset(l), Start::Seq(1)))
        .collect();
    // Expected per-list entry order: the j-th loss events in send order.
    let mut expect_next: Vec<u64> = vec![0; opts.lists as usize];
    let mut per_list_events: Vec<Vec<u64>> = vec![Vec::new(); opts.lists as usize];
    for j in 0..opts.append {
        let (l, _) = wl.loss_event(j);
        per_list_events[l as usize].push(j);
    }
    let mut rep = DemoReport::default();
    let check_entries =
        |readers: &mut Vec<ListReader>, rep: &mut DemoReport, expect_next: &mut Vec<u64>| {
            for (l, r) in readers.iter_mut().enumerate() {
                let ev = &per_list_events[l];
                let pos = &mut expect_next[l];
                let st = r.poll(&region, usize::MAX, |_, entry| {
                    // Each entry names its event (bytes 14..18): find it in the list's send order.
                    let j = u32::from_be_bytes(entry[14..18].try_into().expect("4 bytes")) as u64;
                    let at = ev[*pos as usize..].iter().position(|&x| x == j);
                    let ok = at.is_some_and(|k| {
                        let (_, e) = wl.loss_event(j);
                        rep.append_skipped += k as u64;
                        entry[..18] == e && entry[18..].iter().all(|&b| b == 0)
                    });
                    if ok {
                        rep.append_recovered += 1;
                        *pos += at.expect("found") as u64 + 1;
                    } else {
                        rep.append_misordered += 1;
                    }
                });
                rep.append_lost_batches += st.lost_batches;
            }
        };

    let mut sender = PacedSender::new(translator.report_addr, opts.rate)?;
    let total = opts.keywrite + opts.append;
    let t0 = Instant::now();
    let (mut i_kw, mut i_ap) = (0u64, 0u64);
    let mut progress = opts
        .progress
        .then(|| Progress::new(total, "reports", Duration::from_secs(1)));
    let mut buf = [0u8; 128];
    while i_kw < opts.keywrite || i_ap < opts.append {
        // Interleave the two streams in proportion.
        let r = if i_ap >= opts.append
            || (i_kw < opts.keywrite && i_kw * opts.append.max(1) <= i_ap * opts.keywrite.max(1))
        {
            i_kw += 1;
            wl.path_report(i_kw - 1)
        } else {
            i_ap += 1;
            wl.loss_report(i_ap - 1)
        };
        let n = r
            .emit(Profile::Extended, &mut buf)
            .map_err(|e| format!("emit: {e}"))?;
        sender.push(&buf[..n], || translator.counters().rx_datagrams)?;
        if sender.sent % 4096 == 0 {
            check_entries(&mut readers, &mut rep, &mut expect_next);
        }
        if let Some(p) = progress
            .as_mut()
            .filter(|p| p.due() && sender.sent % 1024 == 0)
        {
            let c = translator.counters();
            p.set(
                sender.sent,
                &format!("sent, {} translated, {} frames", c.translated, c.frames),
            );
        }
    }
    if let Some(p) = progress {
        p.finish();
    }
    sender.flush(|| translator.counters().rx_datagrams)?;
    rep.send_secs = t0.elapsed().as_secs_f64();
    rep.sent = sender.sent;
    // Wait for the translator to take everything in, then shut it down (flushing partial
    // Append batches), then wait for the collector to execute every frame.
    translator.wait_for(Duration::from_secs(20), |c| c.rx_datagrams >= rep.sent);
    let snaps = translator.shutdown();
    let c = dta_translator::driver::WorkerSnapshot::total(&snaps);
    for s in &snaps {
        rep.socket_drops += s.socket_drops;
        rep.retransmitted += s
            .qps
            .iter()
            .map(|(_, _, q)| q.retransmitted_frames)
            .sum::<u64>();
        rep.probes += s.qps.iter().map(|(_, _, q)| q.probes).sum::<u64>();
        rep.psn_skipped += s.qps.iter().map(|(_, _, q)| q.psn_skipped).sum::<u64>();
    }
    rep.received = c.rx_datagrams;
    rep.translated = c.translated;
    rep.dropped = c.dropped();
    rep.drop_reasons = c
        .iter()
        .filter(|(i, v)| *v > 0 && i.name.starts_with("drop_"))
        .map(|(i, v)| (i.name.to_string(), v))
        .collect();
    rep.frames = c.frames;
    // Shutdown waited until every frame was confirmed (an ACK covers a frame once the
    // collector executed it; a frame the wire lost is confirmed after its resend), and the
    // collector publishes its counters every ~50 ms. Waiting instead for the collector to
    // have received `frames` sat out the whole timeout after one loss: the translator counts
    // the lost copy and its resend.
    let confirmed = dta_translator::driver::WorkerSnapshot::all_confirmed(&snaps);
    let settle = Duration::from_secs(if confirmed { 1 } else { 20 });
    collector.wait_for(settle, |k| {
        k.rcvd_pkts + k.bad_icrc + k.malformed >= rep.frames
    });
    std::thread::sleep(Duration::from_millis(100));
    let k = collector.counters();
    rep.rnic_writes = k.writes + k.atomics;
    rep.rnic_errors = k
        .iter()
        .filter(|(i, v)| {
            *v > 0
                && !matches!(
                    i.name,
                    "rcvd_pkts" | "sent_pkts" | "writes" | "write_bytes" | "acks_sent" | "atomics"
                )
        })
        .map(|(i, v)| (i.name.to_string(), v))
        .collect();
    check_entries(&mut readers, &mut rep, &mut expect_next);

    // Query every flow.
    let s = collector.store(kw_store()).ok_or("no paths store")?;
    let view = s.keywrite().ok_or("paths is not a Key-Write store")?;
    let mut predicted = 0.0;
    for i in 0..opts.keywrite {
        let key = Key::new(&wl.flows.tuple(i)).expect("13-byte key");
        match view.query(&key, opts.redundancy as usize, Vote::Plurality) {
            KeyWriteAnswer::Value { value, .. } => {
                let want = wl.path_value(i);
                if value.as_bytes()[..20] == want && value.as_bytes()[20..].iter().all(|&b| b == 0)
                {
                    rep.kw_correct += 1;
                } else {
                    rep.kw_wrong += 1;
                }
            }
            KeyWriteAnswer::Empty => rep.kw_empty += 1,
            KeyWriteAnswer::Conflict { .. } => rep.kw_conflict += 1,
        }
        let alpha = (opts.keywrite - 1 - i) as f64 / view.layout.slots() as f64;
        predicted += keywrite_p_empty(alpha, opts.redundancy as u32, 32);
    }
    rep.kw_predicted_empty = predicted / opts.keywrite.max(1) as f64;
    collector.shutdown();
    let _ = std::fs::remove_dir_all(&dir);
    Ok(rep)
}

/// Prints the report the way an operator reads it.
pub fn print(opts: &DemoOptions, r: &DemoReport) {
    let pct = |a: u64, b: u64| {
        if b == 0 {
            0.0
        } else {
            100.0 * a as f64 / b as f64
        }
    };
    println!();
    println!("dta demo: loopback, software RNIC, extended report profile");
    println!("  reports sent            {:>12}   ({} Key-Write INT paths N={}, {} Append loss events over {} lists)", r.sent, opts.keywrite, opts.redundancy, opts.append, opts.lists);
    println!(
        "  send rate               {:>12.0}   reports/s",
        r.sent as f64 / r.send_secs.max(1e-9)
    );
    println!(
        "  received by translator  {:>12}   (socket drops {})",
        r.received, r.socket_drops
    );
    let reasons: Vec<String> = r
        .drop_reasons
        .iter()
        .map(|(name, v)| format!("{name} {v}"))
        .collect();
    println!(
        "  translated              {:>12}   (dropped {}{}{})",
        r.translated,
        r.dropped,
        if reasons.is_empty() { "" } else { ": " },
        reasons.join(", ")
    );
    println!(
        "  RoCEv2 frames sent      {:>12}   ({:.2} frames/report)",
        r.frames,
        r.frames as f64 / r.translated.max(1) as f64
    );
    println!(
        "  RDMA messages executed  {:>12}   (frames resent {}, probes {}, frames lost in transit {})",
        r.rnic_writes, r.retransmitted, r.probes, r.psn_skipped
    );
    println!(
        "  Key-Write queries       {:>12}   correct {:.2}%  empty {:.2}% (formula {:.2}%)  conflict {:.3}%  wrong {}",
        opts.keywrite,
        pct(r.kw_correct, opts.keywrite),
        pct(r.kw_empty, opts.keywrite),
        100.0 * r.kw_predicted_empty,
        pct(r.kw_conflict, opts.keywrite),
        r.kw_wrong
    );
    println!("  Append entries in order {:>12}   of {} ({:.2}%), misordered {}, lost to reader overrun {} ({} batches)", r.append_recovered, opts.append, pct(r.append_recovered, opts.append), r.append_misordered, r.append_skipped, r.append_lost_batches);
    if r.rnic_errors.is_empty() {
        println!("  RNIC drop counters      all zero");
    } else {
        let list: Vec<String> = r
            .rnic_errors
            .iter()
            .map(|(name, v)| format!("{name} {v}"))
            .collect();
        println!("  RNIC drop counters      {}", list.join(", "));
    }
    let failed = checks(opts, r);
    if failed.is_empty() {
        println!("  checks                  all passed");
    } else {
        for f in &failed {
            println!("  CHECK FAILED            {f}");
        }
    }
}

/// The demo's checks: what must hold for "the system works end to end". Returns one line per
/// failed check (empty: all passed); `dta demo` exits 1 when any fails.
pub fn checks(opts: &DemoOptions, r: &DemoReport) -> Vec<String> {
    let mut failed = Vec::new();
    let sent = opts.keywrite + opts.append;
    if r.received + r.socket_drops < sent {
        failed.push(format!(
            "{} of {sent} reports neither reached the translator nor were counted as socket drops",
            sent - r.received - r.socket_drops
        ));
    }
    if r.translated + r.dropped != r.received {
        failed.push(format!(
            "accounting: received {} != translated {} + dropped {}",
            r.received, r.translated, r.dropped
        ));
    }
    if r.dropped > 0 {
        failed.push(format!("the translator dropped {} reports", r.dropped));
    }
    if r.kw_wrong > 0 {
        failed.push(format!(
            "{} Key-Write answers were values never sent",
            r.kw_wrong
        ));
    }
    // The empty rate is a random quantity around the formula; a store that lost writes
    // answers empty far more often.
    let empty = r.kw_empty as f64 / opts.keywrite.max(1) as f64;
    if opts.keywrite > 0 && empty > 1.5 * r.kw_predicted_empty + 0.005 {
        failed.push(format!(
            "Key-Write empty {:.2} % against the formula's {:.2} %",
            100.0 * empty,
            100.0 * r.kw_predicted_empty
        ));
    }
    if r.append_misordered > 0 {
        failed.push(format!(
            "{} Append entries out of order or corrupt",
            r.append_misordered
        ));
    }
    if r.socket_drops == 0 && r.dropped == 0 && r.append_recovered + r.append_skipped < opts.append
    {
        failed.push(format!(
            "Append: {} of {} entries recovered ({} skipped by overrun)",
            r.append_recovered, opts.append, r.append_skipped
        ));
    }
    // Duplicates are resends the responder already executed (harmless); every other RNIC
    // counter here is an error.
    let errors: Vec<String> = r
        .rnic_errors
        .iter()
        .filter(|(name, _)| name != "duplicate_request")
        .map(|(name, v)| format!("{name} {v}"))
        .collect();
    if !errors.is_empty() {
        failed.push(format!("RNIC errors: {}", errors.join(", ")));
    }
    failed
}

#[cfg(test)]
mod tests {
    use super::*;

    fn clean(opts: &DemoOptions) -> DemoReport {
        let sent = opts.keywrite + opts.append;
        DemoReport {
            sent,
            received: sent,
            translated: sent,
            kw_correct: opts.keywrite,
            kw_predicted_empty: 0.016,
            append_recovered: opts.append,
            ..DemoReport::default()
        }
    }

    /// A clean run passes; each kind of failure the demo can see makes it fail (exit 1).
    #[test]
    fn checks_pass_a_clean_run_and_name_each_failure() {
        let opts = DemoOptions {
            keywrite: 1000,
            append: 1000,
            ..DemoOptions::default()
        };
        assert!(checks(&opts, &clean(&opts)).is_empty());
        let mut dup = clean(&opts);
        dup.rnic_errors = vec![("duplicate_request".into(), 3)];
        assert!(checks(&opts, &dup).is_empty(), "duplicates are harmless");

        type Spoil = Box<dyn Fn(&mut DemoReport)>;
        let cases: Vec<(&str, Spoil)> = vec![
            (
                "dropped",
                Box::new(|r| {
                    r.translated -= 5;
                    r.dropped = 5;
                }),
            ),
            ("never sent", Box::new(|r| r.kw_wrong = 1)),
            ("empty", Box::new(|r| r.kw_empty = 100)),
            ("out of order", Box::new(|r| r.append_misordered = 2)),
            ("recovered", Box::new(|r| r.append_recovered = 900)),
            (
                "bad_icrc",
                Box::new(|r| r.rnic_errors = vec![("bad_icrc".into(), 1)]),
            ),
            ("accounting", Box::new(|r| r.translated -= 1)),
            ("neither reached", Box::new(|r| r.received -= 10)),
        ];
        for (what, spoil) in cases {
            let mut r = clean(&opts);
            spoil(&mut r);
            let failed = checks(&opts, &r);
            assert!(
                failed.iter().any(|f| f.contains(what)),
                "{what}: {failed:?}"
            );
        }
    }
}
