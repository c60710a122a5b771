//! [`Scenario`]: the workload (report [`Mix`], fat tree, flow population, profile) and the
//! collector stores that receive it, validated; the geometry generator, pcap and replay share.

use std::net::{Ipv4Addr, SocketAddrV4};

use dta_collector::config::{StoreConfig, StoreKindConfig};
use dta_proto::hash::HashProfile;
use dta_proto::layout::AppendFormat;
use dta_proto::sketch::{SketchHash, SketchKind};
use dta_proto::wire::dta::BaseVariant;
use dta_proto::wire::report::{ParseConfig, Priority, Profile, ReportFormat};
use serde::{Deserialize, Serialize};

use crate::workload::FatTree;
use dta_proto::meta::StoreKind;
use dta_proto::wire::telemetry_report::{self as tr, CONGESTION_ENTRY_LEN};
use dta_translator::datapath::int_ingest::{
    CountWhat, HopField, InitialTtl, IntSettings, ListRule,
};

/// Relative weights of the report kinds in a stream.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Mix {
    /// INT-MD path tracing (Key-Write).
    pub keywrite: u32,
    /// INT-XD/MX postcards (Postcarding).
    pub postcard: u32,
    /// NetSeer loss events (Append).
    pub loss: u32,
    /// INT congestion events (Append).
    pub congestion: u32,
    /// Marple host counters (Key-Increment).
    pub counter: u32,
}

impl Mix {
    /// Only one kind.
    pub fn only(kind: Kind) -> Mix {
        let mut m = Mix {
            keywrite: 0,
            postcard: 0,
            loss: 0,
            congestion: 0,
            counter: 0,
        };
        match kind {
            Kind::KeyWrite => m.keywrite = 1,
            Kind::Postcard => m.postcard = 1,
            Kind::Loss => m.loss = 1,
            Kind::Congestion => m.congestion = 1,
            Kind::Counter => m.counter = 1,
        }
        m
    }

    /// Parses `kw=4,pc=2,loss=1,cong=1,ctr=1` (any subset; missing kinds weigh 0) or a single
    /// kind name (`keywrite`, `postcard`, `loss`, `congestion`, `counter`, `all`).
    pub fn parse(s: &str) -> Result<Mix, String> {
        let mut m = Mix::only(Kind::KeyWrite);
        m.keywrite = 0;
        for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (name, w) = match part.split_once('=') {
                Some((n, w)) => (n, w.parse::<u32>().map_err(|e| format!("{part}: {e}"))?),
                None => (part, 1),
            };
            match name {
                "kw" | "keywrite" => m.keywrite = w,
                "pc" | "postcard" => m.postcard = w,
                "loss" => m.loss = w,
                "cong" | "congestion" => m.congestion = w,
                "ctr" | "counter" => m.counter = w,
                "all" => {
                    m = Mix {
                        keywrite: w,
                        postcard: w,
                        loss: w,
                        congestion: w,
                        counter: w,
                    }
                }
                _ => return Err(format!("unknown report kind {name:?}")),
            }
        }
        if m.total() == 0 {
            return Err("the mix has no report kind with a positive weight".into());
        }
        Ok(m)
    }

    fn total(&self) -> u64 {
        [
            self.keywrite,
            self.postcard,
            self.loss,
            self.congestion,
            self.counter,
        ]
        .iter()
        .map(|&w| w as u64)
        .sum()
    }
}

/// A report kind of the mix.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// INT-MD path (Key-Write).
    KeyWrite,
    /// INT-XD/MX postcard.
    Postcard,
    /// NetSeer loss event (Append).
    Loss,
    /// INT congestion event (Append).
    Congestion,
    /// Marple host counter (Key-Increment).
    Counter,
}

