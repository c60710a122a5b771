//! `dta gen`: the papers' report workloads as an endless, deterministic stream.
//!
//! A [`Scenario`] fixes the workload (report mix, fat tree, flow population, profile) *and* the
//! collector stores that receive it, so the generator, the pcap files it writes and the replay
//! harness that reads them agree on geometry. The stream:
//!
//! - keeps `concurrent` flows active; each has a Pareto-distributed packet count
//!   ([`Flows::packets`]) and is replaced by the next flow of the population when it ends, so
//!   a few elephants produce most reports and keys repeat the way real traffic does;
//! - draws each report's kind by the mix weights and the flow it belongs to uniformly among the
//!   active ones;
//! - INT-MD path tracing: Key-Write keyed by the flow 5-tuple with the 20-byte 5-hop path;
//! - INT-XD/MX postcards: each flow walks its 5 hops in order, one postcard per draw;
//! - NetSeer loss events: 18-byte Append entries (5-tuple, drop reason, packet sequence);
//! - INT congestion events: 8-byte Append entries (switch ID, queue depth) on their own lists;
//! - Marple host counters: Key-Increment of the source host's byte count.
//!
//! The reference profile carries 4-byte keys and values only, so there the 5-tuple key is its
//! 32-bit digest and each value its 32-bit summary (path digest, packet sequence, switch ID and
//! depth packed); the extended profile carries the full keys and values.

use std::net::{Ipv4Addr, SocketAddrV4};

use dta_collector::config::{StoreConfig, StoreKindConfig};
use dta_proto::hash::HashProfile;
use dta_proto::layout::AppendFormat;
use dta_proto::sketch::{SketchHash, SketchKind};
use dta_proto::wire::dta::BaseVariant;
use dta_proto::wire::report::{
    ParseConfig, Primitive, Priority, Profile, Report, ReportFormat, ReportHeader,
};
use dta_proto::{Key, Value};
use serde::{Deserialize, Serialize};

use crate::workload::{mix, FatTree, Flows, SplitMix64};
use dta_proto::wire::telemetry_report::{
    self as tr, DropInfo, EmbeddedIntRepr, Flags, FlowKey, GroupRepr, HopMetadata, IndividualRepr,
    InnerPacketRepr, IntKind, QueueOccupancy, RepType, CONGESTION_ENTRY_LEN,
};
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

    fn extended(&self) -> bool {
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
                kind: StoreKindConfig::KeyWrite {
                    slots: 1 << self.slots_log2,
                    slot_size: if ext { 32 } else { 8 },
                    hash: HashProfile::Independent,
                    redundancy: self.redundancy,
                },
            },
            StoreConfig {
                name: "counters".into(),
                port: None,
                cm_allow: None,
                kind: StoreKindConfig::KeyIncrement {
                    slots: 1 << self.slots_log2,
                    hash: HashProfile::Independent,
                    epoch_secs: 0,
                    redundancy: self.redundancy,
                },
            },
            StoreConfig {
                name: "postcards".into(),
                port: None,
                cm_allow: None,
                kind: StoreKindConfig::Postcard {
                    chunks: 1 << self.chunks_log2,
                    hops: self.postcard_hops,
                    hash: HashProfile::Independent,
                    redundancy: 1,
                    values: self.value_ranges(),
                },
            },
            StoreConfig {
                name: "losses".into(),
                port: None,
                cm_allow: None,
                kind: StoreKindConfig::Append {
                    lists: self.lists,
                    first_list: 0,
                    capacity: self.capacity,
                    entry_size: if ext { 20 } else { 4 },
                    batch: self.batch,
                    format: AppendFormat::Sequenced,
                },
            },
            StoreConfig {
                name: "congestion".into(),
                port: None,
                cm_allow: None,
                kind: StoreKindConfig::Append {
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
                },
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
                    kind: StoreKindConfig::Sketch {
                        sketch_id: id,
                        sketch,
                        rows: Some(rows),
                        columns,
                        cell_width: None,
                        batch: None,
                        epochs: sk.epochs,
                        hash: SketchHash::Independent,
                    },
                });
            }
        }
        stores
    }
}

