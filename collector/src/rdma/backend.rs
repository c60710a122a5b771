//! The event thread of the real-RNIC backend: rdma_cm listeners, connections, completions.
//!
//! Everything verbs-related is created and destroyed on this one thread; the control plane
//! only sees [`Published`] snapshots and the shared [`Region`]s.

use std::collections::{HashMap, VecDeque};
use std::net::{Ipv4Addr, SocketAddrV4};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

use rdma_sys::*;

use dta_proto::layout::AppendFormat;
use dta_proto::meta::CollectorMeta;
use dta_proto::wire::ib::Qpn;
use dta_proto::wire::listheads;
use dta_proto::wire::metarec::{MetaRecord, META_RECORD_LEN};
use dta_proto::zero::RegionRecord;

use super::verbs::{self, CmId, CompChannel, Cq, EventChannel, Mr, Pd, SendOp};
use super::{Started, SOFTWARE_HINT};
use crate::allow::PeerAllowlist;
use crate::config::CollectorConfig;
use crate::memory::Region;
use crate::rnic::cm::{beyond_peer_limit, list_heads, CmCounters, NOT_ALLOWED_TEXT};
use crate::rnic::counters::RnicCounters;
use crate::rnic::responder::Completion;
use crate::service::{Published, QpOwner};
use dta_proto::geometry::AppendGeometry;

/// Bytes per receive buffer (a SEND larger than this is answered with a NAK by the NIC).
const RECV_SLOT: usize = 256;
/// Receive WQEs kept posted per connection (clamped to the device's limit).
const MAX_RECV_DEPTH: u32 = 256;
/// Send queue depth: the metadata SEND, then the list-head SENDs, at most this many at once.
const SEND_DEPTH: u32 = 8;
/// `wr_id` of the metadata SEND; receives use their slot index, list-head SENDs
/// `HEADS_WR_BASE + message`.
const META_WR_ID: u64 = u64::MAX;
/// `wr_id` of the first list-head SEND.
const HEADS_WR_BASE: u64 = 1 << 32;
/// Path MTU the list-head messages are sized for: the smallest RoCEv2 MTU in use (rxe's on a
/// 1,500-byte Ethernet MTU), so every message fits one packet whatever the path.
const HEADS_PMTU: usize = 1024;
/// Responder resources / initiator depth asked for at most (mlx5 allows 16).
const MAX_RD_ATOM: u8 = 16;
/// How often counters are published.
const PUBLISH_EVERY: Duration = Duration::from_millis(100);
/// Completion events kept for the control plane.
const RECENT_EVENTS: usize = 1024;

/// What one store needs on this thread.
struct StoreSpec {
    name: String,
    port: u16,
    region: Arc<Region>,
    /// The record to SEND, without the R_Key (which is per device); `None` for a ZERO
    /// agent's region: the REP carries its region record (name in private-data bytes 0..64,
    /// [`RegionRecord`] in 64..128), no SEND follows, and peers may only READ.
    record: Option<MetaRecord>,
    /// A sequenced Append store's geometry: the record announces list heads, and they are
    /// read from the region and sent after it (so a restarted translator resumes each list).
    heads: Option<AppendGeometry>,
    /// Who may connect: a request from anyone else is refused with `rdma_reject`.
    allow: PeerAllowlist,
}

impl StoreSpec {
    /// (heads per message, messages) of this store's list heads.
    fn head_messages(&self) -> (usize, usize) {
        let per = listheads::heads_per_message(HEADS_PMTU).max(1);
        let lists = self.heads.as_ref().map_or(0, |a| a.lists as usize);
        (per, lists.div_ceil(per))
    }
}

pub(super) fn start(
    config: &CollectorConfig,
    published: Arc<Mutex<Published>>,
    stop: Arc<AtomicBool>,
) -> Result<Started, String> {
    if !config.static_peers.is_empty() {
        log::warn!(
            "rdma: [[static_peer]] entries are ignored: a real RNIC's QPs are set up with RDMA_CM"
        );
    }
    let mut stores = crate::store::build_stores_with(config, |_| None)?;
    let ip = *config.collector.roce.ip();
    let specs: Vec<StoreSpec> = stores
        .iter()
        .enumerate()
        .map(|(i, s)| {
            // A real RNIC always checks the ICRC.
            let mut record = MetaRecord::from_store_meta(&s.meta, true);
            let heads = s
                .append()
                .filter(|a| a.layout.format() == AppendFormat::Sequenced);
            record.list_heads = heads.is_some();
            StoreSpec {
                name: s.meta.name.clone(),
                port: s.port,
                region: s.region.clone(),
                record: Some(record),
                heads,
                allow: config.cm_allowlist(i),
            }
        })
        .collect();
    let (tx, rx) = mpsc::channel();
    let thread = std::thread::Builder::new()
        .name("dta-rdma".into())
        .spawn(move || {
            let mut backend = match Backend::open(ip, specs) {
                Ok(b) => b,
                Err(e) => {
                    let _ = tx.send(Err(e));
                    return;
                }
            };
            let _ = tx.send(Ok(backend.rkeys()));
            backend.run(&stop, &published);
        })
        .map_err(|e| format!("cannot start the RDMA thread: {e}"))?;
    let rkeys = match rx.recv() {
        Ok(Ok(k)) => k,
        Ok(Err(e)) => {
            let _ = thread.join();
            return Err(e);
        }
        Err(_) => {
            let _ = thread.join();
            return Err("the RDMA thread died while starting".into());
        }
    };
    for (s, k) in stores.iter_mut().zip(rkeys) {
        if let Some(k) = k {
            s.meta.rkey = k;
        }
    }
    let roce = SocketAddrV4::new(ip, dta_proto::consts::ROCEV2_PORT);
    let meta = CollectorMeta {
        roce,
        mac: config.collector.mac.clone(),
        verify_icrc: true,
        stores: stores.iter().map(|s| s.meta.clone()).collect(),
    };
    Ok(Started {
        stores,
        meta,
        roce,
        thread,
    })
}

