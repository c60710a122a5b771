//! The Sketch-Merge part of the model (`PROTOCOL.md` §3.4, §5.7 and §9), and the corpus's
//! Sketch-Merge cases.
//!
//! Written from the protocol text with `dta_proto`'s parser, layout, merge function and NACK
//! emitter only: per sketch the model keeps the epoch being merged, the merged cells, the
//! switches merged into each column and, per switch, the next column it owes. A batch of
//! columns is written (one RDMA WRITE of its records) as soon as every column in it has at least
//! `expected_switches` contributions, again whenever a merge changes a written batch, and
//! whatever changed is written when a newer epoch starts and at the final flush. A gap is
//! answered with a sketch-column NACK frame, unless the switch's previous NACK named the same
//! column of the same epoch (the corpus runs at one instant, so the flush delay between two
//! NACKs for one column never passes).

use std::collections::BTreeMap;
use std::net::Ipv4Addr;

use serde::{Deserialize, Serialize};

use dta_collector::config::StoreKindConfig;
use dta_proto::consts::DTA_NACK_PORT;
use dta_proto::meta::StoreKind;
use dta_proto::sketch::{merge_one, MergeOp, Sketch, SketchKind, SketchLayout, SketchShape};
use dta_proto::wire::ethernet::{EthernetFrame, EthernetRepr, MacAddr, ETHERTYPE_IPV4};
use dta_proto::wire::ipv4::{Ipv4Packet, Ipv4Repr, PROTO_UDP};
use dta_proto::wire::nack::NackRepr;
use dta_proto::wire::sketch::SketchReportRepr;
use dta_proto::wire::udp::{UdpPacket, UdpRepr};
use dta_proto::Key;

use super::{store, Model, Op, Rng, Spec, State, TRANSLATOR, TRANSLATOR_MAC};

/// The Sketch-Merge settings of a case (`[sketch]` of the translator's configuration) and the
/// switches the Tofino control plane must install.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SketchCase {
    /// `[sketch] expected_switches`: contributions that complete a column (every sketch).
    pub expected_switches: u16,
    /// `[sketch] max_switches`.
    pub max_switches: u32,
    /// Per served sketch ID, the switch IDs its reports name (`dta_bfrt.py
    /// --sketch-switches`).
    pub switches: Vec<SketchSwitches>,
}

/// The switches of one sketch.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SketchSwitches {
    /// The sketch ID.
    pub sketch_id: u16,
    /// Its switch IDs, ascending.
    pub switches: Vec<u32>,
}

/// Switches tracked at most per sketch in every case (the translator's default).
const MAX_SWITCHES: u32 = 4096;
/// `[sketch] idle_epochs` and `late_epochs` (the translator's defaults).
const IDLE_EPOCHS: u32 = 4;
const LATE_EPOCHS: u32 = 2;

/// What the model knows about one switch of one sketch (`PROTOCOL.md` §3.4, "Epochs").
#[derive(Debug, Clone, Copy, Default)]
struct Owed {
    /// Where its NACKs go: the source of its first merged report.
    addr: Option<Ipv4Addr>,
    /// Added to the epochs it names (set when it restarts).
    offset: u32,
    /// The merge epoch it last merged into.
    last_active: u32,
    /// Expected in the current epoch.
    member: bool,
    /// The next column it owes in the current epoch, and the column its last gap NACK named.
    next: u32,
    nacked: Option<u32>,
    /// The same in the held next epoch.
    held_next: u32,
    held_nacked: Option<u32>,
    /// Has sent the next epoch (a member's vote).
    voted: bool,
    /// The far-ahead epoch it voted for.
    far: Option<u32>,
}

/// One epoch's merge.
#[derive(Clone)]
struct Merge {
    cells: Vec<u32>,
    merged: Vec<u16>,
    /// Batches changed since their last WRITE.
    dirty: Vec<bool>,
}

impl Merge {
    fn new(layout: &SketchLayout) -> Merge {
        Merge {
            cells: vec![0; layout.shape().cells()],
            merged: vec![0; layout.shape().columns as usize],
            dirty: vec![false; layout.batches() as usize],
        }
    }
}

/// One Sketch store's merge.
pub(crate) struct SketchModel {
    pub(crate) layout: SketchLayout,
    pub(crate) sketch_id: u16,
    epoch: Option<u32>,
    cur: Merge,
    /// The next epoch, held until the switches agree to move on.
    held: Merge,
    switches: BTreeMap<u32, Owed>,
    /// Far-ahead epochs and their members' votes (at most 4 at once).
    far: Vec<(u32, u16)>,
}

/// What a report makes the translator send.
enum Out {
    /// A batch's column records at a region offset (`rollover`: written because the merge
    /// moved on before the batch was complete).
    Write {
        off: u64,
        payload: Vec<u8>,
        rollover: bool,
    },
    Nack(Vec<u8>),
}

impl SketchModel {
    pub(crate) fn new(layout: SketchLayout, sketch_id: u16) -> SketchModel {
        SketchModel {
            layout,
            sketch_id,
            epoch: None,
            cur: Merge::new(&layout),
            held: Merge::new(&layout),
            switches: BTreeMap::new(),
            far: Vec::new(),
        }
    }

    fn columns(&self) -> u32 {
        self.layout.shape().columns
    }

    fn members(&self) -> usize {
        self.switches.values().filter(|s| s.member).count()
    }

    /// Members part-way through the current epoch (not finished, not voted).
    fn pending(&self) -> usize {
        let cols = self.columns();
        self.switches
            .values()
            .filter(|s| s.member && !s.voted && s.next < cols)
            .count()
    }

    fn votes(&self) -> usize {
        self.switches.values().filter(|s| s.voted).count()
    }

