//! Issue 28, part 3: counters in one unit.
//!
//! Every report received is, at any moment, `translated`, pending (an Append batch, a postcard
//! cache entry, the high-priority backlog) or dropped under exactly one `drop_*` reason:
//! `rx_datagrams == translated + dropped() + pending_reports()` (one worker, no INT). Frames
//! have counters of their own. Before, a report whose frames the QP refused was counted in
//! both units: a Key-Write of N = 4 without a retransmission ring and a transmit batch with
//! room for two frames was 1 `translated` + 2 `drop_qp_queue_full` (one per frame refused),
//! an Append batch whose WRITE was refused was 16 `translated` + 1 dropped, and a Sketch-Merge
//! batch whose WRITE was refused was marked written and never written.
//!
//! The property test drives every primitive through the configurations that change the path
//! a frame takes (no ring, a small transmit batch, a small ring with a stalled collector, a
//! QP broken by silence, shutdown flushes) and checks the identity after every step.

use std::net::{Ipv4Addr, SocketAddrV4};

use dta_collector::config::{StoreConfig, StoreKindConfig};
use dta_proto::batch::{Datagram, TxBatch};
use dta_proto::hash::HashProfile;
use dta_proto::layout::AppendFormat;
use dta_proto::meta::StoreKind;
use dta_proto::sketch::{Sketch, SketchKind, SketchLayout, SketchShape};
use dta_proto::wire::report::{Primitive, Profile, Report, ReportHeader};
use dta_proto::wire::roce::RocePacket;
use dta_proto::{Key, Value};
use dta_tests::harness::{extended_header, Harness, HarnessOptions};
use dta_translator::datapath::pipeline::{single_store_pipeline_with, Pipeline};
use dta_translator::datapath::primitive::SketchSettings;
use proptest::prelude::*;

const MS: u64 = 1_000_000;
/// Where `single_store_pipeline` places its store.
const BASE: u64 = 0x7f00_0000_0000;

fn encode(r: &Report) -> Vec<u8> {
    let mut b = vec![0u8; 128];
    let n = r.emit(Profile::Extended, &mut b).unwrap();
    b.truncate(n);
    b
}

/// Hands `payloads` to `p` at `now`, one burst.
fn feed(p: &mut Pipeline, now: u64, payloads: &[Vec<u8>], tx: &mut TxBatch) {
    let src = SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 9), 5000);
    let dst = SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 101), 40040);
    let burst: Vec<Datagram<'_>> = payloads
        .iter()
        .map(|b| Datagram {
            src,
            dst,
            ip: None,
            payload: b,
        })
        .collect();
    p.handle_reports(now, &burst, tx);
}

/// `rx_datagrams == translated + dropped + pending`, with the counters in the message.
fn assert_identity(p: &Pipeline, what: &str) {
    let c = p.counters();
    assert_eq!(
        c.rx_datagrams + c.int_derived(),
        c.translated + c.dropped() + p.pending_reports(),
        "{what}: every report counted once: {c:?}"
    );
}

/// A transmit batch of `frames` frames already holding `full` of them (a batch the worker
/// has not sent yet).
fn batch(frames: usize, full: usize) -> TxBatch {
    let mut tx = TxBatch::new(frames, 2048);
    let to = SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 1), 9);
    for _ in 0..full {
        assert!(tx.push_with(to, 0, |b| {
            b[..4].fill(0);
            4
        }));
    }
    tx
}

