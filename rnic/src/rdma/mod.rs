//! The real-RNIC backend: regions behind an RDMA NIC (or Linux Soft-RoCE), through librdmacm
//! and libibverbs (`rdma-sys`). The verbs code is compiled with this crate's cargo feature
//! `rdma` (`dta-collector`'s and `dta-agent`'s `rdma` features enable it); without it,
//! [`serve_region`] says how to get it.
//!
//! # What it does
//! One event thread ([`spawn`]) owns every verbs object: an rdma_cm listener per store (TCP
//! port space, service ID `0x0106_0000_0000_0000 + port`), one protection domain per RDMA
//! device with every store's region registered in it, and per accepted connection a
//! completion channel, a CQ and an RC QP. The NIC then executes the peers' WRITEs, READs and
//! atomics with no CPU of ours; the thread only accepts, sends each translator its store's
//! [`MetaRecord`](dta_proto::wire::metarec::MetaRecord) (with the **R_Key**) and list heads,
//! counts completions and publishes [`Published`] snapshots. `dta-collector`'s `rdma`
//! module describes the collector's use in full; a ZERO agent's region ([`serve_region`]) is
//! registered READ-only and its REP carries the region record instead of a SEND.
//!
//! - `backend`: the thread's loop, rdma_cm events and acceptance.
//! - `completions`: ESTABLISHED (the record and list heads) and CQ events.
//! - `device`: a device's PD, MRs and `hw_counters`.
//! - `conn`: one connection's verbs objects.
//! - `verbs`: thin owning wrappers over the rdma-sys objects ([`device_names`] is public).
//! - [`client`]: a minimal RDMA_CM initiator that proves the backend in the Soft-RoCE VM.
//!
//! Owns: every `unsafe` call into libibverbs/librdmacm, each with a `// SAFETY:` note. May
//! not: know about configuration files or stores beyond [`StoreSpec`].

use std::net::Ipv4Addr;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

#[cfg(feature = "rdma")]
use dta_proto::geometry::AppendGeometry;
#[cfg(feature = "rdma")]
use dta_proto::wire::listheads;
#[cfg(feature = "rdma")]
use dta_proto::wire::metarec::MetaRecord;

use crate::allow::PeerAllowlist;
use crate::memory::Region;
use crate::published::Published;

#[cfg(feature = "rdma")]
mod backend;
#[cfg(feature = "rdma")]
pub mod client;
#[cfg(feature = "rdma")]
mod completions;
#[cfg(feature = "rdma")]
mod conn;
#[cfg(feature = "rdma")]
mod device;
#[cfg(feature = "rdma")]
mod verbs;

/// Names of the RDMA devices libibverbs sees (empty: none).
#[cfg(feature = "rdma")]
pub use verbs::device_names;

#[cfg(feature = "rdma")]
use backend::HEADS_PMTU;

/// How to run without an RDMA NIC; part of every "no device" error.
pub const SOFTWARE_HINT: &str = "to run without an RDMA NIC, use the embedded software RNIC \
     instead: set `backend = \"software\"` in the [collector] section of the configuration \
     (it is the default)";

/// What one store (or a ZERO agent's region) needs on the backend's thread: built by the
/// caller (`dta-collector` from its stores, [`serve_region`] for the agent).
#[cfg(feature = "rdma")]
pub struct StoreSpec {
    /// The store's name, for logs.
    pub name: String,
    /// Its rdma_cm port (service ID `0x0106_0000_0000_0000 + port`).
    pub port: u16,
    /// The memory peers reach.
    pub region: Arc<Region>,
    /// The record to SEND, without the R_Key (which is per device); `None` for a ZERO
    /// agent's region: the REP carries its region record (name in private-data bytes 0..64,
    /// [`RegionRecord`] in 64..128), no SEND follows, and peers may only READ.
    pub record: Option<MetaRecord>,
    /// A sequenced Append store's geometry: the record announces list heads, and they are
    /// read from the region and sent after it (so a restarted translator resumes each list).
    pub heads: Option<AppendGeometry>,
    /// Who may connect: a request from anyone else is refused with `rdma_reject`.
    pub allow: PeerAllowlist,
}

#[cfg(feature = "rdma")]
impl StoreSpec {
    /// (heads per message, messages) of this store's list heads.
    pub(crate) fn head_messages(&self) -> (usize, usize) {
        let per = listheads::heads_per_message(HEADS_PMTU).max(1);
        let lists = self.heads.as_ref().map_or(0, |a| a.lists as usize);
        (per, lists.div_ceil(per))
    }
}

/// Starts the event thread for `stores` on the RDMA device that owns `ip` (`0.0.0.0`: every
/// device): binds one rdma_cm listener per store, registers the regions with every device seen
/// so far, and returns the thread (which publishes into `published` and exits when `stop` is
/// set) with each store's R_Key on the first device, if one is open yet.
#[cfg(feature = "rdma")]
pub fn spawn(
    ip: Ipv4Addr,
    stores: Vec<StoreSpec>,
    published: Arc<Mutex<Published>>,
    stop: Arc<AtomicBool>,
) -> Result<(JoinHandle<()>, Vec<Option<u32>>), String> {
    let (tx, rx) = std::sync::mpsc::channel();
    let thread = std::thread::Builder::new()
        .name("dta-rdma".into())
        .spawn(move || {
            let mut backend = match backend::Backend::open(ip, stores) {
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
    match rx.recv() {
        Ok(Ok(rkeys)) => Ok((thread, rkeys)),
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

/// Serves a ZERO agent's region (`dta-agent` with a real RNIC): registers `region` READ-able
/// with the RDMA device that owns `ip`, listens for RDMA_CM on `cm_port` and accepts peers in
/// `allow`, each REP carrying the region record (name in private-data bytes 0..64,
/// [`dta_proto::zero::RegionRecord`] with the R_Key and the port's active MTU in 64..128). The
/// RNIC then answers READs with no CPU of ours. Returns the event thread, which stops when
/// `stop` is set and publishes the device counters into `published`.
pub fn serve_region(
    ip: Ipv4Addr,
    cm_port: u16,
    name: &str,
    region: Arc<Region>,
    allow: PeerAllowlist,
    published: Arc<Mutex<Published>>,
    stop: Arc<AtomicBool>,
) -> Result<JoinHandle<()>, String> {
    #[cfg(feature = "rdma")]
    {
        let spec = StoreSpec {
            name: name.to_string(),
            port: cm_port,
            region,
            record: None,
            heads: None,
            allow,
        };
        spawn(ip, vec![spec], published, stop).map(|(thread, _)| thread)
    }
    #[cfg(not(feature = "rdma"))]
    {
        let _ = (ip, cm_port, name, region, allow, published, stop);
        Err(
            "a real RNIC needs a build with the `rdma` feature (cargo build --features rdma; it \
             links libibverbs and librdmacm, which scripts/rdma-deps.sh installs); without an \
             RDMA NIC, use the embedded software RNIC"
                .to_string(),
        )
    }
}
