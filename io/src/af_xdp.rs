//! AF_XDP backend: one socket on one interface queue, fed by our own steering program.
//!
//! Set-up (control plane, once): the UMEM (`frame_count` frames of `frame_size` bytes) is
//! split in two halves, receive frames (all handed to the fill ring at once) and transmit
//! frames (a free list). The socket is created with libxdp's default program inhibited, and
//! [`XdpSteering`](crate::xdp_prog::XdpSteering) attaches a program that redirects only UDP to
//! the configured ports (the DTA report port(s) and 4791) to this socket's queue slot; ARP and
//! everything else goes on to the kernel's stack.
//!
//! Hot path: `recv_with` takes up to `rx_batch` descriptors from the RX ring without a syscall,
//! parses the frames in place in the UMEM, hands the datagrams over, and gives the frames back
//! to the fill ring; it only calls `poll` when the ring is empty (and wakes the kernel when the
//! fill ring asks for it). `send_batch` reaps the completion ring into the free list, copies
//! each frame into a free UMEM frame, produces the descriptors in batches of `tx_batch` and
//! kicks the kernel (in copy mode, once per slice of frames the kernel sends per call).

use std::io::{self, Write};
use std::num::NonZeroU32;
use std::os::fd::AsRawFd;
use std::str::FromStr;
use std::time::{Duration, Instant};

use dta_proto::batch::{Datagram, TxBatch};
use xsk_rs::config::{
    BindFlags, FrameSize, Interface, LibxdpFlags, QueueSize, SocketConfig, UmemConfig,
};
use xsk_rs::{CompQueue, FillQueue, FrameDesc, RxQueue, Socket, TxQueue, Umem};

use crate::backend::{Backend, BackendStats};
use crate::frame::{parse_udp_frame, FrameFilter, FrameStats, PeerMacs};
pub use crate::xdp_prog::XdpMode;
use crate::xdp_prog::{ifindex, XdpSteering};

/// Largest receive burst.
pub const MAX_BURST: usize = 256;

/// Configuration of an [`AfXdpBackend`].
#[derive(Debug, Clone)]
pub struct AfXdpConfig {
    /// Interface name.
    pub ifname: String,
    /// Receive queue of the interface to bind.
    pub queue: u32,
    /// UDP destination ports steered to the socket (report port(s) and 4791).
    pub ports: Vec<u16>,
    /// Generic (SKB) or native XDP.
    pub mode: XdpMode,
    /// Zero-copy (needs native mode and driver support) instead of copy mode.
    pub zero_copy: bool,
    /// Let the kernel sleep until woken (`XDP_USE_NEED_WAKEUP`).
    pub need_wakeup: bool,
    /// UMEM frames (half receive, half transmit); a power of two.
    pub frame_count: u32,
    /// Bytes per UMEM frame (2048 or 4096).
    pub frame_size: u32,
    /// Descriptors per ring (RX, TX, fill, completion); a power of two.
    pub ring_size: u32,
    /// Most frames taken from the RX ring per `recv_with` (1..=[`MAX_BURST`]).
    pub rx_batch: usize,
    /// Most frames produced to the TX ring per kick.
    pub tx_batch: usize,
    /// Checksum checks applied to received frames (the port list comes from `ports`).
    pub filter: FrameFilter,
}

impl AfXdpConfig {
    /// Defaults for interface `ifname`, queue 0, serving `ports`.
    pub fn new(ifname: &str, ports: &[u16]) -> AfXdpConfig {
        AfXdpConfig {
            ifname: ifname.to_string(),
            queue: 0,
            ports: ports.to_vec(),
            mode: XdpMode::Native,
            zero_copy: false,
            need_wakeup: true,
            frame_count: 8192,
            frame_size: 2048,
            ring_size: 4096,
            rx_batch: 64,
            tx_batch: 64,
            filter: FrameFilter::default(),
        }
    }
}

fn invalid(msg: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, msg)
}

