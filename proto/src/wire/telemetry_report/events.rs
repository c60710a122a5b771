//! Collector memory layouts of the events the translator appends (drops, congestion), and how
//! queries read them back.

use super::inner::{FlowKey, FLOW_KEY_LEN};
use super::metadata::{DropInfo, QueueOccupancy};

/// Bytes of a drop event entry: flow (13), node ID (4, BE), drop reason, queue ID, one zero.
pub const DROP_ENTRY_LEN: usize = 20;
/// Bytes of a congestion event entry: flow (13), node ID (4, BE), queue ID, occupancy (3, BE),
/// three zeros.
pub const CONGESTION_ENTRY_LEN: usize = 24;

/// A drop event as the translator appends it (and as queries read it back).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct DropEvent {
    /// The dropped packet's flow.
    pub flow: FlowKey,
    /// The node that dropped it.
    pub node_id: u32,
    /// Queue and reason.
    pub drop: DropInfo,
}

impl DropEvent {
    /// The entry bytes.
    pub fn to_bytes(&self) -> [u8; DROP_ENTRY_LEN] {
        let mut e = [0u8; DROP_ENTRY_LEN];
        e[..FLOW_KEY_LEN].copy_from_slice(&self.flow.to_bytes());
        e[13..17].copy_from_slice(&self.node_id.to_be_bytes());
        e[17] = self.drop.reason;
        e[18] = self.drop.queue;
        e
    }

    /// Reads an entry (`None` if `e` is shorter than [`DROP_ENTRY_LEN`]).
    pub fn from_bytes(e: &[u8]) -> Option<DropEvent> {
        let e: &[u8; DROP_ENTRY_LEN] = e.get(..DROP_ENTRY_LEN)?.try_into().ok()?;
        Some(DropEvent {
            flow: FlowKey::from_bytes(e[..FLOW_KEY_LEN].try_into().ok()?),
            node_id: u32::from_be_bytes([e[13], e[14], e[15], e[16]]),
            drop: DropInfo {
                reason: e[17],
                queue: e[18],
            },
        })
    }
}

/// A congestion event as the translator appends it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CongestionEvent {
    /// The flow that met the congested queue.
    pub flow: FlowKey,
    /// The node.
    pub node_id: u32,
    /// The queue and its occupancy.
    pub queue: QueueOccupancy,
}

impl CongestionEvent {
    /// The entry bytes.
    pub fn to_bytes(&self) -> [u8; CONGESTION_ENTRY_LEN] {
        let mut e = [0u8; CONGESTION_ENTRY_LEN];
        e[..FLOW_KEY_LEN].copy_from_slice(&self.flow.to_bytes());
        e[13..17].copy_from_slice(&self.node_id.to_be_bytes());
        e[17] = self.queue.id;
        e[18..21].copy_from_slice(&self.queue.occupancy.to_be_bytes()[1..]);
        e
    }

    /// Reads an entry (`None` if `e` is shorter than [`CONGESTION_ENTRY_LEN`]).
    pub fn from_bytes(e: &[u8]) -> Option<CongestionEvent> {
        let e: &[u8; CONGESTION_ENTRY_LEN] = e.get(..CONGESTION_ENTRY_LEN)?.try_into().ok()?;
        Some(CongestionEvent {
            flow: FlowKey::from_bytes(e[..FLOW_KEY_LEN].try_into().ok()?),
            node_id: u32::from_be_bytes([e[13], e[14], e[15], e[16]]),
            queue: QueueOccupancy {
                id: e[17],
                occupancy: u32::from_be_bytes([0, e[18], e[19], e[20]]),
            },
        })
    }
}
