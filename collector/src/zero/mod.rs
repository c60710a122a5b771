//! ZERO mode (Tao et al., ATC'22): the collector *pulls* metrics from agents with one-sided
//! RDMA READ, on its own schedule, with no agent CPU per read on a real RNIC.
//!
//! - [`cm`]: RDMA_CM to each agent (the REP carries the agent's region record).
//! - [`reader`]: the RC READ requester of one QP (PSNs, response reassembly, recovery).
//! - [`credit`]: credit-based flow control (T in flight, T/n per agent).
//! - [`collect`]: a collecting thread's sans-I/O state machine (rounds, READs, torn-read
//!   checks, RDMA_CM, Credit-FC): fed the time and datagrams, it fills a transmit batch.
//! - [`puller`]: the driver: the collecting threads (sockets, hybrid I/O, sleeping until the
//!   collector's next deadline) and the processing thread.
//! - [`stats`]: counters, latency histograms (hdrhistogram) and the merged statistics.
//! - [`store`]: the newest snapshots, for queries and `/metrics`.
//! - [`config`]: the collector file's `[pull]` section and the puller's validated configuration.
//!
//! The agent side (region layout: [`dta_proto::zero`]) is the `dta-agent` crate.

pub mod cm;
pub mod collect;
pub mod config;
pub mod credit;
pub mod metrics;
pub mod puller;
pub mod reader;
pub mod stats;
pub mod store;
