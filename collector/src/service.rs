//! The running collector: stores, the software RNIC's thread, and the control-plane handle.
//!
//! ```text
//!   UDP 4791 ──backend──▶ RNIC thread (Responder) ──writes──▶ regions ◀──reads── queries
//!              ◀──────── ACK/NAK                                         (CLI, HTTP, tests)
//! ```
//!
//! The backend is `[rnic] backend` ([`crate::backends`]): kernel UDP, AF_XDP or DPDK.
//!
//! The RNIC thread owns the [`Responder`]; the control plane talks to it through a command
//! channel drained between bursts, and reads counters from snapshots the thread publishes, so
//! the per-packet path takes no lock.

use std::net::SocketAddrV4;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use dta_proto::batch::TxBatch;
use dta_proto::layout::AppendFormat;
use dta_proto::meta::{CollectorMeta, QpMeta};
use dta_proto::wire::ethernet::MacAddr;
use dta_proto::wire::ib::{Psn, Qpn};

use crate::config::CollectorConfig;
use crate::rnic::cm::{CmResponder, Service};
use crate::rnic::counters::RnicCounters;
use crate::rnic::responder::{Completion, DeviceConfig, QpConfig, Responder};
use crate::store::Store;
use dta_proto::wire::cm::is_gsi;
use dta_proto::wire::metarec::MetaRecord;
/// What the RNIC thread publishes; dta-rnic's, shared with the real-RNIC backend and the agent.
pub use dta_rnic::published::{Published, QpOwner};

/// A command for the RNIC thread.
pub enum RnicCommand {
    /// Create a QP; the new QPN is sent back.
    CreateQp(QpConfig, mpsc::Sender<Qpn>),
    /// Destroy a QP.
    DestroyQp(Qpn),
}

/// The directory `metadata_file` goes in, and the file's name, once the directory is safe: a
/// directory, not writable by other users, owned by the collector's user (or root). With
/// `create` a missing directory is created mode 0700; without (`dta-collector check`) a
/// missing one is accepted as it would be created.
pub fn metadata_dir(
    path: &std::path::Path,
    create: bool,
) -> Result<(std::path::PathBuf, String), String> {
    use std::os::unix::fs::{DirBuilderExt as _, MetadataExt as _};
    let what = |e: &dyn std::fmt::Display| format!("metadata_file {}: {e}", path.display());
    let name = path
        .file_name()
        .ok_or_else(|| what(&"names no file"))?
        .to_string_lossy()
        .into_owned();
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => std::path::PathBuf::from("."),
    };
    if !dir.exists() {
        if !create {
            return Ok((dir, name));
        }
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&dir)
            .map_err(|e| what(&format_args!("cannot create {}: {e}", dir.display())))?;
    }
    let md = std::fs::metadata(&dir).map_err(|e| what(&format_args!("{}: {e}", dir.display())))?;
    if !md.is_dir() {
        return Err(what(&format_args!("{} is not a directory", dir.display())));
    }
    if md.mode() & 0o022 != 0 {
        return Err(what(&format_args!(
            "its directory {} (mode {:03o}) can be written by other users; use a directory of \
             the collector's own, e.g. /run/dta/collector.json (created 0700)",
            dir.display(),
            md.mode() & 0o7777
        )));
    }
    let me = dta_io::process::effective_uid();
    if md.uid() != me && md.uid() != 0 {
        return Err(what(&format_args!(
            "its directory {} belongs to user {}, not to the collector's user {me}",
            dir.display(),
            md.uid()
        )));
    }
    Ok((dir, name))
}

/// Writes the store metadata (addresses, R_Keys, QPNs, PSNs: everything a forged write needs)
/// to `path`, readable by the collector's user only.
///
/// The file is created with mode 0600 under a new name in its directory and renamed into
/// place, so no other user ever sees it readable, half-written or replaced. The directory is
/// created (mode 0700) if missing; one that other users can write to (`/tmp` itself), or that
/// belongs to another user (someone else's `/tmp/dta`), is refused: whoever can write there
/// could swap the file for their own coordinates, or read it in the moment before the rename.
pub fn publish_metadata(path: &std::path::Path, meta: &CollectorMeta) -> Result<(), String> {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let what = |e: &dyn std::fmt::Display| format!("metadata_file {}: {e}", path.display());
    let (dir, name) = metadata_dir(path, true)?;
    let tmp = dir.join(format!(".{name}.{}.tmp", std::process::id()));
    let _ = std::fs::remove_file(&tmp);
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&tmp)
        .map_err(|e| what(&e))?;
    let body = serde_json::to_vec_pretty(meta).expect("metadata serialises");
    f.write_all(&body)
        .and_then(|_| f.sync_all())
        .and_then(|_| std::fs::rename(&tmp, path))
        .map_err(|e| {
            let _ = std::fs::remove_file(&tmp);
            what(&e)
        })
}

