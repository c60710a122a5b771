//! The datagram: the v2.0 Telemetry Report Group Header (or the v1.0 report header), the walk
//! over its individual reports, and datagram emission.

use super::individual::{
    parse_v1, parse_v2_individual, InType, IndividualReport, IndividualRepr, RepType,
};
use super::metadata::MdFormat;
use super::{
    be32, byte, field, ReportError, GROUP_HEADER_LEN, INDIVIDUAL_HEADER_LEN, INT_MAIN_LEN,
    V1_HEADER_LEN, V2_SEQ_MAX, VERSION_1, VERSION_2,
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
        let ver = byte(b, 0)? >> 4;
        match ver {
            VERSION_2 => {
                let w = be32(b, field::G_VER_HW_SEQ.start)?;
                let node_id = be32(b, field::G_NODE_ID.start)?;
                let body = &b[GROUP_HEADER_LEN..];
                if body.len() < INDIVIDUAL_HEADER_LEN {
                    return Err(ReportError::Truncated);
                }
                Ok(TelemetryReport {
                    version: VERSION_2,
                    hw_id: ((w >> 22) & 0x3F) as u8,
                    seq_no: w & V2_SEQ_MAX,
                    node_id,
                    body,
                })
            }
            VERSION_1 => {
                let w = be32(b, field::V1_WORD0.start)?;
                let switch_id = be32(b, field::V1_SWITCH_ID.start)?;
                let seq = be32(b, field::V1_SEQ.start)?;
                be32(b, field::V1_INGRESS_TS.start)?;
                Ok(TelemetryReport {
                    version: VERSION_1,
                    hw_id: (w & 0x3F) as u8,
                    seq_no: seq,
                    node_id: switch_id,
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
        let nproto: u32 = if r.packet.ethernet { 0 } else { 1 };
        let w = (VERSION_1 as u32) << 28
            | ((4 + md / 4) as u32 & 0xF) << 24
            | nproto << 21
            | (bits as u32 & 0x3F) << 15
            | (r.flags.dropped as u32) << 8
            | (r.flags.congested as u32) << 7
            | (r.flags.tracked as u32) << 6
            | (g.hw_id as u32 & 0x3F);
        out[field::V1_WORD0].copy_from_slice(&w.to_be_bytes());
        out[field::V1_SWITCH_ID].copy_from_slice(&g.node_id.to_be_bytes());
        out[field::V1_SEQ].copy_from_slice(&g.seq_no.to_be_bytes());
        out[field::V1_INGRESS_TS].copy_from_slice(&r.ingress_ts32.to_be_bytes());
        let at = V1_HEADER_LEN + MdFormat::RepMdV1.emit(bits, &r.local, &mut out[V1_HEADER_LEN..]);
        r.packet.emit(&mut out[at..]);
        return Ok(n);
    }
    let w = (VERSION_2 as u32) << 28 | (g.hw_id as u32 & 0x3F) << 22 | (g.seq_no & V2_SEQ_MAX);
    out[field::G_VER_HW_SEQ].copy_from_slice(&w.to_be_bytes());
    out[field::G_NODE_ID].copy_from_slice(&g.node_id.to_be_bytes());
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
        b[field::I_TYPES] = rt << 4 | in_type.bits();
        b[field::I_REPORT_LEN] = words as u8;
        b[field::I_MD_LEN] = match r.rep_type {
            RepType::Int => (md / 4) as u8,
            RepType::InnerOnly => 0,
        };
        b[field::I_FLAGS] = (r.flags.dropped as u8) << 7
            | (r.flags.congested as u8) << 6
            | (r.flags.tracked as u8) << 5
            | (r.flags.intermediate as u8) << 4;
        let mut p = INDIVIDUAL_HEADER_LEN;
        if r.rep_type == RepType::Int {
            b[field::I_REP_MD_BITS].copy_from_slice(&bits.to_be_bytes());
            p += INT_MAIN_LEN;
            p += MdFormat::RepMdV2.emit(bits, &r.local, &mut b[p..]);
        }
        r.packet.emit(&mut b[p..]);
        at += len;
    }
    Ok(n)
}
