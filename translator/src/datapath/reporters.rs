//! Per-reporter sequence tracking for retransmittable reports: a gap in a reporter's sequence
//! numbers is answered with a DTA NACK naming what is missing.
//!
//! Reporters are found by hash (O(1) per report, for thousands of reporters) in an
//! open-addressing table of its own, allocated up front: at most `max_reporters` entries in
//! twice as many slots, so a probe always ends at an empty slot; reporters beyond that are not
//! tracked (their reports are still translated). Its own rather than a `HashMap` so that a
//! burst's loop can touch a later datagram's slot before it gets there
//! ([`ReporterTracker::prefetch`]): with thousands of reporters the table outgrows the L1
//! cache, and each report's lookup waited for its slot's line.

use std::net::SocketAddrV4;

use super::demux::hash_u64;

/// What a report's sequence number says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sequence {
    /// The next one expected.
    InOrder,
    /// The reporter's first report (extended profile: the sequence starts there).
    Learned,
    /// The table is full: the reporter is not tracked.
    Untracked,
    /// Behind the expected one (a retransmission or duplicate).
    Late,
    /// Ahead of the expected one: `count` reports from `first_missing` are missing
    /// (`last_in_order` is the newest received in order, for the reference NACK).
    Gap {
        /// The first missing sequence number.
        first_missing: u32,
        /// How many are missing.
        count: u32,
        /// The newest sequence number received in order.
        last_in_order: u32,
    },
}

/// One reporter's slot.
#[derive(Debug, Clone, Copy, Default)]
struct Slot {
    /// The reporter's address and port plus one ([`tag`]); 0: empty.
    tag: u64,
    /// The next sequence number expected from it.
    next: u32,
}

/// A reporter's address and port as a nonzero table tag (48 bits, plus one).
#[inline(always)]
fn tag(src: SocketAddrV4) -> u64 {
    ((u32::from(*src.ip()) as u64) << 16 | src.port() as u64) + 1
}

/// Most reporters one tracker takes (its table: 32 MiB).
pub const MAX_REPORTERS: usize = 1 << 20;

/// The next expected sequence number of each reporter.
pub struct ReporterTracker {
    slots: Box<[Slot]>,
    /// Slots − 1 (a power of two, at least twice `max`).
    mask: usize,
    len: usize,
    max: usize,
}

impl ReporterTracker {
    /// A tracker for up to `max` reporters (at most [`MAX_REPORTERS`]: the configuration
    /// refuses more, and more are not tracked).
    pub fn new(max: usize) -> ReporterTracker {
        let max = max.min(MAX_REPORTERS);
        let slots = (max.max(1) * 2).next_power_of_two();
        ReporterTracker {
            slots: vec![Slot::default(); slots].into_boxed_slice(),
            mask: slots - 1,
            len: 0,
            max,
        }
    }

    /// Reporters tracked.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True if no reporter is tracked.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The slot a probe for `tag` starts at.
    #[inline(always)]
    fn home(&self, tag: u64) -> usize {
        hash_u64(tag) as usize & self.mask
    }

    /// Prefetches the cache line where `src`'s lookup starts, so that
    /// [`ReporterTracker::track`] finds it there a few reports later. Costs a hash.
    #[inline(always)]
    pub fn prefetch(&self, src: SocketAddrV4) {
        dta_proto::cpu::prefetch(&self.slots[self.home(tag(src))]);
    }

