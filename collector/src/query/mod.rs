//! The query engine: reads store memory without ever writing it (except where noted: epoch
//! resets of Key-Increment stores, and the reference Append format's consumed entries) and
//! without a database.
//!
//! - [`keywrite`]: plurality or consensus vote over a key's N checksummed slots.
//! - [`counter`]: count-min minimum over a key's N counters; epochs.
//! - [`postcard`]: decode a flow's chunks over V ∪ {⊔}; agreeing valid chunks give the path.
//! - [`sketch`]: Sketch-Merge point queries, HyperLogLog cardinality, heavy hitters and
//!   per-epoch completeness.
//! - [`append`]: tail readers that see the writer's head, survive wrap and count overruns.
//! - [`estimate`]: load factors and expected success from the papers' formulas.
//! - [`keys`]: the operator-facing key syntax (hex or IPv4 5-tuple).

pub mod append;
pub mod counter;
pub mod estimate;
pub mod keys;
pub mod keywrite;
pub mod postcard;
pub mod sketch;
