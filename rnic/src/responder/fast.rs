//! The responder's fast path for the common case: a plain RDMA WRITE Only at the expected
//! PSN. Owns: [`Responder::write_fast`]. May not: decide or count anything differently from
//! the general path in [`super::execute`] (`tests::fast_and_general_paths_agree`).

use dta_proto::batch::{Datagram, TxBatch};
use dta_proto::icrc::{self, ReconstructedHeader};
use dta_proto::wire::ib::{opcode as op, Bth, Reth, Syndrome, BTH_LEN, ICRC_LEN, RETH_LEN};

use super::reply::send_ack;
use super::{mr_slot, IcrcPrefixKey, InProgress, QpState, Responder};

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
        // The headers as one fixed-size array: every field read below is check-free.
        let Some(h) = p.first_chunk::<HEAD>() else {
            return false;
        };
        if !self.fast_path || p.len() < HEAD + ICRC_LEN {
            return false;
        }
        // Opcode, TVer and P_Key (either membership bit) in one compare of BTH's first word.
        let w0 = u32::from_be_bytes([h[0], h[1], h[2], h[3]]);
        if w0 & 0xFF0F_7FFF != (op::RC_RDMA_WRITE_ONLY as u32) << 24 | 0x7FFF {
            return false;
        }
        let bth = Bth::new_unchecked(&h[..BTH_LEN]);
        // As `qp_index`: a QPN below the base wraps to an index no QP has.
        let qi = bth.dest_qp().value().wrapping_sub(self.qpn_base) as usize;
        let Some(Some(qp)) = self.qps.get_mut(qi) else {
            return false;
        };
        let psn = bth.psn();
        if psn != qp.epsn
            || qp.state != QpState::Ready
            || !matches!(qp.in_progress, InProgress::None)
            || qp.read_out.is_some()
        {
            return false;
        }
        // Only the connected peer, to our address. The QP's peer and our address never change,
        // so a datagram whose addresses match the ICRC prefix cache (filled only after this
        // check passed) passes it too: checked below only when the cache does not answer.
        let local = self.dev.local.ip();
        let addr_ok = |d: &Datagram<'_>, peer: &std::net::SocketAddrV4| {
            d.src.ip() == peer.ip() && (d.dst.ip() == local || d.dst.ip().is_unspecified())
        };
        let reth = Reth::new_unchecked(&h[BTH_LEN..]);
        let pad = (w0 >> 20) as usize & 3;
        let Some(len) = (p.len() - HEAD - ICRC_LEN).checked_sub(pad) else {
            return false;
        };
        if len != reth.dma_len() as usize || len == 0 || len > self.dev.pmtu as usize {
            return false;
        }
        if qp.cfg.verify_icrc {
            // Raw backends (`d.ip` known): the general path checks the headers as seen.
            if d.ip.is_some() {
                return false;
            }
            let key = IcrcPrefixKey {
                len: p.len(),
                src: d.src,
                dst: d.dst,
            };
            let prefix = match qp.icrc_prefix {
                Some((k, reg)) if k == key => reg,
                _ => {
                    if !addr_ok(d, &qp.cfg.peer) {
                        return false;
                    }
                    let h = ReconstructedHeader {
                        src_ip: *d.src.ip(),
                        dst_ip: *d.dst.ip(),
                        src_port: d.src.port(),
                        dst_port: d.dst.port(),
                    };
                    let reg = icrc::reconstructed_prefix(&h, p.len());
                    qp.icrc_prefix = Some((key, reg));
                    reg
                }
            };
            if !icrc::check_after_prefix(prefix, p) {
                return false;
            }
        } else if !addr_ok(d, &qp.cfg.peer) {
            return false;
        }
        let rkey = reth.rkey();
        let Some(Some(mr)) = self.mrs.get(mr_slot(rkey)) else {
            return false;
        };
        if mr.rkey != rkey || !mr.access.remote_write {
            return false;
        }
        // The region checks the range (an address below the base wraps past its end).
        let off = reth.va().wrapping_sub(mr.base);
        if mr.region.write(off, &p[HEAD..HEAD + len]).is_err() {
            return false;
        }
        // `rcvd_pkts` and `writes` both, folded in when the counters are read.
        qp.fast_writes += 1;
        qp.counters.write_bytes += len as u64;
        qp.msn = (qp.msn + 1) & 0xff_ffff;
        qp.sent_psn_nak = false;
        qp.epsn = psn.next();
        if bth.ack_req() {
            send_ack(qp, &self.dev, tx, Syndrome::Ack { credits: 0x1f }, psn);
        }
        true
    }
}
