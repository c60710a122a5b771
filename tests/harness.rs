//! The in-memory harness: reporters → translator pipeline → software RNIC, with no sockets.
//!
//! Frames move between the two sans-I/O state machines through plain vectors, so tests control
//! time, loss, reordering and duplication exactly and run deterministically. The pipeline and
//! the responder are the production code; only the wires are simulated.

use std::net::{Ipv4Addr, SocketAddrV4};
use std::sync::Arc;

use dta_collector::config::{CollectorConfig, DeviceSection, StoreConfig, StoreKindConfig};
use dta_collector::memory::Region;
use dta_collector::rnic::responder::{DeviceConfig, QpConfig, Responder};
use dta_collector::store::{build_stores, Store};
use dta_proto::batch::{Datagram, IpMeta, TxBatch};
use dta_proto::hash::HashProfile;
use dta_proto::meta::{QpMeta, StoreKind, StoreMeta};
use dta_proto::wire::ethernet::MacAddr;
use dta_proto::wire::ib::{Psn, Qpn};
use dta_proto::wire::report::{ParseConfig, Priority, Profile, Report, ReportHeader};
use dta_proto::wire::roce::{parse_frame, L2L4_LEN};
use dta_translator::datapath::pipeline::{
    CollectorTarget, Pipeline, PipelineConfig, QpBinding, RateLimit, Route,
};
use dta_translator::datapath::qp::QpTuning;

/// Addresses used inside the harness.
pub const REPORTER: SocketAddrV4 = SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 200), 40041);
/// The translator's RoCEv2 address.
pub const TRANSLATOR: SocketAddrV4 = SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 101), 4791);
/// The collector's RoCEv2 address.
pub const COLLECTOR: SocketAddrV4 = SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 51), 4791);
/// Where reports are sent (the translator's report port).
pub const REPORT_DST: SocketAddrV4 = SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 101), 40040);

/// Simulated wire impairments (probabilities per frame).
#[derive(Debug, Clone, Copy, Default)]
pub struct Impairments {
    /// Drop translator → collector frames.
    pub loss: f64,
    /// Drop collector → translator responses.
    pub response_loss: f64,
    /// Duplicate translator → collector frames.
    pub duplicate: f64,
    /// The collector is stalled (a starved process): translator → collector frames wait in
    /// its receive queue, or are dropped if `stall_drops`, and nothing is answered until
    /// [`Harness::resume`].
    pub stalled: bool,
    /// While stalled, drop frames (a full receive queue) instead of holding them.
    pub stall_drops: bool,
    /// Swap adjacent translator → collector frames.
    pub reorder: f64,
    /// One-way delay of the wire in both directions (ns; 0 = delivered at once).
    pub one_way_ns: u64,
}

/// A one-shot, deterministic misordering of one translator → collector frame: the first
/// transmission of `psn` is taken off the wire when it would reach the collector and handed to
/// it only after `after` later frames did (`None`: never, the frame is lost). Resends of the
/// same PSN pass untouched, so exactly one frame arrives out of sequence.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Misorder {
    /// The PSN whose first transmission is delayed.
    pub psn: Psn,
    /// Later frames that reach the collector first (`None`: the frame is dropped).
    pub after: Option<u32>,
    /// When the frame was taken off the wire (simulated ns), once it was.
    pub taken_at: Option<u64>,
    /// When it finally reached the collector, if it did.
    pub delivered_at: Option<u64>,
    /// Later frames still to let past it while it is held.
    left: u32,
}

