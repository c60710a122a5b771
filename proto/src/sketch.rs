//! Sketch-Merge: the sketches switches summarise traffic in, how they merge, where a merged
//! sketch sits in collector memory, and how it is read.
//!
//! A sketch is `rows × columns` cells. A *column* is one index across all rows (cell `(r, c)`
//! for every row `r`): switches send their sketches column by column (`wire::sketch`), the
//! translator merges column `c` of every switch into one network-wide column `c` and writes
//! batches of `batch` contiguous columns into the store with RDMA WRITE.
//!
//! | Kind | Rows | Cell | Merge | Query |
//! |---|---|---|---|---|
//! | Count-Min | d ≤ 8 | 4 B counter | sum (saturating) | min over rows |
//! | Count sketch | d ≤ 8 | 4 B two's-complement counter | sum (wrapping, i.e. signed) | median of signed estimates |
//! | HyperLogLog | 1 | 1 B register (rank) | max | harmonic-mean estimator with small/large range corrections |
//!
//! Count-sketch cells are signed 32-bit integers carried as their two's-complement bits; their
//! merge is wrapping addition, which is exact signed addition when no sum overflows (a Count
//! sketch whose counters overflow 2^31 is beyond repair anyway, and saturation on the unsigned
//! bits would be wrong for negative counters). Count-Min counters are unsigned and saturate at
//! the cell's maximum; HyperLogLog registers take the maximum.
//!
//! # Hashes (independent profile only)
//! Every sketch hash is a CRC-32 of the key followed by [`mix32`] (MurmurHash3's 32-bit
//! finaliser, a bijection). The finaliser matters: a CRC is affine over GF(2), so structured
//! keys (consecutive integers, addresses of one subnet) land on an affine subspace of hash
//! values, which biases a HyperLogLog's ranks badly (counting 20,000 consecutive 4-byte keys
//! with CRC alone estimates about 36,000). Row `r`'s column is `mix32(CRC_r(key))` reduced
//! modulo the (power of two) column count, with [`replica_poly`]`(r)`; the Count sketch's
//! row-`r` sign is bit 31 of `mix32` of the CRC with [`hop_poly`]`(r)` (1: −1); HyperLogLog
//! uses the spare polynomial [`POLYNOMIALS`]`[`[`HLL_POLY_INDEX`]`]`: the top `p` bits pick the
//! register (`m = 2^p` = columns), the rank is the position of the first 1 in the remaining
//! `32 − p` bits (`32 − p + 1` if they are all 0).
//!
//! # The Tofino hash profile
//! A switch ASIC cannot multiply, so it cannot compute [`mix32`]. A store configured with
//! `hash = "tofino"` ([`SketchHash::Tofino`]) uses hashes a Tofino computes in its pipeline:
//! Count-Min and Count-sketch columns are `CRC_r(key) mod columns` (the same CRC, no
//! finaliser: column choice only needs a universal hash, which a CRC is), the Count sign is
//! bit 31 of the hop-polynomial CRC, and HyperLogLog replaces the finaliser with **simple
//! tabulation** over the CRC's four bytes: `tab(x) = T0[x₀] ⊕ T1[x₁] ⊕ T2[x₂] ⊕ T3[x₃]`
//! ([`tabulate`], `x₀` the least significant byte), four 256-entry tables of random words
//! ([`TAB`], from splitmix64 seeded with [`TAB_SEED`]). Tabulation is non-linear and
//! 3-independent, so it removes the CRC's affine structure from the ranks (the P4 reporter
//! looks the tables up as four exact-match tables in one stage). The profile is stored in the
//! header (byte 30), so every reader hashes as the switches did.
//!
//! # Memory layout (little-endian)
//! ```text
//! offset 0:    header, 64 B (written once by the collector; geometry below)
//! offset 64:   epoch slot 0, then slot 1, ... (`epochs` slots; epoch e lives in slot e % epochs)
//! epoch slot:  `columns` column records of `column_stride` bytes each
//! column rec:  head | cells (rows × width, row 0 first) | pad to 4 | tail
//! head, tail:  epoch u32 | merged u16 | expected u16 (the tail is a copy of the head)
//! ```
//! Header: `DTAS` magic, version u8 = 2, kind u8, merge op u8, cell width u8, rows u32,
//! columns u32, batch u32, epochs u32, column stride u32, sketch ID u16, hash profile u8
//! (0 independent, 1 Tofino; [`SketchHash`]), reserved to 64 bytes.
//!
//! A column record belongs to the epoch it names: a reader of epoch `e` treats a record
//! naming another epoch as an empty column (cells 0, merged 0). `merged` is the number of
//! switches whose column the translator merged, `expected` the switch count it was configured
//! with; `merged == expected` means the column is complete. A batch is one RDMA WRITE of
//! `batch × column_stride` bytes, at most [`MAX_BATCH_BYTES`].
//!
//! # Torn reads (layout version 2)
//! A WRITE lands in address order, so a reader racing it may see the head of one version of a
//! record and the cells of another: of another epoch when the slot is being reused, or an older
//! merge of the same epoch. The tail repeats the head, and `(epoch, merged)` names one version
//! of a column (within an epoch `merged` only grows, and the cells change only with it), so a
//! reader that reads the tail, then the cells, then the head ([`SketchLayout::decode_whole`]
//! checks a record read that way) and finds head and tail equal has read one version whole; a
//! record whose head and tail differ is *in transition*: re-read it, and after a few tries
//! report it as such. Version 1 (no tail) is not read by this version.

