//! `dta replay --backend B`: the production translator driven through one I/O backend, next
//! to a bare receive loop on the same backend kind, fed the same trace in the same run.
//!
//! On this small shared machine the kernel sender, not the receiver, sets the packet rate, so
//! wall-clock packets/s says little about a receiver's capacity. Each side is therefore judged
//! by **packets per receiver CPU-second**: the receiving thread's CPU time (user + system,
//! `CLOCK_THREAD_CPUTIME_ID` for the bare loop, `/proc/self/task/TID/schedstat` for the
//! translator's worker) divided into the packets it took. That is what one dedicated core would
//! sustain. Wall-clock rates are reported too.
//!
//! | backend | bare loop | translator | feed |
//! |---|---|---|---|
//! | `udp` | `recvmmsg` bursts into a counter (`UdpRx`) | kernel UDP backend, 1 worker, software RNIC on loopback | `sendmmsg` on loopback, flow-controlled |
//! | `pcap` | `PcapBackend` replay into a counter | `translator.backend = "pcap"`, frames counted and discarded | pre-filled: the trace in memory, no sender |
//! | `af_xdp` | `AfXdpBackend` on veth B into a counter | `translator.backend = "af_xdp"` on veth B, software RNIC in namespace A | `sendmmsg` from namespace A |
//! | `dpdk` | `DpdkBackend` (net_af_packet on veth B) into a counter | `translator.backend = "dpdk"` (a second net_af_packet port on veth B) | `sendmmsg` from namespace A |
//!
//! The translator side does everything the bare side does plus parsing, hashing, RoCEv2 frame
//! generation with ICRC, transmission and ACK processing; the ratio is the fraction of the
//! backend's receive capacity left once the translation work is added.
//!
//! Rooms: this module holds the results ([`Side`], [`Comparison`]) and the options;
//! `flow` runs the flow-controlled comparisons and sets up the translator and collector they
//! share; `prefilled` the freeze-fill-drain ones, with `freezer` (the cgroup v1 freezer);
//! `af_xdp` and `dpdk` (behind their features) the native backends of both kinds. None of
//! them touches the translator's or the backends' code: they only drive them.

#[cfg(feature = "af_xdp")]
mod af_xdp;
#[cfg(feature = "dpdk")]
mod dpdk;
mod flow;
mod freezer;
mod prefilled;
#[cfg(test)]
mod tests;

#[cfg(feature = "af_xdp")]
pub use af_xdp::{compare_af_xdp, compare_af_xdp_prefilled, PREFILL_XDP_FRAMES};
#[cfg(feature = "dpdk")]
pub use dpdk::{
    bare_rx_dpdk_child, compare_dpdk, compare_dpdk_prefilled, dpdk_eal_args, DPDK_FRAMECNT,
};
pub use flow::{bare_netns, compare_netns, compare_pcap, compare_udp, translator_netns};
pub use freezer::Freezer;
pub use prefilled::{
    compare_udp_netns_prefilled, compare_udp_prefilled, translator_netns_prefilled,
};

/// One side of a comparison.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct Side {
    /// What ran.
    pub name: String,
    /// Packets the receiving thread took.
    pub packets: u64,
    /// Wall-clock seconds from the first send to the last packet taken.
    pub secs: f64,
    /// The receiving thread's CPU seconds.
    pub cpu_secs: f64,
    /// Packets per wall second.
    pub per_sec: f64,
    /// Packets per receiver CPU-second.
    pub per_cpu_sec: f64,
    /// Receive calls that returned packets (0 where not known).
    pub bursts: u64,
}

impl Side {
    fn new(name: &str, packets: u64, secs: f64, cpu_secs: f64) -> Side {
        Side {
            name: name.into(),
            packets,
            secs,
            cpu_secs,
            per_sec: packets as f64 / secs.max(1e-9),
            per_cpu_sec: packets as f64 / cpu_secs.max(1e-9),
            bursts: 0,
        }
    }

    fn with_bursts(mut self, bursts: u64) -> Side {
        self.bursts = bursts;
        self
    }
}

/// A backend's translator next to its bare loop.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct Comparison {
    /// Backend name.
    pub backend: String,
    /// The bare receive loop.
    pub bare: Side,
    /// The translator through the backend.
    pub translator: Side,
    /// translator.per_cpu_sec / bare.per_cpu_sec.
    pub ratio_per_cpu_sec: f64,
    /// translator.per_sec / bare.per_sec.
    pub ratio_wall: f64,
    /// Reports translated.
    pub translated: u64,
    /// Reports dropped by the pipeline (any reason).
    pub dropped: u64,
    /// RoCEv2 frames the translator sent.
    pub frames: u64,
    /// Frames the software RNIC executed (`None` where no RNIC runs: the pcap comparison).
    pub rnic_executed: Option<u64>,
    /// Valid requests the RNIC did not execute because of their PSN: resends of executed
    /// frames (re-ACKed) and frames behind a loss (NAKed or dropped, then resent).
    pub rnic_resent: Option<u64>,
    /// Requests the RNIC rejected (malformed, bad opcode or ICRC, unknown QP, wrong peer or
    /// P_Key, R_Key/bounds/access violations, invalid requests).
    pub rnic_rejected: Option<u64>,
}

