use super::*;
use proptest::prelude::*;

const P: u16 = 1337;
const LOCAL_IP: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 101);
const REMOTE_IP: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 51);

/// The REQ the reference's `init_rdma_connection.py` sends (dta-reference.md §5.2).
fn reference_req() -> (MadHeaderRepr, CmReq) {
    let hdr = MadHeaderRepr::cm_send(0x0000_0006_7C31_3D63, 0x3000_0000);
    let req = CmReq {
        local_comm_id: P as u32,
        vendor_id: 0x15B3,
        service_id: rdma_cm_service_id(P),
        local_ca_guid: 0xB8CE_F603_00D2_1326,
        local_qkey: 0,
        local_qpn: P as u32,
        responder_resources: 0,
        local_eecn: 0,
        initiator_depth: 3,
        remote_cm_response_timeout: 22,
        transport_type: TRANSPORT_RC,
        flow_control: false,
        starting_psn: 0xE6FB20,
        local_cm_response_timeout: 22,
        retry_count: 3,
        pkey: 0xFFFF,
        path_mtu: 3,
        rdc_exists: false,
        rnr_retry_count: 0,
        max_cm_retries: 15,
        srq: false,
        primary_local_lid: 0xFFFF,
        primary_remote_lid: 0xFFFF,
        primary_local_gid: ipv4_gid(LOCAL_IP),
        primary_remote_gid: ipv4_gid(REMOTE_IP),
        primary_flow_label: 0x943E0,
        primary_packet_rate: 7,
        primary_traffic_class: 0,
        primary_hop_limit: 64,
        primary_sl: 0,
        primary_subnet_local: false,
        primary_local_ack_timeout: 19,
        private_data: CmPrivateIp {
            src_port: 0xD079,
            src: LOCAL_IP,
            dst: REMOTE_IP,
        }
        .to_req_private_data(),
    };
    (hdr, req)
}

#[test]
fn golden_reference_req() {
    let (hdr, req) = reference_req();
    let mut mad = [0xAAu8; MAD_LEN];
    CmMessage::Req(req).emit(&hdr, &mut mad);

    // MAD header.
    assert_eq!(
        mad[..24],
        [
            0x01, 0x07, 0x02, 0x03, 0, 0, 0, 0, // versions, class, method, status, cs
            0x00, 0x00, 0x00, 0x06, 0x7C, 0x31, 0x3D, 0x63, // TID
            0x00, 0x10, 0, 0, // ConnectRequest, reserved
            0x30, 0x00, 0x00, 0x00, // attribute modifier
        ]
    );
    let d = &mad[MAD_HEADER_LEN..];
    let at = |off: usize, len: usize| &d[off..off + len];
    // Every row of the §5.2 table, at its REQ offset.
    assert_eq!(at(0, 4), (P as u32).to_be_bytes());
    assert_eq!(at(4, 4), [0x00, 0x00, 0x15, 0xB3]);
    assert_eq!(at(8, 8), 0x0000_0000_0106_0539u64.to_be_bytes());
    assert_eq!(at(16, 8), 0xB8CE_F603_00D2_1326u64.to_be_bytes());
    assert_eq!(at(24, 4), [0; 4]);
    assert_eq!(at(28, 4), [0; 4]);
    assert_eq!(at(32, 4), [0x00, 0x05, 0x39, 0x00]); // QPN 1337, responder resources 0
    assert_eq!(at(36, 4), [0, 0, 0, 3]); // EECN 0, initiator depth 3
    assert_eq!(at(40, 4), [0, 0, 0, 22 << 3]); // remote EECN, timeout 22, RC, no E2E
    assert_eq!(at(44, 4), [0xE6, 0xFB, 0x20, (22 << 3) | 3]);
    assert_eq!(at(48, 4), [0xFF, 0xFF, 3 << 4, 15 << 4]); // P_Key, MTU/RDC/RNR, retries
    assert_eq!(at(52, 4), [0xFF; 4]);
    assert_eq!(
        at(56, 16),
        [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xFF, 0xFF, 10, 0, 0, 101]
    );
    assert_eq!(
        at(72, 16),
        [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xFF, 0xFF, 10, 0, 0, 51]
    );
    assert_eq!(at(88, 4), ((0x943E0u32 << 12) | 7).to_be_bytes());
    assert_eq!(at(92, 4), [0, 64, 0, 19 << 3]);
    assert!(at(96, 44).iter().all(|&b| b == 0));
    // Private data: rdma_cm IP header.
    assert_eq!(at(140, 4), [0x00, 0x40, 0xD0, 0x79]);
    assert_eq!(at(144, 12), [0; 12]);
    assert_eq!(at(156, 4), [10, 0, 0, 101]);
    assert_eq!(at(160, 12), [0; 12]);
    assert_eq!(at(172, 4), [10, 0, 0, 51]);
    assert!(at(176, 56).iter().all(|&b| b == 0));

    let (h2, m2) = CmMessage::parse(&mad).unwrap();
    assert_eq!(
        h2,
        MadHeaderRepr {
            attr_id: ATTR_REQ,
            ..hdr
        }
    );
    assert_eq!(m2, CmMessage::Req(req));
    let CmMessage::Req(r2) = m2 else {
        unreachable!()
    };
    assert_eq!(
        r2.private_ip().unwrap(),
        CmPrivateIp {
            src_port: 53369,
            src: LOCAL_IP,
            dst: REMOTE_IP
        }
    );
    assert_eq!(service_port(r2.service_id), Some(P));
    assert_eq!(gid_ipv4(&r2.primary_remote_gid), Some(REMOTE_IP));
}

