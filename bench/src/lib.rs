//! `dta-bench`: the report generator, the end-to-end demo, and (later) the replay harness and
//! baselines.

pub mod corpus;
pub mod demo;
pub mod p4gen;
pub mod sender;
pub mod workload;
