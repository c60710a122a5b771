//! The operator interface: an HTTP JSON API and Prometheus `/metrics` on the control port.
//!
//! This is control plane only. It runs in its own threads (`dta-http-N`, plus `dta-epochs`
//! for scheduled Key-Increment resets), reads store memory through the query engine and the
//! RNIC thread's published counter snapshots, and never touches the RNIC thread or takes a
//! lock it holds per packet.
//!
//! | Method and path | Answer |
//! |---|---|
//! | `GET /metrics` | Prometheus text format 0.0.4 |
//! | `GET /stores` | every store: layout, RDMA coordinates, memory bytes, estimates (JSON) |
//! | `GET /query/keywrite/{store}/{key}?n=&threshold=` | plurality (or consensus `threshold`) value |
//! | `GET /query/counter/{store}/{key}?n=` | count-min estimate and the counters |
//! | `GET /query/path/{store}/{flow}?n=&copies=` | the decoded path, empty or conflict |
//! | `GET /tail/{store}/{list}?from=&max=&consumer=` | new Append entries as JSON Lines |
//! | `GET /stats` | RNIC counters (device and per QP), events, uptime (JSON) |
//! | `POST /epoch/{store}` | reset a Key-Increment store's counters, start a new epoch |
//!
//! Keys and flows use the syntax of [`crate::query::keys`]; a 5-tuple's `/PROTO` may stay
//! unescaped (everything after the store name is the key) or be written `%2F`.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::net::SocketAddrV4;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::config::CollectorConfig;
use crate::query::append::{ListReader, Start};
use crate::query::keys::{parse_key, to_hex};
use crate::query::keywrite::{KeyWriteAnswer, Vote};
use crate::query::postcard::PathAnswer;
use crate::rnic::counters::RnicCounters;
use crate::service::Published;
use crate::store::Store;

/// Worker threads serving HTTP requests.
const HTTP_THREADS: usize = 2;
/// Slots sampled per store for occupancy estimates.
const ESTIMATE_SAMPLES: u32 = 1 << 16;
/// Most Append lists per store that get per-list head series in `/metrics`.
const MAX_LIST_SERIES: u32 = 256;
/// Request body bytes read (and discarded: no endpoint takes a body).
const MAX_BODY: u64 = 64 << 10;
/// Most named Append consumers the server keeps cursors for.
const MAX_CONSUMERS: usize = 1024;
/// Most batches one `/tail` request returns.
const MAX_TAIL_BATCHES: usize = 4096;

/// What the HTTP threads share.
pub struct ControlState {
    stores: Vec<Store>,
    published: Arc<Mutex<Published>>,
    config: CollectorConfig,
    roce: SocketAddrV4,
    started: Instant,
    requests: AtomicU64,
    /// Named consumers' cursors, by (store, global list, consumer).
    consumers: Mutex<HashMap<(String, u32, String), ListReader>>,
}

/// The control-plane threads; dropping or [`ControlHandle::stop`] ends them.
pub struct ControlHandle {
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
    addr: Option<SocketAddrV4>,
}

impl ControlHandle {
    /// The address the HTTP server listens on, if it runs.
    pub fn addr(&self) -> Option<SocketAddrV4> {
        self.addr
    }

