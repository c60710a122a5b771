//! Deterministic telemetry workloads, after the papers' evaluation.
//!
//! Every generator is a pure function of a seed and an index, so a workload can be regenerated
//! on the query side to check what the collector returns against what was sent, without
//! keeping a copy of millions of reports.
//!
//! - [`FatTree`]: 5-hop ToR–Agg–Core–Agg–ToR paths of a k-ary fat tree (INT path tracing).
//! - [`Flows`]: IPv4 5-tuples with a heavy-tailed (Pareto) packet count per flow.
//! - [`Workload`]: the report mix of the demo and the benchmarks: INT-MD path tracing via
//!   20-byte Key-Write values keyed by 5-tuple, NetSeer-style 18-byte loss events via Append,
//!   INT-XD postcards, and Marple host counters via Key-Increment.

use dta_proto::wire::report::{Primitive, Priority, Profile, Report, ReportHeader};
use dta_proto::{Key, Value};

/// SplitMix64: a tiny, fast, well-distributed generator (good enough for workloads).
#[derive(Debug, Clone)]
pub struct SplitMix64(pub u64);

impl SplitMix64 {
    /// The next 64 random bits.
    #[inline]
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        mix(self.0)
    }

    /// A uniform value in `0..n`.
    #[inline]
    pub fn below(&mut self, n: u64) -> u64 {
        ((self.next_u64() as u128 * n as u128) >> 64) as u64
    }

    /// A uniform f64 in [0, 1).
    #[inline]
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// The SplitMix64 finaliser: a bijective 64-bit mix.
#[inline]
pub fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A k-ary fat tree's switch IDs and 5-hop paths.
#[derive(Debug, Clone, Copy)]
pub struct FatTree {
    /// The arity k (even): k pods, k/2 ToR and k/2 Agg switches per pod, (k/2)^2 cores.
    pub k: u32,
    /// Added to every switch ID (so IDs can be drawn from a deployment's ID space).
    pub id_base: u32,
}

impl FatTree {
    /// Number of switches.
    pub fn switches(&self) -> u32 {
        let h = self.k / 2;
        self.k * self.k + h * h
    }

    /// The 5 hops (ToR, Agg, Core, Agg, ToR) of a path between two hosts chosen by `seed`.
    pub fn path(&self, seed: u64) -> [u32; 5] {
        let h = self.k / 2;
        let mut r = SplitMix64(seed);
        let (src_pod, dst_pod) = (r.below(self.k as u64) as u32, r.below(self.k as u64) as u32);
        let (src_tor, dst_tor) = (r.below(h as u64) as u32, r.below(h as u64) as u32);
        let agg = r.below(h as u64) as u32;
        let core = agg * h + r.below(h as u64) as u32;
        let tor = |pod: u32, i: u32| self.id_base + pod * self.k + i;
        let aggr = |pod: u32, i: u32| self.id_base + pod * self.k + h + i;
        let corer = |i: u32| self.id_base + self.k * self.k + i;
        [
            tor(src_pod, src_tor),
            aggr(src_pod, agg),
            corer(core),
            aggr(dst_pod, agg),
            tor(dst_pod, dst_tor),
        ]
    }
}

/// IPv4 5-tuples with heavy-tailed sizes.
#[derive(Debug, Clone, Copy)]
pub struct Flows {
    /// Seed of the flow population.
    pub seed: u64,
    /// Pareto shape of packets per flow (1.1–1.5 is typical of data centres).
    pub shape: f64,
}

impl Flows {
    /// Flow `i`'s 13-byte 5-tuple: src IP, dst IP, protocol, src port, dst port.
    pub fn tuple(&self, i: u64) -> [u8; 13] {
        let a = mix(self.seed ^ i.wrapping_mul(0x9E37_79B9_7F4A_7C15));
        let b = mix(a);
        let mut t = [0u8; 13];
        t[0..4].copy_from_slice(&(0x0A00_0000 | (a as u32 & 0x00FF_FFFF)).to_be_bytes());
        t[4..8].copy_from_slice(&(0x0A00_0000 | ((a >> 32) as u32 & 0x00FF_FFFF)).to_be_bytes());
        t[8] = if b & 1 == 0 { 6 } else { 17 };
        t[9..11].copy_from_slice(&(1024 + (b >> 8) as u16 % 64000).to_be_bytes());
        t[11..13].copy_from_slice(&[80u16, 443, 8080, 53][(b >> 30) as usize % 4].to_be_bytes());
        t
    }