use crate::crc::Crc32;
use crate::hash::{hop_poly, replica_poly, POLYNOMIALS};
use crate::layout::{LayoutError, MAX_REGION_LEN};
use crate::types::Key;

/// Most rows a sketch may have (one independent column polynomial per row).
pub const MAX_ROWS: u8 = 8;
/// Most bytes one batch WRITE may carry (the smallest RoCEv2 path MTU in use).
pub const MAX_BATCH_BYTES: u32 = 1024;
/// Most epoch slots a store may keep.
pub const MAX_EPOCHS: u32 = 16;
/// Bytes of the store header.
pub const HEADER_LEN: u64 = 64;
/// Bytes of a column record before its cells (epoch, merged, expected).
pub const RECORD_HEAD_LEN: usize = 8;
/// Bytes of a column record after its cells (a copy of the head).
pub const RECORD_TAIL_LEN: usize = 8;
/// The header's magic, ASCII `DTAS`.
pub const MAGIC: [u8; 4] = *b"DTAS";
/// The header's version.
pub const LAYOUT_VERSION: u8 = 2;
/// Index in [`POLYNOMIALS`] of the HyperLogLog hash polynomial (the first spare).
pub const HLL_POLY_INDEX: usize = 26;
/// Smallest and largest HyperLogLog precision p (m = 2^p registers).
pub const HLL_PRECISION: core::ops::RangeInclusive<u32> = 4..=16;

/// The epoch a column record holds before any translator wrote it (never a real epoch's slot:
/// a reader asking for epoch `u32::MAX` sees records the collector zeroed as `0`, not it).
pub const NO_EPOCH: u32 = 0;

/// What kind of sketch a store holds.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize, Default,
)]
#[serde(rename_all = "kebab-case")]
pub enum SketchKind {
    /// Count-Min: unsigned counters, sum, point query = min over rows.
    #[default]
    CountMin,
    /// Count sketch: signed counters, sum, point query = median of signed estimates.
    Count,
    /// HyperLogLog: one row of rank registers, max, cardinality estimate.
    HyperLogLog,
}

impl SketchKind {
    /// The wire and metadata code (1, 2, 3).
    pub const fn code(self) -> u8 {
        match self {
            SketchKind::CountMin => 1,
            SketchKind::Count => 2,
            SketchKind::HyperLogLog => 3,
        }
    }

    /// The kind for a code.
    pub const fn from_code(c: u8) -> Option<SketchKind> {
        match c {
            1 => Some(SketchKind::CountMin),
            2 => Some(SketchKind::Count),
            3 => Some(SketchKind::HyperLogLog),
            _ => None,
        }
    }

    /// The merge this kind needs.
    pub const fn merge_op(self) -> MergeOp {
        match self {
            SketchKind::CountMin => MergeOp::Sum,
            SketchKind::Count => MergeOp::SignedSum,
            SketchKind::HyperLogLog => MergeOp::Max,
        }
    }

    /// Configuration name.
    pub const fn name(self) -> &'static str {
        match self {
            SketchKind::CountMin => "count-min",
            SketchKind::Count => "count",
            SketchKind::HyperLogLog => "hyperloglog",
        }
    }
}

/// How two switches' cells combine.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum MergeOp {
    /// Unsigned sum, saturating at the cell's maximum (Count-Min).
    Sum = 0,
    /// Register-wise maximum (HyperLogLog).
    Max = 1,
    /// Two's-complement (wrapping) sum of signed cells (Count sketch).
    SignedSum = 2,
}

impl MergeOp {
    /// The op for a wire code.
    pub const fn from_code(c: u8) -> Option<MergeOp> {
        match c {
            0 => Some(MergeOp::Sum),
            1 => Some(MergeOp::Max),
            2 => Some(MergeOp::SignedSum),
            _ => None,
        }
    }

    /// The wire code.
    pub const fn code(self) -> u8 {
        self as u8
    }
}

/// Bytes per cell: 1, 2 or 4.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CellWidth(u8);

impl CellWidth {
    /// 1, 2 or 4 bytes; `None` otherwise.
    pub const fn new(w: u8) -> Option<CellWidth> {
        match w {
            1 | 2 | 4 => Some(CellWidth(w)),
            _ => None,
        }
    }

    /// Bytes per cell.
    #[inline]
    pub const fn bytes(self) -> usize {
        self.0 as usize
    }

    /// The largest unsigned value a cell holds.
    #[inline]
    pub const fn max(self) -> u32 {
        match self.0 {
            1 => u8::MAX as u32,
            2 => u16::MAX as u32,
            _ => u32::MAX,
        }
    }
}

/// Merges `src` into `dst` lane by lane. `cap` is the cell maximum for [`MergeOp::Sum`]
/// (saturation); ignored by the others. Written as one straight loop over 32-bit lanes so
/// the compiler vectorises it.
#[inline]
pub fn merge_lanes(op: MergeOp, cap: u32, dst: &mut [u32], src: &[u32]) {
    let n = dst.len().min(src.len());
    let (dst, src) = (&mut dst[..n], &src[..n]);
    match op {
        MergeOp::Sum if cap == u32::MAX => {
            for (d, s) in dst.iter_mut().zip(src) {
                *d = d.saturating_add(*s);
            }
        }
        MergeOp::Sum => {
            for (d, s) in dst.iter_mut().zip(src) {
                *d = d.saturating_add(*s).min(cap);
            }
        }
        MergeOp::Max => {
            for (d, s) in dst.iter_mut().zip(src) {
                *d = (*d).max(*s);
            }
        }
        MergeOp::SignedSum => {
            for (d, s) in dst.iter_mut().zip(src) {
                *d = d.wrapping_add(*s);
            }
        }
    }
}

