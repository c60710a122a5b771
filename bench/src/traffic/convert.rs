//! The conversion: a capture's packets, laid over a [`Topology`], become the DTA reports the
//! switches on their paths would send, in capture-time order, with the ground truth beside
//! them. The model is in `mod.rs`'s documentation.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddrV4};

use dta_proto::sketch::{Sketch, SketchShape};
use dta_proto::wire::report::{Primitive, Priority, Profile, Report, ReportHeader, MAX_EMIT_LEN};
use dta_proto::{Key, Value};
use serde::{Deserialize, Serialize};

use super::capture::{CaptureStats, Packet};
use super::tcp::{Segment, SeqSpace};
use super::topology::{Path, Topology};
use crate::gen::{digest, Scenario, SketchStores, TRANSLATOR_REPORTS};
use crate::trace::Trace;

/// Drop reason of a loss event inferred from a TCP retransmission (the 14th byte of the
/// 18-byte NetSeer-style entry).
pub const LOSS_REASON_RETRANSMISSION: u8 = 1;
/// Key suffix of a flow's packet counter (Key-Increment key = 5-tuple ‖ suffix).
pub const COUNTER_PACKETS: u8 = b'P';
/// Key suffix of a flow's byte counter.
pub const COUNTER_BYTES: u8 = b'B';

/// How the conversion models the network.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct TrafficOptions {
    /// Epoch length (ns of output time): per-flow counters and per-switch sketches are sent
    /// at the end of every epoch that carried traffic.
    pub epoch_ns: u64,
    /// Output time runs this many times faster than the capture's (1: the capture's pace).
    pub speed: f64,
    /// Postcards for every n-th packet of a flow (1: every packet).
    pub postcard_every: u32,
    /// Rate every egress queue drains at (bits/s).
    pub link_bps: f64,
    /// Queue depth (bytes) above which a switch reports congestion.
    pub queue_threshold: u32,
}

impl Default for TrafficOptions {
    fn default() -> Self {
        TrafficOptions {
            epoch_ns: 1_000_000_000,
            speed: 1.0,
            postcard_every: 1,
            link_bps: 10e9,
            queue_threshold: 30_000,
        }
    }
}

impl TrafficOptions {
    /// Checks the values.
    pub fn validate(&self) -> Result<(), String> {
        if self.epoch_ns == 0 {
            return Err("--epoch must be positive".into());
        }
        if !(self.speed.is_finite() && self.speed > 0.0) {
            return Err(format!("--speed must be positive, not {}", self.speed));
        }
        if self.postcard_every == 0 {
            return Err("--postcard-every must be at least 1".into());
        }
        if !(self.link_bps.is_finite() && self.link_bps > 0.0) {
            return Err("--link-gbps must be positive".into());
        }
        if self.queue_threshold == 0 {
            return Err("--queue-threshold must be at least 1 byte".into());
        }
        Ok(())
    }
}

/// Reports sent, by kind.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReportCounts {
    /// Key-Write INT paths (one per flow).
    pub keywrite: u64,
    /// Postcards (one per hop of each sampled packet).
    pub postcards: u64,
    /// Append loss events (TCP retransmissions).
    pub loss: u64,
    /// Append congestion events (the queue model).
    pub congestion: u64,
    /// Key-Increment flow counters (packets and bytes, per flow per epoch).
    pub counters: u64,
    /// Sketch-Merge column reports (Count-Min and HyperLogLog, per switch per epoch).
    pub sketch: u64,
}

impl ReportCounts {
    /// All of them.
    pub fn total(&self) -> u64 {
        self.keywrite + self.postcards + self.loss + self.congestion + self.counters + self.sketch
    }
}

impl std::fmt::Display for ReportCounts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Key-Write paths {}, postcards {}, loss events {}, congestion events {}, counters \
             {}, sketch reports {}",
            self.keywrite, self.postcards, self.loss, self.congestion, self.counters, self.sketch
        )
    }
}

