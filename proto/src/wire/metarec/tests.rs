use super::*;
use crate::meta::QpMeta;
use proptest::prelude::*;

fn key_write() -> MetaRecord {
    MetaRecord {
        addr: 0x7F00_1234_5000,
        len: 1 << 20,
        rkey: 0xDEAD_BEEF,
        verify_icrc: true,
        list_heads: false,
        redundancy: None,
        kind: StoreKind::KeyWrite {
            slots: 1 << 16,
            slot_size: 16,
            hash: HashProfile::Independent,
        },
    }
}

#[test]
fn version_2_carries_redundancy() {
    let n3 = Redundancy::new(3);
    let rec = MetaRecord {
        redundancy: n3,
        ..key_write()
    };
    let b = rec.to_bytes();
    assert_eq!(&b[0..8], b"DTAM\x02\x01\x01\x01");
    assert_eq!(b[39], 3);
    assert_eq!(MetaRecord::parse(&b), Ok(rec.clone()));
    // Everything but the version and byte 39 (and so the CRC) is as in version 1.
    let v1 = key_write().to_bytes();
    assert_eq!(v1[4], META_VERSION_1);
    assert_eq!(v1[39], 0);
    assert_eq!(b[..4], v1[..4]);
    assert_eq!(b[5..39], v1[5..39]);
    assert_eq!(b[40..60], v1[40..60]);
    // A version-1 record still parses, with no N.
    assert_eq!(MetaRecord::parse(&v1).unwrap().redundancy, None);
    // N is carried to and from the store's metadata.
    let meta = rec.to_store_meta("kw".into());
    assert_eq!(meta.redundancy, n3);
    assert_eq!(MetaRecord::from_store_meta(&meta, true), rec);
    // Byte 39 out of range in version 2, or set in version 1: malformed.
    for n in [0u8, 9, 255] {
        assert_eq!(
            MetaRecord::parse(&patched(b, 39, n)),
            Err(Error::Malformed),
            "N {n}"
        );
    }
    assert_eq!(
        MetaRecord::parse(&patched(v1, 39, 2)),
        Err(Error::Malformed)
    );
    assert_eq!(
        MetaRecord::parse(&patched(b, 4, 3)),
        Err(Error::UnsupportedVersion)
    );
    // Every flipped bit of a version-2 record is caught.
    for bit in 0..META_RECORD_LEN * 8 {
        let mut x = b;
        x[bit / 8] ^= 1 << (bit % 8);
        assert!(MetaRecord::parse(&x).is_err(), "bit {bit}");
    }
    // Append has no N: a store's N is not carried, and a version-2 Append is malformed.
    let app = StoreMeta {
        redundancy: n3,
        kind: StoreKind::Append {
            lists: 1,
            first_list: 0,
            capacity: 16,
            entry_size: 4,
            batch: 4,
            format: AppendFormat::Sequenced,
            list_stride: 64,
        },
        ..meta
    };
    let ar = MetaRecord::from_store_meta(&app, true);
    assert_eq!(ar.redundancy, None);
    let ab = ar.to_bytes();
    assert_eq!(ab[4], META_VERSION_1);
    assert_eq!(
        MetaRecord::parse(&patched(patched(ab, 4, META_VERSION), 39, 2)),
        Err(Error::Malformed)
    );
    assert_eq!(
        MetaRecord::parse(&patched(ab, 4, META_VERSION)),
        Err(Error::Malformed)
    );
}

#[test]
fn list_heads_flag_only_for_sequenced_append() {
    let rec = MetaRecord {
        list_heads: true,
        kind: StoreKind::Append {
            lists: 4,
            first_list: 0,
            capacity: 64,
            entry_size: 4,
            batch: 4,
            format: AppendFormat::Sequenced,
            list_stride: 1024,
        },
        ..key_write()
    };
    let b = rec.to_bytes();
    assert_eq!(
        b[7],
        flags::VERIFY_ICRC | flags::APPEND_SEQUENCED | flags::LIST_HEADS
    );
    assert_eq!(MetaRecord::parse(&b), Ok(rec.clone()));
    // The flag on a reference-format Append or another kind is malformed.
    let reseal = |mut b: [u8; META_RECORD_LEN], f: u8| {
        b[7] = f;
        let crc = IEEE.checksum(&b[..60]);
        b[60..].copy_from_slice(&crc.to_le_bytes());
        b
    };
    let b = reseal(b, flags::LIST_HEADS);
    assert_eq!(MetaRecord::parse(&b), Err(Error::Malformed));
    let kw = reseal(key_write().to_bytes(), flags::LIST_HEADS);
    assert_eq!(MetaRecord::parse(&kw), Err(Error::Malformed));
}

