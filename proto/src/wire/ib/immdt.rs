//! The immediate data header of the `_IMM` opcodes: [`ImmDt`], [`ImmDtRepr`].

use super::{rd_u32, IMMDT_LEN};
use crate::wire::Result;

mod field {
    use core::ops::Range;
    pub const IMM: Range<usize> = 0..4;
}

crate::wire::view::fixed_view!(
    /// A view of the immediate data header.
    ImmDt,
    IMMDT_LEN
);

impl<T: AsRef<[u8]>> ImmDt<T> {
    /// The immediate value (big-endian on the wire).
    #[inline]
    pub fn imm(&self) -> u32 {
        rd_u32(self.buffer.as_ref(), field::IMM.start)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> ImmDt<T> {
    /// Sets the immediate value.
    #[inline]
    pub fn set_imm(&mut self, v: u32) {
        self.buffer.as_mut()[field::IMM].copy_from_slice(&v.to_be_bytes());
    }
}

/// A parsed immediate data header.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct ImmDtRepr {
    /// The immediate value.
    pub imm: u32,
}

impl ImmDtRepr {
    /// Reads the header.
    #[inline]
    pub fn parse<T: AsRef<[u8]>>(h: &ImmDt<T>) -> Result<Self> {
        h.check_len()?;
        Ok(ImmDtRepr { imm: h.imm() })
    }

    /// Bytes `emit` writes.
    #[inline]
    pub const fn header_len(&self) -> usize {
        IMMDT_LEN
    }

    /// Writes the header.
    #[inline]
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, h: &mut ImmDt<T>) {
        h.set_imm(self.imm);
    }
}
