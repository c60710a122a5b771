//! How the pull collector is configured: the collector file's `[pull]` section
//! ([`PullSection`]) and the puller's own configuration ([`PullConfig`]) with its validation.
//! Nothing here runs; the puller takes a validated [`PullConfig`].
//!
//! ```toml
//! [pull]
//! listen = "10.0.0.51:4792"      # our RoCEv2 address for READs (port + k for thread k)
//! interval_ms = 1000             # each agent every second
//! credit_bytes = 262144          # Credit-FC T: response bytes in flight, all threads
//! io = "hybrid"                  # hybrid | poll | event
//!
//! [[pull.agent]]
//! name = "web-1"
//! roce = "10.0.1.1:4791"
//! # cm_port = 7700
//! ```

use std::net::SocketAddrV4;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use dta_proto::zero::block_len;

/// How a collecting thread waits for completions (module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum IoMode {
    /// Event-driven with many READs in flight, busy polling with few.
    Hybrid,
    /// Always busy-poll.
    Poll,
    /// Always wait in the kernel.
    Event,
}

/// One agent to pull from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentSpec {
    /// A name for queries and metrics.
    pub name: String,
    /// Its RoCEv2 address (`ip:4791`).
    pub roce: SocketAddrV4,
    /// Its rdma_cm service (port).
    pub cm_port: u16,
}

/// How to pull.
#[derive(Debug, Clone)]
pub struct PullConfig {
    /// Our RoCEv2 address; collecting thread `k` binds port `port + k` (port 0: any).
    pub local: SocketAddrV4,
    /// The agents.
    pub agents: Vec<AgentSpec>,
    /// Time between the starts of an agent's rounds.
    pub interval: Duration,
    /// Credit-FC total T: response bytes in flight at once, over all collecting threads.
    pub credit_bytes: u64,
    /// Apply Credit-FC (off: the baseline that issues every READ at once; in-flight bytes are
    /// still measured).
    pub credit_fc: bool,
    /// How completions are waited for.
    pub io: IoMode,
    /// Hybrid: event-driven at or above this many READs in flight.
    pub event_above: usize,
    /// Hybrid / poll: how long to spin for a completion before sleeping (µs).
    pub spin_us: u64,
    /// Collecting threads (1 or 2); agents are split between them.
    pub collect_threads: usize,
    /// Largest READ (bytes): adjacent blocks are read together up to this.
    pub max_read: u32,
    /// Read the control header every this many rounds (its generation tells whether the block
    /// list changed).
    pub control_every: u32,
    /// Times a block caught mid-update or torn is read again within a round.
    pub torn_retries: u32,
    /// READ timeout: no progress for this long asks again.
    pub read_timeout: Duration,
    /// Timeouts in a row before a QP is given up and the agent reconnected.
    pub read_retries: u32,
    /// Wait before reconnecting a lost agent.
    pub reconnect: Duration,
    /// Kernel receive buffer of each collecting socket (bytes).
    pub rcvbuf: usize,
}

impl PullConfig {
    /// Defaults for `agents`, pulled every `interval`, from `local`.
    pub fn new(local: SocketAddrV4, agents: Vec<AgentSpec>, interval: Duration) -> PullConfig {
        PullConfig {
            local,
            agents,
            interval,
            credit_bytes: 256 << 10,
            credit_fc: true,
            io: IoMode::Hybrid,
            event_above: 16,
            spin_us: 50,
            collect_threads: 1,
            max_read: 16 << 10,
            control_every: 50,
            torn_retries: 8,
            read_timeout: Duration::from_millis(20),
            read_retries: 7,
            reconnect: Duration::from_millis(500),
            rcvbuf: 4 << 20,
        }
    }

    /// Checks the configuration; the error says what to change.
    pub fn validate(&self) -> Result<(), String> {
        if self.agents.is_empty() {
            return Err("pull: no agents".into());
        }
        if !(1..=2).contains(&self.collect_threads) {
            return Err("pull: collect_threads must be 1 or 2 (ZERO's one or two collecting threads; processing has its own)".into());
        }
        if self.interval.is_zero() {
            return Err("pull: interval must be positive".into());
        }
        let largest_block = block_len(dta_proto::zero::MAX_ENTRIES) as u32;
        if self.max_read < largest_block.min(4096) {
            return Err(format!(
                "pull: max_read must be at least 4096 bytes, got {}",
                self.max_read
            ));
        }
        // Every READ must fit a thread's share of T: the largest block is read whole (a span
        // of blocks is at most max_read). A control area larger than the share is refused
        // when met (counted in control_invalid).
        let per_thread = self.credit_bytes / self.collect_threads as u64;
        let largest = (self.max_read as u64).max(block_len(dta_proto::zero::MAX_ENTRIES) as u64);
        if per_thread < largest {
            return Err(format!(
                "pull: credit_bytes (T = {}) must give each of the {} collecting thread(s) room for the largest READ ({largest} bytes: max_read or a block of {} values); raise it",
                self.credit_bytes,
                self.collect_threads,
                dta_proto::zero::MAX_ENTRIES
            ));
        }
        let mut seen = std::collections::HashSet::new();
        for a in &self.agents {
            if !seen.insert(&a.name) {
                return Err(format!("pull: two agents are named {:?}", a.name));
            }
        }
        Ok(())
    }
}

