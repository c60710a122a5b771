//! DART mode (Langlet et al., HotNets'21): reporters write RDMA themselves, with no
//! translator.
//!
//! A DART switch hashes each key to N slots and writes `(checksum, value)` into them with its
//! own RDMA WRITEs, over its own reliable-connected QP to the collector. DTA's case for a
//! translator is that thousands of such reporter QPs overwhelm an RNIC (its QP cache) and
//! cannot be kept in sequence by stateless switches. [`DartFleet`] runs that design for real so
//! the comparison is measured: `reporters` DART reporters, each with its own QP connected
//! through our RDMA_CM initiator (the collector sees one QP per switch), each crafting the same
//! Key-Write frames as the translator's Key-Write module into the same store layout, so the
//! same query engine answers. All reporters share one UDP socket (one host emulating many
//! switches); answers are demultiplexed by destination QPN.
//!
//! Each reporter is a one-store [`Pipeline`] (its QP state, retransmission ring and Key-Write
//! hashing), which is what a DART switch has to hold per collector. The ring is small
//! ([`DartOptions::window`]) because a switch has little memory per QP.

use std::net::{Ipv4Addr, SocketAddrV4};
use std::time::{Duration, Instant};

use dta_io::backend::Backend;
use dta_io::udp::{UdpBackend, UdpOptions, UdpSocket};
use dta_proto::batch::{Datagram, TxBatch};
use dta_proto::wire::ethernet::MacAddr;
use dta_proto::wire::report::Report;

use crate::control::cm::{incarnation_guid, CmInitiator};
use crate::datapath::pipeline::{CollectorTarget, Handoff, Pipeline, PipelineConfig};
use crate::datapath::qp::QpStats;
use crate::datapath::stats::TranslatorCounters;
use crate::run::connect_blocking;

/// The first QPN of a fleet: reporter i uses `QPN_BASE + i`.
pub const QPN_BASE: u32 = 0x1000;
/// Most reporters one fleet runs.
pub const MAX_REPORTERS: u32 = 65_536;
/// Frames one transmit batch holds.
const TX_FRAMES: usize = 512;
/// Timers of every reporter are polled this often (ns).
const TIMER_POLL_NS: u64 = 500_000;

/// How to build a fleet.
#[derive(Debug, Clone)]
pub struct DartOptions {
    /// Our RoCEv2 address (port 0: any).
    pub local: SocketAddrV4,
    /// The collector's RoCEv2 (and RDMA_CM) address.
    pub collector: SocketAddrV4,
    /// The Key-Write store's rdma_cm port.
    pub port: u16,
    /// DART reporters (QPs), 1..=[`MAX_REPORTERS`].
    pub reporters: u32,
    /// Frames each reporter's QP keeps for retransmission (a power of two).
    pub window: u32,
    /// Ask for an ACK every this many frames.
    pub ack_every: u32,
    /// Most N a report may ask for.
    pub max_redundancy: u8,
    /// Per-connection RDMA_CM timeout.
    pub connect_timeout: Duration,
}

impl DartOptions {
    /// Defaults for `reporters` reporters into the store at `collector`, rdma_cm `port`.
    pub fn new(collector: SocketAddrV4, port: u16, reporters: u32) -> DartOptions {
        DartOptions {
            local: SocketAddrV4::new(Ipv4Addr::LOCALHOST, 0),
            collector,
            port,
            reporters,
            window: 64,
            ack_every: 16,
            max_redundancy: 4,
            connect_timeout: Duration::from_secs(5),
        }
    }
}

/// `reporters` DART reporters writing Key-Write into one collector store (module docs).
pub struct DartFleet {
    backend: UdpBackend,
    reporters: Vec<Pipeline>,
    tx: TxBatch,
    epoch: Instant,
    last_timer_poll: u64,
    /// Frames the kernel refused.
    pub tx_errors: u64,
    /// Answers that named no reporter of the fleet (counted and dropped).
    pub foreign_responses: u64,
    /// Seconds the RDMA_CM set-up of every QP took.
    pub connect_secs: f64,
}

impl DartFleet {
    /// Connects every reporter's QP through RDMA_CM (one after another) and builds them.
    pub fn connect(o: &DartOptions) -> Result<DartFleet, String> {
        if o.reporters == 0 || o.reporters > MAX_REPORTERS {
            return Err(format!("reporters: {} (1..={MAX_REPORTERS})", o.reporters));
        }
        if !o.window.is_power_of_two() {
            return Err(format!("window: {} is not a power of two", o.window));
        }
        let sock = UdpSocket::bind(o.local, &UdpOptions::default())
            .map_err(|e| format!("cannot bind the RoCEv2 socket {}: {e}", o.local))?;
        let local = sock.local_addr();
        let (rx, txs) = sock.split();
        let mut backend = UdpBackend::new(vec![rx], txs);
        let mac = MacAddr([2, 0, 0, 0, 0xDA, 0x01]);
        // One CA GUID for the fleet: the collector keeps sibling QPs of one incarnation.
        let guid = incarnation_guid(dta_io::random::random_u32());
        let t0 = Instant::now();
        let mut reporters = Vec::with_capacity(o.reporters as usize);
        for i in 0..o.reporters {
            let mut cm = CmInitiator::new(
                local,
                mac,
                o.collector,
                MacAddr::BROADCAST,
                false,
                dta_io::random::random_u32(),
            )
            .with_ca_guid(guid);
            let got = connect_blocking(
                &mut backend,
                &mut cm,
                &[o.port],
                (QPN_BASE + i, 1),
                o.connect_timeout,
            )
            .map_err(|e| format!("reporter {i}: {e}"))?;
            let (_, meta, binding) = got.into_iter().next().ok_or("no connection")?;
            let mut cfg = PipelineConfig::defaults(local, mac).route_all_to_first(&meta.kind);
            cfg.l2_frames = false;
            cfg.max_redundancy = o.max_redundancy;
            cfg.backlog = 0;
            cfg.max_reporters = 1;
            cfg.qp.retransmit_window = o.window;
            cfg.qp.ack_every = o.ack_every;
            let target = CollectorTarget {
                roce: o.collector,
                mac: MacAddr::BROADCAST,
                stores: vec![(meta, binding)],
            };
            let p = Pipeline::new(cfg, &[target]).map_err(|e| format!("reporter {i}: {e}"))?;
            reporters.push(p);
        }
        Ok(DartFleet {
            backend,
            reporters,
            tx: TxBatch::new(TX_FRAMES, 2048),
            epoch: Instant::now(),
            last_timer_poll: 0,
            tx_errors: 0,
            foreign_responses: 0,
            connect_secs: t0.elapsed().as_secs_f64(),
        })
    }

