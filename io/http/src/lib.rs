//! `dta-http`: the one HTTP server of the control plane, with every limit in one place, and
//! its one HTTP client ([`client`]: hyper's HTTP/1 client, blocking, bounded, TLS verified)
//! for the collector's CLI, its cluster gateway and the ClickHouse exporter.
//!
//! The collector's control API and the translator's `/metrics` + `/stats` both run on it. A
//! [`Server`] owns one OS thread (`dta-http`, or the name given) that drives a current-thread
//! tokio runtime: hyper 1's HTTP/1.1 connections, rustls for TLS, and a small blocking pool
//! (at most [`Limits::handler_threads`] threads) where the caller's synchronous [`Handler`]
//! runs. Nothing of it runs on a datapath thread.
//!
//! # What a request goes through
//! ```text
//!  accept ─▶ connection slot (≤ max_connections, else 503/close at once)
//!         ─▶ TLS handshake (web config; ≤ header_timeout)
//!         ─▶ header (≤ max_header_bytes → 431; ≤ header_timeout, also between requests)
//!         ─▶ site policy (Host, Origin, Sec-Fetch-Site, cross-site-capable POSTs → 403)
//!         ─▶ authentication (basic_auth_users, admin bearer token → 401; a bcrypt check
//!                  no cache answers: one at a time, ≤ 16 waiting, per peer one running
//!                  and a few per second (`auth::AuthThrottle`), else 429)
//!         ─▶ body (≤ max_body_bytes → 413; all bodies ≤ max_body_bytes_total → 503;
//!                  ≤ body_timeout → 408)
//!         ─▶ Handler(Request { method, target, access, body, .. }) on the blocking pool
//!         ─▶ response (a stalled reader is dropped after write_timeout)
//! ```
//!
//! # Invariants
//! - Memory is bounded by the limits whatever the peers send: a connection buffers at most
//!   about `max_header_bytes` of header and, only after authentication, at most
//!   `max_body_bytes` of body; all bodies together at most `max_body_bytes_total`.
//! - Threads are bounded: one runtime thread, `handler_threads` and one thread for bcrypt
//!   checks, however many connections. A flood of wrong passwords therefore never takes a
//!   handler thread, and costs at most one core of bcrypt (far less per peer).
//! - Time is bounded: no connection stays open idle, half-sent or unread longer than the
//!   timeouts.
//! - A handler sees only requests that passed the site policy and authentication, and
//!   learns the caller's rights as an [`Access`].
//!
//! # Panic contract
//! No request can panic the server; a panicking handler costs its request a 500.

pub mod auth;
pub mod client;
mod server;
pub mod site;
pub mod tls;

pub use auth::{Access, AdminToken, AuthThrottle, BasicAuth, WebConfig, WebSettings};
pub use server::{Server, ServerStats, StatsHandle};
pub use site::HostPolicy;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

/// What the server refuses to take, and how long it waits.
#[derive(Debug, Clone)]
pub struct Limits {
    /// Request line and headers, bytes; more is answered 431 and the connection closed.
    pub max_header_bytes: usize,
    /// One request body, bytes; more is answered 413.
    pub max_body_bytes: usize,
    /// Bodies buffered at once over all connections, bytes; a body that does not fit is
    /// answered 503 (so 128 connections cannot make the server hold 128 × 16 MiB).
    pub max_body_bytes_total: usize,
    /// Open connections; more are answered 503 (plain HTTP) or closed at once.
    pub max_connections: usize,
    /// Time to send a request's header, counted from the connection's start or the end of the
    /// previous response: also the idle keep-alive timeout. The TLS handshake gets as long.
    pub header_timeout: Duration,
    /// Time to send a request's body once its header arrived; then 408.
    pub body_timeout: Duration,
    /// How long a response may wait for the peer to read it before the connection is dropped.
    pub write_timeout: Duration,
    /// Threads that run handlers (bcrypt checks have one more of their own).
    pub handler_threads: usize,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            max_header_bytes: 16 << 10,
            max_body_bytes: 16 << 20,
            max_body_bytes_total: 64 << 20,
            max_connections: 128,
            header_timeout: Duration::from_secs(10),
            body_timeout: Duration::from_secs(30),
            write_timeout: Duration::from_secs(10),
            handler_threads: 2,
        }
    }
}

/// A request that passed the site policy and authentication.
#[derive(Debug)]
pub struct Request {
    /// Method, as sent (`GET`, `POST`, ...).
    pub method: String,
    /// Path and query, as sent (`/query/keywrite/kw/00?n=2`).
    pub target: String,
    /// What the caller may do.
    pub access: Access,
    /// The body (empty if none).
    pub body: Vec<u8>,
    /// The headers.
    pub headers: hyper::HeaderMap,
    /// The peer's address.
    pub peer: SocketAddr,
}

/// A handler's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    /// Status code.
    pub status: u16,
    /// `Content-Type`.
    pub content_type: String,
    /// More headers (names and values that are not valid HTTP are dropped and logged).
    pub headers: Vec<(String, String)>,
    /// Body.
    pub body: Vec<u8>,
}

impl Response {
    /// A `text/plain` answer.
    pub fn text(status: u16, body: impl Into<String>) -> Response {
        let mut b = body.into().into_bytes();
        if b.last() != Some(&b'\n') {
            b.push(b'\n');
        }
        Response {
            status,
            content_type: "text/plain; charset=utf-8".into(),
            headers: Vec::new(),
            body: b,
        }
    }
}

/// Answers requests; runs on the server's blocking pool, so it may take its time (within
/// reason: [`Limits::handler_threads`] requests run at once).
pub type Handler = Arc<dyn Fn(Request) -> Response + Send + Sync + 'static>;

/// Everything but the address and the handler.
#[derive(Clone, Default)]
pub struct ServerOptions {
    /// Thread name and log prefix (default `dta-http`).
    pub name: String,
    /// Limits.
    pub limits: Limits,
    /// Serve HTTPS with this configuration (see [`tls::server_config`]).
    pub tls: Option<Arc<rustls::ServerConfig>>,
    /// Require one of these users on every request (Prometheus' `basic_auth_users`).
    pub basic_auth: Option<BasicAuth>,
    /// The admin bearer token; a request carrying it gets [`Access::Admin`].
    pub admin_token: Option<AdminToken>,
    /// Which `Host` headers are answered (DNS rebinding).
    pub hosts: HostPolicy,
    /// The server's counters; keep a clone to read them (`/metrics` of the server itself).
    pub stats: StatsHandle,
}

impl ServerOptions {
    /// Applies a web configuration file: TLS and basic auth.
    pub fn with_web_config(mut self, w: &WebConfig) -> Result<ServerOptions, String> {
        if let Some(t) = &w.tls_server_config {
            self.tls = Some(tls::server_config(&t.cert_file, &t.key_file)?);
        }
        if !w.basic_auth_users.is_empty() {
            self.basic_auth = Some(BasicAuth::new(w.basic_auth_users.clone())?);
        }
        Ok(self)
    }
}
