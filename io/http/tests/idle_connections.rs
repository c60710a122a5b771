//! 1,000 idle connections (the tiny_http server made 1,007 threads for them): the server keeps
//! `max_connections` open, refuses the rest at once, closes the open ones after the idle
//! timeout, and never runs more than a handful of threads. Alone in its binary, so the
//! thread count is this test's.

mod common;

use std::io::Read;
use std::net::TcpStream;
use std::time::{Duration, Instant};

use common::*;
use dta_http::Limits;

#[test]
fn a_thousand_idle_connections_cost_no_threads_and_time_out() {
    const IDLE: Duration = Duration::from_secs(3);
    let s = serve(Limits {
        header_timeout: IDLE,
        ..Limits::default()
    });
    let addr = s.local_addr();
    assert_eq!(get(addr, "GET", "/", "").0, Some(200));
    let threads_before = threads();
    let (mut max_threads, mut max_open) = (threads_before, 0);
    let t0 = Instant::now();
    let mut conns = Vec::new();
    for i in 0..1000 {
        match TcpStream::connect(addr) {
            Ok(c) => conns.push((Instant::now(), c)),
            Err(e) => panic!("connection {i}: {e}"),
        }
        if i % 20 == 0 {
            max_threads = max_threads.max(threads());
            max_open = max_open.max(s.stats().connections_open);
        }
    }
    let opened = t0.elapsed();
    // The server sees them all: up to 128 held at once, the rest refused at once.
    while s.stats().connections_accepted + s.stats().connections_refused < 1001
        && t0.elapsed() < Duration::from_secs(30)
    {
        max_threads = max_threads.max(threads());
        max_open = max_open.max(s.stats().connections_open);
        std::thread::sleep(Duration::from_millis(10));
    }
    let st = s.stats();
    assert_eq!(
        st.connections_accepted + st.connections_refused,
        1001,
        "{st:?}"
    );
    assert_eq!(max_open, 128, "{st:?}");
    assert!(
        max_threads <= threads_before + 2,
        "threads: {threads_before} before, {max_threads} with 1,000 connections"
    );
    // Every connection ends: refused ones at once (after a 503), held ones after the idle
    // timeout, without an answer.
    let (mut refused, mut idle_closed) = (0, 0);
    for (since, c) in &mut conns {
        c.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        let mut out = Vec::new();
        c.read_to_end(&mut out)
            .expect("the server closes the connection");
        if out.starts_with(b"HTTP/1.1 503") {
            refused += 1;
        } else {
            assert!(out.is_empty(), "{}", String::from_utf8_lossy(&out));
            assert!(
                since.elapsed() >= IDLE - Duration::from_millis(100),
                "an idle connection was closed after {:?}",
                since.elapsed()
            );
            idle_closed += 1;
        }
    }
    let all_closed = t0.elapsed();
    let st = s.stats();
    assert_eq!(
        (refused, idle_closed),
        (st.connections_refused, st.connections_accepted - 1)
    );
    assert!(
        all_closed < opened + IDLE + Duration::from_secs(3),
        "the last connection was closed {all_closed:?} after the first was opened \
         (opening took {opened:?})"
    );
    assert!(wait_until(5, || s.stats().connections_open == 0));
    eprintln!(
        "threads {threads_before} -> at most {max_threads}; 1,000 connections opened in \
         {opened:?} ({refused} refused, {idle_closed} held until idle), all closed after \
         {all_closed:?}"
    );
}
