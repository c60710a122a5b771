//! `dta-bench`: the report generator, the end-to-end demo, the pcap replay harness, the CPU
//! collector baselines and the figures.
//!
//! Data flows `gen` → `trace` (in memory or a pcap file) → `replay` (the production translator
//! pipeline and software RNIC, in memory on pinned workers or over kernel UDP sockets), and the
//! same trace → `baseline` (CPU collectors on a UDP socket), and → `collectors` (the same
//! telemetry stored in Redis, ClickHouse and InfluxDB by the `dta ingest` process). `figures`
//! runs the sweeps that mirror the papers' figures and writes JSON and SVG. Everything measured per packet runs on
//! preallocated buffers; clocks are read per burst.

pub mod backend_replay;
pub mod baseline;
pub mod cluster;
pub mod collectors;
pub mod dart;
pub mod dartbench;
pub mod demo;
pub mod figures;
pub mod gen;
pub mod interference;
pub mod pcapcheck;
pub mod progress;
pub mod replay;
pub mod sender;
pub mod sketchbench;
pub mod svg;
pub mod sys;
pub mod trace;
pub mod traffic;
pub mod workload;
pub mod zerobench;