/// A receive of fewer packets than this is short: with `[rnic] rx_coalesce_us` the RNIC waits
/// before the next one.
pub const COALESCE_BELOW: usize = 16;

/// A running collector.
pub struct Collector {
    /// The stores, in configuration order.
    pub stores: Vec<Store>,
    /// What translators need (also written to `metadata_file`).
    pub meta: CollectorMeta,
    /// Address the software RNIC listens on.
    pub roce: SocketAddrV4,
    published: Arc<Mutex<Published>>,
    commands: mpsc::Sender<RnicCommand>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
    config: CollectorConfig,
    control: crate::http::ControlHandle,
    pull: Option<crate::zero::puller::Puller>,
}

/// Starts the `[pull]` section's puller, if there is one.
fn start_pull(config: &CollectorConfig) -> Result<Option<crate::zero::puller::Puller>, String> {
    let Some(p) = &config.pull else {
        return Ok(None);
    };
    let puller = crate::zero::puller::Puller::start(p.to_config(), None)?;
    log::info!(
        "pull: {} agent(s) every {} ms from {:?}",
        p.agents.len(),
        p.interval_ms,
        puller.local_addrs()
    );
    Ok(Some(puller))
}

impl Collector {
    /// Allocates the stores, binds the software RNIC, creates the static QPs, publishes the
    /// metadata and starts the RNIC thread.
    pub fn start(config: CollectorConfig) -> Result<Collector, String> {
        config.validate()?;
        // The control API's credentials and TLS files are checked before anything starts: a
        // token file others can read, or a broken web config, refuses the start.
        if config.collector.control.is_some()
            || config.collector.web.admin_token_file.is_some()
            || config.collector.web.web_config_file.is_some()
        {
            crate::http::server_options(&config)?;
        }
        if config.collector.backend == crate::config::Backend::Rdma {
            // A real RNIC: rdma_cm listeners and verbs on their own thread (crate::rdma).
            let published = Arc::new(Mutex::new(Published::default()));
            let stop = Arc::new(AtomicBool::new(false));
            let r = crate::rdma::start(&config, published.clone(), stop.clone())?;
            let pull = start_pull(&config)?;
            let view = pull.as_ref().map(|p| p.view());
            let control = crate::http::spawn(&config, &r.stores, published.clone(), r.roce, view)?;
            return Ok(Collector {
                control,
                pull,
                stores: r.stores,
                meta: r.meta,
                roce: r.roce,
                published,
                commands: mpsc::channel().0,
                stop,
                thread: Some(r.thread),
                config,
            });
        }
        let dev = &config.collector;
        let mac: MacAddr = dev
            .mac
            .parse()
            .map_err(|_| format!("bad MAC {:?}", dev.mac))?;
        let (mut backend, roce) = crate::backends::open(&config)?;
        let mut responder = Responder::new(DeviceConfig {
            local: roce,
            local_mac: mac,
            pmtu: dev.pmtu,
            l2_frames: backend.l2_frames(),
        });
        // A fresh QPN range per start, so frames still addressed to a previous run's QPs
        // cannot land on this run's (see Responder::set_qpn_base).
        responder.set_qpn_base(
            crate::rnic::responder::QPN_BASE + (dta_io::random::random_u32() % 0x8000) * 0x100,
        );
        let mut stores = crate::store::build_stores(&config, &mut responder)?;
        let mut static_owners = Vec::new();
        for peer in &config.static_peers {
            let peer_mac: MacAddr = peer
                .mac
                .parse()
                .map_err(|_| format!("bad MAC {:?}", peer.mac))?;
            for (si, st) in stores.iter_mut().enumerate() {
                for w in 0..peer.workers {
                    let peer_qpn = peer.qpn_base + si as u32 * peer.workers + w;
                    let psn = Psn::new(dta_io::random::random_u32());
                    // Worker w of a static translator uses RoCEv2 port roce.port + w.
                    let peer_addr = SocketAddrV4::new(*peer.roce.ip(), peer.roce.port() + w as u16);
                    let qpn = responder.create_qp(QpConfig {
                        peer: peer_addr,
                        peer_mac,
                        peer_qpn: Qpn::new(peer_qpn),
                        rq_psn: psn,
                        sq_psn: Psn::new(dta_io::random::random_u32()),
                        verify_icrc: dev.verify_icrc,
                        recv_credits: dev.recv_credits,
                    });
                    static_owners.push(QpOwner {
                        qpn: qpn.value(),
                        store: si,
                        peer: Some(peer_addr),
                    });
                    st.meta.qps.push(QpMeta {
                        qpn: qpn.value(),
                        psn: psn.value(),
                        peer_qpn,
                    });
                }
            }
        }
        let published = Arc::new(Mutex::new(Published::default()));
        // The operator interface (HTTP, epoch schedule) runs in its own threads; started
        // before the metadata is published, so a busy control port leaves no file behind.
        let pull = start_pull(&config)?;
        let view = pull.as_ref().map(|p| p.view());
        let control = crate::http::spawn(&config, &stores, published.clone(), roce, view)?;
        let meta = CollectorMeta {
            roce,
            mac: dev.mac.clone(),
            verify_icrc: dev.verify_icrc,
            stores: stores.iter().map(|s| s.meta.clone()).collect(),
        };
        if let Some(path) = &dev.metadata_file {
            publish_metadata(path, &meta)?;
            log::info!("published store metadata to {}", path.display());
        }
        let stop = Arc::new(AtomicBool::new(false));
        let (tx_cmd, rx_cmd) = mpsc::channel();
        let services: Vec<Service> = stores
            .iter()
            .enumerate()
            .map(|(i, s)| {
                let mut rec = MetaRecord::from_store_meta(&s.meta, dev.verify_icrc);
                // Sequenced Append lists can be resumed: announce and send their heads.
                let heads = s
                    .append()
                    .filter(|a| a.layout.format() == AppendFormat::Sequenced)
                    .map(|a| (s.region.clone(), a));
                rec.list_heads = heads.is_some();
                Service {
                    port: s.port,
                    name: s.meta.name.clone(),
                    record: rec.to_bytes(),
                    record_in_rep: false,
                    heads,
                    allow: config.cm_allowlist(i),
                }
            })
            .collect();
        for s in &services {
            log::info!(
                "store {:?}: RDMA_CM on port {} from {}",
                s.name,
                s.port,
                s.allow
            );
        }
        let mut cm = CmResponder::new(roce, mac, services, dev.verify_icrc);
        // A connection's store is the one listening on its port.
        let store_ports: Vec<u16> = stores.iter().map(|s| s.port).collect();
        let thread = {
            let published = published.clone();
            let stop = stop.clone();
            let recv_credits = dev.recv_credits;
            let coalesce = Duration::from_micros(dev.rnic.rx_coalesce_us as u64);
            std::thread::Builder::new()
                .name("dta-rnic".into())
                .spawn(move || {
                    let epoch = Instant::now();
                    let mut tx = TxBatch::new(dta_io::udp::MAX_BURST * 4, 9216);
                    let mut last_pub = Instant::now();
                    let mut imm_events = 0u64;
                    let (mut rx_bursts, mut coalesce_waits) = (0u64, 0u64);
                    let mut recent = std::collections::VecDeque::new();
                    while !stop.load(Ordering::Relaxed) {
                        let now = epoch.elapsed().as_nanos() as u64;
                        // RDMA_CM MADs (GSI QP) and RoCEv2 share the port: one receive for both.
                        let r = backend.recv_with(Duration::from_millis(20), &mut |burst| {
                            for d in burst {
                                if is_gsi(d.payload) {
                                    cm.handle(now, d, &mut responder, &mut tx);
                                } else {
                                    responder.handle(d, &mut tx);
                                }
                            }
                        });
                        let got = match r {
                            Ok(n) => n,
                            Err(e) => {
                                log::error!("software RNIC receive failed: {e}");
                                std::thread::sleep(Duration::from_millis(100));
                                0
                            }
                        };
                        if !tx.is_empty() {
                            let _ = backend.send_batch(&tx);
                            tx.clear();
                        }
                        let now = epoch.elapsed().as_nanos() as u64;
                        cm.poll(now, &mut responder, &mut tx);
                        responder.poll(now, &mut tx);
                        if !tx.is_empty() {
                            let _ = backend.send_batch(&tx);
                            tx.clear();
                        }
                        // A READ larger than the batch continues as soon as it was sent.
                        while responder.has_pending_output() {
                            responder.poll(now, &mut tx);
                            let _ = backend.send_batch(&tx);
                            tx.clear();
                        }
                        while let Some(c) = responder.poll_completion() {
                            if let Completion::WriteWithImm { qpn, .. } = &c {
                                imm_events += 1;
                                responder.post_recv(*qpn, 1);
                            }
                            if recent.len() >= 1024 {
                                recent.pop_front();
                            }
                            recent.push_back(c);
                        }
                        while let Ok(cmd) = rx_cmd.try_recv() {
                            match cmd {
                                RnicCommand::CreateQp(mut cfg, reply) => {
                                    cfg.recv_credits = cfg.recv_credits.max(recv_credits);
                                    let _ = reply.send(responder.create_qp(cfg));
                                }
                                RnicCommand::DestroyQp(q) => responder.destroy_qp(q),
                            }
                        }
                        // Interrupt moderation: a short receive means frames trickle in; let
                        // some gather before the next one (its ACKs are sent above). An idle
                        // RNIC still blocks in the receive and wakes for the first frame.
                        rx_bursts += (got > 0) as u64;
                        if got > 0 && got < COALESCE_BELOW && !coalesce.is_zero() {
                            coalesce_waits += 1;
                            std::thread::sleep(coalesce);
                        }
                        if last_pub.elapsed() >= Duration::from_millis(50)
                            || stop.load(Ordering::Relaxed)
                        {
                            last_pub = Instant::now();
                            let mut p = published.lock().expect("publisher lock");
                            p.counters = responder.counters();
                            p.per_qp = responder
                                .qpns()
                                .into_iter()
                                .filter_map(|q| responder.qp_counters(q).map(|c| (q.value(), c)))
                                .collect();
                            p.immediate_events = imm_events;
                            p.rx_bursts = rx_bursts;
                            p.rx_coalesce_waits = coalesce_waits;
                            p.cm = cm.counters;
                            let conns = cm.connections();
                            p.connections = conns
                                .iter()
                                .map(|(port, peer, qpn, up)| (*port, *peer, qpn.value(), *up))
                                .collect();
                            p.qp_owners.clone_from(&static_owners);
                            p.qp_owners
                                .extend(conns.iter().filter_map(|(port, peer, qpn, _)| {
                                    Some(QpOwner {
                                        qpn: qpn.value(),
                                        store: store_ports.iter().position(|p| p == port)?,
                                        peer: Some(*peer),
                                    })
                                }));
                            p.recent_events.extend(recent.drain(..));
                            while p.recent_events.len() > 1024 {
                                p.recent_events.pop_front();
                            }
                        }
                    }
                    let mut p = published.lock().expect("publisher lock");
                    p.counters = responder.counters();
                })
                .map_err(|e| e.to_string())?
        };
        Ok(Collector {
            stores,
            meta,
            roce,
            published,
            commands: tx_cmd,
            stop,
            thread: Some(thread),
            config,
            control,
            pull,
        })
    }

