//! [`QpSender`]: one store's queue pair with its frame templates and typed emitters.
//!
//! A primitive says *what* to write (an offset in the store's region, a payload, an immediate,
//! an atomic operand); the sender turns it into a sealed RoCEv2 frame with the QP's next PSN,
//! either straight into the caller's transmit batch or into the QP's ring to be sent by
//! [`QpSender::poll_transmit`] (see [`QpTx`]). Every address is checked against the region
//! the collector published, so no frame can target bytes outside it. Frames are written only
//! through `dta_proto`'s typed emitters.
//!
//! Two units are counted apart. A frame the QP does not take is counted here, in frames
//! (`frames_dropped_*`, by [`FrameRefusal`]); the reports it carried are counted by their
//! primitive, once each, under the matching `drop_*` reason ([`Emitted`]). The pipeline asks
//! [`QpSender::can_take`] for room for a report's frames before any is emitted, so a refusal
//! here is the exception (a batch written by a timer, a Sketch-Merge epoch's last writes).

use std::net::SocketAddrV4;

use dta_proto::batch::TxBatch;
use dta_proto::meta::StoreMeta;
use dta_proto::wire::ib::{opcode as op, Psn, Qpn, RethRepr, Rkey};
use dta_proto::wire::roce::{
    FrameTemplate, RdmaRegion, RdmaTemplate, RoceEndpoint, L2L4_LEN, PADDED_PAYLOAD,
    RDMA_PADDED_ROOM,
};

use super::pipeline::QpBinding;
use super::qp::{QpEvent, QpTuning, QpTx, Take};
use super::stats::TranslatorCounters;

/// Why a QP did not take a frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FrameRefusal {
    /// No room: the QP has no ring, and the transmit batch is full or the QP is in an RNR
    /// pause, a go-back-N pass or owes a probe (with a ring the frame would wait there).
    QueueFull,
    /// The QP is broken (awaiting reconnection).
    QpBroken,
    /// The frame would address bytes outside the store's region (never expected: geometry is
    /// validated when the pipeline is built), or a FETCH_ADD to a store that takes none.
    OutOfRegion,
}

impl FrameRefusal {
    /// Counts `reports` reports whose data the refused frame carried under the matching
    /// `drop_*` reason.
    #[inline]
    pub fn count_reports(self, reports: u64, c: &mut TranslatorCounters) {
        match self {
            FrameRefusal::QueueFull => c.drop_qp_queue_full += reports,
            FrameRefusal::QpBroken => c.drop_qp_broken += reports,
            FrameRefusal::OutOfRegion => c.drop_out_of_region += reports,
        }
    }

    /// Counts one refused frame (`frames_dropped_*`).
    #[inline(never)]
    fn count_frame(self, c: &mut TranslatorCounters) {
        match self {
            FrameRefusal::QueueFull => c.frames_dropped_queue_full += 1,
            FrameRefusal::QpBroken => c.frames_dropped_qp_broken += 1,
            FrameRefusal::OutOfRegion => c.frames_dropped_out_of_region += 1,
        }
    }
}

/// What became of the frames carrying some reports' data: the reports are `translated` if
/// every frame was taken (sent, or queued in the QP's ring), else dropped under the reason of
/// the first frame refused. Either way each report is counted once.
#[derive(Debug, Clone, Copy, Default)]
#[must_use = "the reports must be counted (Emitted::account)"]
pub struct Emitted(Option<FrameRefusal>);

impl Emitted {
    /// Notes one frame's outcome.
    #[inline(always)]
    pub fn note(&mut self, r: Result<(), FrameRefusal>) {
        if let Err(e) = r {
            self.0.get_or_insert(e);
        }
    }

    /// The outcome of a single frame.
    #[inline(always)]
    pub fn of(r: Result<(), FrameRefusal>) -> Emitted {
        Emitted(r.err())
    }

    /// Counts `reports` reports: `translated`, or dropped under the first refusal's reason.
    #[inline(always)]
    pub fn account(self, reports: u64, c: &mut TranslatorCounters) {
        match self.0 {
            None => c.translated += reports,
            Some(e) => e.count_reports(reports, c),
        }
    }
}

