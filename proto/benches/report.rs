//! Cost of parsing and emitting one DTA report per profile: the translator's per-report budget.

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use dta_proto::wire::dta::BaseVariant;
use dta_proto::wire::nack::NackRepr;
use dta_proto::wire::report::{parse_report, ParseConfig, Profile, MAX_EMIT_LEN};
use std::hint::black_box;

fn hex(s: &str) -> Vec<u8> {
    let s: String = s.chars().filter(|c| !c.is_whitespace()).collect();
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

fn bench(c: &mut Criterion) {
    let cases = [
        (
            "reference-b/key-write",
            hex("01 00 00 04 00000001 00000001"),
            BaseVariant::B,
        ),
        (
            "reference-a/append",
            hex("02 00 00000003 11223344"),
            BaseVariant::A,
        ),
        (
            "extended/key-write-13B-key-20B-value",
            hex(
                "d1 01 a0 00 0000002a 02 0d 14 00 0a000001 0a000002 11 1f90 0050 \
                 00000001 00000002 00000003 00000004 00000005",
            ),
            BaseVariant::B,
        ),
        (
            "extended/postcard",
            hex("d1 04 10 00 ffffffff 02 05 0d 00 0000beef 0a000001 0a000002 06 1f90 0050"),
            BaseVariant::B,
        ),
    ];
    let mut g = c.benchmark_group("parse_report");
    g.throughput(Throughput::Elements(1));
    for (name, bytes, variant) in &cases {
        let cfg = ParseConfig {
            reference_variant: *variant,
            ..ParseConfig::default()
        };
        g.bench_function(*name, |b| b.iter(|| parse_report(black_box(bytes), &cfg)));
    }
    g.finish();

    let mut g = c.benchmark_group("emit_report");
    g.throughput(Throughput::Elements(1));
    for (name, bytes, variant) in &cases {
        let cfg = ParseConfig {
            reference_variant: *variant,
            ..ParseConfig::default()
        };
        let r = parse_report(bytes, &cfg).unwrap();
        let profile: Profile = r.header.profile;
        let mut out = [0u8; MAX_EMIT_LEN];
        g.bench_function(*name, |b| b.iter(|| black_box(&r).emit(profile, &mut out)));
    }
    g.finish();

    let nack = hex("d1 80 0000 01020304 00000003");
    c.bench_function("nack_parse/extended", |b| {
        b.iter(|| NackRepr::parse(black_box(&nack)))
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
