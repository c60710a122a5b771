//! The operator interface: an HTTP JSON API and Prometheus `/metrics` on the control port.
//!
//! This is control plane only. It runs in its own threads (`dta-http` and its handler
//! threads, from [`dta_http`], plus `dta-epochs` for scheduled Key-Increment resets), reads
//! store memory through the query engine and the RNIC thread's published counter snapshots,
//! and never touches the RNIC thread or takes a lock it holds per packet.
//!
//! The server ([`dta_http::Server`]) bounds headers, bodies, connections and time, refuses
//! cross-origin requests, and authenticates: `[collector] web_config_file` (TLS,
//! `basic_auth_users`) and `admin_token_file` (the bearer token of the admin endpoints).
//! [`handle`] gets the method, the target, the caller's [`Access`] and the body.
//!
//! | Method and path | Access | Answer |
//! |---|---|---|
//! | `GET /metrics` | read | Prometheus text format 0.0.4 |
//! | `GET /stores` | read (admin: + secrets) | every store: layout, memory bytes, estimates (JSON); with the admin token also its RDMA coordinates (address, R_Key, QPs and PSNs) |
//! | `GET /query/keywrite/{store}/{key}?n=&threshold=` | read | plurality (or consensus `threshold`) value |
//! | `GET /query/counter/{store}/{key}?n=` | read | count-min estimate and the counters |
//! | `GET /query/path/{store}/{flow}?n=&copies=` | read | the decoded path, empty or conflict |
//! | `POST /query/{keywrite,counter,path}/{store}?n=&…` | read | the same for every key of the body (one per line, or a JSON array; `Content-Type` not `text/plain`), as JSON Lines |
//! | `GET /query/sketch/{store}/point/{key}?epoch=` | read | Count-Min / Count-sketch point estimate of a key |
//! | `GET /query/sketch/{store}/cardinality?epoch=` | read | HyperLogLog cardinality estimate |
//! | `GET /query/sketch/{store}/completeness?epoch=` | read | columns written and complete, switches merged per column |
//! | `GET /query/sketch/{store}/epochs` | read | the epochs the store holds, newest first |
//! | `POST /query/sketch/{store}?epoch=` | read | point estimates of every key of the body, as JSON Lines |
//! | `POST /query/sketch/{store}/heavy?epoch=&threshold=` | read | heavy hitters among the body's candidate keys |
//! | `GET /tail/{store}/{list}?from=&max=&consumer=` | read | new Append entries as JSON Lines |
//! | `GET /tail/{store}` | read | the newest batch sequence number of every list of a sequenced Append store (JSON) |
//! | `GET /stats` | read (admin: + QPNs) | RNIC counters (device and per QP), events, uptime (JSON) |
//! | `POST /epoch/{store}` | admin | reset a Key-Increment store's counters, start a new epoch |
//!
//! "read" is anyone when no `basic_auth_users` are configured, else those users (or the admin
//! token); "admin" is the bearer token of `admin_token_file` only: 401 without it, 403 for a
//! basic-auth user, 403 when no token is configured.
//!
//! Keys and flows use the syntax of [`crate::query::keys`]; a 5-tuple's `/PROTO` may stay
//! unescaped (everything after the store name is the key) or be written `%2F`.
//!
//! Queries read the store's own redundancy N (its metadata records it). `n=` may only repeat
//! it; another N is refused (400) unless `force=1` is given too, and the answer then says
//! `"forced": true`. `threshold` and `copies` must be 1..=N. A bulk query's body is a JSON
//! array of key strings or one key per line (blank lines and `#` comments skipped), at most
//! [`MAX_BODY`] bytes and [`MAX_BULK_KEYS`] keys (413 beyond); its answer has one JSON line per
//! key, in order, and a key that does not parse gets `{"input": ..., "error": ...}` on its line.
//! [`handle`] returns the whole answer as one body (the server does not stream it).

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
use dta_http::Access;
use dta_proto::hash::MAX_REDUNDANCY;
use dta_proto::Key;

/// Slots sampled per store for occupancy estimates.
pub(crate) const ESTIMATE_SAMPLES: u32 = 1 << 16;
/// Most request body bytes (a bulk query's key list); a longer body is refused with 413.
pub const MAX_BODY: usize = 16 << 20;
/// Most keys in one bulk query; more are refused with 413. The answer is built in memory
/// (about 150 bytes per key), so this bounds it to some 15 MB.
pub const MAX_BULK_KEYS: usize = 100_000;
/// Most named Append consumers the server keeps cursors for (and exports series of).
pub const MAX_CONSUMERS: usize = 256;
/// Longest consumer name (it is a `/metrics` label value).
pub const MAX_CONSUMER_NAME: usize = 64;
/// Most batches one `/tail` request returns.
const MAX_TAIL_BATCHES: usize = 4096;

/// What the HTTP threads share.
pub struct ControlState {
    pub(crate) stores: Vec<Store>,
    pub(crate) published: Arc<Mutex<Published>>,
    pub(crate) config: CollectorConfig,
    pub(crate) roce: SocketAddrV4,
    pub(crate) started: Instant,
    pub(crate) requests: AtomicU64,
    /// Named consumers' cursors.
    pub(crate) consumers: Mutex<Consumers>,
    /// The HTTP server's own counters (for `/metrics`).
    pub(crate) http: dta_http::StatsHandle,
    /// Whether an admin token is configured (without one the admin endpoints are off).
    pub(crate) admin_enabled: bool,
    /// The `[pull]` puller's results and counters.
    pub(crate) pull: Option<crate::zero::puller::PullView>,
}

/// A named consumer's key: (store, global list, consumer name).
pub(crate) type ConsumerKey = (String, u32, String);

/// A named consumer: its cursor, and when it was last asked for.
#[derive(Debug)]
pub(crate) struct Consumer {
    pub(crate) reader: ListReader,
    used: Instant,
}

