//! Sketch-Merge queries: point queries (Count-Min, Count sketch), HyperLogLog cardinality,
//! heavy hitters over candidate keys, and per-epoch completeness, read from the merged
//! sketch the translator wrote (`dta_proto::sketch` has the layout and the estimators).
//!
//! A query reads one epoch's slot. A column record naming another epoch (an older epoch that
//! used the slot, or a column no switch has sent yet) reads as an empty column: cells 0,
//! merged by 0 switches. Which epoch: the caller's, or the newest any record of the store
//! names ([`SketchView::latest_epoch`]).
//!
//! A record is read whole or not at all (`PROTOCOL.md` §9): its tail, then its cells, then its
//! head, accepted when head and tail agree. A record the translator is writing while it is read
//! is re-read up to [`READ_TRIES`] times; one still torn after that is *in transition*: read as
//! an empty column and named in the answer ([`EpochSketch::in_transition`],
//! [`Completeness::in_transition`], [`SketchView::point_read`]), never as a mix of two epochs
//! or two merges.

use std::sync::atomic::{fence, Ordering};

use dta_proto::sketch::{
    epoch_after, point_query, RecordHead, Sketch, SketchKind, SketchLayout, MAX_ROWS,
    RECORD_HEAD_LEN, RECORD_TAIL_LEN,
};
use dta_proto::Key;

use crate::memory::Region;

/// Reads of one record before it is reported in transition.
pub const READ_TRIES: u32 = 8;

/// One column record as a reader found it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ColumnRead {
    /// Read whole: its head (the cells were filled in).
    Whole(RecordHead),
    /// Head and tail differed on every try: a WRITE was landing.
    InTransition,
    /// Outside the region (a layout that does not fit it).
    Unreadable,
}

/// A Sketch store as the query engine sees it.
pub struct SketchView<'a> {
    /// The store's memory.
    pub region: &'a Region,
    /// Its layout.
    pub layout: SketchLayout,
    /// The sketch ID it serves.
    pub sketch_id: u16,
}

/// One epoch of a merged sketch, read out of memory.
#[derive(Debug, Clone)]
pub struct EpochSketch {
    /// The epoch.
    pub epoch: u32,
    /// The merged sketch (empty columns where no record of this epoch was found).
    pub sketch: Sketch,
    /// Switches merged into each column.
    pub merged: Vec<u16>,
    /// The switch count the translator expected (the largest any column of the epoch names;
    /// 0 if none does).
    pub expected: u16,
    /// Columns whose record was being written on every read: read as empty.
    pub in_transition: Vec<u32>,
}

/// How complete an epoch is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct Completeness {
    /// The epoch.
    pub epoch: u32,
    /// Columns in the sketch.
    pub columns: u32,
    /// Columns written in this epoch (by at least one switch).
    pub written: u32,
    /// Columns merged from the expected number of switches (or more).
    pub complete: u32,
    /// The fewest switches merged into a column (0 if a column was not written).
    pub min_merged: u16,
    /// The most switches merged into a column.
    pub max_merged: u16,
    /// The switch count the translator expected.
    pub expected: u16,
    /// Switch-column contributions merged over all columns.
    pub contributions: u64,
    /// Columns in transition (being written while read; counted as not written).
    pub in_transition: u32,
}

impl Completeness {
    /// Fraction of the expected contributions merged (1.0: every column from every switch).
    pub fn ratio(&self) -> f64 {
        let want = self.columns as f64 * self.expected.max(1) as f64;
        (self.contributions as f64 / want).min(1.0)
    }
}

impl EpochSketch {
    /// Completeness of this epoch.
    pub fn completeness(&self) -> Completeness {
        let expected = self.expected;
        let mut c = Completeness {
            epoch: self.epoch,
            columns: self.merged.len() as u32,
            written: 0,
            complete: 0,
            min_merged: u16::MAX,
            max_merged: 0,
            expected,
            contributions: 0,
            in_transition: self.in_transition.len() as u32,
        };
        for &m in &self.merged {
            c.written += (m > 0) as u32;
            c.complete += (m > 0 && m >= expected) as u32;
            c.min_merged = c.min_merged.min(m);
            c.max_merged = c.max_merged.max(m);
            c.contributions += m as u64;
        }
        if self.merged.is_empty() {
            c.min_merged = 0;
        }
        c
    }

