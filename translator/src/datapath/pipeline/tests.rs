use super::config::single_store_meta;
use super::*;
use dta_proto::hash::HashProfile;
use dta_proto::wire::ib::Psn;
use dta_proto::wire::report::{Profile, ReportHeader};
use dta_proto::{Key, Value};

#[test]
fn a_reconnection_counts_the_frames_it_abandons() {
    let mut p = single_store_pipeline(StoreKind::KeyWrite {
        slots: 1024,
        slot_size: 32,
        hash: HashProfile::Independent,
    });
    let hdr = ReportHeader {
        profile: Profile::Extended,
        immediate: false,
        retransmittable: false,
        seq: Some(0),
        priority: Priority::Medium,
    };
    let reports: Vec<Report> = (0..5u32)
        .map(|i| Report {
            header: hdr,
            primitive: Primitive::KeyWrite {
                redundancy: 2,
                key: Key::new(&i.to_be_bytes()).unwrap(),
                value: Value::new(&[7; 8]).unwrap(),
            },
        })
        .collect();
    feed(&mut p, &burst_of(&reports));
    assert_eq!(p.counters().frames, 10);
    let qpb = QpBinding {
        local_qpn: Qpn::new(0x200),
        remote_qpn: Qpn::new(0x22),
        start_psn: Psn::new(100),
    };
    assert!(p.rebind("s", qpb, None));
    assert_eq!(p.counters().frames_unconfirmed_at_reconnect, 10);
    assert_eq!(p.unconfirmed_frames(), 0, "the new QP starts empty");
}

fn burst_of(reports: &[Report]) -> Vec<Vec<u8>> {
    reports
        .iter()
        .map(|r| {
            let mut b = vec![0u8; 96];
            let n = r.emit(Profile::Extended, &mut b).unwrap();
            b.truncate(n);
            b
        })
        .collect()
}

/// `bufs` as datagrams from one reporter to the translator.
fn datagrams(bufs: &[Vec<u8>]) -> Vec<Datagram<'_>> {
    let src = SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 9), 5000);
    let dst = SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 101), 40040);
    bufs.iter()
        .map(|b| Datagram {
            src,
            dst,
            ip: None,
            payload: b,
        })
        .collect()
}

fn feed(p: &mut Pipeline, bufs: &[Vec<u8>]) {
    let mut tx = TxBatch::new(256, 2048);
    p.handle_reports(1, &datagrams(bufs), &mut tx);
}

const HDR: ReportHeader = ReportHeader {
    profile: Profile::Extended,
    immediate: false,
    retransmittable: false,
    seq: Some(0),
    priority: Priority::Medium,
};

/// A Key-Write store of 16-byte slots and a Key-Increment store, 1,024 slots each.
fn keyed_kinds() -> [StoreKind; 2] {
    [
        StoreKind::KeyWrite {
            slots: 1024,
            slot_size: 16,
            hash: HashProfile::Independent,
        },
        StoreKind::KeyIncrement {
            slots: 1024,
            hash: HashProfile::Independent,
        },
    ]
}

#[test]
fn reports_must_carry_the_stores_redundancy() {
    use dta_proto::meta::Redundancy;
    for kind in keyed_kinds() {
        let report = |n: u8| Report {
            header: HDR,
            primitive: match kind {
                StoreKind::KeyWrite { .. } => Primitive::KeyWrite {
                    redundancy: n,
                    key: Key::new(&[n; 4]).unwrap(),
                    value: Value::new(&[7; 8]).unwrap(),
                },
                _ => Primitive::KeyIncrement {
                    redundancy: n,
                    key: Key::new(&[n; 4]).unwrap(),
                    delta: 1,
                },
            },
        };
        let all: Vec<Report> = (0..=5).map(report).collect();
        let bufs = burst_of(&all);
        let mut p = single_store_meta(kind.clone(), Redundancy::new(2), |_| {}).unwrap();
        assert_eq!(p.redundancy_of("s"), Redundancy::new(2));
        feed(&mut p, &bufs);
        let c = p.counters();
        // N = 2 is written; 1, 3 and 4 are another N; 0 and 5 (above max 4) are bad.
        assert_eq!(c.translated, 1, "{kind:?} {c:?}");
        assert_eq!(c.drop_redundancy_mismatch, 3, "{kind:?} {c:?}");
        assert_eq!(c.drop_bad_redundancy, 2, "{kind:?} {c:?}");
        assert_eq!(c.frames, 2);
        // A reconnection's metadata may record another N: it applies from then on.
        let meta = StoreMeta {
            name: "s".into(),
            addr: 0x7f00_0000_0000,
            len: 1 << 30,
            rkey: 0x1234,
            qps: Vec::new(),
            redundancy: Redundancy::new(3),
            kind: kind.clone(),
        };
        let qpb = QpBinding {
            local_qpn: Qpn::new(0x200),
            remote_qpn: Qpn::new(0x22),
            start_psn: Psn::new(100),
        };
        assert!(p.rebind("s", qpb, Some(&meta)));
        feed(&mut p, &bufs);
        assert_eq!(p.counters().translated, 2);
        assert_eq!(p.counters().drop_redundancy_mismatch, 6);
        // A store that records no N takes any N up to the maximum, as before.
        let mut p = single_store_meta(kind.clone(), None, |_| {}).unwrap();
        feed(&mut p, &bufs);
        assert_eq!(p.counters().translated, 4);
        assert_eq!(p.counters().drop_redundancy_mismatch, 0);
        // A store written with an N above the translator's maximum is refused up front.
        let e = single_store_meta(kind.clone(), Redundancy::new(6), |_| {})
            .err()
            .unwrap();
        assert!(e.0.contains("max_redundancy"), "{e}");
    }
}

