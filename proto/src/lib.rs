//! `dta-proto`: everything the translator, the collector, the benchmark and the Tofino program
//! must agree on, and nothing else.
//!
//! # What lives here
//! - [`wire`]: packet views and representations for DTA reports (the reference profile of the
//!   authors' Tofino artefact, in both base-header variants, and our extended profile, see
//!   `PROTOCOL.md`), DTA NACKs, Ethernet/IPv4/UDP, and the InfiniBand transport headers RoCEv2
//!   carries (BTH, RETH, AtomicETH, AtomicAckETH, AETH, ImmDt, DETH).
//! - [`icrc`]: the RoCEv2 invariant CRC exactly as Linux rxe computes and checks it, with a
//!   per-connection precomputed prefix so a 64-byte frame costs a few nanoseconds.
//! - [`crc`]: the reflected CRC-32 engines behind the ICRC and every hash: tables, and
//!   carry-less multiplication where the CPU has it.
//! - [`hash`]: the two hash profiles (`reference`, bit-for-bit the Tofino artefact; and
//!   `independent`, one polynomial per replica, the default) for Key-Write, Key-Increment and
//!   Postcarding.
//! - [`layout`]: collector memory layouts (Key-Write slot, Key-Increment counter, Append ring,
//!   Postcarding chunk) with their byte orders.
//! - [`geometry`]: a store's layout and hashers, validated once against its region
//!   ([`geometry::StoreGeometry`]); every writer and reader derives its addresses from it.
//! - [`sketch`]: Sketch-Merge: sketch kinds, their hashes and merges, the merged sketch's
//!   memory layout and its estimators (reports: [`wire::sketch`]).
//! - [`cluster`]: the collector cluster file: which collector holds each key, Append list and
//!   sketch, epoch by epoch (translators, query clients and the P4 control plane share it).
//! - [`analysis`]: the papers' success-probability formulas.
//! - [`rdma_cm`]: the RDMA_CM initiator (REQ/REP/RTU, DREQ/DREP, retransmissions) as a
//!   sans-I/O state machine fed MADs and the time; the translator and the pull collector drive it.
//!
//! # How data flows
//! A reporter's datagram is parsed by [`wire::report`] into a [`wire::report::Report`]; the
//! translator hashes its key with [`hash`], places it with [`layout`], and emits RoCEv2 frames
//! built with [`wire::roce`] and sealed with [`icrc`]. The collector's software RNIC parses the
//! same frames with [`wire::roce`], checks the ICRC, and its query engine reads memory through
//! [`layout`] and [`hash`].
//!
//! # Invariants and panic contract
//! No I/O, no threads, no clocks, no allocation on any per-packet path. Parsing untrusted bytes
//! never panics: every view has a checked constructor and every accessor is in bounds after it.
//! `emit` functions panic only if handed a buffer shorter than the `buffer_len()` they report,
//! which is a programming error.

#![deny(unsafe_code)]
#![warn(missing_docs)]

pub mod analysis;
pub mod batch;
pub mod cluster;
pub mod consts;
pub mod cpu;
pub mod crc;
pub mod geometry;
pub mod hash;
pub mod icrc;
pub mod layout;
pub mod meta;
pub mod rdma_cm;
pub mod sketch;
pub mod stats;
pub mod types;
pub mod wire;
pub mod zero;

pub use types::{Key, Value, MAX_KEY_LEN, MAX_VALUE_LEN};