    /// Flow `i`'s packet count, Pareto-distributed with minimum 1.
    pub fn packets(&self, i: u64) -> u64 {
        let mut r = SplitMix64(self.seed ^ 0x5eed ^ i);
        let u = 1.0 - r.unit();
        (u.powf(-1.0 / self.shape)).min(1e9) as u64
    }
}

/// Which primitive a report of the mix is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// INT path of a flow (Key-Write, 20-byte value).
    Path,
    /// Loss event (Append, 18-byte entry).
    Loss,
    /// Postcard of one hop of a flow's path.
    Postcard,
    /// Host counter increment (Key-Increment).
    Counter,
}

/// A report mix, indexable: report `i` of the stream is always the same.
#[derive(Debug, Clone)]
pub struct Workload {
    /// Seed.
    pub seed: u64,
    /// Fat tree the paths run over.
    pub tree: FatTree,
    /// Flow population.
    pub flows: Flows,
    /// Key-Write redundancy.
    pub redundancy: u8,
    /// Append lists the loss events spread over.
    pub lists: u32,
    /// Priority given to every report.
    pub priority: Priority,
}

impl Workload {
    /// The demo's defaults.
    pub fn new(seed: u64) -> Workload {
        Workload {
            seed,
            tree: FatTree { k: 8, id_base: 1 },
            flows: Flows {
                seed: seed ^ 0xf10,
                shape: 1.3,
            },
            redundancy: 2,
            lists: 8,
            priority: Priority::Medium,
        }
    }

    fn header(&self, seq: u32) -> ReportHeader {
        ReportHeader {
            profile: Profile::Extended,
            immediate: false,
            retransmittable: false,
            seq: Some(seq),
            priority: self.priority,
        }
    }

    /// Flow `i`'s INT path as a 20-byte value (five big-endian switch IDs).
    pub fn path_value(&self, i: u64) -> [u8; 20] {
        let p = self.tree.path(mix(self.seed ^ 0x9a7 ^ i));
        let mut v = [0u8; 20];
        for (h, id) in p.iter().enumerate() {
            v[4 * h..4 * h + 4].copy_from_slice(&id.to_be_bytes());
        }
        v
    }

    /// The Key-Write report carrying flow `i`'s path.
    pub fn path_report(&self, i: u64) -> Report {
        let key = Key::new(&self.flows.tuple(i)).expect("13-byte key");
        let value = Value::new(&self.path_value(i)).expect("20-byte value");
        Report {
            header: self.header(i as u32),
            primitive: Primitive::KeyWrite {
                redundancy: self.redundancy,
                key,
                value,
            },
        }
    }

    /// Loss event `j`: (list, 18-byte entry: flow 5-tuple, drop reason, packet sequence).
    pub fn loss_event(&self, j: u64) -> (u32, [u8; 18]) {
        let r = mix(self.seed ^ 0x1055 ^ j);
        let flow = r % 1_000_003;
        let mut e = [0u8; 18];
        e[..13].copy_from_slice(&self.flows.tuple(flow));
        e[13] = 1 + (r >> 20) as u8 % 7;
        e[14..18].copy_from_slice(&(j as u32).to_be_bytes());
        ((r >> 40) as u32 % self.lists.max(1), e)
    }

    /// The Append report of loss event `j`.
    pub fn loss_report(&self, j: u64) -> Report {
        let (list, e) = self.loss_event(j);
        Report {
            header: self.header(j as u32),
            primitive: Primitive::Append {
                list,
                value: Value::new(&e).expect("18 bytes"),
            },
        }
    }

    /// A Key-Increment report: host `h` (an IPv4 address as the key) saw `bytes` bytes.
    pub fn counter_report(&self, i: u64, hosts: u64) -> (Key, u64, Report) {
        let host = i % hosts.max(1);
        let key = Key::new(&(0x0A00_0000u32 | host as u32).to_be_bytes()).expect("4 bytes");
        let bytes = 64 + mix(self.seed ^ i) % 1436;
        let r = Report {
            header: self.header(i as u32),
            primitive: Primitive::KeyIncrement {
                redundancy: self.redundancy,
                key,
                delta: bytes,
            },
        };
        (key, bytes, r)
    }

