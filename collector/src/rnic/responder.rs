//! The software RNIC's RC responder: a sans-I/O state machine with Linux rxe's semantics.
//!
//! Feed it datagrams ([`Responder::handle`]); it executes RDMA WRITE, READ, FETCH_ADD,
//! COMPARE_SWAP, SEND and WRITE-with-Immediate against registered [`Region`]s and queues its
//! answers (ACK, NAK, READ responses, atomic ACKs) in a caller-owned [`TxBatch`]. Nothing here
//! blocks, sleeps or allocates per packet (SEND payloads, a control-plane path, are the one
//! exception). A READ's responses go out as the batch has room: the QP keeps its place in the
//! response stream and [`Responder::poll`] (or its next packet) continues it, as rxe's
//! responder does; while it streams, new requests on that QP wait behind it (dropped and
//! counted if the batch is full: the requester resends them).
//!
//! The rules follow `drivers/infiniband/sw/rxe/rxe_resp.c` (anchors §C.1), checked against a
//! real rxe in `tests/`:
//! - A request ahead of the expected PSN gets **one** NAK "PSN sequence error" carrying the
//!   expected PSN; further out-of-order requests are dropped silently until the expected PSN
//!   arrives.
//! - A request behind it is a duplicate: WRITE/SEND are re-ACKed with the last executed PSN
//!   and never re-executed; atomics and reads are answered from saved results.
//! - Plain ACKs go out only when the request has AckReq set; atomics and reads always answer.
//! - A bad R_Key, an access outside the region or without permission gets NAK "remote access
//!   error"; a malformed request (length, opcode order, misaligned atomic) gets NAK "invalid
//!   request". Both are class C errors: the QP then enters the error state, as in rxe.
//! - A bad ICRC is dropped silently and consumes no PSN (verification can be switched off per
//!   QP, because the reference Tofino translator sends no ICRC).
//! - Only the connected peer may talk to a QP: the source address must match.

use std::collections::VecDeque;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::sync::Arc;

use dta_proto::batch::{Datagram, TxBatch};
use dta_proto::icrc::{self, IcrcVerdict, ReconstructedHeader};
use dta_proto::wire::ethernet::MacAddr;
use dta_proto::wire::ib::{
    opcode as op, Aeth, AethRepr, AtomicAckEth, AtomicAckEthRepr, Bth, BthRepr, NakCode, Psn, Qpn,
    Reth, Rkey, Syndrome, AETH_LEN, BTH_LEN, ICRC_LEN, RETH_LEN,
};
use dta_proto::wire::ipv4::{Ipv4Packet, Ipv4Repr, PROTO_UDP};
use dta_proto::wire::roce::{build_frame, FrameTemplate, RoceEndpoint, RocePacket, L2L4_LEN};
use dta_proto::wire::udp::{UdpPacket, UdpRepr};

use super::counters::RnicCounters;
use crate::memory::Region;

/// The first QPN handed out (rxe also starts at 17; 0 and 1 are special).
pub const QPN_BASE: u32 = 0x11;
/// Saved atomic and read results per QP for duplicate replay (responder resources).
pub const MAX_RD_ATOMIC: usize = 16;
/// Receive completions buffered before the oldest is dropped (counted).
pub const CQ_DEPTH: usize = 4096;
/// RNR NAK timer code sent when no receive is posted (IB table 45: 0x0E ≈ 1.28 ms... see spec).
pub const RNR_TIMER: u8 = 0x0E;

/// Remote access rights of a registered region.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Access {
    /// RDMA WRITE allowed.
    pub remote_write: bool,
    /// RDMA READ allowed.
    pub remote_read: bool,
    /// FETCH_ADD / COMPARE_SWAP allowed.
    pub remote_atomic: bool,
}

impl Access {
    /// Everything allowed (what the DTA collector registers).
    pub const ALL: Access = Access {
        remote_write: true,
        remote_read: true,
        remote_atomic: true,
    };
}

/// How a QP is set up (the result of RDMA_CM or of a static configuration).
#[derive(Debug, Clone)]
pub struct QpConfig {
    /// The peer's RoCEv2 address (IP and the UDP port it receives responses on).
    pub peer: SocketAddrV4,
    /// The peer's MAC (only used when emitting full Ethernet frames).
    pub peer_mac: MacAddr,
    /// The peer's QPN (destination QP of our responses).
    pub peer_qpn: Qpn,
    /// The first PSN we expect from the peer.
    pub rq_psn: Psn,
    /// Our first send PSN (for SENDs we originate).
    pub sq_psn: Psn,
    /// Check the ICRC of incoming packets.
    pub verify_icrc: bool,
    /// Receive buffers posted at creation (SEND and WRITE-with-Immediate consume one each).
    pub recv_credits: u32,
}

/// State of a QP.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QpState {
    /// Ready to receive and send.
    Ready,
    /// A class C error occurred; every packet is dropped until the QP is destroyed.
    Error,
}

/// A completion the responder raised for the collector's CPU.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Completion {
    /// An RDMA WRITE with Immediate finished (the DTA "immediate" push notification).
    WriteWithImm {
        /// The QP it arrived on.
        qpn: Qpn,
        /// The immediate data.
        imm: u32,
        /// Bytes written by the message.
        len: u32,
    },
    /// A SEND this side posted was acknowledged.
    SendDone {
        /// The QP.
        qpn: Qpn,
    },
    /// A SEND this side posted was never acknowledged (retries exhausted); the QP is in error.
    SendFailed {
        /// The QP.
        qpn: Qpn,
    },
    /// A SEND finished.
    Recv {
        /// The QP it arrived on.
        qpn: Qpn,
        /// Immediate data, for SEND with Immediate.
        imm: Option<u32>,
        /// The message.
        data: Vec<u8>,
    },
}

#[derive(Debug, Clone, Copy)]
enum InProgress {
    None,
    Write {
        mr: usize,
        offset: u64,
        remaining: u32,
        total: u32,
    },
    Send,
}

#[derive(Debug, Clone, Copy, Default)]
struct AtomicRes {
    valid: bool,
    psn: u32,
    orig: u64,
}

#[derive(Debug, Clone, Copy, Default)]
struct ReadRes {
    valid: bool,
    first: u32,
    npsn: u32,
    mr: usize,
    offset: u64,
    len: u32,
}

/// A READ whose responses are being sent: the request's saved result and the next response
/// packet (0-based).
#[derive(Debug, Clone, Copy)]
struct ReadOut {
    res: ReadRes,
    next: u32,
}

struct Qp {
    qpn: Qpn,
    cfg: QpConfig,
    state: QpState,
    epsn: Psn,
    msn: u32,
    sent_psn_nak: bool,
    recv_credits: u32,
    in_progress: InProgress,
    send_buf: Vec<u8>,
    atomic_res: [AtomicRes; MAX_RD_ATOMIC],
    read_res: [ReadRes; MAX_RD_ATOMIC],
    res_next: usize,
    /// The READ whose responses are still being sent.
    read_out: Option<ReadOut>,
    ep: RoceEndpoint,
    sq_psn: Psn,
    pending_sends: VecDeque<PendingSend>,
    ack_tmpl: FrameTemplate,
    atomic_ack_tmpl: FrameTemplate,
    /// The ICRC register after the masked IPv4 and UDP headers of the peer's last datagram
    /// checked by reconstruction, and what it depends on (the fast path's cache).
    icrc_prefix: Option<(IcrcPrefixKey, u32)>,
    counters: RnicCounters,
}

