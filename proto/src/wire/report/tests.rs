use super::*;
use crate::types::MAX_VALUE_LEN;
use crate::wire::dta_ext::MAX_PATH_LEN;
use proptest::prelude::*;

fn hex(s: &str) -> Vec<u8> {
    let s: String = s.chars().filter(|c| !c.is_whitespace()).collect();
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

fn cfg(v: BaseVariant) -> ParseConfig {
    ParseConfig {
        reference_variant: v,
        ..ParseConfig::default()
    }
}

fn reemit(r: &Report, profile: Profile) -> Vec<u8> {
    let mut out = [0u8; MAX_EMIT_LEN];
    let n = r.emit(profile, &mut out).unwrap();
    assert_eq!(r.buffer_len(profile), Ok(n));
    out[..n].to_vec()
}

#[test]
fn reference_key_write_mapping() {
    // §2.5: inject_dta.py keywrite --key 1 --data 10000 --redundancy 1.
    let b = hex("01 00 00 01 00000001 00002710");
    let r = parse_report(&b, &cfg(BaseVariant::B)).unwrap();
    assert_eq!(
        r.header,
        ReportHeader {
            profile: Profile::ReferenceB,
            immediate: false,
            retransmittable: false,
            seq: Some(0),
            priority: Priority::Medium,
        }
    );
    let Primitive::KeyWrite {
        redundancy,
        key,
        value,
    } = r.primitive
    else {
        panic!()
    };
    assert_eq!(redundancy, 1);
    // The reference hashes the little-endian bytes of the big-endian key.
    assert_eq!(key.as_bytes(), &[1, 0, 0, 0]);
    // ... and copies the data bytes unchanged into memory.
    assert_eq!(value.as_bytes(), &[0x00, 0x00, 0x27, 0x10]);
    assert_eq!(reemit(&r, Profile::ReferenceB), b);
}

#[test]
fn reference_variant_a_reporter_packet() {
    // The example Reporter: key = IPv4 source 10.0.0.1, N = 2, data = IP id 0x1234.
    let b = hex("01 80 02 0a000001 00001234");
    let r = parse_report(&b, &cfg(BaseVariant::A)).unwrap();
    assert_eq!(r.header.profile, Profile::ReferenceA);
    assert_eq!(r.header.seq, None);
    assert!(r.header.immediate && !r.header.retransmittable);
    let Primitive::KeyWrite { key, value, .. } = r.primitive else {
        panic!()
    };
    assert_eq!(key, Key::from_u32_reference(0x0a00_0001));
    assert_eq!(key.as_bytes(), &[1, 0, 0, 0x0a]);
    assert_eq!(value.as_bytes(), &[0, 0, 0x12, 0x34]);
    assert_eq!(reemit(&r, Profile::ReferenceA), b);
}

#[test]
fn reference_key_increment_mapping() {
    let b = hex("03 05 40 04 00000001 0000000000000001");
    let r = parse_report(&b, &cfg(BaseVariant::B)).unwrap();
    assert_eq!(r.header.seq, Some(5));
    assert!(r.header.retransmittable);
    assert_eq!(
        r.primitive,
        Primitive::KeyIncrement {
            redundancy: 4,
            key: Key::from_u32_reference(1),
            delta: 1
        }
    );
    assert_eq!(reemit(&r, Profile::ReferenceB), b);
}

#[test]
fn reference_append_is_byte_swapped() {
    let b = hex("02 00 00 00000003 11223344");
    let r = parse_report(&b, &cfg(BaseVariant::B)).unwrap();
    assert_eq!(
        r.primitive,
        Primitive::Append {
            list: 3,
            value: Value::new(&[0x44, 0x33, 0x22, 0x11]).unwrap()
        }
    );
    assert_eq!(reemit(&r, Profile::ReferenceB), b);
    // §2.5 all-zero Append.
    let z = hex("02 00 00 00000000 00000000");
    let r = parse_report(&z, &cfg(BaseVariant::B)).unwrap();
    assert_eq!(
        r.primitive,
        Primitive::Append {
            list: 0,
            value: Value::new(&[0; 4]).unwrap()
        }
    );
}

#[test]
fn reference_postcard_mapping() {
    let b = hex("04 00 01020304 05 0000beef");
    let r = parse_report(&b, &cfg(BaseVariant::A)).unwrap();
    assert_eq!(
        r.primitive,
        Primitive::Postcard {
            flow: Key::new(&[1, 2, 3, 4]).unwrap(), // as received, not reversed
            hop: 4,
            path_len: 0,
            value: 0xbeef,
        }
    );
    assert_eq!(reemit(&r, Profile::ReferenceA), b);
    // hopNum 0 does not exist in the reference numbering.
    assert_eq!(
        parse_report(&hex("04 00 01020304 00 0000beef"), &cfg(BaseVariant::A)),
        Err(Error::Malformed)
    );
    // hopNum 255 maps to hop 254, the largest the reference can carry.
    let r = parse_report(&hex("04 00 01020304 ff 0000beef"), &cfg(BaseVariant::A)).unwrap();
    let Primitive::Postcard { hop, .. } = r.primitive else {
        panic!()
    };
    assert_eq!(hop, 254);
    let too_far = Report {
        primitive: Primitive::Postcard {
            flow: Key::new(&[1; 4]).unwrap(),
            hop: 255,
            path_len: 0,
            value: 0,
        },
        ..r
    };
    assert_eq!(
        too_far.buffer_len(Profile::ReferenceA),
        Err(Error::Malformed)
    );
}

#[test]
fn reference_priority_comes_from_config() {
    let b = hex("01 00 00 01 00000001 00002710");
    let c = ParseConfig {
        reference_priority: Priority::High,
        ..ParseConfig::default()
    };
    assert_eq!(
        parse_report(&b, &c).unwrap().header.priority,
        Priority::High
    );
}

#[test]
fn extended_mapping() {
    let b = hex("d1 01 a0 00 0000002a 02 0d 14 00 \
         0a000001 0a000002 11 1f90 0050 \
         00000001 00000002 00000003 00000004 00000005");
    let r = parse_report(&b, &ParseConfig::default()).unwrap();
    assert_eq!(
        r.header,
        ReportHeader {
            profile: Profile::Extended,
            immediate: true,
            retransmittable: false,
            seq: Some(42),
            priority: Priority::High,
        }
    );
    let Primitive::KeyWrite {
        redundancy,
        key,
        value,
    } = r.primitive
    else {
        panic!()
    };
    assert_eq!(
        (redundancy, key.as_bytes(), value.as_bytes()),
        (2, &b[12..25], &b[25..45])
    );
    assert_eq!(reemit(&r, Profile::Extended), b);
    // The same report cannot travel in the reference profile.
    assert_eq!(r.buffer_len(Profile::ReferenceB), Err(Error::Malformed));
    let mut out = [0u8; MAX_EMIT_LEN];
    assert_eq!(r.emit(Profile::ReferenceA, &mut out), Err(Error::Malformed));
    assert_eq!(
        r.emit(Profile::Extended, &mut out[..44]),
        Err(Error::Truncated)
    );
}

#[test]
fn cross_profile_emit() {
    // A reference report re-emitted in the extended profile keeps memory-ready bytes.
    let b = hex("02 07 c0 00000003 11223344");
    let r = parse_report(&b, &cfg(BaseVariant::B)).unwrap();
    let e = reemit(&r, Profile::Extended);
    assert_eq!(e, hex("d1 02 d0 00 00000007 00000003 04 000000 44332211"));
    let back = parse_report(&e, &ParseConfig::default()).unwrap();
    assert_eq!(back.primitive, r.primitive);
    // Variant A drops seq and retransmittable; B keeps seq mod 256.
    let mut big = r;
    big.header.seq = Some(0x1_0203);
    assert_eq!(
        reemit(&big, Profile::ReferenceA),
        hex("02 80 00000003 11223344")
    );
    assert_eq!(
        reemit(&big, Profile::ReferenceB),
        hex("02 03 c0 00000003 11223344")
    );
}

#[test]
fn dispatch_and_acceptance() {
    let reference = hex("01 00 00 01 00000001 00002710");
    let extended = hex("d1 03 50 00 01020304  04 04 0000 0000000000000007  0a000001");
    let no_ref = ParseConfig {
        accept_reference: false,
        ..ParseConfig::default()
    };
    let no_ext = ParseConfig {
        accept_extended: false,
        ..ParseConfig::default()
    };
    assert_eq!(
        parse_report(&reference, &no_ref),
        Err(Error::UnsupportedVersion)
    );
    assert!(parse_report(&extended, &no_ref).is_ok());
    assert_eq!(
        parse_report(&extended, &no_ext),
        Err(Error::UnsupportedVersion)
    );
    assert!(parse_report(&reference, &no_ext).is_ok());
    assert_eq!(
        parse_report(&[], &ParseConfig::default()),
        Err(Error::Truncated)
    );
    assert_eq!(
        parse_report(&[0xd7, 0, 0], &ParseConfig::default()),
        Err(Error::UnsupportedVersion)
    );
    assert_eq!(
        parse_report(&[0x09, 0, 0], &ParseConfig::default()),
        Err(Error::UnknownOpcode)
    );
}

#[test]
fn format_names_and_serde() {
    use serde::de::value::{Error as DeError, StrDeserializer};
    use serde::de::IntoDeserializer;
    use serde::Deserialize;
    for f in [
        ReportFormat::Reference(BaseVariant::A),
        ReportFormat::Reference(BaseVariant::B),
        ReportFormat::Extended,
    ] {
        assert_eq!(f.to_string().parse::<ReportFormat>(), Ok(f));
        let d: StrDeserializer<'_, DeError> = f.as_str().into_deserializer();
        assert_eq!(ReportFormat::deserialize(d).unwrap(), f);
        assert_eq!(ReportFormat::from(Profile::from(f)), f);
    }
    assert_eq!(
        "reference".parse::<ReportFormat>(),
        Err(UnknownReportFormat)
    );
    let d: StrDeserializer<'_, DeError> = "bogus".into_deserializer();
    assert!(ReportFormat::deserialize(d).is_err());
    let d: StrDeserializer<'_, DeError> = "high".into_deserializer();
    assert_eq!(Priority::deserialize(d).unwrap(), Priority::High);
    assert_eq!(Priority::default(), Priority::Medium);
    assert!(Priority::Low < Priority::High);
}

fn arb_key4() -> impl Strategy<Value = Key> {
    any::<[u8; 4]>().prop_map(|b| Key::new(&b).unwrap())
}
fn arb_value4() -> impl Strategy<Value = Value> {
    any::<[u8; 4]>().prop_map(|b| Value::new(&b).unwrap())
}
fn arb_key() -> impl Strategy<Value = Key> {
    proptest::collection::vec(any::<u8>(), 1..=MAX_KEY_LEN).prop_map(|v| Key::new(&v).unwrap())
}
fn arb_value() -> impl Strategy<Value = Value> {
    proptest::collection::vec(any::<u8>(), 1..=MAX_VALUE_LEN).prop_map(|v| Value::new(&v).unwrap())
}
fn arb_priority() -> impl Strategy<Value = Priority> {
    prop_oneof![
        Just(Priority::Low),
        Just(Priority::Medium),
        Just(Priority::High)
    ]
}

fn arb_reference_primitive() -> impl Strategy<Value = Primitive> {
    prop_oneof![
        (any::<u8>(), arb_key4(), arb_value4()).prop_map(|(redundancy, key, value)| {
            Primitive::KeyWrite {
                redundancy,
                key,
                value,
            }
        }),
        (any::<u8>(), arb_key4(), any::<u64>()).prop_map(|(redundancy, key, delta)| {
            Primitive::KeyIncrement {
                redundancy,
                key,
                delta,
            }
        }),
        (any::<u32>(), arb_value4()).prop_map(|(list, value)| Primitive::Append { list, value }),
        (arb_key4(), 0u8..=254, any::<u32>()).prop_map(|(flow, hop, value)| {
            Primitive::Postcard {
                flow,
                hop,
                path_len: 0,
                value,
            }
        }),
    ]
}

fn arb_extended_primitive() -> impl Strategy<Value = Primitive> {
    prop_oneof![
        (any::<u8>(), arb_key(), arb_value()).prop_map(|(redundancy, key, value)| {
            Primitive::KeyWrite {
                redundancy,
                key,
                value,
            }
        }),
        (any::<u8>(), arb_key(), any::<u64>()).prop_map(|(redundancy, key, delta)| {
            Primitive::KeyIncrement {
                redundancy,
                key,
                delta,
            }
        }),
        (any::<u32>(), arb_value()).prop_map(|(list, value)| Primitive::Append { list, value }),
        (arb_key(), any::<u8>(), 0..=MAX_PATH_LEN, any::<u32>()).prop_map(
            |(flow, hop, path_len, value)| {
                let hop = if path_len == 0 { hop } else { hop % path_len };
                Primitive::Postcard {
                    flow,
                    hop,
                    path_len,
                    value,
                }
            }
        ),
    ]
}

/// Reports valid in a profile, together with a config that parses that profile.
fn arb_valid_report() -> impl Strategy<Value = (Report, ParseConfig)> {
    let reference = (
        prop_oneof![Just(BaseVariant::A), Just(BaseVariant::B)],
        arb_reference_primitive(),
        any::<bool>(),
        any::<bool>(),
        any::<u8>(),
        arb_priority(),
    )
        .prop_map(|(variant, primitive, immediate, retx, seq, priority)| {
            let b = variant == BaseVariant::B;
            let header = ReportHeader {
                profile: Profile::reference(variant),
                immediate,
                retransmittable: b && retx,
                seq: b.then_some(u32::from(seq)),
                priority,
            };
            let cfg = ParseConfig {
                reference_variant: variant,
                reference_priority: priority,
                ..ParseConfig::default()
            };
            (Report { header, primitive }, cfg)
        });
    let extended = (
        arb_extended_primitive(),
        any::<bool>(),
        any::<bool>(),
        any::<u32>(),
        arb_priority(),
        prop_oneof![Just(BaseVariant::A), Just(BaseVariant::B)],
    )
        .prop_map(
            |(primitive, immediate, retransmittable, seq, priority, variant)| {
                let header = ReportHeader {
                    profile: Profile::Extended,
                    immediate,
                    retransmittable,
                    seq: Some(seq),
                    priority,
                };
                (Report { header, primitive }, cfg(variant))
            },
        );
    prop_oneof![reference, extended]
}

fn arb_config() -> impl Strategy<Value = ParseConfig> {
    (any::<bool>(), any::<bool>(), any::<bool>(), arb_priority()).prop_map(|(b, ar, ae, p)| {
        ParseConfig {
            reference_variant: if b { BaseVariant::B } else { BaseVariant::A },
            accept_reference: ar,
            accept_extended: ae,
            reference_priority: p,
        }
    })
}

/// The fast path's own answer, `None` where it defers to the full parser.
fn fast_only(b: &[u8], c: &ParseConfig) -> Option<Report> {
    let mut deferred = false;
    let mut out = Report::PLACEHOLDER;
    let r = parse_fast(b, c, &mut out, |_, _, _| {
        deferred = true;
        Err(Error::Malformed)
    });
    if deferred {
        None
    } else {
        r.expect("the fast path only returns reports");
        Some(out)
    }
}

/// Every one-bit mutation (bits 0, 6 and 7 of each byte) of the valid report `b` that `reader`
/// answers for, it answers as the full parser does.
fn mutations_agree(
    b: &[u8],
    c: &ParseConfig,
    reader: fn(&[u8], &ParseConfig) -> Option<Report>,
) -> std::result::Result<(), TestCaseError> {
    for i in 0..b.len() {
        for flip in [0x01u8, 0x40, 0x80] {
            let mut m = b.to_vec();
            m[i] ^= flip;
            if let Some(x) = reader(&m, c) {
                prop_assert_eq!(parse_checked(&m, c), Ok(x));
            }
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(4096))]

    /// The fast path never disagrees with the full parser.
    #[test]
    fn fast_path_agrees_with_full_parser(bytes in proptest::collection::vec(any::<u8>(), 0..64), c in arb_config()) {
        if let Some(r) = fast_only(&bytes, &c) {
            prop_assert_eq!(parse_checked(&bytes, &c), Ok(r));
        }
    }

    /// Valid reports (the fast path's domain) take the fast path.
    #[test]
    fn valid_reports_take_the_fast_path((r, c) in arb_valid_report()) {
        let mut out = [0u8; MAX_EMIT_LEN];
        let n = r.emit(r.header.profile, &mut out).unwrap();
        prop_assert_eq!(fast_only(&out[..n], &c), Some(r));
        // Mutations of valid reports: still agree wherever the fast path answers.
        mutations_agree(&out[..n], &c, fast_only)?;
    }
}

/// The lanes' answer ([`parse_append_fast`], [`parse_postcard_fast`]) as the report the full
/// parser would give; a datagram never takes both.
fn lane_only(b: &[u8], c: &ParseConfig) -> Option<Report> {
    let append = parse_append_fast(b, c).map(|(header, list, value)| Report {
        header,
        primitive: Primitive::Append { list, value },
    });
    let postcard = parse_postcard_fast(b, c).map(|(header, p)| Report {
        header,
        primitive: p.primitive(),
    });
    assert!(append.is_none() || postcard.is_none());
    append.or(postcard)
}

/// The keyed lane's answer ([`parse_keyed_into`], into a report that holds a Key-Write and
/// into one that holds a Key-Increment) as the report the full parser would give; a datagram
/// is read into at most one of them.
fn keyed_only(b: &[u8], c: &ParseConfig) -> Option<Report> {
    let holding = |primitive| Report {
        primitive,
        ..Report::PLACEHOLDER
    };
    let mut kw = holding(Primitive::KeyWrite {
        redundancy: 9,
        key: Key::new(&[9; 16]).unwrap(),
        value: Value::new(&[9; 32]).unwrap(),
    });
    let mut ki = holding(Primitive::KeyIncrement {
        redundancy: 9,
        key: Key::new(&[9; 16]).unwrap(),
        delta: 9,
    });
    let kw = parse_keyed_into(b, c, &mut kw).then_some(kw);
    let ki = parse_keyed_into(b, c, &mut ki).then_some(ki);
    assert!(kw.is_none() || ki.is_none());
    kw.or(ki)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(4096))]

    /// The lanes never disagree with the full parser.
    #[test]
    fn lanes_agree_with_full_parser(bytes in proptest::collection::vec(any::<u8>(), 0..64), c in arb_config()) {
        if let Some(r) = lane_only(&bytes, &c) {
            prop_assert_eq!(parse_checked(&bytes, &c), Ok(r));
        }
        if let Some(r) = keyed_only(&bytes, &c) {
            prop_assert_eq!(parse_checked(&bytes, &c), Ok(r));
        }
    }

    /// Every valid Append and postcard takes its lane, and every valid Key-Write and
    /// Key-Increment the keyed lane (and a report of another primitive none); mutations agree
    /// with the full parser wherever a lane answers.
    #[test]
    fn valid_reports_take_their_lanes((r, c) in arb_valid_report()) {
        let mut out = [0u8; MAX_EMIT_LEN];
        let n = r.emit(r.header.profile, &mut out).unwrap();
        let laned = matches!(r.primitive, Primitive::Append { .. } | Primitive::Postcard { .. });
        prop_assert_eq!(lane_only(&out[..n], &c), laned.then_some(r));
        prop_assert_eq!(keyed_only(&out[..n], &c), (!laned).then_some(r));
        mutations_agree(&out[..n], &c, lane_only)?;
        mutations_agree(&out[..n], &c, keyed_only)?;
    }
}

