/* dta_sketch.p4: Sketch-Merge (proto/PROTOCOL.md §3.4, §5.7, §9) in the translator's second pipe.
 *
 * Included by dta_icrc_pipe.p4 (not compiled on its own). Pipe 0 has no stage left (ingress
 * 11/12, egress 12/12), pipe 1 had eleven ingress stages free, so Sketch-Merge lives there:
 * switches that send sketch columns, like the collectors, sit on pipe-1 ports (128..255).
 *
 *   sketch report (pipe-1 port) -> IcrcIngress / SketchMerge: check, per-sketch epoch, the
 *     switch's next column, merge the column into the cell registers (sum, max, signed sum),
 *     count the switches merged into it; once it has `expected` switches, turn the report into
 *     the RDMA WRITE of the column's record (own QP: PSN, AckReq and NAK resync live here) ->
 *     IcrcEgress appends the ICRC -> collector.
 *   a report beyond the column the switch owes -> the sketch-column NACK, back out the port it
 *     came from.
 *   ACK/NAK of a sketch QP (tbl_sk_resp) -> counted, a fresh PSN-sequence-error NAK resyncs.
 *
 * What this program takes (the software translator takes every valid report; dta_bfrt.py
 * refuses stores outside these limits):
 *   - one column per report (`columns = 1`); other reports are counted (SK_UNSUPPORTED) and
 *     dropped: a Tofino pass reads one register entry per register;
 *   - shapes: DTA_SK_ROWS rows of 4-byte cells, merge sum or signed sum (Count-Min, Count
 *     sketch), or one row of 1- or 4-byte cells (1-byte cells: max only, HyperLogLog);
 *   - stores with batch 1: each merge that leaves the column with at least `expected` switches
 *     writes the column's record (the software translator with batch 1 does the same); with no
 *     timers, columns that never complete are not written, and a new epoch does not write the
 *     old epoch's incomplete columns (the software translator's flush timer and epoch change
 *     do);
 *   - 1, 2, 4, 8 or 16 epoch slots (the slot is the epoch's low 4 bits, `tbl_sk_slot`);
 *   - switches installed by the control plane (`tbl_sk_switch`), at most DTA_SK_SWITCHES;
 *   - a gap NACK per switch and (epoch, owed column): a second gap report owing the same column
 *     is not NACKed again (the software translator NACKs it again after its flush delay).
 *   - the epoch rules of issue 28 only in part (p4/README.md, "Sketch-Merge"): the first report
 *     of a newer epoch moves the sketch on (a quorum of 1; the software translator waits for a
 *     quorum of the expected switches and holds the next epoch meanwhile: dta_bfrt.py refuses
 *     any other quorum); NACKs go to the report's source, but only for installed switches;
 *     installed switches are never forgotten; a switch whose epoch counter restarts is late.
 *     The column record (layout version 2) ends in a copy of its head, appended by IcrcEgress,
 *     so records stay byte-identical to the software translator's.
 *
 * Knobs: DTA_SK_ROWS (1..4, default 4; 8 rows need 15 ingress stages), DTA_SKETCHES (default 16), DTA_SK_SWITCHES (default
 * 4096: per-(sketch, switch) state entries), DTA_SK_CELL_BITS (log2 of the cell registers'
 * entries shared by all sketches' columns, default 14), DTA_NO_SKETCH (leave it out).
 */

#ifndef DTA_SK_ROWS
#define DTA_SK_ROWS 4
#endif
#ifndef DTA_SKETCHES
#define DTA_SKETCHES 16
#endif
#ifndef DTA_SK_SWITCHES
#define DTA_SK_SWITCHES 4096
#endif
#ifndef DTA_SK_CELL_BITS
#define DTA_SK_CELL_BITS 14
#endif
#if DTA_SK_ROWS < 1 || DTA_SK_ROWS > 4
#error "DTA_SK_ROWS must be 1..4 on Tofino-1 (8 rows need 15 ingress stages in pipe 1; p4/README.md)"
#endif
#if DTA_SK_CELL_BITS < 8 || DTA_SK_CELL_BITS > 16
#error "DTA_SK_CELL_BITS must be 8..16"
#endif

const bit<8> KIND_SKETCH = 7;   /* a finished sketch WRITE from pipe 1's ingress, for its egress */

/* UDP lengths of the shapes this program takes (UDP header, base + sub-header, cells). */
#define SK_RPT_UDP_LEN(CELL_BYTES) (UDP_HEADER_LEN + DTA_SK_FIXED_LEN + (CELL_BYTES))
/* A column record (layout version 2): 8-byte head, the cells (4-byte aligned), and the 8-byte
 * tail, a copy of the head. This pipe's ingress emits head and cells; its egress (IcrcEgress)
 * appends the tail, copied from the head it parses, and hashes it into the ICRC. */
#define SK_STRIDE_WIDE (SK_RECORD_HEAD_LEN + 4 * DTA_SK_ROWS + SK_RECORD_TAIL_LEN)
#define SK_STRIDE_ONE (SK_RECORD_HEAD_LEN + 4 + SK_RECORD_TAIL_LEN)
#define SK_WRITE_TRANSPORT(STRIDE) (IB_BTH_LEN + IB_RETH_LEN + (STRIDE) + IB_ICRC_LEN)

