//! `[[collector]]` (where to write) and `[routing]` (which store each primitive goes to).
//! Parsing and defaults only: the cross-field checks are in `validate.rs`.

use std::net::SocketAddrV4;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use dta_proto::cluster::CollectorEndpoint;

/// `[[collector]]`: either `metadata` (static set-up) or `cm` + `ports` (RDMA_CM), the keys of
/// [`CollectorEndpoint`] (shared with the cluster file's `[[collector]]`), and how long to wait
/// for its connections.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CollectorSection {
    /// Its name and how to reach it (`name`, `metadata`, `cm`, `ports`, `mac`).
    #[serde(flatten)]
    pub endpoint: CollectorEndpoint,
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
        CollectorEndpoint::with_metadata(name, metadata).into()
    }

    /// A collector connected over RDMA_CM.
    pub fn with_cm(name: &str, roce: SocketAddrV4, ports: Vec<u16>) -> CollectorSection {
        CollectorEndpoint::with_cm(name, roce, ports).into()
    }
}

impl From<CollectorEndpoint> for CollectorSection {
    /// The collector at `endpoint`, with the default connection timeout.
    fn from(endpoint: CollectorEndpoint) -> CollectorSection {
        CollectorSection {
            endpoint,
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