/// Serves one ZERO agent region through the RNIC at `ip` (see [`super::serve_region`]).
pub(super) fn serve_region(
    ip: Ipv4Addr,
    cm_port: u16,
    name: &str,
    region: Arc<Region>,
    allow: PeerAllowlist,
    published: Arc<Mutex<Published>>,
    stop: Arc<AtomicBool>,
) -> Result<std::thread::JoinHandle<()>, String> {
    let spec = StoreSpec {
        name: name.to_string(),
        port: cm_port,
        region,
        record: None,
        heads: None,
        allow,
    };
    let (tx, rx) = mpsc::channel();
    let thread = std::thread::Builder::new()
        .name("dta-rdma".into())
        .spawn(move || {
            let mut backend = match Backend::open(ip, vec![spec]) {
                Ok(b) => b,
                Err(e) => {
                    let _ = tx.send(Err(e));
                    return;
                }
            };
            let _ = tx.send(Ok(()));
            backend.run(&stop, &published);
        })
        .map_err(|e| format!("cannot start the RDMA thread: {e}"))?;
    match rx.recv() {
        Ok(Ok(())) => Ok(thread),
        Ok(Err(e)) => {
            let _ = thread.join();
            Err(e)
        }
        Err(_) => {
            let _ = thread.join();
            Err("the RDMA thread died while starting".into())
        }
    }
}

/// A device the backend uses: a PD with every store's region registered in it.
struct Device {
    ctx: *mut ibv_context,
    name: String,
    port: u8,
    limits: verbs::DeviceLimits,
    // Drop order: MRs, then the PD.
    mrs: Vec<Mr>,
    pd: Pd,
}

impl Device {
    fn open(ctx: *mut ibv_context, port: u8, stores: &[StoreSpec]) -> Result<Device, String> {
        let name = verbs::context_name(ctx);
        let limits =
            verbs::query_limits(ctx).map_err(|e| format!("ibv_query_device({name}): {e}"))?;
        let pd = Pd::new(ctx).map_err(|e| format!("ibv_alloc_pd({name}): {e}"))?;
        let mut mrs = Vec::with_capacity(stores.len());
        for s in stores {
            // SAFETY: the region is mapped for as long as its Arc lives; the backend holds the
            // Arc in `stores` and drops its devices (and so the MRs) first.
            let mr = unsafe {
                Mr::register(
                    &pd,
                    s.region.addr() as *mut u8,
                    s.region.len(),
                    // A ZERO agent's region is only read, never written by a peer.
                    if s.record.is_none() {
                        verbs::remote_read_only()
                    } else {
                        verbs::remote_access()
                    },
                )
            }
            .map_err(|e| {
                format!(
                    "ibv_reg_mr of store {:?} ({} bytes) on {name}: {e} (is `ulimit -l` large \
                     enough?)",
                    s.name,
                    s.region.len()
                )
            })?;
            log::info!(
                "rdma: store {:?} registered on {name}: addr {:#x} len {} rkey {:#x}",
                s.name,
                s.region.addr(),
                s.region.len(),
                mr.rkey()
            );
            mrs.push(mr);
        }
        Ok(Device {
            ctx,
            name,
            port,
            limits,
            mrs,
            pd,
        })
    }