/// A workload and the collector geometry that receives it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Scenario {
    /// Wire profile of every report.
    pub profile: ReportFormat,
    /// Report mix.
    pub mix: Mix,
    /// Fat-tree arity k (even, 2..=64).
    pub k: u32,
    /// Switch IDs of the fat tree, in order ToRs and Aggs by pod, then cores; empty means
    /// `id_base + index`.
    pub switch_ids: Vec<u32>,
    /// First switch ID when `switch_ids` is empty.
    pub id_base: u32,
    /// Flows active at once.
    pub concurrent: u32,
    /// Pareto shape of packets per flow.
    pub shape: f64,
    /// Largest packet count of one flow.
    pub max_flow_packets: u64,
    /// Key-Write and Key-Increment redundancy N.
    pub redundancy: u8,
    /// Append lists per event type (loss events use `0..lists`, congestion `lists..2*lists`).
    pub lists: u32,
    /// Append batch (entries per RDMA WRITE).
    pub batch: u32,
    /// Ring capacity per list (entries).
    pub capacity: u32,
    /// Key-Write and Key-Increment slots (log2).
    pub slots_log2: u32,
    /// Postcarding chunks (log2).
    pub chunks_log2: u32,
    /// Translator postcard cache slots.
    pub cache_slots: u32,
    /// Distinct hosts for Marple counters (0 = one per flow source).
    pub hosts: u64,
    /// Seed.
    pub seed: u64,
    /// 0: DTA reports. 1 or 2: P4.org Telemetry Reports of that version instead (INT-MD sink
    /// reports for the paths, INT-XD postcards, drop and congestion reports, inner-only
    /// reports for the counters; see [`Generator::next_int_report`]), sent to `int_port`.
    pub telemetry: u8,
    /// UDP port Telemetry Reports go to (the translator's `[int] port`).
    pub int_port: u16,
    /// Hops per path of the Postcarding store (1..=16; the fat tree's paths are 5).
    pub postcard_hops: u8,
    /// Sketch-Merge stores (`dta gen --traffic`: the switches' per-epoch Count-Min of flow
    /// sizes and HyperLogLog of flows); none by default.
    pub sketch: Option<SketchStores>,
}

/// The Sketch-Merge stores of a scenario: a Count-Min of packets per flow (sketch ID
/// [`SketchStores::CM_ID`], store `flow-sizes`) and a HyperLogLog of distinct flows (ID
/// [`SketchStores::HLL_ID`], store `flows`), merged over `switches` switches, `epochs` epochs
/// kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct SketchStores {
    /// Count-Min rows (1..=8).
    pub cm_rows: u8,
    /// Count-Min columns (a power of two).
    pub cm_columns: u32,
    /// HyperLogLog registers (a power of two, 2^4..=2^16).
    pub hll_registers: u32,
    /// Epoch slots each store keeps (1..=16).
    pub epochs: u32,
    /// Switches that may report (the translator's expected switch count, at most 65,535).
    pub switches: u32,
}

impl SketchStores {
    /// Sketch ID of the Count-Min.
    pub const CM_ID: u16 = 1;
    /// Sketch ID of the HyperLogLog.
    pub const HLL_ID: u16 = 2;

    /// The Count-Min's geometry.
    pub fn cm_shape(&self) -> Result<dta_proto::sketch::SketchShape, String> {
        use dta_proto::sketch::{SketchKind, SketchShape};
        SketchShape::new(SketchKind::CountMin, self.cm_rows, self.cm_columns, 4)
            .map_err(|e| format!("Count-Min {} x {}: {e}", self.cm_rows, self.cm_columns))
    }

    /// The HyperLogLog's geometry.
    pub fn hll_shape(&self) -> Result<dta_proto::sketch::SketchShape, String> {
        use dta_proto::sketch::{SketchKind, SketchShape};
        SketchShape::new(SketchKind::HyperLogLog, 1, self.hll_registers, 1)
            .map_err(|e| format!("HyperLogLog with {} registers: {e}", self.hll_registers))
    }

    /// The translator's Sketch-Merge settings for these stores.
    pub fn settings(&self) -> dta_translator::datapath::primitive::SketchSettings {
        dta_translator::datapath::primitive::SketchSettings {
            expected_switches: self.switches.clamp(1, u16::MAX as u32) as u16,
            max_switches: self.switches.max(4096),
            ..Default::default()
        }
    }
}