/// What [`icrc::reconstructed_prefix`] depends on besides the peer's address: the
/// transport length, the ports and our address.
#[derive(Clone, Copy, PartialEq, Eq)]
struct IcrcPrefixKey {
    len: usize,
    src: SocketAddrV4,
    dst: SocketAddrV4,
}

/// A SEND awaiting its ACK, kept for retransmission.
struct PendingSend {
    psn: Psn,
    frame: Vec<u8>,
    sent_at: u64,
    retries: u32,
}

/// Retransmission timeout of SENDs this side originates (ns).
pub const SEND_TIMEOUT_NS: u64 = 50_000_000;
/// Retransmissions before a SEND fails.
pub const SEND_RETRIES: u32 = 7;

struct Mr {
    rkey: Rkey,
    region: Arc<Region>,
    base: u64,
    access: Access,
}

/// Local identity of the software RNIC.
#[derive(Debug, Clone)]
pub struct DeviceConfig {
    /// Our IPv4 address (the GID) and UDP port.
    pub local: SocketAddrV4,
    /// Our MAC.
    pub local_mac: MacAddr,
    /// Path MTU in bytes (256..=4096): the payload size of multi-packet messages.
    pub pmtu: u32,
    /// Emit complete Ethernet frames (raw backends) instead of UDP payloads.
    pub l2_frames: bool,
}

impl Default for DeviceConfig {
    fn default() -> Self {
        DeviceConfig {
            local: SocketAddrV4::new(Ipv4Addr::LOCALHOST, dta_proto::consts::ROCEV2_PORT),
            local_mac: MacAddr([0x02, 0, 0, 0, 0, 0x51]),
            pmtu: 4096,
            l2_frames: false,
        }
    }
}

/// The RC responder of one software RNIC device.
pub struct Responder {
    dev: DeviceConfig,
    qps: Vec<Option<Qp>>,
    mrs: Vec<Option<Mr>>,
    /// Every R_Key this device has handed out, so none is ever handed out twice.
    issued_rkeys: std::collections::HashSet<u32>,
    cq: VecDeque<Completion>,
    counters: RnicCounters,
    /// The QPN of slot 0 ([`QPN_BASE`] unless [`Responder::set_qpn_base`] moved it).
    qpn_base: u32,
    /// Plain WRITEs take [`Responder::write_fast`] (off only to test it against the general
    /// path).
    fast_path: bool,
}

/// Regions one device can have registered at once: an R_Key's low byte is its slot.
pub const MAX_MRS: usize = 256;

/// The registration slot an R_Key names (its low byte; the rest is random).
#[inline(always)]
fn mr_slot(rkey: Rkey) -> usize {
    (rkey.0 & 0xff) as usize
}

/// Highest QPN base [`Responder::set_qpn_base`] accepts: leaves room for 2^23 QPs below the
/// 24-bit QPN limit.
pub const MAX_QPN_BASE: u32 = 0x7F_FF00;

/// Why a request failed (class C errors).
enum Fault {
    Access,
    Invalid,
}

impl Responder {
    /// A device with no QPs and no regions.
    pub fn new(dev: DeviceConfig) -> Responder {
        Responder {
            dev,
            qps: Vec::new(),
            mrs: Vec::new(),
            issued_rkeys: std::collections::HashSet::new(),
            cq: VecDeque::with_capacity(CQ_DEPTH),
            counters: RnicCounters::default(),
            qpn_base: QPN_BASE,
            fast_path: true,
        }
    }

    /// Numbers this device's QPs from `base` (clamped to `QPN_BASE..=MAX_QPN_BASE`) instead of
    /// [`QPN_BASE`]. Only before the first QP exists; returns whether it took effect.
    ///
    /// A collector picks a random base at start. Otherwise a restarted collector hands out the
    /// QPNs of its previous run again. Frames that the translators still send to their old
    /// connections would then land on new QPs: out of sequence, NAKed, or taken as duplicates.
    pub fn set_qpn_base(&mut self, base: u32) -> bool {
        if !self.qps.is_empty() {
            return false;
        }
        self.qpn_base = base.clamp(QPN_BASE, MAX_QPN_BASE);
        true
    }

    /// The device configuration.
    pub fn device(&self) -> &DeviceConfig {
        &self.dev
    }

    /// Registers `region` for remote access and returns its R_Key. The region's virtual address
    /// ([`Region::addr`]) is what requests must name.
    ///
    /// An R_Key is 24 bits from the kernel's random source above the 8-bit slot of the
    /// registration ([`MAX_MRS`] slots), so a packet finds its region by indexing, and a
    /// peer that was never told the key has a 1 in 2^24 chance per guess (and a wrong guess
    /// puts the QP in the error state). Keys are never reused within the device's lifetime.
    ///
    /// # Panics
    /// If [`MAX_MRS`] regions are registered at once (the configuration allows at most that
    /// many stores), or the kernel has no random source.
    pub fn register(&mut self, region: Arc<Region>, access: Access) -> Rkey {
        self.try_register(region, access)
            .unwrap_or_else(|| panic!("at most {MAX_MRS} regions can be registered at once"))
    }

    /// [`Responder::register`], or `None` when all [`MAX_MRS`] slots are taken.
    pub fn try_register(&mut self, region: Arc<Region>, access: Access) -> Option<Rkey> {
        let idx = match self.mrs.iter().position(Option::is_none) {
            Some(i) => i,
            None if self.mrs.len() < MAX_MRS => {
                self.mrs.push(None);
                self.mrs.len() - 1
            }
            None => return None,
        };
        let rkey = loop {
            // A zero tag would make small keys (0 reads as "not registered" in metadata).
            let tag = dta_io::random::random_u32() >> 8;
            let k = (tag << 8) | idx as u32;
            if tag != 0 && self.issued_rkeys.insert(k) {
                break Rkey(k);
            }
        };
        let base = region.addr();
        self.mrs[idx] = Some(Mr {
            rkey,
            region,
            base,
            access,
        });
        Some(rkey)
    }

    /// Removes a registration; later requests naming the key fail with a remote access error.
    pub fn deregister(&mut self, rkey: Rkey) {
        let idx = mr_slot(rkey);
        if let Some(slot) = self.mrs.get_mut(idx) {
            if slot.as_ref().is_some_and(|m| m.rkey == rkey) {
                *slot = None;
            }
        }
    }

