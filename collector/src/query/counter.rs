//! Key-Increment queries: the minimum of a key's N counters (a count-min sketch), and epochs.
//!
//! Translators add to N counters per report with RDMA FETCH_ADD, so every counter of a key
//! holds at least the key's true count; the smallest is the tightest upper bound.
//!
//! Counters only grow, so operators reset them in *epochs*: the collector zeroes the region
//! (on a schedule or on demand) and bumps an epoch number with the time it started. A reset
//! races with in-flight FETCH_ADDs by design, like any count-min epoch: increments landing
//! while the region is being zeroed are counted in the old or the new epoch, never lost twice.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use dta_proto::hash::{KeyHasher, MAX_REDUNDANCY};
use dta_proto::layout::CounterLayout;
use dta_proto::Key;

use crate::memory::Region;

/// The answer to a Key-Increment query.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CounterAnswer {
    /// The estimate: the minimum of the counters read (never below the true count).
    pub estimate: u64,
    /// The counters read, replica order (`counters[..n]` valid).
    pub counters: [u64; MAX_REDUNDANCY],
    /// How many counters were read.
    pub n: u8,
}

impl CounterAnswer {
    /// The counters read.
    pub fn counters(&self) -> &[u64] {
        &self.counters[..self.n as usize]
    }
}

/// A Key-Increment store as the query engine sees it.
pub struct CounterView<'a> {
    /// The store's memory.
    pub region: &'a Region,
    /// Its layout.
    pub layout: CounterLayout,
    /// Its slot functions (the same as Key-Write's).
    pub hasher: KeyHasher,
}

impl CounterView<'_> {
    /// The count-min estimate of `key` over its first `n` counters (clamped to 1..=8). `n`
    /// must be the store's redundancy N: a counter the key's reports never added to makes the
    /// minimum fall below the key's true count.
    pub fn query(&self, key: &Key, n: usize) -> CounterAnswer {
        let n = n.clamp(1, MAX_REDUNDANCY);
        let mut slots = [0u32; MAX_REDUNDANCY];
        self.hasher.slots(key, n, &mut slots);
        let mut a = CounterAnswer {
            estimate: u64::MAX,
            counters: [0; MAX_REDUNDANCY],
            n: n as u8,
        };
        for (c, &s) in a.counters.iter_mut().zip(&slots[..n]) {
            // A counter outside the region cannot exist (the layout masks slots); read as 0.
            *c = self
                .region
                .load_u64(self.layout.slot_offset(s))
                .unwrap_or(0);
            a.estimate = a.estimate.min(*c);
        }
        a
    }

    /// Fraction of non-zero counters and their sum, by sampling up to `samples` counters
    /// evenly; the sum is scaled to the whole store (the `total` of the count-min bound).
    pub fn occupancy(&self, samples: u32) -> (f64, f64) {
        let slots = self.layout.slots();
        let step = (slots / samples.max(1)).max(1);
        let (mut used, mut seen, mut sum) = (0u64, 0u64, 0f64);
        let mut s = 0u32;
        while s < slots {
            if let Ok(v) = self.region.load_u64(self.layout.slot_offset(s)) {
                seen += 1;
                used += (v != 0) as u64;
                sum += v as f64;
            }
            s = s.saturating_add(step);
        }
        if seen == 0 {
            return (0.0, 0.0);
        }
        // Each increment lands in n counters; dividing by n is the caller's business.
        (used as f64 / seen as f64, sum * slots as f64 / seen as f64)
    }
}

/// Epoch bookkeeping of one Key-Increment store, shared by every control-plane thread.
#[derive(Debug)]
pub struct Epochs {
    number: AtomicU64,
    started_unix_ms: AtomicU64,
    resets: AtomicU64,
    /// Reset period in seconds (0: only on demand).
    pub period_secs: u64,
}

/// A snapshot of a store's epoch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct EpochInfo {
    /// Epoch number (0 until the first reset).
    pub epoch: u64,
    /// When it started, in milliseconds since the Unix epoch (collector start for epoch 0).
    pub started_unix_ms: u64,
    /// Resets performed so far.
    pub resets: u64,
    /// Scheduled period in seconds (0: on demand only).
    pub period_secs: u64,
}

fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

impl Epochs {
    /// Epoch 0, starting now, resetting every `period_secs` (0: on demand only).
    pub fn new(period_secs: u64) -> Epochs {
        Epochs {
            number: AtomicU64::new(0),
            started_unix_ms: AtomicU64::new(unix_ms()),
            resets: AtomicU64::new(0),
            period_secs,
        }
    }