#[test]
fn rep_offsets_match_the_reference_parser() {
    // §5.3: local QPN at REP offset 12 and starting PSN at offset 20, both 24 bits.
    let rep = CmRep {
        local_comm_id: 0x1122_3344,
        remote_comm_id: P as u32,
        local_qpn: 0x00AB_CDEF,
        starting_psn: 0x0012_3456,
        vendor_id: 0x0002C9,
        responder_resources: 4,
        initiator_depth: 2,
        target_ack_delay: 15,
        rnr_retry_count: 7,
        srq: true,
        local_ca_guid: 0x0102_0304_0506_0708,
        ..CmRep::default()
    };
    let mut mad = [0u8; MAD_LEN];
    CmMessage::Rep(rep).emit(&MadHeaderRepr::cm_send(9, 0), &mut mad);
    let d = &mad[MAD_HEADER_LEN..];
    assert_eq!(d[0..4], [0x11, 0x22, 0x33, 0x44]);
    assert_eq!(d[4..8], (P as u32).to_be_bytes());
    assert_eq!(d[12..16], [0xAB, 0xCD, 0xEF, 0x00]);
    assert_eq!(d[16..20], [0, 0, 0, 0x02]);
    assert_eq!(d[20..24], [0x12, 0x34, 0x56, 0xC9]);
    assert_eq!(d[24..28], [4, 2, 15 << 3, (7 << 5) | (1 << 4)]);
    assert_eq!(d[28..36], [1, 2, 3, 4, 5, 6, 7, 8]);
    assert_eq!(mad[16..18], [0x00, 0x13]);
    assert_eq!(
        CmMessage::parse(&mad).unwrap().1,
        CmMessage::Rep(rep),
        "REP round trip"
    );
}

#[test]
fn rej_and_dreq_layouts() {
    let rej = CmRej {
        local_comm_id: 1,
        remote_comm_id: 2,
        msg_rejected: MSG_REQ,
        reject_info_length: 0,
        reason: rej_reason::INVALID_SERVICE_ID,
        ..CmRej::default()
    };
    let mut mad = [0u8; MAD_LEN];
    CmMessage::Rej(rej).emit(&MadHeaderRepr::cm_send(1, 0), &mut mad);
    assert_eq!(mad[24 + 8..24 + 12], [0x00, 0x00, 0x00, 0x08]);
    let rej = CmRej {
        msg_rejected: MSG_OTHER,
        reject_info_length: 72,
        reason: rej_reason::CONSUMER_REJECT,
        ..rej
    };
    CmMessage::Rej(rej).emit(&MadHeaderRepr::cm_send(1, 0), &mut mad);
    assert_eq!(mad[24 + 8..24 + 12], [0x80, 72 << 1, 0x00, 28]);

    let dreq = CmDreq {
        local_comm_id: 1,
        remote_comm_id: 2,
        remote_qpn_eecn: 0x00FE_DCBA,
        ..CmDreq::default()
    };
    CmMessage::Dreq(dreq).emit(&MadHeaderRepr::cm_send(1, 0), &mut mad);
    assert_eq!(mad[24 + 8..24 + 12], [0xFE, 0xDC, 0xBA, 0x00]);
    assert_eq!(mad[16..18], [0x00, 0x15]);

    let mra = CmMra {
        local_comm_id: 1,
        remote_comm_id: 2,
        msg_mraed: MSG_REP,
        service_timeout: 31,
    };
    CmMessage::Mra(mra).emit(&MadHeaderRepr::cm_send(1, 0), &mut mad);
    assert_eq!(mad[24 + 8..24 + 10], [0x40, 0xF8]);
    assert!(mad[24 + 10..].iter().all(|&b| b == 0));
}

