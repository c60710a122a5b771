//! `dta-translator`: the software DTA translator.
//!
//! # Data flow
//! Reporters send DTA reports (UDP 40040). A worker receives a burst, hands it with the current
//! time to its [`datapath::pipeline::Pipeline`], which parses each report, hashes its key,
//! batches Append entries, caches postcards, replicates Key-Write and Key-Increment N times,
//! and writes RoCEv2 frames (RDMA WRITE, WRITE with Immediate, FETCH_ADD) into a transmit batch
//! with a correct ICRC and per-QP PSNs. The worker sends the batch to the collector's RNIC,
//! which places the bytes in memory; the collector's CPU never sees a report. ACKs and NAKs
//! come back to the same pipeline, which keeps every QP in sync without retransmitting.
//!
//! # Layout
//! - [`datapath`]: the per-packet path, sans-I/O and allocation-free.
//! - [`config`]: the TOML configuration.
//! - [`run`]: sockets, threads and connection set-up around the pipeline.
//! - [`backends`]: the raw-frame backends (`translator.backend`) and the transmit capture.
//!
//! # Invariants
//! Every report received is eventually counted as translated or as dropped with a reason; no
//! input panics; no QP is shared between cores.

pub mod backends;
pub mod config;
pub mod control;
pub mod datapath;
pub mod run;

pub use config::TranslatorConfig;
pub use run::Translator;