    /// The quorum in force: a majority of `expected`, capped at the members, at least 1.
    fn quorum(&self, expected: u16) -> usize {
        ((expected / 2 + 1) as usize).min(self.members()).max(1)
    }

    /// A fresh merge of `epoch` (first report, or a jump): those that voted for it are its
    /// members.
    fn start(&mut self, epoch: u32) {
        self.epoch = Some(epoch);
        self.cur = Merge::new(&self.layout);
        self.held = Merge::new(&self.layout);
        for sw in self.switches.values_mut() {
            sw.member = sw.far == Some(epoch);
            if sw.member {
                sw.last_active = epoch;
            }
            sw.next = 0;
            sw.nacked = None;
            sw.held_next = 0;
            sw.held_nacked = None;
            sw.voted = false;
            sw.far = None;
        }
        self.far.clear();
    }

    /// Writes batch `b` of the current (or held) merge now and marks it clean.
    fn emit(&mut self, held: bool, b: u32, expected: u16, rollover: bool, out: &mut Vec<Out>) {
        let (off, payload) = self.records(held, b, expected);
        if held {
            self.held.dirty[b as usize] = false;
        } else {
            self.cur.dirty[b as usize] = false;
        }
        out.push(Out::Write {
            off,
            payload,
            rollover,
        });
    }

    /// Writes every changed batch of the current (or held) merge, in batch order.
    fn emit_dirty(&mut self, held: bool, expected: u16, rollover: bool, out: &mut Vec<Out>) {
        let n = if held { &self.held } else { &self.cur }.dirty.len() as u32;
        for b in 0..n {
            if if held { &self.held } else { &self.cur }.dirty[b as usize] {
                self.emit(held, b, expected, rollover, out);
            }
        }
    }

    /// Moves on to the next epoch: the old epoch's changed batches, then the new one's complete
    /// batches, are written (in batch order); idle switches are forgotten.
    fn advance(&mut self, expected: u16, out: &mut Vec<Out>) {
        let old = self.epoch.expect("an epoch is being merged");
        self.emit_dirty(false, expected, true, out);
        let new = old.wrapping_add(1);
        self.epoch = Some(new);
        self.cur = std::mem::replace(&mut self.held, Merge::new(&self.layout));
        self.switches
            .retain(|_, sw| new.wrapping_sub(sw.last_active) <= IDLE_EPOCHS);
        for sw in self.switches.values_mut() {
            sw.next = sw.held_next;
            sw.nacked = sw.held_nacked;
            sw.held_next = 0;
            sw.held_nacked = None;
            sw.voted = false;
            sw.far = None;
            sw.member = new.wrapping_sub(sw.last_active) <= 1;
        }
        self.far.clear();
        let batch = self.layout.batch() as usize;
        for b in 0..self.cur.dirty.len() {
            let cols = &self.cur.merged[b * batch..(b + 1) * batch];
            if self.cur.dirty[b] && cols.iter().all(|&n| n >= expected) {
                self.emit(false, b as u32, expected, false, out);
            }
        }
    }

