//! Sketch-Merge: switches' sketches merged column by column into one network-wide sketch,
//! written to the collector in batches of C contiguous columns.
//!
//! Per switch the translator remembers the next column it expects (a dense table indexed by a
//! slot the switch ID is mapped to once, so a report costs one hash lookup whatever the number
//! of switches). A report whose first column is that column (or overlaps it) is merged; one
//! that starts beyond it is not, and the switch is sent a sketch-column NACK naming the column
//! it must resend from; one entirely behind it is a duplicate. Merging is one straight loop over
//! 32-bit lanes (saturating sum, max, or wrapping signed sum:
//! `dta_proto::sketch::merge_wire_cells`).
//!
//! Each column counts the switches merged into it; when every column of a batch has the
//! configured number of switches, the batch is written at once (one RDMA WRITE of its column
//! records, `dta_proto::sketch::SketchLayout`; at most [`MAX_WRITES_PER_REPORT`] per report,
//! the rest by the poll that is then due at once). A flush timer, armed by the first merge into
//! a batch not yet written, writes whatever changed when it fires (stragglers' columns arrive
//! later and are written again); once the epoch has merged nothing for a flush delay, it NACKs
//! the switches expected in the epoch that have not sent their whole sketch (a lost last column
//! reveals no gap), at most [`STRAGGLER_ROUNDS`] rounds per epoch.
//!
//! # No single datagram in charge (issue 28)
//! * **Members.** A switch is *expected* in the current epoch (a member) if it is configured
//!   (`[[sketch.switch]]`), or merged columns in this epoch or the one before. Only members
//!   vote, only members are NACKed as stragglers.
//! * **Epoch advance by agreement.** A report of the next epoch (`cur + 1`) is merged into a
//!   second, pre-sized buffer (*held*: nothing is written for it yet) and is its switch's vote.
//!   The merge moves on to `cur + 1` when the votes reach the quorum (`sketch.epoch_quorum`,
//!   default a majority of `expected_switches`, capped at the member count) and no member is
//!   still part-way through the current epoch (has merged some but not all of it, or nothing,
//!   without voting); or, once the epoch has been quiet for a flush delay, when the votes reach
//!   the quorum and the straggler rounds are spent. A fleet whose clocks are skewed thus loses
//!   nothing at a boundary: early reports of the next epoch wait in the held buffer, and the
//!   slow switches finish the current one first. Moving on writes what the old epoch changed
//!   and makes the held buffer the current one.
//! * **Bounded step.** A report more than one epoch ahead is dropped and counted
//!   (`drop_sketch_epoch_ahead`); it is its switch's vote for that epoch (a small pre-sized
//!   tally), and the merge jumps there only when a quorum of members name the same epoch
//!   (`sketch_epoch_jumps`): a translator that fell behind its whole fleet catches up, a single
//!   spoofed datagram moves nothing.
//! * **Late and restarted switches.** A report up to `sketch.late_epochs` behind is late
//!   (dropped). Further behind, its column 0 is taken as the switch's restart (a reboot resets
//!   its epoch counter): the switch is re-based, its epochs mapped onto the merge's from then
//!   on (onto the current epoch if it merged nothing in it yet, else onto the next), counted
//!   `sketch_switch_restarts`; NACKs to it name its own epochs. A re-based switch whose report
//!   then lands far ahead at column 0 (its re-basing was a replay) is re-based back.
//! * **Forgetting.** A learned switch silent for `sketch.idle_epochs` epochs leaves the table
//!   when the merge moves on (`sketch_switches_forgotten`); its slot is reused. An unknown
//!   switch enters the table only with a report that merges (late, far-ahead and gap reports
//!   of unknown IDs take no slot); one whose epochs are far behind the merge's is re-based as
//!   a restarted switch is.
//! * **NACK addressing.** A NACK goes to the switch's configured address, or to the source of
//!   its first merged report; never to the source of the datagram that provoked it. A switch
//!   with neither (a gap report from an ID never merged) is not NACKed
//!   (`sketch_nacks_withheld`).
//!
//! Nothing here allocates, locks or makes a system call per report: the switch table, both
//! merge buffers and the batch scratch are sized when the store is set up. Moving on to a new
//! epoch walks the switch table once (per epoch, not per report).

use std::net::Ipv4Addr;
use std::sync::Arc;

use dta_proto::batch::TxBatch;
use dta_proto::sketch::{merge_wire_cells, CellWidth, MergeOp, SketchLayout};
use dta_proto::wire::nack::NackRepr;
use dta_proto::wire::report::Report;
use dta_proto::wire::sketch::{SketchReportRepr, MAX_CELL_BYTES};

use super::{PrimitiveConfig, Refusal, StorePrimitive};
use crate::datapath::demux::{fast_map, FastMap};
use crate::datapath::sender::QpSender;
use crate::datapath::stats::TranslatorCounters;
use crate::datapath::udp_frame::NackOut;

/// Straggler NACK rounds per epoch (each one flush delay apart).
pub const STRAGGLER_ROUNDS: u32 = 16;

/// Batch WRITEs one report sends at most; batches it completes beyond these are written by
/// the next poll, which is due at once. A report of 1,024 one-byte HyperLogLog registers with
/// batch 1 completes up to 1,024 batches: reserving room for all of them per report made the
/// pipeline ask every QP for more frames than its ring holds, so every report of every store
/// was refused as queue-full.
pub const MAX_WRITES_PER_REPORT: u32 = 32;

/// Distinct far-ahead epochs tallied at once (votes for a jump).
const FAR_TALLY: usize = 4;

/// A switch with a fixed NACK address (`[[sketch.switch]]`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SketchSwitch {
    /// The switch ID its reports carry.
    pub id: u32,
    /// Where its NACKs go.
    pub addr: Ipv4Addr,
}

/// Settings of Sketch-Merge stores (`[sketch]` in the translator's configuration).
#[derive(Debug, Clone)]
pub struct SketchSettings {
    /// Switches whose columns make a column complete.
    pub expected_switches: u16,
    /// Switches tracked at most (the table is sized for them up front).
    pub max_switches: u32,
    /// The flush timer (ns): changed batches are written, and stragglers NACKed, this long
    /// after a merge into a batch not yet written.
    pub flush_ns: u64,
    /// Members that must have moved on to the next epoch before the merge does (0: a
    /// majority of `expected_switches`).
    pub epoch_quorum: u16,
    /// Epochs a learned switch may stay silent before it leaves the table.
    pub idle_epochs: u32,
    /// Epochs behind the merge a report is late; further behind, its column 0 restarts the
    /// switch.
    pub late_epochs: u32,
    /// Switches with a fixed NACK address, always expected.
    pub switches: Arc<[SketchSwitch]>,
}

impl Default for SketchSettings {
    fn default() -> Self {
        SketchSettings {
            expected_switches: 1,
            max_switches: 4096,
            flush_ns: 10_000_000,
            epoch_quorum: 0,
            idle_epochs: 4,
            late_epochs: 2,
            switches: Arc::from([]),
        }
    }
}

impl SketchSettings {
    /// The quorum in force: `epoch_quorum`, or a majority of `expected_switches`.
    pub fn quorum(&self) -> u16 {
        if self.epoch_quorum == 0 {
            self.expected_switches / 2 + 1
        } else {
            self.epoch_quorum
        }
    }
}

/// A switch's place in one epoch's merge.
#[derive(Debug, Clone, Copy, Default)]
struct Cursor {
    /// The next column expected from it.
    next: u32,
    /// The column the last gap NACK named and when (NACKs for the same column are spaced
    /// a flush delay apart, so a burst behind one loss costs one NACK).
    nacked: Option<(u32, u64)>,
}

/// What the translator knows about one switch.
#[derive(Debug, Clone, Copy)]
struct SwitchState {
    id: u32,
    in_use: bool,
    /// Where its NACKs go: configured, or the source of its first merged report.
    addr: Option<Ipv4Addr>,
    configured: bool,
    /// Added to the epochs it reports (non-zero once it restarted).
    offset: u32,
    /// The merge epoch it last merged into (or was first seen in).
    last_active: u32,
    /// Expected in the current epoch.
    member: bool,
    /// Its place in the current epoch.
    cur: Cursor,
    /// Its place in the next (held) epoch.
    held: Cursor,
    /// Counted in `votes` (a member that has sent the next epoch).
    voted: bool,
    /// Counted in `pending` (a member part-way through the current epoch, not voted).
    pending: bool,
    /// The far-ahead epoch it voted for.
    far: Option<u32>,
}

