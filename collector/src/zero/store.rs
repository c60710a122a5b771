//! What the pull collector's processing side keeps: the newest consistent snapshot of every
//! block of every agent (and the sample before it, for rates), for queries and `/metrics`.
//!
//! Rates are computed on the agent's clock: Δvalue / Δ`sampled_ns` between the two newest
//! *samples* (distinct sample times), never from when the READs completed. The agent and the
//! collector sample on their own schedules and clocks; a READ crossing a sample edge would
//! otherwise see two samples in one interval (2×) or none (0.5×). A READ of the sample the
//! store already has changes nothing.

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
    /// When the agent took the values (ns on the agent's clock; 0: never sampled).
    pub sampled_ns: u64,
    /// When the READ that took it completed (ns since the collector started).
    pub at_ns: u64,
    /// The values.
    pub values: Vec<u64>,
}

/// The newest two samples of a block.
#[derive(Debug, Clone)]
pub struct BlockView {
    /// The block.
    pub info: BlockInfo,
    /// Newest snapshot.
    pub last: Option<Sample>,
    /// The sample before (another sequence and another sample time).
    pub prev: Option<Sample>,
}

impl BlockView {
    /// Takes a verified snapshot: the same update again changes nothing; the same sample time
    /// under a new sequence (the agent re-published a sample) replaces the newest in place;
    /// anything else becomes the newest, and the newest before it the previous. Reuses the
    /// previous sample's buffer: no allocation once both exist.
    pub fn observe(&mut self, seq: u64, sampled_ns: u64, at_ns: u64, values: &[u64]) {
        let (slot, shift) = match &self.last {
            Some(l) if l.seq == seq => return,
            Some(l) if l.sampled_ns == sampled_ns => (self.last.take(), false),
            _ => (self.prev.take(), true),
        };
        let mut s = slot.unwrap_or(Sample {
            seq: 0,
            sampled_ns: 0,
            at_ns: 0,
            values: Vec::new(),
        });
        s.seq = seq;
        s.sampled_ns = sampled_ns;
        s.at_ns = at_ns;
        s.values.clear();
        s.values.extend_from_slice(values);
        if shift {
            self.prev = self.last.replace(s);
        } else {
            self.last = Some(s);
        }
    }

    /// Per-second rates of a counter block between its two newest samples, per second of the
    /// agent's clock (`None` for a gauge, before two samples, or when a sample time is 0 or
    /// not after the previous one; a counter that went backwards, e.g. an interface reset,
    /// gives 0 for that entry).
    pub fn rates(&self) -> Option<Vec<f64>> {
        if self.info.kind != MetricKind::Counter {
            return None;
        }
        let (a, b) = (self.prev.as_ref()?, self.last.as_ref()?);
        if a.sampled_ns == 0 {
            return None;
        }
        let dt = b.sampled_ns.checked_sub(a.sampled_ns).filter(|&d| d > 0)? as f64 / 1e9;
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
                "sampled_ns": b.last.as_ref().map(|s| s.sampled_ns),
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

#[cfg(test)]
mod tests {
    use super::*;

    fn view() -> BlockView {
        BlockView {
            info: BlockInfo {
                name: "c".into(),
                kind: MetricKind::Counter,
                entries: 1,
            },
            last: None,
            prev: None,
        }
    }

    #[test]
    fn rates_are_per_second_of_the_agents_clock_between_distinct_samples() {
        let mut v = view();
        // Registered block (sample time 0), then samples 250 agent-ms apart, pulled at
        // arbitrary collector times.
        v.observe(0, 0, 5, &[0]);
        v.observe(2, 1_000_000_000, 10, &[1_000]);
        assert_eq!(v.rates(), None, "no rate across a block never sampled");
        v.observe(4, 1_250_000_000, 11, &[1_500]);
        assert_eq!(v.rates(), Some(vec![2_000.0]));
        // The same update READ again, much later: nothing changes.
        v.observe(4, 1_250_000_000, 900_000_000_000, &[1_500]);
        assert_eq!(v.rates(), Some(vec![2_000.0]));
        assert_eq!(v.last.as_ref().unwrap().at_ns, 11);
        // The agent re-published the same sample (new sequence, same time): it replaces the
        // newest, the previous sample stays.
        v.observe(6, 1_250_000_000, 12, &[1_500]);
        assert_eq!(v.prev.as_ref().unwrap().seq, 2);
        assert_eq!(v.rates(), Some(vec![2_000.0]));
        // A sample time going backwards: no rate until a later sample.
        v.observe(8, 1_000, 13, &[1_600]);
        assert_eq!(v.rates(), None);
        v.observe(10, 1_000 + 500_000_000, 14, &[1_700]);
        assert_eq!(v.rates(), Some(vec![200.0]));
        // A counter that went backwards gives 0.
        v.observe(12, 1_000 + 1_000_000_000, 15, &[3]);
        assert_eq!(v.rates(), Some(vec![0.0]));
        // Gauges have none.
        v.info.kind = MetricKind::Gauge;
        assert_eq!(v.rates(), None);
    }
}
