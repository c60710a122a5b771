/* dta_icrc_pipe.p4: the RoCEv2 ICRC of the translator's frames, in a second pipe.
 *
 * Included by dta_translator.p4 (not compiled on its own) unless DTA_NO_ICRC. The ICRC is a
 * CRC-32 over the whole frame (about 500 to 1000 input bits per frame shape). Computed in the
 * translator's own egress after the QP registers, the seven shape engines needed 20 egress
 * stages of Tofino-1's 12 (p4/README.md, "ICRC"): each engine takes a stage's hash input
 * crossbar, and the hash-distribution units are shared with everything else in the stage. So
 * the work is split across pipes, the way multi-pipe Tofino programs fold a pipeline:
 *
 *   pipe 0 (the translator, `pipe`): reports in -> Ingress -> the loop port (a pipe-0 port in
 *     loopback, e.g. the recirculation port 68) -> Egress builds the frame (QP registers, PSN,
 *     AckReq), with no ICRC -> loops back into Ingress, which sees a RoCEv2 request arriving
 *     on the loop port: tbl_forward sends it to the collector's port and tbl_icrc_loop marks it
 *     KIND_ICRC;
 *   pipe 1 (`icrc_pipe`, the collector-facing ports): IcrcEgress parses the frame by opcode and
 *     UDP length, hashes it with the shape's engine and appends the ICRC. IcrcIngress takes
 *     what the collectors send (ACK/NAK) to the loop port, so it reaches pipe 0's Ingress
 *     (tbl_resp_qp) as before.
 *
 * Frame bytes are exactly proto's: the ICRC pipe appends the 4 ICRC bytes the translator pipe
 * leaves out (the IPv4 and UDP lengths already count them). Cost: every RoCEv2 frame crosses
 * pipe 0 twice (the loop port's bandwidth bounds the frame rate; several loop ports can share
 * the load through the multicast groups), and collectors must sit on pipe-1 ports.
 */

#define UDP_LEN_OF(TRANSPORT_LEN) ((TRANSPORT_LEN) + UDP_HEADER_LEN)

#include "dta_sketch.p4"

parser IcrcIgParser(packet_in pkt, out ipipe_headers_t hdr, out ipipe_ig_md_t md,
                    out ingress_intrinsic_metadata_t ig_intr_md) {
    state start {
        pkt.extract(ig_intr_md);
        pkt.advance(PORT_METADATA_SIZE);
        md.sk_shape = 0;
        md.sk_far = 0;
        md.sk_udp_len = 0;
        md.nack_mk = DTA_SK_MAGIC_VERSION ++ DTA_SK_NACK_KIND;
        pkt.extract(hdr.ethernet);
        transition select(hdr.ethernet.ether_type) { ETHERTYPE_IPV4: parse_ipv4; default: accept; }
    }
    state parse_ipv4 {
        pkt.extract(hdr.ipv4);
        transition select(hdr.ipv4.ihl, hdr.ipv4.frag_offset, hdr.ipv4.protocol) {
            (5, 0, IP_PROTO_UDP): parse_udp;
            default: accept;
        }
    }
    state parse_udp {
        pkt.extract(hdr.udp);
        transition select(hdr.udp.dst_port) {
#ifndef DTA_NO_SKETCH
            DTA_PORT: parse_dta;
#endif
            ROCEV2_PORT: parse_bth;
            default: accept;
        }
    }
#ifndef DTA_NO_SKETCH
    /* Sketch-Merge reports; other reports reaching a pipe-1 port go on to pipe 0 untouched. */
    state parse_dta {
        transition select(pkt.lookahead<bit<16>>()) {
            DTA_SK_MAGIC_VERSION ++ DTA_OP_SKETCH_MERGE: parse_sk;
            default: accept;
        }
    }
    state parse_sk {
        pkt.extract(hdr.sk_base);
        pkt.extract(hdr.sk);
        pkt.extract(hdr.sk_b);
        transition select(hdr.sk_b.column[31:16]) {
            0: sk_shape;
            default: sk_far;   /* beyond any sketch this program holds: SK_RANGE */
        }
    }
    state sk_far {
        md.sk_far = 1;
        transition accept;
    }
    state sk_shape {
        transition select(hdr.sk.rows, hdr.sk.cell_width, hdr.sk.columns) {
            (DTA_SK_ROWS, 4, 1): sk_wide;
#if DTA_SK_ROWS > 1
            (1, 4, 1): sk_one4;
#endif
            (1, 1, 1): sk_one1;
            default: accept;   /* counted SK_UNSUPPORTED (or malformed) and dropped */
        }
    }
    state sk_wide {
        pkt.extract(hdr.sk_in[0]);
#if DTA_SK_ROWS > 1
        pkt.extract(hdr.sk_in[1]);
#endif
#if DTA_SK_ROWS > 2
        pkt.extract(hdr.sk_in[2]);
#endif
#if DTA_SK_ROWS > 3
        pkt.extract(hdr.sk_in[3]);
#endif
#if DTA_SK_ROWS > 4
        pkt.extract(hdr.sk_in[4]);
#endif
#if DTA_SK_ROWS > 5
        pkt.extract(hdr.sk_in[5]);
#endif
#if DTA_SK_ROWS > 6
        pkt.extract(hdr.sk_in[6]);
#endif
#if DTA_SK_ROWS > 7
        pkt.extract(hdr.sk_in[7]);
#endif
        md.sk_shape = 1;
        md.sk_udp_len = SK_RPT_UDP_LEN(4 * DTA_SK_ROWS);
        transition accept;
    }
#if DTA_SK_ROWS > 1
    state sk_one4 {
        pkt.extract(hdr.sk_in[0]);
        md.sk_shape = 1;
        md.sk_udp_len = SK_RPT_UDP_LEN(4);
        transition accept;
    }
#endif
    state sk_one1 {
        pkt.extract(hdr.sk_in8);
        md.sk_shape = 1;
        md.sk_udp_len = SK_RPT_UDP_LEN(1);
        transition accept;
    }
#endif
    state parse_bth {
        pkt.extract(hdr.bth);
        transition select(hdr.bth.opcode) {
            IB_OP_RC_ACKNOWLEDGE: parse_aeth;
            IB_OP_RC_ATOMIC_ACKNOWLEDGE: parse_aeth;
            default: accept;
        }
    }
    state parse_aeth { pkt.extract(hdr.aeth); transition accept; }
}