/// Merges big-endian cells of width `w` (as they travel in a report) into `dst`. A
/// [`MergeOp::SignedSum`] cell narrower than 4 bytes is sign-extended first.
#[inline]
pub fn merge_wire_cells(op: MergeOp, w: CellWidth, dst: &mut [u32], cells: &[u8]) {
    let cap = w.max();
    match w.bytes() {
        4 => {
            let n = dst.len().min(cells.len() / 4);
            let (dst, cells) = (&mut dst[..n], &cells[..n * 4]);
            if wide::merge_words(op, dst, cells) {
                return;
            }
            merge_words(op, dst, cells);
        }
        2 => {
            for (d, c) in dst.iter_mut().zip(cells.chunks_exact(2)) {
                let raw = u16::from_be_bytes([c[0], c[1]]);
                let s = if op == MergeOp::SignedSum {
                    raw as i16 as i32 as u32
                } else {
                    raw as u32
                };
                *d = merge_one(op, cap, *d, s);
            }
        }
        _ => {
            for (d, &c) in dst.iter_mut().zip(cells) {
                let s = if op == MergeOp::SignedSum {
                    c as i8 as i32 as u32
                } else {
                    c as u32
                };
                *d = merge_one(op, cap, *d, s);
            }
        }
    }
}

/// The 4-byte merge: one loop per op, each a lane-wise byte swap and a vector op (the
/// compiler vectorizes them; [`wide`] compiles the same loops for AVX2).
#[inline(always)]
fn merge_words(op: MergeOp, dst: &mut [u32], cells: &[u8]) {
    match op {
        MergeOp::Sum => {
            for (d, c) in dst.iter_mut().zip(cells.chunks_exact(4)) {
                let s = u32::from_be_bytes([c[0], c[1], c[2], c[3]]);
                *d = d.saturating_add(s);
            }
        }
        MergeOp::Max => {
            for (d, c) in dst.iter_mut().zip(cells.chunks_exact(4)) {
                let s = u32::from_be_bytes([c[0], c[1], c[2], c[3]]);
                *d = (*d).max(s);
            }
        }
        MergeOp::SignedSum => {
            for (d, c) in dst.iter_mut().zip(cells.chunks_exact(4)) {
                let s = u32::from_be_bytes([c[0], c[1], c[2], c[3]]);
                *d = d.wrapping_add(s);
            }
        }
    }
}

/// [`merge_words`] compiled for AVX2 (eight lanes per instruction, byte swaps by shuffle),
/// chosen at run time when the CPU has it ([`crate::cpu`]); the portable loops otherwise.
mod wide {
    use super::MergeOp;

    /// Merges with the AVX2 build of the loops; false (nothing done) without AVX2.
    #[inline(always)]
    pub(super) fn merge_words(op: MergeOp, dst: &mut [u32], cells: &[u8]) -> bool {
        #[cfg(target_arch = "x86_64")]
        if crate::cpu::has_avx2() {
            #[allow(unsafe_code)]
            // SAFETY: `has_avx2` saw AVX2 on this CPU.
            unsafe {
                merge_avx2(op, dst, cells)
            };
            return true;
        }
        let _ = (op, dst, cells);
        false
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2")]
    fn merge_avx2(op: MergeOp, dst: &mut [u32], cells: &[u8]) {
        super::merge_words(op, dst, cells)
    }
}

/// One cell's merge (the scalar form of [`merge_lanes`]).
#[inline(always)]
pub fn merge_one(op: MergeOp, cap: u32, d: u32, s: u32) -> u32 {
    match op {
        MergeOp::Sum => d.saturating_add(s).min(cap),
        MergeOp::Max => d.max(s),
        MergeOp::SignedSum => d.wrapping_add(s),
    }
}

/// Which hash functions a sketch uses (see the module docs): the switches that build it and
/// every reader must agree.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize, Default,
)]
#[serde(rename_all = "kebab-case")]
pub enum SketchHash {
    /// CRC-32 then [`mix32`] (software reporters, `dta gen`).
    #[default]
    Independent,
    /// CRC-32 alone for columns and signs, tabulation over the CRC for HyperLogLog: what a
    /// Tofino reporter computes.
    Tofino,
}

impl SketchHash {
    /// The header code (byte 30).
    pub const fn code(self) -> u8 {
        match self {
            SketchHash::Independent => 0,
            SketchHash::Tofino => 1,
        }
    }

    /// The profile for a header code.
    pub const fn from_code(c: u8) -> Option<SketchHash> {
        match c {
            0 => Some(SketchHash::Independent),
            1 => Some(SketchHash::Tofino),
            _ => None,
        }
    }

    /// Configuration name.
    pub const fn name(self) -> &'static str {
        match self {
            SketchHash::Independent => "independent",
            SketchHash::Tofino => "tofino",
        }
    }
}

/// A sketch's geometry (what a reporter and the store must agree on).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SketchShape {
    /// The kind.
    pub kind: SketchKind,
    /// Rows (1 for HyperLogLog).
    pub rows: u8,
    /// Columns (a power of two; HyperLogLog: m registers).
    pub columns: u32,
    /// Bytes per cell.
    pub width: CellWidth,
    /// The hash functions ([`SketchHash::Independent`] unless set with
    /// [`SketchShape::with_hash`]).
    pub hash: SketchHash,
}

