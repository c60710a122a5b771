//! [`RdmaTemplate`]: the translator's per-frame hot path for RDMA WRITE Only (with or without
//! Immediate), FETCH_ADD and COMPARE_SWAP, with the ICRC computed by linearity. Owns no
//! offsets: they are [`super`]'s `field`; the frames it emits equal [`FrameTemplate`]'s
//! (checked by the tests).

use super::field::{self, HEADERS_WITH_BTH};
use super::{pad_len, FrameTemplate, RoceEndpoint};
use crate::crc::fold::{Clmul, WindowKeys};
use crate::crc::{IEEE, IEEE_POLY};
use crate::icrc;
use crate::wire::ib::{
    opcode, AtomicEth, AtomicEthRepr, Psn, Qpn, Reth, RethRepr, Rkey, ATOMIC_ETH_LEN, ICRC_LEN,
    IMMDT_LEN, RETH_LEN,
};

/// The head an [`RdmaTemplate`] copies, whatever its own: the headers through the BTH and the
/// longest extension headers (an AtomicETH), rounded up to whole 16-byte moves. Buffers it
/// emits into are at least this long.
pub const RDMA_HEAD_MAX: usize = (HEADERS_WITH_BTH + ATOMIC_ETH_LEN).next_multiple_of(16);

/// Largest payload [`RdmaTemplate::emit_write_padded`] takes: a Key-Write slot or a Postcarding
/// chunk, copied as one fixed-size block.
pub const PADDED_PAYLOAD: usize = 64;

/// Room [`RdmaTemplate::emit_write_padded`] needs in a buffer: it stores whole fixed-size blocks
/// (the head, then the padded payload) and copies the frame in 32-byte moves.
pub const RDMA_PADDED_ROOM: usize =
    (HEADERS_WITH_BTH + RETH_LEN + IMMDT_LEN + PADDED_PAYLOAD).next_multiple_of(32);

/// Which request an [`RdmaTemplate`] builds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum RdmaKind {
    /// RDMA WRITE Only: RETH, payload.
    Write,
    /// RDMA WRITE Only with Immediate: RETH, ImmDt, payload.
    WriteImm,
    /// FETCH_ADD or COMPARE_SWAP: AtomicETH.
    Atomic,
}

/// The region an [`RdmaTemplate`]'s requests address.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RdmaRegion {
    /// Its first address.
    pub va: u64,
    /// Its length in bytes.
    pub len: u64,
    /// Its R_Key.
    pub rkey: Rkey,
}

/// The translator's per-frame hot path: a frame template for the RDMA requests of one queue
/// pair into one region (RDMA WRITE Only, with or without Immediate, of one payload length;
/// FETCH_ADD; COMPARE_SWAP), with the R_Key and DMA length already in place and the ICRC
/// computed by linearity.
///
/// A frame differs from its template in the BTH word holding AckReq and the PSN, the virtual
/// address, and its tail (the immediate and payload, or the atomic operands). The ICRC register
/// is the template's register with those zero ([`RdmaTemplate`] keeps it), XOR the share of the
/// PSN word and address (four carry-less multiplies, [`WindowKeys`], where the CPU has them;
/// else up to twelve table loads, [`icrc::WindowTables`]), XOR the register of the tail from
/// zero ([`RdmaTemplate::tail_reg`]), which the caller computes once for all the frames that
/// carry the same tail (a Key-Write's N replicas, a Key-Increment's N counters). So a frame
/// costs one copy of its head, a few stores and that share, whatever its headers, and the CRC
/// of its tail once per report. [`FrameTemplate`] computes the same bytes
/// the direct way (checked by the tests).
#[derive(Clone, Debug)]
pub struct RdmaTemplate {
    head: [u8; RDMA_HEAD_MAX],
    head_len: usize,
    payload_len: usize,
    frame_len: usize,
    kind: RdmaKind,
    /// The ICRC register of the frame with its PSN word and tail zero and the region's base
    /// address.
    base: u32,
    window: &'static icrc::WindowTables,
    /// The same share by carry-less multiplication, where the CPU has it.
    window_keys: WindowKeys,
    clmul: Clmul,
    /// The region's base address (the address in [`RdmaTemplate::base`]'s frame).
    va_base: u64,
    /// Every address in the region differs from the base in its low four bytes only.
    narrow: bool,
    /// The payload and its pad fit half a [`PADDED_PAYLOAD`] block.
    half_block: bool,
}

