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
use dta_proto::wire::ib::{NakCode, Psn, Qpn, Syndrome};
use dta_proto::wire::roce::RoceFrame;

use super::retx::{copy_frame, RetxRing};
use super::rtt::RttEstimator;
use super::timer::{Timer, TimerTable};

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

/// Loss-recovery state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Recovery {
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

/// Smallest send window after a loss (frames).
pub const MIN_WINDOW: u32 = 8;
/// An unconfirmed tail of frames without AckReq is asked about after this many RTOs of quiet.
pub const TAIL_RTOS: u64 = 4;
const UNLIMITED: u32 = u32::MAX;

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
    window: u32,
    /// When the window was last reduced.
    last_loss: Option<u64>,
    /// Confirmed frames counted towards the next window increase.
    window_acc: u32,
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
            window: UNLIMITED,
            last_loss: None,
            window_acc: 0,
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
            || self.window != UNLIMITED
            || matches!(self.recovery, Recovery::GoBackN { .. })
            || self.timers.get(Timer::Pause).is_some();
    }

    /// True if the window lets the frame at `psn` go out.
    #[inline]
    fn in_window(&self, psn: Psn) -> bool {
        self.window == UNLIMITED || (psn.diff(self.acked) as u32) < self.window
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
                let keep_from = if self.window == UNLIMITED
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
        let psn = self.next;
        // The common case first: nothing queued, no loss window, nothing special going on.
        if tx_room && !self.gate && self.send == psn {
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
            return Some(Take::Direct { psn, ack_req });
        }
        self.take_slow(now, tx_room)
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
        (self.window != UNLIMITED).then_some(self.window)
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
        if self.window != UNLIMITED {
            // Growth counts at most a window per answer (an ACK covering many frames after
            // lost ACKs says nothing about a larger window).
            self.window_acc += (k as u32).min(self.window);
            while self.window_acc >= self.window {
                self.window_acc -= self.window;
                self.window += 1;
            }
            let cap = self.ring.as_ref().map_or(0, |r| r.capacity()) as u32;
            if self.window >= cap {
                self.window = UNLIMITED;
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

    /// A loss event: the window halves to what was in flight / 2 (at least [`MIN_WINDOW`]),
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
            .max(super::rtt::GRANULARITY_NS);
        if self.ring.is_none() || self.last_loss.is_some_and(|t| now.saturating_sub(t) < rtt) {
            return;
        }
        // What was in flight, but never more than the ring holds (beyond that, frames went
        // out without retransmission cover: the window must bring them back under it).
        let cap = self.ring.as_ref().map_or(0, |r| r.capacity()) as u32;
        let in_flight = (self.high.diff(self.acked).max(1) as u32)
            .min(self.window)
            .min(cap);
        let w = (in_flight / 2).max(MIN_WINDOW);
        self.window = self.window.min(w);
        self.window_acc = 0;
        self.regate();
        self.last_loss = Some(now);
        self.stats.loss_events += 1;
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
                    Recovery::Asking { oldest: true, .. } if self.window != UNLIMITED => {
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
mod tests {
    use super::*;
    use dta_proto::icrc::check_frame;
    use dta_proto::wire::ib::{opcode, RethRepr};
    use dta_proto::wire::roce::{FrameTemplate, RoceEndpoint, L2L4_LEN};
    use std::net::Ipv4Addr;

    const START: u32 = 0xFF_FFFA;
    const DEST: SocketAddrV4 = SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 2), 4791);

    fn tmpl(payload: usize) -> FrameTemplate {
        let ep = RoceEndpoint {
            src_ip: Ipv4Addr::new(10, 0, 0, 1),
            dst_ip: Ipv4Addr::new(10, 0, 0, 2),
            ..RoceEndpoint::default()
        };
        FrameTemplate::new(&ep, opcode::RC_RDMA_WRITE_ONLY, Qpn::new(0x11), payload)
    }

    fn tuning(window: u32) -> QpTuning {
        QpTuning {
            ack_every: 4,
            ack_timeout_ns: 1000,
            rto_min_ns: 1000,
            rto_max_ns: 64_000,
            broken_after_ns: 1_000_000,
            retransmit_window: window,
            max_outstanding: MAX_OUTSTANDING,
        }
    }

    fn qp(window: u32) -> QpTx {
        QpTx::new(
            Qpn::new(0x100),
            Qpn::new(0x11),
            Psn::new(START),
            tuning(window),
            tmpl(8).frame_len(),
        )
    }

    fn reth() -> RethRepr {
        RethRepr {
            va: 0x1000,
            rkey: dta_proto::wire::ib::Rkey(1),
            dma_len: 8,
        }
    }

    /// Takes a frame carrying `tag` as the sender does: into `tx` if direct, else the ring.
    fn send(q: &mut QpTx, now: u64, tx: &mut TxBatch, tag: u8) -> Psn {
        let t = tmpl(8);
        match q.take(now, tx.remaining() > 0).expect("takes") {
            Take::Direct { psn, ack_req } => {
                assert!(tx.push_with(DEST, 0, |buf| match q.direct_slot(psn) {
                    Some(copy) =>
                        t.emit_write_twice(buf, copy, psn, ack_req, &reth(), None, &[tag; 8]),
                    None => t.emit_write(buf, psn, ack_req, &reth(), None, &[tag; 8]),
                }));
                psn
            }
            Take::Queued { psn } => {
                let slot = q.ring_slot(psn).unwrap();
                t.emit_write(slot, psn, false, &reth(), None, &[tag; 8]);
                psn
            }
        }
    }

    fn filler(buf: &mut [u8], psn: Psn, ack_req: bool) -> usize {
        tmpl(0).emit_write(
            buf,
            psn,
            ack_req,
            &RethRepr {
                dma_len: 0,
                ..reth()
            },
            None,
            &[],
        )
    }

    /// (PSN, AckReq, first payload byte) of each frame `poll_transmit` pushes.
    fn transmit(q: &mut QpTx, now: u64, room: usize) -> Vec<(Psn, bool, u8)> {
        let mut tx = TxBatch::new(room.max(1), 256);
        if room == 0 {
            return vec![];
        }
        q.poll_transmit(now, &mut tx, DEST, 0, filler);
        (0..tx.len())
            .map(|i| {
                let f = tx.frame(i);
                assert!(check_frame(f), "a valid ICRC");
                let r = RoceFrame::new_unchecked(f);
                (
                    r.psn(),
                    r.ack_req(),
                    f.get(L2L4_LEN + 12 + 16).copied().unwrap_or(0),
                )
            })
            .collect()
    }

    fn ack(q: &mut QpTx, now: u64, psn: Psn) -> QpEvent {
        q.on_response(now, Syndrome::Ack { credits: 31 }, psn)
    }

    fn nak(q: &mut QpTx, now: u64, psn: Psn) -> QpEvent {
        q.on_response(now, Syndrome::Nak(NakCode::PsnSequenceError), psn)
    }

    fn frames_of(tx: &TxBatch) -> Vec<(Psn, bool)> {
        (0..tx.len())
            .map(|i| {
                let r = RoceFrame::new_unchecked(tx.frame(i));
                (r.psn(), r.ack_req())
            })
            .collect()
    }

    /// A QP of `window` ring frames that takes at most `cap` PSNs unconfirmed.
    fn capped(window: u32, cap: u32) -> QpTx {
        QpTx::new(
            Qpn::new(0x100),
            Qpn::new(0x11),
            Psn::new(START),
            QpTuning {
                max_outstanding: cap,
                ..tuning(window)
            },
            tmpl(8).frame_len(),
        )
    }

    /// Takes one-frame reports while the QP lets them (a report of `per` frames is asked
    /// for), at most `limit`; returns how many frames were taken.
    fn fill(q: &mut QpTx, now: u64, per: usize, limit: usize) -> usize {
        let mut tx = TxBatch::new(4096, 256);
        let mut n = 0;
        while n < limit && q.can_take(now, per, tx.remaining()) {
            send(q, now, &mut tx, 1);
            n += 1;
            if tx.is_full() {
                tx.clear();
            }
        }
        n
    }

    #[test]
    fn outstanding_psns_stop_at_the_cap_with_or_without_a_ring() {
        for window in [0, 64] {
            let mut q = capped(window, 1000);
            let s = Psn::new(START);
            // The PSNs wrap past 0 on the way; reports of 4 frames stop 4 short of the cap.
            assert_eq!(fill(&mut q, 0, 4, 5000), 997, "window {window}");
            assert_eq!(fill(&mut q, 0, 1, 5000), 3, "window {window}");
            assert_eq!((q.unconfirmed(), q.next_psn()), (1000, s.add(1000)));
            assert!(!q.can_take(0, 1, usize::MAX));
            // An ACK makes room for exactly what it confirmed.
            ack(&mut q, 10, s.add(99));
            assert_eq!(fill(&mut q, 10, 1, 5000), 100, "window {window}");
            assert_eq!(q.unconfirmed(), 1000);
        }
    }

    #[test]
    fn the_default_cap_keeps_a_silent_collectors_qp_below_2_23_psns() {
        // Without loss the window is unlimited: only the cap stops a QP whose collector is
        // silent. Past 2^23 PSNs `unconfirmed` read 0 and every answer looked stale.
        let mut q = QpTx::new(
            Qpn::new(0x100),
            Qpn::new(0x11),
            Psn::new(START),
            QpTuning {
                retransmit_window: 0,
                ..QpTuning::default()
            },
            tmpl(8).frame_len(),
        );
        let taken = fill(&mut q, 0, 1, (1 << 23) + 16);
        assert_eq!(taken, DEFAULT_MAX_OUTSTANDING as usize);
        assert_eq!(q.unconfirmed(), taken);
        // The collector answers the newest frame: taken, everything confirmed.
        let newest = q.next_psn().sub(1);
        assert_eq!(ack(&mut q, 1, newest), QpEvent::None);
        assert_eq!((q.unconfirmed(), q.stats.stale_responses), (0, 0));
        // A cap beyond MAX_OUTSTANDING is taken as MAX_OUTSTANDING.
        let q = capped(0, u32::MAX);
        assert_eq!(q.max_outstanding, MAX_OUTSTANDING);
    }

    #[test]
    fn a_timeout_at_the_cap_resends_the_oldest_instead_of_taking_a_psn() {
        for window in [0, 64] {
            let mut q = capped(window, 64);
            let s = Psn::new(START);
            assert_eq!(fill(&mut q, 0, 1, 1000), 64);
            // Silence: every timeout asks with the oldest frame, never with a probe on a
            // fresh PSN, however long it lasts.
            let mut t = 0;
            for _ in 0..6 {
                t = q.next_deadline().unwrap().max(t + 1);
                q.poll_timeout(t);
                assert!(!q.wants_probe(), "window {window}");
                let got = transmit(&mut q, t, 8);
                assert_eq!(got.len(), 1, "window {window}");
                assert_eq!((got[0].0, got[0].1), (s, true), "window {window}");
                assert_eq!(q.next_psn(), s.add(64), "window {window}");
            }
            assert_eq!(q.unconfirmed(), 64);
            // The responder executes it: one PSN of room, and the next question may take it.
            ack(&mut q, t + 1, s);
            assert_eq!(q.unconfirmed(), 63);
            assert!(q.can_take(t + 1, 1, 8) && !q.can_take(t + 1, 2, 8));
        }
    }

    #[test]
    fn psns_wrap_and_every_kth_frame_asks_for_an_ack() {
        let mut q = qp(64);
        let mut tx = TxBatch::new(64, 256);
        for i in 0..8 {
            send(&mut q, 0, &mut tx, i);
        }
        let got: Vec<(u32, bool)> = frames_of(&tx)
            .into_iter()
            .map(|(p, a)| (p.value(), a))
            .collect();
        assert_eq!(
            got,
            [
                (0xFF_FFFA, false),
                (0xFF_FFFB, false),
                (0xFF_FFFC, false),
                (0xFF_FFFD, true),
                (0xFF_FFFE, false),
                (0xFF_FFFF, false),
                (0, false),
                (1, true)
            ]
        );
        assert_eq!(q.unconfirmed(), 8);
        ack(&mut q, 10, Psn::new(1));
        assert_eq!((q.unconfirmed(), q.next_deadline()), (0, None));
    }

    #[test]
    fn a_nak_resends_exactly_from_the_frame_it_names() {
        let mut q = qp(64);
        let mut tx = TxBatch::new(64, 256);
        let s = Psn::new(START);
        for i in 0..9 {
            send(&mut q, 0, &mut tx, i);
        }
        // The responder executed s..s+2 and lost s+3: it NAKs naming s+3.
        ack(&mut q, 5, s.add(1));
        assert_eq!(nak(&mut q, 6, s.add(3)), QpEvent::None);
        assert!(q.wants_transmit(6));
        // Room for 4 now, the rest later: resent unchanged, in order, the last with AckReq.
        let mut got = transmit(&mut q, 7, 4);
        got.extend(transmit(&mut q, 8, 64));
        let psns: Vec<Psn> = got.iter().map(|g| g.0).collect();
        assert_eq!(psns, (3..9).map(|i| s.add(i)).collect::<Vec<_>>());
        assert_eq!(
            got.iter().map(|g| g.2).collect::<Vec<_>>(),
            [3, 4, 5, 6, 7, 8]
        );
        assert!(got[5].1, "the pass's last frame asks for an ACK");
        assert_eq!(q.stats.retransmitted_frames, 6);
        assert_eq!(q.stats.retransmit_events, 1);
        // The same NAK again (e.g. for a frame that was in flight): ignored.
        nak(&mut q, 9, s.add(3));
        assert!(!q.wants_transmit(9));
        assert_eq!(q.stats.retransmit_events, 1);
        ack(&mut q, 20, s.add(8));
        assert_eq!(q.unconfirmed(), 0);
        assert_eq!(q.stats.recoveries, 1);
        assert_eq!(q.next_psn(), s.add(9), "no PSN was taken again");
    }

    #[test]
    fn a_timeout_asks_with_a_fresh_probe_and_a_late_ack_costs_no_resend() {
        let mut q = qp(64);
        let mut tx = TxBatch::new(64, 256);
        let s = Psn::new(START);
        for i in 0..4 {
            send(&mut q, 0, &mut tx, i);
        }
        // s+3 carries AckReq; its ACK is late (the collector was descheduled).
        assert_eq!(q.next_deadline(), Some(1000));
        q.poll_timeout(1000);
        assert_eq!(q.stats.ack_timeouts, 1);
        assert!(q.wants_probe(), "a probe, not a resend");
        let p = q.take_probe();
        assert_eq!(p, s.add(4));
        let slot = q.ring_slot(p).unwrap();
        filler(slot, p, true);
        let got = transmit(&mut q, 1000, 8);
        assert_eq!((got.len(), got[0].0, got[0].1), (1, p, true));
        assert_eq!(q.stats.retransmitted_frames, 0);
        // The late ACK arrives, then the probe's: nothing was resent.
        ack(&mut q, 1500, s.add(3));
        ack(&mut q, 1600, p);
        assert_eq!(q.unconfirmed(), 0);
        assert_eq!(q.next_deadline(), None);
        assert_eq!((q.stats.retransmitted_frames, q.stats.probes), (0, 1));
        assert_eq!(q.stats.recoveries, 1);
    }

    #[test]
    fn an_unanswered_probe_resends_the_oldest_then_goes_back_to_where_the_responder_waits() {
        // The responder lost s+2 and the NAK for it, and now drops everything silently.
        let mut q = qp(64);
        let mut tx = TxBatch::new(64, 256);
        let s = Psn::new(START);
        for i in 0..8 {
            send(&mut q, 0, &mut tx, i);
        }
        ack(&mut q, 100, s.add(1));
        // s+7 (AckReq) unanswered: a probe, unanswered too.
        q.poll_timeout(1100);
        let p = q.take_probe();
        let slot = q.ring_slot(p).unwrap();
        filler(slot, p, true);
        assert_eq!(transmit(&mut q, 1100, 8).len(), 1);
        // Backed off: the next timeout is 2 RTOs later, and resends the oldest (s+2).
        q.poll_timeout(2000);
        assert!(!q.wants_transmit(2000));
        q.poll_timeout(3100);
        let got = transmit(&mut q, 3100, 8);
        assert_eq!(
            got,
            vec![(s.add(2), true, 2)],
            "the oldest unconfirmed, with AckReq"
        );
        // The responder executes it and ACKs s+2: short of what was sent, but maybe a late
        // ACK: nothing is resent on that answer alone.
        ack(&mut q, 3200, s.add(2));
        assert!(!q.wants_transmit(3200));
        // The next timeout asks with a fresh probe, which the responder (now waiting at s+3,
        // its NAK flag cleared by s+2) NAKs: go back to s+3.
        let t = q.next_deadline().unwrap();
        q.poll_timeout(t);
        let p2 = q.take_probe();
        let slot = q.ring_slot(p2).unwrap();
        filler(slot, p2, true);
        assert_eq!(transmit(&mut q, t, 8).len(), 1);
        nak(&mut q, t + 50, s.add(3));
        let got = transmit(&mut q, t + 60, 64);
        let psns: Vec<Psn> = got.iter().map(|g| g.0).collect();
        assert_eq!(
            psns,
            (3..10).map(|i| s.add(i)).collect::<Vec<_>>(),
            "s+3 .. both probes"
        );
        assert_eq!(q.stats.loss_events, 1);
        ack(&mut q, t + 100, p2);
        assert_eq!(q.unconfirmed(), 0);
        assert_eq!(q.stats.psn_skipped, 0);
    }

    #[test]
    fn a_responder_that_drops_fresh_frames_after_answering_is_gone_back_to() {
        // The responder executed s..s+4 (their ACK was lost), lost s+5 and its NAK, and now
        // drops everything out of order; our newest confirmed PSN is s+1.
        let mut q = qp(64);
        let mut tx = TxBatch::new(64, 256);
        let s = Psn::new(START);
        for i in 0..8 {
            send(&mut q, 0, &mut tx, i);
        }
        ack(&mut q, 100, s.add(1));
        let probe = |q: &mut QpTx, t: u64| {
            let p = q.take_probe();
            let slot = q.ring_slot(p).unwrap();
            filler(slot, p, true);
            transmit(q, t, 8);
        };
        // Timeout 1: a fresh probe, dropped.
        q.poll_timeout(1100);
        probe(&mut q, 1100);
        // Timeout 2: the oldest (s+2) resent: a duplicate, re-ACKed with s+4.
        q.poll_timeout(3100);
        assert_eq!(transmit(&mut q, 3100, 8).len(), 1);
        ack(&mut q, 3200, s.add(4));
        assert!(!q.wants_transmit(3200), "no round on that answer alone");
        // Timeout 3: a fresh probe again, dropped too (the responder still waits for s+5).
        let t = q.next_deadline().unwrap();
        q.poll_timeout(t);
        probe(&mut q, t);
        // Timeout 4: the responder is alive but drops fresh frames: go back to s+5.
        let t = q.next_deadline().unwrap();
        q.poll_timeout(t);
        let got = transmit(&mut q, t, 64);
        assert_eq!(got[0].0, s.add(5));
        assert_eq!(got[0].2, 5, "the frame as first sent");
        assert_eq!((q.stats.loss_events, q.stats.psn_skipped), (1, 0));
    }

    #[test]
    fn a_stalled_collector_catching_up_draws_no_go_back_n() {
        let mut q = qp(256);
        let mut tx = TxBatch::new(256, 256);
        let s = Psn::new(START);
        for i in 0..64 {
            send(&mut q, 0, &mut tx, i as u8);
        }
        // Nothing answered for three timeouts: probe, oldest resent, probe again.
        for t in [1000, 3000, 7000] {
            q.poll_timeout(t);
            if q.wants_probe() {
                let p = q.take_probe();
                let slot = q.ring_slot(p).unwrap();
                filler(slot, p, true);
            }
            transmit(&mut q, t, 8);
        }
        assert_eq!(q.stats.retransmitted_frames, 1, "one duplicate at most");
        // The collector resumes and works through its queue: ACK after ACK, in order.
        let last = q.next_psn().sub(1);
        for k in (3..64).step_by(4) {
            ack(&mut q, 7100 + k as u64, s.add(k));
            assert!(!q.wants_transmit(7100), "no round while it catches up");
        }
        ack(&mut q, 7200, last);
        assert_eq!(q.unconfirmed(), 0);
        assert_eq!(q.stats.retransmitted_frames, 1);
        assert_eq!(q.stats.loss_events, 0);
        assert!(!q.is_broken());
    }

    #[test]
    fn silence_runs_only_while_an_answer_is_due() {
        let mut q = qp(64);
        let mut tx = TxBatch::new(64, 256);
        for i in 0..4 {
            send(&mut q, 0, &mut tx, i);
        }
        let last = q.next_psn().sub(1);
        ack(&mut q, 10, last);
        // Idle far longer than broken_after: nothing is due, nothing fires.
        assert_eq!(q.next_deadline(), None);
        assert_eq!(q.poll_timeout(60_000_000_000), QpEvent::None);
        let mut tx = TxBatch::new(64, 256);
        send(&mut q, 60_000_000_000, &mut tx, 9);
        q.poll_timeout(60_000_100_000);
        assert!(!q.is_broken(), "idle is not silence");
        // Now an answer is due (the tail's probe) and none ever comes: broken after
        // broken_after, counted from when the answer became due.
        let mut t = 60_000_100_000;
        let mut due_since = None;
        while !q.is_broken() && t < 60_010_000_000 {
            t = q.next_deadline().unwrap().max(t + 1);
            q.poll_timeout(t);
            if q.wants_probe() {
                let p = q.take_probe();
                let slot = q.ring_slot(p).unwrap();
                filler(slot, p, true);
                due_since.get_or_insert(t);
            }
            transmit(&mut q, t, 8);
        }
        assert!(q.is_broken());
        let since = due_since.expect("a probe went out");
        // (The question was asked at the poll just before the probe went out.)
        assert!(
            t + 1 >= since + 1_000_000 && t <= since + 1_000_000 + 64_000,
            "{t} {since}"
        );
    }

    #[test]
    fn fatal_naks_break_the_qp() {
        let mut q = qp(64);
        let mut tx = TxBatch::new(64, 256);
        send(&mut q, 0, &mut tx, 0);
        let ev = q.on_response(
            1,
            Syndrome::Nak(NakCode::RemoteAccessError),
            Psn::new(START),
        );
        assert_eq!(ev, QpEvent::Broken);
        assert!(q.is_broken() && q.next_deadline().is_none());
        assert!(q.take(2, true).is_none());
    }

    #[test]
    fn rnr_pauses_then_resends_from_its_psn() {
        let mut q = qp(64);
        let mut tx = TxBatch::new(64, 256);
        let s = Psn::new(START);
        for i in 0..5 {
            send(&mut q, 0, &mut tx, i);
        }
        q.on_response(10, Syndrome::RnrNak { timer: 14 }, s.add(2));
        assert!(q.is_paused(1_000_000));
        assert!(
            transmit(&mut q, 1_000_000, 8).is_empty(),
            "nothing during the pause"
        );
        assert_eq!(q.next_deadline(), Some(10 + 1_280_000));
        // New frames queue behind the pass.
        let mut tx = TxBatch::new(64, 256);
        send(&mut q, 1_100_000, &mut tx, 5);
        assert!(tx.is_empty());
        let got = transmit(&mut q, 1_280_010, 8);
        assert_eq!(
            got.iter().map(|g| (g.0, g.2)).collect::<Vec<_>>(),
            vec![(s.add(2), 2), (s.add(3), 3), (s.add(4), 4), (s.add(5), 5)]
        );
    }

    #[test]
    fn a_full_batch_queues_frames_in_psn_order() {
        let mut q = qp(8);
        let mut tx = TxBatch::new(2, 256);
        for i in 0..5 {
            send(&mut q, 0, &mut tx, i);
        }
        assert_eq!(tx.len(), 2);
        assert_eq!(q.queued(), 3);
        // The ring keeps 8: 5 taken, 3 not yet sent; a report of 6 more frames does not fit
        // without overwriting one of those.
        assert!(q.can_take(0, 5, 0) && !q.can_take(0, 6, 0));
        let got = transmit(&mut q, 1, 64);
        assert_eq!(got.iter().map(|g| g.2).collect::<Vec<_>>(), [2, 3, 4]);
        assert!(
            got[2].1,
            "the last frame of a drained queue asks for an ACK"
        );
        assert_eq!(q.queued(), 0);
        assert_eq!(q.stats.retransmitted_frames, 0);
    }

    #[test]
    fn frames_gone_from_the_ring_are_replaced_by_no_ops_never_reused() {
        let mut q = qp(4);
        let mut tx = TxBatch::new(64, 256);
        let s = Psn::new(START);
        for i in 0..10 {
            send(&mut q, 0, &mut tx, i);
        }
        // s+2 was lost; the ring only holds s+6 .. s+9.
        nak(&mut q, 5, s.add(2));
        let got = transmit(&mut q, 6, 64);
        let psns: Vec<Psn> = got.iter().map(|g| g.0).collect();
        assert_eq!(psns, (2..10).map(|i| s.add(i)).collect::<Vec<_>>());
        // s+2 .. s+5 are zero-length no-ops (their data is lost and counted), the rest the
        // frames as first sent.
        assert_eq!(q.stats.psn_skipped, 4);
        assert_eq!(q.stats.retx_overruns, 1);
        assert_eq!(got[4].2, 6);
        assert_eq!(q.next_psn(), s.add(10));
    }

    #[test]
    fn the_window_halves_on_loss_and_grows_back() {
        let mut q = qp(1024);
        let mut tx = TxBatch::new(1024, 256);
        let s = Psn::new(START);
        for i in 0..100 {
            send(&mut q, 0, &mut tx, i as u8);
        }
        assert_eq!(q.window(), None);
        nak(&mut q, 1, s.add(50));
        assert_eq!(q.window(), Some(25), "half of the 50 frames in flight");
        // The pass goes out 25 at a time, the 25th asking for an ACK.
        let got = transmit(&mut q, 2, 1024);
        assert_eq!(got.len(), 25);
        assert!(got[24].1);
        // A second loss in the same window does not halve it again.
        nak(&mut q, 3, s.add(60));
        assert_eq!(q.window(), Some(25));
        // Every transmitted frame confirmed at once: the window grows by one per window's
        // worth of frames until it reaches the ring's capacity, then is unlimited.
        let mut t = 10;
        let mut rounds = 0;
        while q.window().is_some() && rounds < 10_000 {
            let mut tx = TxBatch::new(4096, 256);
            while q.queued() < 64 {
                send(&mut q, t, &mut tx, 1);
            }
            transmit(&mut q, t, 4096);
            // The responder executes everything on the wire.
            let newest = q.high.sub(1);
            ack(&mut q, t + 1, newest);
            t += 10;
            rounds += 1;
        }
        assert_eq!(q.window(), None, "unlimited again after {rounds} rounds");
        assert!(rounds > 10, "grows linearly, not at once");
    }

    #[test]
    fn an_idle_unconfirmed_tail_is_asked_about_with_a_probe() {
        let mut q = qp(64);
        let mut tx = TxBatch::new(64, 256);
        for i in 0..3 {
            send(&mut q, 0, &mut tx, i);
        }
        // No AckReq went out: TAIL_RTOS RTOs after the last frame, a probe.
        assert_eq!(q.next_deadline(), Some(4000));
        q.poll_timeout(3999);
        assert!(!q.wants_probe());
        q.poll_timeout(4000);
        assert!(q.wants_probe());
        assert_eq!(q.stats.ack_timeouts, 0, "not counted as a timeout");
        let p = q.take_probe();
        let slot = q.ring_slot(p).unwrap();
        filler(slot, p, true);
        let got = transmit(&mut q, 4000, 8);
        assert_eq!((got.len(), got[0].0, got[0].1), (1, p, true));
        ack(&mut q, 4100, p);
        assert_eq!((q.unconfirmed(), q.next_deadline()), (0, None));
        // At shutdown the tail is asked about at once.
        let mut tx = TxBatch::new(64, 256);
        send(&mut q, 5000, &mut tx, 7);
        q.confirm_promptly();
        assert_eq!(q.next_deadline(), Some(5000));
    }
}
