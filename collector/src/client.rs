//! A minimal HTTP/1.0 client for the control API (the CLI's `query`, `tail` and `stats`
//! subcommands and the tests). HTTP/1.0 keeps the server from chunking answers, so a response
//! is a status line, headers and the body up to the connection's end.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::time::Duration;

/// A response.
#[derive(Debug, Clone)]
pub struct Response {
    /// Status code.
    pub status: u16,
    /// Headers, names lower-cased.
    pub headers: Vec<(String, String)>,
    /// Body.
    pub body: String,
}

impl Response {
    /// The first header called `name` (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        let name = name.to_ascii_lowercase();
        self.headers
            .iter()
            .find(|(k, _)| *k == name)
            .map(|(_, v)| v.as_str())
    }
}

/// Sends `method path` to the collector at `addr` and reads the whole answer.
pub fn request(addr: &str, method: &str, path: &str) -> Result<Response, String> {
    request_with_body(addr, method, path, b"")
}

/// Sends `method path` with `body` (a bulk query's keys) and reads the whole answer.
pub fn request_with_body(
    addr: &str,
    method: &str,
    path: &str,
    body: &[u8],
) -> Result<Response, String> {
    let unreachable = |e: &dyn std::fmt::Display| {
        format!(
            "cannot reach the collector's control API at {addr}: {e} (is `dta-collector run` \
             running with [collector] control = \"{addr}\"? pass --control ADDR or -c FILE)"
        )
    };
    let sa: SocketAddr = addr
        .to_socket_addrs()
        .map_err(|e| unreachable(&e))?
        .next()
        .ok_or_else(|| unreachable(&"no address"))?;
    let mut s =
        TcpStream::connect_timeout(&sa, Duration::from_secs(3)).map_err(|e| unreachable(&e))?;
    let _ = s.set_read_timeout(Some(Duration::from_secs(30)));
    write!(
        s,
        "{method} {path} HTTP/1.0\r\nHost: {addr}\r\nContent-Length: {}\r\n\r\n",
        body.len()
    )
    .and_then(|_| s.write_all(body))
    .map_err(|e| unreachable(&e))?;
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).map_err(|e| unreachable(&e))?;
    parse(&raw).ok_or_else(|| format!("{addr}: not an HTTP response"))
}

fn parse(raw: &[u8]) -> Option<Response> {
    let end = raw.windows(4).position(|w| w == b"\r\n\r\n")?;
    let head = std::str::from_utf8(&raw[..end]).ok()?;
    let mut lines = head.split("\r\n");
    let status = lines.next()?.split_whitespace().nth(1)?.parse().ok()?;
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    Some(Response {
        status,
        headers,
        body: String::from_utf8_lossy(&raw[end + 4..]).into_owned(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_a_response() {
        let r = parse(b"HTTP/1.0 404 Not Found\r\nX-A: 1\r\nContent-Type: x\r\n\r\nbody").unwrap();
        assert_eq!((r.status, r.body.as_str()), (404, "body"));
        assert_eq!(r.header("x-a"), Some("1"));
        assert!(parse(b"garbage").is_none());
    }

    #[test]
    fn unreachable_collector_is_a_clear_error() {
        // Port 1 on localhost: nothing listens there.
        let e = request("127.0.0.1:1", "GET", "/stats").unwrap_err();
        assert!(e.contains("cannot reach the collector"), "{e}");
    }
}