#[test]
fn header_checks() {
    let (hdr, req) = reference_req();
    let mut mad = [0u8; MAD_LEN];
    CmMessage::Req(req).emit(&hdr, &mut mad);
    assert_eq!(CmMessage::parse(&mad[..MAD_LEN - 1]), Err(Error::Truncated));
    let mut longer = [0u8; MAD_LEN + 4];
    longer[..MAD_LEN].copy_from_slice(&mad);
    assert!(CmMessage::parse(&longer).is_ok());

    let mut bad = mad;
    bad[0] = 2;
    assert_eq!(CmMessage::parse(&bad), Err(Error::UnsupportedVersion));
    let mut bad = mad;
    bad[1] = 0x03; // Subnet Administration
    assert_eq!(CmMessage::parse(&bad), Err(Error::Malformed));
    let mut bad = mad;
    bad[2] = 1;
    assert_eq!(CmMessage::parse(&bad), Err(Error::UnsupportedVersion));
    let mut bad = mad;
    bad[3] = METHOD_GET;
    assert_eq!(CmMessage::parse(&bad), Err(Error::UnknownOpcode));
    for attr in [ATTR_SIDR_REQ, ATTR_LAP, ATTR_CLASS_PORT_INFO, 0xFFFF] {
        let mut bad = mad;
        bad[16..18].copy_from_slice(&attr.to_be_bytes());
        assert_eq!(CmMessage::parse(&bad), Err(Error::UnknownOpcode));
    }
    assert_eq!(
        MadHeader::new_checked(&mad[..23]).unwrap_err(),
        Error::Truncated
    );
    assert_eq!(CmReq::parse(&mad[24..255]), Err(Error::Truncated));
}

#[test]
fn service_ids_and_gids() {
    assert_eq!(rdma_cm_service_id(1337), 0x0000_0000_0106_0539);
    assert_eq!(service_port(0x0000_0000_0106_0539), Some(1337));
    assert_eq!(service_port(0x0000_0000_0111_0539), None); // RDMA_PS_UDP
    assert_eq!(service_port(0x1000_0000_0106_0539), None);
    assert_eq!(gid_ipv4(&[0; 16]), None);
    let mut g = ipv4_gid(LOCAL_IP);
    assert_eq!(gid_ipv4(&g), Some(LOCAL_IP));
    g[0] = 0xFE;
    assert_eq!(gid_ipv4(&g), None);
    assert_eq!(timeout_nanos(0), 4096);
    assert_eq!(timeout_nanos(19), 2_147_483_648); // ~2.1 s, as §11.5 Q4 says
}

#[test]
fn private_ip_checks() {
    let ip = CmPrivateIp {
        src_port: 1,
        src: LOCAL_IP,
        dst: REMOTE_IP,
    };
    let pd = ip.to_req_private_data();
    assert_eq!(CmPrivateIp::parse(&pd), Ok(ip));
    assert_eq!(CmPrivateIp::parse(&pd[..35]), Err(Error::Truncated));
    let mut v6 = pd;
    v6[1] = 0x60;
    assert_eq!(CmPrivateIp::parse(&v6), Err(Error::UnsupportedVersion));
    let mut v1 = pd;
    v1[0] = 1;
    assert_eq!(CmPrivateIp::parse(&v1), Err(Error::UnsupportedVersion));
}

