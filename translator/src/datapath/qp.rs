//! The requester side of one RC queue pair: PSNs, ACK tracking, retransmission, pacing.
//!
//! Every frame sent is kept in the QP's retransmission ring ([`RetxRing`], `retransmit_window`
//! frames, preallocated) until an ACK confirms it, and is resent *unchanged* (same PSN, same
//! bytes: go-back-N, as an RC requester does) when the responder asks for it. The rules:
//! - every frame consumes the next PSN; every `ack_every`-th frame asks for an ACK (AckReq), so
//!   the responder confirms progress regularly without ACKing every write. An ACK releases
//!   every frame up to the PSN it names;
//! - a NAK "PSN sequence error" names the PSN `e` the responder expects: every frame from `e`
//!   to the newest is resent, in order, the last one with AckReq (a *go-back-N round*). The
//!   send PSN never moves back, so no PSN is ever reused for other data (on a network that
//!   reorders, a late old frame can only be a duplicate of itself). A repeat of the same NAK
//!   while its round is in flight is ignored;
//! - if an AckReq'd frame (or a round's last frame) is not acknowledged within the
//!   retransmission timeout (RTO), something was lost silently (the tail of a burst, the NAK,
//!   or ACKs): the oldest unconfirmed frame is resent with AckReq. The responder executes it
//!   (it was waiting for exactly that PSN) or, if it is a duplicate, re-ACKs the newest PSN it
//!   executed; an answer short of the frames sent before the resend starts a go-back-N round
//!   right after it. If that resend goes unanswered too (a duplicate atomic whose saved result
//!   the responder no longer holds is dropped silently, as rxe does), the next timeout sends a
//!   zero-length probe on a fresh PSN, which the responder either executes (everything before
//!   was executed) or NAKs with the PSN to go back to; timeouts alternate the two. Frames
//!   sent after the last AckReq'd one are timed too (from the newest frame): one RTO after
//!   traffic stops, an unconfirmed tail is asked about with the fresh probe first (an ACK
//!   confirms it without a duplicate; a NAK starts go-back-N), so a lost last frame is found
//!   without waiting for more traffic. Those checks count as probes, not as ACK timeouts;
//! - an RNR NAK pauses the QP for the advertised time, then resends from the RNR-NAKed PSN;
//! - only when a frame the responder asks for has left the ring (the window was overrun by
//!   unconfirmed frames, or `retransmit_window` is 0) does the QP fall back to *resyncing*:
//!   the send PSN jumps to where the responder expects it, the frames in between are counted
//!   as lost (`psn_skipped`, and the round as a `retx_overrun`), and on timeout a zero-length
//!   probe is sent: on a fresh PSN first (the responder NAKs it with the PSN it waits at; a
//!   probe can never execute in the place of a lost frame), and, if that goes unanswered, at
//!   the oldest unconfirmed PSN (counted as a possibly lost frame);
//! - the RTO adapts to the responder (RFC 6298): every ACK that answers an AckReq'd frame
//!   sent once (Karn's rule: not a resent one) is a round-trip sample feeding SRTT and RTTVAR;
//!   RTO = SRTT + 4·RTTVAR, clamped to `[rto_min, rto_max]`, starting at `ack_timeout`. Each
//!   unanswered timeout doubles the wait for the next one (up to `rto_max`), so a collector
//!   that stalls for seconds sees a few resends, not a burst;
//! - the QP is declared broken only after `broken_after` of silence: no response at all while
//!   an AckReq'd frame, resend or probe was outstanding. Any ACK or NAK restarts that clock;
//! - a NAK "remote access error" or "invalid request" means the responder moved the QP to the
//!   error state: the QP is marked broken and the control plane reconnects.

use dta_proto::batch::TxBatch;
use std::net::SocketAddrV4;

use super::retx::{set_ack_req, RetxRing};
use dta_proto::wire::ib::{NakCode, Psn, Qpn, Syndrome};

/// Tunables of the reliability machinery.
#[derive(Debug, Clone, Copy)]
pub struct QpTuning {
    /// Ask for an ACK on every k-th frame.
    pub ack_every: u32,
    /// The initial retransmission timeout, before any round trip was measured (ns).
    pub ack_timeout_ns: u64,
    /// Lower bound of the adaptive timeout (ns).
    pub rto_min_ns: u64,
    /// Upper bound of the adaptive timeout and of its back-off (ns).
    pub rto_max_ns: u64,
    /// Report the QP broken after this long without any response while one was due (ns).
    pub broken_after_ns: u64,
    /// Frames kept per QP for retransmission (rounded up to a power of two; 0 = none: lost
    /// frames are counted and skipped by resyncing).
    pub retransmit_window: u32,
}

impl Default for QpTuning {
    fn default() -> Self {
        QpTuning {
            ack_every: 64,
            ack_timeout_ns: 5_000_000,
            rto_min_ns: 1_000_000,
            rto_max_ns: 1_000_000_000,
            broken_after_ns: 5_000_000_000,
            retransmit_window: 1024,
        }
    }
}

/// Per-QP reliability counters.
#[derive(Debug, Default, Clone, Copy)]
pub struct QpStats {
    /// Frames sent.
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
    /// Times the send PSN was moved to where the responder expects it.
    pub psn_resyncs: u64,
    /// Frames skipped by resyncs (sent but never executed).
    pub psn_skipped: u64,
    /// ACK timeouts (silent loss detected).
    pub ack_timeouts: u64,
    /// Zero-length probe writes sent.
    pub probes: u64,
    /// Responses that matched no outstanding state (stale or foreign).
    pub stale_responses: u64,
    /// Total resync latency (ns): from detection of loss to the first confirmed PSN.
    pub resync_ns_total: u64,
    /// Longest resync latency seen (ns).
    pub resync_ns_max: u64,
    /// Round-trip samples taken (ACKs of AckReq'd frames sent once).
    pub rtt_samples: u64,
    /// Smoothed round-trip time (ns; 0 before the first sample).
    pub srtt_ns: u64,
    /// The current retransmission timeout (ns; 0 before the first sample).
    pub rto_ns: u64,
    /// Longest silence (no response while one was due) that ended in an answer (ns).
    pub silence_ns_max: u64,
    /// Frames sent again from the retransmission ring.
    pub retransmitted_frames: u64,
    /// Retransmissions started: go-back-N rounds (after a NAK, an RNR NAK or a short answer)
    /// and timeout resends of the oldest unconfirmed frame.
    pub retransmit_events: u64,
    /// Recoveries that could not retransmit because the frames asked for had left the ring
    /// (window overrun); each ended in a resync whose frames count in `psn_skipped`.
    pub retx_overruns: u64,
}

/// What the pipeline must do after a response.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QpEvent {
    /// Nothing.
    None,
    /// The QP needs a probe frame now.
    Probe,
    /// The QP has frames to resend: call [`QpTx::retransmit`].
    Retransmit,
    /// The responder put the QP into the error state: reconnect.
    Broken,
}

/// What an outstanding recovery frame is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ProbeKind {
    /// A zero-length probe (nothing to resend from the ring, or a fresh-PSN probe).
    Probe,
    /// The oldest unconfirmed frame, resent with AckReq after a timeout.
    Oldest,
    /// A go-back-N round; `psn` is its first frame, `before` its last (with AckReq).
    Round,
}

#[derive(Debug, Clone, Copy)]
struct Probe {
    psn: Psn,
    sent_at: u64,
    /// The newest PSN sent before the probe: its answer must cover it, or frames were lost.
    before: Psn,
    kind: ProbeKind,
}

