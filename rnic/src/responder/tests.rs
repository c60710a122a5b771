use super::*;
use dta_proto::icrc::{self, ReconstructedHeader};
use dta_proto::wire::ib::{opcode_info, Reth, RethRepr, BTH_LEN, ICRC_LEN, RETH_LEN};
use dta_proto::wire::roce::L2L4_LEN;

const REGION: usize = 1 << 16;

/// A responder with one region and one QP from `peer`; (responder, region base, R_Key).
fn setup(fast: bool, peer: SocketAddrV4) -> (Responder, Arc<Region>, Rkey) {
    setup_verifying(fast, peer, true)
}

/// [`setup`], the QP verifying ICRCs or not.
fn setup_verifying(
    fast: bool,
    peer: SocketAddrV4,
    verify_icrc: bool,
) -> (Responder, Arc<Region>, Rkey) {
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
        verify_icrc,
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
    stream_of(seed, peer, &[8, 32, 30, 72, 1024, 0], false)
}

/// [`stream`] with payload lengths from `lens`, and with `variants`, valid frames that differ
/// from the others in one field a WRITE's shape fixes or ignores (source port, BTH byte 4,
/// SE and MigReq, the PSN word's reserved bits, P_Key membership) and one that names
/// another QP.
fn stream_of(seed: u64, peer: SocketAddrV4, lens: &[usize], variants: bool) -> Vec<Frame> {
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
        let len = lens[(r % lens.len() as u64) as usize];
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
            14 if variants => src = SocketAddrV4::new(*peer.ip(), peer.port() + 1),
            15 if variants => t[4] = 0xC5,
            16 if variants => t[1] |= 0xC0,
            17 if variants => t[8] |= 0x7F,
            18 if variants => t[2] &= 0x7F,
            _ => {}
        }
        if fault == 19 && variants {
            // Another (unknown) QP: dropped, takes no PSN.
            t[7] ^= 1;
            psn = Psn::new(psn.value().wrapping_sub(1) & 0xFF_FFFF);
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
    paths_agree(peer, true, |seed| stream(seed, peer));
}

/// The fast path's first tier (a WRITE of the QP's last shape) against the general path:
/// streams of mostly one or two shapes, each fault and variant one field away from the
/// shape, so that every one of them meets a learned shape.
#[test]
fn shaped_and_general_paths_agree() {
    let peer = SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 101), 10000);
    for lens in [&[32usize][..], &[32, 32, 32, 72], &[72, 30]] {
        for verify in [true, false] {
            paths_agree(peer, verify, |seed| stream_of(seed, peer, lens, true));
        }
    }
}

