//! Round-trip estimation and the retransmission timeout of one QP (RFC 6298).
//!
//! Every ACK that covers a frame sent once and timed (Karn's rule: never a resent frame, whose
//! answer may belong to either transmission) is a sample `R`. The first sets SRTT = R and
//! RTTVAR = R/2; later ones RTTVAR = 3/4·RTTVAR + 1/4·|SRTT − R| and SRTT = 7/8·SRTT + 1/8·R.
//! RTO = SRTT + max(G, 4·RTTVAR), clamped to `[min, max]`, where G is the clock granularity
//! (here one poll period). Before the first sample the RTO is the configured initial timeout.
//!
//! Each timeout that goes unanswered doubles the wait for the next one (exponential back-off,
//! §5.5), up to `max`; a new sample, or any answer that shows progress, ends the back-off.

/// Smoothed round-trip time and the timeout derived from it.
#[derive(Debug, Clone, Copy)]
pub struct RttEstimator {
    /// (SRTT, RTTVAR) in ns, after the first sample.
    smoothed: Option<(u64, u64)>,
    initial: u64,
    min: u64,
    max: u64,
    /// Unanswered timeouts since the last progress (the back-off exponent).
    backoff: u32,
    samples: u64,
}

/// Clock granularity G of RFC 6298 (ns): the worker's timers are checked about this often.
pub const GRANULARITY_NS: u64 = 50_000;

impl RttEstimator {
    /// An estimator starting at `initial` ns, its RTO clamped to `[min, max]` ns.
    pub fn new(initial: u64, min: u64, max: u64) -> RttEstimator {
        let max = max.max(min);
        RttEstimator {
            smoothed: None,
            initial: initial.clamp(min, max),
            min,
            max,
            backoff: 0,
            samples: 0,
        }
    }

    /// Feeds one round-trip sample (ns) and ends any back-off.
    pub fn on_sample(&mut self, r: u64) {
        self.samples += 1;
        self.backoff = 0;
        self.smoothed = Some(match self.smoothed {
            None => (r, r / 2),
            Some((srtt, rttvar)) => ((7 * srtt + r) / 8, (3 * rttvar + srtt.abs_diff(r)) / 4),
        });
    }

    /// The responder answered and showed progress: the back-off ends (it exists for a silent
    /// responder; the next loss must still be found one RTO after it happens).
    pub fn on_progress(&mut self) {
        self.backoff = 0;
    }

    /// A timeout expired unanswered: the next wait doubles.
    pub fn on_timeout(&mut self) {
        self.backoff = (self.backoff + 1).min(20);
    }

    /// The timeout without back-off (ns).
    pub fn rto(&self) -> u64 {
        match self.smoothed {
            None => self.initial,
            Some((srtt, rttvar)) => srtt
                .saturating_add(GRANULARITY_NS.max(4 * rttvar))
                .clamp(self.min, self.max),
        }
    }

    /// The wait the running timer uses: the RTO doubled per unanswered timeout, at most `max`.
    pub fn timeout(&self) -> u64 {
        self.rto()
            .saturating_mul(1u64 << self.backoff)
            .min(self.max)
    }

    /// Smoothed RTT (ns), once measured.
    pub fn srtt(&self) -> Option<u64> {
        self.smoothed.map(|(s, _)| s)
    }

    /// Samples taken.
    pub fn samples(&self) -> u64 {
        self.samples
    }

    /// Unanswered timeouts since the last progress.
    pub fn backoff(&self) -> u32 {
        self.backoff
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    #[test]
    fn rfc6298_smoothing_and_clamping() {
        let mut r = RttEstimator::new(20 * MS, 2 * MS, 1000 * MS);
        assert_eq!(r.rto(), 20 * MS, "initial timeout before a sample");
        r.on_sample(4 * MS);
        // SRTT 4, RTTVAR 2: RTO = 4 + 8.
        assert_eq!((r.srtt(), r.rto()), (Some(4 * MS), 12 * MS));
        r.on_sample(8 * MS);
        // RTTVAR = (3·2 + |4 − 8|)/4 = 2.5; SRTT = (7·4 + 8)/8 = 4.5; RTO = 4.5 + 10.
        assert_eq!(r.srtt(), Some(4_500_000));
        assert_eq!(r.rto(), 14_500_000);
        // Tiny steady samples: the floor.
        let mut f = RttEstimator::new(20 * MS, 2 * MS, 1000 * MS);
        for _ in 0..50 {
            f.on_sample(30_000);
        }
        assert_eq!(f.rto(), 2 * MS);
        assert_eq!(f.samples(), 50);
    }

    #[test]
    fn back_off_doubles_until_progress() {
        let mut r = RttEstimator::new(4 * MS, MS, 50 * MS);
        assert_eq!(r.timeout(), 4 * MS);
        r.on_timeout();
        assert_eq!(r.timeout(), 8 * MS);
        r.on_timeout();
        r.on_timeout();
        assert_eq!(r.timeout(), 32 * MS);
        r.on_timeout();
        assert_eq!(r.timeout(), 50 * MS, "capped at max");
        for _ in 0..100 {
            r.on_timeout();
        }
        assert_eq!(r.timeout(), 50 * MS, "no overflow");
        r.on_progress();
        assert_eq!((r.timeout(), r.backoff()), (4 * MS, 0));
    }

    #[test]
    fn a_slower_responder_raises_the_timeout() {
        let mut r = RttEstimator::new(20 * MS, 2 * MS, 1000 * MS);
        for _ in 0..20 {
            r.on_sample(100_000);
        }
        let fast = r.rto();
        // The responder becomes descheduled regularly: samples of 6 ms appear.
        for _ in 0..5 {
            r.on_sample(6 * MS);
        }
        assert!(r.rto() > 6 * MS && r.rto() > fast, "{}", r.rto());
    }
}
