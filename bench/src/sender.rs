//! A paced, batched UDP report sender with flow control towards an in-process receiver.

use std::net::{Ipv4Addr, SocketAddrV4};
use std::time::{Duration, Instant};

use dta_io::udp::{UdpOptions, UdpSocket, UdpTx, MAX_BURST};
use dta_proto::batch::TxBatch;

/// Finds a currently free UDP port on `ip` (bind to 0, read the port, release it).
pub fn free_udp_port(ip: Ipv4Addr) -> Result<u16, String> {
    let s = std::net::UdpSocket::bind(SocketAddrV4::new(ip, 0))
        .map_err(|e| format!("cannot bind {ip}: {e}"))?;
    Ok(s.local_addr().map_err(|e| e.to_string())?.port())
}

/// Sends datagrams in `sendmmsg` bursts at a target rate, never more than `window` ahead of
/// what the receiver reports having taken (so a loopback demo does not overflow socket
/// buffers).
pub struct PacedSender {
    tx: UdpTx,
    dest: SocketAddrV4,
    batch: TxBatch,
    rate: u64,
    window: u64,
    start: Instant,
    /// Datagrams handed to the kernel.
    pub sent: u64,
}

impl PacedSender {
    /// A sender to `dest` at `rate` datagrams/s (0 = unpaced).
    pub fn new(dest: SocketAddrV4, rate: u64) -> Result<PacedSender, String> {
        PacedSender::new_from(Ipv4Addr::LOCALHOST, dest, rate)
    }

    /// A sender bound to `src` (an address of the calling thread's network namespace).
    pub fn new_from(src: Ipv4Addr, dest: SocketAddrV4, rate: u64) -> Result<PacedSender, String> {
        let s = UdpSocket::bind(SocketAddrV4::new(src, 0), &UdpOptions::default())
            .map_err(|e| e.to_string())?;
        let (_, tx) = s.split();
        Ok(PacedSender {
            tx,
            dest,
            // Room for the longest report (a Sketch-Merge report carries up to 1 KiB of cells).
            batch: TxBatch::new(MAX_BURST, 2048),
            rate,
            window: 8192,
            start: Instant::now(),
            sent: 0,
        })
    }

    /// Sets how many datagrams may be in flight beyond what the receiver has taken.
    pub fn set_window(&mut self, w: u64) {
        self.window = w.max(MAX_BURST as u64);
    }

    /// Queues one datagram; sends a burst when the batch is full. `received` reports how many
    /// datagrams the receiver has taken so far.
    pub fn push(&mut self, payload: &[u8], received: impl Fn() -> u64) -> Result<(), String> {
        let dest = self.dest;
        self.batch.push_with(dest, 0, |b| {
            b[..payload.len()].copy_from_slice(payload);
            payload.len()
        });
        if self.batch.is_full() {
            self.flush(received)?;
        }
        Ok(())
    }

    /// Sends whatever is queued.
    pub fn flush(&mut self, received: impl Fn() -> u64) -> Result<(), String> {
        if self.batch.is_empty() {
            return Ok(());
        }
        let n = self.batch.len() as u64;
        // Flow control: wait for the receiver to catch up.
        let t = Instant::now();
        while self.sent + n > received() + self.window {
            if t.elapsed() > Duration::from_secs(10) {
                return Err(format!(
                    "receiver stalled: sent {} but it took only {}",
                    self.sent,
                    received()
                ));
            }
            std::thread::sleep(Duration::from_micros(50));
        }
        if self.rate > 0 {
            let due = Duration::from_secs_f64((self.sent + n) as f64 / self.rate as f64);
            let el = self.start.elapsed();
            if due > el {
                std::thread::sleep(due - el);
            }
        }
        self.tx.send_batch(&self.batch).map_err(|e| e.to_string())?;
        self.sent += n;
        self.batch.clear();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sends_datagrams_as_long_as_a_sketch_report() {
        // `dta gen-sketch --target` and `dta gen --traffic --target` send Sketch-Merge reports
        // of up to 1 KiB of cells; a 256-byte batch slot made the first one panic.
        let rx = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        rx.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let std::net::SocketAddr::V4(dest) = rx.local_addr().unwrap() else {
            panic!("IPv4 expected");
        };
        let mut s = PacedSender::new(dest, 0).unwrap();
        let big = vec![0xA5u8; dta_proto::wire::sketch::MAX_SKETCH_REPORT_LEN];
        s.push(&big, || 0).unwrap();
        s.push(b"small", || 0).unwrap();
        s.flush(|| 0).unwrap();
        let mut b = [0u8; 2048];
        let n = rx.recv(&mut b).unwrap();
        assert_eq!(&b[..n], &big[..]);
        let n = rx.recv(&mut b).unwrap();
        assert_eq!(&b[..n], b"small");
        assert_eq!(s.sent, 2);
    }
}
