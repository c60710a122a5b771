//! The server: accept loop, connection slots, TLS, hyper's HTTP/1.1, bodies, the handler.

use std::convert::Infallible;
use std::future::Future as _;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use http_body_util::{BodyExt as _, Full};
use hyper::body::{Bytes, Incoming};
use hyper::header::{HeaderName, HeaderValue, AUTHORIZATION, CONTENT_LENGTH, CONTENT_TYPE};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::StatusCode;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};

use crate::auth::{strip_scheme, AuthError, AuthThrottle};
use crate::{site, Access, Handler, Request, Response, ServerOptions};

/// The answer to a connection beyond `max_connections` (plain HTTP only), written without
/// reading anything from it.
const BUSY: &[u8] = b"HTTP/1.1 503 Service Unavailable\r\nConnection: close\r\n\
Content-Type: text/plain\r\nContent-Length: 33\r\nRetry-After: 1\r\n\r\n\
too many connections, try again\r\n";

/// Unit of the body budget (`max_body_bytes_total` is counted in these).
const BUDGET_UNIT: usize = 1024;

/// Uncached bcrypt checks that may wait for the one check slot; beyond, 429 at once.
const AUTH_WAITING: usize = 16;

#[derive(Default)]
pub(crate) struct Counters {
    open: AtomicU64,
    accepted: AtomicU64,
    refused: AtomicU64,
    requests: AtomicU64,
    forbidden: AtomicU64,
    unauthorized: AtomicU64,
    body_too_large: AtomicU64,
    timeouts: AtomicU64,
    busy: AtomicU64,
    tls_failures: AtomicU64,
    handler_panics: AtomicU64,
    auth_checks: AtomicU64,
    auth_throttled: AtomicU64,
}

/// A handle on a server's counters, readable from anywhere, e.g. by the handler that renders
/// the server's own `/metrics`: put a clone in [`ServerOptions::stats`] before spawning.
#[derive(Clone, Default)]
pub struct StatsHandle(Arc<Counters>);

impl std::fmt::Debug for StatsHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.get().fmt(f)
    }
}

impl From<ServerStats> for StatsHandle {
    /// A handle whose counters start at `s` (a page's renderer tested with every figure set).
    fn from(s: ServerStats) -> StatsHandle {
        let c = Counters::default();
        let set = |a: &AtomicU64, v: u64| a.store(v, Ordering::Relaxed);
        set(&c.open, s.connections_open);
        set(&c.accepted, s.connections_accepted);
        set(&c.refused, s.connections_refused);
        set(&c.requests, s.requests);
        set(&c.forbidden, s.forbidden);
        set(&c.unauthorized, s.unauthorized);
        set(&c.body_too_large, s.body_too_large);
        set(&c.timeouts, s.timeouts);
        set(&c.busy, s.busy);
        set(&c.tls_failures, s.tls_handshake_failures);
        set(&c.handler_panics, s.handler_panics);
        set(&c.auth_checks, s.auth_checks);
        set(&c.auth_throttled, s.auth_throttled);
        StatsHandle(Arc::new(c))
    }
}

impl StatsHandle {
    /// The counters now.
    pub fn get(&self) -> ServerStats {
        let c = &self.0;
        let g = |a: &AtomicU64| a.load(Ordering::Relaxed);
        ServerStats {
            connections_open: g(&c.open),
            connections_accepted: g(&c.accepted),
            connections_refused: g(&c.refused),
            requests: g(&c.requests),
            forbidden: g(&c.forbidden),
            unauthorized: g(&c.unauthorized),
            body_too_large: g(&c.body_too_large),
            timeouts: g(&c.timeouts),
            busy: g(&c.busy),
            tls_handshake_failures: g(&c.tls_failures),
            handler_panics: g(&c.handler_panics),
            auth_checks: g(&c.auth_checks),
            auth_throttled: g(&c.auth_throttled),
        }
    }
}

