//! Runs the in-memory pipeline over a fixed workload for instruction-level profiling
//! (`valgrind --tool=callgrind target/release/examples/pipeline_profile append`): instruction
//! counts are repeatable on a shared, noisy machine where wall-clock timings are not.

use std::net::{Ipv4Addr, SocketAddrV4};

use dta_proto::batch::{Datagram, TxBatch};
use dta_proto::hash::HashProfile;
use dta_proto::layout::AppendFormat;
use dta_proto::meta::StoreKind;
use dta_proto::wire::report::{Primitive, Priority, Profile, Report, ReportHeader};
use dta_proto::{Key, Value};

fn main() {
    let what = std::env::args().nth(1).unwrap_or_else(|| "append".into());
    let n: u32 = std::env::args()
        .nth(2)
        .and_then(|s| s.parse().ok())
        .unwrap_or(100_000);
    if what == "sketch" {
        return sketch(n);
    }
    let (kinds, profile, reports) = if what == "mix" || what == "mix-demo" {
        // The demo's mix (`bench micro`'s "Key-Write+Append mix"): Key-Writes and loss
        // events interleaved at random, so most runs of one primitive are short. `mix-demo`:
        // with the demo's second Append store beside them.
        let (kw, profile, kws) = case("keywrite");
        let (loss, _, losses) = case("loss");
        let (mut kws, mut losses) = (kws.into_iter(), losses.into_iter());
        let mut z = 0x9E37_79B9_7F4A_7C15u64;
        let reports = (0..4096)
            .filter_map(|_| {
                z ^= z << 13;
                z ^= z >> 7;
                z ^= z << 17;
                if z & 1 == 0 {
                    kws.next()
                } else {
                    losses.next()
                }
            })
            .collect();
        let mut kinds = vec![kw, loss];
        if what == "mix-demo" {
            // The demo's stores: a second Append store (congestion events, lists 8..16)
            // that these reports do not use.
            kinds.push(StoreKind::Append {
                lists: 8,
                first_list: 8,
                capacity: 1 << 16,
                entry_size: 8,
                batch: 16,
                format: AppendFormat::Sequenced,
                list_stride: 1 << 22,
            });
        }
        (kinds, profile, reports)
    } else {
        let (kind, profile, reports) = case(&what);
        (vec![kind], profile, reports)
    };
    let mut p = dta_translator::datapath::pipeline::stores_pipeline_with(&kinds, |c| {
        c.postcard_cache_slots = 4096;
        c.postcard_flush_ns = 1_000_000;
        // Nothing acknowledges this pipeline: the largest cap on unconfirmed PSNs lets it
        // take 2^22 frames before refusing reports (the run says how many it translated).
        c.qp.max_outstanding = dta_translator::datapath::qp::MAX_OUTSTANDING;
    });
    let bufs: Vec<Vec<u8>> = reports
        .iter()
        .map(|r| {
            let mut b = vec![0u8; 128];
            let n = r.emit(profile, &mut b).unwrap();
            b.truncate(n);
            b
        })
        .collect();
    let src = SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 200), 5000);
    let dst = SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 101), 40040);
    let dgrams: Vec<Datagram<'_>> = bufs
        .iter()
        .map(|b| Datagram {
            src,
            dst,
            ip: None,
            payload: b,
        })
        .collect();
    let mut tx = TxBatch::new(64 * 10 + 64, 2048);
    let t0 = std::time::Instant::now();
    let mut done = 0u32;
    let mut now = 0;
    // Virtual time per 64-report burst: about the benchmark's pace for the Postcarding mix
    // (so flush timers fire as they do there).
    let step = if what == "postcard-mix" { 5000 } else { 1000 };
    'run: while done < n {
        for burst in dgrams.chunks(64) {
            // Exactly `n` reports (when `n` is a multiple of 64): whole program ÷ `n` is
            // per report even for a trace longer than `n` (postcard-mix's 200,000).
            if done >= n {
                break 'run;
            }
            now += step;
            if p.next_deadline().is_some_and(|d| d <= now) {
                p.poll(now, &mut tx);
            }
            p.handle_reports(now, burst, &mut tx);
            tx.clear();
            done += burst.len() as u32;
        }
    }
    let dt = t0.elapsed().as_secs_f64();
    eprintln!(
        "{what}: {done} reports in {dt:.3} s = {:.2} M reports/s; translated {}",
        done as f64 / dt / 1e6,
        p.counters().translated
    );
}

