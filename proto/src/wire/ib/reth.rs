//! The RDMA Extended Transport Header of WRITEs and READ requests: [`Reth`], [`RethRepr`].

use super::{rd_u32, rd_u64, Rkey, RETH_LEN};
use crate::wire::Result;

mod field {
    use core::ops::Range;
    pub const VA: Range<usize> = 0..8;
    pub const RKEY: Range<usize> = 8..12;
    pub const DMA_LEN: Range<usize> = 12..16;
}

crate::wire::view::fixed_view!(
    /// A view of an RDMA Extended Transport Header.
    Reth,
    RETH_LEN
);

impl<T: AsRef<[u8]>> Reth<T> {
    /// Virtual address.
    #[inline]
    pub fn va(&self) -> u64 {
        rd_u64(self.buffer.as_ref(), field::VA.start)
    }

    /// Remote key.
    #[inline]
    pub fn rkey(&self) -> Rkey {
        Rkey(rd_u32(self.buffer.as_ref(), field::RKEY.start))
    }

    /// DMA length of the whole message.
    #[inline]
    pub fn dma_len(&self) -> u32 {
        rd_u32(self.buffer.as_ref(), field::DMA_LEN.start)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Reth<T> {
    /// Sets the virtual address.
    #[inline]
    pub fn set_va(&mut self, v: u64) {
        self.buffer.as_mut()[field::VA].copy_from_slice(&v.to_be_bytes());
    }

    /// Sets the remote key.
    #[inline]
    pub fn set_rkey(&mut self, k: Rkey) {
        self.buffer.as_mut()[field::RKEY].copy_from_slice(&k.0.to_be_bytes());
    }

    /// Sets the DMA length.
    #[inline]
    pub fn set_dma_len(&mut self, v: u32) {
        self.buffer.as_mut()[field::DMA_LEN].copy_from_slice(&v.to_be_bytes());
    }
}

/// A parsed RETH.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct RethRepr {
    /// Virtual address.
    pub va: u64,
    /// Remote key.
    pub rkey: Rkey,
    /// DMA length of the whole message.
    pub dma_len: u32,
}

impl RethRepr {
    /// Reads the header.
    #[inline]
    pub fn parse<T: AsRef<[u8]>>(h: &Reth<T>) -> Result<Self> {
        h.check_len()?;
        Ok(RethRepr {
            va: h.va(),
            rkey: h.rkey(),
            dma_len: h.dma_len(),
        })
    }

    /// Bytes `emit` writes.
    #[inline]
    pub const fn header_len(&self) -> usize {
        RETH_LEN
    }

    /// Writes the header.
    #[inline]
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, h: &mut Reth<T>) {
        h.set_va(self.va);
        h.set_rkey(self.rkey);
        h.set_dma_len(self.dma_len);
    }

    /// The 16 wire bytes.
    // Assembled in a register so the caller's copy is one 16-byte store; three narrower
    // stores into a local array followed by a 16-byte load would stall store forwarding.
    #[inline]
    pub fn to_bytes(&self) -> [u8; RETH_LEN] {
        ((self.va as u128) << 64 | (self.rkey.0 as u128) << 32 | self.dma_len as u128).to_be_bytes()
    }
}