    /// Sums the device's `hw_counters` that share a name with ours.
    fn read_counters(&self, into: &mut RnicCounters) {
        let dir = format!(
            "/sys/class/infiniband/{}/ports/{}/hw_counters",
            self.name, self.port
        );
        let read = |n: &str| -> u64 {
            std::fs::read_to_string(format!("{dir}/{n}"))
                .ok()
                .and_then(|s| s.trim().parse().ok())
                .unwrap_or(0)
        };
        into.rcvd_pkts += read("rcvd_pkts");
        into.sent_pkts += read("sent_pkts");
        into.duplicate_request += read("duplicate_request");
        into.out_of_seq_request += read("out_of_seq_request");
        into.send_rnr_err += read("send_rnr_err");
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ConnState {
    /// Accepted; waiting for the RTU (ESTABLISHED).
    Accepted,
    /// The metadata SEND is posted.
    MetaPosted,
    /// The metadata SEND completed: the translator knows the store.
    Ready,
}

/// One accepted connection.
struct Conn {
    store: usize,
    device: usize,
    /// Accept order (for the per-peer bound: the oldest go first).
    order: u64,
    peer: Option<SocketAddrV4>,
    peer_qpn: u32,
    qpn: u32,
    state: ConnState,
    recv_depth: u32,
    /// List-head messages of this connection: (heads per message, total, posted so far).
    heads: (usize, usize, usize),
    /// Lists whose heads are sent (the last message carries the remainder).
    head_lists: usize,
    /// SENDs posted and not yet completed.
    sends_out: u32,
    counters: RnicCounters,
    // Drop order matters: the id (and its QP) first, then the CQ, its channel, the buffer's
    // MR, and the buffer itself.
    id: CmId,
    cq: Cq,
    channel: CompChannel,
    buf_mr: Mr,
    buf: Box<[u8]>,
}

impl Conn {
    fn buf_addr(&self, slot: u64) -> u64 {
        self.buf.as_ptr() as u64 + slot * RECV_SLOT as u64
    }

    /// Offset in `buf` of list-head message `k` (after the receive slots).
    fn heads_at(&self, k: usize) -> usize {
        RECV_SLOT * (self.recv_depth as usize + 1) + k * listheads::message_len(self.heads.0)
    }

    /// Posts list-head SENDs while the send queue has room.
    fn post_heads(&mut self) -> std::io::Result<()> {
        let (per, total, _) = self.heads;
        while self.heads.2 < total && self.sends_out < SEND_DEPTH {
            let k = self.heads.2;
            let at = self.heads_at(k);
            let len = listheads::message_len(per.min(self.head_lists - k * per)) as u32;
            // SAFETY: live QP; message k lies inside buf (sized for every message at accept),
            // registered under buf_mr, and is not written again while the connection lives.
            unsafe {
                verbs::post_send(
                    self.id.qp(),
                    HEADS_WR_BASE + k as u64,
                    SendOp::Send,
                    self.buf.as_ptr() as u64 + at as u64,
                    len,
                    self.buf_mr.lkey(),
                )
            }?;
            self.heads.2 += 1;
            self.sends_out += 1;
        }
        Ok(())
    }

    /// Posts the receive WQE of `slot` (1..=recv_depth; slot 0 holds the metadata record).
    fn post_recv(&self, slot: u64) -> std::io::Result<()> {
        // SAFETY: the QP is live (the id owns it); the slot lies inside buf, which is
        // registered under buf_mr and outlives the QP (field order).
        unsafe {
            verbs::post_recv(
                self.id.qp(),
                slot,
                self.buf_addr(slot),
                RECV_SLOT as u32,
                self.buf_mr.lkey(),
            )
        }
    }
}

/// What a connection owns besides its id: completion channel, CQ, buffers and their MR.
type ConnParts = (CompChannel, Cq, Box<[u8]>, Mr);

/// A copy of one rdma_cm event (the event itself is acknowledged before it is acted on).
struct CmEvent {
    kind: u32,
    id: *mut rdma_cm_id,
    listen_id: *mut rdma_cm_id,
    status: i32,
    conn: rdma_conn_param,
}

struct Backend {
    stores: Vec<StoreSpec>,
    // Drop order: connections, devices (MRs, PDs), listeners, then the event channel.
    conns: HashMap<usize, Conn>,
    /// Connections accepted so far (each one's `order`).
    accepted: u64,
    devices: Vec<Device>,
    listeners: Vec<CmId>,
    channel: EventChannel,
    imm_events: u64,
    recent: VecDeque<Completion>,
    own: RnicCounters,
    /// Refused peers already logged at `warn` (at most 256).
    refused_logged: std::collections::HashSet<Ipv4Addr>,
    /// Peers whose connections were replaced for the per-peer bound, logged at `warn` (at most
    /// 256; later ones go to `debug`, so a peer reconnecting in a loop cannot fill the log).
    bounded_logged: std::collections::HashSet<Ipv4Addr>,
    /// Connection requests seen and refused (the software RNIC's names; the rest stay 0).
    cm: CmCounters,
}

impl Drop for Backend {
    fn drop(&mut self) {
        // A disconnect first lets each peer see a DREQ instead of a timeout; then everything
        // goes in the order the verbs API needs (connections, devices, listeners; the event
        // channel and the regions' Arcs drop after this body).
        for c in self.conns.values() {
            // SAFETY: a live id.
            unsafe {
                rdma_disconnect(c.id.0);
            }
        }
        self.conns.clear();
        self.devices.clear();
        self.listeners.clear();
    }
}

impl Backend {
    fn open(ip: Ipv4Addr, stores: Vec<StoreSpec>) -> Result<Backend, String> {
        let names = verbs::device_names()
            .map_err(|e| format!("no RDMA device found ({e}); {SOFTWARE_HINT}"))?;
        if names.is_empty() {
            return Err(format!(
                "no RDMA device found: libibverbs lists none (no RDMA NIC, or its driver, or \
                 rdma_rxe with `rdma link add`, is not loaded); {SOFTWARE_HINT}"
            ));
        }
        log::info!("rdma: devices {}", names.join(", "));
        let channel = EventChannel::new().map_err(|e| {
            format!("no RDMA device found: cannot open the rdma_cm event channel ({e}; is the rdma_ucm module loaded?); {SOFTWARE_HINT}")
        })?;
        verbs::set_nonblocking(channel.fd()).map_err(|e| format!("rdma_cm channel: {e}"))?;
        let mut b = Backend {
            stores,
            conns: HashMap::new(),
            accepted: 0,
            devices: Vec::new(),
            listeners: Vec::new(),
            channel,
            imm_events: 0,
            recent: VecDeque::new(),
            own: RnicCounters::default(),
            refused_logged: std::collections::HashSet::new(),
            bounded_logged: std::collections::HashSet::new(),
            cm: CmCounters::default(),
        };
        for i in 0..b.stores.len() {
            let (name, port) = (b.stores[i].name.clone(), b.stores[i].port);
            let id = CmId::new(&b.channel, i).map_err(|e| format!("rdma_create_id: {e}"))?;
            let mut sa = verbs::sockaddr_in(SocketAddrV4::new(ip, port));
            // SAFETY: a live id and a valid sockaddr_in.
            let r = unsafe { rdma_bind_addr(id.0, &mut sa as *mut _ as *mut libc::sockaddr) };
            if r != 0 {
                let e = verbs::errno();
                return Err(match e.raw_os_error() {
                    Some(libc::EADDRNOTAVAIL) | Some(libc::ENODEV) => format!(
                        "no RDMA device found with address {ip} (devices: {}); bind the \
                         collector to an RDMA device's IP in [collector] roce, or {SOFTWARE_HINT}",
                        names.join(", ")
                    ),
                    Some(libc::EADDRINUSE) => format!(
                        "store {name:?}: RDMA_CM port {port} on {ip} is in use (another \
                         collector?); choose another `port` for the store"
                    ),
                    _ => format!("store {name:?}: rdma_bind_addr({ip}:{port}): {e}"),
                });
            }
            // SAFETY: a bound id.
            if unsafe { rdma_listen(id.0, 16) } != 0 {
                return Err(format!(
                    "store {name:?}: rdma_listen on port {port}: {}",
                    verbs::errno()
                ));
            }
            log::info!(
                "rdma: store {name:?} listening for RDMA_CM on {ip}:{port} (service ID {:#x})",
                0x0106_0000_0000_0000u64 | port as u64
            );
            let ctx = id.verbs();
            // SAFETY: a bound id; port_num is set with verbs.
            let port_num = unsafe { (*id.0).port_num }.max(1);
            b.listeners.push(id);
            if !ctx.is_null() {
                b.device_for(ctx, port_num)?;
            }
        }
        Ok(b)
    }

    /// R_Keys of the stores on the first device, if one is open yet.
    fn rkeys(&self) -> Vec<Option<u32>> {
        (0..self.stores.len())
            .map(|i| self.devices.first().map(|d| d.mrs[i].rkey()))
            .collect()
    }

    fn device_for(&mut self, ctx: *mut ibv_context, port: u8) -> Result<usize, String> {
        if let Some(i) = self.devices.iter().position(|d| d.ctx == ctx) {
            return Ok(i);
        }
        self.devices.push(Device::open(ctx, port, &self.stores)?);
        Ok(self.devices.len() - 1)
    }

    fn run(&mut self, stop: &AtomicBool, published: &Mutex<Published>) {
        let mut last_pub = Instant::now() - PUBLISH_EVERY;
        let mut fds: Vec<libc::pollfd> = Vec::new();
        let mut keys: Vec<usize> = Vec::new();
        while !stop.load(Ordering::Relaxed) {
            fds.clear();
            keys.clear();
            fds.push(libc::pollfd {
                fd: self.channel.fd(),
                events: libc::POLLIN,
                revents: 0,
            });
            for (k, c) in &self.conns {
                fds.push(libc::pollfd {
                    fd: c.channel.fd(),
                    events: libc::POLLIN,
                    revents: 0,
                });
                keys.push(*k);
            }
            // SAFETY: fds is a valid array of fds.len() pollfds.
            let n = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, 50) };
            if n < 0 && verbs::errno().kind() != std::io::ErrorKind::Interrupted {
                log::error!("rdma: poll failed: {}", verbs::errno());
                std::thread::sleep(Duration::from_millis(50));
            }
            if n > 0 {
                for (i, k) in keys.iter().enumerate() {
                    if fds[i + 1].revents != 0 {
                        self.on_cq_event(*k);
                    }
                }
                if fds[0].revents != 0 {
                    self.drain_cm_events();
                }
            }
            if last_pub.elapsed() >= PUBLISH_EVERY {
                last_pub = Instant::now();
                self.publish(published);
            }
        }
        self.publish(published);
        log::info!("rdma: stopping ({} connections)", self.conns.len());
    }