impl SwitchState {
    fn new(id: u32, addr: Option<Ipv4Addr>, epoch: u32) -> SwitchState {
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
struct MergeBuffer {
    /// Merged cells, column-major (`rows` per column).
    cells: Vec<u32>,
    /// Switches merged into each column.
    merged: Vec<u16>,
    /// Batches changed since they were last written.
    dirty: Vec<bool>,
    dirty_count: u32,
}

impl MergeBuffer {
    fn new(cells: usize, columns: usize, batches: usize) -> MergeBuffer {
        MergeBuffer {
            cells: vec![0; cells],
            merged: vec![0; columns],
            dirty: vec![false; batches],
            dirty_count: 0,
        }
    }

    fn clear(&mut self) {
        self.cells.fill(0);
        self.merged.fill(0);
        self.dirty.fill(false);
        self.dirty_count = 0;
    }

    #[inline]
    fn mark(&mut self, b: usize) {
        if !self.dirty[b] {
            self.dirty[b] = true;
            self.dirty_count += 1;
        }
    }

    #[inline]
    fn clean(&mut self, b: usize) {
        if self.dirty[b] {
            self.dirty[b] = false;
            self.dirty_count -= 1;
        }
    }
}

/// Which buffer a report merges into.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Target {
    Current,
    Held,
}

/// A Sketch store's merge state.
pub struct SketchMerge {
    layout: SketchLayout,
    sketch_id: u16,
    rows: usize,
    width: CellWidth,
    op: MergeOp,
    batch: u32,
    columns: u32,
    settings: SketchSettings,
    quorum: u16,
    nack: NackOut,
    slot_of: FastMap<u32, u32>,
    switches: Vec<SwitchState>,
    /// Slots of forgotten switches, reused first.
    free: Vec<u32>,
    /// The epoch being merged.
    epoch: Option<u32>,
    /// The current epoch's merge (boxed, as `held`: moving on swaps two pointers).
    cur: Box<MergeBuffer>,
    /// The next epoch's merge, held until the switches agree to move on.
    held: Box<MergeBuffer>,
    /// Columns of each current batch that reached the expected switch count.
    complete: Vec<u32>,
    /// Members that have voted for the next epoch.
    votes: u32,
    /// Members part-way through the current epoch that have not voted.
    pending: u32,
    /// Members of the current epoch.
    members: u32,
    /// Far-ahead epochs and their members' votes.
    far: [(u32, u32); FAR_TALLY],
    deadline: Option<u64>,
    /// When the current epoch last merged a column (stragglers are NACKed, and a quorum
    /// without every member moves on, only once the epoch has been quiet for a flush delay).
    last_merge: u64,
    straggler_rounds: u32,
    /// One batch's column records.
    scratch: Vec<u8>,
}

impl SketchMerge {
    /// Merge state for `layout`, serving sketch `sketch_id`.
    pub fn new(
        layout: SketchLayout,
        sketch_id: u16,
        cfg: &PrimitiveConfig,
    ) -> Result<SketchMerge, String> {
        let s = cfg.sketch.clone();
        if s.expected_switches == 0 {
            return Err("sketch.expected_switches must be at least 1".into());
        }
        if s.max_switches < s.expected_switches as u32 {
            return Err(format!(
                "sketch.max_switches ({}) is below sketch.expected_switches ({})",
                s.max_switches, s.expected_switches
            ));
        }
        if s.epoch_quorum > s.expected_switches {
            return Err(format!(
                "sketch.epoch_quorum ({}) is above sketch.expected_switches ({})",
                s.epoch_quorum, s.expected_switches
            ));
        }
        if s.switches.len() > s.max_switches as usize {
            return Err(format!(
                "{} [[sketch.switch]] entries, above sketch.max_switches ({})",
                s.switches.len(),
                s.max_switches
            ));
        }
        let shape = layout.shape();
        let columns = shape.columns;
        let batches = layout.batches() as usize;
        let mut m = SketchMerge {
            layout,
            sketch_id,
            rows: shape.rows as usize,
            width: shape.width,
            op: shape.kind.merge_op(),
            batch: layout.batch(),
            columns,
            quorum: s.quorum(),
            nack: cfg.nack,
            slot_of: fast_map(s.max_switches as usize),
            switches: Vec::with_capacity(s.max_switches as usize),
            free: Vec::with_capacity(s.max_switches as usize),
            epoch: None,
            cur: Box::new(MergeBuffer::new(shape.cells(), columns as usize, batches)),
            held: Box::new(MergeBuffer::new(shape.cells(), columns as usize, batches)),
            complete: vec![0; batches],
            votes: 0,
            pending: 0,
            members: 0,
            far: [(0, 0); FAR_TALLY],
            deadline: None,
            last_merge: 0,
            straggler_rounds: 0,
            scratch: vec![0; layout.batch_len()],
            settings: s,
        };
        for sw in m.settings.switches.iter() {
            if m.slot_of.contains_key(&sw.id) {
                return Err(format!("[[sketch.switch]] id {} is listed twice", sw.id));
            }
            m.slot_of.insert(sw.id, m.switches.len() as u32);
            m.switches.push(SwitchState::new(sw.id, Some(sw.addr), 0));
        }
        Ok(m)
    }

    /// Bytes of one batch's WRITE.
    pub fn payload_len(&self) -> usize {
        self.layout.batch_len()
    }

    /// The sketch ID this store serves.
    pub fn sketch_id(&self) -> u16 {
        self.sketch_id
    }

    /// The epoch being merged, if any.
    pub fn epoch(&self) -> Option<u32> {
        self.epoch
    }

    /// The most batch WRITEs one report can trigger: the batches its columns touch (at most
    /// every batch of the sketch, which matters for narrow cells: a report may announce 1,024
    /// one-byte columns, but a HyperLogLog of 16 registers has only 16 batches of 1).
    pub fn frames_per_report(&self) -> usize {
        let col_bytes = self.rows * self.width.bytes();
        let columns = (MAX_CELL_BYTES / col_bytes).min(self.columns as usize);
        (columns.div_ceil(self.batch as usize) + 1)
            .min(self.layout.batches() as usize)
            .min(MAX_WRITES_PER_REPORT as usize)
    }

    /// The quorum in force now: the configured one, capped at the members (at least 1).
    #[inline]
    fn quorum_now(&self) -> u32 {
        (self.quorum as u32).min(self.members).max(1)
    }

