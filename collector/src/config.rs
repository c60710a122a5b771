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

use std::net::SocketAddrV4;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use dta_proto::hash::{HashProfile, MAX_REDUNDANCY};
use dta_proto::layout::AppendFormat;

use crate::allow::{Cidr, PeerAllowlist};
pub use crate::export::config::{ClickHouseExport, ExportSection, KeySet};

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

/// Largest `[rnic] rx_coalesce_us`: 10 ms. Every wait delays ACKs by up to this much, and the
/// translator's retransmission timeout starts at 20 ms (floor 2 ms), so a longer wait would
/// turn an idle link's first frames into spurious timeouts.
pub const MAX_RX_COALESCE_US: u32 = 10_000;

/// `redundancy` of Key-Write and Key-Increment stores by default: the N of `dta gen` and the
/// demo, and the papers' usual choice.
pub const DEFAULT_KV_REDUNDANCY: u8 = 2;

/// Longest store name. A name travels in the RDMA_CM REP's private data (NUL-padded, at most
/// 64 bytes) and in file names (`dta-<store>.region`) and URLs, hence also its alphabet.
pub const MAX_STORE_NAME: usize = 64;

/// The RDMA_CM port of the store at `index` when it sets none.
pub const FIRST_STORE_PORT: u16 = 1337;

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
    /// Highest `redundancy` a `[[store]]` may be written with (1..=8). Queries read a store's
    /// own N; another N must be forced.
    pub max_redundancy: u8,
    /// Receive buffers kept posted per QP (WRITE with Immediate and SEND consume them).
    pub recv_credits: u32,
    /// Source networks (CIDRs) that may open RDMA_CM connections to the stores, unless a store
    /// has its own `cm_allow`. Absent: the `[[static_peer]]` addresses and 127.0.0.0/8.
    pub cm_allow: Option<Vec<Cidr>>,
    /// The control API's web settings, keys of `[collector]` (the translator and the agent
    /// take the same ones): `admin_token_file` (the bearer token of the admin endpoints,
    /// `POST /epoch` and the stores' RDMA coordinates; absent, they answer 403),
    /// `web_config_file` (TLS, `basic_auth_users`) and `control_hostnames`.
    #[serde(flatten)]
    pub web: dta_http::WebSettings,
    /// A named `GET /tail` consumer not asked for this many seconds is forgotten (its cursor
    /// and its `/metrics` series).
    pub tail_consumer_idle_secs: u64,
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
            cm_allow: None,
            web: dta_http::WebSettings::default(),
            tail_consumer_idle_secs: DEFAULT_TAIL_CONSUMER_IDLE_SECS,
            rnic: RnicIo::default(),
        }
    }
}

/// `[collector] tail_consumer_idle_secs` unless set: ten minutes.
pub const DEFAULT_TAIL_CONSUMER_IDLE_SECS: u64 = 600;
/// The longest `tail_consumer_idle_secs` (a day).
pub const MAX_TAIL_CONSUMER_IDLE_SECS: u64 = 86_400;

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
    /// an ACK's and a write's latency; under load (full bursts) it never waits. 0: off; at
    /// most [`MAX_RX_COALESCE_US`] (10 ms).
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
/// In a file a store is one flat table: `name`, optional `port`, `kind`, and the kind's keys.
/// It is read through `TryFrom<toml::Table>` (unknown keys are errors, and every error names
/// the store and the key) and written back as the same flat table.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(try_from = "toml::Table", into = "toml::Table")]
pub struct StoreConfig {
    /// Unique store name (also the RDMA_CM service name): 1..=64 of `A-Z a-z 0-9 _ . -`.
    pub name: String,
    /// RDMA_CM port (service ID) of this store; default 1337 + index.
    pub port: Option<u16>,
    /// Source networks that may connect to this store over RDMA_CM (replaces
    /// `[collector] cm_allow` for it).
    pub cm_allow: Option<Vec<Cidr>>,
    /// Primitive and geometry.
    pub kind: StoreKindConfig,
}

