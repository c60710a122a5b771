//! The translator's TOML configuration: every tunable, with its default.
//!
//! ```toml
//! [translator]
//! listen = "0.0.0.0:40040"      # reports arrive here
//! roce = "10.0.0.101:4791"      # our RoCEv2 source address; collectors answer here
//! workers = 2
//!
//! [[collector]]
//! name = "c1"
//! metadata = "/run/dta/collector.json"   # static set-up: the collector's published metadata
//!
//! [[collector]]
//! name = "c2"
//! cm = "10.0.0.52:4791"                   # RDMA_CM: the collector RNIC's address,
//! ports = [1337, 1338, 1339, 1340]        # and one rdma_cm port per store to write to
//!
//! [routing]
//! keywrite = "key-hash"
//!
//! [int]                                   # P4.org Telemetry Reports (v1.0 and v2.0)
//! port = 32766                            # UDP port they arrive on (0: INT ingest off)
//! [int.postcard]
//! path_len = 5                            # INT-XD postcards: hops per path (0: unknown)
//! initial_ttl = "auto"                    # hosts start at 64, 128 or 255 (or one number)
//! ```
//!
//! Or, as a member of a collector cluster, with no `[[collector]]` of its own:
//!
//! ```toml
//! cluster = "/etc/dta/cluster.toml"      # collectors and partitioning (dta_proto::cluster)
//! ```
//!
//! `[int]` maps Telemetry Reports onto DTA primitives (`datapath::int_ingest`): a sink's
//! INT-MD path → Key-Write keyed by flow (`[int.path]`), INT-XD/MX per-hop reports →
//! Postcarding keyed by flow and hop (`[int.postcard]`), drop reports → Append
//! (`[int.drop]`), congestion reports → Append (`[int.congestion]`), every report → a per-flow
//! Key-Increment (`[int.counter]`). The derived reports are routed by `[routing]` like received
//! ones.

use std::net::SocketAddrV4;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use dta_proto::cluster::Cluster;
use dta_proto::wire::dta::BaseVariant;
use dta_proto::wire::report::Priority;

/// The whole file.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TranslatorConfig {
    /// A collector cluster file: the collectors to write to and how keys, Append lists and
    /// sketches are partitioned among them, epoch by epoch (instead of `[[collector]]`; a
    /// relative path is relative to this file). Its keyed stores are routed by the cluster's
    /// key slot table, its Append lists by its list ranges.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster: Option<PathBuf>,
    /// The parsed cluster file (set by [`TranslatorConfig::load`] or
    /// [`TranslatorConfig::with_cluster`]).
    #[serde(skip)]
    pub cluster_map: Option<Arc<Cluster>>,
    /// Sockets, workers, limits.
    #[serde(default)]
    pub translator: Section,
    /// How reports are parsed.
    #[serde(default)]
    pub reports: ReportsSection,
    /// Append batching.
    #[serde(default)]
    pub append: AppendSection,
    /// Postcarding cache.
    #[serde(default)]
    pub postcard: PostcardSection,
    /// Sketch-Merge.
    #[serde(default)]
    pub sketch: SketchSection,
    /// ACK cadence and loss recovery.
    #[serde(default)]
    pub reliability: ReliabilitySection,
    /// Message-rate cap and priorities.
    #[serde(default)]
    pub overload: OverloadSection,
    /// Collectors to write to.
    #[serde(default, rename = "collector")]
    pub collectors: Vec<CollectorSection>,
    /// Which store each primitive goes to.
    #[serde(default)]
    pub routing: RoutingSection,
    /// AF_XDP backend (`translator.backend = "af_xdp"`).
    #[serde(default)]
    pub af_xdp: AfXdpSection,
    /// DPDK backend (`translator.backend = "dpdk"`).
    #[serde(default)]
    pub dpdk: DpdkSection,
    /// pcap replay backend (`translator.backend = "pcap"`).
    #[serde(default)]
    pub pcap: PcapSection,
    /// P4.org Telemetry Report (INT) ingest.
    #[serde(default)]
    pub int: IntSection,
}

pub use crate::datapath::int_ingest::{CountWhat, HopField, InitialTtl};

/// `[int]`: P4.org Telemetry Reports (v1.0 and v2.0) on their own UDP port, mapped onto DTA
/// primitives (`translator/src/datapath/int_ingest.rs`, PROTOCOL.md "INT ingest").
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct IntSection {
    /// UDP port Telemetry Reports arrive on, at `translator.listen`'s address (0: off). The
    /// specification leaves it to the deployment; 32766 is what the example uses.
    pub port: u16,
    /// UDP destination port that announces an embedded INT shim in a report's truncated
    /// packet (INT over UDP, "INT_TBD"; 0: none).
    pub md_udp_port: u16,
    /// DSCP value that announces an INT shim behind the packet's own TCP/UDP header (none:
    /// DSCP is not used).
    pub md_dscp: Option<u8>,
    /// DSCP bits compared with `md_dscp`.
    pub md_dscp_mask: u8,
    /// Priority of the derived reports.
    pub priority: Priority,
    /// (node ID, hw_id) sources tracked for sequence gaps, per worker.
    pub max_sources: usize,
    /// Path Key-Write.
    pub path: IntPathRule,
    /// Postcards.
    pub postcard: IntPostcardRule,
    /// Drop events (Append).
    pub drop: IntListRule,
    /// Congestion events (Append).
    pub congestion: IntListRule,
    /// Per-flow counters (Key-Increment).
    pub counter: IntCounterRule,
}

impl Default for IntSection {
    fn default() -> Self {
        IntSection {
            port: 0,
            md_udp_port: dta_proto::wire::telemetry_report::DEFAULT_MD_UDP_PORT,
            md_dscp: None,
            md_dscp_mask: 0x3F,
            priority: Priority::Medium,
            max_sources: 4096,
            path: IntPathRule::default(),
            postcard: IntPostcardRule::default(),
            drop: IntListRule {
                enabled: true,
                first_list: 0,
                lists: 8,
            },
            congestion: IntListRule {
                enabled: true,
                first_list: 8,
                lists: 8,
            },
            counter: IntCounterRule::default(),
        }
    }
}

/// `[int.path]`: reports carrying an INT-MD stack → Key-Write keyed by flow.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct IntPathRule {
    /// Map paths.
    pub enabled: bool,
    /// Per-hop field: node_id, ingress_port, egress_port, hop_latency, queue_occupancy,
    /// egress_timestamp.
    pub field: HopField,
    /// Redundancy N (0: the N of the store `routing.keywrite` picks).
    pub redundancy: u8,
}

