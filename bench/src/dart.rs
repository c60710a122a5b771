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
//!
//! It lives in the bench crate (issue 31): it is a measurement rig built from the translator's
//! public pieces (its pipeline, the RDMA_CM initiator, the blocking connect), not something the
//! `dta-translator` service runs, so the translator's library does not carry it.

use std::net::{Ipv4Addr, SocketAddrV4};
use std::time::{Duration, Instant};

use dta_io::backend::Backend;
use dta_io::udp::{UdpBackend, UdpOptions, UdpSocket};
use dta_proto::batch::{Datagram, TxBatch};
use dta_proto::wire::ethernet::MacAddr;
use dta_proto::wire::ib::Bth;
use dta_proto::wire::report::Report;

use dta_translator::control::cm::{incarnation_guid, CmInitiator};
use dta_translator::datapath::pipeline::{CollectorTarget, Handoff, Pipeline, PipelineConfig};
use dta_translator::datapath::qp::QpStats;
use dta_translator::datapath::stats::TranslatorCounters;
use dta_translator::driver::connect_blocking;

/// The first QPN of a fleet: reporter i uses `QPN_BASE + i`.
pub const QPN_BASE: u32 = 0x1000;
/// Most reporters one fleet runs.
pub const MAX_REPORTERS: u32 = 65_536;
/// Frames one address's transmit batch holds.
const TX_FRAMES: usize = 128;
/// Bytes per frame slot (Key-Write WRITEs and ACK-requesting probes are far smaller).
const TX_SLOT: usize = 512;
/// Room kept in a batch before a reporter adds to it (the most frames one call emits).
const ROOM: usize = 16;
/// Most receive bursts one poll takes.
const MAX_RX_ROUNDS: usize = 256;
/// Timers of every reporter are polled this often (ns).
const TIMER_POLL_NS: u64 = 500_000;

