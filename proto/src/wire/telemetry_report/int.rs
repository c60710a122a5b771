//! An INT shim (2.x or 1.0), its metadata header and the stack behind it, embedded in a
//! truncated packet: read in place and written for tests and `dta gen`. Where the shim is
//! found is `inner`'s business.

use super::metadata::{HopMetadata, MdFormat};
use super::{
    ReportError, INT1_MD_HEADER_LEN, INT1_SHIM_LEN, INT_MD_HEADER_LEN, INT_SHIM_LEN, MAX_STACK_HOPS,
};

mod field {
    use core::ops::Range;
    // INT 2.x shim: Type(4) | NPT(2) | R(2) | Length(8, words after the shim) | 16 bits that
    // depend on NPT.
    pub const SHIM_TYPE: usize = 0;
    pub const SHIM_LEN: usize = 1;
    pub const SHIM_FIELD: Range<usize> = 2..4;
    // INT 1.0 shim: Type(8) | Reserved(8) | Length(8, words including the shim) | DSCP(6) R R.
    pub const SHIM1_LEN: usize = 2;
    // Metadata header: Ver(4) | flags and reserved (12) | HopML(5, after 3 reserved bits) |
    // Remaining Hop Count(8) | Instruction Bitmap(16) | then, INT 2.x only, Domain Specific
    // ID(16) | DS Instruction(16) | DS Flags(16).
    pub const MD_VER: usize = 0;
    pub const MD_HOP_ML: usize = 2;
    pub const MD_REMAINING: usize = 3;
    pub const MD_INSTRUCTION: Range<usize> = 4..6;
    pub const MD_DS_ID: Range<usize> = 6..8;
    pub const MD_DS_INSTRUCTION: Range<usize> = 8..10;
    pub const MD_DS_FLAGS: Range<usize> = 10..12;
}

/// INT shim types (INT 2.1; an INT 1.0 hop-by-hop stack is `Md`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum IntKind {
    /// INT-MD (INT 1.0: hop-by-hop): instructions and a metadata stack.
    Md,
    /// INT-MX: instructions only; every hop reports for itself.
    Mx,
}

/// An INT-MD (or INT-MX, or INT 1.0 hop-by-hop) header and stack embedded in a truncated
/// packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EmbeddedInt<'a> {
    /// MD or MX.
    pub kind: IntKind,
    /// The metadata header's version: 1 (INT 1.0 shim and header) or 2 (INT 2.x).
    pub version: u8,
    /// Per-hop metadata length in words, domain-specific metadata included (0 for INT-MX).
    pub hop_ml: u8,
    /// Remaining hop count.
    pub remaining_hop_count: u8,
    /// Instruction bitmap.
    pub instruction: u16,
    /// Domain Specific ID.
    pub domain_specific_id: u16,
    /// The stack, newest hop first (`hop_ml` words per hop).
    pub stack: &'a [u8],
}

impl<'a> EmbeddedInt<'a> {
    /// Hops in the stack.
    #[inline]
    pub fn hops(&self) -> usize {
        match self.hop_ml {
            0 => 0,
            ml => self.stack.len() / (ml as usize * 4),
        }
    }

    /// The bitmap format of the hops' metadata (INT 1.0 or 2.x).
    #[inline]
    pub fn format(&self) -> MdFormat {
        MdFormat::int(self.version)
    }

    /// Hop `i` counted from the source (0 is the first hop that pushed metadata; the stack
    /// holds the newest first): the Instruction Bitmap's fields, read from the start of the
    /// hop's `hop_ml` words (any domain-specific metadata after them is skipped). `None`
    /// beyond [`EmbeddedInt::hops`].
    #[inline]
    pub fn hop_from_source(&self, i: usize) -> Option<HopMetadata> {
        let n = self.hops();
        if i >= n {
            return None;
        }
        let w = self.hop_ml as usize * 4;
        let at = (n - 1 - i) * w;
        self.format()
            .parse(self.instruction, self.stack.get(at..at + w)?)
            .ok()
    }
}

