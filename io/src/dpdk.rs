//! DPDK backend: one ethdev port (a NIC or a vdev such as net_af_packet, net_af_xdp, net_pcap
//! or net_ring) through our own `dta-dpdk-sys`.
//!
//! Control plane: [`eal_init`] runs `rte_eal_init` once per process with the configured
//! arguments (e.g. `-l 0 --no-pci --no-huge -m 512 --file-prefix=UNIQUE
//! --vdev=net_af_packet0,iface=veth0,framecnt=16384`); [`DpdkBackend::open`] creates an mbuf
//! pool, configures one RX and one TX queue and starts the port.
//!
//! Hot path: `recv_with` polls `rte_eth_rx_burst` (busy for a short while, then napping in
//! 100 µs steps until the timeout, so an idle worker does not burn a shared core), parses the
//! frames in place in the mbufs, hands the datagrams over and frees the mbufs in bulk.
//! `send_batch` allocates mbufs in bulk, copies each frame in and transmits in bursts; frames the
//! PMD refuses after a few retries are freed and counted.
//!
//! Both register the calling thread with the EAL once ([`ensure_lcore`]): a worker spawned by
//! `std::thread` is not an EAL thread, and without an lcore ID every mbuf allocation and free
//! bypasses the mempool's per-lcore cache and goes to the shared ring, which hands out mbufs
//! in FIFO order across the whole pool: a cache miss on every mbuf header.

use std::ffi::{CStr, CString};
use std::io;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use dta_dpdk_sys as sys;
use dta_proto::batch::{Datagram, TxBatch};

use crate::backend::{Backend, BackendStats};
use crate::frame::{parse_udp_frame, FrameFilter, FrameStats, PeerMacs};

/// Largest burst.
pub const MAX_BURST: usize = 256;

static EAL: OnceLock<Result<Vec<String>, String>> = OnceLock::new();

/// `LCORE_ID_ANY`: the lcore ID of a thread the EAL does not know.
const LCORE_ID_ANY: u32 = u32::MAX;

/// The calling thread's lcore: its own (an EAL thread) or registered here, in which case it
/// is released when the thread exits.
struct Lcore {
    /// This thread registered itself (and must unregister).
    registered: bool,
    /// The thread has an lcore ID.
    has_id: bool,
}

impl Lcore {
    fn register() -> Lcore {
        if current_lcore().is_some() {
            return Lcore {
                registered: false,
                has_id: true,
            };
        }
        // SAFETY: the EAL is initialised (a backend exists); registering a non-EAL thread
        // assigns it a free lcore ID or fails with -1, leaving it as it was.
        let registered = unsafe { sys::rte_thread_register() } == 0;
        if let Some(id) = current_lcore().filter(|_| registered) {
            log::debug!("dpdk: thread registered with the EAL as lcore {id}");
        } else {
            log::warn!(
                "dpdk: cannot register this thread with the EAL (no free lcore ID): its mbufs \
                 bypass the mempool cache"
            );
        }
        Lcore {
            registered,
            has_id: registered,
        }
    }
}

impl Drop for Lcore {
    fn drop(&mut self) {
        if self.registered {
            // SAFETY: this thread registered itself in `register` and is exiting.
            unsafe { sys::rte_thread_unregister() };
        }
    }
}

thread_local! {
    static LCORE: Lcore = Lcore::register();
}

/// The calling thread's EAL lcore ID, if it has one (an EAL thread, or one registered by
/// [`ensure_lcore`]).
pub fn current_lcore() -> Option<u32> {
    // SAFETY: reads the per-thread lcore ID.
    let id = unsafe { sys::dta_lcore_id() };
    (id != LCORE_ID_ANY).then_some(id)
}

/// Registers the calling thread with the EAL the first time it touches a port, so the mempool
/// cache serves its mbufs. Returns whether the thread has an lcore ID.
pub fn ensure_lcore() -> bool {
    LCORE.with(|l| l.has_id)
}

fn rte_error(what: &str, code: i32) -> io::Error {
    // SAFETY: rte_strerror returns a pointer to a static or thread-local NUL-terminated string.
    let msg = unsafe { CStr::from_ptr(sys::rte_strerror(code.abs())) }
        .to_string_lossy()
        .into_owned();
    io::Error::other(format!("{what}: {msg} ({code})"))
}