/// Socket counters the kernel keeps (`XDP_STATISTICS`).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct XskKernelStats {
    /// Dropped for reasons other than invalid descriptors (e.g. no room in the RX ring).
    pub rx_dropped: u64,
    /// Dropped because the RX ring was full.
    pub rx_ring_full: u64,
    /// Times the fill ring was empty when the kernel wanted a frame.
    pub rx_fill_ring_empty: u64,
    /// Invalid descriptors seen.
    pub invalid_descs: u64,
}

/// Frames the kernel transmits per `sendto` in copy mode (`TX_BATCH_SIZE`, the default of
/// `XDP_MAX_TX_SKB_BUDGET`).
pub const COPY_TX_BATCH: usize = 32;

/// Copy mode: outstanding frames with no completion for this long since the last kick are
/// kicked again.
pub const REKICK_AFTER: Duration = Duration::from_micros(200);

/// An AF_XDP socket as a [`Backend`].
pub struct AfXdpBackend {
    // Field order is drop order: queues (and so the socket) before the UMEM, the steering
    // program last.
    rx: RxQueue,
    tx: TxQueue,
    fq: FillQueue,
    cq: CompQueue,
    umem: Umem,
    steering: XdpSteering,
    rx_descs: Vec<FrameDesc>,
    tx_free: Vec<FrameDesc>,
    tx_pending: Vec<FrameDesc>,
    done: Vec<FrameDesc>,
    cfg: AfXdpConfig,
    tx_frame_max: usize,
    in_flight: usize,
    /// Copy mode: frames produced into the TX ring and not yet kicked.
    unkicked: usize,
    /// Copy mode: when the TX ring was last kicked.
    last_kick: Instant,
    stats: BackendStats,
    drops: FrameStats,
    peer_macs: PeerMacs,
}

// SAFETY: the queues and UMEM are used only by the thread that owns the backend; xsk-rs makes
// its ring handles Send, and the steering program is plain file descriptors.
unsafe impl Send for AfXdpBackend {}