/// Precomputed frames of one QP.
struct Templates {
    /// WRITE of the store's payload length, ICRC by linearity (the hot path).
    write: RdmaTemplate,
    /// The same with Immediate.
    write_imm: RdmaTemplate,
    /// Zero-length WRITE (probes, and the no-op that stands in for a frame lost to an overrun).
    probe: FrameTemplate,
    /// Zero-length WRITE with Immediate (notifications without data).
    imm0: FrameTemplate,
    /// FETCH_ADD (Key-Increment stores only).
    atomic: Option<RdmaTemplate>,
    /// [`Templates::max_frame_len`], computed once.
    longest: usize,
}

impl Templates {
    fn new(
        ep: &RoceEndpoint,
        remote: Qpn,
        region: RdmaRegion,
        payload_len: usize,
        atomic: bool,
    ) -> Templates {
        let rdma = |opcode| {
            RdmaTemplate::new(ep, opcode, remote, region, payload_len)
                .expect("a WRITE payload fits")
        };
        let mut t = Templates {
            write: rdma(op::RC_RDMA_WRITE_ONLY),
            write_imm: rdma(op::RC_RDMA_WRITE_ONLY_IMM),
            probe: FrameTemplate::new(ep, op::RC_RDMA_WRITE_ONLY, remote, 0),
            imm0: FrameTemplate::new(ep, op::RC_RDMA_WRITE_ONLY_IMM, remote, 0),
            atomic: atomic.then(|| {
                RdmaTemplate::new(ep, op::RC_FETCH_ADD, remote, region, 0).expect("an atomic")
            }),
            longest: 0,
        };
        t.longest = t.max_frame_len();
        t
    }

    /// The ring's slot size: the longest frame these templates emit, and at least the room an
    /// [`RdmaTemplate`] stores whole blocks into.
    fn max_frame_len(&self) -> usize {
        [
            self.write.frame_len(),
            self.write_imm.frame_len(),
            self.probe.frame_len(),
            self.imm0.frame_len(),
            self.atomic.as_ref().map_or(0, RdmaTemplate::frame_len),
            RDMA_PADDED_ROOM,
        ]
        .into_iter()
        .max()
        .unwrap_or(0)
    }
}

/// Where a store's frames go and the QP that numbers them.
pub struct QpSender {
    /// The requester QP.
    pub qp: QpTx,
    tmpl: Templates,
    ep: RoceEndpoint,
    /// The collector's RoCEv2 address.
    pub dest: SocketAddrV4,
    /// Kernel-socket offset of the frames (0 for raw backends, [`L2L4_LEN`] for UDP sockets).
    off: usize,
    base: u64,
    region_len: u64,
    rkey: Rkey,
    payload_len: usize,
    tuning: QpTuning,
    /// Index of the collector (its rate limit).
    pub collector: usize,
}

/// What a [`QpSender`] is built from.
pub struct SenderSpec<'a> {
    /// RoCEv2 addressing towards the collector.
    pub ep: &'a RoceEndpoint,
    /// The collector's RoCEv2 address.
    pub dest: SocketAddrV4,
    /// Full Ethernet frames go to the backend (else UDP payloads).
    pub l2_frames: bool,
    /// The store's published region (address, length, R_Key).
    pub meta: &'a StoreMeta,
    /// The QP this worker uses for the store.
    pub binding: QpBinding,
    /// Reliability tuning.
    pub tuning: QpTuning,
    /// Bytes of a plain WRITE's payload (a Key-Write slot, an Append batch, a chunk).
    pub payload_len: usize,
    /// The store takes FETCH_ADD.
    pub atomic: bool,
    /// Index of the collector.
    pub collector: usize,
}

impl QpSender {
    /// A sender for `spec`; allocates the QP's ring.
    pub fn new(spec: SenderSpec<'_>) -> QpSender {
        let tmpl = Templates::new(
            spec.ep,
            spec.binding.remote_qpn,
            RdmaRegion {
                va: spec.meta.addr,
                len: spec.meta.len,
                rkey: Rkey(spec.meta.rkey),
            },
            spec.payload_len,
            spec.atomic,
        );
        let qp = new_qp(spec.binding, spec.tuning, tmpl.longest);
        QpSender {
            qp,
            tmpl,
            ep: *spec.ep,
            dest: spec.dest,
            off: if spec.l2_frames { 0 } else { L2L4_LEN },
            base: spec.meta.addr,
            region_len: spec.meta.len,
            rkey: Rkey(spec.meta.rkey),
            payload_len: spec.payload_len,
            tuning: spec.tuning,
            collector: spec.collector,
        }
    }

