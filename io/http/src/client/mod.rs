//! The one HTTP client of the control plane: the collector's CLI and cluster gateway (through
//! `dta_collector::client::Endpoint`), the ClickHouse exporter, and the tests and tools that
//! talk to a control API. It is hyper 1's HTTP/1 client connection, over plain TCP or rustls,
//! driven to completion on a current-thread tokio runtime made for the call, so callers stay
//! blocking and nothing of it outlives the request.
//!
//! One request per connection: [`send`] asks for `Connection: close`, reads the whole answer
//! and drops the connection.
//!
//! Everything it reads is bounded ([`ClientLimits`]): the whole exchange (resolving aside:
//! connect, TLS, request, answer) has one deadline (a server that never answers, or drips a
//! byte at a time, is cut off with `TimedOut`), and the header and the body have caps (a
//! server that sends either without end is cut off with `InvalidData` once over them; a
//! `Content-Length` over the cap is refused before its body is read). TLS always verifies the
//! server's certificate against the roots of [`ClientTls::config`] (see
//! [`crate::tls::client_config`]); there is no "accept anything".
//!
//! Header values (credentials) never reach an error or a `Debug` print of this module.
//!
//! [`fetch`], [`exchange`] and [`parse_answer`] ([`literal`]) take and give literal bytes, for
//! tests that must send exactly what an attacker would.

mod literal;

pub use literal::{exchange, fetch, parse_answer};

use std::io;
use std::net::{SocketAddr, ToSocketAddrs};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use http_body_util::{BodyExt as _, Full};
use hyper::body::Bytes;
use hyper::header::{HeaderName, HeaderValue, CONNECTION, CONTENT_LENGTH, HOST};
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// TLS settings of a client.
#[derive(Clone)]
pub struct ClientTls {
    /// Roots and versions ([`crate::tls::client_config`]).
    pub config: Arc<rustls::ClientConfig>,
    /// The name (or IP address) the server's certificate must carry.
    pub server_name: String,
}

impl std::fmt::Debug for ClientTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientTls")
            .field("server_name", &self.server_name)
            .finish()
    }
}

/// What a client reads at most, and how long it waits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClientLimits {
    /// The whole exchange (connect, TLS, request, answer) must be over by then.
    pub timeout: Duration,
    /// Status line and headers, bytes (and at most 100 header lines, hyper's default).
    pub max_header_bytes: usize,
    /// Body, bytes (announced or sent).
    pub max_body_bytes: usize,
}

impl Default for ClientLimits {
    /// 30 s, 64 KiB of header, 64 MiB of body.
    fn default() -> ClientLimits {
        ClientLimits {
            timeout: Duration::from_secs(30),
            max_header_bytes: 64 << 10,
            max_body_bytes: 64 << 20,
        }
    }
}

/// One request to [`send`]: HTTP/1.1, `Host` the address it goes to unless `headers` name
/// one, `Content-Length` the body's.
#[derive(Clone)]
pub struct ClientRequest<'a> {
    /// Method (`GET`, `POST`, ...).
    pub method: &'a str,
    /// Path and query (`/query/keywrite/kw/00?n=2`), already percent-encoded.
    pub target: &'a str,
    /// More headers (`Authorization`, `Content-Type`, ...).
    pub headers: Vec<(&'static str, String)>,
    /// The body (empty if none).
    pub body: &'a [u8],
}

impl std::fmt::Debug for ClientRequest<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Header names only: a value may be a credential.
        f.debug_struct("ClientRequest")
            .field("method", &self.method)
            .field("target", &self.target)
            .field(
                "headers",
                &self.headers.iter().map(|(k, _)| *k).collect::<Vec<_>>(),
            )
            .field("body_bytes", &self.body.len())
            .finish()
    }
}

impl<'a> ClientRequest<'a> {
    /// `method target` with `body` and no more headers.
    pub fn new(method: &'a str, target: &'a str, body: &'a [u8]) -> ClientRequest<'a> {
        ClientRequest {
            method,
            target,
            headers: Vec::new(),
            body,
        }
    }

    /// Adds a header.
    pub fn header(mut self, name: &'static str, value: impl Into<String>) -> ClientRequest<'a> {
        self.headers.push((name, value.into()));
        self
    }
}

/// A parsed answer.
#[derive(Debug, Clone)]
pub struct Answer {
    /// Status code.
    pub status: u16,
    /// Headers, names lower-cased.
    pub headers: Vec<(String, String)>,
    /// Body.
    pub body: Vec<u8>,
}

impl Answer {
    /// The first header called `name` (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        let name = name.to_ascii_lowercase();
        self.headers
            .iter()
            .find(|(k, _)| *k == name)
            .map(|(_, v)| v.as_str())
    }
}

/// The first address `addr` (`ip:port` or `host:port`) resolves to.
pub fn resolve(addr: &str) -> io::Result<SocketAddr> {
    addr.to_socket_addrs()?
        .next()
        .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, "no address"))
}

