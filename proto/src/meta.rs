//! Store descriptors: what a translator must know about a collector's memory to write into it.
//!
//! The collector publishes one [`StoreMeta`] per store (statically as JSON, or over RDMA_CM as a
//! binary record), and the translator, the Tofino control plane and the query tools build their
//! layouts and hashers from it. It carries the RDMA coordinates (address, length, R_Key, QPs)
//! and every layout parameter, so nothing has to be configured twice.
//!
//! A Key-Write, Key-Increment or Postcarding store also records the [`Redundancy`] N its
//! writers use: translators drop Key-Write and Key-Increment reports that ask for another N
//! (counted as `drop_redundancy_mismatch`) and write N postcard copies, and queries read N
//! slots unless told otherwise. A store that records none (metadata from before N was
//! recorded) accepts any N up to the translator's `max_redundancy`.

use serde::{Deserialize, Serialize};

use crate::hash::HashProfile;
use crate::layout::AppendFormat;

/// The primitive a store serves, with its layout parameters: the one definition of a store
/// kind.
///
/// The collector's `[[store]]` configuration reads into it (`dta_collector::config::
/// StoreKindConfig` adds only the collector's own settings: N, counter epochs, a value set),
/// the metadata record ([`crate::wire::metarec`]) writes and reads it, the published JSON
/// carries it (tagged by `kind`), and [`crate::geometry::StoreGeometry`] derives the validated
/// layouts and hashers from it.
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
    /// Sketch-Merge: one merged sketch, `epochs` epoch slots of `columns` column records
    /// (layout: [`crate::sketch::SketchLayout`]).
    Sketch {
        /// The sketch ID reports name (selects this store).
        sketch_id: u16,
        /// Count-Min, Count sketch or HyperLogLog.
        sketch: crate::sketch::SketchKind,
        /// Rows (1 for HyperLogLog).
        rows: u8,
        /// Columns (a power of two; HyperLogLog: registers).
        columns: u32,
        /// Bytes per cell (4 for the counter sketches, 1 for HyperLogLog).
        cell_width: u8,
        /// Columns per RDMA WRITE.
        batch: u32,
        /// Epoch slots kept (epoch e in slot e % epochs).
        epochs: u32,
        /// The hash functions switches and queries use (default: independent).
        #[serde(default)]
        hash: crate::sketch::SketchHash,
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
            StoreKind::Sketch { .. } => "sketch",
        }
    }
}

/// A store's redundancy N: how many slots (Key-Write), counters (Key-Increment) or chunks
/// (Postcarding) each key is written to, `1..=`[`MAX_REDUNDANCY`](crate::hash::MAX_REDUNDANCY).
///
/// In JSON and TOML it is a plain number; out-of-range numbers do not deserialise.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "u8", into = "u8")]
pub struct Redundancy(u8);

impl Redundancy {
    /// N, if it is in `1..=MAX_REDUNDANCY`.
    pub const fn new(n: u8) -> Option<Redundancy> {
        if n >= 1 && n as usize <= crate::hash::MAX_REDUNDANCY {
            Some(Redundancy(n))
        } else {
            None
        }
    }

    /// N as a number.
    #[inline]
    pub const fn get(self) -> u8 {
        self.0
    }
}

impl TryFrom<u8> for Redundancy {
    type Error = String;

    fn try_from(n: u8) -> Result<Redundancy, String> {
        Redundancy::new(n).ok_or_else(|| {
            format!(
                "redundancy {n} is out of range (1..={})",
                crate::hash::MAX_REDUNDANCY
            )
        })
    }
}

impl From<Redundancy> for u8 {
    fn from(n: Redundancy) -> u8 {
        n.0
    }
}

impl core::fmt::Display for Redundancy {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "{}", self.0)
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
    /// The N the store is written with (Key-Write, Key-Increment, Postcarding); `None` for
    /// Append stores and for metadata that records none (any N up to the translator's
    /// `max_redundancy` is then accepted).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub redundancy: Option<Redundancy>,
    /// Primitive and layout.
    #[serde(flatten)]
    pub kind: StoreKind,
}

impl StoreKind {
    /// Whether stores of this kind have a redundancy N (all but Append and Sketch).
    pub fn has_redundancy(&self) -> bool {
        !matches!(self, StoreKind::Append { .. } | StoreKind::Sketch { .. })
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redundancy_range_and_json() {
        assert_eq!(Redundancy::new(0), None);
        assert_eq!(Redundancy::new(9), None);
        assert_eq!(Redundancy::new(8).map(Redundancy::get), Some(8));
        let m = StoreMeta {
            name: "kw".into(),
            addr: 0,
            len: 64,
            rkey: 1,
            qps: Vec::new(),
            redundancy: Redundancy::new(2),
            kind: StoreKind::KeyWrite {
                slots: 8,
                slot_size: 8,
                hash: crate::hash::HashProfile::Independent,
            },
        };
        let js = serde_json::to_string(&m).unwrap();
        assert!(js.contains("\"redundancy\":2"), "{js}");
        assert_eq!(serde_json::from_str::<StoreMeta>(&js).unwrap(), m);
        // Metadata written before N was recorded still parses, with no N.
        let old = js.replace(",\"redundancy\":2", "");
        let back: StoreMeta = serde_json::from_str(&old).unwrap();
        assert_eq!(back.redundancy, None);
        let bad = js.replace("\"redundancy\":2", "\"redundancy\":9");
        let e = serde_json::from_str::<StoreMeta>(&bad)
            .unwrap_err()
            .to_string();
        assert!(e.contains("out of range"), "{e}");
    }
}
