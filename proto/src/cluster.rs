//! The collector cluster: which collector holds which key, list and sketch, epoch by epoch.
//!
//! DTA scales collection by adding collectors. Translators, query clients and the P4 control
//! plane must agree on where each piece of telemetry lives, so they all read one cluster file
//! (TOML, see `examples/cluster/cluster.toml`) through [`Cluster::from_toml`] and decide with
//! the functions here:
//!
//! - Key-Write, Key-Increment and Postcarding keys: [`key_slot`] (CRC-32 of the key modulo the
//!   slot table's length) picks a slot of the epoch's key table, which names the owner. A table
//!   of one slot per collector is exactly the translator's `[routing] key-hash` rule; longer
//!   tables let a new collector take over a few slots, so resharding moves only their keys.
//! - Append lists: list ID ranges, each owned by one collector (ranges never overlap).
//! - Sketches: each sketch ID is owned by one collector's sketch store.
//!
//! Each [`Partition`] is numbered (an epoch) and may carry a start time: writers use the newest
//! partition that has started ([`Cluster::active_at`]), and readers consult older partitions
//! for data written before the boundary. The cluster's `epoch` is the newest partition's number.
//!
//! Parsing is pure (no file system): callers read the file and resolve relative paths with
//! [`Cluster::resolve_paths`]. Every rule a file can break is checked once, here, with an
//! error that names the collector, epoch or range at fault.

use std::net::SocketAddrV4;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::crc::IEEE;

/// Most slots in an epoch's key table.
pub const MAX_KEY_SLOTS: usize = 1 << 16;

/// The slot of `key` in a table of `slots` slots: CRC-32 (IEEE) of the key bytes modulo
/// `slots`. The one function every party uses to place a key.
///
/// # Panics
/// If `slots` is 0 (a validated partition never has an empty table).
#[inline]
pub fn key_slot(key: &[u8], slots: usize) -> usize {
    IEEE.checksum(key) as usize % slots
}

/// The store names every collector of the cluster uses for each kind (`[stores]`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StoreNames {
    /// Key-Write store.
    pub keywrite: Option<String>,
    /// Key-Increment store.
    pub keyincrement: Option<String>,
    /// Append store.
    pub append: Option<String>,
    /// Postcarding store.
    pub postcard: Option<String>,
}

/// How a writer reaches one collector: its name and either its published metadata (static
/// set-up) or its RoCEv2 address and stores' rdma_cm ports (RDMA_CM).
///
/// The one definition of these keys: a cluster file's `[[collector]]` ([`ClusterCollector`])
/// and a translator's own `[[collector]]` (`dta_translator::config::CollectorSection`) each
/// flatten it into their table and add their own keys. Which combinations are valid is
/// checked by the file that holds it (each names the collector at fault).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CollectorEndpoint {
    /// Its name in logs, metrics and partitions.
    pub name: String,
    /// Static set-up: the metadata JSON it publishes (`[collector] metadata_file`).
    #[serde(default)]
    pub metadata: Option<PathBuf>,
    /// RDMA_CM set-up: its RoCEv2 address (port 4791 on real NICs).
    #[serde(default)]
    pub cm: Option<SocketAddrV4>,
    /// RDMA_CM set-up: its stores' rdma_cm ports (one per store to write to).
    #[serde(default)]
    pub ports: Vec<u16>,
    /// Its RNIC's MAC (raw-frame translator backends).
    #[serde(default)]
    pub mac: Option<String>,
}

impl CollectorEndpoint {
    /// A statically set-up collector described by its published metadata file.
    pub fn with_metadata(name: &str, metadata: PathBuf) -> CollectorEndpoint {
        CollectorEndpoint {
            name: name.into(),
            metadata: Some(metadata),
            cm: None,
            ports: Vec::new(),
            mac: None,
        }
    }

    /// A collector connected over RDMA_CM.
    pub fn with_cm(name: &str, roce: SocketAddrV4, ports: Vec<u16>) -> CollectorEndpoint {
        CollectorEndpoint {
            name: name.into(),
            metadata: None,
            cm: Some(roce),
            ports,
            mac: None,
        }
    }
}