/// A server's counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ServerStats {
    /// Connections open now.
    pub connections_open: u64,
    /// Connections accepted and served.
    pub connections_accepted: u64,
    /// Connections closed at once because `max_connections` were open.
    pub connections_refused: u64,
    /// Requests whose header arrived complete and well-formed.
    pub requests: u64,
    /// Requests refused by the site policy (403).
    pub forbidden: u64,
    /// Requests refused for missing or wrong credentials (401).
    pub unauthorized: u64,
    /// Bodies over `max_body_bytes` (413).
    pub body_too_large: u64,
    /// Bodies not received in `body_timeout` (408).
    pub timeouts: u64,
    /// Bodies refused because `max_body_bytes_total` were buffered (503).
    pub busy: u64,
    /// TLS handshakes that failed or timed out.
    pub tls_handshake_failures: u64,
    /// Handlers that panicked (500).
    pub handler_panics: u64,
    /// bcrypt checks of basic credentials run (those not answered from the caches).
    pub auth_checks: u64,
    /// Basic-auth attempts answered 429 without a check: the peer had a check running or
    /// had spent its share, or too many checks were waiting.
    pub auth_throttled: u64,
}

impl ServerStats {
    /// The counters as Prometheus families: (name after the page's prefix, counter or gauge,
    /// help, value); a counter's name is given without `_total`. Every page that runs on this
    /// server exports them as `<prefix>_http_<name>`.
    pub fn families(&self) -> [(&'static str, bool, &'static str, u64); 12] {
        [
            ("http_connections_open", false, "HTTP connections open now.", self.connections_open),
            ("http_connections_accepted", true, "HTTP connections accepted.", self.connections_accepted),
            (
                "http_connections_refused",
                true,
                "HTTP connections closed at once: the connection limit was reached.",
                self.connections_refused,
            ),
            (
                "http_forbidden",
                true,
                "HTTP requests refused by the site policy (Host, Origin; 403).",
                self.forbidden,
            ),
            (
                "http_unauthorized",
                true,
                "HTTP requests refused for missing or wrong credentials (401, or 429 when throttled).",
                self.unauthorized,
            ),
            (
                "http_auth_checks",
                true,
                "bcrypt checks of basic credentials run (not answered from the caches).",
                self.auth_checks,
            ),
            (
                "http_auth_throttled",
                true,
                "Basic-auth attempts answered 429 without a check (per-peer or total bound).",
                self.auth_throttled,
            ),
            ("http_body_too_large", true, "HTTP request bodies over the limit (413).", self.body_too_large),
            ("http_body_timeouts", true, "HTTP request bodies not received in time (408).", self.timeouts),
            (
                "http_busy",
                true,
                "HTTP request bodies refused: too many bytes of bodies buffered (503).",
                self.busy,
            ),
            (
                "http_tls_handshake_failures",
                true,
                "TLS handshakes that failed or timed out.",
                self.tls_handshake_failures,
            ),
            ("http_handler_panics", true, "HTTP handlers that panicked (500).", self.handler_panics),
        ]
    }
}

struct Shared {
    opts: ServerOptions,
    handler: Handler,
    counters: Arc<Counters>,
    /// One permit per open connection.
    conns: Arc<Semaphore>,
    /// One permit per [`BUDGET_UNIT`] of buffered request bodies.
    bodies: Arc<Semaphore>,
    /// The one bcrypt check running at a time (on a blocking thread of its own).
    auth_slot: Arc<Semaphore>,
    /// Checks waiting for `auth_slot`.
    auth_waiting: std::sync::atomic::AtomicUsize,
    /// Per-peer bounds on checks.
    throttle: AuthThrottle,
}

/// A running server; [`Server::stop`] or dropping it closes every connection.
pub struct Server {
    local: SocketAddr,
    shared: Arc<Shared>,
    shutdown: Arc<Notify>,
    thread: Option<JoinHandle<()>>,
}

