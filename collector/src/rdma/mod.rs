//! The real-RNIC backend: the stores behind an RDMA NIC (or Linux Soft-RoCE), through
//! librdmacm and libibverbs (`rdma-sys`). Compiled with the cargo feature `rdma`; selected with
//! `[collector] backend = "rdma"`.
//!
//! # What it does
//! - One rdma_cm listener per store, in the TCP port space (service ID `0x0106_0000_0000_0000 +
//!   port`), on the store's port (`StoreConfig::port`, default 1337 + index, like the reference
//!   collector), bound to the IP of `[collector] roce` (`0.0.0.0`: every RDMA device).
//! - One protection domain per RDMA device, in which every store's [`Region`] is registered
//!   with LOCAL_WRITE | REMOTE_WRITE | REMOTE_READ | REMOTE_ATOMIC. The registration happens at
//!   start when the listeners' address belongs to a device (the store's `meta.rkey` is then the
//!   real R_Key), otherwise on the first connection through that device.
//! - For each CONNECT_REQUEST: a completion channel, a CQ and an RC QP; receive WQEs are posted
//!   so that WRITE with Immediate (and SEND) completions surface as events, counted like the
//!   software RNIC's immediate events; then `rdma_accept` with responder resources and
//!   initiator depth of at least 1 (the reference accepted with 0, which leaves the QP unable to
//!   answer Fetch-and-Add). A new request from the same peer address and peer QPN for the same
//!   store replaces (destroys) the old connection: a translator that restarts without a DREQ
//!   leaves no stale QP.
//! - On ESTABLISHED (the RTU arrived): a signalled SEND of the store's 64-byte
//!   [`MetaRecord`](dta_proto::wire::metarec::MetaRecord) carrying the **R_Key** (the
//!   reference sent the lkey). Its completion is waited for (asynchronously) and logged; a
//!   failed one disconnects.
//! - DISCONNECTED, REJECTED, UNREACHABLE and CONNECT_ERROR destroy the connection's QP, CQ and
//!   id. Counters published for the control plane come from the device's `hw_counters` in sysfs
//!   (rxe and mlx5 name them like [`RnicCounters`](crate::rnic::counters::RnicCounters)) plus the
//!   completions seen here.
//!
//! The query engine reads the very same [`Region`]s the NIC writes by DMA, exactly as with the
//! software RNIC. `client` is a minimal RDMA_CM initiator used to prove the backend in the
//! Soft-RoCE VM (binary `dta-rdma-selftest`).
//!
//! The event thread, devices, connections and verbs wrappers are `dta-rnic`'s
//! ([`dta_rnic::rdma`], shared with `dta-agent`); this module turns the collector's
//! configuration into its [`StoreSpec`](dta_rnic::rdma::StoreSpec)s (`backend`, feature
//! `rdma`) and owns nothing that touches verbs.
//!
//! Without an RDMA device, start fails with a message naming the cause and how to run the
//! software RNIC instead ([`SOFTWARE_HINT`]).
//!
//! [`Region`]: crate::memory::Region

use std::net::SocketAddrV4;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use dta_proto::meta::CollectorMeta;

use crate::config::CollectorConfig;
use crate::service::Published;
use crate::store::Store;

#[cfg(feature = "rdma")]
mod backend;
/// The RDMA_CM test initiator of `dta-rdma-selftest` (dta-rnic's).
#[cfg(feature = "rdma")]
pub use dta_rnic::rdma::client;
/// The ZERO agent's use of the same backend (dta-rnic's; `dta-agent` calls it directly).
pub use dta_rnic::rdma::serve_region;
pub use dta_rnic::rdma::SOFTWARE_HINT;

/// A started real-RNIC backend, for [`crate::service::Collector`].
pub struct Started {
    /// The stores (regions registered with every device seen so far).
    pub stores: Vec<Store>,
    /// The published description (`roce` = listen IP and port 4791).
    pub meta: CollectorMeta,
    /// Where the listeners are bound (port 4791: the NIC's RoCEv2 port).
    pub roce: SocketAddrV4,
    /// The rdma_cm/completion thread; it stops when `stop` is set.
    pub thread: JoinHandle<()>,
}

/// Allocates the stores, opens the RDMA devices, binds one rdma_cm listener per store and starts
/// the event thread, which publishes into `published` and exits when `stop` is set.
pub fn start(
    config: &CollectorConfig,
    published: Arc<Mutex<Published>>,
    stop: Arc<AtomicBool>,
) -> Result<Started, String> {
    #[cfg(feature = "rdma")]
    {
        backend::start(config, published, stop)
    }
    #[cfg(not(feature = "rdma"))]
    {
        let _ = (config, published, stop);
        Err(format!(
            "backend = \"rdma\" needs a dta-collector built with the `rdma` feature (cargo build \
             -p dta-collector --features rdma; it links libibverbs and librdmacm, which \
             scripts/rdma-deps.sh installs); {SOFTWARE_HINT}"
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Backend;
    use crate::Collector;

    const CONFIG: &str = r#"
        [collector]
        backend = "rdma"
        roce = "127.0.0.1:0"
        [[store]]
        name = "kw"
        kind = "keywrite"
        slots = 1024
    "#;

    #[test]
    fn backend_parses_and_defaults_to_software() {
        let c = CollectorConfig::from_toml(CONFIG).unwrap();
        assert_eq!(c.collector.backend, Backend::Rdma);
        let c = CollectorConfig::from_toml(&CONFIG.replace("backend = \"rdma\"", "")).unwrap();
        assert_eq!(c.collector.backend, Backend::Software);
        let e = CollectorConfig::from_toml("[collector]\nbackend = \"dpdk\"\n").unwrap_err();
        assert!(e.contains("backend") || e.contains("variant"), "{e}");
        let typo = CONFIG.replace("slots = 1024", "slots = 1024\nslot_sise = 8");
        assert!(
            CollectorConfig::from_toml(&typo).is_err(),
            "unknown store keys are rejected"
        );
    }

    /// Without the feature, asking for the real RNIC says how to get it and how not to need it.
    #[cfg(not(feature = "rdma"))]
    #[test]
    fn without_the_feature_start_says_what_to_do() {
        let e = Collector::start(CollectorConfig::from_toml(CONFIG).unwrap())
            .err()
            .expect("must fail");
        assert!(e.contains("--features rdma"), "{e}");
        assert!(e.contains("backend = \"software\""), "{e}");
    }

    /// With the feature on a machine without RDMA devices: a clear "no device" error.
    #[cfg(feature = "rdma")]
    #[test]
    fn without_a_device_start_says_what_to_do() {
        use std::io::Write;
        if dta_rnic::rdma::device_names().is_ok_and(|d| !d.is_empty()) {
            let _ = writeln!(
                std::io::stderr(),
                "SKIP: this machine has RDMA devices; the no-device path can't be exercised"
            );
            return;
        }
        let e = Collector::start(CollectorConfig::from_toml(CONFIG).unwrap())
            .err()
            .expect("must fail without a device");
        assert!(e.contains("no RDMA device"), "{e}");
        assert!(e.contains("backend = \"software\""), "{e}");
    }
}