/// The named `/tail` consumers: at most [`MAX_CONSUMERS`]; one not asked for in `idle` is
/// forgotten (cursor and `/metrics` series), so names free up and the series stay bounded.
#[derive(Debug)]
pub(crate) struct Consumers {
    map: HashMap<ConsumerKey, Consumer>,
    idle: Duration,
    /// Consumers forgotten for being idle.
    pub(crate) evicted: u64,
}

impl Consumers {
    pub(crate) fn new(idle: Duration) -> Consumers {
        Consumers {
            map: HashMap::new(),
            idle,
            evicted: 0,
        }
    }

    /// Forgets every consumer idle for longer than the limit at `now`.
    pub(crate) fn sweep(&mut self, now: Instant) {
        let idle = self.idle;
        let before = self.map.len();
        self.map
            .retain(|_, c| now.saturating_duration_since(c.used) <= idle);
        self.evicted += (before - self.map.len()) as u64;
    }

    /// The consumer `key`, made with `make` if new; `None` if the table is full of consumers
    /// in use.
    pub(crate) fn get_or_insert(
        &mut self,
        key: ConsumerKey,
        now: Instant,
        make: impl FnOnce() -> ListReader,
    ) -> Option<&mut ListReader> {
        self.sweep(now);
        if self.map.len() >= MAX_CONSUMERS && !self.map.contains_key(&key) {
            return None;
        }
        let c = self.map.entry(key).or_insert_with(|| Consumer {
            reader: make(),
            used: now,
        });
        c.used = now;
        Some(&mut c.reader)
    }

    /// Every consumer.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (&ConsumerKey, &ListReader)> {
        self.map.iter().map(|(k, c)| (k, &c.reader))
    }

    /// Consumers kept now.
    pub(crate) fn len(&self) -> usize {
        self.map.len()
    }
}

/// Whether `name` may name a consumer: 1..=64 bytes of letters, digits, `_ . - :`.
fn consumer_name_ok(name: &str) -> bool {
    (1..=MAX_CONSUMER_NAME).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-' | b':'))
}

/// The control-plane threads; dropping or [`ControlHandle::stop`] ends them.
pub struct ControlHandle {
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
    server: Option<dta_http::Server>,
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
        if let Some(mut s) = self.server.take() {
            s.stop();
        }
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
    pull: Option<crate::zero::puller::PullView>,
) -> Result<ControlHandle, String> {
    let stop = Arc::new(AtomicBool::new(false));
    let mut h = ControlHandle {
        stop: stop.clone(),
        threads: Vec::new(),
        server: None,
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
    let opts = server_options(config)?;
    let state = Arc::new(ControlState {
        stores: stores.to_vec(),
        published,
        config: config.clone(),
        roce,
        started: Instant::now(),
        requests: AtomicU64::new(0),
        consumers: Mutex::new(Consumers::new(Duration::from_secs(
            config.collector.tail_consumer_idle_secs,
        ))),
        http: opts.stats.clone(),
        admin_enabled: opts.admin_token.is_some(),
        pull,
    });
    let handler: dta_http::Handler = Arc::new(move |req: dta_http::Request| {
        state.requests.fetch_add(1, Ordering::Relaxed);
        let r = handle(&state, &req.method, &req.target, &req.access, &req.body);
        dta_http::Response {
            status: r.status,
            content_type: r.content_type.to_string(),
            headers: r
                .headers
                .into_iter()
                .map(|(k, v)| (k.to_string(), v))
                .collect(),
            body: r.body.into_bytes(),
        }
    });
    let server = dta_http::Server::spawn(std::net::SocketAddr::V4(addr), opts, handler)
        .map_err(|e| format!("cannot serve the control API: {e}"))?;
    h.addr = Some(match server.local_addr() {
        std::net::SocketAddr::V4(a) => a,
        _ => addr,
    });
    h.server = Some(server);
    Ok(h)
}

/// The control server's settings from `[collector]`: limits, the admin token, the web
/// configuration (TLS, basic auth) and the host names it answers to
/// ([`dta_http::WebSettings`], which the translator and the agent share).
pub fn server_options(config: &CollectorConfig) -> Result<dta_http::ServerOptions, String> {
    config
        .collector
        .web
        .server_options("dta-http")
        .map_err(|e| format!("[collector] {e}"))
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

pub(crate) fn percent_decode(s: &str) -> String {
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

/// Routes one request (method, path and query string, the caller's access, the body) to its
/// answer. No I/O.
pub fn handle(
    state: &ControlState,
    method: &str,
    url: &str,
    access: &Access,
    body: &[u8],
) -> Reply {
    let (path, q) = url.split_once('?').unwrap_or((url, ""));
    let params = query_params(q);
    let segs: Vec<&str> = path.trim_matches('/').split('/').collect();
    let r = match (method, segs.as_slice()) {
        ("GET", ["metrics"]) => Ok(Reply {
            status: 200,
            content_type: "text/plain; version=0.0.4; charset=utf-8",
            headers: Vec::new(),
            body: crate::metrics::metrics(state),
        }),
        ("GET", ["stores"]) => Ok(Reply::json(200, stores_json(state, access.is_admin()))),
        ("GET", ["stats"]) => Ok(Reply::json(200, stats_json(state, access.is_admin()))),
        ("GET", ["query", "sketch", store, rest @ ..]) => sketch_query(state, store, rest, &params),
        ("POST", ["query", "sketch", store]) => sketch_bulk(state, store, false, body, &params),
        ("POST", ["query", "sketch", store, "heavy"]) => {
            sketch_bulk(state, store, true, body, &params)
        }
        ("GET", ["query", kind, store, rest @ ..]) if !rest.is_empty() => {
            let key = percent_decode(&rest.join("/"));
            query(state, kind, store, &key, &params)
        }
        ("POST", ["query", kind, store]) => query_bulk(state, kind, store, body, &params),
        ("GET", ["query", ..]) => Err(Reply::error(
            400,
            format!(
                "{path}: no key: GET /query/{{keywrite|counter|path}}/{{store}}/{{key}}, or POST \
                 the keys to /query/{{keywrite|counter|path}}/{{store}}"
            ),
        )),
        ("POST", ["query", _, _, ..]) => Err(Reply::error(
            405,
            format!(
                "POST not allowed on {path}: GET one key there, or POST a list of keys to \
                 /query/{{kind}}/{{store}}"
            ),
        )),
        ("GET", ["pull", rest @ ..]) => pull_query(state, rest),
        ("GET", ["tail", store, list]) => tail(state, store, list, &params),
        ("GET", ["tail", store]) => heads(state, store),
        ("GET", ["tail", ..]) => Err(Reply::error(
            400,
            format!(
                "{path}: give a store (its lists' heads) or a store and a list (its entries): \
                 GET /tail/{{store}} or /tail/{{store}}/{{list}}"
            ),
        )),
        ("POST", ["epoch", store]) => admin(state, access).and_then(|()| epoch(state, store)),
        ("POST", ["epoch"]) => Err(Reply::error(
            400,
            "no store: POST /epoch/{store}".to_string(),
        )),
        (_, ["metrics" | "stores" | "stats"]) | (_, ["query" | "tail" | "epoch" | "pull", ..]) => {
            Err(Reply::error(405, format!("{method} not allowed on {path}")))
        }
        _ => Err(Reply::error(404, format!("no such endpoint: {path}"))),
    };
    r.unwrap_or_else(|e| e)
}

/// Admits the admin token only: 401 without credentials, 403 for a basic-auth user or when
/// no admin token is configured.
fn admin(state: &ControlState, access: &Access) -> Result<(), Reply> {
    match access {
        Access::Admin => Ok(()),
        _ if !state.admin_enabled => Err(Reply::error(
            403,
            "admin endpoints are disabled: configure [collector] admin_token_file",
        )),
        Access::User(u) => Err(Reply::error(
            403,
            format!("user {u:?} may read but not administer: send the admin bearer token"),
        )),
        Access::Anonymous => {
            let mut r = Reply::error(401, "this endpoint needs the admin bearer token");
            r.headers
                .push(("WWW-Authenticate", "Bearer realm=\"dta\"".to_string()));
            Err(r)
        }
    }
}

fn find_store<'a>(state: &'a ControlState, name: &str) -> Result<&'a Store, Reply> {
    let name = percent_decode(name);
    state
        .stores
        .iter()
        .find(|s| s.name() == name)
        .ok_or_else(|| Reply::error(404, format!("no store called {name:?}")))
}

/// How a query reads a store: N, whether N was forced, and the vote or copies rule.
#[derive(Debug, Clone, Copy)]
struct QueryRule {
    /// Replicas read.
    n: usize,
    /// The store's own N, if it records one.
    store_n: Option<u8>,
    /// `n` differs from the store's N (only with `force`).
    forced: bool,
    /// Key-Write: plurality or consensus.
    vote: Vote,
    /// Postcarding: agreeing valid chunks needed.
    copies: u8,
}

/// Parameters each query kind takes.
fn known_params(kind: &str) -> &'static [&'static str] {
    match kind {
        "keywrite" => &["n", "threshold", "force"],
        "counter" => &["n", "force"],
        _ => &["n", "copies", "force"],
    }
}

