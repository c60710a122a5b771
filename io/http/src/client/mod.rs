//! A minimal blocking client for the control APIs and ClickHouse (the collector's CLI, its
//! cluster gateway, the exporter, tests): one request per connection, HTTP/1.0 (so an answer
//! is never chunked and ends with the connection or its `Content-Length`), over plain TCP or
//! rustls.
//!
//! Everything it reads is bounded ([`ClientLimits`]): the whole exchange has one deadline
//! (a server that never answers, or drips a byte at a time, is cut off with `TimedOut`), and
//! the header and the body have caps (a server that sends either without end is cut off with
//! `InvalidData` once over them; a `Content-Length` over the cap is refused before its body is
//! read).

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

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
    /// Status line and headers, bytes.
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

fn timed_out() -> io::Error {
    io::Error::new(io::ErrorKind::TimedOut, "no complete answer in time")
}

fn invalid(m: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, m)
}

/// The time left before `deadline`, as a socket timeout (never zero: zero means "forever").
fn left(deadline: Instant) -> io::Result<Duration> {
    let d = deadline.saturating_duration_since(Instant::now());
    if d.is_zero() {
        return Err(timed_out());
    }
    Ok(d.max(Duration::from_millis(1)))
}

/// Reads an answer from `s` within `limits`: the header up to its blank line (at most
/// `max_header_bytes`), then a body of the announced `Content-Length` or up to the end of the
/// connection (at most `max_body_bytes` either way). `arm` sets the socket's timeout to the
/// time left before each read.
fn read_answer<S: Read>(
    s: &mut S,
    limits: &ClientLimits,
    deadline: Instant,
    mut arm: impl FnMut(&mut S, Duration) -> io::Result<()>,
) -> io::Result<Answer> {
    let mut buf: Vec<u8> = Vec::with_capacity(4096);
    let mut chunk = [0u8; 16 << 10];
    let mut searched: usize = 0;
    let mut eof = false;
    // The header.
    let head_end = loop {
        if let Some(i) = buf[searched.saturating_sub(3)..]
            .windows(4)
            .position(|w| w == b"\r\n\r\n")
        {
            break searched.saturating_sub(3) + i;
        }
        searched = buf.len();
        if buf.len() > limits.max_header_bytes {
            return Err(invalid(format!(
                "the answer's header is over {} bytes",
                limits.max_header_bytes
            )));
        }
        if eof {
            return Err(invalid(
                "the connection ended inside the answer's header".into(),
            ));
        }
        arm(s, left(deadline)?)?;
        match read_some(s, &mut chunk, deadline)? {
            0 => eof = true,
            n => buf.extend_from_slice(&chunk[..n]),
        }
    };
    if head_end > limits.max_header_bytes {
        return Err(invalid(format!(
            "the answer's header is over {} bytes",
            limits.max_header_bytes
        )));
    }
    let (status, headers) =
        parse_head(&buf[..head_end]).ok_or_else(|| invalid("not an HTTP answer".into()))?;
    let mut body = buf.split_off(head_end + 4);
    let length = headers
        .iter()
        .find(|(k, _)| k == "content-length")
        .map(|(_, v)| v.parse::<u64>())
        .transpose()
        .map_err(|_| invalid("the answer's Content-Length is not a number".into()))?;
    let too_big = || {
        invalid(format!(
            "the answer's body is over {} bytes",
            limits.max_body_bytes
        ))
    };
    if length.is_some_and(|n| n > limits.max_body_bytes as u64) {
        return Err(too_big());
    }
    let want = length.map(|n| n as usize);
    loop {
        if let Some(n) = want {
            if body.len() >= n {
                body.truncate(n);
                break;
            }
        }
        if body.len() > limits.max_body_bytes {
            return Err(too_big());
        }
        if eof {
            if want.is_some() {
                return Err(invalid(
                    "the connection ended inside the answer's body".into(),
                ));
            }
            break;
        }
        arm(s, left(deadline)?)?;
        match read_some(s, &mut chunk, deadline)? {
            0 => eof = true,
            n => body.extend_from_slice(&chunk[..n]),
        }
    }
    Ok(Answer {
        status,
        headers,
        body,
    })
}