impl Default for IntPathRule {
    fn default() -> Self {
        IntPathRule {
            enabled: true,
            field: HopField::NodeId,
            redundancy: 0,
        }
    }
}

/// `[int.postcard]`: tracked-flow reports without a stack (INT-XD, INT-MX) → Postcarding.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct IntPostcardRule {
    /// Map postcards.
    pub enabled: bool,
    /// Per-hop field (as for `[int.path]`).
    pub field: HopField,
    /// TTL the reported packets carry at their first hop: hop = initial_ttl − TTL. A number
    /// 1..=255, or "auto" (the smallest of 64, 128, 255 not below the packet's TTL: hosts of
    /// several kinds).
    pub initial_ttl: InitialTtl,
    /// Hops per path (0: unknown; an entry is written when it ages out).
    pub path_len: u8,
}

impl Default for IntPostcardRule {
    fn default() -> Self {
        IntPostcardRule {
            enabled: true,
            field: HopField::NodeId,
            initial_ttl: InitialTtl::Fixed(64),
            path_len: 0,
        }
    }
}

/// `[int.drop]`, `[int.congestion]`: events → Append to list `first_list + node % lists`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct IntListRule {
    /// Map these events.
    pub enabled: bool,
    /// First list.
    pub first_list: u32,
    /// Lists.
    pub lists: u32,
}

impl Default for IntListRule {
    fn default() -> Self {
        IntListRule {
            enabled: true,
            first_list: 0,
            lists: 1,
        }
    }
}

/// `[int.counter]`: every report with a flow → Key-Increment keyed by flow.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct IntCounterRule {
    /// Count.
    pub enabled: bool,
    /// "reports" (1 per report) or "bytes" (the packet's IPv4 total length).
    pub count: CountWhat,
    /// Redundancy N (0: the N of the store `routing.keyincrement` picks).
    pub redundancy: u8,
}

impl Default for IntCounterRule {
    fn default() -> Self {
        IntCounterRule {
            enabled: true,
            count: CountWhat::Reports,
            redundancy: 0,
        }
    }
}

impl IntSection {
    /// The datapath settings (`None` when INT ingest is off).
    pub fn settings(&self) -> Option<crate::datapath::int_ingest::IntSettings> {
        use crate::datapath::int_ingest::{IntSettings, ListRule};
        let list = |r: &IntListRule| {
            r.enabled.then_some(ListRule {
                first: r.first_list,
                lists: r.lists.max(1),
            })
        };
        (self.port != 0).then(|| IntSettings {
            inner: dta_proto::wire::telemetry_report::InnerConfig {
                md_udp_port: self.md_udp_port,
                md_dscp: self.md_dscp,
                md_dscp_mask: self.md_dscp_mask,
            },
            path: self
                .path
                .enabled
                .then_some((self.path.field, self.path.redundancy)),
            postcard: self.postcard.enabled.then_some((
                self.postcard.field,
                self.postcard.initial_ttl,
                self.postcard.path_len,
            )),
            drop: list(&self.drop),
            congestion: list(&self.congestion),
            counter: self
                .counter
                .enabled
                .then_some((self.counter.count, self.counter.redundancy)),
            priority: self.priority,
            max_sources: self.max_sources.max(1),
        })
    }
}

/// The packet I/O backend the workers use (`translator.backend`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BackendKind {
    /// Kernel UDP sockets (`recvmmsg`/`sendmmsg`); no privileges, always built.
    #[default]
    Udp,
    /// AF_XDP on `[af_xdp] interface` (cargo feature `af_xdp`; root).
    AfXdp,
    /// A DPDK port (cargo feature `dpdk`).
    Dpdk,
    /// Replay of pcap files as received traffic; transmitted frames go to `[pcap] output`.
    Pcap,
}

impl BackendKind {
    /// The name used in the configuration.
    pub fn name(self) -> &'static str {
        match self {
            BackendKind::Udp => "udp",
            BackendKind::AfXdp => "af_xdp",
            BackendKind::Dpdk => "dpdk",
            BackendKind::Pcap => "pcap",
        }
    }

    /// True for backends that exchange whole Ethernet frames.
    pub fn raw(self) -> bool {
        self != BackendKind::Udp
    }
}

/// `[af_xdp]` and `[dpdk]` are dta-io's sections, shared with the collector's `[rnic]`.
pub use dta_io::config::{AfXdpSection, DpdkSection, XdpAttach};

/// `[pcap]`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PcapSection {
    /// Capture files replayed as received traffic, concatenated in order. With k workers,
    /// worker w replays frames w, w+k, w+2k, ... of the concatenation.
    pub input: Vec<PathBuf>,
    /// Passes over the input (0: forever).
    pub loops: u64,
    /// Frames per second per worker (0: as fast as the worker takes them).
    pub rate: f64,
    /// Where the frames the translator transmits are written (none: counted and discarded).
    /// With k > 1 workers, worker w writes `NAME-wW.pcap`.
    pub output: Option<PathBuf>,
}

impl Default for PcapSection {
    fn default() -> Self {
        PcapSection {
            input: Vec::new(),
            loops: 1,
            rate: 0.0,
            output: None,
        }
    }
}

/// `[translator]`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Section {
    /// Address the report socket binds (UDP; reporters send to port 40040).
    pub listen: SocketAddrV4,
    /// Our RoCEv2 address: the source of every frame and where collectors send ACKs. Must be
    /// a concrete local IP (it is part of the ICRC).
    pub roce: SocketAddrV4,
    /// Our MAC (raw-frame backends).
    pub mac: String,
    /// Worker threads (each with its own QPs and sockets).
    pub workers: usize,
    /// Pin worker i to core i (and a report dispatcher, if any, to core `workers` when the
    /// machine has one more).
    pub pin_cores: bool,
    /// Highest Key-Write / Key-Increment redundancy accepted (1..=8).
    pub max_redundancy: u8,
    /// UDP port reporters receive NACKs on.
    pub nack_port: u16,
    /// HTTP endpoint serving /metrics and /stats (none if absent).
    pub metrics: Option<SocketAddrV4>,
    /// The metrics server's web settings, the collector's keys: `web_config_file` (TLS,
    /// `basic_auth_users`), `admin_token_file`, `control_hostnames` (Host names answered
    /// besides IP literals and `localhost`).
    #[serde(flatten)]
    pub web: dta_http::WebSettings,
    /// Reporters tracked for sequence gaps, per worker.
    pub max_reporters: usize,
    /// Frames each QP keeps for retransmission until the collector acknowledges them (go-back-N
    /// after a NAK or an ACK timeout; rounded up to a power of two, at most 4194304). Memory:
    /// this many slots of the store's longest frame per QP (1024 × ~400 B for Append batches
    /// of 16 × 20 B). 0 disables retransmission: lost frames are then only counted
    /// (`qp_psn_skipped`) and their PSNs filled with zero-length WRITEs (a PSN is never reused).
    pub retransmit_window: u32,
    /// Kernel socket buffer size (bytes) for the report and RoCEv2 sockets.
    pub socket_buffer: usize,
    /// How often (milliseconds, 1..=1000) each worker publishes its counters for /metrics,
    /// /stats and `Translator::counters` (a lock and a copy per period, never per packet).
    pub stats_interval_ms: u64,
    /// How reports reach the workers over kernel UDP (see [`ReportSteering`]).
    pub report_steering: ReportSteering,
    /// How RoCEv2 answers reach the worker owning their QP (see [`RoceSteering`]).
    pub roce_steering: RoceSteering,
    /// Packet I/O backend: "udp" (default), "af_xdp", "dpdk" or "pcap". Raw-frame backends
    /// (all but udp) receive reports on `listen`'s port and RoCEv2 on `roce`'s port + w, send
    /// from `mac` to each collector's `mac`, and need their own section below.
    pub backend: BackendKind,
    /// Also write every frame the workers transmit to this pcap file (any backend; full
    /// Ethernet frames, kernel-UDP payloads wrapped in synthesised headers). With k > 1
    /// workers, worker w writes `NAME-wW.pcap`.
    pub capture: Option<PathBuf>,
}

