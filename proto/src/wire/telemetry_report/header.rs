//! Views of the fixed headers: the v2.0 Telemetry Report Group Header, the v2.0 Individual
//! Report Header (with an INT report's main contents) and the v1.0 report header. Accessors
//! only; what the fields mean for the walk is `group`'s and `individual`'s business.

use super::{ReportError, GROUP_HEADER_LEN, INDIVIDUAL_HEADER_LEN, INT_MAIN_LEN, V1_HEADER_LEN};

mod field {
    use core::ops::Range;
    // v2.0 group header: Ver(4) | hw_id(6) | Sequence Number(22), Node ID(32).
    pub const G_VER_HW_SEQ: Range<usize> = 0..4;
    pub const G_NODE_ID: Range<usize> = 4..8;
    // v2.0 individual report header (offsets from its start), then an INT report's main
    // contents.
    pub const I_TYPES: usize = 0;
    pub const I_REPORT_LEN: usize = 1;
    pub const I_MD_LEN: usize = 2;
    pub const I_FLAGS: usize = 3;
    pub const I_REP_MD_BITS: Range<usize> = 4..6;
    pub const I_DS_ID: Range<usize> = 6..8;
    pub const I_DS_MD_BITS: Range<usize> = 8..10;
    pub const I_DS_MD_STATUS: Range<usize> = 10..12;
    // v1.0 header: Ver(4) | Len(4) | NProto(3) | RepMdBits(6) | Rsvd(6) | D Q F | hw_id(6).
    pub const V1_WORD0: Range<usize> = 0..4;
    pub const V1_SWITCH_ID: Range<usize> = 4..8;
    pub const V1_SEQ: Range<usize> = 8..12;
    pub const V1_INGRESS_TS: Range<usize> = 12..16;
}

#[inline(always)]
fn be16(b: &[u8], r: core::ops::Range<usize>) -> u16 {
    u16::from_be_bytes([b[r.start], b[r.start + 1]])
}

#[inline(always)]
fn be32(b: &[u8], r: core::ops::Range<usize>) -> u32 {
    u32::from_be_bytes([b[r.start], b[r.start + 1], b[r.start + 2], b[r.start + 3]])
}

#[inline(always)]
fn set(b: &mut [u8], r: core::ops::Range<usize>, v: &[u8]) {
    b[r].copy_from_slice(v);
}

/// The version nibble of a datagram's first byte (both versions keep it there).
#[inline]
pub fn version_of(b: &[u8]) -> Result<u8, ReportError> {
    b.first().map(|v| v >> 4).ok_or(ReportError::Truncated)
}

crate::wire::view::fixed_view!(
    /// A view of a v2.0 Telemetry Report Group Header.
    GroupHeader,
    GROUP_HEADER_LEN,
    ReportError,
    ReportError::Truncated
);

impl<T: AsRef<[u8]>> GroupHeader<T> {
    #[inline]
    fn word0(&self) -> u32 {
        be32(self.buffer.as_ref(), field::G_VER_HW_SEQ)
    }

    /// Version (2).
    #[inline]
    pub fn version(&self) -> u8 {
        (self.word0() >> 28) as u8
    }

    /// Hardware ID (6 bits).
    #[inline]
    pub fn hw_id(&self) -> u8 {
        ((self.word0() >> 22) & 0x3F) as u8
    }

    /// Sequence number (22 bits).
    #[inline]
    pub fn seq_no(&self) -> u32 {
        self.word0() & super::V2_SEQ_MAX
    }

    /// Node ID.
    #[inline]
    pub fn node_id(&self) -> u32 {
        be32(self.buffer.as_ref(), field::G_NODE_ID)
    }

    /// What follows the header: the individual reports.
    #[inline]
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[GROUP_HEADER_LEN..]
    }
}