/// Initialises the DPDK EAL once per process with `args` (without a program name). Later
/// calls with the same arguments succeed; with other arguments they fail (the EAL cannot be
/// initialised twice).
pub fn eal_init(args: &[String]) -> io::Result<()> {
    let r = EAL.get_or_init(|| {
        let mut argv: Vec<*mut libc::c_char> = Vec::with_capacity(args.len() + 2);
        for a in std::iter::once("dta").chain(args.iter().map(String::as_str)) {
            let c = CString::new(a).map_err(|_| format!("EAL argument {a:?} has a NUL"))?;
            // The EAL keeps pointers into argv (e.g. for --vdev), so the strings live forever.
            argv.push(c.into_raw());
        }
        let argc = argv.len() as i32;
        argv.push(std::ptr::null_mut());
        let argv = Box::leak(argv.into_boxed_slice());
        // SAFETY: argv holds argc valid NUL-terminated strings and a NULL, leaked so they
        // outlive the EAL.
        let r = unsafe { sys::rte_eal_init(argc, argv.as_mut_ptr()) };
        if r < 0 {
            // SAFETY: reading the EAL's thread-local errno.
            let e = unsafe { sys::dta_errno() };
            return Err(rte_error("rte_eal_init", e).to_string());
        }
        Ok(args.to_vec())
    });
    match r {
        Ok(a) if a == args => Ok(()),
        Ok(a) => Err(io::Error::other(format!(
            "the EAL is already initialised with {a:?}"
        ))),
        Err(e) => Err(io::Error::other(e.clone())),
    }
}

/// Configuration of a [`DpdkBackend`].
#[derive(Debug, Clone)]
pub struct DpdkConfig {
    /// EAL arguments (see the module docs).
    pub eal_args: Vec<String>,
    /// The port's device name (e.g. `net_af_packet0`, `net_ring0`, a PCI address); `None`
    /// takes port 0.
    pub port_name: Option<String>,
    /// Descriptors in the RX ring.
    pub rx_desc: u16,
    /// Descriptors in the TX ring.
    pub tx_desc: u16,
    /// Mbufs in the pool (a power of two minus one is best).
    pub mbufs: u32,
    /// Per-lcore mbuf cache.
    pub mbuf_cache: u32,
    /// Most frames per `rte_eth_rx_burst` / `rte_eth_tx_burst` (1..=[`MAX_BURST`]).
    pub burst: usize,
    /// Which datagrams are delivered (ports and checksum checks).
    pub filter: FrameFilter,
    /// Put the port in promiscuous mode.
    pub promiscuous: bool,
}

impl DpdkConfig {
    /// Defaults around the given EAL arguments and port name.
    pub fn new(eal_args: &[&str], port_name: Option<&str>) -> DpdkConfig {
        DpdkConfig {
            eal_args: eal_args.iter().map(|s| s.to_string()).collect(),
            port_name: port_name.map(str::to_string),
            rx_desc: 1024,
            tx_desc: 1024,
            mbufs: 8191,
            mbuf_cache: 256,
            burst: 32,
            filter: FrameFilter::default(),
            promiscuous: true,
        }
    }
}

/// A started DPDK port as a [`Backend`].
pub struct DpdkBackend {
    port: u16,
    pool: *mut sys::rte_mempool,
    rx: Vec<*mut sys::rte_mbuf>,
    tx: Vec<*mut sys::rte_mbuf>,
    cfg: DpdkConfig,
    mac: [u8; 6],
    stats: BackendStats,
    drops: FrameStats,
    peer_macs: PeerMacs,
}

// SAFETY: the port's queue 0 and the pool are used only by the thread that owns the backend;
// DPDK allows any thread to use a queue as long as only one does at a time.
unsafe impl Send for DpdkBackend {}

