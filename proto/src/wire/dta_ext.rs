//! DTA reports in our *extended profile*, version 1 (see `proto/PROTOCOL.md`).
//!
//! The reference profile caps keys and values at 4 bytes, fixes paths at 5 hops, has an 8-bit
//! global seqnum in only one of its two builds and cannot say which build it is. The extended
//! profile keeps the reference's primitives and opcode numbers and fixes those limits:
//!
//! ```text
//! 0  magic_version u8   0xD1 (high nibble 0xD = extended profile, low nibble = version 1)
//! 1  opcode u8          1 Key-Write, 2 Append, 3 Key-Increment, 4 Postcard
//! 2  flags u8           bit7 immediate, bit6 retransmittable, bits5..4 priority, bits3..0 zero
//! 3  reserved u8        zero
//! 4  seq u32            per-reporter sequence number
//! ```
//!
//! followed by a sub-header with explicit key and value lengths. All multi-byte integers are
//! big-endian. The first byte can never be a reference opcode (0x01..=0x04), so both profiles
//! share UDP port 40040.
//!
//! Parsing is strict: reserved bits or bytes that are not zero, length fields out of range and
//! bytes after the sub-header are [`Error::Malformed`]; a first byte of 0xD0 or 0xD2..=0xDF is
//! [`Error::UnsupportedVersion`], checked before the length so that a future version with a
//! different header size is reported as such, not as truncated.

use crate::types::{Key, Value, MAX_KEY_LEN, MAX_VALUE_LEN};
use crate::wire::dta::Opcode;
use crate::wire::report::Priority;
use crate::wire::{Error, Result};

/// High nibble of the first byte that marks the extended profile.
pub const MAGIC: u8 = 0xD0;
/// Mask selecting the magic nibble of the first byte.
pub const MAGIC_MASK: u8 = 0xF0;
/// The version this module implements.
pub const VERSION: u8 = 1;
/// First byte of every version-1 extended datagram (reports and NACKs).
pub const MAGIC_VERSION: u8 = MAGIC | VERSION;
/// Length of the extended base header.
pub const HEADER_LEN: usize = 8;
/// Longest extended report: a Key-Write with a 16-byte key and a 32-byte value.
pub const MAX_REPORT_LEN: usize = HEADER_LEN + 4 + MAX_KEY_LEN + MAX_VALUE_LEN;
/// Longest path a postcard may announce.
pub const MAX_PATH_LEN: u8 = 16;

/// True if a datagram starting with `first` belongs to the extended profile (any version).
#[inline]
pub const fn is_extended(first: u8) -> bool {
    first & MAGIC_MASK == MAGIC
}

/// Flag bits of the extended base header.
pub mod flags {
    /// Tell the collector's CPU that this report landed.
    pub const IMMEDIATE: u8 = 0x80;
    /// The reporter keeps this report for retransmission: track `seq`, NACK gaps.
    pub const RETRANSMITTABLE: u8 = 0x40;
    /// The two priority bits.
    pub const PRIORITY_MASK: u8 = 0x30;
    /// Shift of the priority bits.
    pub const PRIORITY_SHIFT: u32 = 4;
    /// Bits that must be zero in version 1.
    pub const RESERVED_MASK: u8 = 0x0f;
}

/// Byte offsets of the extended profile: the one definition its views and
/// [`crate::wire::report`]'s fast parser read.
pub(super) mod field {
    pub type Field = core::ops::Range<usize>;

    pub const MAGIC_VERSION: usize = 0;
    pub const OPCODE: usize = 1;
    pub const FLAGS: usize = 2;
    pub const RESERVED: usize = 3;
    pub const SEQ: Field = 4..8;

    // Key-Write, relative to the sub-header.
    pub const KW_REDUNDANCY: usize = 0;
    pub const KW_KEY_LEN: usize = 1;
    pub const KW_VALUE_LEN: usize = 2;
    pub const KW_RESERVED: usize = 3;
    pub const KW_FIXED: usize = 4;

    // Key-Increment.
    pub const KI_REDUNDANCY: usize = 0;
    pub const KI_KEY_LEN: usize = 1;
    pub const KI_RESERVED: Field = 2..4;
    pub const KI_DELTA: Field = 4..12;
    pub const KI_FIXED: usize = 12;

    // Append.
    pub const AP_LIST_ID: Field = 0..4;
    pub const AP_VALUE_LEN: usize = 4;
    pub const AP_RESERVED: Field = 5..8;
    pub const AP_FIXED: usize = 8;

