//! Kernel UDP backend: batched receive with `recvmmsg` and batched send with `sendmmsg`.
//!
//! One `poll` plus one `recvmmsg` per burst of up to [`MAX_BURST`] datagrams, one `sendmmsg` per
//! transmit batch: the per-packet cost is a copy, not a syscall. The socket:
//! - reports each datagram's destination address (`IP_PKTINFO`), so a socket bound to
//!   `0.0.0.0` still knows which local address a report or RoCEv2 request was sent to (a
//!   socket bound to a concrete address skips the per-datagram control message);
//! - counts datagrams the kernel dropped because the receive buffer was full, which an
//!   operator must see: read with `SO_MEMINFO` when the statistics are asked for, rather than
//!   with a per-datagram `SO_RXQ_OVFL` control message (which cost ~10% of a worker's time);
//! - sends with the don't-fragment bit (`IP_PMTUDISC_DO`) from an unconnected socket, for which
//!   Linux sets the IPv4 identification to 0. The RoCEv2 ICRC covers both fields, so frames
//!   sealed with ident 0 and DF (see `dta_proto::wire::roce::RoceEndpoint`) leave the kernel
//!   exactly as they were sealed.

use std::io;
use std::mem::{size_of, MaybeUninit};
use std::net::{Ipv4Addr, SocketAddrV4};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::Arc;
use std::time::Duration;

use dta_proto::batch::{Datagram, TxBatch};

/// Largest burst one `recvmmsg`/`sendmmsg` call handles.
pub const MAX_BURST: usize = 64;
/// Receive buffer per datagram (a jumbo RoCEv2 frame fits).
pub const RX_SLOT: usize = 9216;

/// Socket options for [`UdpSocket::bind`].
#[derive(Debug, Clone)]
pub struct UdpOptions {
    /// Requested kernel receive buffer in bytes (`SO_RCVBUF`, forced when privileged).
    pub rcvbuf: usize,
    /// Requested kernel send buffer in bytes.
    pub sndbuf: usize,
    /// Set `SO_REUSEPORT` so several workers can bind the same port.
    pub reuse_port: bool,
}

impl Default for UdpOptions {
    fn default() -> Self {
        UdpOptions {
            rcvbuf: 8 << 20,
            sndbuf: 8 << 20,
            reuse_port: false,
        }
    }
}

/// A bound UDP socket; split it into a receiving and a sending half.
pub struct UdpSocket {
    fd: Arc<OwnedFd>,
    local: SocketAddrV4,
}

impl UdpSocket {
    /// Binds a UDP socket with the given options.
    pub fn bind(addr: SocketAddrV4, opts: &UdpOptions) -> io::Result<UdpSocket> {
        // SAFETY: plain socket(2) call; the result is checked.
        let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: fd is a fresh, valid descriptor we own.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        let raw = fd.as_raw_fd();
        if opts.reuse_port {
            setsockopt(raw, libc::SOL_SOCKET, libc::SO_REUSEPORT, 1)?;
        }
        if addr.ip().is_unspecified() {
            setsockopt(raw, libc::IPPROTO_IP, libc::IP_PKTINFO, 1)?;
        }
        setsockopt(
            raw,
            libc::IPPROTO_IP,
            libc::IP_MTU_DISCOVER,
            libc::IP_PMTUDISC_DO,
        )?;
        set_buf(raw, libc::SO_RCVBUF, libc::SO_RCVBUFFORCE, opts.rcvbuf);
        set_buf(raw, libc::SO_SNDBUF, libc::SO_SNDBUFFORCE, opts.sndbuf);
        let sa = to_sockaddr(addr);
        // SAFETY: sa is a valid sockaddr_in of the given size.
        let r = unsafe {
            libc::bind(
                raw,
                &sa as *const libc::sockaddr_in as *const libc::sockaddr,
                size_of::<libc::sockaddr_in>() as u32,
            )
        };
        if r < 0 {
            return Err(io::Error::last_os_error());
        }
        let local = local_addr(raw)?;
        Ok(UdpSocket {
            fd: Arc::new(fd),
            local,
        })
    }

