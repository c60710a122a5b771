//! The agent's software RNIC: one UDP socket carrying RDMA_CM (GSI QP) and RoCEv2, a
//! [`Responder`] with the region registered READ-only, and a [`CmResponder`] whose one service
//! puts the [`RegionRecord`] in its REP.
//!
//! Two ways to drive it: [`AgentServer::run`] (a daemon's thread, until a stop flag) and
//! [`AgentServer::poll_once`] (non-blocking: whatever is queued now), which with
//! [`AgentPoller`] lets one thread serve many agents, each on its own address.

use std::io;
use std::net::SocketAddrV4;
use std::os::fd::{AsRawFd as _, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use dta_io::udp::{UdpOptions, UdpRx, UdpSocket, UdpTx};
use dta_proto::batch::TxBatch;
use dta_proto::wire::cm::is_gsi;
use dta_proto::wire::ethernet::MacAddr;
use dta_proto::zero::RegionRecord;
use dta_rnic::allow::PeerAllowlist;
use dta_rnic::cm::{CmCounters, CmResponder, Service};
use dta_rnic::counters::RnicCounters;
use dta_rnic::responder::{Access, DeviceConfig, Responder};

use crate::region::AgentRegion;

/// The RoCEv2 UDP port.
pub const DEFAULT_ROCE_PORT: u16 = dta_proto::consts::ROCEV2_PORT;
/// The rdma_cm port (service ID) agents listen on unless told otherwise.
pub const DEFAULT_CM_PORT: u16 = 7700;
/// Path MTU unless told otherwise: READ responses of 1024 bytes fit a 1500-byte Ethernet MTU.
pub const DEFAULT_PMTU: u32 = 1024;
/// The service name in the REP's private data.
pub const SERVICE_NAME: &str = "dta-agent";
/// Frames one transmit batch holds.
const TX_SLOTS: usize = 64;
/// How long [`AgentServer::run`] waits for input before running its timers.
const RUN_WAIT: Duration = Duration::from_millis(20);
/// Continuation rounds of a READ larger than the batch, per step.
const MAX_CONTINUATIONS: usize = 1024;

/// How an agent's RNIC is set up.
#[derive(Debug, Clone)]
pub struct AgentOptions {
    /// The rdma_cm port (service ID).
    pub cm_port: u16,
    /// Who may connect.
    pub allow: PeerAllowlist,
    /// Check the ICRC of requests (advertised in the record).
    pub verify_icrc: bool,
    /// Path MTU (256..=4096, a power of two).
    pub pmtu: u32,
    /// Kernel receive and send buffers of the socket (bytes).
    pub socket_buffer: usize,
}

impl Default for AgentOptions {
    fn default() -> Self {
        AgentOptions {
            cm_port: DEFAULT_CM_PORT,
            allow: PeerAllowlist::default_for([]),
            verify_icrc: true,
            pmtu: DEFAULT_PMTU,
            socket_buffer: 1 << 20,
        }
    }
}

/// What one agent's RNIC did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AgentCounters {
    /// The responder's counters (`reads`: READ requests served).
    pub rnic: RnicCounters,
    /// RDMA_CM counters.
    pub cm: CmCounters,
    /// Datagrams received.
    pub rx_datagrams: u64,
    /// Bytes received (UDP payloads).
    pub rx_bytes: u64,
    /// Datagrams sent (READ responses, ACKs/NAKs, CM replies).
    pub tx_datagrams: u64,
    /// Bytes sent (UDP payloads): almost all of it READ responses.
    pub tx_bytes: u64,
    /// Calls that did work ([`AgentServer::poll_once`], or a wake of [`AgentServer::run`]).
    pub polls: u64,
    /// CPU time of the calling threads spent inside this agent's RNIC (ns,
    /// `CLOCK_THREAD_CPUTIME_ID` around each call; includes the receive and send syscalls).
    pub cpu_ns: u64,
}

impl AgentCounters {
    /// CPU nanoseconds per READ served (`None` before the first READ).
    pub fn cpu_ns_per_read(&self) -> Option<f64> {
        (self.rnic.reads > 0).then(|| self.cpu_ns as f64 / self.rnic.reads as f64)
    }
}

/// CPU time the calling thread has used (ns).
pub use dta_io::process::thread_cpu_ns;

/// One agent's software RNIC, serving READs of its region.
pub struct AgentServer {
    rx: UdpRx,
    tx: UdpTx,
    fd: RawFd,
    rnic: Responder,
    cm: CmResponder,
    batch: TxBatch,
    record: RegionRecord,
    epoch: Instant,
    polls: u64,
    cpu_ns: u64,
}

impl AgentServer {
    /// Binds `addr` (a concrete IPv4 address: it is the RNIC's GID; port 0 picks one) and
    /// listens for RDMA_CM on `cm_port`, admitting `allow`, with default [`AgentOptions`]
    /// otherwise.
    pub fn bind(
        addr: SocketAddrV4,
        cm_port: u16,
        region: &AgentRegion,
        allow: PeerAllowlist,
    ) -> io::Result<AgentServer> {
        AgentServer::bind_with(
            addr,
            region,
            &AgentOptions {
                cm_port,
                allow,
                ..AgentOptions::default()
            },
        )
    }