    // Postcard.
    pub const PC_HOP: usize = 0;
    pub const PC_PATH_LEN: usize = 1;
    pub const PC_KEY_LEN: usize = 2;
    pub const PC_RESERVED: usize = 3;
    pub const PC_VALUE: Field = 4..8;
    pub const PC_FIXED: usize = 8;
}

#[inline]
fn be_u32(b: &[u8]) -> u32 {
    u32::from_be_bytes([b[0], b[1], b[2], b[3]])
}

#[inline]
fn truncated_unless(ok: bool) -> Result<()> {
    if ok {
        Ok(())
    } else {
        Err(Error::Truncated)
    }
}

#[inline]
fn malformed_unless(ok: bool) -> Result<()> {
    if ok {
        Ok(())
    } else {
        Err(Error::Malformed)
    }
}

/// A view of the extended base header followed by its payload.
#[derive(Debug, Clone)]
pub struct ExtHeader<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> ExtHeader<T> {
    /// Wrap a buffer without checking it.
    #[inline]
    pub const fn new_unchecked(buffer: T) -> ExtHeader<T> {
        ExtHeader { buffer }
    }

    /// Wrap a buffer, checking the magic, the version and the length (in that order).
    #[inline]
    pub fn new_checked(buffer: T) -> Result<ExtHeader<T>> {
        let h = Self::new_unchecked(buffer);
        h.check_len()?;
        Ok(h)
    }

    /// [`Error::Truncated`] if empty; [`Error::Malformed`] if the first byte is not an extended
    /// magic; [`Error::UnsupportedVersion`] for a version other than 1; [`Error::Truncated`] if
    /// shorter than the 8-byte header.
    #[inline]
    pub fn check_len(&self) -> Result<()> {
        let b = self.buffer.as_ref();
        let first = *b.first().ok_or(Error::Truncated)?;
        if !is_extended(first) {
            return Err(Error::Malformed);
        }
        if first != MAGIC_VERSION {
            return Err(Error::UnsupportedVersion);
        }
        truncated_unless(b.len() >= HEADER_LEN)
    }

    /// The wrapped buffer.
    #[inline]
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// The raw first byte (magic and version).
    #[inline]
    pub fn magic_version(&self) -> u8 {
        self.buffer.as_ref()[field::MAGIC_VERSION]
    }

    /// The version nibble.
    #[inline]
    pub fn version(&self) -> u8 {
        self.magic_version() & !MAGIC_MASK
    }

    /// The raw opcode byte.
    #[inline]
    pub fn opcode(&self) -> u8 {
        self.buffer.as_ref()[field::OPCODE]
    }

    /// The raw flags byte.
    #[inline]
    pub fn flags(&self) -> u8 {
        self.buffer.as_ref()[field::FLAGS]
    }

    /// The `immediate` flag.
    #[inline]
    pub fn immediate(&self) -> bool {
        self.flags() & flags::IMMEDIATE != 0
    }

    /// The `retransmittable` flag.
    #[inline]
    pub fn retransmittable(&self) -> bool {
        self.flags() & flags::RETRANSMITTABLE != 0
    }

    /// The two priority bits, raw (3 is invalid).
    #[inline]
    pub fn priority_bits(&self) -> u8 {
        (self.flags() & flags::PRIORITY_MASK) >> flags::PRIORITY_SHIFT
    }

    /// The flag bits that must be zero.
    #[inline]
    pub fn reserved_flags(&self) -> u8 {
        self.flags() & flags::RESERVED_MASK
    }

    /// The reserved byte (must be zero).
    #[inline]
    pub fn reserved(&self) -> u8 {
        self.buffer.as_ref()[field::RESERVED]
    }

    /// The per-reporter sequence number.
    #[inline]
    pub fn seq(&self) -> u32 {
        be_u32(&self.buffer.as_ref()[field::SEQ])
    }
}

