//! The driver: sockets, threads and connection set-up around the sans-I/O
//! [`Pipeline`](crate::datapath::pipeline::Pipeline), one module per job (quinn's thin
//! `Endpoint` driver is the model: it owns I/O and time, the state machines decide).
//!
//! - [`start`](Translator::start): binds, connects, builds the pipelines and spawns the
//!   threads; [`control_only`] for a hardware translator.
//! - `worker`: one worker thread's loop ([`Worker::run`]) and what it publishes
//!   ([`WorkerSnapshot`]). Received bursts are split by
//!   [`crate::datapath::demux::PortDemux`], not inline in the loop.
//! - `dispatch`: the dispatcher thread and the hand-off mesh between workers.
//! - `connect`: the blocking RDMA_CM connect, QPN allocation, reconnection and disconnection.
//! - `routes`: collector metadata, `[routing]` resolution, start-up checks, each worker's
//!   pipeline configuration.
//! - `sockets`: binding the report, INT and RoCEv2 sockets as the steering settings say.
//!
//! Nothing here parses a report or builds a frame: the per-packet work is `datapath`'s, the
//! RDMA_CM and cluster state machines are `control`'s.

mod connect;
mod dispatch;
mod routes;
mod sockets;
mod start;
mod worker;

pub use connect::{connect_blocking, worker_qpn, StoreInitiator};
pub use dispatch::{dispatch_worker, DispatchBurst, DispatchRx, DispatchStats, HandoffLinks};
pub use routes::{load_collectors, pipeline_for, resolve_routes, unserved_report_kinds};
pub use start::{control_only, Translator};
pub use worker::{Worker, WorkerSnapshot};

#[cfg(test)]
mod tests;