    /// The configuration it runs with.
    pub fn config(&self) -> &CollectorConfig {
        &self.config
    }

    /// The latest published device counters (at most ~50 ms old).
    pub fn counters(&self) -> RnicCounters {
        self.published.lock().expect("publisher lock").counters
    }

    /// Runs `f` on the published state.
    pub fn with_published<R>(&self, f: impl FnOnce(&Published) -> R) -> R {
        f(&self.published.lock().expect("publisher lock"))
    }

    /// Sends a command to the RNIC thread.
    pub fn command(&self, c: RnicCommand) -> bool {
        self.commands.send(c).is_ok()
    }

    /// The store called `name`.
    pub fn store(&self, name: &str) -> Option<&Store> {
        self.stores.iter().find(|s| s.meta.name == name)
    }

    /// Waits until the published counters satisfy `pred` or `timeout` passes.
    pub fn wait_for(&self, timeout: Duration, pred: impl Fn(&RnicCounters) -> bool) -> bool {
        let t0 = Instant::now();
        while t0.elapsed() < timeout {
            if pred(&self.counters()) {
                return true;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        false
    }

    /// Stops the RNIC thread and unmaps the regions (file-backed regions stay on disk).
    pub fn shutdown(mut self) {
        self.stop_thread();
    }

    /// The address the HTTP control API listens on, if `[collector] control` is set.
    pub fn control_addr(&self) -> Option<SocketAddrV4> {
        self.control.addr()
    }

    /// The `[pull]` section's puller, if there is one.
    pub fn pull(&self) -> Option<&crate::zero::puller::Puller> {
        self.pull.as_ref()
    }

    fn stop_thread(&mut self) {
        self.control.stop();
        drop(self.pull.take());
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for Collector {
    fn drop(&mut self) {
        self.stop_thread();
        if let Some(p) = &self.config.collector.metadata_file {
            let _ = std::fs::remove_file(p);
        }
    }
}
