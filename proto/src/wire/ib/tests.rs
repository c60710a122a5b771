use super::*;
use crate::wire::Error;
use proptest::prelude::*;

#[test]
fn psn_arithmetic() {
    assert_eq!(Psn::new(0x1234_5678).value(), 0x34_5678);
    assert_eq!(Psn::MAX.next(), Psn::new(0));
    assert_eq!(Psn::new(0).sub(1), Psn::MAX);
    assert_eq!(Psn::new(0xFFFFFE).add(5), Psn::new(3));
    assert_eq!(Psn::new(1).diff(Psn::new(0xFFFFFF)), 2);
    assert_eq!(Psn::new(0xFFFFFF).diff(Psn::new(1)), -2);
    assert_eq!(Psn::new(5).diff(Psn::new(5)), 0);
    // The boundary: exactly half the circle apart counts as ahead, never as behind.
    assert_eq!(Psn::new(1 << 23).diff(Psn::new(0)), 1 << 23);
    assert_eq!(Psn::new(0).diff(Psn::new(1 << 23)), 1 << 23);
    assert_eq!(Psn::new((1 << 23) + 1).diff(Psn::new(0)), -((1 << 23) - 1));
    assert_eq!(Qpn::new(0xFF00_0ABC).value(), 0xABC);
}

#[test]
fn rxe_aeth_bytes() {
    assert_eq!(Syndrome::from_byte(0x1F), Syndrome::Ack { credits: 31 });
    assert_eq!(Syndrome::ACK_NO_CREDITS.to_byte(), 0x1F);
    assert_eq!(
        Syndrome::from_byte(0x60),
        Syndrome::Nak(NakCode::PsnSequenceError)
    );
    assert_eq!(
        Syndrome::from_byte(0x61),
        Syndrome::Nak(NakCode::InvalidRequest)
    );
    assert_eq!(
        Syndrome::from_byte(0x62),
        Syndrome::Nak(NakCode::RemoteAccessError)
    );
    assert_eq!(
        Syndrome::from_byte(0x63),
        Syndrome::Nak(NakCode::RemoteOperationalError)
    );
    assert_eq!(
        Syndrome::from_byte(0x64),
        Syndrome::Nak(NakCode::InvalidRdRequest)
    );
    assert_eq!(Syndrome::from_byte(0x65), Syndrome::Nak(NakCode::Other(5)));
    assert_eq!(Syndrome::from_byte(0x2E), Syndrome::RnrNak { timer: 14 });
    assert_eq!(Syndrome::from_byte(0x00), Syndrome::Ack { credits: 0 });
    assert_eq!(Syndrome::from_byte(0x40), Syndrome::Reserved(0x40));
    assert_eq!(Syndrome::from_byte(0x9F), Syndrome::Reserved(0x9F));
    assert_eq!(Syndrome::Nak(NakCode::RemoteAccessError).to_byte(), 0x62);
    assert_eq!(Syndrome::Nak(NakCode::PsnSequenceError).to_byte(), 0x60);
    for b in 0..=255u8 {
        assert_eq!(Syndrome::from_byte(b).to_byte(), b);
    }
}

#[test]
fn opcode_table() {
    use opcode::*;
    let len = |op| opcode_info(op).unwrap().ext_len();
    assert_eq!(len(RC_RDMA_WRITE_ONLY), 16);
    assert_eq!(len(RC_RDMA_WRITE_ONLY_IMM), 20);
    assert_eq!(len(RC_RDMA_WRITE_LAST_IMM), 4);
    assert_eq!(len(RC_RDMA_WRITE_MIDDLE), 0);
    assert_eq!(len(RC_SEND_ONLY_IMM), 4);
    assert_eq!(len(RC_RDMA_READ_REQUEST), 16);
    assert_eq!(len(RC_RDMA_READ_RESPONSE_FIRST), 4);
    assert_eq!(len(RC_RDMA_READ_RESPONSE_MIDDLE), 0);
    assert_eq!(len(RC_ACKNOWLEDGE), 4);
    assert_eq!(len(RC_ATOMIC_ACKNOWLEDGE), 12);
    assert_eq!(len(RC_FETCH_ADD), 28);
    assert_eq!(len(RC_COMPARE_SWAP), 28);
    assert_eq!(len(UD_SEND_ONLY), 8);
    assert_eq!(len(UD_SEND_ONLY_IMM), 12);
    let known: Vec<u8> = (0..=255u8)
        .filter(|&op| opcode_info(op).is_some())
        .collect();
    let mut expect: Vec<u8> = (0x00..=0x14).collect();
    expect.extend([0x64, 0x65]);
    assert_eq!(known, expect);
    for op in known {
        assert_ne!(name(op), "UNKNOWN");
        let i = opcode_info(op).unwrap();
        // Requests with a payload never also carry an AtomicETH, and vice versa.
        assert!(!(i.has_payload && (i.atomic_eth || i.atomic_ack)));
    }
    assert_eq!(name(0x15), "UNKNOWN");
}

