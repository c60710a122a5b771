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
use dta_proto::icrc::{IcrcVerdict, PreparedCheck};
use dta_proto::wire::ethernet::MacAddr;
use dta_proto::wire::ib::{opcode as op, NakCode, Psn, Qpn, Rkey, Syndrome};
use dta_proto::wire::roce::{build_frame, FrameTemplate, RoceEndpoint, RocePacket};

use crate::counters::RnicCounters;
use crate::memory::Region;

mod execute;
mod fast;
mod reply;

use execute::{duplicate, execute, push_cq, requester_response, verify_icrc_cached, Step};
use fast::WriteShape;
use reply::{count_tx, pump_read, send_ack, tx_offset};

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
    /// Messages completed, free-running: the AETH carries its low 24 bits (the MSN;
    /// `AethRepr` masks it), so the per-packet paths count without masking.
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
    /// checked by reconstruction, and what it depends on (the fast path's cache; the
    /// [`FastIcrcKey::EMPTY`] key matches no datagram).
    icrc_fast: (FastIcrcKey, u32),
    /// The same for the general path ([`execute::verify_icrc_cached`]), kept apart so that
    /// requests of other shapes (atomics, READs) do not evict the fast path's.
    icrc_prefix_general: Option<(IcrcPrefixKey, PreparedCheck)>,
    counters: RnicCounters,
    /// WRITEs executed by [`Responder::write_fast`]: each counts once in `rcvd_pkts` and
    /// once in `writes`, added when the counters are read ([`Qp::counters`]).
    fast_writes: u64,
    /// The fast path's last R_Key: a registered region with remote write access.
    write_mr: WriteMr,
    /// The shape of the fast path's last learned WRITE (emptied with `write_mr`).
    shape: Option<WriteShape>,
    /// WRITEs of another shape executed since it was learned ([`fast`]'s relearning).
    shape_misses: u32,
}

impl Qp {
    /// The QP's counters, the fast path's included.
    fn counters(&self) -> RnicCounters {
        let mut c = self.counters;
        c.rcvd_pkts += self.fast_writes;
        c.writes += self.fast_writes;
        if let Some(s) = &self.shape {
            s.fold_into(&mut c);
        }
        c
    }

    /// Replaces the fast path's WRITE shape, its counts folded into the QP's.
    fn set_shape(&mut self, shape: Option<WriteShape>) {
        if let Some(old) = std::mem::replace(&mut self.shape, shape) {
            old.fold_into(&mut self.counters);
        }
    }
}

/// What [`icrc::reconstructed_prefix`] depends on besides the peer's address: the
/// transport length, the ports and our address.
#[derive(Clone, Copy, PartialEq, Eq)]
struct IcrcPrefixKey {
    len: usize,
    src: SocketAddrV4,
    dst: SocketAddrV4,
}

/// [`IcrcPrefixKey`] for the fast path, compared field by field without branches: the
/// transport length and both addresses, as the datagram carries them.
#[derive(Clone, Copy)]
struct FastIcrcKey {
    len: usize,
    src_ip: u32,
    dst_ip: u32,
    src_port: u16,
    dst_port: u16,
}

impl FastIcrcKey {
    /// Length 0: no datagram the fast path looks up (at least 32 bytes) has it.
    const EMPTY: FastIcrcKey = FastIcrcKey {
        len: 0,
        src_ip: 0,
        dst_ip: 0,
        src_port: 0,
        dst_port: 0,
    };

    #[inline(always)]
    fn of(d: &Datagram<'_>) -> FastIcrcKey {
        FastIcrcKey {
            len: d.payload.len(),
            src_ip: u32::from_ne_bytes(d.src.ip().octets()),
            dst_ip: u32::from_ne_bytes(d.dst.ip().octets()),
            src_port: d.src.port(),
            dst_port: d.dst.port(),
        }
    }

    /// Whether `d` has this key: every field XORed, ORed together, one test.
    #[inline(always)]
    fn matches(&self, d: &Datagram<'_>) -> bool {
        let k = FastIcrcKey::of(d);
        (self.len ^ k.len)
            | (self.src_ip ^ k.src_ip) as usize
            | (self.dst_ip ^ k.dst_ip) as usize
            | (self.src_port ^ k.src_port) as usize
            | (self.dst_port ^ k.dst_port) as usize
            == 0
    }
}

/// The registration the fast path wrote to last, kept in the QP so that a WRITE naming the
/// same R_Key skips the device's table: filled only for a registered region with remote
/// write access; [`Responder::deregister`] (and a registration) empties every QP's, so a
/// deregistered region is never written through it (nor kept mapped by it).
struct WriteMr {
    /// The R_Key, widened; [`WriteMr::EMPTY`]'s matches no R_Key on the wire.
    rkey: u64,
    /// The region's virtual address.
    base: u64,
    region: Option<Arc<Region>>,
}

impl WriteMr {
    const EMPTY: WriteMr = WriteMr {
        rkey: u64::MAX,
        base: 0,
        region: None,
    };
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
    /// path; read by unit-test builds alone).
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
        self.forget_write_mrs();
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
                self.forget_write_mrs();
            }
        }
    }

    /// Empties every QP's [`WriteMr`] and [`WriteShape`]: the fast path looks its next R_Key
    /// up again.
    fn forget_write_mrs(&mut self) {
        for qp in self.qps.iter_mut().flatten() {
            qp.write_mr = WriteMr::EMPTY;
            qp.set_shape(None);
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
            icrc_fast: (FastIcrcKey::EMPTY, 0),
            icrc_prefix_general: None,
            counters: RnicCounters::default(),
            fast_writes: 0,
            write_mr: WriteMr::EMPTY,
            shape: None,
            shape_misses: 0,
        });
        qpn
    }

    /// Destroys a QP (its counters are folded into the device totals).
    pub fn destroy_qp(&mut self, qpn: Qpn) {
        if let Some(i) = self.qp_index(qpn) {
            if let Some(qp) = self.qps[i].take() {
                self.counters.merge(&qp.counters());
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
            .map(|q| q.counters())
    }

    /// QPNs of all live QPs.
    pub fn qpns(&self) -> Vec<Qpn> {
        self.qps.iter().flatten().map(|q| q.qpn).collect()
    }

    /// Device-wide counters: packets that never reached a QP plus every QP's counters.
    pub fn counters(&self) -> RnicCounters {
        let mut c = self.counters;
        for q in self.qps.iter().flatten() {
            c.merge(&q.counters());
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
    #[inline]
    pub fn handle(&mut self, d: &Datagram<'_>, tx: &mut TxBatch) {
        if !self.write_fast(d, tx) {
            self.handle_general(d, tx);
        }
    }

    /// Everything [`Responder::write_fast`] does not take (inlined: out of line, it cost the
    /// atomics more than it saved the WRITEs).
    #[inline]
    fn handle_general(&mut self, d: &Datagram<'_>, tx: &mut TxBatch) {
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
            match verify_icrc_cached(&mut qp.icrc_prefix_general, d) {
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

#[cfg(test)]
mod tests;
