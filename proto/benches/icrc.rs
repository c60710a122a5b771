//! ICRC and frame-emission costs on the translator's hot path.
//!
//! `cargo bench -p dta-proto --bench icrc -- --warm-up-time 1 --measurement-time 3`

use std::hint::black_box;
use std::net::Ipv4Addr;

use criterion::{criterion_group, criterion_main, Criterion};
use dta_proto::icrc::{self, ReconstructedHeader};
use dta_proto::wire::ethernet::MacAddr;
use dta_proto::wire::ib::{opcode, Psn, Qpn, RethRepr, Rkey};
use dta_proto::wire::roce::{FrameTemplate, RoceEndpoint, L2L4_LEN};

fn endpoint() -> RoceEndpoint {
    RoceEndpoint {
        src_mac: MacAddr([0xb8, 0xce, 0xf6, 0xd2, 0x13, 0x26]),
        dst_mac: MacAddr([0xb8, 0xce, 0xf6, 0xd2, 0x12, 0xc7]),
        src_ip: Ipv4Addr::new(10, 0, 0, 101),
        dst_ip: Ipv4Addr::new(10, 0, 0, 51),
        src_port: 10000,
        ..RoceEndpoint::default()
    }
}

/// The textbook one-table, one-byte-per-step CRC-32: the baseline the slicing engine and the
/// precomputed prefix are measured against.
struct Bytewise([u32; 256]);

impl Bytewise {
    fn new() -> Self {
        let mut t = [0u32; 256];
        for (i, e) in t.iter_mut().enumerate() {
            let mut c = i as u32;
            for _ in 0..8 {
                c = if c & 1 != 0 {
                    (c >> 1) ^ 0xEDB8_8320
                } else {
                    c >> 1
                };
            }
            *e = c;
        }
        Bytewise(t)
    }

    fn checksum(&self, data: &[u8]) -> u32 {
        !data.iter().fold(0xFFFF_FFFF, |c, &b| {
            (c >> 8) ^ self.0[((c ^ b as u32) & 0xFF) as usize]
        })
    }
}

fn benches(c: &mut Criterion) {
    let ep = endpoint();
    let reth = RethRepr {
        va: 0x7f00_0000_0568,
        rkey: Rkey(0x1234),
        dma_len: 8,
    };
    let key_write = FrameTemplate::new(&ep, opcode::RC_RDMA_WRITE_ONLY, Qpn::new(0xABC), 8);
    let mut frame = [0u8; 256];
    let n = key_write.emit_reth(&mut frame, Psn::new(0xE6FB20), false, &reth, &[7; 8]);
    let ip: [u8; 20] = frame[14..34].try_into().unwrap();
    let udp: [u8; 8] = frame[34..42].try_into().unwrap();
    let transport = frame[L2L4_LEN..n - 4].to_vec();

    let mut g = c.benchmark_group("icrc");
    g.bench_function("icrc_ipv4 key-write (64 B hashed)", |b| {
        b.iter(|| icrc::icrc_ipv4(black_box(&ip), black_box(&udp), black_box(&transport)))
    });

    // The same 64 bytes the ICRC hashes after the folded 8-byte LRH.
    let mut masked = Vec::new();
    masked.extend_from_slice(&ip);
    masked.extend_from_slice(&udp);
    masked.extend_from_slice(&transport);
    assert_eq!(masked.len(), 64);
    let bytewise = Bytewise::new();
    g.bench_function("naive bytewise-table crc32 (64 B)", |b| {
        b.iter(|| bytewise.checksum(black_box(&masked)))
    });

    let mut psn = Psn::new(0);
    let mut out = [0u8; 256];
    g.bench_function("template emit_reth key-write (8 B payload)", |b| {
        b.iter(|| {
            psn = psn.next();
            key_write.emit_reth(
                black_box(&mut out),
                psn,
                false,
                black_box(&reth),
                black_box(&[7; 8]),
            )
        })
    });

    let append = FrameTemplate::new(&ep, opcode::RC_RDMA_WRITE_ONLY, Qpn::new(0xABC), 64);
    let batch = [0x5Au8; 64];
    let reth64 = RethRepr {
        dma_len: 64,
        ..reth
    };
    g.bench_function("template emit_reth append batch-16 (64 B payload)", |b| {
        b.iter(|| {
            psn = psn.next();
            append.emit_reth(
                black_box(&mut out),
                psn,
                false,
                black_box(&reth64),
                black_box(&batch),
            )
        })
    });

    let h = ReconstructedHeader {
        src_ip: ep.src_ip,
        dst_ip: ep.dst_ip,
        src_port: ep.src_port,
        dst_port: ep.dst_port,
    };
    let ok = frame[L2L4_LEN..n].to_vec();
    assert_eq!(icrc::check_reconstructed(&h, &ok), icrc::IcrcVerdict::Ok);
    g.bench_function("check_reconstructed ident 0 (fast path)", |b| {
        b.iter(|| icrc::check_reconstructed(black_box(&h), black_box(&ok)))
    });
    let ep2 = RoceEndpoint {
        ident: 0x2c75,
        ..ep
    };
    let t2 = FrameTemplate::new(&ep2, opcode::RC_RDMA_WRITE_ONLY, Qpn::new(0xABC), 8);
    let n2 = t2.emit_reth(&mut frame, Psn::new(1), false, &reth, &[7; 8]);
    let solved = frame[L2L4_LEN..n2].to_vec();
    assert_eq!(
        icrc::check_reconstructed(&h, &solved),
        icrc::IcrcVerdict::OkSolvedIdent(0x2c75)
    );
    g.bench_function("check_reconstructed ident solved", |b| {
        b.iter(|| icrc::check_reconstructed(black_box(&h), black_box(&solved)))
    });
    g.finish();
}

criterion_group!(icrc_benches, benches);
criterion_main!(icrc_benches);
