//! The requester side of one RC queue pair: PSNs, the transmit queue, ACK tracking, loss
//! recovery and the send window.
//!
//! # PSNs
//! Four marks move forward through the 24-bit PSN space, `acked ≤ send ≤ high ≤ next`:
//! - `next`: the PSN the next new frame takes;
//! - `send`: the next PSN to put on the wire. Frames `send..next` wait in the retransmission
//!   ring ([`RetxRing`]): new frames queued behind a full transmit batch, a closed window or
//!   an RNR pause, and frames rewound for a go-back-N pass;
//! - `high`: one past the highest PSN ever put on the wire (below it, a transmission is a
//!   retransmission);
//! - `acked`: one past the newest PSN the responder confirmed executing.
//!
//! A PSN is never reused for other data: a frame that left the ring before it could be resent
//! (a window overrun) is replaced on the wire by a zero-length WRITE at its PSN, and counted as
//! lost (`psn_skipped`).
//!
//! PSNs are compared as signed distances in the 24-bit circle, which is only meaningful while
//! fewer than 2^23 are outstanding (InfiniBand requires it of a requester). So `next − acked`
//! never exceeds [`QpTuning::max_outstanding`] (at most [`MAX_OUTSTANDING`], half of 2^23):
//! [`QpTx::can_take`] refuses a report whose frames would pass it, and a timeout that would
//! ask with a probe on a fresh PSN resends the oldest unconfirmed frame instead. This holds
//! with or without a ring, whatever the window: a collector that stops answering (paused,
//! descheduled) stops the QP at the cap; once it answers again, every comparison still reads
//! the right way round.
//!
//! # Transmission
//! A new frame goes straight into the caller's transmit batch when nothing is queued ahead of
//! it, the window is open and the batch has room ([`Take::Direct`]); otherwise it is built in
//! the ring ([`Take::Queued`]) and [`QpTx::poll_transmit`] sends it later. Room in the output
//! therefore never decides whether a report is translated (quinn's `poll_transmit`). Every
//! `ack_every`-th first transmission carries AckReq, and so do the last frame of a queue
//! drained, the frame that fills the window, and the last frame of a go-back-N pass.
//!
//! # Loss recovery ([`Recovery`])
//! The responder behaves like rxe: it executes PSNs in order, answers a gap with one NAK
//! "PSN sequence error" naming the PSN it expects and then silently drops everything out of
//! order until that PSN arrives; a duplicate is re-ACKed with the newest PSN it executed.
//! - A NAK names exactly the first missing frame: the send cursor moves back there and every
//!   frame from it is resent, unchanged (go-back-N). Nothing before it goes again.
//! - A retransmission timeout (the RTO of [`RttEstimator`]) first asks with a *fresh* frame
//!   carrying AckReq: the next queued frame, or a zero-length WRITE on a new PSN (a probe).
//!   Only the responder can answer it, so the answer is unambiguous: an ACK covering it means
//!   everything before executed (a late ACK, or a descheduled collector, costs one probe and
//!   no duplicate); a NAK names the frame to go back to. If it goes unanswered (the
//!   responder's one NAK was lost and it now drops everything), the next timeout resends the
//!   oldest unconfirmed frame with AckReq, which the responder executes or re-ACKs with the
//!   newest PSN it executed; the timeout after that asks with a fresh frame again, which the
//!   responder, once it has the frame it waited for, NAKs with the next PSN it needs. A
//!   timeout alone never resends a whole window: only a NAK does (or, on a link that lost
//!   frames within the last window, the short answer to a resent oldest frame). Timeouts
//!   back off exponentially.
//! - An unconfirmed tail of frames without AckReq (the end of a burst) is asked about with a
//!   probe after [`TAIL_RTOS`] RTOs of quiet; this is not counted as a timeout.
//!
//! # Window
//! While no loss was seen the window is unlimited (the ring may be overrun by unconfirmed
//! frames, which only matters if one of them is then lost). Each loss event (a NAK naming a
//! frame sent) halves it to the frames then in flight / 2, at most half the ring and at least
//! [`MIN_WINDOW`], once per round trip; each window's worth of confirmed frames grows it by
//! one, and it is unlimited again once it reaches the ring's capacity. Go-back-N resends what was in flight
//! after the lost frame, so the window bounds the resends a loss costs.
//!
//! # Failure
//! The QP is broken after `broken_after` with an answer due and no response at all (any ACK or
//! NAK restarts that clock; nothing due, nothing runs), or at once on a NAK "remote access
//! error", "invalid request" or another fatal syndrome. The control plane then reconnects.

