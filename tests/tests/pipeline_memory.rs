//! In-memory end-to-end tests: every primitive's memory result against an independent model.

use dta_collector::config::{StoreConfig, StoreKindConfig};
use dta_proto::hash::HashProfile;
use dta_proto::layout::AppendFormat;
use dta_proto::wire::report::{Primitive, Priority, Profile, Report};
use dta_proto::{Key, Value};
use dta_tests::harness::{extended_header, keywrite_store, Harness, HarnessOptions};

fn append_store(lists: u32, capacity: u32, batch: u32, entry: u32) -> StoreConfig {
    StoreConfig {
        name: "ap".into(),
        port: None,
        cm_allow: None,
        kind: StoreKindConfig::new(StoreKind::Append {
            lists,
            first_list: 0,
            capacity,
            entry_size: entry,
            batch,
            format: AppendFormat::Sequenced,
            list_stride: 0,
        }),
    }
}

#[test]
fn keywrite_lands_and_acks_flow() {
    let mut h = Harness::new(
        vec![keywrite_store(1 << 16, 8, 2)],
        HarnessOptions::default(),
    );
    let reports: Vec<Report> = (0..1000u32)
        .map(|i| Report {
            header: extended_header(0),
            primitive: Primitive::KeyWrite {
                redundancy: 2,
                key: Key::new(&i.to_be_bytes()).unwrap(),
                value: Value::new(&(i * 3).to_le_bytes()).unwrap(),
            },
        })
        .collect();
    h.send(&reports, Profile::Extended);
    h.advance(10_000_000);
    let c = h.pipeline.counters();
    assert_eq!(c.translated, 1000, "{c:?}");
    assert_eq!(c.frames, 2000);
    let k = h.rnic.counters();
    assert_eq!(k.writes, 2000, "{k:?}");
    assert_eq!(k.duplicate_request, 0, "{k:?}");
    assert_eq!(k.out_of_seq_request, 0, "{k:?}");
    for (_, _, q) in h.pipeline.qp_stats() {
        assert_eq!(q.retransmitted_frames, 0, "{q:?}");
        assert_eq!(q.probes, 0, "{q:?}");
        assert!(q.acks > 0, "{q:?}");
    }
}

#[test]
fn append_in_order_across_wraps() {
    let mut h = Harness::new(vec![append_store(2, 64, 4, 4)], HarnessOptions::default());
    let reports: Vec<Report> = (0..1000u32)
        .map(|i| Report {
            header: extended_header(0),
            primitive: Primitive::Append {
                list: i % 2,
                value: Value::new(&i.to_le_bytes()).unwrap(),
            },
        })
        .collect();
    h.send(&reports, Profile::Extended);
    h.flush();
    let c = h.pipeline.counters();
    assert_eq!(c.translated, 1000, "{c:?}");
    assert_eq!(h.rnic.counters().writes, 250);
}

use dta_proto::hash::{KeyHasher, PostcardHasher, MAX_REDUNDANCY};
use dta_proto::layout::{CounterLayout, PostcardLayout};
use dta_proto::meta::StoreKind;
use dta_proto::wire::nack::NackRepr;
use dta_translator::datapath::pipeline::RateLimit;

fn store(name: &str, kind: StoreKindConfig) -> StoreConfig {
    StoreConfig {
        name: name.into(),
        port: None,
        cm_allow: None,
        kind,
    }
}

fn pc_store(chunks: u32, hops: u8) -> StoreConfig {
    store(
        "pc",
        StoreKindConfig::new(StoreKind::Postcard {
            chunks,
            hops,
            hash: HashProfile::Independent,
        })
        .with_redundancy(1),
    )
}

/// The chunk a complete or partial path must produce, built from `proto` alone.
fn model_chunk(
    h: &PostcardHasher,
    l: &PostcardLayout,
    flow: &Key,
    values: &[Option<u32>],
    hops: usize,
) -> Vec<u8> {
    let mut c = vec![0u8; l.chunk_size() as usize];
    for hop in 0..hops {
        let w = match values.get(hop).copied().flatten() {
            Some(v) => h.encode(flow, hop, v).unwrap(),
            None => h.encode_blank(flow, hop),
        };
        c[4 * hop..4 * hop + 4].copy_from_slice(&w);
    }
    c
}

