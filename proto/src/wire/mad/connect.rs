//! The connection handshake: ConnectRequest (REQ), ConnectReply (REP) and ReadyToUse (RTU),
//! and the RDMA_CM IP header at the start of a REQ's private data. Owns their body layouts'
//! parse and emit; the MAD header and the byte offsets are the parent's (`field`).

use core::net::Ipv4Addr;

use super::field::{self, Field};
use super::{
    check_data, clear_data, get_array, get_be, get_bits, ipv4_gid, put_be, put_bits,
    rdma_cm_service_id, Result, MAD_DATA_LEN, REP_PRIVATE_DATA_LEN, REQ_PRIVATE_DATA_LEN,
    RTU_PRIVATE_DATA_LEN, TRANSPORT_RC,
};
use crate::wire::Error;

/// The RDMA_CM IP addressing header at the start of REQ private data (IPv4 only).
///
/// Layout (36 bytes): version `0x00`; IP version in the upper nibble (`0x40`); source port
/// (big-endian); source and destination address as 16-byte fields with an IPv4 address in the
/// last 4 bytes. The destination port is not here: it is the low 16 bits of the service ID.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CmPrivateIp {
    /// The active side's port (RDMA_CM picks an ephemeral one).
    pub src_port: u16,
    /// The active side's IPv4 address.
    pub src: Ipv4Addr,
    /// The passive side's IPv4 address.
    pub dst: Ipv4Addr,
}

impl CmPrivateIp {
    /// Bytes of the header.
    pub const LEN: usize = 36;
    /// The only RDMA_CM header version.
    pub const CMA_VERSION: u8 = 0x00;
    /// The IP-version byte of IPv4 (version in the upper nibble).
    pub const IP_VERSION_4: u8 = 4 << 4;

    /// Parses the header from the start of REQ private data.
    ///
    /// A header version other than 0 or an IPv6 header is [`Error::UnsupportedVersion`]. The
    /// 12 bytes before each IPv4 address are not checked: Linux zeroes them, and some user-space
    /// variants put UD session fields there.
    pub fn parse(private_data: &[u8]) -> Result<CmPrivateIp> {
        use field::cma;
        if private_data.len() < Self::LEN {
            return Err(Error::Truncated);
        }
        if private_data[cma::VERSION] != Self::CMA_VERSION
            || private_data[cma::IP_VERSION] >> 4 != 4
        {
            return Err(Error::UnsupportedVersion);
        }
        let ip = |f: Field| Ipv4Addr::from(get_be(private_data, f) as u32);
        Ok(CmPrivateIp {
            src_port: get_be(private_data, cma::SRC_PORT) as u16,
            src: ip(cma::SRC_IPV4),
            dst: ip(cma::DST_IPV4),
        })
    }

    /// Bytes the header occupies.
    #[inline]
    pub const fn buffer_len(&self) -> usize {
        Self::LEN
    }

    /// Writes the 36-byte header (address padding zero, as Linux writes it).
    pub fn emit(&self, out: &mut [u8]) {
        use field::cma;
        let out = &mut out[..Self::LEN];
        out.fill(0);
        out[cma::VERSION] = Self::CMA_VERSION;
        out[cma::IP_VERSION] = Self::IP_VERSION_4;
        put_be(out, cma::SRC_PORT, self.src_port as u64);
        put_be(out, cma::SRC_IPV4, u32::from(self.src) as u64);
        put_be(out, cma::DST_IPV4, u32::from(self.dst) as u64);
    }

    /// A whole REQ private-data field holding this header followed by zeros.
    pub fn to_req_private_data(&self) -> [u8; REQ_PRIVATE_DATA_LEN] {
        let mut pd = [0u8; REQ_PRIVATE_DATA_LEN];
        self.emit(&mut pd);
        pd
    }
}