impl<'a, T: AsRef<[u8]> + ?Sized> ExtHeader<&'a T> {
    /// The bytes after the base header (the sub-header).
    #[inline]
    pub fn payload(&self) -> &'a [u8] {
        &self.buffer.as_ref()[HEADER_LEN..]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> ExtHeader<T> {
    /// Set the first byte.
    #[inline]
    pub fn set_magic_version(&mut self, v: u8) {
        self.buffer.as_mut()[field::MAGIC_VERSION] = v;
    }
    /// Set the opcode byte.
    #[inline]
    pub fn set_opcode(&mut self, v: u8) {
        self.buffer.as_mut()[field::OPCODE] = v;
    }
    /// Set the raw flags byte.
    #[inline]
    pub fn set_flags(&mut self, v: u8) {
        self.buffer.as_mut()[field::FLAGS] = v;
    }
    /// Set the reserved byte.
    #[inline]
    pub fn set_reserved(&mut self, v: u8) {
        self.buffer.as_mut()[field::RESERVED] = v;
    }
    /// Set the sequence number (written big-endian).
    #[inline]
    pub fn set_seq(&mut self, v: u32) {
        self.buffer.as_mut()[field::SEQ].copy_from_slice(&v.to_be_bytes());
    }
    /// The bytes after the base header, mutable.
    #[inline]
    pub fn payload_mut(&mut self) -> &mut [u8] {
        &mut self.buffer.as_mut()[HEADER_LEN..]
    }
}

macro_rules! var_view_common {
    ($name:ident, $fixed:expr) => {
        impl<T: AsRef<[u8]>> $name<T> {
            /// Length of the fixed part, before the variable-length key/value bytes.
            pub const FIXED_LEN: usize = $fixed;

            /// Wrap a buffer without checking it.
            #[inline]
            pub const fn new_unchecked(buffer: T) -> Self {
                $name { buffer }
            }

            /// Wrap a buffer, checking that it holds the fixed part and the bytes its length
            /// fields announce.
            #[inline]
            pub fn new_checked(buffer: T) -> Result<Self> {
                let h = Self::new_unchecked(buffer);
                h.check_len()?;
                Ok(h)
            }

            /// [`Error::Truncated`] unless the buffer holds [`Self::total_len`] bytes. Length
            /// fields are not range-checked here (the Repr does that), only honoured.
            #[inline]
            pub fn check_len(&self) -> Result<()> {
                let len = self.buffer.as_ref().len();
                truncated_unless(len >= Self::FIXED_LEN)?;
                truncated_unless(len >= self.total_len())
            }

            /// The wrapped buffer.
            #[inline]
            pub fn into_inner(self) -> T {
                self.buffer
            }
        }
    };
}

/// A view of the extended Key-Write sub-header:
/// `redundancy u8 | key_len u8 | value_len u8 | reserved u8 | key | value`.
#[derive(Debug, Clone)]
pub struct ExtKeyWrite<T: AsRef<[u8]>> {
    buffer: T,
}
var_view_common!(ExtKeyWrite, field::KW_FIXED);

impl<T: AsRef<[u8]>> ExtKeyWrite<T> {
    /// Requested number of copies, N.
    #[inline]
    pub fn redundancy(&self) -> u8 {
        self.buffer.as_ref()[field::KW_REDUNDANCY]
    }
    /// Key length field.
    #[inline]
    pub fn key_len(&self) -> u8 {
        self.buffer.as_ref()[field::KW_KEY_LEN]
    }
    /// Value length field.
    #[inline]
    pub fn value_len(&self) -> u8 {
        self.buffer.as_ref()[field::KW_VALUE_LEN]
    }
    /// The reserved byte (must be zero).
    #[inline]
    pub fn reserved(&self) -> u8 {
        self.buffer.as_ref()[field::KW_RESERVED]
    }
    /// Fixed part plus key plus value.
    #[inline]
    pub fn total_len(&self) -> usize {
        field::KW_FIXED + self.key_len() as usize + self.value_len() as usize
    }
    /// The key bytes.
    #[inline]
    pub fn key(&self) -> &[u8] {
        let start = field::KW_FIXED;
        &self.buffer.as_ref()[start..start + self.key_len() as usize]
    }
    /// The value bytes.
    #[inline]
    pub fn value(&self) -> &[u8] {
        let start = field::KW_FIXED + self.key_len() as usize;
        &self.buffer.as_ref()[start..start + self.value_len() as usize]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> ExtKeyWrite<T> {
    /// Set the redundancy.
    #[inline]
    pub fn set_redundancy(&mut self, v: u8) {
        self.buffer.as_mut()[field::KW_REDUNDANCY] = v;
    }
    /// Set the key length field.
    #[inline]
    pub fn set_key_len(&mut self, v: u8) {
        self.buffer.as_mut()[field::KW_KEY_LEN] = v;
    }
    /// Set the value length field.
    #[inline]
    pub fn set_value_len(&mut self, v: u8) {
        self.buffer.as_mut()[field::KW_VALUE_LEN] = v;
    }
    /// Set the reserved byte.
    #[inline]
    pub fn set_reserved(&mut self, v: u8) {
        self.buffer.as_mut()[field::KW_RESERVED] = v;
    }
    /// The key bytes (as many as the key length field says), mutable.
    #[inline]
    pub fn key_mut(&mut self) -> &mut [u8] {
        let (start, n) = (field::KW_FIXED, self.key_len() as usize);
        &mut self.buffer.as_mut()[start..start + n]
    }
    /// The value bytes (placed after the key), mutable.
    #[inline]
    pub fn value_mut(&mut self) -> &mut [u8] {
        let start = field::KW_FIXED + self.key_len() as usize;
        let n = self.value_len() as usize;
        &mut self.buffer.as_mut()[start..start + n]
    }
}

/// A view of the extended Key-Increment sub-header:
/// `redundancy u8 | key_len u8 | reserved u16 | delta u64 | key`.
#[derive(Debug, Clone)]
pub struct ExtKeyIncrement<T: AsRef<[u8]>> {
    buffer: T,
}
var_view_common!(ExtKeyIncrement, field::KI_FIXED);

impl<T: AsRef<[u8]>> ExtKeyIncrement<T> {
    /// Requested number of counters, N.
    #[inline]
    pub fn redundancy(&self) -> u8 {
        self.buffer.as_ref()[field::KI_REDUNDANCY]
    }
    /// Key length field.
    #[inline]
    pub fn key_len(&self) -> u8 {
        self.buffer.as_ref()[field::KI_KEY_LEN]
    }
    /// The reserved u16 (must be zero).
    #[inline]
    pub fn reserved(&self) -> u16 {
        let b = &self.buffer.as_ref()[field::KI_RESERVED];
        u16::from_be_bytes([b[0], b[1]])
    }
    /// The increment.
    #[inline]
    pub fn delta(&self) -> u64 {
        let b = &self.buffer.as_ref()[field::KI_DELTA];
        u64::from_be_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]])
    }
    /// Fixed part plus key.
    #[inline]
    pub fn total_len(&self) -> usize {
        field::KI_FIXED + self.key_len() as usize
    }
    /// The key bytes.
    #[inline]
    pub fn key(&self) -> &[u8] {
        &self.buffer.as_ref()[field::KI_FIXED..self.total_len()]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> ExtKeyIncrement<T> {
    /// Set the redundancy.
    #[inline]
    pub fn set_redundancy(&mut self, v: u8) {
        self.buffer.as_mut()[field::KI_REDUNDANCY] = v;
    }
    /// Set the key length field.
    #[inline]
    pub fn set_key_len(&mut self, v: u8) {
        self.buffer.as_mut()[field::KI_KEY_LEN] = v;
    }
    /// Set the reserved u16.
    #[inline]
    pub fn set_reserved(&mut self, v: u16) {
        self.buffer.as_mut()[field::KI_RESERVED].copy_from_slice(&v.to_be_bytes());
    }
    /// Set the increment (written big-endian).
    #[inline]
    pub fn set_delta(&mut self, v: u64) {
        self.buffer.as_mut()[field::KI_DELTA].copy_from_slice(&v.to_be_bytes());
    }
    /// The key bytes, mutable.
    #[inline]
    pub fn key_mut(&mut self) -> &mut [u8] {
        let end = self.total_len();
        &mut self.buffer.as_mut()[field::KI_FIXED..end]
    }
}

/// A view of the extended Append sub-header:
/// `list_id u32 | value_len u8 | reserved [u8; 3] | value`.
#[derive(Debug, Clone)]
pub struct ExtAppend<T: AsRef<[u8]>> {
    buffer: T,
}
var_view_common!(ExtAppend, field::AP_FIXED);

impl<T: AsRef<[u8]>> ExtAppend<T> {
    /// The list the entry goes to.
    #[inline]
    pub fn list_id(&self) -> u32 {
        be_u32(&self.buffer.as_ref()[field::AP_LIST_ID])
    }
    /// Value length field.
    #[inline]
    pub fn value_len(&self) -> u8 {
        self.buffer.as_ref()[field::AP_VALUE_LEN]
    }
    /// The three reserved bytes (must be zero).
    #[inline]
    pub fn reserved(&self) -> [u8; 3] {
        let b = &self.buffer.as_ref()[field::AP_RESERVED];
        [b[0], b[1], b[2]]
    }
    /// Fixed part plus value.
    #[inline]
    pub fn total_len(&self) -> usize {
        field::AP_FIXED + self.value_len() as usize
    }
    /// The value bytes.
    #[inline]
    pub fn value(&self) -> &[u8] {
        &self.buffer.as_ref()[field::AP_FIXED..self.total_len()]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> ExtAppend<T> {
    /// Set the list ID (written big-endian).
    #[inline]
    pub fn set_list_id(&mut self, v: u32) {
        self.buffer.as_mut()[field::AP_LIST_ID].copy_from_slice(&v.to_be_bytes());
    }
    /// Set the value length field.
    #[inline]
    pub fn set_value_len(&mut self, v: u8) {
        self.buffer.as_mut()[field::AP_VALUE_LEN] = v;
    }
    /// Set the reserved bytes.
    #[inline]
    pub fn set_reserved(&mut self, v: [u8; 3]) {
        self.buffer.as_mut()[field::AP_RESERVED].copy_from_slice(&v);
    }
    /// The value bytes, mutable.
    #[inline]
    pub fn value_mut(&mut self) -> &mut [u8] {
        let end = self.total_len();
        &mut self.buffer.as_mut()[field::AP_FIXED..end]
    }
}

/// A view of the extended Postcard sub-header:
/// `hop u8 | path_len u8 | key_len u8 | reserved u8 | value u32 | key`.
#[derive(Debug, Clone)]
pub struct ExtPostcard<T: AsRef<[u8]>> {
    buffer: T,
}
var_view_common!(ExtPostcard, field::PC_FIXED);

impl<T: AsRef<[u8]>> ExtPostcard<T> {
    /// 0-based hop index along the path.
    #[inline]
    pub fn hop(&self) -> u8 {
        self.buffer.as_ref()[field::PC_HOP]
    }
    /// Path length in hops; 0 when the reporter does not know it.
    #[inline]
    pub fn path_len(&self) -> u8 {
        self.buffer.as_ref()[field::PC_PATH_LEN]
    }
    /// Flow-key length field.
    #[inline]
    pub fn key_len(&self) -> u8 {
        self.buffer.as_ref()[field::PC_KEY_LEN]
    }
    /// The reserved byte (must be zero).
    #[inline]
    pub fn reserved(&self) -> u8 {
        self.buffer.as_ref()[field::PC_RESERVED]
    }
    /// The hop's 32-bit value.
    #[inline]
    pub fn value(&self) -> u32 {
        be_u32(&self.buffer.as_ref()[field::PC_VALUE])
    }
    /// Fixed part plus key.
    #[inline]
    pub fn total_len(&self) -> usize {
        field::PC_FIXED + self.key_len() as usize
    }
    /// The flow-key bytes.
    #[inline]
    pub fn key(&self) -> &[u8] {
        &self.buffer.as_ref()[field::PC_FIXED..self.total_len()]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> ExtPostcard<T> {
    /// Set the hop index.
    #[inline]
    pub fn set_hop(&mut self, v: u8) {
        self.buffer.as_mut()[field::PC_HOP] = v;
    }
    /// Set the path length.
    #[inline]
    pub fn set_path_len(&mut self, v: u8) {
        self.buffer.as_mut()[field::PC_PATH_LEN] = v;
    }
    /// Set the flow-key length field.
    #[inline]
    pub fn set_key_len(&mut self, v: u8) {
        self.buffer.as_mut()[field::PC_KEY_LEN] = v;
    }
    /// Set the reserved byte.
    #[inline]
    pub fn set_reserved(&mut self, v: u8) {
        self.buffer.as_mut()[field::PC_RESERVED] = v;
    }
    /// Set the hop value (written big-endian).
    #[inline]
    pub fn set_value(&mut self, v: u32) {
        self.buffer.as_mut()[field::PC_VALUE].copy_from_slice(&v.to_be_bytes());
    }
    /// The flow-key bytes, mutable.
    #[inline]
    pub fn key_mut(&mut self) -> &mut [u8] {
        let end = self.total_len();
        &mut self.buffer.as_mut()[field::PC_FIXED..end]
    }
}

/// A parsed extended base header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ExtHeaderRepr {
    /// The primitive.
    pub opcode: Opcode,
    /// The `immediate` flag.
    pub immediate: bool,
    /// The `retransmittable` flag.
    pub retransmittable: bool,
    /// The report's priority.
    pub priority: Priority,
    /// Per-reporter sequence number.
    pub seq: u32,
}

impl ExtHeaderRepr {
    /// Parse a checked view. Errors after the view's own checks: [`Error::UnknownOpcode`], then
    /// [`Error::Malformed`] for priority 3, reserved flag bits or a reserved byte that is not 0.
    pub fn parse<T: AsRef<[u8]> + ?Sized>(h: &ExtHeader<&T>) -> Result<ExtHeaderRepr> {
        h.check_len()?;
        let opcode = Opcode::from_u8(h.opcode())?;
        let priority = Priority::from_bits(h.priority_bits()).ok_or(Error::Malformed)?;
        malformed_unless(h.reserved_flags() == 0 && h.reserved() == 0)?;
        Ok(ExtHeaderRepr {
            opcode,
            immediate: h.immediate(),
            retransmittable: h.retransmittable(),
            priority,
            seq: h.seq(),
        })
    }

    /// Length of the base header (8).
    #[inline]
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    /// Write into a view of at least 8 bytes.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, h: &mut ExtHeader<T>) {
        let mut f = (self.priority as u8) << flags::PRIORITY_SHIFT;
        if self.immediate {
            f |= flags::IMMEDIATE;
        }
        if self.retransmittable {
            f |= flags::RETRANSMITTABLE;
        }
        h.set_magic_version(MAGIC_VERSION);
        h.set_opcode(self.opcode.into());
        h.set_flags(f);
        h.set_reserved(0);
        h.set_seq(self.seq);
    }
}

#[inline]
fn key_len_ok(n: u8) -> bool {
    (1..=MAX_KEY_LEN).contains(&(n as usize))
}

#[inline]
fn value_len_ok(n: usize) -> bool {
    (1..=MAX_VALUE_LEN).contains(&n)
}

#[inline]
fn path_ok(hop: u8, path_len: u8) -> bool {
    path_len <= MAX_PATH_LEN && (path_len == 0 || hop < path_len)
}

/// A parsed extended Key-Write sub-header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ExtKeyWriteRepr {
    /// Requested number of copies, N (not validated here: the translator decides).
    pub redundancy: u8,
    /// The key, 1..=16 bytes.
    pub key: Key,
    /// The value, 1..=32 bytes (an empty value is not representable on the wire).
    pub value: Value,
}

impl ExtKeyWriteRepr {
    /// Parse a checked view.
    pub fn parse<T: AsRef<[u8]> + ?Sized>(h: &ExtKeyWrite<&T>) -> Result<ExtKeyWriteRepr> {
        truncated_unless(h.buffer.as_ref().len() >= field::KW_FIXED)?;
        malformed_unless(key_len_ok(h.key_len()) && value_len_ok(h.value_len() as usize))?;
        h.check_len()?;
        malformed_unless(h.reserved() == 0)?;
        Ok(ExtKeyWriteRepr {
            redundancy: h.redundancy(),
            key: Key::new(h.key()).ok_or(Error::Malformed)?,
            value: Value::new(h.value()).ok_or(Error::Malformed)?,
        })
    }
    /// [`Error::Malformed`] if the value is empty.
    #[inline]
    pub fn check(&self) -> Result<()> {
        malformed_unless(value_len_ok(self.value.len()))
    }
    /// Sub-header length including key and value.
    #[inline]
    pub fn buffer_len(&self) -> usize {
        field::KW_FIXED + self.key.len() + self.value.len()
    }
    /// Write into a view of at least [`Self::buffer_len`] bytes.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, h: &mut ExtKeyWrite<T>) {
        h.set_redundancy(self.redundancy);
        h.set_key_len(self.key.len() as u8);
        h.set_value_len(self.value.len() as u8);
        h.set_reserved(0);
        h.key_mut().copy_from_slice(self.key.as_bytes());
        h.value_mut().copy_from_slice(self.value.as_bytes());
    }
}

/// A parsed extended Key-Increment sub-header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ExtKeyIncrementRepr {
    /// Requested number of counters, N (not validated here).
    pub redundancy: u8,
    /// The key, 1..=16 bytes.
    pub key: Key,
    /// The increment.
    pub delta: u64,
}

impl ExtKeyIncrementRepr {
    /// Parse a checked view.
    pub fn parse<T: AsRef<[u8]> + ?Sized>(h: &ExtKeyIncrement<&T>) -> Result<ExtKeyIncrementRepr> {
        truncated_unless(h.buffer.as_ref().len() >= field::KI_FIXED)?;
        malformed_unless(key_len_ok(h.key_len()))?;
        h.check_len()?;
        malformed_unless(h.reserved() == 0)?;
        Ok(ExtKeyIncrementRepr {
            redundancy: h.redundancy(),
            key: Key::new(h.key()).ok_or(Error::Malformed)?,
            delta: h.delta(),
        })
    }
    /// Sub-header length including the key.
    #[inline]
    pub fn buffer_len(&self) -> usize {
        field::KI_FIXED + self.key.len()
    }
    /// Write into a view of at least [`Self::buffer_len`] bytes.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, h: &mut ExtKeyIncrement<T>) {
        h.set_redundancy(self.redundancy);
        h.set_key_len(self.key.len() as u8);
        h.set_reserved(0);
        h.set_delta(self.delta);
        h.key_mut().copy_from_slice(self.key.as_bytes());
    }
}