#[test]
fn postcards_for_paths_of_every_length_land_as_chunks() {
    const B: u8 = 5;
    let mut h = Harness::new(vec![pc_store(1 << 12, B)], HarnessOptions::default());
    let hasher = PostcardHasher::new(HashProfile::Independent, 1 << 12, 1024, B).unwrap();
    let layout = PostcardLayout::new(1 << 12, B).unwrap();
    let mut expect = Vec::new();
    for len in 1..=B {
        for f in 0..20u32 {
            let flow =
                Key::new(&[len, (f >> 8) as u8, f as u8, 9, 9, 9, 9, 9, 9, 9, 9, 9, 17]).unwrap();
            let vals: Vec<u32> = (0..len as u32).map(|hop| 100 + hop * 7 + f).collect();
            // Hops arrive out of order; the path length is carried in every postcard.
            let reports: Vec<Report> = (0..len)
                .rev()
                .map(|hop| Report {
                    header: extended_header(0),
                    primitive: Primitive::Postcard {
                        flow,
                        hop,
                        path_len: len,
                        value: vals[hop as usize],
                    },
                })
                .collect();
            h.send(&reports, Profile::Extended);
            let v: Vec<Option<u32>> = vals.iter().map(|&x| Some(x)).collect();
            expect.push((flow, model_chunk(&hasher, &layout, &flow, &v, B as usize)));
        }
    }
    let c = *h.pipeline.counters();
    assert_eq!(c.postcard_emits, 100, "{c:?}");
    assert_eq!(
        h.pipeline.pending_reports(),
        0,
        "emitted as soon as the path was complete"
    );
    let region = h.region("pc");
    let mut overwritten = 0;
    for (flow, want) in &expect {
        let mut got = vec![0u8; want.len()];
        region
            .read(layout.chunk_offset(hasher.chunk(flow, 0)), &mut got)
            .unwrap();
        if &got != want {
            overwritten += 1;
        }
    }
    // 100 chunks in 4096 slots: a few may share a slot; the later write wins.
    assert!(
        overwritten <= 5,
        "{overwritten} chunks differ from the model"
    );
}

#[test]
fn postcard_collision_flushes_the_old_flow_to_its_own_chunk() {
    const B: u8 = 5;
    let mut h = Harness::new(
        vec![pc_store(1 << 10, B)],
        HarnessOptions {
            postcard_cache_slots: 1,
            ..HarnessOptions::default()
        },
    );
    let hasher = PostcardHasher::new(HashProfile::Independent, 1 << 10, 1, B).unwrap();
    let layout = PostcardLayout::new(1 << 10, B).unwrap();
    let a = Key::new(b"flow-a-5tuple").unwrap();
    let b = Key::new(b"flow-b-5tuple").unwrap();
    let pc = |flow, hop, value| Report {
        header: extended_header(0),
        primitive: Primitive::Postcard {
            flow,
            hop,
            path_len: 0,
            value,
        },
    };
    // Flow a gets hops 0 and 1, then flow b takes the only cache slot.
    h.send(
        &[pc(a, 0, 11), pc(a, 1, 12), pc(b, 0, 21)],
        Profile::Extended,
    );
    assert_eq!(h.pipeline.counters().postcard_evictions, 1);
    let region = h.region("pc");
    let mut got = vec![0u8; layout.chunk_size() as usize];
    region
        .read(layout.chunk_offset(hasher.chunk(&a, 0)), &mut got)
        .unwrap();
    assert_eq!(
        got,
        model_chunk(&hasher, &layout, &a, &[Some(11), Some(12)], B as usize),
        "a's partial path at a's chunk"
    );
    if hasher.chunk(&a, 0) != hasher.chunk(&b, 0) {
        region
            .read(layout.chunk_offset(hasher.chunk(&b, 0)), &mut got)
            .unwrap();
        assert!(
            got.iter().all(|&x| x == 0),
            "nothing written to b's chunk yet"
        );
    }
    h.flush();
    region
        .read(layout.chunk_offset(hasher.chunk(&b, 0)), &mut got)
        .unwrap();
    assert_eq!(
        got,
        model_chunk(&hasher, &layout, &b, &[Some(21)], B as usize)
    );
}

