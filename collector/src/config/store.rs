//! `[[store]]`: a store's name, RDMA_CM port and allowlist, and its primitive's settings, read
//! one store at a time so that every error names the store and the key. Parsing and defaults
//! only: the rules across keys and stores are in `validate.rs`.

use serde::{Deserialize, Serialize};

use dta_proto::hash::HashProfile;
use dta_proto::layout::AppendFormat;

use super::{DEFAULT_KV_REDUNDANCY, FIRST_STORE_PORT, MAX_STORE_NAME};
use crate::allow::Cidr;

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

/// Checks a store name: 1..=64 of `A-Z a-z 0-9 _ . -`.
pub(super) fn check_store_name(name: &str) -> Result<(), String> {
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