#[derive(Debug, Clone, Copy)]
struct ActiveFlow {
    id: u64,
    left: u64,
    hop: u8,
    sent: u32,
}

/// The report stream of a [`Scenario`].
pub struct Generator {
    sc: Scenario,
    tree: FatTree,
    flows: Flows,
    rng: SplitMix64,
    active: Vec<ActiveFlow>,
    next_flow: u64,
    cum: [u64; 5],
    seq: u32,
    /// Reports generated per kind: keywrite, postcard, loss, congestion, counter.
    pub per_kind: [u64; 5],
    /// Flows started so far.
    pub flows_started: u64,
    /// Telemetry Report sequence numbers by switch index (hw_id 0).
    int_seq: Vec<u32>,
}

impl Generator {
    /// A stream for `sc` (call [`Scenario::validate`] first).
    pub fn new(sc: &Scenario) -> Generator {
        let m = sc.mix;
        let w = [m.keywrite, m.postcard, m.loss, m.congestion, m.counter];
        let mut cum = [0u64; 5];
        let mut acc = 0;
        for (c, &x) in cum.iter_mut().zip(&w) {
            acc += x as u64;
            *c = acc;
        }
        let flows = Flows {
            seed: sc.seed ^ 0xf10,
            shape: sc.shape,
        };
        let mut g = Generator {
            tree: FatTree {
                k: sc.k,
                id_base: 0,
            },
            flows,
            rng: SplitMix64(sc.seed),
            active: Vec::with_capacity(sc.concurrent as usize),
            next_flow: 0,
            cum,
            seq: 0,
            per_kind: [0; 5],
            flows_started: 0,
            int_seq: vec![
                0;
                FatTree {
                    k: sc.k,
                    id_base: 0
                }
                .switches() as usize
            ],
            sc: sc.clone(),
        };
        for _ in 0..sc.concurrent {
            let f = g.start_flow();
            g.active.push(f);
        }
        g
    }

    fn start_flow(&mut self) -> ActiveFlow {
        let id = self.next_flow;
        self.next_flow += 1;
        self.flows_started += 1;
        ActiveFlow {
            id,
            left: self
                .flows
                .packets(id)
                .clamp(1, self.sc.max_flow_packets.max(1)),
            hop: 0,
            sent: 0,
        }
    }

    /// The scenario.
    pub fn scenario(&self) -> &Scenario {
        &self.sc
    }

    /// Flow `id`'s 5-hop path as switch IDs.
    pub fn path(&self, id: u64) -> [u32; 5] {
        self.tree
            .path(mix(self.sc.seed ^ 0x9a7 ^ id))
            .map(|i| self.sc.switch_id(i))
    }

    fn header(&mut self) -> ReportHeader {
        self.seq = self.seq.wrapping_add(1);
        ReportHeader {
            profile: self.sc.wire_profile(),
            immediate: false,
            retransmittable: false,
            seq: if self.sc.profile == ReportFormat::Reference(BaseVariant::A) {
                None
            } else {
                Some(self.seq)
            },
            priority: Priority::Medium,
        }
    }

    fn flow_key(&self, id: u64) -> Key {
        let t = self.flows.tuple(id);
        if self.sc.extended() {
            Key::new(&t).expect("13-byte key")
        } else {
            Key::new(&digest(&t).to_be_bytes()).expect("4-byte key")
        }
    }