/* Sketch-Merge reports and their QPs' responses are handled here (dta_sketch.p4). Other
 * collector-side traffic (ACK/NAKs of pipe 0's QPs, anything else the collectors send) goes to
 * a pipe-0 port: the loop port for the translator's own address, so the response re-enters
 * pipe 0's Ingress. */
control IcrcIngress(inout ipipe_headers_t hdr, inout ipipe_ig_md_t md,
                    in ingress_intrinsic_metadata_t ig_intr_md,
                    in ingress_intrinsic_metadata_from_parser_t ig_prsr_md,
                    inout ingress_intrinsic_metadata_for_deparser_t ig_dprsr_md,
                    inout ingress_intrinsic_metadata_for_tm_t ig_tm_md) {
    Counter<bit<32>, bit<1>>(2, CounterType_t.PACKETS) icrc_ig_events;   /* 0 sent, 1 no route */
    action to_port(PortId_t port) { ig_tm_md.ucast_egress_port = port; }
    action no_route() { ig_dprsr_md.drop_ctl = 1; }
    table tbl_icrc_return {
        key = { hdr.ipv4.dst : exact; }
        actions = { to_port; no_route; }
        default_action = no_route();
        size = 1024;
    }
#ifndef DTA_NO_SKETCH
    SketchMerge() sketch;
#endif
    apply {
        hdr.bridge.setValid();
        hdr.bridge.kind = KIND_FORWARD;
        hdr.bridge.qp = 0; hdr.bridge.n = 0; hdr.bridge.pad0 = 0; hdr.bridge.immediate = 0;
        hdr.bridge.key = 0;
        md.handled = 0;
#ifndef DTA_NO_SKETCH
        sketch.apply(hdr, md, ig_intr_md, ig_dprsr_md, ig_tm_md);
#endif
        if (md.handled == 0) {
            if (hdr.ipv4.isValid()) {
                if (tbl_icrc_return.apply().hit) {
                    icrc_ig_events.count(0);
                } else {
                    icrc_ig_events.count(1);   /* no_route dropped it */
                }
            } else {
                ig_dprsr_md.drop_ctl = 1;
                icrc_ig_events.count(1);
            }
        }
    }
}

