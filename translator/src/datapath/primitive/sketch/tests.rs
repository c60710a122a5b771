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
fn run_timers(p: &mut Pipeline, from: u64, to: u64, mem: &mut [u8]) -> Vec<(Ipv4Addr, NackRepr)> {
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
        // The epochs' ends: quiet long enough for the straggler rounds to run out (they
        // start again whenever the current epoch merges something).
        if round % 40 == 39 {
            run_timers(&mut p, now + MS, now + 20 * MS, &mut mem);
            now += 20 * MS;
        }
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

/// A fleet streaming slower than the flush delay is NACKed as stragglers between its reports;
/// those rounds were counted against the epoch's budget, so a last column lost after the
/// 16th quiet gap was never asked for again (the end-to-end Tofino-reporter test stalled
/// on a loaded machine with one column one switch short).
#[test]
fn a_slow_fleet_does_not_spend_the_straggler_rounds_before_a_last_column_is_lost() {
    let mut p = pipeline(2, 16);
    let mut mem = vec![0u8; 1 << 16];
    let (a, b) = (switch_sketch(1), switch_sketch(2));
    let mut direct = a.clone();
    direct.merge(&b);
    let (ip1, ip2) = (Ipv4Addr::new(10, 0, 0, 1), Ipv4Addr::new(10, 0, 0, 2));
    // 2 columns a report, one report each every 3 flush delays: 32 quiet gaps, each a
    // straggler round. Switch 2's last report (columns 62 and 63) is lost.
    let mut now = 0;
    for i in 0..32u32 {
        let mut bufs = vec![(report(&a, 1, 1, 2 * i, 2), ip1)];
        if i < 31 {
            bufs.push((report(&b, 2, 1, 2 * i, 2), ip2));
        }
        feed_from(&mut p, now, &bufs, &mut mem);
        run_timers(&mut p, now + MS, now + 2 * MS, &mut mem);
        now += 3 * MS;
    }
    assert!(
        p.counters().sketch_straggler_nacks >= 16,
        "{:?}",
        p.counters()
    );
    let nacks = run_timers(&mut p, now, now + 5 * MS, &mut mem);
    assert!(
        nacks.contains(&(
            ip2,
            NackRepr::SketchColumn {
                sketch_id: 7,
                switch: 2,
                epoch: 1,
                expected_column: 62
            }
        )),
        "switch 2 is asked for its last columns: {nacks:?}"
    );
    feed_from(
        &mut p,
        now + 6 * MS,
        &[(report(&b, 2, 1, 62, 2), ip2)],
        &mut mem,
    );
    run_timers(&mut p, now + 7 * MS, now + 10 * MS, &mut mem);
    let (cells, merged) = read_back(&mem, 1);
    assert!(merged.iter().all(|&m| m == 2), "{merged:?}");
    assert_eq!(cells, direct.cells());
}

/// Epoch after epoch with new counts each time, the next epoch's first columns merged while
/// the current one is finishing (held): every epoch's records are that epoch's merge alone,
/// nothing carried over from the epoch that used the buffer before (buffers are cleared
/// lazily, batch by batch as merges reach them).
#[test]
fn reused_merge_buffers_start_every_epoch_from_zero() {
    let mut p = pipeline(2, 16);
    let mut mem = vec![0u8; 1 << 16];
    // 5 columns per report: reports straddle batches of 8.
    let reports = |s: &Sketch, switch: u32, epoch: u32, cols: std::ops::Range<u32>| {
        cols.step_by(5)
            .map(|col| report(s, switch, epoch, col, 5.min(64 - col) as u16))
            .collect::<Vec<_>>()
    };
    let mut now = 0;
    for epoch in 1..=7u32 {
        let a = switch_sketch(epoch * 10);
        let b = switch_sketch(epoch * 10 + 1);
        let a_next = switch_sketch(epoch * 10 + 10);
        // A finishes the epoch, B half of it; A starts the next (held); B finishes.
        let mut bufs = reports(&a, 1, epoch, 0..64);
        bufs.extend(reports(&b, 2, epoch, 0..30));
        if epoch > 1 {
            // A's first columns of this epoch were sent (held) in the round before.
            bufs.drain(..4);
        }
        bufs.extend(reports(&a_next, 1, epoch + 1, 0..20));
        bufs.extend(reports(&b, 2, epoch, 30..64));
        now += 10;
        assert!(feed(&mut p, now, &bufs, &mut mem).is_empty());
        let mut direct = a.clone();
        direct.merge(&b);
        let (cells, merged) = read_back(&mem, epoch);
        assert_eq!(cells, direct.cells(), "epoch {epoch}");
        assert!(merged.iter().all(|&m| m == 2), "epoch {epoch}: {merged:?}");
    }
    let c = p.counters();
    assert_eq!(c.dropped(), 0, "{c:?}");
    assert!(c.sketch_columns_held > 0 && c.sketch_epochs >= 7, "{c:?}");
}

/// The eight-wide counts of merged switches (one more merged, complete columns) equal the
/// column-by-column ones, for every segment length (whole chunks and remainders) and counts
/// at, below and above the expected one and at the saturation bound.
#[test]
fn counting_merged_columns_by_eight_equals_one_by_one() {
    let mut x = 0x2545_F491_4F6C_DD1Du64;
    for len in 0..=40usize {
        for expected in [1u16, 2, 3, u16::MAX] {
            let mut merged: Vec<u16> = (0..len)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    match x % 4 {
                        0 => expected.wrapping_sub(1),
                        1 => expected,
                        2 => u16::MAX,
                        _ => (x >> 8) as u16 % 4,
                    }
                })
                .collect();
            let mut want = merged.clone();
            let n: u32 = want
                .iter_mut()
                .map(|m| {
                    *m = m.saturating_add(1);
                    u32::from(*m == expected)
                })
                .sum();
            let at_least = merged.iter().filter(|&&m| m >= expected).count() as u32;
            assert_eq!(count_complete(&mut merged, expected), at_least, "len {len}");
            assert_eq!(count_merge(&mut merged, expected), n, "len {len}");
            assert_eq!(merged, want, "len {len}");
        }
    }
}
