//! The timers of one QP, in one table instead of loose deadline fields. (The tail check, which
//! would move with every frame sent, is derived from the time of the newest frame instead: see
//! `QpTx::tail_deadline`.)

/// The timers a QP runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Timer {
    /// Retransmission timeout: an answer is due (an AckReq'd frame, an atomic, a probe or a
    /// resent frame awaits its ACK).
    Rto = 0,
    /// An answer has been due this long without any response: the QP is broken.
    Silence = 1,
    /// RNR back-off: nothing is sent until it expires.
    Pause = 2,
}

const TIMERS: usize = 3;
const ALL: [Timer; TIMERS] = [Timer::Rto, Timer::Silence, Timer::Pause];

/// When each [`Timer`] fires (ns), if armed.
#[derive(Debug, Clone, Copy, Default)]
pub struct TimerTable {
    at: [Option<u64>; TIMERS],
}

impl TimerTable {
    /// Arms `t` to fire at `at` (replacing any earlier setting).
    #[inline]
    pub fn set(&mut self, t: Timer, at: u64) {
        self.at[t as usize] = Some(at);
    }

    /// Arms `t` unless it is already armed.
    #[inline]
    pub fn set_if_idle(&mut self, t: Timer, at: u64) {
        self.at[t as usize].get_or_insert(at);
    }

    /// Disarms `t`.
    #[inline]
    pub fn stop(&mut self, t: Timer) {
        self.at[t as usize] = None;
    }

    /// When `t` fires, if armed.
    #[inline]
    pub fn get(&self, t: Timer) -> Option<u64> {
        self.at[t as usize]
    }

    /// True if `t` is armed.
    #[inline]
    pub fn is_set(&self, t: Timer) -> bool {
        self.at[t as usize].is_some()
    }

    /// Disarms and returns the first timer that has expired at `now` (in [`Timer`] order).
    #[inline]
    pub fn expire(&mut self, now: u64) -> Option<Timer> {
        let t = ALL
            .into_iter()
            .find(|&t| self.at[t as usize].is_some_and(|at| at <= now))?;
        self.at[t as usize] = None;
        Some(t)
    }

    /// The earliest armed deadline.
    #[inline]
    pub fn next_deadline(&self) -> Option<u64> {
        self.at.iter().flatten().copied().min()
    }

    /// Disarms every timer.
    pub fn clear(&mut self) {
        self.at = [None; TIMERS];
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expiry_in_order_and_next_deadline() {
        let mut t = TimerTable::default();
        assert_eq!(t.next_deadline(), None);
        t.set(Timer::Silence, 50);
        t.set(Timer::Rto, 30);
        t.set_if_idle(Timer::Rto, 10);
        assert_eq!(t.get(Timer::Rto), Some(30), "already armed");
        assert_eq!(t.next_deadline(), Some(30));
        assert_eq!(t.expire(20), None);
        assert_eq!(t.expire(60), Some(Timer::Rto));
        assert_eq!(t.expire(60), Some(Timer::Silence));
        assert_eq!(t.expire(60), None);
        t.set(Timer::Pause, 5);
        t.stop(Timer::Pause);
        assert!(!t.is_set(Timer::Pause));
    }
}