#[test]
fn key_increment_sums_equal_sent_totals() {
    let mut h = Harness::new(
        vec![store(
            "ctr",
            StoreKindConfig::new(StoreKind::KeyIncrement {
                slots: 1 << 16,
                hash: HashProfile::Independent,
            })
            .with_redundancy(1),
        )],
        HarnessOptions::default(),
    );
    let hasher = KeyHasher::new(HashProfile::Independent, 1 << 16).unwrap();
    let layout = CounterLayout::new(1 << 16).unwrap();
    let mut totals = std::collections::HashMap::new();
    let mut reports = Vec::new();
    for i in 0..3000u64 {
        let key = (i * 7919 % 50) as u32;
        let delta = 1 + (i * 31) % 1500;
        *totals.entry(key).or_insert(0u64) += delta;
        reports.push(Report {
            header: extended_header(0),
            primitive: Primitive::KeyIncrement {
                redundancy: 1,
                key: Key::new(&key.to_be_bytes()).unwrap(),
                delta,
            },
        });
    }
    h.send(&reports, Profile::Extended);
    h.advance(1_000_000);
    // Check the 50 keys' slots are distinct (no collisions), then the sums.
    let mut slots_seen = std::collections::HashSet::new();
    for (&key, &total) in &totals {
        let mut s = [0u32; MAX_REDUNDANCY];
        hasher.slots(&Key::new(&key.to_be_bytes()).unwrap(), 1, &mut s);
        assert!(
            slots_seen.insert(s[0]),
            "no collision among 50 keys in 65536 slots"
        );
        assert_eq!(
            h.region("ctr").load_u64(layout.slot_offset(s[0])).unwrap(),
            total,
            "key {key}"
        );
    }
    assert_eq!(h.rnic.counters().atomics, 3000);
}

#[test]
fn immediate_reports_raise_completions() {
    let mut h = Harness::new(
        vec![keywrite_store(1 << 10, 8, 2), append_store(1, 64, 4, 4)],
        HarnessOptions::default(),
    );
    let mut r = Report {
        header: extended_header(0),
        primitive: Primitive::KeyWrite {
            redundancy: 2,
            key: Key::new(b"k1").unwrap(),
            value: Value::new(b"v").unwrap(),
        },
    };
    r.header.immediate = true;
    let mut a = Report {
        header: extended_header(0),
        primitive: Primitive::Append {
            list: 0,
            value: Value::new(b"e").unwrap(),
        },
    };
    a.header.immediate = true;
    h.send(&[r, a], Profile::Extended);
    h.flush();
    let c = *h.pipeline.counters();
    assert_eq!(
        c.frames_imm, 2,
        "one WRITE with Immediate per immediate report: {c:?}"
    );
    let mut imms = 0;
    while let Some(e) = h.rnic.poll_completion() {
        if matches!(
            e,
            dta_collector::rnic::responder::Completion::WriteWithImm { .. }
        ) {
            imms += 1;
        }
    }
    assert_eq!(imms, 2);
}

#[test]
fn sequence_gaps_are_nacked_with_the_missing_range() {
    let mut h = Harness::new(
        vec![keywrite_store(1 << 10, 8, 1)],
        HarnessOptions::default(),
    );
    let mk = |seq: u32| {
        let mut r = Report {
            header: extended_header(0),
            primitive: Primitive::KeyWrite {
                redundancy: 1,
                key: Key::new(b"k").unwrap(),
                value: Value::new(b"v").unwrap(),
            },
        };
        r.header.seq = Some(seq);
        r.header.retransmittable = true;
        r
    };
    h.send(&[mk(10), mk(11), mk(15), mk(16), mk(13)], Profile::Extended);
    let c = *h.pipeline.counters();
    assert_eq!(
        (
            c.reporter_gaps,
            c.reporter_missing,
            c.reporter_late,
            c.nacks_sent
        ),
        (1, 3, 1, 1),
        "{c:?}"
    );
    assert_eq!(h.nacks.len(), 1);
    assert_eq!(h.nacks[0].0.port(), 40044);
    assert_eq!(
        NackRepr::parse(&h.nacks[0].1).unwrap(),
        NackRepr::Extended {
            first_missing: 12,
            count: 3
        }
    );
    assert_eq!(
        c.translated, 5,
        "gap-revealing and late reports are still translated"
    );
}

