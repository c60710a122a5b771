//! DTA reports in the *reference profile*: byte for byte what the authors' Tofino artefact
//! (jonlanglet/DTA) sends and parses.
//!
//! The reference has two incompatible base headers, chosen at compile time by
//! `DO_NACK_TRACKING` (reference §2.2):
//!
//! ```text
//! variant A (2 B):  opcode u8 | flags u8 (bit7 immediate, bits6..0 reserved)
//! variant B (3 B):  opcode u8 | seqnum u8 | flags u8 (bit7 immediate, bit6 retransmitable,
//!                                                     bits5..0 reserved)
//! ```
//!
//! A sub-header follows directly, selected by the opcode (§2.4). Every field is big-endian on
//! the wire. Nothing on the wire says which variant a datagram uses, so the receiver must be
//! told ([`BaseVariant`]). This module is wire-level only: the mapping of keys and values into
//! collector memory (the reference's deliberate byte swaps, §2.7) lives in
//! [`crate::wire::report`].
//!
//! Parsing is strict about structure and lenient about flags: bytes after the sub-header are
//! [`Error::Malformed`] (the reference would ignore them; we refuse to guess what they meant),
//! while reserved flag bits are accepted, as the reference ignores them, and exposed.

use crate::consts::opcode;
use crate::wire::{Error, Result};

/// Which of the reference's two base headers a datagram uses.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, Default, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum BaseVariant {
    /// 2 bytes, no sequence number: the committed P4 default and the example Reporter.
    A,
    /// 3 bytes with an 8-bit seqnum: the Manager's `-DDO_NACK_TRACKING` build and every
    /// generator script.
    #[default]
    B,
}

impl BaseVariant {
    /// Length of the base header in this variant.
    #[inline]
    pub const fn header_len(self) -> usize {
        match self {
            BaseVariant::A => field::A_FLAGS + 1,
            BaseVariant::B => field::B_FLAGS + 1,
        }
    }

    /// Flag bits this variant does not define (the reference ignores them).
    #[inline]
    pub const fn reserved_flags_mask(self) -> u8 {
        match self {
            BaseVariant::A => 0x7f,
            BaseVariant::B => 0x3f,
        }
    }
}

/// The four DTA primitives; the numbers are shared by both profiles.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Opcode {
    /// Key-Write (0x01).
    KeyWrite = opcode::KEY_WRITE,
    /// Append (0x02).
    Append = opcode::APPEND,
    /// Key-Increment (0x03).
    KeyIncrement = opcode::KEY_INCREMENT,
    /// Postcarding (0x04).
    Postcard = opcode::POSTCARD,
}

impl Opcode {
    /// The opcode for a wire byte; [`Error::UnknownOpcode`] for anything else.
    #[inline]
    pub const fn from_u8(b: u8) -> Result<Opcode> {
        match b {
            opcode::KEY_WRITE => Ok(Opcode::KeyWrite),
            opcode::APPEND => Ok(Opcode::Append),
            opcode::KEY_INCREMENT => Ok(Opcode::KeyIncrement),
            opcode::POSTCARD => Ok(Opcode::Postcard),
            _ => Err(Error::UnknownOpcode),
        }
    }
}

impl From<Opcode> for u8 {
    #[inline]
    fn from(op: Opcode) -> u8 {
        op as u8
    }
}

/// Flag bits of the base header (the flags byte is byte 1 in variant A, byte 2 in variant B).
pub mod flags {
    /// "The CPU should be informed of this report" (both variants).
    pub const IMMEDIATE: u8 = 0x80;
    /// "Track this report's seqnum" (variant B only; reserved in A).
    pub const RETRANSMITABLE: u8 = 0x40;
}

/// Byte offsets of the reference profile: the one definition its views and
/// [`crate::wire::report`]'s fast parser read.
pub(super) mod field {
    pub type Field = core::ops::Range<usize>;

    pub const OPCODE: usize = 0;
    /// Variant A: the flags byte.
    pub const A_FLAGS: usize = 1;
    /// Variant B: the seqnum byte.
    pub const B_SEQNUM: usize = 1;
    /// Variant B: the flags byte.
    pub const B_FLAGS: usize = 2;

