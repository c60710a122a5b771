//! Answers and timeouts of one requester QP: ACKs, NAKs and RNR NAKs ([`QpTx::on_response`]),
//! the timers ([`QpTx::poll_timeout`]), go-back-N passes and the questions a timeout asks
//! ([`Recovery`]); see the parent module's docs for the rules. The send window's arithmetic is
//! [`super::window::Window`]'s; what goes on the wire is the parent's `poll_transmit`.

use dta_proto::wire::ib::{NakCode, Psn, Syndrome};

use super::{rnr_timer_ns, QpEvent, QpTx};
use crate::datapath::timer::Timer;

/// Loss-recovery state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Recovery {
    /// No loss suspected.
    Open,
    /// Go-back-N: frames from a NAK'd PSN are being resent; the pass is over once the
    /// responder confirms `end`.
    GoBackN { end: Psn },
    /// A timeout asked the responder where it stands. An ACK covering `marker` (a fresh frame,
    /// or the newest frame sent) ends it. `oldest`: the oldest unconfirmed frame was resent,
    /// when `acked` was `acked_then`.
    Asking {
        marker: Psn,
        oldest: bool,
        acked_then: Psn,
        /// An earlier resend of the oldest frame in this episode was answered with progress:
        /// the responder is alive.
        answered: bool,
    },
}

impl QpTx {
    /// True if `psn` is one we could have sent and not yet seen confirmed (an ACK may name
    /// `acked − 1` again: a duplicate's re-ACK).
    #[inline]
    fn plausible_ack(&self, psn: Psn) -> bool {
        psn.diff(self.acked) >= -1 && psn.diff(self.high) < 0
    }

    /// The responder confirmed everything before `to`.
    fn confirm(&mut self, now: u64, to: Psn) {
        let k = to.diff(self.acked);
        if k <= 0 {
            return;
        }
        self.acked = to;
        self.limit = to.add(self.max_outstanding);
        if let Some(r) = &mut self.ring {
            r.release_through(to.sub(1));
        }
        if self.send.diff(to) < 0 {
            // Confirmed while rewound for a pass: they need not go again.
            self.send = to;
        }
        if self.last_nak.is_some_and(|n| to.diff(n) > 0) {
            self.last_nak = None;
        }
        self.rtt.on_progress();
        if self.window.is_limited() {
            let cap = self.ring.as_ref().map_or(0, |r| r.capacity()) as u32;
            if self.window.on_confirmed(k as u32, cap) {
                self.regate();
            }
        }
        match self.due {
            Some(d) if to.diff(d) > 0 => {
                self.due = None;
                self.timers.stop(Timer::Rto);
            }
            // RFC 6298 (5.3): progress restarts the timer of what is still outstanding.
            Some(_) => self.timers.set(Timer::Rto, now + self.rtt.timeout()),
            None => {}
        }
    }

    /// A loss event: the window halves to what was in flight / 2 (at least [`super::MIN_WINDOW`]),
    /// once per round trip (the NAKs of one burst of losses arrive within one). A lost
    /// retransmission halves it again a round trip later, so a link that loses much settles
    /// on a small window. Without a ring nothing is resent, so nothing is limited.
    fn on_loss(&mut self, now: u64) {
        self.loss_since.get_or_insert(now);
        // One round trip (before the first sample, the RTO), at least the timer granularity.
        let rtt = self
            .rtt
            .srtt()
            .unwrap_or(self.rtt.rto())
            .max(crate::datapath::rtt::GRANULARITY_NS);
        let Some(ring) = &self.ring else {
            return;
        };
        let cap = ring.capacity() as u32;
        let in_flight = self.high.diff(self.acked).max(1) as u32;
        if self.window.on_loss(now, rtt, in_flight, cap) {
            self.regate();
            self.stats.loss_events += 1;
        }
    }

    /// Rewinds the send cursor to `from` for a go-back-N pass over everything sent after it.
    fn go_back(&mut self, from: Psn) {
        self.send = from;
        self.pass_certain = true;
        self.recovery = Recovery::GoBackN {
            end: self.high.sub(1),
        };
        self.regate();
        self.resend_oldest = false;
        self.stats.retransmit_events += 1;
        if !self.ring.as_ref().is_some_and(|r| r.holds_from(from)) {
            self.stats.retx_overruns += 1;
        }
        // The pass asks again: nothing sent before it is awaited any more.
        self.due = None;
        self.timers.stop(Timer::Rto);
        if self.timed.is_some_and(|(t, _)| t.diff(from) >= 0) {
            self.timed = None;
        }
    }

