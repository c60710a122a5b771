//! Golden RoCEv2 frames: the worked example of dta-reference.md §4.5 (a DTA Key-Write as the
//! reference translator would send it, with a correct ICRC), built through every path we have.

use std::net::Ipv4Addr;

use dta_proto::icrc::{self, check_reconstructed, IcrcVerdict, ReconstructedHeader};
use dta_proto::wire::ethernet::MacAddr;
use dta_proto::wire::ib::{opcode, BthRepr, Psn, Qpn, RethRepr, Rkey, Syndrome, RETH_LEN};
use dta_proto::wire::roce::{
    build_frame, parse_frame, FrameTemplate, RoceEndpoint, RocePacket, L2L4_LEN,
};

/// The 68-byte IPv4 packet of §4.5, verbatim.
const EXAMPLE_IPV4: &str = "45000044 2c754000 4011f99c 0a000065 0a000033 | 271012b7 00300000 | \
     0a40ffff 00000abc 00e6fb20 | 00007f0000000568 00001234 00000008 | 79b8f899 00000001 | \
     6fb20c95";

fn hex(s: &str) -> Vec<u8> {
    let digits: Vec<u8> = s.bytes().filter(|c| c.is_ascii_hexdigit()).collect();
    digits
        .chunks(2)
        .map(|p| u8::from_str_radix(std::str::from_utf8(p).unwrap(), 16).unwrap())
        .collect()
}

fn endpoint() -> RoceEndpoint {
    RoceEndpoint {
        src_mac: "b8:ce:f6:d2:13:26".parse().unwrap(),
        dst_mac: "b8:ce:f6:d2:12:c7".parse().unwrap(),
        src_ip: Ipv4Addr::new(10, 0, 0, 101),
        dst_ip: Ipv4Addr::new(10, 0, 0, 51),
        src_port: 10000,
        dst_port: 4791,
        ttl: 64,
        tos: 0,
        ident: 0x2c75,
    }
}

fn expected_frame() -> Vec<u8> {
    let mut f = Vec::new();
    f.extend_from_slice(&endpoint().dst_mac.0);
    f.extend_from_slice(&endpoint().src_mac.0);
    f.extend_from_slice(&[0x08, 0x00]);
    f.extend_from_slice(&hex(EXAMPLE_IPV4));
    assert_eq!(f.len(), 14 + 68);
    f
}

const RETH: RethRepr = RethRepr {
    va: 0x7f00_0000_0568,
    rkey: Rkey(0x1234),
    dma_len: 8,
};
const PAYLOAD: [u8; 8] = [0x79, 0xb8, 0xf8, 0x99, 0x00, 0x00, 0x00, 0x01];
const PSN: u32 = 0xE6FB20;

#[test]
fn example_icrc_value() {
    let f = expected_frame();
    let ip: [u8; 20] = f[14..34].try_into().unwrap();
    let udp: [u8; 8] = f[34..42].try_into().unwrap();
    let icrc = icrc::icrc_ipv4(&ip, &udp, &f[42..f.len() - 4]);
    assert_eq!(icrc.to_le_bytes(), [0x6f, 0xb2, 0x0c, 0x95]);
    assert_eq!(icrc, 0x950c_b26f);
    assert!(icrc::check_frame(&f));
}

#[test]
fn build_frame_reproduces_example() {
    let bth = BthRepr {
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
        psn: Psn::new(PSN),
    };
    let mut out = [0u8; 128];
    let n = build_frame(&endpoint(), &bth, &RETH.to_bytes(), &PAYLOAD, &mut out);
    assert_eq!(&out[..n], &expected_frame()[..]);
}

#[test]
fn template_reproduces_example() {
    let tpl = FrameTemplate::new(
        &endpoint(),
        opcode::RC_RDMA_WRITE_ONLY,
        Qpn::new(0xABC),
        PAYLOAD.len(),
    );
    assert_eq!(tpl.frame_len(), 82);
    assert_eq!(tpl.ext_len(), RETH_LEN);
    assert_eq!(tpl.payload_offset(), 14 + 20 + 8 + 12 + 16);
    // Reuse a dirty buffer, as the translator does.
    let mut out = [0xA5u8; 128];
    for _ in 0..2 {
        let n = tpl.emit_reth(&mut out, Psn::new(PSN), false, &RETH, &PAYLOAD);
        assert_eq!(&out[..n], &expected_frame()[..]);
    }
    let n = tpl.emit(&mut out, Psn::new(PSN), false, |b| {
        b[..16].copy_from_slice(&RETH.to_bytes());
        b[16..].copy_from_slice(&PAYLOAD);
    });
    assert_eq!(&out[..n], &expected_frame()[..]);
    // The next PSN changes the ICRC and still verifies.
    let n = tpl.emit_reth(&mut out, Psn::new(PSN).next(), true, &RETH, &PAYLOAD);
    assert_ne!(&out[n - 4..n], &expected_frame()[78..]);
    assert!(icrc::check_frame(&out[..n]));
}

