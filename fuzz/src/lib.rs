//! Shared pieces of the fuzz targets: a byte reader that turns the fuzzer's input into
//! structured choices, and the RoCEv2 frame builder the stateful targets use.
//!
//! Targets live in `fuzz_targets/`; each documents the invariants it checks. Everything here
//! is deterministic: the same input replays the same run (`cargo +nightly fuzz run T crash-file`).

use dta_proto::wire::ethernet::MacAddr;
use dta_proto::wire::ib::{opcode as op, BthRepr, Psn, Qpn};
use dta_proto::wire::roce::{build_frame, frame_len, RoceEndpoint};
use std::net::Ipv4Addr;

/// Reads structured values from fuzz input; returns zeros once the input is exhausted.
pub struct Reader<'a> {
    data: &'a [u8],
}

impl<'a> Reader<'a> {
    /// A reader over `data`.
    pub fn new(data: &'a [u8]) -> Reader<'a> {
        Reader { data }
    }

    /// True when every byte was consumed.
    pub fn is_empty(&self) -> bool {
        self.data.is_empty()
    }

    /// The next `n` bytes (fewer at the end of the input).
    pub fn bytes(&mut self, n: usize) -> &'a [u8] {
        let n = n.min(self.data.len());
        let (a, b) = self.data.split_at(n);
        self.data = b;
        a
    }

    /// One byte.
    pub fn u8(&mut self) -> u8 {
        self.bytes(1).first().copied().unwrap_or(0)
    }

    /// A big-endian u16.
    pub fn u16(&mut self) -> u16 {
        u16::from_be_bytes([self.u8(), self.u8()])
    }

    /// A big-endian u32.
    pub fn u32(&mut self) -> u32 {
        ((self.u16() as u32) << 16) | self.u16() as u32
    }

    /// A big-endian u64.
    pub fn u64(&mut self) -> u64 {
        ((self.u32() as u64) << 32) | self.u32() as u64
    }

    /// A boolean.
    pub fn bool(&mut self) -> bool {
        self.u8() & 1 == 1
    }

    /// A length-prefixed (one byte) chunk.
    pub fn chunk(&mut self) -> &'a [u8] {
        let n = self.u8() as usize;
        self.bytes(n)
    }
}

/// Opcodes a translator (or an attacker) can send to an RC responder, plus responses and UD
/// opcodes the responder must reject.
pub const OPCODES: [u8; 22] = [
    op::RC_SEND_FIRST,
    op::RC_SEND_MIDDLE,
    op::RC_SEND_LAST,
    op::RC_SEND_LAST_IMM,
    op::RC_SEND_ONLY,
    op::RC_SEND_ONLY_IMM,
    op::RC_RDMA_WRITE_FIRST,
    op::RC_RDMA_WRITE_MIDDLE,
    op::RC_RDMA_WRITE_LAST,
    op::RC_RDMA_WRITE_LAST_IMM,
    op::RC_RDMA_WRITE_ONLY,
    op::RC_RDMA_WRITE_ONLY_IMM,
    op::RC_RDMA_READ_REQUEST,
    op::RC_RDMA_READ_RESPONSE_FIRST,
    op::RC_RDMA_READ_RESPONSE_ONLY,
    op::RC_ACKNOWLEDGE,
    op::RC_ATOMIC_ACKNOWLEDGE,
    op::RC_COMPARE_SWAP,
    op::RC_FETCH_ADD,
    op::UD_SEND_ONLY,
    op::RC_RDMA_WRITE_ONLY,
    op::RC_RDMA_WRITE_FIRST,
];

/// Fields of one RoCEv2 request, chosen by the fuzzer.
#[derive(Debug, Clone)]
pub struct FrameSpec {
    /// Source IPv4 address.
    pub src_ip: Ipv4Addr,
    /// Destination IPv4 address.
    pub dst_ip: Ipv4Addr,
    /// BTH opcode.
    pub opcode: u8,
    /// Destination QP.
    pub dest_qp: Qpn,
    /// PSN.
    pub psn: Psn,
    /// AckReq bit.
    pub ack_req: bool,
    /// P_Key.
    pub pkey: u16,
    /// VA of the RETH / AtomicETH.
    pub va: u64,
    /// R_Key of the RETH / AtomicETH.
    pub rkey: u32,
    /// DMA length of the RETH.
    pub dma_len: u32,
    /// Atomic operands / immediate data.
    pub operand: u64,
    /// Payload length.
    pub payload_len: usize,
    /// Payload fill byte.
    pub fill: u8,
}

/// Extension headers `opcode` carries, in wire order, built from `s`.
fn ext_for(s: &FrameSpec, out: &mut Vec<u8>) {
    let reth = |out: &mut Vec<u8>| {
        out.extend_from_slice(&s.va.to_be_bytes());
        out.extend_from_slice(&s.rkey.to_be_bytes());
        out.extend_from_slice(&s.dma_len.to_be_bytes());
    };
    let imm = |out: &mut Vec<u8>| out.extend_from_slice(&(s.operand as u32).to_be_bytes());
    match s.opcode {
        op::RC_RDMA_WRITE_FIRST | op::RC_RDMA_WRITE_ONLY | op::RC_RDMA_READ_REQUEST => reth(out),
        op::RC_RDMA_WRITE_ONLY_IMM => {
            reth(out);
            imm(out);
        }
        op::RC_SEND_LAST_IMM | op::RC_SEND_ONLY_IMM | op::RC_RDMA_WRITE_LAST_IMM => imm(out),
        op::RC_COMPARE_SWAP | op::RC_FETCH_ADD => {
            out.extend_from_slice(&s.va.to_be_bytes());
            out.extend_from_slice(&s.rkey.to_be_bytes());
            out.extend_from_slice(&s.operand.to_be_bytes());
            out.extend_from_slice(&(!s.operand).to_be_bytes());
        }
        op::RC_ACKNOWLEDGE | op::RC_RDMA_READ_RESPONSE_ONLY | op::RC_RDMA_READ_RESPONSE_FIRST => {
            out.extend_from_slice(&(s.operand as u32).to_be_bytes())
        }
        op::RC_ATOMIC_ACKNOWLEDGE => {
            out.extend_from_slice(&(s.operand as u32).to_be_bytes());
            out.extend_from_slice(&s.operand.to_be_bytes());
        }
        op::UD_SEND_ONLY => out.extend_from_slice(&s.operand.to_be_bytes()),
        _ => {}
    }
}

/// Builds the complete Ethernet frame `s` describes (valid ICRC) into `out`.
pub fn build(s: &FrameSpec, out: &mut Vec<u8>) {
    let ep = RoceEndpoint {
        src_mac: MacAddr([2, 0, 0, 0, 0, 1]),
        dst_mac: MacAddr([2, 0, 0, 0, 0, 0x51]),
        src_ip: s.src_ip,
        dst_ip: s.dst_ip,
        src_port: 4791,
        dst_port: 4791,
        ttl: 64,
        tos: 0,
        ident: 0,
    };
    let bth = BthRepr {
        opcode: s.opcode,
        solicited: false,
        mig_req: true,
        pad_count: 0,
        tver: 0,
        pkey: s.pkey,
        fecn: false,
        becn: false,
        dest_qp: s.dest_qp,
        ack_req: s.ack_req,
        psn: s.psn,
    };
    let mut ext = Vec::with_capacity(32);
    ext_for(s, &mut ext);
    let payload = vec![s.fill; s.payload_len];
    out.clear();
    out.resize(frame_len(ext.len(), payload.len()), 0);
    let n = build_frame(&ep, &bth, &ext, &payload, out);
    out.truncate(n);
}