/// Frames waiting to be resent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Resend {
    Idle,
    /// The oldest unconfirmed frame, with AckReq.
    Oldest(Psn),
    /// Go-back-N: every frame from this PSN up to the newest sent.
    From(Psn),
}

/// PSN and ACK state of one requester QP.
#[derive(Debug, Clone)]
pub struct QpTx {
    /// Our QPN (the responder's ACKs name it).
    pub local_qpn: Qpn,
    /// The responder's QPN.
    pub remote_qpn: Qpn,
    tuning: QpTuning,
    /// PSN of the next frame.
    next_psn: Psn,
    /// One past the highest PSN sent before the send PSN last moved back (a resync); the
    /// highest PSN ever sent is the later of it and `next_psn` ([`QpTx::high_next`]), so
    /// taking a PSN need not maintain it.
    high_mark: Psn,
    /// One past the last PSN the responder confirmed executing.
    confirmed: Psn,
    since_ackreq: u32,
    /// The newest AckReq'd PSN awaiting its ACK, and when it was sent.
    awaiting: Option<(Psn, u64)>,
    /// The newest AckReq'd frame sent (awaited next when the ACK of `awaiting` comes first).
    last_ackreq: Option<(Psn, u64)>,
    /// An outstanding probe.
    probing: Option<Probe>,
    /// Send the next probe right away (the last answer showed the responder is behind).
    reprobe: bool,
    /// The probe `poll_timeout` asked for takes a fresh PSN (see `poll_timeout`).
    fresh_probe: bool,
    /// PSN of the last NAK acted on (a repeat of it is ignored).
    last_nak: Option<Psn>,
    /// When loss was first suspected (for resync latency).
    loss_since: Option<u64>,
    probes_unanswered: u32,
    /// Smoothed RTT and its variation (ns), after the first sample.
    srtt: Option<(u64, u64)>,
    /// Since when a response has been due and none came (None: nothing outstanding).
    silent_since: Option<u64>,
    /// The AckReq'd frame whose timer expired, and when it was sent (for an RTT sample).
    late: Option<(Psn, u64)>,
    paused_until: u64,
    broken: bool,
    /// Unconfirmed frames (None: `retransmit_window` is 0).
    ring: Option<RetxRing>,
    /// Frames waiting to be resent.
    resend: Resend,
    /// When the newest frame was taken (the timer of an unconfirmed tail without AckReq).
    last_take: u64,
    /// The next timeout with frames to resend sends a fresh probe (else the oldest frame).
    probe_next: bool,
    /// Ask about an unconfirmed tail right away (shutdown), not after [`TAIL_RTOS`] RTOs.
    confirm_now: bool,
    /// Counters.
    pub stats: QpStats,
}

impl QpTx {
    /// A QP whose first frame carries `start_psn` (the PSN the CM REQ announced), with a
    /// retransmission ring of `tuning.retransmit_window` frames of up to `max_frame_len` bytes
    /// (complete Ethernet frames), allocated here.
    pub fn new(
        local_qpn: Qpn,
        remote_qpn: Qpn,
        start_psn: Psn,
        tuning: QpTuning,
        max_frame_len: usize,
    ) -> QpTx {
        QpTx {
            ring: RetxRing::new(tuning.retransmit_window, max_frame_len, start_psn),
            resend: Resend::Idle,
            last_take: 0,
            probe_next: false,
            confirm_now: false,
            local_qpn,
            remote_qpn,
            tuning,
            next_psn: start_psn,
            high_mark: start_psn,
            confirmed: start_psn,
            since_ackreq: 0,
            awaiting: None,
            last_ackreq: None,
            probing: None,
            reprobe: false,
            fresh_probe: false,
            last_nak: None,
            loss_since: None,
            probes_unanswered: 0,
            srtt: None,
            silent_since: None,
            late: None,
            paused_until: 0,
            broken: false,
            stats: QpStats::default(),
        }
    }

    /// The PSN the next frame will carry.
    #[inline]
    pub fn next_psn(&self) -> Psn {
        self.next_psn
    }

    /// One past the last PSN the responder confirmed.
    #[inline]
    pub fn confirmed_psn(&self) -> Psn {
        self.confirmed
    }

    /// True once the responder reported a fatal error (or probes went unanswered).
    #[inline]
    pub fn is_broken(&self) -> bool {
        self.broken
    }

    /// True while new frames must not be sent (RNR back-off).
    #[inline]
    pub fn is_paused(&self, now: u64) -> bool {
        now < self.paused_until
    }

    /// Takes the PSN for a new frame and whether it must carry AckReq.
    #[inline]
    pub fn take(&mut self, now: u64) -> (Psn, bool) {
        let psn = self.next_psn;
        self.next_psn = psn.next();
        self.since_ackreq += 1;
        self.stats.frames += 1;
        self.last_take = now;
        let ack_req = self.since_ackreq >= self.tuning.ack_every;
        if ack_req {
            self.since_ackreq = 0;
            self.last_ackreq = Some((psn, now));
            if self.awaiting.is_none() {
                self.awaiting = Some((psn, now));
                if self.probing.is_none() && !self.reprobe {
                    // Nothing else is outstanding: the silence clock starts with this frame.
                    self.silent_since = Some(now);
                }
            }
        }
        (psn, ack_req)
    }

    /// From now on, an unconfirmed tail is asked about at once instead of after [`TAIL_RTOS`]
    /// RTOs of quiet (a clean shutdown wants every frame confirmed, or resent, quickly).
    pub fn confirm_promptly(&mut self) {
        self.confirm_now = true;
    }

    /// Frames sent and not yet confirmed that the ring still holds.
    pub fn unconfirmed(&self) -> usize {
        self.ring.as_ref().map_or(0, |r| r.len())
    }

    /// Takes a PSN for a frame that must carry AckReq (a flush at shutdown).
    #[inline]
    pub fn take_with_ackreq(&mut self, now: u64) -> Psn {
        self.since_ackreq = self.tuning.ack_every;
        self.take(now).0
    }

    /// Keeps a copy of the complete frame just sent with `psn` for retransmission (a no-op when
    /// the window is 0). Call it for every frame taken with [`QpTx::take`] or
    /// [`QpTx::take_probe`], in PSN order.
    #[inline]
    pub fn record(&mut self, psn: Psn, frame: &[u8]) {
        if let Some(r) = &mut self.ring {
            r.record(psn, frame);
        }
    }

    /// The retransmission slot to build the frame taken with `psn` in (then copy it to the
    /// transmit batch); `None` without a ring. Equivalent to [`QpTx::record`] after the fact.
    #[inline]
    pub fn ring_slot(&mut self, psn: Psn) -> Option<&mut [u8]> {
        self.ring.as_mut().and_then(|r| r.slot_for(psn))
    }

    /// True while frames wait to be resent ([`QpTx::retransmit`]).
    #[inline]
    pub fn resend_pending(&self) -> bool {
        self.resend != Resend::Idle
    }

    /// Frames the retransmission ring holds, and its capacity (0, 0 without one).
    pub fn ring_usage(&self) -> (usize, usize) {
        self.ring
            .as_ref()
            .map_or((0, 0), |r| (r.len(), r.capacity()))
    }

    /// Bytes preallocated for the retransmission ring.
    pub fn ring_memory(&self) -> usize {
        self.ring.as_ref().map_or(0, |r| r.memory_bytes())
    }