/// Which shim a first byte announces, as (kind, metadata header version); `None` for shims
/// this reader does not take (INT 2.x INT-Destination, INT 1.0 destination, reserved types).
/// An INT 2.x type is in the high nibble; an INT 1.0 type fills the byte (1 or 2, high nibble 0).
#[inline]
pub const fn shim_kind(first: u8) -> Option<(IntKind, u8)> {
    match first >> 4 {
        0 if first == 1 => Some((IntKind::Md, 1)),
        1 => Some((IntKind::Md, 2)),
        3 => Some((IntKind::Mx, 2)),
        _ => None,
    }
}

/// A view of an INT shim (INT 2.x or INT 1.0, both 4 bytes) and the metadata header and stack
/// its Length covers.
#[derive(Debug, Clone, Copy)]
pub struct IntShim<T: AsRef<[u8]>> {
    buffer: T,
    version: u8,
}

impl<T: AsRef<[u8]>> IntShim<T> {
    /// Wraps a buffer holding a shim of `version` (1: INT 1.0, else 2.x) without checking it.
    #[inline]
    pub const fn new_unchecked(buffer: T, version: u8) -> IntShim<T> {
        IntShim { buffer, version }
    }

    /// Wraps a buffer holding a whole shim of `version`: its Length byte must be there
    /// ([`ReportError::Truncated`]), cover at least a metadata header
    /// ([`ReportError::MalformedInner`]), and fit the buffer ([`ReportError::Truncated`]).
    #[inline]
    pub fn new_checked(buffer: T, version: u8) -> Result<IntShim<T>, ReportError> {
        let s = IntShim::new_unchecked(buffer, version);
        let b = s.buffer.as_ref();
        let (len_at, min) = if version == 1 {
            (field::SHIM1_LEN, INT1_SHIM_LEN + INT1_MD_HEADER_LEN)
        } else {
            (field::SHIM_LEN, INT_SHIM_LEN + INT_MD_HEADER_LEN)
        };
        if b.len() <= len_at {
            return Err(ReportError::Truncated);
        }
        let words = b[len_at] as usize;
        // INT 2.x counts the words after the shim, INT 1.0 the shim's too.
        let body = if version == 1 {
            words * 4
        } else {
            INT_SHIM_LEN + words * 4
        };
        if body < min {
            return Err(ReportError::MalformedInner);
        }
        if b.len() < body {
            return Err(ReportError::Truncated);
        }
        Ok(s)
    }

    /// Bytes of shim, metadata header and stack, as Length says.
    #[inline]
    pub fn total_len(&self) -> usize {
        let b = self.buffer.as_ref();
        if self.version == 1 {
            b[field::SHIM1_LEN] as usize * 4
        } else {
            INT_SHIM_LEN + b[field::SHIM_LEN] as usize * 4
        }
    }

    /// NPT (INT 2.x): what the 16-bit field holds and what follows the stack.
    #[inline]
    pub fn npt(&self) -> u8 {
        (self.buffer.as_ref()[field::SHIM_TYPE] >> 2) & 0x3
    }

    /// The 16 bits whose meaning NPT gives (INT 2.x): the original destination port (NPT 1)
    /// or IP protocol (NPT 2).
    #[inline]
    pub fn npt_field(&self) -> u16 {
        let b = self.buffer.as_ref();
        u16::from_be_bytes([b[field::SHIM_FIELD.start], b[field::SHIM_FIELD.start + 1]])
    }

    /// The metadata header and stack.
    #[inline]
    pub fn md(&self) -> &[u8] {
        &self.buffer.as_ref()[INT_SHIM_LEN..self.total_len()]
    }
}