impl RdmaTemplate {
    /// A template for `opcode` (RC RDMA WRITE Only, WRITE Only with Immediate, FETCH_ADD or
    /// COMPARE_SWAP) towards `dest_qp`, into the region of `rkey`, with `payload_len`-byte
    /// payloads (0 for atomics). `None` for another opcode, a payload on an atomic, or a frame
    /// longer than the linear ICRC serves ([`icrc::MAX_WINDOW_DISTANCE`]): use
    /// [`FrameTemplate`] then.
    pub fn new(
        ep: &RoceEndpoint,
        opcode: u8,
        dest_qp: Qpn,
        region: RdmaRegion,
        payload_len: usize,
    ) -> Option<RdmaTemplate> {
        let RdmaRegion {
            va: va_base,
            len: region_len,
            rkey,
        } = region;
        let kind = match opcode {
            opcode::RC_RDMA_WRITE_ONLY => RdmaKind::Write,
            opcode::RC_RDMA_WRITE_ONLY_IMM => RdmaKind::WriteImm,
            opcode::RC_FETCH_ADD | opcode::RC_COMPARE_SWAP if payload_len == 0 => RdmaKind::Atomic,
            _ => return None,
        };
        let t = FrameTemplate::new(ep, opcode, dest_qp, payload_len);
        let frame_len = t.frame_len();
        let head_len = HEADERS_WITH_BTH + t.ext_len();
        let crc_end = frame_len - ICRC_LEN;
        let distance = crc_end - (field::PSN_WORD.start + icrc::WINDOW_LEN);
        let window = icrc::WindowTables::get(distance)?;
        let window_keys = WindowKeys::new(IEEE_POLY, distance as u32);
        // The frame with every per-frame field zero: its head is what every frame copies, and
        // its ICRC register is the base the shares are added to.
        let mut zero = vec![0u8; frame_len];
        let ext = &mut zero[HEADERS_WITH_BTH..head_len];
        match kind {
            RdmaKind::Write | RdmaKind::WriteImm => RethRepr {
                va: va_base,
                rkey,
                dma_len: payload_len as u32,
            }
            .emit(&mut Reth::new_unchecked(&mut ext[..RETH_LEN])),
            RdmaKind::Atomic => AtomicEthRepr {
                va: va_base,
                rkey,
                swap_add: 0,
                compare: 0,
            }
            .emit(&mut AtomicEth::new_unchecked(ext)),
        }
        zero[..HEADERS_WITH_BTH].copy_from_slice(&t.headers);
        let base = IEEE.update(t.prefix_state, &zero[field::PSN_WORD.start..crc_end]);
        let mut head = [0u8; RDMA_HEAD_MAX];
        head[..head_len].copy_from_slice(&zero[..head_len]);
        // The addresses of the region share all but their low four bytes with the base when
        // its first and last byte do.
        let last = va_base.saturating_add(region_len.saturating_sub(1));
        Some(RdmaTemplate {
            head,
            head_len,
            payload_len,
            frame_len,
            kind,
            base,
            window,
            window_keys,
            clmul: Clmul::detect(),
            va_base,
            narrow: (va_base ^ last) >> 32 == 0,
            half_block: payload_len + pad_len(payload_len) <= PADDED_PAYLOAD / 2,
        })
    }

    /// The template with the window's share taken from the tables unless `m` is the CPU's
    /// multiply (tests: both ways give the same frames).
    #[cfg(test)]
    pub(crate) fn with_clmul(mut self, m: Clmul) -> RdmaTemplate {
        self.clmul = m;
        self
    }

    /// Length of every frame this template emits.
    #[inline]
    pub fn frame_len(&self) -> usize {
        self.frame_len
    }

    /// Payload length (without pad).
    #[inline]
    pub fn payload_len(&self) -> usize {
        self.payload_len
    }

    /// The register share of a WRITE's tail: the immediate (WRITE with Immediate only), the
    /// payload and the pad. Compute it once for frames that carry the same tail.
    ///
    /// Panics if `payload` is not `payload_len()` bytes, or `imm` is given to a plain WRITE
    /// template or missing from a WRITE with Immediate one (programming errors).
    #[inline]
    pub fn tail_reg(&self, imm: Option<u32>, payload: &[u8]) -> u32 {
        assert!(
            payload.len() == self.payload_len
                && imm.is_some() == (self.kind == RdmaKind::WriteImm)
                && self.kind != RdmaKind::Atomic
        );
        // Payloads of whole 16-byte blocks, or whole blocks behind 8 bytes (an Append batch
        // and its trailer), without Immediate: every byte folded, no tables.
        if imm.is_none() && payload.len() % 16 == 0 && !payload.is_empty() {
            return IEEE.reg_of_word_and_blocks(None, payload);
        }
        if let (None, Some((head, blocks))) = (imm, payload.split_first_chunk::<8>()) {
            if blocks.len() % 16 == 0 && !blocks.is_empty() {
                return IEEE.reg_of_head8_and_blocks(*head, blocks);
            }
        }
        let mut reg = match imm {
            Some(v) => IEEE.update(0, &v.to_be_bytes()),
            None => 0,
        };
        reg = IEEE.update(reg, payload);
        for _ in 0..pad_len(payload.len()) {
            reg = IEEE.update_byte(reg, 0);
        }
        reg
    }