#[test]
fn a_timer_whose_qp_cannot_take_a_frame_is_not_due() {
    use dta_proto::layout::AppendFormat;
    use dta_proto::wire::ib::{NakCode, Syndrome};
    let mut p = single_store_pipeline(StoreKind::Append {
        lists: 4,
        first_list: 0,
        capacity: 64,
        entry_size: 4,
        batch: 16,
        format: AppendFormat::Sequenced,
        list_stride: 4096,
    });
    let r = Report {
        header: HDR,
        primitive: Primitive::Append {
            list: 1,
            value: Value::new(&[1; 4]).unwrap(),
        },
    };
    feed(&mut p, &burst_of(&[r]));
    assert_eq!(p.pending_reports(), 1);
    // The batch's flush delay (1 ms) is the only timer.
    assert_eq!(p.next_deadline(), Some(1 + 1_000_000));
    // The QP breaks: the batch cannot be written until it is replaced, so its timer is
    // not due (a worker would otherwise poll it in a loop: the deadline stays in the past).
    let qp = &mut p.stores[0].sender.qp;
    let psn = qp.next_psn();
    qp.on_response(2, Syndrome::Nak(NakCode::RemoteAccessError), psn);
    assert_eq!(p.next_deadline(), None);
    let mut tx = TxBatch::new(64, 2048);
    p.poll(5_000_000, &mut tx);
    assert_eq!((p.pending_reports(), tx.len()), (1, 0));
    // A new QP: due again, and the batch is written.
    let qpb = QpBinding {
        local_qpn: Qpn::new(0x200),
        remote_qpn: Qpn::new(0x22),
        start_psn: Psn::new(100),
    };
    assert!(p.rebind("s", qpb, None));
    assert_eq!(p.next_deadline(), Some(1 + 1_000_000));
    p.poll(5_000_000, &mut tx);
    assert_eq!((p.pending_reports(), tx.len()), (0, 1));
    assert_eq!(p.counters().translated, 1);
}

#[test]
fn postcards_are_written_with_the_stores_redundancy() {
    use dta_proto::meta::Redundancy;
    let kind = StoreKind::Postcard {
        chunks: 1024,
        hops: 5,
        hash: HashProfile::Independent,
    };
    let path: Vec<Report> = (0..3u8)
        .map(|hop| Report {
            header: HDR,
            primitive: Primitive::Postcard {
                flow: Key::new(&[1, 2, 3, 4]).unwrap(),
                hop,
                path_len: 3,
                value: 10 + hop as u32,
            },
        })
        .collect();
    let bufs = burst_of(&path);
    // The store's N (3) wins over the configured fallback (1).
    for (n, frames) in [(Redundancy::new(3), 3), (None, 1)] {
        let mut p = single_store_meta(kind.clone(), n, |c| c.postcard_redundancy = 1).unwrap();
        assert_eq!(p.redundancy_of("s").map(|n| n.get()), Some(frames as u8));
        feed(&mut p, &bufs);
        assert_eq!(p.counters().postcard_emits, 1);
        assert_eq!(p.counters().frames, frames, "N {n:?}");
    }
}

/// An Append store of lists 2..6, 4-byte entries in batches of 4, sequenced.
fn four_lists() -> StoreKind {
    four_lists_in_batches_of(4)
}

/// [`four_lists`] in batches of `batch` entries.
fn four_lists_in_batches_of(batch: u32) -> StoreKind {
    StoreKind::Append {
        lists: 4,
        first_list: 2,
        capacity: 64,
        entry_size: 4,
        batch,
        format: dta_proto::layout::AppendFormat::Sequenced,
        list_stride: 1 << 12,
    }
}