    /// Stops and joins every control thread.
    pub fn stop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

impl Drop for ControlHandle {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Starts the control plane: the HTTP server if `[collector] control` is set, and the epoch
/// scheduler if any Key-Increment store has `epoch_secs > 0`.
pub fn spawn(
    config: &CollectorConfig,
    stores: &[Store],
    published: Arc<Mutex<Published>>,
    roce: SocketAddrV4,
) -> Result<ControlHandle, String> {
    let stop = Arc::new(AtomicBool::new(false));
    let mut h = ControlHandle {
        stop: stop.clone(),
        threads: Vec::new(),
        addr: None,
    };
    if stores.iter().any(|s| s.epochs.period_secs > 0) {
        let stores: Vec<Store> = stores.to_vec();
        let stop = stop.clone();
        h.threads.push(
            std::thread::Builder::new()
                .name("dta-epochs".into())
                .spawn(move || {
                    while !stop.load(Ordering::Relaxed) {
                        for s in &stores {
                            if let Some(e) = s.epochs.tick(&s.region) {
                                log::info!("store {:?}: epoch {} started", s.name(), e.epoch);
                            }
                        }
                        std::thread::sleep(Duration::from_millis(100));
                    }
                })
                .map_err(|e| e.to_string())?,
        );
    }
    let Some(addr) = config.collector.control else {
        return Ok(h);
    };
    let server = tiny_http::Server::http(addr)
        .map_err(|e| format!("cannot serve the control API on {addr}: {e}"))?;
    let bound = match server.server_addr() {
        tiny_http::ListenAddr::IP(std::net::SocketAddr::V4(a)) => a,
        _ => addr,
    };
    h.addr = Some(bound);
    log::info!("control API on http://{bound}");
    let server = Arc::new(server);
    let state = Arc::new(ControlState {
        stores: stores.to_vec(),
        published,
        config: config.clone(),
        roce,
        started: Instant::now(),
        requests: AtomicU64::new(0),
        consumers: Mutex::new(HashMap::new()),
    });
    for i in 0..HTTP_THREADS {
        let (server, state, stop) = (server.clone(), state.clone(), stop.clone());
        h.threads.push(
            std::thread::Builder::new()
                .name(format!("dta-http-{i}"))
                .spawn(move || {
                    while !stop.load(Ordering::Relaxed) {
                        match server.recv_timeout(Duration::from_millis(100)) {
                            Ok(Some(req)) => serve(&state, req),
                            Ok(None) => {}
                            Err(e) => {
                                log::warn!("control API: {e}");
                                std::thread::sleep(Duration::from_millis(100));
                            }
                        }
                    }
                })
                .map_err(|e| e.to_string())?,
        );
    }
    Ok(h)
}

/// An HTTP answer before it is put on the wire.
#[derive(Debug, Clone, PartialEq)]
pub struct Reply {
    /// Status code.
    pub status: u16,
    /// Content type.
    pub content_type: &'static str,
    /// Extra headers.
    pub headers: Vec<(&'static str, String)>,
    /// Body.
    pub body: String,
}

impl Reply {
    fn json(status: u16, v: Value) -> Reply {
        let mut body = v.to_string();
        body.push('\n');
        Reply {
            status,
            content_type: "application/json",
            headers: Vec::new(),
            body,
        }
    }

