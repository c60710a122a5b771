//! `/metrics` (Prometheus text format) and `/stats` (JSON) for the translator, served from the
//! snapshots the workers publish; never touches a worker's state directly.

use std::net::SocketAddrV4;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use dta_proto::stats::{PromKind, PromWriter};

use crate::datapath::stats::TranslatorCounters;
use crate::run::WorkerSnapshot;

/// Renders the Prometheus document for a set of worker snapshots.
pub fn render(snaps: &[WorkerSnapshot]) -> String {
    let mut w = PromWriter::new();
    let rows: Vec<dta_proto::stats::PromRow<'_>> = snaps
        .iter()
        .enumerate()
        .map(|(i, s)| (vec![("worker", i.to_string())], s.counters.values()))
        .collect();
    w.counter_families("dta_translator", TranslatorCounters::INFO, rows);
    type QpField = (
        &'static str,
        &'static str,
        PromKind,
        fn(&crate::datapath::qp::QpStats) -> f64,
    );
    const NS: f64 = 1e-9;
    let fields: [QpField; 24] = [
        (
            "qp_frames",
            "New RoCEv2 frames on the QP (PSNs taken, probes included).",
            PromKind::Counter,
            |q| q.frames as f64,
        ),
        ("qp_acks", "ACKs received.", PromKind::Counter, |q| {
            q.acks as f64
        }),
        (
            "qp_nak_sequence",
            "NAK PSN sequence error received.",
            PromKind::Counter,
            |q| q.nak_seq as f64,
        ),
        ("qp_nak_rnr", "RNR NAKs received.", PromKind::Counter, |q| {
            q.nak_rnr as f64
        }),
        (
            "qp_nak_access",
            "NAK remote access error received.",
            PromKind::Counter,
            |q| q.nak_access as f64,
        ),
        (
            "qp_nak_invalid",
            "NAK invalid request received.",
            PromKind::Counter,
            |q| q.nak_invalid as f64,
        ),
        (
            "qp_nak_other",
            "Other NAKs received.",
            PromKind::Counter,
            |q| q.nak_other as f64,
        ),
        (
            "qp_psn_skipped",
            "Frames lost because they left the retransmission ring before they could be resent \
             (each replaced on the wire by a zero-length WRITE at its PSN).",
            PromKind::Counter,
            |q| q.psn_skipped as f64,
        ),
        (
            "qp_retransmitted_frames",
            "Frames sent again, unchanged, from the QP's retransmission ring.",
            PromKind::Counter,
            |q| q.retransmitted_frames as f64,
        ),
        (
            "qp_retransmit_events",
            "Retransmissions started: go-back-N passes from the PSN the collector named, and \
             resends of the oldest unconfirmed frame after an unanswered probe.",
            PromKind::Counter,
            |q| q.retransmit_events as f64,
        ),
        (
            "qp_retx_overruns",
            "Go-back-N passes that found frames gone from the retransmission ring (counted in \
             qp_psn_skipped).",
            PromKind::Counter,
            |q| q.retx_overruns as f64,
        ),
        (
            "qp_noops_in_place",
            "Zero-length WRITEs sent after a timeout at the oldest unconfirmed PSN, whose frame \
             had left the retransmission ring: each replaced that frame (its data lost) or was \
             a duplicate.",
            PromKind::Counter,
            |q| q.noops_in_place as f64,
        ),
        (
            "qp_ack_timeouts",
            "Retransmission timeouts (an answer was due and none came).",
            PromKind::Counter,
            |q| q.ack_timeouts as f64,
        ),
        (
            "qp_probes",
            "Fresh frames sent with AckReq to ask where the collector stands (zero-length \
             probes, queued frames sent ahead of the window).",
            PromKind::Counter,
            |q| q.probes as f64,
        ),
        (
            "qp_stale_responses",
            "Responses matching no outstanding state.",
            PromKind::Counter,
            |q| q.stale_responses as f64,
        ),
        (
            "qp_recoveries",
            "Recoveries completed (from the first sign of loss to the answer showing the \
             collector caught up).",
            PromKind::Counter,
            |q| q.recoveries as f64,
        ),
        (
            "qp_recovery_seconds",
            "Total duration of the recoveries.",
            PromKind::Counter,
            |q| q.recovery_ns_total as f64 * NS,
        ),
        (
            "qp_recovery_max_seconds",
            "Longest recovery since the QP was connected.",
            PromKind::Gauge,
            |q| q.recovery_ns_max as f64 * NS,
        ),
        (
            "qp_loss_events",
            "Loss events (each halved the send window).",
            PromKind::Counter,
            |q| q.loss_events as f64,
        ),
        (
            "qp_window_frames",
            "The send window in frames (0: unlimited, no loss seen).",
            PromKind::Gauge,
            |q| q.window as f64,
        ),
        (
            "qp_queued_frames",
            "Frames waiting in the QP to be sent.",
            PromKind::Gauge,
            |q| q.queued as f64,
        ),
        (
            "qp_rtt_samples",
            "Round-trip samples feeding the adaptive retransmission timeout.",
            PromKind::Counter,
            |q| q.rtt_samples as f64,
        ),
        (
            "qp_srtt_seconds",
            "Smoothed round-trip time.",
            PromKind::Gauge,
            |q| q.srtt_ns as f64 * NS,
        ),
        (
            "qp_silence_max_seconds",
            "Longest time without any ACK or NAK while one was due, that ended in an answer.",
            PromKind::Gauge,
            |q| q.silence_ns_max as f64 * NS,
        ),
    ];
    for (name, help, kind, f) in fields {
        for (wi, s) in snaps.iter().enumerate() {
            for (store, qpn, q) in &s.qps {
                let (ws, qs) = (wi.to_string(), format!("{qpn:#x}"));
                w.sample(
                    kind,
                    &format!("dta_translator_{name}"),
                    help,
                    &[("worker", &ws), ("store", store), ("qpn", &qs)],
                    f(q),
                );
            }
        }
    }
    type Field = (
        &'static str,
        &'static str,
        fn(&WorkerSnapshot) -> u64,
        PromKind,
    );
    let gauges: [Field; 5] = [
        (
            "dta_translator_pending_reports",
            "Reports held in Append batches, postcard caches and the backlog.",
            |s| s.pending,
            PromKind::Gauge,
        ),
        (
            "dta_translator_socket_drops",
            "Datagrams the kernel or NIC ring dropped before the worker saw them.",
            |s| s.socket_drops,
            PromKind::Counter,
        ),
        (
            "dta_translator_rx_ios",
            "Receive calls that returned data (batching: fewer than datagrams).",
            |s| s.rx_ios,
            PromKind::Counter,
        ),
        (
            "dta_translator_tx_ios",
            "Transmit calls.",
            |s| s.tx_ios,
            PromKind::Counter,
        ),
        (
            "dta_translator_tx_errors",
            "Frames the kernel refused to send.",
            |s| s.tx_errors,
            PromKind::Counter,
        ),
    ];
    for (name, help, f, kind) in gauges {
        for (wi, s) in snaps.iter().enumerate() {
            let ws = wi.to_string();
            w.sample(kind, name, help, &[("worker", &ws)], f(s) as f64);
        }
    }
    for (wi, s) in snaps.iter().enumerate() {
        let ws = wi.to_string();
        w.sample(
            PromKind::Counter,
            "dta_translator_reconnects",
            "RDMA_CM reconnections started after a QP broke.",
            &[("worker", &ws)],
            s.reconnects as f64,
        );
    }
    let rows: Vec<dta_proto::stats::PromRow<'_>> = snaps
        .iter()
        .enumerate()
        .map(|(i, s)| (vec![("worker", i.to_string())], s.cm.values()))
        .collect();
    w.counter_families(
        "dta_translator",
        crate::control::cm::CmClientCounters::INFO,
        rows,
    );
    w.finish()
}