proptest! {
    #[test]
    fn roundtrip((r, c) in arb_valid_report()) {
        let mut out = [0u8; MAX_EMIT_LEN];
        let n = r.emit(r.header.profile, &mut out).unwrap();
        prop_assert_eq!(r.buffer_len(r.header.profile), Ok(n));
        prop_assert_eq!(parse_report(&out[..n], &c), Ok(r));
    }

    #[test]
    fn extended_carries_every_reference_report((r, _c) in arb_valid_report()) {
        // Memory-ready operands survive a trip through the extended profile unchanged.
        let mut out = [0u8; MAX_EMIT_LEN];
        let n = r.emit(Profile::Extended, &mut out).unwrap();
        let back = parse_report(&out[..n], &ParseConfig::default()).unwrap();
        prop_assert_eq!(back.primitive, r.primitive);
        prop_assert_eq!(back.header.priority, r.header.priority);
    }

    #[test]
    fn arbitrary_bytes_never_panic(
        bytes in proptest::collection::vec(any::<u8>(), 0..72),
        a in any::<bool>(),
    ) {
        let c = cfg(if a { BaseVariant::A } else { BaseVariant::B });
        if let Ok(r) = parse_report(&bytes, &c) {
            let mut out = [0u8; MAX_EMIT_LEN];
            let n = r.emit(r.header.profile, &mut out).unwrap();
            // Reference reserved flag bits are dropped by the mapping; all else survives.
            if r.header.profile == Profile::Extended {
                prop_assert_eq!(&out[..n], &bytes[..]);
            } else {
                prop_assert_eq!(n, bytes.len());
            }
        }
    }
}

