//! Starting and stopping a translator: [`Translator::start`] binds the sockets (or opens the
//! raw backends), connects every collector (RDMA_CM or static metadata), builds one pipeline
//! per worker and spawns the dispatcher, the workers and the cluster watcher;
//! [`control_only`] connects on behalf of a hardware translator without starting workers.

use std::net::SocketAddrV4;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use dta_io::backend::Backend;
use dta_io::udp::{UdpBackend, UdpOptions, UdpSocket};
use dta_proto::meta::{CollectorMeta, QpMeta, StoreKind, StoreMeta};
use dta_proto::wire::ethernet::MacAddr;

use super::connect::{connect_blocking, worker_qpn, StoreInitiator, RECONNECT_SLOTS};
use super::dispatch::{DispatchRx, HandoffLinks};
use super::routes::{
    check_sketch_workers, load_collectors, pipeline_for, resolve_routes, unserved_report_kinds,
};
use super::sockets::{
    bind_int_sockets, bind_report_sockets, bind_roce_sockets, check_qpn_steering,
};
use super::{Worker, WorkerSnapshot};
use crate::config::TranslatorConfig;
use crate::control::cluster::{cluster_routes, RouteBoard};
use crate::control::cm::CmInitiator;
use crate::datapath::pipeline::Pipeline;
use crate::datapath::stats::TranslatorCounters;

/// A running translator.
pub struct Translator {
    /// The metrics endpoint, if configured.
    pub metrics: Option<crate::control::metrics::MetricsServer>,
    /// Where reports are received.
    pub report_addr: SocketAddrV4,
    /// Our RoCEv2 address.
    pub roce_addr: SocketAddrV4,
    snapshots: Arc<Vec<Mutex<WorkerSnapshot>>>,
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
    /// A collector cluster's routes, if this translator is a member of one.
    board: Option<Arc<RouteBoard>>,
}

