use super::*;
use crate::cpu::Leveled;
use crate::wire::ib::{opcode, opcode as op, Psn, Qpn, Rkey, Syndrome};
use proptest::prelude::*;

fn ep() -> RoceEndpoint {
    RoceEndpoint {
        src_mac: MacAddr([0xb8, 0xce, 0xf6, 0xd2, 0x13, 0x26]),
        dst_mac: MacAddr([0xb8, 0xce, 0xf6, 0xd2, 0x12, 0xc7]),
        src_ip: Ipv4Addr::new(10, 0, 0, 101),
        dst_ip: Ipv4Addr::new(10, 0, 0, 51),
        src_port: 10000,
        ..RoceEndpoint::default()
    }
}

fn known_opcodes() -> Vec<u8> {
    (0..=255u8)
        .filter(|&op| opcode_info(op).is_some())
        .collect()
}

fn arb_packet() -> impl Strategy<Value = (u8, Vec<u8>, Vec<u8>, u32, u32, bool)> {
    (
        proptest::sample::select(known_opcodes()),
        proptest::collection::vec(any::<u8>(), 40),
        proptest::collection::vec(any::<u8>(), 0..40),
        0u32..1 << 24,
        0u32..1 << 24,
        any::<bool>(),
    )
}

fn bth(op: u8, qp: u32, psn: u32, ack_req: bool) -> BthRepr {
    BthRepr::rc(op, Qpn::new(qp), Psn::new(psn), ack_req)
}

#[test]
fn pad_and_lengths() {
    assert_eq!([0, 1, 2, 3, 4, 5].map(pad_len), [0, 3, 2, 1, 0, 3]);
    assert_eq!(frame_len(RETH_LEN, 8), 14 + 68);
    assert_eq!(frame_len(ATOMIC_ETH_LEN, 0), 14 + 20 + 8 + 12 + 28 + 4);
    assert_eq!(L2L4_LEN, 42);
}

#[test]
fn parse_rejections() {
    let mut t = [0u8; 12 + 16 + 8 + 4];
    t[0] = opcode::RC_RDMA_WRITE_ONLY;
    assert!(RocePacket::parse(&t).is_ok());
    assert_eq!(RocePacket::parse(&t[..15]), Err(Error::Truncated));
    assert_eq!(RocePacket::parse(&t[..12 + 15 + 4]), Err(Error::Truncated));
    t[1] = 0x01; // TVer 1
    assert_eq!(RocePacket::parse(&t), Err(Error::Malformed));
    t[1] = 0x30; // pad 3 of an 8-byte padded payload
    assert_eq!(RocePacket::parse(&t).unwrap().payload.len(), 5);
    t[0] = 0x15;
    assert_eq!(RocePacket::parse(&t), Err(Error::UnknownOpcode));
    let mut a = [0u8; 12 + 28 + 4];
    a[0] = opcode::RC_FETCH_ADD;
    assert!(RocePacket::parse(&a).is_ok());
    a[1] = 0x10; // pad on a payload-less opcode
    assert_eq!(RocePacket::parse(&a), Err(Error::Malformed));
    let mut a = [0u8; 12 + 28 + 4 + 4]; // the reference's stray 4 bytes after the AtomicETH
    a[0] = opcode::RC_FETCH_ADD;
    assert_eq!(RocePacket::parse(&a), Err(Error::Malformed));
    let mut s = [0u8; 12 + 1 + 4];
    s[0] = opcode::RC_SEND_ONLY;
    s[1] = 0x20; // pad 2 > 1-byte payload
    assert_eq!(RocePacket::parse(&s), Err(Error::Malformed));
}