impl StoreConfig {
    /// The RDMA_CM port of this store, the `index`-th of its file: `port`, or 1337 + index
    /// (`None` if that overflows).
    pub fn cm_port(&self, index: usize) -> Option<u16> {
        match self.port {
            Some(p) => Some(p),
            None => u16::try_from(index)
                .ok()
                .and_then(|i| FIRST_STORE_PORT.checked_add(i)),
        }
    }

    /// The redundancy N the store is written with (`None` for Append).
    pub fn redundancy(&self) -> Option<u8> {
        match self.kind {
            StoreKindConfig::KeyWrite { redundancy, .. }
            | StoreKindConfig::KeyIncrement { redundancy, .. }
            | StoreKindConfig::Postcard { redundancy, .. } => Some(redundancy),
            StoreKindConfig::Append { .. } | StoreKindConfig::Sketch { .. } => None,
        }
    }
}

/// A TOML error as `key: message` (the key from toml's trailing "in `key`" line, if any).
fn keyed(e: toml::de::Error) -> String {
    let text = e.to_string();
    let mut lines = text.trim_end().lines();
    let first = lines.next().unwrap_or_default().to_string();
    match lines
        .next()
        .and_then(|l| l.strip_prefix("in `"))
        .and_then(|l| l.strip_suffix('`'))
    {
        Some(key) => format!("{key}: {first}"),
        None if first.starts_with("unknown variant") => format!("kind: {first}"),
        None => first,
    }
}

impl TryFrom<toml::Table> for StoreConfig {
    type Error = String;

    fn try_from(mut t: toml::Table) -> Result<StoreConfig, String> {
        let name = match t.remove("name") {
            Some(toml::Value::String(n)) => n,
            Some(v) => {
                return Err(format!(
                    "[[store]]: name: expected a string, found {} {v}",
                    v.type_str()
                ))
            }
            None => return Err("[[store]]: a store has no `name`".into()),
        };
        let at = format!("store {name:?}");
        let port = match t.remove("port") {
            None => None,
            Some(v) => Some(u16::deserialize(v).map_err(|e| format!("{at}: port: {}", keyed(e)))?),
        };
        let cm_allow = match t.remove("cm_allow") {
            None => None,
            Some(v) => Some(
                Vec::<Cidr>::deserialize(v).map_err(|e| format!("{at}: cm_allow: {}", keyed(e)))?,
            ),
        };
        let kind = match t.remove("kind") {
            Some(toml::Value::String(k)) => k,
            Some(v) => return Err(format!("{at}: kind: expected a string, found {v}")),
            None => {
                return Err(format!(
                    "{at}: no `kind` (keywrite, keyincrement, append or postcard)"
                ))
            }
        };
        let mut tagged = toml::Table::new();
        tagged.insert(kind, toml::Value::Table(t));
        let kind = StoreKindConfig::deserialize(toml::Value::Table(tagged))
            .map_err(|e| format!("{at}: {}", keyed(e)))?;
        Ok(StoreConfig {
            name,
            port,
            cm_allow,
            kind,
        })
    }
}

impl From<StoreConfig> for toml::Table {
    fn from(s: StoreConfig) -> toml::Table {
        let mut t = toml::Table::new();
        t.insert("name".into(), s.name.into());
        if let Some(p) = s.port {
            t.insert("port".into(), (p as i64).into());
        }
        if let Some(nets) = &s.cm_allow {
            let v: Vec<toml::Value> = nets.iter().map(|n| n.to_string().into()).collect();
            t.insert("cm_allow".into(), v.into());
        }
        // Every field of every kind is a number, a string or an array of numbers, all of
        // which TOML represents, so this conversion cannot fail.
        if let Ok(toml::Value::Table(tagged)) = toml::Value::try_from(&s.kind) {
            for (kind, fields) in tagged {
                t.insert("kind".into(), kind.into());
                if let toml::Value::Table(f) = fields {
                    t.extend(f);
                }
            }
        }
        t
    }
}