impl SketchShape {
    /// Checks the geometry: rows 1..=8 (exactly 1 for HyperLogLog), columns a power of two
    /// (2^4..=2^16 for HyperLogLog), width 4 for the counter sketches and 1 for HyperLogLog.
    pub fn new(
        kind: SketchKind,
        rows: u8,
        columns: u32,
        width: u8,
    ) -> Result<SketchShape, LayoutError> {
        let width = CellWidth::new(width).ok_or(LayoutError::BadEntrySize)?;
        if rows == 0 || rows > MAX_ROWS {
            return Err(LayoutError::BadHops);
        }
        if columns < 2 || !columns.is_power_of_two() {
            return Err(LayoutError::NotPowerOfTwo);
        }
        match kind {
            SketchKind::HyperLogLog => {
                if rows != 1 || width.bytes() != 1 {
                    return Err(LayoutError::BadEntrySize);
                }
                if !HLL_PRECISION.contains(&columns.trailing_zeros()) {
                    return Err(LayoutError::NotPowerOfTwo);
                }
            }
            SketchKind::CountMin | SketchKind::Count => {
                if width.bytes() != 4 {
                    return Err(LayoutError::BadEntrySize);
                }
            }
        }
        Ok(SketchShape {
            kind,
            rows,
            columns,
            width,
            hash: SketchHash::Independent,
        })
    }

    /// The same geometry hashed with `hash`.
    #[must_use]
    pub fn with_hash(mut self, hash: SketchHash) -> SketchShape {
        self.hash = hash;
        self
    }

    /// Cells in the sketch.
    #[inline]
    pub fn cells(&self) -> usize {
        self.rows as usize * self.columns as usize
    }

    /// Bytes of one column's cells on the wire (`rows × width`).
    #[inline]
    pub fn column_bytes(&self) -> usize {
        self.rows as usize * self.width.bytes()
    }
}

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

const UNUSED: Crc32 = Crc32::new(0);

static ROW_ENGINES: [Crc32; MAX_ROWS as usize] = {
    let mut e = [UNUSED; MAX_ROWS as usize];
    let mut i = 0;
    while i < MAX_ROWS as usize {
        e[i] = Crc32::new(replica_poly(i));
        i += 1;
    }
    e
};

static SIGN_ENGINES: [Crc32; MAX_ROWS as usize] = {
    let mut e = [UNUSED; MAX_ROWS as usize];
    let mut i = 0;
    while i < MAX_ROWS as usize {
        e[i] = Crc32::new(hop_poly(i));
        i += 1;
    }
    e
};

static HLL_ENGINE: Crc32 = Crc32::new(POLYNOMIALS[HLL_POLY_INDEX]);

/// The seed of the Tofino profile's tabulation tables (ASCII `DTASKTAB`).
pub const TAB_SEED: u64 = 0x4454_4153_4B54_4142;

/// The Tofino profile's tabulation tables: `TAB[i][b]` is the word byte `i` (0 = least
/// significant) of the CRC selects; successive splitmix64 outputs (low 32 bits) from
/// [`TAB_SEED`], table 0 first.
pub static TAB: [[u32; 256]; 4] = {
    let mut t = [[0u32; 256]; 4];
    let mut state = TAB_SEED;
    let mut i = 0;
    while i < 4 {
        let mut b = 0;
        while b < 256 {
            state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = state;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^= z >> 31;
            t[i][b] = z as u32;
            b += 1;
        }
        i += 1;
    }
    t
};

/// Simple tabulation of a 32-bit word: `TAB[0][x₀] ⊕ TAB[1][x₁] ⊕ TAB[2][x₂] ⊕ TAB[3][x₃]`.
#[inline]
pub fn tabulate(x: u32) -> u32 {
    let b = x.to_le_bytes();
    TAB[0][b[0] as usize] ^ TAB[1][b[1] as usize] ^ TAB[2][b[2] as usize] ^ TAB[3][b[3] as usize]
}

/// MurmurHash3's 32-bit finaliser (`fmix32`): a bijection that makes every output bit depend
/// on every input bit, applied to each sketch CRC (see the module docs).
#[inline]
pub const fn mix32(mut h: u32) -> u32 {
    h ^= h >> 16;
    h = h.wrapping_mul(0x85eb_ca6b);
    h ^= h >> 13;
    h = h.wrapping_mul(0xc2b2_ae35);
    h ^= h >> 16;
    h
}

/// The sketch hash functions (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SketchHasher {
    shape: SketchShape,
}

impl SketchHasher {
    /// Hashes for `shape`.
    pub fn new(shape: SketchShape) -> SketchHasher {
        SketchHasher { shape }
    }

    /// A column or sign CRC as the profile finishes it: `mix32` (independent) or as is
    /// (Tofino).
    #[inline]
    fn finish(&self, crc: u32) -> u32 {
        match self.shape.hash {
            SketchHash::Independent => mix32(crc),
            SketchHash::Tofino => crc,
        }
    }

    /// The column `key` maps to in row `row`.
    #[inline]
    pub fn column(&self, key: &Key, row: u8) -> u32 {
        self.finish(ROW_ENGINES[row as usize].checksum(key.as_bytes())) & (self.shape.columns - 1)
    }