use std::net::SocketAddrV4;

use dta_proto::batch::TxBatch;
use dta_proto::wire::ib::{Psn, Qpn};
use dta_proto::wire::roce::RoceFrame;

use super::retx::{copy_frame, RetxRing};
use super::rtt::RttEstimator;
use super::timer::{Timer, TimerTable};

mod recovery;
mod window;

use recovery::Recovery;
use window::Window;
pub use window::MIN_WINDOW;

/// Tunables of the reliability machinery.
#[derive(Debug, Clone, Copy)]
pub struct QpTuning {
    /// Ask for an ACK on every k-th frame.
    pub ack_every: u32,
    /// The retransmission timeout before any round trip was measured (ns).
    pub ack_timeout_ns: u64,
    /// Lower bound of the adaptive timeout (ns).
    pub rto_min_ns: u64,
    /// Upper bound of the adaptive timeout and of its back-off (ns).
    pub rto_max_ns: u64,
    /// Report the QP broken after this long without any response while one was due (ns).
    pub broken_after_ns: u64,
    /// Frames kept per QP for retransmission and queueing (rounded up to a power of two;
    /// 0 = none: lost frames cannot be resent and nothing can be queued).
    pub retransmit_window: u32,
    /// PSNs taken and not yet confirmed, at most (1..=[`MAX_OUTSTANDING`]; values above are
    /// taken as [`MAX_OUTSTANDING`]): reports that would pass it are refused.
    pub max_outstanding: u32,
}

/// The largest [`QpTuning::max_outstanding`]: half of the 2^23 PSNs a requester may have
/// outstanding, so a few probes and a responder's re-ACK of the PSN before its expected one
/// stay far inside the half-circle.
pub const MAX_OUTSTANDING: u32 = 1 << 22;

/// The default [`QpTuning::max_outstanding`]: 2^20 frames, a tenth of a second at 10 million
/// frames a second (no collector's receive queue holds more).
pub const DEFAULT_MAX_OUTSTANDING: u32 = 1 << 20;

impl Default for QpTuning {
    fn default() -> Self {
        QpTuning {
            ack_every: 64,
            ack_timeout_ns: 5_000_000,
            rto_min_ns: 1_000_000,
            rto_max_ns: 1_000_000_000,
            broken_after_ns: 5_000_000_000,
            retransmit_window: 1024,
            max_outstanding: DEFAULT_MAX_OUTSTANDING,
        }
    }
}

/// Per-QP reliability counters (and a few gauges).
#[derive(Debug, Default, Clone, Copy)]
pub struct QpStats {
    /// New frames (PSNs taken), probes included.
    pub frames: u64,
    /// ACKs received.
    pub acks: u64,
    /// NAK "PSN sequence error" received.
    pub nak_seq: u64,
    /// RNR NAKs received.
    pub nak_rnr: u64,
    /// NAK "remote access error" received.
    pub nak_access: u64,
    /// NAK "invalid request" received.
    pub nak_invalid: u64,
    /// Other NAKs received.
    pub nak_other: u64,
    /// Frames lost because they left the ring before they could be resent (each replaced on
    /// the wire by a zero-length WRITE at its PSN).
    pub psn_skipped: u64,
    /// Retransmission timeouts (an answer due and none came within the RTO).
    pub ack_timeouts: u64,
    /// Fresh frames sent with AckReq to ask where the responder stands (zero-length probes and
    /// queued frames sent ahead of the window).
    pub probes: u64,
    /// Responses that matched no outstanding state (stale or foreign).
    pub stale_responses: u64,
    /// Recoveries completed: from the first sign of loss (a NAK, a timeout) to the answer that
    /// showed the responder caught up.
    pub recoveries: u64,
    /// Their total duration (ns).
    pub recovery_ns_total: u64,
    /// The longest (ns).
    pub recovery_ns_max: u64,
    /// Round-trip samples taken (ACKs of frames sent once).
    pub rtt_samples: u64,
    /// Smoothed round-trip time (ns; 0 before the first sample).
    pub srtt_ns: u64,
    /// The current retransmission timeout without back-off (ns).
    pub rto_ns: u64,
    /// Longest silence (no response while one was due) that ended in an answer (ns).
    pub silence_ns_max: u64,
    /// Frames sent again from the ring.
    pub retransmitted_frames: u64,
    /// Retransmissions started: go-back-N passes and resends of the oldest frame.
    pub retransmit_events: u64,
    /// Go-back-N passes that found frames gone from the ring (counted in `psn_skipped`).
    pub retx_overruns: u64,
    /// Zero-length WRITEs sent after a timeout (not a NAK) at PSNs whose frames had left the
    /// ring: each either replaced that frame (its data lost) or was a duplicate.
    pub noops_in_place: u64,
    /// Loss events (each halved the window).
    pub loss_events: u64,
    /// The send window in frames (0: unlimited).
    pub window: u64,
    /// Frames waiting to be sent (queued or rewound).
    pub queued: u64,
}

