//! Append list readers: tail the rings the translator fills, without ever blocking it.
//!
//! With the `sequenced` format (the default) every batch slot ends in a trailer holding the
//! batch's sequence number and entry count, written in the same RDMA WRITE after the entries.
//! A reader therefore knows exactly which batch it is looking at:
//! - trailer == the sequence number it expects next: new data, complete (the trailer is
//!   written last); copy it, re-check the trailer (if it changed meanwhile the writer lapped
//!   the reader during the copy), deliver;
//! - trailer < expected (or never written): nothing new yet;
//! - trailer > expected: the writer lapped this reader; everything older than
//!   `trailer − batch_slots + 1` is gone. The reader skips ahead and counts what it lost.
//!
//! Readers share nothing but the memory, so any number can tail the same list concurrently.
//! The `reference` format (the Tofino artefact's plain ring) has no trailer; its reader can only
//! treat all-zero entries as empty and cannot detect overruns.

use dta_proto::layout::{AppendFormat, AppendLayout};

use crate::memory::Region;

/// Where a new reader starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Start {
    /// At the oldest batch still in the ring.
    Oldest,
    /// After the newest batch (only data written from now on).
    Newest,
    /// At a given batch sequence number (1-based).
    Seq(u64),
}

/// Result of one poll.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PollStats {
    /// Entries delivered.
    pub entries: u64,
    /// Batches delivered.
    pub batches: u64,
    /// Batches lost to overruns during this poll.
    pub lost_batches: u64,
}

/// A tail reader of one list.
#[derive(Debug, Clone)]
pub struct ListReader {
    layout: AppendLayout,
    base: u64,
    next_seq: u64,
    /// Batches this reader lost to overruns so far.
    pub lost_batches: u64,
    /// Entries delivered so far.
    pub delivered: u64,
    ref_tail: u64,
}

impl ListReader {
    /// A reader of the list whose ring starts at byte `base` of `region`.
    pub fn new(region: &Region, layout: AppendLayout, base: u64, start: Start) -> ListReader {
        let mut r = ListReader {
            layout,
            base,
            next_seq: 1,
            lost_batches: 0,
            delivered: 0,
            ref_tail: 0,
        };
        match (layout.format(), start) {
            (AppendFormat::Sequenced, Start::Seq(s)) => r.next_seq = s.max(1),
            (AppendFormat::Sequenced, Start::Newest) => r.next_seq = r.newest_seq(region) + 1,
            (AppendFormat::Sequenced, Start::Oldest) => {
                let newest = r.newest_seq(region);
                let slots = layout.batch_slots() as u64;
                r.next_seq = newest.saturating_sub(slots) + 1;
            }
            (AppendFormat::Reference, _) => {}
        }
        r
    }

    /// The sequence number of the next batch this reader will deliver.
    pub fn next_seq(&self) -> u64 {
        self.next_seq
    }

    fn trailer(&self, region: &Region, slot: u32) -> Option<(u64, u16)> {
        let off = self.base + self.layout.trailer_offset(slot)?;
        let v = region.load_u64_acquire(off).ok()?;
        self.layout.decode_trailer(v.to_le_bytes())
    }

    /// The newest batch sequence number in the ring (0 if none), by scanning every trailer.
    pub fn newest_seq(&self, region: &Region) -> u64 {
        if self.layout.format() != AppendFormat::Sequenced {
            return 0;
        }
        (0..self.layout.batch_slots())
            .filter_map(|s| self.trailer(region, s))
            .map(|(seq, _)| seq)
            .max()
            .unwrap_or(0)
    }

    /// Delivers every complete batch written since the last poll (at most `max_batches`),
    /// calling `f(seq, entry)` for each entry in order.
    pub fn poll<F: FnMut(u64, &[u8])>(
        &mut self,
        region: &Region,
        max_batches: usize,
        mut f: F,
    ) -> PollStats {
        let mut st = PollStats::default();
        match self.layout.format() {
            AppendFormat::Sequenced => self.poll_sequenced(region, max_batches, &mut f, &mut st),
            AppendFormat::Reference => self.poll_reference(region, max_batches, &mut f, &mut st),
        }
        self.delivered += st.entries;
        self.lost_batches += st.lost_batches;
        st
    }

    fn poll_sequenced<F: FnMut(u64, &[u8])>(
        &mut self,
        region: &Region,
        max_batches: usize,
        f: &mut F,
        st: &mut PollStats,
    ) {
        let es = self.layout.entry_size() as usize;
        let batch = self.layout.batch() as usize;
        let slots = self.layout.batch_slots() as u64;
        let mut buf = [0u8; 16 * 64];
        while (st.batches as usize) < max_batches {
            let slot = self.layout.slot_for_seq(self.next_seq);
            let Some((seq, count)) = self.trailer(region, slot) else {
                return;
            };
            if seq < self.next_seq {
                return;
            }
            if seq > self.next_seq {
                let oldest = seq + 1 - slots;
                let lost = oldest.saturating_sub(self.next_seq).max(1);
                st.lost_batches += lost;
                self.next_seq += lost;
                continue;
            }
            let count = (count as usize).min(batch);
            let data = &mut buf[..count * es];
            if region
                .read(self.base + self.layout.batch_offset(slot), data)
                .is_err()
            {
                return;
            }
            // Seqlock check: if the trailer moved while we copied, the copy may be torn.
            if self.trailer(region, slot) != Some((seq, count as u16)) {
                continue;
            }
            for e in data.chunks_exact(es) {
                f(seq, e);
            }
            st.entries += count as u64;
            st.batches += 1;
            self.next_seq += 1;
        }
    }

    fn poll_reference<F: FnMut(u64, &[u8])>(
        &mut self,
        region: &Region,
        max_batches: usize,
        f: &mut F,
        st: &mut PollStats,
    ) {
        let es = self.layout.entry_size() as usize;
        let cap = self.layout.capacity() as u64;
        let mut e = [0u8; 64];
        let limit = max_batches as u64 * self.layout.batch() as u64;
        while st.entries < limit {
            let off = self.base + (self.ref_tail % cap) * es as u64;
            if region.read(off, &mut e[..es]).is_err() || e[..es].iter().all(|&b| b == 0) {
                return;
            }
            f(0, &e[..es]);
            // The plain ring has no ownership protocol: clear what was consumed so a wrap is
            // visible as new data.
            let _ = region.zero(off, es);
            self.ref_tail += 1;
            st.entries += 1;
        }
    }

    /// How many batches the writer is ahead of this reader (its lag), by reading trailers.
    pub fn lag(&self, region: &Region) -> u64 {
        self.newest_seq(region)
            .saturating_sub(self.next_seq.saturating_sub(1))
    }
}
