//! Hostile input: every malformed, out-of-range or spoofed packet is counted and dropped or
//! answered with the protocol's error, never panics, and never writes memory.

use std::net::{Ipv4Addr, SocketAddrV4};

use dta_collector::config::{StoreConfig, StoreKindConfig};
use dta_collector::rnic::responder::QpState;
use dta_proto::batch::{Datagram, IpMeta, TxBatch};
use dta_proto::layout::AppendFormat;
use dta_proto::meta::StoreKind;
use dta_proto::wire::ethernet::MacAddr;
use dta_proto::wire::ib::{opcode as op, AethRepr, BthRepr, NakCode, Psn, Qpn, Syndrome};
use dta_proto::wire::report::{Primitive, Profile, Report};
use dta_proto::wire::roce::{build_frame, parse_frame, RoceEndpoint, L2L4_LEN};
use dta_proto::{Key, Value};
use dta_tests::harness::{
    extended_header, keywrite_store, Harness, HarnessOptions, COLLECTOR, TRANSLATOR,
};
use proptest::prelude::*;

fn stores() -> Vec<StoreConfig> {
    vec![
        keywrite_store(1024, 8, 1),
        StoreConfig {
            name: "ap".into(),
            port: None,
            cm_allow: None,
            kind: StoreKindConfig::new(StoreKind::Append {
                lists: 2,
                first_list: 0,
                capacity: 64,
                entry_size: 4,
                batch: 4,
                format: AppendFormat::Sequenced,
                list_stride: 0,
            }),
        },
    ]
}

fn memory_is_zero(h: &Harness) -> bool {
    h.stores.iter().all(|s| {
        let mut b = vec![0u8; s.region.len()];
        s.region.read(0, &mut b).unwrap();
        b.iter().all(|&x| x == 0)
    })
}

#[test]
fn hostile_reports_are_counted_and_write_nothing() {
    let mut h = Harness::new(
        stores(),
        HarnessOptions {
            max_redundancy: 4,
            ..HarnessOptions::default()
        },
    );
    let kw = |n: u8| Report {
        header: extended_header(1),
        primitive: Primitive::KeyWrite {
            redundancy: n,
            key: Key::new(b"k").unwrap(),
            value: Value::new(b"vv").unwrap(),
        },
    };
    let good = {
        let mut b = vec![0u8; 128];
        let n = kw(1).emit(Profile::Extended, &mut b).unwrap();
        b.truncate(n);
        b
    };
    // Truncated at every length.
    for len in 0..good.len() {
        h.send_raw(&[&good[..len]]);
    }
    // Unknown opcodes in both profiles.
    let mut bad_op = good.clone();
    bad_op[1] = 0x09;
    h.send_raw(&[&bad_op, &[0x07, 0x00, 0x00, 0x01], &[0x00, 0x00]]);
    // Unsupported extended version.
    let mut bad_ver = good.clone();
    bad_ver[0] = 0xD7;
    h.send_raw(&[&bad_ver]);
    // Redundancy 0 and above the maximum; then within it but not the store's N (1).
    for n in [0u8, 5, 9, 255, 2, 4] {
        let mut b = vec![0u8; 128];
        let len = kw(n).emit(Profile::Extended, &mut b).unwrap();
        h.send_raw(&[&b[..len]]);
    }
    // Unknown list IDs.
    let ap = |list: u32| Report {
        header: extended_header(1),
        primitive: Primitive::Append {
            list,
            value: Value::new(b"abcd").unwrap(),
        },
    };
    h.send(&[ap(2), ap(99), ap(u32::MAX)], Profile::Extended);
    // Value wider than the Key-Write slot (8-byte slots hold 4-byte values).
    h.send(
        &[Report {
            header: extended_header(1),
            primitive: Primitive::KeyWrite {
                redundancy: 1,
                key: Key::new(b"k").unwrap(),
                value: Value::new(&[1; 5]).unwrap(),
            },
        }],
        Profile::Extended,
    );
    // Oversized datagram.
    h.send_raw(&[&[0xD1; 9000]]);
    h.advance(50_000_000);
    h.flush();

    let c = *h.pipeline.counters();
    // Length 0 cannot name a profile; lengths 1..8 of an extended header are truncated.
    assert!(c.drop_truncated >= good.len() as u64 - 2, "{c:?}");
    assert_eq!(c.drop_unknown_opcode, 3, "{c:?}");
    assert_eq!(c.drop_bad_version, 1, "{c:?}");
    assert_eq!(c.drop_bad_redundancy, 4, "{c:?}");
    assert_eq!(c.drop_redundancy_mismatch, 2, "{c:?}");
    assert_eq!(c.drop_unknown_list, 3, "{c:?}");
    assert_eq!(c.drop_value_too_long, 1, "{c:?}");
    assert_eq!(c.translated, 0);
    assert_eq!(c.frames, 0, "no RDMA frame for a rejected report");
    assert_eq!(
        c.rx_datagrams,
        c.translated + c.dropped(),
        "every report is accounted for: {c:?}"
    );
    assert!(memory_is_zero(&h));
}

