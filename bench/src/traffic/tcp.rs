//! TCP retransmissions, from sequence numbers: one direction of a connection at a time.
//!
//! A segment that occupies sequence space (payload, SYN or FIN) is a **retransmission** when
//! its first sequence number was already seen in that direction: the sender sent those bytes
//! before, so the earlier copy (or its acknowledgement) was lost, or the sender thought so.
//! Wireshark's `tcp.analysis.retransmission` asks nearly the same question ("does the
//! segment begin below the highest sequence number sent?") and then calls segments that arrive
//! within one round trip of the highest one *out-of-order* instead; here a reordered segment
//! is recognised by its range never having been seen, which needs no RTT estimate. Like
//! Wireshark, a keep-alive (at most one byte at one below the next expected sequence number,
//! no SYN, FIN or RST) is not a retransmission, and a SYN whose sequence number was not seen
//! starts the direction afresh (a new connection on the same 5-tuple).
//!
//! Memory per direction is bounded: at most [`MAX_RANGES`] disjoint seen ranges are kept; past
//! that, the two lowest merge (the hole between them counts as seen).

use super::decode::TcpSegment;

/// Seen ranges kept per direction.
pub const MAX_RANGES: usize = 32;

/// What a segment is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Segment {
    /// Occupies no sequence space (a pure ACK or RST): nothing to say.
    Empty,
    /// Sequence space not seen before.
    New,
    /// Begins inside sequence space already seen.
    Retransmission,
    /// A keep-alive probe.
    KeepAlive,
}

/// One direction's sequence space.
#[derive(Debug, Clone, Default)]
pub struct SeqSpace {
    /// The sequence number offset 0 stands for.
    base: u32,
    /// Seen ranges `[start, end)`, offsets from `base` (unwrapped past 2^32), sorted, disjoint.
    ranges: Vec<(i64, i64)>,
    /// One past the highest offset seen.
    high: i64,
    started: bool,
}

impl SeqSpace {
    /// Classifies `s` and records its range.
    pub fn segment(&mut self, s: &TcpSegment) -> Segment {
        let len = s.seq_len() as i64;
        if len == 0 {
            return Segment::Empty;
        }
        let syn = s.flags & TcpSegment::SYN != 0;
        if !self.started {
            self.restart(s.seq);
        }
        // Unwrap around the highest offset seen: the nearest position to it.
        let high_seq = self.base.wrapping_add(self.high as u32);
        let start = self.high + s.seq.wrapping_sub(high_seq) as i32 as i64;
        if syn && !self.covered(start) {
            self.restart(s.seq);
            return self.record(0, len);
        }
        let keep_alive = s.payload <= 1
            && s.flags & (TcpSegment::SYN | TcpSegment::FIN | TcpSegment::RST) == 0
            && start == self.high - 1;
        if keep_alive {
            return Segment::KeepAlive;
        }
        if self.covered(start) {
            self.record(start, len);
            return Segment::Retransmission;
        }
        self.record(start, len)
    }

    fn restart(&mut self, seq: u32) {
        self.base = seq;
        self.ranges.clear();
        self.high = 0;
        self.started = true;
    }

    fn covered(&self, at: i64) -> bool {
        let i = self.ranges.partition_point(|&(_, e)| e <= at);
        self.ranges.get(i).is_some_and(|&(s, _)| s <= at)
    }

    fn record(&mut self, start: i64, len: i64) -> Segment {
        let end = start + len;
        // Merge [start, end) with every range it touches.
        let i = self.ranges.partition_point(|&(_, e)| e < start);
        let mut j = i;
        let (mut s, mut e) = (start, end);
        while j < self.ranges.len() && self.ranges[j].0 <= end {
            s = s.min(self.ranges[j].0);
            e = e.max(self.ranges[j].1);
            j += 1;
        }
        self.ranges.splice(i..j, [(s, e)]);
        if self.ranges.len() > MAX_RANGES {
            let (a, b) = (self.ranges[0], self.ranges[1]);
            self.ranges.splice(0..2, [(a.0, b.1)]);
        }
        self.high = self.high.max(end);
        Segment::New
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seg(seq: u32, payload: u32, flags: u8) -> TcpSegment {
        TcpSegment {
            seq,
            flags,
            payload,
        }
    }

    const ACK: u8 = 0x10;
    const SYN: u8 = TcpSegment::SYN;
    const FIN: u8 = TcpSegment::FIN;

    #[test]
    fn retransmissions_reorders_and_keep_alives() {
        let mut d = SeqSpace::default();
        assert_eq!(d.segment(&seg(1000, 0, SYN)), Segment::New);
        assert_eq!(d.segment(&seg(1000, 0, SYN)), Segment::Retransmission);
        assert_eq!(d.segment(&seg(1001, 0, ACK)), Segment::Empty);
        assert_eq!(d.segment(&seg(1001, 100, ACK)), Segment::New);
        // 1201..1301 arrives before 1101..1201: a reorder, not a retransmission.
        assert_eq!(d.segment(&seg(1201, 100, ACK)), Segment::New);
        assert_eq!(d.segment(&seg(1101, 100, ACK)), Segment::New);
        // The same bytes again, and a repacketised copy starting inside them.
        assert_eq!(d.segment(&seg(1101, 100, ACK)), Segment::Retransmission);
        assert_eq!(d.segment(&seg(1150, 300, ACK)), Segment::Retransmission);
        // Keep-alive: one byte at next - 1.
        assert_eq!(d.segment(&seg(1449, 1, ACK)), Segment::KeepAlive);
        assert_eq!(d.segment(&seg(1449, 0, ACK)), Segment::Empty);
        // FIN takes a sequence number; its retransmission (with data) is one.
        assert_eq!(d.segment(&seg(1450, 10, FIN | ACK)), Segment::New);
        assert_eq!(
            d.segment(&seg(1450, 10, FIN | ACK)),
            Segment::Retransmission
        );
        // A new connection on the same 5-tuple starts afresh.
        assert_eq!(d.segment(&seg(77, 0, SYN)), Segment::New);
        assert_eq!(d.segment(&seg(78, 5, ACK)), Segment::New);
        assert_eq!(d.segment(&seg(78, 5, ACK)), Segment::Retransmission);
    }

    #[test]
    fn wraps_past_2_32_and_starts_mid_stream() {
        let mut d = SeqSpace::default();
        // The capture begins mid-connection, just below the wrap.
        assert_eq!(d.segment(&seg(u32::MAX - 99, 100, ACK)), Segment::New);
        assert_eq!(d.segment(&seg(0, 100, ACK)), Segment::New);
        assert_eq!(d.segment(&seg(50, 10, ACK)), Segment::Retransmission);
        assert_eq!(
            d.segment(&seg(u32::MAX - 10, 5, ACK)),
            Segment::Retransmission
        );
        // Data from before the capture began was never seen.
        assert_eq!(d.segment(&seg(u32::MAX - 500, 100, ACK)), Segment::New);
    }

    #[test]
    fn holes_are_bounded() {
        let mut d = SeqSpace::default();
        for i in 0..1000u32 {
            // Every other 10-byte block: a hole between each.
            d.segment(&seg(i * 20, 10, ACK));
            assert!(d.ranges.len() <= MAX_RANGES);
        }
        // The newest blocks are still told apart from their holes.
        assert_eq!(d.segment(&seg(999 * 20, 10, ACK)), Segment::Retransmission);
        assert_eq!(d.segment(&seg(998 * 20 + 10, 10, ACK)), Segment::New);
    }
}