    /// The register share of an atomic's operands (swap or add, compare).
    #[inline]
    pub fn atomic_tail_reg(&self, swap_add: u64, compare: u64) -> u32 {
        assert!(self.kind == RdmaKind::Atomic);
        let ops = ((swap_add as u128) << 64 | compare as u128).to_be_bytes();
        IEEE.update(0, &ops)
    }

    /// The frame's ICRC from its PSN word, address and tail share. An address outside the
    /// region the template was made for costs the four lookups the narrow case leaves out.
    #[inline(always)]
    fn icrc(&self, word: [u8; 4], va: u64, tail_reg: u32) -> [u8; ICRC_LEN] {
        let dva = va ^ self.va_base;
        let share = if self.clmul.is_native() {
            // The window as the last twelve bytes of a block, loaded little-endian.
            let x = u128::from(u32::from_le_bytes(word)) << 32 | u128::from(dva.swap_bytes()) << 64;
            self.clmul.shifted_block_reg(&self.window_keys, x)
        } else {
            let narrow = self.narrow && dva >> 32 == 0;
            self.window
                .share_word_va(u32::from_be_bytes(word), dva, narrow)
        };
        (!(self.base ^ share ^ tail_reg)).to_le_bytes()
    }

    /// Writes the head, PSN word and address into `b`.
    #[inline(always)]
    fn put_head(&self, b: &mut [u8], word: [u8; 4], va: u64) {
        b[..RDMA_HEAD_MAX].copy_from_slice(&self.head);
        b[field::PSN_WORD].copy_from_slice(&word);
        b[field::EXT_VA].copy_from_slice(&va.to_be_bytes());
    }

    /// Emits a WRITE of `payload` to address `va` into `out`, and the same bytes into `copy`
    /// when given (the requester's retransmission copy). `tail_reg` is
    /// [`RdmaTemplate::tail_reg`]`(imm, payload)`. Returns the frame's length.
    ///
    /// Panics if `out` (or `copy`) is shorter than the longest head ([`RdmaTemplate`] copies
    /// its head whole) or than [`frame_len`](Self::frame_len), or on a payload of the wrong
    /// length.
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    pub fn emit_write(
        &self,
        out: &mut [u8],
        copy: Option<&mut [u8]>,
        psn: Psn,
        ack_req: bool,
        va: u64,
        imm: Option<u32>,
        payload: &[u8],
        tail_reg: u32,
    ) -> usize {
        assert!(payload.len() == self.payload_len && self.kind != RdmaKind::Atomic);
        let len = self.frame_len;
        let word = ((ack_req as u32) << 31 | psn.value()).to_be_bytes();
        let crc = self.icrc(word, va, tail_reg);
        let body = self.head_len;
        let end = body + payload.len();
        let b = &mut out[..len.max(RDMA_HEAD_MAX)];
        self.put_head(b, word, va);
        if let Some(v) = imm {
            b[body - IMMDT_LEN..body].copy_from_slice(&v.to_be_bytes());
        }
        b[body..end].copy_from_slice(payload);
        // Pad and ICRC together are at least 4 bytes: one fixed-size store clears the pad
        // (the ICRC overwrites the rest).
        b[end..end + 4].copy_from_slice(&[0; 4]);
        b[len - ICRC_LEN..len].copy_from_slice(&crc);
        if let Some(c) = copy {
            // The retransmission copy: one move of the finished frame. (Building it again
            // from the sources, as [`RdmaTemplate::emit_write_padded`] does, cost an Append
            // batch 7 instructions a report and 2-3 % of its wall clock.)
            c[..len].copy_from_slice(&out[..len]);
        }
        len
    }

    /// [`RdmaTemplate::emit_write`] of a payload of at most [`PADDED_PAYLOAD`] bytes held at
    /// the start of a zero-filled block (`payload[payload_len()..]` must be zero: they become
    /// the pad), with fixed-size moves only: the head, the block and, into `copy`, the frame.
    /// `tail_reg` is [`RdmaTemplate::padded_tail_reg`]. Both buffers need
    /// [`RDMA_PADDED_ROOM`] bytes; what lies past the frame in them is unspecified.
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    pub fn emit_write_padded(
        &self,
        out: &mut [u8],
        copy: Option<&mut [u8]>,
        psn: Psn,
        ack_req: bool,
        va: u64,
        imm: Option<u32>,
        payload: &[u8; PADDED_PAYLOAD],
        tail_reg: u32,
    ) -> usize {
        // Checked in every build by `padded_tail_reg`, once for all of a payload's frames.
        debug_assert!(self.payload_len <= PADDED_PAYLOAD && self.kind != RdmaKind::Atomic);
        debug_assert!(payload[self.payload_len..].iter().all(|&b| b == 0));
        let word = ((ack_req as u32) << 31 | psn.value()).to_be_bytes();
        let crc = self.icrc(word, va, tail_reg);
        self.put_padded(out, word, va, imm, payload, crc);
        if let Some(c) = copy {
            // The retransmission copy is built from the same sources, not moved from `out`:
            // a move reads the frame back while its stores are in flight, and the CPU cannot
            // forward a load that spans several of them. Building it again costs about 20
            // more instructions a frame than the move, and a Key-Write run takes 10 % less
            // time (bench/README.md, round 6).
            self.put_padded(c, word, va, imm, payload, crc);
        }
        self.frame_len
    }