/// Renders `/stats`: merged counters and per-worker details as JSON.
pub fn render_json(snaps: &[WorkerSnapshot]) -> String {
    let mut total = TranslatorCounters::default();
    for s in snaps {
        total.merge(&s.counters);
    }
    let counters: serde_json::Map<String, serde_json::Value> = total
        .iter()
        .map(|(i, v)| (i.name.to_string(), v.into()))
        .collect();
    let workers: Vec<serde_json::Value> = snaps
        .iter()
        .map(|s| {
            serde_json::json!({
                "pending": s.pending,
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

/// A running metrics endpoint.
pub struct MetricsServer {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
    /// The bound address.
    pub addr: SocketAddrV4,
}

impl MetricsServer {
    /// Serves `/metrics` and `/stats` on `addr` from `snapshots`.
    pub fn spawn(
        addr: SocketAddrV4,
        snapshots: Arc<Vec<Mutex<WorkerSnapshot>>>,
    ) -> Result<MetricsServer, String> {
        let server = tiny_http::Server::http(addr)
            .map_err(|e| format!("cannot serve metrics on {addr}: {e}"))?;
        let bound = match server.server_addr() {
            tiny_http::ListenAddr::IP(std::net::SocketAddr::V4(a)) => a,
            _ => addr,
        };
        let stop = Arc::new(AtomicBool::new(false));
        let s2 = stop.clone();
        let thread = std::thread::Builder::new()
            .name("dta-metrics".into())
            .spawn(move || {
                while !s2.load(Ordering::Relaxed) {
                    let Ok(Some(req)) = server.recv_timeout(Duration::from_millis(100)) else {
                        continue;
                    };
                    let snaps: Vec<WorkerSnapshot> = snapshots
                        .iter()
                        .map(|m| m.lock().expect("snapshot lock").clone())
                        .collect();
                    let (body, ctype, code) = match req.url() {
                        "/metrics" => (render(&snaps), "text/plain; version=0.0.4", 200),
                        "/stats" => (render_json(&snaps), "application/json", 200),
                        _ => (
                            "not found: try /metrics or /stats\n".to_string(),
                            "text/plain",
                            404,
                        ),
                    };
                    let header =
                        tiny_http::Header::from_bytes(&b"Content-Type"[..], ctype.as_bytes())
                            .expect("static header");
                    let _ = req.respond(
                        tiny_http::Response::from_string(body)
                            .with_status_code(code)
                            .with_header(header),
                    );
                }
            })
            .map_err(|e| e.to_string())?;
        Ok(MetricsServer {
            stop,
            thread: Some(thread),
            addr: bound,
        })
    }
}

impl Drop for MetricsServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