control IcrcIgDeparser(packet_out pkt, inout ipipe_headers_t hdr, in ipipe_ig_md_t md,
                       in ingress_intrinsic_metadata_for_deparser_t ig_dprsr_md) {
    Checksum() ipv4_csum;
    Checksum() udp_csum;
    apply {
        /* Frames and NACKs built here get their IPv4 checksum; what passes through keeps its
         * bytes (the sum of an unchanged header is its checksum). */
        hdr.ipv4.checksum = ipv4_csum.update({
            hdr.ipv4.version, hdr.ipv4.ihl, hdr.ipv4.tos, hdr.ipv4.total_len, hdr.ipv4.ident,
            hdr.ipv4.flags, hdr.ipv4.frag_offset, hdr.ipv4.ttl, hdr.ipv4.protocol,
            hdr.ipv4.src, hdr.ipv4.dst });
        if (hdr.sk_nack.isValid()) {
            /* The NACK's UDP checksum, as a socket (the software translator) fills it. */
            hdr.udp.checksum = udp_csum.update({
                hdr.ipv4.src, hdr.ipv4.dst, 8w0, hdr.ipv4.protocol, hdr.udp.len,
                hdr.udp.src_port, hdr.udp.dst_port, hdr.udp.len,
                hdr.sk_nack.magic_kind, hdr.sk_nack.sketch_id,
                hdr.sk_b.switch_id, hdr.sk_b.epoch, hdr.sk_b.column });
        }
        pkt.emit(hdr.bridge);
        pkt.emit(hdr.ethernet);
        pkt.emit(hdr.ipv4);
        pkt.emit(hdr.udp);
        pkt.emit(hdr.sk_nack);
        pkt.emit(hdr.sk_base);
        pkt.emit(hdr.sk);
        pkt.emit(hdr.sk_b);
        pkt.emit(hdr.bth);
        pkt.emit(hdr.aeth);
        pkt.emit(hdr.reth);
        pkt.emit(hdr.sk_rec);
        pkt.emit(hdr.sk_in);    /* a WRITE's merged cells, little-endian (a report's cells) */
        pkt.emit(hdr.sk_in8);
    }
}

/* Every frame shape the translator sends, told apart by opcode and UDP length. Two shapes of
 * the same opcode and length (e.g. an 8-byte Append batch and a Key-Write slot) hash the same
 * bytes, so the first match serves both. */