    /// Merges one report from the switch at `src` (see the module docs for what is merged,
    /// held, NACKed and dropped). Every report is counted once: `translated` or one
    /// `drop_sketch_*`.
    #[inline]
    pub fn accept_sketch(
        &mut self,
        now: u64,
        r: &SketchReportRepr<'_>,
        src: Ipv4Addr,
        out: &mut QpSender,
        tx: &mut TxBatch,
        c: &mut TranslatorCounters,
    ) {
        if r.rows as usize != self.rows || r.width != self.width || r.op != self.op {
            c.drop_sketch_geometry += 1;
            return;
        }
        // Parsing guarantees `column + columns` does not overflow.
        let end = r.column + r.columns as u32;
        if end > self.columns {
            c.drop_sketch_column_range += 1;
            return;
        }
        let mut cur = match self.epoch {
            Some(cur) => cur,
            None => {
                self.start_epoch(r.epoch, now);
                c.sketch_epochs += 1;
                r.epoch
            }
        };
        // A switch not in the table enters it only with a report that merges (its column 0):
        // late, far-ahead and gap reports of unknown IDs take no slot.
        let known = self.slot_of.get(&r.switch).map(|&s| s as usize);
        let (offset, started) = known.map_or((0, false), |s| {
            (self.switches[s].offset, self.switches[s].cur.next > 0)
        });
        // Where the report's epoch falls, in the merge's numbering.
        let mut ahead = r.epoch.wrapping_add(offset).wrapping_sub(cur) as i32;
        let mut rebase = None;
        if r.column == 0
            && ((ahead < 0 && ahead.unsigned_abs() > self.settings.late_epochs)
                || (ahead > 1 && offset != 0))
        {
            // A restart: onto the current epoch, or the next if it merged in this one.
            let onto = if started { cur.wrapping_add(1) } else { cur };
            rebase = Some(onto.wrapping_sub(r.epoch));
            ahead = onto.wrapping_sub(cur) as i32;
        }
        let target = match ahead {
            0 => Target::Current,
            1 => Target::Held,
            a if a < 0 => {
                c.drop_sketch_late += 1;
                return;
            }
            _ => {
                // A vote for a jump (members only); the report that completes the quorum is
                // the new epoch's first.
                let f = r.epoch.wrapping_add(offset);
                if let Some(slot) = known {
                    self.vote_far(slot, f, now, out, tx, c);
                }
                if self.epoch != Some(f) {
                    c.drop_sketch_epoch_ahead += 1;
                    return;
                }
                cur = f;
                Target::Current
            }
        };
        let slot = match known {
            Some(s) => s,
            None if r.column > 0 => {
                // A gap from an ID never merged: nowhere to send a NACK.
                c.drop_sketch_gap += 1;
                c.sketch_nacks_withheld += 1;
                return;
            }
            None => {
                let s = match self.free.pop() {
                    Some(s) => s as usize,
                    None if self.switches.len() < self.settings.max_switches as usize => {
                        self.switches.push(SwitchState::new(r.switch, None, cur));
                        self.switches.len() - 1
                    }
                    None => {
                        c.drop_sketch_switches_full += 1;
                        return;
                    }
                };
                self.switches[s] = SwitchState::new(r.switch, None, cur);
                self.slot_of.insert(r.switch, s as u32);
                s
            }
        };
        if let Some(o) = rebase {
            self.switches[slot].offset = o;
            c.sketch_switch_restarts += 1;
        }
        let sw = &mut self.switches[slot];
        let cursor = match target {
            Target::Current => &mut sw.cur,
            Target::Held => &mut sw.held,
        };
        if r.column > cursor.next {
            c.drop_sketch_gap += 1;
            let due = match cursor.nacked {
                Some((col, at)) => col != cursor.next || now >= at + self.settings.flush_ns,
                None => true,
            };
            if due {
                let Some(to) = sw.addr else {
                    c.sketch_nacks_withheld += 1;
                    return;
                };
                cursor.nacked = Some((cursor.next, now));
                let nack = NackRepr::SketchColumn {
                    sketch_id: self.sketch_id,
                    switch: r.switch,
                    epoch: r.epoch,
                    expected_column: cursor.next,
                };
                count_nack(self.nack.push(tx, to, &nack), c);
                c.sketch_gap_nacks += 1;
            }
            return;
        }
        if end <= cursor.next {
            c.drop_sketch_duplicate += 1;
            return;
        }
        let first = cursor.next;
        let skip = (first - r.column) as usize;
        cursor.next = end;
        if sw.addr.is_none() {
            sw.addr = Some(src);
        }
        c.sketch_columns_duplicate += skip as u64;
        c.sketch_columns_merged += (end - first) as u64;
        c.translated += 1;
        let rows = self.rows;
        let col_bytes = rows * self.width.bytes();
        let cells = &r.cells[skip * col_bytes..];
        match target {
            Target::Held => {
                sw.last_active = cur.wrapping_add(1);
                let vote = sw.member && !sw.voted;
                if vote {
                    sw.voted = true;
                    self.votes += 1;
                    if sw.pending {
                        sw.pending = false;
                        self.pending -= 1;
                    }
                }
                c.sketch_columns_held += (end - first) as u64;
                let h = &mut self.held;
                merge_wire_cells(
                    self.op,
                    self.width,
                    &mut h.cells[first as usize * rows..end as usize * rows],
                    cells,
                );
                for col in first..end {
                    let m = &mut h.merged[col as usize];
                    *m = m.saturating_add(1);
                }
                for b in first / self.batch..=(end - 1) / self.batch {
                    h.mark(b as usize);
                }
                if self.votes > 0 && self.votes >= self.quorum_now() && self.pending == 0 {
                    self.advance(now, out, tx, c);
                } else if self.deadline.is_none() {
                    self.deadline = Some((self.last_merge + self.settings.flush_ns).max(now));
                }
            }
            Target::Current => {
                sw.last_active = cur;
                if !sw.member {
                    sw.member = true;
                    self.members += 1;
                }
                let done = end >= self.columns;
                if !sw.voted && !done && !sw.pending {
                    sw.pending = true;
                    self.pending += 1;
                } else if sw.pending && done {
                    sw.pending = false;
                    self.pending -= 1;
                }
                self.last_merge = now;
                merge_wire_cells(
                    self.op,
                    self.width,
                    &mut self.cur.cells[first as usize * rows..end as usize * rows],
                    cells,
                );
                let expected = self.settings.expected_switches;
                for col in first..end {
                    let m = &mut self.cur.merged[col as usize];
                    *m = m.saturating_add(1);
                    if *m == expected {
                        self.complete[(col / self.batch) as usize] += 1;
                    }
                }
                let mut writes = 0;
                let mut refused = false;
                for b in first / self.batch..=(end - 1) / self.batch {
                    self.cur.mark(b as usize);
                    if self.complete[b as usize] == self.batch {
                        // Beyond MAX_WRITES_PER_REPORT a complete batch stays dirty for the
                        // poll made due below.
                        if writes < MAX_WRITES_PER_REPORT {
                            refused |= !self.write_batch(b, now, out, tx, c);
                        }
                        writes += 1;
                        c.sketch_batches_complete += 1;
                    }
                }
                // A batch the QP refused (an epoch roll-over's writes took the room) stays
                // dirty, for the poll made due at once.
                if writes > MAX_WRITES_PER_REPORT || refused {
                    self.deadline = Some(now);
                }
                if self.cur.dirty_count > 0 && self.deadline.is_none() {
                    self.deadline = Some(now + self.settings.flush_ns);
                }
                if self.votes > 0 && self.votes >= self.quorum_now() && self.pending == 0 {
                    self.advance(now, out, tx, c);
                }
            }
        }
    }

    /// Counts member `slot`'s vote for the far-ahead epoch `f`; jumps there once a quorum of
    /// members agree (then `f` is the epoch being merged).
    fn vote_far(
        &mut self,
        slot: usize,
        f: u32,
        now: u64,
        out: &mut QpSender,
        tx: &mut TxBatch,
        c: &mut TranslatorCounters,
    ) {
        let sw = &mut self.switches[slot];
        if !sw.member || sw.far == Some(f) {
            return;
        }
        if let Some(old) = sw.far.take() {
            if let Some(t) = self.far.iter_mut().find(|t| t.1 > 0 && t.0 == old) {
                t.1 -= 1;
            }
        }
        let i = match self.far.iter().position(|t| t.1 > 0 && t.0 == f) {
            Some(i) => i,
            None => match self.far.iter().position(|t| t.1 == 0) {
                Some(i) => {
                    self.far[i] = (f, 0);
                    i
                }
                None => return, // every tally entry holds votes: this one is not counted
            },
        };
        sw.far = Some(f);
        self.far[i].1 += 1;
        if self.far[i].1 >= self.quorum_now() {
            self.jump(f, now, out, tx, c);
        }
    }

    /// Starts a fresh merge of `epoch` (first report, or a jump): every cursor from 0; the
    /// configured switches and those that voted for `epoch` are its members.
    fn start_epoch(&mut self, epoch: u32, now: u64) {
        self.epoch = Some(epoch);
        self.cur.clear();
        self.held.clear();
        self.complete.fill(0);
        self.deadline = None;
        self.straggler_rounds = 0;
        self.last_merge = now;
        let (mut members, mut pending) = (0, 0);
        for sw in self.switches.iter_mut().filter(|s| s.in_use) {
            sw.member = sw.configured || sw.far == Some(epoch);
            if sw.member {
                sw.last_active = epoch;
            }
            sw.cur = Cursor::default();
            sw.held = Cursor::default();
            sw.voted = false;
            sw.far = None;
            sw.pending = sw.member;
            members += sw.member as u32;
            pending += sw.pending as u32;
        }
        self.members = members;
        self.pending = pending;
        self.votes = 0;
        self.far = [(0, 0); FAR_TALLY];
    }

