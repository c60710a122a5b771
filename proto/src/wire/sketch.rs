//! Sketch-Merge reports: the extended profile's fifth primitive (opcode 0x05), which exists
//! only in version 2 of the profile (first byte 0xD2; see `PROTOCOL.md` §3.4).
//!
//! ```text
//! 0   0xD2            magic 0xD, version 2
//! 1   opcode u8       0x05 Sketch-Merge
//! 2   flags u8        bit7 immediate, bit6 retransmittable (MUST be 0 here), bits5..4
//!                     priority, bits3..0 zero
//! 3   reserved u8     zero
//! 4   seq u32         per-reporter counter (not tracked: columns are)
//! 8   sketch_id u16   which sketch (selects the store)
//! 10  rows u8         1..=8
//! 11  cell_width u8   1, 2 or 4 bytes
//! 12  merge_op u8     0 sum, 1 max, 2 signed sum
//! 13  reserved u8     zero
//! 14  columns u16     columns in this report, >= 1
//! 16  switch_id u32   the reporting switch (per-switch in-order tracking)
//! 20  epoch u32       the sketch's epoch
//! 24  column u32      index of the first column carried
//! 28  cells           columns × rows × cell_width bytes, column after column, row 0 first,
//!                     each cell big-endian
//! ```
//!
//! A report carries at most [`MAX_CELL_BYTES`] bytes of cells, so a datagram is at most
//! [`MAX_SKETCH_REPORT_LEN`] bytes (it fits a 1,500-byte Ethernet MTU with IPv4 and UDP).
//!
//! Parsing is total: every malformed case is a distinct [`SketchError`], which folds into
//! the common [`Error`] for counting (`From`). The column range is checked for overflow, not
//! against a store: whether the columns exist is the translator's business.

use crate::consts::opcode;
use crate::sketch::{CellWidth, MergeOp};
use crate::wire::dta_ext::{flags, is_extended, HEADER_LEN, MAGIC};
use crate::wire::report::Priority;
use crate::wire::Error;

/// The extended-profile version that carries Sketch-Merge.
pub const VERSION: u8 = 2;
/// First byte of every Sketch-Merge report and sketch NACK.
pub const MAGIC_VERSION: u8 = MAGIC | VERSION;
/// Length of the fixed part of the sub-header.
pub const SUB_HEADER_LEN: usize = 20;
/// Bytes before the cells.
pub const FIXED_LEN: usize = HEADER_LEN + SUB_HEADER_LEN;
/// Most bytes of cells one report may carry.
pub const MAX_CELL_BYTES: usize = 1024;
/// Longest Sketch-Merge report.
pub const MAX_SKETCH_REPORT_LEN: usize = FIXED_LEN + MAX_CELL_BYTES;

/// True if a UDP payload is (or claims to be) a version-2 extended datagram: the translator
/// sends it to [`SketchReportRepr::parse`] instead of the version-1 report parser.
#[inline]
pub fn is_sketch_datagram(payload: &[u8]) -> bool {
    payload.first() == Some(&MAGIC_VERSION)
}

/// Why a Sketch-Merge report was rejected; each case is its own variant.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SketchError {
    /// Empty, or shorter than the 28 fixed bytes.
    Truncated,
    /// The first byte is not an extended-profile magic.
    NotExtended,
    /// An extended version other than 2.
    UnsupportedVersion,
    /// An opcode other than 0x05.
    UnknownOpcode,
    /// Priority bits 3.
    BadPriority,
    /// A reserved flag bit or the reserved byte 3 is set.
    ReservedHeader,
    /// The retransmittable flag is set (Sketch-Merge recovers by column NACKs instead).
    Retransmittable,
    /// Rows 0 or above 8.
    BadRows,
    /// A cell width other than 1, 2 or 4.
    BadCellWidth,
    /// A merge op other than 0, 1, 2.
    BadMergeOp,
    /// The reserved sub-header byte is set.
    ReservedSubHeader,
    /// Zero columns.
    ZeroColumns,
    /// More than [`MAX_CELL_BYTES`] bytes of cells announced.
    TooManyCells,
    /// `column + columns` overflows 32 bits.
    ColumnOverflow,
    /// Fewer cell bytes than announced.
    CellsTruncated,
    /// Bytes after the announced cells.
    TrailingBytes,
}