#[test]
fn ack_and_atomic_ack_parse() {
    let mut t = [0u8; 12 + 4 + 8 + 4];
    t[0] = opcode::RC_ATOMIC_ACKNOWLEDGE;
    t[12] = 0x1F;
    t[13..16].copy_from_slice(&[0, 0, 7]);
    t[16..24].copy_from_slice(&42u64.to_be_bytes());
    t[24..].copy_from_slice(&0xAABBCCDDu32.to_le_bytes());
    let p = RocePacket::parse(&t).unwrap();
    assert_eq!(p.aeth.unwrap().syndrome, Syndrome::ACK_NO_CREDITS);
    assert_eq!(p.aeth.unwrap().msn, 7);
    assert_eq!(p.atomic_ack.unwrap().orig, 42);
    assert_eq!(p.icrc, 0xAABBCCDD);
    assert!(p.payload.is_empty());
}

proptest! {
    /// Emitting into two buffers at once gives the frame a single emit gives, twice.
    #[test]
    fn emit_twice_equals_emit(
        imm in proptest::option::of(any::<u32>()),
        payload in proptest::collection::vec(any::<u8>(), 0..600),
        psn in 0u32..1 << 24,
        ack in any::<bool>(),
        va in any::<u64>(),
        rkey in any::<u32>(),
    ) {
        let op = if imm.is_some() {
            opcode::RC_RDMA_WRITE_ONLY_IMM
        } else {
            opcode::RC_RDMA_WRITE_ONLY
        };
        let t = FrameTemplate::new(&ep(), op, Qpn::new(0x11), payload.len());
        let reth = RethRepr { va, rkey: Rkey(rkey), dma_len: payload.len() as u32 };
        let mut one = vec![0xAAu8; t.frame_len()];
        t.emit_write(&mut one, Psn::new(psn), ack, &reth, imm, &payload);
        let (mut a, mut b) = (vec![0x55u8; t.frame_len()], vec![0x33u8; t.frame_len() + 9]);
        let n = t.emit_write_twice(&mut a, &mut b, Psn::new(psn), ack, &reth, imm, &payload);
        prop_assert_eq!(n, t.frame_len());
        prop_assert_eq!(&a, &one);
        prop_assert_eq!(&b[..n], &one[..]);
        prop_assert!(crate::icrc::check_frame(&a));
    }
}

#[test]
fn atomic_emit_twice_equals_emit() {
    let t = FrameTemplate::new(&ep(), opcode::RC_FETCH_ADD, Qpn::new(0x11), 0);
    let atomic = AtomicEthRepr {
        va: 0x7f00_0000_0040,
        rkey: Rkey(9),
        swap_add: 12345,
        compare: 0,
    };
    let mut one = [0u8; 128];
    let n = t.emit_atomic(&mut one, Psn::new(3), true, &atomic);
    let (mut a, mut b) = ([0u8; 128], [0u8; 128]);
    assert_eq!(
        t.emit_atomic_twice(&mut a, &mut b, Psn::new(3), true, &atomic),
        n
    );
    assert_eq!((&a[..n], &b[..n]), (&one[..n], &one[..n]));
}

#[test]
fn endpoint_reversed() {
    let e = ep();
    let r = e.reversed();
    assert_eq!((r.src_mac, r.dst_mac), (e.dst_mac, e.src_mac));
    assert_eq!((r.src_ip, r.dst_ip), (e.dst_ip, e.src_ip));
    assert_eq!((r.src_port, r.dst_port), (4791, 10000));
    assert_eq!(r.reversed(), e);
}

#[test]
#[should_panic]
fn template_rejects_payload_on_ack() {
    FrameTemplate::new(&ep(), opcode::RC_ACKNOWLEDGE, Qpn::new(1), 4);
}

