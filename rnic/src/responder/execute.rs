//! The responder's general path: ICRC verification, R_Key and range checks, executing a
//! request (WRITE, READ set-up, atomics, SEND, WRITE with Immediate), duplicates, and the
//! completions it queues. Owns: what a request does to a QP and its region. May not: build
//! or queue packets itself ([`super::reply`] does).

use std::collections::VecDeque;

use dta_proto::batch::{Datagram, TxBatch};
use dta_proto::icrc::{self, IcrcVerdict, PreparedCheck, ReconstructedHeader};
use dta_proto::wire::ib::{opcode as op, Psn, Rkey, Syndrome};
use dta_proto::wire::ipv4::{Ipv4Packet, Ipv4Repr, PROTO_UDP};
use dta_proto::wire::roce::RocePacket;
use dta_proto::wire::udp::{UdpPacket, UdpRepr};

use super::reply::{pump_read, send_ack, send_atomic_ack};
use super::{
    mr_slot, Access, AtomicRes, Completion, DeviceConfig, Fault, IcrcPrefixKey, InProgress, Mr, Qp,
    ReadOut, ReadRes, CQ_DEPTH, MAX_RD_ATOMIC,
};
use crate::counters::RnicCounters;

pub(super) enum Step {
    /// The request executed; ACK it if asked (or always, for `ack: true` callers decide).
    Done { ack: bool },
    /// The request executed and consumed `n` PSNs; responses were already queued.
    Advanced(u32),
    /// No receive buffer: answer RNR NAK, consume nothing.
    Rnr,
}

/// The ICRC verdict from the datagram alone: exact with the IPv4 header at hand, else by
/// reconstruction (solving for the ident). Out of line: [`verify_icrc_cached`] answers the
/// common case before it.
#[inline(never)]
pub(super) fn verify_icrc(d: &Datagram<'_>) -> IcrcVerdict {
    let h = ReconstructedHeader::between(d.src, d.dst);
    match d.ip {
        Some(ip) => {
            if check_with_ip(&h, ip.ident, ip.dont_frag, ip.ttl, ip.tos, d.payload) {
                IcrcVerdict::Ok
            } else {
                IcrcVerdict::Bad
            }
        }
        None => icrc::check_reconstructed(&h, d.payload),
    }
}

/// [`verify_icrc`] that first tries the common case, a datagram sent with IPv4 ident 0 and
/// DF, from the register after its masked IPv4 and UDP headers kept in `cache` for the last
/// addresses and length seen, as a [`PreparedCheck`] for that length (a QP's requests come in
/// few shapes): the same verdict, without recomputing that register per packet. Anything else
/// takes [`verify_icrc`].
#[inline(always)]
pub(super) fn verify_icrc_cached(
    cache: &mut Option<(IcrcPrefixKey, PreparedCheck)>,
    d: &Datagram<'_>,
) -> IcrcVerdict {
    /// The longest UDP payload of an IPv4 datagram: what `reconstructed_prefix` accepts.
    const MAX_TRANSPORT_LEN: usize = u16::MAX as usize - 28;
    let p = d.payload;
    if d.ip.is_none() && p.len() <= MAX_TRANSPORT_LEN {
        let key = IcrcPrefixKey {
            len: p.len(),
            src: d.src,
            dst: d.dst,
        };
        let check = match cache {
            Some((k, c)) if *k == key => c,
            _ => prepare_check(cache, key),
        };
        if check.check(p) {
            return IcrcVerdict::Ok;
        }
    }
    verify_icrc(d)
}

/// Fills [`verify_icrc_cached`]'s cache for `key` (out of line: once per shape).
#[cold]
#[inline(never)]
fn prepare_check(
    cache: &mut Option<(IcrcPrefixKey, PreparedCheck)>,
    key: IcrcPrefixKey,
) -> &PreparedCheck {
    let h = ReconstructedHeader::between(key.src, key.dst);
    let reg = icrc::reconstructed_prefix(&h, key.len);
    &cache.insert((key, PreparedCheck::new(reg, key.len))).1
}

/// Exact ICRC check when the backend saw the IPv4 header (raw frames).
fn check_with_ip(
    h: &ReconstructedHeader,
    ident: u16,
    df: bool,
    ttl: u8,
    tos: u8,
    transport: &[u8],
) -> bool {
    let Some(body_len) = transport.len().checked_sub(4) else {
        return false;
    };
    let mut ip = [0u8; 20];
    Ipv4Repr {
        src: h.src_ip,
        dst: h.dst_ip,
        protocol: PROTO_UDP,
        ttl,
        tos,
        ident,
        dont_frag: df,
        payload_len: 8 + transport.len(),
    }
    .emit(&mut Ipv4Packet::new_unchecked(&mut ip[..]));
    let mut udp = [0u8; 8];
    UdpRepr {
        src_port: h.src_port,
        dst_port: h.dst_port,
        payload_len: transport.len(),
    }
    .emit(&mut UdpPacket::new_unchecked(&mut udp[..]));
    let want = u32::from_le_bytes(transport[body_len..].try_into().expect("4 bytes"));
    icrc::icrc_ipv4(&ip, &udp, &transport[..body_len]) == want
}