/// ConnectRequest: the active side's offer (its QP, starting PSN and path).
///
/// The alternate path and the remote EECN are emitted as zero and ignored on parse (RoCE has
/// no alternate path; RC has no EE context).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CmReq {
    /// The sender's communication ID for this connection.
    pub local_comm_id: u32,
    /// ECE vendor ID (24 bits, in the formerly reserved word at offset 4; 0 without ECE).
    pub vendor_id: u32,
    /// Service ID (RDMA_CM: [`rdma_cm_service_id`] of the destination port).
    pub service_id: u64,
    /// The sender's CA GUID.
    pub local_ca_guid: u64,
    /// The sender's Q_Key (UD/RD only; 0 for RC).
    pub local_qkey: u32,
    /// The sender's QPN (24 bits).
    pub local_qpn: u32,
    /// RDMA READ/atomic requests the sender accepts in flight as a responder.
    pub responder_resources: u8,
    /// The sender's EE context (24 bits; 0 for RC).
    pub local_eecn: u32,
    /// RDMA READ/atomic requests the sender will issue in flight.
    pub initiator_depth: u8,
    /// How long the sender waits for the REP (5-bit exponent, [`timeout_nanos`]).
    pub remote_cm_response_timeout: u8,
    /// Transport service type (2 bits; [`TRANSPORT_RC`]).
    pub transport_type: u8,
    /// End-to-end flow control.
    pub flow_control: bool,
    /// The first PSN the sender will send (24 bits): the passive side's expected PSN.
    pub starting_psn: u32,
    /// How long the passive side may take to answer (5-bit exponent).
    pub local_cm_response_timeout: u8,
    /// Transport retries on ACK timeout (3 bits).
    pub retry_count: u8,
    /// Partition key.
    pub pkey: u16,
    /// Path MTU code (4 bits; 1 = 256 B … 5 = 4096 B).
    pub path_mtu: u8,
    /// RD only: an RDC exists.
    pub rdc_exists: bool,
    /// RNR NAK retries (3 bits; 7 = infinite).
    pub rnr_retry_count: u8,
    /// CM retries of this REQ (4 bits).
    pub max_cm_retries: u8,
    /// The sender uses an SRQ.
    pub srq: bool,
    /// Primary path: local LID (0xFFFF on RoCE).
    pub primary_local_lid: u16,
    /// Primary path: remote LID (0xFFFF on RoCE).
    pub primary_remote_lid: u16,
    /// Primary path: local GID (on RoCEv2, [`ipv4_gid`] of the source address).
    pub primary_local_gid: [u8; 16],
    /// Primary path: remote GID.
    pub primary_remote_gid: [u8; 16],
    /// Primary path: flow label (20 bits).
    pub primary_flow_label: u32,
    /// Primary path: packet rate (6 bits).
    pub primary_packet_rate: u8,
    /// Primary path: traffic class.
    pub primary_traffic_class: u8,
    /// Primary path: hop limit.
    pub primary_hop_limit: u8,
    /// Primary path: service level (4 bits).
    pub primary_sl: u8,
    /// Primary path: the remote port is in the local subnet.
    pub primary_subnet_local: bool,
    /// Primary path: local ACK timeout (5-bit exponent).
    pub primary_local_ack_timeout: u8,
    /// Private data (RDMA_CM: starts with [`CmPrivateIp`]).
    pub private_data: [u8; REQ_PRIVATE_DATA_LEN],
}

impl Default for CmReq {
    fn default() -> CmReq {
        CmReq {
            local_comm_id: 0,
            vendor_id: 0,
            service_id: 0,
            local_ca_guid: 0,
            local_qkey: 0,
            local_qpn: 0,
            responder_resources: 0,
            local_eecn: 0,
            initiator_depth: 0,
            remote_cm_response_timeout: 0,
            transport_type: TRANSPORT_RC,
            flow_control: false,
            starting_psn: 0,
            local_cm_response_timeout: 0,
            retry_count: 0,
            pkey: 0,
            path_mtu: 0,
            rdc_exists: false,
            rnr_retry_count: 0,
            max_cm_retries: 0,
            srq: false,
            primary_local_lid: 0,
            primary_remote_lid: 0,
            primary_local_gid: [0; 16],
            primary_remote_gid: [0; 16],
            primary_flow_label: 0,
            primary_packet_rate: 0,
            primary_traffic_class: 0,
            primary_hop_limit: 0,
            primary_sl: 0,
            primary_subnet_local: false,
            primary_local_ack_timeout: 0,
            private_data: [0; REQ_PRIVATE_DATA_LEN],
        }
    }
}