/// Feeds the frames of `stream(seed)` to a responder with the fast path and one without (their
/// QP verifying ICRCs if `verify`), and asserts that they answer, count, advance and write the
/// same.
fn paths_agree(peer: SocketAddrV4, verify: bool, stream: impl Fn(u64) -> Vec<Frame>) {
    for seed in 1..6u64 {
        let (mut fast, ra, ka) = setup_verifying(true, peer, verify);
        let (mut general, rb, kb) = setup_verifying(false, peer, verify);
        let dst = fast.dev.local;
        let (mut txa, mut txb) = (TxBatch::new(64, 2048), TxBatch::new(64, 2048));
        let mut answers = 0;
        for f in stream(seed) {
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

/// One sealed RDMA WRITE Only of `payload` at `va` under `rkey`, from `peer` to `r`'s QP.
fn write_at(
    r: &mut Responder,
    peer: SocketAddrV4,
    psn: Psn,
    va: u64,
    rkey: Rkey,
    payload: &[u8],
) -> TxBatch {
    let ep = RoceEndpoint::default();
    let tmpl = FrameTemplate::new(
        &ep,
        op::RC_RDMA_WRITE_ONLY,
        Qpn::new(QPN_BASE),
        payload.len(),
    );
    let mut buf = vec![0u8; tmpl.frame_len()];
    let reth = RethRepr {
        va,
        rkey,
        dma_len: payload.len() as u32,
    };
    tmpl.emit_write(&mut buf, psn, true, &reth, None, payload);
    let f = Frame {
        transport: buf[L2L4_LEN..].to_vec(),
        src: peer,
        corrupt_icrc: false,
    };
    let dst = r.dev.local;
    let t = seal(&f, 0, rkey, dst);
    let mut tx = TxBatch::new(8, 2048);
    r.handle(
        &Datagram {
            src: peer,
            dst,
            ip: None,
            payload: &t,
        },
        &mut tx,
    );
    tx
}

/// The AETH syndrome of the only frame in `tx` (0x00.. ACK, 0x60.. NAK).
fn syndrome(tx: &TxBatch) -> u8 {
    let frames: Vec<&[u8]> = tx.iter_payloads().map(|(_, b)| b).collect();
    assert_eq!(frames.len(), 1, "one answer");
    frames[0][BTH_LEN]
}

#[test]
fn write_mr_cache_is_emptied_by_deregistration() {
    let peer = SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 101), 10000);
    for fast in [true, false] {
        let (mut r, region, rkey) = setup(fast, peer);
        let qpn = Qpn::new(QPN_BASE);
        let psn = r.expected_psn(qpn).unwrap();
        let tx = write_at(&mut r, peer, psn, region.addr() + 64, rkey, &[7u8; 32]);
        assert_eq!(syndrome(&tx) & 0xE0, 0, "ACK");
        assert_eq!(region.load_u64(64).unwrap(), u64::from_le_bytes([7; 8]));
        // Deregistered: the next WRITE under that key is a remote access error, nothing is
        // written, and no QP keeps the region alive.
        r.deregister(rkey);
        assert_eq!(
            Arc::strong_count(&region),
            1,
            "only the test holds the region"
        );
        let tx = write_at(
            &mut r,
            peer,
            psn.next(),
            region.addr() + 128,
            rkey,
            &[9u8; 32],
        );
        assert_eq!(syndrome(&tx), 0x60 | 2, "NAK remote access error");
        assert_eq!(region.load_u64(128).unwrap(), 0, "nothing written");
        assert_eq!(r.qp_state(qpn), Some(QpState::Error));
        assert_eq!(r.qp_counters(qpn).unwrap().writes, 1);
    }
}

#[test]
fn write_mr_cache_follows_reregistration() {
    let peer = SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 101), 10000);
    for fast in [true, false] {
        let (mut r, a, ka) = setup(fast, peer);
        let qpn = Qpn::new(QPN_BASE);
        let psn = r.expected_psn(qpn).unwrap();
        assert_eq!(
            syndrome(&write_at(&mut r, peer, psn, a.addr(), ka, &[1u8; 32])) & 0xE0,
            0
        );
        // The slot is reused by another region under a new key: WRITEs under the new key land
        // there, and the old key (same slot) is refused.
        r.deregister(ka);
        let b = Arc::new(Region::anonymous(REGION, false).unwrap());
        let kb = r.register(b.clone(), Access::ALL);
        assert_eq!(mr_slot(kb), mr_slot(ka));
        assert_ne!(kb, ka);
        let psn = psn.next();
        assert_eq!(
            syndrome(&write_at(&mut r, peer, psn, b.addr() + 8, kb, &[2u8; 32])) & 0xE0,
            0
        );
        assert_eq!(b.load_u64(8).unwrap(), u64::from_le_bytes([2; 8]));
        assert_eq!(
            a.load_u64(8).unwrap(),
            u64::from_le_bytes([1; 8]),
            "the old region untouched"
        );
        // A WRITE naming the new region's address under the old key.
        let tx = write_at(&mut r, peer, psn.next(), b.addr() + 64, ka, &[3u8; 32]);
        assert_eq!(syndrome(&tx), 0x60 | 2, "NAK remote access error");
        assert_eq!(b.load_u64(64).unwrap(), 0);
        assert_eq!(a.load_u64(64).unwrap(), 0);
    }
}

#[test]
fn write_mr_cache_needs_write_access_and_the_range() {
    let peer = SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 101), 10000);
    for fast in [true, false] {
        let (mut r, a, ka) = setup(fast, peer);
        let qpn = Qpn::new(QPN_BASE);
        let psn = r.expected_psn(qpn).unwrap();
        // Cached key, then a range past the region's end under it: NAK, nothing written.
        assert_eq!(
            syndrome(&write_at(&mut r, peer, psn, a.addr(), ka, &[1u8; 32])) & 0xE0,
            0
        );
        let end = a.addr() + REGION as u64 - 16;
        let tx = write_at(&mut r, peer, psn.next(), end, ka, &[5u8; 32]);
        assert_eq!(syndrome(&tx), 0x60 | 2);
        assert_eq!(a.load_u64(REGION as u64 - 16).unwrap(), 0);
        // A region registered without write access: refused (the cache is filled only for
        // regions with it).
        let (mut r2, _a2, _k2) = setup(fast, peer);
        let ro = Arc::new(Region::anonymous(REGION, false).unwrap());
        let kro = r2.register(
            ro.clone(),
            Access {
                remote_write: false,
                remote_read: true,
                remote_atomic: true,
            },
        );
        let psn = r2.expected_psn(qpn).unwrap();
        let tx = write_at(&mut r2, peer, psn, ro.addr(), kro, &[4u8; 32]);
        assert_eq!(syndrome(&tx), 0x60 | 2);
        assert_eq!(ro.load_u64(0).unwrap(), 0);
    }
}