impl Server {
    /// Binds `addr` and serves `handler` on a thread of its own.
    pub fn spawn(
        addr: SocketAddr,
        opts: ServerOptions,
        handler: Handler,
    ) -> Result<Server, String> {
        let name = if opts.name.is_empty() {
            "dta-http".to_string()
        } else {
            opts.name.clone()
        };
        let scheme = if opts.tls.is_some() { "https" } else { "http" };
        let listener = std::net::TcpListener::bind(addr)
            .map_err(|e| format!("cannot serve {scheme} on {addr}: {e}"))?;
        listener
            .set_nonblocking(true)
            .map_err(|e| format!("{addr}: {e}"))?;
        let local = listener.local_addr().map_err(|e| format!("{addr}: {e}"))?;
        let l = &opts.limits;
        // The handler threads, and one more for the (single) bcrypt check that may run: a
        // flood of wrong passwords never takes a thread from the handlers.
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_io()
            .enable_time()
            .max_blocking_threads(l.handler_threads.max(1) + 1)
            .thread_name(format!("{name}-handler"))
            .build()
            .map_err(|e| format!("{name}: cannot start its runtime: {e}"))?;
        let budget = l
            .max_body_bytes_total
            .max(l.max_body_bytes)
            .div_ceil(BUDGET_UNIT)
            .min(Semaphore::MAX_PERMITS);
        let shared = Arc::new(Shared {
            conns: Arc::new(Semaphore::new(l.max_connections.max(1))),
            bodies: Arc::new(Semaphore::new(budget)),
            auth_slot: Arc::new(Semaphore::new(1)),
            auth_waiting: std::sync::atomic::AtomicUsize::new(0),
            throttle: AuthThrottle::default(),
            counters: opts.stats.0.clone(),
            opts,
            handler,
        });
        let shutdown = Arc::new(Notify::new());
        let thread = {
            let (shared, shutdown, name2) = (shared.clone(), shutdown.clone(), name.clone());
            std::thread::Builder::new()
                .name(name.clone())
                .spawn(move || {
                    rt.block_on(async move {
                        match TcpListener::from_std(listener) {
                            Ok(l) => accept_loop(l, shared, shutdown).await,
                            Err(e) => log::error!("{name2}: {e}"),
                        }
                    });
                    // Connections still open are dropped (closed); a handler still running
                    // gets a moment to finish.
                    rt.shutdown_timeout(Duration::from_secs(1));
                })
                .map_err(|e| format!("cannot start {name}: {e}"))?
        };
        log::info!("{name}: serving {scheme}://{local}");
        Ok(Server {
            local,
            shared,
            shutdown,
            thread: Some(thread),
        })
    }

    /// The address it listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// Its counters.
    pub fn stats(&self) -> ServerStats {
        self.shared.opts.stats.get()
    }

