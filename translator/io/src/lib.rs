//! `dta-io`: packet I/O backends that only move bytes.
//!
//! The translator's pipeline and the collector's software RNIC are sans-I/O state machines; a
//! backend receives bursts into its own buffers, hands them over as
//! [`dta_proto::batch::Datagram`]s, and transmits a [`dta_proto::batch::TxBatch`]. Every backend
//! allocates its buffers once and makes no per-packet syscall.
//!
//! Backends:
//! - [`udp`]: kernel UDP sockets with `recvmmsg`/`sendmmsg` (the default; no privileges).

pub mod backend;
pub mod signal;
pub mod udp;
