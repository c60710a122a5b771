//! A minimal HTTP/1.1 client that keeps its connection open (RFC 9112): the ingest's batched
//! writes and the point lookups of ClickHouse, InfluxDB and the `dta` collector's query API all
//! go through one, so a lookup's latency is the server's, not a TCP handshake's.
//!
//! Bodies are framed by `Content-Length`, by `Transfer-Encoding: chunked` (RFC 9112 §7.1:
//! hex size, optional extensions, data, CRLF; a zero-size last chunk, optional trailer
//! fields, CRLF) or, failing both, by the server closing the connection. 204 and 304 answers
//! have no body.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

/// How an answer's body is framed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    /// No body (204, 304, 1xx).
    None,
    /// `Content-Length` bytes.
    Length(usize),
    /// `Transfer-Encoding: chunked`.
    Chunked,
    /// Until the server closes the connection.
    Close,
}

/// An answer's status line and headers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Head {
    /// Status code.
    pub status: u16,
    /// Body framing.
    pub framing: Framing,
    /// The server keeps the connection open after this answer.
    pub keep_alive: bool,
    /// Bytes of the status line and headers, with the blank line.
    pub len: usize,
}

/// Longest head accepted.
const MAX_HEAD: usize = 64 << 10;

/// Parses an answer's head at the start of `buf`: `Ok(None)` until the blank line arrived.
pub fn parse_head(buf: &[u8]) -> Result<Option<Head>, String> {
    let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") else {
        return if buf.len() > MAX_HEAD {
            Err("HTTP head too long".into())
        } else {
            Ok(None)
        };
    };
    let head = std::str::from_utf8(&buf[..end]).map_err(|_| "HTTP head is not text")?;
    let mut lines = head.split("\r\n");
    let status_line = lines.next().unwrap_or("");
    let mut parts = status_line.splitn(3, ' ');
    let version = parts.next().unwrap_or("");
    if !version.starts_with("HTTP/1.") {
        return Err(format!("not an HTTP/1.x answer: {status_line:?}"));
    }
    let status: u16 = parts
        .next()
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| format!("no status in {status_line:?}"))?;
    let mut keep_alive = version == "HTTP/1.1";
    let (mut length, mut chunked) = (None, false);
    for l in lines {
        let Some((k, v)) = l.split_once(':') else {
            continue;
        };
        let (k, v) = (k.trim(), v.trim());
        if k.eq_ignore_ascii_case("content-length") {
            length = Some(
                v.parse::<usize>()
                    .map_err(|_| format!("bad Content-Length {v:?}"))?,
            );
        } else if k.eq_ignore_ascii_case("transfer-encoding") {
            chunked = v
                .rsplit(',')
                .next()
                .is_some_and(|c| c.trim().eq_ignore_ascii_case("chunked"));
        } else if k.eq_ignore_ascii_case("connection") {
            for t in v.split(',') {
                if t.trim().eq_ignore_ascii_case("close") {
                    keep_alive = false;
                } else if t.trim().eq_ignore_ascii_case("keep-alive") {
                    keep_alive = true;
                }
            }
        }
    }
    let framing = if status / 100 == 1 || status == 204 || status == 304 {
        Framing::None
    } else if chunked {
        // Transfer-Encoding overrides Content-Length (RFC 9112 §6.3).
        Framing::Chunked
    } else if let Some(n) = length {
        Framing::Length(n)
    } else {
        keep_alive = false;
        Framing::Close
    };
    Ok(Some(Head {
        status,
        framing,
        keep_alive,
        len: end + 4,
    }))
}

