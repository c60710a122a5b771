//! Querying a collector cluster as one system: the client behind `dta-collector cluster` and
//! its HTTP gateway.
//!
//! A [`ClusterClient`] reads the cluster file ([`dta_proto::cluster`], the same partitioning
//! the translators route by) and sends each key to the collector that holds it, through that
//! collector's control API. A bulk query is split by owner and fanned out with one thread (and
//! one bulk request) per collector, never one per key; the answers are put back in the order
//! of the keys, each marked with the collector and cluster epoch it came from.
//!
//! # Epochs
//! Resharding changes the partitioning at an epoch boundary; the old epoch's data stays where
//! it was written. A query for epoch E (`cluster_epoch=E`) asks E's owner only. By default a
//! query asks the newest epoch's owner, then falls back epoch by epoch to older owners:
//! Key-Write and Postcarding take the first owner that has an answer (newer data first),
//! Key-Increment adds up the counters of every distinct owner (a key's count is split where
//! it was counted), and an Append list is read from each of its owners, oldest first.
//!
//! # Gateway
//! [`Gateway::handle`] answers the single collector's query endpoints (`/query/...`,
//! `/tail/...`, `/query/sketch/...`) from the cluster, plus `/cluster` (the partitioning),
//! `/stores` and `/stats` (every collector's, by name) and `/metrics` (its own counters and
//! fan-out latency, Prometheus text format).

use std::collections::HashMap;
use std::fmt::Write as _;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Instant;

use serde_json::{json, Value};

use crate::client::Endpoint;
use crate::http::MAX_BULK_KEYS;
use crate::query::keys::{parse_key, to_hex};
use dta_proto::cluster::{Cluster, Partition};
use dta_proto::stats::{PromKind, PromWriter};

/// Reads and validates a cluster file; relative `metadata` paths are taken relative to its
/// folder.
pub fn load_cluster(path: &Path) -> Result<Cluster, String> {
    let s = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut c = Cluster::from_toml(&s).map_err(|e| format!("{}: {e}", path.display()))?;
    c.resolve_paths(path.parent().unwrap_or(Path::new(".")));
    Ok(c)
}

/// A key query kind, as in the control API's paths.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyQuery {
    /// `keywrite`: Key-Write value.
    KeyWrite,
    /// `counter`: Key-Increment estimate.
    Counter,
    /// `path`: Postcarding path.
    Path,
}

impl KeyQuery {
    /// From the path segment.
    pub fn parse(s: &str) -> Option<KeyQuery> {
        match s {
            "keywrite" => Some(KeyQuery::KeyWrite),
            "counter" => Some(KeyQuery::Counter),
            "path" => Some(KeyQuery::Path),
            _ => None,
        }
    }

    /// The path segment.
    pub fn name(self) -> &'static str {
        match self {
            KeyQuery::KeyWrite => "keywrite",
            KeyQuery::Counter => "counter",
            KeyQuery::Path => "path",
        }
    }

    /// The cluster's store of this kind.
    fn store(self, c: &Cluster) -> Option<&str> {
        match self {
            KeyQuery::KeyWrite => c.stores.keywrite.as_deref(),
            KeyQuery::Counter => c.stores.keyincrement.as_deref(),
            KeyQuery::Path => c.stores.postcard.as_deref(),
        }
    }
}

/// Fan-out latency histogram bucket bounds (seconds).
const BUCKETS: [f64; 10] = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0, 5.0];

/// What the client counts, for the gateway's `/metrics`.
#[derive(Debug, Default)]
pub struct ClusterMetrics {
    /// Per collector (cluster order): requests, keys asked, errors.
    requests: Vec<AtomicU64>,
    keys: Vec<AtomicU64>,
    errors: Vec<AtomicU64>,
    /// Fan-outs: histogram bucket counts (cumulative at render), count, sum (ns).
    buckets: [AtomicU64; BUCKETS.len()],
    fanouts: AtomicU64,
    fanout_ns: AtomicU64,
    /// Gateway requests by endpoint and status class.
    http: Mutex<HashMap<(&'static str, u16), u64>>,
}

impl ClusterMetrics {
    fn new(collectors: usize) -> ClusterMetrics {
        let v = || (0..collectors).map(|_| AtomicU64::new(0)).collect();
        ClusterMetrics {
            requests: v(),
            keys: v(),
            errors: v(),
            ..ClusterMetrics::default()
        }
    }