/// The Append lane (`parse_append_fast` → `dispatch_append`) does what the general path
/// (`parse_report` → `dispatch`) does, report for report: the same frames, byte for byte, and
/// the same counters, over valid entries in both profiles, an unknown list, a value longer
/// than the store's entries, an Immediate, and a rate limit that refuses low and medium
/// priority and keeps high priority in the backlog.
#[test]
fn the_append_lane_matches_the_general_path() {
    let kind = four_lists();
    let tune = |c: &mut PipelineConfig| {
        c.rate = RateLimit {
            messages_per_sec: 1,
            burst: 6,
            ..RateLimit::default()
        };
    };
    let mut lane = single_store_pipeline_with(kind.clone(), tune);
    let mut general = single_store_pipeline_with(kind, tune);
    let mut reports = Vec::new();
    for i in 0..40u32 {
        let priority = [Priority::Low, Priority::Medium, Priority::High][i as usize % 3];
        let header = ReportHeader {
            priority,
            immediate: i % 7 == 3,
            ..HDR
        };
        let (list, len) = match i % 10 {
            4 => (9, 4),  // no store holds list 9
            8 => (3, 12), // longer than the store's 4-byte entries
            _ => (2 + i % 4, 1 + i as usize % 4),
        };
        reports.push((
            Profile::Extended,
            Report {
                header,
                primitive: Primitive::Append {
                    list,
                    value: Value::new(
                        &i.to_be_bytes()[..len.min(4)].repeat(len.div_ceil(4))[..len],
                    )
                    .unwrap(),
                },
            },
        ));
    }
    // Reference-profile Appends (variant B), 4-byte values.
    for i in 0..12u32 {
        let header = ReportHeader {
            profile: Profile::reference(dta_proto::wire::dta::BaseVariant::B),
            seq: Some(i),
            priority: Priority::Medium,
            ..HDR
        };
        reports.push((
            header.profile,
            Report {
                header,
                primitive: Primitive::Append {
                    list: 2 + i % 3,
                    value: Value::new(&(i * 3).to_le_bytes()).unwrap(),
                },
            },
        ));
    }
    let (tx_lane, tx_general) = feed_lane_and_general(&mut lane, &mut general, &reports, |b, c| {
        dta_proto::wire::report::parse_append_fast(b, c).is_some()
    });
    let (a, b) = (lane.counters(), general.counters());
    assert_eq!(a.reports_append, reports.len() as u64);
    assert!(
        a.drop_unknown_list > 0 && a.drop_value_too_long > 0,
        "{a:?}"
    );
    assert!(a.drop_overload_low + a.drop_overload_medium > 0, "{a:?}");
    assert!(
        a.queued_high > 0 && a.frames > 0 && a.frames_imm > 0,
        "{a:?}"
    );
    // The general path was fed without the receive counters; everything else agrees.
    let mut a = *a;
    a.rx_datagrams = 0;
    a.reports_append = 0;
    assert_eq!(&a, b);
    assert_same_frames(&tx_lane, &tx_general);
}

/// The postcard lane (`parse_postcard_fast` → `dispatch_postcard`) does what the general path
/// does, report for report: the same frames and counters over both profiles, complete and
/// partial paths, duplicate hops, hops past the store's, cache evictions (a four-entry cache)
/// and Immediates.
#[test]
fn the_postcard_lane_matches_the_general_path() {
    let kind = StoreKind::Postcard {
        chunks: 64,
        hops: 5,
        hash: HashProfile::Independent,
    };
    let tune = |c: &mut PipelineConfig| {
        c.postcard_cache_slots = 4;
        c.postcard_flush_ns = 0;
    };
    let mut lane = single_store_pipeline_with(kind.clone(), tune);
    let mut general = single_store_pipeline_with(kind, tune);
    // Two flows at a time, their hops interleaved: complete paths, a three-hop path, a
    // duplicate hop, a hop past the store's; pairs whose cache entries collide evict.
    let mut reports = Vec::new();
    let mut i = 0u32;
    for pair in 0..12u32 {
        let mut hops = Vec::new();
        for f in [2 * pair, 2 * pair + 1] {
            let path_len = if f % 6 == 3 { 3 } else { 0 };
            for hop in 0..if path_len != 0 { 3 } else { 5 } {
                hops.push((f, hop, path_len));
            }
            if f % 4 == 1 {
                hops.push((f, 1, path_len));
            }
            if f % 5 == 2 {
                hops.push((f, 7, 0));
            }
        }
        hops.sort_by_key(|&(f, hop, _)| (hop, f));
        for (f, hop, path_len) in hops {
            i += 1;
            let header = ReportHeader {
                immediate: i % 11 == 5,
                ..HDR
            };
            let (profile, header, flow) = if pair % 3 == 2 {
                // Reference profile (variant B): 4-byte flows, no path length.
                let rh = ReportHeader {
                    profile: Profile::reference(dta_proto::wire::dta::BaseVariant::B),
                    seq: Some(i % 256),
                    ..header
                };
                (rh.profile, rh, Key::new(&(f + 100).to_be_bytes()).unwrap())
            } else {
                (
                    Profile::Extended,
                    header,
                    Key::new(&[7, 7, f as u8, 1, 2]).unwrap(),
                )
            };
            let path_len = if profile == Profile::Extended {
                path_len
            } else {
                0
            };
            reports.push((
                profile,
                Report {
                    header,
                    primitive: Primitive::Postcard {
                        flow,
                        hop,
                        path_len,
                        value: 1000 + i,
                    },
                },
            ));
        }
    }
    let (tx_lane, tx_general) = feed_lane_and_general(&mut lane, &mut general, &reports, |b, c| {
        dta_proto::wire::report::parse_postcard_fast(b, c).is_some()
    });
    let (a, b) = (lane.counters(), general.counters());
    assert_eq!(a.reports_postcard, reports.len() as u64);
    assert!(a.postcard_evictions > 0 && a.postcard_emits > 0, "{a:?}");
    assert!(
        a.drop_postcard_duplicate_hop > 0 && a.drop_bad_hop > 0,
        "{a:?}"
    );
    assert!(a.frames_imm > 0, "{a:?}");
    let mut a = *a;
    a.rx_datagrams = 0;
    a.reports_postcard = 0;
    assert_eq!(&a, b);
    assert_same_frames(&tx_lane, &tx_general);
}