/// How reports on the report port reach several workers (kernel UDP backend).
///
/// Measured on this machine (translator/README.md): with 2 workers the dispatcher used less
/// translator CPU per report and reached a higher rate, but its one thread spends 600–700 ns
/// per report, so it can feed only about three workers; `auto` picks it up to
/// [`AUTO_DISPATCH_MAX_WORKERS`] workers and `reuseport` beyond.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ReportSteering {
    /// `dispatcher` for 2..=[`AUTO_DISPATCH_MAX_WORKERS`] workers, `reuseport` for more (one
    /// worker reads the report socket itself either way).
    #[default]
    Auto,
    /// One `SO_REUSEPORT` socket per worker: the kernel hashes each datagram's 4-tuple, so one
    /// reporter (source address and port) always lands on the same worker and its reports stay
    /// in order. Lists and flows owned by another worker are handed over by the workers.
    Reuseport,
    /// One report socket read by a dispatcher thread, which copies each datagram to the worker
    /// chosen by a hash of its source address (per-reporter order kept) through a bounded
    /// queue and wakes the worker (`eventfd`); when a queue is full the dispatcher waits and
    /// the kernel buffer absorbs (and counts) the overflow. An extra thread and a copy per
    /// report, and all receiving on one thread.
    Dispatcher,
}

/// Most workers `report_steering = "auto"` feeds through the dispatcher: its thread spends
/// 600–700 ns per report here, a worker about 2 µs, so one dispatcher keeps about three busy.
pub const AUTO_DISPATCH_MAX_WORKERS: usize = 3;

impl ReportSteering {
    /// Whether a dispatcher thread feeds `workers` workers.
    pub fn dispatches(self, workers: usize) -> bool {
        match self {
            ReportSteering::Dispatcher => workers > 1,
            ReportSteering::Reuseport => false,
            ReportSteering::Auto => (2..=AUTO_DISPATCH_MAX_WORKERS).contains(&workers),
        }
    }
}

/// How RoCEv2 answers (ACK/NAK, CM replies, SENDs) reach the worker that owns their QP.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RoceSteering {
    /// `qpn` when `roce` uses the RoCEv2 port 4791 and there are several workers (what a real
    /// RNIC answers to), `port-per-worker` otherwise.
    #[default]
    Auto,
    /// Every worker binds `roce` itself (`SO_REUSEPORT`) and a classic BPF program attached
    /// to the group delivers each datagram to worker `dest_qp % workers` (CM replies by the
    /// worker index in the top byte of our communication ID). Our QPNs are allocated with
    /// `qpn % workers == worker`. Needed with real RNICs, which answer to port 4791 whatever
    /// port we sent from.
    Qpn,
    /// Worker w binds port `roce.port + w` (ephemeral ports when `roce.port` is 0), and
    /// collectors answer each worker on its own port: the software RNIC's static peers expect
    /// this.
    PortPerWorker,
}

impl RoceSteering {
    /// Whether the workers share one RoCEv2 port (BPF steering) for this configuration.
    pub fn shared_port(self, roce: SocketAddrV4, workers: usize) -> bool {
        match self {
            RoceSteering::Qpn => workers > 1,
            RoceSteering::PortPerWorker => false,
            RoceSteering::Auto => workers > 1 && roce.port() == dta_proto::consts::ROCEV2_PORT,
        }
    }
}

impl Default for Section {
    fn default() -> Self {
        Section {
            listen: SocketAddrV4::new(std::net::Ipv4Addr::UNSPECIFIED, dta_proto::consts::DTA_PORT),
            roce: SocketAddrV4::new(
                std::net::Ipv4Addr::LOCALHOST,
                dta_proto::consts::ROCEV2_PORT,
            ),
            mac: "02:00:00:00:00:01".into(),
            workers: 1,
            pin_cores: false,
            max_redundancy: 4,
            nack_port: dta_proto::consts::DTA_NACK_PORT,
            metrics: None,
            web: dta_http::WebSettings::default(),
            max_reporters: 4096,
            retransmit_window: 1024,
            socket_buffer: 16 << 20,
            stats_interval_ms: 20,
            report_steering: ReportSteering::default(),
            roce_steering: RoceSteering::default(),
            backend: BackendKind::Udp,
            capture: None,
        }
    }
}

/// `[reports]`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ReportsSection {
    /// Reference base header: "a" (2 bytes) or "b" (3 bytes, with seqnum).
    pub reference_variant: BaseVariant,
    /// Accept reference-profile reports.
    pub accept_reference: bool,
    /// Accept extended-profile reports.
    pub accept_extended: bool,
    /// Priority given to reference reports (which carry none).
    pub reference_priority: Priority,
}

impl Default for ReportsSection {
    fn default() -> Self {
        ReportsSection {
            reference_variant: BaseVariant::B,
            accept_reference: true,
            accept_extended: true,
            reference_priority: Priority::Medium,
        }
    }
}

/// `[append]`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AppendSection {
    /// A partial batch is written after this many microseconds.
    pub flush_delay_us: u64,
}

impl Default for AppendSection {
    fn default() -> Self {
        AppendSection {
            flush_delay_us: 1000,
        }
    }
}