impl<'a> GroupHeader<&'a [u8]> {
    /// [`GroupHeader::payload`] for as long as the buffer.
    #[inline]
    pub fn into_payload(self) -> &'a [u8] {
        &self.buffer[GROUP_HEADER_LEN..]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> GroupHeader<T> {
    /// Sets version, hardware ID (6 bits) and sequence number (22 bits).
    #[inline]
    pub fn set_word0(&mut self, version: u8, hw_id: u8, seq_no: u32) {
        let w = (version as u32) << 28 | (hw_id as u32 & 0x3F) << 22 | (seq_no & super::V2_SEQ_MAX);
        set(self.buffer.as_mut(), field::G_VER_HW_SEQ, &w.to_be_bytes());
    }

    /// Sets the node ID.
    #[inline]
    pub fn set_node_id(&mut self, v: u32) {
        set(self.buffer.as_mut(), field::G_NODE_ID, &v.to_be_bytes());
    }
}

crate::wire::view::fixed_view!(
    /// A view of a v2.0 Individual Report Header and, for INT reports, its main contents'
    /// fixed part (RepMdBits, Domain Specific ID, DSMdBits, DSMdstatus), whose accessors need
    /// [`IndividualHeader::has_int_main`] beyond `new_checked`.
    IndividualHeader,
    INDIVIDUAL_HEADER_LEN,
    ReportError,
    ReportError::Truncated
);

impl<T: AsRef<[u8]>> IndividualHeader<T> {
    /// True if the buffer holds an INT report's main contents' fixed part.
    #[inline]
    pub fn has_int_main(&self) -> bool {
        self.buffer.as_ref().len() >= INDIVIDUAL_HEADER_LEN + INT_MAIN_LEN
    }

    /// RepType (4 bits).
    #[inline]
    pub fn rep_type(&self) -> u8 {
        self.buffer.as_ref()[field::I_TYPES] >> 4
    }

    /// InType (4 bits).
    #[inline]
    pub fn in_type(&self) -> u8 {
        self.buffer.as_ref()[field::I_TYPES] & 0x0F
    }

    /// Report Length: words after the header (0xFF: to the end of the datagram).
    #[inline]
    pub fn report_len(&self) -> u8 {
        self.buffer.as_ref()[field::I_REPORT_LEN]
    }

    /// MD Length in words.
    #[inline]
    pub fn md_len(&self) -> u8 {
        self.buffer.as_ref()[field::I_MD_LEN]
    }

    /// The flags byte: D Q F I, then 4 reserved bits.
    #[inline]
    pub fn flags(&self) -> u8 {
        self.buffer.as_ref()[field::I_FLAGS]
    }

    /// RepMdBits (needs [`IndividualHeader::has_int_main`]).
    #[inline]
    pub fn rep_md_bits(&self) -> u16 {
        be16(self.buffer.as_ref(), field::I_REP_MD_BITS)
    }

    /// Domain Specific ID (needs [`IndividualHeader::has_int_main`]).
    #[inline]
    pub fn domain_specific_id(&self) -> u16 {
        be16(self.buffer.as_ref(), field::I_DS_ID)
    }

    /// DSMdBits (needs [`IndividualHeader::has_int_main`]).
    #[inline]
    pub fn ds_md_bits(&self) -> u16 {
        be16(self.buffer.as_ref(), field::I_DS_MD_BITS)
    }

