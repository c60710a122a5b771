//! The collector's `/metrics` page (Prometheus text exposition format 0.0.4).
//!
//! Rendered by an HTTP thread per scrape from the RNIC thread's published snapshot
//! ([`crate::service::Published`]), the stores' memory and the control state; the RNIC thread
//! only bumps plain counters and publishes copies of them.
//!
//! Every name starts with `dta_collector_`, counters end in `_total`, and what tells series of
//! one quantity apart is a label: `reason` on drops, `op` on messages, `kind` on responses;
//! per-QP series carry `store`, `peer` and `qpn`. The page ends with the standard `process_*`
//! families and `dta_build_info`. `collector/README.md` lists the families.

use std::sync::atomic::Ordering;

use dta_io::process::ProcessStats;
use dta_proto::stats::{CounterGroup, PromKind, PromRow, PromWriter};

use crate::http::{ControlState, ESTIMATE_SAMPLES};
use crate::query::append::{ListReader, Start};
use crate::rnic::cm::CmCounters;
use crate::rnic::counters::RnicCounters;

/// Most Append lists per store that get per-list head series.
const MAX_LIST_SERIES: u32 = 256;

/// The RNIC counters exported as labelled or renamed families, device-wide
/// (`dta_collector_rnic_*`) and per QP (`dta_collector_qp_*`); every other counter of
/// [`RnicCounters`] is a family of its own under its rxe-style name.
pub const RNIC_GROUPS: &[CounterGroup] = &[
    CounterGroup {
        family: "rx_packets",
        help: "RoCEv2 packets accepted for processing (headers, address and ICRC good).",
        label: "",
        members: &[("rcvd_pkts", "")],
    },
    CounterGroup {
        family: "tx_packets",
        help: "RoCEv2 packets sent (ACKs, NAKs, read responses, atomic ACKs, SENDs).",
        label: "",
        members: &[("sent_pkts", "")],
    },
    CounterGroup {
        family: "duplicate_requests",
        help: "Requests whose PSN was behind the expected PSN: re-ACKed, never re-executed.",
        label: "",
        members: &[("duplicate_request", "")],
    },
    CounterGroup {
        family: "drops",
        help: "Requests and packets dropped without executing, by reason (rxe/mlx5 counter \
               names; collector/README.md explains each).",
        label: "reason",
        members: &[
            ("out_of_seq_request", "out_of_seq_request"),
            ("out_of_seq_dropped", "out_of_seq_dropped"),
            ("send_rnr_err", "send_rnr_err"),
            ("malformed", "malformed"),
            ("bad_opcode", "bad_opcode"),
            ("bad_icrc", "bad_icrc"),
            ("unknown_qpn", "unknown_qpn"),
            ("addr_mismatch", "addr_mismatch"),
            ("bad_pkey", "bad_pkey"),
            ("qp_error_drops", "qp_error"),
            ("rkey_violation", "rkey_violation"),
            ("out_of_bounds", "out_of_bounds"),
            ("access_denied", "access_denied"),
            ("invalid_request", "invalid_request"),
            ("read_busy_drops", "read_busy"),
        ],
    },
    CounterGroup {
        family: "messages",
        help: "RDMA messages executed, by operation (atomic: FETCH_ADD and COMPARE_SWAP).",
        label: "op",
        members: &[
            ("writes", "write"),
            ("atomics", "atomic"),
            ("reads", "read"),
            ("sends", "send"),
        ],
    },
    CounterGroup {
        family: "responses",
        help: "ACKs and NAKs (all syndromes) sent.",
        label: "kind",
        members: &[("acks_sent", "ack"), ("naks_sent", "nak")],
    },
    CounterGroup {
        family: "tx_drops",
        help: "Frames that did not fit in the transmit batch and were dropped.",
        label: "",
        members: &[("tx_dropped", "")],
    },
    CounterGroup {
        family: "cq_overflows",
        help: "Completions dropped because the completion queue was full.",
        label: "",
        members: &[("cq_overflow", "")],
    },
];

/// The `/metrics` page, with this process's `process_*` figures.
pub fn metrics(state: &ControlState) -> String {
    render(state, ProcessStats::read().ok().as_ref())
}