/// How to build a fleet.
#[derive(Debug, Clone)]
pub struct DartOptions {
    /// Our first RoCEv2 address (port 0: any). Reporters are spread over consecutive IPv4
    /// addresses from it, [`DartOptions::per_address`] each, as switches have their own
    /// addresses (a collector bounds the QPs it keeps per peer address, 64 for ours): on
    /// loopback any 127.x.y.z works; on a real NIC every address must be assigned to the host.
    pub local: SocketAddrV4,
    /// Reporters sharing one source address (1..=32).
    pub per_address: u32,
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
            local: SocketAddrV4::new(Ipv4Addr::new(127, 0, 10, 1), 0),
            per_address: 32,
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

/// The reporters sharing one source address: their socket and transmit batch.
struct Group {
    backend: UdpBackend,
    tx: TxBatch,
}

/// `reporters` DART reporters writing Key-Write into one collector store (module docs).
pub struct DartFleet {
    groups: Vec<Group>,
    per_address: usize,
    reporters: Vec<Pipeline>,
    epoch: Instant,
    last_timer_poll: u64,
    woken: Vec<usize>,
    /// Frames the kernel refused.
    pub tx_errors: u64,
    /// Answers that named no reporter of the fleet (counted and dropped).
    pub foreign_responses: u64,
    /// Seconds the RDMA_CM set-up of every QP took.
    pub connect_secs: f64,
    /// Polls spent waiting for a reporter's ring to have room.
    pub full_waits: u64,
}

/// Sends `g`'s batch and clears it.
fn send_group(g: &mut Group, errors: &mut u64) {
    if !g.tx.is_empty() {
        match g.backend.send_batch(&g.tx) {
            Ok(n) => *errors += (g.tx.len() - n) as u64,
            Err(_) => *errors += g.tx.len() as u64,
        }
        g.tx.clear();
    }
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
        if !(1..=32).contains(&o.per_address) {
            return Err(format!("per_address: {} (1..=32)", o.per_address));
        }
        let mac = MacAddr([2, 0, 0, 0, 0xDA, 0x01]);
        // One CA GUID for the fleet: the collector keeps sibling QPs of one incarnation.
        let guid = incarnation_guid(dta_io::random::random_u32());
        let t0 = Instant::now();
        let mut groups = Vec::new();
        let mut reporters = Vec::with_capacity(o.reporters as usize);
        let first_ip = u32::from(*o.local.ip());
        for i in 0..o.reporters {
            let gi = (i / o.per_address) as usize;
            if gi == groups.len() {
                let ip = Ipv4Addr::from(first_ip.wrapping_add(gi as u32));
                let want = SocketAddrV4::new(ip, o.local.port());
                let sock = UdpSocket::bind(want, &UdpOptions::default())
                    .map_err(|e| format!("cannot bind the RoCEv2 socket {want}: {e}"))?;
                let (rx, txs) = sock.split();
                groups.push(Group {
                    backend: UdpBackend::new(vec![rx], txs),
                    tx: TxBatch::new(TX_FRAMES, TX_SLOT),
                });
            }
            let g = &mut groups[gi];
            let local = g.backend.local_addrs()[0];
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
                &mut g.backend,
                &mut cm,
                &[o.port],
                (QPN_BASE + i, 1),
                o.connect_timeout,
            )
            .map_err(|e| format!("reporter {i} (from {local}): {e}"))?;
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
            groups,
            per_address: o.per_address as usize,
            reporters,
            epoch: Instant::now(),
            last_timer_poll: 0,
            woken: Vec::new(),
            tx_errors: 0,
            foreign_responses: 0,
            connect_secs: t0.elapsed().as_secs_f64(),
            full_waits: 0,
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

    /// Source addresses in use.
    pub fn addresses(&self) -> Vec<SocketAddrV4> {
        self.groups
            .iter()
            .flat_map(|g| g.backend.local_addrs())
            .collect()
    }

    fn now(&self) -> u64 {
        self.epoch.elapsed().as_nanos() as u64
    }

    /// Sends every address's queued frames now (in address order).
    pub fn flush(&mut self) {
        self.send_all();
    }

    fn send_all(&mut self) {
        for g in &mut self.groups {
            send_group(g, &mut self.tx_errors);
        }
    }

    /// Runs `f` on reporter `i` with its group's transmit batch (sent first if nearly full).
    fn with_reporter(&mut self, i: usize, f: impl FnOnce(&mut Pipeline, &mut TxBatch)) {
        let g = &mut self.groups[i / self.per_address];
        if g.tx.len() + ROOM > TX_FRAMES {
            send_group(g, &mut self.tx_errors);
        }
        f(&mut self.reporters[i], &mut g.tx);
    }

    /// Reporter `r` (modulo the fleet size) writes a Key-Write report itself: N slots of
    /// (checksum, value), each one RDMA WRITE on its own QP. Other primitives are counted as
    /// dropped (`drop_no_store`): DART has Key-Write only. While the reporter's ring is full
    /// (frames the collector has not confirmed), the fleet polls for up to `wait` for room;
    /// after that the report is dropped and counted (`drop_qp_queue_full`), as a switch
    /// would drop it. A reporter whose QP broke drops at once (`drop_qp_broken`).
    pub fn write(&mut self, r: usize, report: &Report, wait: Duration) {
        let i = r % self.reporters.len();
        // A broken QP never makes room: its reports are dropped at once (`drop_qp_broken`).
        if !self.reporters[i].can_take(self.now())
            && self.reporters[i].broken_stores().next().is_none()
        {
            let t0 = Instant::now();
            while !self.reporters[i].can_take(self.now()) && t0.elapsed() < wait {
                self.full_waits += 1;
                self.last_timer_poll = 0;
                self.poll(Duration::from_micros(100));
            }
        }
        let now = self.now();
        let h = Handoff {
            worker: 0,
            at: now,
            report: *report,
            dst: Ipv4Addr::UNSPECIFIED,
        };
        self.with_reporter(i, |p, tx| p.handle_handoff(now, &h, tx));
    }

    /// Sends what is queued, takes every answer the collector has sent (waiting at most
    /// `wait` for the first) and runs the reporters' timers. Returns the answers taken.
    pub fn poll(&mut self, wait: Duration) -> usize {
        self.send_all();
        let mut taken = 0;
        // Reporters that took an answer (a buffer kept across polls).
        let mut woken = std::mem::take(&mut self.woken);
        woken.clear();
        let n_groups = self.groups.len();
        for gi in 0..n_groups {
            // Keep receiving while bursts come back: thousands of QPs answer at once, and an
            // answer left in the socket is an ACK the reporter will time out on.
            for round in 0..MAX_RX_ROUNDS {
                let now = self.now();
                let (reporters, g, foreign) = (
                    &mut self.reporters,
                    &mut self.groups[gi],
                    &mut self.foreign_responses,
                );
                let tx = &mut g.tx;
                // Only the first socket waits, and only on the first round.
                let w = if round == 0 && gi == 0 {
                    wait
                } else {
                    Duration::ZERO
                };
                let r = g.backend.recv_with(w, &mut |burst: &[Datagram<'_>]| {
                    for d in burst {
                        taken += 1;
                        // The BTH's destination QP names the reporter.
                        let i = Bth::new_checked(d.payload)
                            .ok()
                            .map(|b| b.dest_qp().value().wrapping_sub(QPN_BASE))
                            .filter(|&i| (i as usize) < reporters.len());
                        let Some(i) = i else {
                            *foreign += 1;
                            continue;
                        };
                        reporters[i as usize].handle_responses(now, std::slice::from_ref(d), tx);
                        woken.push(i as usize);
                    }
                });
                if g.tx.len() + ROOM > TX_FRAMES {
                    send_group(g, &mut self.tx_errors);
                }
                match r {
                    Ok(0) | Err(_) => break,
                    Ok(_) => {}
                }
            }
        }
        let now = self.now();
        // An answer may open a window: send what those reporters queued.
        woken.sort_unstable();
        woken.dedup();
        for &i in &woken {
            self.with_reporter(i, |p, tx| {
                p.poll_transmit(now, tx);
            });
        }
        self.woken = woken;
        if now.saturating_sub(self.last_timer_poll) >= TIMER_POLL_NS {
            self.last_timer_poll = now;
            for i in 0..self.reporters.len() {
                self.with_reporter(i, |p, tx| {
                    p.poll(now, tx);
                    p.poll_transmit(now, tx);
                });
            }
        }
        self.send_all();
        taken
    }

    /// Reporters whose QP broke (no answer for `broken_after`): their unconfirmed writes are
    /// lost, as a DART switch's would be.
    pub fn broken(&self) -> usize {
        self.reporters
            .iter()
            .filter(|p| p.broken_stores().next().is_some())
            .count()
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn impossible_fleets_are_refused_before_any_socket() {
        let c = SocketAddrV4::new(Ipv4Addr::LOCALHOST, 9);
        let bad = |f: fn(&mut DartOptions)| {
            let mut o = DartOptions::new(c, 1450, 4);
            f(&mut o);
            DartFleet::connect(&o).err().unwrap_or_default()
        };
        assert!(bad(|o| o.reporters = 0).starts_with("reporters"));
        assert!(bad(|o| o.reporters = MAX_REPORTERS + 1).starts_with("reporters"));
        assert!(bad(|o| o.window = 48).starts_with("window"));
        assert!(bad(|o| o.per_address = 0).starts_with("per_address"));
        assert!(bad(|o| o.per_address = 33).starts_with("per_address"));
    }
}