fn arr<const N: usize>() -> impl Strategy<Value = [u8; N]> {
    prop::collection::vec(any::<u8>(), N).prop_map(|v| v.try_into().unwrap())
}

prop_compose! {
    fn hdr_strategy()(tid in any::<u64>(), attr_mod in any::<u32>(),
                      status in any::<u16>(), cs in any::<u16>()) -> MadHeaderRepr {
        MadHeaderRepr { status, class_specific: cs, ..MadHeaderRepr::cm_send(tid, attr_mod) }
    }
}

prop_compose! {
    fn req_strategy()(
        ids in (any::<u32>(), 0u32..1 << 24, any::<u64>(), any::<u64>(), any::<u32>()),
        qp in (0u32..1 << 24, any::<u8>(), 0u32..1 << 24, any::<u8>()),
        t in (0u8..32, 0u8..4, any::<bool>(), 0u32..1 << 24, 0u8..32, 0u8..8),
        p in (any::<u16>(), 0u8..16, any::<bool>(), 0u8..8, 0u8..16, any::<bool>()),
        lids in (any::<u16>(), any::<u16>(), arr::<16>(), arr::<16>()),
        path in (0u32..1 << 20, 0u8..64, any::<u8>(), any::<u8>(), 0u8..16, any::<bool>(),
                 0u8..32),
        private_data in arr::<REQ_PRIVATE_DATA_LEN>(),
    ) -> CmReq {
        CmReq {
            local_comm_id: ids.0, vendor_id: ids.1, service_id: ids.2, local_ca_guid: ids.3,
            local_qkey: ids.4,
            local_qpn: qp.0, responder_resources: qp.1, local_eecn: qp.2,
            initiator_depth: qp.3,
            remote_cm_response_timeout: t.0, transport_type: t.1, flow_control: t.2,
            starting_psn: t.3, local_cm_response_timeout: t.4, retry_count: t.5,
            pkey: p.0, path_mtu: p.1, rdc_exists: p.2, rnr_retry_count: p.3,
            max_cm_retries: p.4, srq: p.5,
            primary_local_lid: lids.0, primary_remote_lid: lids.1,
            primary_local_gid: lids.2, primary_remote_gid: lids.3,
            primary_flow_label: path.0, primary_packet_rate: path.1,
            primary_traffic_class: path.2, primary_hop_limit: path.3, primary_sl: path.4,
            primary_subnet_local: path.5, primary_local_ack_timeout: path.6,
            private_data,
        }
    }
}

prop_compose! {
    fn rep_strategy()(
        ids in (any::<u32>(), any::<u32>(), any::<u32>(), 0u32..1 << 24, 0u32..1 << 24,
                0u32..1 << 24, 0u32..1 << 24),
        r in (any::<u8>(), any::<u8>(), 0u8..32, 0u8..4, any::<bool>(), 0u8..8,
              any::<bool>(), any::<u64>()),
        private_data in arr::<REP_PRIVATE_DATA_LEN>(),
    ) -> CmRep {
        CmRep {
            local_comm_id: ids.0, remote_comm_id: ids.1, local_qkey: ids.2,
            local_qpn: ids.3, local_eecn: ids.4, starting_psn: ids.5, vendor_id: ids.6,
            responder_resources: r.0, initiator_depth: r.1, target_ack_delay: r.2,
            failover_accepted: r.3, end_to_end_flow_control: r.4, rnr_retry_count: r.5,
            srq: r.6, local_ca_guid: r.7, private_data,
        }
    }
}