/// A parsed extended Append sub-header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ExtAppendRepr {
    /// The list the entry goes to.
    pub list_id: u32,
    /// The entry, 1..=32 bytes.
    pub value: Value,
}

impl ExtAppendRepr {
    /// Parse a checked view.
    pub fn parse<T: AsRef<[u8]> + ?Sized>(h: &ExtAppend<&T>) -> Result<ExtAppendRepr> {
        truncated_unless(h.buffer.as_ref().len() >= field::AP_FIXED)?;
        malformed_unless(value_len_ok(h.value_len() as usize))?;
        h.check_len()?;
        malformed_unless(h.reserved() == [0; 3])?;
        Ok(ExtAppendRepr {
            list_id: h.list_id(),
            value: Value::new(h.value()).ok_or(Error::Malformed)?,
        })
    }
    /// [`Error::Malformed`] if the value is empty.
    #[inline]
    pub fn check(&self) -> Result<()> {
        malformed_unless(value_len_ok(self.value.len()))
    }
    /// Sub-header length including the value.
    #[inline]
    pub fn buffer_len(&self) -> usize {
        field::AP_FIXED + self.value.len()
    }
    /// Write into a view of at least [`Self::buffer_len`] bytes.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, h: &mut ExtAppend<T>) {
        h.set_list_id(self.list_id);
        h.set_value_len(self.value.len() as u8);
        h.set_reserved([0; 3]);
        h.value_mut().copy_from_slice(self.value.as_bytes());
    }
}

