//! The collector's TOML configuration.
//!
//! ```toml
//! [collector]
//! backend = "software"           # or "rdma": a real RNIC (build with --features rdma)
//! roce = "127.0.0.1:4791"        # software RNIC address (ip:port); real RNICs use port 4791
//! control = "127.0.0.1:14791"    # HTTP API and /metrics
//! metadata_file = "/tmp/dta/collector.json"
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
//! ```

use std::net::SocketAddrV4;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use dta_proto::hash::HashProfile;
use dta_proto::layout::AppendFormat;

/// The whole file.
///
/// The software RNIC's I/O sections (`[rnic]`, `[af_xdp]`, `[dpdk]`) are top-level tables in
/// the file, like the translator's, and live in [`DeviceSection::rnic`] in memory.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(from = "ConfigFile", into = "ConfigFile")]
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
    #[serde(default, rename = "store")]
    stores: Vec<StoreConfig>,
}

impl From<ConfigFile> for CollectorConfig {
    fn from(mut f: ConfigFile) -> Self {
        f.collector.rnic = RnicIo {
            backend: f.rnic.backend,
            af_xdp: f.af_xdp,
            dpdk: f.dpdk,
            rx_coalesce_us: f.rnic.rx_coalesce_us,
        };
        CollectorConfig {
            collector: f.collector,
            static_peers: f.static_peers,
            stores: f.stores,
        }
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
            stores: c.stores,
        }
    }
}

/// The software RNIC's packet I/O: `[rnic] backend` and the raw backends' sections.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RnicIo {
    /// `[rnic] backend`.
    pub backend: RnicBackend,
    /// `[af_xdp]` (the translator's section).
    pub af_xdp: dta_io::config::AfXdpSection,
    /// `[dpdk]` (the translator's section).
    pub dpdk: dta_io::config::DpdkSection,
    /// `[rnic] rx_coalesce_us`.
    pub rx_coalesce_us: u32,
}

/// `[rnic] rx_coalesce_us` by default: like a NIC's default interrupt moderation. Measured on
/// the baselines' end-to-end run (9k frames/s): 100 µs cut the RNIC's CPU per report from
/// 143–179 ns to 47–49 ns; 50 µs to 66 ns.
pub const DEFAULT_RX_COALESCE_US: u32 = 100;

impl Default for RnicIo {
    fn default() -> Self {
        RnicIo {
            backend: RnicBackend::default(),
            af_xdp: Default::default(),
            dpdk: Default::default(),
            rx_coalesce_us: DEFAULT_RX_COALESCE_US,
        }
    }
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
    /// The software RNIC's packet I/O, read from the top-level `[rnic]`, `[af_xdp]` and
    /// `[dpdk]` tables (not a key of `[collector]`).
    #[serde(skip)]
    pub rnic: RnicIo,
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
            rnic: RnicIo::default(),
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

/// `[rnic]`: how the software RNIC (`[collector] backend = "software"`) moves packets.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RnicSection {
    /// Packet I/O backend: "udp" (default), "af_xdp" or "dpdk".
    pub backend: RnicBackend,
    /// Receive coalescing (µs), like a NIC's interrupt moderation: after a receive that found
    /// only a few packets, the RNIC waits this long before it looks again, so a trickle of
    /// frames is taken in bursts instead of one wake-up per frame. Adds at most this much to
    /// an ACK's and a write's latency; under load (full bursts) it never waits. 0: off.
    pub rx_coalesce_us: u32,
}

impl Default for RnicSection {
    fn default() -> Self {
        RnicSection {
            backend: RnicBackend::default(),
            rx_coalesce_us: DEFAULT_RX_COALESCE_US,
        }
    }
}

/// `[rnic] backend`: the software RNIC's packet I/O.
///
/// RDMA_CM MADs and RoCEv2 both arrive on `[collector] roce`'s UDP port and go to the same
/// responder whatever the backend. Raw-frame backends (AF_XDP, DPDK) serve only that port,
/// send from `[collector] mac`, and answer to the MAC each request came from.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RnicBackend {
    /// A kernel UDP socket bound to `roce` (`recvmmsg`/`sendmmsg`); no privileges.
    #[default]
    Udp,
    /// An AF_XDP socket on `[af_xdp] interface`, queue `[af_xdp] queue` (cargo feature
    /// `af_xdp`; root). Our XDP program steers `roce`'s UDP port to it; ARP and everything
    /// else stay with the kernel.
    AfXdp,
    /// DPDK port `[dpdk] ports[0]` (port 0 if none), EAL started with `[dpdk] eal_args`
    /// (cargo feature `dpdk`).
    Dpdk,
}