impl DpdkBackend {
    /// Initialises the EAL (once), then configures and starts the port.
    pub fn open(cfg: DpdkConfig) -> io::Result<DpdkBackend> {
        eal_init(&cfg.eal_args)?;
        let mut port: u16 = 0;
        match &cfg.port_name {
            Some(name) => {
                let c = CString::new(name.as_str())
                    .map_err(|_| io::Error::other("port name has a NUL"))?;
                // SAFETY: valid C string and out-pointer.
                let r = unsafe { sys::rte_eth_dev_get_port_by_name(c.as_ptr(), &mut port) };
                if r != 0 {
                    return Err(rte_error(&format!("no DPDK port named {name:?}"), r));
                }
            }
            None => {
                // SAFETY: plain query.
                if unsafe { sys::rte_eth_dev_count_avail() } == 0 {
                    return Err(io::Error::other("no DPDK port available"));
                }
            }
        }
        // SAFETY: plain query on a valid port id.
        let socket = unsafe { sys::rte_eth_dev_socket_id(port) };
        let name = CString::new(format!("dta_pool_{port}")).expect("no NUL");
        // SAFETY: valid name; the pool lives until Drop frees it.
        let pool = unsafe {
            sys::rte_pktmbuf_pool_create(
                name.as_ptr(),
                cfg.mbufs,
                cfg.mbuf_cache,
                0,
                sys::RTE_MBUF_DEFAULT_BUF_SIZE as u16,
                socket,
            )
        };
        if pool.is_null() {
            // SAFETY: reading the EAL's errno.
            return Err(rte_error("rte_pktmbuf_pool_create", unsafe {
                sys::dta_errno()
            }));
        }
        let conf = sys::rte_eth_conf::default();
        let sock = socket as u32; // SOCKET_ID_ANY (-1) is accepted as u32::MAX.
        let fail = |what: &str, r: i32| {
            // SAFETY: the pool was created above and no queue uses it yet on failure paths
            // before start; freeing it is safe.
            unsafe { sys::rte_mempool_free(pool) };
            Err(rte_error(what, r))
        };
        // SAFETY: valid port and configuration (all-zero rte_eth_conf is DPDK's default).
        let r = unsafe { sys::rte_eth_dev_configure(port, 1, 1, &conf) };
        if r < 0 {
            return fail("rte_eth_dev_configure", r);
        }
        // SAFETY: queue 0 of a configured port; NULL rxconf means the driver default.
        let r = unsafe {
            sys::rte_eth_rx_queue_setup(port, 0, cfg.rx_desc, sock, std::ptr::null(), pool)
        };
        if r < 0 {
            return fail("rte_eth_rx_queue_setup", r);
        }
        // SAFETY: as above.
        let r =
            unsafe { sys::rte_eth_tx_queue_setup(port, 0, cfg.tx_desc, sock, std::ptr::null()) };
        if r < 0 {
            return fail("rte_eth_tx_queue_setup", r);
        }
        // SAFETY: configured port.
        let r = unsafe { sys::rte_eth_dev_start(port) };
        if r < 0 {
            return fail("rte_eth_dev_start", r);
        }
        if cfg.promiscuous {
            // SAFETY: started port; failure (unsupported) is harmless.
            unsafe { sys::rte_eth_promiscuous_enable(port) };
        }
        let mut mac = sys::rte_ether_addr::default();
        // SAFETY: valid out-pointer.
        unsafe { sys::rte_eth_macaddr_get(port, &mut mac) };
        let burst = cfg.burst.clamp(1, MAX_BURST);
        Ok(DpdkBackend {
            port,
            pool,
            rx: vec![std::ptr::null_mut(); burst],
            tx: vec![std::ptr::null_mut(); burst],
            mac: mac.addr_bytes,
            cfg: DpdkConfig { burst, ..cfg },
            stats: BackendStats::default(),
            drops: FrameStats::default(),
            peer_macs: PeerMacs::default(),
        })
    }

    /// The port id.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The port's MAC address.
    pub fn mac(&self) -> [u8; 6] {
        self.mac
    }

    /// The peers' MACs learned while answering to sender MACs.
    pub fn peer_macs(&self) -> &PeerMacs {
        &self.peer_macs
    }

    /// Frames dropped by reason.
    pub fn frame_stats(&self) -> FrameStats {
        self.drops
    }

    /// The driver's counters: (received, missed by the driver, no mbuf).
    pub fn port_stats(&self) -> (u64, u64, u64) {
        let mut s = sys::rte_eth_stats::default();
        // SAFETY: valid port and out-pointer.
        unsafe { sys::rte_eth_stats_get(self.port, &mut s) };
        (s.ipackets, s.imissed, s.rx_nombuf)
    }

    fn rx_burst(&mut self) -> usize {
        // SAFETY: rx has room for `burst` mbuf pointers; queue 0 is ours.
        unsafe {
            sys::dta_rx_burst(self.port, 0, self.rx.as_mut_ptr(), self.cfg.burst as u16) as usize
        }
    }
}

