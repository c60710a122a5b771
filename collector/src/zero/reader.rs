//! The pull collector's RDMA READ requester for one reliable-connected QP (one agent).
//!
//! A sans-I/O state machine, driven with the current time. [`ReadQp::issue`] sends an RDMA
//! READ request (BTH + RETH) at the QP's next PSN, which then advances by the number of
//! response packets the READ takes (`⌈len / PMTU⌉`, at least 1), as the IB requester rules say.
//! [`ReadQp::handle`] takes the responses (READ RESPONSE FIRST/MIDDLE/LAST or ONLY, in PSN
//! order) and the responder's NAKs; a READ whose last response arrived is handed to the caller
//! with its bytes, in the order the READs were issued.
//!
//! Recovery (InfiniBand C9-..., as rxe's requester does it): a response ahead of the one
//! expected means some were lost; a NAK "PSN sequence error" means a request was; no progress
//! for [`ReadQpConfig::timeout_ns`] means either. In each case the oldest READ is asked again
//! from its first missing response (a READ request at that PSN for the rest of its bytes: the
//! responder replays it from its saved result), and every later READ is asked again, whole at
//! its own PSN, when it becomes the oldest. A responder that keeps silent through
//! [`ReadQpConfig::retries`] timeouts in a row, or answers with a class C NAK (remote access,
//! invalid request, operational error), breaks the QP: the caller reconnects.
//!
//! Nothing allocates per READ once the QP has seen its largest READ: response bytes go into
//! buffers kept for reuse.

use std::collections::VecDeque;
use std::net::SocketAddrV4;

use dta_proto::batch::TxBatch;
use dta_proto::wire::ethernet::MacAddr;
use dta_proto::wire::ib::{opcode as op, BthRepr, NakCode, Psn, Qpn, RethRepr, Rkey, Syndrome};
use dta_proto::wire::roce::{build_frame, RoceEndpoint, RocePacket, L2L4_LEN};

/// How a READ QP is set up (from the RDMA_CM exchange and the agent's region record).
#[derive(Debug, Clone)]
pub struct ReadQpConfig {
    /// Our RoCEv2 address.
    pub local: SocketAddrV4,
    /// The agent's RoCEv2 address.
    pub peer: SocketAddrV4,
    /// Our QPN (responses are addressed to it).
    pub local_qpn: Qpn,
    /// The agent's QPN.
    pub peer_qpn: Qpn,
    /// The PSN of our first request (the REP's starting PSN).
    pub start_psn: Psn,
    /// The region's R_Key.
    pub rkey: Rkey,
    /// The region's virtual address (offsets are relative to it).
    pub base: u64,
    /// Path MTU in bytes (payload per response packet).
    pub pmtu: u32,
    /// READs in flight at once (at most the responder resources the agent granted).
    pub max_outstanding: usize,
    /// No progress for this long (ns) asks again.
    pub timeout_ns: u64,
    /// Timeouts in a row before the QP is given up.
    pub retries: u32,
}

/// Why a QP stopped working.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QpFault {
    /// The agent answered with a class C NAK (the QP is in the error state there).
    Nak(NakCode),
    /// No answer through every retry.
    Timeout,
}

dta_proto::define_counters!(
    /// One READ QP's counters.
    pub struct ReadCounters {
        /// READ requests sent (first tries).
        reads,
        /// READ requests sent again (lost requests or responses).
        read_retries,
        /// READs completed.
        completed,
        /// Response bytes received.
        bytes,
        /// Responses already received (dropped).
        duplicates,
        /// Responses ahead of the one expected (dropped; some were lost).
        gaps,
        /// NAK "PSN sequence error" received.
        nak_seq,
        /// Responses whose opcode or length did not fit the READ (dropped).
        malformed,
        /// Packets for this QP that are not READ responses or acknowledgements.
        unexpected,
        /// Timeouts with no progress.
        timeouts,
    }
);

#[derive(Debug)]
struct Outstanding {
    tag: u64,
    psn: Psn,
    pkts: u32,
    off: u64,
    len: u32,
    got: u32,
    /// Last send or progress (ns).
    since: u64,
    /// Must be asked again (whole, or from `got`) when it is the oldest.
    stale: bool,
    /// When it was first sent (ns).
    issued: u64,
    /// `got` when it was last asked again (one request per point of progress).
    asked: Option<u32>,
    buf: Vec<u8>,
}