    /// Replaces the QP after the control plane reconnected it (and the region, if the
    /// collector published a new one). Returns the frames the old QP left unconfirmed.
    pub fn rebind(&mut self, qpb: QpBinding, meta: Option<&StoreMeta>) -> u64 {
        if let Some(m) = meta {
            self.base = m.addr;
            self.region_len = m.len;
            self.rkey = Rkey(m.rkey);
        }
        self.tmpl = Templates::new(
            &self.ep,
            qpb.remote_qpn,
            RdmaRegion {
                va: self.base,
                len: self.region_len,
                rkey: self.rkey,
            },
            self.payload_len,
            self.tmpl.atomic.is_some(),
        );
        let lost = self.qp.unconfirmed() as u64;
        self.qp = new_qp(qpb, self.tuning, self.tmpl.longest);
        lost
    }

    /// True if a report needing up to `frames` frames can be written now (into `tx`) or
    /// queued, and the QP's unconfirmed PSNs stay within its cap ([`QpTx::can_take`]).
    #[inline(always)]
    pub fn can_take(&self, now: u64, frames: usize, tx: &TxBatch) -> bool {
        self.qp.can_take(now, frames, tx.remaining())
    }

    /// How many frames may now go straight into `tx`, one after another, each report of up
    /// to `frames` of them admitted as [`QpSender::admits`] would ([`QpTx::direct_budget`]):
    /// what [`QpSender::write_replicas_direct`] and [`QpSender::fetch_add_replicas_direct`]
    /// need. It holds while only they change the QP and `tx`.
    #[inline(always)]
    pub fn direct_budget(&self, frames: usize, tx: &TxBatch) -> usize {
        // Its frames are committed as fitting `tx`'s slots (`TxBatch::commit_fitting`; every
        // frame is longer than the headers `off` skips).
        if self.tmpl.longest > tx.slot_size() {
            return 0;
        }
        self.qp.direct_budget(frames, tx.remaining())
    }

    /// Whether the QP takes a report needing up to `frames` frames now: not broken, and
    /// [`QpSender::can_take`]. A refusal is counted (`drop_qp_broken`, `drop_qp_queue_full`);
    /// the report is refused whole, before any of its frames is taken.
    #[inline(always)]
    pub fn admits(
        &self,
        now: u64,
        frames: usize,
        tx: &TxBatch,
        c: &mut TranslatorCounters,
    ) -> bool {
        if self.qp.is_broken() {
            c.drop_qp_broken += 1;
            return false;
        }
        if !self.can_take(now, frames, tx) {
            // The QP's ring is full of frames it could not send yet (a stalled collector, a
            // closed window): a report now would overwrite one of them. Or it has as many
            // PSNs unconfirmed as it may (a silent collector), or no ring and no room in `tx`.
            c.drop_qp_queue_full += 1;
            return false;
        }
        true
    }

    /// A refused frame, counted (`frames_dropped_*`).
    #[cold]
    fn refuse(&self, why: FrameRefusal, c: &mut TranslatorCounters) -> Result<(), FrameRefusal> {
        let why = if why == FrameRefusal::QueueFull && self.qp.is_broken() {
            FrameRefusal::QpBroken
        } else {
            why
        };
        why.count_frame(c);
        Err(why)
    }

    /// The address of `len` bytes at region offset `offset`; `None` if that is outside the
    /// region.
    #[inline]
    fn va(&self, offset: u64, len: usize) -> Option<u64> {
        let end = offset.checked_add(len as u64)?;
        (end <= self.region_len).then_some(self.base + offset)
    }

    /// Writes `payload` (the store's WRITE payload length) at region offset `offset`. Refused
    /// (the frame counted) if the address is outside the region or the QP cannot take a frame.
    #[inline(always)]
    pub fn write(
        &mut self,
        now: u64,
        tx: &mut TxBatch,
        offset: u64,
        payload: &[u8],
        c: &mut TranslatorCounters,
    ) -> Result<(), FrameRefusal> {
        if payload.is_empty() {
            return self.emit_empty(now, tx, offset, None, c);
        }
        let tail = self.tmpl.write.tail_reg(None, payload);
        self.emit_rdma(now, tx, offset, payload.len(), None, payload, tail, c)
    }