#[test]
fn parse_example() {
    let f = expected_frame();
    let p = parse_frame(&f).unwrap();
    assert_eq!(p.eth.src, endpoint().src_mac);
    assert_eq!(p.eth.dst, endpoint().dst_mac);
    assert_eq!(p.ip.ident, 0x2c75);
    assert_eq!(p.ip.ttl, 64);
    assert!(p.ip.dont_frag);
    assert_eq!((p.udp.src_port, p.udp.dst_port), (10000, 4791));
    assert_eq!(p.roce.bth.opcode, opcode::RC_RDMA_WRITE_ONLY);
    assert!(p.roce.bth.mig_req);
    assert_eq!(p.roce.bth.dest_qp, Qpn::new(0xABC));
    assert_eq!(p.roce.bth.psn, Psn::new(PSN));
    assert_eq!(p.roce.reth, Some(RETH));
    assert_eq!(p.roce.payload, &PAYLOAD);
    assert_eq!(p.roce.icrc, 0x950c_b26f);
    assert_eq!(RocePacket::parse(&f[L2L4_LEN..]).unwrap(), p.roce);
    assert_eq!(p.transport, &f[L2L4_LEN..]);
}

#[test]
fn every_single_bit_flip_fails_check_frame_unless_masked() {
    let f = expected_frame();
    for byte in 14..f.len() {
        for bit in 0..8 {
            let mut c = f.clone();
            c[byte] ^= 1 << bit;
            let ip_off = byte - 14;
            // TOS, TTL, IP checksum, UDP checksum and BTH byte 4 are outside the ICRC; the IP
            // checksum is not checked by check_frame either.
            let masked = matches!(ip_off, 1 | 8 | 10 | 11 | 26 | 27 | 32);
            // Flipping length, IHL or protocol bits can stop the frame parsing at all: still false.
            assert_eq!(icrc::check_frame(&c), masked, "byte {byte} bit {bit}");
        }
    }
}

#[test]
fn reconstructed_check_of_example() {
    let f = expected_frame();
    let h = ReconstructedHeader {
        src_ip: Ipv4Addr::new(10, 0, 0, 101),
        dst_ip: Ipv4Addr::new(10, 0, 0, 51),
        src_port: 10000,
        dst_port: 4791,
    };
    // The example carries the reference's ident 0x2c75, which the solver recovers.
    assert_eq!(
        check_reconstructed(&h, &f[L2L4_LEN..]),
        IcrcVerdict::OkSolvedIdent(0x2c75)
    );
    // The same write from an ident-0 endpoint takes the fast path.
    let ep = RoceEndpoint {
        ident: 0,
        ..endpoint()
    };
    let tpl = FrameTemplate::new(&ep, opcode::RC_RDMA_WRITE_ONLY, Qpn::new(0xABC), 8);
    let mut out = [0u8; 128];
    let n = tpl.emit_reth(&mut out, Psn::new(PSN), false, &RETH, &PAYLOAD);
    assert_eq!(check_reconstructed(&h, &out[L2L4_LEN..n]), IcrcVerdict::Ok);
    let mut bad = out[L2L4_LEN..n].to_vec();
    bad[30] ^= 0x10;
    assert_eq!(check_reconstructed(&h, &bad), IcrcVerdict::Bad);
}

#[test]
fn rxe_ack_frame_parses() {
    // An RC ACK as rxe sends it: AETH syndrome 0x1F (ACK, "invalid credits"), MSN 3.
    let ep = endpoint().reversed();
    let bth = BthRepr {
        opcode: opcode::RC_ACKNOWLEDGE,
        solicited: false,
        mig_req: false,
        pad_count: 0,
        tver: 0,
        pkey: 0xFFFF,
        fecn: false,
        becn: false,
        dest_qp: Qpn::new(1337),
        ack_req: false,
        psn: Psn::new(PSN),
    };
    let mut out = [0u8; 128];
    let n = build_frame(&ep, &bth, &[0x1F, 0, 0, 3], &[], &mut out);
    assert_eq!(n, 14 + 20 + 8 + 12 + 4 + 4);
    assert!(icrc::check_frame(&out[..n]));
    let p = parse_frame(&out[..n]).unwrap();
    let aeth = p.roce.aeth.unwrap();
    assert_eq!(aeth.syndrome, Syndrome::Ack { credits: 31 });
    assert_eq!(aeth.msn, 3);
    assert_eq!(p.eth.dst, MacAddr([0xb8, 0xce, 0xf6, 0xd2, 0x13, 0x26]));
}
