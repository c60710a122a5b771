//! The event thread of the real-RNIC backend: rdma_cm listeners, connection requests and
//! their acceptance, the poll loop and what it publishes.
//!
//! Everything verbs-related is created and destroyed on this one thread; the control plane
//! only sees [`Published`] snapshots and the shared [`Region`]s. Owns: the [`Backend`] and its
//! rdma_cm side. May not: touch a region's bytes (the NIC does), or run anywhere but its
//! thread. Completions are [`super::completions`]'s, devices [`super::device`]'s,
//! connections [`super::conn`]'s.

use std::collections::{HashMap, VecDeque};
use std::net::{Ipv4Addr, SocketAddrV4};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use rdma_sys::*;

use dta_proto::wire::listheads;
use dta_proto::zero::RegionRecord;

use super::conn::{Conn, ConnState};
use super::device::Device;
use super::verbs::{self, CmId, CompChannel, Cq, EventChannel, Mr};
use super::{StoreSpec, SOFTWARE_HINT};
use crate::cm::{beyond_peer_limit, CmCounters, NOT_ALLOWED_TEXT};
use crate::counters::RnicCounters;
use crate::published::{Published, QpOwner};
use crate::responder::Completion;

/// Bytes per receive buffer (a SEND larger than this is answered with a NAK by the NIC).
pub(super) const RECV_SLOT: usize = 256;
/// Receive WQEs kept posted per connection (clamped to the device's limit).
const MAX_RECV_DEPTH: u32 = 256;
/// Send queue depth: the metadata SEND, then the list-head SENDs, at most this many at once.
pub(super) const SEND_DEPTH: u32 = 8;
/// `wr_id` of the metadata SEND; receives use their slot index, list-head SENDs
/// `HEADS_WR_BASE + message`.
pub(super) const META_WR_ID: u64 = u64::MAX;
/// `wr_id` of the first list-head SEND.
pub(super) const HEADS_WR_BASE: u64 = 1 << 32;
/// Path MTU the list-head messages are sized for: the smallest RoCEv2 MTU in use (rxe's on a
/// 1,500-byte Ethernet MTU), so every message fits one packet whatever the path.
pub(super) const HEADS_PMTU: usize = 1024;
/// Responder resources / initiator depth asked for at most (mlx5 allows 16).
const MAX_RD_ATOM: u8 = 16;
/// How often counters are published.
const PUBLISH_EVERY: Duration = Duration::from_millis(100);
/// Completion events kept for the control plane.
pub(super) const RECENT_EVENTS: usize = 1024;

/// What a connection owns besides its id: completion channel, CQ, buffers and their MR.
pub(super) type ConnParts = (CompChannel, Cq, Box<[u8]>, Mr);

/// A copy of one rdma_cm event (the event itself is acknowledged before it is acted on).
pub(super) struct CmEvent {
    pub(super) kind: u32,
    pub(super) id: *mut rdma_cm_id,
    pub(super) listen_id: *mut rdma_cm_id,
    pub(super) status: i32,
    pub(super) conn: rdma_conn_param,
}

pub(super) struct Backend {
    pub(super) stores: Vec<StoreSpec>,
    // Drop order: connections, devices (MRs, PDs), listeners, then the event channel.
    pub(super) conns: HashMap<usize, Conn>,
    /// Connections accepted so far (each one's `order`).
    pub(super) accepted: u64,
    pub(super) devices: Vec<Device>,
    pub(super) listeners: Vec<CmId>,
    pub(super) channel: EventChannel,
    pub(super) imm_events: u64,
    pub(super) recent: VecDeque<Completion>,
    pub(super) own: RnicCounters,
    /// Refused peers already logged at `warn` (at most 256).
    pub(super) refused_logged: std::collections::HashSet<Ipv4Addr>,
    /// Peers whose connections were replaced for the per-peer bound, logged at `warn` (at most
    /// 256; later ones go to `debug`, so a peer reconnecting in a loop cannot fill the log).
    pub(super) bounded_logged: std::collections::HashSet<Ipv4Addr>,
    /// Connection requests seen and refused (the software RNIC's names; the rest stay 0).
    pub(super) cm: CmCounters,
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
    pub(super) fn open(ip: Ipv4Addr, stores: Vec<StoreSpec>) -> Result<Backend, String> {
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
    pub(super) fn rkeys(&self) -> Vec<Option<u32>> {
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

    pub(super) fn run(&mut self, stop: &AtomicBool, published: &Mutex<Published>) {
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
                    crate::cm::MAX_CONNS_PER_PEER,
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

pub(super) fn fmt_peer(p: Option<SocketAddrV4>) -> String {
    p.map_or_else(|| "?".into(), |p| p.to_string())
}