    /// Creates an RC QP in the ready state and returns its QPN.
    pub fn create_qp(&mut self, cfg: QpConfig) -> Qpn {
        let idx = self
            .qps
            .iter()
            .position(Option::is_none)
            .unwrap_or_else(|| {
                self.qps.push(None);
                self.qps.len() - 1
            });
        let qpn = Qpn::new(self.qpn_base + idx as u32);
        let ep = RoceEndpoint {
            src_mac: self.dev.local_mac,
            dst_mac: cfg.peer_mac,
            src_ip: *self.dev.local.ip(),
            dst_ip: *cfg.peer.ip(),
            src_port: self.dev.local.port(),
            dst_port: cfg.peer.port(),
            ttl: 64,
            tos: 0,
            ident: 0,
        };
        let ack_tmpl = FrameTemplate::new(&ep, op::RC_ACKNOWLEDGE, cfg.peer_qpn, 0);
        let cfg_sq_psn = cfg.sq_psn;
        let atomic_ack_tmpl = FrameTemplate::new(&ep, op::RC_ATOMIC_ACKNOWLEDGE, cfg.peer_qpn, 0);
        self.qps[idx] = Some(Qp {
            qpn,
            epsn: cfg.rq_psn,
            recv_credits: cfg.recv_credits,
            cfg,
            state: QpState::Ready,
            msn: 0,
            sent_psn_nak: false,
            in_progress: InProgress::None,
            send_buf: Vec::new(),
            atomic_res: [AtomicRes::default(); MAX_RD_ATOMIC],
            read_res: [ReadRes::default(); MAX_RD_ATOMIC],
            res_next: 0,
            read_out: None,
            ep,
            sq_psn: cfg_sq_psn,
            pending_sends: VecDeque::new(),
            ack_tmpl,
            atomic_ack_tmpl,
            icrc_prefix: None,
            counters: RnicCounters::default(),
        });
        qpn
    }

    /// Destroys a QP (its counters are folded into the device totals).
    pub fn destroy_qp(&mut self, qpn: Qpn) {
        if let Some(i) = self.qp_index(qpn) {
            if let Some(qp) = self.qps[i].take() {
                self.counters.merge(&qp.counters);
            }
        }
    }

    fn qp_index(&self, qpn: Qpn) -> Option<usize> {
        let i = qpn.value().checked_sub(self.qpn_base)? as usize;
        self.qps.get(i).and_then(|q| q.as_ref()).map(|_| i)
    }

    /// The QP's state, or `None` if it does not exist.
    pub fn qp_state(&self, qpn: Qpn) -> Option<QpState> {
        self.qp_index(qpn)
            .and_then(|i| self.qps[i].as_ref())
            .map(|q| q.state)
    }

    /// The next PSN the QP expects.
    pub fn expected_psn(&self, qpn: Qpn) -> Option<Psn> {
        self.qp_index(qpn)
            .and_then(|i| self.qps[i].as_ref())
            .map(|q| q.epsn)
    }

    /// Posts `n` more receive buffers on a QP.
    pub fn post_recv(&mut self, qpn: Qpn, n: u32) {
        if let Some(i) = self.qp_index(qpn) {
            if let Some(q) = self.qps[i].as_mut() {
                q.recv_credits = q.recv_credits.saturating_add(n);
            }
        }
    }

    /// Per-QP counters.
    pub fn qp_counters(&self, qpn: Qpn) -> Option<RnicCounters> {
        self.qp_index(qpn)
            .and_then(|i| self.qps[i].as_ref())
            .map(|q| q.counters)
    }

    /// QPNs of all live QPs.
    pub fn qpns(&self) -> Vec<Qpn> {
        self.qps.iter().flatten().map(|q| q.qpn).collect()
    }

    /// Device-wide counters: packets that never reached a QP plus every QP's counters.
    pub fn counters(&self) -> RnicCounters {
        let mut c = self.counters;
        for q in self.qps.iter().flatten() {
            c.merge(&q.counters);
        }
        c
    }

    /// Takes the oldest pending completion.
    pub fn poll_completion(&mut self) -> Option<Completion> {
        self.cq.pop_front()
    }

    /// Sends `data` as an RC SEND Only with AckReq on `qpn` (the metadata advertisement after
    /// RDMA_CM's RTU), retransmitted every [`SEND_TIMEOUT_NS`] until acknowledged.
    pub fn post_send(&mut self, qpn: Qpn, data: &[u8], now: u64, tx: &mut TxBatch) -> bool {
        let Some(i) = self.qp_index(qpn) else {
            return false;
        };
        let off = tx_offset(&self.dev);
        let qp = self.qps[i].as_mut().expect("live QP");
        if qp.state == QpState::Error || data.len() > self.dev.pmtu as usize {
            return false;
        }
        let psn = qp.sq_psn;
        qp.sq_psn = psn.next();
        let bth = dta_proto::wire::ib::BthRepr {
            opcode: op::RC_SEND_ONLY,
            solicited: false,
            mig_req: true,
            pad_count: 0,
            tver: 0,
            pkey: 0xffff,
            fecn: false,
            becn: false,
            dest_qp: qp.cfg.peer_qpn,
            ack_req: true,
            psn,
        };
        let mut frame = vec![0u8; dta_proto::wire::roce::frame_len(0, data.len())];
        let n = build_frame(&qp.ep, &bth, &[], data, &mut frame);
        frame.truncate(n);
        let ok = tx.push_with(qp.cfg.peer, off, |b| {
            b[..n].copy_from_slice(&frame);
            n
        });
        count_tx(&mut qp.counters, ok);
        qp.pending_sends.push_back(PendingSend {
            psn,
            frame,
            sent_at: now,
            retries: 0,
        });
        true
    }

    /// True while a QP has READ responses waiting for room in a transmit batch: call
    /// [`Responder::poll`] again as soon as the batch was sent.
    pub fn has_pending_output(&self) -> bool {
        self.qps.iter().flatten().any(|q| q.read_out.is_some())
    }

    /// Continues READ responses that did not fit, and retransmits unacknowledged SENDs whose
    /// timer expired.
    pub fn poll(&mut self, now: u64, tx: &mut TxBatch) {
        let off = tx_offset(&self.dev);
        for qp in self.qps.iter_mut().flatten() {
            if qp.read_out.is_some() {
                pump_read(qp, &self.dev, &self.mrs, tx);
            }
        }
        for qp in self.qps.iter_mut().flatten() {
            let Some(p) = qp.pending_sends.front_mut() else {
                continue;
            };
            if now.saturating_sub(p.sent_at) < SEND_TIMEOUT_NS {
                continue;
            }
            if p.retries >= SEND_RETRIES {
                qp.pending_sends.clear();
                qp.state = QpState::Error;
                push_cq(
                    &mut self.cq,
                    &mut qp.counters,
                    Completion::SendFailed { qpn: qp.qpn },
                );
                log::warn!(
                    "QP {:#x}: SEND not acknowledged after {SEND_RETRIES} retries",
                    qp.qpn.value()
                );
                continue;
            }
            p.retries += 1;
            p.sent_at = now;
            let f = &p.frame;
            let ok = tx.push_with(qp.cfg.peer, off, |b| {
                b[..f.len()].copy_from_slice(f);
                f.len()
            });
            count_tx(&mut qp.counters, ok);
        }
    }