/// The RNIC's counters of [`Comparison::rnic_resent`] and [`Comparison::rnic_rejected`]
/// between two snapshots.
fn rnic_resent_rejected(
    k0: &dta_collector::rnic::counters::RnicCounters,
    k: &dta_collector::rnic::counters::RnicCounters,
) -> (Option<u64>, Option<u64>) {
    let resent = |c: &dta_collector::rnic::counters::RnicCounters| {
        c.duplicate_request + c.out_of_seq_request + c.out_of_seq_dropped
    };
    let rejected = |c: &dta_collector::rnic::counters::RnicCounters| {
        c.malformed
            + c.bad_opcode
            + c.bad_icrc
            + c.unknown_qpn
            + c.addr_mismatch
            + c.bad_pkey
            + c.rkey_violation
            + c.out_of_bounds
            + c.access_denied
            + c.invalid_request
    };
    (
        Some(resent(k) - resent(k0)),
        Some(rejected(k) - rejected(k0)),
    )
}

impl Comparison {
    fn finish(mut self) -> Comparison {
        self.ratio_per_cpu_sec = self.translator.per_cpu_sec / self.bare.per_cpu_sec.max(1e-9);
        self.ratio_wall = self.translator.per_sec / self.bare.per_sec.max(1e-9);
        self
    }

    /// Whether the software RNIC took what the translator sent: it rejected none of it, and
    /// at least 90% of the frames were executed or were valid resends (a loaded host loses
    /// frames on the wire and resends them, or resends frames whose ACK was late). A
    /// translator whose frames the RNIC rejects (e.g. a bad ICRC) does less work than a
    /// correct one, so its ratio means nothing. Always true where no RNIC runs.
    pub fn rnic_accepted(&self) -> bool {
        let Some(n) = self.rnic_executed else {
            return true;
        };
        let taken = n + self.rnic_resent.unwrap_or(0);
        self.rnic_rejected.unwrap_or(0) == 0 && taken as f64 >= 0.9 * self.frames as f64
    }

    /// One line for the terminal.
    pub fn line(&self) -> String {
        let warning = if self.rnic_accepted() {
            String::new()
        } else {
            format!(
                " | INVALID: the RNIC executed {} and took {} resends of {} frames, rejected {}",
                self.rnic_executed.unwrap_or(0),
                self.rnic_resent.unwrap_or(0),
                self.frames,
                self.rnic_rejected.unwrap_or(0)
            )
        };
        format!(
            "{:>7}: bare {:>9.0} pkt/s wall, {:>9.0} pkt/CPU-s | translator {:>9.0} pkt/s wall, \
             {:>9.0} pkt/CPU-s | ratio per CPU-s {:.2}, wall {:.2} | translated {} dropped {} \
             frames {} executed {} | pkts/burst bare {:.1} translator {:.1} | took bare {} \
             translator {}{warning}",
            self.backend,
            self.bare.per_sec,
            self.bare.per_cpu_sec,
            self.translator.per_sec,
            self.translator.per_cpu_sec,
            self.ratio_per_cpu_sec,
            self.ratio_wall,
            self.translated,
            self.dropped,
            self.frames,
            self.rnic_executed
                .map_or_else(|| "-".to_string(), |n| n.to_string()),
            self.bare.packets as f64 / self.bare.bursts.max(1) as f64,
            self.translator.packets as f64 / self.translator.bursts.max(1) as f64,
            self.bare.packets,
            self.translator.packets,
        )
    }
}

/// Settings shared by every comparison.
#[derive(Debug, Clone)]
pub struct CompareOptions {
    /// Passes over the trace.
    pub loops: u32,
    /// Sender rate in packets/s (0: as fast as the receiver takes them).
    pub rate: u64,
    /// Packets allowed in flight beyond what the receiver has taken.
    pub window: u64,
}

impl Default for CompareOptions {
    fn default() -> Self {
        CompareOptions {
            loops: 1,
            rate: 0,
            window: 4096,
        }
    }
}

/// How deep the queues are filled and how long a drain may pause before it counts as done.
#[derive(Debug, Clone, Copy)]
pub struct Prefill {
    /// Datagrams queued while the receiver is frozen.
    pub packets: u64,
    /// Datagrams sent (flow-controlled) before freezing, to warm caches, QPs and rings.
    pub warmup: u64,
    /// Freeze-fill-drain rounds per side; the side's figures are the sums over the rounds.
    pub rounds: u32,
}

impl Side {
    /// Adds another round's figures.
    fn add(self, o: &Side) -> Side {
        Side::new(
            &self.name,
            self.packets + o.packets,
            self.secs + o.secs,
            self.cpu_secs + o.cpu_secs,
        )
        .with_bursts(self.bursts + o.bursts)
    }
}

/// Whether the pre-filled veth comparisons run the software RNIC on AF_XDP (`[rnic] backend
/// = "af_xdp"` on veth A), i.e. whether `dta` was built with `af_xdp`.
pub const RNIC_ON_AF_XDP: bool = cfg!(feature = "af_xdp");