    // Sub-headers, relative to their own start.
    pub const KV_REDUNDANCY: usize = 0;
    pub const KV_KEY: Field = 1..5;
    pub const KW_DATA: Field = 5..9;
    pub const KI_COUNTER: Field = 5..13;
    pub const APPEND_LIST_ID: Field = 0..4;
    pub const APPEND_DATA: Field = 4..8;
    pub const PC_KEY: Field = 0..4;
    pub const PC_HOP_NUM: usize = 4;
    pub const PC_DATA: Field = 5..9;

    // Sub-header lengths.
    pub const KW_LEN: usize = KW_DATA.end;
    pub const KI_LEN: usize = KI_COUNTER.end;
    pub const APPEND_LEN: usize = APPEND_DATA.end;
    pub const PC_LEN: usize = PC_DATA.end;
}

#[inline]
fn be_u32(b: &[u8]) -> u32 {
    u32::from_be_bytes([b[0], b[1], b[2], b[3]])
}

#[inline]
fn be_u64(b: &[u8]) -> u64 {
    u64::from_be_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]])
}

/// A view of a reference base header (either variant) followed by its payload.
#[derive(Debug, Clone)]
pub struct DtaHeader<T: AsRef<[u8]>> {
    buffer: T,
    variant: BaseVariant,
}

impl<T: AsRef<[u8]>> DtaHeader<T> {
    /// Wrap a buffer without checking its length.
    #[inline]
    pub const fn new_unchecked(buffer: T, variant: BaseVariant) -> DtaHeader<T> {
        DtaHeader { buffer, variant }
    }

    /// Wrap a buffer, checking that it holds the whole base header.
    #[inline]
    pub fn new_checked(buffer: T, variant: BaseVariant) -> Result<DtaHeader<T>> {
        let h = Self::new_unchecked(buffer, variant);
        h.check_len()?;
        Ok(h)
    }

    /// [`Error::Truncated`] if the buffer is shorter than the base header.
    #[inline]
    pub fn check_len(&self) -> Result<()> {
        if self.buffer.as_ref().len() < self.variant.header_len() {
            Err(Error::Truncated)
        } else {
            Ok(())
        }
    }

    /// The wrapped buffer.
    #[inline]
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// The base-header variant this view reads.
    #[inline]
    pub fn variant(&self) -> BaseVariant {
        self.variant
    }

    /// Length of the base header.
    #[inline]
    pub fn header_len(&self) -> usize {
        self.variant.header_len()
    }

    /// The raw opcode byte.
    #[inline]
    pub fn opcode(&self) -> u8 {
        self.buffer.as_ref()[field::OPCODE]
    }

    #[inline]
    fn flags_index(&self) -> usize {
        match self.variant {
            BaseVariant::A => field::A_FLAGS,
            BaseVariant::B => field::B_FLAGS,
        }
    }

    /// The raw flags byte.
    #[inline]
    pub fn flags(&self) -> u8 {
        self.buffer.as_ref()[self.flags_index()]
    }

    /// The seqnum (variant B); `None` in variant A, which has none.
    #[inline]
    pub fn seqnum(&self) -> Option<u8> {
        match self.variant {
            BaseVariant::A => None,
            BaseVariant::B => Some(self.buffer.as_ref()[field::B_SEQNUM]),
        }
    }

    /// The `immediate` flag.
    #[inline]
    pub fn immediate(&self) -> bool {
        self.flags() & flags::IMMEDIATE != 0
    }

    /// The `retransmitable` flag; always false in variant A, where bit 6 is reserved.
    #[inline]
    pub fn retransmitable(&self) -> bool {
        self.variant == BaseVariant::B && self.flags() & flags::RETRANSMITABLE != 0
    }

    /// The reserved flag bits, in place (the reference ignores them).
    #[inline]
    pub fn reserved_flags(&self) -> u8 {
        self.flags() & self.variant.reserved_flags_mask()
    }
}

impl<'a, T: AsRef<[u8]> + ?Sized> DtaHeader<&'a T> {
    /// The bytes after the base header (the sub-header).
    #[inline]
    pub fn payload(&self) -> &'a [u8] {
        &self.buffer.as_ref()[self.variant.header_len()..]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> DtaHeader<T> {
    /// Set the opcode byte.
    #[inline]
    pub fn set_opcode(&mut self, value: u8) {
        self.buffer.as_mut()[field::OPCODE] = value;
    }

    /// Set the raw flags byte.
    #[inline]
    pub fn set_flags(&mut self, value: u8) {
        let i = self.flags_index();
        self.buffer.as_mut()[i] = value;
    }

    /// Set the seqnum; a no-op in variant A, which has no such field.
    #[inline]
    pub fn set_seqnum(&mut self, value: u8) {
        if self.variant == BaseVariant::B {
            self.buffer.as_mut()[field::B_SEQNUM] = value;
        }
    }

    /// The bytes after the base header, mutable.
    #[inline]
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let start = self.variant.header_len();
        &mut self.buffer.as_mut()[start..]
    }
}