    /// Processes a burst of datagrams.
    pub fn handle_burst(&mut self, burst: &[Datagram<'_>], tx: &mut TxBatch) {
        for d in burst {
            self.handle(d, tx);
        }
    }

    /// Processes one datagram addressed to UDP 4791.
    pub fn handle(&mut self, d: &Datagram<'_>, tx: &mut TxBatch) {
        if self.write_fast(d, tx) {
            return;
        }
        let pkt = match RocePacket::parse(d.payload) {
            Ok(p) => p,
            Err(_) => {
                self.counters.malformed += 1;
                return;
            }
        };
        let Some(qi) = self.qp_index(pkt.bth.dest_qp) else {
            self.counters.unknown_qpn += 1;
            return;
        };
        let qp = self.qps[qi].as_mut().expect("qp_index returns live QPs");
        if d.src.ip() != qp.cfg.peer.ip()
            || (d.dst.ip() != self.dev.local.ip() && !d.dst.ip().is_unspecified())
        {
            qp.counters.addr_mismatch += 1;
            return;
        }
        if pkt.bth.pkey & 0x7fff != 0x7fff {
            qp.counters.bad_pkey += 1;
            return;
        }
        if pkt.bth.opcode >= 0x20 {
            qp.counters.bad_opcode += 1;
            return;
        }
        if qp.cfg.verify_icrc {
            match verify_icrc(d) {
                IcrcVerdict::Ok => {}
                IcrcVerdict::OkSolvedIdent(_) => qp.counters.icrc_ident_solved += 1,
                IcrcVerdict::Bad => {
                    qp.counters.bad_icrc += 1;
                    return;
                }
            }
        }
        if qp.state == QpState::Error {
            qp.counters.qp_error_drops += 1;
            return;
        }
        if qp.read_out.is_some() && !pump_read(qp, &self.dev, &self.mrs, tx) {
            // Responses are ordered: nothing overtakes the READ still being answered.
            qp.counters.read_busy_drops += 1;
            return;
        }
        qp.counters.rcvd_pkts += 1;

        if matches!(
            pkt.bth.opcode,
            op::RC_ACKNOWLEDGE | op::RC_ATOMIC_ACKNOWLEDGE
        ) {
            // A response to a SEND this QP originated (the metadata advertisement).
            requester_response(qp, &pkt, &mut self.cq, tx);
            return;
        }

        let diff = pkt.bth.psn.diff(qp.epsn);
        if diff > 0 {
            if qp.sent_psn_nak {
                qp.counters.out_of_seq_dropped += 1;
            } else {
                qp.sent_psn_nak = true;
                qp.counters.out_of_seq_request += 1;
                let epsn = qp.epsn;
                send_ack(
                    qp,
                    &self.dev,
                    tx,
                    Syndrome::Nak(NakCode::PsnSequenceError),
                    epsn,
                );
            }
            return;
        }
        if diff < 0 {
            qp.counters.duplicate_request += 1;
            duplicate(qp, &self.dev, &self.mrs, &pkt, tx);
            return;
        }

        let result = execute(qp, &self.dev, &self.mrs, &mut self.cq, &pkt, tx);
        match result {
            Ok(Step::Done { ack }) => {
                qp.sent_psn_nak = false;
                if ack {
                    let psn = pkt.bth.psn;
                    qp.epsn = psn.next();
                    send_ack(qp, &self.dev, tx, Syndrome::Ack { credits: 0x1f }, psn);
                } else {
                    qp.epsn = pkt.bth.psn.next();
                }
            }
            Ok(Step::Advanced(n)) => {
                qp.sent_psn_nak = false;
                qp.epsn = pkt.bth.psn.add(n);
            }
            Ok(Step::Rnr) => {
                qp.counters.send_rnr_err += 1;
                let psn = pkt.bth.psn;
                send_ack(
                    qp,
                    &self.dev,
                    tx,
                    Syndrome::RnrNak { timer: RNR_TIMER },
                    psn,
                );
            }
            Err(fault) => {
                let code = match fault {
                    Fault::Access => NakCode::RemoteAccessError,
                    Fault::Invalid => {
                        qp.counters.invalid_request += 1;
                        NakCode::InvalidRequest
                    }
                };
                let psn = pkt.bth.psn;
                send_ack(qp, &self.dev, tx, Syndrome::Nak(code), psn);
                qp.state = QpState::Error;
                qp.in_progress = InProgress::None;
                log::warn!(
                    "QP {:#x}: {:?}; QP moved to the error state",
                    qp.qpn.value(),
                    code
                );
            }
        }
    }
}

impl Responder {
    /// The common case, done with the fewest instructions: an RDMA WRITE Only at the expected
    /// PSN, from the connected peer, on a ready QP with nothing in progress, whose ICRC is
    /// right (as sent with IPv4 ident 0) and whose R_Key and range are valid. Anything else
    /// returns false before touching any state, and [`Responder::handle`] takes the general
    /// path, which decides and counts exactly as for any other packet; so does this path for
    /// the packets it takes (`tests::fast_and_general_paths_agree`).
    #[inline]
    fn write_fast(&mut self, d: &Datagram<'_>, tx: &mut TxBatch) -> bool {
        if !self.fast_path {
            return false;
        }
        let p = d.payload;
        const HEAD: usize = BTH_LEN + RETH_LEN;
        if p.len() < HEAD + ICRC_LEN || p[0] != op::RC_RDMA_WRITE_ONLY {
            return false;
        }
        let bth = Bth::new_unchecked(&p[..BTH_LEN]);
        if bth.tver() != 0 || bth.pkey() & 0x7fff != 0x7fff {
            return false;
        }
        let Some(qi) = self.qp_index(bth.dest_qp()) else {
            return false;
        };
        let Some(qp) = self.qps[qi].as_mut() else {
            return false;
        };
        let psn = bth.psn();
        if psn != qp.epsn
            || qp.state != QpState::Ready
            || !matches!(qp.in_progress, InProgress::None)
            || qp.read_out.is_some()
            || d.src.ip() != qp.cfg.peer.ip()
            || (d.dst.ip() != self.dev.local.ip() && !d.dst.ip().is_unspecified())
        {
            return false;
        }
        let reth = Reth::new_unchecked(&p[BTH_LEN..HEAD]);
        let dma_len = reth.dma_len() as usize;
        let pad = bth.pad_count() as usize;
        let Some(len) = (p.len() - HEAD - ICRC_LEN).checked_sub(pad) else {
            return false;
        };
        if len != dma_len || len == 0 || len > self.dev.pmtu as usize {
            return false;
        }
        if qp.cfg.verify_icrc {
            let ok = match d.ip {
                None => {
                    let key = IcrcPrefixKey {
                        len: p.len(),
                        src: d.src,
                        dst: d.dst,
                    };
                    let prefix = match qp.icrc_prefix {
                        Some((k, reg)) if k == key => reg,
                        _ => {
                            let h = ReconstructedHeader {
                                src_ip: *d.src.ip(),
                                dst_ip: *d.dst.ip(),
                                src_port: d.src.port(),
                                dst_port: d.dst.port(),
                            };
                            let reg = icrc::reconstructed_prefix(&h, p.len());
                            qp.icrc_prefix = Some((key, reg));
                            reg
                        }
                    };
                    icrc::check_after_prefix(prefix, p)
                }
                // Raw backends: the general path checks the headers as seen.
                Some(_) => false,
            };
            if !ok {
                return false;
            }
        }
        let Some(mr) = self
            .mrs
            .get(mr_slot(reth.rkey()))
            .and_then(|m| m.as_ref())
            .filter(|m| m.rkey == reth.rkey() && m.access.remote_write)
        else {
            return false;
        };
        // The region checks the range (an address below the base wraps past its end).
        let off = reth.va().wrapping_sub(mr.base);
        if mr.region.write(off, &p[HEAD..HEAD + len]).is_err() {
            return false;
        }
        qp.counters.rcvd_pkts += 1;
        qp.counters.write_bytes += len as u64;
        qp.counters.writes += 1;
        qp.msn = (qp.msn + 1) & 0xff_ffff;
        qp.sent_psn_nak = false;
        qp.epsn = psn.next();
        if bth.ack_req() {
            send_ack(qp, &self.dev, tx, Syndrome::Ack { credits: 0x1f }, psn);
        }
        true
    }
}

enum Step {
    /// The request executed; ACK it if asked (or always, for `ack: true` callers decide).
    Done { ack: bool },
    /// The request executed and consumed `n` PSNs; responses were already queued.
    Advanced(u32),
    /// No receive buffer: answer RNR NAK, consume nothing.
    Rnr,
}

fn verify_icrc(d: &Datagram<'_>) -> IcrcVerdict {
    let h = ReconstructedHeader {
        src_ip: *d.src.ip(),
        dst_ip: *d.dst.ip(),
        src_port: d.src.port(),
        dst_port: d.dst.port(),
    };
    match d.ip {
        Some(ip) => {
            if check_with_ip(&h, ip.ident, ip.dont_frag, ip.ttl, ip.tos, d.payload) {
                IcrcVerdict::Ok
            } else {
                IcrcVerdict::Bad
            }
        }
        None => icrc::check_reconstructed(&h, d.payload),
    }
}

/// Exact ICRC check when the backend saw the IPv4 header (raw frames).
fn check_with_ip(
    h: &ReconstructedHeader,
    ident: u16,
    df: bool,
    ttl: u8,
    tos: u8,
    transport: &[u8],
) -> bool {
    let Some(body_len) = transport.len().checked_sub(4) else {
        return false;
    };
    let mut ip = [0u8; 20];
    Ipv4Repr {
        src: h.src_ip,
        dst: h.dst_ip,
        protocol: PROTO_UDP,
        ttl,
        tos,
        ident,
        dont_frag: df,
        payload_len: 8 + transport.len(),
    }
    .emit(&mut Ipv4Packet::new_unchecked(&mut ip[..]));
    let mut udp = [0u8; 8];
    UdpRepr {
        src_port: h.src_port,
        dst_port: h.dst_port,
        payload_len: transport.len(),
    }
    .emit(&mut UdpPacket::new_unchecked(&mut udp[..]));
    let want = u32::from_le_bytes(transport[body_len..].try_into().expect("4 bytes"));
    icrc::icrc_ipv4(&ip, &udp, &transport[..body_len]) == want
}

fn resolve<'m>(
    mrs: &'m [Option<Mr>],
    rkey: Rkey,
    va: u64,
    len: u64,
    need: fn(&Access) -> bool,
    c: &mut RnicCounters,
) -> Result<(usize, u64, &'m Mr), Fault> {
    let idx = mr_slot(rkey);
    let Some(mr) = mrs
        .get(idx)
        .and_then(|m| m.as_ref())
        .filter(|m| m.rkey == rkey)
    else {
        c.rkey_violation += 1;
        return Err(Fault::Access);
    };
    if !need(&mr.access) {
        c.access_denied += 1;
        return Err(Fault::Access);
    }
    let off = va.wrapping_sub(mr.base);
    if va < mr.base
        || off
            .checked_add(len)
            .is_none_or(|end| end > mr.region.len() as u64)
    {
        c.out_of_bounds += 1;
        return Err(Fault::Access);
    }
    Ok((idx, off, mr))
}

