//! `dta pcap-check`: the project's own RoCEv2 checker for captures (tshark decodes RoCEv2
//! but does not verify the ICRC).
//!
//! Every frame of a classic pcap file is classified:
//! - **ok**: an IPv4/UDP frame to port 4791 (or another RoCEv2 port given, e.g. a software
//!   RNIC on an ephemeral port) that `dta_proto::wire::roce::parse_frame` parses
//!   (IPv4 checksum, UDP checksum when nonzero, BTH and extension headers) and whose ICRC
//!   `dta_proto::icrc::check_frame` confirms;
//! - **bad ICRC**: parses, but the ICRC is wrong;
//! - **malformed**: addressed to a RoCEv2 port but does not parse as RoCEv2;
//! - **not RoCE**: anything else (reports, NACKs, ARP, ...).
//!
//! A capture passes when it has no bad ICRC and no malformed RoCEv2 frame.

use std::collections::BTreeMap;
use std::path::Path;

use dta_proto::consts::ROCEV2_PORT;
use dta_proto::icrc;
use dta_proto::wire::roce::parse_frame;

/// How many failing frame numbers are kept for the report.
pub const MAX_LISTED: usize = 10;

/// What [`check_frames`] found.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct PcapCheck {
    /// UDP destination ports that mark RoCEv2 frames.
    pub roce_ports: Vec<u16>,
    /// Frames read.
    pub frames: u64,
    /// RoCEv2 frames with a correct ICRC.
    pub ok: u64,
    /// RoCEv2 frames with a wrong ICRC.
    pub bad_icrc: u64,
    /// Frames to UDP 4791 that do not parse as RoCEv2.
    pub malformed: u64,
    /// Everything else.
    pub not_roce: u64,
    /// Good RoCEv2 frames by BTH opcode.
    pub opcodes: BTreeMap<u8, u64>,
    /// The first failing frames: (1-based frame number, reason).
    pub failures: Vec<(u64, String)>,
}

impl Default for PcapCheck {
    fn default() -> Self {
        PcapCheck::with_ports(&[ROCEV2_PORT])
    }
}

impl PcapCheck {
    /// A checker that takes UDP datagrams to any of `roce_ports` as RoCEv2.
    pub fn with_ports(roce_ports: &[u16]) -> PcapCheck {
        PcapCheck {
            roce_ports: roce_ports.to_vec(),
            frames: 0,
            ok: 0,
            bad_icrc: 0,
            malformed: 0,
            not_roce: 0,
            opcodes: BTreeMap::new(),
            failures: Vec::new(),
        }
    }

    /// True if no frame failed.
    pub fn passed(&self) -> bool {
        self.bad_icrc == 0 && self.malformed == 0
    }

    /// Counts one frame.
    pub fn add(&mut self, frame: &[u8]) {
        self.frames += 1;
        if !udp_dst_port(frame).is_some_and(|p| self.roce_ports.contains(&p)) {
            self.not_roce += 1;
            return;
        }
        match parse_frame(frame) {
            Ok(p) => {
                if icrc::check_frame(frame) {
                    self.ok += 1;
                    *self.opcodes.entry(p.roce.bth.opcode).or_default() += 1;
                } else {
                    self.bad_icrc += 1;
                    self.fail(format!(
                        "bad ICRC (opcode {:#04x}, PSN {})",
                        p.roce.bth.opcode,
                        p.roce.bth.psn.value()
                    ));
                }
            }
            Err(e) => {
                self.malformed += 1;
                self.fail(format!("to a RoCEv2 port but not RoCEv2: {e}"));
            }
        }
    }

    fn fail(&mut self, why: String) {
        if self.failures.len() < MAX_LISTED {
            self.failures.push((self.frames, why));
        }
    }

    /// A human-readable summary, one line per count.
    pub fn summary(&self) -> String {
        let mut s = format!(
            "frames {}\nRoCEv2 ICRC ok {}\nbad ICRC {}\nmalformed RoCEv2 {}\nnot RoCE {}\n",
            self.frames, self.ok, self.bad_icrc, self.malformed, self.not_roce
        );
        for (op, n) in &self.opcodes {
            s.push_str(&format!("  opcode {op:#04x}: {n}\n"));
        }
        for (i, why) in &self.failures {
            s.push_str(&format!("  frame {i}: {why}\n"));
        }
        s.push_str(if self.passed() { "PASS\n" } else { "FAIL\n" });
        s
    }
}

