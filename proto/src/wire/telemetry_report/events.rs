//! Collector memory layouts of the events the translator appends (drops, congestion), and how
//! queries read them back.

use super::inner::{FlowKey, FLOW_KEY_LEN};
use super::metadata::{DropInfo, QueueOccupancy};

mod field {
    use core::ops::Range;
    // Both entries: the flow key, then the node ID (BE).
    pub const FLOW: Range<usize> = 0..super::FLOW_KEY_LEN;
    pub const NODE_ID: Range<usize> = 13..17;
    // Drop entry.
    pub const DROP_REASON: usize = 17;
    pub const DROP_QUEUE: usize = 18;
    // Congestion entry: queue ID, occupancy (24 bits, BE).
    pub const CONG_QUEUE: usize = 17;
    pub const CONG_OCCUPANCY: Range<usize> = 18..21;
}

#[inline]
fn node_id(e: &[u8]) -> u32 {
    let r = field::NODE_ID;
    u32::from_be_bytes([e[r.start], e[r.start + 1], e[r.start + 2], e[r.start + 3]])
}

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
        e[field::FLOW].copy_from_slice(&self.flow.to_bytes());
        e[field::NODE_ID].copy_from_slice(&self.node_id.to_be_bytes());
        e[field::DROP_REASON] = self.drop.reason;
        e[field::DROP_QUEUE] = self.drop.queue;
        e
    }

    /// Reads an entry (`None` if `e` is shorter than [`DROP_ENTRY_LEN`]).
    pub fn from_bytes(e: &[u8]) -> Option<DropEvent> {
        let e: &[u8; DROP_ENTRY_LEN] = e.get(..DROP_ENTRY_LEN)?.try_into().ok()?;
        Some(DropEvent {
            flow: FlowKey::from_bytes(e[field::FLOW].try_into().ok()?),
            node_id: node_id(e),
            drop: DropInfo {
                reason: e[field::DROP_REASON],
                queue: e[field::DROP_QUEUE],
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
        e[field::FLOW].copy_from_slice(&self.flow.to_bytes());
        e[field::NODE_ID].copy_from_slice(&self.node_id.to_be_bytes());
        e[field::CONG_QUEUE] = self.queue.id;
        e[field::CONG_OCCUPANCY].copy_from_slice(&self.queue.occupancy.to_be_bytes()[1..]);
        e
    }

    /// Reads an entry (`None` if `e` is shorter than [`CONGESTION_ENTRY_LEN`]).
    pub fn from_bytes(e: &[u8]) -> Option<CongestionEvent> {
        let e: &[u8; CONGESTION_ENTRY_LEN] = e.get(..CONGESTION_ENTRY_LEN)?.try_into().ok()?;
        Some(CongestionEvent {
            flow: FlowKey::from_bytes(e[field::FLOW].try_into().ok()?),
            node_id: node_id(e),
            queue: QueueOccupancy {
                id: e[field::CONG_QUEUE],
                occupancy: {
                    let o = field::CONG_OCCUPANCY.start;
                    u32::from_be_bytes([0, e[o], e[o + 1], e[o + 2]])
                },
            },
        })
    }
}