/// `[postcard]`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PostcardSection {
    /// Cache slots across all workers (a power of two).
    pub cache_slots: u32,
    /// Copies written per chunk (N) to a store whose metadata records no N. A store that
    /// records one (every store of a current collector: `[[store]] redundancy`) is written
    /// with its own N, and setting a different one here is an error.
    pub redundancy: Option<u8>,
    /// A flow whose path is incomplete is written after this many microseconds (0 = only
    /// on eviction or shutdown).
    pub flush_delay_us: u64,
}

impl Default for PostcardSection {
    fn default() -> Self {
        PostcardSection {
            cache_slots: 32768,
            redundancy: None,
            flush_delay_us: 100_000,
        }
    }
}

/// `[sketch]`: how Sketch-Merge stores merge switches' sketches (one worker merges them: a
/// translator with Sketch-Merge stores and `workers` above 1 refuses to start).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SketchSection {
    /// Switches whose columns complete a column: a batch is written as soon as each of its
    /// columns has this many.
    pub expected_switches: u16,
    /// Switches tracked at most per sketch (the table is allocated up front).
    pub max_switches: u32,
    /// Milliseconds after a merge into a batch not yet written at which what changed is
    /// written anyway and switches that have not sent their whole sketch are NACKed.
    pub flush_delay_ms: u64,
    /// Switches expected in an epoch that must have sent the next epoch before the merge
    /// moves on (1..=expected_switches; absent: a majority of expected_switches).
    pub epoch_quorum: Option<u16>,
    /// Epochs a switch not listed in `[[sketch.switch]]` may stay silent before it leaves the
    /// switch table (1..=1000000).
    pub idle_epochs: u32,
    /// Epochs behind the merge a report counts as late (1..=1000); further behind, a report
    /// of column 0 is the switch restarting its epoch counter.
    pub late_epochs: u32,
    /// Switches with a fixed NACK address (`[[sketch.switch]]`): always expected in an epoch,
    /// never forgotten, and NACKed only there.
    pub switch: Vec<SketchSwitchEntry>,
}

/// `[[sketch.switch]]`: a switch whose sketch-column NACKs go to a fixed address.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct SketchSwitchEntry {
    /// The switch ID its reports carry.
    pub id: u32,
    /// The IPv4 address its NACKs go to.
    pub address: std::net::Ipv4Addr,
}

impl Default for SketchSection {
    fn default() -> Self {
        SketchSection {
            expected_switches: 1,
            max_switches: 4096,
            flush_delay_ms: 10,
            epoch_quorum: None,
            idle_epochs: 4,
            late_epochs: 2,
            switch: Vec::new(),
        }
    }
}

/// The smallest `[reliability] max_outstanding_psns`: room for the most frames one report
/// needs, many times over.
pub const MIN_OUTSTANDING_PSNS: u32 = 64;

/// `[reliability]`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ReliabilitySection {
    /// Ask for an ACK every k frames.
    pub ack_every: u32,
    /// The initial retransmission timeout (µs): silent loss is suspected after this long
    /// without the ACK, until round trips have been measured.
    pub ack_timeout_us: u64,
    /// Lower bound of the adaptive (RFC 6298, SRTT + 4·RTTVAR) timeout (µs). A spurious
    /// timeout costs one zero-length probe on a fresh PSN.
    pub rto_min_us: u64,
    /// Upper bound of the adaptive timeout and of the probe back-off (µs).
    pub rto_max_us: u64,
    /// The QP is declared broken (and reconnected over RDMA_CM) after this many milliseconds
    /// without any ACK or NAK while one was due. Must exceed the longest pause expected from
    /// a busy collector.
    pub broken_after_ms: u64,
    /// PSNs each QP may have taken and not yet seen confirmed (64..=4194304, and at least
    /// 2 × `ack_every`). PSNs are compared in a 24-bit circle, so a requester must never have
    /// 2^23 outstanding: a QP whose collector stopped answering stops here, and its reports
    /// are dropped (`drop_qp_queue_full`) until the collector confirms frames again. The
    /// default, 1048576, is a tenth of a second at 10 million frames a second.
    pub max_outstanding_psns: u32,
}

impl Default for ReliabilitySection {
    fn default() -> Self {
        ReliabilitySection {
            ack_every: 64,
            ack_timeout_us: 20_000,
            rto_min_us: 2_000,
            rto_max_us: 1_000_000,
            broken_after_ms: 5_000,
            max_outstanding_psns: crate::datapath::qp::DEFAULT_MAX_OUTSTANDING,
        }
    }
}

/// `[overload]`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct OverloadSection {
    /// RDMA messages per second per collector NIC, shared by the workers (0 = unlimited).
    pub messages_per_sec: u64,
    /// Token-bucket depth in messages.
    pub burst: u64,
    /// Low priority is shed while fewer than this fraction of the bucket's tokens remain.
    pub low_reserve: f64,
    /// Medium priority is shed below this fraction.
    pub medium_reserve: f64,
    /// High-priority reports queued per worker while the budget is exhausted.
    pub backlog: usize,
}

impl Default for OverloadSection {
    fn default() -> Self {
        OverloadSection {
            messages_per_sec: 0,
            burst: 4096,
            low_reserve: 0.5,
            medium_reserve: 0.25,
            backlog: 65536,
        }
    }
}

/// `[[collector]]`: either `metadata` (static set-up) or `cm` + `ports` (RDMA_CM).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CollectorSection {
    /// A name for logs and metrics.
    pub name: String,
    /// Static set-up: the JSON metadata the collector published.
    #[serde(default)]
    pub metadata: Option<PathBuf>,
    /// RDMA_CM set-up: the collector RNIC's RoCEv2 address (port 4791 on real NICs).
    #[serde(default)]
    pub cm: Option<SocketAddrV4>,
    /// RDMA_CM set-up: the rdma_cm ports (one per store) to connect.
    #[serde(default)]
    pub ports: Vec<u16>,
    /// The collector RNIC's MAC (raw-frame backends).
    #[serde(default)]
    pub mac: Option<String>,
    /// Seconds to wait for the initial RDMA_CM connections.
    #[serde(default = "default_connect_timeout")]
    pub connect_timeout_secs: u64,
}

fn default_connect_timeout() -> u64 {
    10
}

impl CollectorSection {
    /// A statically set-up collector described by its published metadata file.
    pub fn with_metadata(name: &str, metadata: PathBuf) -> CollectorSection {
        CollectorSection {
            name: name.into(),
            metadata: Some(metadata),
            cm: None,
            ports: Vec::new(),
            mac: None,
            connect_timeout_secs: default_connect_timeout(),
        }
    }

