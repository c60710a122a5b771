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
//! [routing]
//! keywrite = "key-hash"
//! ```

use std::net::SocketAddrV4;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use dta_proto::wire::dta::BaseVariant;
use dta_proto::wire::report::Priority;

/// The whole file.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TranslatorConfig {
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
    /// Pin worker i to core i.
    pub pin_cores: bool,
    /// Highest Key-Write / Key-Increment redundancy accepted (1..=8).
    pub max_redundancy: u8,
    /// UDP port reporters receive NACKs on.
    pub nack_port: u16,
    /// HTTP endpoint serving /metrics and /stats (none if absent).
    pub metrics: Option<SocketAddrV4>,
    /// Reporters tracked for sequence gaps, per worker.
    pub max_reporters: usize,
    /// Kernel socket buffer size (bytes) for the report and RoCEv2 sockets.
    pub socket_buffer: usize,
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
            max_reporters: 4096,
            socket_buffer: 16 << 20,
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
    /// Copies written per chunk (N).
    pub redundancy: u8,
    /// A flow whose path is incomplete is written after this many microseconds (0 = only
    /// on eviction or shutdown).
    pub flush_delay_us: u64,
}

impl Default for PostcardSection {
    fn default() -> Self {
        PostcardSection {
            cache_slots: 32768,
            redundancy: 1,
            flush_delay_us: 100_000,
        }
    }
}

/// `[reliability]`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ReliabilitySection {
    /// Ask for an ACK every k frames.
    pub ack_every: u32,
    /// The initial retransmission timeout (µs): silent loss is suspected after this long
    /// without the ACK, until round trips have been measured.
    pub ack_timeout_us: u64,
    /// Lower bound of the adaptive (RFC 6298, SRTT + 4·RTTVAR) timeout (µs).
    pub rto_min_us: u64,
    /// Upper bound of the adaptive timeout and of the probe back-off (µs).
    pub rto_max_us: u64,
    /// The QP is declared broken (and reconnected over RDMA_CM) after this many milliseconds
    /// without any ACK or NAK while one was due. Must exceed the longest pause expected from
    /// a busy collector.
    pub broken_after_ms: u64,
}

impl Default for ReliabilitySection {
    fn default() -> Self {
        ReliabilitySection {
            ack_every: 64,
            ack_timeout_us: 20_000,
            rto_min_us: 2_000,
            rto_max_us: 1_000_000,
            broken_after_ms: 5_000,
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

    /// Reads and parses a file.
    pub fn load(path: &std::path::Path) -> Result<TranslatorConfig, String> {
        let s = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
        Self::from_toml(&s).map_err(|e| format!("{}: {e}", path.display()))
    }

    /// Checks cross-field rules.
    pub fn validate(&self) -> Result<(), String> {
        let t = &self.translator;
        if t.workers == 0 || t.workers > 64 {
            return Err("translator.workers must be 1..=64".into());
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
        if !self.postcard.cache_slots.is_power_of_two() {
            return Err("postcard.cache_slots must be a power of two".into());
        }
        if self.postcard.redundancy == 0
            || self.postcard.redundancy as usize > dta_proto::hash::MAX_REDUNDANCY
        {
            return Err("postcard.redundancy must be 1..=8".into());
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
        let o = &self.overload;
        if !(0.0..1.0).contains(&o.low_reserve)
            || !(0.0..1.0).contains(&o.medium_reserve)
            || o.medium_reserve > o.low_reserve
        {
            return Err("overload: 0 <= medium_reserve <= low_reserve < 1".into());
        }
        for c in &self.collectors {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn example_file_parses_and_defaults_match() {
        let c = TranslatorConfig::from_toml(include_str!("../translator.example.toml"))
            .expect("example parses");
        let d = TranslatorConfig::default();
        assert_eq!(c.translator.max_redundancy, d.translator.max_redundancy);
        assert_eq!(c.reliability.ack_timeout_us, d.reliability.ack_timeout_us);
        assert_eq!(c.postcard.cache_slots, d.postcard.cache_slots);
        assert_eq!(c.collectors[0].ports, vec![1337, 1338]);
    }

    #[test]
    fn bad_files_get_clear_errors() {
        assert!(TranslatorConfig::from_toml("[translator]\nworkers = 0")
            .unwrap_err()
            .contains("workers"));
        assert!(TranslatorConfig::from_toml("[translator]\nbogus = 1")
            .unwrap_err()
            .contains("bogus"));
        assert!(TranslatorConfig::from_toml("[[collector]]\nname = \"x\"")
            .unwrap_err()
            .contains("exactly one"));
        assert!(
            TranslatorConfig::from_toml("[translator]\nroce = \"0.0.0.0:4791\"")
                .unwrap_err()
                .contains("ICRC")
        );
    }
}
