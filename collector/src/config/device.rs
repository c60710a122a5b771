//! `[collector]` (the device and its services), `[rnic]` (the software RNIC's packet I/O) and
//! `[[static_peer]]` (translators set up without RDMA_CM). Parsing and defaults only: the
//! rules across keys are in `validate.rs`.

use std::net::SocketAddrV4;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::allow::Cidr;

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