    /// A collector connected over RDMA_CM.
    pub fn with_cm(name: &str, roce: SocketAddrV4, ports: Vec<u16>) -> CollectorSection {
        CollectorSection {
            name: name.into(),
            metadata: None,
            cm: Some(roce),
            ports,
            mac: None,
            connect_timeout_secs: default_connect_timeout(),
        }
    }
}

/// `[routing]`: "single", "single:STORE", "key-hash" or "destination".
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RoutingSection {
    /// Key-Write routing.
    pub keywrite: String,
    /// Key-Increment routing.
    pub keyincrement: String,
    /// Postcard routing.
    pub postcard: String,
    /// For "destination" routing: report destination IP → "collector/store".
    pub destinations: std::collections::BTreeMap<String, String>,
}

impl Default for RoutingSection {
    fn default() -> Self {
        RoutingSection {
            keywrite: "single".into(),
            keyincrement: "single".into(),
            postcard: "single".into(),
            destinations: Default::default(),
        }
    }
}

impl TranslatorConfig {
    /// Parses a TOML document.
    pub fn from_toml(s: &str) -> Result<TranslatorConfig, String> {
        let c: TranslatorConfig = toml::from_str(s).map_err(|e| e.to_string())?;
        c.validate()?;
        Ok(c)
    }

    /// Reads and parses a file, and the cluster file it names, if any.
    pub fn load(path: &Path) -> Result<TranslatorConfig, String> {
        Self::load_member(path, None)
    }

    /// Reads and parses a file as a member of the cluster described in `cluster` (given on
    /// the command line: it replaces the file's own `cluster`), or of the file's own.
    pub fn load_member(path: &Path, cluster: Option<&Path>) -> Result<TranslatorConfig, String> {
        let s = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
        let at = |e: String| format!("{}: {e}", path.display());
        let c: TranslatorConfig = toml::from_str(&s).map_err(|e| at(e.to_string()))?;
        let file = match (cluster, &c.cluster) {
            (Some(f), _) => Some(f.to_path_buf()),
            (None, Some(f)) => Some(path.parent().unwrap_or(Path::new(".")).join(f)),
            (None, None) => None,
        };
        match file {
            Some(f) => {
                let cluster = load_cluster(&f)?;
                c.with_cluster(f, cluster).map_err(at)
            }
            None => {
                c.validate().map_err(at)?;
                Ok(c)
            }
        }
    }

    /// Makes this translator a member of `cluster` (read from `path`): its collectors become
    /// the cluster's, and its keyed stores, Append lists and sketches are routed by the
    /// cluster's partitioning. A configuration with `[[collector]]`s of its own is refused.
    pub fn with_cluster(mut self, path: PathBuf, cluster: Cluster) -> Result<Self, String> {
        if !self.collectors.is_empty() {
            return Err(format!(
                "a cluster member takes its collectors from the cluster file {}; remove the \
                 [[collector]] sections (or the cluster)",
                path.display()
            ));
        }
        self.collectors = cluster
            .collectors
            .iter()
            .map(|c| CollectorSection {
                name: c.name.clone(),
                metadata: c.metadata.clone(),
                cm: c.cm,
                ports: c.ports.clone(),
                mac: c.mac.clone(),
                connect_timeout_secs: default_connect_timeout(),
            })
            .collect();
        self.cluster = Some(path);
        self.cluster_map = Some(Arc::new(cluster));
        self.validate()?;
        Ok(self)
    }

