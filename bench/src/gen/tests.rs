use dta_proto::wire::dta::BaseVariant;
use dta_proto::wire::report::{Primitive, ReportFormat};

use super::*;
use dta_proto::wire::report::{parse_report, MAX_EMIT_LEN};

fn roundtrip(sc: &Scenario, n: usize) -> [u64; 5] {
    sc.validate().unwrap();
    let mut g = Generator::new(sc);
    let cfg = sc.parse_config();
    let mut buf = [0u8; MAX_EMIT_LEN];
    for _ in 0..n {
        let r = g.next_report();
        let len = r.emit(sc.wire_profile(), &mut buf).expect("emits");
        let back = parse_report(&buf[..len], &cfg).expect("parses");
        assert_eq!(back.primitive, r.primitive);
    }
    g.per_kind
}

#[test]
fn every_profile_round_trips() {
    for profile in [
        ReportFormat::Extended,
        ReportFormat::Reference(BaseVariant::A),
        ReportFormat::Reference(BaseVariant::B),
    ] {
        let sc = Scenario {
            profile,
            mix: Mix::parse("all").unwrap(),
            ..Scenario::default()
        };
        let k = roundtrip(&sc, 5000);
        assert!(k.iter().all(|&c| c > 700), "{profile}: {k:?}");
    }
}

#[test]
fn mix_parses_and_rejects() {
    let m = Mix::parse("kw=3,pc=1").unwrap();
    assert_eq!((m.keywrite, m.postcard, m.loss), (3, 1, 0));
    assert!(Mix::parse("bogus").is_err());
    assert!(Mix::parse("kw=0").is_err());
}

#[test]
fn postcards_walk_paths_and_ids_come_from_the_set() {
    let sc = Scenario {
        mix: Mix::only(Kind::Postcard),
        switch_ids: vec![100, 200, 300],
        concurrent: 1,
        ..Scenario::default()
    };
    let mut g = Generator::new(&sc);
    for h in 0..5u8 {
        let r = g.next_report();
        let Primitive::Postcard { hop, value, .. } = r.primitive else {
            panic!("postcard expected");
        };
        assert_eq!(hop, h);
        assert!([100, 200, 300].contains(&value));
    }
}

#[test]
fn keys_repeat_heavy_tailed() {
    let sc = Scenario {
        mix: Mix::only(Kind::KeyWrite),
        concurrent: 64,
        ..Scenario::default()
    };
    let mut g = Generator::new(&sc);
    for _ in 0..50_000 {
        g.next_report();
    }
    // Far fewer flows than reports: elephants repeat their keys.
    assert!(g.flows_started < 25_000, "{}", g.flows_started);
    assert!(g.flows_started > 64);
}
