/* dta_translator.p4: the DTA translator for Tofino-1 (P4_16, TNA).
 *
 * Reports (UDP 40040, reference profile variant A or B, extended profile v1) become RoCEv2
 * RC WRITE / FETCH_ADD frames towards collector memory, with the same hashes, layouts and
 * frame bytes as the software translator (translator/src/datapath/pipeline.rs). Collector
 * ACK/NAKs (UDP 4791) resynchronise the per-QP PSN. p4/README.md documents the stage layout,
 * the compile-time knobs below, resource estimates and the limits of this program.
 *
 * Compile: bf-p4c --target tofino --arch tna --std p4-16 [-D...] dta_translator.p4
 *
 * Compile-time knobs (all optional):
 *   DTA_HASH_REFERENCE     reference hash profile (IEEE CRC-32, replica byte appended);
 *                          default: independent profile (one polynomial per role/replica)
 *   DTA_REF_VARIANT_B      reference base header variant B (3 bytes, seqnum); default A
 *   DTA_NO_EXTENDED        do not parse the extended profile
 *   DTA_MAX_N              highest Key-Write/Key-Increment redundancy, 1..8 (default: the
 *                          software translator's, DEFAULT_MAX_REDUNDANCY = 4)
 *   DTA_AP_BATCH           Append entries per WRITE: 1, 2 or 4 (default 4; 8 and 16 do not fit
 *                          Tofino-1's ingress, p4/README.md)
 *   DTA_AP_REFERENCE_RING  Append reference ring format; default sequenced (8 B trailer)
 *   DTA_AP_LISTS           Append lists (register entries, default 256)
 *   DTA_PC_HOPS            Postcarding hops per chunk, 1..5 (default 5; more do not fit
 *                          Tofino-1's egress, p4/README.md)
 *   DTA_PC_CACHE_BITS      log2 of the postcard cache entries (DEFAULT_PC_CACHE_BITS = 15)
 *   DTA_QPS                queue pairs (default 256)
 *   DTA_NO_ICRC            one pipe, ICRC 0 (the collector NIC must not check it); default:
 *                          a second pipe appends the ICRC (dta_icrc_pipe.p4, p4/README.md)
 *   DTA_NO_SKETCH, DTA_SK_ROWS, DTA_SKETCHES, DTA_SK_SWITCHES, DTA_SK_CELL_BITS
 *                          Sketch-Merge in the second pipe (dta_sketch.p4)
 * Keys and values are 4 bytes in both profiles (extended reports with other lengths are
 * counted and dropped); Key-Write slots are therefore 8 bytes.
 */

#include <core.p4>
#include <tna.p4>
#include "../include/dta_constants.p4"
#include "../include/dta_roce.p4"

#ifndef DTA_MAX_N
#define DTA_MAX_N DEFAULT_MAX_REDUNDANCY
#endif
#ifndef DTA_AP_BATCH
#define DTA_AP_BATCH 4
#endif
#ifndef DTA_AP_LISTS
#define DTA_AP_LISTS 256
#endif
#ifndef DTA_PC_HOPS
#define DTA_PC_HOPS 5
#endif
#ifndef DTA_PC_CACHE_BITS
#define DTA_PC_CACHE_BITS DEFAULT_PC_CACHE_BITS
#endif
#ifndef DTA_QPS
#define DTA_QPS 256
#endif

#if DTA_MAX_N < 1 || DTA_MAX_N > MAX_REDUNDANCY
#error "DTA_MAX_N must be 1..MAX_REDUNDANCY"
#endif
#if DTA_AP_BATCH != 1 && DTA_AP_BATCH != 2 && DTA_AP_BATCH != 4
#error "DTA_AP_BATCH must be 1, 2 or 4 on Tofino-1 (batch 8 needs 14 ingress stages, 16 needs 22; p4/README.md)"
#endif
#if DTA_PC_HOPS < 1 || DTA_PC_HOPS > 5
#error "DTA_PC_HOPS must be 1..5 on Tofino-1 (6, 7 and 8 hops need 13 egress stages; p4/README.md)"
#endif
#if defined(DTA_HASH_REFERENCE) && DTA_PC_HOPS != REF_HOPS
#error "the reference hash profile has exactly 5 postcard hops"
#endif

/* Chunk size: the smallest power of two >= 4 * hops (proto::layout::PostcardLayout). */
#if DTA_PC_HOPS == 1
#define DTA_PC_CHUNK_WORDS 1
#define DTA_PC_CHUNK_SHIFT 2
#elif DTA_PC_HOPS == 2
#define DTA_PC_CHUNK_WORDS 2
#define DTA_PC_CHUNK_SHIFT 3
#elif DTA_PC_HOPS <= 4
#define DTA_PC_CHUNK_WORDS 4
#define DTA_PC_CHUNK_SHIFT 4
#else
#define DTA_PC_CHUNK_WORDS 8
#define DTA_PC_CHUNK_SHIFT 5
#endif
#define DTA_PC_CHUNK_BYTES (4 * DTA_PC_CHUNK_WORDS)

#define DTA_VALUE_LEN 4
#ifdef DTA_REF_VARIANT_B
#define DTA_REF_BASE_LEN DTA_REF_BASE_LEN_B
#else
#define DTA_REF_BASE_LEN DTA_REF_BASE_LEN_A
#endif
#define DTA_KW_SLOT_SIZE 8
#ifdef DTA_AP_REFERENCE_RING
#define DTA_AP_STRIDE (DTA_AP_BATCH * DTA_VALUE_LEN)
#else
#define DTA_AP_STRIDE (DTA_AP_BATCH * DTA_VALUE_LEN + AP_TRAILER_LEN)
#endif

typedef bit<16> qp_idx_t;
typedef bit<16> list_idx_t;
typedef bit<DTA_PC_CACHE_BITS> pc_idx_t;

/* Bridged-metadata kinds (ingress -> egress). */
const bit<8> KIND_FORWARD  = 0;
const bit<8> KIND_KEYWRITE = 1;
const bit<8> KIND_APPEND   = 2;
const bit<8> KIND_KEYINC   = 3;
const bit<8> KIND_POSTCARD = 4;
const bit<8> KIND_RESPONSE = 5;
const bit<8> KIND_ICRC     = 6;   /* a finished frame for the ICRC pipe (dta_icrc_pipe.p4) */

/* Report headers the parser accepts (ig_md_t.rpt); tbl_normalize checks each one's UDP
 * length. */
const bit<8> RPT_NONE   = 0;
const bit<8> RPT_REF_KW = 1;
const bit<8> RPT_REF_KI = 2;
const bit<8> RPT_REF_AP = 3;
const bit<8> RPT_REF_PC = 4;
const bit<8> RPT_EXT_KW = 5;
const bit<8> RPT_EXT_KI = 6;
const bit<8> RPT_EXT_AP = 7;
const bit<8> RPT_EXT_PC = 8;

/* What the egress QP registers do with a packet (eg_md_t.qp_op). */
const bit<2> QP_OP_NONE   = 0;   /* forwarded, or a response that moves nothing */
const bit<2> QP_OP_SEND   = 1;   /* a request: pass the window, take a PSN */
const bit<2> QP_OP_RESYNC = 2;   /* a fresh PSN-sequence-error NAK: set the PSN, open the window */

/* Ingress drop reasons (Counter index). */
const bit<8> DROP_BAD_REDUNDANCY = 1;
const bit<8> DROP_EXT_LENGTH     = 2;
const bit<8> DROP_NO_ROUTE       = 3;
const bit<8> DROP_UNKNOWN_LIST   = 4;
const bit<8> DROP_BAD_HOP        = 5;
const bit<8> DROP_BAD_VERSION    = 6;
const bit<8> DROP_UNKNOWN_QP     = 7;
const bit<8> DROP_PC_SHORT_ON_EVICT = 8;
const bit<8> HELD_APPEND         = 9;
const bit<8> HELD_POSTCARD       = 10;
const bit<8> DROP_MALFORMED      = 11;

/* ------------------------------------------------------------------ headers
 * Ethernet, IPv4, UDP and the InfiniBand headers: dta_roce.p4. */

#ifdef DTA_REF_VARIANT_B
header dta_ref_h { bit<8> opcode; bit<8> seqnum; bit<1> immediate; bit<1> retransmitable; bit<6> reserved; }
#else
header dta_ref_h { bit<8> opcode; bit<1> immediate; bit<7> reserved; }
#endif
header ref_kw_h { bit<8> n; bit<32> key; bit<32> data; }
header ref_ki_h { bit<8> n; bit<32> key; bit<64> counter; }
header ref_ap_h { bit<32> list_id; bit<32> data; }
header ref_pc_h { bit<32> flow; bit<8> hop_num; bit<32> data; }

header dta_ext_h {
    bit<8> magic_version; bit<8> opcode; bit<1> immediate; bit<1> retransmittable;
    bit<2> prio; bit<4> reserved; bit<8> reserved2; bit<32> seq;
}
header ext_kw_h { bit<8> n; bit<8> key_len; bit<8> val_len; bit<8> reserved; bit<32> key; bit<32> value; }
header ext_ki_h { bit<8> n; bit<8> key_len; bit<16> reserved; bit<64> delta; bit<32> key; }
header ext_ap_h { bit<32> list_id; bit<8> val_len; bit<24> reserved; bit<32> value; }
header ext_pc_h { bit<8> hop; bit<8> path_len; bit<8> key_len; bit<8> reserved; bit<32> value; bit<32> key; }

header word_h { bit<32> w; }
header ap_trailer_h { bit<8> seq0; bit<8> seq1; bit<8> seq2; bit<8> seq3; bit<32> count_le; }

/* Ingress -> egress: a common part, then one part per kind, so the egress parser's longest
 * path (Append batch 16 with its trailer) stays within Tofino-1's 160-byte parse depth: one
 * fixed bridge carrying every kind's fields made it 167 B (175 B sequenced). */
