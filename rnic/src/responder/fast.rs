//! The responder's fast path for the common case: a plain RDMA WRITE Only at the expected
//! PSN. Owns: [`Responder::write_fast`]. May not: decide or count anything differently from
//! the general path in [`super::execute`] (`tests::fast_and_general_paths_agree`).

use dta_proto::batch::{Datagram, TxBatch};
use dta_proto::icrc::{self, ReconstructedHeader};
use dta_proto::wire::ib::{opcode as op, Psn, Reth, Syndrome, BTH_LEN, ICRC_LEN, RETH_LEN};

use super::reply::send_ack;
use super::{mr_slot, FastIcrcKey, InProgress, QpState, Responder, WriteMr};

impl Responder {
    /// The common case, done with the fewest instructions: an RDMA WRITE Only at the expected
    /// PSN, from the connected peer, on a ready QP with nothing in progress, whose ICRC is
    /// right (as sent with IPv4 ident 0) and whose R_Key and range are valid. Anything else
    /// returns false before touching any state, and [`Responder::handle`] takes the general
    /// path, which decides and counts exactly as for any other packet; so does this path for
    /// the packets it takes (`tests::fast_and_general_paths_agree`).
    #[inline]
    pub(super) fn write_fast(&mut self, d: &Datagram<'_>, tx: &mut TxBatch) -> bool {
        const HEAD: usize = BTH_LEN + RETH_LEN;
        let p = d.payload;
        // `fast_path` is only ever cleared by the unit tests: outside them, not even tested.
        if (cfg!(test) && !self.fast_path) || p.len() < HEAD + ICRC_LEN {
            return false;
        }
        // The headers as one fixed-size array: every field read below is check-free.
        let Some(h) = p.first_chunk::<HEAD>() else {
            return false;
        };
        // BTH as three big-endian words: opcode, TVer and P_Key (either membership bit) in
        // one compare of the first; the destination QP and the PSN the low 24 bits of the
        // others (what `Bth::dest_qp` and `Bth::psn` read), AckReq the PSN word's top bit.
        let w0 = u32::from_be_bytes([h[0], h[1], h[2], h[3]]);
        if w0 & 0xFF0F_7FFF != (op::RC_RDMA_WRITE_ONLY as u32) << 24 | 0x7FFF {
            return false;
        }
        let w1 = u32::from_be_bytes([h[4], h[5], h[6], h[7]]);
        let w2 = u32::from_be_bytes([h[8], h[9], h[10], h[11]]);
        // As `qp_index`: a QPN below the base wraps to an index no QP has.
        let qi = (w1 & 0xFF_FFFF).wrapping_sub(self.qpn_base) as usize;
        let Some(Some(qp)) = self.qps.get_mut(qi) else {
            return false;
        };
        let psn = Psn::new(w2);
        if psn != qp.epsn
            || qp.state != QpState::Ready
            || !matches!(qp.in_progress, InProgress::None)
            || qp.read_out.is_some()
        {
            return false;
        }
        let reth = Reth::new_unchecked(&h[BTH_LEN..]);
        let pad = (w0 >> 20) as usize & 3;
        let Some(len) = (p.len() - HEAD - ICRC_LEN).checked_sub(pad) else {
            return false;
        };
        if len != reth.dma_len() as usize || len == 0 || len > self.dev.pmtu as usize {
            return false;
        }
        // Only the connected peer, to our address. The QP's peer and our address never change,
        // so a datagram whose addresses match the ICRC prefix cache (filled only after this
        // check passed) passes it too: checked below only when the cache does not answer.
        let local = self.dev.local.ip();
        let addr_ok = |d: &Datagram<'_>, peer: &std::net::SocketAddrV4| {
            d.src.ip() == peer.ip() && (d.dst.ip() == local || d.dst.ip().is_unspecified())
        };
        if qp.cfg.verify_icrc {
            // Raw backends (`d.ip` known): the general path checks the headers as seen.
            if d.ip.is_some() {
                return false;
            }
            let prefix = if qp.icrc_fast.0.matches(d) {
                qp.icrc_fast.1
            } else {
                if !addr_ok(d, &qp.cfg.peer) {
                    return false;
                }
                let h = ReconstructedHeader::between(d.src, d.dst);
                let reg = icrc::reconstructed_prefix(&h, p.len());
                qp.icrc_fast = (FastIcrcKey::of(d), reg);
                reg
            };
            if !icrc::check_after_prefix(prefix, p) {
                return false;
            }
        } else if !addr_ok(d, &qp.cfg.peer) {
            return false;
        }
        // The R_Key: the QP's cached registration when it names the same key (filled below
        // only for a registered region with write access, emptied on every deregistration),
        // else the device's table.
        let rkey = reth.rkey();
        if qp.write_mr.rkey != u64::from(rkey.0) {
            let Some(Some(mr)) = self.mrs.get(mr_slot(rkey)) else {
                return false;
            };
            if mr.rkey != rkey || !mr.access.remote_write {
                return false;
            }
            qp.write_mr = WriteMr {
                rkey: u64::from(rkey.0),
                base: mr.base,
                region: Some(mr.region.clone()),
            };
        }
        let Some(region) = &qp.write_mr.region else {
            return false;
        };
        // The region checks the range (an address below the base wraps past its end).
        let off = reth.va().wrapping_sub(qp.write_mr.base);
        if region.write(off, &p[HEAD..HEAD + len]).is_err() {
            return false;
        }
        // `rcvd_pkts` and `writes` both, folded in when the counters are read.
        qp.fast_writes += 1;
        qp.counters.write_bytes += len as u64;
        qp.msn = qp.msn.wrapping_add(1);
        qp.sent_psn_nak = false;
        qp.epsn = psn.next();
        if w2 & 0x8000_0000 != 0 {
            send_ack(qp, &self.dev, tx, Syndrome::Ack { credits: 0x1f }, psn);
        }
        true
    }
}
