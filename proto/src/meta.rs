//! Store descriptors: what a translator must know about a collector's memory to write into it.
//!
//! The collector publishes one [`StoreMeta`] per store (statically as JSON, or over RDMA_CM as a
//! binary record), and the translator, the Tofino control plane and the query tools build their
//! layouts and hashers from it. It carries the RDMA coordinates (address, length, R_Key, QPs)
//! and every layout parameter, so nothing has to be configured twice.

use serde::{Deserialize, Serialize};

use crate::hash::HashProfile;
use crate::layout::AppendFormat;

/// The primitive a store serves, with its layout parameters.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum StoreKind {
    /// Key-Write: `slots` slots of `slot_size` bytes (4-byte checksum + value).
    KeyWrite {
        /// Number of slots (a power of two).
        slots: u32,
        /// Bytes per slot: 8, 16, 32 or 64.
        slot_size: u32,
        /// Hash profile of the slot and checksum functions.
        hash: HashProfile,
    },
    /// Key-Increment: `slots` little-endian u64 counters.
    KeyIncrement {
        /// Number of counters (a power of two).
        slots: u32,
        /// Hash profile of the slot functions.
        hash: HashProfile,
    },
    /// Append: `lists` rings, list `i` at `i * list_stride`.
    Append {
        /// Number of lists in this store.
        lists: u32,
        /// Global ID of the store's first list (list IDs `first_list..first_list + lists`).
        first_list: u32,
        /// Ring capacity per list, in entries (a multiple of `batch`).
        capacity: u32,
        /// Bytes per entry.
        entry_size: u32,
        /// Entries per RDMA WRITE.
        batch: u32,
        /// Ring framing.
        format: AppendFormat,
        /// Bytes between the starts of consecutive lists.
        list_stride: u64,
    },
    /// Postcarding: `chunks` chunks of `hops` 4-byte hop words (padded to a power of two).
    Postcard {
        /// Number of chunks (a power of two).
        chunks: u32,
        /// Hop bound B.
        hops: u8,
        /// Hash profile of the chunk and hop functions.
        hash: HashProfile,
    },
}

impl StoreKind {
    /// Short name of the primitive.
    pub fn name(&self) -> &'static str {
        match self {
            StoreKind::KeyWrite { .. } => "keywrite",
            StoreKind::KeyIncrement { .. } => "keyincrement",
            StoreKind::Append { .. } => "append",
            StoreKind::Postcard { .. } => "postcard",
        }
    }
}

/// One queue pair the collector prepared for a translator worker.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct QpMeta {
    /// The collector's QPN (destination QP of the translator's requests).
    pub qpn: u32,
    /// The first PSN the collector expects.
    pub psn: u32,
    /// The translator-side QPN the collector answers to.
    pub peer_qpn: u32,
}

/// Everything a writer needs about one store.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoreMeta {
    /// Operator-chosen store name.
    pub name: String,
    /// Virtual address of the region's first byte.
    pub addr: u64,
    /// Region length in bytes.
    pub len: u64,
    /// R_Key of the region.
    pub rkey: u32,
    /// Queue pairs prepared for this store, one per translator worker (static set-up).
    #[serde(default)]
    pub qps: Vec<QpMeta>,
    /// Primitive and layout.
    #[serde(flatten)]
    pub kind: StoreKind,
}

/// A collector's published description: where to send RoCEv2 and which stores exist.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CollectorMeta {
    /// RoCEv2 address of the collector's RNIC (`ip:port`; the port is 4791 on real NICs).
    pub roce: std::net::SocketAddrV4,
    /// MAC of the collector's RNIC (for raw-frame backends).
    pub mac: String,
    /// Whether the collector checks the ICRC.
    pub verify_icrc: bool,
    /// Stores.
    pub stores: Vec<StoreMeta>,
}