/// Primitive-specific settings of a store (in a file: `kind` and the kind's keys).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "lowercase", deny_unknown_fields)]
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
        /// N: slots per key. Reports must carry this N (others are dropped by the translator,
        /// counted) and queries read N slots.
        #[serde(default = "default_kv_redundancy")]
        redundancy: u8,
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
        /// N: counters per key. Reports must carry this N (others are dropped by the
        /// translator, counted) and queries take the minimum of N counters.
        #[serde(default = "default_kv_redundancy")]
        redundancy: u8,
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
        /// Copies written per chunk (N): the translator writes this many, queries read them.
        #[serde(default = "default_postcard_n")]
        redundancy: u8,
        /// The value set V (e.g. switch IDs) as inclusive ranges `[[lo, hi], ...]`.
        #[serde(default)]
        values: Vec<[u32; 2]>,
    },
    /// Sketch-Merge: one network-wide sketch merged by the translator.
    Sketch {
        /// The sketch ID switches put in their reports (unique among the stores).
        sketch_id: u16,
        /// `count-min`, `count` or `hyperloglog`.
        sketch: dta_proto::sketch::SketchKind,
        /// Rows (default 4; HyperLogLog: 1).
        #[serde(default)]
        rows: Option<u8>,
        /// Columns (a power of two; HyperLogLog: registers, 2^4..=2^16).
        columns: u32,
        /// Bytes per cell (default and only value: 4 for the counter sketches, 1 for
        /// HyperLogLog).
        #[serde(default)]
        cell_width: Option<u8>,
        /// Columns per RDMA WRITE (a power of two; default: as many as fit 1,024 bytes).
        #[serde(default)]
        batch: Option<u32>,
        /// Epoch slots kept, so earlier epochs stay readable while one is merged (1..=16).
        #[serde(default = "default_sketch_epochs")]
        epochs: u32,
        /// The hash functions the switches use: `independent` (default; software reporters,
        /// `dta gen`) or `tofino` (the P4 sketch reporter: bare CRCs, tabulated HyperLogLog).
        #[serde(default)]
        hash: dta_proto::sketch::SketchHash,
    },
}

fn default_sketch_epochs() -> u32 {
    2
}