/// What the pipeline must do after a response or a timer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QpEvent {
    /// Nothing beyond calling [`QpTx::poll_transmit`] as usual.
    None,
    /// The responder put the QP into the error state, or never answered: reconnect.
    Broken,
}

/// Where a new frame goes ([`QpTx::take`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Take {
    /// Into the transmit batch now, with this PSN and AckReq; its copy goes to
    /// [`QpTx::direct_slot`].
    Direct {
        /// The frame's PSN.
        psn: Psn,
        /// Whether it carries AckReq.
        ack_req: bool,
    },
    /// Into the ring only ([`QpTx::ring_slot`]); sent later by [`QpTx::poll_transmit`].
    Queued {
        /// The frame's PSN.
        psn: Psn,
    },
}

impl Take {
    /// The frame's PSN.
    #[inline]
    pub fn psn(self) -> Psn {
        match self {
            Take::Direct { psn, .. } | Take::Queued { psn } => psn,
        }
    }
}

/// An unconfirmed tail of frames without AckReq is asked about after this many RTOs of quiet.
pub const TAIL_RTOS: u64 = 4;

/// PSN, queue, recovery and window state of one requester QP.
#[derive(Debug, Clone)]
pub struct QpTx {
    /// Our QPN (the responder's ACKs name it).
    pub local_qpn: Qpn,
    /// The responder's QPN.
    pub remote_qpn: Qpn,
    tuning: QpTuning,
    /// [`QpTuning::max_outstanding`], clamped to 1..=[`MAX_OUTSTANDING`].
    max_outstanding: u32,
    /// `acked + max_outstanding`: `next` never passes it (kept with `acked`, so the check per
    /// report is one subtraction).
    limit: Psn,
    /// The ring's capacity in frames (0: no ring), kept out of the `Option` for the check per
    /// report.
    ring_capacity: usize,
    next: Psn,
    send: Psn,
    high: Psn,
    acked: Psn,
    ring: Option<RetxRing>,
    since_ackreq: u32,
    /// The newest transmitted PSN whose answer is due (AckReq'd, atomic, probe).
    due: Option<Psn>,
    /// The frame being timed for a round-trip sample, and when it was sent (sent once).
    timed: Option<(Psn, u64)>,
    rtt: RttEstimator,
    timers: TimerTable,
    recovery: Recovery,
    /// When loss was first suspected (the recovery's start).
    loss_since: Option<u64>,
    /// Resend the frame at `acked` with AckReq on the next transmit.
    resend_oldest: bool,
    /// The current pass was asked for by a NAK: the responder waits at its first PSN, so a
    /// frame of it gone from the ring is lost for certain (`psn_skipped`), not possibly
    /// (`noops_in_place`).
    pass_certain: bool,
    /// A probe (zero-length WRITE on a fresh PSN) must be queued ([`QpTx::wants_probe`]).
    probe_wanted: bool,
    /// Send the frame at `send` with AckReq even if the window is closed.
    force_one: bool,
    /// The PSN of the last NAK acted on (a repeat during its pass is ignored).
    last_nak: Option<Psn>,
    /// The send window (its own type: quinn's congestion-controller split).
    window: Window,
    /// When the newest frame went on the wire.
    last_tx: u64,
    /// When the silence clock started (for `silence_ns_max`).
    silent_since: Option<u64>,
    broken: bool,
    /// Shutdown: ask about an unconfirmed tail at once, every frame with AckReq.
    confirm_now: bool,
    /// Nonzero while anything takes new frames off the fast path (broken, a probe wanted,
    /// confirming promptly, a loss window, a go-back-N pass, an RNR pause): one load instead
    /// of six per frame.
    /// Recomputed by [`QpTx::regate`] wherever one of them changes.
    gate: bool,
    /// Counters.
    pub stats: QpStats,
}