proptest! {
    #[test]
    fn packet_round_trip((op, ext, payload, qp, psn, ack) in arb_packet(), icrc in any::<u32>()) {
        let info = opcode_info(op).unwrap();
        let payload: &[u8] = if info.has_payload { &payload } else { &[] };
        let mut t = vec![0u8; 12];
        BthRepr { pad_count: pad_len(payload.len()) as u8, ..bth(op, qp, psn, ack) }
            .emit(&mut Bth::new_unchecked(&mut t[..]));
        t.extend_from_slice(&ext[..info.ext_len()]);
        t.extend_from_slice(payload);
        t.resize(t.len() + pad_len(payload.len()), 0);
        t.extend_from_slice(&icrc.to_le_bytes());
        // DETH's reserved byte is zeroed on emit; everything else is reproduced exactly.
        if info.deth { t[12 + 4] = 0; }
        let p = RocePacket::parse(&t).unwrap();
        prop_assert_eq!(p.payload, payload);
        prop_assert_eq!(p.icrc, icrc);
        prop_assert_eq!(p.ext_len(), info.ext_len());
        let mut out = vec![0u8; p.buffer_len()];
        prop_assert_eq!(p.emit(&mut out), t.len());
        prop_assert_eq!(&out, &t);
        prop_assert_eq!(RocePacket::parse(&out).unwrap(), p);
    }

    #[test]
    fn padded_tail_reg_is_the_bit_serial_crc(
        imm_op in any::<bool>(), imm in any::<u32>(), whole in any::<bool>(),
        len in 0usize..=PADDED_PAYLOAD, fill in proptest::collection::vec(any::<u8>(), PADDED_PAYLOAD)) {
        // Half the cases whole 16-byte blocks (the folded path), the rest any length.
        let len = if whole { len / 16 * 16 } else { len };
        let region = RdmaRegion { va: 0x1_0000_0000, len: 1 << 20, rkey: Rkey(7) };
        let op = if imm_op { op::RC_RDMA_WRITE_ONLY_IMM } else { op::RC_RDMA_WRITE_ONLY };
        let t = RdmaTemplate::new(&ep(), op, Qpn::new(5), region, len).unwrap();
        let mut block = [0u8; PADDED_PAYLOAD];
        block[..len].copy_from_slice(&fill[..len]);
        let imm = imm_op.then_some(imm);
        // The register from zero over the immediate (big-endian), the payload and its pad, one
        // bit at a time from the definition (reflected IEEE).
        let mut msg = imm.map_or(vec![], |v| v.to_be_bytes().to_vec());
        msg.extend_from_slice(&block[..len + pad_len(len)]);
        let mut reg = 0u32;
        for &b in &msg {
            reg ^= b as u32;
            for _ in 0..8 {
                reg = if reg & 1 != 0 { (reg >> 1) ^ 0xEDB8_8320 } else { reg >> 1 };
            }
        }
        prop_assert_eq!(t.padded_tail_reg(imm, &block), reg);
        prop_assert_eq!(t.tail_reg(imm, &block[..len]), reg);
    }

    /// `tail_reg` of the shapes it folds without tables (whole 16-byte blocks, and whole
    /// blocks behind 8 bytes: an Append batch and its trailer), and of the lengths around them,
    /// is the bit-serial CRC of the payload.
    #[test]
    fn tail_reg_of_block_shapes_is_the_bit_serial_crc(
        blocks in 1usize..24, shape in 0usize..4, imm in proptest::option::of(any::<u32>()),
        fill in proptest::collection::vec(any::<u8>(), 24 * 16 + 12)) {
        let len = blocks * 16 + [0, 8, 4, 12][shape];
        let region = RdmaRegion { va: 0x1_0000_0000, len: 1 << 20, rkey: Rkey(7) };
        let op = if imm.is_some() { op::RC_RDMA_WRITE_ONLY_IMM } else { op::RC_RDMA_WRITE_ONLY };
        let t = RdmaTemplate::new(&ep(), op, Qpn::new(5), region, len).unwrap();
        let mut msg = imm.map_or(vec![], |v| v.to_be_bytes().to_vec());
        msg.extend_from_slice(&fill[..len]);
        msg.resize(msg.len() + pad_len(len), 0);
        let mut reg = 0u32;
        for &b in &msg {
            reg ^= b as u32;
            for _ in 0..8 {
                reg = if reg & 1 != 0 { (reg >> 1) ^ 0xEDB8_8320 } else { reg >> 1 };
            }
        }
        prop_assert_eq!(t.tail_reg(imm, &fill[..len]), reg);
    }

    /// The keyed runs build their frames under [`crate::cpu::with_v3`]: its v3 copy writes
    /// the same bytes as the baseline's (a padded WRITE with or without Immediate, and its
    /// retransmission copy; a FETCH_ADD), with the same tail registers.
    #[test]
    fn frames_are_the_same_at_every_cpu_level(
        len in 1usize..=PADDED_PAYLOAD, fill in proptest::collection::vec(any::<u8>(), PADDED_PAYLOAD),
        imm in proptest::option::of(any::<u32>()), psn in 0u32..(1 << 24), ack in any::<bool>(),
        offset in 0u64..(1 << 20), delta in any::<u64>()) {
        struct Emit<'a> {
            write: &'a RdmaTemplate,
            atomic: &'a RdmaTemplate,
            block: &'a [u8; PADDED_PAYLOAD],
            imm: Option<u32>,
            psn: Psn,
            ack: bool,
            va: u64,
            delta: u64,
        }
        impl Leveled for Emit<'_> {
            type Output = (u32, u32, [u8; 3 * RDMA_PADDED_ROOM]);
            #[inline(always)]
            fn run(self) -> Self::Output {
                let mut out = [0u8; 3 * RDMA_PADDED_ROOM];
                let (frame, rest) = out.split_at_mut(RDMA_PADDED_ROOM);
                let (copy, atom) = rest.split_at_mut(RDMA_PADDED_ROOM);
                let tail = self.write.padded_tail_reg(self.imm, self.block);
                self.write.emit_write_padded(
                    frame, Some(copy), self.psn, self.ack, self.va, self.imm, self.block, tail);
                let atail = self.atomic.atomic_tail_reg(self.delta, 0);
                self.atomic.emit_atomic(atom, None, self.psn, self.ack, self.va, self.delta, 0, atail);
                (tail, atail, out)
            }
        }
        let region = RdmaRegion { va: 0x7f00_1000_0000, len: 1 << 21, rkey: Rkey(0x95) };
        let op = if imm.is_some() { op::RC_RDMA_WRITE_ONLY_IMM } else { op::RC_RDMA_WRITE_ONLY };
        let write = RdmaTemplate::new(&ep(), op, Qpn::new(5), region, len).unwrap();
        let atomic = RdmaTemplate::new(&ep(), op::RC_FETCH_ADD, Qpn::new(5), region, 0).unwrap();
        let mut block = [0u8; PADDED_PAYLOAD];
        block[..len].copy_from_slice(&fill[..len]);
        let emit = || Emit {
            write: &write, atomic: &atomic, block: &block, imm, psn: Psn::new(psn), ack,
            va: region.va + offset, delta,
        };
        let (v3, base) = (crate::cpu::with_v3(emit()), emit().run());
        prop_assert_eq!(v3.0, base.0);
        prop_assert_eq!(v3.1, base.1);
        prop_assert_eq!(&v3.2[..], &base.2[..]);
        prop_assert!(icrc::check_frame(&base.2[..write.frame_len()]));
    }

    #[test]
    fn rdma_template_matches_the_direct_way(
        which in 0usize..4, qp in 0u32..(1 << 24), rkey in any::<u32>(),
        payload in proptest::collection::vec(any::<u8>(), 0..1100),
        psn in 0u32..(1 << 24), ack in any::<bool>(), va in any::<u64>(), imm in any::<u32>(),
        swap in any::<u64>(), compare in any::<u64>(), ident in any::<u16>(),
        garbage in any::<u8>(), va_base_shift in 0u8..3, region_len in 1u64..(1 << 33)) {
        let e = RoceEndpoint { ident, ..ep() };
        let op = [op::RC_RDMA_WRITE_ONLY, op::RC_RDMA_WRITE_ONLY_IMM, op::RC_FETCH_ADD,
                  op::RC_COMPARE_SWAP][which];
        let atomic = which >= 2;
        let payload: &[u8] = if atomic { &[] } else { &payload };
        let region = RdmaRegion { va: va & !0xFFFF_FFFF ^ (va_base_shift as u64) << 32, len: region_len, rkey: Rkey(rkey) };
        let t = RdmaTemplate::new(&e, op, Qpn::new(qp), region, payload.len()).unwrap();
        let direct = FrameTemplate::new(&e, op, Qpn::new(qp), payload.len());
        prop_assert_eq!(t.frame_len(), direct.frame_len());
        let len = t.frame_len().max(RDMA_HEAD_MAX);
        let (mut a, mut a2, mut b) = (vec![garbage; len], vec![!garbage; len], vec![0u8; len]);
        let psn = Psn::new(psn);
        let n = if atomic {
            let r = t.atomic_tail_reg(swap, compare);
            let atom = AtomicEthRepr { va, rkey: Rkey(rkey), swap_add: swap, compare };
            direct.emit_atomic(&mut b, psn, ack, &atom);
            t.emit_atomic(&mut a, Some(&mut a2), psn, ack, va, swap, compare, r)
        } else {
            let imm = (which == 1).then_some(imm);
            let r = t.tail_reg(imm, payload);
            let reth = RethRepr { va, rkey: Rkey(rkey), dma_len: payload.len() as u32 };
            direct.emit_write(&mut b, psn, ack, &reth, imm, payload);
            t.emit_write(&mut a, Some(&mut a2), psn, ack, va, imm, payload, r)
        };
        prop_assert_eq!(n, direct.frame_len());
        prop_assert_eq!(&a[..n], &b[..n]);
        prop_assert_eq!(&a2[..n], &b[..n]);
        // The address and PSN word's share of the ICRC from the tables (CPUs without a
        // carry-less multiply) instead of by multiplication (the CPU's, where it has one).
        let tables = t.clone().with_clmul(crate::crc::fold::Clmul::portable());
        let mut c = vec![garbage; len];
        if atomic {
            tables.emit_atomic(&mut c, None, psn, ack, va, swap, compare, t.atomic_tail_reg(swap, compare));
        } else {
            let imm = (which == 1).then_some(imm);
            tables.emit_write(&mut c, None, psn, ack, va, imm, payload, t.tail_reg(imm, payload));
        }
        prop_assert_eq!(&c[..n], &b[..n]);
        if !atomic && payload.len() <= PADDED_PAYLOAD {
            let mut block = [0u8; PADDED_PAYLOAD];
            block[..payload.len()].copy_from_slice(payload);
            let imm = (which == 1).then_some(imm);
            let r = t.padded_tail_reg(imm, &block);
            prop_assert_eq!(r, t.tail_reg(imm, payload));
            let (mut p, mut p2) = (vec![garbage; RDMA_PADDED_ROOM], vec![!garbage; RDMA_PADDED_ROOM]);
            let m = t.emit_write_padded(&mut p, Some(&mut p2), psn, ack, va, imm, &block, r);
            prop_assert_eq!(m, n);
            prop_assert_eq!(&p[..n], &b[..n]);
            prop_assert_eq!(&p2[..n], &b[..n]);
        }
        // The ICRC by a bit-serial CRC that shares no code with either fast path.
        let f = parse_frame(&a[..n]).unwrap();
        let mut masked = vec![0xFFu8; 8];
        masked.extend_from_slice(&a[ethernet::HEADER_LEN..n - ICRC_LEN]);
        for i in [1, 8, 10, 11] {
            masked[8 + i] = 0xFF;
        }
        masked[8 + 20 + 6] = 0xFF;
        masked[8 + 20 + 7] = 0xFF;
        masked[8 + 28 + 4] = 0xFF;
        let mut reg = 0xFFFF_FFFFu32;
        for &byte in &masked {
            reg ^= byte as u32;
            for _ in 0..8 {
                reg = if reg & 1 != 0 { (reg >> 1) ^ 0xEDB8_8320 } else { reg >> 1 };
            }
        }
        prop_assert_eq!(!reg, u32::from_le_bytes(a[n - 4..n].try_into().unwrap()));
        prop_assert_eq!(f.roce.bth.psn, psn);
    }

    #[test]
    fn template_matches_build_frame((op, ext, payload, qp, psn, ack) in arb_packet(),
                                    ident in any::<u16>(), ttl in any::<u8>(), tos in any::<u8>(),
                                    garbage in any::<u8>()) {
        let info = opcode_info(op).unwrap();
        let payload: &[u8] = if info.has_payload { &payload } else { &[] };
        let ext = &ext[..info.ext_len()];
        let e = RoceEndpoint { ident, ttl, tos, ..ep() };
        let tpl = FrameTemplate::new(&e, op, Qpn::new(qp), payload.len());
        prop_assert_eq!(tpl.opcode(), op);
        prop_assert_eq!(tpl.dest_qp(), Qpn::new(qp));
        let mut a = vec![garbage; tpl.frame_len() + 3];
        let n = tpl.emit(&mut a, Psn::new(psn), ack, |b| {
            assert_eq!(b.len(), ext.len() + payload.len());
            b[..ext.len()].copy_from_slice(ext);
            b[ext.len()..].copy_from_slice(payload);
        });
        let mut b = vec![0u8; n];
        let m = build_frame(&e, &bth(op, qp, psn, ack), ext, payload, &mut b);
        prop_assert_eq!(n, m);
        prop_assert_eq!(&a[..n], &b[..]);
        prop_assert!(icrc::check_frame(&b));
        let f = parse_frame(&b).unwrap();
        prop_assert_eq!(f.roce.payload, payload);
        prop_assert_eq!(f.roce.bth.psn, Psn::new(psn));
        prop_assert_eq!(f.roce.bth.ack_req, ack);
        prop_assert_eq!(f.ip.ident, ident);
        prop_assert!(f.ip.dont_frag);
        prop_assert_eq!((f.udp.src_port, f.udp.dst_port), (10000, 4791));
        prop_assert_eq!(f.transport, &b[L2L4_LEN..]);
        // A real UDP checksum is honoured when present.
        let mut u = b.clone();
        UdpPacket::new_unchecked(&mut u[34..]).fill_checksum(e.src_ip, e.dst_ip);
        prop_assert!(parse_frame(&u).is_ok());
        u[n - 1] ^= 0x80;
        prop_assert_eq!(parse_frame(&u).unwrap_err(), Error::Malformed);
        // Corrupting any byte outside the masked fields breaks the ICRC.
        let mut c = b.clone();
        c[n - 5] ^= 0x01;
        prop_assert!(!icrc::check_frame(&c));
    }

    #[test]
    fn emit_reth_and_atomic(va in any::<u64>(), rkey in any::<u32>(), payload in proptest::collection::vec(any::<u8>(), 0..70),
                            sa in any::<u64>(), psn in any::<u32>()) {
        let reth = RethRepr { va, rkey: Rkey(rkey), dma_len: payload.len() as u32 };
        let tpl = FrameTemplate::new(&ep(), opcode::RC_RDMA_WRITE_ONLY, Qpn::new(0xABC), payload.len());
        let mut a = vec![0u8; tpl.frame_len()];
        tpl.emit_reth(&mut a, Psn::new(psn), false, &reth, &payload);
        let f = parse_frame(&a).unwrap();
        prop_assert_eq!(f.roce.reth, Some(reth));
        prop_assert_eq!(f.roce.payload, &payload[..]);
        prop_assert_eq!(&a[tpl.payload_offset()..tpl.payload_offset() + payload.len()], &payload[..]);
        prop_assert!(icrc::check_frame(&a));

        let at = AtomicEthRepr { va, rkey: Rkey(rkey), swap_add: sa, compare: 0 };
        let tpl = FrameTemplate::new(&ep(), opcode::RC_FETCH_ADD, Qpn::new(0xABC), 0);
        let mut a = vec![0u8; tpl.frame_len()];
        prop_assert_eq!(tpl.emit_atomic(&mut a, Psn::new(psn), true, &at), 14 + 20 + 8 + 12 + 28 + 4);
        let f = parse_frame(&a).unwrap();
        prop_assert_eq!(f.roce.atomic, Some(at));
        prop_assert!(f.roce.bth.ack_req);
        prop_assert!(icrc::check_frame(&a));
    }

    #[test]
    fn parse_never_panics(buf in proptest::collection::vec(any::<u8>(), 0..96)) {
        let _ = RocePacket::parse(&buf);
        let _ = parse_frame(&buf);
    }

    #[test]
    fn parse_never_panics_on_near_packets((op, ext, payload, qp, psn, ack) in arb_packet(),
                                          cut in 0usize..120, flip in 0usize..120, x in any::<u8>()) {
        let mut f = vec![0u8; frame_len(ext.len(), payload.len())];
        let n = build_frame(&ep(), &bth(op, qp, psn, ack), &ext, &payload, &mut f);
        f[flip % n] ^= x;
        let f = &f[..cut.min(n)];
        let _ = parse_frame(f);
        let _ = RocePacket::parse(f.get(L2L4_LEN..).unwrap_or(&[]));
        let _ = icrc::check_frame(f);
    }
}

