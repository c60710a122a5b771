//! Completions of the real-RNIC backend: the store's record (and list heads) sent once a
//! connection is established, and the completion queue's events (WRITE with Immediate, SENDs,
//! errors), counted like the software RNIC's.
//!
//! Owns: what happens on ESTABLISHED and on a CQ event. May not: accept or destroy
//! connections ([`super::backend`] does).

use std::collections::VecDeque;

use rdma_sys::*;

use dta_proto::wire::ib::Qpn;
use dta_proto::wire::listheads;
use dta_proto::wire::metarec::{MetaRecord, META_RECORD_LEN};

use super::backend::fmt_peer;
use super::backend::{Backend, HEADS_WR_BASE, META_WR_ID, RECENT_EVENTS, RECV_SLOT};
use super::conn::ConnState;
use super::verbs::{self, SendOp};
use crate::append::list_heads;
use crate::responder::Completion;

impl Backend {
    pub(super) fn on_established(&mut self, key: usize) {
        let Some(c) = self.conns.get_mut(&key) else {
            return;
        };
        let Some(record) = self.stores[c.store].record.clone() else {
            // A ZERO agent's region: the REP carried its record; the peer READs from now on.
            c.state = ConnState::Ready;
            log::info!(
                "rdma: region {:?}: established with {}; READs are served by the RNIC",
                self.stores[c.store].name,
                fmt_peer(c.peer)
            );
            return;
        };
        // The R_Key of the store's MR on this connection's device (never the lkey).
        let rkey = self.devices[c.device].mrs[c.store].rkey();
        let rec = MetaRecord { rkey, ..record }.to_bytes();
        let lkey = c.buf_mr.lkey();
        for (i, b) in rec.iter().enumerate() {
            c.buf[i] = *b;
        }
        // SAFETY: live QP; slot 0 of the registered buffer holds the record until the SEND
        // completes (it is never reused while the connection lives).
        let r = unsafe {
            verbs::post_send(
                c.id.qp(),
                META_WR_ID,
                SendOp::Send,
                c.buf_addr(0),
                META_RECORD_LEN as u32,
                lkey,
            )
        };
        let r = r.and_then(|()| {
            c.sends_out = 1;
            let spec = &self.stores[c.store];
            let Some(a) = &spec.heads else {
                return Ok(());
            };
            // The next batch number of every list, read now (after the translator's RTU, as
            // the software RNIC does), in messages after the record.
            let next = list_heads(&spec.region, a);
            let per = c.heads.0;
            for (k, chunk) in next.chunks(per).enumerate() {
                let at = c.heads_at(k);
                let end = at + listheads::message_len(per);
                if listheads::emit((k * per) as u32, a.lists, chunk, &mut c.buf[at..end]).is_none()
                {
                    return Err(std::io::Error::other("list-head message does not fit"));
                }
            }
            c.post_heads()
        });
        match r {
            Ok(()) => {
                c.state = ConnState::MetaPosted;
                log::info!(
                    "rdma: store {:?}: established with {}; metadata SEND posted (rkey {rkey:#x}){}",
                    self.stores[c.store].name,
                    fmt_peer(c.peer),
                    if c.heads.1 > 0 {
                        format!(", then {} list-head message(s)", c.heads.1)
                    } else {
                        String::new()
                    },
                );
            }
            Err(e) => {
                log::error!("rdma: metadata SEND could not be posted: {e}; disconnecting");
                // SAFETY: a live id.
                unsafe {
                    rdma_disconnect(c.id.0);
                }
            }
        }
    }