/// One flow (one direction of a conversation) in the ground truth.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FlowTruth {
    /// The 13-byte key reports carry (hex): source, destination, protocol, ports; an IPv6
    /// address is folded to 32 bits (`gen::digest` of its 16 bytes).
    pub key: String,
    /// Source address.
    pub src: String,
    /// Destination address.
    pub dst: String,
    /// IP protocol.
    pub proto: u8,
    /// Source port.
    pub sport: u16,
    /// Destination port.
    pub dport: u16,
    /// Packets.
    pub packets: u64,
    /// Bytes (IP length).
    pub bytes: u64,
    /// Its path: switch IDs, first hop first.
    pub path: Vec<u32>,
    /// Frame number of its first packet.
    pub first_frame: u32,
    /// TCP retransmissions seen.
    pub retransmissions: u64,
}

/// One loss event.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LossTruth {
    /// The retransmitted segment's frame number in the capture.
    pub frame: u32,
    /// When it was reported (ns).
    pub ts_ns: u64,
    /// Index of the flow in `flows`.
    pub flow: u32,
    /// Its TCP sequence number.
    pub seq: u32,
    /// The reporting switch (the path's deepest queue when the segment passed).
    pub switch: u32,
    /// The Append list.
    pub list: u32,
    /// The 18-byte entry (hex).
    pub entry: String,
}

/// One congestion event.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CongestionTruth {
    /// The frame that pushed the queue over the threshold.
    pub frame: u32,
    /// When (ns).
    pub ts_ns: u64,
    /// The switch.
    pub switch: u32,
    /// The congested egress: `switch N` or `host ADDRESS`.
    pub port: String,
    /// Queue depth (bytes).
    pub depth: u32,
    /// The Append list.
    pub list: u32,
}

/// One epoch that carried traffic.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EpochTruth {
    /// The epoch number the sketches carry (1 + whole epochs since the first packet).
    pub epoch: u32,
    /// Its start (ns).
    pub start_ns: u64,
    /// Its end, when its counters and sketches were sent (ns).
    pub end_ns: u64,
    /// Switches that sent sketches (every switch of the topology).
    pub switches: u32,
    /// Flows active in the epoch: (index in `flows`, packets in the epoch).
    pub flows: Vec<(u32, u64)>,
    /// The network-wide HyperLogLog's estimate of the flows (the merge of every switch's).
    pub hll_estimate: f64,
}

/// The ground truth of a conversion (`FILE.json`'s `traffic` section).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TrafficTruth {
    /// The capture file.
    pub capture: String,
    /// The topology (`fat-tree:k=K` or the file).
    pub topology: String,
    /// Switch IDs of the topology, by index.
    pub switch_ids: Vec<u32>,
    /// What reading the capture found.
    pub capture_stats: CaptureStats,
    /// The model's parameters.
    pub options: TrafficOptions,
    /// Reports by kind.
    pub reports: ReportCounts,
    /// Flows, in order of their first packet.
    pub flows: Vec<FlowTruth>,
    /// Loss events, in order.
    pub losses: Vec<LossTruth>,
    /// Congestion events, in order.
    pub congestion: Vec<CongestionTruth>,
    /// Epochs with traffic, in order.
    pub epochs: Vec<EpochTruth>,
}

/// What `dta gen --traffic` writes as `FILE.json`: the scenario (what `dta replay` reads) and
/// the ground truth.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TrafficFile {
    /// The scenario.
    #[serde(flatten)]
    pub scenario: Scenario,
    /// The ground truth.
    pub traffic: TrafficTruth,
}

/// The reports and their send times.
#[derive(Debug, Clone)]
pub struct Converted {
    /// The reports.
    pub trace: Trace,
    /// Report `i` is sent at `times_ns[i]` (ns since the Unix epoch), non-decreasing.
    pub times_ns: Vec<u64>,
    /// The ground truth.
    pub truth: TrafficTruth,
}

fn addr_digest(a: &IpAddr) -> u32 {
    match a {
        IpAddr::V4(v) => digest(&v.octets()),
        IpAddr::V6(v) => digest(&v.octets()),
    }
}