    /// The next report of the stream.
    pub fn next_report(&mut self) -> Report {
        let r = self.rng.below(*self.cum.last().expect("5 kinds"));
        let kind = self.cum.iter().position(|&c| r < c).unwrap_or(0);
        self.per_kind[kind] += 1;
        let slot = self.rng.below(self.active.len() as u64) as usize;
        let f = self.active[slot];
        let header = self.header();
        let ext = self.sc.extended();
        let mut consumed = true;
        let primitive = match kind {
            0 => {
                let p = self.path(f.id);
                let mut v = [0u8; 20];
                for (h, id) in p.iter().enumerate() {
                    v[4 * h..4 * h + 4].copy_from_slice(&id.to_be_bytes());
                }
                let value = if ext {
                    Value::new(&v)
                } else {
                    Value::new(&digest(&v).to_be_bytes())
                }
                .expect("value fits");
                Primitive::KeyWrite {
                    redundancy: self.sc.redundancy,
                    key: self.flow_key(f.id),
                    value,
                }
            }
            1 => {
                let p = self.path(f.id);
                let hop = f.hop;
                self.active[slot].hop = (hop + 1) % 5;
                // A packet is done when its last hop has reported.
                consumed = hop == 4;
                Primitive::Postcard {
                    flow: self.flow_key(f.id),
                    hop,
                    // The reference profile carries no path length.
                    path_len: if ext { 5 } else { 0 },
                    value: p[hop as usize],
                }
            }
            2 => {
                let t = self.flows.tuple(f.id);
                let mut e = [0u8; 18];
                e[..13].copy_from_slice(&t);
                e[13] = 1 + (self.rng.next_u64() % 7) as u8;
                e[14..18].copy_from_slice(&f.sent.to_be_bytes());
                let value = if ext {
                    Value::new(&e)
                } else {
                    Value::new(&(digest(&t) ^ f.sent).to_be_bytes())
                }
                .expect("value fits");
                Primitive::Append {
                    list: (mix(f.id) % self.sc.lists as u64) as u32,
                    value,
                }
            }
            3 => {
                let p = self.path(f.id);
                let sw = p[self.rng.below(5) as usize];
                let depth = (self.rng.unit().powi(3) * 65535.0) as u32;
                let mut e = [0u8; 8];
                e[..4].copy_from_slice(&sw.to_be_bytes());
                e[4..].copy_from_slice(&depth.to_be_bytes());
                let value = if ext {
                    Value::new(&e)
                } else {
                    Value::new(&((sw << 16) | (depth & 0xFFFF)).to_be_bytes())
                }
                .expect("value fits");
                Primitive::Append {
                    list: self.sc.lists + sw % self.sc.lists,
                    value,
                }
            }
            _ => {
                let t = self.flows.tuple(f.id);
                let host = if self.sc.hosts == 0 {
                    u32::from_be_bytes([t[0], t[1], t[2], t[3]])
                } else {
                    0x0A00_0000 | (mix(f.id) % self.sc.hosts) as u32
                };
                Primitive::KeyIncrement {
                    redundancy: self.sc.redundancy,
                    key: Key::new(&host.to_be_bytes()).expect("4-byte key"),
                    delta: 64 + self.rng.below(1437),
                }
            }
        };
        let a = &mut self.active[slot];
        a.sent = a.sent.wrapping_add(1);
        if consumed {
            a.left -= 1;
        }
        if a.left == 0 {
            self.active[slot] = self.start_flow();
        }
        Report { header, primitive }
    }

    /// The flow 5-tuple of flow `id`.
    pub fn flow_tuple(&self, id: u64) -> FlowKey {
        FlowKey::from_bytes(&self.flows.tuple(id))
    }

