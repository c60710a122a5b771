//! The 64-byte metadata record (and the reference's 16-byte one): parse never panics, and a
//! record that parses re-emits to bytes that parse to the same record.
#![no_main]

use dta_proto::wire::metarec::{MetaRecord, ReferenceMetaRecord, REFERENCE_META_LEN};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(m) = MetaRecord::parse(data) {
        let b = m.to_bytes();
        let m2 = MetaRecord::parse(&b).expect("an emitted record parses");
        assert_eq!(m, m2);
        assert_eq!(m2.to_bytes(), b);
        // The store description it implies must be usable without panicking.
        let _ = m.to_store_meta("fuzz".into());
    }
    if let Ok(r) = ReferenceMetaRecord::parse(data) {
        let mut b = [0u8; REFERENCE_META_LEN];
        r.emit(&mut b);
        assert_eq!(ReferenceMetaRecord::parse(&b).ok(), Some(r));
    }
});