impl AfXdpBackend {
    /// Creates the UMEM and socket, loads and attaches the steering program, and fills the
    /// fill ring.
    pub fn open(cfg: AfXdpConfig) -> io::Result<AfXdpBackend> {
        let mut filter = FrameFilter::ports(&cfg.ports).ok_or_else(|| {
            invalid(format!(
                "at most {} ports can be served",
                crate::frame::MAX_PORTS
            ))
        })?;
        filter.verify_ip_checksum = cfg.filter.verify_ip_checksum;
        filter.verify_udp_checksum = cfg.filter.verify_udp_checksum;
        if cfg.ports.is_empty() {
            return Err(invalid("no UDP port to steer".into()));
        }
        if !cfg.frame_count.is_power_of_two() || cfg.frame_count < 2 {
            return Err(invalid("frame_count must be a power of two ≥ 2".into()));
        }
        let ring = QueueSize::new(cfg.ring_size).map_err(|e| invalid(e.to_string()))?;
        let fsize = FrameSize::new(cfg.frame_size).map_err(|e| invalid(e.to_string()))?;
        let umem_cfg = UmemConfig::builder()
            .frame_size(fsize)
            .fill_queue_size(ring)
            .comp_queue_size(ring)
            .build()
            .map_err(|e| invalid(e.to_string()))?;
        let tx_frame_max = umem_cfg.mtu() as usize;
        let count = NonZeroU32::new(cfg.frame_count).expect("checked above");
        let (umem, mut frames) =
            Umem::new(umem_cfg, count, false).map_err(|e| io::Error::other(e.to_string()))?;

        let mut bind = if cfg.zero_copy {
            BindFlags::XDP_ZEROCOPY
        } else {
            BindFlags::XDP_COPY
        };
        if cfg.need_wakeup {
            bind |= BindFlags::XDP_USE_NEED_WAKEUP;
        }
        let sock_cfg = SocketConfig::builder()
            .rx_queue_size(ring)
            .tx_queue_size(ring)
            .libxdp_flags(LibxdpFlags::XSK_LIBXDP_FLAGS_INHIBIT_PROG_LOAD)
            .bind_flags(bind)
            .build();
        let iface = Interface::from_str(&cfg.ifname).map_err(|e| invalid(e.to_string()))?;
        let index = ifindex(&cfg.ifname)?;
        // The program goes on first: binding in native mode needs the driver in XDP mode.
        let steering = XdpSteering::attach(index, &cfg.ports, cfg.mode, cfg.queue + 1)?;
        // A socket closed just before on the same queue is released by deferred kernel work,
        // and binding fails (EBUSY) until then: retry for up to a second.
        let mut attempt = 0;
        let (tx, rx, fq_cq) = loop {
            // SAFETY: the UMEM is not shared with another socket, so the inhibit-flag
            // condition of Socket::new does not arise; the UMEM outlives the queues (field
            // order).
            match unsafe { Socket::new(sock_cfg, &umem, &iface, cfg.queue) } {
                Ok(q) => break q,
                Err(e) => {
                    let os = std::error::Error::source(&e)
                        .and_then(|s| s.downcast_ref::<io::Error>())
                        .and_then(io::Error::raw_os_error);
                    if os == Some(libc::EBUSY) && attempt < 20 {
                        attempt += 1;
                        std::thread::sleep(Duration::from_millis(50));
                        continue;
                    }
                    let why = os
                        .map(|c| io::Error::from_raw_os_error(c).to_string())
                        .unwrap_or_default();
                    return Err(io::Error::other(format!(
                        "AF_XDP socket on {} queue {} ({}): {e}: {why}",
                        cfg.ifname,
                        cfg.queue,
                        if cfg.zero_copy { "zero-copy" } else { "copy" }
                    )));
                }
            }
        };
        let (mut fq, cq) =
            fq_cq.ok_or_else(|| io::Error::other("UMEM fill/completion rings missing"))?;
        steering.register(cfg.queue, rx.fd().as_raw_fd())?;

        let half = frames.len() / 2;
        let tx_free = frames.split_off(half);
        // SAFETY: the receive frames belong to this UMEM and are in no other ring.
        let n = unsafe { fq.produce(&frames) };
        if n != frames.len() {
            return Err(io::Error::other(format!(
                "fill ring took {n} of {} frames (ring_size must be ≥ frame_count / 2)",
                frames.len()
            )));
        }
        let zero = frames[0];
        let rx_batch = cfg.rx_batch.clamp(1, MAX_BURST);
        let tx_batch = cfg.tx_batch.max(1);
        let cfg = AfXdpConfig {
            rx_batch,
            tx_batch,
            filter,
            ..cfg
        };
        Ok(AfXdpBackend {
            rx,
            tx,
            fq,
            cq,
            tx_frame_max,
            steering,
            rx_descs: vec![zero; rx_batch],
            tx_pending: Vec::with_capacity(tx_batch),
            done: vec![zero; tx_free.len()],
            tx_free,
            umem,
            cfg,
            in_flight: 0,
            unkicked: 0,
            last_kick: Instant::now(),
            stats: BackendStats::default(),
            drops: FrameStats::default(),
            peer_macs: PeerMacs::default(),
        })
    }

    /// The peers' MACs learned while answering to sender MACs.
    pub fn peer_macs(&self) -> &PeerMacs {
        &self.peer_macs
    }

    /// Frames dropped by reason (after the XDP program's port steering).
    pub fn frame_stats(&self) -> FrameStats {
        self.drops
    }

    /// The kernel's counters for this socket.
    pub fn kernel_stats(&self) -> io::Result<XskKernelStats> {
        let s = self.rx.fd().xdp_statistics()?;
        Ok(XskKernelStats {
            rx_dropped: s.rx_dropped(),
            rx_ring_full: s.rx_ring_full(),
            rx_fill_ring_empty: s.rx_fill_ring_empty_descs(),
            invalid_descs: s.rx_invalid_descs() + s.tx_invalid_descs(),
        })
    }

