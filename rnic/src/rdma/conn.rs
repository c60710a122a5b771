//! One connection accepted by the real-RNIC backend: its QP (through the rdma_cm id), CQ,
//! completion channel and registered buffer (receive slots, the record, list-head messages).
//!
//! Owns: a connection's verbs objects, in the order they must drop, and posting to its QP.
//! May not: decide when a connection is accepted or closed ([`super::backend`] does).

use std::net::SocketAddrV4;

use dta_proto::wire::listheads;

use super::backend::{HEADS_WR_BASE, RECV_SLOT, SEND_DEPTH};
use super::verbs::{self, CmId, CompChannel, Cq, Mr, SendOp};
use crate::counters::RnicCounters;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum ConnState {
    /// Accepted; waiting for the RTU (ESTABLISHED).
    Accepted,
    /// The metadata SEND is posted.
    MetaPosted,
    /// The metadata SEND completed: the translator knows the store.
    Ready,
}

/// One accepted connection.
pub(super) struct Conn {
    pub(super) store: usize,
    pub(super) device: usize,
    /// Accept order (for the per-peer bound: the oldest go first).
    pub(super) order: u64,
    pub(super) peer: Option<SocketAddrV4>,
    pub(super) peer_qpn: u32,
    pub(super) qpn: u32,
    pub(super) state: ConnState,
    pub(super) recv_depth: u32,
    /// List-head messages of this connection: (heads per message, total, posted so far).
    pub(super) heads: (usize, usize, usize),
    /// Lists whose heads are sent (the last message carries the remainder).
    pub(super) head_lists: usize,
    /// SENDs posted and not yet completed.
    pub(super) sends_out: u32,
    pub(super) counters: RnicCounters,
    // Drop order matters: the id (and its QP) first, then the CQ, its channel, the buffer's
    // MR, and the buffer itself.
    pub(super) id: CmId,
    pub(super) cq: Cq,
    pub(super) channel: CompChannel,
    pub(super) buf_mr: Mr,
    pub(super) buf: Box<[u8]>,
}

impl Conn {
    pub(super) fn buf_addr(&self, slot: u64) -> u64 {
        self.buf.as_ptr() as u64 + slot * RECV_SLOT as u64
    }

    /// Offset in `buf` of list-head message `k` (after the receive slots).
    pub(super) fn heads_at(&self, k: usize) -> usize {
        RECV_SLOT * (self.recv_depth as usize + 1) + k * listheads::message_len(self.heads.0)
    }

    /// Posts list-head SENDs while the send queue has room.
    pub(super) fn post_heads(&mut self) -> std::io::Result<()> {
        let (per, total, _) = self.heads;
        while self.heads.2 < total && self.sends_out < SEND_DEPTH {
            let k = self.heads.2;
            let at = self.heads_at(k);
            let len = listheads::message_len(per.min(self.head_lists - k * per)) as u32;
            // SAFETY: live QP; message k lies inside buf (sized for every message at accept),
            // registered under buf_mr, and is not written again while the connection lives.
            unsafe {
                verbs::post_send(
                    self.id.qp(),
                    HEADS_WR_BASE + k as u64,
                    SendOp::Send,
                    self.buf.as_ptr() as u64 + at as u64,
                    len,
                    self.buf_mr.lkey(),
                )
            }?;
            self.heads.2 += 1;
            self.sends_out += 1;
        }
        Ok(())
    }

    /// Posts the receive WQE of `slot` (1..=recv_depth; slot 0 holds the metadata record).
    pub(super) fn post_recv(&self, slot: u64) -> std::io::Result<()> {
        // SAFETY: the QP is live (the id owns it); the slot lies inside buf, which is
        // registered under buf_mr and outlives the QP (field order).
        unsafe {
            verbs::post_recv(
                self.id.qp(),
                slot,
                self.buf_addr(slot),
                RECV_SLOT as u32,
                self.buf_mr.lkey(),
            )
        }
    }
}