/// The requester side of one READ QP (module docs).
#[derive(Debug)]
pub struct ReadQp {
    cfg: ReadQpConfig,
    ep: RoceEndpoint,
    next_psn: Psn,
    out: VecDeque<Outstanding>,
    pool: Vec<Vec<u8>>,
    timeouts_in_row: u32,
    fault: Option<QpFault>,
    /// Counters.
    pub counters: ReadCounters,
}

impl ReadQp {
    /// A QP ready to READ.
    pub fn new(cfg: ReadQpConfig) -> ReadQp {
        let ep = RoceEndpoint {
            src_mac: MacAddr::ZERO,
            dst_mac: MacAddr::BROADCAST,
            src_ip: *cfg.local.ip(),
            dst_ip: *cfg.peer.ip(),
            src_port: cfg.local.port(),
            dst_port: cfg.peer.port(),
            ttl: 64,
            tos: 0,
            ident: 0,
        };
        ReadQp {
            next_psn: cfg.start_psn,
            out: VecDeque::with_capacity(cfg.max_outstanding),
            pool: Vec::new(),
            ep,
            cfg,
            timeouts_in_row: 0,
            fault: None,
            counters: ReadCounters::default(),
        }
    }

    /// The configuration.
    pub fn config(&self) -> &ReadQpConfig {
        &self.cfg
    }

    /// The PSN of the next request.
    pub fn next_psn(&self) -> Psn {
        self.next_psn
    }

    /// READs in flight.
    pub fn outstanding(&self) -> usize {
        self.out.len()
    }

    /// True if another READ may be issued now.
    pub fn has_room(&self) -> bool {
        self.fault.is_none() && self.out.len() < self.cfg.max_outstanding
    }

    /// Why the QP broke, if it did.
    pub fn fault(&self) -> Option<QpFault> {
        self.fault
    }

