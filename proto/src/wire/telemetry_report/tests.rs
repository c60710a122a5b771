use super::*;
use proptest::prelude::*;

fn flow() -> FlowKey {
    FlowKey {
        src: [10, 0, 1, 1],
        dst: [10, 0, 2, 2],
        proto: PROTO_TCP,
        sport: 4321,
        dport: 80,
    }
}

#[test]
fn bitmaps_have_the_spec_lengths() {
    // v2.0: bits 4, 5, 6 are 8 bytes, the rest 4.
    assert_eq!(MdFormat::RepMdV2.md_len(0x0800), 8);
    assert_eq!(MdFormat::RepMdV2.md_len(0x4000 | 0x1000), 8);
    assert_eq!(MdFormat::RepMdV2.md_len(0xFFFF), 13 * 4 + 3 * 8);
    assert_eq!(MdFormat::IntInstruction.md_len(0x9000), 8);
    // INT 1.0: timestamps are 4 bytes, only bit 6 (L2 interface IDs) is 8.
    assert_eq!(MdFormat::IntInstructionV1.md_len(0x8C00), 12);
    assert_eq!(MdFormat::IntInstruction.md_len(0x8C00), 20);
    assert_eq!(MdFormat::IntInstructionV1.md_len(0xFFFF), 7 * 4 + 8 + 8 * 4);
    assert_eq!(MdFormat::RepMdV1.md_len(0x3F), 24);
}

#[test]
fn every_prefix_of_a_report_is_an_error_not_a_panic() {
    let hops = [
        HopMetadata {
            node_id: Some(1),
            queue: Some(QueueOccupancy {
                id: 1,
                occupancy: 7,
            }),
            ..HopMetadata::default()
        },
        HopMetadata {
            node_id: Some(2),
            queue: Some(QueueOccupancy {
                id: 2,
                occupancy: 9,
            }),
            ..HopMetadata::default()
        },
    ];
    for version in [VERSION_1, VERSION_2] {
        let r = IndividualRepr {
            rep_type: RepType::Int,
            flags: Flags {
                tracked: true,
                ..Flags::default()
            },
            local: HopMetadata {
                queue: Some(QueueOccupancy {
                    id: 3,
                    occupancy: 5,
                }),
                ..HopMetadata::default()
            },
            ingress_ts32: 0,
            packet: InnerPacketRepr {
                ethernet: false,
                flow: flow(),
                ttl: 61,
                dscp: 0,
                payload_len: 100,
                int: Some((
                    EmbeddedIntRepr {
                        kind: IntKind::Md,
                        instruction: 0x9000,
                        remaining_hop_count: 6,
                        hops: &hops,
                    },
                    DEFAULT_MD_UDP_PORT,
                )),
            },
        };
        let g = GroupRepr {
            version,
            hw_id: 1,
            seq_no: 9,
            node_id: 3,
        };
        let mut buf = [0u8; 256];
        let n = emit(&g, &[r], &mut buf).unwrap();
        let full = TelemetryReport::parse(&buf[..n]).unwrap();
        let ir = full.reports().next().unwrap().unwrap();
        let inner = ir.parse_inner(&InnerConfig::default()).unwrap();
        assert_eq!(inner.flow, flow());
        let e = inner.int.unwrap();
        assert_eq!(e.hops(), 2);
        assert_eq!(e.hop_from_source(0), Some(hops[0]));
        assert_eq!(e.hop_from_source(1), Some(hops[1]));
        for cut in 0..n {
            let b = &buf[..cut];
            if let Ok(t) = TelemetryReport::parse(b) {
                for ir in t.reports().flatten() {
                    let _ = ir.parse_inner(&InnerConfig::default());
                }
            }
        }
    }
}

#[test]
fn bad_versions_and_types_are_named() {
    assert_eq!(
        TelemetryReport::parse(&[0x30, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]),
        Err(ReportError::BadVersion)
    );
    assert_eq!(TelemetryReport::parse(&[]), Err(ReportError::Truncated));
    let mut b = [0u8; 24];
    b[0] = 0x20;
    b[8] = 0x24; // RepType 2 (IOAM)
    b[9] = 1;
    let t = TelemetryReport::parse(&b).unwrap();
    assert_eq!(t.reports().next(), Some(Err(ReportError::UnknownRepType)));
    // Report Length beyond the datagram.
    b[8] = 0x14;
    b[9] = 40;
    let t = TelemetryReport::parse(&b).unwrap();
    assert_eq!(t.reports().next(), Some(Err(ReportError::Truncated)));
    // An INT report whose Report Length cannot hold its main contents.
    b[9] = 1;
    let t = TelemetryReport::parse(&b).unwrap();
    assert_eq!(t.reports().next(), Some(Err(ReportError::BadLength)));
}

fn arb_queue() -> impl Strategy<Value = Option<QueueOccupancy>> {
    proptest::option::of(
        (any::<u8>(), 0u32..(1 << 24)).prop_map(|(id, occupancy)| QueueOccupancy { id, occupancy }),
    )
}