/// Feeds each report to `lane` as a datagram (it must take the lane: `takes_lane`) and to
/// `general` as a parsed hand-off (the general path's dispatch), one at a time at the same
/// clock; returns their transmit batches.
fn feed_lane_and_general(
    lane: &mut Pipeline,
    general: &mut Pipeline,
    reports: &[(Profile, Report)],
    takes_lane: impl Fn(&[u8], &dta_proto::wire::report::ParseConfig) -> bool,
) -> (TxBatch, TxBatch) {
    let src = SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 9), 5000);
    let dst = SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 101), 40040);
    let mut tx_lane = TxBatch::new(512, 2048);
    let mut tx_general = TxBatch::new(512, 2048);
    let parse = lane.cfg.parse;
    for (k, (profile, r)) in reports.iter().enumerate() {
        let mut b = vec![0u8; 96];
        let n = r.emit(*profile, &mut b).unwrap();
        b.truncate(n);
        let now = 1 + k as u64 * 1000;
        assert!(takes_lane(&b, &parse), "report {k} takes the lane");
        let d = Datagram {
            src,
            dst,
            ip: None,
            payload: &b,
        };
        lane.handle_reports(now, &[d], &mut tx_lane);
        let parsed = dta_proto::wire::report::parse_report(&b, &parse).unwrap();
        assert_eq!(&parsed, r);
        general.handle_handoff(
            now,
            &Handoff {
                worker: 0,
                at: now,
                report: parsed,
                dst: *dst.ip(),
            },
            &mut tx_general,
        );
    }
    (tx_lane, tx_general)
}

/// The two batches hold the same frames, byte for byte.
fn assert_same_frames(a: &TxBatch, b: &TxBatch) {
    assert_eq!(a.len(), b.len());
    for i in 0..a.len() {
        assert_eq!(a.frame(i), b.frame(i), "frame {i}");
    }
}

/// The header of the next retransmittable reference-profile (variant B) report after `seq`:
/// every fifth sequence number is skipped, so the translator sees gaps and NACKs them.
fn next_with_gaps(seq: &mut u32) -> ReportHeader {
    *seq += 1 + u32::from(*seq % 5 == 4);
    ReportHeader {
        profile: Profile::reference(dta_proto::wire::dta::BaseVariant::B),
        retransmittable: true,
        seq: Some(*seq % 256),
        ..HDR
    }
}

/// `r` as `profile` writes it, appended to `bufs`.
fn emit(bufs: &mut Vec<Vec<u8>>, profile: Profile, r: Report) {
    let mut b = vec![0u8; 96];
    let n = r.emit(profile, &mut b).unwrap();
    b.truncate(n);
    bufs.push(b);
}

/// Feeds `bufs` in bursts of assorted sizes to two pipelines of one `kind` store, configured
/// by `cfg`: one that takes runs, and one whose collector has a rate limit too large to refuse
/// anything (a rate-limited collector takes no runs, so every report is dispatched alone).
/// Their transmit batches hold `tx_frames` frames: with few, frames also wait in the QP's
/// ring; with many, whole runs of reports go straight into the batch. Asserts that both send
/// the same frames and NACKs, burst by burst, and count the same; returns the counters and
/// how many frames and NACKs were sent.
fn runs_against_dispatch(
    kind: StoreKind,
    cfg: impl Fn(&mut PipelineConfig),
    bufs: &[Vec<u8>],
    tx_frames: usize,
) -> (TranslatorCounters, usize) {
    stores_runs_against_dispatch(&[kind], cfg, bufs, tx_frames)
}

/// [`runs_against_dispatch`] with a store of each of `kinds` (on one collector).
fn stores_runs_against_dispatch(
    kinds: &[StoreKind],
    cfg: impl Fn(&mut PipelineConfig),
    bufs: &[Vec<u8>],
    tx_frames: usize,
) -> (TranslatorCounters, usize) {
    bursts_against_dispatch(
        kinds,
        cfg,
        bufs,
        tx_frames,
        &[1, 7, 16, 33, 64, 2, 64, 64, 64, 64, 64],
    )
}