impl RnicBackend {
    /// The name used in the configuration (and the cargo feature of raw backends).
    pub fn name(self) -> &'static str {
        match self {
            RnicBackend::Udp => "udp",
            RnicBackend::AfXdp => "af_xdp",
            RnicBackend::Dpdk => "dpdk",
        }
    }
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
        let io = &self.collector.rnic;
        let b = io.backend;
        if b != RnicBackend::Udp && self.collector.backend == Backend::Software {
            let compiled = match b {
                RnicBackend::AfXdp => dta_io::config::AF_XDP_COMPILED,
                _ => dta_io::config::DPDK_COMPILED,
            };
            dta_io::config::require_feature("rnic.backend", b.name(), compiled, "dta-collector")?;
            let roce = self.collector.roce;
            if roce.ip().is_unspecified() || roce.port() == 0 {
                return Err(format!(
                    "rnic.backend = {:?}: [collector] roce needs a concrete IP and port (no \
                     kernel picks them for a raw-frame backend; the IP is covered by the ICRC)",
                    b.name()
                ));
            }
            self.collector
                .mac
                .parse::<dta_proto::wire::ethernet::MacAddr>()
                .map_err(|_| format!("[collector] mac {:?} is not a MAC", self.collector.mac))?;
            if b == RnicBackend::AfXdp && io.af_xdp.interface.is_empty() {
                return Err("rnic.backend = \"af_xdp\" needs [af_xdp] interface".into());
            }
            if b == RnicBackend::Dpdk && io.dpdk.eal_args.is_empty() {
                return Err("rnic.backend = \"dpdk\" needs [dpdk] eal_args".into());
            }
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
control = "127.0.0.1:14791"

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
    fn rnic_backends_parse_and_are_checked() {
        let c = CollectorConfig::from_toml(ALL).unwrap();
        assert_eq!(c.collector.rnic.backend, RnicBackend::Udp);
        let xdp = ALL.replace(
            "[collector]\n",
            "[rnic]\nbackend = \"af_xdp\"\n[af_xdp]\ninterface = \"veth1\"\nmode = \"skb\"\n\
             [collector]\n",
        );
        match (
            CollectorConfig::from_toml(&xdp),
            dta_io::config::AF_XDP_COMPILED,
        ) {
            (Ok(c), true) => {
                assert_eq!(c.collector.rnic.backend, RnicBackend::AfXdp);
                assert_eq!(c.collector.rnic.af_xdp.mode, dta_io::config::XdpAttach::Skb);
                // The sections survive a round trip through TOML.
                let again = toml::to_string(&c).unwrap();
                let c2 = CollectorConfig::from_toml(&again).unwrap();
                assert_eq!(c2.collector.rnic, c.collector.rnic);
            }
            (Err(e), false) => {
                assert!(e.contains("cargo feature `af_xdp`"), "{e}");
                assert!(e.contains("-p dta-collector --features af_xdp"), "{e}");
            }
            (r, compiled) => panic!("af_xdp compiled in: {compiled}, parsed: {r:?}"),
        }
        let dpdk = ALL.replace("[collector]\n", "[rnic]\nbackend = \"dpdk\"\n[collector]\n");
        let e = CollectorConfig::from_toml(&dpdk).unwrap_err();
        if dta_io::config::DPDK_COMPILED {
            assert!(e.contains("eal_args"), "{e}");
        } else {
            assert!(e.contains("cargo feature `dpdk`"), "{e}");
        }
        let bad = ALL.replace(
            "[collector]\n",
            "[rnic]\nbackend = \"netmap\"\n[collector]\n",
        );
        assert!(CollectorConfig::from_toml(&bad).is_err());
        let typo = ALL.replace("[collector]\n", "[rnic]\nbackends = \"udp\"\n[collector]\n");
        assert!(CollectorConfig::from_toml(&typo).is_err());
        let inside = ALL.replace("[collector]\n", "[collector]\nrnic = \"udp\"\n");
        assert!(
            CollectorConfig::from_toml(&inside).is_err(),
            "rnic is its own table"
        );
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