    fn error(status: u16, msg: impl Into<String>) -> Reply {
        Reply::json(status, json!({ "error": msg.into() }))
    }
}

fn serve(state: &ControlState, mut req: tiny_http::Request) {
    state.requests.fetch_add(1, Ordering::Relaxed);
    let method = req.method().as_str().to_string();
    let url = req.url().to_string();
    // Drain any body so keep-alive connections stay in sync.
    use std::io::Read as _;
    let _ = std::io::copy(&mut req.as_reader().take(MAX_BODY), &mut std::io::sink());
    let r = handle(state, &method, &url);
    let mut resp = tiny_http::Response::from_string(r.body).with_status_code(r.status);
    if let Ok(h) = tiny_http::Header::from_bytes("Content-Type", r.content_type) {
        resp.add_header(h);
    }
    for (k, v) in r.headers {
        if let Ok(h) = tiny_http::Header::from_bytes(k, v.as_bytes()) {
            resp.add_header(h);
        }
    }
    if let Err(e) = req.respond(resp) {
        log::debug!("control API: response not delivered: {e}");
    }
}

fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let hex = |c: u8| (c as char).to_digit(16);
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' && i + 2 < b.len() {
            if let (Some(h), Some(l)) = (hex(b[i + 1]), hex(b[i + 2])) {
                out.push((h * 16 + l) as u8);
                i += 3;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn query_params(q: &str) -> HashMap<String, String> {
    q.split('&')
        .filter(|p| !p.is_empty())
        .map(|p| match p.split_once('=') {
            Some((k, v)) => (percent_decode(k), percent_decode(v)),
            None => (percent_decode(p), String::new()),
        })
        .collect()
}

fn num<T: std::str::FromStr>(p: &HashMap<String, String>, k: &str) -> Result<Option<T>, Reply> {
    match p.get(k) {
        None => Ok(None),
        Some(v) => v
            .parse()
            .map(Some)
            .map_err(|_| Reply::error(400, format!("parameter {k}={v:?} is not a number"))),
    }
}

/// Routes one request (method, path and query string) to its answer. No I/O.
pub fn handle(state: &ControlState, method: &str, url: &str) -> Reply {
    let (path, q) = url.split_once('?').unwrap_or((url, ""));
    let params = query_params(q);
    let segs: Vec<&str> = path.trim_matches('/').split('/').collect();
    let r = match (method, segs.as_slice()) {
        ("GET", ["metrics"]) => Ok(Reply {
            status: 200,
            content_type: "text/plain; version=0.0.4; charset=utf-8",
            headers: Vec::new(),
            body: metrics(state),
        }),
        ("GET", ["stores"]) => Ok(Reply::json(200, stores_json(state))),
        ("GET", ["stats"]) => Ok(Reply::json(200, stats_json(state))),
        ("GET", ["query", kind, store, rest @ ..]) if !rest.is_empty() => {
            let key = percent_decode(&rest.join("/"));
            query(state, kind, store, &key, &params)
        }
        ("GET", ["tail", store, list]) => tail(state, store, list, &params),
        ("POST", ["epoch", store]) => epoch(state, store),
        (_, ["metrics" | "stores" | "stats"]) | (_, ["query" | "tail" | "epoch", ..]) => {
            Err(Reply::error(405, format!("{method} not allowed on {path}")))
        }
        _ => Err(Reply::error(404, format!("no such endpoint: {path}"))),
    };
    r.unwrap_or_else(|e| e)
}

fn find_store<'a>(state: &'a ControlState, name: &str) -> Result<&'a Store, Reply> {
    let name = percent_decode(name);
    state
        .stores
        .iter()
        .find(|s| s.name() == name)
        .ok_or_else(|| Reply::error(404, format!("no store called {name:?}")))
}

fn query(
    state: &ControlState,
    kind: &str,
    store: &str,
    key: &str,
    p: &HashMap<String, String>,
) -> Result<Reply, Reply> {
    let s = find_store(state, store)?;
    let key_parsed = parse_key(key).map_err(|e| Reply::error(400, e))?;
    let max_n = state.config.collector.max_redundancy;
    let n = num::<u8>(p, "n")?.unwrap_or(max_n).max(1) as usize;
    let wrong_kind = || {
        Reply::error(
            400,
            format!("store {:?} is a {} store", s.name(), s.meta.kind.name()),
        )
    };
    let base = json!({ "store": s.name(), "key": to_hex(key_parsed.as_bytes()), "n": n });
    let mut out = base;
    let o = out.as_object_mut().expect("object");
    match kind {
        "keywrite" => {
            let v = s.keywrite().ok_or_else(wrong_kind)?;
            let vote = match num::<u8>(p, "threshold")? {
                Some(t) => Vote::Consensus(t),
                None => Vote::Plurality,
            };
            match v.query(&key_parsed, n, vote) {
                KeyWriteAnswer::Value {
                    value,
                    votes,
                    matches,
                } => {
                    o.insert("result".into(), "value".into());
                    o.insert("value".into(), to_hex(value.as_bytes()).into());
                    o.insert("votes".into(), votes.into());
                    o.insert("matches".into(), matches.into());
                }
                KeyWriteAnswer::Empty => {
                    o.insert("result".into(), "empty".into());
                    o.insert("matches".into(), 0.into());
                }
                KeyWriteAnswer::Conflict {
                    matches,
                    best_votes,
                } => {
                    o.insert("result".into(), "conflict".into());
                    o.insert("matches".into(), matches.into());
                    o.insert("votes".into(), best_votes.into());
                }
            }
        }
        "counter" => {
            let v = s.counter().ok_or_else(wrong_kind)?;
            let a = v.query(&key_parsed, n);
            o.insert("estimate".into(), a.estimate.into());
            o.insert("counters".into(), json!(a.counters()));
            o.insert("epoch".into(), json!(s.epochs.info()));
        }
        "path" => {
            let v = s.postcard().ok_or_else(wrong_kind)?;
            if v.values.is_empty() {
                return Err(Reply::error(
                    409,
                    format!(
                        "store {:?} has no value set: configure values = [[lo, hi], ...]",
                        s.name()
                    ),
                ));
            }
            let store_n = s.redundancy().map_or(1, |n| n.get());
            let n = num::<u8>(p, "n")?.unwrap_or(store_n).max(1) as usize;
            o.insert("n".into(), n.into());
            let copies = num::<u8>(p, "copies")?.unwrap_or(1);
            match v.query(&key_parsed, n, copies) {
                PathAnswer::Path { path, copies } => {
                    o.insert("result".into(), "path".into());
                    o.insert("path".into(), json!(path.hops()));
                    o.insert("copies".into(), copies.into());
                }
                PathAnswer::Empty => {
                    o.insert("result".into(), "empty".into());
                }
                PathAnswer::Conflict { valid } => {
                    o.insert("result".into(), "conflict".into());
                    o.insert("valid".into(), valid.into());
                }
            }
        }
        k => {
            return Err(Reply::error(
                404,
                format!("no query kind {k:?} (keywrite, counter, path)"),
            ))
        }
    }
    Ok(Reply::json(200, out))
}

fn tail(
    state: &ControlState,
    store: &str,
    list: &str,
    p: &HashMap<String, String>,
) -> Result<Reply, Reply> {
    let s = find_store(state, store)?;
    let a = s
        .append()
        .ok_or_else(|| Reply::error(400, format!("store {:?} is not an Append store", s.name())))?;
    let id: u32 = list
        .parse()
        .map_err(|_| Reply::error(400, format!("list {list:?} is not a number")))?;
    let local = a.local_list(id).ok_or_else(|| {
        Reply::error(
            404,
            format!(
                "store {:?} holds lists {}..{}",
                s.name(),
                a.first_list,
                a.first_list as u64 + a.lists as u64
            ),
        )
    })?;
    let max = num::<usize>(p, "max")?
        .unwrap_or(MAX_TAIL_BATCHES)
        .clamp(1, MAX_TAIL_BATCHES);
    let base = a.list_offset(local);
    let start = match p.get("from").map(String::as_str) {
        None | Some("oldest") => Start::Oldest,
        Some("newest") => Start::Newest,
        Some(v) => Start::Seq(v.parse().map_err(|_| {
            Reply::error(
                400,
                format!("from={v:?}: use a batch number, oldest or newest"),
            )
        })?),
    };
    let consumer = p.get("consumer").cloned().or_else(|| {
        // The reference format has no sequence numbers, so its cursor must live here.
        (a.layout.format() == dta_proto::layout::AppendFormat::Reference).then(|| "_http".into())
    });
    let mut body = String::new();
    let mut emit = |seq: u64, e: &[u8]| {
        let _ = writeln!(
            body,
            "{}",
            json!({ "list": id, "seq": seq, "entry": to_hex(e) })
        );
    };
    let (next, lost, head) = match consumer {
        Some(c) => {
            let mut m = state.consumers.lock().expect("consumers lock");
            let k = (s.name().to_string(), id, c);
            if m.len() >= MAX_CONSUMERS && !m.contains_key(&k) {
                return Err(Reply::error(
                    409,
                    format!("too many named consumers (at most {MAX_CONSUMERS})"),
                ));
            }
            let r = m
                .entry(k)
                .or_insert_with(|| ListReader::new(&s.region, a.layout, base, start));
            let st = r.poll(&s.region, max, &mut emit);
            (r.next_seq(), st.lost_batches, r.newest_seq(&s.region))
        }
        None => {
            let mut r = ListReader::new(&s.region, a.layout, base, start);
            let st = r.poll(&s.region, max, &mut emit);
            (r.next_seq(), st.lost_batches, r.newest_seq(&s.region))
        }
    };
    Ok(Reply {
        status: 200,
        content_type: "application/x-ndjson",
        headers: vec![
            ("X-Dta-Next-Seq", next.to_string()),
            ("X-Dta-Lost-Batches", lost.to_string()),
            ("X-Dta-Head-Seq", head.to_string()),
        ],
        body,
    })
}

fn epoch(state: &ControlState, store: &str) -> Result<Reply, Reply> {
    let s = find_store(state, store)?;
    if s.counter().is_none() {
        return Err(Reply::error(
            400,
            format!("store {:?} is not a Key-Increment store", s.name()),
        ));
    }
    let e = s.epochs.reset(&s.region);
    log::info!("store {:?}: epoch {} started on demand", s.name(), e.epoch);
    Ok(Reply::json(200, json!({ "store": s.name(), "epoch": e })))
}

fn stores_json(state: &ControlState) -> Value {
    let n = state.config.collector.max_redundancy;
    Value::Array(
        state
            .stores
            .iter()
            .map(|s| {
                let mut v = json!({
                    "name": s.name(),
                    "kind": s.meta.kind.name(),
                    "port": s.port,
                    "region_bytes": s.meta.len,
                    "memory_bytes": s.memory_bytes(),
                    "backing": s.region.backing().to_string(),
                    "meta": s.meta,
                    "estimate": s.estimate(ESTIMATE_SAMPLES, n),
                });
                if s.counter().is_some() {
                    v["epoch"] = json!(s.epochs.info());
                }
                if s.postcard().is_some() {
                    v["values"] = json!(s.values.ranges());
                    v["redundancy"] = json!(s.redundancy().map_or(1, |n| n.get()));
                }
                v
            })
            .collect(),
    )
}

fn counters_json(c: &RnicCounters) -> Value {
    Value::Object(
        c.iter()
            .map(|(i, v)| (i.name.to_string(), v.into()))
            .collect(),
    )
}

fn stats_json(state: &ControlState) -> Value {
    let p = state.published.lock().expect("publisher lock");
    json!({
        "roce": state.roce.to_string(),
        "uptime_seconds": state.started.elapsed().as_secs_f64(),
        "http_requests": state.requests.load(Ordering::Relaxed),
        "immediate_events": p.immediate_events,
        "rx_bursts": p.rx_bursts,
        "rx_coalesce_waits": p.rx_coalesce_waits,
        "recent_immediate": p.recent_events.iter().rev().filter_map(|c| match c {
            crate::rnic::responder::Completion::WriteWithImm { qpn, imm, len } => {
                Some(json!({ "qpn": qpn.value(), "imm": imm, "len": len }))
            }
            _ => None,
        }).take(16).collect::<Vec<_>>(),
        "rnic": counters_json(&p.counters),
        "cm": p.cm.iter().map(|(i, v)| (i.name.to_string(), Value::from(v))).collect::<serde_json::Map<String, Value>>(),
        "connections": p.connections.iter().map(|(port, peer, qpn, up)| json!({ "port": port, "peer": peer.to_string(), "qpn": qpn, "established": up })).collect::<Vec<_>>(),
        "qps": p.per_qp.iter().map(|(q, c)| json!({ "qpn": q, "counters": counters_json(c) })).collect::<Vec<_>>(),
        "stores": state.stores.iter().map(|s| json!({
            "name": s.name(), "kind": s.meta.kind.name(), "memory_bytes": s.memory_bytes(),
        })).collect::<Vec<_>>(),
    })
}

/// Escapes a label value (backslash, quote, newline).
fn label(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// Escapes help text (backslash, newline).
fn help(v: &str) -> String {
    v.trim().replace('\\', "\\\\").replace('\n', "\\n")
}

/// A metric family being written.
struct Family<'a> {
    out: &'a mut String,
    name: String,
}

fn family<'a>(out: &'a mut String, name: &str, kind: &str, text: &str) -> Family<'a> {
    let name = format!("dta_collector_{name}");
    let _ = writeln!(out, "# HELP {name} {}", help(text));
    let _ = writeln!(out, "# TYPE {name} {kind}");
    Family { out, name }
}