/// [`stores_runs_against_dispatch`] in bursts of `sizes` datagrams, round and round.
fn bursts_against_dispatch(
    kinds: &[StoreKind],
    cfg: impl Fn(&mut PipelineConfig),
    bufs: &[Vec<u8>],
    tx_frames: usize,
    sizes: &[usize],
) -> (TranslatorCounters, usize) {
    let mut runs = stores_pipeline_with(kinds, &cfg);
    let mut one_by_one = stores_pipeline_with(kinds, |c| {
        cfg(c);
        c.rate = RateLimit {
            messages_per_sec: 1 << 30,
            burst: 1 << 30,
            ..RateLimit::default()
        };
    });
    let all = datagrams(bufs);
    // With room for a few frames per burst only, once it is full, frames wait in the QP's
    // ring (the batch's length no longer changes when one is written).
    let mut tx_runs = TxBatch::new(tx_frames, 2048);
    let mut tx_one = TxBatch::new(tx_frames, 2048);
    let (mut at, mut now, mut frames) = (0, 1, 0);
    for &size in sizes.iter().cycle() {
        let burst = &all[at..(at + size).min(all.len())];
        runs.handle_reports(now, burst, &mut tx_runs);
        one_by_one.handle_reports(now, burst, &mut tx_one);
        for _ in 0..2 {
            assert_same_frames(&tx_runs, &tx_one);
            frames += tx_runs.len();
            tx_runs.clear();
            tx_one.clear();
            // What waits in the ring.
            runs.poll_transmit(now, &mut tx_runs);
            one_by_one.poll_transmit(now, &mut tx_one);
        }
        at += burst.len();
        now += 1000;
        if at == all.len() {
            break;
        }
    }
    let c = *runs.counters();
    assert_eq!(c.rx_datagrams, bufs.len() as u64);
    assert_eq!(&c, one_by_one.counters());
    (c, frames)
}

/// A run of Appends (`append_run`: several datagrams of one burst taken in one loop, the QP's
/// room asked once per batch) gives exactly what dispatching them one by one gives: the same
/// frames, NACKs and counters. The one-by-one pipeline is the same store behind a rate limit
/// too large to refuse anything (a rate-limited collector takes no runs). The bursts mix
/// Appends for held and unknown lists, values too long, Immediates, retransmittable
/// reference reports with sequence gaps (NACKs go into the batch mid-run), Key-Writes with no
/// store, malformed datagrams and a Sketch-Merge datagram; the QP's cap on unconfirmed PSNs
/// is reached part-way, so later reports are refused as queue-full.
#[test]
fn an_append_run_matches_report_by_report_dispatch() {
    let kind = four_lists();
    let cap = |c: &mut PipelineConfig| c.qp.max_outstanding = 40;
    let mut bufs: Vec<Vec<u8>> = Vec::new();
    let reference = Profile::reference(dta_proto::wire::dta::BaseVariant::B);
    let mut seq = 0u32;
    for i in 0..400u32 {
        let append = |list: u32, value: &[u8], header: ReportHeader| Report {
            header,
            primitive: Primitive::Append {
                list,
                value: Value::new(value).unwrap(),
            },
        };
        match i % 23 {
            5 => emit(&mut bufs, Profile::Extended, append(9, &[1], HDR)), // list 9: no store
            9 => emit(&mut bufs, Profile::Extended, append(3, &[2; 12], HDR)), // too long
            13 => emit(
                &mut bufs,
                Profile::Extended,
                Report {
                    header: HDR,
                    primitive: Primitive::KeyWrite {
                        redundancy: 1,
                        key: Key::new(&i.to_be_bytes()).unwrap(),
                        value: Value::new(&[3; 4]).unwrap(),
                    },
                },
            ),
            17 => bufs.push(vec![0x02, 0x00]), // a truncated reference Append
            19 => bufs.push(vec![dta_proto::wire::sketch::MAGIC_VERSION, 0xff, 0, 0]),
            k if k % 3 == 0 => {
                // Retransmittable reference Appends; every fifth sequence number is skipped.
                let header = next_with_gaps(&mut seq);
                emit(
                    &mut bufs,
                    reference,
                    append(2 + i % 4, &i.to_le_bytes(), header),
                );
            }
            _ => {
                let header = ReportHeader {
                    immediate: i % 11 == 4,
                    ..HDR
                };
                let len = 1 + i as usize % 4;
                let r = append(2 + i % 4, &i.to_be_bytes()[..len], header);
                emit(&mut bufs, Profile::Extended, r);
            }
        }
    }
    let (c, frames) = runs_against_dispatch(kind, cap, &bufs, 6);
    assert_eq!(c.rx_datagrams, bufs.len() as u64);
    for (what, n) in [
        ("queue full", c.drop_qp_queue_full),
        ("unknown list", c.drop_unknown_list),
        ("value too long", c.drop_value_too_long),
        ("no store", c.drop_no_store),
        ("truncated", c.drop_truncated),
        (
            "sketch",
            c.reports_sketch + c.drop_malformed + c.drop_truncated,
        ),
        ("NACKs", c.nacks_sent),
        ("Immediates", c.frames_imm),
        ("batches", c.append_batches),
    ] {
        assert!(n > 0, "{what}: {c:?}");
    }
    assert!(frames > 40, "{frames} frames and NACKs sent");
}