header bridge_h {
    bit<8> kind;
    qp_idx_t qp;
    bit<8> n;            /* redundancy N (Key-Write / Key-Increment) */
    bit<7> pad0;
    bit<1> immediate;
    bit<32> key;         /* memory-ready key bytes, the chunk's flow, or the Append list ID */
}
header bridge_kv_h {     /* Key-Write, Key-Increment */
    bit<64> data;        /* Key-Write: the memory-ready value bytes in the low 32 bits;
                          * Key-Increment: the delta. One field for both keeps the egress
                          * parser's longest path (which it computes over the bridge headers
                          * of every kind) within its 160-byte depth with 16 Append words. */
}
header bridge_ap_h {     /* Append */
    bit<32> va_hi;       /* the batch's address */
    bit<32> va_lo;       /* (the global list ID, the immediate data, rides in bridge.key: the
                          * egress parser's 160-byte depth has no room for it with 16 words) */
}
header bridge_pc_h {     /* Postcarding */
    bit<8> present;      /* hops present in the chunk */
}

struct headers_t {
    bridge_h bridge;
    bridge_kv_h bridge_kv;
    bridge_ap_h bridge_ap;
    bridge_pc_h bridge_pc;
    ethernet_h ethernet;
    ipv4_h ipv4;
    udp_h udp;
    dta_ref_h ref;
    ref_kw_h ref_kw;
    ref_ki_h ref_ki;
    ref_ap_h ref_ap;
    ref_pc_h ref_pc;
    dta_ext_h ext;
    ext_kw_h ext_kw;
    ext_ki_h ext_ki;
    ext_ap_h ext_ap;
    ext_pc_h ext_pc;
    bth_h bth;
    aeth_h aeth;
    reth_h reth;
    atomic_eth_h atomic;
    immdt_h immdt;
    kw_payload_h kw_payload;
    word_h[DTA_AP_BATCH] ap_words;
    ap_trailer_h ap_trailer;
    word_h[DTA_PC_CHUNK_WORDS] pc_words;
    icrc_h icrc;
}

struct ig_md_t {
    bit<8> op;           /* DTA opcode, 0 = not a report */
    bit<8> kind;         /* the bridged kind the report becomes (KIND_*) */
    bit<8> n;
    bit<1> immediate;
    bit<32> key;
    bit<32> value;
    bit<64> delta;
    bit<32> list_id;
    bit<8> hop;          /* 0-based */
    bit<8> path_len;     /* 0 = unknown */
    bit<8> drop_reason;
    bit<8> rpt;             /* which report header the parser accepted: RPT_* (0: none) */
    list_idx_t lidx;
    bit<32> list_base_hi;
    bit<32> list_base_lo;
    bit<32> list_base_hi1;   /* list_base_hi + 1, used when the low half carries */
    bit<32> list_carry_at;   /* smallest batch offset whose address carries into the high half */
    bit<32> ap_carry_d;      /* ap_off - list_carry_at: bit 31 set = no carry */
    bit<32> last_off;
    bit<8> ap_pos;
    bit<8> ap_imm;
    bit<32> ap_off;
    bit<32> ap_seq;
    pc_idx_t pc_idx;
    bit<32> pc_old_flow;
    bit<16> pc_done;         /* 1: this hop completes the path (same flow) */
    bit<1> pc_start_complete;  /* a fresh entry is already complete (single-hop path) */
    bit<1> pc_collision;
    bit<16> pc_bit;
    bit<16> pc_full;
    bit<16> pc_full_xor_bit;
    bit<16> pc_start_mask;
    bit<16> pc_old_mask;
    bit<1> pc_evict;
    bit<1> pc_complete;
    MulticastGroupId_t pc_grp;
    PortId_t port;
}

struct eg_md_t {
    bit<16> rid;
    bit<8> rid_minus_n;     /* replica index - N: bit 7 set = a FETCH_ADD replica (rid < N) */
    bit<2> qp_op;           /* what the QP's PSN and window registers do: QP_OP_* */
    bit<32> slot;
    bit<32> checksum;
    bit<32> base_hi;
    bit<32> base_lo;
    bit<32> base_hi1;    /* base_hi + 1 */
    bit<32> carry_at;    /* smallest offset whose low-half add carries (2^30 if none) */
    bit<32> off;         /* byte offset of the slot or chunk */
    bit<32> carry_d;     /* off - carry_at: bit 31 set = no carry */
    bit<32> va_hi;
    bit<32> va_lo;
    bit<32> nak_psn;     /* the response's point on the PSN line (nak_reg) */
    bit<1> nak_fresh;
    bit<32> slot_mask;
    bit<32> ack_every_m1;
    bit<32> window;
    bit<32> psn;         /* PSN << 8 (psn_reg's representation) */
    bit<1> ack_req;
    bit<1> in_window;
    bit<32> payload_len;
    bit<8> syndrome_kind;
    bit<24> remote_qpn;
    bit<32> rkey;
}

struct digest_qp_error_t { qp_idx_t qp; bit<8> syndrome; bit<24> psn; }

/* ------------------------------------------------------------ ingress parser */

parser IgParser(packet_in pkt, out headers_t hdr, out ig_md_t md,
                out ingress_intrinsic_metadata_t ig_intr_md) {
    state start {
        pkt.extract(ig_intr_md);
        pkt.advance(PORT_METADATA_SIZE);
        md.op = 0; md.n = 0; md.immediate = 0; md.key = 0; md.value = 0; md.delta = 0;
        md.list_id = 0; md.hop = 0; md.path_len = 0; md.drop_reason = 0; md.kind = 0; md.rpt = 0;
        md.pc_collision = 0; md.pc_evict = 0; md.pc_complete = 0; md.pc_done = 0; md.pc_old_mask = 0;
        transition parse_ethernet;
    }
    state parse_ethernet {
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
            DTA_PORT: parse_dta;
            ROCEV2_PORT: parse_bth;
            default: accept;
        }
    }
    state parse_dta {
        transition select(pkt.lookahead<bit<8>>()) {
#ifndef DTA_NO_EXTENDED
            DTA_EXT_MAGIC_VERSION: parse_ext;
#endif
            DTA_OP_KEY_WRITE &&& 0xF0: parse_ref;   /* 0x00..0x0F: reference opcodes */
            default: bad_version;                     /* 0xD0, 0xD2..: counted */
        }
    }
    /* Report validation happens here, in the parser's match units, instead of in ingress
     * gateways (bf-p4c rejected the boolean expressions and comparisons of the earlier
     * ingress checks): PROTOCOL.md section 6.3; extended reserved bits and bytes zero,
     * priority 3 invalid. Exactly one report per datagram, so the UDP length must be the
     * report's: that is tbl_normalize in ingress (a select on udp.len here needs a parser
     * match register from the UDP header to the report's, and there are not enough).
     * A state that rejects a report records the reason and accepts; ingress drops and counts. */
    state parse_ref {
        pkt.extract(hdr.ref);
        transition select(hdr.ref.opcode) {
            DTA_OP_KEY_WRITE: parse_ref_kw;
            DTA_OP_KEY_INCREMENT: parse_ref_ki;
            DTA_OP_APPEND: parse_ref_ap;
            DTA_OP_POSTCARD: parse_ref_pc;
            default: bad_version;
        }
    }
    state parse_ref_kw {
        pkt.extract(hdr.ref_kw);
        md.rpt = RPT_REF_KW;
        transition accept;
    }
    state parse_ref_ki {
        pkt.extract(hdr.ref_ki);
        md.rpt = RPT_REF_KI;
        transition accept;
    }
    state parse_ref_ap {
        pkt.extract(hdr.ref_ap);
        md.rpt = RPT_REF_AP;
        transition accept;
    }
    state parse_ref_pc {
        pkt.extract(hdr.ref_pc);
        md.rpt = RPT_REF_PC;
        transition select(hdr.ref_pc.hop_num) {
            0: malformed;
            default: accept;
        }
    }
    state parse_ext {
        pkt.extract(hdr.ext);
        transition select(hdr.ext.prio, hdr.ext.reserved, hdr.ext.reserved2, hdr.ext.opcode) {
            (3, _, _, _): malformed;
            (_, 0, 0, DTA_OP_KEY_WRITE): parse_ext_kw;
            (_, 0, 0, DTA_OP_KEY_INCREMENT): parse_ext_ki;
            (_, 0, 0, DTA_OP_APPEND): parse_ext_ap;
            (_, 0, 0, DTA_OP_POSTCARD): parse_ext_pc;
            (_, 0, 0, _): bad_version;
            default: malformed;
        }
    }
    /* Keys and values are 4 bytes here (the file header); other lengths: DROP_EXT_LENGTH. */
    state parse_ext_kw {
        pkt.extract(hdr.ext_kw);
        md.rpt = RPT_EXT_KW;
        transition select(hdr.ext_kw.reserved, hdr.ext_kw.key_len, hdr.ext_kw.val_len) {
            (0, 4, DTA_VALUE_LEN): accept;
            (0, _, _): ext_length;
            default: malformed;
        }
    }
    state parse_ext_ki {
        pkt.extract(hdr.ext_ki);
        md.rpt = RPT_EXT_KI;
        transition select(hdr.ext_ki.reserved, hdr.ext_ki.key_len) {
            (0, 4): accept;
            (0, _): ext_length;
            default: malformed;
        }
    }
    state parse_ext_ap {
        pkt.extract(hdr.ext_ap);
        md.rpt = RPT_EXT_AP;
        transition select(hdr.ext_ap.reserved, hdr.ext_ap.val_len) {
            (0, DTA_VALUE_LEN): accept;
            (0, _): ext_length;
            default: malformed;
        }
    }
    /* Path length at most DTA_EXT_MAX_PATH_LEN (16): 0..15 and 16. A hop at or beyond the
     * path length has no tbl_pc_hop entry (DROP_BAD_HOP). */
    state parse_ext_pc {
        pkt.extract(hdr.ext_pc);
        md.rpt = RPT_EXT_PC;
        transition select(hdr.ext_pc.reserved, hdr.ext_pc.path_len, hdr.ext_pc.key_len) {
            (0, 0x00 &&& 0xF0, 4): accept;
            (0, DTA_EXT_MAX_PATH_LEN, 4): accept;
            (0, 0x00 &&& 0xF0, _): ext_length;
            (0, DTA_EXT_MAX_PATH_LEN, _): ext_length;
            default: malformed;
        }
    }
    state malformed { md.drop_reason = DROP_MALFORMED; transition accept; }
    state ext_length { md.drop_reason = DROP_EXT_LENGTH; transition accept; }
    state bad_version { md.drop_reason = DROP_BAD_VERSION; transition accept; }
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