/// The `/metrics` page, with `process` when `/proc` could be read.
fn render(state: &ControlState, process: Option<&ProcessStats>) -> String {
    let (counters, per_qp, owners, imm, cm, conns, wakes) = {
        let p = state.published.lock().expect("publisher lock");
        (
            p.counters,
            p.per_qp.clone(),
            p.qp_owners.clone(),
            p.immediate_events,
            p.cm,
            p.connections.len(),
            (p.rx_bursts, p.rx_coalesce_waits),
        )
    };
    let mut w = PromWriter::new();
    w.counter_families(
        "dta_collector_rnic",
        RnicCounters::INFO,
        RNIC_GROUPS,
        &[(vec![], counters.values())],
    );
    let qp_rows: Vec<PromRow<'_>> = per_qp
        .iter()
        .map(|(qpn, c)| {
            let owner = owners.iter().find(|o| o.qpn == *qpn);
            let store = owner
                .and_then(|o| state.stores.get(o.store))
                .map_or("unknown", |s| s.name());
            let peer = owner
                .and_then(|o| o.peer)
                .map_or_else(|| "unknown".to_string(), |p| p.to_string());
            (
                vec![
                    ("store", store.to_string()),
                    ("peer", peer),
                    ("qpn", format!("{qpn:#x}")),
                ],
                c.values(),
            )
        })
        .collect();
    w.counter_families(
        "dta_collector_qp",
        RnicCounters::INFO,
        RNIC_GROUPS,
        &qp_rows,
    );
    w.single(
        PromKind::Counter,
        "dta_collector_immediate_events",
        "WRITE with Immediate completions turned into events (the papers' push notifications).",
        imm as f64,
    );
    w.single(
        PromKind::Counter,
        "dta_collector_rnic_rx_bursts",
        "Receive calls of the software RNIC that returned packets (one wake-up each).",
        wakes.0 as f64,
    );
    w.single(
        PromKind::Counter,
        "dta_collector_rnic_rx_coalesce_waits",
        "Waits of [rnic] rx_coalesce_us after a short receive (receive interrupt moderation).",
        wakes.1 as f64,
    );
    w.counter_families(
        "dta_collector",
        CmCounters::INFO,
        &[],
        &[(vec![], cm.values())],
    );
    w.single(
        PromKind::Gauge,
        "dta_collector_cm_connections",
        "RDMA_CM connections (half-open and established).",
        conns as f64,
    );
    stores(&mut w, state);
    if let Some(p) = &state.pull {
        crate::zero::metrics::write(&mut w, p);
    }
    w.single(
        PromKind::Counter,
        "dta_collector_http_requests",
        "Control API requests served.",
        state.requests.load(Ordering::Relaxed) as f64,
    );
    for (name, counter, help, v) in state.http.get().families() {
        let kind = if counter {
            PromKind::Counter
        } else {
            PromKind::Gauge
        };
        w.single(kind, &format!("dta_collector_{name}"), help, v as f64);
    }
    w.single(
        PromKind::Gauge,
        "dta_collector_uptime_seconds",
        "Seconds since the control API started.",
        state.started.elapsed().as_secs_f64(),
    );
    if let Some(p) = process {
        p.write_prom(&mut w);
    }
    let features: Vec<&str> = [
        (cfg!(feature = "rdma"), "rdma"),
        (cfg!(feature = "af_xdp"), "af_xdp"),
        (cfg!(feature = "dpdk"), "dpdk"),
    ]
    .into_iter()
    .filter_map(|(on, name)| on.then_some(name))
    .collect();
    w.build_info(env!("CARGO_PKG_VERSION"), &features);
    w.finish()
}