/// A deterministic PRNG for impairments.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// Next value in [0, 1).
    pub fn unit(&mut self) -> f64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        ((z ^ (z >> 31)) >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// Reporter → pipeline → responder, in memory.
pub struct Harness {
    /// The translator's pipeline (production code).
    pub pipeline: Pipeline,
    /// The software RNIC's responder (production code).
    pub rnic: Responder,
    /// The collector's stores.
    pub stores: Vec<Store>,
    /// Current time (ns).
    pub now: u64,
    /// Wire impairments.
    pub imp: Impairments,
    rng: Rng,
    tx: TxBatch,
    rnic_tx: TxBatch,
    /// Frames the translator sent (for inspection), if recording.
    pub sent_frames: Option<Vec<Vec<u8>>>,
    /// Non-RoCE datagrams the translator sent (DTA NACKs): (destination, payload).
    pub nacks: Vec<(SocketAddrV4, Vec<u8>)>,
    /// Frames dropped by the simulated wire.
    pub wire_drops: u64,
    /// Translator → collector frames the simulated wire dropped.
    pub frames_lost: u64,
    /// Frames waiting in a stalled collector's receive queue.
    held: Vec<Vec<u8>>,
    /// The one-shot misordering armed by [`Harness::misorder`], and its progress.
    pub misorder: Option<Misorder>,
    /// The frame it holds back.
    misordered: Option<Vec<u8>>,
    /// NAKs "PSN sequence error" still to drop on their way to the translator (one-shot
    /// response losses, counted down).
    pub drop_naks: u32,
    /// NAKs dropped that way.
    pub naks_dropped: u64,
    /// The newest PSN the translator has heard confirmed (an ACK naming it, or a NAK naming
    /// the PSN after it), for measuring recovery from outside the QP.
    pub heard_confirmed: Option<Psn>,
    /// When `heard_confirmed` last moved (simulated ns).
    pub heard_confirmed_at: u64,
    /// Frames on the wire to the collector, with their arrival time.
    to_rnic: std::collections::VecDeque<(u64, Vec<u8>)>,
    /// Responses on the wire to the translator, with their arrival time.
    to_translator: std::collections::VecDeque<(u64, Vec<u8>)>,
}

/// Pipeline settings a test may want to change.
#[derive(Debug, Clone)]
pub struct HarnessOptions {
    /// Pipeline configuration template (routes are filled in automatically when `None`).
    pub max_redundancy: u8,
    /// Append flush delay (ns).
    pub append_flush_ns: u64,
    /// Postcard cache slots.
    pub postcard_cache_slots: u32,
    /// Postcard redundancy.
    pub postcard_redundancy: u8,
    /// Postcard flush delay (ns).
    pub postcard_flush_ns: u64,
    /// QP tuning.
    pub qp: QpTuning,
    /// Rate limit.
    pub rate: RateLimit,
    /// Verify ICRC at the responder.
    pub verify_icrc: bool,
    /// Report parsing.
    pub parse: ParseConfig,
    /// Sketch-Merge settings.
    pub sketch: dta_translator::datapath::primitive::SketchSettings,
    /// Frames the translator's transmit batch holds (what a worker sends per I/O).
    pub tx_frames: usize,
    /// The first PSN of the first store's QP (later stores' QPs start 0x111 apart), e.g. just
    /// below 2^24 to make a test cross the PSN wrap.
    pub first_psn: u32,
}

impl Default for HarnessOptions {
    fn default() -> Self {
        HarnessOptions {
            max_redundancy: 4,
            append_flush_ns: 1_000_000,
            postcard_cache_slots: 1024,
            postcard_redundancy: 1,
            postcard_flush_ns: 0,
            qp: QpTuning {
                ack_every: 16,
                ack_timeout_ns: 2_000_000,
                ..QpTuning::default()
            },
            rate: RateLimit::default(),
            verify_icrc: true,
            parse: ParseConfig::default(),
            sketch: Default::default(),
            tx_frames: 4096,
            first_psn: 0xABC000,
        }
    }
}

fn first_of(stores: &[StoreMeta], kind: &str) -> Route {
    stores
        .iter()
        .position(|s| s.kind.name() == kind)
        .map_or(Route::None, Route::Single)
}

impl Harness {
    /// Builds a collector with `stores`, a one-worker pipeline writing to it, and connects
    /// them with one QP per store.
    pub fn new(stores: Vec<StoreConfig>, o: HarnessOptions) -> Harness {
        let cfg = CollectorConfig {
            collector: DeviceSection {
                roce: COLLECTOR,
                hugepages: false,
                verify_icrc: o.verify_icrc,
                ..DeviceSection::default()
            },
            static_peers: vec![],
            stores,
            export: Default::default(),
            pull: None,
        };
        let mut rnic = Responder::new(DeviceConfig {
            local: COLLECTOR,
            local_mac: MacAddr([2, 0, 0, 0, 0, 0x51]),
            pmtu: 4096,
            l2_frames: true,
        });
        let mut stores = build_stores(&cfg, &mut rnic).expect("stores build");
        let mut metas = Vec::new();
        for (i, s) in stores.iter_mut().enumerate() {
            let psn = Psn::new(o.first_psn.wrapping_add(i as u32 * 0x111) & 0xFF_FFFF);
            let qpn = rnic.create_qp(QpConfig {
                peer: TRANSLATOR,
                peer_mac: MacAddr([2, 0, 0, 0, 0, 1]),
                peer_qpn: Qpn::new(0x100 + i as u32),
                rq_psn: psn,
                sq_psn: Psn::new(0),
                verify_icrc: o.verify_icrc,
                recv_credits: 1 << 20,
            });
            s.meta.qps.push(QpMeta {
                qpn: qpn.value(),
                psn: psn.value(),
                peer_qpn: 0x100 + i as u32,
            });
            metas.push(s.meta.clone());
        }
        let target = CollectorTarget {
            roce: COLLECTOR,
            mac: MacAddr([2, 0, 0, 0, 0, 0x51]),
            stores: metas
                .iter()
                .map(|m| {
                    (
                        m.clone(),
                        QpBinding {
                            local_qpn: Qpn::new(m.qps[0].peer_qpn),
                            remote_qpn: Qpn::new(m.qps[0].qpn),
                            start_psn: Psn::new(m.qps[0].psn),
                        },
                    )
                })
                .collect(),
        };
        let pc = PipelineConfig {
            worker: 0,
            workers: 1,
            parse: o.parse,
            max_redundancy: o.max_redundancy,
            l2_frames: true,
            local: TRANSLATOR,
            local_mac: MacAddr([2, 0, 0, 0, 0, 1]),
            nack_port: 40044,
            append_flush_ns: o.append_flush_ns,
            postcard_flush_ns: o.postcard_flush_ns,
            postcard_cache_slots: o.postcard_cache_slots,
            postcard_redundancy: o.postcard_redundancy,
            qp: o.qp,
            rate: o.rate,
            backlog: 1024,
            max_reporters: 64,
            route_keywrite: first_of(&metas, "keywrite"),
            route_keyincrement: first_of(&metas, "keyincrement"),
            route_postcard: first_of(&metas, "postcard"),
            sketch: o.sketch,
        };
        let pipeline = Pipeline::new(pc, &[target]).expect("pipeline builds");
        Harness {
            pipeline,
            rnic,
            stores,
            now: 1_000_000,
            imp: Impairments::default(),
            rng: Rng(42),
            tx: TxBatch::new(o.tx_frames.max(1), 2048),
            rnic_tx: TxBatch::new(4096, 2048),
            sent_frames: None,
            nacks: Vec::new(),
            wire_drops: 0,
            frames_lost: 0,
            held: Vec::new(),
            misorder: None,
            misordered: None,
            drop_naks: 0,
            naks_dropped: 0,
            heard_confirmed: None,
            heard_confirmed_at: 0,
            to_rnic: Default::default(),
            to_translator: Default::default(),
        }
    }

    /// The store called `name`.
    pub fn store(&self, name: &str) -> &Store {
        self.stores
            .iter()
            .find(|s| s.meta.name == name)
            .expect("store exists")
    }

    /// The region of store `name`.
    pub fn region(&self, name: &str) -> Arc<Region> {
        self.store(name).region.clone()
    }

    /// Sends raw report datagrams from `from`, then moves every resulting frame.
    pub fn send_raw_from(&mut self, from: SocketAddrV4, payloads: &[&[u8]]) {
        for chunk in payloads.chunks(64) {
            let burst: Vec<Datagram<'_>> = chunk
                .iter()
                .map(|p| Datagram {
                    src: from,
                    dst: REPORT_DST,
                    ip: None,
                    payload: p,
                })
                .collect();
            self.pipeline.handle_reports(self.now, &burst, &mut self.tx);
            self.pump();
        }
    }

    /// Sends raw report datagrams from the default reporter.
    pub fn send_raw(&mut self, payloads: &[&[u8]]) {
        self.send_raw_from(REPORTER, payloads);
    }

    /// Emits reports in `profile` and sends them.
    pub fn send(&mut self, reports: &[Report], profile: Profile) {
        let bufs: Vec<Vec<u8>> = reports
            .iter()
            .map(|r| {
                let mut b = vec![0u8; 128];
                let n = r.emit(profile, &mut b).expect("report emits");
                b.truncate(n);
                b
            })
            .collect();
        let refs: Vec<&[u8]> = bufs.iter().map(|b| b.as_slice()).collect();
        self.send_raw(&refs);
    }

    /// Advances time by `ns`, firing the pipeline's timers and delivering what the wire
    /// carries, in time order, and moves frames.
    pub fn advance(&mut self, ns: u64) {
        let end = self.now + ns;
        loop {
            let wire = [self.to_rnic.front(), self.to_translator.front()]
                .into_iter()
                .flatten()
                .map(|(t, _)| *t)
                .min();
            let next = [self.pipeline.next_deadline(), wire]
                .into_iter()
                .flatten()
                .min()
                .filter(|&d| d <= end);
            match next {
                Some(d) => {
                    self.now = self.now.max(d);
                    self.pipeline.poll(self.now, &mut self.tx);
                    self.pump();
                }
                None => break,
            }
        }
        self.now = end;
        self.pipeline.poll(self.now, &mut self.tx);
        self.pump();
    }

    /// Flushes every partial batch and cache entry (a clean shutdown) and moves frames.
    pub fn flush(&mut self) {
        while !self.pipeline.flush_all(self.now, &mut self.tx) {
            self.pump();
        }
        self.pump();
    }

    /// [`Harness::flush`] for at most `rounds` rounds (a QP that cannot take the rest, e.g. a
    /// broken one, never lets it finish). True if everything was written.
    pub fn flush_for(&mut self, rounds: usize) -> bool {
        for _ in 0..rounds {
            if self.pipeline.flush_all(self.now, &mut self.tx) {
                self.pump();
                return true;
            }
            self.pump();
        }
        false
    }

    /// Moves frames translator → wire → responder → wire → translator until nothing more
    /// is due at the current time (with a one-way delay, frames still on the wire arrive in a
    /// later [`Harness::advance`]).
    pub fn pump(&mut self) {
        let delay = self.imp.one_way_ns;
        for _ in 0..100_000 {
            // What the QPs hold for sending (queued, resent) joins what is in the batch.
            self.pipeline.poll_transmit(self.now, &mut self.tx);
            let mut moved = false;
            // Translator → wire.
            let mut frames: Vec<Vec<u8>> = Vec::new();
            for i in 0..self.tx.len() {
                let f = self.tx.frame(i);
                if self.tx.dest(i).port() == 40044
                    || parse_frame(f)
                        .map(|p| p.udp.dst_port != 4791)
                        .unwrap_or(true)
                {
                    // A DTA NACK (a plain UDP datagram inside an Ethernet frame).
                    let payload = f.get(L2L4_LEN..).unwrap_or(&[]).to_vec();
                    self.nacks.push((self.tx.dest(i), payload));
                    continue;
                }
                frames.push(f.to_vec());
            }
            moved |= !self.tx.is_empty();
            self.tx.clear();
            if let Some(rec) = self.sent_frames.as_mut() {
                rec.extend(frames.iter().cloned());
            }
            let mut wire: Vec<Vec<u8>> = Vec::new();
            for f in frames {
                if self.rng.unit() < self.imp.loss {
                    self.wire_drops += 1;
                    self.frames_lost += 1;
                    continue;
                }
                if self.rng.unit() < self.imp.duplicate {
                    wire.push(f.clone());
                }
                wire.push(f);
            }
            if self.imp.reorder > 0.0 {
                for i in 1..wire.len() {
                    if self.rng.unit() < self.imp.reorder {
                        wire.swap(i - 1, i);
                    }
                }
            }
            let at = self.now + delay;
            self.to_rnic.extend(wire.into_iter().map(|f| (at, f)));
            // Wire → collector.
            while self.to_rnic.front().is_some_and(|(t, _)| *t <= self.now) {
                let (_, f) = self.to_rnic.pop_front().expect("checked");
                moved = true;
                self.arrive(f);
            }
            // Collector → wire.
            for i in 0..self.rnic_tx.len() {
                if self.rng.unit() < self.imp.response_loss {
                    self.wire_drops += 1;
                    continue;
                }
                if self.drop_naks > 0 && is_seq_nak(self.rnic_tx.frame(i)) {
                    self.drop_naks -= 1;
                    self.naks_dropped += 1;
                    self.wire_drops += 1;
                    continue;
                }
                self.to_translator
                    .push_back((self.now + delay, self.rnic_tx.frame(i).to_vec()));
            }
            moved |= !self.rnic_tx.is_empty();
            self.rnic_tx.clear();
            // Wire → translator.
            while self
                .to_translator
                .front()
                .is_some_and(|(t, _)| *t <= self.now)
            {
                let (_, r) = self.to_translator.pop_front().expect("checked");
                moved = true;
                if let Ok(p) = parse_frame(&r) {
                    self.note_confirmed(&p.roce);
                    let src = SocketAddrV4::new(p.ip.src, p.udp.src_port);
                    let dst = SocketAddrV4::new(p.ip.dst, p.udp.dst_port);
                    let d = Datagram {
                        src,
                        dst,
                        ip: None,
                        payload: &r[L2L4_LEN..],
                    };
                    self.pipeline.handle_responses(self.now, &[d], &mut self.tx);
                }
            }
            if !moved && self.tx.is_empty() {
                return;
            }
        }
    }

    /// Arms a one-shot misordering (see [`Misorder`]): the first transmission of `psn` reaches
    /// the collector after `after` later frames, or never (`None`).
    pub fn misorder(&mut self, psn: Psn, after: Option<u32>) {
        self.misorder = Some(Misorder {
            psn,
            after,
            taken_at: None,
            delivered_at: None,
            left: after.unwrap_or(0),
        });
        self.misordered = None;
    }

    /// A translator → collector frame leaves the wire: the misordering may take it or let the
    /// frame it holds follow it; the rest goes to the collector (or its stalled queue).
    fn arrive(&mut self, f: Vec<u8>) {
        let Some(m) = self.misorder.as_mut() else {
            return self.hand_to_collector(f);
        };
        if m.taken_at.is_none() {
            let psn = parse_frame(&f).ok().map(|p| p.roce.bth.psn);
            if psn == Some(m.psn) {
                m.taken_at = Some(self.now);
                if m.after == Some(0) {
                    m.delivered_at = Some(self.now);
                    return self.hand_to_collector(f);
                }
                if m.after.is_some() {
                    self.misordered = Some(f);
                } else {
                    self.wire_drops += 1;
                    self.frames_lost += 1;
                }
                return;
            }
            return self.hand_to_collector(f);
        }
        self.hand_to_collector(f);
        let m = self.misorder.as_mut().expect("checked");
        if self.misordered.is_some() {
            m.left -= 1;
            if m.left == 0 {
                m.delivered_at = Some(self.now);
                let held = self.misordered.take().expect("checked");
                self.hand_to_collector(held);
            }
        }
    }

    /// Hands a frame to the collector, or to its receive queue while it is stalled.
    fn hand_to_collector(&mut self, f: Vec<u8>) {
        if !self.imp.stalled {
            self.deliver_to_rnic(&f);
        } else if self.imp.stall_drops {
            self.wire_drops += 1;
        } else {
            self.held.push(f);
        }
    }

    /// Tracks the newest PSN a response delivered to the translator confirms.
    fn note_confirmed(&mut self, p: &dta_proto::wire::roce::RocePacket<'_>) {
        use dta_proto::wire::ib::{NakCode, Syndrome};
        let Some(aeth) = p.aeth else {
            return;
        };
        let psn = match aeth.syndrome {
            Syndrome::Ack { .. } => p.bth.psn,
            Syndrome::Nak(NakCode::PsnSequenceError) | Syndrome::RnrNak { .. } => p.bth.psn.sub(1),
            _ => return,
        };
        if self.heard_confirmed.is_none_or(|h| psn.diff(h) > 0) {
            self.heard_confirmed = Some(psn);
            self.heard_confirmed_at = self.now;
        }
    }

    /// Ends a stall: the collector processes the frames its receive queue held, in order.
    pub fn resume(&mut self) {
        self.imp.stalled = false;
        for f in std::mem::take(&mut self.held) {
            self.deliver_to_rnic(&f);
        }
        self.pump();
    }

    /// Hands one full Ethernet frame to the responder, as a raw backend would.
    pub fn deliver_to_rnic(&mut self, frame: &[u8]) {
        let Ok(p) = parse_frame(frame) else {
            // Let the responder count it as malformed.
            let d = Datagram {
                src: TRANSLATOR,
                dst: COLLECTOR,
                ip: None,
                payload: frame.get(L2L4_LEN..).unwrap_or(&[]),
            };
            self.rnic.handle(&d, &mut self.rnic_tx);
            return;
        };
        let d = Datagram {
            src: SocketAddrV4::new(p.ip.src, p.udp.src_port),
            dst: SocketAddrV4::new(p.ip.dst, p.udp.dst_port),
            ip: Some(IpMeta {
                ident: p.ip.ident,
                dont_frag: p.ip.dont_frag,
                ttl: p.ip.ttl,
                tos: p.ip.tos,
            }),
            payload: &frame[L2L4_LEN..],
        };
        self.rnic.handle(&d, &mut self.rnic_tx);
    }

    /// Responses the responder queued but that were not yet moved (for tests that deliver
    /// frames by hand).
    pub fn take_rnic_responses(&mut self) -> Vec<Vec<u8>> {
        let v = (0..self.rnic_tx.len())
            .map(|i| self.rnic_tx.frame(i).to_vec())
            .collect();
        self.rnic_tx.clear();
        v
    }
}

/// True if `frame` is a NAK "PSN sequence error".
fn is_seq_nak(frame: &[u8]) -> bool {
    use dta_proto::wire::ib::{NakCode, Syndrome};
    parse_frame(frame).is_ok_and(|p| {
        p.roce
            .aeth
            .is_some_and(|a| a.syndrome == Syndrome::Nak(NakCode::PsnSequenceError))
    })
}

/// The header most tests give their reports: extended profile, no immediate, not
/// retransmittable, medium priority, sequence number `seq`.
pub fn extended_header(seq: u32) -> ReportHeader {
    ReportHeader {
        profile: Profile::Extended,
        immediate: false,
        retransmittable: false,
        seq: Some(seq),
        priority: Priority::Medium,
    }
}

/// The Key-Write store most tests write: named `kw`, `slots` slots of `slot_size` bytes, the
/// independent hash profile, redundancy `n`.
pub fn keywrite_store(slots: u32, slot_size: u32, n: u8) -> StoreConfig {
    StoreConfig {
        name: "kw".into(),
        port: None,
        cm_allow: None,
        kind: StoreKindConfig::new(StoreKind::KeyWrite {
            slots,
            slot_size,
            hash: HashProfile::Independent,
        })
        .with_redundancy(n),
    }
}

/// A UDP port on `ip` free right now (bound and released; loopback tests use it for
/// addresses that must be known before the socket that uses them exists).
pub fn free_port(ip: Ipv4Addr) -> u16 {
    std::net::UdpSocket::bind(SocketAddrV4::new(ip, 0))
        .expect("bind an ephemeral UDP port")
        .local_addr()
        .expect("its address")
        .port()
}
