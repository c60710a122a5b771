//! Where a merged sketch sits in collector memory: the store header, epoch slots and column
//! records, and how a reader checks a record it read (torn reads).

use super::{
    SketchHash, SketchKind, SketchShape, HEADER_LEN, LAYOUT_VERSION, MAGIC, MAX_BATCH_BYTES,
    MAX_EPOCHS, RECORD_HEAD_LEN, RECORD_TAIL_LEN,
};
use crate::layout::{LayoutError, MAX_REGION_LEN};

/// Bytes of one column record of `shape`: head, cells padded to 4, tail.
#[inline]
pub fn record_stride(shape: SketchShape) -> u32 {
    ((RECORD_HEAD_LEN + shape.column_bytes()).next_multiple_of(4) + RECORD_TAIL_LEN) as u32
}

/// A column record's head (or tail): which epoch, and which version of the column in it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RecordHead {
    /// The epoch the record belongs to.
    pub epoch: u32,
    /// Switches merged into the column.
    pub merged: u16,
    /// Switches the translator expects.
    pub expected: u16,
}

impl RecordHead {
    /// Reads the 8 bytes of a head or tail.
    #[inline]
    pub fn parse(b: &[u8; 8]) -> RecordHead {
        RecordHead {
            epoch: u32::from_le_bytes([b[0], b[1], b[2], b[3]]),
            merged: u16::from_le_bytes([b[4], b[5]]),
            expected: u16::from_le_bytes([b[6], b[7]]),
        }
    }

    /// The 8 bytes of a head or tail.
    #[inline]
    pub fn to_bytes(self) -> [u8; 8] {
        let mut b = [0u8; 8];
        b[0..4].copy_from_slice(&self.epoch.to_le_bytes());
        b[4..6].copy_from_slice(&self.merged.to_le_bytes());
        b[6..8].copy_from_slice(&self.expected.to_le_bytes());
        b
    }
}

/// A Sketch store's memory layout (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SketchLayout {
    shape: SketchShape,
    batch: u32,
    epochs: u32,
    stride: u32,
}

impl SketchLayout {
    /// Checks the layout: a valid shape, `batch` a power of two dividing the column count with
    /// `batch × column_stride ≤ 1024`, and 1..=16 epoch slots.
    pub fn new(shape: SketchShape, batch: u32, epochs: u32) -> Result<SketchLayout, LayoutError> {
        let stride = record_stride(shape);
        if batch == 0
            || !batch.is_power_of_two()
            || batch > shape.columns
            || batch as u64 * stride as u64 > MAX_BATCH_BYTES as u64
        {
            return Err(LayoutError::BadBatch);
        }
        if epochs == 0 || epochs > MAX_EPOCHS {
            return Err(LayoutError::BadBatch);
        }
        let l = SketchLayout {
            shape,
            batch,
            epochs,
            stride,
        };
        if l.region_len() > MAX_REGION_LEN {
            return Err(LayoutError::TooLarge);
        }
        Ok(l)
    }

    /// The sketch's geometry.
    #[inline]
    pub fn shape(&self) -> SketchShape {
        self.shape
    }

    /// Columns per batch WRITE.
    #[inline]
    pub fn batch(&self) -> u32 {
        self.batch
    }

    /// Batches per epoch.
    #[inline]
    pub fn batches(&self) -> u32 {
        self.shape.columns / self.batch
    }

    /// Epoch slots kept.
    #[inline]
    pub fn epochs(&self) -> u32 {
        self.epochs
    }

    /// Bytes per column record.
    #[inline]
    pub fn column_stride(&self) -> u32 {
        self.stride
    }

    /// Bytes of one epoch slot.
    #[inline]
    pub fn slot_len(&self) -> u64 {
        self.shape.columns as u64 * self.stride as u64
    }

    /// Bytes of one batch WRITE.
    #[inline]
    pub fn batch_len(&self) -> usize {
        (self.batch * self.stride) as usize
    }

    /// Bytes the layout addresses.
    #[inline]
    pub fn region_len(&self) -> u64 {
        HEADER_LEN + self.epochs as u64 * self.slot_len()
    }

    /// Region offset of `epoch`'s slot.
    #[inline]
    pub fn slot_offset(&self, epoch: u32) -> u64 {
        HEADER_LEN + (epoch % self.epochs) as u64 * self.slot_len()
    }

    /// Region offset of column `c`'s record in `epoch`'s slot (`c` < columns).
    #[inline]
    pub fn column_offset(&self, epoch: u32, c: u32) -> u64 {
        self.slot_offset(epoch) + c as u64 * self.stride as u64
    }

    /// Region offset of batch `b`'s first record in `epoch`'s slot.
    #[inline]
    pub fn batch_offset(&self, epoch: u32, b: u32) -> u64 {
        self.column_offset(epoch, b * self.batch)
    }

