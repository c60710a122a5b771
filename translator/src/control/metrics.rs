//! `/metrics` (Prometheus text format) and `/stats` (JSON) for the translator, served from the
//! snapshots the workers publish; never touches a worker's state directly.
//!
//! Every name starts with `dta_translator_`, counters end in `_total`, times are in seconds,
//! and what tells series of one quantity apart is a label: `worker` on everything a worker
//! counts, `store` and `qpn` on its queue pairs, `reason` on drops, `kind` on reports,
//! `syndrome` on NAKs. The page ends with the standard `process_*` families and
//! `dta_build_info`. The families are listed in `translator/README.md`.

use std::net::SocketAddrV4;
use std::sync::{Arc, Mutex};

use dta_io::process::ProcessStats;
use dta_proto::stats::{CounterGroup, PromKind, PromRow, PromWriter};

use crate::control::cm::CmClientCounters;
use crate::datapath::qp::QpStats;
use crate::datapath::stats::TranslatorCounters;
use crate::driver::WorkerSnapshot;

/// The pipeline counters exported as labelled families; every other counter of
/// [`TranslatorCounters`] is a family of its own (`dta_translator_<name>_total`).
pub const COUNTER_GROUPS: &[CounterGroup] = &[
    CounterGroup {
        family: "reports",
        help: "Reports parsed, by primitive.",
        label: "kind",
        members: &[
            ("reports_keywrite", "keywrite"),
            ("reports_keyincrement", "keyincrement"),
            ("reports_append", "append"),
            ("reports_postcard", "postcard"),
            ("reports_sketch", "sketch"),
        ],
    },
    CounterGroup {
        family: "append_batches",
        help: "Append batches written: full, or partial because their flush delay expired (or \
               at shutdown).",
        label: "fill",
        members: &[
            ("append_batches", "full"),
            ("append_partial_flushes", "partial"),
        ],
    },
    CounterGroup {
        family: "postcard_chunks",
        help: "Postcard chunks emitted, by why: the path was complete, another flow took the \
               cache slot (evicted), or the entry aged out (timeout, or at shutdown).",
        label: "reason",
        members: &[
            ("postcard_emits", "complete"),
            ("postcard_evictions", "evicted"),
            ("postcard_timeouts", "timeout"),
        ],
    },
    CounterGroup {
        family: "sketch_batches",
        help: "Sketch batches written: complete (every column had the expected switches), or \
               partial (flush timer, epoch roll-over, shutdown).",
        label: "fill",
        members: &[
            ("sketch_batches_complete", "complete"),
            ("sketch_batches_partial", "partial"),
        ],
    },
    CounterGroup {
        family: "sketch_columns",
        help: "Sketch columns received in order and merged, or skipped as already merged (in a \
               report that overlapped the columns its switch had sent).",
        label: "outcome",
        members: &[
            ("sketch_columns_merged", "merged"),
            ("sketch_columns_duplicate", "duplicate"),
        ],
    },
    CounterGroup {
        family: "sketch_nacks",
        help: "Sketch-column NACKs sent: for a report that skipped columns (gap), or by the \
               flush timer to switches that had not sent their whole sketch (straggler).",
        label: "reason",
        members: &[
            ("sketch_gap_nacks", "gap"),
            ("sketch_straggler_nacks", "straggler"),
        ],
    },
    CounterGroup {
        family: "sketch_switch_events",
        help: "Sketch switches whose epoch counter restarted (re-based onto the merge's \
               epoch), or that left the switch table after sketch.idle_epochs silent epochs.",
        label: "event",
        members: &[
            ("sketch_switch_restarts", "restart"),
            ("sketch_switches_forgotten", "forgotten"),
        ],
    },
    CounterGroup {
        family: "drops",
        help: "Reports dropped, by reason (each dropped report counted once; the reasons are \
               listed in translator/README.md).",
        label: "reason",
        members: &[
            ("drop_truncated", "truncated"),
            ("drop_malformed", "malformed"),
            ("drop_unknown_opcode", "unknown_opcode"),
            ("drop_bad_version", "bad_version"),
            ("drop_bad_redundancy", "bad_redundancy"),
            ("drop_redundancy_mismatch", "redundancy_mismatch"),
            ("drop_no_store", "no_store"),
            ("drop_unknown_list", "unknown_list"),
            ("drop_value_too_long", "value_too_long"),
            ("drop_bad_hop", "bad_hop"),
            ("drop_postcard_duplicate_hop", "postcard_duplicate_hop"),
            ("drop_overload_low", "overload_low"),
            ("drop_overload_medium", "overload_medium"),
            ("drop_backlog_full", "backlog_full"),
            ("drop_qp_broken", "qp_broken"),
            ("drop_qp_queue_full", "qp_queue_full"),
            ("drop_out_of_region", "out_of_region"),
            ("drop_handoff_full", "handoff_full"),
            ("drop_sketch_unknown", "sketch_unknown"),
            ("drop_sketch_geometry", "sketch_geometry"),
            ("drop_sketch_column_range", "sketch_column_range"),
            ("drop_sketch_gap", "sketch_gap"),
            ("drop_sketch_duplicate", "sketch_duplicate"),
            ("drop_sketch_late", "sketch_late"),
            ("drop_sketch_switches_full", "sketch_switches_full"),
            ("drop_sketch_epoch_ahead", "sketch_epoch_ahead"),
        ],
    },
    CounterGroup {
        family: "frames_dropped",
        help: "RoCEv2 frames not built because their QP could not take them, by reason \
               (queue_full, qp_broken, out_of_region). Frames, not reports: the reports they \
               carried count once each in drops_total.",
        label: "reason",
        members: &[
            ("frames_dropped_queue_full", "queue_full"),
            ("frames_dropped_qp_broken", "qp_broken"),
            ("frames_dropped_out_of_region", "out_of_region"),
        ],
    },
    CounterGroup {
        family: "int_reports",
        help: "P4.org Telemetry Reports read on the INT port, by version (v2.0 counts each \
               individual report of a coalesced datagram).",
        label: "version",
        members: &[("int_reports_v1", "1"), ("int_reports_v2", "2")],
    },
    CounterGroup {
        family: "int_drops",
        help: "Telemetry Reports not read or not mapped, by reason (translator/README.md).",
        label: "reason",
        members: &[
            ("int_drop_truncated", "truncated"),
            ("int_drop_bad_version", "bad_version"),
            ("int_drop_bad_length", "bad_length"),
            ("int_drop_unknown_rep_type", "unknown_rep_type"),
            ("int_drop_unsupported_inner_type", "unsupported_inner_type"),
            ("int_drop_malformed_inner", "malformed_inner"),
        ],
    },
    CounterGroup {
        family: "int_derived",
        help: "DTA reports derived from Telemetry Reports, by primitive.",
        label: "kind",
        members: &[
            ("int_derived_keywrite", "keywrite"),
            ("int_derived_keyincrement", "keyincrement"),
            ("int_derived_append", "append"),
            ("int_derived_postcard", "postcard"),
        ],
    },
];

