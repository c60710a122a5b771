/* dta_dart.p4: the DART option of the example reporter (dta_reporter.p4 -DDTA_DART).
 *
 * DART (Langlet et al., HotNets'21) has no translator: the switch writes collector memory
 * itself. The INT path report that the plain reporter sends to the translator as a DTA
 * Key-Write becomes, for each of the N redundancy copies, one RoCEv2 RC RDMA WRITE Only into
 * the collector's Key-Write store, byte for byte the frame the translator would have sent
 * (translator/src/datapath/primitive/keywrite.rs, dta_translator.p4's Key-Write; the software
 * fleet is translator/src/dart.rs). Included by dta_reporter.p4 only; not compiled on its own.
 *
 *   ingress (DartResponse)  collector answers to our QPs (ACK, NAK) are dropped and counted
 *                           instead of forwarded (or reported as a loss: we have no route);
 *   ingress (DartCollector) key = the IPv4 source, bytes reversed (what the translator hashes
 *                           for a reference Key-Write report); checksum = the store's checksum
 *                           hash of it; the collector = tbl_dart_collector[checksum's low byte]
 *                           (256 buckets, filled round robin over the collectors by
 *                           dta_bfrt.py), which gives the mirror session and the QP. The
 *                           session's multicast group holds N nodes towards the collector with
 *                           replica IDs (rid) 0..N-1: the traffic manager makes the N copies.
 *   egress (DartWrite)      per copy: tbl_dart_qp[qp] (addresses, QPN, R_Key, store base, slot
 *                           mask), slot = replica rid's slot hash & mask, address = base +
 *                           slot * 8, PSN = dart_psn_reg[qp]++ (the switch is the only sender on
 *                           its QP), payload = (LE checksum, value = our switch ID), ICRC.
 *
 * The collector of a key is therefore computable from the key alone (KeyHasher::checksum &
 * 0xFF, then the bucket table), so a query knows which collector to ask.
 */

#ifndef DTA_DART_QPS
#define DTA_DART_QPS 16
#endif
#ifndef DTA_MAX_N
#define DTA_MAX_N DEFAULT_MAX_REDUNDANCY
#endif
#if DTA_MAX_N < 1 || DTA_MAX_N > MAX_REDUNDANCY
#error "DTA_MAX_N must be 1..MAX_REDUNDANCY"
#endif
#if DTA_DART_QPS < 1 || DTA_DART_QPS > 256
#error "DTA_DART_QPS must be 1..256 (tbl_dart_collector has 256 buckets)"
#endif
#ifdef DTA_REPORT_EXTENDED
#error "DTA_DART writes the reference report's 4-byte key and value (8-byte slots); the extended path report (13-byte key, 20-byte value) is not supported"
#endif

/* Key-Write slots of a 4-byte value: LE checksum, value (proto::layout::KeyWriteLayout). */
#define DART_SLOT_SIZE 8

/* The reference Key-Write key is hashed with its wire bytes reversed (Key::from_u32_reference;
 * dta_translator.p4's norm_ref_kw): the key of a path report is the IPv4 source. */
#define DART_KEY(ip) (ip[7:0] ++ ip[15:8] ++ ip[23:16] ++ ip[31:24])

/* ---- ingress: collector answers to our own QPs ---- */
control DartResponse(inout headers_t hdr,
                     inout ingress_intrinsic_metadata_for_deparser_t ig_dprsr_md,
                     out bool answer) {
    /* 0: ACK/NAKs and other RoCEv2 traffic to our DART address, dropped. A collector NIC
     * answers a lost WRITE with one NAK "PSN sequence error" and then drops the QP's WRITEs
     * until that PSN arrives: this counter growing means a QP needs its PSN re-set. */
    Counter<bit<32>, bit<1>>(1, CounterType_t.PACKETS) dart_responses;
    action dart_response() { ig_dprsr_md.drop_ctl = 1; }
    /* (our DART IPv4 address, our RoCEv2 UDP source port) */
    table tbl_dart_resp {
        key = { hdr.ipv4.dst : exact; hdr.ports.dst_port : exact; }
        actions = { dart_response; NoAction; }
        const default_action = NoAction();
        size = 16;
    }
    apply {
        answer = false;
        if (hdr.ports.isValid()) {
            if (tbl_dart_resp.apply().hit) {
                answer = true;
                dart_responses.count(0);
            }
        }
    }
}