    fn fanout(&self, t: f64) {
        if let Some(i) = BUCKETS.iter().position(|&b| t <= b) {
            self.buckets[i].fetch_add(1, Ordering::Relaxed);
        }
        self.fanouts.fetch_add(1, Ordering::Relaxed);
        self.fanout_ns
            .fetch_add((t * 1e9) as u64, Ordering::Relaxed);
    }
}

/// A client of every collector of a cluster.
pub struct ClusterClient {
    cluster: Arc<Cluster>,
    endpoints: Vec<Option<Endpoint>>,
    metrics: Arc<ClusterMetrics>,
}

/// One key's place in a bulk query: its index in the request and its hex form.
type Asked = (usize, String);

impl ClusterClient {
    /// A client of `cluster`'s collectors (plain HTTP to each `control` address).
    pub fn new(cluster: Cluster) -> ClusterClient {
        let endpoints = cluster
            .collectors
            .iter()
            .map(|c| c.control.as_deref().map(Endpoint::plain))
            .collect();
        let metrics = Arc::new(ClusterMetrics::new(cluster.collectors.len()));
        ClusterClient {
            cluster: Arc::new(cluster),
            endpoints,
            metrics,
        }
    }

    /// Sends `token` (an admin bearer token; it also satisfies basic auth) to every collector.
    pub fn with_token(mut self, token: Option<String>) -> ClusterClient {
        for e in self.endpoints.iter_mut().flatten() {
            e.token = token.clone();
        }
        self
    }

    /// The cluster.
    pub fn cluster(&self) -> &Cluster {
        &self.cluster
    }

    /// The client's counters.
    pub fn metrics(&self) -> &ClusterMetrics {
        &self.metrics
    }

    fn endpoint(&self, c: usize) -> Result<&Endpoint, String> {
        self.endpoints[c].as_ref().ok_or_else(|| {
            format!(
                "collector {:?} has no `control` address in the cluster file",
                self.cluster.collectors[c].endpoint.name
            )
        })
    }

    /// The partitions a query consults, newest first: epoch `e` only, or every epoch.
    fn partitions(&self, epoch: Option<u32>) -> Result<Vec<&Partition>, String> {
        match epoch {
            Some(e) => {
                let p = self.cluster.epoch(e).ok_or_else(|| {
                    let known: Vec<u32> = self.cluster.epochs.iter().map(|p| p.number).collect();
                    format!("cluster epoch {e} is not in the cluster file (epochs {known:?})")
                })?;
                Ok(vec![p])
            }
            None => Ok(self.cluster.history(self.cluster.epoch).collect()),
        }
    }

