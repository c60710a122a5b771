//! `dta-rnic`: the RNIC side of DTA, shared by the collector and the ZERO agent.
//!
//! # What it is
//! A collector (`dta-collector`) and a ZERO agent (`dta-agent`) both register memory with an
//! RNIC and let remote peers reach it over RoCEv2. This crate is that RNIC, and nothing
//! else: no stores, no queries, no configuration files, no HTTP.
//!
//! - [`memory`]: [`Region`](memory::Region), the `mmap`ed bytes RDMA targets (hugepages or a
//!   file), with atomic, bounds-checked access for the threads that read them meanwhile.
//! - [`responder`]: the embedded software RNIC's RC responder, a sans-I/O state machine with
//!   Linux rxe's semantics (WRITE with its fast path, READ, atomics, SEND), fed datagrams and
//!   `now`, answering into a caller-owned [`TxBatch`](dta_proto::batch::TxBatch).
//! - [`cm`]: the RDMA_CM listener (REQ/REP/RTU/DREQ on the GSI QP) that creates the
//!   responder's QPs and advertises a region (a store's metadata record in a SEND, or a ZERO
//!   region record in the REP).
//! - [`allow`]: who may connect over RDMA_CM (IPv4 CIDR allowlists).
//! - [`counters`]: the responder's counters, named like rxe's and mlx5's hw counters.
//! - [`append`]: the one thing the RNIC reads of an Append ring itself: the trailers that tell a
//!   reconnecting translator where each list continues.
//! - [`published`]: what an RNIC's thread publishes for the control plane (counters,
//!   completions, connections), software or real.
//! - [`rdma`]: the real-RNIC backend's event thread over librdmacm and libibverbs
//!   (`rdma-sys`, cargo feature `rdma`), which registers regions with an RDMA NIC and accepts
//!   RDMA_CM connections for them; the NIC then answers without our CPU.
//!
//! # Data flow
//! ```text
//!  UDP 4791 ─ driver (dta-collector's RNIC thread, dta-agent's server) ─┬─ GSI QP ─▶ cm::CmResponder
//!                                                                      └─ RoCEv2 ─▶ responder::Responder
//!  TxBatch ◀── ACK/NAK, READ responses, atomic ACKs, CM MADs ──┘            │ writes / reads
//!                                                                          ▼
//!                                                              memory::Region ◀── queries
//! ```
//! The drivers own the sockets and threads; everything here is fed bytes and time.
//!
//! # Invariants
//! - Nothing remote can touch memory outside a registered region: every RDMA access is
//!   checked against the region's bounds, R_Key and access rights before a byte moves, and
//!   answered with the protocol's NAK otherwise.
//! - Only a QP's connected peer may use it (source address check); duplicates never execute
//!   twice; out-of-sequence requests never execute.
//! - Only peers in a service's allowlist get a QP and the region's coordinates over RDMA_CM;
//!   R_Keys, PSNs, QPN bases and communication IDs come from the kernel's random source.
//! - Every dropped packet increments a counter.
//! - `unsafe` lives in [`memory`] (the mapping) and the `rdma` backend (verbs FFI), each block
//!   with a `// SAFETY:` note.
//!
//! # Panic contract
//! No input from the network can panic this crate. Panics indicate a bug, or a documented
//! misuse by the caller (e.g. registering more than [`responder::MAX_MRS`] regions with
//! [`responder::Responder::register`]).

pub mod allow;
pub mod append;
pub mod cm;
pub mod counters;
pub mod memory;
pub mod published;
pub mod rdma;
pub mod responder;