/// Sketch-Merge stores: the newest epoch and how complete it is.
fn sketch_families(w: &mut PromWriter, state: &ControlState) {
    let newest: Vec<(&str, crate::query::sketch::Completeness)> = state
        .stores
        .iter()
        .filter_map(|s| {
            let v = s.sketch()?;
            let e = v.latest_epoch()?;
            Some((s.name(), v.read_epoch(e).completeness()))
        })
        .collect();
    w.family(
        PromKind::Gauge,
        "dta_collector_sketch_epoch",
        "Newest epoch a Sketch-Merge store holds.",
    );
    for (s, c) in &newest {
        w.sample(&[("store", s)], c.epoch as f64);
    }
    w.family(
        PromKind::Gauge,
        "dta_collector_sketch_columns",
        "Columns of the newest epoch: written by the translator, complete (merged from the \
         expected number of switches), or in transition (being written on every read).",
    );
    for (s, c) in &newest {
        w.sample(&[("store", s), ("state", "written")], c.written as f64);
        w.sample(&[("store", s), ("state", "complete")], c.complete as f64);
        w.sample(
            &[("store", s), ("state", "in_transition")],
            c.in_transition as f64,
        );
    }
    w.family(
        PromKind::Gauge,
        "dta_collector_sketch_completeness_ratio",
        "Fraction of the newest epoch's expected switch-column contributions merged.",
    );
    for (s, c) in &newest {
        w.sample(&[("store", s)], c.ratio());
    }
}

/// Picks one figure out of an estimate.
type EstimateField = fn(&crate::query::estimate::Estimate) -> f64;

/// The stores' families: memory, estimates, Append heads and readers, epochs.
fn stores(w: &mut PromWriter, state: &ControlState) {
    let n = state.config.collector.max_redundancy;
    let est: Vec<_> = state
        .stores
        .iter()
        .map(|s| s.estimate(ESTIMATE_SAMPLES, n))
        .collect();
    w.family(
        PromKind::Gauge,
        "dta_collector_store_memory_bytes",
        "Memory mapped for the store's region (page-rounded).",
    );
    for s in &state.stores {
        let b = s.region.backing().to_string();
        w.sample(
            &[
                ("store", s.name()),
                ("kind", s.meta.kind.name()),
                ("backing", &b),
            ],
            s.memory_bytes() as f64,
        );
    }
    let gauges: [(&str, &str, EstimateField); 5] = [
        (
            "store_occupancy_ratio",
            "Fraction of sampled slots holding data.",
            |e| e.occupancy,
        ),
        (
            "store_load_factor",
            "Estimated keys written per slot (alpha); Append: ring fill.",
            |e| e.load_factor,
        ),
        (
            "store_p_empty_oldest",
            "Formula P(empty or no output) for the oldest key.",
            |e| e.p_empty_oldest,
        ),
        (
            "store_p_wrong_oldest",
            "Formula upper bound on P(wrong answer) for the oldest key.",
            |e| e.p_wrong_oldest,
        ),
        (
            "store_expected_success_ratio",
            "Formula expected query success for a key of random age.",
            |e| e.expected_success,
        ),
    ];
    for (name, help, get) in gauges {
        w.family(PromKind::Gauge, &format!("dta_collector_{name}"), help);
        for (s, e) in state.stores.iter().zip(&est) {
            w.sample(&[("store", s.name()), ("kind", s.meta.kind.name())], get(e));
        }
    }
    w.family(
        PromKind::Gauge,
        "dta_collector_append_head_seq",
        "Newest batch sequence number written to an Append list (first 256 lists of a store).",
    );
    for s in &state.stores {
        if let Some(a) = s.append() {
            for l in 0..a.lists.min(MAX_LIST_SERIES) {
                let r = ListReader::new(&s.region, a.layout, a.list_offset(l), Start::Seq(1));
                let id = (a.first_list as u64 + l as u64).to_string();
                w.sample(
                    &[("store", s.name()), ("list", &id)],
                    r.newest_seq(&s.region) as f64,
                );
            }
        }
    }
    sketch_families(w, state);
    // (store, list, consumer, [lag, lost, delivered]) of each named consumer.
    type ConsumerRow = (String, String, String, [u64; 3]);
    let (consumers, kept, evicted): (Vec<ConsumerRow>, usize, u64) = {
        let mut m = state.consumers.lock().expect("consumers lock");
        // Idle consumers go before they are exported: the series stay bounded.
        m.sweep(std::time::Instant::now());
        let list = m
            .iter()
            .filter_map(|((st, l, c), r)| {
                let s = state.stores.iter().find(|s| s.name() == st)?;
                Some((
                    st.clone(),
                    l.to_string(),
                    c.clone(),
                    [r.lag(&s.region), r.lost_batches, r.delivered],
                ))
            })
            .collect();
        (list, m.len(), m.evicted)
    };
    w.single(
        PromKind::Gauge,
        "dta_collector_append_consumers",
        "Named /tail consumers kept (at most 256; one unused for tail_consumer_idle_secs is \
         forgotten).",
        kept as f64,
    );
    w.single(
        PromKind::Counter,
        "dta_collector_append_consumers_evicted",
        "Named /tail consumers forgotten for being unused longer than tail_consumer_idle_secs.",
        evicted as f64,
    );
    for (i, (name, kind, help)) in [
        (
            "append_reader_lag_batches",
            PromKind::Gauge,
            "Batches written but not yet read by a named consumer.",
        ),
        (
            "append_reader_lost_batches",
            PromKind::Counter,
            "Batches a named consumer lost to overruns.",
        ),
        (
            "append_reader_entries",
            PromKind::Counter,
            "Entries delivered to a named consumer.",
        ),
    ]
    .into_iter()
    .enumerate()
    {
        w.family(kind, &format!("dta_collector_{name}"), help);
        for (st, l, c, v) in &consumers {
            w.sample(&[("store", st), ("list", l), ("consumer", c)], v[i] as f64);
        }
    }
    let epoch_stores: Vec<_> = state
        .stores
        .iter()
        .filter(|s| s.counter().is_some())
        .map(|s| (s.name(), s.epochs.info()))
        .collect();
    type EpochField = fn(&crate::query::counter::EpochInfo) -> f64;
    let epochs: [(&str, PromKind, &str, EpochField); 4] = [
        (
            "epoch",
            PromKind::Gauge,
            "Current epoch of a Key-Increment store.",
            |i| i.epoch as f64,
        ),
        (
            "epoch_start_timestamp_seconds",
            PromKind::Gauge,
            "Unix time the current epoch started.",
            |i| i.started_unix_ms as f64 / 1000.0,
        ),
        (
            "epoch_resets",
            PromKind::Counter,
            "Counter resets performed.",
            |i| i.resets as f64,
        ),
        (
            "epoch_period_seconds",
            PromKind::Gauge,
            "Scheduled reset period (0: on demand only).",
            |i| i.period_secs as f64,
        ),
    ];
    for (name, kind, help, get) in epochs {
        w.family(kind, &format!("dta_collector_{name}"), help);
        for (store, info) in &epoch_stores {
            w.sample(&[("store", store)], get(info));
        }
    }
}