/// The 13-byte flow key of a packet.
pub fn flow_key(p: &Packet) -> [u8; 13] {
    let fold = |a: &IpAddr| match a {
        IpAddr::V4(v) => v.octets(),
        IpAddr::V6(v) => digest(&v.octets()).to_be_bytes(),
    };
    let mut k = [0u8; 13];
    k[..4].copy_from_slice(&fold(&p.ip.src));
    k[4..8].copy_from_slice(&fold(&p.ip.dst));
    k[8] = p.ip.proto;
    k[9..11].copy_from_slice(&p.ip.sport.to_be_bytes());
    k[11..13].copy_from_slice(&p.ip.dport.to_be_bytes());
    k
}

/// The address switch `i` (topology index) sends its reports from: 10.1.x.y.
pub fn switch_addr(i: u32) -> SocketAddrV4 {
    SocketAddrV4::new(Ipv4Addr::new(10, 1, (i >> 8) as u8, i as u8), 40041)
}

/// Hex of bytes.
pub fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

struct FlowState {
    key: [u8; 13],
    path: Path,
    packets: u64,
    epoch_packets: u64,
    epoch_bytes: u64,
    /// The epoch `epoch_*` count for.
    epoch: u32,
    seq: SeqSpace,
}

/// An egress queue: depth after the last packet, when, and whether it is in a congestion
/// episode.
#[derive(Default)]
struct Queue {
    bytes: f64,
    /// When `bytes` was last brought up to date (ns, fractional).
    at_ns: f64,
    congested: bool,
}

struct Emitter {
    trace: Trace,
    times: Vec<u64>,
    seq: Vec<u32>,
    counts: ReportCounts,
    buf: [u8; MAX_EMIT_LEN],
}

impl Emitter {
    fn report(&mut self, t: u64, sw: u32, primitive: Primitive) -> Result<(), String> {
        let seq = &mut self.seq[sw as usize];
        *seq = seq.wrapping_add(1);
        let r = Report {
            header: ReportHeader {
                profile: Profile::Extended,
                immediate: false,
                retransmittable: false,
                seq: Some(*seq),
                priority: Priority::Medium,
            },
            primitive,
        };
        let n = r
            .emit(Profile::Extended, &mut self.buf)
            .map_err(|e| format!("emit: {e}"))?;
        self.trace
            .push(switch_addr(sw), TRANSLATOR_REPORTS, &self.buf[..n]);
        self.times.push(t);
        Ok(())
    }

    /// An Append report of `entry` to `list`.
    fn append(&mut self, t: u64, sw: u32, list: u32, entry: &[u8]) -> Result<(), String> {
        let value = Value::new(entry).ok_or("an Append entry of 1..=32 bytes")?;
        self.report(t, sw, Primitive::Append { list, value })
    }

    fn raw(&mut self, t: u64, sw: u32, bytes: &[u8]) {
        self.trace.push(switch_addr(sw), TRANSLATOR_REPORTS, bytes);
        self.times.push(t);
    }
}

/// Converts `packets` (time-ordered, from `capture`) over `topo` into reports for the stores of
/// `sc` (extended profile; its `sketch` gives the sketch geometry).
pub fn convert(
    sc: &Scenario,
    topo: &mut Topology,
    packets: &[Packet],
    stats: &CaptureStats,
    capture: &str,
    o: &TrafficOptions,
) -> Result<Converted, String> {
    o.validate()?;
    let sk = sc.sketch.ok_or("the scenario has no Sketch-Merge stores")?;
    let (cm_shape, hll_shape) = (sk.cm_shape()?, sk.hll_shape()?);
    let n = topo.switches();
    if n > u16::MAX as usize {
        return Err(format!("{n} switches: at most 65,535"));
    }
    let mut run = Run {
        out: Emitter {
            trace: Trace::with_capacity(packets.len() * 8),
            times: Vec::with_capacity(packets.len() * 8),
            seq: vec![0; n],
            counts: ReportCounts::default(),
            buf: [0; MAX_EMIT_LEN],
        },
        truth: TrafficTruth {
            capture: capture.to_string(),
            topology: topo.name.clone(),
            switch_ids: topo.ids().to_vec(),
            capture_stats: stats.clone(),
            options: *o,
            reports: ReportCounts::default(),
            flows: Vec::new(),
            losses: Vec::new(),
            congestion: Vec::new(),
            epochs: Vec::new(),
        },
        flows: Vec::new(),
        by_key: HashMap::new(),
        queues: HashMap::new(),
        active: Vec::new(),
        sketches: Sketches::new(n, cm_shape, hll_shape),
        topo,
        sc,
        o: *o,
        t0: packets.first().map_or(0, |p| p.ts_ns),
        epoch: 0,
    };
    for p in packets {
        run.packet(p)?;
    }
    if run.epoch != 0 {
        run.close_epoch()?;
    }
    run.truth.reports = run.out.counts;
    Ok(Converted {
        trace: run.out.trace,
        times_ns: run.out.times,
        truth: run.truth,
    })
}

