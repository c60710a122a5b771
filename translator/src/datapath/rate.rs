//! Message-rate limiting towards a collector's NIC: a token bucket with priority reserves, so
//! that under overload low-priority reports go first and high-priority ones wait.

use dta_proto::wire::report::Priority;

/// Message-rate cap towards one collector NIC (a token bucket), shared fairly by workers.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RateLimit {
    /// RDMA messages per second for this worker (0 = unlimited).
    pub messages_per_sec: u64,
    /// Bucket depth in messages.
    pub burst: u64,
    /// Share of the bucket only high priority may use (low priority needs tokens above
    /// `low_reserve` of the depth, medium above `medium_reserve`).
    pub low_reserve: f64,
    /// See `low_reserve`.
    pub medium_reserve: f64,
}

impl Default for RateLimit {
    fn default() -> Self {
        RateLimit {
            messages_per_sec: 0,
            burst: 4096,
            low_reserve: 0.5,
            medium_reserve: 0.25,
        }
    }
}

/// A token bucket of RDMA messages towards one collector (one worker's share).
pub struct TokenBucket {
    nano_tokens: u64,
    cap: u64,
    rate: u64,
    last: u64,
    low_floor: u64,
    medium_floor: u64,
}

impl TokenBucket {
    const UNIT: u64 = 1_000_000_000;

    /// A bucket for `r`; `None` when unlimited.
    pub fn new(r: &RateLimit) -> Option<TokenBucket> {
        if r.messages_per_sec == 0 {
            return None;
        }
        let cap = r.burst.max(1).saturating_mul(Self::UNIT);
        Some(TokenBucket {
            nano_tokens: cap,
            cap,
            rate: r.messages_per_sec,
            last: 0,
            low_floor: (cap as f64 * r.low_reserve) as u64,
            medium_floor: (cap as f64 * r.medium_reserve) as u64,
        })
    }

    #[inline]
    fn refill(&mut self, now: u64) {
        if now > self.last {
            let add = (now - self.last).saturating_mul(self.rate);
            self.nano_tokens = self.nano_tokens.saturating_add(add).min(self.cap);
            self.last = now;
        }
    }

    /// Takes `n` messages for a report of `prio` if the bucket allows it.
    #[inline]
    pub fn try_take(&mut self, now: u64, n: u64, prio: Priority) -> bool {
        self.refill(now);
        let need = n * Self::UNIT;
        let floor = match prio {
            Priority::Low => self.low_floor,
            Priority::Medium => self.medium_floor,
            Priority::High => 0,
        };
        if self.nano_tokens >= need + floor {
            self.nano_tokens -= need;
            true
        } else {
            false
        }
    }

    /// Takes `n` messages that must go out whatever the budget (resent frames): as many
    /// tokens as there are, never waiting.
    pub fn charge(&mut self, now: u64, n: u64) {
        self.refill(now);
        self.nano_tokens = self
            .nano_tokens
            .saturating_sub(n.saturating_mul(Self::UNIT));
    }

    /// When `n` tokens will be there (ns).
    pub fn next_token_at(&self, n: u64) -> u64 {
        let need = n * Self::UNIT;
        if self.nano_tokens >= need {
            self.last
        } else {
            self.last + (need - self.nano_tokens).div_ceil(self.rate)
        }
    }
}