    /// Checks cross-field rules.
    pub fn validate(&self) -> Result<(), String> {
        let t = &self.translator;
        if self.int.port != 0
            && (self.int.port == t.listen.port() || self.int.port == t.roce.port())
        {
            return Err("int.port must differ from translator.listen's and roce's ports".into());
        }
        if self.int.drop.lists == 0 || self.int.congestion.lists == 0 {
            return Err("int.drop.lists and int.congestion.lists must be at least 1".into());
        }
        for (name, r) in [
            ("drop", &self.int.drop),
            ("congestion", &self.int.congestion),
        ] {
            let rule = crate::datapath::int_ingest::ListRule {
                first: r.first_list,
                lists: r.lists,
            };
            if !rule.fits() {
                return Err(format!(
                    "int.{name}.first_list + int.{name}.lists - 1 must be at most {} (list IDs \
                     are 32 bits): first_list = {}, lists = {}",
                    u32::MAX,
                    r.first_list,
                    r.lists
                ));
            }
        }
        if t.workers == 0 || t.workers > 64 {
            return Err("translator.workers must be 1..=64".into());
        }
        if t.metrics.is_none() && (t.web != dta_http::WebSettings::default()) {
            return Err(
                "translator.web_config_file, admin_token_file and control_hostnames configure \
                 the metrics server: set translator.metrics too (or remove them)"
                    .into(),
            );
        }
        if !(1..=1000).contains(&t.stats_interval_ms) {
            return Err("translator.stats_interval_ms must be 1..=1000".into());
        }
        if t.retransmit_window > crate::datapath::retx::MAX_WINDOW {
            return Err(format!(
                "translator.retransmit_window must be 0..={}",
                crate::datapath::retx::MAX_WINDOW
            ));
        }
        if t.max_redundancy == 0 || t.max_redundancy as usize > dta_proto::hash::MAX_REDUNDANCY {
            return Err(format!(
                "translator.max_redundancy must be 1..={}",
                dta_proto::hash::MAX_REDUNDANCY
            ));
        }
        if t.roce.ip().is_unspecified() {
            return Err(
                "translator.roce must name a concrete local IP: it is covered by the ICRC".into(),
            );
        }
        match t.backend {
            BackendKind::Udp => {}
            BackendKind::AfXdp if self.af_xdp.interface.is_empty() => {
                return Err("translator.backend = \"af_xdp\" needs [af_xdp] interface".into())
            }
            BackendKind::AfXdp if t.workers > 1 => {
                return Err(
                    "translator.backend = \"af_xdp\": one worker per interface (the steering \
                     program is attached once per interface); set workers = 1"
                        .into(),
                )
            }
            BackendKind::AfXdp => {}
            BackendKind::Dpdk if self.dpdk.eal_args.is_empty() => {
                return Err("translator.backend = \"dpdk\" needs [dpdk] eal_args".into())
            }
            BackendKind::Dpdk if self.dpdk.ports.len().max(1) < t.workers => {
                return Err(format!(
                    "translator.backend = \"dpdk\": {} worker(s) need as many [dpdk] ports \
                     (one queue per port)",
                    t.workers
                ))
            }
            BackendKind::Dpdk => {}
            BackendKind::Pcap if self.pcap.input.is_empty() => {
                return Err("translator.backend = \"pcap\" needs [pcap] input files".into())
            }
            BackendKind::Pcap if !(self.pcap.rate >= 0.0 && self.pcap.rate.is_finite()) => {
                return Err("pcap.rate must be a finite number >= 0".into())
            }
            BackendKind::Pcap => {}
        }
        let compiled = match t.backend {
            BackendKind::AfXdp => cfg!(feature = "af_xdp"),
            BackendKind::Dpdk => cfg!(feature = "dpdk"),
            BackendKind::Udp | BackendKind::Pcap => true,
        };
        if !compiled {
            let name = t.backend.name();
            return Err(format!(
                "translator.backend = {name:?} is not compiled in: rebuild with the cargo \
                 feature `{name}` (cargo build --release -p dta-translator --features {name})"
            ));
        }
        if t.backend.raw() && (t.listen.port() == 0 || t.roce.port() == 0) {
            return Err(format!(
                "translator.backend = {:?}: listen and roce need fixed ports (no kernel \
                 picks an ephemeral port for a raw-frame backend)",
                t.backend.name()
            ));
        }
        let sk = &self.sketch;
        if sk.expected_switches == 0 {
            return Err("sketch.expected_switches must be at least 1".into());
        }
        if sk.max_switches < sk.expected_switches as u32 || sk.max_switches > 1 << 20 {
            return Err(format!(
                "sketch.max_switches must be sketch.expected_switches ({})..=1048576, not {}",
                sk.expected_switches, sk.max_switches
            ));
        }
        if !(1..=60_000).contains(&sk.flush_delay_ms) {
            return Err("sketch.flush_delay_ms must be 1..=60000".into());
        }
        if let Some(q) = sk.epoch_quorum {
            if q == 0 || q > sk.expected_switches {
                return Err(format!(
                    "sketch.epoch_quorum must be 1..=sketch.expected_switches ({}), not {q}",
                    sk.expected_switches
                ));
            }
        }
        if !(1..=1_000_000).contains(&sk.idle_epochs) {
            return Err(format!(
                "sketch.idle_epochs must be 1..=1000000, not {}",
                sk.idle_epochs
            ));
        }
        if !(1..=1000).contains(&sk.late_epochs) {
            return Err(format!(
                "sketch.late_epochs must be 1..=1000, not {}",
                sk.late_epochs
            ));
        }
        if sk.switch.len() > sk.max_switches as usize {
            return Err(format!(
                "sketch.switch: {} switches listed, above sketch.max_switches ({})",
                sk.switch.len(),
                sk.max_switches
            ));
        }
        let mut ids = std::collections::HashSet::new();
        for w in &sk.switch {
            if !ids.insert(w.id) {
                return Err(format!("sketch.switch: id {} is listed twice", w.id));
            }
            if w.address.is_unspecified() || w.address.is_broadcast() || w.address.is_multicast() {
                return Err(format!(
                    "sketch.switch: id {}: address {} is not a unicast address",
                    w.id, w.address
                ));
            }
        }
        if !self.postcard.cache_slots.is_power_of_two() {
            return Err("postcard.cache_slots must be a power of two".into());
        }
        if let Some(n) = self.postcard.redundancy {
            if n == 0 || n as usize > dta_proto::hash::MAX_REDUNDANCY {
                return Err(format!("postcard.redundancy must be 1..=8, not {n}"));
            }
        }
        if self.reliability.ack_every == 0 {
            return Err("reliability.ack_every must be at least 1".into());
        }
        let r = &self.reliability;
        if r.rto_min_us == 0 || r.rto_max_us < r.rto_min_us || r.ack_timeout_us == 0 {
            return Err(
                "reliability: need 0 < rto_min_us <= rto_max_us and ack_timeout_us > 0".into(),
            );
        }
        if r.broken_after_ms == 0 || r.broken_after_ms.saturating_mul(1000) < r.rto_max_us {
            return Err("reliability.broken_after_ms must be at least rto_max_us".into());
        }
        let max = crate::datapath::qp::MAX_OUTSTANDING;
        if !(MIN_OUTSTANDING_PSNS..=max).contains(&r.max_outstanding_psns) {
            return Err(format!(
                "reliability.max_outstanding_psns must be {MIN_OUTSTANDING_PSNS}..={max}, not {} \
                 (PSNs compare correctly only while fewer than 2^23 are outstanding)",
                r.max_outstanding_psns
            ));
        }
        if u64::from(r.max_outstanding_psns) < 2 * u64::from(r.ack_every) {
            return Err(format!(
                "reliability.max_outstanding_psns ({}) must be at least 2 × reliability.ack_every \
                 ({}): a QP at its cap must have a frame in flight that asks for an ACK",
                r.max_outstanding_psns, r.ack_every
            ));
        }
        let o = &self.overload;
        if !(0.0..1.0).contains(&o.low_reserve)
            || !(0.0..1.0).contains(&o.medium_reserve)
            || o.medium_reserve > o.low_reserve
        {
            return Err("overload: 0 <= medium_reserve <= low_reserve < 1".into());
        }
        if self.collectors.is_empty() && self.cluster.is_none() {
            return Err(
                "no [[collector]]: a translator needs at least one collector to write to \
                 (`cm` and `ports` for RDMA_CM, or `metadata`; see translator.example.toml)"
                    .into(),
            );
        }
        let mut names = std::collections::HashSet::new();
        for c in &self.collectors {
            if !names.insert(c.name.as_str()) {
                return Err(format!(
                    "collector {:?}: name: used twice (names must be unique)",
                    c.name
                ));
            }
            let mut ports = std::collections::HashSet::new();
            for &p in &c.ports {
                if p == 0 {
                    return Err(format!(
                        "collector {:?}: ports: 0 is not an RDMA_CM port",
                        c.name
                    ));
                }
                if !ports.insert(p) {
                    return Err(format!(
                        "collector {:?}: ports: {p} is listed twice",
                        c.name
                    ));
                }
            }
            if let Some(m) = &c.mac {
                m.parse::<dta_proto::wire::ethernet::MacAddr>()
                    .map_err(|_| format!("collector {:?}: mac: {m:?} is not a MAC", c.name))?;
            }
            match (&c.metadata, &c.cm) {
                (Some(_), None) => {}
                (None, Some(_)) if !c.ports.is_empty() => {}
                (None, Some(_)) => {
                    return Err(format!(
                        "collector {:?}: `cm` needs `ports` (the stores' rdma_cm ports)",
                        c.name
                    ))
                }
                _ => {
                    return Err(format!(
                        "collector {:?}: give exactly one of `metadata` (static) or `cm` (RDMA_CM)",
                        c.name
                    ))
                }
            }
        }
        for (what, r) in [
            ("keywrite", &self.routing.keywrite),
            ("keyincrement", &self.routing.keyincrement),
            ("postcard", &self.routing.postcard),
        ] {
            if !(r == "single"
                || r.starts_with("single:")
                || r == "key-hash"
                || r == "destination"
                || r == "none")
            {
                return Err(format!("routing.{what}: expected single, single:STORE, key-hash, destination or none, got {r:?}"));
            }
        }
        Ok(())
    }
}

