//! The requester side of one RC queue pair: PSNs, ACK tracking, resynchronisation, pacing.
//!
//! DTA writes are fire-and-forget telemetry: the translator keeps no copy of what it sent, so a
//! lost frame is lost (and counted), but the QP must never stall. The rules:
//! - every frame consumes the next PSN; every `ack_every`-th frame asks for an ACK (AckReq), so
//!   the responder confirms progress regularly without ACKing every write;
//! - a NAK "PSN sequence error" carries the PSN the responder expects: jump there
//!   (a *resync*); frames in between are lost and were already counted as sent;
//! - if an AckReq'd frame is not acknowledged within the retransmission timeout (RTO),
//!   something was lost
//!   silently (the NAK itself, or the tail of a burst). Linux rxe then drops every later
//!   frame until it sees the PSN it expects, so the QP sends a *probe*: a zero-length RDMA
//!   WRITE with AckReq at the oldest unconfirmed PSN, *alongside* normal traffic. The responder
//!   either executes it (it was waiting for exactly that PSN, and the next real frame then
//!   draws a fresh NAK naming where to continue) or treats it as a duplicate and re-ACKs the
//!   last PSN it executed. If that re-ACK shows frames sent before the probe were not
//!   executed, another probe follows at once, which the responder executes.
//! - the RTO adapts to the responder (RFC 6298): every ACK that answers an AckReq'd frame
//!   sent once (never a probe, Karn's rule) is a round-trip sample feeding SRTT and RTTVAR;
//!   RTO = SRTT + 4·RTTVAR, clamped to `[rto_min, rto_max]`, starting at `ack_timeout`. Each
//!   unanswered probe doubles the wait for the next one (up to `rto_max`), so a collector
//!   that stalls for seconds sees a few probes, not a burst;
//! - the QP is declared broken only after `broken_after` of silence: no response at all while
//!   an AckReq'd frame or probe was outstanding. Any ACK or NAK restarts that clock. (A probe
//!   count broke QPs on a clean link when a starved collector paused for ~200 ms.)
//! - the send PSN only ever moves forward, or back to a PSN a NAK names. Never to a PSN the
//!   responder may have executed: a reused PSN is a duplicate, silently not executed (an
//!   atomic increment would be lost), so recovery never guesses from ACKs;
//! - an RNR NAK pauses the QP for the advertised time;
//! - a NAK "remote access error" or "invalid request" means the responder moved the QP to the
//!   error state: the QP is marked broken and the control plane reconnects.

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
}