    /// Pushes the frames waiting to be resent to `tx` (to `dest`, kernel-socket offset `off`),
    /// as far as `tx` has room; the rest follow on the next call. Nothing is sent while the QP
    /// is paused (RNR). Returns the frames pushed.
    pub fn retransmit(
        &mut self,
        now: u64,
        tx: &mut TxBatch,
        dest: SocketAddrV4,
        off: usize,
    ) -> usize {
        if self.broken {
            self.resend = Resend::Idle;
            return 0;
        }
        if self.resend == Resend::Idle || self.is_paused(now) || tx.remaining() == 0 {
            return 0;
        }
        let Some(ring) = &self.ring else {
            self.resend = Resend::Idle;
            return 0;
        };
        let last = self.next_psn.sub(1);
        match self.resend {
            Resend::Idle => 0,
            Resend::Oldest(p) => {
                self.resend = Resend::Idle;
                // An ACK may have confirmed it meanwhile: then there is nothing to ask for.
                let Some(f) = ring.get(p).filter(|_| p.diff(self.confirmed) >= 0) else {
                    return 0;
                };
                if !push_resent(tx, dest, off, f, true) {
                    return 0;
                }
                self.stats.retransmitted_frames += 1;
                self.await_answer(p, now, last, ProbeKind::Oldest);
                1
            }
            Resend::From(from) => {
                // Frames confirmed since the round started need not go again.
                let mut cur = if from.diff(self.confirmed) < 0 {
                    self.confirmed
                } else {
                    from
                };
                if !ring.holds_from(cur) || ring.end() != self.next_psn {
                    // Overwritten by newer frames before they could be resent.
                    self.resend = Resend::Idle;
                    self.stats.retx_overruns += 1;
                    self.resync(cur);
                    return 0;
                }
                let mut n = 0;
                while cur != self.next_psn && tx.remaining() > 0 {
                    let f = ring.get(cur).expect("held: checked above");
                    if !push_resent(tx, dest, off, f, cur == last) {
                        break;
                    }
                    cur = cur.next();
                    n += 1;
                }
                self.stats.retransmitted_frames += n as u64;
                if cur == self.next_psn {
                    self.resend = Resend::Idle;
                    if n == 0 {
                        // Everything was confirmed meanwhile: nothing to wait for.
                        return 0;
                    }
                    self.await_answer(from, now, last, ProbeKind::Round);
                } else {
                    self.resend = Resend::From(cur);
                }
                n
            }
        }
    }

    /// Starts a go-back-N round from `from` (frames before it were executed).
    fn start_round(&mut self, from: Psn) {
        self.resend = Resend::From(from);
        self.stats.retransmit_events += 1;
        self.probing = None;
        self.reprobe = false;
        // Frames from `from` on go again: an ACK of them no longer times one transmission.
        self.awaiting = None;
        self.last_ackreq = None;
        self.late = None;
    }

    /// Whether the ring holds every frame from `from` to the newest sent.
    fn can_resend_from(&self, from: Psn) -> bool {
        self.ring
            .as_ref()
            .is_some_and(|r| r.holds_from(from) && r.end() == self.next_psn)
    }

    /// One past the highest PSN ever sent (responses beyond it are foreign).
    #[inline]
    fn high_next(&self) -> Psn {
        if self.high_mark.diff(self.next_psn) > 0 {
            self.high_mark
        } else {
            self.next_psn
        }
    }

    /// True if `psn` is one we could have sent (between the last confirmed PSN − 1 and the
    /// highest PSN sent).
    fn plausible(&self, psn: Psn) -> bool {
        psn.diff(self.confirmed) >= -1 && psn.diff(self.high_next()) < 0
    }

    /// Processes an ACK, NAK or atomic ACK naming `psn`.
    pub fn on_response(&mut self, now: u64, syndrome: Syndrome, psn: Psn) -> QpEvent {
        match syndrome {
            Syndrome::Ack { .. } => {
                // An ACK names the newest PSN executed.
                if !self.plausible(psn) {
                    self.stats.stale_responses += 1;
                    return QpEvent::None;
                }
                self.stats.acks += 1;
                self.heard(now);
                if psn.diff(self.confirmed) >= 0 {
                    self.confirmed = psn.next();
                }
                if let Some(r) = &mut self.ring {
                    r.release_through(psn);
                    if self.last_nak.is_some_and(|n| psn.diff(n) >= 0) {
                        self.last_nak = None;
                    }
                }
                // Round-trip samples (Karn: only frames sent once; a go-back-N round drops the
                // timers of the frames it resends). An ACK covering an AckReq'd frame times it:
                // right away when nothing is being recovered, or, for a frame whose timer
                // expired (`late`), as an upper bound (the ACK may answer the resend or probe
                // instead). A zero-length probe's own answer gives a lower bound when nothing
                // else does. Together they let the RTO grow to a responder that became slower
                // instead of timing it out spuriously forever.
                let mut sample = None;
                if let Some((want, at)) = self.awaiting {
                    if psn.diff(want) >= 0 {
                        if self.probing.is_none() && self.loss_since.is_none() {
                            sample = Some(now.saturating_sub(at));
                        }
                        self.awaiting = None;
                    }
                }
                if let Some((want, at)) = self.late {
                    if psn.diff(want) >= 0 {
                        sample = Some(now.saturating_sub(at));
                        self.late = None;
                    }
                }
                if let Some(p) = self.probing.filter(|p| p.kind == ProbeKind::Probe) {
                    // (Never a resent frame's answer: it may answer the first transmission.)
                    if psn.diff(p.psn) >= 0 {
                        sample.get_or_insert(now.saturating_sub(p.sent_at));
                    }
                }
                if let Some(r) = sample {
                    self.rtt_sample(r);
                }
                if self.awaiting.is_none() && self.ring.is_some() {
                    // A later AckReq'd frame already went out: its ACK is due next.
                    if let Some((p, at)) = self.last_ackreq.filter(|&(p, _)| p.diff(psn) > 0) {
                        self.awaiting = Some((p, at));
                    }
                }
                if let Some(p) = self.probing.filter(|p| p.kind != ProbeKind::Probe) {
                    if p.kind == ProbeKind::Round && psn.diff(p.before) >= 0 {
                        // The round's last frame is confirmed.
                        self.probing = None;
                    } else if p.kind == ProbeKind::Oldest && psn.diff(p.psn) >= 0 {
                        self.probing = None;
                        if psn.diff(p.before) < 0 {
                            // The responder executed the resent frame (or re-ACKed the newest
                            // it executed) but not what followed: go back to there.
                            if self.can_resend_from(psn.next()) {
                                self.start_round(psn.next());
                                return QpEvent::Retransmit;
                            }
                            // Those frames left the ring: fall back to probing at the PSN
                            // the responder waits at.
                            self.stats.retx_overruns += 1;
                            self.reprobe = true;
                            return QpEvent::Probe;
                        }
                    }
                } else if let Some(p) = self.probing {
                    if psn.diff(p.psn) >= 0 {
                        // The probe was answered (executed, or re-ACKed as a duplicate).
                        self.probing = None;
                        if psn.diff(p.before) < 0 {
                            // Frames sent before the probe were not executed: the responder
                            // waits at `confirmed`. Probe exactly there; it will execute it
                            // and NAK the next real frame with the PSN to continue from.
                            // A probe at an unconfirmed PSN that was answered short of the
                            // frames before it most likely executed in the place of the
                            // frame sent at that PSN: count that frame as lost (at worst
                            // one frame too many, never a loss unseen).
                            if p.psn.diff(p.before) <= 0 && psn.diff(p.psn) == 0 {
                                self.stats.psn_skipped += 1;
                            }
                            self.reprobe = true;
                            return QpEvent::Probe;
                        }
                    }
                }
                if self.probing.is_none() && !self.reprobe && self.resend == Resend::Idle {
                    if let Some(t) = self.loss_since.take() {
                        self.note_resync(now.saturating_sub(t));
                    }
                }
                QpEvent::None
            }
            Syndrome::Nak(NakCode::PsnSequenceError) => {
                // The NAK names the PSN the responder expects; it never executed anything at or
                // after it, so continuing there reuses no executed PSN.
                let stale = !(self.plausible(psn) || psn == self.high_next())
                    || (self.last_nak == Some(psn) && psn.diff(self.next_psn) < 0)
                    || (self.ring.is_some() && psn.diff(self.confirmed) < 0);
                if stale {
                    self.stats.stale_responses += 1;
                    return QpEvent::None;
                }
                self.stats.nak_seq += 1;
                self.probing = None;
                self.heard(now);
                self.reprobe = false;
                self.last_nak = Some(psn);
                if psn.diff(self.confirmed) > 0 {
                    self.confirmed = psn;
                }
                let t = self.loss_since.take().unwrap_or(now);
                let mut ev = QpEvent::None;
                if self.can_resend_from(psn) {
                    if let Some(r) = &mut self.ring {
                        r.release_through(psn.sub(1));
                    }
                    if psn != self.next_psn {
                        self.start_round(psn);
                        ev = QpEvent::Retransmit;
                    }
                } else {
                    if self.ring.is_some() {
                        self.stats.retx_overruns += 1;
                    }
                    self.resync(psn);
                }
                self.note_resync(now.saturating_sub(t));
                ev
            }
            Syndrome::RnrNak { timer } => {
                self.stats.nak_rnr += 1;
                self.heard(now);
                self.paused_until = now + rnr_timer_ns(timer);
                // The RNR'd request was not executed (nor anything after it): after the pause,
                // resend from it (or, without those frames, continue from it).
                if !(self.plausible(psn) || psn == self.high_next()) {
                    return QpEvent::None;
                }
                if self.can_resend_from(psn) {
                    if psn.diff(self.confirmed) > 0 {
                        self.confirmed = psn;
                    }
                    if let Some(r) = &mut self.ring {
                        r.release_through(psn.sub(1));
                    }
                    if psn != self.next_psn {
                        self.start_round(psn);
                        return QpEvent::Retransmit;
                    }
                    return QpEvent::None;
                }
                if self.ring.is_some() {
                    self.stats.retx_overruns += 1;
                }
                self.resync(psn);
                QpEvent::None
            }
            Syndrome::Nak(NakCode::RemoteAccessError) => {
                self.stats.nak_access += 1;
                self.broken = true;
                QpEvent::Broken
            }
            Syndrome::Nak(NakCode::InvalidRequest) => {
                self.stats.nak_invalid += 1;
                self.broken = true;
                QpEvent::Broken
            }
            _ => {
                self.stats.nak_other += 1;
                self.broken = true;
                QpEvent::Broken
            }
        }
    }

