/* dta_sketch_reporter.p4: an example DTA Sketch-Merge reporter for Tofino-1 (P4_16, TNA).
 *
 * Every switch runs this program. It forwards IPv4 (a table on the destination address) and
 * summarises the IPv4 packets it sees in two sketches, which it sends to a DTA translator
 * column by column as Sketch-Merge reports (proto/PROTOCOL.md §3.4):
 *
 *   Count-Min    DTA_RSK_CM_ROWS rows x DTA_RSK_CM_COLS columns of 32-bit packet counters
 *                (merge op 0, saturating sum); row r's column is CRC-32 with IND_POLY_REPLICA<r>
 *                of the flow key, masked to columns - 1.
 *   HyperLogLog  2^DTA_RSK_HLL_P registers of ranks (1-byte cells, merge op 1, max); the hash is
 *                simple tabulation over CRC-32 with IND_POLY_SK_HLL of the flow key.
 *
 * Both are the `tofino` hash profile of dta_proto (proto/src/sketch/mod.rs, "The Tofino hash
 * profile"): collector stores fed by this program are configured `hash = "tofino"`. The flow
 * key is the 13-byte IPv4 5-tuple: source, destination, protocol, source port, destination port
 * (ports 0 unless the packet is an unfragmented, option-less TCP or UDP packet).
 *
 * Epochs. epoch = (ingress global timestamp >> DTA_RSK_EPOCH_SHIFT) + epoch_base, epoch_base
 * from the control plane. The translator merges the switches' columns of the same epoch, so the
 * control plane sets every switch's global timestamp to synchronised (PTP) wall-clock
 * nanoseconds modulo 2^48, which makes the epoch boundaries coincide, and epoch_base counts
 * the timestamp's wraps (every 2^48 ns, 3.26 days) in epochs (dta_bfrt.py,
 * sketch_reporter_epoch_base). Every cell is a register pair {epoch tag, value} in one of two
 * banks, bank = epoch & 1 (one register per bank and row, indexed by the column). An update in epoch e finds a tag
 * other than e and starts the cell afresh (tag = e, value = 1 / rank), otherwise it adds
 * (saturating) or takes the max: no sweep ever clears the sketches. The export of epoch e - 1
 * reads bank (e - 1) & 1, which nothing writes during epoch e, and reads 0 for a cell whose tag
 * is not e - 1 (not touched in e - 1). So the export of epoch e - 1 MUST finish within epoch e:
 * from e + 1 on, bank (e - 1) & 1 is overwritten by epoch e + 1 (the reports then carry a mix
 * of e - 1 and zeros, which the translator cannot tell from the truth). Size the trigger rate
 * so that CM columns + HLL registers triggers fit well inside one epoch.
 *
 * Trigger packets. An export is driven by trigger frames: Ethernet frames with EtherType
 * DTA_RSK_TRIGGER_ETHERTYPE (default 0x88B5, IEEE local experimental 1), exactly 60 bytes
 * (14 + 46: selector byte, reserved byte, 44 bytes of padding), from the Tofino packet
 * generator (a periodic-timer application; its 6-byte pktgen header overlays the Ethernet
 * destination, so the EtherType stays at offset 12) or injected by the CPU. Only ingress ports
 * the control plane lists in tbl_trigger (with the selector) are obeyed; the others' triggers
 * are dropped. Selector 0 exports Count-Min, 1 HyperLogLog (two pktgen applications, or one
 * CPU loop alternating). Each trigger becomes ONE report: the next column of epoch e - 1 of its
 * sketch, taken from the sketch's cursor register {epoch, next column}: a cursor for another
 * epoch restarts at column 0 of e - 1; after the last column the cursor stays there and the
 * triggers of that sketch are dropped until the next epoch. A Count-Min report carries one
 * column (rows x 4 bytes), a HyperLogLog report one register (1 byte). The report leaves
 * through the port, MACs, addresses and UDP source port of tbl_report_dst; seq = the column.
 *
 * NACKs. A sketch-column NACK (PROTOCOL.md §5.7: UDP to port 40044, 16 bytes 0xD2 0x81 ...) to
 * this switch's report address, whose switch ID is ours and whose sketch ID is one of ours
 * (tbl_nack, installed by the control plane), moves that sketch's cursor back to
 * expected_column if the NACK names the cursor's epoch; the NACK is then dropped. NACKs for
 * other epochs are dropped without effect; NACKs not addressed to us are forwarded.
 *
 * Knobs (defaults in brackets): DTA_RSK_CM_ROWS 1..4 [2], DTA_RSK_CM_COLS power of two 16..65536
 * [4096], DTA_RSK_HLL_P 4..16 [10], DTA_RSK_EPOCH_SHIFT 16..40 [30: 2^30 ns = 1.07 s],
 * DTA_RSK_TRIGGER_ETHERTYPE [0x88B5].
 *
 * Compile: bf-p4c --target tofino --arch tna --std p4-16 [-D...] dta_sketch_reporter.p4
 */

#include <core.p4>
#include <tna.p4>
#include "../include/dta_constants.p4"