/* ---- ingress: the key's checksum and its collector ---- */
control DartCollector(in headers_t hdr, inout ig_md_t md) {
#ifdef DTA_HASH_REFERENCE
    Hash<bit<32>>(HashAlgorithm_t.CUSTOM, CRC32_CUSTOM(REF_POLY_CRC32)) h_checksum;
#else
    Hash<bit<32>>(HashAlgorithm_t.CUSTOM, CRC32_CUSTOM(IND_POLY_CHECKSUM)) h_checksum;
#endif
    /* The collector of bucket `checksum & 0xFF`: its mirror session (multicast group of N
     * copies towards it) and its QP (tbl_dart_qp, dart_psn_reg index). */
    action dart_collector(MirrorId_t session, bit<16> qp) { md.session = session; md.dart_qp = qp; }
    /* No collector: no report. */
    action dart_none() { md.session = 0; }
    table tbl_dart_collector {
        key = { md.checksum[7:0] : exact @name("bucket"); }
        actions = { dart_collector; dart_none; }
        const default_action = dart_none();
        size = 256;
    }
    apply {
        md.checksum = h_checksum.get({ DART_KEY(hdr.ipv4.src) });
        tbl_dart_collector.apply();
    }
}

/* ---- egress: one RDMA WRITE per copy ---- */
control DartWrite(inout headers_t hdr,
                  in egress_intrinsic_metadata_t eg_intr_md,
                  inout egress_intrinsic_metadata_for_deparser_t eg_dprsr_md) {
    bit<32> dkey;   /* the hashed key bytes */
    bit<32> slot;
    bit<32> slot_mask;
    bit<32> off;
    bit<32> base_hi;
    bit<32> base_lo;
    bit<32> base_hi1;
    bit<32> carry_at;
    bit<32> carry_d;
    bit<32> va_hi;
    bit<32> va_lo;
    bit<32> psn;
    bit<24> remote_qpn;
    bit<32> rkey;

    /* Per-QP coordinates (dta_bfrt.py plan_dart_reporter, from the collector's metadata or
     * the RDMA_CM connection). The store base as in dta_translator.p4's tbl_qp: two halves,
     * the high half + 1 and the first offset whose low-half add carries (2^32 - base_lo, or
     * 2^31 - 1 when none does): base_lo + offset is one 32-bit add, the high half is chosen by
     * the sign of offset - carry_at. */
    action set_dart_qp(bit<48> src_mac, bit<48> dst_mac, bit<32> src_ip, bit<32> dst_ip,
                       bit<16> src_port, bit<24> qpn, bit<32> r_key, bit<32> hi,
                       bit<32> lo, bit<32> hi1, bit<32> carry, bit<32> mask) {
        hdr.ethernet.src = src_mac; hdr.ethernet.dst = dst_mac;
        hdr.ipv4.src = src_ip; hdr.ipv4.dst = dst_ip;
        hdr.udp.setValid();
        hdr.udp.src_port = src_port;
        remote_qpn = qpn; rkey = r_key;
        base_hi = hi; base_lo = lo; base_hi1 = hi1; carry_at = carry;
        slot_mask = mask;
    }
    action dart_unknown_qp() { eg_dprsr_md.drop_ctl = 1; }
    table tbl_dart_qp {
        key = { hdr.mirror.dart_qp : exact @name("qp"); }
        actions = { set_dart_qp; dart_unknown_qp; }
        const default_action = dart_unknown_qp();
        size = DTA_DART_QPS;
    }
    action addr_carry() {
        va_lo = base_lo + off;
        carry_d = off - carry_at;
    }

    /* The PSN, post-incremented, held as PSN << 8 so that one 32-bit add steps it and wraps
     * at 2^24 (dta_translator.p4's psn_reg). The control plane sets it to the QP's start PSN. */
    Register<bit<32>, bit<16>>(DTA_DART_QPS, 0) dart_psn_reg;
    RegisterAction<bit<32>, bit<16>, bit<32>>(dart_psn_reg) dart_psn_next = {
        void apply(inout bit<32> value, out bit<32> rv) { rv = value; value = value + 0x100; }
    };
    /* Frames sent per QP. */
    Counter<bit<32>, bit<16>>(DTA_DART_QPS, CounterType_t.PACKETS_AND_BYTES) dart_frames;

#ifdef DTA_HASH_REFERENCE
    Hash<bit<32>>(HashAlgorithm_t.CUSTOM, CRC32_CUSTOM(REF_POLY_CRC32)) h_slot_ref;
#else
    Hash<bit<32>>(HashAlgorithm_t.CUSTOM, CRC32_CUSTOM(IND_POLY_REPLICA0)) h_rep0;
#if DTA_MAX_N > 1
    Hash<bit<32>>(HashAlgorithm_t.CUSTOM, CRC32_CUSTOM(IND_POLY_REPLICA1)) h_rep1;
#endif
#if DTA_MAX_N > 2
    Hash<bit<32>>(HashAlgorithm_t.CUSTOM, CRC32_CUSTOM(IND_POLY_REPLICA2)) h_rep2;
#endif
#if DTA_MAX_N > 3
    Hash<bit<32>>(HashAlgorithm_t.CUSTOM, CRC32_CUSTOM(IND_POLY_REPLICA3)) h_rep3;
#endif
#if DTA_MAX_N > 4
    Hash<bit<32>>(HashAlgorithm_t.CUSTOM, CRC32_CUSTOM(IND_POLY_REPLICA4)) h_rep4;
#endif
#if DTA_MAX_N > 5
    Hash<bit<32>>(HashAlgorithm_t.CUSTOM, CRC32_CUSTOM(IND_POLY_REPLICA5)) h_rep5;
#endif
#if DTA_MAX_N > 6
    Hash<bit<32>>(HashAlgorithm_t.CUSTOM, CRC32_CUSTOM(IND_POLY_REPLICA6)) h_rep6;
#endif
#if DTA_MAX_N > 7
    Hash<bit<32>>(HashAlgorithm_t.CUSTOM, CRC32_CUSTOM(IND_POLY_REPLICA7)) h_rep7;
#endif
#endif
#ifndef DTA_NO_ICRC
    ICRC_ENGINE(icrc_kw);
#endif

    DTA_ROCE_FRAME_ACTION

    apply {
        dkey = DART_KEY(hdr.ipv4.src);   /* before tbl_dart_qp rewrites the source */
        bit<16> rid = eg_intr_md.egress_rid;
#ifdef DTA_HASH_REFERENCE
        slot = h_slot_ref.get({ dkey, rid[7:0] });
#else
        /* A replica beyond DTA_MAX_N takes the last one's hash (the control plane never makes
         * more copies than DTA_MAX_N). */
        if (rid == 0) { slot = h_rep0.get({ dkey }); }
#if DTA_MAX_N > 1
        else if (rid == 1) { slot = h_rep1.get({ dkey }); }
#endif
#if DTA_MAX_N > 2
        else if (rid == 2) { slot = h_rep2.get({ dkey }); }
#endif
#if DTA_MAX_N > 3
        else if (rid == 3) { slot = h_rep3.get({ dkey }); }
#endif
#if DTA_MAX_N > 4
        else if (rid == 4) { slot = h_rep4.get({ dkey }); }
#endif
#if DTA_MAX_N > 5
        else if (rid == 5) { slot = h_rep5.get({ dkey }); }
#endif
#if DTA_MAX_N > 6
        else if (rid == 6) { slot = h_rep6.get({ dkey }); }
#endif
#if DTA_MAX_N > 7
        else { slot = h_rep7.get({ dkey }); }
#else
        else { slot = 0; eg_dprsr_md.drop_ctl = 1; }
#endif
#endif
        if (tbl_dart_qp.apply().hit) {
            psn = dart_psn_next.execute(hdr.mirror.dart_qp);
            slot = slot & slot_mask;
            off = slot << 3;
            addr_carry();
            if (carry_d[31:31] == 1) { va_hi = base_hi; } else { va_hi = base_hi1; }

            frame(IB_OP_RC_RDMA_WRITE_ONLY, IB_BTH_LEN + IB_RETH_LEN + DART_SLOT_SIZE + IB_ICRC_LEN);
            hdr.bth.dest_qp = remote_qpn;
            hdr.bth.ack_req = 0;   /* no retransmission state here: nothing to ACK */
            hdr.bth.psn = psn[31:8];
            hdr.reth.setValid();
            hdr.reth.va_hi = va_hi; hdr.reth.va_lo = va_lo;
            hdr.reth.rkey = rkey;
            hdr.reth.dma_len = DART_SLOT_SIZE;
            hdr.kw_payload.setValid();
            hdr.kw_payload.ck0 = hdr.mirror.checksum[7:0]; hdr.kw_payload.ck1 = hdr.mirror.checksum[15:8];
            hdr.kw_payload.ck2 = hdr.mirror.checksum[23:16]; hdr.kw_payload.ck3 = hdr.mirror.checksum[31:24];
            hdr.kw_payload.value = hdr.mirror.switch_id;
#ifdef DTA_NO_ICRC
            /* ICRC 0: the collector NIC must not check it (p4/README.md, "DART reporter"). */
            hdr.icrc.c0 = 0; hdr.icrc.c1 = 0; hdr.icrc.c2 = 0; hdr.icrc.c3 = 0;
#else
            bit<32> crc = icrc_kw.get({ ICRC_HEADERS, RETH_ICRC, KW_ICRC });
            /* Least-significant byte first on the wire. */
            hdr.icrc.c0 = crc[7:0]; hdr.icrc.c1 = crc[15:8]; hdr.icrc.c2 = crc[23:16]; hdr.icrc.c3 = crc[31:24];
#endif
            dart_frames.count(hdr.mirror.dart_qp);
        }
        /* The copy's original transport headers and INT stack are replaced by the WRITE. */
        hdr.ports.setInvalid(); hdr.udp_rest.setInvalid(); hdr.int_shim.setInvalid();
        hdr.int_hops[0].setInvalid(); hdr.int_hops[1].setInvalid(); hdr.int_hops[2].setInvalid();
        hdr.int_hops[3].setInvalid(); hdr.int_hops[4].setInvalid();
        hdr.mirror.setInvalid();
    }
}
