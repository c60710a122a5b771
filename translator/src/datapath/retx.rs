//! The retransmission ring of one requester QP: a copy of every frame sent and not yet
//! confirmed, indexed by PSN.
//!
//! An RC requester keeps what the responder has not acknowledged and, when the responder asks
//! for it again (NAK "PSN sequence error", RNR NAK) or stays silent (ACK timeout), sends it
//! again *unchanged*: same PSN, same bytes. The responder executes each PSN once, so a frame
//! that arrives twice is a harmless duplicate, and no PSN is ever reused for other data.
//!
//! The ring is allocated once, when the QP is created: `capacity` slots (the configured
//! window rounded up to a power of two, so a slot is `psn & (capacity - 1)` and the PSN wrap
//! at 2²⁴ needs no special case) of `slot` bytes each (the longest frame the store emits).
//! Recording a frame is one fixed-size copy into its slot and never allocates. Frames leave
//! the ring when an ACK confirms them, or, when the window is full of unconfirmed frames, the
//! oldest is overwritten: a later request for it cannot be served (an *overrun*, counted in
//! `retx_overruns`; the QP sends a zero-length WRITE at that PSN instead and counts the frame
//! as lost, so the PSN sequence continues without reusing a PSN).

use dta_proto::wire::ib::Psn;
use dta_proto::wire::roce::RoceFrame;

/// Largest window: PSN comparisons need less than half the 24-bit PSN space.
pub const MAX_WINDOW: u32 = 1 << 22;

/// Unconfirmed frames of one QP, indexed by PSN (see the module documentation).
#[derive(Clone)]
pub struct RetxRing {
    /// Bytes per slot.
    slot: usize,
    /// Capacity − 1 (capacity is a power of two).
    mask: u32,
    /// `capacity * slot` bytes.
    buf: Vec<u8>,
    /// One past the newest PSN held.
    end: Psn,
    /// Frames recorded and not released by an ACK (those beyond the capacity were
    /// overwritten; 64 bits never wrap).
    fill: u64,
}

impl std::fmt::Debug for RetxRing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RetxRing")
            .field("start", &self.start())
            .field("end", &self.end)
            .field("len", &self.len())
            .field("capacity", &self.capacity())
            .field("slot", &self.slot)
            .finish()
    }
}

impl RetxRing {
    /// A ring for `window` frames (rounded up to a power of two, at most [`MAX_WINDOW`]) of at
    /// most `slot` bytes each, starting empty at `start`. `None` when `window` or `slot` is 0
    /// (retransmission disabled) or `slot` exceeds a frame's 16-bit length.
    pub fn new(window: u32, slot: usize, start: Psn) -> Option<RetxRing> {
        if window == 0 || slot == 0 || slot > u16::MAX as usize {
            return None;
        }
        let cap = window.min(MAX_WINDOW).next_power_of_two();
        let slot = slot.max(FAST);
        Some(RetxRing {
            slot,
            mask: cap - 1,
            buf: vec![0; cap as usize * slot],
            end: start,
            fill: 0,
        })
    }

    /// Frames the ring can hold.
    pub fn capacity(&self) -> usize {
        self.mask as usize + 1
    }

    /// Bytes preallocated for frames.
    pub fn memory_bytes(&self) -> usize {
        self.buf.len()
    }

    /// Oldest PSN held.
    #[inline]
    pub fn start(&self) -> Psn {
        self.end.sub(self.held())
    }

    #[inline]
    fn held(&self) -> u32 {
        self.fill.min(self.mask as u64 + 1) as u32
    }

    /// One past the newest PSN held.
    #[inline]
    pub fn end(&self) -> Psn {
        self.end
    }

    /// Frames held.
    #[inline]
    pub fn len(&self) -> usize {
        self.held() as usize
    }

