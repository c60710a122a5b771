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
//! reveals no gap), at most [`STRAGGLER_ROUNDS`] rounds in a row that merge nothing.
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

mod state;

use state::{Cursor, MergeBuffer, SwitchState};

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
    /// Straggler rounds in a row that merged nothing (a round that was answered, or that
    /// other members' streaming followed, starts the count again).
    straggler_rounds: u32,
    /// `last_merge` when the last straggler round ran.
    round_merge: u64,
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
        let (rows, batch) = (shape.rows as usize, layout.batch() as usize);
        let mut m = SketchMerge {
            layout,
            sketch_id,
            rows,
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
            cur: Box::new(MergeBuffer::new(rows, columns as usize, batch)),
            held: Box::new(MergeBuffer::new(rows, columns as usize, batch)),
            complete: vec![0; batches],
            votes: 0,
            pending: 0,
            members: 0,
            far: [(0, 0); FAR_TALLY],
            deadline: None,
            last_merge: 0,
            round_merge: 0,
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
                h.open_to(end as usize);
                merge_wire_cells(
                    self.op,
                    self.width,
                    &mut h.cells[first as usize * rows..end as usize * rows],
                    cells,
                );
                for m in &mut h.merged[first as usize..end as usize] {
                    *m = m.saturating_add(1);
                }
                for b in first / self.batch..(end - 1) / self.batch + 1 {
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
                self.cur.open_to(end as usize);
                merge_wire_cells(
                    self.op,
                    self.width,
                    &mut self.cur.cells[first as usize * rows..end as usize * rows],
                    cells,
                );
                let expected = self.settings.expected_switches;
                let mut writes = 0;
                let mut refused = false;
                for b in first / self.batch..(end - 1) / self.batch + 1 {
                    // The batch's columns in the report, counted per batch (a straight loop
                    // over the counts, vectorised) rather than per column.
                    let lo = (b * self.batch).max(first) as usize;
                    let hi = ((b + 1) * self.batch).min(end) as usize;
                    self.complete[b as usize] +=
                        count_merge(&mut self.cur.merged[lo..hi], expected);
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
        let opened = self.cur.opened();
        let (live, stale) = self.complete.split_at_mut(opened / self.batch as usize);
        let batches = self.cur.merged[..opened].chunks_exact_mut(self.batch as usize);
        for (n, cols) in live.iter_mut().zip(batches) {
            *n = count_complete(cols, expected);
        }
        stale.fill(0);
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
        let (lo, hi) = ((b * self.batch) as usize, ((b + 1) * self.batch) as usize);
        self.layout.encode_records(
            epoch,
            self.settings.expected_switches,
            &buf.merged[lo..hi],
            &buf.cells[lo * self.rows..hi * self.rows],
            &mut self.scratch,
        );
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

/// Counts one more switch merged into each of `merged`'s columns; returns how many columns
/// that brought to `expected`.
#[inline]
fn count_merge(merged: &mut [u16], expected: u16) -> u32 {
    count_columns(merged, |m| {
        *m = m.saturating_add(1);
        *m == expected
    })
}

/// Columns of `merged` with at least `expected` switches (`merged` is not changed).
#[inline]
fn count_complete(merged: &mut [u16], expected: u16) -> u32 {
    count_columns(merged, |m| *m >= expected)
}

/// The columns for which `f` (which may update the column's count) holds, eight at a time as
/// a fixed-size array (one vector step each): a batch segment is too short for the compiler's
/// own vector loop, which then ran entirely in its scalar remainder.
#[inline(always)]
fn count_columns(merged: &mut [u16], f: impl Fn(&mut u16) -> bool) -> u32 {
    let mut chunks = merged.chunks_exact_mut(8);
    let mut hits = [0u16; 8];
    for c in &mut chunks {
        let c: &mut [u16; 8] = c.try_into().expect("chunks of 8");
        for (m, h) in c.iter_mut().zip(&mut hits) {
            *h += u16::from(f(m));
        }
    }
    let mut n: u32 = hits.iter().map(|&h| u32::from(h)).sum();
    for m in chunks.into_remainder() {
        n += u32::from(f(m));
    }
    n
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
            // Only rounds that nothing answered are spent: a fleet streaming slower than the
            // flush delay must not use them up before a last column goes missing.
            if self.last_merge != self.round_merge {
                self.round_merge = self.last_merge;
                self.straggler_rounds = 0;
            }
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
mod tests;