fn resolve<'m>(
    mrs: &'m [Option<Mr>],
    rkey: Rkey,
    va: u64,
    len: u64,
    need: fn(&Access) -> bool,
    c: &mut RnicCounters,
) -> Result<(usize, u64, &'m Mr), Fault> {
    let idx = mr_slot(rkey);
    let Some(mr) = mrs
        .get(idx)
        .and_then(|m| m.as_ref())
        .filter(|m| m.rkey == rkey)
    else {
        c.rkey_violation += 1;
        return Err(Fault::Access);
    };
    if !need(&mr.access) {
        c.access_denied += 1;
        return Err(Fault::Access);
    }
    let off = va.wrapping_sub(mr.base);
    if va < mr.base
        || off
            .checked_add(len)
            .is_none_or(|end| end > mr.region.len() as u64)
    {
        c.out_of_bounds += 1;
        return Err(Fault::Access);
    }
    Ok((idx, off, mr))
}

pub(super) fn execute(
    qp: &mut Qp,
    dev: &DeviceConfig,
    mrs: &[Option<Mr>],
    cq: &mut VecDeque<Completion>,
    pkt: &RocePacket<'_>,
    tx: &mut TxBatch,
) -> Result<Step, Fault> {
    let opc = pkt.bth.opcode;
    let pmtu = dev.pmtu as usize;
    let ack_req = pkt.bth.ack_req;
    // Opcode order: a FIRST must be followed by MIDDLE*/LAST of the same kind.
    let continuing = matches!(
        opc,
        op::RC_RDMA_WRITE_MIDDLE
            | op::RC_RDMA_WRITE_LAST
            | op::RC_RDMA_WRITE_LAST_IMM
            | op::RC_SEND_MIDDLE
            | op::RC_SEND_LAST
            | op::RC_SEND_LAST_IMM
    );
    match (qp.in_progress, continuing) {
        (InProgress::None, true) | (InProgress::Write { .. } | InProgress::Send, false) => {
            return Err(Fault::Invalid);
        }
        (InProgress::Write { .. }, true)
            if !matches!(
                opc,
                op::RC_RDMA_WRITE_MIDDLE | op::RC_RDMA_WRITE_LAST | op::RC_RDMA_WRITE_LAST_IMM
            ) =>
        {
            return Err(Fault::Invalid);
        }
        (InProgress::Send, true)
            if !matches!(
                opc,
                op::RC_SEND_MIDDLE | op::RC_SEND_LAST | op::RC_SEND_LAST_IMM
            ) =>
        {
            return Err(Fault::Invalid);
        }
        _ => {}
    }

    match opc {
        op::RC_RDMA_WRITE_ONLY | op::RC_RDMA_WRITE_ONLY_IMM | op::RC_RDMA_WRITE_FIRST => {
            let reth = pkt.reth.ok_or(Fault::Invalid)?;
            let len = pkt.payload.len();
            let first = opc == op::RC_RDMA_WRITE_FIRST;
            if first && (len != pmtu || reth.dma_len as usize <= pmtu) {
                return Err(Fault::Invalid);
            }
            if !first && (len != reth.dma_len as usize || len > pmtu) {
                return Err(Fault::Invalid);
            }
            let imm = opc == op::RC_RDMA_WRITE_ONLY_IMM;
            if imm && qp.recv_credits == 0 {
                return Ok(Step::Rnr);
            }
            if reth.dma_len == 0 {
                // Zero-length WRITE: no memory access, no R_Key check (IBA 9.4.4).
                qp.msn = qp.msn.wrapping_add(1);
                return Ok(Step::Done { ack: ack_req });
            }
            let (mi, off, mr) = resolve(
                mrs,
                reth.rkey,
                reth.va,
                reth.dma_len as u64,
                |a| a.remote_write,
                &mut qp.counters,
            )?;
            mr.region
                .write(off, pkt.payload)
                .map_err(|_| Fault::Access)?;
            qp.counters.write_bytes += len as u64;
            if first {
                qp.in_progress = InProgress::Write {
                    mr: mi,
                    offset: off + len as u64,
                    remaining: reth.dma_len - len as u32,
                    total: reth.dma_len,
                };
                return Ok(Step::Done { ack: ack_req });
            }
            qp.counters.writes += 1;
            qp.msn = qp.msn.wrapping_add(1);
            if imm {
                qp.recv_credits -= 1;
                qp.counters.write_imm += 1;
                push_cq(
                    cq,
                    &mut qp.counters,
                    Completion::WriteWithImm {
                        qpn: qp.qpn,
                        imm: pkt.imm.unwrap_or(0),
                        len: reth.dma_len,
                    },
                );
            }
            Ok(Step::Done { ack: ack_req })
        }
        op::RC_RDMA_WRITE_MIDDLE | op::RC_RDMA_WRITE_LAST | op::RC_RDMA_WRITE_LAST_IMM => {
            let InProgress::Write {
                mr: mi,
                offset,
                remaining,
                total,
            } = qp.in_progress
            else {
                return Err(Fault::Invalid);
            };
            let len = pkt.payload.len();
            let last = opc != op::RC_RDMA_WRITE_MIDDLE;
            let bad_len = if last {
                len == 0 || len > pmtu || len as u32 != remaining
            } else {
                len != pmtu || len as u32 >= remaining
            };
            if bad_len {
                return Err(Fault::Invalid);
            }
            let imm = opc == op::RC_RDMA_WRITE_LAST_IMM;
            if imm && qp.recv_credits == 0 {
                return Ok(Step::Rnr);
            }
            let mr = mrs.get(mi).and_then(|m| m.as_ref()).ok_or(Fault::Access)?;
            mr.region
                .write(offset, pkt.payload)
                .map_err(|_| Fault::Access)?;
            qp.counters.write_bytes += len as u64;
            if last {
                qp.in_progress = InProgress::None;
                qp.counters.writes += 1;
                qp.msn = qp.msn.wrapping_add(1);
                if imm {
                    qp.recv_credits -= 1;
                    qp.counters.write_imm += 1;
                    push_cq(
                        cq,
                        &mut qp.counters,
                        Completion::WriteWithImm {
                            qpn: qp.qpn,
                            imm: pkt.imm.unwrap_or(0),
                            len: total,
                        },
                    );
                }
            } else {
                qp.in_progress = InProgress::Write {
                    mr: mi,
                    offset: offset + len as u64,
                    remaining: remaining - len as u32,
                    total,
                };
            }
            Ok(Step::Done { ack: ack_req })
        }
        op::RC_FETCH_ADD | op::RC_COMPARE_SWAP => {
            let a = pkt.atomic.ok_or(Fault::Invalid)?;
            if a.va % 8 != 0 {
                return Err(Fault::Invalid);
            }
            let (_, off, mr) =
                resolve(mrs, a.rkey, a.va, 8, |x| x.remote_atomic, &mut qp.counters)?;
            let orig = if opc == op::RC_FETCH_ADD {
                mr.region.fetch_add(off, a.swap_add)
            } else {
                mr.region.compare_swap(off, a.compare, a.swap_add)
            }
            .map_err(|_| Fault::Invalid)?;
            qp.counters.atomics += 1;
            qp.msn = qp.msn.wrapping_add(1);
            let r = qp.res_next;
            qp.res_next = (r + 1) % MAX_RD_ATOMIC;
            qp.atomic_res[r] = AtomicRes {
                valid: true,
                psn: pkt.bth.psn.value(),
                orig,
            };
            qp.read_res[r].valid = false;
            send_atomic_ack(qp, dev, tx, pkt.bth.psn, orig);
            Ok(Step::Advanced(1))
        }
        op::RC_RDMA_READ_REQUEST => {
            let reth = pkt.reth.ok_or(Fault::Invalid)?;
            if !pkt.payload.is_empty() {
                return Err(Fault::Invalid);
            }
            let npsn = (reth.dma_len as usize).div_ceil(pmtu).max(1) as u32;
            let (mi, off) = if reth.dma_len == 0 {
                (usize::MAX, 0)
            } else {
                let (mi, off, _) = resolve(
                    mrs,
                    reth.rkey,
                    reth.va,
                    reth.dma_len as u64,
                    |a| a.remote_read,
                    &mut qp.counters,
                )?;
                (mi, off)
            };
            qp.counters.reads += 1;
            qp.msn = qp.msn.wrapping_add(1);
            let r = qp.res_next;
            qp.res_next = (r + 1) % MAX_RD_ATOMIC;
            let res = ReadRes {
                valid: true,
                first: pkt.bth.psn.value(),
                npsn,
                mr: mi,
                offset: off,
                len: reth.dma_len,
            };
            qp.read_res[r] = res;
            qp.atomic_res[r].valid = false;
            qp.read_out = Some(ReadOut { res, next: 0 });
            pump_read(qp, dev, mrs, tx);
            Ok(Step::Advanced(npsn))
        }
        op::RC_SEND_ONLY | op::RC_SEND_ONLY_IMM | op::RC_SEND_FIRST => {
            if qp.recv_credits == 0 {
                return Ok(Step::Rnr);
            }
            let len = pkt.payload.len();
            if len > pmtu || (opc == op::RC_SEND_FIRST && len != pmtu) {
                return Err(Fault::Invalid);
            }
            qp.send_buf.clear();
            qp.send_buf.extend_from_slice(pkt.payload);
            if opc == op::RC_SEND_FIRST {
                qp.in_progress = InProgress::Send;
            } else {
                finish_send(qp, cq, pkt.imm);
            }
            Ok(Step::Done { ack: ack_req })
        }
        op::RC_SEND_MIDDLE | op::RC_SEND_LAST | op::RC_SEND_LAST_IMM => {
            let len = pkt.payload.len();
            let last = opc != op::RC_SEND_MIDDLE;
            if len > pmtu || (!last && len != pmtu) || qp.send_buf.len() + len > 1 << 20 {
                return Err(Fault::Invalid);
            }
            qp.send_buf.extend_from_slice(pkt.payload);
            if last {
                qp.in_progress = InProgress::None;
                finish_send(qp, cq, pkt.imm);
            }
            Ok(Step::Done { ack: ack_req })
        }
        _ => Err(Fault::Invalid),
    }
}

