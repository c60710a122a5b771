//! The Datagram Extended Transport Header of UD sends (CM MADs): [`Deth`], [`DethRepr`].

use super::{rd_u24, rd_u32, wr_u24, Qpn, DETH_LEN};
use crate::wire::Result;

mod field {
    use core::ops::Range;
    pub const QKEY: Range<usize> = 0..4;
    pub const RESERVED: usize = 4;
    pub const SRC_QP: Range<usize> = 5..8;
}

crate::wire::view::fixed_view!(
    /// A view of a Datagram Extended Transport Header.
    Deth,
    DETH_LEN
);

impl<T: AsRef<[u8]>> Deth<T> {
    /// Queue key.
    #[inline]
    pub fn qkey(&self) -> u32 {
        rd_u32(self.buffer.as_ref(), field::QKEY.start)
    }

    /// Source QP.
    #[inline]
    pub fn src_qp(&self) -> Qpn {
        Qpn(rd_u24(self.buffer.as_ref(), field::SRC_QP.start))
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Deth<T> {
    /// Sets the queue key.
    #[inline]
    pub fn set_qkey(&mut self, v: u32) {
        self.buffer.as_mut()[field::QKEY].copy_from_slice(&v.to_be_bytes());
    }

    /// Sets the source QP; the reserved byte is cleared.
    #[inline]
    pub fn set_src_qp(&mut self, q: Qpn) {
        let b = self.buffer.as_mut();
        b[field::RESERVED] = 0;
        wr_u24(b, field::SRC_QP.start, q.0);
    }
}

/// A parsed DETH.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct DethRepr {
    /// Queue key.
    pub qkey: u32,
    /// Source QP.
    pub src_qp: Qpn,
}

impl DethRepr {
    /// Reads the header (the reserved byte is ignored).
    #[inline]
    pub fn parse<T: AsRef<[u8]>>(h: &Deth<T>) -> Result<Self> {
        h.check_len()?;
        Ok(DethRepr {
            qkey: h.qkey(),
            src_qp: h.src_qp(),
        })
    }

    /// Bytes `emit` writes.
    #[inline]
    pub const fn header_len(&self) -> usize {
        DETH_LEN
    }

    /// Writes the header.
    #[inline]
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, h: &mut Deth<T>) {
        h.set_qkey(self.qkey);
        h.set_src_qp(self.src_qp);
    }
}