use crate::wire::view::fixed_view;

fixed_view!(
    /// A view of the Key-Write sub-header: `redundancy u8 | key u32 | data u32` (9 B).
    KeyWriteHeader,
    field::KW_LEN
);
fixed_view!(
    /// A view of the Key-Increment sub-header: `redundancy u8 | key u32 | counter u64` (13 B).
    KeyIncrementHeader,
    field::KI_LEN
);
fixed_view!(
    /// A view of the Append sub-header: `list_id u32 | data u32` (8 B).
    AppendHeader,
    field::APPEND_LEN
);
fixed_view!(
    /// A view of the Postcarder sub-header: `key u32 | hop_num u8 | data u32` (9 B).
    PostcarderHeader,
    field::PC_LEN
);

impl<T: AsRef<[u8]>> KeyWriteHeader<T> {
    /// Requested number of copies, N.
    #[inline]
    pub fn redundancy(&self) -> u8 {
        self.buffer.as_ref()[field::KV_REDUNDANCY]
    }
    /// The key, as the big-endian u32 on the wire.
    #[inline]
    pub fn key(&self) -> u32 {
        be_u32(&self.buffer.as_ref()[field::KV_KEY])
    }
    /// The 4 data bytes exactly as on the wire.
    #[inline]
    pub fn data_bytes(&self) -> [u8; 4] {
        let b = &self.buffer.as_ref()[field::KW_DATA];
        [b[0], b[1], b[2], b[3]]
    }
    /// The data, as the big-endian u32 on the wire.
    #[inline]
    pub fn data(&self) -> u32 {
        be_u32(&self.buffer.as_ref()[field::KW_DATA])
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> KeyWriteHeader<T> {
    /// Set the redundancy.
    #[inline]
    pub fn set_redundancy(&mut self, v: u8) {
        self.buffer.as_mut()[field::KV_REDUNDANCY] = v;
    }
    /// Set the key (written big-endian).
    #[inline]
    pub fn set_key(&mut self, v: u32) {
        self.buffer.as_mut()[field::KV_KEY].copy_from_slice(&v.to_be_bytes());
    }
    /// Set the data (written big-endian).
    #[inline]
    pub fn set_data(&mut self, v: u32) {
        self.buffer.as_mut()[field::KW_DATA].copy_from_slice(&v.to_be_bytes());
    }
}

impl<T: AsRef<[u8]>> KeyIncrementHeader<T> {
    /// Requested number of counters, N.
    #[inline]
    pub fn redundancy(&self) -> u8 {
        self.buffer.as_ref()[field::KV_REDUNDANCY]
    }
    /// The key, as the big-endian u32 on the wire.
    #[inline]
    pub fn key(&self) -> u32 {
        be_u32(&self.buffer.as_ref()[field::KV_KEY])
    }
    /// The increment, as the big-endian u64 on the wire.
    #[inline]
    pub fn counter(&self) -> u64 {
        be_u64(&self.buffer.as_ref()[field::KI_COUNTER])
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> KeyIncrementHeader<T> {
    /// Set the redundancy.
    #[inline]
    pub fn set_redundancy(&mut self, v: u8) {
        self.buffer.as_mut()[field::KV_REDUNDANCY] = v;
    }
    /// Set the key (written big-endian).
    #[inline]
    pub fn set_key(&mut self, v: u32) {
        self.buffer.as_mut()[field::KV_KEY].copy_from_slice(&v.to_be_bytes());
    }
    /// Set the increment (written big-endian).
    #[inline]
    pub fn set_counter(&mut self, v: u64) {
        self.buffer.as_mut()[field::KI_COUNTER].copy_from_slice(&v.to_be_bytes());
    }
}

impl<T: AsRef<[u8]>> AppendHeader<T> {
    /// The list the entry goes to.
    #[inline]
    pub fn list_id(&self) -> u32 {
        be_u32(&self.buffer.as_ref()[field::APPEND_LIST_ID])
    }
    /// The data, as the big-endian u32 on the wire.
    #[inline]
    pub fn data(&self) -> u32 {
        be_u32(&self.buffer.as_ref()[field::APPEND_DATA])
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> AppendHeader<T> {
    /// Set the list ID (written big-endian).
    #[inline]
    pub fn set_list_id(&mut self, v: u32) {
        self.buffer.as_mut()[field::APPEND_LIST_ID].copy_from_slice(&v.to_be_bytes());
    }
    /// Set the data (written big-endian).
    #[inline]
    pub fn set_data(&mut self, v: u32) {
        self.buffer.as_mut()[field::APPEND_DATA].copy_from_slice(&v.to_be_bytes());
    }
}

impl<T: AsRef<[u8]>> PostcarderHeader<T> {
    /// The flow ID bytes exactly as on the wire (the reference hashes them unreversed).
    #[inline]
    pub fn key_bytes(&self) -> [u8; 4] {
        let b = &self.buffer.as_ref()[field::PC_KEY];
        [b[0], b[1], b[2], b[3]]
    }
    /// The flow ID, as the big-endian u32 on the wire.
    #[inline]
    pub fn key(&self) -> u32 {
        be_u32(&self.buffer.as_ref()[field::PC_KEY])
    }
    /// The 1-based hop number (the reference uses 1..=5).
    #[inline]
    pub fn hop_num(&self) -> u8 {
        self.buffer.as_ref()[field::PC_HOP_NUM]
    }
    /// The hop's value, as the big-endian u32 on the wire.
    #[inline]
    pub fn data(&self) -> u32 {
        be_u32(&self.buffer.as_ref()[field::PC_DATA])
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> PostcarderHeader<T> {
    /// Set the flow ID (written big-endian).
    #[inline]
    pub fn set_key(&mut self, v: u32) {
        self.buffer.as_mut()[field::PC_KEY].copy_from_slice(&v.to_be_bytes());
    }
    /// Set the 1-based hop number.
    #[inline]
    pub fn set_hop_num(&mut self, v: u8) {
        self.buffer.as_mut()[field::PC_HOP_NUM] = v;
    }
    /// Set the hop's value (written big-endian).
    #[inline]
    pub fn set_data(&mut self, v: u32) {
        self.buffer.as_mut()[field::PC_DATA].copy_from_slice(&v.to_be_bytes());
    }
}

/// A parsed reference base header.
///
/// In variant A the wire has no seqnum and no retransmitable bit: parsing yields `seqnum == 0`
/// and `retransmitable == false`, and `emit` does not write them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct DtaHeaderRepr {
    /// Which base header.
    pub variant: BaseVariant,
    /// The primitive.
    pub opcode: Opcode,
    /// Variant B seqnum (0 in variant A).
    pub seqnum: u8,
    /// The `immediate` flag.
    pub immediate: bool,
    /// Variant B `retransmitable` flag (false in variant A).
    pub retransmitable: bool,
    /// Reserved flag bits as received, in place; emitted masked to the variant's reserved bits.
    pub reserved_flags: u8,
}

impl DtaHeaderRepr {
    /// Parse a base header; [`Error::UnknownOpcode`] for opcodes other than 1..=4.
    pub fn parse<T: AsRef<[u8]> + ?Sized>(header: &DtaHeader<&T>) -> Result<DtaHeaderRepr> {
        header.check_len()?;
        Ok(DtaHeaderRepr {
            variant: header.variant(),
            opcode: Opcode::from_u8(header.opcode())?,
            seqnum: header.seqnum().unwrap_or(0),
            immediate: header.immediate(),
            retransmitable: header.retransmitable(),
            reserved_flags: header.reserved_flags(),
        })
    }

    /// Length of this base header.
    #[inline]
    pub fn buffer_len(&self) -> usize {
        self.variant.header_len()
    }

    /// Write this header into a view of the same variant.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, header: &mut DtaHeader<T>) {
        debug_assert_eq!(
            header.variant(),
            self.variant,
            "view and repr variants differ"
        );
        let mut f = self.reserved_flags & header.variant().reserved_flags_mask();
        if self.immediate {
            f |= flags::IMMEDIATE;
        }
        if self.retransmitable && header.variant() == BaseVariant::B {
            f |= flags::RETRANSMITABLE;
        }
        header.set_opcode(self.opcode.into());
        header.set_seqnum(self.seqnum);
        header.set_flags(f);
    }
}

/// A parsed Key-Write sub-header (wire values, before any mapping into memory).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct KeyWriteRepr {
    /// Requested number of copies, N (not validated here: the translator decides).
    pub redundancy: u8,
    /// The big-endian u32 key.
    pub key: u32,
    /// The big-endian u32 data.
    pub data: u32,
}

impl KeyWriteRepr {
    /// Parse a checked view.
    pub fn parse<T: AsRef<[u8]> + ?Sized>(h: &KeyWriteHeader<&T>) -> Result<KeyWriteRepr> {
        h.check_len()?;
        Ok(KeyWriteRepr {
            redundancy: h.redundancy(),
            key: h.key(),
            data: h.data(),
        })
    }
    /// Sub-header length (9).
    #[inline]
    pub const fn buffer_len(&self) -> usize {
        KeyWriteHeader::<&[u8]>::LEN
    }
    /// Write into a view of at least [`Self::buffer_len`] bytes.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, h: &mut KeyWriteHeader<T>) {
        h.set_redundancy(self.redundancy);
        h.set_key(self.key);
        h.set_data(self.data);
    }
}

/// A parsed Key-Increment sub-header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct KeyIncrementRepr {
    /// Requested number of counters, N (not validated here).
    pub redundancy: u8,
    /// The big-endian u32 key.
    pub key: u32,
    /// The big-endian u64 increment.
    pub counter: u64,
}

impl KeyIncrementRepr {
    /// Parse a checked view.
    pub fn parse<T: AsRef<[u8]> + ?Sized>(h: &KeyIncrementHeader<&T>) -> Result<KeyIncrementRepr> {
        h.check_len()?;
        Ok(KeyIncrementRepr {
            redundancy: h.redundancy(),
            key: h.key(),
            counter: h.counter(),
        })
    }
    /// Sub-header length (13).
    #[inline]
    pub const fn buffer_len(&self) -> usize {
        KeyIncrementHeader::<&[u8]>::LEN
    }
    /// Write into a view of at least [`Self::buffer_len`] bytes.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, h: &mut KeyIncrementHeader<T>) {
        h.set_redundancy(self.redundancy);
        h.set_key(self.key);
        h.set_counter(self.counter);
    }
}

/// A parsed Append sub-header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct AppendRepr {
    /// The big-endian u32 list ID.
    pub list_id: u32,
    /// The big-endian u32 data.
    pub data: u32,
}

impl AppendRepr {
    /// Parse a checked view.
    pub fn parse<T: AsRef<[u8]> + ?Sized>(h: &AppendHeader<&T>) -> Result<AppendRepr> {
        h.check_len()?;
        Ok(AppendRepr {
            list_id: h.list_id(),
            data: h.data(),
        })
    }
    /// Sub-header length (8).
    #[inline]
    pub const fn buffer_len(&self) -> usize {
        AppendHeader::<&[u8]>::LEN
    }
    /// Write into a view of at least [`Self::buffer_len`] bytes.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, h: &mut AppendHeader<T>) {
        h.set_list_id(self.list_id);
        h.set_data(self.data);
    }
}