impl<'a> IntShim<&'a [u8]> {
    /// [`IntShim::md`] for as long as the buffer.
    #[inline]
    pub fn into_md(self) -> &'a [u8] {
        let end = self.total_len();
        &self.buffer[INT_SHIM_LEN..end]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> IntShim<T> {
    /// Sets an INT 2.x shim's type (MD 1, MX 3) and NPT.
    #[inline]
    pub fn set_type_npt(&mut self, kind: IntKind, npt: u8) {
        let t = match kind {
            IntKind::Md => 1,
            IntKind::Mx => 3,
        };
        self.buffer.as_mut()[field::SHIM_TYPE] = t << 4 | (npt & 3) << 2;
    }

    /// Sets an INT 2.x shim's Length (words after the shim).
    #[inline]
    pub fn set_words(&mut self, words: u8) {
        self.buffer.as_mut()[field::SHIM_LEN] = words;
    }

    /// Sets the NPT-dependent 16 bits.
    #[inline]
    pub fn set_npt_field(&mut self, v: u16) {
        self.buffer.as_mut()[field::SHIM_FIELD].copy_from_slice(&v.to_be_bytes());
    }
}

/// A view of an INT metadata header (INT 2.x: 12 bytes; INT 1.0: 8) and the stack behind it.
#[derive(Debug, Clone, Copy)]
pub struct IntMdHeader<T: AsRef<[u8]>> {
    buffer: T,
    version: u8,
}

impl<T: AsRef<[u8]>> IntMdHeader<T> {
    /// Wraps a buffer holding a header of `version` (1: INT 1.0, else 2.x) without checking.
    #[inline]
    pub const fn new_unchecked(buffer: T, version: u8) -> IntMdHeader<T> {
        IntMdHeader { buffer, version }
    }

    /// Wraps a buffer that holds the whole header ([`ReportError::Truncated`] if not).
    #[inline]
    pub fn new_checked(buffer: T, version: u8) -> Result<IntMdHeader<T>, ReportError> {
        let h = IntMdHeader::new_unchecked(buffer, version);
        if h.buffer.as_ref().len() < h.header_len() {
            return Err(ReportError::Truncated);
        }
        Ok(h)
    }

    /// Bytes of the header.
    #[inline]
    pub const fn header_len(&self) -> usize {
        if self.version == 1 {
            INT1_MD_HEADER_LEN
        } else {
            INT_MD_HEADER_LEN
        }
    }

    /// Ver.
    #[inline]
    pub fn version(&self) -> u8 {
        self.buffer.as_ref()[field::MD_VER] >> 4
    }

    /// HopML: words of metadata per hop (5 bits).
    #[inline]
    pub fn hop_ml(&self) -> u8 {
        self.buffer.as_ref()[field::MD_HOP_ML] & 0x1F
    }

    /// Remaining Hop Count.
    #[inline]
    pub fn remaining_hop_count(&self) -> u8 {
        self.buffer.as_ref()[field::MD_REMAINING]
    }

    #[inline]
    fn be16(&self, r: core::ops::Range<usize>) -> u16 {
        let b = self.buffer.as_ref();
        u16::from_be_bytes([b[r.start], b[r.start + 1]])
    }

    /// Instruction Bitmap.
    #[inline]
    pub fn instruction(&self) -> u16 {
        self.be16(field::MD_INSTRUCTION)
    }

    /// Domain Specific ID (INT 2.x; 0 for INT 1.0, whose header has none).
    #[inline]
    pub fn domain_specific_id(&self) -> u16 {
        if self.version == 1 {
            0
        } else {
            self.be16(field::MD_DS_ID)
        }
    }

    /// DS Instruction (INT 2.x).
    #[inline]
    pub fn ds_instruction(&self) -> u16 {
        self.be16(field::MD_DS_INSTRUCTION)
    }

    /// DS Flags (INT 2.x).
    #[inline]
    pub fn ds_flags(&self) -> u16 {
        self.be16(field::MD_DS_FLAGS)
    }

