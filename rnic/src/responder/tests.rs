use super::*;
use dta_proto::icrc::{self, ReconstructedHeader};
use dta_proto::wire::ib::{opcode_info, Reth, RethRepr, BTH_LEN, ICRC_LEN, RETH_LEN};
use dta_proto::wire::roce::L2L4_LEN;

const REGION: usize = 1 << 16;

/// A responder with one region and one QP from `peer`; (responder, region base, R_Key).
fn setup(fast: bool, peer: SocketAddrV4) -> (Responder, Arc<Region>, Rkey) {
    let mut r = Responder::new(DeviceConfig {
        local: SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 51), 4791),
        pmtu: 1024,
        ..DeviceConfig::default()
    });
    r.fast_path = fast;
    let region = Arc::new(Region::anonymous(REGION, false).unwrap());
    let rkey = r.register(region.clone(), Access::ALL);
    r.create_qp(QpConfig {
        peer,
        peer_mac: MacAddr([2, 0, 0, 0, 0, 1]),
        peer_qpn: Qpn::new(0x99),
        rq_psn: Psn::new(0xFF_FFF0),
        sq_psn: Psn::new(0),
        verify_icrc: true,
        recv_credits: 4,
    });
    (r, region, rkey)
}

/// A frame as a test writes it: transport bytes whose RETH names `region` by offset (so
/// two responders with their own regions get the same request), and whether to break its
/// ICRC.
struct Frame {
    transport: Vec<u8>,
    src: SocketAddrV4,
    corrupt_icrc: bool,
}

/// The frame for a responder whose region is `base` / `rkey`: the RETH's offset and the
/// test's R_Key marker become that responder's, and the ICRC is sealed.
fn seal(f: &Frame, base: u64, rkey: Rkey, dst: SocketAddrV4) -> Vec<u8> {
    let mut t = f.transport.clone();
    if t.len() >= BTH_LEN + RETH_LEN + ICRC_LEN && opcode_info(t[0]).is_some_and(|i| i.reth) {
        let mut reth = Reth::new_unchecked(&mut t[BTH_LEN..BTH_LEN + RETH_LEN]);
        reth.set_va(base.wrapping_add(reth.va()));
        if reth.rkey() == Rkey(0xABCD_EF00) {
            reth.set_rkey(rkey);
        }
    }
    let h = ReconstructedHeader {
        src_ip: *f.src.ip(),
        dst_ip: *dst.ip(),
        src_port: f.src.port(),
        dst_port: dst.port(),
    };
    if let Some(c) = icrc::reconstructed_icrc(&h, &t) {
        let n = t.len();
        t[n - 4..].copy_from_slice(&(c ^ f.corrupt_icrc as u32).to_le_bytes());
    }
    t
}

/// A stream of WRITEs, mostly valid and in order, with every kind of fault mixed in.
fn stream(seed: u64, peer: SocketAddrV4) -> Vec<Frame> {
    let mut s = seed | 1;
    let mut next = || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        s
    };
    let ep = RoceEndpoint::default();
    let mut psn = Psn::new(0xFF_FFF0);
    let mut out = Vec::new();
    for i in 0..600 {
        let r = next();
        let len = [8usize, 32, 30, 72, 1024, 0][(r % 6) as usize];
        let tmpl = FrameTemplate::new(&ep, op::RC_RDMA_WRITE_ONLY, Qpn::new(QPN_BASE), len);
        let mut buf = vec![0u8; tmpl.frame_len()];
        let off = (r >> 8) % (REGION as u64 - 1024);
        let reth = RethRepr {
            va: off,
            rkey: Rkey(0xABCD_EF00),
            dma_len: len as u32,
        };
        let payload: Vec<u8> = (0..len).map(|i| (r >> 16) as u8 ^ i as u8).collect();
        // Faults that break the QP (a bad R_Key, range or length) only at the end, so the
        // rest of the stream runs on a live QP.
        let fault = match (r >> 40) % 24 {
            3 | 4 | 5 | 11 | 12 if i < 560 => 13,
            f => f,
        };
        let use_psn = match fault {
            0 => psn.add(3),
            1 => Psn::new(psn.value().wrapping_sub(2) & 0xFF_FFFF),
            _ => psn,
        };
        tmpl.emit_write(&mut buf, use_psn, r & 16 != 0, &reth, None, &payload);
        let mut t = buf[L2L4_LEN..].to_vec();
        let mut src = peer;
        let mut corrupt_icrc = false;
        match fault {
            2 => corrupt_icrc = true,
            3 => Reth::new_unchecked(&mut t[BTH_LEN..]).set_rkey(Rkey(0x1234_5600)),
            4 => Reth::new_unchecked(&mut t[BTH_LEN..]).set_va(REGION as u64 - 4),
            5 => Reth::new_unchecked(&mut t[BTH_LEN..]).set_dma_len(len as u32 + 4),
            6 => t[1] |= 0x0F, // TVer
            7 => t[2] = 0x00,  // P_Key
            9 => t.truncate(BTH_LEN + 6),
            10 => src = SocketAddrV4::new(Ipv4Addr::new(10, 9, 9, 9), peer.port()),
            11 => t[1] = (t[1] & !0x30) | 0x30, // pad count 3
            12 => Reth::new_unchecked(&mut t[BTH_LEN..]).set_va(u64::MAX - 8),
            _ => {}
        }
        // Only a valid frame takes a PSN.
        if fault == 8 || fault >= 13 {
            psn = psn.next();
        }
        out.push(Frame {
            transport: t,
            src,
            corrupt_icrc,
        });
    }
    out
}

#[test]
fn fast_and_general_paths_agree() {
    let peer = SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 101), 10000);
    for seed in 1..6u64 {
        let (mut fast, ra, ka) = setup(true, peer);
        let (mut general, rb, kb) = setup(false, peer);
        let dst = fast.dev.local;
        let (mut txa, mut txb) = (TxBatch::new(64, 2048), TxBatch::new(64, 2048));
        let mut answers = 0;
        for f in stream(seed, peer) {
            let a = seal(&f, ra.addr(), ka, dst);
            let b = seal(&f, rb.addr(), kb, dst);
            for (r, t, tx) in [(&mut fast, &a, &mut txa), (&mut general, &b, &mut txb)] {
                r.handle(
                    &Datagram {
                        src: f.src,
                        dst,
                        ip: None,
                        payload: t,
                    },
                    tx,
                );
            }
            let fa: Vec<&[u8]> = txa.iter_payloads().map(|(_, b)| b).collect();
            let fb: Vec<&[u8]> = txb.iter_payloads().map(|(_, b)| b).collect();
            assert_eq!(fa, fb, "seed {seed}: the answers differ");
            answers += fa.len();
            txa.clear();
            txb.clear();
        }
        let qpn = Qpn::new(QPN_BASE);
        assert_eq!(
            format!("{:?}", fast.qp_counters(qpn)),
            format!("{:?}", general.qp_counters(qpn)),
            "seed {seed}"
        );
        assert_eq!(fast.expected_psn(qpn), general.expected_psn(qpn));
        assert_eq!(fast.qp_state(qpn), general.qp_state(qpn));
        let (mut ma, mut mb) = (vec![0u8; REGION], vec![0u8; REGION]);
        ra.read(0, &mut ma).unwrap();
        rb.read(0, &mut mb).unwrap();
        assert!(ma == mb, "seed {seed}: the regions differ");
        let c = fast.qp_counters(qpn).unwrap();
        assert!(
            c.writes > 20 && answers > 0,
            "seed {seed}: too few writes ran: {c:?}"
        );
    }
}