impl Default for Scenario {
    fn default() -> Self {
        Scenario {
            profile: ReportFormat::Extended,
            mix: Mix {
                keywrite: 4,
                postcard: 5,
                loss: 2,
                congestion: 1,
                counter: 2,
            },
            k: 8,
            switch_ids: Vec::new(),
            id_base: 1,
            concurrent: 1024,
            shape: 1.3,
            max_flow_packets: 100_000,
            redundancy: 2,
            lists: 8,
            batch: 16,
            capacity: 65536,
            slots_log2: 20,
            chunks_log2: 16,
            cache_slots: 4096,
            hosts: 0,
            seed: 2023,
            telemetry: 0,
            int_port: INT_PORT,
            postcard_hops: 5,
            sketch: None,
        }
    }
}

/// The translator's INT Telemetry Report port in generated workloads (`[int] port`).
pub const INT_PORT: u16 = 32766;
/// TTL the generated packets carry at their first hop (`[int.postcard] initial_ttl`).
pub const INT_INITIAL_TTL: u8 = 64;

/// Where generated reports come from and go to on the wire.
pub const TRANSLATOR_REPORTS: SocketAddrV4 =
    SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 101), dta_proto::consts::DTA_PORT);

impl Scenario {
    /// The wire profile.
    pub fn wire_profile(&self) -> Profile {
        self.profile.into()
    }

    /// How a translator must parse this scenario's reports.
    pub fn parse_config(&self) -> ParseConfig {
        ParseConfig {
            reference_variant: match self.profile {
                ReportFormat::Reference(v) => v,
                ReportFormat::Extended => BaseVariant::B,
            },
            ..ParseConfig::default()
        }
    }

    pub(super) fn extended(&self) -> bool {
        self.profile == ReportFormat::Extended
    }

    /// The translator's INT ingest settings that match what [`Generator::next_int_report`]
    /// writes and [`Scenario::stores`] receives.
    pub fn int_settings(&self) -> IntSettings {
        IntSettings {
            inner: tr::InnerConfig::default(),
            path: Some((HopField::NodeId, 0)),
            postcard: Some((HopField::NodeId, InitialTtl::Fixed(INT_INITIAL_TTL), 5)),
            drop: Some(ListRule {
                first: 0,
                lists: self.lists,
            }),
            congestion: Some(ListRule {
                first: self.lists,
                lists: self.lists,
            }),
            counter: Some((CountWhat::Reports, 0)),
            priority: Priority::Medium,
            max_sources: 4096,
        }
    }

    /// Switch ID of fat-tree switch index `i`.
    pub fn switch_id(&self, i: u32) -> u32 {
        if self.switch_ids.is_empty() {
            self.id_base.wrapping_add(i)
        } else {
            self.switch_ids[i as usize % self.switch_ids.len()]
        }
    }

    /// Checks the parameters.
    pub fn validate(&self) -> Result<(), String> {
        if self.k < 2 || self.k > 64 || self.k % 2 != 0 {
            return Err(format!("k must be even and 2..=64, not {}", self.k));
        }
        if self.mix.total() == 0 {
            return Err("empty mix".into());
        }
        if self.concurrent == 0 || self.lists == 0 || !(1..=16).contains(&self.batch) {
            return Err("concurrent and lists must be positive, batch 1..=16".into());
        }
        if self.capacity % self.batch != 0 {
            return Err("capacity must be a multiple of batch".into());
        }
        if self.redundancy == 0 || self.redundancy > 8 {
            return Err("redundancy must be 1..=8".into());
        }
        if !(4..=28).contains(&self.slots_log2) || !(4..=24).contains(&self.chunks_log2) {
            return Err("slots_log2 must be 4..=28 and chunks_log2 4..=24".into());
        }
        if self.shape.is_nan() || self.shape <= 0.0 {
            return Err("shape must be positive".into());
        }
        if self.telemetry > 2 {
            return Err(
                "telemetry must be 0 (DTA reports), 1 or 2 (Telemetry Report version)".into(),
            );
        }
        if self.telemetry != 0 && self.int_port == 0 {
            return Err("Telemetry Reports need an int_port".into());
        }
        if !(1..=dta_proto::hash::MAX_HOPS).contains(&(self.postcard_hops as usize)) {
            return Err(format!(
                "postcard_hops must be 1..={}, not {}",
                dta_proto::hash::MAX_HOPS,
                self.postcard_hops
            ));
        }
        if let Some(sk) = &self.sketch {
            sk.cm_shape()?;
            sk.hll_shape()?;
            if !(1..=dta_proto::sketch::MAX_EPOCHS).contains(&sk.epochs) {
                return Err(format!(
                    "sketch epochs must be 1..={}, not {}",
                    dta_proto::sketch::MAX_EPOCHS,
                    sk.epochs
                ));
            }
            if !(1..=u16::MAX as u32).contains(&sk.switches) {
                return Err(format!(
                    "sketch switches must be 1..=65535, not {}",
                    sk.switches
                ));
            }
        }
        Ok(())
    }

