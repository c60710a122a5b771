//! 50 connections each sending 4 MB of a header that never ends (the attack that took the
//! tiny_http server from 9 MB to 220 MB): the server's resident memory grows by less than
//! 20 MB, and every connection gets 431 or is closed. Alone in its binary, so no other test's
//! memory is counted.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::*;
use dta_http::Limits;

const CONNECTIONS: usize = 50;
const HEADER_BYTES: usize = 4 << 20;

#[test]
fn unterminated_4mb_headers_cost_bounded_memory() {
    let s = serve(Limits::default());
    let addr = s.local_addr();
    // Warm up: the runtime, a connection and a request have been through once.
    assert_eq!(get(addr, "GET", "/", "").0, Some(200));
    let before = vm_rss_kb();
    // Each sender writes from one shared 64 KiB block, so the test's own memory stays flat.
    static BLOCK: [u8; 64 << 10] = [b'a'; 64 << 10];
    let senders: Vec<_> = (0..CONNECTIONS)
        .map(|_| {
            std::thread::spawn(move || {
                let mut c = TcpStream::connect(addr).unwrap();
                c.set_write_timeout(Some(Duration::from_secs(20))).unwrap();
                c.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
                let mut sent = 0;
                if c.write_all(b"GET / HTTP/1.1\r\nHost: x\r\nX-Flood: ")
                    .is_ok()
                {
                    while sent < HEADER_BYTES {
                        match c.write(&BLOCK) {
                            Ok(n) => sent += n,
                            Err(_) => break, // the server closed: expected
                        }
                    }
                }
                let mut answer = Vec::new();
                let _ = c.read_to_end(&mut answer);
                (sent, answer)
            })
        })
        .collect();
    // Sample the resident memory every millisecond while the attack runs.
    let done = Arc::new(AtomicBool::new(false));
    let sampler = {
        let done = done.clone();
        std::thread::spawn(move || {
            let mut peak = 0;
            while !done.load(Ordering::Relaxed) {
                peak = peak.max(vm_rss_kb());
                std::thread::sleep(Duration::from_millis(1));
            }
            peak
        })
    };
    let results: Vec<(usize, Vec<u8>)> = senders.into_iter().map(|t| t.join().unwrap()).collect();
    done.store(true, Ordering::Relaxed);
    let after = vm_rss_kb();
    let peak = sampler.join().unwrap().max(after);
    for (sent, answer) in &results {
        assert!(
            answer.is_empty() || answer.starts_with(b"HTTP/1.1 431"),
            "after {sent} bytes: {}",
            String::from_utf8_lossy(&answer[..answer.len().min(80)])
        );
    }
    let got_431 = results.iter().filter(|(_, a)| !a.is_empty()).count();
    eprintln!(
        "VmRSS {before} kB -> peak {peak} kB, after {after} kB; {got_431} of {CONNECTIONS} \
         connections read a 431, the rest were closed"
    );
    assert!(
        peak - before < 20 << 10,
        "resident memory grew by {} kB",
        peak - before
    );
    // The server still answers.
    assert_eq!(get(addr, "GET", "/", "").0, Some(200));
}
