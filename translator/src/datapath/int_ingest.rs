//! INT ingest: P4.org Telemetry Reports (v1.0 and v2.0) in, DTA [`Report`]s out.
//!
//! Switches that speak the P4.org Telemetry Report format send to `[int] port`. Each individual
//! report is read in place (`dta_proto::wire::telemetry_report`) and mapped onto the DTA
//! primitives the way the DTA paper's Table 2 maps INT onto them, every rule optional
//! ([`IntSettings`]):
//!
//! | The report | DTA primitive | Key | Value |
//! |---|---|---|---|
//! | carries an embedded INT-MD stack (a sink's report) | Key-Write | flow 5-tuple (13 B) | the configured per-hop field of every hop, source first, then the sink's own (4 B BE each, at most 8 hops) |
//! | tracked flow (F) without a stack (INT-XD postcards, INT-MX per-hop reports) | Postcarding | flow 5-tuple, hop = `initial_ttl − TTL` ([`InitialTtl`]) | the hop's configured field |
//! | dropped (D, or a drop reason in its metadata) | Append to `first + node % lists` | — | [`DropEvent`] (flow, node, reason, queue; 20 B) |
//! | congested queue (Q) | Append to `first + node % lists` | — | [`CongestionEvent`] (flow, node, queue, occupancy; 24 B) |
//! | any report with a flow | Key-Increment | flow 5-tuple | 1 (reports) or the IPv4 total length (bytes) |
//!
//! The derived reports are dispatched exactly like received ones (routing, ownership between
//! workers, admission, budget), so every one of them ends translated, pending or under one
//! `drop_*` reason: `rx_datagrams + int_derived() == translated + dropped() + pending`.
//! Reports that cannot be read are counted under one `int_drop_*` reason; reports no rule
//! takes, as `int_unmapped`; a postcard whose TTL is above a fixed `initial_ttl` (its hop is
//! unknown) as `int_postcard_ttl_above_initial` (the report's other rules still apply). An
//! Append list ID past `u32::MAX` is never formed: such an event counts as derived and as
//! `drop_unknown_list` (configuration refuses the rules that could name one). The spec's
//! sequence numbers are tracked per (version, node ID, hw_id) to count lost reports
//! (`int_seq_gaps`, `int_seq_missing`, `int_seq_late`).
//!
//! Per report: no allocation, no lock, no system call; the source map is bounded.

use dta_proto::wire::report::{Primitive, Priority, Profile, Report, ReportHeader};
use dta_proto::wire::telemetry_report::{
    CongestionEvent, DropEvent, EmbeddedInt, HopMetadata, IndividualReport, InnerConfig,
    InnerPacket, IntKind, ReportError, TelemetryReport, V2_SEQ_MAX, VERSION_1,
};
use dta_proto::{Key, Value, MAX_VALUE_LEN};

use super::demux::{fast_map, FastMap};
use super::stats::TranslatorCounters;

/// The per-hop field a path or postcard value is made of.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, Default, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "snake_case")]
pub enum HopField {
    /// Node (switch) ID.
    #[default]
    NodeId,
    /// Level 1 ingress interface ID.
    IngressPort,
    /// Level 1 egress interface ID.
    EgressPort,
    /// Hop latency.
    HopLatency,
    /// Queue occupancy (24 bits).
    QueueOccupancy,
    /// Low 32 bits of the egress timestamp.
    EgressTimestamp,
}

impl HopField {
    /// The field of `m` (0 when the hop did not report it).
    #[inline]
    pub fn of(self, m: &HopMetadata) -> u32 {
        match self {
            HopField::NodeId => m.node_id.unwrap_or(0),
            HopField::IngressPort => m.l1_ports.map_or(0, |p| p.0 as u32),
            HopField::EgressPort => m.l1_ports.map_or(0, |p| p.1 as u32),
            HopField::HopLatency => m.hop_latency.unwrap_or(0),
            HopField::QueueOccupancy => m.queue.map_or(0, |q| q.occupancy),
            HopField::EgressTimestamp => m.egress_ts.map_or(0, |t| t as u32),
        }
    }
}

/// What a per-flow counter counts.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, Default, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "snake_case")]
pub enum CountWhat {
    /// One per report.
    #[default]
    Reports,
    /// The original packet's IPv4 total length.
    Bytes,
}