/// Decodes a whole chunked body at the start of `buf` into `out`: `Ok(None)` (and `out`
/// unchanged) until the last chunk and the trailer section arrived, else the bytes it took.
pub fn decode_chunked(buf: &[u8], out: &mut Vec<u8>) -> Result<Option<usize>, String> {
    let mark = out.len();
    let mut at = 0;
    let line = |from: usize| -> Option<(usize, usize)> {
        let n = buf[from..].windows(2).position(|w| w == b"\r\n")?;
        Some((from + n, from + n + 2))
    };
    loop {
        let Some((eol, next)) = line(at) else {
            out.truncate(mark);
            return Ok(None);
        };
        // chunk-size [ chunk-ext ] CRLF
        let size_text = buf[at..eol].split(|&b| b == b';').next().unwrap_or(&[]);
        let size_text = std::str::from_utf8(size_text)
            .map_err(|_| "bad chunk size")?
            .trim();
        let size = usize::from_str_radix(size_text, 16)
            .map_err(|_| format!("bad chunk size {size_text:?}"))?;
        if size == 0 {
            // trailer-section: field lines until an empty line.
            let mut t = next;
            loop {
                let Some((eol, next)) = line(t) else {
                    out.truncate(mark);
                    return Ok(None);
                };
                if eol == t {
                    return Ok(Some(next));
                }
                t = next;
            }
        }
        if buf.len() < next + size + 2 {
            out.truncate(mark);
            return Ok(None);
        }
        if &buf[next + size..next + size + 2] != b"\r\n" {
            return Err("chunk data not followed by CRLF".into());
        }
        out.extend_from_slice(&buf[next..next + size]);
        at = next + size + 2;
    }
}

/// One kept-alive connection to an HTTP server.
pub struct HttpConn {
    addr: SocketAddr,
    host: String,
    timeout: Duration,
    stream: Option<TcpStream>,
    last_used: Instant,
    head: Vec<u8>,
    buf: Vec<u8>,
    /// TCP connections opened so far.
    pub connects: u64,
}

/// An idle connection older than this is replaced before use (servers close idle ones:
/// ClickHouse after its `keep_alive_timeout`, 3 s in `scripts/clickhouse.sh`).
const MAX_IDLE: Duration = Duration::from_millis(1500);

impl HttpConn {
    /// A client of `addr` (`host:port`); connects on first use.
    pub fn new(addr: &str, timeout: Duration) -> Result<HttpConn, String> {
        let sa = addr
            .to_socket_addrs()
            .map_err(|e| format!("{addr}: {e}"))?
            .next()
            .ok_or_else(|| format!("{addr}: no address"))?;
        Ok(HttpConn {
            addr: sa,
            host: addr.to_string(),
            timeout,
            stream: None,
            last_used: Instant::now(),
            head: Vec::with_capacity(512),
            buf: Vec::with_capacity(1 << 16),
            connects: 0,
        })
    }

    fn connect(&mut self) -> Result<(), String> {
        let s = TcpStream::connect_timeout(&self.addr, self.timeout)
            .map_err(|e| format!("{}: {e}", self.host))?;
        s.set_nodelay(true).map_err(|e| e.to_string())?;
        s.set_read_timeout(Some(self.timeout))
            .map_err(|e| e.to_string())?;
        s.set_write_timeout(Some(self.timeout))
            .map_err(|e| e.to_string())?;
        self.stream = Some(s);
        self.connects += 1;
        Ok(())
    }

    /// Sends one request (`target` is the path and query; `headers` extra header lines, each
    /// ending in CRLF) and puts the answer's body into `body` (cleared first). Returns the
    /// status. A kept-alive connection the server closed meanwhile is replaced and the request
    /// sent again, once, if no byte of an answer had arrived.
    pub fn request(
        &mut self,
        method: &str,
        target: &str,
        headers: &str,
        payload: &[u8],
        body: &mut Vec<u8>,
    ) -> Result<u16, String> {
        if self.stream.is_some() && self.last_used.elapsed() > MAX_IDLE {
            self.stream = None;
        }
        let reused = self.stream.is_some();
        match self.exchange(method, target, headers, payload, body) {
            Err((false, e)) if reused => {
                let _ = e;
                self.stream = None;
                self.exchange(method, target, headers, payload, body)
                    .map_err(|(_, e)| e)
            }
            r => r.map_err(|(_, e)| e),
        }
    }

