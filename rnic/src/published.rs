//! What an RNIC's thread publishes for the control plane: counters, completions and
//! connections, as snapshots behind a mutex, so the per-packet path takes no lock.
//!
//! The software RNIC's thread (`dta-collector`'s `service`) and the real-RNIC backend's event
//! thread (`rdma`, feature `rdma`) fill the same [`Published`]; the collector's HTTP API and
//! `/metrics`, and the agent's `/metrics`, read it. Owns: the snapshot types. May not: take a
//! lock on a per-packet path (the threads publish every few tens of milliseconds).

use std::net::SocketAddrV4;

use crate::cm::CmCounters;
use crate::counters::RnicCounters;
use crate::responder::Completion;

/// Counters and events the RNIC thread publishes for the control plane.
#[derive(Default)]
pub struct Published {
    /// Device counters (all QPs).
    pub counters: RnicCounters,
    /// Per-QP counters.
    pub per_qp: Vec<(u32, RnicCounters)>,
    /// Immediate-data completions seen so far.
    pub immediate_events: u64,
    /// The most recent immediate events (newest last), bounded.
    pub recent_events: std::collections::VecDeque<Completion>,
    /// RDMA_CM counters.
    pub cm: CmCounters,
    /// RDMA_CM connections: (store port, peer, our QPN, established).
    pub connections: Vec<(u16, SocketAddrV4, u32, bool)>,
    /// Whom each QP serves (static and RDMA_CM QPs), for the labels of per-QP series.
    pub qp_owners: Vec<QpOwner>,
    /// Receive calls of the software RNIC that returned packets (packets ÷ this: the mean
    /// burst; one wake-up each).
    pub rx_bursts: u64,
    /// Waits of `[rnic] rx_coalesce_us` after a short receive.
    pub rx_coalesce_waits: u64,
}

/// Whom one QP serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QpOwner {
    /// Our QPN.
    pub qpn: u32,
    /// Index of the QP's store, in configuration order.
    pub store: usize,
    /// The peer's RoCEv2 address (`None`: not known, e.g. an IPv6 peer of a real RNIC).
    pub peer: Option<SocketAddrV4>,
}