#[test]
fn bth_bit_positions() {
    // BTH of dta-reference.md §4.5: WRITE ONLY, MigReq, P_Key 0xFFFF, QP 0xABC, PSN 0xE6FB20.
    let b = [
        0x0a, 0x40, 0xff, 0xff, 0x00, 0x00, 0x0a, 0xbc, 0x00, 0xe6, 0xfb, 0x20,
    ];
    let r = BthRepr::parse(&Bth::new_checked(&b[..]).unwrap()).unwrap();
    assert_eq!(
        r,
        BthRepr {
            opcode: opcode::RC_RDMA_WRITE_ONLY,
            solicited: false,
            mig_req: true,
            pad_count: 0,
            tver: 0,
            pkey: 0xFFFF,
            fecn: false,
            becn: false,
            dest_qp: Qpn::new(0xABC),
            ack_req: false,
            psn: Psn::new(0xE6FB20),
        }
    );
    let mut x = [0u8; 12];
    let r2 = BthRepr {
        solicited: true,
        pad_count: 3,
        tver: 0xF,
        fecn: true,
        becn: true,
        ack_req: true,
        ..r
    };
    r2.emit(&mut Bth::new_unchecked(&mut x[..]));
    assert_eq!(
        x,
        [0x0a, 0xff, 0xff, 0xff, 0xc0, 0, 0x0a, 0xbc, 0x80, 0xe6, 0xfb, 0x20]
    );
    let d = [0x80, 0x01, 0x00, 0x00, 0x00, 0x00, 0x05, 0x39];
    let d = DethRepr::parse(&Deth::new_checked(&d[..]).unwrap()).unwrap();
    assert_eq!((d.qkey, d.src_qp), (0x8001_0000, Qpn::new(1337)));
}

#[test]
fn immdt_repr_round_trip() {
    let r = ImmDtRepr { imm: 0xDEAD_BEEF };
    let mut b = [0u8; IMMDT_LEN];
    r.emit(&mut ImmDt::new_unchecked(&mut b[..]));
    assert_eq!(b, [0xDE, 0xAD, 0xBE, 0xEF]);
    assert_eq!(r.header_len(), IMMDT_LEN);
    assert_eq!(
        ImmDtRepr::parse(&ImmDt::new_checked(&b[..]).unwrap()),
        Ok(r)
    );
    assert_eq!(ImmDt::new_checked(&b[..3]).err(), Some(Error::Truncated));
}

fn arb_bth() -> impl Strategy<Value = BthRepr> {
    (
        any::<u8>(),
        any::<(bool, bool, bool, bool, bool)>(),
        0u8..4,
        0u8..16,
        any::<u16>(),
        0u32..1 << 24,
        0u32..1 << 24,
    )
        .prop_map(
            |(opcode, (s, m, f, b, a), pad, tver, pkey, qp, psn)| BthRepr {
                opcode,
                solicited: s,
                mig_req: m,
                pad_count: pad,
                tver,
                pkey,
                fecn: f,
                becn: b,
                dest_qp: Qpn::new(qp),
                ack_req: a,
                psn: Psn::new(psn),
            },
        )
}