impl Family<'_> {
    fn sample(&mut self, labels: &[(&str, &str)], v: f64) {
        let _ = write!(self.out, "{}", self.name);
        if !labels.is_empty() {
            self.out.push('{');
            for (i, (k, val)) in labels.iter().enumerate() {
                if i > 0 {
                    self.out.push(',');
                }
                let _ = write!(self.out, "{k}=\"{}\"", label(val));
            }
            self.out.push('}');
        }
        if v.is_finite() {
            let _ = writeln!(self.out, " {v}");
        } else if v.is_nan() {
            let _ = writeln!(self.out, " NaN");
        } else {
            let _ = writeln!(self.out, " {}Inf", if v > 0.0 { "+" } else { "-" });
        }
    }
}

/// Picks one figure out of an estimate.
type EstimateField = fn(&crate::query::estimate::Estimate) -> f64;

/// The `/metrics` page (Prometheus text exposition format 0.0.4).
pub fn metrics(state: &ControlState) -> String {
    let (counters, per_qp, imm, cm, conns, wakes) = {
        let p = state.published.lock().expect("publisher lock");
        (
            p.counters,
            p.per_qp.clone(),
            p.immediate_events,
            p.cm,
            p.connections.len(),
            (p.rx_bursts, p.rx_coalesce_waits),
        )
    };
    let mut out = String::with_capacity(16 << 10);
    for (i, info) in RnicCounters::INFO.iter().enumerate() {
        let mut f = family(
            &mut out,
            &format!("rnic_{}_total", info.name),
            "counter",
            info.help,
        );
        f.sample(&[], counters.values()[i] as f64);
    }
    for (i, info) in RnicCounters::INFO.iter().enumerate() {
        let mut f = family(
            &mut out,
            &format!("qp_{}_total", info.name),
            "counter",
            &format!("Per queue pair: {}", info.help.trim()),
        );
        for (qpn, c) in &per_qp {
            let q = format!("{qpn:#x}");
            f.sample(&[("qpn", &q)], c.values()[i] as f64);
        }
    }
    family(
        &mut out,
        "immediate_events_total",
        "counter",
        "WRITE with Immediate completions turned into events (the papers' push notifications).",
    )
    .sample(&[], imm as f64);
    family(
        &mut out,
        "rnic_rx_bursts_total",
        "counter",
        "Receive calls of the software RNIC that returned packets (one wake-up each).",
    )
    .sample(&[], wakes.0 as f64);
    family(
        &mut out,
        "rnic_rx_coalesce_waits_total",
        "counter",
        "Waits of [rnic] rx_coalesce_us after a short receive (receive interrupt moderation).",
    )
    .sample(&[], wakes.1 as f64);
    for (i, info) in crate::rnic::cm::CmCounters::INFO.iter().enumerate() {
        let mut f = family(
            &mut out,
            &format!("{}_total", info.name),
            "counter",
            info.help,
        );
        f.sample(&[], cm.values()[i] as f64);
    }
    family(
        &mut out,
        "cm_connections",
        "gauge",
        "RDMA_CM connections (half-open and established).",
    )
    .sample(&[], conns as f64);
    let n = state.config.collector.max_redundancy;
    let est: Vec<_> = state
        .stores
        .iter()
        .map(|s| s.estimate(ESTIMATE_SAMPLES, n))
        .collect();
    let mut f = family(
        &mut out,
        "store_memory_bytes",
        "gauge",
        "Memory mapped for the store's region (page-rounded).",
    );
    for s in &state.stores {
        let b = s.region.backing().to_string();
        f.sample(
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
    for (name, text, get) in gauges {
        let mut f = family(&mut out, name, "gauge", text);
        for (s, e) in state.stores.iter().zip(&est) {
            f.sample(&[("store", s.name()), ("kind", s.meta.kind.name())], get(e));
        }
    }
    let mut f = family(
        &mut out,
        "append_head_seq",
        "gauge",
        "Newest batch sequence number written to an Append list (first 256 lists of a store).",
    );
    for s in &state.stores {
        if let Some(a) = s.append() {
            for l in 0..a.lists.min(MAX_LIST_SERIES) {
                let r = ListReader::new(&s.region, a.layout, a.list_offset(l), Start::Seq(1));
                let id = (a.first_list as u64 + l as u64).to_string();
                f.sample(
                    &[("store", s.name()), ("list", &id)],
                    r.newest_seq(&s.region) as f64,
                );
            }
        }
    }
    let consumers: Vec<(String, u32, String, u64, u64, u64)> = {
        let m = state.consumers.lock().expect("consumers lock");
        m.iter()
            .filter_map(|((st, l, c), r)| {
                let s = state.stores.iter().find(|s| s.name() == st)?;
                Some((
                    st.clone(),
                    *l,
                    c.clone(),
                    r.lag(&s.region),
                    r.lost_batches,
                    r.delivered,
                ))
            })
            .collect()
    };
    for (name, kind, text, idx) in [
        (
            "append_reader_lag_batches",
            "gauge",
            "Batches written but not yet read by a named consumer.",
            0,
        ),
        (
            "append_reader_lost_batches_total",
            "counter",
            "Batches a named consumer lost to overruns.",
            1,
        ),
        (
            "append_reader_entries_total",
            "counter",
            "Entries delivered to a named consumer.",
            2,
        ),
    ] {
        let mut f = family(&mut out, name, kind, text);
        for (st, l, c, lag, lost, del) in &consumers {
            let id = l.to_string();
            let v = [*lag, *lost, *del][idx];
            f.sample(&[("store", st), ("list", &id), ("consumer", c)], v as f64);
        }
    }
    let epoch_stores: Vec<_> = state
        .stores
        .iter()
        .filter(|s| s.counter().is_some())
        .collect();
    for (name, kind, text) in [
        ("epoch", "gauge", "Current epoch of a Key-Increment store."),
        (
            "epoch_start_timestamp_seconds",
            "gauge",
            "Unix time the current epoch started.",
        ),
        ("epoch_resets_total", "counter", "Counter resets performed."),
        (
            "epoch_period_seconds",
            "gauge",
            "Scheduled reset period (0: on demand only).",
        ),
    ] {
        let mut f = family(&mut out, name, kind, text);
        for s in &epoch_stores {
            let i = s.epochs.info();
            let v = match name {
                "epoch" => i.epoch as f64,
                "epoch_start_timestamp_seconds" => i.started_unix_ms as f64 / 1000.0,
                "epoch_resets_total" => i.resets as f64,
                _ => i.period_secs as f64,
            };
            f.sample(&[("store", s.name())], v);
        }
    }
    family(
        &mut out,
        "http_requests_total",
        "counter",
        "Control API requests served.",
    )
    .sample(&[], state.requests.load(Ordering::Relaxed) as f64);
    family(
        &mut out,
        "uptime_seconds",
        "gauge",
        "Seconds since the control API started.",
    )
    .sample(&[], state.started.elapsed().as_secs_f64());
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn state() -> ControlState {
        let config = CollectorConfig::from_toml(
            r#"
[collector]
hugepages = false
[[store]]
name = "kw"
kind = "keywrite"
slots = 16
[[store]]
name = "ki"
kind = "keyincrement"
slots = 16
[[store]]
name = "ap"
kind = "append"
lists = 2
capacity = 4
batch = 2
[[store]]
name = "ap-ref"
kind = "append"
lists = 1
first_list = 2
capacity = 4
batch = 2
format = "reference"
[[store]]
name = "pc"
kind = "postcard"
chunks = 16
values = [[1, 9]]
"#,
        )
        .unwrap();
        let mut rnic =
            crate::rnic::responder::Responder::new(crate::rnic::responder::DeviceConfig::default());
        let stores = crate::store::build_stores(&config, &mut rnic).unwrap();
        ControlState {
            stores,
            published: Arc::new(Mutex::new(Published::default())),
            config,
            roce: "127.0.0.1:4791".parse().unwrap(),
            started: Instant::now(),
            requests: AtomicU64::new(0),
            consumers: Mutex::new(HashMap::new()),
        }
    }

    #[test]
    fn routes_and_statuses() {
        let st = state();
        for (m, u, want) in [
            ("GET", "/stores", 200),
            ("GET", "/stats", 200),
            ("GET", "/metrics", 200),
            ("GET", "/query/keywrite/kw/00", 200),
            ("GET", "/query/keywrite/kw/1.2.3.4:1-5.6.7.8:2/udp", 200),
            (
                "GET",
                "/query/keywrite/kw/1.2.3.4:1-5.6.7.8:2%2Fudp?n=2&threshold=1",
                200,
            ),
            ("GET", "/query/counter/ki/00?n=9", 200),
            ("GET", "/query/path/pc/00", 200),
            ("GET", "/tail/ap/1?from=newest", 200),
            ("GET", "/tail/ap-ref/2", 200),
            ("POST", "/epoch/ki", 200),
            ("GET", "/query/keywrite/kw/00?n=300", 400),
            ("GET", "/query/path/kw/00", 400),
            ("GET", "/tail/ap/2", 404),
            ("GET", "/tail/ap/x", 400),
            ("GET", "/tail/ap/1?from=soon", 400),
            ("POST", "/epoch/kw", 400),
            ("GET", "/query/nope/kw/00", 404),
            ("DELETE", "/stores", 405),
            ("GET", "/", 404),
        ] {
            let r = handle(&st, m, u);
            assert_eq!(r.status, want, "{m} {u}: {}", r.body);
        }
        assert!(handle(&st, "GET", "/metrics")
            .body
            .contains("# TYPE dta_collector_epoch gauge"));
    }

    proptest! {
        #[test]
        fn any_request_gets_an_answer(method in "GET|POST|PUT|[A-Z]{0,8}",
                                      url in "/[a-z/%0-9.:?=&-]{0,60}|\\PC{0,80}") {
            let st = state();
            let r = handle(&st, &method, &url);
            prop_assert!([200, 400, 404, 405, 409].contains(&r.status), "{} {}", r.status, r.body);
        }
    }

    #[test]
    fn percent_decoding() {
        assert_eq!(percent_decode("a%2Fb%2fc"), "a/b/c");
        assert_eq!(percent_decode("%zz%2"), "%zz%2");
        assert_eq!(percent_decode("%"), "%");
        let p = query_params("n=2&threshold=1&x");
        assert_eq!(p["n"], "2");
        assert_eq!(p["x"], "");
    }

    #[test]
    fn label_and_help_escaping() {
        assert_eq!(label("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
        assert_eq!(help(" x\\y\n"), "x\\\\y");
    }
}