    /// The bound address (with the kernel-chosen port if 0 was asked for).
    pub fn local_addr(&self) -> SocketAddrV4 {
        self.local
    }

    /// The socket's receive buffer size as the kernel reports it.
    pub fn rcvbuf(&self) -> usize {
        getsockopt(self.fd.as_raw_fd(), libc::SOL_SOCKET, libc::SO_RCVBUF).unwrap_or(0) as usize
    }

    /// Splits into a receiver and a sender that share the socket.
    pub fn split(self) -> (UdpRx, UdpTx) {
        (
            UdpRx::new(self.fd.clone(), self.local),
            UdpTx::new(self.fd, self.local),
        )
    }
}

impl AsRawFd for UdpSocket {
    fn as_raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

/// Receive-side statistics.
#[derive(Debug, Default, Clone, Copy)]
pub struct RxStats {
    /// Datagrams received.
    pub datagrams: u64,
    /// Bytes received.
    pub bytes: u64,
    /// `recvmmsg` calls that returned data (batching shows as `ios` < `datagrams`).
    pub ios: u64,
    /// Datagrams the kernel dropped on this socket, mostly because its buffer was full
    /// (`SO_MEMINFO`'s drop count, read by [`UdpRx::stats`]).
    pub kernel_drops: u64,
    /// Datagrams larger than the receive slot (truncated, dropped).
    pub truncated: u64,
}

/// The receiving half: a reusable burst of receive buffers.
pub struct UdpRx {
    fd: Arc<OwnedFd>,
    local: SocketAddrV4,
    bufs: Vec<u8>,
    names: Vec<libc::sockaddr_in>,
    iovs: Vec<libc::iovec>,
    ctrl: Vec<[u64; 16]>,
    hdrs: Vec<libc::mmsghdr>,
    stats: RxStats,
}

// SAFETY: the raw pointers inside the mmsghdr/iovec arrays point into buffers owned by the same
// struct and are rebuilt before every call; moving the struct to another thread is fine.
unsafe impl Send for UdpRx {}

impl UdpRx {
    fn new(fd: Arc<OwnedFd>, local: SocketAddrV4) -> UdpRx {
        // SAFETY: sockaddr_in, iovec and mmsghdr are plain C structs; all-zero is valid.
        let zero_sa: libc::sockaddr_in = unsafe { MaybeUninit::zeroed().assume_init() };
        let zero_iov = libc::iovec {
            iov_base: std::ptr::null_mut(),
            iov_len: 0,
        };
        // SAFETY: as above.
        let zero_hdr: libc::mmsghdr = unsafe { MaybeUninit::zeroed().assume_init() };
        UdpRx {
            fd,
            local,
            bufs: vec![0; MAX_BURST * RX_SLOT],
            names: vec![zero_sa; MAX_BURST],
            iovs: vec![zero_iov; MAX_BURST],
            ctrl: vec![[0; 16]; MAX_BURST],
            hdrs: vec![zero_hdr; MAX_BURST],
            stats: RxStats::default(),
        }
    }

    /// The bound address.
    pub fn local_addr(&self) -> SocketAddrV4 {
        self.local
    }

    /// Counters so far (one `getsockopt` for the kernel's drop count).
    pub fn stats(&self) -> RxStats {
        let mut s = self.stats;
        s.kernel_drops = socket_drops(self.fd.as_raw_fd());
        s
    }