    /// Region offset of the tail of column `c`'s record in `epoch`'s slot.
    #[inline]
    pub fn tail_offset(&self, epoch: u32, c: u32) -> u64 {
        self.column_offset(epoch, c) + self.stride as u64 - RECORD_TAIL_LEN as u64
    }

    /// Writes column record `out` (`column_stride` bytes) from merged cells `cells` (`rows`):
    /// head, cells, padding, and the tail (a copy of the head).
    #[inline]
    pub fn encode_record(
        &self,
        epoch: u32,
        merged: u16,
        expected: u16,
        cells: &[u32],
        out: &mut [u8],
    ) {
        let head = RecordHead {
            epoch,
            merged,
            expected,
        }
        .to_bytes();
        let stride = self.stride as usize;
        out[..RECORD_HEAD_LEN].copy_from_slice(&head);
        out[stride - RECORD_TAIL_LEN..stride].copy_from_slice(&head);
        let w = self.shape.width.bytes();
        let body = &mut out[RECORD_HEAD_LEN..stride - RECORD_TAIL_LEN];
        let rows = self.shape.rows as usize;
        let (used, pad) = body.split_at_mut(rows * w);
        pad.fill(0);
        // One loop per width, each with fixed-size stores (a copy of a runtime width per cell
        // was a library call per cell).
        match w {
            4 => {
                for (dst, &v) in used.chunks_exact_mut(4).zip(cells) {
                    dst.copy_from_slice(&v.to_le_bytes());
                }
            }
            2 => {
                for (dst, &v) in used.chunks_exact_mut(2).zip(cells) {
                    dst.copy_from_slice(&(v as u16).to_le_bytes());
                }
            }
            _ => {
                for (dst, &v) in used.iter_mut().zip(cells) {
                    *dst = v as u8;
                }
            }
        }
    }

    /// Writes `merged.len()` consecutive column records of `epoch` into `out`, column `i`'s
    /// from `merged[i]` and `cells[i × rows..]`: the bytes of [`SketchLayout::encode_record`]
    /// per column. The width and row count are dispatched once per call, not per column: each
    /// shape a sketch can have has its own loop of fixed-size stores (a Sketch-Merge batch
    /// WRITE encodes up to a few dozen records per call); any other falls back to
    /// `encode_record` per column.
    ///
    /// Panics if `cells` has fewer than `merged.len() × rows` entries or `out` fewer than
    /// `merged.len() × column_stride` bytes.
    #[inline]
    pub fn encode_records(
        &self,
        epoch: u32,
        expected: u16,
        merged: &[u16],
        cells: &[u32],
        out: &mut [u8],
    ) {
        let n = merged.len();
        let rows = self.shape.rows as usize;
        let cells = &cells[..n * rows];
        let out = &mut out[..n * self.stride as usize];
        // The head with `merged` zero; each record ORs its own count in.
        let base = u64::from(epoch) | u64::from(expected) << 48;
        macro_rules! by_shape {
            ($(($w:literal, $r:literal)),* $(,)?) => {
                match (self.shape.width.bytes(), rows) {
                    $(($w, $r) => encode_fixed::<$w, $r, { fixed_stride($w, $r) }>(
                        base, merged, cells, out,
                    ),)*
                    _ => {
                        let stride = self.stride as usize;
                        for ((rec, cs), &m) in
                            out.chunks_exact_mut(stride).zip(cells.chunks_exact(rows)).zip(merged)
                        {
                            self.encode_record(epoch, m, expected, cs, rec);
                        }
                    }
                }
            };
        }
        // The shapes `SketchShape::new` admits: counter sketches, and HyperLogLog registers.
        by_shape!(
            (4, 1),
            (4, 2),
            (4, 3),
            (4, 4),
            (4, 5),
            (4, 6),
            (4, 7),
            (4, 8),
            (1, 1),
        );
    }

    /// Reads a column record (`column_stride` bytes) whole: its head, and `cells` (`rows`
    /// entries; Count-sketch cells sign-extended), or `None` when its head and tail differ
    /// (a WRITE was landing while it was read: the record is in transition). The record's
    /// bytes must have been read tail first, then the cells, then the head (module docs).
    pub fn decode_whole(&self, rec: &[u8], cells: &mut [u32]) -> Option<RecordHead> {
        let stride = self.stride as usize;
        let tail: &[u8; 8] = rec[stride - RECORD_TAIL_LEN..stride].try_into().ok()?;
        let (e, m, x) = self.decode_record(rec, cells);
        let head = RecordHead {
            epoch: e,
            merged: m,
            expected: x,
        };
        (RecordHead::parse(tail) == head).then_some(head)
    }