    fn publish(&mut self, published: &Mutex<Published>) {
        let mut total = RnicCounters::default();
        for d in &self.devices {
            d.read_counters(&mut total);
        }
        total.merge(&self.own);
        let per_qp: Vec<(u32, RnicCounters)> =
            self.conns.values().map(|c| (c.qpn, c.counters)).collect();
        let owners: Vec<QpOwner> = self
            .conns
            .values()
            .map(|c| QpOwner {
                qpn: c.qpn,
                store: c.store,
                peer: c.peer,
            })
            .collect();
        let mut p = published.lock().expect("publisher lock");
        p.counters = total;
        p.per_qp = per_qp;
        p.qp_owners = owners;
        p.immediate_events = self.imm_events;
        p.cm = self.cm;
        p.recent_events.extend(self.recent.drain(..));
        while p.recent_events.len() > RECENT_EVENTS {
            p.recent_events.pop_front();
        }
    }

    fn drain_cm_events(&mut self) {
        loop {
            let mut ev = std::ptr::null_mut();
            // SAFETY: the channel is live and non-blocking; ev is a valid out-pointer.
            if unsafe { rdma_get_cm_event(self.channel.0, &mut ev) } != 0 {
                let e = verbs::errno();
                if e.kind() != std::io::ErrorKind::WouldBlock {
                    log::warn!("rdma: rdma_get_cm_event: {e}");
                }
                return;
            }
            // SAFETY: ev is a valid event until acknowledged; copy what we need, then ack.
            let e = unsafe {
                let e = CmEvent {
                    kind: (*ev).event,
                    id: (*ev).id,
                    listen_id: (*ev).listen_id,
                    status: (*ev).status,
                    conn: (*ev).param.conn,
                };
                rdma_ack_cm_event(ev);
                e
            };
            self.on_cm_event(e);
        }
    }