    /// Tags and lengths of the READs still in flight (a broken QP's caller returns their
    /// credits).
    pub fn in_flight(&self) -> impl Iterator<Item = (u64, u32)> + '_ {
        self.out.iter().map(|o| (o.tag, o.len))
    }

    /// Forgets every READ in flight (after a fault; the caller returned their credits).
    pub fn clear(&mut self) {
        while let Some(o) = self.out.pop_front() {
            self.pool.push(o.buf);
        }
    }

    /// Sends a READ of `len` bytes (1..=2^31) at region offset `off`, remembered as `tag`.
    /// Returns false (nothing sent) if the QP has no room, is broken, or `tx` is full.
    pub fn issue(&mut self, tag: u64, off: u64, len: u32, now: u64, tx: &mut TxBatch) -> bool {
        if !self.has_room() || tx.is_full() || len == 0 {
            return false;
        }
        let pkts = len.div_ceil(self.cfg.pmtu).max(1);
        let mut buf = self.pool.pop().unwrap_or_default();
        buf.clear();
        buf.resize(len as usize, 0);
        let o = Outstanding {
            tag,
            psn: self.next_psn,
            pkts,
            off,
            len,
            got: 0,
            since: now,
            stale: false,
            asked: None,
            issued: now,
            buf,
        };
        if !self.send_request(o.psn, o.off, o.len, tx) {
            self.pool.push(o.buf);
            return false;
        }
        self.counters.reads += 1;
        self.next_psn = self.next_psn.add(pkts);
        self.out.push_back(o);
        true
    }

    fn send_request(&self, psn: Psn, off: u64, len: u32, tx: &mut TxBatch) -> bool {
        let bth = BthRepr::rc(op::RC_RDMA_READ_REQUEST, self.cfg.peer_qpn, psn, true);
        let reth = RethRepr {
            va: self.cfg.base.wrapping_add(off),
            rkey: self.cfg.rkey,
            dma_len: len,
        };
        let ep = &self.ep;
        tx.push_with(self.cfg.peer, L2L4_LEN, |b| {
            build_frame(ep, &bth, &reth.to_bytes(), &[], b)
        })
    }

    /// Asks again for the oldest READ from its first missing response (module docs); every
    /// later one is asked again when it becomes the oldest.
    fn resend_oldest(&mut self, now: u64, tx: &mut TxBatch) {
        for o in self.out.iter_mut().skip(1) {
            o.stale = true;
        }
        let Some(h) = self.out.front_mut() else {
            return;
        };
        h.stale = false;
        h.since = now;
        h.asked = Some(h.got);
        let done = h.got * self.cfg.pmtu;
        let (psn, off, len) = (h.psn.add(h.got), h.off + done as u64, h.len - done);
        if self.send_request(psn, off, len, tx) {
            self.counters.read_retries += 1;
        } else {
            // No room to ask: the next poll's timeout asks again.
            if let Some(h) = self.out.front_mut() {
                h.stale = true;
            }
        }
    }

    /// Handles one packet addressed to this QP; a completed READ is handed to `done` as (tag,
    /// when it was first sent, its bytes). Returns the number of READs completed.
    pub fn handle(
        &mut self,
        pkt: &RocePacket<'_>,
        now: u64,
        tx: &mut TxBatch,
        done: &mut dyn FnMut(u64, u64, &[u8]),
    ) -> usize {
        if self.fault.is_some() {
            return 0;
        }
        match pkt.bth.opcode {
            op::RC_RDMA_READ_RESPONSE_FIRST
            | op::RC_RDMA_READ_RESPONSE_MIDDLE
            | op::RC_RDMA_READ_RESPONSE_LAST
            | op::RC_RDMA_READ_RESPONSE_ONLY => self.response(pkt, now, tx, done),
            op::RC_ACKNOWLEDGE => {
                match pkt.aeth.map(|a| a.syndrome) {
                    Some(Syndrome::Nak(NakCode::PsnSequenceError)) => {
                        self.counters.nak_seq += 1;
                        if !self.out.is_empty() {
                            self.resend_oldest(now, tx);
                        }
                    }
                    Some(Syndrome::Nak(code)) => {
                        self.fault = Some(QpFault::Nak(code));
                    }
                    // Plain ACKs and RNR NAKs mean nothing to a READ requester.
                    _ => {}
                }
                0
            }
            _ => {
                self.counters.unexpected += 1;
                0
            }
        }
    }

    fn response(
        &mut self,
        pkt: &RocePacket<'_>,
        now: u64,
        tx: &mut TxBatch,
        done: &mut dyn FnMut(u64, u64, &[u8]),
    ) -> usize {
        let pmtu = self.cfg.pmtu;
        let Some(h) = self.out.front_mut() else {
            self.counters.duplicates += 1;
            return 0;
        };
        let expected = h.psn.add(h.got);
        let d = pkt.bth.psn.diff(expected);
        if d < 0 {
            self.counters.duplicates += 1;
            return 0;
        }
        if d > 0 || h.stale {
            // Responses were lost (or belong to a READ we must ask again first): ask once per
            // point of progress; the timeout asks again if that is lost too.
            self.counters.gaps += 1;
            if h.stale || h.asked != Some(h.got) {
                self.resend_oldest(now, tx);
            }
            return 0;
        }
        let last = h.got + 1 == h.pkts;
        let at = (h.got * pmtu) as usize;
        let size = if last {
            h.len as usize - at
        } else {
            pmtu as usize
        };
        // A READ asked again from its middle is answered from that PSN on with MIDDLE/LAST
        // (rxe) or FIRST/ONLY (a responder that treats it as a new READ): only whether the
        // packet ends the READ must agree.
        let opcode_ok = match (h.pkts, h.got, pkt.bth.opcode) {
            (1, _, o) => o == op::RC_RDMA_READ_RESPONSE_ONLY,
            (_, 0, o) => o == op::RC_RDMA_READ_RESPONSE_FIRST,
            (_, _, op::RC_RDMA_READ_RESPONSE_LAST | op::RC_RDMA_READ_RESPONSE_ONLY) => last,
            _ => !last,
        };
        if !opcode_ok || pkt.payload.len() != size {
            self.counters.malformed += 1;
            return 0;
        }
        h.buf[at..at + size].copy_from_slice(pkt.payload);
        h.got += 1;
        h.since = now;
        self.timeouts_in_row = 0;
        self.counters.bytes += size as u64;
        if !last {
            return 0;
        }
        let h = self.out.pop_front().expect("the oldest READ");
        self.counters.completed += 1;
        done(h.tag, h.issued, &h.buf);
        self.pool.push(h.buf);
        // The next oldest may have to be asked again.
        if self.out.front().is_some_and(|o| o.stale) {
            self.resend_oldest(now, tx);
        }
        1
    }

    /// Asks again when the oldest READ made no progress for the timeout; breaks the QP after
    /// [`ReadQpConfig::retries`] timeouts in a row.
    pub fn poll(&mut self, now: u64, tx: &mut TxBatch) {
        if self.fault.is_some() {
            return;
        }
        let Some(h) = self.out.front() else {
            return;
        };
        if now.saturating_sub(h.since) < self.cfg.timeout_ns {
            return;
        }
        self.counters.timeouts += 1;
        self.timeouts_in_row += 1;
        if self.timeouts_in_row > self.cfg.retries {
            self.fault = Some(QpFault::Timeout);
            return;
        }
        self.resend_oldest(now, tx);
    }

    /// When [`ReadQp::poll`] next has work: the oldest READ's deadline.
    pub fn next_deadline(&self) -> Option<u64> {
        self.out.front().map(|h| h.since + self.cfg.timeout_ns)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::Region;
    use crate::rnic::responder::{Access, DeviceConfig, QpConfig, Responder};
    use dta_proto::batch::{Datagram, IpMeta};
    use std::net::Ipv4Addr;
    use std::sync::Arc;

    const AGENT: SocketAddrV4 = SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 7), 4791);
    const US: SocketAddrV4 = SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 1), 4791);
    const PMTU: u32 = 256;

    struct Rig {
        rnic: Responder,
        region: Arc<Region>,
        qp: ReadQp,
    }

    fn rig(start: u32) -> Rig {
        let mut rnic = Responder::new(DeviceConfig {
            local: AGENT,
            local_mac: MacAddr([2, 0, 0, 0, 0, 7]),
            pmtu: PMTU,
            l2_frames: false,
        });
        let region = Arc::new(Region::anonymous(64 * 1024, false).unwrap());
        let bytes: Vec<u8> = (0..region.len()).map(|i| (i * 13 + i / 97) as u8).collect();
        region.write(0, &bytes).unwrap();
        let read_only = Access {
            remote_read: true,
            remote_write: false,
            remote_atomic: false,
        };
        let rkey = rnic.register(region.clone(), read_only);
        let qpn = rnic.create_qp(QpConfig {
            peer: US,
            peer_mac: MacAddr::BROADCAST,
            peer_qpn: Qpn::new(0x77),
            rq_psn: Psn::new(start),
            sq_psn: Psn::new(0),
            verify_icrc: true,
            recv_credits: 0,
        });
        let qp = ReadQp::new(ReadQpConfig {
            local: US,
            peer: AGENT,
            local_qpn: Qpn::new(0x77),
            peer_qpn: qpn,
            start_psn: Psn::new(start),
            rkey,
            base: region.addr(),
            pmtu: PMTU,
            max_outstanding: 8,
            timeout_ns: 1_000,
            retries: 3,
        });
        Rig { rnic, region, qp }
    }

    fn to_rnic(r: &mut Rig, tx: &TxBatch, drop: &dyn Fn(usize) -> bool) -> TxBatch {
        let mut back = TxBatch::new(256, 2048);
        for i in 0..tx.len() {
            if drop(i) {
                continue;
            }
            let d = Datagram {
                src: US,
                dst: AGENT,
                ip: Some(IpMeta {
                    ident: 0,
                    dont_frag: true,
                    ttl: 64,
                    tos: 0,
                }),
                payload: tx.payload(i),
            };
            r.rnic.handle(&d, &mut back);
        }
        while r.rnic.has_pending_output() {
            r.rnic.poll(0, &mut back);
        }
        back
    }

    fn to_qp(
        r: &mut Rig,
        rx: &TxBatch,
        now: u64,
        drop: &dyn Fn(usize) -> bool,
        got: &mut Vec<(u64, Vec<u8>)>,
    ) -> TxBatch {
        let mut tx = TxBatch::new(64, 2048);
        for i in 0..rx.len() {
            if drop(i) {
                continue;
            }
            let p = RocePacket::parse(rx.payload(i)).unwrap();
            r.qp.handle(&p, now, &mut tx, &mut |t, _, b| got.push((t, b.to_vec())));
        }
        tx
    }

    fn expect(r: &Rig, off: u64, len: usize) -> Vec<u8> {
        let mut v = vec![0u8; len];
        r.region.read(off, &mut v).unwrap();
        v
    }

    #[test]
    fn reads_complete_in_order_across_the_psn_wrap() {
        let mut r = rig(0xFF_FFFA);
        let mut tx = TxBatch::new(64, 2048);
        let reads = [
            (1u64, 0u64, 1000u32),
            (2, 4096, 8),
            (3, 777, 256),
            (4, 9000, 3000),
        ];
        for &(t, off, len) in &reads {
            assert!(r.qp.issue(t, off, len, 0, &mut tx));
        }
        let back = to_rnic(&mut r, &tx, &|_| false);
        let mut got = Vec::new();
        to_qp(&mut r, &back, 1, &|_| false, &mut got);
        assert_eq!(got.len(), 4);
        for ((t, b), &(tt, off, len)) in got.iter().zip(&reads) {
            assert_eq!(*t, tt);
            assert_eq!(*b, expect(&r, off, len as usize));
        }
        assert_eq!(r.qp.outstanding(), 0);
        assert_eq!(r.qp.counters.completed, 4);
    }

    #[test]
    fn lost_responses_and_lost_requests_are_asked_again() {
        let mut r = rig(100);
        let mut tx = TxBatch::new(64, 2048);
        assert!(r.qp.issue(1, 0, 1024, 0, &mut tx)); // 4 responses
        assert!(r.qp.issue(2, 2048, 512, 0, &mut tx)); // 2 responses
        assert!(r.qp.issue(3, 4096, 100, 0, &mut tx)); // 1
                                                       // The second request is lost: the third gets a PSN sequence NAK.
        let back = to_rnic(&mut r, &tx, &|i| i == 1);
        let mut got = Vec::new();
        // And response 2 of the first READ is lost.
        let again = to_qp(&mut r, &back, 10, &|i| i == 1, &mut got);
        assert!(got.is_empty());
        assert!(r.qp.counters.gaps + r.qp.counters.nak_seq > 0);
        let mut now = 10;
        let mut pending = again;
        for _ in 0..20 {
            let back = to_rnic(&mut r, &pending, &|_| false);
            pending = to_qp(&mut r, &back, now, &|_| false, &mut got);
            if got.len() == 3 {
                break;
            }
            if pending.is_empty() {
                now += 2_000;
                r.qp.poll(now, &mut pending);
            }
        }
        let tags: Vec<u64> = got.iter().map(|g| g.0).collect();
        assert_eq!(tags, vec![1, 2, 3]);
        assert_eq!(got[0].1, expect(&r, 0, 1024));
        assert_eq!(got[1].1, expect(&r, 2048, 512));
        assert_eq!(got[2].1, expect(&r, 4096, 100));
        assert!(r.qp.counters.read_retries >= 2);
        assert_eq!(r.qp.fault(), None);
    }

    #[test]
    fn silence_and_access_errors_break_the_qp() {
        let mut r = rig(5);
        let mut tx = TxBatch::new(64, 2048);
        assert!(r.qp.issue(1, 0, 64, 0, &mut tx));
        let mut now = 0;
        for _ in 0..5 {
            now += 1_000;
            tx.clear();
            r.qp.poll(now, &mut tx);
        }
        assert_eq!(r.qp.fault(), Some(QpFault::Timeout));
        assert!(!r.qp.has_room());

        let mut r = rig(5);
        let mut tx = TxBatch::new(64, 2048);
        // Beyond the region: NAK remote access error.
        assert!(r.qp.issue(1, 64 * 1024 - 8, 64, 0, &mut tx));
        let back = to_rnic(&mut r, &tx, &|_| false);
        let mut got = Vec::new();
        to_qp(&mut r, &back, 1, &|_| false, &mut got);
        assert!(got.is_empty());
        assert_eq!(r.qp.fault(), Some(QpFault::Nak(NakCode::RemoteAccessError)));
        assert_eq!(r.qp.in_flight().count(), 1);
        r.qp.clear();
        assert_eq!(r.qp.outstanding(), 0);
    }
}