impl Default for QpTuning {
    fn default() -> Self {
        QpTuning {
            ack_every: 64,
            ack_timeout_ns: 5_000_000,
            rto_min_ns: 1_000_000,
            rto_max_ns: 1_000_000_000,
            broken_after_ns: 5_000_000_000,
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
}

/// What the pipeline must do after a response.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QpEvent {
    /// Nothing.
    None,
    /// The QP needs a probe frame now.
    Probe,
    /// The responder put the QP into the error state: reconnect.
    Broken,
}

#[derive(Debug, Clone, Copy)]
struct Probe {
    psn: Psn,
    sent_at: u64,
    /// The newest PSN sent before the probe: its answer must cover it, or frames were lost.
    before: Psn,
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
    /// One past the highest PSN ever sent (responses beyond it are foreign).
    high_next: Psn,
    /// One past the last PSN the responder confirmed executing.
    confirmed: Psn,
    since_ackreq: u32,
    /// The newest AckReq'd PSN awaiting its ACK, and when it was sent.
    awaiting: Option<(Psn, u64)>,
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
    /// Counters.
    pub stats: QpStats,
}

impl QpTx {
    /// A QP whose first frame carries `start_psn` (the PSN the CM REQ announced).
    pub fn new(local_qpn: Qpn, remote_qpn: Qpn, start_psn: Psn, tuning: QpTuning) -> QpTx {
        QpTx {
            local_qpn,
            remote_qpn,
            tuning,
            next_psn: start_psn,
            high_next: start_psn,
            confirmed: start_psn,
            since_ackreq: 0,
            awaiting: None,
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
        if self.next_psn.diff(self.high_next) > 0 {
            self.high_next = self.next_psn;
        }
        self.since_ackreq += 1;
        self.stats.frames += 1;
        let ack_req = self.since_ackreq >= self.tuning.ack_every;
        if ack_req {
            self.since_ackreq = 0;
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

    /// Takes a PSN for a frame that must carry AckReq (a flush at shutdown).
    #[inline]
    pub fn take_with_ackreq(&mut self, now: u64) -> Psn {
        self.since_ackreq = self.tuning.ack_every;
        self.take(now).0
    }

    /// True if `psn` is one we could have sent (between the last confirmed PSN − 1 and the
    /// highest PSN sent).
    fn plausible(&self, psn: Psn) -> bool {
        psn.diff(self.confirmed) >= -1 && psn.diff(self.high_next) < 0
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
                // Round-trip samples. Frames are never retransmitted, so an ACK covering an
                // AckReq'd frame times it: right away when no probe is in flight, or, for a
                // frame whose timer expired (`late`), as an upper bound (the ACK may answer the
                // probe instead). A probe's own answer gives a lower bound when nothing else
                // does. Together they let the RTO grow to a responder that became slower
                // instead of probing it spuriously forever.
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
                if let Some(p) = self.probing {
                    if psn.diff(p.psn) >= 0 {
                        sample.get_or_insert(now.saturating_sub(p.sent_at));
                    }
                }
                if let Some(r) = sample {
                    self.rtt_sample(r);
                }
                if let Some(p) = self.probing {
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
                if self.probing.is_none() && !self.reprobe {
                    if let Some(t) = self.loss_since.take() {
                        self.note_resync(now.saturating_sub(t));
                    }
                }
                QpEvent::None
            }
            Syndrome::Nak(NakCode::PsnSequenceError) => {
                // The NAK names the PSN the responder expects; it never executed anything at or
                // after it, so continuing there reuses no executed PSN.
                let stale = !(self.plausible(psn) || psn == self.high_next)
                    || (self.last_nak == Some(psn) && psn.diff(self.next_psn) < 0);
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
                self.resync(psn);
                self.note_resync(now.saturating_sub(t));
                QpEvent::None
            }
            Syndrome::RnrNak { timer } => {
                self.stats.nak_rnr += 1;
                self.heard(now);
                self.paused_until = now + rnr_timer_ns(timer);
                // The RNR'd request was not executed (nor anything after it): continue from it.
                if self.plausible(psn) || psn == self.high_next {
                    self.resync(psn);
                }
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
        let skipped = self.next_psn.diff(to);
        if skipped != 0 {
            self.stats.psn_resyncs += 1;
            if skipped > 0 {
                self.stats.psn_skipped += skipped as u64;
            }
        }
        self.next_psn = to;
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
        let sent_at = match (self.probing, self.awaiting) {
            (Some(p), _) => p.sent_at,
            (None, Some((_, t))) => t,
            (None, None) => return None,
        };
        if now.saturating_sub(sent_at) < self.current_timeout() {
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
        self.stats.ack_timeouts += 1;
        if self.loss_since.is_none() {
            self.loss_since = Some(sent_at);
        }
        self.probes_unanswered += 1;
        if let Some(a) = self.awaiting.take() {
            self.late = Some(a);
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

    /// Records the probe `poll_timeout` asked for and returns its PSN (the oldest unconfirmed
    /// one). The send PSN is not touched: normal frames keep flowing.
    pub fn take_probe(&mut self, now: u64) -> Psn {
        let (psn, before) = if self.fresh_probe {
            self.fresh_probe = false;
            let psn = self.next_psn;
            self.next_psn = psn.next();
            if self.next_psn.diff(self.high_next) > 0 {
                self.high_next = self.next_psn;
            }
            (psn, psn.sub(1))
        } else {
            (self.confirmed, self.next_psn.sub(1))
        };
        self.probing = Some(Probe {
            psn,
            sent_at: now,
            before,
        });
        self.silent_since.get_or_insert(now);
        self.stats.probes += 1;
        psn
    }

    /// When the next timer fires, if any (ns).
    pub fn next_deadline(&self) -> Option<u64> {
        if self.broken {
            return None;
        }
        if self.reprobe {
            return Some(0);
        }
        let wait = self.current_timeout();
        let t = match (self.probing, self.awaiting) {
            (Some(p), _) => Some(p.sent_at + wait),
            (None, Some((_, at))) => Some(at + wait),
            (None, None) => None,
        };
        match (t, self.paused_until) {
            (Some(t), p) if p > 0 => Some(t.min(p)),
            (None, p) if p > 0 => Some(p),
            (t, _) => t,
        }
    }
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

    fn qp() -> QpTx {
        QpTx::new(
            Qpn::new(0x100),
            Qpn::new(0x11),
            Psn::new(0xFFFFFE),
            QpTuning {
                ack_every: 4,
                ack_timeout_ns: 1000,
                rto_min_ns: 500,
                rto_max_ns: 8000,
                broken_after_ns: 20_000,
            },
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
            },
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
}