    /// DSMdstatus (needs [`IndividualHeader::has_int_main`]).
    #[inline]
    pub fn ds_md_status(&self) -> u16 {
        be16(self.buffer.as_ref(), field::I_DS_MD_STATUS)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> IndividualHeader<T> {
    /// Sets RepType and InType.
    #[inline]
    pub fn set_types(&mut self, rep_type: u8, in_type: u8) {
        self.buffer.as_mut()[field::I_TYPES] = rep_type << 4 | in_type & 0x0F;
    }

    /// Sets Report Length.
    #[inline]
    pub fn set_report_len(&mut self, words: u8) {
        self.buffer.as_mut()[field::I_REPORT_LEN] = words;
    }

    /// Sets MD Length.
    #[inline]
    pub fn set_md_len(&mut self, words: u8) {
        self.buffer.as_mut()[field::I_MD_LEN] = words;
    }

    /// Sets the flags byte.
    #[inline]
    pub fn set_flags(&mut self, v: u8) {
        self.buffer.as_mut()[field::I_FLAGS] = v;
    }

    /// Sets RepMdBits.
    #[inline]
    pub fn set_rep_md_bits(&mut self, v: u16) {
        set(self.buffer.as_mut(), field::I_REP_MD_BITS, &v.to_be_bytes());
    }
}

crate::wire::view::fixed_view!(
    /// A view of a v1.0 report header (16 bytes; its metadata and packet follow).
    V1Header,
    V1_HEADER_LEN,
    ReportError,
    ReportError::Truncated
);

impl<T: AsRef<[u8]>> V1Header<T> {
    #[inline]
    fn word0(&self) -> u32 {
        be32(self.buffer.as_ref(), field::V1_WORD0)
    }

    /// Len (4 bits): the header's words (see the module docs for the two readings).
    #[inline]
    pub fn len_words(&self) -> usize {
        ((self.word0() >> 24) & 0xF) as usize
    }

    /// NProto (3 bits).
    #[inline]
    pub fn nproto(&self) -> u8 {
        ((self.word0() >> 21) & 0x7) as u8
    }

    /// RepMdBits (6 bits).
    #[inline]
    pub fn rep_md_bits(&self) -> u16 {
        ((self.word0() >> 15) & 0x3F) as u16
    }

    /// D: dropped.
    #[inline]
    pub fn dropped(&self) -> bool {
        self.word0() & 0x0100 != 0
    }

    /// Q: congested queue.
    #[inline]
    pub fn congested(&self) -> bool {
        self.word0() & 0x0080 != 0
    }

    /// F: tracked flow.
    #[inline]
    pub fn tracked(&self) -> bool {
        self.word0() & 0x0040 != 0
    }

    /// Hardware ID (6 bits).
    #[inline]
    pub fn hw_id(&self) -> u8 {
        (self.word0() & 0x3F) as u8
    }

    /// Switch ID.
    #[inline]
    pub fn switch_id(&self) -> u32 {
        be32(self.buffer.as_ref(), field::V1_SWITCH_ID)
    }

    /// Sequence number.
    #[inline]
    pub fn seq_no(&self) -> u32 {
        be32(self.buffer.as_ref(), field::V1_SEQ)
    }

    /// Ingress timestamp.
    #[inline]
    pub fn ingress_ts(&self) -> u32 {
        be32(self.buffer.as_ref(), field::V1_INGRESS_TS)
    }
}

/// The v1.0 header's first word, as [`V1Header::set_word0`] takes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct V1Word0 {
    /// Len (4 bits).
    pub len_words: u8,
    /// NProto (3 bits).
    pub nproto: u8,
    /// RepMdBits (6 bits).
    pub rep_md_bits: u16,
    /// D: dropped.
    pub dropped: bool,
    /// Q: congested queue.
    pub congested: bool,
    /// F: tracked flow.
    pub tracked: bool,
    /// Hardware ID (6 bits).
    pub hw_id: u8,
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> V1Header<T> {
    /// Sets the first word (version 1).
    #[inline]
    pub fn set_word0(&mut self, w0: V1Word0) {
        let w = (super::VERSION_1 as u32) << 28
            | (w0.len_words as u32 & 0xF) << 24
            | (w0.nproto as u32 & 0x7) << 21
            | (w0.rep_md_bits as u32 & 0x3F) << 15
            | (w0.dropped as u32) << 8
            | (w0.congested as u32) << 7
            | (w0.tracked as u32) << 6
            | (w0.hw_id as u32 & 0x3F);
        set(self.buffer.as_mut(), field::V1_WORD0, &w.to_be_bytes());
    }

    /// Sets the switch ID.
    #[inline]
    pub fn set_switch_id(&mut self, v: u32) {
        set(self.buffer.as_mut(), field::V1_SWITCH_ID, &v.to_be_bytes());
    }

    /// Sets the sequence number.
    #[inline]
    pub fn set_seq_no(&mut self, v: u32) {
        set(self.buffer.as_mut(), field::V1_SEQ, &v.to_be_bytes());
    }

    /// Sets the ingress timestamp.
    #[inline]
    pub fn set_ingress_ts(&mut self, v: u32) {
        set(self.buffer.as_mut(), field::V1_INGRESS_TS, &v.to_be_bytes());
    }
}