/// Sends `req` to `addr` (`host:port`, over TLS with `tls`) and reads the answer within
/// `limits` (see [`ClientLimits`]): a server that never answers, drips, or sends headers or a
/// body without end is cut off with `TimedOut` or `InvalidData`, never waited for or buffered
/// past the limits. A request hyper cannot send (a method or header that is not HTTP) is
/// `InvalidInput`; a server that cannot be reached is its connect error.
pub fn send(
    addr: &str,
    tls: Option<&ClientTls>,
    req: &ClientRequest<'_>,
    limits: &ClientLimits,
) -> io::Result<Answer> {
    let sa = resolve(addr)?;
    let mut b = hyper::Request::builder()
        .method(req.method)
        .uri(req.target)
        .version(hyper::Version::HTTP_11);
    let headers = b.headers_mut().expect("a fresh builder has headers");
    for (k, v) in &req.headers {
        headers.append(
            HeaderName::from_bytes(k.as_bytes()).map_err(|_| bad_header(k))?,
            HeaderValue::from_str(v).map_err(|_| bad_header(k))?,
        );
    }
    if !headers.contains_key(HOST) {
        headers.insert(
            HOST,
            HeaderValue::from_str(addr).map_err(|_| bad_header("Host"))?,
        );
    }
    headers.insert(CONTENT_LENGTH, HeaderValue::from(req.body.len()));
    headers.insert(CONNECTION, HeaderValue::from_static("close"));
    let r = b
        .body(Full::new(Bytes::copy_from_slice(req.body)))
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
    round_trip(sa, tls, r, limits)
}

/// A header hyper would not send; its value is not part of the error (it may be a secret).
fn bad_header(name: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidInput,
        format!("the request's {name} header is not valid HTTP"),
    )
}

fn timed_out() -> io::Error {
    io::Error::new(io::ErrorKind::TimedOut, "no complete answer in time")
}

fn invalid(m: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, m)
}

/// Sends `req` to `addr` on a runtime made for it and reads the answer, all within
/// `limits.timeout`.
fn round_trip(
    addr: SocketAddr,
    tls: Option<&ClientTls>,
    req: hyper::Request<Full<Bytes>>,
    limits: &ClientLimits,
) -> io::Result<Answer> {
    // A current-thread runtime of its own: callers are blocking threads (the CLI, a gateway
    // handler on the server's blocking pool, the exporter), none of them a runtime's worker.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .enable_time()
        .build()?;
    rt.block_on(async {
        tokio::time::timeout(limits.timeout, connect_and_ask(addr, tls, req, limits))
            .await
            .unwrap_or_else(|_| Err(timed_out()))
    })
}

async fn connect_and_ask(
    addr: SocketAddr,
    tls: Option<&ClientTls>,
    req: hyper::Request<Full<Bytes>>,
    limits: &ClientLimits,
) -> io::Result<Answer> {
    let tcp = tokio::net::TcpStream::connect(addr).await?;
    match tls {
        None => ask(TokioIo::new(EarlyAnswer::new(tcp)), req, limits).await,
        Some(t) => {
            let name = rustls_pki_types::ServerName::try_from(t.server_name.clone())
                .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
            let s = tokio_rustls::TlsConnector::from(t.config.clone())
                .connect(name, tcp)
                .await?;
            ask(TokioIo::new(EofEndsAnswer(s)), req, limits).await
        }
    }
}