#[test]
fn overload_sheds_low_priority_first_and_keeps_high() {
    let rate = RateLimit {
        messages_per_sec: 1_000_000,
        burst: 100,
        low_reserve: 0.5,
        medium_reserve: 0.25,
    };
    let mut h = Harness::new(
        vec![keywrite_store(1 << 12, 8, 1)],
        HarnessOptions {
            rate,
            ..HarnessOptions::default()
        },
    );
    let mk = |i: u32, p: Priority| {
        let mut r = Report {
            header: extended_header(0),
            primitive: Primitive::KeyWrite {
                redundancy: 1,
                key: Key::new(&i.to_be_bytes()).unwrap(),
                value: Value::new(b"v").unwrap(),
            },
        };
        r.header.priority = p;
        r
    };
    // 2x the cap: 2000 reports per millisecond of simulated time, mixed priorities.
    let mut sent = [0u64; 3];
    for ms in 0..20u32 {
        let reports: Vec<Report> = (0..2000u32)
            .map(|i| {
                let p = [Priority::Low, Priority::Medium, Priority::High][(i % 3) as usize];
                sent[p as usize] += 1;
                mk(ms * 2000 + i, p)
            })
            .collect();
        h.send(&reports, Profile::Extended);
        h.advance(1_000_000);
    }
    h.advance(100_000_000);
    let c = *h.pipeline.counters();
    let frames = c.frames as f64;
    let cap = 1_000_000.0 * (h.now as f64 - 1_000_000.0) / 1e9 + 100.0;
    assert!(
        frames <= cap * 1.05,
        "the cap holds: {frames} frames vs {cap}"
    );
    assert!(
        c.drop_overload_low > c.drop_overload_medium,
        "low is shed first: {c:?}"
    );
    assert_eq!(c.drop_backlog_full, 0, "high priority is never lost: {c:?}");
    assert_eq!(
        c.translated + c.dropped(),
        sent.iter().sum::<u64>(),
        "everything accounted: {c:?}"
    );
}

#[test]
fn one_percent_loss_never_stalls_a_qp() {
    let mut h = Harness::new(
        vec![keywrite_store(1 << 14, 8, 1)],
        HarnessOptions::default(),
    );
    h.imp.loss = 0.01;
    h.imp.response_loss = 0.01;
    let mut sent = 0u32;
    for round in 0..50u32 {
        let reports: Vec<Report> = (0..200u32)
            .map(|i| Report {
                header: extended_header(0),
                primitive: Primitive::KeyWrite {
                    redundancy: 1,
                    key: Key::new(&(round * 200 + i).to_be_bytes()).unwrap(),
                    value: Value::new(&round.to_le_bytes()).unwrap(),
                },
            })
            .collect();
        sent += 200;
        h.send(&reports, Profile::Extended);
        h.advance(3_000_000);
    }
    h.imp.loss = 0.0;
    h.imp.response_loss = 0.0;
    // After the loss stops, writes flow again: the last round is fully executed.
    let before = h.rnic.counters().writes;
    let reports: Vec<Report> = (0..200u32)
        .map(|i| Report {
            header: extended_header(0),
            primitive: Primitive::KeyWrite {
                redundancy: 1,
                key: Key::new(&(900_000 + i).to_be_bytes()).unwrap(),
                value: Value::new(b"end!").unwrap(),
            },
        })
        .collect();
    h.advance(20_000_000);
    h.send(&reports, Profile::Extended);
    h.advance(20_000_000);
    assert_eq!(
        h.rnic.counters().writes - before,
        200,
        "no stall after loss: {:?} {:?}",
        h.rnic.counters(),
        h.pipeline.qp_stats().next()
    );
    let (_, _, q) = h.pipeline.qp_stats().next().unwrap();
    assert!(
        q.retransmit_events > 0 && q.retransmitted_frames > 0,
        "losses were recovered by retransmission: {q:?}"
    );
    // Nothing was lost: every report's WRITE executed exactly once (duplicates are not
    // executed again), and no frame was given up on.
    assert_eq!(
        h.rnic.counters().writes,
        sent as u64 + 200,
        "every write executed once: {:?} {q:?}",
        h.rnic.counters()
    );
    assert_eq!((q.psn_skipped, q.retx_overruns), (0, 0), "{q:?}");
    // Memory never holds a malformed entry: every non-empty slot is one of ours.
    let layout = dta_proto::layout::KeyWriteLayout::new(1 << 10, 8).unwrap();
    let _ = layout;
    let r = h.region("kw");
    let mut b = vec![0u8; r.len()];
    r.read(0, &mut b).unwrap();
    let hasher = KeyHasher::new(HashProfile::Independent, 1 << 14).unwrap();
    let valid: std::collections::HashSet<u32> = (0..sent)
        .chain(900_000..900_200)
        .map(|k| hasher.checksum(&Key::new(&k.to_be_bytes()).unwrap()))
        .collect();
    for slot in b.chunks(8) {
        if slot.iter().any(|&x| x != 0) {
            let cs = u32::from_le_bytes(slot[0..4].try_into().unwrap());
            assert!(valid.contains(&cs), "slot holds a checksum we never wrote");
        }
    }
    println!(
        "max recovery latency {} us; {} go-back-N rounds, {} frames resent",
        q.recovery_ns_max / 1000,
        q.retransmit_events,
        q.retransmitted_frames
    );
}