/// Case `what`'s store and reports (4,096 of them, sent round and round).
fn case(what: &str) -> (StoreKind, Profile, Vec<Report>) {
    let hdr = ReportHeader {
        profile: Profile::Extended,
        immediate: false,
        retransmittable: false,
        seq: Some(0),
        priority: Priority::Medium,
    };
    // 13-byte keys (an IPv4 5-tuple's length), distinct per i.
    let key13 = |i: u32| {
        let mut k = [7u8; 13];
        k[..4].copy_from_slice(&i.to_be_bytes());
        Key::new(&k).unwrap()
    };
    let report = |primitive| Report {
        header: hdr,
        primitive,
    };
    match what {
        "keywrite" => (
            StoreKind::KeyWrite {
                slots: 1 << 20,
                slot_size: 32,
                hash: HashProfile::Independent,
            },
            Profile::Extended,
            (0..4096u32)
                .map(|i| {
                    report(Primitive::KeyWrite {
                        redundancy: 2,
                        key: key13(i),
                        value: Value::new(&[i as u8; 20]).unwrap(),
                    })
                })
                .collect(),
        ),
        "keyincrement" => (
            StoreKind::KeyIncrement {
                slots: 1 << 20,
                hash: HashProfile::Independent,
            },
            Profile::Extended,
            (0..4096u32)
                .map(|i| {
                    report(Primitive::KeyIncrement {
                        redundancy: 2,
                        key: key13(i),
                        delta: 1 + i as u64,
                    })
                })
                .collect(),
        ),
        // The reference profile (variant B) as Tofino reporters send it: 4-byte keys and
        // values.
        "keywrite-ref" => (
            StoreKind::KeyWrite {
                slots: 1 << 20,
                slot_size: 32,
                hash: HashProfile::Independent,
            },
            Profile::ReferenceB,
            (0..4096u32)
                .map(|i| {
                    report(Primitive::KeyWrite {
                        redundancy: 2,
                        key: Key::from_u32_reference(i.wrapping_mul(0x9E37_79B9)),
                        value: Value::new(&i.to_be_bytes()).unwrap(),
                    })
                })
                .collect(),
        ),
        "keyincrement-ref" => (
            StoreKind::KeyIncrement {
                slots: 1 << 20,
                hash: HashProfile::Independent,
            },
            Profile::ReferenceB,
            (0..4096u32)
                .map(|i| {
                    report(Primitive::KeyIncrement {
                        redundancy: 2,
                        key: Key::from_u32_reference(i.wrapping_mul(0x9E37_79B9)),
                        delta: 1 + i as u64,
                    })
                })
                .collect(),
        ),
        "postcard" => (
            StoreKind::Postcard {
                chunks: 1 << 20,
                hops: 5,
                hash: HashProfile::Independent,
            },
            Profile::ReferenceB,
            (0..4096u32)
                .map(|i| Report {
                    header: hdr,
                    primitive: Primitive::Postcard {
                        flow: Key::new(&(i / 5).to_be_bytes()).unwrap(),
                        hop: (i % 5) as u8,
                        path_len: 0,
                        value: 100 + i,
                    },
                })
                .collect(),
        ),
        // The benchmark's Postcarding workload: 5-hop paths of 1,024 concurrent flows with
        // 13-byte 5-tuple keys, interleaved at random, into a 4,096-entry cache.
        "postcard-mix" => {
            let mut active: Vec<(u32, u8)> = (0..1024).map(|f| (f, 0)).collect();
            let mut next_flow = 1024u32;
            let mut rng = 0x2545_F491_4F6C_DD1Du64;
            let reports = (0..200_000u32)
                .map(|_| {
                    rng ^= rng << 13;
                    rng ^= rng >> 7;
                    rng ^= rng << 17;
                    let a = (rng % 1024) as usize;
                    let (flow, hop) = active[a];
                    active[a] = if hop == 4 {
                        next_flow += 1;
                        (next_flow, 0)
                    } else {
                        (flow, hop + 1)
                    };
                    report(Primitive::Postcard {
                        flow: key13(flow),
                        hop,
                        path_len: 5,
                        value: 100 + flow,
                    })
                })
                .collect();
            (
                StoreKind::Postcard {
                    chunks: 1 << 16,
                    hops: 5,
                    hash: HashProfile::Independent,
                },
                Profile::Extended,
                reports,
            )
        }
        "loss" => (
            StoreKind::Append {
                lists: 8,
                first_list: 0,
                capacity: 1 << 16,
                entry_size: 18,
                batch: 16,
                format: AppendFormat::Sequenced,
                list_stride: 1 << 22,
            },
            Profile::Extended,
            (0..4096u32)
                .map(|i| Report {
                    header: hdr,
                    primitive: Primitive::Append {
                        list: i % 8,
                        value: Value::new(&[i as u8; 18]).unwrap(),
                    },
                })
                .collect(),
        ),
        _ => (
            StoreKind::Append {
                lists: 64,
                first_list: 0,
                capacity: 1 << 16,
                entry_size: 4,
                batch: 16,
                format: AppendFormat::Sequenced,
                list_stride: 1 << 20,
            },
            Profile::ReferenceB,
            (0..4096u32)
                .map(|i| Report {
                    header: hdr,
                    primitive: Primitive::Append {
                        list: i % 64,
                        value: Value::new(&i.to_le_bytes()).unwrap(),
                    },
                })
                .collect(),
        ),
    }
}