    fn resync(&mut self, to: Psn) {
        self.high_mark = self.high_next();
        let skipped = self.next_psn.diff(to);
        if skipped != 0 {
            self.stats.psn_resyncs += 1;
            if skipped > 0 {
                self.stats.psn_skipped += skipped as u64;
            }
        }
        self.next_psn = to;
        self.last_ackreq = None;
        if let Some(r) = &mut self.ring {
            r.reset(to);
        }
        self.resend = Resend::Idle;
        self.awaiting = None;
        // PSNs from `to` on are reused for new frames: an ACK naming them says nothing about
        // the frame that timed out.
        self.late = None;
        self.since_ackreq = 0;
    }

    /// A response arrived: the responder is alive. The silence clock restarts if something
    /// is still outstanding, and the probe back-off ends (it exists for a silent responder; a
    /// loss must still be found one RTO after it happens).
    fn heard(&mut self, now: u64) {
        // Keep the mark within half the PSN space of the send PSN (responses come far more
        // often than every 2²³ frames).
        self.high_mark = self.high_next();
        self.probes_unanswered = 0;
        if let Some(t) = self.silent_since.take() {
            self.stats.silence_ns_max = self.stats.silence_ns_max.max(now.saturating_sub(t));
        }
        if self.awaiting.is_some() || self.probing.is_some() {
            self.silent_since = Some(now);
        }
    }

    /// RFC 6298 §2: SRTT and RTTVAR from one round-trip sample `r` (ns).
    fn rtt_sample(&mut self, r: u64) {
        self.stats.rtt_samples += 1;
        self.probes_unanswered = 0;
        let (srtt, rttvar) = match self.srtt {
            None => (r, r / 2),
            Some((srtt, rttvar)) => {
                let rttvar = (3 * rttvar + srtt.abs_diff(r)) / 4;
                ((7 * srtt + r) / 8, rttvar)
            }
        };
        self.srtt = Some((srtt, rttvar));
        self.stats.srtt_ns = srtt;
        self.stats.rto_ns = self.rto();
    }

    /// The retransmission timeout without back-off (ns).
    pub fn rto(&self) -> u64 {
        let t = &self.tuning;
        let max = t.rto_max_ns.max(t.rto_min_ns);
        match self.srtt {
            None => t.ack_timeout_ns.clamp(t.rto_min_ns, max),
            Some((srtt, rttvar)) => srtt.saturating_add(4 * rttvar).clamp(t.rto_min_ns, max),
        }
    }

    /// The wait before the next timeout fires: the RTO doubled per unanswered probe (RFC 6298
    /// §5.5), at most `rto_max`.
    fn current_timeout(&self) -> u64 {
        let max = self.tuning.rto_max_ns.max(self.tuning.rto_min_ns);
        self.rto()
            .saturating_mul(1u64 << self.probes_unanswered.min(20))
            .min(max)
    }

    fn note_resync(&mut self, ns: u64) {
        self.stats.resync_ns_total += ns;
        self.stats.resync_ns_max = self.stats.resync_ns_max.max(ns);
    }

    /// Checks the ACK timer. Returns the PSN a probe must carry if one is due; the caller
    /// sends a zero-length WRITE with AckReq at exactly that PSN, taken with
    /// [`QpTx::take_probe`].
    pub fn poll_timeout(&mut self, now: u64) -> Option<Psn> {
        if self.reprobe {
            self.reprobe = false;
            self.fresh_probe = false;
            return Some(self.confirmed);
        }
        let sent_at = self.timer_base()?;
        if now.saturating_sub(sent_at) < self.timer_wait() {
            return None;
        }
        if self
            .silent_since
            .is_some_and(|t| now.saturating_sub(t) >= self.tuning.broken_after_ns)
        {
            self.broken = true;
            self.probing = None;
            self.awaiting = None;
            self.silent_since = None;
            return None;
        }
        // Nothing was asked for: a tail of frames without AckReq went unanswered, which is
        // no sign of loss by itself (it is the normal end of a burst).
        let tail = self.probing.is_none() && self.awaiting.is_none();
        let first = self.probes_unanswered == 0;
        if !tail {
            self.stats.ack_timeouts += 1;
            if self.loss_since.is_none() {
                self.loss_since = Some(sent_at);
            }
        }
        self.probes_unanswered += 1;
        if let Some(a) = self.awaiting.take() {
            self.late = Some(a);
        }
        if self.confirmed != self.next_psn && self.can_resend_from(self.confirmed) {
            // Timeouts alternate two questions. The oldest unconfirmed frame, resent with
            // AckReq, is what a responder that NAKed and drops everything else waits for.
            // A zero-length probe on a fresh PSN (kept in the ring like any frame) is answered
            // in every other state, by an ACK (everything before it executed: no duplicate)
            // or a NAK naming where to go back to; it also answers a duplicate atomic the
            // responder no longer holds a result for. An AckReq'd frame's timeout asks the
            // first, an unconfirmed tail the second.
            let probe = if first { tail } else { self.probe_next };
            self.probe_next = !probe;
            if !probe {
                self.probing = None;
                self.resend = Resend::Oldest(self.confirmed);
                self.stats.retransmit_events += 1;
                return None;
            }
            self.fresh_probe = true;
            return Some(self.next_psn);
        }
        // The first probe after an answer takes a fresh PSN. If frames before it were lost,
        // the responder NAKs it with the PSN it waits at and the resync counts the loss; it
        // cannot execute in the place of a lost frame, so a lost last frame is never hidden.
        // Only when a fresh probe went unanswered (the responder may be dropping out-of-
        // sequence requests silently after a NAK that was lost, as rxe does) does the probe go
        // to the oldest unconfirmed PSN, where it executes and makes the responder NAK the
        // next frame; that probe is counted as a possibly lost frame (`take_probe`).
        self.fresh_probe = self.probes_unanswered <= 1;
        Some(if self.fresh_probe {
            self.next_psn
        } else {
            self.confirmed
        })
    }

