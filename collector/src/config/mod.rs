//! The collector's TOML configuration.
//!
//! ```toml
//! [collector]
//! backend = "software"           # or "rdma": a real RNIC (build with --features rdma)
//! roce = "127.0.0.1:4791"        # software RNIC address (ip:port); real RNICs use port 4791
//! control = "127.0.0.1:14791"    # HTTP API and /metrics
//! metadata_file = "/tmp/dta/collector.json"   # mode 0600, its directory 0700
//! cm_allow = ["10.0.0.0/24"]     # who may connect over RDMA_CM (default: static peers, loopback)
//! admin_token_file = "/etc/dta/admin.token"   # bearer token of the admin endpoints
//! web_config_file = "/etc/dta/web.toml"       # TLS and basic_auth_users (Prometheus style)
//!
//! [rnic]                         # the software RNIC's packet I/O
//! backend = "udp"                # or "af_xdp" / "dpdk" (cargo features of the same names)
//! rx_coalesce_us = 100           # wait after a short receive (interrupt moderation); 0: off
//!
//! [af_xdp]                       # backend = "af_xdp": the same section as the translator's
//! interface = "eth1"
//!
//! [[static_peer]]                # a translator allowed to connect without RDMA_CM
//! roce = "127.0.0.2:4791"
//! workers = 1
//!
//! [[store]]
//! name = "paths"
//! kind = "keywrite"
//! slots = 1048576
//! slot_size = 32
//! redundancy = 2                 # N: reports must use it, queries read it
//! ```
//!
//! [`CollectorConfig::from_toml`] reads a file in two steps so that every error names where
//! it is: the top-level tables with TOML's own line and column, then each `[[store]]` on its
//! own (`store "paths": slot_size: invalid type: ...`, never a position inside the merged
//! document). [`CollectorConfig::validate`] then checks every rule that TOML types cannot
//! express, naming the section or store and the key (`store "paths": slots: must be a power
//! of two`), including the host: a `persist_dir` that does not exist and stores that need more
//! memory than the host has are refused.

//!
//! Each part of the file has a room here: `[collector]`, `[rnic]` and `[[static_peer]]` in
//! `device.rs`, `[[store]]` in `store.rs`, and the rules TOML types cannot express in
//! `validate.rs`. This module holds the whole file ([`CollectorConfig`]) and how it is read.
//! None of these rooms allocates a region or opens a socket; `validate.rs` reads the host
//! (`/proc/meminfo`, `persist_dir`) and nothing else.

use serde::{Deserialize, Serialize};

use crate::allow::PeerAllowlist;
pub use crate::export::config::{ClickHouseExport, ExportSection, KeySet};

mod device;
mod store;
mod validate;

pub use device::{
    Backend, DeviceSection, RnicBackend, RnicIo, RnicSection, StaticPeer, DEFAULT_KV_REDUNDANCY,
    DEFAULT_RX_COALESCE_US, DEFAULT_TAIL_CONSUMER_IDLE_SECS, FIRST_STORE_PORT, MAX_RX_COALESCE_US,
    MAX_STORE_NAME, MAX_TAIL_CONSUMER_IDLE_SECS,
};
pub use store::{sketch_kind, StoreConfig, StoreKindConfig};
pub use validate::mem_total;

/// The whole file.
///
/// The software RNIC's I/O sections (`[rnic]`, `[af_xdp]`, `[dpdk]`) are top-level tables in
/// the file, like the translator's, and live in [`DeviceSection::rnic`] in memory.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(try_from = "ConfigFile", into = "ConfigFile")]
pub struct CollectorConfig {
    /// Device and service settings.
    #[serde(default)]
    pub collector: DeviceSection,
    /// Translators set up statically (without RDMA_CM).
    #[serde(default, rename = "static_peer")]
    pub static_peers: Vec<StaticPeer>,
    /// The stores.
    #[serde(default, rename = "store")]
    pub stores: Vec<StoreConfig>,
    /// `[export.*]`: where `dta-collector export` sends history ([`crate::export`]).
    #[serde(default)]
    pub export: ExportSection,
    /// `[pull]`: ZERO-mode pulling from agents ([`crate::zero`]).
    #[serde(default)]
    pub pull: Option<crate::zero::config::PullSection>,
}

/// The file's layout (see [`CollectorConfig`]).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct ConfigFile {
    #[serde(default)]
    collector: DeviceSection,
    #[serde(default)]
    rnic: RnicSection,
    #[serde(default)]
    af_xdp: dta_io::config::AfXdpSection,
    #[serde(default)]
    dpdk: dta_io::config::DpdkSection,
    #[serde(default, rename = "static_peer")]
    static_peers: Vec<StaticPeer>,
    /// Read one by one ([`StoreConfig`]'s `TryFrom<toml::Table>`), so that an error names the
    /// store and the key instead of a position in the merged document.
    #[serde(default, rename = "store")]
    stores: Vec<toml::Table>,
    #[serde(default)]
    export: ExportSection,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pull: Option<crate::zero::config::PullSection>,
}

impl TryFrom<ConfigFile> for CollectorConfig {
    type Error = String;

    fn try_from(mut f: ConfigFile) -> Result<Self, String> {
        f.collector.rnic = RnicIo {
            backend: f.rnic.backend,
            af_xdp: f.af_xdp,
            dpdk: f.dpdk,
            rx_coalesce_us: f.rnic.rx_coalesce_us,
        };
        Ok(CollectorConfig {
            collector: f.collector,
            static_peers: f.static_peers,
            stores: f
                .stores
                .into_iter()
                .map(StoreConfig::try_from)
                .collect::<Result<_, _>>()?,
            export: f.export,
            pull: f.pull,
        })
    }
}

impl From<CollectorConfig> for ConfigFile {
    fn from(c: CollectorConfig) -> Self {
        let io = c.collector.rnic.clone();
        ConfigFile {
            collector: c.collector,
            rnic: RnicSection {
                backend: io.backend,
                rx_coalesce_us: io.rx_coalesce_us,
            },
            af_xdp: io.af_xdp,
            dpdk: io.dpdk,
            static_peers: c.static_peers,
            stores: c.stores.into_iter().map(toml::Table::from).collect(),
            export: c.export,
            pull: c.pull,
        }
    }
}

impl CollectorConfig {
    /// Parses a TOML document (see the module docs for how errors name their place).
    pub fn from_toml(s: &str) -> Result<CollectorConfig, String> {
        let f: ConfigFile = toml::from_str(s).map_err(|e| e.to_string())?;
        let c = CollectorConfig::try_from(f)?;
        c.validate()?;
        Ok(c)
    }

    /// Reads and parses a file.
    pub fn load(path: &std::path::Path) -> Result<CollectorConfig, String> {
        let s = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
        Self::from_toml(&s).map_err(|e| format!("{}: {e}", path.display()))
    }

    /// The peers store `store` (an index into `stores`) accepts RDMA_CM connections from: its
    /// own `cm_allow`, else `[collector] cm_allow`, else the static peers and loopback.
    pub fn cm_allowlist(&self, store: usize) -> PeerAllowlist {
        let own = self.stores.get(store).and_then(|s| s.cm_allow.clone());
        match own.or_else(|| self.collector.cm_allow.clone()) {
            Some(nets) => PeerAllowlist::new(nets),
            None => PeerAllowlist::default_for(self.static_peers.iter().map(|p| *p.roce.ip())),
        }
    }
}

#[cfg(test)]
mod tests;