    /// [`QpSender::write`] of the same payload at each of `offsets` (a key's or a flow's
    /// replicas), the first as WRITE with Immediate `imm` when given. The payload is the
    /// store's payload length at the start of a zero-filled block (a Key-Write slot, a
    /// Postcarding chunk; the store's payload is at most [`PADDED_PAYLOAD`] bytes): frames are
    /// built with fixed-size moves, and the payload's share of the ICRC is computed once for
    /// all of them. Returns what became of the frames.
    #[inline(always)]
    pub fn write_replicas(
        &mut self,
        now: u64,
        tx: &mut TxBatch,
        offsets: &[u64],
        payload: &[u8; PADDED_PAYLOAD],
        imm: Option<u32>,
        c: &mut TranslatorCounters,
    ) -> Emitted {
        let mut sent = Emitted::default();
        let tail = self.tmpl.write.padded_tail_reg(None, payload);
        for (i, &offset) in offsets.iter().enumerate() {
            sent.note(match imm.filter(|_| i == 0) {
                Some(v) => {
                    let tail = self.tmpl.write_imm.padded_tail_reg(Some(v), payload);
                    let r = self.emit_padded(now, tx, offset, Some(v), payload, tail, c);
                    c.frames_imm += r.is_ok() as u64;
                    r
                }
                None => self.emit_padded(now, tx, offset, None, payload, tail, c),
            });
        }
        sent
    }

    /// [`QpSender::write_replicas`] within a [`QpSender::direct_budget`] of at least
    /// `offsets.len()` frames: each frame goes straight into `tx`, with no question to the QP
    /// but its next PSN. Returns the outcome and the frames taken (an address outside the
    /// region takes none).
    #[inline(always)]
    pub fn write_replicas_direct(
        &mut self,
        now: u64,
        tx: &mut TxBatch,
        offsets: &[u64],
        payload: &[u8; PADDED_PAYLOAD],
        imm: Option<u32>,
        c: &mut TranslatorCounters,
    ) -> (Emitted, usize) {
        let mut sent = Emitted::default();
        let mut taken = 0;
        let tail = self.tmpl.write.padded_tail_reg(None, payload);
        for (i, &offset) in offsets.iter().enumerate() {
            let Some(va) = self.va(offset, self.payload_len) else {
                sent.note(self.refuse(FrameRefusal::OutOfRegion, c));
                continue;
            };
            let (psn, ack_req) = self.qp.take_direct(now);
            taken += 1;
            match imm.filter(|_| i == 0) {
                Some(v) => {
                    let tail = self.tmpl.write_imm.padded_tail_reg(Some(v), payload);
                    self.put_padded(true, tx, psn, ack_req, va, Some(v), payload, tail);
                    c.frames_imm += 1;
                }
                None => self.put_padded(true, tx, psn, ack_req, va, None, payload, tail),
            }
            c.frames += 1;
        }
        (sent, taken)
    }

    /// Writes the padded WRITE `psn` straight into `tx`, and its copy into the QP's ring
    /// (`in_order`: the ring's next PSN, as within a [`QpSender::direct_budget`]).
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    fn put_padded(
        &mut self,
        in_order: bool,
        tx: &mut TxBatch,
        psn: Psn,
        ack_req: bool,
        va: u64,
        imm: Option<u32>,
        payload: &[u8; PADDED_PAYLOAD],
        tail: u32,
    ) {
        let t = match imm {
            None => &self.tmpl.write,
            Some(_) => &self.tmpl.write_imm,
        };
        // Written into the batch's slot and committed in two steps: as a `push_with` closure
        // the frame writer was called, not inlined. (So were the writers given as closures
        // to one helper for the three frame kinds: Key-Write +80, Key-Increment +90
        // instructions a report. Hence these lines here, in `put_fetch_add` and in
        // `emit_rdma`.)
        if let Some(buf) = tx.next_slot() {
            let copy = if in_order {
                self.qp.direct_slot_in_order(psn)
            } else {
                self.qp.direct_slot(psn)
            };
            let n = t.emit_write_padded(buf, copy, psn, ack_req, va, imm, payload, tail);
            let ok = if in_order {
                tx.commit_fitting(self.dest, self.off, n)
            } else {
                tx.commit(self.dest, self.off, n)
            };
            debug_assert!(ok, "room was checked");
        }
    }