    /// The interface index the steering program is attached to.
    pub fn ifindex(&self) -> u32 {
        self.steering.ifindex()
    }

    fn reap_completions(&mut self) {
        if self.in_flight == 0 {
            return;
        }
        // SAFETY: completed descriptors are frames of this UMEM the kernel has finished with.
        let n = unsafe { self.cq.consume(&mut self.done[..self.in_flight]) };
        self.in_flight -= n;
        self.tx_free.extend_from_slice(&self.done[..n]);
    }

    fn kick_tx(&mut self) -> io::Result<()> {
        if self.tx_pending.is_empty() {
            return Ok(());
        }
        let mut stalls = 0;
        loop {
            // SAFETY: the pending frames belong to this UMEM and were written above; they are
            // in no other ring until the completion ring returns them.
            let n = unsafe { self.tx.produce(&self.tx_pending) };
            if n == self.tx_pending.len() {
                break;
            }
            // The TX ring is full: let the kernel drain it.
            stalls += 1;
            self.tx.wakeup()?;
            self.reap_completions();
            if stalls > 1000 {
                let k = self.tx_pending.len();
                self.stats.tx_errors += k as u64;
                self.tx_free.append(&mut self.tx_pending);
                return Err(io::Error::new(
                    io::ErrorKind::WouldBlock,
                    "AF_XDP TX ring full",
                ));
            }
        }
        self.in_flight += self.tx_pending.len();
        self.unkicked += self.tx_pending.len();
        self.tx_pending.clear();
        self.stats.tx_ios += 1;
        if self.cfg.zero_copy {
            self.unkicked = 0;
            if self.tx.needs_wakeup() {
                self.tx.wakeup()?;
            }
            return Ok(());
        }
        self.kick_copy_mode()
    }

    /// Copy mode transmits inside `sendto`, at most [`COPY_TX_BATCH`] frames per call: one
    /// call per such slice of what was produced since the last kick. Completions are not
    /// waited for: they arrive when the device frees each skb, which on veth with a threaded
    /// peer (or a NIC's TX interrupt) is later, and kicking until they did cost up to six
    /// `sendto` calls per flush where one sufficed. Frames a busy device left in the ring are
    /// kicked again by [`AfXdpBackend::rekick_if_stuck`].
    fn kick_copy_mode(&mut self) -> io::Result<()> {
        for _ in 0..self.unkicked.div_ceil(COPY_TX_BATCH).max(1) {
            self.tx.wakeup()?;
        }
        self.unkicked = 0;
        self.last_kick = Instant::now();
        self.reap_completions();
        Ok(())
    }

    /// Copy mode: reaps completions, and kicks the TX ring again if frames are outstanding
    /// and none completed for [`REKICK_AFTER`] since the last kick (the device refused some,
    /// e.g. a full veth peer queue, and they still sit in the ring).
    fn rekick_if_stuck(&mut self) -> io::Result<()> {
        if self.in_flight == 0 || self.cfg.zero_copy {
            return Ok(());
        }
        let before = self.in_flight;
        self.reap_completions();
        if self.in_flight == before
            && self.in_flight > 0
            && self.last_kick.elapsed() >= REKICK_AFTER
        {
            self.stats.tx_ios += 1;
            self.tx.wakeup()?;
            self.last_kick = Instant::now();
        }
        Ok(())
    }
}

