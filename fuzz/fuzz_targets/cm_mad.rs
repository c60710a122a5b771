//! CM MADs: `CmMessage::parse` on raw MADs and `parse_cm` on whole RoCEv2 transport payloads
//! never panic; a message that parses re-emits to a MAD that parses to the same message.
#![no_main]

use dta_proto::wire::cm::parse_cm;
use dta_proto::wire::mad::{CmMessage, MAD_LEN};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok((hdr, msg)) = CmMessage::parse(data) {
        let mut out = [0u8; MAD_LEN];
        msg.emit(&hdr, &mut out);
        let (hdr2, msg2) = CmMessage::parse(&out).expect("an emitted MAD parses");
        assert_eq!(msg, msg2);
        assert_eq!(hdr.tid, hdr2.tid);
        assert_eq!(hdr.attr_id, hdr2.attr_id);
        let mut out2 = [0u8; MAD_LEN];
        msg2.emit(&hdr2, &mut out2);
        assert_eq!(out, out2);
    }
    let _ = parse_cm(data);
});