/// A parsed extended Postcard sub-header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ExtPostcardRepr {
    /// 0-based hop index; below `path_len` when that is known.
    pub hop: u8,
    /// Path length in hops (1..=16), or 0 when unknown.
    pub path_len: u8,
    /// The flow key, 1..=16 bytes.
    pub key: Key,
    /// The hop's value.
    pub value: u32,
}

impl ExtPostcardRepr {
    /// Parse a checked view.
    pub fn parse<T: AsRef<[u8]> + ?Sized>(h: &ExtPostcard<&T>) -> Result<ExtPostcardRepr> {
        truncated_unless(h.buffer.as_ref().len() >= field::PC_FIXED)?;
        malformed_unless(key_len_ok(h.key_len()) && path_ok(h.hop(), h.path_len()))?;
        h.check_len()?;
        malformed_unless(h.reserved() == 0)?;
        Ok(ExtPostcardRepr {
            hop: h.hop(),
            path_len: h.path_len(),
            key: Key::new(h.key()).ok_or(Error::Malformed)?,
            value: h.value(),
        })
    }
    /// [`Error::Malformed`] if `path_len` exceeds 16 or `hop` is not below a known `path_len`.
    #[inline]
    pub fn check(&self) -> Result<()> {
        malformed_unless(path_ok(self.hop, self.path_len))
    }
    /// Sub-header length including the key.
    #[inline]
    pub fn buffer_len(&self) -> usize {
        field::PC_FIXED + self.key.len()
    }
    /// Write into a view of at least [`Self::buffer_len`] bytes.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, h: &mut ExtPostcard<T>) {
        h.set_hop(self.hop);
        h.set_path_len(self.path_len);
        h.set_key_len(self.key.len() as u8);
        h.set_reserved(0);
        h.set_value(self.value);
        h.key_mut().copy_from_slice(self.key.as_bytes());
    }
}