    fn on_cm_event(&mut self, e: CmEvent) {
        use rdma_cm_event_type::*;
        let key = e.id as usize;
        match e.kind {
            RDMA_CM_EVENT_CONNECT_REQUEST => self.on_connect_request(e),
            RDMA_CM_EVENT_ESTABLISHED => self.on_established(key),
            RDMA_CM_EVENT_DISCONNECTED
            | RDMA_CM_EVENT_REJECTED
            | RDMA_CM_EVENT_UNREACHABLE
            | RDMA_CM_EVENT_CONNECT_ERROR => {
                // Completions the peer's disconnect overtook (the metadata SEND's among them:
                // a client that reads the record and leaves at once) are taken first, so they
                // are counted and logged instead of destroyed with the QP.
                self.on_cq_event(key);
                if let Some(c) = self.conns.remove(&key) {
                    log::info!(
                        "rdma: store {:?}: connection from {} (QPN {:#x}) closed: {} (status {})",
                        self.stores[c.store].name,
                        fmt_peer(c.peer),
                        c.qpn,
                        verbs::event_name(e.kind),
                        e.status
                    );
                }
            }
            RDMA_CM_EVENT_DEVICE_REMOVAL => {
                log::error!("rdma: device removed");
                self.conns.remove(&key);
            }
            RDMA_CM_EVENT_TIMEWAIT_EXIT | RDMA_CM_EVENT_ADDR_CHANGE => {
                log::debug!("rdma: {}", verbs::event_name(e.kind));
            }
            other => log::debug!("rdma: ignoring {}", verbs::event_name(other)),
        }
    }

    fn on_connect_request(&mut self, e: CmEvent) {
        // SAFETY: the listener id is live (we own it); its context is the store index we set.
        let store = unsafe { (*e.listen_id).context } as usize;
        // Owned from here on: dropping it destroys the new id.
        let id = CmId(e.id);
        // SAFETY: a live id (the request's).
        let peer = unsafe { verbs::peer_addr(id.0) };
        let peer_qpn = e.conn.qp_num & 0xff_ffff;
        self.cm.cm_req += 1;
        if store >= self.stores.len() {
            reject(&id, &[]);
            self.cm.cm_rej_sent += 1;
            return;
        }
        // Before anything else, and before the stale-connection clean-up below: a refused
        // peer must not be able to tear down someone's connection either.
        let allowed = peer.is_some_and(|p| self.stores[store].allow.allows(*p.ip()));
        if !allowed {
            self.cm.cm_rejected += 1;
            let first = self.refused_logged.len() < 256
                && peer.is_some_and(|p| self.refused_logged.insert(*p.ip()));
            log::log!(
                if first {
                    log::Level::Warn
                } else {
                    log::Level::Debug
                },
                "rdma: store {:?}: refused a connection request from {}: not in its cm_allow \
                 list ({})",
                self.stores[store].name,
                fmt_peer(peer),
                self.stores[store].allow
            );
            reject(&id, NOT_ALLOWED_TEXT);
            self.cm.cm_rej_sent += 1;
            return;
        }
        // A restarted translator reusing its QPN: the old connection is stale.
        let stale: Vec<usize> = self
            .conns
            .iter()
            .filter(|(_, c)| {
                c.store == store
                    && c.peer.map(|p| *p.ip()) == peer.map(|p| *p.ip())
                    && c.peer_qpn == peer_qpn
            })
            .map(|(k, _)| *k)
            .collect();
        for k in stale {
            if let Some(c) = self.conns.remove(&k) {
                log::info!(
                    "rdma: store {:?}: {} reconnects with QPN {peer_qpn:#x}; destroying the old \
                     QP {:#x}",
                    self.stores[store].name,
                    fmt_peer(peer),
                    c.qpn
                );
            }
        }
        // Each connection costs a file descriptor, a CQ and a QP of the NIC: as the software
        // RNIC does, a peer keeps at most MAX_CONNS_PER_PEER per store, the oldest replaced.
        let same_peer: Vec<(usize, u64)> = self
            .conns
            .iter()
            .filter(|(_, c)| c.store == store && c.peer.map(|p| *p.ip()) == peer.map(|p| *p.ip()))
            .map(|(k, c)| (*k, c.order))
            .collect();
        for k in beyond_peer_limit(same_peer) {
            if let Some(c) = self.conns.remove(&k) {
                self.cm.cm_replaced += 1;
                let first = self.bounded_logged.len() < 256
                    && peer.is_some_and(|p| self.bounded_logged.insert(*p.ip()));
                log::log!(
                    if first {
                        log::Level::Warn
                    } else {
                        log::Level::Debug
                    },
                    "rdma: store {:?}: {} has {} connections; destroying its oldest, QP {:#x}",
                    self.stores[store].name,
                    fmt_peer(peer),
                    crate::rnic::cm::MAX_CONNS_PER_PEER,
                    c.qpn
                );
            }
        }
        match self.accept(store, id, peer, peer_qpn, &e.conn) {
            Ok(key) => {
                let c = &self.conns[&key];
                log::info!(
                    "rdma: store {:?}: accepted {} (peer QPN {peer_qpn:#x}) on {} QPN {:#x}",
                    self.stores[store].name,
                    fmt_peer(peer),
                    self.devices[c.device].name,
                    c.qpn
                );
            }
            Err(msg) => log::error!(
                "rdma: store {:?}: rejecting {}: {msg}",
                self.stores[store].name,
                fmt_peer(peer)
            ),
        }
    }