    /// [`QpSender::emit_rdma`] of a padded payload ([`QpSender::write_replicas`]).
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    fn emit_padded(
        &mut self,
        now: u64,
        tx: &mut TxBatch,
        offset: u64,
        imm: Option<u32>,
        payload: &[u8; PADDED_PAYLOAD],
        tail: u32,
        c: &mut TranslatorCounters,
    ) -> Result<(), FrameRefusal> {
        let Some(va) = self.va(offset, self.payload_len) else {
            return self.refuse(FrameRefusal::OutOfRegion, c);
        };
        let Some(take) = self.qp.take(now, tx.remaining() > 0) else {
            return self.refuse(FrameRefusal::QueueFull, c);
        };
        match take {
            Take::Direct { psn, ack_req } => {
                // `take` saw room in `tx`.
                self.put_padded(false, tx, psn, ack_req, va, imm, payload, tail);
                c.frames += 1;
            }
            Take::Queued { psn } => {
                let t = match imm {
                    None => &self.tmpl.write,
                    Some(_) => &self.tmpl.write_imm,
                };
                let slot = self.qp.ring_slot(psn).expect("queued frames have a ring");
                t.emit_write_padded(slot, None, psn, false, va, imm, payload, tail);
            }
        }
        Ok(())
    }

    /// [`QpSender::write`] as WRITE with Immediate `imm` (an empty `payload`: a notification
    /// without data).
    #[inline(always)]
    pub fn write_imm(
        &mut self,
        now: u64,
        tx: &mut TxBatch,
        offset: u64,
        payload: &[u8],
        imm: u32,
        c: &mut TranslatorCounters,
    ) -> Result<(), FrameRefusal> {
        let r = if payload.is_empty() {
            self.emit_empty(now, tx, offset, Some(imm), c)
        } else {
            let tail = self.tmpl.write_imm.tail_reg(Some(imm), payload);
            self.emit_rdma(now, tx, offset, payload.len(), Some(imm), payload, tail, c)
        };
        c.frames_imm += r.is_ok() as u64;
        r
    }

    /// Emits a WRITE (with Immediate when `imm` is given) of `payload`, whose share of the
    /// ICRC is `tail`, or a FETCH_ADD of `delta` (`payload` empty, `tail` its share).
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    fn emit_rdma(
        &mut self,
        now: u64,
        tx: &mut TxBatch,
        offset: u64,
        len: usize,
        imm: Option<u32>,
        payload: &[u8],
        tail: u32,
        c: &mut TranslatorCounters,
    ) -> Result<(), FrameRefusal> {
        let Some(va) = self.va(offset, len) else {
            return self.refuse(FrameRefusal::OutOfRegion, c);
        };
        let Some(take) = self.qp.take(now, tx.remaining() > 0) else {
            return self.refuse(FrameRefusal::QueueFull, c);
        };
        let t = match imm {
            None => &self.tmpl.write,
            Some(_) => &self.tmpl.write_imm,
        };
        match take {
            Take::Direct { psn, ack_req } => {
                // As in `emit_padded`.
                if let Some(buf) = tx.next_slot() {
                    let copy = self.qp.direct_slot(psn);
                    let n = t.emit_write(buf, copy, psn, ack_req, va, imm, payload, tail);
                    let ok = tx.commit(self.dest, self.off, n);
                    debug_assert!(ok, "room was checked");
                }
                c.frames += 1;
            }
            Take::Queued { psn } => {
                let slot = self.qp.ring_slot(psn).expect("queued frames have a ring");
                t.emit_write(slot, None, psn, false, va, imm, payload, tail);
            }
        }
        Ok(())
    }