/// One read; a socket timeout (`WouldBlock` or `TimedOut`) past the deadline is `TimedOut`.
/// A TLS peer that closes without `close_notify` (`UnexpectedEof`) has ended the answer like a
/// plain one: a body with a `Content-Length` it did not complete is still refused.
fn read_some<S: Read>(s: &mut S, buf: &mut [u8], deadline: Instant) -> io::Result<usize> {
    loop {
        match s.read(buf) {
            Ok(n) => return Ok(n),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(0),
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                left(deadline)?;
            }
            Err(e) => return Err(e),
        }
    }
}

/// Sends `request` (a complete HTTP/1.0 request) to `addr` and reads the answer within
/// `limits` (see [`ClientLimits`]): a server that never answers, drips, or sends headers or a
/// body without end is cut off with `TimedOut` or `InvalidData`, never waited for or buffered
/// past the limits.
pub fn fetch(
    addr: SocketAddr,
    tls: Option<&ClientTls>,
    request: &[u8],
    limits: &ClientLimits,
) -> io::Result<Answer> {
    let deadline = Instant::now() + limits.timeout;
    let s = TcpStream::connect_timeout(&addr, left(deadline)?)?;
    s.set_write_timeout(Some(left(deadline)?))?;
    s.set_read_timeout(Some(left(deadline)?))?;
    match tls {
        None => {
            let mut s = s;
            if let Err(e) = s.write_all(request) {
                // A server may answer (413, 401) and close before it has read the whole
                // request: its answer is still worth reading.
                if !matches!(
                    e.kind(),
                    io::ErrorKind::BrokenPipe | io::ErrorKind::ConnectionReset
                ) {
                    return Err(e);
                }
                return read_answer(&mut s, limits, deadline, |s, t| s.set_read_timeout(Some(t)))
                    .map_err(|_| e);
            }
            read_answer(&mut s, limits, deadline, |s, t| s.set_read_timeout(Some(t)))
        }
        Some(t) => {
            let name = rustls_pki_types::ServerName::try_from(t.server_name.clone())
                .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
            let conn =
                rustls::ClientConnection::new(t.config.clone(), name).map_err(io::Error::other)?;
            let mut s = rustls::StreamOwned::new(conn, s);
            s.write_all(request)?;
            s.flush()?;
            let arm = |s: &mut rustls::StreamOwned<rustls::ClientConnection, TcpStream>,
                       t: Duration| s.sock.set_read_timeout(Some(t));
            read_answer(&mut s, limits, deadline, arm)
        }
    }
}

/// Sends `request` (a complete HTTP/1.0 request) to `addr` and returns the answer's bytes
/// (header and body), read within the default [`ClientLimits`] with `timeout` for the whole
/// exchange.
pub fn exchange(
    addr: SocketAddr,
    tls: Option<&ClientTls>,
    request: &[u8],
    timeout: Duration,
) -> io::Result<Vec<u8>> {
    let limits = ClientLimits {
        timeout,
        ..ClientLimits::default()
    };
    let a = fetch(addr, tls, request, &limits)?;
    let mut out = format!("HTTP/1.0 {} \r\n", a.status).into_bytes();
    for (k, v) in &a.headers {
        out.extend_from_slice(format!("{k}: {v}\r\n").as_bytes());
    }
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(&a.body);
    Ok(out)
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

/// The status and headers (names lower-cased) of an answer's header block.
fn parse_head(head: &[u8]) -> Option<(u16, Vec<(String, String)>)> {
    let head = std::str::from_utf8(head).ok()?;
    let mut lines = head.split("\r\n");
    let status_line = lines.next()?;
    if !status_line.starts_with("HTTP/1.") {
        return None;
    }
    let status = status_line.split_whitespace().nth(1)?.parse().ok()?;
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    Some((status, headers))
}

/// Parses a whole HTTP/1.x answer (status line, headers, body to the end).
pub fn parse_answer(raw: &[u8]) -> Option<Answer> {
    let end = raw.windows(4).position(|w| w == b"\r\n\r\n")?;
    let (status, headers) = parse_head(&raw[..end])?;
    Some(Answer {
        status,
        headers,
        body: raw[end + 4..].to_vec(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_an_answer() {
        let r = parse_answer(b"HTTP/1.0 404 Not Found\r\nX-A: 1\r\n\r\nbody").unwrap();
        assert_eq!((r.status, r.body.as_slice()), (404, &b"body"[..]));
        assert_eq!(r.header("x-a"), Some("1"));
        assert!(parse_answer(b"garbage").is_none());
    }
}
