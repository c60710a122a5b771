//! DTA NACKs (reference 2-byte, extended 12-byte, sketch-column 16-byte): parse never panics; whatever parses is
//! valid (`check`) and re-emits to exactly the input bytes.
#![no_main]

use dta_proto::wire::nack::NackRepr;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(n) = NackRepr::parse(data) else {
        return;
    };
    n.check().expect("a parsed NACK is valid");
    let mut out = [0u8; 16];
    let len = n.emit(&mut out);
    assert_eq!(len, n.buffer_len());
    assert_eq!(NackRepr::parse(&out[..len]).ok(), Some(n));
    match n {
        // Reserved flag bits are ignored on parse and cleared on emit.
        NackRepr::Reference { .. } => assert_eq!(out[0], data[0]),
        NackRepr::Extended { .. } | NackRepr::SketchColumn { .. } => {
            assert_eq!(&out[..len], data)
        }
    }
});
