//! The responder's fast path for the common case: a plain RDMA WRITE Only at the expected
//! PSN. Owns: [`Responder::write_fast`] and the QP's [`WriteShape`]. May not: decide or count
//! anything differently from the general path in [`super::execute`]
//! (`tests::fast_and_general_paths_agree`, `tests::shaped_and_general_paths_agree`).
//!
//! Two tiers. A peer sends a QP WRITEs of one shape (a translator's Key-Write slots, or its
//! Append batches): the same length, pad, R_Key and addresses, only the PSN, the address and
//! the payload change. The first tier compares a frame with the QP's last shape in a few wide
//! compares and checks its ICRC with a [`PreparedCheck`] for that length; anything that
//! differs in one field goes to the second tier, which checks every field on its own (and
//! learns the frame's shape once it executed), and what that refuses goes to the general
//! path. Every tier makes every check (opcode, P_Key, TVer, PSN, QP state, addresses, ICRC,
//! R_Key, access, range, length, pad); the first makes several at once.

use dta_proto::batch::{Datagram, TxBatch};
use dta_proto::icrc::{self, PreparedCheck, ReconstructedHeader};
use dta_proto::wire::ib::{opcode as op, Psn, Reth, Syndrome, BTH_LEN, ICRC_LEN, RETH_LEN};

use super::reply::send_ack;
use super::{mr_slot, DeviceConfig, FastIcrcKey, InProgress, Qp, QpState, Responder, WriteMr};
use crate::counters::RnicCounters;
use crate::memory::FixedWriter;

/// BTH and RETH: the bytes both tiers read as one fixed-size array.
const HEAD: usize = BTH_LEN + RETH_LEN;

/// Of BTH bytes 0..8 read as one little-endian word, what a shape fixes: the opcode, the pad
/// count and TVer (not SE nor MigReq), the P_Key's low 15 bits (either membership) and the
/// destination QP; not byte 4 (FECN, BECN, reserved: masked by the ICRC, ignored here).
const BTH_SHAPE_MASK: u64 = u64::from_le_bytes([0xFF, 0x3F, 0x7F, 0xFF, 0, 0xFF, 0xFF, 0xFF]);

/// Tier-two WRITEs that differ from the QP's shape before it learns theirs: a QP whose peer
/// alternates two shapes keeps one of them instead of relearning at every frame.
const RELEARN_AFTER: u32 = 16;

/// What a QP's last WRITE executed by the second tier looked like, and what was checked for
/// it once: a WRITE equal to it in every field below passes those checks too.
pub(super) struct WriteShape {
    /// [`BTH_SHAPE_MASK`], kept here to be read from memory (not built into a register per
    /// frame).
    bth_mask: u64,
    /// BTH bytes 0..8 as a little-endian word, masked with [`BTH_SHAPE_MASK`].
    bth: u64,
    /// RETH bytes 8..16 (R_Key and DMA length) as a little-endian word: the key names a
    /// registered region with remote write access; the length is the payload's, nonzero and
    /// within the path MTU.
    rkey_len: u64,
    /// Transport length (BTH .. ICRC).
    len: usize,
    /// Payload bytes (the DMA length).
    payload: usize,
    /// Source and destination IPv4 addresses as the datagram carries them (the QP's peer, and
    /// our address or unspecified), then both ports: what the ICRC prefix depends on.
    ips: u64,
    ports: u32,
    /// The ICRC check for the addresses and length, when the QP verifies ICRCs.
    icrc: Option<PreparedCheck>,
    /// The region's virtual address, and writes of the payload's length into it (the key's
    /// registration).
    base: u64,
    writer: FixedWriter,
    /// WRITEs the first tier executed with this shape: each counts once in `rcvd_pkts` and
    /// `writes` and `payload` bytes in `write_bytes`, added when the counters are read and
    /// folded into the QP's when the shape goes ([`Qp::set_shape`]).
    pub(super) writes: u64,
}