impl Translator {
    /// Binds the sockets, connects to every collector (RDMA_CM, or the static metadata), builds
    /// one pipeline per worker and starts the workers.
    ///
    /// Reports reach the workers as `translator.report_steering` says; RoCEv2 answers reach
    /// the worker owning their QP as `translator.roce_steering` says (one shared port with BPF
    /// steering, or port `roce.port + w` for worker `w`).
    pub fn start(cfg: TranslatorConfig) -> Result<Translator, String> {
        cfg.validate()?;
        let mut collectors = load_collectors(&cfg)?;
        let t = &cfg.translator;
        let stop = Arc::new(AtomicBool::new(false));
        let snapshots: Arc<Vec<Mutex<WorkerSnapshot>>> = Arc::new(
            (0..t.workers)
                .map(|_| Mutex::new(WorkerSnapshot::default()))
                .collect(),
        );
        let local_mac: MacAddr = t
            .mac
            .parse()
            .map_err(|_| format!("translator.mac: bad MAC {:?}", t.mac))?;
        let raw = match t.backend {
            crate::config::BackendKind::Udp => None,
            _ => Some(crate::backends::RawBackends::prepare(&cfg)?),
        };
        let mut report_addr = t.listen;
        let mut roce_addrs: Vec<SocketAddrV4> = Vec::new();
        let mut backends: Vec<Box<dyn Backend>> = Vec::new();
        let mut dispatcher = None;
        let mut shared_roce = false;
        if let Some(raw) = &raw {
            for w in 0..t.workers {
                let (b, roce_addr) = raw.open(&cfg, w)?;
                roce_addrs.push(roce_addr);
                backends.push(b);
            }
        } else {
            let (mut report_rxs, addr, d) = bind_report_sockets(&cfg, stop.clone())?;
            report_addr = addr;
            dispatcher = d;
            let (roce_socks, shared) = bind_roce_sockets(&cfg)?;
            let mut int_rxs = bind_int_sockets(&cfg)?;
            shared_roce = shared;
            roce_addrs = roce_socks.iter().map(|s| s.local_addr()).collect();
            if roce_addrs
                .iter()
                .any(|a| a.port() == report_addr.port() && a.ip() == report_addr.ip())
            {
                return Err(
                    "translator.listen and translator.roce must not be the same address".into(),
                );
            }
            for (w, qs) in roce_socks.into_iter().enumerate() {
                let (qrx, qtx) = qs.split();
                let mut rxs = Vec::new();
                if let Some(r) = report_rxs.get_mut(w).and_then(Option::take) {
                    rxs.push(r);
                }
                if let Some(r) = int_rxs.get_mut(w).and_then(Option::take) {
                    rxs.push(r);
                }
                rxs.push(qrx);
                let mut b = UdpBackend::new(rxs, qtx);
                if let Some((_, ends)) = &dispatcher {
                    b = b.with_waker(ends[w].waker.clone());
                }
                backends.push(Box::new(b));
            }
        }
        if let Some(base) = &t.capture {
            backends = backends
                .into_iter()
                .enumerate()
                .map(|(w, b)| {
                    let path = crate::backends::capture_path(base, w, t.workers);
                    crate::backends::with_capture(b, &path, local_mac, roce_addrs[w])
                })
                .collect::<Result<_, _>>()?;
        }
        let l2_frames = backends.first().is_some_and(|b| b.l2_frames());
        // RDMA_CM collectors: connect every worker's QPs now, all under one CA GUID for this
        // process, so a collector tells our restart (new GUID) from a sibling worker.
        let incarnation = crate::control::cm::incarnation_guid(dta_io::random::random_u32());
        let mut initiators: Vec<Vec<StoreInitiator>> = (0..t.workers).map(|_| Vec::new()).collect();
        for (ci, c) in cfg.collectors.iter().enumerate() {
            let Some(addr) = c.endpoint.cm else { continue };
            let mac: MacAddr = match &c.endpoint.mac {
                Some(m) => m
                    .parse()
                    .map_err(|_| format!("collector {:?}: bad MAC {m:?}", c.endpoint.name))?,
                None => MacAddr::BROADCAST,
            };
            let mut metas: Vec<StoreMeta> = Vec::new();
            for (w, backend) in backends.iter_mut().enumerate() {
                // The worker index in the top byte of our communication IDs lets the BPF
                // program steer CM replies (see dta_io::reuseport); 2^22 connections fit below.
                let seed = (dta_io::random::random_u32() & 0x003F_FFFF) | (w as u32) << 24;
                let mut cm = CmInitiator::new(roce_addrs[w], local_mac, addr, mac, l2_frames, seed)
                    .with_ca_guid(incarnation);
                let n = t.workers as u32;
                let got = connect_blocking(
                    backend.as_mut(),
                    &mut cm,
                    &c.endpoint.ports,
                    (worker_qpn(ci as u32 * 0x40, w, t.workers), n),
                    Duration::from_secs(c.connect_timeout_secs),
                )
                .map_err(|e| {
                    format!("collector {:?} ({addr}), worker {w}: {e}", c.endpoint.name)
                })?;
                let mut names = Vec::new();
                for (i, (port, meta, b)) in got.into_iter().enumerate() {
                    names.push((port, meta.name.clone()));
                    if w == 0 {
                        metas.push(StoreMeta {
                            qps: Vec::new(),
                            ..meta.clone()
                        });
                    }
                    metas[i].qps.push(QpMeta {
                        qpn: b.remote_qpn.value(),
                        psn: b.start_psn.value(),
                        peer_qpn: b.local_qpn.value(),
                    });
                }
                initiators[w].push((cm, names));
            }
            log::info!(
                "collector {:?}: connected {} store(s) over RDMA_CM for {} worker(s)",
                c.endpoint.name,
                metas.len(),
                t.workers
            );
            collectors.insert(
                ci.min(collectors.len()),
                (
                    c.endpoint.name.clone(),
                    CollectorMeta {
                        roce: addr,
                        mac: c
                            .endpoint
                            .mac
                            .clone()
                            .unwrap_or_else(|| "ff:ff:ff:ff:ff:ff".into()),
                        verify_icrc: true,
                        stores: metas,
                    },
                ),
            );
        }
        let cores = if t.pin_cores {
            core_affinity::get_core_ids().unwrap_or_default()
        } else {
            Vec::new()
        };
        let mut threads = Vec::new();
        let mut links: Vec<Option<HandoffLinks>> = HandoffLinks::mesh(t.workers)
            .into_iter()
            .map(Some)
            .collect();
        if shared_roce && cfg.collectors.iter().any(|c| c.endpoint.cm.is_none()) {
            log::warn!(
                "translator: the {} workers share RoCEv2 address {} (roce_steering); a collector \
                 set up from static metadata must answer every worker there (a real RNIC does; \
                 the software RNIC's static peers answer worker w on port + w: use \
                 roce_steering = \"port-per-worker\" with them)",
                t.workers,
                roce_addrs[0]
            );
        }
        for warning in unserved_report_kinds(&cfg, &collectors) {
            log::warn!("translator: {warning}");
        }
        check_sketch_workers(&collectors, t.workers)?;
        for (cn, m) in &collectors {
            for s in &m.stores {
                if let StoreKind::Append {
                    lists, first_list, ..
                } = s.kind
                {
                    log::info!(
                        "collector {cn:?} store {:?}: Append lists {first_list}..{} (reports \
                         for other lists are dropped as drop_unknown_list)",
                        s.name,
                        first_list as u64 + lists as u64
                    );
                }
            }
        }
        // A cluster member routes by the epoch active now, and follows the epochs after it.
        let board = match &cfg.cluster_map {
            Some(cluster) => {
                let fallback = resolve_routes(&cfg, &collectors)?;
                let p = cluster.active_at(crate::control::cluster::unix_now());
                let rs = cluster_routes(cluster, p, &collectors, fallback.clone())?;
                log::info!(
                    "cluster {:?}: routing by epoch {} of {}",
                    cluster.name,
                    p.number,
                    cluster.epoch
                );
                let board = Arc::new(RouteBoard::new(rs));
                let path = cfg.cluster.clone().unwrap_or_default();
                threads.push(crate::control::cluster::spawn_watcher(
                    path,
                    cluster.clone(),
                    collectors.clone(),
                    fallback,
                    board.clone(),
                    stop.clone(),
                )?);
                Some(board)
            }
            None => None,
        };
        let mut pipelines = Vec::new();
        for (w, &roce) in roce_addrs.iter().enumerate() {
            let (mut pc, targets) = pipeline_for(&cfg, w, roce, &collectors)?;
            pc.l2_frames = l2_frames;
            if shared_roce {
                check_qpn_steering(&targets, w, t.workers)?;
            }
            let mut p = Pipeline::new(pc, &targets).map_err(|e| e.to_string())?;
            if let Some(b) = &board {
                p.set_routes(&b.current().1)
                    .map_err(|e| format!("cluster: {e}"))?;
            }
            if let Some(s) = cfg.int.settings() {
                p.set_int_ingest(s);
            }
            pipelines.push(p);
        }
        let mut dispatch_ends: Vec<Option<DispatchRx>> = Vec::new();
        if let Some((d, ends)) = dispatcher {
            dispatch_ends = ends.into_iter().map(Some).collect();
            // With pinning, the dispatcher takes the first core after the workers' (if any).
            let core = cores.get(t.workers).copied();
            let th = std::thread::Builder::new()
                .name("dta-dispatch".into())
                .spawn(move || {
                    if let Some(c) = core {
                        core_affinity::set_for_current(c);
                    }
                    d.run()
                })
                .map_err(|e| e.to_string())?;
            threads.push(th);
        }
        for (w, (backend, pipeline)) in backends.into_iter().zip(pipelines).enumerate() {
            let worker = Worker {
                index: w,
                pipeline,
                backend,
                report_port: report_addr.port(),
                int_port: cfg.int.port,
                stop: stop.clone(),
                snapshots: snapshots.clone(),
                initiators: std::mem::take(&mut initiators[w]),
                workers: t.workers,
                qpn_slot: RECONNECT_SLOTS,
                dispatched: dispatch_ends.get_mut(w).and_then(Option::take),
                links: links[w].take().expect("one link set per worker"),
                reconnects: 0,
                stats_interval_ns: t.stats_interval_ms * 1_000_000,
                routes: board.as_ref().map(|b| (b.clone(), b.generation())),
            };
            let core = cores.get(w).copied();
            let th = std::thread::Builder::new()
                .name(format!("dta-worker-{w}"))
                .spawn(move || {
                    if let Some(c) = core {
                        core_affinity::set_for_current(c);
                    }
                    worker.run();
                })
                .map_err(|e| e.to_string())?;
            threads.push(th);
        }
        let roce_addr = roce_addrs[0];
        log::info!(
            "translator: reports on {report_addr} ({}), RoCEv2 from {roce_addr} ({}), {} worker(s)",
            if t.report_steering.dispatches(t.workers) {
                "a dispatcher thread"
            } else {
                "a socket per worker"
            },
            if shared_roce {
                "one port, BPF steering by QPN"
            } else {
                "a port per worker"
            },
            t.workers
        );
        let metrics = match t.metrics {
            Some(a) => Some(crate::control::metrics::MetricsServer::spawn_with(
                a,
                snapshots.clone(),
                &t.web,
            )?),
            None => None,
        };
        Ok(Translator {
            metrics,
            report_addr,
            roce_addr,
            snapshots,
            stop,
            threads,
            board,
        })
    }

