//! One individual report: a v2.0 Individual Report (header, INT main contents, the node's
//! metadata, inner contents) or the v1.0 report that fills its datagram. Parsed by the
//! datagram walk in `group`; emitted through [`IndividualRepr`].

use super::header::{IndividualHeader, V1Header};
use super::inner::{parse_inner, InnerConfig, InnerPacket, InnerPacketRepr, InnerStart};
use super::metadata::{HopMetadata, MdFormat};
use super::{ReportError, INDIVIDUAL_HEADER_LEN, INT_MAIN_LEN, V1_HEADER_LEN, VERSION_1};

mod field {
    // A TLV in the inner contents: Type(4) | Rsvd(4) | Length(8, words after the header) |
    // 16 bits, then the value.
    pub const TLV_TYPE: usize = 0;
    pub const TLV_LEN: usize = 1;
    pub const TLV_HEADER_LEN: usize = 4;
}

/// Individual report types (v2.0 RepType).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RepType {
    /// 0: the inner contents only.
    InnerOnly,
    /// 1: INT metadata, then the inner contents.
    Int,
}

/// Inner contents types (v2.0 InType; v1.0 NProto maps onto 3–5).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum InType {
    /// 0: none.
    None,
    /// 1: TLVs.
    Tlv,
    /// 2: domain specific extension data.
    DomainSpecific,
    /// 3: Ethernet.
    Ethernet,
    /// 4: IPv4.
    Ipv4,
    /// 5: IPv6.
    Ipv6,
    /// 6–15: reserved.
    Reserved(u8),
}

impl InType {
    /// From the 4-bit field.
    pub const fn from_bits(v: u8) -> InType {
        match v & 0xF {
            0 => InType::None,
            1 => InType::Tlv,
            2 => InType::DomainSpecific,
            3 => InType::Ethernet,
            4 => InType::Ipv4,
            5 => InType::Ipv6,
            r => InType::Reserved(r),
        }
    }

    /// The 4-bit field.
    pub const fn bits(self) -> u8 {
        match self {
            InType::None => 0,
            InType::Tlv => 1,
            InType::DomainSpecific => 2,
            InType::Ethernet => 3,
            InType::Ipv4 => 4,
            InType::Ipv6 => 5,
            InType::Reserved(r) => r & 0xF,
        }
    }
}

/// The association bits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Flags {
    /// D: a packet was dropped.
    pub dropped: bool,
    /// Q: congested queue.
    pub congested: bool,
    /// F: tracked flow.
    pub tracked: bool,
    /// I: intermediate report (v2.0 only).
    pub intermediate: bool,
}

impl Flags {
    /// From a v2.0 Individual Report Header's flags byte (D Q F I, then reserved bits).
    #[inline]
    pub const fn from_bits(fl: u8) -> Flags {
        Flags {
            dropped: fl & 0x80 != 0,
            congested: fl & 0x40 != 0,
            tracked: fl & 0x20 != 0,
            intermediate: fl & 0x10 != 0,
        }
    }

    /// The v2.0 flags byte (reserved bits zero).
    #[inline]
    pub const fn to_bits(self) -> u8 {
        (self.dropped as u8) << 7
            | (self.congested as u8) << 6
            | (self.tracked as u8) << 5
            | (self.intermediate as u8) << 4
    }
}

/// One individual report, borrowed from its datagram.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IndividualReport<'a> {
    /// Report type.
    pub rep_type: RepType,
    /// Inner contents type.
    pub in_type: InType,
    /// Association bits.
    pub flags: Flags,
    /// The metadata bitmap (v2.0 or v1.0 RepMdBits).
    pub rep_md_bits: u16,
    /// Domain Specific ID (v2.0 INT reports; else 0).
    pub domain_specific_id: u16,
    /// DSMdBits (v2.0 INT reports; else 0).
    pub ds_md_bits: u16,
    /// DSMdstatus (v2.0 INT reports; else 0).
    pub ds_md_status: u16,
    /// The reporting node's own metadata.
    pub local: HopMetadata,
    /// v1.0's 32-bit ingress timestamp.
    pub ingress_ts32: Option<u32>,
    /// The inner contents (a truncated packet, TLVs, ...), as InType says.
    pub inner: &'a [u8],
}

impl<'a> IndividualReport<'a> {
    /// The truncated packet and where it starts: from the inner contents directly, or from
    /// the first Ethernet/IPv4 TLV.
    pub fn packet(&self) -> core::result::Result<(InnerStart, &'a [u8]), ReportError> {
        match self.in_type {
            InType::Ethernet => Ok((InnerStart::Ethernet, self.inner)),
            InType::Ipv4 => Ok((InnerStart::Ipv4, self.inner)),
            InType::Tlv => {
                let mut b = self.inner;
                while b.len() >= field::TLV_HEADER_LEN {
                    let t = b[field::TLV_TYPE] >> 4;
                    let len = field::TLV_HEADER_LEN + b[field::TLV_LEN] as usize * 4;
                    let data = b
                        .get(field::TLV_HEADER_LEN..len)
                        .ok_or(ReportError::Truncated)?;
                    match t {
                        1 => return Ok((InnerStart::Ethernet, data)),
                        2 => return Ok((InnerStart::Ipv4, data)),
                        _ => b = &b[len..],
                    }
                }
                Err(ReportError::UnsupportedInnerType)
            }
            _ => Err(ReportError::UnsupportedInnerType),
        }
    }

    /// [`IndividualReport::packet`] parsed with [`parse_inner`].
    pub fn parse_inner(
        &self,
        cfg: &InnerConfig,
    ) -> core::result::Result<InnerPacket<'a>, ReportError> {
        let (start, b) = self.packet()?;
        parse_inner(start, b, cfg)
    }
}