proptest! {
    #[test]
    fn psn_diff_inverts_add(a in 0u32..1 << 24, d in -(1i32 << 23) + 1..=(1 << 23)) {
        let p = Psn::new(a);
        let q = if d >= 0 { p.add(d as u32) } else { p.sub(d.unsigned_abs()) };
        prop_assert_eq!(q.diff(p), d);
        prop_assert_eq!(q.sub(q.diff(p) as u32), p);
    }

    #[test]
    fn bth_round_trip(r in arb_bth()) {
        let mut b = [0u8; BTH_LEN];
        r.emit(&mut Bth::new_unchecked(&mut b[..]));
        prop_assert_eq!(BthRepr::parse(&Bth::new_checked(&b[..]).unwrap()).unwrap(), r);
    }

    #[test]
    fn eth_round_trips(va in any::<u64>(), rkey in any::<u32>(), len in any::<u32>(),
                       sa in any::<u64>(), cmp in any::<u64>(), syn in any::<u8>(),
                       msn in 0u32..1 << 24, qkey in any::<u32>(), qp in 0u32..1 << 24,
                       imm in any::<u32>()) {
        let reth = RethRepr { va, rkey: Rkey(rkey), dma_len: len };
        let b = reth.to_bytes();
        prop_assert_eq!(RethRepr::parse(&Reth::new_checked(&b[..]).unwrap()).unwrap(), reth);

        let at = AtomicEthRepr { va, rkey: Rkey(rkey), swap_add: sa, compare: cmp };
        let b = at.to_bytes();
        prop_assert_eq!(AtomicEthRepr::parse(&AtomicEth::new_checked(&b[..]).unwrap()).unwrap(), at);

        let ack = AtomicAckEthRepr { orig: sa };
        let mut b = [0u8; ATOMIC_ACK_ETH_LEN];
        ack.emit(&mut AtomicAckEth::new_unchecked(&mut b[..]));
        prop_assert_eq!(AtomicAckEthRepr::parse(&AtomicAckEth::new_checked(&b[..]).unwrap()).unwrap(), ack);

        let aeth = AethRepr { syndrome: Syndrome::from_byte(syn), msn };
        let mut b = [0u8; AETH_LEN];
        aeth.emit(&mut Aeth::new_unchecked(&mut b[..]));
        prop_assert_eq!(b[0], syn);
        prop_assert_eq!(AethRepr::parse(&Aeth::new_checked(&b[..]).unwrap()).unwrap(), aeth);

        let deth = DethRepr { qkey, src_qp: Qpn::new(qp) };
        let mut b = [0xFFu8; DETH_LEN];
        deth.emit(&mut Deth::new_unchecked(&mut b[..]));
        prop_assert_eq!(b[4], 0);
        prop_assert_eq!(DethRepr::parse(&Deth::new_checked(&b[..]).unwrap()).unwrap(), deth);

        let mut b = [0u8; IMMDT_LEN];
        ImmDt::new_unchecked(&mut b[..]).set_imm(imm);
        prop_assert_eq!(ImmDt::new_checked(&b[..]).unwrap().imm(), imm);
    }

    #[test]
    fn arbitrary_bytes_never_panic(buf in proptest::collection::vec(any::<u8>(), 0..32)) {
        let b = &buf[..];
        let _ = Bth::new_checked(b).and_then(|h| BthRepr::parse(&h));
        let _ = Reth::new_checked(b).and_then(|h| RethRepr::parse(&h));
        let _ = AtomicEth::new_checked(b).and_then(|h| AtomicEthRepr::parse(&h));
        let _ = AtomicAckEth::new_checked(b).and_then(|h| AtomicAckEthRepr::parse(&h));
        let _ = Aeth::new_checked(b).and_then(|h| AethRepr::parse(&h));
        let _ = Deth::new_checked(b).and_then(|h| DethRepr::parse(&h));
        let _ = ImmDt::new_checked(b).map(|h| h.imm());
        // Parsing through an unchecked view still reports, never panics.
        let _ = BthRepr::parse(&Bth::new_unchecked(b));
        let _ = AtomicEthRepr::parse(&AtomicEth::new_unchecked(b));
    }
}