/// One collector of the cluster (`[[collector]]`): where it is, and its control API.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClusterCollector {
    /// Its name and how writers reach it.
    #[serde(flatten)]
    pub endpoint: CollectorEndpoint,
    /// Its control API (`ip:port`), which query clients ask.
    #[serde(default)]
    pub control: Option<String>,
}

/// A range of Append list IDs owned by one collector.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ListRange {
    /// First list ID.
    pub first: u32,
    /// One past the last list ID.
    pub end: u64,
    /// Owner (index into [`Cluster::collectors`]).
    pub collector: usize,
}

/// A sketch ID owned by one collector's sketch store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SketchOwner {
    /// The sketch ID switches put in their reports.
    pub id: u16,
    /// Owner (index into [`Cluster::collectors`]).
    pub collector: usize,
    /// The owner's store serving it.
    pub store: String,
}

/// One epoch's partitioning.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Partition {
    /// Epoch number (strictly increasing through the file).
    pub number: u32,
    /// Unix time (seconds) at which writers switch to it; none: as soon as they read it.
    pub start: Option<u64>,
    /// Key slot table: slot → collector index (empty when the cluster has no keyed store).
    pub keys: Vec<usize>,
    /// Append list ranges, sorted by first list, never overlapping.
    pub lists: Vec<ListRange>,
    /// Sketch owners, sorted by ID.
    pub sketches: Vec<SketchOwner>,
}

impl Partition {
    /// The collector holding `key` (Key-Write, Key-Increment, Postcarding), if keys are
    /// partitioned in this epoch.
    #[inline]
    pub fn key_owner(&self, key: &[u8]) -> Option<usize> {
        if self.keys.is_empty() {
            return None;
        }
        Some(self.keys[key_slot(key, self.keys.len())])
    }

    /// The collector holding Append list `list`.
    pub fn list_owner(&self, list: u32) -> Option<usize> {
        let i = self.lists.partition_point(|r| r.first <= list);
        let r = self.lists.get(i.checked_sub(1)?)?;
        (u64::from(list) < r.end).then_some(r.collector)
    }

    /// Who holds sketch `id`.
    pub fn sketch_owner(&self, id: u16) -> Option<&SketchOwner> {
        self.sketches
            .binary_search_by_key(&id, |s| s.id)
            .ok()
            .map(|i| &self.sketches[i])
    }

    /// Sketch owner by store name.
    pub fn sketch_by_store(&self, store: &str) -> Option<&SketchOwner> {
        self.sketches.iter().find(|s| s.store == store)
    }

    /// Collectors that own anything in this epoch, in collector order.
    pub fn members(&self, collectors: usize) -> Vec<usize> {
        let mut m = vec![false; collectors];
        for &c in &self.keys {
            m[c] = true;
        }
        for r in &self.lists {
            m[r.collector] = true;
        }
        for s in &self.sketches {
            m[s.collector] = true;
        }
        (0..collectors).filter(|&c| m[c]).collect()
    }
}