fn default_kv_redundancy() -> u8 {
    DEFAULT_KV_REDUNDANCY
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

    /// Checks every rule the types do not, naming the section or store and the key; this
    /// includes the host ([`CollectorConfig::check_host`]).
    pub fn validate(&self) -> Result<(), String> {
        if self.stores.len() > crate::rnic::responder::MAX_MRS {
            return Err(format!(
                "at most {} stores (one registered region each)",
                crate::rnic::responder::MAX_MRS
            ));
        }
        self.validate_device()?;
        if let Some(p) = &self.pull {
            p.validate()?;
        }
        self.validate_stores()?;
        crate::export::config::validate(self)?;
        self.check_host(mem_total())
    }

    fn validate_device(&self) -> Result<(), String> {
        let d = &self.collector;
        if d.max_redundancy == 0 || d.max_redundancy as usize > MAX_REDUNDANCY {
            return Err(format!(
                "[collector] max_redundancy: must be 1..={MAX_REDUNDANCY}, not {}",
                d.max_redundancy
            ));
        }
        if !(256..=4096).contains(&d.pmtu) || !d.pmtu.is_power_of_two() {
            return Err(format!(
                "[collector] pmtu: must be 256, 512, 1024, 2048 or 4096, not {}",
                d.pmtu
            ));
        }
        d.mac
            .parse::<dta_proto::wire::ethernet::MacAddr>()
            .map_err(|_| {
                format!(
                    "[collector] mac: {:?} is not a MAC (six hex bytes, e.g. 02:00:00:00:00:51)",
                    d.mac
                )
            })?;
        if d.recv_credits == 0 {
            return Err(
                "[collector] recv_credits: must be at least 1 (receive buffers per QP; WRITE \
                 with Immediate and SEND each need one)"
                    .into(),
            );
        }
        if !(1..=MAX_TAIL_CONSUMER_IDLE_SECS).contains(&d.tail_consumer_idle_secs) {
            return Err(format!(
                "[collector] tail_consumer_idle_secs: {} must be 1..={MAX_TAIL_CONSUMER_IDLE_SECS} \
                 (seconds a named /tail consumer may stay unused before it is forgotten)",
                d.tail_consumer_idle_secs
            ));
        }
        if d.rnic.rx_coalesce_us > MAX_RX_COALESCE_US {
            return Err(format!(
                "[rnic] rx_coalesce_us: {} is above the limit of {MAX_RX_COALESCE_US} (10 ms): \
                 every wait delays ACKs, and the translator times out after 20 ms",
                d.rnic.rx_coalesce_us
            ));
        }
        if let Some(dir) = &d.persist_dir {
            if !dir.is_dir() {
                return Err(format!(
                    "[collector] persist_dir: {} {} (create it first, e.g. a hugetlbfs or tmpfs \
                     mount; the collector does not create it)",
                    dir.display(),
                    if dir.exists() {
                        "is not a directory"
                    } else {
                        "does not exist"
                    }
                ));
            }
        }
        for (i, p) in self.static_peers.iter().enumerate() {
            let at = format!("[[static_peer]] {} ({})", i + 1, p.roce);
            if p.workers == 0 {
                return Err(format!("{at}: workers: must be at least 1"));
            }
            p.mac
                .parse::<dta_proto::wire::ethernet::MacAddr>()
                .map_err(|_| format!("{at}: mac: {:?} is not a MAC", p.mac))?;
        }
        let io = &d.rnic;
        let b = io.backend;
        if b != RnicBackend::Udp && d.backend == Backend::Software {
            let compiled = match b {
                RnicBackend::AfXdp => dta_io::config::AF_XDP_COMPILED,
                _ => dta_io::config::DPDK_COMPILED,
            };
            dta_io::config::require_feature("rnic.backend", b.name(), compiled, "dta-collector")?;
            let roce = d.roce;
            if roce.ip().is_unspecified() || roce.port() == 0 {
                return Err(format!(
                    "rnic.backend = {:?}: [collector] roce needs a concrete IP and port (no \
                     kernel picks them for a raw-frame backend; the IP is covered by the ICRC)",
                    b.name()
                ));
            }
            if b == RnicBackend::AfXdp && io.af_xdp.interface.is_empty() {
                return Err("rnic.backend = \"af_xdp\" needs [af_xdp] interface".into());
            }
            if b == RnicBackend::Dpdk && io.dpdk.eal_args.is_empty() {
                return Err("rnic.backend = \"dpdk\" needs [dpdk] eal_args".into());
            }
        }
        Ok(())
    }

    fn validate_stores(&self) -> Result<(), String> {
        if self.stores.is_empty() && self.pull.is_none() {
            return Err(
                "no [[store]]: a collector needs at least one store, or a [pull] section (see \
                 collector/collector.example.toml)"
                    .into(),
            );
        }
        let mut names: std::collections::HashMap<&str, usize> = Default::default();
        let mut ports: std::collections::HashMap<u16, &str> = Default::default();
        let mut lists: Vec<(u64, u64, &str)> = Vec::new();
        for (i, s) in self.stores.iter().enumerate() {
            check_store_name(&s.name)?;
            let at = format!("store {:?}", s.name);
            if let Some(j) = names.insert(&s.name, i) {
                return Err(format!(
                    "{at}: name: used by [[store]] {} and {} (names must be unique)",
                    j + 1,
                    i + 1
                ));
            }
            let port = s.cm_port(i).ok_or_else(|| {
                format!("{at}: port: 1337 + its index overflows; give it a `port`")
            })?;
            if port == 0 {
                return Err(format!(
                    "{at}: port: 0 is not an RDMA_CM port (1..=65535; default 1337 + the \
                     store's index)"
                ));
            }
            if let Some(other) = ports.insert(port, &s.name) {
                return Err(format!(
                    "{at}: port: {port} is already the port of store {other:?} (each store \
                     is its own RDMA_CM service; default ports are 1337 + the store's index)"
                ));
            }
            self.check_store_kind(s, &at)?;
            if let StoreKindConfig::Append {
                lists: n,
                first_list,
                ..
            } = s.kind
            {
                let (lo, hi) = (first_list as u64, first_list as u64 + n as u64);
                if let Some((l2, h2, other)) = lists.iter().find(|(l2, h2, _)| lo < *h2 && *l2 < hi)
                {
                    return Err(format!(
                        "{at}: first_list: lists {lo}..{hi} overlap store {other:?}'s lists \
                         {l2}..{h2} (a list ID must name one ring)"
                    ));
                }
                lists.push((lo, hi, &s.name));
            }
            // Anything the key checks above did not catch, with the geometry's own words.
            crate::store::layout_of(s)?;
        }
        Ok(())
    }

    /// Checks one store's kind-specific keys.
    fn check_store_kind(&self, s: &StoreConfig, at: &str) -> Result<(), String> {
        let pow2 = |key: &str, v: u32| {
            if v >= 2 && v.is_power_of_two() {
                Ok(())
            } else {
                Err(format!(
                    "{at}: {key}: must be a power of two from 2 to 2^31, not {v}"
                ))
            }
        };
        let max_n = self.collector.max_redundancy;
        let redundancy = |n: u8| {
            if n >= 1 && n <= max_n {
                Ok(())
            } else {
                Err(format!(
                    "{at}: redundancy: must be 1..={max_n} ([collector] max_redundancy), not {n}"
                ))
            }
        };
        match &s.kind {
            StoreKindConfig::KeyWrite {
                slots,
                slot_size,
                redundancy: n,
                ..
            } => {
                pow2("slots", *slots)?;
                if ![8, 16, 32, 64].contains(slot_size) {
                    return Err(format!(
                        "{at}: slot_size: must be 8, 16, 32 or 64, not {slot_size}"
                    ));
                }
                redundancy(*n)?;
            }
            StoreKindConfig::KeyIncrement {
                slots,
                epoch_secs,
                redundancy: n,
                ..
            } => {
                pow2("slots", *slots)?;
                if *epoch_secs > u32::MAX as u64 {
                    return Err(format!(
                        "{at}: epoch_secs: at most {} (0: reset only on demand)",
                        u32::MAX
                    ));
                }
                redundancy(*n)?;
            }
            StoreKindConfig::Append {
                lists,
                first_list,
                capacity,
                entry_size,
                batch,
                ..
            } => {
                if *lists == 0 {
                    return Err(format!("{at}: lists: must be at least 1"));
                }
                if first_list.checked_add(lists - 1).is_none() {
                    return Err(format!(
                        "{at}: first_list: lists {first_list}..{first_list}+{lists} go past \
                         2^32"
                    ));
                }
                if !(1..=32).contains(entry_size) {
                    return Err(format!(
                        "{at}: entry_size: must be 1..=32 bytes, not {entry_size}"
                    ));
                }
                if !(1..=16).contains(batch) {
                    return Err(format!("{at}: batch: must be 1..=16, not {batch}"));
                }
                if *capacity == 0 || capacity % batch != 0 {
                    return Err(format!(
                        "{at}: capacity: must be a positive multiple of batch ({batch}), not \
                         {capacity}"
                    ));
                }
            }
            StoreKindConfig::Postcard {
                chunks,
                hops,
                hash,
                redundancy: n,
                values,
            } => {
                pow2("chunks", *chunks)?;
                if !(1..=dta_proto::hash::MAX_HOPS).contains(&(*hops as usize)) {
                    return Err(format!("{at}: hops: must be 1..=16, not {hops}"));
                }
                if *hash == HashProfile::Reference && *hops != 5 {
                    return Err(format!(
                        "{at}: hops: the reference hash profile needs 5, not {hops}"
                    ));
                }
                redundancy(*n)?;
                crate::query::postcard::ValueSet::new(values, *hash)
                    .map_err(|e| format!("{at}: values: {e}"))?;
            }
            StoreKindConfig::Sketch {
                sketch_id,
                sketch,
                epochs,
                ..
            } => {
                if let Some(other) = self.stores.iter().find(|o| {
                    o.name != s.name
                        && matches!(o.kind, StoreKindConfig::Sketch { sketch_id: id, .. } if id == *sketch_id)
                }) {
                    return Err(format!(
                        "{at}: sketch_id: {sketch_id} is already served by store {:?}",
                        other.name
                    ));
                }
                if !(1..=dta_proto::sketch::MAX_EPOCHS).contains(epochs) {
                    return Err(format!("{at}: epochs: must be 1..=16, not {epochs}"));
                }
                crate::store::sketch_shape(s.kind.clone())
                    .map_err(|e| format!("{at}: {e} ({} sketch)", sketch.name()))?;
            }
        }
        Ok(())
    }

    /// Bytes of memory the stores map: each region rounded up to 4 KiB pages.
    pub fn memory_needed(&self) -> Result<u64, String> {
        self.stores.iter().try_fold(0u64, |sum, s| {
            let (_, len) = crate::store::layout_of(s)?;
            Ok(sum.saturating_add(len.div_ceil(4096) * 4096))
        })
    }

    /// Checks what depends on the host: the stores' memory against `mem_total` (the host's
    /// RAM in bytes, `MemTotal` of `/proc/meminfo`; `None`: unknown, not checked). Regions are
    /// populated when the collector starts, so stores larger than the RAM can never run.
    pub fn check_host(&self, mem_total: Option<u64>) -> Result<(), String> {
        let Some(total) = mem_total else {
            return Ok(());
        };
        let need = self.memory_needed()?;
        if need > total {
            let gib = |b: u64| b as f64 / (1u64 << 30) as f64;
            return Err(format!(
                "the stores need {need} bytes ({:.1} GiB) of memory, more than this host's \
                 {total} bytes ({:.1} GiB, MemTotal in /proc/meminfo): make slots, chunks, \
                 lists or capacity smaller (`dta-collector check` lists each store's share)",
                gib(need),
                gib(total)
            ));
        }
        Ok(())
    }
}

