//! `dta-collector`: the memory DTA reports land in, and the answers operators get from it.
//!
//! # Data flow
//! A collector hosts *stores*, one per primitive instance (Key-Write, Key-Increment, Append,
//! Postcarding). Each store is one [`memory::Region`], registered with an RNIC: the embedded
//! software RNIC ([`rnic`]) by default, which answers RoCEv2 on a UDP socket exactly like Linux
//! Soft-RoCE would, or a real one ([`rdma`]). The RNIC itself, regions and allowlists are the
//! `dta-rnic` crate's, shared with `dta-agent`; this crate drives them ([`service`]) and owns
//! everything above them. Translators write into the regions with RDMA; the collector's CPU never
//! touches a report. Operators query the regions in place through [`query`], from Rust or
//! over the HTTP control API ([`http`], served in its own threads, never on the RNIC thread),
//! which the `dta-collector` CLI reaches through [`client`]. [`metrics`] renders its
//! `/metrics` page. [`cluster`] queries a cluster of collectors as one: each key from the
//! collector the cluster file says holds it. [`export`] (`dta-collector export`) streams Append
//! entries and snapshots into ClickHouse from another process, through the same API.
//! `collector/README.md` is the operator guide.
//!
//! # Invariants
//! - Nothing remote can write outside a registered region: every RDMA access is checked
//!   against the region's bounds and R_Key before a byte moves, and answered with the
//!   protocol's NAK otherwise.
//! - Only a QP's connected peer may use it (source address check); duplicates never execute
//!   twice; out-of-sequence requests never execute.
//! - Only peers in a store's allowlist ([`allow`]) get a QP and the store's coordinates over
//!   RDMA_CM; R_Keys, PSNs, QPN bases and communication IDs come from the kernel's random
//!   source. The control API shows those coordinates to its admin token only ([`http`]).
//! - Every dropped packet increments a counter.
//!
//! # Panic contract
//! No input from the network can panic the collector. Panics indicate a bug.

pub mod backends;
pub mod client;
pub mod cluster;
pub mod config;
pub mod export;
pub mod http;
pub mod metrics;
pub mod query;
pub mod rdma;
pub mod service;
pub mod store;
pub mod zero;

// The software RNIC, memory regions and allowlists are dta-rnic's (the agent runs them too);
// they keep their paths in this crate.
pub use dta_rnic::{allow, memory};

/// The embedded software RNIC: dta-rnic's RC responder and RDMA_CM listener, driven by the
/// collector's RNIC thread ([`service`]) on any `dta-io` backend ([`backends`]).
pub mod rnic {
    pub use dta_rnic::{cm, counters, responder};
}

pub use config::CollectorConfig;
pub use service::Collector;
