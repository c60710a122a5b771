//! Append: entries batched per list and written as one RDMA WRITE per batch into the list's
//! ring (with a sequence trailer in the sequenced format, so readers detect order and loss).
//!
//! With several workers, list `l` belongs to worker `l % workers`; a worker keeps only its
//! lists' batches. A partial batch is written after `append_flush_ns`.

use std::collections::VecDeque;

use dta_proto::batch::TxBatch;
use dta_proto::geometry::AppendGeometry;
use dta_proto::layout::{AppendFormat, AppendLayout};
use dta_proto::wire::report::{Primitive, Report};
use dta_proto::{Value, MAX_VALUE_LEN};

use super::{PrimitiveConfig, Refusal, Shard, StorePrimitive};
use crate::datapath::sender::{Emitted, QpSender};
use crate::datapath::stats::TranslatorCounters;

/// Largest single RDMA payload a batch may need (16 entries of 32 bytes and the trailer).
const MAX_PAYLOAD: usize = 16 * MAX_VALUE_LEN + 8;

#[derive(Clone, Copy, Default)]
struct ListState {
    /// Batches written so far (the next batch's sequence number minus one).
    written: u64,
    /// The ring slot of the next batch (`slot_for_seq(written + 1)`), kept as a cursor so a
    /// flush divides nothing.
    slot: u32,
    /// Generation of the pending batch (to invalidate flush deadlines).
    gen: u32,
    /// Entries pending in the current batch.
    pending: u8,
    /// Whether the pending batch contains an immediate report.
    imm: bool,
}

/// An Append store's batches.
pub struct Append {
    g: AppendGeometry,
    entry: usize,
    batch: usize,
    /// Batch slots of each list's ring (`layout.batch_slots()`, a division, kept).
    slots: u32,
    flush_ns: u64,
    shard: Shard,
    list: Vec<ListState>,
    /// Bytes per list in `buf`: one batch of entries, then [`MAX_VALUE_LEN`] bytes of slack so
    /// an entry is stored with one fixed-size copy of its zero-padded value, and the sequenced
    /// trailer is built in place behind the entries (the batch goes out as one slice).
    buf_stride: usize,
    /// Pending entries of every list, `buf_stride` bytes per list.
    buf: Vec<u8>,
    /// (deadline, list, generation) of batches waiting for their flush delay, in order.
    deadlines: VecDeque<(u64, u32, u32)>,
}

impl Append {
    /// Batches for the lists of `g`.
    pub fn new(g: AppendGeometry, cfg: &PrimitiveConfig) -> Result<Append, String> {
        let l = g.layout;
        let payload = payload_len(&l);
        if payload > MAX_PAYLOAD {
            return Err("batch too large".into());
        }
        let n = g.lists as usize;
        let entry = l.entry_size() as usize;
        let batch = l.batch() as usize;
        let buf_stride = batch * entry + MAX_VALUE_LEN;
        Ok(Append {
            g,
            entry,
            batch,
            slots: l.batch_slots(),
            flush_ns: cfg.append_flush_ns,
            shard: cfg.shard,
            list: vec![ListState::default(); n],
            buf_stride,
            buf: vec![0; n * buf_stride],
            deadlines: VecDeque::with_capacity(n.min(1 << 16) + 1024),
        })
    }

    /// Bytes of one batch's WRITE.
    pub fn payload_len(&self) -> usize {
        payload_len(&self.g.layout)
    }

    /// True if the store holds global list `list`.
    #[inline]
    pub fn serves(&self, list: u32) -> bool {
        self.g.local_list(list).is_some()
    }

    /// Continues the lists this worker owns after the collector's heads: `next[l]` is the
    /// sequence number the collector expects next for store-local list `l` (RDMA_CM list-head
    /// messages). A list never moves backwards (a reconnecting worker may be ahead of what
    /// reached the collector). Returns the lists moved forward.
    pub fn seed_heads(&mut self, next: &[u64]) -> u32 {
        if self.g.layout.format() != AppendFormat::Sequenced {
            return 0;
        }
        let Shard { worker, workers } = self.shard;
        let mut moved = 0;
        for (li, &n) in next.iter().enumerate().take(self.g.lists as usize) {
            let owned = workers <= 1 || (self.g.first_list as usize + li) % workers == worker;
            let last = n.saturating_sub(1).min(AppendLayout::MAX_SEQ - 1);
            if owned && last > self.list[li].written {
                self.list[li].written = last;
                self.list[li].slot = self.g.layout.slot_for_seq(last + 1);
                moved += 1;
            }
        }
        moved
    }

