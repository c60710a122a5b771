//! Each worker's packet I/O backend, chosen by `translator.backend`, plus the optional
//! capture of everything the workers transmit (`translator.capture`).
//!
//! The kernel UDP backend is built by [`crate::run`] (its sockets are part of the worker
//! set-up); this module opens the raw-frame backends and wraps any backend in a capture:
//!
//! - `af_xdp` (cargo feature `af_xdp`): an AF_XDP socket on `[af_xdp] interface`, queue
//!   `queue + w`, with the steering program for the report port and worker w's RoCEv2 port;
//! - `dpdk` (cargo feature `dpdk`): DPDK port `[dpdk] ports[w]` (port 0 if none is named),
//!   the EAL started once with `[dpdk] eal_args`;
//! - `pcap`: `[pcap] input` held in memory and replayed (worker w of k takes every k-th frame),
//!   transmitted frames written to `[pcap] output`.
//!
//! A backend whose cargo feature is not compiled in is refused with an error naming the
//! feature. Raw backends serve exactly two UDP ports: `listen`'s port (reports) and `roce`'s
//! port + w (RoCEv2 responses and RDMA_CM), and transmit whole Ethernet frames from
//! `translator.mac` to each collector's `mac`.

use std::net::SocketAddrV4;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use dta_io::backend::Backend;
use dta_io::frame::FrameFilter;
use dta_io::pcap::{capture_file, CaptureBackend, PcapBackend, PcapTrace, ReplayConfig};
use dta_proto::wire::ethernet::MacAddr;

use crate::config::{BackendKind, TranslatorConfig};

/// The file worker `w` of `workers` captures to: `base` itself for one worker, otherwise
/// `STEM-wW.EXT` next to it.
pub fn capture_path(base: &Path, w: usize, workers: usize) -> PathBuf {
    if workers <= 1 {
        return base.to_path_buf();
    }
    let stem = base
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    let name = match base.extension() {
        Some(e) => format!("{stem}-w{w}.{}", e.to_string_lossy()),
        None => format!("{stem}-w{w}"),
    };
    base.with_file_name(name)
}

/// Wraps `backend` so every transmitted batch is also written to `path`. For the kernel UDP
/// backend, bare payloads (NACKs) are wrapped in Ethernet/IPv4/UDP headers from `mac`/`local`.
pub fn with_capture(
    backend: Box<dyn Backend>,
    path: &Path,
    mac: MacAddr,
    local: SocketAddrV4,
) -> Result<Box<dyn Backend>, String> {
    let mut cap = capture_file(path)
        .map_err(|e| format!("translator.capture: cannot create {}: {e}", path.display()))?;
    if !backend.l2_frames() {
        cap = cap.wrap_payloads_from(mac, local);
    }
    log::info!(
        "capturing what the {} backend transmits to {}",
        backend.name(),
        path.display()
    );
    Ok(Box::new(CaptureBackend::new(backend, cap)))
}

/// What the raw-frame backends share across workers (the pcap traces, loaded once).
pub struct RawBackends {
    kind: BackendKind,
    traces: Vec<Arc<PcapTrace>>,
}

impl RawBackends {
    /// Checks the backend is compiled in and loads what every worker shares.
    pub fn prepare(cfg: &TranslatorConfig) -> Result<RawBackends, String> {
        let kind = cfg.translator.backend;
        let workers = cfg.translator.workers;
        let mut traces = Vec::new();
        match kind {
            BackendKind::Udp => {
                return Err("the kernel UDP backend is built by the worker set-up".into())
            }
            BackendKind::AfXdp => require_feature("af_xdp", dta_io::config::AF_XDP_COMPILED)?,
            BackendKind::Dpdk => require_feature("dpdk", dta_io::config::DPDK_COMPILED)?,
            BackendKind::Pcap => {
                let mut all = PcapTrace::default();
                for p in &cfg.pcap.input {
                    let t = PcapTrace::open(p)
                        .map_err(|e| format!("pcap.input: {}: {e}", p.display()))?;
                    for i in 0..t.len() {
                        all.push(t.frame(i));
                    }
                }
                if all.is_empty() {
                    return Err("pcap.input: the files hold no frame".into());
                }
                if workers == 1 {
                    traces.push(Arc::new(all));
                } else {
                    for w in 0..workers {
                        let mine = (w..all.len()).step_by(workers).map(|i| all.frame(i));
                        traces.push(Arc::new(PcapTrace::from_frames(mine)));
                    }
                }
            }
        }
        Ok(RawBackends { kind, traces })
    }