    /// The next report of the stream as a P4.org Telemetry Report of version
    /// `self.scenario().telemetry` (1 or 2), written to `out` (at least 512 bytes). Returns the
    /// switch address it is sent from, its length and its kind (0 path, 1 postcard, 2 drop,
    /// 3 congestion, 4 counter-only, as in [`Generator::per_kind`]).
    ///
    /// - path: the sink ToR's INT-MD report; the truncated packet carries INT over UDP (port
    ///   [`tr::DEFAULT_MD_UDP_PORT`], shim NPT 2) with the stack of the 4 hops before it (node
    ///   ID, hop latency, queue occupancy each), the sink's own queue in its metadata;
    /// - postcard: the INT-XD report of the flow's next hop (F bit, its node's hop latency and
    ///   queue; the packet's TTL is 64 minus the hop index);
    /// - drop: a hop's drop report (D bit, queue ID and a drop reason 1..=7);
    /// - congestion: a hop's congested-queue report (Q bit, queue ID and occupancy);
    /// - counter: a report with neither (v2.0: inner only; v1.0: no metadata, F clear).
    pub fn next_int_report(&mut self, out: &mut [u8]) -> (SocketAddrV4, usize, usize) {
        let r = self.rng.below(*self.cum.last().expect("5 kinds"));
        let kind = self.cum.iter().position(|&c| r < c).unwrap_or(0);
        self.per_kind[kind] += 1;
        let slot = self.rng.below(self.active.len() as u64) as usize;
        let f = self.active[slot];
        let path = self.path(f.id);
        let idx = self.tree_path(f.id);
        let flow = self.flow_tuple(f.id);
        let mut consumed = true;
        let hop_md = |h: usize, sw: u32| HopMetadata {
            node_id: Some(sw),
            hop_latency: Some(500 + 100 * h as u32),
            queue: Some(QueueOccupancy {
                id: (h % 8) as u8,
                occupancy: (sw.wrapping_mul(37) ^ f.sent) & 0xFFFF,
            }),
            ..HopMetadata::default()
        };
        let stack: [HopMetadata; 4] = core::array::from_fn(|h| hop_md(h, path[h]));
        let (hop, flags, local, rep_type, int) = match kind {
            0 => (
                4,
                Flags {
                    tracked: true,
                    ..Flags::default()
                },
                HopMetadata {
                    queue: stack[3].queue,
                    ..HopMetadata::default()
                },
                RepType::Int,
                true,
            ),
            1 => {
                let hop = f.hop as usize;
                self.active[slot].hop = ((hop + 1) % 5) as u8;
                consumed = hop == 4;
                let mut m = hop_md(hop, path[hop]);
                m.node_id = None;
                let flags = Flags {
                    tracked: true,
                    ..Flags::default()
                };
                (hop, flags, m, RepType::Int, false)
            }
            2 => {
                let hop = self.rng.below(5) as usize;
                let local = HopMetadata {
                    drop: Some(DropInfo {
                        queue: (hop % 8) as u8,
                        reason: 1 + (self.rng.next_u64() % 7) as u8,
                    }),
                    ..HopMetadata::default()
                };
                let flags = Flags {
                    dropped: true,
                    ..Flags::default()
                };
                (hop, flags, local, RepType::Int, false)
            }
            3 => {
                let hop = self.rng.below(5) as usize;
                let local = HopMetadata {
                    queue: Some(QueueOccupancy {
                        id: (hop % 8) as u8,
                        occupancy: (self.rng.unit().powi(3) * 65535.0) as u32,
                    }),
                    ..HopMetadata::default()
                };
                let flags = Flags {
                    congested: true,
                    ..Flags::default()
                };
                (hop, flags, local, RepType::Int, false)
            }
            _ => (
                4,
                Flags::default(),
                HopMetadata::default(),
                if self.sc.telemetry == 1 {
                    RepType::Int
                } else {
                    RepType::InnerOnly
                },
                false,
            ),
        };
        let node_index = idx[hop];
        let node = path[hop];
        let si = node_index as usize % self.int_seq.len().max(1);
        let seq = &mut self.int_seq[si];
        let seq_no = *seq;
        *seq = seq.wrapping_add(1)
            & if self.sc.telemetry == 1 {
                u32::MAX
            } else {
                tr::V2_SEQ_MAX
            };
        let report = IndividualRepr {
            rep_type,
            flags,
            local,
            ingress_ts32: f.sent.wrapping_mul(1000),
            packet: InnerPacketRepr {
                ethernet: self.sc.telemetry == 1,
                flow,
                ttl: INT_INITIAL_TTL - hop as u8,
                dscp: 0,
                payload_len: 64 + (f.sent % 1400) as u16,
                int: int.then_some((
                    EmbeddedIntRepr {
                        kind: IntKind::Md,
                        instruction: 0xB000,
                        remaining_hop_count: 4,
                        hops: &stack,
                    },
                    tr::DEFAULT_MD_UDP_PORT,
                )),
            },
        };
        let g = GroupRepr {
            version: self.sc.telemetry,
            hw_id: 0,
            seq_no,
            node_id: node,
        };
        let n = tr::emit(&g, &[report], out).expect("a generated report fits 512 bytes");
        let a = &mut self.active[slot];
        a.sent = a.sent.wrapping_add(1);
        if consumed {
            a.left -= 1;
        }
        if a.left == 0 {
            self.active[slot] = self.start_flow();
        }
        let src = SocketAddrV4::new(
            Ipv4Addr::new(10, 1, (node_index >> 8) as u8, node_index as u8),
            40041,
        );
        (src, n, kind)
    }