/// Reads and validates a cluster file; relative `metadata` paths are taken relative to its
/// folder.
pub fn load_cluster(path: &Path) -> Result<Cluster, String> {
    let s = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut c = Cluster::from_toml(&s).map_err(|e| format!("{}: {e}", path.display()))?;
    c.resolve_paths(path.parent().unwrap_or(Path::new(".")));
    Ok(c)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A collector section, which every valid file needs.
    const C: &str = "\n[[collector]]\nname = \"c\"\ncm = \"127.0.0.1:4791\"\nports = [1337]\n";

    fn parse(s: &str) -> Result<TranslatorConfig, String> {
        TranslatorConfig::from_toml(&format!("{s}{C}"))
    }

    #[test]
    fn example_file_parses_and_defaults_match() {
        let c = TranslatorConfig::from_toml(include_str!("../translator.example.toml"))
            .expect("example parses");
        let d = TranslatorConfig::default();
        assert_eq!(c.translator.max_redundancy, d.translator.max_redundancy);
        assert_eq!(c.reliability.ack_timeout_us, d.reliability.ack_timeout_us);
        assert_eq!(
            c.reliability.max_outstanding_psns,
            d.reliability.max_outstanding_psns
        );
        assert_eq!(c.postcard.cache_slots, d.postcard.cache_slots);
        assert_eq!(c.postcard.redundancy, None, "the stores' N applies");
        assert_eq!(c.collectors[0].ports, vec![1337, 1338, 1339, 1340]);
        assert!(c.translator.roce.ip().is_loopback());
        assert_eq!(c.translator.report_steering, d.translator.report_steering);
        assert_eq!(c.translator.roce_steering, d.translator.roce_steering);
        assert_eq!(c.translator.backend, BackendKind::Udp);
        assert_eq!(c.af_xdp.frame_count, d.af_xdp.frame_count);
        assert_eq!(c.af_xdp.rx_batch, d.af_xdp.rx_batch);
        assert_eq!(c.pcap.loops, 1);
    }

    #[test]
    fn backend_sections_parse_and_are_checked() {
        let r = parse(
            "[translator]\nbackend = \"af_xdp\"\n[af_xdp]\ninterface = \"veth0\"\nmode = \"skb\"\nqueue = 2",
        );
        if cfg!(feature = "af_xdp") {
            let c = r.expect("af_xdp parses");
            assert_eq!(c.translator.backend, BackendKind::AfXdp);
            assert_eq!(c.af_xdp.mode, XdpAttach::Skb);
            assert_eq!(c.af_xdp.queue, 2);
        } else {
            assert!(r.unwrap_err().contains("feature `af_xdp`"));
        }
        assert!(
            TranslatorConfig::from_toml("[translator]\nbackend = \"af_xdp\"")
                .unwrap_err()
                .contains("interface")
        );
        assert!(
            TranslatorConfig::from_toml("[translator]\nbackend = \"dpdk\"")
                .unwrap_err()
                .contains("eal_args")
        );
        assert!(TranslatorConfig::from_toml(
            "[translator]\nbackend = \"dpdk\"\nworkers = 2\n[dpdk]\neal_args = [\"-l\", \"0\"]"
        )
        .unwrap_err()
        .contains("ports"));
        assert!(
            TranslatorConfig::from_toml("[translator]\nbackend = \"pcap\"")
                .unwrap_err()
                .contains("input")
        );
        assert!(TranslatorConfig::from_toml(
            "[translator]\nbackend = \"pcap\"\nlisten = \"0.0.0.0:0\"\n[pcap]\ninput = [\"a.pcap\"]"
        )
        .unwrap_err()
        .contains("fixed ports"));
        assert!(
            TranslatorConfig::from_toml("[translator]\nbackend = \"rdma\"")
                .unwrap_err()
                .contains("unknown variant")
        );
        let p = parse(
            "[translator]\nbackend = \"pcap\"\ncapture = \"/tmp/x.pcap\"\n[pcap]\ninput = [\"a.pcap\"]\nloops = 3\nrate = 1000.0",
        )
        .expect("pcap parses");
        assert_eq!(p.pcap.loops, 3);
        assert_eq!(
            p.translator.capture.as_deref(),
            Some(std::path::Path::new("/tmp/x.pcap"))
        );
    }

    #[test]
    fn sketch_keys_parse_and_are_checked() {
        let c = parse(
            "[sketch]\nexpected_switches = 5\nepoch_quorum = 4\nidle_epochs = 9\nlate_epochs = 3\n\
             [[sketch.switch]]\nid = 7\naddress = \"10.0.0.7\"\n\
             [[sketch.switch]]\nid = 8\naddress = \"10.0.0.8\"\n",
        )
        .expect("parses");
        assert_eq!(c.sketch.epoch_quorum, Some(4));
        assert_eq!((c.sketch.idle_epochs, c.sketch.late_epochs), (9, 3));
        assert_eq!(
            c.sketch.switch[1].address,
            std::net::Ipv4Addr::new(10, 0, 0, 8)
        );
        let d = TranslatorConfig::default().sketch;
        assert_eq!((d.epoch_quorum, d.idle_epochs, d.late_epochs), (None, 4, 2));
        for (bad, want) in [
            ("expected_switches = 3\nepoch_quorum = 4", "sketch.epoch_quorum"),
            ("epoch_quorum = 0", "sketch.epoch_quorum"),
            ("idle_epochs = 0", "sketch.idle_epochs"),
            ("late_epochs = 0", "sketch.late_epochs"),
            ("late_epochs = 1001", "sketch.late_epochs"),
            (
                "[[sketch.switch]]\nid = 1\naddress = \"10.0.0.1\"\n[[sketch.switch]]\nid = 1\naddress = \"10.0.0.2\"",
                "id 1 is listed twice",
            ),
            (
                "[[sketch.switch]]\nid = 1\naddress = \"255.255.255.255\"",
                "not a unicast address",
            ),
            ("[[sketch.switch]]\nid = 1\naddress = \"nope\"", "address"),
            ("[[sketch.switch]]\nid = 1\naddr = \"10.0.0.1\"", "addr"),
            ("quorum = 2", "quorum"),
        ] {
            let e = parse(&format!("[sketch]\n{bad}\n")).unwrap_err();
            assert!(e.contains(want), "{bad}: {e}");
        }
    }

    #[test]
    fn steering_choices() {
        let c = parse(
            "[translator]\nreport_steering = \"dispatcher\"\nroce_steering = \"port-per-worker\"\n",
        )
        .expect("parses");
        assert_eq!(c.translator.report_steering, ReportSteering::Dispatcher);
        assert_eq!(c.translator.roce_steering, RoceSteering::PortPerWorker);
        assert!(TranslatorConfig::from_toml("[translator]\nreport_steering = \"x\"\n").is_err());
        let auto = ReportSteering::Auto;
        assert!(!auto.dispatches(1) && auto.dispatches(2) && auto.dispatches(3));
        assert!(!auto.dispatches(4));
        assert!(!ReportSteering::Dispatcher.dispatches(1));
        assert!(!ReportSteering::Reuseport.dispatches(2));
        let roce = |port| SocketAddrV4::new(std::net::Ipv4Addr::LOCALHOST, port);
        assert!(RoceSteering::Auto.shared_port(roce(4791), 2));
        assert!(!RoceSteering::Auto.shared_port(roce(4791), 1));
        assert!(!RoceSteering::Auto.shared_port(roce(5000), 2));
        assert!(RoceSteering::Qpn.shared_port(roce(0), 2));
        assert!(!RoceSteering::PortPerWorker.shared_port(roce(4791), 4));
    }

    #[test]
    fn int_keys_are_checked() {
        let c = parse("[int]\nport = 32766\n[int.postcard]\ninitial_ttl = \"auto\"")
            .expect("initial_ttl = \"auto\" parses");
        assert_eq!(c.int.postcard.initial_ttl, InitialTtl::Auto);
        assert_eq!(
            c.int.settings().unwrap().postcard.map(|p| p.1),
            Some(InitialTtl::Auto)
        );
        let c = parse("[int.postcard]\ninitial_ttl = 128").unwrap();
        assert_eq!(c.int.postcard.initial_ttl, InitialTtl::Fixed(128));
        for bad in [
            "[int.postcard]\ninitial_ttl = \"sometimes\"",
            "[int.postcard]\ninitial_ttl = 0",
            "[int.postcard]\ninitial_ttl = 256",
        ] {
            let e = parse(bad).unwrap_err();
            assert!(e.contains("initial_ttl"), "{bad}: {e}");
        }
        // List IDs are 32 bits: the last list a rule names must exist.
        for (bad, key) in [
            ("[int.drop]\nfirst_list = 4294967290\nlists = 8", "int.drop"),
            (
                "[int.congestion]\nfirst_list = 4294967295\nlists = 2",
                "int.congestion",
            ),
        ] {
            let e = parse(bad).unwrap_err();
            assert!(e.contains(key), "{bad}: {e}");
        }
        parse("[int.drop]\nfirst_list = 4294967288\nlists = 8").expect("the last list fits");
    }

    #[test]
    fn bad_files_get_clear_errors() {
        assert!(parse("[translator]\nworkers = 0")
            .unwrap_err()
            .contains("workers"));
        assert!(parse("[translator]\nbogus = 1")
            .unwrap_err()
            .contains("bogus"));
        // The web settings are the collector's keys, and configure the metrics server only.
        let e = parse("[translator]\nweb_config_file = \"/etc/dta/web.toml\"").unwrap_err();
        assert!(
            e.contains("web_config_file") && e.contains("translator.metrics"),
            "{e}"
        );
        let c = parse(
            "[translator]\nmetrics = \"127.0.0.1:0\"\ncontrol_hostnames = [\"m.example\"]\n\
             admin_token_file = \"/t\"",
        )
        .unwrap();
        assert_eq!(c.translator.web.control_hostnames, ["m.example"]);
        assert!(
            parse("[translator]\nmetrics = \"127.0.0.1:0\"\nweb_config = \"/w\"")
                .unwrap_err()
                .contains("web_config")
        );
        assert!(TranslatorConfig::from_toml("[[collector]]\nname = \"x\"")
            .unwrap_err()
            .contains("exactly one"));
        assert!(parse("[translator]\nroce = \"0.0.0.0:4791\"")
            .unwrap_err()
            .contains("ICRC"));
        // No collector at all: nothing could ever be written.
        let e = TranslatorConfig::from_toml("[translator]\nworkers = 1").unwrap_err();
        assert!(e.contains("no [[collector]]"), "{e}");
        assert!(TranslatorConfig::from_toml("").is_err());
        for (to, want) in [
            ("ports = [0]", "collector \"c\": ports: 0 is not"),
            (
                "ports = [1337, 1337]",
                "collector \"c\": ports: 1337 is listed twice",
            ),
            (
                "ports = [1337]\nmac = \"zz\"",
                "collector \"c\": mac: \"zz\" is not a MAC",
            ),
        ] {
            let e = TranslatorConfig::from_toml(&C.replace("ports = [1337]", to)).unwrap_err();
            assert!(e.contains(want), "{to}: {e}");
        }
        let twice = format!("{C}{C}");
        assert!(TranslatorConfig::from_toml(&twice)
            .unwrap_err()
            .contains("used twice"));
        assert!(parse("[postcard]\nredundancy = 0")
            .unwrap_err()
            .contains("postcard.redundancy"));
        // The PSN cap: below 2^23 outstanding, room for a report, an AckReq'd frame in flight.
        for bad in ["0", "63", "4194305", "8388608"] {
            let e = parse(&format!("[reliability]\nmax_outstanding_psns = {bad}")).unwrap_err();
            assert!(
                e.contains("reliability.max_outstanding_psns must be 64..=4194304"),
                "{e}"
            );
        }
        let e = parse("[reliability]\nack_every = 1024\nmax_outstanding_psns = 2000").unwrap_err();
        assert!(e.contains("at least 2 × reliability.ack_every"), "{e}");
        for (ack_every, good) in [(32, 64), (64, 2048), (64, 4194304)] {
            let c = parse(&format!(
                "[reliability]\nack_every = {ack_every}\nmax_outstanding_psns = {good}"
            ))
            .unwrap();
            assert_eq!(c.reliability.max_outstanding_psns, good);
        }
        assert!(parse("[reliability]\nmax_outstanding_psns = -1")
            .unwrap_err()
            .contains("max_outstanding_psns"));
        assert_eq!(
            parse("[postcard]\nredundancy = 2")
                .unwrap()
                .postcard
                .redundancy,
            Some(2)
        );
    }
}