    fn finish_recovery(&mut self, now: u64) {
        self.recovery = Recovery::Open;
        self.regate();
        self.resend_oldest = false;
        if let Some(t) = self.loss_since.take() {
            let d = now.saturating_sub(t);
            self.stats.recoveries += 1;
            self.stats.recovery_ns_total += d;
            self.stats.recovery_ns_max = self.stats.recovery_ns_max.max(d);
        }
    }

    /// A response arrived: the silence clock restarts if an answer is still due.
    fn heard(&mut self, now: u64) {
        if let Some(t) = self.silent_since.take() {
            self.stats.silence_ns_max = self.stats.silence_ns_max.max(now.saturating_sub(t));
        }
        if self.due.is_some() || self.resend_oldest || self.probe_wanted {
            self.timers
                .set(Timer::Silence, now + self.tuning.broken_after_ns);
            self.silent_since = Some(now);
        } else {
            self.timers.stop(Timer::Silence);
        }
    }

    /// Processes an ACK, NAK or atomic ACK naming `psn`.
    pub fn on_response(&mut self, now: u64, syndrome: Syndrome, psn: Psn) -> QpEvent {
        if self.broken {
            return QpEvent::Broken;
        }
        let ev = match syndrome {
            Syndrome::Ack { .. } => {
                if !self.plausible_ack(psn) {
                    self.stats.stale_responses += 1;
                    return QpEvent::None;
                }
                self.stats.acks += 1;
                self.confirm(now, psn.next());
                if let Some((t, at)) = self.timed {
                    if psn.diff(t) >= 0 {
                        self.rtt.on_sample(now.saturating_sub(at));
                        self.timed = None;
                    }
                }
                match self.recovery {
                    Recovery::GoBackN { end } if psn.diff(end) >= 0 => self.finish_recovery(now),
                    Recovery::Asking { marker, .. } if psn.diff(marker) >= 0 => {
                        self.finish_recovery(now)
                    }
                    // The resent oldest frame answered short of what was sent, on a link
                    // that lost frames recently (the window is still reduced): the responder
                    // waits at `acked` (its NAK was lost). Go back at once.
                    Recovery::Asking { oldest: true, .. } if self.window.is_limited() => {
                        let from = self.acked;
                        self.on_loss(now);
                        self.go_back(from);
                        self.pass_certain = false;
                    }
                    // Otherwise a short answer while asking may be a late ACK of an older
                    // frame (a collector that stalled): the next timeout decides (see the
                    // module docs).
                    _ => {}
                }
                QpEvent::None
            }
            Syndrome::Nak(NakCode::PsnSequenceError) => {
                // The NAK names the PSN the responder expects: everything before it executed,
                // nothing from it on.
                let plausible = psn.diff(self.acked) >= 0 && psn.diff(self.high) <= 0;
                if !plausible || self.last_nak == Some(psn) {
                    // Stale, or the same gap again (its pass is under way).
                    self.stats.stale_responses += 1;
                    return QpEvent::None;
                }
                self.stats.nak_seq += 1;
                self.confirm(now, psn);
                if psn == self.high {
                    // Nothing missing: the responder has everything we sent.
                    self.due = None;
                    self.timers.stop(Timer::Rto);
                    self.finish_recovery(now);
                } else {
                    self.on_loss(now);
                    self.last_nak = Some(psn);
                    self.go_back(psn);
                }
                QpEvent::None
            }
            Syndrome::RnrNak { timer } => {
                self.stats.nak_rnr += 1;
                let plausible = psn.diff(self.acked) >= 0 && psn.diff(self.high) <= 0;
                if !plausible {
                    self.stats.stale_responses += 1;
                    return QpEvent::None;
                }
                self.confirm(now, psn);
                self.timers.set(Timer::Pause, now + rnr_timer_ns(timer));
                self.regate();
                if psn != self.high {
                    self.loss_since.get_or_insert(now);
                    self.go_back(psn);
                }
                QpEvent::None
            }
            Syndrome::Nak(NakCode::RemoteAccessError) => {
                self.stats.nak_access += 1;
                self.fail()
            }
            Syndrome::Nak(NakCode::InvalidRequest) => {
                self.stats.nak_invalid += 1;
                self.fail()
            }
            _ => {
                self.stats.nak_other += 1;
                self.fail()
            }
        };
        self.heard(now);
        ev
    }