/// Checks a store name: 1..=64 of `A-Z a-z 0-9 _ . -`.
fn check_store_name(name: &str) -> Result<(), String> {
    let ok = (1..=MAX_STORE_NAME).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'.' || b == b'-');
    if ok {
        Ok(())
    } else {
        Err(format!(
            "store {name:?}: name: use 1..={MAX_STORE_NAME} characters of A-Z a-z 0-9 _ . - \
             (a name is an RDMA_CM service name, part of file names and of URLs)"
        ))
    }
}

/// The host's RAM in bytes (`MemTotal` of `/proc/meminfo`), if it can be read.
pub fn mem_total() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/meminfo").ok()?;
    parse_mem_total(&s)
}

fn parse_mem_total(meminfo: &str) -> Option<u64> {
    let line = meminfo.lines().find(|l| l.starts_with("MemTotal:"))?;
    let mut it = line["MemTotal:".len()..].split_whitespace();
    let n: u64 = it.next()?.parse().ok()?;
    match it.next() {
        Some("kB") => n.checked_mul(1024),
        None => Some(n),
        Some(_) => None,
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

    /// The error of `ALL` with `from` replaced by `to`.
    fn err(from: &str, to: &str) -> String {
        let doc = ALL.replacen(from, to, 1);
        assert_ne!(doc, ALL, "{from:?} is not in ALL");
        CollectorConfig::from_toml(&doc).unwrap_err()
    }

    #[test]
    fn stores_survive_a_round_trip_through_toml() {
        let c = CollectorConfig::from_toml(ALL).unwrap();
        let again = toml::to_string(&c).unwrap();
        let c2 = CollectorConfig::from_toml(&again).unwrap();
        assert_eq!(format!("{:?}", c.stores), format!("{:?}", c2.stores));
        assert_eq!(c2.stores[0].redundancy(), Some(DEFAULT_KV_REDUNDANCY));
        assert_eq!(c2.stores[3].redundancy(), Some(1));
        assert_eq!(c2.stores[2].redundancy(), None);
    }

    #[test]
    fn store_errors_name_the_store_and_the_key() {
        for (from, to, want) in [
            (
                "slot_size = 32",
                "slot_sise = 32",
                "store \"paths\": unknown field `slot_sise`",
            ),
            (
                "slots = 1024\nslot_size",
                "slots = \"x\"\nslot_size",
                "store \"paths\": slots: invalid type",
            ),
            (
                "slots = 1024\nslot_size",
                "slots = -4\nslot_size",
                "store \"paths\": slots: invalid value",
            ),
            (
                "slots = 1024\nslot_size",
                "slots = 1000\nslot_size",
                "store \"paths\": slots: must be a power of two",
            ),
            (
                "slot_size = 32",
                "slot_size = 12",
                "store \"paths\": slot_size: must be 8, 16, 32 or 64",
            ),
            (
                "\"keywrite\"",
                "\"keyread\"",
                "store \"paths\": kind: unknown variant `keyread`",
            ),
            ("kind = \"keywrite\"\n", "", "store \"paths\": no `kind`"),
            ("name = \"paths\"\n", "", "[[store]]: a store has no `name`"),
            (
                "epoch_secs = 60",
                "epoch_secs = 60\nredundancy = 0",
                "store \"counts\": redundancy: must be 1..=4",
            ),
            (
                "epoch_secs = 60",
                "epoch_secs = 60\nredundancy = 5",
                "store \"counts\": redundancy: must be 1..=4",
            ),
            (
                "epoch_secs = 60",
                "epoch_secs = 60\nredundancy = 300",
                "store \"counts\": redundancy: invalid value",
            ),
            (
                "capacity = 64",
                "capacity = 60",
                "store \"events\": capacity: must be a positive multiple of batch (16)",
            ),
            (
                "lists = 4",
                "lists = 0",
                "store \"events\": lists: must be at least 1",
            ),
            (
                "chunks = 1024",
                "chunks = 1024\nhops = 17",
                "store \"postcards\": hops: must be 1..=16",
            ),
            (
                "[200, 300]",
                "[300, 200]",
                "store \"postcards\": values: value range [300, 200] is reversed",
            ),
            (
                "name = \"paths\"",
                "name = \"paths\"\nport = 70000",
                "store \"paths\": port: invalid value",
            ),
        ] {
            let e = err(from, to);
            assert!(e.contains(want), "{to:?}: {e}");
            assert!(!e.contains("line 1, column 1"), "{to:?}: {e}");
        }
    }

    #[test]
    fn configs_that_cannot_work_are_refused() {
        // No stores.
        let none = "[collector]\nroce = \"127.0.0.1:0\"\n";
        assert!(CollectorConfig::from_toml(none)
            .unwrap_err()
            .contains("no [[store]]"));
        for (from, to, want) in [
            // Two stores on one RDMA_CM port (explicitly, and against a default 1337 + index).
            (
                "name = \"counts\"",
                "name = \"counts\"\nport = 1337",
                "store \"counts\": port: 1337 is already the port of store \"paths\"",
            ),
            ("name = \"paths\"", "name = \"paths\"\nport = 1338", "store \"counts\": port: 1338 is already"),
            ("name = \"paths\"", "name = \"paths\"\nport = 0", "store \"paths\": port: 0 is not"),
            ("\"counts\"", "\"paths\"", "store \"paths\": name: used by [[store]] 1 and 2"),
            ("\"counts\"", "\"\"", "store \"\": name: use 1..=64 characters"),
            ("\"counts\"", "\"a/b?c\"", "store \"a/b?c\": name: use 1..=64"),
            ("roce = ", "mac = \"zz:00\"\nroce = ", "[collector] mac: \"zz:00\" is not a MAC"),
            ("roce = ", "recv_credits = 0\nroce = ", "[collector] recv_credits: must be at least 1"),
            (
                "roce = ",
                "tail_consumer_idle_secs = 0\nroce = ",
                "[collector] tail_consumer_idle_secs: 0 must be 1..=86400",
            ),
            ("roce = ", "max_redundancy = 9\nroce = ", "[collector] max_redundancy: must be 1..=8"),
            ("roce = ", "pmtu = 1500\nroce = ", "[collector] pmtu"),
            (
                "[collector]",
                "[rnic]\nrx_coalesce_us = 100000000\n[collector]",
                "[rnic] rx_coalesce_us: 100000000 is above the limit of 10000",
            ),
            (
                "roce = ",
                "persist_dir = \"/nonexistent/dta-regions\"\nroce = ",
                "[collector] persist_dir: /nonexistent/dta-regions does not exist",
            ),
            (
                "roce = ",
                "persist_dir = \"/proc/meminfo\"\nroce = ",
                "/proc/meminfo is not a directory",
            ),
            (
                "capacity = 64",
                "capacity = 64\n[[store]]\nname = \"more\"\nkind = \"append\"\nlists = 2\nfirst_list = 3\ncapacity = 16",
                "store \"more\": first_list: lists 3..5 overlap store \"events\"'s lists 0..4",
            ),
            (
                "[[store]]",
                "[[static_peer]]\nroce = \"127.0.0.2:4791\"\nmac = \"x\"\n[[store]]",
                "[[static_peer]] 1 (127.0.0.2:4791): mac",
            ),
        ] {
            let e = err(from, to);
            assert!(e.contains(want), "{to:?}: {e}");
        }
        // At the limits: accepted.
        assert!(CollectorConfig::from_toml(&ALL.replacen(
            "[collector]",
            "[rnic]\nrx_coalesce_us = 10000\n[collector]",
            1
        ))
        .is_ok());
        let dir = std::env::temp_dir();
        let ok = ALL.replacen(
            "roce = ",
            &format!("persist_dir = {:?}\nroce = ", dir.display().to_string()),
            1,
        );
        assert!(CollectorConfig::from_toml(&ok).is_ok());
        let names = ALL.replacen(
            "\"counts\"",
            &format!("\"{}\"", &"A-z_0.9".repeat(10)[..64]),
            1,
        );
        assert!(CollectorConfig::from_toml(&names).is_ok());
        let long = ALL.replacen("\"counts\"", &format!("\"{}\"", "a".repeat(65)), 1);
        assert!(CollectorConfig::from_toml(&long).is_err());
    }

    #[test]
    fn memory_beyond_the_hosts_ram_is_refused() {
        // 128 GiB of Key-Write slots against a 23 GiB host (the issue's `check` case).
        let big = ALL.replacen(
            "slots = 1024\nslot_size = 32",
            "slots = 2147483648\nslot_size = 64",
            1,
        );
        let f: ConfigFile = toml::from_str(&big).unwrap();
        let c = CollectorConfig::try_from(f).unwrap();
        assert!(c.memory_needed().unwrap() > 128 << 30);
        let e = c.check_host(Some(23 << 30)).unwrap_err();
        assert!(e.contains("MemTotal") && e.contains("128.0 GiB"), "{e}");
        assert!(c.check_host(Some(256 << 30)).is_ok());
        assert!(c.check_host(None).is_ok(), "unknown RAM: not checked");
        // Eight such stores need 1 TiB: no test host has that, so parsing refuses it.
        let mut huge = String::from("[collector]\n");
        for i in 0..8 {
            huge.push_str(&format!(
                "[[store]]\nname = \"s{i}\"\nkind = \"keywrite\"\nslots = 2147483648\nslot_size = 64\n"
            ));
        }
        let e = CollectorConfig::from_toml(&huge).unwrap_err();
        assert!(e.contains("MemTotal"), "{e}");
        // The small stores of ALL fit anywhere.
        let c = CollectorConfig::from_toml(ALL).unwrap();
        assert!(c.memory_needed().unwrap() < 1 << 20);
    }

    #[test]
    fn meminfo_parsing() {
        let m = "MemTotal:       24413176 kB\nMemFree:         1234 kB\n";
        assert_eq!(parse_mem_total(m), Some(24413176 * 1024));
        assert_eq!(parse_mem_total("MemFree: 1 kB\n"), None);
        assert_eq!(parse_mem_total("MemTotal: x kB\n"), None);
        assert_eq!(parse_mem_total("MemTotal: 5 MB\n"), None);
        assert!(mem_total().is_some_and(|m| m > 1 << 20));
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