#[test]
fn documented_bytes() {
    let rec = MetaRecord {
        addr: 0x0102_0304_0506_0708,
        len: 0x1000,
        rkey: 0xAABB_CCDD,
        verify_icrc: true,
        list_heads: false,
        redundancy: None,
        kind: StoreKind::Append {
            lists: 4,
            first_list: 8,
            capacity: 1024,
            entry_size: 4,
            batch: 16,
            format: AppendFormat::Sequenced,
            list_stride: 0x1_0000,
        },
    };
    let b = rec.to_bytes();
    assert_eq!(&b[0..8], b"DTAM\x01\x02\x00\x03");
    assert_eq!(b[8..16], [8, 7, 6, 5, 4, 3, 2, 1]);
    assert_eq!(b[16..24], [0, 0x10, 0, 0, 0, 0, 0, 0]);
    assert_eq!(b[24..28], [0xDD, 0xCC, 0xBB, 0xAA]);
    assert_eq!(b[28..32], [4, 0, 0, 0]);
    assert_eq!(b[32..36], [0, 4, 0, 0]);
    assert_eq!(b[36..40], [16, 0, 0, 0]);
    assert_eq!(b[40..48], [4, 0, 0, 0, 8, 0, 0, 0]);
    assert_eq!(b[48..56], [0, 0, 1, 0, 0, 0, 0, 0]);
    assert_eq!(b[56..60], [0; 4]);
    assert_eq!(
        u32::from_le_bytes(b[60..64].try_into().unwrap()),
        IEEE.checksum(&b[..60])
    );
    assert_eq!(MetaRecord::parse(&b), Ok(rec));

    let pc = MetaRecord {
        kind: StoreKind::Postcard {
            chunks: 1 << 15,
            hops: 5,
            hash: HashProfile::Reference,
        },
        verify_icrc: false,
        ..key_write()
    }
    .to_bytes();
    assert_eq!(pc[5..8], [4, 0, 0]);
    assert_eq!(pc[28..40], [0, 0, 0, 0, 0, 0x80, 0, 0, 0, 0, 5, 0]);
    let ki = MetaRecord {
        kind: StoreKind::KeyIncrement {
            slots: 8,
            hash: HashProfile::Independent,
        },
        ..key_write()
    }
    .to_bytes();
    assert_eq!(ki[5..8], [3, 1, 1]);
    assert_eq!(ki[28..36], [8, 0, 0, 0, 8, 0, 0, 0]);
}

#[test]
fn every_flipped_bit_is_rejected() {
    let good = key_write().to_bytes();
    for bit in 0..META_RECORD_LEN * 8 {
        let mut b = good;
        b[bit / 8] ^= 1 << (bit % 8);
        let err = MetaRecord::parse(&b).unwrap_err();
        let expected = if bit / 8 == field::VERSION {
            Error::UnsupportedVersion
        } else {
            Error::Malformed
        };
        assert_eq!(err, expected, "bit {bit}");
    }
}

/// Rewrites byte `at` and fixes up the CRC, to reach the checks behind it.
fn patched(mut b: [u8; META_RECORD_LEN], at: usize, v: u8) -> [u8; META_RECORD_LEN] {
    b[at] = v;
    let crc = IEEE.checksum(&b[..60]);
    b[60..].copy_from_slice(&crc.to_le_bytes());
    b
}