#ifndef DTA_RSK_CM_ROWS
#define DTA_RSK_CM_ROWS 2
#endif
#ifndef DTA_RSK_CM_COLS
#define DTA_RSK_CM_COLS 4096
#endif
#ifndef DTA_RSK_HLL_P
#define DTA_RSK_HLL_P 10
#endif
#ifndef DTA_RSK_EPOCH_SHIFT
#define DTA_RSK_EPOCH_SHIFT 30
#endif
#ifndef DTA_RSK_TRIGGER_ETHERTYPE
#define DTA_RSK_TRIGGER_ETHERTYPE 0x88B5
#endif

#if DTA_RSK_CM_ROWS < 1 || DTA_RSK_CM_ROWS > 4
#error "DTA_RSK_CM_ROWS must be 1..4"
#endif
#if DTA_RSK_HLL_P < 4 || DTA_RSK_HLL_P > 16
#error "DTA_RSK_HLL_P must be 4..16"
#endif
/* The epoch is bits 47..SHIFT of the 48-bit timestamp: at most 32 bits, at least 8. */
#if DTA_RSK_EPOCH_SHIFT < 16 || DTA_RSK_EPOCH_SHIFT > 40
#error "DTA_RSK_EPOCH_SHIFT must be 16..40"
#endif
/* log2 of the Count-Min column count (the column is a slice of the CRC). */
#if DTA_RSK_CM_COLS == 16
#define RSK_CM_LOG 4
#elif DTA_RSK_CM_COLS == 32
#define RSK_CM_LOG 5
#elif DTA_RSK_CM_COLS == 64
#define RSK_CM_LOG 6
#elif DTA_RSK_CM_COLS == 128
#define RSK_CM_LOG 7
#elif DTA_RSK_CM_COLS == 256
#define RSK_CM_LOG 8
#elif DTA_RSK_CM_COLS == 512
#define RSK_CM_LOG 9
#elif DTA_RSK_CM_COLS == 1024
#define RSK_CM_LOG 10
#elif DTA_RSK_CM_COLS == 2048
#define RSK_CM_LOG 11
#elif DTA_RSK_CM_COLS == 4096
#define RSK_CM_LOG 12
#elif DTA_RSK_CM_COLS == 8192
#define RSK_CM_LOG 13
#elif DTA_RSK_CM_COLS == 16384
#define RSK_CM_LOG 14
#elif DTA_RSK_CM_COLS == 32768
#define RSK_CM_LOG 15
#elif DTA_RSK_CM_COLS == 65536
#define RSK_CM_LOG 16
#else
#error "DTA_RSK_CM_COLS must be a power of two, 16..65536"
#endif

#define RSK_HLL_REGS (1 << DTA_RSK_HLL_P)
#define RSK_HLL_W (32 - DTA_RSK_HLL_P)      /* bits of the hash after the register index */

const bit<16> RSK_TRIGGER_ETHERTYPE = DTA_RSK_TRIGGER_ETHERTYPE;
const bit<16> RSK_SK_NACK_HEAD = 0xD281;    /* DTA_SK_MAGIC_VERSION ++ DTA_SK_NACK_KIND */

/* Byte counts of the two report shapes (UDP payload; the 28-byte fixed part, then cells). */
#define RSK_CM_DTA_LEN (DTA_SK_FIXED_LEN + 4 * DTA_RSK_CM_ROWS)
#define RSK_HLL_DTA_LEN (DTA_SK_FIXED_LEN + 1)

/* What a packet does in this program (ig_md_t.mode). */
const bit<8> MODE_NONE = 0;        /* not IPv4, or an ignored trigger */
const bit<8> MODE_DATA = 1;        /* counted into both sketches, forwarded */
const bit<8> MODE_EXPORT_CM = 2;   /* trigger: next Count-Min column */
const bit<8> MODE_EXPORT_HLL = 3;  /* trigger: next HyperLogLog register */
const bit<8> MODE_NACK_CM = 4;     /* NACK for our Count-Min sketch */
const bit<8> MODE_NACK_HLL = 5;    /* NACK for our HyperLogLog sketch */

#define CRC32_CUSTOM(poly) CRCPolynomial<bit<32>>(poly, true, false, false, CRC_INIT, CRC_XOROUT)

header ethernet_h { bit<48> dst; bit<48> src; bit<16> ether_type; }
header ipv4_h {
    bit<4> version; bit<4> ihl; bit<8> tos; bit<16> total_len; bit<16> ident;
    bit<3> flags; bit<13> frag_offset; bit<8> ttl; bit<8> protocol; bit<16> checksum;
    bit<32> src; bit<32> dst;
}
header l4_ports_h { bit<16> src_port; bit<16> dst_port; }
header udp_rest_h { bit<16> len; bit<16> checksum; }
/* The first 2 bytes of a trigger's 46-byte payload; the other 44 are skipped. */
header trigger_h { bit<8> sketch; bit<8> reserved; }
/* PROTOCOL.md §5.7. */
header sk_nack_h {
    bit<8> magic_version; bit<8> kind; bit<16> sketch_id;
    bit<32> switch_id; bit<32> epoch; bit<32> expected_column;
}
/* The report: UDP, then the 28-byte Sketch-Merge fixed part (PROTOCOL.md §3.4), then cells. */
header udp_h { bit<16> src_port; bit<16> dst_port; bit<16> len; bit<16> checksum; }
header sk_report_h {
    bit<8> magic_version; bit<8> opcode; bit<8> flags; bit<8> reserved0; bit<32> seq;
    bit<16> sketch_id; bit<8> rows; bit<8> cell_width;
    bit<8> merge_op; bit<8> reserved1; bit<16> columns;
    bit<32> switch_id; bit<32> epoch; bit<32> column;
}
header cell32_h { bit<32> v; }
header cell8_h { bit<8> v; }