impl CmReq {
    /// The REQ our RDMA_CM initiators send for an RC connection over RoCEv2: `local` is our
    /// RoCEv2 address (its port goes into the RDMA_CM private-data header), `remote` the
    /// passive side's, `port` the rdma_cm service. `responder_resources` is how many READs or
    /// atomics we answer in flight, `initiator_depth` how many we issue; path MTU 4096, the
    /// retry counts at their maximum.
    #[allow(clippy::too_many_arguments)]
    pub fn rc_connect(
        local_comm_id: u32,
        port: u16,
        ca_guid: u64,
        local_qpn: u32,
        starting_psn: u32,
        local: std::net::SocketAddrV4,
        remote: Ipv4Addr,
        responder_resources: u8,
        initiator_depth: u8,
    ) -> CmReq {
        let private = CmPrivateIp {
            src_port: local.port(),
            src: *local.ip(),
            dst: remote,
        };
        CmReq {
            local_comm_id,
            service_id: rdma_cm_service_id(port),
            local_ca_guid: ca_guid,
            local_qpn,
            responder_resources,
            initiator_depth,
            remote_cm_response_timeout: 20,
            transport_type: TRANSPORT_RC,
            starting_psn,
            local_cm_response_timeout: 20,
            retry_count: 7,
            pkey: 0xffff,
            path_mtu: 5, // 4096
            rnr_retry_count: 7,
            max_cm_retries: 15,
            primary_local_lid: 0xffff,
            primary_remote_lid: 0xffff,
            primary_local_gid: ipv4_gid(*local.ip()),
            primary_remote_gid: ipv4_gid(remote),
            primary_hop_limit: 64,
            primary_local_ack_timeout: 14,
            private_data: private.to_req_private_data(),
            ..CmReq::default()
        }
    }
}

impl CmReq {
    /// Parses a REQ from the MAD data (the bytes after the MAD header).
    pub fn parse(data: &[u8]) -> Result<CmReq> {
        use field::req as f;
        check_data(data)?;
        let d = data;
        let flow = get_be(d, f::PRIMARY_FLOW_LABEL_RATE) as u32;
        Ok(CmReq {
            local_comm_id: get_be(d, f::LOCAL_COMM_ID) as u32,
            vendor_id: get_be(d, f::VENDOR_ID) as u32,
            service_id: get_be(d, f::SERVICE_ID),
            local_ca_guid: get_be(d, f::LOCAL_CA_GUID),
            local_qkey: get_be(d, f::LOCAL_QKEY) as u32,
            local_qpn: get_be(d, f::LOCAL_QPN) as u32,
            responder_resources: d[f::RESPONDER_RESOURCES],
            local_eecn: get_be(d, f::LOCAL_EECN) as u32,
            initiator_depth: d[f::INITIATOR_DEPTH],
            remote_cm_response_timeout: get_bits(d, f::REMOTE_CM_RESPONSE_TIMEOUT),
            transport_type: get_bits(d, f::TRANSPORT_TYPE),
            flow_control: get_bits(d, f::FLOW_CONTROL) != 0,
            starting_psn: get_be(d, f::STARTING_PSN) as u32,
            local_cm_response_timeout: get_bits(d, f::LOCAL_CM_RESPONSE_TIMEOUT),
            retry_count: get_bits(d, f::RETRY_COUNT),
            pkey: get_be(d, f::PKEY) as u16,
            path_mtu: get_bits(d, f::PATH_MTU),
            rdc_exists: get_bits(d, f::RDC_EXISTS) != 0,
            rnr_retry_count: get_bits(d, f::RNR_RETRY_COUNT),
            max_cm_retries: get_bits(d, f::MAX_CM_RETRIES),
            srq: get_bits(d, f::SRQ) != 0,
            primary_local_lid: get_be(d, f::PRIMARY_LOCAL_LID) as u16,
            primary_remote_lid: get_be(d, f::PRIMARY_REMOTE_LID) as u16,
            primary_local_gid: get_array(d, f::PRIMARY_LOCAL_GID),
            primary_remote_gid: get_array(d, f::PRIMARY_REMOTE_GID),
            primary_flow_label: flow >> 12,
            primary_packet_rate: (flow & 0x3F) as u8,
            primary_traffic_class: d[f::PRIMARY_TRAFFIC_CLASS],
            primary_hop_limit: d[f::PRIMARY_HOP_LIMIT],
            primary_sl: get_bits(d, f::PRIMARY_SL),
            primary_subnet_local: get_bits(d, f::PRIMARY_SUBNET_LOCAL) != 0,
            primary_local_ack_timeout: get_bits(d, f::PRIMARY_LOCAL_ACK_TIMEOUT),
            private_data: get_array(d, f::PRIVATE_DATA),
        })
    }

