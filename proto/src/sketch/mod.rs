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
//!
//! # Layout of this module
//! This file holds the vocabulary (kinds, merge ops, cell widths, hash profiles, shapes), a
//! sketch built in one place ([`Sketch`]) and the queries over merged cells. `merge` holds the
//! lane-wise merges the translator runs per report (portable and AVX2), `hash` the row, sign and
//! HyperLogLog hashes, `layout` where a merged sketch sits in collector memory and how a reader
//! checks a record. None of them does I/O.

#[cfg(doc)]
use crate::hash::{hop_poly, replica_poly, POLYNOMIALS};
use crate::layout::LayoutError;
use crate::types::Key;

mod hash;
mod layout;
mod merge;

pub use hash::{mix32, tabulate, SketchHasher, TAB, TAB_SEED};
pub use layout::{record_stride, RecordHead, SketchLayout};
pub use merge::{merge_lanes, merge_one, merge_wire_cells};

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
mod tests;