/// The sub-header of an extended report.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ExtPrimitiveRepr {
    /// Opcode 0x01.
    KeyWrite(ExtKeyWriteRepr),
    /// Opcode 0x02.
    Append(ExtAppendRepr),
    /// Opcode 0x03.
    KeyIncrement(ExtKeyIncrementRepr),
    /// Opcode 0x04.
    Postcard(ExtPostcardRepr),
}

impl ExtPrimitiveRepr {
    /// The opcode that announces this sub-header.
    #[inline]
    pub const fn opcode(&self) -> Opcode {
        match self {
            ExtPrimitiveRepr::KeyWrite(_) => Opcode::KeyWrite,
            ExtPrimitiveRepr::Append(_) => Opcode::Append,
            ExtPrimitiveRepr::KeyIncrement(_) => Opcode::KeyIncrement,
            ExtPrimitiveRepr::Postcard(_) => Opcode::Postcard,
        }
    }

    /// Sub-header length.
    #[inline]
    pub fn buffer_len(&self) -> usize {
        match self {
            ExtPrimitiveRepr::KeyWrite(r) => r.buffer_len(),
            ExtPrimitiveRepr::Append(r) => r.buffer_len(),
            ExtPrimitiveRepr::KeyIncrement(r) => r.buffer_len(),
            ExtPrimitiveRepr::Postcard(r) => r.buffer_len(),
        }
    }