/// Hand-crafted RoCEv2 frames towards the harness's Key-Write QP.
struct Crafter {
    ep: RoceEndpoint,
    qpn: Qpn,
    psn: Psn,
    rkey: u32,
    base: u64,
}

impl Crafter {
    fn new(h: &Harness) -> Crafter {
        let s = h.store("kw");
        Crafter {
            ep: RoceEndpoint {
                src_mac: MacAddr([2, 0, 0, 0, 0, 1]),
                dst_mac: MacAddr([2, 0, 0, 0, 0, 0x51]),
                src_ip: *TRANSLATOR.ip(),
                dst_ip: *COLLECTOR.ip(),
                src_port: TRANSLATOR.port(),
                dst_port: 4791,
                ttl: 64,
                tos: 0,
                ident: 0,
            },
            qpn: Qpn::new(s.meta.qps[0].qpn),
            psn: Psn::new(s.meta.qps[0].psn),
            rkey: s.meta.rkey,
            base: s.meta.addr,
        }
    }

    fn write(&self, psn: Psn, rkey: u32, va: u64, data: &[u8], ack_req: bool) -> Vec<u8> {
        let bth = BthRepr {
            opcode: op::RC_RDMA_WRITE_ONLY,
            solicited: false,
            mig_req: true,
            pad_count: 0,
            tver: 0,
            pkey: 0xffff,
            fecn: false,
            becn: false,
            dest_qp: self.qpn,
            ack_req,
            psn,
        };
        let mut reth = [0u8; 16];
        reth[0..8].copy_from_slice(&va.to_be_bytes());
        reth[8..12].copy_from_slice(&rkey.to_be_bytes());
        reth[12..16].copy_from_slice(&(data.len() as u32).to_be_bytes());
        let mut out = vec![0u8; 2048];
        let n = build_frame(&self.ep, &bth, &reth, data, &mut out);
        out.truncate(n);
        out
    }

    fn fetch_add(&self, psn: Psn, va: u64) -> Vec<u8> {
        let bth = BthRepr {
            opcode: op::RC_FETCH_ADD,
            solicited: false,
            mig_req: true,
            pad_count: 0,
            tver: 0,
            pkey: 0xffff,
            fecn: false,
            becn: false,
            dest_qp: self.qpn,
            ack_req: true,
            psn,
        };
        let mut a = [0u8; 28];
        a[0..8].copy_from_slice(&va.to_be_bytes());
        a[8..12].copy_from_slice(&self.rkey.to_be_bytes());
        a[12..20].copy_from_slice(&1u64.to_be_bytes());
        let mut out = vec![0u8; 2048];
        let n = build_frame(&self.ep, &bth, &a, &[], &mut out);
        out.truncate(n);
        out
    }
}

fn aeth_of(frames: &[Vec<u8>]) -> Vec<(u8, Psn, AethRepr)> {
    frames
        .iter()
        .map(|f| {
            let p = parse_frame(f).expect("responses are well formed");
            (
                p.roce.bth.opcode,
                p.roce.bth.psn,
                p.roce.aeth.expect("responses carry an AETH"),
            )
        })
        .collect()
}