/* Event counter indices (sk_events). */
const bit<8> SK_MERGED         = 0;   /* merged; the column has fewer than `expected` switches */
const bit<8> SK_WRITTEN        = 1;   /* merged and its record written */
const bit<8> SK_NACKED         = 2;   /* beyond the owed column: NACK sent */
const bit<8> SK_GAP_QUIET      = 3;   /* beyond the owed column, NACK already sent for it */
const bit<8> SK_DUPLICATE      = 4;   /* the column was merged already */
const bit<8> SK_LATE           = 5;   /* an epoch before the one being merged */
const bit<8> SK_GEOMETRY       = 6;   /* no store serves this sketch ID with these rows/width/op */
const bit<8> SK_RANGE          = 7;   /* column beyond the sketch */
const bit<8> SK_UNKNOWN_SWITCH = 8;   /* a switch the control plane did not install */
const bit<8> SK_MALFORMED      = 9;   /* reserved bits, R flag, priority 3, UDP length */
const bit<8> SK_UNSUPPORTED    = 10;  /* valid, but not a shape this program takes */
const bit<8> SK_RESP_ACK       = 11;
const bit<8> SK_RESP_NAK_SEQ   = 12;  /* fresh PSN-sequence-error NAK: PSN resynchronised */
const bit<8> SK_RESP_NAK_STALE = 13;  /* a NAK naming a PSN at or before the last one taken */
const bit<8> SK_RESP_OTHER     = 14;  /* RNR and fatal NAKs (fatal: reconnect, p4/README.md) */

/* What the sketch QP's registers do (sk_md.qp_op). */
const bit<2> SK_QP_NONE   = 0;
const bit<2> SK_QP_SEND   = 1;
const bit<2> SK_QP_RESYNC = 2;

/* ------------------------------------------------------------------ headers */

header sk_base_h {
    bit<8> magic_version; bit<8> opcode; bit<1> immediate; bit<1> retransmittable;
    bit<2> prio; bit<4> reserved; bit<8> reserved2; bit<32> seq;
}
/* The sub-header in two parts: a NACK is its first 4 bytes (sk_nack) followed by the report's
 * own last 12 (sk_b: switch, epoch, and the owed column written over the report's). */
header sk_a_h {
    bit<16> sketch_id; bit<8> rows; bit<8> cell_width; bit<8> merge_op; bit<8> reserved;
    bit<16> columns;
}
header sk_b_h { bit<32> switch_id; bit<32> epoch; bit<32> column; }
header sk_in_h { bit<32> v; }     /* a 4-byte cell, big-endian on the wire */
header sk_in8_h { bit<8> v; }     /* a 1-byte cell */
/* The record's head (and tail), little-endian: epoch, merged, expected. */
header sk_rec_h { bit<32> epoch_le; bit<16> merged_le; bit<16> expected_le; }
header sk_le_h { bit<32> w; }   /* a cell, little-endian */
header sk_nack_h { bit<16> magic_kind; bit<16> sketch_id; }   /* 0xD2 0x81, the sketch ID */

/* The second pipe's headers: the frame shapes the ICRC is appended to, and Sketch-Merge. */
struct ipipe_headers_t {
    bridge_h bridge;
    ethernet_h ethernet;
    ipv4_h ipv4;
    udp_h udp;
    sk_nack_h sk_nack;
    sk_base_h sk_base;
    sk_a_h sk;
    sk_b_h sk_b;
    sk_in_h[DTA_SK_ROWS] sk_in;
    sk_in8_h sk_in8;
    bth_h bth;
    aeth_h aeth;
    reth_h reth;
    atomic_eth_h atomic;
    immdt_h immdt;
    kw_payload_h kw_payload;
    word_h[DTA_AP_BATCH] ap_words;
    ap_trailer_h ap_trailer;
    word_h[DTA_PC_CHUNK_WORDS] pc_words;
    sk_rec_h sk_rec;
    /* The record's cells in IcrcEgress (in IcrcIngress the cells are merged in sk_in). */
    sk_le_h sk_o0; sk_le_h sk_o1; sk_le_h sk_o2; sk_le_h sk_o3;   /* the record's cells */
    sk_le_h sk_o4; sk_le_h sk_o5; sk_le_h sk_o6; sk_le_h sk_o7;
    sk_rec_h sk_rec_t;   /* the record's tail (IcrcEgress: a copy of sk_rec) */
    icrc_h icrc;
}

typedef bit<32> sk_cell_t;   /* indexes 2^DTA_SK_CELL_BITS entries */
typedef bit<16> sk_sw_t;
typedef bit<8> sk_idx_t;


/* SK_IF_ROW(R, code): code when the build has row R. */
#if DTA_SK_ROWS > 1
#define SK_IF_ROW_1(X) X
#else
#define SK_IF_ROW_1(X)
#endif
#if DTA_SK_ROWS > 2
#define SK_IF_ROW_2(X) X
#else
#define SK_IF_ROW_2(X)
#endif
#if DTA_SK_ROWS > 3
#define SK_IF_ROW_3(X) X
#else
#define SK_IF_ROW_3(X)
#endif
#if DTA_SK_ROWS > 4
#define SK_IF_ROW_4(X) X
#else
#define SK_IF_ROW_4(X)
#endif
#if DTA_SK_ROWS > 5
#define SK_IF_ROW_5(X) X
#else
#define SK_IF_ROW_5(X)
#endif
#if DTA_SK_ROWS > 6
#define SK_IF_ROW_6(X) X
#else
#define SK_IF_ROW_6(X)
#endif
#if DTA_SK_ROWS > 7
#define SK_IF_ROW_7(X) X
#else
#define SK_IF_ROW_7(X)
#endif
#define SK_IF_ROW(R, X) SK_IF_ROW_##R(X)