#[test]
fn header_and_field_checks() {
    let good = key_write().to_bytes();
    assert_eq!(MetaRecord::parse(&good[..63]), Err(Error::Truncated));
    let mut longer = [0u8; 80];
    longer[..64].copy_from_slice(&good);
    assert_eq!(MetaRecord::parse(&longer), Ok(key_write()));

    // Magic and version are checked before the CRC.
    assert_eq!(
        MetaRecord::parse(&patched(good, 0, b'X')),
        Err(Error::Malformed)
    );
    assert_eq!(
        MetaRecord::parse(&patched(good, 4, 3)),
        Err(Error::UnsupportedVersion)
    );
    assert_eq!(
        MetaRecord::parse(&patched(good, 4, 0)),
        Err(Error::UnsupportedVersion)
    );
    assert_eq!(
        MetaRecord::parse(&patched(good, 5, 9)),
        Err(Error::UnknownOpcode)
    );
    assert_eq!(
        MetaRecord::parse(&patched(good, 5, 0)),
        Err(Error::UnknownOpcode)
    );
    for (at, v) in [
        (6, 2),    // unknown hash profile
        (7, 0x02), // sequenced flag on Key-Write
        (7, 0x80), // undefined flag
        (36, 1),   // batch on Key-Write
        (38, 1),   // hops on Key-Write
        (39, 1),   // reserved
        (44, 1),   // first list on Key-Write
        (57, 1),   // reserved
    ] {
        assert_eq!(
            MetaRecord::parse(&patched(good, at, v)),
            Err(Error::Malformed),
            "byte {at} = {v}"
        );
    }
    let ki = MetaRecord {
        kind: StoreKind::KeyIncrement {
            slots: 8,
            hash: HashProfile::Independent,
        },
        ..key_write()
    }
    .to_bytes();
    assert_eq!(
        MetaRecord::parse(&patched(ki, 28, 4)),
        Err(Error::Malformed)
    );
    let mut app = MetaRecord {
        kind: StoreKind::Append {
            lists: 1,
            first_list: 0,
            capacity: 16,
            entry_size: 4,
            batch: 4,
            format: AppendFormat::Reference,
            list_stride: 64,
        },
        ..key_write()
    }
    .to_bytes();
    assert_eq!(
        MetaRecord::parse(&patched(app, 6, 1)),
        Err(Error::Malformed)
    );
    app = patched(app, 7, 0x03);
    assert!(matches!(
        MetaRecord::parse(&app).unwrap().kind,
        StoreKind::Append {
            format: AppendFormat::Sequenced,
            ..
        }
    ));
}

#[test]
fn store_meta_conversions() {
    let meta = StoreMeta {
        name: "kv".into(),
        addr: 0x1000,
        len: 0x2000,
        rkey: 77,
        qps: vec![QpMeta {
            qpn: 17,
            psn: 1,
            peer_qpn: 18,
        }],
        redundancy: Redundancy::new(2),
        kind: StoreKind::KeyWrite {
            slots: 256,
            slot_size: 32,
            hash: HashProfile::Reference,
        },
    };
    let rec = MetaRecord::from_store_meta(&meta, false);
    assert_eq!(rec.rkey, 77);
    assert!(!rec.verify_icrc);
    let back = MetaRecord::parse(&rec.to_bytes())
        .unwrap()
        .to_store_meta("kv".into());
    assert_eq!(
        back,
        StoreMeta {
            qps: Vec::new(),
            ..meta
        }
    );

    let huge = StoreMeta {
        redundancy: None,
        kind: StoreKind::Append {
            lists: 1,
            first_list: 0,
            capacity: 1 << 20,
            entry_size: 4,
            batch: 1 << 20,
            format: AppendFormat::Sequenced,
            list_stride: 0,
        },
        ..back
    };
    let rec = MetaRecord::from_store_meta(&huge, true);
    assert!(matches!(rec.kind, StoreKind::Append { batch: 65535, .. }));
    assert_eq!(MetaRecord::parse(&rec.to_bytes()), Ok(rec));
}

#[test]
fn reference_record() {
    // §5.5: address as two LE u32 words low first (= one LE u64), then length, then key.
    let bytes = [
        0x00, 0x10, 0x20, 0x30, 0x7F, 0x00, 0x00, 0x00, 0x00, 0x00, 0x40, 0x00, 0x11, 0x22, 0x33,
        0x44,
    ];
    let r = ReferenceMetaRecord::parse(&bytes).unwrap();
    assert_eq!(
        r,
        ReferenceMetaRecord {
            addr: 0x7F_3020_1000,
            len: 0x40_0000,
            key: 0x4433_2211,
        }
    );
    let mut out = [0u8; REFERENCE_META_LEN];
    r.emit(&mut out);
    assert_eq!(out, bytes);
    assert_eq!(
        ReferenceMetaRecord::parse(&bytes[..15]),
        Err(Error::Truncated)
    );
}

fn hash_strategy() -> impl Strategy<Value = HashProfile> {
    prop_oneof![Just(HashProfile::Reference), Just(HashProfile::Independent)]
}