pub(super) fn requester_response(
    qp: &mut Qp,
    pkt: &RocePacket<'_>,
    cq: &mut VecDeque<Completion>,
    _tx: &mut TxBatch,
) {
    let Some(aeth) = pkt.aeth else {
        qp.counters.malformed += 1;
        return;
    };
    match aeth.syndrome {
        Syndrome::Ack { .. } => {
            // An ACK covers every SEND up to and including its PSN.
            while let Some(p) = qp.pending_sends.front() {
                if pkt.bth.psn.diff(p.psn) >= 0 {
                    qp.pending_sends.pop_front();
                    push_cq(cq, &mut qp.counters, Completion::SendDone { qpn: qp.qpn });
                } else {
                    break;
                }
            }
        }
        _ => {
            // A NAK: let the retransmission timer resend right away.
            if let Some(p) = qp.pending_sends.front_mut() {
                p.sent_at = 0;
            }
        }
    }
}

fn finish_send(qp: &mut Qp, cq: &mut VecDeque<Completion>, imm: Option<u32>) {
    qp.recv_credits -= 1;
    qp.counters.sends += 1;
    qp.msn = qp.msn.wrapping_add(1);
    let data = std::mem::take(&mut qp.send_buf);
    push_cq(
        cq,
        &mut qp.counters,
        Completion::Recv {
            qpn: qp.qpn,
            imm,
            data,
        },
    );
}

