//! A minimal blocking client for the control APIs (the collector's CLI, tests): one request
//! per connection, HTTP/1.0 (so an answer is never chunked and ends with the connection),
//! over plain TCP or rustls.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::time::Duration;

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

/// Sends `request` (a complete HTTP/1.0 request) to `addr` and returns everything the server
/// sent until it closed the connection. `timeout` bounds the connect and every read/write.
pub fn exchange(
    addr: SocketAddr,
    tls: Option<&ClientTls>,
    request: &[u8],
    timeout: Duration,
) -> io::Result<Vec<u8>> {
    let s = TcpStream::connect_timeout(&addr, timeout)?;
    s.set_read_timeout(Some(timeout))?;
    s.set_write_timeout(Some(timeout))?;
    let mut out = Vec::new();
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
                match s.read_to_end(&mut out) {
                    Ok(_) if !out.is_empty() => return Ok(out),
                    Err(_) if !out.is_empty() => return Ok(out),
                    _ => return Err(e),
                }
            }
            s.read_to_end(&mut out)?;
        }
        Some(t) => {
            let name = rustls_pki_types::ServerName::try_from(t.server_name.clone())
                .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
            let conn =
                rustls::ClientConnection::new(t.config.clone(), name).map_err(io::Error::other)?;
            let mut s = rustls::StreamOwned::new(conn, s);
            s.write_all(request)?;
            s.flush()?;
            match s.read_to_end(&mut out) {
                Ok(_) => {}
                // A server that closes without close_notify after a complete HTTP/1.0
                // answer: the answer is all there.
                Err(e) if e.kind() == io::ErrorKind::UnexpectedEof && !out.is_empty() => {}
                Err(e) => return Err(e),
            }
        }
    }
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

/// Parses a whole HTTP/1.x answer (status line, headers, body to the end).
pub fn parse_answer(raw: &[u8]) -> Option<Answer> {
    let end = raw.windows(4).position(|w| w == b"\r\n\r\n")?;
    let head = std::str::from_utf8(&raw[..end]).ok()?;
    let mut lines = head.split("\r\n");
    let status = lines.next()?.split_whitespace().nth(1)?.parse().ok()?;
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
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