    /// A zero-length WRITE (with Immediate when given): no payload, no memory access.
    #[cold]
    fn emit_empty(
        &mut self,
        now: u64,
        tx: &mut TxBatch,
        offset: u64,
        imm: Option<u32>,
        c: &mut TranslatorCounters,
    ) -> Result<(), FrameRefusal> {
        let Some(va) = self.va(offset, 0) else {
            return self.refuse(FrameRefusal::OutOfRegion, c);
        };
        let reth = RethRepr {
            va,
            rkey: self.rkey,
            dma_len: 0,
        };
        let Some(take) = self.qp.take(now, tx.remaining() > 0) else {
            return self.refuse(FrameRefusal::QueueFull, c);
        };
        let t = match imm {
            None => &self.tmpl.probe,
            Some(_) => &self.tmpl.imm0,
        };
        match take {
            Take::Direct { psn, ack_req } => {
                let qp = &mut self.qp;
                let ok = tx.push_with(self.dest, self.off, |buf| match qp.direct_slot(psn) {
                    Some(copy) => t.emit_write_twice(buf, copy, psn, ack_req, &reth, imm, &[]),
                    None => t.emit_write(buf, psn, ack_req, &reth, imm, &[]),
                });
                debug_assert!(ok, "room was checked");
                c.frames += 1;
            }
            Take::Queued { psn } => {
                let slot = self.qp.ring_slot(psn).expect("queued frames have a ring");
                t.emit_write(slot, psn, false, &reth, imm, &[]);
            }
        }
        Ok(())
    }

    /// Adds `delta` to the 8-byte counter at region offset `offset` (FETCH_ADD).
    #[inline(always)]
    pub fn fetch_add(
        &mut self,
        now: u64,
        tx: &mut TxBatch,
        offset: u64,
        delta: u64,
        c: &mut TranslatorCounters,
    ) -> Result<(), FrameRefusal> {
        let Some(t) = self.tmpl.atomic.as_ref() else {
            return self.refuse(FrameRefusal::OutOfRegion, c);
        };
        let tail = t.atomic_tail_reg(delta, 0);
        self.emit_fetch_add(now, tx, offset, delta, tail, c)
    }

    /// [`QpSender::fetch_add`] of the same `delta` at each of `offsets` (a key's replicas),
    /// the operand's share of the ICRC computed once.
    #[inline(always)]
    pub fn fetch_add_replicas(
        &mut self,
        now: u64,
        tx: &mut TxBatch,
        offsets: &[u64],
        delta: u64,
        c: &mut TranslatorCounters,
    ) -> Emitted {
        let mut sent = Emitted::default();
        let Some(tail) = self.atomic_tail(delta) else {
            return self.refuse_all(offsets, c);
        };
        for &offset in offsets {
            sent.note(self.emit_fetch_add(now, tx, offset, delta, tail, c));
        }
        sent
    }

    #[inline(always)]
    fn emit_fetch_add(
        &mut self,
        now: u64,
        tx: &mut TxBatch,
        offset: u64,
        delta: u64,
        tail: u32,
        c: &mut TranslatorCounters,
    ) -> Result<(), FrameRefusal> {
        let (Some(va), Some(t)) = (self.va(offset, 8), self.tmpl.atomic.as_ref()) else {
            return self.refuse(FrameRefusal::OutOfRegion, c);
        };
        let Some(take) = self.qp.take(now, tx.remaining() > 0) else {
            return self.refuse(FrameRefusal::QueueFull, c);
        };
        match take {
            Take::Direct { psn, ack_req } => {
                self.put_fetch_add(false, tx, psn, ack_req, va, delta, tail);
                c.frames += 1;
            }
            Take::Queued { psn } => {
                let slot = self.qp.ring_slot(psn).expect("queued frames have a ring");
                t.emit_atomic(slot, None, psn, false, va, delta, 0, tail);
            }
        }
        c.frames_atomic += 1;
        Ok(())
    }

    /// [`QpSender::fetch_add_replicas`] within a [`QpSender::direct_budget`] of at least
    /// `offsets.len()` frames, as [`QpSender::write_replicas_direct`]. Returns the outcome and
    /// the frames taken.
    #[inline(always)]
    pub fn fetch_add_replicas_direct(
        &mut self,
        now: u64,
        tx: &mut TxBatch,
        offsets: &[u64],
        delta: u64,
        c: &mut TranslatorCounters,
    ) -> (Emitted, usize) {
        let mut sent = Emitted::default();
        let mut taken = 0;
        let Some(tail) = self.atomic_tail(delta) else {
            return (self.refuse_all(offsets, c), 0);
        };
        for &offset in offsets {
            let Some(va) = self.va(offset, 8) else {
                sent.note(self.refuse(FrameRefusal::OutOfRegion, c));
                continue;
            };
            let (psn, ack_req) = self.qp.take_direct(now);
            taken += 1;
            self.put_fetch_add(true, tx, psn, ack_req, va, delta, tail);
            c.frames += 1;
            c.frames_atomic += 1;
        }
        (sent, taken)
    }