struct ipipe_ig_md_t {
    bit<1> handled;         /* Sketch-Merge took the packet (a report, or its QP's response) */
    bit<1> sk_shape;        /* the parser took the cells: a shape this program serves */
    bit<1> sk_far;          /* column >= 2^16: beyond any sketch this program holds */
    bit<16> nack_mk;        /* DTA_SK_MAGIC_VERSION ++ DTA_SK_NACK_KIND (set by the parser) */
    bit<16> sk_udp_len;     /* the UDP length that shape has */
    bit<8> ev;              /* SK_* event */
    bit<1> ev_valid;
    sk_idx_t sk;
    bit<32> col_d;          /* columns - 1, then minus the column: bit 31 set = beyond */
    bit<32> cell;           /* cell_base, then + column: the cell registers' index */
    bit<32> cnt_d;          /* expected, then count - expected: bit 31 clear = complete */
    bit<16> expected_le;    /* expected, little-endian (from the action data) */
    bit<1> wide;
    bit<8> op;
    bit<8> epoch_st;        /* 0 late, 1 the epoch being merged, 2 a newer one (now merged) */
    sk_sw_t sw;
    bit<1> sw_hit;          /* tbl_sk_switch knows the switch */
    bit<1> sw_same;         /* the switch already reported this epoch */
    bit<32> col_next;       /* the switch's next column if this is its first of the epoch;
                             * later: column - owed column */
    bit<32> exp_col;        /* the column the switch owes */
    bit<1> nack_due;
    bit<32> count;          /* switches merged into the column, this epoch */
    bit<1> fresh;           /* first merge of this epoch: the cells are set, not merged */
    bit<32> m0; bit<32> m1; bit<32> m2; bit<32> m3;   /* merged cells */
    bit<32> m4; bit<32> m5; bit<32> m6; bit<32> m7;
    bit<32> rep_ip;         /* the reporter's address (where a NACK goes) */
    /* the record's address */
    bit<32> c4x;            /* column << 2 */
    bit<32> t1;             /* column x stride (with t2), then the address' low half */
    bit<32> t2;             /* then the carry test */
    bit<32> slot_off;       /* the epoch slot's offset, then the record's */
    /* the sketch QP (tbl_sk_qp; its addresses go straight into the headers) */
    bit<32> q_base_hi; bit<32> q_base_lo; bit<32> q_base_hi1; bit<32> q_carry_at;
    bit<32> q_ack_every_m1; bit<16> q_nack_src_port; PortId_t q_port;
    bit<2> qp_op;
    bit<32> psn;            /* PSN << 8 */
    bit<1> ack_req;
    bit<32> nak_psn;        /* the NAK's PSN << 8 */
    bit<1> nak_fresh;
}

struct ipipe_eg_md_t { }

struct sk_cnt_t { bit<32> epoch; bit<32> count; }
struct sk_pair_t { bit<32> lo; bit<32> hi; }

/* ------------------------------------------------------------------ Sketch-Merge */