    /// Point estimate of `key` (Count-Min: never below the true count; Count sketch: the
    /// median); `None` for HyperLogLog.
    pub fn point(&self, key: &Key) -> Option<i64> {
        self.sketch.point(key)
    }

    /// Whether a column `key`'s point estimate reads was in transition (read as empty).
    pub fn touches_transition(&self, key: &Key) -> bool {
        if self.in_transition.is_empty() {
            return false;
        }
        let shape = self.sketch.shape();
        let h = self.sketch.hasher();
        (0..shape.rows).any(|r| self.in_transition.binary_search(&h.column(key, r)).is_ok())
    }

    /// Cardinality estimate (HyperLogLog); `None` for the other kinds.
    pub fn cardinality(&self) -> Option<f64> {
        self.sketch.cardinality()
    }

    /// The candidates whose point estimate is at least `threshold`, largest first (ties in
    /// the candidates' order); empty for HyperLogLog.
    pub fn heavy_hitters<'k>(&self, candidates: &'k [Key], threshold: i64) -> Vec<(&'k Key, i64)> {
        let mut out: Vec<(&Key, i64)> = candidates
            .iter()
            .filter_map(|k| self.point(k).map(|e| (k, e)))
            .filter(|&(_, e)| e >= threshold)
            .collect();
        out.sort_by_key(|&(_, e)| std::cmp::Reverse(e));
        out
    }
}

