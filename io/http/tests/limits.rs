//! Every limit of the server, one at a time: header size (431), body size (413, before the
//! body is sent), bodies that do arrive, header and idle timeouts, body timeout (408), the
//! connection cap (503 and close), and a reader that never reads.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use common::*;
use dta_http::Limits;

#[test]
fn an_oversized_header_gets_431() {
    let s = serve(Limits::default());
    let big = format!(
        "GET / HTTP/1.1\r\nHost: x\r\nX-Pad: {}\r\n\r\n",
        "a".repeat(20 << 10)
    );
    let (status, _) = raw(s.local_addr(), big.as_bytes());
    assert_eq!(status, Some(431));
    // Just under the limit is served.
    let ok = format!("GET / HTTP/1.0\r\nX-Pad: {}\r\n\r\n", "a".repeat(15 << 10));
    assert_eq!(raw(s.local_addr(), ok.as_bytes()).0, Some(200));
}

#[test]
fn an_oversized_body_gets_413_before_it_is_sent() {
    let s = serve(Limits::default());
    let t0 = Instant::now();
    let (status, _) = get(
        s.local_addr(),
        "POST",
        "/bulk",
        "Content-Type: application/json\r\nContent-Length: 17000000\r\n",
    );
    assert_eq!(status, Some(413));
    assert!(t0.elapsed() < Duration::from_secs(5));
    // A chunked body that grows past the limit is cut off too.
    let s = serve(Limits {
        max_body_bytes: 1000,
        ..Limits::default()
    });
    let mut req = b"POST /bulk HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n\
Transfer-Encoding: chunked\r\n\r\n"
        .to_vec();
    for _ in 0..3 {
        req.extend_from_slice(format!("190\r\n{}\r\n", "b".repeat(400)).as_bytes());
    }
    req.extend_from_slice(b"0\r\n\r\n");
    assert_eq!(raw(s.local_addr(), &req).0, Some(413));
    assert_eq!(s.stats().body_too_large, 1);
}

#[test]
fn bodies_within_the_limit_reach_the_handler() {
    let s = serve(Limits::default());
    let body = vec![b'x'; 1 << 20];
    let mut req = format!(
        "POST /bulk HTTP/1.0\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        body.len()
    )
    .into_bytes();
    req.extend_from_slice(&body);
    let (status, text) = raw(s.local_addr(), &req);
    assert_eq!(status, Some(200), "{text}");
    assert!(
        text.ends_with(&format!("POST /bulk Anonymous {}\n", 1 << 20)),
        "{text}"
    );
    // Chunked bodies too.
    let req =
        b"POST /c HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Type: application/json\r\n\
Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n";
    let (status, text) = raw(s.local_addr(), req);
    assert_eq!(status, Some(200));
    assert!(text.ends_with("POST /c Anonymous 11\n"), "{text}");
}

#[test]
fn all_bodies_together_are_bounded() {
    let s = serve(Limits {
        max_body_bytes: 64 << 10,
        max_body_bytes_total: 64 << 10,
        ..Limits::default()
    });
    // One connection holds the whole budget with a body it has not finished...
    let mut hog = TcpStream::connect(s.local_addr()).unwrap();
    hog.write_all(
        b"POST /a HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 65536\r\n\r\n",
    )
    .unwrap();
    hog.write_all(&vec![b'z'; 65000]).unwrap();
    std::thread::sleep(Duration::from_millis(300));
    // ...so another body does not fit: 503, not more memory.
    let mut req =
        b"POST /b HTTP/1.0\r\nContent-Type: application/json\r\nContent-Length: 2048\r\n\r\n"
            .to_vec();
    req.extend_from_slice(&[b'y'; 2048]);
    let (status, _) = raw(s.local_addr(), &req);
    assert_eq!(status, Some(503));
    assert_eq!(s.stats().busy, 1);
    drop(hog);
}