/// The NACKs a keyed run sends into the transmit batch take places its frames would have
/// had: a run that sends its frames straight into the batch (`AcceptDirect`) counts them, and
/// when the batch is full the rest wait in the QP's ring exactly as dispatching the reports
/// one by one puts them there. Every report is a gap (every other sequence number is missing,
/// so each is NACKed) and takes the most frames a report may (N = 4, the maximum).
#[test]
fn nacks_in_a_keyed_run_take_places_from_its_direct_budget() {
    let reference = Profile::reference(dta_proto::wire::dta::BaseVariant::B);
    for kind in keyed_kinds() {
        let kw = matches!(kind, StoreKind::KeyWrite { .. });
        let mut bufs: Vec<Vec<u8>> = Vec::new();
        for i in 0..300u32 {
            let header = ReportHeader {
                profile: reference,
                retransmittable: true,
                seq: Some((2 * i + 1) % 256),
                ..HDR
            };
            let key = Key::from_u32_reference(i);
            let primitive = if kw {
                Primitive::KeyWrite {
                    redundancy: 4,
                    key,
                    value: Value::new(&i.to_be_bytes()).unwrap(),
                }
            } else {
                Primitive::KeyIncrement {
                    redundancy: 4,
                    key,
                    delta: u64::from(i) + 1,
                }
            };
            emit(&mut bufs, reference, Report { header, primitive });
        }
        let (c, frames) = runs_against_dispatch(kind.clone(), |_| {}, &bufs, 64);
        assert!(
            c.nacks_sent >= 40 && c.translated == 300 && c.frames > 800,
            "{kind:?}: {frames} frames and NACKs, {c:?}"
        );
    }
}

/// The frames an Append puts into the transmit batch inside a keyed run take places its keyed
/// frames would have had, as NACKs do (`nacks_in_a_keyed_run_take_places_from_its_direct_budget`):
/// a Key-Write of N = 1, ten one-entry Append batches, then Key-Writes of N = 3, the second of
/// which no longer fits the 16-frame batch and waits in the QP's ring, exactly as dispatching
/// the reports one by one puts it there. (Without the Appends' share taken off the direct budget, those Key-Writes were
/// written past the batch's end and lost.)
#[test]
fn appends_in_a_keyed_run_take_places_from_its_direct_budget() {
    let appends = four_lists_in_batches_of(1);
    let kw = |n: u8, i: u32| Report {
        header: HDR,
        primitive: Primitive::KeyWrite {
            redundancy: n,
            key: Key::new(&i.to_be_bytes()).unwrap(),
            value: Value::new(&[i as u8; 8]).unwrap(),
        },
    };
    let mut bufs: Vec<Vec<u8>> = Vec::new();
    for i in 0..40u32 {
        emit(&mut bufs, Profile::Extended, kw(1, i));
        for l in 0..10 {
            let append = Report {
                header: HDR,
                primitive: Primitive::Append {
                    list: 2 + l % 4,
                    value: Value::new(&[l as u8; 4]).unwrap(),
                },
            };
            emit(&mut bufs, Profile::Extended, append);
        }
        for k in 0..4 {
            emit(&mut bufs, Profile::Extended, kw(3, 1000 * i + k));
        }
    }
    let kinds = [keyed_kinds()[0].clone(), appends];
    // A burst a pattern: the run's budget is the whole batch's 16 places when it starts.
    let (c, frames) = bursts_against_dispatch(&kinds, |_| {}, &bufs, 16, &[15]);
    assert!(
        c.translated == 600 && c.append_batches == 400 && c.frames == 400 + 40 * 13,
        "{frames} frames and NACKs sent, {c:?}"
    );
}

