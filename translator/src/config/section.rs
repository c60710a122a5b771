//! `[translator]` (sockets, workers, limits, steering) and the packet I/O backend sections
//! (`[pcap]` here, `[af_xdp]` and `[dpdk]` from dta-io). Parsing and defaults only: the
//! cross-field checks are in `validate.rs`.

use std::net::SocketAddrV4;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

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
    /// Reporters tracked for sequence gaps, per worker (at most 1,048,576; each worker
    /// allocates its table, 32 bytes a reporter, at start).
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