impl From<SketchError> for Error {
    fn from(e: SketchError) -> Error {
        match e {
            SketchError::Truncated | SketchError::CellsTruncated => Error::Truncated,
            SketchError::UnsupportedVersion => Error::UnsupportedVersion,
            SketchError::UnknownOpcode => Error::UnknownOpcode,
            _ => Error::Malformed,
        }
    }
}

impl core::fmt::Display for SketchError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(match self {
            SketchError::Truncated => "truncated sketch report",
            SketchError::NotExtended => "not an extended-profile datagram",
            SketchError::UnsupportedVersion => "unsupported extended version",
            SketchError::UnknownOpcode => "unknown version-2 opcode",
            SketchError::BadPriority => "priority 3",
            SketchError::ReservedHeader => "reserved header bits set",
            SketchError::Retransmittable => "retransmittable flag on a sketch report",
            SketchError::BadRows => "row count not 1..=8",
            SketchError::BadCellWidth => "cell width not 1, 2 or 4",
            SketchError::BadMergeOp => "unknown merge op",
            SketchError::ReservedSubHeader => "reserved sub-header byte set",
            SketchError::ZeroColumns => "zero columns",
            SketchError::TooManyCells => "more cell bytes than a report may carry",
            SketchError::ColumnOverflow => "column range overflows",
            SketchError::CellsTruncated => "fewer cell bytes than announced",
            SketchError::TrailingBytes => "bytes after the cells",
        })
    }
}

impl std::error::Error for SketchError {}

mod field {
    pub type Field = core::ops::Range<usize>;
    pub const MAGIC_VERSION: usize = 0;
    pub const OPCODE: usize = 1;
    pub const FLAGS: usize = 2;
    pub const RESERVED: usize = 3;
    pub const SEQ: Field = 4..8;
    pub const SKETCH_ID: Field = 8..10;
    pub const ROWS: usize = 10;
    pub const CELL_WIDTH: usize = 11;
    pub const MERGE_OP: usize = 12;
    pub const SUB_RESERVED: usize = 13;
    pub const COLUMNS: Field = 14..16;
    pub const SWITCH: Field = 16..20;
    pub const EPOCH: Field = 20..24;
    pub const COLUMN: Field = 24..28;
    pub const CELLS: usize = 28;
}

#[inline]
fn be_u32(b: &[u8]) -> u32 {
    u32::from_be_bytes([b[0], b[1], b[2], b[3]])
}

#[inline]
fn be_u16(b: &[u8]) -> u16 {
    u16::from_be_bytes([b[0], b[1]])
}

/// A view of a Sketch-Merge report.
#[derive(Debug, Clone)]
pub struct SketchReport<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> SketchReport<T> {
    /// Wrap a buffer without checking it.
    #[inline]
    pub const fn new_unchecked(buffer: T) -> SketchReport<T> {
        SketchReport { buffer }
    }

    /// Wrap a buffer, checking magic, version and that the fixed 28 bytes are there; after
    /// it, every fixed-field accessor is in bounds (the cells are checked by the Repr).
    #[inline]
    pub fn new_checked(buffer: T) -> Result<SketchReport<T>, SketchError> {
        let v = Self::new_unchecked(buffer);
        v.check_len()?;
        Ok(v)
    }

    /// The checks of [`Self::new_checked`].
    #[inline]
    pub fn check_len(&self) -> Result<(), SketchError> {
        let b = self.buffer.as_ref();
        let first = *b.first().ok_or(SketchError::Truncated)?;
        if !is_extended(first) {
            return Err(SketchError::NotExtended);
        }
        if first != MAGIC_VERSION {
            return Err(SketchError::UnsupportedVersion);
        }
        if b.len() < FIXED_LEN {
            return Err(SketchError::Truncated);
        }
        Ok(())
    }