#[test]
fn roce_frame_view_reads_and_reseals_own_frames() {
    let t = FrameTemplate::new(&ep(), opcode::RC_RDMA_WRITE_ONLY, Qpn::new(0x11), 8);
    let mut slot = [0u8; 256];
    let n = t.emit(&mut slot, Psn::new(77), false, |ext| ext.fill(0x5a));
    let mut f = RoceFrame::new_checked(&mut slot[..]).expect("a whole frame");
    assert_eq!((f.len(), f.psn(), f.ack_req()), (n, Psn::new(77), false));
    assert_eq!(f.opcode(), opcode::RC_RDMA_WRITE_ONLY);
    assert!(icrc::check_frame(f.bytes()));
    f.set_ack_req();
    let mut want = [0u8; 256];
    let m = t.emit(&mut want, Psn::new(77), true, |ext| ext.fill(0x5a));
    assert_eq!(
        f.bytes(),
        &want[..m],
        "the same bytes as a frame built with AckReq"
    );
    let g = f.bytes().to_vec();
    for cut in 0..g.len() {
        assert!(RoceFrame::new_checked(&g[..cut]).is_err(), "cut {cut}");
    }
    let mut bad = g.clone();
    bad[ethernet::HEADER_LEN] = 0x46;
    assert!(RoceFrame::new_checked(&bad[..]).is_err(), "IPv4 options");
}

#[test]
fn typed_write_emitter_matches_the_field_layout() {
    let reth = RethRepr {
        va: 0x7f00_0000_1234,
        rkey: Rkey(0x95),
        dma_len: 8,
    };
    for (op, imm) in [
        (opcode::RC_RDMA_WRITE_ONLY, None),
        (opcode::RC_RDMA_WRITE_ONLY_IMM, Some(0xdead_beef)),
    ] {
        let t = FrameTemplate::new(&ep(), op, Qpn::new(0x11), 8);
        let mut a = [0u8; 256];
        let n = t.emit_write(
            &mut a,
            Psn::new(5),
            true,
            &reth,
            imm,
            &[1, 2, 3, 4, 5, 6, 7, 8],
        );
        let p = parse_frame(&a[..n]).unwrap();
        assert_eq!(p.roce.reth, Some(reth));
        assert_eq!(p.roce.imm, imm);
        assert_eq!(p.roce.payload, &[1, 2, 3, 4, 5, 6, 7, 8]);
        assert!(icrc::check_frame(&a[..n]));
    }
}