impl QpTx {
    /// A QP whose first frame carries `start_psn` (the PSN the CM REQ announced), with a ring of
    /// `tuning.retransmit_window` frames of up to `max_frame_len` bytes (complete Ethernet
    /// frames), allocated here.
    pub fn new(
        local_qpn: Qpn,
        remote_qpn: Qpn,
        start_psn: Psn,
        tuning: QpTuning,
        max_frame_len: usize,
    ) -> QpTx {
        let mut q = QpTx {
            local_qpn,
            remote_qpn,
            ring: None,
            ring_capacity: 0,
            rtt: RttEstimator::new(tuning.ack_timeout_ns, tuning.rto_min_ns, tuning.rto_max_ns),
            max_outstanding: tuning.max_outstanding.clamp(1, MAX_OUTSTANDING),
            limit: start_psn.add(tuning.max_outstanding.clamp(1, MAX_OUTSTANDING)),
            tuning,
            next: start_psn,
            send: start_psn,
            high: start_psn,
            acked: start_psn,
            since_ackreq: 0,
            due: None,
            timed: None,
            timers: TimerTable::default(),
            recovery: Recovery::Open,
            loss_since: None,
            resend_oldest: false,
            pass_certain: true,
            probe_wanted: false,
            force_one: false,
            last_nak: None,
            window: Window::new(),
            last_tx: 0,
            silent_since: None,
            broken: false,
            confirm_now: false,
            gate: false,
            stats: QpStats::default(),
        };
        q.ring = RetxRing::new(tuning.retransmit_window, max_frame_len, start_psn);
        q.ring_capacity = q.ring.as_ref().map_or(0, |r| r.capacity());
        q
    }

    /// The PSN the next new frame takes.
    #[inline]
    pub fn next_psn(&self) -> Psn {
        self.next
    }

    /// One past the newest PSN the responder confirmed.
    #[inline]
    pub fn confirmed_psn(&self) -> Psn {
        self.acked
    }

    /// True once the responder reported a fatal error or stayed silent too long.
    #[inline]
    pub fn is_broken(&self) -> bool {
        self.broken
    }

    /// True during an RNR back-off.
    #[inline]
    pub fn is_paused(&self, now: u64) -> bool {
        self.timers.get(Timer::Pause).is_some_and(|t| now < t)
    }

    /// Recomputes [`QpTx::gate`].
    #[inline]
    fn regate(&mut self) {
        self.gate = self.broken
            || self.probe_wanted
            || self.confirm_now
            || self.window.is_limited()
            || matches!(self.recovery, Recovery::GoBackN { .. })
            || self.timers.get(Timer::Pause).is_some();
    }

    /// True if the window lets the frame at `psn` go out.
    #[inline]
    fn in_window(&self, psn: Psn) -> bool {
        self.window.allows(psn, self.acked)
    }

    /// PSNs taken and not yet confirmed (`next − acked`, never above the cap).
    #[inline(always)]
    fn outstanding(&self) -> u32 {
        // `acked` never passes `next`: the masked difference is the distance.
        self.next.value().wrapping_sub(self.acked.value()) & 0xFF_FFFF
    }

    /// True if a report needing up to `frames` new frames can be taken now, at `now`, by a
    /// caller whose transmit batch has room for `tx_room` more frames: every one of them will
    /// go straight to that batch or wait in the ring without overwriting a frame not yet
    /// sent, and `next − acked` stays within [`QpTuning::max_outstanding`]. Without a ring a
    /// frame cannot wait, so all of them must fit in the batch now. A report is refused
    /// whole, before any of its frames is taken.
    #[inline(always)]
    pub fn can_take(&self, now: u64, frames: usize, tx_room: usize) -> bool {
        // Nothing waits to be sent and nothing special is going on (no loss being recovered,
        // not broken, no pause): frames go out at once, or wait in the ring without
        // overwriting anything unsent; without a ring they must fit in the batch.
        if self.send == self.next && !self.gate {
            let queue = if self.ring_capacity != 0 {
                self.ring_capacity
            } else {
                tx_room
            };
            return frames <= queue.min(self.psn_room());
        }
        self.can_take_slow(now, frames, tx_room)
    }