/// A datagram's addresses as [`WriteShape`] keeps them.
#[inline(always)]
fn addr_words(d: &Datagram<'_>) -> (u64, u32) {
    let ips = u64::from(u32::from_ne_bytes(d.src.ip().octets())) << 32
        | u64::from(u32::from_ne_bytes(d.dst.ip().octets()));
    let ports = u32::from(d.src.port()) << 16 | u32::from(d.dst.port());
    (ips, ports)
}

impl Responder {
    /// The common case, done with the fewest instructions: an RDMA WRITE Only at the expected
    /// PSN, from the connected peer, on a ready QP with nothing in progress, whose ICRC is
    /// right (as sent with IPv4 ident 0) and whose R_Key and range are valid. Anything else
    /// returns false before touching any state, and [`Responder::handle`] takes the general
    /// path, which decides and counts exactly as for any other packet; so does this path for
    /// the packets it takes (`tests::fast_and_general_paths_agree`).
    #[inline(always)]
    pub(super) fn write_fast(&mut self, d: &Datagram<'_>, tx: &mut TxBatch) -> bool {
        let p = d.payload;
        // `fast_path` is only ever cleared by the unit tests: outside them, not even tested.
        if cfg!(test) && !self.fast_path {
            return false;
        }
        // The headers as one fixed-size array: every field read below is check-free.
        let Some(h) = p.first_chunk::<HEAD>() else {
            return false;
        };
        let w01 = u64::from_le_bytes(*h.first_chunk::<8>().expect("8 of 28 bytes"));
        // The destination QP, BTH bytes 5..8 big-endian (what `Bth::dest_qp` reads); as
        // `qp_index`, a QPN below the base wraps to an index no QP has.
        let qi = (w01.swap_bytes() as u32 & 0xFF_FFFF).wrapping_sub(self.qpn_base) as usize;
        let Some(Some(qp)) = self.qps.get_mut(qi) else {
            return false;
        };
        let s = match &mut qp.shape {
            Some(s) if s.admits(d, h, w01) => s,
            // Not a WRITE Only: the general path's, not worth a call to the second tier.
            _ if h[0] != op::RC_RDMA_WRITE_ONLY => return false,
            _ => return self.write_unshaped(d, tx, qi),
        };
        // The ICRC first: across its call, little is live.
        if let Some(c) = &s.icrc {
            // Raw backends (`d.ip` known): the general path checks the headers as seen.
            if d.ip.is_some() || !c.check(p) {
                return false;
            }
        }
        let w2 = u32::from_be_bytes([h[8], h[9], h[10], h[11]]);
        let psn = Psn::new(w2);
        if psn != qp.epsn
            || qp.state != QpState::Ready
            || !matches!(qp.in_progress, InProgress::None)
            || qp.read_out.is_some()
        {
            return false;
        }
        // The region checks the range (an address below the base wraps past its end).
        let va = u64::from_be_bytes([h[12], h[13], h[14], h[15], h[16], h[17], h[18], h[19]]);
        // The payload: the first `len` bytes after the headers.
        if s.writer.write(va.wrapping_sub(s.base), &p[HEAD..]).is_err() {
            return false;
        }
        // Counted in the shape (its length is the payload's); see `WriteShape::writes`.
        s.writes += 1;
        qp.msn = qp.msn.wrapping_add(1);
        qp.sent_psn_nak = false;
        qp.epsn = psn.next();
        if w2 & 0x8000_0000 != 0 {
            send_ack(qp, &self.dev, tx, Syndrome::Ack { credits: 0x1f }, psn);
        }
        true
    }

