//! Sketch-Merge queries: point queries (Count-Min, Count sketch), HyperLogLog cardinality,
//! heavy hitters over candidate keys, and per-epoch completeness, read from the merged
//! sketch the translator wrote (`dta_proto::sketch` has the layout and the estimators).
//!
//! A query reads one epoch's slot. A column record naming another epoch (an older epoch that
//! used the slot, or a column no switch has sent yet) reads as an empty column: cells 0,
//! merged by 0 switches. Which epoch: the caller's, or the newest any record of the store
//! names ([`SketchView::latest_epoch`]).

use dta_proto::sketch::{epoch_after, point_query, Sketch, SketchKind, SketchLayout, MAX_ROWS};
use dta_proto::Key;

use crate::memory::Region;

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

    /// Reads epoch `epoch` out of memory (one pass over its slot).
    pub fn read_epoch(&self, epoch: u32) -> EpochSketch {
        let shape = self.layout.shape();
        let rows = shape.rows as usize;
        let stride = self.layout.column_stride() as usize;
        let mut sketch = Sketch::new(shape);
        let mut merged = vec![0u16; shape.columns as usize];
        let mut expected = 0u16;
        let mut slot = vec![0u8; self.layout.slot_len() as usize];
        if self
            .region
            .read(self.layout.slot_offset(epoch), &mut slot)
            .is_ok()
        {
            let mut col = [0u32; MAX_ROWS as usize];
            let cells = sketch.cells_mut();
            for (c, rec) in slot.chunks_exact(stride).enumerate() {
                let (e, m, x) = self.layout.decode_record(rec, &mut col);
                if e != epoch {
                    continue;
                }
                cells[c * rows..(c + 1) * rows].copy_from_slice(&col[..rows]);
                merged[c] = m;
                expected = expected.max(x);
            }
        }
        EpochSketch {
            epoch,
            sketch,
            merged,
            expected,
        }
    }

    /// Point estimate of `key` in `epoch`, reading only its rows' cells.
    pub fn point(&self, key: &Key, epoch: u32) -> Option<i64> {
        let shape = self.layout.shape();
        let h = dta_proto::sketch::SketchHasher::new(shape);
        let w = shape.width.bytes();
        point_query(shape.kind, &h, shape.rows, key, |r, c| {
            let at = self.layout.column_offset(epoch, c);
            let mut head = [0u8; 4];
            let mut cell = [0u8; 4];
            let ok = self.region.read(at, &mut head).is_ok()
                && u32::from_le_bytes(head) == epoch
                && self
                    .region
                    .read(
                        at + (dta_proto::sketch::RECORD_HEAD_LEN + r as usize * w) as u64,
                        &mut cell[..w],
                    )
                    .is_ok();
            if ok {
                u32::from_le_bytes(cell)
            } else {
                0
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use dta_proto::sketch::SketchShape;

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
    }

    #[test]
    fn hyperloglog_cardinality() {
        let shape = SketchShape::new(SketchKind::HyperLogLog, 1, 1024, 1).unwrap();
        let layout = SketchLayout::new(shape, 64, 1).unwrap();
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