parser IcrcEgParser(packet_in pkt, out ipipe_headers_t hdr, out ipipe_eg_md_t md,
                    out egress_intrinsic_metadata_t eg_intr_md) {
    state start {
        pkt.extract(eg_intr_md);
        pkt.extract(hdr.bridge);
        transition select(hdr.bridge.kind) {
            KIND_ICRC: parse_ethernet;
            KIND_SKETCH: sk_frame;
            default: accept;   /* forwarded as it is */
        }
    }
    /* A Sketch-Merge WRITE from this pipe's ingress: one record, wide or one cell. */
    state sk_frame {
        pkt.extract(hdr.ethernet);
        pkt.extract(hdr.ipv4);
        pkt.extract(hdr.udp);
        pkt.extract(hdr.bth);
        pkt.extract(hdr.reth);
        pkt.extract(hdr.sk_rec);
        pkt.extract(hdr.sk_o0);
        transition select(hdr.udp.len) {
            UDP_LEN_OF(SK_WRITE_TRANSPORT(SK_STRIDE_WIDE)): sk_frame_wide;
            default: accept;
        }
    }
    state sk_frame_wide {
#if DTA_SK_ROWS > 1
        pkt.extract(hdr.sk_o1);
#endif
#if DTA_SK_ROWS > 2
        pkt.extract(hdr.sk_o2);
#endif
#if DTA_SK_ROWS > 3
        pkt.extract(hdr.sk_o3);
#endif
#if DTA_SK_ROWS > 4
        pkt.extract(hdr.sk_o4);
#endif
#if DTA_SK_ROWS > 5
        pkt.extract(hdr.sk_o5);
#endif
#if DTA_SK_ROWS > 6
        pkt.extract(hdr.sk_o6);
#endif
#if DTA_SK_ROWS > 7
        pkt.extract(hdr.sk_o7);
#endif
        transition accept;
    }
    state parse_ethernet {
        pkt.extract(hdr.ethernet);
        transition select(hdr.ethernet.ether_type) { ETHERTYPE_IPV4: parse_ipv4; default: accept; }
    }
    state parse_ipv4 {
        pkt.extract(hdr.ipv4);
        transition select(hdr.ipv4.ihl, hdr.ipv4.protocol) { (5, IP_PROTO_UDP): parse_udp; default: accept; }
    }
    state parse_udp {
        pkt.extract(hdr.udp);
        transition select(hdr.udp.dst_port) { ROCEV2_PORT: parse_bth; default: accept; }
    }
    state parse_bth {
        pkt.extract(hdr.bth);
        transition select(hdr.bth.opcode, hdr.udp.len) {
            (IB_OP_RC_RDMA_WRITE_ONLY,
             UDP_LEN_OF(IB_BTH_LEN + IB_RETH_LEN + DTA_KW_SLOT_SIZE + IB_ICRC_LEN)): w_kw;
            (IB_OP_RC_RDMA_WRITE_ONLY,
             UDP_LEN_OF(IB_BTH_LEN + IB_RETH_LEN + DTA_AP_STRIDE + IB_ICRC_LEN)): w_ap;
            (IB_OP_RC_RDMA_WRITE_ONLY,
             UDP_LEN_OF(IB_BTH_LEN + IB_RETH_LEN + DTA_PC_CHUNK_BYTES + IB_ICRC_LEN)): w_pc;
            (IB_OP_RC_RDMA_WRITE_ONLY_IMM,
             UDP_LEN_OF(IB_BTH_LEN + IB_RETH_LEN + IB_IMMDT_LEN + DTA_KW_SLOT_SIZE + IB_ICRC_LEN)): wi_kw;
            (IB_OP_RC_RDMA_WRITE_ONLY_IMM,
             UDP_LEN_OF(IB_BTH_LEN + IB_RETH_LEN + IB_IMMDT_LEN + IB_ICRC_LEN)): wi_none;
            (IB_OP_RC_RDMA_WRITE_ONLY_IMM,
             UDP_LEN_OF(IB_BTH_LEN + IB_RETH_LEN + IB_IMMDT_LEN + DTA_AP_STRIDE + IB_ICRC_LEN)): wi_ap;
            (IB_OP_RC_FETCH_ADD, UDP_LEN_OF(IB_BTH_LEN + IB_ATOMIC_ETH_LEN + IB_ICRC_LEN)): fetch_add;
            default: accept;   /* not a shape of ours: counted and dropped */
        }
    }
    state w_kw { pkt.extract(hdr.reth); pkt.extract(hdr.kw_payload); transition accept; }
    state w_ap { pkt.extract(hdr.reth); transition ap_words; }
    state w_pc { pkt.extract(hdr.reth); transition pc_words; }
    state wi_kw { pkt.extract(hdr.reth); pkt.extract(hdr.immdt); pkt.extract(hdr.kw_payload); transition accept; }
    state wi_none { pkt.extract(hdr.reth); pkt.extract(hdr.immdt); transition accept; }
    state wi_ap { pkt.extract(hdr.reth); pkt.extract(hdr.immdt); transition ap_words; }
    state fetch_add { pkt.extract(hdr.atomic); transition accept; }
    state ap_words {
        pkt.extract(hdr.ap_words.next);
#if DTA_AP_BATCH > 1
        pkt.extract(hdr.ap_words.next);
#endif
#if DTA_AP_BATCH > 2
        pkt.extract(hdr.ap_words.next); pkt.extract(hdr.ap_words.next);
#endif
#if DTA_AP_BATCH > 4
        pkt.extract(hdr.ap_words.next); pkt.extract(hdr.ap_words.next);
        pkt.extract(hdr.ap_words.next); pkt.extract(hdr.ap_words.next);
#endif
#if DTA_AP_BATCH > 8
        pkt.extract(hdr.ap_words.next); pkt.extract(hdr.ap_words.next);
        pkt.extract(hdr.ap_words.next); pkt.extract(hdr.ap_words.next);
        pkt.extract(hdr.ap_words.next); pkt.extract(hdr.ap_words.next);
        pkt.extract(hdr.ap_words.next); pkt.extract(hdr.ap_words.next);
#endif
#ifndef DTA_AP_REFERENCE_RING
        pkt.extract(hdr.ap_trailer);
#endif
        transition accept;
    }
    state pc_words {
        pkt.extract(hdr.pc_words.next);
#if DTA_PC_CHUNK_WORDS > 1
        pkt.extract(hdr.pc_words.next);
#endif
#if DTA_PC_CHUNK_WORDS > 2
        pkt.extract(hdr.pc_words.next); pkt.extract(hdr.pc_words.next);
#endif
#if DTA_PC_CHUNK_WORDS > 4
        pkt.extract(hdr.pc_words.next); pkt.extract(hdr.pc_words.next);
        pkt.extract(hdr.pc_words.next); pkt.extract(hdr.pc_words.next);
#endif
        transition accept;
    }
}