#[test]
fn a_keywrite_refused_for_want_of_room_counts_once_and_sends_nothing() {
    // No ring: a frame that does not fit in the transmit batch cannot wait anywhere.
    let mut p = single_store_pipeline_with(
        StoreKind::KeyWrite {
            slots: 1024,
            slot_size: 16,
            hash: HashProfile::Independent,
        },
        |c| c.qp.retransmit_window = 0,
    );
    let r = Report {
        header: extended_header(0),
        primitive: Primitive::KeyWrite {
            redundancy: 4,
            key: Key::new(&[1, 2, 3, 4]).unwrap(),
            value: Value::new(&[9; 8]).unwrap(),
        },
    };
    // Room for 2 of its 4 frames.
    let mut tx = batch(2, 0);
    feed(&mut p, 1, &[encode(&r)], &mut tx);
    assert_identity(&p, "a Key-Write of N = 4, room for 2 frames");
    assert_eq!(
        tx.len(),
        0,
        "a report is refused whole: no half-sent Key-Write"
    );
    let c = p.counters();
    assert_eq!((c.drop_qp_queue_full, c.frames_dropped_queue_full), (1, 0));
    // With room it goes out whole.
    let mut tx = batch(64, 0);
    feed(&mut p, 2, &[encode(&r)], &mut tx);
    assert_identity(&p, "then with room");
    assert_eq!((tx.len(), p.counters().translated), (4, 1));
}

fn append_kind() -> StoreKind {
    StoreKind::Append {
        lists: 4,
        first_list: 0,
        capacity: 256,
        entry_size: 4,
        batch: 16,
        format: AppendFormat::Sequenced,
        list_stride: 4096,
    }
}

fn append_report(i: u32) -> Report {
    Report {
        header: extended_header(0),
        primitive: Primitive::Append {
            list: 1,
            value: Value::new(&i.to_be_bytes()).unwrap(),
        },
    }
}

#[test]
fn an_append_batch_refused_for_want_of_room_counts_its_reports_once() {
    let mut p = single_store_pipeline_with(append_kind(), |c| {
        c.l2_frames = false;
        c.qp.retransmit_window = 0;
    });
    let first: Vec<Vec<u8>> = (0..15).map(|i| encode(&append_report(i))).collect();
    let mut tx = batch(256, 0);
    feed(&mut p, 1, &first, &mut tx);
    assert_eq!(p.pending_reports(), 15);
    assert_identity(&p, "15 entries pending");
    // The 16th fills the batch while the transmit batch is full.
    let mut tx = batch(8, 8);
    feed(&mut p, 2, &[encode(&append_report(15))], &mut tx);
    assert_identity(&p, "the 16th report, no room for its batch");
    assert_eq!(tx.len(), 8, "nothing was written");
    // The flush delay writes the 15 that waited.
    let mut tx = batch(256, 0);
    p.poll(10 * MS, &mut tx);
    assert_identity(&p, "after the flush delay");
    assert_eq!(p.pending_reports(), 0);
    let c = p.counters();
    assert_eq!((c.translated, c.drop_qp_queue_full), (15, 1), "{c:?}");
    assert_eq!(c.frames, 1);
}

/// A HyperLogLog of 16,384 one-byte registers, one column per WRITE, one expected switch.
fn hll_pipeline() -> Pipeline {
    single_store_pipeline_with(
        StoreKind::Sketch {
            sketch_id: 7,
            sketch: SketchKind::HyperLogLog,
            rows: 1,
            columns: 16384,
            cell_width: 1,
            batch: 1,
            epochs: 2,
            hash: Default::default(),
        },
        |c| {
            c.l2_frames = false;
            c.qp.retransmit_window = 0;
            c.sketch = SketchSettings {
                expected_switches: 1,
                max_switches: 4,
                flush_ns: MS,
                ..SketchSettings::default()
            };
        },
    )
}

/// Applies the WRITEs in `tx` to `mem` (offsets from [`BASE`]).
fn apply(tx: &TxBatch, mem: &mut [u8]) -> usize {
    let mut n = 0;
    for (_, payload) in tx.iter_payloads() {
        let Ok(pkt) = RocePacket::parse(payload) else {
            continue;
        };
        if let Some(reth) = pkt.reth {
            let at = (reth.va - BASE) as usize;
            mem[at..at + pkt.payload.len()].copy_from_slice(pkt.payload);
            n += 1;
        }
    }
    n
}