    /// PSNs that may still be taken before `next − acked` reaches the cap.
    #[inline(always)]
    fn psn_room(&self) -> usize {
        // `next` never passes `limit`: the masked difference is the room left.
        (self.limit.value().wrapping_sub(self.next.value()) & 0xFF_FFFF) as usize
    }

    /// When `frames` new frames can next be taken, room in the caller's transmit batch aside:
    /// `Some(0)`, the end of an RNR pause (without a ring nothing waits out a pause), or
    /// `None` until the responder answers or the QP is replaced (a ring full of frames not yet
    /// sent, the PSN cap, a go-back-N pass without a ring, a broken QP). A timer that writes
    /// (an Append batch's flush delay) is not due before then: polling it earlier would spin.
    pub fn room_at(&self, frames: usize) -> Option<u64> {
        if !self.can_take(u64::MAX, frames, usize::MAX) {
            return None;
        }
        Some(match self.ring {
            Some(_) => 0,
            None => self.timers.get(Timer::Pause).unwrap_or(0),
        })
    }

    #[inline(never)]
    fn can_take_slow(&self, now: u64, frames: usize, tx_room: usize) -> bool {
        if self.broken || frames > self.psn_room() {
            return false;
        }
        match &self.ring {
            // Frames go to the batch or nowhere (see `take_slow`).
            None => {
                self.send == self.next
                    && self.in_window(self.next)
                    && !self.probe_wanted
                    && !self.is_paused(now)
                    && frames <= tx_room
            }
            Some(r) => {
                // Frames not yet sent are never overwritten. While a known loss is being
                // recovered (a go-back-N pass, or the window still reduced after one) neither
                // are unconfirmed frames: they may be asked for again. Otherwise (no loss
                // seen, or only silence, which may be a stalled collector whose queue holds
                // them) a new frame may take the place of the oldest unconfirmed one, as a
                // frame sent straight away does.
                let keep_from = if !self.window.is_limited()
                    && !matches!(self.recovery, Recovery::GoBackN { .. })
                {
                    self.send
                } else {
                    self.acked
                };
                self.next.diff(keep_from) as usize + frames <= r.capacity()
            }
        }
    }

    /// Takes the PSN of a new frame: [`Take::Direct`] when it may go straight to a transmit
    /// batch that has room (`tx_room`), else [`Take::Queued`]. `None` when it can go nowhere:
    /// the QP is broken, or it has no ring and no room (check [`QpTx::can_take`] first: it
    /// also keeps `next − acked` within the cap, which this does not check per frame).
    /// Only AckReq'd frames are awaited (an atomic is answered anyway, but an AckReq'd frame
    /// after it, or the tail probe, covers it).
    #[inline(always)]
    pub fn take(&mut self, now: u64, tx_room: bool) -> Option<Take> {
        // The common case first: nothing queued, no loss window, nothing special going on.
        if tx_room && !self.gate && self.send == self.next {
            let (psn, ack_req) = self.take_direct(now);
            return Some(Take::Direct { psn, ack_req });
        }
        self.take_slow(now, tx_room)
    }

    /// [`QpTx::take`]'s common case: the PSN and AckReq of a frame that goes straight to a
    /// transmit batch with room, while nothing is queued and nothing special is going on
    /// (within a [`QpTx::direct_budget`], or as `take` checked).
    #[inline(always)]
    pub fn take_direct(&mut self, now: u64) -> (Psn, bool) {
        debug_assert!(!self.gate && self.send == self.next);
        let psn = self.next;
        self.next = psn.next();
        self.send = self.next;
        self.high = self.next;
        self.since_ackreq += 1;
        let ack_req = self.since_ackreq >= self.tuning.ack_every;
        if ack_req {
            self.since_ackreq = 0;
        }
        self.stats.frames += 1;
        self.on_transmit(psn, now, ack_req, true);
        (psn, ack_req)
    }

    /// How many frames may now go out one after another, each as [`QpTx::take`] would give
    /// it as [`Take::Direct`] (the frame's ring slot next in order, [`QpTx::direct_slot`]) and
    /// each report of up to `frames` of them admitted as [`QpTx::can_take`] would, to a batch
    /// with `tx_room` free places: 0 unless nothing is queued and nothing special is going
    /// on. The count holds while only [`QpTx::take_direct`] changes the QP (a translator's
    /// burst: answers and timers are handled between bursts), each frame taking one of it.
    #[inline(always)]
    pub fn direct_budget(&self, frames: usize, tx_room: usize) -> usize {
        let fast = self.send == self.next
            && !self.gate
            && self
                .ring
                .as_ref()
                .is_none_or(|r| r.end() == self.next && frames <= self.ring_capacity);
        if !fast {
            return 0;
        }
        tx_room.min(self.psn_room())
    }

