//! Per-reporter sequence tracking for retransmittable reports: a gap in a reporter's sequence
//! numbers is answered with a DTA NACK naming what is missing.
//!
//! Reporters are found by hash (O(1) per report, for thousands of reporters); the table holds
//! at most `max_reporters` entries, allocated up front, and reporters beyond that are not
//! tracked (their reports are still translated).

use std::net::SocketAddrV4;

use super::demux::{fast_map, FastMap};

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

/// The next expected sequence number of each reporter.
pub struct ReporterTracker {
    next: FastMap<u64, u32>,
    max: usize,
}

impl ReporterTracker {
    /// A tracker for up to `max` reporters.
    pub fn new(max: usize) -> ReporterTracker {
        ReporterTracker {
            next: fast_map(max),
            max,
        }
    }

    /// Reporters tracked.
    pub fn len(&self) -> usize {
        self.next.len()
    }

    /// True if no reporter is tracked.
    pub fn is_empty(&self) -> bool {
        self.next.is_empty()
    }

    /// Tracks `seq` from `src`. `wide`: 32-bit sequence numbers of the extended profile (a
    /// reporter is learned from its first report); otherwise the reference profile's 8-bit
    /// ones (the tracker starts at 0 and expects 1 first).
    #[inline]
    pub fn track(&mut self, src: SocketAddrV4, seq: u32, wide: bool) -> Sequence {
        let key = (u32::from(*src.ip()) as u64) << 16 | src.port() as u64;
        let mask: u32 = if wide { u32::MAX } else { 0xff };
        let len = self.next.len();
        let next = match self.next.get_mut(&key) {
            Some(n) => n,
            None => {
                if len >= self.max {
                    return Sequence::Untracked;
                }
                if wide {
                    self.next.insert(key, seq.wrapping_add(1));
                    return Sequence::Learned;
                }
                self.next.entry(key).or_insert(1)
            }
        };
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