#[test]
fn a_sketch_batch_its_qp_refused_stays_dirty_and_is_written_later() {
    let mut p = hll_pipeline();
    let shape = SketchShape::new(SketchKind::HyperLogLog, 1, 16384, 1).unwrap();
    let layout = SketchLayout::new(shape, 1, 2).unwrap();
    let mut s = Sketch::new(shape);
    for k in 0..50_000u32 {
        s.update(&Key::new(&k.to_be_bytes()).unwrap(), 1);
    }
    let mut mem = vec![0u8; 1 << 20];
    // Epoch 1: 1,024 columns complete 1,024 batches; 32 are written at once, the rest are
    // left for the next poll (which the test does not run).
    let mut tx = batch(4096, 0);
    feed(
        &mut p,
        1,
        &[s.column_report(7, 1, 1, 0, 1024).unwrap()],
        &mut tx,
    );
    assert_eq!(apply(&tx, &mut mem), 32);
    // Epoch 2 starts: the 992 batches epoch 1 left go first, which leaves room in the
    // transmit batch for only 8 of the 32 batches the report completes at once.
    let mut tx = batch(1000, 0);
    feed(
        &mut p,
        2,
        &[s.column_report(7, 1, 2, 0, 1024).unwrap()],
        &mut tx,
    );
    assert_eq!(apply(&tx, &mut mem), 1000);
    assert_identity(&p, "epoch 2's report");
    // The 24 batches there was no room for are refused (counted as frames) or, since the
    // epoch-agreement rules hold the report until the epoch moves on, deferred before any
    // WRITE is tried; either way the report was merged (translated) and none is lost (below).
    let c = p.counters();
    assert!(c.frames_dropped_queue_full <= 24, "{c:?}");
    assert_eq!(c.translated, 2, "{c:?}");
    // Polls (with room) write every batch of epoch 2, the refused ones included.
    for t in 3..200 {
        let mut tx = batch(4096, 0);
        p.poll(t, &mut tx);
        apply(&tx, &mut mem);
        if p.next_deadline().is_none_or(|d| d > t) {
            break;
        }
    }
    let missing: Vec<u32> = (0..1024u32)
        .filter(|&col| {
            let rec = &mem[layout.batch_offset(2, col) as usize..][..12];
            u32::from_le_bytes(rec[..4].try_into().unwrap()) != 2
                || rec[8] as u32 != s.cells()[col as usize]
        })
        .collect();
    assert!(
        missing.is_empty(),
        "{} columns of epoch 2 never written (first {:?}): {:?}",
        missing.len(),
        &missing[..missing.len().min(4)],
        p.counters()
    );
}

// ---------------------------------------------------------------------------------------
// The property test.

/// One report of the test's mix.
#[derive(Debug, Clone)]
enum Spec {
    KeyWrite {
        key: u16,
        n: u8,
        imm: bool,
    },
    KeyIncrement {
        key: u16,
        n: u8,
        imm: bool,
    },
    Append {
        list: u8,
        imm: bool,
    },
    Postcard {
        flow: u8,
        hop: u8,
        path_len: u8,
    },
    /// Columns from `column`, or (`None`) from the next its switch owes in that epoch.
    Sketch {
        switch: u8,
        epoch: u8,
        column: Option<u8>,
        columns: u8,
    },
    /// A datagram too short to be a report.
    Truncated,
}

/// What happens between checks.
#[derive(Debug, Clone)]
enum Step {
    Burst(Vec<Spec>),
    Advance(u64),
    /// The collector stops answering: frames wait in its receive queue, or are lost.
    Stall {
        drops: bool,
    },
    Resume,
    /// A clean shutdown's flush (bounded: a QP that cannot take everything keeps the rest).
    Flush,
}