/// Picks one figure out of a QP's stats.
type QpValue = fn(&QpStats) -> f64;

/// A family of per-QP series.
struct QpFamily {
    /// Name without the `dta_translator_` prefix (and a counter's `_total`).
    name: &'static str,
    help: &'static str,
    kind: PromKind,
    samples: QpSamples,
}

/// What a per-QP family's samples are.
enum QpSamples {
    /// One figure.
    One(QpValue),
    /// One figure per value of a label.
    ByLabel(&'static str, &'static [(&'static str, QpValue)]),
}

/// Nanoseconds in seconds.
const NS: f64 = 1e-9;

/// A per-QP family of one figure.
const fn one(name: &'static str, help: &'static str, kind: PromKind, f: QpValue) -> QpFamily {
    QpFamily {
        name,
        help,
        kind,
        samples: QpSamples::One(f),
    }
}

/// The per-QP families (labels `worker`, `store`, `qpn`).
const QP_FAMILIES: &[QpFamily] = &[
    one(
        "qp_frames",
        "New RoCEv2 frames on the QP (PSNs taken, probes included).",
        PromKind::Counter,
        |q| q.frames as f64,
    ),
    one("qp_acks", "ACKs received.", PromKind::Counter, |q| {
        q.acks as f64
    }),
    QpFamily {
        name: "qp_naks",
        help: "NAKs received, by AETH syndrome (psn_sequence_error, rnr, remote_access_error, \
               invalid_request, other).",
        kind: PromKind::Counter,
        samples: QpSamples::ByLabel(
            "syndrome",
            &[
                ("psn_sequence_error", |q| q.nak_seq as f64),
                ("rnr", |q| q.nak_rnr as f64),
                ("remote_access_error", |q| q.nak_access as f64),
                ("invalid_request", |q| q.nak_invalid as f64),
                ("other", |q| q.nak_other as f64),
            ],
        ),
    },
    one(
        "qp_psn_skipped",
        "Frames lost because they left the retransmission ring before they could be resent \
         (each replaced on the wire by a zero-length WRITE at its PSN).",
        PromKind::Counter,
        |q| q.psn_skipped as f64,
    ),
    one(
        "qp_retransmitted_frames",
        "Frames sent again, unchanged, from the QP's retransmission ring.",
        PromKind::Counter,
        |q| q.retransmitted_frames as f64,
    ),
    one(
        "qp_retransmit_events",
        "Retransmissions started: go-back-N passes from the PSN the collector named, and \
         resends of the oldest unconfirmed frame after an unanswered probe.",
        PromKind::Counter,
        |q| q.retransmit_events as f64,
    ),
    one(
        "qp_retx_overruns",
        "Go-back-N passes that found frames gone from the retransmission ring (counted in \
         qp_psn_skipped).",
        PromKind::Counter,
        |q| q.retx_overruns as f64,
    ),
    one(
        "qp_noops_in_place",
        "Zero-length WRITEs sent after a timeout at the oldest unconfirmed PSN, whose frame \
         had left the retransmission ring: each replaced that frame (its data lost) or was \
         a duplicate.",
        PromKind::Counter,
        |q| q.noops_in_place as f64,
    ),
    one(
        "qp_ack_timeouts",
        "Retransmission timeouts (an answer was due and none came).",
        PromKind::Counter,
        |q| q.ack_timeouts as f64,
    ),
    one(
        "qp_probes",
        "Fresh frames sent with AckReq to ask where the collector stands (zero-length \
         probes, queued frames sent ahead of the window).",
        PromKind::Counter,
        |q| q.probes as f64,
    ),
    one(
        "qp_stale_responses",
        "Responses matching no outstanding state.",
        PromKind::Counter,
        |q| q.stale_responses as f64,
    ),
    one(
        "qp_recoveries",
        "Recoveries completed (from the first sign of loss to the answer showing the \
         collector caught up).",
        PromKind::Counter,
        |q| q.recoveries as f64,
    ),
    one(
        "qp_recovery_seconds",
        "Total duration of the recoveries.",
        PromKind::Counter,
        |q| q.recovery_ns_total as f64 * NS,
    ),
    one(
        "qp_recovery_max_seconds",
        "Longest recovery since the QP was connected.",
        PromKind::Gauge,
        |q| q.recovery_ns_max as f64 * NS,
    ),
    one(
        "qp_loss_events",
        "Loss events (each halved the send window).",
        PromKind::Counter,
        |q| q.loss_events as f64,
    ),
    one(
        "qp_window_frames",
        "The send window in frames (0: unlimited, no loss seen).",
        PromKind::Gauge,
        |q| q.window as f64,
    ),
    one(
        "qp_queued_frames",
        "Frames waiting in the QP to be sent.",
        PromKind::Gauge,
        |q| q.queued as f64,
    ),
    one(
        "qp_rtt_samples",
        "Round-trip samples feeding the adaptive retransmission timeout.",
        PromKind::Counter,
        |q| q.rtt_samples as f64,
    ),
    one(
        "qp_srtt_seconds",
        "Smoothed round-trip time.",
        PromKind::Gauge,
        |q| q.srtt_ns as f64 * NS,
    ),
    one(
        "qp_rto_seconds",
        "The retransmission timeout, without back-off.",
        PromKind::Gauge,
        |q| q.rto_ns as f64 * NS,
    ),
    one(
        "qp_silence_max_seconds",
        "Longest time without any ACK or NAK while one was due, that ended in an answer.",
        PromKind::Gauge,
        |q| q.silence_ns_max as f64 * NS,
    ),
];

/// Per-worker figures outside the pipeline counters: name, help, kind, figure.
type WorkerFamily = (
    &'static str,
    &'static str,
    PromKind,
    fn(&WorkerSnapshot) -> u64,
);

const WORKER_FAMILIES: &[WorkerFamily] = &[
    (
        "pending_reports",
        "Reports held in Append batches, postcard caches and the backlog.",
        PromKind::Gauge,
        |s| s.pending,
    ),
    (
        "unconfirmed_frames",
        "Frames sent or queued that the collectors have not confirmed (executed) yet.",
        PromKind::Gauge,
        |s| s.unconfirmed,
    ),
    (
        "socket_drops",
        "Datagrams the kernel or NIC ring dropped before the worker saw them.",
        PromKind::Counter,
        |s| s.socket_drops,
    ),
    (
        "rx_ios",
        "Receive calls that returned data (batching: fewer than datagrams).",
        PromKind::Counter,
        |s| s.rx_ios,
    ),
    ("tx_ios", "Transmit calls.", PromKind::Counter, |s| s.tx_ios),
    (
        "tx_errors",
        "Frames the kernel refused to send.",
        PromKind::Counter,
        |s| s.tx_errors,
    ),
    (
        "reconnects",
        "RDMA_CM reconnections started after a QP broke.",
        PromKind::Counter,
        |s| s.reconnects,
    ),
];

/// Renders the Prometheus document for a set of worker snapshots, with this process's
/// `process_*` figures.
pub fn render(snaps: &[WorkerSnapshot]) -> String {
    render_page(snaps, ProcessStats::read().ok().as_ref(), None)
}

/// Renders the Prometheus document: the workers' counters, their QPs, the HTTP server's own
/// counters (`http`, when served by one), and `process` when `/proc` could be read.
pub fn render_page(
    snaps: &[WorkerSnapshot],
    process: Option<&ProcessStats>,
    http: Option<&dta_http::ServerStats>,
) -> String {
    let mut w = PromWriter::new();
    let workers: Vec<String> = (0..snaps.len()).map(|i| i.to_string()).collect();
    let rows = |values: fn(&WorkerSnapshot) -> Vec<u64>| -> Vec<PromRow<'_>> {
        snaps
            .iter()
            .zip(&workers)
            .map(|(s, wi)| (vec![("worker", wi.clone())], values(s)))
            .collect()
    };
    w.counter_families(
        "dta_translator",
        TranslatorCounters::INFO,
        COUNTER_GROUPS,
        &rows(|s| s.counters.values()),
    );
    for f in QP_FAMILIES {
        w.family(f.kind, &format!("dta_translator_{}", f.name), f.help);
        for (s, wi) in snaps.iter().zip(&workers) {
            for (store, qpn, q) in &s.qps {
                let qpn = format!("{qpn:#x}");
                let l = [("worker", wi.as_str()), ("store", store), ("qpn", &qpn)];
                match f.samples {
                    QpSamples::One(get) => w.sample(&l, get(q)),
                    QpSamples::ByLabel(label, members) => {
                        for (value, get) in members {
                            let [a, b, c] = l;
                            w.sample(&[a, b, c, (label, value)], get(q));
                        }
                    }
                }
            }
        }
    }
    for (name, help, kind, get) in WORKER_FAMILIES {
        w.family(*kind, &format!("dta_translator_{name}"), help);
        for (s, wi) in snaps.iter().zip(&workers) {
            w.sample(&[("worker", wi)], get(s) as f64);
        }
    }
    w.counter_families(
        "dta_translator",
        CmClientCounters::INFO,
        &[],
        &rows(|s| s.cm.values()),
    );
    if let Some(h) = http {
        for (name, counter, help, v) in h.families() {
            let kind = if counter {
                PromKind::Counter
            } else {
                PromKind::Gauge
            };
            w.single(kind, &format!("dta_translator_{name}"), help, v as f64);
        }
    }
    if let Some(p) = process {
        p.write_prom(&mut w);
    }
    let features: Vec<&str> = [
        (cfg!(feature = "af_xdp"), "af_xdp"),
        (cfg!(feature = "dpdk"), "dpdk"),
    ]
    .into_iter()
    .filter_map(|(on, name)| on.then_some(name))
    .collect();
    w.build_info(env!("CARGO_PKG_VERSION"), &features);
    w.finish()
}

/// Renders `/stats`: merged counters and per-worker details as JSON.
pub fn render_json(snaps: &[WorkerSnapshot]) -> String {
    let total = WorkerSnapshot::total(snaps);
    let counters: serde_json::Map<String, serde_json::Value> = total
        .iter()
        .map(|(i, v)| (i.name.to_string(), v.into()))
        .collect();
    let workers: Vec<serde_json::Value> = snaps
        .iter()
        .map(|s| {
            serde_json::json!({
                "pending": s.pending,
                "unconfirmed": s.unconfirmed,
                "socket_drops": s.socket_drops,
                "qps": s.qps.iter().map(|(n, q, st)| serde_json::json!({
                    "store": n, "qpn": q, "frames": st.frames, "acks": st.acks,
                    "probes": st.probes, "ack_timeouts": st.ack_timeouts,
                    "recoveries": st.recoveries, "recovery_max_ns": st.recovery_ns_max,
                    "loss_events": st.loss_events, "window": st.window, "queued": st.queued,
                    "psn_skipped": st.psn_skipped, "retransmitted_frames": st.retransmitted_frames,
                    "retransmit_events": st.retransmit_events, "retx_overruns": st.retx_overruns,
                    "srtt_ns": st.srtt_ns, "rto_ns": st.rto_ns, "silence_max_ns": st.silence_ns_max,
                })).collect::<Vec<_>>(),
            })
        })
        .collect();
    serde_json::json!({ "counters": counters, "dropped": total.dropped(), "workers": workers })
        .to_string()
}

/// A running metrics endpoint, on the control plane's shared server ([`dta_http`]: bounded
/// headers, bodies, connections and time). Dropping it closes it.
pub struct MetricsServer {
    _server: dta_http::Server,
    /// The bound address.
    pub addr: SocketAddrV4,
}

impl MetricsServer {
    /// Serves `/metrics` and `/stats` on `addr` from `snapshots`, plain HTTP, no credentials,
    /// answering IP literals and `localhost` as `Host`.
    pub fn spawn(
        addr: SocketAddrV4,
        snapshots: Arc<Vec<Mutex<WorkerSnapshot>>>,
    ) -> Result<MetricsServer, String> {
        MetricsServer::spawn_with(addr, snapshots, &dta_http::WebSettings::default())
    }

    /// Serves `/metrics` and `/stats` on `addr` from `snapshots` with the web settings of
    /// `[translator]` (`web_config_file`: TLS and basic-auth users, `admin_token_file`,
    /// `control_hostnames`), the same keys as the collector's control API.
    pub fn spawn_with(
        addr: SocketAddrV4,
        snapshots: Arc<Vec<Mutex<WorkerSnapshot>>>,
        web: &dta_http::WebSettings,
    ) -> Result<MetricsServer, String> {
        let opts = web
            .server_options("dta-metrics")
            .map_err(|e| format!("[translator] {e}"))?;
        let stats = opts.stats.clone();
        let handler: dta_http::Handler = Arc::new(move |req: dta_http::Request| {
            let path = req.target.split('?').next().unwrap_or("");
            if req.method != "GET" && req.method != "HEAD" {
                return dta_http::Response::text(405, format!("{} not allowed", req.method));
            }
            let snaps = || -> Vec<WorkerSnapshot> {
                snapshots
                    .iter()
                    .map(|m| m.lock().expect("snapshot lock").clone())
                    .collect()
            };
            let (body, ctype) = match path {
                "/metrics" => (
                    render_page(
                        &snaps(),
                        ProcessStats::read().ok().as_ref(),
                        Some(&stats.get()),
                    ),
                    "text/plain; version=0.0.4",
                ),
                "/stats" => (render_json(&snaps()), "application/json"),
                _ => return dta_http::Response::text(404, "not found: try /metrics or /stats"),
            };
            dta_http::Response {
                status: 200,
                content_type: ctype.into(),
                headers: Vec::new(),
                body: body.into_bytes(),
            }
        });
        let server = dta_http::Server::spawn(std::net::SocketAddr::V4(addr), opts, handler)
            .map_err(|e| format!("cannot serve metrics: {e}"))?;
        let bound = match server.local_addr() {
            std::net::SocketAddr::V4(a) => a,
            _ => addr,
        };
        Ok(MetricsServer {
            _server: server,
            addr: bound,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A QP with every figure non-zero, distinct per `seed`.
    fn qp(seed: u64) -> QpStats {
        QpStats {
            frames: 1000 + seed,
            acks: 900 + seed,
            nak_seq: 7 + seed,
            nak_rnr: 1 + seed,
            nak_access: 2 + seed,
            nak_invalid: 3 + seed,
            nak_other: 4 + seed,
            psn_skipped: 5 + seed,
            ack_timeouts: 6 + seed,
            probes: 8 + seed,
            stale_responses: 9 + seed,
            recoveries: 10 + seed,
            recovery_ns_total: 25_000_000 + seed,
            recovery_ns_max: 4_500_000 + seed,
            rtt_samples: 800 + seed,
            srtt_ns: 1_500_000,
            rto_ns: 2_000_000,
            silence_ns_max: 3_000_000 + seed,
            retransmitted_frames: 40 + seed,
            retransmit_events: 11 + seed,
            retx_overruns: 1 + seed,
            noops_in_place: 2 + seed,
            loss_events: 3 + seed,
            window: 64,
            queued: 12 + seed,
        }
    }

    /// Two workers, each with a QP to two stores, every counter non-zero.
    fn snapshots() -> Vec<WorkerSnapshot> {
        (0..2u64)
            .map(|w| WorkerSnapshot {
                counters: TranslatorCounters::from_values(
                    &(0..TranslatorCounters::INFO.len() as u64)
                        .map(|i| 100 * (i + 1) + w)
                        .collect::<Vec<_>>(),
                ),
                qps: vec![
                    ("paths".into(), 0x200 + w as u32, qp(w)),
                    ("events".into(), 0x202 + w as u32, qp(10 + w)),
                ],
                pending: 3 + w,
                unconfirmed: 7 + w,
                socket_drops: 4 + w,
                rx_ios: 500 + w,
                tx_ios: 400 + w,
                tx_errors: 1 + w,
                reconnects: 2 + w,
                cm: CmClientCounters::from_values(
                    &(0..CmClientCounters::INFO.len() as u64)
                        .map(|i| i + 1 + w)
                        .collect::<Vec<_>>(),
                ),
            })
            .collect()
    }

    fn page() -> String {
        let process = ProcessStats {
            cpu_seconds: 12.5,
            resident_bytes: 64 << 20,
            virtual_bytes: 1 << 30,
            start_time_seconds: 1.7e9,
            open_fds: 42,
            max_fds: Some(1024),
        };
        let http = dta_http::ServerStats {
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
        };
        render_page(&snapshots(), Some(&process), Some(&http))
    }

    #[test]
    fn values_are_labels_and_times_are_seconds() {
        let m = page();
        for want in [
            "dta_translator_rx_datagrams_total{worker=\"0\"} 100\n",
            "dta_translator_reports_total{worker=\"1\",kind=\"append\"} 401\n",
            "dta_translator_drops_total{worker=\"0\",reason=\"no_store\"} ",
            "dta_translator_drops_total{worker=\"1\",reason=\"handoff_full\"} ",
            "dta_translator_append_batches_total{worker=\"0\",fill=\"partial\"} ",
            "dta_translator_postcard_chunks_total{worker=\"0\",reason=\"evicted\"} ",
            "dta_translator_qp_naks_total{worker=\"1\",store=\"events\",qpn=\"0x203\",\
             syndrome=\"psn_sequence_error\"} 18\n",
            "dta_translator_qp_srtt_seconds{worker=\"0\",store=\"paths\",qpn=\"0x200\"} 0.0015\n",
            "dta_translator_qp_rto_seconds{worker=\"0\",store=\"paths\",qpn=\"0x200\"} 0.002\n",
            "# TYPE dta_translator_qp_recovery_seconds_total counter\n",
            "dta_translator_reconnects_total{worker=\"1\"} 3\n",
            "dta_translator_cm_req_sent_total{worker=\"0\"} 1\n",
            "process_cpu_seconds_total 12.5\n",
            "process_resident_memory_bytes 67108864\n",
            "process_max_fds 1024\n",
            "dta_build_info{version=\"",
        ] {
            assert!(m.contains(want), "missing {want:?} in\n{m}");
        }
        for g in COUNTER_GROUPS {
            for (c, _) in g.members.iter().filter(|(c, _)| *c != g.family) {
                let old = format!("dta_translator_{c}_total");
                assert!(!m.contains(&old), "{old} is a label value of {}", g.family);
            }
        }
        let drops = m
            .lines()
            .filter(|l| l.starts_with("dta_translator_drops_total{worker=\"0\""))
            .count();
        assert_eq!(drops, 26, "one series per drop reason");
        for line in m.lines().filter(|l| !l.starts_with('#')) {
            let name = line.split(['{', ' ']).next().unwrap();
            assert!(
                !name.contains("nak_") && !name.ends_with("_ns") && !name.contains("_ns_"),
                "a value or an abbreviated unit in a name: {line}"
            );
            let v: f64 = line.rsplit_once(' ').unwrap().1.parse().unwrap();
            assert!(v > 0.0, "every family of the test page is non-zero: {line}");
        }
    }

    #[test]
    fn every_pipeline_counter_is_exported_once() {
        let names: Vec<&str> = TranslatorCounters::INFO.iter().map(|i| i.name).collect();
        for g in COUNTER_GROUPS {
            for (c, _) in g.members {
                assert!(names.contains(c), "{c} is no counter");
            }
        }
        for n in names {
            let groups = COUNTER_GROUPS
                .iter()
                .filter(|g| g.members.iter().any(|(c, _)| *c == n))
                .count();
            assert!(groups <= 1, "{n} in {groups} groups");
            // A new drop_* counter is a new drop reason, not a new family.
            if n.starts_with("drop_") {
                assert_eq!(
                    CounterGroup::find(COUNTER_GROUPS, n).unwrap().family,
                    "drops"
                );
            }
        }
    }

    #[test]
    fn every_family_is_in_the_readme() {
        let readme = include_str!("../../README.md");
        for line in page().lines() {
            let Some(rest) = line.strip_prefix("# TYPE ") else {
                continue;
            };
            let name = rest.split(' ').next().unwrap();
            let documented = match name.strip_prefix("dta_translator_") {
                // Listed as `cm_<counter>_total`.
                Some(short) if short.starts_with("cm_") => true,
                Some(short) => readme.contains(&format!("`{short}`")),
                None => readme.contains(name),
            };
            assert!(documented, "{name} is not in translator/README.md");
        }
    }

    #[test]
    fn promtool_accepts_the_page() {
        // The test page, and the page as served (this process's figures from /proc).
        let live = render(&snapshots());
        assert!(live.contains("\nprocess_open_fds "), "{live}");
        promtool_check(&page());
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
