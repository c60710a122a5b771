//! Burst containers that carry datagrams between I/O backends and the sans-I/O state machines.
//!
//! A backend receives a burst into its own buffers and hands the pipeline a slice of
//! [`Datagram`]s; the pipeline writes what it wants to send into a [`TxBatch`] that the caller
//! owns and reuses. Both are allocated once, at start-up: pushing a frame never allocates.

use std::net::SocketAddrV4;

/// What a backend saw of the IPv4 header below a datagram, when it saw it.
///
/// Kernel UDP sockets hide the identification and DF bits, which the RoCEv2 ICRC covers; raw
/// backends (AF_XDP, DPDK, pcap, the in-memory harness) see the whole frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IpMeta {
    /// IPv4 identification.
    pub ident: u16,
    /// The don't-fragment flag.
    pub dont_frag: bool,
    /// TTL (masked out of the ICRC; kept for diagnostics).
    pub ttl: u8,
    /// TOS byte (DSCP and ECN).
    pub tos: u8,
}

/// One received UDP datagram, borrowed from the backend's receive buffers.
#[derive(Debug, Clone, Copy)]
pub struct Datagram<'a> {
    /// Source address and port.
    pub src: SocketAddrV4,
    /// Destination address and port.
    pub dst: SocketAddrV4,
    /// IPv4 header details, if the backend saw them.
    pub ip: Option<IpMeta>,
    /// The UDP payload.
    pub payload: &'a [u8],
}

/// A reusable arena of outgoing frames, each with a destination.
///
/// Frames are complete Ethernet frames when `l2` is true (raw backends) or UDP payloads
/// otherwise; the producer decides by what it writes and the backend by what it expects, so
/// both sides agree through configuration, not through this type.
pub struct TxBatch {
    buf: Vec<u8>,
    slot: usize,
    /// Bytes between the starts of consecutive frames (see [`TxBatch::new`]).
    stride: usize,
    frames: Vec<FrameMeta>,
}

/// Cache line size assumed when spacing frames.
const LINE: usize = 64;

/// Per-frame bookkeeping, one push per frame.
#[derive(Debug, Clone, Copy)]
struct FrameMeta {
    len: u16,
    offset: u16,
    dest: SocketAddrV4,
}

impl TxBatch {
    /// An arena for `capacity` frames of at most `slot` bytes each.
    ///
    /// Frames start an odd number of cache lines apart: with a power-of-two slot (2048 is
    /// usual) every frame's first lines would fall into the same few L1 sets, and each batch
    /// would evict whatever else lives there (the ICRC's and the key hashes' tables, measured:
    /// a third more table misses).
    pub fn new(capacity: usize, slot: usize) -> TxBatch {
        assert!(slot <= u16::MAX as usize, "frame slot too large");
        let lines = slot.div_ceil(LINE);
        let stride = (lines | 1) * LINE;
        TxBatch {
            buf: vec![0; capacity * stride],
            slot,
            stride,
            frames: Vec::with_capacity(capacity),
        }
    }

    /// Number of frames queued.
    #[inline]
    pub fn len(&self) -> usize {
        self.frames.len()
    }