#[cfg(test)]
mod tests {
    use dta_http::Access;
    use std::sync::atomic::AtomicU64;
    use std::sync::{Arc, Mutex};
    use std::time::Duration;
    use std::time::Instant;

    use super::*;
    use crate::http::handle;
    use crate::service::{Published, QpOwner};
    use crate::CollectorConfig;

    const CONFIG: &str = r#"
[collector]
hugepages = false
[[store]]
name = "paths"
kind = "keywrite"
slots = 64
[[store]]
name = "counts"
kind = "keyincrement"
slots = 65536
epoch_secs = 60
[[store]]
name = "events"
kind = "append"
lists = 2
first_list = 10
capacity = 16
entry_size = 4
batch = 4
[[store]]
name = "postcards"
kind = "postcard"
chunks = 64
values = [[1, 9]]
[[store]]
name = "cms"
kind = "sketch"
sketch_id = 1
sketch = "count-min"
columns = 64
"#;

    /// A control state whose every family has non-zero samples: device and per-QP counters
    /// (three QPs on two stores from two peers), written stores, a named Append consumer that
    /// lost batches and lags, a Key-Increment epoch reset.
    fn state() -> ControlState {
        let config = CollectorConfig::from_toml(CONFIG).unwrap();
        let mut rnic =
            crate::rnic::responder::Responder::new(crate::rnic::responder::DeviceConfig::default());
        let stores = crate::store::build_stores(&config, &mut rnic).unwrap();
        let n = RnicCounters::INFO.len() as u64;
        let counters = |seed: u64| {
            RnicCounters::from_values(&(1..=n).map(|i| i * 10 + seed).collect::<Vec<_>>())
        };
        let peers = ["10.0.0.101:4791", "10.0.0.102:4791"].map(|p| p.parse().unwrap());
        let qps = [
            (0x300, 0, peers[0]),
            (0x301, 0, peers[1]),
            (0x302, 2, peers[0]),
        ];
        let published = Published {
            counters: counters(0),
            per_qp: qps
                .iter()
                .map(|&(q, _, _)| (q, counters(q as u64)))
                .collect(),
            qp_owners: qps
                .iter()
                .map(|&(qpn, store, peer)| QpOwner {
                    qpn,
                    store,
                    peer: Some(peer),
                })
                .collect(),
            immediate_events: 5,
            cm: CmCounters::from_values(&(1..=CmCounters::INFO.len() as u64).collect::<Vec<_>>()),
            connections: vec![
                (1337, peers[0], 0x300, true),
                (1339, peers[1], 0x302, false),
            ],
            rx_bursts: 700,
            rx_coalesce_waits: 30,
            ..Published::default()
        };
        let st = ControlState {
            stores,
            published: Arc::new(Mutex::new(published)),
            config,
            roce: "127.0.0.1:4791".parse().unwrap(),
            started: Instant::now(),
            requests: AtomicU64::new(9),
            consumers: Mutex::new(crate::http::Consumers::new(Duration::from_secs(600))),
            http: dta_http::StatsHandle::from(dta_http::ServerStats {
                connections_open: 1,
                connections_accepted: 2,
                connections_refused: 3,
                requests: 4,
                forbidden: 5,
                unauthorized: 6,
                body_too_large: 7,
                timeouts: 8,
                busy: 9,
                tls_handshake_failures: 10,
                handler_panics: 11,
                auth_checks: 12,
                auth_throttled: 13,
            }),
            admin_enabled: true,
            pull: None,
        };
        // Append list 10: one batch. List 11: batches 1..=2 read by consumer "ops", then 3..=8
        // written into the 4-batch ring (3 and 4 are overwritten), then one batch read: 2
        // lost, 3 to go.
        let ap = st.stores.iter().find(|s| s.name() == "events").unwrap();
        let a = ap.append().unwrap();
        let write = |list: u32, seq: u64| {
            let mut b = vec![seq as u8; a.layout.stride() as usize];
            let t = a.layout.encode_trailer(seq, 4);
            let at = b.len() - t.len();
            b[at..].copy_from_slice(&t);
            let off = a.list_offset(list) + a.layout.batch_offset(a.layout.slot_for_seq(seq));
            ap.region.write(off, &b).unwrap();
        };
        write(0, 1);
        (1..=2).for_each(|seq| write(1, seq));
        assert_eq!(
            handle(
                &st,
                "GET",
                "/tail/events/11?from=1&consumer=ops",
                &Access::Anonymous,
                &[]
            )
            .status,
            200
        );
        (3..=8).for_each(|seq| write(1, seq));
        assert_eq!(
            handle(
                &st,
                "GET",
                "/tail/events/11?consumer=ops&max=1",
                &Access::Anonymous,
                &[]
            )
            .status,
            200
        );
        // As if three other consumers had gone unused past tail_consumer_idle_secs.
        st.consumers.lock().unwrap().evicted = 3;
        assert_eq!(
            handle(&st, "POST", "/epoch/counts", &Access::Admin, &[]).status,
            200
        );
        // Epoch 3 of the sketch: 40 columns from 2 switches, 10 from 1 (of 2 expected).
        let sk = st.stores.iter().find(|s| s.name() == "cms").unwrap();
        let v = sk.sketch().unwrap();
        let mut rec = vec![0u8; v.layout.column_stride() as usize];
        for c in 0..50 {
            let merged = if c < 40 { 2 } else { 1 };
            v.layout
                .encode_record(3, merged, 2, &[c + 1, 2, 3, 4], &mut rec);
            sk.region.write(v.layout.column_offset(3, c), &rec).unwrap();
        }
        // Some slots, counters and chunks of the other stores written.
        for s in &st.stores {
            let step = match s.name() {
                "paths" => 64,
                "counts" => 8 << 10,
                "postcards" => 160,
                _ => continue,
            };
            for off in (0..s.region.len() as u64).step_by(step) {
                if s.name() == "counts" {
                    s.region.fetch_add(off, 1000).unwrap();
                } else {
                    s.region.write(off, &[0x5a; 16]).unwrap();
                }
            }
        }
        st
    }