    /// Binds `addr` with `opts`.
    pub fn bind_with(
        addr: SocketAddrV4,
        region: &AgentRegion,
        opts: &AgentOptions,
    ) -> io::Result<AgentServer> {
        let invalid = |m: String| io::Error::new(io::ErrorKind::InvalidInput, m);
        if addr.ip().is_unspecified() {
            return Err(invalid(format!(
                "{addr}: the agent needs a concrete local address (it is the RoCEv2 GID its \
                 responses are sealed with), not 0.0.0.0"
            )));
        }
        if !(256..=4096).contains(&opts.pmtu) || !opts.pmtu.is_power_of_two() {
            return Err(invalid(format!(
                "pmtu {}: must be 256, 512, 1024, 2048 or 4096",
                opts.pmtu
            )));
        }
        let sock = UdpSocket::bind(
            addr,
            &UdpOptions {
                rcvbuf: opts.socket_buffer,
                sndbuf: opts.socket_buffer,
                reuse_port: false,
            },
        )?;
        let local = sock.local_addr();
        let fd = sock.as_raw_fd();
        let (rx, tx) = sock.split();
        let mac = MacAddr([0x02, 0, 0, 0, 0, 0x5a]);
        let mut rnic = Responder::new(DeviceConfig {
            local,
            local_mac: mac,
            pmtu: opts.pmtu,
            l2_frames: false,
        });
        // A restarted agent must not hand out its previous run's QPNs (see Responder).
        rnic.set_qpn_base(dta_io::random::random_u32() & 0x7F_FF00);
        let rkey = rnic
            .try_register(
                region.region().clone(),
                Access {
                    remote_read: true,
                    remote_write: false,
                    remote_atomic: false,
                },
            )
            .expect("a fresh device has free registration slots");
        let record = RegionRecord {
            addr: region.addr(),
            len: region.len(),
            rkey: rkey.0,
            verify_icrc: opts.verify_icrc,
            pmtu: opts.pmtu,
        };
        let service = Service {
            port: opts.cm_port,
            name: SERVICE_NAME.into(),
            record: record.encode(),
            record_in_rep: true,
            heads: None,
            allow: opts.allow.clone(),
        };
        let cm = CmResponder::new(local, mac, vec![service], opts.verify_icrc);
        // A frame: the L2–L4 room the builder reserves, BTH, AETH, one PMTU of payload, ICRC.
        let slot = dta_proto::wire::roce::frame_len(4, opts.pmtu as usize) + 64;
        Ok(AgentServer {
            rx,
            tx,
            fd,
            rnic,
            cm,
            batch: TxBatch::new(TX_SLOTS, slot),
            record,
            epoch: Instant::now(),
            polls: 0,
            cpu_ns: 0,
        })
    }

    /// The bound address (RoCEv2 and RDMA_CM).
    pub fn local_addr(&self) -> SocketAddrV4 {
        self.rx.local_addr()
    }

    /// The record its REPs carry.
    pub fn record(&self) -> RegionRecord {
        self.record
    }

    /// Connections: (peer, our QPN, established?).
    pub fn connections(&self) -> Vec<(SocketAddrV4, u32, bool)> {
        self.cm
            .connections()
            .into_iter()
            .map(|(_, peer, qpn, up)| (peer, qpn.value(), up))
            .collect()
    }

    /// What it did so far.
    pub fn counters(&self) -> AgentCounters {
        let (rx, tx) = (self.rx.stats(), self.tx.stats());
        AgentCounters {
            rnic: self.rnic.counters(),
            cm: self.cm.counters,
            rx_datagrams: rx.datagrams,
            rx_bytes: rx.bytes,
            tx_datagrams: tx.datagrams,
            tx_bytes: tx.bytes,
            polls: self.polls,
            cpu_ns: self.cpu_ns,
        }
    }

    /// Nanoseconds since the server was made: the clock [`AgentServer::run`] uses, and a
    /// suitable `now` for [`AgentServer::poll_once`].
    pub fn now(&self) -> u64 {
        self.epoch.elapsed().as_nanos() as u64
    }

    /// True while READ responses wait for room (call [`AgentServer::poll_once`] again).
    pub fn has_pending_output(&self) -> bool {
        self.rnic.has_pending_output()
    }

    /// Does what is due now without waiting: receives what is queued (one burst), answers it,
    /// continues READ responses and runs the CM timers (REP retransmission). `now` is in ns
    /// on any monotonic clock the caller keeps for this server (e.g. [`AgentServer::now`]).
    /// Returns the datagrams received.
    pub fn poll_once(&mut self, now: u64) -> io::Result<usize> {
        self.step(now, None)
    }

