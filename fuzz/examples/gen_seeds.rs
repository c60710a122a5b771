//! Writes seed corpora for every fuzz target into `fuzz/seeds/<target>/` (or the directory
//! given as the first argument): valid messages of each format, and short operation sequences
//! for the stateful targets. Run: `cargo run --manifest-path fuzz/Cargo.toml --example gen_seeds`.

use std::fs;
use std::path::{Path, PathBuf};

use dta_proto::batch::TxBatch;
use dta_proto::meta::StoreKind;
use dta_proto::wire::dta::BaseVariant;
use dta_proto::wire::ethernet::MacAddr;
use dta_proto::wire::ib::{Psn, Qpn};
use dta_proto::wire::mad::MAD_LEN;
use dta_proto::wire::metarec::MetaRecord;
use dta_proto::wire::nack::NackRepr;
use dta_proto::wire::report::{Primitive, Priority, Profile, Report, ReportHeader};
use dta_proto::wire::roce::L2L4_LEN;
use dta_proto::{Key, Value};
use dta_translator::control::cm::CmInitiator;

fn put(dir: &Path, target: &str, name: &str, bytes: &[u8]) {
    let d = dir.join(target);
    fs::create_dir_all(&d).expect("create seed dir");
    fs::write(d.join(name), bytes).expect("write seed");
}