    /// The five postcards of flow `i`'s path (hop 0..5, path length 5).
    pub fn postcards(&self, i: u64) -> [Report; 5] {
        let key = Key::new(&self.flows.tuple(i)).expect("13-byte key");
        let p = self.tree.path(mix(self.seed ^ 0x9a7 ^ i));
        std::array::from_fn(|h| Report {
            header: self.header(i as u32),
            primitive: Primitive::Postcard {
                flow: key,
                hop: h as u8,
                path_len: 5,
                value: p[h],
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deterministic_and_distinct() {
        let w = Workload::new(7);
        assert_eq!(w.path_report(5), w.path_report(5));
        assert_ne!(w.flows.tuple(1), w.flows.tuple(2));
        let p = w.tree.path(3);
        assert!(p.iter().all(|&id| id >= 1 && id < 1 + w.tree.switches()));
        let (l, e) = w.loss_event(9);
        assert!(l < w.lists);
        assert_eq!(&e[14..], &9u32.to_be_bytes());
    }

    #[test]
    fn flow_sizes_are_heavy_tailed() {
        let f = Flows {
            seed: 1,
            shape: 1.2,
        };
        let sizes: Vec<u64> = (0..100_000).map(|i| f.packets(i)).collect();
        let mean = sizes.iter().sum::<u64>() as f64 / sizes.len() as f64;
        let mut s = sizes.clone();
        s.sort_unstable();
        let median = s[s.len() / 2] as f64;
        assert!(mean > 2.0 * median, "mean {mean} vs median {median}");
        let top =
            s[s.len() * 99 / 100..].iter().sum::<u64>() as f64 / sizes.iter().sum::<u64>() as f64;
        assert!(top > 0.2, "top 1% of flows carry {top} of packets");
    }
}

/// Sketch-Merge workload: every switch of a fat tree summarises the flows crossing it in a
/// Count-Min sketch (packets per 5-tuple) and a HyperLogLog (distinct 5-tuples), per epoch.
/// The flows, their paths and their sizes are [`Flows`] and [`FatTree`]'s, so the ground
/// truth (each flow's packet count, the distinct count) is known exactly.
#[derive(Debug, Clone, Copy)]
pub struct SketchWorkload {
    /// The network.
    pub tree: FatTree,
    /// The flow population.
    pub flows: Flows,
    /// Flows per epoch.
    pub flows_per_epoch: u64,
    /// Count-Min geometry.
    pub cm: dta_proto::sketch::SketchShape,
    /// HyperLogLog geometry.
    pub hll: dta_proto::sketch::SketchShape,
}

/// One epoch of a [`SketchWorkload`]: the switches' sketches and the truth.
#[derive(Debug, Clone)]
pub struct SketchEpoch {
    /// Per switch (index = switch ID − `id_base`): its Count-Min and HyperLogLog.
    pub switches: Vec<(dta_proto::sketch::Sketch, dta_proto::sketch::Sketch)>,
    /// The same sketches built centrally from all traffic (each flow counted once, at its
    /// first hop; Count-Min merged over switches counts a flow at every hop it crosses, so
    /// the central Count-Min here is built the same way: once per hop).
    pub central: (dta_proto::sketch::Sketch, dta_proto::sketch::Sketch),
    /// Each flow's key and its true packets summed over the hops it crosses (what the merged
    /// Count-Min estimates), and its packet count.
    pub truth: Vec<(Key, u64, u64)>,
}

impl SketchWorkload {
    /// Epoch `e`'s flows crossing the tree, sketched per switch.
    pub fn epoch(&self, e: u64) -> SketchEpoch {
        use dta_proto::sketch::Sketch;
        let n = self.tree.switches() as usize;
        let mut switches = vec![(Sketch::new(self.cm), Sketch::new(self.hll)); n];
        let mut central = (Sketch::new(self.cm), Sketch::new(self.hll));
        let mut truth = Vec::with_capacity(self.flows_per_epoch as usize);
        for j in 0..self.flows_per_epoch {
            let i = e * self.flows_per_epoch + j;
            let key = Key::new(&self.flows.tuple(i)).expect("13-byte key");
            let pkts = self.flows.packets(i).min(u32::MAX as u64 / 64) as u32;
            let path = self.tree.path(mix(self.flows.seed ^ i));
            let mut hops = 0u64;
            let mut seen = [u32::MAX; 5];
            for (h, &sw) in path.iter().enumerate() {
                // A path through one pod's ToR twice (same ToR both ends) counts it once.
                if seen[..h].contains(&sw) {
                    continue;
                }
                seen[h] = sw;
                let (cm, hll) = &mut switches[(sw - self.tree.id_base) as usize];
                cm.update(&key, pkts);
                hll.update(&key, 1);
                central.0.update(&key, pkts);
                hops += 1;
            }
            central.1.update(&key, 1);
            truth.push((key, pkts as u64 * hops, pkts as u64));
        }
        SketchEpoch {
            switches,
            central,
            truth,
        }
    }
}