#[test]
fn hostile_roce_frames_are_counted_nacked_or_dropped() {
    let mut h = Harness::new(stores(), HarnessOptions::default());
    let c = Crafter::new(&h);
    let good_va = c.base + 8;

    // Bad ICRC: silently dropped, PSN not consumed.
    let mut f = c.write(c.psn, c.rkey, good_va, b"evil", true);
    let n = f.len();
    f[n - 1] ^= 0x55;
    h.deliver_to_rnic(&f);
    assert!(
        h.take_rnic_responses().is_empty(),
        "no answer to a bad ICRC"
    );
    assert_eq!(h.rnic.counters().bad_icrc, 1);

    // Spoofed source address: dropped, counted.
    let mut spoof = Crafter::new(&h);
    spoof.ep.src_ip = Ipv4Addr::new(10, 9, 9, 9);
    h.deliver_to_rnic(&spoof.write(c.psn, c.rkey, good_va, b"evil", true));
    assert!(h.take_rnic_responses().is_empty());
    assert_eq!(h.rnic.counters().addr_mismatch, 1);

    // Unknown QPN.
    let mut other = Crafter::new(&h);
    other.qpn = Qpn::new(0x7777);
    h.deliver_to_rnic(&other.write(c.psn, c.rkey, good_va, b"evil", true));
    assert_eq!(h.rnic.counters().unknown_qpn, 1);

    // Out-of-order PSN: one NAK "PSN sequence error" naming the expected PSN, then silence.
    h.deliver_to_rnic(&c.write(c.psn.add(5), c.rkey, good_va, b"evil", true));
    h.deliver_to_rnic(&c.write(c.psn.add(6), c.rkey, good_va, b"evil", true));
    let r = aeth_of(&h.take_rnic_responses());
    assert_eq!(r.len(), 1, "exactly one NAK for a gap");
    assert_eq!(r[0].0, op::RC_ACKNOWLEDGE);
    assert_eq!(r[0].1, c.psn, "the NAK names the expected PSN");
    assert_eq!(r[0].2.syndrome, Syndrome::Nak(NakCode::PsnSequenceError));
    let k = h.rnic.counters();
    assert_eq!((k.out_of_seq_request, k.out_of_seq_dropped), (1, 1));

    // A good write at the expected PSN is executed and ACKed.
    h.deliver_to_rnic(&c.write(c.psn, c.rkey, good_va, b"good", true));
    let r = aeth_of(&h.take_rnic_responses());
    assert_eq!(r.len(), 1);
    assert!(matches!(r[0].2.syndrome, Syndrome::Ack { .. }));
    // A duplicate with other data is re-ACKed and not executed.
    h.deliver_to_rnic(&c.write(c.psn, c.rkey, good_va, b"dupe", true));
    let r = aeth_of(&h.take_rnic_responses());
    assert_eq!(r[0].1, c.psn);
    assert_eq!(h.rnic.counters().duplicate_request, 1);
    let mut m = [0u8; 4];
    h.region("kw").read(8, &mut m).unwrap();
    assert_eq!(&m, b"good");

    // Misaligned atomic: NAK invalid request (and the QP enters the error state, as in rxe).
    let psn = c.psn.add(1);
    h.deliver_to_rnic(&c.fetch_add(psn, c.base + 4));
    let r = aeth_of(&h.take_rnic_responses());
    assert_eq!(r[0].2.syndrome, Syndrome::Nak(NakCode::InvalidRequest));
    assert_eq!(h.rnic.qp_state(c.qpn), Some(QpState::Error));
    // Everything after that is dropped and counted.
    h.deliver_to_rnic(&c.write(psn.add(1), c.rkey, good_va, b"late", true));
    assert_eq!(h.rnic.counters().qp_error_drops, 1);

    // The rest of the memory is untouched.
    let mut all = vec![0u8; h.region("kw").len()];
    h.region("kw").read(0, &mut all).unwrap();
    assert!(all
        .iter()
        .enumerate()
        .all(|(i, &b)| (8..12).contains(&i) || b == 0));
}

#[test]
fn wrong_rkey_and_out_of_bounds_get_remote_access_error() {
    for case in 0..3 {
        let mut h = Harness::new(stores(), HarnessOptions::default());
        let c = Crafter::new(&h);
        let len = h.region("kw").len() as u64;
        let f = match case {
            0 => c.write(c.psn, c.rkey ^ 0x100, c.base, b"evil", true),
            1 => c.write(c.psn, c.rkey, c.base + len - 2, b"evil", true),
            _ => c.write(c.psn, c.rkey, c.base.wrapping_sub(4), b"evil", true),
        };
        h.deliver_to_rnic(&f);
        let r = aeth_of(&h.take_rnic_responses());
        assert_eq!(r.len(), 1, "case {case}");
        assert_eq!(
            r[0].2.syndrome,
            Syndrome::Nak(NakCode::RemoteAccessError),
            "case {case}"
        );
        let k = h.rnic.counters();
        assert_eq!(k.rkey_violation + k.out_of_bounds, 1, "case {case}: {k:?}");
        assert!(memory_is_zero(&h), "case {case}");
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Arbitrary datagrams into the translator never panic, never emit a frame for garbage
    /// that does not parse, and every datagram is accounted for.
    #[test]
    fn arbitrary_reports_never_panic(payloads in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..80), 1..40)) {
        let mut h = Harness::new(stores(), HarnessOptions::default());
        let refs: Vec<&[u8]> = payloads.iter().map(|p| p.as_slice()).collect();
        h.send_raw(&refs);
        h.flush();
        let c = *h.pipeline.counters();
        prop_assert_eq!(c.rx_datagrams, payloads.len() as u64);
        prop_assert_eq!(c.rx_datagrams, c.translated + c.dropped() + h.pipeline.pending_reports());
    }

    /// Arbitrary bytes into the responder never panic and never write memory.
    #[test]
    fn arbitrary_roce_never_panics_or_writes(frames in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..200), 1..40)) {
        let mut h = Harness::new(stores(), HarnessOptions::default());
        let mut tx = TxBatch::new(64, 2048);
        for f in &frames {
            let d = Datagram { src: TRANSLATOR, dst: COLLECTOR, ip: Some(IpMeta { ident: 0, dont_frag: true, ttl: 64, tos: 0 }), payload: f };
            h.rnic.handle(&d, &mut tx);
            let d = Datagram { src: SocketAddrV4::new(Ipv4Addr::new(1, 2, 3, 4), 9), dst: COLLECTOR, ip: None, payload: f };
            h.rnic.handle(&d, &mut tx);
            tx.clear();
        }
        prop_assert!(memory_is_zero(&h));
        let _ = L2L4_LEN;
    }
}
