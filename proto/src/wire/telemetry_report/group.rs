//! The datagram: the v2.0 Telemetry Report Group Header (or the v1.0 report header), the walk
//! over its individual reports, and datagram emission.

use super::header::{version_of, GroupHeader, IndividualHeader, V1Header, V1Word0};
use super::individual::{
    parse_v1, parse_v2_individual, InType, IndividualReport, IndividualRepr, RepType,
};
use super::metadata::MdFormat;
use super::{
    ReportError, GROUP_HEADER_LEN, INDIVIDUAL_HEADER_LEN, INT_MAIN_LEN, V1_HEADER_LEN, VERSION_1,
    VERSION_2,
};
use crate::wire::{Error, Result};

/// A telemetry report datagram, checked as far as its headers go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TelemetryReport<'a> {
    /// 1 or 2.
    pub version: u8,
    /// Hardware ID within the node.
    pub hw_id: u8,
    /// Sequence number (22 bits in v2.0, 32 in v1.0).
    pub seq_no: u32,
    /// Node (switch) ID.
    pub node_id: u32,
    body: &'a [u8],
}

impl<'a> TelemetryReport<'a> {
    /// Reads the group header (v2.0) or the report header (v1.0) of a UDP payload.
    pub fn parse(b: &'a [u8]) -> core::result::Result<TelemetryReport<'a>, ReportError> {
        match version_of(b)? {
            VERSION_2 => {
                let g = GroupHeader::new_checked(b)?;
                let (hw_id, seq_no, node_id) = (g.hw_id(), g.seq_no(), g.node_id());
                let body = g.into_payload();
                if body.len() < INDIVIDUAL_HEADER_LEN {
                    return Err(ReportError::Truncated);
                }
                Ok(TelemetryReport {
                    version: VERSION_2,
                    hw_id,
                    seq_no,
                    node_id,
                    body,
                })
            }
            VERSION_1 => {
                let h = V1Header::new_checked(b)?;
                Ok(TelemetryReport {
                    version: VERSION_1,
                    hw_id: h.hw_id(),
                    seq_no: h.seq_no(),
                    node_id: h.switch_id(),
                    body: b,
                })
            }
            _ => Err(ReportError::BadVersion),
        }
    }

    /// The individual reports (one for v1.0). Each item is a report or the error that ends
    /// the walk (the iterator stops after an error).
    #[inline]
    pub fn reports(&self) -> Reports<'a> {
        Reports {
            version: self.version,
            rest: self.body,
            done: false,
        }
    }
}

/// Iterator over a datagram's individual reports.
#[derive(Debug, Clone)]
pub struct Reports<'a> {
    version: u8,
    rest: &'a [u8],
    done: bool,
}

impl<'a> Iterator for Reports<'a> {
    type Item = core::result::Result<IndividualReport<'a>, ReportError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        let r = if self.version == VERSION_1 {
            self.done = true;
            parse_v1(self.rest)
        } else {
            if self.rest.len() < INDIVIDUAL_HEADER_LEN {
                // Trailing padding shorter than a header ends the walk; a datagram is
                // checked to hold at least one report when parsed.
                self.done = true;
                return None;
            }
            match parse_v2_individual(self.rest) {
                Ok((r, used)) => {
                    self.rest = &self.rest[used..];
                    Ok(r)
                }
                Err(e) => Err(e),
            }
        };
        if r.is_err() {
            self.done = true;
        }
        Some(r)
    }
}

/// The header fields of a datagram to emit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct GroupRepr {
    /// 1 or 2.
    pub version: u8,
    /// Hardware ID (6 bits).
    pub hw_id: u8,
    /// Sequence number (22 bits in v2.0).
    pub seq_no: u32,
    /// Node ID.
    pub node_id: u32,
}

/// Length of the datagram [`emit`] writes.
pub fn buffer_len(g: &GroupRepr, reports: &[IndividualRepr<'_>]) -> usize {
    match g.version {
        VERSION_1 => reports.first().map_or(0, |r| r.buffer_len(VERSION_1)),
        _ => {
            GROUP_HEADER_LEN
                + reports
                    .iter()
                    .map(|r| r.buffer_len(VERSION_2))
                    .sum::<usize>()
        }
    }
}

/// Writes a telemetry report datagram (v1.0: the first report only) to the front of `out`;
/// returns its length. Errors: a version other than 1 or 2, no report, or a v2.0 report longer
/// than its 8-bit length field allows ([`Error::Malformed`]); `out` shorter than
/// [`buffer_len`] ([`Error::Truncated`]).
pub fn emit(g: &GroupRepr, reports: &[IndividualRepr<'_>], out: &mut [u8]) -> Result<usize> {
    let n = buffer_len(g, reports);
    if reports.is_empty() || !(VERSION_1..=VERSION_2).contains(&g.version) {
        return Err(Error::Malformed);
    }
    let out = out.get_mut(..n).ok_or(Error::Truncated)?;
    out.fill(0);
    if g.version == VERSION_1 {
        let r = &reports[0];
        let bits = r.md_bits(VERSION_1);
        let md = MdFormat::RepMdV1.md_len(bits);
        let mut h = V1Header::new_unchecked(&mut *out);
        h.set_word0(V1Word0 {
            len_words: (4 + md / 4) as u8,
            nproto: if r.packet.ethernet { 0 } else { 1 },
            rep_md_bits: bits,
            dropped: r.flags.dropped,
            congested: r.flags.congested,
            tracked: r.flags.tracked,
            hw_id: g.hw_id,
        });
        h.set_switch_id(g.node_id);
        h.set_seq_no(g.seq_no);
        h.set_ingress_ts(r.ingress_ts32);
        let at = V1_HEADER_LEN + MdFormat::RepMdV1.emit(bits, &r.local, &mut out[V1_HEADER_LEN..]);
        r.packet.emit(&mut out[at..]);
        return Ok(n);
    }
    let mut h = GroupHeader::new_unchecked(&mut *out);
    h.set_word0(VERSION_2, g.hw_id, g.seq_no);
    h.set_node_id(g.node_id);
    let mut at = GROUP_HEADER_LEN;
    for r in reports {
        let len = r.buffer_len(VERSION_2);
        let words = (len - INDIVIDUAL_HEADER_LEN) / 4;
        if words >= 0xFF {
            return Err(Error::Malformed);
        }
        let bits = r.md_bits(VERSION_2);
        let md = MdFormat::RepMdV2.md_len(bits);
        let b = &mut out[at..at + len];
        let in_type = if r.packet.ethernet {
            InType::Ethernet
        } else {
            InType::Ipv4
        };
        let rt: u8 = match r.rep_type {
            RepType::InnerOnly => 0,
            RepType::Int => 1,
        };
        let mut h = IndividualHeader::new_unchecked(&mut *b);
        h.set_types(rt, in_type.bits());
        h.set_report_len(words as u8);
        h.set_md_len(match r.rep_type {
            RepType::Int => (md / 4) as u8,
            RepType::InnerOnly => 0,
        });
        h.set_flags(r.flags.to_bits());
        let mut p = INDIVIDUAL_HEADER_LEN;
        if r.rep_type == RepType::Int {
            h.set_rep_md_bits(bits);
            p += INT_MAIN_LEN;
            p += MdFormat::RepMdV2.emit(bits, &r.local, &mut b[p..]);
        }
        r.packet.emit(&mut b[p..]);
        at += len;
    }
    Ok(n)
}