    /// Waits up to `timeout` for data, receives one burst and hands it to `f`.
    ///
    /// Returns the number of datagrams handed over (0 on timeout). `EINTR` counts as a
    /// timeout.
    pub fn recv_with<F: FnOnce(&[Datagram<'_>])>(
        &mut self,
        timeout: Duration,
        f: F,
    ) -> io::Result<usize> {
        if !self.wait(timeout)? {
            return Ok(0);
        }
        self.recv_now(f)
    }

    /// Waits up to `timeout` until a datagram is queued; false on timeout (or `EINTR`).
    pub fn wait(&self, timeout: Duration) -> io::Result<bool> {
        let mut pfd = libc::pollfd {
            fd: self.fd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        let ms = timeout.as_millis().min(i32::MAX as u128) as i32;
        // SAFETY: one valid pollfd.
        let r = unsafe { libc::poll(&mut pfd, 1, ms) };
        if r < 0 {
            let e = io::Error::last_os_error();
            return if e.kind() == io::ErrorKind::Interrupted {
                Ok(false)
            } else {
                Err(e)
            };
        }
        Ok(r > 0 && pfd.revents != 0)
    }

    /// Receives whatever is queued right now (no waiting) and hands it to `f`.
    pub fn recv_now<F: FnOnce(&[Datagram<'_>])>(&mut self, f: F) -> io::Result<usize> {
        let raw = self.fd.as_raw_fd();
        let base = self.bufs.as_mut_ptr();
        for i in 0..MAX_BURST {
            // SAFETY: i * RX_SLOT + RX_SLOT <= bufs.len(); the pointer stays valid while self
            // is borrowed mutably by this call.
            self.iovs[i] = libc::iovec {
                iov_base: unsafe { base.add(i * RX_SLOT) } as *mut libc::c_void,
                iov_len: RX_SLOT,
            };
            let h = &mut self.hdrs[i].msg_hdr;
            h.msg_name = &mut self.names[i] as *mut libc::sockaddr_in as *mut libc::c_void;
            h.msg_namelen = size_of::<libc::sockaddr_in>() as u32;
            h.msg_iov = &mut self.iovs[i];
            h.msg_iovlen = 1;
            h.msg_control = self.ctrl[i].as_mut_ptr() as *mut libc::c_void;
            h.msg_controllen = size_of::<[u64; 16]>();
            h.msg_flags = 0;
            self.hdrs[i].msg_len = 0;
        }
        // SAFETY: hdrs holds MAX_BURST initialised headers whose pointers refer to live
        // buffers owned by self.
        let n = unsafe {
            libc::recvmmsg(
                raw,
                self.hdrs.as_mut_ptr(),
                MAX_BURST as u32,
                libc::MSG_DONTWAIT,
                std::ptr::null_mut(),
            )
        };
        if n < 0 {
            let e = io::Error::last_os_error();
            return match e.kind() {
                io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted => Ok(0),
                _ => Err(e),
            };
        }
        let n = n as usize;
        self.stats.ios += 1;
        let mut burst = [Datagram {
            src: self.local,
            dst: self.local,
            ip: None,
            payload: &[],
        }; MAX_BURST];
        let mut k = 0;
        for i in 0..n {
            let h = &self.hdrs[i];
            let len = h.msg_len as usize;
            if h.msg_hdr.msg_flags & libc::MSG_TRUNC != 0 {
                self.stats.truncated += 1;
                continue;
            }
            let dst = parse_cmsgs(&h.msg_hdr, self.local);
            let sa = &self.names[i];
            let src = SocketAddrV4::new(
                Ipv4Addr::from(u32::from_be(sa.sin_addr.s_addr)),
                u16::from_be(sa.sin_port),
            );
            self.stats.datagrams += 1;
            self.stats.bytes += len as u64;
            burst[k] = Datagram {
                src,
                dst,
                ip: None,
                payload: &self.bufs[i * RX_SLOT..i * RX_SLOT + len],
            };
            k += 1;
        }
        f(&burst[..k]);
        Ok(k)
    }
}

fn parse_cmsgs(h: &libc::msghdr, local: SocketAddrV4) -> SocketAddrV4 {
    let mut dst = local;
    if h.msg_controllen == 0 {
        return dst;
    }
    // SAFETY: the control buffer was filled by the kernel for this msghdr; the CMSG_* macros
    // walk it within msg_controllen.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(h);
        while !c.is_null() {
            let cm = &*c;
            if cm.cmsg_level == libc::IPPROTO_IP && cm.cmsg_type == libc::IP_PKTINFO {
                let pi = std::ptr::read_unaligned(libc::CMSG_DATA(c) as *const libc::in_pktinfo);
                dst = SocketAddrV4::new(
                    Ipv4Addr::from(u32::from_be(pi.ipi_addr.s_addr)),
                    local.port(),
                );
            }
            c = libc::CMSG_NXTHDR(h, c);
        }
    }
    dst
}

/// The kernel's count of datagrams dropped on socket `fd` (`SO_MEMINFO`, `SK_MEMINFO_DROPS`);
/// 0 if the kernel does not say.
fn socket_drops(fd: RawFd) -> u64 {
    const SK_MEMINFO_VARS: usize = 10;
    const SK_MEMINFO_DROPS: usize = 8;
    let mut v = [0u32; SK_MEMINFO_VARS];
    let mut len = size_of::<[u32; SK_MEMINFO_VARS]>() as u32;
    // SAFETY: valid out-pointers of the given size; the kernel writes at most `len` bytes.
    let r = unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_MEMINFO,
            v.as_mut_ptr() as *mut libc::c_void,
            &mut len,
        )
    };
    if r < 0 || (len as usize) < (SK_MEMINFO_DROPS + 1) * size_of::<u32>() {
        return 0;
    }
    v[SK_MEMINFO_DROPS] as u64
}

/// Send-side statistics.
#[derive(Debug, Default, Clone, Copy)]
pub struct TxStats {
    /// Datagrams the kernel accepted.
    pub datagrams: u64,
    /// Bytes the kernel accepted.
    pub bytes: u64,
    /// `sendmmsg` calls.
    pub ios: u64,
    /// Datagrams the kernel refused (buffer full after retries, unreachable, ...).
    pub errors: u64,
}

/// The sending half.
pub struct UdpTx {
    fd: Arc<OwnedFd>,
    local: SocketAddrV4,
    names: Vec<libc::sockaddr_in>,
    iovs: Vec<libc::iovec>,
    hdrs: Vec<libc::mmsghdr>,
    stats: TxStats,
}

// SAFETY: see UdpRx; the pointer arrays are rebuilt before each call.
unsafe impl Send for UdpTx {}

impl UdpTx {
    fn new(fd: Arc<OwnedFd>, local: SocketAddrV4) -> UdpTx {
        // SAFETY: plain C structs; all-zero is valid.
        let zero_sa: libc::sockaddr_in = unsafe { MaybeUninit::zeroed().assume_init() };
        let zero_iov = libc::iovec {
            iov_base: std::ptr::null_mut(),
            iov_len: 0,
        };
        // SAFETY: as above.
        let zero_hdr: libc::mmsghdr = unsafe { MaybeUninit::zeroed().assume_init() };
        UdpTx {
            fd,
            local,
            names: vec![zero_sa; MAX_BURST],
            iovs: vec![zero_iov; MAX_BURST],
            hdrs: vec![zero_hdr; MAX_BURST],
            stats: TxStats::default(),
        }
    }