/* ------------------------------------------------------------------ ingress */

control Ingress(inout headers_t hdr, inout ig_md_t md,
                in ingress_intrinsic_metadata_t ig_intr_md,
                in ingress_intrinsic_metadata_from_parser_t ig_prsr_md,
                inout ingress_intrinsic_metadata_for_deparser_t ig_dprsr_md,
                inout ingress_intrinsic_metadata_for_tm_t ig_tm_md) {

    Counter<bit<32>, bit<8>>(256, CounterType_t.PACKETS) ig_events;

    action drop(bit<8> reason) {
        md.drop_reason = reason;
        ig_dprsr_md.drop_ctl = 1;
    }


    /* ---- plain forwarding of everything that is not DTA or a collector response ---- */
    action forward(PortId_t port) {
        ig_tm_md.ucast_egress_port = port;
        hdr.ipv4.ttl = hdr.ipv4.ttl - 1;
    }
    action no_route() { ig_dprsr_md.drop_ctl = 1; }
#ifndef DTA_NO_ICRC
    /* A frame the egress built, back from the loop port: for the ICRC pipe, with the TTL the
     * egress gave it (tbl_forward's route to the collector's pipe-1 port decremented it). */
    action icrc_mark() { hdr.bridge.kind = KIND_ICRC; hdr.ipv4.ttl = 64; }
    table tbl_icrc_loop {
        key = { ig_intr_md.ingress_port : exact; }
        actions = { icrc_mark; NoAction; }
        const default_action = NoAction();
        size = 16;
    }
#endif
    table tbl_forward {
        key = { hdr.ipv4.dst : exact; }
        actions = { forward; no_route; }
        default_action = no_route();
        size = 1024;
    }

    /* ---- normalisation: every profile becomes (op, n, key, value, ...) ---- */
    /* Reference Key-Write / Key-Increment keys are hashed byte-reversed (§4.3 of PROTOCOL). */
    action norm_ref_kw() {
        md.kind = KIND_KEYWRITE;
        md.op = DTA_OP_KEY_WRITE; md.n = hdr.ref_kw.n;
        md.key = hdr.ref_kw.key[7:0] ++ hdr.ref_kw.key[15:8] ++ hdr.ref_kw.key[23:16] ++ hdr.ref_kw.key[31:24];
        md.value = hdr.ref_kw.data; md.delta = 32w0 ++ hdr.ref_kw.data;
        md.immediate = hdr.ref.immediate;
    }
    action norm_ref_ki() {
        md.kind = KIND_KEYINC;
        md.op = DTA_OP_KEY_INCREMENT; md.n = hdr.ref_ki.n;
        md.key = hdr.ref_ki.key[7:0] ++ hdr.ref_ki.key[15:8] ++ hdr.ref_ki.key[23:16] ++ hdr.ref_ki.key[31:24];
        md.delta = hdr.ref_ki.counter;
        md.immediate = hdr.ref.immediate;
    }
    /* Reference Append data is byte-reversed into memory. */
    action norm_ref_ap() {
        md.kind = KIND_APPEND;
        md.op = DTA_OP_APPEND; md.list_id = hdr.ref_ap.list_id;
        md.value = hdr.ref_ap.data[7:0] ++ hdr.ref_ap.data[15:8] ++ hdr.ref_ap.data[23:16] ++ hdr.ref_ap.data[31:24];
        md.immediate = hdr.ref.immediate;
    }
    /* Reference postcards: flow as received, hopNum 1-based, no path length. */
    action norm_ref_pc() {
        md.kind = KIND_POSTCARD;
        md.op = DTA_OP_POSTCARD; md.key = hdr.ref_pc.flow;
        md.hop = hdr.ref_pc.hop_num - 1; md.path_len = 0; md.value = hdr.ref_pc.data;
        md.immediate = hdr.ref.immediate;
    }
    action norm_ext_kw() {
        md.kind = KIND_KEYWRITE;
        md.op = DTA_OP_KEY_WRITE; md.n = hdr.ext_kw.n; md.key = hdr.ext_kw.key;
        md.value = hdr.ext_kw.value; md.delta = 32w0 ++ hdr.ext_kw.value;
        md.immediate = hdr.ext.immediate;
    }
    action norm_ext_ki() {
        md.kind = KIND_KEYINC;
        md.op = DTA_OP_KEY_INCREMENT; md.n = hdr.ext_ki.n; md.key = hdr.ext_ki.key;
        md.delta = hdr.ext_ki.delta; md.immediate = hdr.ext.immediate;
    }
    action norm_ext_ap() {
        md.kind = KIND_APPEND;
        md.op = DTA_OP_APPEND; md.list_id = hdr.ext_ap.list_id; md.value = hdr.ext_ap.value;
        md.immediate = hdr.ext.immediate;
    }
    action norm_ext_pc() {
        md.kind = KIND_POSTCARD;
        md.op = DTA_OP_POSTCARD; md.key = hdr.ext_pc.key; md.hop = hdr.ext_pc.hop;
        md.path_len = hdr.ext_pc.path_len; md.value = hdr.ext_pc.value;
        md.immediate = hdr.ext.immediate;
    }

    /* One table normalises every report and checks its UDP length (one report per datagram,
     * so the length is the report's own): a length other than the report header's is
     * DROP_MALFORMED. One lookup instead of a chain of validity tests saves stages. */
    action report_len_bad() { md.drop_reason = DROP_MALFORMED; }
    table tbl_normalize {
        key = { md.rpt : exact; hdr.udp.len : exact; }
        actions = {
            norm_ref_kw; norm_ref_ki; norm_ref_ap; norm_ref_pc;
            norm_ext_kw; norm_ext_ki; norm_ext_ap; norm_ext_pc; report_len_bad;
        }
        const entries = {
            (RPT_REF_KW, UDP_HEADER_LEN + DTA_REF_BASE_LEN + DTA_REF_KW_LEN) : norm_ref_kw();
            (RPT_REF_KI, UDP_HEADER_LEN + DTA_REF_BASE_LEN + DTA_REF_KI_LEN) : norm_ref_ki();
            (RPT_REF_AP, UDP_HEADER_LEN + DTA_REF_BASE_LEN + DTA_REF_AP_LEN) : norm_ref_ap();
            (RPT_REF_PC, UDP_HEADER_LEN + DTA_REF_BASE_LEN + DTA_REF_PC_LEN) : norm_ref_pc();
            (RPT_EXT_KW, UDP_HEADER_LEN + DTA_EXT_BASE_LEN + DTA_EXT_KW_FIXED + 4 + DTA_VALUE_LEN) : norm_ext_kw();
            (RPT_EXT_KI, UDP_HEADER_LEN + DTA_EXT_BASE_LEN + DTA_EXT_KI_FIXED + 4) : norm_ext_ki();
            (RPT_EXT_AP, UDP_HEADER_LEN + DTA_EXT_BASE_LEN + DTA_EXT_AP_FIXED + DTA_VALUE_LEN) : norm_ext_ap();
            (RPT_EXT_PC, UDP_HEADER_LEN + DTA_EXT_BASE_LEN + DTA_EXT_PC_FIXED + 4) : norm_ext_pc();
        }
        const default_action = report_len_bad();
        size = 16;
    }

    /* ---- Key-Write / Key-Increment: one multicast copy per replica, rid = replica ---- */
    action kv_replicate(MulticastGroupId_t grp, qp_idx_t qp) {
        ig_tm_md.mcast_grp_a = grp;
        hdr.bridge.qp = qp;
    }
    table tbl_kv_route {
        key = { hdr.ipv4.dst : exact; md.op : exact; md.n : exact; md.immediate : exact; }
        actions = { kv_replicate; drop; }
        default_action = drop(DROP_NO_ROUTE);
        size = 1024;
    }

    /* ---- Append ---- */
    /* The list's base address comes as two halves plus the high half + 1 and the first batch
     * offset whose low half carries (the control plane computes them: `carry_at` is
     * 2^32 - base_lo, or 2^30 when no offset of the list reaches it). */
    action ap_list(list_idx_t list_idx, qp_idx_t qp, PortId_t port, bit<32> base_hi,
                   bit<32> base_lo, bit<32> base_hi1, bit<32> carry_at, bit<32> last_off) {
        md.lidx = list_idx; hdr.bridge.qp = qp; md.port = port;
        md.list_base_hi = base_hi; md.list_base_lo = base_lo; md.list_base_hi1 = base_hi1;
        md.list_carry_at = carry_at; md.last_off = last_off;
    }
    action ap_addr() {
        hdr.bridge_ap.va_lo = md.list_base_lo + md.ap_off;
        md.ap_carry_d = md.ap_off - md.list_carry_at;
    }
    table tbl_ap_list {
        key = { md.list_id : exact; }
        actions = { ap_list; drop; }
        default_action = drop(DROP_UNKNOWN_LIST);
        size = DTA_AP_LISTS;
    }

    /* Position in the current batch: 0, 1, ..., B-1, 0, ... */
    Register<bit<8>, list_idx_t>(DTA_AP_LISTS, 0) ap_pos_reg;
    RegisterAction<bit<8>, list_idx_t, bit<8>>(ap_pos_reg) ap_pos_next = {
        void apply(inout bit<8> value, out bit<8> rv) {
            rv = value;
            if (value >= DTA_AP_BATCH - 1) { value = 0; } else { value = value + 1; }
        }
    };
    /* OR of the immediate flags of the batch; read and cleared by the last entry. */
    Register<bit<8>, list_idx_t>(DTA_AP_LISTS, 0) ap_imm_reg;
    /* One action for both cases (a held entry ORs its flag in; the batch's last entry reads
     * and clears): an execute on its own in a branch would need a table of its own. */
    RegisterAction<bit<8>, list_idx_t, bit<8>>(ap_imm_reg) ap_imm_update = {
        void apply(inout bit<8> value, out bit<8> rv) {
            if (md.ap_pos == DTA_AP_BATCH - 1) {
                rv = value | (bit<8>)md.immediate;
                value = 0;
            } else {
                value = value | (bit<8>)md.immediate;
                rv = 0;
            }
        }
    };
    /* Byte offset of the next batch slot inside the list; wraps to 0 after the last slot, so a
     * wrap never writes slot 0 twice (the reference's rollover defect). */
    Register<bit<32>, list_idx_t>(DTA_AP_LISTS, 0) ap_off_reg;
    RegisterAction<bit<32>, list_idx_t, bit<32>>(ap_off_reg) ap_off_next = {
        void apply(inout bit<32> value, out bit<32> rv) {
            rv = value;
            if (value >= md.last_off) { value = 0; } else { value = value + DTA_AP_STRIDE; }
        }
    };
    /* Batch sequence number (1-based) for the sequenced trailer. */
    Register<bit<32>, list_idx_t>(DTA_AP_LISTS, 0) ap_seq_reg;
    RegisterAction<bit<32>, list_idx_t, bit<32>>(ap_seq_reg) ap_seq_next = {
        void apply(inout bit<32> value, out bit<32> rv) { value = value + 1; rv = value; }
    };

#define AP_ENTRY(J) \
    Register<bit<32>, list_idx_t>(DTA_AP_LISTS, 0) ap_e##J##_reg; \
    RegisterAction<bit<32>, list_idx_t, bit<32>>(ap_e##J##_reg) ap_e##J##_put = { \
        void apply(inout bit<32> value) { value = md.value; } \
    }; \
    RegisterAction<bit<32>, list_idx_t, bit<32>>(ap_e##J##_reg) ap_e##J##_get = { \
        void apply(inout bit<32> value, out bit<32> rv) { rv = value; } \
    };
#define AP_ENTRY_APPLY(J) \
    if (md.ap_pos == J) { ap_e##J##_put.execute(md.lidx); } \
    else if (md.ap_pos == DTA_AP_BATCH - 1) { hdr.ap_words[J].setValid(); hdr.ap_words[J].w = ap_e##J##_get.execute(md.lidx); }

#if DTA_AP_BATCH > 1
    AP_ENTRY(0)
#endif
#if DTA_AP_BATCH > 2
    AP_ENTRY(1) AP_ENTRY(2)
#endif
#if DTA_AP_BATCH > 4
    AP_ENTRY(3) AP_ENTRY(4) AP_ENTRY(5) AP_ENTRY(6)
#endif
#if DTA_AP_BATCH > 8
    AP_ENTRY(7) AP_ENTRY(8) AP_ENTRY(9) AP_ENTRY(10) AP_ENTRY(11) AP_ENTRY(12) AP_ENTRY(13) AP_ENTRY(14)
#endif

    /* ---- Postcarding ---- */
    action pc_route(qp_idx_t qp, MulticastGroupId_t grp) { hdr.bridge.qp = qp; md.pc_grp = grp; }
    table tbl_pc_route {
        key = { hdr.ipv4.dst : exact; }
        actions = { pc_route; drop; }
        default_action = drop(DROP_NO_ROUTE);
        size = 256;
    }
    /* Per (hop, path length): the hop's bit, the mask of a complete path, and the mask a fresh
     * entry starts with (0 when the path is a single hop: it completes at once). Filled by the
     * control plane for hop < DTA_PC_HOPS and path_len <= DTA_PC_HOPS; a miss is a bad hop. */
    action pc_hop(bit<16> hop_bit, bit<16> full, bit<16> full_xor_bit, bit<16> start_mask,
                  bit<1> start_complete) {
        md.pc_bit = hop_bit; md.pc_full = full; md.pc_full_xor_bit = full_xor_bit;
        md.pc_start_mask = start_mask; md.pc_start_complete = start_complete;
    }
    table tbl_pc_hop {
        key = { md.hop : exact; md.path_len : exact; }
        actions = { pc_hop; drop; }
        default_action = drop(DROP_BAD_HOP);
        size = 256;
    }

#ifdef DTA_HASH_REFERENCE
    Hash<bit<32>>(HashAlgorithm_t.CUSTOM, CRC32_CUSTOM(REF_POLY_CRC32)) pc_cache_hash;
#else
    Hash<bit<32>>(HashAlgorithm_t.CUSTOM, CRC32_CUSTOM(IND_POLY_CACHE)) pc_cache_hash;
#endif

    /* The flow that owns each cache entry; every postcard takes the entry. */
    Register<bit<32>, pc_idx_t>(1 << DTA_PC_CACHE_BITS, 0) pc_flow_reg;
    RegisterAction<bit<32>, pc_idx_t, bit<32>>(pc_flow_reg) pc_flow_swap = {
        void apply(inout bit<32> value, out bit<32> rv) { rv = value; value = md.key; }
    };
    /* A copy of pc_flow_reg whose stateful ALU compares: 1 when the entry belonged to another
     * flow (a collision). pc_flow_reg keeps the old flow for the eviction; the two run in the
     * same stage (an XOR and a test after pc_flow_reg took two more). */
    Register<bit<32>, pc_idx_t>(1 << DTA_PC_CACHE_BITS, 0) pc_owner_reg;
    RegisterAction<bit<32>, pc_idx_t, bit<1>>(pc_owner_reg) pc_owner_swap = {
        void apply(inout bit<32> value, out bit<1> rv) {
            if (value == md.key) { rv = 0; } else { rv = 1; }
            value = md.key;
        }
    };
    /* Hops received for the entry's flow. A collision starts a fresh mask (the old flow's words
     * are emitted to the old flow's chunk); a completed path clears it (the counter is reset
     * after emission, unlike the reference). */
    Register<bit<16>, pc_idx_t>(1 << DTA_PC_CACHE_BITS, 0) pc_mask_reg;
    /* Two actions, chosen by a table on md.pc_collision, so that each reads at most the two
     * PHV inputs a stateful ALU has (the hop's bit and the complete mask without it). */
    /* Same flow: rv = 1 when this hop completes the path (every other hop was there). */
    RegisterAction<bit<16>, pc_idx_t, bit<16>>(pc_mask_reg) pc_mask_update = {
        void apply(inout bit<16> value, out bit<16> rv) {
            if (value == md.pc_full_xor_bit) {
                value = 0;
                rv = 1;
            } else {
                value = value | md.pc_bit;
                rv = 0;
            }
        }
    };
    /* A collision starts the entry afresh: the hop's bit, or nothing when the hop alone is
     * the whole path (full XOR bit = 0: it completes at once). */
    RegisterAction<bit<16>, pc_idx_t, bit<16>>(pc_mask_reg) pc_mask_restart = {
        void apply(inout bit<16> value, out bit<16> rv) {
            rv = value;
            if (md.pc_full_xor_bit == 0) {
                value = 0;
            } else {
                value = md.pc_bit;
            }
        }
    };
    action pc_mask_continue() { md.pc_done = pc_mask_update.execute(md.pc_idx); }
    action pc_mask_collide() { md.pc_old_mask = pc_mask_restart.execute(md.pc_idx); }
    table tbl_pc_mask {
        key = { md.pc_collision : exact; }
        actions = { pc_mask_continue; pc_mask_collide; }
        const entries = {
            0 : pc_mask_continue();
            1 : pc_mask_collide();
        }
        size = 2;
    }

#define PC_HOP(I) \
    Register<bit<32>, pc_idx_t>(1 << DTA_PC_CACHE_BITS, 0) pc_v##I##_reg; \
    RegisterAction<bit<32>, pc_idx_t, bit<32>>(pc_v##I##_reg) pc_v##I##_swap = { \
        void apply(inout bit<32> value, out bit<32> rv) { rv = value; value = md.value; } \
    }; \
    RegisterAction<bit<32>, pc_idx_t, bit<32>>(pc_v##I##_reg) pc_v##I##_take = { \
        void apply(inout bit<32> value, out bit<32> rv) { rv = value; value = 0; } \
    };
/* Hop I's cell, chosen by a constant ternary table on (hop, complete, evict) instead of nested
 * gateways (bf-p4c: "gateway condition too complex"): the reporting hop stores its value
 * (returning the old flow's word on an eviction, or handing its own value straight to the
 * chunk on completion); other hops are read and cleared when the entry is emitted. */
#define PC_CELL(I) \
    action pc_own_take_##I() { pc_v##I##_take.execute(md.pc_idx); hdr.pc_words[I].w = md.value; } \
    action pc_own_swap_##I() { hdr.pc_words[I].w = pc_v##I##_swap.execute(md.pc_idx); } \
    action pc_take_##I() { hdr.pc_words[I].w = pc_v##I##_take.execute(md.pc_idx); } \
    action pc_none_##I() { hdr.pc_words[I].w = 0; } \
    table tbl_pc_cell_##I { \
        key = { md.hop : ternary; md.pc_complete : ternary; md.pc_evict : ternary; } \
        actions = { pc_own_take_##I; pc_own_swap_##I; pc_take_##I; pc_none_##I; } \
        const entries = { \
            (I, 1, 0) : pc_own_take_##I(); \
            (I, _, _) : pc_own_swap_##I(); \
            (_, _, 1) : pc_take_##I(); \
            (_, 1, _) : pc_take_##I(); \
        } \
        const default_action = pc_none_##I(); \
        size = 4; \
    }
#define PC_CELL_APPLY(I) hdr.pc_words[I].setValid(); tbl_pc_cell_##I.apply();

    PC_HOP(0)
    PC_CELL(0)
#if DTA_PC_HOPS > 1
    PC_HOP(1)
    PC_CELL(1)
#endif
#if DTA_PC_HOPS > 2
    PC_HOP(2)
    PC_CELL(2)
#endif
#if DTA_PC_HOPS > 3
    PC_HOP(3)
    PC_CELL(3)
#endif
#if DTA_PC_HOPS > 4
    PC_HOP(4)
    PC_CELL(4)
#endif
#if DTA_PC_HOPS > 5
    PC_HOP(5)
    PC_CELL(5)
#endif
#if DTA_PC_HOPS > 6
    PC_HOP(6)
    PC_CELL(6)
#endif
#if DTA_PC_HOPS > 7
    PC_HOP(7)
    PC_CELL(7)
#endif

    /* ---- collector responses: (collector IP, our QPN) -> QP; sent to egress for the PSN ---- */
    action resp_qp(qp_idx_t qp, PortId_t port) {
        hdr.bridge.qp = qp;
        ig_tm_md.ucast_egress_port = port;
    }
    table tbl_resp_qp {
        key = { hdr.ipv4.src : exact; hdr.bth.dest_qp : exact; }
        actions = { resp_qp; drop; }
        default_action = drop(DROP_UNKNOWN_QP);
        size = DTA_QPS;
    }

    apply {
        hdr.bridge.setValid();
        hdr.bridge.kind = KIND_FORWARD;
        hdr.bridge.qp = 0; hdr.bridge.n = 0; hdr.bridge.pad0 = 0; hdr.bridge.immediate = 0;
        hdr.bridge.key = 0;

        /* The parser validated the report (reserved fields, priority, sub-header lengths)
         * and recorded the reason of a rejection; tbl_normalize checks the UDP length and
         * turns the report into (op, n, key, value, ...). */
        if (md.drop_reason == 0 && md.rpt != RPT_NONE) { tbl_normalize.apply(); }
        if (md.drop_reason != 0) { ig_dprsr_md.drop_ctl = 1; }

        if (md.op == DTA_OP_KEY_WRITE || md.op == DTA_OP_KEY_INCREMENT) {
            if (md.n == 0 || md.n > DTA_MAX_N) {
                drop(DROP_BAD_REDUNDANCY);
            } else {
                tbl_kv_route.apply();
                hdr.bridge.kind = md.kind;
                hdr.bridge.n = md.n; hdr.bridge.immediate = md.immediate; hdr.bridge.key = md.key;
                hdr.bridge_kv.setValid();
                hdr.bridge_kv.data = md.delta;   /* a Key-Write's value, see bridge_kv_h */
            }
        } else if (md.op == DTA_OP_APPEND) {
            if (tbl_ap_list.apply().hit) {
                md.ap_pos = ap_pos_next.execute(md.lidx);
                md.ap_imm = ap_imm_update.execute(md.lidx);
#if DTA_AP_BATCH > 1
                AP_ENTRY_APPLY(0)
#endif
#if DTA_AP_BATCH > 2
                AP_ENTRY_APPLY(1) AP_ENTRY_APPLY(2)
#endif
#if DTA_AP_BATCH > 4
                AP_ENTRY_APPLY(3) AP_ENTRY_APPLY(4) AP_ENTRY_APPLY(5) AP_ENTRY_APPLY(6)
#endif
#if DTA_AP_BATCH > 8
                AP_ENTRY_APPLY(7) AP_ENTRY_APPLY(8) AP_ENTRY_APPLY(9) AP_ENTRY_APPLY(10)
                AP_ENTRY_APPLY(11) AP_ENTRY_APPLY(12) AP_ENTRY_APPLY(13) AP_ENTRY_APPLY(14)
#endif
                if (md.ap_pos == DTA_AP_BATCH - 1) {
                    /* Batch ready: own entry last, then one WRITE of the whole batch. */
                    hdr.ap_words[DTA_AP_BATCH - 1].setValid();
                    hdr.ap_words[DTA_AP_BATCH - 1].w = md.value;
                    md.ap_off = ap_off_next.execute(md.lidx);
                    md.ap_seq = ap_seq_next.execute(md.lidx);
#ifndef DTA_AP_REFERENCE_RING
                    hdr.ap_trailer.setValid();
                    /* LE u64: seq (48 bits, high 16 zero here) | count << 48, count = batch. */
                    hdr.ap_trailer.seq0 = md.ap_seq[7:0]; hdr.ap_trailer.seq1 = md.ap_seq[15:8];
                    hdr.ap_trailer.seq2 = md.ap_seq[23:16]; hdr.ap_trailer.seq3 = md.ap_seq[31:24];
                    hdr.ap_trailer.count_le = 16w0 ++ (bit<8>)DTA_AP_BATCH ++ 8w0;
#endif
                    hdr.bridge.kind = KIND_APPEND;
                    if (md.ap_imm != 0) { hdr.bridge.immediate = 1; }
                    hdr.bridge_ap.setValid();
                    ap_addr();
                    /* 64-bit address = high half (+1 when the low half carried) ++ low half. */
                    if (md.ap_carry_d[31:31] == 1) { hdr.bridge_ap.va_hi = md.list_base_hi; }
                    else { hdr.bridge_ap.va_hi = md.list_base_hi1; }
                    hdr.bridge.key = md.list_id;
                    ig_tm_md.ucast_egress_port = md.port;
                } else {
                    /* Held in the batch registers; consumes no PSN. */
                    md.drop_reason = HELD_APPEND;
                    ig_dprsr_md.drop_ctl = 1;
                }
            }
        } else if (md.op == DTA_OP_POSTCARD) {
            if (tbl_pc_route.apply().hit) {
                if (tbl_pc_hop.apply().hit) {
                    bit<32> cache_hash = pc_cache_hash.get({ md.key });
                    md.pc_idx = cache_hash[DTA_PC_CACHE_BITS - 1:0];
                    md.pc_old_flow = pc_flow_swap.execute(md.pc_idx);
                    md.pc_collision = pc_owner_swap.execute(md.pc_idx);
                    tbl_pc_mask.apply();
                    if (md.pc_collision == 1) {
                        md.pc_complete = md.pc_start_complete;
                        if (md.pc_old_mask != 0) { md.pc_evict = 1; }
                    } else if (md.pc_done == 1) {
                        md.pc_complete = 1;
                    }
                    PC_CELL_APPLY(0)
#if DTA_PC_HOPS > 1
                    PC_CELL_APPLY(1)
#endif
#if DTA_PC_HOPS > 2
                    PC_CELL_APPLY(2)
#endif
#if DTA_PC_HOPS > 3
                    PC_CELL_APPLY(3)
#endif
#if DTA_PC_HOPS > 4
                    PC_CELL_APPLY(4)
#endif
#if DTA_PC_HOPS > 5
                    PC_CELL_APPLY(5)
#endif
#if DTA_PC_HOPS > 6
                    PC_CELL_APPLY(6)
#endif
#if DTA_PC_HOPS > 7
                    PC_CELL_APPLY(7)
#endif
                    hdr.bridge_pc.setValid();
                    if (md.pc_evict == 1) {
                        /* The old flow's words go to the old flow's chunk. */
                        hdr.bridge.key = md.pc_old_flow;
                        hdr.bridge_pc.present = md.pc_old_mask[7:0];
                        if (md.pc_complete == 1) { md.drop_reason = DROP_PC_SHORT_ON_EVICT; }
                    } else {
                        hdr.bridge.key = md.key;
                        hdr.bridge_pc.present = md.pc_full[7:0];
                    }
                    if (md.pc_evict == 1 || md.pc_complete == 1) {
                        hdr.bridge.kind = KIND_POSTCARD;
                        ig_tm_md.mcast_grp_a = md.pc_grp;   /* one copy per chunk replica */
                    } else {
                        md.drop_reason = HELD_POSTCARD;
                        ig_dprsr_md.drop_ctl = 1;
                    }
                }
            }
        } else if (hdr.aeth.isValid()) {
            if (tbl_resp_qp.apply().hit) {
                hdr.bridge.kind = KIND_RESPONSE;
                /* NAKs other than "PSN sequence error" break the QP: tell the control plane. */
                if ((hdr.aeth.syndrome & AETH_SYN_KIND_MASK) == AETH_SYN_NAK
                        && hdr.aeth.syndrome != AETH_NAK_PSN_SEQ_ERROR) {
                    ig_dprsr_md.digest_type = 1;
                }
            }
        } else if (hdr.ipv4.isValid() && md.drop_reason == 0) {
            tbl_forward.apply();
#ifndef DTA_NO_ICRC
            if (hdr.bth.isValid()) { tbl_icrc_loop.apply(); }
#endif
        }

        /* Report headers never leave ingress: egress rebuilds the packet. */
        hdr.ref.setInvalid(); hdr.ref_kw.setInvalid(); hdr.ref_ki.setInvalid();
        hdr.ref_ap.setInvalid(); hdr.ref_pc.setInvalid(); hdr.ext.setInvalid();
        hdr.ext_kw.setInvalid(); hdr.ext_ki.setInvalid(); hdr.ext_ap.setInvalid();
        hdr.ext_pc.setInvalid();
        ig_events.count(md.drop_reason);
    }
}

control IgDeparser(packet_out pkt, inout headers_t hdr, in ig_md_t md,
                   in ingress_intrinsic_metadata_for_deparser_t ig_dprsr_md) {
    Digest<digest_qp_error_t>() qp_error;
    apply {
        if (ig_dprsr_md.digest_type == 1) {
            qp_error.pack({ hdr.bridge.qp, hdr.aeth.syndrome, hdr.bth.psn });
        }
        pkt.emit(hdr.bridge);
        pkt.emit(hdr.bridge_kv);
        pkt.emit(hdr.bridge_ap);
        pkt.emit(hdr.bridge_pc);
        pkt.emit(hdr.ethernet);
        pkt.emit(hdr.ipv4);
        pkt.emit(hdr.udp);
        pkt.emit(hdr.bth);
        pkt.emit(hdr.aeth);
        pkt.emit(hdr.ap_words);
        pkt.emit(hdr.ap_trailer);
        pkt.emit(hdr.pc_words);
    }
}

/* ------------------------------------------------------------- egress parser */

parser EgParser(packet_in pkt, out headers_t hdr, out eg_md_t md,
                out egress_intrinsic_metadata_t eg_intr_md) {
    state start {
        pkt.extract(eg_intr_md);
        pkt.extract(hdr.bridge);
        transition select(hdr.bridge.kind) {
            KIND_KEYWRITE: parse_bridge_kv;
            KIND_KEYINC: parse_bridge_kv;
            KIND_APPEND: parse_bridge_ap;
            KIND_POSTCARD: parse_bridge_pc;
            default: parse_ethernet;
        }
    }
    state parse_bridge_kv { pkt.extract(hdr.bridge_kv); transition parse_ethernet; }
    state parse_bridge_ap { pkt.extract(hdr.bridge_ap); transition parse_ethernet; }
    state parse_bridge_pc { pkt.extract(hdr.bridge_pc); transition parse_ethernet; }
    state parse_ethernet {
        pkt.extract(hdr.ethernet);
        transition select(hdr.ethernet.ether_type) { ETHERTYPE_IPV4: parse_ipv4; default: accept; }
    }
    state parse_ipv4 {
        pkt.extract(hdr.ipv4);
        transition select(hdr.ipv4.protocol) { IP_PROTO_UDP: parse_udp; default: accept; }
    }
    state parse_udp {
        pkt.extract(hdr.udp);
        /* Every kind that carries a payload from ingress is parsed here, postcards included
         * (the reference's egress parser had no postcard branch). */
        transition select(hdr.bridge.kind) {
            KIND_APPEND: parse_ap;
            KIND_POSTCARD: parse_pc;
            KIND_RESPONSE: parse_resp;
            default: accept;
        }
    }
    state parse_ap {
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
    state parse_pc {
        pkt.extract(hdr.pc_words.next);
#if DTA_PC_HOPS > 1
        pkt.extract(hdr.pc_words.next);
#endif
#if DTA_PC_HOPS > 2
        pkt.extract(hdr.pc_words.next);
#endif
#if DTA_PC_HOPS > 3
        pkt.extract(hdr.pc_words.next);
#endif
#if DTA_PC_HOPS > 4
        pkt.extract(hdr.pc_words.next);
#endif
#if DTA_PC_HOPS > 5
        pkt.extract(hdr.pc_words.next);
#endif
#if DTA_PC_HOPS > 6
        pkt.extract(hdr.pc_words.next);
#endif
#if DTA_PC_HOPS > 7
        pkt.extract(hdr.pc_words.next);
#endif
        transition accept;
    }
    state parse_resp {
        pkt.extract(hdr.bth);
        pkt.extract(hdr.aeth);
        transition accept;
    }
}

/* ------------------------------------------------------------------- egress */

control Egress(inout headers_t hdr, inout eg_md_t md,
               in egress_intrinsic_metadata_t eg_intr_md,
               in egress_intrinsic_metadata_from_parser_t eg_prsr_md,
               inout egress_intrinsic_metadata_for_deparser_t eg_dprsr_md,
               inout egress_intrinsic_metadata_for_output_port_t eg_oport_md) {

    Counter<bit<32>, qp_idx_t>(DTA_QPS, CounterType_t.PACKETS_AND_BYTES) qp_frames;
    Counter<bit<32>, qp_idx_t>(DTA_QPS, CounterType_t.PACKETS) qp_acks;
    Counter<bit<32>, qp_idx_t>(DTA_QPS, CounterType_t.PACKETS) qp_nak_seq;
    Counter<bit<32>, qp_idx_t>(DTA_QPS, CounterType_t.PACKETS) qp_nak_stale;
    Counter<bit<32>, qp_idx_t>(DTA_QPS, CounterType_t.PACKETS) qp_nak_rnr;
    Counter<bit<32>, qp_idx_t>(DTA_QPS, CounterType_t.PACKETS) qp_nak_fatal;
    Counter<bit<32>, qp_idx_t>(DTA_QPS, CounterType_t.PACKETS) qp_window_drops;

    /* ---- per-QP coordinates (control plane, from the collector's metadata) ---- */
    /* The region base comes as two halves plus the high half + 1 and the first offset whose
     * low-half add carries (2^32 - base_lo, or 2^30 when no offset in the region reaches it):
     * the address is base_lo + offset in one 32-bit add, and the high half is chosen by the
     * sign of offset - carry_at (both below 2^31). */
    action set_qp(bit<48> src_mac, bit<48> dst_mac, bit<32> src_ip, bit<32> dst_ip,
                  bit<16> src_port, bit<24> remote_qpn, bit<32> rkey, bit<32> base_hi,
                  bit<32> base_lo, bit<32> base_hi1, bit<32> carry_at,
                  bit<32> slot_mask, bit<32> ack_every_m1, bit<32> window) {
        hdr.ethernet.src = src_mac; hdr.ethernet.dst = dst_mac;
        hdr.ipv4.src = src_ip; hdr.ipv4.dst = dst_ip;
        hdr.udp.src_port = src_port;
        md.remote_qpn = remote_qpn; md.rkey = rkey;
        md.base_hi = base_hi; md.base_lo = base_lo; md.base_hi1 = base_hi1; md.carry_at = carry_at;
        md.slot_mask = slot_mask; md.ack_every_m1 = ack_every_m1;
        md.window = window;
    }
    action addr_carry() {
        md.va_lo = md.base_lo + md.off;
        md.carry_d = md.off - md.carry_at;
    }
    action unknown_qp() { eg_dprsr_md.drop_ctl = 1; }
    table tbl_qp {
        key = { hdr.bridge.qp : exact; }
        actions = { set_qp; unknown_qp; }
        default_action = unknown_qp();
        size = DTA_QPS;
    }

    /* ---- PSN: post-incremented, 24 bits; set by a fresh NAK "PSN sequence error" ----
     * The register holds PSN << 8, so one 32-bit add of 0x100 steps it and wraps exactly at
     * 2^24 (a stateful ALU does one operation per statement: `(value + 1) & PSN_MASK` was
     * rejected), and the serial-number comparison of two PSNs is the sign of a 32-bit
     * difference. */
    Register<bit<32>, qp_idx_t>(DTA_QPS, 0) psn_reg;
    RegisterAction<bit<32>, qp_idx_t, bit<32>>(psn_reg) psn_next = {
        void apply(inout bit<32> value, out bit<32> rv) { rv = value; value = value + 0x100; }
    };
    /* The NAK's point (q ++ 0x01, nak_reg's comment): the low byte is never read (the BTH
     * takes bits 31..8), so the PSN steps on from q. */
    RegisterAction<bit<32>, qp_idx_t, bit<32>>(psn_reg) psn_resync = {
        void apply(inout bit<32> value) { value = md.nak_psn; }
    };
    /* What the responder is known to have executed, as a point on the PSN line (<< 8): an ACK
     * of PSN p is p ++ 0x80 (p executed), a NAK "PSN sequence error" naming q is q ++ 0x01 (q
     * not executed, everything before it was). A NAK is fresh, and moves the PSN, only when its
     * point lies after the register's: so it can never move the PSN back over a frame an ACK
     * confirmed (q <= p), nor repeat a NAK already taken (same q), while a NAK right after the
     * ACK of q - 1 is fresh. ACKs move the register forward too, so it follows the traffic
     * and the 2^23 serial-number window of the comparison keeps up with the PSN's 24-bit wrap
     * (as the software QP's `acked`: a register that only NAKs moved would call a NAK stale
     * half the time once the PSN wrapped since the last one). The control plane sets it to
     * ACK(start PSN - 1) when it installs the QP. */
    Register<bit<32>, qp_idx_t>(DTA_QPS, 0) nak_reg;
    RegisterAction<bit<32>, qp_idx_t, bit<1>>(nak_reg) nak_accept = {
        void apply(inout bit<32> value, out bit<1> rv) {
            rv = 0;
            if ((int<32>)(md.nak_psn - value) > 0) { value = md.nak_psn; rv = 1; }
        }
    };
    /* AckReq on every k-th frame, exactly like the software QP. */
    Register<bit<32>, qp_idx_t>(DTA_QPS, 0) ackreq_reg;
    RegisterAction<bit<32>, qp_idx_t, bit<1>>(ackreq_reg) ackreq_next = {
        void apply(inout bit<32> value, out bit<1> rv) {
            if (value >= md.ack_every_m1) { value = 0; rv = 1; } else { value = value + 1; rv = 0; }
        }
    };
    /* Resync window: after a PSN resync, this many frames of the QP are dropped (0 = none,
     * the software translator's behaviour). Configurable per QP and counted (qp_window_drops). */
    Register<bit<32>, qp_idx_t>(DTA_QPS, 0) window_reg;
    RegisterAction<bit<32>, qp_idx_t, bit<1>>(window_reg) window_open = {
        void apply(inout bit<32> value) { value = md.window; }
    };
    RegisterAction<bit<32>, qp_idx_t, bit<1>>(window_reg) window_pass = {
        void apply(inout bit<32> value, out bit<1> rv) {
            if (value > 0) { value = value - 1; rv = 1; } else { rv = 0; }
        }
    };

    /* Each register is executed from one table whose key picks the action: two execute sites
     * of one register in two branches cannot share the register's stage. */
    action win_pass() { md.in_window = window_pass.execute(hdr.bridge.qp); }
    action win_open() { window_open.execute(hdr.bridge.qp); }
    table tbl_window {
        key = { md.qp_op : exact; md.nak_fresh : exact; }
        actions = { win_pass; win_open; NoAction; }
        const entries = {
            (QP_OP_SEND, 0) : win_pass();
            (QP_OP_RESYNC, 1) : win_open();
        }
        const default_action = NoAction();
        size = 2;
    }
    action psn_take() { md.psn = psn_next.execute(hdr.bridge.qp); }
    action psn_set() { psn_resync.execute(hdr.bridge.qp); }
    table tbl_psn {
        key = { md.qp_op : exact; md.nak_fresh : exact; md.in_window : exact; }
        actions = { psn_take; psn_set; NoAction; }
        const entries = {
            (QP_OP_SEND, 0, 0) : psn_take();
            (QP_OP_RESYNC, 1, 0) : psn_set();
        }
        const default_action = NoAction();
        size = 2;
    }

    /* ---- hashes ---- */
#ifdef DTA_HASH_REFERENCE
    Hash<bit<32>>(HashAlgorithm_t.CUSTOM, CRC32_CUSTOM(REF_POLY_CRC32)) h_checksum;
    Hash<bit<32>>(HashAlgorithm_t.CUSTOM, CRC32_CUSTOM(REF_POLY_CRC32)) h_slot_ref;
    Hash<bit<32>>(HashAlgorithm_t.CUSTOM, CRC32_CUSTOM(REF_POLY_CRC32)) h_chunk0_ref;
    Hash<bit<32>>(HashAlgorithm_t.CUSTOM, CRC32_CUSTOM(REF_POLY_HOP1)) h_hop0;
    Hash<bit<32>>(HashAlgorithm_t.CUSTOM, CRC32_CUSTOM(REF_POLY_HOP2)) h_hop1;
    Hash<bit<32>>(HashAlgorithm_t.CUSTOM, CRC32_CUSTOM(REF_POLY_HOP3)) h_hop2;
    Hash<bit<32>>(HashAlgorithm_t.CUSTOM, CRC32_CUSTOM(REF_POLY_HOP4)) h_hop3;
    Hash<bit<32>>(HashAlgorithm_t.CUSTOM, CRC32_CUSTOM(REF_POLY_HOP5)) h_hop4;
#else
    Hash<bit<32>>(HashAlgorithm_t.CUSTOM, CRC32_CUSTOM(IND_POLY_CHECKSUM)) h_checksum;
    Hash<bit<32>>(HashAlgorithm_t.CUSTOM, CRC32_CUSTOM(IND_POLY_REPLICA0)) h_rep0;
    Hash<bit<32>>(HashAlgorithm_t.CUSTOM, CRC32_CUSTOM(IND_POLY_REPLICA1)) h_rep1;
    Hash<bit<32>>(HashAlgorithm_t.CUSTOM, CRC32_CUSTOM(IND_POLY_REPLICA2)) h_rep2;
    Hash<bit<32>>(HashAlgorithm_t.CUSTOM, CRC32_CUSTOM(IND_POLY_REPLICA3)) h_rep3;
    Hash<bit<32>>(HashAlgorithm_t.CUSTOM, CRC32_CUSTOM(IND_POLY_REPLICA4)) h_rep4;
    Hash<bit<32>>(HashAlgorithm_t.CUSTOM, CRC32_CUSTOM(IND_POLY_REPLICA5)) h_rep5;
    Hash<bit<32>>(HashAlgorithm_t.CUSTOM, CRC32_CUSTOM(IND_POLY_REPLICA6)) h_rep6;
    Hash<bit<32>>(HashAlgorithm_t.CUSTOM, CRC32_CUSTOM(IND_POLY_REPLICA7)) h_rep7;
    Hash<bit<32>>(HashAlgorithm_t.CUSTOM, CRC32_CUSTOM(IND_POLY_HOP0)) h_hop0;
    Hash<bit<32>>(HashAlgorithm_t.CUSTOM, CRC32_CUSTOM(IND_POLY_HOP1)) h_hop1;
    Hash<bit<32>>(HashAlgorithm_t.CUSTOM, CRC32_CUSTOM(IND_POLY_HOP2)) h_hop2;
    Hash<bit<32>>(HashAlgorithm_t.CUSTOM, CRC32_CUSTOM(IND_POLY_HOP3)) h_hop3;
    Hash<bit<32>>(HashAlgorithm_t.CUSTOM, CRC32_CUSTOM(IND_POLY_HOP4)) h_hop4;
    Hash<bit<32>>(HashAlgorithm_t.CUSTOM, CRC32_CUSTOM(IND_POLY_HOP5)) h_hop5;
    Hash<bit<32>>(HashAlgorithm_t.CUSTOM, CRC32_CUSTOM(IND_POLY_HOP6)) h_hop6;
    Hash<bit<32>>(HashAlgorithm_t.CUSTOM, CRC32_CUSTOM(IND_POLY_HOP7)) h_hop7;
#endif

/* Payload words in ICRC order. */
#if DTA_AP_BATCH == 1
#define AP_WORDS_ICRC hdr.ap_words[0].w
#elif DTA_AP_BATCH == 2
#define AP_WORDS_ICRC hdr.ap_words[0].w, hdr.ap_words[1].w
#elif DTA_AP_BATCH == 4
#define AP_WORDS_ICRC hdr.ap_words[0].w, hdr.ap_words[1].w, hdr.ap_words[2].w, hdr.ap_words[3].w
#elif DTA_AP_BATCH == 8
#define AP_WORDS_ICRC hdr.ap_words[0].w, hdr.ap_words[1].w, hdr.ap_words[2].w, hdr.ap_words[3].w, hdr.ap_words[4].w, hdr.ap_words[5].w, hdr.ap_words[6].w, hdr.ap_words[7].w
#elif DTA_AP_BATCH == 16
#define AP_WORDS_ICRC hdr.ap_words[0].w, hdr.ap_words[1].w, hdr.ap_words[2].w, hdr.ap_words[3].w, hdr.ap_words[4].w, hdr.ap_words[5].w, hdr.ap_words[6].w, hdr.ap_words[7].w, hdr.ap_words[8].w, hdr.ap_words[9].w, hdr.ap_words[10].w, hdr.ap_words[11].w, hdr.ap_words[12].w, hdr.ap_words[13].w, hdr.ap_words[14].w, hdr.ap_words[15].w
#endif
#ifdef DTA_AP_REFERENCE_RING
#define AP_TRAILER_ICRC
#else
#define AP_TRAILER_ICRC , hdr.ap_trailer.seq0, hdr.ap_trailer.seq1, hdr.ap_trailer.seq2, hdr.ap_trailer.seq3, hdr.ap_trailer.count_le
#endif
#if DTA_PC_CHUNK_WORDS == 1
#define PC_WORDS_ICRC hdr.pc_words[0].w
#elif DTA_PC_CHUNK_WORDS == 2
#define PC_WORDS_ICRC hdr.pc_words[0].w, hdr.pc_words[1].w
#elif DTA_PC_CHUNK_WORDS == 4
#define PC_WORDS_ICRC hdr.pc_words[0].w, hdr.pc_words[1].w, hdr.pc_words[2].w, hdr.pc_words[3].w
#elif DTA_PC_CHUNK_WORDS == 8
#define PC_WORDS_ICRC hdr.pc_words[0].w, hdr.pc_words[1].w, hdr.pc_words[2].w, hdr.pc_words[3].w, hdr.pc_words[4].w, hdr.pc_words[5].w, hdr.pc_words[6].w, hdr.pc_words[7].w
#endif

    /* Frame skeleton shared by every request (dta_roce.p4). */
    DTA_ROCE_FRAME_ACTION

    action rid_minus_n() { md.rid_minus_n = md.rid[7:0] - hdr.bridge.n; }
    table tbl_rid_minus_n {
        actions = { rid_minus_n; }
        const default_action = rid_minus_n();
        size = 1;
    }

    apply {
        md.rid = eg_intr_md.egress_rid;
        md.qp_op = QP_OP_NONE;
        md.in_window = 0;
        md.nak_fresh = 0;
        bit<8> kind = hdr.bridge.kind;

        bool qp_hit = false;
        if (kind != KIND_FORWARD) {
            qp_hit = tbl_qp.apply().hit;   /* applied once, for responses and requests alike */
        }
        if (kind == KIND_RESPONSE) {
            /* ACK and NAK told apart by the AETH syndrome before touching the PSN. */
            bit<8> syn_kind = hdr.aeth.syndrome & AETH_SYN_KIND_MASK;
            if (qp_hit) {
                /* One execute site for nak_reg: the branches only say what the response
                 * tells (its point on the PSN line, nak_reg's comment). */
                bit<1> moves = 0;
                if (hdr.aeth.syndrome == AETH_NAK_PSN_SEQ_ERROR) {
                    md.nak_psn = hdr.bth.psn ++ 8w0x01;
                    moves = 1;
                    /* tbl_window and tbl_psn match on nak_fresh too: only a fresh NAK moves
                     * the PSN (no gateway stage between the registers). */
                    md.qp_op = QP_OP_RESYNC;
                    qp_nak_seq.count(hdr.bridge.qp);
                } else if (syn_kind == AETH_SYN_ACK) {
                    md.nak_psn = hdr.bth.psn ++ 8w0x80;
                    moves = 1;
                    qp_acks.count(hdr.bridge.qp);
                } else if (syn_kind == AETH_SYN_RNR_NAK) {
                    qp_nak_rnr.count(hdr.bridge.qp);
                } else {
                    qp_nak_fatal.count(hdr.bridge.qp);
                }
                if (moves == 1) { md.nak_fresh = nak_accept.execute(hdr.bridge.qp); }
            }
            eg_dprsr_md.drop_ctl = 1;
        } else if (kind != KIND_FORWARD && qp_hit) {
            md.qp_op = QP_OP_SEND;
        }
        /* ---- which slot / chunk ----
         * Before the QP registers, not inside the request branch: the hashes and the address
         * add depend only on the bridged key, the replica and tbl_qp's region, so they run in
         * the stages the window and PSN registers take (the stage budget is 12). A frame the
         * window drops computed them for nothing. */
        if (kind == KIND_KEYWRITE || kind == KIND_KEYINC || kind == KIND_POSTCARD) {
#ifdef DTA_HASH_REFERENCE
            if (kind == KIND_POSTCARD && md.rid == 0) {
                md.slot = h_chunk0_ref.get({ hdr.bridge.key });
            } else {
                md.slot = h_slot_ref.get({ hdr.bridge.key, md.rid[7:0] });
            }
#else
            if (md.rid == 0) { md.slot = h_rep0.get({ hdr.bridge.key }); }
            else if (md.rid == 1) { md.slot = h_rep1.get({ hdr.bridge.key }); }
            else if (md.rid == 2) { md.slot = h_rep2.get({ hdr.bridge.key }); }
            else if (md.rid == 3) { md.slot = h_rep3.get({ hdr.bridge.key }); }
            else if (md.rid == 4) { md.slot = h_rep4.get({ hdr.bridge.key }); }
            else if (md.rid == 5) { md.slot = h_rep5.get({ hdr.bridge.key }); }
            else if (md.rid == 6) { md.slot = h_rep6.get({ hdr.bridge.key }); }
            else { md.slot = h_rep7.get({ hdr.bridge.key }); }
#endif
            md.slot = md.slot & md.slot_mask;
            if (kind == KIND_POSTCARD) { md.off = md.slot << DTA_PC_CHUNK_SHIFT; }
            else { md.off = md.slot << 3; }
            addr_carry();
            if (md.carry_d[31:31] == 1) { md.va_hi = md.base_hi; }
            else { md.va_hi = md.base_hi1; }
        }
        if (kind == KIND_KEYWRITE || kind == KIND_KEYINC) {
            md.checksum = h_checksum.get({ hdr.bridge.key });
        }

        if (md.qp_op == QP_OP_RESYNC && md.nak_fresh == 0) { qp_nak_stale.count(hdr.bridge.qp); }
        tbl_window.apply();
        if (md.in_window == 1) {
            /* Inside the resync window: dropped, consumes no PSN (tbl_psn matches on it). */
            qp_window_drops.count(hdr.bridge.qp);
            eg_dprsr_md.drop_ctl = 1;
        }
        tbl_psn.apply();
        if (md.qp_op == QP_OP_SEND && md.in_window == 0) {
                {
                    md.ack_req = ackreq_next.execute(hdr.bridge.qp);

                    if (kind == KIND_KEYWRITE) {
                        hdr.reth.setValid();
                        hdr.reth.va_hi = md.va_hi; hdr.reth.va_lo = md.va_lo;
                        hdr.reth.dma_len = DTA_KW_SLOT_SIZE;
                        hdr.kw_payload.setValid();
                        hdr.kw_payload.ck0 = md.checksum[7:0]; hdr.kw_payload.ck1 = md.checksum[15:8];
                        hdr.kw_payload.ck2 = md.checksum[23:16]; hdr.kw_payload.ck3 = md.checksum[31:24];
                        hdr.kw_payload.value = hdr.bridge_kv.data[31:0];
                        if (hdr.bridge.immediate == 1 && md.rid == 0) {
                            /* The first replica tells the collector CPU (ImmDt = checksum). */
                            frame(IB_OP_RC_RDMA_WRITE_ONLY_IMM,
                                  IB_BTH_LEN + IB_RETH_LEN + IB_IMMDT_LEN + DTA_KW_SLOT_SIZE + IB_ICRC_LEN);
                            hdr.immdt.setValid();
                            hdr.immdt.imm = md.checksum;
                        } else {
                            frame(IB_OP_RC_RDMA_WRITE_ONLY,
                                  IB_BTH_LEN + IB_RETH_LEN + DTA_KW_SLOT_SIZE + IB_ICRC_LEN);
                        }
                    } else if (kind == KIND_KEYINC) {
                        tbl_rid_minus_n.apply();
                        if (md.rid_minus_n[7:7] == 1) {   /* rid < N (both at most 8) */
                            /* BTH + AtomicETH + ICRC: 44 bytes of transport, correct lengths. */
                            frame(IB_OP_RC_FETCH_ADD, IB_BTH_LEN + IB_ATOMIC_ETH_LEN + IB_ICRC_LEN);
                            hdr.atomic.setValid();
                            hdr.atomic.va_hi = md.va_hi; hdr.atomic.va_lo = md.va_lo;
                            hdr.atomic.add = hdr.bridge_kv.data;
                            hdr.atomic.compare = 0;
                        } else {
                            /* Replica N of an immediate report: a zero-length WRITE with
                             * ImmDt = checksum at the region base. */
                            frame(IB_OP_RC_RDMA_WRITE_ONLY_IMM,
                                  IB_BTH_LEN + IB_RETH_LEN + IB_IMMDT_LEN + IB_ICRC_LEN);
                            hdr.reth.setValid();
                            hdr.reth.va_hi = md.base_hi; hdr.reth.va_lo = md.base_lo;
                            hdr.reth.dma_len = 0;
                            hdr.immdt.setValid();
                            hdr.immdt.imm = md.checksum;
                        }
                    } else if (kind == KIND_APPEND) {
                        hdr.reth.setValid();
                        hdr.reth.va_hi = hdr.bridge_ap.va_hi; hdr.reth.va_lo = hdr.bridge_ap.va_lo;
                        hdr.reth.dma_len = DTA_AP_STRIDE;
                        if (hdr.bridge.immediate == 1) {
                            frame(IB_OP_RC_RDMA_WRITE_ONLY_IMM,
                                  IB_BTH_LEN + IB_RETH_LEN + IB_IMMDT_LEN + DTA_AP_STRIDE + IB_ICRC_LEN);
                            hdr.immdt.setValid();
                            hdr.immdt.imm = hdr.bridge.key;
                        } else {
                            frame(IB_OP_RC_RDMA_WRITE_ONLY,
                                  IB_BTH_LEN + IB_RETH_LEN + DTA_AP_STRIDE + IB_ICRC_LEN);
                        }
                    } else {
                        /* Postcarding: encode every hop word against the chunk's flow. */
                        hdr.reth.setValid();
                        hdr.reth.va_hi = md.va_hi; hdr.reth.va_lo = md.va_lo;
                        hdr.reth.dma_len = DTA_PC_CHUNK_BYTES;
                        frame(IB_OP_RC_RDMA_WRITE_ONLY,
                              IB_BTH_LEN + IB_RETH_LEN + DTA_PC_CHUNK_BYTES + IB_ICRC_LEN);
/* Blank hop: raw 0 (reference) or the hop hash XOR the blank marker (independent). */
#ifdef DTA_HASH_REFERENCE
#define PC_BLANK(H) 32w0
#else
#define PC_BLANK(H) ((H) ^ IND_BLANK)
#endif
#define PC_ENCODE(I) \
                        { \
                            bit<32> hh##I = h_hop##I.get({ hdr.bridge.key }); \
                            if (hdr.bridge_pc.present[I:I] == 1) { hdr.pc_words[I].w = hdr.pc_words[I].w ^ hh##I; } \
                            else { hdr.pc_words[I].w = PC_BLANK(hh##I); } \
                        }
                        PC_ENCODE(0)
#if DTA_PC_HOPS > 1
                        PC_ENCODE(1)
#endif
#if DTA_PC_HOPS > 2
                        PC_ENCODE(2)
#endif
#if DTA_PC_HOPS > 3
                        PC_ENCODE(3)
#endif
#if DTA_PC_HOPS > 4
                        PC_ENCODE(4)
#endif
#if DTA_PC_HOPS > 5
                        PC_ENCODE(5)
#endif
#if DTA_PC_HOPS > 6
                        PC_ENCODE(6)
#endif
#if DTA_PC_HOPS > 7
                        PC_ENCODE(7)
#endif
                        /* Padding words of the power-of-two chunk are written as zero. */
#if DTA_PC_HOPS < DTA_PC_CHUNK_WORDS
                        hdr.pc_words[DTA_PC_CHUNK_WORDS - 1].setValid();
                        hdr.pc_words[DTA_PC_CHUNK_WORDS - 1].w = 0;
#endif
#if DTA_PC_HOPS < DTA_PC_CHUNK_WORDS - 1
                        hdr.pc_words[DTA_PC_CHUNK_WORDS - 2].setValid();
                        hdr.pc_words[DTA_PC_CHUNK_WORDS - 2].w = 0;
#endif
#if DTA_PC_HOPS < DTA_PC_CHUNK_WORDS - 2
                        hdr.pc_words[DTA_PC_CHUNK_WORDS - 3].setValid();
                        hdr.pc_words[DTA_PC_CHUNK_WORDS - 3].w = 0;
#endif
                    }

                    hdr.bth.dest_qp = md.remote_qpn;
                    hdr.bth.ack_req = md.ack_req;
                    hdr.bth.psn = md.psn[31:8];
                    if (hdr.reth.isValid()) { hdr.reth.rkey = md.rkey; }
                    if (hdr.atomic.isValid()) { hdr.atomic.rkey = md.rkey; }

#ifdef DTA_NO_ICRC
                    /* ICRC 0: the collector NIC must not check it (p4/README.md, "ICRC"). */
                    hdr.icrc.c0 = 0; hdr.icrc.c1 = 0; hdr.icrc.c2 = 0; hdr.icrc.c3 = 0;
#else
                    /* The ICRC pipe appends the ICRC (dta_icrc_pipe.p4). */
                    hdr.icrc.setInvalid();
#endif
                    qp_frames.count(hdr.bridge.qp);
                }
        }
        hdr.bridge.setInvalid(); hdr.bridge_kv.setInvalid(); hdr.bridge_ap.setInvalid();
        hdr.bridge_pc.setInvalid();
    }
}

control EgDeparser(packet_out pkt, inout headers_t hdr, in eg_md_t md,
                   in egress_intrinsic_metadata_for_deparser_t eg_dprsr_md) {
    Checksum() ipv4_csum;
    apply {
        hdr.ipv4.checksum = ipv4_csum.update({
            hdr.ipv4.version, hdr.ipv4.ihl, hdr.ipv4.tos, hdr.ipv4.total_len, hdr.ipv4.ident,
            hdr.ipv4.flags, hdr.ipv4.frag_offset, hdr.ipv4.ttl, hdr.ipv4.protocol,
            hdr.ipv4.src, hdr.ipv4.dst });
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
        pkt.emit(hdr.icrc);
    }
}

Pipeline(IgParser(), Ingress(), IgDeparser(), EgParser(), Egress(), EgDeparser()) pipe;
#ifdef DTA_NO_ICRC
Switch(pipe) main;
#else
#include "dta_icrc_pipe.p4"
Pipeline(IcrcIgParser(), IcrcIngress(), IcrcIgDeparser(), IcrcEgParser(), IcrcEgress(), IcrcEgDeparser()) icrc_pipe;
Switch(pipe, icrc_pipe) main;
#endif