    /// Bytes the message occupies (the whole MAD data).
    #[inline]
    pub const fn buffer_len(&self) -> usize {
        MAD_DATA_LEN
    }

    /// Writes the REQ into the MAD data.
    pub fn emit(&self, data: &mut [u8]) {
        use field::req as f;
        let d = clear_data(data);
        put_be(d, f::LOCAL_COMM_ID, self.local_comm_id as u64);
        put_be(d, f::VENDOR_ID, self.vendor_id as u64);
        put_be(d, f::SERVICE_ID, self.service_id);
        put_be(d, f::LOCAL_CA_GUID, self.local_ca_guid);
        put_be(d, f::LOCAL_QKEY, self.local_qkey as u64);
        put_be(d, f::LOCAL_QPN, self.local_qpn as u64);
        d[f::RESPONDER_RESOURCES] = self.responder_resources;
        put_be(d, f::LOCAL_EECN, self.local_eecn as u64);
        d[f::INITIATOR_DEPTH] = self.initiator_depth;
        put_be(d, f::REMOTE_EECN, 0);
        put_bits(
            d,
            f::REMOTE_CM_RESPONSE_TIMEOUT,
            self.remote_cm_response_timeout,
        );
        put_bits(d, f::TRANSPORT_TYPE, self.transport_type);
        put_bits(d, f::FLOW_CONTROL, self.flow_control as u8);
        put_be(d, f::STARTING_PSN, self.starting_psn as u64);
        put_bits(
            d,
            f::LOCAL_CM_RESPONSE_TIMEOUT,
            self.local_cm_response_timeout,
        );
        put_bits(d, f::RETRY_COUNT, self.retry_count);
        put_be(d, f::PKEY, self.pkey as u64);
        put_bits(d, f::PATH_MTU, self.path_mtu);
        put_bits(d, f::RDC_EXISTS, self.rdc_exists as u8);
        put_bits(d, f::RNR_RETRY_COUNT, self.rnr_retry_count);
        put_bits(d, f::MAX_CM_RETRIES, self.max_cm_retries);
        put_bits(d, f::SRQ, self.srq as u8);
        put_be(d, f::PRIMARY_LOCAL_LID, self.primary_local_lid as u64);
        put_be(d, f::PRIMARY_REMOTE_LID, self.primary_remote_lid as u64);
        d[f::PRIMARY_LOCAL_GID].copy_from_slice(&self.primary_local_gid);
        d[f::PRIMARY_REMOTE_GID].copy_from_slice(&self.primary_remote_gid);
        let flow =
            ((self.primary_flow_label & 0xF_FFFF) << 12) | (self.primary_packet_rate & 0x3F) as u32;
        put_be(d, f::PRIMARY_FLOW_LABEL_RATE, flow as u64);
        d[f::PRIMARY_TRAFFIC_CLASS] = self.primary_traffic_class;
        d[f::PRIMARY_HOP_LIMIT] = self.primary_hop_limit;
        put_bits(d, f::PRIMARY_SL, self.primary_sl);
        put_bits(d, f::PRIMARY_SUBNET_LOCAL, self.primary_subnet_local as u8);
        put_bits(
            d,
            f::PRIMARY_LOCAL_ACK_TIMEOUT,
            self.primary_local_ack_timeout,
        );
        d[f::ALTERNATE_PATH].fill(0);
        d[f::PRIVATE_DATA].copy_from_slice(&self.private_data);
    }