    /// Waits for the answer to `psn` (sent at `now`; frames up to `before` were out), and
    /// starts the silence clock if it is not running.
    fn await_answer(&mut self, psn: Psn, now: u64, before: Psn, kind: ProbeKind) {
        self.probing = Some(Probe {
            psn,
            sent_at: now,
            before,
            kind,
        });
        self.silent_since.get_or_insert(now);
    }

    /// Records the probe `poll_timeout` asked for and returns its PSN (the oldest unconfirmed
    /// one). The send PSN is not touched: normal frames keep flowing.
    pub fn take_probe(&mut self, now: u64) -> Psn {
        let (psn, before) = if self.fresh_probe {
            self.fresh_probe = false;
            let psn = self.next_psn;
            self.next_psn = psn.next();
            (psn, psn.sub(1))
        } else {
            (self.confirmed, self.next_psn.sub(1))
        };
        self.await_answer(psn, now, before, ProbeKind::Probe);
        self.stats.probes += 1;
        psn
    }

    /// When the running timer started: the outstanding probe or resend, else the AckReq'd
    /// frame awaiting its ACK, else (with a ring) the newest frame of an unconfirmed tail that
    /// carried no AckReq, which the responder will not answer unasked.
    /// How long the running timer waits: the (backed-off) RTO, or, for an unconfirmed tail
    /// that nothing asked about, [`TAIL_RTOS`] times it (traffic with gaps of about one RTO
    /// must not draw a check per gap), at most `rto_max`.
    fn timer_wait(&self) -> u64 {
        let t = self.current_timeout();
        if self.probing.is_none() && self.awaiting.is_none() {
            if self.confirm_now {
                return 0;
            }
            let max = self.tuning.rto_max_ns.max(self.tuning.rto_min_ns);
            t.saturating_mul(TAIL_RTOS).min(max).max(t)
        } else {
            t
        }
    }

    fn timer_base(&self) -> Option<u64> {
        match (self.probing, self.awaiting) {
            (Some(p), _) => Some(p.sent_at),
            (None, Some((_, t))) => Some(t),
            (None, None) => (self.ring.is_some()
                && self.confirmed != self.next_psn
                && self.resend == Resend::Idle)
                .then_some(self.last_take),
        }
    }

    /// When the next timer fires, if any (ns).
    pub fn next_deadline(&self) -> Option<u64> {
        if self.broken {
            return None;
        }
        if self.reprobe {
            return Some(0);
        }
        if self.resend != Resend::Idle {
            return Some(self.paused_until);
        }
        let wait = self.timer_wait();
        let t = self.timer_base().map(|at| at + wait);
        match (t, self.paused_until) {
            (Some(t), p) if p > 0 => Some(t.min(p)),
            (None, p) if p > 0 => Some(p),
            (t, _) => t,
        }
    }
}

/// Queues a copy of the held frame `f` to `dest` (kernel-socket offset `off`), with AckReq set
/// when `ack_req`; false when `tx` is full.
fn push_resent(tx: &mut TxBatch, dest: SocketAddrV4, off: usize, f: &[u8], ack_req: bool) -> bool {
    tx.push_with(dest, off, |buf| {
        let b = &mut buf[..f.len()];
        b.copy_from_slice(f);
        if ack_req {
            set_ack_req(b);
        }
        f.len()
    })
}