/// The TTL the reported packets carried at their first hop (`[int.postcard] initial_ttl`):
/// a postcard's hop is `initial_ttl − TTL`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum InitialTtl {
    /// Every host starts its packets at this TTL (1..=255). A report whose TTL is above it
    /// yields no postcard (`int_postcard_ttl_above_initial`).
    Fixed(u8),
    /// Hosts of several kinds: the smallest of 64, 128 and 255 (the common initial TTLs of
    /// Linux and macOS, Windows, network OSes) not below the packet's TTL. A path longer than
    /// the distance between two of those values is read as a shorter one.
    Auto,
}

impl Default for InitialTtl {
    fn default() -> Self {
        InitialTtl::Fixed(64)
    }
}

impl InitialTtl {
    /// The hop of a packet seen with `ttl` (0 at the first hop), or `None` when `ttl` is above
    /// a fixed initial TTL.
    #[inline]
    pub fn hop(self, ttl: u8) -> Option<u8> {
        match self {
            InitialTtl::Fixed(initial) => initial.checked_sub(ttl),
            InitialTtl::Auto => {
                let initial = if ttl <= 64 {
                    64
                } else if ttl <= 128 {
                    128
                } else {
                    255
                };
                Some(initial - ttl)
            }
        }
    }
}

impl serde::Serialize for InitialTtl {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            InitialTtl::Fixed(t) => s.serialize_u8(*t),
            InitialTtl::Auto => s.serialize_str("auto"),
        }
    }
}

impl<'de> serde::Deserialize<'de> for InitialTtl {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        const EXPECTED: &str = "a TTL 1..=255 or \"auto\"";
        impl serde::de::Visitor<'_> for V {
            type Value = InitialTtl;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(EXPECTED)
            }
            fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<InitialTtl, E> {
                match u64::try_from(v) {
                    Ok(v) => self.visit_u64(v),
                    Err(_) => Err(E::invalid_value(
                        serde::de::Unexpected::Signed(v),
                        &EXPECTED,
                    )),
                }
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<InitialTtl, E> {
                match u8::try_from(v) {
                    Ok(t @ 1..) => Ok(InitialTtl::Fixed(t)),
                    _ => Err(E::invalid_value(
                        serde::de::Unexpected::Unsigned(v),
                        &EXPECTED,
                    )),
                }
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<InitialTtl, E> {
                match v {
                    "auto" => Ok(InitialTtl::Auto),
                    _ => Err(E::invalid_value(serde::de::Unexpected::Str(v), &EXPECTED)),
                }
            }
        }
        d.deserialize_any(V)
    }
}

/// A range of Append lists events go to (`first + node_id % lists`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ListRule {
    /// First list.
    pub first: u32,
    /// Lists (at least 1; `first + lists - 1` must not pass `u32::MAX`).
    pub lists: u32,
}

impl ListRule {
    /// The list node `node`'s events go to; `None` if it would pass `u32::MAX` (a rule the
    /// configuration refuses).
    #[inline]
    pub fn list_of(self, node: u32) -> Option<u32> {
        self.first.checked_add(node % self.lists.max(1))
    }

    /// Whether every list of the rule has an ID (`first + lists - 1 <= u32::MAX`).
    pub fn fits(self) -> bool {
        self.first.checked_add(self.lists.max(1) - 1).is_some()
    }
}

/// How INT reports become DTA reports (from `[int]`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IntSettings {
    /// Where embedded INT is found in truncated packets.
    pub inner: InnerConfig,
    /// Path Key-Write: the field, and the redundancy N (0: the routed store's N).
    pub path: Option<(HopField, u8)>,
    /// Postcards: the field, the TTL reports show at the first hop, and the path length (0:
    /// unknown; the entry is written when it ages out).
    pub postcard: Option<(HopField, InitialTtl, u8)>,
    /// Drop events.
    pub drop: Option<ListRule>,
    /// Congestion events.
    pub congestion: Option<ListRule>,
    /// Per-flow counters, and their redundancy N (0: the routed store's N).
    pub counter: Option<(CountWhat, u8)>,
    /// Priority of the derived reports.
    pub priority: Priority,
    /// (version, node, hw_id) sources tracked for sequence gaps.
    pub max_sources: usize,
}

