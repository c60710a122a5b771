//! The software RNIC's packet I/O backend, chosen by `[rnic] backend`.
//!
//! - `udp` (default): a kernel UDP socket bound to `[collector] roce` (`recvmmsg`/`sendmmsg`).
//! - `af_xdp` (cargo feature `af_xdp`, root): an AF_XDP socket on `[af_xdp] interface`, queue
//!   `[af_xdp] queue`, whose XDP program steers `roce`'s UDP port to it.
//! - `dpdk` (cargo feature `dpdk`): DPDK port `[dpdk] ports[0]` (port 0 if none is named), the
//!   EAL started with `[dpdk] eal_args`.
//!
//! The sections and constructors are dta-io's ([`dta_io::config`]), the same the translator
//! uses. Raw-frame backends serve exactly one UDP port, `roce`'s: RDMA_CM MADs (to the GSI QP)
//! and RoCEv2 both arrive there and the RNIC thread hands each to the CM or the responder.
//! They send whole frames from `[collector] mac` and address each to the MAC its destination
//! last sent from ([`Backend::answer_to_sender_mac`]): RDMA_CM peers are never configured
//! with a MAC. A backend whose cargo feature is not compiled in is refused with an error naming
//! the feature.

use std::net::SocketAddrV4;

use dta_io::backend::Backend;
use dta_io::config::{require_feature, AF_XDP_COMPILED, DPDK_COMPILED};
use dta_io::udp::{UdpBackend, UdpOptions, UdpSocket};

use crate::config::{CollectorConfig, RnicBackend};

/// Opens the software RNIC's backend. Returns it with the address it serves (the kernel
/// picks the port of a UDP socket bound to port 0).
pub fn open(cfg: &CollectorConfig) -> Result<(Box<dyn Backend>, SocketAddrV4), String> {
    let dev = &cfg.collector;
    let io = &dev.rnic;
    let roce = dev.roce;
    let mut backend: Box<dyn Backend> = match io.backend {
        RnicBackend::Udp => {
            let sock = UdpSocket::bind(roce, &UdpOptions::default()).map_err(|e| {
                format!(
                    "cannot bind the software RNIC to {roce}: {e} (is another collector \
                     running? choose another [collector] roce address)"
                )
            })?;
            let local = sock.local_addr();
            let (rx, tx) = sock.split();
            return Ok((Box::new(UdpBackend::new(vec![rx], tx)), local));
        }
        RnicBackend::AfXdp => {
            require_feature("rnic.backend", "af_xdp", AF_XDP_COMPILED, "dta-collector")?;
            dta_io::config::open_af_xdp(&io.af_xdp, 0, &[roce.port()])?
        }
        RnicBackend::Dpdk => {
            require_feature("rnic.backend", "dpdk", DPDK_COMPILED, "dta-collector")?;
            dta_io::config::open_dpdk(&io.dpdk, 0, &[roce.port()])?
        }
    };
    if !backend.answer_to_sender_mac(true) {
        log::warn!(
            "the {} backend cannot answer to the senders' MACs; replies go to the MACs \
             configured for static peers and to broadcast for RDMA_CM peers",
            backend.name()
        );
    }
    log::info!(
        "software RNIC on {roce} through the {} backend (RoCEv2 and RDMA_CM on UDP port {})",
        backend.name(),
        roce.port()
    );
    Ok((backend, roce))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::DeviceSection;
    use std::net::Ipv4Addr;

    fn cfg(b: RnicBackend) -> CollectorConfig {
        let mut c = CollectorConfig {
            collector: DeviceSection {
                roce: SocketAddrV4::new(Ipv4Addr::LOCALHOST, 0),
                ..DeviceSection::default()
            },
            static_peers: vec![],
            stores: vec![],
            export: Default::default(),
            pull: None,
        };
        c.collector.rnic.backend = b;
        c
    }

    #[test]
    fn kernel_udp_binds_and_reports_its_port() {
        let (b, addr) = open(&cfg(RnicBackend::Udp)).unwrap();
        assert_eq!(b.name(), "udp");
        assert!(!b.l2_frames());
        assert_ne!(addr.port(), 0);
    }

    #[test]
    fn raw_backends_not_compiled_in_name_their_feature() {
        for (b, on) in [
            (RnicBackend::AfXdp, AF_XDP_COMPILED),
            (RnicBackend::Dpdk, DPDK_COMPILED),
        ] {
            if on {
                continue;
            }
            let e = open(&cfg(b)).err().expect("refused");
            assert!(e.contains(&format!("cargo feature `{}`", b.name())), "{e}");
        }
    }
}