    /// True if no frame is held.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.fill == 0
    }

    /// Forgets every frame; the next one recorded must carry `at`.
    pub fn reset(&mut self, at: Psn) {
        self.end = at;
        self.fill = 0;
    }

    /// Keeps a copy of `frame` (a complete Ethernet frame) sent with `psn`.
    ///
    /// Frames are recorded in PSN order: a PSN older than the newest held is ignored (a probe
    /// standing in for an unconfirmed PSN is never kept), a PSN past the next expected one
    /// starts the ring afresh there. When the ring is full the oldest frame is overwritten.
    /// A frame longer than a slot cannot be kept: the ring restarts after it.
    #[inline(always)]
    pub fn record(&mut self, psn: Psn, frame: &[u8]) {
        let Some(at) = self.place(psn) else {
            return;
        };
        let len = frame.len();
        if (HALF..=FAST).contains(&len) {
            // Frames of 64..=128 bytes (slots are at least 128): the first and the last 64
            // bytes, overlapping; two fixed-size copies the compiler inlines instead of a
            // call to memcpy.
            let dst = &mut self.buf[at..at + len];
            if let (Some(d), Some(s)) = (dst.first_chunk_mut::<HALF>(), frame.first_chunk()) {
                *d = *s;
            }
            if len <= HALF + 32 {
                if let (Some(d), Some(s)) = (dst.last_chunk_mut::<32>(), frame.last_chunk()) {
                    *d = *s;
                }
            } else if let (Some(d), Some(s)) = (dst.last_chunk_mut::<HALF>(), frame.last_chunk()) {
                *d = *s;
            }
        } else if len <= self.slot {
            self.buf[at..at + len].copy_from_slice(frame);
        } else {
            self.reset(psn.next());
            return;
        }
        self.end = psn.next();
        self.fill += 1;
    }

    /// The slot for the frame about to be sent with `psn` (the next PSN in order), to build it
    /// in place: the frame is then held once it is written there. `None` (nothing held) for a
    /// PSN out of order. (Always inlined: called per frame, and out of line it cost about
    /// forty instructions a frame.)
    #[inline(always)]
    pub fn slot_for(&mut self, psn: Psn) -> Option<&mut [u8]> {
        let at = self.place(psn)?;
        self.end = psn.next();
        self.fill += 1;
        self.buf.get_mut(at..at + self.slot)
    }

    /// [`RetxRing::slot_for`] of the next PSN in order (`end`), which a caller that checked
    /// it knows: no question of order asked.
    #[inline(always)]
    pub fn slot_in_order(&mut self, psn: Psn) -> &mut [u8] {
        debug_assert!(psn == self.end, "the next PSN in order");
        let at = (psn.value() & self.mask) as usize * self.slot;
        self.end = psn.next();
        self.fill += 1;
        &mut self.buf[at..at + self.slot]
    }

    /// Where the frame sent with `psn` goes: `None` for a PSN older than the newest held (a
    /// probe standing in for an unconfirmed PSN is never kept); a PSN past the next expected
    /// one starts the ring afresh there.
    #[inline(always)]
    fn place(&mut self, psn: Psn) -> Option<usize> {
        if psn != self.end {
            if psn.diff(self.end) < 0 {
                return None;
            }
            self.reset(psn);
        }
        Some((psn.value() & self.mask) as usize * self.slot)
    }

    /// Drops every frame up to and including `psn` (the responder confirmed them).
    #[inline]
    pub fn release_through(&mut self, psn: Psn) {
        let n = psn.next().diff(self.start());
        if n <= 0 {
            return;
        }
        self.fill = self.held().saturating_sub(n as u32) as u64;
    }

    /// True if every frame from `from` up to the newest held is here (`from` may equal
    /// [`RetxRing::end`]: nothing to resend).
    #[inline]
    pub fn holds_from(&self, from: Psn) -> bool {
        from.diff(self.start()) >= 0 && from.diff(self.end) <= 0
    }

    /// The frame sent with `psn`, if held.
    #[inline]
    pub fn get(&self, psn: Psn) -> Option<&[u8]> {
        if psn.diff(self.start()) < 0 || psn.diff(self.end) >= 0 {
            return None;
        }
        let i = (psn.value() & self.mask) as usize;
        let f = &self.buf[i * self.slot..(i + 1) * self.slot];
        Some(&f[..RoceFrame::new_unchecked(f).len().min(self.slot)])
    }
}

/// Shortest slot; frames of `HALF..=FAST` bytes are copied with two fixed-size copies.
const FAST: usize = 128;
const HALF: usize = FAST / 2;