impl Default for IntSettings {
    fn default() -> Self {
        IntSettings {
            inner: InnerConfig::default(),
            path: Some((HopField::NodeId, 0)),
            postcard: Some((HopField::NodeId, InitialTtl::Fixed(64), 0)),
            drop: Some(ListRule { first: 0, lists: 1 }),
            congestion: Some(ListRule { first: 1, lists: 1 }),
            counter: Some((CountWhat::Reports, 0)),
            priority: Priority::Medium,
            max_sources: 4096,
        }
    }
}

/// Up to one derived report per rule.
pub const MAX_DERIVED: usize = 5;

/// The derived reports of one individual report (a fixed array: no allocation).
pub struct Derived {
    reports: [Report; MAX_DERIVED],
    len: usize,
}

impl Default for Derived {
    fn default() -> Self {
        Derived {
            reports: [Report::PLACEHOLDER; MAX_DERIVED],
            len: 0,
        }
    }
}

impl Derived {
    #[inline]
    fn push(&mut self, r: Report) {
        if self.len < MAX_DERIVED {
            self.reports[self.len] = r;
            self.len += 1;
        }
    }

    /// The reports.
    #[inline]
    pub fn as_slice(&self) -> &[Report] {
        &self.reports[..self.len]
    }

    #[inline]
    fn clear(&mut self) {
        self.len = 0;
    }
}

/// The INT ingest state of one worker: settings and the sequence tracker.
pub struct IntIngest {
    s: IntSettings,
    header: ReportHeader,
    /// (version, hw_id, node) → next expected sequence number.
    seq: FastMap<u64, u32>,
}

/// Counts a read error under its `int_drop_*` reason.
#[inline]
pub fn count_error(e: ReportError, c: &mut TranslatorCounters) {
    match e {
        ReportError::Truncated => c.int_drop_truncated += 1,
        ReportError::BadVersion => c.int_drop_bad_version += 1,
        ReportError::BadLength => c.int_drop_bad_length += 1,
        ReportError::UnknownRepType => c.int_drop_unknown_rep_type += 1,
        ReportError::UnsupportedInnerType => c.int_drop_unsupported_inner_type += 1,
        ReportError::MalformedInner => c.int_drop_malformed_inner += 1,
    }
}

impl IntIngest {
    /// Ingest state for `s` (the source map is allocated here, once).
    pub fn new(s: IntSettings) -> IntIngest {
        IntIngest {
            header: ReportHeader {
                profile: Profile::Extended,
                immediate: false,
                retransmittable: false,
                seq: None,
                priority: s.priority,
            },
            seq: fast_map(s.max_sources.max(1)),
            s,
        }
    }

    /// The settings.
    pub fn settings(&self) -> &IntSettings {
        &self.s
    }

    /// Fills in redundancies left at 0 with the routed stores' N.
    pub fn resolve_redundancy(&mut self, keywrite: Option<u8>, keyincrement: Option<u8>) {
        if let Some((_, n @ 0)) = &mut self.s.path {
            *n = keywrite.unwrap_or(1);
        }
        if let Some((_, n @ 0)) = &mut self.s.counter {
            *n = keyincrement.unwrap_or(1);
        }
    }

    /// Tracks the datagram's sequence number for its (version, node, hw_id).
    #[inline]
    pub fn track_sequence(&mut self, t: &TelemetryReport<'_>, c: &mut TranslatorCounters) {
        let modulus: u64 = if t.version == VERSION_1 {
            1 << 32
        } else {
            V2_SEQ_MAX as u64 + 1
        };
        let key = (t.version as u64) << 40 | (t.hw_id as u64) << 32 | t.node_id as u64;
        let next = (t.seq_no as u64 + 1) % modulus;
        let full = self.seq.len() >= self.s.max_sources;
        match self.seq.get_mut(&key) {
            None if full => {}
            None => {
                self.seq.insert(key, next as u32);
            }
            Some(expected) => {
                let d = (t.seq_no as u64 + modulus - *expected as u64) % modulus;
                if d == 0 {
                    *expected = next as u32;
                } else if d < modulus / 2 {
                    c.int_seq_gaps += 1;
                    c.int_seq_missing += d;
                    *expected = next as u32;
                } else {
                    c.int_seq_late += 1;
                }
            }
        }
    }