/// A parsed Postcarder sub-header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PostcarderRepr {
    /// The big-endian u32 flow ID.
    pub key: u32,
    /// The 1-based hop number as on the wire (0 is kept here; the report mapping rejects it).
    pub hop_num: u8,
    /// The big-endian u32 hop value.
    pub data: u32,
}

impl PostcarderRepr {
    /// Parse a checked view.
    pub fn parse<T: AsRef<[u8]> + ?Sized>(h: &PostcarderHeader<&T>) -> Result<PostcarderRepr> {
        h.check_len()?;
        Ok(PostcarderRepr {
            key: h.key(),
            hop_num: h.hop_num(),
            data: h.data(),
        })
    }
    /// Sub-header length (9).
    #[inline]
    pub const fn buffer_len(&self) -> usize {
        PostcarderHeader::<&[u8]>::LEN
    }
    /// Write into a view of at least [`Self::buffer_len`] bytes.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, h: &mut PostcarderHeader<T>) {
        h.set_key(self.key);
        h.set_hop_num(self.hop_num);
        h.set_data(self.data);
    }
}

/// The sub-header of a reference report.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DtaPrimitiveRepr {
    /// Opcode 0x01.
    KeyWrite(KeyWriteRepr),
    /// Opcode 0x02.
    Append(AppendRepr),
    /// Opcode 0x03.
    KeyIncrement(KeyIncrementRepr),
    /// Opcode 0x04.
    Postcarder(PostcarderRepr),
}