/// The conversion's state.
struct Run<'a> {
    out: Emitter,
    truth: TrafficTruth,
    flows: Vec<FlowState>,
    by_key: HashMap<[u8; 13], u32>,
    /// Egress queues by (switch index, next switch index or 2^32 | host digest).
    queues: HashMap<(u32, u64), Queue>,
    /// Flows with packets in the current epoch, in order of their first packet in it.
    active: Vec<u32>,
    sketches: Sketches,
    topo: &'a mut Topology,
    sc: &'a Scenario,
    o: TrafficOptions,
    /// The first packet's time: output time starts there, epoch 1 begins there.
    t0: u64,
    /// The current epoch (0: none yet).
    epoch: u64,
}

impl Run<'_> {
    /// Output time of a capture timestamp.
    fn scale(&self, ts: u64) -> u64 {
        self.t0 + (ts.saturating_sub(self.t0) as f64 / self.o.speed) as u64
    }

    fn packet(&mut self, p: &Packet) -> Result<(), String> {
        let t = self
            .scale(p.ts_ns)
            .max(*self.out.times.last().unwrap_or(&self.t0));
        let e = 1 + (t - self.t0) / self.o.epoch_ns;
        if e >= u32::MAX as u64 {
            return Err(format!(
                "the capture spans more than {} epochs of {} ns",
                u32::MAX - 1,
                self.o.epoch_ns
            ));
        }
        if e != self.epoch {
            if self.epoch != 0 {
                self.close_epoch()?;
                // Switches export on a timer, whether or not a packet crossed the network:
                // the epochs without traffic send their (empty) sketches too, so the merge
                // steps one epoch at a time as it does behind a real fleet.
                while self.epoch + 1 < e {
                    self.epoch += 1;
                    self.close_epoch()?;
                }
            }
            self.epoch = e;
        }
        let key = flow_key(p);
        let fi = match self.by_key.get(&key) {
            Some(&i) => i,
            None => self.new_flow(t, p, key)?,
        };
        let f = &mut self.flows[fi as usize];
        let ft = &mut self.truth.flows[fi as usize];
        f.packets += 1;
        ft.packets += 1;
        ft.bytes += p.ip.len as u64;
        if f.epoch != self.epoch as u32 {
            f.epoch = self.epoch as u32;
            f.epoch_packets = 0;
            f.epoch_bytes = 0;
            self.active.push(fi);
        }
        f.epoch_packets += 1;
        f.epoch_bytes += p.ip.len as u64;
        let (path, packets) = (f.path, f.packets);
        // Postcards: every hop of every n-th packet, hop by hop.
        if (packets - 1) % self.o.postcard_every as u64 == 0 {
            for (h, &sw) in path.hops().iter().enumerate() {
                let id = self.topo.id(sw);
                self.out.report(
                    t,
                    sw,
                    Primitive::Postcard {
                        flow: Key::new(&key).expect("13-byte key"),
                        hop: h as u8,
                        path_len: path.len() as u8,
                        value: id,
                    },
                )?;
                self.out.counts.postcards += 1;
            }
        }
        let deepest = self.queue(t, p, &path)?;
        // Loss: a retransmitted TCP segment, reported by the deepest queue on the path.
        if let Some(seg) = &p.ip.tcp {
            if self.flows[fi as usize].seq.segment(seg) == Segment::Retransmission {
                self.truth.flows[fi as usize].retransmissions += 1;
                let id = self.topo.id(deepest);
                let mut entry = [0u8; 18];
                entry[..13].copy_from_slice(&key);
                entry[13] = LOSS_REASON_RETRANSMISSION;
                entry[14..].copy_from_slice(&seg.seq.to_be_bytes());
                let list = id % self.sc.lists;
                self.out.append(t, deepest, list, &entry)?;
                self.out.counts.loss += 1;
                self.truth.losses.push(LossTruth {
                    frame: p.frame,
                    ts_ns: t,
                    flow: fi,
                    seq: seg.seq,
                    switch: id,
                    list,
                    entry: hex(&entry),
                });
            }
        }
        Ok(())
    }

    /// A flow's first packet: its path, and the sink's INT path report.
    fn new_flow(&mut self, t: u64, p: &Packet, key: [u8; 13]) -> Result<u32, String> {
        let path = self.topo.path(&key, &p.ip.src, &p.ip.dst);
        let i = self.flows.len() as u32;
        self.by_key.insert(key, i);
        self.flows.push(FlowState {
            key,
            path,
            packets: 0,
            epoch_packets: 0,
            epoch_bytes: 0,
            epoch: 0,
            seq: SeqSpace::default(),
        });
        let ids: Vec<u32> = path.hops().iter().map(|&h| self.topo.id(h)).collect();
        let value: Vec<u8> = ids.iter().flat_map(|id| id.to_be_bytes()).collect();
        self.truth.flows.push(FlowTruth {
            key: hex(&key),
            src: p.ip.src.to_string(),
            dst: p.ip.dst.to_string(),
            proto: p.ip.proto,
            sport: p.ip.sport,
            dport: p.ip.dport,
            packets: 0,
            bytes: 0,
            path: ids,
            first_frame: p.frame,
            retransmissions: 0,
        });
        // INT-MD: the sink (last hop) reports the flow's path once.
        let sink = *path.hops().last().expect("a path has a first hop");
        self.out.report(
            t,
            sink,
            Primitive::KeyWrite {
                redundancy: self.sc.redundancy,
                key: Key::new(&key).expect("13-byte key"),
                value: Value::new(&value).expect("at most 28 bytes"),
            },
        )?;
        self.out.counts.keywrite += 1;
        Ok(i)
    }

    /// The queue model: tandem FIFO queues. The packet reaches hop 0's egress queue at its
    /// capture time and each next hop when the queue before it has sent it; a queue drains at
    /// the link rate between arrivals and takes the packet. Returns the switch whose queue
    /// was the deepest.
    fn queue(&mut self, t: u64, p: &Packet, path: &Path) -> Result<u32, String> {
        let bytes_per_ns = self.o.link_bps / 8e9;
        let threshold = self.o.queue_threshold as f64;
        let mut deepest = (path.hops()[0], 0f64);
        let mut arrive = t as f64;
        for (h, &sw) in path.hops().iter().enumerate() {
            let next = path.hops().get(h + 1).copied();
            let port = match next {
                Some(n) => n as u64,
                None => 1 << 32 | u64::from(addr_digest(&p.ip.dst)),
            };
            let q = self.queues.entry((sw, port)).or_default();
            if arrive > q.at_ns {
                q.bytes = (q.bytes - (arrive - q.at_ns) * bytes_per_ns).max(0.0);
                q.at_ns = arrive;
            }
            if q.bytes < threshold / 2.0 {
                q.congested = false;
            }
            q.bytes += p.ip.len as f64;
            arrive = q.at_ns + q.bytes / bytes_per_ns;
            if q.bytes > deepest.1 {
                deepest = (sw, q.bytes);
            }
            if q.bytes <= threshold || q.congested {
                continue;
            }
            q.congested = true;
            let id = self.topo.id(sw);
            let depth = q.bytes.min(u32::MAX as f64) as u32;
            let mut entry = [0u8; 8];
            entry[..4].copy_from_slice(&id.to_be_bytes());
            entry[4..].copy_from_slice(&depth.to_be_bytes());
            let list = self.sc.lists + id % self.sc.lists;
            self.out.append(t, sw, list, &entry)?;
            self.out.counts.congestion += 1;
            self.truth.congestion.push(CongestionTruth {
                frame: p.frame,
                ts_ns: t,
                switch: id,
                port: match next {
                    Some(n) => format!("switch {}", self.topo.id(n)),
                    None => format!("host {}", p.ip.dst),
                },
                depth,
                list,
            });
        }
        Ok(deepest.0)
    }

    /// End of the current epoch: every active flow's counters (from its first hop), then every
    /// switch's sketches, column reports in column order, all at the epoch's end.
    fn close_epoch(&mut self) -> Result<(), String> {
        let (e, o) = (self.epoch, self.o);
        let end = self.t0 + e * o.epoch_ns;
        let t = end.max(*self.out.times.last().unwrap_or(&end));
        self.sketches.clear();
        let mut ep = EpochTruth {
            epoch: e as u32,
            start_ns: self.t0 + (e - 1) * o.epoch_ns,
            end_ns: t,
            switches: self.topo.switches() as u32,
            flows: Vec::with_capacity(self.active.len()),
            hll_estimate: 0.0,
        };
        for &fi in &self.active {
            let f = &self.flows[fi as usize];
            let first = f.path.hops()[0];
            for (suffix, delta) in [
                (COUNTER_PACKETS, f.epoch_packets),
                (COUNTER_BYTES, f.epoch_bytes),
            ] {
                let mut k = [0u8; 14];
                k[..13].copy_from_slice(&f.key);
                k[13] = suffix;
                self.out.report(
                    t,
                    first,
                    Primitive::KeyIncrement {
                        redundancy: self.sc.redundancy,
                        key: Key::new(&k).expect("14-byte key"),
                        delta,
                    },
                )?;
                self.out.counts.counters += 1;
            }
            let key = Key::new(&f.key).expect("13-byte key");
            let pkts = f.epoch_packets.min(u32::MAX as u64) as u32;
            for &sw in f.path.hops() {
                let (cm, hll) = &mut self.sketches.per_switch[sw as usize];
                cm.update(&key, pkts);
                hll.update(&key, 1);
            }
            self.sketches.central_hll.update(&key, 1);
            ep.flows.push((fi, f.epoch_packets));
        }
        self.active.clear();
        ep.hll_estimate = self.sketches.central_hll.cardinality().unwrap_or(0.0);
        for sw in 0..self.topo.switches() as u32 {
            let id = self.topo.id(sw);
            let (cm, hll) = &self.sketches.per_switch[sw as usize];
            for (sid, s) in [(SketchStores::CM_ID, cm), (SketchStores::HLL_ID, hll)] {
                let shape = s.shape();
                let per = (dta_proto::wire::sketch::MAX_CELL_BYTES / shape.column_bytes()) as u32;
                let per = per.clamp(1, u16::MAX as u32);
                let mut c = 0;
                while c < shape.columns {
                    let k = per.min(shape.columns - c);
                    let r = s.column_report(sid, id, e as u32, c, k).ok_or_else(|| {
                        format!("sketch {sid}: columns {c}+{k} do not fit a report")
                    })?;
                    self.out.raw(t, sw, &r);
                    self.out.counts.sketch += 1;
                    c += k;
                }
            }
        }
        self.truth.epochs.push(ep);
        Ok(())
    }
}

/// Every switch's Count-Min and HyperLogLog of the current epoch, and the merge of them all.
struct Sketches {
    per_switch: Vec<(Sketch, Sketch)>,
    central_hll: Sketch,
}

impl Sketches {
    fn new(n: usize, cm: SketchShape, hll: SketchShape) -> Sketches {
        Sketches {
            per_switch: vec![(Sketch::new(cm), Sketch::new(hll)); n],
            central_hll: Sketch::new(hll),
        }
    }

    fn clear(&mut self) {
        for (c, h) in &mut self.per_switch {
            c.cells_mut().fill(0);
            h.cells_mut().fill(0);
        }
        self.central_hll.cells_mut().fill(0);
    }
}