    fn fail(&mut self) -> QpEvent {
        self.broken = true;
        self.timers.clear();
        self.regate();
        QpEvent::Broken
    }

    /// Fires expired timers. Returns [`QpEvent::Broken`] when the silence ran out.
    pub fn poll_timeout(&mut self, now: u64) -> QpEvent {
        if self.broken {
            return QpEvent::Broken;
        }
        while let Some(t) = self.timers.expire(now) {
            match t {
                Timer::Pause => self.regate(),
                Timer::Silence => return self.fail(),
                Timer::Rto => {
                    self.stats.ack_timeouts += 1;
                    self.rtt.on_timeout();
                    self.loss_since.get_or_insert(now);
                    self.ask(now);
                }
            }
        }
        if self.tail_deadline().is_some_and(|t| t <= now) {
            self.ask(now);
        }
        QpEvent::None
    }

    /// A timeout: ask the responder where it stands (see the module docs).
    fn ask(&mut self, now: u64) {
        if self.acked == self.high {
            // Nothing unconfirmed on the wire (the timer outlived its reason).
            self.due = None;
            self.timers.stop(Timer::Rto);
            return;
        }
        let (oldest, answered) = match self.recovery {
            // A fresh frame went unanswered although the responder answered the resent oldest
            // frame: it is alive, and drops what is out of order (its NAK was lost). Go back
            // to where it waits; frames gone from the ring go as no-ops, counted as possibly
            // lost (it may be past some of them).
            Recovery::Asking {
                oldest: false,
                answered: true,
                ..
            } => {
                let from = self.acked;
                self.on_loss(now);
                self.go_back(from);
                self.pass_certain = false;
                self.timers.set(Timer::Rto, now + self.rtt.timeout());
                return;
            }
            // The fresh frame went unanswered: the responder may be dropping everything after
            // a NAK that was lost. Resend the oldest unconfirmed frame.
            Recovery::Asking { oldest: false, .. } => (true, false),
            // The oldest frame was resent: whatever its answer said, a fresh frame asks next.
            // If the responder waited for that frame, it executed it and now NAKs the fresh
            // one with the PSN to go back to; if it is merely slow (a stalled collector), the
            // fresh frame is answered once it catches up, and nothing is resent for nothing.
            Recovery::Asking {
                oldest: true,
                acked_then,
                ..
            } => (false, acked_then != self.acked),
            // A fresh frame needs the cursor at the newest PSN sent (not rewound for a pass).
            _ => (self.send != self.high, false),
        };
        // At the cap a probe would take one PSN too many (and a queued frame is fresh only
        // if one waits): the oldest unconfirmed frame asks instead.
        let capped = self.send == self.next && self.outstanding() >= self.max_outstanding;
        if oldest || capped || self.send != self.high {
            self.resend_oldest = true;
            self.stats.retransmit_events += 1;
            let marker = match self.recovery {
                Recovery::Asking { marker, .. } => marker,
                _ => self.high.sub(1),
            };
            self.recovery = Recovery::Asking {
                marker,
                oldest: true,
                acked_then: self.acked,
                answered,
            };
        } else {
            self.stats.probes += 1;
            let marker = if self.send != self.next {
                // The next queued frame is fresh: it goes out with AckReq, window or not.
                self.force_one = true;
                self.send
            } else {
                self.probe_wanted = true;
                self.regate();
                self.next
            };
            self.recovery = Recovery::Asking {
                marker,
                oldest: false,
                acked_then: self.acked,
                answered,
            };
        }
        self.regate();
        // What was due stays due (its answer may still come); the question is timed too.
        self.timers.set(Timer::Rto, now + self.rtt.timeout());
        if !self.timers.is_set(Timer::Silence) {
            self.timers
                .set(Timer::Silence, now + self.tuning.broken_after_ns);
            self.silent_since = Some(now);
        }
    }
}
