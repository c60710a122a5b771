//! The requester side of one RC queue pair: PSNs, ACK tracking, resynchronisation, pacing.
//!
//! DTA writes are fire-and-forget telemetry: the translator keeps no copy of what it sent, so a
//! lost frame is lost (and counted), but the QP must never stall. The rules:
//! - every frame consumes the next PSN; every `ack_every`-th frame asks for an ACK (AckReq), so
//!   the responder confirms progress regularly without ACKing every write;
//! - a NAK "PSN sequence error" carries the PSN the responder expects: jump there
//!   (a *resync*); frames in between are lost and were already counted as sent;
//! - if an AckReq'd frame is not acknowledged within `ack_timeout`, something was lost
//!   silently (the NAK itself, or the tail of a burst). Linux rxe then drops every later
//!   frame until it sees the PSN it expects, so the QP sends a *probe*: a zero-length RDMA
//!   WRITE with AckReq at the oldest unacknowledged PSN. The responder answers either an ACK
//!   (that PSN was what it expected) or, as a duplicate, an ACK naming the last PSN it executed;
//!   both tell us where to continue;
//! - an RNR NAK pauses the QP for the advertised time;
//! - a NAK "remote access error" or "invalid request" means the responder moved the QP to the
//!   error state: the QP is marked broken and the control plane reconnects.

use dta_proto::wire::ib::{NakCode, Psn, Qpn, Syndrome};

/// Tunables of the reliability machinery.
#[derive(Debug, Clone, Copy)]
pub struct QpTuning {
    /// Ask for an ACK on every k-th frame.
    pub ack_every: u32,
    /// Declare silent loss after this long without the requested ACK (ns).
    pub ack_timeout_ns: u64,
    /// Give up on probing and report the QP broken after this many unanswered probes.
    pub max_probes: u32,
}