/// The UDP destination port of an Ethernet/IPv4/UDP frame, read without judging checksums.
fn udp_dst_port(frame: &[u8]) -> Option<u16> {
    if frame.len() < 14 + 20 + 8 || frame[12..14] != [0x08, 0x00] {
        return None;
    }
    let ip = &frame[14..];
    let ihl = (ip[0] & 0x0f) as usize * 4;
    if ip[0] >> 4 != 4 || ihl < 20 || ip[9] != 17 || ip.len() < ihl + 8 {
        return None;
    }
    Some(u16::from_be_bytes([ip[ihl + 2], ip[ihl + 3]]))
}

/// Checks every frame yielded by `frames` (RoCEv2 on UDP 4791).
pub fn check_frames<'a>(frames: impl IntoIterator<Item = &'a [u8]>) -> PcapCheck {
    check_frames_on(frames, &[ROCEV2_PORT])
}

/// Checks every frame yielded by `frames`, taking UDP `roce_ports` as RoCEv2.
pub fn check_frames_on<'a>(
    frames: impl IntoIterator<Item = &'a [u8]>,
    roce_ports: &[u16],
) -> PcapCheck {
    let mut c = PcapCheck::with_ports(roce_ports);
    for f in frames {
        c.add(f);
    }
    c
}

/// Reads and checks a pcap file (Ethernet link type), taking UDP `roce_ports` as RoCEv2.
pub fn check_file(path: &Path, roce_ports: &[u16]) -> Result<PcapCheck, String> {
    let trace =
        dta_io::pcap::PcapTrace::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(check_frames_on(
        (0..trace.len()).map(|i| trace.frame(i)),
        roce_ports,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use dta_proto::wire::ib::{Psn, Qpn};
    use dta_proto::wire::roce::{FrameTemplate, RoceEndpoint};

    fn frames() -> Vec<Vec<u8>> {
        let ep = RoceEndpoint::default();
        let t = FrameTemplate::new(
            &ep,
            dta_proto::wire::ib::opcode::RC_RDMA_WRITE_ONLY,
            Qpn::new(0x11),
            8,
        );
        (0..4)
            .map(|i| {
                let mut buf = vec![0u8; 256];
                let n = t.emit(&mut buf, Psn::new(i), false, |ext| ext.fill(i as u8));
                buf.truncate(n);
                buf
            })
            .collect()
    }

    #[test]
    fn good_frames_pass_and_every_flipped_byte_fails() {
        let good = frames();
        let c = check_frames(good.iter().map(|f| &f[..]));
        assert_eq!((c.frames, c.ok, c.bad_icrc, c.malformed), (4, 4, 0, 0));
        assert!(c.passed(), "{}", c.summary());
        // A byte flipped anywhere past the Ethernet header (IPv4 ident, UDP ports, BTH,
        // RETH, payload, ICRC) is caught: by a checksum (malformed) or by the ICRC.
        let f = &good[1];
        for at in 14..f.len() {
            if at == 14 + 20 + 8 + 4 {
                // BTH byte 4 (FECN, BECN, reserved) is masked out of the ICRC by definition.
                continue;
            }
            let mut bad = f.clone();
            bad[at] ^= 0x01;
            let c = check_frames([&bad[..]]);
            // TOS/TTL are masked out of the ICRC but covered by the IPv4 checksum; a flipped
            // destination-port bit makes it not RoCE at all.
            if udp_dst_port(&bad) != Some(ROCEV2_PORT) {
                assert_eq!(c.not_roce, 1, "byte {at}");
                continue;
            }
            assert!(
                !c.passed(),
                "byte {at} flipped went unnoticed: {}",
                c.summary()
            );
        }
    }

    #[test]
    fn non_roce_frames_are_counted_apart() {
        let mut f = frames()[0].clone();
        f[14 + 20 + 2..14 + 20 + 4].copy_from_slice(&40040u16.to_be_bytes());
        let arp = [0u8; 60];
        let c = check_frames([&f[..], &arp[..], &[][..]]);
        assert_eq!((c.not_roce, c.ok), (3, 0));
        assert!(c.passed());
    }
}