impl Backend for DpdkBackend {
    fn name(&self) -> &'static str {
        "dpdk"
    }

    fn l2_frames(&self) -> bool {
        true
    }

    fn recv_with(
        &mut self,
        timeout: Duration,
        f: &mut dyn FnMut(&[Datagram<'_>]),
    ) -> io::Result<usize> {
        ensure_lcore();
        let mut n = self.rx_burst();
        if n == 0 {
            let start = Instant::now();
            let mut polls = 0u32;
            while n == 0 {
                polls += 1;
                if polls > 256 {
                    if start.elapsed() >= timeout {
                        return Ok(0);
                    }
                    std::thread::sleep(Duration::from_micros(100));
                } else {
                    std::hint::spin_loop();
                }
                n = self.rx_burst();
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
        for &m in &self.rx[..n] {
            // SAFETY: m is an mbuf the PMD just handed us; it stays valid until freed below,
            // after `f` has returned and `burst` is dead.
            let frame = unsafe {
                if sys::dta_pktmbuf_nb_segs(m) != 1 {
                    self.drops.malformed += 1;
                    self.stats.rx_dropped += 1;
                    continue;
                }
                std::slice::from_raw_parts(
                    sys::dta_pktmbuf_mtod(m) as *const u8,
                    sys::dta_pktmbuf_data_len(m) as usize,
                )
            };
            match parse_udp_frame(frame, &self.cfg.filter) {
                Ok(d) => {
                    self.stats.rx_bytes += d.payload.len() as u64;
                    if self.peer_macs.enabled() {
                        self.peer_macs.learn(frame);
                    }
                    burst[k] = d;
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
        // SAFETY: the n mbufs were received above and nothing refers to them any more.
        unsafe { sys::dta_pktmbuf_free_bulk(self.rx.as_mut_ptr(), n as u32) };
        Ok(k)
    }

    fn send_batch(&mut self, batch: &TxBatch) -> io::Result<usize> {
        ensure_lcore();
        let mut sent = 0;
        let mut i = 0;
        while i < batch.len() {
            let n = (batch.len() - i).min(self.cfg.burst);
            // SAFETY: tx has room for n ≤ burst pointers; the pool is live.
            let r =
                unsafe { sys::dta_pktmbuf_alloc_bulk(self.pool, self.tx.as_mut_ptr(), n as u32) };
            if r != 0 {
                self.stats.tx_errors += (batch.len() - i) as u64;
                break;
            }
            let mut ready = 0;
            for k in 0..n {
                let frame = batch.frame(i + k);
                let m = self.tx[k];
                // SAFETY: m is a fresh mbuf; append returns NULL if the frame does not fit,
                // otherwise a pointer to `frame.len()` writable bytes inside it.
                let ok = unsafe {
                    let p = sys::dta_pktmbuf_append(m, frame.len() as u16) as *mut u8;
                    if p.is_null() || frame.len() > u16::MAX as usize {
                        false
                    } else {
                        std::ptr::copy_nonoverlapping(frame.as_ptr(), p, frame.len());
                        if self.peer_macs.enabled() {
                            self.peer_macs
                                .address(std::slice::from_raw_parts_mut(p, frame.len()));
                        }
                        true
                    }
                };
                if ok {
                    self.tx[ready] = m;
                    ready += 1;
                    self.stats.tx_bytes += frame.len() as u64;
                } else {
                    // SAFETY: m is ours and not queued anywhere.
                    unsafe { sys::dta_pktmbuf_free(m) };
                    self.stats.tx_errors += 1;
                }
            }
            let mut done = 0;
            let mut tries = 0;
            while done < ready && tries < 1000 {
                // SAFETY: tx[done..ready] are filled mbufs we own; the PMD takes ownership of
                // those it accepts.
                done += unsafe {
                    sys::dta_tx_burst(
                        self.port,
                        0,
                        self.tx.as_mut_ptr().add(done),
                        (ready - done) as u16,
                    )
                } as usize;
                tries += 1;
            }
            self.stats.tx_ios += 1;
            if done < ready {
                // SAFETY: the PMD did not take these; they are still ours.
                unsafe {
                    sys::dta_pktmbuf_free_bulk(
                        self.tx.as_mut_ptr().add(done),
                        (ready - done) as u32,
                    )
                };
                self.stats.tx_errors += (ready - done) as u64;
            }
            sent += done;
            i += n;
        }
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

impl Drop for DpdkBackend {
    fn drop(&mut self) {
        // SAFETY: the port was started by us; stopping and closing releases its queues'
        // mbufs, after which the pool can be freed.
        unsafe {
            sys::rte_eth_dev_stop(self.port);
            sys::rte_eth_dev_close(self.port);
            sys::rte_mempool_free(self.pool);
        }
    }
}