    /// The bound address (the source of everything sent).
    pub fn local_addr(&self) -> SocketAddrV4 {
        self.local
    }

    /// Counters so far.
    pub fn stats(&self) -> TxStats {
        self.stats
    }

    /// Sends every frame of `batch` (its socket payload part) and returns how many the kernel
    /// took. A full socket buffer is waited out briefly; frames that still fail are counted in
    /// `errors` and skipped, never retried forever.
    pub fn send_batch(&mut self, batch: &TxBatch) -> io::Result<usize> {
        let mut sent = 0;
        let mut i = 0;
        let mut stalls = 0;
        while i < batch.len() {
            let n = (batch.len() - i).min(MAX_BURST);
            for k in 0..n {
                let p = batch.payload(i + k);
                self.names[k] = to_sockaddr(batch.dest(i + k));
                self.iovs[k] = libc::iovec {
                    iov_base: p.as_ptr() as *mut libc::c_void,
                    iov_len: p.len(),
                };
                let h = &mut self.hdrs[k].msg_hdr;
                h.msg_name = &mut self.names[k] as *mut libc::sockaddr_in as *mut libc::c_void;
                h.msg_namelen = size_of::<libc::sockaddr_in>() as u32;
                h.msg_iov = &mut self.iovs[k];
                h.msg_iovlen = 1;
                h.msg_control = std::ptr::null_mut();
                h.msg_controllen = 0;
                h.msg_flags = 0;
            }
            // SAFETY: the first n headers point at live payloads of `batch` (borrowed for the
            // duration of this call) and at our own sockaddr/iovec arrays.
            let r = unsafe {
                libc::sendmmsg(
                    self.fd.as_raw_fd(),
                    self.hdrs.as_mut_ptr(),
                    n as u32,
                    libc::MSG_DONTWAIT,
                )
            };
            self.stats.ios += 1;
            if r < 0 {
                let e = io::Error::last_os_error();
                match e.kind() {
                    io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted if stalls < 1000 => {
                        stalls += 1;
                        wait_writable(self.fd.as_raw_fd());
                        continue;
                    }
                    _ => {
                        // Skip the frame that failed (e.g. ECONNREFUSED from an earlier ICMP).
                        self.stats.errors += 1;
                        i += 1;
                        continue;
                    }
                }
            }
            let r = r as usize;
            for k in 0..r {
                self.stats.bytes += batch.payload(i + k).len() as u64;
            }
            self.stats.datagrams += r as u64;
            sent += r;
            i += r;
        }
        Ok(sent)
    }

