//! `dta-collector`: the memory DTA reports land in, and the answers operators get from it.
//!
//! # Data flow
//! A collector hosts *stores*, one per primitive instance (Key-Write, Key-Increment, Append,
//! Postcarding). Each store is one [`memory::Region`], registered with an RNIC: the embedded
//! software RNIC ([`rnic`]) by default, which answers RoCEv2 on a UDP socket exactly like Linux
//! Soft-RoCE would. Translators write into the regions with RDMA; the collector's CPU never
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

pub mod allow;
pub mod backends;
pub mod client;
pub mod cluster;
pub mod config;
pub mod export;
pub mod http;
pub mod memory;
pub mod metrics;
pub mod query;
pub mod rdma;
pub mod rnic;
pub mod service;
pub mod store;
pub mod zero;

pub use config::CollectorConfig;
pub use service::Collector;