    /// The second tier: [`Responder::write_fast`] for a WRITE that is not of the QP's
    /// shape, every field checked on its own; learns the WRITE's shape once it executed.
    #[inline(never)]
    fn write_unshaped(&mut self, d: &Datagram<'_>, tx: &mut TxBatch, qi: usize) -> bool {
        let p = d.payload;
        let Some(h) = p.first_chunk::<HEAD>() else {
            return false;
        };
        let Some(Some(qp)) = self.qps.get_mut(qi) else {
            return false;
        };
        if p.len() < HEAD + ICRC_LEN {
            return false;
        }
        // BTH as three big-endian words: opcode, TVer and P_Key (either membership bit) in
        // one compare of the first; the PSN the low 24 bits of the third (what `Bth::psn`
        // reads), AckReq its top bit.
        let w0 = u32::from_be_bytes([h[0], h[1], h[2], h[3]]);
        if w0 & 0xFF0F_7FFF != (op::RC_RDMA_WRITE_ONLY as u32) << 24 | 0x7FFF {
            return false;
        }
        let w2 = u32::from_be_bytes([h[8], h[9], h[10], h[11]]);
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
        let mut prefix = None;
        if qp.cfg.verify_icrc {
            // Raw backends (`d.ip` known): the general path checks the headers as seen.
            if d.ip.is_some() {
                return false;
            }
            let reg = if qp.icrc_fast.0.matches(d) {
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
            if !icrc::check_after_prefix(reg, p) {
                return false;
            }
            prefix = Some(reg);
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
        // Everything checked above that a WRITE of the same shape repeats.
        let learn = match &qp.shape {
            None => true,
            Some(_) => {
                qp.shape_misses += 1;
                qp.shape_misses >= RELEARN_AFTER
            }
        };
        if let Some(writer) = learn
            .then(|| FixedWriter::new(region.clone(), len))
            .flatten()
        {
            let (ips, ports) = addr_words(d);
            let w01 = u64::from_le_bytes([h[0], h[1], h[2], h[3], h[4], h[5], h[6], h[7]]);
            let rkey_len =
                u64::from_le_bytes([h[20], h[21], h[22], h[23], h[24], h[25], h[26], h[27]]);
            qp.set_shape(Some(WriteShape {
                bth_mask: BTH_SHAPE_MASK,
                bth: w01 & BTH_SHAPE_MASK,
                rkey_len,
                len: p.len(),
                payload: len,
                ips,
                ports,
                icrc: prefix.map(|reg| PreparedCheck::new(reg, p.len())),
                base: qp.write_mr.base,
                writer,
                writes: 0,
            }));
            qp.shape_misses = 0;
        }
        executed(qp, &self.dev, tx, psn, w2, len);
        true
    }
}

impl WriteShape {
    /// The counters of the WRITEs executed with this shape ([`WriteShape::writes`]).
    pub(super) fn fold_into(&self, c: &mut RnicCounters) {
        c.rcvd_pkts += self.writes;
        c.writes += self.writes;
        c.write_bytes += self.writes * self.payload as u64;
    }

    /// Whether the WRITE `h` (its BTH and RETH; `w01` BTH bytes 0..8 as a little-endian word)
    /// in `d` has this shape: the same opcode, pad, TVer, P_Key, destination QP, R_Key,
    /// length and addresses.
    #[inline(always)]
    fn admits(&self, d: &Datagram<'_>, h: &[u8; HEAD], w01: u64) -> bool {
        let rkey_len = u64::from_le_bytes([h[20], h[21], h[22], h[23], h[24], h[25], h[26], h[27]]);
        let (ips, ports) = addr_words(d);
        (w01 & self.bth_mask) == self.bth
            && rkey_len == self.rkey_len
            && d.payload.len() == self.len
            && ips == self.ips
            && ports == self.ports
    }
}

/// A WRITE executed by either tier: counted (`rcvd_pkts` and `writes` both, folded in when the
/// counters are read), the PSN and MSN advanced, ACKed if asked.
#[inline(always)]
fn executed(qp: &mut Qp, dev: &DeviceConfig, tx: &mut TxBatch, psn: Psn, w2: u32, len: usize) {
    qp.fast_writes += 1;
    qp.counters.write_bytes += len as u64;
    qp.msn = qp.msn.wrapping_add(1);
    qp.sent_psn_nak = false;
    qp.epsn = psn.next();
    if w2 & 0x8000_0000 != 0 {
        send_ack(qp, dev, tx, Syndrome::Ack { credits: 0x1f }, psn);
    }
}