/// The lanes read the hand-written vectors (the reference's documented packets and the
/// extended layout's byte tables) themselves, not only by agreeing with the full parser: each
/// field is checked against the value the normative text gives, and every vector the text
/// calls malformed, or that belongs to another primitive, is refused by both lanes.
#[test]
fn lanes_read_the_spec_vectors() {
    let (a, b) = (cfg(BaseVariant::A), cfg(BaseVariant::B));
    let ext = ParseConfig::default();

    // Reference Append: list 3, the 32-bit data byte-swapped into memory order; seqnum 0,
    // no flags.
    let (h, list, value) = parse_append_fast(&hex("02 00 00 00000003 11223344"), &b).unwrap();
    assert_eq!(
        (list, value.as_bytes()),
        (3, &[0x44u8, 0x33, 0x22, 0x11][..])
    );
    assert_eq!(
        h,
        ReportHeader {
            profile: Profile::ReferenceB,
            immediate: false,
            retransmittable: false,
            seq: Some(0),
            priority: Priority::Medium,
        }
    );
    // §2.5's all-zero Append.
    let (_, list, value) = parse_append_fast(&hex("02 00 00 00000000 00000000"), &b).unwrap();
    assert_eq!((list, value.as_bytes()), (0, &[0u8; 4][..]));
    assert!(parse_postcard_fast(&hex("02 00 00 00000003 11223344"), &b).is_none());

    // Reference postcard (variant A): flow as received, hopNum 5 is hop 4, path length
    // unknown; hopNum 0 does not exist; hopNum 255 is hop 254.
    let (h, p) = parse_postcard_fast(&hex("04 00 01020304 05 0000beef"), &a).unwrap();
    assert_eq!(
        p,
        PostcardFields {
            flow: Key::new(&[1, 2, 3, 4]).unwrap(),
            hop: 4,
            path_len: 0,
            value: 0xbeef,
        }
    );
    assert_eq!((h.profile, h.seq), (Profile::ReferenceA, None));
    assert!(parse_postcard_fast(&hex("04 00 01020304 00 0000beef"), &a).is_none());
    let (_, p) = parse_postcard_fast(&hex("04 00 01020304 ff 0000beef"), &a).unwrap();
    assert_eq!(p.hop, 254);
    assert!(parse_append_fast(&hex("04 00 01020304 05 0000beef"), &a).is_none());

    // Extended Append: list 9, a 6-byte value; a zero or over-long value length, or a
    // reserved byte set, is malformed.
    let ap = hex("d1 02 00 00 00000000  00000009 06 000000  aabbccddeeff");
    let (h, list, value) = parse_append_fast(&ap, &ext).unwrap();
    assert_eq!(
        (list, value.as_bytes()),
        (9, &[0xaau8, 0xbb, 0xcc, 0xdd, 0xee, 0xff][..])
    );
    assert_eq!((h.profile, h.seq), (Profile::Extended, Some(0)));
    for (i, v) in [(12, 0), (12, 33), (13, 1), (14, 1), (15, 1)] {
        let mut m = ap.clone();
        m[i] = v;
        assert!(parse_append_fast(&m, &ext).is_none(), "byte {i} = {v}");
    }
    assert!(parse_append_fast(&ap[..ap.len() - 1], &ext).is_none());
    assert!(parse_postcard_fast(&ap, &ext).is_none());

    // Extended postcard: hop 2 of a 5-hop path, a 13-byte flow (the 5-tuple), value 0xbeef;
    // hop == path length, a path over 16 hops, a zero or over-long key, or the reserved byte
    // set is malformed; an unknown path length (0) is not.
    let pc = hex("d1 04 10 00 ffffffff  02 05 0d 00 0000beef  0a000001 0a000002 06 1f90 0050");
    let (h, p) = parse_postcard_fast(&pc, &ext).unwrap();
    assert_eq!(
        p,
        PostcardFields {
            flow: Key::new(&pc[16..29]).unwrap(),
            hop: 2,
            path_len: 5,
            value: 0xbeef,
        }
    );
    assert_eq!(h.seq, Some(0xffff_ffff));
    for (i, v) in [(8, 5), (9, 17), (10, 0), (10, 17), (11, 1)] {
        let mut m = pc.clone();
        m[i] = v;
        assert!(parse_postcard_fast(&m, &ext).is_none(), "byte {i} = {v}");
    }
    let mut unknown_path = pc.clone();
    unknown_path[9] = 0;
    assert_eq!(
        parse_postcard_fast(&unknown_path, &ext).unwrap().1.path_len,
        0
    );
    assert!(parse_append_fast(&pc, &ext).is_none());

    // The keyed lane reads the reference's Key-Write and Key-Increment vectors into a report
    // already holding that primitive, field by field: §2.5's `keywrite --key 1 --data 10000
    // --redundancy 1` (the key's little-endian bytes, the data unchanged), the example
    // Reporter's variant-A packet (Immediate set, no sequence number), a retransmittable
    // Key-Increment of N = 4, and an extended Key-Increment of delta 7 for a 4-byte key.
    let holding = |primitive| Report {
        primitive,
        ..Report::PLACEHOLDER
    };
    let kw = || {
        holding(Primitive::KeyWrite {
            redundancy: 9,
            key: Key::new(&[9]).unwrap(),
            value: Value::new(&[9]).unwrap(),
        })
    };
    let ki = || {
        holding(Primitive::KeyIncrement {
            redundancy: 9,
            key: Key::new(&[9]).unwrap(),
            delta: 9,
        })
    };
    let mut r = kw();
    assert!(parse_keyed_into(
        &hex("01 00 00 01 00000001 00002710"),
        &b,
        &mut r
    ));
    assert_eq!(
        (r.header.profile, r.header.seq, r.header.immediate),
        (Profile::ReferenceB, Some(0), false)
    );
    assert_eq!(
        r.primitive,
        Primitive::KeyWrite {
            redundancy: 1,
            key: Key::new(&[1, 0, 0, 0]).unwrap(),
            value: Value::new(&[0, 0, 0x27, 0x10]).unwrap(),
        }
    );
    let mut r = kw();
    assert!(parse_keyed_into(
        &hex("01 80 02 0a000001 00001234"),
        &a,
        &mut r
    ));
    assert_eq!(
        (r.header.profile, r.header.seq),
        (Profile::ReferenceA, None)
    );
    assert!(r.header.immediate && !r.header.retransmittable);
    assert_eq!(
        r.primitive,
        Primitive::KeyWrite {
            redundancy: 2,
            key: Key::new(&[1, 0, 0, 0x0a]).unwrap(),
            value: Value::new(&[0, 0, 0x12, 0x34]).unwrap(),
        }
    );
    let mut r = ki();
    assert!(parse_keyed_into(
        &hex("03 05 40 04 00000001 0000000000000001"),
        &b,
        &mut r
    ));
    assert_eq!((r.header.seq, r.header.retransmittable), (Some(5), true));
    assert_eq!(
        r.primitive,
        Primitive::KeyIncrement {
            redundancy: 4,
            key: Key::new(&[1, 0, 0, 0]).unwrap(),
            delta: 1,
        }
    );
    let xki = hex("d1 03 50 00 01020304  04 04 0000 0000000000000007  0a000001");
    let mut r = ki();
    assert!(parse_keyed_into(&xki, &ext, &mut r));
    assert_eq!(
        (r.header.profile, r.header.seq),
        (Profile::Extended, Some(0x0102_0304))
    );
    assert_eq!(
        r.primitive,
        Primitive::KeyIncrement {
            redundancy: 4,
            key: Key::new(&[0x0a, 0, 0, 1]).unwrap(),
            delta: 7,
        }
    );
    // Each into a report holding the other primitive, and the reserved bytes set: refused.
    assert!(!parse_keyed_into(&xki, &ext, &mut kw()));
    assert!(!parse_keyed_into(
        &hex("01 00 00 01 00000001 00002710"),
        &b,
        &mut ki()
    ));
    for i in [10, 11] {
        let mut m = xki.clone();
        m[i] = 1;
        assert!(!parse_keyed_into(&m, &ext, &mut ki()), "byte {i}");
    }

    // Key-Write and Key-Increment reports take neither lane.
    for (v, c) in [
        ("01 00 00 01 00000001 00002710", &b),
        ("03 05 40 04 00000001 0000000000000001", &b),
        (
            "d1 03 50 00 01020304  04 04 0000 0000000000000007  0a000001",
            &ext,
        ),
    ] {
        assert!(lane_only(&hex(v), c).is_none(), "{v}");
    }
}