impl DtaPrimitiveRepr {
    /// The opcode that announces this sub-header.
    #[inline]
    pub const fn opcode(&self) -> Opcode {
        match self {
            DtaPrimitiveRepr::KeyWrite(_) => Opcode::KeyWrite,
            DtaPrimitiveRepr::Append(_) => Opcode::Append,
            DtaPrimitiveRepr::KeyIncrement(_) => Opcode::KeyIncrement,
            DtaPrimitiveRepr::Postcarder(_) => Opcode::Postcard,
        }
    }

    /// Sub-header length.
    #[inline]
    pub const fn buffer_len(&self) -> usize {
        sub_header_len(self.opcode())
    }
}

/// Length of the sub-header an opcode announces.
#[inline]
pub const fn sub_header_len(op: Opcode) -> usize {
    match op {
        Opcode::KeyWrite => KeyWriteHeader::<&[u8]>::LEN,
        Opcode::Append => AppendHeader::<&[u8]>::LEN,
        Opcode::KeyIncrement => KeyIncrementHeader::<&[u8]>::LEN,
        Opcode::Postcard => PostcarderHeader::<&[u8]>::LEN,
    }
}

/// A whole reference-profile report (one UDP payload).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct DtaRepr {
    /// The base header; its `opcode` always matches `primitive`.
    pub header: DtaHeaderRepr,
    /// The sub-header.
    pub primitive: DtaPrimitiveRepr,
}