fn execute(
    qp: &mut Qp,
    dev: &DeviceConfig,
    mrs: &[Option<Mr>],
    cq: &mut VecDeque<Completion>,
    pkt: &RocePacket<'_>,
    tx: &mut TxBatch,
) -> Result<Step, Fault> {
    let opc = pkt.bth.opcode;
    let pmtu = dev.pmtu as usize;
    let ack_req = pkt.bth.ack_req;
    // Opcode order: a FIRST must be followed by MIDDLE*/LAST of the same kind.
    let continuing = matches!(
        opc,
        op::RC_RDMA_WRITE_MIDDLE
            | op::RC_RDMA_WRITE_LAST
            | op::RC_RDMA_WRITE_LAST_IMM
            | op::RC_SEND_MIDDLE
            | op::RC_SEND_LAST
            | op::RC_SEND_LAST_IMM
    );
    match (qp.in_progress, continuing) {
        (InProgress::None, true) | (InProgress::Write { .. } | InProgress::Send, false) => {
            return Err(Fault::Invalid);
        }
        (InProgress::Write { .. }, true)
            if !matches!(
                opc,
                op::RC_RDMA_WRITE_MIDDLE | op::RC_RDMA_WRITE_LAST | op::RC_RDMA_WRITE_LAST_IMM
            ) =>
        {
            return Err(Fault::Invalid);
        }
        (InProgress::Send, true)
            if !matches!(
                opc,
                op::RC_SEND_MIDDLE | op::RC_SEND_LAST | op::RC_SEND_LAST_IMM
            ) =>
        {
            return Err(Fault::Invalid);
        }
        _ => {}
    }

    match opc {
        op::RC_RDMA_WRITE_ONLY | op::RC_RDMA_WRITE_ONLY_IMM | op::RC_RDMA_WRITE_FIRST => {
            let reth = pkt.reth.ok_or(Fault::Invalid)?;
            let len = pkt.payload.len();
            let first = opc == op::RC_RDMA_WRITE_FIRST;
            if first && (len != pmtu || reth.dma_len as usize <= pmtu) {
                return Err(Fault::Invalid);
            }
            if !first && (len != reth.dma_len as usize || len > pmtu) {
                return Err(Fault::Invalid);
            }
            let imm = opc == op::RC_RDMA_WRITE_ONLY_IMM;
            if imm && qp.recv_credits == 0 {
                return Ok(Step::Rnr);
            }
            if reth.dma_len == 0 {
                // Zero-length WRITE: no memory access, no R_Key check (IBA 9.4.4).
                qp.msn = (qp.msn + 1) & 0xff_ffff;
                return Ok(Step::Done { ack: ack_req });
            }
            let (mi, off, mr) = resolve(
                mrs,
                reth.rkey,
                reth.va,
                reth.dma_len as u64,
                |a| a.remote_write,
                &mut qp.counters,
            )?;
            mr.region
                .write(off, pkt.payload)
                .map_err(|_| Fault::Access)?;
            qp.counters.write_bytes += len as u64;
            if first {
                qp.in_progress = InProgress::Write {
                    mr: mi,
                    offset: off + len as u64,
                    remaining: reth.dma_len - len as u32,
                    total: reth.dma_len,
                };
                return Ok(Step::Done { ack: ack_req });
            }
            qp.counters.writes += 1;
            qp.msn = (qp.msn + 1) & 0xff_ffff;
            if imm {
                qp.recv_credits -= 1;
                qp.counters.write_imm += 1;
                push_cq(
                    cq,
                    &mut qp.counters,
                    Completion::WriteWithImm {
                        qpn: qp.qpn,
                        imm: pkt.imm.unwrap_or(0),
                        len: reth.dma_len,
                    },
                );
            }
            Ok(Step::Done { ack: ack_req })
        }
        op::RC_RDMA_WRITE_MIDDLE | op::RC_RDMA_WRITE_LAST | op::RC_RDMA_WRITE_LAST_IMM => {
            let InProgress::Write {
                mr: mi,
                offset,
                remaining,
                total,
            } = qp.in_progress
            else {
                return Err(Fault::Invalid);
            };
            let len = pkt.payload.len();
            let last = opc != op::RC_RDMA_WRITE_MIDDLE;
            let bad_len = if last {
                len == 0 || len > pmtu || len as u32 != remaining
            } else {
                len != pmtu || len as u32 >= remaining
            };
            if bad_len {
                return Err(Fault::Invalid);
            }
            let imm = opc == op::RC_RDMA_WRITE_LAST_IMM;
            if imm && qp.recv_credits == 0 {
                return Ok(Step::Rnr);
            }
            let mr = mrs.get(mi).and_then(|m| m.as_ref()).ok_or(Fault::Access)?;
            mr.region
                .write(offset, pkt.payload)
                .map_err(|_| Fault::Access)?;
            qp.counters.write_bytes += len as u64;
            if last {
                qp.in_progress = InProgress::None;
                qp.counters.writes += 1;
                qp.msn = (qp.msn + 1) & 0xff_ffff;
                if imm {
                    qp.recv_credits -= 1;
                    qp.counters.write_imm += 1;
                    push_cq(
                        cq,
                        &mut qp.counters,
                        Completion::WriteWithImm {
                            qpn: qp.qpn,
                            imm: pkt.imm.unwrap_or(0),
                            len: total,
                        },
                    );
                }
            } else {
                qp.in_progress = InProgress::Write {
                    mr: mi,
                    offset: offset + len as u64,
                    remaining: remaining - len as u32,
                    total,
                };
            }
            Ok(Step::Done { ack: ack_req })
        }
        op::RC_FETCH_ADD | op::RC_COMPARE_SWAP => {
            let a = pkt.atomic.ok_or(Fault::Invalid)?;
            if a.va % 8 != 0 {
                return Err(Fault::Invalid);
            }
            let (_, off, mr) =
                resolve(mrs, a.rkey, a.va, 8, |x| x.remote_atomic, &mut qp.counters)?;
            let orig = if opc == op::RC_FETCH_ADD {
                mr.region.fetch_add(off, a.swap_add)
            } else {
                mr.region.compare_swap(off, a.compare, a.swap_add)
            }
            .map_err(|_| Fault::Invalid)?;
            qp.counters.atomics += 1;
            qp.msn = (qp.msn + 1) & 0xff_ffff;
            let r = qp.res_next;
            qp.res_next = (r + 1) % MAX_RD_ATOMIC;
            qp.atomic_res[r] = AtomicRes {
                valid: true,
                psn: pkt.bth.psn.value(),
                orig,
            };
            qp.read_res[r].valid = false;
            send_atomic_ack(qp, dev, tx, pkt.bth.psn, orig);
            Ok(Step::Advanced(1))
        }
        op::RC_RDMA_READ_REQUEST => {
            let reth = pkt.reth.ok_or(Fault::Invalid)?;
            if !pkt.payload.is_empty() {
                return Err(Fault::Invalid);
            }
            let npsn = (reth.dma_len as usize).div_ceil(pmtu).max(1) as u32;
            let (mi, off) = if reth.dma_len == 0 {
                (usize::MAX, 0)
            } else {
                let (mi, off, _) = resolve(
                    mrs,
                    reth.rkey,
                    reth.va,
                    reth.dma_len as u64,
                    |a| a.remote_read,
                    &mut qp.counters,
                )?;
                (mi, off)
            };
            qp.counters.reads += 1;
            qp.msn = (qp.msn + 1) & 0xff_ffff;
            let r = qp.res_next;
            qp.res_next = (r + 1) % MAX_RD_ATOMIC;
            let res = ReadRes {
                valid: true,
                first: pkt.bth.psn.value(),
                npsn,
                mr: mi,
                offset: off,
                len: reth.dma_len,
            };
            qp.read_res[r] = res;
            qp.atomic_res[r].valid = false;
            qp.read_out = Some(ReadOut { res, next: 0 });
            pump_read(qp, dev, mrs, tx);
            Ok(Step::Advanced(npsn))
        }
        op::RC_SEND_ONLY | op::RC_SEND_ONLY_IMM | op::RC_SEND_FIRST => {
            if qp.recv_credits == 0 {
                return Ok(Step::Rnr);
            }
            let len = pkt.payload.len();
            if len > pmtu || (opc == op::RC_SEND_FIRST && len != pmtu) {
                return Err(Fault::Invalid);
            }
            qp.send_buf.clear();
            qp.send_buf.extend_from_slice(pkt.payload);
            if opc == op::RC_SEND_FIRST {
                qp.in_progress = InProgress::Send;
            } else {
                finish_send(qp, cq, pkt.imm);
            }
            Ok(Step::Done { ack: ack_req })
        }
        op::RC_SEND_MIDDLE | op::RC_SEND_LAST | op::RC_SEND_LAST_IMM => {
            let len = pkt.payload.len();
            let last = opc != op::RC_SEND_MIDDLE;
            if len > pmtu || (!last && len != pmtu) || qp.send_buf.len() + len > 1 << 20 {
                return Err(Fault::Invalid);
            }
            qp.send_buf.extend_from_slice(pkt.payload);
            if last {
                qp.in_progress = InProgress::None;
                finish_send(qp, cq, pkt.imm);
            }
            Ok(Step::Done { ack: ack_req })
        }
        _ => Err(Fault::Invalid),
    }
}