control IcrcEgress(inout ipipe_headers_t hdr, inout ipipe_eg_md_t md,
                   in egress_intrinsic_metadata_t eg_intr_md,
                   in egress_intrinsic_metadata_from_parser_t eg_prsr_md,
                   inout egress_intrinsic_metadata_for_deparser_t eg_dprsr_md,
                   inout egress_intrinsic_metadata_for_output_port_t eg_oport_md) {
    /* 0 frames with an ICRC, 1 KIND_ICRC packets of no known shape (dropped). */
    Counter<bit<32>, bit<1>>(2, CounterType_t.PACKETS) icrc_eg_events;

    /* One engine per shape (ICRC_ENGINE and the input macros: dta_roce.p4). */
    ICRC_ENGINE(icrc_kw);
    ICRC_ENGINE(icrc_kw_imm);
    ICRC_ENGINE(icrc_ki);
    ICRC_ENGINE(icrc_imm0);
    ICRC_ENGINE(icrc_ap);
    ICRC_ENGINE(icrc_ap_imm);
    ICRC_ENGINE(icrc_pc);
    ICRC_ENGINE(icrc_sk);
#if DTA_SK_ROWS > 1
    ICRC_ENGINE(icrc_sk1);
#endif

#define SK_REC_ICRC hdr.sk_rec.epoch_le, hdr.sk_rec.merged_le, hdr.sk_rec.expected_le
/* The tail's bytes are the head's: hashed from the head (no dependency on the copy below). */
#define SK_TAIL_ICRC , hdr.sk_rec.epoch_le, hdr.sk_rec.merged_le, hdr.sk_rec.expected_le
#define SK_CELL_ICRC(R) , hdr.sk_o##R.w
#if DTA_SK_ROWS == 1
#define SK_WIDE_ICRC SK_CELL_ICRC(0)
#elif DTA_SK_ROWS == 2
#define SK_WIDE_ICRC SK_CELL_ICRC(0) SK_CELL_ICRC(1)
#elif DTA_SK_ROWS == 3
#define SK_WIDE_ICRC SK_CELL_ICRC(0) SK_CELL_ICRC(1) SK_CELL_ICRC(2)
#elif DTA_SK_ROWS == 4
#define SK_WIDE_ICRC SK_CELL_ICRC(0) SK_CELL_ICRC(1) SK_CELL_ICRC(2) SK_CELL_ICRC(3)
#elif DTA_SK_ROWS == 5
#define SK_WIDE_ICRC SK_CELL_ICRC(0) SK_CELL_ICRC(1) SK_CELL_ICRC(2) SK_CELL_ICRC(3) SK_CELL_ICRC(4)
#elif DTA_SK_ROWS == 6
#define SK_WIDE_ICRC SK_CELL_ICRC(0) SK_CELL_ICRC(1) SK_CELL_ICRC(2) SK_CELL_ICRC(3) SK_CELL_ICRC(4) SK_CELL_ICRC(5)
#elif DTA_SK_ROWS == 7
#define SK_WIDE_ICRC SK_CELL_ICRC(0) SK_CELL_ICRC(1) SK_CELL_ICRC(2) SK_CELL_ICRC(3) SK_CELL_ICRC(4) SK_CELL_ICRC(5) SK_CELL_ICRC(6)
#else
#define SK_WIDE_ICRC SK_CELL_ICRC(0) SK_CELL_ICRC(1) SK_CELL_ICRC(2) SK_CELL_ICRC(3) SK_CELL_ICRC(4) SK_CELL_ICRC(5) SK_CELL_ICRC(6) SK_CELL_ICRC(7)
#endif

    apply {
        if (hdr.bridge.kind == KIND_ICRC || hdr.bridge.kind == KIND_SKETCH) {
            bit<32> crc = 0;
            bool known = true;
            if (hdr.sk_rec.isValid()) {
                /* Layout version 2: the record ends in a copy of its head. */
                hdr.sk_rec_t.setValid();
                hdr.sk_rec_t.epoch_le = hdr.sk_rec.epoch_le;
                hdr.sk_rec_t.merged_le = hdr.sk_rec.merged_le;
                hdr.sk_rec_t.expected_le = hdr.sk_rec.expected_le;
#if DTA_SK_ROWS > 1
                if (hdr.sk_o1.isValid()) {
                    crc = icrc_sk.get({ ICRC_HEADERS, RETH_ICRC, SK_REC_ICRC SK_WIDE_ICRC SK_TAIL_ICRC });
                } else {
                    crc = icrc_sk1.get({ ICRC_HEADERS, RETH_ICRC, SK_REC_ICRC SK_CELL_ICRC(0) SK_TAIL_ICRC });
                }
#else
                crc = icrc_sk.get({ ICRC_HEADERS, RETH_ICRC, SK_REC_ICRC SK_CELL_ICRC(0) SK_TAIL_ICRC });
#endif
            } else if (hdr.atomic.isValid()) {
                crc = icrc_ki.get({ ICRC_HEADERS, hdr.atomic.va_hi, hdr.atomic.va_lo, hdr.atomic.rkey,
                                    hdr.atomic.add, hdr.atomic.compare });
            } else if (hdr.immdt.isValid() && hdr.kw_payload.isValid()) {
                crc = icrc_kw_imm.get({ ICRC_HEADERS, RETH_ICRC, hdr.immdt.imm, KW_ICRC });
            } else if (hdr.immdt.isValid() && hdr.ap_words[0].isValid()) {
                crc = icrc_ap_imm.get({ ICRC_HEADERS, RETH_ICRC, hdr.immdt.imm, AP_WORDS_ICRC AP_TRAILER_ICRC });
            } else if (hdr.immdt.isValid()) {
                crc = icrc_imm0.get({ ICRC_HEADERS, RETH_ICRC, hdr.immdt.imm });
            } else if (hdr.kw_payload.isValid()) {
                crc = icrc_kw.get({ ICRC_HEADERS, RETH_ICRC, KW_ICRC });
            } else if (hdr.ap_words[0].isValid()) {
                crc = icrc_ap.get({ ICRC_HEADERS, RETH_ICRC, AP_WORDS_ICRC AP_TRAILER_ICRC });
            } else if (hdr.pc_words[0].isValid()) {
                crc = icrc_pc.get({ ICRC_HEADERS, RETH_ICRC, PC_WORDS_ICRC });
            } else {
                known = false;
            }
            if (known) {
                /* Least-significant byte first on the wire. */
                hdr.icrc.setValid();
                hdr.icrc.c0 = crc[7:0]; hdr.icrc.c1 = crc[15:8]; hdr.icrc.c2 = crc[23:16]; hdr.icrc.c3 = crc[31:24];
                icrc_eg_events.count(0);
            } else {
                eg_dprsr_md.drop_ctl = 1;
                icrc_eg_events.count(1);
            }
        }
        hdr.bridge.setInvalid();
    }
}

control IcrcEgDeparser(packet_out pkt, inout ipipe_headers_t hdr, in ipipe_eg_md_t md,
                       in egress_intrinsic_metadata_for_deparser_t eg_dprsr_md) {
    apply {
        pkt.emit(hdr.ethernet);
        pkt.emit(hdr.ipv4);
        pkt.emit(hdr.udp);
        pkt.emit(hdr.bth);
        pkt.emit(hdr.reth);
        pkt.emit(hdr.atomic);
        pkt.emit(hdr.immdt);
        pkt.emit(hdr.kw_payload);
        pkt.emit(hdr.ap_words);
        pkt.emit(hdr.ap_trailer);
        pkt.emit(hdr.pc_words);
        pkt.emit(hdr.sk_rec);
        pkt.emit(hdr.sk_o0); pkt.emit(hdr.sk_o1); pkt.emit(hdr.sk_o2); pkt.emit(hdr.sk_o3);
        pkt.emit(hdr.sk_o4); pkt.emit(hdr.sk_o5); pkt.emit(hdr.sk_o6); pkt.emit(hdr.sk_o7);
        pkt.emit(hdr.sk_rec_t);
        pkt.emit(hdr.icrc);
    }
}