    pub(super) fn on_cq_event(&mut self, key: usize) {
        let Some(c) = self.conns.get_mut(&key) else {
            return;
        };
        let mut cq = std::ptr::null_mut();
        let mut ctx = std::ptr::null_mut();
        // SAFETY: a live non-blocking channel; out-pointers are valid.
        if unsafe { ibv_get_cq_event(c.channel.0, &mut cq, &mut ctx) } == 0 {
            // SAFETY: the event came from this CQ; acknowledged at once (Cq's Drop relies on it).
            unsafe { ibv_ack_cq_events(cq, 1) };
        }
        if let Err(e) = c.cq.arm() {
            log::warn!("rdma: ibv_req_notify_cq: {e}");
        }
        let mut wcs = verbs::wc_array::<16>();
        let mut disconnect = false;
        loop {
            let n = match c.cq.poll(&mut wcs) {
                Ok(n) => n,
                Err(e) => {
                    log::error!("rdma: {e}");
                    break;
                }
            };
            for wc in &wcs[..n] {
                let qpn = Qpn::new(c.qpn);
                if wc.status != ibv_wc_status::IBV_WC_SUCCESS {
                    if wc.status != ibv_wc_status::IBV_WC_WR_FLUSH_ERR {
                        log::warn!(
                            "rdma: QPN {:#x}: completion {} failed: {}",
                            c.qpn,
                            if wc.wr_id == META_WR_ID {
                                "of the metadata SEND"
                            } else if wc.wr_id >= HEADS_WR_BASE {
                                "of a list-head SEND"
                            } else {
                                "of a receive"
                            },
                            verbs::wc_status(wc.status)
                        );
                    }
                    disconnect = true;
                    continue;
                }
                if wc.opcode == ibv_wc_opcode::IBV_WC_SEND {
                    c.sends_out = c.sends_out.saturating_sub(1);
                }
                match wc.opcode {
                    ibv_wc_opcode::IBV_WC_SEND
                        if wc.wr_id >= HEADS_WR_BASE && wc.wr_id != META_WR_ID =>
                    {
                        if let Err(e) = c.post_heads() {
                            log::warn!("rdma: posting list-head SENDs failed: {e}");
                            disconnect = true;
                        }
                        if wc.wr_id - HEADS_WR_BASE + 1 == c.heads.1 as u64 {
                            log::info!(
                                "rdma: store {:?}: list heads delivered to {} ({} message(s))",
                                self.stores[c.store].name,
                                fmt_peer(c.peer),
                                c.heads.1
                            );
                        }
                    }
                    ibv_wc_opcode::IBV_WC_SEND if wc.wr_id == META_WR_ID => {
                        c.state = ConnState::Ready;
                        log::info!(
                            "rdma: store {:?}: metadata delivered to {} (QPN {:#x})",
                            self.stores[c.store].name,
                            fmt_peer(c.peer),
                            c.qpn
                        );
                    }
                    ibv_wc_opcode::IBV_WC_RECV_RDMA_WITH_IMM => {
                        self.imm_events += 1;
                        c.counters.write_imm += 1;
                        self.own.write_imm += 1;
                        push_bounded(
                            &mut self.recent,
                            Completion::WriteWithImm {
                                qpn,
                                imm: verbs::wc_imm(wc),
                                len: wc.byte_len,
                            },
                        );
                    }
                    ibv_wc_opcode::IBV_WC_RECV => {
                        c.counters.sends += 1;
                        self.own.sends += 1;
                        let slot = wc.wr_id as usize;
                        let len = (wc.byte_len as usize).min(RECV_SLOT);
                        let data = c.buf[slot * RECV_SLOT..slot * RECV_SLOT + len].to_vec();
                        push_bounded(
                            &mut self.recent,
                            Completion::Recv {
                                qpn,
                                imm: verbs::wc_has_imm(wc).then(|| verbs::wc_imm(wc)),
                                data,
                            },
                        );
                    }
                    other => log::debug!("rdma: completion opcode {other}"),
                }
                if wc.opcode & ibv_wc_opcode::IBV_WC_RECV != 0
                    && (1..=c.recv_depth as u64).contains(&wc.wr_id)
                {
                    if let Err(e) = c.post_recv(wc.wr_id) {
                        log::warn!("rdma: re-posting a receive failed: {e}");
                    }
                }
            }
            if n < wcs.len() {
                break;
            }
        }
        if disconnect && c.state != ConnState::Accepted {
            // The QP is in the error state: tell the peer; DISCONNECTED then destroys it.
            // SAFETY: a live id.
            unsafe {
                rdma_disconnect(c.id.0);
            }
        }
    }
}

fn push_bounded(q: &mut VecDeque<Completion>, c: Completion) {
    if q.len() >= RECENT_EVENTS {
        q.pop_front();
    }
    q.push_back(c);
}