fn requester_response(
    qp: &mut Qp,
    pkt: &RocePacket<'_>,
    cq: &mut VecDeque<Completion>,
    _tx: &mut TxBatch,
) {
    let Some(aeth) = pkt.aeth else {
        qp.counters.malformed += 1;
        return;
    };
    match aeth.syndrome {
        Syndrome::Ack { .. } => {
            // An ACK covers every SEND up to and including its PSN.
            while let Some(p) = qp.pending_sends.front() {
                if pkt.bth.psn.diff(p.psn) >= 0 {
                    qp.pending_sends.pop_front();
                    push_cq(cq, &mut qp.counters, Completion::SendDone { qpn: qp.qpn });
                } else {
                    break;
                }
            }
        }
        _ => {
            // A NAK: let the retransmission timer resend right away.
            if let Some(p) = qp.pending_sends.front_mut() {
                p.sent_at = 0;
            }
        }
    }
}

fn finish_send(qp: &mut Qp, cq: &mut VecDeque<Completion>, imm: Option<u32>) {
    qp.recv_credits -= 1;
    qp.counters.sends += 1;
    qp.msn = (qp.msn + 1) & 0xff_ffff;
    let data = std::mem::take(&mut qp.send_buf);
    push_cq(
        cq,
        &mut qp.counters,
        Completion::Recv {
            qpn: qp.qpn,
            imm,
            data,
        },
    );
}

