//! Servers that misbehave on purpose, for the clients' tests: each accepts connections,
//! reads what the client sends, and then never answers, sends header lines forever, sends a
//! body forever, announces a huge body, or drips a byte at a time.
#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How the server misbehaves after reading the request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hostile {
    /// Never sends a byte.
    Silent,
    /// A status line, then header lines forever.
    EndlessHeaders,
    /// A status line and headers without a length, then body bytes forever.
    EndlessBody,
    /// `Content-Length: 10^12`, then body bytes forever.
    HugeLength,
    /// A status line one byte every 100 ms, forever.
    Drip,
}

/// A hostile server on 127.0.0.1; it stops (and its connections close) when dropped.
pub struct HostileServer {
    pub addr: SocketAddr,
    stop: Arc<AtomicBool>,
}

impl Drop for HostileServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        let _ = TcpStream::connect(self.addr);
    }
}

impl HostileServer {
    pub fn start(kind: Hostile) -> HostileServer {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let st = stop.clone();
        std::thread::spawn(move || {
            for c in l.incoming() {
                if st.load(Ordering::Relaxed) {
                    return;
                }
                let Ok(c) = c else { continue };
                let st = st.clone();
                std::thread::spawn(move || misbehave(c, kind, &st));
            }
        });
        HostileServer { addr, stop }
    }
}

fn misbehave(mut c: TcpStream, kind: Hostile, stop: &AtomicBool) {
    // Take the request (whatever arrives in the first moments).
    c.set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    let mut buf = [0u8; 4096];
    let _ = c.read(&mut buf);
    let t0 = Instant::now();
    let alive = || !stop.load(Ordering::Relaxed) && t0.elapsed() < Duration::from_secs(120);
    // At most about 16 MB/s: a client without bounds grows, but the machine survives.
    let chunk = |c: &mut TcpStream, b: &[u8]| -> bool {
        std::thread::sleep(Duration::from_millis(4));
        c.write_all(b).is_ok()
    };
    match kind {
        Hostile::Silent => {
            c.set_read_timeout(Some(Duration::from_millis(100)))
                .unwrap();
            while alive() {
                match c.read(&mut buf) {
                    Ok(0) => return,
                    Ok(_) => {}
                    Err(_) => {}
                }
            }
        }
        Hostile::EndlessHeaders => {
            let _ = c.write_all(b"HTTP/1.1 200 OK\r\n");
            let line = format!("X-Pad: {}\r\n", "a".repeat(1000));
            let block = line.repeat(64);
            while alive() && chunk(&mut c, block.as_bytes()) {}
        }
        Hostile::EndlessBody | Hostile::HugeLength => {
            let head: &[u8] = if kind == Hostile::HugeLength {
                b"HTTP/1.1 200 OK\r\nContent-Length: 1000000000000\r\n\r\n"
            } else {
                b"HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\n\r\n"
            };
            let _ = c.write_all(head);
            let block = vec![b'x'; 64 << 10];
            while alive() && chunk(&mut c, &block) {}
        }
        Hostile::Drip => {
            let line =
                b"HTTP/1.1 200 OK\r\nX-Slow: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
            for b in line.iter().cycle() {
                if !alive() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(100));
                if c.write_all(&[*b]).is_err() {
                    return;
                }
            }
        }
    }
}

/// Runs `f` on a thread and returns its result, or panics if it has not returned within
/// `limit`: a client that is not cut off.
pub fn within<T: Send + 'static>(
    limit: Duration,
    what: &str,
    f: impl FnOnce() -> T + Send + 'static,
) -> (T, Duration) {
    let (tx, rx) = std::sync::mpsc::channel();
    let t0 = Instant::now();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    match rx.recv_timeout(limit) {
        Ok(v) => (v, t0.elapsed()),
        Err(_) => panic!("{what}: the client was not cut off within {limit:?}"),
    }
}
