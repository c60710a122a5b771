//! The state a Sketch-Merge store keeps between reports: each switch's place in the current
//! and the held epoch ([`SwitchState`]) and one epoch's merged cells with their dirty batches
//! ([`MergeBuffer`]). Plain data sized at set-up; the merge rules live in the parent module.

use std::net::Ipv4Addr;

/// A switch's place in one epoch's merge.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Cursor {
    /// The next column expected from it.
    pub(super) next: u32,
    /// The column the last gap NACK named and when (NACKs for the same column are spaced
    /// a flush delay apart, so a burst behind one loss costs one NACK).
    pub(super) nacked: Option<(u32, u64)>,
}

/// What the translator knows about one switch.
#[derive(Debug, Clone, Copy)]
pub(super) struct SwitchState {
    pub(super) id: u32,
    pub(super) in_use: bool,
    /// Where its NACKs go: configured, or the source of its first merged report.
    pub(super) addr: Option<Ipv4Addr>,
    pub(super) configured: bool,
    /// Added to the epochs it reports (non-zero once it restarted).
    pub(super) offset: u32,
    /// The merge epoch it last merged into (or was first seen in).
    pub(super) last_active: u32,
    /// Expected in the current epoch.
    pub(super) member: bool,
    /// Its place in the current epoch.
    pub(super) cur: Cursor,
    /// Its place in the next (held) epoch.
    pub(super) held: Cursor,
    /// Counted in `votes` (a member that has sent the next epoch).
    pub(super) voted: bool,
    /// Counted in `pending` (a member part-way through the current epoch, not voted).
    pub(super) pending: bool,
    /// The far-ahead epoch it voted for.
    pub(super) far: Option<u32>,
}

impl SwitchState {
    pub(super) fn new(id: u32, addr: Option<Ipv4Addr>, epoch: u32) -> SwitchState {
        SwitchState {
            id,
            in_use: true,
            addr,
            configured: addr.is_some(),
            offset: 0,
            last_active: epoch,
            member: addr.is_some(),
            cur: Cursor::default(),
            held: Cursor::default(),
            voted: false,
            pending: false,
            far: None,
        }
    }
}

/// One epoch's merged cells (the current epoch's, or the held next one's).
///
/// Clearing is lazy. Every switch merges its columns in order from column 0, so the columns
/// an epoch has merged into are a prefix of the sketch: the buffer keeps that prefix, whole
/// batches of it ([`MergeBuffer::opened`]), and zeroes batches as a merge extends it
/// ([`MergeBuffer::open_to`]). [`MergeBuffer::clear`] then only empties the prefix, and
/// moving on to an epoch costs no pass over the whole sketch. Cells and counts past the
/// prefix are an older epoch's: they read as zero, and no batch there is dirty (written).
/// A merge that started past the prefix would only zero more than it needs to.
pub(super) struct MergeBuffer {
    /// Merged cells, column-major (`rows` per column).
    pub(super) cells: Vec<u32>,
    /// Switches merged into each column.
    pub(super) merged: Vec<u16>,
    /// Batches changed since they were last written.
    pub(super) dirty: Vec<bool>,
    pub(super) dirty_count: u32,
    /// Columns zeroed since the last clear (a multiple of the batch).
    opened: usize,
    /// Columns per batch.
    batch: usize,
    rows: usize,
}

impl MergeBuffer {
    pub(super) fn new(rows: usize, columns: usize, batch: usize) -> MergeBuffer {
        MergeBuffer {
            cells: vec![0; rows * columns],
            merged: vec![0; columns],
            dirty: vec![false; columns / batch],
            dirty_count: 0,
            opened: 0,
            batch,
            rows,
        }
    }

    pub(super) fn clear(&mut self) {
        self.opened = 0;
        self.dirty.fill(false);
        self.dirty_count = 0;
    }

    /// Columns merged into since the last clear, rounded up to whole batches: the rest
    /// reads as zero.
    #[inline]
    pub(super) fn opened(&self) -> usize {
        self.opened
    }

    /// Makes columns up to `end` ready to merge into: zeroes the batches past the opened
    /// prefix up to the one holding column `end - 1`.
    #[inline]
    pub(super) fn open_to(&mut self, end: usize) {
        if end > self.opened {
            let to = end.next_multiple_of(self.batch);
            self.merged[self.opened..to].fill(0);
            self.cells[self.opened * self.rows..to * self.rows].fill(0);
            self.opened = to;
        }
    }

    #[inline]
    pub(super) fn mark(&mut self, b: usize) {
        if !self.dirty[b] {
            self.dirty[b] = true;
            self.dirty_count += 1;
        }
    }

    #[inline]
    pub(super) fn clean(&mut self, b: usize) {
        if self.dirty[b] {
            self.dirty[b] = false;
            self.dirty_count -= 1;
        }
    }
}