    /// The Count sketch's sign of `key` in row `row` (+1 or −1).
    #[inline]
    pub fn sign(&self, key: &Key, row: u8) -> i32 {
        if self.finish(SIGN_ENGINES[row as usize].checksum(key.as_bytes())) >> 31 == 1 {
            -1
        } else {
            1
        }
    }

    /// HyperLogLog: the register `key` updates and its rank (1..=33 − p).
    #[inline]
    pub fn hll(&self, key: &Key) -> (u32, u8) {
        let p = self.shape.columns.trailing_zeros();
        let crc = HLL_ENGINE.checksum(key.as_bytes());
        let h = match self.shape.hash {
            SketchHash::Independent => mix32(crc),
            SketchHash::Tofino => tabulate(crc),
        };
        let idx = h >> (32 - p);
        let rest = h << p;
        let rank = if rest == 0 {
            32 - p + 1
        } else {
            rest.leading_zeros() + 1
        };
        (idx, rank as u8)
    }
}

/// One switch's sketch (or a sketch built centrally): `rows × columns` 32-bit cells, column
/// `c` at `c * rows .. (c + 1) * rows` (the order columns travel in).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sketch {
    shape: SketchShape,
    hasher: SketchHasher,
    cells: Vec<u32>,
}

impl Sketch {
    /// An empty sketch.
    pub fn new(shape: SketchShape) -> Sketch {
        Sketch {
            shape,
            hasher: SketchHasher::new(shape),
            cells: vec![0; shape.cells()],
        }
    }

    /// The geometry.
    pub fn shape(&self) -> SketchShape {
        self.shape
    }

    /// The hash functions.
    pub fn hasher(&self) -> &SketchHasher {
        &self.hasher
    }

    /// The Sketch-Merge report switch `switch` sends for `n` columns from `col` of this
    /// sketch in `epoch` (sequence number = `col`, medium priority), as wire bytes. `None`
    /// when the columns are beyond the sketch or do not fit one report.
    pub fn column_report(
        &self,
        sketch_id: u16,
        switch: u32,
        epoch: u32,
        col: u32,
        n: u32,
    ) -> Option<Vec<u8>> {
        use crate::wire::report::Priority;
        use crate::wire::sketch::{encode_cells, SketchReportRepr, MAX_SKETCH_REPORT_LEN};
        let rows = self.shape.rows as usize;
        let w = self.shape.width;
        let cells = self
            .cells
            .get(col as usize * rows..(col as usize + n as usize) * rows)?;
        let mut wire = vec![0u8; cells.len() * w.bytes()];
        encode_cells(w, cells, &mut wire);
        let r = SketchReportRepr {
            immediate: false,
            priority: Priority::Medium,
            seq: col,
            sketch_id,
            rows: rows as u8,
            width: w,
            op: self.shape.kind.merge_op(),
            columns: u16::try_from(n).ok()?,
            switch,
            epoch,
            column: col,
            cells: &wire,
        };
        let mut b = vec![0u8; MAX_SKETCH_REPORT_LEN];
        let len = r.emit(&mut b).ok()?;
        b.truncate(len);
        Some(b)
    }

    /// All cells, column-major.
    pub fn cells(&self) -> &[u32] {
        &self.cells
    }

    /// All cells, mutable.
    pub fn cells_mut(&mut self) -> &mut [u32] {
        &mut self.cells
    }

    /// Column `c`'s cells (one per row).
    pub fn column(&self, c: u32) -> &[u32] {
        let r = self.shape.rows as usize;
        &self.cells[c as usize * r..(c as usize + 1) * r]
    }

    /// Adds `count` occurrences of `key` (Count-Min, Count sketch) or records it
    /// (HyperLogLog: `count` is ignored).
    pub fn update(&mut self, key: &Key, count: u32) {
        let rows = self.shape.rows as usize;
        let cap = self.shape.width.max();
        match self.shape.kind {
            SketchKind::CountMin => {
                for r in 0..self.shape.rows {
                    let i = self.hasher.column(key, r) as usize * rows + r as usize;
                    self.cells[i] = self.cells[i].saturating_add(count).min(cap);
                }
            }
            SketchKind::Count => {
                for r in 0..self.shape.rows {
                    let i = self.hasher.column(key, r) as usize * rows + r as usize;
                    let d = (count as i32).wrapping_mul(self.hasher.sign(key, r));
                    self.cells[i] = self.cells[i].wrapping_add(d as u32);
                }
            }
            SketchKind::HyperLogLog => {
                let (idx, rank) = self.hasher.hll(key);
                let c = &mut self.cells[idx as usize];
                *c = (*c).max(rank as u32);
            }
        }
    }

    /// Merges `other` (same shape) into this sketch, cell by cell.
    pub fn merge(&mut self, other: &Sketch) {
        let op = self.shape.kind.merge_op();
        merge_lanes(op, self.shape.width.max(), &mut self.cells, &other.cells);
    }

    /// Point query (Count-Min: min over rows; Count sketch: median of signed estimates);
    /// `None` for HyperLogLog.
    pub fn point(&self, key: &Key) -> Option<i64> {
        let rows = self.shape.rows as usize;
        point_query(
            self.shape.kind,
            &self.hasher,
            self.shape.rows,
            key,
            |r, c| self.cells[c as usize * rows + r as usize],
        )
    }

    /// HyperLogLog cardinality estimate; `None` for the other kinds.
    pub fn cardinality(&self) -> Option<f64> {
        (self.shape.kind == SketchKind::HyperLogLog).then(|| hll_estimate(&self.cells))
    }
}