/// The agents' default rdma_cm service (port).
pub const DEFAULT_CM_PORT: u16 = 7700;

fn default_cm_port() -> u16 {
    DEFAULT_CM_PORT
}

/// One `[[pull.agent]]`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentEntry {
    /// Name in queries and metrics (unique).
    pub name: String,
    /// The agent's RoCEv2 address.
    pub roce: SocketAddrV4,
    /// Its rdma_cm service.
    #[serde(default = "default_cm_port")]
    pub cm_port: u16,
}

/// `[pull]` (see the module docs; defaults are [`PullConfig::new`]'s).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PullSection {
    /// Our RoCEv2 address for READs (not the software RNIC's: the collecting threads own
    /// their sockets).
    pub listen: SocketAddrV4,
    /// Each agent is pulled this often (ms).
    #[serde(default = "d_interval")]
    pub interval_ms: u64,
    /// Credit-FC total T (bytes).
    #[serde(default = "d_credit")]
    pub credit_bytes: u64,
    /// Apply Credit-FC.
    #[serde(default = "d_true")]
    pub credit_fc: bool,
    /// How completions are waited for.
    #[serde(default = "d_io")]
    pub io: IoMode,
    /// Hybrid: event-driven at or above this many READs in flight.
    #[serde(default = "d_event_above")]
    pub event_above: usize,
    /// Busy-poll time before sleeping (µs).
    #[serde(default = "d_spin")]
    pub spin_us: u64,
    /// Collecting threads, 1 or 2.
    #[serde(default = "d_threads")]
    pub collect_threads: usize,
    /// Largest READ (bytes).
    #[serde(default = "d_max_read")]
    pub max_read: u32,
    /// Read the control header every this many rounds.
    #[serde(default = "d_control_every")]
    pub control_every: u32,
    /// READ timeout (ms).
    #[serde(default = "d_timeout")]
    pub read_timeout_ms: u64,
    /// Kernel receive buffer per collecting socket (bytes).
    #[serde(default = "d_rcvbuf")]
    pub rcvbuf: usize,
    /// The agents.
    #[serde(default, rename = "agent")]
    pub agents: Vec<AgentEntry>,
}

fn defaults() -> PullConfig {
    PullConfig::new(
        SocketAddrV4::new(std::net::Ipv4Addr::UNSPECIFIED, 0),
        Vec::new(),
        Duration::from_secs(1),
    )
}
fn d_interval() -> u64 {
    1000
}
fn d_credit() -> u64 {
    defaults().credit_bytes
}
fn d_true() -> bool {
    true
}
fn d_io() -> IoMode {
    IoMode::Hybrid
}
fn d_event_above() -> usize {
    defaults().event_above
}
fn d_spin() -> u64 {
    defaults().spin_us
}
fn d_threads() -> usize {
    1
}
fn d_max_read() -> u32 {
    defaults().max_read
}
fn d_control_every() -> u32 {
    defaults().control_every
}
fn d_timeout() -> u64 {
    defaults().read_timeout.as_millis() as u64
}
fn d_rcvbuf() -> usize {
    defaults().rcvbuf
}

impl PullSection {
    /// The puller's configuration.
    pub fn to_config(&self) -> PullConfig {
        let mut c = PullConfig::new(
            self.listen,
            self.agents
                .iter()
                .map(|a| AgentSpec {
                    name: a.name.clone(),
                    roce: a.roce,
                    cm_port: a.cm_port,
                })
                .collect(),
            Duration::from_millis(self.interval_ms),
        );
        c.credit_bytes = self.credit_bytes;
        c.credit_fc = self.credit_fc;
        c.io = self.io;
        c.event_above = self.event_above;
        c.spin_us = self.spin_us;
        c.collect_threads = self.collect_threads;
        c.max_read = self.max_read;
        c.control_every = self.control_every.max(1);
        c.read_timeout = Duration::from_millis(self.read_timeout_ms.max(1));
        c.rcvbuf = self.rcvbuf;
        c
    }

    /// Checks the section (errors name `[pull]`).
    pub fn validate(&self) -> Result<(), String> {
        if self.control_every == 0 {
            return Err("[pull] control_every: must be at least 1".into());
        }
        if self.interval_ms == 0 {
            return Err("[pull] interval_ms: must be at least 1".into());
        }
        self.to_config()
            .validate()
            .map_err(|e| format!("[pull] {}", e.trim_start_matches("pull: ")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_section_parses_with_defaults_and_bad_ones_are_named() {
        let s: PullSection = toml::from_str(
            r#"
listen = "127.0.0.1:4792"
[[agent]]
name = "a"
roce = "127.0.0.2:4791"
"#,
        )
        .unwrap();
        assert_eq!(s.agents[0].cm_port, DEFAULT_CM_PORT);
        assert_eq!(s.io, IoMode::Hybrid);
        s.validate().unwrap();
        let c = s.to_config();
        assert_eq!(c.interval, Duration::from_secs(1));
        let mut bad = s.clone();
        bad.credit_bytes = 1000;
        let e = bad.validate().unwrap_err();
        assert!(e.starts_with("[pull] credit_bytes"), "{e}");
        let mut none = s.clone();
        none.agents.clear();
        assert!(none.validate().unwrap_err().contains("no agents"));
        assert!(toml::from_str::<PullSection>("listen = \"127.0.0.1:1\"\nfoo = 1").is_err());
    }
}