    /// The ICRC share of a FETCH_ADD of `delta`; `None` without a FETCH_ADD template (a store
    /// that takes none: [`QpSender::refuse_all`]).
    #[inline(always)]
    fn atomic_tail(&self, delta: u64) -> Option<u32> {
        self.tmpl
            .atomic
            .as_ref()
            .map(|t| t.atomic_tail_reg(delta, 0))
    }

    /// Every one of `offsets`' frames refused as out of region.
    #[cold]
    fn refuse_all(&self, offsets: &[u64], c: &mut TranslatorCounters) -> Emitted {
        let mut refused = Emitted::default();
        for _ in offsets {
            refused.note(self.refuse(FrameRefusal::OutOfRegion, c));
        }
        refused
    }

    /// Writes the FETCH_ADD `psn` straight into `tx`, and its copy into the QP's ring, as
    /// [`QpSender::put_padded`].
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    fn put_fetch_add(
        &mut self,
        in_order: bool,
        tx: &mut TxBatch,
        psn: Psn,
        ack_req: bool,
        va: u64,
        delta: u64,
        tail: u32,
    ) {
        let Some(t) = self.tmpl.atomic.as_ref() else {
            return;
        };
        if let Some(buf) = tx.next_slot() {
            let copy = if in_order {
                self.qp.direct_slot_in_order(psn)
            } else {
                self.qp.direct_slot(psn)
            };
            let n = t.emit_atomic(buf, copy, psn, ack_req, va, delta, 0, tail);
            let ok = if in_order {
                tx.commit_fitting(self.dest, self.off, n)
            } else {
                tx.commit(self.dest, self.off, n)
            };
            debug_assert!(ok, "room was checked");
        }
    }

    /// Fires the QP's timers; queues the probe a timeout asked for.
    pub fn poll(&mut self, now: u64, tx: &mut TxBatch, c: &mut TranslatorCounters) -> QpEvent {
        let ev = self.qp.poll_timeout(now);
        if self.qp.wants_probe() {
            let psn = self.qp.take_probe();
            let reth = RethRepr {
                va: self.base,
                rkey: self.rkey,
                dma_len: 0,
            };
            let t = &self.tmpl.probe;
            match self.qp.ring_slot(psn) {
                Some(slot) => {
                    t.emit_write(slot, psn, true, &reth, None, &[]);
                }
                None => {
                    if tx.push_with(self.dest, self.off, |buf| {
                        t.emit_write(buf, psn, true, &reth, None, &[])
                    }) {
                        c.frames += 1;
                    }
                    self.qp.probe_sent(psn, now);
                }
            }
        }
        ev
    }

    /// Sends what the QP queued or must resend, as far as `tx` has room. Returns (frames
    /// pushed, of which resent).
    pub fn poll_transmit(
        &mut self,
        now: u64,
        tx: &mut TxBatch,
        c: &mut TranslatorCounters,
    ) -> (usize, usize) {
        if !self.qp.wants_transmit(now) {
            return (0, 0);
        }
        let reth = RethRepr {
            va: self.base,
            rkey: self.rkey,
            dma_len: 0,
        };
        let probe = &self.tmpl.probe;
        let (n, resent) =
            self.qp
                .poll_transmit(now, tx, self.dest, self.off, |buf, psn, ack_req| {
                    probe.emit_write(buf, psn, ack_req, &reth, None, &[])
                });
        c.frames += n as u64;
        (n, resent)
    }
}

fn new_qp(qpb: QpBinding, tuning: QpTuning, frame_len: usize) -> QpTx {
    QpTx::new(
        qpb.local_qpn,
        qpb.remote_qpn,
        qpb.start_psn,
        tuning,
        frame_len,
    )
}
