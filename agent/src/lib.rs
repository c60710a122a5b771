//! The ZERO-mode agent (Tao et al., ATC'22): a monitored host's metrics, published in one
//! memory region that a pull collector reads with one-sided RDMA READ, on its own schedule,
//! without the host's CPU deciding when.
//!
//! ```text
//!  application ──register_array/publish──▶ ┌ AgentRegion ┐ ◀──READ── pull collector
//!  /proc/net/dev, /proc/stat ─HostSampler─▶ │ control area│   (RDMA_CM REQ → REP carries the
//!                                           │ blocks      │    RegionRecord → RTU → READs)
//!                                           └─────────────┘
//!                                         AgentServer: software RNIC (UDP 4791), READ-only
//! ```
//!
//! - [`region`]: the region ([`AgentRegion`]) in [`dta_proto::zero`]'s layout, and the one
//!   writer per block ([`ArrayWriter`]), which seals every update, with the time its values
//!   were taken ([`AgentClock`]), so a READ racing it is refused by
//!   [`dta_proto::zero::verify_block`], never taken for data, and rates are computed on the
//!   agent's clock.
//! - [`host`]: the host counters: pure parsers of the `/proc` files' text and the sampler that
//!   publishes them.
//! - [`server`]: [`AgentServer`], the software RNIC that registers the region READ-only and
//!   answers RDMA_CM with the region record in its REP; [`AgentPoller`] serves many agents
//!   from one thread.
//! - [`metrics`]: the daemon's Prometheus page.
//!
//! Nothing allocates per publish or per READ. Panics: [`ArrayWriter::publish`] with a slice
//! of the wrong length (a programming error); nothing that arrives from the network or a
//! `/proc` file can make this crate panic.

pub mod host;
pub mod metrics;
pub mod region;
pub mod server;

pub use host::{HostSampler, SamplerConfig};
pub use region::{AgentClock, AgentRegion, ArrayWriter, RegionError};
pub use server::{AgentCounters, AgentOptions, AgentPoller, AgentServer};