pub(super) fn parse_v2_individual(
    b: &[u8],
) -> core::result::Result<(IndividualReport<'_>, usize), ReportError> {
    let h = IndividualHeader::new_checked(b)?;
    let rep_len = h.report_len();
    let md_words = h.md_len() as usize;
    let total = if rep_len == 0xFF {
        // "To the end of the UDP payload".
        b.len()
    } else {
        INDIVIDUAL_HEADER_LEN + rep_len as usize * 4
    };
    let rep = b.get(..total).ok_or(ReportError::Truncated)?;
    let rep_type = match h.rep_type() {
        0 => RepType::InnerOnly,
        1 => RepType::Int,
        _ => return Err(ReportError::UnknownRepType),
    };
    let mut r = IndividualReport {
        rep_type,
        in_type: InType::from_bits(h.in_type()),
        flags: Flags::from_bits(h.flags()),
        rep_md_bits: 0,
        domain_specific_id: 0,
        ds_md_bits: 0,
        ds_md_status: 0,
        local: HopMetadata::default(),
        ingress_ts32: None,
        inner: &[],
    };
    let inner_at = match rep_type {
        // MD Length is ignored on reception for inner-only reports.
        RepType::InnerOnly => INDIVIDUAL_HEADER_LEN,
        RepType::Int => {
            let main_end = INDIVIDUAL_HEADER_LEN + INT_MAIN_LEN;
            if rep.len() < main_end {
                return Err(if b.len() < main_end {
                    ReportError::Truncated
                } else {
                    ReportError::BadLength
                });
            }
            let main = IndividualHeader::new_unchecked(rep);
            debug_assert!(main.has_int_main());
            r.rep_md_bits = main.rep_md_bits();
            r.domain_specific_id = main.domain_specific_id();
            r.ds_md_bits = main.ds_md_bits();
            r.ds_md_status = main.ds_md_status();
            let md_end = main_end + md_words * 4;
            let md = rep.get(main_end..md_end).ok_or(ReportError::BadLength)?;
            // MD Length covers the baseline metadata and any domain specific metadata (whose
            // format we do not know): it must hold at least what RepMdBits selects.
            if MdFormat::RepMdV2.md_len(r.rep_md_bits) > md.len() {
                return Err(ReportError::BadLength);
            }
            r.local = MdFormat::RepMdV2.parse(r.rep_md_bits, md)?;
            md_end
        }
    };
    r.inner = &rep[inner_at..];
    Ok((r, total))
}

pub(super) fn parse_v1(b: &[u8]) -> core::result::Result<IndividualReport<'_>, ReportError> {
    // The datagram walk only gets here for a datagram that holds the whole header.
    let h = V1Header::new_checked(b)?;
    let len = h.len_words();
    let nproto = h.nproto();
    let bits = h.rep_md_bits();
    let md_len = MdFormat::RepMdV1.md_len(bits);
    let words = md_len / 4;
    let header_len = if len == 4 + words || len == words && len < 4 {
        V1_HEADER_LEN + md_len
    } else {
        return Err(ReportError::BadLength);
    };
    let md = b
        .get(V1_HEADER_LEN..header_len)
        .ok_or(ReportError::Truncated)?;
    let in_type = match nproto {
        0 => InType::Ethernet,
        1 => InType::Ipv4,
        2 => InType::Ipv6,
        r => InType::Reserved(r + 3),
    };
    Ok(IndividualReport {
        rep_type: RepType::Int,
        in_type,
        flags: Flags {
            dropped: h.dropped(),
            congested: h.congested(),
            tracked: h.tracked(),
            intermediate: false,
        },
        rep_md_bits: bits,
        domain_specific_id: 0,
        ds_md_bits: 0,
        ds_md_status: 0,
        local: MdFormat::RepMdV1.parse(bits, md)?,
        ingress_ts32: Some(h.ingress_ts()),
        inner: &b[header_len..],
    })
}

/// One individual report to emit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IndividualRepr<'h> {
    /// INT (with `local` metadata) or inner only (v2.0).
    pub rep_type: RepType,
    /// Association bits (`intermediate` is v2.0 only).
    pub flags: Flags,
    /// The node's own metadata (fields the version cannot carry are left out).
    pub local: HopMetadata,
    /// v1.0's ingress timestamp.
    pub ingress_ts32: u32,
    /// The truncated packet.
    pub packet: InnerPacketRepr<'h>,
}

impl IndividualRepr<'_> {
    pub(super) fn md_bits(&self, version: u8) -> u16 {
        match (version, self.rep_type) {
            (VERSION_1, _) => MdFormat::RepMdV1.bits_of(&self.local),
            (_, RepType::Int) => MdFormat::RepMdV2.bits_of(&self.local),
            (_, RepType::InnerOnly) => 0,
        }
    }

    fn packet_padded(&self) -> usize {
        self.packet.buffer_len().div_ceil(4) * 4
    }

    /// Bytes this report takes in a datagram of `version` (v1.0: the whole payload after
    /// nothing; v2.0: header, main and inner contents).
    pub fn buffer_len(&self, version: u8) -> usize {
        let bits = self.md_bits(version);
        match version {
            VERSION_1 => V1_HEADER_LEN + MdFormat::RepMdV1.md_len(bits) + self.packet.buffer_len(),
            _ => {
                let main = match self.rep_type {
                    RepType::Int => INT_MAIN_LEN + MdFormat::RepMdV2.md_len(bits),
                    RepType::InnerOnly => 0,
                };
                INDIVIDUAL_HEADER_LEN + main + self.packet_padded()
            }
        }
    }
}