struct headers_t {
    ethernet_h ethernet;
    trigger_h trigger;
    ipv4_h ipv4;
    l4_ports_h ports;
    udp_rest_h udp_rest;
    sk_nack_h sk_nack;
    udp_h udp;
    sk_report_h sk;
    cell32_h cm0;
    cell32_h cm1;
    cell32_h cm2;
    cell32_h cm3;
    cell8_h hll;
}

struct ig_md_t {
    bit<16> sport;          /* flow key ports (0 unless TCP/UDP) */
    bit<16> dport;
    bit<8> mode;
    bit<32> switch_id;
    bit<16> cm_id;          /* sketch IDs (control plane) */
    bit<16> hll_id;
    bit<32> tslice;         /* timestamp >> DTA_RSK_EPOCH_SHIFT */
    bit<32> base;           /* epoch base (control plane) */
    bit<32> base_m1;        /* epoch base - 1 */
    bit<32> sel;            /* update: e; export: e - 1; NACK: the NACK's epoch */
    bit<1> bank;            /* sel's parity, the bank (a copy: a table cannot match on a slice
                             * of its own stateful ALU's input) */
    bit<32> col;            /* export: the column the cursor hands out */
    bit<32> h0;             /* Count-Min row CRCs */
    bit<32> h1;
    bit<32> h2;
    bit<32> h3;
    bit<RSK_CM_LOG> cm_idx0;          /* row r's column (in the bank of md.sel's parity) */
    bit<RSK_CM_LOG> cm_idx1;
    bit<RSK_CM_LOG> cm_idx2;
    bit<RSK_CM_LOG> cm_idx3;
    bit<32> hll_x;          /* HyperLogLog CRC */
    bit<32> t0;             /* its tabulation words */
    bit<32> t1;
    bit<32> t2;
    bit<32> t3;
    bit<32> t01;
    bit<32> t23;
    bit<32> hll_h;          /* tab(CRC) */
    bit<32> rank;
    bit<DTA_RSK_HLL_P> hll_idx;       /* the register (in the bank of md.sel's parity) */
    bit<32> c0;             /* export: the cells read */
    bit<32> c1;
    bit<32> c2;
    bit<32> c3;
    bit<32> hll_val;
}

struct eg_md_t { }

struct cell_t { bit<32> tag; bit<32> value; }     /* epoch tag, counter or rank */
struct cursor_t { bit<32> epoch; bit<32> col; }   /* epoch being exported, its next column */

parser IgParser(packet_in pkt, out headers_t hdr, out ig_md_t md,
                out ingress_intrinsic_metadata_t ig_intr_md) {
    state start {
        pkt.extract(ig_intr_md);
        pkt.advance(PORT_METADATA_SIZE);
        md.sport = 0; md.dport = 0;
        md.mode = MODE_NONE;
        pkt.extract(hdr.ethernet);
        transition select(hdr.ethernet.ether_type) {
            ETHERTYPE_IPV4: parse_ipv4;
            RSK_TRIGGER_ETHERTYPE: parse_trigger;
            default: accept;
        }
    }
    /* The padding is consumed, so the report built from the trigger carries nothing after its
     * cells (a trigger longer than 60 bytes would leave its extra bytes behind the cells, which
     * the translator refuses as malformed). */
    state parse_trigger {
        pkt.extract(hdr.trigger);
        pkt.advance(44 * 8);
        transition accept;
    }
    state parse_ipv4 {
        pkt.extract(hdr.ipv4);
        md.mode = MODE_DATA;
        transition select(hdr.ipv4.ihl, hdr.ipv4.frag_offset, hdr.ipv4.protocol) {
            (5, 0, IP_PROTO_UDP): parse_udp;
            (5, 0, 6): parse_tcp;
            default: accept;
        }
    }
    state parse_tcp {
        pkt.extract(hdr.ports);
        md.sport = hdr.ports.src_port; md.dport = hdr.ports.dst_port;
        transition accept;
    }
    state parse_udp {
        pkt.extract(hdr.ports);
        pkt.extract(hdr.udp_rest);
        md.sport = hdr.ports.src_port; md.dport = hdr.ports.dst_port;
        transition select(hdr.ports.dst_port) { DTA_NACK_PORT: parse_nack_head; default: accept; }
    }
    state parse_nack_head {
        transition select(pkt.lookahead<bit<16>>()) { RSK_SK_NACK_HEAD: parse_nack; default: accept; }
    }
    state parse_nack { pkt.extract(hdr.sk_nack); transition accept; }
}