    /// Creates the connection's CQ and QP, posts receives and accepts. On error the id is
    /// rejected and destroyed.
    fn accept(
        &mut self,
        store: usize,
        id: CmId,
        peer: Option<SocketAddrV4>,
        peer_qpn: u32,
        req: &rdma_conn_param,
    ) -> Result<usize, String> {
        let ctx = id.verbs();
        // SAFETY: a live id.
        let port = unsafe { (*id.0).port_num }.max(1);
        let device = match self.device_for(ctx, port) {
            Ok(d) => d,
            Err(e) => {
                reject(&id, &[]);
                return Err(e);
            }
        };
        let lim = self.devices[device].limits;
        let recv_depth = MAX_RECV_DEPTH.min(lim.max_qp_wr).max(1);
        let built = (|| -> Result<ConnParts, String> {
            let channel = CompChannel::new(ctx).map_err(|e| format!("comp channel: {e}"))?;
            let cqe = (recv_depth + SEND_DEPTH + 8).min(lim.max_cqe) as i32;
            let cq = Cq::new(ctx, cqe, Some(&channel)).map_err(|e| format!("CQ: {e}"))?;
            cq.arm().map_err(|e| format!("ibv_req_notify_cq: {e}"))?;
            let (per, msgs) = self.stores[store].head_messages();
            let heads_len = msgs * listheads::message_len(per);
            let mut buf =
                vec![0u8; RECV_SLOT * (recv_depth as usize + 1) + heads_len].into_boxed_slice();
            // SAFETY: buf is heap memory that the Conn owns and drops after buf_mr.
            let buf_mr = unsafe {
                Mr::register(
                    &self.devices[device].pd,
                    buf.as_mut_ptr(),
                    buf.len(),
                    ibv_access_flags::IBV_ACCESS_LOCAL_WRITE.0 as i32,
                )
            }
            .map_err(|e| format!("ibv_reg_mr (buffers): {e}"))?;
            // SAFETY: ibv_qp_init_attr is a plain C struct; all-zero is valid.
            let mut attr: ibv_qp_init_attr = unsafe { std::mem::zeroed() };
            attr.send_cq = cq.0;
            attr.recv_cq = cq.0;
            attr.qp_type = ibv_qp_type::IBV_QPT_RC;
            attr.cap.max_send_wr = SEND_DEPTH;
            attr.cap.max_recv_wr = recv_depth;
            attr.cap.max_send_sge = 1;
            attr.cap.max_recv_sge = 1;
            // SAFETY: live id, PD and CQ of the id's device. If a later step fails, the id
            // (dropped before the CQ by the caller) destroys the QP first.
            if unsafe { rdma_create_qp(id.0, self.devices[device].pd.0, &mut attr) } != 0 {
                return Err(format!("rdma_create_qp: {}", verbs::errno()));
            }
            Ok((channel, cq, buf, buf_mr))
        })();
        let (channel, cq, buf, buf_mr) = match built {
            Ok(c) => c,
            Err(e) => {
                reject(&id, &[]);
                return Err(e);
            }
        };
        self.accepted += 1;
        let conn = Conn {
            store,
            device,
            order: self.accepted,
            peer,
            peer_qpn,
            qpn: id.qpn(),
            state: ConnState::Accepted,
            recv_depth,
            heads: {
                let (per, msgs) = self.stores[store].head_messages();
                (per, msgs, 0)
            },
            head_lists: self.stores[store]
                .heads
                .as_ref()
                .map_or(0, |a| a.lists as usize),
            sends_out: 0,
            counters: RnicCounters::default(),
            id,
            cq,
            channel,
            buf_mr,
            buf,
        };
        for slot in 1..=recv_depth as u64 {
            if let Err(e) = conn.post_recv(slot) {
                reject(&conn.id, &[]);
                return Err(format!("ibv_post_recv: {e}"));
            }
        }
        // The fix of the reference: at least one responder resource (atomics and READs need
        // it) and initiator depth, within what the device supports.
        let rr = req
            .responder_resources
            .clamp(1, lim.max_qp_rd_atom.clamp(1, MAX_RD_ATOM));
        let depth = req
            .initiator_depth
            .clamp(1, lim.max_qp_init_rd_atom.clamp(1, MAX_RD_ATOM));
        // SAFETY: rdma_conn_param is a plain C struct; all-zero is valid.
        let mut param: rdma_conn_param = unsafe { std::mem::zeroed() };
        param.responder_resources = rr;
        param.initiator_depth = depth;
        param.retry_count = 7;
        param.rnr_retry_count = 7;
        // The store's name travels in the REP's private data, as the software RNIC sends it,
        // so a translator learns which store a port serves without extra configuration. A
        // ZERO agent's region record follows it.
        let mut private = [0u8; 128];
        let nb = self.stores[store].name.as_bytes();
        let n = nb.len().min(63);
        private[..n].copy_from_slice(&nb[..n]);
        param.private_data_len = 64;
        if self.stores[store].record.is_none() {
            let region = &self.stores[store].region;
            let record = RegionRecord {
                addr: region.addr(),
                len: region.len() as u64,
                rkey: self.devices[device].mrs[store].rkey(),
                verify_icrc: true,
                pmtu: verbs::active_mtu(ctx, port).unwrap_or(1024),
            };
            let at = dta_proto::zero::RECORD_REP_OFFSET;
            private[at..at + 64].copy_from_slice(&record.encode());
            param.private_data_len = 128;
        }
        param.private_data = private.as_ptr() as *const std::ffi::c_void;
        // SAFETY: a live id with a QP; `private` outlives the call.
        if unsafe { rdma_accept(conn.id.0, &mut param) } != 0 {
            let e = verbs::errno();
            reject(&conn.id, &[]);
            return Err(format!("rdma_accept: {e}"));
        }
        log::debug!(
            "rdma: accepted with responder_resources {rr} initiator_depth {depth} (asked {} / {})",
            req.responder_resources,
            req.initiator_depth
        );
        let key = conn.id.0 as usize;
        self.conns.insert(key, conn);
        Ok(key)
    }