    /// Moves the merge on to the next epoch (the switches agreed): writes what the current
    /// epoch changed, makes the held buffer current, writes its complete batches, forgets idle
    /// switches and settles the members. If the QP cannot take the old epoch's changes, the
    /// move waits for the poll that is then due at once.
    fn advance(
        &mut self,
        now: u64,
        out: &mut QpSender,
        tx: &mut TxBatch,
        c: &mut TranslatorCounters,
    ) -> bool {
        let Some(old) = self.epoch else {
            return false;
        };
        if !self.write_changed(now, out, tx, c) {
            self.deadline = Some(now);
            return false;
        }
        let new = old.wrapping_add(1);
        std::mem::swap(&mut self.cur, &mut self.held);
        self.held.clear();
        self.epoch = Some(new);
        c.sketch_epochs += 1;
        self.straggler_rounds = 0;
        self.last_merge = now;
        self.deadline = None;
        let (columns, idle) = (self.columns, self.settings.idle_epochs);
        let (mut members, mut pending) = (0, 0);
        for (i, sw) in self.switches.iter_mut().enumerate() {
            if !sw.in_use {
                continue;
            }
            if !sw.configured && new.wrapping_sub(sw.last_active) > idle {
                sw.in_use = false;
                self.slot_of.remove(&sw.id);
                self.free.push(i as u32);
                c.sketch_switches_forgotten += 1;
                continue;
            }
            sw.cur = sw.held;
            sw.held = Cursor::default();
            sw.voted = false;
            sw.far = None;
            sw.member = sw.configured || new.wrapping_sub(sw.last_active) <= 1;
            sw.pending = sw.member && sw.cur.next < columns;
            members += sw.member as u32;
            pending += sw.pending as u32;
        }
        self.members = members;
        self.pending = pending;
        self.votes = 0;
        self.far = [(0, 0); FAR_TALLY];
        // The held columns' counts become the current epoch's; complete batches go out now.
        let expected = self.settings.expected_switches;
        for (b, n) in self.complete.iter_mut().enumerate() {
            let cols = &self.cur.merged[b * self.batch as usize..(b + 1) * self.batch as usize];
            *n = cols.iter().filter(|&&m| m >= expected).count() as u32;
        }
        for b in 0..self.complete.len() as u32 {
            if self.complete[b as usize] == self.batch && self.cur.dirty[b as usize] {
                if !out.can_take(now, 1, tx) || !self.write_batch(b, now, out, tx, c) {
                    self.deadline = Some(now);
                    break;
                }
                c.sketch_batches_complete += 1;
            }
        }
        if self.cur.dirty_count > 0 && self.deadline.is_none() {
            self.deadline = Some(now + self.settings.flush_ns);
        }
        true
    }

    /// Jumps to the far epoch `f` (a quorum of members named it): writes the current epoch's
    /// changes and the held epoch's, then starts `f` fresh. Waits for the next vote if the QP
    /// cannot take them.
    fn jump(
        &mut self,
        f: u32,
        now: u64,
        out: &mut QpSender,
        tx: &mut TxBatch,
        c: &mut TranslatorCounters,
    ) {
        if !self.write_changed(now, out, tx, c) || !self.write_held(now, out, tx, c) {
            return;
        }
        self.start_epoch(f, now);
        c.sketch_epochs += 1;
        c.sketch_epoch_jumps += 1;
    }

    /// Writes batch `b` of the current epoch. False if the QP refused the WRITE (counted in
    /// frames): the batch stays dirty, to be written again.
    fn write_batch(
        &mut self,
        b: u32,
        now: u64,
        out: &mut QpSender,
        tx: &mut TxBatch,
        c: &mut TranslatorCounters,
    ) -> bool {
        let Some(epoch) = self.epoch else {
            return true;
        };
        self.encode_batch(Target::Current, epoch, b);
        let offset = self.layout.batch_offset(epoch, b);
        if out.write(now, tx, offset, &self.scratch, c).is_err() {
            return false;
        }
        self.cur.clean(b as usize);
        true
    }

    /// Fills the scratch with batch `b`'s column records of `which` buffer, as `epoch`'s.
    fn encode_batch(&mut self, which: Target, epoch: u32, b: u32) {
        let buf = match which {
            Target::Current => &self.cur,
            Target::Held => &self.held,
        };
        let stride = self.layout.column_stride() as usize;
        let expected = self.settings.expected_switches;
        for i in 0..self.batch {
            let col = (b * self.batch + i) as usize;
            self.layout.encode_record(
                epoch,
                buf.merged[col],
                expected,
                &buf.cells[col * self.rows..(col + 1) * self.rows],
                &mut self.scratch[i as usize * stride..(i as usize + 1) * stride],
            );
        }
    }

    /// Writes every batch changed since its last write, as far as the QP takes them. True if
    /// none is left.
    fn write_changed(
        &mut self,
        now: u64,
        out: &mut QpSender,
        tx: &mut TxBatch,
        c: &mut TranslatorCounters,
    ) -> bool {
        if self.cur.dirty_count == 0 {
            return true;
        }
        for b in 0..self.cur.dirty.len() as u32 {
            if !self.cur.dirty[b as usize] {
                continue;
            }
            if !out.can_take(now, 1, tx) || !self.write_batch(b, now, out, tx, c) {
                return false;
            }
            c.sketch_batches_partial += 1;
        }
        true
    }

    /// Writes the held epoch's changed batches into its own slot (shutdown, or a jump past
    /// it); nothing with one epoch slot, where it would overwrite the current epoch. True if
    /// none is left.
    fn write_held(
        &mut self,
        now: u64,
        out: &mut QpSender,
        tx: &mut TxBatch,
        c: &mut TranslatorCounters,
    ) -> bool {
        let Some(cur) = self.epoch else {
            return true;
        };
        if self.held.dirty_count == 0 || self.layout.epochs() < 2 {
            return true;
        }
        let epoch = cur.wrapping_add(1);
        for b in 0..self.held.dirty.len() as u32 {
            if !self.held.dirty[b as usize] {
                continue;
            }
            if !out.can_take(now, 1, tx) {
                return false;
            }
            self.encode_batch(Target::Held, epoch, b);
            let offset = self.layout.batch_offset(epoch, b);
            if out.write(now, tx, offset, &self.scratch, c).is_err() {
                return false;
            }
            self.held.clean(b as usize);
            c.sketch_batches_partial += 1;
        }
        true
    }

    /// NACKs every member with an address that has not sent the whole current epoch. True if
    /// any was.
    fn nack_stragglers(&mut self, tx: &mut TxBatch, c: &mut TranslatorCounters) -> bool {
        let Some(cur) = self.epoch else {
            return false;
        };
        let mut any = false;
        for sw in &self.switches {
            if !sw.in_use || !sw.member || sw.cur.next >= self.columns {
                continue;
            }
            let Some(to) = sw.addr else {
                continue;
            };
            any = true;
            let nack = NackRepr::SketchColumn {
                sketch_id: self.sketch_id,
                switch: sw.id,
                epoch: cur.wrapping_sub(sw.offset),
                expected_column: sw.cur.next,
            };
            count_nack(self.nack.push(tx, to, &nack), c);
            c.sketch_straggler_nacks += 1;
        }
        any
    }
}

#[inline]
fn count_nack(sent: bool, c: &mut TranslatorCounters) {
    if sent {
        c.nacks_sent += 1;
    } else {
        c.nacks_unsent += 1;
    }
}

impl StorePrimitive for SketchMerge {
    /// Sketch reports do not travel as [`Report`]s (they carry whole columns): the pipeline
    /// hands them to [`SketchMerge::accept_sketch`]. Any `Report` is for another store.
    fn admit(&self, _: &Report, _: u8) -> Result<u64, Refusal> {
        Err(Refusal::WrongStore)
    }

    fn accept(
        &mut self,
        _: u64,
        _: &Report,
        _: u32,
        _: &mut QpSender,
        _: &mut TxBatch,
        _: &mut TranslatorCounters,
    ) {
    }

    fn poll(&mut self, now: u64, out: &mut QpSender, tx: &mut TxBatch, c: &mut TranslatorCounters) {
        let Some(d) = self.deadline else {
            return;
        };
        if now < d {
            return;
        }
        let flush = self.settings.flush_ns;
        let written = self.write_changed(now, out, tx, c);
        let quiet_at = self.last_merge + flush;
        let agreed = self.votes > 0 && self.votes >= self.quorum_now();
        self.deadline = if agreed && self.pending == 0 {
            // A move that had to wait for room in the QP.
            self.advance(now, out, tx, c);
            self.deadline
                .or((self.held.dirty_count > 0).then_some(now + flush))
        } else if now < quiet_at {
            // Switches are still sending: look for stragglers once they have been quiet.
            Some(if written { quiet_at } else { now + flush })
        } else if agreed && self.straggler_rounds >= STRAGGLER_ROUNDS {
            // The quorum moved on; the members still owing columns did not answer.
            self.advance(now, out, tx, c);
            self.deadline.or(Some(now + flush))
        } else {
            let mut again = !written || agreed;
            if self.straggler_rounds < STRAGGLER_ROUNDS {
                self.straggler_rounds += 1;
                again |= self.nack_stragglers(tx, c);
            }
            again.then_some(now + flush)
        };
    }