control Ingress(inout headers_t hdr, inout ig_md_t md,
                in ingress_intrinsic_metadata_t ig_intr_md,
                in ingress_intrinsic_metadata_from_parser_t ig_prsr_md,
                inout ingress_intrinsic_metadata_for_deparser_t ig_dprsr_md,
                inout ingress_intrinsic_metadata_for_tm_t ig_tm_md) {

    /* ---- this switch (control plane: the default action) ---- */
    /* epoch_base: the global timestamp's wraps, in epochs (see "Epochs" above), re-installed
     * at each wrap; the control plane also passes base - 1 (an action cannot do arithmetic on
     * two constants). */
    action set_switch(bit<32> switch_id, bit<16> cm_id, bit<16> hll_id, bit<32> epoch_base,
                      bit<32> epoch_base_minus_1) {
        md.switch_id = switch_id; md.cm_id = cm_id; md.hll_id = hll_id;
        md.base = epoch_base; md.base_m1 = epoch_base_minus_1;
        md.tslice = (bit<32>)ig_prsr_md.global_tstamp[47:DTA_RSK_EPOCH_SHIFT];
    }
    table tbl_switch {
        actions = { set_switch; }
        default_action = set_switch(0, 0, 0, 0, 0xFFFFFFFF);
        size = 1;
    }
    /* The one epoch every register compares with (a stateful ALU reads at most two PHV
     * fields): e for updates, e - 1 for exports, the NACK's epoch for NACKs. */
    action sel_now() { md.sel = md.tslice + md.base; }
    action sel_prev() { md.sel = md.tslice + md.base_m1; }
    action sel_nack() { md.sel = hdr.sk_nack.epoch; }
    table tbl_epoch {
        key = { md.mode : exact; }
        actions = { sel_now; sel_prev; sel_nack; NoAction; }
        const entries = {
            MODE_DATA : sel_now();
            MODE_EXPORT_CM : sel_prev();
            MODE_EXPORT_HLL : sel_prev();
            MODE_NACK_CM : sel_nack();
            MODE_NACK_HLL : sel_nack();
        }
        default_action = NoAction();
        size = 8;
    }

    /* ---- packet classes ---- */
    action export(bit<8> mode) { md.mode = mode; }
    action ignore_trigger() { md.mode = MODE_NONE; }
    /* (ingress port, selector) -> which sketch; entries: pktgen / CPU ports x {0: CM, 1: HLL}. */
    table tbl_trigger {
        key = {
            ig_intr_md.ingress_port : exact @name("ingress_port");
            hdr.trigger.sketch : exact @name("sketch");
        }
        actions = { export; ignore_trigger; }
        default_action = ignore_trigger();
        size = 64;
    }
    action nack(bit<8> mode) { md.mode = mode; }
    action not_ours() { md.mode = MODE_DATA; }
    /* (our report address, our switch ID, one of our sketch IDs) -> whose cursor. */
    table tbl_nack {
        key = {
            hdr.ipv4.dst : exact @name("dst_addr");
            hdr.sk_nack.switch_id : exact @name("switch_id");
            hdr.sk_nack.sketch_id : exact @name("sketch_id");
            hdr.udp_rest.len : exact @name("udp_len");
        }
        actions = { nack; not_ours; }
        default_action = not_ours();
        size = 4;
    }

    action forward(PortId_t port) {
        ig_tm_md.ucast_egress_port = port;
        hdr.ipv4.ttl = hdr.ipv4.ttl - 1;
    }
    action no_route() { ig_dprsr_md.drop_ctl = 1; }
    table tbl_forward {
        key = { hdr.ipv4.dst : exact @name("dst_addr"); }
        actions = { forward; no_route; }
        default_action = no_route();
        size = 4096;
    }

    /* ---- flow-key hashes (PROTOCOL.md §3.4 "Hashes", the Tofino profile) ---- */
#define FLOW_KEY { hdr.ipv4.src, hdr.ipv4.dst, hdr.ipv4.protocol, md.sport, md.dport }
    Hash<bit<32>>(HashAlgorithm_t.CUSTOM, CRC32_CUSTOM(IND_POLY_REPLICA0)) h_row0;
    Hash<bit<32>>(HashAlgorithm_t.CUSTOM, CRC32_CUSTOM(IND_POLY_REPLICA1)) h_row1;
    Hash<bit<32>>(HashAlgorithm_t.CUSTOM, CRC32_CUSTOM(IND_POLY_REPLICA2)) h_row2;
    Hash<bit<32>>(HashAlgorithm_t.CUSTOM, CRC32_CUSTOM(IND_POLY_REPLICA3)) h_row3;
    Hash<bit<32>>(HashAlgorithm_t.CUSTOM, CRC32_CUSTOM(IND_POLY_SK_HLL)) h_hll;
    /* One action per hash: an action takes at most 32 bits from the hash units. */
    action hash_row0() { md.h0 = h_row0.get(FLOW_KEY); }
    action hash_row1() { md.h1 = h_row1.get(FLOW_KEY); }
    action hash_row2() { md.h2 = h_row2.get(FLOW_KEY); }
    action hash_row3() { md.h3 = h_row3.get(FLOW_KEY); }
    action hash_hll() { md.hll_x = h_hll.get(FLOW_KEY); }
    table tbl_hash_row0 { actions = { hash_row0; } default_action = hash_row0(); size = 1; }
    table tbl_hash_row1 { actions = { hash_row1; } default_action = hash_row1(); size = 1; }
    table tbl_hash_row2 { actions = { hash_row2; } default_action = hash_row2(); size = 1; }
    table tbl_hash_row3 { actions = { hash_row3; } default_action = hash_row3(); size = 1; }
    table tbl_hash_hll { actions = { hash_hll; } default_action = hash_hll(); size = 1; }

    /* HyperLogLog tabulation: T0[x0] ^ T1[x1] ^ T2[x2] ^ T3[x3], x0 the CRC's low byte; four
     * exact-match tables in one stage, two XORs after. */
    action tab0(bit<32> w) { md.t0 = w; }
    action tab1(bit<32> w) { md.t1 = w; }
    action tab2(bit<32> w) { md.t2 = w; }
    action tab3(bit<32> w) { md.t3 = w; }
    table tbl_tab0 {
        key = { md.hll_x[7:0] : exact; }
        actions = { tab0; }
        const entries = { DTA_SK_TAB0(tab0) }
        size = 256;
    }
    table tbl_tab1 {
        key = { md.hll_x[15:8] : exact; }
        actions = { tab1; }
        const entries = { DTA_SK_TAB1(tab1) }
        size = 256;
    }
    table tbl_tab2 {
        key = { md.hll_x[23:16] : exact; }
        actions = { tab2; }
        const entries = { DTA_SK_TAB2(tab2) }
        size = 256;
    }
    table tbl_tab3 {
        key = { md.hll_x[31:24] : exact; }
        actions = { tab3; }
        const entries = { DTA_SK_TAB3(tab3) }
        size = 256;
    }

    /* rank = leading zeros of (h << p) + 1: the highest set bit j of h's low W = 32 - p bits
     * gives rank W - j; none set gives W + 1 (the default). */
    action set_rank(bit<32> r) { md.rank = r; }
#define RSK_REST_MASK (32w0xFFFFFFFF >> DTA_RSK_HLL_P)
#define RANK_ENTRY(j) (32w1 << j) &&& ((RSK_REST_MASK >> j) << j) : set_rank(RSK_HLL_W - j);
    table tbl_rank {
        key = { md.hll_h : ternary; }
        actions = { set_rank; }
        default_action = set_rank(RSK_HLL_W + 1);
        const entries = {
            RANK_ENTRY(0) RANK_ENTRY(1) RANK_ENTRY(2) RANK_ENTRY(3)
            RANK_ENTRY(4) RANK_ENTRY(5) RANK_ENTRY(6) RANK_ENTRY(7)
            RANK_ENTRY(8) RANK_ENTRY(9) RANK_ENTRY(10) RANK_ENTRY(11)
            RANK_ENTRY(12) RANK_ENTRY(13) RANK_ENTRY(14) RANK_ENTRY(15)
#if RSK_HLL_W > 16
            RANK_ENTRY(16)
#endif
#if RSK_HLL_W > 17
            RANK_ENTRY(17)
#endif
#if RSK_HLL_W > 18
            RANK_ENTRY(18)
#endif
#if RSK_HLL_W > 19
            RANK_ENTRY(19)
#endif
#if RSK_HLL_W > 20
            RANK_ENTRY(20)
#endif
#if RSK_HLL_W > 21
            RANK_ENTRY(21)
#endif
#if RSK_HLL_W > 22
            RANK_ENTRY(22)
#endif
#if RSK_HLL_W > 23
            RANK_ENTRY(23)
#endif
#if RSK_HLL_W > 24
            RANK_ENTRY(24)
#endif
#if RSK_HLL_W > 25
            RANK_ENTRY(25)
#endif
#if RSK_HLL_W > 26
            RANK_ENTRY(26)
#endif
#if RSK_HLL_W > 27
            RANK_ENTRY(27)
#endif
        }
        size = 32;
    }

    /* ---- cursors: {epoch being exported, next column}, one per sketch ---- */
    Register<cursor_t, bit<1>>(1) cm_cursor;
    Register<cursor_t, bit<1>>(1) hll_cursor;
#define CURSOR_ACTIONS(NAME, COLS) \
    /* Hand out the next column of epoch e - 1 (restart at 0 for a cursor of another epoch); \
     * a cursor at COLS stays there. */ \
    RegisterAction<cursor_t, bit<1>, bit<32>>(NAME##_cursor) NAME##_cursor_next = { \
        void apply(inout cursor_t c, out bit<32> rv) { \
            if (c.epoch != md.sel) { \
                c.epoch = md.sel; c.col = 1; rv = 0; \
            } else { \
                rv = c.col; \
                if (c.col < COLS) { c.col = c.col + 1; } \
            } \
        } \
    }; \
    /* A NACK for the cursor's epoch: resend from expected_column on. */ \
    RegisterAction<cursor_t, bit<1>, bit<32>>(NAME##_cursor) NAME##_cursor_nack = { \
        void apply(inout cursor_t c) { \
            if (c.epoch == md.sel) { c.col = hdr.sk_nack.expected_column; } \
        } \
    }; \
    action NAME##_next() { md.col = NAME##_cursor_next.execute(0); } \
    action NAME##_rewind() { NAME##_cursor_nack.execute(0); }
    CURSOR_ACTIONS(cm, DTA_RSK_CM_COLS)
    CURSOR_ACTIONS(hll, RSK_HLL_REGS)
    /* One table per register, keyed by the mode: a register executed from two branches cannot
     * share its stage (p4/README.md). */
    table tbl_cm_cursor {
        key = { md.mode : exact; }
        actions = { cm_next; cm_rewind; NoAction; }
        const entries = { MODE_EXPORT_CM : cm_next(); MODE_NACK_CM : cm_rewind(); }
        default_action = NoAction();
        size = 2;
    }
    table tbl_hll_cursor {
        key = { md.mode : exact; }
        actions = { hll_next; hll_rewind; NoAction; }
        const entries = { MODE_EXPORT_HLL : hll_next(); MODE_NACK_HLL : hll_rewind(); }
        default_action = NoAction();
        size = 2;
    }

    /* ---- register indices: the column (each bank is a register of its own) ---- */
    action idx_data() {
        md.cm_idx0 = md.h0[RSK_CM_LOG - 1:0];
        md.cm_idx1 = md.h1[RSK_CM_LOG - 1:0];
        md.cm_idx2 = md.h2[RSK_CM_LOG - 1:0];
        md.cm_idx3 = md.h3[RSK_CM_LOG - 1:0];
    }
    /* Every row reads the same column; one index field per register (both of a table's
     * register actions must index the same way). */
    action idx_export_cm() {
        md.cm_idx0 = md.col[RSK_CM_LOG - 1:0];
        md.cm_idx1 = md.col[RSK_CM_LOG - 1:0];
        md.cm_idx2 = md.col[RSK_CM_LOG - 1:0];
        md.cm_idx3 = md.col[RSK_CM_LOG - 1:0];
    }
    table tbl_cm_idx {
        key = { md.mode : exact; }
        actions = { idx_data; idx_export_cm; NoAction; }
        const entries = { MODE_DATA : idx_data(); MODE_EXPORT_CM : idx_export_cm(); }
        default_action = NoAction();
        size = 2;
    }
    action set_bank() { md.bank = md.sel[0:0]; }
    action xor_halves() { md.t01 = md.t0 ^ md.t1; md.t23 = md.t2 ^ md.t3; }
    action xor_all() { md.hll_h = md.t01 ^ md.t23; }
    action hll_idx_data() { md.hll_idx = md.hll_h[31:RSK_HLL_W]; }
    action hll_idx_export() { md.hll_idx = md.col[DTA_RSK_HLL_P - 1:0]; }
    table tbl_hll_idx {
        key = { md.mode : exact; }
        actions = { hll_idx_data; hll_idx_export; NoAction; }
        const entries = { MODE_DATA : hll_idx_data(); MODE_EXPORT_HLL : hll_idx_export(); }
        default_action = NoAction();
        size = 2;
    }

    /* ---- the sketches: {epoch tag, value} pairs, two banks ---- */
    /* Each bank is a register of its own (index = the column), chosen by the epoch's parity:
     * one register holding both banks needs 2 x 65,536 pairs for the largest sketches, more
     * SRAM than a stage gives one register; a bank of 65,536 pairs is 32 blocks. */
#define CM_BANK(R, B) \
    Register<cell_t, bit<RSK_CM_LOG>>(DTA_RSK_CM_COLS) cm_row##R##_bank##B; \
    /* Epoch e: a cell tagged with another epoch starts afresh at 1; else +1, saturating. */ \
    RegisterAction<cell_t, bit<RSK_CM_LOG>, bit<32>>(cm_row##R##_bank##B) cm##R##_count##B = { \
        void apply(inout cell_t c) { \
            if (c.tag != md.sel) { c.tag = md.sel; c.value = 1; } \
            else { c.value = c.value |+| 1; } \
        } \
    }; \
    /* Export of e - 1: the value if the cell was written in e - 1, else 0. */ \
    RegisterAction<cell_t, bit<RSK_CM_LOG>, bit<32>>(cm_row##R##_bank##B) cm##R##_read##B = { \
        void apply(inout cell_t c, out bit<32> rv) { \
            rv = 0; \
            if (c.tag == md.sel) { rv = c.value; } \
        } \
    }; \
    action cm##R##_update##B() { cm##R##_count##B.execute(md.cm_idx##R); } \
    action cm##R##_export##B() { md.c##R = cm##R##_read##B.execute(md.cm_idx##R); } \
    table tbl_cm##R##_bank##B { \
        key = { md.mode : exact; md.bank : exact; } \
        actions = { cm##R##_update##B; cm##R##_export##B; NoAction; } \
        const entries = { \
            (MODE_DATA, B) : cm##R##_update##B(); \
            (MODE_EXPORT_CM, B) : cm##R##_export##B(); \
        } \
        default_action = NoAction(); \
        size = 2; \
    }
#define CM_ROW(R) CM_BANK(R, 0) CM_BANK(R, 1)
    CM_ROW(0)
#if DTA_RSK_CM_ROWS > 1
    CM_ROW(1)
#endif
#if DTA_RSK_CM_ROWS > 2
    CM_ROW(2)
#endif
#if DTA_RSK_CM_ROWS > 3
    CM_ROW(3)
#endif

#define HLL_BANK(B) \
    Register<cell_t, bit<DTA_RSK_HLL_P>>(RSK_HLL_REGS) hll_bank##B; \
    /* Epoch e: a register tagged with another epoch starts afresh at the rank; else max. */ \
    RegisterAction<cell_t, bit<DTA_RSK_HLL_P>, bit<32>>(hll_bank##B) hll_max##B = { \
        void apply(inout cell_t c) { \
            if (c.tag != md.sel) { c.tag = md.sel; c.value = md.rank; } \
            else if (md.rank > c.value) { c.value = md.rank; } \
        } \
    }; \
    RegisterAction<cell_t, bit<DTA_RSK_HLL_P>, bit<32>>(hll_bank##B) hll_read##B = { \
        void apply(inout cell_t c, out bit<32> rv) { \
            rv = 0; \
            if (c.tag == md.sel) { rv = c.value; } \
        } \
    }; \
    action hll_update##B() { hll_max##B.execute(md.hll_idx); } \
    action hll_export##B() { md.hll_val = hll_read##B.execute(md.hll_idx); } \
    table tbl_hll_bank##B { \
        key = { md.mode : exact; md.bank : exact; } \
        actions = { hll_update##B; hll_export##B; NoAction; } \
        const entries = { \
            (MODE_DATA, B) : hll_update##B(); \
            (MODE_EXPORT_HLL, B) : hll_export##B(); \
        } \
        default_action = NoAction(); \
        size = 2; \
    }
    HLL_BANK(0)
    HLL_BANK(1)

    /* ---- the report (the trigger frame becomes it) ---- */
    action set_report_dst(PortId_t port, bit<48> src_mac, bit<48> dst_mac, bit<32> src_ip,
                          bit<32> dst_ip, bit<16> udp_src_port) {
        ig_tm_md.ucast_egress_port = port;
        hdr.ethernet.src = src_mac; hdr.ethernet.dst = dst_mac;
        hdr.ethernet.ether_type = ETHERTYPE_IPV4;
        hdr.ipv4.setValid();
        hdr.ipv4.version = 4; hdr.ipv4.ihl = 5; hdr.ipv4.tos = 0; hdr.ipv4.ident = 0;
        hdr.ipv4.flags = 2; hdr.ipv4.frag_offset = 0; hdr.ipv4.ttl = 64;
        hdr.ipv4.protocol = IP_PROTO_UDP; hdr.ipv4.checksum = 0;
        hdr.ipv4.src = src_ip; hdr.ipv4.dst = dst_ip;
        hdr.udp.setValid();
        hdr.udp.src_port = udp_src_port; hdr.udp.dst_port = DTA_PORT; hdr.udp.checksum = 0;
    }
    table tbl_report_dst {
        actions = { set_report_dst; }
        default_action = set_report_dst(0, 0, 0, 0, 0, 0xC0DE);
        size = 1;
    }
    action sk_common() {
        hdr.sk.setValid();
        hdr.sk.magic_version = DTA_SK_MAGIC_VERSION;
        hdr.sk.opcode = DTA_OP_SKETCH_MERGE;
        hdr.sk.flags = 0x10;                /* I = 0, R = 0, medium priority */
        hdr.sk.reserved0 = 0;
        hdr.sk.seq = md.col;
        hdr.sk.reserved1 = 0;
        hdr.sk.columns = 1;
        hdr.sk.switch_id = md.switch_id;
        hdr.sk.epoch = md.sel;
        hdr.sk.column = md.col;
        hdr.trigger.setInvalid();
    }
    action report_cm() {
        sk_common();
        hdr.sk.sketch_id = md.cm_id;
        hdr.sk.rows = DTA_RSK_CM_ROWS;
        hdr.sk.cell_width = 4;
        hdr.sk.merge_op = 0;
        hdr.ipv4.total_len = IPV4_HEADER_LEN + UDP_HEADER_LEN + RSK_CM_DTA_LEN;
        hdr.udp.len = UDP_HEADER_LEN + RSK_CM_DTA_LEN;
        hdr.cm0.setValid(); hdr.cm0.v = md.c0;
#if DTA_RSK_CM_ROWS > 1
        hdr.cm1.setValid(); hdr.cm1.v = md.c1;
#endif
#if DTA_RSK_CM_ROWS > 2
        hdr.cm2.setValid(); hdr.cm2.v = md.c2;
#endif
#if DTA_RSK_CM_ROWS > 3
        hdr.cm3.setValid(); hdr.cm3.v = md.c3;
#endif
    }
    action report_hll() {
        sk_common();
        hdr.sk.sketch_id = md.hll_id;
        hdr.sk.rows = 1;
        hdr.sk.cell_width = 1;
        hdr.sk.merge_op = 1;
        hdr.ipv4.total_len = IPV4_HEADER_LEN + UDP_HEADER_LEN + RSK_HLL_DTA_LEN;
        hdr.udp.len = UDP_HEADER_LEN + RSK_HLL_DTA_LEN;
        hdr.hll.setValid(); hdr.hll.v = md.hll_val[7:0];
    }
    action drop() { ig_dprsr_md.drop_ctl = 1; }

    apply {
        /* The parser set the mode to DATA (IPv4) or NONE; triggers and NACKs refine it. */
        tbl_switch.apply();
        if (hdr.trigger.isValid()) {
            tbl_trigger.apply();
        } else if (hdr.sk_nack.isValid()) {
            tbl_nack.apply();
        }
        tbl_epoch.apply();

        tbl_hash_row0.apply();
#if DTA_RSK_CM_ROWS > 1
        tbl_hash_row1.apply();
#endif
#if DTA_RSK_CM_ROWS > 2
        tbl_hash_row2.apply();
#endif
#if DTA_RSK_CM_ROWS > 3
        tbl_hash_row3.apply();
#endif
        tbl_hash_hll.apply();
        tbl_tab0.apply(); tbl_tab1.apply(); tbl_tab2.apply(); tbl_tab3.apply();
        xor_halves();
        xor_all();
        tbl_rank.apply();

        set_bank();
        tbl_cm_cursor.apply();
        tbl_hll_cursor.apply();
        tbl_cm_idx.apply();
        tbl_hll_idx.apply();

        tbl_cm0_bank0.apply(); tbl_cm0_bank1.apply();
#if DTA_RSK_CM_ROWS > 1
        tbl_cm1_bank0.apply(); tbl_cm1_bank1.apply();
#endif
#if DTA_RSK_CM_ROWS > 2
        tbl_cm2_bank0.apply(); tbl_cm2_bank1.apply();
#endif
#if DTA_RSK_CM_ROWS > 3
        tbl_cm3_bank0.apply(); tbl_cm3_bank1.apply();
#endif
        tbl_hll_bank0.apply(); tbl_hll_bank1.apply();

        /* Every packet but a data packet is a report or dropped, so the report's addresses
         * can be written before knowing which; a cursor past the last column hands out COLS,
         * and then there is nothing left to send. */
        if (md.mode == MODE_DATA) {
            tbl_forward.apply();
        } else {
            tbl_report_dst.apply();
        }
        if (md.mode == MODE_EXPORT_CM && md.col[31:RSK_CM_LOG] == 0) {
            report_cm();
        } else if (md.mode == MODE_EXPORT_HLL && md.col[31:DTA_RSK_HLL_P] == 0) {
            report_hll();
        } else if (md.mode != MODE_DATA) {
            /* NACKs addressed to us, exhausted or ignored triggers, non-IPv4 frames. */
            drop();
        }
    }
}