#[test]
fn a_slow_header_and_an_idle_connection_are_closed() {
    let s = serve(Limits {
        header_timeout: Duration::from_secs(1),
        ..Limits::default()
    });
    // Half a header, then nothing.
    let mut c = TcpStream::connect(s.local_addr()).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    c.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n").unwrap();
    let t0 = Instant::now();
    let mut buf = [0u8; 256];
    let n = c.read(&mut buf).unwrap_or(0);
    assert_eq!(n, 0, "closed without an answer");
    let waited = t0.elapsed();
    assert!(
        waited >= Duration::from_millis(900) && waited < Duration::from_secs(4),
        "{waited:?}"
    );
    // A keep-alive connection that answered one request and then idles.
    let mut c = TcpStream::connect(s.local_addr()).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    c.write_all(b"GET /one HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    let n = c.read(&mut buf).unwrap();
    assert!(buf[..n].starts_with(b"HTTP/1.1 200"));
    let t0 = Instant::now();
    let mut rest = Vec::new();
    let _ = c.read_to_end(&mut rest);
    let waited = t0.elapsed();
    assert!(
        waited >= Duration::from_millis(900) && waited < Duration::from_secs(4),
        "idle keep-alive connection closed after {waited:?}"
    );
    assert!(wait_until(5, || s.stats().connections_open == 0));
}

#[test]
fn a_slow_body_gets_408() {
    let s = serve(Limits {
        body_timeout: Duration::from_secs(1),
        ..Limits::default()
    });
    let mut c = TcpStream::connect(s.local_addr()).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    c.write_all(
        b"POST / HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n0123456789",
    )
    .unwrap();
    let mut out = Vec::new();
    let _ = c.read_to_end(&mut out);
    assert!(
        out.starts_with(b"HTTP/1.1 408"),
        "{}",
        String::from_utf8_lossy(&out)
    );
    assert_eq!(s.stats().timeouts, 1);
}

#[test]
fn connections_beyond_the_cap_are_refused_at_once() {
    let s = serve(Limits {
        max_connections: 4,
        ..Limits::default()
    });
    let held: Vec<TcpStream> = (0..4)
        .map(|_| TcpStream::connect(s.local_addr()).unwrap())
        .collect();
    assert!(wait_until(5, || s.stats().connections_open == 4));
    let t0 = Instant::now();
    let (status, _) = get(s.local_addr(), "GET", "/", "");
    assert_eq!(status, Some(503));
    assert!(t0.elapsed() < Duration::from_secs(2));
    assert_eq!(s.stats().connections_refused, 1);
    drop(held);
    assert!(wait_until(5, || s.stats().connections_open == 0));
    assert_eq!(get(s.local_addr(), "GET", "/", "").0, Some(200));
}

#[test]
fn a_peer_that_never_reads_is_dropped() {
    let big = vec![b'r'; 32 << 20];
    let handler: dta_http::Handler = std::sync::Arc::new(move |_| dta_http::Response {
        status: 200,
        content_type: "application/octet-stream".into(),
        headers: vec![],
        body: big.clone(),
    });
    let s = dta_http::Server::spawn(
        "127.0.0.1:0".parse().unwrap(),
        dta_http::ServerOptions {
            limits: Limits {
                write_timeout: Duration::from_secs(1),
                ..Limits::default()
            },
            ..Default::default()
        },
        handler,
    )
    .unwrap();
    let mut c = TcpStream::connect(s.local_addr()).unwrap();
    c.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    // Never read: the server's writes stall, and after write_timeout it gives up.
    let t0 = Instant::now();
    assert!(
        wait_until(10, || s.stats().connections_open == 0),
        "still open after {:?}",
        t0.elapsed()
    );
    drop(c);
}

#[test]
fn header_names_keep_their_case() {
    // Clients that look headers up case-sensitively (the fault scripts' Python, tiny_http's
    // users) keep working.
    let handler: dta_http::Handler = std::sync::Arc::new(|_| dta_http::Response {
        status: 200,
        content_type: "text/plain".into(),
        headers: vec![("X-Dta-Next-Seq".into(), "7".into())],
        body: b"ok".to_vec(),
    });
    let s = dta_http::Server::spawn(
        "127.0.0.1:0".parse().unwrap(),
        dta_http::ServerOptions::default(),
        handler,
    )
    .unwrap();
    let (status, text) = get(s.local_addr(), "GET", "/", "");
    assert_eq!(status, Some(200));
    assert!(text.contains("\r\nX-Dta-Next-Seq: 7\r\n"), "{text}");
    assert!(text.contains("\r\nContent-Type: text/plain\r\n"), "{text}");
}