/// A partial batch that follows full ones carries zeros after its last entry (not the entries
/// the previous batch left in the translator's buffer), and values shorter than the entry are
/// zero-padded.
#[test]
fn partial_append_batches_are_zero_padded() {
    use dta_proto::layout::AppendLayout;
    let (batch, entry) = (16u32, 8u32);
    let mut h = Harness::new(
        vec![append_store(1, 64, batch, entry)],
        HarnessOptions::default(),
    );
    let append = |v: &[u8]| Report {
        header: extended_header(0),
        primitive: Primitive::Append {
            list: 0,
            value: Value::new(v).unwrap(),
        },
    };
    // Batch 1: sixteen full-width entries. Batch 2: two short entries, flushed by the timer.
    let full: Vec<Report> = (1..=16u8).map(|i| append(&[i; 8])).collect();
    h.send(&full, Profile::Extended);
    h.send(
        &[append(&[0xA1, 0xA2, 0xA3]), append(&[0xB1])],
        Profile::Extended,
    );
    h.advance(10_000_000);
    h.flush();
    let c = h.pipeline.counters();
    assert_eq!(c.translated, 18, "{c:?}");
    assert_eq!(c.append_partial_flushes, 1, "{c:?}");
    let layout = AppendLayout::new(AppendFormat::Sequenced, 64, entry, batch).unwrap();
    let region = h.region("ap");
    let mut slot = vec![0u8; layout.stride() as usize];
    region.read(layout.batch_offset(1), &mut slot).unwrap();
    let e = entry as usize;
    assert_eq!(&slot[..e], &[0xA1, 0xA2, 0xA3, 0, 0, 0, 0, 0]);
    assert_eq!(&slot[e..2 * e], &[0xB1, 0, 0, 0, 0, 0, 0, 0]);
    assert!(
        slot[2 * e..16 * e].iter().all(|&b| b == 0),
        "stale entries of batch 1 leaked into batch 2: {slot:?}"
    );
    let trailer: [u8; 8] = slot[16 * e..].try_into().unwrap();
    assert_eq!(layout.decode_trailer(trailer), Some((2, 2)));
    region.read(layout.batch_offset(0), &mut slot).unwrap();
    for i in 0..16 {
        assert_eq!(&slot[i * e..(i + 1) * e], &[i as u8 + 1; 8]);
    }
}