/// Sends `req` on a connection and reads the answer within the caps of `limits`.
async fn ask<I>(
    io: I,
    req: hyper::Request<Full<Bytes>>,
    limits: &ClientLimits,
) -> io::Result<Answer>
where
    I: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
{
    let (mut sender, conn) = hyper::client::conn::http1::Builder::new()
        .max_header_size(limits.max_header_bytes)
        // The smallest read buffer hyper takes; a body streams through it.
        .max_buf_size((limits.max_header_bytes * 2).max(16 << 10))
        .title_case_headers(true)
        .handshake(io)
        .await
        .map_err(|e| from_hyper(e, limits, "header"))?;
    // The connection's own errors reach the request and the body below; its task ends with
    // the runtime.
    tokio::spawn(async move {
        let _ = conn.await;
    });
    let r = sender
        .send_request(req)
        .await
        .map_err(|e| from_hyper(e, limits, "header"))?;
    let (head, mut body) = r.into_parts();
    let too_big = || {
        invalid(format!(
            "the answer's body is over {} bytes",
            limits.max_body_bytes
        ))
    };
    // hyper has checked that a Content-Length is a number (or refused the answer).
    let length = head
        .headers
        .get(CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if length.is_some_and(|n| n > limits.max_body_bytes as u64) {
        return Err(too_big());
    }
    let mut out = Vec::with_capacity(length.map_or(0, |n| n as usize));
    while let Some(f) = body.frame().await {
        let f = f.map_err(|e| from_hyper(e, limits, "body"))?;
        if let Ok(d) = f.into_data() {
            if out.len() + d.len() > limits.max_body_bytes {
                return Err(too_big());
            }
            out.extend_from_slice(&d);
        }
    }
    Ok(Answer {
        status: head.status.as_u16(),
        headers: head
            .headers
            .iter()
            .map(|(k, v)| {
                (
                    k.as_str().to_string(),
                    String::from_utf8_lossy(v.as_bytes()).trim().to_string(),
                )
            })
            .collect(),
        body: out,
    })
}

/// An I/O error for a hyper error met while reading the answer's `part` (`header` or
/// `body`): over the header cap, not HTTP and cut short are `InvalidData`; an I/O error
/// underneath (refused, reset, a certificate refused) is itself.
fn from_hyper(e: hyper::Error, limits: &ClientLimits, part: &str) -> io::Error {
    if e.is_parse_too_large() {
        return invalid(format!(
            "the answer's header is over {} bytes (or 100 lines)",
            limits.max_header_bytes
        ));
    }
    if e.is_parse() || e.is_parse_status() {
        return invalid(format!("not an HTTP answer: {e}"));
    }
    let ended = || invalid(format!("the connection ended inside the answer's {part}"));
    if e.is_incomplete_message() {
        return ended();
    }
    let mut source = std::error::Error::source(&e);
    while let Some(s) = source {
        if let Some(io) = s.downcast_ref::<io::Error>() {
            if io.kind() == io::ErrorKind::UnexpectedEof {
                return ended();
            }
            return io::Error::new(io.kind(), io.to_string());
        }
        source = s.source();
    }
    io::Error::other(e.to_string())
}

/// A TLS stream whose peer closing without `close_notify` (rustls' `UnexpectedEof`) ends the
/// answer like a plain connection's end: a body with a `Content-Length` it did not complete
/// is still refused (hyper counts it).
struct EofEndsAnswer<S>(S);

impl<S: AsyncRead + Unpin> AsyncRead for EofEndsAnswer<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match Pin::new(&mut self.0).poll_read(cx, buf) {
            Poll::Ready(Err(e)) if e.kind() == io::ErrorKind::UnexpectedEof => Poll::Ready(Ok(())),
            r => r,
        }
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for EofEndsAnswer<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.0).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_shutdown(cx)
    }
}

/// A plain connection whose server may answer before the request's body is all sent: a
/// server that refuses a body it will not read (413 on its `Content-Length`) answers and
/// closes, and the rest of the body then meets a broken pipe or a reset. The answer is already
/// in the receive buffer; hyper would give up on the write error and lose it. Once writing
/// fails that way, the rest of the request is dropped (reported as written) and the answer is
/// read as usual; if the server sent none, the read fails and that is the error.
struct EarlyAnswer<S> {
    inner: S,
    write_closed: bool,
}

impl<S> EarlyAnswer<S> {
    fn new(inner: S) -> Self {
        EarlyAnswer {
            inner,
            write_closed: false,
        }
    }
}

fn peer_stopped_reading(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::BrokenPipe | io::ErrorKind::ConnectionReset
    )
}

impl<S: AsyncRead + Unpin> AsyncRead for EarlyAnswer<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for EarlyAnswer<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        if self.write_closed {
            return Poll::Ready(Ok(buf.len()));
        }
        match Pin::new(&mut self.inner).poll_write(cx, buf) {
            Poll::Ready(Err(e)) if peer_stopped_reading(&e) => {
                self.write_closed = true;
                Poll::Ready(Ok(buf.len()))
            }
            r => r,
        }
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if self.write_closed {
            return Poll::Ready(Ok(()));
        }
        match Pin::new(&mut self.inner).poll_flush(cx) {
            Poll::Ready(Err(e)) if peer_stopped_reading(&e) => {
                self.write_closed = true;
                Poll::Ready(Ok(()))
            }
            r => r,
        }
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if self.write_closed {
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}