    /// Writes list `li`'s pending batch: its reports are `translated`, or (the QP refused the
    /// WRITE) dropped; either way the batch's sequence number is used, so a reader sees the
    /// gap.
    fn flush_list(
        &mut self,
        li: usize,
        now: u64,
        out: &mut QpSender,
        tx: &mut TxBatch,
        c: &mut TranslatorCounters,
    ) {
        let l = self.g.layout;
        let st = &mut self.list[li];
        let count = st.pending as usize;
        let bsz = self.batch * self.entry;
        let seq = st.written + 1;
        let imm = st.imm.then_some(self.g.first_list + li as u32);
        let slot = st.slot;
        debug_assert_eq!(slot, l.slot_for_seq(seq));
        st.slot = if slot + 1 == self.slots { 0 } else { slot + 1 };
        st.written = seq;
        st.pending = 0;
        st.imm = false;
        st.gen = st.gen.wrapping_add(1);
        // `l.batch_offset(slot)` without its modulo (`slot` is below the slot count).
        let at = slot as u64 * u64::from(l.stride());
        debug_assert_eq!(at, l.batch_offset(slot));
        let offset = self.g.list_offset(li as u32) + at;
        let start = li * self.buf_stride;
        if count < self.batch {
            // Entries a previous batch left behind.
            self.buf[start + count * self.entry..start + bsz].fill(0);
        }
        let len = match l.format() {
            AppendFormat::Sequenced => {
                self.buf[start + bsz..start + bsz + 8]
                    .copy_from_slice(&l.encode_trailer(seq, count as u16));
                bsz + 8
            }
            AppendFormat::Reference => bsz,
        };
        let batch = &self.buf[start..start + len];
        let sent = match imm {
            Some(list) => out.write_imm(now, tx, offset, batch, list, c),
            None => out.write(now, tx, offset, batch, c),
        };
        Emitted::of(sent).account(count as u64, c);
    }

    /// [`StorePrimitive::admit`] of an entry of `value` for global list `list`: its
    /// store-local list, and one message when it starts a batch (charged then), none when it
    /// joins one.
    #[inline(always)]
    pub fn admit_entry(&self, list: u32, value: &Value) -> Result<(u32, u64), Refusal> {
        let Some(li) = self.g.local_list(list) else {
            return Err(Refusal::WrongStore);
        };
        if value.len() > self.entry {
            return Err(Refusal::ValueTooLong);
        }
        let starts = self.list.get(li as usize).is_some_and(|l| l.pending == 0);
        Ok((li, starts as u64))
    }

    /// [`StorePrimitive::accept`] of an entry admitted for store-local list `li`
    /// ([`Append::admit_entry`]; `imm`: the report asked for an Immediate): joins the list's
    /// batch, which is written when full. True if it was (a frame was taken from the QP).
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    pub fn accept_entry(
        &mut self,
        now: u64,
        li: u32,
        value: &Value,
        imm: bool,
        out: &mut QpSender,
        tx: &mut TxBatch,
        c: &mut TranslatorCounters,
    ) -> bool {
        let li = li as usize;
        let st = &mut self.list[li];
        let p = st.pending as usize;
        let at = li * self.buf_stride + p * self.entry;
        // The padded value fills the entry (value, then zeros) and spills zeros into entries
        // not yet written or the slack; `flush_list` zeroes what a partial batch leaves behind.
        self.buf[at..at + MAX_VALUE_LEN].copy_from_slice(value.padded());
        st.pending += 1;
        st.imm |= imm;
        if p == 0 && self.flush_ns > 0 {
            self.deadlines
                .push_back((now + self.flush_ns, li as u32, st.gen));
        }
        let full = p + 1 == self.batch;
        if full {
            self.flush_list(li, now, out, tx, c);
            c.append_batches += 1;
        }
        full
    }
}

fn payload_len(l: &AppendLayout) -> usize {
    match l.format() {
        AppendFormat::Sequenced => l.stride() as usize,
        AppendFormat::Reference => (l.batch() * l.entry_size()) as usize,
    }
}

impl StorePrimitive for Append {
    #[inline]
    fn admit(&self, r: &Report, _: u8) -> Result<u64, Refusal> {
        let Primitive::Append { list, value } = &r.primitive else {
            return Err(Refusal::WrongStore);
        };
        self.admit_entry(*list, value).map(|(_, messages)| messages)
    }

    #[inline]
    fn owner(&self, r: &Report, shard: Shard) -> (usize, u32) {
        match r.primitive {
            Primitive::Append { list, .. } => (list as usize % shard.workers, u32::MAX),
            _ => (shard.worker, u32::MAX),
        }
    }

    #[inline(always)]
    fn accept(
        &mut self,
        now: u64,
        r: &Report,
        _hint: u32,
        out: &mut QpSender,
        tx: &mut TxBatch,
        c: &mut TranslatorCounters,
    ) {
        if let Primitive::Append { list, value } = &r.primitive {
            if let Some(li) = self.g.local_list(*list) {
                let _written = self.accept_entry(now, li, value, r.header.immediate, out, tx, c);
            }
        }
    }

    fn poll(&mut self, now: u64, out: &mut QpSender, tx: &mut TxBatch, c: &mut TranslatorCounters) {
        while let Some(&(deadline, li, gen)) = self.deadlines.front() {
            if deadline > now || !out.can_take(now, 1, tx) {
                return;
            }
            self.deadlines.pop_front();
            let li = li as usize;
            if self.list[li].gen == gen && self.list[li].pending > 0 {
                self.flush_list(li, now, out, tx, c);
                c.append_partial_flushes += 1;
            }
        }
    }

    fn next_deadline(&self) -> Option<u64> {
        self.deadlines.front().map(|&(d, _, _)| d)
    }

    fn pending(&self) -> u64 {
        self.list.iter().map(|l| l.pending as u64).sum()
    }

    fn flush(
        &mut self,
        now: u64,
        out: &mut QpSender,
        tx: &mut TxBatch,
        c: &mut TranslatorCounters,
    ) -> bool {
        for li in 0..self.list.len() {
            if self.list[li].pending == 0 {
                continue;
            }
            if !out.can_take(now, 1, tx) {
                return false;
            }
            self.flush_list(li, now, out, tx, c);
            c.append_partial_flushes += 1;
        }
        true
    }
}