impl SketchView<'_> {
    /// The sketch's kind.
    pub fn kind(&self) -> SketchKind {
        self.layout.shape().kind
    }

    /// The epoch of column `c`'s record in slot `slot` (0 if unreadable).
    fn record_epoch(&self, slot: u32, c: u32) -> u32 {
        let mut b = [0u8; 4];
        let at = dta_proto::sketch::HEADER_LEN
            + slot as u64 * self.layout.slot_len()
            + c as u64 * self.layout.column_stride() as u64;
        match self.region.read(at, &mut b) {
            Ok(()) => u32::from_le_bytes(b),
            Err(_) => 0,
        }
    }

    /// The epochs the store's slots hold, newest first (each slot's newest record epoch;
    /// slots never written are left out).
    pub fn epochs(&self) -> Vec<u32> {
        let cols = self.layout.shape().columns;
        let mut out: Vec<u32> = Vec::new();
        for slot in 0..self.layout.epochs() {
            let mut newest: Option<u32> = None;
            let mut written = false;
            for c in 0..cols {
                let e = self.record_epoch(slot, c);
                // A record of this slot names an epoch ≡ slot (mod epochs); anything else is
                // memory never written (zeroed) .
                if e % self.layout.epochs() != slot {
                    continue;
                }
                if e == 0 && !self.record_merged(slot, c) {
                    continue;
                }
                written = true;
                newest = Some(match newest {
                    Some(n) if !epoch_after(e, n) => n,
                    _ => e,
                });
            }
            if let (true, Some(e)) = (written, newest) {
                out.push(e);
            }
        }
        out.sort_by(|a, b| {
            if epoch_after(*a, *b) {
                std::cmp::Ordering::Less
            } else if a == b {
                std::cmp::Ordering::Equal
            } else {
                std::cmp::Ordering::Greater
            }
        });
        out
    }

    fn record_merged(&self, slot: u32, c: u32) -> bool {
        let mut b = [0u8; 2];
        let at = dta_proto::sketch::HEADER_LEN
            + slot as u64 * self.layout.slot_len()
            + c as u64 * self.layout.column_stride() as u64
            + 4;
        self.region.read(at, &mut b).is_ok() && u16::from_le_bytes(b) > 0
    }

    /// The newest epoch any slot holds.
    pub fn latest_epoch(&self) -> Option<u32> {
        self.epochs().first().copied()
    }

    /// Reads column `c`'s record in `epoch`'s slot whole into `rec` (`column_stride` bytes)
    /// and its cells into `cells`: tail, then cells, then head (each later read ordered after
    /// the earlier by an acquire fence, as a seqlock's reader), re-read while head and tail
    /// differ, at most [`READ_TRIES`] times.
    pub fn read_record(&self, epoch: u32, c: u32, rec: &mut [u8], cells: &mut [u32]) -> ColumnRead {
        let at = self.layout.column_offset(epoch, c);
        let stride = self.layout.column_stride() as usize;
        let tail_at = stride - RECORD_TAIL_LEN;
        for _ in 0..READ_TRIES {
            let ok = self
                .region
                .read(at + tail_at as u64, &mut rec[tail_at..stride])
                .is_ok()
                && {
                    fence(Ordering::Acquire);
                    self.region
                        .read(
                            at + RECORD_HEAD_LEN as u64,
                            &mut rec[RECORD_HEAD_LEN..tail_at],
                        )
                        .is_ok()
                }
                && {
                    fence(Ordering::Acquire);
                    self.region.read(at, &mut rec[..RECORD_HEAD_LEN]).is_ok()
                };
            if !ok {
                return ColumnRead::Unreadable;
            }
            if let Some(head) = self.layout.decode_whole(&rec[..stride], cells) {
                return ColumnRead::Whole(head);
            }
            std::hint::spin_loop();
        }
        ColumnRead::InTransition
    }

    /// Reads epoch `epoch` out of memory (each column record whole, [`Self::read_record`]).
    pub fn read_epoch(&self, epoch: u32) -> EpochSketch {
        let shape = self.layout.shape();
        let rows = shape.rows as usize;
        let stride = self.layout.column_stride() as usize;
        let mut sketch = Sketch::new(shape);
        let mut merged = vec![0u16; shape.columns as usize];
        let mut expected = 0u16;
        let mut in_transition = Vec::new();
        let mut rec = vec![0u8; stride];
        let mut col = [0u32; MAX_ROWS as usize];
        let cells = sketch.cells_mut();
        for c in 0..shape.columns {
            match self.read_record(epoch, c, &mut rec, &mut col) {
                ColumnRead::Whole(h) if h.epoch == epoch => {
                    let c = c as usize;
                    cells[c * rows..(c + 1) * rows].copy_from_slice(&col[..rows]);
                    merged[c] = h.merged;
                    expected = expected.max(h.expected);
                }
                ColumnRead::InTransition => in_transition.push(c),
                _ => {}
            }
        }
        EpochSketch {
            epoch,
            sketch,
            merged,
            expected,
            in_transition,
        }
    }

    /// Point estimate of `key` in `epoch`, reading only its rows' records.
    pub fn point(&self, key: &Key, epoch: u32) -> Option<i64> {
        self.point_read(key, epoch).0
    }

    /// Point estimate of `key` in `epoch`, and whether a record it read was in transition
    /// (read as an empty column: the estimate may then be low).
    pub fn point_read(&self, key: &Key, epoch: u32) -> (Option<i64>, bool) {
        let shape = self.layout.shape();
        let h = dta_proto::sketch::SketchHasher::new(shape);
        let mut rec = vec![0u8; self.layout.column_stride() as usize];
        let mut torn = false;
        let est = point_query(shape.kind, &h, shape.rows, key, |r, c| {
            let mut col = [0u32; MAX_ROWS as usize];
            match self.read_record(epoch, c, &mut rec, &mut col) {
                ColumnRead::Whole(h) if h.epoch == epoch => col[r as usize],
                ColumnRead::InTransition => {
                    torn = true;
                    0
                }
                _ => 0,
            }
        });
        (est, torn)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use dta_proto::sketch::{SketchHasher, SketchShape};

    fn view_with(
        region: &Region,
        layout: SketchLayout,
        epoch: u32,
        s: &Sketch,
        merged: u16,
        upto: u32,
    ) {
        let stride = layout.column_stride() as usize;
        let mut rec = vec![0u8; stride];
        for c in 0..upto {
            layout.encode_record(epoch, merged, 3, s.column(c), &mut rec);
            region.write(layout.column_offset(epoch, c), &rec).unwrap();
        }
    }

    #[test]
    fn reads_epochs_points_cardinality_and_completeness() {
        let shape = SketchShape::new(SketchKind::CountMin, 3, 256, 4).unwrap();
        let layout = SketchLayout::new(shape, 16, 2).unwrap();
        let region = Region::anonymous(layout.region_len() as usize, false).unwrap();
        let mut s = Sketch::new(shape);
        let keys: Vec<Key> = (0..100u32)
            .map(|i| Key::new(&i.to_be_bytes()).unwrap())
            .collect();
        for (i, k) in keys.iter().enumerate() {
            s.update(k, 1 + i as u32);
        }
        view_with(&region, layout, 4, &s, 3, 256);
        let v = SketchView {
            region: &region,
            layout,
            sketch_id: 1,
        };
        assert_eq!(v.epochs(), vec![4]);
        let e = v.read_epoch(4);
        assert_eq!(e.sketch, s);
        let c = e.completeness();
        assert_eq!((c.written, c.complete, c.expected), (256, 256, 3));
        assert_eq!(c.ratio(), 1.0);
        for (i, k) in keys.iter().enumerate() {
            assert_eq!(v.point(k, 4), s.point(k));
            assert!(v.point(k, 4).unwrap() > i as i64);
        }
        let heavy = e.heavy_hitters(&keys, 95);
        // Every truly heavy key (counts 95..=100) is found: Count-Min never undercounts.
        for k in &keys[94..] {
            assert!(
                heavy.iter().any(|(h, _)| *h == k),
                "{k:?} missing from {heavy:?}"
            );
        }
        assert!(heavy.iter().all(|&(_, e)| e >= 95));
        assert!(heavy.windows(2).all(|w| w[0].1 >= w[1].1));
        // Epoch 5 half written into the other slot; epoch 6 reuses epoch 4's slot.
        view_with(&region, layout, 5, &s, 1, 128);
        assert_eq!(v.epochs(), vec![5, 4]);
        let c = v.read_epoch(5).completeness();
        assert_eq!((c.written, c.complete, c.min_merged), (128, 0, 0));
        view_with(&region, layout, 6, &s, 3, 10);
        assert_eq!(v.latest_epoch(), Some(6));
        let c = v.read_epoch(6).completeness();
        assert_eq!(c.written, 10, "epoch 4's records are not epoch 6's");
        assert_eq!(v.point(&keys[0], 4), v.read_epoch(4).point(&keys[0]));
    }

    /// Issue 28: a WRITE of epoch 6 into the slot epoch 4 used, caught half landed (the
    /// record's head is epoch 6's, the rest still epoch 4's), read as epoch 6 with epoch 4's
    /// cells.
    #[test]
    fn a_record_caught_mid_write_is_read_as_neither_epoch() {
        let shape = SketchShape::new(SketchKind::CountMin, 3, 256, 4).unwrap();
        let layout = SketchLayout::new(shape, 16, 2).unwrap();
        let region = Region::anonymous(layout.region_len() as usize, false).unwrap();
        let mut s = Sketch::new(shape);
        let key = Key::new(&7u32.to_be_bytes()).unwrap();
        s.update(&key, 1000);
        view_with(&region, layout, 4, &s, 3, 256);
        // Epoch 6's record of the key's row-0 column, its first 8 bytes landed.
        let col = dta_proto::sketch::SketchHasher::new(shape).column(&key, 0);
        let mut rec = vec![0u8; layout.column_stride() as usize];
        layout.encode_record(6, 3, 3, &[0, 0, 0], &mut rec);
        region
            .write(layout.column_offset(6, col), &rec[..8])
            .unwrap();
        let v = SketchView {
            region: &region,
            layout,
            sketch_id: 1,
        };
        let e6 = v.read_epoch(6);
        assert_eq!(e6.merged[col as usize], 0, "column {col} read as epoch 6's");
        assert_eq!(v.read_epoch(4).merged[col as usize], 0);
        assert_eq!(e6.in_transition, vec![col]);
        assert_eq!(e6.completeness().in_transition, 1);
        assert_eq!(v.read_epoch(4).in_transition, vec![col]);
        assert_eq!(v.point_read(&key, 6), (Some(0), true));
        assert!(v.point_read(&key, 4).1);
        // A newer merge of the same epoch, its head landed: in transition too.
        let other = SketchHasher::new(shape).column(&key, 1);
        layout.encode_record(4, 4, 3, &[9, 9, 9], &mut rec);
        region
            .write(layout.column_offset(4, other), &rec[..8])
            .unwrap();
        assert!(v.read_epoch(4).in_transition.contains(&other));
        // The WRITE lands whole: read as it is.
        layout.encode_record(6, 3, 3, &[0, 0, 0], &mut rec);
        region.write(layout.column_offset(6, col), &rec).unwrap();
        let e6 = v.read_epoch(6);
        assert_eq!(
            e6.in_transition,
            vec![other],
            "only the other column is still torn"
        );
        assert_eq!(e6.merged[col as usize], 3);
    }

    /// A writer racing the reader (the software RNIC's WRITE, in address order, from another
    /// thread): every column the reader accepts is one version whole (its cells all equal the
    /// value its head names), never a mix.
    #[test]
    fn racing_reads_see_whole_versions_or_a_transition() {
        let shape = SketchShape::new(SketchKind::CountMin, 8, 64, 4).unwrap();
        let layout = SketchLayout::new(shape, 1, 1).unwrap();
        let region = Region::anonymous(layout.region_len() as usize, false).unwrap();
        let v = SketchView {
            region: &region,
            layout,
            sketch_id: 1,
        };
        let stop = std::sync::atomic::AtomicBool::new(false);
        std::thread::scope(|s| {
            s.spawn(|| {
                let mut rec = vec![0u8; layout.column_stride() as usize];
                for m in 1..20_000u32 {
                    let merged = (m % 60_000) as u16;
                    layout.encode_record(1, merged, 1, &[merged as u32; 8], &mut rec);
                    region.write(layout.column_offset(1, 5), &rec).unwrap();
                }
                stop.store(true, Ordering::Relaxed);
            });
            let mut rec = vec![0u8; layout.column_stride() as usize];
            let mut col = [0u32; MAX_ROWS as usize];
            let mut whole = 0;
            let mut torn = 0;
            loop {
                let done = stop.load(Ordering::Relaxed);
                match v.read_record(1, 5, &mut rec, &mut col) {
                    ColumnRead::Whole(h) => {
                        assert!(col.iter().all(|&x| x == h.merged as u32), "{h:?} {col:?}");
                        whole += 1;
                    }
                    ColumnRead::InTransition => torn += 1,
                    ColumnRead::Unreadable => panic!("in the region"),
                }
                if done {
                    break;
                }
            }
            // The writer has stopped: the last read was whole, the last version.
            assert!(whole > 0, "{torn} torn reads");
            assert_eq!(col[0], 19_999);
        });
    }

    #[test]
    fn hyperloglog_cardinality() {
        let shape = SketchShape::new(SketchKind::HyperLogLog, 1, 1024, 1).unwrap();
        let layout = SketchLayout::new(shape, 32, 1).unwrap();
        let region = Region::anonymous(layout.region_len() as usize, false).unwrap();
        let mut s = Sketch::new(shape);
        for i in 0..20_000u32 {
            s.update(&Key::new(&i.to_be_bytes()).unwrap(), 1);
        }
        view_with(&region, layout, 1, &s, 1, 1024);
        let v = SketchView {
            region: &region,
            layout,
            sketch_id: 1,
        };
        let e = v.read_epoch(1);
        assert_eq!(e.cardinality(), s.cardinality());
        let est = e.cardinality().unwrap();
        assert!((est - 20_000.0).abs() / 20_000.0 < 0.1, "{est}");
        assert_eq!(e.point(&Key::new(&[1]).unwrap()), None);
    }
}
