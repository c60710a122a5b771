//! What the pull collector measures: a collecting thread's counters ([`PullCounters`]), the
//! latency histograms ([`LatencyHist`], over `hdrhistogram`) and the merged statistics the
//! control plane reads ([`PullStats`]). Plain data: nothing here pulls, sends or locks.

use hdrhistogram::Histogram;

use super::cm::PullCmCounters;
use super::reader::ReadCounters;

dta_proto::define_counters!(
    /// A collecting thread's counters (beyond its QPs' and CM's).
    pub struct PullCounters {
        /// Rounds started.
        rounds,
        /// Rounds completed (every block pulled or given up).
        rounds_done,
        /// Rounds due while the previous one of the agent was still running (skipped).
        rounds_overrun,
        /// Blocks pulled with a consistent snapshot.
        blocks_pulled,
        /// Block snapshots caught mid-update (sequence words differ or odd): read again.
        blocks_in_progress,
        /// Block snapshots whose checksum failed (torn across updates): read again.
        blocks_torn,
        /// Blocks given up in a round after every retry found them mid-update or torn.
        blocks_given_up,
        /// Control areas read.
        control_reads,
        /// Control areas (or headers) refused: bad magic, malformed, misplaced blocks.
        control_invalid,
        /// Blocks whose bytes do not parse at all (entries mismatch): the control area is
        /// read again.
        blocks_invalid,
        /// QPs given up (NAK class C, or timeouts) and reconnected.
        qp_faults,
        /// Waits in the kernel for completions (event-driven).
        event_waits,
        /// Busy-poll passes over the socket.
        busy_polls,
        /// Snapshots dropped because processing fell behind.
        snapshots_dropped,
        /// Datagrams that were not for any of our QPs or the CM.
        rx_unknown,
        /// Datagrams that did not parse as RoCEv2.
        rx_invalid,
    }
);

/// The largest latency a histogram tells apart (ns): one minute; longer ones count as this.
const HIST_HIGHEST_NS: u64 = 60_000_000_000;

/// A latency histogram (ns) with 2 significant digits (±1 %), the exact sum and maximum.
#[derive(Debug, Clone)]
pub struct LatencyHist {
    hist: Histogram<u64>,
    sum: u64,
    max: u64,
}

impl Default for LatencyHist {
    fn default() -> Self {
        LatencyHist {
            hist: Histogram::new_with_bounds(1, HIST_HIGHEST_NS, 2)
                .expect("valid histogram bounds"),
            sum: 0,
            max: 0,
        }
    }
}

impl LatencyHist {
    /// Records one latency (ns).
    pub fn record(&mut self, ns: u64) {
        self.hist.saturating_record(ns.max(1));
        self.sum = self.sum.saturating_add(ns);
        self.max = self.max.max(ns);
    }

    /// Samples recorded.
    pub fn count(&self) -> u64 {
        self.hist.len()
    }

    /// Sum of the samples (ns).
    pub fn sum(&self) -> u64 {
        self.sum
    }

    /// The `q` quantile (0..=1), in ns (the largest value of its bucket, at most the
    /// maximum; the maximum for q = 1).
    pub fn quantile(&self, q: f64) -> u64 {
        if self.hist.is_empty() {
            return 0;
        }
        if q >= 1.0 {
            return self.max;
        }
        self.hist.value_at_quantile(q).min(self.max)
    }

    /// Adds another histogram.
    pub fn merge(&mut self, o: &LatencyHist) {
        self.hist
            .add(&o.hist)
            .expect("histograms with the same bounds");
        self.sum = self.sum.saturating_add(o.sum);
        self.max = self.max.max(o.max);
    }
}

/// What the collecting threads measured, merged.
#[derive(Debug, Clone, Default)]
pub struct PullStats {
    /// Thread counters.
    pub pull: PullCounters,
    /// READ QP counters (every QP, including closed ones).
    pub reads: ReadCounters,
    /// RDMA_CM counters.
    pub cm: PullCmCounters,
    /// READ latency: request sent to last response received.
    pub read_latency: LatencyHist,
    /// Round latency: first READ of a round sent to its last block pulled.
    pub round_latency: LatencyHist,
    /// Response bytes in flight now (all threads).
    pub in_flight: u64,
    /// The most response bytes ever in flight at once, per thread, summed (each thread's
    /// share is asserted ≤ T / threads at every grant).
    pub in_flight_high_water: u64,
    /// READs that waited for credits.
    pub credit_waits: u64,
    /// Agents connected.
    pub agents_up: u64,
    /// CPU time of the collecting threads (ns).
    pub collect_cpu_ns: u64,
    /// Datagrams the kernel dropped on the collecting sockets (full receive buffers).
    pub kernel_drops: u64,
}

impl PullStats {
    pub(crate) fn merge(&mut self, o: &PullStats) {
        self.pull.merge(&o.pull);
        self.reads.merge(&o.reads);
        self.cm.merge(&o.cm);
        self.read_latency.merge(&o.read_latency);
        self.round_latency.merge(&o.round_latency);
        self.in_flight += o.in_flight;
        self.in_flight_high_water += o.in_flight_high_water;
        self.credit_waits += o.credit_waits;
        self.agents_up += o.agents_up;
        self.collect_cpu_ns += o.collect_cpu_ns;
        self.kernel_drops += o.kernel_drops;
    }
}