    /// Maps one individual report of `t` onto DTA reports (into `out`, cleared first).
    /// Unreadable inner contents are counted and yield nothing.
    #[inline]
    pub fn derive(
        &self,
        t: &TelemetryReport<'_>,
        ir: &IndividualReport<'_>,
        c: &mut TranslatorCounters,
        out: &mut Derived,
    ) {
        out.clear();
        if t.version == VERSION_1 {
            c.int_reports_v1 += 1;
        } else {
            c.int_reports_v2 += 1;
        }
        let p = match ir.parse_inner(&self.s.inner) {
            Ok(p) => p,
            Err(e) => {
                count_error(e, c);
                return;
            }
        };
        let fb = p.flow.to_bytes();
        let Some(flow) = Key::new(&fb) else {
            return;
        };
        let node = t.node_id;
        // Events derived but dropped for a list ID past u32::MAX (the report was mapped).
        let mut events_dropped = false;
        let mut local = ir.local;
        local.node_id = Some(node);
        let header = self.header;
        let stack = p.int.filter(|e| e.kind == IntKind::Md && e.hops() > 0);
        if let (Some(e), Some((field, n))) = (stack, self.s.path) {
            if let Some(value) = self.path_value(&e, &local, field, c) {
                c.int_derived_keywrite += 1;
                out.push(Report {
                    header,
                    primitive: Primitive::KeyWrite {
                        redundancy: n,
                        key: flow,
                        value,
                    },
                });
            }
        } else if let (true, Some((field, initial_ttl, path_len))) =
            (ir.flags.tracked && stack.is_none(), self.s.postcard)
        {
            match initial_ttl.hop(p.ttl) {
                Some(hop) => {
                    c.int_derived_postcard += 1;
                    out.push(Report {
                        header,
                        primitive: Primitive::Postcard {
                            flow,
                            hop,
                            path_len,
                            value: field.of(&local),
                        },
                    });
                }
                None => c.int_postcard_ttl_above_initial += 1,
            }
        }
        if let (true, Some(rule)) = (ir.flags.dropped || ir.local.drop.is_some(), self.s.drop) {
            let e = DropEvent {
                flow: p.flow,
                node_id: node,
                drop: ir.local.drop.unwrap_or_default(),
            };
            events_dropped |= !push_event(rule, node, &e.to_bytes(), header, c, out);
        }
        if let (true, Some(rule)) = (ir.flags.congested, self.s.congestion) {
            let e = CongestionEvent {
                flow: p.flow,
                node_id: node,
                queue: ir.local.queue.unwrap_or_default(),
            };
            events_dropped |= !push_event(rule, node, &e.to_bytes(), header, c, out);
        }
        if let Some((what, n)) = self.s.counter {
            c.int_derived_keyincrement += 1;
            out.push(Report {
                header,
                primitive: Primitive::KeyIncrement {
                    redundancy: n,
                    key: flow,
                    delta: delta(what, &p),
                },
            });
        }
        if out.len == 0 && !events_dropped {
            c.int_unmapped += 1;
        }
    }

    /// The path value: each stacked hop's field, source first, then the reporting node's.
    #[inline]
    fn path_value(
        &self,
        e: &EmbeddedInt<'_>,
        local: &HopMetadata,
        field: HopField,
        c: &mut TranslatorCounters,
    ) -> Option<Value> {
        const MAX_HOPS: usize = MAX_VALUE_LEN / 4;
        let mut v = [0u8; MAX_VALUE_LEN];
        let hops = e.hops();
        let n = (hops + 1).min(MAX_HOPS);
        if hops + 1 > MAX_HOPS {
            c.int_path_truncated += 1;
        }
        for i in 0..n {
            let x = if i < hops {
                field.of(&e.hop_from_source(i)?)
            } else {
                field.of(local)
            };
            v[4 * i..4 * i + 4].copy_from_slice(&x.to_be_bytes());
        }
        Value::new(&v[..4 * n])
    }
}

/// Derives an event's Append report (`true`); a list ID past `u32::MAX` drops it as
/// `unknown_list` (`false`).
#[inline]
fn push_event(
    rule: ListRule,
    node: u32,
    entry: &[u8],
    header: ReportHeader,
    c: &mut TranslatorCounters,
    out: &mut Derived,
) -> bool {
    c.int_derived_append += 1;
    match rule.list_of(node) {
        Some(list) => {
            out.push(Report {
                header,
                primitive: Primitive::Append {
                    list,
                    value: Value::new(entry).unwrap_or(Value::EMPTY),
                },
            });
            true
        }
        None => {
            c.drop_unknown_list += 1;
            false
        }
    }
}