    /// Sends one datagram (control-plane convenience).
    pub fn send_to(&mut self, dest: SocketAddrV4, payload: &[u8]) -> io::Result<()> {
        let sa = to_sockaddr(dest);
        // SAFETY: valid buffer and sockaddr for the duration of the call.
        let r = unsafe {
            libc::sendto(
                self.fd.as_raw_fd(),
                payload.as_ptr() as *const libc::c_void,
                payload.len(),
                0,
                &sa as *const libc::sockaddr_in as *const libc::sockaddr,
                size_of::<libc::sockaddr_in>() as u32,
            )
        };
        if r < 0 {
            self.stats.errors += 1;
            return Err(io::Error::last_os_error());
        }
        self.stats.datagrams += 1;
        self.stats.bytes += payload.len() as u64;
        self.stats.ios += 1;
        Ok(())
    }
}

/// Most sockets [`wait_readable`] and [`UdpBackend`] poll together.
pub const MAX_POLLED: usize = 8;

/// Waits until any of `rxs` has data or `timeout` passes. Returns which ones are readable.
pub fn wait_readable(rxs: &[&UdpRx], timeout: Duration) -> io::Result<Vec<bool>> {
    let mut fds = [-1; MAX_POLLED];
    for (f, r) in fds.iter_mut().zip(rxs) {
        *f = r.fd.as_raw_fd();
    }
    let n = rxs.len().min(MAX_POLLED);
    let ready = poll_readable(&fds[..n], timeout)?;
    Ok(ready[..n].to_vec())
}

/// Polls `fds` (at most [`MAX_POLLED`]) for input; no allocation.
fn poll_readable(fds: &[RawFd], timeout: Duration) -> io::Result<[bool; MAX_POLLED]> {
    let mut pfds = [libc::pollfd {
        fd: -1,
        events: 0,
        revents: 0,
    }; MAX_POLLED];
    let n = fds.len().min(MAX_POLLED);
    for (p, &fd) in pfds.iter_mut().zip(fds) {
        *p = libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        };
    }
    let ms = timeout.as_millis().min(i32::MAX as u128) as i32;
    // SAFETY: n valid pollfds.
    let r = unsafe { libc::poll(pfds.as_mut_ptr(), n as libc::nfds_t, ms) };
    if r < 0 {
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
    let mut ready = [false; MAX_POLLED];
    for (x, p) in ready.iter_mut().zip(&pfds[..n]) {
        *x = p.revents & libc::POLLIN != 0;
    }
    Ok(ready)
}

fn wait_writable(fd: RawFd) {
    let mut pfd = libc::pollfd {
        fd,
        events: libc::POLLOUT,
        revents: 0,
    };
    // SAFETY: one valid pollfd.
    unsafe { libc::poll(&mut pfd, 1, 1) };
}

fn to_sockaddr(a: SocketAddrV4) -> libc::sockaddr_in {
    // SAFETY: all-zero sockaddr_in is valid; fields are set below.
    let mut sa: libc::sockaddr_in = unsafe { MaybeUninit::zeroed().assume_init() };
    sa.sin_family = libc::AF_INET as libc::sa_family_t;
    sa.sin_port = a.port().to_be();
    sa.sin_addr = libc::in_addr {
        s_addr: u32::from(*a.ip()).to_be(),
    };
    sa
}

fn local_addr(fd: RawFd) -> io::Result<SocketAddrV4> {
    // SAFETY: all-zero sockaddr_in is valid; getsockname fills it.
    let mut sa: libc::sockaddr_in = unsafe { MaybeUninit::zeroed().assume_init() };
    let mut len = size_of::<libc::sockaddr_in>() as u32;
    // SAFETY: valid out-pointers of the right size.
    let r = unsafe {
        libc::getsockname(
            fd,
            &mut sa as *mut libc::sockaddr_in as *mut libc::sockaddr,
            &mut len,
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(SocketAddrV4::new(
        Ipv4Addr::from(u32::from_be(sa.sin_addr.s_addr)),
        u16::from_be(sa.sin_port),
    ))
}

fn setsockopt(fd: RawFd, level: i32, name: i32, v: i32) -> io::Result<()> {
    // SAFETY: passing a valid int and its size.
    let r = unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            &v as *const i32 as *const libc::c_void,
            size_of::<i32>() as u32,
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

fn getsockopt(fd: RawFd, level: i32, name: i32) -> io::Result<i32> {
    let mut v: i32 = 0;
    let mut len = size_of::<i32>() as u32;
    // SAFETY: valid out-pointers of the right size.
    let r = unsafe {
        libc::getsockopt(
            fd,
            level,
            name,
            &mut v as *mut i32 as *mut libc::c_void,
            &mut len,
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(v)
}

fn set_buf(fd: RawFd, name: i32, force: i32, bytes: usize) {
    let v = bytes.min(i32::MAX as usize) as i32;
    // The forced variant ignores rmem_max/wmem_max but needs CAP_NET_ADMIN; fall back quietly.
    if setsockopt(fd, libc::SOL_SOCKET, force, v).is_err() {
        let _ = setsockopt(fd, libc::SOL_SOCKET, name, v);
    }
}

/// Kernel UDP as a [`crate::backend::Backend`]: several bound sockets received from together
/// (e.g. the report port and the RoCEv2 port), one of them used for sending.
pub struct UdpBackend {
    rxs: Vec<UdpRx>,
    tx: UdpTx,
    first: usize,
    waker: Option<Arc<Waker>>,
    /// The last receive found at least [`BUSY_BURST`] datagrams: try the sockets before
    /// waiting in `poll(2)`, which under load saves a system call per burst (one `poll` only
    /// once every socket is empty).
    busy: bool,
}

/// A receive at least this large suggests more is queued. Below it the next receive waits in
/// `poll(2)` first: trickling traffic (a datagram or two per wake-up, e.g. a collector's RNIC
/// at a few thousand frames per second) would otherwise pay a third, empty `recvmmsg` per
/// wake-up.
const BUSY_BURST: usize = 8;

/// Wakes a thread blocked in [`UdpBackend`]'s receive wait from another thread (an `eventfd`):
/// e.g. a dispatcher that has just queued work for a worker. Waking costs one `write(2)`; a
/// wake-up that finds the thread busy is absorbed by its next wait.
pub struct Waker {
    fd: OwnedFd,
}

impl Waker {
    /// A new, unsignalled waker.
    pub fn new() -> io::Result<Waker> {
        // SAFETY: plain eventfd(2) call; the result is checked.
        let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: fd is a fresh, valid descriptor we own.
        Ok(Waker {
            fd: unsafe { OwnedFd::from_raw_fd(fd) },
        })
    }

    /// Signals the waker (the waiting thread's poll returns).
    pub fn wake(&self) {
        let one: u64 = 1;
        // SAFETY: writes 8 bytes from a live u64 to our eventfd; a full counter (EAGAIN)
        // means it is already signalled, which is all we want.
        unsafe {
            libc::write(
                self.fd.as_raw_fd(),
                &one as *const u64 as *const libc::c_void,
                size_of::<u64>(),
            )
        };
    }

    /// Resets the signal.
    fn clear(&self) {
        let mut v: u64 = 0;
        // SAFETY: reads 8 bytes into a live u64 from our non-blocking eventfd.
        unsafe {
            libc::read(
                self.fd.as_raw_fd(),
                &mut v as *mut u64 as *mut libc::c_void,
                size_of::<u64>(),
            )
        };
    }
}

impl UdpBackend {
    /// Receives from every socket in `rxs` (at most [`MAX_POLLED`]), sends through `tx`.
    pub fn new(rxs: Vec<UdpRx>, tx: UdpTx) -> UdpBackend {
        assert!(
            rxs.len() <= MAX_POLLED,
            "at most {MAX_POLLED} receive sockets"
        );
        UdpBackend {
            rxs,
            tx,
            first: 0,
            busy: false,
            waker: None,
        }
    }

    /// Also returns from the receive wait when `waker` is signalled (at most
    /// [`MAX_POLLED`] - 1 sockets then).
    pub fn with_waker(mut self, waker: Arc<Waker>) -> UdpBackend {
        assert!(
            self.rxs.len() < MAX_POLLED,
            "at most {} receive sockets with a waker",
            MAX_POLLED - 1
        );
        self.waker = Some(waker);
        self
    }

    /// Local addresses of the receiving sockets.
    pub fn local_addrs(&self) -> Vec<SocketAddrV4> {
        self.rxs.iter().map(|r| r.local_addr()).collect()
    }
}

impl crate::backend::Backend for UdpBackend {
    fn name(&self) -> &'static str {
        "udp"
    }

    fn l2_frames(&self) -> bool {
        false
    }

    fn recv_with(
        &mut self,
        timeout: Duration,
        f: &mut dyn FnMut(&[Datagram<'_>]),
    ) -> io::Result<usize> {
        if self.busy {
            let n = self.receive_from(&[true; MAX_POLLED], f)?;
            self.busy = n >= BUSY_BURST;
            if n > 0 {
                return Ok(n);
            }
        }
        let mut fds = [-1; MAX_POLLED];
        for (f, r) in fds.iter_mut().zip(&self.rxs) {
            *f = r.fd.as_raw_fd();
        }
        let mut nfds = self.rxs.len().min(MAX_POLLED);
        if let Some(w) = &self.waker {
            fds[nfds] = w.fd.as_raw_fd();
            nfds += 1;
        }
        let ready = poll_readable(&fds[..nfds], timeout)?;
        if let Some(w) = &self.waker {
            if ready[nfds - 1] {
                w.clear();
            }
        }
        let n = self.receive_from(&ready, f)?;
        self.busy = n >= BUSY_BURST;
        Ok(n)
    }

    fn send_batch(&mut self, batch: &TxBatch) -> io::Result<usize> {
        self.tx.send_batch(batch)
    }

    fn stats(&self) -> crate::backend::BackendStats {
        let mut s = crate::backend::BackendStats::default();
        for r in &self.rxs {
            let x = r.stats();
            s.rx_packets += x.datagrams;
            s.rx_bytes += x.bytes;
            s.rx_ios += x.ios;
            s.rx_dropped += x.kernel_drops + x.truncated;
        }
        let t = self.tx.stats();
        s.tx_packets = t.datagrams;
        s.tx_bytes = t.bytes;
        s.tx_ios = t.ios;
        s.tx_errors = t.errors;
        s
    }
}

impl UdpBackend {
    /// Receives one burst from each socket marked in `ready` (no waiting).
    fn receive_from(
        &mut self,
        ready: &[bool; MAX_POLLED],
        f: &mut dyn FnMut(&[Datagram<'_>]),
    ) -> io::Result<usize> {
        let mut n = 0;
        // Rotate the starting socket so one busy socket cannot starve the other.
        let k = self.rxs.len();
        for j in 0..k {
            let i = (self.first + j) % k;
            if ready[i] {
                n += self.rxs[i].recv_now(|b| f(b))?;
            }
        }
        self.first = (self.first + 1) % k.max(1);
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_burst_round_trip() {
        let a = UdpSocket::bind(
            SocketAddrV4::new(Ipv4Addr::LOCALHOST, 0),
            &UdpOptions::default(),
        )
        .unwrap();
        let b = UdpSocket::bind(
            SocketAddrV4::new(Ipv4Addr::LOCALHOST, 0),
            &UdpOptions::default(),
        )
        .unwrap();
        let b_addr = b.local_addr();
        let a_addr = a.local_addr();
        let (_arx, mut atx) = a.split();
        let (mut brx, _btx) = b.split();
        let mut batch = TxBatch::new(100, 64);
        for i in 0..100u8 {
            assert!(batch.push_with(b_addr, 0, |buf| {
                buf[0] = i;
                buf[1] = 0xee;
                2
            }));
        }
        assert_eq!(atx.send_batch(&batch).unwrap(), 100);
        let mut got = Vec::new();
        while got.len() < 100 {
            brx.recv_with(Duration::from_secs(2), |burst| {
                for d in burst {
                    assert_eq!(d.src, a_addr);
                    assert_eq!(d.dst, b_addr);
                    got.push(d.payload[0]);
                }
            })
            .unwrap();
        }
        assert_eq!(got, (0..100).collect::<Vec<u8>>());
        let s = brx.stats();
        assert_eq!(s.datagrams, 100);
        assert!(s.ios < 100, "bursts batch datagrams: {s:?}");
    }

    #[test]
    fn a_waker_ends_the_receive_wait() {
        use crate::backend::Backend;
        let a = UdpSocket::bind(
            SocketAddrV4::new(Ipv4Addr::LOCALHOST, 0),
            &UdpOptions::default(),
        )
        .unwrap();
        let (rx, tx) = a.split();
        let waker = Arc::new(Waker::new().unwrap());
        let mut b = UdpBackend::new(vec![rx], tx).with_waker(waker.clone());
        // Unsignalled: the wait runs out.
        let t = std::time::Instant::now();
        assert_eq!(
            b.recv_with(Duration::from_millis(50), &mut |_| {}).unwrap(),
            0
        );
        assert!(t.elapsed() >= Duration::from_millis(40));
        // Signalled from another thread: the wait ends early, and the signal is consumed.
        let w = waker.clone();
        let h = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(20));
            w.wake();
        });
        let t = std::time::Instant::now();
        b.recv_with(Duration::from_secs(10), &mut |_| {}).unwrap();
        assert!(t.elapsed() < Duration::from_secs(5));
        h.join().unwrap();
        let t = std::time::Instant::now();
        b.recv_with(Duration::from_millis(50), &mut |_| {}).unwrap();
        assert!(t.elapsed() >= Duration::from_millis(40), "signal consumed");
    }

    #[test]
    fn kernel_drops_are_counted() {
        let small = UdpOptions {
            rcvbuf: 4096,
            ..UdpOptions::default()
        };
        let a = UdpSocket::bind(SocketAddrV4::new(Ipv4Addr::LOCALHOST, 0), &small).unwrap();
        let dest = a.local_addr();
        let (mut rx, _) = a.split();
        let b = UdpSocket::bind(
            SocketAddrV4::new(Ipv4Addr::LOCALHOST, 0),
            &UdpOptions::default(),
        )
        .unwrap();
        let (_, mut tx) = b.split();
        let mut batch = TxBatch::new(64, 600);
        for _ in 0..64 {
            assert!(batch.push_with(dest, 0, |buf| {
                buf[..512].fill(7);
                512
            }));
        }
        let mut sent = 0;
        for _ in 0..8 {
            sent += tx.send_batch(&batch).unwrap();
        }
        let mut got = 0;
        while rx
            .recv_with(Duration::from_millis(50), |b| got += b.len())
            .unwrap()
            > 0
        {}
        let s = rx.stats();
        assert_eq!(s.datagrams as usize, got);
        assert!(
            s.kernel_drops > 0,
            "a 4 KiB buffer cannot hold {sent} datagrams: {s:?}"
        );
        assert_eq!(got + s.kernel_drops as usize, sent, "{s:?}");
    }
}
