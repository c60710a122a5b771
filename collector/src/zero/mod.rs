//! ZERO mode (Tao et al., ATC'22): the collector *pulls* metrics from agents with one-sided
//! RDMA READ, on its own schedule, with no agent CPU per read on a real RNIC.
//!
//! - [`cm`]: RDMA_CM to each agent (the REP carries the agent's region record).
//! - [`reader`]: the RC READ requester of one QP (PSNs, response reassembly, recovery).
//! - [`credit`]: credit-based flow control (T in flight, T/n per agent).
//! - [`puller`]: the collecting threads (rounds, hybrid I/O, torn-read checks) and the
//!   processing thread.
//! - [`store`]: the newest snapshots, for queries and `/metrics`.
//! - [`config`]: the collector file's `[pull]` section.
//!
//! The agent side (region layout: [`dta_proto::zero`]) is the `dta-agent` crate.

pub mod cm;
pub mod config;
pub mod credit;
pub mod metrics;
pub mod puller;
pub mod reader;
pub mod store;
