//! Moving reports between threads: the dispatcher thread (`report_steering = "dispatcher"`),
//! which reads the one report socket and copies each datagram to the worker its source hashes
//! to ([`dispatch_worker`]), and the hand-off mesh ([`HandoffLinks`]) that carries reports a
//! worker does not own to the worker that does. Buffers travel in bursts and are recycled; no
//! lock or allocation per report. What a report does once it arrives is the pipeline's.

use std::net::{Ipv4Addr, SocketAddrV4};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::sync::Arc;
use std::time::{Duration, Instant};

use dta_io::udp::{UdpRx, Waker, MAX_BURST};
use dta_proto::batch::{Datagram, TxBatch};

use super::Worker;
use crate::datapath::pipeline::Handoff;

/// Reports the dispatcher copied for one worker: payloads back to back, with their addresses.
pub struct DispatchBurst {
    data: Vec<u8>,
    /// (source, destination, offset in `data`, length).
    items: Vec<(SocketAddrV4, SocketAddrV4, u32, u32)>,
}

impl DispatchBurst {
    fn new() -> DispatchBurst {
        DispatchBurst {
            data: Vec::with_capacity(MAX_BURST * 256),
            items: Vec::with_capacity(MAX_BURST),
        }
    }

    fn clear(&mut self) {
        self.data.clear();
        self.items.clear();
    }
}

/// Counters of the dispatcher thread, published once per burst.
#[derive(Debug, Default)]
pub struct DispatchStats {
    /// Datagrams the kernel dropped on the report socket (receive buffer full).
    pub socket_drops: AtomicU64,
    /// `recvmmsg` calls.
    pub rx_ios: AtomicU64,
}

/// A worker's end of the dispatcher: bursts in, emptied bursts back.
pub struct DispatchRx {
    rx: Receiver<DispatchBurst>,
    back: SyncSender<DispatchBurst>,
    /// Signalled after each burst queued for this worker (its backend polls it).
    pub(super) waker: Arc<Waker>,
    /// The dispatcher's counters (worker 0 publishes them).
    pub(super) stats: Option<Arc<DispatchStats>>,
}

/// Bursts in flight per worker between the dispatcher and the worker.
const DISPATCH_QUEUE: usize = 64;

/// The worker that gets a reporter's datagrams under `report_steering = "dispatcher"`: a hash
/// of the source address, so one reporter's reports stay on one worker, in order.
pub fn dispatch_worker(src: SocketAddrV4, workers: usize) -> usize {
    let x = (u32::from(*src.ip()) as u64) << 16 | src.port() as u64;
    let h = x.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    ((h >> 32) as usize * workers) >> 32
}

/// The dispatcher thread: reads the one report socket and copies each datagram to its worker.
pub(super) struct Dispatcher {
    rx: UdpRx,
    to: Vec<SyncSender<DispatchBurst>>,
    wakers: Vec<Arc<Waker>>,
    returned: Receiver<DispatchBurst>,
    spare: Vec<DispatchBurst>,
    filling: Vec<DispatchBurst>,
    stats: Arc<DispatchStats>,
    stop: Arc<AtomicBool>,
}

impl Dispatcher {
    /// The dispatcher and one [`DispatchRx`] per worker.
    pub(super) fn new(
        rx: UdpRx,
        workers: usize,
        stop: Arc<AtomicBool>,
    ) -> std::io::Result<(Dispatcher, Vec<DispatchRx>)> {
        let stats = Arc::new(DispatchStats::default());
        let (back, returned) = sync_channel(DISPATCH_QUEUE * workers + workers);
        let mut to = Vec::new();
        let mut wakers = Vec::new();
        let mut ends = Vec::new();
        for w in 0..workers {
            let (s, r) = sync_channel(DISPATCH_QUEUE);
            to.push(s);
            let waker = Arc::new(Waker::new()?);
            wakers.push(waker.clone());
            ends.push(DispatchRx {
                rx: r,
                back: back.clone(),
                waker,
                stats: (w == 0).then(|| stats.clone()),
            });
        }
        let d = Dispatcher {
            rx,
            to,
            wakers,
            returned,
            spare: Vec::new(),
            filling: (0..workers).map(|_| DispatchBurst::new()).collect(),
            stats,
            stop,
        };
        Ok((d, ends))
    }

    pub(super) fn run(mut self) {
        let workers = self.to.len();
        let mut published = Instant::now();
        while !self.stop.load(Ordering::Relaxed) {
            let filling = &mut self.filling;
            let r = self.rx.recv_with(Duration::from_millis(10), |burst| {
                for d in burst {
                    let b = &mut filling[dispatch_worker(d.src, workers)];
                    b.items
                        .push((d.src, d.dst, b.data.len() as u32, d.payload.len() as u32));
                    b.data.extend_from_slice(d.payload);
                }
            });
            if let Err(e) = r {
                log::error!("dispatcher: receive failed: {e}");
                std::thread::sleep(Duration::from_millis(10));
            }
            // The kernel's drop count costs a getsockopt: publish it as often as workers
            // publish their snapshots.
            if published.elapsed() >= Duration::from_millis(20) {
                published = Instant::now();
                let st = self.rx.stats();
                self.stats
                    .socket_drops
                    .store(st.kernel_drops + st.truncated, Ordering::Relaxed);
                self.stats.rx_ios.store(st.ios, Ordering::Relaxed);
            }
            while let Ok(mut b) = self.returned.try_recv() {
                b.clear();
                self.spare.push(b);
            }
            for w in 0..workers {
                if self.filling[w].items.is_empty() {
                    continue;
                }
                let next = self.spare.pop().unwrap_or_else(DispatchBurst::new);
                let full = std::mem::replace(&mut self.filling[w], next);
                // Blocks while the worker is behind: the kernel buffer then absorbs (and
                // counts) the overflow, as with one socket per worker.
                if self.to[w].send(full).is_err() {
                    return;
                }
                self.wakers[w].wake();
            }
        }
    }
}