/// `sketch`: Sketch-Merge of a Count-Min of 4 rows × 4,096 4-byte columns from 4 switches,
/// 64 columns per report (256 counters), epoch after epoch; prints the counters merged, the
/// unit the issue measures Sketch-Merge in (instructions ÷ merged 32-bit counters).
fn sketch(n: u32) {
    use dta_proto::sketch::{Sketch, SketchKind, SketchShape};
    use dta_translator::datapath::primitive::SketchSettings;
    const SWITCHES: u32 = 4;
    const COLUMNS: u32 = 4096;
    const PER_REPORT: u32 = 64;
    let kind = StoreKind::Sketch {
        sketch_id: 7,
        sketch: SketchKind::CountMin,
        rows: 4,
        columns: COLUMNS,
        cell_width: 4,
        batch: 16,
        epochs: 2,
        hash: Default::default(),
    };
    let mut p = dta_translator::datapath::pipeline::single_store_pipeline_with(kind, |c| {
        c.sketch = SketchSettings {
            expected_switches: SWITCHES as u16,
            ..SketchSettings::default()
        };
    });
    let shape = SketchShape::new(SketchKind::CountMin, 4, COLUMNS, 4).unwrap();
    let mut sketches: Vec<Sketch> = (0..SWITCHES).map(|_| Sketch::new(shape)).collect();
    for (s, sk) in sketches.iter_mut().enumerate() {
        for k in 0..2000u32 {
            let key = (k * 7 + s as u32).to_be_bytes();
            sk.update(&Key::new(&key).unwrap(), 1 + k % 5);
        }
    }
    // One epoch's reports, switch after switch; the epoch number is patched per round.
    let per_epoch = SWITCHES * COLUMNS / PER_REPORT;
    let mut tx = TxBatch::new(1024, 2048);
    let mut now = 0u64;
    let (mut done, mut epoch) = (0u32, 1u32);
    let src = |s: u32| SocketAddrV4::new(Ipv4Addr::new(10, 0, 1, s as u8 + 1), 5000);
    let dst = SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 101), 40040);
    let t0 = std::time::Instant::now();
    while done < n {
        let bufs: Vec<(u32, Vec<u8>)> = (0..SWITCHES)
            .flat_map(|s| {
                let sk = &sketches[s as usize];
                (0..COLUMNS / PER_REPORT).map(move |i| {
                    let r = sk
                        .column_report(7, s + 1, epoch, i * PER_REPORT, PER_REPORT)
                        .unwrap();
                    (s, r)
                })
            })
            .collect();
        let dgrams: Vec<Datagram<'_>> = bufs
            .iter()
            .map(|(s, b)| Datagram {
                src: src(*s),
                dst,
                ip: None,
                payload: b,
            })
            .collect();
        for burst in dgrams.chunks(32) {
            now += 1000;
            if p.next_deadline().is_some_and(|d| d <= now) {
                p.poll(now, &mut tx);
            }
            p.handle_reports(now, burst, &mut tx);
            tx.clear();
        }
        done += per_epoch;
        epoch += 1;
    }
    let dt = t0.elapsed().as_secs_f64();
    let c = p.counters();
    eprintln!(
        "sketch: {done} reports, {} counters merged in {dt:.3} s; epochs {}",
        c.sketch_columns_merged * 4,
        c.sketch_epochs
    );
}