    /// The exchange; an error says whether any answer byte had arrived.
    fn exchange(
        &mut self,
        method: &str,
        target: &str,
        headers: &str,
        payload: &[u8],
        body: &mut Vec<u8>,
    ) -> Result<u16, (bool, String)> {
        if self.stream.is_none() {
            self.connect().map_err(|e| (true, e))?;
        }
        self.head.clear();
        let _ = write!(
            self.head,
            "{method} {target} HTTP/1.1\r\nHost: {}\r\nContent-Length: {}\r\n{headers}\r\n",
            self.host,
            payload.len()
        );
        let s = self.stream.as_mut().expect("connected above");
        let sent = s.write_all(&self.head).and_then(|_| {
            if payload.is_empty() {
                Ok(())
            } else {
                s.write_all(payload)
            }
        });
        if let Err(e) = sent {
            self.stream = None;
            return Err((false, format!("{}: {e}", self.host)));
        }
        self.buf.clear();
        body.clear();
        let mut chunk = [0u8; 16 << 10];
        let fail = |this: &mut HttpConn, got: bool, e: String| {
            this.stream = None;
            Err((got, format!("{}: {e}", this.host)))
        };
        let head = loop {
            match parse_head(&self.buf) {
                Ok(Some(h)) if h.status / 100 == 1 => {
                    // An interim answer (100 Continue): the real one follows.
                    self.buf.drain(..h.len);
                }
                Ok(Some(h)) => break h,
                Ok(None) => {}
                Err(e) => return fail(self, true, e),
            }
            let s = self.stream.as_mut().expect("connected");
            match s.read(&mut chunk) {
                Ok(0) => {
                    let got = !self.buf.is_empty();
                    return fail(self, got, "connection closed before an answer".into());
                }
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
                Err(e) => {
                    let got = !self.buf.is_empty();
                    return fail(self, got, e.to_string());
                }
            }
        };
        let at = head.len;
        loop {
            let done = match head.framing {
                Framing::None => true,
                Framing::Length(n) => {
                    if self.buf.len() >= at + n {
                        body.extend_from_slice(&self.buf[at..at + n]);
                        true
                    } else {
                        false
                    }
                }
                Framing::Chunked => match decode_chunked(&self.buf[at..], body) {
                    Ok(Some(_)) => true,
                    Ok(None) => false,
                    Err(e) => return fail(self, true, e),
                },
                Framing::Close => false,
            };
            if done {
                break;
            }
            let s = self.stream.as_mut().expect("connected");
            match s.read(&mut chunk) {
                Ok(0) if head.framing == Framing::Close => {
                    body.extend_from_slice(&self.buf[at..]);
                    self.stream = None;
                    break;
                }
                Ok(0) => return fail(self, true, "connection closed inside an answer".into()),
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
                Err(e) => return fail(self, true, e.to_string()),
            }
        }
        if !head.keep_alive {
            self.stream = None;
        }
        self.last_used = Instant::now();
        Ok(head.status)
    }
}

