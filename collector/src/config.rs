//! The collector's TOML configuration.
//!
//! ```toml
//! [collector]
//! backend = "software"           # or "rdma": a real RNIC (build with --features rdma)
//! roce = "127.0.0.1:4791"        # software RNIC address (ip:port); real RNICs use port 4791
//! control = "127.0.0.1:9100"     # HTTP API and /metrics
//! metadata_file = "/tmp/dta/collector.json"
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
//! ```

use std::net::SocketAddrV4;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use dta_proto::hash::HashProfile;
use dta_proto::layout::AppendFormat;

/// The whole file.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
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
}

/// `[collector]`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DeviceSection {
    /// Which RNIC serves the stores: the embedded software RNIC (default) or a real RDMA NIC
    /// through libibverbs/librdmacm (needs a build with the `rdma` feature).
    pub backend: Backend,
    /// Software RNIC address (IP and UDP port). With `backend = "rdma"`, its IP is the address
    /// the per-store RDMA_CM listeners bind to (`0.0.0.0`: every RDMA device) and the port is
    /// unused (real RNICs answer on 4791).
    pub roce: SocketAddrV4,
    /// MAC of the software RNIC (used in frames for raw backends).
    pub mac: String,
    /// Verify the ICRC of incoming RoCEv2 packets (switch off for the reference Tofino
    /// translator, which sends none).
    pub verify_icrc: bool,
    /// Path MTU of the software RNIC.
    pub pmtu: u32,
    /// Put regions on hugepages when the system has them reserved.
    pub hugepages: bool,
    /// Keep regions in files under this directory (hugetlbfs or tmpfs) so data survives a
    /// restart. Empty: anonymous memory.
    pub persist_dir: Option<PathBuf>,
    /// Where to publish the store metadata (JSON) for statically configured translators.
    pub metadata_file: Option<PathBuf>,
    /// HTTP control endpoint (JSON API and /metrics). Empty: none.
    pub control: Option<SocketAddrV4>,
    /// Highest Key-Write / Key-Increment redundancy queries assume.
    pub max_redundancy: u8,
    /// Receive buffers kept posted per QP (WRITE with Immediate and SEND consume them).
    pub recv_credits: u32,
}

impl Default for DeviceSection {
    fn default() -> Self {
        DeviceSection {
            backend: Backend::Software,
            roce: SocketAddrV4::new(
                std::net::Ipv4Addr::LOCALHOST,
                dta_proto::consts::ROCEV2_PORT,
            ),
            mac: "02:00:00:00:00:51".into(),
            verify_icrc: true,
            pmtu: 4096,
            hugepages: true,
            persist_dir: None,
            metadata_file: None,
            control: None,
            max_redundancy: 4,
            recv_credits: 4096,
        }
    }
}

/// `[collector] backend`: which RNIC serves the stores.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Backend {
    /// The embedded software RNIC on a UDP socket (`roce`).
    #[default]
    Software,
    /// A real RDMA NIC (or Linux Soft-RoCE) through rdma_cm and verbs; see `crate::rdma`.
    Rdma,
}

/// `[[static_peer]]`: a translator whose QPs are created at start-up.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StaticPeer {
    /// The translator's RoCEv2 address (responses go there).
    pub roce: SocketAddrV4,
    /// Worker count: one QP per (worker, store).
    #[serde(default = "one")]
    pub workers: u32,
    /// First translator-side QPN (worker w, store s use `qpn_base + s * workers + w`).
    #[serde(default = "default_qpn_base")]
    pub qpn_base: u32,
    /// The translator's MAC.
    #[serde(default = "default_peer_mac")]
    pub mac: String,
}

fn one() -> u32 {
    1
}
fn default_qpn_base() -> u32 {
    0x100
}
fn default_peer_mac() -> String {
    "02:00:00:00:00:01".into()
}

/// `[[store]]`.
///
/// Unknown fields are rejected by [`StoreKindConfig`], which receives every field but `name`
/// and `port` (serde cannot combine `deny_unknown_fields` with `flatten` on this struct).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct StoreConfig {
    /// Unique store name (also the RDMA_CM service name).
    pub name: String,
    /// RDMA_CM port (service ID) of this store; default 1337 + index.
    pub port: Option<u16>,
    /// Primitive and geometry.
    #[serde(flatten)]
    pub kind: StoreKindConfig,
}