/// Reordering and duplication between translator and collector (what `sch_netem` would do on
/// the veth; this kernel has no netem, so the in-memory wire does it): QPs never stall, a
/// duplicated or reordered Fetch-and-Add is never executed twice, and none is lost: with
/// retransmission every counter ends at exactly what was sent for its key (N = 1, no
/// collisions); every report is accounted for, and writes flow again once the wire is clean.
#[test]
fn reordering_and_duplication_never_double_count_or_stall() {
    let mut h = Harness::new(
        vec![store(
            "ctr",
            StoreKindConfig::new(StoreKind::KeyIncrement {
                slots: 1 << 16,
                hash: HashProfile::Independent,
            })
            .with_redundancy(1),
        )],
        HarnessOptions::default(),
    );
    h.imp.reorder = 0.02;
    h.imp.duplicate = 0.02;
    let hasher = KeyHasher::new(HashProfile::Independent, 1 << 16).unwrap();
    let layout = CounterLayout::new(1 << 16).unwrap();
    let mut totals = std::collections::HashMap::new();
    let mut sent = 0u64;
    for round in 0..40u64 {
        let reports: Vec<Report> = (0..250u64)
            .map(|i| {
                let n = round * 250 + i;
                let key = (n * 7919 % 50) as u32;
                let delta = 1 + (n * 31) % 1500;
                *totals.entry(key).or_insert(0u64) += delta;
                Report {
                    header: extended_header(0),
                    primitive: Primitive::KeyIncrement {
                        redundancy: 1,
                        key: Key::new(&key.to_be_bytes()).unwrap(),
                        delta,
                    },
                }
            })
            .collect();
        sent += 250;
        h.send(&reports, Profile::Extended);
        h.advance(2_000_000);
    }
    h.imp.reorder = 0.0;
    h.imp.duplicate = 0.0;
    h.advance(20_000_000);
    let k = h.rnic.counters();
    assert!(
        k.duplicate_request > 0,
        "duplicates reached the RNIC: {k:?}"
    );
    assert!(
        k.atomic_replays > 0,
        "duplicated atomics were replayed: {k:?}"
    );
    let mut slots_seen = std::collections::HashSet::new();
    let mut landed = 0u64;
    for (&key, &total) in &totals {
        let mut s = [0u32; MAX_REDUNDANCY];
        hasher.slots(&Key::new(&key.to_be_bytes()).unwrap(), 1, &mut s);
        assert!(slots_seen.insert(s[0]), "no collision among 50 keys");
        let v = h.region("ctr").load_u64(layout.slot_offset(s[0])).unwrap();
        assert!(
            v <= total,
            "key {key}: {v} > {total} sent (an increment ran twice)"
        );
        assert_eq!(v, total, "key {key}: an increment was lost");
        landed += v;
    }
    let c = h.pipeline.counters();
    assert_eq!(c.rx_datagrams, sent);
    assert_eq!(c.translated + c.dropped(), sent, "{c:?}");
    let (_, _, q) = h.pipeline.qp_stats().next().unwrap();
    assert!(
        q.nak_seq > 0 && q.retransmit_events > 0,
        "reordering made the responder NAK, and the translator go back: {q:?}"
    );
    // Nothing skipped, nothing executed twice: every atomic executed exactly once.
    assert_eq!((q.psn_skipped, q.retx_overruns), (0, 0), "{q:?}");
    assert_eq!(k.atomics, sent, "{k:?} {q:?}");
    assert_eq!(landed, totals.values().sum::<u64>());
    // A clean wire: the next round lands completely.
    let before = h.rnic.counters().atomics;
    let reports: Vec<Report> = (0..200u32)
        .map(|i| Report {
            header: extended_header(0),
            primitive: Primitive::KeyIncrement {
                redundancy: 1,
                key: Key::new(&(1_000_000 + i).to_be_bytes()).unwrap(),
                delta: 1,
            },
        })
        .collect();
    h.send(&reports, Profile::Extended);
    h.advance(20_000_000);
    assert_eq!(
        h.rnic.counters().atomics - before,
        200,
        "no stall after the faults"
    );
    println!(
        "reorder 2 % + duplicate 2 %: {} go-back-N rounds (max {} us), {} frames resent, {} duplicates, {} atomic replays",
        q.retransmit_events,
        q.recovery_ns_max / 1000,
        q.retransmitted_frames,
        k.duplicate_request,
        k.atomic_replays
    );
}