fn spec() -> impl Strategy<Value = Spec> {
    prop_oneof![
        2 => (any::<u16>(), redundancy(), any::<bool>())
            .prop_map(|(key, n, imm)| Spec::KeyWrite { key, n, imm }),
        2 => (any::<u16>(), redundancy(), any::<bool>())
            .prop_map(|(key, n, imm)| Spec::KeyIncrement { key, n, imm }),
        2 => (0u8..10, any::<bool>()).prop_map(|(list, imm)| Spec::Append { list, imm }),
        // A hop at or past its path length cannot be encoded (it is `Malformed` on the wire);
        // hop 4 of a path of unknown length is outside the store's 4 hops (`bad_hop`).
        2 => (0u8..16, 0u8..5, 0u8..5).prop_map(|(flow, hop, path_len)| Spec::Postcard {
            flow,
            hop: if path_len == 0 { hop } else { hop % path_len },
            path_len
        }),
        3 => (0u8..3, 0u8..3, prop::option::weighted(0.2, 0u8..64), 1u8..=24).prop_map(
            |(switch, epoch, column, columns)| Spec::Sketch {
                switch,
                epoch,
                column,
                columns,
            }
        ),
        1 => Just(Spec::Truncated),
    ]
}

/// Mostly the N the stores are written with (2), sometimes another (dropped).
fn redundancy() -> impl Strategy<Value = u8> {
    prop_oneof![3 => Just(2u8), 1 => 1u8..=3]
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        6 => proptest::collection::vec(spec(), 1..80).prop_map(Step::Burst),
        3 => (0u64..60 * MS).prop_map(Step::Advance),
        1 => any::<bool>().prop_map(|drops| Step::Stall { drops }),
        1 => Just(Step::Resume),
        1 => Just(Step::Flush),
    ]
}

/// The five stores: Key-Write and Key-Increment written with N = 2, Append, Postcarding
/// (N = 2) and a Count-Min sketch.
fn stores() -> Vec<StoreConfig> {
    let store = |name: &str, kind| StoreConfig {
        name: name.into(),
        port: None,
        cm_allow: None,
        kind,
    };
    vec![
        store(
            "kw",
            StoreKindConfig::new(StoreKind::KeyWrite {
                slots: 4096,
                slot_size: 16,
                hash: HashProfile::Independent,
            })
            .with_redundancy(2),
        ),
        store(
            "ki",
            StoreKindConfig::new(StoreKind::KeyIncrement {
                slots: 4096,
                hash: HashProfile::Independent,
            })
            .with_redundancy(2),
        ),
        store(
            "ap",
            StoreKindConfig::new(StoreKind::Append {
                lists: 8,
                first_list: 0,
                capacity: 64,
                entry_size: 4,
                batch: 4,
                format: AppendFormat::Sequenced,
                list_stride: 0,
            }),
        ),
        store(
            "pc",
            StoreKindConfig::new(StoreKind::Postcard {
                chunks: 1024,
                hops: 4,
                hash: HashProfile::Independent,
            })
            .with_redundancy(2),
        ),
        store(
            "sk",
            StoreKindConfig::new(dta_collector::config::sketch_kind(
                7,
                SketchKind::CountMin,
                Some(4),
                64,
                None,
                Some(8),
                2,
                Default::default(),
            )),
        ),
    ]
}

fn sketch_shape() -> SketchShape {
    SketchShape::new(SketchKind::CountMin, 4, 64, 4).unwrap()
}

/// The next column each (switch, epoch) owes, as the test's switches see it.
type Owed = std::collections::HashMap<(u8, u8), u32>;