    /// The collector-cluster epoch the workers are told to route by (they take it up within
    /// a loop iteration), if this translator is a cluster member.
    pub fn cluster_epoch(&self) -> Option<u32> {
        self.board.as_ref().map(|b| b.current().1.epoch)
    }

    /// Per-worker snapshots (at most ~50 ms old).
    pub fn snapshots(&self) -> Vec<WorkerSnapshot> {
        self.snapshots
            .iter()
            .map(|m| m.lock().expect("snapshot lock").clone())
            .collect()
    }

    /// All workers' counters merged.
    pub fn counters(&self) -> TranslatorCounters {
        WorkerSnapshot::total(&self.snapshots())
    }

    /// Waits until the merged counters satisfy `pred` or `timeout` passes.
    pub fn wait_for(&self, timeout: Duration, pred: impl Fn(&TranslatorCounters) -> bool) -> bool {
        self.wait_snapshots(timeout, |snaps| pred(&WorkerSnapshot::total(snaps)))
    }

    /// Waits until the workers' snapshots (published together, each at most ~50 ms old)
    /// satisfy `pred` or `timeout` passes.
    pub fn wait_snapshots(
        &self,
        timeout: Duration,
        pred: impl Fn(&[WorkerSnapshot]) -> bool,
    ) -> bool {
        let t0 = Instant::now();
        while t0.elapsed() < timeout {
            if pred(&self.snapshots()) {
                return true;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        false
    }

    /// Flushes partial batches and caches, then stops the workers.
    pub fn shutdown(mut self) -> Vec<WorkerSnapshot> {
        self.stop_workers();
        self.snapshots()
    }

    fn stop_workers(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

impl Drop for Translator {
    fn drop(&mut self) {
        self.stop_workers();
    }
}

/// `--control-only`: connect every store (RDMA_CM, or the static metadata) on behalf of a
/// hardware translator and return what its table writer needs, without starting workers.
///
/// The QPs stay connected after this returns (no DREQ is sent): the Tofino takes them over.
/// It must send from the same IP and UDP port (`translator.roce`) this process connected from.
pub fn control_only(cfg: &TranslatorConfig) -> Result<serde_json::Value, String> {
    cfg.validate()?;
    let t = &cfg.translator;
    let local_mac: MacAddr = t
        .mac
        .parse()
        .map_err(|_| format!("translator.mac: bad MAC {:?}", t.mac))?;
    let qs = UdpSocket::bind(t.roce, &UdpOptions::default())
        .map_err(|e| format!("cannot bind the RoCEv2 socket {}: {e}", t.roce))?;
    let local = qs.local_addr();
    let (qrx, qtx) = qs.split();
    let mut backend = UdpBackend::new(vec![qrx], qtx);
    let mut out = Vec::new();
    let mut push = |collector: &str, roce: SocketAddrV4, meta: &StoreMeta, q: &QpMeta| {
        let mut v = serde_json::to_value(meta).unwrap_or_default();
        if let Some(o) = v.as_object_mut() {
            o.remove("qps");
            o.insert("store".into(), meta.name.clone().into());
            o.insert("collector".into(), collector.into());
            o.insert("collector_roce".into(), roce.to_string().into());
            o.insert("translator_roce".into(), local.to_string().into());
            o.insert("qpn".into(), q.peer_qpn.into());
            o.insert("remote_qpn".into(), q.qpn.into());
            o.insert("psn".into(), q.psn.into());
        }
        out.push(v);
    };
    for (name, m) in load_collectors(cfg)? {
        for s in &m.stores {
            let q = s
                .qps
                .first()
                .ok_or_else(|| format!("collector {name:?} store {:?}: no QP prepared", s.name))?;
            push(&name, m.roce, s, q);
        }
    }
    for (ci, c) in cfg.collectors.iter().enumerate() {
        let Some(addr) = c.endpoint.cm else { continue };
        let mac: MacAddr = match &c.endpoint.mac {
            Some(m) => m
                .parse()
                .map_err(|_| format!("collector {:?}: bad MAC {m:?}", c.endpoint.name))?,
            None => MacAddr::BROADCAST,
        };
        let mut cm = CmInitiator::new(
            local,
            local_mac,
            addr,
            mac,
            false,
            dta_io::random::random_u32(),
        )
        .with_ca_guid(crate::control::cm::incarnation_guid(
            dta_io::random::random_u32(),
        ));
        let got = connect_blocking(
            &mut backend,
            &mut cm,
            &c.endpoint.ports,
            (0x100 + ci as u32 * 0x40, 1),
            Duration::from_secs(c.connect_timeout_secs),
        )
        .map_err(|e| format!("collector {:?} ({addr}): {e}", c.endpoint.name))?;
        for (_, meta, b) in got {
            push(
                &c.endpoint.name,
                addr,
                &meta,
                &QpMeta {
                    qpn: b.remote_qpn.value(),
                    psn: b.start_psn.value(),
                    peer_qpn: b.local_qpn.value(),
                },
            );
        }
    }
    Ok(serde_json::Value::Array(out))
}