    /// [`Error::Malformed`] if this sub-header cannot be put on the wire (empty value, bad
    /// path length or hop).
    #[inline]
    pub fn check(&self) -> Result<()> {
        match self {
            ExtPrimitiveRepr::KeyWrite(r) => r.check(),
            ExtPrimitiveRepr::Append(r) => r.check(),
            ExtPrimitiveRepr::KeyIncrement(_) => Ok(()),
            ExtPrimitiveRepr::Postcard(r) => r.check(),
        }
    }
}

/// A whole extended-profile report (one UDP payload).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ExtReportRepr {
    /// The base header; its `opcode` always matches `primitive`.
    pub header: ExtHeaderRepr,
    /// The sub-header.
    pub primitive: ExtPrimitiveRepr,
}

impl ExtReportRepr {
    /// Parse a whole UDP payload. Errors, in the order checked: magic/version (see
    /// [`ExtHeader::check_len`]), [`Error::Truncated`] (base header), [`Error::UnknownOpcode`],
    /// [`Error::Malformed`] (header flags/reserved), then per sub-header: [`Error::Truncated`]
    /// (fixed part), [`Error::Malformed`] (length fields out of range), [`Error::Truncated`]
    /// (key/value bytes), [`Error::Malformed`] (reserved bytes, trailing bytes).
    pub fn parse(payload: &[u8]) -> Result<ExtReportRepr> {
        let base = ExtHeader::new_checked(payload)?;
        let header = ExtHeaderRepr::parse(&base)?;
        let sub = base.payload();
        let (primitive, used) = match header.opcode {
            Opcode::KeyWrite => {
                let v = ExtKeyWrite::new_unchecked(sub);
                let r = ExtKeyWriteRepr::parse(&v)?;
                (ExtPrimitiveRepr::KeyWrite(r), v.total_len())
            }
            Opcode::Append => {
                let v = ExtAppend::new_unchecked(sub);
                let r = ExtAppendRepr::parse(&v)?;
                (ExtPrimitiveRepr::Append(r), v.total_len())
            }
            Opcode::KeyIncrement => {
                let v = ExtKeyIncrement::new_unchecked(sub);
                let r = ExtKeyIncrementRepr::parse(&v)?;
                (ExtPrimitiveRepr::KeyIncrement(r), v.total_len())
            }
            Opcode::Postcard => {
                let v = ExtPostcard::new_unchecked(sub);
                let r = ExtPostcardRepr::parse(&v)?;
                (ExtPrimitiveRepr::Postcard(r), v.total_len())
            }
        };
        malformed_unless(sub.len() == used)?;
        Ok(ExtReportRepr { header, primitive })
    }