/// A burst of hand-offs: (sending worker, reports).
type HandoffBurst = (usize, Vec<Handoff>);

/// Channels that carry reports between workers, a burst at a time: one `Vec` per destination
/// per burst, recycled through a return channel, so the per-report cost is a copy into a
/// vector, not a synchronised operation.
pub struct HandoffLinks {
    /// To worker i (None for ourselves).
    to: Vec<Option<SyncSender<HandoffBurst>>>,
    /// Bursts handed to us: (sender, reports).
    from: Receiver<HandoffBurst>,
    /// Emptied vectors going back to worker i.
    give_back: Vec<Option<SyncSender<Vec<Handoff>>>>,
    /// Our emptied vectors coming back.
    returned: Receiver<Vec<Handoff>>,
    spare: Vec<Vec<Handoff>>,
    /// Vectors being filled for each destination this burst.
    outgoing: Vec<Vec<Handoff>>,
}

impl HandoffLinks {
    /// Links for `n` workers, indexed by worker.
    pub fn mesh(n: usize) -> Vec<HandoffLinks> {
        let mut senders = Vec::new();
        let mut receivers = Vec::new();
        let mut ret_senders = Vec::new();
        let mut ret_receivers = Vec::new();
        for _ in 0..n {
            let (s, r) = sync_channel(1024);
            senders.push(s);
            receivers.push(r);
            let (s, r) = sync_channel(1024);
            ret_senders.push(s);
            ret_receivers.push(r);
        }
        receivers
            .into_iter()
            .zip(ret_receivers)
            .enumerate()
            .map(|(w, (from, returned))| HandoffLinks {
                to: (0..n)
                    .map(|i| (i != w).then(|| senders[i].clone()))
                    .collect(),
                from,
                give_back: (0..n)
                    .map(|i| (i != w).then(|| ret_senders[i].clone()))
                    .collect(),
                returned,
                spare: Vec::new(),
                outgoing: (0..n).map(|_| Vec::new()).collect(),
            })
            .collect()
    }
}

impl Worker {
    /// Translates the bursts the dispatcher copied to us and gives the buffers back.
    pub(super) fn take_dispatched(&mut self, now: u64, tx: &mut TxBatch) {
        let Some(d) = &self.dispatched else { return };
        let per_report = self.pipeline.frames_per_report_max();
        while let Ok(b) = d.rx.try_recv() {
            let mut burst = [Datagram {
                src: SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 0),
                dst: SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 0),
                ip: None,
                payload: &[],
            }; MAX_BURST];
            for chunk in b.items.chunks(MAX_BURST) {
                for (slot, &(src, dst, at, len)) in burst.iter_mut().zip(chunk) {
                    *slot = Datagram {
                        src,
                        dst,
                        ip: None,
                        payload: &b.data[at as usize..(at + len) as usize],
                    };
                }
                // Frames that find no room wait in their QP; sending first keeps them few.
                if tx.remaining() < chunk.len() * per_report {
                    let _ = self.backend.send_batch(tx);
                    tx.clear();
                }
                self.pipeline.handle_reports(now, &burst[..chunk.len()], tx);
            }
            let _ = d.back.try_send(b);
        }
    }

    /// Sends reports this worker does not own to their owners and processes what others sent.
    pub(super) fn exchange_handoffs(&mut self, now: u64, tx: &mut TxBatch) {
        let me = self.index;
        let l = &mut self.links;
        while let Ok(v) = l.returned.try_recv() {
            l.spare.push(v);
        }
        for h in self.pipeline.take_handoffs() {
            if l.outgoing[h.worker].capacity() == 0 {
                l.outgoing[h.worker] = l.spare.pop().unwrap_or_else(|| Vec::with_capacity(256));
            }
            l.outgoing[h.worker].push(h);
        }
        let mut dropped = 0;
        for w in 0..l.to.len() {
            if l.outgoing[w].is_empty() {
                continue;
            }
            let v = std::mem::take(&mut l.outgoing[w]);
            let n = v.len() as u64;
            if let Some(Err(e)) = l.to[w].as_ref().map(|s| s.try_send((me, v))) {
                dropped += n;
                let (_, mut v) = match e {
                    std::sync::mpsc::TrySendError::Full(x)
                    | std::sync::mpsc::TrySendError::Disconnected(x) => x,
                };
                v.clear();
                l.spare.push(v);
            }
        }
        if dropped > 0 {
            self.pipeline.count_handoff_drops(dropped);
        }
        let per_report = self.pipeline.frames_per_report_max();
        while let Ok((from, mut v)) = self.links.from.try_recv() {
            for h in &v {
                if tx.remaining() < per_report {
                    let _ = self.backend.send_batch(tx);
                    tx.clear();
                }
                self.pipeline.handle_handoff(now, h, tx);
            }
            v.clear();
            if let Some(back) = self.links.give_back[from].as_ref() {
                let _ = back.try_send(v);
            }
        }
    }
}
