//! ZERO mode: what a pull collector reads back from an agent's region (`proto::zero`).
//!
//! Arbitrary bytes as a control area: decoding never panics, and a control area that decodes
//! re-encodes to the same header and descriptors, every block inside the region and clear of
//! the others. The same bytes as a metric block (entries from the first byte): verifying never
//! panics, and a snapshot it accepts re-seals to exactly the bytes read. The same bytes as an
//! agent's region record (REP private data): a record that decodes re-encodes exactly.
#![no_main]

use dta_proto::zero::{
    block_len, decode_control, encode_block, verify_block, RegionRecord, RECORD_LEN,
};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(r) = RegionRecord::decode(data) {
        assert_eq!(&r.encode()[..], &data[..RECORD_LEN]);
    }
    if let Ok((h, descs)) = decode_control(data) {
        assert_eq!(&h.encode()[..], &data[..64]);
        for (i, d) in descs.iter().enumerate() {
            let at = 64 + 64 * i;
            assert_eq!(
                &d.encode().expect("a decoded name fits")[..],
                &data[at..at + 64]
            );
            assert!(d.offset + d.len() as u64 <= h.region_len);
            assert!(d.offset >= h.control_len() as u64);
        }
    }
    let Some((&n, rest)) = data.split_first() else {
        return;
    };
    let entries = u32::from(n % 16) + 1;
    if let Ok(s) = verify_block(rest, entries) {
        let values: Vec<u64> = s.iter().collect();
        assert_eq!(values.len(), entries as usize);
        let mut out = vec![0u8; block_len(entries)];
        encode_block(s.seq, s.sampled_ns, &values, &mut out);
        assert_eq!(&out[..], &rest[..out.len()]);
    }
});