    /// Runs `job(collector, items)` for every collector with items, one thread each, and
    /// returns what each produced (in collector order). Counts requests, errors and the
    /// fan-out's latency.
    fn fan_out<T: Sync, R: Send>(
        &self,
        work: Vec<Vec<T>>,
        job: impl Fn(usize, &[T]) -> Result<R, String> + Sync,
    ) -> Vec<Option<Result<R, String>>> {
        let t0 = Instant::now();
        let out = std::thread::scope(|s| {
            let handles: Vec<_> = work
                .iter()
                .enumerate()
                .map(|(c, items)| {
                    (!items.is_empty()).then(|| {
                        let job = &job;
                        s.spawn(move || job(c, items))
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| {
                    h.map(|h| {
                        h.join()
                            .unwrap_or_else(|_| Err("query thread panicked".into()))
                    })
                })
                .collect::<Vec<_>>()
        });
        for (c, (items, r)) in work.iter().zip(&out).enumerate() {
            if r.is_some() {
                self.metrics.requests[c].fetch_add(1, Ordering::Relaxed);
                self.metrics.keys[c].fetch_add(items.len() as u64, Ordering::Relaxed);
            }
            if matches!(r, Some(Err(_))) {
                self.metrics.errors[c].fetch_add(1, Ordering::Relaxed);
            }
        }
        self.metrics.fanout(t0.elapsed().as_secs_f64());
        out
    }

    /// Asks collector `c` about `keys` (hex) in bulk: one answer per key, in order.
    fn bulk(
        &self,
        c: usize,
        kind: KeyQuery,
        store: &str,
        params: &str,
        keys: &[Asked],
    ) -> Result<Vec<Value>, String> {
        let ep = self.endpoint(c)?;
        let name = &self.cluster.collectors[c].endpoint.name;
        let mut out = Vec::with_capacity(keys.len());
        for chunk in keys.chunks(MAX_BULK_KEYS) {
            let body: String = chunk.iter().map(|(_, k)| format!("{k}\n")).collect();
            let path = format!("/query/{}/{store}{params}", kind.name());
            let r = ep.request_with_body("POST", &path, body.as_bytes())?;
            if r.status != 200 {
                return Err(format!(
                    "collector {name:?}: POST {path}: {} {}",
                    r.status,
                    r.body.trim()
                ));
            }
            for line in r.body.lines().filter(|l| !l.trim().is_empty()) {
                out.push(
                    serde_json::from_str(line)
                        .map_err(|e| format!("collector {name:?}: bad answer line: {e}"))?,
                );
            }
        }
        if out.len() != keys.len() {
            return Err(format!(
                "collector {name:?}: {} answers for {} keys",
                out.len(),
                keys.len()
            ));
        }
        Ok(out)
    }

    /// Answers `kind` for every key (the control API's key syntax), in order: each answer is
    /// the owning collector's, with `"collector"` and `"cluster_epoch"` added; a key that does
    /// not parse gets `{"input", "error"}`. `params` is passed on to the collectors
    /// (`?n=2&threshold=1`, or empty). See the module docs for `epoch`.
    pub fn query(
        &self,
        kind: KeyQuery,
        keys: &[String],
        epoch: Option<u32>,
        params: &str,
    ) -> Result<Vec<Value>, String> {
        let store = kind
            .store(&self.cluster)
            .ok_or_else(|| format!("the cluster names no {} store", kind.name()))?
            .to_string();
        let parts = self.partitions(epoch)?;
        let mut answers: Vec<Option<Value>> = vec![None; keys.len()];
        let mut parsed: Vec<(usize, Vec<u8>)> = Vec::with_capacity(keys.len());
        for (i, k) in keys.iter().enumerate() {
            match parse_key(k) {
                Ok(key) => parsed.push((i, key.as_bytes().to_vec())),
                Err(e) => answers[i] = Some(json!({ "input": k, "error": e })),
            }
        }
        // Counters: the parts found so far, per key. Others: whether an owner found the key
        // (the newest owner's "empty" stands until an older owner finds it).
        let mut counter_parts: Vec<Vec<Value>> = vec![Vec::new(); keys.len()];
        let mut settled = vec![false; keys.len()];
        let mut asked: Vec<Vec<usize>> = vec![Vec::new(); keys.len()];
        let n = self.cluster.collectors.len();
        for p in &parts {
            let mut work: Vec<Vec<Asked>> = (0..n).map(|_| Vec::new()).collect();
            for (i, key) in &parsed {
                let Some(owner) = p.key_owner(key) else {
                    continue;
                };
                if settled[*i] || asked[*i].contains(&owner) {
                    continue;
                }
                asked[*i].push(owner);
                work[owner].push((*i, to_hex(key)));
            }
            let results = self.fan_out(work.clone(), |c, items| {
                self.bulk(c, kind, &store, params, items)
            });
            for (c, r) in results.into_iter().enumerate() {
                let Some(r) = r else { continue };
                let lines = r?;
                let name = &self.cluster.collectors[c].endpoint.name;
                for ((i, _), mut v) in work[c].iter().zip(lines) {
                    if let Some(o) = v.as_object_mut() {
                        o.insert("collector".into(), name.clone().into());
                        o.insert("cluster_epoch".into(), p.number.into());
                    }
                    match kind {
                        KeyQuery::Counter => counter_parts[*i].push(v),
                        _ if found(&v) => {
                            answers[*i] = Some(v);
                            settled[*i] = true;
                        }
                        _ if answers[*i].is_none() => answers[*i] = Some(v),
                        _ => {}
                    }
                }
            }
        }
        if kind == KeyQuery::Counter {
            for (i, _) in &parsed {
                answers[*i] = Some(sum_counters(std::mem::take(&mut counter_parts[*i])));
            }
        }
        Ok(answers
            .into_iter()
            .map(|a| a.unwrap_or(Value::Null))
            .collect())
    }

    /// Reads Append list `list` from each collector that owned it (oldest epoch first, or
    /// only epoch `epoch`'s owner): entries as JSON values with `"collector"` added, and the
    /// lost batches the collectors reported. `params` goes to each collector (`?max=...`).
    pub fn tail(
        &self,
        list: u32,
        epoch: Option<u32>,
        params: &str,
    ) -> Result<(Vec<Value>, u64), String> {
        let store = self
            .cluster
            .stores
            .append
            .clone()
            .ok_or("the cluster names no append store")?;
        let mut owners: Vec<(usize, u32)> = Vec::new();
        for p in self.partitions(epoch)?.into_iter().rev() {
            if let Some(c) = p.list_owner(list) {
                if !owners.iter().any(|(o, _)| *o == c) {
                    owners.push((c, p.number));
                }
            }
        }
        if owners.is_empty() {
            return Err(format!("no collector holds list {list}"));
        }
        let n = self.cluster.collectors.len();
        let mut work: Vec<Vec<u32>> = (0..n).map(|_| Vec::new()).collect();
        for (c, e) in &owners {
            work[*c].push(*e);
        }
        let results = self.fan_out(work, |c, _| {
            let path = format!("/tail/{store}/{list}{params}");
            let r = self.endpoint(c)?.request("GET", &path)?;
            let name = &self.cluster.collectors[c].endpoint.name;
            if r.status != 200 {
                return Err(format!(
                    "collector {name:?}: GET {path}: {} {}",
                    r.status,
                    r.body.trim()
                ));
            }
            let lost: u64 = r
                .header("x-dta-lost-batches")
                .and_then(|v| v.parse().ok())
                .unwrap_or(0);
            let mut v = Vec::new();
            for line in r.body.lines().filter(|l| !l.trim().is_empty()) {
                let mut e: Value = serde_json::from_str(line)
                    .map_err(|e| format!("collector {name:?}: bad answer line: {e}"))?;
                if let Some(o) = e.as_object_mut() {
                    o.insert("collector".into(), name.clone().into());
                }
                v.push(e);
            }
            Ok((v, lost))
        });
        let mut results = results;
        let mut entries = Vec::new();
        let mut lost = 0;
        for (c, _) in &owners {
            if let Some(r) = results[*c].take() {
                let (v, l) = r?;
                entries.extend(v);
                lost += l;
            }
        }
        Ok((entries, lost))
    }

    /// Forwards a sketch query (`rest`: the path after the store, with its query string) to
    /// the collector holding sketch store `store` (the newest epoch that has it).
    pub fn sketch(&self, method: &str, store: &str, rest: &str, body: &[u8]) -> Reply {
        let owner = self
            .cluster
            .history(self.cluster.epoch)
            .find_map(|p| p.sketch_by_store(store))
            .map(|s| s.collector);
        let Some(c) = owner else {
            return Reply::error(
                404,
                format!("no collector of the cluster holds sketch store {store:?}"),
            );
        };
        let t0 = Instant::now();
        let r = self.endpoint(c).and_then(|e| {
            e.request_with_body(method, &format!("/query/sketch/{store}{rest}"), body)
        });
        self.metrics.requests[c].fetch_add(1, Ordering::Relaxed);
        self.metrics.fanout(t0.elapsed().as_secs_f64());
        match r {
            Ok(r) => Reply {
                status: r.status,
                content_type: r
                    .header("content-type")
                    .unwrap_or("application/json")
                    .to_string(),
                body: r.body,
            },
            Err(e) => {
                self.metrics.errors[c].fetch_add(1, Ordering::Relaxed);
                Reply::error(502, e)
            }
        }
    }

    /// `GET path` on every collector (those with a control address), by name.
    pub fn each(&self, path: &str) -> Value {
        let n = self.cluster.collectors.len();
        let work: Vec<Vec<()>> = (0..n)
            .map(|c| {
                if self.endpoints[c].is_some() {
                    vec![()]
                } else {
                    vec![]
                }
            })
            .collect();
        let results = self.fan_out(work, |c, _| {
            let r = self.endpoint(c)?.request("GET", path)?;
            serde_json::from_str::<Value>(&r.body).map_err(|e| e.to_string())
        });
        let mut o = serde_json::Map::new();
        for (c, r) in results.into_iter().enumerate() {
            let v = match r {
                Some(Ok(v)) => v,
                Some(Err(e)) => json!({ "error": e }),
                None => json!({ "error": "no control address" }),
            };
            o.insert(self.cluster.collectors[c].endpoint.name.clone(), v);
        }
        Value::Object(o)
    }
}

/// Whether a Key-Write or Postcarding answer found something.
fn found(v: &Value) -> bool {
    matches!(
        v.get("result").and_then(Value::as_str),
        Some("value" | "path" | "conflict")
    )
}

/// A key's Key-Increment answer from its parts (one per owner): the estimates added up.
fn sum_counters(parts: Vec<Value>) -> Value {
    let total: u64 = parts
        .iter()
        .filter_map(|p| p.get("estimate").and_then(Value::as_u64))
        .sum();
    let mut head = parts.first().cloned().unwrap_or(Value::Null);
    if let Some(o) = head.as_object_mut() {
        o.insert("estimate".into(), total.into());
        if parts.len() > 1 {
            let split: Vec<Value> = parts
                .iter()
                .map(|p| {
                    json!({
                        "collector": p.get("collector"),
                        "cluster_epoch": p.get("cluster_epoch"),
                        "estimate": p.get("estimate"),
                    })
                })
                .collect();
            o.insert("parts".into(), split.into());
            o.remove("counters");
        }
    }
    head
}

/// A gateway answer.
#[derive(Debug, Clone, PartialEq)]
pub struct Reply {
    /// Status code.
    pub status: u16,
    /// Content type.
    pub content_type: String,
    /// Body.
    pub body: String,
}

impl Reply {
    fn json(status: u16, v: Value) -> Reply {
        Reply {
            status,
            content_type: "application/json".into(),
            body: format!("{v}\n"),
        }
    }

    fn error(status: u16, msg: impl Into<String>) -> Reply {
        Reply::json(status, json!({ "error": msg.into() }))
    }

    fn lines(v: &[Value]) -> Reply {
        let mut body = String::with_capacity(v.len() * 128);
        for l in v {
            let _ = writeln!(body, "{l}");
        }
        Reply {
            status: 200,
            content_type: "application/x-ndjson".into(),
            body,
        }
    }
}

/// The cluster's partitioning as JSON (`GET /cluster`, `dta-collector cluster check`): what
/// the P4 control plane and operators read.
pub fn describe(c: &Cluster) -> Value {
    let name = |i: usize| c.collectors[i].endpoint.name.clone();
    json!({
        "name": c.name,
        "epoch": c.epoch,
        "stores": {
            "keywrite": c.stores.keywrite,
            "keyincrement": c.stores.keyincrement,
            "append": c.stores.append,
            "postcard": c.stores.postcard,
        },
        "collectors": c.collectors.iter().map(|x| json!({
            "name": x.endpoint.name,
            "control": x.control,
            "cm": x.endpoint.cm.map(|a| a.to_string()),
            "ports": x.endpoint.ports,
            "metadata": x.endpoint.metadata,
        })).collect::<Vec<_>>(),
        "epochs": c.epochs.iter().map(|p| json!({
            "number": p.number,
            "start": p.start,
            "members": p.members(c.collectors.len()).into_iter().map(name).collect::<Vec<_>>(),
            "key_slots": p.keys.iter().map(|&i| name(i)).collect::<Vec<_>>(),
            "lists": p.lists.iter().map(|r| json!({
                "collector": name(r.collector), "first": r.first, "end": r.end,
            })).collect::<Vec<_>>(),
            "sketches": p.sketches.iter().map(|s| json!({
                "id": s.id, "collector": name(s.collector), "store": s.store,
            })).collect::<Vec<_>>(),
        })).collect::<Vec<_>>(),
    })
}

/// The HTTP gateway: a single collector's query endpoints, answered from the cluster.
pub struct Gateway {
    client: RwLock<Arc<ClusterClient>>,
    started: Instant,
}

impl Gateway {
    /// A gateway over `client`.
    pub fn new(client: ClusterClient) -> Gateway {
        Gateway {
            client: RwLock::new(Arc::new(client)),
            started: Instant::now(),
        }
    }

    /// The client in use.
    pub fn client(&self) -> Arc<ClusterClient> {
        self.client.read().expect("gateway lock").clone()
    }

    /// Replaces the cluster (a new epoch); counters start again.
    pub fn replace(&self, client: ClusterClient) {
        *self.client.write().expect("gateway lock") = Arc::new(client);
    }

    /// Answers one request.
    pub fn handle(&self, method: &str, target: &str, body: &[u8]) -> Reply {
        let c = self.client();
        let (endpoint, r) = route(&c, method, target, body);
        let mut m = c.metrics.http.lock().expect("metrics lock");
        *m.entry((endpoint, r.status)).or_default() += 1;
        drop(m);
        if endpoint == "metrics" {
            return Reply {
                status: 200,
                content_type: "text/plain; version=0.0.4; charset=utf-8".into(),
                body: render_metrics(&c, self.started),
            };
        }
        r
    }
}

fn route(c: &ClusterClient, method: &str, target: &str, body: &[u8]) -> (&'static str, Reply) {
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    let parts: Vec<&str> = path.trim_matches('/').split('/').collect();
    let mut epoch = None;
    let mut pass = Vec::new();
    for kv in query.split('&').filter(|s| !s.is_empty()) {
        match kv.split_once('=') {
            Some(("cluster_epoch", v)) => match v.parse::<u32>() {
                Ok(e) => epoch = Some(e),
                Err(_) => {
                    return (
                        "query",
                        Reply::error(400, format!("cluster_epoch={v:?} is not a number")),
                    )
                }
            },
            _ => pass.push(kv),
        }
    }
    let params = if pass.is_empty() {
        String::new()
    } else {
        format!("?{}", pass.join("&"))
    };
    let bad = |e: String| Reply::error(if e.contains("cannot reach") { 502 } else { 400 }, e);
    match (method, parts.as_slice()) {
        ("GET", ["metrics"]) => ("metrics", Reply::json(200, Value::Null)),
        ("GET", ["cluster"]) => ("cluster", Reply::json(200, describe(c.cluster()))),
        ("GET", ["stores"]) => ("stores", Reply::json(200, c.each("/stores"))),
        ("GET", ["stats"]) => ("stats", Reply::json(200, c.each("/stats"))),
        (m @ ("GET" | "POST"), ["query", "sketch", store, rest @ ..]) => {
            let rest = if rest.is_empty() {
                params
            } else {
                format!("/{}{params}", rest.join("/"))
            };
            ("sketch", c.sketch(m, store, &rest, body))
        }
        (m @ ("GET" | "POST"), ["query", kind, store, key @ ..]) => {
            let Some(k) = KeyQuery::parse(kind) else {
                return (
                    "query",
                    Reply::error(
                        404,
                        format!("no query kind {kind:?} (keywrite, counter, path)"),
                    ),
                );
            };
            if k.store(c.cluster()) != Some(*store) {
                return (
                    "query",
                    Reply::error(
                        404,
                        format!(
                            "the cluster's {} store is {:?}, not {store:?}",
                            k.name(),
                            k.store(c.cluster()).unwrap_or("(none)")
                        ),
                    ),
                );
            }
            let keys = if m == "GET" {
                if key.is_empty() {
                    return (
                        "query",
                        Reply::error(400, "no key: GET /query/KIND/STORE/KEY"),
                    );
                }
                vec![crate::http::percent_decode(&key.join("/"))]
            } else {
                match crate::http::bulk_keys(body) {
                    Ok(k) => k,
                    Err(r) => {
                        return (
                            "query",
                            Reply {
                                status: r.status,
                                content_type: r.content_type.into(),
                                body: r.body,
                            },
                        )
                    }
                }
            };
            match c.query(k, &keys, epoch, &params) {
                Ok(v) if m == "GET" => {
                    let v = v.into_iter().next().unwrap_or(Value::Null);
                    let status = if v.get("error").is_some() { 400 } else { 200 };
                    ("query", Reply::json(status, v))
                }
                Ok(v) => ("query", Reply::lines(&v)),
                Err(e) => ("query", bad(e)),
            }
        }
        ("GET", ["tail", store, list]) => {
            if c.cluster().stores.append.as_deref() != Some(*store) {
                return (
                    "tail",
                    Reply::error(404, format!("the cluster's append store is not {store:?}")),
                );
            }
            let Ok(list) = list.parse::<u32>() else {
                return (
                    "tail",
                    Reply::error(400, format!("list {list:?} is not a number")),
                );
            };
            match c.tail(list, epoch, &params) {
                Ok((v, _)) => ("tail", Reply::lines(&v)),
                Err(e) => ("tail", bad(e)),
            }
        }
        _ => (
            "other",
            Reply::error(404, format!("no such endpoint: {path}")),
        ),
    }
}

/// The gateway's `/metrics` page.
fn render_metrics(c: &ClusterClient, started: Instant) -> String {
    let m = &c.metrics;
    let names: Vec<&str> = c
        .cluster
        .collectors
        .iter()
        .map(|x| x.endpoint.name.as_str())
        .collect();
    let mut w = PromWriter::new();
    w.single(
        PromKind::Gauge,
        "dta_gateway_cluster_epoch",
        "The newest epoch of the cluster file in use.",
        f64::from(c.cluster.epoch),
    );
    for (fam, help, v) in [
        (
            "dta_gateway_collector_requests",
            "Requests the gateway sent to each collector (one per collector per fan-out).",
            &m.requests,
        ),
        (
            "dta_gateway_collector_keys",
            "Keys the gateway asked each collector about.",
            &m.keys,
        ),
        (
            "dta_gateway_collector_errors",
            "Requests to each collector that failed (unreachable, or not a 200 answer).",
            &m.errors,
        ),
    ] {
        w.family(PromKind::Counter, fam, help);
        for (i, n) in names.iter().enumerate() {
            w.sample(&[("collector", n)], v[i].load(Ordering::Relaxed) as f64);
        }
    }
    w.family(
        PromKind::Counter,
        "dta_gateway_requests",
        "Requests the gateway answered, by endpoint and status code.",
    );
    let http = m.http.lock().expect("metrics lock").clone();
    let mut rows: Vec<_> = http.into_iter().collect();
    rows.sort();
    for ((e, s), n) in rows {
        w.sample(&[("endpoint", e), ("code", &s.to_string())], n as f64);
    }
    w.single(
        PromKind::Gauge,
        "dta_gateway_uptime_seconds",
        "Seconds since the gateway started.",
        started.elapsed().as_secs_f64(),
    );
    let mut out = w.finish();
    let _ = writeln!(
        out,
        "# HELP dta_gateway_fanout_seconds Time from sending a fan-out's requests to the \
         collectors to having every answer."
    );
    let _ = writeln!(out, "# TYPE dta_gateway_fanout_seconds histogram");
    let mut cum = 0;
    for (b, n) in BUCKETS.iter().zip(&m.buckets) {
        cum += n.load(Ordering::Relaxed);
        let _ = writeln!(out, "dta_gateway_fanout_seconds_bucket{{le=\"{b}\"}} {cum}");
    }
    let count = m.fanouts.load(Ordering::Relaxed);
    let _ = writeln!(
        out,
        "dta_gateway_fanout_seconds_bucket{{le=\"+Inf\"}} {count}"
    );
    let sum = m.fanout_ns.load(Ordering::Relaxed) as f64 / 1e9;
    let _ = writeln!(out, "dta_gateway_fanout_seconds_sum {sum:?}");
    let _ = writeln!(out, "dta_gateway_fanout_seconds_count {count}");
    out
}

/// Serves `gateway` on `addr` over [`dta_http`]; the server stops when dropped.
pub fn serve(
    addr: std::net::SocketAddr,
    gateway: Arc<Gateway>,
) -> Result<dta_http::Server, String> {
    let handler: dta_http::Handler = Arc::new(move |req: dta_http::Request| {
        let r = gateway.handle(&req.method, &req.target, &req.body);
        dta_http::Response {
            status: r.status,
            content_type: r.content_type,
            headers: Vec::new(),
            body: r.body.into_bytes(),
        }
    });
    let opts = dta_http::ServerOptions {
        name: "dta-gateway".into(),
        hosts: dta_http::HostPolicy::Checked(Vec::new()),
        ..Default::default()
    };
    dta_http::Server::spawn(addr, opts, handler).map_err(|e| format!("cannot serve on {addr}: {e}"))
}
