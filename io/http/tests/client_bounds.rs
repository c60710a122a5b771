//! Issue 28, part 6: the blocking client (`dta_http::client`, under the collector's CLI, its
//! cluster gateway and the ClickHouse exporter) bounds what it reads and how long it waits: a
//! server that never answers, sends header lines forever, a body forever, announces a huge
//! body or drips a byte at a time is cut off with an error, in about the timeout, holding at
//! most the caps in memory.

mod common;

use std::time::Duration;

use common::hostile::{within, Hostile, HostileServer};

const TIMEOUT: Duration = Duration::from_secs(2);

fn exchange_with(kind: Hostile) -> (std::io::Result<Vec<u8>>, Duration) {
    let s = HostileServer::start(kind);
    let addr = s.addr;
    let r = within(Duration::from_secs(20), &format!("{kind:?}"), move || {
        dta_http::client::exchange(
            addr,
            None,
            format!("GET / HTTP/1.0\r\nHost: {addr}\r\n\r\n").as_bytes(),
            TIMEOUT,
        )
    });
    drop(s);
    r
}

#[test]
fn a_server_that_never_answers_is_cut_off_at_the_timeout() {
    let (r, took) = exchange_with(Hostile::Silent);
    let e = r.expect_err("no answer is an error");
    assert_eq!(e.kind(), std::io::ErrorKind::TimedOut, "{e}");
    assert!(took < TIMEOUT + Duration::from_secs(2), "{took:?}");
}

#[test]
fn a_server_that_drips_is_cut_off_at_the_timeout() {
    let (r, took) = exchange_with(Hostile::Drip);
    let e = r.expect_err("a drip that never ends is an error");
    assert_eq!(e.kind(), std::io::ErrorKind::TimedOut, "{e}");
    assert!(took < TIMEOUT + Duration::from_secs(2), "{took:?}");
}

#[test]
fn endless_headers_are_cut_off_at_the_header_cap() {
    let (r, took) = exchange_with(Hostile::EndlessHeaders);
    let e = r.expect_err("endless headers are an error");
    assert_eq!(e.kind(), std::io::ErrorKind::InvalidData, "{e}");
    assert!(e.to_string().contains("header"), "{e}");
    assert!(took < TIMEOUT, "cut at the cap, not the timeout: {took:?}");
}

#[test]
fn endless_and_huge_bodies_are_cut_off() {
    for kind in [Hostile::EndlessBody, Hostile::HugeLength] {
        let (r, _) = exchange_with(kind);
        let e = r.expect_err("an endless body is an error");
        assert!(
            matches!(
                e.kind(),
                std::io::ErrorKind::InvalidData | std::io::ErrorKind::TimedOut
            ),
            "{kind:?}: {e}"
        );
        assert!(e.to_string().contains("body") || e.kind() == std::io::ErrorKind::TimedOut);
    }
}

/// A server that refuses a body on its `Content-Length` answers 413 and closes without reading
/// it; the rest of a large body then meets a broken pipe or a reset. The client must still
/// read the answer the server sent (hyper alone gave up on the write error).
#[test]
fn an_answer_sent_before_the_body_was_read_is_not_lost() {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let server = std::thread::spawn(move || {
        for _ in 0..5 {
            let (mut s, _) = listener.accept().unwrap();
            let mut head = Vec::new();
            let mut b = [0u8; 1];
            while !head.ends_with(b"\r\n\r\n") {
                if s.read(&mut b).unwrap_or(0) == 0 {
                    break;
                }
                head.push(b[0]);
            }
            let _ = s.write_all(
                b"HTTP/1.1 413 Payload Too Large\r\nContent-Length: 8\r\nConnection: close\r\n\r\ntoo long",
            );
            // Closing with the body unread sends a reset.
        }
    });
    let body = vec![b'\n'; 16 << 20];
    for _ in 0..5 {
        let a = dta_http::client::send(
            &addr,
            None,
            &dta_http::client::ClientRequest::new("POST", "/q", &body),
            &dta_http::client::ClientLimits::default(),
        )
        .expect("the 413 the server sent");
        assert_eq!(a.status, 413);
    }
    server.join().unwrap();
}
