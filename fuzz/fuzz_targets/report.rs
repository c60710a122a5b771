//! DTA reports, both profiles: `parse_report` under every `ParseConfig`, and for every report
//! that parses, emit → parse is the identity and emitting twice gives the same bytes. The
//! translator's lanes (`parse_append_fast`, `parse_postcard_fast`) give exactly what
//! `parse_report` gives wherever they answer.
#![no_main]

use dta_proto::wire::dta::BaseVariant;
use dta_proto::wire::report::{
    parse_append_fast, parse_postcard_fast, parse_report, ParseConfig, Primitive, Priority, Report,
    MAX_EMIT_LEN,
};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let mut out = [0u8; MAX_EMIT_LEN + 64];
    let mut again = [0u8; MAX_EMIT_LEN + 64];
    for variant in [BaseVariant::A, BaseVariant::B] {
        for (accept_reference, accept_extended) in [(true, true), (true, false), (false, true)] {
            for reference_priority in [Priority::Low, Priority::Medium, Priority::High] {
                let cfg = ParseConfig {
                    reference_variant: variant,
                    accept_reference,
                    accept_extended,
                    reference_priority,
                };
                let parsed = parse_report(data, &cfg);
                if let Some((header, list, value)) = parse_append_fast(data, &cfg) {
                    let primitive = Primitive::Append { list, value };
                    assert_eq!(parsed, Ok(Report { header, primitive }), "append lane");
                }
                if let Some((header, p)) = parse_postcard_fast(data, &cfg) {
                    let primitive = p.primitive();
                    assert_eq!(parsed, Ok(Report { header, primitive }), "postcard lane");
                }
                let Ok(r) = parsed else {
                    continue;
                };
                let profile = r.header.profile;
                let n = r
                    .emit(profile, &mut out)
                    .unwrap_or_else(|e| panic!("{r:?} parsed but does not emit: {e:?}"));
                assert_eq!(r.buffer_len(profile).ok(), Some(n), "{r:?}");
                let r2 = parse_report(&out[..n], &cfg)
                    .unwrap_or_else(|e| panic!("{r:?} emitted {:02x?}, reparse {e:?}", &out[..n]));
                assert_eq!(r, r2, "round trip of {:02x?}", &out[..n]);
                let n2 = r2.emit(profile, &mut again).expect("emits again");
                assert_eq!(&out[..n], &again[..n2]);
            }
        }
    }
});