    #[inline(never)]
    fn take_slow(&mut self, now: u64, tx_room: bool) -> Option<Take> {
        if self.broken {
            return None;
        }
        let psn = self.next;
        let direct = tx_room
            && self.send == psn
            && self.in_window(psn)
            && !self.is_paused(now)
            && !self.probe_wanted;
        if direct {
            self.next = psn.next();
            self.send = self.next;
            self.high = self.next;
            self.since_ackreq += 1;
            let ack_req = self.since_ackreq >= self.tuning.ack_every
                || !self.in_window(self.next)
                || self.confirm_now;
            if ack_req {
                self.since_ackreq = 0;
            }
            self.stats.frames += 1;
            self.on_transmit(psn, now, ack_req, true);
            return Some(Take::Direct { psn, ack_req });
        }
        self.ring.as_ref()?;
        self.next = psn.next();
        self.stats.frames += 1;
        Some(Take::Queued { psn })
    }

    /// The ring slot that keeps the copy of the [`Take::Direct`] frame `psn`, built at the same
    /// time as the frame itself (instead of [`QpTx::record`]); `None` without a ring.
    #[inline(always)]
    pub fn direct_slot(&mut self, psn: Psn) -> Option<&mut [u8]> {
        self.ring.as_mut().and_then(|r| r.slot_for(psn))
    }

    /// [`QpTx::direct_slot`] of a frame within a [`QpTx::direct_budget`], which keeps the
    /// ring's PSNs in order.
    #[inline(always)]
    pub fn direct_slot_in_order(&mut self, psn: Psn) -> Option<&mut [u8]> {
        self.ring.as_mut().map(|r| r.slot_in_order(psn))
    }

    /// The ring slot to build the frame of a [`Take::Queued`] `psn` in.
    #[inline]
    pub fn ring_slot(&mut self, psn: Psn) -> Option<&mut [u8]> {
        self.ring.as_mut().and_then(|r| r.slot_for(psn))
    }

    /// Frames sent or queued and not yet confirmed.
    pub fn unconfirmed(&self) -> usize {
        self.outstanding() as usize
    }

    /// Frames waiting to be sent.
    #[inline]
    pub fn queued(&self) -> usize {
        self.next.diff(self.send).max(0) as usize
    }

    /// Frames the ring holds, and its capacity (0, 0 without one).
    pub fn ring_usage(&self) -> (usize, usize) {
        self.ring
            .as_ref()
            .map_or((0, 0), |r| (r.len(), r.capacity()))
    }

    /// Bytes preallocated for the ring.
    pub fn ring_memory(&self) -> usize {
        self.ring.as_ref().map_or(0, |r| r.memory_bytes())
    }

    /// The retransmission timeout without back-off (ns).
    pub fn rto(&self) -> u64 {
        self.rtt.rto()
    }

    /// The send window in frames (`None`: unlimited).
    pub fn window(&self) -> Option<u32> {
        self.window.get()
    }

    /// From now on every frame asks for an ACK and an unconfirmed tail is asked about at once
    /// (a clean shutdown wants every frame confirmed, or resent, quickly).
    pub fn confirm_promptly(&mut self) {
        self.confirm_now = true;
        self.regate();
    }

    /// True if a probe must be queued: build a zero-length WRITE and queue it with
    /// [`QpTx::take_probe`].
    #[inline]
    pub fn wants_probe(&self) -> bool {
        self.probe_wanted
    }

    /// Takes the PSN of the probe [`QpTx::wants_probe`] asked for; the caller builds it in
    /// [`QpTx::ring_slot`] (or, without a ring, sends it at once with AckReq and calls
    /// [`QpTx::probe_sent`]).
    pub fn take_probe(&mut self) -> Psn {
        self.probe_wanted = false;
        self.regate();
        let psn = self.next;
        self.next = psn.next();
        self.stats.frames += 1;
        self.force_one = self.send == psn;
        if let Recovery::Asking { marker, .. } = &mut self.recovery {
            *marker = psn;
        }
        psn
    }