impl DtaRepr {
    /// Parse a whole UDP payload. Errors, in the order checked: [`Error::Truncated`] (base
    /// header), [`Error::UnknownOpcode`], [`Error::Truncated`] (sub-header),
    /// [`Error::Malformed`] (bytes after the sub-header).
    pub fn parse(payload: &[u8], variant: BaseVariant) -> Result<DtaRepr> {
        let base = DtaHeader::new_checked(payload, variant)?;
        let header = DtaHeaderRepr::parse(&base)?;
        let sub = base.payload();
        let need = sub_header_len(header.opcode);
        if sub.len() < need {
            return Err(Error::Truncated);
        }
        if sub.len() > need {
            return Err(Error::Malformed);
        }
        let primitive = match header.opcode {
            Opcode::KeyWrite => {
                DtaPrimitiveRepr::KeyWrite(KeyWriteRepr::parse(&KeyWriteHeader::new_checked(sub)?)?)
            }
            Opcode::Append => {
                DtaPrimitiveRepr::Append(AppendRepr::parse(&AppendHeader::new_checked(sub)?)?)
            }
            Opcode::KeyIncrement => DtaPrimitiveRepr::KeyIncrement(KeyIncrementRepr::parse(
                &KeyIncrementHeader::new_checked(sub)?,
            )?),
            Opcode::Postcard => DtaPrimitiveRepr::Postcarder(PostcarderRepr::parse(
                &PostcarderHeader::new_checked(sub)?,
            )?),
        };
        Ok(DtaRepr { header, primitive })
    }

    /// Length of the whole report.
    #[inline]
    pub fn buffer_len(&self) -> usize {
        self.header.buffer_len() + self.primitive.buffer_len()
    }

    /// Write the report into the first [`Self::buffer_len`] bytes of `buf`; returns that length.
    /// The base header's opcode is taken from `primitive`.
    pub fn emit(&self, buf: &mut [u8]) -> usize {
        let len = self.buffer_len();
        let mut base = DtaHeader::new_unchecked(&mut buf[..len], self.header.variant);
        DtaHeaderRepr {
            opcode: self.primitive.opcode(),
            ..self.header
        }
        .emit(&mut base);
        let sub = base.payload_mut();
        match &self.primitive {
            DtaPrimitiveRepr::KeyWrite(r) => r.emit(&mut KeyWriteHeader::new_unchecked(sub)),
            DtaPrimitiveRepr::Append(r) => r.emit(&mut AppendHeader::new_unchecked(sub)),
            DtaPrimitiveRepr::KeyIncrement(r) => {
                r.emit(&mut KeyIncrementHeader::new_unchecked(sub))
            }
            DtaPrimitiveRepr::Postcarder(r) => r.emit(&mut PostcarderHeader::new_unchecked(sub)),
        }
        len
    }
}

#[cfg(test)]
mod tests;
