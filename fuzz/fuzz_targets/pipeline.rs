//! The translator pipeline fed arbitrary datagrams (raw bytes, and well-formed reports in both
//! profiles with fuzz-chosen fields, from several reporters), interleaved with time steps, with
//! frames flowing to the software RNIC and its ACKs/NAKs back (the in-memory harness).
//!
//! After every step the accounting identity holds: `rx_datagrams = translated + dropped +
//! pending`. At the end (after a flush) nothing is pending and every datagram was counted.
#![no_main]

use std::net::{Ipv4Addr, SocketAddrV4};

use dta_collector::config::{StoreConfig, StoreKindConfig};
use dta_fuzz::Reader;
use dta_proto::hash::HashProfile;
use dta_proto::layout::AppendFormat;
use dta_proto::wire::dta::BaseVariant;
use dta_proto::wire::report::{
    ParseConfig, Primitive, Priority, Profile, Report, ReportHeader, MAX_EMIT_LEN,
};
use dta_proto::{Key, Value};
use dta_tests::harness::{Harness, HarnessOptions};
use libfuzzer_sys::fuzz_target;

fn stores() -> Vec<StoreConfig> {
    let s = |name: &str, kind| StoreConfig {
        name: name.into(),
        port: None,
        kind,
    };
    vec![
        s(
            "kw",
            StoreKindConfig::KeyWrite {
                slots: 64,
                slot_size: 8,
                hash: HashProfile::Independent,
            },
        ),
        s(
            "ki",
            StoreKindConfig::KeyIncrement {
                slots: 64,
                hash: HashProfile::Independent,
                epoch_secs: 0,
            },
        ),
        s(
            "ap",
            StoreKindConfig::Append {
                lists: 2,
                first_list: 0,
                capacity: 16,
                entry_size: 4,
                batch: 4,
                format: AppendFormat::Sequenced,
            },
        ),
        s(
            "pc",
            StoreKindConfig::Postcard {
                chunks: 16,
                hops: 5,
                hash: HashProfile::Independent,
                redundancy: 1,
                values: vec![],
            },
        ),
    ]
}

fn report(r: &mut Reader<'_>) -> (Report, Profile) {
    let sel = r.u8();
    let profile = [Profile::Extended, Profile::ReferenceB, Profile::ReferenceA][sel as usize % 3];
    let header = ReportHeader {
        profile,
        immediate: r.bool(),
        retransmittable: r.bool(),
        seq: Some(r.u32() % 64),
        priority: [Priority::Low, Priority::Medium, Priority::High][r.u8() as usize % 3],
    };
    let key_len = 1 + r.u8() as usize % 16;
    let key = Key::new(r.bytes(key_len)).unwrap_or_else(|| Key::new(b"k").expect("key"));
    let vlen = 1 + r.u8() as usize % 8;
    let value = Value::new(r.bytes(vlen)).unwrap_or_else(|| Value::new(b"v").expect("value"));
    let primitive = match (sel >> 2) % 4 {
        0 => Primitive::KeyWrite {
            redundancy: r.u8() % 6,
            key,
            value,
        },
        1 => Primitive::KeyIncrement {
            redundancy: r.u8() % 6,
            key,
            delta: r.u64(),
        },
        2 => Primitive::Append {
            list: r.u32() % 4,
            value,
        },
        _ => Primitive::Postcard {
            flow: key,
            hop: r.u8() % 8,
            path_len: r.u8() % 8,
            value: r.u32(),
        },
    };
    (Report { header, primitive }, profile)
}

fuzz_target!(|data: &[u8]| {
    let mut r = Reader::new(data);
    let setup = r.u8();
    let mut h = Harness::new(
        stores(),
        HarnessOptions {
            parse: ParseConfig {
                reference_variant: if setup & 1 != 0 {
                    BaseVariant::A
                } else {
                    BaseVariant::B
                },
                ..ParseConfig::default()
            },
            postcard_flush_ns: if setup & 2 != 0 { 1_000_000 } else { 0 },
            ..HarnessOptions::default()
        },
    );
    h.imp.loss = if setup & 4 != 0 { 0.05 } else { 0.0 };
    let mut sent = 0u64;
    let mut buf = [0u8; MAX_EMIT_LEN + 8];
    let mut steps = 0;
    while !r.is_empty() && steps < 200 {
        steps += 1;
        let op = r.u8();
        let from = SocketAddrV4::new(Ipv4Addr::new(10, 0, 1, op >> 5), 40000);
        match op % 4 {
            0 | 1 => {
                let (rep, profile) = report(&mut r);
                let Ok(n) = rep.emit(profile, &mut buf) else {
                    continue;
                };
                h.send_raw_from(from, &[&buf[..n]]);
                sent += 1;
            }
            2 => {
                let raw = r.chunk().to_vec();
                h.send_raw_from(from, &[&raw]);
                sent += 1;
            }
            _ => h.advance(r.u16() as u64 * 1000),
        }
        let c = *h.pipeline.counters();
        assert_eq!(c.rx_datagrams, sent);
        assert_eq!(
            c.rx_datagrams,
            c.translated + c.dropped() + h.pipeline.pending_reports(),
            "{c:?}"
        );
    }
    h.flush();
    let c = *h.pipeline.counters();
    assert_eq!(c.rx_datagrams, sent);
    assert_eq!(h.pipeline.pending_reports(), 0, "a flush leaves nothing pending");
    assert_eq!(c.rx_datagrams, c.translated + c.dropped(), "{c:?}");
});