    /// The RDMA_CM IP header at the start of the private data.
    #[inline]
    pub fn private_ip(&self) -> Result<CmPrivateIp> {
        CmPrivateIp::parse(&self.private_data)
    }
}

/// ConnectReply: the passive side's acceptance (its QP and starting PSN).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CmRep {
    /// The sender's (passive side's) communication ID.
    pub local_comm_id: u32,
    /// The REQ's local communication ID.
    pub remote_comm_id: u32,
    /// The sender's Q_Key (UD/RD only).
    pub local_qkey: u32,
    /// The sender's QPN (24 bits): the destination QP of the active side's requests.
    pub local_qpn: u32,
    /// The sender's EE context (24 bits; 0 for RC).
    pub local_eecn: u32,
    /// The first PSN the *sender* will send (24 bits); not the PSN it expects.
    pub starting_psn: u32,
    /// ECE vendor ID (24 bits, split over bytes 15, 19 and 23; 0 without ECE).
    pub vendor_id: u32,
    /// RDMA READ/atomic requests the sender accepts in flight as a responder.
    pub responder_resources: u8,
    /// RDMA READ/atomic requests the sender will issue in flight.
    pub initiator_depth: u8,
    /// Target ACK delay (5-bit exponent).
    pub target_ack_delay: u8,
    /// Failover accepted (2 bits; 0 = accepted).
    pub failover_accepted: u8,
    /// End-to-end flow control.
    pub end_to_end_flow_control: bool,
    /// RNR NAK retries the sender wants (3 bits).
    pub rnr_retry_count: u8,
    /// The sender uses an SRQ.
    pub srq: bool,
    /// The sender's CA GUID.
    pub local_ca_guid: u64,
    /// Private data.
    pub private_data: [u8; REP_PRIVATE_DATA_LEN],
}

impl Default for CmRep {
    fn default() -> CmRep {
        CmRep {
            local_comm_id: 0,
            remote_comm_id: 0,
            local_qkey: 0,
            local_qpn: 0,
            local_eecn: 0,
            starting_psn: 0,
            vendor_id: 0,
            responder_resources: 0,
            initiator_depth: 0,
            target_ack_delay: 0,
            failover_accepted: 0,
            end_to_end_flow_control: false,
            rnr_retry_count: 0,
            srq: false,
            local_ca_guid: 0,
            private_data: [0; REP_PRIVATE_DATA_LEN],
        }
    }
}

impl CmRep {
    /// Parses a REP from the MAD data.
    pub fn parse(data: &[u8]) -> Result<CmRep> {
        use field::rep as f;
        check_data(data)?;
        let d = data;
        Ok(CmRep {
            local_comm_id: get_be(d, f::LOCAL_COMM_ID) as u32,
            remote_comm_id: get_be(d, f::REMOTE_COMM_ID) as u32,
            local_qkey: get_be(d, f::LOCAL_QKEY) as u32,
            local_qpn: get_be(d, f::LOCAL_QPN) as u32,
            local_eecn: get_be(d, f::LOCAL_EECN) as u32,
            starting_psn: get_be(d, f::STARTING_PSN) as u32,
            vendor_id: (d[f::VENDOR_ID_H] as u32) << 16
                | (d[f::VENDOR_ID_M] as u32) << 8
                | d[f::VENDOR_ID_L] as u32,
            responder_resources: d[f::RESPONDER_RESOURCES],
            initiator_depth: d[f::INITIATOR_DEPTH],
            target_ack_delay: get_bits(d, f::TARGET_ACK_DELAY),
            failover_accepted: get_bits(d, f::FAILOVER_ACCEPTED),
            end_to_end_flow_control: get_bits(d, f::END_TO_END_FLOW_CONTROL) != 0,
            rnr_retry_count: get_bits(d, f::RNR_RETRY_COUNT),
            srq: get_bits(d, f::SRQ) != 0,
            local_ca_guid: get_be(d, f::LOCAL_CA_GUID),
            private_data: get_array(d, f::PRIVATE_DATA),
        })
    }