prop_compose! {
    fn arb_md(v1: bool)(
        l1 in proptest::option::of(any::<(u16, u16)>()),
        lat in proptest::option::of(any::<u32>()),
        queue in arb_queue(),
        its in proptest::option::of(any::<u64>()),
        ets in proptest::option::of(any::<u64>()),
        l2 in proptest::option::of(any::<(u32, u32)>()),
        util in proptest::option::of(any::<u32>()),
        buffer in arb_queue(),
        drop in proptest::option::of(any::<(u8, u8)>()),
    ) -> HopMetadata {
        if v1 {
            HopMetadata {
                l1_ports: l1, hop_latency: lat, queue,
                egress_ts: ets.map(|t| t as u32 as u64), tx_util: util,
                drop: drop.map(|(queue, reason)| DropInfo { queue, reason }),
                ..HopMetadata::default()
            }
        } else {
            HopMetadata {
                node_id: None, l1_ports: l1, hop_latency: lat, queue, ingress_ts: its,
                egress_ts: ets, l2_ports: l2, tx_util: util, buffer,
                drop: drop.map(|(queue, reason)| DropInfo { queue, reason }),
            }
        }
    }
}

prop_compose! {
    fn arb_hop()(node in any::<u32>(), lat in any::<u32>(), q in arb_queue()) -> HopMetadata {
        HopMetadata { node_id: Some(node), hop_latency: Some(lat),
            queue: Some(q.unwrap_or_default()), ..HopMetadata::default() }
    }
}

proptest! {
    #[test]
    fn round_trip(
        v1 in any::<bool>(),
        hw_id in 0u8..64,
        seq in any::<u32>(),
        node in any::<u32>(),
        flags in any::<(bool, bool, bool, bool)>(),
        local_v1 in arb_md(true),
        local_v2 in arb_md(false),
        ethernet in any::<bool>(),
        proto in prop_oneof![Just(PROTO_TCP), Just(PROTO_UDP)],
        ports in any::<(u16, u16)>(),
        addrs in any::<([u8; 4], [u8; 4])>(),
        ttl in any::<u8>(),
        hops in proptest::collection::vec(arb_hop(), 0..6),
        with_int in any::<bool>(),
        coalesced in 1usize..4,
        its in any::<u32>(),
    ) {
        let version = if v1 { VERSION_1 } else { VERSION_2 };
        let f = FlowKey { src: addrs.0, dst: addrs.1, proto, sport: ports.0, dport: ports.1 };
        let r = IndividualRepr {
            rep_type: RepType::Int,
            flags: Flags { dropped: flags.0, congested: flags.1, tracked: flags.2,
                intermediate: flags.3 && !v1 },
            local: if v1 { local_v1 } else { local_v2 },
            ingress_ts32: if v1 { its } else { 0 },
            packet: InnerPacketRepr {
                ethernet, flow: f, ttl, dscp: 0, payload_len: 0,
                int: with_int.then_some((EmbeddedIntRepr {
                    kind: IntKind::Md, instruction: 0xB000, remaining_hop_count: 3,
                    hops: &hops }, DEFAULT_MD_UDP_PORT)),
            },
        };
        let n_reports = if v1 { 1 } else { coalesced };
        let reports = vec![r; n_reports];
        let g = GroupRepr { version, hw_id, seq_no: if v1 { seq } else { seq & V2_SEQ_MAX },
            node_id: node };
        let mut buf = vec![0u8; buffer_len(&g, &reports)];
        let n = emit(&g, &reports, &mut buf).unwrap();
        prop_assert_eq!(n, buf.len());
        let t = TelemetryReport::parse(&buf).unwrap();
        prop_assert_eq!((t.version, t.hw_id, t.seq_no, t.node_id),
            (g.version, g.hw_id, g.seq_no, g.node_id));
        let mut seen = 0;
        for ir in t.reports() {
            let ir = ir.unwrap();
            seen += 1;
            prop_assert_eq!(ir.flags, r.flags);
            prop_assert_eq!(ir.local, r.local);
            if v1 { prop_assert_eq!(ir.ingress_ts32, Some(its)); }
            let p = ir.parse_inner(&InnerConfig::default()).unwrap();
            prop_assert_eq!(p.flow, f);
            prop_assert_eq!(p.ttl, ttl);
            match p.int {
                Some(e) => {
                    prop_assert!(with_int);
                    prop_assert_eq!(e.hops(), hops.len());
                    for (i, h) in hops.iter().enumerate() {
                        prop_assert_eq!(e.hop_from_source(i), Some(*h));
                    }
                }
                None => prop_assert!(!with_int),
            }
        }
        prop_assert_eq!(seen, n_reports);
    }

    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
        let cfg = InnerConfig { md_dscp: Some(0x17), ..InnerConfig::default() };
        if let Ok(t) = TelemetryReport::parse(&bytes) {
            // Reports, then at most one error, which ends the walk; every report takes at
            // least a header, so the walk is bounded by the datagram.
            let items: Vec<_> = t.reports().take(bytes.len() + 2).collect();
            prop_assert!(!items.is_empty());
            prop_assert!(items.len() <= bytes.len() / INDIVIDUAL_HEADER_LEN + 1);
            let errors = items.iter().filter(|r| r.is_err()).count();
            prop_assert!(errors <= 1);
            prop_assert!(errors == 0 || items.last().is_some_and(|r| r.is_err()));
            for ir in t.reports().take(64).flatten() {
                if let Ok(p) = ir.parse_inner(&cfg) {
                    if let Some(e) = p.int {
                        for i in 0..e.hops() + 1 { let _ = e.hop_from_source(i); }
                    }
                }
            }
        }
    }
}