    /// Without a ring: the probe taken with [`QpTx::take_probe`] went out now.
    pub fn probe_sent(&mut self, psn: Psn, now: u64) {
        self.send = psn.next();
        self.high = self.send;
        self.force_one = false;
        self.on_transmit(psn, now, true, true);
    }

    /// True if [`QpTx::poll_transmit`] has something to send at `now`.
    #[inline]
    pub fn wants_transmit(&self, now: u64) -> bool {
        !self.broken
            && !self.is_paused(now)
            && (self.resend_oldest
                || (self.send != self.next && (self.force_one || self.in_window(self.send))))
    }

    /// Pushes what waits to `tx` (to `dest`, kernel-socket offset `off`): the oldest frame
    /// resent after a timeout, then frames from `send` (queued, or rewound for go-back-N) as far
    /// as the window and `tx` allow. A frame that left the ring is replaced by `filler(buf,
    /// psn, ack_req)`, a zero-length WRITE at that PSN. Returns (frames pushed, of which
    /// resent).
    pub fn poll_transmit(
        &mut self,
        now: u64,
        tx: &mut TxBatch,
        dest: SocketAddrV4,
        off: usize,
        mut filler: impl FnMut(&mut [u8], Psn, bool) -> usize,
    ) -> (usize, usize) {
        if self.broken || self.is_paused(now) {
            return (0, 0);
        }
        let (mut pushed, mut resent) = (0, 0);
        if self.resend_oldest && tx.remaining() > 0 {
            self.resend_oldest = false;
            let p = self.acked;
            if p.diff(self.high) < 0 {
                let held = self.ring.as_ref().and_then(|r| r.get(p));
                let ok = match held {
                    Some(f) => push_frame(tx, dest, off, f, true).is_some(),
                    // Gone from the ring (overrun by a stalled collector's backlog): a no-op
                    // at its PSN asks the same question. If the responder was waiting for that
                    // frame, its data is lost; if not, the no-op is a duplicate. Which one
                    // cannot be told from the answer: counted as `noops_in_place`.
                    None => {
                        let ok = tx.push_with(dest, off, |buf| filler(buf, p, true));
                        self.stats.noops_in_place += ok as u64;
                        ok
                    }
                };
                if ok {
                    self.note_resent(p);
                    self.stats.retransmitted_frames += 1;
                    self.on_transmit(p, now, true, false);
                    pushed += 1;
                    resent += 1;
                }
            }
        }
        while self.send != self.next && tx.remaining() > 0 {
            let psn = self.send;
            if !self.force_one && !self.in_window(psn) {
                break;
            }
            let first = psn.diff(self.high) >= 0;
            let after = psn.next();
            let cadence = first && self.since_ackreq + 1 >= self.tuning.ack_every;
            let end_of_pass = matches!(self.recovery, Recovery::GoBackN { end } if end == psn);
            let ack_req = cadence
                || after == self.next
                || !self.in_window(after)
                || end_of_pass
                || self.force_one
                || self.confirm_now;
            let held = self.ring.as_ref().and_then(|r| r.get(psn));
            let solicits = match held {
                Some(f) => push_frame(tx, dest, off, f, ack_req),
                // Gone from the ring: the PSN must still be used, never for other data.
                None => tx
                    .push_with(dest, off, |buf| filler(buf, psn, ack_req))
                    .then(|| {
                        if self.pass_certain {
                            self.stats.psn_skipped += 1;
                        } else {
                            self.stats.noops_in_place += 1;
                        }
                        ack_req
                    }),
            };
            let Some(solicits) = solicits else {
                break;
            };
            if first {
                self.high = after;
                self.since_ackreq = if ack_req { 0 } else { self.since_ackreq + 1 };
            } else {
                self.note_resent(psn);
                self.stats.retransmitted_frames += 1;
                resent += 1;
            }
            self.force_one = false;
            self.send = after;
            pushed += 1;
            self.on_transmit(psn, now, solicits, first);
        }
        (pushed, resent)
    }

    /// Karn's rule: a frame sent again no longer times a round trip.
    #[inline]
    fn note_resent(&mut self, psn: Psn) {
        if self.timed.is_some_and(|(t, _)| psn.diff(t) <= 0) {
            self.timed = None;
        }
    }

    /// Bookkeeping for a frame put on the wire.
    #[inline(always)]
    fn on_transmit(&mut self, psn: Psn, now: u64, solicits: bool, first: bool) {
        self.last_tx = now;
        if solicits {
            self.on_solicit(psn, now, first);
        }
    }

