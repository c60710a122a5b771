//! The Base Transport Header: view ([`Bth`]) and representation ([`BthRepr`]).

use super::{rd_u16, rd_u24, wr_u24, Psn, Qpn, BTH_LEN};
use crate::wire::Result;

mod field {
    use core::ops::Range;
    pub const OPCODE: usize = 0;
    /// SE, MigReq, PadCnt (2 bits) and TVer (4 bits).
    pub const FLAGS: usize = 1;
    pub const PKEY: Range<usize> = 2..4;
    /// FECN, BECN and six reserved bits.
    pub const FECN_BECN: usize = 4;
    pub const DEST_QP: Range<usize> = 5..8;
    /// AckReq in the top bit, seven reserved bits.
    pub const ACK_REQ: usize = 8;
    pub const PSN: Range<usize> = 9..12;
    /// AckReq, the reserved bits and the PSN, written as one word.
    pub const ACK_REQ_PSN: Range<usize> = ACK_REQ..PSN.end;
}

crate::wire::view::fixed_view!(
    /// A view of a Base Transport Header.
    Bth,
    BTH_LEN
);

impl<T: AsRef<[u8]>> Bth<T> {
    /// Opcode.
    #[inline]
    pub fn opcode(&self) -> u8 {
        self.buffer.as_ref()[field::OPCODE]
    }

    /// Solicited Event bit.
    #[inline]
    pub fn solicited(&self) -> bool {
        self.buffer.as_ref()[field::FLAGS] & 0x80 != 0
    }

    /// MigReq bit.
    #[inline]
    pub fn mig_req(&self) -> bool {
        self.buffer.as_ref()[field::FLAGS] & 0x40 != 0
    }

    /// Number of pad bytes (0..=3) between the payload and the ICRC.
    #[inline]
    pub fn pad_count(&self) -> u8 {
        (self.buffer.as_ref()[field::FLAGS] >> 4) & 0x03
    }

    /// Transport header version (0).
    #[inline]
    pub fn tver(&self) -> u8 {
        self.buffer.as_ref()[field::FLAGS] & 0x0F
    }

    /// Partition key.
    #[inline]
    pub fn pkey(&self) -> u16 {
        rd_u16(self.buffer.as_ref(), field::PKEY.start)
    }

    /// Forward ECN bit.
    #[inline]
    pub fn fecn(&self) -> bool {
        self.buffer.as_ref()[field::FECN_BECN] & 0x80 != 0
    }

    /// Backward ECN bit.
    #[inline]
    pub fn becn(&self) -> bool {
        self.buffer.as_ref()[field::FECN_BECN] & 0x40 != 0
    }

    /// Destination QP.
    #[inline]
    pub fn dest_qp(&self) -> Qpn {
        Qpn(rd_u24(self.buffer.as_ref(), field::DEST_QP.start))
    }

    /// AckReq bit.
    #[inline]
    pub fn ack_req(&self) -> bool {
        self.buffer.as_ref()[field::ACK_REQ] & 0x80 != 0
    }

    /// Packet sequence number.
    #[inline]
    pub fn psn(&self) -> Psn {
        Psn(rd_u24(self.buffer.as_ref(), field::PSN.start))
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Bth<T> {
    /// Sets the opcode.
    #[inline]
    pub fn set_opcode(&mut self, v: u8) {
        self.buffer.as_mut()[field::OPCODE] = v;
    }

    /// Sets SE, MigReq, PadCnt and TVer (the latter two masked to 2 and 4 bits).
    #[inline]
    pub fn set_flags(&mut self, solicited: bool, mig_req: bool, pad_count: u8, tver: u8) {
        self.buffer.as_mut()[field::FLAGS] =
            (solicited as u8) << 7 | (mig_req as u8) << 6 | (pad_count & 0x03) << 4 | (tver & 0x0F);
    }

    /// Sets the partition key.
    #[inline]
    pub fn set_pkey(&mut self, v: u16) {
        self.buffer.as_mut()[field::PKEY].copy_from_slice(&v.to_be_bytes());
    }

    /// Sets FECN and BECN; the six reserved bits are cleared.
    #[inline]
    pub fn set_fecn_becn(&mut self, fecn: bool, becn: bool) {
        self.buffer.as_mut()[field::FECN_BECN] = (fecn as u8) << 7 | (becn as u8) << 6;
    }

    /// Sets the destination QP.
    #[inline]
    pub fn set_dest_qp(&mut self, q: Qpn) {
        wr_u24(self.buffer.as_mut(), field::DEST_QP.start, q.0);
    }

    /// Sets AckReq and the PSN in one word; the seven reserved bits are cleared.
    #[inline]
    pub fn set_ack_req_psn(&mut self, ack_req: bool, psn: Psn) {
        let w = (ack_req as u32) << 31 | psn.0;
        self.buffer.as_mut()[field::ACK_REQ_PSN].copy_from_slice(&w.to_be_bytes());
    }
}

/// A parsed Base Transport Header.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct BthRepr {
    /// Opcode (see [`opcode`]).
    pub opcode: u8,
    /// Solicited Event.
    pub solicited: bool,
    /// MigReq.
    pub mig_req: bool,
    /// Pad bytes after the payload (0..=3).
    pub pad_count: u8,
    /// Transport header version (must be 0).
    pub tver: u8,
    /// Partition key.
    pub pkey: u16,
    /// Forward ECN.
    pub fecn: bool,
    /// Backward ECN.
    pub becn: bool,
    /// Destination QP.
    pub dest_qp: Qpn,
    /// AckReq.
    pub ack_req: bool,
    /// Packet sequence number.
    pub psn: Psn,
}

impl BthRepr {
    /// The BTH an RC endpoint sends: default partition key, MigReq set (as rxe and ConnectX
    /// send it), no solicited event, no pad, TVer 0, no ECN marks.
    #[inline]
    pub const fn rc(opcode: u8, dest_qp: Qpn, psn: Psn, ack_req: bool) -> BthRepr {
        BthRepr {
            opcode,
            solicited: false,
            mig_req: true,
            pad_count: 0,
            tver: 0,
            pkey: 0xFFFF,
            fecn: false,
            becn: false,
            dest_qp,
            ack_req,
            psn,
        }
    }

    /// Reads every field; reserved bits are ignored and the opcode and TVer are not judged here.
    #[inline]
    pub fn parse<T: AsRef<[u8]>>(h: &Bth<T>) -> Result<Self> {
        h.check_len()?;
        Ok(BthRepr {
            opcode: h.opcode(),
            solicited: h.solicited(),
            mig_req: h.mig_req(),
            pad_count: h.pad_count(),
            tver: h.tver(),
            pkey: h.pkey(),
            fecn: h.fecn(),
            becn: h.becn(),
            dest_qp: h.dest_qp(),
            ack_req: h.ack_req(),
            psn: h.psn(),
        })
    }

    /// Bytes `emit` writes.
    #[inline]
    pub const fn header_len(&self) -> usize {
        BTH_LEN
    }

    /// Writes the header (reserved bits zero; PadCnt and TVer masked to their widths).
    #[inline]
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, h: &mut Bth<T>) {
        h.set_opcode(self.opcode);
        h.set_flags(self.solicited, self.mig_req, self.pad_count, self.tver);
        h.set_pkey(self.pkey);
        h.set_fecn_becn(self.fecn, self.becn);
        h.set_dest_qp(self.dest_qp);
        h.set_ack_req_psn(self.ack_req, self.psn);
    }
}