    fn page(st: &ControlState) -> String {
        let process = ProcessStats {
            cpu_seconds: 3.25,
            resident_bytes: 48 << 20,
            virtual_bytes: 2 << 30,
            start_time_seconds: 1.7e9,
            open_fds: 17,
            max_fds: Some(65536),
        };
        render(st, Some(&process))
    }

    #[test]
    fn values_are_labels() {
        let m = page(&state());
        for want in [
            "dta_collector_rnic_rx_packets_total 10\n",
            "dta_collector_rnic_drops_total{reason=\"out_of_seq_request\"} ",
            "dta_collector_rnic_drops_total{reason=\"qp_error\"} ",
            "dta_collector_rnic_messages_total{op=\"write\"} ",
            "dta_collector_rnic_responses_total{kind=\"nak\"} ",
            "dta_collector_rnic_write_bytes_total ",
            "dta_collector_qp_rx_packets_total{store=\"paths\",peer=\"10.0.0.101:4791\",qpn=\"0x300\"} 778\n",
            "dta_collector_qp_drops_total{store=\"events\",peer=\"10.0.0.101:4791\",qpn=\"0x302\",reason=\"qp_error\"} ",
            "dta_collector_qp_messages_total{store=\"paths\",peer=\"10.0.0.102:4791\",qpn=\"0x301\",op=\"atomic\"} ",
            "dta_collector_cm_req_total 1\n",
            "dta_collector_cm_connections 2\n",
            "dta_collector_append_reader_lost_batches_total{store=\"events\",list=\"11\",consumer=\"ops\"} 2\n",
            "dta_collector_append_reader_lag_batches{store=\"events\",list=\"11\",consumer=\"ops\"} 3\n",
            "dta_collector_epoch{store=\"counts\"} 1\n",
            "dta_collector_epoch_period_seconds{store=\"counts\"} 60\n",
            "process_open_fds 17\n",
            "process_start_time_seconds 1700000000\n",
            "dta_build_info{version=\"",
        ] {
            assert!(m.contains(want), "missing {want:?} in\n{m}");
        }
        // Per device and per QP: every drop reason, and no counter name left in a family name.
        for prefix in ["dta_collector_rnic_", "dta_collector_qp_"] {
            for g in RNIC_GROUPS {
                for (c, _) in g.members.iter().filter(|(c, _)| *c != g.family) {
                    let old = format!("\n{prefix}{c}_total");
                    assert!(!m.contains(&old), "{old} is now {}", g.family);
                }
            }
        }
        assert!(!m.contains("qp_qp_"), "{m}");
        let drops = m
            .lines()
            .filter(|l| {
                l.starts_with(
                    "dta_collector_qp_drops_total{store=\"paths\",peer=\"10.0.0.101:4791\"",
                )
            })
            .count();
        assert_eq!(drops, 15);
        // Every series is non-zero but the formula figures that are zero by construction: an
        // Append list never answers wrong, a sketch always answers (its error is its own), and
        // no sketch record is being written while the page is built.
        let zero: Vec<&str> = m
            .lines()
            .filter(|l| !l.starts_with('#'))
            .filter(|l| l.rsplit_once(' ').unwrap().1.parse::<f64>().unwrap() == 0.0)
            .collect();
        assert_eq!(
            zero,
            [
                "dta_collector_store_p_empty_oldest{store=\"cms\",kind=\"sketch\"} 0",
                "dta_collector_store_p_wrong_oldest{store=\"events\",kind=\"append\"} 0",
                "dta_collector_store_p_wrong_oldest{store=\"cms\",kind=\"sketch\"} 0",
                "dta_collector_sketch_columns{store=\"cms\",state=\"in_transition\"} 0"
            ],
            "{m}"
        );
        for want in [
            "dta_collector_sketch_epoch{store=\"cms\"} 3\n",
            "dta_collector_sketch_columns{store=\"cms\",state=\"written\"} 50\n",
            "dta_collector_sketch_columns{store=\"cms\",state=\"complete\"} 40\n",
            "dta_collector_sketch_completeness_ratio{store=\"cms\"} 0.703125\n",
        ] {
            assert!(m.contains(want), "missing {want:?} in\n{m}");
        }
    }

