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
        if !self.fast_path {
            return false;
        }
        let p = d.payload;
        const HEAD: usize = BTH_LEN + RETH_LEN;
        if p.len() < HEAD + ICRC_LEN || p[0] != op::RC_RDMA_WRITE_ONLY {
            return false;
        }
        let bth = Bth::new_unchecked(&p[..BTH_LEN]);
        if bth.tver() != 0 || bth.pkey() & 0x7fff != 0x7fff {
            return false;
        }
        let Some(qi) = self.qp_index(bth.dest_qp()) else {
            return false;
        };
        let Some(qp) = self.qps[qi].as_mut() else {
            return false;
        };
        let psn = bth.psn();
        if psn != qp.epsn
            || qp.state != QpState::Ready
            || !matches!(qp.in_progress, InProgress::None)
            || qp.read_out.is_some()
            || d.src.ip() != qp.cfg.peer.ip()
            || (d.dst.ip() != self.dev.local.ip() && !d.dst.ip().is_unspecified())
        {
            return false;
        }
        let reth = Reth::new_unchecked(&p[BTH_LEN..HEAD]);
        let dma_len = reth.dma_len() as usize;
        let pad = bth.pad_count() as usize;
        let Some(len) = (p.len() - HEAD - ICRC_LEN).checked_sub(pad) else {
            return false;
        };
        if len != dma_len || len == 0 || len > self.dev.pmtu as usize {
            return false;
        }
        if qp.cfg.verify_icrc {
            let ok = match d.ip {
                None => {
                    let key = IcrcPrefixKey {
                        len: p.len(),
                        src: d.src,
                        dst: d.dst,
                    };
                    let prefix = match qp.icrc_prefix {
                        Some((k, reg)) if k == key => reg,
                        _ => {
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
                    icrc::check_after_prefix(prefix, p)
                }
                // Raw backends: the general path checks the headers as seen.
                Some(_) => false,
            };
            if !ok {
                return false;
            }
        }
        let Some(mr) = self
            .mrs
            .get(mr_slot(reth.rkey()))
            .and_then(|m| m.as_ref())
            .filter(|m| m.rkey == reth.rkey() && m.access.remote_write)
        else {
            return false;
        };
        // The region checks the range (an address below the base wraps past its end).
        let off = reth.va().wrapping_sub(mr.base);
        if mr.region.write(off, &p[HEAD..HEAD + len]).is_err() {
            return false;
        }
        qp.counters.rcvd_pkts += 1;
        qp.counters.write_bytes += len as u64;
        qp.counters.writes += 1;
        qp.msn = (qp.msn + 1) & 0xff_ffff;
        qp.sent_psn_nak = false;
        qp.epsn = psn.next();
        if bth.ack_req() {
            send_ack(qp, &self.dev, tx, Syndrome::Ack { credits: 0x1f }, psn);
        }
        true
    }
}