impl Default for QpTuning {
    fn default() -> Self {
        QpTuning {
            ack_every: 64,
            ack_timeout_ns: 5_000_000,
            max_probes: 8,
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
    /// ACKs at or beyond the probe's PSN arrived; conclude when none arrived for a while.
    settle_at: Option<u64>,
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
    /// An outstanding probe: new frames wait until it is answered.
    probing: Option<Probe>,
    /// When loss was first suspected (for resync latency).
    loss_since: Option<u64>,
    probes_unanswered: u32,
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
            loss_since: None,
            probes_unanswered: 0,
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

    /// True while new frames must not be sent: RNR back-off, or a probe awaiting its answer
    /// (frames sent then would be duplicates or dropped by the responder).
    #[inline]
    pub fn is_paused(&self, now: u64) -> bool {
        now < self.paused_until || self.probing.is_some()
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
                self.probes_unanswered = 0;
                if psn.diff(self.confirmed) >= 0 {
                    self.confirmed = psn.next();
                }
                if self.awaiting.is_some_and(|(want, _)| psn.diff(want) >= 0) {
                    self.awaiting = None;
                }
                if let Some(p) = self.probing.as_mut() {
                    if self.confirmed == self.high_next {
                        // Everything we ever sent is confirmed: the ACK was merely late.
                        self.probing = None;
                        self.resync(self.confirmed);
                    } else if psn.diff(p.psn) >= -1 {
                        // Either the probe's answer or a late ACK sent before it: the answer
                        // is the last response in the FIFO, so wait until they stop coming.
                        p.settle_at = Some(now + self.tuning.ack_timeout_ns / 4);
                    }
                }
                if self.probing.is_none() {
                    if let Some(t) = self.loss_since.take() {
                        self.note_resync(now.saturating_sub(t));
                    }
                }
                QpEvent::None
            }
            Syndrome::Nak(NakCode::PsnSequenceError) => {
                // The NAK names the PSN the responder expects.
                if !self.plausible(psn) && psn != self.high_next {
                    self.stats.stale_responses += 1;
                    return QpEvent::None;
                }
                self.stats.nak_seq += 1;
                self.probes_unanswered = 0;
                self.probing = None;
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
                self.paused_until = now + rnr_timer_ns(timer);
                // The RNR'd request was not executed: continue from it.
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
        self.since_ackreq = 0;
    }

    fn note_resync(&mut self, ns: u64) {
        self.stats.resync_ns_total += ns;
        self.stats.resync_ns_max = self.stats.resync_ns_max.max(ns);
    }

    /// Checks the ACK timer. Returns the PSN a probe must carry if one is due.
    ///
    /// The probe targets the oldest PSN not known to be executed; the caller sends a
    /// zero-length WRITE with AckReq carrying exactly that PSN (taken with
    /// [`QpTx::take_probe`]).
    pub fn poll_timeout(&mut self, now: u64) -> Option<Psn> {
        if let Some(p) = self.probing {
            if let Some(settle) = p.settle_at {
                if now >= settle {
                    // The probe was answered and no response followed: the responder expects
                    // the PSN right after the last one it confirmed.
                    self.probing = None;
                    self.resync(self.confirmed);
                    if let Some(t) = self.loss_since.take() {
                        self.note_resync(now.saturating_sub(t));
                    }
                }
                return None;
            }
        }
        let sent_at = match (self.probing, self.awaiting) {
            (Some(p), _) => p.sent_at,
            (None, Some((_, t))) => t,
            (None, None) => return None,
        };
        if now.saturating_sub(sent_at) < self.tuning.ack_timeout_ns {
            return None;
        }
        self.stats.ack_timeouts += 1;
        if self.loss_since.is_none() {
            self.loss_since = Some(sent_at);
        }
        self.probes_unanswered += 1;
        if self.probes_unanswered > self.tuning.max_probes {
            self.broken = true;
            self.probing = None;
            return None;
        }
        // The probe reuses the oldest unconfirmed PSN: the responder either executes it (it
        // was waiting for exactly that PSN) or treats it as a duplicate and re-ACKs the last
        // PSN it executed. Either way it answers, even if it is silently dropping everything
        // newer after a lost NAK.
        self.next_psn = self.confirmed;
        self.awaiting = None;
        self.since_ackreq = 0;
        Some(self.confirmed)
    }

    /// Takes the PSN for the probe `poll_timeout` asked for and starts waiting for its answer.
    pub fn take_probe(&mut self, now: u64) -> Psn {
        let psn = self.take_with_ackreq(now);
        self.awaiting = None;
        self.probing = Some(Probe {
            psn,
            sent_at: now,
            settle_at: None,
        });
        self.stats.probes += 1;
        psn
    }

    /// When the next timer fires, if any (ns).
    pub fn next_deadline(&self) -> Option<u64> {
        let t = match (self.probing, self.awaiting) {
            (
                Some(Probe {
                    settle_at: Some(s), ..
                }),
                _,
            ) => Some(s),
            (Some(p), _) => Some(p.sent_at + self.tuning.ack_timeout_ns),
            (None, Some((_, at))) => Some(at + self.tuning.ack_timeout_ns),
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
                max_probes: 3,
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
    fn silent_loss_probe_then_ack() {
        let mut q = qp();
        for _ in 0..4 {
            q.take(0);
        }
        // PSN 1 (4th frame) awaits an ACK; nothing comes.
        assert_eq!(q.poll_timeout(500), None);
        let probe = q.poll_timeout(1500).expect("timeout fires");
        assert_eq!(
            probe,
            Psn::new(0xFFFFFE),
            "probe at the oldest unconfirmed PSN"
        );
        assert_eq!(q.take_probe(1500), probe);
        assert!(
            q.is_paused(1500),
            "no new frames while the probe is outstanding"
        );
        // Responder had executed up to PSN 0 (the probe is a duplicate): it re-ACKs PSN 0.
        q.on_response(1600, Syndrome::Ack { credits: 31 }, Psn::new(0));
        assert!(q.is_paused(1600), "waits for later responses to settle");
        assert_eq!(q.poll_timeout(1700), None);
        assert_eq!(q.poll_timeout(1850), None);
        assert!(!q.is_paused(1850));
        assert_eq!(
            q.next_psn(),
            Psn::new(1),
            "continue right after the last executed PSN"
        );
        assert_eq!(
            q.stats.resync_ns_max, 1850,
            "measured from the unanswered AckReq"
        );
    }

    #[test]
    fn probe_answered_by_execution() {
        let mut q = qp();
        for _ in 0..4 {
            q.take(0);
        }
        q.on_response(10, Syndrome::Ack { credits: 31 }, Psn::new(0xFFFFFF));
        for _ in 0..4 {
            q.take(20);
        }
        // Frames from PSN 0 on were all lost; the probe at 0 is executed and ACKed.
        let p = q.poll_timeout(2000).unwrap();
        assert_eq!(p, Psn::new(0));
        q.take_probe(2000);
        q.on_response(2100, Syndrome::Ack { credits: 31 }, Psn::new(0));
        q.poll_timeout(2400);
        assert_eq!(q.next_psn(), Psn::new(1));
        assert_eq!(q.confirmed_psn(), Psn::new(1));
    }

    #[test]
    fn late_ack_during_probe_is_not_mistaken_for_the_answer() {
        let mut q = qp();
        for _ in 0..8 {
            q.take(0);
        }
        // PSN 1 (AckReq) is late; a probe goes out at 0xFFFFFE.
        assert!(q.poll_timeout(1000).is_some());
        q.take_probe(1000);
        // The late ACK for PSN 1 arrives, then the probe's answer: all 8 frames executed.
        q.on_response(1100, Syndrome::Ack { credits: 31 }, Psn::new(1));
        q.on_response(1150, Syndrome::Ack { credits: 31 }, Psn::new(5));
        assert_eq!(
            q.next_psn(),
            Psn::new(6),
            "resumes after the last executed PSN, no duplicates"
        );
        assert!(!q.is_paused(1150));
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