fn push_cq(cq: &mut VecDeque<Completion>, c: &mut RnicCounters, e: Completion) {
    if cq.len() >= CQ_DEPTH {
        cq.pop_front();
        c.cq_overflow += 1;
    }
    cq.push_back(e);
}

fn duplicate(
    qp: &mut Qp,
    dev: &DeviceConfig,
    mrs: &[Option<Mr>],
    pkt: &RocePacket<'_>,
    tx: &mut TxBatch,
) {
    match pkt.bth.opcode {
        op::RC_FETCH_ADD | op::RC_COMPARE_SWAP => {
            let psn = pkt.bth.psn.value();
            if let Some(r) = qp
                .atomic_res
                .iter()
                .find(|r| r.valid && r.psn == psn)
                .copied()
            {
                qp.counters.atomic_replays += 1;
                send_atomic_ack(qp, dev, tx, pkt.bth.psn, r.orig);
            }
        }
        op::RC_RDMA_READ_REQUEST => {
            // Replay the saved READ from the PSN asked for (a requester that lost some of the
            // responses asks again from the first one it misses), as rxe does.
            let psn = pkt.bth.psn;
            if let Some(r) = qp
                .read_res
                .iter()
                .find(|r| {
                    let k = psn.diff(Psn::new(r.first));
                    r.valid && k >= 0 && (k as u32) < r.npsn
                })
                .copied()
            {
                let next = psn.diff(Psn::new(r.first)) as u32;
                qp.read_out = Some(ReadOut { res: r, next });
                pump_read(qp, dev, mrs, tx);
            }
        }
        _ => {
            // C9-105: acknowledge again with the last executed PSN; never execute twice.
            let prev = qp.epsn.sub(1);
            send_ack(qp, dev, tx, Syndrome::Ack { credits: 0x1f }, prev);
        }
    }
}

fn tx_offset(dev: &DeviceConfig) -> usize {
    if dev.l2_frames {
        0
    } else {
        L2L4_LEN
    }
}

fn send_ack(qp: &mut Qp, dev: &DeviceConfig, tx: &mut TxBatch, syn: Syndrome, psn: Psn) {
    let aeth = AethRepr {
        syndrome: syn,
        msn: qp.msn,
    };
    let off = tx_offset(dev);
    let tmpl = &qp.ack_tmpl;
    let ok = tx.push_with(qp.cfg.peer, off, |buf| {
        tmpl.emit(buf, psn, false, |ext| {
            aeth.emit(&mut Aeth::new_unchecked(ext))
        })
    });
    count_tx(&mut qp.counters, ok);
    if ok {
        match syn {
            Syndrome::Ack { .. } => qp.counters.acks_sent += 1,
            _ => qp.counters.naks_sent += 1,
        }
    }
}

fn send_atomic_ack(qp: &mut Qp, dev: &DeviceConfig, tx: &mut TxBatch, psn: Psn, orig: u64) {
    let aeth = AethRepr {
        syndrome: Syndrome::Ack { credits: 0x1f },
        msn: qp.msn,
    };
    let off = tx_offset(dev);
    let tmpl = &qp.atomic_ack_tmpl;
    let ok = tx.push_with(qp.cfg.peer, off, |buf| {
        tmpl.emit(buf, psn, false, |ext| {
            let (a, rest) = ext.split_at_mut(AETH_LEN);
            aeth.emit(&mut Aeth::new_unchecked(a));
            AtomicAckEthRepr { orig }.emit(&mut AtomicAckEth::new_unchecked(rest));
        })
    });
    count_tx(&mut qp.counters, ok);
}

/// Sends the responses of the READ the QP is answering, from where it stopped, as far as
/// `tx` has room. Reads the region straight into the batch (no buffer per READ). Returns true
/// once every response went out (the READ is done).
fn pump_read(qp: &mut Qp, dev: &DeviceConfig, mrs: &[Option<Mr>], tx: &mut TxBatch) -> bool {
    let Some(mut ro) = qp.read_out else {
        return true;
    };
    let pmtu = dev.pmtu as usize;
    let r = ro.res;
    let off = tx_offset(dev);
    while ro.next < r.npsn {
        if tx.remaining() == 0 {
            qp.read_out = Some(ro);
            return false;
        }
        let i = ro.next;
        let start = i as usize * pmtu;
        let len = (r.len as usize).saturating_sub(start).min(pmtu);
        let opcode = match (r.npsn, i) {
            (1, _) => op::RC_RDMA_READ_RESPONSE_ONLY,
            (_, 0) => op::RC_RDMA_READ_RESPONSE_FIRST,
            (n, x) if x == n - 1 => op::RC_RDMA_READ_RESPONSE_LAST,
            _ => op::RC_RDMA_READ_RESPONSE_MIDDLE,
        };
        let aeth = (opcode != op::RC_RDMA_READ_RESPONSE_MIDDLE).then_some(AethRepr {
            syndrome: Syndrome::Ack { credits: 0x1f },
            msn: qp.msn,
        });
        let psn = Psn::new(r.first.wrapping_add(i));
        let bth = BthRepr::rc(opcode, qp.cfg.peer_qpn, psn, false);
        let tmpl = FrameTemplate::with_bth(&qp.ep, &bth, len);
        let region = mrs.get(r.mr).and_then(|m| m.as_ref()).map(|m| &m.region);
        let mut read_ok = len == 0;
        let ok = tx.push_with(qp.cfg.peer, off, |buf| {
            tmpl.emit(buf, psn, false, |ext| {
                let payload = match aeth {
                    Some(a) => {
                        let (h, p) = ext.split_at_mut(AETH_LEN);
                        a.emit(&mut Aeth::new_unchecked(h));
                        p
                    }
                    None => ext,
                };
                if let Some(region) = region.filter(|_| len > 0) {
                    read_ok = region.read(r.offset + start as u64, payload).is_ok();
                }
            })
        });
        if !read_ok {
            // The region went away (deregistered) mid-READ: stop answering it.
            qp.read_out = None;
            return true;
        }
        count_tx(&mut qp.counters, ok);
        ro.next += 1;
    }
    qp.read_out = None;
    true
}