    /// Flow `id`'s 5-hop path as fat-tree switch indices.
    fn tree_path(&self, id: u64) -> [u32; 5] {
        self.tree.path(mix(self.sc.seed ^ 0x9a7 ^ id))
    }

    /// The reporter (switch) address a report is sent from.
    pub fn source_of(&self, r: &Report) -> SocketAddrV4 {
        let id = match r.primitive {
            Primitive::Postcard { value, .. } => value,
            Primitive::KeyWrite { key, .. } | Primitive::KeyIncrement { key, .. } => {
                digest(key.as_bytes())
            }
            Primitive::Append { list, .. } => list,
        };
        let n = self.tree.switches().max(1);
        let i = id % n;
        SocketAddrV4::new(Ipv4Addr::new(10, 1, (i >> 8) as u8, i as u8), 40041)
    }
}

/// A 32-bit digest of bytes (the reference profile's stand-in for wide keys and values).
pub fn digest(b: &[u8]) -> u32 {
    let mut h = 0xcbf2_9ce4_8422_2325u64;
    for &x in b {
        h = (h ^ x as u64).wrapping_mul(0x100_0000_01b3);
    }
    let m = mix(h);
    (m ^ (m >> 32)) as u32
}

#[cfg(test)]
mod tests {
    use super::*;
    use dta_proto::wire::report::{parse_report, MAX_EMIT_LEN};

    fn roundtrip(sc: &Scenario, n: usize) -> [u64; 5] {
        sc.validate().unwrap();
        let mut g = Generator::new(sc);
        let cfg = sc.parse_config();
        let mut buf = [0u8; MAX_EMIT_LEN];
        for _ in 0..n {
            let r = g.next_report();
            let len = r.emit(sc.wire_profile(), &mut buf).expect("emits");
            let back = parse_report(&buf[..len], &cfg).expect("parses");
            assert_eq!(back.primitive, r.primitive);
        }
        g.per_kind
    }

    #[test]
    fn every_profile_round_trips() {
        for profile in [
            ReportFormat::Extended,
            ReportFormat::Reference(BaseVariant::A),
            ReportFormat::Reference(BaseVariant::B),
        ] {
            let sc = Scenario {
                profile,
                mix: Mix::parse("all").unwrap(),
                ..Scenario::default()
            };
            let k = roundtrip(&sc, 5000);
            assert!(k.iter().all(|&c| c > 700), "{profile}: {k:?}");
        }
    }

    #[test]
    fn mix_parses_and_rejects() {
        let m = Mix::parse("kw=3,pc=1").unwrap();
        assert_eq!((m.keywrite, m.postcard, m.loss), (3, 1, 0));
        assert!(Mix::parse("bogus").is_err());
        assert!(Mix::parse("kw=0").is_err());
    }

    #[test]
    fn postcards_walk_paths_and_ids_come_from_the_set() {
        let sc = Scenario {
            mix: Mix::only(Kind::Postcard),
            switch_ids: vec![100, 200, 300],
            concurrent: 1,
            ..Scenario::default()
        };
        let mut g = Generator::new(&sc);
        for h in 0..5u8 {
            let r = g.next_report();
            let Primitive::Postcard { hop, value, .. } = r.primitive else {
                panic!("postcard expected");
            };
            assert_eq!(hop, h);
            assert!([100, 200, 300].contains(&value));
        }
    }

    #[test]
    fn keys_repeat_heavy_tailed() {
        let sc = Scenario {
            mix: Mix::only(Kind::KeyWrite),
            concurrent: 64,
            ..Scenario::default()
        };
        let mut g = Generator::new(&sc);
        for _ in 0..50_000 {
            g.next_report();
        }
        // Far fewer flows than reports: elephants repeat their keys.
        assert!(g.flows_started < 25_000, "{}", g.flows_started);
        assert!(g.flows_started > 64);
    }
}