    /// One valid report of this sketch from `src`: what it makes the translator send, and
    /// whether the Tofino program (which moves the epoch on at the first report of a newer
    /// one and has no held merge, restart or jump vote) would do otherwise.
    fn report(
        &mut self,
        r: &SketchReportRepr<'_>,
        src: Ipv4Addr,
        expected: u16,
        out: &mut Vec<Out>,
    ) -> bool {
        let end = r.column + r.columns as u32;
        let mut p4_differs = false;
        let mut cur = match self.epoch {
            Some(e) => e,
            None => {
                self.start(r.epoch);
                r.epoch
            }
        };
        // An unknown switch enters the table only with a report that merges (column 0).
        let known = self.switches.get(&r.switch).copied();
        let sw = known.unwrap_or_default();
        let mut ahead = r.epoch.wrapping_add(sw.offset).wrapping_sub(cur) as i32;
        let mut rebase = None;
        if r.column == 0
            && ((ahead < 0 && ahead.unsigned_abs() > LATE_EPOCHS) || (ahead > 1 && sw.offset != 0))
        {
            // A restart: re-based onto the current epoch, or the next if it merged in this one.
            let onto = if sw.next == 0 {
                cur
            } else {
                cur.wrapping_add(1)
            };
            rebase = Some(onto.wrapping_sub(r.epoch));
            ahead = onto.wrapping_sub(cur) as i32;
            p4_differs = true;
        }
        let held = match ahead {
            0 => false,
            1 => true,
            a if a < 0 => return p4_differs, // late
            _ => {
                // A vote for a jump (members only); dropped unless it completes the quorum.
                p4_differs = true;
                let f = r.epoch.wrapping_add(sw.offset);
                if known.is_none() || !sw.member || sw.far == Some(f) {
                    return p4_differs;
                }
                if let Some(old) = sw.far {
                    if let Some(t) = self.far.iter_mut().find(|t| t.0 == old && t.1 > 0) {
                        t.1 -= 1;
                    }
                    self.far.retain(|t| t.1 > 0);
                    self.switches.get_mut(&r.switch).expect("present").far = None;
                }
                if !self.far.iter().any(|t| t.0 == f) {
                    if self.far.len() >= 4 {
                        return p4_differs;
                    }
                    self.far.push((f, 0));
                }
                self.switches.get_mut(&r.switch).expect("present").far = Some(f);
                let t = self.far.iter_mut().find(|t| t.0 == f).expect("tallied");
                t.1 += 1;
                if (t.1 as usize) < self.quorum(expected) {
                    return p4_differs;
                }
                self.emit_dirty(false, expected, true, out);
                if self.layout.epochs() > 1 {
                    self.emit_dirty(true, expected, true, out);
                }
                self.start(f);
                cur = f;
                false
            }
        };
        // A report of the current epoch while the next one is held: the Tofino program would
        // have moved on and dropped it as late.
        p4_differs |= !held && self.held.merged.iter().any(|&n| n > 0);
        if known.is_none() {
            if r.column > 0 {
                return p4_differs; // a gap from an ID never merged: no NACK address
            }
            if self.switches.len() as u32 >= MAX_SWITCHES {
                return p4_differs;
            }
            self.switches.insert(
                r.switch,
                Owed {
                    last_active: cur,
                    ..Owed::default()
                },
            );
        }
        if let Some(o) = rebase {
            self.switches.get_mut(&r.switch).expect("present").offset = o;
        }
        let sw = self.switches.get_mut(&r.switch).expect("present");
        let (next, nacked) = if held {
            (&mut sw.held_next, &mut sw.held_nacked)
        } else {
            (&mut sw.next, &mut sw.nacked)
        };
        if r.column > *next {
            if *nacked != Some(*next) {
                if let Some(to) = sw.addr {
                    *nacked = Some(*next);
                    let nack = NackRepr::SketchColumn {
                        sketch_id: r.sketch_id,
                        switch: r.switch,
                        epoch: r.epoch,
                        expected_column: *next,
                    };
                    out.push(Out::Nack(nack_frame(&nack, to)));
                }
            }
            return p4_differs;
        }
        if end <= *next {
            return p4_differs; // every column already merged: a duplicate
        }
        let first = *next;
        *next = end;
        sw.addr.get_or_insert(src);
        let shape = self.layout.shape();
        let rows = shape.rows as usize;
        let w = shape.width.bytes();
        let cap = shape.width.max();
        let op = shape.kind.merge_op();
        if held {
            sw.last_active = cur.wrapping_add(1);
            sw.voted |= sw.member;
        } else {
            sw.last_active = cur;
            sw.member = true;
        }
        let m = if held { &mut self.held } else { &mut self.cur };
        for col in first..end {
            let wire = &r.cells[(col - r.column) as usize * rows * w..];
            for row in 0..rows {
                let cell = &wire[row * w..(row + 1) * w];
                let raw = cell.iter().fold(0u32, |a, &b| a << 8 | b as u32);
                // A narrow signed cell is a two's-complement number: widen it with its sign.
                let v = if op == MergeOp::SignedSum && w < 4 {
                    let shift = 32 - 8 * w as u32;
                    ((raw << shift) as i32 >> shift) as u32
                } else {
                    raw
                };
                let d = &mut m.cells[col as usize * rows + row];
                *d = merge_one(op, cap, *d, v);
            }
            m.merged[col as usize] = m.merged[col as usize].saturating_add(1);
        }
        let batch = self.layout.batch();
        for b in first / batch..=(end - 1) / batch {
            m.dirty[b as usize] = true;
        }
        if !held {
            for b in first / batch..=(end - 1) / batch {
                let range = (b * batch) as usize..((b + 1) * batch) as usize;
                if self.cur.merged[range].iter().all(|&n| n >= expected) {
                    self.emit(false, b, expected, false, out);
                }
            }
        }
        if self.votes() > 0 && self.votes() >= self.quorum(expected) && self.pending() == 0 {
            self.advance(expected, out);
        }
        p4_differs
    }

    /// Batch `b`'s column records of the current (or held) merge: (region offset, bytes).
    fn records(&self, held: bool, b: u32, expected: u16) -> (u64, Vec<u8>) {
        let cur = self.epoch.expect("a written batch belongs to an epoch");
        let (epoch, m) = if held {
            (cur.wrapping_add(1), &self.held)
        } else {
            (cur, &self.cur)
        };
        let l = self.layout;
        let rows = l.shape().rows as usize;
        let stride = l.column_stride() as usize;
        let mut out = vec![0u8; l.batch_len()];
        for i in 0..l.batch() as usize {
            let col = b as usize * l.batch() as usize + i;
            l.encode_record(
                epoch,
                m.merged[col],
                expected,
                &m.cells[col * rows..(col + 1) * rows],
                &mut out[i * stride..(i + 1) * stride],
            );
        }
        (l.batch_offset(epoch, b), out)
    }
}

/// The sketch a store config describes.
fn shape_of(kind: &StoreKindConfig) -> Option<SketchShape> {
    match *kind.layout() {
        StoreKind::Sketch {
            sketch,
            rows,
            columns,
            cell_width,
            ..
        } => SketchShape::new(sketch, rows, columns, cell_width).ok(),
        _ => None,
    }
}

impl Model {
    /// One Sketch-Merge datagram from the reporter at `src`.
    pub(crate) fn sketch_report(&mut self, payload: &[u8], src: Ipv4Addr) {
        let Ok(r) = SketchReportRepr::parse(payload) else {
            return; // malformed: dropped before any store sees it
        };
        let Some(si) = self
            .stores
            .iter()
            .position(|s| matches!(&s.state, State::Sketch(m) if m.sketch_id == r.sketch_id))
        else {
            return; // no store serves the sketch ID
        };
        let expected = self.sketch_expected;
        let State::Sketch(m) = &mut self.stores[si].state else {
            unreachable!()
        };
        let shape = m.layout.shape();
        if r.rows != shape.rows || r.width != shape.width || r.op != shape.kind.merge_op() {
            return;
        }
        if r.column as u64 + r.columns as u64 > shape.columns as u64 {
            return;
        }
        if r.columns != 1 {
            self.sketch_multi_column += 1;
        }
        let mut out = Vec::new();
        if m.report(&r, src, expected, &mut out) {
            self.sketch_epoch_rules += 1;
        }
        for o in out {
            match o {
                Out::Nack(f) => self.frames.push(f),
                Out::Write {
                    off,
                    payload,
                    rollover,
                } => {
                    self.sketch_rollover_writes += rollover as usize;
                    let va = self.stores[si].qp.addr + off;
                    self.send(
                        si,
                        Op::Write {
                            va,
                            payload: &payload,
                            imm: None,
                        },
                    );
                }
            }
        }
    }