fn count_tx(c: &mut RnicCounters, ok: bool) {
    if ok {
        c.sent_pkts += 1;
    } else {
        c.tx_dropped += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use dta_proto::wire::ib::{opcode_info, RethRepr};

    const REGION: usize = 1 << 16;

    /// A responder with one region and one QP from `peer`; (responder, region base, R_Key).
    fn setup(fast: bool, peer: SocketAddrV4) -> (Responder, Arc<Region>, Rkey) {
        let mut r = Responder::new(DeviceConfig {
            local: SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 51), 4791),
            pmtu: 1024,
            ..DeviceConfig::default()
        });
        r.fast_path = fast;
        let region = Arc::new(Region::anonymous(REGION, false).unwrap());
        let rkey = r.register(region.clone(), Access::ALL);
        r.create_qp(QpConfig {
            peer,
            peer_mac: MacAddr([2, 0, 0, 0, 0, 1]),
            peer_qpn: Qpn::new(0x99),
            rq_psn: Psn::new(0xFF_FFF0),
            sq_psn: Psn::new(0),
            verify_icrc: true,
            recv_credits: 4,
        });
        (r, region, rkey)
    }

    /// A frame as a test writes it: transport bytes whose RETH names `region` by offset (so
    /// two responders with their own regions get the same request), and whether to break its
    /// ICRC.
    struct Frame {
        transport: Vec<u8>,
        src: SocketAddrV4,
        corrupt_icrc: bool,
    }

    /// The frame for a responder whose region is `base` / `rkey`: the RETH's offset and the
    /// test's R_Key marker become that responder's, and the ICRC is sealed.
    fn seal(f: &Frame, base: u64, rkey: Rkey, dst: SocketAddrV4) -> Vec<u8> {
        let mut t = f.transport.clone();
        if t.len() >= BTH_LEN + RETH_LEN + ICRC_LEN && opcode_info(t[0]).is_some_and(|i| i.reth) {
            let mut reth = Reth::new_unchecked(&mut t[BTH_LEN..BTH_LEN + RETH_LEN]);
            reth.set_va(base.wrapping_add(reth.va()));
            if reth.rkey() == Rkey(0xABCD_EF00) {
                reth.set_rkey(rkey);
            }
        }
        let h = ReconstructedHeader {
            src_ip: *f.src.ip(),
            dst_ip: *dst.ip(),
            src_port: f.src.port(),
            dst_port: dst.port(),
        };
        if let Some(c) = icrc::reconstructed_icrc(&h, &t) {
            let n = t.len();
            t[n - 4..].copy_from_slice(&(c ^ f.corrupt_icrc as u32).to_le_bytes());
        }
        t
    }

    /// A stream of WRITEs, mostly valid and in order, with every kind of fault mixed in.
    fn stream(seed: u64, peer: SocketAddrV4) -> Vec<Frame> {
        let mut s = seed | 1;
        let mut next = || {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            s
        };
        let ep = RoceEndpoint::default();
        let mut psn = Psn::new(0xFF_FFF0);
        let mut out = Vec::new();
        for i in 0..600 {
            let r = next();
            let len = [8usize, 32, 30, 72, 1024, 0][(r % 6) as usize];
            let tmpl = FrameTemplate::new(&ep, op::RC_RDMA_WRITE_ONLY, Qpn::new(QPN_BASE), len);
            let mut buf = vec![0u8; tmpl.frame_len()];
            let off = (r >> 8) % (REGION as u64 - 1024);
            let reth = RethRepr {
                va: off,
                rkey: Rkey(0xABCD_EF00),
                dma_len: len as u32,
            };
            let payload: Vec<u8> = (0..len).map(|i| (r >> 16) as u8 ^ i as u8).collect();
            // Faults that break the QP (a bad R_Key, range or length) only at the end, so the
            // rest of the stream runs on a live QP.
            let fault = match (r >> 40) % 24 {
                3 | 4 | 5 | 11 | 12 if i < 560 => 13,
                f => f,
            };
            let use_psn = match fault {
                0 => psn.add(3),
                1 => Psn::new(psn.value().wrapping_sub(2) & 0xFF_FFFF),
                _ => psn,
            };
            tmpl.emit_write(&mut buf, use_psn, r & 16 != 0, &reth, None, &payload);
            let mut t = buf[L2L4_LEN..].to_vec();
            let mut src = peer;
            let mut corrupt_icrc = false;
            match fault {
                2 => corrupt_icrc = true,
                3 => Reth::new_unchecked(&mut t[BTH_LEN..]).set_rkey(Rkey(0x1234_5600)),
                4 => Reth::new_unchecked(&mut t[BTH_LEN..]).set_va(REGION as u64 - 4),
                5 => Reth::new_unchecked(&mut t[BTH_LEN..]).set_dma_len(len as u32 + 4),
                6 => t[1] |= 0x0F, // TVer
                7 => t[2] = 0x00,  // P_Key
                9 => t.truncate(BTH_LEN + 6),
                10 => src = SocketAddrV4::new(Ipv4Addr::new(10, 9, 9, 9), peer.port()),
                11 => t[1] = (t[1] & !0x30) | 0x30, // pad count 3
                12 => Reth::new_unchecked(&mut t[BTH_LEN..]).set_va(u64::MAX - 8),
                _ => {}
            }
            // Only a valid frame takes a PSN.
            if fault == 8 || fault >= 13 {
                psn = psn.next();
            }
            out.push(Frame {
                transport: t,
                src,
                corrupt_icrc,
            });
        }
        out
    }

    #[test]
    fn fast_and_general_paths_agree() {
        let peer = SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 101), 10000);
        for seed in 1..6u64 {
            let (mut fast, ra, ka) = setup(true, peer);
            let (mut general, rb, kb) = setup(false, peer);
            let dst = fast.dev.local;
            let (mut txa, mut txb) = (TxBatch::new(64, 2048), TxBatch::new(64, 2048));
            let mut answers = 0;
            for f in stream(seed, peer) {
                let a = seal(&f, ra.addr(), ka, dst);
                let b = seal(&f, rb.addr(), kb, dst);
                for (r, t, tx) in [(&mut fast, &a, &mut txa), (&mut general, &b, &mut txb)] {
                    r.handle(
                        &Datagram {
                            src: f.src,
                            dst,
                            ip: None,
                            payload: t,
                        },
                        tx,
                    );
                }
                let fa: Vec<&[u8]> = txa.iter_payloads().map(|(_, b)| b).collect();
                let fb: Vec<&[u8]> = txb.iter_payloads().map(|(_, b)| b).collect();
                assert_eq!(fa, fb, "seed {seed}: the answers differ");
                answers += fa.len();
                txa.clear();
                txb.clear();
            }
            let qpn = Qpn::new(QPN_BASE);
            assert_eq!(
                format!("{:?}", fast.qp_counters(qpn)),
                format!("{:?}", general.qp_counters(qpn)),
                "seed {seed}"
            );
            assert_eq!(fast.expected_psn(qpn), general.expected_psn(qpn));
            assert_eq!(fast.qp_state(qpn), general.qp_state(qpn));
            let (mut ma, mut mb) = (vec![0u8; REGION], vec![0u8; REGION]);
            ra.read(0, &mut ma).unwrap();
            rb.read(0, &mut mb).unwrap();
            assert!(ma == mb, "seed {seed}: the regions differ");
            let c = fast.qp_counters(qpn).unwrap();
            assert!(
                c.writes > 20 && answers > 0,
                "seed {seed}: too few writes ran: {c:?}"
            );
        }
    }
}