    /// Reporters in the fleet.
    pub fn len(&self) -> usize {
        self.reporters.len()
    }

    /// True if the fleet has no reporter (never: [`DartFleet::connect`] refuses 0).
    pub fn is_empty(&self) -> bool {
        self.reporters.is_empty()
    }

    fn now(&self) -> u64 {
        self.epoch.elapsed().as_nanos() as u64
    }

    fn send(&mut self) {
        if !self.tx.is_empty() {
            match self.backend.send_batch(&self.tx) {
                Ok(n) => self.tx_errors += (self.tx.len() - n) as u64,
                Err(_) => self.tx_errors += self.tx.len() as u64,
            }
            self.tx.clear();
        }
    }

    /// Reporter `r` (modulo the fleet size) writes a Key-Write report itself: N slots of
    /// (checksum, value), each one RDMA WRITE on its own QP. Other primitives are counted as
    /// dropped (`drop_no_store`): DART has Key-Write only.
    pub fn write(&mut self, r: usize, report: &Report) {
        let now = self.now();
        if self.tx.len() + 16 > TX_FRAMES {
            self.send();
        }
        let i = r % self.reporters.len();
        let h = Handoff {
            worker: 0,
            at: now,
            report: *report,
            dst: Ipv4Addr::UNSPECIFIED,
        };
        self.reporters[i].handle_handoff(now, &h, &mut self.tx);
    }

    /// Sends what is queued, takes the collector's answers (at most `wait` for the first) and
    /// runs the reporters' timers. Returns the answers taken.
    pub fn poll(&mut self, wait: Duration) -> usize {
        self.send();
        let mut taken = 0;
        let now = self.now();
        let (reporters, tx, foreign) = (
            &mut self.reporters,
            &mut self.tx,
            &mut self.foreign_responses,
        );
        let mut woken: Vec<usize> = Vec::new();
        let r = self.backend.recv_with(wait, &mut |burst: &[Datagram<'_>]| {
            for d in burst {
                taken += 1;
                let p = d.payload;
                // The BTH's destination QP (bytes 5..8) names the reporter.
                let i = (p.len() >= 12)
                    .then(|| u32::from_be_bytes([0, p[5], p[6], p[7]]).wrapping_sub(QPN_BASE))
                    .filter(|&i| (i as usize) < reporters.len());
                let Some(i) = i else {
                    *foreign += 1;
                    continue;
                };
                reporters[i as usize].handle_responses(now, std::slice::from_ref(d), tx);
                woken.push(i as usize);
            }
        });
        if r.is_err() {
            return taken;
        }
        // An answer may open a window: send what those reporters queued.
        woken.sort_unstable();
        woken.dedup();
        for i in woken {
            if self.tx.len() + 16 > TX_FRAMES {
                self.send();
            }
            self.reporters[i].poll_transmit(now, &mut self.tx);
        }
        if now.saturating_sub(self.last_timer_poll) >= TIMER_POLL_NS {
            self.last_timer_poll = now;
            for i in 0..self.reporters.len() {
                if self.tx.len() + 16 > TX_FRAMES {
                    self.send();
                }
                self.reporters[i].poll(now, &mut self.tx);
                self.reporters[i].poll_transmit(now, &mut self.tx);
            }
        }
        self.send();
        taken
    }

    /// Frames sent or queued that the collector has not confirmed yet (all reporters).
    pub fn unconfirmed_frames(&self) -> u64 {
        self.reporters.iter().map(|p| p.unconfirmed_frames()).sum()
    }

    /// Polls until every frame is confirmed or `timeout` passes; true if all were.
    pub fn drain(&mut self, timeout: Duration) -> bool {
        for p in &mut self.reporters {
            p.confirm_promptly();
        }
        let t0 = Instant::now();
        while self.unconfirmed_frames() > 0 {
            if t0.elapsed() > timeout {
                return false;
            }
            self.last_timer_poll = 0;
            self.poll(Duration::from_millis(1));
        }
        true
    }

    /// The reporters' counters, summed.
    pub fn counters(&self) -> TranslatorCounters {
        let mut c = TranslatorCounters::default();
        for p in &self.reporters {
            c.merge(p.counters());
        }
        c
    }

    /// Every reporter's QP counters.
    pub fn qp_stats(&self) -> impl Iterator<Item = QpStats> + '_ {
        self.reporters
            .iter()
            .flat_map(|p| p.qp_stats().map(|(_, _, s)| s))
    }
}