    /// Writes every changed batch of sketch store `si` (the current merge, then the held
    /// next epoch into its own slot when there are two or more), in batch order; returns how
    /// many.
    pub(crate) fn write_dirty(&mut self, si: usize) -> usize {
        let expected = self.sketch_expected;
        let State::Sketch(m) = &mut self.stores[si].state else {
            return 0;
        };
        let mut out = Vec::new();
        m.emit_dirty(false, expected, false, &mut out);
        if m.layout.epochs() > 1 && m.epoch.is_some() {
            m.emit_dirty(true, expected, false, &mut out);
        }
        let n = out.len();
        for o in out {
            if let Out::Write { off, payload, .. } = o {
                let va = self.stores[si].qp.addr + off;
                self.send(
                    si,
                    Op::Write {
                        va,
                        payload: &payload,
                        imm: None,
                    },
                );
            }
        }
        n
    }
}

/// The NACK frame the translator sends the reporter at `to` (Ethernet broadcast, from the
/// translator's address, UDP checksum filled, to port 40044).
fn nack_frame(nack: &NackRepr, to: Ipv4Addr) -> Vec<u8> {
    let n = nack.buffer_len();
    let mut f = vec![0u8; 42 + n];
    nack.emit(&mut f[42..]);
    EthernetRepr {
        src: TRANSLATOR_MAC,
        dst: MacAddr::BROADCAST,
        ethertype: ETHERTYPE_IPV4,
    }
    .emit(&mut EthernetFrame::new_unchecked(&mut f[..]));
    Ipv4Repr {
        src: *TRANSLATOR.ip(),
        dst: to,
        protocol: PROTO_UDP,
        ttl: 64,
        tos: 0,
        ident: 0,
        dont_frag: true,
        payload_len: 8 + n,
    }
    .emit(&mut Ipv4Packet::new_unchecked(&mut f[14..34]));
    let mut u = UdpPacket::new_unchecked(&mut f[34..]);
    UdpRepr {
        src_port: TRANSLATOR.port(),
        dst_port: DTA_NACK_PORT,
        payload_len: n,
    }
    .emit(&mut u);
    u.fill_checksum(*TRANSLATOR.ip(), to);
    f
}

/// Whether a frame is a sketch-column NACK (UDP to port 40044), not a RoCEv2 frame.
pub fn is_nack_frame(f: &[u8]) -> bool {
    f.len() >= 42 && u16::from_be_bytes([f[36], f[37]]) == DTA_NACK_PORT
}

/// The case's `sketch` section: the settings and, per served sketch ID, the switches that
/// report it.
pub(crate) fn sketch_case(spec: &Spec) -> Option<SketchCase> {
    let ids: Vec<u16> = spec
        .stores
        .iter()
        .filter_map(|s| match *s.kind.layout() {
            StoreKind::Sketch { sketch_id, .. } => Some(sketch_id),
            _ => None,
        })
        .collect();
    if ids.is_empty() {
        return None;
    }
    let mut by_id: BTreeMap<u16, Vec<u32>> = ids.iter().map(|&i| (i, Vec::new())).collect();
    for p in &spec.sketch_reports {
        if let Ok(r) = SketchReportRepr::parse(p) {
            if let Some(v) = by_id.get_mut(&r.sketch_id) {
                v.push(r.switch);
            }
        }
    }
    Some(SketchCase {
        expected_switches: spec.sketch_expected,
        max_switches: MAX_SWITCHES,
        switches: by_id
            .into_iter()
            .map(|(sketch_id, mut switches)| {
                switches.sort_unstable();
                switches.dedup();
                SketchSwitches {
                    sketch_id,
                    switches,
                }
            })
            .collect(),
    })
}

/// Rows the Tofino program's wide sketches have (`DTA_SK_ROWS`, default 4).
pub const P4_SK_ROWS: u8 = 4;

/// Why the Tofino program (default `DTA_SK_ROWS`) cannot serve a Sketch store (empty: it can).
pub(crate) fn p4_store_fit(
    kind: &SketchKind,
    rows: u8,
    width: u8,
    batch: u32,
    epochs: u32,
) -> Vec<String> {
    let mut why = Vec::new();
    if batch != 1 {
        why.push(format!(
            "Sketch-Merge batch {batch} (the program writes one column record per WRITE)"
        ));
    }
    if !epochs.is_power_of_two() {
        why.push(format!(
            "{epochs} epoch slots (the program takes 1, 2, 4, 8 or 16)"
        ));
    }
    let op = kind.merge_op();
    let wide = rows == P4_SK_ROWS && width == 4 && matches!(op, MergeOp::Sum | MergeOp::SignedSum);
    let narrow = rows == 1 && matches!(width, 1 | 4);
    if !wide && !narrow {
        why.push(format!(
            "a {} sketch of {rows} rows of {width}-byte cells (the program takes DTA_SK_ROWS rows \
             of 4-byte sum or signed-sum cells, or 1 row of 1- or 4-byte cells)",
            kind.name()
        ));
    }
    why
}

// ------------------------------------------------------------------------------------ cases

