//! Helpers shared by the server's tests.
#![allow(dead_code)]

pub mod hostile;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::time::Duration;

use dta_http::{Handler, Limits, Response, Server, ServerOptions};

/// A handler answering `200 <method> <target> <access> <body length>`.
pub fn echo() -> Handler {
    Arc::new(|r: dta_http::Request| {
        Response::text(
            200,
            format!("{} {} {:?} {}", r.method, r.target, r.access, r.body.len()),
        )
    })
}

pub fn serve(limits: Limits) -> Server {
    serve_with(ServerOptions {
        limits,
        ..ServerOptions::default()
    })
}

pub fn serve_with(opts: ServerOptions) -> Server {
    Server::spawn("127.0.0.1:0".parse().unwrap(), opts, echo()).unwrap()
}

/// Sends raw bytes and returns the status of the answer (None: closed without one).
pub fn raw(addr: SocketAddr, bytes: &[u8]) -> (Option<u16>, String) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let _ = s.write_all(bytes);
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    let text = String::from_utf8_lossy(&out).into_owned();
    let status = text
        .strip_prefix("HTTP/1.")
        .and_then(|t| t.get(2..5))
        .and_then(|s| s.parse().ok());
    (status, text)
}

/// A one-request HTTP/1.0 exchange with extra header lines.
pub fn get(addr: SocketAddr, method: &str, path: &str, headers: &str) -> (Option<u16>, String) {
    raw(
        addr,
        format!("{method} {path} HTTP/1.0\r\nHost: {addr}\r\n{headers}\r\n").as_bytes(),
    )
}

/// The process's resident memory (kB) from /proc/self/status.
pub fn vm_rss_kb() -> u64 {
    status_field("VmRSS:")
}

/// The process's thread count from /proc/self/status.
pub fn threads() -> u64 {
    status_field("Threads:")
}

fn status_field(name: &str) -> u64 {
    let s = std::fs::read_to_string("/proc/self/status").unwrap();
    s.lines()
        .find_map(|l| l.strip_prefix(name))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap()
}

/// Polls `cond` every 10 ms for up to `secs` seconds; returns its last value.
pub fn wait_until(secs: u64, mut cond: impl FnMut() -> bool) -> bool {
    let t0 = std::time::Instant::now();
    while !cond() {
        if t0.elapsed() > Duration::from_secs(secs) {
            return false;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    true
}