    fn next_deadline(&self) -> Option<u64> {
        self.deadline
    }

    /// Merged reports are counted `translated` when merged; nothing is held as a report.
    fn pending(&self) -> u64 {
        0
    }

    /// Writes what the current epoch changed, then what the held next epoch has (into its own
    /// slot: at shutdown the switches' early columns are not lost).
    fn flush(
        &mut self,
        now: u64,
        out: &mut QpSender,
        tx: &mut TxBatch,
        c: &mut TranslatorCounters,
    ) -> bool {
        self.write_changed(now, out, tx, c) && self.write_held(now, out, tx, c)
    }
}

#[cfg(test)]
mod tests {
    use std::net::SocketAddrV4;

    use dta_proto::batch::Datagram;
    use dta_proto::meta::StoreKind;
    use dta_proto::sketch::{Sketch, SketchKind, SketchShape};
    use dta_proto::wire::report::Priority;
    use dta_proto::wire::roce::RocePacket;
    use dta_proto::wire::sketch::{encode_cells, MAX_SKETCH_REPORT_LEN};
    use dta_proto::Key;

    use super::*;
    use crate::datapath::pipeline::{single_store_pipeline_with, Pipeline};

    const BASE: u64 = 0x7f00_0000_0000;
    const MS: u64 = 1_000_000;

    fn kind() -> StoreKind {
        StoreKind::Sketch {
            sketch_id: 7,
            sketch: SketchKind::CountMin,
            rows: 4,
            columns: 64,
            cell_width: 4,
            batch: 8,
            epochs: 2,
            hash: Default::default(),
        }
    }

    fn shape() -> SketchShape {
        SketchShape::new(SketchKind::CountMin, 4, 64, 4).unwrap()
    }

    fn pipeline(expected: u16, max_switches: u32) -> Pipeline {
        single_store_pipeline_with(kind(), |c| {
            c.l2_frames = false;
            c.sketch = SketchSettings {
                expected_switches: expected,
                max_switches,
                flush_ns: MS,
                ..SketchSettings::default()
            };
        })
    }

    /// A report of `n` columns of `s` from column `col`.
    fn report(s: &Sketch, switch: u32, epoch: u32, col: u32, n: u16) -> Vec<u8> {
        let rows = s.shape().rows as usize;
        let cells = &s.cells()[col as usize * rows..(col as usize + n as usize) * rows];
        let mut wire = vec![0u8; cells.len() * 4];
        encode_cells(s.shape().width, cells, &mut wire);
        let r = SketchReportRepr {
            immediate: false,
            priority: Priority::Medium,
            seq: 0,
            sketch_id: 7,
            rows: rows as u8,
            width: s.shape().width,
            op: MergeOp::Sum,
            columns: n,
            switch,
            epoch,
            column: col,
            cells: &wire,
        };
        let mut b = vec![0u8; MAX_SKETCH_REPORT_LEN];
        let len = r.emit(&mut b).unwrap();
        b.truncate(len);
        b
    }

