//! Software-RNIC counters, named like Linux rxe's hw counters (and mlx5's) where one exists.

dta_proto::define_counters!(
    /// Responder counters, per QP and (merged) per device.
    pub struct RnicCounters {
        /// RoCEv2 packets accepted for processing (headers, address and ICRC good).
        rcvd_pkts,
        /// RoCEv2 packets sent (ACKs, NAKs, read responses, atomic ACKs, SENDs).
        sent_pkts,
        /// Requests whose PSN was behind the expected PSN: re-ACKed, never re-executed.
        duplicate_request,
        /// Requests ahead of the expected PSN that triggered a PSN-sequence-error NAK.
        out_of_seq_request,
        /// Requests ahead of the expected PSN dropped silently after the NAK (rxe semantics).
        out_of_seq_dropped,
        /// RNR NAKs sent because no receive was posted.
        send_rnr_err,
        /// Datagrams that were not a well-formed RoCEv2 packet.
        malformed,
        /// Packets with an opcode this QP type does not accept.
        bad_opcode,
        /// Packets dropped because the ICRC did not match.
        bad_icrc,
        /// Packets whose IPv4 ident had to be solved from the ICRC (kernel socket path).
        icrc_ident_solved,
        /// Packets for a QPN that does not exist.
        unknown_qpn,
        /// Packets whose source or destination address is not the QP's peer (spoofing).
        addr_mismatch,
        /// Packets with a P_Key other than the default partition.
        bad_pkey,
        /// Packets dropped because their QP is in the error state.
        qp_error_drops,
        /// Requests naming an R_Key that is not registered: NAK remote access error.
        rkey_violation,
        /// Requests outside the registered region: NAK remote access error.
        out_of_bounds,
        /// Requests the region's access flags do not permit: NAK remote access error.
        access_denied,
        /// Malformed requests (length, opcode sequence, misaligned atomic): NAK invalid request.
        invalid_request,
        /// RDMA WRITE messages executed.
        writes,
        /// Bytes written by RDMA WRITE.
        write_bytes,
        /// WRITE with Immediate completions raised (the papers' push notifications).
        write_imm,
        /// Atomic operations executed (FETCH_ADD and COMPARE_SWAP).
        atomics,
        /// Atomic replies replayed for duplicate requests.
        atomic_replays,
        /// RDMA READ requests served.
        reads,
        /// SEND messages received.
        sends,
        /// ACKs sent.
        acks_sent,
        /// NAKs sent (all kinds).
        naks_sent,
        /// Completions dropped because the completion queue was full.
        cq_overflow,
        /// Frames that did not fit in the transmit batch and were dropped.
        tx_dropped,
        /// Requests dropped because the QP was still sending an earlier READ's responses and
        /// the transmit batch had no room (the requester resends them, as after any loss).
        read_busy_drops,
    }
);