/// A point query over any cell store: `cell(row, column)` returns the merged cell.
/// Count-Min: the minimum over rows; Count sketch: the median of the rows' signed
/// estimates (the mean of the middle two for an even row count, rounded towards zero);
/// `None` for HyperLogLog.
pub fn point_query(
    kind: SketchKind,
    h: &SketchHasher,
    rows: u8,
    key: &Key,
    mut cell: impl FnMut(u8, u32) -> u32,
) -> Option<i64> {
    match kind {
        SketchKind::CountMin => (0..rows).map(|r| cell(r, h.column(key, r)) as i64).min(),
        SketchKind::Count => {
            let mut est = [0i64; MAX_ROWS as usize];
            for r in 0..rows {
                let v = cell(r, h.column(key, r)) as i32 as i64;
                est[r as usize] = v * h.sign(key, r) as i64;
            }
            let est = &mut est[..rows as usize];
            est.sort_unstable();
            let n = est.len();
            if n == 0 {
                return None;
            }
            Some(if n % 2 == 1 {
                est[n / 2]
            } else {
                (est[n / 2 - 1] + est[n / 2]) / 2
            })
        }
        SketchKind::HyperLogLog => None,
    }
}

/// The HyperLogLog estimate from `m` registers (Flajolet et al. 2007): the bias-corrected
/// harmonic mean, with linear counting below 5m/2 when a register is 0, and the large-range
/// correction for a 32-bit hash above 2^32/30.
pub fn hll_estimate(registers: &[u32]) -> f64 {
    let m = registers.len() as f64;
    if registers.is_empty() {
        return 0.0;
    }
    let alpha = match registers.len() {
        16 => 0.673,
        32 => 0.697,
        64 => 0.709,
        _ => 0.7213 / (1.0 + 1.079 / m),
    };
    let mut sum = 0.0;
    let mut zeros = 0usize;
    for &r in registers {
        sum += (-(r.min(64) as f64)).exp2();
        zeros += (r == 0) as usize;
    }
    let e = alpha * m * m / sum;
    let two32 = 4_294_967_296.0f64;
    if e <= 2.5 * m {
        if zeros > 0 {
            m * (m / zeros as f64).ln()
        } else {
            e
        }
    } else if e > two32 / 30.0 {
        -two32 * (1.0 - e / two32).ln()
    } else {
        e
    }
}

/// Serial-number comparison of epochs (RFC 1982): true if `a` is after `b`.
#[inline]
pub fn epoch_after(a: u32, b: u32) -> bool {
    let d = a.wrapping_sub(b);
    d != 0 && d < 1 << 31
}

#[cfg(test)]
mod tests {

