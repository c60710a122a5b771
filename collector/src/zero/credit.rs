//! ZERO's credit-based flow control: the pull collector keeps the READ response bytes it has
//! asked for and not yet received at or below a total `T`, and each flow (agent) at or below
//! its share `T / n`, so answers from many agents never arrive at once in more bytes than the
//! path can buffer (incast), and no switch needs PFC or ECN to absorb them.
//!
//! A READ takes its length in credits before it is sent and gives them back when its last
//! response arrived (or it was abandoned with its QP). A flow whose share is smaller than one
//! READ may still have that one READ in flight when it has nothing else, as long as the total
//! has room: the total is never exceeded, which [`CreditFc::take`] asserts on every grant.

/// Credit state of one collecting thread.
#[derive(Debug, Clone)]
pub struct CreditFc {
    total: u64,
    enabled: bool,
    in_flight: u64,
    high_water: u64,
    flows: Vec<u64>,
    /// Flows counted in the share (connected agents).
    active: u32,
    /// READs that had to wait for credits.
    pub waits: u64,
}

impl CreditFc {
    /// `total` bytes (T) shared by `flows` flows. With `enabled` false, every READ is granted
    /// (the "without Credit-FC" baseline) but in-flight bytes are still tracked.
    pub fn new(total: u64, flows: usize, enabled: bool) -> CreditFc {
        CreditFc {
            total,
            enabled,
            in_flight: 0,
            high_water: 0,
            flows: vec![0; flows],
            active: flows.max(1) as u32,
            waits: 0,
        }
    }

    /// Sets how many flows share T (the connected agents; at least 1).
    pub fn set_active(&mut self, n: usize) {
        self.active = n.max(1) as u32;
    }

    /// Bytes a flow may have in flight: `T / n`.
    pub fn share(&self) -> u64 {
        self.total / self.active as u64
    }

    /// Grants `bytes` to `flow` if the rules allow (module docs); counts a wait otherwise.
    pub fn take(&mut self, flow: usize, bytes: u64) -> bool {
        let f = self.flows[flow];
        if self.enabled {
            let total_ok = self.in_flight + bytes <= self.total;
            let flow_ok = f + bytes <= self.share() || f == 0;
            if !(total_ok && flow_ok) {
                self.waits += 1;
                return false;
            }
        }
        self.flows[flow] = f + bytes;
        self.in_flight += bytes;
        self.high_water = self.high_water.max(self.in_flight);
        assert!(
            !self.enabled || self.in_flight <= self.total,
            "Credit-FC: {} bytes in flight exceed T = {}",
            self.in_flight,
            self.total
        );
        true
    }

    /// Whether the total has room for `bytes` more (a refusal with room is the flow's share).
    pub fn total_has_room(&self, bytes: u64) -> bool {
        !self.enabled || self.in_flight + bytes <= self.total
    }

    /// Returns `bytes` of `flow`'s credits.
    pub fn give_back(&mut self, flow: usize, bytes: u64) {
        debug_assert!(self.flows[flow] >= bytes && self.in_flight >= bytes);
        self.flows[flow] = self.flows[flow].saturating_sub(bytes);
        self.in_flight = self.in_flight.saturating_sub(bytes);
    }

    /// Bytes in flight now.
    pub fn in_flight(&self) -> u64 {
        self.in_flight
    }

    /// The most bytes ever in flight at once.
    pub fn high_water(&self) -> u64 {
        self.high_water
    }

    /// T.
    pub fn total(&self) -> u64 {
        self.total
    }

    /// Whether the limits apply.
    pub fn enabled(&self) -> bool {
        self.enabled
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_total_and_each_share_hold_and_a_lone_large_read_may_go() {
        let mut c = CreditFc::new(1000, 4, true);
        assert_eq!(c.share(), 250);
        assert!(c.take(0, 200));
        assert!(!c.take(0, 100), "beyond flow 0's share");
        assert!(c.take(1, 600), "alone, larger than a share");
        assert!(c.take(2, 200));
        assert!(!c.take(3, 1), "the total is full");
        assert_eq!((c.in_flight(), c.high_water(), c.waits), (1000, 1000, 2));
        c.give_back(1, 600);
        assert!(c.take(3, 250));
        c.set_active(1);
        assert!(c.take(0, 150));
        assert_eq!(c.in_flight(), 800);
    }

    #[test]
    fn without_credits_everything_is_granted_and_still_counted() {
        let mut c = CreditFc::new(100, 2, false);
        assert!(c.take(0, 80));
        assert!(c.take(0, 80));
        assert_eq!((c.in_flight(), c.high_water(), c.waits), (160, 160, 0));
    }
}
