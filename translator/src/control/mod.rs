//! The control plane: connection set-up (RDMA_CM) and everything that does not run per packet.

pub mod cluster;
pub mod cm;
pub mod metrics;
