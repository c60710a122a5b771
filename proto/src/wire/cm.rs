//! RDMA_CM messages on the wire of RoCEv2: a CM MAD inside a UD SEND to the GSI QP (QP1).
//!
//! `BTH (UD SEND Only, dest QP 1) | DETH (Q_Key 0x80010000, source QP 1) | MAD (256 B) | ICRC`.
//! [`build_cm_frame`] seals such a packet; [`parse_cm`] opens one. The connection state
//! machines live with their owners (the collector's responder side, the translator's
//! initiator side); this module only frames. It has no offsets of its own: every header is
//! written and read through `ib`'s views (BTH, DETH), `mad`'s (the MAD) and `roce`'s (the
//! frame), so [`CmPacket`] is this layer's Repr, [`parse_cm`] its parse and [`build_cm_frame`]
//! its emit.

use crate::wire::ib::{opcode, Bth, BthRepr, Deth, DethRepr, Psn, Qpn, BTH_LEN, DETH_LEN};
use crate::wire::mad::{CmMessage, MadHeaderRepr, GSI_QKEY, GSI_QPN, MAD_LEN};
use crate::wire::roce::{build_frame, RoceEndpoint, RocePacket};
use crate::wire::{Error, Result};

/// Bytes of a CM packet after the UDP header (BTH + DETH + MAD + ICRC).
pub const CM_TRANSPORT_LEN: usize = BTH_LEN + DETH_LEN + MAD_LEN + 4;

/// Writes a complete Ethernet frame carrying `msg` to the peer's GSI QP. Returns its length.
pub fn build_cm_frame(
    ep: &RoceEndpoint,
    psn: Psn,
    hdr: &MadHeaderRepr,
    msg: &CmMessage,
    out: &mut [u8],
) -> usize {
    let bth = BthRepr {
        opcode: opcode::UD_SEND_ONLY,
        solicited: false,
        mig_req: true,
        pad_count: 0,
        tver: 0,
        pkey: 0xffff,
        fecn: false,
        becn: false,
        dest_qp: Qpn::new(GSI_QPN),
        ack_req: false,
        psn,
    };
    let mut deth = [0u8; DETH_LEN];
    DethRepr {
        qkey: GSI_QKEY,
        src_qp: Qpn::new(GSI_QPN),
    }
    .emit(&mut Deth::new_unchecked(&mut deth[..]));
    let mut mad = [0u8; MAD_LEN];
    msg.emit(hdr, &mut mad);
    build_frame(ep, &bth, &deth, &mad, out)
}

/// A CM message received on the GSI QP.
#[derive(Debug, Clone)]
pub struct CmPacket {
    /// Source QP named in the DETH.
    pub src_qp: Qpn,
    /// The MAD header (transaction ID etc.).
    pub hdr: MadHeaderRepr,
    /// The message.
    pub msg: CmMessage,
}

/// True if a RoCEv2 transport payload (BTH onwards) is addressed to the GSI QP; a cheap peek
/// for demultiplexing before any parsing.
#[inline]
pub fn is_gsi(transport: &[u8]) -> bool {
    Bth::new_checked(transport).is_ok_and(|bth| bth.dest_qp().value() == GSI_QPN)
}

/// Parses a CM message from a RoCEv2 transport payload (BTH .. ICRC). The ICRC is not checked
/// here (the caller decides).
pub fn parse_cm(transport: &[u8]) -> Result<CmPacket> {
    let pkt = RocePacket::parse(transport)?;
    if pkt.bth.opcode != opcode::UD_SEND_ONLY || pkt.bth.dest_qp.value() != GSI_QPN {
        return Err(Error::UnknownOpcode);
    }
    let deth: DethRepr = pkt.deth.ok_or(Error::Malformed)?;
    if deth.qkey != GSI_QKEY {
        return Err(Error::Malformed);
    }
    let (hdr, msg) = CmMessage::parse(pkt.payload)?;
    Ok(CmPacket {
        src_qp: deth.src_qp,
        hdr,
        msg,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::mad::{CmRtu, MadHeaderRepr};
    use crate::wire::roce::{parse_frame, L2L4_LEN};

    #[test]
    fn frame_round_trip() {
        let ep = RoceEndpoint::default();
        let msg = CmMessage::Rtu(CmRtu {
            local_comm_id: 7,
            remote_comm_id: 9,
            ..CmRtu::default()
        });
        let hdr = MadHeaderRepr::cm_send(0x1234, 0);
        let mut out = [0u8; 512];
        let n = build_cm_frame(&ep, Psn::new(5), &hdr, &msg, &mut out);
        assert_eq!(n, L2L4_LEN + CM_TRANSPORT_LEN);
        assert!(crate::icrc::check_frame(&out[..n]));
        let f = parse_frame(&out[..n]).unwrap();
        assert!(is_gsi(f.transport));
        let p = parse_cm(f.transport).unwrap();
        assert_eq!(p.hdr.tid, 0x1234);
        assert!(
            matches!(p.msg, CmMessage::Rtu(r) if r.local_comm_id == 7 && r.remote_comm_id == 9)
        );
        assert!(!is_gsi(&[0; 4]));
        assert!(parse_cm(&out[L2L4_LEN..L2L4_LEN + 30]).is_err());
    }
}
