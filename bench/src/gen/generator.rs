//! [`Generator`]: a [`Scenario`]'s endless, deterministic stream of reports (DTA reports, or
//! P4.org Telemetry Reports with `telemetry` set), and [`digest`] for the reference profile.

use std::net::{Ipv4Addr, SocketAddrV4};

use dta_proto::wire::dta::BaseVariant;
use dta_proto::wire::report::{Primitive, Priority, Report, ReportFormat, ReportHeader};
use dta_proto::{Key, Value};

use super::scenario::{Scenario, INT_INITIAL_TTL};

use crate::workload::{mix, FatTree, Flows, SplitMix64};
use dta_proto::wire::telemetry_report::{
    self as tr, DropInfo, EmbeddedIntRepr, Flags, FlowKey, GroupRepr, HopMetadata, IndividualRepr,
    InnerPacketRepr, IntKind, QueueOccupancy, RepType,
};

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
