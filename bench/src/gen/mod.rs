//! `dta gen`: the papers' report workloads as an endless, deterministic stream.
//!
//! A [`Scenario`] fixes the workload (report mix, fat tree, flow population, profile) *and* the
//! collector stores that receive it, so the generator, the pcap files it writes and the replay
//! harness that reads them agree on geometry. The stream:
//!
//! - keeps `concurrent` flows active; each has a Pareto-distributed packet count
//!   ([`Flows::packets`]) and is replaced by the next flow of the population when it ends, so
//!   a few elephants produce most reports and keys repeat the way real traffic does;
//! - draws each report's kind by the mix weights and the flow it belongs to uniformly among the
//!   active ones;
//! - INT-MD path tracing: Key-Write keyed by the flow 5-tuple with the 20-byte 5-hop path;
//! - INT-XD/MX postcards: each flow walks its 5 hops in order, one postcard per draw;
//! - NetSeer loss events: 18-byte Append entries (5-tuple, drop reason, packet sequence);
//! - INT congestion events: 8-byte Append entries (switch ID, queue depth) on their own lists;
//! - Marple host counters: Key-Increment of the source host's byte count.
//!
//! The reference profile carries 4-byte keys and values only, so there the 5-tuple key is its
//! 32-bit digest and each value its 32-bit summary (path digest, packet sequence, switch ID and
//! depth packed); the extended profile carries the full keys and values.
//!
//! Rooms: `scenario` holds what a workload is (and the stores it needs); `generator` draws its
//! reports. Neither sends or writes anything: `trace`, `sender` and the `dta` binary do.

mod generator;
mod scenario;
#[cfg(test)]
mod tests;

pub use generator::{digest, Generator};
pub use scenario::{
    Kind, Mix, Scenario, SketchStores, INT_INITIAL_TTL, INT_PORT, TRANSLATOR_REPORTS,
};