control IgDeparser(packet_out pkt, inout headers_t hdr, in ig_md_t md,
                   in ingress_intrinsic_metadata_for_deparser_t ig_dprsr_md) {
    Checksum() ipv4_csum;
    apply {
        hdr.ipv4.checksum = ipv4_csum.update({
            hdr.ipv4.version, hdr.ipv4.ihl, hdr.ipv4.tos, hdr.ipv4.total_len, hdr.ipv4.ident,
            hdr.ipv4.flags, hdr.ipv4.frag_offset, hdr.ipv4.ttl, hdr.ipv4.protocol,
            hdr.ipv4.src, hdr.ipv4.dst });
        pkt.emit(hdr.ethernet);
        pkt.emit(hdr.trigger);
        pkt.emit(hdr.ipv4);
        pkt.emit(hdr.ports);
        pkt.emit(hdr.udp_rest);
        pkt.emit(hdr.sk_nack);
        pkt.emit(hdr.udp);
        pkt.emit(hdr.sk);
        pkt.emit(hdr.cm0);
        pkt.emit(hdr.cm1);
        pkt.emit(hdr.cm2);
        pkt.emit(hdr.cm3);
        pkt.emit(hdr.hll);
    }
}

/* Egress passes every packet through unchanged. */
parser EgParser(packet_in pkt, out headers_t hdr, out eg_md_t md,
                out egress_intrinsic_metadata_t eg_intr_md) {
    state start { pkt.extract(eg_intr_md); transition accept; }
}

control Egress(inout headers_t hdr, inout eg_md_t md,
               in egress_intrinsic_metadata_t eg_intr_md,
               in egress_intrinsic_metadata_from_parser_t eg_prsr_md,
               inout egress_intrinsic_metadata_for_deparser_t eg_dprsr_md,
               inout egress_intrinsic_metadata_for_output_port_t eg_oport_md) {
    apply { }
}

control EgDeparser(packet_out pkt, inout headers_t hdr, in eg_md_t md,
                   in egress_intrinsic_metadata_for_deparser_t eg_dprsr_md) {
    apply { pkt.emit(hdr); }
}

Pipeline(IgParser(), Ingress(), IgDeparser(), EgParser(), Egress(), EgDeparser()) pipe;
Switch(pipe) main;
