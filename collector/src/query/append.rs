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
    /// At a given batch sequence number (1-based); on a `reference` list, at a given entry
    /// position (0-based, counted from the ring's start and on across laps).
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
            (AppendFormat::Reference, Start::Seq(p)) => r.ref_tail = p,
            // A plain ring has no sequence numbers; what is unread is the run of entries that
            // are not zero (readers clear what they take).
            (AppendFormat::Reference, Start::Oldest) => r.ref_tail = r.reference_edge(region, true),
            (AppendFormat::Reference, Start::Newest) => {
                r.ref_tail = r.reference_edge(region, false)
            }
        }
        r
    }

    /// On a `reference` ring: the first entry that is not zero after one that is (`unread`:
    /// where the unread entries begin), or the first zero entry after one that is not (where
    /// the next write lands), scanning from the ring's start; 0 if the ring is all zero or all
    /// written.
    fn reference_edge(&self, region: &Region, unread: bool) -> u64 {
        let es = self.layout.entry_size() as usize;
        let cap = self.layout.capacity() as u64;
        let mut e = [0u8; 64];
        let mut written = |i: u64| -> Option<bool> {
            let off = self.base + (i % cap) * es as u64;
            region.read(off, &mut e[..es]).ok()?;
            Some(e[..es].iter().any(|&b| b != 0))
        };
        let Some(mut prev) = written(cap - 1) else {
            return 0;
        };
        for i in 0..cap {
            let Some(here) = written(i) else {
                return 0;
            };
            if here == unread && prev != unread {
                return i;
            }
            prev = here;
        }
        0
    }

    /// The sequence number of the next batch this reader will deliver; on a `reference` list,
    /// the position of the next entry (what [`Start::Seq`] resumes at).
    pub fn next_seq(&self) -> u64 {
        match self.layout.format() {
            AppendFormat::Sequenced => self.next_seq,
            AppendFormat::Reference => self.ref_tail,
        }
    }

    fn trailer(&self, region: &Region, slot: u32) -> Option<(u64, u16)> {
        dta_rnic::append::trailer(region, self.layout, self.base, slot)
    }

    /// True if one of the next few batches after `next_seq` is already in the ring.
    fn later_batch_landed(&self, region: &Region) -> bool {
        let slots = self.layout.batch_slots() as u64;
        (1..=slots.min(4)).any(|k| {
            let s = self.next_seq + k;
            self.trailer(region, self.layout.slot_for_seq(s))
                .is_some_and(|(seq, _)| seq >= s)
        })
    }

    /// The newest batch sequence number in the ring (0 if none), by scanning every trailer.
    pub fn newest_seq(&self, region: &Region) -> u64 {
        dta_rnic::append::newest_seq(region, self.layout, self.base)
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
            let here = self.trailer(region, slot);
            if here.is_none_or(|(seq, _)| seq < self.next_seq) {
                // Nothing at the expected batch. One list's batches all travel over one RC QP,
                // which executes them in order: if a later batch has landed, this one never
                // will (its WRITE was lost, or skipped by a PSN resync). Skip it and count it,
                // instead of waiting for the writer to lap the ring.
                if self.later_batch_landed(region) {
                    st.lost_batches += 1;
                    self.next_seq += 1;
                    continue;
                }
                return;
            }
            let (seq, count) = here.expect("checked above");
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
        let limit = (max_batches as u64).saturating_mul(self.layout.batch() as u64);
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Capacity 8 entries of 4 bytes, batch 2: four 16-byte batch slots (8 B entries, 8 B
    /// trailer), 64 bytes in all.
    fn layout() -> AppendLayout {
        AppendLayout::new(AppendFormat::Sequenced, 8, 4, 2).unwrap()
    }

    /// The bytes a translator writes for batch `seq` with entries `e`, computed by hand:
    /// entries back to back, zero-padded to the batch, then seq (48 bits LE) and count (16).
    fn batch_image(seq: u8, e: &[[u8; 4]]) -> [u8; 16] {
        let mut b = [0u8; 16];
        for (i, x) in e.iter().enumerate() {
            b[4 * i..4 * i + 4].copy_from_slice(x);
        }
        b[8] = seq;
        b[14] = e.len() as u8;
        b
    }

    fn put(r: &Region, base: u64, seq: u8, e: &[[u8; 4]]) {
        // Batch s lives in slot (s − 1) mod 4, at 16 bytes per slot.
        r.write(base + ((seq as u64 - 1) % 4) * 16, &batch_image(seq, e))
            .unwrap();
    }

    fn drain(reader: &mut ListReader, r: &Region) -> (Vec<(u64, [u8; 4])>, PollStats) {
        let mut got = Vec::new();
        let st = reader.poll(r, usize::MAX, |s, e| got.push((s, e.try_into().unwrap())));
        (got, st)
    }

    #[test]
    fn a_batch_lost_in_transit_is_skipped_once_a_later_one_lands() {
        // Regression (faults soak): a lost WRITE left a hole; the reader waited forever.
        let r = Region::anonymous(64, false).unwrap();
        let mut rd = ListReader::new(&r, layout(), 0, Start::Seq(1));
        put(&r, 0, 1, &[*b"aaaa", *b"bbbb"]);
        // Batch 2 never arrives; batch 3 does.
        put(&r, 0, 3, &[*b"eeee", *b"ffff"]);
        let (got, st) = drain(&mut rd, &r);
        assert_eq!(
            got,
            vec![(1, *b"aaaa"), (1, *b"bbbb"), (3, *b"eeee"), (3, *b"ffff")]
        );
        assert_eq!(st.lost_batches, 1);
        assert_eq!(rd.next_seq(), 4);
        // Nothing newer: the reader waits at 4 without skipping.
        let (got, st) = drain(&mut rd, &r);
        assert!(got.is_empty());
        assert_eq!(st.lost_batches, 0);
    }

    #[test]
    fn hand_written_ring_in_order_with_partial_batches_and_wrap() {
        let r = Region::anonymous(128, false).unwrap();
        let base = 64; // second list of a two-list store
        let mut rd = ListReader::new(&r, layout(), base, Start::Oldest);
        assert_eq!(drain(&mut rd, &r).0, vec![]);
        put(&r, base, 1, &[*b"aaaa", *b"bbbb"]);
        put(&r, base, 2, &[*b"cccc"]); // flushed early: one entry
        let (got, st) = drain(&mut rd, &r);
        assert_eq!(got, vec![(1, *b"aaaa"), (1, *b"bbbb"), (2, *b"cccc")]);
        assert_eq!((st.batches, st.entries, st.lost_batches), (2, 3, 0));
        // 3, 4 and 5; 5 wraps into slot 0 over batch 1.
        for s in 3..=5 {
            put(&r, base, s, &[[s; 4], [s + 100; 4]]);
        }
        assert_eq!(rd.lag(&r), 3);
        let (got, st) = drain(&mut rd, &r);
        assert_eq!(got.len(), 6);
        assert_eq!(got[4], (5, [5; 4]));
        assert_eq!((st.lost_batches, rd.next_seq(), rd.lag(&r)), (0, 6, 0));
        // The first list's memory was never touched.
        let mut first = [0u8; 64];
        r.read(0, &mut first).unwrap();
        assert!(first.iter().all(|&b| b == 0));
    }

    #[test]
    fn overrun_is_counted_and_the_reader_resynchronises() {
        let r = Region::anonymous(64, false).unwrap();
        let mut slow = ListReader::new(&r, layout(), 0, Start::Seq(1));
        for s in 1..=9 {
            put(&r, 0, s, &[[s; 4], [s; 4]]);
        }
        // Slots now hold 9, 6, 7, 8: batches 1..=5 are gone.
        let (got, st) = drain(&mut slow, &r);
        assert_eq!(st.lost_batches, 5);
        assert_eq!(
            got.iter().map(|(s, _)| *s).collect::<Vec<_>>(),
            vec![6, 6, 7, 7, 8, 8, 9, 9]
        );
        assert_eq!((slow.lost_batches, slow.delivered), (5, 8));
        // A reader starting at the oldest batch still present loses nothing.
        let mut late = ListReader::new(&r, layout(), 0, Start::Oldest);
        assert_eq!(late.next_seq(), 6);
        assert_eq!(drain(&mut late, &r).1.lost_batches, 0);
        // And one starting at the newest sees only what comes next.
        let mut new = ListReader::new(&r, layout(), 0, Start::Newest);
        assert_eq!(drain(&mut new, &r).0, vec![]);
        put(&r, 0, 10, &[*b"xxxx"]);
        assert_eq!(drain(&mut new, &r).0, vec![(10, *b"xxxx")]);
    }

    #[test]
    fn concurrent_readers_each_see_everything() {
        let r = std::sync::Arc::new(Region::anonymous(64, false).unwrap());
        let writer = {
            let r = r.clone();
            std::thread::spawn(move || {
                for s in 1..=200u32 {
                    let mut b = [0u8; 16];
                    b[..4].copy_from_slice(&s.to_le_bytes());
                    b[4..8].copy_from_slice(&(s * 2).to_le_bytes());
                    // Entries first, then the trailer with release ordering, like an RNIC
                    // writing in address order.
                    let off = ((s as u64 - 1) % 4) * 16;
                    r.write(off, &b[..8]).unwrap();
                    r.store_u64_release(off + 8, s as u64 | 2 << 48).unwrap();
                    std::thread::sleep(std::time::Duration::from_micros(50));
                }
            })
        };
        let readers: Vec<_> = (0..3)
            .map(|_| {
                let r = r.clone();
                std::thread::spawn(move || {
                    let mut rd = ListReader::new(&r, layout(), 0, Start::Seq(1));
                    let mut last = 0u64;
                    while rd.next_seq() <= 200 {
                        rd.poll(&r, usize::MAX, |s, e| {
                            let v = u32::from_le_bytes(e.try_into().unwrap());
                            assert!(v == s as u32 || v == 2 * s as u32, "torn entry");
                            assert!(s >= last);
                            last = s;
                        });
                    }
                    (rd.delivered, rd.lost_batches)
                })
            })
            .collect();
        writer.join().unwrap();
        for h in readers {
            let (delivered, lost) = h.join().unwrap();
            assert_eq!(
                delivered + 2 * lost,
                400,
                "every batch delivered or counted lost"
            );
        }
    }

    #[test]
    fn malformed_trailers_deliver_nothing() {
        let r = Region::anonymous(64, false).unwrap();
        let mut rd = ListReader::new(&r, layout(), 0, Start::Seq(1));
        let mut b = batch_image(1, &[*b"aaaa", *b"bbbb"]);
        b[14] = 3; // count above the batch size
        r.write(0, &b).unwrap();
        assert_eq!(drain(&mut rd, &r).1, PollStats::default());
        b[14] = 0; // count zero
        r.write(0, &b).unwrap();
        assert_eq!(drain(&mut rd, &r).1, PollStats::default());
    }

    #[test]
    fn reference_ring_consumes_and_wraps() {
        let l = AppendLayout::new(AppendFormat::Reference, 4, 4, 2).unwrap();
        let r = Region::anonymous(16, false).unwrap();
        let mut rd = ListReader::new(&r, l, 0, Start::Oldest);
        r.write(0, b"aaaabbbb").unwrap();
        let (got, _) = drain(&mut rd, &r);
        assert_eq!(got, vec![(0, *b"aaaa"), (0, *b"bbbb")]);
        // Consumed entries are cleared, so the next lap is visible as new data.
        let mut img = [0u8; 16];
        r.read(0, &mut img).unwrap();
        assert_eq!(&img[..8], &[0; 8]);
        r.write(8, b"ccccdddd").unwrap();
        r.write(0, b"eeee").unwrap();
        let (got, _) = drain(&mut rd, &r);
        assert_eq!(got, vec![(0, *b"cccc"), (0, *b"dddd"), (0, *b"eeee")]);
        // A new reader (no position) starts where the unread entries begin, after a lap too;
        // `Newest` where the next write lands; a position is taken as given.
        r.write(4, b"ffffgggg").unwrap();
        let mut fresh = ListReader::new(&r, l, 0, Start::Oldest);
        assert_eq!(fresh.next_seq(), 1);
        assert_eq!(drain(&mut fresh, &r).0, vec![(0, *b"ffff"), (0, *b"gggg")]);
        assert_eq!(fresh.next_seq(), 3);
        r.write(12, b"hhhh").unwrap();
        assert_eq!(ListReader::new(&r, l, 0, Start::Newest).next_seq(), 0);
        assert_eq!(ListReader::new(&r, l, 0, Start::Oldest).next_seq(), 3);
        assert_eq!(ListReader::new(&r, l, 0, Start::Seq(6)).next_seq(), 6);
    }
}
