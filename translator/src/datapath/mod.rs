//! The hot path: everything that runs per packet. No configuration parsing, no connection
//! set-up, no HTTP, no allocation per packet.

pub mod pipeline;
pub mod qp;
pub mod retx;
pub mod stats;
pub mod udp_frame;