/// What goes out again is what went out first: under loss, every frame the translator sends
/// with a PSN it already used is byte for byte the first one (Key-Write replicas, atomics,
/// Append batches), except AckReq, which a resend may add, with a valid ICRC either way; and
/// every Append entry lands, in order, without a hole.
#[test]
fn retransmitted_frames_are_the_frames_first_sent() {
    use dta_proto::layout::AppendLayout;
    use dta_proto::wire::roce::{parse_frame, L2L4_LEN};
    let mut h = Harness::new(
        vec![
            keywrite_store(1 << 12, 8, 3),
            append_store(2, 256, 4, 8),
            store(
                "ctr",
                StoreKindConfig::new(StoreKind::KeyIncrement {
                    slots: 1 << 12,
                    hash: HashProfile::Independent,
                })
                .with_redundancy(2),
            ),
        ],
        HarnessOptions::default(),
    );
    h.sent_frames = Some(Vec::new());
    h.imp.loss = 0.03;
    h.imp.response_loss = 0.03;
    let mut n_append = [0u64; 2];
    for round in 0..30u32 {
        let mut reports = Vec::new();
        for i in 0..40u32 {
            let k = round * 40 + i;
            reports.push(Report {
                header: extended_header(0),
                primitive: match i % 3 {
                    0 => Primitive::KeyWrite {
                        redundancy: 3,
                        key: Key::new(&k.to_be_bytes()).unwrap(),
                        value: Value::new(&k.to_le_bytes()).unwrap(),
                    },
                    1 => Primitive::KeyIncrement {
                        redundancy: 2,
                        key: Key::new(&k.to_be_bytes()).unwrap(),
                        delta: 1,
                    },
                    _ => {
                        let list = k % 2;
                        n_append[list as usize] += 1;
                        Primitive::Append {
                            list,
                            value: Value::new(&(n_append[list as usize]).to_le_bytes()).unwrap(),
                        }
                    }
                },
            });
        }
        h.send(&reports, Profile::Extended);
        h.advance(2_000_000);
    }
    h.imp.loss = 0.0;
    h.imp.response_loss = 0.0;
    h.flush();
    for _ in 0..10 {
        h.advance(100_000_000);
    }
    let frames = h.sent_frames.take().unwrap();
    let mut first: std::collections::HashMap<(u32, u32), Vec<u8>> = Default::default();
    let mut resent = 0;
    for f in &frames {
        assert!(
            dta_proto::icrc::check_frame(f),
            "every frame has a valid ICRC"
        );
        assert_eq!(parse_frame(f).unwrap().udp.dst_port, 4791);
        let bth = RocePacketView::bth(&f[L2L4_LEN..]);
        let mut g = f.clone();
        g[L2L4_LEN + 8] &= 0x7f;
        let n = g.len();
        g.truncate(n - 4);
        match first.entry(bth) {
            std::collections::hash_map::Entry::Vacant(e) => {
                e.insert(g);
            }
            std::collections::hash_map::Entry::Occupied(e) => {
                assert_eq!(
                    e.get(),
                    &g,
                    "PSN {:#x} of QP {:#x} resent changed",
                    bth.1,
                    bth.0
                );
                resent += 1;
            }
        }
    }
    let qs: Vec<_> = h.pipeline.qp_stats().map(|(_, _, q)| q).collect();
    assert!(
        resent > 20,
        "loss made the translator resend: {resent} {qs:?}"
    );
    assert_eq!(
        resent,
        qs.iter().map(|q| q.retransmitted_frames).sum::<u64>() as usize,
        "every repeated PSN is a retransmission"
    );
    assert!(
        qs.iter()
            .all(|q| q.psn_skipped == 0 && q.retx_overruns == 0),
        "{qs:?}"
    );
    // Every Append entry landed, in order.
    let layout = AppendLayout::new(AppendFormat::Sequenced, 256, 8, 4).unwrap();
    let region = h.region("ap");
    let dta_proto::meta::StoreKind::Append { list_stride, .. } = h.store("ap").meta.kind else {
        panic!("an Append store")
    };
    for list in 0..2u64 {
        let mut want = 1u64;
        let mut slot = vec![0u8; layout.stride() as usize];
        // Partial batches (the flush timer) hold fewer than four entries.
        let mut seq = 0;
        while want <= n_append[list as usize] {
            seq += 1;
            let off = list * list_stride + layout.batch_offset(layout.slot_for_seq(seq));
            region.read(off, &mut slot).unwrap();
            let trailer: [u8; 8] = slot[32..40].try_into().unwrap();
            let (s, count) = layout
                .decode_trailer(trailer)
                .expect("batch written: no hole");
            assert_eq!(s, seq);
            for e in slot[..count as usize * 8].chunks(8) {
                assert_eq!(u64::from_le_bytes(e.try_into().unwrap()), want);
                want += 1;
            }
        }
        assert_eq!(
            want - 1,
            n_append[list as usize],
            "list {list}: every entry"
        );
    }
}