    /// Switch-ID ranges of the postcard value set V.
    fn value_ranges(&self) -> Vec<[u32; 2]> {
        let n = FatTree {
            k: self.k,
            id_base: 0,
        }
        .switches();
        if self.switch_ids.is_empty() {
            vec![[self.id_base, self.id_base + n - 1]]
        } else {
            self.switch_ids.iter().map(|&id| [id, id]).collect()
        }
    }

    /// The collector stores this scenario writes into: `paths` (Key-Write), `counters`
    /// (Key-Increment), `postcards` (Postcarding), `losses` and `congestion` (Append), and
    /// with [`Scenario::sketch`] `flow-sizes` and `flows` (Sketch-Merge).
    pub fn stores(&self) -> Vec<StoreConfig> {
        let ext = self.extended() || self.telemetry != 0;
        let mut stores = vec![
            StoreConfig {
                name: "paths".into(),
                port: None,
                cm_allow: None,
                kind: StoreKindConfig::new(StoreKind::KeyWrite {
                    slots: 1 << self.slots_log2,
                    slot_size: if ext { 32 } else { 8 },
                    hash: HashProfile::Independent,
                })
                .with_redundancy(self.redundancy),
            },
            StoreConfig {
                name: "counters".into(),
                port: None,
                cm_allow: None,
                kind: StoreKindConfig::new(StoreKind::KeyIncrement {
                    slots: 1 << self.slots_log2,
                    hash: HashProfile::Independent,
                })
                .with_redundancy(self.redundancy),
            },
            StoreConfig {
                name: "postcards".into(),
                port: None,
                cm_allow: None,
                kind: StoreKindConfig::new(StoreKind::Postcard {
                    chunks: 1 << self.chunks_log2,
                    hops: self.postcard_hops,
                    hash: HashProfile::Independent,
                })
                .with_redundancy(1)
                .with_values(self.value_ranges()),
            },
            StoreConfig {
                name: "losses".into(),
                port: None,
                cm_allow: None,
                kind: StoreKindConfig::new(StoreKind::Append {
                    lists: self.lists,
                    first_list: 0,
                    capacity: self.capacity,
                    entry_size: if ext { 20 } else { 4 },
                    batch: self.batch,
                    format: AppendFormat::Sequenced,
                    list_stride: 0,
                }),
            },
            StoreConfig {
                name: "congestion".into(),
                port: None,
                cm_allow: None,
                kind: StoreKindConfig::new(StoreKind::Append {
                    lists: self.lists,
                    first_list: self.lists,
                    capacity: self.capacity,
                    entry_size: match (self.telemetry, ext) {
                        (1.., _) => CONGESTION_ENTRY_LEN as u32,
                        (_, true) => 8,
                        _ => 4,
                    },
                    batch: self.batch,
                    format: AppendFormat::Sequenced,
                    list_stride: 0,
                }),
            },
        ];
        if let Some(sk) = &self.sketch {
            for (name, id, sketch, rows, columns) in [
                (
                    "flow-sizes",
                    SketchStores::CM_ID,
                    SketchKind::CountMin,
                    sk.cm_rows,
                    sk.cm_columns,
                ),
                (
                    "flows",
                    SketchStores::HLL_ID,
                    SketchKind::HyperLogLog,
                    1,
                    sk.hll_registers,
                ),
            ] {
                stores.push(StoreConfig {
                    name: name.into(),
                    port: None,
                    cm_allow: None,
                    kind: StoreKindConfig::new(dta_collector::config::sketch_kind(
                        id,
                        sketch,
                        Some(rows),
                        columns,
                        None,
                        None,
                        sk.epochs,
                        SketchHash::Independent,
                    )),
                });
            }
        }
        stores
    }
}
