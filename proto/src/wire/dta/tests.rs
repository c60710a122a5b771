use super::*;
use proptest::prelude::*;

fn hex(s: &str) -> Vec<u8> {
    let s: String = s.chars().filter(|c| !c.is_whitespace()).collect();
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

fn roundtrip(bytes: &[u8], variant: BaseVariant) -> DtaRepr {
    let r = DtaRepr::parse(bytes, variant).unwrap();
    assert_eq!(r.buffer_len(), bytes.len());
    let mut out = [0u8; 32];
    let n = r.emit(&mut out);
    assert_eq!(&out[..n], bytes);
    r
}

// §2.5, variant B (generator / inject_dta.py packets).
#[test]
fn golden_key_write_b() {
    let b = hex("01 00 00 04 00000001 00000001");
    assert_eq!(b.len(), 12);
    let r = roundtrip(&b, BaseVariant::B);
    assert_eq!(r.header.opcode, Opcode::KeyWrite);
    assert_eq!(
        (r.header.seqnum, r.header.immediate, r.header.retransmitable),
        (0, false, false)
    );
    assert_eq!(
        r.primitive,
        DtaPrimitiveRepr::KeyWrite(KeyWriteRepr {
            redundancy: 4,
            key: 1,
            data: 1
        })
    );
}

#[test]
fn golden_inject_dta_keywrite_b() {
    // inject_dta.py keywrite --key 1 --data 10000 --redundancy 1
    let b = hex("01 00 00 01 00000001 00002710");
    let r = roundtrip(&b, BaseVariant::B);
    assert_eq!(
        r.primitive,
        DtaPrimitiveRepr::KeyWrite(KeyWriteRepr {
            redundancy: 1,
            key: 1,
            data: 10000
        })
    );
}

#[test]
fn golden_key_increment_b() {
    let b = hex("03 00 00 04 00000001 0000000000000001");
    assert_eq!(b.len(), 16);
    let r = roundtrip(&b, BaseVariant::B);
    assert_eq!(
        r.primitive,
        DtaPrimitiveRepr::KeyIncrement(KeyIncrementRepr {
            redundancy: 4,
            key: 1,
            counter: 1
        })
    );
}

#[test]
fn golden_append_b() {
    let b = hex("02 00 00 00000000 00000000");
    assert_eq!(b.len(), 11);
    let r = roundtrip(&b, BaseVariant::B);
    assert_eq!(
        r.primitive,
        DtaPrimitiveRepr::Append(AppendRepr {
            list_id: 0,
            data: 0
        })
    );
}

#[test]
fn golden_postcarder_b() {
    let b = hex("04 07 40 01020304 03 0000beef");
    assert_eq!(b.len(), 12);
    let r = roundtrip(&b, BaseVariant::B);
    assert_eq!((r.header.seqnum, r.header.retransmitable), (7, true));
    assert_eq!(
        r.primitive,
        DtaPrimitiveRepr::Postcarder(PostcarderRepr {
            key: 0x0102_0304,
            hop_num: 3,
            data: 0xbeef
        })
    );
}

// §2.5 sizes for variant A (the example Reporter: Key-Write, N = 2, IP id as data).
#[test]
fn golden_variant_a_sizes() {
    let kw = hex("01 00 02 0a000001 00001234");
    assert_eq!(kw.len(), 11);
    let r = roundtrip(&kw, BaseVariant::A);
    assert_eq!(r.header.variant, BaseVariant::A);
    assert_eq!(
        r.primitive,
        DtaPrimitiveRepr::KeyWrite(KeyWriteRepr {
            redundancy: 2,
            key: 0x0a00_0001,
            data: 0x1234
        })
    );
    assert_eq!(
        roundtrip(&hex("03 80 04 00000001 0000000000000001"), BaseVariant::A).buffer_len(),
        15
    );
    assert_eq!(
        roundtrip(&hex("02 00 00000000 00000000"), BaseVariant::A).buffer_len(),
        10
    );
    assert_eq!(
        roundtrip(&hex("04 00 00000001 05 00000009"), BaseVariant::A).buffer_len(),
        11
    );
    let r = DtaRepr::parse(&hex("03 80 04 00000001 0000000000000001"), BaseVariant::A).unwrap();
    assert!(r.header.immediate);
}

#[test]
fn variants_misparse_each_other() {
    // A variant-B Key-Write read as variant A has one byte too many.
    let b = hex("01 00 00 04 00000001 00000001");
    assert_eq!(DtaRepr::parse(&b, BaseVariant::A), Err(Error::Malformed));
    // A variant-A Key-Write read as variant B is one byte short.
    let a = hex("01 00 02 0a000001 00001234");
    assert_eq!(DtaRepr::parse(&a, BaseVariant::B), Err(Error::Truncated));
}

#[test]
fn flags_and_reserved_bits() {
    // Variant B: immediate + retransmitable + reserved bit 0.
    let b = hex("01 09 c1 04 00000001 00000001");
    let r = roundtrip(&b, BaseVariant::B);
    assert!(r.header.immediate && r.header.retransmitable);
    assert_eq!(r.header.reserved_flags, 0x01);
    assert_eq!(r.header.seqnum, 9);
    // Variant A: bit 6 is reserved, not retransmitable.
    let a = hex("01 7f 02 0a000001 00001234");
    let h = DtaHeader::new_checked(&a[..], BaseVariant::A).unwrap();
    assert!(!h.retransmitable() && !h.immediate());
    assert_eq!(h.reserved_flags(), 0x7f);
    assert_eq!(h.seqnum(), None);
    let r = roundtrip(&a, BaseVariant::A);
    assert_eq!(r.header.reserved_flags, 0x7f);
}

#[test]
fn unknown_opcodes() {
    for op in [0u8, 5, 0x7f, 0xd1, 0xff] {
        let mut b = hex("01 00 00 04 00000001 00000001");
        b[0] = op;
        assert_eq!(
            DtaRepr::parse(&b, BaseVariant::B),
            Err(Error::UnknownOpcode)
        );
        assert_eq!(
            DtaRepr::parse(&b[..2], BaseVariant::A),
            Err(Error::UnknownOpcode)
        );
    }
}

#[test]
fn truncated_at_every_length_and_trailing_bytes() {
    let samples = [
        (BaseVariant::B, hex("01 00 00 04 00000001 00000001")),
        (BaseVariant::B, hex("03 00 00 04 00000001 0000000000000001")),
        (BaseVariant::B, hex("02 00 00 00000000 00000000")),
        (BaseVariant::B, hex("04 00 00 00000001 01 00000000")),
        (BaseVariant::A, hex("01 00 02 0a000001 00001234")),
        (BaseVariant::A, hex("03 00 04 00000001 0000000000000001")),
        (BaseVariant::A, hex("02 00 00000000 00000000")),
        (BaseVariant::A, hex("04 00 00000001 01 00000000")),
    ];
    for (variant, b) in samples {
        for n in 0..b.len() {
            assert_eq!(
                DtaRepr::parse(&b[..n], variant),
                Err(Error::Truncated),
                "{n}"
            );
        }
        let mut long = b.clone();
        long.push(0);
        assert_eq!(DtaRepr::parse(&long, variant), Err(Error::Malformed));
    }
}

#[test]
fn views_check_len() {
    assert_eq!(
        KeyWriteHeader::new_checked(&[0u8; 8][..]).err(),
        Some(Error::Truncated)
    );
    assert_eq!(
        KeyIncrementHeader::new_checked(&[0u8; 12][..]).err(),
        Some(Error::Truncated)
    );
    assert_eq!(
        AppendHeader::new_checked(&[0u8; 7][..]).err(),
        Some(Error::Truncated)
    );
    assert_eq!(
        PostcarderHeader::new_checked(&[0u8; 8][..]).err(),
        Some(Error::Truncated)
    );
    assert_eq!(
        DtaHeader::new_checked(&[1u8][..], BaseVariant::A).err(),
        Some(Error::Truncated)
    );
    assert_eq!(
        DtaHeader::new_checked(&[1u8, 0][..], BaseVariant::B).err(),
        Some(Error::Truncated)
    );
    let h = PostcarderHeader::new_checked(hex("01020304 05 00000006")).unwrap();
    assert_eq!(h.key_bytes(), [1, 2, 3, 4]);
    assert_eq!(h.into_inner().len(), 9);
}

#[test]
fn base_variant_serde_names() {
    // No serde_json in proto's dev-dependencies: check the derive through a tiny
    // deserializer from serde's own value module.
    use serde::de::value::{Error as DeError, StrDeserializer};
    use serde::de::IntoDeserializer;
    use serde::Deserialize;
    let a: StrDeserializer<'_, DeError> = "a".into_deserializer();
    assert_eq!(BaseVariant::deserialize(a).unwrap(), BaseVariant::A);
    let b: StrDeserializer<'_, DeError> = "b".into_deserializer();
    assert_eq!(BaseVariant::deserialize(b).unwrap(), BaseVariant::B);
    let c: StrDeserializer<'_, DeError> = "B".into_deserializer();
    assert!(BaseVariant::deserialize(c).is_err());
}

fn arb_variant() -> impl Strategy<Value = BaseVariant> {
    prop_oneof![Just(BaseVariant::A), Just(BaseVariant::B)]
}

fn arb_primitive() -> impl Strategy<Value = DtaPrimitiveRepr> {
    prop_oneof![
        (any::<u8>(), any::<u32>(), any::<u32>()).prop_map(|(redundancy, key, data)| {
            DtaPrimitiveRepr::KeyWrite(KeyWriteRepr {
                redundancy,
                key,
                data,
            })
        }),
        (any::<u8>(), any::<u32>(), any::<u64>()).prop_map(|(redundancy, key, counter)| {
            DtaPrimitiveRepr::KeyIncrement(KeyIncrementRepr {
                redundancy,
                key,
                counter,
            })
        }),
        (any::<u32>(), any::<u32>())
            .prop_map(|(list_id, data)| DtaPrimitiveRepr::Append(AppendRepr { list_id, data })),
        (any::<u32>(), any::<u8>(), any::<u32>()).prop_map(|(key, hop_num, data)| {
            DtaPrimitiveRepr::Postcarder(PostcarderRepr { key, hop_num, data })
        }),
    ]
}

proptest! {
    #[test]
    fn repr_roundtrip(
        variant in arb_variant(),
        primitive in arb_primitive(),
        seqnum in any::<u8>(),
        immediate in any::<bool>(),
        retransmitable in any::<bool>(),
        reserved in any::<u8>(),
    ) {
        let b = variant == BaseVariant::B;
        let r = DtaRepr {
            header: DtaHeaderRepr {
                variant,
                opcode: primitive.opcode(),
                seqnum: if b { seqnum } else { 0 },
                immediate,
                retransmitable: retransmitable && b,
                reserved_flags: reserved & variant.reserved_flags_mask(),
            },
            primitive,
        };
        let mut buf = [0u8; 32];
        let n = r.emit(&mut buf);
        prop_assert_eq!(n, r.buffer_len());
        prop_assert_eq!(DtaRepr::parse(&buf[..n], variant), Ok(r));
    }

    #[test]
    fn variant_mismatch_is_always_detected(primitive in arb_primitive(), flags in any::<u8>()) {
        // Strict lengths make a misconfigured base variant fail loudly instead of shifting
        // every field by one byte: B is exactly one byte longer than A for every opcode.
        for (variant, other, err) in [
            (BaseVariant::A, BaseVariant::B, Error::Truncated),
            (BaseVariant::B, BaseVariant::A, Error::Malformed),
        ] {
            let r = DtaRepr {
                header: DtaHeaderRepr {
                    variant,
                    opcode: primitive.opcode(),
                    seqnum: flags,
                    immediate: false,
                    retransmitable: false,
                    reserved_flags: flags,
                },
                primitive,
            };
            let mut buf = [0u8; 32];
            let n = r.emit(&mut buf);
            prop_assert_eq!(DtaRepr::parse(&buf[..n], other).err(), Some(err));
        }
    }

    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..40)) {
        for v in [BaseVariant::A, BaseVariant::B] {
            if let Ok(r) = DtaRepr::parse(&bytes, v) {
                let mut buf = [0u8; 32];
                let n = r.emit(&mut buf);
                prop_assert_eq!(&buf[..n], &bytes[..]);
            }
        }
    }
}
