//! What the responder transmits: ACKs and NAKs, atomic ACKs and READ responses, emitted into
//! the caller's [`TxBatch`] from each QP's prebuilt templates, and the transmit counters.
//! Owns: packet emission. May not: change a QP's sequence state.

use dta_proto::batch::TxBatch;
use dta_proto::wire::ib::{
    opcode as op, Aeth, AethRepr, AtomicAckEth, AtomicAckEthRepr, BthRepr, Psn, Syndrome, AETH_LEN,
};
use dta_proto::wire::roce::{FrameTemplate, L2L4_LEN};

use super::{DeviceConfig, Mr, Qp};
use crate::counters::RnicCounters;

pub(super) fn tx_offset(dev: &DeviceConfig) -> usize {
    if dev.l2_frames {
        0
    } else {
        L2L4_LEN
    }
}

pub(super) fn send_ack(qp: &mut Qp, dev: &DeviceConfig, tx: &mut TxBatch, syn: Syndrome, psn: Psn) {
    let aeth = AethRepr {
        syndrome: syn,
        msn: qp.msn,
    };
    let off = tx_offset(dev);
    let tmpl = &qp.ack_tmpl;
    let ok = tx.push_with(qp.cfg.peer, off, |buf| {
        tmpl.emit(buf, psn, false, |ext| {
            aeth.emit(&mut Aeth::new_unchecked(ext))
        })
    });
    count_tx(&mut qp.counters, ok);
    if ok {
        match syn {
            Syndrome::Ack { .. } => qp.counters.acks_sent += 1,
            _ => qp.counters.naks_sent += 1,
        }
    }
}

pub(super) fn send_atomic_ack(
    qp: &mut Qp,
    dev: &DeviceConfig,
    tx: &mut TxBatch,
    psn: Psn,
    orig: u64,
) {
    let aeth = AethRepr {
        syndrome: Syndrome::Ack { credits: 0x1f },
        msn: qp.msn,
    };
    let off = tx_offset(dev);
    let tmpl = &qp.atomic_ack_tmpl;
    let ok = tx.push_with(qp.cfg.peer, off, |buf| {
        tmpl.emit(buf, psn, false, |ext| {
            let (a, rest) = ext.split_at_mut(AETH_LEN);
            aeth.emit(&mut Aeth::new_unchecked(a));
            AtomicAckEthRepr { orig }.emit(&mut AtomicAckEth::new_unchecked(rest));
        })
    });
    count_tx(&mut qp.counters, ok);
}

/// Sends the responses of the READ the QP is answering, from where it stopped, as far as
/// `tx` has room. Reads the region straight into the batch (no buffer per READ). Returns true
/// once every response went out (the READ is done).
pub(super) fn pump_read(
    qp: &mut Qp,
    dev: &DeviceConfig,
    mrs: &[Option<Mr>],
    tx: &mut TxBatch,
) -> bool {
    let Some(mut ro) = qp.read_out else {
        return true;
    };
    let pmtu = dev.pmtu as usize;
    let r = ro.res;
    let off = tx_offset(dev);
    while ro.next < r.npsn {
        if tx.remaining() == 0 {
            qp.read_out = Some(ro);
            return false;
        }
        let i = ro.next;
        let start = i as usize * pmtu;
        let len = (r.len as usize).saturating_sub(start).min(pmtu);
        let opcode = match (r.npsn, i) {
            (1, _) => op::RC_RDMA_READ_RESPONSE_ONLY,
            (_, 0) => op::RC_RDMA_READ_RESPONSE_FIRST,
            (n, x) if x == n - 1 => op::RC_RDMA_READ_RESPONSE_LAST,
            _ => op::RC_RDMA_READ_RESPONSE_MIDDLE,
        };
        let aeth = (opcode != op::RC_RDMA_READ_RESPONSE_MIDDLE).then_some(AethRepr {
            syndrome: Syndrome::Ack { credits: 0x1f },
            msn: qp.msn,
        });
        let psn = Psn::new(r.first.wrapping_add(i));
        let bth = BthRepr::rc(opcode, qp.cfg.peer_qpn, psn, false);
        let tmpl = FrameTemplate::with_bth(&qp.ep, &bth, len);
        let region = mrs.get(r.mr).and_then(|m| m.as_ref()).map(|m| &m.region);
        let mut read_ok = len == 0;
        let ok = tx.push_with(qp.cfg.peer, off, |buf| {
            tmpl.emit(buf, psn, false, |ext| {
                let payload = match aeth {
                    Some(a) => {
                        let (h, p) = ext.split_at_mut(AETH_LEN);
                        a.emit(&mut Aeth::new_unchecked(h));
                        p
                    }
                    None => ext,
                };
                if let Some(region) = region.filter(|_| len > 0) {
                    read_ok = region.read(r.offset + start as u64, payload).is_ok();
                }
            })
        });
        if !read_ok {
            // The region went away (deregistered) mid-READ: stop answering it.
            qp.read_out = None;
            return true;
        }
        count_tx(&mut qp.counters, ok);
        ro.next += 1;
    }
    qp.read_out = None;
    true
}

pub(super) fn count_tx(c: &mut RnicCounters, ok: bool) {
    if ok {
        c.sent_pkts += 1;
    } else {
        c.tx_dropped += 1;
    }
}
