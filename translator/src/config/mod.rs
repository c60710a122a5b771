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
//!
//! The file's sections each have a room here: `[translator]` and the backend sections in
//! `section.rs`, `[int]` in `int.rs`, the datapath tunables (`[reports]`, `[append]`,
//! `[postcard]`, `[sketch]`, `[reliability]`, `[overload]`) in `datapath.rs`, `[[collector]]`
//! and `[routing]` in `collector.rs`, and the cross-field rules in `validate.rs`. This module
//! holds the whole file ([`TranslatorConfig`]) and how it is loaded; none of these rooms opens
//! a socket or reads anything but the configuration and cluster files.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use dta_proto::cluster::Cluster;

mod collector;
mod datapath;
mod int;
mod section;
mod validate;

pub use collector::{CollectorSection, RoutingSection};
pub use datapath::{
    AppendSection, OverloadSection, PostcardSection, ReliabilitySection, ReportsSection,
    SketchSection, SketchSwitchEntry, MIN_OUTSTANDING_PSNS,
};
pub use int::{
    CountWhat, HopField, InitialTtl, IntCounterRule, IntListRule, IntPathRule, IntPostcardRule,
    IntSection,
};
pub use section::{
    AfXdpSection, BackendKind, DpdkSection, PcapSection, ReportSteering, RoceSteering, Section,
    XdpAttach, AUTO_DISPATCH_MAX_WORKERS,
};

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
            .map(|c| CollectorSection::from(c.endpoint.clone()))
            .collect();
        self.cluster = Some(path);
        self.cluster_map = Some(Arc::new(cluster));
        self.validate()?;
        Ok(self)
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
mod tests;