control SketchMerge(inout ipipe_headers_t hdr, inout ipipe_ig_md_t md,
                    in ingress_intrinsic_metadata_t ig_intr_md,
                    inout ingress_intrinsic_metadata_for_deparser_t ig_dprsr_md,
                    inout ingress_intrinsic_metadata_for_tm_t ig_tm_md) {
    Counter<bit<32>, bit<8>>(16, CounterType_t.PACKETS) sk_events;
    Counter<bit<32>, sk_idx_t>(DTA_SKETCHES, CounterType_t.PACKETS) sk_epochs;
    Counter<bit<32>, sk_idx_t>(DTA_SKETCHES, CounterType_t.PACKETS_AND_BYTES) sk_frames;

    /* ---- which sketch (control plane: one entry per store, its exact geometry) ---- */
    action set_sketch(sk_idx_t sk, bit<32> columns_m1, bit<32> cell_base, bit<32> expected,
                      bit<1> wide) {
        md.sk = sk; md.col_d = columns_m1; md.cell = cell_base; md.cnt_d = expected;
        md.wide = wide;
        md.expected_le = expected[7:0] ++ expected[15:8];
    }
    action no_sketch() { }
    table tbl_sketch {
        key = { hdr.sk.sketch_id : exact; hdr.sk.rows : exact; hdr.sk.cell_width : exact;
                hdr.sk.merge_op : exact; }
        actions = { set_sketch; no_sketch; }
        default_action = no_sketch();
        size = DTA_SKETCHES;
    }

    /* ---- the sketch's QP (from the collector's metadata or RDMA_CM, as pipe 0's tbl_qp) ----
     * Written straight into the frame's headers; a NACK then overrides what it needs. */
    action set_sk_qp(bit<48> src_mac, bit<48> dst_mac, bit<32> src_ip, bit<32> dst_ip,
                     bit<16> src_port, bit<24> remote_qpn, bit<32> rkey, bit<32> base_hi,
                     bit<32> base_lo, bit<32> base_hi1, bit<32> carry_at,
                     bit<32> ack_every_m1, PortId_t port, bit<16> nack_src_port) {
        hdr.ethernet.src = src_mac; hdr.ethernet.dst = dst_mac;
        hdr.ipv4.src = src_ip; hdr.ipv4.dst = dst_ip;
        hdr.udp.src_port = src_port;
        hdr.bth.setValid(); hdr.bth.dest_qp = remote_qpn;
        hdr.reth.setValid(); hdr.reth.rkey = rkey;
        md.q_base_hi = base_hi; md.q_base_lo = base_lo; md.q_base_hi1 = base_hi1;
        md.q_carry_at = carry_at; md.q_ack_every_m1 = ack_every_m1; md.q_port = port;
        md.q_nack_src_port = nack_src_port;
    }
    action no_sk_qp() { }
    table tbl_sk_qp {
        key = { md.sk : exact; }
        actions = { set_sk_qp; no_sk_qp; }
        default_action = no_sk_qp();
        size = DTA_SKETCHES;
    }

    /* ---- the switch's state slot (control plane: the switches of each sketch) ---- */
    action set_switch(sk_sw_t sw) { md.sw = sw; }
    action no_switch() { }
    table tbl_sk_switch {
        key = { md.sk : exact; hdr.sk_b.switch_id : exact; }
        actions = { set_switch; no_switch; }
        default_action = no_switch();
        size = DTA_SK_SWITCHES;
    }

    /* ---- the epoch's slot: SK_LAYOUT_HEADER_LEN + (epoch mod epochs) x slot bytes ---- */
    action set_slot(bit<32> slot_off) { md.slot_off = slot_off; }
    table tbl_sk_slot {
        key = { md.sk : exact; hdr.sk_b.epoch[3:0] : exact @name("epoch_lo4"); }
        actions = { set_slot; }
        default_action = set_slot(0);
        size = DTA_SKETCHES * 16;
    }

    /* ---- the epoch being merged, per sketch (RFC 1982 serial order) ---- */
    Register<bit<32>, sk_idx_t>(DTA_SKETCHES, 0) sk_epoch_reg;
    RegisterAction<bit<32>, sk_idx_t, bit<8>>(sk_epoch_reg) epoch_check = {
        void apply(inout bit<32> value, out bit<8> rv) {
            if (value == hdr.sk_b.epoch) {
                rv = 1;
            } else if ((int<32>)(hdr.sk_b.epoch - value) > 0) {
                value = hdr.sk_b.epoch; rv = 2;
            } else {
                rv = 0;
            }
        }
    };

    /* ---- per (sketch, switch): the epoch it is in and the next column it owes ---- */
    Register<bit<32>, sk_sw_t>(DTA_SK_SWITCHES, 0) sk_sw_epoch;
    RegisterAction<bit<32>, sk_sw_t, bit<1>>(sk_sw_epoch) sw_epoch_step = {
        void apply(inout bit<32> value, out bit<1> rv) {
            if (value == hdr.sk_b.epoch) { rv = 1; } else { value = hdr.sk_b.epoch; rv = 0; }
        }
    };
    Register<bit<32>, sk_sw_t>(DTA_SK_SWITCHES, 0) sk_sw_next;
    /* Same epoch: take the column if it is the owed one; return the owed column. */
    RegisterAction<bit<32>, sk_sw_t, bit<32>>(sk_sw_next) next_same = {
        void apply(inout bit<32> value, out bit<32> rv) {
            rv = value;
            if (value == hdr.sk_b.column) { value = value + 1; }
        }
    };
    /* The switch's first report of this epoch: it owes column 0. */
    RegisterAction<bit<32>, sk_sw_t, bit<32>>(sk_sw_next) next_fresh = {
        void apply(inout bit<32> value, out bit<32> rv) {
            rv = 0;
            value = md.col_next;
        }
    };
    action take_same() { md.exp_col = next_same.execute(md.sw); }
    action take_fresh() { md.exp_col = next_fresh.execute(md.sw); }
    table tbl_sk_next {
        key = { md.sw_same : exact; }
        actions = { take_same; take_fresh; }
        const entries = { 1 : take_same(); 0 : take_fresh(); }
        size = 2;
    }
    /* The (epoch, column) the switch was last NACKed for: one NACK per owed column. */
    Register<sk_pair_t, sk_sw_t>(DTA_SK_SWITCHES) sk_sw_nacked;
    RegisterAction<sk_pair_t, sk_sw_t, bit<1>>(sk_sw_nacked) nack_step = {
        void apply(inout sk_pair_t v, out bit<1> rv) {
            if (v.lo == hdr.sk_b.epoch && v.hi == md.exp_col) {
                rv = 0;
            } else {
                v.lo = hdr.sk_b.epoch; v.hi = md.exp_col; rv = 1;
            }
        }
    };

    /* ---- per column: the epoch it holds and the switches merged into it ---- */
    Register<sk_cnt_t, sk_cell_t>(1 << DTA_SK_CELL_BITS) sk_cnt_reg;
    RegisterAction<sk_cnt_t, sk_cell_t, bit<32>>(sk_cnt_reg) cnt_step = {
        void apply(inout sk_cnt_t v, out bit<32> rv) {
            if (v.epoch == hdr.sk_b.epoch) {
                v.count = v.count + 1;
            } else {
                v.epoch = hdr.sk_b.epoch; v.count = 1;
            }
            rv = v.count;
        }
    };

    /* ---- the merged cells, one register per row ----
     * The first merge of an epoch sets the cells (merging into zero); later ones merge. The
     * merged value goes to md.m<row> (a stateful ALU's output needs an aligned container; the
     * report's cells straddle containers), then little-endian over the report's cell. */
#define SK_ROW(R) \
    Register<bit<32>, sk_cell_t>(1 << DTA_SK_CELL_BITS, 0) sk_row##R; \
    RegisterAction<bit<32>, sk_cell_t, bit<32>>(sk_row##R) row##R##_set = { \
        void apply(inout bit<32> value, out bit<32> rv) { value = hdr.sk_in[R].v; rv = value; } }; \
    RegisterAction<bit<32>, sk_cell_t, bit<32>>(sk_row##R) row##R##_sum = { \
        void apply(inout bit<32> value, out bit<32> rv) { value = value |+| hdr.sk_in[R].v; rv = value; } }; \
    RegisterAction<bit<32>, sk_cell_t, bit<32>>(sk_row##R) row##R##_max = { \
        void apply(inout bit<32> value, out bit<32> rv) { \
            if (hdr.sk_in[R].v > value) { value = hdr.sk_in[R].v; } rv = value; } }; \
    RegisterAction<bit<32>, sk_cell_t, bit<32>>(sk_row##R) row##R##_add = { \
        void apply(inout bit<32> value, out bit<32> rv) { value = value + hdr.sk_in[R].v; rv = value; } }; \
    action r##R##_set() { md.m##R = row##R##_set.execute(md.cell); } \
    action r##R##_sum() { md.m##R = row##R##_sum.execute(md.cell); } \
    action r##R##_max() { md.m##R = row##R##_max.execute(md.cell); } \
    action r##R##_add() { md.m##R = row##R##_add.execute(md.cell); } \
    table tbl_sk_row##R { \
        key = { md.op : exact; md.fresh : exact; } \
        actions = { r##R##_set; r##R##_sum; r##R##_max; r##R##_add; } \
        const entries = { \
            (0, 1) : r##R##_set(); (1, 1) : r##R##_set(); (2, 1) : r##R##_set(); \
            (0, 0) : r##R##_sum(); (1, 0) : r##R##_max(); (2, 0) : r##R##_add(); \
        } \
        size = 8; \
    }
    SK_ROW(0)
#if DTA_SK_ROWS > 1
    SK_ROW(1)
#endif
#if DTA_SK_ROWS > 2
    SK_ROW(2)
#endif
#if DTA_SK_ROWS > 3
    SK_ROW(3)
#endif
#if DTA_SK_ROWS > 4
    SK_ROW(4)
#endif
#if DTA_SK_ROWS > 5
    SK_ROW(5)
#endif
#if DTA_SK_ROWS > 6
    SK_ROW(6)
#endif
#if DTA_SK_ROWS > 7
    SK_ROW(7)
#endif

    /* ---- the sketch QP: PSN (<< 8, as pipe 0's psn_reg), AckReq, NAK resync ---- */
    Register<bit<32>, sk_idx_t>(DTA_SKETCHES, 0) sk_psn_reg;
    RegisterAction<bit<32>, sk_idx_t, bit<32>>(sk_psn_reg) sk_psn_next = {
        void apply(inout bit<32> value, out bit<32> rv) { rv = value; value = value + 0x100; }
    };
    RegisterAction<bit<32>, sk_idx_t, bit<32>>(sk_psn_reg) sk_psn_resync = {
        void apply(inout bit<32> value) { value = md.nak_psn; }
    };
    action psn_take() { md.psn = sk_psn_next.execute(md.sk); }
    action psn_set() { sk_psn_resync.execute(md.sk); }
    table tbl_sk_psn {
        key = { md.qp_op : exact; md.nak_fresh : exact; }
        actions = { psn_take; psn_set; NoAction; }
        const entries = {
            (SK_QP_SEND, 0) : psn_take();
            (SK_QP_RESYNC, 1) : psn_set();
        }
        const default_action = NoAction();
        size = 2;
    }
    /* What the responder is known to have executed, as a point on the PSN line (pipe 0's
     * nak_reg): a NAK moves the PSN only when its point lies after the register's, so a stale
     * NAK cannot move it back over WRITEs the responder executed. The control plane sets it
     * to ACK(start PSN - 1). */
    Register<bit<32>, sk_idx_t>(DTA_SKETCHES, 0) sk_nak_reg;
    RegisterAction<bit<32>, sk_idx_t, bit<1>>(sk_nak_reg) sk_nak_accept = {
        void apply(inout bit<32> value, out bit<1> rv) {
            rv = 0;
            if ((int<32>)(md.nak_psn - value) > 0) { value = md.nak_psn; rv = 1; }
        }
    };
    Register<bit<32>, sk_idx_t>(DTA_SKETCHES, 0) sk_ackreq_reg;
    RegisterAction<bit<32>, sk_idx_t, bit<1>>(sk_ackreq_reg) sk_ackreq_next = {
        void apply(inout bit<32> value, out bit<1> rv) {
            if (value >= md.q_ack_every_m1) { value = 0; rv = 1; } else { value = value + 1; rv = 0; }
        }
    };

    /* ---- responses to a sketch QP ---- */
    action sk_resp(sk_idx_t sk) { md.sk = sk; }
    action not_sk_resp() { }
    table tbl_sk_resp {
        key = { hdr.ipv4.src : exact; hdr.bth.dest_qp : exact; }
        actions = { sk_resp; not_sk_resp; }
        default_action = not_sk_resp();
        size = DTA_SKETCHES;
    }

    /* Differences tested by the gateways below, each from its own table: a difference
     * computed inline is folded into the condition ("condition expression too complex"). */
    action range_calc() { md.col_d = md.col_d - hdr.sk_b.column; md.cell = md.cell + hdr.sk_b.column; }
    table tbl_sk_range { actions = { range_calc; } const default_action = range_calc(); size = 1; }
    action diff_calc() { md.col_next = hdr.sk_b.column - md.exp_col; }
    table tbl_sk_diff { actions = { diff_calc; } const default_action = diff_calc(); size = 1; }
    action cnt_calc() { md.cnt_d = md.count - md.cnt_d; }
    table tbl_sk_cnt_d { actions = { cnt_calc; } const default_action = cnt_calc(); size = 1; }

    action ev(bit<8> e) { md.ev = e; md.ev_valid = 1; }
    action drop_ev(bit<8> e) { md.ev = e; md.ev_valid = 1; ig_dprsr_md.drop_ctl = 1; }

    /* The record's address: base + slot offset + column x stride, stride = 4 x (rows + 4) for
     * the wide shape and 20 for one row (head, cells, tail). One table per step: the compiler
     * fuses consecutive statements into one action, and an action cannot use what it computes
     * itself. */
#if DTA_SK_ROWS == 1
#define SK_WIDE_T1 md.t1 = md.c4x << 2; md.t2 = md.c4x;
#elif DTA_SK_ROWS == 2
#define SK_WIDE_T1 md.t1 = md.c4x << 2; md.t2 = md.c4x << 1;
#elif DTA_SK_ROWS == 3
#define SK_WIDE_T1 md.t1 = md.c4x << 3; md.t2 = -md.c4x;
#else
#define SK_WIDE_T1 md.t1 = md.c4x << 3; md.t2 = 0;
#endif
    action stride_wide() { SK_WIDE_T1 }
    action stride_one() { md.t1 = md.c4x << 2; md.t2 = md.c4x; }
    table tbl_sk_stride {
        key = { md.wide : exact; }
        actions = { stride_wide; stride_one; }
        const entries = { 1 : stride_wide(); 0 : stride_one(); }
        size = 2;
    }
    action col_sum() { md.t1 = md.t1 + md.t2; }
    table tbl_sk_col_sum { actions = { col_sum; } const default_action = col_sum(); size = 1; }
    action rec_off() { md.slot_off = md.slot_off + md.t1; }
    table tbl_sk_off { actions = { rec_off; } const default_action = rec_off(); size = 1; }
    action addr_carry() {
        hdr.reth.va_lo = md.q_base_lo + md.slot_off;
        md.t2 = md.slot_off - md.q_carry_at;
    }
    table tbl_sk_addr { actions = { addr_carry; } const default_action = addr_carry(); size = 1; }

    /* The report becomes the RDMA WRITE of its column's record (proto's FrameTemplate bytes;
     * IcrcEgress appends the ICRC). tbl_sk_qp wrote the addresses, QPN and R_Key. */
    action frame_common(bit<16> transport_len, bit<32> stride) {
        hdr.ipv4.version = 4; hdr.ipv4.ihl = 5; hdr.ipv4.tos = 0;
        hdr.ipv4.total_len = transport_len + (IPV4_HEADER_LEN + UDP_HEADER_LEN);
        hdr.ipv4.ident = 0; hdr.ipv4.flags = 2; hdr.ipv4.frag_offset = 0; hdr.ipv4.ttl = 64;
        hdr.ipv4.protocol = IP_PROTO_UDP;
        hdr.udp.dst_port = ROCEV2_PORT;
        hdr.udp.len = transport_len + UDP_HEADER_LEN; hdr.udp.checksum = 0;
        hdr.bth.opcode = IB_OP_RC_RDMA_WRITE_ONLY; hdr.bth.se = 0; hdr.bth.mig_req = 1;
        hdr.bth.pad = 0; hdr.bth.tver = 0; hdr.bth.pkey = IB_PKEY_DEFAULT; hdr.bth.fecn = 0;
        hdr.bth.becn = 0; hdr.bth.resv6 = 0; hdr.bth.resv7 = 0;
        hdr.reth.dma_len = stride;
        hdr.sk_rec.expected_le = md.expected_le;
        hdr.sk_base.setInvalid(); hdr.sk.setInvalid(); hdr.sk_b.setInvalid();
        hdr.sk_in8.setInvalid();
        ig_tm_md.ucast_egress_port = md.q_port;
        hdr.bridge.kind = KIND_SKETCH;
    }
    /* PSN and AckReq share a container with the constant resv7: their own action. */
    action bth_seq() { hdr.bth.ack_req = md.ack_req; hdr.bth.psn = md.psn[31:8]; }
    table tbl_sk_bth { actions = { bth_seq; } const default_action = bth_seq(); size = 1; }

    /* Little-endian copies by the hash units (identity over the bytes in reverse order): a
     * byte reversal is no rotation, so the action ALUs cannot do it within a container. */
    Hash<bit<32>>(HashAlgorithm_t.IDENTITY) h_le_epoch;
    Hash<bit<16>>(HashAlgorithm_t.IDENTITY) h_le_merged;
/* One table per hash: a table's action takes at most 32 bits from the hash units. */
#define SK_LE_HASH(R) Hash<bit<32>>(HashAlgorithm_t.IDENTITY) h_le##R; \
    action le##R() { hdr.sk_in[R].v = h_le##R.get({ md.m##R[7:0], md.m##R[15:8], \
                                                   md.m##R[23:16], md.m##R[31:24] }); } \
    table tbl_sk_le##R { actions = { le##R; } const default_action = le##R(); size = 1; }
#define SK_LE(R) tbl_sk_le##R.apply();
    action le_epoch() {
        hdr.sk_rec.epoch_le = h_le_epoch.get({ hdr.sk_b.epoch[7:0], hdr.sk_b.epoch[15:8],
                                               hdr.sk_b.epoch[23:16], hdr.sk_b.epoch[31:24] });
    }
    table tbl_sk_le_epoch { actions = { le_epoch; } const default_action = le_epoch(); size = 1; }
    action le_merged() { hdr.sk_rec.merged_le = h_le_merged.get({ md.count[7:0], md.count[15:8] }); }
    table tbl_sk_le_merged { actions = { le_merged; } const default_action = le_merged(); size = 1; }
    SK_LE_HASH(0)
    SK_IF_ROW(1, SK_LE_HASH(1)) SK_IF_ROW(2, SK_LE_HASH(2)) SK_IF_ROW(3, SK_LE_HASH(3))
    SK_IF_ROW(4, SK_LE_HASH(4)) SK_IF_ROW(5, SK_LE_HASH(5)) SK_IF_ROW(6, SK_LE_HASH(6))
    SK_IF_ROW(7, SK_LE_HASH(7))

#define SK_INVALID_CELLS \
        hdr.sk_in[0].setInvalid(); \
        SK_IF_ROW(1, hdr.sk_in[1].setInvalid();) SK_IF_ROW(2, hdr.sk_in[2].setInvalid();) \
        SK_IF_ROW(3, hdr.sk_in[3].setInvalid();) SK_IF_ROW(4, hdr.sk_in[4].setInvalid();) \
        SK_IF_ROW(5, hdr.sk_in[5].setInvalid();) SK_IF_ROW(6, hdr.sk_in[6].setInvalid();) \
        SK_IF_ROW(7, hdr.sk_in[7].setInvalid();)

    apply {
        md.ev_valid = 0; md.qp_op = SK_QP_NONE; md.nak_fresh = 0; md.ack_req = 0;
        md.psn = 0; md.exp_col = 0; md.count = 0; md.handled = 0;
        /* A report shorter than its sub-header (the parser stopped before it) is not taken
         * here: it goes on to pipe 0 like any report, which counts it (DROP_BAD_VERSION, an
         * extended report of version 2) and drops it. A drop here cost pipe 1 a 13th stage. */
        if (hdr.sk.isValid()) {
            md.handled = 1;
        }
        if (hdr.sk.isValid()) {
            md.op = hdr.sk.merge_op;
            md.rep_ip = hdr.ipv4.src;
            if (hdr.sk_in8.isValid()) {
                /* A 1-byte cell is merged as a 32-bit one (max): it is the low byte of the
                 * record's little-endian cell word, the other three bytes are the padding. */
                hdr.sk_in[0].setValid();
                hdr.sk_in[0].v = (bit<32>)hdr.sk_in8.v;
            }
            md.col_next = 0;
            if (hdr.sk_b.column == 0) { md.col_next = 1; }
            md.c4x = hdr.sk_b.column << 2;

            if (hdr.sk_base.prio == 3 || hdr.sk_base.reserved != 0 || hdr.sk_base.reserved2 != 0
                || hdr.sk_base.retransmittable == 1 || hdr.sk.reserved != 0) {
                drop_ev(SK_MALFORMED);
            } else if (md.sk_far == 1) {
                drop_ev(SK_RANGE);
            } else if (md.sk_shape == 0) {
                drop_ev(SK_UNSUPPORTED);
            } else if (hdr.udp.len != md.sk_udp_len) {
                drop_ev(SK_MALFORMED);   /* cells shorter or longer than announced */
            } else if (!tbl_sketch.apply().hit) {
                drop_ev(SK_GEOMETRY);
            } else {
                tbl_sk_qp.apply();
                tbl_sk_slot.apply();
                tbl_sk_range.apply();
                /* Lookups and the record's address do not wait for the registers' verdicts
                 * (they change nothing), so they run in the stages the register chain takes. */
                md.sw_hit = 0;
                if (tbl_sk_switch.apply().hit) { md.sw_hit = 1; }
                tbl_sk_stride.apply();
                tbl_sk_col_sum.apply();
                tbl_sk_off.apply();
                tbl_sk_addr.apply();
                if (md.t2[31:31] == 1) { hdr.reth.va_hi = md.q_base_hi; } else { hdr.reth.va_hi = md.q_base_hi1; }
                tbl_sk_le_epoch.apply();
                if (md.col_d[31:31] == 1) {
                    drop_ev(SK_RANGE);
                } else {
                    md.epoch_st = epoch_check.execute(md.sk);
                    if (md.epoch_st == 0) {
                        drop_ev(SK_LATE);
                    } else {
                        if (md.epoch_st == 2) { sk_epochs.count(md.sk); }
                        if (md.sw_hit == 0) {
                            drop_ev(SK_UNKNOWN_SWITCH);
                        } else {
                            md.sw_same = sw_epoch_step.execute(md.sw);
                            tbl_sk_next.apply();
                            tbl_sk_diff.apply();
                            if (md.col_next == 0) {
                                /* ---- merge ---- */
                                md.count = cnt_step.execute(md.cell);
                                md.fresh = 0;
                                if (md.count == 1) { md.fresh = 1; }
                                tbl_sk_row0.apply();
#if DTA_SK_ROWS > 1
                                if (md.wide == 1) { tbl_sk_row1.apply(); }
#endif
#if DTA_SK_ROWS > 2
                                if (md.wide == 1) { tbl_sk_row2.apply(); }
#endif
#if DTA_SK_ROWS > 3
                                if (md.wide == 1) { tbl_sk_row3.apply(); }
#endif
#if DTA_SK_ROWS > 4
                                if (md.wide == 1) { tbl_sk_row4.apply(); }
#endif
#if DTA_SK_ROWS > 5
                                if (md.wide == 1) { tbl_sk_row5.apply(); }
#endif
#if DTA_SK_ROWS > 6
                                if (md.wide == 1) { tbl_sk_row6.apply(); }
#endif
#if DTA_SK_ROWS > 7
                                if (md.wide == 1) { tbl_sk_row7.apply(); }
#endif
                                tbl_sk_cnt_d.apply();
                                if (md.cnt_d[31:31] == 1) {
                                    drop_ev(SK_MERGED);
                                } else {
                                    ev(SK_WRITTEN);
                                    md.qp_op = SK_QP_SEND;
                                }
                            } else if (md.col_next[31:31] == 1) {
                                drop_ev(SK_DUPLICATE);
                            } else {
                                md.nack_due = nack_step.execute(md.sw);
                                if (md.nack_due == 1) {
                                    ev(SK_NACKED);
                                    /* ---- the sketch-column NACK, back where it came from:
                                     * its 4-byte head, then the report's switch and epoch
                                     * and the owed column ---- */
                                    hdr.sk_nack.setValid();
                                    hdr.sk_nack.magic_kind = md.nack_mk;
                                    hdr.sk_nack.sketch_id = hdr.sk.sketch_id;
                                    hdr.sk_b.column = md.exp_col;
                                    hdr.ethernet.dst = 0xFFFFFFFFFFFF;   /* as the software translator */
                                    hdr.ipv4.tos = 0;
                                    hdr.ipv4.total_len = IPV4_HEADER_LEN + UDP_HEADER_LEN + DTA_SK_NACK_LEN;
                                    hdr.ipv4.ident = 0; hdr.ipv4.flags = 2; hdr.ipv4.frag_offset = 0;
                                    hdr.ipv4.ttl = 64;
                                    hdr.ipv4.dst = md.rep_ip;   /* tbl_sk_qp set the source */
                                    hdr.udp.src_port = md.q_nack_src_port;
                                    hdr.udp.dst_port = DTA_NACK_PORT;
                                    hdr.udp.len = UDP_HEADER_LEN + DTA_SK_NACK_LEN;
                                    hdr.bth.setInvalid(); hdr.reth.setInvalid();
                                    hdr.sk_base.setInvalid(); hdr.sk.setInvalid();
                                    hdr.sk_in8.setInvalid();
                                    SK_INVALID_CELLS
                                    ig_tm_md.ucast_egress_port = ig_intr_md.ingress_port;
                                } else {
                                    drop_ev(SK_GAP_QUIET);
                                }
                            }
                        }
                    }
                }
            }
        } else if (hdr.aeth.isValid()) {
            if (tbl_sk_resp.apply().hit) {
                md.handled = 1;
                /* As pipe 0's nak_reg: a response's point on the PSN line, ACK(p) = p ++ 0x80,
                 * NAK "PSN sequence error"(q) = q ++ 0x01; a NAK is fresh only after the
                 * register's point, and ACKs move it too (one execute site). */
                bit<1> moves = 0;
                if (hdr.aeth.syndrome == AETH_NAK_PSN_SEQ_ERROR) {
                    md.nak_psn = hdr.bth.psn ++ 8w0x01;
                    moves = 1;
                    md.qp_op = SK_QP_RESYNC;
                } else if ((hdr.aeth.syndrome & AETH_SYN_KIND_MASK) == AETH_SYN_ACK) {
                    md.nak_psn = hdr.bth.psn ++ 8w0x80;
                    moves = 1;
                    drop_ev(SK_RESP_ACK);
                } else {
                    drop_ev(SK_RESP_OTHER);
                }
                if (moves == 1) { md.nak_fresh = sk_nak_accept.execute(md.sk); }
                if (md.qp_op == SK_QP_RESYNC) {
                    if (md.nak_fresh == 1) { drop_ev(SK_RESP_NAK_SEQ); }
                    else { drop_ev(SK_RESP_NAK_STALE); }
                }
            }
        }

        tbl_sk_psn.apply();
        if (md.qp_op == SK_QP_SEND) {
            md.ack_req = sk_ackreq_next.execute(md.sk);
            hdr.sk_rec.setValid();
            tbl_sk_le_merged.apply();
            SK_LE(0)
            if (md.wide == 1) {
                frame_common(SK_WRITE_TRANSPORT(SK_STRIDE_WIDE), SK_STRIDE_WIDE);
#if DTA_SK_ROWS > 1
                SK_LE(1)
#endif
#if DTA_SK_ROWS > 2
                SK_LE(2)
#endif
#if DTA_SK_ROWS > 3
                SK_LE(3)
#endif
#if DTA_SK_ROWS > 4
                SK_LE(4)
#endif
#if DTA_SK_ROWS > 5
                SK_LE(5)
#endif
#if DTA_SK_ROWS > 6
                SK_LE(6)
#endif
#if DTA_SK_ROWS > 7
                SK_LE(7)
#endif
            } else {
                frame_common(SK_WRITE_TRANSPORT(SK_STRIDE_ONE), SK_STRIDE_ONE);
            }
            tbl_sk_bth.apply();
            sk_frames.count(md.sk);
        }
        if (md.ev_valid == 1) { sk_events.count(md.ev); }
    }
}