impl Backend for AfXdpBackend {
    fn name(&self) -> &'static str {
        "af_xdp"
    }

    fn l2_frames(&self) -> bool {
        true
    }

    fn recv_with(
        &mut self,
        timeout: Duration,
        f: &mut dyn FnMut(&[Datagram<'_>]),
    ) -> io::Result<usize> {
        self.rekick_if_stuck()?;
        // SAFETY: the RX ring hands back frames of this UMEM; descriptors go into our array.
        let mut n = unsafe { self.rx.consume(&mut self.rx_descs) };
        if n == 0 {
            if self.cfg.need_wakeup && self.fq.needs_wakeup() {
                self.fq.wakeup(self.rx.fd_mut(), 0)?;
            }
            // With frames outstanding, wake within a millisecond to check on them.
            let timeout = if self.in_flight > 0 && !self.cfg.zero_copy {
                timeout.min(Duration::from_millis(1))
            } else {
                timeout
            };
            let ms = timeout.as_millis().min(i32::MAX as u128) as i32;
            if !self.rx.poll(ms)? {
                return Ok(0);
            }
            // SAFETY: as above.
            n = unsafe { self.rx.consume(&mut self.rx_descs) };
            if n == 0 {
                return Ok(0);
            }
        }
        let empty = Datagram {
            src: std::net::SocketAddrV4::new(std::net::Ipv4Addr::UNSPECIFIED, 0),
            dst: std::net::SocketAddrV4::new(std::net::Ipv4Addr::UNSPECIFIED, 0),
            ip: None,
            payload: &[],
        };
        let mut burst = [empty; MAX_BURST];
        let mut k = 0;
        for d in &self.rx_descs[..n] {
            // SAFETY: the descriptor came from the RX ring of this UMEM and the frame stays
            // ours (not in the fill ring) until it is produced back below, after `f` returns.
            let data = unsafe { self.umem.data(d) }.contents();
            match parse_udp_frame(data, &self.cfg.filter) {
                Ok(dg) => {
                    self.stats.rx_bytes += dg.payload.len() as u64;
                    if self.peer_macs.enabled() {
                        self.peer_macs.learn(data);
                    }
                    burst[k] = dg;
                    k += 1;
                }
                Err(why) => {
                    self.drops.count(why);
                    self.stats.rx_dropped += 1;
                }
            }
        }
        self.stats.rx_ios += 1;
        self.stats.rx_packets += k as u64;
        if k > 0 {
            f(&burst[..k]);
        }
        // SAFETY: these frames were consumed from the RX ring above and nothing refers to
        // them any more (`burst` is dead); the fill ring has room for every receive frame.
        let back = unsafe { self.fq.produce(&self.rx_descs[..n]) };
        if back != n {
            // Cannot happen with ring_size ≥ frame_count / 2; count rather than lose track.
            self.stats.rx_dropped += (n - back) as u64;
        }
        Ok(k)
    }

    fn send_batch(&mut self, batch: &TxBatch) -> io::Result<usize> {
        self.reap_completions();
        let mut sent = 0;
        for i in 0..batch.len() {
            let frame = batch.frame(i);
            if frame.len() > self.tx_frame_max {
                self.stats.tx_errors += 1;
                continue;
            }
            if self.tx_free.is_empty() {
                self.kick_tx()?;
                let mut spins = 0;
                while self.tx_free.is_empty() && spins < 10_000 {
                    self.reap_completions();
                    if self.tx_free.is_empty() {
                        self.tx.wakeup()?;
                    }
                    spins += 1;
                }
                if self.tx_free.is_empty() {
                    self.stats.tx_errors += (batch.len() - i) as u64;
                    break;
                }
            }
            let mut d = self.tx_free.pop().expect("checked non-empty");
            // SAFETY: `d` came from the free list: a frame of this UMEM that is in no ring.
            let mut data = unsafe { self.umem.data_mut(&mut d) };
            let mut c = data.cursor();
            c.set_pos(0);
            c.write_all(frame)?;
            if self.peer_macs.enabled() {
                self.peer_macs
                    .address(&mut data.contents_mut()[..frame.len()]);
            }
            self.tx_pending.push(d);
            self.stats.tx_bytes += frame.len() as u64;
            sent += 1;
            if self.tx_pending.len() >= self.cfg.tx_batch {
                self.kick_tx()?;
            }
        }
        self.kick_tx()?;
        self.stats.tx_packets += sent as u64;
        Ok(sent)
    }

    fn stats(&self) -> BackendStats {
        self.stats
    }

    fn answer_to_sender_mac(&mut self, on: bool) -> bool {
        self.peer_macs.set_enabled(on);
        true
    }
}