fn sketch_store(
    name: &str,
    id: u16,
    kind: SketchKind,
    rows: u8,
    columns: u32,
    batch: u32,
    epochs: u32,
) -> super::StoreConfig {
    store(
        name,
        StoreKindConfig::new(dta_collector::config::sketch_kind(
            id,
            kind,
            Some(rows),
            columns,
            Some(if kind == SketchKind::HyperLogLog {
                1
            } else {
                4
            }),
            Some(batch),
            epochs,
            Default::default(),
        )),
    )
}

/// A switch's sketch of `keys` random keys from a universe of 64 (counts 1..=8).
fn traffic(shape: SketchShape, rng: &mut Rng, keys: usize) -> Sketch {
    let mut s = Sketch::new(shape);
    for _ in 0..keys {
        let k = 0x0A00_0000 + rng.below(64) as u32;
        s.update(
            &Key::new(&k.to_be_bytes()).expect("4-byte key"),
            1 + rng.below(8) as u32,
        );
    }
    s
}

/// The report of column `col` of `s` (one column).
fn col(s: &Sketch, id: u16, switch: u32, epoch: u32, col: u32) -> Vec<u8> {
    cols(s, id, switch, epoch, col, 1)
}

fn cols(s: &Sketch, id: u16, switch: u32, epoch: u32, col: u32, n: u32) -> Vec<u8> {
    s.column_report(id, switch, epoch, col, n)
        .expect("columns inside the sketch")
}

fn shape_of_store(st: &super::StoreConfig) -> SketchShape {
    shape_of(&st.kind).expect("a sketch store")
}

/// Every switch sends every column of its sketch, one per report, the switches interleaved
/// (the order rotates from column to column).
fn interleaved(sk: &[(u32, Sketch)], id: u16, epoch: u32) -> Vec<Vec<u8>> {
    let columns = sk[0].1.shape().columns;
    let mut out = Vec::new();
    for c in 0..columns {
        for i in 0..sk.len() {
            let (sw, s) = &sk[(i + c as usize) % sk.len()];
            out.push(col(s, id, *sw, epoch, c));
        }
    }
    out
}

