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
//!
//! ## Layout
//!
//! This module is the router ([`handle`]), the server's start ([`spawn`]), the shared state
//! ([`ControlState`]), the answer type ([`Reply`]) and the request helpers every handler uses
//! (query parameters, percent-decoding with the `percent-encoding` crate, store lookup). Each
//! family of endpoints has its own room, which builds answers from the query engine
//! ([`crate::query`]) and may not route, start threads or touch the server:
//!
//! | Module | Endpoints |
//! |---|---|
//! | `query` | `/query/{keywrite,counter,path}/...`: the store's N, votes and copies, bulk keys |
//! | `sketch` | `/query/sketch/...` |
//! | `tail` | `/tail/...` and the named consumers' cursors |
//! | `pull` | `/pull/...` (the `[pull]` puller's snapshots, read through its store API) |
//! | `admin` | `/stores`, `/stats`, `POST /epoch/...` and the admin-token gate |

mod admin;
mod pull;
mod query;
mod sketch;
mod tail;
#[cfg(test)]
mod tests;

pub use query::bulk_keys;
pub(crate) use tail::Consumers;

use std::collections::HashMap;
use std::net::SocketAddrV4;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::config::CollectorConfig;
use crate::service::Published;
use crate::store::Store;
use dta_http::Access;

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

/// `s` with its `%XX` escapes decoded (`+` stays `+`; a `%` not followed by two hex digits
/// stays as it is; bytes that are not UTF-8 become U+FFFD).
pub(crate) fn percent_decode(s: &str) -> String {
    percent_encoding::percent_decode_str(s)
        .decode_utf8_lossy()
        .into_owned()
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
        ("GET", ["stores"]) => Ok(Reply::json(
            200,
            admin::stores_json(state, access.is_admin()),
        )),
        ("GET", ["stats"]) => Ok(Reply::json(
            200,
            admin::stats_json(state, access.is_admin()),
        )),
        ("GET", ["query", "sketch", store, rest @ ..]) => {
            sketch::sketch_query(state, store, rest, &params)
        }
        ("POST", ["query", "sketch", store]) => {
            sketch::sketch_bulk(state, store, false, body, &params)
        }
        ("POST", ["query", "sketch", store, "heavy"]) => {
            sketch::sketch_bulk(state, store, true, body, &params)
        }
        ("GET", ["query", kind, store, rest @ ..]) if !rest.is_empty() => {
            let key = percent_decode(&rest.join("/"));
            query::query(state, kind, store, &key, &params)
        }
        ("POST", ["query", kind, store]) => query::query_bulk(state, kind, store, body, &params),
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
        ("GET", ["pull", rest @ ..]) => pull::pull_query(state, rest),
        ("GET", ["tail", store, list]) => tail::tail(state, store, list, &params),
        ("GET", ["tail", store]) => tail::heads(state, store),
        ("GET", ["tail", ..]) => Err(Reply::error(
            400,
            format!(
                "{path}: give a store (its lists' heads) or a store and a list (its entries): \
                 GET /tail/{{store}} or /tail/{{store}}/{{list}}"
            ),
        )),
        ("POST", ["epoch", store]) => {
            admin::admin(state, access).and_then(|()| admin::epoch(state, store))
        }
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

fn find_store<'a>(state: &'a ControlState, name: &str) -> Result<&'a Store, Reply> {
    let name = percent_decode(name);
    state
        .stores
        .iter()
        .find(|s| s.name() == name)
        .ok_or_else(|| Reply::error(404, format!("no store called {name:?}")))
}