/// A `1..=max` parameter; `None` if absent.
fn small_param(
    p: &HashMap<String, String>,
    k: &str,
    max: usize,
    why: &str,
) -> Result<Option<u8>, Reply> {
    match num::<u64>(p, k)? {
        None => Ok(None),
        Some(v) if (1..=max as u64).contains(&v) => Ok(Some(v as u8)),
        Some(v) => Err(Reply::error(
            400,
            format!("parameter {k}={v} is out of range: {k} must be 1..={max}{why}"),
        )),
    }
}

/// The store (of the right kind for `kind`) and how to read it, from the request's parameters.
fn query_rule<'a>(
    state: &'a ControlState,
    kind: &str,
    store: &str,
    p: &HashMap<String, String>,
) -> Result<(&'a Store, QueryRule), Reply> {
    let want = match kind {
        "keywrite" => "keywrite",
        "counter" => "keyincrement",
        "path" => "postcard",
        k => {
            return Err(Reply::error(
                404,
                format!("no query kind {k:?} (keywrite, counter, path)"),
            ))
        }
    };
    let s = find_store(state, store)?;
    if s.meta.kind.name() != want {
        return Err(Reply::error(
            400,
            format!(
                "store {:?} is a {} store; a {kind} query needs a {want} store",
                s.name(),
                s.meta.kind.name()
            ),
        ));
    }
    let known = known_params(kind);
    if let Some(k) = p.keys().find(|k| !known.contains(&k.as_str())) {
        return Err(Reply::error(
            400,
            format!(
                "unknown parameter {k:?} for a {kind} query (known: {})",
                known.join(", ")
            ),
        ));
    }
    let force = match p.get("force").map(String::as_str) {
        None | Some("0" | "false" | "no") => false,
        Some("" | "1" | "true" | "yes") => true,
        Some(v) => return Err(Reply::error(400, format!("force={v:?}: use 1 or 0"))),
    };
    let store_n = s.redundancy().map(|r| r.get());
    let default_n = store_n.unwrap_or(state.config.collector.max_redundancy);
    let n = small_param(p, "n", MAX_REDUNDANCY, "")?.unwrap_or(default_n);
    let forced = store_n.is_some_and(|sn| sn != n);
    if forced && !force {
        let sn = store_n.unwrap_or_default();
        return Err(Reply::error(
            400,
            format!(
                "store {:?} is written with N={sn}; n={n} would read {} (leave n out to read \
                 the store's N, or add force=1 to read {n} anyway)",
                s.name(),
                if n > sn {
                    "slots no report wrote: a count-min of 0, a vote or path among empty slots"
                } else {
                    "fewer copies than were written"
                }
            ),
        ));
    }
    let at_most_n = format!(" (at most n={n}: only n slots are read)");
    let vote = match small_param(p, "threshold", n as usize, &at_most_n)? {
        Some(t) => Vote::Consensus(t),
        None => Vote::Plurality,
    };
    let copies = small_param(p, "copies", n as usize, &at_most_n)?.unwrap_or(1);
    if want == "postcard" && s.postcard().is_some_and(|v| v.values.is_empty()) {
        return Err(Reply::error(
            409,
            format!(
                "store {:?} has no value set: configure values = [[lo, hi], ...]",
                s.name()
            ),
        ));
    }
    Ok((
        s,
        QueryRule {
            n: n as usize,
            store_n,
            forced,
            vote,
            copies,
        },
    ))
}