    fn on_established(&mut self, key: usize) {
        let Some(c) = self.conns.get_mut(&key) else {
            return;
        };
        let Some(record) = self.stores[c.store].record.clone() else {
            // A ZERO agent's region: the REP carried its record; the peer READs from now on.
            c.state = ConnState::Ready;
            log::info!(
                "rdma: region {:?}: established with {}; READs are served by the RNIC",
                self.stores[c.store].name,
                fmt_peer(c.peer)
            );
            return;
        };
        // The R_Key of the store's MR on this connection's device (never the lkey).
        let rkey = self.devices[c.device].mrs[c.store].rkey();
        let rec = MetaRecord { rkey, ..record }.to_bytes();
        let lkey = c.buf_mr.lkey();
        for (i, b) in rec.iter().enumerate() {
            c.buf[i] = *b;
        }
        // SAFETY: live QP; slot 0 of the registered buffer holds the record until the SEND
        // completes (it is never reused while the connection lives).
        let r = unsafe {
            verbs::post_send(
                c.id.qp(),
                META_WR_ID,
                SendOp::Send,
                c.buf_addr(0),
                META_RECORD_LEN as u32,
                lkey,
            )
        };
        let r = r.and_then(|()| {
            c.sends_out = 1;
            let spec = &self.stores[c.store];
            let Some(a) = &spec.heads else {
                return Ok(());
            };
            // The next batch number of every list, read now (after the translator's RTU, as
            // the software RNIC does), in messages after the record.
            let next = list_heads(&spec.region, a);
            let per = c.heads.0;
            for (k, chunk) in next.chunks(per).enumerate() {
                let at = c.heads_at(k);
                let end = at + listheads::message_len(per);
                if listheads::emit((k * per) as u32, a.lists, chunk, &mut c.buf[at..end]).is_none()
                {
                    return Err(std::io::Error::other("list-head message does not fit"));
                }
            }
            c.post_heads()
        });
        match r {
            Ok(()) => {
                c.state = ConnState::MetaPosted;
                log::info!(
                    "rdma: store {:?}: established with {}; metadata SEND posted (rkey {rkey:#x}){}",
                    self.stores[c.store].name,
                    fmt_peer(c.peer),
                    if c.heads.1 > 0 {
                        format!(", then {} list-head message(s)", c.heads.1)
                    } else {
                        String::new()
                    },
                );
            }
            Err(e) => {
                log::error!("rdma: metadata SEND could not be posted: {e}; disconnecting");
                // SAFETY: a live id.
                unsafe {
                    rdma_disconnect(c.id.0);
                }
            }
        }
    }