    /// Like [`AgentServer::poll_once`], but waits up to `timeout` for the first datagram.
    pub fn poll_wait(&mut self, timeout: Duration) -> io::Result<usize> {
        let now = self.now();
        self.step(now, Some(timeout))
    }

    /// Serves until `stop` is set (a daemon's loop).
    pub fn run(&mut self, stop: &AtomicBool) -> io::Result<()> {
        while !stop.load(Ordering::Relaxed) {
            self.poll_wait(RUN_WAIT)?;
        }
        Ok(())
    }

    fn step(&mut self, now: u64, wait: Option<Duration>) -> io::Result<usize> {
        // Waiting is not work: only what follows the wait is measured.
        if let Some(t) = wait {
            if !self.rx.wait(t)? {
                self.run_timers(now);
                return Ok(0);
            }
        }
        let t0 = thread_cpu_ns();
        let (rnic, cm, batch) = (&mut self.rnic, &mut self.cm, &mut self.batch);
        let got = self.rx.recv_now(|burst| {
            for d in burst {
                if is_gsi(d.payload) {
                    cm.handle(now, d, rnic, batch);
                } else {
                    rnic.handle(d, batch);
                }
            }
        });
        self.flush();
        self.cm.poll(now, &mut self.rnic, &mut self.batch);
        self.rnic.poll(now, &mut self.batch);
        self.flush();
        // A READ larger than the batch continues as soon as the batch was sent.
        let mut rounds = 0;
        while self.rnic.has_pending_output() && rounds < MAX_CONTINUATIONS {
            self.rnic.poll(now, &mut self.batch);
            self.flush();
            rounds += 1;
        }
        self.polls += 1;
        self.cpu_ns += thread_cpu_ns().saturating_sub(t0);
        got
    }

    /// Runs the timers only (REP retransmission, unfinished READ responses): no receive, and
    /// no syscall unless something is due.
    pub fn run_timers(&mut self, now: u64) {
        self.cm.poll(now, &mut self.rnic, &mut self.batch);
        self.rnic.poll(now, &mut self.batch);
        self.flush();
    }

    fn flush(&mut self) {
        if !self.batch.is_empty() {
            if let Err(e) = self.tx.send_batch(&self.batch) {
                log::debug!("agent {}: send failed: {e}", self.rx.local_addr());
            }
            self.batch.clear();
        }
    }
}

/// Serves many [`AgentServer`]s from one thread: one `poll(2)` over all their sockets, then
/// [`AgentServer::poll_once`] on those with input or unfinished READs, and
/// [`AgentServer::run_timers`] on the others every 50 ms. Nothing allocates per round once the set's size is known.
#[derive(Default)]
pub struct AgentPoller {
    pfds: Vec<libc::pollfd>,
    last_timers: Option<Instant>,
}

/// How often [`AgentPoller`] runs every agent's timers.
const TIMER_EVERY: Duration = Duration::from_millis(50);

impl AgentPoller {
    /// A poller (its buffers grow to the largest set it is given).
    pub fn new() -> AgentPoller {
        AgentPoller::default()
    }

    /// Waits up to `timeout` for input on any of `servers`, then serves what is due. Returns
    /// the datagrams received.
    pub fn poll(&mut self, servers: &mut [AgentServer], timeout: Duration) -> io::Result<usize> {
        self.pfds.clear();
        let mut pending = false;
        for s in servers.iter() {
            pending |= s.has_pending_output();
            self.pfds.push(libc::pollfd {
                fd: s.fd,
                events: libc::POLLIN,
                revents: 0,
            });
        }
        let ms = if pending {
            0
        } else {
            timeout.as_millis().min(i32::MAX as u128) as i32
        };
        // SAFETY: `pfds` holds `len` initialised pollfds of sockets the servers own (open for
        // as long as `servers` is borrowed).
        let r = unsafe { libc::poll(self.pfds.as_mut_ptr(), self.pfds.len() as libc::nfds_t, ms) };
        if r < 0 {
            let e = io::Error::last_os_error();
            if e.kind() != io::ErrorKind::Interrupted {
                return Err(e);
            }
        }
        let timers = self.last_timers.is_none_or(|t| t.elapsed() >= TIMER_EVERY);
        if timers {
            self.last_timers = Some(Instant::now());
        }
        let mut got = 0;
        for (s, p) in servers.iter_mut().zip(&self.pfds) {
            let now = s.now();
            if p.revents != 0 || s.has_pending_output() {
                // One agent's socket error must not stop the others.
                match s.poll_once(now) {
                    Ok(n) => got += n,
                    Err(e) => log::warn!("agent {}: {e}", s.local_addr()),
                }
            } else if timers {
                s.run_timers(now);
            }
        }
        Ok(got)
    }

    /// Serves `servers` until `stop` is set.
    pub fn run(&mut self, servers: &mut [AgentServer], stop: &AtomicBool) -> io::Result<()> {
        while !stop.load(Ordering::Relaxed) {
            self.poll(servers, RUN_WAIT)?;
        }
        Ok(())
    }
}