    /// True if no frame is queued.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.frames.is_empty()
    }

    /// Frames that still fit.
    #[inline]
    pub fn remaining(&self) -> usize {
        self.frames.capacity() - self.frames.len()
    }

    /// True if no further frame fits.
    #[inline]
    pub fn is_full(&self) -> bool {
        self.frames.len() == self.frames.capacity()
    }

    /// Maximum bytes per frame.
    #[inline]
    pub fn slot_size(&self) -> usize {
        self.slot
    }

    /// Appends a frame written in place by `write`, which returns the frame's length.
    ///
    /// `offset` is where the part a kernel socket should send begins (e.g. 42 to skip the
    /// Ethernet, IPv4 and UDP headers of a RoCEv2 frame; 0 for a bare UDP payload). Returns
    /// `false` (and queues nothing) when the batch is full or `write` returned 0.
    #[inline(always)]
    pub fn push_with<F: FnOnce(&mut [u8]) -> usize>(
        &mut self,
        dest: SocketAddrV4,
        offset: usize,
        write: F,
    ) -> bool {
        let Some(slot) = self.next_slot() else {
            return false;
        };
        let n = write(slot);
        self.commit(dest, offset, n)
    }

    /// The next frame's slot ([`TxBatch::slot_size`] bytes), to write a frame into and then
    /// [`TxBatch::commit`]; `None` when the batch is full. [`TxBatch::push_with`] in two
    /// steps, for a hot path whose frame writer is too large to inline as a closure (the call
    /// cost it about twenty instructions a frame).
    #[inline(always)]
    pub fn next_slot(&mut self) -> Option<&mut [u8]> {
        if self.is_full() {
            return None;
        }
        let at = self.frames.len() * self.stride;
        Some(&mut self.buf[at..at + self.slot])
    }

    /// Queues the `n`-byte frame just written into [`TxBatch::next_slot`], to `dest`, a kernel
    /// socket sending from `offset` on. Returns `false` (and queues nothing) when the batch is
    /// full, `n` is 0 or above the slot size, or `offset` lies past the frame.
    #[inline(always)]
    pub fn commit(&mut self, dest: SocketAddrV4, offset: usize, n: usize) -> bool {
        if n == 0 || n > self.slot || offset > n {
            return false;
        }
        self.commit_fitting(dest, offset, n)
    }

    /// [`TxBatch::commit`] of a frame its writer knows to fit: `n` is not 0, at most the
    /// slot size and not below `offset` (checked in debug builds only; a writer of frames of
    /// a few known lengths checks them once, against [`TxBatch::slot_size`]). Returns
    /// `false` (and queues nothing) when the batch is full.
    #[inline(always)]
    pub fn commit_fitting(&mut self, dest: SocketAddrV4, offset: usize, n: usize) -> bool {
        debug_assert!(n != 0 && n <= self.slot && offset <= n, "a frame that fits");
        if self.is_full() {
            return false;
        }
        self.frames.push(FrameMeta {
            len: n as u16,
            offset: offset as u16,
            dest,
        });
        true
    }

    /// The `i`-th frame in full (e.g. an Ethernet frame).
    #[inline]
    pub fn frame(&self, i: usize) -> &[u8] {
        let at = i * self.stride;
        &self.buf[at..at + self.frames[i].len as usize]
    }

    /// The part of the `i`-th frame a kernel UDP socket sends (from its offset on).
    #[inline]
    pub fn payload(&self, i: usize) -> &[u8] {
        &self.frame(i)[self.frames[i].offset as usize..]
    }

    /// Destination of the `i`-th frame.
    #[inline]
    pub fn dest(&self, i: usize) -> SocketAddrV4 {
        self.frames[i].dest
    }

    /// Iterates over `(dest, payload)` pairs.
    pub fn iter_payloads(&self) -> impl Iterator<Item = (SocketAddrV4, &[u8])> + '_ {
        (0..self.len()).map(move |i| (self.dest(i), self.payload(i)))
    }

    /// Forgets all frames, keeping the memory.
    #[inline]
    pub fn clear(&mut self) {
        self.frames.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    /// Frames of a power-of-two slot start an odd number of cache lines apart (so they spread
    /// over every L1 set), each gets its whole slot, and none overlaps the next.
    #[test]
    fn frames_are_spread_over_cache_sets() {
        let d = SocketAddrV4::new(Ipv4Addr::LOCALHOST, 4791);
        for slot in [64, 100, 128, 2048, 4096] {
            let mut b = TxBatch::new(8, slot);
            for i in 0..8u8 {
                assert!(b.push_with(d, 0, |buf| {
                    assert_eq!(buf.len(), slot);
                    buf.fill(i);
                    slot
                }));
            }
            for i in 0..8 {
                assert!(
                    b.frame(i).iter().all(|&x| x == i as u8),
                    "slot {slot} frame {i}"
                );
            }
            let stride = b.frame(1).as_ptr() as usize - b.frame(0).as_ptr() as usize;
            assert!(
                stride >= slot && stride % LINE == 0 && (stride / LINE) % 2 == 1,
                "{stride}"
            );
        }
    }

    #[test]
    fn push_and_read_back() {
        let mut b = TxBatch::new(2, 64);
        let d = SocketAddrV4::new(Ipv4Addr::LOCALHOST, 4791);
        assert!(b.push_with(d, 1, |buf| {
            buf[..3].copy_from_slice(b"abc");
            3
        }));
        assert!(!b.push_with(d, 0, |_| 0), "empty frames are refused");
        assert!(b.push_with(d, 0, |buf| {
            buf[0] = 7;
            1
        }));
        assert!(b.is_full());
        assert!(!b.push_with(d, 0, |_| 1), "no room");
        assert_eq!(b.frame(0), b"abc");
        assert_eq!(b.payload(0), b"bc");
        assert_eq!(b.payload(1), &[7]);
        b.clear();
        assert!(b.is_empty());
        let e = SocketAddrV4::new(Ipv4Addr::LOCALHOST, 9);
        assert!(b.push_with(e, 1, |buf| {
            buf[..3].copy_from_slice(b"xyz");
            3
        }));
        assert_eq!((b.dest(0), b.payload(0)), (e, &b"yz"[..]));
    }
}
