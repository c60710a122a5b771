//! The hot path: everything that runs per packet. No configuration parsing, no connection
//! set-up, no HTTP, no allocation per packet.
//!
//! - [`pipeline`]: the per-core state machine (parse, route, admit, hand off, account).
//! - [`primitive`]: one module per DTA primitive behind one interface.
//! - [`sender`]: a store's QP with its frame templates and typed emitters.
//! - [`qp`]: the RC requester (PSNs, queue, recovery, window); [`rtt`] and [`timer`] are its
//!   parts; [`retx`] its ring.
//! - [`reporters`], [`demux`]: O(1) per-packet lookups; [`rate`]: message-rate limits.
//! - [`int_ingest`]: P4.org Telemetry Reports (INT) mapped onto DTA reports.

pub mod demux;
pub mod int_ingest;
pub mod pipeline;
pub mod primitive;
pub mod qp;
pub mod rate;
pub mod reporters;
pub mod retx;
pub mod rtt;
pub mod sender;
pub mod stats;
pub mod timer;
pub mod udp_frame;