    fn on_cq_event(&mut self, key: usize) {
        let Some(c) = self.conns.get_mut(&key) else {
            return;
        };
        let mut cq = std::ptr::null_mut();
        let mut ctx = std::ptr::null_mut();
        // SAFETY: a live non-blocking channel; out-pointers are valid.
        if unsafe { ibv_get_cq_event(c.channel.0, &mut cq, &mut ctx) } == 0 {
            // SAFETY: the event came from this CQ; acknowledged at once (Cq's Drop relies on it).
            unsafe { ibv_ack_cq_events(cq, 1) };
        }
        if let Err(e) = c.cq.arm() {
            log::warn!("rdma: ibv_req_notify_cq: {e}");
        }
        let mut wcs = verbs::wc_array::<16>();
        let mut disconnect = false;
        loop {
            let n = match c.cq.poll(&mut wcs) {
                Ok(n) => n,
                Err(e) => {
                    log::error!("rdma: {e}");
                    break;
                }
            };
            for wc in &wcs[..n] {
                let qpn = Qpn::new(c.qpn);
                if wc.status != ibv_wc_status::IBV_WC_SUCCESS {
                    if wc.status != ibv_wc_status::IBV_WC_WR_FLUSH_ERR {
                        log::warn!(
                            "rdma: QPN {:#x}: completion {} failed: {}",
                            c.qpn,
                            if wc.wr_id == META_WR_ID {
                                "of the metadata SEND"
                            } else if wc.wr_id >= HEADS_WR_BASE {
                                "of a list-head SEND"
                            } else {
                                "of a receive"
                            },
                            verbs::wc_status(wc.status)
                        );
                    }
                    disconnect = true;
                    continue;
                }
                if wc.opcode == ibv_wc_opcode::IBV_WC_SEND {
                    c.sends_out = c.sends_out.saturating_sub(1);
                }
                match wc.opcode {
                    ibv_wc_opcode::IBV_WC_SEND
                        if wc.wr_id >= HEADS_WR_BASE && wc.wr_id != META_WR_ID =>
                    {
                        if let Err(e) = c.post_heads() {
                            log::warn!("rdma: posting list-head SENDs failed: {e}");
                            disconnect = true;
                        }
                        if wc.wr_id - HEADS_WR_BASE + 1 == c.heads.1 as u64 {
                            log::info!(
                                "rdma: store {:?}: list heads delivered to {} ({} message(s))",
                                self.stores[c.store].name,
                                fmt_peer(c.peer),
                                c.heads.1
                            );
                        }
                    }
                    ibv_wc_opcode::IBV_WC_SEND if wc.wr_id == META_WR_ID => {
                        c.state = ConnState::Ready;
                        log::info!(
                            "rdma: store {:?}: metadata delivered to {} (QPN {:#x})",
                            self.stores[c.store].name,
                            fmt_peer(c.peer),
                            c.qpn
                        );
                    }
                    ibv_wc_opcode::IBV_WC_RECV_RDMA_WITH_IMM => {
                        self.imm_events += 1;
                        c.counters.write_imm += 1;
                        self.own.write_imm += 1;
                        push_bounded(
                            &mut self.recent,
                            Completion::WriteWithImm {
                                qpn,
                                imm: verbs::wc_imm(wc),
                                len: wc.byte_len,
                            },
                        );
                    }
                    ibv_wc_opcode::IBV_WC_RECV => {
                        c.counters.sends += 1;
                        self.own.sends += 1;
                        let slot = wc.wr_id as usize;
                        let len = (wc.byte_len as usize).min(RECV_SLOT);
                        let data = c.buf[slot * RECV_SLOT..slot * RECV_SLOT + len].to_vec();
                        push_bounded(
                            &mut self.recent,
                            Completion::Recv {
                                qpn,
                                imm: verbs::wc_has_imm(wc).then(|| verbs::wc_imm(wc)),
                                data,
                            },
                        );
                    }
                    other => log::debug!("rdma: completion opcode {other}"),
                }
                if wc.opcode & ibv_wc_opcode::IBV_WC_RECV != 0
                    && (1..=c.recv_depth as u64).contains(&wc.wr_id)
                {
                    if let Err(e) = c.post_recv(wc.wr_id) {
                        log::warn!("rdma: re-posting a receive failed: {e}");
                    }
                }
            }
            if n < wcs.len() {
                break;
            }
        }
        if disconnect && c.state != ConnState::Accepted {
            // The QP is in the error state: tell the peer; DISCONNECTED then destroys it.
            // SAFETY: a live id.
            unsafe {
                rdma_disconnect(c.id.0);
            }
        }
    }
}

fn push_bounded(q: &mut VecDeque<Completion>, c: Completion) {
    if q.len() >= RECENT_EVENTS {
        q.pop_front();
    }
    q.push_back(c);
}

/// Rejects a pending request with `private_data` (at most 148 bytes: a REJ's private data;
/// rdma_cm sends IB CM reason 28, "consumer reject").
fn reject(id: &CmId, private_data: &[u8]) {
    let n = private_data.len().min(148) as u8;
    let ptr = if n == 0 {
        std::ptr::null()
    } else {
        private_data.as_ptr().cast::<libc::c_void>()
    };
    // SAFETY: a live id of a pending request; ptr is null or points to n readable bytes that
    // outlive the call (rdma_reject copies them).
    unsafe {
        rdma_reject(id.0, ptr, n);
    }
}

fn fmt_peer(p: Option<SocketAddrV4>) -> String {
    p.map_or_else(|| "?".into(), |p| p.to_string())
}