/// A run of Key-Writes or Key-Increments takes the Appends between its reports when the
/// store of the first Append it meets takes runs too (`KeyedRun::append`), and gives exactly what
/// dispatching them one by one gives: the same frames, NACKs and counters, for both keyed
/// primitives and both copies of the run. The bursts interleave the two primitives at random
/// (runs of one to a few reports, as in the demo's mix), with Appends of 1 to 4 bytes for the
/// store's lists, Appends for a list no store holds and values too long (the first ends the
/// run, the second is refused inside it), Immediates, retransmittable reference reports with
/// sequence gaps on both primitives (NACKs go into the batch mid-run, taking places of the
/// keyed frames' direct budget), truncated datagrams and Sketch-Merge datagrams; batches of 6
/// frames (frames wait in the QPs' rings) and of 64 (keyed frames straight into the batch,
/// Append batches between them), and the PSN caps reached part-way.
#[test]
fn keyed_runs_take_the_appends_between_them() {
    let reference = Profile::reference(dta_proto::wire::dta::BaseVariant::B);
    for keyed in keyed_kinds() {
        let kw = matches!(keyed, StoreKind::KeyWrite { .. });
        let mut bufs: Vec<Vec<u8>> = Vec::new();
        let mut seq = 0u32;
        let mut z = 0x2545_F491_4F6C_DD1Du64;
        for i in 0..600u32 {
            z ^= z << 13;
            z ^= z >> 7;
            z ^= z << 17;
            // (The reference profile's Appends carry 4-byte values only: the unknown list and
            // the value too long go in the extended profile.)
            let retransmittable = z % 7 == 0 && (z >> 8) % 16 > 1;
            let header = if retransmittable {
                next_with_gaps(&mut seq)
            } else {
                ReportHeader {
                    immediate: i % 13 == 4,
                    ..HDR
                }
            };
            let profile = if retransmittable {
                reference
            } else {
                Profile::Extended
            };
            let n = 1 + (i % 3) as u8;
            let primitive = match (z >> 8) % 16 {
                0 => Primitive::Append {
                    list: 12, // no store holds it: the run ends
                    value: Value::new(&[1]).unwrap(),
                },
                1 => Primitive::Append {
                    list: 3,
                    value: Value::new(&[2; 9]).unwrap(), // too long for 4-byte entries
                },
                2 => {
                    bufs.push(vec![dta_proto::wire::sketch::MAGIC_VERSION, 0xff, 0, 0]);
                    continue;
                }
                3 => {
                    bufs.push(vec![0x02, 0x00]); // a truncated reference Append
                    continue;
                }
                k if k < 10 => Primitive::Append {
                    // One in five for lists 6..10: no store, or a second Append store's.
                    list: if i % 5 == 0 { 6 + i % 4 } else { 2 + i % 4 },
                    value: Value::new(
                        &i.to_be_bytes()[..if retransmittable {
                            4
                        } else {
                            1 + i as usize % 4
                        }],
                    )
                    .unwrap(),
                },
                _ if kw => Primitive::KeyWrite {
                    redundancy: n,
                    key: if retransmittable {
                        Key::from_u32_reference(i)
                    } else {
                        Key::new(&i.to_be_bytes()[..1 + i as usize % 4]).unwrap()
                    },
                    value: Value::new(&i.to_be_bytes()).unwrap(),
                },
                _ => Primitive::KeyIncrement {
                    redundancy: n,
                    key: if retransmittable {
                        Key::from_u32_reference(i)
                    } else {
                        Key::new(&i.to_be_bytes()).unwrap()
                    },
                    delta: u64::from(i) + 1,
                },
            };
            emit(&mut bufs, profile, Report { header, primitive });
        }
        // Batches of 1 entry: an Append's frame goes into the transmit batch between keyed
        // reports, as a NACK does.
        let appends = four_lists_in_batches_of(1);
        let more_appends = StoreKind::Append {
            lists: 4,
            first_list: 6,
            capacity: 64,
            entry_size: 8,
            batch: 4,
            format: dta_proto::layout::AppendFormat::Sequenced,
            list_stride: 1 << 12,
        };
        // The Append store after the keyed one, before it, and two Append stores around it
        // (a run binds to the store of its first Append; the other's Appends end it).
        // Batches of 6 and 13 frames: frames wait in the rings, and Append batches and NACKs
        // fill the batch under the keyed frames' direct budget. Of 64: whole bursts fit.
        let orders = [
            vec![keyed.clone(), appends.clone()],
            vec![appends.clone(), keyed.clone()],
            vec![appends, keyed.clone(), more_appends],
        ];
        // (store order, batch frames, cap on unconfirmed PSNs)
        let passes = [
            (0, 6, 60),
            (0, 13, 60),
            (0, 24, 400),
            (0, 32, 400),
            (0, 64, 400),
            (1, 24, 400),
            (2, 6, 60),
            (2, 24, 400),
            (2, 64, 400),
        ]
        .map(|(order, tx, cap)| {
            let copies = [true, false].map(|v3| {
                dta_proto::cpu::allow_v3(v3);
                stores_runs_against_dispatch(
                    &orders[order],
                    |c| c.qp.max_outstanding = cap,
                    &bufs,
                    tx,
                )
            });
            dta_proto::cpu::allow_v3(true);
            assert_eq!(
                copies[0].0, copies[1].0,
                "{keyed:?}: the two copies, {tx} frames"
            );
            copies[0]
        });
        for (c, frames) in passes {
            let keyed_reports = if kw {
                c.reports_keywrite
            } else {
                c.reports_keyincrement
            };
            for (what, n) in [
                ("keyed reports", keyed_reports),
                ("Appends", c.reports_append),
                ("Append batches", c.append_batches),
                ("unknown list", c.drop_unknown_list),
                ("value too long", c.drop_value_too_long),
                ("truncated", c.drop_truncated),
                ("NACKs", c.nacks_sent),
                ("Immediates", c.frames_imm),
                ("queue full", c.drop_qp_queue_full),
            ] {
                assert!(n > 0, "{keyed:?}: {what}: {c:?}");
            }
            assert!(frames > 100, "{keyed:?}: {frames} frames and NACKs sent");
        }
    }
}