    /// Bytes the message occupies (the whole MAD data).
    #[inline]
    pub const fn buffer_len(&self) -> usize {
        MAD_DATA_LEN
    }

    /// Writes the REP into the MAD data.
    pub fn emit(&self, data: &mut [u8]) {
        use field::rep as f;
        let d = clear_data(data);
        put_be(d, f::LOCAL_COMM_ID, self.local_comm_id as u64);
        put_be(d, f::REMOTE_COMM_ID, self.remote_comm_id as u64);
        put_be(d, f::LOCAL_QKEY, self.local_qkey as u64);
        put_be(d, f::LOCAL_QPN, self.local_qpn as u64);
        d[f::VENDOR_ID_H] = (self.vendor_id >> 16) as u8;
        put_be(d, f::LOCAL_EECN, self.local_eecn as u64);
        d[f::VENDOR_ID_M] = (self.vendor_id >> 8) as u8;
        put_be(d, f::STARTING_PSN, self.starting_psn as u64);
        d[f::VENDOR_ID_L] = self.vendor_id as u8;
        d[f::RESPONDER_RESOURCES] = self.responder_resources;
        d[f::INITIATOR_DEPTH] = self.initiator_depth;
        put_bits(d, f::TARGET_ACK_DELAY, self.target_ack_delay);
        put_bits(d, f::FAILOVER_ACCEPTED, self.failover_accepted);
        put_bits(
            d,
            f::END_TO_END_FLOW_CONTROL,
            self.end_to_end_flow_control as u8,
        );
        put_bits(d, f::RNR_RETRY_COUNT, self.rnr_retry_count);
        put_bits(d, f::SRQ, self.srq as u8);
        put_be(d, f::LOCAL_CA_GUID, self.local_ca_guid);
        d[f::PRIVATE_DATA].copy_from_slice(&self.private_data);
    }
}

/// ReadyToUse: the active side confirms the REP; the connection is established.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CmRtu {
    /// The sender's communication ID.
    pub local_comm_id: u32,
    /// The peer's communication ID.
    pub remote_comm_id: u32,
    /// Private data.
    pub private_data: [u8; RTU_PRIVATE_DATA_LEN],
}

impl Default for CmRtu {
    fn default() -> CmRtu {
        CmRtu {
            local_comm_id: 0,
            remote_comm_id: 0,
            private_data: [0; RTU_PRIVATE_DATA_LEN],
        }
    }
}

impl CmRtu {
    /// Parses an RTU from the MAD data.
    pub fn parse(data: &[u8]) -> Result<CmRtu> {
        use field::rtu as f;
        check_data(data)?;
        Ok(CmRtu {
            local_comm_id: get_be(data, f::LOCAL_COMM_ID) as u32,
            remote_comm_id: get_be(data, f::REMOTE_COMM_ID) as u32,
            private_data: get_array(data, f::PRIVATE_DATA),
        })
    }

    /// Bytes the message occupies (the whole MAD data).
    #[inline]
    pub const fn buffer_len(&self) -> usize {
        MAD_DATA_LEN
    }

    /// Writes the RTU into the MAD data.
    pub fn emit(&self, data: &mut [u8]) {
        use field::rtu as f;
        let d = clear_data(data);
        put_be(d, f::LOCAL_COMM_ID, self.local_comm_id as u64);
        put_be(d, f::REMOTE_COMM_ID, self.remote_comm_id as u64);
        d[f::PRIVATE_DATA].copy_from_slice(&self.private_data);
    }
}
