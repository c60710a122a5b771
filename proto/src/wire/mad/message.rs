//! [`CmMessage`]: one CM message of any kind, chosen by the MAD attribute ID, with the whole
//! MAD's parse and emit. The message bodies are the sibling modules'.

use super::{
    CmDrep, CmDreq, CmMra, CmRej, CmRep, CmReq, CmRtu, MadHeader, MadHeaderRepr, ATTR_DREP,
    ATTR_DREQ, ATTR_MRA, ATTR_REJ, ATTR_REP, ATTR_REQ, ATTR_RTU, CM_CLASS_VERSION, MAD_LEN,
    METHOD_SEND, MGMT_CLASS_CM,
};
use crate::wire::{Error, Result};

/// One CM message, selected by the MAD attribute ID.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CmMessage {
    /// ConnectRequest.
    Req(CmReq),
    /// ConnectReply.
    Rep(CmRep),
    /// ReadyToUse.
    Rtu(CmRtu),
    /// ConnectReject.
    Rej(CmRej),
    /// DisconnectRequest.
    Dreq(CmDreq),
    /// DisconnectReply.
    Drep(CmDrep),
    /// MessageReceiptAcknowledgement.
    Mra(CmMra),
}

impl CmMessage {
    /// The MAD attribute ID of this message.
    #[inline]
    pub const fn attr_id(&self) -> u16 {
        match self {
            CmMessage::Req(_) => ATTR_REQ,
            CmMessage::Rep(_) => ATTR_REP,
            CmMessage::Rtu(_) => ATTR_RTU,
            CmMessage::Rej(_) => ATTR_REJ,
            CmMessage::Dreq(_) => ATTR_DREQ,
            CmMessage::Drep(_) => ATTR_DREP,
            CmMessage::Mra(_) => ATTR_MRA,
        }
    }

    /// The sender's communication ID, which every CM message starts with.
    #[inline]
    pub const fn local_comm_id(&self) -> u32 {
        match self {
            CmMessage::Req(m) => m.local_comm_id,
            CmMessage::Rep(m) => m.local_comm_id,
            CmMessage::Rtu(m) => m.local_comm_id,
            CmMessage::Rej(m) => m.local_comm_id,
            CmMessage::Dreq(m) => m.local_comm_id,
            CmMessage::Drep(m) => m.local_comm_id,
            CmMessage::Mra(m) => m.local_comm_id,
        }
    }

    /// Parses a whole CM MAD (at least [`MAD_LEN`] bytes; anything after them is ignored).
    ///
    /// Errors: shorter than a MAD → [`Error::Truncated`]; base version ≠ 1 or class version ≠ 2
    /// → [`Error::UnsupportedVersion`]; a class other than CM → [`Error::Malformed`]; a method
    /// other than `Send`, or an attribute this module does not model (SIDR, LAP, APR,
    /// ClassPortInfo, …) → [`Error::UnknownOpcode`].
    pub fn parse(mad: &[u8]) -> Result<(MadHeaderRepr, CmMessage)> {
        if mad.len() < MAD_LEN {
            return Err(Error::Truncated);
        }
        let view = MadHeader::new_checked(&mad[..MAD_LEN])?;
        let hdr = MadHeaderRepr::parse(&view)?;
        if hdr.mgmt_class != MGMT_CLASS_CM {
            return Err(Error::Malformed);
        }
        if hdr.class_version != CM_CLASS_VERSION {
            return Err(Error::UnsupportedVersion);
        }
        if hdr.method != METHOD_SEND {
            return Err(Error::UnknownOpcode);
        }
        let data = view.data();
        let msg = match hdr.attr_id {
            ATTR_REQ => CmMessage::Req(CmReq::parse(data)?),
            ATTR_REP => CmMessage::Rep(CmRep::parse(data)?),
            ATTR_RTU => CmMessage::Rtu(CmRtu::parse(data)?),
            ATTR_REJ => CmMessage::Rej(CmRej::parse(data)?),
            ATTR_DREQ => CmMessage::Dreq(CmDreq::parse(data)?),
            ATTR_DREP => CmMessage::Drep(CmDrep::parse(data)?),
            ATTR_MRA => CmMessage::Mra(CmMra::parse(data)?),
            _ => return Err(Error::UnknownOpcode),
        };
        Ok((hdr, msg))
    }

    /// Bytes the message occupies (a whole MAD).
    #[inline]
    pub const fn buffer_len(&self) -> usize {
        MAD_LEN
    }

    /// Writes `hdr` (with its attribute ID replaced by this message's) and the message body.
    pub fn emit(&self, hdr: &MadHeaderRepr, out: &mut [u8; MAD_LEN]) {
        let hdr = MadHeaderRepr {
            attr_id: self.attr_id(),
            ..*hdr
        };
        let mut view = MadHeader::new_unchecked(&mut out[..]);
        hdr.emit(&mut view);
        let data = view.data_mut();
        match self {
            CmMessage::Req(m) => m.emit(data),
            CmMessage::Rep(m) => m.emit(data),
            CmMessage::Rtu(m) => m.emit(data),
            CmMessage::Rej(m) => m.emit(data),
            CmMessage::Dreq(m) => m.emit(data),
            CmMessage::Drep(m) => m.emit(data),
            CmMessage::Mra(m) => m.emit(data),
        }
    }
}