fn kind_strategy() -> impl Strategy<Value = StoreKind> {
    prop_oneof![
        (any::<u32>(), any::<u32>(), hash_strategy()).prop_map(|(slots, slot_size, hash)| {
            StoreKind::KeyWrite {
                slots,
                slot_size,
                hash,
            }
        }),
        (any::<u32>(), hash_strategy())
            .prop_map(|(slots, hash)| StoreKind::KeyIncrement { slots, hash }),
        (
            (any::<u32>(), any::<u32>(), any::<u32>(), any::<u32>()),
            0u32..=u16::MAX as u32,
            any::<bool>(),
            any::<u64>()
        )
            .prop_map(
                |((lists, first_list, capacity, entry_size), batch, seq, list_stride)| {
                    StoreKind::Append {
                        lists,
                        first_list,
                        capacity,
                        entry_size,
                        batch,
                        format: if seq {
                            AppendFormat::Sequenced
                        } else {
                            AppendFormat::Reference
                        },
                        list_stride,
                    }
                }
            ),
        (any::<u32>(), any::<u8>(), hash_strategy())
            .prop_map(|(chunks, hops, hash)| StoreKind::Postcard { chunks, hops, hash }),
        (
            (any::<u16>(), 1u8..=3, any::<u8>(), 0u8..=1),
            (
                any::<u32>(),
                any::<u8>(),
                0u32..=u16::MAX as u32,
                any::<u32>()
            )
        )
            .prop_map(
                |((sketch_id, k, rows, h), (columns, cell_width, batch, epochs))| {
                    StoreKind::Sketch {
                        sketch_id,
                        sketch: crate::sketch::SketchKind::from_code(k).unwrap(),
                        rows,
                        columns,
                        cell_width,
                        batch,
                        epochs,
                        hash: crate::sketch::SketchHash::from_code(h).unwrap(),
                    }
                }
            ),
    ]
}

prop_compose! {
    fn record_strategy()(addr in any::<u64>(), len in any::<u64>(), rkey in any::<u32>(),
                         verify_icrc in any::<bool>(), heads in any::<bool>(),
                         n in 0u8..=8, kind in kind_strategy()) -> MetaRecord {
        let list_heads = heads
            && matches!(kind, StoreKind::Append { format: AppendFormat::Sequenced, .. });
        let redundancy = Redundancy::new(n).filter(|_| kind.has_redundancy());
        MetaRecord { addr, len, rkey, verify_icrc, list_heads, redundancy, kind }
    }
}

proptest! {
    #[test]
    fn record_round_trip(rec in record_strategy()) {
        let b = rec.to_bytes();
        prop_assert_eq!(MetaRecord::parse(&b), Ok(rec.clone()));
        let meta = rec.to_store_meta("s".into());
        prop_assert_eq!(
            MetaRecord::from_store_meta(&meta, rec.verify_icrc),
            MetaRecord { list_heads: false, ..rec }
        );
    }

    #[test]
    fn record_rejects_any_flipped_bit(rec in record_strategy(), bit in 0usize..512) {
        let mut b = rec.to_bytes();
        b[bit / 8] ^= 1 << (bit % 8);
        prop_assert!(MetaRecord::parse(&b).is_err());
    }

    #[test]
    fn reference_round_trip(addr in any::<u64>(), len in any::<u32>(), key in any::<u32>()) {
        let r = ReferenceMetaRecord { addr, len, key };
        let mut out = [0u8; REFERENCE_META_LEN];
        r.emit(&mut out);
        prop_assert_eq!(ReferenceMetaRecord::parse(&out), Ok(r));
    }

    #[test]
    fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..100)) {
        let _ = MetaRecord::parse(&bytes);
        let _ = ReferenceMetaRecord::parse(&bytes);
    }

    #[test]
    fn arbitrary_bodies_with_valid_envelope_never_panic(
        body in prop::collection::vec(any::<u8>(), 55),
        version in prop_oneof![Just(META_VERSION_1), Just(META_VERSION)],
    ) {
        // Past magic, version and CRC, so the per-kind checks see random fields.
        let mut b = [0u8; META_RECORD_LEN];
        b[..4].copy_from_slice(&META_MAGIC);
        b[4] = version;
        b[5..60].copy_from_slice(&body);
        let crc = IEEE.checksum(&b[..60]);
        b[60..].copy_from_slice(&crc.to_le_bytes());
        if let Ok(rec) = MetaRecord::parse(&b) {
            prop_assert_eq!(rec.to_bytes(), b);
        }
    }
}