#[inline]
fn delta(what: CountWhat, p: &InnerPacket<'_>) -> u64 {
    match what {
        CountWhat::Reports => 1,
        CountWhat::Bytes => p.ip_len as u64,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use dta_proto::wire::telemetry_report::{
        emit, EmbeddedIntRepr, Flags, FlowKey, GroupRepr, IndividualRepr, InnerPacketRepr, RepType,
        DEFAULT_MD_UDP_PORT,
    };

    fn flow() -> FlowKey {
        FlowKey {
            src: [10, 0, 0, 1],
            dst: [10, 0, 0, 2],
            proto: 17,
            sport: 1000,
            dport: 2000,
        }
    }

    fn datagram(version: u8, seq: u32, r: IndividualRepr<'_>) -> Vec<u8> {
        let g = GroupRepr {
            version,
            hw_id: 3,
            seq_no: seq,
            node_id: 50,
        };
        let mut b = vec![0u8; 512];
        let n = emit(&g, &[r], &mut b).unwrap();
        b.truncate(n);
        b
    }

    fn derive(ing: &IntIngest, b: &[u8], c: &mut TranslatorCounters) -> Vec<Report> {
        let t = TelemetryReport::parse(b).unwrap();
        let mut out = Derived::default();
        let mut all = Vec::new();
        for ir in t.reports() {
            ing.derive(&t, &ir.unwrap(), c, &mut out);
            all.extend_from_slice(out.as_slice());
        }
        all
    }

    #[test]
    fn a_sink_report_becomes_a_path_and_a_count() {
        let hops: Vec<HopMetadata> = (10..14)
            .map(|n| HopMetadata {
                node_id: Some(n),
                ..HopMetadata::default()
            })
            .collect();
        let mut ing = IntIngest::new(IntSettings::default());
        ing.resolve_redundancy(Some(2), Some(3));
        for version in [1, 2] {
            let b = datagram(
                version,
                1,
                IndividualRepr {
                    rep_type: RepType::Int,
                    flags: Flags {
                        tracked: true,
                        ..Flags::default()
                    },
                    local: HopMetadata::default(),
                    ingress_ts32: 0,
                    packet: InnerPacketRepr {
                        ethernet: version == 1,
                        flow: flow(),
                        ttl: 60,
                        dscp: 0,
                        payload_len: 10,
                        int: Some((
                            EmbeddedIntRepr {
                                kind: IntKind::Md,
                                instruction: 0x8000,
                                remaining_hop_count: 4,
                                hops: &hops,
                            },
                            DEFAULT_MD_UDP_PORT,
                        )),
                    },
                },
            );
            let mut c = TranslatorCounters::default();
            let r = derive(&ing, &b, &mut c);
            assert_eq!(r.len(), 2, "{r:?}");
            let Primitive::KeyWrite {
                redundancy,
                key,
                value,
            } = r[0].primitive
            else {
                panic!("{r:?}")
            };
            assert_eq!(redundancy, 2);
            assert_eq!(key.as_bytes(), &flow().to_bytes());
            let ids: Vec<u32> = value
                .as_bytes()
                .chunks(4)
                .map(|w| u32::from_be_bytes(w.try_into().unwrap()))
                .collect();
            assert_eq!(ids, vec![10, 11, 12, 13, 50]);
            assert!(matches!(
                r[1].primitive,
                Primitive::KeyIncrement {
                    redundancy: 3,
                    delta: 1,
                    ..
                }
            ));
            assert_eq!(c.int_derived(), 2);
        }
    }

    /// A tracked-flow report without a stack (a postcard) whose packet has `ttl`, from node
    /// 50, dropped (D) if `dropped`.
    fn postcard_report(version: u8, ttl: u8, dropped: bool) -> Vec<u8> {
        datagram(
            version,
            1,
            IndividualRepr {
                rep_type: RepType::Int,
                flags: Flags {
                    tracked: true,
                    dropped,
                    ..Flags::default()
                },
                local: HopMetadata::default(),
                ingress_ts32: 0,
                packet: InnerPacketRepr {
                    ethernet: false,
                    flow: flow(),
                    ttl,
                    dscp: 0,
                    payload_len: 10,
                    int: None,
                },
            },
        )
    }

    fn postcard_hops(r: &[Report]) -> Vec<u8> {
        r.iter()
            .filter_map(|r| match r.primitive {
                Primitive::Postcard { hop, .. } => Some(hop),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn postcards_above_initial_ttl_are_counted() {
        let ing = IntIngest::new(IntSettings::default());
        let mut c = TranslatorCounters::default();
        let r = derive(&ing, &postcard_report(2, 100, false), &mut c);
        assert!(postcard_hops(&r).is_empty(), "{r:?}");
        assert_eq!(c.get("int_postcard_ttl_above_initial"), Some(1), "{c:?}");
        // The report's other rules still apply.
        assert_eq!(c.int_derived_keyincrement, 1);
        let r = derive(&ing, &postcard_report(2, 61, false), &mut c);
        assert_eq!(postcard_hops(&r), [3]);
        assert_eq!(c.get("int_postcard_ttl_above_initial"), Some(1));
    }

    #[test]
    fn initial_ttl_auto_takes_the_nearest_common_initial_ttl() {
        let cfg = crate::config::TranslatorConfig::from_toml(
            "[int]\nport = 32766\n[int.postcard]\ninitial_ttl = \"auto\"\n\
             [[collector]]\nname = \"c\"\ncm = \"127.0.0.1:4791\"\nports = [1337]\n",
        )
        .expect("initial_ttl = \"auto\" parses");
        let ing = IntIngest::new(cfg.int.settings().unwrap());
        let mut c = TranslatorCounters::default();
        for (ttl, hop) in [
            (64, 0),
            (60, 4),
            (1, 63),
            (65, 63),
            (120, 8),
            (128, 0),
            (129, 126),
            (250, 5),
            (255, 0),
        ] {
            let r = derive(&ing, &postcard_report(1, ttl, false), &mut c);
            assert_eq!(postcard_hops(&r), [hop], "TTL {ttl}");
        }
        assert_eq!(c.get("int_postcard_ttl_above_initial"), Some(0));
    }

    #[test]
    fn list_ids_never_wrap() {
        // 50 % 8 = 2 past u32::MAX - 1: the list ID does not exist.
        let ing = IntIngest::new(IntSettings {
            drop: Some(ListRule {
                first: u32::MAX - 1,
                lists: 8,
            }),
            ..IntSettings::default()
        });
        let mut c = TranslatorCounters::default();
        let r = derive(&ing, &postcard_report(2, 60, true), &mut c);
        assert!(
            !r.iter()
                .any(|r| matches!(r.primitive, Primitive::Append { .. })),
            "{r:?}"
        );
        assert_eq!((c.int_derived_append, c.drop_unknown_list), (1, 1));
        assert_eq!(c.int_unmapped, 0);
        // With no other rule, the report was still mapped (its event derived, then dropped).
        let only_drops = IntIngest::new(IntSettings {
            path: None,
            postcard: None,
            counter: None,
            drop: Some(ListRule {
                first: u32::MAX - 1,
                lists: 8,
            }),
            ..IntSettings::default()
        });
        let mut c = TranslatorCounters::default();
        assert!(derive(&only_drops, &postcard_report(2, 60, true), &mut c).is_empty());
        assert_eq!(
            (c.int_derived(), c.drop_unknown_list, c.int_unmapped),
            (1, 1, 0)
        );
        // The last list that exists is still reached.
        let ing = IntIngest::new(IntSettings {
            drop: Some(ListRule {
                first: u32::MAX - 2,
                lists: 8,
            }),
            ..IntSettings::default()
        });
        let r = derive(&ing, &postcard_report(2, 60, true), &mut c);
        assert!(r
            .iter()
            .any(|r| matches!(r.primitive, Primitive::Append { list: u32::MAX, .. })));
    }

    #[test]
    fn sequence_gaps_are_counted_per_source() {
        let mut ing = IntIngest::new(IntSettings::default());
        let mut c = TranslatorCounters::default();
        let mut b = [0u8; 12];
        for (seq, node) in [
            (1u32, 1u32),
            (2, 1),
            (5, 1),
            (3, 1),
            (1, 2),
            (V2_SEQ_MAX, 3),
            (0, 3),
        ] {
            b[..4].copy_from_slice(&(2 << 28 | seq).to_be_bytes());
            b[4..8].copy_from_slice(&node.to_be_bytes());
            let t = TelemetryReport::parse(&b).unwrap();
            ing.track_sequence(&t, &mut c);
        }
        assert_eq!(
            (c.int_seq_gaps, c.int_seq_missing, c.int_seq_late),
            (1, 2, 1)
        );
    }
}