    /// Opens worker `w`'s backend. Returns it with the worker's RoCEv2 address.
    pub fn open(
        &self,
        cfg: &TranslatorConfig,
        w: usize,
    ) -> Result<(Box<dyn Backend>, SocketAddrV4), String> {
        let t = &cfg.translator;
        let report_port = t.listen.port();
        let roce = SocketAddrV4::new(*t.roce.ip(), t.roce.port() + w as u16);
        if (report_port as usize).abs_diff(t.roce.port() as usize) < t.workers
            && t.roce.port() <= report_port
        {
            return Err(format!(
                "translator.listen port {report_port} collides with a worker's RoCEv2 port \
                 (roce port + 0..{})",
                t.workers
            ));
        }
        let mut ports = vec![report_port, roce.port()];
        if cfg.int.port != 0 {
            ports.push(cfg.int.port);
        }
        let backend: Box<dyn Backend> = match self.kind {
            BackendKind::Udp => unreachable!("prepare refuses udp"),
            BackendKind::Pcap => {
                let p = &cfg.pcap;
                let filter = FrameFilter::ports(&ports).ok_or("too many ports")?;
                let replay = ReplayConfig {
                    loops: (p.loops > 0).then_some(p.loops),
                    rate: (p.rate > 0.0).then_some(p.rate),
                    burst: dta_io::pcap::MAX_BURST,
                    filter,
                };
                let b = PcapBackend::new(self.traces[w].clone(), replay);
                match &p.output {
                    Some(out) => {
                        let path = capture_path(out, w, t.workers);
                        Box::new(
                            b.capture_to(&path)
                                .map_err(|e| format!("pcap.output {}: {e}", path.display()))?,
                        )
                    }
                    None => Box::new(b),
                }
            }
            BackendKind::AfXdp => open_af_xdp(cfg, w, &ports)?,
            BackendKind::Dpdk => open_dpdk(cfg, w, &ports)?,
        };
        log::info!(
            "worker {w}: {} backend, reports on port {report_port}, RoCEv2 from {roce}",
            backend.name()
        );
        Ok((backend, roce))
    }
}

fn require_feature(name: &str, on: bool) -> Result<(), String> {
    dta_io::config::require_feature("translator.backend", name, on, "dta-translator")
}

fn open_af_xdp(
    cfg: &TranslatorConfig,
    w: usize,
    ports: &[u16],
) -> Result<Box<dyn Backend>, String> {
    require_feature("af_xdp", dta_io::config::AF_XDP_COMPILED)?;
    dta_io::config::open_af_xdp(&cfg.af_xdp, w as u32, ports)
}

fn open_dpdk(cfg: &TranslatorConfig, w: usize, ports: &[u16]) -> Result<Box<dyn Backend>, String> {
    require_feature("dpdk", dta_io::config::DPDK_COMPILED)?;
    dta_io::config::open_dpdk(&cfg.dpdk, w, ports)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capture_paths_per_worker() {
        let p = Path::new("/tmp/out.pcap");
        assert_eq!(capture_path(p, 0, 1), PathBuf::from("/tmp/out.pcap"));
        assert_eq!(capture_path(p, 1, 2), PathBuf::from("/tmp/out-w1.pcap"));
        assert_eq!(
            capture_path(Path::new("cap"), 0, 3),
            PathBuf::from("cap-w0")
        );
    }

    #[test]
    fn backends_not_compiled_in_name_their_feature() {
        let mut cfg = TranslatorConfig::default();
        cfg.translator.backend = BackendKind::AfXdp;
        cfg.af_xdp.interface = "lo".into();
        if !cfg!(feature = "af_xdp") {
            let e = RawBackends::prepare(&cfg).err().expect("refused");
            assert!(e.contains("feature `af_xdp`"), "{e}");
        }
        cfg.translator.backend = BackendKind::Dpdk;
        if !cfg!(feature = "dpdk") {
            let e = RawBackends::prepare(&cfg).err().expect("refused");
            assert!(e.contains("feature `dpdk`"), "{e}");
        }
    }

    #[test]
    fn pcap_input_is_sharded_across_workers() {
        let dir = std::env::temp_dir().join(format!("dta-backends-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let input = dir.join("in.pcap");
        let mut cap = dta_io::pcap::PcapCapture::create(&input).unwrap();
        for i in 0..10u8 {
            cap.write_frame(std::time::Duration::ZERO, &[i; 60])
                .unwrap();
        }
        drop(cap.into_inner().unwrap());
        let mut cfg = TranslatorConfig::default();
        cfg.translator.backend = BackendKind::Pcap;
        cfg.translator.workers = 3;
        cfg.pcap.input = vec![input.clone(), input];
        let r = RawBackends::prepare(&cfg).unwrap();
        let lens: Vec<usize> = r.traces.iter().map(|t| t.len()).collect();
        assert_eq!(lens, vec![7, 7, 6]);
        assert_eq!(r.traces[1].frame(0)[0], 1);
        assert_eq!(r.traces[1].frame(1)[0], 4);
        let (b, roce) = r.open(&cfg, 2).unwrap();
        assert_eq!(b.name(), "pcap");
        assert!(b.l2_frames());
        assert_eq!(roce.port(), cfg.translator.roce.port() + 2);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
