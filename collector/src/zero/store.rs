//! What the pull collector's processing side keeps: the newest consistent snapshot of every
//! block of every agent (and the one before it, for rates), for queries and `/metrics`.

use std::sync::RwLock;

use dta_proto::zero::MetricKind;

/// A block as its agent describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlockInfo {
    /// Name (`net/eth0`, `cpu`, an application's array).
    pub name: String,
    /// Counter or gauge.
    pub kind: MetricKind,
    /// Values.
    pub entries: u32,
}

/// One snapshot of a block.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sample {
    /// The block's sequence word (2 × the agent's updates).
    pub seq: u64,
    /// When the READ that took it completed (ns since the collector started).
    pub at_ns: u64,
    /// The values.
    pub values: Vec<u64>,
}

/// The newest two snapshots of a block.
#[derive(Debug, Clone)]
pub struct BlockView {
    /// The block.
    pub info: BlockInfo,
    /// Newest snapshot.
    pub last: Option<Sample>,
    /// The one before (an older sequence).
    pub prev: Option<Sample>,
}

impl BlockView {
    /// Per-second rates of a counter block between its two newest snapshots (`None` for a
    /// gauge or before two snapshots; a counter that went backwards, e.g. an interface reset,
    /// gives 0 for that entry).
    pub fn rates(&self) -> Option<Vec<f64>> {
        if self.info.kind != MetricKind::Counter {
            return None;
        }
        let (a, b) = (self.prev.as_ref()?, self.last.as_ref()?);
        let dt = b.at_ns.checked_sub(a.at_ns).filter(|&d| d > 0)? as f64 / 1e9;
        Some(
            a.values
                .iter()
                .zip(&b.values)
                .map(|(x, y)| y.saturating_sub(*x) as f64 / dt)
                .collect(),
        )
    }
}

/// One agent as the processing side sees it.
#[derive(Debug, Clone)]
pub struct AgentView {
    /// Its name (configuration).
    pub name: String,
    /// Its RoCEv2 address.
    pub addr: std::net::SocketAddrV4,
    /// Connected.
    pub up: bool,
    /// Its region's generation (control area).
    pub generation: u32,
    /// Its blocks.
    pub blocks: Vec<BlockView>,
}

/// What the processing thread keeps (module docs). Readers take the lock briefly; the
/// processing thread takes it once per batch of snapshots.
#[derive(Debug, Default)]
pub struct PullStore {
    agents: RwLock<Vec<AgentView>>,
}

impl PullStore {
    /// A store for `agents` (name, address), none connected yet.
    pub fn new(agents: &[(String, std::net::SocketAddrV4)]) -> PullStore {
        PullStore {
            agents: RwLock::new(
                agents
                    .iter()
                    .map(|(name, addr)| AgentView {
                        name: name.clone(),
                        addr: *addr,
                        up: false,
                        generation: 0,
                        blocks: Vec::new(),
                    })
                    .collect(),
            ),
        }
    }

    /// Runs `f` on every agent.
    pub fn with_agents<R>(&self, f: impl FnOnce(&[AgentView]) -> R) -> R {
        f(&self.agents.read().expect("pull store lock"))
    }

    /// Applies updates in one write lock.
    pub fn apply(&self, f: impl FnOnce(&mut [AgentView])) {
        f(&mut self.agents.write().expect("pull store lock"))
    }

    /// A query's JSON: every agent with its blocks' newest values, or one agent's (by name)
    /// or one block's (`agent`, `block`). `None` if the agent or block is unknown.
    pub fn query_json(
        &self,
        agent: Option<&str>,
        block: Option<&str>,
    ) -> Option<serde_json::Value> {
        use serde_json::json;
        let block_json = |b: &BlockView| {
            json!({
                "name": b.info.name,
                "kind": match b.info.kind { MetricKind::Counter => "counter", MetricKind::Gauge => "gauge" },
                "entries": b.info.entries,
                "seq": b.last.as_ref().map(|s| s.seq),
                "pulled_at_ns": b.last.as_ref().map(|s| s.at_ns),
                "values": b.last.as_ref().map(|s| s.values.clone()),
                "rates_per_s": b.rates(),
            })
        };
        let agents = self.agents.read().expect("pull store lock");
        let agent_json = |a: &AgentView, only: Option<&str>| -> Option<serde_json::Value> {
            let blocks: Vec<_> = a
                .blocks
                .iter()
                .filter(|b| only.is_none_or(|n| n == b.info.name))
                .map(block_json)
                .collect();
            if only.is_some() && blocks.is_empty() {
                return None;
            }
            Some(json!({
                "name": a.name,
                "roce": a.addr.to_string(),
                "up": a.up,
                "generation": a.generation,
                "blocks": blocks,
            }))
        };
        match agent {
            None => Some(json!({
                "agents": agents.iter().filter_map(|a| agent_json(a, None)).collect::<Vec<_>>()
            })),
            Some(name) => agent_json(agents.iter().find(|a| a.name == name)?, block),
        }
    }
}