/// The answer for one key: `{"store", "key", "n", ["redundancy"], ["forced"], "result", ...}`.
fn answer(s: &Store, rule: &QueryRule, key: &Key) -> Value {
    let mut out = json!({ "store": s.name(), "key": to_hex(key.as_bytes()), "n": rule.n });
    let o = out.as_object_mut().expect("object");
    if let Some(sn) = rule.store_n {
        o.insert("redundancy".into(), sn.into());
    }
    if rule.forced {
        o.insert("forced".into(), true.into());
    }
    if let Some(v) = s.keywrite() {
        match v.query(key, rule.n, rule.vote) {
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
    } else if let Some(v) = s.counter() {
        let a = v.query(key, rule.n);
        o.insert("estimate".into(), a.estimate.into());
        o.insert("counters".into(), json!(a.counters()));
        o.insert("epoch".into(), json!(s.epochs.info()));
    } else if let Some(v) = s.postcard() {
        match v.query(key, rule.n, rule.copies) {
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
    out
}

fn query(
    state: &ControlState,
    kind: &str,
    store: &str,
    key: &str,
    p: &HashMap<String, String>,
) -> Result<Reply, Reply> {
    let (s, rule) = query_rule(state, kind, store, p)?;
    let key = parse_key(key).map_err(|e| Reply::error(400, e))?;
    Ok(Reply::json(200, answer(s, &rule, &key)))
}

/// The keys of a bulk query's body: a JSON array of strings, or one key per line (or the
/// answer refusing them).
pub fn bulk_keys(body: &[u8]) -> Result<Vec<String>, Reply> {
    if body.len() > MAX_BODY {
        return Err(Reply::error(
            413,
            format!(
                "the body is longer than {MAX_BODY} bytes: split the keys over several requests"
            ),
        ));
    }
    let text = std::str::from_utf8(body)
        .map_err(|e| Reply::error(400, format!("the body is not UTF-8: {e}")))?;
    let keys: Vec<String> = if text.trim_start().starts_with('[') {
        serde_json::from_str(text).map_err(|e| {
            Reply::error(
                400,
                format!("the body is not a JSON array of key strings: {e}"),
            )
        })?
    } else {
        text.lines()
            .map(str::trim)
            .filter(|l| !l.is_empty() && !l.starts_with('#'))
            .map(String::from)
            .collect()
    };
    if keys.len() > MAX_BULK_KEYS {
        return Err(Reply::error(
            413,
            format!(
                "{} keys, at most {MAX_BULK_KEYS} per request: split them over several requests",
                keys.len()
            ),
        ));
    }
    if keys.is_empty() {
        return Err(Reply::error(
            400,
            "no keys: POST a JSON array of keys or one key per line",
        ));
    }
    Ok(keys)
}

/// The Sketch store `store`, the epoch a request asks for (`epoch=`, else the newest) and its
/// view.
fn sketch_target<'a>(
    state: &'a ControlState,
    store: &str,
    p: &HashMap<String, String>,
    known: &[&str],
) -> Result<(crate::query::sketch::SketchView<'a>, u32), Reply> {
    let s = find_store(state, store)?;
    let v = s.sketch().ok_or_else(|| {
        Reply::error(
            400,
            format!(
                "store {:?} is a {} store; a sketch query needs a sketch store",
                s.name(),
                s.meta.kind.name()
            ),
        )
    })?;
    if let Some(k) = p.keys().find(|k| !known.contains(&k.as_str())) {
        return Err(Reply::error(
            400,
            format!(
                "unknown parameter {k:?} for this sketch query (known: {})",
                known.join(", ")
            ),
        ));
    }
    let epoch = match num::<u32>(p, "epoch")? {
        Some(e) => e,
        None => v.latest_epoch().ok_or_else(|| {
            Reply::error(404, format!("store {:?}: no epoch written yet", s.name()))
        })?,
    };
    Ok((v, epoch))
}

fn completeness_json(c: &crate::query::sketch::Completeness) -> Value {
    json!({
        "epoch": c.epoch,
        "columns": c.columns,
        "written": c.written,
        "complete": c.complete,
        "min_merged": c.min_merged,
        "max_merged": c.max_merged,
        "expected_switches": c.expected,
        "ratio": c.ratio(),
        "in_transition": c.in_transition,
    })
}

/// `GET /query/sketch/{store}/...`.
fn sketch_query(
    state: &ControlState,
    store: &str,
    rest: &[&str],
    p: &HashMap<String, String>,
) -> Result<Reply, Reply> {
    use dta_proto::sketch::SketchKind;
    match rest {
        ["epochs"] => {
            let (v, _) = sketch_target(state, store, &HashMap::new(), &[])?;
            Ok(Reply::json(200, json!({ "epochs": v.epochs() })))
        }
        ["completeness"] => {
            let (v, e) = sketch_target(state, store, p, &["epoch"])?;
            Ok(Reply::json(
                200,
                completeness_json(&v.read_epoch(e).completeness()),
            ))
        }
        ["cardinality"] => {
            let (v, e) = sketch_target(state, store, p, &["epoch"])?;
            if v.kind() != SketchKind::HyperLogLog {
                return Err(Reply::error(
                    400,
                    format!("a {} sketch has no cardinality estimate", v.kind().name()),
                ));
            }
            let es = v.read_epoch(e);
            Ok(Reply::json(
                200,
                json!({
                    "epoch": e,
                    "estimate": es.cardinality(),
                    "registers": v.layout.shape().columns,
                    "completeness": completeness_json(&es.completeness()),
                }),
            ))
        }
        ["point", key @ ..] if !key.is_empty() => {
            let (v, e) = sketch_target(state, store, p, &["epoch"])?;
            if v.kind() == SketchKind::HyperLogLog {
                return Err(Reply::error(
                    400,
                    "a hyperloglog sketch has no point query (ask for /cardinality)",
                ));
            }
            let key =
                parse_key(&percent_decode(&key.join("/"))).map_err(|e| Reply::error(400, e))?;
            let (est, torn) = v.point_read(&key, e);
            Ok(Reply::json(
                200,
                json!({ "key": to_hex(key.as_bytes()), "epoch": e, "estimate": est,
                        "in_transition": torn }),
            ))
        }
        _ => Err(Reply::error(
            400,
            "sketch queries: GET /query/sketch/{store}/point/{key}, /cardinality, \
             /completeness or /epochs; POST keys to /query/sketch/{store} or \
             /query/sketch/{store}/heavy",
        )),
    }
}

/// `POST /query/sketch/{store}` (point estimates, JSON Lines) and `.../heavy` (the
/// candidates of the body whose estimate reaches `threshold`, largest first).
fn sketch_bulk(
    state: &ControlState,
    store: &str,
    heavy: bool,
    body: &[u8],
    p: &HashMap<String, String>,
) -> Result<Reply, Reply> {
    let known: &[&str] = if heavy {
        &["epoch", "threshold"]
    } else {
        &["epoch"]
    };
    let (v, e) = sketch_target(state, store, p, known)?;
    if v.kind() == dta_proto::sketch::SketchKind::HyperLogLog {
        return Err(Reply::error(
            400,
            "a hyperloglog sketch has no point query (ask for /cardinality)",
        ));
    }
    let keys = bulk_keys(body)?;
    let es = v.read_epoch(e);
    if heavy {
        let threshold = num::<i64>(p, "threshold")?
            .ok_or_else(|| Reply::error(400, "heavy hitters need threshold="))?;
        let mut parsed = Vec::with_capacity(keys.len());
        for k in &keys {
            parsed.push(parse_key(k).map_err(|err| Reply::error(400, format!("{k:?}: {err}")))?);
        }
        let hh: Vec<Value> = es
            .heavy_hitters(&parsed, threshold)
            .into_iter()
            .map(|(k, est)| json!({ "key": to_hex(k.as_bytes()), "estimate": est }))
            .collect();
        return Ok(Reply::json(
            200,
            json!({ "epoch": e, "threshold": threshold, "candidates": keys.len(), "heavy": hh,
                    "columns_in_transition": es.in_transition }),
        ));
    }
    let mut out = String::with_capacity(keys.len() * 64);
    for k in &keys {
        let line = match parse_key(k) {
            Ok(key) => json!({ "key": to_hex(key.as_bytes()), "epoch": e,
                               "estimate": es.point(&key),
                               "in_transition": es.touches_transition(&key) }),
            Err(err) => json!({ "input": k, "error": err }),
        };
        let _ = writeln!(out, "{line}");
    }
    Ok(Reply {
        status: 200,
        content_type: "application/x-ndjson",
        headers: vec![("X-Dta-Keys", keys.len().to_string())],
        body: out,
    })
}

/// `POST /query/{kind}/{store}`: one JSON line per key of the body, in order.
fn query_bulk(
    state: &ControlState,
    kind: &str,
    store: &str,
    body: &[u8],
    p: &HashMap<String, String>,
) -> Result<Reply, Reply> {
    let (s, rule) = query_rule(state, kind, store, p)?;
    let keys = bulk_keys(body)?;
    let mut out = String::with_capacity(keys.len() * 128);
    for k in &keys {
        let line = match parse_key(k) {
            Ok(key) => answer(s, &rule, &key),
            Err(e) => json!({ "input": k, "error": e }),
        };
        let _ = writeln!(out, "{line}");
    }
    Ok(Reply {
        status: 200,
        content_type: "application/x-ndjson",
        headers: vec![("X-Dta-Keys", keys.len().to_string())],
        body: out,
    })
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
    let consumer = p.get("consumer").cloned();
    if let Some(c) = &consumer {
        if !consumer_name_ok(c) {
            return Err(Reply::error(
                400,
                format!(
                    "consumer {c:?}: use 1..={MAX_CONSUMER_NAME} letters, digits, '_', '.', \
                     '-' or ':'"
                ),
            ));
        }
    }
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
            let r = m
                .get_or_insert(k, Instant::now(), || {
                    ListReader::new(&s.region, a.layout, base, start)
                })
                .ok_or_else(|| {
                    Reply::error(
                        409,
                        format!(
                            "too many named consumers in use (at most {MAX_CONSUMERS}; one \
                             unused for tail_consumer_idle_secs is forgotten)"
                        ),
                    )
                })?;
            let st = r.poll(&s.region, max, &mut emit);
            (r.next_seq(), st.lost_batches, r.newest_seq(&s.region))
        }
        None => {
            // Stateless: the reader starts where `from` says (a reference-format list's entry
            // position, as its last X-Dta-Next-Seq gave it) and nothing is kept here.
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

/// `GET /tail/{store}`: every list's head (its newest batch sequence number, 0 if none), so a
/// follower of many lists (the ClickHouse exporter) asks only the lists that moved.
fn heads(state: &ControlState, store: &str) -> Result<Reply, Reply> {
    let s = find_store(state, store)?;
    let a = s
        .append()
        .ok_or_else(|| Reply::error(400, format!("store {:?} is not an Append store", s.name())))?;
    if a.layout.format() != dta_proto::layout::AppendFormat::Sequenced {
        return Err(Reply::error(
            400,
            format!(
                "store {:?} has the reference format: its lists have no sequence numbers",
                s.name()
            ),
        ));
    }
    let heads: Vec<u64> = (0..a.lists)
        .map(|l| {
            ListReader::new(&s.region, a.layout, a.list_offset(l), Start::Seq(1))
                .newest_seq(&s.region)
        })
        .collect();
    Ok(Reply::json(
        200,
        json!({ "store": s.name(), "first_list": a.first_list, "heads": heads }),
    ))
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

/// The stores. The RDMA coordinates (address, R_Key, QPNs and PSNs) let anyone on the fabric
/// write into a store, so only `admin` sees them.
fn stores_json(state: &ControlState, admin: bool) -> Value {
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
                if !admin {
                    if let Some(m) = v["meta"].as_object_mut() {
                        for secret in ["addr", "rkey", "qps"] {
                            m.remove(secret);
                        }
                    }
                }
                if s.counter().is_some() {
                    v["epoch"] = json!(s.epochs.info());
                }
                if let Some(n) = s.redundancy() {
                    v["redundancy"] = json!(n.get());
                }
                if s.postcard().is_some() {
                    v["values"] = json!(s.values.ranges());
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

/// Counters and connections; QPNs only for `admin` (with the R_Key they are what a forged
/// write needs).
fn stats_json(state: &ControlState, admin: bool) -> Value {
    let p = state.published.lock().expect("publisher lock");
    let qpn = |q: u32| if admin { json!(q) } else { Value::Null };
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
        "connections": p.connections.iter().map(|(port, peer, q, up)| json!({ "port": port, "peer": peer.to_string(), "qpn": qpn(*q), "established": up })).collect::<Vec<_>>(),
        "qps": p.per_qp.iter().map(|(q, c)| json!({ "qpn": qpn(*q), "counters": counters_json(c) })).collect::<Vec<_>>(),
        "stores": state.stores.iter().map(|s| json!({
            "name": s.name(), "kind": s.meta.kind.name(), "memory_bytes": s.memory_bytes(),
        })).collect::<Vec<_>>(),
    })
}

/// `GET /pull[/<agent>[/<block>]]`: the newest snapshots the `[pull]` puller took (a block
/// name may contain `/`, e.g. `net/eth0`).
fn pull_query(state: &ControlState, rest: &[&str]) -> Result<Reply, Reply> {
    let Some(p) = &state.pull else {
        return Err(Reply::error(
            404,
            "no [pull] section: this collector pulls from no agents".to_string(),
        ));
    };
    let (agent, block) = match rest {
        [] | [""] => (None, None),
        [a] => (Some(*a), None),
        [a, b @ ..] => (Some(*a), Some(b.join("/"))),
    };
    match p.store().query_json(agent, block.as_deref()) {
        Some(v) => Ok(Reply::json(200, v)),
        None => Err(Reply::error(
            404,
            format!(
                "no agent {:?}{}",
                agent.unwrap_or(""),
                block
                    .map(|b| format!(" with a block {b:?}"))
                    .unwrap_or_default()
            ),
        )),
    }
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
            consumers: Mutex::new(Consumers::new(Duration::from_secs(600))),
            http: dta_http::StatsHandle::default(),
            admin_enabled: true,
            pull: None,
        }
    }

    #[test]
    fn consumers_are_bounded_and_the_idle_ones_forgotten() {
        let st = state();
        let s = &st.stores[2];
        let a = s.append().unwrap();
        let make = || ListReader::new(&s.region, a.layout, a.list_offset(0), Start::Oldest);
        let mut c = Consumers::new(Duration::from_secs(10));
        let t0 = Instant::now();
        let key = |n: usize| ("ap".to_string(), 0, format!("c{n}"));
        for n in 0..MAX_CONSUMERS {
            assert!(c.get_or_insert(key(n), t0, make).is_some());
        }
        assert!(
            c.get_or_insert(key(MAX_CONSUMERS), t0, make).is_none(),
            "full"
        );
        // c0 is asked for again at 6 s; at 12 s the others are idle past 10 s.
        assert!(c
            .get_or_insert(key(0), t0 + Duration::from_secs(6), make)
            .is_some());
        let t = t0 + Duration::from_secs(12);
        assert!(c.get_or_insert(key(MAX_CONSUMERS), t, make).is_some());
        assert_eq!((c.len(), c.evicted), (2, MAX_CONSUMERS as u64 - 1));
        assert!(
            c.iter().any(|(k, _)| k.2 == "c0"),
            "a consumer in use is kept"
        );
        for bad in ["", "a b", "x\"y", "é", &"n".repeat(65)] {
            assert!(!consumer_name_ok(bad), "{bad:?}");
        }
        assert!(consumer_name_ok("exporter-1.ops:tail_2"));
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
            ("GET", "/query/counter/ki/00?n=2", 200),
            ("GET", "/query/counter/ki/00?n=9", 400),
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
            ("GET", "/query/keywrite/kw", 400),
            ("GET", "/query/keywrite", 400),
            ("GET", "/query", 400),
            ("GET", "/tail/ap", 200),
            ("GET", "/tail/ap-ref", 400),
            ("GET", "/tail/kw", 400),
            ("GET", "/tail/ap/1/2", 400),
            ("POST", "/epoch", 400),
            ("POST", "/query/keywrite/kw/00", 405),
        ] {
            let r = handle(&st, m, u, &Access::Admin, b"");
            assert_eq!(r.status, want, "{m} {u}: {}", r.body);
        }
        assert!(handle(&st, "GET", "/metrics", &Access::Anonymous, b"")
            .body
            .contains("# TYPE dta_collector_epoch gauge"));
    }

    proptest! {
        #[test]
        fn any_request_gets_an_answer(method in "GET|POST|PUT|[A-Z]{0,8}",
                                      url in "/[a-z/%0-9.:?=&-]{0,60}|\\PC{0,80}") {
            let st = state();
            let r = handle(&st, &method, &url, &Access::Admin, b"");
            prop_assert!([200, 400, 404, 405, 409].contains(&r.status), "{} {}", r.status, r.body);
            let r = handle(&st, &method, &url, &Access::Anonymous, b"");
            prop_assert!([200, 400, 401, 404, 405, 409].contains(&r.status), "{} {}", r.status, r.body);
        }

        #[test]
        fn any_bulk_body_gets_an_answer(kind in "keywrite|counter|path|x",
                                        body in prop::collection::vec(any::<u8>(), 0..300)) {
            let st = state();
            let store = match kind.as_str() { "keywrite" => "kw", "counter" => "ki", _ => "pc" };
            let r = handle(&st, "POST", &format!("/query/{kind}/{store}"), &Access::Anonymous, &body);
            prop_assert!([200, 400, 404].contains(&r.status), "{} {}", r.status, r.body);
        }
    }

    fn get(st: &ControlState, url: &str) -> (u16, Value) {
        let r = handle(st, "GET", url, &Access::Anonymous, b"");
        let v = serde_json::from_str(&r.body).unwrap_or(Value::Null);
        (r.status, v)
    }

    /// Adds `count` to the key's N counters, as the translator's FETCH_ADDs do.
    fn increment(st: &ControlState, key: &Key, n: usize, count: u64) {
        let s = st.stores.iter().find(|s| s.name() == "ki").unwrap();
        let v = s.counter().unwrap();
        let mut slots = [0u32; MAX_REDUNDANCY];
        v.hasher.slots(key, n, &mut slots);
        for &slot in &slots[..n] {
            s.region
                .fetch_add(v.layout.slot_offset(slot), count)
                .unwrap();
        }
    }

    #[test]
    fn queries_read_the_stores_n_and_refuse_another_unless_forced() {
        let st = state();
        let key = parse_key("0a0b").unwrap();
        // The store is written with N = 2 (the default); queries default to it.
        increment(&st, &key, 2, 7);
        let (status, v) = get(&st, "/query/counter/ki/0a0b");
        assert_eq!(status, 200, "{v}");
        assert_eq!(
            (v["estimate"].as_u64(), v["n"].as_u64()),
            (Some(7), Some(2))
        );
        assert_eq!(v["redundancy"], 2);
        assert!(v.get("forced").is_none(), "{v}");
        assert_eq!(get(&st, "/query/counter/ki/0a0b?n=2").1["estimate"], 7);
        // Reading 4 counters (max_redundancy, the old default) would answer 0, below the
        // true count: refused, and answered only when forced, marked as such.
        let (status, v) = get(&st, "/query/counter/ki/0a0b?n=4");
        assert_eq!(status, 400, "{v}");
        let e = v["error"].as_str().unwrap();
        assert!(e.contains("N=2") && e.contains("force=1"), "{e}");
        let (status, v) = get(&st, "/query/counter/ki/0a0b?n=4&force=1");
        assert_eq!(status, 200, "{v}");
        assert_eq!(
            (v["estimate"].as_u64(), v["forced"].as_bool()),
            (Some(0), Some(true))
        );
        assert_eq!(
            get(&st, "/query/keywrite/kw/00?n=1&force=true").1["forced"],
            true
        );
        // n must be 1..=8 (0 is not rounded up, 99 not accepted).
        for n in ["0", "9", "99", "300", "-1", "x"] {
            let (status, v) = get(&st, &format!("/query/counter/ki/0a0b?n={n}"));
            assert_eq!(status, 400, "n={n}: {v}");
        }
        let (_, v) = get(&st, "/query/counter/ki/0a0b?n=0");
        assert!(v["error"].as_str().unwrap().contains("1..=8"), "{v}");
        // threshold and copies: 1..=n, a 400 (not a "conflict") above.
        let (status, v) = get(&st, "/query/keywrite/kw/00?threshold=3");
        assert_eq!(status, 400, "{v}");
        assert!(v["error"].as_str().unwrap().contains("n=2"), "{v}");
        assert_eq!(get(&st, "/query/keywrite/kw/00?threshold=0").0, 400);
        assert_eq!(get(&st, "/query/keywrite/kw/00?threshold=2").0, 200);
        assert_eq!(get(&st, "/query/path/pc/00?copies=2").0, 400); // the store's N is 1
        assert_eq!(get(&st, "/query/path/pc/00?copies=1").0, 200);
        // Parameters a query does not take, and a bad force, are errors too.
        assert_eq!(get(&st, "/query/counter/ki/00?threshold=1").0, 400);
        assert_eq!(get(&st, "/query/counter/ki/00?m=2").0, 400);
        assert_eq!(get(&st, "/query/counter/ki/00?n=4&force=maybe").0, 400);
        // A missing key is a 400 that says what is missing.
        let (status, v) = get(&st, "/query/counter/ki");
        assert_eq!(status, 400);
        assert!(v["error"].as_str().unwrap().contains("no key"), "{v}");
        // /stores shows each store's N.
        let (_, stores) = get(&st, "/stores");
        let n_of = |name: &str| {
            stores
                .as_array()
                .unwrap()
                .iter()
                .find(|s| s["name"] == name)
                .map(|s| s["redundancy"].clone())
                .unwrap()
        };
        assert_eq!(
            (n_of("kw"), n_of("ki"), n_of("pc")),
            (json!(2), json!(2), json!(1))
        );
        assert_eq!(n_of("ap"), Value::Null);
    }

    #[test]
    fn bulk_queries_answer_one_line_per_key_in_order() {
        let st = state();
        for (k, c) in [("01", 1u64), ("02", 2), ("03", 3)] {
            increment(&st, &parse_key(k).unwrap(), 2, c);
        }
        let lines = |r: &Reply| -> Vec<Value> {
            r.body
                .lines()
                .map(|l| serde_json::from_str(l).unwrap())
                .collect()
        };
        // One key per line; blank lines and comments are skipped; order is kept.
        let r = handle(
            &st,
            "POST",
            "/query/counter/ki",
            &Access::Anonymous,
            b"03\n# a comment\n\n01\r\nnot-a-key\n02\n",
        );
        assert_eq!(r.status, 200, "{}", r.body);
        assert_eq!(r.content_type, "application/x-ndjson");
        let v = lines(&r);
        assert_eq!(v.len(), 4);
        assert_eq!(
            v.iter().map(|l| l["estimate"].as_u64()).collect::<Vec<_>>(),
            [Some(3), Some(1), None, Some(2)]
        );
        assert_eq!(v[0]["key"], "03");
        assert_eq!(v[2]["input"], "not-a-key");
        assert!(v[2]["error"].is_string());
        // A JSON array; the parameters apply to every key (forced, and so flagged).
        let r = handle(
            &st,
            "POST",
            "/query/counter/ki?n=1&force=1",
            &Access::Anonymous,
            br#"["02", "1.2.3.4:1-5.6.7.8:2/udp"]"#,
        );
        assert_eq!(r.status, 200, "{}", r.body);
        let v = lines(&r);
        assert_eq!(v.len(), 2);
        assert!(v.iter().all(|l| l["forced"] == true && l["n"] == 1));
        // Key-Write and path stores answer in bulk too.
        let r = handle(
            &st,
            "POST",
            "/query/keywrite/kw",
            &Access::Anonymous,
            b"00\n01\n",
        );
        assert_eq!((r.status, lines(&r).len()), (200, 2));
        assert!(lines(&r).iter().all(|l| l["result"] == "empty"));
        let r = handle(&st, "POST", "/query/path/pc", &Access::Anonymous, b"00\n");
        assert_eq!(
            (r.status, lines(&r)[0]["result"].clone()),
            (200, json!("empty"))
        );
        // The same rules as a single query.
        assert_eq!(
            handle(
                &st,
                "POST",
                "/query/counter/ki?n=4",
                &Access::Anonymous,
                b"00"
            )
            .status,
            400
        );
        assert_eq!(
            handle(&st, "POST", "/query/counter/kw", &Access::Anonymous, b"00").status,
            400
        );
        assert_eq!(
            handle(
                &st,
                "POST",
                "/query/counter/nope",
                &Access::Anonymous,
                b"00"
            )
            .status,
            404
        );
        // No keys, a body that is not UTF-8, a broken JSON array: 400.
        for body in [
            &b""[..],
            b"\n# only a comment\n",
            b"\xff\xfe",
            b"[\"00\", 1]",
            b"[1",
        ] {
            let r = handle(&st, "POST", "/query/counter/ki", &Access::Anonymous, body);
            assert_eq!(r.status, 400, "{body:?}: {}", r.body);
        }
        // Too many keys, or a body longer than the limit: 413.
        let many = "00\n".repeat(MAX_BULK_KEYS + 1);
        let r = handle(
            &st,
            "POST",
            "/query/counter/ki",
            &Access::Anonymous,
            many.as_bytes(),
        );
        assert_eq!(r.status, 413, "{}", r.body);
        let exactly = "00\n".repeat(MAX_BULK_KEYS);
        let r = handle(
            &st,
            "POST",
            "/query/counter/ki",
            &Access::Anonymous,
            exactly.as_bytes(),
        );
        assert_eq!((r.status, r.body.lines().count()), (200, MAX_BULK_KEYS));
        let huge = vec![b'\n'; MAX_BODY + 1];
        let r = handle(&st, "POST", "/query/counter/ki", &Access::Anonymous, &huge);
        assert_eq!(r.status, 413, "{}", r.body);
    }

    #[test]
    fn admin_endpoints_and_rdma_coordinates_need_the_admin_token() {
        let mut st = state();
        let user = Access::User("prom".into());
        let r = handle(&st, "POST", "/epoch/ki", &Access::Anonymous, b"");
        assert_eq!(r.status, 401);
        assert!(r
            .headers
            .iter()
            .any(|(k, v)| *k == "WWW-Authenticate" && v.starts_with("Bearer")));
        assert_eq!(handle(&st, "POST", "/epoch/ki", &user, b"").status, 403);
        assert_eq!(
            handle(&st, "POST", "/epoch/ki", &Access::Admin, b"").status,
            200
        );
        for who in [&Access::Anonymous, &user] {
            let v: Value =
                serde_json::from_str(&handle(&st, "GET", "/stores", who, b"").body).unwrap();
            for s in v.as_array().unwrap() {
                assert!(s["meta"].get("rkey").is_none() && s["meta"].get("addr").is_none());
                assert!(s["meta"].get("qps").is_none() && s["name"].is_string());
            }
        }
        let v: Value =
            serde_json::from_str(&handle(&st, "GET", "/stores", &Access::Admin, b"").body).unwrap();
        assert!(v[0]["meta"]["rkey"].as_u64().unwrap() > 0);
        // Without a configured token nobody administers.
        st.admin_enabled = false;
        let r = handle(&st, "POST", "/epoch/ki", &Access::Anonymous, b"");
        assert_eq!(r.status, 403, "{}", r.body);
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
}
