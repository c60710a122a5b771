//! The atomics' headers: the AtomicETH of Compare & Swap and Fetch & Add requests
//! ([`AtomicEth`], [`AtomicEthRepr`]) and the AtomicAckETH of their acknowledgements
//! ([`AtomicAckEth`], [`AtomicAckEthRepr`]).

use super::{rd_u32, rd_u64, Rkey, ATOMIC_ACK_ETH_LEN, ATOMIC_ETH_LEN};
use crate::wire::Result;

mod field {
    /// AtomicETH.
    pub mod atomic {
        use core::ops::Range;
        pub const VA: Range<usize> = 0..8;
        pub const RKEY: Range<usize> = 8..12;
        pub const SWAP_ADD: Range<usize> = 12..20;
        pub const COMPARE: Range<usize> = 20..28;
    }

    /// AtomicAckETH.
    pub mod atomic_ack {
        use core::ops::Range;
        pub const ORIG: Range<usize> = 0..8;
    }
}

crate::wire::view::fixed_view!(
    /// A view of an Atomic Extended Transport Header.
    AtomicEth,
    ATOMIC_ETH_LEN
);

impl<T: AsRef<[u8]>> AtomicEth<T> {
    /// Virtual address (8-byte aligned for a valid atomic).
    #[inline]
    pub fn va(&self) -> u64 {
        rd_u64(self.buffer.as_ref(), field::atomic::VA.start)
    }

    /// Remote key.
    #[inline]
    pub fn rkey(&self) -> Rkey {
        Rkey(rd_u32(self.buffer.as_ref(), field::atomic::RKEY.start))
    }

    /// Swap (Compare & Swap) or Add (Fetch & Add) operand.
    #[inline]
    pub fn swap_add(&self) -> u64 {
        rd_u64(self.buffer.as_ref(), field::atomic::SWAP_ADD.start)
    }

    /// Compare operand (Compare & Swap only).
    #[inline]
    pub fn compare(&self) -> u64 {
        rd_u64(self.buffer.as_ref(), field::atomic::COMPARE.start)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> AtomicEth<T> {
    /// Sets the virtual address.
    #[inline]
    pub fn set_va(&mut self, v: u64) {
        self.buffer.as_mut()[field::atomic::VA].copy_from_slice(&v.to_be_bytes());
    }

    /// Sets the remote key.
    #[inline]
    pub fn set_rkey(&mut self, k: Rkey) {
        self.buffer.as_mut()[field::atomic::RKEY].copy_from_slice(&k.0.to_be_bytes());
    }

    /// Sets the Swap/Add operand.
    #[inline]
    pub fn set_swap_add(&mut self, v: u64) {
        self.buffer.as_mut()[field::atomic::SWAP_ADD].copy_from_slice(&v.to_be_bytes());
    }

    /// Sets the Compare operand.
    #[inline]
    pub fn set_compare(&mut self, v: u64) {
        self.buffer.as_mut()[field::atomic::COMPARE].copy_from_slice(&v.to_be_bytes());
    }
}

/// A parsed AtomicETH.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct AtomicEthRepr {
    /// Virtual address.
    pub va: u64,
    /// Remote key.
    pub rkey: Rkey,
    /// Swap or Add operand.
    pub swap_add: u64,
    /// Compare operand.
    pub compare: u64,
}

impl AtomicEthRepr {
    /// Reads the header.
    #[inline]
    pub fn parse<T: AsRef<[u8]>>(h: &AtomicEth<T>) -> Result<Self> {
        h.check_len()?;
        Ok(AtomicEthRepr {
            va: h.va(),
            rkey: h.rkey(),
            swap_add: h.swap_add(),
            compare: h.compare(),
        })
    }

    /// Bytes `emit` writes.
    #[inline]
    pub const fn header_len(&self) -> usize {
        ATOMIC_ETH_LEN
    }

    /// Writes the header.
    #[inline]
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, h: &mut AtomicEth<T>) {
        h.set_va(self.va);
        h.set_rkey(self.rkey);
        h.set_swap_add(self.swap_add);
        h.set_compare(self.compare);
    }

    /// The 28 wire bytes.
    #[inline]
    pub fn to_bytes(&self) -> [u8; ATOMIC_ETH_LEN] {
        let mut b = [0u8; ATOMIC_ETH_LEN];
        self.emit(&mut AtomicEth::new_unchecked(&mut b[..]));
        b
    }
}

crate::wire::view::fixed_view!(
    /// A view of an Atomic Acknowledge Extended Transport Header.
    AtomicAckEth,
    ATOMIC_ACK_ETH_LEN
);

impl<T: AsRef<[u8]>> AtomicAckEth<T> {
    /// The value at the target address before the atomic.
    #[inline]
    pub fn orig(&self) -> u64 {
        rd_u64(self.buffer.as_ref(), field::atomic_ack::ORIG.start)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> AtomicAckEth<T> {
    /// Sets the original value.
    #[inline]
    pub fn set_orig(&mut self, v: u64) {
        self.buffer.as_mut()[field::atomic_ack::ORIG].copy_from_slice(&v.to_be_bytes());
    }
}

/// A parsed AtomicAckETH.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct AtomicAckEthRepr {
    /// The value at the target address before the atomic.
    pub orig: u64,
}

impl AtomicAckEthRepr {
    /// Reads the header.
    #[inline]
    pub fn parse<T: AsRef<[u8]>>(h: &AtomicAckEth<T>) -> Result<Self> {
        h.check_len()?;
        Ok(AtomicAckEthRepr { orig: h.orig() })
    }

    /// Bytes `emit` writes.
    #[inline]
    pub const fn header_len(&self) -> usize {
        ATOMIC_ACK_ETH_LEN
    }

    /// Writes the header.
    #[inline]
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, h: &mut AtomicAckEth<T>) {
        h.set_orig(self.orig);
    }
}