    #[test]
    fn every_rnic_counter_is_exported_once() {
        let names: Vec<&str> = RnicCounters::INFO.iter().map(|i| i.name).collect();
        for g in RNIC_GROUPS {
            for (c, _) in g.members {
                assert!(names.contains(c), "{c} is no RNIC counter");
            }
        }
        for n in names {
            let groups = RNIC_GROUPS
                .iter()
                .filter(|g| g.members.iter().any(|(c, _)| *c == n))
                .count();
            assert!(groups <= 1, "{n} in {groups} groups");
        }
    }

    #[test]
    fn sketch_queries_over_http() {
        let st = state();
        let get = |url: &str| {
            let r = handle(&st, "GET", url, &Access::Anonymous, &[]);
            (r.status, r.body)
        };
        let (status, body) = get("/query/sketch/cms/completeness");
        assert_eq!(status, 200, "{body}");
        let v: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_eq!(
            (v["epoch"].as_u64(), v["complete"].as_u64()),
            (Some(3), Some(40))
        );
        assert_eq!(v["expected_switches"].as_u64(), Some(2));
        let (status, body) = get("/query/sketch/cms/epochs");
        assert_eq!((status, body.trim()), (200, "{\"epochs\":[3]}"));
        let (status, body) = get("/query/sketch/cms/point/0a000001?epoch=3");
        assert_eq!(status, 200, "{body}");
        assert!(body.contains("\"estimate\":"), "{body}");
        assert_eq!(
            get("/query/sketch/cms/cardinality").0,
            400,
            "not a HyperLogLog"
        );
        assert_eq!(
            get("/query/sketch/counts/epochs").0,
            400,
            "not a sketch store"
        );
        assert_eq!(get("/query/sketch/cms/point/0a000001?n=2").0, 400);
        let r = handle(
            &st,
            "POST",
            "/query/sketch/cms/heavy?threshold=0",
            &Access::Anonymous,
            b"0a000001\n0a000002\n",
        );
        assert_eq!(r.status, 200, "{}", r.body);
        let v: serde_json::Value = serde_json::from_str(&r.body).unwrap();
        assert_eq!(v["heavy"].as_array().map(Vec::len), Some(2), "{v}");
        let r = handle(
            &st,
            "POST",
            "/query/sketch/cms",
            &Access::Anonymous,
            b"0a000001\nzz\n",
        );
        assert_eq!(r.body.lines().count(), 2, "{}", r.body);
    }