fn main() {
    let dir: PathBuf = std::env::args()
        .nth(1)
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/seeds")));
    let _ = BaseVariant::B;

    // Reports: every primitive in every profile.
    let key = Key::new(b"flow-1234").expect("key");
    let value = Value::new(&[1, 2, 3, 4]).expect("value");
    let prims = [
        Primitive::KeyWrite {
            redundancy: 2,
            key,
            value,
        },
        Primitive::KeyIncrement {
            redundancy: 2,
            key,
            delta: 7,
        },
        Primitive::Append { list: 1, value },
        Primitive::Postcard {
            flow: key,
            hop: 1,
            path_len: 3,
            value: 0xdead,
        },
    ];
    let mut reports = Vec::new();
    for (i, p) in prims.iter().enumerate() {
        for (j, profile) in [Profile::Extended, Profile::ReferenceA, Profile::ReferenceB]
            .into_iter()
            .enumerate()
        {
            let r = Report {
                header: ReportHeader {
                    profile,
                    immediate: i % 2 == 0,
                    retransmittable: true,
                    seq: Some(5),
                    priority: Priority::High,
                },
                primitive: *p,
            };
            let mut b = [0u8; 256];
            if let Ok(n) = r.emit(profile, &mut b) {
                put(&dir, "report", &format!("r{i}{j}"), &b[..n]);
                reports.push((i, j, b[..n].to_vec()));
            }
        }
    }

    // NACKs.
    for (i, n) in [
        NackRepr::Reference { last_in_order: 9 },
        NackRepr::Extended {
            first_missing: 100,
            count: 3,
        },
    ]
    .iter()
    .enumerate()
    {
        let mut b = [0u8; 16];
        let len = n.emit(&mut b);
        put(&dir, "nack", &format!("n{i}"), &b[..len]);
    }

    // Metadata records of real stores, and a CM REQ from the real initiator.
    let h = dta_tests::harness::Harness::new(
        vec![dta_collector::config::StoreConfig {
            name: "kw".into(),
            port: None,
            cm_allow: None,
            kind: dta_collector::config::StoreKindConfig::new(StoreKind::KeyWrite {
                slots: 64,
                slot_size: 8,
                hash: Default::default(),
            })
            .with_redundancy(2),
        }],
        Default::default(),
    );
    put(
        &dir,
        "metarec",
        "kw",
        &MetaRecord::from_store_meta(&h.stores[0].meta, true).to_bytes(),
    );
    let mut init = CmInitiator::new(
        dta_tests::harness::TRANSLATOR,
        MacAddr([2, 0, 0, 0, 0, 1]),
        dta_tests::harness::COLLECTOR,
        MacAddr([2, 0, 0, 0, 0, 0x51]),
        true,
        1,
    );
    let mut tx = TxBatch::new(4, 4200);
    init.connect(20000, Qpn::new(0x100), Psn::new(1), 0, &mut tx);
    let f = tx.frame(0);
    let transport = &f[L2L4_LEN..];
    put(&dir, "cm_mad", "req_transport", transport);
    put(&dir, "cm_mad", "req_mad", &transport[20..20 + MAD_LEN]);

    // Configurations.
    put(
        &dir,
        "config",
        "translator",
        include_bytes!("../../translator/translator.example.toml"),
    );
    put(
        &dir,
        "config",
        "collector",
        b"[collector]\nroce = \"127.0.0.1:4791\"\ncontrol = \"127.0.0.1:14791\"\n\n\
          [[static_peer]]\nroce = \"127.0.0.2:4791\"\nworkers = 1\n\n\
          [[store]]\nname = \"paths\"\nkind = \"keywrite\"\nslots = 1024\nslot_size = 32\n\n\
          [[store]]\nname = \"lists\"\nkind = \"append\"\nlists = 4\ncapacity = 64\n",
    );

    // Pipeline: each report as a raw datagram (op 2), then a time step (op 3).
    let mut seq = vec![0u8];
    for (_, _, b) in reports.iter().take(8) {
        seq.push(2);
        seq.push(b.len() as u8);
        seq.extend_from_slice(b);
    }
    seq.extend_from_slice(&[3, 0x10, 0x00]);
    put(&dir, "pipeline", "reports", &seq);
    // Built reports of each primitive (op 0) with a fixed field pattern.
    let mut built = vec![2u8];
    for p in 0..4u8 {
        built.extend_from_slice(&[0, p << 2, 1, 0, 0, 0, 0, 1, 1, 3, b'a', b'b', b'c', 3]);
        built.extend_from_slice(&[9, 9, 9, 1, 0, 0, 0, 0, 0, 0, 0, 1, 2]);
    }
    put(&dir, "pipeline", "built", &built);

    // RNIC: WRITE ONLY at the expected PSN with A's R_Key, then a duplicate, a FETCH_ADD and
    // a spoofed one (see fuzz_targets/rnic.rs for the decoding).
    let write = |sel: u8, opcode_idx: u8, psn_sel: u8| {
        vec![
            0, sel, opcode_idx, psn_sel, 0, 0, 0x00, 0x40, 0, 16, 0, 1, 0, 0, 0, 0, 0, 0, 0, 1,
            0x11, 0,
        ]
    };
    let mut rn = vec![0x24u8];
    rn.extend(write(0, 10, 0));
    rn.extend(write(0, 10, 200));
    rn.extend(write(0, 18, 0));
    rn.extend(write(0x18, 10, 0));
    rn.extend(write(0, 6, 0));
    rn.extend(write(0, 7, 0));
    rn.extend(write(0, 8, 0));
    rn.extend([7, 0, 0, 1, 0, 0]);
    put(&dir, "rnic", "sequence", &rn);

    // CM: deliver the REQ, the REP, the RTU, the metadata SEND and its ACK; then time.
    put(
        &dir,
        "cm_state",
        "handshake",
        &[
            0, 1, 0, 0, 0, 2, 0, 0, 0, 1, 0, 0, 0, 2, 0, 0, 0, 1, 0, 0, 0, 9, 0, 0, 1, 0,
        ],
    );
    put(
        &dir,
        "cm_state",
        "two",
        &[
            1, 0, 2, 0, 0, 0, 0, 1, 0, 0, 0, 0, 2, 1, 0, 0, 0, 1, 0, 0, 0, 2, 0, 0, 0, 7, 1, 3, 0,
            0, 0, 0, 1,
        ],
    );
    println!("seeds written to {}", dir.display());
}