    /// Feeds datagrams at `now`; applies the WRITEs to `mem` and returns the NACKs.
    fn feed(p: &mut Pipeline, now: u64, bufs: &[Vec<u8>], mem: &mut [u8]) -> Vec<NackRepr> {
        let src = SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 9), 5000);
        let dst = SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 101), 40040);
        let burst: Vec<Datagram<'_>> = bufs
            .iter()
            .map(|b| Datagram {
                src,
                dst,
                ip: None,
                payload: b,
            })
            .collect();
        let mut tx = TxBatch::new(1024, 2048);
        p.handle_reports(now, &burst, &mut tx);
        p.poll(now, &mut tx);
        drain(&tx, mem)
    }

    fn drain(tx: &TxBatch, mem: &mut [u8]) -> Vec<NackRepr> {
        let mut nacks = Vec::new();
        for (dest, payload) in tx.iter_payloads() {
            if dest.port() == dta_proto::consts::DTA_NACK_PORT {
                nacks.push(NackRepr::parse(payload).unwrap());
                continue;
            }
            let pkt = RocePacket::parse(payload).unwrap();
            if let Some(reth) = pkt.reth {
                let at = (reth.va - BASE) as usize;
                mem[at..at + pkt.payload.len()].copy_from_slice(pkt.payload);
            }
        }
        nacks
    }

    fn switch_sketch(i: u32) -> Sketch {
        let mut s = Sketch::new(shape());
        for k in 0..200u32 {
            let key = Key::new(&(k * 7 + i).to_be_bytes()).unwrap();
            s.update(&key, 1 + (k + i) % 3);
        }
        s
    }

    /// Reads `epoch` back from `mem`: cells (0 for records of other epochs) and merge counts.
    fn read_back(mem: &[u8], epoch: u32) -> (Vec<u32>, Vec<u16>) {
        let l = SketchLayout::new(shape(), 8, 2).unwrap();
        let mut cells = vec![0u32; shape().cells()];
        let mut merged = vec![0u16; 64];
        for c in 0..64u32 {
            let at = l.column_offset(epoch, c) as usize;
            let rec = &mem[at..at + l.column_stride() as usize];
            let mut col = [0u32; 4];
            let (e, m, _) = l.decode_record(rec, &mut col);
            if e == epoch {
                cells[c as usize * 4..c as usize * 4 + 4].copy_from_slice(&col);
                merged[c as usize] = m;
            }
        }
        (cells, merged)
    }

    #[test]
    fn three_switches_merge_into_complete_batches() {
        let mut p = pipeline(3, 16);
        let mut mem = vec![0u8; 1 << 16];
        let sk: Vec<Sketch> = (0..3).map(switch_sketch).collect();
        let mut direct = Sketch::new(shape());
        for s in &sk {
            direct.merge(s);
        }
        // Interleaved, 5 columns per report (batches complete across report boundaries).
        let mut bufs = Vec::new();
        for col in (0..64).step_by(5) {
            for (i, s) in sk.iter().enumerate() {
                bufs.push(report(s, 100 + i as u32, 1, col, 5.min(64 - col) as u16));
            }
        }
        assert!(feed(&mut p, 0, &bufs, &mut mem).is_empty());
        let c = p.counters();
        assert_eq!(c.reports_sketch, bufs.len() as u64);
        assert_eq!(c.translated, bufs.len() as u64);
        assert_eq!(c.sketch_columns_merged, 3 * 64);
        assert_eq!(c.sketch_batches_complete, 8, "{c:?}");
        assert_eq!(c.sketch_batches_partial, 0);
        assert_eq!(c.dropped(), 0);
        let (cells, merged) = read_back(&mem, 1);
        assert_eq!(cells, direct.cells());
        assert!(merged.iter().all(|&m| m == 3));
        // Nothing left to write: the timer finds nothing and NACKs nobody.
        assert!(feed(&mut p, 2 * MS, &[], &mut mem).is_empty());
        assert_eq!(p.counters().sketch_batches_partial, 0);
    }

    #[test]
    fn gaps_are_nacked_and_resends_complete_the_merge() {
        let mut p = pipeline(2, 16);
        let mut mem = vec![0u8; 1 << 16];
        let (a, b) = (switch_sketch(1), switch_sketch(2));
        // Switch 1 sends everything; switch 2 loses columns 8..16 and the last report.
        let mut bufs: Vec<Vec<u8>> = (0..8).map(|i| report(&a, 1, 5, i * 8, 8)).collect();
        bufs.extend([0, 16, 24, 32, 40, 48].map(|col| report(&b, 2, 5, col, 8)));
        let nacks = feed(&mut p, 0, &bufs, &mut mem);
        let gap = NackRepr::SketchColumn {
            sketch_id: 7,
            switch: 2,
            epoch: 5,
            expected_column: 8,
        };
        assert_eq!(nacks, vec![gap], "one NACK for a burst behind one loss");
        let c = p.counters();
        assert_eq!(c.drop_sketch_gap, 5);
        assert_eq!(c.sketch_gap_nacks, 1);
        assert_eq!(
            c.sketch_batches_complete, 1,
            "only batch 0 has both switches"
        );
        // The timer writes what changed and NACKs the straggler.
        let nacks = feed(&mut p, MS, &[], &mut mem);
        assert_eq!(nacks, vec![gap]);
        assert_eq!(p.counters().sketch_batches_partial, 7);
        let (_, merged) = read_back(&mem, 5);
        assert_eq!(
            &merged[..16],
            &[2, 2, 2, 2, 2, 2, 2, 2, 1, 1, 1, 1, 1, 1, 1, 1]
        );
        // The switch resends from column 8, with one report overlapping what arrived.
        let mut resend: Vec<Vec<u8>> = (1..6).map(|i| report(&b, 2, 5, i * 8, 8)).collect();
        resend.push(report(&b, 2, 5, 44, 12)); // 44..48 again, 48..56 new
        resend.push(report(&b, 2, 5, 56, 8));
        resend.push(report(&b, 2, 5, 60, 4)); // all merged already
        assert!(feed(&mut p, MS + 1, &resend, &mut mem).is_empty());
        let c = p.counters();
        assert_eq!(c.drop_sketch_duplicate, 1);
        assert_eq!(c.sketch_columns_duplicate, 4);
        let mut direct = a.clone();
        direct.merge(&b);
        let (cells, merged) = read_back(&mem, 5);
        assert_eq!(cells, direct.cells());
        assert!(merged.iter().all(|&m| m == 2), "{merged:?}");
    }

    #[test]
    fn epochs_roll_over_and_old_ones_are_late() {
        let mut p = pipeline(2, 16);
        let mut mem = vec![0u8; 1 << 16];
        let a = switch_sketch(1);
        let half: Vec<Vec<u8>> = (0..4).map(|i| report(&a, 1, 9, i * 8, 8)).collect();
        feed(&mut p, 0, &half, &mut mem);
        assert_eq!(p.counters().sketch_batches_complete, 0);
        // Epoch 10 starts: epoch 9's changed batches are written, then a fresh merge.
        feed(&mut p, 10, &[report(&a, 1, 10, 0, 8)], &mut mem);
        let c = p.counters();
        assert_eq!((c.sketch_epochs, c.sketch_batches_partial), (2, 4));
        let (cells9, merged9) = read_back(&mem, 9);
        assert_eq!(&merged9[..33], &[[1u16; 32].as_slice(), &[0]].concat()[..]);
        assert_eq!(&cells9[..128], &a.cells()[..128]);
        // Epoch 9 again (late or replayed): dropped, memory untouched.
        feed(&mut p, 20, &[report(&a, 1, 9, 32, 8)], &mut mem);
        assert_eq!(p.counters().drop_sketch_late, 1);
        assert_eq!(read_back(&mem, 9).1, merged9);
        // Epoch 12 overwrites the slot epoch 10 used (two slots); epoch 10's records read
        // as another epoch's.
        feed(&mut p, 30, &[report(&a, 1, 12, 0, 8)], &mut mem);
        feed(&mut p, 40 + MS, &[], &mut mem);
        assert_eq!(read_back(&mem, 10).1[0], 0);
        assert_eq!(read_back(&mem, 12).1[0], 1);
    }

    /// A pipeline with one HyperLogLog store of `columns` one-byte registers, batch 1, one
    /// expected switch.
    fn hll_batch1_pipeline(columns: u32) -> Pipeline {
        let kind = StoreKind::Sketch {
            sketch_id: 7,
            sketch: SketchKind::HyperLogLog,
            rows: 1,
            columns,
            cell_width: 1,
            batch: 1,
            epochs: 2,
            hash: Default::default(),
        };
        single_store_pipeline_with(kind, |c| {
            c.l2_frames = false;
            c.sketch = SketchSettings {
                expected_switches: 1,
                max_switches: 4,
                flush_ns: MS,
                ..SketchSettings::default()
            };
        })
    }

    /// A HyperLogLog of 16 one-byte registers written one column per WRITE: a report could
    /// announce 1,024 columns, but the sketch has 16, so a report needs room for 16 frames, not
    /// 1,025 (more than the QP's ring holds, which made every report a queue-full drop).
    #[test]
    fn narrow_cells_with_batch_1_need_room_for_the_sketch_only() {
        let mut p = hll_batch1_pipeline(16);
        let shape = SketchShape::new(SketchKind::HyperLogLog, 1, 16, 1).unwrap();
        let mut s = Sketch::new(shape);
        for k in 0..100u32 {
            s.update(&Key::new(&k.to_be_bytes()).unwrap(), 1);
        }
        let bufs: Vec<Vec<u8>> = (0..16)
            .map(|c| s.column_report(7, 1, 1, c, 1).unwrap())
            .collect();
        let mut mem = vec![0u8; 1 << 12];
        feed(&mut p, 0, &bufs, &mut mem);
        let c = p.counters();
        assert_eq!(c.drop_qp_queue_full, 0, "{c:?}");
        assert_eq!(c.translated, 16);
        assert_eq!(c.sketch_batches_complete, 16);
    }

    #[test]
    fn a_report_completing_many_batches_writes_the_rest_at_the_next_poll() {
        // 16,384 one-byte registers, batch 1: one report of 1,024 columns completes 1,024
        // batches. Before MAX_WRITES_PER_REPORT every report was refused as queue-full (the
        // pipeline asked the QP for 1,026 frames of room).
        let mut p = hll_batch1_pipeline(16384);
        assert!(p.frames_per_report_max() <= MAX_WRITES_PER_REPORT as usize + 1);
        let shape = SketchShape::new(SketchKind::HyperLogLog, 1, 16384, 1).unwrap();
        let mut s = Sketch::new(shape);
        for k in 0..50_000u32 {
            s.update(&Key::new(&k.to_be_bytes()).unwrap(), 1);
        }
        let report = s.column_report(7, 1, 1, 0, 1024).unwrap();
        let mut mem = vec![0u8; 1 << 20];
        let mut tx = TxBatch::new(4096, 2048);
        let src = SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 9), 5000);
        let dst = SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 101), 40040);
        let d = Datagram {
            src,
            dst,
            ip: None,
            payload: &report,
        };
        p.handle_reports(0, &[d], &mut tx);
        let c = p.counters();
        assert_eq!((c.drop_qp_queue_full, c.translated), (0, 1), "{c:?}");
        assert_eq!(tx.len(), MAX_WRITES_PER_REPORT as usize, "written at once");
        assert_eq!(p.next_deadline(), Some(0), "the rest is due now");
        // Polls write the other 992.
        let mut written = tx.len();
        drain(&tx, &mut mem);
        tx.clear();
        for _ in 0..100 {
            if p.next_deadline() != Some(0) {
                break;
            }
            p.poll(0, &mut tx);
            written += tx.len();
            drain(&tx, &mut mem);
            tx.clear();
        }
        assert_eq!(written, 1024, "{:?}", p.counters());
        let layout = SketchLayout::new(shape, 1, 2).unwrap();
        for col in 0..1024u32 {
            let rec = &mem[layout.batch_offset(1, col) as usize..][..12];
            assert_eq!(u32::from_le_bytes(rec[..4].try_into().unwrap()), 1, "epoch");
            assert_eq!(rec[8] as u32, s.cells()[col as usize], "column {col}");
        }
    }

    /// Feeds datagrams, each from its own source address, at `now`; applies the WRITEs to
    /// `mem` and returns the NACKs with the address each went to.
    fn feed_from(
        p: &mut Pipeline,
        now: u64,
        bufs: &[(Vec<u8>, Ipv4Addr)],
        mem: &mut [u8],
    ) -> Vec<(Ipv4Addr, NackRepr)> {
        let dst = SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 101), 40040);
        let burst: Vec<Datagram<'_>> = bufs
            .iter()
            .map(|(b, ip)| Datagram {
                src: SocketAddrV4::new(*ip, 5000),
                dst,
                ip: None,
                payload: b,
            })
            .collect();
        let mut tx = TxBatch::new(1024, 2048);
        p.handle_reports(now, &burst, &mut tx);
        p.poll(now, &mut tx);
        drain_to(&tx, mem)
    }

    fn drain_to(tx: &TxBatch, mem: &mut [u8]) -> Vec<(Ipv4Addr, NackRepr)> {
        let nack_dests: Vec<Ipv4Addr> = tx
            .iter_payloads()
            .filter(|(d, _)| d.port() == dta_proto::consts::DTA_NACK_PORT)
            .map(|(d, _)| *d.ip())
            .collect();
        nack_dests.into_iter().zip(drain(tx, mem)).collect()
    }

    /// Polls the pipeline every millisecond from `from` to `to`; returns the NACKs sent.
    fn run_timers(
        p: &mut Pipeline,
        from: u64,
        to: u64,
        mem: &mut [u8],
    ) -> Vec<(Ipv4Addr, NackRepr)> {
        let mut out = Vec::new();
        let mut now = from;
        while now <= to {
            let mut tx = TxBatch::new(1024, 2048);
            p.poll(now, &mut tx);
            out.extend(drain_to(&tx, mem));
            now += MS;
        }
        out
    }

    /// All 64 columns of `s` as switch `switch` sends them in `epoch`, 8 a report.
    fn whole(s: &Sketch, switch: u32, epoch: u32) -> Vec<Vec<u8>> {
        (0..8).map(|i| report(s, switch, epoch, i * 8, 8)).collect()
    }

    /// Issue 28: one report of a later epoch (spoofed, or from a switch whose clock runs
    /// ahead) ended the epoch for every switch, and the others' columns were dropped as late.
    #[test]
    fn a_single_spoofed_report_does_not_end_the_epoch() {
        let mut p = pipeline(3, 16);
        let mut mem = vec![0u8; 1 << 16];
        let sk: Vec<Sketch> = (0..3).map(switch_sketch).collect();
        let mut direct = Sketch::new(shape());
        for s in &sk {
            direct.merge(s);
        }
        let half = |lo: u32| -> Vec<Vec<u8>> {
            (lo..lo + 4)
                .flat_map(|i| (0..3u32).map(move |w| (w, i)))
                .map(|(w, i)| report(&sk[w as usize], 1 + w, 5, i * 8, 8))
                .collect()
        };
        feed(&mut p, 0, &half(0), &mut mem);
        let spoof = Ipv4Addr::new(10, 6, 6, 6);
        feed_from(
            &mut p,
            1,
            &[
                (report(&sk[0], 1, 6, 0, 8), spoof),
                (report(&sk[0], 2, 1_000_000, 0, 8), spoof),
            ],
            &mut mem,
        );
        feed(&mut p, 2, &half(4), &mut mem);
        let c = p.counters();
        assert_eq!(c.drop_sketch_late, 0, "{c:?}");
        assert_eq!(
            (c.sketch_epochs, c.drop_sketch_epoch_ahead),
            (1, 1),
            "{c:?}"
        );
        assert_eq!(c.sketch_columns_held, 8, "the next epoch's report waits");
        let (cells, merged) = read_back(&mem, 5);
        assert!(merged.iter().all(|&m| m == 3), "{merged:?}");
        assert_eq!(cells, direct.cells());
    }

    /// Issue 28: the switch table never forgot a switch, so once `max_switches` IDs had been
    /// seen every new switch was refused for good.
    #[test]
    fn idle_switches_leave_the_table() {
        let mut p = pipeline(1, 4);
        let mut mem = vec![0u8; 1 << 16];
        let a = switch_sketch(1);
        let mut now = 0;
        let mut bufs = Vec::new();
        for w in 1..=4 {
            bufs.extend(whole(&a, w, 1));
        }
        feed(&mut p, now, &bufs, &mut mem);
        // Switch 1 alone for epochs 2..=11; switches 2..=4 are gone.
        for epoch in 2..=11 {
            now += 100 * MS;
            feed(&mut p, now, &whole(&a, 1, epoch), &mut mem);
            run_timers(&mut p, now, now + 40 * MS, &mut mem);
        }
        // A new switch joins in epoch 12.
        now += 100 * MS;
        let mut bufs = whole(&a, 1, 12);
        bufs.extend(whole(&a, 5, 12));
        feed(&mut p, now, &bufs, &mut mem);
        let c = p.counters();
        assert_eq!(c.drop_sketch_switches_full, 0, "{c:?}");
        assert_eq!(c.sketch_switches_forgotten, 3, "{c:?}");
        assert_eq!(c.sketch_epochs, 12, "{c:?}");
        assert!(read_back(&mem, 12).1.iter().all(|&m| m == 2));
    }

    /// Issue 28: a NACK went to the source of the latest datagram claiming the switch ID (a
    /// reflector for spoofed reports), and every switch ever seen was NACKed as a straggler.
    #[test]
    fn nacks_go_to_the_switch_not_to_a_spoofed_source() {
        let mut p = pipeline(2, 64);
        let mut mem = vec![0u8; 1 << 16];
        let (a, b) = (switch_sketch(1), switch_sketch(2));
        let (ip1, ip2) = (Ipv4Addr::new(10, 0, 0, 1), Ipv4Addr::new(10, 0, 0, 2));
        let spoof = Ipv4Addr::new(10, 6, 6, 6);
        let mut bufs: Vec<(Vec<u8>, Ipv4Addr)> =
            whole(&a, 1, 1).into_iter().map(|r| (r, ip1)).collect();
        bufs.push((report(&b, 2, 1, 0, 8), ip2));
        bufs.push((report(&b, 2, 1, 8, 8), ip2));
        assert!(feed_from(&mut p, 0, &bufs, &mut mem).is_empty());
        // A spoofed gap report naming switch 2, and gap reports of 30 IDs never seen.
        let mut spoofed = vec![(report(&b, 2, 1, 40, 8), spoof)];
        for w in 100..130 {
            spoofed.push((report(&b, w, 1, 8, 8), spoof));
        }
        let mut nacks = feed_from(&mut p, MS / 2, &spoofed, &mut mem);
        nacks.extend(run_timers(&mut p, MS, 40 * MS, &mut mem));
        assert!(!nacks.is_empty(), "switch 2 owes column 16");
        for (to, n) in &nacks {
            assert_eq!(*to, ip2, "{n:?} went to {to}");
            assert!(matches!(
                n,
                NackRepr::SketchColumn {
                    switch: 2,
                    expected_column: 16,
                    ..
                }
            ));
        }
        assert!(
            nacks.len() <= 1 + STRAGGLER_ROUNDS as usize,
            "{}",
            nacks.len()
        );
        assert_eq!(p.counters().sketch_nacks_withheld, 30);
    }

    /// Issue 28: a switch whose epoch counter restarted (a reboot) was dropped as late until
    /// its counter caught up with the others'.
    #[test]
    fn a_rebooted_switch_is_accepted() {
        let mut p = pipeline(2, 16);
        let mut mem = vec![0u8; 1 << 16];
        let (a, b) = (switch_sketch(1), switch_sketch(2));
        let mut direct = a.clone();
        direct.merge(&b);
        let mut bufs = whole(&a, 1, 100);
        bufs.extend(whole(&b, 2, 100));
        feed(&mut p, 0, &bufs, &mut mem);
        // Switch 2 reboots: its next sketch is its epoch 0, then 1.
        for (epoch, own) in [(101, 0), (102, 1)] {
            let mut bufs = whole(&a, 1, epoch);
            bufs.extend(whole(&b, 2, own));
            feed(&mut p, epoch as u64 * 10 * MS, &bufs, &mut mem);
            let (cells, merged) = read_back(&mem, epoch);
            assert!(merged.iter().all(|&m| m == 2), "epoch {epoch}: {merged:?}");
            assert_eq!(cells, direct.cells(), "epoch {epoch}");
        }
        let c = p.counters();
        assert_eq!(
            (c.sketch_switch_restarts, c.drop_sketch_late),
            (1, 0),
            "{c:?}"
        );
        // A replay of switch 2's epoch 0 is late now, not another restart.
        feed(&mut p, MS * 2000, &[report(&b, 2, 0, 8, 8)], &mut mem);
        assert_eq!(p.counters().drop_sketch_late, 1);
    }

    /// `[[sketch.switch]]`: a configured switch is expected from the start (NACKed as a
    /// straggler at its configured address though it never sent anything, and never
    /// forgotten); a learned one is NACKed at the source of its first merged report.
    #[test]
    fn configured_switches_are_expected_and_nacked_at_their_address() {
        let fixed = Ipv4Addr::new(192, 0, 2, 7);
        let mut p = single_store_pipeline_with(kind(), |c| {
            c.l2_frames = false;
            c.sketch = SketchSettings {
                expected_switches: 2,
                max_switches: 4,
                flush_ns: MS,
                idle_epochs: 1,
                switches: Arc::from([SketchSwitch { id: 7, addr: fixed }]),
                ..SketchSettings::default()
            };
        });
        let mut mem = vec![0u8; 1 << 16];
        let a = switch_sketch(1);
        let learned = Ipv4Addr::new(10, 0, 0, 1);
        let bufs: Vec<_> = whole(&a, 1, 1).into_iter().map(|r| (r, learned)).collect();
        feed_from(&mut p, 0, &bufs, &mut mem);
        let nacks = run_timers(&mut p, MS, 30 * MS, &mut mem);
        assert_eq!(nacks.len(), STRAGGLER_ROUNDS as usize, "{nacks:?}");
        assert!(nacks.iter().all(|(to, n)| *to == fixed
            && *n
                == NackRepr::SketchColumn {
                    sketch_id: 7,
                    switch: 7,
                    epoch: 1,
                    expected_column: 0
                }));
        // Switch 7, reporting from elsewhere, is still NACKed at its address.
        let gap = feed_from(
            &mut p,
            31 * MS,
            &[(report(&a, 7, 1, 8, 8), learned)],
            &mut mem,
        );
        assert_eq!(
            gap.iter().map(|(to, _)| *to).collect::<Vec<_>>(),
            vec![fixed]
        );
        // Epochs go by with switch 1 alone (the quorum of 2 is capped at the members: the
        // configured switch and switch 1): switch 7 stays in the table, and a late switch 1
        // report is NACKed at the source of its first merged report.
        let mut now = 40 * MS;
        for epoch in 2..=5 {
            let mut bufs: Vec<_> = whole(&a, 1, epoch)
                .into_iter()
                .map(|r| (r, learned))
                .collect();
            bufs.push((report(&a, 7, epoch, 0, 8), Ipv4Addr::new(10, 9, 9, 9)));
            feed_from(&mut p, now, &bufs, &mut mem);
            run_timers(&mut p, now, now + 30 * MS, &mut mem);
            now += 40 * MS;
        }
        let c = p.counters();
        assert_eq!(
            (c.sketch_epochs, c.sketch_switches_forgotten),
            (5, 0),
            "{c:?}"
        );
        let gap = feed_from(
            &mut p,
            now,
            &[(report(&a, 1, 6, 16, 8), Ipv4Addr::new(10, 6, 6, 6))],
            &mut mem,
        );
        assert_eq!(
            gap.iter().map(|(to, _)| *to).collect::<Vec<_>>(),
            vec![learned]
        );
    }

    /// A translator that fell behind its whole fleet (every switch far ahead) jumps once a
    /// quorum of the switches name the same epoch; the epoch it held is written into its own
    /// slot, and at shutdown the held epoch is written too.
    #[test]
    fn a_quorum_far_ahead_jumps_and_held_epochs_are_written() {
        let mut p = pipeline(3, 16);
        let mut mem = vec![0u8; 1 << 16];
        let sk: Vec<Sketch> = (0..3).map(switch_sketch).collect();
        let mut bufs = Vec::new();
        for (i, s) in sk.iter().enumerate() {
            bufs.extend(whole(s, 1 + i as u32, 1));
        }
        bufs.push(report(&sk[0], 1, 2, 0, 8)); // held: epoch 2, column 0 of switch 1
        feed(&mut p, 0, &bufs, &mut mem);
        feed(&mut p, 1, &[report(&sk[0], 1, 9, 0, 8)], &mut mem);
        assert_eq!(p.counters().sketch_epoch_jumps, 0, "one vote");
        feed(&mut p, 2, &[report(&sk[1], 2, 9, 0, 8)], &mut mem);
        let c = p.counters();
        assert_eq!(
            (c.sketch_epoch_jumps, c.drop_sketch_epoch_ahead),
            (1, 1),
            "{c:?}"
        );
        assert_eq!(
            read_back(&mem, 2).1[..9],
            [1, 1, 1, 1, 1, 1, 1, 1, 0],
            "held, written"
        );
        // The jump's report is epoch 9's first; switch 3 then sends epoch 10 (held).
        feed(&mut p, 3, &[report(&sk[2], 3, 10, 0, 8)], &mut mem);
        let mut tx = TxBatch::new(1024, 2048);
        while !p.flush_all(4, &mut tx) {}
        drain(&tx, &mut mem);
        assert_eq!(read_back(&mem, 9).1[..9], [1, 1, 1, 1, 1, 1, 1, 1, 0]);
        assert_eq!(read_back(&mem, 10).1[..9], [1, 1, 1, 1, 1, 1, 1, 1, 0]);
    }

    /// Random reports (epochs around and far from the merge's, switches beyond the table,
    /// columns anywhere, spoofed sources) and timers: no panic, every report counted once,
    /// every WRITE inside the store, the switch table within its bound.
    #[test]
    fn random_epochs_switches_and_columns_keep_the_books() {
        let mut p = pipeline(3, 8);
        let mut mem = vec![0u8; 1 << 16];
        let sk: Vec<Sketch> = (0..4).map(switch_sketch).collect();
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        let mut rnd = |n: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % n
        };
        let mut now = 0;
        for round in 0..400u64 {
            let mut bufs = Vec::new();
            for _ in 0..16 {
                let switch = 1 + rnd(12) as u32;
                let epoch = match rnd(10) {
                    0 => rnd(u32::MAX as u64) as u32,
                    1 => 0,
                    _ => 100 + (round / 40) as u32 + rnd(3) as u32,
                };
                let col = rnd(64) as u32;
                let n = 1 + rnd((64 - col).min(16) as u64) as u16;
                let src = Ipv4Addr::new(10, 0, 0, rnd(4) as u8);
                bufs.push((report(&sk[rnd(4) as usize], switch, epoch, col, n), src));
            }
            now += rnd(3) * MS / 2;
            feed_from(&mut p, now, &bufs, &mut mem);
        }
        run_timers(&mut p, now, now + 40 * MS, &mut mem);
        let c = p.counters();
        assert_eq!(c.rx_datagrams, c.translated + c.dropped(), "{c:?}");
        assert_eq!(c.drop_out_of_region, 0);
        assert!(c.sketch_epochs >= 2 && c.translated > 0, "{c:?}");
        // The run went through every rule: jumps, restarts, forgetting, held columns.
        assert!(
            c.sketch_epoch_jumps > 0 && c.sketch_switch_restarts > 0,
            "{c:?}"
        );
        assert!(
            c.sketch_switches_forgotten > 0 && c.sketch_columns_held > 0,
            "{c:?}"
        );
    }

    #[test]
    fn hostile_reports_are_counted_and_dropped() {
        let mut p = pipeline(2, 2);
        let mut mem = vec![0u8; 1 << 16];
        let a = switch_sketch(1);
        let good = report(&a, 1, 1, 0, 8);
        let mut unknown = good.clone();
        unknown[9] = 8; // sketch ID 8
        let mut width = good.clone();
        width[11] = 2; // 2-byte cells on a 4-byte sketch: 16 columns in the same bytes
        width[14..16].copy_from_slice(&16u16.to_be_bytes());
        let beyond = report(&a, 1, 1, 60, 4);
        let mut beyond = beyond.clone();
        beyond[24..28].copy_from_slice(&62u32.to_be_bytes()); // columns 62..66 of 64
        let mut huge = good.clone();
        huge[14..16].copy_from_slice(&u16::MAX.to_be_bytes());
        let mut op = good.clone();
        op[12] = 1; // max on a Count-Min sketch
        feed(
            &mut p,
            0,
            &[unknown, width, beyond, huge, op, good.clone()],
            &mut mem,
        );
        // A third switch exceeds max_switches = 2.
        feed(
            &mut p,
            1,
            &[report(&a, 2, 1, 0, 8), report(&a, 3, 1, 0, 8)],
            &mut mem,
        );
        let c = p.counters();
        assert_eq!(c.drop_sketch_unknown, 1);
        assert_eq!(c.drop_sketch_geometry, 2);
        assert_eq!(c.drop_sketch_column_range, 1);
        assert_eq!(c.drop_malformed, 1, "huge column count");
        assert_eq!(c.drop_sketch_switches_full, 1);
        assert_eq!(c.translated, 2);
        assert_eq!(c.rx_datagrams, c.translated + c.dropped());
    }
}
