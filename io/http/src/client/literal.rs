//! Requests and answers as literal bytes, for tests that must send exactly what a browser or
//! an attacker would (a foreign `Host`, an `Origin`, HTTP/1.0): the literal request is parsed
//! (httparse, hyper's own parser) into the request [`super::send`] would build and goes the
//! same way, within the same [`ClientLimits`].

use std::io;
use std::net::SocketAddr;
use std::time::Duration;

use http_body_util::Full;
use hyper::body::Bytes;
use hyper::header::{HeaderName, HeaderValue};

use super::{round_trip, Answer, ClientLimits, ClientTls};

/// The request `raw` (a complete HTTP/1.x request: line, headers, blank line, body) as hyper
/// sends it: its method, target, version and headers as they are, the rest as its body.
fn parse_request(raw: &[u8]) -> io::Result<hyper::Request<Full<Bytes>>> {
    let bad = |m: &str| io::Error::new(io::ErrorKind::InvalidInput, m.to_string());
    let lines = raw.windows(2).filter(|w| w == b"\r\n").count();
    let mut headers = vec![httparse::EMPTY_HEADER; lines.max(1)];
    let mut r = httparse::Request::new(&mut headers);
    let head = match r.parse(raw) {
        Ok(httparse::Status::Complete(n)) => n,
        _ => return Err(bad("not a complete HTTP/1 request")),
    };
    let mut b = hyper::Request::builder()
        .method(r.method.unwrap_or_default())
        .uri(r.path.unwrap_or_default())
        .version(match r.version {
            Some(0) => hyper::Version::HTTP_10,
            _ => hyper::Version::HTTP_11,
        });
    let map = b.headers_mut().expect("a fresh builder has headers");
    for h in r.headers.iter() {
        map.append(
            HeaderName::from_bytes(h.name.as_bytes()).map_err(|_| bad("a header name"))?,
            HeaderValue::from_bytes(h.value).map_err(|_| bad("a header value"))?,
        );
    }
    b.body(Full::new(Bytes::copy_from_slice(&raw[head..])))
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))
}

/// Sends `request` (a complete HTTP/1.x request) to `addr` and reads the answer within
/// `limits` (see [`ClientLimits`]): a server that never answers, drips, or sends headers or a
/// body without end is cut off with `TimedOut` or `InvalidData`, never waited for or buffered
/// past the limits.
pub fn fetch(
    addr: SocketAddr,
    tls: Option<&ClientTls>,
    request: &[u8],
    limits: &ClientLimits,
) -> io::Result<Answer> {
    round_trip(addr, tls, parse_request(request)?, limits)
}

/// Sends `request` (a complete HTTP/1.x request) to `addr` and returns the answer's bytes
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

/// Parses a whole HTTP/1.x answer (status line, headers, body to the end).
pub fn parse_answer(raw: &[u8]) -> Option<Answer> {
    let lines = raw.windows(2).filter(|w| w == b"\r\n").count();
    let mut headers = vec![httparse::EMPTY_HEADER; lines.max(1)];
    let mut r = httparse::Response::new(&mut headers);
    let head = match r.parse(raw) {
        Ok(httparse::Status::Complete(n)) => n,
        _ => return None,
    };
    Some(Answer {
        status: r.code?,
        headers: r
            .headers
            .iter()
            .map(|h| {
                (
                    h.name.to_ascii_lowercase(),
                    String::from_utf8_lossy(h.value).trim().to_string(),
                )
            })
            .collect(),
        body: raw[head..].to_vec(),
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