/// A run of Key-Writes or Key-Increments (`keyed_run`: the reports of one primitive that
/// follow each other in a burst, taken in one loop without the per-report route and dispatch)
/// gives exactly what dispatching them one by one gives: the same frames, NACKs and counters,
/// for both primitives. The bursts mix reports of N = 1 to 3, Immediates, redundancy out of
/// range, values too long for the slot, the other keyed primitive (no store: it ends a run),
/// Appends for no list, truncated reports (a parse error ends a run and is counted once),
/// Sketch-Merge datagrams, and retransmittable reference reports with sequence gaps (NACKs go
/// into the batch mid-run); the QP's cap on unconfirmed PSNs is reached part-way. Both copies
/// of the run (x86-64-v3 and baseline) are compared with the dispatch.
#[test]
fn a_keyed_run_matches_report_by_report_dispatch() {
    let reference = Profile::reference(dta_proto::wire::dta::BaseVariant::B);
    for kind in keyed_kinds() {
        let kw = matches!(kind, StoreKind::KeyWrite { .. });
        // The store's primitive (`own`) or the other one, of redundancy `n`.
        let keyed = |own: bool, n: u8, i: u32, header: ReportHeader| Report {
            header,
            primitive: if own == kw {
                Primitive::KeyWrite {
                    redundancy: n,
                    key: Key::new(&i.to_be_bytes()[..1 + i as usize % 4]).unwrap(),
                    value: Value::new(&[i as u8; 12][..1 + i as usize % 12]).unwrap(),
                }
            } else {
                Primitive::KeyIncrement {
                    redundancy: n,
                    key: Key::new(&i.to_be_bytes()).unwrap(),
                    delta: u64::from(i) << 20 | 1,
                }
            },
        };
        let mut bufs: Vec<Vec<u8>> = Vec::new();
        let mut seq = 0u32;
        for i in 0..400u32 {
            let n = 1 + (i % 3) as u8;
            match i % 29 {
                5 => emit(
                    &mut bufs,
                    Profile::Extended,
                    Report {
                        header: HDR,
                        primitive: Primitive::Append {
                            list: 9,
                            value: Value::new(&[1]).unwrap(),
                        },
                    },
                ),
                7 => emit(&mut bufs, Profile::Extended, keyed(true, 5, i, HDR)),
                11 => emit(&mut bufs, Profile::Extended, keyed(false, 1, i, HDR)),
                17 => {
                    emit(&mut bufs, Profile::Extended, keyed(true, 2, i, HDR));
                    let b = bufs.last_mut().unwrap();
                    b.truncate(b.len() - 1);
                }
                19 => bufs.push(vec![dta_proto::wire::sketch::MAGIC_VERSION, 0xff, 0, 0]),
                23 if kw => emit(
                    &mut bufs,
                    Profile::Extended,
                    Report {
                        header: HDR,
                        primitive: Primitive::KeyWrite {
                            redundancy: 1,
                            key: Key::new(&[1, 2]).unwrap(),
                            value: Value::new(&[9; 13]).unwrap(),
                        },
                    },
                ),
                k if k % 3 == 0 => {
                    // Retransmittable reference reports; every fifth sequence number skipped.
                    let header = next_with_gaps(&mut seq);
                    let mut r = keyed(true, n, i, header);
                    match &mut r.primitive {
                        Primitive::KeyWrite { key, value, .. } => {
                            *key = Key::from_u32_reference(i);
                            *value = Value::new(&i.to_be_bytes()).unwrap();
                        }
                        Primitive::KeyIncrement { key, .. } => *key = Key::from_u32_reference(i),
                        _ => unreachable!(),
                    }
                    emit(&mut bufs, reference, r);
                }
                _ => {
                    let header = ReportHeader {
                        immediate: i % 11 == 4,
                        ..HDR
                    };
                    emit(&mut bufs, Profile::Extended, keyed(true, n, i, header));
                }
            }
        }
        let cap = |c: &mut PipelineConfig| c.qp.max_outstanding = 60;
        // With 64-frame batches, the cap is reached late: bursts fill the batch first.
        let late_cap = |c: &mut PipelineConfig| c.qp.max_outstanding = 500;
        // The run is compiled twice (`dta_proto::cpu::with_v3`): where the CPU has x86-64-v3
        // the first pass runs its v3 copy, the second the baseline's. (Other tests of this
        // binary may take the baseline copy meanwhile: both give the same bytes.) A batch of
        // 6 frames sends most reports through the QP's questions and its ring; one of 64
        // sends whole runs straight into the batch (`AcceptDirect`) until it is full, NACKs
        // taking places in it too, and then up to the PSN cap.
        let passes = [(true, 6), (false, 6), (true, 64), (false, 64)].map(|(v3, tx)| {
            dta_proto::cpu::allow_v3(v3);
            if tx == 6 {
                runs_against_dispatch(kind.clone(), cap, &bufs, tx)
            } else {
                runs_against_dispatch(kind.clone(), late_cap, &bufs, tx)
            }
        });
        dta_proto::cpu::allow_v3(true);
        assert_eq!(
            passes[0].0, passes[1].0,
            "{kind:?}: the two copies' counters"
        );
        assert_eq!(
            passes[2].0, passes[3].0,
            "{kind:?}: the two copies' counters, 64-frame batches"
        );
        assert!(
            passes[2].0.drop_qp_queue_full > 0 && passes[2].1 > 450,
            "{kind:?}: the cap reached late: {:?}",
            passes[2]
        );
        let (c, frames) = passes[0];
        let mut expect = vec![
            ("queue full", c.drop_qp_queue_full),
            ("bad redundancy", c.drop_bad_redundancy),
            ("no store", c.drop_no_store),
            ("unknown list", c.drop_unknown_list),
            ("truncated", c.drop_truncated + c.drop_malformed),
            ("NACKs", c.nacks_sent),
            ("Immediates", c.frames_imm),
            ("translated", c.translated),
        ];
        if kw {
            expect.push(("value too long", c.drop_value_too_long));
        }
        for (what, n) in expect {
            assert!(n > 0, "{kind:?} {what}: {c:?}");
        }
        assert!(frames > 60, "{kind:?}: {frames} frames and NACKs sent");
    }
}