    /// Writes a padded WRITE's bytes into `out` ([`RdmaTemplate::emit_write_padded`]).
    #[inline(always)]
    fn put_padded(
        &self,
        out: &mut [u8],
        word: [u8; 4],
        va: u64,
        imm: Option<u32>,
        payload: &[u8; PADDED_PAYLOAD],
        crc: [u8; ICRC_LEN],
    ) {
        let len = self.frame_len;
        let b: &mut [u8; RDMA_PADDED_ROOM] = (&mut out[..RDMA_PADDED_ROOM])
            .try_into()
            .expect("room for a padded frame");
        self.put_head(b, word, va);
        let body = self.head_len;
        if let Some(v) = imm {
            b[body - IMMDT_LEN..body].copy_from_slice(&v.to_be_bytes());
        }
        // A payload of up to 32 bytes (a Key-Write slot) moves as half the block: the whole
        // block would reach into the frame's third cache line, which the frame does not
        // touch, and writing it costs that line's ownership, in the batch and in the ring.
        if self.half_block {
            let half: &mut [u8; PADDED_PAYLOAD / 2] = (&mut b[body..body + PADDED_PAYLOAD / 2])
                .try_into()
                .expect("within the room");
            *half = *payload.first_chunk().expect("half the block");
        } else {
            let block: &mut [u8; PADDED_PAYLOAD] = (&mut b[body..body + PADDED_PAYLOAD])
                .try_into()
                .expect("within the room");
            *block = *payload;
        }
        b[len - ICRC_LEN..len].copy_from_slice(&crc);
    }

    /// [`RdmaTemplate::tail_reg`] of a payload held at the start of a zero-filled block
    /// ([`RdmaTemplate::emit_write_padded`]): its pad comes from the block.
    #[inline(always)]
    pub fn padded_tail_reg(&self, imm: Option<u32>, payload: &[u8; PADDED_PAYLOAD]) -> u32 {
        assert!(
            self.payload_len <= PADDED_PAYLOAD
                && imm.is_some() == (self.kind == RdmaKind::WriteImm)
                && self.kind != RdmaKind::Atomic
        );
        // Whole 16-byte blocks (a 32-byte Key-Write slot) are folded, the immediate with them:
        // inline in the keyed runs' x86-64-v3 copy.
        let head = imm.map(u32::to_be_bytes);
        let data = &payload[..self.payload_len + pad_len(self.payload_len)];
        match self.clmul.word_and_few_blocks(IEEE.keys(), head, data) {
            Some(reg) => reg,
            None => IEEE.reg_of_word_and_blocks(head, data),
        }
    }

    /// Emits an atomic (FETCH_ADD or COMPARE_SWAP, as the template) at address `va` into
    /// `out`, and into `copy` when given. `tail_reg` is
    /// [`RdmaTemplate::atomic_tail_reg`]`(swap_add, compare)`. Returns the frame's length.
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    pub fn emit_atomic(
        &self,
        out: &mut [u8],
        copy: Option<&mut [u8]>,
        psn: Psn,
        ack_req: bool,
        va: u64,
        swap_add: u64,
        compare: u64,
        tail_reg: u32,
    ) -> usize {
        // Checked in every build by `atomic_tail_reg`, once for all of an operand's frames.
        debug_assert!(self.kind == RdmaKind::Atomic);
        let len = self.frame_len;
        let word = ((ack_req as u32) << 31 | psn.value()).to_be_bytes();
        let crc = self.icrc(word, va, tail_reg);
        let ops = ((swap_add as u128) << 64 | compare as u128).to_be_bytes();
        let at = self.head_len - 16;
        let put = |b: &mut [u8]| {
            let b = &mut b[..len.max(RDMA_HEAD_MAX)];
            self.put_head(b, word, va);
            b[at..at + 16].copy_from_slice(&ops);
            b[len - ICRC_LEN..len].copy_from_slice(&crc);
        };
        put(out);
        if let Some(c) = copy {
            put(c);
        }
        len
    }
}
