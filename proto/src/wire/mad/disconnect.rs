//! Tearing a connection down: DisconnectRequest (DREQ) and DisconnectReply (DREP). Owns their
//! body layouts' parse and emit; the byte offsets are the parent's (`field`).

use super::field;
use super::CmRtu;
use super::{
    check_data, clear_data, get_array, get_be, put_be, Result, DREP_PRIVATE_DATA_LEN,
    DREQ_PRIVATE_DATA_LEN, MAD_DATA_LEN,
};

/// DisconnectRequest.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CmDreq {
    /// The sender's communication ID.
    pub local_comm_id: u32,
    /// The peer's communication ID.
    pub remote_comm_id: u32,
    /// The peer's QPN (or EECN) (24 bits).
    pub remote_qpn_eecn: u32,
    /// Private data.
    pub private_data: [u8; DREQ_PRIVATE_DATA_LEN],
}

impl Default for CmDreq {
    fn default() -> CmDreq {
        CmDreq {
            local_comm_id: 0,
            remote_comm_id: 0,
            remote_qpn_eecn: 0,
            private_data: [0; DREQ_PRIVATE_DATA_LEN],
        }
    }
}

impl CmDreq {
    /// The DREP answering this DREQ (the communication IDs swapped).
    pub fn answer(&self) -> CmDrep {
        CmDrep {
            local_comm_id: self.remote_comm_id,
            remote_comm_id: self.local_comm_id,
            ..CmDrep::default()
        }
    }

    /// Parses a DREQ from the MAD data.
    pub fn parse(data: &[u8]) -> Result<CmDreq> {
        use field::dreq as f;
        check_data(data)?;
        Ok(CmDreq {
            local_comm_id: get_be(data, f::LOCAL_COMM_ID) as u32,
            remote_comm_id: get_be(data, f::REMOTE_COMM_ID) as u32,
            remote_qpn_eecn: get_be(data, f::REMOTE_QPN_EECN) as u32,
            private_data: get_array(data, f::PRIVATE_DATA),
        })
    }

    /// Bytes the message occupies (the whole MAD data).
    #[inline]
    pub const fn buffer_len(&self) -> usize {
        MAD_DATA_LEN
    }

    /// Writes the DREQ into the MAD data.
    pub fn emit(&self, data: &mut [u8]) {
        use field::dreq as f;
        let d = clear_data(data);
        put_be(d, f::LOCAL_COMM_ID, self.local_comm_id as u64);
        put_be(d, f::REMOTE_COMM_ID, self.remote_comm_id as u64);
        put_be(d, f::REMOTE_QPN_EECN, self.remote_qpn_eecn as u64);
        d[f::PRIVATE_DATA].copy_from_slice(&self.private_data);
    }
}

/// DisconnectReply.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CmDrep {
    /// The sender's communication ID.
    pub local_comm_id: u32,
    /// The peer's communication ID.
    pub remote_comm_id: u32,
    /// Private data.
    pub private_data: [u8; DREP_PRIVATE_DATA_LEN],
}

impl Default for CmDrep {
    fn default() -> CmDrep {
        CmDrep {
            local_comm_id: 0,
            remote_comm_id: 0,
            private_data: [0; DREP_PRIVATE_DATA_LEN],
        }
    }
}

impl CmDrep {
    /// Parses a DREP from the MAD data.
    pub fn parse(data: &[u8]) -> Result<CmDrep> {
        // One layout, one codec: a DREP is laid out as an RTU.
        let CmRtu {
            local_comm_id,
            remote_comm_id,
            private_data,
        } = CmRtu::parse(data)?;
        Ok(CmDrep {
            local_comm_id,
            remote_comm_id,
            private_data,
        })
    }

    /// Bytes the message occupies (the whole MAD data).
    #[inline]
    pub const fn buffer_len(&self) -> usize {
        MAD_DATA_LEN
    }

    /// Writes the DREP into the MAD data (same layout as an RTU).
    pub fn emit(&self, data: &mut [u8]) {
        CmRtu {
            local_comm_id: self.local_comm_id,
            remote_comm_id: self.remote_comm_id,
            private_data: self.private_data,
        }
        .emit(data)
    }
}