    /// The raw opcode byte.
    #[inline]
    pub fn opcode(&self) -> u8 {
        self.buffer.as_ref()[field::OPCODE]
    }
    /// The raw flags byte.
    #[inline]
    pub fn flags(&self) -> u8 {
        self.buffer.as_ref()[field::FLAGS]
    }
    /// The reserved header byte.
    #[inline]
    pub fn reserved(&self) -> u8 {
        self.buffer.as_ref()[field::RESERVED]
    }
    /// The sequence number.
    #[inline]
    pub fn seq(&self) -> u32 {
        be_u32(&self.buffer.as_ref()[field::SEQ])
    }
    /// The sketch ID.
    #[inline]
    pub fn sketch_id(&self) -> u16 {
        be_u16(&self.buffer.as_ref()[field::SKETCH_ID])
    }
    /// The row count.
    #[inline]
    pub fn rows(&self) -> u8 {
        self.buffer.as_ref()[field::ROWS]
    }
    /// The raw cell width.
    #[inline]
    pub fn cell_width(&self) -> u8 {
        self.buffer.as_ref()[field::CELL_WIDTH]
    }
    /// The raw merge op.
    #[inline]
    pub fn merge_op(&self) -> u8 {
        self.buffer.as_ref()[field::MERGE_OP]
    }
    /// The reserved sub-header byte.
    #[inline]
    pub fn sub_reserved(&self) -> u8 {
        self.buffer.as_ref()[field::SUB_RESERVED]
    }
    /// Columns carried.
    #[inline]
    pub fn columns(&self) -> u16 {
        be_u16(&self.buffer.as_ref()[field::COLUMNS])
    }
    /// The reporting switch.
    #[inline]
    pub fn switch_id(&self) -> u32 {
        be_u32(&self.buffer.as_ref()[field::SWITCH])
    }
    /// The epoch.
    #[inline]
    pub fn epoch(&self) -> u32 {
        be_u32(&self.buffer.as_ref()[field::EPOCH])
    }
    /// The first column carried.
    #[inline]
    pub fn column(&self) -> u32 {
        be_u32(&self.buffer.as_ref()[field::COLUMN])
    }
    /// Everything after the fixed part (the cells, if the report is well formed).
    #[inline]
    pub fn cells(&self) -> &[u8] {
        &self.buffer.as_ref()[field::CELLS..]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> SketchReport<T> {
    fn b(&mut self) -> &mut [u8] {
        self.buffer.as_mut()
    }
    /// Set the first byte.
    #[inline]
    pub fn set_magic_version(&mut self, v: u8) {
        self.b()[field::MAGIC_VERSION] = v;
    }
    /// Set the opcode.
    #[inline]
    pub fn set_opcode(&mut self, v: u8) {
        self.b()[field::OPCODE] = v;
    }
    /// Set the flags byte.
    #[inline]
    pub fn set_flags(&mut self, v: u8) {
        self.b()[field::FLAGS] = v;
    }
    /// Set the reserved header byte.
    #[inline]
    pub fn set_reserved(&mut self, v: u8) {
        self.b()[field::RESERVED] = v;
    }
    /// Set the sequence number.
    #[inline]
    pub fn set_seq(&mut self, v: u32) {
        self.b()[field::SEQ].copy_from_slice(&v.to_be_bytes());
    }
    /// Set the sketch ID.
    #[inline]
    pub fn set_sketch_id(&mut self, v: u16) {
        self.b()[field::SKETCH_ID].copy_from_slice(&v.to_be_bytes());
    }
    /// Set the row count.
    #[inline]
    pub fn set_rows(&mut self, v: u8) {
        self.b()[field::ROWS] = v;
    }
    /// Set the cell width.
    #[inline]
    pub fn set_cell_width(&mut self, v: u8) {
        self.b()[field::CELL_WIDTH] = v;
    }
    /// Set the merge op.
    #[inline]
    pub fn set_merge_op(&mut self, v: u8) {
        self.b()[field::MERGE_OP] = v;
    }
    /// Set the reserved sub-header byte.
    #[inline]
    pub fn set_sub_reserved(&mut self, v: u8) {
        self.b()[field::SUB_RESERVED] = v;
    }
    /// Set the column count.
    #[inline]
    pub fn set_columns(&mut self, v: u16) {
        self.b()[field::COLUMNS].copy_from_slice(&v.to_be_bytes());
    }
    /// Set the switch ID.
    #[inline]
    pub fn set_switch_id(&mut self, v: u32) {
        self.b()[field::SWITCH].copy_from_slice(&v.to_be_bytes());
    }
    /// Set the epoch.
    #[inline]
    pub fn set_epoch(&mut self, v: u32) {
        self.b()[field::EPOCH].copy_from_slice(&v.to_be_bytes());
    }
    /// Set the first column.
    #[inline]
    pub fn set_column(&mut self, v: u32) {
        self.b()[field::COLUMN].copy_from_slice(&v.to_be_bytes());
    }
    /// The bytes after the fixed part, mutable.
    #[inline]
    pub fn cells_mut(&mut self) -> &mut [u8] {
        &mut self.b()[field::CELLS..]
    }
}

/// A parsed Sketch-Merge report; the cells borrow the datagram.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SketchReportRepr<'a> {
    /// The `immediate` flag.
    pub immediate: bool,
    /// The report's priority.
    pub priority: Priority,
    /// The reporter's counter (carried, not tracked).
    pub seq: u32,
    /// Which sketch.
    pub sketch_id: u16,
    /// Rows, 1..=8.
    pub rows: u8,
    /// Bytes per cell.
    pub width: CellWidth,
    /// How the cells merge.
    pub op: MergeOp,
    /// Columns carried, ≥ 1.
    pub columns: u16,
    /// The reporting switch.
    pub switch: u32,
    /// The sketch's epoch.
    pub epoch: u32,
    /// The first column carried; `column + columns` does not overflow.
    pub column: u32,
    /// `columns × rows × width` big-endian cells, column-major.
    pub cells: &'a [u8],
}

impl<'a> SketchReportRepr<'a> {
    /// Parses one UDP payload. Checks, in order: magic/version, length of the fixed part,
    /// opcode, priority, reserved header bits, the retransmittable flag, rows, cell width,
    /// merge op, reserved sub-header byte, zero columns, cell bytes above the maximum, column
    /// overflow, then the datagram's length against the cells announced (short: truncated;
    /// long: trailing bytes).
    pub fn parse(payload: &'a [u8]) -> Result<SketchReportRepr<'a>, SketchError> {
        let v = SketchReport::new_checked(payload)?;
        if v.opcode() != opcode::SKETCH_MERGE {
            return Err(SketchError::UnknownOpcode);
        }
        let fl = v.flags();
        let priority = Priority::from_bits((fl & flags::PRIORITY_MASK) >> flags::PRIORITY_SHIFT)
            .ok_or(SketchError::BadPriority)?;
        if fl & flags::RESERVED_MASK != 0 || v.reserved() != 0 {
            return Err(SketchError::ReservedHeader);
        }
        if fl & flags::RETRANSMITTABLE != 0 {
            return Err(SketchError::Retransmittable);
        }
        let rows = v.rows();
        if rows == 0 || rows > crate::sketch::MAX_ROWS {
            return Err(SketchError::BadRows);
        }
        let width = CellWidth::new(v.cell_width()).ok_or(SketchError::BadCellWidth)?;
        let op = MergeOp::from_code(v.merge_op()).ok_or(SketchError::BadMergeOp)?;
        if v.sub_reserved() != 0 {
            return Err(SketchError::ReservedSubHeader);
        }
        let columns = v.columns();
        if columns == 0 {
            return Err(SketchError::ZeroColumns);
        }
        let n = columns as usize * rows as usize * width.bytes();
        if n > MAX_CELL_BYTES {
            return Err(SketchError::TooManyCells);
        }
        let column = v.column();
        if column.checked_add(columns as u32).is_none() {
            return Err(SketchError::ColumnOverflow);
        }
        let cells = &payload[field::CELLS..];
        if cells.len() < n {
            return Err(SketchError::CellsTruncated);
        }
        if cells.len() > n {
            return Err(SketchError::TrailingBytes);
        }
        Ok(SketchReportRepr {
            immediate: fl & flags::IMMEDIATE != 0,
            priority,
            seq: v.seq(),
            sketch_id: v.sketch_id(),
            rows,
            width,
            op,
            columns,
            switch: v.switch_id(),
            epoch: v.epoch(),
            column,
            cells,
        })
    }

    /// Bytes of one column's cells.
    #[inline]
    pub fn column_bytes(&self) -> usize {
        self.rows as usize * self.width.bytes()
    }

    /// [`SketchError`] if this report cannot be put on the wire (the same rules as parsing).
    pub fn check(&self) -> Result<(), SketchError> {
        if self.rows == 0 || self.rows > crate::sketch::MAX_ROWS {
            return Err(SketchError::BadRows);
        }
        if self.columns == 0 {
            return Err(SketchError::ZeroColumns);
        }
        let n = self.columns as usize * self.column_bytes();
        if n > MAX_CELL_BYTES {
            return Err(SketchError::TooManyCells);
        }
        if self.column.checked_add(self.columns as u32).is_none() {
            return Err(SketchError::ColumnOverflow);
        }
        match self.cells.len().cmp(&n) {
            core::cmp::Ordering::Less => Err(SketchError::CellsTruncated),
            core::cmp::Ordering::Greater => Err(SketchError::TrailingBytes),
            core::cmp::Ordering::Equal => Ok(()),
        }
    }

    /// Length on the wire.
    #[inline]
    pub fn buffer_len(&self) -> usize {
        FIXED_LEN + self.cells.len()
    }

    /// Writes the report into the first [`Self::buffer_len`] bytes of `buf` and returns that
    /// length, or the [`Self::check`] error (nothing written). Panics only if `buf` is shorter
    /// than `buffer_len()`.
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize, SketchError> {
        self.check()?;
        let len = self.buffer_len();
        let mut v = SketchReport::new_unchecked(&mut buf[..len]);
        let mut fl = (self.priority as u8) << flags::PRIORITY_SHIFT;
        if self.immediate {
            fl |= flags::IMMEDIATE;
        }
        v.set_magic_version(MAGIC_VERSION);
        v.set_opcode(opcode::SKETCH_MERGE);
        v.set_flags(fl);
        v.set_reserved(0);
        v.set_seq(self.seq);
        v.set_sketch_id(self.sketch_id);
        v.set_rows(self.rows);
        v.set_cell_width(self.width.bytes() as u8);
        v.set_merge_op(self.op.code());
        v.set_sub_reserved(0);
        v.set_columns(self.columns);
        v.set_switch_id(self.switch);
        v.set_epoch(self.epoch);
        v.set_column(self.column);
        v.cells_mut().copy_from_slice(self.cells);
        Ok(len)
    }
}

/// Writes `cells` (u32 values, column-major) as big-endian wire cells of width `w` into `out`
/// (which must hold `cells.len() × w` bytes); narrower cells keep the low bytes.
pub fn encode_cells(w: CellWidth, cells: &[u32], out: &mut [u8]) {
    let n = w.bytes();
    for (o, v) in out.chunks_exact_mut(n).zip(cells) {
        o.copy_from_slice(&v.to_be_bytes()[4 - n..]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn hex(s: &str) -> Vec<u8> {
        let s: String = s.chars().filter(|c| !c.is_whitespace()).collect();
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    // Sketch 7, 2 rows of 4-byte cells, sum, 2 columns from column 4, switch 0x0a000001,
    // epoch 3, medium priority, seq 9. Cells: (c4: 1, 2), (c5: 3, 0xffffffff).
    const GOLDEN: &str = "d2 05 10 00 00000009  0007 02 04 00 00 0002 0a000001 00000003 00000004 \
         00000001 00000002 00000003 ffffffff";

    #[test]
    fn golden_report() {
        let b = hex(GOLDEN);
        assert_eq!(b.len(), 28 + 16);
        let r = SketchReportRepr::parse(&b).unwrap();
        assert_eq!(
            (r.sketch_id, r.rows, r.width.bytes(), r.op, r.columns),
            (7, 2, 4, MergeOp::Sum, 2)
        );
        assert_eq!((r.switch, r.epoch, r.column, r.seq), (0x0a00_0001, 3, 4, 9));
        assert_eq!(r.priority, Priority::Medium);
        assert_eq!(r.cells, &b[28..]);
        let mut out = [0u8; MAX_SKETCH_REPORT_LEN];
        let n = r.emit(&mut out).unwrap();
        assert_eq!(&out[..n], &b[..]);
        assert!(is_sketch_datagram(&b));
        // The version-1 report parser refuses it as a version it does not speak.
        assert_eq!(
            crate::wire::report::parse_report(&b, &Default::default()),
            Err(Error::UnsupportedVersion)
        );
    }

    #[test]
    fn every_malformed_case_is_distinct() {
        let good = hex(GOLDEN);
        let with = |i: usize, v: u8| {
            let mut b = good.clone();
            b[i] = v;
            SketchReportRepr::parse(&b).err()
        };
        use SketchError as E;
        assert_eq!(SketchReportRepr::parse(&[]).err(), Some(E::Truncated));
        assert_eq!(with(0, 0x05), Some(E::NotExtended));
        assert_eq!(with(0, 0xd1), Some(E::UnsupportedVersion));
        assert_eq!(with(0, 0xd3), Some(E::UnsupportedVersion));
        assert_eq!(with(1, 0x01), Some(E::UnknownOpcode));
        assert_eq!(with(2, 0x30), Some(E::BadPriority));
        assert_eq!(with(2, 0x11), Some(E::ReservedHeader));
        assert_eq!(with(3, 1), Some(E::ReservedHeader));
        assert_eq!(with(2, 0x50), Some(E::Retransmittable));
        assert_eq!(with(10, 0), Some(E::BadRows));
        assert_eq!(with(10, 9), Some(E::BadRows));
        assert_eq!(with(11, 3), Some(E::BadCellWidth));
        assert_eq!(with(12, 3), Some(E::BadMergeOp));
        assert_eq!(with(13, 1), Some(E::ReservedSubHeader));
        assert_eq!(with(15, 0), Some(E::ZeroColumns));
        assert_eq!(with(14, 0xff), Some(E::TooManyCells), "huge column count");
        let mut b = good.clone();
        b[24..28].copy_from_slice(&u32::MAX.to_be_bytes());
        assert_eq!(SketchReportRepr::parse(&b).err(), Some(E::ColumnOverflow));
        assert_eq!(with(15, 3), Some(E::CellsTruncated));
        assert_eq!(with(15, 1), Some(E::TrailingBytes));
        for n in 0..FIXED_LEN {
            assert_eq!(
                SketchReportRepr::parse(&good[..n]).err(),
                Some(E::Truncated),
                "{n}"
            );
        }
        assert_eq!(
            SketchReportRepr::parse(&good[..good.len() - 1]).err(),
            Some(E::CellsTruncated)
        );
        // Coarse kinds for counting.
        assert_eq!(Error::from(E::CellsTruncated), Error::Truncated);
        assert_eq!(Error::from(E::BadCellWidth), Error::Malformed);
        assert_eq!(Error::from(E::UnknownOpcode), Error::UnknownOpcode);
    }

    #[test]
    fn cells_encode_narrow_widths() {
        let mut out = [0u8; 4];
        encode_cells(CellWidth::new(1).unwrap(), &[1, 2, 3, 0x1ff], &mut out);
        assert_eq!(out, [1, 2, 3, 0xff]);
        let mut out = [0u8; 4];
        encode_cells(CellWidth::new(2).unwrap(), &[0x1234, 0xabcd], &mut out);
        assert_eq!(out, [0x12, 0x34, 0xab, 0xcd]);
    }

    proptest! {
        #[test]
        fn round_trip(
            sketch_id in any::<u16>(), rows in 1u8..=8, w in prop_oneof![Just(1u8), Just(2), Just(4)],
            op in 0u8..3, columns in 1u16..=32, switch in any::<u32>(), epoch in any::<u32>(),
            column in 0u32..1_000_000, seq in any::<u32>(), imm in any::<bool>(), seed in any::<u8>(),
        ) {
            let width = CellWidth::new(w).unwrap();
            let n = columns as usize * rows as usize * w as usize;
            prop_assume!(n <= MAX_CELL_BYTES);
            let cells: Vec<u8> = (0..n).map(|i| (i as u8).wrapping_mul(seed)).collect();
            let r = SketchReportRepr {
                immediate: imm, priority: Priority::High, seq, sketch_id, rows, width,
                op: MergeOp::from_code(op).unwrap(), columns, switch, epoch, column, cells: &cells,
            };
            let mut buf = [0u8; MAX_SKETCH_REPORT_LEN];
            let len = r.emit(&mut buf).unwrap();
            prop_assert_eq!(len, r.buffer_len());
            prop_assert_eq!(SketchReportRepr::parse(&buf[..len]), Ok(r));
        }

        #[test]
        fn arbitrary_bytes_never_panic(rest in proptest::collection::vec(any::<u8>(), 0..200)) {
            let mut b = vec![MAGIC_VERSION, opcode::SKETCH_MERGE];
            b.extend_from_slice(&rest);
            if let Ok(r) = SketchReportRepr::parse(&b) {
                let mut buf = [0u8; MAX_SKETCH_REPORT_LEN];
                let n = r.emit(&mut buf).unwrap();
                prop_assert_eq!(&buf[..n], &b[..]);
            }
            let _ = SketchReportRepr::parse(&rest);
        }
    }
}