    /// Stops accepting, closes every connection and joins the thread.
    pub fn stop(&mut self) {
        if let Some(t) = self.thread.take() {
            self.shutdown.notify_one();
            let _ = t.join();
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop();
    }
}

async fn accept_loop(listener: TcpListener, shared: Arc<Shared>, shutdown: Arc<Notify>) {
    let mut last_warning: Option<Instant> = None;
    loop {
        let accepted = tokio::select! {
            _ = shutdown.notified() => return,
            r = listener.accept() => r,
        };
        match accepted {
            Ok((stream, peer)) => match shared.conns.clone().try_acquire_owned() {
                Ok(slot) => {
                    shared.counters.accepted.fetch_add(1, Ordering::Relaxed);
                    tokio::spawn(serve_connection(stream, peer, slot, shared.clone()));
                }
                Err(_) => {
                    shared.counters.refused.fetch_add(1, Ordering::Relaxed);
                    if shared.opts.tls.is_none() {
                        // Best effort, never waits: the socket buffer of a fresh
                        // connection has room for it.
                        let _ = stream.try_write(BUSY);
                    }
                }
            },
            Err(e) => {
                // Out of file descriptors, most likely: wait for connections to close.
                if last_warning.is_none_or(|t| t.elapsed() > Duration::from_secs(10)) {
                    log::warn!("{}: accept failed: {e}", shared.opts.name);
                    last_warning = Some(Instant::now());
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}

/// Counts a connection as open while it lives.
struct OpenConnection(Arc<Counters>);

impl OpenConnection {
    fn new(c: &Arc<Counters>) -> OpenConnection {
        c.open.fetch_add(1, Ordering::Relaxed);
        OpenConnection(c.clone())
    }
}

impl Drop for OpenConnection {
    fn drop(&mut self) {
        self.0.open.fetch_sub(1, Ordering::Relaxed);
    }
}

async fn serve_connection(
    stream: TcpStream,
    peer: SocketAddr,
    _slot: OwnedSemaphorePermit,
    shared: Arc<Shared>,
) {
    let _open = OpenConnection::new(&shared.counters);
    let _ = stream.set_nodelay(true);
    let limits = &shared.opts.limits;
    let io = WriteDeadline::new(stream, limits.write_timeout);
    match &shared.opts.tls {
        None => serve_http(io, peer, shared.clone()).await,
        Some(cfg) => {
            let acceptor = tokio_rustls::TlsAcceptor::from(cfg.clone());
            match tokio::time::timeout(limits.header_timeout, acceptor.accept(io)).await {
                Ok(Ok(tls)) => serve_http(tls, peer, shared.clone()).await,
                Ok(Err(e)) => {
                    shared.counters.tls_failures.fetch_add(1, Ordering::Relaxed);
                    log::debug!(
                        "{}: TLS handshake with {peer} failed: {e}",
                        shared.opts.name
                    );
                }
                Err(_) => {
                    shared.counters.tls_failures.fetch_add(1, Ordering::Relaxed);
                    log::debug!("{}: TLS handshake with {peer} timed out", shared.opts.name);
                }
            }
        }
    }
}

async fn serve_http<I>(io: I, peer: SocketAddr, shared: Arc<Shared>)
where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let l = &shared.opts.limits;
    let mut b = http1::Builder::new();
    b.timer(TokioTimer::new())
        .header_read_timeout(l.header_timeout)
        .max_header_size(l.max_header_bytes)
        // hyper needs at least 8 KiB; a little more than a header lets bodies stream in
        // reasonable reads. Memory per connection stays near this.
        .max_buf_size((l.max_header_bytes * 2).max(16 << 10))
        .keep_alive(true)
        // Header names as handlers spell them (`X-Dta-Next-Seq`), not lower-cased: HTTP says
        // they are case-insensitive, but scripts that look them up in a plain dict do not.
        .title_case_headers(true);
    let s = shared.clone();
    let svc = service_fn(move |req| {
        let s = s.clone();
        async move { Ok::<_, Infallible>(respond(req, peer, s).await) }
    });
    if let Err(e) = b.serve_connection(TokioIo::new(io), svc).await {
        log::debug!("{}: connection from {peer}: {e}", shared.opts.name);
    }
}

type HyperResponse = hyper::Response<Full<Bytes>>;

fn plain(status: u16, msg: &str, extra: &[(HeaderName, &str)]) -> HyperResponse {
    let mut r = Response::text(status, msg);
    for (k, v) in extra {
        r.headers.push((k.to_string(), v.to_string()));
    }
    to_hyper(r)
}

fn to_hyper(r: Response) -> HyperResponse {
    let mut out = hyper::Response::new(Full::new(Bytes::from(r.body)));
    *out.status_mut() = StatusCode::from_u16(r.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let h = out.headers_mut();
    if let Ok(v) = HeaderValue::from_str(&r.content_type) {
        h.insert(CONTENT_TYPE, v);
    }
    // Answers can hold secrets (admin) or per-request state: never cache them, never let a
    // browser guess their type.
    h.insert("cache-control", HeaderValue::from_static("no-store"));
    h.insert(
        "x-content-type-options",
        HeaderValue::from_static("nosniff"),
    );
    for (k, v) in r.headers {
        match (
            HeaderName::from_bytes(k.as_bytes()),
            HeaderValue::from_str(&v),
        ) {
            (Ok(k), Ok(v)) => {
                h.append(k, v);
            }
            _ => log::warn!("dropping a response header that is not valid HTTP: {k:?}"),
        }
    }
    out
}

async fn respond(
    req: hyper::Request<Incoming>,
    peer: SocketAddr,
    sh: Arc<Shared>,
) -> HyperResponse {
    let c = &sh.counters;
    c.requests.fetch_add(1, Ordering::Relaxed);
    let (parts, body) = req.into_parts();
    let o = &sh.opts;
    if let Err(site::Refusal(msg)) =
        site::check(&o.hosts, o.tls.is_some(), &parts.method, &parts.headers)
    {
        c.forbidden.fetch_add(1, Ordering::Relaxed);
        log::debug!("{}: {peer}: {msg}", o.name);
        return plain(403, &msg, &[]);
    }
    let access = match authenticate(&sh, &parts.headers, peer).await {
        Ok(a) => a,
        Err(r) => {
            c.unauthorized.fetch_add(1, Ordering::Relaxed);
            return r;
        }
    };
    // Only now, with the caller known, is a body read (and buffered).
    let (body, _budget) = match read_body(&sh, &parts.headers, body).await {
        Ok(b) => b,
        Err(r) => return r,
    };
    let request = Request {
        method: parts.method.as_str().to_string(),
        target: parts
            .uri
            .path_and_query()
            .map_or_else(|| "/".to_string(), |p| p.as_str().to_string()),
        access,
        body,
        headers: parts.headers,
        peer,
    };
    let h = sh.handler.clone();
    match tokio::task::spawn_blocking(move || h(request)).await {
        Ok(r) => to_hyper(r),
        Err(e) => {
            c.handler_panics.fetch_add(1, Ordering::Relaxed);
            log::error!("{}: handler failed: {e}", o.name);
            plain(500, "internal error", &[])
        }
    }
}

async fn authenticate(
    sh: &Shared,
    headers: &hyper::HeaderMap,
    peer: SocketAddr,
) -> Result<Access, HyperResponse> {
    let www = HeaderName::from_static("www-authenticate");
    let authz = match headers.get(AUTHORIZATION).map(|v| v.to_str()) {
        None => None,
        Some(Ok(s)) => Some(s.to_string()),
        Some(Err(_)) => {
            return Err(plain(400, "the Authorization header is not ASCII", &[]));
        }
    };
    if let Some(tok) = authz.as_deref().and_then(|a| strip_scheme(a, "bearer")) {
        return match &sh.opts.admin_token {
            Some(t) if t.matches(tok.trim().as_bytes()) => Ok(Access::Admin),
            Some(_) => Err(plain(
                401,
                "wrong bearer token",
                &[(www, "Bearer realm=\"dta\", error=\"invalid_token\"")],
            )),
            None => Err(plain(
                401,
                "no admin token is configured on this server",
                &[(www, "Bearer realm=\"dta\", error=\"invalid_token\"")],
            )),
        };
    }
    let Some(basic) = sh.opts.basic_auth.clone() else {
        // No users configured: open to read, as a Prometheus exporter without
        // basic_auth_users (other credentials are not looked at).
        return Ok(Access::Anonymous);
    };
    let challenge = [(www, "Basic realm=\"dta\", charset=\"UTF-8\"")];
    let Some(a) = authz else {
        return Err(plain(401, "authentication required", &challenge));
    };
    let refused = |e: AuthError| match e {
        AuthError::Missing => plain(401, "authentication required", &challenge),
        AuthError::Wrong(m) => plain(401, m, &challenge),
    };
    // Parsing and the caches are cheap: answered here, on the I/O thread. Only a check no
    // cache answers costs a bcrypt run, and those are bounded per peer and in total.
    let creds = basic.parse(&a).map_err(refused)?;
    if let Some(r) = basic.cached(&creds) {
        return r.map(Access::User).map_err(refused);
    }
    let c = &sh.counters;
    let throttled = || {
        c.auth_throttled.fetch_add(1, Ordering::Relaxed);
        plain(
            429,
            "too many authentication attempts, try again later",
            &[(HeaderName::from_static("retry-after"), "1")],
        )
    };
    // Both undone on every way out, also when the peer goes away while its check waits.
    let waiting = Waiting::enter(&sh.auth_waiting);
    if waiting.ahead >= AUTH_WAITING {
        return Err(throttled());
    }
    let Some(mut admission) = Admission::new(&sh.throttle, peer.ip()) else {
        return Err(throttled());
    };
    let Ok(slot) = sh.auth_slot.clone().acquire_owned().await else {
        return Err(plain(500, "internal error", &[]));
    };
    drop(waiting);
    c.auth_checks.fetch_add(1, Ordering::Relaxed);
    let r = tokio::task::spawn_blocking(move || {
        let r = basic.verify(&creds);
        drop(slot);
        r
    })
    .await;
    admission.succeeded = matches!(r, Ok(Ok(_)));
    drop(admission);
    match r {
        Ok(r) => r.map(Access::User).map_err(refused),
        Err(_) => Err(plain(500, "internal error", &[])),
    }
}

/// A check counted among those waiting for the check slot while it lives.
struct Waiting<'a> {
    count: &'a std::sync::atomic::AtomicUsize,
    /// Checks that were waiting before this one.
    ahead: usize,
}

impl<'a> Waiting<'a> {
    fn enter(count: &'a std::sync::atomic::AtomicUsize) -> Waiting<'a> {
        let ahead = count.fetch_add(1, Ordering::Relaxed);
        Waiting { count, ahead }
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.count.fetch_sub(1, Ordering::Relaxed);
    }
}

/// A check the throttle admitted, finished when dropped.
struct Admission<'a> {
    throttle: &'a AuthThrottle,
    peer: std::net::IpAddr,
    succeeded: bool,
}

impl<'a> Admission<'a> {
    fn new(throttle: &'a AuthThrottle, peer: std::net::IpAddr) -> Option<Admission<'a>> {
        throttle.admit(peer, Instant::now()).then_some(Admission {
            throttle,
            peer,
            succeeded: false,
        })
    }
}

impl Drop for Admission<'_> {
    fn drop(&mut self) {
        self.throttle.finish(self.peer, self.succeeded);
    }
}

async fn read_body(
    sh: &Shared,
    headers: &hyper::HeaderMap,
    mut body: Incoming,
) -> Result<(Vec<u8>, Option<OwnedSemaphorePermit>), HyperResponse> {
    let l = &sh.opts.limits;
    let c = &sh.counters;
    let too_large = || {
        c.body_too_large.fetch_add(1, Ordering::Relaxed);
        plain(
            413,
            &format!("request body over {} bytes", l.max_body_bytes),
            &[],
        )
    };
    let declared = headers
        .get(CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    if declared.is_some_and(|n| n > l.max_body_bytes as u64) {
        // Refused before a byte of it is read (and before `100 Continue`).
        return Err(too_large());
    }
    let deadline = tokio::time::Instant::now() + l.body_timeout;
    let mut buf: Vec<u8> = Vec::new();
    let mut held: Option<OwnedSemaphorePermit> = None;
    loop {
        let frame = match tokio::time::timeout_at(deadline, body.frame()).await {
            Err(_) => {
                c.timeouts.fetch_add(1, Ordering::Relaxed);
                return Err(plain(408, "request body not received in time", &[]));
            }
            Ok(None) => break,
            Ok(Some(Err(e))) => return Err(plain(400, &format!("bad request body: {e}"), &[])),
            Ok(Some(Ok(f))) => f,
        };
        let Ok(data) = frame.into_data() else {
            continue; // trailers
        };
        let len = buf.len() + data.len();
        if len > l.max_body_bytes {
            return Err(too_large());
        }
        let have = held.as_ref().map_or(0, |p| p.num_permits());
        let need = len.div_ceil(BUDGET_UNIT).saturating_sub(have);
        if need > 0 {
            match sh.bodies.clone().try_acquire_many_owned(need as u32) {
                Ok(p) => match &mut held {
                    Some(h) => h.merge(p),
                    None => held = Some(p),
                },
                Err(_) => {
                    c.busy.fetch_add(1, Ordering::Relaxed);
                    return Err(plain(
                        503,
                        "too many request bodies in flight, try again",
                        &[(HeaderName::from_static("retry-after"), "1")],
                    ));
                }
            }
        }
        buf.extend_from_slice(&data);
    }
    Ok((buf, held))
}

/// A stream whose writes fail with `TimedOut` once they have made no progress for `timeout`:
/// a peer that stops reading cannot hold a connection (and its buffers) forever.
struct WriteDeadline<S> {
    inner: S,
    timeout: Duration,
    stalled: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl<S> WriteDeadline<S> {
    fn new(inner: S, timeout: Duration) -> WriteDeadline<S> {
        WriteDeadline {
            inner,
            timeout,
            stalled: None,
        }
    }

    /// Called when the inner write is pending: `Ready(Err)` once the stall is too long.
    fn poll_stall<T>(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<T>> {
        let t = self.timeout;
        let s = self
            .stalled
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(t)));
        match s.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "the peer stopped reading",
            ))),
            Poll::Pending => Poll::Pending,
        }
    }

    fn progress<T>(&mut self, r: Poll<io::Result<T>>, cx: &mut Context<'_>) -> Poll<io::Result<T>> {
        match r {
            Poll::Pending => self.poll_stall(cx),
            r => {
                self.stalled = None;
                r
            }
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for WriteDeadline<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for WriteDeadline<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let r = Pin::new(&mut self.inner).poll_write(cx, buf);
        self.progress(r, cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let r = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        self.progress(r, cx)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let r = Pin::new(&mut self.inner).poll_flush(cx);
        self.progress(r, cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let r = Pin::new(&mut self.inner).poll_shutdown(cx);
        self.progress(r, cx)
    }
}