    #[test]
    fn a_qp_without_owner_is_still_exported() {
        let st = state();
        st.published.lock().unwrap().qp_owners.clear();
        let m = metrics(&st);
        assert!(
            m.contains("dta_collector_qp_rx_packets_total{store=\"unknown\",peer=\"unknown\",qpn=\"0x300\"}"),
            "{m}"
        );
    }

    #[test]
    fn every_family_is_in_the_readme() {
        let readme = include_str!("../README.md");
        for line in page(&state()).lines() {
            let Some(rest) = line.strip_prefix("# TYPE ") else {
                continue;
            };
            let name = rest.split(' ').next().unwrap();
            let documented = match name.strip_prefix("dta_collector_") {
                // Listed as `qp_<family>_total` and `cm_<counter>_total`.
                Some(short) if short.starts_with("qp_") || short.starts_with("cm_") => true,
                Some(short) => readme.contains(&format!("`{short}`")),
                None => readme.contains(name),
            };
            assert!(documented, "{name} is not in collector/README.md");
        }
    }

    #[test]
    fn promtool_accepts_the_page() {
        let st = state();
        // The test page, and the page as served (this process's figures from /proc).
        let live = metrics(&st);
        assert!(live.contains("\nprocess_open_fds "), "{live}");
        promtool_check(&page(&st));
        promtool_check(&live);
    }

    /// `promtool check metrics` accepts `doc` (exit 0, no lint warning); skipped with a
    /// printed reason where promtool is not installed (`scripts/prepare-tools.sh`; CI has it).
    fn promtool_check(doc: &str) {
        match dta_io::process::promtool_check_metrics(doc) {
            None => eprintln!("SKIP: promtool not found"),
            Some(Ok(())) => {}
            Some(Err(e)) => panic!("{e}\n{doc}"),
        }
    }
}
