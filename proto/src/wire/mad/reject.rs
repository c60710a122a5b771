//! The passive side's answers other than a REP: ConnectReject (REJ) and
//! MessageReceiptAcknowledgement (MRA, "give me longer"). Owns their body layouts' parse and
//! emit; the byte offsets are the parent's (`field`).

use super::field;
use super::{
    check_data, clear_data, get_array, get_be, get_bits, put_be, put_bits, Result, MAD_DATA_LEN,
    MSG_REQ, REJ_ARI_LEN, REJ_PRIVATE_DATA_LEN,
};

/// ConnectReject: either side refuses a REQ or REP.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CmRej {
    /// The sender's communication ID (0 if it never allocated one).
    pub local_comm_id: u32,
    /// The peer's communication ID.
    pub remote_comm_id: u32,
    /// Which message is rejected (2 bits; [`MSG_REQ`], [`MSG_REP`], [`MSG_OTHER`]).
    pub msg_rejected: u8,
    /// Meaningful bytes of `ari` (7 bits).
    pub reject_info_length: u8,
    /// Why ([`rej_reason`]).
    pub reason: u16,
    /// Additional Rejection Information.
    pub ari: [u8; REJ_ARI_LEN],
    /// Private data.
    pub private_data: [u8; REJ_PRIVATE_DATA_LEN],
}

impl Default for CmRej {
    fn default() -> CmRej {
        CmRej {
            local_comm_id: 0,
            remote_comm_id: 0,
            msg_rejected: MSG_REQ,
            reject_info_length: 0,
            reason: 0,
            ari: [0; REJ_ARI_LEN],
            private_data: [0; REJ_PRIVATE_DATA_LEN],
        }
    }
}

impl CmRej {
    /// Parses a REJ from the MAD data.
    pub fn parse(data: &[u8]) -> Result<CmRej> {
        use field::rej as f;
        check_data(data)?;
        Ok(CmRej {
            local_comm_id: get_be(data, f::LOCAL_COMM_ID) as u32,
            remote_comm_id: get_be(data, f::REMOTE_COMM_ID) as u32,
            msg_rejected: get_bits(data, f::MSG_REJECTED),
            reject_info_length: get_bits(data, f::REJECT_INFO_LENGTH),
            reason: get_be(data, f::REASON) as u16,
            ari: get_array(data, f::ARI),
            private_data: get_array(data, f::PRIVATE_DATA),
        })
    }

    /// Bytes the message occupies (the whole MAD data).
    #[inline]
    pub const fn buffer_len(&self) -> usize {
        MAD_DATA_LEN
    }

    /// Writes the REJ into the MAD data.
    pub fn emit(&self, data: &mut [u8]) {
        use field::rej as f;
        let d = clear_data(data);
        put_be(d, f::LOCAL_COMM_ID, self.local_comm_id as u64);
        put_be(d, f::REMOTE_COMM_ID, self.remote_comm_id as u64);
        put_bits(d, f::MSG_REJECTED, self.msg_rejected);
        put_bits(d, f::REJECT_INFO_LENGTH, self.reject_info_length);
        put_be(d, f::REASON, self.reason as u64);
        d[f::ARI].copy_from_slice(&self.ari);
        d[f::PRIVATE_DATA].copy_from_slice(&self.private_data);
    }
}

/// MessageReceiptAcknowledgement: "I got your message, give me `service_timeout` longer".
///
/// Private data is ignored on parse and zero on emit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct CmMra {
    /// The sender's communication ID.
    pub local_comm_id: u32,
    /// The peer's communication ID.
    pub remote_comm_id: u32,
    /// Which message is acknowledged (2 bits; [`MSG_REQ`], [`MSG_REP`], [`MSG_OTHER`]).
    pub msg_mraed: u8,
    /// Extra time the sender needs (5-bit exponent).
    pub service_timeout: u8,
}

impl CmMra {
    /// Parses an MRA from the MAD data.
    pub fn parse(data: &[u8]) -> Result<CmMra> {
        use field::mra as f;
        check_data(data)?;
        Ok(CmMra {
            local_comm_id: get_be(data, f::LOCAL_COMM_ID) as u32,
            remote_comm_id: get_be(data, f::REMOTE_COMM_ID) as u32,
            msg_mraed: get_bits(data, f::MSG_MRAED),
            service_timeout: get_bits(data, f::SERVICE_TIMEOUT),
        })
    }

    /// Bytes the message occupies (the whole MAD data).
    #[inline]
    pub const fn buffer_len(&self) -> usize {
        MAD_DATA_LEN
    }

    /// Writes the MRA into the MAD data.
    pub fn emit(&self, data: &mut [u8]) {
        use field::mra as f;
        let d = clear_data(data);
        put_be(d, f::LOCAL_COMM_ID, self.local_comm_id as u64);
        put_be(d, f::REMOTE_COMM_ID, self.remote_comm_id as u64);
        put_bits(d, f::MSG_MRAED, self.msg_mraed);
        put_bits(d, f::SERVICE_TIMEOUT, self.service_timeout);
    }
}
