//! `[[store]]`: a store's name, RDMA_CM port and allowlist, and its primitive's settings, read
//! one store at a time so that every error names the store and the key. Parsing and defaults
//! only: the rules across keys and stores are in `validate.rs`.

use serde::{Deserialize, Serialize};

use dta_proto::hash::HashProfile;
use dta_proto::layout::{AppendFormat, AppendLayout};
use dta_proto::meta::StoreKind;
use dta_proto::sketch::{record_stride, SketchHash, SketchKind, SketchShape, MAX_BATCH_BYTES};

use super::{DEFAULT_KV_REDUNDANCY, FIRST_STORE_PORT, MAX_STORE_NAME};
use crate::allow::Cidr;
use crate::store::LIST_ALIGN;

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
    /// Primitive and layout, and the collector's settings for it.
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

    /// The redundancy N the store is written with (`None` for Append and Sketch).
    pub fn redundancy(&self) -> Option<u8> {
        self.kind.redundancy()
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
        let kind = FileKind::deserialize(toml::Value::Table(tagged))
            .map_err(|e| format!("{at}: {}", keyed(e)))?
            .into();
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
        if let Ok(toml::Value::Table(tagged)) = toml::Value::try_from(FileKind::from(&s.kind)) {
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

/// A store's primitive as the collector serves it: its layout, [`StoreKind`] (the one
/// definition every party shares and the metadata record carries), and the collector's own
/// settings for it.
///
/// A file's defaults are filled in when it is read: sketch rows, cell width and batch from the
/// sketch kind and columns ([`sketch_kind`]), and an Append store's `list_stride` (the
/// collector's, never a file's: one ring rounded up to [`LIST_ALIGN`] bytes).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreKindConfig {
    layout: StoreKind,
    redundancy: Option<u8>,
    epoch_secs: u64,
    values: Vec<[u32; 2]>,
}

impl StoreKindConfig {
    /// A store of `layout` with the file's defaults: N = 2 for Key-Write and Key-Increment, 1
    /// for Postcarding; no counter epochs; an empty value set. An Append layout's
    /// `list_stride` is replaced by the collector's.
    pub fn new(layout: StoreKind) -> StoreKindConfig {
        let redundancy = match layout {
            StoreKind::KeyWrite { .. } | StoreKind::KeyIncrement { .. } => {
                Some(DEFAULT_KV_REDUNDANCY)
            }
            StoreKind::Postcard { .. } => Some(default_postcard_n()),
            StoreKind::Append { .. } | StoreKind::Sketch { .. } => None,
        };
        let layout = match layout {
            StoreKind::Append {
                lists,
                first_list,
                capacity,
                entry_size,
                batch,
                format,
                ..
            } => StoreKind::Append {
                lists,
                first_list,
                capacity,
                entry_size,
                batch,
                format,
                list_stride: list_stride(format, capacity, entry_size, batch),
            },
            other => other,
        };
        StoreKindConfig {
            layout,
            redundancy,
            epoch_secs: 0,
            values: Vec::new(),
        }
    }

    /// With redundancy N (`redundancy`: slots, counters or copies per key); ignored by Append
    /// and Sketch stores.
    pub fn with_redundancy(mut self, n: u8) -> StoreKindConfig {
        if self.layout.has_redundancy() {
            self.redundancy = Some(n);
        }
        self
    }

    /// A Key-Increment store that zeroes its counters every `secs` seconds (`epoch_secs`; 0:
    /// only on demand).
    pub fn with_epoch_secs(mut self, secs: u64) -> StoreKindConfig {
        self.epoch_secs = secs;
        self
    }

    /// A Postcarding store's value set V (`values`), as inclusive ranges.
    pub fn with_values(mut self, values: Vec<[u32; 2]>) -> StoreKindConfig {
        self.values = values;
        self
    }

    /// The primitive and its layout.
    pub fn layout(&self) -> &StoreKind {
        &self.layout
    }

    /// N (Key-Write, Key-Increment, Postcarding); `None` for Append and Sketch.
    pub fn redundancy(&self) -> Option<u8> {
        self.redundancy
    }

    /// Key-Increment: zero the counters every this many seconds (0 = only on demand).
    pub fn epoch_secs(&self) -> u64 {
        self.epoch_secs
    }

    /// Postcarding: the value set V as inclusive ranges (empty for the other kinds).
    pub fn values(&self) -> &[[u32; 2]] {
        &self.values
    }
}

impl From<StoreKind> for StoreKindConfig {
    fn from(layout: StoreKind) -> StoreKindConfig {
        StoreKindConfig::new(layout)
    }
}

/// An Append store's list stride: one ring of the layout rounded up to [`LIST_ALIGN`] (0 if
/// the parameters describe no ring; validation names what is wrong).
fn list_stride(format: AppendFormat, capacity: u32, entry_size: u32, batch: u32) -> u64 {
    AppendLayout::new(format, capacity, entry_size, batch)
        .map_or(0, |l| l.region_len().div_ceil(LIST_ALIGN) * LIST_ALIGN)
}

/// The Sketch-Merge layout a `[[store]] kind = "sketch"` describes, its defaults filled in:
/// rows 4 (HyperLogLog: 1), cell width 4 (HyperLogLog: 1), and the largest power-of-two batch
/// of columns that fits 1,024 bytes (0 if the shape is invalid; validation says why).
#[allow(clippy::too_many_arguments)]
pub fn sketch_kind(
    sketch_id: u16,
    sketch: SketchKind,
    rows: Option<u8>,
    columns: u32,
    cell_width: Option<u8>,
    batch: Option<u32>,
    epochs: u32,
    hash: SketchHash,
) -> StoreKind {
    let hll = sketch == SketchKind::HyperLogLog;
    let rows = rows.unwrap_or(if hll { 1 } else { 4 });
    let cell_width = cell_width.unwrap_or(if hll { 1 } else { 4 });
    let batch =
        batch.unwrap_or_else(
            || match SketchShape::new(sketch, rows, columns, cell_width) {
                Ok(shape) => {
                    let fits = MAX_BATCH_BYTES / record_stride(shape);
                    (1u32 << (31 - fits.max(1).leading_zeros())).min(columns)
                }
                Err(_) => 0,
            },
        );
    StoreKind::Sketch {
        sketch_id,
        sketch,
        rows,
        columns,
        cell_width,
        batch,
        epochs,
        hash,
    }
}

impl From<FileKind> for StoreKindConfig {
    fn from(k: FileKind) -> StoreKindConfig {
        match k {
            FileKind::KeyWrite {
                slots,
                slot_size,
                hash,
                redundancy,
            } => StoreKindConfig::new(StoreKind::KeyWrite {
                slots,
                slot_size,
                hash,
            })
            .with_redundancy(redundancy),
            FileKind::KeyIncrement {
                slots,
                hash,
                epoch_secs,
                redundancy,
            } => StoreKindConfig::new(StoreKind::KeyIncrement { slots, hash })
                .with_redundancy(redundancy)
                .with_epoch_secs(epoch_secs),
            FileKind::Append {
                lists,
                first_list,
                capacity,
                entry_size,
                batch,
                format,
            } => StoreKindConfig::new(StoreKind::Append {
                lists,
                first_list,
                capacity,
                entry_size,
                batch,
                format,
                list_stride: 0,
            }),
            FileKind::Postcard {
                chunks,
                hops,
                hash,
                redundancy,
                values,
            } => StoreKindConfig::new(StoreKind::Postcard { chunks, hops, hash })
                .with_redundancy(redundancy)
                .with_values(values),
            FileKind::Sketch {
                sketch_id,
                sketch,
                rows,
                columns,
                cell_width,
                batch,
                epochs,
                hash,
            } => StoreKindConfig::new(sketch_kind(
                sketch_id, sketch, rows, columns, cell_width, batch, epochs, hash,
            )),
        }
    }
}

impl From<&StoreKindConfig> for FileKind {
    fn from(k: &StoreKindConfig) -> FileKind {
        let n = k.redundancy.unwrap_or(DEFAULT_KV_REDUNDANCY);
        match k.layout {
            StoreKind::KeyWrite {
                slots,
                slot_size,
                hash,
            } => FileKind::KeyWrite {
                slots,
                slot_size,
                hash,
                redundancy: n,
            },
            StoreKind::KeyIncrement { slots, hash } => FileKind::KeyIncrement {
                slots,
                hash,
                epoch_secs: k.epoch_secs,
                redundancy: n,
            },
            StoreKind::Append {
                lists,
                first_list,
                capacity,
                entry_size,
                batch,
                format,
                ..
            } => FileKind::Append {
                lists,
                first_list,
                capacity,
                entry_size,
                batch,
                format,
            },
            StoreKind::Postcard { chunks, hops, hash } => FileKind::Postcard {
                chunks,
                hops,
                hash,
                redundancy: k.redundancy.unwrap_or(default_postcard_n()),
                values: k.values.clone(),
            },
            StoreKind::Sketch {
                sketch_id,
                sketch,
                rows,
                columns,
                cell_width,
                batch,
                epochs,
                hash,
            } => FileKind::Sketch {
                sketch_id,
                sketch,
                rows: Some(rows),
                columns,
                cell_width: Some(cell_width),
                batch: Some(batch),
                epochs,
                hash,
            },
        }
    }
}

/// A `[[store]]`'s `kind` and the kind's keys as the file spells them, with their defaults: read
/// into a [`StoreKindConfig`] (and written back from one), never used past the file.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "lowercase", deny_unknown_fields)]
enum FileKind {
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