/// An unconfirmed tail of frames without AckReq is asked about after this many RTOs of quiet.
pub const TAIL_RTOS: u64 = 4;

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

    fn qp() -> QpTx {
        qp_with(Psn::new(0xFFFFFE), 0, 0)
    }

    /// A QP starting at `start` with a retransmission ring of `window` frames of `frame_len`
    /// bytes (none for 0) and timers short enough to step through.
    fn qp_with(start: Psn, window: u32, frame_len: usize) -> QpTx {
        QpTx::new(
            Qpn::new(0x100),
            Qpn::new(0x11),
            start,
            QpTuning {
                ack_every: 4,
                ack_timeout_ns: 1000,
                rto_min_ns: 500,
                rto_max_ns: 8000,
                broken_after_ns: 20_000,
                retransmit_window: window,
            },
            frame_len,
        )
    }

    #[test]
    fn psn_wraps_and_ackreq_cadence() {
        let mut q = qp();
        let got: Vec<(u32, bool)> = (0..8)
            .map(|_| q.take(0))
            .map(|(p, a)| (p.value(), a))
            .collect();
        assert_eq!(
            got,
            vec![
                (0xFFFFFE, false),
                (0xFFFFFF, false),
                (0, false),
                (1, true),
                (2, false),
                (3, false),
                (4, false),
                (5, true)
            ]
        );
    }

    #[test]
    fn nak_sequence_error_resyncs_to_expected() {
        let mut q = qp();
        for _ in 0..10 {
            q.take(0);
        }
        assert_eq!(
            q.on_response(5, Syndrome::Nak(NakCode::PsnSequenceError), Psn::new(1)),
            QpEvent::None
        );
        assert_eq!(q.next_psn(), Psn::new(1));
        assert_eq!(q.stats.psn_resyncs, 1);
        assert_eq!(q.stats.psn_skipped, 7);
        // A NAK naming a PSN we never sent is ignored.
        q.on_response(6, Syndrome::Nak(NakCode::PsnSequenceError), Psn::new(500));
        assert_eq!(q.next_psn(), Psn::new(1));
        assert_eq!(q.stats.stale_responses, 1);
    }

    #[test]
    fn late_ack_then_the_fresh_probes_answer() {
        let mut q = qp();
        let s = q.next_psn();
        for _ in 0..4 {
            q.take(0);
        }
        // The 4th frame (AckReq) gets no ACK in time: the probe takes a fresh PSN.
        assert_eq!(q.poll_timeout(500), None);
        let probe = q.poll_timeout(1500).expect("timeout fires");
        assert_eq!(probe, s.add(4));
        assert_eq!(q.take_probe(1500), probe);
        assert!(
            !q.is_paused(1500),
            "normal traffic continues during a probe"
        );
        let (p, _) = q.take(1500);
        assert_eq!(p, s.add(5), "the send PSN never moves back for a probe");
        // The late ACK, then the probe's answer.
        q.on_response(1600, Syndrome::Ack { credits: 31 }, s.add(3));
        q.on_response(1650, Syndrome::Ack { credits: 31 }, s.add(4));
        assert_eq!(q.poll_timeout(1700), None, "no further probe");
        assert_eq!((q.stats.psn_resyncs, q.stats.psn_skipped), (0, 0));
    }

    /// Regression (finding 6): a lost last frame was hidden by a probe at its PSN, which the
    /// responder executed in its place. A fresh-PSN probe is NAKed instead, and the loss is
    /// counted.
    #[test]
    fn a_lost_tail_is_counted_through_the_fresh_probes_nak() {
        let mut q = qp();
        let s = q.next_psn();
        for _ in 0..8 {
            q.take(0);
        }
        // The responder executed the first frame; the other seven were lost, and nothing after
        // them arrived, so it waits at s + 1 without having NAKed.
        q.on_response(10, Syndrome::Ack { credits: 31 }, s);
        let p = q.poll_timeout(5000).unwrap();
        assert_eq!(p, s.add(8), "a fresh PSN, not the lost frame's");
        q.take_probe(5000);
        // The probe arrives out of sequence: NAK naming s + 1.
        q.on_response(5100, Syndrome::Nak(NakCode::PsnSequenceError), s.add(1));
        assert_eq!(q.next_psn(), s.add(1));
        assert_eq!(q.stats.psn_resyncs, 1);
        assert_eq!(q.stats.psn_skipped, 8, "seven lost frames and the probe");
        assert_eq!(q.poll_timeout(5200), None);
    }

    #[test]
    fn after_a_lost_nak_the_probe_goes_to_the_oldest_unconfirmed_psn() {
        let mut q = qp();
        let s = q.next_psn();
        for _ in 0..8 {
            q.take(0);
        }
        // Executed up to s; everything after was lost, and the responder's NAK too: it now
        // drops out-of-sequence requests silently (rxe), so the fresh probe gets no answer.
        q.on_response(10, Syndrome::Ack { credits: 31 }, s);
        assert_eq!(q.poll_timeout(5000), Some(s.add(8)));
        q.take_probe(5000);
        let p = q.poll_timeout(20_000).expect("the fresh probe timed out");
        assert_eq!(p, s.add(1));
        q.take_probe(20_000);
        // It executes (s + 1 was expected): ACK s + 1, short of what was sent, so the next
        // probe goes out at once at s + 2; that executes too, and the next real frame is NAKed
        // with the PSN to continue from.
        assert_eq!(
            q.on_response(20_100, Syndrome::Ack { credits: 31 }, s.add(1)),
            QpEvent::Probe
        );
        assert_eq!(q.poll_timeout(20_100), Some(s.add(2)));
        q.take_probe(20_100);
        q.on_response(20_200, Syndrome::Ack { credits: 31 }, s.add(2));
        q.on_response(20_300, Syndrome::Nak(NakCode::PsnSequenceError), s.add(3));
        assert_eq!(q.next_psn(), s.add(3));
        // s + 1 .. s + 8 never executed as sent: two probes stood in for s + 1 and s + 2, the
        // NAK skipped s + 3 .. s + 8 (the last being the fresh probe).
        assert_eq!(q.stats.psn_skipped, 8);
        assert!(q.stats.resync_ns_max > 0);
        // A repeat of the same NAK after we moved on is stale.
        q.take(20_400);
        q.on_response(20_500, Syndrome::Nak(NakCode::PsnSequenceError), s.add(3));
        assert_eq!(
            q.next_psn(),
            s.add(4),
            "a repeated NAK never rewinds over executed PSNs"
        );
    }

    #[test]
    fn silence_breaks_the_qp_after_broken_after_with_backed_off_probes() {
        let mut q = qp();
        for _ in 0..4 {
            q.take(0);
        }
        // Probes at 1000 (the initial RTO), then 2000, 4000, 8000 (rto_max) later: the wait
        // doubles per timeout. The QP breaks at the first timeout ≥ 20 000 ns of silence.
        let mut probes = Vec::new();
        let mut t = 0;
        while !q.is_broken() && t < 100_000 {
            t += 100;
            if q.poll_timeout(t).is_some() {
                q.take_probe(t);
                probes.push(t);
            }
        }
        assert_eq!(probes, vec![1000, 3000, 7000, 15000]);
        assert_eq!(t, 23000, "broken at the first timeout past 20 000 ns");
        assert_eq!(q.stats.probes, 4);
    }

    #[test]
    fn any_answer_restarts_the_silence_clock() {
        let mut q = qp();
        for _ in 0..4 {
            q.take(0);
        }
        let mut t = 0;
        // 15 µs of silence, then a late ACK of everything: alive, no break.
        while t < 15_000 {
            t += 100;
            if q.poll_timeout(t).is_some() {
                q.take_probe(t);
            }
        }
        q.on_response(t, Syndrome::Ack { credits: 31 }, Psn::new(1));
        assert!(!q.is_broken());
        assert_eq!(q.stats.silence_ns_max, 15_000);
        // Idle for far longer than broken_after, then new traffic: the clock starts afresh.
        t += 1_000_000;
        for _ in 0..4 {
            q.take(t);
        }
        assert!(q.poll_timeout(t + 8_100).is_some(), "at most rto_max later");
        assert!(!q.is_broken(), "the idle time is not silence");
    }

    #[test]
    fn rto_follows_measured_round_trips() {
        let mut q = QpTx::new(
            Qpn::new(0x100),
            Qpn::new(0x11),
            Psn::new(0),
            QpTuning {
                ack_every: 1,
                ack_timeout_ns: 20_000_000,
                rto_min_ns: 1_000_000,
                rto_max_ns: 1_000_000_000,
                broken_after_ns: 5_000_000_000,
                retransmit_window: 0,
            },
            0,
        );
        assert_eq!(q.rto(), 20_000_000, "initial RTO before any sample");
        // Round trips of 100 µs: RTO falls to the floor.
        let mut t = 0;
        for _ in 0..50 {
            let (p, ack) = q.take(t);
            assert!(ack);
            t += 100_000;
            q.on_response(t, Syndrome::Ack { credits: 31 }, p);
        }
        assert_eq!(q.stats.rtt_samples, 50);
        assert!(
            (99_000..=101_000).contains(&q.stats.srtt_ns),
            "{:?}",
            q.stats
        );
        assert_eq!(q.rto(), 1_000_000);
        // The collector slows to 50 ms round trips. The first ones time out; the backed-off
        // timeout soon exceeds 50 ms, samples are taken again, and the RTO settles above them.
        let mut timeouts_per_round = Vec::new();
        for _ in 0..40 {
            let (p, _) = q.take(t);
            let before = q.stats.ack_timeouts;
            for _ in 0..50 {
                t += 1_000_000;
                if q.poll_timeout(t).is_some() {
                    q.take_probe(t);
                }
            }
            q.on_response(t, Syndrome::Ack { credits: 31 }, p);
            timeouts_per_round.push(q.stats.ack_timeouts - before);
        }
        assert!(q.stats.ack_timeouts <= 40, "{timeouts_per_round:?}");
        assert!(
            timeouts_per_round[20..].iter().all(|&n| n == 0),
            "learnt: {timeouts_per_round:?}"
        );
        assert!(q.rto() > 50_000_000 && q.rto() < 200_000_000, "{}", q.rto());
        assert!(!q.is_broken());
    }

    #[test]
    fn fatal_naks_break_the_qp() {
        let mut q = qp();
        q.take(0);
        assert_eq!(
            q.on_response(
                1,
                Syndrome::Nak(NakCode::RemoteAccessError),
                Psn::new(0xFFFFFE)
            ),
            QpEvent::Broken
        );
        assert!(q.is_broken());
    }

    #[test]
    fn rnr_pauses() {
        let mut q = qp();
        q.take(0);
        q.on_response(10, Syndrome::RnrNak { timer: 14 }, Psn::new(0xFFFFFE));
        assert!(q.is_paused(10 + 1_000_000));
        assert!(!q.is_paused(10 + 1_280_000));
        assert_eq!(q.next_psn(), Psn::new(0xFFFFFE));
    }

    mod ring {
        use super::super::*;
        use dta_proto::icrc::check_frame;
        use dta_proto::wire::ib::opcode;
        use dta_proto::wire::roce::{FrameTemplate, RoceEndpoint, L2L4_LEN};
        use std::net::{Ipv4Addr, SocketAddrV4};

        const START: u32 = 0xFF_FFFA;

        fn tmpl() -> FrameTemplate {
            let ep = RoceEndpoint {
                src_mac: dta_proto::wire::ethernet::MacAddr([2, 0, 0, 0, 0, 1]),
                dst_mac: dta_proto::wire::ethernet::MacAddr([2, 0, 0, 0, 0, 2]),
                src_ip: Ipv4Addr::new(10, 0, 0, 1),
                dst_ip: Ipv4Addr::new(10, 0, 0, 2),
                src_port: 4791,
                dst_port: 4791,
                ttl: 64,
                tos: 0,
                ident: 0,
            };
            FrameTemplate::new(&ep, opcode::RC_RDMA_WRITE_ONLY, Qpn::new(0x11), 24)
        }

        fn rqp(window: u32) -> QpTx {
            super::qp_with(Psn::new(START), window, tmpl().frame_len())
        }

        /// Takes a PSN, builds a WRITE carrying `tag` and records it, as the pipeline does.
        fn send(q: &mut QpTx, now: u64, tag: u8) -> Vec<u8> {
            let (psn, ack) = q.take(now);
            let mut buf = vec![0u8; 256];
            let n = tmpl().emit(&mut buf, psn, ack, |ext| ext.fill(tag));
            buf.truncate(n);
            q.record(psn, &buf);
            buf
        }

        fn resend(q: &mut QpTx, now: u64, room: usize) -> Vec<Vec<u8>> {
            let mut tx = TxBatch::new(room, 512);
            let dest = SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 2), 4791);
            let n = q.retransmit(now, &mut tx, dest, L2L4_LEN);
            assert_eq!(n, tx.len());
            (0..tx.len()).map(|i| tx.frame(i).to_vec()).collect()
        }

        fn psn_of(f: &[u8]) -> Psn {
            Psn::new(
                u32::from_be_bytes(f[L2L4_LEN + 8..L2L4_LEN + 12].try_into().unwrap()) & 0xFF_FFFF,
            )
        }

        fn ack_req(f: &[u8]) -> bool {
            f[L2L4_LEN + 8] & 0x80 != 0
        }

        /// `f` is `orig` with AckReq set and a valid ICRC.
        fn same_but_ackreq(f: &[u8], orig: &[u8]) {
            assert!(ack_req(f) && check_frame(f));
            let mut g = f.to_vec();
            g[L2L4_LEN + 8] = orig[L2L4_LEN + 8];
            let n = g.len();
            assert_eq!(g[..n - 4], orig[..n - 4], "only AckReq and the ICRC differ");
        }

        #[test]
        fn nak_in_the_middle_resends_exactly_the_frames_from_there() {
            let mut q = rqp(16);
            // Earlier rounds, acknowledged: their slots are reused (PSNs wrap at 2^24 here).
            let mut t = 0;
            for round in 0..5u8 {
                let mut last = Psn::new(0);
                for i in 0..6u8 {
                    let f = send(&mut q, t, round * 16 + i);
                    last = psn_of(&f);
                }
                t += 10;
                q.on_response(t, Syndrome::Ack { credits: 31 }, last);
                assert_eq!(q.ring_usage().0, 0, "an ACK releases what it confirms");
            }
            let s = q.next_psn();
            assert_eq!(s, Psn::new(START).add(30));
            // s+1 and s+5 carry AckReq (every 4th frame since the last).
            let sent: Vec<Vec<u8>> = (0..9u8).map(|i| send(&mut q, t, 100 + i)).collect();
            // The responder executed s..s+2 (ACK of the AckReq'd frame s+1 is coalesced) and
            // lost s+3: NAK naming it.
            q.on_response(t + 5, Syndrome::Ack { credits: 31 }, s.add(1));
            assert_eq!(
                q.on_response(t + 6, Syndrome::Nak(NakCode::PsnSequenceError), s.add(3)),
                QpEvent::Retransmit
            );
            assert!(q.resend_pending());
            // The transmit batch has room for 4 frames now, the rest on the next call.
            let mut got = resend(&mut q, t + 7, 4);
            assert!(q.resend_pending());
            got.extend(resend(&mut q, t + 8, 64));
            assert!(!q.resend_pending());
            assert_eq!(got.len(), 6);
            for (f, orig) in got[..5].iter().zip(&sent[3..8]) {
                assert_eq!(f, orig, "resent unchanged: same PSN, same bytes");
            }
            // The last frame (s+8) had no AckReq: the resend adds it, with a valid ICRC.
            assert!(ack_req(&sent[5]) && !ack_req(&sent[8]));
            same_but_ackreq(&got[5], &sent[8]);
            assert_eq!(q.next_psn(), s.add(9), "the send PSN never moves back");
            assert_eq!(q.stats.retransmitted_frames, 6);
            assert_eq!(q.stats.retransmit_events, 1);
            assert_eq!((q.stats.psn_resyncs, q.stats.psn_skipped), (0, 0));
            // The same NAK again (e.g. for a frame that was in flight): ignored.
            q.on_response(t + 9, Syndrome::Nak(NakCode::PsnSequenceError), s.add(3));
            assert!(!q.resend_pending());
            assert_eq!(q.stats.retransmit_events, 1);
            // The round's last frame is acknowledged: nothing more to do.
            q.on_response(t + 20, Syndrome::Ack { credits: 31 }, s.add(8));
            assert_eq!(q.poll_timeout(t + 100_000), None);
            assert_eq!(q.ring_usage(), (0, 16));
        }

        #[test]
        fn overrun_falls_back_to_resync_and_counts() {
            let mut q = rqp(4);
            let s = q.next_psn();
            for i in 0..10 {
                send(&mut q, 0, i);
            }
            assert_eq!(q.ring_usage(), (4, 4));
            // s+2 has been overwritten by s+6.
            assert_eq!(
                q.on_response(5, Syndrome::Nak(NakCode::PsnSequenceError), s.add(2)),
                QpEvent::None
            );
            assert!(!q.resend_pending());
            assert_eq!(q.next_psn(), s.add(2));
            assert_eq!(q.stats.psn_resyncs, 1);
            assert_eq!(q.stats.psn_skipped, 8);
            assert_eq!(q.stats.retx_overruns, 1);
            // The ring starts again from the resync: a later loss is recovered.
            send(&mut q, 10, 50);
            let f = send(&mut q, 10, 51);
            send(&mut q, 10, 52);
            assert_eq!(
                q.on_response(15, Syndrome::Nak(NakCode::PsnSequenceError), s.add(3)),
                QpEvent::Retransmit
            );
            let got = resend(&mut q, 16, 8);
            assert_eq!(got.len(), 2);
            assert_eq!(got[0], f);
            assert_eq!(q.stats.retx_overruns, 1);
        }

        #[test]
        fn timeout_resends_the_oldest_frame_with_ackreq_then_goes_back_n() {
            let mut q = rqp(64);
            let s = q.next_psn();
            let sent: Vec<Vec<u8>> = (0..8u8).map(|i| send(&mut q, 0, i)).collect();
            // The ACK of s+3 arrives; s+4..s+7 (the tail, with the AckReq'd s+7) are lost.
            q.on_response(100, Syndrome::Ack { credits: 31 }, s.add(3));
            assert_eq!(q.poll_timeout(400), None, "not yet");
            assert!(!q.resend_pending());
            assert_eq!(q.poll_timeout(1100), None, "no probe: a resend instead");
            assert!(q.resend_pending());
            assert_eq!(q.stats.ack_timeouts, 1);
            let got = resend(&mut q, 1100, 8);
            assert_eq!(got.len(), 1, "only the oldest unconfirmed frame");
            assert_eq!(psn_of(&got[0]), s.add(4));
            same_but_ackreq(&got[0], &sent[4]);
            assert_eq!(q.stats.probes, 0);
            // The responder executes it and ACKs s+4, short of s+7: go back to s+5.
            assert_eq!(
                q.on_response(1200, Syndrome::Ack { credits: 31 }, s.add(4)),
                QpEvent::Retransmit
            );
            let got = resend(&mut q, 1200, 8);
            assert_eq!(got.len(), 3);
            assert_eq!(got[0], sent[5]);
            assert_eq!(got[1], sent[6]);
            assert_eq!(got[2], sent[7], "s+7 already carried AckReq: unchanged");
            q.on_response(1300, Syndrome::Ack { credits: 31 }, s.add(7));
            assert_eq!(q.poll_timeout(100_000), None);
            assert_eq!(q.stats.retransmit_events, 2);
            assert_eq!(q.stats.retransmitted_frames, 4);
            assert_eq!((q.stats.psn_resyncs, q.stats.psn_skipped), (0, 0));
            assert_eq!(
                q.stats.rtt_samples, 1,
                "Karn: only s+3's, none from resent frames"
            );
        }

        #[test]
        fn unanswered_resends_alternate_with_fresh_probes() {
            let mut q = rqp(64);
            let s = q.next_psn();
            for i in 0..4 {
                send(&mut q, 0, i);
            }
            assert_eq!(q.poll_timeout(1000), None);
            assert_eq!(resend(&mut q, 1000, 8).len(), 1);
            // No answer (e.g. a duplicate atomic the responder no longer holds a result for):
            // a fresh probe, kept in the ring like any frame.
            let p = q.poll_timeout(3000).expect("a probe");
            assert_eq!(p, s.add(4));
            assert_eq!(q.take_probe(3000), p);
            q.record(p, &send_probe_frame(p));
            // The responder had executed everything: it executes the probe and ACKs it.
            q.on_response(3100, Syndrome::Ack { credits: 31 }, p);
            assert_eq!(q.poll_timeout(100_000), None);
            assert_eq!(q.ring_usage().0, 0);
            assert!(!q.is_broken());
        }

        /// Regression: a lost last frame without AckReq was found only when more traffic came.
        #[test]
        fn an_idle_unconfirmed_tail_is_asked_about_with_a_fresh_probe() {
            let mut q = rqp(64);
            let s = q.next_psn();
            let sent: Vec<Vec<u8>> = (0..3u8).map(|i| send(&mut q, 0, i)).collect();
            // Nothing asked for an ACK; TAIL_RTOS RTOs after the newest frame the QP asks.
            assert_eq!(q.poll_timeout(3900), None);
            let p = q
                .poll_timeout(4000)
                .expect("a fresh probe, not a duplicate");
            assert_eq!(p, s.add(3));
            q.take_probe(4000);
            q.record(p, &send_probe_frame(p));
            assert_eq!(q.stats.ack_timeouts, 0, "not counted as a loss");
            // Clean link: the responder executes the probe; everything is confirmed.
            q.on_response(4100, Syndrome::Ack { credits: 31 }, p);
            assert_eq!(q.ring_usage().0, 0);
            assert_eq!(q.poll_timeout(1_000_000), None, "nothing more to ask");
            // Next burst (s+4 carries AckReq and is ACKed), whose last frame s+7 is lost: the
            // probe is NAKed, the frame resent.
            let more: Vec<Vec<u8>> = (4..8u8).map(|i| send(&mut q, 2_000_000, i)).collect();
            q.on_response(2_000_100, Syndrome::Ack { credits: 31 }, s.add(4));
            assert_eq!(
                q.poll_timeout(2_001_000),
                None,
                "quiet for less than 4 RTOs"
            );
            let p = q.poll_timeout(2_002_000).expect("a fresh probe");
            assert_eq!(p, s.add(8));
            q.take_probe(2_002_000);
            q.record(p, &send_probe_frame(p));
            assert_eq!(
                q.on_response(
                    2_002_100,
                    Syndrome::Nak(NakCode::PsnSequenceError),
                    s.add(7)
                ),
                QpEvent::Retransmit
            );
            let got = resend(&mut q, 2_002_100, 8);
            assert_eq!(got.len(), 2, "the lost frame and the probe");
            assert_eq!(got[0], more[3]);
            assert_eq!(psn_of(&got[1]), p);
            assert_eq!((q.stats.psn_skipped, q.stats.retx_overruns), (0, 0));
            let _ = sent;
        }

        #[test]
        fn at_shutdown_the_tail_is_asked_about_at_once() {
            let mut q = rqp(64);
            let s = q.next_psn();
            for i in 0..3 {
                send(&mut q, 100, i);
            }
            assert_eq!(q.unconfirmed(), 3);
            assert_eq!(q.poll_timeout(101), None);
            q.confirm_promptly();
            assert_eq!(q.next_deadline(), Some(100));
            assert_eq!(q.poll_timeout(101), Some(s.add(3)));
            let p = q.take_probe(101);
            q.record(p, &send_probe_frame(p));
            q.on_response(150, Syndrome::Ack { credits: 31 }, p);
            assert_eq!((q.unconfirmed(), q.next_deadline()), (0, None));
        }

        fn send_probe_frame(p: Psn) -> Vec<u8> {
            let mut buf = vec![0u8; 256];
            let n = tmpl().emit(&mut buf, p, true, |ext| ext.fill(0));
            buf.truncate(n);
            buf
        }

        #[test]
        fn rnr_nak_resends_from_its_psn_after_the_pause() {
            let mut q = rqp(64);
            let s = q.next_psn();
            let sent: Vec<Vec<u8>> = (0..5u8).map(|i| send(&mut q, 0, i)).collect();
            assert_eq!(
                q.on_response(10, Syndrome::RnrNak { timer: 14 }, s.add(2)),
                QpEvent::Retransmit
            );
            assert!(q.is_paused(1_000_000));
            assert_eq!(q.next_deadline(), Some(10 + 1_280_000));
            assert!(
                resend(&mut q, 1_000_000, 8).is_empty(),
                "nothing during the pause"
            );
            let got = resend(&mut q, 1_280_010, 8);
            assert_eq!(got.len(), 3);
            assert_eq!(got[0], sent[2]);
            assert_eq!(got[1], sent[3]);
            same_but_ackreq(&got[2], &sent[4]);
            assert_eq!(q.next_psn(), s.add(5));
            assert_eq!(q.stats.psn_skipped, 0);
        }
    }
}