    /// [`Error::Malformed`] if this report cannot be put on the wire.
    #[inline]
    pub fn check(&self) -> Result<()> {
        self.primitive.check()
    }

    /// Length of the whole report.
    #[inline]
    pub fn buffer_len(&self) -> usize {
        HEADER_LEN + self.primitive.buffer_len()
    }

    /// Write the report into the first [`Self::buffer_len`] bytes of `buf`; returns that
    /// length. The report must pass [`Self::check`] (debug-asserted); the opcode is taken from
    /// `primitive`.
    pub fn emit(&self, buf: &mut [u8]) -> usize {
        debug_assert_eq!(self.check(), Ok(()));
        let len = self.buffer_len();
        let mut base = ExtHeader::new_unchecked(&mut buf[..len]);
        ExtHeaderRepr {
            opcode: self.primitive.opcode(),
            ..self.header
        }
        .emit(&mut base);
        let sub = base.payload_mut();
        match &self.primitive {
            ExtPrimitiveRepr::KeyWrite(r) => r.emit(&mut ExtKeyWrite::new_unchecked(sub)),
            ExtPrimitiveRepr::Append(r) => r.emit(&mut ExtAppend::new_unchecked(sub)),
            ExtPrimitiveRepr::KeyIncrement(r) => r.emit(&mut ExtKeyIncrement::new_unchecked(sub)),
            ExtPrimitiveRepr::Postcard(r) => r.emit(&mut ExtPostcard::new_unchecked(sub)),
        }
        len
    }
}

#[cfg(test)]
mod tests;