fn message_strategy() -> impl Strategy<Value = CmMessage> {
    let ids = (any::<u32>(), any::<u32>());
    prop_oneof![
        req_strategy().prop_map(CmMessage::Req),
        rep_strategy().prop_map(CmMessage::Rep),
        (ids, arr::<RTU_PRIVATE_DATA_LEN>()).prop_map(|((l, r), private_data)| {
            CmMessage::Rtu(CmRtu {
                local_comm_id: l,
                remote_comm_id: r,
                private_data,
            })
        }),
        (
            ids,
            (0u8..4, 0u8..128, any::<u16>()),
            arr::<REJ_ARI_LEN>(),
            arr::<REJ_PRIVATE_DATA_LEN>()
        )
            .prop_map(|((l, r), (m, n, reason), ari, private_data)| {
                CmMessage::Rej(CmRej {
                    local_comm_id: l,
                    remote_comm_id: r,
                    msg_rejected: m,
                    reject_info_length: n,
                    reason,
                    ari,
                    private_data,
                })
            }),
        (ids, 0u32..1 << 24, arr::<DREQ_PRIVATE_DATA_LEN>()).prop_map(
            |((l, r), q, private_data)| {
                CmMessage::Dreq(CmDreq {
                    local_comm_id: l,
                    remote_comm_id: r,
                    remote_qpn_eecn: q,
                    private_data,
                })
            }
        ),
        (ids, arr::<DREP_PRIVATE_DATA_LEN>()).prop_map(|((l, r), private_data)| {
            CmMessage::Drep(CmDrep {
                local_comm_id: l,
                remote_comm_id: r,
                private_data,
            })
        }),
        (ids, 0u8..4, 0u8..32).prop_map(|((l, r), m, t)| {
            CmMessage::Mra(CmMra {
                local_comm_id: l,
                remote_comm_id: r,
                msg_mraed: m,
                service_timeout: t,
            })
        }),
    ]
}

proptest! {
    #[test]
    fn message_round_trip(hdr in hdr_strategy(), msg in message_strategy()) {
        let mut mad = [0x5Au8; MAD_LEN];
        msg.emit(&hdr, &mut mad);
        let (h2, m2) = CmMessage::parse(&mad).unwrap();
        prop_assert_eq!(h2, MadHeaderRepr { attr_id: msg.attr_id(), ..hdr });
        prop_assert_eq!(m2, msg);
        let mut again = [0u8; MAD_LEN];
        m2.emit(&h2, &mut again);
        prop_assert_eq!(again, mad);
    }

    #[test]
    fn parse_emit_parse_is_stable(
        attr in prop::sample::select(vec![
            ATTR_REQ, ATTR_REP, ATTR_RTU, ATTR_REJ, ATTR_DREQ, ATTR_DREP, ATTR_MRA,
        ]),
        data in prop::collection::vec(any::<u8>(), MAD_DATA_LEN),
    ) {
        // Every field value a parser can produce survives emit and re-parse.
        let mut mad = [0u8; MAD_LEN];
        MadHeaderRepr { attr_id: attr, ..MadHeaderRepr::cm_send(7, 0) }
            .emit(&mut MadHeader::new_unchecked(&mut mad[..]));
        mad[MAD_HEADER_LEN..].copy_from_slice(&data);
        let (h, m) = CmMessage::parse(&mad).unwrap();
        let mut out = [0u8; MAD_LEN];
        m.emit(&h, &mut out);
        prop_assert_eq!(CmMessage::parse(&out).unwrap(), (h, m));
    }

    #[test]
    fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..300)) {
        let _ = CmMessage::parse(&bytes);
        let _ = CmPrivateIp::parse(&bytes);
        if let Ok(h) = MadHeader::new_checked(&bytes[..]) {
            let _ = MadHeaderRepr::parse(&h);
            let _ = (h.tid(), h.attr_id(), h.attr_mod(), h.data().len());
        }
    }

    #[test]
    fn arbitrary_cm_bodies_never_panic(
        attr in 0x0010u16..0x001B,
        body in prop::collection::vec(any::<u8>(), 0..300),
    ) {
        let mut mad = vec![0u8; MAD_HEADER_LEN];
        MadHeaderRepr { attr_id: attr, ..MadHeaderRepr::cm_send(0, 0) }
            .emit(&mut MadHeader::new_unchecked(&mut mad[..]));
        mad.extend_from_slice(&body);
        let r = CmMessage::parse(&mad);
        if mad.len() < MAD_LEN {
            prop_assert_eq!(r, Err(Error::Truncated));
        }
    }

    #[test]
    fn private_ip_round_trip(port in any::<u16>(), s in any::<u32>(), d in any::<u32>()) {
        let ip = CmPrivateIp { src_port: port, src: s.into(), dst: d.into() };
        prop_assert_eq!(CmPrivateIp::parse(&ip.to_req_private_data()), Ok(ip));
        prop_assert_eq!(gid_ipv4(&ipv4_gid(ip.src)), Some(ip.src));
    }
}