    /// A frame that will be answered went out: it is due, and timed if nothing is.
    #[inline(always)]
    fn on_solicit(&mut self, psn: Psn, now: u64, first: bool) {
        if first && self.timed.is_none() {
            self.timed = Some((psn, now));
        }
        match self.due {
            // Already waiting (so both timers run): the newer frame is due instead.
            Some(d) => {
                if psn.diff(d) > 0 {
                    self.due = Some(psn);
                }
            }
            None => self.start_waiting(psn, now),
        }
    }

    /// An answer becomes due: the RTO and silence timers start if they are not running.
    #[inline(never)]
    fn start_waiting(&mut self, psn: Psn, now: u64) {
        self.due = Some(psn);
        if !self.timers.is_set(Timer::Rto) {
            self.timers.set(Timer::Rto, now + self.rtt.timeout());
        }
        if !self.timers.is_set(Timer::Silence) {
            self.timers
                .set(Timer::Silence, now + self.tuning.broken_after_ns);
            self.silent_since = Some(now);
        }
    }

    /// When an unconfirmed tail is asked about: frames are unconfirmed and none asked for an
    /// answer (the end of a burst), [`TAIL_RTOS`] RTOs after the newest went out (at once when
    /// confirming promptly). Derived, not stored: taking a frame costs no timer update.
    #[inline]
    fn tail_deadline(&self) -> Option<u64> {
        if self.due.is_some()
            || self.acked == self.high
            || self.resend_oldest
            || self.probe_wanted
            || !matches!(self.recovery, Recovery::Open)
        {
            return None;
        }
        let wait = if self.confirm_now {
            0
        } else {
            self.rtt
                .rto()
                .saturating_mul(TAIL_RTOS)
                .min(self.tuning.rto_max_ns)
        };
        Some(self.last_tx.saturating_add(wait))
    }

    /// When the next timer fires (ns); `Some(0)`, or the end of an RNR pause, when there is
    /// something to transmit.
    pub fn next_deadline(&self) -> Option<u64> {
        if self.broken {
            return None;
        }
        let mut t = self.timers.next_deadline();
        let mut at = |x: u64| t = Some(t.map_or(x, |y| y.min(x)));
        if let Some(d) = self.tail_deadline() {
            at(d);
        }
        if self.probe_wanted {
            at(0);
        }
        if self.resend_oldest
            || (self.send != self.next && (self.force_one || self.in_window(self.send)))
        {
            at(self.timers.get(Timer::Pause).unwrap_or(0));
        }
        t
    }

    /// The counters, with the gauges (SRTT, RTO, window, queue) filled in.
    pub fn snapshot(&self) -> QpStats {
        QpStats {
            srtt_ns: self.rtt.srtt().unwrap_or(0),
            rto_ns: self.rtt.rto(),
            window: self.window().map_or(0, u64::from),
            queued: self.queued() as u64,
            rtt_samples: self.rtt.samples(),
            ..self.stats
        }
    }
}

/// Queues a copy of the held frame `f` to `dest` (kernel-socket offset `off`), with AckReq set
/// when `ack_req`. Returns whether it asks for an answer (AckReq), `None` when `tx` is full
/// (nothing queued).
#[inline]
fn push_frame(
    tx: &mut TxBatch,
    dest: SocketAddrV4,
    off: usize,
    f: &[u8],
    ack_req: bool,
) -> Option<bool> {
    let mut asks = false;
    tx.push_with(dest, off, |buf| {
        copy_frame(buf, f);
        let mut fr = RoceFrame::new_unchecked(&mut buf[..f.len()]);
        if ack_req {
            fr.set_ack_req();
        }
        asks = fr.ack_req();
        f.len()
    })
    .then_some(asks)
}

/// RNR NAK timer field to nanoseconds (IBA table 45).
pub fn rnr_timer_ns(code: u8) -> u64 {
    const US: [u64; 32] = [
        655_360, 10, 20, 30, 40, 60, 80, 120, 160, 240, 320, 480, 640, 960, 1_280, 1_920, 2_560,
        3_840, 5_120, 7_680, 10_240, 15_360, 20_480, 30_720, 40_960, 61_440, 81_920, 122_880,
        163_840, 245_760, 327_680, 491_520,
    ];
    US[(code & 0x1f) as usize] * 1_000
}

#[cfg(test)]
mod tests;
