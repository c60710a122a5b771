//! Binding the kernel UDP sockets as the configuration says: the report socket(s)
//! (`report_steering`: one per worker with `SO_REUSEPORT`, or one read by the dispatcher), the
//! INT report sockets, and the RoCEv2 sockets (`roce_steering`: a port per worker, or one port
//! with the QPN-steering BPF program), with the check that static QPNs obey that steering.

use std::net::SocketAddrV4;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use dta_io::udp::{UdpOptions, UdpRx, UdpSocket};

use super::dispatch::{DispatchRx, Dispatcher};
use crate::config::TranslatorConfig;
use crate::datapath::pipeline::CollectorTarget;

/// What [`bind_report_sockets`] returns: one report socket per worker (reuseport) or none, the
/// report address, and the dispatcher with its worker ends (dispatcher).
pub(super) type ReportSockets = (
    Vec<Option<UdpRx>>,
    SocketAddrV4,
    Option<(Dispatcher, Vec<DispatchRx>)>,
);

/// Binds the report socket(s) as `translator.report_steering` says.
pub(super) fn bind_report_sockets(
    cfg: &TranslatorConfig,
    stop: Arc<AtomicBool>,
) -> Result<ReportSockets, String> {
    let t = &cfg.translator;
    let dispatch = t.report_steering.dispatches(t.workers);
    let opts = UdpOptions {
        rcvbuf: t.socket_buffer,
        sndbuf: t.socket_buffer,
        reuse_port: t.workers > 1 && !dispatch,
    };
    let mut addr = t.listen;
    let mut rxs = Vec::new();
    for _ in 0..if dispatch { 1 } else { t.workers } {
        let rs = UdpSocket::bind(addr, &opts)
            .map_err(|e| format!("cannot bind the report socket {addr}: {e}"))?;
        addr = rs.local_addr();
        rxs.push(rs.split().0);
    }
    if dispatch {
        let rx = rxs.pop().expect("one socket");
        let (d, ends) = Dispatcher::new(rx, t.workers, stop)
            .map_err(|e| format!("cannot create the dispatcher's wakers: {e}"))?;
        return Ok((Vec::new(), addr, Some((d, ends))));
    }
    Ok((rxs.into_iter().map(Some).collect(), addr, None))
}

/// Binds one INT Telemetry Report socket per worker at `listen`'s IP and `int.port`
/// (`SO_REUSEPORT` across workers: one switch's reports stay on one worker, so its sequence
/// numbers are tracked in order); none when INT ingest is off.
pub(super) fn bind_int_sockets(cfg: &TranslatorConfig) -> Result<Vec<Option<UdpRx>>, String> {
    let t = &cfg.translator;
    if cfg.int.port == 0 {
        return Ok(Vec::new());
    }
    let opts = UdpOptions {
        rcvbuf: t.socket_buffer,
        sndbuf: t.socket_buffer,
        reuse_port: t.workers > 1,
    };
    let addr = SocketAddrV4::new(*t.listen.ip(), cfg.int.port);
    (0..t.workers)
        .map(|_| {
            UdpSocket::bind(addr, &opts)
                .map(|s| Some(s.split().0))
                .map_err(|e| format!("cannot bind the INT report socket {addr}: {e}"))
        })
        .collect()
}

/// Binds one RoCEv2 socket per worker as `translator.roce_steering` says; returns them and
/// whether they share one port (BPF steering by QPN attached).
pub(super) fn bind_roce_sockets(cfg: &TranslatorConfig) -> Result<(Vec<UdpSocket>, bool), String> {
    let t = &cfg.translator;
    let shared = t.roce_steering.shared_port(t.roce, t.workers);
    let opts = UdpOptions {
        rcvbuf: t.socket_buffer,
        sndbuf: t.socket_buffer,
        reuse_port: shared,
    };
    let mut socks: Vec<UdpSocket> = Vec::new();
    for w in 0..t.workers {
        let want = match (shared, socks.first()) {
            // Every member binds the first one's address (its port, if 0 was asked for), in
            // worker order: the group's socket index is the worker index.
            (true, Some(first)) => first.local_addr(),
            (true, None) => t.roce,
            (false, _) if t.roce.port() == 0 => t.roce,
            (false, _) => SocketAddrV4::new(*t.roce.ip(), t.roce.port() + w as u16),
        };
        let s = UdpSocket::bind(want, &opts)
            .map_err(|e| format!("cannot bind the RoCEv2 socket {want}: {e}"))?;
        socks.push(s);
    }
    if shared {
        dta_io::reuseport::attach_qpn_steering(&socks[0], t.workers).map_err(|e| {
            format!(
                "cannot attach the QPN-steering BPF program to the RoCEv2 port {}: {e} \
                 (set translator.roce_steering = \"port-per-worker\")",
                socks[0].local_addr()
            )
        })?;
    }
    Ok((socks, shared))
}

/// Under QPN steering every QP of worker `w` must satisfy `qpn % workers == w`.
pub(super) fn check_qpn_steering(
    targets: &[CollectorTarget],
    w: usize,
    workers: usize,
) -> Result<(), String> {
    for t in targets {
        for (s, b) in &t.stores {
            let q = b.local_qpn.value();
            if dta_io::reuseport::worker_of_qpn(q, workers) != w {
                return Err(format!(
                    "store {:?}: worker {w} was given QPN {q:#x}, but roce_steering = \"qpn\" \
                     steers it to worker {}: give the collector's static peer a qpn_base that \
                     is a multiple of {workers}, or use roce_steering = \"port-per-worker\"",
                    s.name,
                    dta_io::reuseport::worker_of_qpn(q, workers)
                ));
            }
        }
    }
    Ok(())
}