/// A validated cluster description.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cluster {
    /// A name for logs.
    pub name: String,
    /// The newest epoch described (the last partition's number).
    pub epoch: u32,
    /// Store names per kind, shared by every collector.
    pub stores: StoreNames,
    /// The collectors, in file order (partitions refer to them by index).
    pub collectors: Vec<ClusterCollector>,
    /// Partitions, oldest first.
    pub epochs: Vec<Partition>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFile {
    cluster: RawHead,
    #[serde(default)]
    stores: StoreNames,
    #[serde(default, rename = "collector")]
    collectors: Vec<ClusterCollector>,
    #[serde(default, rename = "epoch")]
    epochs: Vec<RawEpoch>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawHead {
    #[serde(default)]
    name: String,
    epoch: u32,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawEpoch {
    number: u32,
    #[serde(default)]
    start: Option<u64>,
    #[serde(default)]
    keys: Vec<String>,
    #[serde(default)]
    lists: Vec<RawLists>,
    #[serde(default)]
    sketches: Vec<RawSketch>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawLists {
    collector: String,
    first: u32,
    count: u32,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSketch {
    id: u16,
    collector: String,
    store: String,
}

impl Cluster {
    /// Parses and validates a cluster file.
    pub fn from_toml(s: &str) -> Result<Cluster, String> {
        let raw: RawFile = toml::from_str(s).map_err(|e| e.to_string())?;
        Cluster::validate(raw)
    }

    fn validate(raw: RawFile) -> Result<Cluster, String> {
        if raw.collectors.is_empty() {
            return Err("no [[collector]]: a cluster needs at least one collector".into());
        }
        for (i, c) in raw.collectors.iter().enumerate() {
            if c.endpoint.name.is_empty() {
                return Err(format!("collector #{}: name: must not be empty", i + 1));
            }
            if raw.collectors[..i]
                .iter()
                .any(|o| o.endpoint.name == c.endpoint.name)
            {
                return Err(format!(
                    "collector {:?}: name: used twice (names must be unique)",
                    c.endpoint.name
                ));
            }
            match (&c.endpoint.metadata, &c.endpoint.cm) {
                (Some(_), None) if c.endpoint.ports.is_empty() => {}
                (None, Some(_)) if !c.endpoint.ports.is_empty() => {}
                (None, Some(_)) => {
                    return Err(format!(
                        "collector {:?}: `cm` needs `ports` (the stores' rdma_cm ports)",
                        c.endpoint.name
                    ))
                }
                _ => {
                    return Err(format!(
                        "collector {:?}: give exactly one of `metadata` (static set-up) or \
                         `cm` with `ports` (RDMA_CM)",
                        c.endpoint.name
                    ))
                }
            }
            if let Some(a) = &c.control {
                if !a.contains(':') {
                    return Err(format!(
                        "collector {:?}: control: {a:?} is not ip:port",
                        c.endpoint.name
                    ));
                }
            }
        }
        if raw.epochs.is_empty() {
            return Err("no [[epoch]]: describe at least one epoch's partitioning".into());
        }
        let names = &raw.collectors;
        let index = |what: &str, n: &str| -> Result<usize, String> {
            names
                .iter()
                .position(|c| c.endpoint.name == n)
                .ok_or_else(|| {
                    let known: Vec<&str> = names.iter().map(|c| c.endpoint.name.as_str()).collect();
                    format!("{what}: unknown collector {n:?} (the [[collector]]s are {known:?})")
                })
        };
        let keyed = raw.stores.keywrite.is_some()
            || raw.stores.keyincrement.is_some()
            || raw.stores.postcard.is_some();
        let mut epochs: Vec<Partition> = Vec::with_capacity(raw.epochs.len());
        for e in raw.epochs {
            let at = format!("epoch {}", e.number);
            if let Some(p) = epochs.last() {
                if e.number <= p.number {
                    return Err(format!(
                        "{at}: epochs must be listed in increasing order (it follows epoch {})",
                        p.number
                    ));
                }
                if let (Some(a), Some(b)) = (p.start, e.start) {
                    if b < a {
                        return Err(format!(
                            "{at}: start {b} is before epoch {}'s start {a}",
                            p.number
                        ));
                    }
                }
            }
            if keyed && e.keys.is_empty() {
                return Err(format!(
                    "{at}: keys: empty, but [stores] names a keyed store (Key-Write, \
                     Key-Increment or Postcarding): list the owner of each key slot"
                ));
            }
            if !keyed && !e.keys.is_empty() {
                return Err(format!(
                    "{at}: keys: given, but [stores] names no keyed store (keywrite, \
                     keyincrement or postcard)"
                ));
            }
            if e.keys.len() > MAX_KEY_SLOTS {
                return Err(format!(
                    "{at}: keys: {} slots, at most {MAX_KEY_SLOTS}",
                    e.keys.len()
                ));
            }
            let keys = e
                .keys
                .iter()
                .enumerate()
                .map(|(i, n)| index(&format!("{at}: keys[{i}]"), n))
                .collect::<Result<Vec<_>, _>>()?;
            if raw.stores.append.is_none() && !e.lists.is_empty() {
                return Err(format!(
                    "{at}: lists: given, but [stores] names no append store"
                ));
            }
            let mut lists = Vec::with_capacity(e.lists.len());
            for l in &e.lists {
                let c = index(&format!("{at}: lists"), &l.collector)?;
                if l.count == 0 {
                    return Err(format!(
                        "{at}: lists of {:?} from {}: count is 0 (an empty range)",
                        l.collector, l.first
                    ));
                }
                lists.push(ListRange {
                    first: l.first,
                    end: u64::from(l.first) + u64::from(l.count),
                    collector: c,
                });
            }
            lists.sort_by_key(|r| r.first);
            for w in lists.windows(2) {
                if u64::from(w[1].first) < w[0].end {
                    return Err(format!(
                        "{at}: lists {}..{} ({}) and {}..{} ({}) overlap: each list has one owner",
                        w[0].first,
                        w[0].end,
                        names[w[0].collector].endpoint.name,
                        w[1].first,
                        w[1].end,
                        names[w[1].collector].endpoint.name
                    ));
                }
            }
            let mut sketches = Vec::with_capacity(e.sketches.len());
            for s in &e.sketches {
                let c = index(&format!("{at}: sketch {}", s.id), &s.collector)?;
                if s.store.is_empty() {
                    return Err(format!("{at}: sketch {}: store: must not be empty", s.id));
                }
                sketches.push(SketchOwner {
                    id: s.id,
                    collector: c,
                    store: s.store.clone(),
                });
            }
            sketches.sort_by_key(|s| s.id);
            for w in sketches.windows(2) {
                if w[0].id == w[1].id {
                    return Err(format!(
                        "{at}: sketch {} is listed twice (each sketch has one owner)",
                        w[0].id
                    ));
                }
            }
            if keys.is_empty() && lists.is_empty() && sketches.is_empty() {
                return Err(format!(
                    "{at}: empty partition: no keys, lists or sketches are assigned"
                ));
            }
            epochs.push(Partition {
                number: e.number,
                start: e.start,
                keys,
                lists,
                sketches,
            });
        }
        let newest = epochs.last().map_or(0, |p| p.number);
        if raw.cluster.epoch != newest {
            return Err(format!(
                "cluster.epoch = {} but the newest [[epoch]] is {newest}: they must agree",
                raw.cluster.epoch
            ));
        }
        Ok(Cluster {
            name: raw.cluster.name,
            epoch: newest,
            stores: raw.stores,
            collectors: raw.collectors,
            epochs,
        })
    }

    /// Makes relative `metadata` paths relative to `base` (the cluster file's folder).
    pub fn resolve_paths(&mut self, base: &Path) {
        for c in &mut self.collectors {
            if let Some(m) = &c.endpoint.metadata {
                if m.is_relative() {
                    c.endpoint.metadata = Some(base.join(m));
                }
            }
        }
    }

    /// The partition of epoch `number`.
    pub fn epoch(&self, number: u32) -> Option<&Partition> {
        self.epochs.iter().find(|p| p.number == number)
    }

    /// The newest partition.
    pub fn newest(&self) -> &Partition {
        self.epochs
            .last()
            .expect("a validated cluster has an epoch")
    }

    /// The partition writers use at Unix time `now` (seconds): the newest that has started
    /// (the oldest if none has).
    pub fn active_at(&self, now: u64) -> &Partition {
        self.epochs
            .iter()
            .rev()
            .find(|p| p.start.is_none_or(|s| s <= now))
            .unwrap_or(&self.epochs[0])
    }

    /// The partitions a reader consults for data of epoch `number` and before, newest first.
    pub fn history(&self, upto: u32) -> impl Iterator<Item = &Partition> {
        self.epochs.iter().rev().filter(move |p| p.number <= upto)
    }

    /// The index of the collector called `name`.
    pub fn collector_index(&self, name: &str) -> Option<usize> {
        self.collectors.iter().position(|c| c.endpoint.name == name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BASE: &str = r#"
[cluster]
name = "t"
epoch = 2

[stores]
keywrite = "kw"
keyincrement = "ki"
append = "ap"

[[collector]]
name = "c1"
control = "127.0.0.1:1"
metadata = "c1.json"

[[collector]]
name = "c2"
control = "127.0.0.1:2"
cm = "127.0.0.1:4791"
ports = [1337]

[[collector]]
name = "c3"
metadata = "/abs/c3.json"

[[epoch]]
number = 1
keys = ["c1", "c2"]
lists = [{ collector = "c1", first = 0, count = 8 }, { collector = "c2", first = 8, count = 8 }]

[[epoch]]
number = 2
start = 100
keys = ["c1", "c2", "c3", "c2", "c1", "c3"]
lists = [{ collector = "c2", first = 8, count = 4 }, { collector = "c1", first = 0, count = 8 }, { collector = "c3", first = 12, count = 4 }]
sketches = [{ id = 7, collector = "c3", store = "cm" }]
"#;

    #[test]
    fn a_good_file_parses_and_places_keys_lists_and_sketches() {
        let mut c = Cluster::from_toml(BASE).expect("parses");
        assert_eq!(c.epoch, 2);
        assert_eq!(c.collectors.len(), 3);
        let e1 = c.epoch(1).unwrap();
        let e2 = c.epoch(2).unwrap();
        for k in 0u32..2000 {
            let key = k.to_be_bytes();
            let crc = IEEE.checksum(&key) as usize;
            assert_eq!(e1.key_owner(&key), Some(crc % 2));
            let o2 = e2.key_owner(&key).unwrap();
            // Slots 2 and 5 move to c3; every other key keeps its epoch-1 owner.
            if crc % 6 == 2 || crc % 6 == 5 {
                assert_eq!(o2, 2);
            } else {
                assert_eq!(o2, crc % 2);
            }
        }
        assert_eq!(e2.list_owner(0), Some(0));
        assert_eq!(e2.list_owner(7), Some(0));
        assert_eq!(e2.list_owner(8), Some(1));
        assert_eq!(e2.list_owner(12), Some(2));
        assert_eq!(e2.list_owner(15), Some(2));
        assert_eq!(e2.list_owner(16), None);
        assert_eq!(e1.list_owner(12), Some(1));
        assert_eq!(e2.sketch_owner(7).map(|s| s.collector), Some(2));
        assert!(e1.sketch_owner(7).is_none());
        assert_eq!(e1.members(3), vec![0, 1]);
        assert_eq!(e2.members(3), vec![0, 1, 2]);
        assert_eq!(c.active_at(99).number, 1);
        assert_eq!(c.active_at(100).number, 2);
        assert_eq!(c.history(1).map(|p| p.number).collect::<Vec<_>>(), vec![1]);
        assert_eq!(
            c.history(2).map(|p| p.number).collect::<Vec<_>>(),
            vec![2, 1]
        );
        c.resolve_paths(Path::new("/etc/dta"));
        assert_eq!(
            c.collectors[0].endpoint.metadata.as_deref(),
            Some(Path::new("/etc/dta/c1.json"))
        );
        assert_eq!(
            c.collectors[2].endpoint.metadata.as_deref(),
            Some(Path::new("/abs/c3.json"))
        );
    }

    #[test]
    fn key_slot_is_the_translators_key_hash_rule() {
        // `[routing] key-hash` over n stores picks store crc32(key) % n.
        for n in 1..5 {
            for k in 0u32..500 {
                let key = (k * 7919).to_le_bytes();
                assert_eq!(key_slot(&key, n), IEEE.checksum(&key) as usize % n);
            }
        }
    }

    #[test]
    fn bad_files_get_clear_errors() {
        let cases: &[(&str, &str, &str)] = &[
            (
                "{ collector = \"c2\", first = 8, count = 4 }",
                "{ collector = \"c2\", first = 6, count = 4 }",
                "lists 0..8 (c1) and 6..10 (c2) overlap",
            ),
            (
                "keys = [\"c1\", \"c2\", \"c3\"",
                "keys = [\"c1\", \"c9\", \"c3\"",
                "epoch 2: keys[1]: unknown collector \"c9\"",
            ),
            (
                "collector = \"c3\", first = 12",
                "collector = \"cX\", first = 12",
                "epoch 2: lists: unknown collector \"cX\"",
            ),
            (
                "collector = \"c3\", first = 12, count = 4",
                "collector = \"c3\", first = 12, count = 0",
                "count is 0",
            ),
            (
                "keys = [\"c1\", \"c2\", \"c3\", \"c2\", \"c1\", \"c3\"]",
                "keys = []",
                "epoch 2: keys: empty",
            ),
            ("epoch = 2", "epoch = 3", "cluster.epoch = 3 but the newest"),
            ("number = 2", "number = 1", "increasing order"),
            ("name = \"c3\"", "name = \"c2\"", "\"c2\": name: used twice"),
            (
                "metadata = \"/abs/c3.json\"",
                "cm = \"127.0.0.1:1\"",
                "`cm` needs `ports`",
            ),
            (
                "metadata = \"c1.json\"",
                "metadata = \"c1.json\"\ncm = \"127.0.0.1:1\"",
                "exactly one of",
            ),
            (
                "id = 7, collector = \"c3\"",
                "id = 7, collector = \"c4\"",
                "sketch 7: unknown collector",
            ),
            (
                "control = \"127.0.0.1:1\"",
                "control = \"nowhere\"",
                "not ip:port",
            ),
            ("epoch = 2", "epoch = 2\nbogus = 1", "bogus"),
        ];
        for (from, to, want) in cases {
            assert!(BASE.contains(from), "{from}");
            let e = Cluster::from_toml(&BASE.replacen(from, to, 1)).unwrap_err();
            assert!(e.contains(want), "{to}: got {e:?}, want {want:?}");
        }
        let e = Cluster::from_toml("[cluster]\nepoch = 1\n").unwrap_err();
        assert!(e.contains("no [[collector]]"), "{e}");
        let no_epochs = &BASE[..BASE.find("[[epoch]]").unwrap()];
        let e = Cluster::from_toml(no_epochs).unwrap_err();
        assert!(e.contains("no [[epoch]]"), "{e}");
        let e = Cluster::from_toml(
            "[cluster]\nepoch = 1\n[[collector]]\nname = \"a\"\nmetadata = \"m\"\n\
             [[epoch]]\nnumber = 1\n",
        )
        .unwrap_err();
        assert!(e.contains("empty partition"), "{e}");
        let e = Cluster::from_toml(&BASE.replace("append = \"ap\"\n", "")).unwrap_err();
        assert!(e.contains("no append store"), "{e}");
    }

    #[test]
    fn a_collector_table_takes_only_its_keys() {
        // The endpoint's keys are flattened into `[[collector]]`: unknown keys are still refused,
        // and a bad value still names its key.
        let typo = BASE.replacen("name = \"c3\"", "name = \"c3\"\nport = 1", 1);
        let e = Cluster::from_toml(&typo).unwrap_err();
        assert!(e.contains("unknown field `port`"), "{e}");
        let timeout = BASE.replacen(
            "name = \"c3\"",
            "name = \"c3\"\nconnect_timeout_secs = 1",
            1,
        );
        assert!(Cluster::from_toml(&timeout).is_err());
        let bad = BASE.replacen("cm = \"127.0.0.1:4791\"", "cm = \"nowhere\"", 1);
        assert!(Cluster::from_toml(&bad).is_err());
        let c = Cluster::from_toml(BASE).unwrap();
        assert_eq!(c.collectors[1].endpoint.ports, [1337]);
        assert_eq!(c.collectors[1].control.as_deref(), Some("127.0.0.1:2"));
    }
}