    /// Reads a column record's head (epoch, merged, expected) and fills `cells` (`rows`
    /// entries; Count-sketch cells sign-extended), without checking the tail
    /// ([`SketchLayout::decode_whole`] does).
    pub fn decode_record(&self, rec: &[u8], cells: &mut [u32]) -> (u32, u16, u16) {
        let epoch = u32::from_le_bytes([rec[0], rec[1], rec[2], rec[3]]);
        let merged = u16::from_le_bytes([rec[4], rec[5]]);
        let expected = u16::from_le_bytes([rec[6], rec[7]]);
        let w = self.shape.width.bytes();
        let signed = self.shape.kind == SketchKind::Count;
        for (i, c) in cells.iter_mut().enumerate().take(self.shape.rows as usize) {
            let at = RECORD_HEAD_LEN + i * w;
            let mut b = [0u8; 4];
            b[..w].copy_from_slice(&rec[at..at + w]);
            let v = u32::from_le_bytes(b);
            *c = match (signed, w) {
                (true, 1) => v as u8 as i8 as i32 as u32,
                (true, 2) => v as u16 as i16 as i32 as u32,
                _ => v,
            };
        }
        (epoch, merged, expected)
    }

    /// The 64-byte store header.
    pub fn encode_header(&self, sketch_id: u16) -> [u8; HEADER_LEN as usize] {
        let mut h = [0u8; HEADER_LEN as usize];
        h[0..4].copy_from_slice(&MAGIC);
        h[4] = LAYOUT_VERSION;
        h[5] = self.shape.kind.code();
        h[6] = self.shape.kind.merge_op().code();
        h[7] = self.shape.width.bytes() as u8;
        h[8..12].copy_from_slice(&(self.shape.rows as u32).to_le_bytes());
        h[12..16].copy_from_slice(&self.shape.columns.to_le_bytes());
        h[16..20].copy_from_slice(&self.batch.to_le_bytes());
        h[20..24].copy_from_slice(&self.epochs.to_le_bytes());
        h[24..28].copy_from_slice(&self.stride.to_le_bytes());
        h[28..30].copy_from_slice(&sketch_id.to_le_bytes());
        h[30] = self.shape.hash.code();
        h
    }

    /// Reads a store header back: the layout and the sketch ID, or `None` if it is not one
    /// this version wrote.
    pub fn decode_header(h: &[u8]) -> Option<(SketchLayout, u16)> {
        if h.len() < HEADER_LEN as usize || h[0..4] != MAGIC || h[4] != LAYOUT_VERSION {
            return None;
        }
        let le = |i: usize| u32::from_le_bytes([h[i], h[i + 1], h[i + 2], h[i + 3]]);
        let kind = SketchKind::from_code(h[5])?;
        if h[6] != kind.merge_op().code() {
            return None;
        }
        let rows = u8::try_from(le(8)).ok()?;
        let shape = SketchShape::new(kind, rows, le(12), h[7])
            .ok()?
            .with_hash(SketchHash::from_code(h[30])?);
        let l = SketchLayout::new(shape, le(16), le(20)).ok()?;
        (l.stride == le(24)).then_some((l, u16::from_le_bytes([h[28], h[29]])))
    }
}

/// [`record_stride`] of `rows` cells of `width` bytes, for a const argument.
const fn fixed_stride(width: usize, rows: usize) -> usize {
    (RECORD_HEAD_LEN + width * rows).next_multiple_of(4) + RECORD_TAIL_LEN
}

/// [`SketchLayout::encode_records`] for cells of `W` bytes, `R` rows and records of `S`
/// bytes: per record, the head and tail as one 8-byte store each, the cells as fixed-size
/// stores the compiler merges (`R` four-byte cells are one copy), and the padding (under 4
/// bytes) a fixed-size clear.
#[inline(always)]
fn encode_fixed<const W: usize, const R: usize, const S: usize>(
    base: u64,
    merged: &[u16],
    cells: &[u32],
    out: &mut [u8],
) {
    const { assert!(S == fixed_stride(W, R)) };
    let used = RECORD_HEAD_LEN + W * R;
    for ((rec, cs), &m) in out
        .chunks_exact_mut(S)
        .zip(cells.chunks_exact(R))
        .zip(merged)
    {
        let rec: &mut [u8; S] = rec.try_into().expect("chunks of S bytes");
        let cs: &[u32; R] = cs.try_into().expect("chunks of R cells");
        let head = (base | u64::from(m) << 32).to_le_bytes();
        rec[..RECORD_HEAD_LEN].copy_from_slice(&head);
        for (dst, v) in rec[RECORD_HEAD_LEN..used].chunks_exact_mut(W).zip(cs) {
            dst.copy_from_slice(&v.to_le_bytes()[..W]);
        }
        rec[used..S - RECORD_TAIL_LEN].fill(0);
        rec[S - RECORD_TAIL_LEN..].copy_from_slice(&head);
    }
}
