//! The send window of one requester QP, after quinn's congestion-controller split: the window
//! in frames, when it was last reduced and the confirmed frames counted towards its next
//! increase, behind a narrow interface [`super::QpTx`] calls on a confirmation and on a loss
//! event. It knows nothing of PSN marks, rings, timers or recovery state: the QP passes in what
//! a decision needs (frames confirmed, in flight, the ring's capacity, one round trip).
//!
//! While no loss was seen the window is unlimited. A loss event halves it to the frames then
//! in flight / 2, at most half the ring and at least [`MIN_WINDOW`], once per round trip; each
//! window's worth of confirmed frames grows it by one, and it is unlimited again once it
//! reaches the ring's capacity.

use dta_proto::wire::ib::Psn;

/// Smallest send window after a loss (frames).
pub const MIN_WINDOW: u32 = 8;
const UNLIMITED: u32 = u32::MAX;

/// The send window of one QP.
#[derive(Debug, Clone)]
pub struct Window {
    /// Frames that may be unconfirmed ([`UNLIMITED`]: no limit).
    frames: u32,
    /// When the window was last reduced.
    last_loss: Option<u64>,
    /// Confirmed frames counted towards the next window increase.
    acc: u32,
}

impl Default for Window {
    fn default() -> Self {
        Window::new()
    }
}

impl Window {
    /// An unlimited window (no loss seen).
    pub fn new() -> Window {
        Window {
            frames: UNLIMITED,
            last_loss: None,
            acc: 0,
        }
    }

    /// True while the window limits what is sent (after a loss, until it grew back).
    #[inline]
    pub fn is_limited(&self) -> bool {
        self.frames != UNLIMITED
    }

    /// True if the window lets the frame at `psn` go out while `acked` is the oldest
    /// unconfirmed PSN.
    #[inline]
    pub fn allows(&self, psn: Psn, acked: Psn) -> bool {
        self.frames == UNLIMITED || (psn.diff(acked) as u32) < self.frames
    }

    /// The window in frames (`None`: unlimited).
    pub fn get(&self) -> Option<u32> {
        (self.frames != UNLIMITED).then_some(self.frames)
    }

    /// `k` more frames were confirmed: a limited window grows by one per window's worth, and is
    /// unlimited again once it reaches `capacity` (the ring's). Returns true when that happened.
    #[inline]
    pub fn on_confirmed(&mut self, k: u32, capacity: u32) -> bool {
        if self.frames == UNLIMITED {
            return false;
        }
        // Growth counts at most a window per answer (an ACK covering many frames after
        // lost ACKs says nothing about a larger window).
        self.acc += k.min(self.frames);
        while self.acc >= self.frames {
            self.acc -= self.frames;
            self.frames += 1;
        }
        if self.frames >= capacity {
            self.frames = UNLIMITED;
            return true;
        }
        false
    }

    /// A loss event at `now` with `in_flight` frames sent and unconfirmed, a ring of `capacity`
    /// frames and a round trip of `rtt` ns: the window halves to what was in flight / 2 (at
    /// least [`MIN_WINDOW`]), unless it was already reduced within the last round trip.
    /// Returns true if this was a new loss event.
    pub fn on_loss(&mut self, now: u64, rtt: u64, in_flight: u32, capacity: u32) -> bool {
        if self.last_loss.is_some_and(|t| now.saturating_sub(t) < rtt) {
            return false;
        }
        // What was in flight, but never more than the ring holds (beyond that, frames went
        // out without retransmission cover: the window must bring them back under it).
        let in_flight = in_flight.min(self.frames).min(capacity);
        let w = (in_flight / 2).max(MIN_WINDOW);
        self.frames = self.frames.min(w);
        self.acc = 0;
        self.last_loss = Some(now);
        true
    }
}