/// Percent-encodes a URL query value (RFC 3986 unreserved characters stay).
pub fn url_encode(s: &str, out: &mut String) {
    for b in s.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                out.push(b as char)
            }
            _ => {
                const HEX: &[u8; 16] = b"0123456789ABCDEF";
                out.push('%');
                out.push(HEX[(b >> 4) as usize] as char);
                out.push(HEX[(b & 15) as usize] as char);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn heads_and_their_framing() {
        let h = parse_head(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello")
            .unwrap()
            .unwrap();
        assert_eq!(
            h,
            Head {
                status: 200,
                framing: Framing::Length(5),
                keep_alive: true,
                len: 38
            }
        );
        // InfluxDB's answer to a write.
        let h = parse_head(b"HTTP/1.1 204 No Content\r\nContent-Type: application/json\r\n\r\n")
            .unwrap()
            .unwrap();
        assert_eq!(
            (h.status, h.framing, h.keep_alive),
            (204, Framing::None, true)
        );
        let h = parse_head(
            b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\ntransfer-encoding: gzip, chunked\r\n\r\n",
        )
        .unwrap()
        .unwrap();
        assert_eq!(h.framing, Framing::Chunked);
        let h = parse_head(b"HTTP/1.0 200 OK\r\n\r\nrest").unwrap().unwrap();
        assert_eq!((h.framing, h.keep_alive), (Framing::Close, false));
        let h =
            parse_head(b"HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 0\r\n\r\n")
                .unwrap()
                .unwrap();
        assert!(h.keep_alive);
        let h = parse_head(b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 0\r\n\r\n")
            .unwrap()
            .unwrap();
        assert!(!h.keep_alive);
        assert_eq!(parse_head(b"HTTP/1.1 200 OK\r\nContent-Le"), Ok(None));
        assert!(parse_head(b"SSH-2.0-OpenSSH\r\n\r\n").is_err());
        assert!(parse_head(b"HTTP/1.1 200 OK\r\nContent-Length: x\r\n\r\n").is_err());
    }

    /// RFC 9112 §7.1's grammar: sizes in hex, extensions after `;`, a last chunk of size 0 and
    /// a trailer section.
    #[test]
    fn chunked_bodies_decode() {
        let mut out = Vec::new();
        let b = b"4\r\nWiki\r\n5;name=value\r\npedia\r\nE\r\n in\r\n\r\nchunks.\r\n0\r\n\r\nNEXT";
        let n = decode_chunked(b, &mut out).unwrap().unwrap();
        assert_eq!(out, b"Wikipedia in\r\n\r\nchunks.");
        assert_eq!(&b[n..], b"NEXT");
        out.clear();
        let b = b"3\r\nabc\r\n0\r\nExpires: never\r\nX-A: 1\r\n\r\n";
        assert_eq!(decode_chunked(b, &mut out).unwrap(), Some(b.len()));
        assert_eq!(out, b"abc");
        // Incomplete at every cut: nothing is appended.
        for cut in 0..b.len() - 1 {
            let mut o = b"keep".to_vec();
            assert_eq!(
                decode_chunked(&b[..cut], &mut o).unwrap(),
                None,
                "cut {cut}"
            );
            assert_eq!(o, b"keep");
        }
        assert!(decode_chunked(b"zz\r\n", &mut out).is_err());
        assert!(decode_chunked(b"3\r\nabcXY", &mut out).is_err());
    }

    #[test]
    fn query_values_are_percent_encoded() {
        let mut s = String::new();
        url_encode("SELECT a FROM t WHERE k='x y'", &mut s);
        assert_eq!(s, "SELECT%20a%20FROM%20t%20WHERE%20k%3D%27x%20y%27");
    }

    /// Against a server written here: two requests on one connection, a chunked answer, and a
    /// closed idle connection replaced.
    #[test]
    fn one_connection_carries_many_requests() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap().to_string();
        let server = std::thread::spawn(move || {
            let mut accepted = 0;
            for s in l.incoming().take(2) {
                let mut s = s.unwrap();
                accepted += 1;
                let mut got = Vec::new();
                let mut b = [0u8; 4096];
                // Two answers on the first connection, one on the second.
                let want = if accepted == 1 { 2 } else { 1 };
                let mut answered = 0;
                while answered < want {
                    let n = s.read(&mut b).unwrap();
                    if n == 0 {
                        break;
                    }
                    got.extend_from_slice(&b[..n]);
                    while let Some(end) = got.windows(4).position(|w| w == b"\r\n\r\n") {
                        let head = String::from_utf8_lossy(&got[..end]).to_string();
                        let len: usize = head
                            .lines()
                            .find_map(|l| l.strip_prefix("Content-Length: "))
                            .unwrap()
                            .parse()
                            .unwrap();
                        if got.len() < end + 4 + len {
                            break;
                        }
                        let body = got[end + 4..end + 4 + len].to_vec();
                        got.drain(..end + 4 + len);
                        let ans = if answered == 0 {
                            format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n", body.len())
                                .into_bytes()
                                .into_iter()
                                .chain(body)
                                .collect::<Vec<u8>>()
                        } else {
                            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n"
                                .to_vec()
                        };
                        s.write_all(&ans).unwrap();
                        answered += 1;
                    }
                }
                // Then close: the client must reconnect for its next request.
            }
            accepted
        });
        let mut c = HttpConn::new(&addr, Duration::from_secs(5)).unwrap();
        let mut body = Vec::new();
        assert_eq!(c.request("POST", "/echo", "", b"ping", &mut body), Ok(200));
        assert_eq!(body, b"ping");
        assert_eq!(c.request("GET", "/x", "", b"", &mut body), Ok(200));
        assert_eq!(body, b"ok");
        assert_eq!(c.connects, 1);
        // The server closed after two answers: the third request goes out on a new connection.
        assert_eq!(c.request("POST", "/echo", "", b"again", &mut body), Ok(200));
        assert_eq!(body, b"again");
        assert_eq!(c.connects, 2);
        assert_eq!(server.join().unwrap(), 2);
    }
}
