//! An INT shim (2.x or 1.0), its metadata header and the stack behind it, embedded in a
//! truncated packet: read in place and written for tests and `dta gen`. Where the shim is
//! found is `inner`'s business.

use super::metadata::{HopMetadata, MdFormat};
use super::{
    be16, byte, field, ReportError, INT1_MD_HEADER_LEN, INT1_SHIM_LEN, INT_MD_HEADER_LEN,
    INT_SHIM_LEN, MAX_STACK_HOPS,
};

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

/// An INT shim (2.x, or 1.0) and what follows it: the embedded header, and the offset just
/// past the stack. `None` for shims this reader does not take (INT-Destination, reserved
/// types).
pub(super) fn parse_shim(
    b: &[u8],
) -> core::result::Result<Option<(EmbeddedInt<'_>, usize)>, ReportError> {
    let t = byte(b, field::SHIM_TYPE)?;
    // INT 2.x: Type(4) | NPT(2) | R(2) | Length(8, words after the shim) | 16 bits.
    // INT 1.0: Type(8) | Reserved(8) | Length(8, words including the shim) | DSCP(6) R R.
    let (kind, version, header_len, body) = match t >> 4 {
        0 => {
            if t != 1 {
                // 2: destination header; others reserved.
                return Ok(None);
            }
            let words = byte(b, field::SHIM1_LEN)? as usize;
            if words * 4 < INT1_SHIM_LEN + INT1_MD_HEADER_LEN {
                return Err(ReportError::MalformedInner);
            }
            let body = b
                .get(INT1_SHIM_LEN..words * 4)
                .ok_or(ReportError::Truncated)?;
            (IntKind::Md, 1, INT1_MD_HEADER_LEN, body)
        }
        1 | 3 => {
            let words = byte(b, field::SHIM_LEN)? as usize;
            if words * 4 < INT_MD_HEADER_LEN {
                return Err(ReportError::MalformedInner);
            }
            let body = b
                .get(INT_SHIM_LEN..INT_SHIM_LEN + words * 4)
                .ok_or(ReportError::Truncated)?;
            let kind = if t >> 4 == 1 {
                IntKind::Md
            } else {
                IntKind::Mx
            };
            (kind, 2, INT_MD_HEADER_LEN, body)
        }
        // 2: INT-Destination; others reserved.
        _ => return Ok(None),
    };
    if byte(body, field::MD_VER)? >> 4 != version {
        return Err(ReportError::MalformedInner);
    }
    let hop_ml = byte(body, field::MD_HOP_ML)? & 0x1F;
    let stack = &body[header_len..];
    let instruction = be16(body, field::MD_INSTRUCTION.start)?;
    let format = MdFormat::int(version);
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
    let domain_specific_id = if version == 2 {
        let _ = be16(body, field::MD_DS_INSTRUCTION.start)?;
        let _ = be16(body, field::MD_DS_FLAGS.start)?;
        be16(body, field::MD_DS_ID.start)?
    } else {
        0
    };
    let after = INT_SHIM_LEN + body.len();
    Ok(Some((
        EmbeddedInt {
            kind,
            version,
            hop_ml: if kind == IntKind::Md { hop_ml } else { 0 },
            remaining_hop_count: byte(body, field::MD_REMAINING)?,
            instruction,
            domain_specific_id,
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
        out[0] = (match self.kind {
            IntKind::Md => 1,
            IntKind::Mx => 3,
        }) << 4
            | (npt & 3) << 2;
        out[1] = ((n - INT_SHIM_LEN) / 4) as u8;
        out[2..4].copy_from_slice(&shim_field.to_be_bytes());
        let h = &mut out[INT_SHIM_LEN..];
        h[0] = 2 << 4;
        let per_hop = MdFormat::IntInstruction.md_len(self.instruction);
        h[field::MD_HOP_ML] = match self.kind {
            IntKind::Md => (per_hop / 4) as u8 & 0x1F,
            IntKind::Mx => 0,
        };
        h[field::MD_REMAINING] = self.remaining_hop_count;
        h[field::MD_INSTRUCTION].copy_from_slice(&self.instruction.to_be_bytes());
        if self.kind == IntKind::Md {
            let mut at = INT_MD_HEADER_LEN;
            for hop in self.hops.iter().rev() {
                at += MdFormat::IntInstruction.emit(self.instruction, hop, &mut h[at..]);
            }
        }
        n
    }
}
