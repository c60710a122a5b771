//! One-core throughput of the in-memory pipeline (reports in, RoCEv2 frames with ICRC out),
//! per primitive. Frames are produced into a reused batch and discarded.

use std::net::{Ipv4Addr, SocketAddrV4};

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use dta_proto::batch::{Datagram, TxBatch};
use dta_proto::hash::HashProfile;
use dta_proto::layout::AppendFormat;
use dta_proto::meta::StoreKind;
use dta_proto::wire::report::{Primitive, Priority, Profile, Report, ReportHeader};
use dta_proto::{Key, Value};
use dta_translator::datapath::pipeline::Pipeline;

fn pipeline(kind: StoreKind) -> Pipeline {
    dta_translator::datapath::pipeline::single_store_pipeline(kind)
}

fn hdr() -> ReportHeader {
    ReportHeader {
        profile: Profile::Extended,
        immediate: false,
        retransmittable: false,
        seq: Some(0),
        priority: Priority::Medium,
    }
}

fn encode(reports: &[Report], profile: Profile) -> Vec<Vec<u8>> {
    reports
        .iter()
        .map(|r| {
            let mut b = vec![0u8; 128];
            let n = r.emit(profile, &mut b).unwrap();
            b.truncate(n);
            b
        })
        .collect()
}

fn run(c: &mut Criterion, name: &str, mut p: Pipeline, bufs: Vec<Vec<u8>>) {
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
    let mut now = 0u64;
    let mut g = c.benchmark_group("pipeline");
    g.throughput(Throughput::Elements(dgrams.len() as u64));
    g.bench_function(name, |b| {
        b.iter(|| {
            for burst in dgrams.chunks(64) {
                now += 1000;
                p.handle_reports(now, burst, &mut tx);
                tx.clear();
            }
        })
    });
    g.finish();
}

fn benches(c: &mut Criterion) {
    let n = 4096u32;
    // Key-Write, N = 2: 13-byte flow keys, 20-byte INT paths (extended profile).
    let kw: Vec<Report> = (0..n)
        .map(|i| {
            let mut k = [7u8; 13];
            k[..4].copy_from_slice(&i.to_be_bytes());
            Report {
                header: hdr(),
                primitive: Primitive::KeyWrite {
                    redundancy: 2,
                    key: Key::new(&k).unwrap(),
                    value: Value::new(&[i as u8; 20]).unwrap(),
                },
            }
        })
        .collect();
    run(
        c,
        "keywrite_n2_ext",
        pipeline(StoreKind::KeyWrite {
            slots: 1 << 20,
            slot_size: 32,
            hash: HashProfile::Independent,
        }),
        encode(&kw, Profile::Extended),
    );
    // Key-Write, N = 2, reference profile (4-byte key and value).
    let kwr: Vec<Report> = (0..n)
        .map(|i| Report {
            header: hdr(),
            primitive: Primitive::KeyWrite {
                redundancy: 2,
                key: Key::from_u32_reference(i),
                value: Value::new(&i.to_be_bytes()).unwrap(),
            },
        })
        .collect();
    run(
        c,
        "keywrite_n2_ref",
        pipeline(StoreKind::KeyWrite {
            slots: 1 << 20,
            slot_size: 8,
            hash: HashProfile::Independent,
        }),
        encode(&kwr, Profile::ReferenceB),
    );
    // Key-Increment, N = 2.
    let ki: Vec<Report> = (0..n)
        .map(|i| Report {
            header: hdr(),
            primitive: Primitive::KeyIncrement {
                redundancy: 2,
                key: Key::from_u32_reference(i % 1000),
                delta: 1,
            },
        })
        .collect();
    run(
        c,
        "keyincrement_n2_ref",
        pipeline(StoreKind::KeyIncrement {
            slots: 1 << 20,
            hash: HashProfile::Independent,
        }),
        encode(&ki, Profile::ReferenceB),
    );
    // Append, batch 16, 4-byte entries over 64 lists (reference profile).
    let ap: Vec<Report> = (0..n)
        .map(|i| Report {
            header: hdr(),
            primitive: Primitive::Append {
                list: i % 64,
                value: Value::new(&i.to_le_bytes()).unwrap(),
            },
        })
        .collect();
    let kind = StoreKind::Append {
        lists: 64,
        first_list: 0,
        capacity: 1 << 16,
        entry_size: 4,
        batch: 16,
        format: AppendFormat::Sequenced,
        list_stride: 1 << 20,
    };
    run(
        c,
        "append_b16_ref",
        pipeline(kind),
        encode(&ap, Profile::ReferenceB),
    );
    // Postcarding: 5-hop paths, 4-byte flow IDs (reference-size), independent hashing.
    let pc: Vec<Report> = (0..n)
        .map(|i| {
            let flow = i / 5;
            Report {
                header: hdr(),
                primitive: Primitive::Postcard {
                    flow: Key::new(&flow.to_be_bytes()).unwrap(),
                    hop: (i % 5) as u8,
                    path_len: 0,
                    value: 100 + i,
                },
            }
        })
        .collect();
    run(
        c,
        "postcard_5hop_ref",
        pipeline(StoreKind::Postcard {
            chunks: 1 << 20,
            hops: 5,
            hash: HashProfile::Independent,
        }),
        encode(&pc, Profile::ReferenceB),
    );
}

criterion_group!(g, benches);
criterion_main!(g);
