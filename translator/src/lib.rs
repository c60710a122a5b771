//! `dta-translator`: the software DTA translator.
//!
//! # Data flow
//! Reporters send DTA reports (UDP 40040). A worker receives a burst, hands it with the current
//! time to its [`datapath::pipeline::Pipeline`], which parses each report, routes it to a
//! store, and lets the store's primitive ([`datapath::primitive`]) batch Append entries, cache
//! postcards, or replicate Key-Write and Key-Increment N times. Each store's
//! [`datapath::sender::QpSender`] writes the RoCEv2 frames (RDMA WRITE, WRITE with Immediate,
//! FETCH_ADD) with a correct ICRC and per-QP PSNs into the worker's transmit batch, or keeps
//! them in the QP's ring until the batch or the QP's window has room. The worker sends the
//! batch to the collector's RNIC, which places the bytes in memory; the collector's CPU never
//! sees a report. ACKs and NAKs come back to the same pipeline: an RC requester per QP
//! ([`datapath::qp`]) resends exactly what the collector asks for (go-back-N from the PSN it
//! names), asks with a probe when answers are late, and adapts its timeout to the measured
//! round trip.
//!
//! # Layout
//! - [`datapath`]: the per-packet path, sans-I/O and allocation-free.
//! - [`config`]: the TOML configuration.
//! - [`driver`]: sockets, threads and connection set-up around the pipeline, one module per
//!   job (start, worker loop, dispatcher and hand-offs, RDMA_CM connect, routes, sockets).
//! - [`backends`]: the raw-frame backends (`translator.backend`) and the transmit capture.
//!
//! # Invariants
//! Every report received is counted as translated, held (a batch, a cache entry, the backlog),
//! handed off or dropped with a reason, whatever room the output has; no input panics; no QP
//! is shared between cores; no frame addresses bytes outside its store's region.

pub mod backends;
pub mod config;
pub mod control;
pub mod datapath;
pub mod driver;

pub use config::TranslatorConfig;
pub use driver::Translator;