    /// Tracks `seq` from `src`. `wide`: 32-bit sequence numbers of the extended profile (a
    /// reporter is learned from its first report); otherwise the reference profile's 8-bit
    /// ones (the tracker starts at 0 and expects 1 first).
    #[inline]
    pub fn track(&mut self, src: SocketAddrV4, seq: u32, wide: bool) -> Sequence {
        let tag = tag(src);
        let mask: u32 = if wide { u32::MAX } else { 0xff };
        let mut at = self.home(tag);
        // At most half the slots are taken: the probe ends at the reporter or an empty slot.
        while self.slots[at].tag != tag {
            if self.slots[at].tag == 0 {
                if self.len >= self.max {
                    return Sequence::Untracked;
                }
                self.len += 1;
                self.slots[at] = Slot {
                    tag,
                    next: if wide { seq.wrapping_add(1) } else { 1 },
                };
                if wide {
                    return Sequence::Learned;
                }
                break;
            }
            at = (at + 1) & self.mask;
        }
        let next = &mut self.slots[at].next;
        let ahead = seq.wrapping_sub(*next) & mask;
        if ahead == 0 {
            *next = next.wrapping_add(1) & mask;
            return Sequence::InOrder;
        }
        let half = if wide { 1u32 << 31 } else { 128 };
        if ahead >= half {
            return Sequence::Late;
        }
        let first = *next;
        *next = seq.wrapping_add(1) & mask;
        Sequence::Gap {
            first_missing: first,
            count: ahead,
            last_in_order: first.wrapping_sub(1) & mask,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    fn addr(i: u32) -> SocketAddrV4 {
        SocketAddrV4::new(Ipv4Addr::from(0x0a00_0000 + i), 40041)
    }

    #[test]
    fn extended_sequences_gaps_and_late_reports() {
        let mut t = ReporterTracker::new(4);
        assert_eq!(t.track(addr(1), 100, true), Sequence::Learned);
        assert_eq!(t.track(addr(1), 101, true), Sequence::InOrder);
        assert_eq!(
            t.track(addr(1), 105, true),
            Sequence::Gap {
                first_missing: 102,
                count: 3,
                last_in_order: 101
            }
        );
        assert_eq!(t.track(addr(1), 103, true), Sequence::Late);
        assert_eq!(t.track(addr(1), 106, true), Sequence::InOrder);
        assert_eq!(t.track(addr(1), u32::MAX, true), Sequence::Late);
    }

    #[test]
    fn reference_sequences_wrap_at_256() {
        let mut t = ReporterTracker::new(4);
        assert_eq!(t.track(addr(1), 1, false), Sequence::InOrder);
        for s in 2..=255u32 {
            assert_eq!(t.track(addr(1), s, false), Sequence::InOrder);
        }
        assert_eq!(t.track(addr(1), 0, false), Sequence::InOrder);
        assert_eq!(
            t.track(addr(1), 3, false),
            Sequence::Gap {
                first_missing: 1,
                count: 2,
                last_in_order: 0
            }
        );
    }

    /// Reporters whose probes start at the same slot (as a sender choosing its source
    /// addresses could arrange), the last slot among them so that the probe wraps around the
    /// table's end, keep their own sequences; the table never holds more than its bound.
    #[test]
    fn reporters_whose_probes_collide_stay_apart() {
        let mut t = ReporterTracker::new(40);
        let last = t.mask;
        let colliding: Vec<SocketAddrV4> = (0..1_000_000u32)
            .map(addr)
            .filter(|&a| t.home(tag(a)) == last)
            .take(40)
            .collect();
        assert_eq!(colliding.len(), 40);
        for (i, &a) in colliding.iter().enumerate() {
            assert_eq!(t.track(a, 1000 * i as u32, true), Sequence::Learned);
        }
        for (i, &a) in colliding.iter().enumerate().rev() {
            assert_eq!(
                t.track(a, 1000 * i as u32 + 1, true),
                Sequence::InOrder,
                "{i}"
            );
        }
        assert_eq!(
            t.track(colliding[7], 7003, true),
            Sequence::Gap {
                first_missing: 7002,
                count: 1,
                last_in_order: 7001
            }
        );
        assert_eq!(t.track(addr(2_000_000), 5, true), Sequence::Untracked);
        assert_eq!(t.len(), 40);
        // The probe for an unknown reporter that collides too ends at an empty slot.
        let other = (1_000_000..2_000_000u32)
            .map(addr)
            .find(|&a| t.home(tag(a)) == last)
            .unwrap();
        assert_eq!(t.track(other, 1, true), Sequence::Untracked);
    }

    #[test]
    fn thousands_of_reporters_stay_apart_and_the_table_is_bounded() {
        let mut t = ReporterTracker::new(10_000);
        for i in 0..10_000 {
            assert_eq!(t.track(addr(i), i * 7, true), Sequence::Learned);
        }
        for i in 0..10_000 {
            assert_eq!(t.track(addr(i), i * 7 + 1, true), Sequence::InOrder, "{i}");
        }
        assert_eq!(t.track(addr(20_000), 5, true), Sequence::Untracked);
        assert_eq!(t.len(), 10_000);
    }
}