/// Primitive-specific settings of a store.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase", deny_unknown_fields)]
pub enum StoreKindConfig {
    /// Key-Write.
    KeyWrite {
        /// Slots (a power of two).
        slots: u32,
        /// Bytes per slot (8, 16, 32 or 64): 4 bytes of checksum, the rest value.
        #[serde(default = "default_slot_size")]
        slot_size: u32,
        /// Hash profile.
        #[serde(default)]
        hash: HashProfile,
    },
    /// Key-Increment.
    KeyIncrement {
        /// Counters (a power of two).
        slots: u32,
        /// Hash profile.
        #[serde(default)]
        hash: HashProfile,
        /// Zero the counters every this many seconds (0 = only on demand).
        #[serde(default)]
        epoch_secs: u64,
    },
    /// Append.
    Append {
        /// Number of lists.
        lists: u32,
        /// Global ID of the first list.
        #[serde(default)]
        first_list: u32,
        /// Ring capacity per list in entries (a multiple of `batch`).
        capacity: u32,
        /// Bytes per entry.
        #[serde(default = "default_entry_size")]
        entry_size: u32,
        /// Entries per RDMA WRITE (1..=16).
        #[serde(default = "default_batch")]
        batch: u32,
        /// Ring framing.
        #[serde(default)]
        format: AppendFormat,
    },
    /// Postcarding.
    Postcard {
        /// Chunks (a power of two).
        chunks: u32,
        /// Hop bound B.
        #[serde(default = "default_hops")]
        hops: u8,
        /// Hash profile.
        #[serde(default)]
        hash: HashProfile,
        /// Copies written per chunk (the translator's setting; queries need agreeing copies).
        #[serde(default = "default_postcard_n")]
        redundancy: u8,
        /// The value set V (e.g. switch IDs) as inclusive ranges `[[lo, hi], ...]`.
        #[serde(default)]
        values: Vec<[u32; 2]>,
    },
}

fn default_slot_size() -> u32 {
    8
}
fn default_entry_size() -> u32 {
    4
}
fn default_batch() -> u32 {
    16
}
fn default_hops() -> u8 {
    5
}
fn default_postcard_n() -> u8 {
    1
}

impl CollectorConfig {
    /// Parses a TOML document.
    pub fn from_toml(s: &str) -> Result<CollectorConfig, String> {
        let c: CollectorConfig = toml::from_str(s).map_err(|e| e.to_string())?;
        c.validate()?;
        Ok(c)
    }

    /// Reads and parses a file.
    pub fn load(path: &std::path::Path) -> Result<CollectorConfig, String> {
        let s = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
        Self::from_toml(&s).map_err(|e| format!("{}: {e}", path.display()))
    }

    /// Checks cross-field rules.
    pub fn validate(&self) -> Result<(), String> {
        let mut names = std::collections::HashSet::new();
        for s in &self.stores {
            if !names.insert(&s.name) {
                return Err(format!("store name {:?} is used twice", s.name));
            }
        }
        if self.collector.max_redundancy == 0
            || self.collector.max_redundancy as usize > dta_proto::hash::MAX_REDUNDANCY
        {
            return Err(format!(
                "max_redundancy must be 1..={}",
                dta_proto::hash::MAX_REDUNDANCY
            ));
        }
        if !(256..=4096).contains(&self.collector.pmtu) || !self.collector.pmtu.is_power_of_two() {
            return Err("pmtu must be 256, 512, 1024, 2048 or 4096".into());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ALL: &str = r#"
[collector]
roce = "127.0.0.1:4791"
control = "127.0.0.1:9100"

[[store]]
name = "paths"
kind = "keywrite"
slots = 1024
slot_size = 32

[[store]]
name = "counts"
kind = "keyincrement"
slots = 1024
epoch_secs = 60

[[store]]
name = "events"
kind = "append"
lists = 4
capacity = 64

[[store]]
name = "postcards"
kind = "postcard"
chunks = 1024
values = [[1, 100], [200, 300]]
"#;

    #[test]
    fn parses_every_store_kind() {
        let c = CollectorConfig::from_toml(ALL).unwrap();
        assert_eq!(c.stores.len(), 4);
        assert!(matches!(
            c.stores[0].kind,
            StoreKindConfig::KeyWrite { slot_size: 32, .. }
        ));
        assert!(matches!(
            c.stores[1].kind,
            StoreKindConfig::KeyIncrement { epoch_secs: 60, .. }
        ));
        match &c.stores[3].kind {
            StoreKindConfig::Postcard { values, hops, .. } => {
                assert_eq!((values.len(), *hops), (2, 5))
            }
            k => panic!("{k:?}"),
        }
    }

    #[test]
    fn rejects_unknown_fields_and_kinds() {
        let typo = ALL.replace("slot_size = 32", "slot_sise = 32");
        assert!(CollectorConfig::from_toml(&typo).is_err());
        let kind = ALL.replace("\"keywrite\"", "\"keyread\"");
        assert!(CollectorConfig::from_toml(&kind).is_err());
        let dup = ALL.replace("\"counts\"", "\"paths\"");
        assert!(CollectorConfig::from_toml(&dup).is_err());
    }

    #[test]
    fn the_example_file_parses() {
        let s = include_str!("../collector.example.toml");
        let c = CollectorConfig::from_toml(s).unwrap();
        for st in &c.stores {
            crate::store::layout_of(st).unwrap();
        }
    }
}