pub(crate) fn specs(rng: &mut Rng, base: &dyn Fn(String, String) -> Spec) -> Vec<Spec> {
    let mut out = Vec::new();
    let cm = |name: &str, id: u16| sketch_store(name, id, SketchKind::CountMin, 4, 8, 1, 2);
    let switches = [0x0A00_0001u32, 0x0A00_0002, 0x0A00_0003];

    // (a) In order.
    {
        let mut s = base(
            "sketch_in_order".into(),
            "Sketch-Merge, Count-Min 4 rows x 8 columns of 4-byte cells, batch 1, 2 epoch slots, \
             3 expected switches sending one column per report, interleaved: each column is \
             written once, when its third switch is merged"
                .into(),
        );
        s.stores.push(cm("cm", 7));
        s.sketch_expected = 3;
        let shape = shape_of_store(&s.stores[0]);
        let sk: Vec<(u32, Sketch)> = switches
            .iter()
            .map(|&w| (w, traffic(shape, rng, 40)))
            .collect();
        s.sketch_reports = interleaved(&sk, 7, 1);
        out.push(s);
    }
    // (b) Gap -> NACK, resend, a second gap report for the same owed column (no NACK).
    {
        let mut s = base(
            "sketch_gap_nack".into(),
            "Sketch-Merge, Count-Min 4x8, batch 1, 2 expected switches: switch 2 loses column 2; \
             column 3 is NACKed (resend from 2), column 4 naming the same owed column is not \
             NACKed again; switch 2 resends from column 2, loses column 6 and is NACKed for it \
             once more, resends, and every column completes"
                .into(),
        );
        s.stores.push(cm("cm", 7));
        s.sketch_expected = 2;
        let shape = shape_of_store(&s.stores[0]);
        let (a, b) = (traffic(shape, rng, 40), traffic(shape, rng, 40));
        let (wa, wb) = (switches[0], switches[1]);
        let mut r = Vec::new();
        for c in 0..8 {
            r.push(col(&a, 7, wa, 1, c));
        }
        for c in [0, 1, 3, 4, 2, 3, 4, 5, 7, 6, 7] {
            r.push(col(&b, 7, wb, 1, c));
        }
        s.sketch_reports = r;
        out.push(s);
    }
    // (c) Duplicates.
    {
        let mut s = base(
            "sketch_duplicates".into(),
            "Sketch-Merge, Count-Min 4x8, batch 1, 2 expected switches: switch 1 sends every \
             column twice and then its first four again (all duplicates: dropped, counted, never \
             merged twice), switch 2 once"
                .into(),
        );
        s.stores.push(cm("cm", 7));
        s.sketch_expected = 2;
        let shape = shape_of_store(&s.stores[0]);
        let (a, b) = (traffic(shape, rng, 40), traffic(shape, rng, 40));
        let mut r = Vec::new();
        for c in 0..8 {
            r.push(col(&a, 7, switches[0], 1, c));
            r.push(col(&a, 7, switches[0], 1, c));
            r.push(col(&b, 7, switches[1], 1, c));
        }
        for c in 0..4 {
            r.push(col(&a, 7, switches[0], 1, c));
        }
        s.sketch_reports = r;
        out.push(s);
    }
    // (d) Epoch change.
    {
        let mut s = base(
            "sketch_epoch_change".into(),
            "Sketch-Merge, Count-Min 4x8, batch 1, 2 epoch slots, 2 expected switches (quorum \
             2): epochs 1, 2 and 3 each complete (epoch 3 reuses epoch 1's slot); each epoch \
             starts when both switches have sent its first column; a late epoch-1 report after \
             epoch 2 started and a replayed epoch-2 report in epoch 3 are dropped"
                .into(),
        );
        s.stores.push(cm("cm", 7));
        s.sketch_expected = 2;
        let shape = shape_of_store(&s.stores[0]);
        let mut r: Vec<Vec<u8>> = Vec::new();
        for epoch in 1..=3u32 {
            let sk: Vec<(u32, Sketch)> = switches[..2]
                .iter()
                .map(|&w| (w, traffic(shape, rng, 30)))
                .collect();
            let mut e = interleaved(&sk, 7, epoch);
            if epoch > 1 {
                // Behind the first report of the new epoch: a report of the one before.
                let stale = if epoch == 2 {
                    r[r.len() - 1].clone() // epoch 1's last column, late
                } else {
                    e[3].clone() // overwritten below with epoch 2
                };
                let mut stale = stale;
                stale[20..24].copy_from_slice(&(epoch - 1).to_be_bytes());
                e.insert(2, stale); // after both switches' first column: the epoch moved on
            }
            r.extend(e);
        }
        s.sketch_reports = r;
        out.push(s);
    }
    // (e) Sum, max and signed sum in one case.
    {
        let mut s = base(
            "sketch_sum_max_signed".into(),
            "Sketch-Merge, three stores and QPs, 2 expected switches, batch 1: a Count-Min 4x8 \
             (sum), a HyperLogLog of 16 one-byte registers (max) and a Count sketch 4x8 (signed \
             sum, wrapping past i32::MAX and below i32::MIN), reports of the three interleaved"
                .into(),
        );
        s.stores.push(cm("cm", 1));
        s.stores
            .push(sketch_store("hll", 2, SketchKind::HyperLogLog, 1, 16, 1, 4));
        s.stores
            .push(sketch_store("cs", 3, SketchKind::Count, 4, 8, 1, 2));
        s.sketch_expected = 2;
        let shapes: Vec<SketchShape> = s.stores.iter().map(shape_of_store).collect();
        let mut per: Vec<Vec<Vec<u8>>> = Vec::new();
        for (i, (&shape, id)) in shapes.iter().zip([1u16, 2, 3]).enumerate() {
            let mut sk: Vec<(u32, Sketch)> = switches[..2]
                .iter()
                .map(|&w| (w, traffic(shape, rng, 60)))
                .collect();
            if i == 2 {
                // Counters near the ends of i32: their sums wrap.
                for (j, (_, s)) in sk.iter_mut().enumerate() {
                    for (k, c) in s.cells_mut().iter_mut().enumerate().step_by(3) {
                        let big = i32::MAX - (k as i32 * 7) - j as i32;
                        *c = if k % 2 == 0 { big } else { -big - 1 } as u32;
                    }
                }
            }
            per.push(interleaved(&sk, id, 1));
        }
        let longest = per.iter().map(Vec::len).max().unwrap_or(0);
        for i in 0..longest {
            for p in &per {
                if let Some(r) = p.get(i) {
                    s.sketch_reports.push(r.clone());
                }
            }
        }
        out.push(s);
    }
    // (f) Saturation.
    {
        let mut s = base(
            "sketch_saturation".into(),
            "Sketch-Merge, Count-Min 4x8, batch 1, 3 expected switches whose counters are near \
             u32::MAX: the sums saturate at u32::MAX instead of wrapping"
                .into(),
        );
        s.stores.push(cm("cm", 7));
        s.sketch_expected = 3;
        let shape = shape_of_store(&s.stores[0]);
        let sk: Vec<(u32, Sketch)> = switches
            .iter()
            .enumerate()
            .map(|(j, &w)| {
                let mut t = traffic(shape, rng, 20);
                for (k, c) in t.cells_mut().iter_mut().enumerate() {
                    if (k + j) % 3 != 0 {
                        *c = u32::MAX / 2 + (rng.below(1 << 20) as u32) * (k as u32 % 5);
                    }
                }
                (w, t)
            })
            .collect();
        s.sketch_reports = interleaved(&sk, 7, 1);
        out.push(s);
    }
    // (g) Beyond the Tofino program: batches, multi-column reports, an incomplete epoch.
    {
        let mut s = base(
            "sketch_batch4_multicolumn".into(),
            "Sketch-Merge, Count-Min 4x16 written in batches of 4 columns, 2 expected switches \
             sending 3 columns per report (reports straddle batches; a resend overlapping merged \
             columns has only its new columns merged); a gap NACK"
                .into(),
        );
        s.stores
            .push(sketch_store("cm", 7, SketchKind::CountMin, 4, 16, 4, 2));
        s.sketch_expected = 2;
        let shape = shape_of_store(&s.stores[0]);
        let (a, b) = (traffic(shape, rng, 60), traffic(shape, rng, 60));
        let mut r = Vec::new();
        for c in (0..15).step_by(3) {
            r.push(cols(&a, 7, switches[0], 1, c, 3));
        }
        r.push(col(&a, 7, switches[0], 1, 15));
        for c in [0u32, 6, 3, 6, 9, 12] {
            r.push(cols(&b, 7, switches[1], 1, c, 3));
        }
        r.push(cols(&b, 7, switches[1], 1, 13, 3)); // 13, 14 again; 15 new
        s.sketch_reports = r;
        out.push(s);
    }
    {
        let mut s = base(
            "sketch_incomplete_epoch".into(),
            "Sketch-Merge, Count-Min 4x8, batch 1, 2 expected switches: switch 2 stops after 5 \
             columns of epoch 1 (6 of epoch 2); when epoch 2 starts, epoch 1's incomplete columns are written \
             (merged 1 of 2); epoch 2 ends incomplete and is written by the final flush"
                .into(),
        );
        s.stores.push(cm("cm", 7));
        s.sketch_expected = 2;
        let shape = shape_of_store(&s.stores[0]);
        let mut r = Vec::new();
        for epoch in 1..=2u32 {
            let (a, b) = (traffic(shape, rng, 30), traffic(shape, rng, 30));
            for c in 0..8 {
                r.push(col(&a, 7, switches[0], epoch, c));
                if c < 4 + epoch {
                    r.push(col(&b, 7, switches[1], epoch, c));
                }
            }
        }
        s.sketch_reports = r;
        out.push(s);
    }
    // Hostile reports: dropped with no frame.
    {
        let mut s = base(
            "sketch_hostile".into(),
            "Sketch-Merge, Count-Min 4x8, batch 1, 2 expected switches completing the epoch, \
             among reports that must be dropped with no frame: an unknown sketch ID, 2 rows \
             instead of 4, 2-byte cells, merge op max on a Count-Min, a column beyond the sketch \
             and a column count whose cells exceed 1,024 bytes (malformed)"
                .into(),
        );
        s.stores.push(cm("cm", 7));
        s.sketch_expected = 2;
        let shape = shape_of_store(&s.stores[0]);
        let (a, b) = (traffic(shape, rng, 40), traffic(shape, rng, 40));
        let good = col(&a, 7, switches[0], 1, 0);
        let mut hostile = Vec::new();
        let mut unknown = good.clone();
        unknown[8..10].copy_from_slice(&8u16.to_be_bytes());
        hostile.push(unknown);
        let mut rows = good.clone(); // the same 16 bytes as 2 columns of 2 rows
        rows[10] = 2;
        rows[14..16].copy_from_slice(&2u16.to_be_bytes());
        hostile.push(rows);
        let mut width = good.clone(); // the same 16 bytes as 2 columns of 2-byte cells
        width[11] = 2;
        width[14..16].copy_from_slice(&2u16.to_be_bytes());
        hostile.push(width);
        let mut op = good.clone();
        op[12] = MergeOp::Max.code();
        hostile.push(op);
        let mut beyond = good.clone();
        beyond[24..28].copy_from_slice(&8u32.to_be_bytes());
        hostile.push(beyond);
        let mut huge = good.clone();
        huge[14..16].copy_from_slice(&u16::MAX.to_be_bytes());
        hostile.push(huge);
        let mut r = Vec::new();
        for c in 0..8u32 {
            r.push(col(&a, 7, switches[0], 1, c));
            if let Some(h) = hostile.get(c as usize) {
                r.push(h.clone());
            }
            r.push(col(&b, 7, switches[1], 1, c));
        }
        s.sketch_reports = r;
        out.push(s);
    }
    // Issue 28: the epoch moves on by agreement; nothing of a skewed boundary is lost.
    {
        let mut s = base(
            "sketch_epoch_agreement".into(),
            "Sketch-Merge, Count-Min 4x8, batch 1, 4 epoch slots, 3 expected switches (quorum \
             2): switch 1 finishes epoch 10 and sends half of epoch 11 (held: one vote) \
             while switches 2 and 3 still send epoch 10; a spoofed report naming switch 2 in \
             epoch 50 is dropped (one vote for a jump); once switch 2 sends epoch 11 and switch \
             3 has finished epoch 10 the merge moves on; switch 3 then reboots and sends its \
             epoch 0 (re-based onto epoch 11); epoch 11 ends complete"
                .into(),
        );
        s.stores
            .push(sketch_store("cm", 7, SketchKind::CountMin, 4, 8, 1, 4));
        s.sketch_expected = 3;
        let shape = shape_of_store(&s.stores[0]);
        let one: Vec<Sketch> = (0..3).map(|_| traffic(shape, rng, 30)).collect();
        let two: Vec<Sketch> = (0..3).map(|_| traffic(shape, rng, 30)).collect();
        let (w1, w2, w3) = (switches[0], switches[1], switches[2]);
        let mut r = Vec::new();
        for c in 0..4 {
            for (i, &w) in switches.iter().enumerate() {
                r.push(col(&one[i], 7, w, 10, c));
            }
        }
        for c in 4..8 {
            r.push(col(&one[0], 7, w1, 10, c));
        }
        for c in 0..4 {
            r.push(col(&two[0], 7, w1, 11, c)); // held
            r.push(col(&one[1], 7, w2, 10, c + 4));
            if c == 1 {
                r.push(col(&one[0], 7, w2, 50, 0)); // spoofed, far ahead
            }
        }
        r.push(col(&two[1], 7, w2, 11, 0)); // a second vote; switch 3 is still in epoch 10
        for c in 4..8 {
            r.push(col(&one[2], 7, w3, 10, c)); // the merge moves on after the last one
        }
        for c in 1..8 {
            r.push(col(&two[1], 7, w2, 11, c));
        }
        for c in 4..8 {
            r.push(col(&two[0], 7, w1, 11, c));
        }
        for c in 0..8 {
            r.push(col(&two[2], 7, w3, 0, c)); // rebooted: its epoch 0 is the merge's 11
        }
        s.sketch_reports = r;
        out.push(s);
    }
    out
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use dta_proto::sketch::Sketch;
    use dta_proto::wire::sketch::SketchReportRepr;

    use crate::{cases, Modelled};

    /// Each complete epoch in a modelled memory image equals the switches' sketches merged
    /// directly (`Sketch::merge`, not the model's per-cell merge); per switch the first copy of
    /// each column counts (the cases resend columns unchanged).
    fn check_direct_merge(c: &Modelled) -> usize {
        let mut checked = 0;
        for (meta, mem) in c.case.metas.iter().zip(&c.memory) {
            let geometry = dta_proto::geometry::StoreGeometry::try_from(meta).unwrap();
            let dta_proto::geometry::StoreGeometry::Sketch { layout, sketch_id } = geometry else {
                continue;
            };
            assert_eq!(&mem[..64], &layout.encode_header(sketch_id)[..]);
            let shape = layout.shape();
            let rows = shape.rows as usize;
            // epoch -> switch -> column -> cells
            let mut seen: BTreeMap<u32, BTreeMap<u32, BTreeMap<u32, Vec<u32>>>> = BTreeMap::new();
            for p in &c.reports {
                let Ok(r) = SketchReportRepr::parse(p) else {
                    continue;
                };
                if r.sketch_id != sketch_id
                    || r.rows != shape.rows
                    || r.width != shape.width
                    || r.column + r.columns as u32 > shape.columns
                    || r.op != shape.kind.merge_op()
                {
                    continue;
                }
                let w = shape.width.bytes();
                for i in 0..r.columns as u32 {
                    let cells = (0..rows)
                        .map(|row| {
                            let at = (i as usize * rows + row) * w;
                            r.cells[at..at + w]
                                .iter()
                                .fold(0u32, |a, &b| a << 8 | b as u32)
                        })
                        .collect();
                    // The rebooted switch of sketch_epoch_agreement: its epoch 0 is the merge's 11.
                    let rebooted =
                        c.case.name == "sketch_epoch_agreement" && r.switch == 0x0A00_0003;
                    let epoch = if rebooted && r.epoch == 0 {
                        11
                    } else {
                        r.epoch
                    };
                    seen.entry(epoch)
                        .or_default()
                        .entry(r.switch)
                        .or_default()
                        .entry(r.column + i)
                        .or_insert(cells);
                }
            }
            let expected = c.case.sketch.as_ref().unwrap().expected_switches;
            for (epoch, switches) in seen {
                let mut direct = Sketch::new(shape);
                for cols in switches.values() {
                    let mut s = Sketch::new(shape);
                    for (&col, cells) in cols {
                        s.cells_mut()[col as usize * rows..(col as usize + 1) * rows]
                            .copy_from_slice(cells);
                    }
                    direct.merge(&s);
                }
                let mut got = vec![0u32; shape.cells()];
                let mut complete = true;
                for col in 0..shape.columns {
                    let at = layout.column_offset(epoch, col) as usize;
                    let rec = &mem[at..at + layout.column_stride() as usize];
                    let (e, merged, exp) =
                        layout.decode_record(rec, &mut got[col as usize * rows..][..rows]);
                    complete &= e == epoch && merged >= exp && exp == expected;
                }
                if complete && switches.len() == expected as usize {
                    assert_eq!(got, direct.cells(), "{} epoch {epoch}", c.case.name);
                    checked += 1;
                }
            }
        }
        checked
    }

    #[test]
    fn complete_epochs_equal_the_direct_merge() {
        let all = cases().unwrap();
        let mut checked = BTreeMap::new();
        for c in all.iter().filter(|c| c.case.name.starts_with("sketch_")) {
            checked.insert(c.case.name.clone(), check_direct_merge(c));
        }
        for (name, want) in [
            ("sketch_in_order", 1),
            ("sketch_gap_nack", 1),
            ("sketch_duplicates", 1),
            ("sketch_epoch_change", 2), // epoch 3 took epoch 1's slot
            ("sketch_sum_max_signed", 3),
            ("sketch_saturation", 1),
            ("sketch_hostile", 1),
            ("sketch_batch4_multicolumn", 1),
        ] {
            assert_eq!(checked[name], want, "{name}: {checked:?}");
        }
        // Epoch 10 from its three switches' sketches although switch 1 sent half of epoch 11
        // before the others had finished; epoch 11 complete from switches 1, 2 and the
        // rebooted switch 3's epoch 0.
        assert_eq!(checked["sketch_epoch_agreement"], 2, "{checked:?}");
    }

    #[test]
    fn saturation_and_wrapping_happen() {
        let all = cases().unwrap();
        let sat = all
            .iter()
            .find(|c| c.case.name == "sketch_saturation")
            .unwrap();
        let words: Vec<u32> = sat.memory[0][64..]
            .chunks_exact(4)
            .map(|b| u32::from_le_bytes(b.try_into().unwrap()))
            .collect();
        assert!(words.iter().filter(|&&w| w == u32::MAX).count() >= 8);
        let mixed = all
            .iter()
            .find(|c| c.case.name == "sketch_sum_max_signed")
            .unwrap();
        // The Count sketch's merged cells are the wrapped sums of the switches' cells, and
        // some sums left the i32 range (each switch sends each column once in this case).
        let mut sums = vec![0i64; 32];
        for p in &mixed.reports {
            let r = SketchReportRepr::parse(p).unwrap();
            if r.sketch_id == 3 {
                for (row, b) in r.cells.chunks_exact(4).enumerate() {
                    sums[r.column as usize * 4 + row] +=
                        i32::from_be_bytes(b.try_into().unwrap()) as i64;
                }
            }
        }
        let cs: Vec<i32> = mixed.memory[2][64 + 8 * 32..64 + 16 * 32] // epoch 1: slot 1
            .chunks_exact(32)
            .flat_map(|rec| {
                rec[8..24]
                    .chunks_exact(4)
                    .map(|b| i32::from_le_bytes(b.try_into().unwrap()))
            })
            .collect();
        assert_eq!(cs, sums.iter().map(|&v| v as i32).collect::<Vec<_>>());
        assert!(sums.iter().any(|&v| v > i32::MAX as i64));
        assert!(sums.iter().any(|&v| v < i32::MIN as i64));
    }
}