/// (QPN, PSN) of a RoCEv2 transport payload.
struct RocePacketView;

impl RocePacketView {
    fn bth(t: &[u8]) -> (u32, u32) {
        let qpn = u32::from_be_bytes([0, t[5], t[6], t[7]]);
        let psn = u32::from_be_bytes([0, t[9], t[10], t[11]]);
        (qpn, psn)
    }
}

/// Key-Increment under 5 % loss of frames and of answers: FETCH_ADDs are resent from the
/// retransmission ring, every counter still ends at the exact sum sent, and each add executes
/// exactly once (a resent atomic the responder already ran is answered from its saved result,
/// never added twice).
#[test]
fn key_increment_sums_survive_loss_each_add_executed_once() {
    let mut h = Harness::new(
        vec![store(
            "ctr",
            StoreKindConfig::new(StoreKind::KeyIncrement {
                slots: 1 << 16,
                hash: HashProfile::Independent,
            })
            .with_redundancy(2),
        )],
        HarnessOptions {
            qp: dta_translator::datapath::qp::QpTuning {
                rto_min_ns: 200_000,
                ..HarnessOptions::default().qp
            },
            ..HarnessOptions::default()
        },
    );
    h.imp.loss = 0.05;
    h.imp.response_loss = 0.05;
    let hasher = KeyHasher::new(HashProfile::Independent, 1 << 16).unwrap();
    let layout = CounterLayout::new(1 << 16).unwrap();
    let mut totals = std::collections::HashMap::new();
    // Paced (two reports every 100 µs over a 20 µs round trip), so the loss window never has
    // to shed reports.
    h.imp.one_way_ns = 10_000;
    for round in 0..1500u64 {
        let reports: Vec<Report> = (0..2u64)
            .map(|j| {
                let i = round * 2 + j;
                let key = (i * 7919 % 50) as u32;
                let delta = 1 + (i * 31) % 1500;
                *totals.entry(key).or_insert(0u64) += delta;
                Report {
                    header: extended_header(0),
                    primitive: Primitive::KeyIncrement {
                        redundancy: 2,
                        key: Key::new(&key.to_be_bytes()).unwrap(),
                        delta,
                    },
                }
            })
            .collect();
        h.send(&reports, Profile::Extended);
        h.advance(100_000);
    }
    h.imp.loss = 0.0;
    h.imp.response_loss = 0.0;
    h.advance(200_000_000);
    let c = h.pipeline.counters();
    assert_eq!(c.dropped(), 0, "{c:?}");
    for (&key, &total) in &totals {
        let mut s = [0u32; MAX_REDUNDANCY];
        hasher.slots(&Key::new(&key.to_be_bytes()).unwrap(), 2, &mut s);
        for &slot in &s[..2] {
            assert_eq!(
                h.region("ctr").load_u64(layout.slot_offset(slot)).unwrap(),
                total,
                "key {key}"
            );
        }
    }
    let k = h.rnic.counters();
    assert_eq!(k.atomics, 6000, "each add executed once: {k:?}");
    assert!(h.frames_lost > 0, "the wire lost frames");
    let resent: u64 = h
        .pipeline
        .qp_stats()
        .map(|(_, _, s)| s.retransmitted_frames)
        .sum();
    assert!(resent > 0, "FETCH_ADDs were resent");
}