    /// The current epoch.
    pub fn info(&self) -> EpochInfo {
        EpochInfo {
            epoch: self.number.load(Ordering::Acquire),
            started_unix_ms: self.started_unix_ms.load(Ordering::Acquire),
            resets: self.resets.load(Ordering::Relaxed),
            period_secs: self.period_secs,
        }
    }

    /// Zeroes `region` and starts a new epoch; returns it.
    pub fn reset(&self, region: &Region) -> EpochInfo {
        // Zeroing the whole mapping is always in bounds.
        let _ = region.zero(0, region.len());
        self.started_unix_ms.store(unix_ms(), Ordering::Release);
        self.number.fetch_add(1, Ordering::AcqRel);
        self.resets.fetch_add(1, Ordering::Relaxed);
        self.info()
    }

    /// True when a scheduled reset is due at `now_unix_ms`.
    pub fn due(&self, now_unix_ms: u64) -> bool {
        self.period_secs > 0
            && now_unix_ms.saturating_sub(self.started_unix_ms.load(Ordering::Acquire))
                >= self.period_secs.saturating_mul(1000)
    }

    /// Resets `region` if a scheduled reset is due now; returns the new epoch if it did.
    pub fn tick(&self, region: &Region) -> Option<EpochInfo> {
        self.due(unix_ms()).then(|| self.reset(region))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use dta_proto::hash::HashProfile;

    fn view(region: &Region, slots: u32, profile: HashProfile) -> CounterView<'_> {
        CounterView {
            region,
            layout: CounterLayout::new(slots).unwrap(),
            hasher: KeyHasher::new(profile, slots).unwrap(),
        }
    }

    #[test]
    fn minimum_of_hand_written_counters() {
        let r = Region::anonymous(64 * 8, false).unwrap();
        for p in [HashProfile::Independent, HashProfile::Reference] {
            r.zero(0, r.len()).unwrap();
            let v = view(&r, 64, p);
            let key = Key::new(&[10, 0, 0, 1]).unwrap();
            let s: Vec<u32> = (0..3).map(|i| v.hasher.slot(&key, i)).collect();
            // Hand-computed image: counters 0x0102030405060708 (LE bytes), 5 and 9.
            let vals = [5u64, 9, 0x0102_0304_0506_0708];
            for (&slot, &c) in s.iter().zip(&vals) {
                r.write(slot as u64 * 8, &c.to_le_bytes()).unwrap();
            }
            let distinct = s.iter().collect::<std::collections::HashSet<_>>().len();
            let a = v.query(&key, 3);
            assert_eq!(a.n, 3);
            if distinct == 3 {
                assert_eq!(a.counters(), &vals[..]);
                assert_eq!(a.estimate, 5);
            }
            assert_eq!(v.query(&key, 1).estimate, a.counters[0]);
            // Another key's increments only ever raise the estimate.
            let other = Key::new(&[10, 0, 0, 2]).unwrap();
            for i in 0..3 {
                r.fetch_add(v.layout.slot_offset(v.hasher.slot(&other, i)), 100)
                    .unwrap();
            }
            assert!(v.query(&key, 3).estimate >= a.estimate);
        }
    }

    #[test]
    fn fetch_add_sketch_never_underestimates() {
        let r = Region::anonymous(8192 * 8, false).unwrap();
        let v = view(&r, 8192, HashProfile::Independent);
        let mut truth = std::collections::HashMap::new();
        let mut x = 12345u64;
        for _ in 0..20_000 {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let k = (x >> 40) as u32 % 500;
            let key = Key::new(&k.to_be_bytes()).unwrap();
            let d = (x >> 20) % 7 + 1;
            *truth.entry(k).or_insert(0u64) += d;
            for i in 0..2 {
                r.fetch_add(v.layout.slot_offset(v.hasher.slot(&key, i)), d)
                    .unwrap();
            }
        }
        let mut exact = 0;
        for (k, t) in &truth {
            let e = v.query(&Key::new(&k.to_be_bytes()).unwrap(), 2).estimate;
            assert!(e >= *t, "key {k}: estimate {e} < truth {t}");
            exact += (e == *t) as u32;
        }
        assert!(exact > 0);
    }

    #[test]
    fn epoch_reset_zeroes_and_counts() {
        let r = Region::anonymous(16 * 8, false).unwrap();
        let e = Epochs::new(0);
        r.write(8, &[1; 8]).unwrap();
        assert_eq!(e.info().epoch, 0);
        assert!(!e.due(u64::MAX));
        let i = e.reset(&r);
        assert_eq!((i.epoch, i.resets), (1, 1));
        assert_eq!(r.load_u64(8).unwrap(), 0);
        let sched = Epochs::new(5);
        let start = sched.info().started_unix_ms;
        assert!(!sched.due(start + 4_999));
        assert!(sched.due(start + 5_000));
        assert!(sched.tick(&r).is_none());
    }
}