/// Copies a frame of 64..=128 bytes with fixed-size moves (no call to memcpy), others with
/// `copy_from_slice`. `dst` must be at least as long as `src`.
#[inline]
pub fn copy_frame(dst: &mut [u8], src: &[u8]) {
    let len = src.len();
    let dst = &mut dst[..len];
    if (HALF..=FAST).contains(&len) {
        if let (Some(d), Some(s)) = (dst.first_chunk_mut::<HALF>(), src.first_chunk()) {
            *d = *s;
        }
        if len <= HALF + 32 {
            if let (Some(d), Some(s)) = (dst.last_chunk_mut::<32>(), src.last_chunk()) {
                *d = *s;
            }
        } else if let (Some(d), Some(s)) = (dst.last_chunk_mut::<HALF>(), src.last_chunk()) {
            *d = *s;
        }
    } else {
        dst.copy_from_slice(src);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `len` bytes that look like a frame of that length (IPv4 total length set).
    fn frame(tag: u8, len: usize) -> Vec<u8> {
        let mut f: Vec<u8> = (0..len).map(|i| tag.wrapping_add(i as u8)).collect();
        f[16..18].copy_from_slice(&((len - 14) as u16).to_be_bytes());
        f
    }

    #[test]
    fn record_get_release_and_slot_reuse() {
        let mut r = RetxRing::new(3, 64, Psn::new(10)).unwrap();
        assert_eq!(r.capacity(), 4, "rounded up to a power of two");
        for p in 10..14u32 {
            r.record(Psn::new(p), &frame(p as u8, 40 + p as usize));
        }
        assert_eq!(r.len(), 4);
        assert_eq!(r.get(Psn::new(12)).unwrap(), &frame(12, 52)[..]);
        assert!(r.get(Psn::new(14)).is_none());
        // Full: the next frame overwrites the oldest (10).
        r.record(Psn::new(14), &frame(14, 50));
        assert_eq!(
            (r.start(), r.end(), r.len()),
            (Psn::new(11), Psn::new(15), 4)
        );
        assert!(r.get(Psn::new(10)).is_none());
        assert!(!r.holds_from(Psn::new(10)));
        assert!(r.holds_from(Psn::new(11)) && r.holds_from(Psn::new(15)));
        // ACK through 12: slots of 11 and 12 are free for 15 and 16.
        r.release_through(Psn::new(12));
        assert_eq!((r.start(), r.len()), (Psn::new(13), 2));
        r.record(Psn::new(15), &frame(15, 60));
        r.record(Psn::new(16), &frame(16, 61));
        assert_eq!(r.get(Psn::new(13)).unwrap(), &frame(13, 53)[..]);
        assert_eq!(r.get(Psn::new(16)).unwrap(), &frame(16, 61)[..]);
        // A stale release changes nothing; a release past the end empties.
        r.release_through(Psn::new(5));
        assert_eq!(r.len(), 4);
        r.release_through(Psn::new(16));
        assert!(r.is_empty() && r.holds_from(Psn::new(17)));
    }

    #[test]
    fn psn_wrap_and_out_of_order_records() {
        let mut r = RetxRing::new(8, 48, Psn::new(0xFF_FFFD)).unwrap();
        for i in 0..6u32 {
            r.record(Psn::new(0xFF_FFFD).add(i), &frame(i as u8, 48));
        }
        assert_eq!(r.end(), Psn::new(3));
        assert_eq!(r.get(Psn::new(0xFF_FFFF)).unwrap(), &frame(2, 48)[..]);
        assert_eq!(r.get(Psn::new(1)).unwrap(), &frame(4, 48)[..]);
        // An old PSN (a probe standing in) is not kept.
        r.record(Psn::new(0xFF_FFFE), &frame(9, 48));
        assert_eq!(r.get(Psn::new(0xFF_FFFE)).unwrap(), &frame(1, 48)[..]);
        // A PSN past the end restarts the ring there.
        r.record(Psn::new(7), &frame(7, 40));
        assert_eq!((r.start(), r.end(), r.len()), (Psn::new(7), Psn::new(8), 1));
        assert_eq!(r.get(Psn::new(7)).unwrap(), &frame(7, 40)[..]);
        // Too long for a slot: not kept, and nothing before it can be resent.
        r.record(Psn::new(8), &frame(0, 129));
        assert!(r.is_empty() && r.holds_from(Psn::new(9)) && !r.holds_from(Psn::new(8)));
        assert!(RetxRing::new(0, 64, Psn::new(0)).is_none());
    }
}