pub(super) fn push_cq(cq: &mut VecDeque<Completion>, c: &mut RnicCounters, e: Completion) {
    if cq.len() >= CQ_DEPTH {
        cq.pop_front();
        c.cq_overflow += 1;
    }
    cq.push_back(e);
}

pub(super) fn duplicate(
    qp: &mut Qp,
    dev: &DeviceConfig,
    mrs: &[Option<Mr>],
    pkt: &RocePacket<'_>,
    tx: &mut TxBatch,
) {
    match pkt.bth.opcode {
        op::RC_FETCH_ADD | op::RC_COMPARE_SWAP => {
            let psn = pkt.bth.psn.value();
            if let Some(r) = qp
                .atomic_res
                .iter()
                .find(|r| r.valid && r.psn == psn)
                .copied()
            {
                qp.counters.atomic_replays += 1;
                send_atomic_ack(qp, dev, tx, pkt.bth.psn, r.orig);
            }
        }
        op::RC_RDMA_READ_REQUEST => {
            // Replay the saved READ from the PSN asked for (a requester that lost some of the
            // responses asks again from the first one it misses), as rxe does.
            let psn = pkt.bth.psn;
            if let Some(r) = qp
                .read_res
                .iter()
                .find(|r| {
                    let k = psn.diff(Psn::new(r.first));
                    r.valid && k >= 0 && (k as u32) < r.npsn
                })
                .copied()
            {
                let next = psn.diff(Psn::new(r.first)) as u32;
                qp.read_out = Some(ReadOut { res: r, next });
                pump_read(qp, dev, mrs, tx);
            }
        }
        _ => {
            // C9-105: acknowledge again with the last executed PSN; never execute twice.
            let prev = qp.epsn.sub(1);
            send_ack(qp, dev, tx, Syndrome::Ack { credits: 0x1f }, prev);
        }
    }
}