fn payload(s: &Spec, sketch: &Sketch, owed: &mut Owed) -> Vec<u8> {
    let r = |primitive, immediate| {
        let header = ReportHeader {
            immediate,
            ..extended_header(0)
        };
        encode(&Report { header, primitive })
    };
    match *s {
        Spec::KeyWrite { key, n, imm } => r(
            Primitive::KeyWrite {
                redundancy: n,
                key: Key::new(&key.to_be_bytes()).unwrap(),
                value: Value::new(&[key as u8; 8]).unwrap(),
            },
            imm,
        ),
        Spec::KeyIncrement { key, n, imm } => r(
            Primitive::KeyIncrement {
                redundancy: n,
                key: Key::new(&key.to_be_bytes()).unwrap(),
                delta: 1 + key as u64,
            },
            imm,
        ),
        Spec::Append { list, imm } => r(
            Primitive::Append {
                list: list as u32,
                value: Value::new(&[list; 4]).unwrap(),
            },
            imm,
        ),
        Spec::Postcard {
            flow,
            hop,
            path_len,
        } => r(
            Primitive::Postcard {
                flow: Key::new(&[flow, 1, 2, 3]).unwrap(),
                hop,
                path_len,
                value: 100 + hop as u32,
            },
            false,
        ),
        Spec::Sketch {
            switch,
            epoch,
            column,
            columns,
        } => {
            let next = owed.entry((switch, epoch)).or_insert(0);
            let column = column.map_or(*next % 64, u32::from);
            let n = (columns as u32).min(64 - column);
            *next = column + n;
            sketch
                .column_report(7, switch as u32, 1 + epoch as u32, column, n)
                .unwrap()
        }
        Spec::Truncated => vec![0x20],
    }
}

/// How the QPs and the worker's transmit batch are set up.
#[derive(Debug, Clone, Copy)]
struct Setup {
    /// `retransmit_window` (0: no ring).
    window: u32,
    /// Frames per transmit batch.
    tx_frames: usize,
    /// PSNs a QP may have unconfirmed.
    max_outstanding: u32,
}

fn setup() -> impl Strategy<Value = Setup> {
    (
        prop_oneof![Just(0u32), Just(16), Just(1024)],
        prop_oneof![Just(3usize), Just(12), Just(4096)],
        prop_oneof![Just(64u32), Just(1 << 20)],
    )
        .prop_map(|(window, tx_frames, max_outstanding)| Setup {
            window,
            tx_frames,
            max_outstanding,
        })
}

fn run(setup: Setup, steps: &[Step]) {
    let o = HarnessOptions::default();
    let mut h = Harness::new(
        stores(),
        HarnessOptions {
            tx_frames: setup.tx_frames,
            // 8 cache slots for 16 flows: evictions.
            postcard_cache_slots: 8,
            postcard_flush_ns: 5 * MS,
            qp: dta_translator::datapath::qp::QpTuning {
                retransmit_window: setup.window,
                max_outstanding: setup.max_outstanding,
                rto_max_ns: 10 * MS,
                // A stall of a few steps breaks the QP (nothing reconnects it here).
                broken_after_ns: 40 * MS,
                ..o.qp
            },
            sketch: SketchSettings {
                expected_switches: 2,
                max_switches: 8,
                flush_ns: 5 * MS,
                ..SketchSettings::default()
            },
            ..o
        },
    );
    let mut sketch = Sketch::new(sketch_shape());
    for k in 0..500u32 {
        sketch.update(&Key::new(&k.to_be_bytes()).unwrap(), 1);
    }
    let mut owed = Owed::new();
    for (i, s) in steps.iter().enumerate() {
        match s {
            Step::Burst(specs) => {
                let bufs: Vec<Vec<u8>> = specs
                    .iter()
                    .map(|s| payload(s, &sketch, &mut owed))
                    .collect();
                let refs: Vec<&[u8]> = bufs.iter().map(|b| b.as_slice()).collect();
                h.send_raw(&refs);
            }
            Step::Advance(ns) => h.advance(*ns),
            Step::Stall { drops } => {
                h.imp.stalled = true;
                h.imp.stall_drops = *drops;
            }
            Step::Resume => h.resume(),
            Step::Flush => {
                h.flush_for(32);
            }
        }
        assert_identity(&h.pipeline, &format!("{setup:?}, step {i} ({s:?})"));
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    #[test]
    fn every_report_is_counted_once_on_every_path(
        setup in setup(),
        steps in proptest::collection::vec(step(), 1..24),
    ) {
        run(setup, &steps);
    }
}