    /// The stack after the header.
    #[inline]
    pub fn stack(&self) -> &[u8] {
        &self.buffer.as_ref()[self.header_len()..]
    }
}

impl<'a> IntMdHeader<&'a [u8]> {
    /// [`IntMdHeader::stack`] for as long as the buffer.
    #[inline]
    pub fn into_stack(self) -> &'a [u8] {
        let at = self.header_len();
        &self.buffer[at..]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> IntMdHeader<T> {
    /// Sets Ver.
    #[inline]
    pub fn set_version(&mut self, v: u8) {
        self.buffer.as_mut()[field::MD_VER] = v << 4;
    }

    /// Sets HopML.
    #[inline]
    pub fn set_hop_ml(&mut self, words: u8) {
        self.buffer.as_mut()[field::MD_HOP_ML] = words & 0x1F;
    }

    /// Sets the Remaining Hop Count.
    #[inline]
    pub fn set_remaining_hop_count(&mut self, v: u8) {
        self.buffer.as_mut()[field::MD_REMAINING] = v;
    }

    /// Sets the Instruction Bitmap.
    #[inline]
    pub fn set_instruction(&mut self, v: u16) {
        self.buffer.as_mut()[field::MD_INSTRUCTION].copy_from_slice(&v.to_be_bytes());
    }
}

/// An INT shim (2.x, or 1.0) and what follows it: the embedded header, and the offset just
/// past the stack. `None` for shims this reader does not take (INT-Destination, reserved
/// types).
pub(super) fn parse_shim(
    b: &[u8],
) -> core::result::Result<Option<(EmbeddedInt<'_>, usize)>, ReportError> {
    let t = *b.first().ok_or(ReportError::Truncated)?;
    let Some((kind, version)) = shim_kind(t) else {
        return Ok(None);
    };
    let shim = IntShim::new_checked(b, version)?;
    let after = shim.total_len();
    let h = IntMdHeader::new_checked(shim.into_md(), version)?;
    if h.version() != version {
        return Err(ReportError::MalformedInner);
    }
    let hop_ml = h.hop_ml();
    let instruction = h.instruction();
    let format = MdFormat::int(version);
    let stack = h.into_stack();
    if kind == IntKind::Md {
        let per_hop = hop_ml as usize * 4;
        // Hop ML counts domain-specific metadata (or a hop's padding) after the bitmap's
        // fields: it may exceed what the bitmap selects, never fall short of it.
        let bad = if per_hop == 0 {
            !stack.is_empty()
        } else {
            stack.len() % per_hop != 0
                || stack.len() / per_hop > MAX_STACK_HOPS
                || format.md_len(instruction) > per_hop
        };
        if bad {
            return Err(ReportError::BadLength);
        }
    }
    Ok(Some((
        EmbeddedInt {
            kind,
            version,
            hop_ml: if kind == IntKind::Md { hop_ml } else { 0 },
            remaining_hop_count: h.remaining_hop_count(),
            instruction,
            domain_specific_id: h.domain_specific_id(),
            stack,
        },
        after,
    )))
}

/// An embedded INT header and stack to emit (tests and `dta gen`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EmbeddedIntRepr<'h> {
    /// MD (with `hops`) or MX (no stack).
    pub kind: IntKind,
    /// Instruction bitmap (each hop's fields).
    pub instruction: u16,
    /// Remaining hop count.
    pub remaining_hop_count: u8,
    /// Hops in path order, the source first (emitted newest first).
    pub hops: &'h [HopMetadata],
}

impl EmbeddedIntRepr<'_> {
    /// Shim, header and stack length.
    pub fn buffer_len(&self) -> usize {
        INT_SHIM_LEN + INT_MD_HEADER_LEN + self.stack_len()
    }

    fn stack_len(&self) -> usize {
        match self.kind {
            IntKind::Md => self.hops.len() * MdFormat::IntInstruction.md_len(self.instruction),
            IntKind::Mx => 0,
        }
    }

    /// Emits shim (with `npt` and its 16-bit field), header and stack; returns the length.
    pub(super) fn emit(&self, npt: u8, shim_field: u16, out: &mut [u8]) -> usize {
        let n = self.buffer_len();
        let out = &mut out[..n];
        out.fill(0);
        let mut shim = IntShim::new_unchecked(&mut *out, 2);
        shim.set_type_npt(self.kind, npt);
        shim.set_words(((n - INT_SHIM_LEN) / 4) as u8);
        shim.set_npt_field(shim_field);
        let h = &mut out[INT_SHIM_LEN..];
        let per_hop = MdFormat::IntInstruction.md_len(self.instruction);
        let mut md = IntMdHeader::new_unchecked(&mut *h, 2);
        md.set_version(2);
        md.set_hop_ml(match self.kind {
            IntKind::Md => (per_hop / 4) as u8,
            IntKind::Mx => 0,
        });
        md.set_remaining_hop_count(self.remaining_hop_count);
        md.set_instruction(self.instruction);
        if self.kind == IntKind::Md {
            let mut at = INT_MD_HEADER_LEN;
            for hop in self.hops.iter().rev() {
                at += MdFormat::IntInstruction.emit(self.instruction, hop, &mut h[at..]);
            }
        }
        n
    }
}
