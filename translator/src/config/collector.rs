//! `[[collector]]` (where to write) and `[routing]` (which store each primitive goes to).
//! Parsing and defaults only: the cross-field checks are in `validate.rs`.

use std::net::SocketAddrV4;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

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

pub(super) fn default_connect_timeout() -> u64 {
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