    proptest::proptest! {
        #[test]
        fn the_avx2_merge_equals_the_portable_one(
            dst in proptest::collection::vec(proptest::prelude::any::<u32>(), 0..300),
            cells in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..1200),
            which in 0usize..3) {
            let op = [MergeOp::Sum, MergeOp::Max, MergeOp::SignedSum][which];
            let n = dst.len().min(cells.len() / 4);
            let (mut a, mut b) = (dst[..n].to_vec(), dst[..n].to_vec());
            merge_words(op, &mut a, &cells[..n * 4]);
            if wide::merge_words(op, &mut b, &cells[..n * 4]) {
                proptest::prop_assert_eq!(a, b);
            }
        }
    }
    use super::*;

    fn cm() -> SketchShape {
        SketchShape::new(SketchKind::CountMin, 4, 1024, 4).unwrap()
    }

    #[test]
    fn shapes_and_layouts_are_checked() {
        assert!(SketchShape::new(SketchKind::CountMin, 0, 1024, 4).is_err());
        assert!(SketchShape::new(SketchKind::CountMin, 9, 1024, 4).is_err());
        assert!(SketchShape::new(SketchKind::CountMin, 4, 1000, 4).is_err());
        assert!(SketchShape::new(SketchKind::CountMin, 4, 1024, 3).is_err());
        assert!(SketchShape::new(SketchKind::CountMin, 4, 1024, 1).is_err());
        assert!(SketchShape::new(SketchKind::HyperLogLog, 2, 1024, 1).is_err());
        assert!(SketchShape::new(SketchKind::HyperLogLog, 1, 8, 1).is_err());
        assert!(SketchShape::new(SketchKind::HyperLogLog, 1, 1 << 17, 1).is_err());
        let l = SketchLayout::new(cm(), 32, 2).unwrap();
        assert_eq!(l.column_stride(), 8 + 16 + 8);
        assert_eq!(l.batch_len(), 32 * 32);
        assert_eq!(l.region_len(), 64 + 2 * 1024 * 32);
        assert_eq!(l.slot_offset(5), 64 + 1024 * 32);
        assert_eq!(l.batch_offset(4, 2), 64 + 64 * 32);
        assert_eq!(l.tail_offset(4, 2), 64 + 2 * 32 + 24);
        assert!(
            SketchLayout::new(cm(), 64, 2).is_err(),
            "64 x 32 B > 1024 B"
        );
        assert!(SketchLayout::new(cm(), 3, 2).is_err());
        assert!(SketchLayout::new(cm(), 32, 0).is_err());
        assert!(SketchLayout::new(cm(), 32, 17).is_err());
        let hll = SketchShape::new(SketchKind::HyperLogLog, 1, 4096, 1).unwrap();
        let l = SketchLayout::new(hll, 32, 2).unwrap();
        assert_eq!(l.column_stride(), 8 + 4 + 8);
        let (back, id) = SketchLayout::decode_header(&l.encode_header(7)).unwrap();
        assert_eq!((back, id), (l, 7));
        let mut bad = l.encode_header(7);
        bad[6] = 0;
        assert_eq!(SketchLayout::decode_header(&bad), None);
    }

    #[test]
    fn records_round_trip() {
        let cs = SketchShape::new(SketchKind::Count, 3, 64, 4).unwrap();
        let l = SketchLayout::new(cs, 8, 1).unwrap();
        let mut rec = vec![0xAAu8; l.column_stride() as usize];
        l.encode_record(9, 3, 4, &[1, (-5i32) as u32, u32::MAX], &mut rec);
        let mut cells = [0u32; 3];
        assert_eq!(l.decode_record(&rec, &mut cells), (9, 3, 4));
        assert_eq!(cells, [1, (-5i32) as u32, u32::MAX]);
        // Written by hand from the text (module docs, PROTOCOL.md §9): head, 3 cells LE, tail.
        assert_eq!(
            rec,
            [
                9, 0, 0, 0, 3, 0, 4, 0, //
                1, 0, 0, 0, 0xFB, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, //
                9, 0, 0, 0, 3, 0, 4, 0,
            ]
        );
        let head = RecordHead {
            epoch: 9,
            merged: 3,
            expected: 4,
        };
        assert_eq!(l.decode_whole(&rec, &mut cells), Some(head));
        // The head of a newer version over the rest of the old one: in transition.
        let mut torn = rec.clone();
        torn[4] = 4;
        assert_eq!(l.decode_whole(&torn, &mut cells), None);
        let mut torn = rec.clone();
        torn[20] = 11; // the tail of epoch 11 (another epoch reusing the slot)
        assert_eq!(l.decode_whole(&torn, &mut cells), None);
        let hll = SketchLayout::new(
            SketchShape::new(SketchKind::HyperLogLog, 1, 16, 1).unwrap(),
            4,
            1,
        )
        .unwrap();
        let mut rec = vec![0xAAu8; 20];
        hll.encode_record(1, 1, 1, &[17], &mut rec);
        assert_eq!(&rec[8..12], &[17, 0, 0, 0], "padding is zeroed");
        assert_eq!(&rec[12..], &rec[..8], "the tail repeats the head");
    }

    #[test]
    fn merges_saturate_take_max_and_sign_extend() {
        let mut d = [u32::MAX - 1, 5, 0, 7];
        merge_lanes(MergeOp::Sum, u32::MAX, &mut d, &[5, 5, 0, 1]);
        assert_eq!(d, [u32::MAX, 10, 0, 8]);
        let mut d = [250, 5];
        merge_lanes(MergeOp::Sum, 255, &mut d, &[10, 5]);
        assert_eq!(d, [255, 10]);
        let mut d = [3, 9];
        merge_lanes(MergeOp::Max, 255, &mut d, &[4, 2]);
        assert_eq!(d, [4, 9]);
        let mut d = [(-3i32) as u32];
        merge_lanes(MergeOp::SignedSum, u32::MAX, &mut d, &[5]);
        assert_eq!(d, [2]);
        // Wire cells are big-endian; narrow signed cells are sign-extended.
        let mut d = [1u32, 2];
        merge_wire_cells(
            MergeOp::Sum,
            CellWidth::new(4).unwrap(),
            &mut d,
            &[0, 0, 1, 0, 255, 255, 255, 255],
        );
        assert_eq!(d, [257, u32::MAX]);
        let mut d = [10u32];
        merge_wire_cells(
            MergeOp::SignedSum,
            CellWidth::new(1).unwrap(),
            &mut d,
            &[0xFF],
        );
        assert_eq!(d, [9]);
        let mut d = [10u32];
        merge_wire_cells(MergeOp::Max, CellWidth::new(1).unwrap(), &mut d, &[0x0C]);
        assert_eq!(d, [12]);
        let mut d = [0xFFF0u32];
        merge_wire_cells(MergeOp::Sum, CellWidth::new(2).unwrap(), &mut d, &[0, 0x20]);
        assert_eq!(d, [0xFFFF]);
    }

    #[test]
    fn count_min_never_undercounts_and_merge_equals_central() {
        let mut parts = vec![Sketch::new(cm()); 3];
        let mut central = Sketch::new(cm());
        let mut truth = std::collections::HashMap::new();
        for i in 0..5000u32 {
            let k = Key::new(&(i % 700).to_be_bytes()).unwrap();
            parts[(i % 3) as usize].update(&k, 1 + i % 5);
            central.update(&k, 1 + i % 5);
            *truth.entry(i % 700).or_insert(0i64) += (1 + i % 5) as i64;
        }
        let mut merged = Sketch::new(cm());
        for p in &parts {
            merged.merge(p);
        }
        assert_eq!(merged, central);
        for (k, t) in truth {
            let est = merged.point(&Key::new(&k.to_be_bytes()).unwrap()).unwrap();
            assert!(est >= t, "key {k}: {est} < {t}");
        }
    }

    #[test]
    fn count_sketch_is_unbiased_enough_and_merges() {
        let shape = SketchShape::new(SketchKind::Count, 5, 1024, 4).unwrap();
        let mut a = Sketch::new(shape);
        let mut b = Sketch::new(shape);
        let mut c = Sketch::new(shape);
        for i in 0..2000u32 {
            let k = Key::new(&i.to_be_bytes()).unwrap();
            let n = if i < 10 { 1000 } else { 1 };
            if i % 2 == 0 {
                a.update(&k, n)
            } else {
                b.update(&k, n)
            }
            c.update(&k, n);
        }
        a.merge(&b);
        assert_eq!(a, c);
        for i in 0..10u32 {
            let est = a.point(&Key::new(&i.to_be_bytes()).unwrap()).unwrap();
            assert!((est - 1000).abs() < 60, "heavy key {i}: {est}");
        }
    }

    #[test]
    fn hll_estimates_within_bounds() {
        let shape = SketchShape::new(SketchKind::HyperLogLog, 1, 1024, 1).unwrap();
        for n in [10u32, 1000, 100_000] {
            let mut s = Sketch::new(shape);
            for i in 0..n {
                s.update(
                    &Key::new(&(i.wrapping_mul(2_654_435_761)).to_be_bytes()).unwrap(),
                    1,
                );
            }
            let e = s.cardinality().unwrap();
            let rel = (e - n as f64).abs() / n as f64;
            assert!(rel < 3.0 * 1.04 / 32.0, "n {n}: estimate {e}");
        }
        let (_, rank) = SketchHasher::new(shape).hll(&Key::new(&[1]).unwrap());
        assert!((1..=23).contains(&rank));
    }

    /// The Tofino profile: columns and signs are the bare CRCs, the header carries the
    /// profile, and HyperLogLog over structured keys (consecutive integers, one /16 of
    /// addresses, 5-tuples of one host pair) stays within 3 standard errors, where the CRC
    /// alone is far off (checked too, so the tabulation is what fixes it).
    #[test]
    fn tofino_profile_hashes_as_a_switch_does() {
        let shape = cm().with_hash(SketchHash::Tofino);
        let h = SketchHasher::new(shape);
        let key = Key::new(&[10, 0, 0, 1, 10, 0, 0, 2, 6, 0x1F, 0x90, 0x00, 0x50]).unwrap();
        for r in 0..4u8 {
            let crc = Crc32::new(replica_poly(r as usize)).checksum(key.as_bytes());
            assert_eq!(h.column(&key, r), crc & 1023);
            assert_ne!(
                SketchHasher::new(cm()).column(&key, r),
                h.column(&key, r),
                "the independent profile differs (row {r})"
            );
        }
        assert_eq!(
            TAB[0][0], 0x1253_8F4E,
            "the tables P4 carries (dta_constants.p4)"
        );
        assert_eq!(tabulate(0), TAB[0][0] ^ TAB[1][0] ^ TAB[2][0] ^ TAB[3][0]);
        assert_eq!(
            tabulate(0x0102_0304),
            TAB[0][4] ^ TAB[1][3] ^ TAB[2][2] ^ TAB[3][1]
        );
        let l = SketchLayout::new(shape, 32, 2).unwrap();
        let (back, _) = SketchLayout::decode_header(&l.encode_header(3)).unwrap();
        assert_eq!(back.shape().hash, SketchHash::Tofino);
        let mut bad = l.encode_header(3);
        bad[30] = 9;
        assert_eq!(SketchLayout::decode_header(&bad), None, "unknown profile");

        let hll = SketchShape::new(SketchKind::HyperLogLog, 1, 1024, 1).unwrap();
        let bound = 3.0 * 1.04 / 32.0;
        let crc_only_rank = |key: &Key| {
            let x = HLL_ENGINE.checksum(key.as_bytes());
            let rest = x << 10;
            (
                x >> 22,
                if rest == 0 {
                    23
                } else {
                    rest.leading_zeros() + 1
                },
            )
        };
        type KeyOf = fn(u32) -> Vec<u8>;
        let consecutive: KeyOf = |i| i.to_be_bytes().to_vec();
        let subnet: KeyOf = |i| {
            (0x0A00_0000 | (i & 0xFFFF) | (i >> 16) << 24)
                .to_be_bytes()
                .to_vec()
        };
        let ports: KeyOf = |i| {
            let mut k = vec![10, 0, 0, 1, 10, 0, 0, 2, 6];
            k.extend_from_slice(&(i as u16).to_be_bytes());
            k.extend_from_slice(&((i >> 16) as u16 + 80).to_be_bytes());
            k
        };
        let sets = [
            ("consecutive", consecutive),
            ("one /16", subnet),
            ("ports", ports),
        ];
        let mut crc_far = 0;
        for (name, key) in &sets {
            let n = 20_000u32;
            let mut tof = Sketch::new(hll.with_hash(SketchHash::Tofino));
            let mut bare = Sketch::new(hll);
            for i in 0..n {
                let k = Key::new(&key(i)).unwrap();
                tof.update(&k, 1);
                let (idx, rank) = crc_only_rank(&k);
                let c = &mut bare.cells_mut()[idx as usize];
                *c = (*c).max(rank);
            }
            let rel = |s: &Sketch| (s.cardinality().unwrap() - n as f64).abs() / n as f64;
            assert!(
                rel(&tof) < bound,
                "{name}: tabulated estimate off by {}",
                rel(&tof)
            );
            crc_far += (rel(&bare) > bound) as u32;
        }
        assert!(crc_far >= 1, "the CRC alone is biased on structured keys");
    }

    #[test]
    fn epochs_compare_serially() {
        assert!(epoch_after(1, 0));
        assert!(epoch_after(0, u32::MAX));
        assert!(!epoch_after(5, 5));
        assert!(!epoch_after(4, 5));
    }
}
